//! The closed loop through Kafka: the trace-driven simulator of [`sim`]
//! plays the downstream scheduler of a running `jobcast serve`. At each
//! simulated instant it produces what happened (tasks started, tasks
//! finished, jobs ended, jobs submitted) as canonical events into the
//! service's input topic, waits until the service has applied them, and
//! schedules by the decisions the service published in answer. Virtual
//! time advances only once the service has caught up, so the run is as
//! deterministic as the in-process one: for the same workload, policy,
//! settings and seed, every job's JCT equals that of
//! [`sim::simulate`] run from an empty history (the service starts from an
//! empty store and learns only from what it consumes).
//!
//! One instant, in order:
//!
//! 1. **Produce** its events, keyed by
//!    [`event_key`](jobcast_ingest::kafka::event_key), all to partition 0
//!    of the input topic, and wait for every delivery report. One
//!    partition keeps the exact order the in-process run uses: the
//!    service's event-time merge breaks ties between partitions by
//!    partition number, which would apply, say, a job's arrival before
//!    another job's finish at the same instant if they were keyed to
//!    different partitions.
//! 2. **Watermark**: wait until the service's consumer group has committed
//!    an offset beyond the last event produced. The service stores a
//!    batch's offsets only after the broker acknowledged the batch's
//!    decisions, and then commits them to Kafka, so a committed offset
//!    means the decisions are in the decisions topic. The offsets are read
//!    by a consumer with the service's `group.id` that never subscribes, so
//!    it does not join the group.
//! 3. **Decisions**: read every partition of the decisions topic up to its
//!    high watermark (taken after step 2) from where the last instant
//!    stopped, keep each job's decisions newer than the last seen (a
//!    higher version, or a refreshed start of the same; delivery is at
//!    least once), and check they are the simulated policy's.
//!
//! The service must run with the same policy, policy settings (thin limit,
//! sampling ratio, seed), history and queue settings as the simulation;
//! the defaults of `jobcast serve` and `jobcast simulate` agree. It must
//! start from an empty state on input topics no one else writes to:
//! anything it learned before would make its decisions differ.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use jobcast_ingest::deliveries::{Deliveries, send_when_room};
use jobcast_ingest::encode;
use jobcast_ingest::kafka::{KafkaSettings, Topics, event_key, is_runtime_decision};
use jobcast_predictor::decision::{Decision, Newest, PolicyKind};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use serde::Serialize;

use crate::sim::{self, Predictions, SimConfig, SimError, SimEvent, SimReport};
use crate::workload::SimJob;

/// How long to wait for topic metadata and single broker requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one wait for delivery reports lasts.
const DELIVERY_POLL: Duration = Duration::from_millis(1);

/// The longest pause between two looks at the service's committed offset
/// (pauses start at 1 ms and double).
const MAX_BACKOFF: Duration = Duration::from_millis(5);

/// Where the service is and how long it may take.
#[derive(Debug, Clone, PartialEq)]
pub struct ClosedLoopConfig {
    pub kafka: KafkaSettings,
    /// The service's topics: events are produced to `events`, decisions
    /// read from `decisions`, and `dead_letter` is watched for refused
    /// events.
    pub topics: Topics,
    /// The service's consumer group, whose committed offsets are the
    /// watermark.
    pub group: String,
    /// Longest wait for the service to apply one instant's events.
    pub catch_up_timeout: Duration,
}

/// A snapshot for progress displays, after each simulated instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Jobs whose last task finished.
    pub jobs_done: u64,
    pub instants: u64,
    /// Simulated time of the instant.
    pub now_us: u64,
}

/// What a closed-loop run exchanged with the service.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoopSummary {
    /// Simulated instants, one round trip each.
    pub instants: u64,
    /// Events produced into the input topic.
    pub events: u64,
    /// Decisions of the simulated policy applied.
    pub decisions: u64,
    /// Decisions read again (redelivered) and ignored.
    pub duplicates: u64,
    /// Messages the input topic held before the run: a service that read
    /// them did not start cold.
    pub prior_input_messages: i64,
    pub elapsed_secs: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum ClosedLoopError {
    #[error("cannot create the Kafka {client}: {cause}")]
    Client {
        client: &'static str,
        cause: KafkaError,
    },
    #[error("cannot fetch metadata of topic `{topic}` (are the brokers reachable?): {cause}")]
    Metadata { topic: String, cause: KafkaError },
    #[error(
        "topic `{topic}` does not exist or has no partitions (start `jobcast serve --create-topics N` or create it)"
    )]
    Topic { topic: String },
    #[error("reading the watermarks of `{topic}`: {cause}")]
    Watermarks { topic: String, cause: KafkaError },
    #[error("assigning the partitions of `{topic}`: {cause}")]
    Assign { topic: String, cause: KafkaError },
    #[error(
        "the service refused {count} events (dead-lettered to `{topic}`, reason in header jobcast.reason): is another producer writing to `{events}`, or did the service not start from an empty state?"
    )]
    DeadLettered {
        count: i64,
        topic: String,
        events: String,
    },
    #[error(transparent)]
    Sim(#[from] SimError),
}

