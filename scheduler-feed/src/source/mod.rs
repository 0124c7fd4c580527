//! The pipeline's source: the input consumer on a thread of its own.
//!
//! Reading the input is a third of the pipeline's work (polling librdkafka,
//! copying and decoding each message, the event-time merge), and none of
//! it needs the engine. So the source thread polls every partition of the
//! input topic, decodes, merges by event time (see [`PartitionMerge`]) and
//! cuts the merged stream into batches, while the pipeline thread applies,
//! publishes and commits the batch before: two cores busy instead of one.
//!
//! The source hands merged messages over as they are released, and the
//! pipeline takes all that wait whenever it is free ([`Handover`]): a
//! batch is what arrived while the one before was processed, so no message
//! waits for a batch to fill, and under load batches grow on their own.
//! Once a batch's worth waits, the source waits too, so the merge (and,
//! past `max_buffered_events`, the paused partitions: see [`Throttle`])
//! bounds memory. The order of events is the merge's, whichever thread
//! reads it.

use std::collections::BTreeSet;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, decode};
use jobcast_storage::state::StateStore;
use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::statistics::Statistics;
use rdkafka::types::RDKafkaRespErr;
use rdkafka::{Offset, TopicPartitionList};
use tracing::{info, warn};

mod idle;
mod partition_merge;

use idle::IdleWatch;
use partition_merge::{PartitionMerge, Weigh};

use crate::config::ConsumerConfig;
use crate::error::{DeadLetter, ServiceError};
use crate::shared::Shared;
use crate::telemetry::{self, log_librdkafka};
use jobcast_ingest::config::ConfigError;

/// librdkafka's `fetch.queue.backoff.ms` for the input consumer. librdkafka
/// stops fetching a partition for this long once its prefetch queue would
/// reach its queue limits (`fetch.queue.backoff.ms`, 1,000 ms by default).
/// Reading a backlog, the merge drains that queue within milliseconds, but
/// the partition then stays empty for the rest of the second and holds
/// every other partition back (measured: 0.6–0.8 s idle in a 3.8 s run).
pub const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// How often, and how patiently, the source asks the brokers for metadata
/// to keep `/readyz` true to whether they answer, input or not.
const BROKER_PROBE_EVERY: Duration = Duration::from_secs(2);
const BROKER_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The longest the source waits for a message when there is nothing else
/// to do.
const POLL_WAIT: Duration = Duration::from_millis(50);

/// Merged messages as (partition, offset, message), in the merge's order.
pub(crate) type Batch = Vec<(i32, i64, Consumed)>;

/// What [`Source::next`] found.
pub(crate) enum Polled {
    /// Everything that waited.
    Batch(Batch),
    /// Nothing was ready in time.
    Idle,
    /// The source handed over all it held and stopped (the service is
    /// shutting down).
    Ended,
}

/// One consumed message on its way through the pipeline.
pub struct Consumed {
    pub key: Option<Vec<u8>>,
    /// `None` for a message without a payload (a tombstone).
    pub payload: Option<Vec<u8>>,
    pub event: Result<Event, DeadLetter>,
    pub polled_at: Instant,
}

/// A message costs its key and payload (the decoded event is small beside
/// a large payload, and bounded by the decoder's limits).
impl Weigh for Consumed {
    fn bytes(&self) -> usize {
        self.key.as_ref().map_or(0, Vec::len) + self.payload.as_ref().map_or(0, Vec::len)
    }
}

impl Consumed {
    /// Decode a message (from the input topic, or the log).
    pub fn new(key: Option<Vec<u8>>, payload: Option<Vec<u8>>) -> Self {
        let event = match &payload {
            None => Err(DeadLetter::Empty),
            Some(bytes) => decode(bytes).map_err(DeadLetter::Decode),
        };
        Consumed {
            key,
            payload,
            event,
            polled_at: Instant::now(),
        }
    }

    fn of<M: Message>(message: &M) -> Self {
        Consumed::new(
            message.key().map(<[u8]>::to_vec),
            message.payload().map(<[u8]>::to_vec),
        )
    }
}

/// The input consumer's context: reads every partition of the input topic,
/// outside any consumer group (every instance applies every event; see the
/// service's module docs), from the offsets stored in RocksDB.
pub(crate) struct InputContext {
    pub topic: String,
    pub shared: Arc<Shared>,
}

