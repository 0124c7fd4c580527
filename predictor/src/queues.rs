//! The multi-level priority queues of the generic scheduler GS (SLearn
//! §5.1.1): jobs are placed by their estimated total size (mean task runtime
//! × tasks) into N queues with exponentially growing thresholds; FIFO within
//! a queue, weighted sharing across queues so that long jobs never starve.

use serde::{Deserialize, Serialize};

use jobcast_ingest::config::ConfigError;

/// Queue layout. Defaults are the paper's: 10 queues, Q0 holds jobs up to
/// 10^6 ms of total task time, each threshold 10× the previous, and each
/// queue's share weight 10× smaller than the one above it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct QueueConfig {
    pub levels: u8,
    /// Upper bound of Q0, in µs of total job size.
    pub q0_upper_us: f64,
    /// Threshold growth factor E.
    pub growth: f64,
    /// Each queue's weight is this factor smaller than the one above it.
    pub weight_ratio: f64,
    /// The queue SLearn and the Bayesian hybrid run a job's pilot tasks in
    /// until its estimate places it: the paper's second-highest (1), so
    /// that learning new jobs does not delay jobs already estimated (§5.1.2).
    /// Where the second queue holds a backlog of long jobs, GS's FIFO makes
    /// pilots wait behind it; 0 runs them first.
    #[serde(default = "default_sampling_queue")]
    pub sampling_queue: u8,
}

fn default_sampling_queue() -> u8 {
    1
}

impl Default for QueueConfig {
    fn default() -> Self {
        QueueConfig {
            levels: 10,
            q0_upper_us: 1e9,
            growth: 10.0,
            weight_ratio: 10.0,
            sampling_queue: default_sampling_queue(),
        }
    }
}

/// The queue thin jobs bypass to (the highest priority).
pub const TOP_QUEUE: u8 = 0;

impl QueueConfig {
    /// The queue a job of total size `size_us` belongs in: the first whose
    /// upper threshold exceeds it; the last queue is unbounded.
    pub fn queue_for(&self, size_us: f64) -> u8 {
        let mut upper = self.q0_upper_us;
        for q in 0..self.levels.saturating_sub(1) {
            if size_us < upper {
                return q;
            }
            upper *= self.growth;
        }
        self.levels.saturating_sub(1)
    }

    /// Upper threshold of queue `q` (infinite for the last).
    pub fn upper_us(&self, q: u8) -> f64 {
        if q + 1 >= self.levels {
            f64::INFINITY
        } else {
            self.q0_upper_us * self.growth.powi(i32::from(q))
        }
    }

    /// Relative share weight of queue `q` (Q0 has weight 1).
    pub fn weight(&self, q: u8) -> f64 {
        self.weight_ratio.powi(-i32::from(q))
    }

    /// Check the layout, naming the bad setting.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.levels < 2 {
            return Err(ConfigError::new(
                "levels",
                "must be at least 2 (thin-job and sampling queues)",
            ));
        }
        if !(self.q0_upper_us.is_finite() && self.q0_upper_us > 0.0) {
            return Err(ConfigError::new(
                "q0_upper_us",
                format!("must be positive, got {}", self.q0_upper_us),
            ));
        }
        if !(self.growth.is_finite() && self.growth > 1.0) {
            return Err(ConfigError::new(
                "growth",
                format!("must exceed 1, got {}", self.growth),
            ));
        }
        if self.sampling_queue >= self.levels {
            return Err(ConfigError::new(
                "sampling_queue",
                format!(
                    "must be a queue, below levels ({}), got {}",
                    self.levels, self.sampling_queue
                ),
            ));
        }
        if !(self.weight_ratio.is_finite() && self.weight_ratio >= 1.0) {
            return Err(ConfigError::new(
                "weight_ratio",
                format!("must be at least 1, got {}", self.weight_ratio),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thresholds_grow_exponentially() {
        let q = QueueConfig::default();
        assert_eq!(q.queue_for(0.0), 0);
        assert_eq!(q.queue_for(999_999_999.0), 0);
        assert_eq!(q.queue_for(1e9), 1);
        assert_eq!(q.queue_for(9.9e9), 1);
        assert_eq!(q.queue_for(1e10), 2);
        assert_eq!(q.queue_for(9.9e16), 8);
        assert_eq!(q.queue_for(1e17), 9);
        assert_eq!(q.queue_for(f64::INFINITY), 9);
        assert_eq!(q.upper_us(2), 1e11);
        assert_eq!(q.upper_us(9), f64::INFINITY);
        assert!((q.weight(3) - 1e-3).abs() < 1e-15);
        assert!(q.validate().is_ok());
        assert!(
            QueueConfig {
                growth: 1.0,
                ..q.clone()
            }
            .validate()
            .is_err()
        );
        assert_eq!(q.sampling_queue, 1, "the paper's second queue");
        let outside = QueueConfig {
            sampling_queue: 10,
            ..q
        };
        let err = outside.validate().unwrap_err().to_string();
        assert!(err.contains("sampling_queue"), "{err}");
    }
}
