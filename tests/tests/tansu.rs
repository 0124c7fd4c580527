//! The pipeline on a real broker process (tansu, started by the test):
//! `jobcast replay` writes the bundled Google 2011 excerpt into Kafka,
//! `jobcast serve` predicts, and what it publishes, stores and serves
//! agrees; a service killed and restarted mid-stream ends where one
//! uninterrupted run ends.
//!
//! The input is written one record per batch ([`Tansu::replay_excerpt`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::Topics;
use jobcast_tests::excerpt_events;
use jobcast_tests::kafka::{decisions, read_all};
use jobcast_tests::serve::{SHORT_SESSION, Serve, assert_same_state, restartable};
use jobcast_tests::tansu::Tansu;

const PARTITIONS: i32 = 3;
const WAIT: Duration = Duration::from_secs(240);

#[test]
fn replay_serve_and_query_on_a_real_broker() {
    let tansu = Tansu::start();
    let topics = Topics::default();
    tansu.create_topic(&topics.events, PARTITIONS);
    for topic in topics.outputs() {
        tansu.create_topic(topic, 1);
    }
    let total = tansu.replay_excerpt(&topics.events);

    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(&tansu.brokers, &data.path().join("state"), &[]);
    serve.wait_stored_offsets(total, WAIT);
    assert_eq!(serve.get("/readyz").0, 200);

    // Decisions for every wide job, versions 1, 2, … per job, and the HTTP
    // API serves exactly what was published.
    let mut published: BTreeMap<u64, Vec<serde_json::Value>> = BTreeMap::new();
    for m in read_all(&tansu.brokers, &topics.decisions, 1) {
        let d: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        published
            .entry(d["job_id"].as_u64().unwrap())
            .or_default()
            .push(d);
    }
    // Decisions are counted per batch and queue; the counts match what was
    // published, queue by queue.
    let mut by_queue: BTreeMap<u64, u64> = BTreeMap::new();
    for d in published.values().flatten() {
        *by_queue.entry(d["queue"].as_u64().unwrap()).or_default() += 1;
    }
    assert!(!by_queue.is_empty());
    for (queue, count) in &by_queue {
        let counted = serve.metric(&format!("jobcast_decisions_total{{queue=\"{queue}\"}}"));
        assert_eq!(counted as u64, *count, "decisions in queue {queue}");
    }

    let events = excerpt_events();
    let wide: BTreeSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) if j.num_tasks >= 3 => Some(j.job_id),
            _ => None,
        })
        .collect();
    assert!(wide.len() > 10, "{} wide jobs", wide.len());
    for job_id in &wide {
        let decisions = published
            .get(job_id)
            .unwrap_or_else(|| panic!("no decision for wide job {job_id}"));
        let versions: Vec<u64> = decisions
            .iter()
            .map(|d| d["version"].as_u64().unwrap())
            .collect();
        // From 1 on, rising: a refinement overtaken while it waited for
        // `engine.min_republish_ms` leaves a gap.
        assert_eq!(versions.first(), Some(&1), "job {job_id}");
        assert!(
            versions.windows(2).all(|w| w[0] < w[1]),
            "job {job_id}: {versions:?}"
        );
        let (status, body) = serve.get(&format!("/jobs/{job_id}"));
        assert_eq!(status, 200);
        let job: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            job["decisions"].as_array().unwrap(),
            decisions,
            "job {job_id}"
        );
    }

    // Every message was either applied or dead-lettered, and the
    // dead-letter topic holds exactly the ones counted.
    let applied: f64 = ["job_submitted", "job_ended", "task", "machine"]
        .iter()
        .map(|t| serve.metric(&format!("jobcast_events_consumed_total{{type=\"{t}\"}}")))
        .sum();
    let dead = read_all(&tansu.brokers, &topics.dead_letter, 1);
    assert_eq!(applied as u64 + dead.len() as u64, total);
    assert_eq!(serve.metric("jobcast_input_offsets_skipped_total"), 0.0);

    for policy in ["slearn", "3sigma", "bayes"] {
        let count = serve.metric(&format!(
            "jobcast_prediction_error_ratio_count{{policy=\"{policy}\"}}"
        ));
        assert!(count > 0.0, "no prediction errors recorded for {policy}");
    }
    serve.terminate();
}

