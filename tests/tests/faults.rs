//! Broker faults, on librdkafka's mock cluster (whose brokers these tests
//! take down and bring up):
//! - the broker goes away for 15 s in the middle of the stream, longer
//!   than the producer's `message.timeout.ms` and the consumers' session
//!   and `max.poll.interval.ms`, and comes back: `jobcast serve` reports
//!   not-ready while the broker is unreachable, loses its partitions and
//!   takes them back by itself, and ends in exactly the state of a run
//!   that saw no fault: nothing lost, no effect applied twice;
//! - the broker of the outputs alone goes away for longer than
//!   `max.poll.interval.ms`: the instance waits for its outputs all that
//!   time and stays in its consumer group, owning what it owned, while
//!   `/healthz` says that its pipeline is stuck once the stall timeout has
//!   passed, and alive again when it goes on;
//! - the store's disk fills mid-stream (a size-limited tmpfs): the service
//!   stops, saying why, with no batch half written; started again on the
//!   full disk it waits, alive and not ready; given room, it ends in the
//!   state of a run that saw no fault.

use std::time::{Duration, Instant};

use jobcast_ingest::kafka::Topics;
use jobcast_tests::excerpt_events;
use jobcast_tests::kafka::{Cluster, decisions, messages};
use jobcast_tests::serve::{MOCK_SESSION, SHORT_SESSION, Serve, stored_state};
use rdkafka::mocking::MockCoordinator;

const PARTITIONS: i32 = 4;
const OUTAGE: Duration = Duration::from_secs(15);
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

/// The outage outlasts the producer's `message.timeout.ms` (its outputs
/// fail and are produced again) and the consumers' session and
/// `max.poll.interval.ms` (the member loses its partitions, joins the
/// group again and takes them back).
#[test]
fn a_15_second_broker_outage_longer_than_every_client_timeout_loses_and_repeats_nothing() {
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
    let mut serve = Serve::start_logging(
        &cluster.brokers(),
        &outage,
        &[
            "--config",
            config.to_str().unwrap(),
            "--decisions-topic",
            "outage.decisions",
            "--group",
            "outage",
            "-X",
            "message.timeout.ms=5000",
            "-X",
            "max.poll.interval.ms=5000",
            MOCK_SESSION[0],
            MOCK_SESSION[1],
            MOCK_SESSION[2],
            MOCK_SESSION[3],
        ],
        "info",
    );
    serve.wait_consumed(total / 3, WAIT);
    assert_eq!(serve.get("/readyz").0, 200);
    let down_at = serve.log().len();
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
    // The member lost its partitions (its session is 3 s) and gave up
    // their records; once it has joined again and taken them back, it has
    // stored them anew (the live ones from memory, those of jobs that
    // ended meanwhile from what it held for their next owner).
    let (lost, _) = serve.wait_logged("partitions revoked from this instance", down_at, WAIT);
    serve.wait_logged(
        "this instance owns these partitions owned={0, 1, 2, 3}",
        lost,
        WAIT,
    );
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();

    assert_eq!(stored_state(&outage), stored_state(&calm));
    assert_eq!(
        decisions(&cluster.brokers(), "outage.decisions"),
        decisions(&cluster.brokers(), "calm.decisions")
    );
    // At least once: the outputs of the batch in hand when the broker went
    // are produced again, and come twice. Counted, not folded away: the
    // calm run publishes each once, the outage run few more.
    let published = |topic: &str| cluster.read_all(topic, 1).len();
    let (calm_count, outage_count) = (published("calm.decisions"), published("outage.decisions"));
    let distinct = decisions(&cluster.brokers(), "outage.decisions").len();
    eprintln!(
        "decisions: {calm_count} published in the calm run, {outage_count} in the outage run \
         ({} duplicates of {distinct})",
        outage_count - distinct
    );
    assert_eq!(
        calm_count, distinct,
        "the calm run publishes each decision once"
    );
    assert!(
        outage_count - distinct <= distinct / 10,
        "{} duplicates of {distinct} decisions",
        outage_count - distinct
    );
}

