//! FCFS with EASY backfilling on one machine of P processors, the
//! scheduler of most HPC sites (Lifka 1995; Mu'alem and Feitelson 2001),
//! run on a log's jobs with one runtime predictor, as Tsafrir, Etsion and
//! Feitelson (TPDS 2007) ran it:
//!
//! - Jobs arrive at their logged submission and run their logged runtime,
//!   killed at their requested time.
//! - The queue's head starts as soon as its processors are free. While it
//!   cannot, it gets a reservation at the shadow time: the earliest
//!   moment enough processors free up, by the running jobs' predicted
//!   ends. A later job may start now (backfill) if it fits in the free
//!   processors and either its predicted end comes before the shadow time
//!   or it uses only the processors the head will not need then.
//! - A prediction is the predictor's at the job's submission (its
//!   calibrated median, for a predictor with quantiles), capped by the
//!   request. A running job that outlives its prediction is expected
//!   to run to its request from then on (EASY++'s correction), or, for a
//!   predictor with quantiles, to the first of its P90, P95 and P99 it
//!   has not outlived, and then to its request.
//! - The predictors learn each job that completed in the log, when it
//!   ends in the simulation.
//!
//! - Behind the head, plain EASY tries the waiting jobs in FCFS order;
//!   with a predictor it tries the shortest predicted first (SJBF).
//!
//! With the users' requests as the predictor this is plain EASY; with
//! Last-2 it is EASY++ (Last-2, the correction and SJBF).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use jobcast_ingest::event::{Event, JobOutcome, JobSubmitted, MachineKind};
use serde::Serialize;

use jobcast_predictor::hpc::backfill::{
    self as scheduler, Backfill, Discipline, Ending, Told, Waiting as Queued,
};
use jobcast_predictor::hpc::starts::{self as sampled, Sampled, Seen, Spread};
use jobcast_predictor::stats::percentile;

use super::RunTime;
use super::predictor::{Predictor, Said};

/// Runtimes below this count as this in the bounded slowdown (the
/// field's 10 s).
pub const SLOWDOWN_BOUND_US: u64 = 10_000_000;

/// A job of the log that ran.
#[derive(Debug, Clone)]
pub struct HpcJob {
    pub job: JobSubmitted,
    pub procs: u32,
    /// Its logged runtime, µs, cut at its request.
    pub runtime_us: u64,
    /// It completed in the log: the predictors learn it.
    pub completed: bool,
}

/// A log's machine and the jobs that ran on it, by submission.
#[derive(Debug, Clone)]
pub struct Workload {
    pub procs: u32,
    pub jobs: Vec<HpcJob>,
    /// Jobs left out: never started (cancelled in the queue), or wider
    /// than the machine.
    pub never_ran: usize,
    pub too_wide: usize,
}

impl Workload {
    /// The workload of a log's events (in time order): the machine's size
    /// from its `add` event, each job's runtime as its runs add up
    /// ([`RunTime`]), as one run.
    pub fn from_events(events: impl IntoIterator<Item = Event>) -> Result<Workload, String> {
        let mut procs = None;
        let mut open: HashMap<u64, (JobSubmitted, RunTime)> = HashMap::new();
        let (mut jobs, mut never_ran) = (Vec::new(), 0);
        for event in events {
            match event {
                Event::Machine(m) if m.kind == MachineKind::Add => {
                    procs = Some(procs.unwrap_or(0) + m.cpus.unwrap_or(0.0).round() as u32);
                }
                Event::JobSubmitted(job) => {
                    open.insert(job.job_id, (job, RunTime::default()));
                }
                Event::Task(t) => {
                    if let Some((_, ran)) = open.get_mut(&t.job_id) {
                        ran.see(&t);
                    }
                }
                Event::JobEnded(end) => {
                    let Some((job, ran)) = open.remove(&end.job_id) else {
                        continue;
                    };
                    if !ran.ran() {
                        never_ran += 1;
                        continue;
                    }
                    let mut runtime_us = ran.runtime_us();
                    if let Some(request) = job.time_limit_us {
                        runtime_us = runtime_us.min(request);
                    }
                    jobs.push(HpcJob {
                        procs: job.cpu_request.round().max(1.0) as u32,
                        job,
                        runtime_us,
                        completed: end.outcome == JobOutcome::Finish,
                    });
                }
                _ => {}
            }
        }
        let procs = procs
            .filter(|&p| p > 0)
            .ok_or("the log names no machine size (SWF's MaxProcs or MaxNodes header)")?;
        jobs.sort_by_key(|j| (j.job.time_us, j.job.job_id));
        let before = jobs.len();
        jobs.retain(|j| j.procs <= procs);
        Ok(Workload {
            procs,
            too_wide: before - jobs.len(),
            jobs,
            never_ran,
        })
    }
}

