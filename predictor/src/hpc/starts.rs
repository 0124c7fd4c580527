//! When each waiting job will start, as a distribution rather than one
//! schedule.
//!
//! Playing the schedule forward once, on every job's median runtime,
//! answers the wrong question. A start is an order statistic of the
//! running jobs' ends: the head starts when the first few of them that
//! free enough processors end. The order statistic of the medians is not
//! the median of the order statistic. A head that needs the processors of
//! any one of ten running jobs starts, at the median, when the first of
//! the ten ends, far earlier than the earliest of their medians.
//!
//! So the schedule is played forward [`SAMPLES`] times
//! ([`sampled_starts`]). Each time, every job's runtime is drawn from its
//! predicted distribution ([`Spread`]), a running job's conditioned on
//! the time it has already run. Each waiting job's answer is the median
//! of its sampled starts, and its interval their P90, each at the level
//! among the samples where real starts were seen to fall ([`Sampled`]).
//!
//! Two things keep the played schedules close to the real one:
//!
//! - *The scheduler decides on what it is told, the jobs run as drawn*
//!   ([`backfill::played_forward`]). A site's scheduler backfills on
//!   predictions or limits, not on the runtimes to come: a job backfilled
//!   on a short prediction that runs long holds up the reservation it was
//!   meant to clear. A schedule played with the scheduler knowing the
//!   drawn runtimes packs better than the real one, and answers early.
//! - *The draws fall where runtimes fall* ([`Fit`]). A spread is four
//!   calibrated quantiles and a guessed shape between and beyond them;
//!   where the ended jobs' runtimes fell in their spreads, learnt as they
//!   end, reshapes every draw.
//!
//! The draws are stratified (a Latin hypercube): each job's draws fall one
//! in each of `SAMPLES` equal slices of its distribution, in an order
//! shuffled per job. They are seeded, so the same queue at the same
//! moment gives the same answer.

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use serde::{Deserialize, Serialize};

use super::backfill::{self, Busy, Discipline, Pending, Told};
use crate::decision::Quantiles;

/// Schedules played forward per answer.
pub const SAMPLES: usize = 32;

/// The shortest runtime drawn, µs: the logs' shortest jobs.
const SHORTEST_US: f64 = 1e6;

/// The levels of a [`Spread`]'s knots.
const LEVELS: [f64; 9] = [0.0, 0.01, 0.05, 0.1, 0.5, 0.9, 0.95, 0.99, 1.0];

/// A job's runtime as a distribution, from its predicted quantiles.
///
/// - It is log-linear between its P50, P90, P95 and P99.
/// - Its lower half mirrors the upper in log space (its P10 is P50²/P90),
///   as a log-normal spread, which the quantiles are calibrated on, is
///   symmetric there.
/// - Past the P99 it runs to the job's time limit, where the scheduler
///   kills it. Without a limit, it runs as far again past the P99, in log
///   space, as the P99 lies past the P95.
/// - Every runtime is capped by the limit and is at least a second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spread {
    /// ln µs at each of [`LEVELS`], non-decreasing.
    ln_us: [f64; LEVELS.len()],
}

impl Spread {
    pub fn new(quantiles: Quantiles, limit_us: Option<u64>) -> Spread {
        let ln = |us: f64| us.max(SHORTEST_US).ln();
        let [p50, p90, p95, p99] = quantiles.to_array().map(ln);
        let (p90, p95) = (p90.max(p50), p95.max(p90.max(p50)));
        let p99 = p99.max(p95);
        let tail = p99 - p95;
        let top = limit_us.map_or(p99 + tail, |l| ln(l as f64));
        let mut ln_us = [
            2.0 * p50 - p99 - tail,
            2.0 * p50 - p99,
            2.0 * p50 - p95,
            2.0 * p50 - p90,
            p50,
            p90,
            p95,
            p99,
            top.max(p99),
        ];
        let (floor, cap) = (
            SHORTEST_US.ln(),
            limit_us.map_or(f64::INFINITY, |l| ln(l as f64)),
        );
        let mut last = floor;
        for x in &mut ln_us {
            *x = x.clamp(floor, cap.max(floor)).max(last);
            last = *x;
        }
        Spread { ln_us }
    }

