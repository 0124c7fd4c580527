//! `jobcast serve`'s pipeline: Kafka source → event-time merge → engine →
//! Kafka sinks, with every batch committed to RocksDB atomically with the
//! offsets it consumed.
//!
//! One batch goes through these steps, in this order:
//! 1. the source thread (`source.rs`) consumes messages from every
//!    partition of the input topic, decodes them into the event-time
//!    merge and hands over those whose turn has come; the pipeline
//!    thread takes all that wait as one batch;
//! 2. the pipeline thread applies each one to the [`Engine`]; a message
//!    that did not decode, or that the engine rejects, becomes a dead
//!    letter;
//! 3. produce the decisions, risk scores and dead letters of the messages
//!    of *owned* partitions and wait until the broker has acknowledged
//!    every one (failed deliveries are produced again, with backoff);
//! 4. commit one RocksDB `WriteBatch`: the owned partitions' records the
//!    batch changed, the learnt state (history, policy errors), every
//!    consumed message (the log), and the next offset of each partition.
//!
//! The source goes on reading and releasing while the pipeline thread
//! takes this batch through steps 2–4; what it released meanwhile is the
//! next batch.
//!
//! A crash before step 4 loses the batch's effects on RocksDB but not its
//! input: the restarted service rebuilds its state from the log, resumes
//! from the stored offsets, and applies the batch again, producing the same
//! decisions with the same (job id, version), which consumers drop as
//! duplicates (at-least-once output, exactly-once state).
//!
//! # Several instances
//!
//! The predictor learns from every job (the 3Sigma history, SLearn's
//! sampling ratio, the VM lifetime fits), so every instance reads and
//! applies *every* partition, in the same event-time order, and learns the
//! same state. The consumer group divides the partitions for what costs
//! most: an instance publishes the outputs of, and stores the records
//! (jobs, tasks, machines) of, only the partitions it owns. When a
//! partition changes hands, its new owner applies its log again
//! ([`Pipeline::reconcile`]): it stores the partition's records and
//! publishes the outputs the previous owner had not, from the offset the
//! previous owner committed to the group (after its outputs were
//! acknowledged). Offsets for input are always the ones stored in RocksDB;
//! the group's committed offsets only say where each owner's outputs end.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::{KafkaSettings, Topics, dead_letter_headers};
use jobcast_storage::state::{StateStore, StoreError};
use jobcast_storage::writer::Writer;
use rdkafka::client::ClientContext;
use rdkafka::config::{ClientConfig, RDKafkaLogLevel};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, RebalanceProtocol};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use crate::config::ServeConfig;
use crate::engine::{Effects, Engine, MachineRisk, Output};
pub use crate::source::FETCH_QUEUE_BACKOFF_MS;
use crate::source::{Batch, Consumed, InputContext, Source};
use crate::telemetry;

/// State shared between the pipeline thread, the HTTP server and whoever
/// started the service.
pub struct Shared {
    pub store: Arc<StateStore>,
    /// Set to stop: the batch in hand is finished and committed first.
    pub shutdown: AtomicBool,
    /// The log has been applied again and the service consumes.
    pub recovered: AtomicBool,
    /// The consumer group has given this instance its partitions (possibly
    /// none).
    pub assigned: AtomicBool,
    /// The brokers answered recently.
    pub broker_up: AtomicBool,
    /// The input partitions this instance owns.
    pub owned: Mutex<Vec<i32>>,
    pub counters: Counters,
    pub recent: Mutex<Recent>,
}

/// Recent outcomes, for live summaries: decisions by queue, and each
/// policy's absolute percentage errors on the last jobs it was scored on.
#[derive(Debug, Default)]
pub struct Recent {
    pub decisions_by_queue: BTreeMap<u8, u64>,
    pub errors_pct: BTreeMap<&'static str, VecDeque<f64>>,
}

impl Recent {
    /// Errors kept per policy.
    pub const WINDOW: usize = 10_000;

    fn record_error(&mut self, policy: &'static str, abs_pct: f64) {
        let errors = self.errors_pct.entry(policy).or_default();
        if errors.len() == Self::WINDOW {
            errors.pop_front();
        }
        errors.push_back(abs_pct);
    }

    /// The `q`-quantile (0–1) of a policy's recent errors.
    pub fn error_quantile(&self, policy: &str, q: f64) -> Option<f64> {
        let mut errors: Vec<f64> = self.errors_pct.get(policy)?.iter().copied().collect();
        if errors.is_empty() {
            return None;
        }
        errors.sort_by(f64::total_cmp);
        let rank = ((errors.len() - 1) as f64 * q).round() as usize;
        Some(errors[rank])
    }
}

