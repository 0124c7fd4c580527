//! Kafka for tests: librdkafka's in-process mock cluster, and small
//! producers and readers that go around jobcast's own code, so that tests
//! check jobcast against the broker rather than against itself.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, encode};
use jobcast_ingest::kafka::{Topics, event_key};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{Headers, Message};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DefaultProducerContext, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

/// One message read back: where it was, and what it held.
#[derive(Debug, Clone)]
pub struct Record {
    pub partition: i32,
    pub offset: i64,
    pub key: Vec<u8>,
    pub payload: Vec<u8>,
    pub headers: BTreeMap<String, String>,
}

/// A mock cluster (one broker unless asked for more) with jobcast's topics:
/// the input one with `partitions` partitions, the outputs with one.
pub struct Cluster {
    pub mock: MockCluster<'static, DefaultProducerContext>,
}

impl Cluster {
    pub fn new(topics: &Topics, partitions: i32) -> Self {
        Cluster::with_brokers(topics, partitions, 1)
    }

    /// [`Cluster::new`] with `brokers` brokers; librdkafka spreads the
    /// partitions' leaders over them.
    pub fn with_brokers(topics: &Topics, partitions: i32, brokers: i32) -> Self {
        let mock = MockCluster::new(brokers).expect("mock cluster starts");
        mock.create_topic(&topics.events, partitions, 1)
            .expect("topic created");
        for topic in topics.outputs() {
            mock.create_topic(topic, 1, 1).expect("topic created");
        }
        Cluster { mock }
    }

    pub fn brokers(&self) -> String {
        self.mock.bootstrap_servers()
    }

    pub fn produce(&self, topic: &str, messages: &[(String, Vec<u8>)]) {
        produce(&self.brokers(), topic, messages);
    }

    pub fn read_all(&self, topic: &str, partitions: i32) -> Vec<Record> {
        read_all(&self.brokers(), topic, partitions)
    }

    /// The first offset still held by each partition: 0 unless the mock
    /// cluster's bounded log (about 5 MB per partition) dropped records.
    pub fn low_watermarks(&self, topic: &str, partitions: i32) -> Vec<i64> {
        let consumer: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", self.brokers())
            .create()
            .expect("consumer");
        (0..partitions)
            .map(|p| {
                consumer
                    .fetch_watermarks(topic, p, Duration::from_secs(10))
                    .expect("watermarks")
                    .0
            })
            .collect()
    }
}

/// Produce (key, payload) messages and wait for every acknowledgement.
pub fn produce(brokers: &str, topic: &str, messages: &[(String, Vec<u8>)]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .create()
        .expect("producer");
    for (key, payload) in messages {
        let mut record = BaseRecord::to(topic).key(key).payload(payload);
        while let Err((_, back)) = producer.send(record) {
            record = back;
            producer.poll(Duration::from_millis(10));
        }
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every message acknowledged");
}

/// Every message of `topic`'s first `partitions` partitions, in partition
/// then offset order: read from the beginning until every partition reports
/// its end. The end comes from fetch responses, not from a ListOffsets
/// query, which tansu 0.6.0 answers wrongly (docs/kafka.md).
pub fn read_all(brokers: &str, topic: &str, partitions: i32) -> Vec<Record> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "jobcast-tests-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()
        .expect("consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .expect("partition added");
    }
    consumer.assign(&tpl).expect("assigned");
    let mut out = Vec::new();
    let mut at_end = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (at_end.len() as i32) < partitions {
        assert!(Instant::now() < deadline, "could not read all of {topic}");
        let m = match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => m,
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
                continue;
            }
            _ => continue,
        };
        at_end.remove(&m.partition());
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| {
                        let value = String::from_utf8_lossy(h.value.unwrap_or_default());
                        (h.key.to_owned(), value.into_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.push(Record {
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().unwrap_or_default().to_vec(),
            payload: m.payload().unwrap_or_default().to_vec(),
            headers,
        });
    }
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// A one-partition decisions topic as (job id, version) → decision JSON.
/// Redelivered duplicates collapse, as they do for any consumer that keys
/// by both.
pub fn decisions(brokers: &str, topic: &str) -> BTreeMap<(u64, u64), serde_json::Value> {
    decisions_across(brokers, topic, 1)
}

/// [`decisions`] of a topic with `partitions` partitions: the runtime
/// decisions (deadline jobs' plans have versions of their own). A decision
/// published twice (again after a restart, or by a partition's old and new
/// owner) must be identical both times; of a version whose start was
/// refreshed, the one with the latest start is kept.
pub fn decisions_across(
    brokers: &str,
    topic: &str,
    partitions: i32,
) -> BTreeMap<(u64, u64), serde_json::Value> {
    let mut out = BTreeMap::new();
    for m in read_all(brokers, topic, partitions) {
        if m.headers
            .get("jobcast.kind")
            .is_some_and(|k| k != "decision")
        {
            continue;
        }
        let d: serde_json::Value = serde_json::from_slice(&m.payload).expect("decisions are JSON");
        let key = (
            d["job_id"].as_u64().expect("job_id"),
            d["version"].as_u64().expect("version"),
        );
        // A refresh that found the start gone is its version's last.
        let start_at = |d: &serde_json::Value| d["start"]["at_us"].as_u64().unwrap_or(u64::MAX);
        match out.get(&key) {
            Some(before) if start_at(before) > start_at(&d) => {}
            Some(before) if start_at(before) == start_at(&d) => {
                assert_eq!(*before, d, "two different decisions {key:?} on {topic}");
            }
            _ => {
                out.insert(key, d);
            }
        }
    }
    out
}

/// The dead letters on a one-partition topic: source (partition, offset)
/// → reason.
pub fn dead_letters(brokers: &str, topic: &str) -> BTreeMap<(String, String), String> {
    read_all(brokers, topic, 1)
        .into_iter()
        .map(|m| {
            let header = |name: &str| m.headers.get(name).cloned().unwrap_or_default();
            (
                (
                    header("jobcast.source.partition"),
                    header("jobcast.source.offset"),
                ),
                header("jobcast.reason"),
            )
        })
        .collect()
}

/// Events as the input topic carries them: (key, canonical JSON).
pub fn messages(events: &[Event]) -> Vec<(String, Vec<u8>)> {
    events
        .iter()
        .map(|e| {
            let mut bytes = Vec::new();
            encode(e, &mut bytes);
            (event_key(e), bytes)
        })
        .collect()
}
