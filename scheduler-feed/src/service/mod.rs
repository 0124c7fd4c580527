//! `jobcast serve`'s pipeline: Kafka source → event-time merge → engine →
//! Kafka sinks, with every batch committed to RocksDB atomically with the
//! offsets it consumed.
//!
//! The pipeline thread's state is `Pipeline` (`pipeline.rs`), a handful of
//! components (the group membership, the applier, the snapshots, the
//! outbox), each in a file of its own with the methods that change it;
//! `pipeline.rs` holds the loop and reads as calls on them.
//!
//! One batch goes through the five steps of an event's path, numbered as
//! `docs/architecture.md` numbers them (the loop is `pipeline.rs`; each
//! step's file is named):
//! 1. **Source**: the source thread ([`crate::source`]) consumes messages
//!    from every partition of the input topic, decodes them into the
//!    event-time merge and hands over those whose turn has come; the
//!    pipeline thread takes all that wait as one batch;
//! 2. **Apply**: the pipeline thread applies each one to the engine, which
//!    the [`Applier`] holds (`apply.rs`); a message that did not decode,
//!    or that the engine rejects, becomes a
//!    [`DeadLetter`](crate::error::DeadLetter);
//! 3. **Encode**: the decisions, risk scores and dead letters of the
//!    messages of *owned* partitions become messages (`encode.rs`);
//! 4. **Publish**: they are produced until the broker has acknowledged
//!    every one (`sink.rs`; failed deliveries are produced again, with
//!    backoff);
//! 5. **Commit**: one RocksDB `WriteBatch` (its records staged by
//!    `apply.rs`) is committed on the writer thread: the owned partitions'
//!    records the batch changed, the learnt state (history, policy
//!    errors), every consumed message (the log), and the next offset of
//!    each partition; then the batch is counted (`accounting.rs`).
//!
//! The source goes on reading and releasing while the pipeline thread
//! takes this batch through steps 2–5; what it released meanwhile is the
//! next batch.
//!
//! Every `storage.snapshot_every_events` messages, the batch's write also
//! carries a snapshot of the predictor's state and truncates the log
//! behind it (`snapshots.rs`).
//!
//! A crash before step 5 loses the batch's effects on RocksDB but not its
//! input: the restarted service restores its latest snapshot, applies the
//! log after it, resumes from the stored offsets, and applies the batch
//! again, producing the same decisions with the same (job id, version),
//! which consumers drop as duplicates (at-least-once output, exactly-once
//! state).
//!
//! # Several instances
//!
//! The predictor learns from every job (the 3Sigma history, SLearn's
//! sampling ratio, the VM lifetime fits), so every instance reads and
//! applies *every* partition, in the same event-time order, and learns the
//! same state. The consumer group divides the partitions for what costs
//! most: an instance publishes the outputs of, and stores the records
//! (jobs, tasks, machines) of, only the partitions it owns, and keeps the
//! outputs of the others until their owner has published them
//! (`outbox.rs`). When a partition changes hands, its new owner replays
//! nothing (`Pipeline::reconcile`): it stores the partition's live
//! records from memory and publishes the outputs the previous owner had
//! not, from the offset the previous owner committed to the group (after
//! its outputs were acknowledged and its records written: `group.rs`).
//! Offsets for input are always the ones stored in RocksDB; the group's
//! committed offsets only say where each owner's outputs end.

mod accounting;
mod apply;
mod encode;
mod group;
mod outbox;
mod partitions;
mod peers;
mod pipeline;
mod record_owners;
mod retention;
mod sink;
mod snapshots;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jobcast_storage::state::StateStore;
use tracing::info;

use crate::config::ServeConfig;
use crate::error::ServiceError;
use crate::shared::Shared;
pub use apply::Applier;
pub use apply::{EndedTasks, MessageOutcome};
use pipeline::Pipeline;
pub use sink::{Republished, output_producer_config, republish_parked};

/// Totals of one run of the service.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub recovered_events: u64,
    pub committed: u64,
    pub applied: u64,
    pub dead_lettered: u64,
    pub decisions: u64,
}

/// A running service: the pipeline on a thread of its own, and the state it
/// shares (with the HTTP API, live summaries, the bench and the tests).
pub struct Service {
    shared: Arc<Shared>,
    thread: JoinHandle<Result<RunSummary, ServiceError>>,
}

impl Service {
    /// Open the store of `config` and start the pipeline.
    pub fn start(config: ServeConfig) -> Result<Service, ServiceError> {
        let shared = Shared::new(open_store(&config)?);
        Service::start_with(config, shared)
    }

