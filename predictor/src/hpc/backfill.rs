//! The batch scheduler of an HPC site, as a pure function of its state:
//! one machine of P processors, a queue of rigid jobs in priority order,
//! and the running jobs' expected ends. Two disciplines, both FCFS at
//! heart (Mu'alem and Feitelson, TPDS 2001):
//!
//! - [`Discipline::Easy`]: only the queue's head holds a reservation (at
//!   the shadow time, the earliest moment enough processors free up); a
//!   later job backfills if it fits now and does not delay the head.
//!   Behind the head, jobs are tried in queue order ([`Backfill::Fcfs`])
//!   or shortest predicted first ([`Backfill::ShortestFirst`], EASY++'s
//!   SJBF).
//! - [`Discipline::Conservative`]: every waiting job, in queue order,
//!   holds a reservation at the earliest time it fits in the processors
//!   the running jobs and the reservations before it leave; a job starts
//!   when its reservation is now. Slurm's backfill plugin works this way
//!   (every pending job it tests gets a planned start), and its answer to
//!   `squeue --start` is that plan on the time limits.
//!
//! The simulator runs a log through [`starts_now`] at every arrival and
//! end. "When will my job start?" is the schedule played forward with no
//! further arrivals: on what the scheduler is told ([`projected_starts`],
//! `squeue --start`'s answer on the time limits), or with the jobs running
//! as long as they will while the scheduler decides on what it is told
//! ([`played_forward`], which the sampled answer of
//! [`crate::hpc::starts`] plays on drawn runtimes).

/// A waiting job as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub procs: u32,
    /// Its runtime as the scheduler is told it, µs.
    pub runtime_us: u64,
}

/// A running job: when it is expected to end, and its processors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ending {
    pub end_us: u64,
    pub procs: u32,
}

/// How the scheduler reserves for the jobs it cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    Easy(Backfill),
    Conservative,
}

/// The order in which EASY tries the jobs behind the queue's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backfill {
    /// By submission: plain EASY.
    Fcfs,
    /// Shortest predicted runtime first (SJBF), as EASY++ does: short
    /// jobs are the likeliest to fit before the shadow time, and the ones
    /// whose slowdown a wait inflates most.
    ShortestFirst,
}

/// What the scheduler is told of a job's runtime, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Told {
    /// The runtime it plans the job on.
    pub predicted_us: u64,
    /// The ends it moves a running job to as the job outlives each (its
    /// predictor's higher quantiles, ascending; the prediction again for
    /// a predictor without them).
    pub later_us: [u64; 3],
    /// The request, which caps them all and kills the job.
    pub request_us: Option<u64>,
}

impl Told {
    /// Told a prediction without quantiles.
    pub fn predicted(predicted_us: u64, request_us: Option<u64>) -> Told {
        Told {
            predicted_us,
            later_us: [predicted_us; 3],
            request_us,
        }
    }

    /// The runtime a waiting job is planned on: the prediction, capped by
    /// the request.
    pub fn planned_us(&self) -> u64 {
        self.predicted_us.min(self.request_us.unwrap_or(u64::MAX))
    }

    /// The job's expected end, seen at `now_us`, once it started at
    /// `start_us`: its prediction; once it has outlived that, the first of
    /// the later ends it has not outlived; then its request (EASY++'s
    /// correction), all capped by the request. Without a request, a job
    /// that has outlived them all is expected to run as long again as it
    /// has run. Always after `now_us`.
    pub fn expected_end(&self, now_us: u64, start_us: u64) -> u64 {
        let predicted = start_us.saturating_add(self.planned_us());
        if predicted > now_us {
            return predicted;
        }
        let request = self.request_us.unwrap_or(u64::MAX);
        let unbounded = || {
            let age = now_us.saturating_sub(start_us);
            now_us.saturating_add(age)
        };
        self.later_us
            .iter()
            .map(|&q| start_us.saturating_add(q.min(request)))
            .find(|&end| end > now_us)
            .unwrap_or_else(|| {
                self.request_us
                    .map_or_else(unbounded, |r| start_us.saturating_add(r))
            })
            .max(now_us + 1)
    }
}

