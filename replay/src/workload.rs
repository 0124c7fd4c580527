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
//! The span is that of the job submissions, not of all events: the last
//! events of a trace are the ends of its longest jobs, which can run long
//! after arrivals stop (a synthetic trace of N jobs ends with a tail of
//! finishes as long as its longest job), and halving that tail would leave
//! the second half nearly empty of arrivals. Time 0 means "before the trace
//! window" (as in the Google traces and [`jobcast_ingest::truth`]), so a job
//! submitted at time 0 has no known arrival and does not open the span.

use std::ops::Deref;

use jobcast_ingest::event::{Event, JobOutcome, JobSubmitted};
use jobcast_ingest::truth::{CompletedJob, TruthBuilder};
use jobcast_ingest::{Trace, TraceError};
use jobcast_predictor::finished::{FinishedJob, JobError};
use jobcast_predictor::history::{History, HistoryConfig};
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
}

impl Deref for SimJob {
    type Target = FinishedJob;

    fn deref(&self) -> &FinishedJob {
        &self.truth
    }
}

/// Jobs of the trace that were left out, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Excluded {
    /// Not ended within the trace.
    pub censored: u64,
    pub killed: u64,
    pub failed: u64,
    pub lost: u64,
    /// Submitted before the trace window (time 0) or never submitted in it.
    pub unknown_arrival: u64,
    /// Finished, but some task's runtime is unknown (scheduled before the
    /// window, or never seen finishing).
    pub unknown_runtime: u64,
    /// Wider than `max_width`.
    pub too_wide: u64,
    /// Malformed DAG stages.
    pub invalid: u64,
    /// Submitted in the first half but ended in the second: neither history
    /// nor evaluated.
    pub spans_split: u64,
}

impl Excluded {
    pub fn total(&self) -> u64 {
        self.censored
            + self.killed
            + self.failed
            + self.lost
            + self.unknown_arrival
            + self.unknown_runtime
            + self.too_wide
            + self.invalid
            + self.spans_split
    }
}

/// A trace split into history and evaluated jobs.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Jobs that ended in the first half, in order of their end.
    pub training: Vec<SimJob>,
    /// Jobs submitted in the second half, in order of arrival (then id).
    pub jobs: Vec<SimJob>,
    /// First (after time 0) and last submission time of the trace.
    pub span_us: (u64, u64),
    /// Middle of the span: the boundary between the halves.
    pub split_us: u64,
    pub excluded: Excluded,
}

impl Workload {
    /// Split usable jobs at the middle of `span_us`; `excluded` carries
    /// the counts of jobs already left out.
    pub fn split(jobs: Vec<SimJob>, span_us: (u64, u64), mut excluded: Excluded) -> Workload {
        let (start, end) = span_us;
        let split_us = start + end.saturating_sub(start) / 2;
        let (mut training, mut evaluated) = (Vec::new(), Vec::new());
        for job in jobs {
            if job.arrival_us() >= split_us {
                evaluated.push(job);
            } else if job.end_us() < split_us {
                training.push(job);
            } else {
                excluded.spans_split += 1;
            }
        }
        training.sort_by_key(|j| (j.end_us(), j.job_id()));
        evaluated.sort_by_key(|j| (j.arrival_us(), j.job_id()));
        Workload {
            training,
            jobs: evaluated,
            span_us,
            split_us,
            excluded,
        }
    }

    /// Read a whole trace, keep the jobs that can be replayed (at most
    /// `max_width` tasks) and split them.
    pub fn from_trace(trace: Trace, max_width: u32) -> Result<Workload, TraceError> {
        let mut builder = TruthBuilder::new();
        let mut excluded = Excluded::default();
        let mut usable = Vec::new();
        let (mut first, mut last) = (None::<u64>, 0u64);
        for event in trace {
            let event = event?;
            if let Event::JobSubmitted(s) = &event
                && s.time_us > 0
            {
                first = Some(first.map_or(s.time_us, |f| f.min(s.time_us)));
                last = last.max(s.time_us);
            }
            let ended = matches!(event, Event::JobEnded(_));
            builder.apply(&event);
            if ended {
                for done in builder.take_completed() {
                    classify(done, max_width, &mut excluded, &mut usable);
                }
            }
        }
        let (rest, _) = builder.finish();
        for done in rest {
            classify(done, max_width, &mut excluded, &mut usable);
        }
        let span = (first.unwrap_or(0), last.max(first.unwrap_or(0)));
        Ok(Workload::split(usable, span, excluded))
    }

    /// A history trained on the first half, as it stands at the split.
    pub fn train(&self, config: HistoryConfig) -> History {
        let mut history = History::new(config);
        for job in &self.training {
            job.observe_into(&mut history, job.end_us());
        }
        history
    }

    /// Total task time of the evaluated jobs divided by the length of the
    /// second half: the slots that make the average offered load 1 (the
    /// load of SLearn's extracted traces, §4.3 Table 5).
    pub fn unit_load_slots(&self) -> u32 {
        let span = self.span_us.1.saturating_sub(self.split_us).max(1);
        let work: u128 = self
            .jobs
            .iter()
            .map(|j| u128::from(j.total_task_time_us()))
            .sum();
        let slots = (work as f64 / span as f64).round();
        slots.clamp(1.0, f64::from(u32::MAX)) as u32
    }
}

/// Sort one ended (or censored) job into `usable` or an exclusion count.
fn classify(done: CompletedJob, max_width: u32, excluded: &mut Excluded, usable: &mut Vec<SimJob>) {
    let CompletedJob { job, tasks } = done;
    match job.outcome {
        None => return excluded.censored += 1,
        Some(JobOutcome::Kill) => return excluded.killed += 1,
        Some(JobOutcome::Fail) => return excluded.failed += 1,
        Some(JobOutcome::Lost) => return excluded.lost += 1,
        Some(JobOutcome::Finish) => {}
    }
    let Some(arrival) = job.submit_time_us.filter(|&t| t > 0) else {
        return excluded.unknown_arrival += 1;
    };
    let runtimes: Option<Vec<u64>> = tasks.iter().map(|t| t.runtime_us()).collect();
    let Some(runtimes) =
        runtimes.filter(|r| !r.is_empty() && r.len() as u64 >= u64::from(job.num_tasks))
    else {
        return excluded.unknown_runtime += 1;
    };
    // DAG stages number tasks 0..n stage by stage: indices must be exact.
    if job.stages.is_some()
        && tasks
            .iter()
            .enumerate()
            .any(|(i, t)| t.task_index as usize != i)
    {
        return excluded.invalid += 1;
    }
    let Ok(width) = u32::try_from(runtimes.len()) else {
        return excluded.too_wide += 1;
    };
    if width > max_width {
        return excluded.too_wide += 1;
    }
    let submitted = JobSubmitted {
        time_us: arrival,
        job_id: job.job_id,
        user: job.user,
        job_name: job.job_name,
        logical_name: job.logical_name,
        scheduling_class: job.scheduling_class,
        priority: job.priority,
        cpu_request: job.cpu_request,
        mem_request: job.mem_request,
        partition: String::new(),
        time_limit_us: None,
        num_tasks: width,
        stages: job.stages,
    };
    let end = job.end_time_us.unwrap_or(arrival);
    match SimJob::new(submitted, runtimes, end) {
        Ok(sim) => usable.push(sim),
        Err(_) => excluded.invalid += 1,
    }
}
