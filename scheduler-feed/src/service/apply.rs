//! Steps 2 and 3 of an event's path (`docs/architecture.md`), and the
//! records of step 5: the [`Applier`] holds the engine and applies every
//! message to it (2), encodes what each gave rise to as messages (3), and
//! stages the records a batch changed in its RocksDB write (5). Every message goes to the engine; the
//! partition it came from decides who stores the records it changed (its
//! job's, or its machine's first partition) and who publishes its
//! outputs. Nothing here touches a broker, so `jobcast bench engine`
//! measures these steps alone, from memory.

use std::collections::BTreeSet;
use std::ops::Range;
use std::time::Instant;

use jobcast_ingest::kafka::Topics;
use jobcast_predictor::engine::{
    Applied, Effects, Engine, JobRecord, JobState, Origin, Output, TaskRecord,
};
use jobcast_storage::state::{Skip, StateBatch, StateStore};
use tracing::warn;

use super::encode;
use super::outbox::EndedJob;
use super::partitions::Partitions;
use super::record_owners::{Pairs, RecordOwners};
use super::retention::Retention;
use super::sink::Outgoing;
use crate::config::ServeConfig;
use crate::error::{DeadLetter, ServiceError};
use crate::source::Consumed;
use crate::telemetry;

/// The predictor's state as the service holds it: the engine, the
/// partition each live record belongs to, retention's bound, and the input
/// the operator skipped.
pub struct Applier<'a> {
    topics: &'a Topics,
    dead_letters: encode::DeadLetters<'a>,
    engine: Engine,
    /// The input partition each live job's and machine's records belong
    /// to.
    record_owners: RecordOwners,
    /// What retention has deleted up to, and the jobs whose decisions
    /// wait for their end (`retention.rs`).
    retention: Retention,
    /// Input ranges of the events topic the operator skipped:
    /// dead-lettered, never applied.
    skips: Vec<Skip>,
}

/// What one input message gave rise to.
pub struct MessageOutcome {
    /// Applied (or held), or why not.
    pub(super) result: Result<(), DeadLetter>,
    /// Its messages to publish: the outputs of the events it applied, and
    /// the dead letters (its own, and of held events it refuted).
    pub(super) messages: Vec<Outgoing>,
    /// The dead letters' reasons.
    pub(super) dead: Vec<&'static str>,
    /// Its outputs among the effects.
    pub(super) outputs: Range<usize>,
}

impl MessageOutcome {
    /// How many messages it gives the sink to publish.
    pub fn messages(&self) -> usize {
        self.messages.len()
    }

    /// How many of them are dead letters.
    pub fn dead_letters(&self) -> usize {
        self.dead.len()
    }
}

/// Which tasks of a job that ended [`Applier::stage_records`] stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndedTasks {
    /// Those its last messages changed: the store holds the rest, written
    /// as they changed (or whole, when its partition was taken over).
    Changed,
    /// All of them. A restore's log may end a job whose tasks' events came
    /// before the snapshot, while another instance stored its partition:
    /// that one deletes its copy when it gives the partition up, so the
    /// restoring owner must store them (`Pipeline::restore`).
    All,
}

