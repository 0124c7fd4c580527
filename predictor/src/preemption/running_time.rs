//! What preemptions cost a job that does not checkpoint, and the VM reuse
//! policy built on it (the paper's §4.1–4.2 and §6.2.1).
//!
//! A job of length `T` (hours of work) starts on a VM of age `s`; `X` is the
//! VM's lifetime, distributed by any [`Lifetime`] model `G` (survival `S`).
//! A preemption at `X ∈ (s, s + T]` loses the work done so far, `X − s`.
//!
//! - Preemption probability: `P(s, T) = (S(s) − S(s + T)) / S(s)`, the
//!   issue's `(G(s+T) − G(s)) / (1 − G(s))`.
//! - Expected wasted work given one preemption (Eq. 5 generalised to age
//!   `s`): `E[W1] = E[X − s | s < X ≤ s + T]`.
//! - Expected running time, assuming (like the paper's Eq. 7) at most one
//!   preemption, after which the rerun succeeds:
//!
//!   ```text
//!   E[T_s] = T + (1 / S(s)) · ∫_(s, s+T] (t − s) dG(t)
//!   ```
//!
//!   The integral includes the point mass at the deadline `L` (a job that
//!   runs into it loses `L − s`). The paper's Eq. 8, `T + ∫_s^(s+T) t f(t) dt`,
//!   is kept as [`expected_running_time_eq8`] for comparison: it does not
//!   condition on the VM having survived to `s` (so it understates the risk
//!   of old VMs by the factor `S(s)`), it weights each preemption by the
//!   VM's absolute age `t` instead of the work lost `t − s` (so it overstates
//!   the loss of old VMs by up to `s` hours per preemption), and it ignores
//!   the deadline's point mass. At `s = 0` the two agree except for that mass.
//! - [`expected_completion_h`] drops the one-preemption assumption: after
//!   every preemption the job restarts from scratch on a fresh VM, so
//!   `C_s = (1 − P(s,T))·T + ℓ_s + P(s,T)·C_0` with
//!   `ℓ_s = E[(X − s)·1{s < X ≤ s+T} | X > s]`, and `C_0 = T + ℓ_0 / (1 − P(0,T))`.
//!   It is what the checkpoint DP gives for a single segment without a
//!   checkpoint cost, and what the risk score reports.
//!
//! Reuse policy (§4.2): run on the existing VM iff `E[T_s] ≤ E[T_0]`,
//! otherwise start a fresh VM. [`crossover_job_length_h`] is the shortest
//! job for which a VM of age `s` should be given up (the paper's `T*`), and
//! [`fresh_vm_age_h`] the youngest age at which a job of length `T` should go
//! to a fresh VM. [`reuse_monte_carlo`] checks the paper's claim that this
//! policy halves job failures against the memoryless policy (always reuse).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::lifetime::{Lifetime, integrate};

/// `P(s, T)`: the probability that a VM alive at age `s` is preempted before
/// a job of length `T` finishes. 1 when the VM cannot be alive at `s`
/// (`S(s) = 0`) and the job has work to do.
pub fn preemption_probability<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    if job_h <= 0.0 {
        return 0.0;
    }
    let alive = model.survival(age_h);
    if alive <= 0.0 {
        return 1.0;
    }
    ((alive - model.survival(age_h + job_h)) / alive).clamp(0.0, 1.0)
}

/// `ℓ_s = E[(X − s)·1{s < X ≤ s + T} | X > s]`: the expected work lost on
/// this VM, preemption probability included (0 when `S(s) = 0`: a VM gone
/// before the job starts loses no work).
pub fn expected_lost_work_h<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    let alive = model.survival(age_h);
    if alive <= 0.0 || job_h <= 0.0 {
        return 0.0;
    }
    model.lost_work_moment(age_h, age_h + job_h) / alive
}

/// `E[W1(T)]` at age `s`: the expected work lost given that the job is
/// preempted once, `E[X − s | s < X ≤ s + T]` (Eq. 5 for `s = 0`). 0 when a
/// preemption during the job is impossible.
pub fn expected_wasted_work_h<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    let p = preemption_probability(model, age_h, job_h);
    if p <= 0.0 {
        return 0.0;
    }
    expected_lost_work_h(model, age_h, job_h) / p
}