#[test]
fn sigkill_and_sigterm_on_a_real_broker_end_in_the_same_state_as_one_run() {
    let tansu = Tansu::start();
    let topics = Topics::default();
    tansu.create_topic(&topics.events, PARTITIONS);
    for topic in [
        "whole.decisions",
        "killed.decisions",
        &topics.risk,
        &topics.dead_letter,
    ] {
        tansu.create_topic(topic, 1);
    }
    let total = tansu.replay_excerpt(&topics.events);

    // The uninterrupted run, in its own group, beside the interrupted one.
    let whole = tempfile::tempdir().unwrap();
    let whole_state = whole.path().join("state");
    let mut uninterrupted = Serve::start(
        &tansu.brokers,
        &whole_state,
        &["--decisions-topic", "whole.decisions", "--group", "whole"],
    );

    let interrupted = tempfile::tempdir().unwrap();
    let state = interrupted.path().join("state");
    let flags = restartable("killed.decisions", "killed", SHORT_SESSION);
    let mut serve = Serve::start(&tansu.brokers, &state, &flags);
    serve.wait_consumed(total / 3, WAIT);
    serve.kill();
    let mut serve = Serve::start(&tansu.brokers, &state, &flags);
    serve.wait_consumed(total / 4, WAIT);
    serve.terminate();
    let mut serve = Serve::start(&tansu.brokers, &state, &flags);
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();
    uninterrupted.wait_stored_offsets(total, WAIT);
    uninterrupted.terminate();

    assert_same_state(&state, &whole_state, &topics.events);
    assert_eq!(
        decisions(&tansu.brokers, "killed.decisions"),
        decisions(&tansu.brokers, "whole.decisions")
    );
}

/// A broker that wants SASL (tansu `--authentication`: SCRAM, its users
/// in its own store) and credentials it does not know, given in the
/// environment as the systemd unit and the StatefulSet give them: `jobcast
/// serve` stays up and not ready, logs librdkafka's reason without the
/// password, counts the refusals by error code, and stops cleanly. tansu
/// 0.6.0 offers SCRAM only and creates users only over an authenticated
/// connection, so on its in-memory store no client can authenticate: the
/// accepted path cannot be tested against it.
#[test]
fn credentials_a_sasl_broker_refuses_leave_the_service_not_ready_saying_why() {
    const PASSWORD: &str = "s3cr3t-scram-Pa55";
    let tansu = Tansu::start_with(&["--authentication"]);
    let client = format!(
        r#"{{"security.protocol"="sasl_plaintext", "sasl.mechanism"="SCRAM-SHA-512", "sasl.username"="jobcast", "sasl.password"="{PASSWORD}"}}"#
    );
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start_with_env(
        &tansu.brokers,
        &data.path().join("state"),
        &[],
        &[("JOBCAST_KAFKA__CLIENT", &client)],
    );
    let (_, refused) = serve.wait_logged("SASL authentication error", 0, WAIT);
    assert!(refused.contains("unknown-user"), "{refused}");
    let deadline = Instant::now() + WAIT;
    while !serve.get("/metrics").1.lines().any(|l| {
        l.starts_with("jobcast_kafka_errors_total{") && l.contains("code=\"Authentication\"")
    }) {
        assert!(Instant::now() < deadline, "no refusal counted");
        std::thread::sleep(Duration::from_millis(200));
    }
    let (status, ready) = serve.get("/readyz");
    assert_eq!(status, 503, "{ready}");
    let ready: serde_json::Value = serde_json::from_str(&ready).unwrap();
    assert_eq!(ready["broker_up"], false, "{ready}");
    assert!(
        ready["reason"]
            .as_str()
            .unwrap()
            .contains("brokers do not answer"),
        "{ready}"
    );
    let log = serve.terminate();
    assert!(
        !log.iter().any(|l| l.contains(PASSWORD)),
        "the password was logged"
    );
}

/// A task placed on a preemptible VM, through a real broker: the risk score
/// on the risk topic carries the checkpoint schedule of the 10 h of work
/// (on the 5-minute grid, split at checkpoints), and the HTTP API serves
/// the same score.
#[test]
fn risk_scores_carry_their_checkpoint_schedule_on_a_real_broker() {
    let tansu = Tansu::start();
    let topics = one_partition_topics(&tansu);
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("risk.jsonl");
    jobcast_tests::risk_trace(&trace);
    let total = replay_jsonl(&tansu, &trace, &topics.events);
    assert_eq!(total, 7);
    let mut serve = Serve::start(&tansu.brokers, &dir.path().join("state"), &[]);
    serve.wait_stored_offsets(total, WAIT);
    let deadline = Instant::now() + WAIT;
    let risks = loop {
        let risks = read_all(&tansu.brokers, &topics.risk, 1);
        if !risks.is_empty() {
            break risks;
        }
        assert!(Instant::now() < deadline, "no risk score published");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(risks.len(), 1);
    let risk: serde_json::Value = serde_json::from_slice(&risks[0].payload).unwrap();
    assert_eq!(risk["machine_id"], 1);
    let schedule = &risk["score"]["checkpoints"];
    let intervals: Vec<f64> = schedule["intervals_h"]
        .as_array()
        .unwrap_or_else(|| panic!("no schedule in {risk}"))
        .iter()
        .map(|i| i.as_f64().unwrap())
        .collect();
    let work: f64 = intervals.iter().sum();
    let runtime = risk["score"]["runtime"]["mean_h"].as_f64().unwrap();
    assert!((work - runtime).abs() <= 5.0 / 60.0, "{risk}");
    assert!(intervals.len() > 1, "{risk}");
    assert!(
        schedule["expected_makespan_h"].as_f64().unwrap() > work,
        "{risk}"
    );
    let (status, body) = serve.get("/machines/1/risk");
    assert_eq!(status, 200, "{body}");
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served["score"], risk["score"], "{served}");
    serve.terminate();
}

