//! Failure probabilities recalibrated on what happened to the forecasts
//! before them ([`Recalibration`]).
//!
//! A lifetime model that does not fit the provider's behaviour everywhere
//! is off in the same direction for every VM: GCE's "24 h" VMs, for one,
//! are preempted anywhere between 24.0 and 24.8 h, so a bathtub with its
//! deadline at 24 h says certain failure where one task in eight survives
//! (`jobcast risk calibrate`, `docs/preemption.md`). Isotonic regression of
//! the outcomes on the forecasts (Zadrozny and Elkan, 2002) learns that
//! map: forecasts are counted in equal-width bins of probability, each bin
//! holding its forecasts' weight, their outcomes' and their probabilities'
//! sums; the pool-adjacent-violators algorithm makes the bins' failure
//! rates non-decreasing, and a forecast maps to the rate interpolated
//! between the bins' mean forecasts. The bins bound the memory whatever
//! the number of forecasts; until `min_outcomes` outcomes are counted the
//! map is the identity.

use serde::{Deserialize, Serialize};

/// One bin of forecasts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
struct Bin {
    weight: f64,
    failed: f64,
    p_sum: f64,
}

/// The map from published failure probabilities to observed rates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recalibration {
    bins: Vec<Bin>,
    min_outcomes: f64,
    /// `(mean forecast, calibrated rate)` of the non-empty bins, in order:
    /// the map, rebuilt as outcomes are counted.
    knots: Vec<(f64, f64)>,
}

impl Recalibration {
    /// `bins` equal-width bins of probability; the identity until
    /// `min_outcomes` outcomes (by weight) are counted.
    pub fn new(bins: usize, min_outcomes: f64) -> Self {
        Recalibration {
            bins: vec![Bin::default(); bins.max(1)],
            min_outcomes,
            knots: Vec::new(),
        }
    }

    /// Outcomes counted so far, by weight.
    pub fn outcomes(&self) -> f64 {
        self.bins.iter().map(|b| b.weight).sum()
    }

    /// Count the outcome of a forecast of `p`: `failed` or not, with
    /// `weight` (1, or the inverse probability that a censored outcome
    /// would have been seen). Call [`Self::refit`] to use it.
    pub fn observe(&mut self, p: f64, failed: bool, weight: f64) {
        if !(p.is_finite() && weight.is_finite() && weight > 0.0) {
            return;
        }
        let p = p.clamp(0.0, 1.0);
        let n = self.bins.len();
        let bin = &mut self.bins[((p * n as f64) as usize).min(n - 1)];
        bin.weight += weight;
        bin.p_sum += weight * p;
        if failed {
            bin.failed += weight;
        }
    }

    /// Rebuild the map from the outcomes counted (pool-adjacent violators
    /// over the bins in order of probability).
    pub fn refit(&mut self) {
        self.knots.clear();
        if self.outcomes() < self.min_outcomes {
            return;
        }
        // Blocks of pooled bins: (weight, failed, p_sum).
        let mut blocks: Vec<Bin> = Vec::new();
        for bin in self.bins.iter().filter(|b| b.weight > 0.0) {
            blocks.push(*bin);
            while blocks.len() > 1 {
                let last = blocks[blocks.len() - 1];
                let before = blocks[blocks.len() - 2];
                if before.failed / before.weight <= last.failed / last.weight {
                    break;
                }
                blocks.pop();
                let merged = blocks.last_mut().expect("two blocks");
                merged.weight += last.weight;
                merged.failed += last.failed;
                merged.p_sum += last.p_sum;
            }
        }
        self.knots = blocks
            .iter()
            .map(|b| (b.p_sum / b.weight, b.failed / b.weight))
            .collect();
    }

    /// The calibrated probability of a forecast of `p`.
    pub fn map(&self, p: f64) -> f64 {
        let (Some(&first), Some(&last)) = (self.knots.first(), self.knots.last()) else {
            return p;
        };
        if p.is_nan() {
            return p;
        }
        if p <= first.0 {
            return first.1;
        }
        if p >= last.0 {
            return last.1;
        }
        let next = self.knots.partition_point(|&(x, _)| x <= p);
        let ((x0, y0), (x1, y1)) = (self.knots[next - 1], self.knots[next]);
        if x1 <= x0 {
            return y1;
        }
        y0 + (y1 - y0) * (p - x0) / (x1 - x0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_identity_until_enough_outcomes_then_the_observed_rates() {
        let mut r = Recalibration::new(10, 100.0);
        r.observe(0.95, true, 1.0);
        r.refit();
        assert_eq!(r.map(0.95), 0.95);
        // Forecasts of 0.95 fail half the time; of 0.15, a tenth.
        for i in 0..100 {
            r.observe(0.95, i % 2 == 0, 1.0);
            r.observe(0.15, i % 10 == 0, 1.0);
        }
        r.refit();
        assert!((r.map(0.95) - 51.0 / 101.0).abs() < 1e-12);
        assert!((r.map(0.15) - 0.1).abs() < 1e-12);
        // Between the two, interpolated; beyond, the nearest.
        let mid = r.map(0.55);
        assert!(mid > 0.1 && mid < 0.51, "{mid}");
        assert_eq!(r.map(0.0), 0.1);
        assert!((r.map(1.0) - r.map(0.95)).abs() < 1e-12);
    }

    #[test]
    fn rates_that_fall_with_the_forecast_are_pooled() {
        let mut r = Recalibration::new(10, 1.0);
        // 0.35 fails more often than 0.45: pooled into one rate.
        for i in 0..10 {
            r.observe(0.35, i < 6, 1.0);
            r.observe(0.45, i < 4, 1.0);
        }
        r.observe(0.85, true, 2.0);
        r.refit();
        // One rate at their mean forecast, 0.4; from there up to 0.85's.
        assert!((r.map(0.35) - 0.5).abs() < 1e-12);
        assert!((r.map(0.4) - 0.5).abs() < 1e-12);
        let above = 0.5 + 0.5 * (0.45 - 0.4) / (0.85 - 0.4);
        assert!((r.map(0.45) - above).abs() < 1e-12, "{}", r.map(0.45));
        assert_eq!(r.map(0.85), 1.0);
        // Weights count as outcomes; bad ones are ignored.
        r.observe(f64::NAN, true, 1.0);
        r.observe(0.5, true, f64::INFINITY);
        assert_eq!(r.outcomes(), 22.0);
    }
}