/// Run the simulation with `policy`'s decisions coming from the service
/// described by `config`; `progress` is called after every instant.
pub fn simulate(
    jobs: &[SimJob],
    policy: PolicyKind,
    sim_config: &SimConfig,
    config: &ClosedLoopConfig,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(SimReport, LoopSummary), ClosedLoopError> {
    let started = Instant::now();
    let mut service = Service::connect(config, policy, progress)?;
    let result = sim::simulate_with(jobs, &mut service, sim_config);
    // A refused event makes the service's decisions diverge or stop
    // (checked once, not per instant, to keep round trips short): it is
    // the cause of any other error too.
    service.check_dead_letters()?;
    let report = result?;
    let mut summary = service.summary;
    summary.elapsed_secs = started.elapsed().as_secs_f64();
    Ok((report, summary))
}

/// The service, as [`Predictions`].
struct Service<'p> {
    config: &'p ClosedLoopConfig,
    policy: PolicyKind,
    producer: BaseProducer<Deliveries>,
    /// Has the service's `group.id`; reads its committed offsets and, by
    /// manual assignment, the decisions topic.
    consumer: BaseConsumer,
    /// Next offset to read, per decisions partition.
    read_to: BTreeMap<i32, i64>,
    /// Dead letters seen so far, over all partitions.
    dead_letters: i64,
    dead_letter_partitions: i32,
    /// The newest decision applied, per job.
    newest: Newest,
    jobs_done: u64,
    summary: LoopSummary,
    progress: &'p mut dyn FnMut(&Progress),
}