    /// The runtime at level `u` in [0, 1], µs.
    pub fn quantile(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        let i = LEVELS[1..]
            .iter()
            .position(|&l| u <= l)
            .unwrap_or(LEVELS.len() - 2);
        let (l0, l1) = (LEVELS[i], LEVELS[i + 1]);
        let (x0, x1) = (self.ln_us[i], self.ln_us[i + 1]);
        (x0 + (x1 - x0) * (u - l0) / (l1 - l0)).exp()
    }

    /// The share of runtimes at or below `us`.
    pub fn cdf(&self, us: f64) -> f64 {
        let x = us.max(1.0).ln();
        if x < self.ln_us[0] {
            return 0.0;
        }
        let last = LEVELS.len() - 1;
        if x >= self.ln_us[last] {
            return 1.0;
        }
        // The first knot past x; the one before is at or below it.
        let j = self.ln_us.iter().position(|&k| k > x).unwrap_or(last);
        let (x0, x1) = (self.ln_us[j - 1], self.ln_us[j]);
        LEVELS[j - 1] + (LEVELS[j] - LEVELS[j - 1]) * (x - x0) / (x1 - x0)
    }

    /// The longest runtime it allows, µs.
    fn longest(&self) -> f64 {
        self.ln_us[LEVELS.len() - 1].exp()
    }
}

/// Bins of a [`Fit`]'s levels: the last holds the top half of the
/// segment from the P99 to the limit, where jobs killed at their limit
/// fall.
const BINS: usize = 200;
/// Each bin's count before any job is learnt: a uniform prior worth one
/// observation per bin, so that a fit starts as the spreads say.
const PRIOR: f64 = 1.0;
/// Observations a [`Fit`] holds before it halves them all, so that it
/// follows a site's drift: the latest few thousand jobs weigh most.
const KEEP: f64 = 4096.0;

/// Where jobs' runtimes truly fall in their [`Spread`]s: the histogram
/// of the levels their runtimes took (their probability integral
/// transform), learnt as jobs end. A spread is built from four calibrated
/// quantiles and a guessed shape around them; the logs' runtimes do not
/// follow that shape (on KTH they crowd around the median and just below
/// the P90, and more of them fall in the tails than the spread puts
/// there). The draws go through the fit: a job's runtime is drawn at the
/// level below which a uniform share of the ended jobs fell, so that the
/// drawn runtimes fall where real ones do.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Vec<f64>", into = "Vec<f64>")]
pub struct Fit {
    counts: Vec<f64>,
}

/// A fit as its bins' counts, as a snapshot keeps it.
impl From<Fit> for Vec<f64> {
    fn from(fit: Fit) -> Vec<f64> {
        fit.counts
    }
}

/// A fit from a snapshot's counts: one per bin, each finite and positive
/// (halving keeps every count positive).
impl TryFrom<Vec<f64>> for Fit {
    type Error = String;

    fn try_from(counts: Vec<f64>) -> Result<Fit, String> {
        if counts.len() != BINS {
            return Err(format!(
                "a start fit of {} bins, where it has {BINS}",
                counts.len()
            ));
        }
        if let Some(bad) = counts.iter().find(|c| !(c.is_finite() && **c > 0.0)) {
            return Err(format!("a start fit with a bin count of {bad}"));
        }
        Ok(Fit { counts })
    }
}

impl Default for Fit {
    fn default() -> Fit {
        Fit {
            counts: vec![PRIOR; BINS],
        }
    }
}

impl Fit {
    /// A job predicted as `spread` ran `runtime_us`.
    pub fn learn(&mut self, spread: &Spread, runtime_us: f64) {
        self.learn_level(spread.cdf(runtime_us));
    }

    /// A value fell at `level` of the distribution it was predicted from.
    pub fn learn_level(&mut self, level: f64) {
        let bin = ((level.clamp(0.0, 1.0) * BINS as f64) as usize).min(BINS - 1);
        self.counts[bin] += 1.0;
        if self.counts.iter().sum::<f64>() > 2.0 * KEEP {
            self.counts.iter_mut().for_each(|c| *c /= 2.0);
        }
    }

    /// The share of ended jobs below each bin's edge.
    pub fn table(&self) -> Table {
        let total: f64 = self.counts.iter().sum();
        let mut below = [0.0; BINS + 1];
        for (i, c) in self.counts.iter().enumerate() {
            below[i + 1] = below[i] + c / total;
        }
        below[BINS] = 1.0;
        Table { below }
    }
}

