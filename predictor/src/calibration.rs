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
//!
//! Residuals are exchangeable only while nothing drifts, and a cluster's
//! workload does (a burst of one user's jobs, a history that fills in).
//! So the level each quantile is read at adapts, per kind (adaptive
//! conformal inference, Gibbs and Candès, NeurIPS 2021): after each job
//! scored on calibrated quantiles it moves by [`STEP`] × (missed − (1 − q)),
//! up when the truth lay above the quantile more often than 1 − q of the
//! time, down when less, which holds the long-run share of misses at
//! 1 − q whatever the drift.

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
/// How far one scored job moves a level: small enough that a level moves
/// by a few points over hundreds of jobs, large enough to follow drift
/// within a day of a busy cluster.
pub const STEP: f64 = 0.005;

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
    /// The normalised residuals at the quantiles given, when they were
    /// calibrated ones (the model's own do not move the levels).
    given: Option<[f64; 4]>,
}

fn scale(estimate: &Estimate) -> f64 {
    if estimate.log_sd.is_finite() {
        estimate.log_sd.max(MIN_SCALE)
    } else {
        MIN_SCALE
    }
}

/// The most recent [`WINDOW`] residuals, in arrival order and sorted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Residuals {
    recent: VecDeque<f64>,
    sorted: Vec<f64>,
}

impl Residuals {
    pub(crate) fn push(&mut self, z: f64) {
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
    pub(crate) fn quantile(&self, level: f64) -> Option<f64> {
        let n = self.sorted.len();
        if n < MIN_RESIDUALS {
            return None;
        }
        let rank = ((n + 1) as f64 * level).ceil() as usize;
        (rank <= n).then(|| self.sorted[rank.max(1) - 1])
    }
}

/// Every kind's residuals and adapted levels.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Calibration {
    kinds: BTreeMap<Kind, Residuals>,
    /// The levels each kind's quantiles are read at, once adapted
    /// ([`Quantiles::LEVELS`] until then).
    levels: BTreeMap<Kind, [f64; 4]>,
}

impl Calibration {
    /// A job placed by `pending` truly had mean task runtime `truth_us`.
    pub fn learn(&mut self, pending: Pending, truth_us: f64) {
        if !(truth_us.is_finite() && truth_us > 0.0) {
            return;
        }
        let z = (truth_us.max(1.0).ln() - pending.ln_point) / pending.scale;
        if !z.is_finite() {
            return;
        }
        for kind in std::iter::once(pending.kind).chain(pending.kind.family()) {
            self.kinds.entry(kind).or_default().push(z);
        }
        if let Some(given) = pending.given {
            let levels = self.levels.entry(pending.kind).or_insert(Quantiles::LEVELS);
            for ((level, q), at) in levels.iter_mut().zip(Quantiles::LEVELS).zip(given) {
                let missed = if z > at { 1.0 } else { 0.0 };
                *level = (*level + STEP * (missed - (1.0 - q))).clamp(0.0, 1.0);
            }
        }
    }

    /// Replace `estimate`'s quantiles with calibrated ones where the
    /// residuals of its kind allow (the rest keep the model's own), and
    /// say what to score it by when its job ends.
    pub fn calibrate(&self, estimate: &mut Estimate) -> Pending {
        let kind = Kind::of(estimate.source);
        let scale = scale(estimate);
        let mut pending = Pending {
            kind,
            ln_point: estimate.mean_task_runtime_us.max(1.0).ln(),
            scale,
            given: None,
        };
        let Some(residuals) = std::iter::once(kind)
            .chain(kind.family())
            .filter_map(|k| self.kinds.get(&k))
            .find(|r| r.sorted.len() >= MIN_RESIDUALS)
        else {
            return pending;
        };
        let levels = self.levels.get(&kind).copied().unwrap_or(Quantiles::LEVELS);
        let own = Quantiles::NORMAL_Z.map(|z| z * estimate.log_sd / scale);
        let mut given = [0.0; 4];
        for (i, level) in levels.into_iter().enumerate() {
            given[i] = residuals.quantile(level).unwrap_or(own[i]);
        }
        // Mixed sources (a level beyond the window's reach) must still
        // rise with the level.
        for i in 1..given.len() {
            given[i] = given[i].max(given[i - 1]);
        }
        estimate.set_quantiles(Quantiles::from_array(given.map(|z| (z * scale).exp())));
        pending.given = Some(given);
        pending
    }
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand_distr::{Distribution, LogNormal};

    use super::*;

    /// Place a job by `estimate` and learn that it truly took `truth_us`.
    fn score(c: &mut Calibration, estimate: &Estimate, truth_us: f64) {
        let mut given = *estimate;
        let pending = c.calibrate(&mut given);
        c.learn(pending, truth_us);
    }

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
            score(&mut c, &e, 1000.0);
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
            score(&mut c, &e, truth.sample(&mut rng));
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
    fn levels_adapt_when_the_workload_drifts() {
        // Calibrated on 2,000 jobs around the point, then every job
        // becomes 1.5× longer. Over the next 600 jobs the window alone
        // misses the P90 24 % of the time, the adaptive levels 12 %.
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let e = history(100.0, 0.5);
        let before = LogNormal::new(100f64.ln(), 0.5).unwrap();
        let after = LogNormal::new(150f64.ln(), 0.5).unwrap();
        let run = |adapt: bool, rng: &mut rand_chacha::ChaCha8Rng| {
            let mut c = Calibration::default();
            for _ in 0..WINDOW {
                score(&mut c, &e, before.sample(rng));
            }
            let mut missed = 0;
            for _ in 0..600 {
                let mut given = e;
                let pending = c.calibrate(&mut given);
                let truth = after.sample(rng);
                missed += usize::from(truth > given.quantiles.unwrap().mean_task_runtime_us.p90);
                c.learn(pending, truth);
                if !adapt {
                    c.levels.clear();
                }
            }
            missed as f64 / 600.0
        };
        let fixed = run(false, &mut rng);
        let adaptive = run(true, &mut rng);
        assert!(fixed > 0.2, "the window alone misses {fixed}");
        assert!(adaptive < 0.15, "adaptive {adaptive} against {fixed}");
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
            score(&mut c, &one, 20.0);
            score(&mut c, &two, 20.0);
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
            score(&mut c, &one, 1000.0);
            score(&mut c, &many, 10.0);
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
