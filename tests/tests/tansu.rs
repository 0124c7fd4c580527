//! The full pipeline on a real broker process (tansu): `jobcast replay`
//! writes the bundled Google 2011 excerpt into Kafka, `jobcast serve`
//! predicts, and what it publishes, stores and serves agrees.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jobcast_ingest::event::Event;
use jobcast_ingest::kafka::Topics;
use jobcast_tests::kafka::read_all;
use jobcast_tests::serve::Serve;
use jobcast_tests::tansu::Tansu;
use jobcast_tests::{excerpt_events, jobcast_ok, repo};

const PARTITIONS: i32 = 3;

#[test]
fn replay_serve_and_query_on_a_real_broker() {
    let Some(tansu) = Tansu::start() else { return };
    let topics = Topics::default();
    tansu.create_topic(&topics.events, PARTITIONS);
    for topic in [&topics.decisions, &topics.risk, &topics.dead_letter] {
        tansu.create_topic(topic, 1);
    }

    let excerpt = repo().join("tests/data/google2011-excerpt");
    let summary = jobcast_ok(&[
        "replay",
        "--trace",
        excerpt.to_str().unwrap(),
        "--format",
        "google2011",
        "--brokers",
        &tansu.brokers,
        "--json",
    ]);
    let summary: serde_json::Value = serde_json::from_str(&summary).unwrap();
    let events = excerpt_events();
    assert_eq!(summary["delivered"].as_u64(), Some(events.len() as u64));

    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(&tansu.brokers, &data.path().join("state"), &[]);
    serve.wait_stored_offsets(events.len() as u64, Duration::from_secs(180));

    // Decisions for every wide job, versions 1, 2, … per job.
    let mut published: BTreeMap<u64, Vec<serde_json::Value>> = BTreeMap::new();
    for m in read_all(&tansu.brokers, &topics.decisions, 1) {
        let d: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        published
            .entry(d["job_id"].as_u64().unwrap())
            .or_default()
            .push(d);
    }
    let wide: BTreeSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) if j.num_tasks >= 3 => Some(j.job_id),
            _ => None,
        })
        .collect();
    assert!(!wide.is_empty());
    for job_id in &wide {
        let decisions = published
            .get(job_id)
            .unwrap_or_else(|| panic!("no decision for wide job {job_id}"));
        let versions: Vec<u64> = decisions
            .iter()
            .map(|d| d["version"].as_u64().unwrap())
            .collect();
        assert_eq!(
            versions,
            (1..=versions.len() as u64).collect::<Vec<_>>(),
            "job {job_id}"
        );
        // The HTTP API serves the same decisions.
        let (status, body) = serve.get(&format!("/jobs/{job_id}"));
        assert_eq!(status, 200);
        let job: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(
            job["decisions"].as_array().unwrap(),
            decisions,
            "job {job_id}"
        );
    }

    for policy in ["slearn", "3sigma", "bayes"] {
        let count = serve.metric(&format!(
            "jobcast_prediction_error_percent_count{{policy=\"{policy}\"}}"
        ));
        assert!(count > 0.0, "no prediction errors recorded for {policy}");
    }
    serve.terminate();
}
