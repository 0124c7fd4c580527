//! A real Slurm 22.05 cluster (single node, `scripts/slurm.sh`) in the
//! loop: `jobcast slurm watch` publishes its jobs as canonical events, and
//! `jobcast serve` holds every one of them.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, JobOutcome, TaskKind, decode};
use jobcast_ingest::kafka::Topics;
use jobcast_scheduler_feed::telemetry::SLURM_WATCH_METRICS;
use jobcast_tests::jobcast_bin;
use jobcast_tests::kafka::Cluster;
use jobcast_tests::serve::{Serve, free_port, metric_sum};
use jobcast_tests::slurm::Slurm;

const PARTITIONS: i32 = 2;

fn start_watcher(slurm: &Slurm, brokers: &str, state: &std::path::Path, metrics: u16) -> Child {
    Command::new(jobcast_bin())
        .args([
            "slurm",
            "watch",
            "--brokers",
            brokers,
            "--interval-secs",
            "0.5",
        ])
        .arg("--state")
        .arg(state)
        .arg("--metrics")
        .arg(format!("127.0.0.1:{metrics}"))
        .env("SLURM_CONF", slurm.conf())
        .env("JOBCAST_LOG", "info")
        .stdout(Stdio::null())
        .spawn()
        .expect("jobcast slurm watch starts")
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

/// Arrays (one sparse), a plain job, a failing one and one cancelled while
/// held, with the watcher killed (SIGKILL) mid-run and started again: every
/// job reaches the topic once, each task with one start (if it ran) and one
/// end, at the times Slurm gives them; the service applies them all, and
/// holds each job as Slurm ended it.
#[test]
fn a_real_clusters_jobs_reach_the_topic_once_across_a_watcher_kill() {
    let slurm = Slurm::up();
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("watch.json");
    let mut watcher = start_watcher(&slurm, &cluster.brokers(), &state, free_port());

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
    let plain = slurm.sbatch(&["-J", "plain", "--time=1", "-c", "2", "--wrap", "sleep 3"]);
    let failing = slurm.sbatch(&["-J", "failing", "--time=1", "--wrap", "sleep 1; exit 3"]);
    let held = slurm.sbatch(&["-J", "held", "--time=1", "--hold", "--wrap", "sleep 1"]);
    std::thread::sleep(Duration::from_secs(3));
    watcher.kill().unwrap();
    watcher.wait().unwrap();
    slurm.run("scancel", &[&held.to_string()]);
    std::thread::sleep(Duration::from_secs(1));
    let metrics = free_port();
    let mut watcher = start_watcher(&slurm, &cluster.brokers(), &state, metrics);

    let jobs = [array, sparse, plain, failing, held];
    let deadline = Instant::now() + Duration::from_secs(120);
    let by_job = loop {
        let by_job = events_by_job(&cluster, &topics.events);
        let ended = jobs
            .iter()
            .filter(|job| {
                by_job
                    .get(job)
                    .is_some_and(|events| events.iter().any(|e| matches!(e, Event::JobEnded(_))))
            })
            .count();
        if ended == jobs.len() {
            break by_job;
        }
        assert!(
            Instant::now() < deadline,
            "{ended} of 5 jobs ended: {by_job:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    // Its metrics, every one the alerts and docs name: every job
    // followed, no poll failed.
    let text = ureq::get(format!("http://127.0.0.1:{metrics}/metrics"))
        .call()
        .expect("the watcher serves its metrics")
        .body_mut()
        .read_to_string()
        .unwrap();
    for name in SLURM_WATCH_METRICS {
        assert!(
            text.contains(&format!("\n{name}")),
            "{name} not exported: {text}"
        );
    }
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
    let stopped = Command::new("kill")
        .args(["-TERM", &watcher.id().to_string()])
        .status()
        .unwrap();
    assert!(stopped.success());
    assert!(watcher.wait().unwrap().success(), "a clean stop on SIGTERM");

    // Slurm's own record of each task: (job, task) → (start, end, state).
    let squeue: serde_json::Value =
        serde_json::from_str(&slurm.run("squeue", &["--json"])).unwrap();
    let mut slurm_tasks: BTreeMap<(u64, u32), (u64, u64, String)> = BTreeMap::new();
    for record in squeue["jobs"].as_array().unwrap() {
        let array_id = record["array_job_id"].as_u64().unwrap();
        let job = if array_id != 0 {
            array_id
        } else {
            record["job_id"].as_u64().unwrap()
        };
        let index = record["array_task_id"].as_u64().unwrap_or(0) as u32;
        slurm_tasks.insert(
            (job, index),
            (
                record["start_time"].as_u64().unwrap(),
                record["end_time"].as_u64().unwrap(),
                record["job_state"].as_str().unwrap().to_owned(),
            ),
        );
    }

    let widths = [
        (array, 8, vec![0, 1, 2, 3, 4, 5, 6, 7]),
        (sparse, 3, vec![1, 3, 5]),
        (plain, 1, vec![0]),
        (failing, 1, vec![0]),
        (held, 1, vec![0]),
    ];
    for (job, width, indices) in widths {
        let events = &by_job[&job];
        let submitted: Vec<u32> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobSubmitted(j) => Some(j.num_tasks),
                _ => None,
            })
            .collect();
        assert_eq!(submitted, [width], "job {job}: {events:?}");
        for (task, array_index) in indices.iter().enumerate() {
            let (start, end, state) = &slurm_tasks[&(job, *array_index)];
            let of_task: Vec<(TaskKind, u64)> = events
                .iter()
                .filter_map(|e| match e {
                    Event::Task(t) if t.task_index == task as u32 => {
                        Some((t.kind, t.time_us / 1_000_000))
                    }
                    _ => None,
                })
                .collect();
            let expected = match state.as_str() {
                "COMPLETED" => vec![(TaskKind::Schedule, *start), (TaskKind::Finish, *end)],
                "FAILED" => vec![(TaskKind::Schedule, *start), (TaskKind::Fail, *end)],
                "CANCELLED" => vec![(TaskKind::Kill, *end)],
                other => panic!("job {job} task {task}: state {other}"),
            };
            assert_eq!(of_task, expected, "job {job} task {task} ({state})");
        }
        let outcomes: Vec<JobOutcome> = events
            .iter()
            .filter_map(|e| match e {
                Event::JobEnded(j) => Some(j.outcome),
                _ => None,
            })
            .collect();
        let expected = if job == failing {
            JobOutcome::Fail
        } else if job == held {
            JobOutcome::Kill
        } else {
            JobOutcome::Finish
        };
        assert_eq!(outcomes, [expected], "job {job}");
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