/// What the scheduler starts at `now_us` with `free` processors free:
/// `queue` in priority order, `ending` the running jobs. The queue's
/// positions it starts, ascending, each with whether it jumped a job
/// ahead of it that could not start (backfilled).
pub fn starts_now(
    discipline: Discipline,
    now_us: u64,
    free: u32,
    queue: &[Waiting],
    ending: &[Ending],
) -> Vec<(usize, bool)> {
    match discipline {
        Discipline::Easy(order) => easy(now_us, free, queue, ending, order),
        Discipline::Conservative => {
            // The narrowest and the shortest job from each position on:
            // reservations only take processors, so once fewer are free
            // throughout the shortest one's runtime from now than the
            // narrowest needs, no later job can start now, and their
            // reservations are not needed.
            let mut narrowest = vec![(u32::MAX, u64::MAX); queue.len() + 1];
            for at in (0..queue.len()).rev() {
                let (procs, runtime) = narrowest[at + 1];
                narrowest[at] = (
                    procs.min(queue[at].procs),
                    runtime.min(queue[at].runtime_us.max(1)),
                );
            }
            let mut profile = Profile::new(now_us, free, ending);
            let mut blocked = false;
            let mut started = Vec::new();
            for (at, job) in queue.iter().enumerate() {
                let (procs, runtime) = narrowest[at];
                if profile.least_free(now_us.saturating_add(runtime)) < i64::from(procs) {
                    break;
                }
                let start = profile.reserve(*job);
                if start == now_us {
                    started.push((at, blocked));
                } else {
                    blocked = true;
                }
            }
            started
        }
    }
}

/// When each job of `queue` would start if the running and waiting jobs
/// ran as told and nothing else arrived: the schedule played forward from
/// `now_us`. `u64::MAX` for a job that never fits.
pub fn projected_starts(
    discipline: Discipline,
    now_us: u64,
    free: u32,
    queue: &[Waiting],
    ending: &[Ending],
) -> Vec<u64> {
    if discipline == Discipline::Conservative {
        let mut profile = Profile::new(now_us, free, ending);
        return queue.iter().map(|job| profile.reserve(*job)).collect();
    }
    // EASY played forward with every job running as long as it is told.
    let pending: Vec<Pending> = queue
        .iter()
        .map(|w| Pending {
            procs: w.procs,
            told: Told::predicted(w.runtime_us, None),
            runtime_us: w.runtime_us,
        })
        .collect();
    let busy: Vec<Busy> = ending
        .iter()
        .map(|e| {
            let end_us = e.end_us.max(now_us + 1);
            Busy {
                procs: e.procs,
                start_us: now_us,
                end_us,
                told: Told::predicted(end_us - now_us, None),
            }
        })
        .collect();
    let every: Vec<usize> = (0..queue.len()).collect();
    played_forward(discipline, now_us, free, &pending, &busy, &every)
}

/// A waiting job played forward: what the scheduler is told of it, and
/// how long it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    pub procs: u32,
    pub told: Told,
    pub runtime_us: u64,
}

/// A running job played forward: when it started and will end, and what
/// the scheduler was told of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Busy {
    pub procs: u32,
    pub start_us: u64,
    /// After `now_us`.
    pub end_us: u64,
    pub told: Told,
}

