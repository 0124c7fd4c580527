//! Checkpoint schedules for jobs on transient VMs, by dynamic programming
//! over (remaining work, VM age) (the paper's §4.3), and the Young–Daly
//! periodic baseline evaluated under the same model.
//!
//! The paper's Eqs. 9–13 have typos; jobcast uses the consistent reading of
//! issue #4. Time is discretised in steps of `Δ` hours; the checkpoint cost
//! `δ` is a whole number of steps. From state `(w, a)` (`w` steps of work
//! left, VM of age `a`) the job runs a segment of `i` work steps and then
//! checkpoints, `d = i·Δ + δ` hours in all (every segment, the last one
//! included, pays `δ`):
//!
//! ```text
//! M(w, a, i) = (1 − p)·(d + M*(w − i, a + d)) + ℓ + p·M*(w, 0)
//! M*(w, a)   = min_{1 ≤ i ≤ w} M(w, a, i),     M*(0, a) = 0
//! ```
//!
//! - `p = P(a, d) = (S(a) − S(a + d)) / S(a)`: the failure probability
//!   conditional on the VM having survived to the segment start;
//! - `ℓ = E[(X − a)·1{a < X ≤ a + d} | X > a]`: the time lost, measured from
//!   the segment start (preemption probability included);
//! - after a preemption the job resumes from its last checkpoint on a fresh
//!   VM of age 0, hence `M*(w, 0)` on the right.
//!
//! `M*(w, 0)` appears on both sides: it is the fixed point `x = Φ(x)` of
//! `Φ(x) = min_i (c_i + p_i·x)`, where `c_i` collects the terms known from
//! rows `w' < w`. Value iteration `x ← Φ(x)` converges to it (each `p_i < 1`
//! makes `Φ` a contraction); jobcast takes the limit directly, since for a
//! minimum of lines the fixed point is `min_i c_i / (1 − p_i)` (the best
//! "always choose `i` at age 0" renewal), exact and in one pass. Rows are
//! then filled for `w = 1, 2, …`, each from smaller rows and its own `M*(w, 0)`.
//!
//! A [`CheckpointTable`] holds `M*` and the best first segment for every
//! reachable state of one parameter set (model, `δ`, `Δ`, longest job,
//! oldest start age), so looking up an expected makespan is O(1) and a
//! schedule costs one step per checkpoint. Building it is
//! O(W²·A) for `W` work steps and `A` ages (a 5 h job at one-minute steps:
//! ~10⁸ cheap operations); build once per parameter set and share it.
//!
//! Young–Daly (`τ = √(2·δ·MTTF)`) checkpoints every `τ` regardless of the
//! VM's age: [`CheckpointTable::build`] with [`SegmentPolicy::Fixed`]
//! evaluates that schedule under the same recurrence, so the two expected
//! makespans compare like for like.

use serde::{Deserialize, Serialize};

use super::lifetime::Lifetime;

/// The Young–Daly checkpoint interval `τ = √(2·δ·MTTF)` (same unit as the
/// inputs), optimal for memoryless failures when `δ ≪ MTTF`.
pub fn young_daly_interval(delta: f64, mttf: f64) -> f64 {
    (2.0 * delta * mttf).sqrt()
}

/// Which segment lengths the table may choose.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SegmentPolicy {
    /// Minimise the expected makespan (the DP).
    Optimal,
    /// Always `interval_h` of work per segment (the last one shorter):
    /// periodic checkpointing, e.g. Young–Daly.
    Fixed { interval_h: f64 },
}

/// The parameter set a [`CheckpointTable`] is built for.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CheckpointSpec {
    /// Checkpoint cost `δ`, hours (≥ 0).
    pub delta_h: f64,
    /// Upper bound on the grid step `Δ`, hours; the step used divides `δ`
    /// exactly (see [`CheckpointSpec::step_h`]).
    pub max_step_h: f64,
    /// Longest job the table answers for, hours.
    pub max_job_h: f64,
    /// Oldest VM age at job start the table answers for, hours.
    pub max_start_age_h: f64,
}

/// An invalid [`CheckpointSpec`] or a lookup outside the table.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint spec `{field}` must be {requirement}, got {value}")]
    InvalidSpec {
        field: &'static str,
        value: f64,
        requirement: &'static str,
    },
    #[error("{what} {value} h is outside the table (0 to {max} h)")]
    OutOfTable {
        what: &'static str,
        value: f64,
        max: f64,
    },
}