/// A [`Fit`] as cumulative shares, for the draws of one projection.
pub struct Table {
    below: [f64; BINS + 1],
}

impl Table {
    /// The share of jobs whose runtime fell at or below level `u` of
    /// their spread.
    pub fn share(&self, u: f64) -> f64 {
        let x = u.clamp(0.0, 1.0) * BINS as f64;
        let i = (x as usize).min(BINS - 1);
        self.below[i] + (self.below[i + 1] - self.below[i]) * (x - i as f64)
    }

    /// The level below which a share `v` of jobs' runtimes fell.
    pub fn level(&self, v: f64) -> f64 {
        let v = v.clamp(0.0, 1.0);
        let i = self.below.partition_point(|&b| b <= v).clamp(1, BINS) - 1;
        let width = self.below[i + 1] - self.below[i];
        let within = if width > 0.0 {
            (v - self.below[i]) / width
        } else {
            0.0
        };
        (i as f64 + within.clamp(0.0, 1.0)) / BINS as f64
    }
}

/// A running job as the projection sees it: its runtime's distribution,
/// and what the site's scheduler was told of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Running {
    pub procs: u32,
    pub start_us: u64,
    pub spread: Spread,
    pub told: Told,
}

/// A waiting job as the projection sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queued {
    pub procs: u32,
    pub spread: Spread,
    pub told: Told,
}

/// A waiting job's start over the sampled schedules, µs: their median
/// (the answer) and P90 (the interval's late end).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Starts {
    pub p50_us: u64,
    pub p90_us: u64,
}

/// A waiting job's starts in the [`SAMPLES`] schedules, µs, sorted
/// (`u64::MAX`: it never fits).
///
/// The median of the samples is not where real starts fall: the played
/// schedules know no job that arrives later, no runtime outside the
/// spreads, no scheduler's quirk, and they lean early (on KTH under EASY,
/// 56 % of jobs started after the samples' median and 32 % before). So
/// the answer is read at the level among the samples below which half the
/// real starts fell, and the interval's late end where nine tenths did:
/// the levels a [`Fit`] learns from each job's samples when it starts
/// ([`Sampled::level_of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "[u64; SAMPLES]", into = "[u64; SAMPLES]")]
pub struct Sampled(pub [u64; SAMPLES]);

/// Samples as a snapshot keeps them.
impl From<Sampled> for [u64; SAMPLES] {
    fn from(sampled: Sampled) -> [u64; SAMPLES] {
        sampled.0
    }
}

/// Samples from a snapshot: sorted, as they are taken.
impl TryFrom<[u64; SAMPLES]> for Sampled {
    type Error = String;

    fn try_from(starts: [u64; SAMPLES]) -> Result<Sampled, String> {
        match starts.windows(2).position(|w| w[0] > w[1]) {
            Some(i) => Err(format!(
                "sampled starts out of order: {} before {} at sample {i}",
                starts[i],
                starts[i + 1]
            )),
            None => Ok(Sampled(starts)),
        }
    }
}

impl Sampled {
    /// The level at which `start_us` falls among the samples: sample `i`
    /// stands at level (i + ½) / [`SAMPLES`], linear between; a start
    /// equal to several samples at the middle of theirs; one outside them
    /// a quarter of a step outside. `None` when the samples all agree:
    /// they say nothing of a lean.
    pub fn level_of(&self, start_us: u64) -> Option<f64> {
        let s = &self.0;
        let n = SAMPLES as f64;
        if s[0] == s[SAMPLES - 1] {
            return None;
        }
        let below = s.partition_point(|&x| x < start_us);
        let at_most = s.partition_point(|&x| x <= start_us);
        Some(if at_most > below {
            (below + at_most) as f64 / (2.0 * n)
        } else if below == 0 {
            0.25 / n
        } else if below == SAMPLES {
            1.0 - 0.25 / n
        } else {
            let (lo, hi) = (s[below - 1] as f64, s[below] as f64);
            (below as f64 - 0.5 + (start_us as f64 - lo) / (hi - lo)) / n
        })
    }