/// Running totals since start, for live summaries.
#[derive(Debug, Default)]
pub struct Counters {
    /// Input messages committed (applied or dead-lettered).
    pub committed: AtomicU64,
    pub applied: AtomicU64,
    pub dead_lettered: AtomicU64,
    pub decisions: AtomicU64,
    pub scored: AtomicU64,
    /// Logged messages applied again by the latest log replay.
    pub recovered_events: AtomicU64,
    pub live_jobs: AtomicU64,
    /// Input partitions paused to bound the event-time merge's memory.
    pub input_pauses: AtomicU64,
    /// Batches committed, and the nanoseconds the pipeline thread's steps
    /// took: applying (decoded messages to the engine, outputs and log
    /// built), publishing (until every output is acknowledged), committing
    /// (the changed records serialised into the batch, handed to the writer
    /// thread).
    pub batches: AtomicU64,
    pub apply_ns: AtomicU64,
    pub publish_ns: AtomicU64,
    pub commit_ns: AtomicU64,
    /// Nanoseconds, summed over every message of every batch, from its
    /// poll to the start of its batch: the event-time merge, and the wait
    /// for the pipeline to finish the batch before.
    pub queued_ns: AtomicU64,
    /// Nanoseconds the writer thread spent writing batches to RocksDB,
    /// beside the pipeline thread (overlapping the steps above).
    pub write_ns: AtomicU64,
}

impl Shared {
    pub fn new(store: Arc<StateStore>) -> Arc<Self> {
        Arc::new(Shared {
            store,
            shutdown: AtomicBool::new(false),
            recovered: AtomicBool::new(false),
            assigned: AtomicBool::new(false),
            broker_up: AtomicBool::new(false),
            owned: Mutex::new(Vec::new()),
            counters: Counters::default(),
            recent: Mutex::new(Recent::default()),
        })
    }

    /// Ready to serve: recovered, in the group, brokers reachable.
    pub fn ready(&self) -> bool {
        self.recovered.load(Ordering::Relaxed)
            && self.assigned.load(Ordering::Relaxed)
            && self.broker_up.load(Ordering::Relaxed)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("invalid configuration: {0}")]
    Config(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("the RocksDB state at {path} cannot be recovered: {reason}")]
    Recovery { path: String, reason: String },
    #[error("cannot start the source thread: {0}")]
    Thread(std::io::Error),
    #[error("stopped with {0} output messages unacknowledged; their batch was not committed")]
    Unacknowledged(usize),
}

/// The engine configuration a store was built with, so that a restart with
/// another one (which would rebuild a different state from the log) is
/// refused instead of silently corrupting the state.
const ENGINE_CONFIG_KEY: &str = "engine_config";

/// How long the producer may take to look up an output topic at start.
const OUTPUT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// The longest the pipeline waits for a batch before it looks at the
/// group's membership again.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// How long a batch's outputs may be in flight before the service says so
/// (and, shutting down, gives up on them).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`await_deliveries`] sleeps when no acknowledgement came in.
const DELIVERY_POLL_SLEEP: Duration = Duration::from_micros(100);

/// Serve `producer`'s delivery reports until nothing is in flight (true) or
/// `timeout` passes. `BaseProducer::flush` would do the same but sleeps in
/// 100 ms steps, which put 100 ms on every batch's event → decision latency;
/// `BaseProducer::poll(timeout)` returns only at its deadline and spins
/// through the last millisecond of it (librdkafka waits in whole
/// milliseconds), which took a core from the broker and the consumer while
/// every batch waited. So: serve what is there, and sleep briefly when
/// nothing was.
fn await_deliveries<C: ProducerContext>(producer: &BaseProducer<C>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        let in_flight = producer.in_flight_count();
        if in_flight == 0 {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        producer.poll(Duration::ZERO);
        if producer.in_flight_count() == in_flight {
            std::thread::sleep(DELIVERY_POLL_SLEEP);
        }
    }
}

pub(crate) fn log_librdkafka(level: RDKafkaLogLevel, fac: &str, message: &str) {
    match level {
        RDKafkaLogLevel::Emerg
        | RDKafkaLogLevel::Alert
        | RDKafkaLogLevel::Critical
        | RDKafkaLogLevel::Error => error!(target: "librdkafka", "{fac}: {message}"),
        RDKafkaLogLevel::Warning => warn!(target: "librdkafka", "{fac}: {message}"),
        _ => debug!(target: "librdkafka", "{fac}: {message}"),
    }
}

/// A change in the partitions the consumer group gives this instance.
enum MembershipChange {
    Added(Vec<i32>),
    Removed(Vec<i32>),
}

/// The consumer-group member. It fetches nothing (its partitions are
/// paused at their end); the group's assignment says which partitions this
/// instance *owns*: publishes the outputs of and stores the records of.
struct MemberContext {
    topic: String,
    shared: Arc<Shared>,
    changes: Mutex<Vec<MembershipChange>>,
    /// Per owned partition, the offset below which its outputs are
    /// published. Committed to the group when the partition is revoked, so
    /// that its next owner publishes from there.
    published: Mutex<BTreeMap<i32, i64>>,
}

impl ClientContext for MemberContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() != Some(RDKafkaErrorCode::AllBrokersDown) {
            warn!("Kafka group member: {error}: {reason}");
        }
    }
}

