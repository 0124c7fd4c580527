//! Quantiles that mean what they say, learnt from the policy's own misses.
//!
//! Every estimate has a point and a spread (`log_sd`), but what the spread
//! means differs by source and is often wrong: a history's spread is that
//! of similar jobs, which a skewed or multimodal history misstates; two
//! pilots' spread says little about the tail; 3Sigma's utility point leans
//! short by design. Rather than trust each model, quantiles are calibrated
//! on the errors the policy actually made (split conformal prediction, run
//! online): when a job ends, its residual
//!
//! ```text
//! z = (ln truth − ln point) / max(log_sd, MIN_SCALE)
//! ```
//!
//! joins a bounded window of the most recent residuals of estimates of the
//! same kind ([`Kind`]: history, fallback, or pilots and posteriors by how
//! many pilots they rest on, so that few pilots get the wide tails they
//! deserve; while a pilot count has too few residuals, it borrows those of
//! every count together). The level-q quantile of a new estimate is then
//! `point × exp(scale × z_q)`, where `z_q` is the ⌈(n+1)q⌉-th smallest of
//! the n residuals: for residuals exchangeable with the new job's, the
//! truth lies at or below it with probability at least q. Until a kind has
//! [`MIN_RESIDUALS`], or where the window is too short for a level (the
//! rank exceeds n), the estimate's own log-normal quantile stands.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::decision::{Estimate, EstimateSource, Quantiles};

/// Residuals kept per kind: enough for a P99 (it needs 99), few enough to
/// follow drift within hours of a busy cluster.
pub const WINDOW: usize = 2000;
/// Residuals a kind needs before they replace the model's own quantiles.
pub const MIN_RESIDUALS: usize = 50;
/// Spreads below this (exact or near-exact estimates) normalise as this,
/// so a residual stays finite.
pub const MIN_SCALE: f64 = 0.05;

/// Estimates whose errors are alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    History,
    Fallback,
    /// Pilots (SLearn) or a posterior (Bayes) on this many pilots, 3 or
    /// more counted together; [`ANY`] pilots in a kind's family.
    Pilots(u8),
    Posterior(u8),
    Truth,
}

/// The pilot count of a family: every count together.
pub const ANY: u8 = u8::MAX;

impl Kind {
    pub fn of(source: EstimateSource) -> Kind {
        let bucket = |pilots: u32| pilots.min(3) as u8;
        match source {
            EstimateSource::History { .. } => Kind::History,
            EstimateSource::Fallback => Kind::Fallback,
            EstimateSource::Pilots { pilots } => Kind::Pilots(bucket(pilots)),
            EstimateSource::Posterior { pilots } => Kind::Posterior(bucket(pilots)),
            EstimateSource::Truth => Kind::Truth,
        }
    }

    /// The wider group a kind borrows residuals from while it has too few
    /// of its own: every pilot count together.
    fn family(self) -> Option<Kind> {
        match self {
            Kind::Pilots(n) if n != ANY => Some(Kind::Pilots(ANY)),
            Kind::Posterior(n) if n != ANY => Some(Kind::Posterior(ANY)),
            _ => None,
        }
    }
}

/// What is needed, when a job ends, to score the estimate it was placed by.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Pending {
    kind: Kind,
    ln_point: f64,
    scale: f64,
}

impl Pending {
    pub fn of(estimate: &Estimate) -> Pending {
        Pending {
            kind: Kind::of(estimate.source),
            ln_point: estimate.mean_task_runtime_us.max(1.0).ln(),
            scale: scale(estimate),
        }
    }
}

fn scale(estimate: &Estimate) -> f64 {
    if estimate.log_sd.is_finite() {
        estimate.log_sd.max(MIN_SCALE)
    } else {
        MIN_SCALE
    }
}