impl CheckpointSpec {
    fn validate(&self) -> Result<(), CheckpointError> {
        let check = |field, value: f64, ok: bool, requirement| {
            if ok {
                Ok(())
            } else {
                Err(CheckpointError::InvalidSpec {
                    field,
                    value,
                    requirement,
                })
            }
        };
        check(
            "delta_h",
            self.delta_h,
            self.delta_h.is_finite() && self.delta_h >= 0.0,
            "finite and ≥ 0",
        )?;
        check(
            "max_step_h",
            self.max_step_h,
            self.max_step_h.is_finite() && self.max_step_h > 0.0,
            "finite and > 0",
        )?;
        check(
            "max_job_h",
            self.max_job_h,
            self.max_job_h.is_finite() && self.max_job_h > 0.0,
            "finite and > 0",
        )?;
        check(
            "max_start_age_h",
            self.max_start_age_h,
            self.max_start_age_h.is_finite() && self.max_start_age_h >= 0.0,
            "finite and ≥ 0",
        )?;
        let steps = self.max_job_h / self.step_h();
        check(
            "max_job_h",
            self.max_job_h,
            steps <= f64::from(MAX_WORK_STEPS),
            "at most 1536 grid steps (raise max_step_h)",
        )
    }

    /// The grid step `Δ`: the largest `δ / k` (`k` a whole number) not above
    /// `max_step_h`, so that checkpoints end on the grid; `max_step_h`
    /// itself when `δ = 0`.
    pub fn step_h(&self) -> f64 {
        if self.delta_h > 0.0 {
            self.delta_h / (self.delta_h / self.max_step_h).ceil()
        } else {
            self.max_step_h
        }
    }
}

/// Beyond this many work steps a table takes tens of seconds and hundreds
/// of MB to build (24 h of one-minute steps is 1440).
const MAX_WORK_STEPS: u32 = 1536;

/// A checkpoint schedule and its expected makespan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Work between consecutive checkpoints, hours, in order (sums to the
    /// job length as rounded to the grid).
    pub intervals_h: Vec<f64>,
    /// Expected makespan: work, checkpoint costs and expected recomputation
    /// (including restarts on fresh VMs), hours.
    pub expected_makespan_h: f64,
}

/// The precomputed DP (or fixed-interval evaluation) for one parameter set;
/// see the [module docs](self).
#[derive(Debug, Clone)]
pub struct CheckpointTable {
    spec: CheckpointSpec,
    step_h: f64,
    delta_steps: usize,
    /// `offsets[w]` indexes row `w` in `makespan`/`choice`; row `w` holds
    /// ages `0..=rows[w]` (in steps).
    offsets: Vec<usize>,
    rows: Vec<usize>,
    /// Ages from this step on are past the deadline `L` (no VM is alive).
    dead_from: usize,
    makespan: Vec<f64>,
    /// Work steps of the best first segment (0 only for `w = 0`).
    choice: Vec<u32>,
}

