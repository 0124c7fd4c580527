//! `jobcast serve`'s pipeline: Kafka source → event-time merge → engine →
//! Kafka sinks, with every batch committed to RocksDB atomically with the
//! offsets it consumed.
//!
//! One batch goes through these steps, in this order:
//! 1. consume messages from the assigned partitions into the
//!    [`PartitionMerge`] and release those whose turn has come;
//! 2. decode each one and apply it to the [`Engine`]; a message that does
//!    not decode, or that the engine rejects, becomes a dead letter;
//! 3. produce the batch's decisions and dead letters and wait until the
//!    broker has acknowledged every one (failed deliveries are produced
//!    again, with backoff);
//! 4. commit one RocksDB `WriteBatch`: the records the batch changed, the
//!    applied events (the log), and the next offset of each partition.
//!
//! A crash before step 4 loses the batch's effects on RocksDB but not its
//! input: the restarted service rebuilds its state from the log, resumes
//! from the stored offsets, and applies the batch again, producing the same
//! decisions with the same (job id, version), which consumers drop as
//! duplicates (at-least-once output, exactly-once state). Partition
//! assignments seek to the stored offsets, never to Kafka's committed ones
//! (those are committed too, but only for monitoring tools).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, decode};
use jobcast_ingest::kafka::{Topics, dead_letter_headers};
use jobcast_storage::state::{StateStore, StoreError};
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use crate::config::ServeConfig;
use crate::engine::{Effects, Engine, MachineRisk, Output};
use crate::merge::PartitionMerge;
use crate::telemetry;

/// State shared between the pipeline thread, the HTTP server and whoever
/// started the service.
pub struct Shared {
    pub store: Arc<StateStore>,
    /// Set to stop: the batch in hand is finished and committed first.
    pub shutdown: AtomicBool,
    /// The log has been applied again and the service consumes.
    pub recovered: AtomicBool,
    /// Partitions are assigned to this instance.
    pub assigned: AtomicBool,
    /// The brokers answered recently.
    pub broker_up: AtomicBool,
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
    /// Events applied again from the log on start.
    pub recovered_events: AtomicU64,
    pub live_jobs: AtomicU64,
}

impl Shared {
    pub fn new(store: Arc<StateStore>) -> Arc<Self> {
        Arc::new(Shared {
            store,
            shutdown: AtomicBool::new(false),
            recovered: AtomicBool::new(false),
            assigned: AtomicBool::new(false),
            broker_up: AtomicBool::new(false),
            counters: Counters::default(),
            recent: Mutex::new(Recent::default()),
        })
    }

    /// Ready to serve: recovered, holding partitions, brokers reachable.
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
    #[error("stopped with {0} output messages unacknowledged; their batch was not committed")]
    Unacknowledged(usize),
}

/// The engine configuration a store was built with, so that a restart with
/// another one (which would rebuild a different state from the log) is
/// refused instead of silently corrupting the state.
const ENGINE_CONFIG_KEY: &str = "engine_config";

/// How often, and how patiently, the consumer asks the brokers for metadata
/// to keep `/readyz` true to whether they answer, input or not.
const BROKER_PROBE_EVERY: Duration = Duration::from_secs(2);
const BROKER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// How long a batch's outputs may take to be acknowledged before they are
/// produced again.
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve `producer`'s delivery reports until nothing is in flight (true) or
/// `timeout` passes. `BaseProducer::flush` would do the same but sleeps in
/// 100 ms steps, which put 100 ms on every batch's event → decision latency.
fn await_deliveries<C: ProducerContext>(producer: &BaseProducer<C>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while producer.in_flight_count() > 0 {
        if Instant::now() >= deadline {
            return false;
        }
        producer.poll(Duration::from_millis(1));
    }
    true
}