impl<'a> Applier<'a> {
    /// A new engine, with the settings of `config`.
    pub fn new(config: &'a ServeConfig) -> Result<Self, ServiceError> {
        Ok(Applier {
            topics: &config.topics,
            dead_letters: encode::DeadLetters::new(&config.topics, &config.kafka),
            engine: Engine::new(&config.engine).map_err(|e| e.within("engine"))?,
            record_owners: RecordOwners::default(),
            retention: Retention::new(config.storage.retention_hours),
            skips: Vec::new(),
        })
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Start again from a restored (or new) engine, the partitions of its
    /// records and retention's bound, as the snapshot saved them.
    pub(super) fn restore(&mut self, engine: Engine, owners: RecordOwners, expired_before: u64) {
        self.engine = engine;
        self.record_owners = owners;
        self.retention.restore_expired_before(expired_before);
    }

    /// The jobs' and machines' partitions and retention's bound, for a
    /// snapshot (which [`Self::restore`] takes back).
    pub(super) fn saved(&self) -> (Pairs, Pairs, u64) {
        let (jobs, machines) = self.record_owners.saved();
        (jobs, machines, self.retention.expired_before())
    }

    /// Start again from a new engine (no snapshot was stored).
    pub(super) fn start_engine(&mut self, engine: Engine) {
        self.engine = engine;
    }

    /// The store's word on the jobs whose decisions wait for their end.
    pub(super) fn set_awaiting_end(&mut self, jobs: impl IntoIterator<Item = u64>) {
        self.retention.set_awaiting_end(jobs);
    }

    /// The input ranges the operator skipped (of `events`, the input topic).
    pub(super) fn set_skips(&mut self, mut skips: Vec<Skip>, events: &str) {
        skips.retain(|s| s.topic == events);
        for skip in &skips {
            tracing::info!(%skip, "input the operator skipped is dead-lettered, not applied");
        }
        self.skips = skips;
    }

    /// Apply the input message at `partition`/`offset`; what it produced
    /// is appended to `effects`. One in a range the operator skipped is
    /// not applied, whatever it holds. One far ahead of the engine's clock
    /// may be held, and events held before it on its partition released
    /// or refused ([`Effects::refused`]), whatever becomes of this one.
    fn apply_message(
        &mut self,
        partition: i32,
        offset: i64,
        consumed: &Consumed,
        effects: &mut Effects,
    ) -> Result<(), DeadLetter> {
        if let Some(skip) = self
            .skips
            .iter()
            .find(|s| s.covers(&self.topics.events, partition, offset))
        {
            warn!(partition, offset, skip = %skip, "input message skipped by the operator");
            return Err(DeadLetter::Skipped(Box::new(skip.clone())));
        }
        let event = consumed.event.as_ref().map_err(Clone::clone)?;
        let applied = self
            .engine
            .apply(Origin::new(partition, offset), event, effects)
            .map_err(DeadLetter::Rejected)?;
        if applied == Applied::Held {
            metrics::counter!(telemetry::EVENTS_HELD).increment(1);
        }
        self.record_owners.note(event, partition);
        Ok(())
    }

    /// Apply the input message at `partition`/`offset` ([`Self::apply_message`])
    /// and encode what it gave rise to as messages to publish
    /// ([`encode::of_message`]); `polled_at`, for the latency metric, when
    /// this instance publishes them.
    pub fn apply_and_encode(
        &mut self,
        partition: i32,
        offset: i64,
        consumed: &Consumed,
        effects: &mut Effects,
        polled_at: Option<Instant>,
    ) -> MessageOutcome {
        let before = effects.outputs.len();
        let refused_before = effects.refused.len();
        let result = self.apply_message(partition, offset, consumed, effects);
        let mut messages = Vec::new();
        let dead = encode::of_message(
            &self.dead_letters,
            consumed,
            partition,
            offset,
            &result,
            (
                &effects.outputs[before..],
                &effects.refused[refused_before..],
            ),
            polled_at,
            &mut messages,
        );
        MessageOutcome {
            result,
            messages,
            dead,
            outputs: before..effects.outputs.len(),
        }
    }

    /// The tasks of a job the engine holds, by index.
    pub(super) fn tasks_of(
        &self,
        job_id: u64,
        width: u32,
    ) -> impl Iterator<Item = (u32, TaskRecord)> + '_ {
        (0..width).filter_map(move |index| Some((index, self.engine.task(job_id, index)?)))
    }

    /// Stage in `write` the records `effects` changed that belong to
    /// `partitions` ([`Self::write_records`]), and index at their end the
    /// ended jobs whose decisions awaited it (`retention.rs`): what a batch
    /// and a restore's log store of every message they applied.
    pub fn stage_records(
        &mut self,
        effects: &Effects,
        partitions: &BTreeSet<i32>,
        ended: EndedTasks,
        write: &mut StateBatch<'_>,
    ) {
        self.write_records(effects, partitions, ended, write);
        self.retention.index_awaited(&self.engine, effects, write);
    }

    /// Write the records `effects` changed that belong to `partitions`, and
    /// `ended` tasks of the jobs that ended. Jobs go last: an ended job that
    /// is already past retention is then deleted with everything written
    /// for it before (`retention.rs`).
    fn write_records(
        &self,
        effects: &Effects,
        partitions: &BTreeSet<i32>,
        ended: EndedTasks,
        write: &mut StateBatch<'_>,
    ) {
        if partitions.is_empty() {
            return;
        }
        let ours = |job_id: u64| {
            self.record_owners
                .job(job_id)
                .is_some_and(|p| partitions.contains(&p))
        };
        for output in &effects.outputs {
            match output {
                Output::Decision(d) if ours(d.job_id) => {
                    write.put_decision(d.job_id, d.version, d);
                }
                // The latest of a batch is written last.
                Output::Deadline { record, .. } if ours(record.job_id) => {
                    write.put_deadline(record.job_id, record);
                }
                _ => {}
            }
        }
        for &(job_id, task_index) in effects.tasks.iter().filter(|t| ours(t.0)) {
            if let Some(record) = self.engine.task(job_id, task_index) {
                write.put_task(job_id, task_index, &record.to_bytes());
            }
        }
        for &machine_id in &effects.machines {
            if !self
                .record_owners
                .machine(machine_id)
                .is_some_and(|p| partitions.contains(&p))
            {
                continue;
            }
            match self.engine.machine(machine_id) {
                Some(record) => write.put_machine(machine_id, record),
                // Forgotten for its silence (the engine's `expiry`).
                None => write.delete_machine(machine_id),
            }
        }
        for &job_id in effects.jobs.iter().filter(|j| ours(**j)) {
            match self.engine.job(job_id) {
                Some(record) if record.state == JobState::Running => {
                    write.put_job(job_id, &record.to_bytes());
                }
                Some(record) => {
                    if ended == EndedTasks::All {
                        for (index, task) in self.tasks_of(job_id, record.width) {
                            write.put_task(job_id, index, &task.to_bytes());
                        }
                    }
                    self.retention.put_ended(record, write);
                }
                None => {}
            }
        }
    }

