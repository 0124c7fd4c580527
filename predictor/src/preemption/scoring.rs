//! Published failure probabilities scored against what happened.
//!
//! For every task placed on a preemptible VM jobcast publishes the
//! probability that the VM is preempted before the task ends
//! ([`risk::score`](super::risk::score)), at placement and again at each
//! refresh age of the VM (the engine's `risk.refresh_ages_h`), for the work
//! the task has left. [`forecasts_on`] makes the forecasts jobcast would
//! publish for tasks run back to back on one measured VM; [`reliability`]
//! scores them.
//!
//! Measured VMs give censored outcomes: a VM its user stopped before the
//! task would have ended says nothing about whether the task would have
//! failed, and dropping those forecasts skews the rates (stops are early,
//! so the long tasks of young VMs would go first). Inverse probability of
//! censoring weighting (Graf et al., 1999) keeps the rates unbiased: a
//! forecast whose outcome is seen counts `Ĝ(a) / Ĝ(u)`, the inverse of the
//! probability that its VM was still under observation at `u`, when the
//! outcome became known, given it was at the forecast's age `a`; `Ĝ` is the
//! Kaplan–Meier curve of the stops, in which preemptions are the censored
//! observations ([`censoring_curve`]). The Brier score and each bin's
//! observed rate are weighted means.

use super::fit::LifetimeRecord;
use super::kaplan_meier::{KaplanMeier, Observation};
use super::lifetime::Lifetime;
use super::risk::{RiskConfig, RuntimeEstimate, score};
use serde::{Deserialize, Serialize};

/// One published failure probability: for a task at VM age `age_h` with
/// work until age `end_h`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Forecast {
    pub age_h: f64,
    pub end_h: f64,
    /// P(the VM is preempted before `end_h` | alive at `age_h`).
    pub p: f64,
}

/// What happened to a forecast's task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Outcome {
    /// The VM was preempted before the task's end.
    Failed,
    /// The VM was up at the task's end.
    Survived,
    /// The VM's user stopped it before the task's end: unknown.
    Censored,
}

impl Outcome {
    /// The outcome of a task running until VM age `end_h` on `vm`.
    pub fn of(vm: &LifetimeRecord, end_h: f64) -> Outcome {
        if vm.lifetime_h >= end_h {
            Outcome::Survived
        } else if vm.preempted {
            Outcome::Failed
        } else {
            Outcome::Censored
        }
    }
}

/// The forecasts jobcast publishes for tasks run back to back on `vm` from
/// its launch, each lasting the next of `runtimes_h` (hours, known): one at
/// each task's start, and one at each of `refresh_ages_h` the VM reaches
/// while the task runs, for the work left. Tasks start while the VM is up;
/// a refresh is published only while it is. `model` is the lifetime model
/// jobcast holds for the VM.
pub fn forecasts_on<L: Lifetime + ?Sized>(
    vm: &LifetimeRecord,
    model: &L,
    runtimes_h: &mut impl Iterator<Item = f64>,
    refresh_ages_h: &[f64],
) -> Vec<Forecast> {
    let config = RiskConfig::default();
    let forecast = |age_h: f64, end_h: f64| {
        let runtime = RuntimeEstimate {
            mean_h: end_h - age_h,
            cv: 0.0,
        };
        score(model, age_h, runtime, &config, None)
            .ok()
            .map(|s| Forecast {
                age_h,
                end_h,
                p: s.this_vm.preemption_probability,
            })
    };
    let mut out = Vec::new();
    let mut start = 0.0;
    while start < vm.lifetime_h {
        let Some(runtime) = runtimes_h.next().filter(|r| *r > 0.0) else {
            break;
        };
        let end = start + runtime;
        out.extend(forecast(start, end));
        for &age in refresh_ages_h {
            if start < age && age < end.min(vm.lifetime_h) {
                out.extend(forecast(age, end));
            }
        }
        start = end;
    }
    out
}

/// `Ĝ`: the Kaplan–Meier curve of the user stops of `vms`, in which the
/// preemptions are censored observations.
pub fn censoring_curve(vms: &[LifetimeRecord]) -> KaplanMeier {
    let observations: Vec<Observation> = vms
        .iter()
        .map(|vm| Observation {
            time_h: vm.lifetime_h,
            event: !vm.preempted,
        })
        .collect();
    KaplanMeier::new(&observations).expect("measured lifetimes are finite and non-negative")
}

/// The weight of a forecast whose outcome is seen: `Ĝ(a) / Ĝ(u⁻)` for a
/// failure at `u` (the VM had to be observed up to its preemption), and
/// `Ĝ(a) / Ĝ(end)` for a survival; `None` for a censored outcome, or where
/// `Ĝ` says nothing.
pub fn weight(censoring: &KaplanMeier, vm: &LifetimeRecord, forecast: &Forecast) -> Option<f64> {
    let seen_h = match Outcome::of(vm, forecast.end_h) {
        Outcome::Censored => return None,
        Outcome::Failed => vm.lifetime_h.next_down(),
        Outcome::Survived => forecast.end_h,
    };
    ipcw(censoring, forecast.age_h, seen_h)
}