impl ConsumerContext for MemberContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        let partitions: Vec<i32> = tpl
            .elements_for_topic(&self.topic)
            .iter()
            .map(|e| e.partition())
            .collect();
        let cooperative = matches!(
            consumer.rebalance_protocol(),
            RebalanceProtocol::Cooperative
        );
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                for &partition in &partitions {
                    // The member never reads: start at the end, paused.
                    let _ = tpl.set_partition_offset(&self.topic, partition, Offset::End);
                }
                let assigned = if cooperative {
                    consumer.incremental_assign(tpl)
                } else {
                    consumer.assign(tpl)
                };
                if let Err(e) = assigned.and_then(|()| consumer.pause(tpl)) {
                    error!("cannot take the assigned partitions: {e}");
                }
                info!(?partitions, "partitions assigned to this instance");
                self.shared.assigned.store(true, Ordering::Relaxed);
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(MembershipChange::Added(partitions));
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                // Tell the next owner where this instance's outputs end.
                let mut commit = TopicPartitionList::new();
                let published = self.published.lock().expect("not poisoned");
                for partition in &partitions {
                    if let Some(&next) = published.get(partition) {
                        let _ = commit.add_partition_offset(
                            &self.topic,
                            *partition,
                            Offset::Offset(next),
                        );
                    }
                }
                drop(published);
                if commit.count() > 0
                    && let Err(e) = consumer.commit(&commit, CommitMode::Sync)
                {
                    warn!("cannot commit the revoked partitions' offsets: {e}");
                }
                let unassigned = if cooperative {
                    consumer.incremental_unassign(tpl)
                } else {
                    consumer.unassign()
                };
                if let Err(e) = unassigned {
                    error!("cannot give up the revoked partitions: {e}");
                }
                info!(?partitions, "partitions revoked from this instance");
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(MembershipChange::Removed(partitions));
            }
            other => error!("rebalance failed: {other:?}"),
        }
    }
}

/// Records which produced messages failed, by their index in the batch,
/// and tells readiness when the producer loses every broker (the consume
/// loop may then be waiting for acknowledgements, not probing).
struct SinkContext {
    failed: Mutex<Vec<usize>>,
    shared: Arc<Shared>,
}

impl ClientContext for SinkContext {
    fn error(&self, error: KafkaError, reason: &str) {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            self.shared.broker_up.store(false, Ordering::Relaxed);
        }
        warn!("Kafka producer: {error}: {reason}");
    }
}

impl ProducerContext for SinkContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        if let Err((e, _)) = result {
            warn!("delivery of output {index} failed: {e}");
            self.failed.lock().expect("not poisoned").push(index);
        }
    }
}

/// A message to produce.
struct Outgoing {
    topic: String,
    key: Vec<u8>,
    payload: Vec<u8>,
    headers: Vec<(&'static str, Vec<u8>)>,
    /// When the input message that caused it was consumed (decisions).
    caused_at: Option<Instant>,
}

/// Add a batch step's time to its counter and histogram.
fn record_stage(stage: &'static str, counter: &AtomicU64, took: Duration) {
    counter.fetch_add(took.as_nanos() as u64, Ordering::Relaxed);
    metrics::histogram!(telemetry::BATCH_STAGE_SECONDS, "stage" => stage)
        .record(took.as_secs_f64());
}

/// Totals of one run of [`run`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunSummary {
    pub recovered_events: u64,
    pub committed: u64,
    pub applied: u64,
    pub dead_lettered: u64,
    pub decisions: u64,
}

/// Open the store for `config`.
pub fn open_store(config: &ServeConfig) -> Result<Arc<StateStore>, ServiceError> {
    Ok(Arc::new(StateStore::open(
        &config.storage.path,
        config.storage.sync,
    )?))
}

/// Run the pipeline until `shared.shutdown` is set. Blocking: run it on its
/// own thread.
pub fn run(config: &ServeConfig, shared: Arc<Shared>) -> Result<RunSummary, ServiceError> {
    config.validate().map_err(ServiceError::Config)?;
    telemetry::handle();
    let mut pipeline = Pipeline::new(config, shared)?;
    pipeline.check_store()?;
    let member = pipeline.join_group()?;
    let producer: BaseProducer<SinkContext> = output_producer_config(&config.kafka)
        .create_with_context(SinkContext {
            failed: Mutex::new(Vec::new()),
            shared: pipeline.shared.clone(),
        })
        .map_err(|e| config.kafka.redact(e))?;
    pipeline.warm_up(&producer);
    if pipeline.await_assignment(&member) {
        pipeline.reconcile(&member, &producer, true)?;
        pipeline.shared.recovered.store(true, Ordering::Relaxed);
        pipeline.consume(&member, &producer)?;
    }
    pipeline.writer.flush()?;
    producer.flush(Duration::from_secs(10))?;
    pipeline.leave_group(&member);
    info!(?pipeline.summary, "stopped");
    Ok(pipeline.summary)
}

/// The settings of the producer of the service's outputs.
pub fn output_producer_config(kafka: &KafkaSettings) -> ClientConfig {
    let mut config = kafka.producer_config();
    // A batch's outputs are all produced at once and then awaited: lingering
    // for more would only add its time to every batch.
    if !["linger.ms", "queue.buffering.max.ms"]
        .iter()
        .any(|key| kafka.client.contains_key(*key))
    {
        config.set("linger.ms", "0");
    }
    config
}

/// The store's layout version. 5: the `jobs` and `tasks` families hold
/// binary records (`JobRecord::to_bytes`, `TaskRecord::to_bytes`); 4: the
/// `history` family holds binary
/// records (`HistoryRecord::to_bytes`); 3: a job's decisions are stored
/// apart from its record; 2: the log holds every consumed message with its partition,
/// offset and key; 1: the log held applied events only.
const STORE_FORMAT: &[u8] = b"5";
const STORE_FORMAT_KEY: &str = "store_format";

