//! Baseline VM-lifetime models, to compare the bathtub model against.
//!
//! The paper (Fig. 1) fits the measured lifetimes with the memoryless
//! exponential, Weibull and Gompertz–Makeham distributions and shows that
//! none captures the deadline; its §6 also compares against preemptions
//! spread uniformly over the VM's life. This module owns those four models
//! and [`LifetimeModel`], the closed set of every model jobcast fits
//! (bathtub included), with the names the CLI and JSON use.
//!
//! Every baseline is made a proper distribution on `[0, L]` the same way as
//! [`Bathtub`]: its textbook CDF `F₀` on `[0, L)`, and the mass `1 − F₀(L)`
//! that `F₀` leaves beyond the provider's deadline `L` as a point mass at
//! `L` (VMs still alive at the deadline are preempted at it). With
//! `L = ∞` (allowed except for the uniform model) a baseline is its
//! textbook distribution. So all models answer the [`Lifetime`] questions
//! on the same footing, and a policy computed from any of them respects the
//! deadline. All times are in hours; rates in 1/hour.
//!
//! | model | `F₀(t)` | parameters |
//! |---|---|---|
//! | exponential | `1 − e^(−λt)` | `rate` λ |
//! | Weibull | `1 − e^(−(λt)^k)` | `lambda` λ, `k` |
//! | Gompertz–Makeham | `1 − exp(−λt − (α/β)(e^(βt) − 1))` | `lambda` λ, `alpha` α, `beta` β |
//! | uniform | `t / L` | none (`L` only) |

use super::bathtub::{Bathtub, BathtubError};
use super::lifetime::{Lifetime, integrate, numeric_lost_work_moment};
use serde::{Deserialize, Serialize};

/// The lifetime models jobcast fits, by their CLI and JSON names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ModelKind {
    Bathtub,
    Exponential,
    Weibull,
    GompertzMakeham,
    Uniform,
}

impl ModelKind {
    pub const ALL: [ModelKind; 5] = [
        ModelKind::Bathtub,
        ModelKind::Exponential,
        ModelKind::Weibull,
        ModelKind::GompertzMakeham,
        ModelKind::Uniform,
    ];

    /// Whether the model is defined by the provider's deadline `L` (the
    /// bathtub's late phase, the uniform's range), so cannot be fitted to
    /// lifetimes without one.
    pub fn needs_deadline(self) -> bool {
        matches!(self, ModelKind::Bathtub | ModelKind::Uniform)
    }

    pub fn name(self) -> &'static str {
        match self {
            ModelKind::Bathtub => "bathtub",
            ModelKind::Exponential => "exponential",
            ModelKind::Weibull => "weibull",
            ModelKind::GompertzMakeham => "gompertz-makeham",
            ModelKind::Uniform => "uniform",
        }
    }

    /// The names of the model's free parameters, in the order
    /// [`LifetimeModel::params`] and [`LifetimeModel::from_params`] use
    /// (the deadline `L` is not one of them: it is given, not fitted).
    pub fn param_names(self) -> &'static [&'static str] {
        match self {
            ModelKind::Bathtub => &["a", "tau1", "tau2", "b"],
            ModelKind::Exponential => &["rate"],
            ModelKind::Weibull => &["lambda", "k"],
            ModelKind::GompertzMakeham => &["lambda", "alpha", "beta"],
            ModelKind::Uniform => &[],
        }
    }
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for ModelKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        ModelKind::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ModelKind::ALL.iter().map(|m| m.name()).collect();
                format!(
                    "unknown lifetime model `{s}` (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// A model parameter is out of its domain.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    #[error(transparent)]
    Bathtub(#[from] BathtubError),
    #[error("{model} parameter `{param}` must be {requirement}, got {value}")]
    Param {
        model: ModelKind,
        param: &'static str,
        value: f64,
        requirement: &'static str,
    },
    #[error("{model} takes {expected} parameters, got {got}")]
    Arity {
        model: ModelKind,
        expected: usize,
        got: usize,
    },
}

fn positive(model: ModelKind, param: &'static str, value: f64) -> Result<(), ModelError> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(ModelError::Param {
            model,
            param,
            value,
            requirement: "finite and > 0",
        })
    }
}

/// The deadline may be infinite (no deadline) but must be positive.
fn deadline(model: ModelKind, value: f64) -> Result<(), ModelError> {
    if value > 0.0 {
        Ok(())
    } else {
        Err(ModelError::Param {
            model,
            param: "max_lifetime_h",
            value,
            requirement: "> 0 (may be infinite)",
        })
    }
}

