//! A simulation workload built from a trace, the way SLearn §4.3 builds its
//! execution traces: only jobs that finished with every task's runtime
//! known can be replayed (a killed or censored job has no true size to
//! schedule by or to score estimates against), jobs wider than `max_width`
//! (150, as the paper) are dropped, and the trace's time span is cut in
//! two halves: jobs that *ended* in the first half are the history that
//! history-based predictors learn from before the run, jobs *submitted* in
//! the second half are replayed and evaluated. A job that starts in the
//! first half and ends in the second is in neither set (it would leak the
//! evaluated period into the training data).
//!
//! The span that is halved is where the trace holds both kinds of events a
//! replayable job needs: the overlap of its job submissions and its task
//! events. Not all events: the last events of a trace are the ends of its
//! longest jobs, which can run long after arrivals stop (a synthetic trace
//! of N jobs ends with a tail of finishes as long as its longest job), and
//! halving that tail would leave the second half nearly empty of arrivals.
//! Not the submissions alone either: a Google 2011 download often has more
//! `job_events` parts than `task_events` parts, and the middle of the
//! submissions then falls after the last task, leaving no history. Time 0
//! means "before the trace window" (as in the Google traces and
//! [`jobcast_ingest::truth`]), so an event at time 0 does not open a span.
//!
//! A split that leaves either half empty is refused: an evaluation without
//! history (3Sigma on its fallback alone) or without evaluated jobs reads
//! like a result and is not one.
//!
//! [`Workload::sample`] is the paper's extraction of an execution trace
//! (§4.3): N jobs drawn uniformly from the second half, their arrivals
//! rescaled so that the average offered load is 1, reported per 1000-s
//! window as in its Table 5 ([`Workload::load_profile`]).

use std::ops::Deref;

use jobcast_ingest::event::{Event, JobOutcome, JobSubmitted};
use jobcast_ingest::timeline;
use jobcast_ingest::truth::{CompletedJob, TruthBuilder};
use jobcast_ingest::{Trace, TraceError};
use jobcast_predictor::finished::{FinishedJob, JobError};
use jobcast_predictor::history::{History, HistoryConfig};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

/// Widest job replayed by default (SLearn §4.3 drops wider ones).
pub const DEFAULT_MAX_WIDTH: u32 = 150;

/// A job ready to replay: what it truly did ([`FinishedJob`], whose
/// arrival is its submission time) and when it ended in the trace (used only
/// when it serves as history). It reads as the finished job it wraps.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    truth: FinishedJob,
    end_us: u64,
}

impl SimJob {
    /// See [`FinishedJob::new`] for what is checked.
    pub fn new(job: JobSubmitted, runtimes_us: Vec<u64>, end_us: u64) -> Result<Self, JobError> {
        Ok(SimJob {
            truth: FinishedJob::new(job, runtimes_us)?,
            end_us,
        })
    }

    /// When it ended in the trace.
    pub fn end_us(&self) -> u64 {
        self.end_us
    }

    /// The same job submitted at `arrival_us` (its end moved with it).
    pub fn arriving_at(&self, arrival_us: u64) -> SimJob {
        let mut job = self.job().clone();
        let shift = |t: u64| (t + arrival_us).saturating_sub(job.time_us);
        let end_us = shift(self.end_us);
        job.time_us = arrival_us;
        SimJob {
            truth: FinishedJob::new(job, self.runtimes_us().to_vec())
                .expect("the same tasks, already checked"),
            end_us,
        }
    }
}

impl Deref for SimJob {
    type Target = FinishedJob;

    fn deref(&self) -> &FinishedJob {
        &self.truth
    }
}

/// Why a job of the trace is not replayed; [`Reason::name`] is the name
/// of its count in [`Excluded`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reason {
    /// Not ended within the trace.
    Censored,
    Killed,
    Failed,
    Lost,
    /// Submitted before the trace window (time 0) or never submitted in it.
    UnknownArrival,
    /// Submitted outside the span of the trace's task events, so its tasks
    /// were never seen (e.g. a `job_events` part without its `task_events`).
    OutsideTaskEvents,
    /// Finished, but some task's runtime is unknown (scheduled before the
    /// window, or never seen finishing).
    UnknownRuntime,
    /// Wider than `max_width`.
    TooWide,
    /// Malformed DAG stages.
    Invalid,
    /// Submitted in the first half but ended in the second: neither history
    /// nor evaluated.
    SpansSplit,
    /// Replayable, but left out of every DAG when DAGs were composed from
    /// recurring jobs ([`crate::recurring_dags`]).
    NotInDag,
}