/// The partitions whose records the store holds, kept current with every
/// batch (JSON list).
const STORED_PARTITIONS_KEY: &str = "stored_partitions";

/// Writes per intermediate commit while a replay stores a partition's
/// records (the final commit, with the stored partitions, makes them
/// count).
const REPLAY_COMMIT_EVERY: usize = 50_000;

/// How long to wait for the group coordinator's committed offsets.
const COMMITTED_TIMEOUT: Duration = Duration::from_secs(10);

struct Pipeline<'a> {
    config: &'a ServeConfig,
    topics: &'a Topics,
    shared: Arc<Shared>,
    store: Arc<StateStore>,
    /// Commits each batch's [`jobcast_storage::state::StateBatch`] while
    /// the next one is applied.
    writer: Writer,
    engine: Engine,
    next_seq: u64,
    summary: RunSummary,
    /// Partitions this instance owns, each with the first offset whose
    /// outputs are its to publish (those before were published by the
    /// partition's previous owner).
    owned: BTreeMap<i32, i64>,
    /// Partitions assigned by the group but not yet taken over.
    added: BTreeSet<i32>,
    /// Partitions whose records the store holds.
    stored: BTreeSet<i32>,
    /// The input partition each live job's events come from, and each
    /// machine's: records belong to the owner of that partition.
    job_partitions: foldhash::HashMap<u64, i32>,
    machine_partitions: foldhash::HashMap<u64, i32>,
}

