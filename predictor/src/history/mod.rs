//! 3Sigma-style learning in time: per feature value, the recent jobs' mean
//! task runtimes; per feature value, how accurate its predictions have been;
//! a prediction uses the job's most accurate feature value.
//!
//! Each feature value keeps the mean task runtimes of its jobs that ended
//! within the sliding window (3 days by default, the best window for the
//! Google traces), capped at the most recent `max_samples` of them. A
//! bounded sample deque is used rather than a histogram sketch because the
//! window must *forget*: expiry is exact and cheap here, while sketches
//! (HDR, DDSketch, t-digest) can merge but not subtract old data without
//! keeping one sketch per time slice per value, which costs far more memory
//! for the many feature values that see only a few jobs.
//!
//! Estimates integrate a utility over the runtime distribution (SLearn §4.3:
//! utility ∝ 1/runtime², to minimise the average JCT): the estimate is the
//! certainty equivalent r* with u(r*) = E[u(R)], i.e. (mean r⁻ᵖ)^(−1/p).
//! Point-Est uses the median instead.
//!
//! Errors are tracked prequentially: when a job ends, each of its feature
//! values is scored on what it would have predicted just before learning
//! from that job; no per-job prediction needs to be remembered.
//!
//! Cost: this runs once per job end for six feature values and once per
//! arrival, on the service's hot path. Each sample's r⁻ᵖ and ln r are
//! computed once, when it is learnt; each value keeps running sums of r⁻ᵖ,
//! ln r and (ln r)² (kept within 3·10⁻¹¹ of the exact sums, see
//! `RunningSum`), so the prequential scores and the utility estimate and
//! spread of an arrival cost O(1) per value; only Point-Est's median walks
//! the samples, and an arrival summarises only the one value it chooses.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use foldhash::{HashMap, HashMapExt};
use serde::{Deserialize, Serialize};

use crate::codec::{Reader, Writer};
use crate::decision::EstimateSource;
use crate::features::{FeatureKind, JobFeatures};
use crate::stats::median;
use jobcast_ingest::config::ConfigError;

mod slot;
use slot::Slot;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryConfig {
    /// Sliding window over job end times, µs.
    pub window_us: u64,
    /// Most recent jobs kept per feature value.
    pub max_samples: usize,
    /// The utility exponent p of u(r) = r^(−p).
    pub utility_power: f64,
    /// Mean task runtime assumed when nothing at all is known, µs.
    pub default_mean_task_runtime_us: f64,
    /// Spread (sd of ln runtime) assumed for estimates from fewer than two
    /// samples.
    pub default_log_sd: f64,
    /// Weight of the newest error in each feature value's running error.
    pub error_smoothing: f64,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            window_us: 3 * 24 * 3_600_000_000,
            max_samples: 256,
            utility_power: 2.0,
            default_mean_task_runtime_us: 60e6,
            default_log_sd: 1.0,
            error_smoothing: 0.2,
        }
    }
}

impl HistoryConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.window_us == 0 {
            return Err(ConfigError::new("window_us", "must be positive"));
        }
        if self.max_samples == 0 {
            return Err(ConfigError::new("max_samples", "must be positive"));
        }
        if !(self.utility_power.is_finite() && self.utility_power > 0.0) {
            return Err(ConfigError::new(
                "utility_power",
                format!("must be positive, got {}", self.utility_power),
            ));
        }
        if !(self.default_mean_task_runtime_us.is_finite()
            && self.default_mean_task_runtime_us > 0.0)
        {
            return Err(ConfigError::new(
                "default_mean_task_runtime_us",
                format!(
                    "must be positive, got {}",
                    self.default_mean_task_runtime_us
                ),
            ));
        }
        if !(self.error_smoothing > 0.0 && self.error_smoothing <= 1.0) {
            return Err(ConfigError::new(
                "error_smoothing",
                format!("must be in (0, 1], got {}", self.error_smoothing),
            ));
        }
        Ok(())
    }
}

/// How a distribution becomes one number.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Estimator {
    /// 3Sigma: the utility-weighted certainty equivalent.
    Utility,
    /// Point-Est: the median.
    Median,
}

/// A history-based estimate of a job's mean task runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HistoryEstimate {
    pub mean_task_runtime_us: f64,
    /// Standard deviation of ln(mean task runtime) among the similar jobs.
    pub log_sd: f64,
    /// Similar jobs the estimate rests on (0 for the configured default).
    pub samples: usize,
    pub source: EstimateSource,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct RunningError {
    mean_abs_log_error: f64,
    count: u64,
}

impl RunningError {
    fn update(&mut self, err: f64, smoothing: f64) {
        self.count += 1;
        // Plain mean until there are enough points, then exponential
        // smoothing so that the error follows drift.
        let w = (1.0 / self.count as f64).max(smoothing);
        self.mean_abs_log_error += w * (err - self.mean_abs_log_error);
    }
}

/// One job in a value's history, with the terms the estimates need
/// computed once when it is learnt rather than at every estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    end_us: u64,
    mean_task_runtime_us: f64,
    /// r⁻ᵖ, the job's utility.
    utility: f64,
    /// ln r, for the spread.
    ln_runtime: f64,
}

impl Sample {
    fn new(end_us: u64, mean_task_runtime_us: f64, utility_power: f64) -> Self {
        Sample {
            end_us,
            mean_task_runtime_us,
            utility: mean_task_runtime_us.powf(-utility_power),
            ln_runtime: mean_task_runtime_us.ln(),
        }
    }
}

/// A sample's serde form: what was learnt, without the two terms derived
/// from it. Decoding computes them again ([`ValueForm::into_value`]) by the
/// same operations on the same inputs, so bit for bit; leaving them out
/// halves the history in a snapshot, which is nearly all of it.
#[derive(Serialize, Deserialize)]
struct LearntJob {
    end_us: u64,
    mean_task_runtime_us: f64,
}

impl Serialize for Sample {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        LearntJob {
            end_us: self.end_us,
            mean_task_runtime_us: self.mean_task_runtime_us,
        }
        .serialize(serializer)
    }
}