/// One consumed message on its way through the pipeline.
struct Consumed {
    key: Option<Vec<u8>>,
    payload: Vec<u8>,
    event: Result<Event, (&'static str, String)>,
    polled_at: Instant,
}

enum AssignmentChange {
    Assigned(Vec<(i32, Option<i64>)>),
    Revoked,
}

/// Seeks every assigned partition to the offset stored in RocksDB.
struct SourceContext {
    store: Arc<StateStore>,
    topic: String,
    shared: Arc<Shared>,
    changes: Mutex<Vec<AssignmentChange>>,
}

impl ClientContext for SourceContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        match level {
            RDKafkaLogLevel::Emerg
            | RDKafkaLogLevel::Alert
            | RDKafkaLogLevel::Critical
            | RDKafkaLogLevel::Error => error!(target: "librdkafka", "{fac}: {message}"),
            RDKafkaLogLevel::Warning => warn!(target: "librdkafka", "{fac}: {message}"),
            _ => debug!(target: "librdkafka", "{fac}: {message}"),
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            Some(RDKafkaErrorCode::AllBrokersDown) => {
                self.shared.broker_up.store(false, Ordering::Relaxed);
                warn!("Kafka consumer: {error}: {reason}");
            }
            // Reaching a partition's end is news for the merge, which gets
            // it from poll; nothing is wrong.
            Some(RDKafkaErrorCode::PartitionEOF) => {}
            _ => warn!("Kafka consumer: {error}: {reason}"),
        }
    }

    /// Consumer lag per partition, from librdkafka's periodic statistics
    /// (no extra broker round trips).
    fn stats(&self, statistics: Statistics) {
        let Some(topic) = statistics.topics.get(&self.topic) else {
            return;
        };
        for (&partition, p) in &topic.partitions {
            if partition >= 0 && p.consumer_lag >= 0 {
                metrics::gauge!(telemetry::CONSUMER_LAG, "partition" => partition.to_string())
                    .set(p.consumer_lag as f64);
            }
        }
    }
}