/// When the `wanted` jobs of `queue` (positions in it) start if every job
/// runs as long as it will while the scheduler decides on what it is
/// told, and nothing else arrives: the site's schedule played forward
/// from `now_us` until they all have started. The scheduler looks again
/// at every end and whenever a running job outlives what it was told, as
/// the simulator's does. The projection on what the scheduler is told
/// ([`projected_starts`]) lets it plan on the runtimes themselves; here a
/// job backfilled on a short prediction that runs long holds up the
/// reservations it was meant to clear, and one that ends early leaves a
/// hole the told runtimes may not fill. `u64::MAX` for a job that never
/// starts; the other jobs' entries are `u64::MAX` where not found on the
/// way.
pub fn played_forward(
    discipline: Discipline,
    now_us: u64,
    free: u32,
    queue: &[Pending],
    running: &[Busy],
    wanted: &[usize],
) -> Vec<u64> {
    let mut out = vec![u64::MAX; queue.len()];
    let mut is_wanted = vec![false; queue.len()];
    for &at in wanted {
        is_wanted[at] = true;
    }
    let mut left = is_wanted.iter().filter(|&&w| w).count();
    let mut waiting: Vec<(usize, Pending)> = queue.iter().copied().enumerate().collect();
    let mut busy = running.to_vec();
    let (mut free, mut t) = (free, now_us);
    // The narrowest waiting job: with fewer processors free, neither
    // discipline starts anything, and the pass is skipped.
    let narrowest = |waiting: &[(usize, Pending)]| waiting.iter().map(|(_, p)| p.procs).min();
    let mut least = narrowest(&waiting);
    while left > 0 {
        let Some(need) = least else { break };
        if free >= need {
            let started = pass(discipline, t, free, &waiting, &busy);
            for &at in started.iter().rev() {
                let (id, job) = waiting.remove(at);
                out[id] = t;
                left -= usize::from(is_wanted[id]);
                free -= job.procs;
                busy.push(Busy {
                    procs: job.procs,
                    start_us: t,
                    end_us: t.saturating_add(job.runtime_us.max(1)),
                    told: job.told,
                });
            }
            if !started.is_empty() {
                least = narrowest(&waiting);
            }
        }
        // The next end, or the next expected end that passes.
        let Some(next) = busy
            .iter()
            .map(|b| b.end_us.min(b.told.expected_end(t, b.start_us)))
            .min()
        else {
            break;
        };
        t = next.max(t + 1);
        busy.retain(|b| {
            if b.end_us <= t {
                free += b.procs;
                false
            } else {
                true
            }
        });
    }
    out
}

/// The positions of `waiting` the scheduler starts at `t`, ascending.
fn pass(
    discipline: Discipline,
    t: u64,
    free: u32,
    waiting: &[(usize, Pending)],
    busy: &[Busy],
) -> Vec<usize> {
    let told: Vec<Waiting> = waiting
        .iter()
        .map(|(_, p)| Waiting {
            procs: p.procs,
            runtime_us: p.told.planned_us(),
        })
        .collect();
    let ending: Vec<Ending> = busy
        .iter()
        .map(|b| Ending {
            end_us: b.told.expected_end(t, b.start_us),
            procs: b.procs,
        })
        .collect();
    starts_now(discipline, t, free, &told, &ending)
        .into_iter()
        .map(|(at, _)| at)
        .collect()
}

/// EASY at `now_us`: the heads while they fit; then, behind the first that
/// does not, every job that fits now and either ends by that head's
/// reservation (the shadow time) or uses only processors the head will
/// leave over, tried in `order`.
fn easy(
    now_us: u64,
    mut free: u32,
    queue: &[Waiting],
    ending: &[Ending],
    order: Backfill,
) -> Vec<(usize, bool)> {
    let mut started = Vec::new();
    let mut ends: Vec<(u64, u32)> = ending.iter().map(|e| (e.end_us, e.procs)).collect();
    let mut head = 0;
    while head < queue.len() && queue[head].procs <= free {
        let job = queue[head];
        free -= job.procs;
        ends.push((now_us.saturating_add(job.runtime_us), job.procs));
        started.push((head, false));
        head += 1;
    }
    let Some(need) = queue.get(head).map(|w| w.procs) else {
        return started;
    };
    // The head's reservation: when enough processors free up.
    ends.sort_unstable();
    let (mut available, mut shadow) = (free, u64::MAX);
    for &(end, procs) in &ends {
        if end > shadow {
            break;
        }
        // Every job ending at the shadow time frees its processors.
        available += procs;
        if available >= need {
            shadow = end;
        }
    }
    let mut extra = if shadow == u64::MAX {
        0
    } else {
        available - need
    };
    let mut candidates: Vec<usize> = (head + 1..queue.len()).collect();
    if order == Backfill::ShortestFirst {
        candidates.sort_by_key(|&at| (queue[at].runtime_us, at));
    }
    for at in candidates {
        if free == 0 {
            break;
        }
        let job = queue[at];
        let ends_in_time = now_us.saturating_add(job.runtime_us) <= shadow;
        if job.procs <= free && (ends_in_time || job.procs <= extra) {
            if !ends_in_time {
                extra -= job.procs;
            }
            free -= job.procs;
            started.push((at, true));
        }
    }
    started.sort_unstable();
    started
}

