//! Crash safety under fire: over a million events — real Google 2011 events
//! (the shared trace's first 150,000, or the bundled excerpt where
//! `../shared` is absent) and a synthetic workload — are consumed by two
//! `jobcast serve` instances of one consumer group. One (the partner) runs
//! throughout; the other is killed with SIGKILL at 20 seeded random moments
//! and started again: some while it restores its state, some held between
//! a snapshot and the commit of its batch (which truncates the log), some
//! while it takes partitions over from the partner (when the group gives
//! it its share after its restore rather than with its first assignment),
//! the rest while it streams. Each kill's landing is read from the
//! service's log, store and threads, and the test fails unless
//! some landed in each of the restore, the truncation and the takeover.
//! Both instances must then hold the stored offsets and what every
//! instance learns (3Sigma history, policy error statistics) of one
//! uninterrupted run, between them its records (jobs, tasks, machines,
//! decisions; one stored twice only if the same), and publish its
//! (job, version) decisions.
//!
//! The broker is librdkafka's mock cluster, hosted by this test: tansu
//! 0.6.0 serves this volume only one record per batch (tests/tests/tansu.rs
//! says why), at about 3,000 events/s here. The mock cluster keeps at most
//! about 5 MB per partition, so the topics have enough partitions to hold
//! everything, which the test checks before it starts.
//!
//! Long (minutes), so `#[ignore]`d; `scripts/test.sh` runs it beside the
//! rest (`cargo nextest run --run-ignored all`). Figures:
//! docs/reliability.md.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobcast_ingest::kafka::Topics;
use jobcast_storage::state::StateStore;
use jobcast_tests::kafka::{Cluster, decisions_across};
use jobcast_tests::serve::{
    ASSIGNED, MOCK_SESSION, OWNS, Serve, Stored, assert_shared_state_after, free_port,
    logged_partitions, metric_sum, restartable, wait_balanced,
};
use jobcast_tests::{jobcast_bin, jobcast_ok, repo};

const PARTITIONS: i32 = 48;
const DECISION_PARTITIONS: i32 = 16;
const GOOGLE_EVENTS: u64 = 150_000;
const SYNTHETIC_JOBS: &str = "31000";
const KILLS: usize = 20;
/// Kills beyond `KILLS`, each aimed at a phase no kill has landed in yet:
/// where a kill lands is a matter of timing, and every phase must be hit.
const MORE_KILLS: usize = 10;
const WAIT: Duration = Duration::from_secs(1200);
/// How long a kill aimed at a takeover waits for the group to give the
/// restarted instance partitions after its restore: the dead incarnation's
/// 3 s session, then the mock's 2 s hold of the rebalance, with room.
const TAKEOVER_WAIT: Duration = Duration::from_secs(30);
/// Batches of the run whose kill aims at a takeover.
const TAKEOVER_BATCH: &str = "consumer.batch_max_events=5";
/// Snapshots often enough that most runs between kills take some.
const SNAPSHOT_EVERY: &str = "storage.snapshot_every_events=20000";

/// Where a kill landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Landed {
    /// After the restore began, before it ended.
    Restore,
    /// After a snapshot was taken, before its batch (which truncates the
    /// log behind it) was committed.
    Truncation,
    /// After the group gave it partitions, before it had taken them over
    /// (stored their records, published what their owner had not).
    Takeover,
    /// Anywhere else.
    Streaming,
}

/// `jobcast replay` of a trace into `topic`; the events delivered.
fn replay(brokers: &str, topic: &str, trace: &Path, format: &str, extra: &[&str]) -> u64 {
    let mut args = vec![
        "replay",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        format,
        "--topic",
        topic,
        "--brokers",
        brokers,
        "--json",
    ];
    args.extend_from_slice(extra);
    let summary: serde_json::Value = serde_json::from_str(&jobcast_ok(&args)).unwrap();
    assert_eq!(summary["outcome"], "complete", "{summary}");
    summary["delivered"].as_u64().unwrap()
}