/// Decodes a [`LearntJob`] into the sample it will be, its derived terms
/// not yet known (NaN): only [`ValueForm`] decodes samples, and its
/// `into_value` computes them in place, with no second allocation.
impl<'de> Deserialize<'de> for Sample {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let job = LearntJob::deserialize(deserializer)?;
        Ok(Sample {
            end_us: job.end_us,
            mean_task_runtime_us: job.mean_task_runtime_us,
            utility: f64::NAN,
            ln_runtime: f64::NAN,
        })
    }
}

/// Exact updates between forced re-summations of a [`RunningSum`].
const RESUM_EVERY: u32 = 256;
/// How far a [`RunningSum`] may fall below its peak before it is re-summed.
const MAX_SHRINK: f64 = 1e3;

/// Σ r⁻ᵖ over a value's samples, kept up to date on every push and
/// eviction so that the prequential estimate of each of a job's six
/// feature values costs O(1) rather than a walk over its samples.
///
/// Each addition or subtraction rounds by at most u·|partial sum| ≤ u·peak
/// (u = 2⁻⁵³), so k updates after an exact summation the sum is off by at
/// most k·u·peak. Re-summing the stored terms every [`RESUM_EVERY`]
/// updates, and as soon as the sum falls below peak / [`MAX_SHRINK`] (a
/// dominant term has left, which would expose the residue), bounds the
/// relative error by 256 · 10³ · u ≈ 3·10⁻¹¹, and that of the estimate
/// (mean)^(−1/p) by the same over p.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct RunningSum {
    sum: f64,
    /// Largest value of `sum` since the last exact summation.
    peak: f64,
    /// Updates since the last exact summation.
    updates: u32,
}

impl RunningSum {
    fn add(&mut self, term: f64) {
        self.sum += term;
        self.peak = self.peak.max(self.sum);
        self.updates += 1;
    }

    fn subtract(&mut self, term: f64) {
        self.sum -= term;
        self.updates += 1;
    }

    fn needs_resum(&self) -> bool {
        self.updates >= RESUM_EVERY || self.sum * MAX_SHRINK < self.peak
    }

    fn resum(&mut self, terms: impl Iterator<Item = f64>) {
        let sum = terms.sum();
        *self = RunningSum {
            sum,
            peak: sum,
            updates: 0,
        };
    }
}

/// The running sums over a value's samples that its estimates need, so
/// that estimating from a value whose samples are all in the window costs
/// O(1) rather than a walk over up to `max_samples` jobs.
///
/// The spread is kept as Σ d and Σ d² of d = ln r − `shift`, with `shift`
/// a recent mean of ln r (set at each re-summation), so that the variance
/// is not the small difference of two large sums. All three sums are
/// re-summed together when either positive sum needs it (see
/// [`RunningSum`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct SampleSums {
    /// Σ r⁻ᵖ.
    utility: RunningSum,
    shift: f64,
    /// Σ (ln r − shift).
    ln: f64,
    /// Σ (ln r − shift)².
    ln_sq: RunningSum,
}

impl SampleSums {
    fn add(&mut self, s: &Sample) {
        let d = s.ln_runtime - self.shift;
        self.utility.add(s.utility);
        self.ln += d;
        self.ln_sq.add(d * d);
    }

    fn subtract(&mut self, s: &Sample) {
        let d = s.ln_runtime - self.shift;
        self.utility.subtract(s.utility);
        self.ln -= d;
        self.ln_sq.subtract(d * d);
    }

    fn needs_resum(&self) -> bool {
        self.utility.needs_resum() || self.ln_sq.needs_resum()
    }

    /// Exact sums of `samples`, re-centred on their mean ln r.
    fn of(samples: &VecDeque<Sample>) -> Self {
        let shift = if samples.is_empty() {
            0.0
        } else {
            samples.iter().map(|s| s.ln_runtime).sum::<f64>() / samples.len() as f64
        };
        let d = |s: &Sample| s.ln_runtime - shift;
        let mut sums = SampleSums {
            shift,
            ln: samples.iter().map(d).sum(),
            ..SampleSums::default()
        };
        sums.utility.resum(samples.iter().map(|s| s.utility));
        sums.ln_sq.resum(samples.iter().map(|s| d(s) * d(s)));
        sums
    }

