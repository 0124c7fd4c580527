//! The floor under `bench latency`: what the broker's round trips alone
//! cost on the path the service's decisions take.
//!
//! A relay reads the input topic with a bare librdkafka consumer, decodes
//! each event (the least a consumer must do to know a submission), and for
//! each job submission at once produces a message of the shape the
//! latency listener reads, `{"job_id":N,"version":1}`, to the decisions
//! topic. No merge, engine, store or batching; it never waits for an
//! acknowledgement before its next poll. Timed by the same listener as the
//! service, the difference between the two is what the service adds to the
//! broker's own latency.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use jobcast_ingest::deliveries::{Deliveries, send_when_room};
use jobcast_ingest::event::{Event, decode};
use jobcast_ingest::kafka::KafkaSettings;
use jobcast_scheduler_feed::config::ServeConfig;
use jobcast_scheduler_feed::service::output_producer_config;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::{RawContext, STALL, bare_consumer};

/// How long a relay poll waits for a message before looking at its stop
/// flag.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// A relay running on its own thread.
pub(super) struct Relay {
    stop: Arc<AtomicBool>,
    consumed: Arc<AtomicU64>,
    thread: JoinHandle<anyhow::Result<u64>>,
}

impl Relay {
    /// Start relaying `config`'s input topic (all `partitions`, from the
    /// beginning) to its decisions topic, and return once the consumer is
    /// assigned and both clients have met the broker, so that connecting is
    /// not counted as latency.
    pub(super) fn start(config: &ServeConfig, partitions: i32) -> anyhow::Result<Relay> {
        let settings = config.kafka.clone();
        let (input, output) = (
            config.topics.events.clone(),
            config.topics.decisions.clone(),
        );
        let group = format!("{}.relay", config.consumer.group);
        let stop = Arc::new(AtomicBool::new(false));
        let consumed = Arc::new(AtomicU64::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let thread = {
            let (stop, consumed, ready) = (stop.clone(), consumed.clone(), ready.clone());
            std::thread::Builder::new()
                .name("relay".into())
                .spawn(move || {
                    let clients = connect(&settings, &input, &output, partitions, &group)?;
                    ready.store(true, Ordering::Relaxed);
                    relay(&clients, &output, &stop, &consumed)
                })
                .context("starting the relay thread")?
        };
        let relay = Relay {
            stop,
            consumed,
            thread,
        };
        let waiting = Instant::now();
        while !ready.load(Ordering::Relaxed) {
            if relay.thread.is_finished() || waiting.elapsed() > STALL {
                relay.stop()?;
                bail!("the relay did not get ready in {} s", STALL.as_secs());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(relay)
    }

    /// Input messages read so far.
    pub(super) fn consumed(&self) -> u64 {
        self.consumed.load(Ordering::Relaxed)
    }

    pub(super) fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }

    /// Stop, wait for every relayed message to be acknowledged, and return
    /// how many were published.
    pub(super) fn stop(self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .join()
            .map_err(|_| anyhow::anyhow!("the relay thread panicked"))?
    }
}

struct Clients {
    consumer: BaseConsumer<RawContext>,
    producer: BaseProducer<Deliveries>,
}

/// Create the relay's consumer, assigned every partition of `input` from
/// the beginning, and its producer, each having fetched metadata once.
fn connect(
    settings: &KafkaSettings,
    input: &str,
    output: &str,
    partitions: i32,
    group: &str,
) -> anyhow::Result<Clients> {
    // As the service's input consumer and output producer are set.
    let consumer =
        bare_consumer(settings, group, false).context("creating the relay's consumer")?;
    let mut config = output_producer_config(settings);
    // An idempotent producer sends nothing until it has its id (about
    // 0.5 s): the service waits longer than that for its group assignment
    // before it is ready, so the relay waits for the id, which librdkafka
    // reports only in its statistics.
    let idempotent = config.get("enable.idempotence") == Some("true");
    if idempotent {
        config.set("statistics.interval.ms", "100");
    }
    let producer: BaseProducer<Deliveries> = config
        .create_with_context(Deliveries::new())
        .map_err(|e| settings.redact(e))
        .context("creating the relay's producer")?;
    let timeout = Duration::from_secs(10);
    producer
        .client()
        .fetch_metadata(Some(output), timeout)
        .with_context(|| format!("looking up {output} for the relay"))?;
    let waiting = Instant::now();
    while idempotent && !producer.context().has_producer_id() {
        if waiting.elapsed() > timeout {
            bail!(
                "the relay's producer got no producer id in {} s",
                timeout.as_secs()
            );
        }
        producer.poll(Duration::from_millis(10));
    }
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        consumer
            .fetch_watermarks(input, partition, timeout)
            .with_context(|| format!("reading the watermarks of {input} [{partition}]"))?;
        assignment.add_partition_offset(input, partition, Offset::Beginning)?;
    }
    consumer
        .assign(&assignment)
        .with_context(|| format!("assigning {input} to the relay"))?;
    Ok(Clients { consumer, producer })
}

/// Relay until `stop` is set, then flush; the count of messages published.
fn relay(
    clients: &Clients,
    output: &str,
    stop: &AtomicBool,
    consumed: &AtomicU64,
) -> anyhow::Result<u64> {
    let Clients { consumer, producer } = clients;
    let mut published = 0u64;
    while !stop.load(Ordering::Relaxed) {
        producer.poll(Duration::ZERO);
        let Some(message) = consumer.poll(POLL_WAIT) else {
            continue;
        };
        let message = message.context("relay: reading the input")?;
        consumed.fetch_add(1, Ordering::Relaxed);
        let Ok(Event::JobSubmitted(job)) = decode(message.payload().unwrap_or_default()) else {
            continue;
        };
        let key = job.job_id.to_string();
        let payload = format!(r#"{{"job_id":{},"version":1}}"#, job.job_id);
        let record = BaseRecord::with_opaque_to(output, 0)
            .key(&key)
            .payload(&payload);
        send_when_room(producer, record, Duration::from_millis(1), || {})
            .context("relay: producing")?;
        published += 1;
    }
    producer
        .flush(Duration::from_secs(10))
        .context("relay: flushing")?;
    let failed = producer.context().failed();
    if failed > 0 {
        bail!("relay: {failed} of {published} messages were not delivered");
    }
    Ok(published)
}
