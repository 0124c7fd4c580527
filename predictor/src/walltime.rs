//! Time limits from estimates: what `slurm apply --walltime-quantile`
//! sets on a job's pending tasks, and what `evaluate` measures it would
//! set. A limit is a high quantile of the job's mean task runtime times a
//! margin, never below a floor, rounded up to the scheduler's step. The
//! quantiles bound the job's *mean* task runtime, not each task's: the
//! margin covers the spread of tasks around their mean. A level capped at
//! the quantile horizon ([`RuntimeQuantiles::capped`]) gives no limit: it
//! says only that the job may run longer than the horizon.

use crate::decision::{Estimate, Quantiles, RuntimeQuantiles};

/// How a job placed by an estimate gets a time limit for its tasks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Walltime {
    /// Which quantile of the mean task runtime: an index into
    /// [`Quantiles::LEVELS`].
    pub quantile: usize,
    /// The limit is the quantile times this (at least 1).
    pub margin: f64,
    /// Never below this, s.
    pub min_s: u64,
    /// The scheduler's granularity, s (Slurm's limits are whole minutes).
    pub step_s: u64,
}

impl Walltime {
    /// `slurm apply`'s defaults: the quantile times 3, never below 5
    /// minutes, in Slurm's whole minutes.
    pub const DEFAULT_MARGIN: f64 = 3.0;
    pub const DEFAULT_MIN_MINUTES: u64 = 5;
    pub const SLURM_STEP_S: u64 = 60;

    /// A limit from the level at `quantile` with `slurm apply`'s defaults.
    pub fn with_defaults(quantile: usize) -> Walltime {
        Walltime {
            quantile,
            margin: Self::DEFAULT_MARGIN,
            min_s: Self::DEFAULT_MIN_MINUTES * 60,
            step_s: Self::SLURM_STEP_S,
        }
    }

    /// The limit for a job placed by `estimate`, if it has quantiles and
    /// its level is not capped at the horizon (a capped level says only
    /// "longer than the horizon": the job keeps its own limit).
    pub fn limit_s(&self, estimate: &Estimate) -> Option<u64> {
        self.limit_from(&estimate.quantiles?)
    }

    /// The limit `quantiles` give, as [`Walltime::limit_s`].
    pub fn limit_from(&self, quantiles: &RuntimeQuantiles) -> Option<u64> {
        if quantiles.is_capped(self.quantile) {
            return None;
        }
        let q = quantiles.mean_task_runtime_us.to_array()[self.quantile];
        let secs = (q * self.margin / 1e6).max(self.min_s as f64);
        if !secs.is_finite() {
            return None;
        }
        let step = self.step_s.max(1) as f64;
        Some(((secs / step).ceil() * step).min(u64::MAX as f64) as u64)
    }

    /// The quantile's name (`p99`).
    pub fn quantile_name(&self) -> &'static str {
        Quantiles::NAMES[self.quantile]
    }
}
