//! Recovery: bring the engine and the store in line with the partitions
//! this instance owns. On start, the engine is rebuilt by applying the
//! stored log again; when partitions change hands, the new owner does the
//! same, storing the records of the partitions it takes over and
//! publishing the outputs their previous owner had not (from the offset it
//! committed to the group), and deletes the records of those it gave up.

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::Instant;

use jobcast_predictor::engine::{Effects, Engine};
use rdkafka::consumer::{BaseConsumer, Consumer};
use tracing::info;

use super::group::MemberContext;
use super::sink::{Outgoing, Sink};
use super::{Pipeline, encode};
use crate::error::ServiceError;
use crate::source::Consumed;
use crate::telemetry;

/// Writes per intermediate commit while a replay stores a partition's
/// records (the final commit, with the stored partitions, makes them
/// count).
const REPLAY_COMMIT_EVERY: usize = 50_000;

impl Pipeline<'_> {
    /// Refuse a store built by another engine configuration or an older
    /// layout, and read which partitions it holds.
    pub(super) fn check_store(&mut self) -> Result<(), ServiceError> {
        self.next_seq = self.store.next_log_seq()?;
        self.stored = self.store.check_format(&self.engine_config)?;
        Ok(())
    }

    /// Bring the engine and the store in line with the partitions this
    /// instance owns. The log is applied again (always on start, when
    /// `rebuild`; otherwise only if partitions changed hands): for each
    /// partition taken over, its records are stored and the outputs its
    /// previous owner had not published (from the group's committed offset
    /// on) are published; the records of each partition given up are
    /// deleted.
    pub(super) fn reconcile(
        &mut self,
        member: &BaseConsumer<MemberContext>,
        sink: &Sink,
        rebuild: bool,
    ) -> Result<(), ServiceError> {
        // Replaying reads the store, which must hold every batch first.
        self.writer.flush()?;
        let added = std::mem::take(&mut self.added);
        let publish_from = self.committed_offsets(member, &added)?;
        self.owned.extend(publish_from);
        let owned: BTreeSet<i32> = self.owned.keys().copied().collect();
        let taken: BTreeSet<i32> = owned.difference(&self.stored).copied().collect();
        let dropped: BTreeSet<i32> = self.stored.difference(&owned).copied().collect();
        if rebuild || !taken.is_empty() || !dropped.is_empty() {
            self.replay(sink, &taken, &dropped)?;
        }
        let mut published = member.context().published.lock().expect("not poisoned");
        let stored_offsets = self.store.offsets(&self.topics.events)?;
        *published = self
            .owned
            .iter()
            .map(|(&p, &from)| (p, from.max(stored_offsets.get(&p).copied().unwrap_or(0))))
            .collect();
        self.show_owned();
        info!(owned = ?owned, "this instance owns these partitions");
        Ok(())
    }

    /// Rebuild the engine by applying the log again (see
    /// [`Pipeline::reconcile`]).
    pub(super) fn replay(
        &mut self,
        sink: &Sink,
        taken: &BTreeSet<i32>,
        dropped: &BTreeSet<i32>,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        self.engine = Engine::new(&self.config.engine).map_err(|e| e.within("engine"))?;
        self.job_partitions.clear();
        self.machine_partitions.clear();
        let mut effects = Effects::default();
        let mut outgoing: Vec<Outgoing> = Vec::new();
        let store = self.store.clone();
        let mut write = store.batch();
        let mut gone = Effects::default();
        let mut count = 0u64;
        for logged in store.log() {
            let logged = logged?;
            let consumed = Consumed::new(logged.key, logged.payload);
            let outcome = self.apply_message(logged.partition, &consumed, &mut effects);
            if taken.contains(&logged.partition)
                && self
                    .owned
                    .get(&logged.partition)
                    .is_some_and(|&from| logged.offset >= from)
            {
                match outcome {
                    Ok(()) => encode::outputs(self.topics, &effects.outputs, &mut outgoing, None),
                    Err(dead) => outgoing.push(encode::dead_letter(
                        self.topics,
                        &consumed,
                        logged.partition,
                        logged.offset,
                        &dead,
                    )),
                }
            }
            effects.settle();
            self.write_records(&effects, taken, &mut write);
            gone.jobs.extend(
                effects
                    .jobs
                    .iter()
                    .copied()
                    .filter(|&j| self.job_partition(j).is_some_and(|p| dropped.contains(&p))),
            );
            gone.tasks.extend(effects.tasks.iter().copied().filter(|t| {
                self.job_partition(t.0)
                    .is_some_and(|p| dropped.contains(&p))
            }));
            gone.machines
                .extend(effects.machines.iter().copied().filter(|m| {
                    self.machine_partitions
                        .get(m)
                        .is_some_and(|p| dropped.contains(p))
                }));
            self.release_ended(&effects);
            effects.clear();
            count += 1;
            if write.len() >= REPLAY_COMMIT_EVERY {
                store.commit(std::mem::replace(&mut write, store.batch()))?;
                // Bounds `gone` by the keys, not the events, of the log.
                gone.settle();
            }
        }
        gone.settle();
        sink.publish(&outgoing, false)?;
        for &job_id in &gone.jobs {
            write.delete_job(job_id);
        }
        for &(job_id, task_index) in &gone.tasks {
            write.delete_task(job_id, task_index);
        }
        for &machine_id in &gone.machines {
            write.delete_machine(machine_id);
        }
        let owned: BTreeSet<i32> = self.owned.keys().copied().collect();
        write.set_stored_partitions(&owned);
        store.commit(write)?;
        self.stored = owned;
        self.summary.recovered_events = count;
        self.shared
            .counters
            .recovered_events
            .store(count, Ordering::Relaxed);
        metrics::counter!(telemetry::RECOVERED_EVENTS).increment(count);
        info!(
            events = count,
            taken_over = ?taken,
            given_up = ?dropped,
            republished = outgoing.len(),
            seconds = started.elapsed().as_secs_f64(),
            "predictor state rebuilt from the log"
        );
        Ok(())
    }
}