impl<'p> Service<'p> {
    fn connect(
        config: &'p ClosedLoopConfig,
        policy: PolicyKind,
        progress: &'p mut dyn FnMut(&Progress),
    ) -> Result<Self, ClosedLoopError> {
        let kafka = &config.kafka;
        // Each instant is a round trip: send at once, unless flags say
        // otherwise.
        let mut producer_config = kafka.producer_config();
        if !kafka.client.contains_key("linger.ms") {
            producer_config.set("linger.ms", "0");
        }
        let mut consumer_config = kafka.client_config();
        consumer_config
            .set("group.id", &config.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            // Brokers that hold an empty fetch for its full wait (the mock
            // cluster does) would otherwise add up to 500 ms per instant.
            .set("fetch.wait.max.ms", "10");
        for (key, value) in &kafka.client {
            consumer_config.set(key, value);
        }
        let producer: BaseProducer<Deliveries> = producer_config
            .create_with_context(Deliveries::new())
            .map_err(|cause| ClosedLoopError::Client {
                client: "producer",
                cause: kafka.redact(cause),
            })?;
        let consumer: BaseConsumer =
            consumer_config
                .create()
                .map_err(|cause| ClosedLoopError::Client {
                    client: "consumer",
                    cause: kafka.redact(cause),
                })?;
        let topics = &config.topics;
        let partitions = |topic: &str| -> Result<i32, ClosedLoopError> {
            let metadata = consumer
                .fetch_metadata(Some(topic), REQUEST_TIMEOUT)
                .map_err(|cause| ClosedLoopError::Metadata {
                    topic: topic.to_owned(),
                    cause,
                })?;
            match metadata.topics().first() {
                Some(t) if t.error().is_none() && !t.partitions().is_empty() => {
                    Ok(t.partitions().len() as i32)
                }
                _ => Err(ClosedLoopError::Topic {
                    topic: topic.to_owned(),
                }),
            }
        };
        let input_partitions = partitions(&topics.events)?;
        let decision_partitions = partitions(&topics.decisions)?;
        let dead_letter_partitions = partitions(&topics.dead_letter)?;

        let watermarks = |topic: &str, partition: i32| {
            consumer
                .fetch_watermarks(topic, partition, REQUEST_TIMEOUT)
                .map_err(|cause| ClosedLoopError::Watermarks {
                    topic: topic.to_owned(),
                    cause,
                })
        };
        let mut prior_input_messages = 0;
        for p in 0..input_partitions {
            let (low, high) = watermarks(&topics.events, p)?;
            prior_input_messages += high - low;
        }
        let mut dead_letters = 0;
        for p in 0..dead_letter_partitions {
            dead_letters += watermarks(&topics.dead_letter, p)?.1;
        }
        // Decisions published before this run are not ours.
        let mut read_to = BTreeMap::new();
        let mut assignment = TopicPartitionList::new();
        for p in 0..decision_partitions {
            let high = watermarks(&topics.decisions, p)?.1;
            read_to.insert(p, high);
            assignment
                .add_partition_offset(&topics.decisions, p, Offset::Offset(high))
                .map_err(|cause| ClosedLoopError::Assign {
                    topic: topics.decisions.clone(),
                    cause,
                })?;
        }
        consumer
            .assign(&assignment)
            .map_err(|cause| ClosedLoopError::Assign {
                topic: topics.decisions.clone(),
                cause,
            })?;
        Ok(Service {
            config,
            policy,
            producer,
            consumer,
            read_to,
            dead_letters,
            dead_letter_partitions,
            newest: Newest::default(),
            jobs_done: 0,
            summary: LoopSummary {
                instants: 0,
                events: 0,
                decisions: 0,
                duplicates: 0,
                prior_input_messages,
                elapsed_secs: 0.0,
            },
            progress,
        })
    }

    fn timed_out(&self, what: &str) -> String {
        format!(
            "the service did not catch up within {} s ({what}): is `jobcast serve` running with group {} on brokers {}, reading {} and publishing {}?",
            self.config.catch_up_timeout.as_secs_f64(),
            self.config.group,
            self.config.kafka.brokers,
            self.config.topics.events,
            self.config.topics.decisions
        )
    }

    /// Produce the events to partition 0 of the input topic and wait for
    /// every acknowledgement; the offset of the last one.
    fn produce(&self, events: &[SimEvent<'_>], deadline: Instant) -> Result<i64, String> {
        let topic = &self.config.topics.events;
        let deliveries = self.producer.context();
        let delivered_before = deliveries.delivered();
        let mut payload = Vec::new();
        for (index, event) in events.iter().enumerate() {
            let event = event.to_event();
            payload.clear();
            encode(&event, &mut payload);
            let key = event_key(&event);
            let record = BaseRecord::with_opaque_to(topic, index)
                .partition(0)
                .key(&key)
                .payload(&payload);
            send_when_room(&self.producer, record, Duration::from_millis(5), || {})
                .map_err(|e| format!("producing to {topic}: {e}"))?;
        }
        // Not `flush`: rust-rdkafka's serves delivery reports in 100 ms
        // polls, which would be most of an instant's round trip.
        while self.producer.in_flight_count() > 0 {
            if Instant::now() >= deadline {
                return Err(format!(
                    "{topic} did not acknowledge {} events within {} s",
                    self.producer.in_flight_count(),
                    self.config.catch_up_timeout.as_secs_f64()
                ));
            }
            self.producer.poll(DELIVERY_POLL);
        }
        if let Some(failure) = deliveries.take_failures().first() {
            return Err(format!("delivering events to {topic}: {}", failure.error));
        }
        let highest = deliveries.highest_offsets();
        if let Some(p) = highest.keys().find(|&&p| p != 0) {
            return Err(format!(
                "events landed on partition {p} of {topic}, not 0 (is a custom partitioner configured?)"
            ));
        }
        match highest.get(&0) {
            Some(&last) if deliveries.delivered() > delivered_before => Ok(last),
            _ => Err(format!("{topic} acknowledged none of the events")),
        }
    }

    /// Wait until the service's group has committed an offset beyond
    /// `last` on partition 0 of the input topic.
    fn wait_for_service(&self, last: i64, deadline: Instant) -> Result<(), String> {
        let topic = &self.config.topics.events;
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(topic, 0);
        let mut backoff = Duration::from_millis(1);
        let mut seen = String::from("none");
        loop {
            match self
                .consumer
                .committed_offsets(tpl.clone(), REQUEST_TIMEOUT)
            {
                Ok(committed) => {
                    let offset = committed.find_partition(topic, 0).map(|e| e.offset());
                    if let Some(Offset::Offset(next)) = offset {
                        if next > last {
                            return Ok(());
                        }
                        seen = next.to_string();
                    }
                }
                Err(e) => seen = format!("unknown ({e})"),
            }
            if Instant::now() >= deadline {
                return Err(self.timed_out(&format!(
                    "its committed offset on {topic} partition 0 is {seen}, waiting for more than {last}"
                )));
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(MAX_BACKOFF);
        }
    }

    /// Fail if the service refused any event during the run.
    fn check_dead_letters(&self) -> Result<(), ClosedLoopError> {
        let topic = &self.config.topics.dead_letter;
        let mut total = 0;
        for p in 0..self.dead_letter_partitions {
            let (_, high) = self
                .consumer
                .fetch_watermarks(topic, p, REQUEST_TIMEOUT)
                .map_err(|cause| ClosedLoopError::Watermarks {
                    topic: topic.clone(),
                    cause,
                })?;
            total += high;
        }
        if total > self.dead_letters {
            return Err(ClosedLoopError::DeadLettered {
                count: total - self.dead_letters,
                topic: topic.clone(),
                events: self.config.topics.events.clone(),
            });
        }
        Ok(())
    }

    /// Every decision published since the last instant, in each
    /// partition's order.
    fn read_decisions(&mut self, deadline: Instant) -> Result<Vec<Decision>, String> {
        let topic = self.config.topics.decisions.clone();
        let mut targets = BTreeMap::new();
        for &p in self.read_to.keys() {
            let (_, high) = self
                .consumer
                .fetch_watermarks(&topic, p, REQUEST_TIMEOUT)
                .map_err(|e| format!("reading the watermarks of {topic}: {e}"))?;
            targets.insert(p, high);
        }
        let mut decisions = Vec::new();
        let mut last_error = None;
        while self.read_to.iter().any(|(p, &at)| at < targets[p]) {
            if Instant::now() >= deadline {
                let behind: Vec<String> = self
                    .read_to
                    .iter()
                    .filter(|(p, at)| **at < targets[*p])
                    .map(|(p, at)| format!("partition {p} at {at} of {}", targets[p]))
                    .collect();
                return Err(format!(
                    "reading {topic} timed out ({}){}",
                    behind.join(", "),
                    last_error
                        .map(|e| format!(", last error: {e}"))
                        .unwrap_or_default()
                ));
            }
            let message = match self.consumer.poll(Duration::from_millis(10)) {
                None => continue,
                Some(Err(KafkaError::PartitionEOF(_))) => continue,
                Some(Err(e)) => {
                    last_error = Some(e.to_string());
                    continue;
                }
                Some(Ok(message)) => message,
            };
            self.read_to
                .insert(message.partition(), message.offset() + 1);
            if !is_runtime_decision(&message) {
                continue;
            }
            let place = || {
                format!(
                    "{topic} partition {} offset {}",
                    message.partition(),
                    message.offset()
                )
            };
            let decision: Decision = serde_json::from_slice(message.payload().unwrap_or_default())
                .map_err(|e| format!("{}: not a decision: {e}", place()))?;
            if decision.policy != self.policy {
                return Err(format!(
                    "{}: the service publishes decisions of policy {}, but the simulation is of {}: run `jobcast serve --policy {}`",
                    place(),
                    decision.policy.name(),
                    self.policy.name(),
                    self.policy.name()
                ));
            }
            if !self.newest.offer(decision.clone()) {
                self.summary.duplicates += 1;
                continue;
            }
            decisions.push(decision);
        }
        Ok(decisions)
    }
}

impl Predictions for Service<'_> {
    fn kind(&self) -> PolicyKind {
        self.policy
    }

    fn instant(&mut self, now_us: u64, events: &[SimEvent<'_>]) -> Result<Vec<Decision>, String> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = Instant::now() + self.config.catch_up_timeout;
        let last = self.produce(events, deadline)?;
        self.wait_for_service(last, deadline)?;
        let decisions = self.read_decisions(deadline)?;
        self.summary.instants += 1;
        self.summary.events += events.len() as u64;
        self.summary.decisions += decisions.len() as u64;
        self.jobs_done += events
            .iter()
            .filter(|e| matches!(e, SimEvent::Ended { .. }))
            .count() as u64;
        (self.progress)(&Progress {
            jobs_done: self.jobs_done,
            instants: self.summary.instants,
            now_us,
        });
        Ok(decisions)
    }
}
