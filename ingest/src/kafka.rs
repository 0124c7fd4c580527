//! The Kafka side of ingest: how to reach the cluster, which topics jobcast
//! reads and writes, how messages are keyed, and the headers a dead-lettered
//! message carries. Everything that talks to Kafka (the service, trace
//! replay, the closed-loop simulator, the tests) builds its clients here, so
//! they agree on the contract documented in `docs/kafka.md`.
//!
//! Compiled only with the `kafka` feature, so pure users of the event model
//! (the predictor) do not link librdkafka.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};

use crate::event::Event;

/// How to reach the Kafka cluster.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaSettings {
    /// `bootstrap.servers`: comma-separated `host:port` list.
    pub brokers: String,
    /// Any other librdkafka client property, passed through unchanged
    /// (`security.protocol`, `sasl.mechanism`, `sasl.username`,
    /// `sasl.password`, `ssl.ca.location`, …).
    #[serde(default)]
    pub client: BTreeMap<String, String>,
}

/// A broker on this machine, on Kafka's standard port.
impl Default for KafkaSettings {
    fn default() -> Self {
        KafkaSettings::new("127.0.0.1:9092")
    }
}

impl KafkaSettings {
    pub fn new(brokers: impl Into<String>) -> Self {
        KafkaSettings {
            brokers: brokers.into(),
            client: BTreeMap::new(),
        }
    }

    /// A librdkafka configuration with the brokers and every pass-through
    /// property set.
    pub fn client_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.brokers);
        for (key, value) in &self.client {
            config.set(key, value);
        }
        config
    }

    /// A producer configuration for jobcast's outputs: idempotent (no
    /// duplicates from internal retries) and acknowledged by all in-sync
    /// replicas, since a batch's offsets are stored only once its outputs
    /// are acknowledged. Pass-through properties that only consumers read
    /// are left out (librdkafka warns of each one a producer is given).
    pub fn producer_config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "5");
        for (key, value) in self.client.iter().filter(|(key, _)| !consumer_only(key)) {
            config.set(key, value);
        }
        config
    }

    /// Create `topics` (name, partitions) if they do not exist yet.
    pub async fn ensure_topics(&self, topics: &[(&str, i32)]) -> Result<(), String> {
        let admin: AdminClient<DefaultClientContext> = self
            .client_config()
            .create()
            .map_err(|e| format!("cannot create a Kafka admin client: {}", self.redact(e)))?;
        let new: Vec<NewTopic<'_>> = topics
            .iter()
            .map(|&(name, partitions)| NewTopic::new(name, partitions, TopicReplication::Fixed(1)))
            .collect();
        let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let results = admin
            .create_topics(&new, &options)
            .await
            .map_err(|e| format!("cannot create topics: {e}"))?;
        for result in results {
            match result {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((topic, code)) => return Err(format!("cannot create topic {topic}: {code}")),
            }
        }
        Ok(())
    }
}

impl KafkaSettings {
    /// `error` with every configured secret value replaced by
    /// `<redacted>`: librdkafka's configuration errors quote the offending
    /// property's value, and a password must not reach a log that way. Use
    /// it wherever a client is created from these settings.
    pub fn redact(&self, error: KafkaError) -> KafkaError {
        let scrub = |text: String| {
            self.client
                .iter()
                .filter(|(key, value)| is_secret(key) && !value.is_empty())
                .fold(text, |text, (_, value)| {
                    text.replace(value.as_str(), "<redacted>")
                })
        };
        match error {
            KafkaError::ClientConfig(code, description, key, value) => {
                KafkaError::ClientConfig(code, scrub(description), key, scrub(value))
            }
            KafkaError::ClientCreation(message) => KafkaError::ClientCreation(scrub(message)),
            other => other,
        }
    }
}

