//! The pipeline thread's state, [`Pipeline`], and its loop: take a batch
//! from the source, apply it, publish its outputs, commit it. Each step is
//! a call on the component that owns it (the [`Applier`], the [`Sink`], the
//! [`Group`], the [`Snapshots`], the [`Outbox`], `accounting`), so one
//! batch's whole path reads here, as do the two other things the thread
//! does: the restore on start, and partitions changing hands.
//!
//! When partitions change hands, nothing is replayed: the engine is
//! current (every instance applies every partition). A partition taken
//! over gets its live records written from memory and the outputs its
//! previous owner had not published (from the offset it committed to the
//! group) from the outbox; a partition given up has its live records
//! deleted (its ended jobs' final records stay).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Range;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobcast_ingest::kafka::Topics;
use jobcast_predictor::engine::Effects;
use jobcast_storage::state::{JOBCAST_VERSION, StateBatch, StateStore};
use jobcast_storage::writer::Writer;
use rdkafka::consumer::BaseConsumer;
use tracing::{debug, info, warn};

use super::RunSummary;
use super::accounting::{self, BatchTally, StageTimes};
use super::apply::{Applier, EndedTasks};
use super::group::{self, Group, RECOMMIT_EVERY};
use super::outbox::{Held, HeldDecision, Outbox};
use super::partitions::Handover;
use super::sink::{Outgoing, Sink};
use super::snapshots::{Restored, Snapshots};
use crate::config::ServeConfig;
use crate::error::ServiceError;
use crate::shared::Shared;
use crate::source::{Batch, Consumed, FETCH_QUEUE_BACKOFF_MS, InputContext, Polled, Source};
use crate::telemetry;

/// The longest the pipeline waits for a batch before it looks at the
/// group's membership again.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// How long it waits instead while a batch is being written.
const WRITE_WAIT: Duration = Duration::from_millis(1);

/// How often the group's commits are read: the outputs held for other
/// owners are trimmed to what they have not yet published, and the HTTP
/// API learns who owns each partition now.
const READ_GROUP_EVERY: Duration = Duration::from_secs(2);

/// How often they are read while the takeover buffer is full.
const READ_GROUP_WHILE_FULL: Duration = Duration::from_millis(250);

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
enum Restore {
    Done,
    /// A stop was asked for before the log was applied to its end: the
    /// engine holds a prefix of the state, which must be neither
    /// snapshotted nor served; the next start restores again.
    Interrupted,
}

/// The pipeline thread's state.
pub(super) struct Pipeline<'a> {
    config: &'a ServeConfig,
    topics: &'a Topics,
    /// The engine's configuration as it shapes the state
    /// ([`EngineConfig::stamp`](jobcast_predictor::engine::EngineConfig::stamp)):
    /// stamped on a new store and checked against an existing one.
    engine_config: Vec<u8>,
    shared: Arc<Shared>,
    store: Arc<StateStore>,
    /// Commits each batch's [`StateBatch`] while the next one is applied.
    writer: Writer,
    /// The engine and the records it keeps, and the steps that apply a
    /// message and stage what a batch changed.
    applier: Applier<'a>,
    /// The log sequence number of the next message applied.
    next_seq: u64,
    /// The snapshots stored so far, and what changed since the latest.
    snapshots: Snapshots,
    /// The next offset of each input partition after what was applied.
    applied: BTreeMap<i32, i64>,
    /// Outputs of partitions others own, for a takeover.
    outbox: Outbox,
    /// The consumer group: which partitions are this instance's, and the
    /// offsets on their way to it.
    group: Group,
    summary: RunSummary,
}

