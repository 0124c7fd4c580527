//! Recovery: snapshots of the predictor's state, the restore on start, and
//! partitions changing hands.
//!
//! Every `storage.snapshot_every_events` messages, the batch that crosses
//! the mark also writes a snapshot (the engine's state, which partition
//! each live job and machine came from, how far each input partition was
//! applied, and what is held for other owners), and the same atomic write
//! deletes the log behind it. The
//! engine's history, nearly all of its bytes, is in it whole only now and
//! then ([`CHANGES_PER_WHOLE`]); the snapshots between hold the values
//! changed since the one before. On start, the chain from the latest whole
//! snapshot on is restored and the log after it applied again: bounded
//! work, whatever the uptime.
//!
//! When partitions change hands, nothing is replayed: the engine is
//! current (every instance applies every partition). A partition taken
//! over gets its live records written from memory and the outputs its
//! previous owner had not published (from the offset it committed to the
//! group) from the [`Outbox`](super::outbox); a partition given up has its
//! live records deleted (its ended jobs' final records stay).

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobcast_predictor::engine::{Effects, Engine, JobState, Output, RestoreError, SnapshotError};
use jobcast_predictor::history::HistoryKey;
use jobcast_storage::state::{JOBCAST_VERSION, StateBatch};
use rdkafka::consumer::{BaseConsumer, Consumer};
use serde::{Deserialize, Serialize};
use tracing::info;

use super::Pipeline;
use super::apply::EndedTasks;
use super::group::MemberContext;
use super::outbox::{EndedJob, Held, HeldDecision, Outbox, SavedOutbox};
use super::partitions::Handover;
use super::record_owners::RecordOwners;
use super::sink::{Outgoing, Sink};
use crate::error::ServiceError;
use crate::source::Consumed;
use crate::telemetry;

/// Writes per intermediate commit while the log after a snapshot is
/// applied (records of partitions taken over on start).
const REPLAY_COMMIT_EVERY: usize = 50_000;
/// Logged messages applied between polls of the group member (and looks
/// at whether a stop was asked for) while the log is applied: the group
/// evicts a member that does not poll for `max.poll.interval.ms`, and a
/// restore must not cost the instance its partitions (changes it hears of
/// meanwhile are queued, and handled once the restore is done).
const REPLAY_POLL_EVERY: u64 = 10_000;

/// How a start's restore ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Restore {
    Done,
    /// A stop was asked for before the log was applied to its end: the
    /// engine holds a prefix of the state, which must be neither
    /// snapshotted nor served; the next start restores again.
    Interrupted,
}

/// A whole snapshot is written again once the snapshots of changes after
/// the last one add up to this share of its size. A restore then reads
/// at most 1.5 times the state, and the snapshots cost a fraction of
/// rewriting the state every time: the history, nearly all of a snapshot
/// once its window is full, changes only in the feature values of the
/// jobs that ended since the snapshot before.
const CHANGES_PER_WHOLE: f64 = 0.5;

/// The snapshots stored so far, to choose the next one's form.
#[derive(Default)]
pub(super) struct SnapshotChain {
    /// The sequence number of the latest snapshot.
    seq: u64,
    /// The bytes of the latest whole snapshot (0 without one), and of the
    /// snapshots of changes written after it.
    whole_bytes: u64,
    changes_bytes: u64,
    /// The history keys changed since the latest snapshot.
    history_changed: HashSet<HistoryKey>,
}

impl SnapshotChain {
    /// Note what a batch (or a logged message applied again) changed.
    pub(super) fn note(&mut self, effects: &Effects) {
        self.history_changed.extend(effects.history.iter().copied());
    }

    fn whole_due(&self) -> bool {
        self.whole_bytes == 0
            || self.changes_bytes as f64 >= CHANGES_PER_WHOLE * self.whole_bytes as f64
    }
}