/// `Ĝ(a) / Ĝ(u)`: the weight of an outcome seen at VM age `seen_h` of a
/// forecast made at `age_h`, the inverse of the chance that the VM was
/// still watched then; `None` where `Ĝ` says nothing.
pub fn ipcw(censoring: &KaplanMeier, age_h: f64, seen_h: f64) -> Option<f64> {
    let w = censoring.survival(age_h) / censoring.survival(seen_h);
    (w.is_finite() && w > 0.0).then_some(w)
}

/// One bin of the reliability diagram: forecasts of similar probability.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReliabilityBin {
    pub forecasts: usize,
    /// The bin's range of forecast probabilities.
    pub p_min: f64,
    pub p_max: f64,
    /// The weighted mean forecast.
    pub mean_p: f64,
    /// The weighted share that failed.
    pub observed: f64,
    /// `|mean_p − observed|`, in percentage points.
    pub gap_pts: f64,
}

/// Forecasts scored against outcomes ([`reliability`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reliability {
    /// Forecasts made.
    pub forecasts: usize,
    /// Of them, with a censored outcome (weight 0).
    pub censored: usize,
    /// Of the rest, failed.
    pub failed: usize,
    /// The weighted mean of `(outcome − p)²`; 0 is perfect.
    pub brier: f64,
    /// The Brier score of always forecasting the observed failure rate.
    pub brier_reference: f64,
    /// `1 − brier / brier_reference`: the share of the reference's error
    /// the forecasts remove.
    pub brier_skill: f64,
    /// Equal-count bins of the seen forecasts, by probability.
    pub bins: Vec<ReliabilityBin>,
    /// The largest bin's gap, in percentage points.
    pub max_gap_pts: f64,
}

/// Score `forecasts` of tasks on the VMs they were made for, weighted by
/// `censoring` (see the [module docs](self)), in `bins` equal-count bins.
pub fn reliability(
    forecasts: &[(Forecast, &LifetimeRecord)],
    censoring: &KaplanMeier,
    bins: usize,
) -> Reliability {
    // (p, outcome, weight) of every forecast whose outcome is seen.
    let mut seen: Vec<(f64, f64, f64)> = forecasts
        .iter()
        .filter_map(|(f, vm)| {
            let w = weight(censoring, vm, f)?;
            let failed = Outcome::of(vm, f.end_h) == Outcome::Failed;
            Some((f.p, f64::from(u8::from(failed)), w))
        })
        .collect();
    seen.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total_weight: f64 = seen.iter().map(|s| s.2).sum();
    let weighted = |f: &dyn Fn(&(f64, f64, f64)) -> f64, of: &[(f64, f64, f64)]| {
        let w: f64 = of.iter().map(|s| s.2).sum();
        of.iter().map(|s| s.2 * f(s)).sum::<f64>() / w
    };
    let base_rate = weighted(&|s| s.1, &seen);
    let brier = weighted(&|s| (s.1 - s.0).powi(2), &seen);
    let brier_reference = weighted(&|s| (s.1 - base_rate).powi(2), &seen);
    let bins = bins.max(1).min(seen.len().max(1));
    let binned: Vec<ReliabilityBin> = (0..bins)
        .map(|k| &seen[k * seen.len() / bins..(k + 1) * seen.len() / bins])
        .filter(|bin| !bin.is_empty())
        .map(|bin| {
            let (mean_p, observed) = (weighted(&|s| s.0, bin), weighted(&|s| s.1, bin));
            ReliabilityBin {
                forecasts: bin.len(),
                p_min: bin[0].0,
                p_max: bin[bin.len() - 1].0,
                mean_p,
                observed,
                gap_pts: 100.0 * (mean_p - observed).abs(),
            }
        })
        .collect();
    debug_assert!(total_weight > 0.0 || seen.is_empty());
    Reliability {
        forecasts: forecasts.len(),
        censored: forecasts.len() - seen.len(),
        failed: seen.iter().filter(|s| s.1 > 0.0).count(),
        brier,
        brier_reference,
        brier_skill: 1.0 - brier / brier_reference,
        max_gap_pts: binned.iter().map(|b| b.gap_pts).fold(0.0, f64::max),
        bins: binned,
    }
}

#[cfg(test)]
mod tests {
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    use super::*;
    use crate::preemption::Bathtub;
    use crate::preemption::running_time::{LifetimeDraws, preemption_probability};

    fn vm(lifetime_h: f64, preempted: bool) -> LifetimeRecord {
        LifetimeRecord {
            lifetime_h,
            preempted,
            vm_type: "t".into(),
            zone: "z".into(),
            launch_time_us: 0,
        }
    }