/// The textbook survival `S₀ = 1 − F₀`, density `f₀` and hazard `h₀ = f₀/S₀`
/// of a baseline, which [`Truncated`] turns into a proper distribution on
/// `[0, L]`.
trait Base {
    fn max_lifetime(&self) -> f64;
    /// `S₀(t)` for `t ≥ 0`.
    fn base_survival(&self, t: f64) -> f64;
    /// `h₀(t)` for `t ≥ 0`.
    fn base_hazard(&self, t: f64) -> f64;
    /// `f₀(t) = h₀(t)·S₀(t)` for `t ≥ 0`.
    fn base_density(&self, t: f64) -> f64 {
        self.base_hazard(t) * self.base_survival(t)
    }
    /// `∫_a^b S₀(t) dt` for `0 ≤ a ≤ b`, where a closed form exists.
    fn integrated_base_survival(&self, _a: f64, _b: f64) -> Option<f64> {
        None
    }
}

/// The distribution every baseline shares: `S₀` on `[0, L)`, the rest of the
/// mass at `L`.
trait Truncated: Base {
    fn survival_at(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if t < 0.0 {
            1.0
        } else if t >= self.max_lifetime() {
            0.0
        } else {
            self.base_survival(t)
        }
    }

    fn density_at(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if (0.0..self.max_lifetime()).contains(&t) {
            self.base_density(t)
        } else {
            0.0
        }
    }

    fn hazard_at(&self, t: f64) -> f64 {
        if t.is_nan() {
            f64::NAN
        } else if t < 0.0 {
            0.0
        } else if t >= self.max_lifetime() {
            f64::INFINITY
        } else {
            self.base_hazard(t)
        }
    }

    /// `E[(X − s)·1{s < X ≤ u}] = ∫_s^min(u, L) (S(t) − S(u)) dt`, from the
    /// closed form of `∫ S₀` where the baseline has one (a risk score
    /// takes hundreds of these inside its expectation over the runtime),
    /// else by quadrature.
    fn lost_work_moment_at(&self, s_h: f64, u_h: f64) -> f64
    where
        Self: Sized + Lifetime,
    {
        let s = s_h.max(0.0);
        let end = u_h.min(self.max_lifetime());
        if end <= s {
            return 0.0;
        }
        let tail = self.survival_at(u_h);
        match self.integrated_base_survival(s, end) {
            // No tail beyond `u` (`u` past the deadline, or infinite): the
            // whole area.
            Some(area) if tail <= 0.0 => area,
            Some(area) => (area - (end - s) * tail).max(0.0),
            None => numeric_lost_work_moment(self, s_h, u_h),
        }
    }

    /// `P(T = L) = S₀(L)`: 0 without a deadline.
    fn deadline_mass_at(&self) -> f64 {
        let l = self.max_lifetime();
        if l.is_finite() {
            self.base_survival(l)
        } else {
            0.0
        }
    }
}

impl<T: Base> Truncated for T {}

/// The inherent methods every baseline shares, from [`Truncated`].
macro_rules! truncated_methods {
    ($($ty:ty),*) => {$(
        impl $ty {
            /// The deadline `L` in hours (infinite: none).
            pub fn max_lifetime_h(&self) -> f64 {
                self.max_lifetime_h
            }

            /// `S(t) = P(T > t)`: `S₀(t)` on `[0, L)`, 0 from `L` on.
            pub fn survival(&self, t: f64) -> f64 {
                self.survival_at(t)
            }

            /// The density of the continuous part, `f₀(t)` on `[0, L)`.
            pub fn density(&self, t: f64) -> f64 {
                self.density_at(t)
            }

            /// The hazard `h₀(t)` on `[0, L)`, infinite from `L` on.
            pub fn hazard(&self, t: f64) -> f64 {
                self.hazard_at(t)
            }

            /// The point mass at the deadline, `P(T = L) = S₀(L)`.
            pub fn deadline_mass(&self) -> f64 {
                self.deadline_mass_at()
            }

            /// `E[(X − s)·1{s < X ≤ u}]` ([`Lifetime::lost_work_moment`]).
            pub fn lost_work_moment(&self, s_h: f64, u_h: f64) -> f64 {
                self.lost_work_moment_at(s_h, u_h)
            }
        }
    )*};
}

truncated_methods!(Exponential, Weibull, GompertzMakeham, Uniform);

/// The memoryless model: a constant preemption rate λ until the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Exponential {
    rate: f64,
    max_lifetime_h: f64,
}

impl Exponential {
    /// `rate` λ in 1/hour (finite, > 0); `max_lifetime_h` may be infinite.
    pub fn new(rate: f64, max_lifetime_h: f64) -> Result<Self, ModelError> {
        positive(ModelKind::Exponential, "rate", rate)?;
        deadline(ModelKind::Exponential, max_lifetime_h)?;
        Ok(Exponential {
            rate,
            max_lifetime_h,
        })
    }

