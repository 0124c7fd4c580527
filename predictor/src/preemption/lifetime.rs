//! The interface every VM-lifetime model offers to the decision code, and
//! the numerical integration that makes it work for any model.
//!
//! The reuse policy ([`running_time`](super::running_time)), the checkpoint
//! schedule ([`checkpoint`](super::checkpoint)) and the risk score
//! ([`risk`](super::risk)) only need a lifetime's distribution function, its
//! density and the provider's hard limit. Writing them against [`Lifetime`]
//! lets the bathtub model (which overrides the integrals with closed forms)
//! and the memoryless and other baseline models (which use the numerical
//! defaults here) answer the same questions with the same code, so their
//! policies compare like for like.
//!
//! The integrals are written with the survival function only, e.g.
//! `∫_(s,u] (t − s) dG(t) = ∫_s^u (S(t) − S(u)) dt` (integration by parts).
//! That form counts point masses (the bathtub's atom at the deadline)
//! without knowing where they are, and it never differences two CDF values
//! close to 1, which would lose digits for old VMs.

/// A distribution of VM lifetimes (time from launch to preemption), in hours.
///
/// Contract:
/// - [`cdf`](Lifetime::cdf) is a proper, non-decreasing, right-continuous
///   distribution function: 0 for `t < 0`, and 1 from
///   [`max_lifetime_h`](Lifetime::max_lifetime_h) on. It includes any point
///   mass (e.g. the bathtub's atom at the 24 h deadline), so `cdf(L)` is 1.
/// - [`density`](Lifetime::density) is the density of the continuous part
///   only (point masses excluded), 0 outside the support.
/// - [`max_lifetime_h`](Lifetime::max_lifetime_h) is the provider's maximum
///   lifetime `L`, or `f64::INFINITY` when there is none.
///
/// The provided methods integrate numerically. A model with closed forms
/// should override them; a model whose survival has a direct form (e.g.
/// `e^(−λt)`) should override [`survival`](Lifetime::survival), because
/// `1 − cdf` loses relative precision where the survival is small.
pub trait Lifetime {
    /// `G(t) = P(lifetime ≤ t)`, point masses included.
    fn cdf(&self, t_h: f64) -> f64;

    /// The density of the continuous part of `G` at `t`, in 1/hour.
    fn density(&self, t_h: f64) -> f64;

    /// The provider's maximum lifetime in hours (`f64::INFINITY` if none).
    fn max_lifetime_h(&self) -> f64;

    /// `S(t) = 1 − G(t) = P(lifetime > t)`.
    fn survival(&self, t_h: f64) -> f64 {
        1.0 - self.cdf(t_h)
    }

    /// The expected lifetime `E[X] = ∫₀^L S(t) dt`, in hours.
    fn mean_lifetime_h(&self) -> f64 {
        numeric_mean(self)
    }

    /// `∫_a^b t·g(t) dt` over the continuous part only (no point masses):
    /// the paper's "expected lifetime" integrand over an interval.
    fn partial_expectation(&self, a_h: f64, b_h: f64) -> f64 {
        numeric_partial_expectation(self, a_h, b_h)
    }

    /// `E[(X − s)·1{s < X ≤ u}] = ∫_(s,u] (t − s) dG(t)`, point masses
    /// included: the work a job started at VM age `s` and due to finish at
    /// `u` loses to a preemption, weighted by its probability (not yet
    /// conditioned on the VM surviving to `s`). 0 when `u ≤ s`.
    fn lost_work_moment(&self, s_h: f64, u_h: f64) -> f64 {
        numeric_lost_work_moment(self, s_h, u_h)
    }
}

/// [`Lifetime::mean_lifetime_h`] by numerical integration of the survival
/// function (over `[0, ∞)` by the substitution `t = x/(1 − x)` when there is
/// no maximum lifetime).
pub fn numeric_mean<L: Lifetime + ?Sized>(model: &L) -> f64 {
    let end = model.max_lifetime_h();
    if end.is_finite() {
        integrate(|t| model.survival(t), 0.0, end)
    } else {
        integrate(
            |x| {
                let one_minus = 1.0 - x;
                model.survival(x / one_minus) / (one_minus * one_minus)
            },
            0.0,
            1.0,
        )
    }
}

