//! Trace replay against librdkafka's in-process mock cluster: what is
//! produced comes back complete, keyed by job and in order per job;
//! resuming from an event offset produces exactly the rest; pacing, the
//! gate and delivery failures behave as documented.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use jobcast_ingest::kafka::{KafkaSettings, event_key};
use jobcast_ingest::{Event, Format, decode, encode};
use jobcast_replay::kafka::{Outcome, ReplayOptions, ReplaySummary, Speed, Ungated, replay};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

const PARTITIONS: i32 = 4;
const TOPIC: &str = "jobcast.events";

fn excerpt() -> Vec<Event> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/data/google2011-excerpt");
    jobcast_ingest::open(Format::Google2011, &dir)
        .expect("the bundled excerpt opens")
        .collect::<Result<_, _>>()
        .expect("the bundled excerpt reads")
}

/// A mock cluster with `TOPIC` in `PARTITIONS` partitions.
type Mock = MockCluster<'static, DefaultProducerContext>;

fn cluster() -> Mock {
    let mock = MockCluster::new(1).expect("mock cluster starts");
    mock.create_topic(TOPIC, PARTITIONS, 1)
        .expect("topic is created");
    mock
}

fn run(mock: &Mock, options: &ReplayOptions, events: &[Event]) -> ReplaySummary {
    replay(
        &KafkaSettings::new(mock.bootstrap_servers()),
        options,
        events.iter().cloned().map(Ok::<_, Infallible>),
        &Ungated,
        |_| {},
    )
    .expect("replay runs")
}

struct Consumed {
    partition: i32,
    key: String,
    value: Vec<u8>,
    /// The producer's send time, in ms.
    sent_ms: i64,
}

/// Read `n` messages back from every partition of `topic`, from the
/// beginning, and check that no more follow.
fn consume(brokers: &str, topic: &str, n: usize) -> Vec<Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "kafka-replay-test")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer is created");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .expect("valid offset");
    }
    consumer.assign(&assignment).expect("partitions assigned");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        assert!(
            Instant::now() < deadline,
            "only {} of {n} messages came back",
            out.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("consumed without error");
            out.push(Consumed {
                partition: message.partition(),
                key: String::from_utf8(message.key().expect("keyed").to_vec()).expect("UTF-8 key"),
                value: message.payload().expect("has a value").to_vec(),
                sent_ms: message.timestamp().to_millis().expect("timestamped"),
            });
        }
    }
    assert!(
        consumer.poll(Duration::from_millis(500)).is_none(),
        "more than the {n} messages produced came back"
    );
    out
}

/// The encoded events of each key, in stream order.
fn expected_by_key(events: &[Event]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut by_key: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    for event in events {
        let mut value = Vec::new();
        encode(event, &mut value);
        by_key.entry(event_key(event)).or_default().push(value);
    }
    by_key
}

/// Check every consumed message's key against its event and event-time
/// order within each key, and group values by key in consumption order.
fn consumed_by_key(consumed: &[Consumed]) -> BTreeMap<String, Vec<Vec<u8>>> {
    let mut by_key: BTreeMap<String, Vec<Vec<u8>>> = BTreeMap::new();
    let mut partition_of: BTreeMap<&str, i32> = BTreeMap::new();
    let mut last_time: BTreeMap<&str, u64> = BTreeMap::new();
    for message in consumed {
        let event = decode(&message.value).expect("values are canonical JSON");
        assert_eq!(message.key, event_key(&event), "key of {event:?}");
        let partition = *partition_of
            .entry(&message.key)
            .or_insert(message.partition);
        assert_eq!(
            partition, message.partition,
            "key {} in two partitions",
            message.key
        );
        let last = last_time.entry(&message.key).or_insert(0);
        assert!(
            event.time_us() >= *last,
            "key {}: event at {} after one at {}",
            message.key,
            event.time_us(),
            last
        );
        *last = event.time_us();
        by_key
            .entry(message.key.clone())
            .or_default()
            .push(message.value.clone());
    }
    by_key
}

