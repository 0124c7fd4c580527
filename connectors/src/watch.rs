//! Following a live cluster (`jobcast slurm watch`): a look at the
//! cluster through its [`LiveSource`] every interval, and the events it
//! says published to the input topic, keyed as every producer keys them.
//!
//! Nothing is lost or published twice when the watcher stops at any point.
//! The state file holds the source's state (what it has said). A look's
//! events are first written to it as *pending*, with the topic's end
//! offsets before them, and only then produced; once every one is
//! acknowledged the state is written again without them. A watcher that
//! stopped in between (killed, or the brokers gone) reads the topic from
//! those offsets on before anything else, and produces only the pending
//! events it does not find there.
//!
//! One watcher owns a state file: it holds an exclusive lock on it (a
//! file beside it, `STATE.lock`) for as long as it runs, and a second
//! watcher on the same state refuses to start. A missing state file is a
//! fresh start, which publishes every job the scheduler lists, only when
//! asked for (`WatchOptions::fresh`): a state file lost or pointed at the
//! wrong path would otherwise publish every listed job again. A batch is
//! waited for until every message has its delivery report, which
//! librdkafka gives within `message.timeout.ms`: a batch given up on
//! sooner would be produced again while its first copy was still on its
//! way.
//!
//! What a stop costs beyond that is the scheduler's: Slurm keeps a
//! finished job in `squeue` for `MinJobAge` (300 s by default), and a
//! watcher stopped for longer misses the ends of the jobs that finished
//! meanwhile: they end `lost` (`crate::slurm`).

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use rdkafka::Message;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use serde::{Deserialize, Serialize};

use jobcast_ingest::deliveries::{Deliveries, send_when_room};
use jobcast_ingest::kafka::{KafkaSettings, ReadError, event_key, partitions, read_to_end};

use crate::LiveSource;
use crate::state_file::StateFile;

/// How long a broker may take to answer a metadata or offsets request.
const BROKER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long reading pending events back from the topic may take.
const READ_BACK_TIMEOUT: Duration = Duration::from_secs(60);
/// How long to serve delivery reports before retrying a send that found
/// the producer's queue full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(5);
/// librdkafka's default `message.timeout.ms`: a message has its delivery
/// report (delivered, or failed) within it.
const DEFAULT_MESSAGE_TIMEOUT_MS: u64 = 300_000;
/// Beyond `message.timeout.ms`, how long to wait for the last reports.
const FLUSH_MARGIN: Duration = Duration::from_secs(10);

/// Where to publish and keep state, and how often to look.
#[derive(Debug, Clone)]
pub struct WatchOptions {
    /// The input topic.
    pub topic: String,
    /// The state file.
    pub state: PathBuf,
    pub interval: Duration,
    /// Start from no state: the state file must not exist, and is created.
    /// Without it, it must exist.
    pub fresh: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    /// The scheduler did not answer (Slurm: `squeue` failed).
    #[error("{0}")]
    Source(String),
    #[error("{0}")]
    State(String),
    #[error("Kafka: {0}")]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Read(#[from] ReadError),
    #[error("{unacknowledged} of {count} events not acknowledged: {reason}")]
    Publish {
        unacknowledged: usize,
        count: usize,
        reason: String,
    },
}

/// A snapshot's events on their way to the topic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Pending {
    /// Each partition's end offset before they were produced.
    ends: BTreeMap<i32, i64>,
    /// Key and canonical JSON of each, in order.
    messages: Vec<(String, String)>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(bound = "M: Serialize + serde::de::DeserializeOwned + Default")]
struct Saved<M> {
    /// The source's state (named `tracker` while Slurm was the only one).
    #[serde(alias = "tracker")]
    source: M,
    pending: Option<Pending>,
}

/// What one poll did.
#[derive(Debug, Default, PartialEq)]
pub struct Polled {
    /// Events published (those of an earlier poll left pending included).
    pub published: usize,
    /// Jobs that left the scheduler's view before they ended.
    pub lost_jobs: u64,
    /// Records skipped, each with why.
    pub skipped: Vec<String>,
    /// Jobs followed now.
    pub jobs: usize,
    /// Jobs of the site's history among the events.
    pub history_jobs: u64,
}