/// Property names whose values are secrets: never logged, never exported.
/// librdkafka's (2.12) are `sasl.password`, `ssl.key.password`,
/// `ssl.keystore.password`, `ssl.key.pem`, `sasl.oauthbearer.client.secret`,
/// `sasl.oauthbearer.assertion.private.key.passphrase` and
/// `sasl.oauthbearer.config` (which may hold a token); the patterns also
/// cover Java-style names (`sasl.jaas.config`).
fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key.contains("password")
        || key.contains("passphrase")
        || key.contains("secret")
        || key.ends_with(".key.pem")
        || key.contains("sasl.jaas")
        || key == "sasl.oauthbearer.config"
}

/// Shows the settings with secret values replaced, so that configuration
/// can be logged safely.
impl fmt::Debug for KafkaSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let client: BTreeMap<&str, &str> = self
            .client
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str(),
                    if is_secret(k) {
                        "<redacted>"
                    } else {
                        v.as_str()
                    },
                )
            })
            .collect();
        f.debug_struct("KafkaSettings")
            .field("brokers", &self.brokers)
            .field("client", &client)
            .finish()
    }
}

/// The topics jobcast reads and writes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Topics {
    /// Canonical events in (JSON), keyed by job id (machine id for machine
    /// events).
    pub events: String,
    /// Scheduling decisions out, keyed by job id.
    pub decisions: String,
    /// Preemption-risk scores out, keyed by machine id.
    pub risk: String,
    /// CloudCoaster's capacity decisions out, keyed `capacity`.
    pub capacity: String,
    /// Input messages that could not be used, bytes untouched, with the
    /// reason in headers.
    pub dead_letter: String,
}

impl Default for Topics {
    fn default() -> Self {
        Topics {
            events: "jobcast.events".into(),
            decisions: "jobcast.decisions".into(),
            risk: "jobcast.risk".into(),
            capacity: "jobcast.capacity".into(),
            dead_letter: "jobcast.dead-letter".into(),
        }
    }
}

impl Topics {
    /// The topics the service writes.
    pub fn outputs(&self) -> [&String; 4] {
        [
            &self.decisions,
            &self.risk,
            &self.capacity,
            &self.dead_letter,
        ]
    }
}

/// Whether librdkafka reads `key` in consumers only (its configuration
/// table marks these `C`).
fn consumer_only(key: &str) -> bool {
    const CONSUMER_ONLY: [&str; 17] = [
        "auto.commit.interval.ms",
        "auto.offset.reset",
        "check.crcs",
        "enable.auto.commit",
        "enable.auto.offset.store",
        "enable.partition.eof",
        "heartbeat.interval.ms",
        "isolation.level",
        "max.partition.fetch.bytes",
        "max.poll.interval.ms",
        "partition.assignment.strategy",
        "queued.max.messages.kbytes",
        "queued.min.messages",
        "session.timeout.ms",
        "coordinator.query.interval.ms",
        "consume.callback.max.messages",
        "offset.store.method",
    ];
    key.starts_with("fetch.") || key.starts_with("group.") || CONSUMER_ONLY.contains(&key)
}

/// Header names on the service's outputs: one place for the whole topic
/// contract (`docs/kafka.md`).
pub mod headers {
    /// On decisions: the job, and the decision's version (a consumer keeps
    /// the highest version per job).
    pub const JOB_ID: &str = "jobcast.job_id";
    pub const VERSION: &str = "jobcast.version";
    /// On decisions: what the message holds, [`DECISION`] (a runtime
    /// decision: queue, pilots, estimate) or [`DEADLINE`] (a deadline
    /// job's plan or recovery); each kind has versions of its own.
    pub const KIND: &str = "jobcast.kind";
    pub const DECISION: &str = "decision";
    pub const DEADLINE: &str = "deadline";
    /// On risk scores: the machine.
    pub const MACHINE_ID: &str = "jobcast.machine_id";
    /// The key of every capacity decision: one stream, in one partition,
    /// in order (the version goes in [`VERSION`]).
    pub const CAPACITY_KEY: &str = "capacity";
    /// On dead letters: a machine-readable reason class (`syntax`,
    /// `missing_field`, …).
    pub const REASON: &str = "jobcast.reason";
    /// On dead letters: the full error message, naming the field.
    pub const ERROR: &str = "jobcast.error";
    /// On dead letters: where the unusable input came from.
    pub const SOURCE_TOPIC: &str = "jobcast.source.topic";
    pub const SOURCE_PARTITION: &str = "jobcast.source.partition";
    pub const SOURCE_OFFSET: &str = "jobcast.source.offset";
    /// On dead letters cut to fit the producer's `message.max.bytes`: the
    /// input's key and payload sizes in bytes, `KEY PAYLOAD`.
    pub const TRUNCATED: &str = "jobcast.truncated";
}