#[test]
fn the_excerpt_comes_back_complete_keyed_and_in_order_per_job() {
    let events = excerpt();
    let mock = cluster();
    let summary = run(&mock, &ReplayOptions::new(TOPIC), &events);

    let n = events.len() as u64;
    assert_eq!(summary.outcome, Outcome::Complete);
    assert_eq!(
        (
            summary.skipped,
            summary.produced,
            summary.delivered,
            summary.failed
        ),
        (0, n, n, 0)
    );
    assert_eq!(summary.resume_from, n);
    let expected = expected_by_key(&events);
    let expected_bytes: usize = expected
        .iter()
        .map(|(key, values)| values.iter().map(|v| key.len() + v.len()).sum::<usize>())
        .sum();
    assert_eq!(summary.bytes, expected_bytes as u64);

    let consumed = consume(&mock.bootstrap_servers(), TOPIC, events.len());
    assert_eq!(consumed_by_key(&consumed), expected);
    let partitions: std::collections::BTreeSet<i32> =
        consumed.iter().map(|m| m.partition).collect();
    assert_eq!(
        partitions.len(),
        PARTITIONS as usize,
        "keys spread over all partitions"
    );
}

#[test]
fn skip_resumes_exactly_at_the_event_offset() {
    let events = excerpt();
    let skip = events.len() / 3 + 7;
    let mock = cluster();
    let options = ReplayOptions {
        skip: skip as u64,
        ..ReplayOptions::new(TOPIC)
    };
    let summary = run(&mock, &options, &events);

    let rest = (events.len() - skip) as u64;
    assert_eq!(summary.outcome, Outcome::Complete);
    assert_eq!(
        (summary.skipped, summary.produced, summary.delivered),
        (skip as u64, rest, rest)
    );
    assert_eq!(summary.resume_from, events.len() as u64);
    let consumed = consume(&mock.bootstrap_servers(), TOPIC, rest as usize);
    assert_eq!(consumed_by_key(&consumed), expected_by_key(&events[skip..]));
}