    /// (utility point, ln-sd, n) over `n` samples, as
    /// [`ValueHistory::exact_estimate`] gives them for the utility
    /// estimator.
    fn summary(&self, n: usize, config: &HistoryConfig) -> (f64, f64) {
        let point = (self.utility.sum / n as f64).powf(-1.0 / config.utility_power);
        let log_sd = if n >= 2 {
            let var = (self.ln_sq.sum - self.ln * self.ln / n as f64) / (n - 1) as f64;
            var.max(0.0).sqrt()
        } else {
            config.default_log_sd
        };
        (point, log_sd)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
struct ValueHistory {
    /// In the order learnt: job end order, except for jobs reported late.
    samples: VecDeque<Sample>,
    /// Running sums over `samples`.
    sums: SampleSums,
    /// The end times of the samples no later sample ended before: a
    /// monotonic queue whose front is the earliest end in `samples`. When
    /// that is inside the window every sample is live and `sums` are the
    /// live sums; otherwise an expired job sits behind a live one (jobs
    /// learnt out of end order, or none learnt lately) and estimates walk
    /// the samples.
    min_ends: VecDeque<u64>,
    error: RunningError,
}

impl ValueHistory {
    fn live(&self, since_us: u64) -> impl Iterator<Item = &Sample> + Clone + '_ {
        self.samples.iter().filter(move |s| s.end_us >= since_us)
    }

    fn has_live(&self, since_us: u64) -> bool {
        // The newest job is live unless the value has gone quiet.
        self.samples.back().is_some_and(|s| s.end_us >= since_us)
            || self.live(since_us).next().is_some()
    }

    /// Whether every sample is inside the window that starts at `since_us`.
    fn all_live(&self, since_us: u64) -> bool {
        self.min_ends.front().is_some_and(|&end| end >= since_us)
    }

    /// (point, ln-sd, samples) from the live samples: from the running sums
    /// when all are live, except the median, which needs them all.
    fn estimate(
        &self,
        since_us: u64,
        estimator: Estimator,
        config: &HistoryConfig,
    ) -> Option<(f64, f64, usize)> {
        if !self.all_live(since_us) {
            return self.exact_estimate(since_us, estimator, config);
        }
        let n = self.samples.len();
        let (utility, log_sd) = self.sums.summary(n, config);
        let point = match estimator {
            Estimator::Utility => utility,
            Estimator::Median => median(
                self.samples
                    .iter()
                    .map(|s| s.mean_task_runtime_us)
                    .collect(),
            ),
        };
        Some((point, log_sd, n))
    }

    /// The estimate from the live samples, computed from scratch.
    fn exact_estimate(
        &self,
        since_us: u64,
        estimator: Estimator,
        config: &HistoryConfig,
    ) -> Option<(f64, f64, usize)> {
        let live = self.live(since_us);
        let n = live.clone().count();
        if n == 0 {
            return None;
        }
        let point = match estimator {
            Estimator::Utility => {
                let mean_u = live.clone().map(|s| s.utility).sum::<f64>() / n as f64;
                mean_u.powf(-1.0 / config.utility_power)
            }
            Estimator::Median => median(live.clone().map(|s| s.mean_task_runtime_us).collect()),
        };
        let log_sd = if n >= 2 {
            let mean = live.clone().map(|s| s.ln_runtime).sum::<f64>() / n as f64;
            (live.map(|s| (s.ln_runtime - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            config.default_log_sd
        };
        Some((point, log_sd, n))
    }

    /// The utility estimate at `since_us`, as [`Self::estimate`] gives it;
    /// evicts the expired prefix first (which the next push would evict
    /// anyway).
    fn utility_estimate(&mut self, since_us: u64, config: &HistoryConfig) -> Option<f64> {
        while self.samples.front().is_some_and(|s| s.end_us < since_us) {
            self.pop_front();
        }
        self.resum_if_needed();
        self.estimate(since_us, Estimator::Utility, config)
            .map(|(point, _, _)| point)
    }

    fn pop_front(&mut self) {
        if let Some(old) = self.samples.pop_front() {
            self.sums.subtract(&old);
            // Had this sample left the queue, a strictly earlier end would
            // be at its front now; so an equal front end is this sample.
            if self.min_ends.front() == Some(&old.end_us) {
                self.min_ends.pop_front();
            }
        }
    }

    fn resum_if_needed(&mut self) {
        if self.sums.needs_resum() {
            self.sums = SampleSums::of(&self.samples);
        }
    }

    fn push(&mut self, sample: Sample, since_us: u64, max: usize) {
        while self
            .samples
            .front()
            .is_some_and(|s| s.end_us < since_us || self.samples.len() >= max)
        {
            self.pop_front();
        }
        while self.min_ends.back().is_some_and(|&end| end > sample.end_us) {
            self.min_ends.pop_back();
        }
        self.min_ends.push_back(sample.end_us);
        if self.samples.is_empty() {
            // Centre the spread's sums on the first job, and drop what
            // rounding left of the old ones.
            self.sums = SampleSums {
                shift: sample.ln_runtime,
                ..SampleSums::default()
            };
        }
        self.sums.add(&sample);
        self.samples.push_back(sample);
        self.resum_if_needed();
    }
}

/// Observations between sweeps that drop feature values with no live jobs.
const SWEEP_EVERY: u64 = 4096;

/// The 3Sigma history: what similar jobs did, per feature value.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "HistoryForm")]
pub struct History {
    config: HistoryConfig,
    /// Decoded on first use after a restore ([`slot`]).
    values: HashMap<(FeatureKind, u64), Slot>,
    global: ValueHistory,
    kind_errors: [RunningError; FeatureKind::COUNT],
    observed: u64,
    /// What changed since [`Self::drain_changes`], when tracking: in the
    /// order changed, with repeats (a job's end touches the global key).
    #[serde(skip)]
    changes: Option<Vec<HistoryKey>>,
}

/// Equal when they would estimate and learn alike: every value compared
/// decoded.
impl PartialEq for History {
    fn eq(&self, other: &History) -> bool {
        let power = self.config.utility_power;
        self.config == other.config
            && self.values.len() == other.values.len()
            && self.values.iter().all(|(key, slot)| {
                other
                    .values
                    .get(key)
                    .is_some_and(|o| slot.get(power) == o.get(power))
            })
            && self.global == other.global
            && self.kind_errors == other.kind_errors
            && self.observed == other.observed
            && self.changes == other.changes
    }
}

/// What [`History`] decodes from: its fields in order, the global
/// distribution's samples as [`LearntJob`]s.
#[derive(Deserialize)]
struct HistoryForm {
    config: HistoryConfig,
    #[serde(deserialize_with = "slot::map")]
    values: HashMap<(FeatureKind, u64), Slot>,
    global: ValueForm,
    kind_errors: [RunningError; FeatureKind::COUNT],
    observed: u64,
}

/// [`ValueHistory`]'s fields in order, each sample as [`LearntJob`].
#[derive(Deserialize)]
struct ValueForm {
    samples: VecDeque<Sample>,
    sums: SampleSums,
    min_ends: VecDeque<u64>,
    error: RunningError,
}

impl ValueForm {
    fn into_value(mut self, utility_power: f64) -> ValueHistory {
        for sample in &mut self.samples {
            *sample = Sample::new(sample.end_us, sample.mean_task_runtime_us, utility_power);
        }
        ValueHistory {
            samples: self.samples,
            sums: self.sums,
            min_ends: self.min_ends,
            error: self.error,
        }
    }
}

impl From<HistoryForm> for History {
    fn from(form: HistoryForm) -> Self {
        let power = form.config.utility_power;
        History {
            values: form.values,
            global: form.global.into_value(power),
            kind_errors: form.kind_errors,
            observed: form.observed,
            config: form.config,
            changes: None,
        }
    }
}

/// What changed in a [`History`] since an earlier state of it: each changed
/// feature value's distribution (`None` once dropped), and the global one
/// with the per-feature errors, whole. Applied to that earlier state
/// ([`History::apply_changes`]), it gives this one: a snapshot's history
/// can be written as these instead of whole ([`History::changes`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(from = "ChangesForm")]
pub struct HistoryChanges {
    values: Vec<((FeatureKind, u64), Option<Slot>)>,
    global: ValueHistory,
    kind_errors: [RunningError; FeatureKind::COUNT],
    observed: u64,
    /// The utility exponent the samples' terms were computed with.
    utility_power: f64,
}

/// What [`HistoryChanges`] decodes from.
#[derive(Deserialize)]
struct ChangesForm {
    values: Vec<((FeatureKind, u64), Option<Slot>)>,
    global: ValueForm,
    kind_errors: [RunningError; FeatureKind::COUNT],
    observed: u64,
    utility_power: f64,
}

impl From<ChangesForm> for HistoryChanges {
    fn from(form: ChangesForm) -> Self {
        let power = form.utility_power;
        HistoryChanges {
            values: form.values,
            global: form.global.into_value(power),
            kind_errors: form.kind_errors,
            observed: form.observed,
            utility_power: power,
        }
    }
}

/// One stored unit of the history: a feature value's distribution, or the
/// global one with the per-feature errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HistoryKey {
    Value { feature: FeatureKind, key: u64 },
    Global,
}

impl HistoryKey {
    /// A byte key that sorts like the history it names: `global`, or the
    /// feature's name, `/`, and the value's hash in big-endian.
    pub fn to_bytes(self) -> Vec<u8> {
        match self {
            HistoryKey::Global => b"global".to_vec(),
            HistoryKey::Value { feature, key } => {
                let mut bytes = format!("{}/", feature.name()).into_bytes();
                bytes.extend_from_slice(&key.to_be_bytes());
                bytes
            }
        }
    }
}

/// A job a distribution remembers: when it ended and its mean task runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordedJob {
    pub end_us: u64,
    pub mean_task_runtime_us: f64,
}

/// The running prediction error of a feature value (or of a feature).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RecordedError {
    /// Smoothed mean |ln(estimate / actual)|.
    pub mean_abs_log_error: f64,
    pub count: u64,
}

/// What the state store keeps for a [`HistoryKey`]: the jobs in the
/// distribution, in the order learnt, and its running error. The global
/// record also carries every feature's error and the jobs learnt in all.
///
/// Stored in a fixed binary layout ([`Self::to_bytes`]), not JSON: the
/// service rewrites every changed distribution, up to `max_samples` jobs
/// each, with every batch, and formatting those numbers as JSON was an
/// eighth of the pipeline's time.
#[derive(Debug, Clone, PartialEq)]
pub struct HistoryRecord {
    pub jobs: Vec<RecordedJob>,
    pub error: RecordedError,
    pub feature_errors: BTreeMap<FeatureKind, RecordedError>,
    pub observed: Option<u64>,
}

/// First byte of [`HistoryRecord::to_bytes`], changed with the layout.
const RECORD_LAYOUT: u8 = 1;

impl HistoryRecord {
    /// The stored form, integers and floats little-endian:
    ///
    /// | bytes | field |
    /// |---|---|
    /// | 1 | layout version (1) |
    /// | 8 + 8 | `error`: mean_abs_log_error (f64), count (u64) |
    /// | 1 (+ 8) | `observed`: 0 for none, else 1 and the count (u64) |
    /// | 1 + n × 17 | `feature_errors`: n, then per feature its index in [`FeatureKind::ALL`] (u8) and error (f64, u64) |
    /// | 4 + m × 16 | `jobs`: m (u32), then per job end_us (u64), mean_task_runtime_us (f64) |
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(32 + 17 * self.feature_errors.len() + 16 * self.jobs.len());
        out.put_u8(RECORD_LAYOUT);
        put_error(&mut out, self.error);
        out.put_opt_u64(self.observed);
        out.put_u8(self.feature_errors.len() as u8);
        for (&kind, &error) in &self.feature_errors {
            out.put_u8(kind as u8);
            put_error(&mut out, error);
        }
        out.put_u32(self.jobs.len() as u32);
        for job in &self.jobs {
            out.put_u64(job.end_us);
            out.put_f64(job.mean_task_runtime_us);
        }
        out
    }