impl CheckpointTable {
    /// Build the table for `model` under `spec`, choosing segments by `policy`.
    pub fn build<L: Lifetime + ?Sized>(
        model: &L,
        spec: CheckpointSpec,
        policy: SegmentPolicy,
    ) -> Result<Self, CheckpointError> {
        spec.validate()?;
        let step = spec.step_h();
        let delta_steps = (spec.delta_h / step).round() as usize;
        let work_steps = (spec.max_job_h / step).round().max(1.0) as usize;
        let start_steps = (spec.max_start_age_h / step).round() as usize;
        let fixed_steps = match policy {
            SegmentPolicy::Optimal => None,
            SegmentPolicy::Fixed { interval_h } => {
                if !(interval_h.is_finite() && interval_h > 0.0) {
                    return Err(CheckpointError::InvalidSpec {
                        field: "interval_h",
                        value: interval_h,
                        requirement: "finite and > 0",
                    });
                }
                Some(((interval_h / step).round() as usize).max(1))
            }
        };
        let limit = model.max_lifetime_h();
        let dead_from = if limit.is_finite() {
            (limit / step).ceil() as usize
        } else {
            usize::MAX
        };
        // Row w is reached at ages ≤ start + (W − w)·(1 + δ) steps: each
        // completed segment adds at least one work step and one checkpoint.
        // Ages at or past the deadline need no entry (the VM is gone).
        let rows: Vec<usize> = (0..=work_steps)
            .map(|w| {
                (start_steps + (work_steps - w) * (1 + delta_steps))
                    .min(dead_from.saturating_sub(1))
            })
            .collect();
        let mut offsets = Vec::with_capacity(rows.len());
        let mut total = 0;
        for &r in &rows {
            offsets.push(total);
            total += r + 1;
        }
        let mut table = CheckpointTable {
            spec,
            step_h: step,
            delta_steps,
            offsets,
            rows,
            dead_from,
            makespan: vec![0.0; total],
            choice: vec![0; total],
        };
        let segments = SegmentOdds::new(model, step, delta_steps, work_steps, &table.rows);
        for w in 1..=work_steps {
            let choices = match fixed_steps {
                None => 1..=w,
                Some(k) => k.min(w)..=k.min(w),
            };
            // Age 0 first: the fixed point every other age of this row
            // restarts into.
            // If no segment can ever finish from a fresh VM the makespan is
            // infinite; the first choice still gives the walk a schedule.
            let mut restart = f64::INFINITY;
            let mut restart_choice = *choices.start();
            for i in choices.clone() {
                let (p, lost) = segments.get(0, i + delta_steps);
                if p >= 1.0 {
                    continue;
                }
                let known = (1.0 - p) * table.success(w - i, 0, i + delta_steps) + lost;
                let candidate = known / (1.0 - p);
                if candidate < restart {
                    (restart, restart_choice) = (candidate, i);
                }
            }
            let base = table.offsets[w];
            table.makespan[base] = restart;
            table.choice[base] = restart_choice as u32;
            for a in 1..=table.rows[w] {
                let mut best = f64::INFINITY;
                let mut best_choice = *choices.start();
                for i in choices.clone() {
                    let d = i + delta_steps;
                    let (p, lost) = segments.get(a, d);
                    let mut value = lost;
                    if p < 1.0 {
                        value += (1.0 - p) * table.success(w - i, a, d);
                    }
                    if p > 0.0 {
                        value += p * restart;
                    }
                    if value < best {
                        (best, best_choice) = (value, i);
                    }
                }
                table.makespan[base + a] = best;
                table.choice[base + a] = best_choice as u32;
            }
        }
        Ok(table)
    }

    /// `d + M*(w', a + d)`: a successful segment of `duration` steps from
    /// age `age`, then the optimum for the `remaining` work from where it ends.
    fn success(&self, remaining: usize, age: usize, duration: usize) -> f64 {
        duration as f64 * self.step_h + self.value(remaining, age + duration)
    }

    /// The parameter set the table was built for.
    pub fn spec(&self) -> &CheckpointSpec {
        &self.spec
    }

    /// The grid step `Δ`, hours.
    pub fn step_h(&self) -> f64 {
        self.step_h
    }

    fn index(&self, job_h: f64, age_h: f64) -> Result<(usize, usize), CheckpointError> {
        let work_steps = self.rows.len() - 1;
        let w = (job_h / self.step_h).round();
        if !(w >= 0.0 && w as usize <= work_steps) {
            return Err(CheckpointError::OutOfTable {
                what: "job length",
                value: job_h,
                max: work_steps as f64 * self.step_h,
            });
        }
        let a = (age_h / self.step_h).round();
        let start_steps = (self.spec.max_start_age_h / self.step_h).round();
        if !(a >= 0.0 && a <= start_steps) {
            return Err(CheckpointError::OutOfTable {
                what: "VM age",
                value: age_h,
                max: self.spec.max_start_age_h,
            });
        }
        Ok((w as usize, a as usize))
    }

    /// `M*(w, a)` for a state in the table; ages past the deadline restart.
    fn value(&self, w: usize, a: usize) -> f64 {
        if w == 0 {
            0.0
        } else if a >= self.dead_from {
            self.makespan[self.offsets[w]]
        } else {
            self.makespan[self.offsets[w] + a]
        }
    }

    /// The expected makespan (hours) of a job of `job_h` hours started on a
    /// VM of age `age_h`, both rounded to the grid. O(1).
    pub fn expected_makespan_h(&self, job_h: f64, age_h: f64) -> Result<f64, CheckpointError> {
        let (w, a) = self.index(job_h, age_h)?;
        Ok(self.value(w, a))
    }

