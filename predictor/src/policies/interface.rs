//! The interface every prediction policy implements. A policy is driven by
//! the life cycle of jobs (submitted, a task ended, the job ended) and
//! answers with [`Decision`]s; the history it learns from is owned by the
//! caller and lent to it in a [`Context`], so one history serves every
//! policy running in shadow.
//!
//! Policies are deterministic: any randomness (SLearn's pilot choice) is
//! derived from a configured seed and the job id, so a decision does not
//! depend on the order in which other jobs were seen, and a restarted
//! service or a re-run simulation decides exactly the same.

use jobcast_ingest::event::JobSubmitted;

use crate::decision::{Decision, PolicyKind};
use crate::history::History;
use crate::queues::QueueConfig;

/// What a policy may consult when it decides.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// Event time now, µs.
    pub now_us: u64,
    pub history: &'a History,
    pub queues: &'a QueueConfig,
}

/// A task attempt ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskEnd {
    pub job_id: u64,
    pub task_index: u32,
    pub time_us: u64,
    /// `Some(runtime)` when the task finished; `None` when the attempt
    /// failed, was evicted, killed or lost (a pilot must then be replaced).
    pub runtime_us: Option<u64>,
}

/// A job ended, with what it actually did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobDone {
    pub job_id: u64,
    pub submit_us: u64,
    pub end_us: u64,
    /// Tasks in the job.
    pub width: u32,
    /// Mean runtime of its tasks, µs.
    pub mean_task_runtime_us: f64,
    /// Its JCT divided by its runtime on an idle cluster (≥ 1): the score
    /// SLearn's adaptive sampling ratio minimises.
    pub normalized_jct: f64,
}

/// A job-runtime prediction policy.
pub trait Policy: Send {
    fn kind(&self) -> PolicyKind;

    /// A job arrived: its first decision.
    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision;

    /// A task attempt of a job ended; a new decision if that changes the
    /// job's placement (e.g. SLearn's pilots are done, or a pilot must be
    /// replaced). By default none: the policy decides once, at arrival.
    fn on_task_end(&mut self, _end: &TaskEnd, _ctx: &Context<'_>) -> Option<Decision> {
        None
    }

    /// A job ended: policies forget it and learn from it (the caller
    /// updates the shared history itself). By default nothing: the policy
    /// keeps nothing per job and learns only from the shared history.
    fn on_job_done(&mut self, _done: &JobDone, _ctx: &Context<'_>) {}

    /// A job ended without a usable outcome (failed, killed, lost): forget
    /// it without learning from it. By default nothing: the policy keeps
    /// nothing per job.
    fn on_job_abandoned(&mut self, _job_id: u64) {}

    /// Everything the policy holds (its settings, what it learnt, its live
    /// jobs), for a snapshot of the engine; [`crate::policies::restore`]
    /// takes it back.
    fn snapshot(&self) -> Vec<u8>;
}
