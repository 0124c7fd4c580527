//! The bathtub lifetime distribution of preemptible VMs.
//!
//! The paper fits the CDF of a VM's time to preemption `t` (in hours) with
//!
//! ```text
//! F(t) = A · (1 − e^(−t/τ1) + e^((t−b)/τ2))
//! ```
//!
//! an early exponential failure process (rate 1/τ1) plus a late reclamation
//! process that takes off near `b`. As published, `F` is not a proper CDF:
//! `F(0) = A·e^(−b/τ2) > 0`, `F` exceeds 1 before the provider's maximum
//! lifetime `L` when `A` is large, and it stays below 1 at `L` when `A` is
//! small (the typical `A ≈ 0.45` leaves `F(L) ≈ 0.9`).
//!
//! Everything in jobcast uses one proper distribution built from it:
//!
//! ```text
//! G(t) = 0                        t < 0
//! G(t) = min(1, F(t) − F(0))      0 ≤ t < L
//! G(t) = 1                        t ≥ L
//! ```
//!
//! - Subtracting `F(0)` makes `G(0) = 0` exactly. The paper constrains its
//!   fits to `F(0) ≈ 0` (typically `F(0) ≈ 4·10⁻¹⁴`), so this does not move
//!   the curve perceptibly, and it avoids a spurious atom at 0.
//! - `F` is strictly increasing (`F' > 0`), so `G` is too, until it reaches 1
//!   at `t*` (only if that happens before `L`). Let `t_end = min(t*, L)`.
//! - If `G(L⁻) < 1`, the rest, `1 − G(L⁻)`, is a point mass at `L`: VMs that
//!   survive to the deadline are all preempted at it (GCE's hard 24 h limit).
//!   See [`Bathtub::deadline_mass`].
//!
//! So the lifetime has density `g(t) = F'(t) = A·(e^(−t/τ1)/τ1 + e^((t−b)/τ2)/τ2)`
//! on `[0, t_end)`, zero elsewhere, plus the atom at `L`.

use super::Lifetime;
use rand::Rng;
use rand::distr::Distribution;
use serde::{Deserialize, Serialize};

/// The parameters of a [`Bathtub`], for error reporting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BathtubParam {
    A,
    Tau1,
    Tau2,
    B,
    MaxLifetime,
}

impl BathtubParam {
    /// The parameter's field name, e.g. `tau1`.
    pub fn as_str(self) -> &'static str {
        match self {
            BathtubParam::A => "a",
            BathtubParam::Tau1 => "tau1",
            BathtubParam::Tau2 => "tau2",
            BathtubParam::B => "b",
            BathtubParam::MaxLifetime => "max_lifetime_h",
        }
    }
}

/// A bathtub parameter is out of its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("bathtub parameter `{}` must be {requirement}, got {value}", param.as_str())]
pub struct BathtubError {
    pub param: BathtubParam,
    pub value: f64,
    pub requirement: &'static str,
}

/// The bathtub lifetime distribution `G` (see the [module docs](self)).
/// All times are in hours.
///
/// Construct with [`Bathtub::new`], which validates the parameters; the
/// [`Default`] is the paper's typical GCE fit (A = 0.45, τ1 = 1 h,
/// τ2 = 0.8 h, b = 24 h, L = 24 h).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bathtub {
    a: f64,
    tau1: f64,
    tau2: f64,
    b: f64,
    max_lifetime_h: f64,
    /// `t_end = min(t*, L)`: where the continuous part ends.
    end: f64,
    /// The point mass at `L`, `1 − G(L⁻)` (0 when `t* < L`).
    deadline_mass: f64,
}

impl Default for Bathtub {
    fn default() -> Self {
        Bathtub::build(0.45, 1.0, 0.8, 24.0, 24.0)
    }
}

/// Bisection stops once the bracket is this narrow relative to its upper end
/// (plus an absolute floor of ~4 ps), i.e. after at most ~55 halvings of [0, 24].
const REL_TOL: f64 = 1e-13;
const ABS_TOL: f64 = 1e-15;