/// The key an event is produced with: its job id, or its machine id for
/// machine events, in decimal. Keying by job keeps every event of a job in
/// one partition, in order.
/// Whether a message of the decisions topic is a runtime decision: its
/// [`headers::KIND`] says so, or it has none (the only kind there was).
/// A consumer of runtime decisions skips the others.
pub fn is_runtime_decision<M: Message>(message: &M) -> bool {
    use rdkafka::message::Headers;
    message.headers().is_none_or(|headers| {
        headers
            .iter()
            .find(|h| h.key == headers::KIND)
            .is_none_or(|h| h.value == Some(headers::DECISION.as_bytes()))
    })
}

pub fn event_key(event: &Event) -> String {
    match event {
        Event::Machine(m) => format!("m{}", m.machine_id),
        other => other.job_id().map(|id| id.to_string()).unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::decode;

    #[test]
    fn secrets_never_show_in_debug_output() {
        let mut settings = KafkaSettings::new("b:9092");
        let secrets = [
            "sasl.password",
            "ssl.key.password",
            "ssl.keystore.password",
            "ssl.key.pem",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.assertion.private.key.passphrase",
            "sasl.oauthbearer.config",
        ];
        for (i, key) in secrets.iter().enumerate() {
            settings.client.insert((*key).into(), format!("hunter{i}"));
        }
        settings.client.insert("sasl.username".into(), "svc".into());
        let shown = format!("{settings:?}");
        assert!(!shown.contains("hunter"), "{shown}");
        assert!(
            shown.contains("svc") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn producers_are_not_given_consumer_only_properties() {
        let mut settings = KafkaSettings::new("b:9092");
        for (key, value) in [
            ("fetch.wait.max.ms", "10"),
            ("session.timeout.ms", "6000"),
            ("group.instance.id", "a"),
            ("linger.ms", "0"),
            ("socket.keepalive.enable", "true"),
        ] {
            settings.client.insert(key.into(), value.into());
        }
        let producer = settings.producer_config();
        assert_eq!(producer.get("fetch.wait.max.ms"), None);
        assert_eq!(producer.get("session.timeout.ms"), None);
        assert_eq!(producer.get("group.instance.id"), None);
        // Producer and common properties pass, and override the defaults.
        assert_eq!(producer.get("linger.ms"), Some("0"));
        assert_eq!(producer.get("socket.keepalive.enable"), Some("true"));
        assert_eq!(producer.get("enable.idempotence"), Some("true"));
        // Consumers get everything.
        assert_eq!(
            settings.client_config().get("fetch.wait.max.ms"),
            Some("10")
        );
    }

    #[test]
    fn client_configuration_errors_do_not_quote_secrets() {
        let mut settings = KafkaSettings::new("b:9092");
        settings
            .client
            .insert("ssl.key.password".into(), "hunter2".into());
        // An unknown property is refused with its value quoted.
        settings
            .client
            .insert("no.such.password".into(), "hunter3".into());
        let error = settings
            .client_config()
            .create::<rdkafka::producer::BaseProducer>()
            .err()
            .expect("an unknown property is refused");
        assert!(error.to_string().contains("hunter3"), "{error}");
        let shown = settings.redact(error).to_string();
        assert!(!shown.contains("hunter3"), "{shown}");
        assert!(
            shown.contains("no.such.password") && shown.contains("<redacted>"),
            "{shown}"
        );
    }

    #[test]
    fn pass_through_properties_reach_librdkafka_config() {
        let mut settings = KafkaSettings::new("b:9092");
        settings
            .client
            .insert("security.protocol".into(), "sasl_ssl".into());
        settings.client.insert("acks".into(), "1".into());
        let config = settings.producer_config();
        assert_eq!(config.get("bootstrap.servers"), Some("b:9092"));
        assert_eq!(config.get("security.protocol"), Some("sasl_ssl"));
        // An operator's explicit choice wins over jobcast's defaults.
        assert_eq!(config.get("acks"), Some("1"));
    }

    #[test]
    fn events_are_keyed_by_job_or_machine() {
        let job =
            decode(br#"{"v":1,"type":"job_ended","time_us":5,"job_id":42,"outcome":"finish"}"#)
                .unwrap();
        assert_eq!(event_key(&job), "42");
        let machine =
            decode(br#"{"v":1,"type":"machine","time_us":5,"machine_id":7,"kind":"add"}"#).unwrap();
        assert_eq!(event_key(&machine), "m7");
    }
}

/// Why a topic could not be read to its end.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("topic {0} does not exist")]
    NoTopic(String),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error("reading {topic} to its end took more than {} s", .timeout.as_secs())]
    Timeout { topic: String, timeout: Duration },
}

/// The partitions of `topic`.
pub fn partitions(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<i32>, ReadError> {
    let metadata = consumer.fetch_metadata(Some(topic), timeout)?;
    let listed = metadata
        .topics()
        .iter()
        .find(|t| t.name() == topic && t.error().is_none())
        .filter(|t| !t.partitions().is_empty())
        .ok_or_else(|| ReadError::NoTopic(topic.to_owned()))?;
    Ok(listed.partitions().iter().map(|p| p.id()).collect())
}

/// Read every message of `topic` from `next` (each partition's next offset;
/// a partition not named starts at its beginning) up to the partition's end
/// as it is when the call begins, handing each to `each` in partition order;
/// `next` advances past each message as it is handed over, so a read cut
/// short leaves it just past the last one `each` saw. `consumer` is
/// assigned for the read and unassigned after. A partition whose next
/// offset is gone (deleted by retention) is read from its first offset
/// still there. Each request to the brokers may take `timeout`, and the
/// reading itself `read_for`.
pub fn read_to_end(
    consumer: &BaseConsumer,
    topic: &str,
    next: &mut BTreeMap<i32, i64>,
    (timeout, read_for): (Duration, Duration),
    mut each: impl FnMut(&BorrowedMessage<'_>),
) -> Result<(), ReadError> {
    let mut assignment = TopicPartitionList::new();
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for partition in partitions(consumer, topic, timeout)? {
        let (low, high) = consumer.fetch_watermarks(topic, partition, timeout)?;
        let start = next.get(&partition).copied().unwrap_or(low).max(low);
        next.insert(partition, start);
        if high > start {
            assignment.add_partition_offset(topic, partition, Offset::Offset(start))?;
            ends.insert(partition, high);
        }
    }
    if ends.is_empty() {
        return Ok(());
    }
    consumer.assign(&assignment)?;
    let deadline = Instant::now() + read_for;
    while !ends.is_empty() {
        if Instant::now() > deadline {
            consumer.unassign()?;
            return Err(ReadError::Timeout {
                topic: topic.to_owned(),
                timeout: read_for,
            });
        }
        let message = match consumer.poll(Duration::from_millis(100)) {
            None | Some(Err(KafkaError::PartitionEOF(_))) => continue,
            Some(message) => message?,
        };
        next.insert(message.partition(), message.offset() + 1);
        each(&message);
        if ends
            .get(&message.partition())
            .is_some_and(|end| message.offset() + 1 >= *end)
        {
            ends.remove(&message.partition());
        }
    }
    consumer.unassign()?;
    Ok(())
}