impl ConsumerContext for SourceContext {
    fn rebalance(
        &self,
        consumer: &BaseConsumer<Self>,
        err: RDKafkaRespErr,
        tpl: &mut TopicPartitionList,
    ) {
        match err {
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS => {
                let stored = match self.store.offsets(&self.topic) {
                    Ok(stored) => stored,
                    Err(e) => {
                        // Without the stored offsets the safe choice is to
                        // take no partitions: the service stops below.
                        error!("cannot read stored offsets: {e}");
                        self.shared.shutdown.store(true, Ordering::Relaxed);
                        return;
                    }
                };
                let partitions: Vec<i32> = tpl
                    .elements_for_topic(&self.topic)
                    .iter()
                    .map(|e| e.partition())
                    .collect();
                let mut assigned = Vec::with_capacity(partitions.len());
                for partition in partitions {
                    let next = stored.get(&partition).copied();
                    let offset = next.map_or(Offset::Beginning, Offset::Offset);
                    if let Err(e) = tpl.set_partition_offset(&self.topic, partition, offset) {
                        error!("cannot seek partition {partition}: {e}");
                    }
                    assigned.push((partition, next));
                }
                info!(?assigned, "partitions assigned (partition, stored offset)");
                if let Err(e) = consumer.assign(tpl) {
                    error!("cannot take the assigned partitions: {e}");
                }
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(AssignmentChange::Assigned(assigned));
            }
            RDKafkaRespErr::RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS => {
                info!("partitions revoked");
                if let Err(e) = consumer.unassign() {
                    error!("cannot give up the revoked partitions: {e}");
                }
                self.changes
                    .lock()
                    .expect("not poisoned")
                    .push(AssignmentChange::Revoked);
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
    pipeline.recover()?;
    pipeline.consume()
}

struct Pipeline<'a> {
    config: &'a ServeConfig,
    topics: &'a Topics,
    shared: Arc<Shared>,
    store: Arc<StateStore>,
    engine: Engine,
    next_seq: u64,
    summary: RunSummary,
}

impl<'a> Pipeline<'a> {
    fn new(config: &'a ServeConfig, shared: Arc<Shared>) -> Result<Self, ServiceError> {
        let engine = Engine::new(&config.engine).map_err(ServiceError::Config)?;
        Ok(Pipeline {
            config,
            topics: &config.topics,
            store: shared.store.clone(),
            shared,
            engine,
            next_seq: 0,
            summary: RunSummary::default(),
        })
    }

    fn recovery_error(&self, reason: String) -> ServiceError {
        ServiceError::Recovery {
            path: self.config.storage.path.display().to_string(),
            reason,
        }
    }

    /// Rebuild the engine's state by applying the logged events again.
    fn recover(&mut self) -> Result<(), ServiceError> {
        let wanted = serde_json::to_vec(&self.config.engine).expect("config serialises");
        let next_seq = self.store.next_log_seq()?;
        match self.store.meta(ENGINE_CONFIG_KEY)? {
            Some(stored) if stored != wanted => {
                return Err(self.recovery_error(format!(
                    "it was built with another engine configuration ({}); \
                     use a new storage path for the new configuration",
                    String::from_utf8_lossy(&stored)
                )));
            }
            None if next_seq > 0 => {
                return Err(
                    self.recovery_error("it has logged events but no engine configuration".into())
                );
            }
            _ => {}
        }
        let started = Instant::now();
        let mut effects = Effects::default();
        let mut count = 0u64;
        for raw in self.store.log() {
            let raw = raw?;
            let event = decode(&raw)
                .map_err(|e| self.recovery_error(format!("logged event {count}: {e}")))?;
            self.engine.apply(&event, &mut effects).map_err(|e| {
                self.recovery_error(format!("logged event {count} is refused: {e}"))
            })?;
            effects.clear();
            self.engine.release_ended();
            count += 1;
        }
        self.next_seq = next_seq;
        self.summary.recovered_events = count;
        self.shared
            .counters
            .recovered_events
            .store(count, Ordering::Relaxed);
        metrics::counter!(telemetry::RECOVERED_EVENTS).increment(count);
        info!(
            events = count,
            seconds = started.elapsed().as_secs_f64(),
            "predictor state rebuilt from the log"
        );
        self.shared.recovered.store(true, Ordering::Relaxed);
        Ok(())
    }

    fn consume(&mut self) -> Result<RunSummary, ServiceError> {
        let context = SourceContext {
            store: self.store.clone(),
            topic: self.topics.events.clone(),
            shared: self.shared.clone(),
            changes: Mutex::new(Vec::new()),
        };
        let mut consumer_config = self.config.kafka.client_config();
        consumer_config
            .set("group.id", &self.config.consumer.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            // The event-time merge needs to know when a partition is read
            // to its end; statistics carry the consumer lag.
            .set("enable.partition.eof", "true")
            .set("statistics.interval.ms", "5000");
        for (key, value) in &self.config.kafka.client {
            consumer_config.set(key, value);
        }
        let consumer: BaseConsumer<SourceContext> = consumer_config
            .create_with_context(context)
            .map_err(|e| self.config.kafka.redact(e))?;
        consumer.subscribe(&[&self.topics.events])?;
        let producer: BaseProducer<SinkContext> = self
            .config
            .kafka
            .producer_config()
            .create_with_context(SinkContext {
                failed: Mutex::new(Vec::new()),
                shared: self.shared.clone(),
            })
            .map_err(|e| self.config.kafka.redact(e))?;

        let mut merge: PartitionMerge<Consumed> = PartitionMerge::default();
        let mut paused: BTreeSet<i32> = BTreeSet::new();
        let max_batch = self.config.consumer.batch_max_events;
        let linger = Duration::from_millis(self.config.consumer.batch_linger_ms);
        let max_buffered = self.config.consumer.max_buffered_per_partition;
        let mut batch: Vec<(i32, i64, Consumed)> = Vec::with_capacity(max_batch);
        let mut batch_started: Option<Instant> = None;
        let mut last_probe: Option<Instant> = None;

        loop {
            let stopping = self.shared.shutdown.load(Ordering::Relaxed);
            if last_probe.is_none_or(|t| t.elapsed() >= BROKER_PROBE_EVERY) {
                last_probe = Some(Instant::now());
                let answered = consumer
                    .fetch_metadata(Some(&self.topics.events), BROKER_PROBE_TIMEOUT)
                    .is_ok();
                self.shared.broker_up.store(answered, Ordering::Relaxed);
            }
            // Fill: everything the client has ready, waiting briefly for
            // the first message only.
            let mut idle = true;
            if !stopping {
                let mut wait = Duration::from_millis(50);
                for _ in 0..max_batch {
                    let Some(result) = consumer.poll(wait) else {
                        break;
                    };
                    wait = Duration::ZERO;
                    self.apply_assignment_changes(&consumer, &mut merge, &mut paused, &mut batch);
                    match result {
                        Ok(message) => {
                            idle = false;
                            self.shared.broker_up.store(true, Ordering::Relaxed);
                            let consumed = Consumed::of(&message);
                            let time = consumed.event.as_ref().ok().map(Event::time_us);
                            let partition = message.partition();
                            if let Some(gap) =
                                merge.push(partition, message.offset(), time, consumed)
                            {
                                warn!(
                                    partition,
                                    skipped = ?gap,
                                    "input offsets never delivered: expected on compacted or transactional topics, otherwise the broker lost records"
                                );
                                metrics::counter!(telemetry::INPUT_OFFSETS_SKIPPED, "partition" => partition.to_string())
                                    .increment((gap.end - gap.start) as u64);
                            }
                        }
                        Err(KafkaError::PartitionEOF(partition)) => merge.reached_end(partition),
                        Err(e) => warn!("consume: {e}"),
                    }
                }
                self.apply_assignment_changes(&consumer, &mut merge, &mut paused, &mut batch);
            }

            while batch.len() < max_batch {
                let Some(pending) = merge.pop() else { break };
                batch_started.get_or_insert_with(Instant::now);
                batch.push((pending.partition, pending.offset, pending.item));
            }
            self.pause_or_resume(&consumer, &merge, &mut paused, max_buffered);

            let due = batch.len() >= max_batch
                || batch_started.is_some_and(|t| t.elapsed() >= linger)
                || idle
                || stopping;
            if due && !batch.is_empty() {
                let committed = self.process(&producer, std::mem::take(&mut batch), stopping)?;
                batch_started = None;
                self.commit_to_kafka(&consumer, &committed);
            }
            if stopping {
                break;
            }
        }
        producer.flush(Duration::from_secs(10))?;
        // Leave the group now rather than when the session times out, so
        // that the partitions move to the other members at once.
        consumer.unsubscribe();
        let leaving = Instant::now();
        while leaving.elapsed() < Duration::from_millis(500) {
            let _ = consumer.poll(Duration::from_millis(50));
        }
        info!(?self.summary, "stopped");
        Ok(self.summary)
    }

    fn apply_assignment_changes(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        merge: &mut PartitionMerge<Consumed>,
        paused: &mut BTreeSet<i32>,
        batch: &mut Vec<(i32, i64, Consumed)>,
    ) {
        let changes =
            std::mem::take(&mut *consumer.context().changes.lock().expect("not poisoned"));
        for change in changes {
            paused.clear();
            match change {
                AssignmentChange::Revoked => {
                    // Released but uncommitted messages are read again by
                    // whoever gets the partition, from the stored offsets.
                    batch.clear();
                    let all: Vec<i32> = merge.partitions().collect();
                    for partition in all {
                        merge.revoke(partition);
                    }
                    self.shared.assigned.store(false, Ordering::Relaxed);
                }
                AssignmentChange::Assigned(partitions) => {
                    batch.clear();
                    for (partition, next) in &partitions {
                        merge.assign(*partition, *next);
                        metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                            .set(next.unwrap_or(0) as f64);
                    }
                    self.shared
                        .assigned
                        .store(!partitions.is_empty(), Ordering::Relaxed);
                    self.warn_if_shared(consumer, partitions.len());
                }
            }
        }
    }

    /// The predictor's state is global, so one instance must own every
    /// partition of the input topic; say so loudly when another member of
    /// the group took some (docs/operations.md, "Scaling out").
    fn warn_if_shared(&self, consumer: &BaseConsumer<SourceContext>, assigned: usize) {
        let topic = &self.topics.events;
        let Ok(metadata) = consumer.fetch_metadata(Some(topic), BROKER_PROBE_TIMEOUT) else {
            return;
        };
        let total = metadata
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .map_or(0, |t| t.partitions().len());
        if assigned < total {
            warn!(
                assigned,
                partitions = total,
                group = %self.config.consumer.group,
                "another instance shares this consumer group: each learns from only part of the input; run one instance per group and input topic"
            );
        }
    }

    /// Bound memory: stop fetching a partition that is far ahead of the
    /// others in event time, and resume it once it has drained.
    fn pause_or_resume(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        merge: &PartitionMerge<Consumed>,
        paused: &mut BTreeSet<i32>,
        max_buffered: usize,
    ) {
        for partition in merge.partitions().collect::<Vec<_>>() {
            let buffered = merge.buffered(partition);
            let mut tpl = TopicPartitionList::new();
            tpl.add_partition(&self.topics.events, partition);
            if buffered >= max_buffered && paused.insert(partition) {
                if let Err(e) = consumer.pause(&tpl) {
                    warn!("cannot pause partition {partition}: {e}");
                }
            } else if buffered <= max_buffered / 2
                && paused.remove(&partition)
                && let Err(e) = consumer.resume(&tpl)
            {
                warn!("cannot resume partition {partition}: {e}");
            }
        }
    }

    /// Apply, publish and commit one batch; the next offset per partition
    /// it committed.
    fn process(
        &mut self,
        producer: &BaseProducer<SinkContext>,
        batch: Vec<(i32, i64, Consumed)>,
        stopping: bool,
    ) -> Result<BTreeMap<i32, i64>, ServiceError> {
        let mut effects = Effects::default();
        let mut outgoing: Vec<Outgoing> = Vec::new();
        let mut logged: Vec<Vec<u8>> = Vec::new();
        let mut offsets: BTreeMap<i32, i64> = BTreeMap::new();
        let mut applied = 0u64;
        let mut dead = 0u64;
        let n = batch.len();
        for (partition, offset, consumed) in batch {
            offsets.insert(partition, offset + 1);
            let outcome = match &consumed.event {
                Ok(event) => {
                    let before = effects.outputs.len();
                    match self.engine.apply(event, &mut effects) {
                        Ok(()) => {
                            metrics::counter!(telemetry::EVENTS_CONSUMED, "type" => event.type_name())
                                .increment(1);
                            for output in &effects.outputs[before..] {
                                match output {
                                    Output::Decision(d) => {
                                        outgoing.push(self.decision_message(d, consumed.polled_at))
                                    }
                                    Output::Risk(r) => outgoing.push(self.risk_message(r)),
                                    Output::Scored { .. } => {}
                                }
                            }
                            logged.push(consumed.payload.clone());
                            applied += 1;
                            Ok(())
                        }
                        Err(rejection) => Err((rejection.reason, rejection.message)),
                    }
                }
                Err((reason, message)) => Err((*reason, message.clone())),
            };
            if let Err((reason, message)) = outcome {
                metrics::counter!(telemetry::EVENTS_DEAD_LETTERED, "reason" => reason).increment(1);
                debug!(partition, offset, reason, "dead letter: {message}");
                outgoing.push(self.dead_letter(consumed, partition, offset, reason, &message));
                dead += 1;
            }
        }

        self.publish(producer, &outgoing, stopping)?;

        let mut write = self.store.batch();
        if self.next_seq == 0 {
            let config = serde_json::to_vec(&self.config.engine).expect("config serialises");
            write.set_meta(ENGINE_CONFIG_KEY, &config);
        }
        for raw in &logged {
            write.append_log(self.next_seq, raw);
            self.next_seq += 1;
        }
        for &job_id in &effects.jobs {
            if let Some(record) = self.engine.job(job_id) {
                write.put_job(job_id, record);
            }
        }
        for &(job_id, task_index) in &effects.tasks {
            if let Some(record) = self.engine.task(job_id, task_index) {
                write.put_task(job_id, task_index, record);
            }
        }
        for &machine_id in &effects.machines {
            if let Some(record) = self.engine.machine(machine_id) {
                write.put_machine(machine_id, record);
            }
        }
        for &key in &effects.history {
            match self.engine.history().record(key) {
                Some(record) => write.put_history(&key.to_bytes(), &record),
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
        self.store.commit(write)?;
        self.engine.release_ended();
        for (&partition, &next) in &offsets {
            metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                .set(next as f64);
        }

        let mut decisions = 0u64;
        let mut scored = 0u64;
        let mut recent = self.shared.recent.lock().expect("not poisoned");
        for output in &effects.outputs {
            match output {
                Output::Decision(d) => {
                    decisions += 1;
                    *recent.decisions_by_queue.entry(d.queue).or_default() += 1;
                    metrics::counter!(telemetry::DECISIONS, "queue" => d.queue.to_string())
                        .increment(1);
                }
                Output::Risk(r) => {
                    metrics::histogram!(telemetry::RISK_PREEMPTION_PROBABILITY)
                        .record(r.score.this_vm.preemption_probability);
                }
                Output::Scored { policy, error, .. } => {
                    scored += 1;
                    recent.record_error(policy.name(), error.abs_pct);
                    metrics::histogram!(telemetry::PREDICTION_LOG_RATIO, "policy" => policy.name())
                        .record(error.log_ratio);
                    metrics::histogram!(telemetry::PREDICTION_ERROR, "policy" => policy.name())
                        .record(error.abs_pct);
                }
            }
        }
        drop(recent);
        metrics::histogram!(telemetry::BATCH_EVENTS).record(n as f64);
        metrics::gauge!(telemetry::LIVE_JOBS).set(self.engine.live_jobs() as f64);
        let c = &self.shared.counters;
        c.committed.fetch_add(n as u64, Ordering::Relaxed);
        c.applied.fetch_add(applied, Ordering::Relaxed);
        c.dead_lettered.fetch_add(dead, Ordering::Relaxed);
        c.decisions.fetch_add(decisions, Ordering::Relaxed);
        c.scored.fetch_add(scored, Ordering::Relaxed);
        c.live_jobs
            .store(self.engine.live_jobs() as u64, Ordering::Relaxed);
        self.summary.committed += n as u64;
        self.summary.applied += applied;
        self.summary.dead_lettered += dead;
        self.summary.decisions += decisions;
        Ok(offsets)
    }

    fn decision_message(
        &self,
        d: &jobcast_predictor::decision::Decision,
        polled_at: Instant,
    ) -> Outgoing {
        Outgoing {
            topic: self.topics.decisions.clone(),
            key: d.job_id.to_string().into_bytes(),
            payload: serde_json::to_vec(d).expect("decisions serialise"),
            headers: vec![
                ("jobcast.job_id", d.job_id.to_string().into_bytes()),
                ("jobcast.version", d.version.to_string().into_bytes()),
            ],
            caused_at: Some(polled_at),
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
        consumed: Consumed,
        partition: i32,
        offset: i64,
        reason: &'static str,
        message: &str,
    ) -> Outgoing {
        Outgoing {
            topic: self.topics.dead_letter.clone(),
            key: consumed.key.unwrap_or_default(),
            payload: consumed.payload,
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
            if !await_deliveries(producer, DELIVERY_TIMEOUT) {
                warn!("outputs still unacknowledged after {DELIVERY_TIMEOUT:?}");
            }
            let acknowledged = Instant::now();
            let failed =
                std::mem::take(&mut *producer.context().failed.lock().expect("not poisoned"));
            for &index in pending.iter().filter(|i| !failed.contains(i)) {
                if let Some(caused_at) = outgoing[index].caused_at {
                    metrics::histogram!(telemetry::DECISION_LATENCY)
                        .record(acknowledged.duration_since(caused_at).as_secs_f64());
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

    /// Mirror the stored offsets to Kafka, for monitoring tools only.
    fn commit_to_kafka(
        &self,
        consumer: &BaseConsumer<SourceContext>,
        offsets: &BTreeMap<i32, i64>,
    ) {
        let mut tpl = TopicPartitionList::new();
        for (&partition, &next) in offsets {
            if tpl
                .add_partition_offset(&self.topics.events, partition, Offset::Offset(next))
                .is_err()
            {
                return;
            }
        }
        if let Err(e) = consumer.commit(&tpl, CommitMode::Async) {
            debug!("mirroring offsets to Kafka: {e}");
        }
    }
}

impl Consumed {
    fn of<M: Message>(message: &M) -> Self {
        let payload = message.payload().unwrap_or_default().to_vec();
        let event = if message.payload().is_none() {
            Err(("empty", "the message has no payload".to_owned()))
        } else {
            decode(&payload).map_err(|e| (e.kind.as_str(), e.to_string()))
        };
        Consumed {
            key: message.key().map(<[u8]>::to_vec),
            payload,
            event,
            polled_at: Instant::now(),
        }
    }
}