/// How one predictor's schedule came out.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Outcome {
    pub predictor: &'static str,
    pub jobs: usize,
    pub avg_bounded_slowdown: f64,
    pub avg_wait_s: f64,
    /// Processor time used over the processor time from the first
    /// submission to the last end.
    pub utilisation: f64,
    /// Jobs started ahead of a queue head that could not start.
    pub backfilled: usize,
    /// Jobs that could not start on arrival, whose start was projected
    /// then: the schedule played forward on the predictions, as a site
    /// answers "when will my job start?" (`squeue --start` with the
    /// requests as predictions). A predictor with quantiles plays it on
    /// sampled runtimes and answers the median start
    /// ([`jobcast_predictor::hpc::starts`]).
    pub start_estimated: usize,
    /// The median |projected − actual start| over them.
    pub start_p50_error_s: f64,
    /// Their share projected within a minute of their start.
    pub start_within_60s_pct: f64,
    /// For a predictor with quantiles, their share that started by the
    /// P90 of their sampled starts (the answer's interval).
    pub start_p90_coverage_pct: Option<f64>,
    /// The same, for the same jobs in the same schedule, projected on the
    /// requested times (`squeue --start`'s answer).
    pub start_limits_p50_error_s: f64,
    pub start_limits_within_60s_pct: f64,
}

/// A job in the queue.
struct Waiting {
    index: usize,
    said: Said,
    told: Told,
    /// Its starts in the schedules sampled when it arrived, if it waited:
    /// where its real start falls among them is learnt when it starts.
    sampled: Option<Sampled>,
}

/// A running job.
struct Running {
    index: usize,
    said: Said,
    start_us: u64,
    told: Told,
}

/// The machine while it runs one predictor's schedule.
struct Machine<'a> {
    workload: &'a Workload,
    predictor: Predictor,
    discipline: Discipline,
    free: u32,
    queue: Vec<Waiting>,
    running: HashMap<usize, Running>,
    ends: BinaryHeap<Reverse<(u64, usize)>>,
    /// When each running job's expected end passes, if it is still
    /// running then: its prediction is raised (the next quantile, then
    /// the request), and the scheduler looks again, as EASY++ does.
    expiries: BinaryHeap<Reverse<(u64, usize)>>,
    starts: Vec<u64>,
    backfilled: usize,
    /// How a predictor with quantiles answers "when will my job start?".
    answer: StartAnswer,
    /// Where the ended jobs' runtimes fell in their spreads.
    fit: sampled::Fit,
    /// Where the started jobs' starts fell among their samples.
    lean: sampled::Fit,
    /// The threads the sampled schedules are played on: every core.
    threads: usize,
}

/// How a predictor with quantiles answers "when will my job start?".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartAnswer {
    /// The median and P90 over schedules played on sampled runtimes
    /// ([`sampled::sampled_starts`]), as the service answers.
    Sampled,
    /// One schedule played on the medians, as a predictor without
    /// quantiles answers: [`sampled::SAMPLES`] times faster.
    Medians,
}

