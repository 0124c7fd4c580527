//! The pilot tasks of one job: which tasks, which have finished, and what
//! happens when a pilot attempt ends without finishing.
//!
//! Pilots are drawn without replacement from a candidate set of task
//! indices (all of a flat job's tasks, or a DAG's root-stage tasks) with a
//! ChaCha8 stream keyed by `(seed, job id)`: the draw depends on nothing
//! but the job and the seed.
//!
//! A pilot attempt that ends unfinished is replaced by a fresh random
//! candidate never chosen before. When no fresh candidate is left, the
//! failed pilot is dropped if others can still decide the estimate (some
//! pilot finished, or others are running); if it was the last hope (none
//! finished, none other running) it stays a pilot and the job keeps
//! waiting, since the cluster retries failed tasks and the retry may
//! finish. Tasks that are not (or no longer) pilots are ignored.

use std::collections::HashSet;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

/// What a task end did to the pilot set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PilotUpdate {
    /// Not a current pilot, or nothing changed that a scheduler must know.
    Unchanged,
    /// A failed pilot was replaced: the pilot list changed.
    Replaced,
    /// Every remaining pilot has finished: estimate now.
    Complete,
}

/// `max(1, ⌊ratio × width⌋)`, at most `width`. The tiny slack keeps
/// products such as 0.29 × 100 = 28.999… from losing a pilot to rounding.
pub(crate) fn pilot_count(ratio: f64, width: u32) -> u32 {
    let m = (ratio * f64::from(width) + 1e-9).floor();
    // `as` saturates; NaN (not reachable with a validated ratio) gives 0.
    (m as u32).max(1).min(width)
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct PilotSet {
    rng: ChaCha8Rng,
    /// Candidate task indices as `(first, count)` ranges.
    space: Vec<(u32, u32)>,
    space_len: u32,
    /// Positions in the candidate space ever drawn.
    drawn: HashSet<u32>,
    running: Vec<u32>,
    finished: Vec<(u32, u64)>,
}

impl PilotSet {
    /// Draw `m` distinct pilots (at most the candidates there are) from the
    /// task ranges `space`.
    pub(crate) fn new(seed: u64, job_id: u64, space: Vec<(u32, u32)>, m: u32) -> Self {
        let mut key = [0u8; 32];
        key[..8].copy_from_slice(&seed.to_le_bytes());
        key[8..16].copy_from_slice(&job_id.to_le_bytes());
        let mut rng = ChaCha8Rng::from_seed(key);
        let space_len = space
            .iter()
            .fold(0u32, |n, &(_, count)| n.saturating_add(count));
        let m = m.min(space_len);
        let positions: Vec<u32> =
            rand::seq::index::sample(&mut rng, space_len as usize, m as usize)
                .into_iter()
                .map(|p| p as u32)
                .collect();
        let mut set = PilotSet {
            rng,
            space,
            space_len,
            drawn: positions.iter().copied().collect(),
            running: Vec::new(),
            finished: Vec::new(),
        };
        set.running = positions.into_iter().map(|p| set.task_at(p)).collect();
        set
    }

    /// The task index at position `p` of the candidate space.
    fn task_at(&self, mut p: u32) -> u32 {
        for &(first, count) in &self.space {
            if p < count {
                return first + p;
            }
            p -= count;
        }
        // Positions are drawn below `space_len`, so this is not reached.
        p
    }

    /// The current pilots, finished or running, in task order.
    pub(crate) fn pilots(&self) -> Vec<u32> {
        let mut all: Vec<u32> = self
            .finished
            .iter()
            .map(|&(t, _)| t)
            .chain(self.running.iter().copied())
            .collect();
        all.sort_unstable();
        all
    }

    /// Runtimes of the finished pilots, µs.
    pub(crate) fn runtimes(&self) -> Vec<f64> {
        self.finished.iter().map(|&(_, r)| r as f64).collect()
    }

    /// A fresh candidate never drawn before, if one is left. Rejection
    /// sampling while at least half the space is fresh (≤ 2 draws
    /// expected); otherwise the k-th fresh position, found by a scan.
    fn draw_fresh(&mut self) -> Option<u32> {
        let drawn = self.drawn.len() as u32;
        let fresh = self.space_len.checked_sub(drawn).filter(|&f| f > 0)?;
        let position = if fresh >= self.space_len / 2 {
            loop {
                let p = self.rng.random_range(0..self.space_len);
                if !self.drawn.contains(&p) {
                    break p;
                }
            }
        } else {
            let k = self.rng.random_range(0..fresh) as usize;
            (0..self.space_len)
                .filter(|p| !self.drawn.contains(p))
                .nth(k)?
        };
        self.drawn.insert(position);
        Some(self.task_at(position))
    }

    /// A task attempt ended: `Some(runtime)` if it finished.
    pub(crate) fn on_task_end(&mut self, task: u32, runtime_us: Option<u64>) -> PilotUpdate {
        let Some(i) = self.running.iter().position(|&t| t == task) else {
            return PilotUpdate::Unchanged;
        };
        if let Some(r) = runtime_us {
            self.running.swap_remove(i);
            self.finished.push((task, r));
        } else if let Some(fresh) = self.draw_fresh() {
            self.running[i] = fresh;
            return PilotUpdate::Replaced;
        } else if !self.finished.is_empty() || self.running.len() > 1 {
            self.running.swap_remove(i);
        }
        if self.running.is_empty() {
            PilotUpdate::Complete
        } else {
            PilotUpdate::Unchanged
        }
    }
}

/// Mean and sample sd (n − 1) of ln(runtime) over `runtimes`; runtimes are
/// floored at 1 µs so that a zero-length task cannot give −∞. The sd is
/// `None` for fewer than two values.
pub(crate) fn log_stats(runtimes: &[f64]) -> (f64, Option<f64>) {
    let logs: Vec<f64> = runtimes.iter().map(|r| r.max(1.0).ln()).collect();
    let n = logs.len() as f64;
    let mean = logs.iter().sum::<f64>() / n;
    let sd = (logs.len() >= 2)
        .then(|| (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt());
    (mean, sd)
}

pub(crate) fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pilot_counts_floor_with_at_least_one() {
        assert_eq!(pilot_count(0.03, 100), 3);
        assert_eq!(pilot_count(0.03, 99), 2);
        assert_eq!(pilot_count(0.03, 10), 1);
        assert_eq!(pilot_count(0.29, 100), 29);
        assert_eq!(pilot_count(0.07, 100), 7);
        assert_eq!(pilot_count(1.0, 7), 7);
        assert_eq!(pilot_count(0.05, 0), 0);
    }

    #[test]
    fn pilots_are_distinct_and_inside_the_ranges() {
        let set = PilotSet::new(1, 2, vec![(0, 10), (15, 10)], 20);
        let expected: Vec<u32> = (0..10).chain(15..25).collect();
        assert_eq!(set.pilots(), expected);
        let set = PilotSet::new(1, 2, vec![(5, 3)], 10);
        assert_eq!(set.pilots(), [5, 6, 7]);
    }

    #[test]
    fn replacements_exhaust_the_space_without_repeats() {
        let mut set = PilotSet::new(9, 9, vec![(0, 6)], 2);
        let mut seen: HashSet<u32> = set.pilots().into_iter().collect();
        for _ in 0..4 {
            let victim = set.running[0];
            assert_eq!(set.on_task_end(victim, None), PilotUpdate::Replaced);
            let now = set.pilots();
            assert_eq!(now.len(), 2);
            assert!(!now.contains(&victim));
            seen.extend(now);
        }
        assert_eq!(seen.len(), 6, "every task tried once: {seen:?}");
        // Nothing fresh is left: the failed pilot is dropped, the other one
        // keeps the job waiting.
        let victim = set.running[0];
        assert_eq!(set.on_task_end(victim, None), PilotUpdate::Unchanged);
        assert_eq!(set.pilots().len(), 1);
        // The last one is kept through failures (its retry may finish).
        let last = set.running[0];
        assert_eq!(set.on_task_end(last, None), PilotUpdate::Unchanged);
        assert_eq!(set.pilots(), [last]);
        assert_eq!(set.on_task_end(last, Some(7)), PilotUpdate::Complete);
        assert_eq!(set.runtimes(), [7.0]);
    }

    #[test]
    fn log_stats_by_hand() {
        let (m, sd) = log_stats(&[1.0, std::f64::consts::E.powi(2)]);
        assert!((m - 1.0).abs() < 1e-12);
        assert!((sd.unwrap() - 2f64.sqrt()).abs() < 1e-12);
        let (m, sd) = log_stats(&[0.0]);
        assert_eq!((m, sd), (0.0, None));
    }
}