/// A watcher with its state loaded and its clients connected.
pub struct Watcher<S: LiveSource> {
    options: WatchOptions,
    source: S,
    /// The source's state and the pending events, under the state
    /// file's lock while the watcher lives.
    saved: StateFile<Saved<S::State>>,
    producer: BaseProducer<Deliveries>,
    consumer: BaseConsumer,
    /// How long a batch may take to be acknowledged: past
    /// `message.timeout.ms`, so that every message has its report.
    flush_timeout: Duration,
}

impl<S: LiveSource> Watcher<S> {
    /// Lock and load the state (a fresh one only if asked for) and
    /// connect; the topic must exist.
    pub fn open(
        kafka: &KafkaSettings,
        options: WatchOptions,
        source: S,
    ) -> Result<Self, WatchError> {
        let mut saved: StateFile<Saved<S::State>> =
            StateFile::open(&options.state).map_err(WatchError::State)?;
        match (saved.existed(), options.fresh) {
            (false, false) => {
                return Err(WatchError::State(format!(
                    "state file {} does not exist: start with --fresh to follow the cluster from \
                     scratch (every job it lists is published), or name the existing state file",
                    options.state.display()
                )));
            }
            (true, true) => {
                return Err(WatchError::State(format!(
                    "state file {} exists: a fresh start would publish again what it records; \
                     start without --fresh to go on from it",
                    options.state.display()
                )));
            }
            _ => {}
        }
        if options.fresh {
            saved.save().map_err(WatchError::State)?;
        }
        let producer_config = kafka.producer_config();
        let message_timeout_ms = ["message.timeout.ms", "delivery.timeout.ms"]
            .into_iter()
            .find_map(|key| producer_config.get(key)?.parse::<u64>().ok())
            .unwrap_or(DEFAULT_MESSAGE_TIMEOUT_MS);
        let producer: BaseProducer<Deliveries> = producer_config
            .create_with_context(Deliveries::new())
            .map_err(|e| kafka.redact(e))?;
        let mut config = kafka.client_config();
        config
            .set("group.id", "jobcast-watch")
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        let consumer: BaseConsumer = config.create().map_err(|e| kafka.redact(e))?;
        let watcher = Watcher {
            options,
            source,
            saved,
            producer,
            consumer,
            flush_timeout: Duration::from_millis(message_timeout_ms) + FLUSH_MARGIN,
        };
        partitions(&watcher.consumer, &watcher.options.topic, BROKER_TIMEOUT)?;
        Ok(watcher)
    }

    /// Publish what an earlier poll left pending, then look at the
    /// cluster and publish what it says.
    pub fn poll(&mut self) -> Result<Polled, WatchError> {
        let mut polled = Polled {
            published: self.settle()?,
            ..Polled::default()
        };
        // What the source had said, should this look not reach the state
        // file: its events are then said again at the next.
        let before = self.saved.source.clone();
        let observed = self
            .source
            .observe(&mut self.saved.source)
            .map_err(WatchError::Source)?;
        polled.lost_jobs = observed.lost_jobs;
        polled.skipped = observed.skipped;
        polled.jobs = observed.followed;
        polled.history_jobs = observed.history_jobs;
        let mut messages = Vec::with_capacity(observed.events.len());
        for event in &observed.events {
            messages.push((event_key(event), event.to_json()));
        }
        let ends = if messages.is_empty() {
            Ok(BTreeMap::new())
        } else {
            self.end_offsets()
        };
        let saved = ends.and_then(|ends| {
            self.saved.pending = (!messages.is_empty()).then_some(Pending { ends, messages });
            self.save()
        });
        if let Err(e) = saved {
            self.saved.source = before;
            self.saved.pending = None;
            return Err(e);
        }
        polled.published += self.settle()?;
        Ok(polled)
    }

