//! Snapshots of the predictor's state, which bound a restore's work.
//!
//! Every `storage.snapshot_every_events` messages, the batch that crosses
//! the mark also writes a snapshot (the engine's state, which partition
//! each live job and machine came from, how far each input partition was
//! applied, and what is held for other owners), and the same atomic write
//! deletes the log behind it. The engine's history, nearly all of its
//! bytes, is in it whole only now and then ([`CHANGES_PER_WHOLE`]); the
//! snapshots between hold the values changed since the one before. On
//! start, the chain from the latest whole snapshot on is restored and the
//! log after it applied again (`pipeline.rs`): bounded work, whatever the
//! uptime.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use jobcast_predictor::engine::{Effects, Engine, EngineConfig, RestoreError, SnapshotError};
use jobcast_predictor::history::HistoryKey;
use jobcast_storage::state::StateBatch;
use serde::{Deserialize, Serialize};
use tracing::info;

use super::apply::Applier;
use super::outbox::{Outbox, SavedOutbox};
use super::record_owners::RecordOwners;
use crate::error::ServiceError;
use crate::telemetry;

/// A whole snapshot is written again once the snapshots of changes after
/// the last one add up to this share of its size. A restore then reads
/// at most 1.5 times the state, and the snapshots cost a fraction of
/// rewriting the state every time: the history, nearly all of a snapshot
/// once its window is full, changes only in the feature values of the
/// jobs that ended since the snapshot before.
const CHANGES_PER_WHOLE: f64 = 0.5;

/// The snapshots stored so far, to choose the next one's form.
#[derive(Default)]
pub(super) struct Snapshots {
    /// The log sequence number of the latest snapshot.
    seq: u64,
    /// The bytes of the latest whole snapshot (0 without one), and of the
    /// snapshots of changes written after it.
    whole_bytes: u64,
    changes_bytes: u64,
    /// The history keys changed since the latest snapshot.
    history_changed: HashSet<HistoryKey>,
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

/// The state a chain of snapshots restores: the applier's (engine, record
/// owners, retention's bound) goes straight into it.
pub(super) struct Restored {
    /// The next offset of each input partition after what it includes.
    pub(super) applied: BTreeMap<i32, i64>,
    pub(super) outbox: Outbox,
}

impl Snapshots {
    /// The log sequence number the latest snapshot was taken at: a restore
    /// applies the log from there.
    pub(super) fn seq(&self) -> u64 {
        self.seq
    }

    /// Whether a batch ending at `next_seq` should carry a snapshot, one
    /// every `every` messages logged.
    pub(super) fn due(&self, next_seq: u64, every: u64) -> bool {
        next_seq - self.seq >= every
    }

    /// Note what a batch (or a logged message applied again) changed.
    pub(super) fn note(&mut self, effects: &Effects) {
        self.history_changed.extend(effects.history.iter().copied());
    }

    fn whole_due(&self) -> bool {
        self.whole_bytes == 0
            || self.changes_bytes as f64 >= CHANGES_PER_WHOLE * self.whole_bytes as f64
    }

    /// Add to `write` (which then also truncates the log behind it) a
    /// snapshot, at `seq`, of the state after every message logged so far:
    /// `applier`'s, where each partition was `applied` to, and what
    /// `outbox` holds. Ended jobs must be released first: their records
    /// are in `write` already.
    pub(super) fn write(
        &mut self,
        seq: u64,
        applier: &Applier<'_>,
        applied: &BTreeMap<i32, i64>,
        outbox: &Outbox,
        write: &mut StateBatch<'_>,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        let whole = self.whole_due();
        let (job_partitions, machine_partitions, expired_before) = applier.saved();
        let snapshot = PipelineSnapshot {
            job_partitions,
            machine_partitions,
            applied: applied.clone(),
            expired_before,
            outbox: outbox.saved(),
        };
        // Sized for a whole one like the last (pages not written to cost
        // nothing): growing to tens of MB would copy it again and again.
        let capacity = self.whole_bytes + self.whole_bytes / 8;
        let out = Vec::with_capacity(capacity as usize);
        let out = postcard::to_extend(&snapshot, out).map_err(SnapshotError::from)?;
        let bytes = if whole {
            applier.engine().snapshot_to(out)?
        } else {
            let changed = self.history_changed.iter().copied();
            applier.engine().snapshot_changes(changed, out)?
        };
        if whole {
            write.put_snapshot(seq, &bytes);
            (self.whole_bytes, self.changes_bytes) = (bytes.len() as u64, 0);
        } else {
            write.put_snapshot_changes(seq, &bytes);
            self.changes_bytes += bytes.len() as u64;
        }
        info!(
            seq,
            whole,
            bytes = bytes.len(),
            seconds = started.elapsed().as_secs_f64(),
            "snapshot taken; its batch truncates the log behind it"
        );
        self.seq = seq;
        self.history_changed.clear();
        metrics::counter!(telemetry::SNAPSHOTS).increment(1);
        metrics::gauge!(telemetry::SNAPSHOT_BYTES).set(bytes.len() as f64);
        metrics::gauge!(telemetry::SNAPSHOT_SECONDS).set(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Restore the stored `chain` (the latest whole snapshot and the
    /// changes after it, by log sequence number) into `applier`, or start
    /// it on a new engine if there is none; the rest of the state they
    /// hold. The chain read so far is forgotten.
    pub(super) fn restore(
        &mut self,
        chain: &[(u64, Vec<u8>)],
        config: &EngineConfig,
        takeover_buffer_bytes: usize,
        applier: &mut Applier<'_>,
    ) -> Result<Restored, ServiceError> {
        *self = Snapshots::default();
        let Some((whole, changes)) = chain.split_first() else {
            applier.start_engine(Engine::new(config).map_err(|e| e.within("engine"))?);
            return Ok(Restored {
                applied: BTreeMap::new(),
                outbox: Outbox::new(takeover_buffer_bytes),
            });
        };
        let mut snapshots = Vec::with_capacity(chain.len());
        for (_, bytes) in chain {
            let (snapshot, engine) = postcard::take_from_bytes::<PipelineSnapshot>(bytes)
                .map_err(|e| RestoreError::from(SnapshotError::from(e)))?;
            snapshots.push((snapshot, engine));
        }
        let engines: Vec<&[u8]> = snapshots.iter().map(|(_, engine)| *engine).collect();
        let engine = Engine::restore_chain(config, &engines)?;
        self.seq = chain.last().expect("not empty").0;
        self.whole_bytes = whole.1.len() as u64;
        self.changes_bytes = changes.iter().map(|(_, b)| b.len() as u64).sum();
        let (snapshot, _) = snapshots.pop().expect("not empty");
        applier.restore(
            engine,
            RecordOwners::restored(snapshot.job_partitions, snapshot.machine_partitions),
            snapshot.expired_before,
        );
        Ok(Restored {
            applied: snapshot.applied,
            outbox: Outbox::restored(takeover_buffer_bytes, snapshot.outbox)
                .map_err(RestoreError::from)?,
        })
    }
}