    /// Read back [`Self::to_bytes`]; what is wrong, and where, otherwise.
    pub fn from_bytes(bytes: &[u8]) -> Result<HistoryRecord, String> {
        let mut r = Reader::new(bytes);
        r.layout("history record", RECORD_LAYOUT)?;
        let error = read_error(&mut r)?;
        let observed = r.opt_u64()?;
        let mut feature_errors = BTreeMap::new();
        for _ in 0..r.u8()? {
            let kind = r.index_of(&FeatureKind::ALL, "feature")?;
            feature_errors.insert(kind, read_error(&mut r)?);
        }
        let count = r.u32()? as usize;
        let mut jobs = Vec::with_capacity(count.min(bytes.len() / 16));
        for _ in 0..count {
            jobs.push(RecordedJob {
                end_us: r.u64()?,
                mean_task_runtime_us: r.f64()?,
            });
        }
        r.finish()?;
        Ok(HistoryRecord {
            jobs,
            error,
            feature_errors,
            observed,
        })
    }
}

fn put_error(out: &mut Vec<u8>, error: RecordedError) {
    out.put_f64(error.mean_abs_log_error);
    out.put_u64(error.count);
}

fn read_error(r: &mut Reader<'_>) -> Result<RecordedError, String> {
    Ok(RecordedError {
        mean_abs_log_error: r.f64()?,
        count: r.u64()?,
    })
}

impl From<RunningError> for RecordedError {
    fn from(e: RunningError) -> Self {
        RecordedError {
            mean_abs_log_error: e.mean_abs_log_error,
            count: e.count,
        }
    }
}

impl History {
    pub fn new(config: HistoryConfig) -> Self {
        History {
            config,
            values: HashMap::new(),
            global: ValueHistory::default(),
            kind_errors: [RunningError::default(); FeatureKind::COUNT],
            observed: 0,
            changes: None,
        }
    }

