//! Retention: an ended job's records (the job, its decisions, its tasks)
//! are deleted once the engine's event clock (the time the input
//! partitions agree on; no single event moves it) is
//! `storage.retention_hours` past the job's end, so the store
//! stops growing once a retention window of jobs is held.
//!
//! The bound moves in steps of a hundredth of the window, and each step
//! deletes every indexed job that ended before it, with the writer's queue
//! drained first so that the scan sees every committed record. An ended job
//! whose end is already behind the bound when its records would be stored
//! is deleted instead of stored. The store then holds exactly the ended
//! jobs whose end is at or after the last bound, a function of the input
//! alone: a run that was killed and restarted ends with the same store as
//! one that was not, however their batches fell.
//!
//! A partition given up leaves its live jobs' decisions in this store (they
//! were made while it owned them); each such job is marked as awaiting its
//! end (`StateBatch::await_end`), indexed at that end once every instance
//! (which applies every partition) sees it, and so expires like any other.

use jobcast_predictor::engine::{Effects, Engine, JobRecord, JobState};
use jobcast_storage::state::{StateBatch, StateStore};

use crate::error::ServiceError;

/// Steps per retention window.
const STEPS: u64 = 100;

/// The retention bound and the jobs whose decisions wait for their end.
#[derive(Debug)]
pub(super) struct Retention {
    /// The retention window, µs of event time.
    window_us: u64,
    /// Ended jobs that ended before this are deleted.
    expired_before: u64,
    /// Live jobs of partitions given up whose decisions the store keeps
    /// until they end.
    awaiting_end: foldhash::HashSet<u64>,
}

impl Retention {
    pub(super) fn new(retention_hours: u64) -> Self {
        Retention {
            window_us: retention_hours.saturating_mul(3_600_000_000),
            expired_before: 0,
            awaiting_end: foldhash::HashSet::default(),
        }
    }

    /// What the store says awaits its end, on start.
    pub(super) fn set_awaiting_end(&mut self, jobs: impl IntoIterator<Item = u64>) {
        self.awaiting_end = jobs.into_iter().collect();
    }

    /// A job of a partition given up: its decisions stay until it ends.
    pub(super) fn await_end(&mut self, job_id: u64, write: &mut StateBatch<'_>) {
        write.await_end(job_id);
        self.awaiting_end.insert(job_id);
    }

    /// The bound a snapshot saves, and takes back.
    pub(super) fn expired_before(&self) -> u64 {
        self.expired_before
    }

    pub(super) fn restore_expired_before(&mut self, bound: u64) {
        self.expired_before = bound;
    }

    /// Ended jobs that ended before this are deleted: `now_us` (the
    /// engine's clock) minus the window, rounded down to a step.
    fn bound(&self, now_us: u64) -> u64 {
        let step = (self.window_us / STEPS).max(1);
        let bound = now_us.saturating_sub(self.window_us);
        bound - bound % step
    }

    /// Whether the bound at `now_us` has moved a step.
    pub(super) fn due(&self, now_us: u64) -> bool {
        self.bound(now_us) > self.expired_before
    }

    /// Store an ended job's final record, indexed for expiry, or, if it
    /// ended before the bound already, delete everything it had instead.
    pub(super) fn put_ended(&self, record: &JobRecord, write: &mut StateBatch<'_>) {
        let end_us = record.end_us.unwrap_or(record.submit_us);
        if end_us < self.expired_before {
            write.expire_job(end_us, record.job_id);
        } else {
            write.put_job(record.job_id, &record.to_bytes());
            write.put_expiry(end_us, record.job_id);
        }
    }

    /// Index at its end each job `effects` ended whose decisions this store
    /// keeps from an earlier ownership of its partition (its new owner
    /// stores its end): the decisions then expire with the job.
    pub(super) fn index_awaited(
        &mut self,
        engine: &Engine,
        effects: &Effects,
        write: &mut StateBatch<'_>,
    ) {
        if self.awaiting_end.is_empty() {
            return;
        }
        for job_id in effects.jobs.iter() {
            let Some(record) = engine.job(*job_id) else {
                continue;
            };
            if record.state == JobState::Running || !self.awaiting_end.remove(job_id) {
                continue;
            }
            let end_us = record.end_us.unwrap_or(record.submit_us);
            write.index_end(end_us, *job_id);
            if end_us < self.expired_before {
                write.expire_job(end_us, *job_id);
            }
        }
    }

    /// Delete the records of every job `store` holds that ended before the
    /// bound at `now_us`, and make it the bound; how many. The store must
    /// hold every record committed so far.
    pub(super) fn delete_expired(
        &mut self,
        store: &StateStore,
        now_us: u64,
        write: &mut StateBatch<'_>,
    ) -> Result<u64, ServiceError> {
        let bound = self.bound(now_us);
        // Below `expired_before` nothing is left: what was there is
        // deleted, and nothing below it is indexed any more (`put_ended`).
        let expired = store.expired(self.expired_before, bound, usize::MAX)?;
        for &(end_us, job_id) in &expired {
            write.expire_job(end_us, job_id);
        }
        self.expired_before = bound;
        Ok(expired.len() as u64)
    }
}