/// `E[T_s] = T + ℓ_s`: the expected running time of a job of length `T`
/// started at VM age `s`, with at most one preemption (the consistent form
/// of the paper's Eq. 8; see the [module docs](self)).
pub fn expected_running_time_h<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    job_h + expected_lost_work_h(model, age_h, job_h)
}

/// The paper's Eq. 8 as printed, `T + ∫_s^(s+T) t·f(t) dt` with `f` the
/// density of the continuous part; for comparison with
/// [`expected_running_time_h`] only.
pub fn expected_running_time_eq8<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    job_h + model.partial_expectation(age_h, age_h + job_h)
}

/// The expected completion time of a job of length `T` started at VM age
/// `s` that, after every preemption, restarts from scratch on a fresh VM
/// (no checkpoints). `+∞` when a fresh VM can never finish it
/// (`P(0, T) = 1`, e.g. `T ≥ L`).
pub fn expected_completion_h<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> f64 {
    if job_h <= 0.0 {
        return 0.0;
    }
    let p_fresh = preemption_probability(model, 0.0, job_h);
    let fresh = if p_fresh >= 1.0 {
        f64::INFINITY
    } else {
        job_h + expected_lost_work_h(model, 0.0, job_h) / (1.0 - p_fresh)
    };
    let p = preemption_probability(model, age_h, job_h);
    if p <= 0.0 {
        // Keeps 0·∞ out when a fresh VM could never finish but this one can.
        return job_h;
    }
    (1.0 - p) * job_h + expected_lost_work_h(model, age_h, job_h) + p * fresh
}

/// Ties within this many hours (~4 µs) keep the VM: at `s = 0` the two sides
/// are equal and round-off must not flip the decision.
const TIE_H: f64 = 1e-9;

/// The reuse decision for one job (§4.2), with the figures behind it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReuseDecision {
    /// Run on the existing VM (`E[T_s] ≤ E[T_0]`); otherwise start a fresh one.
    pub keep: bool,
    /// `E[T_s]` on the existing VM of age `s`, hours.
    pub existing_running_time_h: f64,
    /// `E[T_0]` on a fresh VM, hours.
    pub fresh_running_time_h: f64,
}

/// Decide whether a job of length `T` should run on the VM of age `s`.
pub fn reuse_decision<L: Lifetime + ?Sized>(model: &L, age_h: f64, job_h: f64) -> ReuseDecision {
    let existing = expected_running_time_h(model, age_h, job_h);
    let fresh = expected_running_time_h(model, 0.0, job_h);
    ReuseDecision {
        keep: existing <= fresh + TIE_H,
        existing_running_time_h: existing,
        fresh_running_time_h: fresh,
    }
}

/// What the reuse policy compares between the existing VM and a fresh one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReuseCriterion {
    /// The paper's rule: keep iff `E[T_s] ≤ E[T_0]` ([`reuse_decision`]).
    ExpectedRunningTime,
    /// Keep iff `P(s, T) ≤ P(0, T)`: minimises job failures instead of
    /// running time (what the paper's Fig. 7 measures).
    FailureProbability,
}

impl ReuseCriterion {
    /// Whether a job of length `T` stays on the VM of age `s`.
    pub fn keeps<L: Lifetime + ?Sized>(self, model: &L, age_h: f64, job_h: f64) -> bool {
        match self {
            ReuseCriterion::ExpectedRunningTime => reuse_decision(model, age_h, job_h).keep,
            ReuseCriterion::FailureProbability => {
                preemption_probability(model, age_h, job_h)
                    <= preemption_probability(model, 0.0, job_h) + TIE_PROBABILITY
            }
        }
    }
}

/// Probability ties (round-off at `s = 0`) keep the VM.
const TIE_PROBABILITY: f64 = 1e-12;

/// Grid step of the scans behind [`crossover_job_length_h`] and
/// [`fresh_vm_age_h`]: one minute, refined by bisection afterwards.
const SCAN_STEP_H: f64 = 1.0 / 60.0;