impl<'a> Pipeline<'a> {
    /// Open the pipeline on `shared`'s store: refuse a store built by
    /// another engine configuration or an older layout, read what it holds,
    /// then join the consumer group.
    pub(super) fn new(config: &'a ServeConfig, shared: Arc<Shared>) -> Result<Self, ServiceError> {
        let store = shared.store.clone();
        let engine_config = config.engine.stamp();
        let next_seq = store.next_log_seq()?;
        let stored = store.check_format(&engine_config)?;
        let mut applier = Applier::new(config)?;
        applier.set_awaiting_end(store.awaiting_end()?);
        applier.set_skips(store.skips()?, &config.topics.events);
        if let Some(before) = store.stamp_version()?
            && before != JOBCAST_VERSION
        {
            info!(
                before = %before,
                now = JOBCAST_VERSION,
                "the store was last written by another jobcast release"
            );
        }
        Ok(Pipeline {
            config,
            topics: &config.topics,
            engine_config,
            writer: Writer::start(store.clone()).map_err(ServiceError::Thread)?,
            store,
            applier,
            next_seq,
            snapshots: Snapshots::default(),
            applied: BTreeMap::new(),
            outbox: Outbox::new(config.consumer.takeover_buffer_bytes),
            group: Group::join(config, shared.clone(), stored)?,
            shared,
            summary: RunSummary::default(),
        })
    }

    /// Restore the state, consume until stopped, then hand the partitions
    /// over and leave the group; the run's totals.
    pub(super) fn run(mut self) -> Result<RunSummary, ServiceError> {
        let mut sink = Sink::new(&self.config.kafka, self.shared.clone())?;
        sink.warm_up(self.topics);
        self.shared
            .liveness
            .set_timeout(self.config.http.stall_timeout());
        // Restored: the engine holds the whole state (false without
        // partitions, or after a stop during the restore).
        let restored =
            self.group.await_assignment() && self.reconcile(&mut sink, true)? == Restore::Done;
        if restored {
            self.shared.liveness.beat();
            self.shared.recovered.store(true, Ordering::Relaxed);
            self.consume(&mut sink)?;
        }
        self.writer.flush()?;
        // The last batches' offsets go to the group now; leaving it commits,
        // for each partition given up, any the coordinator has not confirmed.
        self.group.commit_written();
        sink.flush(Duration::from_secs(10))?;
        self.group.leave();
        // After the hand-over, so that no takeover waits for it: the next
        // start (of a restored engine) then applies nothing from the log.
        if restored && self.config.storage.snapshot_on_stop && self.next_seq != self.snapshots.seq()
        {
            let store = self.store.clone();
            let mut write = store.batch();
            self.write_snapshot(&mut write)?;
            store.commit(write)?;
        }
        // With its partitions handed over: the next start then opens the
        // store without replaying RocksDB's write-ahead log.
        let flushing = Instant::now();
        self.store.flush_memtables()?;
        info!(seconds = flushing.elapsed().as_secs_f64(), "store flushed");
        info!(summary = ?self.summary, "stopped");
        Ok(self.summary)
    }