/// CloudCoaster's controller on the real broker: the same decisions as on
/// the mock cluster, in order, and the last at `GET /capacity`.
#[test]
fn capacity_decisions_on_a_real_broker() {
    let tansu = Tansu::start();
    let topics = one_partition_topics(&tansu);
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_trace(
        &tansu,
        &topics,
        dir.path(),
        jobcast_tests::capacity_trace,
        &jobcast_tests::CAPACITY_SETTINGS,
    );
    let payloads = published(
        &tansu,
        &topics.capacity,
        jobcast_tests::CAPACITY_DECISIONS.len(),
        |_| true,
    );
    let last = jobcast_tests::check_capacity_decisions(&payloads);
    let (status, body) = serve.get("/capacity");
    assert_eq!(status, 200, "{body}");
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served, last);
    serve.terminate();
}

/// A deadline job's plan, waits, resume and migration on the real broker:
/// the same as on the mock cluster, and the job's plan at `GET /jobs/{id}`.
#[test]
fn deadline_decisions_on_a_real_broker() {
    let (payloads, job) = deadline_job_served(
        jobcast_tests::deadline_trace,
        &jobcast_tests::DEADLINE_SETTINGS,
        5,
    );
    let last = jobcast_tests::check_deadline_decisions(&payloads);
    assert_eq!(job["deadline"]["recoveries"][0], last["recovery"], "{job}");
}

/// A deadline job's elastic fleet on the real broker: plan, drain and
/// grow, as on the mock cluster, and the fleet at `GET /jobs/{id}`.
#[test]
fn elastic_fleet_decisions_on_a_real_broker() {
    let (payloads, job) = deadline_job_served(
        jobcast_tests::elastic_trace,
        &jobcast_tests::ELASTIC_SETTINGS,
        4,
    );
    jobcast_tests::check_elastic_decisions(&payloads, &job);
}

/// The trace `write` writes, served with `settings` on a real broker: its
/// first `n` deadline decisions, and job 20 at `GET /jobs/20`.
fn deadline_job_served(
    write: fn(&std::path::Path) -> usize,
    settings: &[&str],
    n: usize,
) -> (Vec<Vec<u8>>, serde_json::Value) {
    let tansu = Tansu::start();
    let topics = one_partition_topics(&tansu);
    let dir = tempfile::tempdir().unwrap();
    let serve = serve_trace(&tansu, &topics, dir.path(), write, settings);
    let payloads = published(&tansu, &topics.decisions, n, |m| {
        m.headers.get("jobcast.kind").map(String::as_str) == Some("deadline")
    });
    let (status, body) = serve.get("/jobs/20");
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    serve.terminate();
    (payloads, job)
}

/// The trace `write` writes in `dir`, replayed into the events topic and
/// served with `settings` until every event is stored.
fn serve_trace(
    tansu: &Tansu,
    topics: &Topics,
    dir: &std::path::Path,
    write: fn(&std::path::Path) -> usize,
    settings: &[&str],
) -> Serve {
    let trace = dir.join("trace.jsonl");
    let lines = write(&trace) as u64;
    assert_eq!(replay_jsonl(tansu, &trace, &topics.events), lines);
    let mut args = Vec::new();
    for setting in settings {
        args.extend(["--set", setting]);
    }
    let mut serve = Serve::start(&tansu.brokers, &dir.join("state"), &args);
    serve.wait_stored_offsets(lines, WAIT);
    serve
}

/// The payloads of `topic`'s messages that `keep` keeps, once there are
/// `n` of them.
fn published(
    tansu: &Tansu,
    topic: &str,
    n: usize,
    keep: impl Fn(&jobcast_tests::kafka::Record) -> bool,
) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + WAIT;
    loop {
        let published: Vec<Vec<u8>> = read_all(&tansu.brokers, topic, 1)
            .into_iter()
            .filter(|m| keep(m))
            .map(|m| m.payload)
            .collect();
        if published.len() >= n {
            return published;
        }
        assert!(
            Instant::now() < deadline,
            "{} messages published on {topic}",
            published.len()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The default topics, each of one partition.
fn one_partition_topics(tansu: &Tansu) -> Topics {
    let topics = Topics::default();
    tansu.create_topic(&topics.events, 1);
    for topic in topics.outputs() {
        tansu.create_topic(topic, 1);
    }
    topics
}

/// `jobcast replay` of the canonical JSON lines at `trace` into `topic`,
/// one record per batch; the events delivered.
fn replay_jsonl(tansu: &Tansu, trace: &std::path::Path, topic: &str) -> u64 {
    let summary = jobcast_tests::jobcast_ok(&[
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "jsonl",
        "--topic",
        topic,
        "--brokers",
        &tansu.brokers,
        "-X",
        "batch.num.messages=1",
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    summary["delivered"].as_u64().unwrap()
}
