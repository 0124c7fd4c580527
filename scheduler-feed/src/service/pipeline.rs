//! The pipeline loop: take a batch from the source, apply it, publish its
//! outputs, commit it. Each step is a call into the module that owns it
//! (`apply`, `encode`, `sink`, `group`, `accounting`), so one batch's
//! whole path reads here.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobcast_predictor::engine::Effects;
use jobcast_storage::state::StateBatch;
use rdkafka::consumer::BaseConsumer;
use tracing::{debug, info, warn};

use super::accounting::{self, BatchTally, StageTimes};
use super::apply::EndedTasks;
use super::group::{MemberContext, RECOMMIT_EVERY};
use super::outbox::Held;
use super::sink::{Outgoing, Sink};
use super::{Pipeline, recovery};
use crate::error::ServiceError;
use crate::source::{Batch, FETCH_QUEUE_BACKOFF_MS, InputContext, Polled, Source};
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

impl Pipeline<'_> {
    /// Consume until stopped. Every instance reads every partition (the
    /// predictor learns from all of them); the group decides whose outputs
    /// and records this instance keeps.
    pub(super) fn consume(
        &mut self,
        member: &BaseConsumer<MemberContext>,
        sink: &mut Sink,
    ) -> Result<(), ServiceError> {
        // Its group is never joined nor committed to: librdkafka wants one
        // for incremental assignment, which adds partitions the topic gains.
        // The event-time merge needs to know when a partition is read to
        // its end; statistics carry the consumer lag.
        let consumer: BaseConsumer<InputContext> = self
            .consumer_config(
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
            let _ = member.poll(Duration::ZERO);
            // Revocations first: their partitions must not be committed.
            if self.membership_changes(member) {
                self.reconcile(member, sink, false)?;
            }
            self.commit_written(member);
            if committed_at.elapsed() >= RECOMMIT_EVERY {
                self.recommit_unconfirmed(member);
                committed_at = Instant::now();
            }
            if group_read_at.elapsed() >= READ_GROUP_EVERY {
                self.read_group(member);
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
                    self.read_group(member);
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
            let wait = if self.group_commits.pending() {
                WRITE_WAIT
            } else {
                POLL_WAIT
            };
            match source.next(wait)? {
                Polled::Batch(batch) => {
                    let stopping = self.shared.shutdown.load(Ordering::Relaxed);
                    self.process(sink, member, batch, stopping)?;
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
        member: &BaseConsumer<MemberContext>,
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
            tally.queued += started.saturating_duration_since(consumed.polled_at);
            offsets.insert(partition, offset + 1);
            let from = self.partitions.publish_from(partition);
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
                held_decisions = recovery::decisions(&effects.outputs[outcome.outputs]);
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
        sink.publish(&outgoing, stopping, &mut write, &mut || {
            let _ = member.poll(Duration::ZERO);
        })?;
        let published_at = Instant::now();

        // 5. Commit: the changed records, what the predictor learnt, and
        // the offsets consumed, in one write, on the writer thread.
        effects.settle();
        accounting::count_expired(&self.shared, &effects);
        self.expire(&mut write)?;
        self.applier.stage_records(
            &effects,
            self.partitions.stored(),
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
        if self.snapshot_due() {
            self.write_snapshot(&mut write)?;
        }
        let on_written = tally.on_written(self.shared.clone(), offsets.clone());
        let durable = self.group_commits.submitted(offsets);
        self.writer.submit(
            write,
            Box::new(move |took| {
                on_written(took);
                durable();
            }),
        )?;
        let committed_at = Instant::now();
        self.commit_written(member);

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
            self.applier.engine.live_jobs(),
        );
        metrics::counter!(telemetry::DECISIONS_OVERTAKEN).increment(effects.overtaken);
        metrics::gauge!(telemetry::DECISIONS_WAITING)
            .set(self.applier.engine.waiting_decisions() as f64);
        let held = self.applier.engine.held_events();
        metrics::gauge!(telemetry::EVENTS_HELD_NOW).set(held as f64);
        self.shared
            .counters
            .held_events
            .store(held as u64, Ordering::Relaxed);
        metrics::gauge!(telemetry::EVENT_CLOCK).set(self.applier.engine.now_us() as f64 / 1e6);
        Ok(())
    }
}

/// Retention's steps, which take the writer and the store as well as the
/// bound the [`Applier`](super::Applier) keeps (`retention.rs`).
impl Pipeline<'_> {
    /// When the bound has moved a step, delete the records of every job
    /// that ended before it.
    pub(super) fn expire(&mut self, write: &mut StateBatch<'_>) -> Result<(), ServiceError> {
        if !self.applier.retention.due(self.applier.engine.now_us()) {
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
    pub(super) fn delete_expired(
        &mut self,
        write: &mut StateBatch<'_>,
    ) -> Result<u64, ServiceError> {
        // The scan must see every record committed so far.
        self.writer.flush()?;
        self.applier
            .retention
            .delete_expired(&self.store, self.applier.engine.now_us(), write)
    }
}