/// Wait until `reached` holds, or the instance has applied the whole
/// input (then the kill lands where it lands).
fn wait_or_drained(serve: &Serve, total: u64, mut reached: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !reached() {
        if serve.metric("jobcast_input_committed_offset") as u64 >= total {
            return;
        }
        assert!(Instant::now() < deadline, "neither reached nor drained");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Run `jobcast serve` until it is held at its first snapshot, and kill
/// it there: whether it was held (else it applied the whole input first,
/// and the kill lands while it streams).
///
/// The window between a snapshot and the commit of its batch (which
/// truncates the log behind it) lasts until the writer thread has written
/// the batch to RocksDB's log: a fraction of a millisecond, which a kill
/// timed from outside mostly misses. So the service logs that snapshot's
/// line alone (`JOBCAST_LOG`), into a pipe of one page that the test
/// fills once the service is up: the pipeline thread then blocks writing
/// the line, with the snapshot in its batch and the batch not yet handed
/// to the writer, until the kill. The kernel says where a thread waits
/// (`/proc/PID/task/TID/wchan`).
fn kill_held_at_snapshot(brokers: &str, data: &Path, flags: &[&str], total: u64) -> bool {
    let (read, write) = std::io::pipe().expect("a pipe");
    // SAFETY: fcntl(2) on a pipe this test owns.
    let sized = unsafe { libc::fcntl(write.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    assert!(sized > 0, "one page for the pipe");
    // A second way in to the pipe's write end, not blocking, for the test
    // to fill it through (the service's stays blocking).
    let mut fill = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(format!("/proc/self/fd/{}", write.as_raw_fd()))
        .expect("the pipe's write end again");
    let port = free_port();
    let mut child = Command::new(jobcast_bin())
        .args(["serve", "--brokers", brokers])
        .args(["--http", &format!("127.0.0.1:{port}")])
        .arg("--data-dir")
        .arg(data)
        .args(flags)
        .env(
            "JOBCAST_LOG",
            "off,jobcast_scheduler_feed::service::snapshots=info",
        )
        .stdout(Stdio::null())
        .stderr(write)
        .spawn()
        .expect("jobcast serve starts");
    // Its first line, before the log: its HTTP address.
    let mut first = String::new();
    let mut read = BufReader::new(read);
    read.read_line(&mut first).expect("its first line");
    assert!(first.contains("HTTP on"), "{first:?}");
    loop {
        match fill.write(&[b'.'; 64]) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("filling the pipe: {e}"),
        }
    }
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let tasks = format!("/proc/{}/task", child.id());
    let deadline = Instant::now() + WAIT;
    let mut drained_checked = Instant::now();
    let held = loop {
        let pipeline_waits_on_the_pipe = std::fs::read_dir(&tasks)
            .expect("its threads")
            .flatten()
            .any(|task| {
                let read = |file: &str| std::fs::read_to_string(task.path().join(file));
                read("comm").is_ok_and(|name| name.trim() == "pipeline")
                    && read("wchan").is_ok_and(|wchan| wchan.contains("pipe_write"))
            });
        if pipeline_waits_on_the_pipe {
            break true;
        }
        if drained_checked.elapsed() >= Duration::from_millis(200) {
            let committed = ureq::get(&metrics)
                .call()
                .ok()
                .and_then(|mut r| r.body_mut().read_to_string().ok())
                .map(|body| metric_sum(&body, "jobcast_input_committed_offset"));
            if committed.is_some_and(|c| c as u64 >= total) {
                break false;
            }
            drained_checked = Instant::now();
        }
        assert!(Instant::now() < deadline, "neither held nor drained");
        std::thread::sleep(Duration::from_millis(1));
    };
    child.kill().expect("SIGKILL");
    child.wait().expect("reaped");
    held
}

/// The log sequence number of the latest snapshot the store at `state`
/// holds.
fn snapshot_seq(state: &Path) -> Option<u64> {
    StateStore::open_read_only(state)
        .unwrap()
        .summary()
        .unwrap()
        .snapshot_seq
}

/// A small deterministic generator (SplitMix64), so that the kill moments
/// are the same on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The aim of kill `kill` (0-based): random for the first `KILLS`; then,
/// up to `MORE_KILLS` more, at a phase no kill has landed in yet.
fn next_aim(kill: usize, landings: &BTreeMap<Landed, usize>, random: &mut Seeded) -> Option<f64> {
    if kill < KILLS {
        return Some(random.unit());
    }
    if kill >= KILLS + MORE_KILLS {
        return None;
    }
    [
        (Landed::Restore, 0.1),
        (Landed::Truncation, 0.3),
        (Landed::Takeover, 0.5),
    ]
    .into_iter()
    .find(|(phase, _)| !landings.contains_key(phase))
    .map(|(_, aim)| aim)
}

#[test]
#[ignore = "long (minutes): scripts/test.sh runs it, with --run-ignored all"]
fn twenty_sigkills_over_a_million_events_end_in_the_state_of_one_run() {
    // Real Google events: the shared trace when it is there, else the
    // bundled excerpt of it (87,679 events), so the test never skips.
    let shared = repo().join("../shared/data/google-clusterdata-2011-2");
    let google = if shared.is_dir() {
        shared
    } else {
        repo().join("tests/data/google2011-excerpt")
    };
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for topic in ["whole.decisions", "killed.decisions"] {
        cluster
            .mock
            .create_topic(topic, DECISION_PARTITIONS, 1)
            .unwrap();
    }
    let brokers = cluster.brokers();

    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let synthetic = dir.path().join("synthetic.jsonl");
    jobcast_ok(&[
        "generate",
        "--seed",
        "11",
        "--jobs",
        SYNTHETIC_JOBS,
        "--dag-fraction",
        "0.2",
        "--vms",
        "400",
        "--vm-stop-mean-hours",
        "20",
        "-o",
        synthetic.to_str().unwrap(),
    ]);
    let max = GOOGLE_EVENTS.to_string();
    let total = replay(
        &brokers,
        &topics.events,
        &google,
        "google2011",
        &["--max-events", &max],
    ) + replay(&brokers, &topics.events, &synthetic, "jsonl", &[]);
    assert!(total >= 1_000_000, "only {total} events");
    assert_eq!(
        cluster.low_watermarks(&topics.events, PARTITIONS),
        vec![0; PARTITIONS as usize],
        "the mock cluster dropped the start of some partition: use more partitions"
    );
    eprintln!(
        "{total} events written in {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let whole_dir = tempfile::tempdir().unwrap();
    let whole = whole_dir.path().join("state");
    let started = Instant::now();
    let mut serve = Serve::start(
        &brokers,
        &whole,
        &["--decisions-topic", "whole.decisions", "--group", "whole"],
    );
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();
    eprintln!(
        "uninterrupted run: {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let killed_dir = tempfile::tempdir().unwrap();
    let killed = killed_dir.path().join("state");
    let partner_dir = tempfile::tempdir().unwrap();
    let partner_state = partner_dir.path().join("state");
    let mut flags = restartable("killed.decisions", "killed", MOCK_SESSION).to_vec();
    flags.extend(["--set", SNAPSHOT_EVERY]);
    let started = Instant::now();
    let mut partner = Serve::start(&brokers, &partner_state, &flags);
    // A seed whose 20 aims hold three or more of each phase aimed at:
    // restore, truncation and takeover kills are not sure to land.
    let mut random = Seeded(20_261_185);
    // Each streaming run gets on average a 1/(KILLS + 2) share of the
    // input before it is killed, so the kills spread over the whole stream.
    let share = total as f64 / (KILLS + 2) as f64;
    let mut landings: BTreeMap<Landed, usize> = BTreeMap::new();
    let mut kill = 0;
    while let Some(aim) = next_aim(kill, &landings, &mut random) {
        let mut run_flags = flags.clone();
        if (0.4..0.6).contains(&aim) {
            // Once the partner owns every partition (the dead incarnation's
            // session is over), the group gives a new member nothing at
            // first (the partner must give its share up first), and its
            // share in a second rebalance, after its restore: a takeover.
            wait_balanced(&[&partner], PARTITIONS, WAIT);
            // That comes seconds after the start (the mock holds each
            // rebalance for the session less a second): small batches keep
            // the instance from applying the rest of the input meanwhile.
            run_flags.extend(["--set", TAKEOVER_BATCH]);
        }
        if (0.2..0.4).contains(&aim) {
            let before = snapshot_seq(&killed);
            let held = kill_held_at_snapshot(&brokers, &killed, &run_flags, total);
            // Held, the snapshot it had taken never reached the store.
            assert!(!held || snapshot_seq(&killed) == before);
            let landed = if held {
                Landed::Truncation
            } else {
                Landed::Streaming
            };
            *landings.entry(landed).or_default() += 1;
            eprintln!("kill {}: {landed:?}", kill + 1);
            kill += 1;
            continue;
        }
        let mut serve = Serve::start_logging(&brokers, &killed, &run_flags, "info");
        if aim < 0.2 {
            serve.wait_logged("restoring the predictor state", 0, WAIT);
            std::thread::sleep(Duration::from_millis((random.unit() * 20.0) as u64));
        } else if aim < 0.6 {
            // The first partitions the group gives it after its restore (if
            // the group gave them before it, none follows: then the kill
            // lands where it lands).
            let (restored, _) = serve.wait_logged("predictor state restored", 0, WAIT);
            let deadline = Instant::now() + TAKEOVER_WAIT;
            while Instant::now() < deadline {
                let log = serve.log();
                if log[restored..]
                    .iter()
                    .any(|l| l.contains(ASSIGNED) && !logged_partitions(l).is_empty())
                {
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            std::thread::sleep(Duration::from_millis((random.unit() * 5.0) as u64));
        } else {
            let target = (share * (0.2 + 1.6 * random.unit())) as u64;
            wait_or_drained(&serve, total, || serve.committed() >= target.max(1));
        }
        let log = serve.kill();
        let restoring = log
            .iter()
            .any(|l| l.contains("restoring the predictor state"))
            && !log.iter().any(|l| l.contains("predictor state restored"));
        let assigned = log
            .iter()
            .rposition(|l| l.contains(ASSIGNED) && !logged_partitions(l).is_empty());
        let taken_over = log.iter().rposition(|l| l.contains(OWNS));
        let landed = if restoring {
            Landed::Restore
        } else if assigned > taken_over {
            Landed::Takeover
        } else {
            Landed::Streaming
        };
        *landings.entry(landed).or_default() += 1;
        eprintln!("kill {}: {landed:?}", kill + 1);
        kill += 1;
    }
    eprintln!("kills landed: {landings:?}");
    for phase in [Landed::Restore, Landed::Truncation, Landed::Takeover] {
        assert!(
            landings.contains_key(&phase),
            "no kill landed in a {phase:?}: {landings:?}"
        );
    }
    let mut serve = Serve::start(&brokers, &killed, &flags);
    serve.wait_stored_offsets(total, WAIT);
    partner.wait_stored_offsets(total, WAIT);
    wait_balanced(&[&serve, &partner], PARTITIONS, WAIT);
    // Killed together: an instance that left the group would hand its
    // partitions to the other, whose store would then hold them too.
    serve.kill();
    partner.kill();
    eprintln!(
        "run with {kill} kills: {:.0} s",
        started.elapsed().as_secs_f64()
    );

    let offsets = |path: &Path| {
        StateStore::open_read_only(path)
            .unwrap()
            .offsets(&topics.events)
            .unwrap()
    };
    assert_eq!(offsets(&killed), offsets(&whole));
    assert_eq!(offsets(&partner_state), offsets(&whole));
    // A record stored by both is one that the killed instance had stored
    // but not yet committed to the group when it died, and its partner
    // stored again from the group's offset: the same record.
    assert_shared_state_after(&whole, &[&killed, &partner_state], Stored::SameTwice);
    let (a, b) = (
        decisions_across(&brokers, "killed.decisions", DECISION_PARTITIONS),
        decisions_across(&brokers, "whole.decisions", DECISION_PARTITIONS),
    );
    assert_eq!(
        cluster.low_watermarks("killed.decisions", DECISION_PARTITIONS),
        vec![0; DECISION_PARTITIONS as usize]
    );
    assert!(a.len() > 10_000, "{} decisions", a.len());
    if a != b {
        // Which decisions, so that a failure says what went wrong.
        let missing: Vec<_> = b.keys().filter(|k| !a.contains_key(k)).take(5).collect();
        let extra: Vec<_> = a.keys().filter(|k| !b.contains_key(k)).take(5).collect();
        let changed: Vec<_> = a
            .iter()
            .filter_map(|(k, d)| Some((k, d, b.get(k).filter(|w| *w != d)?)))
            .take(3)
            .collect();
        panic!(
            "the decisions differ after the kills: {} against {} uninterrupted; \
             missing {missing:?}, extra {extra:?}, changed (killed, uninterrupted) {changed:?}",
            a.len(),
            b.len()
        );
    }
}
