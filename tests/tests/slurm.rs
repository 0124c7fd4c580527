//! A real Slurm 22.05 cluster (single node, `scripts/slurm.sh`) in the
//! loop: `jobcast slurm watch` publishes its jobs as canonical events, and
//! `jobcast serve` holds every one of them.
//!
//! The tests take one cluster at a time: each holds a lock on one file
//! while its cluster runs (`tests/src/slurm.rs`), and under `cargo
//! nextest` the `slurm` test group runs them one by one
//! (`.config/nextest.toml`).

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use jobcast_connectors::slurm::metrics::{APPLY_METRICS, WATCH_METRICS};
use jobcast_ingest::event::{Event, JobOutcome, TaskKind, decode};
use jobcast_ingest::kafka::Topics;
use jobcast_tests::kafka::Cluster;
use jobcast_tests::serve::{Serve, free_port, metric_sum};
use jobcast_tests::slurm::{Slurm, SlurmTask};
use jobcast_tests::{Running, jobcast_bin, repo, shared_data};

const PARTITIONS: i32 = 2;

/// Now, in unix seconds, after Slurm's clock has passed every submit time
/// so far (they are whole seconds).
fn since_now() -> u64 {
    std::thread::sleep(Duration::from_millis(1100));
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A Slurm cluster, a Kafka cluster with the default topics beside it, and a
/// scratch directory.
fn slurm_and_kafka() -> (Slurm, Topics, Cluster, tempfile::TempDir) {
    let slurm = Slurm::up();
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    (slurm, topics, cluster, tempfile::tempdir().unwrap())
}

/// `jobcast slurm watch`, following the jobs submitted from `since` (unix
/// seconds) on, or all.
fn start_watcher(
    slurm: &Slurm,
    brokers: &str,
    state: &std::path::Path,
    metrics: u16,
    since: Option<u64>,
) -> Running {
    start_watcher_with(slurm, brokers, state, metrics, since, &[])
}

/// [`start_watcher`] with further flags.
fn start_watcher_with(
    slurm: &Slurm,
    brokers: &str,
    state: &std::path::Path,
    metrics: u16,
    since: Option<u64>,
    flags: &[String],
) -> Running {
    let since = since.map(|s| vec!["--since".to_string(), s.to_string()]);
    Running(
        Command::new(jobcast_bin())
            .args([
                "slurm",
                "watch",
                "--brokers",
                brokers,
                "--interval-secs",
                "0.5",
            ])
            .args(since.unwrap_or_default())
            .args(flags)
            .args((!state.exists()).then_some("--fresh"))
            .arg("--state")
            .arg(state)
            .arg("--metrics")
            .arg(format!("127.0.0.1:{metrics}"))
            .env("SLURM_CONF", slurm.conf())
            .env("JOBCAST_LOG", "info")
            .stdout(Stdio::null())
            .spawn()
            .expect("jobcast slurm watch starts"),
    )
}

/// [`start_watcher`] with its state in `dir`, following the jobs submitted
/// from now on.
fn watch_from_now(
    slurm: &Slurm,
    cluster: &Cluster,
    dir: &std::path::Path,
    metrics: u16,
) -> Running {
    let state = dir.join("watch.json");
    start_watcher(
        slurm,
        &cluster.brokers(),
        &state,
        metrics,
        Some(since_now()),
    )
}

/// A process's Prometheus metrics, as text; empty while it does not answer.
fn scrape(port: u16) -> String {
    ureq::get(format!("http://127.0.0.1:{port}/metrics"))
        .call()
        .ok()
        .and_then(|mut r| r.body_mut().read_to_string().ok())
        .unwrap_or_default()
}

/// `text` (a Prometheus scrape) exports every one of `names`.
fn assert_exported(text: &str, names: &[&str]) {
    for name in names {
        assert!(
            text.contains(&format!("\n{name}")),
            "{name} not exported: {text}"
        );
    }
}

/// Every event in the topic, by job.
fn events_by_job(cluster: &Cluster, topic: &str) -> BTreeMap<u64, Vec<Event>> {
    let mut by_job: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
    for record in cluster.read_all(topic, PARTITIONS) {
        let event = decode(&record.payload).expect("canonical events");
        by_job
            .entry(event.job_id().expect("job events"))
            .or_default()
            .push(event);
    }
    by_job
}

/// One task's events in `events` (one job's): each one's kind and time, in
/// unix seconds.
fn task_times(events: &[Event], task: u32) -> Vec<(TaskKind, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Task(t) if t.task_index == task => Some((t.kind, t.time_us / 1_000_000)),
            _ => None,
        })
        .collect()
}

/// The outcome of each `job_ended` in `events`.
fn job_outcomes(events: &[Event]) -> Vec<JobOutcome> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::JobEnded(j) => Some(j.outcome),
            _ => None,
        })
        .collect()
}

/// `events` (one job's, from the topic) say what Slurm's own record of the
/// job says: one `job_submitted` with its width, partition `debug`, its
/// cluster (`ClusterName` of `scripts/slurm.sh`), its user's group (the
/// tests submit as root) and its time limit
/// (`limit_min`, as the job asked); for each task (by array
/// index), a start if it ran and one end, at Slurm's times; one
/// `job_ended`, with `outcome`.
fn assert_as_slurm_ended(
    events: &[Event],
    slurm_tasks: &BTreeMap<(u64, u32), SlurmTask>,
    job: u64,
    (indices, limit_min): (&[u32], u64),
    outcome: JobOutcome,
) {
    let submitted: Vec<(u32, &str, &str, &str, Option<u64>)> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) => Some((
                j.num_tasks,
                j.partition.as_str(),
                j.cluster.as_str(),
                j.group.as_str(),
                j.time_limit_us,
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        submitted,
        [(
            indices.len() as u32,
            "debug",
            "jobcast",
            "root",
            Some(limit_min * 60_000_000)
        )],
        "job {job}: {events:?}"
    );
    for (task, array_index) in indices.iter().enumerate() {
        let SlurmTask {
            start, end, state, ..
        } = &slurm_tasks[&(job, *array_index)];
        let of_task = task_times(events, task as u32);
        let expected = match state.as_str() {
            "COMPLETED" => vec![(TaskKind::Schedule, *start), (TaskKind::Finish, *end)],
            "FAILED" => vec![(TaskKind::Schedule, *start), (TaskKind::Fail, *end)],
            // Cancelled while it ran, or before.
            "CANCELLED" if start < end => {
                vec![(TaskKind::Schedule, *start), (TaskKind::Kill, *end)]
            }
            "CANCELLED" => vec![(TaskKind::Kill, *end)],
            "TIMEOUT" => vec![(TaskKind::Schedule, *start), (TaskKind::Timeout, *end)],
            other => panic!("job {job} task {task}: state {other}"),
        };
        assert_eq!(of_task, expected, "job {job} task {task} ({state})");
    }
    let outcomes = job_outcomes(events);
    let states: Vec<&str> = indices
        .iter()
        .map(|i| slurm_tasks[&(job, *i)].state.as_str())
        .collect();
    assert_eq!(
        outcomes,
        [outcome],
        "job {job}, Slurm's task states {states:?}"
    );
}

