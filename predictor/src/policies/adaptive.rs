//! SLearn's adaptive sampling ratio (the paper's Figure 4).
//!
//! Wide jobs are numbered in arrival order. The first T use 3%, the next T
//! 2%, the next T 4%. After that each job uses the ratio with the lowest
//! score, where a ratio's score is the mean normalized JCT of the last T
//! finished jobs that used it; if that ratio is 2% and beats 3% by more
//! than 10% the job tries 1%, and if it is 4% and beats 3% by more than 10%
//! the job tries 5%.
//!
//! Choices the figure leaves open, made here:
//! - a ratio with no finished job has no score and cannot be the minimum;
//!   while no ratio has a score (jobs of the first 3T still running) the
//!   start-up ratio 3% is used;
//! - the 1% and 5% rules compare against score(3%); without one they do not
//!   fire and the minimum is used;
//! - ties go to the smaller ratio (fewer pilots, less overhead);
//! - the window holds exactly the last T scores (the figure's pseudo-code
//!   drops the oldest only once it holds more than T, i.e. keeps T + 1);
//! - non-finite normalized JCTs and ratios outside 1–5% are ignored.
//!
//! Followed literally, the figure can settle on 1% (or 5%) for good: once
//! 2% is the minimum and beats 3% by 10%, every job uses 1%, so the scores
//! of 2% and 3% stop changing and the rule keeps firing even if 1% turns
//! out worse. This is the paper's algorithm and is kept as such.

use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// The sampling ratios the algorithm chooses from, in percent.
pub const RATIO_PERCENTS: [u8; 5] = [1, 2, 3, 4, 5];

/// The start-up schedule: one block of T jobs per ratio, in this order.
const STARTUP: [u8; 3] = [3, 2, 4];

/// The adaptive sampling-ratio state machine.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AdaptiveRatio {
    block: u64,
    /// Wide jobs that have been given a ratio.
    assigned: u64,
    /// Normalized JCTs of the last `block` finished jobs per ratio, indexed
    /// by percent − 1.
    windows: [VecDeque<f64>; 5],
}

impl AdaptiveRatio {
    /// A fresh state with blocks of `block` (T) jobs; 0 is taken as 1.
    pub fn new(block: u32) -> Self {
        AdaptiveRatio {
            block: u64::from(block.max(1)),
            assigned: 0,
            windows: Default::default(),
        }
    }

    /// The ratio (percent) for the next wide job; counts the job.
    pub fn next_percent(&mut self) -> u8 {
        let block_index = self.assigned / self.block;
        self.assigned = self.assigned.saturating_add(1);
        match usize::try_from(block_index)
            .ok()
            .and_then(|i| STARTUP.get(i))
        {
            Some(&p) => p,
            None => self.steady_state_percent(),
        }
    }

    /// The ratio the figure's lines 8–15 choose from the current scores.
    pub fn steady_state_percent(&self) -> u8 {
        let mut min: Option<(u8, f64)> = None;
        for p in RATIO_PERCENTS {
            if let Some(s) = self.score(p)
                && min.is_none_or(|(_, m)| s < m)
            {
                min = Some((p, s));
            }
        }
        let Some((p, m)) = min else {
            return STARTUP[0];
        };
        let three = self.score(3);
        match p {
            2 if three.is_some_and(|s3| 1.1 * m < s3) => 1,
            4 if three.is_some_and(|s3| s3 > 1.1 * m) => 5,
            _ => p,
        }
    }

    /// A job that used `percent` finished with this normalized JCT.
    pub fn record(&mut self, percent: u8, normalized_jct: f64) {
        if !normalized_jct.is_finite() {
            return;
        }
        let Some(i) = Self::index(percent) else {
            return;
        };
        let window = &mut self.windows[i];
        if window.len() as u64 >= self.block {
            window.pop_front();
        }
        window.push_back(normalized_jct);
    }

    /// The running score of `percent`: the mean normalized JCT of its last
    /// T finished jobs, if it has any.
    pub fn score(&self, percent: u8) -> Option<f64> {
        let w = &self.windows[Self::index(percent)?];
        (!w.is_empty()).then(|| w.iter().sum::<f64>() / w.len() as f64)
    }

