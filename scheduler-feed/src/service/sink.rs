//! The sink: produce a batch's outputs (decisions, risk scores, dead
//! letters) and wait until the broker has acknowledged every one. A failed
//! delivery is produced again, with backoff; the batch is committed only
//! once all are acknowledged, which makes the output at-least-once.
//!
//! Some failures no retry can mend: a message larger than the topic
//! allows, a topic that does not exist, a producer not allowed to write
//! it. Retried, such an output would stop the instance for good, and then
//! every instance the group moved its partition to. Those are parked in
//! the store with the batch (`parked`, see `jobcast_storage::state::
//! ParkedOutput`), counted in `jobcast_outputs_parked_total{topic,reason}`,
//! and the stream goes on. A producer that hit a fatal error (an
//! idempotent producer whose sequence broke) takes nothing any more: it is
//! replaced, and the outputs it failed are produced again by the new one.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use jobcast_ingest::deliveries::{Deliveries, send_when_room};
use jobcast_ingest::kafka::{KafkaSettings, Topics};
use jobcast_storage::state::{ParkedOutput, StateBatch, unix_seconds};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext, PurgeConfig};
use tracing::{error, warn};

use crate::error::ServiceError;
use crate::shared::Shared;
use crate::telemetry;

/// How long a batch's outputs may be in flight before the service says so
/// (and, shutting down, gives up on them).
const DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`await_deliveries`] sleeps when no acknowledgement came in.
const DELIVERY_POLL_SLEEP: Duration = Duration::from_micros(100);

/// How often a long wait for acknowledgements serves the caller (the
/// pipeline polls its group member): a member not polled for
/// `max.poll.interval.ms` leaves the group, so a broker that is slow to
/// acknowledge would otherwise cost the instance its partitions.
const SERVE_EVERY: Duration = Duration::from_millis(500);

/// Calls its callback at most every [`SERVE_EVERY`] while the sink waits.
struct Serving<'a> {
    serve: &'a mut dyn FnMut(),
    last: Instant,
}

impl Serving<'_> {
    fn tick(&mut self) {
        if self.last.elapsed() >= SERVE_EVERY {
            (self.serve)();
            self.last = Instant::now();
        }
    }

    /// Sleep `duration`, serving meanwhile.
    fn sleep(&mut self, duration: Duration) {
        let until = Instant::now() + duration;
        loop {
            let now = Instant::now();
            let Some(left) = until.checked_duration_since(now) else {
                return;
            };
            let next_serve = (self.last + SERVE_EVERY).saturating_duration_since(now);
            std::thread::sleep(left.min(next_serve));
            self.tick();
        }
    }
}

/// How long the producer may take to look up an output topic at start.
const OUTPUT_LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the first look at the brokers may take before a start says
/// they cannot be reached.
const BROKER_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Serve `producer`'s delivery reports until nothing is in flight (true) or
/// `timeout` passes. `BaseProducer::flush` would do the same but sleeps in
/// 100 ms steps, which put 100 ms on every batch's event → decision latency;
/// `BaseProducer::poll(timeout)` returns only at its deadline and spins
/// through the last millisecond of it (librdkafka waits in whole
/// milliseconds), which took a core from the broker and the consumer while
/// every batch waited. So: serve what is there, and sleep briefly when
/// nothing was.
fn await_deliveries<C: ProducerContext>(
    producer: &BaseProducer<C>,
    timeout: Duration,
    serving: &mut Serving<'_>,
) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        serving.tick();
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