impl Reason {
    pub fn name(self) -> &'static str {
        match self {
            Reason::Censored => "censored",
            Reason::Killed => "killed",
            Reason::Failed => "failed",
            Reason::Lost => "lost",
            Reason::UnknownArrival => "unknown_arrival",
            Reason::OutsideTaskEvents => "outside_task_events",
            Reason::UnknownRuntime => "unknown_runtime",
            Reason::TooWide => "too_wide",
            Reason::Invalid => "invalid",
            Reason::SpansSplit => "spans_split",
            Reason::NotInDag => "not_in_dag",
        }
    }
}

/// How many jobs of the trace were left out, by [`Reason`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Excluded {
    pub censored: u64,
    pub killed: u64,
    pub failed: u64,
    pub lost: u64,
    pub unknown_arrival: u64,
    pub outside_task_events: u64,
    pub unknown_runtime: u64,
    pub too_wide: u64,
    pub invalid: u64,
    pub spans_split: u64,
    pub not_in_dag: u64,
}

impl Excluded {
    fn count(&mut self, reason: Reason) {
        let n = match reason {
            Reason::Censored => &mut self.censored,
            Reason::Killed => &mut self.killed,
            Reason::Failed => &mut self.failed,
            Reason::Lost => &mut self.lost,
            Reason::UnknownArrival => &mut self.unknown_arrival,
            Reason::OutsideTaskEvents => &mut self.outside_task_events,
            Reason::UnknownRuntime => &mut self.unknown_runtime,
            Reason::TooWide => &mut self.too_wide,
            Reason::Invalid => &mut self.invalid,
            Reason::SpansSplit => &mut self.spans_split,
            Reason::NotInDag => &mut self.not_in_dag,
        };
        *n += 1;
    }

    pub fn total(&self) -> u64 {
        self.censored
            + self.killed
            + self.failed
            + self.lost
            + self.unknown_arrival
            + self.outside_task_events
            + self.unknown_runtime
            + self.too_wide
            + self.invalid
            + self.spans_split
            + self.not_in_dag
    }
}

/// The jobs left out, each with its reason, and their counts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exclusions {
    pub counts: Excluded,
    /// `(job id, reason)`, in the order the trace revealed them.
    pub jobs: Vec<(u64, Reason)>,
}

impl Exclusions {
    pub(crate) fn add(&mut self, job_id: u64, reason: Reason) {
        self.counts.count(reason);
        self.jobs.push((job_id, reason));
    }
}

/// Where the trace was cut, and from what (trace µs; `None` where the
/// trace has no event of that kind after time 0).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Split {
    /// First and last job submission.
    pub submissions_us: Option<(u64, u64)>,
    /// First and last task event.
    pub task_events_us: Option<(u64, u64)>,
    /// The overlap of the two: the span that is halved.
    pub span_us: (u64, u64),
    /// Middle of the span: the boundary between the halves.
    pub at_us: u64,
}

impl Split {
    /// Cut the overlap of `submissions_us` and `task_events_us` (either may
    /// be absent, e.g. in a hand-built test) in the middle.
    pub fn new(submissions_us: Option<(u64, u64)>, task_events_us: Option<(u64, u64)>) -> Split {
        let (start, end) = match (submissions_us, task_events_us) {
            (Some(s), Some(t)) => (s.0.max(t.0), s.1.min(t.1)),
            (Some(x), None) | (None, Some(x)) => x,
            (None, None) => (0, 0),
        };
        let end = end.max(start);
        Split {
            submissions_us,
            task_events_us,
            span_us: (start, end),
            at_us: start + (end - start) / 2,
        }
    }

    /// Whether a job submitted at `t` may have had its tasks seen.
    fn within_task_events(&self, t: u64) -> bool {
        self.task_events_us
            .is_none_or(|(first, last)| (first..=last).contains(&t))
    }