/// The recent residuals of one kind, in arrival order and sorted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct Residuals {
    recent: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl Residuals {
    fn push(&mut self, z: f64) {
        if self.recent.len() == WINDOW
            && let Some(old) = self.recent.pop_front()
        {
            let at = self.sorted.partition_point(|&v| v < old);
            self.sorted.remove(at);
        }
        self.recent.push_back(z);
        let at = self.sorted.partition_point(|&v| v < z);
        self.sorted.insert(at, z);
    }

    /// The conformal quantile at `level`, if there are enough residuals.
    fn quantile(&self, level: f64) -> Option<f64> {
        let n = self.sorted.len();
        if n < MIN_RESIDUALS {
            return None;
        }
        let rank = ((n + 1) as f64 * level).ceil() as usize;
        (rank <= n).then(|| self.sorted[rank.max(1) - 1])
    }
}

/// Every kind's residuals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    kinds: BTreeMap<Kind, Residuals>,
}

impl Calibration {
    /// A job placed by `pending` truly had mean task runtime `truth_us`.
    pub fn learn(&mut self, pending: Pending, truth_us: f64) {
        if !(truth_us.is_finite() && truth_us > 0.0) {
            return;
        }
        let z = (truth_us.max(1.0).ln() - pending.ln_point) / pending.scale;
        if z.is_finite() {
            for kind in std::iter::once(pending.kind).chain(pending.kind.family()) {
                self.kinds.entry(kind).or_default().push(z);
            }
        }
    }

    /// Replace `estimate`'s quantiles with calibrated ones where the
    /// residuals of its kind allow; the rest keep the model's own.
    pub fn calibrate(&self, estimate: &mut Estimate) {
        let kind = Kind::of(estimate.source);
        let Some(residuals) = std::iter::once(kind)
            .chain(kind.family())
            .filter_map(|k| self.kinds.get(&k))
            .find(|r| r.sorted.len() >= MIN_RESIDUALS)
        else {
            return;
        };
        let own = Quantiles::NORMAL_Z.map(|z| (z * estimate.log_sd).exp());
        let scale = scale(estimate);
        let mut factors = [0.0; 4];
        for (i, level) in Quantiles::LEVELS.into_iter().enumerate() {
            factors[i] = residuals
                .quantile(level)
                .map_or(own[i], |z| (z * scale).exp());
        }
        // Mixed sources (a level beyond the window's reach) must still
        // rise with the level.
        for i in 1..factors.len() {
            factors[i] = factors[i].max(factors[i - 1]);
        }
        estimate.set_quantiles(Quantiles::from_array(factors));
    }