/// A member that does not poll its consumer for `max.poll.interval.ms`
/// leaves its group (librdkafka's own check, on the client), and the group
/// moves its partitions. The pipeline polls its member while it waits for
/// acknowledgements, so a broker slow to acknowledge costs the instance
/// nothing but the wait. Here the outputs' broker is down for about three
/// poll intervals while the group's coordinator and the input stay up.
#[test]
fn a_wait_for_the_outputs_broker_longer_than_the_poll_interval_keeps_the_group() {
    const GROUP: &str = "patient";
    const MAX_POLL_INTERVAL: Duration = Duration::from_secs(7);
    let topics = Topics::default();
    let cluster = Cluster::with_brokers(&topics, PARTITIONS, 2);
    // Broker 1: the input, the group's coordinator, the other outputs;
    // broker 2: the decisions topic alone.
    for partition in 0..PARTITIONS {
        cluster
            .mock
            .partition_leader(&topics.events, partition, Some(1))
            .unwrap();
    }
    for topic in [&topics.risk, &topics.dead_letter] {
        cluster.mock.partition_leader(topic, 0, Some(1)).unwrap();
    }
    cluster
        .mock
        .partition_leader(&topics.decisions, 0, Some(2))
        .unwrap();
    cluster
        .mock
        .coordinator(MockCoordinator::Group(GROUP.into()), 1)
        .unwrap();
    let input = messages(&excerpt_events());
    cluster.produce(&topics.events, &input);
    let total = input.len() as u64;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobcast.toml");
    // A pipeline stuck that long on a batch is not alive (`/healthz`).
    std::fs::write(
        &config,
        "[consumer]\nbatch_max_events = 200\n[http]\nstall_timeout_secs = 5\n",
    )
    .unwrap();
    let max_poll = format!("max.poll.interval.ms={}", MAX_POLL_INTERVAL.as_millis());
    let mut flags = vec!["--config", config.to_str().unwrap(), "--group", GROUP];
    flags.extend(SHORT_SESSION);
    flags.extend(["-X", &max_poll]);
    let state = dir.path().join("state");
    let mut serve = Serve::start_logging(&cluster.brokers(), &state, &flags, "info");
    serve.wait_consumed(total / 3, WAIT);
    assert_eq!(
        serve.get("/healthz").0,
        200,
        "alive while it makes progress"
    );
    let membership = |serve: &Serve| -> Vec<String> {
        serve
            .log()
            .into_iter()
            .filter(|line| {
                line.contains("partitions assigned to this instance")
                    || line.contains("partitions revoked from this instance")
                    || line.contains("maximum poll interval")
            })
            .collect()
    };
    let before = membership(&serve);

    cluster.mock.broker_down(2).unwrap();
    let down = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    let stalled = serve.committed();
    std::thread::sleep((MAX_POLL_INTERVAL * 3).saturating_sub(down.elapsed()));
    // The pipeline really was waiting on the outputs all along, and past
    // the stall timeout it says it is stuck.
    assert_eq!(
        serve.committed(),
        stalled,
        "batches committed while waiting"
    );
    assert!(stalled < total, "the input ran out before the outage");
    let (status, body) = serve.get("/healthz");
    assert_eq!(status, 503, "{body}");
    let health: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        health["pipeline_stalled_seconds"].as_f64() > Some(5.0),
        "{body}"
    );
    cluster.mock.broker_up(2).unwrap();
    serve.wait_stored_offsets(total, WAIT);
    assert_eq!(serve.get("/healthz").0, 200, "alive again once it goes on");

    assert_eq!(
        membership(&serve),
        before,
        "the group membership changed during the wait"
    );
    assert_eq!(
        serve.owned_partitions(),
        (0..PARTITIONS as i64).collect::<Vec<_>>()
    );
    serve.terminate();
}

/// An input partition whose leader is taken away neither delivers nor
/// reports its end. The event-time merge would wait for it for ever, and
/// the instance (every instance: each reads all partitions) apply nothing;
/// after `consumer.idle_partition_timeout_ms` it goes on without it,
/// counts it idle, and applies its events, late, once its leader returns.
#[test]
fn a_partition_whose_leader_is_gone_is_left_behind_after_the_idle_timeout_and_applied_when_back() {
    const GONE: i32 = 2;
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let events = excerpt_events();
    let input = messages(&events);
    cluster.produce(&topics.events, &input);
    let total = input.len() as u64;
    let in_gone = cluster
        .read_all(&topics.events, PARTITIONS)
        .iter()
        .filter(|r| r.partition == GONE)
        .count() as u64;
    assert!(in_gone > 0 && in_gone < total);
    cluster
        .mock
        .partition_leader(&topics.events, GONE, None)
        .unwrap();

    let dir = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(
        &cluster.brokers(),
        &dir.path().join("state"),
        &["--set", "consumer.idle_partition_timeout_ms=3000"],
    );
    serve.wait_stored_offsets(total - in_gone, WAIT);
    assert_eq!(serve.metric("jobcast_input_partitions_idle"), 1.0);
    assert!(serve.metric("jobcast_input_partition_idle_total") >= 1.0);
    assert_eq!(serve.get("/healthz").0, 200);

    // The leader returns (the mock's one broker has id 1).
    cluster
        .mock
        .partition_leader(&topics.events, GONE, Some(1))
        .unwrap();
    serve.wait_stored_offsets(total, WAIT);
    let deadline = Instant::now() + WAIT;
    while serve.metric("jobcast_input_partitions_idle") != 0.0 {
        assert!(Instant::now() < deadline, "still counted idle");
        std::thread::sleep(Duration::from_millis(100));
    }
    serve.terminate();
    // Every job, those of the partition left behind too, was decided.
    let decided: std::collections::BTreeSet<u64> = decisions(&cluster.brokers(), &topics.decisions)
        .keys()
        .map(|&(job_id, _)| job_id)
        .collect();
    for event in &events {
        if let jobcast_ingest::event::Event::JobSubmitted(job) = event {
            assert!(
                decided.contains(&job.job_id),
                "job {} never decided",
                job.job_id
            );
        }
    }
}

