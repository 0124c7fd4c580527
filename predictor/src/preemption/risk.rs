//! The preemption-risk score a scheduler receives for placing one task on
//! one transient VM.
//!
//! Inputs: the lifetime model of the VM's type and zone, the VM's age, and
//! the task's predicted runtime with its uncertainty ([`RuntimeEstimate`]:
//! a log-normal with the predicted mean and coefficient of variation, the
//! shape of #3's runtime errors). Every figure is an expectation over that
//! runtime distribution, so an uncertain long-ish task is scored by its
//! whole range rather than by its mean alone.
//!
//! Figures, for the VM as it is and for a fresh VM (age 0):
//! - `preemption_probability`: `E_R[P(s, R)]`, the task is preempted before
//!   it completes (its first attempt fails);
//! - `expected_lost_work_h`: `E_R[ℓ_s(R)]`, the work that attempt loses;
//! - `expected_completion_h`: the expected time to completion when every
//!   preemption restarts the task on a fresh VM
//!   ([`expected_completion_h`](super::running_time::expected_completion_h)),
//!   over the runtimes a transient VM can complete at all;
//! - `completable_probability`: the share of those runtimes (a run at least
//!   as long as the VM's maximum lifetime never completes without
//!   checkpoints). Without this split, a log-normal's far tail beyond 24 h
//!   would make every expected completion infinite; those runs still count
//!   as failures in `preemption_probability`.
//!
//! Recommendation ([`Recommendation`]), in order:
//! 1. the transient choice is the paper's reuse policy on expectations over
//!    the runtime: keep the VM iff `E_R[E[T_s]] ≤ E_R[E[T_0]]`, else a fresh VM;
//! 2. on-demand instead if even the better of the two transient options
//!    fails with probability above [`RiskConfig::failure_threshold`] (not
//!    applied with checkpointing, where a preemption only costs the work
//!    since the last checkpoint);
//! 3. on-demand instead if it is cheaper in expectation: an on-demand VM
//!    costs `r = on-demand price / transient price` times as much per hour
//!    and takes `E[R]` hours, the transient choice takes its expected
//!    completion (or, with checkpointing, its expected makespan) at price 1.
//!
//! With a [`CheckpointTable`] the score also carries the checkpoint schedule
//! for the mean runtime on the chosen transient VM.

use serde::{Deserialize, Serialize};

use super::checkpoint::{CheckpointError, CheckpointTable, Schedule};
use super::lifetime::{Lifetime, integrate};
use super::running_time::{
    expected_completion_h, expected_lost_work_h, expected_running_time_h, preemption_probability,
};

/// A predicted runtime: log-normal with mean `mean_h` and coefficient of
/// variation `cv` (standard deviation / mean; 0 for a point estimate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RuntimeEstimate {
    pub mean_h: f64,
    pub cv: f64,
}

/// Standard-normal range integrated over; the tails beyond ±8σ hold < 1e-15.
const Z_RANGE: f64 = 8.0;

impl RuntimeEstimate {
    /// The log-space parameters `(μ, σ)`: `σ² = ln(1 + cv²)`,
    /// `μ = ln(mean) − σ²/2`.
    pub fn log_params(&self) -> (f64, f64) {
        let var = self.cv.mul_add(self.cv, 1.0).ln();
        (self.mean_h.ln() - 0.5 * var, var.sqrt())
    }

    /// `E[h(R)]`. `breaks` are runtimes where `h` may jump (e.g. where the
    /// task would reach the VM's deadline); the integral is split there.
    fn expect(&self, h: impl Fn(f64) -> f64, breaks: &[f64]) -> f64 {
        if self.cv == 0.0 {
            return h(self.mean_h);
        }
        let (mu, sigma) = self.log_params();
        let weight = |z: f64| (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let mut cuts: Vec<f64> = breaks
            .iter()
            .filter(|&&r| r > 0.0)
            .map(|&r| (r.ln() - mu) / sigma)
            .filter(|z| z.abs() < Z_RANGE)
            .collect();
        cuts.push(-Z_RANGE);
        cuts.push(Z_RANGE);
        cuts.sort_by(f64::total_cmp);
        let total: f64 = cuts
            .windows(2)
            .map(|w| integrate(|z| h((mu + sigma * z).exp()) * weight(z), w[0], w[1]))
            .sum();
        // Renormalise the truncated Gaussian weight.
        total / integrate(weight, -Z_RANGE, Z_RANGE)
    }

    fn validate(&self) -> Result<(), RiskError> {
        if !(self.mean_h.is_finite() && self.mean_h > 0.0) {
            return Err(RiskError::Invalid {
                field: "runtime mean_h",
                value: self.mean_h,
            });
        }
        if !(self.cv.is_finite() && self.cv >= 0.0) {
            return Err(RiskError::Invalid {
                field: "runtime cv",
                value: self.cv,
            });
        }
        Ok(())
    }
}

/// The knobs of the recommendation rule (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RiskConfig {
    /// Use on-demand when even the better transient option fails with a
    /// higher probability than this.
    pub failure_threshold: f64,
    /// `r = on-demand price / transient price` (CloudCoaster's cost ratio).
    pub price_ratio: f64,
}