/// A message to produce.
pub(super) struct Outgoing {
    pub(super) topic: String,
    pub(super) key: Vec<u8>,
    pub(super) payload: Vec<u8>,
    pub(super) headers: Vec<(Cow<'static, str>, Vec<u8>)>,
    /// When the input message that caused it was consumed (decisions).
    pub(super) caused_at: Option<Instant>,
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

/// The `reason` labels of `jobcast_outputs_parked_total`.
const REFUSALS: [&str; 4] = ["too_large", "unknown_topic", "not_authorized", "invalid"];

/// Why the broker will never take an output, if it never will: one of
/// [`REFUSALS`]. Everything else (timeouts, a broker or leader gone, full
/// queues, errors not known here) is retried.
fn refused_for_good(error: &KafkaError) -> Option<&'static str> {
    use RDKafkaErrorCode::*;
    let [too_large, unknown_topic, not_authorized, invalid] = REFUSALS;
    Some(match error.rdkafka_error_code()? {
        MessageSizeTooLarge | MessageBatchTooLarge | InvalidMessageSize => too_large,
        UnknownTopic | UnknownTopicOrPartition | UnknownTopicId | InvalidTopic => unknown_topic,
        TopicAuthorizationFailed | ClusterAuthorizationFailed => not_authorized,
        InvalidRecord | PolicyViolation => invalid,
        _ => return None,
    })
}

/// Park `message`, which the broker refused for good (`reason`, `error`),
/// in the batch's write.
fn park_output(
    message: &Outgoing,
    reason: &'static str,
    error: &KafkaError,
    park: &mut StateBatch<'_>,
) {
    error!(
        topic = message.topic,
        reason,
        "the broker refused an output for good ({error}); parked in the store \
         (`jobcast admin parked` lists it and publishes it again)"
    );
    metrics::counter!(telemetry::OUTPUTS_PARKED, "topic" => message.topic.clone(), "reason" => reason)
        .increment(1);
    park.park(&ParkedOutput {
        topic: message.topic.clone(),
        key: message.key.clone(),
        payload: message.payload.clone(),
        headers: message
            .headers
            .iter()
            .map(|(name, value)| (name.to_string(), value.clone()))
            .collect(),
        reason: reason.to_owned(),
        error: error.to_string(),
        parked_at: unix_seconds(),
    });
}

/// The output producer, built from the service's Kafka settings.
fn producer(
    kafka: &KafkaSettings,
    shared: &Arc<Shared>,
) -> Result<BaseProducer<Deliveries>, ServiceError> {
    // Readiness turns false as soon as the producer loses every broker:
    // the pipeline may be waiting for acknowledgements then, not probing.
    let readiness = shared.clone();
    let deliveries = Deliveries::new().on_error(move |error, reason| {
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown) {
            // A tally ("1/1 brokers are down"), not a reason.
            readiness.broker_up.store(false, Ordering::Relaxed);
        } else {
            readiness.kafka_error(format!("{error}: {reason}"));
        }
        warn!("Kafka producer: {error}: {reason}");
    });
    output_producer_config(kafka)
        .create_with_context(deliveries)
        .map_err(|e| kafka.redact(e).into())
}

/// The sink: the producer of the service's outputs.
pub(super) struct Sink {
    producer: BaseProducer<Deliveries>,
    /// To build a new producer when this one fails for good.
    kafka: KafkaSettings,
    shared: Arc<Shared>,
}

impl Sink {
    pub(super) fn new(kafka: &KafkaSettings, shared: Arc<Shared>) -> Result<Sink, ServiceError> {
        Ok(Sink {
            producer: producer(kafka, &shared)?,
            kafka: kafka.clone(),
            shared,
        })
    }

    /// Have the producer connect and learn where its topics' partitions
    /// live before the first batch: otherwise the first batch's outputs
    /// wait for that (measured: 0.8 s against tansu on fresh topics). A
    /// topic that cannot be looked up is only reported here; producing to
    /// it fails as any failed delivery does. Each topic's count of parked
    /// outputs starts here, at 0.
    pub(super) fn warm_up(&self, topics: &Topics) {
        for topic in topics.outputs() {
            // At 0 from the start, so that `increase()` sees the first.
            for reason in REFUSALS {
                metrics::counter!(telemetry::OUTPUTS_PARKED, "topic" => topic.clone(), "reason" => reason)
                    .increment(0);
            }
        }
        // Brokers that cannot be reached are said at once, with
        // librdkafka's reason (its error event, served by the poll), not
        // after each topic's lookup has timed out in turn.
        if let Err(e) = self
            .producer
            .client()
            .fetch_metadata(None, BROKER_PROBE_TIMEOUT)
        {
            // The error event may follow the failed request by a moment.
            let until = Instant::now() + Duration::from_secs(1);
            while self.shared.last_kafka_error().is_none() && Instant::now() < until {
                self.producer.poll(Duration::from_millis(50));
            }
            self.shared.broker_up.store(false, Ordering::Relaxed);
            warn!(
                "cannot reach the Kafka brokers {} within {BROKER_PROBE_TIMEOUT:?}: {}; \
                 waiting for them (GET /readyz says why it is not ready)",
                self.kafka.brokers,
                self.shared
                    .last_kafka_error()
                    .unwrap_or_else(|| e.to_string()),
            );
            return;
        }
        for topic in topics.outputs() {
            if let Err(e) = self
                .producer
                .client()
                .fetch_metadata(Some(topic), OUTPUT_LOOKUP_TIMEOUT)
            {
                warn!("cannot look up output topic {topic}: {e}");
            }
        }
    }