    /// The memoryless model with a given mean time to failure `1/λ` (hours).
    pub fn with_mttf(mttf_h: f64, max_lifetime_h: f64) -> Result<Self, ModelError> {
        positive(ModelKind::Exponential, "mttf_h", mttf_h)?;
        Exponential::new(1.0 / mttf_h, max_lifetime_h)
    }

    pub fn rate(&self) -> f64 {
        self.rate
    }

    pub fn cdf(&self, t: f64) -> f64 {
        if (0.0..self.max_lifetime_h).contains(&t) {
            // Exact for small t, where 1 − e^(−λt) would cancel.
            -(-self.rate * t).exp_m1()
        } else {
            1.0 - self.survival_at(t)
        }
    }

    /// `E[T] = ∫₀^L S(t) dt = (1 − e^(−λL))/λ` (`1/λ` without a deadline).
    pub fn mean(&self) -> f64 {
        -(-self.rate * self.max_lifetime_h).exp_m1() / self.rate
    }
}

impl Base for Exponential {
    fn max_lifetime(&self) -> f64 {
        self.max_lifetime_h
    }
    fn base_survival(&self, t: f64) -> f64 {
        (-self.rate * t).exp()
    }
    /// `(e^(−λa) − e^(−λb))/λ`.
    fn integrated_base_survival(&self, a: f64, b: f64) -> Option<f64> {
        let l = self.rate;
        Some((-l * a).exp() * -(-l * (b - a)).exp_m1() / l)
    }
    fn base_hazard(&self, _t: f64) -> f64 {
        self.rate
    }
}

/// The Weibull model `F₀(t) = 1 − e^(−(λt)^k)`: a hazard that falls
/// (`k < 1`) or rises (`k > 1`) as a power of age. Its density is infinite
/// at `t = 0` when `k < 1`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Weibull {
    lambda: f64,
    k: f64,
    max_lifetime_h: f64,
}

impl Weibull {
    /// `lambda` λ in 1/hour and shape `k`, both finite and > 0.
    pub fn new(lambda: f64, k: f64, max_lifetime_h: f64) -> Result<Self, ModelError> {
        positive(ModelKind::Weibull, "lambda", lambda)?;
        positive(ModelKind::Weibull, "k", k)?;
        deadline(ModelKind::Weibull, max_lifetime_h)?;
        Ok(Weibull {
            lambda,
            k,
            max_lifetime_h,
        })
    }

    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    pub fn k(&self) -> f64 {
        self.k
    }

    pub fn cdf(&self, t: f64) -> f64 {
        if (0.0..self.max_lifetime_h).contains(&t) {
            -(-(self.lambda * t).powf(self.k)).exp_m1()
        } else {
            1.0 - self.survival_at(t)
        }
    }

    /// `E[T] = ∫₀^L S(t) dt`: `Γ(1 + 1/k)/λ` without a deadline, by
    /// quadrature with one.
    pub fn mean(&self) -> f64 {
        if self.max_lifetime_h.is_finite() {
            integrate(|t| self.base_survival(t), 0.0, self.max_lifetime_h)
        } else {
            ln_gamma(1.0 + 1.0 / self.k).exp() / self.lambda
        }
    }
}

impl Base for Weibull {
    fn max_lifetime(&self) -> f64 {
        self.max_lifetime_h
    }
    fn base_survival(&self, t: f64) -> f64 {
        (-(self.lambda * t).powf(self.k)).exp()
    }
    /// `Γ(1/k)/(λk)·[P(1/k, (λb)^k) − P(1/k, (λa)^k)]`, with `P` the
    /// regularised lower incomplete gamma function (`= Q(1/k, (λa)^k) −
    /// Q(1/k, (λb)^k)` with the upper one).
    fn integrated_base_survival(&self, a: f64, b: f64) -> Option<f64> {
        let shape = 1.0 / self.k;
        let gamma = |t: f64| incomplete_gamma(shape, (self.lambda * t).powf(self.k));
        let ((p_a, q_a), (p_b, q_b)) = (gamma(a), gamma(b));
        // The difference of the small ones: of `P` in the body, of `Q` in
        // the tail, where `P` is 1 to round-off.
        let between = if q_a < p_a { q_a - q_b } else { p_b - p_a };
        let area = ln_gamma(shape).exp() / (self.lambda * self.k) * between;
        area.is_finite().then_some(area.max(0.0))
    }
    fn base_hazard(&self, t: f64) -> f64 {
        self.k * self.lambda * (self.lambda * t).powf(self.k - 1.0)
    }
}