    fn index(percent: u8) -> Option<usize> {
        RATIO_PERCENTS.iter().position(|&p| p == percent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Start-up with T = 2, then record the given scores (one job each).
    fn started(scores: &[(u8, f64)]) -> AdaptiveRatio {
        let mut a = AdaptiveRatio::new(2);
        let startup: Vec<u8> = (0..6).map(|_| a.next_percent()).collect();
        assert_eq!(startup, [3, 3, 2, 2, 4, 4]);
        for &(p, s) in scores {
            a.record(p, s);
        }
        a
    }

    #[test]
    fn startup_blocks_are_3_then_2_then_4_percent() {
        let mut a = AdaptiveRatio::new(3);
        let got: Vec<u8> = (0..9).map(|_| a.next_percent()).collect();
        assert_eq!(got, [3, 3, 3, 2, 2, 2, 4, 4, 4]);
        // Scores recorded during start-up do not change the schedule.
        let mut b = AdaptiveRatio::new(2);
        b.next_percent();
        b.record(3, 50.0);
        b.record(2, 1.0);
        let got: Vec<u8> = (0..5).map(|_| b.next_percent()).collect();
        assert_eq!(got, [3, 2, 2, 4, 4]);
    }

    #[test]
    fn without_any_score_the_startup_ratio_is_kept() {
        let mut a = started(&[]);
        assert_eq!(a.next_percent(), 3);
        assert_eq!(a.next_percent(), 3);
    }

    #[test]
    fn the_lowest_score_wins() {
        let mut a = started(&[(3, 1.5), (2, 2.0), (4, 3.0)]);
        assert_eq!(a.next_percent(), 3);
        // 4% the minimum but not 10% better than 3%: stays at 4%.
        let mut a = started(&[(3, 1.5), (2, 2.0), (4, 1.4)]);
        assert_eq!(a.next_percent(), 4);
        // 2% the minimum but not 10% better than 3%: stays at 2%.
        let mut a = started(&[(3, 1.5), (2, 1.4), (4, 2.0)]);
        assert_eq!(a.next_percent(), 2);
    }

    #[test]
    fn a_clear_win_of_2_percent_tries_1_percent() {
        // 1.1 × 1.2 = 1.32 < 1.5
        let mut a = started(&[(3, 1.5), (2, 1.2), (4, 2.0)]);
        assert_eq!(a.next_percent(), 1);
        // The rule keeps firing while 2% is the minimum, even after a 1%
        // job scored worse (the figure, literally).
        a.record(1, 1.25);
        assert_eq!(a.next_percent(), 1);
        // Once 1% is the minimum it is used as such.
        a.record(1, 0.75); // mean 1.0 < 1.2
        assert_eq!(a.score(1), Some(1.0));
        assert_eq!(a.next_percent(), 1);
    }

    #[test]
    fn a_clear_win_of_4_percent_tries_5_percent() {
        // 1.1 × 1.2 = 1.32 < 1.5
        let mut a = started(&[(3, 1.5), (2, 2.0), (4, 1.2)]);
        assert_eq!(a.next_percent(), 5);
        a.record(5, 1.0);
        assert_eq!(a.next_percent(), 5);
        // 5% doing badly leaves 4% the minimum, which again sends jobs to 5%.
        a.record(5, 5.0);
        assert_eq!(a.next_percent(), 5);
        // Only 3% catching up stops it: 1.3 < 1.1 × 1.2.
        a.record(3, 1.1); // mean (1.5 + 1.1) / 2 = 1.3
        assert_eq!(a.next_percent(), 4);
    }

    #[test]
    fn the_1_and_5_percent_rules_need_a_3_percent_score() {
        let mut a = started(&[(2, 1.0), (4, 2.0)]);
        assert_eq!(a.next_percent(), 2);
        let mut a = started(&[(4, 1.0)]);
        assert_eq!(a.next_percent(), 4);
    }

    #[test]
    fn ties_go_to_the_smaller_ratio() {
        let mut a = started(&[(4, 1.5), (3, 1.5)]);
        assert_eq!(a.next_percent(), 3);
        let mut a = started(&[(5, 1.0), (1, 1.0), (3, 2.0)]);
        assert_eq!(a.next_percent(), 1);
    }

    #[test]
    fn scores_average_the_last_t_jobs_only() {
        let mut a = AdaptiveRatio::new(2);
        a.record(3, 10.0);
        a.record(3, 2.0);
        assert_eq!(a.score(3), Some(6.0));
        a.record(3, 4.0);
        assert_eq!(a.score(3), Some(3.0));
        assert_eq!(a.score(2), None);
    }

    #[test]
    fn odd_inputs_are_ignored() {
        let mut a = AdaptiveRatio::new(0);
        a.record(3, f64::NAN);
        a.record(3, f64::INFINITY);
        a.record(7, 1.0);
        a.record(0, 1.0);
        assert!(RATIO_PERCENTS.iter().all(|&p| a.score(p).is_none()));
        assert_eq!(a.score(7), None);
        // Block 0 behaves as block 1.
        let got: Vec<u8> = (0..4).map(|_| a.next_percent()).collect();
        assert_eq!(got, [3, 2, 4, 3]);
    }
}