    /// Produce every message and wait for the broker to acknowledge all of
    /// them, producing failed ones again with backoff; `serve` is called
    /// every [`SERVE_EVERY`] while that takes. A message the broker refused
    /// for good is parked in `park` (the batch's write) instead. Once the
    /// service is stopping (`stopping`, or a stop asked for during the
    /// wait), outputs still unacknowledged after [`DELIVERY_TIMEOUT`] or
    /// three attempts are given up on: the batch is not committed, and the
    /// next start applies it again.
    pub(super) fn publish(
        &mut self,
        outgoing: &[Outgoing],
        stopping: bool,
        park: &mut StateBatch<'_>,
        serve: &mut dyn FnMut(),
    ) -> Result<(), ServiceError> {
        let shared = self.shared.clone();
        let stopping = || stopping || shared.shutdown.load(Ordering::Relaxed);
        let mut serving = Serving {
            serve,
            last: Instant::now(),
        };
        let mut pending: Vec<usize> = (0..outgoing.len()).collect();
        // Messages librdkafka refused to queue, produced again with those
        // that failed in flight.
        let mut unsent: Vec<usize> = Vec::new();
        let mut backoff = Duration::from_millis(100);
        let mut attempts = 0u32;
        while !pending.is_empty() {
            for &index in &pending {
                let message = &outgoing[index];
                let mut headers = OwnedHeaders::new_with_capacity(message.headers.len());
                for (name, value) in &message.headers {
                    headers = headers.insert(Header {
                        key: name.as_ref(),
                        value: Some(value),
                    });
                }
                let record = BaseRecord::with_opaque_to(&message.topic, index)
                    .key(&message.key)
                    .payload(&message.payload)
                    .headers(headers);
                let sent =
                    send_when_room(&self.producer, record, Duration::from_millis(10), || {
                        serving.tick();
                    });
                if let Err(e) = sent {
                    match refused_for_good(&e) {
                        Some(reason) => park_output(message, reason, &e, park),
                        None => {
                            warn!("cannot produce to {}: {e}", message.topic);
                            unsent.push(index);
                        }
                    }
                }
            }
            // Outputs in flight are librdkafka's to retry (until
            // `message.timeout.ms`, when they fail and are produced again
            // below); the batch is committed only once every one is
            // acknowledged, so keep waiting.
            while !await_deliveries(&self.producer, DELIVERY_TIMEOUT, &mut serving) {
                if self.producer.client().fatal_error().is_some() {
                    // It will deliver nothing more: fail what it holds.
                    self.producer
                        .purge(PurgeConfig::default().queue().inflight());
                    continue;
                }
                shared.broker_up.store(false, Ordering::Relaxed);
                let in_flight = self.producer.in_flight_count();
                if stopping() {
                    return Err(ServiceError::Unacknowledged(in_flight.max(0) as usize));
                }
                warn!(
                    in_flight,
                    "outputs still unacknowledged after {DELIVERY_TIMEOUT:?}; waiting on"
                );
            }
            let acknowledged = Instant::now();
            let mut failed = std::mem::take(&mut unsent);
            for failure in self.producer.context().take_failures() {
                let message = &outgoing[failure.index];
                match refused_for_good(&failure.error) {
                    Some(reason) => park_output(message, reason, &failure.error, park),
                    None => {
                        warn!(
                            "delivery of output {} failed: {}",
                            failure.index, failure.error
                        );
                        failed.push(failure.index);
                    }
                }
            }
            let latency = metrics::histogram!(telemetry::DECISION_LATENCY);
            for &index in pending.iter().filter(|i| !failed.contains(i)) {
                if let Some(caused_at) = outgoing[index].caused_at {
                    latency.record(acknowledged.duration_since(caused_at).as_secs_f64());
                }
            }
            pending = failed;
            if let Some((code, reason)) = self.producer.client().fatal_error() {
                error!(
                    "the output producer failed for good ({code:?}: {reason}); \
                     replacing it, and producing its {} failed outputs again",
                    pending.len()
                );
                metrics::counter!(telemetry::PRODUCERS_RECREATED).increment(1);
                self.producer = producer(&self.kafka, &self.shared)?;
            }
            if pending.is_empty() {
                shared.broker_up.store(true, Ordering::Relaxed);
                break;
            }
            attempts += 1;
            metrics::counter!(telemetry::PRODUCE_RETRIES).increment(pending.len() as u64);
            shared.broker_up.store(false, Ordering::Relaxed);
            if stopping() && attempts >= 3 {
                return Err(ServiceError::Unacknowledged(pending.len()));
            }
            warn!(
                failed = pending.len(),
                "outputs not acknowledged; producing them again in {backoff:?}"
            );
            serving.sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_secs(5));
        }
        Ok(())
    }

    /// Wait (at most `timeout`) for what is still in flight, before the
    /// service leaves.
    pub(super) fn flush(&self, timeout: Duration) -> Result<(), KafkaError> {
        self.producer.flush(timeout)
    }
}

