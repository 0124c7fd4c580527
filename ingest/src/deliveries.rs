//! Delivery reports of a producer, tallied as they arrive: the one producer
//! context of every producer jobcast runs (the service's sink, trace
//! replay, the closed loop, the bench's relay). Each message's delivery
//! opaque is its index in the caller's sequence: an event's offset in a
//! trace, an output's place in its batch.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use std::time::Duration;

use rdkafka::ClientContext;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Message, ToBytes};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, ProducerContext};
use rdkafka::statistics::Statistics;

/// What a client-level error (e.g. every broker down) is handed to.
type ErrorHook = Box<dyn Fn(&KafkaError, &str) + Send + Sync>;

/// A message the broker did not take: its index, and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Failure {
    pub index: usize,
    pub error: KafkaError,
}

/// See the module documentation.
#[derive(Default)]
pub struct Deliveries {
    delivered: AtomicU64,
    /// Key and payload bytes of the delivered messages.
    bytes: AtomicU64,
    failed: AtomicU64,
    /// Failures not yet taken, in the order they were reported.
    failures: Mutex<Vec<Failure>>,
    /// The highest acknowledged offset of each partition.
    highest_offsets: Mutex<BTreeMap<i32, i64>>,
    has_producer_id: AtomicBool,
    on_error: Option<ErrorHook>,
}

impl Deliveries {
    pub fn new() -> Self {
        Self::default()
    }

    /// Hand every client-level error to `hook` instead of logging it.
    pub fn on_error(mut self, hook: impl Fn(&KafkaError, &str) + Send + Sync + 'static) -> Self {
        self.on_error = Some(Box::new(hook));
        self
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    /// Key and payload bytes of the delivered messages.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Failed deliveries so far, taken or not.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }

    /// The failures reported since last taken.
    pub fn take_failures(&self) -> Vec<Failure> {
        std::mem::take(&mut *self.lock_failures())
    }

    /// Of the failures not taken, the one with the lowest index.
    pub fn first_failure(&self) -> Option<Failure> {
        self.lock_failures().iter().min_by_key(|f| f.index).cloned()
    }

    /// The highest acknowledged offset of each partition written to.
    pub fn highest_offsets(&self) -> BTreeMap<i32, i64> {
        self.highest_offsets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Whether the broker has given the (idempotent) producer its id: it
    /// sends nothing before. librdkafka says so only in its statistics
    /// (`statistics.interval.ms` must be set).
    pub fn has_producer_id(&self) -> bool {
        self.has_producer_id.load(Ordering::Relaxed)
    }

    fn lock_failures(&self) -> std::sync::MutexGuard<'_, Vec<Failure>> {
        // Every change is a single push or take: a panic leaves it whole.
        self.failures.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Hand `record` to `producer`. While its queue is full, serve delivery
/// reports for `wait`, call `on_wait`, and try again; any other refusal is
/// returned.
pub fn send_when_room<K, P>(
    producer: &BaseProducer<Deliveries>,
    mut record: BaseRecord<'_, K, P, usize>,
    wait: Duration,
    mut on_wait: impl FnMut(),
) -> Result<(), KafkaError>
where
    K: ToBytes + ?Sized,
    P: ToBytes + ?Sized,
{
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                producer.poll(wait);
                on_wait();
            }
            Err((error, _)) => return Err(error),
        }
    }
}

impl ClientContext for Deliveries {
    fn stats(&self, statistics: Statistics) {
        let assigned = statistics
            .eos
            .as_ref()
            .is_some_and(|eos| eos.idemp_state == "Assigned");
        if assigned {
            self.has_producer_id.store(true, Ordering::Relaxed);
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        match &self.on_error {
            Some(hook) => hook(&error, reason),
            None => tracing::warn!(target: "librdkafka", "Kafka producer: {error}: {reason}"),
        }
    }
}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, index: usize) {
        match result {
            Ok(message) => {
                self.delivered.fetch_add(1, Ordering::Relaxed);
                let size = message.payload_len() + message.key().map_or(0, <[u8]>::len);
                self.bytes.fetch_add(size as u64, Ordering::Relaxed);
                let mut highest = self
                    .highest_offsets
                    .lock()
                    .unwrap_or_else(|p| p.into_inner());
                let offset = highest.entry(message.partition()).or_insert(-1);
                *offset = (*offset).max(message.offset());
            }
            Err((error, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                self.lock_failures().push(Failure {
                    index,
                    error: error.clone(),
                });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

    use super::*;
    use crate::kafka::KafkaSettings;

    fn producer<C: ClientContext>(mock: &MockCluster<'_, C>) -> BaseProducer<Deliveries> {
        let mut config = KafkaSettings::new(mock.bootstrap_servers()).producer_config();
        config.set("statistics.interval.ms", "100");
        config.create_with_context(Deliveries::new()).unwrap()
    }

    #[test]
    fn deliveries_and_failures_are_tallied_by_index() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic("t", 2, 1).unwrap();
        let producer = producer(&mock);
        for index in 0..4usize {
            let key = index.to_string();
            let record = BaseRecord::with_opaque_to("t", index)
                .partition((index % 2) as i32)
                .key(&key)
                .payload("xy");
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        let d = producer.context();
        assert_eq!((d.delivered(), d.failed()), (4, 0));
        assert_eq!(d.bytes(), 4 * 3);
        assert_eq!(d.highest_offsets(), BTreeMap::from([(0, 1), (1, 1)]));
        // Statistics come every 100 ms; the producer has its id since it
        // delivered.
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !d.has_producer_id() && std::time::Instant::now() < deadline {
            producer.poll(Duration::from_millis(50));
        }
        assert!(d.has_producer_id());

        // The broker refuses the next request for good.
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
        );
        for index in [9usize, 7] {
            let record = BaseRecord::<(), str, usize>::with_opaque_to("t", index)
                .partition(0)
                .payload("z");
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        assert_eq!(d.failed(), 2);
        assert_eq!(d.first_failure().map(|f| f.index), Some(7));
        let mut taken: Vec<usize> = d.take_failures().iter().map(|f| f.index).collect();
        taken.sort_unstable();
        assert_eq!(taken, [7, 9]);
        assert!(d.take_failures().is_empty() && d.first_failure().is_none());
        assert_eq!(d.failed(), 2, "the count keeps what was taken");
    }

    #[test]
    fn client_errors_go_to_the_hook() {
        let seen = std::sync::Arc::new(AtomicU64::new(0));
        let counter = seen.clone();
        let d = Deliveries::new().on_error(move |_, _| {
            counter.fetch_add(1, Ordering::Relaxed);
        });
        d.error(KafkaError::Canceled, "test");
        assert_eq!(seen.load(Ordering::Relaxed), 1);
    }
}