/// The processors free from each moment on: a step function from `now`,
/// as the running jobs end and reservations take and give back. The
/// steps sit in a vector sorted by time: a reservation scans them in
/// place and inserts at most one, which a conservative pass does for
/// every job it reserves at every event. (Steps in chunks that each know
/// their least and most free processors, skipped whole by the scan, were
/// measured 1.8 times slower on the logs' profiles, mostly a few dozen
/// steps, for `jobcast simulate` on KTH, conservative; a scan started at
/// the last start found for a job as wide and no longer gained nothing
/// measurable on HPC2N's first 30,000 jobs.)
#[derive(Debug)]
struct Profile {
    /// The free processors from each change on (the first at now), by
    /// time.
    steps: Vec<(u64, i64)>,
}

impl Profile {
    /// The profile of `free` processors now, and the running jobs'
    /// `ending`; a running job due to end by now is taken to end just
    /// after (it still holds its processors), as EASY takes it.
    fn new(now_us: u64, free: u32, ending: &[Ending]) -> Profile {
        let mut ends: Vec<(u64, i64)> = ending
            .iter()
            .map(|e| (e.end_us.max(now_us + 1), i64::from(e.procs)))
            .collect();
        ends.sort_unstable_by_key(|&(t, _)| t);
        let mut steps = Vec::with_capacity(ends.len() + 1);
        steps.push((now_us, i64::from(free)));
        for (t, procs) in ends {
            let (last_t, level) = *steps.last().expect("the first step");
            if last_t == t {
                steps.last_mut().expect("the first step").1 += procs;
            } else {
                steps.push((t, level + procs));
            }
        }
        Profile { steps }
    }