/// What a snapshot holds besides the engine: whose records are whose, and
/// where each input partition was. Stored first, the engine's snapshot
/// after it (`Engine::snapshot_to`), in one buffer: neither is copied into
/// the other.
#[derive(Serialize, Deserialize)]
struct PipelineSnapshot<'a> {
    job_partitions: Vec<(u64, i32)>,
    machine_partitions: Vec<(u64, i32)>,
    /// The next offset of each input partition after the messages the
    /// snapshot includes.
    applied: BTreeMap<i32, i64>,
    /// The expiry bound reached: the store holds no ended job below it,
    /// so the restore's expiry scan starts there.
    expired_before: u64,
    /// The outputs and final records held for other owners' partitions:
    /// those before the snapshot cannot be computed again.
    outbox: SavedOutbox<'a>,
}

impl Pipeline<'_> {
    /// Refuse a store built by another engine configuration or an older
    /// layout, and read which partitions it holds.
    pub(super) fn check_store(&mut self) -> Result<(), ServiceError> {
        self.next_seq = self.store.next_log_seq()?;
        self.partitions
            .set_stored(self.store.check_format(&self.engine_config)?);
        let events = &self.topics.events;
        self.applier
            .retention
            .set_awaiting_end(self.store.awaiting_end()?);
        self.applier.set_skips(self.store.skips()?, events);
        if let Some(before) = self.store.stamp_version()?
            && before != JOBCAST_VERSION
        {
            info!(
                before = %before,
                now = JOBCAST_VERSION,
                "the store was last written by another jobcast release"
            );
        }
        Ok(())
    }

    /// Whether the batch being committed should carry a snapshot.
    pub(super) fn snapshot_due(&self) -> bool {
        self.next_seq - self.snapshots.seq >= self.config.storage.snapshot_every_events
    }

    /// Add a snapshot of the state after every message logged so far to
    /// `write` (which then also truncates the log behind it). Ended jobs
    /// must be released first: their records are in `write` already.
    pub(super) fn write_snapshot(
        &mut self,
        write: &mut StateBatch<'_>,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        let whole = self.snapshots.whole_due();
        let (job_partitions, machine_partitions) = self.applier.record_owners.saved();
        let snapshot = PipelineSnapshot {
            job_partitions,
            machine_partitions,
            applied: self.applied.clone(),
            expired_before: self.applier.retention.expired_before(),
            outbox: self.outbox.saved(),
        };
        // Sized for a whole one like the last (pages not written to cost
        // nothing): growing to tens of MB would copy it again and again.
        let capacity = self.snapshots.whole_bytes + self.snapshots.whole_bytes / 8;
        let out = Vec::with_capacity(capacity as usize);
        let out = postcard::to_extend(&snapshot, out).map_err(SnapshotError::from)?;
        let bytes = if whole {
            self.applier.engine.snapshot_to(out)?
        } else {
            let changed = self.snapshots.history_changed.iter().copied();
            self.applier.engine.snapshot_changes(changed, out)?
        };
        let chain = &mut self.snapshots;
        if whole {
            write.put_snapshot(self.next_seq, &bytes);
            (chain.whole_bytes, chain.changes_bytes) = (bytes.len() as u64, 0);
        } else {
            write.put_snapshot_changes(self.next_seq, &bytes);
            chain.changes_bytes += bytes.len() as u64;
        }
        info!(
            seq = self.next_seq,
            whole,
            bytes = bytes.len(),
            seconds = started.elapsed().as_secs_f64(),
            "snapshot taken; its batch truncates the log behind it"
        );
        chain.seq = self.next_seq;
        chain.history_changed.clear();
        metrics::counter!(telemetry::SNAPSHOTS).increment(1);
        metrics::gauge!(telemetry::SNAPSHOT_BYTES).set(bytes.len() as f64);
        metrics::gauge!(telemetry::SNAPSHOT_SECONDS).set(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// On a clean stop, once every batch is written: a snapshot of the
    /// state they left, unless the latest one already is, so that the next
    /// start applies nothing from the log.
    pub(super) fn snapshot_on_stop(&mut self) -> Result<(), ServiceError> {
        if self.next_seq == self.snapshots.seq {
            return Ok(());
        }
        let store = self.store.clone();
        let mut write = store.batch();
        self.write_snapshot(&mut write)?;
        store.commit(write)?;
        Ok(())
    }

    /// Bring the store and the outputs in line with the partitions this
    /// instance owns. On start (`starting`), first restore the latest
    /// snapshot and apply the log after it; a stop asked for meanwhile
    /// ends it there, with nothing more written.
    pub(super) fn reconcile(
        &mut self,
        member: &BaseConsumer<MemberContext>,
        sink: &mut Sink,
        starting: bool,
    ) -> Result<Restore, ServiceError> {
        // Records are written below, after every batch handed over.
        self.writer.flush()?;
        self.commit_written(member);
        let added = self.partitions.take_assigned();
        let publish_from = self.committed_offsets(member, &added)?;
        let Handover {
            owned,
            taken,
            dropped,
        } = self.partitions.take_over(publish_from);
        let store = self.store.clone();
        let mut outgoing = Vec::new();
        if starting {
            // The restore stores the owned partitions' records as it goes:
            // mark the taken ones stored first, so that a kill during it
            // leaves their records to be deleted (if the next start does
            // not own them) or written again (it stores every owned
            // partition's records from the log).
            if !taken.is_empty() {
                let mut mark = store.batch();
                mark.set_stored_partitions(
                    &self.partitions.stored().union(&owned).copied().collect(),
                );
                store.commit(mark)?;
            }
            if self.restore(&taken, &owned, &mut outgoing, member)? == Restore::Interrupted {
                return Ok(Restore::Interrupted);
            }
        }
        let mut write = store.batch();
        // On start, what the snapshot held for each owned partition too: an
        // earlier start may have been killed after it marked a partition
        // stored and before it stored what it held for it.
        for &partition in if starting { &owned } else { &taken } {
            let from = self
                .partitions
                .publish_from(partition)
                .expect("an owned partition");
            let mut held = Held::default();
            self.outbox.take(partition, from, &mut held);
            for d in &held.decisions {
                write.put_decision_json(d.job_id, d.version, &d.json);
            }
            for ended in &held.ended {
                for (index, task) in &ended.tasks {
                    write.put_task(ended.record.job_id, *index, task);
                }
                self.applier.retention.put_ended(&ended.record, &mut write);
            }
            outgoing.extend(held.messages);
        }
        // On start, every owned partition's live records are written from
        // memory: an earlier start may have been killed halfway through.
        self.write_partitions(if starting { &owned } else { &taken }, &mut write);
        self.delete_partitions(&dropped, &mut write);
        write.set_stored_partitions(&owned);
        sink.publish(&outgoing, false, &mut write, &mut || {
            let _ = member.poll(Duration::ZERO);
        })?;
        store.commit(write)?;
        if !taken.is_empty() || !dropped.is_empty() {
            info!(
                taken_over = ?taken,
                given_up = ?dropped,
                published = outgoing.len(),
                "partitions changed hands; nothing replayed"
            );
        }
        self.partitions.set_stored(owned.clone());
        let stored_offsets = self.store.offsets(&self.topics.events)?;
        member.context().note_durable(
            self.partitions
                .owned()
                .map(|(p, from)| (p, from.max(stored_offsets.get(&p).copied().unwrap_or(0)))),
        );
        // Where the taken partitions' outputs now end, for their next owner.
        self.recommit_unconfirmed(member);
        self.show_owned();
        info!(owned = ?owned, "this instance owns these partitions");
        Ok(Restore::Done)
    }

    /// Restore the chain of snapshots from the latest whole one on, then
    /// apply the log after it. Outputs
    /// of `taken` partitions from their publish offset on go to
    /// `outgoing`, those of partitions others own to the outbox, and the
    /// records the log changes in `owned` partitions are stored (again,
    /// for those stored already: the same records), with every task of
    /// each job it ends.
    fn restore(
        &mut self,
        taken: &BTreeSet<i32>,
        owned: &BTreeSet<i32>,
        outgoing: &mut Vec<Outgoing>,
        member: &BaseConsumer<MemberContext>,
    ) -> Result<Restore, ServiceError> {
        let started = Instant::now();
        info!("restoring the predictor state");
        let store = self.store.clone();
        let chain = store.snapshot_chain()?;
        let read_at = Instant::now();
        self.snapshots = SnapshotChain::default();
        let from_seq = match chain.last() {
            Some(&(seq, _)) => {
                self.load_snapshots(&chain)?;
                seq
            }
            None => {
                self.applier.start_engine(
                    Engine::new(&self.config.engine).map_err(|e| e.within("engine"))?,
                );
                0
            }
        };
        self.snapshots.seq = from_seq;
        let _ = member.poll(Duration::ZERO);
        let restored_at = Instant::now();
        let mut effects = Effects::default();
        let mut write = store.batch();
        let mut count = 0u64;
        for logged in store.log_from(from_seq) {
            let logged = logged?;
            let (partition, offset) = (logged.partition, logged.offset);
            let consumed = Consumed::new(logged.key, logged.payload);
            let messages = self
                .applier
                .apply_and_encode(partition, offset, &consumed, &mut effects, None)
                .messages;
            self.applied.insert(partition, offset + 1);
            match self.partitions.publish_from(partition) {
                Some(from) if taken.contains(&partition) && offset >= from => {
                    outgoing.extend(messages);
                }
                Some(_) => {}
                None => {
                    let held = Held {
                        messages,
                        decisions: decisions(&effects.outputs),
                        ended: Vec::new(),
                    };
                    self.outbox.push(partition, offset, held);
                }
            }
            effects.settle();
            // Its tasks may have run before the snapshot, when the store
            // did not hold their partition.
            self.applier
                .stage_records(&effects, owned, EndedTasks::All, &mut write);
            self.snapshots.note(&effects);
            self.hold_ended(&effects);
            self.applier.release_ended(&effects);
            effects.clear();
            count += 1;
            if count.is_multiple_of(REPLAY_POLL_EVERY) {
                let _ = member.poll(Duration::ZERO);
                if self.shared.shutdown.load(Ordering::Relaxed) {
                    // What was committed so far are records the log
                    // rewrites on the next start, as after a kill here.
                    info!(
                        events = count,
                        seconds = started.elapsed().as_secs_f64(),
                        "stop asked for during the restore: stopping without a snapshot; \
                         the next start restores again"
                    );
                    return Ok(Restore::Interrupted);
                }
            }
            if write.len() >= REPLAY_COMMIT_EVERY {
                store.commit(std::mem::replace(&mut write, store.batch()))?;
            }
        }
        store.commit(write)?;
        let mut expired = store.batch();
        self.delete_expired(&mut expired)?;
        store.commit(expired)?;
        let seconds = started.elapsed().as_secs_f64();
        self.summary.recovered_events = count;
        self.shared
            .counters
            .recovered_events
            .store(count, Ordering::Relaxed);
        metrics::counter!(telemetry::RECOVERED_EVENTS).increment(count);
        metrics::gauge!(telemetry::RESTORE_SECONDS).set(seconds);
        info!(
            snapshot_at = from_seq,
            snapshot_read_seconds = (read_at - started).as_secs_f64(),
            snapshot_seconds = (restored_at - started).as_secs_f64(),
            events = count,
            seconds,
            "predictor state restored"
        );
        Ok(Restore::Done)
    }

    /// Keep the final records of the jobs of others' partitions that
    /// `effects` ended (before they leave the engine's memory), in case
    /// their owner had not stored them when this instance takes over.
    pub(super) fn hold_ended(&mut self, effects: &Effects) {
        for &job_id in effects.jobs.iter() {
            let Some(partition) = self.applier.record_owners.job(job_id) else {
                continue;
            };
            if self.partitions.owns(partition) {
                continue;
            }
            let Some(record) = self.applier.engine.job(job_id) else {
                continue;
            };
            if record.state == JobState::Running {
                continue;
            }
            let tasks = self
                .applier
                .tasks_of(job_id, record.width)
                .map(|(index, task)| (index, task.to_bytes()))
                .collect();
            let ended = EndedJob {
                record: record.clone(),
                tasks,
            };
            // Held at the last offset of the partition applied: an owner
            // that committed past it has stored the records itself.
            let offset = self.applied.get(&partition).map_or(0, |next| next - 1);
            let held = Held {
                ended: vec![ended],
                ..Held::default()
            };
            self.outbox.push(partition, offset, held);
        }
    }

    /// Take over the state the stored snapshots hold: the latest whole one
    /// and the changes after it.
    fn load_snapshots(&mut self, chain: &[(u64, Vec<u8>)]) -> Result<(), ServiceError> {
        let mut snapshots = Vec::with_capacity(chain.len());
        for (_, bytes) in chain {
            let (snapshot, engine) = postcard::take_from_bytes::<PipelineSnapshot>(bytes)
                .map_err(|e| RestoreError::from(SnapshotError::from(e)))?;
            snapshots.push((snapshot, engine));
        }
        let engines: Vec<&[u8]> = snapshots.iter().map(|(_, engine)| *engine).collect();
        let engine = Engine::restore_chain(&self.config.engine, &engines)?;
        let (whole, changes) = chain.split_first().expect("restored from a snapshot");
        self.snapshots.whole_bytes = whole.1.len() as u64;
        self.snapshots.changes_bytes = changes.iter().map(|(_, b)| b.len() as u64).sum();
        let (snapshot, _) = snapshots.pop().expect("restored from a snapshot");
        self.applier.restore(
            engine,
            RecordOwners::restored(snapshot.job_partitions, snapshot.machine_partitions),
            snapshot.expired_before,
        );
        self.outbox = Outbox::restored(self.config.consumer.takeover_buffer_bytes, snapshot.outbox)
            .map_err(RestoreError::from)?;
        self.applied = snapshot.applied;
        Ok(())
    }

    /// Store the records of `partitions` the engine holds: their live jobs
    /// and tasks, and their machines.
    fn write_partitions(&self, partitions: &BTreeSet<i32>, write: &mut StateBatch<'_>) {
        if partitions.is_empty() {
            return;
        }
        for job_id in self.applier.record_owners.jobs_of(partitions) {
            if let Some(record) = self.applier.engine.job(job_id) {
                write.put_job(job_id, &record.to_bytes());
                for (index, task) in self.applier.tasks_of(job_id, record.width) {
                    write.put_task(job_id, index, &task.to_bytes());
                }
            }
        }
        for machine_id in self.applier.record_owners.machines_of(partitions) {
            if let Some(record) = self.applier.engine.machine(machine_id) {
                write.put_machine(machine_id, record);
            }
        }
    }

    /// Delete the records of `partitions`' live jobs, their tasks and
    /// machines: their new owner keeps them current now. What is final
    /// stays: ended jobs' records, and the decisions made while this
    /// instance owned the partition.
    fn delete_partitions(&mut self, partitions: &BTreeSet<i32>, write: &mut StateBatch<'_>) {
        if partitions.is_empty() {
            return;
        }
        for job_id in self.applier.record_owners.jobs_of(partitions) {
            write.delete_job_record(job_id);
            if let Some(record) = self.applier.engine.job(job_id) {
                for index in 0..record.width {
                    write.delete_task(job_id, index);
                }
                // Its decisions stay, until it has ended (`retention.rs`).
                self.applier.retention.await_end(job_id, write);
            }
        }
        for machine_id in self.applier.record_owners.machines_of(partitions) {
            write.delete_machine(machine_id);
        }
    }
}

/// The decisions among `outputs`, for the store of whoever publishes them.
pub(super) fn decisions(outputs: &[Output]) -> Vec<HeldDecision> {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Decision(d) => Some(HeldDecision {
                job_id: d.job_id,
                version: d.version,
                json: serde_json::to_vec(d).expect("decisions serialise"),
            }),
            _ => None,
        })
        .collect()
}