impl Machine<'_> {
    fn job(&self, index: usize) -> &HpcJob {
        &self.workload.jobs[index]
    }

    fn start(&mut self, now: u64, waiting: Waiting, backfill: bool) {
        let procs = self.job(waiting.index).procs;
        self.free -= procs;
        self.starts[waiting.index] = now;
        self.backfilled += usize::from(backfill);
        if let Some(s) = waiting.sampled
            && let Some(level) = s.level_of(now)
        {
            self.lean.learn_level(level);
        }
        let end = now + self.job(waiting.index).runtime_us;
        self.ends.push(Reverse((end, waiting.index)));
        self.expiries
            .push(Reverse((now + waiting.told.planned_us(), waiting.index)));
        self.running.insert(
            waiting.index,
            Running {
                index: waiting.index,
                said: waiting.said,
                start_us: now,
                told: waiting.told,
            },
        );
    }

    /// Running jobs whose expected end has passed by `now`: each gets its
    /// next one.
    fn expire(&mut self, now: u64) {
        while let Some(&Reverse((t, index))) = self.expiries.peek() {
            if t > now {
                break;
            }
            self.expiries.pop();
            if let Some(r) = self.running.get(&index) {
                let next = r.told.expected_end(now, r.start_us);
                if next > now {
                    self.expiries.push(Reverse((next, index)));
                }
            }
        }
    }

    /// The runtime distribution of the job at `index`, as its predictor
    /// said it; `None` for a predictor without quantiles.
    fn spread(&self, said: &Said, index: usize) -> Option<Spread> {
        Some(Spread::new(
            said.quantiles_us?,
            self.job(index).job.time_limit_us,
        ))
    }

    /// A job's requested time, µs (unbounded without one).
    fn request(&self, index: usize) -> u64 {
        self.job(index).job.time_limit_us.unwrap_or(u64::MAX)
    }

    /// The queue as the scheduler sees it: each waiting job's processors
    /// and runtime as `view` says, in FCFS order.
    fn waiting(&self, view: View) -> Vec<Queued> {
        self.queue
            .iter()
            .map(|w| Queued {
                procs: self.job(w.index).procs,
                runtime_us: match view {
                    View::Predictions => w.told.planned_us(),
                    View::Limits => self.request(w.index),
                },
            })
            .collect()
    }

    /// The running jobs' ends as `view` says, seen at `now`, and processors.
    fn expected_ends(&self, now: u64, view: View) -> Vec<Ending> {
        self.running
            .values()
            .map(|r| {
                let end = match view {
                    View::Predictions => r.told.expected_end(now, r.start_us),
                    View::Limits => r.start_us.saturating_add(self.request(r.index)),
                };
                Ending {
                    end_us: end.max(now + 1),
                    procs: self.job(r.index).procs,
                }
            })
            .collect()
    }

    /// Start what the discipline allows at `now`.
    fn schedule(&mut self, now: u64) {
        let started = scheduler::starts_now(
            self.discipline,
            now,
            self.free,
            &self.waiting(View::Predictions),
            &self.expected_ends(now, View::Predictions),
        );
        // Removed from the back, so that the positions stay valid.
        let mut starting: Vec<(Waiting, bool)> = started
            .into_iter()
            .rev()
            .map(|(at, backfill)| (self.queue.remove(at), backfill))
            .collect();
        starting.reverse();
        for (w, backfill) in starting {
            self.start(now, w, backfill);
        }
    }

    /// When the `wanted` waiting jobs (positions in the queue) would start
    /// in schedules played forward on runtimes drawn from the predictor's
    /// quantiles ([`sampled::sampled_starts`]); `None` for
    /// a predictor without quantiles.
    fn sampled_starts(&self, now: u64, wanted: &[usize]) -> Option<Vec<Option<Sampled>>> {
        if self.answer == StartAnswer::Medians {
            return None;
        }
        let queue = self
            .queue
            .iter()
            .map(|w| {
                Some(sampled::Queued {
                    procs: self.job(w.index).procs,
                    spread: self.spread(&w.said, w.index)?,
                    told: w.told,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        // In job order: the draws go to the same jobs whatever the map's.
        let mut running: Vec<&Running> = self.running.values().collect();
        running.sort_by_key(|r| r.index);
        let running = running
            .into_iter()
            .map(|r| {
                Some(sampled::Running {
                    procs: self.job(r.index).procs,
                    start_us: r.start_us,
                    spread: self.spread(&r.said, r.index)?,
                    told: r.told,
                })
            })
            .collect::<Option<Vec<_>>>()?;
        Some(sampled::sampled_starts(
            self.discipline,
            Seen {
                now_us: now,
                free: self.free,
                queue: &queue,
                running: &running,
            },
            wanted,
            &self.fit,
            self.threads,
        ))
    }

    /// When each waiting job would start if every running and waiting job
    /// ran as `view` says and nothing else arrived: on the limits, in FCFS order
    /// behind the head, as Slurm's backfilling tries pending jobs.
    fn projected_starts(&self, now: u64, view: View) -> Vec<u64> {
        let discipline = match (view, self.discipline) {
            (View::Limits, Discipline::Easy(_)) => Discipline::Easy(Backfill::Fcfs),
            (_, discipline) => discipline,
        };
        scheduler::projected_starts(
            discipline,
            now,
            self.free,
            &self.waiting(view),
            &self.expected_ends(now, view),
        )
    }
}

/// What a projection takes each job's runtime to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum View {
    /// The predictor's, as the schedule itself does.
    Predictions,
    /// The requested times, as Slurm's `squeue --start` does.
    Limits,
}

/// How one schedule went.
struct Played {
    /// Each job's start, µs.
    starts: Vec<u64>,
    backfilled: usize,
    /// For each job that could not start on arrival, the starts its
    /// arrival's projections gave.
    projected: Vec<Option<Projected>>,
}

/// The answers to "when will my job start?" a job got on arrival, µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Projected {
    /// On the predictions: the start, and the interval's late end (the
    /// same, for a predictor without quantiles).
    p50: u64,
    p90: u64,
    /// On the requested times.
    limits: u64,
}

/// The site's scheduler a log is played under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheduler {
    /// EASY: plain with the users' requests, EASY++ (shortest predicted
    /// first behind the head) with a predictor.
    Easy,
    /// Conservative backfilling: a reservation for every waiting job.
    Conservative,
}