    /// Reserve `job`'s processors for its runtime at the earliest moment
    /// they are free throughout, and return that moment (`u64::MAX` if
    /// the machine never frees enough).
    fn reserve(&mut self, job: Waiting) -> u64 {
        let need = i64::from(job.procs);
        let duration = job.runtime_us.max(1);
        let steps = &self.steps;
        // Each candidate start is a step; a step short of processors
        // rules out every start up to it, so the scan is linear.
        let mut i = 0;
        'start: while i < steps.len() {
            let start = steps[i].0;
            let end = start.saturating_add(duration);
            let mut j = i;
            while j < steps.len() && steps[j].0 < end {
                if steps[j].1 < need {
                    i = j + 1;
                    continue 'start;
                }
                j += 1;
            }
            self.take(i, end, need);
            return start;
        }
        u64::MAX
    }

    /// The fewest processors free from now until `end`.
    fn least_free(&self, end: u64) -> i64 {
        self.steps
            .iter()
            .take_while(|&&(t, _)| t < end)
            .map(|&(_, free)| free)
            .min()
            .unwrap_or(i64::MAX)
    }

    /// Take `need` processors from step `first` (where the reservation
    /// starts) until `end`.
    fn take(&mut self, first: usize, end: u64, need: i64) {
        let after = self.steps.partition_point(|&(at, _)| at < end);
        if self.steps.get(after).is_none_or(|&(at, _)| at != end) {
            let level = self.steps[after - 1].1;
            self.steps.insert(after, (end, level));
        }
        for (_, free) in &mut self.steps[first..after] {
            *free -= need;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn w(procs: u32, runtime_s: u64) -> Waiting {
        Waiting {
            procs,
            runtime_us: runtime_s * S,
        }
    }

    fn e(end_s: u64, procs: u32) -> Ending {
        Ending {
            end_us: end_s * S,
            procs,
        }
    }

    fn seconds(v: Vec<u64>) -> Vec<u64> {
        v.into_iter().map(|t| t / S).collect()
    }

    /// A machine of 10 with 8 busy until 100 s. Queue: the whole machine
    /// for 10 s; 2 processors for 50 s; 2 for 500 s; 2 for 20 s. EASY
    /// starts the 50 s job now (it ends before the head's 100 s) and the
    /// 500 s one after the head; conservative reserves every job: the
    /// 500 s job behind the head at 110 s, and the 20 s job fits before
    /// 100 s on the 2 processors once the 50 s job ends, at 50 s.
    #[test]
    fn both_disciplines_play_a_hand_checked_queue_forward() {
        let queue = [w(10, 10), w(2, 50), w(2, 500), w(2, 20)];
        let ending = [e(100, 8)];
        let easy = Discipline::Easy(Backfill::Fcfs);
        assert_eq!(starts_now(easy, 0, 2, &queue, &ending), [(1, true)]);
        assert_eq!(
            seconds(projected_starts(easy, 0, 2, &queue, &ending)),
            [100, 0, 110, 50]
        );
        let conservative = Discipline::Conservative;
        assert_eq!(starts_now(conservative, 0, 2, &queue, &ending), [(1, true)]);
        assert_eq!(
            seconds(projected_starts(conservative, 0, 2, &queue, &ending)),
            [100, 0, 110, 50]
        );
    }

    /// Where they differ: EASY protects the head's reservation only;
    /// conservative every job's. 4 processors, 3 busy until 100 s. Queue:
    /// 3 for 10 s (the head, at 100 s); the whole machine for 50 s; 1 for
    /// 150 s. EASY backfills the last now on the processor the head leaves
    /// spare, which pushes the second job from 110 s to 150 s;
    /// conservative has reserved [110 s, 160 s) for the second job, so the
    /// last waits until then.
    #[test]
    fn conservative_protects_every_reservation_easy_only_the_heads() {
        let queue = [w(3, 10), w(4, 50), w(1, 150)];
        let ending = [e(100, 3)];
        let easy = Discipline::Easy(Backfill::Fcfs);
        assert_eq!(starts_now(easy, 0, 1, &queue, &ending), [(2, true)]);
        assert_eq!(
            seconds(projected_starts(easy, 0, 1, &queue, &ending)),
            [100, 150, 0]
        );
        let conservative = Discipline::Conservative;
        assert_eq!(starts_now(conservative, 0, 1, &queue, &ending), []);
        assert_eq!(
            seconds(projected_starts(conservative, 0, 1, &queue, &ending)),
            [100, 110, 160]
        );
    }

    /// EASY++'s order. Job 0 (the whole machine) waits until 100 s; jobs
    /// of 80 s and 20 s each fit the 2 free processors before then, but
    /// not one after the other: FCFS backfills the first, SJBF the
    /// shortest.
    #[test]
    fn easy_plus_plus_backfills_the_shortest_predicted_first() {
        let queue = [w(10, 10), w(2, 80), w(2, 20)];
        let ending = [e(100, 8)];
        let fcfs = Discipline::Easy(Backfill::Fcfs);
        let sjbf = Discipline::Easy(Backfill::ShortestFirst);
        assert_eq!(starts_now(fcfs, 0, 2, &queue, &ending), [(1, true)]);
        assert_eq!(starts_now(sjbf, 0, 2, &queue, &ending), [(2, true)]);
    }

    /// A job that outlives its prediction is expected at its next
    /// quantile, then at its request.
    #[test]
    fn an_outlived_prediction_moves_to_the_next_quantile_then_the_request() {
        let told = Told {
            predicted_us: 100 * S,
            later_us: [200 * S, 400 * S, 400 * S],
            request_us: Some(1000 * S),
        };
        let end = |now_s| told.expected_end(now_s * S, 0) / S;
        assert_eq!(end(50), 100);
        assert_eq!(end(150), 200);
        assert_eq!(end(300), 400);
        assert_eq!(end(500), 1000);
        assert_eq!(told.expected_end(2000 * S, 0), 2000 * S + 1);
    }

    /// A conservative pass stops early, once no later job can start now;
    /// it starts what a pass reserving every job starts now, on random
    /// queues, many of which start some of their jobs and not others.
    #[test]
    fn a_conservative_pass_stopped_early_starts_what_a_full_one_does() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let mut mixed = 0;
        for _ in 0..2_000 {
            let busy: Vec<Ending> = (0..rng.random_range(0..6))
                .map(|_| e(rng.random_range(1..500), rng.random_range(1..5)))
                .collect();
            let held: u32 = busy.iter().map(|b| b.procs).sum();
            let free = 24u32.saturating_sub(held);
            let queue: Vec<Waiting> = (0..rng.random_range(1..30))
                .map(|_| w(rng.random_range(1..24), rng.random_range(1..1_000)))
                .collect();
            let full = projected_starts(Discipline::Conservative, 0, free, &queue, &busy);
            let mut blocked = false;
            let expected: Vec<(usize, bool)> = full
                .iter()
                .enumerate()
                .filter_map(|(at, &start)| {
                    let now = start == 0;
                    let out = now.then_some((at, blocked));
                    blocked |= !now;
                    out
                })
                .collect();
            let started = starts_now(Discipline::Conservative, 0, free, &queue, &busy);
            assert_eq!(started, expected, "{queue:?} {busy:?} free {free}");
            mixed += usize::from(!started.is_empty() && started.len() < queue.len());
        }
        assert!(mixed > 200, "{mixed}");
    }

    /// A schedule played until its wanted jobs have started gives them
    /// the starts the whole schedule does, under both disciplines, on
    /// random queues whose jobs run longer or shorter than told.
    #[test]
    fn a_schedule_played_for_some_jobs_starts_them_as_the_whole_one_does() {
        use rand::{Rng, SeedableRng};
        // A job of up to `widest` processors, told a runtime and running
        // up to twice as long.
        fn job(rng: &mut rand_chacha::ChaCha8Rng, widest: u32) -> (u32, Told, u64) {
            let told_s = rng.random_range(1..1_000);
            let runtime_s = rng.random_range(1..2 * told_s);
            let told = Told::predicted(told_s * S, Some(2 * told_s * S));
            (rng.random_range(1..=widest), told, runtime_s * S)
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        for discipline in [
            Discipline::Conservative,
            Discipline::Easy(Backfill::ShortestFirst),
        ] {
            for _ in 0..300 {
                let running: Vec<Busy> = (0..rng.random_range(0..5))
                    .map(|_| {
                        let (procs, told, runtime_us) = job(&mut rng, 4);
                        Busy {
                            procs,
                            start_us: 0,
                            end_us: runtime_us,
                            told,
                        }
                    })
                    .collect();
                let held: u32 = running.iter().map(|b| b.procs).sum();
                let queue: Vec<Pending> = (0..rng.random_range(1..20))
                    .map(|_| {
                        let (procs, told, runtime_us) = job(&mut rng, 16);
                        Pending {
                            procs,
                            told,
                            runtime_us,
                        }
                    })
                    .collect();
                let free = 16 - held.min(16);
                let every: Vec<usize> = (0..queue.len()).collect();
                let whole = played_forward(discipline, 0, free, &queue, &running, &every);
                let wanted = rng.random_range(0..queue.len());
                let some = played_forward(discipline, 0, free, &queue, &running, &[wanted]);
                assert_eq!(
                    some[wanted], whole[wanted],
                    "{discipline:?} {queue:?} {running:?}"
                );
            }
        }
    }

    /// A job wider than the machine never starts.
    #[test]
    fn a_job_that_never_fits_has_no_start() {
        let starts = projected_starts(Discipline::Conservative, 0, 4, &[w(8, 10)], &[]);
        assert_eq!(starts, [u64::MAX]);
    }
}