/// [`Lifetime::partial_expectation`] by numerical integration.
/// The density vanishes outside `[0, L]`, so the integral is clamped to it
/// (keeping its jumps at 0 and `L` on the boundary).
pub fn numeric_partial_expectation<L: Lifetime + ?Sized>(model: &L, a_h: f64, b_h: f64) -> f64 {
    integrate(
        |t| t * model.density(t),
        a_h.max(0.0),
        b_h.min(model.max_lifetime_h()),
    )
}

/// [`Lifetime::lost_work_moment`] by numerical integration of
/// `S(t) − S(u)` over `[s, min(u, L)]`.
pub fn numeric_lost_work_moment<L: Lifetime + ?Sized>(model: &L, s_h: f64, u_h: f64) -> f64 {
    let s = s_h.max(0.0);
    let end = u_h.min(model.max_lifetime_h());
    if end <= s {
        return 0.0;
    }
    let tail = model.survival(u_h);
    integrate(|t| (model.survival(t) - tail).max(0.0), s, end)
}

/// Absolute tolerance of [`integrate`]; the integrands here are
/// probabilities and hours, so this is far below any figure we report.
const ABS_TOL: f64 = 1e-13;
/// Relative tolerance of [`integrate`].
const REL_TOL: f64 = 1e-12;
/// Equal pieces [`integrate`] starts from: one Gauss–Kronrod pair over a
/// long interval can agree by accident on an integrand that rises steeply at
/// one end (the deadline phase), and then nothing would trigger a split.
const INITIAL_PIECES: u32 = 8;
/// Work bound: at most this many pieces (15 evaluations each). Round-off
/// noise or a jump can keep the error estimate above the tolerance; the
/// bound stops the refinement there instead of bisecting forever.
const MAX_PIECES: usize = 1000;

/// `∫_a^b f(t) dt` by globally adaptive 15-point Gauss–Kronrod quadrature
/// (the 7-point Gauss rule embedded for the error estimate, as QUADPACK's
/// `qag`): the piece with the largest error estimate is bisected until the
/// total estimate meets the tolerance. Only interior points are sampled, so
/// `f` may jump at `a` or `b` (a point mass at the deadline), but it must be
/// continuous inside: a piece whose nodes all fall on one side of an
/// interior jump looks smooth, so callers split at known jumps. Returns 0
/// when `b ≤ a`.
pub fn integrate<F: Fn(f64) -> f64>(f: F, a: f64, b: f64) -> f64 {
    if b <= a || a.is_nan() || b.is_nan() {
        return 0.0;
    }
    let width = (b - a) / f64::from(INITIAL_PIECES);
    // (lo, hi, estimate, error estimate)
    let mut pieces: Vec<(f64, f64, f64, f64)> = (0..INITIAL_PIECES)
        .map(|i| {
            let lo = a + width * f64::from(i);
            let hi = if i + 1 == INITIAL_PIECES {
                b
            } else {
                lo + width
            };
            let (estimate, err) = gauss_kronrod(&f, lo, hi);
            (lo, hi, estimate, err)
        })
        .collect();
    loop {
        let total: f64 = pieces.iter().map(|p| p.2).sum();
        let error: f64 = pieces.iter().map(|p| p.3).sum();
        if error <= ABS_TOL.max(REL_TOL * total.abs()) || pieces.len() >= MAX_PIECES {
            return total;
        }
        let worst = pieces
            .iter()
            .enumerate()
            .max_by(|x, y| x.1.3.total_cmp(&y.1.3))
            .map(|(i, _)| i)
            .expect("at least one piece");
        let (lo, hi, _, _) = pieces[worst];
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            // Too narrow to split in f64: accept it as it is.
            pieces[worst].3 = 0.0;
            continue;
        }
        let (left, left_err) = gauss_kronrod(&f, lo, mid);
        let (right, right_err) = gauss_kronrod(&f, mid, hi);
        pieces[worst] = (lo, mid, left, left_err);
        pieces.push((mid, hi, right, right_err));
    }
}