/// A disk that fills under the store: `storage.min_free_bytes` (16 MiB
/// here) refuses the next batch whole, and the service exits saying so.
/// Started again with the disk still full, it waits, alive, not ready,
/// and says why in `/readyz` and `jobcast_store_waiting_for_room`; once
/// room is made, it goes on from its last batch and ends in the state of
/// a run that saw no fault.
#[test]
fn a_full_disk_stops_the_service_whole_and_a_restart_waits_for_room() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for topic in ["roomy.decisions", "tight.decisions"] {
        cluster.mock.create_topic(topic, 1, 1).unwrap();
    }
    // The tight run's input comes in two halves (by event time), the disk
    // filling between them.
    cluster
        .mock
        .create_topic("tight.events", PARTITIONS, 1)
        .unwrap();
    let input = messages(&excerpt_events());
    cluster.produce(&topics.events, &input);
    let total = input.len() as u64;

    let roomy_dir = tempfile::tempdir().unwrap();
    let roomy = roomy_dir.path().join("state");
    let mut serve = Serve::start(
        &cluster.brokers(),
        &roomy,
        &["--decisions-topic", "roomy.decisions", "--group", "roomy"],
    );
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();

    let dir = tempfile::tempdir().unwrap();
    let disk = dir.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=512m", "tmpfs"])
        .arg(&disk)
        .status()
        .expect("mount runs");
    assert!(
        mounted.success(),
        "mounting a tmpfs needs root (tests run as root)"
    );
    // Unmounted however the test ends.
    struct Unmount<'a>(&'a std::path::Path);
    impl Drop for Unmount<'_> {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.0)
                .status();
        }
    }
    let _unmount = Unmount(&disk);
    let tight = disk.join("state");
    let config = dir.path().join("jobcast.toml");
    std::fs::write(
        &config,
        "[consumer]\nbatch_max_events = 200\n[storage]\nmin_free_bytes = 16777216\n",
    )
    .unwrap();
    let flags = [
        "--config",
        config.to_str().unwrap(),
        "--events-topic",
        "tight.events",
        "--decisions-topic",
        "tight.decisions",
        "--group",
        "tight",
        MOCK_SESSION[0],
        MOCK_SESSION[1],
        MOCK_SESSION[2],
        MOCK_SESSION[3],
    ];
    let (first, second) = input.split_at(input.len() / 2);
    cluster.produce("tight.events", first);
    let mut serve = Serve::start(&cluster.brokers(), &tight, &flags);
    serve.wait_stored_offsets(first.len() as u64, WAIT);
    // Fill the disk to 8 MiB short of the reserve's 16.
    let free = jobcast_storage::disk::space(&disk).unwrap().free_bytes;
    let filler = disk.join("filler");
    let fill = |bytes: u64| {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&filler)
            .unwrap();
        std::io::Write::write_all(&mut &file, &vec![1u8; bytes as usize]).unwrap();
        file.sync_all().unwrap();
    };
    fill(free - (8 << 20));
    cluster.produce("tight.events", second);
    let (status, log) = serve.wait_exit(WAIT);
    assert!(!status.success(), "exited with {status}");
    let said = log.join("\n");
    assert!(
        said.contains("storage.min_free_bytes") && said.contains("nothing of the write"),
        "{said}"
    );
    let stopped_at: u64 = jobcast_storage::state::StateStore::open_read_only(&tight)
        .unwrap()
        .offsets("tight.events")
        .unwrap()
        .values()
        .map(|&o| o as u64)
        .sum();
    eprintln!("stopped for want of room with {stopped_at} of {total} offsets stored");
    assert_eq!(
        stopped_at,
        first.len() as u64,
        "the second half's first batch is refused"
    );

    // RocksDB gave back what it had set aside as it stopped: 20 MiB free
    // now, above the reserve, under the twice it that a start needs.
    let free = jobcast_storage::disk::space(&disk).unwrap().free_bytes;
    fill(free - (20 << 20));
    // Started again on the nearly full disk: alive, not ready, and saying
    // why.
    let mut serve = Serve::start(&cluster.brokers(), &tight, &flags);
    let deadline = Instant::now() + Duration::from_secs(30);
    while serve.metric("jobcast_store_waiting_for_room") != 1.0 {
        assert!(Instant::now() < deadline, "never said it waits for room");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(serve.get("/healthz").0, 200);
    let (status, body) = serve.get("/readyz");
    assert_eq!(status, 503, "{body}");
    let readyz: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(readyz["waiting_for_room"], true, "{body}");
    assert!(
        readyz["reason"]
            .as_str()
            .unwrap()
            .contains("waiting for room"),
        "{body}"
    );
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(serve.get("/healthz").0, 200, "still alive");

    std::fs::remove_file(&filler).unwrap();
    wait_ready(&serve, 200, Duration::from_secs(60));
    assert_eq!(serve.metric("jobcast_store_waiting_for_room"), 0.0);
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();
    assert_eq!(stored_state(&tight), stored_state(&roomy));
}