    /// The start at level `v` among the samples (the inverse of
    /// [`Sampled::level_of`] between the first and last sample); `None`
    /// where the job never fits.
    pub fn at(&self, v: f64) -> Option<u64> {
        let s = &self.0;
        let x = (v * SAMPLES as f64 - 0.5).clamp(0.0, (SAMPLES - 1) as f64);
        let i = (x as usize).min(SAMPLES - 2);
        let (lo, hi) = (s[i], s[i + 1]);
        if lo == u64::MAX {
            return None;
        }
        if hi == u64::MAX {
            return Some(lo);
        }
        Some(lo + ((hi - lo) as f64 * (x - i as f64)).round() as u64)
    }

    /// The answer: the start at the level below which half the real
    /// starts fell among their samples (`lean`), and the interval's late
    /// end where nine tenths did (the last finite sample if that is
    /// never). `None` if the job never fits at the median level.
    pub fn answer(&self, lean: &Table) -> Option<Starts> {
        let p50_us = self.at(lean.level(0.5))?;
        let last = self.0.iter().rposition(|&t| t != u64::MAX).unwrap_or(0);
        let p90_us = self.at(lean.level(0.9)).unwrap_or(self.0[last]);
        Some(Starts {
            p50_us,
            p90_us: p90_us.max(p50_us),
        })
    }
}

/// A cluster as a projection sees it at `now_us`: its processors free,
/// its waiting jobs in priority order, its running jobs.
#[derive(Debug, Clone, Copy)]
pub struct Seen<'a> {
    pub now_us: u64,
    pub free: u32,
    pub queue: &'a [Queued],
    pub running: &'a [Running],
}