    /// Start recording which [`HistoryKey`]s change, for a caller that
    /// persists the history incrementally ([`Self::drain_changes`]).
    pub fn track_changes(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    /// Move the keys changed since the last call (none unless tracking)
    /// onto `into`, in the order changed and possibly repeated: for each,
    /// [`Self::record`] is its new content, or `None` if it was dropped.
    pub fn drain_changes(&mut self, into: &mut Vec<HistoryKey>) {
        if let Some(changes) = &mut self.changes {
            into.append(changes);
        }
    }

    /// The stored form of `key`'s distribution; `None` for a feature value
    /// that holds no history (never seen, or dropped once its jobs left the
    /// window).
    pub fn record(&self, key: HistoryKey) -> Option<HistoryRecord> {
        let (value, global) = match key {
            HistoryKey::Global => (&self.global, true),
            HistoryKey::Value { feature, key } => (
                self.values
                    .get(&(feature, key))?
                    .get(self.config.utility_power),
                false,
            ),
        };
        Some(HistoryRecord {
            jobs: value
                .samples
                .iter()
                .map(|s| RecordedJob {
                    end_us: s.end_us,
                    mean_task_runtime_us: s.mean_task_runtime_us,
                })
                .collect(),
            error: value.error.into(),
            feature_errors: if global {
                FeatureKind::ALL
                    .into_iter()
                    .map(|k| (k, self.kind_errors[k as usize].into()))
                    .collect()
            } else {
                BTreeMap::new()
            },
            observed: global.then_some(self.observed),
        })
    }

    pub fn config(&self) -> &HistoryConfig {
        &self.config
    }

    /// The changes from an earlier state to this one, given every key
    /// that changed since (as [`Self::drain_changes`] lists them; repeats
    /// and the global key are fine).
    pub fn changes(&self, changed: impl IntoIterator<Item = HistoryKey>) -> HistoryChanges {
        let keys: BTreeSet<(FeatureKind, u64)> = changed
            .into_iter()
            .filter_map(|key| match key {
                HistoryKey::Value { feature, key } => Some((feature, key)),
                HistoryKey::Global => None,
            })
            .collect();
        HistoryChanges {
            values: keys
                .into_iter()
                .map(|key| (key, self.values.get(&key).map(Slot::encoded_copy)))
                .collect(),
            global: self.global.clone(),
            kind_errors: self.kind_errors,
            observed: self.observed,
            utility_power: self.config.utility_power,
        }
    }

    /// Bring the earlier state [`Self::changes`] was taken against up to
    /// the state it was taken of. Changes taken with another utility
    /// exponent are refused: their samples' terms would be wrong.
    pub fn apply_changes(&mut self, changes: HistoryChanges) -> Result<(), String> {
        if changes.utility_power.to_bits() != self.config.utility_power.to_bits() {
            return Err(format!(
                "history changes taken with utility power {}, the history has {}",
                changes.utility_power, self.config.utility_power
            ));
        }
        for (key, value) in changes.values {
            match value {
                Some(value) => self.values.insert(key, value),
                None => self.values.remove(&key),
            };
        }
        self.global = changes.global;
        self.kind_errors = changes.kind_errors;
        self.observed = changes.observed;
        Ok(())
    }

    /// Jobs learnt from so far.
    pub fn observed(&self) -> u64 {
        self.observed
    }

    /// Feature values currently holding history.
    pub fn tracked_values(&self) -> usize {
        self.values.len()
    }

    fn since(&self, now_us: u64) -> u64 {
        now_us.saturating_sub(self.config.window_us)
    }

    /// Estimate a job's mean task runtime at `now_us` from its most
    /// accurate feature value with history; failing that, from all jobs in
    /// the window; failing that, the configured default.
    pub fn estimate(
        &self,
        features: &JobFeatures,
        now_us: u64,
        estimator: Estimator,
    ) -> HistoryEstimate {
        let since = self.since(now_us);
        let mut best: Option<(f64, FeatureKind, &ValueHistory)> = None;
        for kind in FeatureKind::ALL {
            let Some(key) = features.get(kind) else {
                continue;
            };
            let Some(slot) = self.values.get(&(kind, key)) else {
                continue;
            };
            let value = slot.get(self.config.utility_power);
            if !value.has_live(since) {
                continue;
            }
            let score = self.error_score(kind, value);
            if best.as_ref().is_none_or(|(s, _, _)| score < *s) {
                best = Some((score, kind, value));
            }
        }
        // Only the chosen value's distribution is summarised.
        let chosen = best.and_then(|(_, feature, value)| {
            Some((feature, value.estimate(since, estimator, &self.config)?))
        });
        if let Some((feature, (point, log_sd, samples))) = chosen {
            return HistoryEstimate {
                mean_task_runtime_us: point,
                log_sd,
                samples,
                source: EstimateSource::History { feature },
            };
        }
        match self.global.estimate(since, estimator, &self.config) {
            Some((point, log_sd, samples)) => HistoryEstimate {
                mean_task_runtime_us: point,
                log_sd,
                samples,
                source: EstimateSource::Fallback,
            },
            None => HistoryEstimate {
                mean_task_runtime_us: self.config.default_mean_task_runtime_us,
                log_sd: self.config.default_log_sd,
                samples: 0,
                source: EstimateSource::Fallback,
            },
        }
    }

    /// A value's own running error once it has one; before that its
    /// feature's; before any, a neutral 1.0 (a factor-of-e error).
    fn error_score(&self, kind: FeatureKind, value: &ValueHistory) -> f64 {
        if value.error.count > 0 {
            value.error.mean_abs_log_error
        } else if self.kind_errors[kind as usize].count > 0 {
            self.kind_errors[kind as usize].mean_abs_log_error
        } else {
            1.0
        }
    }

    /// Learn from a job that ended at `end_us` with the given mean task
    /// runtime (µs, > 0). Scores each feature value on the prediction it
    /// would have made, then adds the job to its history.
    pub fn observe(&mut self, features: &JobFeatures, end_us: u64, mean_task_runtime_us: f64) {
        if !(mean_task_runtime_us.is_finite() && mean_task_runtime_us > 0.0) {
            return;
        }
        let since = self.since(end_us);
        let sample = Sample::new(end_us, mean_task_runtime_us, self.config.utility_power);
        let (max, smoothing) = (self.config.max_samples, self.config.error_smoothing);
        for kind in FeatureKind::ALL {
            let Some(key) = features.get(kind) else {
                continue;
            };
            let slot = self
                .values
                .entry((kind, key))
                .or_insert_with(|| Slot::new(ValueHistory::default()));
            let (config, kind_errors) = (&self.config, &mut self.kind_errors);
            slot.update(config.utility_power, |value| {
                if let Some(point) = value.utility_estimate(since, config) {
                    let err = (point / mean_task_runtime_us).ln().abs();
                    value.error.update(err, smoothing);
                    kind_errors[kind as usize].update(err, smoothing);
                }
                value.push(sample, since, max);
            });
            if let Some(changes) = &mut self.changes {
                changes.push(HistoryKey::Value { feature: kind, key });
            }
        }
        self.global.push(sample, since, max);
        self.observed += 1;
        if let Some(changes) = &mut self.changes {
            changes.push(HistoryKey::Global);
        }
        if self.observed.is_multiple_of(SWEEP_EVERY) {
            let changes = &mut self.changes;
            self.values.retain(|&(feature, key), slot| {
                let live = slot.newest_end_us().is_some_and(|end| end >= since);
                if !live && let Some(changes) = changes {
                    changes.push(HistoryKey::Value { feature, key });
                }
                live
            });
        }
    }

    /// Running mean |ln(estimate / actual)| per feature kind, for reports.
    pub fn feature_errors(&self) -> Vec<(FeatureKind, f64, u64)> {
        FeatureKind::ALL
            .into_iter()
            .map(|k| {
                let e = self.kind_errors[k as usize];
                (k, e.mean_abs_log_error, e.count)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: f64 = 1e6;
    const DAY: u64 = 24 * 3_600_000_000;

    fn feats(user: &str, name: &str) -> JobFeatures {
        JobFeatures::from_parts(user, name, "", 0, 0.0, 0.0)
    }

    #[test]
    fn a_stored_record_reads_back_as_written_and_damage_is_named() {
        let mut h = History::new(HistoryConfig::default());
        for i in 0..300u64 {
            h.observe(
                &feats(&format!("u{}", i % 3), "n"),
                1_000 + i,
                (1 + i) as f64 * S,
            );
        }
        let global = h.record(HistoryKey::Global).unwrap();
        assert_eq!(global.feature_errors.len(), FeatureKind::COUNT);
        assert_eq!(global.jobs.len(), HistoryConfig::default().max_samples);
        let user = h
            .record(HistoryKey::Value {
                feature: FeatureKind::User,
                key: feats("u1", "n").get(FeatureKind::User).unwrap(),
            })
            .unwrap();
        assert_eq!(user.observed, None);
        for record in [&global, &user] {
            let bytes = record.to_bytes();
            assert_eq!(HistoryRecord::from_bytes(&bytes).as_ref(), Ok(record));
        }

        let bytes = user.to_bytes();
        let cut = HistoryRecord::from_bytes(&bytes[..bytes.len() - 3]).unwrap_err();
        assert!(cut.contains("inside a 8-byte field"), "{cut}");
        let mut longer = bytes.clone();
        longer.push(0);
        let extra = HistoryRecord::from_bytes(&longer).unwrap_err();
        assert!(extra.contains("1 bytes after the record's end"), "{extra}");
        let mut bad_flag = bytes.clone();
        bad_flag[17] = 2;
        let flag = HistoryRecord::from_bytes(&bad_flag).unwrap_err();
        assert!(flag.contains("byte 17: optional-value flag 2"), "{flag}");
        let json = HistoryRecord::from_bytes(b"{\"jobs\":[]}").unwrap_err();
        assert!(json.contains("layout 123"), "{json}");
        let mut bad_kind = global.to_bytes();
        // layout, error, observed flag and count, number of feature errors.
        bad_kind[1 + 16 + 9 + 1] = FeatureKind::COUNT as u8;
        let kind = HistoryRecord::from_bytes(&bad_kind).unwrap_err();
        let named = format!("byte 27: no feature with index {}", FeatureKind::COUNT);
        assert!(kind.contains(&named), "{kind}");
    }

    #[test]
    fn tracked_changes_name_every_record_that_changed_or_left() {
        let config = HistoryConfig {
            window_us: 1_000,
            ..HistoryConfig::default()
        };
        let mut h = History::new(config);
        h.observe(&feats("old", "x"), 10, 5.0 * S);
        // Not tracking yet: nothing is recorded.
        let changes = |h: &mut History| {
            let mut keys = Vec::new();
            h.drain_changes(&mut keys);
            keys.into_iter().collect::<std::collections::BTreeSet<_>>()
        };
        assert!(changes(&mut h).is_empty());
        h.track_changes();
        h.observe(&feats("u", "n"), 20, 10.0 * S);
        let f = feats("u", "n");
        let changed = changes(&mut h);
        // The job's feature values and the global distribution.
        let values = FeatureKind::ALL.iter().filter(|&&k| f.get(k).is_some());
        assert_eq!(changed.len(), values.count() + 1);
        assert!(changed.contains(&HistoryKey::Global));
        let user = HistoryKey::Value {
            feature: FeatureKind::User,
            key: f.get(FeatureKind::User).unwrap(),
        };
        let record = h.record(user).unwrap();
        assert_eq!(
            record.jobs,
            [RecordedJob {
                end_us: 20,
                mean_task_runtime_us: 10.0 * S
            }]
        );
        let global = h.record(HistoryKey::Global).unwrap();
        assert_eq!(global.observed, Some(2));
        assert_eq!(global.jobs.len(), 2);
        assert_eq!(global.feature_errors.len(), FeatureKind::COUNT);
        assert!(changes(&mut h).is_empty());

        // The periodic sweep drops values whose jobs all left the window;
        // their keys are reported, and they have no record any more.
        let old = HistoryKey::Value {
            feature: FeatureKind::User,
            key: feats("old", "x").get(FeatureKind::User).unwrap(),
        };
        assert!(h.record(old).is_some());
        for i in 0..SWEEP_EVERY {
            h.observe(&feats("u", "n"), 5_000 + i, 10.0 * S);
        }
        let changed = changes(&mut h);
        assert!(changed.contains(&old));
        assert_eq!(h.record(old), None);
        assert_ne!(old.to_bytes(), user.to_bytes());
        assert!(user.to_bytes().starts_with(b"user/"));
    }

    #[test]
    fn utility_estimate_is_the_certainty_equivalent() {
        let mut h = History::new(HistoryConfig::default());
        let f = feats("u", "n");
        h.observe(&f, 10, 10.0 * S);
        h.observe(&f, 20, 40.0 * S);
        let e = h.estimate(&f, 30, Estimator::Utility);
        // (mean of r^-2)^(-1/2) over {10, 40}: ((0.01 + 0.000625)/2)^(-1/2) = 13.72 s
        assert!((e.mean_task_runtime_us / S - 13.7199).abs() < 1e-3, "{e:?}");
        assert_eq!(e.samples, 2);
        let m = h.estimate(&f, 30, Estimator::Median);
        assert!((m.mean_task_runtime_us / S - 25.0).abs() < 1e-9);
        assert!((e.log_sd - (40f64.ln() - 10f64.ln()) / 2f64.sqrt()).abs() < 1e-9);
    }

    #[test]
    fn the_most_accurate_feature_value_wins() {
        let mut h = History::new(HistoryConfig::default());
        // User "u" runs both 10 s and 1000 s jobs; job name "fast" is always
        // 10 s. After a few jobs the name's error is lower than the user's.
        for i in 0..10u64 {
            h.observe(&feats("u", "fast"), i * 100, 10.0 * S);
            h.observe(&feats("u", "slow"), i * 100 + 50, 1000.0 * S);
        }
        let e = h.estimate(&feats("u", "fast"), 2000, Estimator::Median);
        assert_eq!(
            e.source,
            EstimateSource::History {
                feature: FeatureKind::JobName
            }
        );
        assert!((e.mean_task_runtime_us - 10.0 * S).abs() < 1e-6);
        // An unknown name falls back to the user's history.
        let e = h.estimate(&feats("u", "new"), 2000, Estimator::Median);
        assert!(matches!(
            e.source,
            EstimateSource::History {
                feature: FeatureKind::User | FeatureKind::SubmitHour
            }
        ));
    }

    #[test]
    fn the_window_forgets_and_the_fallbacks_apply() {
        let config = HistoryConfig {
            window_us: DAY,
            ..HistoryConfig::default()
        };
        let mut h = History::new(config.clone());
        let e = h.estimate(&feats("u", "n"), 0, Estimator::Utility);
        assert_eq!(
            (e.mean_task_runtime_us, e.samples, e.source),
            (60e6, 0, EstimateSource::Fallback)
        );
        h.observe(&feats("u", "n"), DAY, 5.0 * S);
        // No feature value in common (another user, name and submit hour).
        let stranger = JobFeatures::from_parts("x", "y", "", 5 * 3_600_000_000, 0.0, 0.0);
        let e = h.estimate(&stranger, DAY + 1, Estimator::Utility);
        assert_eq!(e.source, EstimateSource::Fallback);
        assert!((e.mean_task_runtime_us - 5.0 * S).abs() < 1e-6);
        // Two days later the job has left the window.
        let e = h.estimate(&feats("u", "n"), 3 * DAY, Estimator::Utility);
        assert_eq!((e.mean_task_runtime_us, e.samples), (60e6, 0));
    }

    #[test]
    fn the_requested_time_limit_predicts_where_no_other_feature_does() {
        // Every job has its own user, name and submit hour; its requested
        // limit (10 or 60 minutes) is what says how long it runs.
        const HOUR: u64 = 3_600_000_000;
        let job = |i: u64, limit: u64| {
            let mut f =
                JobFeatures::from_parts(&format!("u{i}"), &format!("n{i}"), "", i * HOUR, 0.0, 0.0);
            f.values[FeatureKind::TimeLimit as usize] = Some(limit);
            f
        };
        let mut h = History::new(HistoryConfig::default());
        for i in 0..120u64 {
            let (limit, runtime) = if i % 2 == 0 {
                (10, 100.0)
            } else {
                (60, 1000.0)
            };
            h.observe(&job(i, limit), 1_000 + i, runtime * S);
        }
        for (limit, runtime) in [(10, 100.0), (60, 1000.0)] {
            let e = h.estimate(&job(1_000 + limit, limit), 2_000, Estimator::Median);
            assert_eq!(
                e.source,
                EstimateSource::History {
                    feature: FeatureKind::TimeLimit
                }
            );
            assert!((e.mean_task_runtime_us - runtime * S).abs() < 1e-6, "{e:?}");
        }
    }

    #[test]
    fn samples_per_value_are_capped() {
        let mut h = History::new(HistoryConfig {
            max_samples: 3,
            ..HistoryConfig::default()
        });
        for (i, r) in [100.0, 1.0, 2.0, 3.0].into_iter().enumerate() {
            h.observe(&feats("u", "n"), i as u64, r * S);
        }
        let e = h.estimate(&feats("u", "n"), 10, Estimator::Median);
        assert_eq!(e.samples, 3);
        assert!((e.mean_task_runtime_us - 2.0 * S).abs() < 1e-6);
    }

    #[test]
    fn jobs_learnt_out_of_end_order_leave_the_window_by_end_time() {
        let mut h = History::new(HistoryConfig {
            window_us: 100,
            ..HistoryConfig::default()
        });
        let f = feats("u", "n");
        h.observe(&f, 300, 10.0 * S);
        // Reported late: ended before the job learnt first.
        h.observe(&f, 150, 20.0 * S);
        // At 260 the 150 job has expired behind the live 300 job.
        let e = h.estimate(&f, 260, Estimator::Utility);
        assert_eq!(e.samples, 1);
        assert!((e.mean_task_runtime_us - 10.0 * S).abs() < 1e-6, "{e:?}");
        // Scored on 10 s (error ln 2) and then on 10 s alone (error 0), not
        // on both jobs (12.6 s).
        h.observe(&f, 260, 10.0 * S);
        let (_, err, count) = h.feature_errors()[FeatureKind::JobName as usize];
        assert_eq!(count, 2);
        assert!((err - 2f64.ln() / 2.0).abs() < 1e-12, "{err}");
    }

    #[test]
    fn the_running_sum_survives_a_dominant_term_leaving() {
        let config = HistoryConfig {
            max_samples: 4,
            ..HistoryConfig::default()
        };
        let mut v = ValueHistory::default();
        // A 1 µs job's utility is 10¹⁶ times a 100 s job's: once it is
        // evicted, a sum that merely subtracted it would be all residue.
        v.push(Sample::new(0, 1.0, 2.0), 0, 4);
        for end in 1..=4 {
            v.push(Sample::new(end, 100.0 * S, 2.0), 0, 4);
        }
        let fast = v.utility_estimate(0, &config).expect("history");
        assert!((fast / (100.0 * S) - 1.0).abs() < 1e-12, "{fast}");
    }

    /// (point, ln-sd, samples), or none without live samples.
    type Estimated = Option<(f64, f64, usize)>;

    /// Push one job into `v` as [`History::observe`] does; returns the
    /// incremental and the from-scratch estimates (point, ln-sd, samples)
    /// the value would have made just before.
    fn learn(
        v: &mut ValueHistory,
        config: &HistoryConfig,
        end_us: u64,
        runtime_us: f64,
    ) -> (Estimated, Estimated) {
        let since = end_us.saturating_sub(config.window_us);
        let exact = v.exact_estimate(since, Estimator::Utility, config);
        let point = v.utility_estimate(since, config);
        let fast = v.estimate(since, Estimator::Utility, config);
        assert_eq!(point, fast.map(|(point, _, _)| point));
        v.push(
            Sample::new(end_us, runtime_us, config.utility_power),
            since,
            config.max_samples,
        );
        (fast, exact)
    }

    proptest::proptest! {
        /// Over random streams (runtimes across eleven decades, one job in
        /// eight reported late, windows and caps that evict often), the
        /// running-sum estimate and spread match the from-scratch ones.
        #[test]
        fn the_incremental_estimate_matches_the_exact_one(
            jobs in proptest::collection::vec(
                (0u64..20, 0u8..8, 0u64..80, 0.0f64..11.0),
                1..1500,
            ),
            window_us in 1u64..400,
            max_samples in 1usize..300,
            utility_power in 0.5f64..3.0,
            families in 0u32..4,
        ) {
            let config = HistoryConfig {
                window_us,
                max_samples,
                utility_power,
                ..HistoryConfig::default()
            };
            let mut v = ValueHistory::default();
            let mut clock = 100;
            for (i, (step, late, lag, log10_runtime)) in jobs.into_iter().enumerate() {
                clock += step;
                let end_us = if late == 0 { clock - lag } else { clock };
                // Or a few runtimes repeated (one alone when `families` is
                // 1), so that spreads of exactly zero occur too.
                let log10_runtime = if families > 0 {
                    (i as u32 % families) as f64 * 2.5
                } else {
                    log10_runtime
                };
                let (fast, exact) = learn(&mut v, &config, end_us, 10f64.powf(log10_runtime));
                match (fast, exact) {
                    (Some((fast, fast_sd, fast_n)), Some((exact, exact_sd, exact_n))) => {
                        proptest::prop_assert!(
                            ((fast - exact) / exact).abs() <= 1e-9,
                            "incremental {fast} vs exact {exact}"
                        );
                        proptest::prop_assert!(
                            (fast_sd - exact_sd).abs() <= 1e-9 * exact_sd.max(1.0),
                            "incremental spread {fast_sd} vs exact {exact_sd}"
                        );
                        proptest::prop_assert_eq!(fast_n, exact_n);
                    }
                    (fast, exact) => proptest::prop_assert_eq!(fast, exact),
                }
            }
        }
    }

    #[test]
    fn a_slot_stays_small() {
        // A restore makes one per feature value (277,000 at full state).
        assert_eq!(std::mem::size_of::<Slot>(), 56);
    }

    #[test]
    fn a_decoded_history_decodes_values_only_when_used_and_goes_on_alike() {
        let config = HistoryConfig {
            window_us: 50_000,
            ..HistoryConfig::default()
        };
        let mut h = History::new(config);
        let job = |i: u64| {
            let f = feats(&format!("u{}", i % 40), &format!("n{}", i % 300));
            (f, 1.0 + (i % 17) as f64 * S)
        };
        for i in 0..2_000 {
            let (f, runtime) = job(i);
            h.observe(&f, i * 10, runtime);
        }
        let bytes = postcard::to_allocvec(&h).unwrap();
        let mut r: History = postcard::from_bytes(&bytes).unwrap();
        let decoded = |h: &History| h.values.values().filter(|s| s.is_decoded()).count();
        assert_eq!(decoded(&r), 0, "nothing decoded by the restore");
        // Untouched values are written back as they came, undecoded (the
        // map's order is its hasher's: compare lengths and contents).
        let again = postcard::to_allocvec(&r).unwrap();
        assert_eq!(decoded(&r), 0);
        assert_eq!(again.len(), bytes.len());
        assert!(postcard::from_bytes::<History>(&again).unwrap() == h);

        let (f, _) = job(7);
        assert_eq!(
            r.estimate(&f, 20_000, Estimator::Utility),
            h.estimate(&f, 20_000, Estimator::Utility)
        );
        let read = decoded(&r);
        assert!(read > 0 && read <= FeatureKind::ALL.len(), "{read} decoded");
        // Values only read still write back as they came.
        assert_eq!(postcard::to_allocvec(&r).unwrap().len(), bytes.len());

        // Learning goes on alike, through the sweeps that drop values
        // (decoded or not) whose jobs left the window.
        // A few jobs of the restored values, the rest new ones.
        let before = r.tracked_values();
        let learn = |h: &mut History, r: &mut History, from: u64, to: u64| {
            for i in from..to {
                let (f, runtime) = if i % 50 == 0 {
                    job(i)
                } else {
                    (feats(&format!("v{}", i % 30), "m"), (1 + i % 13) as f64 * S)
                };
                h.observe(&f, i * 10, runtime);
                r.observe(&f, i * 10, runtime);
            }
        };
        learn(&mut h, &mut r, 2_000, 2_000 + SWEEP_EVERY);
        assert!(decoded(&r) < r.tracked_values(), "some never needed");
        learn(&mut h, &mut r, 2_000 + SWEEP_EVERY, 3 * SWEEP_EVERY);
        assert_eq!(r.tracked_values(), h.tracked_values());
        assert!(r.tracked_values() < before, "the sweeps dropped values");
        assert!(r == h);
        let again = postcard::to_allocvec(&r).unwrap();
        assert!(postcard::from_bytes::<History>(&again).unwrap() == h);
    }
}