impl ClientContext for InputContext {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, message: &str) {
        log_librdkafka(level, fac, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        telemetry::kafka_error("input", &error);
        // A partition's end is no error, and "all brokers down" a tally
        // of the reasons reported before it.
        if !matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::PartitionEOF | RDKafkaErrorCode::AllBrokersDown)
        ) {
            self.shared.kafka_error(format!("{error}: {reason}"));
        }
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
        // librdkafka's own `consumer_lag` counts from committed offsets,
        // which this consumer never has (its offsets live in RocksDB).
        for (&partition, p) in &topic.partitions {
            if partition >= 0 && p.hi_offset >= 0 && p.app_offset >= 0 {
                metrics::gauge!(telemetry::CONSUMER_LAG, "partition" => partition.to_string())
                    .set((p.hi_offset - p.app_offset).max(0) as f64);
            }
        }
    }
}

impl ConsumerContext for InputContext {}

/// How large a batch may grow: whichever bound comes first.
#[derive(Debug, Clone, Copy)]
struct BatchLimits {
    events: usize,
    bytes: usize,
}

impl Waiting {
    fn full(&self, limits: BatchLimits) -> bool {
        self.batch.len() >= limits.events || self.bytes >= limits.bytes
    }

    fn push(&mut self, pending: partition_merge::Pending<Consumed>) {
        self.bytes += pending.item.bytes();
        self.batch
            .push((pending.partition, pending.offset, pending.item));
    }
}

/// The running source: batches come out of [`Source::next`]. Dropping it
/// stops the thread.
pub(crate) struct Source {
    handover: Arc<Handover>,
    limits: BatchLimits,
    linger: Duration,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Source {
    /// Start reading every partition of `consumer`'s topic (and those it
    /// gains) from the offsets stored in `store`.
    pub fn start(
        consumer: BaseConsumer<InputContext>,
        settings: &ConsumerConfig,
        store: Arc<StateStore>,
        refuse_gaps: bool,
    ) -> Result<Source, ServiceError> {
        let topic = consumer.context().topic.clone();
        let topic_c = CString::new(topic.as_str())
            .map_err(|_| ConfigError::new("topics.events", "contains NUL"))?;
        let handover = Arc::new(Handover::default());
        let stop = Arc::new(AtomicBool::new(false));
        let limits = BatchLimits {
            events: settings.batch_max_events,
            bytes: settings.batch_max_bytes,
        };
        let reader = Reader {
            consumer,
            topic,
            topic_c,
            store,
            stop: stop.clone(),
            handover: handover.clone(),
            merge: PartitionMerge::default(),
            limits,
            budget: BufferBudget {
                events: settings.max_buffered_events,
                bytes: settings.max_buffered_bytes,
            },
            throttle: Throttle::new(LOAD_UNIT),
            idle: IdleWatch::new(settings.idle_partition_timeout()),
            refuse_gaps,
        };
        let thread = std::thread::Builder::new()
            .name("source".into())
            .spawn(move || reader.run())
            .map_err(ServiceError::Thread)?;
        Ok(Source {
            handover,
            limits,
            linger: Duration::from_millis(settings.batch_linger_ms),
            stop,
            thread: Some(thread),
        })
    }

    /// Everything waiting, once the oldest has waited `batch_linger_ms`
    /// (or a batch's worth waits), waiting at most `wait`. Once the service
    /// is shutting down, the source hands over the merged messages it holds
    /// (at most a batch) and ends. An error is why the source failed, after
    /// what it had merged before was taken.
    pub fn next(&self, wait: Duration) -> Result<Polled, ServiceError> {
        self.handover.take(self.limits, self.linger, wait)
    }
}

impl Drop for Source {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // A reader waiting for the pipeline to take a batch wakes and ends.
        self.handover.lock().closed = true;
        self.handover.taken.notify_one();
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            warn!("the source thread panicked");
        }
    }
}

/// Merged messages on their way from the source thread to the pipeline.
#[derive(Default)]
struct Handover {
    state: Mutex<Waiting>,
    /// Messages were handed over, or the source ended.
    arrived: Condvar,
    /// The pipeline took what waited, or went away.
    taken: Condvar,
}