impl Scheduler {
    /// The discipline `predictor` is run under.
    fn discipline(self, predictor: &Predictor) -> Discipline {
        match (self, predictor) {
            (Scheduler::Conservative, _) => Discipline::Conservative,
            (Scheduler::Easy, Predictor::Request) => Discipline::Easy(Backfill::Fcfs),
            (Scheduler::Easy, Predictor::Jobcast(_) | Predictor::Last2(_)) => {
                Discipline::Easy(Backfill::ShortestFirst)
            }
        }
    }
}

/// `workload` run under `scheduler`, predicted by `predictor`; each job
/// that waits on arrival gets its start projected
/// ([`Machine::projected_starts`]). `arrived` is told how many jobs
/// arrive at each moment, as they do.
fn play(
    workload: &Workload,
    scheduler: Scheduler,
    predictor: Predictor,
    answer: StartAnswer,
    arrived: &dyn Fn(u64),
) -> Played {
    let mut m = Machine {
        workload,
        discipline: scheduler.discipline(&predictor),
        predictor,
        free: workload.procs,
        queue: Vec::new(),
        running: HashMap::new(),
        ends: BinaryHeap::new(),
        expiries: BinaryHeap::new(),
        starts: vec![0; workload.jobs.len()],
        backfilled: 0,
        answer,
        fit: sampled::Fit::default(),
        lean: sampled::Fit::default(),
        threads: std::thread::available_parallelism().map_or(1, usize::from),
    };
    let mut next = 0;
    let mut projected = vec![None; workload.jobs.len()];
    loop {
        let arrival = workload.jobs.get(next).map(|j| j.job.time_us);
        let end = m.ends.peek().map(|Reverse((t, _))| *t);
        let expiry = m.expiries.peek().map(|Reverse((t, _))| *t);
        let Some(now) = [arrival, end, expiry].into_iter().flatten().min() else {
            break;
        };
        while let Some(&Reverse((t, index))) = m.ends.peek() {
            if t > now {
                break;
            }
            m.ends.pop();
            let r = m.running.remove(&index).expect("a running job ends");
            let job = &workload.jobs[index];
            m.free += job.procs;
            // Every run that ended shows where runtimes fall, those
            // killed at their request too.
            if let Some(spread) = m.spread(&r.said, index) {
                m.fit.learn(&spread, job.runtime_us as f64);
            }
            if job.completed {
                m.predictor.learn(&job.job, r.said, job.runtime_us as f64);
            }
        }
        let first = next;
        while let Some(job) = workload.jobs.get(next) {
            if job.job.time_us > now {
                break;
            }
            let said = m.predictor.predict(&job.job);
            m.queue.push(Waiting {
                index: next,
                said,
                told: said.told(job.job.time_limit_us),
                sampled: None,
            });
            next += 1;
        }
        arrived((next - first) as u64);
        m.expire(now);
        m.schedule(now);
        let arrived = |w: &Waiting| workload.jobs[w.index].job.time_us == now;
        let arrivals: Vec<usize> = (m.queue.iter().enumerate())
            .filter(|(_, w)| arrived(w))
            .map(|(at, _)| at)
            .collect();
        if !arrivals.is_empty() {
            let sampled = m.sampled_starts(now, &arrivals);
            let on_predictions: Vec<(u64, u64)> = match &sampled {
                Some(sampled) => {
                    let lean = m.lean.table();
                    sampled
                        .iter()
                        .map(|s| {
                            s.and_then(|s| s.answer(&lean))
                                .map_or((u64::MAX, u64::MAX), |s| (s.p50_us, s.p90_us))
                        })
                        .collect()
                }
                None => m
                    .projected_starts(now, View::Predictions)
                    .into_iter()
                    .map(|t| (t, t))
                    .collect(),
            };
            let on_limits = m.projected_starts(now, View::Limits);
            for (position, w) in m.queue.iter_mut().enumerate() {
                if arrived(w) {
                    w.sampled = sampled.as_ref().and_then(|s| s[position]);
                    let (p50, p90) = on_predictions[position];
                    projected[w.index] = Some(Projected {
                        p50,
                        p90,
                        limits: on_limits[position],
                    });
                }
            }
        }
    }
    Played {
        starts: m.starts,
        backfilled: m.backfilled,
        projected,
    }
}