    /// `split at 38183.2 s, the middle of 25656.2–50710.3 s where
    /// submissions (…) and task events (…) overlap`: for humans.
    pub fn describe(&self) -> String {
        // Traces count in µs; real ones span hours, tests microseconds.
        let unit = if self.span_us.1 >= 10_000_000 {
            "s"
        } else {
            "µs"
        };
        let s = |us: u64| match unit {
            "s" => format!("{:.1}", us as f64 / 1e6),
            _ => us.to_string(),
        };
        let range = |r: Option<(u64, u64)>| {
            r.map_or_else(
                || "none".into(),
                |(a, b)| format!("{}–{} {unit}", s(a), s(b)),
            )
        };
        format!(
            "split at {} {unit}, the middle of {}–{} {unit} where submissions ({}) and task \
             events ({}) overlap",
            s(self.at_us),
            s(self.span_us.0),
            s(self.span_us.1),
            range(self.submissions_us),
            range(self.task_events_us),
        )
    }
}

/// The trace's load per window (SLearn Table 5): the task time of the jobs
/// that arrived in each window divided by what the slots can serve in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LoadProfile {
    pub average: f64,
    pub p50: f64,
    pub p90: f64,
    pub windows: usize,
}

/// Table 5's window: 1000 s, sliding by 100 s.
pub const LOAD_WINDOW_US: u64 = 1_000_000_000;
pub const LOAD_STEP_US: u64 = 100_000_000;

#[derive(Debug, thiserror::Error)]
pub enum WorkloadError {
    #[error(transparent)]
    Trace(#[from] TraceError),
    #[error(
        "{} leaves the {half} half empty ({history} history jobs, {evaluated} evaluated jobs, \
         {excluded} excluded); evaluating it would mislead",
        split.describe()
    )]
    EmptyHalf {
        half: &'static str,
        split: Split,
        history: usize,
        evaluated: usize,
        excluded: u64,
    },
    #[error("cannot sample {asked} jobs: the evaluated half has {have}")]
    TooFewJobs { asked: usize, have: usize },
    #[error("cannot sample 0 jobs")]
    NoJobsAsked,
}

/// A trace split into history and evaluated jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Jobs that ended in the first half, in order of their end.
    pub training: Vec<SimJob>,
    /// Jobs submitted in the second half, in order of arrival (then id).
    pub jobs: Vec<SimJob>,
    /// Where and why the trace was cut.
    pub split: Split,
    /// End of the evaluated period: the span's end, or where
    /// [`Workload::sample`] put it.
    pub end_us: u64,
    pub excluded: Exclusions,
}

impl Workload {
    /// Split usable jobs at `split`; `excluded` carries the jobs already
    /// left out. Refuses a split that leaves either half empty.
    pub fn split(
        jobs: Vec<SimJob>,
        split: Split,
        mut excluded: Exclusions,
    ) -> Result<Workload, WorkloadError> {
        let (mut training, mut evaluated) = (Vec::new(), Vec::new());
        for job in jobs {
            if job.arrival_us() >= split.at_us {
                evaluated.push(job);
            } else if job.end_us() < split.at_us {
                training.push(job);
            } else {
                excluded.add(job.job_id(), Reason::SpansSplit);
            }
        }
        training.sort_by_key(|j| (j.end_us(), j.job_id()));
        evaluated.sort_by_key(|j| (j.arrival_us(), j.job_id()));
        let half = match (training.is_empty(), evaluated.is_empty()) {
            (false, false) => None,
            (true, _) => Some("history"),
            (false, true) => Some("evaluated"),
        };
        if let Some(half) = half {
            return Err(WorkloadError::EmptyHalf {
                half,
                split,
                history: training.len(),
                evaluated: evaluated.len(),
                excluded: excluded.counts.total(),
            });
        }
        Ok(Workload {
            training,
            jobs: evaluated,
            end_us: split.span_us.1,
            split,
            excluded,
        })
    }

    /// Read a whole trace, keep the jobs that can be replayed (at most
    /// `max_width` tasks) and split them.
    pub fn from_trace(trace: Trace, max_width: u32) -> Result<Workload, WorkloadError> {
        let (usable, split, excluded) = replayable(trace, max_width)?;
        Workload::split(usable, split, excluded)
    }