impl Bathtub {
    /// Validate the parameters: `a`, `tau1`, `tau2` and `max_lifetime_h` must
    /// be finite and positive, `b` finite and non-negative.
    pub fn new(
        a: f64,
        tau1: f64,
        tau2: f64,
        b: f64,
        max_lifetime_h: f64,
    ) -> Result<Self, BathtubError> {
        let positive = |param, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(BathtubError {
                    param,
                    value,
                    requirement: "finite and > 0",
                })
            }
        };
        positive(BathtubParam::A, a)?;
        positive(BathtubParam::Tau1, tau1)?;
        positive(BathtubParam::Tau2, tau2)?;
        positive(BathtubParam::MaxLifetime, max_lifetime_h)?;
        // b ≥ 0 keeps F(0) = A·e^(−b/τ2) ≤ A finite.
        if !(b.is_finite() && b >= 0.0) {
            return Err(BathtubError {
                param: BathtubParam::B,
                value: b,
                requirement: "finite and ≥ 0",
            });
        }
        Ok(Bathtub::build(a, tau1, tau2, b, max_lifetime_h))
    }

    /// Precompute `t_end` and the deadline mass for valid parameters.
    fn build(a: f64, tau1: f64, tau2: f64, b: f64, max_lifetime_h: f64) -> Self {
        let mut model = Bathtub {
            a,
            tau1,
            tau2,
            b,
            max_lifetime_h,
            end: max_lifetime_h,
            deadline_mass: 0.0,
        };
        let at_deadline = model.shifted(max_lifetime_h);
        if at_deadline < 1.0 {
            model.deadline_mass = 1.0 - at_deadline;
        } else {
            // F − F(0) is continuous and increasing from 0, so it crosses 1 in (0, L].
            model.end = model.bisect(1.0, max_lifetime_h);
        }
        model
    }

    /// `F(t) − F(0)` without the cap, computed without cancellation for small
    /// `t` (via `expm1`) and without `∞ · 0` for large `t/τ2`.
    fn shifted(&self, t: f64) -> f64 {
        let early = -(-t / self.tau1).exp_m1();
        let late = if t < self.tau2 {
            (-self.b / self.tau2).exp() * (t / self.tau2).exp_m1()
        } else {
            ((t - self.b) / self.tau2).exp() - (-self.b / self.tau2).exp()
        };
        self.a * (early + late)
    }

    /// The smallest `t` in `[0, hi]` with `F(t) − F(0) ≥ p`, by bisection;
    /// requires `0 ≤ p ≤ F(hi) − F(0)`.
    fn bisect(&self, p: f64, hi: f64) -> f64 {
        let (mut lo, mut hi) = (0.0_f64, hi);
        while hi - lo > REL_TOL * hi + ABS_TOL {
            let mid = 0.5 * (lo + hi);
            if self.shifted(mid) < p {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        hi
    }

    /// The scale `A`.
    pub fn a(&self) -> f64 {
        self.a
    }

    /// The early-phase time constant τ1 (hours).
    pub fn tau1(&self) -> f64 {
        self.tau1
    }

    /// The late-phase time constant τ2 (hours).
    pub fn tau2(&self) -> f64 {
        self.tau2
    }

    /// The activation time `b` of the late phase (hours).
    pub fn b(&self) -> f64 {
        self.b
    }

    /// The provider's maximum lifetime `L` (hours).
    pub fn max_lifetime_h(&self) -> f64 {
        self.max_lifetime_h
    }

    /// `t_end = min(t*, L)`: the end of the continuous part; no VM survives
    /// past it except into the point mass at `L`.
    pub fn continuous_end_h(&self) -> f64 {
        self.end
    }

    /// `P(T = L) = 1 − G(L⁻)`: the share of VMs that live to the deadline and
    /// are preempted exactly at it (0 when `G` reaches 1 before `L`).
    pub fn deadline_mass(&self) -> f64 {
        self.deadline_mass
    }

    /// `G(t) = P(T ≤ t)`. NaN in, NaN out.
    pub fn cdf(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if t < 0.0 {
            0.0
        } else if t >= self.end {
            // Past t* (G capped at 1) or at L (the atom is included).
            if t >= self.max_lifetime_h {
                1.0
            } else {
                1.0 - self.deadline_mass
            }
        } else {
            self.shifted(t).min(1.0)
        }
    }

    /// `S(t) = 1 − G(t) = P(T > t)`.
    pub fn survival(&self, t: f64) -> f64 {
        1.0 - self.cdf(t)
    }

    /// The density `g(t)` of the continuous part: `F'(t)` on `[0, t_end)`,
    /// 0 elsewhere. It does not include the point mass at `L`.
    pub fn density(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if (0.0..self.end).contains(&t) {
            self.a
                * ((-t / self.tau1).exp() / self.tau1
                    + ((t - self.b) / self.tau2).exp() / self.tau2)
        } else {
            0.0
        }
    }

    /// The hazard (preemption rate of a VM that has survived to `t`), in
    /// 1/hour: `g(t) / S(t)` on `[0, t_end)`, 0 before launch, and `+∞` from
    /// `t_end` on, where no VM can survive any longer.
    pub fn hazard(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if t < 0.0 {
            0.0
        } else if t >= self.end {
            f64::INFINITY
        } else {
            self.density(t) / self.survival(t)
        }
    }

    /// The `p`-quantile: the smallest `t` with `G(t) ≥ p`. `G` is continuous
    /// and strictly increasing on `[0, t_end)`, so it is found by bisection to
    /// a relative precision of 1e-13 (at most ~55 evaluations of `G`);
    /// `p` beyond `G(L⁻)` falls in the point mass and yields `L`.
    /// Returns NaN when `p` is NaN or outside `[0, 1]`.
    pub fn quantile(&self, p: f64) -> f64 {
        if !(0.0..=1.0).contains(&p) {
            f64::NAN
        } else if p == 0.0 {
            0.0
        } else if p > 1.0 - self.deadline_mass {
            self.max_lifetime_h
        } else {
            self.bisect(p, self.end)
        }
    }

    /// Draw a lifetime (hours) by inverse-transform sampling.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        self.quantile(rng.random::<f64>())
    }

    /// The expected lifetime `E[T]` in hours (the paper's Eq. 3 adapted to
    /// `G`): `∫₀^t_end t·g(t) dt + L·P(T = L)`, in closed form.
    pub fn mean(&self) -> f64 {
        self.partial_expectation(0.0, self.end) + self.max_lifetime_h * self.deadline_mass
    }

    /// The partial expectation `∫_a^b t·g(t) dt` over the continuous part
    /// (the point mass at `L` excluded), in closed form from the paper's
    /// antiderivative of `t·F'(t)`:
    ///
    /// ```text
    /// H(x) = −A(x + τ1)·e^(−x/τ1) + A(x − τ2)·e^((x−b)/τ2)
    /// ```
    ///
    /// evaluated over `[a, b] ∩ [0, t_end]`. 0 when the interval is empty.
    pub fn partial_expectation(&self, a: f64, b: f64) -> f64 {
        let (lo, hi) = (a.max(0.0), b.min(self.end));
        if hi <= lo {
            return 0.0;
        }
        let antiderivative = |x: f64| {
            self.a
                * (-(x + self.tau1) * (-x / self.tau1).exp()
                    + (x - self.tau2) * ((x - self.b) / self.tau2).exp())
        };
        antiderivative(hi) - antiderivative(lo)
    }

    /// `E[(T − s)·1{s < T ≤ u}] = ∫_(s,u] (t − s) dG(t)` in closed form, the
    /// point mass at `L` included (it counts when `u ≥ L`): the work lost by
    /// a job running from VM age `s` to `u`, weighted by the probability of
    /// losing it. See [`Lifetime::lost_work_moment`].
    ///
    /// This is `H(m) − H(s) − s·(G(m) − G(s))` with `m = min(u, t_end)`,
    /// regrouped in `Δ = m − s` so that short intervals do not cancel:
    ///
    /// ```text
    /// A·τ1·e^(−s/τ1)·φ(Δ/τ1) + A·τ2·e^((s−b)/τ2)·φ(−Δ/τ2),   φ(y) = 1 − (1 + y)·e^(−y)
    /// ```
    pub fn lost_work_moment(&self, s: f64, u: f64) -> f64 {
        let start = s.max(0.0);
        if u <= start || start >= self.max_lifetime_h {
            return 0.0;
        }
        let mut moment = 0.0;
        let span = u.min(self.end) - start;
        if span > 0.0 {
            moment += self.a * self.tau1 * (-start / self.tau1).exp() * phi(span / self.tau1);
            let y = span / self.tau2;
            moment += self.a
                * self.tau2
                * if y < PHI_SERIES_BELOW {
                    ((start - self.b) / self.tau2).exp() * phi(-y)
                } else {
                    // φ(−y) = 1 + (y − 1)·e^y; fold e^y into the exponent so
                    // a tiny τ2 cannot overflow it.
                    ((start - self.b) / self.tau2).exp()
                        + (y - 1.0) * ((start + span - self.b) / self.tau2).exp()
                };
        }
        if u >= self.max_lifetime_h {
            moment += (self.max_lifetime_h - start) * self.deadline_mass;
        }
        moment
    }
}

