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
//! end; the service answers "when will my job start?" with
//! [`projected_starts`], the schedule played forward on the predictions
//! with no further arrivals.

use std::collections::BTreeMap;

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

/// A job's expected end, seen at `now_us`, once it started at
/// `start_us`: its prediction; once it has outlived that, the first of
/// `later` (its predictor's higher quantiles, ascending) it has not
/// outlived; then its request (EASY++'s correction), all capped by the
/// request. Without a request, a job that has outlived them all is
/// expected to run as long again as it has run. Always after `now_us`.
pub fn expected_end(
    now_us: u64,
    start_us: u64,
    predicted_us: u64,
    later: &[f64],
    request_us: Option<u64>,
) -> u64 {
    let request = request_us.unwrap_or(u64::MAX);
    let predicted = start_us.saturating_add(predicted_us.min(request));
    if predicted > now_us {
        return predicted;
    }
    let unbounded = || {
        let age = now_us.saturating_sub(start_us);
        now_us.saturating_add(age)
    };
    later
        .iter()
        .map(|&q| start_us.saturating_add((q.round() as u64).min(request)))
        .find(|&end| end > now_us)
        .unwrap_or_else(|| request_us.map_or_else(unbounded, |r| start_us.saturating_add(r)))
        .max(now_us + 1)
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
            let mut profile = Profile::new(now_us, free, ending);
            let mut blocked = false;
            let mut started = Vec::new();
            for (at, job) in queue.iter().enumerate() {
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
    project(discipline, now_us, free, queue, ending, queue.len())
}

/// When each of the first `wanted` jobs of `queue` would start
/// ([`projected_starts`]), played forward only as far as they need; the
/// later jobs' entries are `u64::MAX` where not found on the way.
pub fn projected_starts_of_first(
    discipline: Discipline,
    now_us: u64,
    free: u32,
    queue: &[Waiting],
    ending: &[Ending],
    wanted: usize,
) -> Vec<u64> {
    project(discipline, now_us, free, queue, ending, wanted)
}

/// The projected starts of the first `wanted` jobs of `queue` (the rest
/// `u64::MAX` where not found on the way). Conservative reserves only
/// them, since later jobs cannot move their reservations; EASY plays the
/// whole queue forward until they have started.
fn project(
    discipline: Discipline,
    now_us: u64,
    free: u32,
    queue: &[Waiting],
    ending: &[Ending],
    wanted: usize,
) -> Vec<u64> {
    let mut out = vec![u64::MAX; queue.len()];
    if discipline == Discipline::Conservative {
        let mut profile = Profile::new(now_us, free, ending);
        for (at, job) in queue.iter().enumerate().take(wanted) {
            out[at] = profile.reserve(*job);
        }
        return out;
    }
    let mut waiting: Vec<(usize, Waiting)> = queue.iter().copied().enumerate().collect();
    let mut ending = ending.to_vec();
    let (mut free, mut t) = (free, now_us);
    // Waiting jobs stay in queue order: while the first is wanted, some
    // wanted job has not started.
    while waiting.first().is_some_and(|&(id, _)| id < wanted) {
        let jobs: Vec<Waiting> = waiting.iter().map(|&(_, w)| w).collect();
        let started = starts_now(discipline, t, free, &jobs, &ending);
        for &(at, _) in started.iter().rev() {
            let (id, job) = waiting.remove(at);
            out[id] = t;
            free -= job.procs;
            ending.push(Ending {
                end_us: t.saturating_add(job.runtime_us),
                procs: job.procs,
            });
        }
        // The next end frees its processors.
        let Some(next) = ending.iter().map(|e| e.end_us).min() else {
            break;
        };
        t = next.max(t);
        ending.retain(|e| {
            if e.end_us <= t {
                free += e.procs;
                false
            } else {
                true
            }
        });
    }
    out
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
/// as the running jobs end and reservations take and give back.
#[derive(Debug)]
struct Profile {
    now_us: u64,
    /// The free processors from each change on (the first at `now_us`).
    steps: BTreeMap<u64, i64>,
}

impl Profile {
    /// The profile of `free` processors now, and the running jobs'
    /// `ending`; a running job due to end by now is taken to end just
    /// after (it still holds its processors), as EASY takes it.
    fn new(now_us: u64, free: u32, ending: &[Ending]) -> Profile {
        let mut deltas: BTreeMap<u64, i64> = BTreeMap::new();
        for e in ending {
            *deltas.entry(e.end_us.max(now_us + 1)).or_default() += i64::from(e.procs);
        }
        let mut steps = BTreeMap::from([(now_us, i64::from(free))]);
        let mut level = i64::from(free);
        for (t, d) in deltas {
            level += d;
            steps.insert(t, level);
        }
        Profile { now_us, steps }
    }

    /// Reserve `job`'s processors for its runtime at the earliest moment
    /// they are free throughout, and return that moment (`u64::MAX` if
    /// the machine never frees enough).
    fn reserve(&mut self, job: Waiting) -> u64 {
        let need = i64::from(job.procs);
        let duration = job.runtime_us.max(1);
        let steps: Vec<(u64, i64)> = self.steps.iter().map(|(&t, &f)| (t, f)).collect();
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
            self.take(start, end, need);
            return start;
        }
        u64::MAX
    }

    /// The processors free at `t`.
    fn free_at(&self, t: u64) -> i64 {
        self.steps.range(..=t).next_back().map_or(0, |(_, &f)| f)
    }

    /// Take `need` processors over [start, end).
    fn take(&mut self, start: u64, end: u64, need: i64) {
        let at_end = self.free_at(end);
        self.steps.entry(end).or_insert(at_end);
        let at_start = self.free_at(start);
        self.steps.entry(start).or_insert(at_start);
        for (_, f) in self.steps.range_mut(start..end) {
            *f -= need;
        }
        debug_assert!(self.steps.keys().next() == Some(&self.now_us));
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
        let later = [200e6, 400e6];
        let end = |now_s| expected_end(now_s * S, 0, 100 * S, &later, Some(1000 * S)) / S;
        assert_eq!(end(50), 100);
        assert_eq!(end(150), 200);
        assert_eq!(end(300), 400);
        assert_eq!(end(500), 1000);
        assert_eq!(
            expected_end(2000 * S, 0, 100 * S, &later, Some(1000 * S)),
            2000 * S + 1
        );
    }

    /// A job wider than the machine never starts.
    #[test]
    fn a_job_that_never_fits_has_no_start() {
        let starts = projected_starts(Discipline::Conservative, 0, 4, &[w(8, 10)], &[]);
        assert_eq!(starts, [u64::MAX]);
    }
}