    /// VMs whose lifetimes follow `truth`, stopped by their users at
    /// exponential times of mean `stop_mean_h` (independent of the
    /// lifetime, as censoring weighting assumes).
    fn measured(truth: &Bathtub, n: usize, stop_mean_h: f64, seed: u64) -> Vec<LifetimeRecord> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        (0..n)
            .map(|_| {
                let life = truth.draw_given_alive(0.0, &mut rng);
                let stop = -stop_mean_h * (1.0 - rng.random::<f64>()).ln();
                if stop < life {
                    vm(stop, false)
                } else {
                    vm(life, true)
                }
            })
            .collect()
    }

    fn scored(model: &Bathtub, vms: &[LifetimeRecord], seed: u64) -> Reliability {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut runtimes = std::iter::repeat_with(move || 0.1 * 120f64.powf(rng.random::<f64>()));
        let forecasts: Vec<(Forecast, &LifetimeRecord)> = vms
            .iter()
            .flat_map(|v| {
                forecasts_on(v, model, &mut runtimes, &[3.0, 18.0, 22.0, 23.5])
                    .into_iter()
                    .map(move |f| (f, v))
            })
            .collect();
        reliability(&forecasts, &censoring_curve(vms), 10)
    }

    /// Forecasts by the model the lifetimes follow are calibrated, under
    /// heavy censoring; a model with the wrong shape is not, and its Brier
    /// score is worse.
    #[test]
    fn the_true_model_is_calibrated_under_censoring_and_a_wrong_one_is_not() {
        let truth = Bathtub::default();
        let vms = measured(&truth, 6_000, 12.0, 7);
        let censored = vms.iter().filter(|v| !v.preempted).count();
        assert!(censored > 2_000, "{censored}");
        let right = scored(&truth, &vms, 8);
        assert!(right.censored > 0 && right.failed > 0, "{right:?}");
        assert!(right.max_gap_pts < 3.0, "{right:?}");
        assert!(right.brier_skill > 0.0, "{right:?}");
        // Early preemptions far rarer, a later wave: the wrong shape.
        let wrong = Bathtub::new(0.05, 1.0, 0.8, 16.0, 24.0).unwrap();
        let off = scored(&wrong, &vms, 8);
        assert!(off.max_gap_pts > 10.0, "{off:?}");
        assert!(off.brier > right.brier, "{off:?} {right:?}");
    }

    /// A seen outcome counts the inverse of its chance to be seen, from
    /// the forecast's age on.
    #[test]
    fn a_survival_counts_the_inverse_of_its_chance_to_be_seen() {
        let vms = [vm(1.0, false), vm(3.0, false), vm(5.0, true), vm(8.0, true)];
        let g = censoring_curve(&vms);
        // Stops at 1 h (1 of 4) and 3 h (1 of 3 left): Ĝ = 3/4, then 1/2.
        let f = Forecast {
            age_h: 0.0,
            end_h: 4.0,
            p: 0.5,
        };
        assert_eq!(weight(&g, &vms[0], &f), None);
        assert_eq!(weight(&g, &vms[2], &f), Some(2.0));
        // A failure at 5 h was seen with probability Ĝ(5⁻) = 1/2 too.
        let long = Forecast { end_h: 6.0, ..f };
        assert_eq!(weight(&g, &vms[2], &long), Some(2.0));
        assert_eq!(Outcome::of(&vms[2], 6.0), Outcome::Failed);
        // From age 2, only the stop at 3 h lies ahead: Ĝ(2)/Ĝ(4) = 3/2.
        let later = Forecast { age_h: 2.0, ..f };
        assert_eq!(weight(&g, &vms[3], &later), Some(1.5));
    }

    #[test]
    fn forecasts_follow_the_tasks_and_refresh_while_the_vm_is_up() {
        let model = Bathtub::default();
        let mut runtimes = [2.0, 20.0, 5.0].into_iter();
        let v = vm(19.0, true);
        let f = forecasts_on(&v, &model, &mut runtimes, &[3.0, 18.0, 22.0]);
        let ages: Vec<(f64, f64)> = f.iter().map(|f| (f.age_h, f.end_h)).collect();
        // Task 1 at 0–2 h; task 2 from 2 h to 22 h, refreshed at 3 h and
        // 18 h but not at 22 h (the VM is gone at 19 h); no task 3.
        assert_eq!(ages, [(0.0, 2.0), (2.0, 22.0), (3.0, 22.0), (18.0, 22.0)]);
        // Each is P(s, T) for the work left, a known runtime.
        for f in &f {
            let want = preemption_probability(&model, f.age_h, f.end_h - f.age_h);
            assert!((f.p - want).abs() < 1e-12, "{f:?}: {want}");
        }
    }
}