/// The Gompertz–Makeham model: a constant (Makeham) hazard λ plus an
/// exponentially ageing (Gompertz) one, `h₀(t) = λ + α·e^(βt)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GompertzMakeham {
    lambda: f64,
    alpha: f64,
    beta: f64,
    max_lifetime_h: f64,
}

impl GompertzMakeham {
    /// `lambda` λ and `alpha` α (1/hour) finite and ≥ 0, not both 0; `beta`
    /// β (1/hour) finite and > 0.
    pub fn new(
        lambda: f64,
        alpha: f64,
        beta: f64,
        max_lifetime_h: f64,
    ) -> Result<Self, ModelError> {
        let model = ModelKind::GompertzMakeham;
        for (param, value) in [("lambda", lambda), ("alpha", alpha)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(ModelError::Param {
                    model,
                    param,
                    value,
                    requirement: "finite and ≥ 0",
                });
            }
        }
        if lambda + alpha == 0.0 {
            // A zero hazard is no lifetime distribution at all.
            return Err(ModelError::Param {
                model,
                param: "alpha",
                value: alpha,
                requirement: "> 0 when lambda is 0",
            });
        }
        positive(model, "beta", beta)?;
        deadline(model, max_lifetime_h)?;
        Ok(GompertzMakeham {
            lambda,
            alpha,
            beta,
            max_lifetime_h,
        })
    }

    pub fn lambda(&self) -> f64 {
        self.lambda
    }

    pub fn alpha(&self) -> f64 {
        self.alpha
    }

    pub fn beta(&self) -> f64 {
        self.beta
    }

    /// The cumulative hazard `H₀(t) = λt + (α/β)(e^(βt) − 1)`.
    fn cumulative_hazard(&self, t: f64) -> f64 {
        self.lambda * t + self.alpha / self.beta * (self.beta * t).exp_m1()
    }

    pub fn cdf(&self, t: f64) -> f64 {
        if (0.0..self.max_lifetime_h).contains(&t) {
            -(-self.cumulative_hazard(t)).exp_m1()
        } else {
            1.0 - self.survival_at(t)
        }
    }

    /// `E[T] = ∫₀^L S(t) dt` by quadrature; without a deadline the
    /// integral stops where `S` has fallen below 1e-17.
    pub fn mean(&self) -> f64 {
        let mut end = self.max_lifetime_h;
        if !end.is_finite() {
            // H₀ grows at least linearly (λ > 0) or exponentially (α > 0),
            // so doubling reaches a negligible tail in a few dozen steps.
            end = 1.0;
            while self.base_survival(end) > 1e-17 {
                end *= 2.0;
            }
        }
        integrate(|t| self.base_survival(t), 0.0, end)
    }
}

impl Base for GompertzMakeham {
    fn max_lifetime(&self) -> f64 {
        self.max_lifetime_h
    }
    fn base_survival(&self, t: f64) -> f64 {
        (-self.cumulative_hazard(t)).exp()
    }
    fn base_hazard(&self, t: f64) -> f64 {
        self.lambda + self.alpha * (self.beta * t).exp()
    }
}

/// Preemptions spread uniformly over `[0, L]` (the paper's §6 strawman). Its
/// hazard `1/(L − t)` rises without bound towards the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Uniform {
    max_lifetime_h: f64,
}

impl Uniform {
    /// `max_lifetime_h` `L` must be finite and > 0.
    pub fn new(max_lifetime_h: f64) -> Result<Self, ModelError> {
        positive(ModelKind::Uniform, "max_lifetime_h", max_lifetime_h)?;
        Ok(Uniform { max_lifetime_h })
    }

    pub fn cdf(&self, t: f64) -> f64 {
        1.0 - self.survival_at(t)
    }

    pub fn mean(&self) -> f64 {
        self.max_lifetime_h / 2.0
    }
}

impl Base for Uniform {
    fn max_lifetime(&self) -> f64 {
        self.max_lifetime_h
    }
    fn base_survival(&self, t: f64) -> f64 {
        1.0 - t / self.max_lifetime_h
    }
    fn base_hazard(&self, t: f64) -> f64 {
        1.0 / (self.max_lifetime_h - t)
    }
}

/// Any of the lifetime models jobcast fits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum LifetimeModel {
    Bathtub(Bathtub),
    Exponential(Exponential),
    Weibull(Weibull),
    GompertzMakeham(GompertzMakeham),
    Uniform(Uniform),
}

