//! `jobcast replay` end to end against librdkafka's mock cluster, hosted in
//! this test process (it listens on localhost TCP, so the `jobcast` child
//! process reaches it like any broker): every good event arrives, bad rows
//! are reported, `--from-event` resumes, and Ctrl-C stops with an exact
//! resume offset. (`--create-topic` needs a real broker: the mock cluster
//! does not implement CreateTopics.)

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobcast_tests::{jobcast, jobcast_bin, jobcast_ok};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::Value;

type Mock = MockCluster<'static, DefaultProducerContext>;

const PARTITIONS: i32 = 4;

fn cluster(topic: &str) -> Mock {
    let mock = MockCluster::new(1).expect("mock cluster starts");
    mock.create_topic(topic, PARTITIONS, 1)
        .expect("topic is created");
    mock
}

/// A synthetic workload as canonical JSON lines; its number of events.
fn generate(path: &Path) -> u64 {
    jobcast_ok(&[
        "generate",
        "--seed",
        "5",
        "--jobs",
        "300",
        "--output",
        path.to_str().unwrap(),
    ]);
    std::fs::read_to_string(path).unwrap().lines().count() as u64
}

/// `jobcast replay ... --json` into `mock`: its output, whatever its status.
fn replay_output(mock: &Mock, trace: &Path, extra: &[&str]) -> std::process::Output {
    let brokers = mock.bootstrap_servers();
    let mut args = vec![
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "jsonl",
        "--brokers",
        &brokers,
        "--json",
    ];
    args.extend(extra);
    jobcast(&args)
}

/// `jobcast replay ... --json` into `mock`, which must succeed; its parsed
/// summary.
fn replay(mock: &Mock, trace: &Path, extra: &[&str]) -> Value {
    let out = replay_output(mock, trace, extra);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// Read every partition of `topic` from the beginning until `n` messages
/// arrived, checking each one's key, then make sure no more follow.
fn consume(mock: &Mock, topic: &str, n: u64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", mock.bootstrap_servers())
        .set("group.id", "replay-cli-test")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = 0;
    while seen < n {
        assert!(Instant::now() < deadline, "only {seen} of {n} came back");
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.unwrap();
            let value: Value = serde_json::from_slice(message.payload().unwrap()).unwrap();
            let key = std::str::from_utf8(message.key().unwrap()).unwrap();
            match value["job_id"].as_u64() {
                Some(job) => assert_eq!(key, job.to_string(), "{value}"),
                None => assert_eq!(key, format!("m{}", value["machine_id"]), "{value}"),
            }
            seen += 1;
        }
    }
    assert!(
        consumer.poll(Duration::from_millis(500)).is_none(),
        "more than {n} messages in {topic}"
    );
}

#[test]
fn every_good_event_arrives_and_bad_rows_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("workload.jsonl");
    let good = generate(&trace);
    let mut text = std::fs::read_to_string(&trace).unwrap();
    text.push_str("{\"v\":1,\"type\":\"nonsense\"}\n");
    std::fs::write(&trace, text).unwrap();

    let mock = cluster("jobcast.events");
    let out = replay_output(&mock, &trace, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("1 skipped"), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "complete", "{summary}");
    assert_eq!(summary["delivered"], good, "{summary}");
    assert_eq!(summary["failed"], 0, "{summary}");
    assert_eq!(summary["resume_from"], good, "{summary}");
    consume(&mock, "jobcast.events", good);
}

#[test]
fn from_event_resumes_at_the_event_offset() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("workload.jsonl");
    let total = generate(&trace);
    let mock = cluster("resumed");
    let summary = replay(
        &mock,
        &trace,
        &["--topic", "resumed", "--from-event", "100"],
    );
    assert_eq!(summary["skipped"], 100, "{summary}");
    assert_eq!(summary["delivered"], total - 100, "{summary}");
    consume(&mock, "resumed", total - 100);

    // Past the end: nothing to produce, and the summary says so.
    let summary = replay(
        &mock,
        &trace,
        &["--topic", "resumed", "--from-event", "99999999"],
    );
    assert_eq!(summary["skipped"], total, "{summary}");
    assert_eq!(summary["produced"], 0, "{summary}");
}

#[test]
fn max_events_bounds_a_replay_from_any_event_offset() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("workload.jsonl");
    let total = generate(&trace);
    assert!(total > 200);
    let mock = cluster("bounded");
    let summary = replay(
        &mock,
        &trace,
        &[
            "--topic",
            "bounded",
            "--from-event",
            "100",
            "--max-events",
            "50",
        ],
    );
    assert_eq!(summary["skipped"], 100, "{summary}");
    assert_eq!(summary["delivered"], 50, "{summary}");
    assert_eq!(summary["resume_from"], 150, "{summary}");
    consume(&mock, "bounded", 50);
}

#[test]
fn ctrl_c_stops_with_an_exact_resume_offset() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("workload.jsonl");
    let total = generate(&trace);
    let mock = cluster("jobcast.events");
    let brokers = mock.bootstrap_servers();
    // At 200 events/s the whole workload would take far longer than 1.5 s.
    let child = Command::new(jobcast_bin())
        .args([
            "replay",
            "--trace",
            trace.to_str().unwrap(),
            "--format",
            "jsonl",
        ])
        .args(["--brokers", &brokers, "--rate", "200", "--json"])
        .env("JOBCAST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["outcome"], "stopped", "{summary}");
    let stopped_at = summary["resume_from"].as_u64().unwrap();
    assert!(stopped_at > 0 && stopped_at < total, "{summary}");
    assert_eq!(summary["delivered"], stopped_at, "{summary}");
    assert!(
        stderr.contains(&format!("resume with --from-event {stopped_at}")),
        "{stderr}"
    );

    let rest = replay(&mock, &trace, &["--from-event", &stopped_at.to_string()]);
    assert_eq!(rest["delivered"], total - stopped_at, "{rest}");
    consume(&mock, "jobcast.events", total);
}