#[test]
fn a_stopped_replay_resumes_where_it_stopped() {
    let events = &excerpt()[..2000];
    let mock = cluster();
    let settings = KafkaSettings::new(mock.bootstrap_servers());
    let seen = RefCell::new(Vec::new());
    let gate = |produced: u64| {
        seen.borrow_mut().push(produced);
        if produced == 500 {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    };
    let first = replay(
        &settings,
        &ReplayOptions::new(TOPIC),
        events.iter().cloned().map(Ok::<_, Infallible>),
        &gate,
        |_| {},
    )
    .expect("replay runs");
    assert_eq!(first.outcome, Outcome::Stopped);
    assert_eq!((first.produced, first.delivered), (500, 500));
    assert_eq!(first.resume_from, 500);
    assert_eq!(*seen.borrow(), (0..=500).collect::<Vec<u64>>());

    let options = ReplayOptions {
        skip: first.resume_from,
        ..ReplayOptions::new(TOPIC)
    };
    let second = run(&mock, &options, events);
    assert_eq!(second.outcome, Outcome::Complete);
    assert_eq!(second.delivered, 1500);
    let consumed = consume(&mock.bootstrap_servers(), TOPIC, events.len());
    assert_eq!(consumed_by_key(&consumed), expected_by_key(events));
}

/// `n` job-end events of distinct jobs, `step_us` apart in event time.
fn spaced_events(n: u64, step_us: u64) -> Vec<Event> {
    (0..n)
        .map(|i| {
            let json = format!(
                r#"{{"v":1,"type":"job_ended","time_us":{},"job_id":{i},"outcome":"finish"}}"#,
                5_000_000_000 + i * step_us
            );
            decode(json.as_bytes()).expect("valid event")
        })
        .collect()
}

/// Milliseconds between the first and the last send of `events` replayed
/// into a new `topic`.
fn send_span_ms(
    mock: &Mock,
    topic: &str,
    events: &[Event],
    speed: Speed,
    rate: Option<f64>,
) -> i64 {
    mock.create_topic(topic, PARTITIONS, 1)
        .expect("topic is created");
    let options = ReplayOptions {
        speed,
        rate,
        ..ReplayOptions::new(topic)
    };
    let summary = run(mock, &options, events);
    assert_eq!(summary.delivered, events.len() as u64, "{summary:?}");
    let consumed = consume(&mock.bootstrap_servers(), topic, events.len());
    let first = consumed.iter().map(|m| m.sent_ms).min().expect("messages");
    let last = consumed.iter().map(|m| m.sent_ms).max().expect("messages");
    last - first
}

/// How far below its due span a measured span may fall: message timestamps
/// are whole wall-clock milliseconds, and the pacing clock starts just
/// before the first send, so the first message can be stamped a
/// millisecond or two after the origin the last one is due from.
const STAMP_SLACK_MS: i64 = 5;

#[test]
fn speed_paces_in_event_time_and_rate_caps() {
    let mock = cluster();
    // 5 events over 2 s of event time: sent over 400 ms at 5x, at once at
    // max speed.
    let events = spaced_events(5, 500_000);
    let paced = send_span_ms(&mock, "paced", &events, Speed::Factor(5.0), None);
    assert!((400 - STAMP_SLACK_MS..1000).contains(&paced), "{paced} ms");
    let max = send_span_ms(&mock, "max", &events, Speed::Max, None);
    assert!(max < 100, "{max} ms");

    // 20 simultaneous events at 50/s: the last is due 19/50 s after the first.
    let events = spaced_events(20, 0);
    let capped = send_span_ms(&mock, "capped", &events, Speed::Factor(1.0), Some(50.0));
    assert!(
        (380 - STAMP_SLACK_MS..1000).contains(&capped),
        "{capped} ms"
    );
}

#[test]
fn delivery_failures_are_reported_and_stop_the_replay() {
    let mock = cluster();
    let mut settings = KafkaSettings::new(mock.bootstrap_servers());
    settings
        .client
        .insert("message.timeout.ms".into(), "1000".into());
    // 1000 events at 200/s would take 5 s; the broker goes down after 20.
    let events = spaced_events(1000, 0);
    let options = ReplayOptions {
        rate: Some(200.0),
        ..ReplayOptions::new(TOPIC)
    };
    let down = Cell::new(false);
    let gate = |produced: u64| {
        if produced == 20 && !down.replace(true) {
            mock.broker_down(1).expect("broker goes down");
        }
        ControlFlow::Continue(())
    };
    let summary = replay(
        &settings,
        &options,
        events.iter().cloned().map(Ok::<_, Infallible>),
        &gate,
        |_| {},
    )
    .expect("replay runs");

    assert_eq!(summary.outcome, Outcome::DeliveryFailed, "{summary:?}");
    assert!(summary.failed > 0, "{summary:?}");
    assert_eq!(summary.delivered + summary.failed, summary.produced);
    assert!(summary.produced < 1000, "did not stop early: {summary:?}");
    let failure = summary.first_failure.as_ref().expect("failure reported");
    assert!(failure.event < summary.produced, "{summary:?}");
    assert_eq!(summary.resume_from, failure.event);

    // Every event before the resume point is in the topic (job id = offset).
    mock.broker_up(1).expect("broker comes back");
    let consumed = consume(&mock.bootstrap_servers(), TOPIC, summary.delivered as usize);
    let jobs: std::collections::BTreeSet<u64> = consumed
        .iter()
        .map(|m| {
            decode(&m.value)
                .expect("canonical JSON")
                .job_id()
                .expect("job event")
        })
        .collect();
    assert!(
        (0..summary.resume_from).all(|job| jobs.contains(&job)),
        "an event before the resume point is missing: {summary:?}"
    );
}