    /// Publish the pending events the topic does not hold yet, and forget
    /// them; how many were published.
    fn settle(&mut self) -> Result<usize, WatchError> {
        let Some(pending) = &self.saved.pending else {
            return Ok(0);
        };
        let there: HashSet<(String, String)> = self.read_back(&pending.ends)?.into_iter().collect();
        let missing: Vec<&(String, String)> = pending
            .messages
            .iter()
            .filter(|m| !there.contains(*m))
            .collect();
        self.publish(&missing)?;
        let published = missing.len();
        self.saved.pending = None;
        self.save()?;
        Ok(published)
    }

    /// Each partition's end offset now.
    fn end_offsets(&self) -> Result<BTreeMap<i32, i64>, WatchError> {
        let topic = &self.options.topic;
        let mut ends = BTreeMap::new();
        for partition in partitions(&self.consumer, topic, BROKER_TIMEOUT)? {
            let (_, high) = self
                .consumer
                .fetch_watermarks(topic, partition, BROKER_TIMEOUT)?;
            ends.insert(partition, high);
        }
        Ok(ends)
    }

    /// The (key, value) of every message after `from` in the topic.
    fn read_back(&self, from: &BTreeMap<i32, i64>) -> Result<Vec<(String, String)>, WatchError> {
        let text =
            |bytes: Option<&[u8]>| String::from_utf8_lossy(bytes.unwrap_or_default()).into_owned();
        let mut there = Vec::new();
        read_to_end(
            &self.consumer,
            &self.options.topic,
            &mut from.clone(),
            (BROKER_TIMEOUT, READ_BACK_TIMEOUT),
            |message| there.push((text(message.key()), text(message.payload()))),
        )?;
        Ok(there)
    }

    /// Produce `messages` in order and wait until each is acknowledged.
    fn publish(&self, messages: &[&(String, String)]) -> Result<(), WatchError> {
        let deliveries = self.producer.context();
        let failed_before = deliveries.failed();
        let delivered_before = deliveries.delivered();
        deliveries.take_failures();
        for (index, (key, value)) in messages.iter().enumerate() {
            let record = BaseRecord::with_opaque_to(&self.options.topic, index)
                .key(key.as_str())
                .payload(value.as_str());
            send_when_room(&self.producer, record, QUEUE_FULL_WAIT, || {})?;
        }
        let flushed = self.producer.flush(self.flush_timeout);
        let delivered = (deliveries.delivered() - delivered_before) as usize;
        let failure = deliveries.first_failure().map(|f| f.error.to_string());
        if delivered < messages.len() || deliveries.failed() > failed_before {
            return Err(WatchError::Publish {
                unacknowledged: messages.len() - delivered.min(messages.len()),
                count: messages.len(),
                reason: failure
                    .or_else(|| flushed.err().map(|e| e.to_string()))
                    .unwrap_or_else(|| "not acknowledged in time".into()),
            });
        }
        Ok(())
    }

    fn save(&mut self) -> Result<(), WatchError> {
        self.saved.save().map_err(WatchError::State)
    }
}