/// The smallest `x` in `(lo, hi]` where `switched(x)` holds, found on a
/// one-minute grid and refined by bisection to ~1e-9 h; `None` if it never
/// holds on the grid.
fn first_switch(switched: impl Fn(f64) -> bool, lo: f64, hi: f64) -> Option<f64> {
    let steps = ((hi - lo) / SCAN_STEP_H).ceil() as u64;
    let mut prev = lo;
    for i in 1..=steps {
        let x = (lo + i as f64 * SCAN_STEP_H).min(hi);
        if switched(x) {
            let (mut a, mut b) = (prev, x);
            while b - a > 1e-9 {
                let mid = 0.5 * (a + b);
                if switched(mid) {
                    b = mid;
                } else {
                    a = mid;
                }
            }
            return Some(b);
        }
        prev = x;
    }
    None
}

/// `T*(s)`: the shortest job length in `(0, max_job_h]` for which a fresh VM
/// beats the VM of age `s` (`E[T_s] > E[T_0]`), or `None` if the VM should be
/// kept for every length (always the case for memoryless lifetimes).
pub fn crossover_job_length_h<L: Lifetime + ?Sized>(
    model: &L,
    age_h: f64,
    max_job_h: f64,
) -> Option<f64> {
    first_switch(|t| !reuse_decision(model, age_h, t).keep, 0.0, max_job_h)
}

/// The youngest VM age in `(0, max_age_h]` at which a job of length `T`
/// should go to a fresh VM instead under `criterion`, or `None` if it never
/// should.
pub fn fresh_vm_age_h<L: Lifetime + ?Sized>(
    model: &L,
    criterion: ReuseCriterion,
    job_h: f64,
    max_age_h: f64,
) -> Option<f64> {
    first_switch(|s| !criterion.keeps(model, s, job_h), 0.0, max_age_h)
}

/// One job length in [`reuse_monte_carlo`]: job failure probabilities (the
/// first attempt is preempted) averaged over start ages uniform in
/// `[0, max_age)`, for the memoryless policy (always run on the existing
/// VM) and the model-driven reuse policy with the given criterion.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ReuseFailureRow {
    pub job_h: f64,
    /// Simulated failure rate of the memoryless policy.
    pub memoryless_failure: f64,
    /// Simulated failure rate of the reuse policy.
    pub policy_failure: f64,
    /// `memoryless_failure / policy_failure` (`+∞` if the policy never failed).
    pub reduction: f64,
    /// The same two rates by numerical integration over the start age.
    pub memoryless_failure_exact: f64,
    pub policy_failure_exact: f64,
}

/// Where a simulation's lifetimes come from: a fitted model (every
/// [`Lifetime`]), or the measured curve itself
/// ([`KaplanMeier`](super::kaplan_meier::KaplanMeier)), which has no density
/// for the policies to decide by but can be drawn from.
pub trait LifetimeDraws {
    /// `P(s, T)` under this distribution ([`preemption_probability`]).
    fn failure_probability(&self, age_h: f64, job_h: f64) -> f64;

    /// A lifetime drawn given survival to `age_h`.
    fn draw_given_alive(&self, age_h: f64, rng: &mut ChaCha8Rng) -> f64;
}

impl<L: Lifetime + ?Sized> LifetimeDraws for L {
    fn failure_probability(&self, age_h: f64, job_h: f64) -> f64 {
        preemption_probability(self, age_h, job_h)
    }

    fn draw_given_alive(&self, age_h: f64, rng: &mut ChaCha8Rng) -> f64 {
        sample_given_alive(self, age_h, rng)
    }
}