    /// Residuals held, per kind.
    pub fn residuals(&self) -> impl Iterator<Item = (Kind, usize)> + '_ {
        self.kinds.iter().map(|(k, r)| (*k, r.recent.len()))
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};

    use super::*;

    fn history(point: f64, log_sd: f64) -> Estimate {
        let source = EstimateSource::History {
            feature: crate::features::FeatureKind::User,
        };
        Estimate::new(point, point * 10.0, log_sd, source)
    }

    #[test]
    fn the_models_own_quantiles_stand_until_there_are_enough_residuals() {
        let mut c = Calibration::default();
        let mut e = history(100.0, 1.0);
        let own = e.quantiles;
        for _ in 0..MIN_RESIDUALS - 1 {
            c.learn(Pending::of(&e), 1000.0);
        }
        c.calibrate(&mut e);
        assert_eq!(e.quantiles, own);
        let q = own.unwrap().mean_task_runtime_us;
        assert_eq!(q.p50, 100.0);
        assert!((q.p90 - 100.0 * 1.2815515655446004f64.exp()).abs() < 1e-9);
    }

    #[test]
    fn a_biased_and_too_confident_model_is_corrected() {
        // Truth is log-normal around 2× the point with spread 1, while the
        // model claims spread 0.1 around the point.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let truth = LogNormal::new(200f64.ln(), 1.0).unwrap();
        let mut c = Calibration::default();
        let e = history(100.0, 0.1);
        for _ in 0..WINDOW {
            c.learn(Pending::of(&e), truth.sample(&mut rng));
        }
        let mut calibrated = e;
        c.calibrate(&mut calibrated);
        let q = calibrated.quantiles.unwrap();
        // Close to the true quantiles: 200 × exp(z_q).
        for (got, z) in q
            .mean_task_runtime_us
            .to_array()
            .into_iter()
            .zip(Quantiles::NORMAL_Z)
        {
            let want = 200.0 * z.exp();
            assert!((got / want).ln().abs() < 0.15, "{got} vs {want}");
        }
        // The size's quantiles scale with the mean's.
        let ratio = q.size_us.to_array().map(|v| v / 10.0);
        for (s, m) in ratio.into_iter().zip(q.mean_task_runtime_us.to_array()) {
            assert!((s / m - 1.0).abs() < 1e-12);
        }
        // Coverage on fresh draws.
        let p90 = q.mean_task_runtime_us.p90;
        let covered = (0..10_000)
            .filter(|_| truth.sample(&mut rng) <= p90)
            .count();
        assert!((8_700..=9_300).contains(&covered), "{covered}");
    }

    #[test]
    fn the_window_keeps_the_most_recent_residuals_sorted() {
        let mut r = Residuals::default();
        for i in 0..WINDOW + 10 {
            r.push((WINDOW + 10 - i) as f64);
        }
        assert_eq!(r.recent.len(), WINDOW);
        assert_eq!(r.sorted.len(), WINDOW);
        assert!(r.sorted.windows(2).all(|w| w[0] <= w[1]));
        // The ten oldest (the largest) are gone.
        assert_eq!(r.sorted.last(), Some(&(WINDOW as f64)));
        // P99 of 1..=2000: the ⌈2001 × 0.99⌉ = 1981st.
        assert_eq!(r.quantile(0.99), Some(1981.0));
    }

    #[test]
    fn a_pilot_count_without_enough_residuals_borrows_its_familys() {
        let mut c = Calibration::default();
        let one = Estimate::new(10.0, 10.0, 0.1, EstimateSource::Pilots { pilots: 1 });
        let two = Estimate::new(10.0, 10.0, 0.1, EstimateSource::Pilots { pilots: 2 });
        for _ in 0..MIN_RESIDUALS / 2 {
            c.learn(Pending::of(&one), 20.0);
            c.learn(Pending::of(&two), 20.0);
        }
        let mut five = Estimate::new(10.0, 10.0, 0.1, EstimateSource::Pilots { pilots: 5 });
        c.calibrate(&mut five);
        // Every residual says twice the point.
        let q = five.quantiles.unwrap().mean_task_runtime_us;
        assert!(
            (q.p50 - 20.0).abs() < 1e-9 && (q.p90 - 20.0).abs() < 1e-9,
            "{q:?}"
        );
    }

    #[test]
    fn kinds_separate_few_pilots_from_many() {
        assert_eq!(
            Kind::of(EstimateSource::Pilots { pilots: 1 }),
            Kind::Pilots(1)
        );
        assert_eq!(
            Kind::of(EstimateSource::Pilots { pilots: 9 }),
            Kind::Pilots(3)
        );
        assert_eq!(
            Kind::of(EstimateSource::Posterior { pilots: 0 }),
            Kind::Posterior(0)
        );
        let mut c = Calibration::default();
        let one = Estimate::new(10.0, 10.0, 0.1, EstimateSource::Pilots { pilots: 1 });
        let many = Estimate::new(10.0, 10.0, 0.1, EstimateSource::Pilots { pilots: 5 });
        for _ in 0..MIN_RESIDUALS {
            c.learn(Pending::of(&one), 1000.0);
            c.learn(Pending::of(&many), 10.0);
        }
        let (mut a, mut b) = (one, many);
        c.calibrate(&mut a);
        c.calibrate(&mut b);
        let p90 = |e: Estimate| e.quantiles.unwrap().mean_task_runtime_us.p90;
        assert!((p90(a) - 1000.0).abs() < 1e-6, "one pilot: {a:?}");
        assert!(
            (p90(b) - 10.0).abs() < 1e-9,
            "many pilots keep their own: {b:?}"
        );
    }
}