    /// Every job, history and evaluated, as the canonical events a cluster
    /// would report with unlimited slots ([`jobcast_ingest::timeline`]),
    /// in time order: a trace of the workload for `replay`, `convert` or
    /// the demo (DAGs composed by [`crate::recurring_dags`] included).
    pub fn events(&self) -> Vec<Event> {
        let mut events: Vec<Event> = self
            .training
            .iter()
            .chain(&self.jobs)
            .flat_map(|j| timeline::job_events(j.job(), j.runtimes_us(), None))
            .collect();
        // Stable: at equal times a job's submission, its tasks, its end.
        events.sort_by_key(Event::time_us);
        events
    }

    /// A history trained on the first half, as it stands at the split.
    pub fn train(&self, config: HistoryConfig) -> History {
        let mut history = History::new(config);
        for job in &self.training {
            job.observe_into(&mut history, job.end_us());
        }
        history
    }

    /// Length of the evaluated period (at least 1 µs).
    fn evaluated_span_us(&self) -> u64 {
        self.end_us.saturating_sub(self.split.at_us).max(1)
    }

    fn work_us(&self) -> u128 {
        self.jobs
            .iter()
            .map(|j| u128::from(j.total_task_time_us()))
            .sum()
    }

    /// Total task time of the evaluated jobs divided by the length of the
    /// second half: the slots that make the average offered load 1 (the
    /// load of SLearn's extracted traces, §4.3 Table 5).
    pub fn unit_load_slots(&self) -> u32 {
        let slots = (self.work_us() as f64 / self.evaluated_span_us() as f64).round();
        slots.clamp(1.0, f64::from(u32::MAX)) as u32
    }

    /// SLearn's execution trace (§4.3): keep `n` of the evaluated jobs drawn
    /// uniformly (seeded) and move their arrivals, in their order and
    /// proportions, so that their average offered load on `slots` slots is
    /// 1 over the evaluated period. History is untouched.
    pub fn sample(&mut self, n: usize, seed: u64, slots: u32) -> Result<(), WorkloadError> {
        if n == 0 {
            return Err(WorkloadError::NoJobsAsked);
        }
        if n > self.jobs.len() {
            return Err(WorkloadError::TooFewJobs {
                asked: n,
                have: self.jobs.len(),
            });
        }
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut picked = rand::seq::index::sample(&mut rng, self.jobs.len(), n).into_vec();
        picked.sort_unstable();
        let jobs = std::mem::take(&mut self.jobs);
        self.jobs = picked.into_iter().map(|i| jobs[i].clone()).collect();
        let span = self.evaluated_span_us() as f64;
        let wanted = (self.work_us() as f64 / f64::from(slots.max(1))).max(1.0);
        let scale = wanted / span;
        let at = self.split.at_us;
        for job in &mut self.jobs {
            let arrival = at + ((job.arrival_us() - at) as f64 * scale).round() as u64;
            *job = job.arriving_at(arrival);
        }
        self.end_us = at + wanted.round() as u64;
        Ok(())
    }

    /// The offered load per [`LOAD_WINDOW_US`] window sliding by
    /// [`LOAD_STEP_US`] over the evaluated period on `slots` slots (one
    /// window of the whole period if it is shorter): SLearn's Table 5.
    pub fn load_profile(&self, slots: u32) -> LoadProfile {
        let (start, end) = (
            self.split.at_us,
            self.split.at_us + self.evaluated_span_us(),
        );
        let window = LOAD_WINDOW_US.min(end - start);
        let mut arrivals: Vec<(u64, u64)> = self
            .jobs
            .iter()
            .map(|j| (j.arrival_us(), j.total_task_time_us()))
            .collect();
        arrivals.sort_unstable();
        let capacity = f64::from(slots.max(1)) * window as f64;
        let mut loads = Vec::new();
        let mut from = start;
        while from + window <= end {
            let lo = arrivals.partition_point(|&(t, _)| t < from);
            let hi = arrivals.partition_point(|&(t, _)| t < from + window);
            let work: u64 = arrivals[lo..hi].iter().map(|&(_, w)| w).sum();
            loads.push(work as f64 / capacity);
            from += LOAD_STEP_US;
        }
        let average = loads.iter().sum::<f64>() / loads.len().max(1) as f64;
        loads.sort_by(f64::total_cmp);
        let rank = |q: f64| {
            loads
                .get(((q * loads.len() as f64).ceil() as usize).saturating_sub(1))
                .copied()
                .unwrap_or(0.0)
        };
        LoadProfile {
            average,
            p50: rank(0.5),
            p90: rank(0.9),
            windows: loads.len(),
        }
    }
}