impl Default for RiskConfig {
    /// Threshold 0.5 (a coin flip), `r = 3` (CloudCoaster's typical ratio).
    fn default() -> Self {
        RiskConfig {
            failure_threshold: 0.5,
            price_ratio: 3.0,
        }
    }
}

/// An invalid input to [`score`].
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RiskError {
    #[error("`{field}` is out of range: {value}")]
    Invalid { field: &'static str, value: f64 },
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
}

/// Where the scheduler should run the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Recommendation {
    /// Run on the VM it was offered.
    Keep,
    /// Give this VM up and start the task on a newly launched one.
    FreshVm,
    /// Use a non-preemptible on-demand VM.
    OnDemand,
}

/// Why the recommendation is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    /// The reuse policy's choice stands.
    ReusePolicy,
    /// Both transient options fail too often.
    FailureThreshold,
    /// On-demand is cheaper in expectation at the given price ratio.
    Cost,
}

/// Risk figures of one transient option.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct OptionRisk {
    /// VM age at task start, hours.
    pub age_h: f64,
    pub preemption_probability: f64,
    pub expected_lost_work_h: f64,
    /// Over completable runtimes; `+∞` when none is.
    pub expected_completion_h: f64,
    pub completable_probability: f64,
}

/// The score of one task on one VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RiskScore {
    pub runtime: RuntimeEstimate,
    /// The VM as offered.
    pub this_vm: OptionRisk,
    /// A freshly launched VM of the same type and zone.
    pub fresh_vm: OptionRisk,
    pub recommendation: Recommendation,
    pub reason: Reason,
    /// Expected cost of the chosen transient option, in transient VM-hours.
    pub transient_cost: f64,
    /// Expected cost on demand, in transient VM-hours (`r·E[R]`).
    pub on_demand_cost: f64,
    /// The checkpoint schedule on the chosen transient VM for the mean
    /// runtime, when scored with a checkpoint table.
    pub checkpoints: Option<Schedule>,
}