#[derive(Default)]
struct Waiting {
    batch: Batch,
    /// Bytes of the messages in `batch` ([`Weigh`]).
    bytes: usize,
    /// When the oldest message waiting was handed over.
    since: Option<Instant>,
    /// Why the source stopped, if it failed; the pipeline takes what
    /// waits first.
    error: Option<ServiceError>,
    /// The source has stopped: nothing more will come.
    ended: bool,
    /// The pipeline has gone: nothing more will be taken.
    closed: bool,
}

impl Handover {
    /// The state; a thread that panicked holding it left it whole (every
    /// change is a single assignment or push).
    fn lock(&self) -> MutexGuard<'_, Waiting> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The source's side: `waiting` (this handover's, locked) has had
    /// messages added to the `before` it held.
    fn added(&self, waiting: &mut Waiting, before: usize) {
        if waiting.batch.len() > before {
            waiting.since.get_or_insert_with(Instant::now);
            self.arrived.notify_one();
        }
    }

    /// The pipeline's side: see [`Source::next`].
    fn take(
        &self,
        limits: BatchLimits,
        linger: Duration,
        wait: Duration,
    ) -> Result<Polled, ServiceError> {
        let deadline = Instant::now() + wait;
        let mut waiting = self.lock();
        loop {
            let finished = waiting.error.is_some() || waiting.ended;
            let due = waiting.since.is_some_and(|t| t.elapsed() >= linger)
                || waiting.full(limits)
                || finished;
            if due && !waiting.batch.is_empty() {
                waiting.since = None;
                waiting.bytes = 0;
                let batch = std::mem::take(&mut waiting.batch);
                self.taken.notify_one();
                return Ok(Polled::Batch(batch));
            }
            if finished {
                return waiting.error.take().map_or(Ok(Polled::Ended), Err);
            }
            let now = Instant::now();
            let until = waiting
                .since
                .map_or(deadline, |t| (t + linger).min(deadline));
            if now >= until {
                return Ok(Polled::Idle);
            }
            waiting = self
                .arrived
                .wait_timeout(waiting, until - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }
}

/// The source thread's state.
struct Reader {
    consumer: BaseConsumer<InputContext>,
    topic: String,
    topic_c: CString,
    store: Arc<StateStore>,
    stop: Arc<AtomicBool>,
    handover: Arc<Handover>,
    merge: PartitionMerge<Consumed>,
    limits: BatchLimits,
    budget: BufferBudget,
    throttle: Throttle,
    idle: IdleWatch,
    /// Whether a stored offset the broker no longer holds stops the
    /// service (`auto.offset.reset=error`, the default) rather than
    /// resuming past the gap.
    refuse_gaps: bool,
}

impl Reader {
    fn shared(&self) -> &Shared {
        &self.consumer.context().shared
    }

    fn run(mut self) {
        let result = self.read();
        let mut waiting = self.handover.lock();
        waiting.ended = true;
        waiting.error = result.err();
        self.handover.arrived.notify_one();
    }

    /// Poll, merge and hand over until the service shuts down (or the
    /// pipeline goes away).
    fn read(&mut self) -> Result<(), ServiceError> {
        let mut last_probe: Option<Instant> = None;
        loop {
            let stopping =
                self.shared().shutdown.load(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed);
            if last_probe.is_none_or(|t| t.elapsed() >= BROKER_PROBE_EVERY) {
                last_probe = Some(Instant::now());
                self.follow_new_partitions()?;
            }
            // Everything the client has ready, waiting for the first
            // message only if the merge has nothing to release.
            if !stopping {
                let wait = if self.merge.ready() {
                    Duration::ZERO
                } else {
                    POLL_WAIT
                };
                self.poll(wait)?;
            }
            let full = self.hand_over();
            self.idle.check(&mut self.merge, Instant::now());
            self.pause_or_resume();
            if stopping {
                return Ok(());
            }
            if full {
                // A batch's worth waits: poll no more until the pipeline
                // takes it, or for a poll wait at most (then what the
                // client fetched goes into the merge, which the throttle
                // bounds).
                let waiting = self.handover.lock();
                if waiting.closed {
                    return Ok(());
                }
                if waiting.full(self.limits) {
                    drop(
                        self.handover
                            .taken
                            .wait_timeout(waiting, POLL_WAIT)
                            .unwrap_or_else(PoisonError::into_inner),
                    );
                }
            }
        }
    }

    /// Move what the merge can release to the pipeline, until a batch's
    /// worth waits; whether one does.
    fn hand_over(&mut self) -> bool {
        let handover = self.handover.clone();
        let mut waiting = handover.lock();
        let before = waiting.batch.len();
        // Releasing may drain a partition; one read to its high watermark
        // holds nothing back, and need not wait for the consumer to report
        // its end.
        loop {
            while !waiting.full(self.limits) {
                let Some(pending) = self.merge.pop() else {
                    break;
                };
                waiting.push(pending);
            }
            if waiting.full(self.limits) || !self.caught_up() {
                break;
            }
        }
        handover.added(&mut waiting, before);
        waiting.full(self.limits)
    }

    /// Poll up to a batch of messages into the merge, waiting at most
    /// `wait` for the first. A partition whose next offset the broker no
    /// longer holds stops the source (see [`Reader::refuse_gaps`]).
    fn poll(&mut self, mut wait: Duration) -> Result<(), ServiceError> {
        for _ in 0..self.limits.events {
            let Some(result) = self.consumer.poll(wait) else {
                break;
            };
            wait = Duration::ZERO;
            match result {
                Ok(message) => {
                    self.shared().broker_up.store(true, Ordering::Relaxed);
                    let consumed = Consumed::of(&message);
                    let time = consumed.event.as_ref().ok().map(Event::time_us);
                    let partition = message.partition();
                    if let Some(gap) = self.merge.push(partition, message.offset(), time, consumed)
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
                Err(KafkaError::PartitionEOF(partition)) => self.merge.reached_end(partition),
                Err(e @ KafkaError::MessageConsumption(RDKafkaErrorCode::AutoOffsetReset)) => {
                    return Err(ServiceError::InputReset(e));
                }
                Err(e) => warn!("consume: {e}"),
            }
        }
        Ok(())
    }

    /// Mark the partitions holding the merge back that the last fetch
    /// shows read to their high watermark; whether any was.
    fn caught_up(&mut self) -> bool {
        let mut any = false;
        for partition in self.merge.holding_back() {
            if let Some(high) = cached_high_watermark(&self.consumer, &self.topic_c, partition) {
                any |= self.merge.caught_up(partition, high);
            }
        }
        any
    }

    /// Probe the brokers (for `/readyz`) and start reading partitions the
    /// input topic gained (all of them on the first call), from their
    /// stored offsets.
    fn follow_new_partitions(&mut self) -> Result<(), ServiceError> {
        let topic = &self.topic;
        let shared = &self.consumer.context().shared;
        let Ok(metadata) = self
            .consumer
            .fetch_metadata(Some(topic), BROKER_PROBE_TIMEOUT)
        else {
            shared.broker_up.store(false, Ordering::Relaxed);
            return Ok(());
        };
        shared.broker_up.store(true, Ordering::Relaxed);
        let known: BTreeSet<i32> = self.merge.partitions().collect();
        let new: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .filter(|p| !known.contains(p))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let stored = self.store.offsets(topic)?;
        let mut tpl = TopicPartitionList::new();
        for &partition in &new {
            let next = stored.get(&partition).copied();
            if let Some(next) = next.filter(|_| self.refuse_gaps) {
                let (low, high) =
                    self.consumer
                        .fetch_watermarks(topic, partition, BROKER_PROBE_TIMEOUT)?;
                if next < low {
                    return Err(ServiceError::InputGone {
                        topic: topic.clone(),
                        partition,
                        stored: next,
                        low,
                    });
                }
                if next > high {
                    return Err(ServiceError::InputAhead {
                        topic: topic.clone(),
                        partition,
                        stored: next,
                        high,
                    });
                }
            }
            tpl.add_partition_offset(
                topic,
                partition,
                next.map_or(Offset::Beginning, Offset::Offset),
            )?;
            self.merge.assign(partition, next);
            metrics::gauge!(telemetry::COMMITTED_OFFSET, "partition" => partition.to_string())
                .set(next.unwrap_or(0) as f64);
        }
        self.consumer.incremental_assign(&tpl)?;
        info!(partitions = ?new, "reading input partitions (partition, stored offset)");
        Ok(())
    }

    /// Bound the merge's memory (see [`Throttle`]).
    fn pause_or_resume(&mut self) {
        let (merge, budget) = (&self.merge, self.budget);
        let (pause, resume) = self.throttle.update(
            merge
                .partitions()
                .map(|p| (p, budget.load(merge.buffered(p), merge.buffered_bytes(p)))),
        );
        let tpl = |partitions: &[i32]| {
            let mut tpl = TopicPartitionList::new();
            for &partition in partitions {
                tpl.add_partition(&self.topic, partition);
            }
            tpl
        };
        let (events, bytes) = merge.partitions().fold((0, 0), |(events, bytes), p| {
            (events + merge.buffered(p), bytes + merge.buffered_bytes(p))
        });
        metrics::gauge!(telemetry::INPUT_BUFFERED).set(events as f64);
        metrics::gauge!(telemetry::INPUT_BUFFERED_BYTES).set(bytes as f64);
        if !pause.is_empty() {
            let counters = &self.shared().counters;
            counters
                .input_pauses
                .fetch_add(pause.len() as u64, Ordering::Relaxed);
            metrics::counter!(telemetry::INPUT_PAUSES).increment(pause.len() as u64);
            if let Err(e) = self.consumer.pause(&tpl(&pause)) {
                warn!("cannot pause partitions {pause:?}: {e}");
            }
        }
        if !resume.is_empty()
            && let Err(e) = self.consumer.resume(&tpl(&resume))
        {
            warn!("cannot resume partitions {resume:?}: {e}");
        }
    }
}

/// The merge's two budgets, events and bytes, as one load: a partition's
/// is the larger of its shares of the two, in millionths
/// ([`LOAD_UNIT`]), so that the [`Throttle`] pauses when either budget
/// is reached.
#[derive(Debug, Clone, Copy)]
struct BufferBudget {
    events: usize,
    bytes: usize,
}

/// A full budget's load.
const LOAD_UNIT: usize = 1_000_000;

impl BufferBudget {
    fn load(&self, events: usize, bytes: usize) -> usize {
        let share = |n: usize, budget: usize| {
            (n as u128 * LOAD_UNIT as u128 / budget.max(1) as u128).min(usize::MAX as u128) as usize
        };
        share(events, self.events).max(share(bytes, self.bytes))
    }
}

/// Which partitions the source stops fetching, so that the event-time
/// merge holds about `budget` (of load: events, or bytes, see
/// [`BufferBudget`]) across all partitions (at most about twice that).
///
/// Once the merge holds `budget` events, each partition holding its
/// share (`budget` / partitions) or more is paused, and fetched again once it
/// is down to half its share, or the merge to half the budget: before it
/// runs dry, so that its refetch overlaps the draining. A partition below
/// its share goes on being fetched; above all, one with nothing waiting
/// must be, since the merge releases nothing until every partition has
/// something (or is read to its end).
///
/// The budget is a total rather than a fixed cap per partition because
/// brokers that serve a backlog one partition after another (tansu does)
/// fill some partitions' queues long before the last one delivers, and
/// every pause costs a refetch: librdkafka discards what it had fetched
/// ahead for a paused partition
/// ([librdkafka#5343](https://github.com/confluentinc/librdkafka/issues/5343)).
#[derive(Debug)]
struct Throttle {
    budget: usize,
    paused: BTreeSet<i32>,
}

impl Throttle {
    fn new(budget: usize) -> Self {
        Throttle {
            budget,
            paused: BTreeSet::new(),
        }
    }

    /// Given what each partition has buffered, the partitions to pause and
    /// those to resume now.
    fn update(
        &mut self,
        buffered: impl Iterator<Item = (i32, usize)> + Clone,
    ) -> (Vec<i32>, Vec<i32>) {
        let (partitions, total) = buffered
            .clone()
            .fold((0, 0), |(count, total), (_, n)| (count + 1, total + n));
        let share = (self.budget / partitions.max(1)).max(1);
        let (mut pause, mut resume) = (Vec::new(), Vec::new());
        for (partition, n) in buffered {
            if self.paused.contains(&partition) {
                if n <= share / 2 || total <= self.budget / 2 {
                    self.paused.remove(&partition);
                    resume.push(partition);
                }
            } else if n >= share && total >= self.budget {
                self.paused.insert(partition);
                pause.push(partition);
            }
        }
        (pause, resume)
    }
}

/// The high watermark of `partition` in librdkafka's last fetch response
/// for it, without asking the broker; `None` before the first. rust-rdkafka
/// does not wrap `rd_kafka_get_watermark_offsets`.
fn cached_high_watermark<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &CStr,
    partition: i32,
) -> Option<i64> {
    let (mut low, mut high) = (-1i64, -1i64);
    // SAFETY: the client handle lives as long as `consumer`, `topic` is
    // NUL-terminated, and librdkafka writes only the two out-parameters.
    let error = unsafe {
        rdkafka::bindings::rd_kafka_get_watermark_offsets(
            consumer.client().native_ptr(),
            topic.as_ptr(),
            partition,
            &mut low,
            &mut high,
        )
    };
    (error == RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR && high >= 0).then_some(high)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The source's side of a handover: `offsets` of partition 0 arrive.
    fn hand_over(handover: &Handover, offsets: std::ops::Range<i64>) {
        let mut waiting = handover.lock();
        let before = waiting.batch.len();
        for offset in offsets {
            waiting.push(partition_merge::Pending {
                partition: 0,
                offset,
                time_us: 0,
                item: Consumed::new(None, Some(b"{}".to_vec())),
            });
        }
        handover.added(&mut waiting, before);
    }

    /// Batches of at most `n` events, however many bytes.
    fn events(n: usize) -> BatchLimits {
        BatchLimits {
            events: n,
            bytes: usize::MAX,
        }
    }

    #[test]
    fn a_batch_is_due_once_it_holds_its_bytes_whatever_its_count() {
        let handover = Handover::default();
        let ms = Duration::from_millis;
        // Messages of 2 bytes each; at most 5 bytes, however long the linger.
        let limits = BatchLimits {
            events: 100,
            bytes: 5,
        };
        hand_over(&handover, 0..2);
        assert!(matches!(
            handover.take(limits, Duration::from_secs(60), ms(0)),
            Ok(Polled::Idle)
        ));
        hand_over(&handover, 2..3);
        assert_eq!(
            taken(handover.take(limits, Duration::from_secs(60), ms(0))),
            [0, 1, 2]
        );
        assert_eq!(handover.lock().bytes, 0, "taken with its batch");
    }

    #[test]
    fn either_budget_loads_the_throttle() {
        let budget = BufferBudget {
            events: 100,
            bytes: 1_000,
        };
        assert_eq!(budget.load(10, 100), LOAD_UNIT / 10);
        // A few large messages: the bytes budget is the one reached.
        assert_eq!(budget.load(4, 1_000), LOAD_UNIT);
        assert_eq!(budget.load(100, 0), LOAD_UNIT);
        let mut throttle = Throttle::new(LOAD_UNIT);
        let (pause, _) =
            throttle.update([(0, budget.load(2, 900)), (1, budget.load(1, 100))].into_iter());
        assert_eq!(pause, [0], "paused by its bytes alone");
    }

    fn offsets(batch: &Batch) -> Vec<i64> {
        batch.iter().map(|(_, offset, _)| *offset).collect()
    }

    /// The offsets of what the pipeline took: a batch, or a panic.
    fn taken(polled: Result<Polled, ServiceError>) -> Vec<i64> {
        match polled {
            Ok(Polled::Batch(batch)) => offsets(&batch),
            Ok(Polled::Idle) => panic!("nothing was ready"),
            Ok(Polled::Ended) => panic!("the source ended"),
            Err(e) => panic!("the source failed: {e}"),
        }
    }

    #[test]
    fn the_pipeline_takes_everything_waiting_as_soon_as_it_arrives() {
        let handover = Arc::new(Handover::default());
        let ms = Duration::from_millis;
        assert!(matches!(
            handover.take(events(10), ms(0), ms(1)),
            Ok(Polled::Idle)
        ));

        hand_over(&handover, 0..3);
        hand_over(&handover, 3..5);
        assert_eq!(
            taken(handover.take(events(10), ms(0), ms(1))),
            [0, 1, 2, 3, 4]
        );

        // A pipeline waiting wakes when messages arrive, long before its
        // wait is up.
        let source = {
            let handover = handover.clone();
            std::thread::spawn(move || {
                std::thread::sleep(ms(20));
                hand_over(&handover, 5..6);
            })
        };
        let asked = Instant::now();
        let batch = taken(handover.take(events(10), ms(0), Duration::from_secs(60)));
        assert!(asked.elapsed() < Duration::from_secs(60));
        assert_eq!(batch, [5]);
        source.join().unwrap();
    }

    #[test]
    fn a_linger_holds_a_batch_until_it_passes_or_the_batch_is_full() {
        let handover = Handover::default();
        let ms = Duration::from_millis;
        hand_over(&handover, 0..2);
        // Not yet due: the oldest message has not waited 200 ms.
        assert!(matches!(
            handover.take(events(3), ms(200), ms(0)),
            Ok(Polled::Idle)
        ));
        let asked = Instant::now();
        let batch = taken(handover.take(events(3), ms(200), Duration::from_secs(60)));
        assert!(asked.elapsed() >= ms(150), "{:?}", asked.elapsed());
        assert_eq!(batch, [0, 1]);

        // A full batch goes at once.
        hand_over(&handover, 2..5);
        assert_eq!(
            taken(handover.take(events(3), Duration::from_secs(60), ms(0))),
            [2, 3, 4]
        );
    }

    #[test]
    fn what_waits_goes_before_the_sources_end_or_error() {
        let handover = Handover::default();
        let ms = Duration::from_millis;
        hand_over(&handover, 0..2);
        handover.lock().error = Some(ServiceError::Thread(std::io::Error::other(
            "the source failed",
        )));
        assert_eq!(
            taken(handover.take(events(10), Duration::from_secs(60), ms(0))),
            [0, 1]
        );
        match handover.take(events(10), ms(0), ms(0)) {
            Err(ServiceError::Thread(e)) => assert_eq!(e.to_string(), "the source failed"),
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("the error was not passed on"),
        }

        let handover = Handover::default();
        hand_over(&handover, 0..1);
        handover.lock().ended = true;
        assert_eq!(taken(handover.take(events(10), ms(0), ms(0))), [0]);
        assert!(matches!(
            handover.take(events(10), ms(0), ms(0)),
            Ok(Polled::Ended)
        ));
    }

    #[test]
    fn the_throttle_pauses_partitions_over_their_share_once_the_budget_is_reached() {
        // Three partitions: a share of 33.
        let mut t = Throttle::new(100);
        let none: (Vec<i32>, Vec<i32>) = (vec![], vec![]);
        assert_eq!(t.update([(0, 60), (1, 39), (2, 0)].into_iter()), none);
        // At the budget: the two partitions over their share stop; the
        // empty one, which the merge is waiting for, goes on.
        assert_eq!(
            t.update([(0, 60), (1, 40), (2, 0)].into_iter()),
            (vec![0, 1], vec![])
        );
        assert_eq!(t.update([(0, 60), (1, 40), (2, 20)].into_iter()), none);
        assert_eq!(
            t.update([(0, 60), (1, 40), (2, 33)].into_iter()),
            (vec![2], vec![])
        );
        // Over half the budget: only a partition down to half its share
        // (16) resumes.
        assert_eq!(
            t.update([(0, 40), (1, 16), (2, 17)].into_iter()),
            (vec![], vec![1])
        );
        assert_eq!(t.update([(0, 40), (1, 16), (2, 17)].into_iter()), none);
        // Down to half the budget: every paused partition resumes.
        assert_eq!(
            t.update([(0, 31), (1, 2), (2, 17)].into_iter()),
            (vec![], vec![0, 2])
        );
    }

    proptest! {
        /// Whatever the merge holds, the source keeps fetching every
        /// partition the merge waits for, and past the budget stops every
        /// one over its share.
        #[test]
        fn the_throttle_never_stalls_the_merge(
            budget in 1usize..50,
            steps in proptest::collection::vec(proptest::collection::vec(0usize..30, 4), 1..40),
        ) {
            let mut t = Throttle::new(budget);
            let mut paused = BTreeSet::new();
            for buffered in steps {
                let parts = buffered.iter().enumerate().map(|(p, &n)| (p as i32, n));
                let (pause, resume) = t.update(parts.clone());
                for p in pause {
                    prop_assert!(paused.insert(p), "paused twice");
                }
                for p in resume {
                    prop_assert!(paused.remove(&p), "resumed while not paused");
                }
                let total: usize = buffered.iter().sum();
                let share = (budget / buffered.len()).max(1);
                for (p, n) in parts {
                    if n == 0 {
                        prop_assert!(!paused.contains(&p), "a partition the merge waits for is paused");
                    } else if total >= budget && n >= share {
                        prop_assert!(paused.contains(&p), "over the budget, partition {} still fetched", p);
                    }
                }
            }
        }
    }
}