    /// Start the pipeline on state already shared with others (the HTTP
    /// API, started first so that it can answer while the service
    /// recovers).
    pub fn start_with(config: ServeConfig, shared: Arc<Shared>) -> Result<Service, ServiceError> {
        let pipeline_shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name("pipeline".into())
            .spawn(move || run(&config, pipeline_shared))
            .map_err(ServiceError::Thread)?;
        Ok(Service { shared, thread })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// The pipeline has ended (stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Wait up to `timeout` until the service is ready (its state
    /// recovered, the group joined): whether it is. False if it ended
    /// first ([`Self::join`] says why) or the time ran out.
    pub fn wait_ready(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.shared.ready() {
            if self.is_finished() || Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Finish the batch in hand, commit it, leave the group, and return the
    /// run's totals.
    pub fn stop(self) -> Result<RunSummary, ServiceError> {
        self.shared.shutdown.store(true, Ordering::Relaxed);
        self.join()
    }

    /// Wait for the pipeline to end (it ends by itself only on an error, or
    /// once `shutdown` is set).
    pub fn join(self) -> Result<RunSummary, ServiceError> {
        self.thread.join().map_err(|_| ServiceError::Panicked)?
    }
}

/// Open the store for `config`.
pub fn open_store(config: &ServeConfig) -> Result<Arc<StateStore>, ServiceError> {
    let opening = Instant::now();
    let store = StateStore::open(&config.storage.path, config.storage.sync)?;
    store.reserve(config.storage.min_free_bytes);
    // Long after a crash: RocksDB replays its write-ahead log.
    info!(seconds = opening.elapsed().as_secs_f64(), "store opened");
    Ok(Arc::new(store))
}

/// Run the pipeline on this thread until `shared.shutdown` is set (what
/// [`Service`] runs on a thread of its own).
pub fn run(config: &ServeConfig, shared: Arc<Shared>) -> Result<RunSummary, ServiceError> {
    config.validate()?;
    crate::telemetry::handle();
    if !wait_for_room(&shared)? {
        return Ok(RunSummary::default());
    }
    Pipeline::new(config, shared)?.run()
}

/// How often a start short of room on the store's filesystem looks again.
const ROOM_EVERY: Duration = Duration::from_secs(1);

/// Wait, alive and not ready, until the store's filesystem has twice the
/// room `storage.min_free_bytes` keeps: a restart after a full disk stopped
/// the service waits for the operator instead of failing again and again
/// (twice: RocksDB gives back room it had set aside as it closes, and a
/// start on that room alone would stop again at once). False if stopped
/// while waiting.
fn wait_for_room(shared: &Shared) -> Result<bool, ServiceError> {
    let mut said = false;
    loop {
        match shared.store.check_room(2) {
            Ok(_) => break,
            Err(jobcast_storage::state::StoreError::DiskFull {
                path,
                free_mib,
                reserve_mib,
            }) => {
                if !said {
                    tracing::error!(
                        "not ready, waiting for room: the filesystem of the store at {path} has \
                         {free_mib} MiB free, and a start needs {reserve_mib} MiB (twice \
                         storage.min_free_bytes); free some room (older backups, \
                         storage.backup_keep)"
                    );
                    said = true;
                }
            }
            Err(other) => return Err(other.into()),
        }
        shared.waiting_for_room.store(true, Ordering::Relaxed);
        metrics::gauge!(crate::telemetry::WAITING_FOR_ROOM).set(1.0);
        shared.liveness.beat();
        if shared.shutdown.load(Ordering::Relaxed) {
            return Ok(false);
        }
        std::thread::sleep(ROOM_EVERY);
    }
    if said {
        info!("the store's filesystem has room again: starting");
    }
    shared.waiting_for_room.store(false, Ordering::Relaxed);
    metrics::gauge!(crate::telemetry::WAITING_FOR_ROOM).set(0.0);
    Ok(true)
}

#[cfg(test)]
mod tests {

    use jobcast_ingest::kafka::KafkaSettings;
    use rdkafka::mocking::MockCluster;

    use super::*;

    fn config<C: rdkafka::ClientContext>(
        mock: &MockCluster<'_, C>,
        dir: &tempfile::TempDir,
    ) -> ServeConfig {
        let mut config = ServeConfig {
            kafka: KafkaSettings::new(mock.bootstrap_servers()),
            ..ServeConfig::default()
        };
        config.storage.path = dir.path().join("state");
        let t = &config.topics;
        mock.create_topic(&t.events, 2, 1).unwrap();
        for topic in t.outputs() {
            mock.create_topic(topic, 1, 1).unwrap();
        }
        config
    }

    #[test]
    fn a_started_service_recovers_serves_and_stops_on_request() {
        let mock = MockCluster::new(1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let service = Service::start(config(&mock, &dir)).unwrap();
        if !service.wait_ready(Duration::from_secs(60)) {
            panic!("never ready: {:?}", service.stop());
        }
        assert_eq!(*service.shared().owned.lock().unwrap(), [0, 1]);
        let summary = service.stop().unwrap();
        assert_eq!(summary, RunSummary::default());
    }

    #[test]
    fn a_service_that_cannot_start_says_why_when_joined() {
        let mock = MockCluster::new(1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let mut bad = config(&mock, &dir);
        bad.consumer.batch_max_events = 0;
        let err = Service::start(bad).unwrap().join().unwrap_err();
        assert!(matches!(err, ServiceError::Config(_)), "{err}");
    }
}