/// Monte Carlo check of the reuse policy (the paper's Fig. 7 and its "more
/// than 2×" claim). For each job length, `samples` jobs arrive at a VM whose
/// age is uniform in `[0, max_age_h)`; the VM's lifetime is drawn from
/// `truth` conditioned on having survived to that age. The memoryless
/// policy runs the job there; the reuse policy does too when `criterion`,
/// judging by `model`, keeps the VM, and otherwise on a fresh VM with a
/// fresh lifetime. Both policies see the same draws. `truth` is `model`
/// itself for the paper's check on its own fit, or the lifetimes measured
/// on VMs the model was not fitted to. Seeded, so repeatable. With
/// `samples = 0` only the exact columns are computed (the simulated ones
/// are NaN).
pub fn reuse_monte_carlo<L: Lifetime + ?Sized, T: LifetimeDraws + ?Sized>(
    model: &L,
    truth: &T,
    criterion: ReuseCriterion,
    job_lengths_h: &[f64],
    max_age_h: f64,
    samples: usize,
    seed: u64,
) -> Vec<ReuseFailureRow> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    job_lengths_h
        .iter()
        .map(|&job_h| {
            let fresh_failure = truth.failure_probability(0.0, job_h);
            let (mut memoryless_fails, mut policy_fails) = (0usize, 0usize);
            for _ in 0..samples {
                let age = rng.random::<f64>() * max_age_h;
                let lifetime = truth.draw_given_alive(age, &mut rng);
                let existing_fails = lifetime < age + job_h;
                memoryless_fails += usize::from(existing_fails);
                let fails = if criterion.keeps(model, age, job_h) {
                    existing_fails
                } else {
                    truth.draw_given_alive(0.0, &mut rng) < job_h
                };
                policy_fails += usize::from(fails);
            }
            let n = samples as f64;
            let (memoryless, policy) = (memoryless_fails as f64 / n, policy_fails as f64 / n);
            let average = |f: &dyn Fn(f64) -> f64| integrate(f, 0.0, max_age_h) / max_age_h;
            ReuseFailureRow {
                job_h,
                memoryless_failure: memoryless,
                policy_failure: policy,
                reduction: memoryless / policy,
                memoryless_failure_exact: average(&|s| truth.failure_probability(s, job_h)),
                policy_failure_exact: average(&|s| {
                    if criterion.keeps(model, s, job_h) {
                        truth.failure_probability(s, job_h)
                    } else {
                        fresh_failure
                    }
                }),
            }
        })
        .collect()
}