impl LifetimeModel {
    /// Build a model of `kind` from its free parameters (in
    /// [`ModelKind::param_names`] order) and the deadline `L`.
    pub fn from_params(
        kind: ModelKind,
        params: &[f64],
        max_lifetime_h: f64,
    ) -> Result<Self, ModelError> {
        let expected = kind.param_names().len();
        if params.len() != expected {
            return Err(ModelError::Arity {
                model: kind,
                expected,
                got: params.len(),
            });
        }
        let l = max_lifetime_h;
        Ok(match kind {
            ModelKind::Bathtub => {
                LifetimeModel::Bathtub(Bathtub::new(params[0], params[1], params[2], params[3], l)?)
            }
            ModelKind::Exponential => LifetimeModel::Exponential(Exponential::new(params[0], l)?),
            ModelKind::Weibull => LifetimeModel::Weibull(Weibull::new(params[0], params[1], l)?),
            ModelKind::GompertzMakeham => LifetimeModel::GompertzMakeham(GompertzMakeham::new(
                params[0], params[1], params[2], l,
            )?),
            ModelKind::Uniform => LifetimeModel::Uniform(Uniform::new(l)?),
        })
    }

    pub fn kind(&self) -> ModelKind {
        match self {
            LifetimeModel::Bathtub(_) => ModelKind::Bathtub,
            LifetimeModel::Exponential(_) => ModelKind::Exponential,
            LifetimeModel::Weibull(_) => ModelKind::Weibull,
            LifetimeModel::GompertzMakeham(_) => ModelKind::GompertzMakeham,
            LifetimeModel::Uniform(_) => ModelKind::Uniform,
        }
    }

    /// The free parameters, in [`ModelKind::param_names`] order.
    pub fn params(&self) -> Vec<f64> {
        match self {
            LifetimeModel::Bathtub(m) => vec![m.a(), m.tau1(), m.tau2(), m.b()],
            LifetimeModel::Exponential(m) => vec![m.rate()],
            LifetimeModel::Weibull(m) => vec![m.lambda(), m.k()],
            LifetimeModel::GompertzMakeham(m) => vec![m.lambda(), m.alpha(), m.beta()],
            LifetimeModel::Uniform(_) => vec![],
        }
    }

    /// `(name, value)` for each free parameter.
    pub fn named_params(&self) -> Vec<(&'static str, f64)> {
        self.kind()
            .param_names()
            .iter()
            .copied()
            .zip(self.params())
            .collect()
    }

    pub fn cdf(&self, t: f64) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.cdf(t),
            LifetimeModel::Exponential(m) => m.cdf(t),
            LifetimeModel::Weibull(m) => m.cdf(t),
            LifetimeModel::GompertzMakeham(m) => m.cdf(t),
            LifetimeModel::Uniform(m) => m.cdf(t),
        }
    }

    pub fn survival(&self, t: f64) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.survival(t),
            LifetimeModel::Exponential(m) => m.survival(t),
            LifetimeModel::Weibull(m) => m.survival(t),
            LifetimeModel::GompertzMakeham(m) => m.survival(t),
            LifetimeModel::Uniform(m) => m.survival(t),
        }
    }

    /// The density of the continuous part (the point mass at `L` excluded).
    pub fn density(&self, t: f64) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.density(t),
            LifetimeModel::Exponential(m) => m.density(t),
            LifetimeModel::Weibull(m) => m.density(t),
            LifetimeModel::GompertzMakeham(m) => m.density(t),
            LifetimeModel::Uniform(m) => m.density(t),
        }
    }

    pub fn hazard(&self, t: f64) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.hazard(t),
            LifetimeModel::Exponential(m) => m.hazard(t),
            LifetimeModel::Weibull(m) => m.hazard(t),
            LifetimeModel::GompertzMakeham(m) => m.hazard(t),
            LifetimeModel::Uniform(m) => m.hazard(t),
        }
    }

    /// The expected lifetime `E[T]` in hours, the point mass at `L` included.
    pub fn mean(&self) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.mean(),
            LifetimeModel::Exponential(m) => m.mean(),
            LifetimeModel::Weibull(m) => m.mean(),
            LifetimeModel::GompertzMakeham(m) => m.mean(),
            LifetimeModel::Uniform(m) => m.mean(),
        }
    }

    pub fn max_lifetime_h(&self) -> f64 {
        match self {
            LifetimeModel::Bathtub(m) => m.max_lifetime_h(),
            LifetimeModel::Exponential(m) => m.max_lifetime_h(),
            LifetimeModel::Weibull(m) => m.max_lifetime_h(),
            LifetimeModel::GompertzMakeham(m) => m.max_lifetime_h(),
            LifetimeModel::Uniform(m) => m.max_lifetime_h(),
        }
    }
}