/// Why applying a message produced a dead letter instead.
type DeadLetter = (&'static str, String);

impl<'a> Pipeline<'a> {
    fn new(config: &'a ServeConfig, shared: Arc<Shared>) -> Result<Self, ServiceError> {
        let engine = Engine::new(&config.engine).map_err(ServiceError::Config)?;
        Ok(Pipeline {
            config,
            topics: &config.topics,
            store: shared.store.clone(),
            writer: Writer::start(shared.store.clone()).map_err(ServiceError::Thread)?,
            shared,
            engine,
            next_seq: 0,
            summary: RunSummary::default(),
            owned: BTreeMap::new(),
            added: BTreeSet::new(),
            stored: BTreeSet::new(),
            job_partitions: foldhash::HashMap::default(),
            machine_partitions: foldhash::HashMap::default(),
        })
    }

    /// Have the producer connect and learn where its topics' partitions
    /// live before the first batch: otherwise the first batch's outputs
    /// wait for that (measured: 0.8 s against tansu on fresh topics). A
    /// topic that cannot be looked up is only reported here; producing to
    /// it fails, and is retried, as any failed delivery.
    fn warm_up(&self, producer: &BaseProducer<SinkContext>) {
        for topic in [
            &self.topics.decisions,
            &self.topics.risk,
            &self.topics.dead_letter,
        ] {
            if let Err(e) = producer
                .client()
                .fetch_metadata(Some(topic), OUTPUT_LOOKUP_TIMEOUT)
            {
                warn!("cannot look up output topic {topic}: {e}");
            }
        }
    }

    fn recovery_error(&self, reason: String) -> ServiceError {
        ServiceError::Recovery {
            path: self.config.storage.path.display().to_string(),
            reason,
        }
    }

    /// Refuse a store built by another engine configuration or an older
    /// layout, and read which partitions it holds.
    fn check_store(&mut self) -> Result<(), ServiceError> {
        let wanted = serde_json::to_vec(&self.config.engine).expect("config serialises");
        self.next_seq = self.store.next_log_seq()?;
        match self.store.meta(ENGINE_CONFIG_KEY)? {
            Some(stored) if stored != wanted => {
                return Err(self.recovery_error(format!(
                    "it was built with another engine configuration ({}); \
                     use a new storage path for the new configuration",
                    String::from_utf8_lossy(&stored)
                )));
            }
            None if self.next_seq > 0 => {
                return Err(
                    self.recovery_error("it has logged events but no engine configuration".into())
                );
            }
            _ => {}
        }
        let format = self.store.meta(STORE_FORMAT_KEY)?;
        if self.next_seq > 0 && format.as_deref() != Some(STORE_FORMAT) {
            let found = format.map_or("1".into(), |f| String::from_utf8_lossy(&f).into_owned());
            return Err(self.recovery_error(format!(
                "it was written by an older jobcast (store format {found}; this one reads {}); \
                 use a new storage path",
                String::from_utf8_lossy(STORE_FORMAT)
            )));
        }
        if let Some(stored) = self.store.meta(STORED_PARTITIONS_KEY)? {
            self.stored = serde_json::from_slice(&stored).map_err(|e| {
                self.recovery_error(format!("its list of stored partitions is corrupt: {e}"))
            })?;
        }
        Ok(())
    }

    /// Join the consumer group that divides the input topic's partitions
    /// between the instances.
    fn join_group(&self) -> Result<BaseConsumer<MemberContext>, ServiceError> {
        // Only the partitions that move change hands, so a rebalance costs
        // the instances that keep theirs nothing.
        let member: BaseConsumer<MemberContext> = self
            .consumer_config(
                &self.config.consumer.group,
                &[("partition.assignment.strategy", "cooperative-sticky")],
            )
            .create_with_context(MemberContext {
                topic: self.topics.events.clone(),
                shared: self.shared.clone(),
                changes: Mutex::new(Vec::new()),
                published: Mutex::new(BTreeMap::new()),
            })
            .map_err(|e| self.config.kafka.redact(e))?;
        member.subscribe(&[&self.topics.events])?;
        Ok(member)
    }

    /// A consumer's settings: `group`, no automatic commits, `extra`, then
    /// the configured client properties (which win).
    fn consumer_config(&self, group: &str, extra: &[(&str, &str)]) -> ClientConfig {
        let mut config = self.config.kafka.client_config();
        config
            .set("group.id", group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        for (key, value) in extra {
            config.set(*key, *value);
        }
        for (key, value) in &self.config.kafka.client {
            config.set(key, value);
        }
        config
    }

    /// Wait for the group's first assignment (false if stopped first).
    fn await_assignment(&mut self, member: &BaseConsumer<MemberContext>) -> bool {
        while !self.shared.shutdown.load(Ordering::Relaxed) {
            let _ = member.poll(Duration::from_millis(100));
            if self.membership_changes(member) {
                return true;
            }
        }
        false
    }

    /// Take the group's news: a revoked partition stops being published at
    /// once; an added one waits for [`Pipeline::reconcile`]. True if
    /// anything changed.
    fn membership_changes(&mut self, member: &BaseConsumer<MemberContext>) -> bool {
        let changes = std::mem::take(&mut *member.context().changes.lock().expect("not poisoned"));
        if changes.is_empty() {
            return false;
        }
        for change in &changes {
            match change {
                MembershipChange::Added(partitions) => self.added.extend(partitions),
                MembershipChange::Removed(partitions) => {
                    for partition in partitions {
                        self.added.remove(partition);
                        self.owned.remove(partition);
                    }
                }
            }
        }
        self.show_owned();
        true
    }

    fn show_owned(&self) {
        let owned: Vec<i32> = self.owned.keys().copied().collect();
        metrics::gauge!(telemetry::OWNED_PARTITIONS).set(owned.len() as f64);
        *self.shared.owned.lock().expect("not poisoned") = owned;
    }

    /// Bring the engine and the store in line with the partitions this
    /// instance owns. The log is applied again (always on start, when
    /// `rebuild`; otherwise only if partitions changed hands): for each
    /// partition taken over, its records are stored and the outputs its
    /// previous owner had not published (from the group's committed offset
    /// on) are published; the records of each partition given up are
    /// deleted.
    fn reconcile(
        &mut self,
        member: &BaseConsumer<MemberContext>,
        producer: &BaseProducer<SinkContext>,
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
            self.replay(producer, &taken, &dropped)?;
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

    /// The group's committed offset of each partition (0 where none is):
    /// outputs of earlier offsets were published by a previous owner.
    fn committed_offsets(
        &self,
        member: &BaseConsumer<MemberContext>,
        partitions: &BTreeSet<i32>,
    ) -> Result<BTreeMap<i32, i64>, ServiceError> {
        if partitions.is_empty() {
            return Ok(BTreeMap::new());
        }
        let mut tpl = TopicPartitionList::new();
        for &partition in partitions {
            tpl.add_partition(&self.topics.events, partition);
        }
        let mut backoff = Duration::from_millis(100);
        loop {
            match member.committed_offsets(tpl.clone(), COMMITTED_TIMEOUT) {
                Ok(committed) => {
                    return Ok(committed
                        .elements_for_topic(&self.topics.events)
                        .iter()
                        .map(|e| match e.offset() {
                            Offset::Offset(next) => (e.partition(), next),
                            _ => (e.partition(), 0),
                        })
                        .collect());
                }
                // Without them the new partitions' outputs could be lost
                // or all published again: wait for the coordinator.
                Err(e) if !self.shared.shutdown.load(Ordering::Relaxed) => {
                    warn!("cannot read the group's committed offsets ({e}); retrying");
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Rebuild the engine by applying the log again (see
    /// [`Pipeline::reconcile`]).
    fn replay(
        &mut self,
        producer: &BaseProducer<SinkContext>,
        taken: &BTreeSet<i32>,
        dropped: &BTreeSet<i32>,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        self.engine = Engine::new(&self.config.engine).map_err(ServiceError::Config)?;
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
                    Ok(()) => self.outputs_to(&effects.outputs, &mut outgoing, None),
                    Err((reason, message)) => outgoing.push(self.dead_letter(
                        &consumed,
                        logged.partition,
                        logged.offset,
                        reason,
                        &message,
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
        self.publish(producer, &outgoing, false)?;
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
        write.set_meta(
            STORED_PARTITIONS_KEY,
            &serde_json::to_vec(&owned).expect("partitions serialise"),
        );
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

    fn job_partition(&self, job_id: u64) -> Option<i32> {
        self.job_partitions.get(&job_id).copied()
    }

    /// Apply one input message; what it produced is appended to `effects`.
    fn apply_message(
        &mut self,
        partition: i32,
        consumed: &Consumed,
        effects: &mut Effects,
    ) -> Result<(), DeadLetter> {
        let event = consumed.event.as_ref().map_err(|(r, m)| (*r, m.clone()))?;
        self.engine
            .apply(event, effects)
            .map_err(|rejection| (rejection.reason, rejection.message))?;
        match event {
            Event::JobSubmitted(job) => {
                self.job_partitions.insert(job.job_id, partition);
            }
            Event::Machine(machine) => {
                self.machine_partitions
                    .entry(machine.machine_id)
                    .or_insert(partition);
            }
            Event::Task(_) | Event::JobEnded(_) => {}
        }
        Ok(())
    }

    /// Write the records `effects` changed that belong to `partitions`.
    fn write_records(
        &self,
        effects: &Effects,
        partitions: &BTreeSet<i32>,
        write: &mut jobcast_storage::state::StateBatch<'_>,
    ) {
        if partitions.is_empty() {
            return;
        }
        let ours = |job_id: u64| {
            self.job_partition(job_id)
                .is_some_and(|p| partitions.contains(&p))
        };
        for &job_id in effects.jobs.iter().filter(|j| ours(**j)) {
            if let Some(record) = self.engine.job(job_id) {
                write.put_job(job_id, &record.to_bytes());
            }
        }
        for output in &effects.outputs {
            if let Output::Decision(d) = output
                && ours(d.job_id)
            {
                write.put_decision(d.job_id, d.version, d);
            }
        }
        for &(job_id, task_index) in effects.tasks.iter().filter(|t| ours(t.0)) {
            if let Some(record) = self.engine.task(job_id, task_index) {
                write.put_task(job_id, task_index, &record.to_bytes());
            }
        }
        for &machine_id in &effects.machines {
            if self
                .machine_partitions
                .get(&machine_id)
                .is_some_and(|p| partitions.contains(p))
                && let Some(record) = self.engine.machine(machine_id)
            {
                write.put_machine(machine_id, record);
            }
        }
    }

    /// Let the engine drop ended jobs (once their records are written), and
    /// forget their partitions.
    fn release_ended(&mut self, effects: &Effects) {
        self.engine.release_ended();
        for job_id in &effects.jobs {
            if self.engine.job(*job_id).is_none() {
                self.job_partitions.remove(job_id);
            }
        }
    }

    /// Messages for the decisions and risk scores among `outputs`.
    fn outputs_to(
        &self,
        outputs: &[Output],
        outgoing: &mut Vec<Outgoing>,
        polled_at: Option<Instant>,
    ) {
        for output in outputs {
            match output {
                Output::Decision(d) => outgoing.push(self.decision_message(d, polled_at)),
                Output::Risk(r) => outgoing.push(self.risk_message(r)),
                Output::Scored { .. } => {}
            }
        }
    }

    /// Consume until stopped. Every instance reads every partition (the
    /// predictor learns from all of them); the group decides whose outputs
    /// and records this instance keeps.
    fn consume(
        &mut self,
        member: &BaseConsumer<MemberContext>,
        producer: &BaseProducer<SinkContext>,
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
                    ("statistics.interval.ms", "5000"),
                    ("fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS),
                ],
            )
            .create_with_context(InputContext {
                topic: self.topics.events.clone(),
                shared: self.shared.clone(),
            })
            .map_err(|e| self.config.kafka.redact(e))?;
        let source = Source::start(consumer, &self.config.consumer, self.store.clone())?;
        loop {
            let _ = member.poll(Duration::ZERO);
            if self.membership_changes(member) {
                self.reconcile(member, producer, false)?;
            }
            match source.next(POLL_WAIT) {
                Ok(Some(batch)) => {
                    let stopping = self.shared.shutdown.load(Ordering::Relaxed);
                    self.process(producer, member, batch, stopping)?;
                }
                Ok(None) => {}
                // The source has handed over what it held and stopped.
                Err(None) => return Ok(()),
                Err(Some(error)) => return Err(error),
            }
        }
    }

    /// Apply, publish and commit one batch.
    fn process(
        &mut self,
        producer: &BaseProducer<SinkContext>,
        member: &BaseConsumer<MemberContext>,
        batch: Batch,
        stopping: bool,
    ) -> Result<(), ServiceError> {
        let started = Instant::now();
        let mut effects = Effects::default();
        let mut outgoing: Vec<Outgoing> = Vec::new();
        // Outputs of the messages this instance owns, for its metrics.
        let mut ours: Vec<std::ops::Range<usize>> = Vec::new();
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let mut applied = 0u64;
        let mut dead = 0u64;
        let store = self.store.clone();
        let mut write = store.batch();
        if self.next_seq == 0 {
            let config = serde_json::to_vec(&self.config.engine).expect("config serialises");
            write.set_meta(ENGINE_CONFIG_KEY, &config);
            write.set_meta(STORE_FORMAT_KEY, STORE_FORMAT);
        }
        let n = batch.len();
        // Counted here and added to the metrics once per batch: a labelled
        // metric costs a registry lookup per call.
        let mut consumed_by_type: BTreeMap<&'static str, u64> = BTreeMap::new();
        let mut queued = Duration::ZERO;
        for (partition, offset, consumed) in batch {
            queued += started.saturating_duration_since(consumed.polled_at);
            offsets.insert(partition, offset + 1);
            let owned = self
                .owned
                .get(&partition)
                .is_some_and(|&from| offset >= from);
            let before = effects.outputs.len();
            match self.apply_message(partition, &consumed, &mut effects) {
                Ok(()) => {
                    applied += 1;
                    if owned {
                        if let Ok(event) = &consumed.event {
                            *consumed_by_type.entry(event.type_name()).or_default() += 1;
                        }
                        self.outputs_to(
                            &effects.outputs[before..],
                            &mut outgoing,
                            Some(consumed.polled_at),
                        );
                        ours.push(before..effects.outputs.len());
                    }
                }
                Err((reason, message)) => {
                    if owned {
                        metrics::counter!(telemetry::EVENTS_DEAD_LETTERED, "reason" => reason)
                            .increment(1);
                        debug!(partition, offset, reason, "dead letter: {message}");
                        outgoing
                            .push(self.dead_letter(&consumed, partition, offset, reason, &message));
                        dead += 1;
                    }
                }
            }
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
        self.publish(producer, &outgoing, stopping)?;
        let published_at = Instant::now();

        effects.settle();
        self.write_records(&effects, &self.stored, &mut write);
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
        for (&partition, &next) in &offsets {
            write.set_offset(&self.topics.events, partition, next);
        }
        let committed = {
            let shared = self.shared.clone();
            let offsets = offsets.clone();
            move |took: Duration| {
                for (&partition, &next) in &offsets {
                    metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                        .set(next as f64);
                }
                let c = &shared.counters;
                c.committed.fetch_add(n as u64, Ordering::Relaxed);
                c.applied.fetch_add(applied, Ordering::Relaxed);
                c.dead_lettered.fetch_add(dead, Ordering::Relaxed);
                c.batches.fetch_add(1, Ordering::Relaxed);
                record_stage("write", &c.write_ns, took);
            }
        };
        self.writer.submit(write, Box::new(committed))?;
        let committed_at = Instant::now();
        self.release_ended(&effects);
        self.commit_to_group(member, &offsets);

        for (kind, count) in consumed_by_type {
            metrics::counter!(telemetry::EVENTS_CONSUMED, "type" => kind).increment(count);
        }
        let mut decisions = 0u64;
        let mut scored = 0u64;
        let mut decisions_by_queue: BTreeMap<u8, u64> = BTreeMap::new();
        // Each policy's two error histograms, looked up once per batch.
        let mut error_histograms = HashMap::new();
        let mut recent = self.shared.recent.lock().expect("not poisoned");
        for output in ours.into_iter().flat_map(|range| &effects.outputs[range]) {
            match output {
                Output::Decision(d) => {
                    decisions += 1;
                    *decisions_by_queue.entry(d.queue).or_default() += 1;
                }
                Output::Risk(r) => {
                    metrics::histogram!(telemetry::RISK_PREEMPTION_PROBABILITY)
                        .record(r.score.this_vm.preemption_probability);
                }
                Output::Scored { policy, error, .. } => {
                    scored += 1;
                    recent.record_error(policy.name(), error.abs_pct);
                    let (log_ratio, abs_pct) = error_histograms
                        .entry(policy.name())
                        .or_insert_with(|| {
                            (
                                metrics::histogram!(telemetry::PREDICTION_LOG_RATIO, "policy" => policy.name()),
                                metrics::histogram!(telemetry::PREDICTION_ERROR, "policy" => policy.name()),
                            )
                        });
                    log_ratio.record(error.log_ratio);
                    abs_pct.record(error.abs_pct);
                }
            }
        }
        for (queue, count) in decisions_by_queue {
            *recent.decisions_by_queue.entry(queue).or_default() += count;
            metrics::counter!(telemetry::DECISIONS, "queue" => queue.to_string()).increment(count);
        }
        drop(recent);
        metrics::histogram!(telemetry::BATCH_EVENTS).record(n as f64);
        metrics::gauge!(telemetry::LIVE_JOBS).set(self.engine.live_jobs() as f64);
        let c = &self.shared.counters;
        c.decisions.fetch_add(decisions, Ordering::Relaxed);
        c.scored.fetch_add(scored, Ordering::Relaxed);
        c.live_jobs
            .store(self.engine.live_jobs() as u64, Ordering::Relaxed);
        record_stage("apply", &c.apply_ns, applied_at - started);
        record_stage("publish", &c.publish_ns, published_at - applied_at);
        record_stage("commit", &c.commit_ns, committed_at - published_at);
        c.queued_ns
            .fetch_add(queued.as_nanos() as u64, Ordering::Relaxed);
        self.summary.committed += n as u64;
        self.summary.applied += applied;
        self.summary.dead_lettered += dead;
        self.summary.decisions += decisions;
        Ok(())
    }

    /// Commit the owned partitions' offsets to the group: where their next
    /// owner would start publishing (and what monitoring tools read).
    fn commit_to_group(&self, member: &BaseConsumer<MemberContext>, offsets: &BTreeMap<i32, i64>) {
        let mut tpl = TopicPartitionList::new();
        let mut published = member.context().published.lock().expect("not poisoned");
        for (&partition, &next) in offsets {
            let Some(&from) = self.owned.get(&partition) else {
                continue;
            };
            let next = next.max(from);
            published.insert(partition, next);
            if tpl
                .add_partition_offset(&self.topics.events, partition, Offset::Offset(next))
                .is_err()
            {
                return;
            }
        }
        drop(published);
        if tpl.count() > 0
            && let Err(e) = member.commit(&tpl, CommitMode::Async)
        {
            debug!("committing offsets to the group: {e}");
        }
    }

    /// Leave the group now rather than when the session times out, so
    /// that the partitions move to the other members at once (the
    /// revocation commits where this instance's outputs end).
    fn leave_group(&self, member: &BaseConsumer<MemberContext>) {
        member.unsubscribe();
        let leaving = Instant::now();
        while leaving.elapsed() < Duration::from_millis(500) {
            let _ = member.poll(Duration::from_millis(50));
        }
    }

    fn decision_message(
        &self,
        d: &jobcast_predictor::decision::Decision,
        polled_at: Option<Instant>,
    ) -> Outgoing {
        Outgoing {
            topic: self.topics.decisions.clone(),
            key: d.job_id.to_string().into_bytes(),
            payload: serde_json::to_vec(d).expect("decisions serialise"),
            headers: vec![
                ("jobcast.job_id", d.job_id.to_string().into_bytes()),
                ("jobcast.version", d.version.to_string().into_bytes()),
            ],
            caused_at: polled_at,
        }
    }

    fn risk_message(&self, risk: &MachineRisk) -> Outgoing {
        Outgoing {
            topic: self.topics.risk.clone(),
            key: risk.machine_id.to_string().into_bytes(),
            payload: serde_json::to_vec(risk).expect("risk scores serialise"),
            headers: vec![(
                "jobcast.machine_id",
                risk.machine_id.to_string().into_bytes(),
            )],
            caused_at: None,
        }
    }

    fn dead_letter(
        &self,
        consumed: &Consumed,
        partition: i32,
        offset: i64,
        reason: &'static str,
        message: &str,
    ) -> Outgoing {
        Outgoing {
            topic: self.topics.dead_letter.clone(),
            key: consumed.key.clone().unwrap_or_default(),
            payload: consumed.payload.clone().unwrap_or_default(),
            headers: vec![
                (dead_letter_headers::REASON, reason.as_bytes().to_vec()),
                (dead_letter_headers::ERROR, message.as_bytes().to_vec()),
                (
                    dead_letter_headers::SOURCE_TOPIC,
                    self.topics.events.as_bytes().to_vec(),
                ),
                (
                    dead_letter_headers::SOURCE_PARTITION,
                    partition.to_string().into_bytes(),
                ),
                (
                    dead_letter_headers::SOURCE_OFFSET,
                    offset.to_string().into_bytes(),
                ),
            ],
            caused_at: None,
        }
    }

    /// Produce every message and wait for the broker to acknowledge all of
    /// them, producing failed ones again with backoff.
    fn publish(
        &self,
        producer: &BaseProducer<SinkContext>,
        outgoing: &[Outgoing],
        stopping: bool,
    ) -> Result<(), ServiceError> {
        let mut pending: Vec<usize> = (0..outgoing.len()).collect();
        let mut backoff = Duration::from_millis(100);
        let mut attempts = 0u32;
        while !pending.is_empty() {
            for &index in &pending {
                let message = &outgoing[index];
                let mut headers = OwnedHeaders::new_with_capacity(message.headers.len());
                for (name, value) in &message.headers {
                    headers = headers.insert(Header {
                        key: name,
                        value: Some(value),
                    });
                }
                let mut record = BaseRecord::with_opaque_to(&message.topic, index)
                    .key(&message.key)
                    .payload(&message.payload)
                    .headers(headers);
                loop {
                    match producer.send(record) {
                        Ok(()) => break,
                        Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                            record = back;
                            producer.poll(Duration::from_millis(10));
                        }
                        Err((e, _)) => {
                            warn!("cannot produce to {}: {e}", message.topic);
                            producer
                                .context()
                                .failed
                                .lock()
                                .expect("not poisoned")
                                .push(index);
                            break;
                        }
                    }
                }
            }
            // Outputs in flight are librdkafka's to retry (until
            // `message.timeout.ms`, when they fail and are produced again
            // below); the batch is committed only once every one is
            // acknowledged, so keep waiting.
            while !await_deliveries(producer, DELIVERY_TIMEOUT) {
                self.shared.broker_up.store(false, Ordering::Relaxed);
                let in_flight = producer.in_flight_count();
                if stopping {
                    return Err(ServiceError::Unacknowledged(in_flight.max(0) as usize));
                }
                warn!(
                    in_flight,
                    "outputs still unacknowledged after {DELIVERY_TIMEOUT:?}; waiting on"
                );
            }
            let acknowledged = Instant::now();
            let failed =
                std::mem::take(&mut *producer.context().failed.lock().expect("not poisoned"));
            let latency = metrics::histogram!(telemetry::DECISION_LATENCY);
            for &index in pending.iter().filter(|i| !failed.contains(i)) {
                if let Some(caused_at) = outgoing[index].caused_at {
                    latency.record(acknowledged.duration_since(caused_at).as_secs_f64());
                }
            }
            pending = failed;
            if pending.is_empty() {
                self.shared.broker_up.store(true, Ordering::Relaxed);
                break;
            }
            attempts += 1;
            metrics::counter!(telemetry::PRODUCE_RETRIES).increment(pending.len() as u64);
            self.shared.broker_up.store(false, Ordering::Relaxed);
            if stopping && attempts >= 3 {
                return Err(ServiceError::Unacknowledged(pending.len()));
            }
            warn!(
                failed = pending.len(),
                "outputs not acknowledged; producing them again in {backoff:?}"
            );
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        Ok(())
    }
}