/// When each of the `wanted` jobs of the queue `seen` holds (positions in
/// it) would start: the schedule under `discipline` played forward
/// [`SAMPLES`] times on runtimes drawn through `fit`, with no further
/// arrivals, each until the wanted jobs have started: each wanted job's
/// starts in the schedules. The draws are seeded by `now_us`; the
/// schedules are played on up to `threads` threads, each on draws made
/// before any is played, so the answer does not depend on how many. The
/// other jobs' entries are `None`.
pub fn sampled_starts(
    discipline: Discipline,
    seen: Seen,
    wanted: &[usize],
    fit: &Fit,
    threads: usize,
) -> Vec<Option<Sampled>> {
    let Seen {
        now_us,
        free,
        queue,
        running,
    } = seen;
    let table = fit.table();
    let mut rng = ChaCha8Rng::seed_from_u64(now_us);
    // Each job's slice of its distribution in each sample.
    let mut slices = |n: usize| -> Vec<[u8; SAMPLES]> {
        (0..n)
            .map(|_| {
                let mut order: [u8; SAMPLES] = std::array::from_fn(|s| s as u8);
                order.shuffle(&mut rng);
                order
            })
            .collect()
    };
    let (running_slices, queue_slices) = (slices(running.len()), slices(queue.len()));
    let mut draws: Vec<(Vec<Busy>, Vec<Pending>)> = Vec::with_capacity(SAMPLES);
    for s in 0..SAMPLES {
        let mut draw = |slice: u8, from: f64| -> f64 {
            let v = (f64::from(slice) + rng.random::<f64>()) / SAMPLES as f64;
            from + (1.0 - from) * v
        };
        let busy: Vec<Busy> = running
            .iter()
            .zip(&running_slices)
            .map(|(r, slices)| {
                let age = now_us.saturating_sub(r.start_us) as f64;
                let end_us = if age >= r.spread.longest() {
                    // Outlived everything it was predicted to run: as long
                    // again, as the deterministic correction takes it.
                    now_us.saturating_add(age as u64)
                } else {
                    let v = draw(slices[s], table.share(r.spread.cdf(age)));
                    let u = table.level(v);
                    r.start_us
                        .saturating_add(r.spread.quantile(u).round() as u64)
                };
                Busy {
                    procs: r.procs,
                    start_us: r.start_us,
                    end_us: end_us.max(now_us + 1),
                    told: r.told,
                }
            })
            .collect();
        let pending: Vec<Pending> = queue
            .iter()
            .zip(&queue_slices)
            .map(|(q, slices)| Pending {
                procs: q.procs,
                told: q.told,
                runtime_us: q.spread.quantile(table.level(draw(slices[s], 0.0))).round() as u64,
            })
            .collect();
        draws.push((busy, pending));
    }
    let play = |(busy, pending): &(Vec<Busy>, Vec<Pending>)| {
        backfill::played_forward(discipline, now_us, free, pending, busy, wanted)
    };
    // The schedules split in runs of consecutive samples, one a thread.
    let threads = threads.clamp(1, SAMPLES);
    let played: Vec<Vec<u64>> = if threads == 1 {
        draws.iter().map(play).collect()
    } else {
        std::thread::scope(|scope| {
            let runs: Vec<_> = draws
                .chunks(SAMPLES.div_ceil(threads))
                .map(|run| scope.spawn(move || run.iter().map(play).collect::<Vec<_>>()))
                .collect();
            runs.into_iter()
                .flat_map(|run| run.join().expect("a played schedule"))
                .collect()
        })
    };
    let mut out = vec![None; queue.len()];
    for &at in wanted {
        let mut sampled: [u64; SAMPLES] = std::array::from_fn(|s| played[s][at]);
        sampled.sort_unstable();
        out[at] = Some(Sampled(sampled));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hpc::backfill::Backfill;

    const S: u64 = 1_000_000;

    fn spread(p50_s: f64, limit_s: Option<u64>) -> Spread {
        let q = Quantiles::from_array([1.0, 3.0, 4.0, 6.0].map(|k| k * p50_s * 1e6));
        Spread::new(q, limit_s.map(|l| l * S))
    }

    /// Each job's answer, with no lean learnt.
    fn answered(sampled: Vec<Option<Sampled>>) -> Vec<Option<Starts>> {
        let lean = Fit::default().table();
        sampled
            .into_iter()
            .map(|s| s.and_then(|s| s.answer(&lean)))
            .collect()
    }

    /// The scheduler told the median, then the P90, P95 and P99 of
    /// [`spread`].
    fn told(p50_s: f64, limit_s: Option<u64>) -> Told {
        let us = |k: f64| (k * p50_s * 1e6) as u64;
        Told {
            predicted_us: us(1.0),
            later_us: [us(3.0), us(4.0), us(6.0)],
            request_us: limit_s.map(|l| l * S),
        }
    }

    /// The distribution passes through the quantiles it was built from,
    /// mirrors them below the median, and its cdf inverts its quantile.
    #[test]
    fn a_spread_passes_through_its_quantiles_and_inverts() {
        let s = spread(100.0, Some(10_000));
        let close = |a: f64, b: f64| (a - b).abs() < 1e-6 * b.max(1.0);
        assert!(close(s.quantile(0.5), 100e6));
        assert!(close(s.quantile(0.9), 300e6));
        assert!(close(s.quantile(0.99), 600e6));
        assert!(close(s.quantile(1.0), 10_000e6));
        // P10 = P50² / P90.
        assert!(close(s.quantile(0.1), 100e6 * 100e6 / 300e6));
        for u in [0.02, 0.3, 0.5, 0.7, 0.93, 0.999] {
            assert!((s.cdf(s.quantile(u)) - u).abs() < 1e-9, "{u}");
        }
        assert_eq!(s.cdf(0.5), 0.0);
        assert_eq!(s.cdf(1e12), 1.0);
    }

    /// A time limit below the quantiles caps every runtime.
    #[test]
    fn a_spread_is_capped_by_the_time_limit() {
        let s = spread(100.0, Some(200));
        assert!(s.quantile(0.9) <= 200e6 + 1.0);
        assert!(s.quantile(1.0) <= 200e6 + 1.0);
        assert!(s.quantile(0.5) < 100e6 + 1.0);
    }

    /// The order statistic. A machine of 10: ten running jobs of one
    /// processor each, all started at 0 with a median of 1,000 s; a job
    /// of 10 processors waits for all of them, and a job of 1 for the
    /// first. Played once on the medians, both start at 1,000 s. Sampled,
    /// the one-processor job starts well before (when the first of ten
    /// ends), and the ten-processor one well after (when the last does).
    #[test]
    fn a_start_is_the_median_of_an_order_statistic() {
        let running: Vec<Running> = (0..10)
            .map(|_| Running {
                procs: 1,
                start_us: 0,
                spread: spread(1000.0, Some(100_000)),
                told: told(1000.0, Some(100_000)),
            })
            .collect();
        let wide = Queued {
            procs: 10,
            ..narrow_queued()
        };
        let narrow = narrow_queued();
        let conservative = answered(sampled_starts(
            Discipline::Conservative,
            Seen {
                now_us: 0,
                free: 0,
                queue: &[wide, narrow],
                running: &running,
            },
            &[0, 1],
            &Fit::default(),
            1,
        ));
        let (wide, narrow) = (conservative[0].unwrap(), conservative[1].unwrap());
        assert!(wide.p50_us > 2_000 * S, "{wide:?}");
        assert!(narrow.p50_us < 500 * S, "{narrow:?}");
        assert!(wide.p90_us >= wide.p50_us && narrow.p90_us >= narrow.p50_us);
        // Under EASY too, the head waits for every processor.
        let easy = answered(sampled_starts(
            Discipline::Easy(Backfill::ShortestFirst),
            Seen {
                now_us: 0,
                free: 0,
                queue: &[Queued {
                    procs: 10,
                    ..narrow_queued()
                }],
                running: &running,
            },
            &[0],
            &Fit::default(),
            1,
        ));
        assert!(easy[0].unwrap().p50_us > 2_000 * S, "{easy:?}");
    }

    fn narrow_queued() -> Queued {
        Queued {
            procs: 1,
            spread: spread(10.0, Some(100)),
            told: told(10.0, Some(100)),
        }
    }

    /// A running job conditioned on its age: one that has run past its
    /// P99 ends between now and its limit, never before now.
    #[test]
    fn a_running_job_ends_after_now_and_by_its_limit() {
        let running = [Running {
            procs: 4,
            start_us: 0,
            spread: spread(100.0, Some(1_000)),
            told: told(100.0, Some(1_000)),
        }];
        let queue = [
            narrow_queued(),
            Queued {
                procs: 4,
                ..narrow_queued()
            },
        ];
        let now = 700 * S;
        let starts = answered(sampled_starts(
            Discipline::Conservative,
            Seen {
                now_us: now,
                free: 0,
                queue: &queue,
                running: &running,
            },
            &[0, 1],
            &Fit::default(),
            1,
        ));
        let first = starts[0].unwrap();
        assert!(first.p50_us > now && first.p90_us <= 1_000 * S, "{first:?}");
        // The same queue, asked again, gets the same answer, whatever
        // the threads it is played on.
        assert_eq!(
            starts,
            answered(sampled_starts(
                Discipline::Conservative,
                Seen {
                    now_us: now,
                    free: 0,
                    queue: &queue,
                    running: &running
                },
                &[0, 1],
                &Fit::default(),
                2,
            ))
        );
    }

    /// A fit starts as the spreads say, and learns where runtimes fall:
    /// once most jobs have run to their P90, half the draws fall beyond
    /// it, and a job waiting for a running one starts later.
    #[test]
    fn the_draws_follow_where_runtimes_fell() {
        let fresh = Fit::default().table();
        for u in [0.0, 0.1, 0.5, 0.93, 1.0] {
            assert!((fresh.level(u) - u).abs() < 1e-9, "{u}");
            assert!((fresh.share(u) - u).abs() < 1e-9, "{u}");
        }
        let s = spread(100.0, Some(10_000));
        let mut fit = Fit::default();
        for _ in 0..1000 {
            fit.learn(&s, s.quantile(0.9));
        }
        let table = fit.table();
        assert!(table.level(0.5) > 0.895, "{}", table.level(0.5));
        assert!((table.share(table.level(0.3)) - 0.3).abs() < 1e-9);
        // A job of 4 processors waits for the one running.
        let running = [Running {
            procs: 4,
            start_us: 0,
            spread: s,
            told: told(100.0, Some(10_000)),
        }];
        let queue = [Queued {
            procs: 4,
            ..narrow_queued()
        }];
        let start = |fit: &Fit| {
            answered(sampled_starts(
                Discipline::Conservative,
                Seen {
                    now_us: 0,
                    free: 0,
                    queue: &queue,
                    running: &running,
                },
                &[0],
                fit,
                1,
            ))[0]
                .unwrap()
                .p50_us
        };
        let (as_said, as_fell) = (start(&Fit::default()), start(&fit));
        assert!(as_said < 150 * S, "{as_said}");
        assert!(as_fell > 250 * S, "{as_fell}");
    }

    /// A fit goes through its serialised form whole, and one of the wrong
    /// shape is refused by what is wrong.
    #[test]
    fn a_fit_round_trips_and_a_malformed_one_is_refused() {
        let mut fit = Fit::default();
        fit.learn(&spread(100.0, Some(10_000)), 300e6);
        let json = serde_json::to_string(&fit).unwrap();
        assert_eq!(serde_json::from_str::<Fit>(&json).unwrap(), fit);
        let short = serde_json::from_str::<Fit>("[1.0, 2.0]").unwrap_err();
        assert!(short.to_string().contains("of 2 bins"), "{short}");
        let zeros = format!("[{}]", vec!["0.0"; BINS].join(","));
        let zero = serde_json::from_str::<Fit>(&zeros).unwrap_err();
        assert!(zero.to_string().contains("bin count of 0"), "{zero}");
    }

    /// Where a start falls among its samples, and the start at a level:
    /// the one inverts the other between the first sample and the last;
    /// ties take the middle of their levels, samples that all agree teach
    /// nothing, and a job that never fits has no start.
    #[test]
    fn samples_round_trip_and_unsorted_ones_are_refused() {
        let spaced = Sampled(std::array::from_fn(|i| 100 * i as u64));
        let json = serde_json::to_string(&spaced).unwrap();
        assert_eq!(serde_json::from_str::<Sampled>(&json).unwrap(), spaced);
        let mut unsorted = spaced.0;
        unsorted.swap(3, 4);
        let err = serde_json::from_str::<Sampled>(&serde_json::to_string(&unsorted).unwrap())
            .unwrap_err();
        assert!(err.to_string().contains("out of order"), "{err}");
    }

    #[test]
    fn a_start_is_placed_among_its_samples_and_read_back() {
        let spaced = Sampled(std::array::from_fn(|i| 100 * i as u64));
        let n = SAMPLES as f64;
        for v in [0.5 / n, 0.2, 0.5, 0.77, 0.9, 1.0 - 0.5 / n] {
            let t = spaced.at(v).unwrap();
            assert!((spaced.level_of(t).unwrap() - v).abs() < 0.01 / n, "{v}");
        }
        assert_eq!(spaced.at(0.5), Some(1550));
        assert_eq!(spaced.level_of(1_000_000), Some(1.0 - 0.25 / n));
        let mut tied = [7u64; SAMPLES];
        tied[SAMPLES - 1] = 9;
        let tied = Sampled(tied);
        assert_eq!(tied.level_of(7), Some((SAMPLES - 1) as f64 / (2.0 * n)));
        assert_eq!(Sampled([7; SAMPLES]).level_of(7), None);
        let mut late = [u64::MAX; SAMPLES];
        late[0] = 10;
        assert_eq!(Sampled(late).at(0.5), None);
        assert_eq!(Sampled(late).at(0.0), Some(10));
    }

    /// An answer read where real starts fell: once half the real starts
    /// fell above the samples' P75, the answer moves there, and the
    /// interval's late end with it.
    #[test]
    fn an_answer_follows_where_real_starts_fell() {
        let spaced = Sampled(std::array::from_fn(|i| 100 * i as u64));
        let fresh = spaced.answer(&Fit::default().table()).unwrap();
        assert_eq!(fresh.p50_us, 1550);
        let mut lean = Fit::default();
        for _ in 0..1000 {
            lean.learn_level(spaced.level_of(spaced.at(0.75).unwrap()).unwrap());
            lean.learn_level(spaced.level_of(spaced.at(0.97).unwrap()).unwrap());
        }
        let leant = spaced.answer(&lean.table()).unwrap();
        assert!((2350..=2450).contains(&leant.p50_us), "{leant:?}");
        assert!(leant.p90_us >= 2950, "{leant:?}");
    }

    /// A job wider than the machine never starts.
    #[test]
    fn a_job_that_never_fits_has_no_start() {
        let queue = [Queued {
            procs: 8,
            ..narrow_queued()
        }];
        let starts = sampled_starts(
            Discipline::Conservative,
            Seen {
                now_us: 0,
                free: 4,
                queue: &queue,
                running: &[],
            },
            &[0],
            &Fit::default(),
            1,
        );
        assert_eq!(starts, [Some(Sampled([u64::MAX; SAMPLES]))]);
        assert_eq!(answered(starts), [None]);
    }
}