    /// The checkpoint schedule of a job of `job_h` hours started on a VM of
    /// age `age_h`, as long as no preemption occurs (after one, ask again for
    /// the remaining work at age 0). A schedule that runs into the deadline
    /// continues from age 0, as the job would.
    pub fn schedule(&self, job_h: f64, age_h: f64) -> Result<Schedule, CheckpointError> {
        let (mut w, mut a) = self.index(job_h, age_h)?;
        let expected_makespan_h = self.value(w, a);
        let mut intervals_h = Vec::new();
        while w > 0 {
            if a >= self.dead_from {
                // The deadline took the VM: resume on a fresh one.
                a = 0;
            }
            let i = self.choice[self.offsets[w] + a] as usize;
            intervals_h.push(i as f64 * self.step_h);
            w -= i;
            a += i + self.delta_steps;
        }
        Ok(Schedule {
            intervals_h,
            expected_makespan_h,
        })
    }
}

/// `(p, ℓ)` for every segment start age and duration the DP can ask for,
/// computed once from the model.
struct SegmentOdds {
    /// Durations `1..=max_duration` steps per start age.
    max_duration: usize,
    odds: Vec<(f64, f64)>,
}

impl SegmentOdds {
    fn new<L: Lifetime + ?Sized>(
        model: &L,
        step: f64,
        delta_steps: usize,
        work_steps: usize,
        rows: &[usize],
    ) -> Self {
        let max_duration = work_steps + delta_steps;
        let ages = rows.iter().copied().max().unwrap_or(0) + 1;
        let mut odds = Vec::with_capacity(ages * max_duration);
        for a in 0..ages {
            let start = a as f64 * step;
            let alive = model.survival(start);
            for d in 1..=max_duration {
                let end = (a + d) as f64 * step;
                odds.push(if alive <= 0.0 {
                    (1.0, 0.0)
                } else {
                    (
                        ((alive - model.survival(end)) / alive).clamp(0.0, 1.0),
                        model.lost_work_moment(start, end) / alive,
                    )
                });
            }
        }
        SegmentOdds { max_duration, odds }
    }