/// Run `workload` under `scheduler`, predicting with `predictor`, and
/// measure it, answering starts as `answer` says; `arrived` is told how
/// many jobs arrive at each moment of the schedule, as they do (a
/// progress bar's steps).
pub fn simulate(
    workload: &Workload,
    scheduler: Scheduler,
    predictor: Predictor,
    answer: StartAnswer,
    arrived: &dyn Fn(u64),
) -> Outcome {
    let name = predictor.name();
    let interval = matches!(predictor, Predictor::Jobcast(_));
    let Played {
        starts,
        backfilled,
        projected,
    } = play(workload, scheduler, predictor, answer, arrived);
    let n = workload.jobs.len();
    if n == 0 {
        return Outcome {
            predictor: name,
            ..Outcome::default()
        };
    }
    let (mut slowdown, mut wait, mut used) = (0.0, 0.0, 0.0);
    let mut last_end = 0;
    for (job, &start) in workload.jobs.iter().zip(&starts) {
        let waited = start - job.job.time_us;
        let run = job.runtime_us;
        slowdown += ((waited + run) as f64 / run.max(SLOWDOWN_BOUND_US) as f64).max(1.0);
        wait += waited as f64 / 1e6;
        used += job.procs as f64 * run as f64;
        last_end = last_end.max(start + run);
    }
    let span = last_end.saturating_sub(workload.jobs[0].job.time_us).max(1);
    let errors = |pick: fn(&Projected) -> u64| {
        let mut e: Vec<f64> = projected
            .iter()
            .zip(&starts)
            .filter_map(|(p, &actual)| Some(pick(p.as_ref()?).abs_diff(actual) as f64 / 1e6))
            .collect();
        e.sort_by(f64::total_cmp);
        e
    };
    let (start_errors, limit_errors) = (errors(|p| p.p50), errors(|p| p.limits));
    let (covered, answered) = projected
        .iter()
        .zip(&starts)
        .filter_map(|(p, &actual)| Some(actual <= p.as_ref()?.p90))
        .fold((0usize, 0usize), |(c, n), ok| (c + usize::from(ok), n + 1));
    let within =
        |e: &[f64]| e.iter().filter(|&&x| x <= 60.0).count() as f64 * 100.0 / e.len().max(1) as f64;
    Outcome {
        predictor: name,
        jobs: n,
        avg_bounded_slowdown: slowdown / n as f64,
        avg_wait_s: wait / n as f64,
        utilisation: used / (workload.procs as f64 * span as f64),
        backfilled,
        start_estimated: start_errors.len(),
        start_p50_error_s: percentile(&start_errors, 50.0).unwrap_or(0.0),
        start_within_60s_pct: within(&start_errors),
        start_p90_coverage_pct: interval.then(|| covered as f64 * 100.0 / answered.max(1) as f64),
        start_limits_p50_error_s: percentile(&limit_errors, 50.0).unwrap_or(0.0),
        start_limits_within_60s_pct: within(&limit_errors),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    fn job(id: u64, submit_s: u64, procs: u32, run_s: u64, request_s: u64) -> HpcJob {
        let mut j = JobSubmitted::new(id, submit_s * S, 1);
        j.user = format!("u{id}");
        j.cpu_request = procs as f64;
        j.time_limit_us = Some(request_s * S);
        HpcJob {
            job: j,
            procs,
            runtime_us: run_s.min(request_s) * S,
            completed: true,
        }
    }

    /// Each job's start, seconds, under plain EASY (the requests as
    /// predictions).
    fn workload(jobs: Vec<HpcJob>, procs: u32) -> Workload {
        Workload {
            procs,
            jobs,
            never_ran: 0,
            too_wide: 0,
        }
    }

    fn starts(jobs: Vec<HpcJob>, procs: u32) -> Vec<u64> {
        starts_with(jobs, procs, Predictor::Request)
    }

    fn starts_with(jobs: Vec<HpcJob>, procs: u32, predictor: Predictor) -> Vec<u64> {
        play(
            &workload(jobs, procs),
            Scheduler::Easy,
            predictor,
            StartAnswer::Sampled,
            &|_| {},
        )
        .starts
        .iter()
        .map(|s| s / S)
        .collect()
    }

    /// A machine of 10: job 0 takes 8 for 100 s; job 1 needs 10 and waits
    /// for it (shadow at 100 s, no spare); job 2 (2 procs, 50 s) ends
    /// before the shadow and backfills; job 3 (2 procs, 500 s) would
    /// delay the head and waits until after it.
    fn reservation_case() -> Vec<HpcJob> {
        vec![
            job(0, 0, 8, 100, 100),
            job(1, 1, 10, 10, 10),
            job(2, 2, 2, 50, 50),
            job(3, 3, 2, 500, 500),
        ]
    }

    #[test]
    fn easy_backfills_what_ends_before_the_heads_reservation() {
        assert_eq!(starts(reservation_case(), 10), [0, 100, 2, 110]);
    }

    /// EASY++'s correction. Last-2 predicts job 1 at 50 s (its user's
    /// last run) against a request of 1,000 s; it runs 300 s. Job 2 (the
    /// whole machine) waits for it, its reservation at 150 s. At 200 s job
    /// 1 has outlived its prediction and is expected to run to its request
    /// (1,100 s), so job 3 (500 s on the 2 free processors) backfills;
    /// without the correction the reservation would stand at 201 s and
    /// job 3 would wait. Job 2 then starts when job 3 ends.
    #[test]
    fn a_job_that_outlives_its_prediction_is_expected_to_its_request() {
        let mut jobs = vec![
            job(0, 0, 1, 50, 1000),
            job(1, 100, 8, 300, 1000),
            job(2, 110, 10, 10, 10),
            job(3, 200, 2, 500, 500),
        ];
        jobs[1].job.user = jobs[0].job.user.clone();
        let s = starts_with(jobs, 10, Predictor::named("last2").unwrap());
        assert_eq!(s, [0, 100, 700, 200]);
    }

    /// The correction takes effect when the prediction runs out, not at
    /// the next arrival or end. As above, but job 3 arrives at 120 s,
    /// before job 1 outlives its prediction (150 s): it cannot backfill
    /// then. At 150 s the scheduler looks again, job 1 now expected to its
    /// request, and job 3 starts; job 2 starts when job 3 ends. Looking
    /// only at arrivals and ends would start job 3 after job 2, at 410 s.
    #[test]
    fn a_prediction_that_runs_out_wakes_the_scheduler() {
        let mut jobs = vec![
            job(0, 0, 1, 50, 1000),
            job(1, 100, 8, 300, 1000),
            job(2, 110, 10, 10, 10),
            job(3, 120, 2, 500, 500),
        ];
        jobs[1].job.user = jobs[0].job.user.clone();
        let s = starts_with(jobs, 10, Predictor::named("last2").unwrap());
        assert_eq!(s, [0, 100, 650, 150]);
    }

    /// The order behind the head. Job 1 (the whole machine) waits for job
    /// 0 until 100 s; jobs 2 (80 s) and 3 (20 s) each fit the 2 free
    /// processors before then, but not one after the other. Plain EASY
    /// backfills the first come, job 2, and job 3 waits for the head;
    /// EASY++ (here Last-2 with no history, so the requests) backfills the
    /// shortest, and job 2 waits.
    #[test]
    fn easy_plus_plus_backfills_the_shortest_predicted_first() {
        let case = || {
            vec![
                job(0, 0, 8, 100, 100),
                job(1, 1, 10, 10, 10),
                job(2, 2, 2, 80, 80),
                job(3, 2, 2, 20, 20),
            ]
        };
        assert_eq!(starts(case(), 10), [0, 100, 2, 110]);
        let last2 = Predictor::named("last2").unwrap();
        assert_eq!(starts_with(case(), 10, last2), [0, 100, 110, 2]);
    }

    /// The same log under the two disciplines. A machine of 4: job 0
    /// holds 3 until 100 s; job 1 (3 processors) then waits for it; job 2
    /// needs the whole machine; job 3 (1 processor, 150 s) fits now on the
    /// processor job 1 will leave spare. EASY starts it, and job 2 waits
    /// for it to end (153 s); conservative has reserved 110 s for job 2,
    /// and job 3 waits until 160 s.
    #[test]
    fn conservative_backfilling_keeps_every_reservation() {
        let case = workload(
            vec![
                job(0, 0, 3, 100, 100),
                job(1, 1, 3, 10, 10),
                job(2, 2, 4, 50, 50),
                job(3, 3, 1, 150, 150),
            ],
            4,
        );
        let starts = |scheduler| -> Vec<u64> {
            let played = play(
                &case,
                scheduler,
                Predictor::Request,
                StartAnswer::Sampled,
                &|_| {},
            );
            played.starts.iter().map(|s| s / S).collect()
        };
        assert_eq!(starts(Scheduler::Easy), [0, 100, 153, 3]);
        assert_eq!(starts(Scheduler::Conservative), [0, 100, 110, 160]);
    }

    /// Two jobs end at the shadow time: the processors both free count
    /// as spare, so a long job fitting in them backfills.
    #[test]
    fn every_job_ending_at_the_shadow_time_frees_its_processors() {
        let s = starts(
            vec![
                job(0, 0, 4, 100, 100),
                job(1, 0, 4, 100, 100),
                job(2, 1, 6, 10, 10),
                job(3, 2, 4, 500, 500),
            ],
            12,
        );
        // At 100 s, 8 processors free up: the head takes 6; job 3 runs
        // on 4 since 2 s, 2 of them spare then and 2 free now.
        assert_eq!(s, [0, 0, 100, 2]);
    }

    /// A log that names no machine size cannot be scheduled: refused,
    /// saying which header is missing.
    #[test]
    fn a_log_without_its_machines_size_is_refused_by_name() {
        let j = job(0, 0, 1, 10, 60).job;
        let err = Workload::from_events([Event::JobSubmitted(j)]).unwrap_err();
        assert!(err.contains("MaxProcs"), "{err}");
    }

    /// Each job that waits on arrival has its start projected by playing
    /// the schedule forward: in the first case, job 1 at 100 s and job 3
    /// at 110 s, both right; jobs that start at once are not projected.
    #[test]
    fn a_waiting_jobs_start_is_the_schedule_played_forward() {
        let workload = workload(reservation_case(), 10);
        let played = play(
            &workload,
            Scheduler::Easy,
            Predictor::Request,
            StartAnswer::Sampled,
            &|_| {},
        );
        let seconds = |p: Option<Projected>| p.map(|p| (p.p50 / S, p.limits / S));
        let projected: Vec<_> = played.projected.into_iter().map(seconds).collect();
        assert_eq!(projected, [None, Some((100, 100)), None, Some((110, 110))]);
        let outcome = simulate(
            &workload,
            Scheduler::Easy,
            Predictor::Request,
            StartAnswer::Sampled,
            &|_| {},
        );
        assert_eq!(outcome.start_estimated, 2);
        assert_eq!(outcome.start_p50_error_s, 0.0);
        assert_eq!(outcome.start_within_60s_pct, 100.0);
    }

    /// Spare processors at the shadow time: a long job that fits in what
    /// the head leaves over backfills even though it ends after.
    #[test]
    fn easy_backfills_into_the_processors_the_head_leaves_over() {
        let s = starts(
            vec![
                job(0, 0, 8, 100, 100),
                job(1, 1, 6, 10, 10),
                job(2, 2, 2, 500, 500),
            ],
            10,
        );
        // At 100 s, 10 free: the head takes 6, 4 spare; job 2 used 2.
        assert_eq!(s, [0, 100, 2]);
    }
}