/// What [`republish_parked`] did.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Republished {
    /// Parked outputs the broker has now acknowledged (deleted from the
    /// store).
    pub published: usize,
    /// Of those taken, the ones refused for good again (parked anew, under
    /// new ids).
    pub parked_again: usize,
}

/// Produce every output parked in `store` again (through the service's
/// own sink: the same producer settings, the same sorting of what is
/// refused for good), and delete those the broker acknowledged, in one
/// write with the ones it refused again. Outputs the broker did not answer
/// within three attempts leave the store as it was: an error.
pub fn republish_parked(
    store: Arc<jobcast_storage::state::StateStore>,
    kafka: &KafkaSettings,
) -> Result<Republished, ServiceError> {
    let parked = store.parked()?;
    let outgoing: Vec<Outgoing> = parked
        .iter()
        .map(|(_, output)| Outgoing {
            topic: output.topic.clone(),
            key: output.key.clone(),
            payload: output.payload.clone(),
            headers: output
                .headers
                .iter()
                .map(|(name, value)| (Cow::Owned(name.clone()), value.clone()))
                .collect(),
            caused_at: None,
        })
        .collect();
    let mut sink = Sink::new(kafka, Shared::new(store.clone()))?;
    let mut write = store.batch();
    sink.publish(&outgoing, true, &mut write, &mut || {})?;
    // All the write holds yet: one put per output parked again.
    let parked_again = write.len();
    for (id, _) in &parked {
        write.delete_parked(*id);
    }
    store.commit(write)?;
    Ok(Republished {
        published: parked.len() - parked_again,
        parked_again,
    })
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use jobcast_storage::state::StateStore;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    use rdkafka::{Offset, TopicPartitionList};

    use super::*;

    const TOPIC: &str = "out";

    /// A sink publishing to a one-partition topic of a fresh mock cluster,
    /// with a store on disk behind its shared state.
    struct Fixture {
        mock: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        kafka: KafkaSettings,
        shared: Arc<Shared>,
        sink: Sink,
        _dir: tempfile::TempDir,
    }

    fn fixture() -> Fixture {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let dir = tempfile::tempdir().unwrap();
        let store = StateStore::open(dir.path(), false).unwrap();
        let shared = Shared::new(Arc::new(store));
        let sink = Sink::new(&kafka, shared.clone()).unwrap();
        Fixture {
            mock,
            kafka,
            shared,
            sink,
            _dir: dir,
        }
    }

    /// A fixture whose producer knows where the topic lives (so that a
    /// test's injected errors meet its produce requests, not a lookup).
    fn warmed_fixture() -> Fixture {
        let fixture = fixture();
        fixture.sink.warm_up(&Topics {
            decisions: TOPIC.into(),
            ..Topics::default()
        });
        fixture
    }

    /// Have the broker fail the next `n` produce requests with an error
    /// neither librdkafka nor the sink knows to be permanent (Kafka's
    /// UNKNOWN_SERVER_ERROR): librdkafka does not retry it, the sink
    /// produces the outputs again.
    fn fail_produce<C: rdkafka::ClientContext>(mock: &MockCluster<'_, C>, n: usize) {
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &vec![RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN; n],
        );
    }

    fn outgoing(n: usize) -> Vec<Outgoing> {
        (0..n)
            .map(|i| Outgoing {
                topic: TOPIC.into(),
                key: format!("k{i}").into_bytes(),
                payload: format!("m{i}").into_bytes(),
                headers: vec![("jobcast.test".into(), i.to_string().into_bytes())],
                caused_at: Some(Instant::now()),
            })
            .collect()
    }

    /// Every message in the topic, in order: (key, payload, test header).
    fn read_back(kafka: &KafkaSettings, expected: usize) -> Vec<(String, String, String)> {
        let mut config = kafka.client_config();
        config.set("group.id", "sink-test");
        let consumer: BaseConsumer = config.create().unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(TOPIC, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut read = Vec::new();
        while read.len() < expected && Instant::now() < deadline {
            let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) else {
                continue;
            };
            let text = |b: Option<&[u8]>| String::from_utf8(b.unwrap().to_vec()).unwrap();
            let header = m.headers().unwrap().get(0);
            assert_eq!(header.key, "jobcast.test");
            read.push((text(m.key()), text(m.payload()), text(header.value)));
        }
        read
    }

    #[test]
    fn publish_returns_once_every_output_is_in_the_topic() {
        let mut f = fixture();
        let mut write = f.shared.store.batch();
        f.sink
            .publish(&outgoing(5), false, &mut write, &mut || {})
            .unwrap();
        assert!(write.is_empty(), "nothing parked");
        assert!(f.shared.broker_up.load(Ordering::Relaxed));
        let read = read_back(&f.kafka, 5);
        let expected: Vec<_> = (0..5)
            .map(|i| (format!("k{i}"), format!("m{i}"), i.to_string()))
            .collect();
        assert_eq!(read, expected);
    }

    #[test]
    fn a_failed_delivery_is_produced_again() {
        let mut f = warmed_fixture();
        fail_produce(&f.mock, 1);
        // `publish` retries until delivered: bound the test's wait.
        let (done, published) = std::sync::mpsc::channel();
        let store = f.shared.store.clone();
        std::thread::spawn(move || {
            let mut write = store.batch();
            let published = f.sink.publish(&outgoing(3), false, &mut write, &mut || {});
            done.send(published.map(|()| write.len()))
        });
        let published = published
            .recv_timeout(Duration::from_secs(60))
            .expect("the outputs were produced again within a minute");
        assert_eq!(published.unwrap(), 0, "nothing parked");
        assert!(f.shared.broker_up.load(Ordering::Relaxed));
        assert_eq!(read_back(&f.kafka, 3).len(), 3);
    }

    #[test]
    fn a_long_wait_for_acknowledgements_keeps_serving_the_caller() {
        let mut f = warmed_fixture();
        // Every answer of the broker takes 3 s: so does the wait, whatever
        // librdkafka's own retries (a count of refusals would be used up
        // by them at their pace, not the sink's).
        f.mock
            .broker_round_trip_time(1, Duration::from_secs(3))
            .unwrap();
        let started = Instant::now();
        let mut served = 0u32;
        let mut write = f.shared.store.batch();
        f.sink
            .publish(&outgoing(2), false, &mut write, &mut || served += 1)
            .unwrap();
        let waited = started.elapsed();
        f.mock.broker_round_trip_time(1, Duration::ZERO).unwrap();
        assert!(waited >= Duration::from_secs(3), "{waited:?}");
        // Served every half second of the wait (give or take the last
        // two: acknowledgements are awaited in steps).
        let due = (waited.as_secs_f64() / SERVE_EVERY.as_secs_f64()) as u32;
        assert!(
            served + 2 >= due && served >= 4,
            "served {served} times in {waited:?}"
        );
        assert_eq!(read_back(&f.kafka, 2).len(), 2);
    }

    #[test]
    fn a_stop_asked_for_during_the_wait_gives_up_on_outputs_it_cannot_deliver() {
        let mut f = fixture();
        fail_produce(&f.mock, 8);
        // The batch began before the stop: `stopping` is false.
        f.shared.shutdown.store(true, Ordering::Relaxed);
        let mut write = f.shared.store.batch();
        match f.sink.publish(&outgoing(2), false, &mut write, &mut || {}) {
            Err(ServiceError::Unacknowledged(n)) => assert_eq!(n, 2),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stopping_service_gives_up_on_outputs_it_cannot_deliver() {
        let mut f = fixture();
        fail_produce(&f.mock, 8);
        let mut write = f.shared.store.batch();
        match f.sink.publish(&outgoing(2), true, &mut write, &mut || {}) {
            Err(ServiceError::Unacknowledged(n)) => assert_eq!(n, 2),
            other => panic!("{other:?}"),
        }
        assert!(!f.shared.broker_up.load(Ordering::Relaxed));
    }

    #[test]
    fn an_output_the_broker_refuses_for_good_is_parked_and_the_rest_delivered() {
        let mut f = warmed_fixture();
        f.mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
        );
        let sent = outgoing(3);
        let mut write = f.shared.store.batch();
        // No retry: the publish returns at once (the test's wait bounds it).
        let started = Instant::now();
        f.sink
            .publish(&sent, false, &mut write, &mut || {})
            .unwrap();
        assert!(started.elapsed() < DELIVERY_TIMEOUT);
        f.shared.store.commit(write).unwrap();
        let parked = f.shared.store.parked().unwrap();
        assert!(
            !parked.is_empty(),
            "the refused request's outputs are parked"
        );
        for (_, output) in &parked {
            assert_eq!(
                (output.topic.as_str(), output.reason.as_str()),
                (TOPIC, "too_large")
            );
            let index = sent.iter().position(|m| m.key == output.key).unwrap();
            assert_eq!(output.payload, sent[index].payload);
            assert_eq!(
                output.headers,
                [("jobcast.test".to_owned(), index.to_string().into_bytes())]
            );
        }
        // The others are in the topic: together, every output once.
        let read = read_back(&f.kafka, sent.len() - parked.len());
        assert_eq!(read.len() + parked.len(), sent.len());
        for (key, ..) in &read {
            assert!(!parked.iter().any(|(_, o)| o.key == key.as_bytes()));
        }
    }

    /// The other classes of refusal for good: a topic the broker refuses
    /// to know of, and one the producer may not write to. Each is parked
    /// under its own reason, nothing is retried for ever.
    #[test]
    fn outputs_refused_as_an_unknown_topic_or_unauthorized_are_parked_by_reason() {
        for (error, reason) in [
            (
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED,
                "not_authorized",
            ),
            (
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_EXCEPTION,
                "unknown_topic",
            ),
        ] {
            let mut f = warmed_fixture();
            f.mock.request_errors(RDKafkaApiKey::Produce, &[error]);
            let mut write = f.shared.store.batch();
            let started = Instant::now();
            f.sink
                .publish(&outgoing(3), false, &mut write, &mut || {})
                .unwrap();
            assert!(
                started.elapsed() < DELIVERY_TIMEOUT,
                "{reason}: not retried"
            );
            f.shared.store.commit(write).unwrap();
            let parked = f.shared.store.parked().unwrap();
            assert!(!parked.is_empty(), "{reason}: parked");
            for (_, output) in &parked {
                assert_eq!(output.reason, reason);
            }
        }
    }

    #[test]
    fn a_producer_failed_for_good_is_replaced_and_its_outputs_produced_again() {
        let mut f = fixture();
        let reason = std::ffi::CString::new("a broken sequence, injected").unwrap();
        // SAFETY: the producer's handle is live, and the reason outlives
        // the call (librdkafka copies it).
        unsafe {
            rdkafka::bindings::rd_kafka_test_fatal_error(
                f.sink.producer.client().native_ptr(),
                RDKafkaRespErr::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
                reason.as_ptr(),
            );
        }
        assert!(f.sink.producer.client().fatal_error().is_some());
        let mut write = f.shared.store.batch();
        f.sink
            .publish(&outgoing(3), false, &mut write, &mut || {})
            .unwrap();
        assert!(write.is_empty(), "nothing parked");
        assert!(
            f.sink.producer.client().fatal_error().is_none(),
            "a new producer"
        );
        assert_eq!(read_back(&f.kafka, 3).len(), 3);
    }
}
