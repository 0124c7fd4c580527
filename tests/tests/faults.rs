//! Broker faults: the broker goes away for 30 s in the middle of the
//! stream and comes back (librdkafka's mock cluster, whose broker this test
//! takes down and brings up). `jobcast serve` reports not-ready while the
//! broker is unreachable, recovers by itself, and ends in exactly the state
//! of a run that saw no fault: nothing lost, no effect applied twice.

use std::time::{Duration, Instant};

use jobcast_ingest::kafka::Topics;
use jobcast_tests::excerpt_events;
use jobcast_tests::kafka::{Cluster, decisions, messages};
use jobcast_tests::serve::{Serve, stored_state};

const PARTITIONS: i32 = 4;
const OUTAGE: Duration = Duration::from_secs(30);
const WAIT: Duration = Duration::from_secs(240);

/// Poll `/readyz` until its status is `status`.
fn wait_ready(serve: &Serve, status: u16, within: Duration) -> Duration {
    let started = Instant::now();
    loop {
        let (got, body) = serve.get("/readyz");
        if got == status {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "/readyz still answers {got} after {within:?}: {body}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_30_second_broker_outage_mid_stream_loses_and_repeats_nothing() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for topic in ["calm.decisions", "outage.decisions"] {
        cluster.mock.create_topic(topic, 1, 1).unwrap();
    }
    let input = messages(&excerpt_events());
    cluster.produce(&topics.events, &input);
    let total = input.len() as u64;

    let calm_dir = tempfile::tempdir().unwrap();
    let calm = calm_dir.path().join("state");
    let mut serve = Serve::start(
        &cluster.brokers(),
        &calm,
        &["--decisions-topic", "calm.decisions", "--group", "calm"],
    );
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();

    let outage_dir = tempfile::tempdir().unwrap();
    let outage = outage_dir.path().join("state");
    // Small batches, so that the outage lands mid-stream with work in hand.
    let config = outage_dir.path().join("jobcast.toml");
    std::fs::write(&config, "[consumer]\nbatch_max_events = 200\n").unwrap();
    let mut serve = Serve::start(
        &cluster.brokers(),
        &outage,
        &[
            "--config",
            config.to_str().unwrap(),
            "--decisions-topic",
            "outage.decisions",
            "--group",
            "outage",
        ],
    );
    serve.wait_committed(total / 3, WAIT);
    assert_eq!(serve.get("/readyz").0, 200);
    cluster.mock.broker_down(1).unwrap();
    let down = Instant::now();
    let noticed = wait_ready(&serve, 503, OUTAGE);
    eprintln!("not ready {:.1} s into the outage", noticed.as_secs_f64());
    // The first batch with outputs blocks until they are acknowledged, and
    // nothing after it commits: progress stops for the rest of the outage.
    std::thread::sleep(Duration::from_secs(3));
    let stalled = serve.committed();
    std::thread::sleep(OUTAGE.saturating_sub(down.elapsed()));
    assert_eq!(
        serve.committed(),
        stalled,
        "batches committed during the outage"
    );
    cluster.mock.broker_up(1).unwrap();
    let back = wait_ready(&serve, 200, Duration::from_secs(60));
    eprintln!("ready again {:.1} s after the broker", back.as_secs_f64());
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();

    assert_eq!(stored_state(&outage), stored_state(&calm));
    assert_eq!(
        decisions(&cluster.brokers(), "outage.decisions"),
        decisions(&cluster.brokers(), "calm.decisions")
    );
}