/// Waits (up to `within`) until every one of `jobs` has ended in the
/// topic; then every event in it, by job.
fn wait_ended(
    cluster: &Cluster,
    topic: &str,
    jobs: &[u64],
    within: Duration,
) -> BTreeMap<u64, Vec<Event>> {
    let deadline = Instant::now() + within;
    loop {
        let by_job = events_by_job(cluster, topic);
        let ended = jobs
            .iter()
            .filter(|job| {
                by_job
                    .get(job)
                    .is_some_and(|events| events.iter().any(|e| matches!(e, Event::JobEnded(_))))
            })
            .count();
        if ended == jobs.len() {
            return by_job;
        }
        assert!(
            Instant::now() < deadline,
            "{ended} of {} jobs ended: {by_job:?}",
            jobs.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Two real clusters, `east` and `west`, watched into one jobcast: each
/// job comes with its cluster, `GET /clusters` holds each cluster's live
/// jobs apart, and once a job of the same name has finished (the history
/// learns across clusters), a job's decision carries its completion on
/// both clusters and recommends the earlier.
#[test]
fn two_real_clusters_watched_into_one_jobcast_are_held_apart_and_compared() {
    let (east, west) = Slurm::federation();
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let since = since_now();
    let brokers = cluster.brokers();
    let _watchers = [(&east, "east.json"), (&west, "west.json")].map(|(slurm, state)| {
        start_watcher(
            slurm,
            &brokers,
            &dir.path().join(state),
            free_port(),
            Some(since),
        )
    });
    let serve = Serve::start(
        &brokers,
        &dir.path().join("serve"),
        &["--set", "engine.eta.slots=8"],
    );
    // The history's first job: on west.
    let first = west.sbatch(&["--job-name=federated", "--wrap", "sleep 1"]);
    assert!(first >= 1_000_000, "west's job IDs: {first}");
    wait_ended(&cluster, &topics.events, &[first], Duration::from_secs(60));
    // East busy, west idle.
    let long: Vec<u64> = (0..3)
        .map(|_| east.sbatch(&["--job-name=federated", "--wrap", "sleep 120"]))
        .collect();
    let waiting = west.sbatch(&["--job-name=federated", "--wrap", "sleep 120"]);
    let asked = east.sbatch(&["--job-name=federated", "--wrap", "sleep 1"]);
    assert!(asked < 1_000_000 && long.iter().all(|&j| j < 1_000_000));

    let deadline = Instant::now() + Duration::from_secs(60);
    let clusters = loop {
        let (status, body) = serve.get("/clusters");
        assert_eq!(status, 200, "{body}");
        let clusters: serde_json::Value = serde_json::from_str(&body).unwrap();
        let live = |name: &str| {
            clusters
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["cluster"] == name)
                .map(|c| c["live_jobs"].as_u64().unwrap())
        };
        if live("east") >= Some(4) && live("west") >= Some(1) {
            break clusters;
        }
        assert!(Instant::now() < deadline, "{clusters}");
        std::thread::sleep(Duration::from_millis(500));
    };
    let (_, job) = serve.get(&format!("/jobs/{waiting}"));
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["cluster"], "west", "{job}\n{clusters}");

    // The decision of the job asked about, with both clusters.
    let decision = loop {
        let found = cluster
            .read_all(&topics.decisions, 1)
            .into_iter()
            .map(|m| serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap())
            .find(|d| d["job_id"] == asked && d["clusters"].is_array());
        if let Some(d) = found {
            break d;
        }
        assert!(
            Instant::now() < deadline,
            "no decision of job {asked} with clusters: {:?}",
            cluster
                .read_all(&topics.decisions, 1)
                .into_iter()
                .map(|m| String::from_utf8_lossy(&m.payload).into_owned())
                .collect::<Vec<_>>()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let completions: BTreeMap<String, u64> = decision["clusters"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cluster"].as_str().unwrap().to_owned(),
                c["eta"]["p50_us"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        completions.keys().map(String::as_str).collect::<Vec<_>>(),
        ["east", "west"],
        "{decision}"
    );
    assert_eq!(decision["eta"]["p50_us"], completions["east"], "{decision}");
    let earliest = completions.iter().min_by_key(|&(_, p50)| *p50).unwrap().0;
    assert_eq!(
        decision["recommended_cluster"],
        earliest.as_str(),
        "{decision}"
    );

    // `jobcast slurm submit`: held on east while jobcast is asked, then
    // released there or moved to the cluster it recommends. East's queue
    // now holds more jobs than its 8 slots: the job moves to west.
    for _ in 0..8 {
        east.sbatch(&["--job-name=federated", "--wrap", "sleep 120"]);
    }
    let east_conf = format!("east={}", east.conf().display());
    let west_conf = format!("west={}", west.conf().display());
    let workdir = dir.path().to_str().unwrap();
    let submit_to = |url: &str, timeout: &str, west_conf: &str| -> serde_json::Value {
        let out = jobcast_tests::jobcast_ok(&[
            "slurm",
            "submit",
            "--jobcast",
            url,
            "--cluster",
            &east_conf,
            "--cluster",
            west_conf,
            "--timeout-secs",
            timeout,
            "--json",
            "--",
            "--job-name=federated",
            "--chdir",
            workdir,
            "--wrap",
            "sleep 1",
        ]);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
    };
    let submit = |url: &str, timeout: &str| submit_to(url, timeout, &west_conf);
    let state = |slurm: &Slurm, job: u64| {
        let out = slurm.run("scontrol", &["show", "job", &job.to_string()]);
        out.split_whitespace()
            .find_map(|w| w.strip_prefix("JobState="))
            .unwrap_or_default()
            .to_owned()
    };
    let chosen = submit(&serve.http, "60");
    eprintln!("jobcast slurm submit: {chosen}");
    let held = chosen["held_job_id"].as_u64().unwrap();
    let job = chosen["job_id"].as_u64().unwrap();
    let completions = chosen["completions"].as_array().unwrap();
    assert_eq!(completions.len(), 2, "{chosen}");
    let best = completions
        .iter()
        .min_by_key(|c| c["p50_us"].as_u64().unwrap())
        .unwrap();
    assert_eq!(chosen["cluster"], best["cluster"], "{chosen}");
    assert_eq!(chosen["cluster"], "west", "{chosen}");
    assert!(job >= 1_000_000 && held < 1_000_000, "{chosen}");
    assert_eq!(state(&east, held), "CANCELLED", "{chosen}");
    assert_ne!(state(&west, job), "", "{chosen}");
    // West recommended, but its sbatch refuses (a configuration Slurm
    // cannot read): the job is released where it waits, never lost.
    let bad_conf = dir.path().join("bad.conf");
    std::fs::write(&bad_conf, "NotAKey=1\n").unwrap();
    let refused = submit_to(&serve.http, "60", &format!("west={}", bad_conf.display()));
    assert_eq!(refused["cluster"], "east", "{refused}");
    assert_eq!(refused["job_id"], refused["held_job_id"], "{refused}");
    assert!(
        refused["why"]
            .as_str()
            .unwrap()
            .contains("sbatch there failed"),
        "{refused}"
    );
    let line = east.run("scontrol", &["show", "job", &refused["job_id"].to_string()]);
    assert!(!line.contains("JobHeldUser"), "released: {line}");
    // With no service to ask, the job is released where it waits.
    let alone = submit("http://127.0.0.1:9", "1");
    assert_eq!(alone["cluster"], "east", "{alone}");
    assert_eq!(alone["job_id"], alone["held_job_id"], "{alone}");
    assert!(
        alone["why"].as_str().unwrap().contains("no decision"),
        "{alone}"
    );
    let line = east.run("scontrol", &["show", "job", &alone["job_id"].to_string()]);
    assert!(!line.contains("JobHeldUser"), "released: {line}");
    serve.terminate();
}

/// `jobcast slurm submit` refuses a cluster whose configuration is not
/// there, by name, before anything is submitted; and a `--cluster` that
/// is not NAME=SLURM_CONF.
#[test]
fn slurm_submit_refuses_a_cluster_configuration_that_is_not_there() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("east.conf");
    std::fs::write(&conf, "ClusterName=east\n").unwrap();
    let east = format!("east={}", conf.display());
    for (west, expected) in [
        (
            "west=/nonexistent/slurm.conf",
            "--cluster west=/nonexistent/slurm.conf: no such file",
        ),
        ("west", "`west`: expected NAME=SLURM_CONF"),
    ] {
        let out = jobcast_tests::jobcast(&[
            "slurm",
            "submit",
            "--cluster",
            &east,
            "--cluster",
            west,
            "--",
            "--wrap",
            "true",
        ]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{west}");
        assert!(stderr.contains(expected), "{west}: {stderr}");
    }
}

/// Arrays (one sparse), a plain job, a failing one and one cancelled while
/// held, with the watcher killed (SIGKILL) mid-run and started again: every
/// job reaches the topic once, each task with one start (if it ran) and one
/// end, at the times Slurm gives them; the service applies them all, and
/// holds each job as Slurm ended it. A job submitted before the watcher's
/// `--since`, though Slurm lists it throughout, never reaches the topic.
#[test]
fn a_real_clusters_jobs_reach_the_topic_once_across_a_watcher_kill() {
    let (slurm, topics, cluster, dir) = slurm_and_kafka();
    let state = dir.path().join("watch.json");
    let before = slurm.sbatch(&["-J", "before", "--hold", "--wrap", "sleep 1"]);
    let since = since_now();
    let mut watcher = start_watcher(&slurm, &cluster.brokers(), &state, free_port(), Some(since));

    let array = slurm.sbatch(&[
        "-J",
        "array",
        "--time=1",
        "--array=0-7%4",
        "--wrap",
        "sleep 2",
    ]);
    let sparse = slurm.sbatch(&[
        "-J",
        "sparse",
        "--time=1",
        "--array=1,3,5",
        "--wrap",
        "sleep 1",
    ]);
    let plain = slurm.sbatch(&[
        "-J",
        "plain",
        "--time=1",
        "--deadline=now+2hours",
        "-c",
        "2",
        "--wrap",
        "sleep 3",
    ]);
    let failing = slurm.sbatch(&["-J", "failing", "--time=1", "--wrap", "sleep 1; exit 3"]);
    let held = slurm.sbatch(&["-J", "held", "--time=1", "--hold", "--wrap", "sleep 1"]);
    std::thread::sleep(Duration::from_secs(3));
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    slurm.run("scancel", &[&held.to_string()]);
    std::thread::sleep(Duration::from_secs(1));
    let metrics = free_port();
    let mut watcher = start_watcher(&slurm, &cluster.brokers(), &state, metrics, Some(since));

    let by_job = wait_ended(
        &cluster,
        &topics.events,
        &[array, sparse, plain, failing, held],
        Duration::from_secs(120),
    );
    // Its metrics, every one the alerts and docs name: every job
    // followed, no poll failed.
    let text = scrape(metrics);
    assert_exported(&text, &WATCH_METRICS);
    assert_eq!(
        metric_sum(&text, "jobcast_slurm_jobs_followed"),
        5.0,
        "{text}"
    );
    assert_eq!(
        metric_sum(&text, "jobcast_slurm_polls_failed_total"),
        0.0,
        "{text}"
    );
    assert!(
        metric_sum(&text, "jobcast_slurm_events_published_total") > 0.0,
        "{text}"
    );
    assert!(
        metric_sum(&text, "jobcast_slurm_last_poll_timestamp_seconds") > 1.7e9,
        "{text}"
    );
    watcher.terminate();

    // Slurm's own record of each task.
    let slurm_tasks = slurm.tasks();
    assert_eq!(
        slurm_tasks.get(&(before, 0)).map(|t| t.state.as_str()),
        Some("PENDING"),
        "Slurm lists the job submitted before `--since`"
    );
    assert!(
        !by_job.contains_key(&before),
        "a job submitted before --since is not followed: {:?}",
        by_job[&before]
    );
    slurm.run("scancel", &[&before.to_string()]);

    for (job, indices, outcome) in [
        (array, &[0, 1, 2, 3, 4, 5, 6, 7][..], JobOutcome::Finish),
        (sparse, &[1, 3, 5], JobOutcome::Finish),
        (plain, &[0], JobOutcome::Finish),
        (failing, &[0], JobOutcome::Fail),
        (held, &[0], JobOutcome::Kill),
    ] {
        assert_as_slurm_ended(&by_job[&job], &slurm_tasks, job, (indices, 1), outcome);
    }
    // `sbatch --deadline` is the job's deadline, on the events' clock;
    // the jobs without one have none.
    let deadlines: BTreeMap<u64, (u64, Option<u64>)> = by_job
        .iter()
        .flat_map(|(&job, events)| {
            events.iter().filter_map(move |e| match e {
                Event::JobSubmitted(j) => Some((job, (j.time_us, j.deadline_us))),
                _ => None,
            })
        })
        .collect();
    for (&job, &(submit_us, deadline_us)) in &deadlines {
        if job == plain {
            let after = deadline_us.expect("plain has a deadline") as i64 - submit_us as i64;
            assert!(
                (after - 7_200_000_000).abs() <= 120_000_000,
                "deadline {after} µs after the submission"
            );
        } else {
            assert_eq!(deadline_us, None, "job {job}");
        }
    }

    // The service applies every event (none dead-lettered) and holds each
    // job as Slurm ended it.
    let total = by_job.values().map(Vec::len).sum::<usize>() as u64;
    let mut serve = Serve::start(&cluster.brokers(), &dir.path().join("serve"), &[]);
    serve.wait_stored_offsets(total, Duration::from_secs(60));
    for (job, width, state, finished) in [
        (array, 8, "finished", 8),
        (sparse, 3, "finished", 3),
        (plain, 1, "finished", 1),
        (failing, 1, "failed", 0),
        (held, 1, "killed", 0),
    ] {
        let (status, body) = serve.get(&format!("/jobs/{job}"));
        assert_eq!(status, 200, "job {job}: {body}");
        let record: serde_json::Value = serde_json::from_str(&body).unwrap();
        let held_as = (
            record["width"].as_u64(),
            record["state"].as_str(),
            record["tasks_finished"].as_u64(),
        );
        assert_eq!(
            held_as,
            (Some(width), Some(state), Some(finished)),
            "job {job}: {body}"
        );
    }
    assert_eq!(serve.metric("jobcast_events_dead_lettered_total"), 0.0);
    serve.terminate();
}

/// A fresh watcher given the site's accounting (`--history-since`) first
/// publishes the jobs `sacct` accounted as ended since then, which
/// `squeue` no longer lists: each once, as Slurm ran it. A job submitted
/// before the history's start is not published; one running then is
/// followed live. A restart given the history again publishes nothing
/// more. The service holds them.
#[test]
fn a_fresh_watcher_starts_warm_from_the_sites_accounting() {
    // Finished jobs leave `squeue` within a minute or so.
    let slurm = Slurm::with_accounting(2);
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let before = slurm.sbatch(&["-J", "before", "--time=1", "--wrap", "true"]);
    let since = since_now();
    let array = slurm.sbatch(&[
        "-J",
        "array",
        "--time=1",
        "--array=0-2",
        "--wrap",
        "sleep 1",
    ]);
    let failing = slurm.sbatch(&["-J", "failing", "--time=1", "--wrap", "sleep 1; exit 3"]);
    // Until the accounting has the five tasks ended and `squeue` has let
    // them go.
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let accounted = slurm.run("sacct", &["-a", "-X", "-n", "-P", "-o", "JobID,State"]);
        let ended = accounted
            .lines()
            .filter(|l| l.ends_with("|COMPLETED") || l.ends_with("|FAILED"))
            .count();
        if ended == 5 && slurm.tasks().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "sacct says:\n{accounted}");
        std::thread::sleep(Duration::from_secs(1));
    }
    let running = slurm.sbatch(&["-J", "running", "--time=2", "--wrap", "sleep 300"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !slurm
        .run("sacct", &["-a", "-X", "-n", "-P", "-o", "JobID,State"])
        .contains(&format!("{running}|RUNNING"))
    {
        assert!(Instant::now() < deadline, "job {running} does not run");
        std::thread::sleep(Duration::from_millis(500));
    }
    let state = dir.path().join("watch.json");
    let history = ["--history-since".to_string(), since.to_string()];
    let metrics = free_port();
    let mut watcher =
        start_watcher_with(&slurm, &cluster.brokers(), &state, metrics, None, &history);
    wait_ended(
        &cluster,
        &topics.events,
        &[array, failing],
        Duration::from_secs(60),
    );
    // The running job, followed live, ends when cancelled; a look or two
    // later, nothing has been said twice.
    slurm.run("scancel", &[&running.to_string()]);
    wait_ended(
        &cluster,
        &topics.events,
        &[running],
        Duration::from_secs(60),
    );
    std::thread::sleep(Duration::from_secs(2));
    let by_job = events_by_job(&cluster, &topics.events);
    let text = scrape(metrics);
    assert_eq!(metric_sum(&text, "jobcast_slurm_polls_failed_total"), 0.0);
    assert_eq!(metric_sum(&text, "jobcast_slurm_history_jobs_total"), 2.0);
    watcher.terminate();
    let jobs: Vec<u64> = by_job.keys().copied().collect();
    assert_eq!(
        jobs,
        [array, failing, running],
        "{before} left out: {by_job:?}"
    );
    for (job, tasks, end, outcome, limit_min) in [
        (array, 3, TaskKind::Finish, JobOutcome::Finish, 1),
        (failing, 1, TaskKind::Fail, JobOutcome::Fail, 1),
        (running, 1, TaskKind::Kill, JobOutcome::Kill, 2),
    ] {
        let events = &by_job[&job];
        let submitted: Vec<(u32, Option<u64>)> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some((j.num_tasks, j.time_limit_us)),
                _ => None,
            })
            .collect();
        assert_eq!(
            submitted,
            [(tasks, Some(limit_min * 60_000_000))],
            "job {job}: {events:?}"
        );
        for task in 0..tasks {
            let kinds: Vec<TaskKind> = task_times(events, task).iter().map(|t| t.0).collect();
            assert_eq!(kinds, [TaskKind::Schedule, end], "job {job} task {task}");
        }
        assert_eq!(job_outcomes(events), [outcome], "job {job}");
    }

    // A restart given the history again: it was read.
    let mut watcher = start_watcher_with(
        &slurm,
        &cluster.brokers(),
        &state,
        free_port(),
        None,
        &history,
    );
    std::thread::sleep(Duration::from_secs(3));
    watcher.terminate();
    assert_eq!(events_by_job(&cluster, &topics.events), by_job);

    let total = by_job.values().map(Vec::len).sum::<usize>() as u64;
    let mut serve = Serve::start(&cluster.brokers(), &dir.path().join("serve"), &[]);
    serve.wait_stored_offsets(total, Duration::from_secs(60));
    let (status, body) = serve.get(&format!("/jobs/{array}"));
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""state":"finished""#), "{body}");
    serve.terminate();
}

/// slurmctld stopped mid-run and started again from its saved state (a
/// restart, an upgrade): while it is down the watcher's polls fail, are
/// counted, and publish nothing; the tasks that ended meanwhile, and a job
/// submitted after, reach the topic once, at Slurm's times, and no job is
/// lost. A job run past its one-minute limit across the restart times out
/// (Slurm checks limits about every 30 s: this test takes a minute or
/// two). The jobs meant to finish have ten minutes, so that a controller
/// slow to come back under load cannot time them out.
#[test]
fn a_controller_restart_mid_run_loses_and_doubles_nothing() {
    let (slurm, topics, cluster, dir) = slurm_and_kafka();
    let metrics = free_port();
    let mut watcher = watch_from_now(&slurm, &cluster, dir.path(), metrics);
    let limited = slurm.sbatch(&["-J", "limited", "--time=1", "--wrap", "sleep 600"]);
    let array = slurm.sbatch(&[
        "-J",
        "array",
        "--time=10",
        "--array=0-5%3",
        "--wrap",
        "sleep 2",
    ]);
    let plain = slurm.sbatch(&["-J", "plain", "--time=10", "--wrap", "sleep 3"]);

    // Seen running before the controller stops.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !events_by_job(&cluster, &topics.events)
        .get(&plain)
        .is_some_and(|events| {
            events
                .iter()
                .any(|e| matches!(e, Event::Task(t) if t.kind == TaskKind::Schedule))
        })
    {
        assert!(
            Instant::now() < deadline,
            "the plain job was not seen running"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    slurm.stop_controller();
    let failed = |text: &str| metric_sum(text, "jobcast_slurm_polls_failed_total");
    let deadline = Instant::now() + Duration::from_secs(60);
    while failed(&scrape(metrics)) < 2.0 {
        assert!(
            Instant::now() < deadline,
            "no poll failed with slurmctld down: {}",
            scrape(metrics)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    // Long enough for the running tasks to end while it is down.
    std::thread::sleep(Duration::from_secs(3));
    slurm.start_controller();
    let after = slurm.sbatch(&["-J", "after", "--time=10", "--wrap", "sleep 1"]);

    let by_job = wait_ended(
        &cluster,
        &topics.events,
        &[array, plain, after, limited],
        Duration::from_secs(240),
    );
    let text = scrape(metrics);
    for (name, expected) in [
        ("jobcast_slurm_jobs_lost_total", 0.0),
        ("jobcast_slurm_records_skipped_total", 0.0),
        ("jobcast_slurm_jobs_followed", 4.0),
    ] {
        assert_eq!(metric_sum(&text, name), expected, "{name}: {text}");
    }
    assert!(failed(&text) >= 2.0, "{text}");
    watcher.terminate();

    let slurm_tasks = slurm.tasks();
    assert_eq!(slurm_tasks[&(limited, 0)].state, "TIMEOUT");
    for (job, tasks, outcome) in [
        (array, (&[0, 1, 2, 3, 4, 5][..], 10), JobOutcome::Finish),
        (plain, (&[0][..], 10), JobOutcome::Finish),
        (after, (&[0][..], 10), JobOutcome::Finish),
        (limited, (&[0][..], 1), JobOutcome::Kill),
    ] {
        assert_as_slurm_ended(&by_job[&job], &slurm_tasks, job, tasks, outcome);
    }
    assert_eq!(by_job.len(), 4, "{by_job:?}");
}

/// What an operator does to running work reaches the topic as Slurm did
/// it: a job requeued while it ran is evicted at the requeue and runs
/// again; an array task cancelled while it ran is killed, its job ended
/// `kill` once the other task finished.
#[test]
fn a_requeued_job_and_a_task_cancelled_while_running_reach_the_topic_as_slurm_ran_them() {
    let (slurm, topics, cluster, dir) = slurm_and_kafka();
    let mut watcher = watch_from_now(&slurm, &cluster, dir.path(), free_port());
    let requeued = slurm.sbatch(&["-J", "requeued", "--time=1", "--wrap", "sleep 3"]);
    let array = slurm.sbatch(&[
        "-J",
        "array",
        "--time=1",
        "--array=0-1",
        "--wrap",
        "sleep 4",
    ]);
    let running = |job: u64, index: u32| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while slurm.tasks().get(&(job, index)).map(|t| t.state.as_str()) != Some("RUNNING") {
            assert!(
                Instant::now() < deadline,
                "{job}_{index} never ran: {:?}",
                slurm.tasks()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    running(requeued, 0);
    running(array, 0);
    // Seen running by the watcher (it polls every 0.5 s) before either.
    std::thread::sleep(Duration::from_secs(1));
    slurm.run("scontrol", &["requeue", &requeued.to_string()]);
    slurm.run("scancel", &[&format!("{array}_0")]);
    // Slurm holds a requeued job back for two minutes (its begin time);
    // an operator may let it go at once.
    std::thread::sleep(Duration::from_secs(1));
    slurm.run(
        "scontrol",
        &["update", &format!("JobId={requeued}"), "StartTime=now"],
    );

    let by_job = wait_ended(
        &cluster,
        &topics.events,
        &[requeued, array],
        Duration::from_secs(120),
    );
    watcher.terminate();
    let tasks = slurm.tasks();
    let of_task = |job: u64, task: u32| task_times(&by_job[&job], task);
    let ended = |job: u64| job_outcomes(&by_job[&job]);

    // Requeued: its first run is evicted at the requeue (Slurm makes that
    // the job's submit time), its second runs to the end.
    let again = &tasks[&(requeued, 0)];
    assert_eq!(again.state, "COMPLETED", "{tasks:?}");
    let kinds = of_task(requeued, 0);
    assert_eq!(
        kinds.iter().map(|(k, _)| *k).collect::<Vec<_>>(),
        [
            TaskKind::Schedule,
            TaskKind::Evict,
            TaskKind::Schedule,
            TaskKind::Finish
        ],
        "{kinds:?}"
    );
    assert!(kinds[0].1 <= again.submit, "{kinds:?} against {again:?}");
    assert_eq!(kinds[1].1, again.submit, "{again:?}");
    assert_eq!(
        &kinds[2..],
        [
            (TaskKind::Schedule, again.start),
            (TaskKind::Finish, again.end)
        ]
    );
    assert_eq!(ended(requeued), [JobOutcome::Finish]);

    // Cancelled while it ran: started, then killed at Slurm's end time.
    let cancelled = &tasks[&(array, 0)];
    assert_eq!(cancelled.state, "CANCELLED", "{tasks:?}");
    assert!(cancelled.start < cancelled.end, "it ran: {cancelled:?}");
    assert_eq!(
        of_task(array, 0),
        [
            (TaskKind::Schedule, cancelled.start),
            (TaskKind::Kill, cancelled.end)
        ]
    );
    let finished = &tasks[&(array, 1)];
    assert_eq!(
        of_task(array, 1),
        [
            (TaskKind::Schedule, finished.start),
            (TaskKind::Finish, finished.end)
        ]
    );
    assert_eq!(ended(array), [JobOutcome::Kill]);
}

/// `jobcast slurm apply` as a test starts it: its stdout (one JSON line per
/// action) goes to `out`.
fn start_applier(
    slurm: &Slurm,
    brokers: &str,
    state: &std::path::Path,
    out: &std::path::Path,
    extra: &[&str],
) -> Running {
    Running(
        Command::new(jobcast_bin())
            .args([
                "slurm",
                "apply",
                "--brokers",
                brokers,
                "--interval-secs",
                "0.3",
            ])
            .arg("--state")
            .arg(state)
            .args(extra)
            .env("SLURM_CONF", slurm.conf())
            .env("JOBCAST_LOG", "info")
            .stdout(std::fs::File::create(out).unwrap())
            .spawn()
            .expect("jobcast slurm apply starts"),
    )
}

/// The applier's actions so far: its JSON lines.
fn actions(out: &std::path::Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out)
        .unwrap_or_default()
        .lines()
        .map(|line| serde_json::from_str(line).expect("an action is a JSON line"))
        .collect()
}

/// [`start_applier`] with its state and output in `dir` (`NAME.json`,
/// `NAME.jsonl`), once it has printed three actions: it and its output.
fn start_applier_until_three_actions(
    slurm: &Slurm,
    cluster: &Cluster,
    dir: &std::path::Path,
    name: &str,
    extra: &[&str],
) -> (Running, std::path::PathBuf) {
    let state = dir.join(format!("{name}.json"));
    let out = dir.join(format!("{name}.jsonl"));
    let applier = start_applier(slurm, &cluster.brokers(), &state, &out, extra);
    let deadline = Instant::now() + Duration::from_secs(30);
    while actions(&out).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the {name} applier printed fewer than three actions"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (applier, out)
}

/// The priority `jobcast slurm apply` gives spare work by default.
const SPARE: u64 = 1_000_000;

/// Slurm driven by jobcast's decisions: watch → serve (SLearn) → apply. A
/// running job fills the node while a wide array and a short job arrive:
///
/// - an applier whose `scontrol` always fails counts its failures and goes
///   on; a dry run prints the commands and changes nothing;
/// - the real one gives the array's pilots and the short job their queues'
///   priorities and the array's other tasks the spare one, as the newest
///   decisions say, and a job it has no decision for (submitted before the
///   watcher's `--since`) Q0's;
/// - killed (SIGKILL) and started again, it carries out no decision older
///   than one it already carried out;
/// - once the node frees, the pilots start first; the array's other tasks
///   take the CPUs that would idle while the pilots run (work
///   conservation), and once SLearn has placed the array, the rest run at
///   its queue's priority with (the second applier sets walltimes) a time
///   limit from its estimate.
#[test]
fn jobcasts_decisions_drive_a_real_slurm_pilots_first_across_an_apply_kill() {
    let (slurm, topics, cluster, dir) = slurm_and_kafka();
    // Submitted before the watcher's `--since`, `early` never gets a
    // decision: it stands with Q0, as new work does.
    let blocker = slurm.sbatch(&["-J", "blocker", "-c", "8", "--wrap", "sleep 300"]);
    let early = slurm.sbatch(&["-J", "early", "-c", "1", "--wrap", "sleep 1"]);
    let mut watcher = watch_from_now(&slurm, &cluster, dir.path(), free_port());
    let serve = Serve::start(
        &cluster.brokers(),
        &dir.path().join("serve"),
        &[
            "--set",
            "engine.policies.sampling={mode = \"fixed\", ratio = 0.25}",
        ],
    );

    let wide = slurm.sbatch(&["-J", "wide", "-c", "2", "--array=0-11", "--wrap", "sleep 5"]);
    let short = slurm.sbatch(&["-J", "short", "-c", "2", "--wrap", "sleep 1"]);

    // The decisions for the array (sampling, 3 pilots) and the short job.
    let deadline = Instant::now() + Duration::from_secs(60);
    let sampling = loop {
        let decisions = jobcast_tests::kafka::decisions(&cluster.brokers(), &topics.decisions);
        let of = |job: u64| {
            decisions
                .iter()
                .rev()
                .find(|((j, _), _)| *j == job)
                .map(|(_, d)| d.clone())
        };
        if let (Some(w), Some(_)) = (of(wide), of(short)) {
            break w;
        }
        assert!(Instant::now() < deadline, "no decisions: {decisions:?}");
        std::thread::sleep(Duration::from_millis(300));
    };
    assert_eq!(sampling["phase"], "sampling", "{sampling}");
    let pilots: Vec<u32> = sampling["pilots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pilots.len(), 3, "{sampling}");

    // An `scontrol` that always fails: each action is tried 2 times,
    // reported and counted, and the applier goes on ticking.
    let metrics = free_port();
    let (mut failing, failing_out) = start_applier_until_three_actions(
        &slurm,
        &cluster,
        dir.path(),
        "failing",
        &[
            "--scontrol",
            "false",
            "--attempts",
            "2",
            "--metrics",
            &format!("127.0.0.1:{metrics}"),
        ],
    );
    let text = scrape(metrics);
    assert_exported(&text, &APPLY_METRICS);
    let failed = actions(&failing_out);
    assert!(
        failed
            .iter()
            .all(|a| a["done"] == false && a["attempts"] == 2 && a["error"].is_string()),
        "{failed:?}"
    );
    assert!(
        failing.try_wait().unwrap().is_none(),
        "a failing scontrol is not fatal"
    );
    failing.kill().unwrap();
    failing.wait().unwrap();
    assert!(
        metric_sum(&text, "jobcast_slurm_actions_total") >= 3.0,
        "{text}"
    );

    // A dry run prints what it would do, and Slurm's priorities stay its own.
    let (mut dry, dry_out) =
        start_applier_until_three_actions(&slurm, &cluster, dir.path(), "dry", &["--dry-run"]);
    dry.kill().unwrap();
    dry.wait().unwrap();
    let shown = actions(&dry_out);
    assert!(
        shown.iter().all(|a| a["done"] == false
            && a["command"]
                .as_str()
                .unwrap()
                .starts_with("scontrol update JobId=")),
        "{shown:?}"
    );
    assert!(
        slurm.tasks().values().all(|t| t.priority < SPARE),
        "a dry run changed nothing"
    );
    assert!(
        !dir.path().join("dry.json").exists(),
        "a dry run writes no state"
    );

    // The real applier: priorities follow the decisions.
    let state = dir.path().join("apply.json");
    let first_out = dir.path().join("apply-1.jsonl");
    let mut applier = start_applier(&slurm, &cluster.brokers(), &state, &first_out, &[]);
    let in_place = |tasks: &BTreeMap<(u64, u32), SlurmTask>| {
        (0..12).all(|i| {
            let task = &tasks[&(wide, i)];
            task.state == "PENDING"
                && if pilots.contains(&i) {
                    task.priority > SPARE
                } else {
                    task.priority == SPARE
                }
        }) && tasks[&(short, 0)].priority > SPARE
            && tasks[&(early, 0)].priority > SPARE
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !in_place(&slurm.tasks()) {
        assert!(
            Instant::now() < deadline,
            "priorities do not follow the decisions: {:?}",
            slurm.tasks()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Killed and started again: nothing older than what it had is done.
    // This time it sets walltimes: two minutes at least, far above these
    // tasks' P99 (times a margin of 3).
    applier.kill().unwrap();
    applier.wait().unwrap();

    // Its priorities outlive it; `--hand-back` gives every job it moved
    // back to Slurm's own order (held and released: neither held nor at
    // a priority of jobcast's now), and touches no other. It keeps, in
    // the applier's state, the jobs it is handing back.
    let out = Command::new(jobcast_bin())
        .args(["slurm", "apply", "--hand-back", "--state"])
        .arg(&state)
        .env("SLURM_CONF", slurm.conf())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let handed: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let mut jobs: Vec<u64> = handed
        .iter()
        .map(|a| a["job_id"].as_u64().unwrap())
        .collect();
    jobs.sort();
    assert_eq!(jobs, [early, wide, short], "{handed:?}");
    assert!(handed.iter().all(|a| a["done"] == true), "{handed:?}");
    let tasks = slurm.tasks();
    for job in [early, wide, short] {
        for ((_, index), task) in tasks.range((job, 0)..=(job, u32::MAX)) {
            assert!(
                task.state == "PENDING" && (1..SPARE).contains(&task.priority),
                "{job}_{index}: {task:?}"
            );
        }
    }
    assert_eq!(tasks[&(blocker, 0)].state, "RUNNING");

    let second_out = dir.path().join("apply-2.jsonl");
    let walltime = ["--walltime-quantile", "p99", "--walltime-min-minutes", "2"];
    let mut applier = start_applier(&slurm, &cluster.brokers(), &state, &second_out, &walltime);
    std::thread::sleep(Duration::from_secs(2));

    // The node frees: pilots first, then the rest once SLearn placed it.
    // Slurm's start times are whole seconds; the order tasks started in
    // is told by the polls that first saw each running.
    slurm.run("scancel", &[&blocker.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen_running: BTreeMap<u32, usize> = BTreeMap::new();
    let tasks = (0..)
        .find_map(|poll| {
            let tasks = slurm.tasks();
            for i in 0..12 {
                if tasks[&(wide, i)].state != "PENDING" {
                    seen_running.entry(i).or_insert(poll);
                }
            }
            let done = [wide, short, early].iter().all(|&job| {
                tasks
                    .iter()
                    .filter(|((j, _), _)| *j == job)
                    .all(|(_, t)| t.state == "COMPLETED")
            });
            assert!(Instant::now() < deadline, "jobs did not finish: {tasks:?}");
            std::thread::sleep(Duration::from_millis(100));
            done.then_some(tasks)
        })
        .unwrap();
    let last_pilot = pilots.iter().map(|p| seen_running[p]).max().unwrap();
    let first_other = (0..12)
        .filter(|i| !pilots.contains(i))
        .map(|i| seen_running[&i])
        .min()
        .unwrap();
    // No other task ran while a pilot waited (one may start in the same
    // pass as the last pilot, on CPUs the pilot left).
    assert!(
        last_pilot <= first_other,
        "pilots {pilots:?} seen running by poll {last_pilot}, another task at poll {first_other}: {seen_running:?}"
    );
    // Work conservation: the CPUs the pilots and the short jobs left went
    // to the array's other tasks while the pilots still ran, before SLearn
    // had placed the array.
    let pilots_ended = pilots.iter().map(|&p| tasks[&(wide, p)].end).max().unwrap();
    let other_started = (0..12)
        .filter(|i| !pilots.contains(i))
        .map(|i| tasks[&(wide, i)].start)
        .min()
        .unwrap();
    assert!(
        other_started < pilots_ended,
        "no other task took an idle CPU before the pilots ended at {pilots_ended}: {tasks:?}"
    );

    let first = actions(&first_out);
    let second = actions(&second_out);
    let mut had: BTreeMap<u64, u64> = BTreeMap::new();
    for action in &first {
        let (job, version) = (
            action["job_id"].as_u64().unwrap(),
            action["version"].as_u64().unwrap(),
        );
        let newest = had.entry(job).or_default();
        assert!(
            version >= *newest,
            "job {job}: v{version} after v{newest}: {first:?}"
        );
        *newest = version;
    }
    for action in &second {
        let (job, version) = (
            action["job_id"].as_u64().unwrap(),
            action["version"].as_u64().unwrap(),
        );
        // The same version again is fine (a queue's rank moved as tasks
        // ran); an older one would undo a newer decision.
        assert!(
            version >= had.get(&job).copied().unwrap_or(0),
            "restarted, job {job}'s v{version} after a newer one: {second:?} after {first:?}"
        );
        assert_eq!(action["done"], true, "{action}");
    }
    assert!(
        second
            .iter()
            .any(|a| a["job_id"] == wide && a["target"] == "job"),
        "the placed array was moved as a whole: {second:?}"
    );
    // Once placed, the array got its walltime, once; the thin job, placed
    // by no estimate, none; and no task was killed at its limit.
    let limits: Vec<&serde_json::Value> = second
        .iter()
        .filter(|a| a.get("time_limit_s").is_some())
        .collect();
    assert_eq!(limits.len(), 1, "{second:?}");
    assert_eq!(limits[0]["job_id"], wide, "{second:?}");
    assert_eq!(limits[0]["time_limit_s"], 120, "{second:?}");
    assert!(
        limits[0]["command"]
            .as_str()
            .unwrap()
            .ends_with("TimeLimit=2")
    );

    applier.terminate();
    watcher.terminate();
    assert_eq!(serve.metric("jobcast_events_dead_lettered_total"), 0.0);
    serve.terminate();
}

/// `jobcast bench slurm` on ten jobs it generates itself (no `--trace`:
/// `jobcast generate`'s default workload, its tasks scaled to 1–4 s, arrays
/// up to 12 wide) at load 1.5: both runs finish every job, jobcast's
/// decisions reach Slurm while jobs wait, and the report has every figure
/// the docs name, consistent with each other.
/// The live benches' workload in the tests: jobs of seconds, arriving
/// for half again the CPUs' load, watched every 0.3 s.
const SMALL_WORKLOAD: [&str; 12] = [
    "--seed",
    "3",
    "--load",
    "1.5",
    "--time-scale",
    "0.02",
    "--max-task-secs",
    "4",
    "--max-width",
    "12",
    "--interval-secs",
    "0.3",
];

/// A bench's JSON report, once it has succeeded.
fn bench_report(out: &std::process::Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    eprintln!("{report}");
    report
}

#[test]
fn bench_slurm_runs_a_workload_alone_and_with_jobcast_beside_the_simulator() {
    let slurm = Slurm::up();
    let out = Command::new(jobcast_bin())
        .args(["bench", "slurm", "--jobs", "10", "--json"])
        .args(SMALL_WORKLOAD)
        .env("SLURM_CONF", slurm.conf())
        .output()
        .expect("jobcast bench slurm runs");
    let report = bench_report(&out);
    assert_eq!(report["jobs"], 10, "{report}");
    assert_eq!(report["cpus"], 8, "{report}");
    let number = |key: &str| {
        report[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {report}"))
    };
    for key in [
        "baseline_avg_jct_s",
        "jobcast_avg_jct_s",
        "simulated_baseline_avg_jct_s",
        "simulated_jobcast_avg_jct_s",
        "simulated_baseline_p50_jct_s",
        "simulated_jobcast_p50_jct_s",
        "replayed_baseline_avg_jct_s",
        "replayed_jobcast_avg_jct_s",
    ] {
        assert!(number(key) >= 1.0, "{key}: {report}");
    }
    let replayed = number("replayed_baseline_avg_jct_s") / number("replayed_jobcast_avg_jct_s");
    assert!(
        (number("replayed_speedup") - replayed).abs() < 1e-9,
        "{report}"
    );
    // Slurm measures no task shorter than the sleep it ran.
    for key in ["baseline_task_excess_s", "jobcast_task_excess_s"] {
        assert!(number(key) >= 0.0, "{key}: {report}");
    }
    let ratio = number("baseline_avg_jct_s") / number("jobcast_avg_jct_s");
    assert!((number("speedup") - ratio).abs() < 1e-9, "{report}");
    let simulated = number("simulated_baseline_avg_jct_s") / number("simulated_jobcast_avg_jct_s");
    assert!(
        (number("simulated_speedup") - simulated).abs() < 1e-9,
        "{report}"
    );
    for key in [
        "killed_at_limit",
        "baseline_killed_at_limit",
        "jobcast_killed_at_limit",
    ] {
        assert_eq!(report[key], 0, "{key}: {report}");
    }
    assert_eq!(report["killed_jobs"], 0, "{report}");
    assert!(number("p50_decision_delay_s") >= 0.0, "{report}");
    // Some jobs waited for CPUs at load 1.5: the applier acted on them.
    assert!(number("applied_jobs") >= 1.0, "{report}");
    assert!(number("p50_apply_delay_s") >= 0.0, "{report}");
    for key in ["dispatch_gap_s", "jobcast_dispatch_gap_s"] {
        assert!(number(key) >= 0.0, "{key}: {report}");
    }
    assert!(number("simulated_oracle_speedup") > 0.0, "{report}");
    // Each job's row: its JCT in the three runs, and the queue jobcast's
    // first decision put it in; the rows average to the report's figures.
    let rows = report["per_job"].as_array().expect("per_job rows");
    assert_eq!(rows.len(), 10, "{report}");
    for row in rows {
        for key in [
            "baseline_jct_s",
            "jobcast_jct_s",
            "simulated_jct_s",
            "replayed_jct_s",
        ] {
            assert!(row[key].as_f64().is_some_and(|v| v >= 1.0), "{key}: {row}");
        }
        assert!(row["first_queue"].is_u64(), "{row}");
    }
    let mean = |key: &str| rows.iter().map(|r| r[key].as_f64().unwrap()).sum::<f64>() / 10.0;
    for (row, total) in [
        ("baseline_jct_s", "baseline_avg_jct_s"),
        ("jobcast_jct_s", "jobcast_avg_jct_s"),
        ("simulated_jct_s", "simulated_jobcast_avg_jct_s"),
        ("replayed_jct_s", "replayed_jobcast_avg_jct_s"),
    ] {
        assert!((mean(row) - number(total)).abs() < 1e-6, "{row}: {report}");
    }
    assert!(number("estimated_jobs") >= 1.0, "{report}");
    assert!(number("p50_error_pct") >= 0.0, "{report}");
    // jobcast started from the trace's history half, as the cluster's past.
    assert!(number("history_jobs") >= 1.0, "{report}");
    // Every job got an ETA on the node's CPUs, scored against Slurm's end.
    assert_eq!(report["eta_jobs"], 10, "{report}");
    assert!(
        number("p50_eta_error_pct") <= number("p90_eta_error_pct"),
        "{report}"
    );
    assert!(
        (0.0..=100.0).contains(&number("eta_within_interval_pct")),
        "{report}"
    );
}

/// Bad flags are refused by name: the scale and the load before Slurm is
/// asked anything, a task longer than the jobs' time limit once the
/// partition is known, a trace that is not there when it is opened.
#[test]
fn bench_slurm_refuses_bad_flags_by_name() {
    let slurm = Slurm::up();
    let cases = [
        ("--time-scale", "0", "--time-scale 0: must be positive"),
        ("--load", "0", "--load 0: must be positive"),
        (
            "--max-task-secs",
            "100000",
            "--max-task-secs 100000: longer than the 1440-minute time limit",
        ),
        ("--seed", "1", "none.jsonl: No such file"),
    ];
    for (flag, value, expected) in cases {
        let out = Command::new(jobcast_bin())
            .args([
                "bench",
                "slurm",
                "--trace",
                "none.jsonl",
                "--format",
                "jsonl",
            ])
            .args([flag, value])
            .env("SLURM_CONF", slurm.conf())
            .output()
            .unwrap();
        assert!(!out.status.success(), "{flag} {value}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{flag} {value}: {stderr}");
    }
}

/// `jobcast bench federation --json` of `jobs` of the small workload on
/// `east` and `west`, with `more` flags: its report.
fn bench_federation(east: &Slurm, west: &Slurm, jobs: usize, more: &[&str]) -> serde_json::Value {
    let cluster = |name: &str, slurm: &Slurm| format!("{name}={}", slurm.conf().display());
    let out = Command::new(jobcast_bin())
        .args(["bench", "federation", "--cluster"])
        .arg(cluster("east", east))
        .arg("--cluster")
        .arg(cluster("west", west))
        .args(["--jobs", &jobs.to_string(), "--json"])
        .args(more)
        .args(SMALL_WORKLOAD)
        .output()
        .expect("jobcast bench federation runs");
    bench_report(&out)
}

/// `jobcast bench federation` on two real clusters: one workload three
/// ways, every job ended and placed once per way, the random way's draw
/// reaching both clusters, jobcast deciding for every job, and a `slurm
/// apply` on each cluster moving jobs in its queue.
#[test]
fn bench_federation_runs_one_workload_three_ways_on_two_real_clusters() {
    let (east, west) = Slurm::federation();
    let report = bench_federation(&east, &west, 12, &[]);
    assert_eq!(report["jobs"], 12, "{report}");
    assert_eq!(report["jobcast_orders"], true, "{report}");
    assert!(
        report["jobcast_ordered_jobs"].as_u64().unwrap() > 0,
        "{report}"
    );
    // The clusters share east's slurmdbd: Slurm's own multi-cluster
    // submission chooses for the time-limit way.
    assert_eq!(report["time_limit_by"], "sbatch -M", "{report}");
    let number = |v: &serde_json::Value, key: &str| {
        v[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key} missing: {v}"))
    };
    for way in ["random", "time_limit", "jobcast"] {
        let avg = number(&report, &format!("{way}_avg_jct_s"));
        assert!(avg >= 1.0, "{way}: {report}");
        let row = &report["ways"][way];
        assert_eq!(number(row, "avg_jct_s"), avg, "{report}");
        let placed: f64 = ["east", "west"]
            .iter()
            .map(|c| number(&row["placed"], c))
            .sum();
        assert_eq!(placed, 12.0, "{way}: {report}");
    }
    for c in ["east", "west"] {
        assert!(
            number(&report["ways"]["random"]["placed"], c) > 0.0,
            "{report}"
        );
    }
    assert_eq!(number(&report, "jobcast_undecided"), 0.0, "{report}");
    // Every job, each way's cluster and JCT: the averages are theirs.
    let jobs = report["per_job"].as_array().unwrap();
    assert_eq!(jobs.len(), 12, "{report}");
    for way in ["random", "time_limit", "jobcast"] {
        let mean = jobs.iter().map(|j| number(&j["jct_s"], way)).sum::<f64>() / 12.0;
        let avg = number(&report, &format!("{way}_avg_jct_s"));
        assert!((mean - avg).abs() < 1e-6, "{way}: {mean} {avg}");
        assert!(
            jobs.iter().all(|j| j["cluster"][way].is_string()),
            "{report}"
        );
    }
    let ratio = number(&report, "time_limit_avg_jct_s") / number(&report, "jobcast_avg_jct_s");
    assert!(
        (number(&report, "jobcast_speedup_vs_time_limit") - ratio).abs() < 1e-9,
        "{report}"
    );
    // The model of the clusters: no job ends before its mean task does, and
    // a choice that knows every runtime does no worse than the random one.
    let floor = jobs
        .iter()
        .map(|j| number(j, "work_s") / number(j, "tasks"))
        .sum::<f64>()
        / 12.0;
    let model = &report["model"];
    for way in ["random", "time_limit", "known_runtimes"] {
        let avg = number(model, &format!("{way}_avg_jct_s"));
        assert!(avg >= floor - 1e-9, "{way}: {avg} below {floor}: {model}");
    }
    assert!(
        number(model, "known_runtimes_avg_jct_s") <= number(model, "random_avg_jct_s"),
        "{model}"
    );
    // `--model-only` plays the same jobs in the same model, submitting
    // nothing.
    let alone = bench_federation(&east, &west, 12, &["--model-only"]);
    assert_eq!(&alone["model"], model, "{alone}");
    assert_eq!(alone["jobs"], 12, "{alone}");
    assert!(alone.get("jobcast_avg_jct_s").is_none(), "{alone}");
}

/// Clusters that share no slurmdbd: the time-limit way asks each with
/// `sbatch --test-only` and submits to the earliest, every job placed;
/// with `--choice-only`, jobcast chooses the clusters and runs no
/// applier.
#[test]
fn bench_federation_asks_each_cluster_where_they_share_no_slurmdbd() {
    let (east, west) = Slurm::federation_apart();
    let report = bench_federation(&east, &west, 4, &["--choice-only"]);
    assert_eq!(report["time_limit_by"], "sbatch --test-only", "{report}");
    // jobcast chose the clusters and ordered nothing.
    assert_eq!(report["jobcast_orders"], false, "{report}");
    assert_eq!(report["jobcast_ordered_jobs"], 0, "{report}");
    let placed = &report["ways"]["time_limit"]["placed"];
    let sum = placed["east"].as_u64().unwrap() + placed["west"].as_u64().unwrap();
    assert_eq!(sum, 4, "{report}");
}

/// A shared slurmdbd's port that is not a number is refused by name,
/// before anything starts.
#[test]
fn slurm_sh_refuses_a_shared_slurmdbd_port_that_is_not_a_number() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(repo().join("scripts/slurm.sh"))
        .arg("up")
        .arg(dir.path())
        .env("JOBCAST_SLURM_DBD_PORT", "east")
        .output()
        .expect("bash runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("JOBCAST_SLURM_DBD_PORT=east: expected a port number"),
        "{err}"
    );
    assert!(
        std::fs::read_dir(dir.path()).unwrap().next().is_none(),
        "nothing written"
    );
}

/// Bad flags are refused by name before any cluster is touched.
#[test]
fn bench_federation_refuses_bad_flags_by_name() {
    let cases: [(&[&str], &str); 4] = [
        (&["--cluster", "east=/etc/hostname"], "two or more clusters"),
        (
            &[
                "--cluster",
                "east=/nonexistent/slurm.conf",
                "--cluster",
                "west=/nonexistent/w.conf",
            ],
            "--cluster east=/nonexistent/slurm.conf: no such file",
        ),
        (&["--cluster", "east"], "expected NAME=SLURM_CONF"),
        (
            &[
                "--cluster",
                "a=/x",
                "--cluster",
                "b=/y",
                "--limit-factor",
                "0.5",
            ],
            "--limit-factor 0.5: must be 1 or more",
        ),
    ];
    for (args, expected) in cases {
        let out = Command::new(jobcast_bin())
            .args(["bench", "federation"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was taken");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// "When will my job start?" on a real cluster: 20 jobs of the KTH-SP2
/// log after 1,000 the service learnt (those of a minute or less, live),
/// at load 2 on the node's 8 CPUs.
/// Every job that waited is answered by `squeue --start` and by jobcast's
/// first decision (conservative backfilling played forward on the `hpc`
/// policy's runtimes), both scored against the start Slurm gave it; the
/// report's figures are its rows'. jobcast's answer must be at least 3×
/// closer at P50 (the issue's goal).
#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn bench_slurm_starts_scores_jobcasts_start_estimates_against_squeue_start() {
    let slurm = Slurm::up();
    let log = shared_data("parallel-workloads-archive-swf").join("KTH-SP2-1996-2.1-cln.swf.gz");
    let out = Command::new(jobcast_bin())
        .args(["bench", "slurm-starts", "--trace", log.to_str().unwrap()])
        .args(["--jobs", "20", "--history", "1000", "--load", "2"])
        .args(["--max-runtime-secs", "60", "--json"])
        .env("SLURM_CONF", slurm.conf())
        .output()
        .expect("jobcast bench slurm-starts runs");
    let report = bench_report(&out);
    assert_eq!(
        (report["jobs"].as_u64(), report["cpus"].as_u64()),
        (Some(20), Some(8))
    );
    assert!(report["history_jobs"].as_u64().unwrap() > 500, "{report}");
    let rows = report["per_job"].as_array().expect("per_job rows");
    assert_eq!(rows.len(), 20, "{report}");
    let (mut jobcast, mut squeue) = (Vec::new(), Vec::new());
    for row in rows {
        let f = |key: &str| row[key].as_f64();
        let (Some(submitted), Some(started)) = (f("submitted_unix_s"), f("started_unix_s")) else {
            panic!("every job ran: {row}");
        };
        assert!(started >= submitted, "{row}");
        if let (Some(at), Some(answer)) = (f("squeue_start_unix_s"), f("jobcast_start_unix_s")) {
            // jobcast answered at the job's submission, and no earlier
            // than then; its late end is no earlier than its answer.
            assert!(answer >= submitted - 1.0, "{row}");
            assert!(f("jobcast_start_p90_unix_s").unwrap() >= answer, "{row}");
            jobcast.push((answer - started).abs());
            squeue.push((at - started).abs());
        }
    }
    let waited = jobcast.len();
    assert!(waited >= 5, "at load 2 most jobs wait: {report}");
    assert_eq!(report["waited"].as_u64(), Some(waited as u64), "{report}");
    let p50 = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        let rank = 0.5 * (v.len() - 1) as f64;
        let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
    };
    let number = |key: &str| {
        report[key]
            .as_f64()
            .unwrap_or_else(|| panic!("{key}: {report}"))
    };
    let (jobcast, squeue) = (p50(jobcast), p50(squeue));
    assert!(
        (number("jobcast_p50_error_s") - jobcast).abs() < 1e-6,
        "{report}"
    );
    assert!(
        (number("squeue_p50_error_s") - squeue).abs() < 1e-6,
        "{report}"
    );
    assert!(
        number("ratio") >= 3.0,
        "jobcast's start estimates are not 3x closer than squeue --start's: {report}"
    );
}