/// The jobs of a whole trace that can be replayed (at most `max_width`
/// tasks), where to split them, and the jobs left out with their reasons.
pub(crate) fn replayable(
    trace: Trace,
    max_width: u32,
) -> Result<(Vec<SimJob>, Split, Exclusions), WorkloadError> {
    let mut builder = TruthBuilder::new();
    let mut excluded = Exclusions::default();
    let mut usable = Vec::new();
    // Jobs whose tasks were not all seen: why is known once the span
    // of the task events is.
    let mut unseen = Vec::new();
    let (mut submissions, mut task_events) = (None, None);
    let widen = |span: &mut Option<(u64, u64)>, t: u64| {
        if t > 0 {
            *span = Some(span.map_or((t, t), |(a, b): (u64, u64)| (a.min(t), b.max(t))));
        }
    };
    let mut sort = |done: CompletedJob, excluded: &mut Exclusions| {
        let id = done.job.job_id;
        match classify(done, max_width) {
            Ok(job) => usable.push(job),
            Err((Reason::UnknownRuntime, arrival)) => unseen.push((id, arrival)),
            Err((reason, _)) => excluded.add(id, reason),
        }
    };
    for event in trace {
        let event = event?;
        match &event {
            Event::JobSubmitted(s) => widen(&mut submissions, s.time_us),
            Event::Task(t) => widen(&mut task_events, t.time_us),
            _ => {}
        }
        let ended = matches!(event, Event::JobEnded(_));
        builder.apply(&event);
        if ended {
            for done in builder.take_completed() {
                sort(done, &mut excluded);
            }
        }
    }
    let (rest, _) = builder.finish();
    for done in rest {
        sort(done, &mut excluded);
    }
    let split = Split::new(submissions, task_events);
    for (id, arrival) in unseen {
        let reason = if split.within_task_events(arrival) {
            Reason::UnknownRuntime
        } else {
            Reason::OutsideTaskEvents
        };
        excluded.add(id, reason);
    }
    Ok((usable, split, excluded))
}

/// A replayable job, or why the job is not one (with its arrival, when
/// known, to tell a job outside the task events from one with a task
/// missing).
fn classify(done: CompletedJob, max_width: u32) -> Result<SimJob, (Reason, u64)> {
    let CompletedJob { job, tasks } = done;
    match job.outcome {
        None => return Err((Reason::Censored, 0)),
        Some(JobOutcome::Kill) => return Err((Reason::Killed, 0)),
        Some(JobOutcome::Fail) => return Err((Reason::Failed, 0)),
        Some(JobOutcome::Lost) => return Err((Reason::Lost, 0)),
        Some(JobOutcome::Finish) => {}
    }
    let Some(arrival) = job.submit_time_us.filter(|&t| t > 0) else {
        return Err((Reason::UnknownArrival, 0));
    };
    let runtimes: Option<Vec<u64>> = tasks.iter().map(|t| t.runtime_us()).collect();
    let Some(runtimes) =
        runtimes.filter(|r| !r.is_empty() && r.len() as u64 >= u64::from(job.num_tasks))
    else {
        return Err((Reason::UnknownRuntime, arrival));
    };
    // DAG stages number tasks 0..n stage by stage: indices must be exact.
    if job.stages.is_some()
        && tasks
            .iter()
            .enumerate()
            .any(|(i, t)| t.task_index as usize != i)
    {
        return Err((Reason::Invalid, arrival));
    }
    match u32::try_from(runtimes.len()) {
        Ok(width) if width <= max_width => {}
        _ => return Err((Reason::TooWide, arrival)),
    }
    let submitted = JobSubmitted {
        time_us: arrival,
        job_id: job.job_id,
        user: job.user,
        group: String::new(),
        job_name: job.job_name,
        logical_name: job.logical_name,
        scheduling_class: job.scheduling_class,
        priority: job.priority,
        cpu_request: job.cpu_request,
        mem_request: job.mem_request,
        partition: String::new(),
        time_limit_us: None,
        deadline_us: None,
        num_tasks: runtimes.len() as u32,
        stages: job.stages,
        cluster: String::new(),
    };
    let end = job.end_time_us.unwrap_or(arrival);
    SimJob::new(submitted, runtimes, end).map_err(|_| (Reason::Invalid, arrival))
}
