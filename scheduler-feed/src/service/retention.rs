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

use std::sync::atomic::Ordering;

use jobcast_predictor::engine::{Effects, JobRecord, JobState};
use jobcast_storage::state::StateBatch;
use tracing::debug;

use super::Pipeline;
use crate::error::ServiceError;
use crate::telemetry;

/// Steps per retention window.
const STEPS: u64 = 100;

impl Pipeline<'_> {
    /// The retention window, µs of event time.
    fn retention_us(&self) -> u64 {
        self.config
            .storage
            .retention_hours
            .saturating_mul(3_600_000_000)
    }

    /// Ended jobs that ended before this are deleted: the event clock
    /// minus the window, rounded down to a step.
    fn expiry_bound(&self) -> u64 {
        let retention = self.retention_us();
        let step = (retention / STEPS).max(1);
        let bound = self.engine.now_us().saturating_sub(retention);
        bound - bound % step
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
    pub(super) fn index_awaited(&mut self, effects: &Effects, write: &mut StateBatch<'_>) {
        if self.awaiting_end.is_empty() {
            return;
        }
        for job_id in effects.jobs.iter() {
            let Some(record) = self.engine.job(*job_id) else {
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

    /// When the bound has moved a step, delete the records of every job
    /// that ended before it.
    pub(super) fn expire(&mut self, write: &mut StateBatch<'_>) -> Result<(), ServiceError> {
        let bound = self.expiry_bound();
        if bound <= self.expired_before {
            return Ok(());
        }
        let count = self.delete_expired(write)?;
        metrics::counter!(telemetry::JOBS_EXPIRED).increment(count);
        self.shared
            .counters
            .expired_jobs
            .fetch_add(count, Ordering::Relaxed);
        debug!(bound_us = bound, jobs = count, "ended jobs expired");
        Ok(())
    }

    /// Delete the records of every job that ended before the bound, and
    /// make it the bound. Also what a restore ends with: the log it applied
    /// stored ended jobs the run that logged it had already deleted.
    pub(super) fn delete_expired(
        &mut self,
        write: &mut StateBatch<'_>,
    ) -> Result<u64, ServiceError> {
        let bound = self.expiry_bound();
        // The scan must see every record committed so far.
        self.writer.flush()?;
        // Below `expired_before` nothing is left: what was there is
        // deleted, and nothing below it is indexed any more (`put_ended`).
        let expired = self.store.expired(self.expired_before, bound, usize::MAX)?;
        for &(end_us, job_id) in &expired {
            write.expire_job(end_us, job_id);
        }
        self.expired_before = bound;
        Ok(expired.len() as u64)
    }
}