    /// Let the engine drop ended jobs (once their records are written), and
    /// forget their partitions, and those of machines the engine forgot.
    pub fn release_ended(&mut self, effects: &Effects) {
        self.engine.release_ended();
        for &job_id in &effects.jobs {
            if self.engine.job(job_id).is_none() {
                self.record_owners.forget_job(job_id);
            }
        }
        for &machine_id in &effects.expired_machines {
            self.record_owners.forget_machine(machine_id);
        }
    }

    /// Write what the predictor learnt from the batch (every instance
    /// learns from every partition): the history distributions it changed,
    /// the policies' error statistics and the latest capacity decision.
    pub fn write_learnt(&self, effects: &Effects, write: &mut StateBatch<'_>) {
        for &key in &effects.history {
            match self.engine.history().record(key) {
                Some(record) => write.put_history(&key.to_bytes(), &record.to_bytes()),
                None => write.delete_history(&key.to_bytes()),
            }
        }
        for &policy in &effects.policies {
            if let Some(errors) = self.engine.policy_errors(policy) {
                write.put_policy(policy, errors);
            }
        }
        if let Some(decision) = effects.outputs.iter().rev().find_map(|o| match o {
            Output::Capacity(d) => Some(d),
            _ => None,
        }) {
            write.put_capacity(decision);
        }
        if effects.jobs.iter().next().is_some() || effects.machines.iter().next().is_some() {
            write.put_clusters(&self.engine.clusters());
        }
    }

    /// Whether retention's bound has moved a step since the last deletion.
    pub(super) fn expiry_due(&self) -> bool {
        self.retention.due(self.engine.now_us())
    }

    /// Delete the records of every job `store` holds that ended before
    /// retention's bound, and make it the bound; how many. The store must
    /// hold every record committed so far.
    pub(super) fn delete_expired(
        &mut self,
        store: &StateStore,
        write: &mut StateBatch<'_>,
    ) -> Result<u64, ServiceError> {
        self.retention
            .delete_expired(store, self.engine.now_us(), write)
    }

    /// Stage an ended job's final record another owner had not stored.
    pub(super) fn put_ended(&self, record: &JobRecord, write: &mut StateBatch<'_>) {
        self.retention.put_ended(record, write);
    }

    /// The final records of a job `effects` ended in a partition this
    /// instance does not own (before they leave the engine's memory), and
    /// its partition: kept in case its owner had not stored them when this
    /// instance takes over.
    pub(super) fn ended_elsewhere<'e>(
        &'e self,
        effects: &'e Effects,
        owned: &'e Partitions,
    ) -> impl Iterator<Item = (i32, EndedJob)> + 'e {
        effects.jobs.iter().filter_map(move |&job_id| {
            let partition = self.record_owners.job(job_id)?;
            if owned.owns(partition) {
                return None;
            }
            let record = self.engine.job(job_id)?;
            if record.state == JobState::Running {
                return None;
            }
            let tasks = self
                .tasks_of(job_id, record.width)
                .map(|(index, task)| (index, task.to_bytes()))
                .collect();
            let ended = EndedJob {
                record: record.clone(),
                tasks,
            };
            Some((partition, ended))
        })
    }

    /// Stage the records of `partitions` the engine holds: their live jobs
    /// and tasks, and their machines.
    pub(super) fn store_partitions(&self, partitions: &BTreeSet<i32>, write: &mut StateBatch<'_>) {
        if partitions.is_empty() {
            return;
        }
        for job_id in self.record_owners.jobs_of(partitions) {
            if let Some(record) = self.engine.job(job_id) {
                write.put_job(job_id, &record.to_bytes());
                for (index, task) in self.tasks_of(job_id, record.width) {
                    write.put_task(job_id, index, &task.to_bytes());
                }
            }
            if let Some(deadline) = self.engine.deadline(job_id) {
                write.put_deadline(job_id, deadline);
            }
        }
        for machine_id in self.record_owners.machines_of(partitions) {
            if let Some(record) = self.engine.machine(machine_id) {
                write.put_machine(machine_id, record);
            }
        }
    }

    /// Stage the deletion of `partitions`' live jobs' records (with their
    /// deadline plans), their tasks and machines: their new owner keeps them current now. What is
    /// final stays: ended jobs' records, and the decisions made while this
    /// instance owned the partition (until the job has ended:
    /// `retention.rs`).
    pub(super) fn drop_partitions(
        &mut self,
        partitions: &BTreeSet<i32>,
        write: &mut StateBatch<'_>,
    ) {
        if partitions.is_empty() {
            return;
        }
        for job_id in self.record_owners.jobs_of(partitions) {
            write.delete_job_record(job_id);
            if let Some(record) = self.engine.job(job_id) {
                for index in 0..record.width {
                    write.delete_task(job_id, index);
                }
                self.retention.await_end(job_id, write);
            }
        }
        for machine_id in self.record_owners.machines_of(partitions) {
            write.delete_machine(machine_id);
        }
    }
}