/// Poll every `options.interval` until `stop` is set, each poll's outcome
/// handed to `report`. Only opening (the state file, the brokers, the
/// topic) fails; a poll that fails is reported and the next one goes on.
pub fn watch<S: LiveSource>(
    kafka: &KafkaSettings,
    options: WatchOptions,
    source: S,
    stop: &AtomicBool,
    mut report: impl FnMut(Result<&Polled, &WatchError>),
) -> Result<(), WatchError> {
    let interval = options.interval;
    let mut watcher = Watcher::open(kafka, options, source)?;
    crate::every(interval, stop, || match watcher.poll() {
        Ok(polled) => report(Ok(&polled)),
        Err(e) => report(Err(&e)),
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use rdkafka::mocking::MockCluster;

    use super::*;
    use crate::slurm::{SlurmSource, SlurmTracker};
    use jobcast_ingest::event::decode;

    const TOPIC: &str = "slurm.events";

    /// The recorded snapshots (`slurm/tracker.rs`), one per file, and a
    /// watcher of Slurm, the scheduler jobcast follows today,
    /// whose `squeue` prints the file `current`.
    struct Fixture {
        dir: tempfile::TempDir,
        snapshots: Vec<String>,
    }

    impl Fixture {
        fn new() -> Self {
            let snapshots = include_str!("../tests/data/slurm/squeue-22.05.jsonl")
                .lines()
                .map(str::to_owned)
                .collect();
            Fixture {
                dir: tempfile::tempdir().unwrap(),
                snapshots,
            }
        }

        fn show(&self, snapshot: usize) {
            std::fs::write(self.dir.path().join("current"), &self.snapshots[snapshot]).unwrap();
        }

        fn watcher<C: rdkafka::ClientContext>(
            &self,
            mock: &MockCluster<'_, C>,
        ) -> Watcher<SlurmSource> {
            self.watcher_since(mock, None)
        }

        fn watcher_since<C: rdkafka::ClientContext>(
            &self,
            mock: &MockCluster<'_, C>,
            since: Option<u64>,
        ) -> Watcher<SlurmSource> {
            let state = self.dir.path().join("state.json");
            let options = options(&state, !state.exists());
            let source = SlurmSource {
                squeue: vec![
                    "cat".into(),
                    self.dir.path().join("current").display().to_string(),
                ],
                since,
                history: None,
            };
            let kafka = KafkaSettings::new(mock.bootstrap_servers());
            Watcher::open(&kafka, options, source).unwrap()
        }
    }

    /// A watcher's options in the tests: their topic, this state.
    fn options(state: &std::path::Path, fresh: bool) -> WatchOptions {
        WatchOptions {
            topic: TOPIC.into(),
            state: state.to_owned(),
            interval: Duration::from_millis(10),
            fresh,
        }
    }

    /// Every message of the topic, decoded.
    fn topic_events(watcher: &Watcher<SlurmSource>) -> Vec<jobcast_ingest::Event> {
        watcher
            .read_back(&BTreeMap::new())
            .unwrap()
            .into_iter()
            .map(|(_, value)| decode(value.as_bytes()).unwrap())
            .collect()
    }

    fn sorted(mut events: Vec<jobcast_ingest::Event>) -> Vec<String> {
        let mut out: Vec<String> = events.drain(..).map(|e| e.to_json()).collect();
        out.sort();
        out
    }

    /// What the tracker alone says of every snapshot.
    fn expected(fixture: &Fixture) -> Vec<String> {
        let mut tracker = SlurmTracker::default();
        sorted(
            fixture
                .snapshots
                .iter()
                .flat_map(|s| {
                    tracker
                        .observe(&crate::slurm::parse_squeue(s.as_bytes()).unwrap())
                        .events
                })
                .collect(),
        )
    }

    #[test]
    fn each_snapshots_new_events_reach_the_topic_once() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 2, 1).unwrap();
        let fixture = Fixture::new();
        let mut watcher = fixture.watcher(&mock);
        let mut published = 0;
        for snapshot in 0..fixture.snapshots.len() {
            fixture.show(snapshot);
            published += watcher.poll().unwrap().published;
            // Polled again, the same snapshot adds nothing.
            assert_eq!(watcher.poll().unwrap().published, 0);
        }
        let events = topic_events(&watcher);
        assert_eq!(events.len(), published);
        assert_eq!(sorted(events), expected(&fixture));
    }

    /// A record that is not a job as jobcast reads it is reported with its
    /// place and skipped; the snapshot's other jobs are published.
    #[test]
    fn an_unreadable_record_is_reported_and_the_others_published() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let mut fixture = Fixture::new();
        let last = fixture.snapshots.len() - 1;
        let clean = fixture.snapshots[last].clone();
        let mut json: serde_json::Value = serde_json::from_str(&clean).unwrap();
        let jobs = json["jobs"].as_array_mut().unwrap();
        jobs.insert(0, serde_json::json!({"job_id": 77, "job_state": 5}));
        fixture.snapshots[last] = json.to_string();
        fixture.show(last);
        let mut watcher = fixture.watcher(&mock);
        let polled = watcher.poll().unwrap();
        assert_eq!(polled.skipped.len(), 1, "{:?}", polled.skipped);
        assert!(
            polled.skipped[0].starts_with("squeue --json record 0 (job_id 77): invalid type"),
            "{}",
            polled.skipped[0]
        );
        let alone = SlurmTracker::default()
            .observe(&crate::slurm::parse_squeue(clean.as_bytes()).unwrap())
            .events;
        assert!(!alone.is_empty());
        assert_eq!(sorted(topic_events(&watcher)), sorted(alone));
    }

    /// The finished jobs an earlier run left in `squeue` are not followed
    /// by a watcher told to start after them, and are by one told to start
    /// at their submission.
    #[test]
    fn jobs_submitted_before_since_are_not_followed() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let fixture = Fixture::new();
        let last = fixture.snapshots.len() - 1;
        fixture.show(last);
        let submitted = crate::slurm::parse_squeue(fixture.snapshots[last].as_bytes())
            .unwrap()
            .jobs[0]
            .submit_time;
        let mut after = fixture.watcher_since(&mock, Some(submitted + 1));
        let polled = after.poll().unwrap();
        assert_eq!((polled.published, polled.jobs), (0, 0));
        assert!(topic_events(&after).is_empty());
        drop(after);
        std::fs::remove_file(fixture.dir.path().join("state.json")).unwrap();
        let mut at = fixture.watcher_since(&mock, Some(submitted));
        let polled = at.poll().unwrap();
        assert_eq!(polled.jobs, 5);
        assert!(polled.published > 5, "{polled:?}");
    }

    #[test]
    fn a_watcher_stopped_while_publishing_publishes_the_rest_and_nothing_twice() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 2, 1).unwrap();
        let fixture = Fixture::new();
        let mut watcher = fixture.watcher(&mock);
        fixture.show(0);
        watcher.poll().unwrap();
        // The second snapshot's events are pending; half of them reached
        // the topic when the watcher stopped.
        fixture.show(1);
        let observed = watcher.source.observe(&mut watcher.saved.source).unwrap();
        let messages: Vec<(String, String)> = observed
            .events
            .iter()
            .map(|e| (event_key(e), e.to_json()))
            .collect();
        assert!(messages.len() >= 4, "{messages:?}");
        watcher.saved.pending = Some(Pending {
            ends: watcher.end_offsets().unwrap(),
            messages: messages.clone(),
        });
        watcher.save().unwrap();
        let half: Vec<&(String, String)> = messages.iter().step_by(2).collect();
        watcher.publish(&half).unwrap();
        drop(watcher);

        let mut restarted = fixture.watcher(&mock);
        let polled = restarted.poll().unwrap();
        assert_eq!(polled.published, messages.len() - half.len());
        for snapshot in 2..fixture.snapshots.len() {
            fixture.show(snapshot);
            restarted.poll().unwrap();
        }
        assert_eq!(sorted(topic_events(&restarted)), expected(&fixture));
    }

    /// A second watcher on the state of a running one refuses to start;
    /// once the first is gone, it starts.
    #[test]
    fn a_second_watcher_on_the_same_state_refuses_to_start() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let fixture = Fixture::new();
        fixture.show(0);
        let mut first = fixture.watcher(&mock);
        first.poll().unwrap();
        let options = options(&fixture.dir.path().join("state.json"), false);
        let source = || SlurmSource {
            squeue: vec!["true".into()],
            since: None,
            history: None,
        };
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let Err(err) = Watcher::open(&kafka, options.clone(), source()) else {
            panic!("a second watcher started on the same state");
        };
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
        drop(first);
        Watcher::open(&kafka, options, source()).unwrap();
    }

    /// A missing state file is a fresh start only when asked for, and a
    /// fresh start refuses a state file that exists.
    #[test]
    fn a_missing_state_file_is_refused_unless_the_start_is_fresh() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let kafka = KafkaSettings::new(mock.bootstrap_servers());
        let open = |fresh: bool| {
            let options = options(&dir.path().join("state.json"), fresh);
            let source = SlurmSource {
                squeue: vec!["true".into()],
                since: None,
                history: None,
            };
            Watcher::open(&kafka, options, source).map(drop)
        };
        let err = open(false).unwrap_err().to_string();
        assert!(
            err.contains("does not exist") && err.contains("--fresh"),
            "{err}"
        );
        open(true).unwrap();
        assert!(dir.path().join("state.json").exists());
        let err = open(true).unwrap_err().to_string();
        assert!(err.contains("exists"), "{err}");
        open(false).unwrap();
    }

    /// The broker refuses every produce request for over a minute (the
    /// watcher's former wait, well under librdkafka's own 300 s
    /// `message.timeout.ms`): the batch is waited for until it is
    /// acknowledged, and each event reaches the topic once.
    #[test]
    fn a_broker_refusing_produce_requests_for_over_a_minute_gets_each_event_once() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let fixture = Fixture::new();
        let mut watcher = fixture.watcher(&mock);
        // About a second's back-off each after the first few.
        mock.request_errors(
            RDKafkaApiKey::Produce,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 90],
        );
        let started = std::time::Instant::now();
        for snapshot in 0..fixture.snapshots.len() {
            fixture.show(snapshot);
            watcher.poll().unwrap();
        }
        eprintln!(
            "published in {:.0} s with the broker refusing",
            started.elapsed().as_secs_f64()
        );
        assert!(started.elapsed() > Duration::from_secs(60));
        assert_eq!(sorted(topic_events(&watcher)), expected(&fixture));
    }

    /// A look whose events never reach the state file (the brokers did
    /// not give the topic's end offsets) leaves the source's state as it
    /// was: the next look says its events again, and every event reaches
    /// the topic once.
    #[test]
    fn a_look_that_is_not_saved_is_said_again() {
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let fixture = Fixture::new();
        let mut watcher = fixture.watcher(&mock);
        fixture.show(0);
        // More refusals than one look asks for: a client's own requests
        // in the background may take some of them first.
        mock.request_errors(
            RDKafkaApiKey::ListOffsets,
            &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 16],
        );
        let first = watcher.poll();
        assert!(first.is_err(), "{first:?}");
        assert!(watcher.saved.pending.is_none());
        mock.clear_request_errors(RDKafkaApiKey::ListOffsets);
        assert!(watcher.poll().unwrap().published > 0);
        for snapshot in 1..fixture.snapshots.len() {
            fixture.show(snapshot);
            watcher.poll().unwrap();
        }
        assert_eq!(sorted(topic_events(&watcher)), expected(&fixture));
    }

    #[test]
    fn a_failing_squeue_is_reported_and_the_next_poll_goes_on() {
        let mock = MockCluster::new(1).unwrap();
        mock.create_topic(TOPIC, 1, 1).unwrap();
        let fixture = Fixture::new();
        let mut watcher = fixture.watcher(&mock);
        // No file yet: `cat` fails, saying why.
        let failed = watcher.poll().unwrap_err().to_string();
        assert!(failed.contains("No such file"), "{failed}");
        std::fs::write(fixture.dir.path().join("current"), "{\"jobs\": [").unwrap();
        let failed = watcher.poll().unwrap_err().to_string();
        assert!(failed.contains("line 1"), "{failed}");
        fixture.show(0);
        assert_eq!(watcher.poll().unwrap().jobs, 5);
        // A state file that is not one stops a watcher from starting.
        std::fs::write(fixture.dir.path().join("state.json"), "[").unwrap();
        let (options, source) = (watcher.options.clone(), watcher.source.clone());
        let refused = Watcher::open(
            &KafkaSettings::new(mock.bootstrap_servers()),
            options,
            source,
        );
        assert!(matches!(refused, Err(WatchError::State(_))));
    }
}