/// Below this `|y|`, [`phi`] sums its Taylor series instead of cancelling.
const PHI_SERIES_BELOW: f64 = 0.5;

/// `φ(y) = 1 − (1 + y)·e^(−y) = ∫₀^y x·e^(−x) dx`, accurate for small `|y|`,
/// where the direct form cancels: `φ(y) = Σ_{k≥2} (−1)^k (k − 1) y^k / k!`.
fn phi(y: f64) -> f64 {
    if y.abs() >= PHI_SERIES_BELOW {
        return -(-y).exp_m1() - y * (-y).exp();
    }
    // Terms shrink by at least |y|/k ≤ 1/4 per step from k = 2 on, so 24
    // terms reach far below f64 precision.
    // (−1)^k·y^k/k!, from k = 1.
    let (mut sum, mut power_over_factorial) = (0.0, -y);
    for k in 2..26 {
        power_over_factorial *= -y / f64::from(k);
        sum += f64::from(k - 1) * power_over_factorial;
    }
    sum
}

impl Lifetime for Bathtub {
    fn cdf(&self, t_h: f64) -> f64 {
        Bathtub::cdf(self, t_h)
    }

    fn density(&self, t_h: f64) -> f64 {
        Bathtub::density(self, t_h)
    }

    fn max_lifetime_h(&self) -> f64 {
        self.max_lifetime_h
    }