macro_rules! impl_lifetime {
    ($($ty:ty),*) => {$(
        impl Lifetime for $ty {
            fn cdf(&self, t_h: f64) -> f64 {
                <$ty>::cdf(self, t_h)
            }
            fn density(&self, t_h: f64) -> f64 {
                <$ty>::density(self, t_h)
            }
            fn max_lifetime_h(&self) -> f64 {
                <$ty>::max_lifetime_h(self)
            }
            fn survival(&self, t_h: f64) -> f64 {
                <$ty>::survival(self, t_h)
            }
            fn mean_lifetime_h(&self) -> f64 {
                <$ty>::mean(self)
            }
            fn lost_work_moment(&self, s_h: f64, u_h: f64) -> f64 {
                <$ty>::lost_work_moment(self, s_h, u_h)
            }
        }
    )*};
}

impl_lifetime!(Exponential, Weibull, GompertzMakeham, Uniform);

impl LifetimeModel {
    /// The model inside, as a [`Lifetime`]: its closed forms where it has
    /// them (the bathtub's partial expectations), not the numerical
    /// defaults.
    fn inner(&self) -> &dyn Lifetime {
        match self {
            LifetimeModel::Bathtub(m) => m,
            LifetimeModel::Exponential(m) => m,
            LifetimeModel::Weibull(m) => m,
            LifetimeModel::GompertzMakeham(m) => m,
            LifetimeModel::Uniform(m) => m,
        }
    }
}

impl Lifetime for LifetimeModel {
    fn cdf(&self, t_h: f64) -> f64 {
        self.inner().cdf(t_h)
    }
    fn density(&self, t_h: f64) -> f64 {
        self.inner().density(t_h)
    }
    fn max_lifetime_h(&self) -> f64 {
        self.inner().max_lifetime_h()
    }
    fn survival(&self, t_h: f64) -> f64 {
        self.inner().survival(t_h)
    }
    fn mean_lifetime_h(&self) -> f64 {
        self.inner().mean_lifetime_h()
    }
    fn partial_expectation(&self, a_h: f64, b_h: f64) -> f64 {
        self.inner().partial_expectation(a_h, b_h)
    }
    fn lost_work_moment(&self, s_h: f64, u_h: f64) -> f64 {
        self.inner().lost_work_moment(s_h, u_h)
    }
}

/// `(P(a, x), Q(a, x))`: the regularised lower and upper incomplete gamma
/// functions `γ(a, x)/Γ(a)` and `Γ(a, x)/Γ(a)`, for `a > 0`, `x ≥ 0`. `P`
/// by its series below `x = a + 1`, `Q` by its continued fraction
/// (modified Lentz) above (Press et al., Numerical Recipes, §6.2), each to
/// round-off; the other as its complement, so that the small one of the
/// two is always accurate.
fn incomplete_gamma(a: f64, x: f64) -> (f64, f64) {
    if x <= 0.0 {
        return (0.0, 1.0);
    }
    if x.is_infinite() {
        return (1.0, 0.0);
    }
    let prefix = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut term, mut sum, mut n) = (1.0 / a, 1.0 / a, a);
        for _ in 0..10_000 {
            n += 1.0;
            term *= x / n;
            sum += term;
            if term.abs() < sum.abs() * f64::EPSILON {
                break;
            }
        }
        let p = (sum * prefix).min(1.0);
        (p, 1.0 - p)
    } else {
        const TINY: f64 = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / TINY;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..10_000 {
            let an = -f64::from(i) * (f64::from(i) - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < TINY {
                d = TINY;
            }
            c = b + an / c;
            if c.abs() < TINY {
                c = TINY;
            }
            d = 1.0 / d;
            let delta = d * c;
            h *= delta;
            if (delta - 1.0).abs() < f64::EPSILON {
                break;
            }
        }
        let q = (prefix * h).clamp(0.0, 1.0);
        (1.0 - q, q)
    }
}