/// Score a task with runtime `runtime` on a VM of age `age_h` whose lifetime
/// follows `model`; `checkpoints` (built for this model) adds the schedule
/// and makes the cost rule use the checkpointed makespan.
pub fn score<L: Lifetime + ?Sized>(
    model: &L,
    age_h: f64,
    runtime: RuntimeEstimate,
    config: &RiskConfig,
    checkpoints: Option<&CheckpointTable>,
) -> Result<RiskScore, RiskError> {
    runtime.validate()?;
    if !(age_h.is_finite() && age_h >= 0.0) {
        return Err(RiskError::Invalid {
            field: "age_h",
            value: age_h,
        });
    }
    if !(0.0..=1.0).contains(&config.failure_threshold) {
        return Err(RiskError::Invalid {
            field: "failure_threshold",
            value: config.failure_threshold,
        });
    }
    if !(config.price_ratio.is_finite() && config.price_ratio > 0.0) {
        return Err(RiskError::Invalid {
            field: "price_ratio",
            value: config.price_ratio,
        });
    }
    let limit = model.max_lifetime_h();
    let completable = runtime.expect(
        |r| f64::from(u8::from(expected_completion_h(model, 0.0, r).is_finite())),
        &[limit],
    );
    let option = |age: f64| {
        // P and ℓ jump where the task reaches the deadline.
        let breaks = [limit - age];
        OptionRisk {
            age_h: age,
            preemption_probability: runtime
                .expect(|r| preemption_probability(model, age, r), &breaks),
            expected_lost_work_h: runtime.expect(|r| expected_lost_work_h(model, age, r), &breaks),
            expected_completion_h: if completable > 0.0 {
                runtime.expect(
                    |r| {
                        let c = expected_completion_h(model, age, r);
                        if c.is_finite() { c } else { 0.0 }
                    },
                    &[limit - age, limit],
                ) / completable
            } else {
                f64::INFINITY
            },
            completable_probability: completable,
        }
    };
    let (this_vm, fresh_vm) = (option(age_h), option(0.0));
    let keep = runtime.expect(
        |r| expected_running_time_h(model, age_h, r),
        &[limit - age_h],
    ) <= runtime.expect(|r| expected_running_time_h(model, 0.0, r), &[limit]) + 1e-9;
    let (transient, chosen) = if keep {
        (Recommendation::Keep, this_vm)
    } else {
        (Recommendation::FreshVm, fresh_vm)
    };
    let schedule = checkpoints
        .map(|table| table.schedule(runtime.mean_h, chosen.age_h))
        .transpose()?;
    let transient_cost = schedule
        .as_ref()
        .map_or(chosen.expected_completion_h, |s| s.expected_makespan_h);
    let on_demand_cost = config.price_ratio * runtime.mean_h;
    let best_failure = this_vm
        .preemption_probability
        .min(fresh_vm.preemption_probability);
    let (recommendation, reason) = if schedule.is_none() && best_failure > config.failure_threshold
    {
        (Recommendation::OnDemand, Reason::FailureThreshold)
    } else if on_demand_cost < transient_cost {
        (Recommendation::OnDemand, Reason::Cost)
    } else {
        (transient, Reason::ReusePolicy)
    };
    Ok(RiskScore {
        runtime,
        this_vm,
        fresh_vm,
        recommendation,
        reason,
        transient_cost,
        on_demand_cost,
        checkpoints: schedule,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preemption::Bathtub;
    use crate::preemption::checkpoint::{CheckpointSpec, SegmentPolicy};

    fn point(mean_h: f64) -> RuntimeEstimate {
        RuntimeEstimate { mean_h, cv: 0.0 }
    }

    #[test]
    fn point_estimates_reproduce_the_running_time_figures() {
        let m = Bathtub::default();
        let s = score(&m, 10.0, point(3.0), &RiskConfig::default(), None).unwrap();
        assert_eq!(
            s.this_vm.preemption_probability,
            preemption_probability(&m, 10.0, 3.0)
        );
        assert_eq!(
            s.fresh_vm.preemption_probability,
            preemption_probability(&m, 0.0, 3.0)
        );
        assert_eq!(
            s.this_vm.expected_lost_work_h,
            expected_lost_work_h(&m, 10.0, 3.0)
        );
        assert_eq!(
            s.this_vm.expected_completion_h,
            expected_completion_h(&m, 10.0, 3.0)
        );
        assert_eq!(s.this_vm.completable_probability, 1.0);
        let never = score(&m, 0.0, point(30.0), &RiskConfig::default(), None).unwrap();
        assert_eq!(never.fresh_vm.completable_probability, 0.0);
        assert_eq!(never.fresh_vm.expected_completion_h, f64::INFINITY);
        assert_eq!(never.recommendation, Recommendation::OnDemand);
        // A stable mid-life VM is kept.
        assert_eq!(
            (s.recommendation, s.reason),
            (Recommendation::Keep, Reason::ReusePolicy)
        );
        assert_eq!(s.on_demand_cost, 9.0);
        assert_eq!(s.transient_cost, s.this_vm.expected_completion_h);
    }

    #[test]
    fn old_vms_are_given_up_and_very_long_tasks_go_on_demand() {
        let m = Bathtub::default();
        let config = RiskConfig::default();
        let s = score(&m, 20.0, point(6.0), &config, None).unwrap();
        assert_eq!(
            (s.recommendation, s.reason),
            (Recommendation::FreshVm, Reason::ReusePolicy)
        );
        assert_eq!(s.transient_cost, s.fresh_vm.expected_completion_h);
        // 23 h: a fresh VM fails with probability ~0.55 > 0.5.
        let s = score(&m, 0.0, point(23.0), &config, None).unwrap();
        assert!(s.fresh_vm.preemption_probability > 0.5);
        assert_eq!(
            (s.recommendation, s.reason),
            (Recommendation::OnDemand, Reason::FailureThreshold)
        );
        // Cheap on-demand (r = 1.05) wins on cost before the threshold does.
        let cheap = RiskConfig {
            price_ratio: 1.05,
            ..config
        };
        let s = score(&m, 0.0, point(6.0), &cheap, None).unwrap();
        assert!(s.fresh_vm.preemption_probability < 0.5);
        assert_eq!(
            (s.recommendation, s.reason),
            (Recommendation::OnDemand, Reason::Cost)
        );
        assert!(s.on_demand_cost < s.transient_cost);
    }

    #[test]
    fn runtime_uncertainty_is_integrated_over() {
        let m = Bathtub::default();
        let est = RuntimeEstimate {
            mean_h: 4.0,
            cv: 0.5,
        };
        let (mu, sigma) = est.log_params();
        assert!(((mu + 0.5 * sigma * sigma).exp() - 4.0).abs() < 1e-12);
        // The log-normal's mean through the same quadrature.
        assert!((est.expect(|r| r, &[]) - 4.0).abs() < 1e-9);
        // Brute-force expectation on a fine z grid (midpoint rule).
        let s = score(&m, 19.0, est, &RiskConfig::default(), None).unwrap();
        let n = 400_000;
        let (mut p, mut norm) = (0.0, 0.0);
        for i in 0..n {
            let z = -8.0 + 16.0 * (f64::from(i) + 0.5) / f64::from(n);
            let w = (-0.5 * z * z).exp();
            p += w * preemption_probability(&m, 19.0, (mu + sigma * z).exp());
            norm += w;
        }
        assert!((s.this_vm.preemption_probability - p / norm).abs() < 1e-6);
        // The far tail beyond 24 h cannot complete: a tiny share, kept out
        // of the completion time instead of making it infinite.
        let q = s.this_vm.completable_probability;
        // ln 24 sits (ln 24 − μ)/σ ≈ 4.03σ out: a tail of ≈ 2.8e-5.
        let z = (24f64.ln() - mu) / sigma;
        assert!((z - 4.03).abs() < 0.01, "{z}");
        assert!((2.5e-5..3.1e-5).contains(&(1.0 - q)), "{q}");
        assert!(s.this_vm.expected_completion_h.is_finite());
        assert!(s.fresh_vm.expected_completion_h > 4.0);
        // Uncertainty matters: some runs reach the deadline, so the average
        // failure probability differs from the point estimate's.
        let point_score = score(&m, 19.0, point(4.0), &RiskConfig::default(), None).unwrap();
        assert!(
            (s.this_vm.preemption_probability - point_score.this_vm.preemption_probability).abs()
                > 0.01
        );
    }

    #[test]
    fn checkpoint_table_adds_the_schedule_and_drives_the_cost() {
        let m = Bathtub::default();
        let table = CheckpointTable::build(
            &m,
            CheckpointSpec {
                delta_h: 0.1,
                max_step_h: 0.1,
                max_job_h: 23.0,
                max_start_age_h: 0.0,
            },
            SegmentPolicy::Optimal,
        )
        .unwrap();
        // Without checkpoints a 23 h task goes on-demand; with them a fresh VM is fine.
        let s = score(&m, 0.0, point(23.0), &RiskConfig::default(), Some(&table)).unwrap();
        let schedule = s.checkpoints.as_ref().unwrap();
        assert_eq!(s.transient_cost, schedule.expected_makespan_h);
        assert!(schedule.expected_makespan_h < 1.2 * 23.0, "{schedule:?}");
        assert_eq!(s.recommendation, Recommendation::Keep);
        // A VM age outside the table is an error, not a silent guess.
        assert!(matches!(
            score(&m, 5.0, point(3.0), &RiskConfig::default(), Some(&table)),
            Err(RiskError::Checkpoint(_))
        ));
    }

    #[test]
    fn invalid_inputs_are_rejected() {
        let m = Bathtub::default();
        let c = RiskConfig::default();
        let cv = |cv| RuntimeEstimate { mean_h: 1.0, cv };
        let cases = [
            ("age_h", -1.0, point(1.0), c),
            ("runtime mean_h", 1.0, point(0.0), c),
            ("runtime cv", 1.0, cv(-0.1), c),
            (
                "failure_threshold",
                1.0,
                point(1.0),
                RiskConfig {
                    failure_threshold: 1.5,
                    ..c
                },
            ),
            (
                "price_ratio",
                1.0,
                point(1.0),
                RiskConfig {
                    price_ratio: 0.0,
                    ..c
                },
            ),
        ];
        for (field, age, runtime, config) in cases {
            assert!(
                matches!(
                    score(&m, age, runtime, &config, None),
                    Err(RiskError::Invalid { field: f, .. }) if f == field
                ),
                "{field}"
            );
        }
        assert!(score(&m, 1.0, point(1.0), &c, None).is_ok());
    }
}