    fn survival(&self, t_h: f64) -> f64 {
        Bathtub::survival(self, t_h)
    }

    fn mean_lifetime_h(&self) -> f64 {
        self.mean()
    }

    fn partial_expectation(&self, a_h: f64, b_h: f64) -> f64 {
        Bathtub::partial_expectation(self, a_h, b_h)
    }

    fn lost_work_moment(&self, s_h: f64, u_h: f64) -> f64 {
        Bathtub::lost_work_moment(self, s_h, u_h)
    }
}

impl Distribution<f64> for Bathtub {
    fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> f64 {
        Bathtub::sample(self, rng)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand_chacha::ChaCha8Rng;

    /// Parameters spanning the paper's fits, plus ones whose raw `F` passes 1
    /// before the deadline (A = 0.6) or stays well below it (A = 0.3).
    fn models() -> Vec<Bathtub> {
        vec![
            Bathtub::default(),
            Bathtub::new(0.4, 0.5, 0.8, 24.0, 24.0).unwrap(),
            Bathtub::new(0.5, 1.5, 0.8, 24.0, 24.0).unwrap(),
            Bathtub::new(0.6, 1.0, 0.8, 24.0, 24.0).unwrap(),
            Bathtub::new(0.3, 1.0, 0.8, 22.0, 24.0).unwrap(),
            Bathtub::new(0.45, 1.0, 0.8, 6.0, 8.0).unwrap(),
        ]
    }

    /// The paper's published F, for comparison.
    fn published(m: &Bathtub, t: f64) -> f64 {
        m.a * (1.0 - (-t / m.tau1).exp() + ((t - m.b) / m.tau2).exp())
    }

    #[test]
    fn default_is_the_typical_gce_fit() {
        let m = Bathtub::default();
        assert_eq!(
            (m.a(), m.tau1(), m.tau2(), m.b(), m.max_lifetime_h()),
            (0.45, 1.0, 0.8, 24.0, 24.0)
        );
        assert_eq!(Bathtub::new(0.45, 1.0, 0.8, 24.0, 24.0).unwrap(), m);
        // F(24) = 0.45·(1 − e^−24 + 1) ≈ 0.9: about 10 % of VMs reach the deadline.
        assert!(
            (m.deadline_mass() - 0.1).abs() < 1e-6,
            "{}",
            m.deadline_mass()
        );
        assert_eq!(m.continuous_end_h(), 24.0);
    }

    #[test]
    fn g_is_f_shifted_by_f0_and_capped() {
        for m in models() {
            let f0 = published(&m, 0.0);
            for i in 0..2400 {
                let t = f64::from(i) * m.max_lifetime_h / 2400.0;
                let want = (published(&m, t) - f0).min(1.0);
                assert!(
                    (m.cdf(t) - want).abs() < 1e-12,
                    "{m:?} t={t}: {} vs {want}",
                    m.cdf(t)
                );
            }
            assert_eq!(m.cdf(0.0), 0.0);
            assert_eq!(m.cdf(-1.0), 0.0);
            assert_eq!(m.cdf(m.max_lifetime_h), 1.0);
            assert_eq!(m.cdf(1e9), 1.0);
            assert!(m.cdf(f64::NAN).is_nan());
        }
    }

    #[test]
    fn large_a_reaches_one_before_the_deadline() {
        let m = Bathtub::new(0.6, 1.0, 0.8, 24.0, 24.0).unwrap();
        assert_eq!(m.deadline_mass(), 0.0);
        let end = m.continuous_end_h();
        assert!(end > 20.0 && end < 24.0, "{end}");
        assert!((m.shifted(end) - 1.0).abs() < 1e-9);
        assert_eq!(m.cdf(end), 1.0);
        assert_eq!(m.density(end), 0.0);
        assert_eq!(m.hazard(end), f64::INFINITY);
        assert!(m.density(end - 1e-6) > 0.0);
    }

    #[test]
    fn density_matches_numerical_derivative() {
        for m in models() {
            let h = 1e-6;
            let mut t = 0.01;
            while t < m.continuous_end_h() - 0.01 {
                let numeric = (m.cdf(t + h) - m.cdf(t - h)) / (2.0 * h);
                let exact = m.density(t);
                assert!(
                    (numeric - exact).abs() <= 1e-5 * exact.max(1e-3),
                    "{m:?} t={t}: {numeric} vs {exact}"
                );
                t += 0.01;
            }
            assert_eq!(m.density(-0.1), 0.0);
            assert_eq!(m.density(m.max_lifetime_h + 1.0), 0.0);
        }
    }

    #[test]
    fn density_and_mass_integrate_to_one_and_give_the_mean() {
        for m in models() {
            // Composite Simpson over the continuous part.
            let n = 200_000;
            let h = m.continuous_end_h() / f64::from(n);
            let (mut total, mut first_moment) = (0.0, 0.0);
            for i in 0..=n {
                let t = f64::from(i) * h;
                // The density is 0 exactly at t_end; integrate its left limit.
                let g = m.density(t.min(m.continuous_end_h() * (1.0 - 1e-15)));
                let w = if i == 0 || i == n {
                    1.0
                } else if i % 2 == 1 {
                    4.0
                } else {
                    2.0
                };
                total += w * g;
                first_moment += w * t * g;
            }
            total *= h / 3.0;
            first_moment *= h / 3.0;
            assert!(
                (total + m.deadline_mass() - 1.0).abs() < 1e-6,
                "{m:?}: {total}"
            );
            let mean = first_moment + m.max_lifetime_h * m.deadline_mass();
            assert!(
                (mean - m.mean()).abs() < 1e-5,
                "{m:?}: {mean} vs {}",
                m.mean()
            );
        }
    }

    #[test]
    fn phi_series_and_direct_form_agree() {
        for y in [-0.49_f64, -0.2, -1e-3, 1e-3, 0.2, 0.49] {
            let direct = -(-y).exp_m1() - y * (-y).exp();
            assert!(
                (phi(y) - direct).abs() <= 1e-12 * direct.abs(),
                "y={y}: {} vs {direct}",
                phi(y)
            );
        }
        // φ(y) ≈ y²/2 − y³/3 where the direct form has lost all its digits.
        let y = 1e-9;
        assert!((phi(y) - (y * y / 2.0 - y * y * y / 3.0)).abs() < 1e-30);
        assert_eq!(phi(0.0), 0.0);
    }

    #[test]
    fn partial_expectation_matches_numerical_integration() {
        for m in models() {
            let end = m.continuous_end_h();
            let cuts = [
                -1.0,
                0.0,
                0.3,
                2.0,
                11.0,
                end - 0.5,
                end,
                m.max_lifetime_h + 1.0,
            ];
            for &a in &cuts {
                for &b in &cuts {
                    let exact = m.partial_expectation(a, b);
                    // The density jumps to 0 at t_end when G is capped; the
                    // quadrature needs that jump on its boundary.
                    let numeric =
                        crate::preemption::lifetime::numeric_partial_expectation(&m, a, b.min(end));
                    assert!(
                        (exact - numeric).abs() <= 1e-11 * numeric.abs().max(1.0),
                        "{m:?} [{a}, {b}]: {exact} vs {numeric}"
                    );
                }
            }
        }
    }

    #[test]
    fn lost_work_moment_matches_numerical_integration() {
        for m in models() {
            let l = m.max_lifetime_h;
            let starts = [0.0, 0.01, 1.0, 5.0, l / 2.0, l - 3.0, l - 0.2];
            let lengths = [1e-4, 0.05, 1.0, 2.5, 6.0, 10.0, l];
            for &s in &starts {
                for &t in &lengths {
                    let exact = m.lost_work_moment(s, s + t);
                    let numeric =
                        crate::preemption::lifetime::numeric_lost_work_moment(&m, s, s + t);
                    assert!(
                        (exact - numeric).abs() <= 1e-10 * numeric.max(1e-6),
                        "{m:?} s={s} T={t}: {exact} vs {numeric}"
                    );
                    assert!(exact >= 0.0);
                }
            }
            // Starting at 0 and running past L loses E[T] in expectation.
            assert!((m.lost_work_moment(0.0, l + 1.0) - m.mean()).abs() < 1e-12);
            assert_eq!(m.lost_work_moment(3.0, 3.0), 0.0);
            assert_eq!(m.lost_work_moment(l, l + 5.0), 0.0);
        }
    }

    #[test]
    fn lost_work_moment_of_short_interval_is_density_times_half_square() {
        // ∫_s^(s+Δ) (t − s) g(t) dt ≈ g(s)·Δ²/2 for small Δ, with no cancellation.
        let m = Bathtub::default();
        for s in [0.0, 3.0, 20.0, 23.9] {
            let d = 1e-7;
            let want = m.density(s) * d * d / 2.0;
            let got = m.lost_work_moment(s, s + d);
            assert!((got - want).abs() <= 1e-6 * want, "s={s}: {got} vs {want}");
        }
    }

    #[test]
    fn hazard_is_bathtub_shaped() {
        let m = Bathtub::default();
        assert_eq!(m.hazard(-1.0), 0.0);
        let (early, middle, late) = (m.hazard(0.0), m.hazard(12.0), m.hazard(23.5));
        assert!(
            early > 5.0 * middle && late > 5.0 * middle,
            "{early} {middle} {late}"
        );
        assert!((m.hazard(3.0) - m.density(3.0) / m.survival(3.0)).abs() < 1e-15);
        assert_eq!(m.hazard(24.0), f64::INFINITY);
    }

    #[test]
    fn quantile_inverts_cdf() {
        for m in models() {
            for i in 1..1000 {
                let t = f64::from(i) * m.continuous_end_h() / 1000.0;
                let back = m.quantile(m.cdf(t));
                assert!(
                    (m.cdf(back) - m.cdf(t)).abs() < 1e-12,
                    "{m:?} t={t}: {back}"
                );
                // Where G is nearly flat, many t share one G(t) in f64.
                if m.density(t) > 1e-6 {
                    assert!((back - t).abs() < 1e-9 * t.max(1.0), "{m:?} t={t}: {back}");
                }
            }
            for i in 1..1000 {
                let p = f64::from(i) / 1000.0;
                let t = m.quantile(p);
                if p <= 1.0 - m.deadline_mass() {
                    assert!(
                        (m.cdf(t) - p).abs() < 1e-9,
                        "{m:?} p={p}: G({t}) = {}",
                        m.cdf(t)
                    );
                } else {
                    assert_eq!(t, m.max_lifetime_h);
                }
            }
            assert_eq!(m.quantile(0.0), 0.0);
            assert!(m.quantile(1.0) <= m.max_lifetime_h);
            assert!(
                m.quantile(-0.1).is_nan()
                    && m.quantile(1.1).is_nan()
                    && m.quantile(f64::NAN).is_nan()
            );
        }
    }

    #[test]
    fn samples_follow_the_distribution() {
        for m in models() {
            let mut rng = ChaCha8Rng::seed_from_u64(7);
            let n = 20_000;
            let mut xs: Vec<f64> = (0..n).map(|_| m.sample(&mut rng)).collect();
            assert!(xs.iter().all(|&x| (0.0..=m.max_lifetime_h).contains(&x)));
            xs.sort_by(f64::total_cmp);
            // Kolmogorov–Smirnov distance, using G's left limit at the atom.
            let mut d: f64 = 0.0;
            for (i, &x) in xs.iter().enumerate() {
                let left = if x >= m.max_lifetime_h {
                    1.0 - m.deadline_mass
                } else {
                    m.cdf(x)
                };
                d = d
                    .max((i + 1) as f64 / n as f64 - m.cdf(x))
                    .max(left - i as f64 / n as f64);
            }
            // The 1 % critical value is 1.63/√n ≈ 0.0115.
            assert!(d < 0.0115, "{m:?}: KS distance {d}");
            let at_deadline =
                xs.iter().filter(|&&x| x == m.max_lifetime_h).count() as f64 / n as f64;
            assert!(
                (at_deadline - m.deadline_mass()).abs() < 0.01,
                "{m:?}: {at_deadline}"
            );
            let mean = xs.iter().sum::<f64>() / n as f64;
            assert!(
                (mean - m.mean()).abs() < 0.03 * m.mean(),
                "{m:?}: {mean} vs {}",
                m.mean()
            );
        }
    }

    #[test]
    fn invalid_parameters_are_rejected_by_name() {
        let cases = [
            (Bathtub::new(0.0, 1.0, 0.8, 24.0, 24.0), BathtubParam::A),
            (
                Bathtub::new(f64::NAN, 1.0, 0.8, 24.0, 24.0),
                BathtubParam::A,
            ),
            (
                Bathtub::new(0.45, -1.0, 0.8, 24.0, 24.0),
                BathtubParam::Tau1,
            ),
            (Bathtub::new(0.45, 1.0, 0.0, 24.0, 24.0), BathtubParam::Tau2),
            (Bathtub::new(0.45, 1.0, 0.8, -1.0, 24.0), BathtubParam::B),
            (
                Bathtub::new(0.45, 1.0, 0.8, f64::INFINITY, 24.0),
                BathtubParam::B,
            ),
            (
                Bathtub::new(0.45, 1.0, 0.8, 24.0, 0.0),
                BathtubParam::MaxLifetime,
            ),
        ];
        for (result, param) in cases {
            let err = result.unwrap_err();
            assert_eq!(err.param, param);
            assert!(err.to_string().contains(param.as_str()), "{err}");
        }
    }

    proptest! {
        #[test]
        fn proper_distribution_for_any_valid_parameters(
            a in 0.01f64..5.0,
            tau1 in 0.01f64..10.0,
            tau2 in 0.001f64..5.0,
            b in 0.0f64..48.0,
            max_lifetime_h in 0.1f64..48.0,
        ) {
            let m = Bathtub::new(a, tau1, tau2, b, max_lifetime_h).unwrap();
            prop_assert!((0.0..=1.0).contains(&m.deadline_mass()));
            prop_assert!(m.continuous_end_h() > 0.0 && m.continuous_end_h() <= max_lifetime_h);
            prop_assert!(m.mean().is_finite() && m.mean() >= 0.0 && m.mean() <= max_lifetime_h * (1.0 + 1e-12));
            let mut prev = 0.0;
            for i in 0..=500 {
                let t = f64::from(i) * max_lifetime_h * 1.1 / 500.0;
                let g = m.cdf(t);
                prop_assert!((0.0..=1.0).contains(&g), "G({}) = {}", t, g);
                prop_assert!(g >= prev, "not monotone at {}", t);
                prop_assert!(m.density(t) >= 0.0 && m.density(t).is_finite());
                prop_assert!(m.hazard(t) >= 0.0);
                prev = g;
                // Inversion is only well-conditioned where G is not flat.
                if t < m.continuous_end_h() && g < 1.0 - 1e-9 && m.density(t) > 1e-6 {
                    let back = m.quantile(g);
                    prop_assert!((back - t).abs() < 1e-7 * t.max(1.0), "q(G({})) = {}", t, back);
                }
            }
        }
    }
}