    /// Consume until stopped. Every instance reads every partition (the
    /// predictor learns from all of them); the group decides whose outputs
    /// and records this instance keeps.
    fn consume(&mut self, sink: &mut Sink) -> Result<(), ServiceError> {
        // Its group is never joined nor committed to: librdkafka wants one
        // for incremental assignment, which adds partitions the topic gains.
        // The event-time merge needs to know when a partition is read to
        // its end; statistics carry the consumer lag.
        let consumer: BaseConsumer<InputContext> = group::consumer_config(
            &self.config.kafka,
            &format!("{}.input", self.config.consumer.group),
            &[
                ("enable.partition.eof", "true"),
                // A stored offset the broker no longer holds is an
                // error, not a silent jump (`source::Reader::refuse_gaps`).
                ("auto.offset.reset", "error"),
                ("statistics.interval.ms", "5000"),
                ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS),
            ],
        )
        .create_with_context(InputContext {
            topic: self.topics.events.clone(),
            shared: self.shared.clone(),
        })
        .map_err(|e| self.config.kafka.redact(e))?;
        let refuse_gaps = self
            .config
            .kafka
            .client
            .get("auto.offset.reset")
            .is_none_or(|reset| reset == "error");
        let source = Source::start(
            consumer,
            &self.config.consumer,
            self.store.clone(),
            refuse_gaps,
        )?;
        // Read at once: the API should know the owners before it is asked.
        let mut group_read_at = Instant::now()
            .checked_sub(READ_GROUP_EVERY)
            .unwrap_or_else(Instant::now);
        let mut committed_at = Instant::now();
        // Since when the takeover buffer has been full, if it is.
        let mut full_since: Option<Instant> = None;
        loop {
            self.shared.liveness.beat();
            self.group.poll();
            // Revocations first: their partitions must not be committed.
            if self.group.membership_changes() {
                self.reconcile(sink, false)?;
            }
            self.group.commit_written();
            if committed_at.elapsed() >= RECOMMIT_EVERY {
                self.group.recommit_unconfirmed();
                committed_at = Instant::now();
            }
            if group_read_at.elapsed() >= READ_GROUP_EVERY {
                self.group.read(&mut self.outbox);
                group_read_at = Instant::now();
            }
            // Past the takeover buffer's budget: no input until the owners'
            // commits trim it (`outbox.rs`); nothing is dropped.
            if self.outbox.full() {
                if full_since.is_none() {
                    warn!(
                        bytes = self.outbox.bytes(),
                        partitions = ?self.outbox.partitions().collect::<Vec<_>>(),
                        "the takeover buffer is full (consumer.takeover_buffer_bytes): \
                         reading no input until these partitions' owners publish what it holds"
                    );
                    full_since = Some(Instant::now());
                    metrics::gauge!(telemetry::TAKEOVER_BUFFER_FULL).set(1.0);
                    metrics::counter!(telemetry::TAKEOVER_BUFFER_WAITS).increment(1);
                }
                if self.shared.shutdown.load(Ordering::Relaxed) {
                    return Ok(());
                }
                if group_read_at.elapsed() >= READ_GROUP_WHILE_FULL {
                    self.group.read(&mut self.outbox);
                    group_read_at = Instant::now();
                }
                std::thread::sleep(POLL_WAIT);
                continue;
            }
            if let Some(since) = full_since.take() {
                metrics::gauge!(telemetry::TAKEOVER_BUFFER_FULL).set(0.0);
                info!(
                    seconds = since.elapsed().as_secs_f64(),
                    "the takeover buffer has room again: reading on"
                );
            }
            // A batch on its way to RocksDB is committed to the group as
            // soon as it is written: who waits on the group's offset (the
            // closed loop, a partition's next owner) should not wait longer.
            let wait = if self.group.commit_pending() {
                WRITE_WAIT
            } else {
                POLL_WAIT
            };
            match source.next(wait)? {
                Polled::Batch(batch) => {
                    let stopping = self.shared.shutdown.load(Ordering::Relaxed);
                    self.process(sink, batch, stopping)?;
                }
                Polled::Idle => {}
                Polled::Ended => return Ok(()),
            }
        }
    }

    /// Apply, publish and commit one batch.
    fn process(
        &mut self,
        sink: &mut Sink,
        batch: Batch,
        stopping: bool,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        let mut tally = BatchTally::new(batch.len());
        let mut effects = Effects::default();
        let mut outgoing: Vec<Outgoing> = Vec::new();
        // Outputs of the messages this instance owns, for its metrics.
        let mut ours: Vec<Range<usize>> = Vec::new();
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let store = self.store.clone();
        let mut write = store.batch();
        if self.next_seq == 0 {
            write.stamp_format(&self.engine_config);
        }

        // 2–3. Apply and encode every message; the owned partitions' outputs and dead
        // letters become messages to publish. Every message is logged.
        for (partition, offset, consumed) in batch {
            tally.waited(started.saturating_duration_since(consumed.polled_at));
            offsets.insert(partition, offset + 1);
            let from = self.group.partitions().publish_from(partition);
            let owned = from.is_some_and(|from| offset >= from);
            // Another instance's partition: keep its outputs (and the
            // decisions among them, for the store) for a takeover.
            let mut held = Vec::new();
            let mut held_decisions = Vec::new();
            let outcome = self.applier.apply_and_encode(
                partition,
                offset,
                &consumed,
                &mut effects,
                owned.then_some(consumed.polled_at),
            );
            match &outcome.result {
                Err(dead) => debug!(
                    partition,
                    offset,
                    reason = dead.reason(),
                    "dead letter: {dead}"
                ),
                Ok(()) => tally.applied += 1,
            }
            if owned {
                if let (Ok(()), Ok(event)) = (&outcome.result, &consumed.event) {
                    tally.consumed(event.type_name());
                }
                for reason in outcome.dead {
                    metrics::counter!(telemetry::EVENTS_DEAD_LETTERED, "reason" => reason)
                        .increment(1);
                    tally.dead += 1;
                }
                outgoing.extend(outcome.messages);
                ours.push(outcome.outputs);
            } else if from.is_none() {
                held_decisions = HeldDecision::all_of(&effects.outputs[outcome.outputs]);
                held = outcome.messages;
            }
            let held = Held {
                messages: held,
                decisions: held_decisions,
                ended: Vec::new(),
            };
            self.outbox.push(partition, offset, held);
            write.append_log(
                self.next_seq,
                partition,
                offset,
                consumed.key.as_deref(),
                consumed.payload.as_deref(),
            );
            self.next_seq += 1;
        }
        let applied_at = Instant::now();

        // 4. Publish, and wait until the broker has every output.
        // A long wait for the broker keeps the group member polled.
        sink.publish(&outgoing, stopping, &mut write, &mut || self.group.poll())?;
        let published_at = Instant::now();

        // 5. Commit: the changed records, what the predictor learnt, and
        // the offsets consumed, in one write, on the writer thread.
        effects.settle();
        accounting::count_expired(&self.shared, &effects);
        self.expire(&mut write)?;
        self.applier.stage_records(
            &effects,
            self.group.partitions().stored(),
            EndedTasks::Changed,
            &mut write,
        );
        self.applier.write_learnt(&effects, &mut write);
        self.snapshots.note(&effects);
        for (&partition, &next) in &offsets {
            write.set_offset(&self.topics.events, partition, next);
        }
        self.applied.extend(&offsets);
        self.hold_ended(&effects);
        self.applier.release_ended(&effects);
        if self
            .snapshots
            .due(self.next_seq, self.config.storage.snapshot_every_events)
        {
            self.write_snapshot(&mut write)?;
        }
        let on_written = tally.on_written(self.shared.clone(), offsets.clone());
        let durable = self.group.submitted(offsets);
        self.writer.submit(
            write,
            Box::new(move |took| {
                on_written(took);
                durable();
            }),
        )?;
        let committed_at = Instant::now();
        self.group.commit_written();

        // Then count what the batch did.
        self.summary.committed += tally.messages as u64;
        self.summary.applied += tally.applied;
        self.summary.dead_lettered += tally.dead;
        let stages = StageTimes {
            apply: applied_at - started,
            publish: published_at - applied_at,
            commit: committed_at - published_at,
        };
        let outputs = ours.into_iter().flat_map(|range| &effects.outputs[range]);
        self.summary.decisions += tally.finish(
            &self.shared,
            outputs,
            stages,
            self.applier.engine().live_jobs(),
        );
        metrics::counter!(telemetry::DECISIONS_OVERTAKEN).increment(effects.overtaken);
        metrics::counter!(telemetry::STARTS_REFRESHED).increment(effects.starts_refreshed);
        metrics::counter!(telemetry::STARTS_OVERFULL).increment(effects.starts_overfull);
        metrics::gauge!(telemetry::DECISIONS_WAITING)
            .set(self.applier.engine().waiting_decisions() as f64);
        let held = self.applier.engine().held_events();
        metrics::gauge!(telemetry::EVENTS_HELD_NOW).set(held as f64);
        self.shared
            .counters
            .held_events
            .store(held as u64, Ordering::Relaxed);
        metrics::gauge!(telemetry::EVENT_CLOCK).set(self.applier.engine().now_us() as f64 / 1e6);
        Ok(())
    }

    /// Bring the store and the outputs in line with the partitions this
    /// instance owns. On start (`starting`), first restore the latest
    /// snapshot and apply the log after it; a stop asked for meanwhile
    /// ends it there, with nothing more written.
    fn reconcile(&mut self, sink: &mut Sink, starting: bool) -> Result<Restore, ServiceError> {
        // Records are written below, after every batch handed over.
        self.writer.flush()?;
        self.group.commit_written();
        let Handover {
            owned,
            taken,
            dropped,
        } = self.group.take_over()?;
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
                    &self
                        .group
                        .partitions()
                        .stored()
                        .union(&owned)
                        .copied()
                        .collect(),
                );
                store.commit(mark)?;
            }
            if self.restore(&owned, &mut outgoing)? == Restore::Interrupted {
                return Ok(Restore::Interrupted);
            }
        }
        let mut write = store.batch();
        // On start, what the snapshot held for each owned partition too: an
        // earlier start may have been killed after it marked a partition
        // stored and before it stored what it held for it.
        for &partition in if starting { &owned } else { &taken } {
            let from = self
                .group
                .partitions()
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
                self.applier.put_ended(&ended.record, &mut write);
            }
            outgoing.extend(held.messages);
        }
        // On start, every owned partition's live records are written from
        // memory: an earlier start may have been killed halfway through.
        self.applier
            .store_partitions(if starting { &owned } else { &taken }, &mut write);
        self.applier.drop_partitions(&dropped, &mut write);
        write.set_stored_partitions(&owned);
        sink.publish(&outgoing, false, &mut write, &mut || self.group.poll())?;
        store.commit(write)?;
        if !taken.is_empty() || !dropped.is_empty() {
            info!(
                taken_over = ?taken,
                given_up = ?dropped,
                published = outgoing.len(),
                "partitions changed hands; nothing replayed"
            );
        }
        let stored_offsets = self.store.offsets(&self.topics.events)?;
        // Where the taken partitions' outputs now end, for their next owner.
        self.group.stored(owned.clone(), &stored_offsets);
        info!(owned = ?owned, "this instance owns these partitions");
        Ok(Restore::Done)
    }

    /// Restore the chain of snapshots from the latest whole one on, then
    /// apply the log after it. Outputs of `owned` partitions from their
    /// publish offset on go to `outgoing`, those of partitions others own
    /// to the outbox, and the records the log changes in `owned`
    /// partitions are stored (again, for those stored already: the same
    /// records), with every task of each job it ends.
    fn restore(
        &mut self,
        owned: &BTreeSet<i32>,
        outgoing: &mut Vec<Outgoing>,
    ) -> Result<Restore, ServiceError> {
        let started = Instant::now();
        info!("restoring the predictor state");
        let store = self.store.clone();
        let chain = store.snapshot_chain()?;
        let read_at = Instant::now();
        let Restored { applied, outbox } = self.snapshots.restore(
            &chain,
            &self.config.engine,
            self.config.consumer.takeover_buffer_bytes,
            &mut self.applier,
        )?;
        (self.applied, self.outbox) = (applied, outbox);
        let from_seq = self.snapshots.seq();
        self.group.poll();
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
            // Every owned partition's, not only the ones this start took:
            // an earlier start may have taken a partition, marked it
            // stored and been killed in its restore before publishing
            // anything, and the group's offset `from` is where its
            // previous owner's outputs end. Outputs published before a
            // kill go out again (at least once).
            match self.group.partitions().publish_from(partition) {
                Some(from) if offset >= from => {
                    outgoing.extend(messages);
                }
                Some(_) => {}
                None => {
                    let held = Held {
                        messages,
                        decisions: HeldDecision::all_of(&effects.outputs),
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
                self.group.poll();
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
    fn hold_ended(&mut self, effects: &Effects) {
        for (partition, ended) in self
            .applier
            .ended_elsewhere(effects, self.group.partitions())
        {
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

    /// Add to `write` a snapshot of the state after every message logged
    /// so far (`snapshots.rs`).
    fn write_snapshot(&mut self, write: &mut StateBatch<'_>) -> Result<(), ServiceError> {
        self.snapshots.write(
            self.next_seq,
            &self.applier,
            &self.applied,
            &self.outbox,
            write,
        )
    }

    /// When retention's bound has moved a step, delete the records of
    /// every job that ended before it.
    fn expire(&mut self, write: &mut StateBatch<'_>) -> Result<(), ServiceError> {
        if !self.applier.expiry_due() {
            return Ok(());
        }
        let count = self.delete_expired(write)?;
        metrics::counter!(telemetry::JOBS_EXPIRED).increment(count);
        self.shared
            .counters
            .expired_jobs
            .fetch_add(count, Ordering::Relaxed);
        debug!(jobs = count, "ended jobs expired");
        Ok(())
    }

    /// Delete the records of every job that ended before the bound, and
    /// make it the bound. Also what a restore ends with: the log it applied
    /// stored ended jobs the run that logged it had already deleted.
    fn delete_expired(&mut self, write: &mut StateBatch<'_>) -> Result<u64, ServiceError> {
        // The scan must see every record committed so far.
        self.writer.flush()?;
        self.applier.delete_expired(&self.store, write)
    }
}