/// Draw a lifetime given survival to `age` by inverting the conditional CDF
/// `(G(x) − G(age)) / S(age)` with bisection (any [`Lifetime`] works; the
/// bracket doubles until it holds the target when there is no deadline).
fn sample_given_alive<L: Lifetime + ?Sized, R: Rng>(model: &L, age_h: f64, rng: &mut R) -> f64 {
    let alive = model.survival(age_h);
    if alive <= 0.0 {
        return age_h;
    }
    // Target survival: S(x) = u·S(age), u uniform in (0, 1].
    let target = (1.0 - rng.random::<f64>()) * alive;
    let limit = model.max_lifetime_h();
    let mut hi = if limit.is_finite() {
        limit
    } else {
        let mut hi = age_h + 1.0;
        while model.survival(hi) > target {
            hi = age_h + 2.0 * (hi - age_h);
        }
        hi
    };
    if model.survival(hi.next_down()) > target {
        // The draw falls in the point mass at the deadline.
        return hi;
    }
    let mut lo = age_h;
    while hi - lo > 1e-9 * hi.max(1.0) {
        let mid = 0.5 * (lo + hi);
        if model.survival(mid) > target {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preemption::Bathtub;
    use crate::preemption::models::{Exponential, Uniform};

    fn close(a: f64, b: f64, tol: f64) -> bool {
        (a - b).abs() <= tol * b.abs().max(1.0)
    }

    #[test]
    fn uniform_hand_cases() {
        let m = Uniform::new(24.0).unwrap();
        // P(s, T) = T / (24 − s); E[W1] = T/2; ℓ_s = T²/(2(24 − s)).
        assert!(close(preemption_probability(&m, 0.0, 6.0), 0.25, 1e-15));
        assert!(close(preemption_probability(&m, 12.0, 6.0), 0.5, 1e-15));
        assert_eq!(preemption_probability(&m, 20.0, 6.0), 1.0);
        assert!(close(expected_wasted_work_h(&m, 12.0, 6.0), 3.0, 1e-12));
        assert!(close(expected_running_time_h(&m, 12.0, 6.0), 7.5, 1e-12));
        // The paper's §6.1: the increase for a 10 h job is T²/48 ≈ 2.08 h.
        assert!(close(
            expected_running_time_h(&m, 0.0, 10.0) - 10.0,
            100.0 / 48.0,
            1e-12
        ));
        // Eq. 8 literally: ∫_12^18 t/24 dt = (18² − 12²)/48 = 3.75.
        assert!(close(expected_running_time_eq8(&m, 12.0, 6.0), 9.75, 1e-12));
        // Running into the deadline from s = 20 loses the 4 h to it, surely.
        assert!(close(expected_lost_work_h(&m, 20.0, 6.0), 2.0, 1e-12));
        // Fresh restarts: C_0 = T + ℓ_0 / (1 − p_0) = 6 + 0.75 / 0.75.
        assert!(close(expected_completion_h(&m, 0.0, 6.0), 7.0, 1e-12));
        assert!(close(
            expected_completion_h(&m, 12.0, 6.0),
            0.5 * 6.0 + 1.5 + 0.5 * 7.0,
            1e-12
        ));
        assert_eq!(expected_completion_h(&m, 0.0, 24.0), f64::INFINITY);
        // Older VMs are always worse under uniform preemptions.
        assert!(reuse_decision(&m, 0.0, 6.0).keep);
        assert!(!reuse_decision(&m, 1.0, 6.0).keep);
    }

    #[test]
    fn memoryless_hand_cases() {
        // Rate 1/h, no deadline.
        let m = Exponential::new(1.0, f64::INFINITY).unwrap();
        for s in [0.0, 5.0, 30.0] {
            assert!(close(
                preemption_probability(&m, s, 2.0),
                -(-2f64).exp_m1(),
                1e-12
            ));
            // E[W1] = 1 − T e^(−T) / (1 − e^(−T)) for rate 1.
            let w = 1.0 - 2.0 * (-2f64).exp() / -(-2f64).exp_m1();
            assert!(close(expected_wasted_work_h(&m, s, 2.0), w, 1e-10));
            assert!(reuse_decision(&m, s, 2.0).keep);
            // Restart on a fresh VM: C = T + E[X·1{X ≤ T}] / S(T) = e^T − 1 for rate 1.
            assert!(close(
                expected_completion_h(&m, s, 2.0),
                2f64.exp() - 1.0,
                1e-10
            ));
        }
        assert_eq!(crossover_job_length_h(&m, 5.0, 24.0), None);
        assert_eq!(
            fresh_vm_age_h(&m, ReuseCriterion::ExpectedRunningTime, 6.0, 24.0),
            None
        );
    }

    #[test]
    fn bathtub_running_time_matches_direct_integration() {
        let m = Bathtub::default();
        for s in [0.0_f64, 2.0, 10.0, 18.5, 23.0] {
            for t in [0.5, 3.0, 6.0, 10.0] {
                // Direct: T + (1/S(s))·(∫_s^(min(s+T, L)) (t − s) g dt + (L − s)·mass·1{s+T ≥ L}).
                let end = (s + t).min(24.0);
                let integral = integrate(|x| (x - s) * m.density(x), s, end);
                let atom = if s + t >= 24.0 {
                    (24.0 - s) * m.deadline_mass()
                } else {
                    0.0
                };
                let want = t + (integral + atom) / m.survival(s);
                let got = expected_running_time_h(&m, s, t);
                assert!(close(got, want, 1e-10), "s={s} T={t}: {got} vs {want}");
                let p = (m.cdf(s + t) - m.cdf(s)) / (1.0 - m.cdf(s));
                assert!(close(preemption_probability(&m, s, t), p, 1e-12));
            }
        }
        // At s = 0 the literal Eq. 8 agrees (no deadline mass before 24 h).
        assert!(close(
            expected_running_time_eq8(&m, 0.0, 10.0),
            expected_running_time_h(&m, 0.0, 10.0),
            1e-12
        ));
        // The paper's §6.1: a 10 h job on a fresh VM loses about half an hour.
        let increase = expected_running_time_h(&m, 0.0, 10.0) - 10.0;
        assert!((0.4..0.5).contains(&increase), "{increase}");
    }

    #[test]
    fn six_hour_job_goes_to_a_fresh_vm_late_in_life() {
        let m = Bathtub::default();
        let switch = fresh_vm_age_h(&m, ReuseCriterion::ExpectedRunningTime, 6.0, 24.0).unwrap();
        assert!((10.0..18.0).contains(&switch), "{switch}");
        assert!(reuse_decision(&m, switch - 0.01, 6.0).keep);
        assert!(!reuse_decision(&m, switch + 0.01, 6.0).keep);
        // Young-but-stable VMs are kept; from 18 h a 6 h job meets the deadline.
        assert!(reuse_decision(&m, 5.0, 6.0).keep);
        assert!(!reuse_decision(&m, 18.0, 6.0).keep);
        // T*(s) at that age is 6 h (the same boundary seen from the other axis).
        let t_star = crossover_job_length_h(&m, switch, 24.0).unwrap();
        assert!((t_star - 6.0).abs() < 0.05, "{t_star}");
    }

    #[test]
    fn monte_carlo_agrees_with_integration() {
        let m = Bathtub::default();
        for criterion in [
            ReuseCriterion::ExpectedRunningTime,
            ReuseCriterion::FailureProbability,
        ] {
            let rows = reuse_monte_carlo(&m, &m, criterion, &[2.0, 6.0, 12.0], 24.0, 20_000, 11);
            for r in &rows {
                // Binomial standard error ≤ 0.5/√20000 ≈ 0.0035; allow 4σ.
                assert!(
                    (r.memoryless_failure - r.memoryless_failure_exact).abs() < 0.015,
                    "{r:?}"
                );
                assert!(
                    (r.policy_failure - r.policy_failure_exact).abs() < 0.015,
                    "{r:?}"
                );
                assert!(r.policy_failure_exact < r.memoryless_failure_exact, "{r:?}");
            }
            assert_eq!(
                rows,
                reuse_monte_carlo(&m, &m, criterion, &[2.0, 6.0, 12.0], 24.0, 20_000, 11)
            );
        }
    }

    #[test]
    fn failure_reduction_against_the_memoryless_policy() {
        // Measured on the typical fit (docs/preemption.md): the paper's
        // running-time rule cuts failures 1.5–1.9×; minimising the failure
        // probability itself reaches 2× for 11–21 h jobs.
        let m = Bathtub::default();
        let reduction = |criterion, job_h| {
            let r = reuse_monte_carlo(&m, &m, criterion, &[job_h], 24.0, 0, 0)[0];
            r.memoryless_failure_exact / r.policy_failure_exact
        };
        let by_time = reduction(ReuseCriterion::ExpectedRunningTime, 6.0);
        assert!((1.5..1.7).contains(&by_time), "{by_time}");
        let by_failure = reduction(ReuseCriterion::FailureProbability, 12.0);
        assert!((2.0..2.1).contains(&by_failure), "{by_failure}");
        // The failure rule never does worse on failures than the time rule.
        for job_h in [1.0, 6.0, 18.0] {
            assert!(
                reduction(ReuseCriterion::FailureProbability, job_h)
                    >= reduction(ReuseCriterion::ExpectedRunningTime, job_h)
            );
        }
    }

    #[test]
    fn conditional_sampling_follows_the_conditional_distribution() {
        let m = Bathtub::default();
        let mut rng = ChaCha8Rng::seed_from_u64(3);
        let age = 20.0;
        let n = 20_000;
        let draws: Vec<f64> = (0..n)
            .map(|_| sample_given_alive(&m, age, &mut rng))
            .collect();
        assert!(draws.iter().all(|&x| x > age && x <= 24.0));
        for q in [21.0, 23.0, 23.9] {
            let want = (m.cdf(q) - m.cdf(age)) / m.survival(age);
            let got = draws.iter().filter(|&&x| x <= q).count() as f64 / n as f64;
            assert!((got - want).abs() < 0.015, "q={q}: {got} vs {want}");
        }
        let at_deadline = draws.iter().filter(|&&x| x == 24.0).count() as f64 / n as f64;
        let want = m.deadline_mass() / m.survival(age);
        assert!(
            (at_deadline - want).abs() < 0.015,
            "{at_deadline} vs {want}"
        );
    }
}