/// Kronrod abscissae on [0, 1] (the 15-point rule is symmetric), largest first.
const XGK: [f64; 8] = [
    0.991_455_371_120_812_6,
    0.949_107_912_342_758_5,
    0.864_864_423_359_769_1,
    0.741_531_185_599_394_4,
    0.586_087_235_467_691_1,
    0.405_845_151_377_397_2,
    0.207_784_955_007_898_5,
    0.0,
];
/// Kronrod weights for [`XGK`].
const WGK: [f64; 8] = [
    0.022_935_322_010_529_22,
    0.063_092_092_629_978_55,
    0.104_790_010_322_250_2,
    0.140_653_259_715_525_9,
    0.169_004_726_639_267_9,
    0.190_350_578_064_785_4,
    0.204_432_940_075_298_9,
    0.209_482_141_084_727_8,
];
/// Weights of the embedded 7-point Gauss rule, at `XGK[1], XGK[3], XGK[5], XGK[7]`.
const WG: [f64; 4] = [
    0.129_484_966_168_869_7,
    0.279_705_391_489_276_7,
    0.381_830_050_505_118_9,
    0.417_959_183_673_469_4,
];

/// One Gauss–Kronrod (7, 15) step: the Kronrod estimate and its error
/// estimate. The raw `|K − G|` is scaled as in QUADPACK's `qk15`, which is
/// pessimistic where the integrand is not smooth (a jump or kink inside the
/// piece) and so forces a refinement there instead of trusting an accidental
/// agreement of the two rules.
fn gauss_kronrod<F: Fn(f64) -> f64>(f: &F, a: f64, b: f64) -> (f64, f64) {
    let center = 0.5 * (a + b);
    let half = 0.5 * (b - a);
    let f_center = f(center);
    let mut kronrod = WGK[7] * f_center;
    let mut gauss = WG[3] * f_center;
    let mut pairs = [(0.0, 0.0); 7];
    for (j, (&x, &w)) in XGK.iter().zip(&WGK).take(7).enumerate() {
        let (left, right) = (f(center - half * x), f(center + half * x));
        pairs[j] = (left, right);
        kronrod += w * (left + right);
        if j % 2 == 1 {
            gauss += WG[j / 2] * (left + right);
        }
    }
    let mean = 0.5 * kronrod;
    let spread = WGK[7] * (f_center - mean).abs()
        + pairs
            .iter()
            .zip(&WGK)
            .map(|(&(left, right), &w)| w * ((left - mean).abs() + (right - mean).abs()))
            .sum::<f64>();
    let spread = spread * half.abs();
    let mut err = ((kronrod - gauss) * half).abs();
    if spread > 0.0 && err > 0.0 {
        err = spread * (200.0 * err / spread).powf(1.5).min(1.0);
    }
    (kronrod * half, err)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preemption::models::Exponential;

    #[test]
    fn integrates_smooth_and_kinked_functions() {
        let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * y.abs().max(1.0);
        assert!(close(integrate(f64::exp, 0.0, 3.0), 3f64.exp() - 1.0));
        assert!(close(integrate(|t| t * t, -1.0, 2.0), 3.0));
        // A kink off the bisection points.
        assert!(close(integrate(|t| (t - 0.3).abs(), 0.0, 1.0), 0.29));
        // A jump at the endpoint is never sampled.
        assert!(close(
            integrate(|t| if t < 1.0 { 1.0 } else { 5.0 }, 0.0, 1.0),
            1.0
        ));
        assert_eq!(integrate(f64::exp, 1.0, 1.0), 0.0);
        assert_eq!(integrate(f64::exp, 2.0, 1.0), 0.0);
    }

    #[test]
    fn numeric_defaults_match_the_exponential_closed_forms() {
        // Mean 2 h, no deadline; `Exponential` keeps the numeric defaults.
        let m = Exponential::new(0.5, f64::INFINITY).unwrap();
        assert!((m.mean_lifetime_h() - 2.0).abs() < 1e-10);
        // ∫_a^b t e^(−t/2)/2 dt = [−(t + 2) e^(−t/2)]_a^b.
        let pe = |a: f64, b: f64| (a + 2.0) * (-a / 2.0).exp() - (b + 2.0) * (-b / 2.0).exp();
        assert!((m.partial_expectation(1.0, 4.0) - pe(1.0, 4.0)).abs() < 1e-13);
        // Memoryless: E[(X − s)·1{s < X ≤ s + T}] = S(s) · E[X·1{X ≤ T}].
        for s in [0.0, 3.0, 30.0] {
            let want = m.survival(s) * pe(0.0, 5.0);
            let got = m.lost_work_moment(s, s + 5.0);
            assert!((got - want).abs() <= 1e-12 * want, "s={s}: {got} vs {want}");
        }
        assert_eq!(m.lost_work_moment(4.0, 3.0), 0.0);
    }
}