/// `ln Γ(x)` for `x > 0` (Lanczos, g = 7, 9 terms; relative error ~1e-15).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEF: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1 − x) = π / sin(πx).
        (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x)
    } else {
        let x = x - 1.0;
        let t = x + G + 0.5;
        let sum = COEF[0]
            + COEF[1..]
                .iter()
                .enumerate()
                .map(|(i, c)| c / (x + i as f64 + 1.0))
                .sum::<f64>();
        0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn closed_form_lost_work_matches_quadrature() {
        let models: Vec<Box<dyn Lifetime>> = vec![
            Box::new(Exponential::new(0.6, f64::INFINITY).unwrap()),
            Box::new(Exponential::new(0.1, 24.0).unwrap()),
            Box::new(Weibull::new(0.6, 0.7, f64::INFINITY).unwrap()),
            Box::new(Weibull::new(0.05, 2.5, 24.0).unwrap()),
            Box::new(Weibull::new(1.3, 1.0, f64::INFINITY).unwrap()),
        ];
        for m in &models {
            for (s, u) in [
                (0.0, 0.5),
                (0.0, 3.0),
                (5.0, 8.0),
                (20.0, 30.0),
                (0.1, 200.0),
            ] {
                let closed = m.lost_work_moment(s, u);
                let numeric = numeric_lost_work_moment(m.as_ref(), s, u);
                assert!(
                    (closed - numeric).abs() <= 1e-9 * numeric.abs().max(1e-3),
                    "({s}, {u}): {closed} against {numeric}"
                );
            }
        }
        // Far in the tail, where P is 1 to round-off: λ = 1, k = 2, from 7
        // to 8 h loses √π/2·(erfc 7 − erfc 8) − e^(−64) h, with S(7) =
        // e^(−49): 0.0707 h once alive at 7 h.
        let w = Weibull::new(1.0, 2.0, f64::INFINITY).unwrap();
        let conditional = w.lost_work_moment(7.0, 8.0) / w.survival(7.0);
        assert!((conditional - 0.070_7).abs() < 1e-3, "{conditional}");
        // Without a tail the whole area: ∫_2^∞ e^(−0.6t) dt = e^(−1.2)/0.6.
        let e = Exponential::new(0.6, f64::INFINITY).unwrap();
        let whole = e.lost_work_moment(2.0, f64::INFINITY);
        assert!((whole - (-1.2f64).exp() / 0.6).abs() < 1e-12, "{whole}");
        // P(a, x) at known points: P(1, x) = 1 − e^(−x); P(0.5, x) = erf(√x).
        assert!((incomplete_gamma(1.0, 2.0).0 - (1.0 - (-2f64).exp())).abs() < 1e-14);
        assert!((incomplete_gamma(0.5, 1.0).0 - 0.842_700_792_949_714_9).abs() < 1e-13);
        assert!((incomplete_gamma(1.0, 40.0).1 - (-40f64).exp()).abs() < 1e-28);
        assert_eq!(incomplete_gamma(2.0, 0.0), (0.0, 1.0));
    }

    fn models() -> Vec<LifetimeModel> {
        vec![
            LifetimeModel::Bathtub(Bathtub::default()),
            LifetimeModel::Exponential(Exponential::new(0.1, 24.0).unwrap()),
            LifetimeModel::Exponential(Exponential::new(0.5, f64::INFINITY).unwrap()),
            LifetimeModel::Weibull(Weibull::new(0.08, 0.6, 24.0).unwrap()),
            LifetimeModel::Weibull(Weibull::new(0.1, 2.5, f64::INFINITY).unwrap()),
            LifetimeModel::GompertzMakeham(GompertzMakeham::new(0.05, 1e-3, 0.3, 24.0).unwrap()),
            LifetimeModel::GompertzMakeham(
                GompertzMakeham::new(0.0, 0.02, 0.2, f64::INFINITY).unwrap(),
            ),
            LifetimeModel::Uniform(Uniform::new(24.0).unwrap()),
        ]
    }

    /// Where the continuous part ends (`L`, or far into the tail).
    fn support_end(m: &LifetimeModel) -> f64 {
        let l = m.max_lifetime_h();
        if l.is_finite() { l } else { 200.0 }
    }

    #[test]
    fn names_round_trip() {
        for kind in ModelKind::ALL {
            assert_eq!(kind.name().parse::<ModelKind>(), Ok(kind));
        }
        assert!(
            "gompertz"
                .parse::<ModelKind>()
                .unwrap_err()
                .contains("weibull")
        );
    }

    #[test]
    fn textbook_forms() {
        let e = Exponential::new(0.2, 24.0).unwrap();
        assert!((e.cdf(3.0) - (1.0 - (-0.6f64).exp())).abs() < 1e-15);
        assert_eq!(e.hazard(5.0), 0.2);
        assert!((e.deadline_mass() - (-4.8f64).exp()).abs() < 1e-15);
        let w = Weibull::new(0.1, 2.0, 24.0).unwrap();
        assert!((w.cdf(5.0) - (1.0 - (-0.25f64).exp())).abs() < 1e-15);
        assert!((w.hazard(5.0) - 2.0 * 0.1 * 0.5).abs() < 1e-15);
        let g = GompertzMakeham::new(0.05, 0.01, 0.5, 24.0).unwrap();
        let h = 0.05 * 2.0 + 0.01 / 0.5 * (1f64.exp() - 1.0);
        assert!((g.cdf(2.0) - (1.0 - (-h).exp())).abs() < 1e-15);
        assert!((g.hazard(2.0) - (0.05 + 0.01 * 1f64.exp())).abs() < 1e-15);
        let u = Uniform::new(24.0).unwrap();
        assert_eq!(
            (u.cdf(6.0), u.density(6.0), u.mean()),
            (0.25, 1.0 / 24.0, 12.0)
        );
        assert_eq!(u.hazard(18.0), 1.0 / 6.0);
    }

    #[test]
    fn proper_distributions_with_the_rest_at_the_deadline() {
        for m in models() {
            let end = support_end(&m);
            assert_eq!(m.cdf(-1.0), 0.0, "{m:?}");
            assert_eq!(m.cdf(0.0), 0.0, "{m:?}");
            assert!(m.cdf(f64::NAN).is_nan());
            if m.max_lifetime_h().is_finite() {
                assert_eq!(m.cdf(end), 1.0, "{m:?}");
                assert_eq!(m.hazard(end), f64::INFINITY, "{m:?}");
            }
            let mut prev = 0.0;
            for i in 0..=1000 {
                let t = f64::from(i) * end / 1000.0;
                let g = m.cdf(t);
                assert!((0.0..=1.0).contains(&g) && g >= prev, "{m:?} t={t}");
                assert!((m.survival(t) - (1.0 - g)).abs() < 1e-12, "{m:?} t={t}");
                prev = g;
            }
        }
    }

    #[test]
    fn density_and_hazard_match_the_cdf() {
        for m in models() {
            let end = support_end(&m);
            let h = 1e-6;
            let mut t = 0.05;
            while t < end - 0.05 {
                let numeric = (m.cdf(t + h) - m.cdf(t - h)) / (2.0 * h);
                let exact = m.density(t);
                assert!(
                    (numeric - exact).abs() <= 1e-5 * exact.max(1e-3),
                    "{m:?} t={t}: {numeric} vs {exact}"
                );
                if m.survival(t) > 1e-6 {
                    let hazard = exact / m.survival(t);
                    assert!(
                        (m.hazard(t) - hazard).abs() <= 1e-9 * hazard.max(1.0),
                        "{m:?} t={t}"
                    );
                }
                t += 0.05;
            }
        }
    }

    #[test]
    fn mean_is_the_integral_of_the_survival() {
        for m in models() {
            // Composite midpoint rule, independent of the adaptive quadrature.
            let end = support_end(&m);
            let n = 400_000;
            let h = end / f64::from(n);
            let numeric: f64 = (0..n)
                .map(|i| m.survival((f64::from(i) + 0.5) * h) * h)
                .sum();
            assert!(
                (numeric - m.mean()).abs() < 1e-6,
                "{m:?}: {numeric} vs {}",
                m.mean()
            );
        }
        // Closed forms without a deadline.
        assert!((Exponential::with_mttf(3.0, f64::INFINITY).unwrap().mean() - 3.0).abs() < 1e-12);
        // Γ(1 + 1/2) = √π / 2.
        let w = Weibull::new(0.5, 2.0, f64::INFINITY).unwrap();
        assert!((w.mean() - std::f64::consts::PI.sqrt()).abs() < 1e-12);
        assert!((ln_gamma(5.0) - 24f64.ln()).abs() < 1e-12);
        assert!((ln_gamma(0.25) - 3.625_609_908_221_908f64.ln()).abs() < 1e-12);
    }

    #[test]
    fn params_round_trip_and_errors_name_the_parameter() {
        for m in models() {
            let back =
                LifetimeModel::from_params(m.kind(), &m.params(), m.max_lifetime_h()).unwrap();
            assert_eq!(back, m);
            assert_eq!(m.named_params().len(), m.kind().param_names().len());
        }
        let err = LifetimeModel::from_params(ModelKind::Weibull, &[0.1, -1.0], 24.0).unwrap_err();
        assert!(err.to_string().contains("`k`"), "{err}");
        let err = LifetimeModel::from_params(ModelKind::Bathtub, &[0.0, 1.0, 0.8, 24.0], 24.0)
            .unwrap_err();
        assert!(matches!(err, ModelError::Bathtub(_)), "{err}");
        let err = LifetimeModel::from_params(ModelKind::Exponential, &[], 24.0).unwrap_err();
        assert!(
            matches!(
                err,
                ModelError::Arity {
                    expected: 1,
                    got: 0,
                    ..
                }
            ),
            "{err}"
        );
        assert!(Uniform::new(f64::INFINITY).is_err());
        assert!(GompertzMakeham::new(0.0, 0.0, 1.0, 24.0).is_err());
        assert!(Exponential::new(1.0, 0.0).is_err());
    }
}