    fn get(&self, age: usize, duration: usize) -> (f64, f64) {
        self.odds[age * self.max_duration + duration - 1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preemption::Bathtub;
    use crate::preemption::models::{Exponential, Uniform};
    use crate::preemption::running_time::expected_completion_h;

    fn spec(delta_h: f64, step_h: f64, job_h: f64, age_h: f64) -> CheckpointSpec {
        CheckpointSpec {
            delta_h,
            max_step_h: step_h,
            max_job_h: job_h,
            max_start_age_h: age_h,
        }
    }

    /// All ways to split `w` steps into segments, in order.
    fn compositions(w: usize) -> Vec<Vec<usize>> {
        (0..1u32 << (w - 1))
            .map(|mask| {
                let mut parts = vec![1];
                for bit in 0..w - 1 {
                    if mask & (1 << bit) != 0 {
                        parts.push(1);
                    } else {
                        *parts.last_mut().unwrap() += 1;
                    }
                }
                parts
            })
            .collect()
    }

    /// The expected makespan of following `plan` from `(w, age)` (in steps),
    /// where a failure with `r` steps left costs `restart[r]` more, summed
    /// along the path.
    fn plan_value<L: Lifetime>(
        model: &L,
        step: f64,
        delta: usize,
        plan: &[usize],
        age: usize,
        restart: &[f64],
    ) -> f64 {
        let (mut alive, mut total, mut a) = (1.0, 0.0, age);
        let mut left: usize = plan.iter().sum();
        for &i in plan {
            let (start, end) = (a as f64 * step, (a + i + delta) as f64 * step);
            let s = model.survival(start);
            let (p, lost) = if s <= 0.0 {
                (1.0, 0.0)
            } else {
                (
                    (s - model.survival(end)) / s,
                    model.lost_work_moment(start, end) / s,
                )
            };
            total += alive * ((1.0 - p) * (end - start) + lost + p * restart[left]);
            alive *= 1.0 - p;
            left -= i;
            a += i + delta;
        }
        total
    }

    /// Brute force: every combination of fixed plans (one composition per
    /// remaining work from a fresh VM, one from the start state), each
    /// evaluated by iterating its restart values to convergence.
    fn brute_force<L: Lifetime>(
        model: &L,
        step: f64,
        delta: usize,
        work: usize,
        age: usize,
    ) -> f64 {
        let per_w: Vec<Vec<Vec<usize>>> = (1..=work).map(compositions).collect();
        let mut best = f64::INFINITY;
        let mut pick = vec![0usize; work];
        loop {
            let mut restart = vec![0.0; work + 1];
            for _ in 0..10_000 {
                let next: Vec<f64> = (0..=work)
                    .map(|r| {
                        if r == 0 {
                            0.0
                        } else {
                            plan_value(model, step, delta, &per_w[r - 1][pick[r - 1]], 0, &restart)
                        }
                    })
                    .collect();
                let change = next
                    .iter()
                    .zip(&restart)
                    .map(|(x, y)| (x - y).abs())
                    .fold(0.0, f64::max);
                restart = next;
                if change < 1e-13 {
                    break;
                }
            }
            for plan in &per_w[work - 1] {
                best = best.min(plan_value(model, step, delta, plan, age, &restart));
            }
            // Next combination of fresh-VM plans (odometer).
            let mut k = 0;
            while k < work {
                pick[k] += 1;
                if pick[k] < per_w[k].len() {
                    break;
                }
                pick[k] = 0;
                k += 1;
            }
            if k == work {
                return best;
            }
        }
    }

    #[test]
    fn dp_matches_brute_force_on_small_grids() {
        let short_deadline = Bathtub::new(0.45, 0.5, 0.3, 3.5, 4.0).unwrap();
        // (step h, δ steps, work steps, start age steps)
        let grids = [
            (0.25, 1, 5, 0),
            (0.25, 1, 5, 3),
            (0.5, 2, 4, 1),
            (0.3, 0, 5, 2),
        ];
        for &(step, delta, work, age) in &grids {
            let sp = spec(
                delta as f64 * step,
                step,
                work as f64 * step,
                age as f64 * step,
            );
            let check = |name: &str, dp: f64, brute: f64| {
                assert!(
                    (dp - brute).abs() <= 1e-9 * brute,
                    "{name} grid {:?}: DP {dp} vs brute force {brute}",
                    (step, delta, work, age)
                );
            };
            let m = short_deadline;
            let t = CheckpointTable::build(&m, sp, SegmentPolicy::Optimal).unwrap();
            let dp = t
                .expected_makespan_h(work as f64 * step, age as f64 * step)
                .unwrap();
            check(
                "short-deadline bathtub",
                dp,
                brute_force(&m, step, delta, work, age),
            );
            let m = Uniform::new(3.0).unwrap();
            let t = CheckpointTable::build(&m, sp, SegmentPolicy::Optimal).unwrap();
            let dp = t
                .expected_makespan_h(work as f64 * step, age as f64 * step)
                .unwrap();
            check("uniform", dp, brute_force(&m, step, delta, work, age));
            let m = Bathtub::default();
            let t = CheckpointTable::build(&m, sp, SegmentPolicy::Optimal).unwrap();
            let dp = t
                .expected_makespan_h(work as f64 * step, age as f64 * step)
                .unwrap();
            check("bathtub", dp, brute_force(&m, step, delta, work, age));
        }
    }

    #[test]
    fn one_segment_without_cost_is_restart_from_scratch() {
        let m = Bathtub::default();
        for (job, age) in [(5.0, 0.0), (5.0, 12.0), (5.0, 20.0)] {
            let t = CheckpointTable::build(
                &m,
                spec(0.0, 0.25, job, age),
                SegmentPolicy::Fixed { interval_h: 100.0 },
            )
            .unwrap();
            let got = t.expected_makespan_h(job, age).unwrap();
            let want = expected_completion_h(&m, age, job);
            assert!(
                (got - want).abs() <= 1e-10 * want,
                "{job} h at {age} h: {got} vs {want}"
            );
            assert_eq!(t.schedule(job, age).unwrap().intervals_h, vec![job]);
        }
    }

    #[test]
    fn young_daly_formula() {
        // δ = 1 min, MTTF = 1 h: τ = √(2/60) h ≈ 10.95 min.
        let tau = young_daly_interval(1.0 / 60.0, 1.0);
        assert!((tau * 60.0 - 10.954_451_150_103_322).abs() < 1e-12);
        assert_eq!(young_daly_interval(1.0, 8.0), 4.0);
    }

    #[test]
    fn memoryless_optimum_is_near_young_daly_and_periodic() {
        // δ = 1 min, MTTF = 10 h: τ ≈ 34.6 min. For a long job the optimal
        // segments are equal (no age dependence) and close to τ.
        // Mean 10 h, no deadline.
        let m = Exponential::with_mttf(10.0, f64::INFINITY).unwrap();
        let delta = 1.0 / 60.0;
        let t = CheckpointTable::build(&m, spec(delta, delta, 6.0, 2.0), SegmentPolicy::Optimal)
            .unwrap();
        let s = t.schedule(6.0, 0.0).unwrap();
        let tau = young_daly_interval(delta, 10.0);
        let first = s.intervals_h[0];
        assert!((first - tau).abs() < 0.1 * tau, "{first} vs {tau}");
        let spread = s
            .intervals_h
            .iter()
            .fold(0.0_f64, |m, &x| m.max((x - first).abs()));
        assert!(spread <= 2.0 * delta + 1e-12, "{:?}", s.intervals_h);
        // Memoryless: the VM's age does not matter.
        let (young, old) = (
            t.expected_makespan_h(6.0, 0.0).unwrap(),
            t.expected_makespan_h(6.0, 2.0).unwrap(),
        );
        assert!((young - old).abs() < 1e-9 * young);
        // And the optimum is never worse than Young–Daly.
        let yd = CheckpointTable::build(
            &m,
            spec(delta, delta, 6.0, 0.0),
            SegmentPolicy::Fixed { interval_h: tau },
        )
        .unwrap();
        assert!(young <= yd.expected_makespan_h(6.0, 0.0).unwrap() + 1e-12);
    }

    #[test]
    fn bathtub_intervals_grow_as_the_hazard_falls() {
        let m = Bathtub::default();
        let delta = 1.0 / 60.0;
        let t = CheckpointTable::build(&m, spec(delta, delta, 5.0, 0.0), SegmentPolicy::Optimal)
            .unwrap();
        let s = t.schedule(5.0, 0.0).unwrap();
        assert!((s.intervals_h.iter().sum::<f64>() - 5.0).abs() < 1e-9);
        assert!(
            s.intervals_h.windows(2).all(|w| w[0] <= w[1] + 1e-12),
            "{:?}",
            s.intervals_h
        );
        assert!(s.intervals_h.len() >= 3, "{:?}", s.intervals_h);
        let no_checkpoints = expected_completion_h(&m, 0.0, 5.0);
        assert!(
            s.expected_makespan_h < no_checkpoints,
            "{s:?} vs {no_checkpoints}"
        );
        assert!(s.expected_makespan_h > 5.0 + s.intervals_h.len() as f64 * delta);
    }

    #[test]
    fn lookups_outside_the_table_and_bad_specs_are_errors() {
        let m = Bathtub::default();
        let t =
            CheckpointTable::build(&m, spec(0.1, 0.1, 1.0, 2.0), SegmentPolicy::Optimal).unwrap();
        assert!(matches!(
            t.expected_makespan_h(1.5, 0.0),
            Err(CheckpointError::OutOfTable { .. })
        ));
        assert!(matches!(
            t.schedule(1.0, 3.0),
            Err(CheckpointError::OutOfTable { .. })
        ));
        assert!(t.expected_makespan_h(0.0, 1.0).unwrap() == 0.0);
        for bad in [
            spec(-1.0, 0.1, 1.0, 0.0),
            spec(0.1, 0.0, 1.0, 0.0),
            spec(0.1, 0.1, f64::NAN, 0.0),
            spec(0.1, 0.1, 1.0, -1.0),
            spec(0.0, 1e-4, 24.0, 0.0),
        ] {
            assert!(
                matches!(
                    CheckpointTable::build(&m, bad, SegmentPolicy::Optimal),
                    Err(CheckpointError::InvalidSpec { .. })
                ),
                "{bad:?}"
            );
        }
        // δ = 2.5 min with steps of at most 1 min: Δ = 2.5/3 min.
        assert!((spec(2.5 / 60.0, 1.0 / 60.0, 1.0, 0.0).step_h() * 60.0 - 2.5 / 3.0).abs() < 1e-12);
    }
}
