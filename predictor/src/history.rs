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

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::decision::EstimateSource;
use crate::features::{FeatureKind, JobFeatures};

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
    pub fn validate(&self) -> Result<(), String> {
        if self.window_us == 0 {
            return Err("history window must be positive".into());
        }
        if self.max_samples == 0 {
            return Err("history max_samples must be positive".into());
        }
        if !(self.utility_power.is_finite() && self.utility_power > 0.0) {
            return Err(format!(
                "utility power must be positive, got {}",
                self.utility_power
            ));
        }
        if !(self.default_mean_task_runtime_us.is_finite()
            && self.default_mean_task_runtime_us > 0.0)
        {
            return Err("default mean task runtime must be positive".into());
        }
        if !(self.error_smoothing > 0.0 && self.error_smoothing <= 1.0) {
            return Err(format!(
                "error smoothing must be in (0, 1], got {}",
                self.error_smoothing
            ));
        }
        Ok(())
    }
}

/// How a distribution becomes one number.
#[derive(Debug, Clone, Copy, PartialEq)]
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

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Sample {
    end_us: u64,
    mean_task_runtime_us: f64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
struct ValueHistory {
    samples: VecDeque<Sample>,
    error: RunningError,
}

impl ValueHistory {
    fn live(&self, since_us: u64) -> impl Iterator<Item = f64> + '_ {
        self.samples
            .iter()
            .filter(move |s| s.end_us >= since_us)
            .map(|s| s.mean_task_runtime_us)
    }

    fn estimate(
        &self,
        since_us: u64,
        estimator: Estimator,
        config: &HistoryConfig,
    ) -> Option<(f64, f64, usize)> {
        let values: Vec<f64> = self.live(since_us).collect();
        if values.is_empty() {
            return None;
        }
        let point = match estimator {
            Estimator::Utility => {
                let p = config.utility_power;
                let mean_u = values.iter().map(|r| r.powf(-p)).sum::<f64>() / values.len() as f64;
                mean_u.powf(-1.0 / p)
            }
            Estimator::Median => median(values.clone()),
        };
        let log_sd = if values.len() >= 2 {
            let logs: Vec<f64> = values.iter().map(|r| r.ln()).collect();
            let mean = logs.iter().sum::<f64>() / logs.len() as f64;
            (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (logs.len() - 1) as f64).sqrt()
        } else {
            config.default_log_sd
        };
        Some((point, log_sd, values.len()))
    }

    fn push(&mut self, sample: Sample, since_us: u64, max: usize) {
        while self
            .samples
            .front()
            .is_some_and(|s| s.end_us < since_us || self.samples.len() >= max)
        {
            self.samples.pop_front();
        }
        self.samples.push_back(sample);
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    let mid = v.len() / 2;
    let (_, m, _) = v.select_nth_unstable_by(mid, f64::total_cmp);
    let upper = *m;
    if v.len() % 2 == 1 {
        upper
    } else {
        let lower = v[..mid].iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lower + upper) / 2.0
    }
}

/// Observations between sweeps that drop feature values with no live jobs.
const SWEEP_EVERY: u64 = 4096;

/// The 3Sigma history: what similar jobs did, per feature value.
#[derive(Debug, Clone, PartialEq)]
pub struct History {
    config: HistoryConfig,
    values: HashMap<(FeatureKind, u64), ValueHistory>,
    global: ValueHistory,
    kind_errors: [RunningError; 6],
    observed: u64,
}

impl History {
    pub fn new(config: HistoryConfig) -> Self {
        History {
            config,
            values: HashMap::new(),
            global: ValueHistory::default(),
            kind_errors: [RunningError::default(); 6],
            observed: 0,
        }
    }

    pub fn config(&self) -> &HistoryConfig {
        &self.config
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
        let mut best: Option<(f64, FeatureKind, (f64, f64, usize))> = None;
        for kind in FeatureKind::ALL {
            let Some(key) = features.get(kind) else {
                continue;
            };
            let Some(value) = self.values.get(&(kind, key)) else {
                continue;
            };
            let Some(est) = value.estimate(since, estimator, &self.config) else {
                continue;
            };
            let score = self.error_score(kind, value);
            if best.as_ref().is_none_or(|(s, _, _)| score < *s) {
                best = Some((score, kind, est));
            }
        }
        if let Some((_, feature, (point, log_sd, samples))) = best {
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
        let sample = Sample {
            end_us,
            mean_task_runtime_us,
        };
        let (max, smoothing) = (self.config.max_samples, self.config.error_smoothing);
        for kind in FeatureKind::ALL {
            let Some(key) = features.get(kind) else {
                continue;
            };
            let value = self.values.entry((kind, key)).or_default();
            if let Some((point, _, _)) = value.estimate(since, Estimator::Utility, &self.config) {
                let err = (point / mean_task_runtime_us).ln().abs();
                value.error.update(err, smoothing);
                self.kind_errors[kind as usize].update(err, smoothing);
            }
            value.push(sample, since, max);
        }
        self.global.push(sample, since, max);
        self.observed += 1;
        if self.observed.is_multiple_of(SWEEP_EVERY) {
            self.values
                .retain(|_, v| v.samples.back().is_some_and(|s| s.end_us >= since));
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
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
