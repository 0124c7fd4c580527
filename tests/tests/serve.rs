//! `jobcast serve` as operators run it: a separate process on a Kafka
//! cluster (librdkafka's mock, hosted by this test), RocksDB on disk, the
//! HTTP API and metrics, SIGTERM and SIGKILL.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use jobcast_ingest::event::{Event, JobSubmitted, MAX_TASKS_PER_JOB, TaskEvent, TaskKind};
use jobcast_ingest::kafka::{Topics, event_key};
use jobcast_ingest::{Format, open};
use jobcast_scheduler_feed::http::DECISION_PAGE_BYTES;
use jobcast_storage::state::{StateStore, TASKS};
use jobcast_tests::kafka::{Cluster, dead_letters, decisions, messages, read_all};
use jobcast_tests::serve::{
    ASSIGNED, MOCK_SESSION, OWNS, SHORT_SESSION, Serve, assert_same_state, assert_shared_state,
    free_ports, logged_partitions, restartable, stored_state, wait_balanced,
};
use jobcast_tests::{excerpt_events, generated_trace, jobcast, jobcast_ok};

const PARTITIONS: i32 = 4;
const WAIT: Duration = Duration::from_secs(120);

/// (job id, version) → decision JSON, from a decisions topic.

#[test]
fn the_http_api_agrees_with_the_decisions_topic_and_metrics_count_errors() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let events = excerpt_events();
    let input = messages(&events);
    cluster.produce(&topics.events, &input);
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(&cluster.brokers(), &data.path().join("state"), &[]);
    serve.wait_consumed(input.len() as u64, WAIT);

    assert_eq!(serve.get("/healthz").0, 200);
    let (status, ready) = serve.get("/readyz");
    assert_eq!(status, 200, "{ready}");

    let published = decisions(&cluster.brokers(), &topics.decisions);
    let mut checked = 0;
    let mut with_eta = 0;
    let submitted: BTreeSet<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) => Some(j.job_id),
            _ => None,
        })
        .collect();
    for &job_id in &submitted {
        let (status, body) = serve.get(&format!("/jobs/{job_id}"));
        assert_eq!(status, 200, "job {job_id}: {body}");
        let job: serde_json::Value = serde_json::from_str(&body).unwrap();
        let versions: Vec<u64> = job["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d["version"].as_u64().unwrap())
            .collect();
        // From 1 on, rising; a refinement overtaken while it waited for
        // `engine.min_republish_ms` leaves a gap.
        assert_eq!(versions.first(), Some(&1), "job {job_id}");
        assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
        for d in job["decisions"].as_array().unwrap() {
            let key = (job_id, d["version"].as_u64().unwrap());
            assert_eq!(published.get(&key), Some(d), "job {job_id}");
            checked += 1;
        }
        // The record's ETA is its latest decision's (from the machines'
        // CPUs, which the excerpt's machine events report).
        let latest_eta = job["decisions"]
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find_map(|d| d.get("eta"));
        assert_eq!(
            job.get("eta").filter(|e| !e.is_null()),
            latest_eta,
            "job {job_id}"
        );
        if let Some(eta) = latest_eta {
            with_eta += 1;
            let at = |q: &str| eta[q].as_u64().unwrap();
            assert!(at("at_us") <= at("p10_us"), "{eta}");
            assert!(
                at("p10_us") <= at("p50_us") && at("p50_us") <= at("p90_us"),
                "{eta}"
            );
        }
    }
    assert!(checked >= submitted.len(), "every job has a decision");
    assert!(
        with_eta > submitted.len() / 2,
        "{with_eta} of {} jobs have an ETA",
        submitted.len()
    );
    // Finished jobs scored their first ETA.
    let scored = serve.metric("jobcast_eta_error_ratio_count");
    assert!(scored > 0.0);
    assert!(serve.metric("jobcast_eta_within_interval_total") <= scored);
    assert_eq!(serve.get("/jobs/123456789012").0, 404);
    assert_eq!(serve.get("/jobs/not-a-number").0, 400);
    // `GET /jobs` pages through the same jobs in job-id order, with their
    // durations as whole µs; `state` selects, and a bad query is a JSON 400.
    let list = |query: &str| -> Vec<serde_json::Value> {
        let (mut out, mut after) = (Vec::new(), None::<u64>);
        loop {
            let from = after.map_or(String::new(), |a| format!("&after={a}"));
            let (status, body) = serve.get(&format!("/jobs?limit=7{query}{from}"));
            assert_eq!(status, 200, "{body}");
            let page: serde_json::Value = serde_json::from_str(&body).unwrap();
            let jobs = page["jobs"].as_array().unwrap();
            assert!(jobs.len() <= 7);
            out.extend(jobs.iter().cloned());
            match page["next_after"].as_u64() {
                Some(next) => after = Some(next),
                None => return out,
            }
        }
    };
    let listed = list("");
    let ids: Vec<u64> = listed
        .iter()
        .map(|j| j["job_id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, submitted.iter().copied().collect::<Vec<_>>());
    assert!(listed.iter().all(|j| j.get("decisions").is_none()));
    let estimate = listed
        .iter()
        .find_map(|j| j["estimates"].get("slearn"))
        .expect("a job with an slearn estimate");
    assert!(estimate["mean_task_runtime_us"].is_u64(), "{estimate}");
    assert!(
        estimate["quantiles"]["size_us"]["p99"].is_u64(),
        "{estimate}"
    );
    let mut by_state = 0;
    for state in ["running", "finished", "failed", "killed", "lost", "expired"] {
        let jobs = list(&format!("&state={state}"));
        assert!(jobs.iter().all(|j| j["state"] == state), "{state}");
        by_state += jobs.len();
    }
    assert_eq!(by_state, listed.len());
    let (status, body) = serve.get("/jobs?state=sleeping");
    assert_eq!(status, 400);
    let error: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert!(
        error["error"].as_str().unwrap().contains("sleeping"),
        "{body}"
    );

    // Each policy's error statistics count the jobs the metrics count.
    let (status, body) = serve.get("/policies");
    assert_eq!(status, 200, "{body}");
    let policies: serde_json::Value = serde_json::from_str(&body).unwrap();
    for policy in ["slearn", "3sigma"] {
        let count = serve.metric(&format!(
            "jobcast_prediction_error_ratio_count{{policy=\"{policy}\"}}"
        ));
        assert!(count > 0.0, "no prediction errors recorded for {policy}");
        let stats = &policies[policy];
        assert_eq!(stats["jobs"].as_f64(), Some(count), "{policy}: {stats}");
        let in_buckets: u64 = stats["abs_error_pct_buckets"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b["jobs"].as_u64().unwrap())
            .sum();
        assert_eq!(in_buckets as f64, count);
        let mean = stats["mean_abs_error_pct"].as_f64().unwrap();
        let sum = serve.metric(&format!(
            "jobcast_prediction_error_ratio_sum{{policy=\"{policy}\"}}"
        ));
        // /policies gives percentages, the metric ratios.
        assert!(
            (mean / 100.0 * count - sum).abs() <= 1e-6 * sum.max(1.0),
            "{mean} % × {count} vs {sum}"
        );
    }
    serve.terminate();
}

/// DAG jobs in the live service, SLearn-DAG deciding: every decision with
/// an estimate carries the job's stages in its stage order, adding up to
/// the estimate; a sampled DAG's pilots are tasks of its root stages, and
/// it is decided again, with its stages, once they end; `GET /jobs/{id}`
/// serves the same decisions.
#[test]
fn a_dag_jobs_decisions_carry_its_stages_and_follow_its_root_pilots() {
    let (_dir, trace) = generated_trace(
        "--seed 1 --jobs 300 --families 5 --thin-fraction 0 --dag-fraction 1 --min-width 10 \
         --max-width 60",
    );
    let events: Vec<Event> = open(Format::Jsonl, &trace)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    // Each DAG job's stage ids, and the task indices of its root stages.
    let mut dags: BTreeMap<u64, (Vec<u64>, BTreeSet<u64>)> = BTreeMap::new();
    for e in &events {
        if let Event::JobSubmitted(j) = e
            && let Some(stages) = &j.stages
        {
            let (mut ids, mut roots, mut first) = (Vec::new(), BTreeSet::new(), 0u64);
            for s in stages {
                ids.push(u64::from(s.id));
                let tasks = first..first + u64::from(s.num_tasks);
                if s.parents.is_empty() {
                    roots.extend(tasks);
                }
                first += u64::from(s.num_tasks);
            }
            dags.insert(j.job_id, (ids, roots));
        }
    }
    assert_eq!(dags.len(), 300, "every job is a DAG");
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let input = messages(&events);
    cluster.produce(&topics.events, &input);
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(
        &cluster.brokers(),
        &data.path().join("state"),
        &["--policy", "slearn-dag"],
    );
    serve.wait_consumed(input.len() as u64, WAIT);
    let published = decisions(&cluster.brokers(), &topics.decisions);
    let (mut estimated, mut resampled) = (0, 0);
    for ((job_id, _), d) in &published {
        assert_eq!(d["policy"], "slearn-dag", "{d}");
        let (ids, roots) = &dags[job_id];
        let Some(estimate) = d.get("estimate").filter(|e| !e.is_null()) else {
            assert!(d.get("stages").is_none(), "{d}");
            for pilot in d["pilots"].as_array().unwrap() {
                assert!(roots.contains(&pilot.as_u64().unwrap()), "{d}");
            }
            continue;
        };
        let stages = d["stages"]
            .as_array()
            .unwrap_or_else(|| panic!("job {job_id}: {d}"));
        let listed: Vec<u64> = stages.iter().map(|s| s["id"].as_u64().unwrap()).collect();
        assert_eq!(&listed, ids, "job {job_id}: {d}");
        // Whole µs each: the sum is within a µs a stage of the size.
        let sum: u64 = stages.iter().map(|s| s["size_us"].as_u64().unwrap()).sum();
        let size = estimate["size_us"].as_u64().unwrap();
        assert!(sum.abs_diff(size) <= stages.len() as u64, "{d}");
        estimated += 1;
        if d["version"].as_u64() > Some(1) && estimate["source"]["kind"] == "pilots" {
            resampled += 1;
        }
    }
    assert!(estimated > 250, "{estimated} decisions with an estimate");
    assert!(resampled > 250, "{resampled} DAGs placed by their pilots");
    let (&(job_id, _), _) = published
        .iter()
        .find(|(_, d)| d.get("stages").is_some())
        .unwrap();
    let (status, body) = serve.get(&format!("/jobs/{job_id}"));
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    for d in job["decisions"].as_array().unwrap() {
        let key = (job_id, d["version"].as_u64().unwrap());
        assert_eq!(published.get(&key), Some(d), "job {job_id}");
    }
    serve.terminate();
}

/// `events` on a mock cluster of one partition, served by `jobcast serve`
/// with `args` until every one is stored; the state directory lives as
/// long as the returned guard.
/// The trace `write` writes, read back and served with `settings`: its
/// events, and what [`served`] gives.
fn served_trace(
    write: fn(&std::path::Path) -> usize,
    settings: &[&str],
) -> (Vec<Event>, (Topics, Cluster, tempfile::TempDir, Serve)) {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    let lines = write(&trace);
    let events: Vec<Event> = open(Format::Jsonl, &trace)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(events.len(), lines);
    let args: Vec<&str> = settings.iter().flat_map(|s| ["--set", s]).collect();
    let served = served(&events, &args);
    (events, served)
}

fn served(events: &[Event], args: &[&str]) -> (Topics, Cluster, tempfile::TempDir, Serve) {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 1);
    let input = messages(events);
    cluster.produce(&topics.events, &input);
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(&cluster.brokers(), &data.path().join("state"), args);
    serve.wait_stored_offsets(input.len() as u64, WAIT);
    (topics, cluster, data, serve)
}

/// A task placed on a preemptible VM, on the mock cluster: its risk score
/// carries a checkpoint schedule, the same on the risk topic and at
/// `GET /machines/{id}/risk`; with `checkpoint_cost_minutes` 0, none.
#[test]
fn a_risk_score_carries_its_checkpoint_schedule_unless_none_is_configured() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("risk.jsonl");
    jobcast_tests::risk_trace(&trace);
    let events: Vec<Event> = open(Format::Jsonl, &trace)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let published = |extra: &[&str]| {
        let (topics, cluster, _data, serve) = served(&events, extra);
        let risks = cluster.read_all(&topics.risk, 1);
        assert_eq!(risks.len(), 1);
        let risk: serde_json::Value = serde_json::from_slice(&risks[0].payload).unwrap();
        let (status, body) = serve.get("/machines/1/risk");
        assert_eq!(status, 200, "{body}");
        let served: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(served["score"], risk["score"]);
        serve.terminate();
        risk
    };
    let risk = published(&[]);
    let schedule = &risk["score"]["checkpoints"];
    let work: f64 = schedule["intervals_h"]
        .as_array()
        .unwrap_or_else(|| panic!("no schedule in {risk}"))
        .iter()
        .map(|i| i.as_f64().unwrap())
        .sum();
    let runtime = risk["score"]["runtime"]["mean_h"].as_f64().unwrap();
    assert!((work - runtime).abs() <= 5.0 / 60.0, "{risk}");
    let plain = published(&["--set", "engine.risk.checkpoint_cost_minutes=0"]);
    assert!(plain["score"]["checkpoints"].is_null(), "{plain}");
    assert_eq!(
        plain["score"]["this_vm"], risk["score"]["this_vm"],
        "the rest of the score is the same"
    );
}

/// CloudCoaster's controller on the mock cluster: long tasks crowd the
/// cluster, transient VMs join and one leaves; the capacity topic carries
/// each decision once, in order, with its version in a header, and
/// `GET /capacity` serves the last.
#[test]
fn capacity_decisions_grow_hold_and_release_on_the_capacity_topic_and_at_get_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("capacity.jsonl");
    let lines = jobcast_tests::capacity_trace(&trace);
    let events: Vec<Event> = open(Format::Jsonl, &trace)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    assert_eq!(events.len(), lines);
    // The capacity topic's messages, and GET /capacity's status and body.
    let run = |args: &[&str]| {
        let (topics, cluster, _data, serve) = served(&events, args);
        let published = cluster.read_all(&topics.capacity, 1);
        let (status, body) = serve.get("/capacity");
        let (_, metrics) = serve.get("/metrics");
        serve.terminate();
        (published, status, body, metrics)
    };
    let mut args = Vec::new();
    for setting in jobcast_tests::CAPACITY_SETTINGS {
        args.extend(["--set", setting]);
    }
    let (published, status, body, metrics) = run(&args);
    for (i, message) in published.iter().enumerate() {
        assert_eq!(message.key, b"capacity");
        let version = message.headers.get("jobcast.version");
        assert_eq!(version, Some(&(i + 1).to_string()));
    }
    let payloads: Vec<Vec<u8>> = published.into_iter().map(|m| m.payload).collect();
    let last = jobcast_tests::check_capacity_decisions(&payloads);
    assert_eq!(status, 200, "{body}");
    let served: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(served, last);
    assert!(
        metrics.contains(r#"jobcast_capacity_decisions_total{action="shrink"} 1"#),
        "{metrics}"
    );

    // Off (the default), nothing is decided and the route says why.
    let (published, status, body, _) = run(&[]);
    assert!(published.is_empty());
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("engine.capacity.enabled"), "{body}");
}

/// An HPC site of 4 processors under conservative backfilling, served
/// with `engine.starts`: a job submitted while another holds the machine
/// is decided with a start estimate played forward on the predictions
/// (the running job's 100 s median, given the 10 s it has run: about
/// 300 s). It waits with no event of its
/// own; at 350 s, past the running job's median, an event of its
/// partition finds its start moved (`engine.starts.refresh_ms`, a minute)
/// and its decision goes out again, same version, with the later start.
/// The decisions topic carries both; `GET /jobs/{id}` serves the later,
/// and the metric counts the one refresh.
#[test]
fn a_pending_jobs_start_estimate_is_served_at_get_jobs_and_refreshed_while_it_waits() {
    const S: u64 = 1_000_000;
    let submit = |job: u64, t: u64, cpus: u32| {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"cfd","scheduling_class":0,"priority":0,"cpu_request":{cpus},"mem_request":0.1,"num_tasks":1,"time_limit_us":{}}}"#,
            1000 * S
        )
    };
    let task = |job: u64, t: u64, kind: &str| {
        format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":0,"kind":"{kind}"}}"#
        )
    };
    let lines = [
        submit(1, S, 4),
        task(1, S + 1, "schedule"),
        task(1, 101 * S + 1, "finish"),
        format!(
            r#"{{"v":1,"type":"job_ended","time_us":{},"job_id":1,"outcome":"finish"}}"#,
            101 * S + 2
        ),
        submit(2, 200 * S, 4),
        task(2, 200 * S, "schedule"),
        submit(3, 210 * S, 4),
        // Wider than the site: it never starts, and moves no other start.
        submit(4, 350 * S, 8),
    ];
    let events: Vec<Event> = lines
        .iter()
        .map(|l| jobcast_ingest::decode(l.as_bytes()).unwrap())
        .collect();
    let (topics, cluster, _data, serve) = served(
        &events,
        &[
            "--policy",
            "hpc",
            "--set",
            "engine.starts.backfill=conservative",
            "--set",
            "engine.starts.cpus=4",
            "--set",
            "engine.starts.refresh_ms=60000",
        ],
    );
    let on_topic: Vec<serde_json::Value> = read_all(&cluster.brokers(), &topics.decisions, 1)
        .into_iter()
        .map(|m| serde_json::from_slice::<serde_json::Value>(&m.payload).unwrap())
        .filter(|d| d["job_id"] == 3)
        .collect();
    let [first, again] = on_topic.as_slice() else {
        panic!("not two decisions of job 3 on the topic: {on_topic:?}");
    };
    let start = &first["start"];
    assert_eq!(start["at_us"], 210 * S, "{first}");
    let p50 = start["p50_us"].as_u64().unwrap();
    assert!((295 * S..=330 * S).contains(&p50), "{first}");
    assert!(start["p90_us"].as_u64().unwrap() > p50, "{first}");
    let later = &again["start"];
    assert_eq!(later["at_us"], 350 * S, "{again}");
    assert!(later["p50_us"].as_u64().unwrap() > 350 * S, "{again}");
    assert_eq!(again["version"], first["version"], "{again}");
    let (status, body) = serve.get("/jobs/3");
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        job["decisions"].as_array().map(Vec::as_slice),
        Some(&[again.clone()][..]),
        "{job}"
    );
    let version = first["version"].as_u64().unwrap();
    let published = decisions(&cluster.brokers(), &topics.decisions);
    assert_eq!(published.get(&(3, version)), Some(again));
    assert_eq!(serve.metric("jobcast_decisions_start_refreshed_total"), 1.0);
    serve.terminate();
}

/// A deadline job on a hibernating spot VM, on the mock cluster: its plan,
/// waits, resume and migration go out on the decisions topic under the
/// `deadline` kind, beside its runtime decisions (kind `decision`), and
/// `GET /jobs/{id}` serves its plan and recoveries; the metric counts them
/// by action.
#[test]
fn deadline_decisions_plan_wait_resume_and_migrate_on_the_decisions_topic() {
    let (events, (topics, cluster, _data, serve)) = served_trace(
        jobcast_tests::deadline_trace,
        &jobcast_tests::DEADLINE_SETTINGS,
    );
    let published = cluster.read_all(&topics.decisions, 1);
    let kind = |m: &jobcast_tests::kafka::Record| m.headers.get("jobcast.kind").cloned();
    assert!(
        published
            .iter()
            .any(|m| kind(m).as_deref() == Some("decision")),
        "the runtime decisions go on"
    );
    let deadline: Vec<Vec<u8>> = published
        .iter()
        .filter(|m| kind(m).as_deref() == Some("deadline"))
        .inspect(|m| {
            assert_eq!(m.key, b"20");
            assert_eq!(
                m.headers.get("jobcast.job_id").map(String::as_str),
                Some("20")
            );
        })
        .map(|m| m.payload.clone())
        .collect();
    let last = jobcast_tests::check_deadline_decisions(&deadline);
    let (status, body) = serve.get("/jobs/20");
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    let stored = &job["deadline"];
    assert_eq!(stored["version"], 5, "{job}");
    assert_eq!(stored["recoveries"][0], last["recovery"], "{job}");
    let first: serde_json::Value = serde_json::from_slice(&deadline[0]).unwrap();
    assert_eq!(stored["plan"], first["plan"], "{job}");
    let (_, metrics) = serve.get("/metrics");
    assert!(
        metrics.contains(r#"jobcast_deadline_decisions_total{action="wait"} 2"#),
        "{metrics}"
    );
    serve.terminate();

    // Off (the default): no deadline decision, and no plan at the job.
    let (topics, cluster, _data, serve) =
        served(&events, &["--set", "engine.max_future_skew_secs=0"]);
    let published = cluster.read_all(&topics.decisions, 1);
    assert!(
        published
            .iter()
            .all(|m| kind(m).as_deref() == Some("decision"))
    );
    let (status, body) = serve.get("/jobs/20");
    assert_eq!(status, 200, "{body}");
    assert!(!body.contains("\"deadline\""), "{body}");
    serve.terminate();
}

/// A deadline job's elastic fleet on the mock cluster: its plan, a drain
/// and a grow go out on the decisions topic under the `deadline` kind,
/// `GET /jobs/{id}` serves the fleet as it stands, and the metric counts
/// them by action.
#[test]
fn elastic_fleet_decisions_drain_and_grow_on_the_decisions_topic() {
    let (_, (topics, cluster, _data, serve)) = served_trace(
        jobcast_tests::elastic_trace,
        &jobcast_tests::ELASTIC_SETTINGS,
    );
    let deadline: Vec<Vec<u8>> = cluster
        .read_all(&topics.decisions, 1)
        .into_iter()
        .filter(|m| m.headers.get("jobcast.kind").map(String::as_str) == Some("deadline"))
        .map(|m| m.payload)
        .collect();
    let (status, body) = serve.get("/jobs/20");
    assert_eq!(status, 200, "{body}");
    let job: serde_json::Value = serde_json::from_str(&body).unwrap();
    jobcast_tests::check_elastic_decisions(&deadline, &job);
    let (_, metrics) = serve.get("/metrics");
    for (action, n) in [("drain", 1), ("grow", 2)] {
        let line = format!(r#"jobcast_deadline_decisions_total{{action="{action}"}} {n}"#);
        assert!(metrics.contains(&line), "{line} not in {metrics}");
    }
    serve.terminate();
}

/// Jobs and machines of two clusters, on the mock cluster: `GET /clusters`
/// lists what each holds, a job's record names its cluster, and the
/// `jobcast_cluster_*` gauges carry the cluster as a label.
#[test]
fn clusters_are_listed_at_get_clusters_and_labelled_in_metrics() {
    let lines = [
        r#"{"v":1,"type":"machine","time_us":1,"machine_id":1,"kind":"add","cpus":8,"cluster":"east"}"#,
        r#"{"v":1,"type":"machine","time_us":1,"machine_id":2,"kind":"add","cpus":4,"cluster":"west"}"#,
        r#"{"v":1,"type":"machine","time_us":1,"machine_id":3,"kind":"add","cpus":4,"cluster":"west"}"#,
        r#"{"v":1,"type":"job_submitted","time_us":2,"job_id":1,"num_tasks":1,"cluster":"east"}"#,
        r#"{"v":1,"type":"job_submitted","time_us":2,"job_id":2,"num_tasks":1,"cluster":"west"}"#,
        r#"{"v":1,"type":"job_submitted","time_us":3,"job_id":3,"num_tasks":1}"#,
    ];
    let events: Vec<Event> = lines
        .iter()
        .map(|l| jobcast_ingest::decode(l.as_bytes()).unwrap())
        .collect();
    let (_topics, _cluster, _data, serve) = served(&events, &[]);
    let (status, body) = serve.get("/clusters");
    assert_eq!(status, 200, "{body}");
    let clusters: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        clusters,
        serde_json::json!([
            {"cluster": "", "machines_up": 0, "cpus": 0.0, "live_jobs": 1},
            {"cluster": "east", "machines_up": 1, "cpus": 8.0, "live_jobs": 1},
            {"cluster": "west", "machines_up": 2, "cpus": 8.0, "live_jobs": 1}
        ])
    );
    let (_, job) = serve.get("/jobs/2");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["cluster"], "west", "{job}");
    let (_, metrics) = serve.get("/metrics");
    for line in [
        r#"jobcast_cluster_machines_up{cluster="west"} 2"#,
        r#"jobcast_cluster_cpus{cluster="east"} 8"#,
        r#"jobcast_cluster_live_jobs{cluster="east"} 1"#,
    ] {
        assert!(metrics.contains(line), "{line} not in {metrics}");
    }
    serve.terminate();
}

/// The first index from `from` on where event time moves on: a cut there
/// puts every event before it ahead of every event after it in the merged
/// order.
fn next_instant(events: &[Event], from: usize) -> usize {
    (from.max(1)..events.len())
        .find(|&i| events[i].time_us() > events[i - 1].time_us())
        .expect("the events span more than one instant")
}

#[test]
fn sigkill_and_sigterm_mid_stream_end_in_the_same_state_as_one_run() {
    let topics = Topics {
        decisions: "whole.decisions".into(),
        ..Topics::default()
    };
    let cluster = Cluster::new(&topics, PARTITIONS);
    cluster.mock.create_topic("killed.decisions", 1, 1).unwrap();
    // The input is written in three parts, so that each interrupted run
    // has input of its own to be interrupted in, however fast the one
    // before it consumed. Each cut is where event time moves on: every
    // event of a part comes before every event of the next in the merged
    // order, as when the whole input is there from the start.
    let events = excerpt_events();
    assert!(events.windows(2).all(|w| w[0].time_us() <= w[1].time_us()));
    let (a, b) = (
        next_instant(&events, events.len() * 2 / 5),
        next_instant(&events, events.len() * 7 / 10),
    );
    let parts = [&events[..a], &events[a..b], &events[b..]].map(messages);
    let total = events.len() as u64;

    let interrupted = tempfile::tempdir().unwrap();
    let state = interrupted.path().join("state");
    let flags = restartable("killed.decisions", "killed", MOCK_SESSION);
    // Each run commits more; the committed count survives restarts.
    cluster.produce(&topics.events, &parts[0]);
    let mut serve = Serve::start(&cluster.brokers(), &state, &flags);
    serve.wait_consumed(total / 4, WAIT);
    serve.kill();
    cluster.produce(&topics.events, &parts[1]);
    let mut serve = Serve::start(&cluster.brokers(), &state, &flags);
    serve.wait_consumed(1, WAIT);
    serve.terminate();
    cluster.produce(&topics.events, &parts[2]);
    let mut serve = Serve::start(&cluster.brokers(), &state, &flags);
    serve.wait_consumed(1, WAIT);
    serve.kill();
    let mut serve = Serve::start(&cluster.brokers(), &state, &flags);
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();

    let whole = tempfile::tempdir().unwrap();
    let whole_state = whole.path().join("state");
    let mut serve = Serve::start(
        &cluster.brokers(),
        &whole_state,
        &["--decisions-topic", "whole.decisions", "--group", "whole"],
    );
    serve.wait_consumed(total, WAIT);
    serve.terminate();

    assert_same_state(&state, &whole_state, &topics.events);
    assert_eq!(
        decisions(&cluster.brokers(), "killed.decisions"),
        decisions(&cluster.brokers(), "whole.decisions")
    );
}

/// A member stopped (SIGSTOP: alive to the OS, silent to the group) while
/// the other holds its partitions' outputs for a takeover: past the
/// small budget (`consumer.takeover_buffer_bytes`, 64 KiB) the other
/// reads no more input, saying so, instead of dropping them; once the
/// group gives up on the stopped member (its 3 s session), the other
/// takes its partitions over and publishes all it held: every decision
/// of one instance alone.
#[test]
fn a_full_takeover_buffer_waits_for_the_owners_and_the_takeover_loses_nothing() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for (topic, partitions) in [("held.events", PARTITIONS), ("held.decisions", 1)] {
        cluster
            .mock
            .create_topic(topic, partitions, 1)
            .expect("topic created");
    }
    let input = messages(&excerpt_events());
    cluster.produce(&topics.events, &input);
    let dir = tempfile::tempdir().unwrap();
    let mut single = Serve::start(&cluster.brokers(), &dir.path().join("single"), &[]);
    single.wait_stored_offsets(input.len() as u64, WAIT);
    single.terminate();

    // The pair's input comes in two halves (by event time): the second
    // once one of them is stopped.
    let (first, second) = input.split_at(input.len() / 2);
    cluster.produce("held.events", first);
    let config = dir.path().join("jobcast.toml");
    std::fs::write(&config, "[consumer]\ntakeover_buffer_bytes = 65536\n").unwrap();
    let mut flags = vec![
        "--config",
        config.to_str().unwrap(),
        "--group",
        "held",
        "--events-topic",
        "held.events",
        "--decisions-topic",
        "held.decisions",
    ];
    flags.extend(MOCK_SESSION);
    let states = [dir.path().join("held-0"), dir.path().join("held-1")];
    let mut pair: Vec<Serve> = states
        .iter()
        .map(|state| Serve::start(&cluster.brokers(), state, &flags))
        .collect();
    for serve in &mut pair {
        serve.wait_stored_offsets(first.len() as u64, WAIT);
    }
    wait_balanced(&pair.iter().collect::<Vec<_>>(), PARTITIONS, WAIT);
    let stopped = pair.pop().unwrap();
    let mut running = pair.pop().unwrap();
    let signal = |name: &str| {
        let sent = std::process::Command::new("kill")
            .args([name, &stopped.pid().to_string()])
            .status()
            .expect("kill runs");
        assert!(sent.success());
    };
    signal("-STOP");
    cluster.produce("held.events", second);
    let deadline = Instant::now() + WAIT;
    while running.metric("jobcast_takeover_buffer_waits_total") < 1.0 {
        assert!(
            Instant::now() < deadline,
            "the takeover buffer never filled"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    running.wait_stored_offsets(input.len() as u64, WAIT);
    assert_eq!(running.owned_partitions().len(), PARTITIONS as usize);
    assert_eq!(running.metric("jobcast_takeover_buffer_full"), 0.0);
    let log = running.terminate();
    assert!(
        log.iter()
            .any(|l| l.contains("the takeover buffer is full")),
        "the wait is logged"
    );
    signal("-CONT");
    stopped.kill();
    // Every (job, version) of the instance alone: nothing lost. Their
    // ETAs may differ, with the queue the second half found on arrival.
    let published = |topic: &str| -> Vec<(u64, u64)> {
        decisions(&cluster.brokers(), topic).into_keys().collect()
    };
    assert_eq!(published("held.decisions"), published(&topics.decisions));
}

#[test]
fn two_instances_in_one_group_publish_and_store_what_one_does() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for topic in ["pair.decisions", "pair.dead-letter"] {
        cluster
            .mock
            .create_topic(topic, 1, 1)
            .expect("topic created");
    }
    cluster.produce(&topics.events, &messages(&excerpt_events()));
    let total = excerpt_events().len() as u64;
    let dir = tempfile::tempdir().unwrap();

    let single_state = dir.path().join("single");
    let mut single = Serve::start(&cluster.brokers(), &single_state, &[]);
    single.wait_stored_offsets(total, WAIT);
    single.terminate();

    // The pair starts together, so the group divides the partitions before
    // much is applied; whoever owned a partition first hands it over.
    let states = [dir.path().join("pair-0"), dir.path().join("pair-1")];
    // Short sessions: the mock's coordinator holds each rebalance for the
    // session less a second, and a member stopped in the middle of one
    // (the first to stop starts one for the other) may wait for it.
    let mut flags = vec![
        "--group",
        "pair",
        "--decisions-topic",
        "pair.decisions",
        "--dead-letter-topic",
        "pair.dead-letter",
    ];
    flags.extend(SHORT_SESSION);
    let mut pair: Vec<Serve> = states
        .iter()
        .map(|state| Serve::start(&cluster.brokers(), state, &flags))
        .collect();
    for serve in &mut pair {
        serve.wait_stored_offsets(total, WAIT);
    }
    wait_balanced(&pair.iter().collect::<Vec<_>>(), PARTITIONS, WAIT);
    for serve in pair {
        serve.terminate();
    }

    assert_eq!(
        decisions(&cluster.brokers(), "pair.decisions"),
        decisions(&cluster.brokers(), &topics.decisions)
    );
    assert_eq!(
        dead_letters(&cluster.brokers(), "pair.dead-letter"),
        dead_letters(&cluster.brokers(), &topics.dead_letter)
    );
    assert_shared_state(&single_state, &[&states[0], &states[1]]);
}

#[test]
fn a_request_for_a_job_another_instance_holds_is_redirected_to_it() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    for topic in ["where.decisions", "where.dead-letter"] {
        cluster.mock.create_topic(topic, 1, 1).unwrap();
    }
    let events = excerpt_events();
    cluster.produce(&topics.events, &messages(&events));
    let jobs: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(job) => Some(job.job_id),
            _ => None,
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    // Each advertises its URL, so the port is chosen first; both want the
    // token, which a request sent on to a peer carries.
    let urls: Vec<String> = free_ports(2)
        .into_iter()
        .map(|port| format!("http://127.0.0.1:{port}"))
        .collect();
    let mut pair: Vec<Serve> = urls
        .iter()
        .enumerate()
        .map(|(i, url)| {
            let address = format!("http.address={}", url.trim_start_matches("http://"));
            let advertised = format!("http.advertised_url={url}");
            let mut flags = vec![
                "--group",
                "where",
                "--decisions-topic",
                "where.decisions",
                "--dead-letter-topic",
                "where.dead-letter",
                "--set",
                &address,
                "--set",
                &advertised,
            ];
            flags.extend(SHORT_SESSION);
            let state = dir.path().join(format!("where-{i}"));
            Serve::start_with_token(&cluster.brokers(), &state, &flags, "where-token")
        })
        .collect();
    for (serve, url) in pair.iter_mut().zip(&urls) {
        assert_eq!(&serve.http, url, "it listens where it advertises");
        serve.wait_stored_offsets(events.len() as u64, WAIT);
    }
    wait_balanced(&pair.iter().collect::<Vec<_>>(), PARTITIONS, WAIT);
    // The owners directory is refreshed every 2 s, by each instance on its
    // own: once each has read a commit of every partition naming its
    // owner, nothing is in doubt.
    let deadline = Instant::now() + WAIT;
    while pair
        .iter()
        .any(|serve| serve.get("/jobs/18446744073709551615").0 != 404)
    {
        assert!(Instant::now() < deadline, "the owners are never all known");
        std::thread::sleep(Duration::from_millis(200));
    }

    // Every job is held by one instance: the other sends the client there,
    // to the same path and query.
    let mut held = [0, 0];
    for &job in &jobs {
        let path = format!("/jobs/{job}?decisions_limit=2");
        let answers: Vec<_> = pair
            .iter()
            .map(|serve| serve.get_headers(&path, &[], &["location"]))
            .collect();
        let holder = match (answers[0].0, answers[1].0) {
            (200, 307) => 0,
            (307, 200) => 1,
            other => panic!(
                "job {job}: answers {other:?}: {answers:?}; {:?}",
                pair.iter().map(|s| s.get("/readyz").1).collect::<Vec<_>>()
            ),
        };
        held[holder] += 1;
        let location = answers[1 - holder].1[0].clone();
        assert_eq!(
            location,
            Some(format!("{}{path}", urls[holder])),
            "job {job}"
        );
        assert!(answers[holder].2.contains(&format!("\"job_id\":{job}")));
    }
    assert!(held[0] > 0 && held[1] > 0, "jobs held: {held:?}");

    // A request marked as sent by a peer is answered from the store alone,
    // saying which partitions that covers.
    let (status, headers, _) = pair[0].get_headers(
        "/jobs/18446744073709551615",
        &[("x-jobcast-local", "1")],
        &["x-jobcast-partitions"],
    );
    let owned: Vec<String> = pair[0]
        .owned_partitions()
        .iter()
        .map(i64::to_string)
        .collect();
    assert_eq!((status, headers[0].clone()), (404, Some(owned.join(","))));
    // No instance holds it: 404 once both were asked.
    let (status, body) = pair[0].get("/jobs/18446744073709551615");
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("every partition"), "{body}");
    assert!(pair[0].metric("jobcast_http_elsewhere_total") >= 2.0);

    // With the other instance gone and its partitions not yet moved, a job
    // it held is neither here nor known to be absent: 503, try again.
    let theirs = jobs
        .iter()
        .find(|&&job| pair[1].get(&format!("/jobs/{job}")).0 == 200)
        .copied()
        .expect("a job the second instance holds");
    let second = pair.pop().unwrap();
    second.kill();
    let (status, headers, body) =
        pair[0].get_headers(&format!("/jobs/{theirs}"), &[], &["retry-after"]);
    assert_eq!((status, headers[0].as_deref()), (503, Some("1")), "{body}");
    assert!(body.contains("no owner that answers"), "{body}");
    pair.pop().unwrap().terminate();
}

/// SIGTERM, the signal itself, to one of two instances: it finishes and
/// commits the batch in hand, leaves the group (its log says so before it
/// exits 0), and the other instance then owns every partition.
#[test]
fn sigterm_stops_an_instance_that_leaves_the_group_to_the_other() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let input = messages(&excerpt_events()[..2_000]);
    cluster.produce(&topics.events, &input);
    let dir = tempfile::tempdir().unwrap();
    let a = Serve::start_logging(
        &cluster.brokers(),
        &dir.path().join("a"),
        &MOCK_SESSION,
        "info",
    );
    let b = Serve::start(&cluster.brokers(), &dir.path().join("b"), &MOCK_SESSION);
    let deadline = Instant::now() + WAIT;
    while a.owned_partitions().is_empty() || b.owned_partitions().is_empty() {
        assert!(
            Instant::now() < deadline,
            "the two never shared the partitions"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = a.terminate();
    assert!(log.iter().any(|l| l.contains("left the group")), "{log:#?}");
    assert!(
        !log.iter().any(|l| l.contains("still assigned")),
        "{log:#?}"
    );
    assert!(log.iter().any(|l| l.contains("stopped")), "{log:#?}");
    while b.owned_partitions().len() != PARTITIONS as usize {
        assert!(
            Instant::now() < deadline,
            "the other never took every partition"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    b.terminate();
}

#[test]
fn a_running_instance_writes_a_consistent_backup_on_request() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let input = messages(&excerpt_events());
    cluster.produce(&topics.events, &input);
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let backups = dir.path().join("backups");
    let backup_dir = format!("storage.backup_dir={}", backups.display());
    let mut serve = Serve::start(
        &cluster.brokers(),
        &state,
        &["--set", &backup_dir, "--set", "storage.backup_keep=1"],
    );
    serve.wait_consumed(input.len() as u64, WAIT);

    let backup = || {
        let out = jobcast_ok(&["admin", "backup", "--url", &serve.http]);
        let written = out
            .trim()
            .strip_prefix("backup written to ")
            .unwrap_or_else(|| panic!("{out}"))
            .to_owned();
        assert!(written.starts_with(backups.to_str().unwrap()), "{out}");
        written
    };
    let first = backup();
    // Backups are named by the second: the next one in another.
    std::thread::sleep(Duration::from_millis(1_100));
    let written = backup();
    assert_ne!(first, written);
    let kept: Vec<_> = std::fs::read_dir(&backups).unwrap().collect();
    assert_eq!(kept.len(), 1, "storage.backup_keep=1 keeps the newest only");
    assert!(!Path::new(&first).exists());
    assert_eq!(serve.metric("jobcast_backups_total"), 2.0);
    serve.terminate();
    let written = written.as_str();
    // Nothing came after the backup: restored, it is the store as it was.
    let restored = dir.path().join("restored");
    jobcast_ok(&[
        "admin",
        "restore",
        "--from",
        written,
        "--data-dir",
        restored.to_str().unwrap(),
    ]);
    assert_same_state(&state, &restored, &topics.events);

    // Without a backup directory, the endpoint says how to turn it on.
    let other = dir.path().join("other");
    let serve = Serve::start(&cluster.brokers(), &other, &["--group", "other"]);
    let refused = jobcast(&["admin", "backup", "--url", &serve.http]);
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        stderr.contains("404") && stderr.contains("storage.backup_dir"),
        "{stderr}"
    );
    serve.terminate();

    // An instance with a token: asked without it, 401; with it, written.
    let guarded = dir.path().join("guarded");
    let token = "backup-test-token-0123";
    let guarded_backups = format!(
        "storage.backup_dir={}",
        dir.path().join("guarded-backups").display()
    );
    let serve = Serve::start_with_token(
        &cluster.brokers(),
        &guarded,
        &["--group", "guarded", "--set", &guarded_backups],
        token,
    );
    let refused = jobcast(&["admin", "backup", "--url", &serve.http]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("401"),
        "{stderr}"
    );
    let out = jobcast_ok(&["admin", "backup", "--url", &serve.http, "--token", token]);
    assert!(out.starts_with("backup written to "), "{out}");
    serve.terminate();

    // Backups on a filesystem with less room than the store needs (a
    // 1 MiB tmpfs): refused before anything is written.
    let small = dir.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let mounted = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&small)
        .status()
        .expect("mount runs");
    assert!(
        mounted.success(),
        "mounting a tmpfs needs root (tests run as root)"
    );
    let small_dir = format!("storage.backup_dir={}", small.display());
    let serve = Serve::start(
        &cluster.brokers(),
        &dir.path().join("cramped"),
        &["--group", "cramped", "--set", &small_dir],
    );
    let refused = jobcast(&["admin", "backup", "--url", &serve.http]);
    serve.terminate();
    let listed = std::fs::read_dir(&small).unwrap().count();
    std::process::Command::new("umount")
        .arg(&small)
        .status()
        .expect("umount runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("507") && stderr.contains("MiB free"),
        "{stderr}"
    );
    assert_eq!(listed, 0, "nothing written");
}

/// Fifty clients at once ask for the record of a 2^20-task job whose
/// pilots all failed and were replaced, each more than
/// `engine.min_republish_ms` after the one before, so that each
/// replacement went out (1,001 decisions of 1,000 pilots each, 8 MB):
/// each gets a page (at most 256 KiB of decisions) or a 503
/// within the request timeout, reads run a few at a time off the runtime,
/// and the service's peak memory grows by what its read threads need, not
/// by the history's size times the clients.
#[test]
fn fifty_concurrent_requests_for_a_wide_jobs_record_are_bounded_in_memory_and_time() {
    const JOB: u64 = 1;
    const CLIENTS: usize = 50;
    // Measured: 78–110 MiB (8 read threads warming up), then 4–18 MiB; one
    // loaded CI run saw 44 MiB and 44 MiB.
    const MAX_WARM_UP_MIB: u64 = 192;
    const MAX_GROWTH_MIB: u64 = 32;
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 1);
    let wide = Event::JobSubmitted(JobSubmitted {
        user: "u".into(),
        job_name: "wide".into(),
        logical_name: "wide".into(),
        cpu_request: 0.1,
        mem_request: 0.1,
        ..JobSubmitted::new(JOB, 1_000_000, MAX_TASKS_PER_JOB)
    });
    cluster.produce(&topics.events, &messages(&[wide]));
    let data = tempfile::tempdir().unwrap();
    let mut serve = Serve::start(&cluster.brokers(), &data.path().join("state"), &[]);
    serve.wait_consumed(1, WAIT);
    let first = &decisions(&cluster.brokers(), &topics.decisions)[&(JOB, 1)];
    let pilots: Vec<u32> = first["pilots"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(pilots.len(), 1000, "pilots are capped at max_pilots");
    // Each pilot starts and fails, a second after the one before: each
    // failure republishes the list.
    let mut failures = Vec::new();
    for (i, &task_index) in pilots.iter().enumerate() {
        let at = 2_000_000 + 1_000_000 * i as u64;
        for (time_us, kind) in [(at, TaskKind::Schedule), (at + 1, TaskKind::Fail)] {
            failures.push(Event::Task(TaskEvent {
                time_us,
                job_id: JOB,
                task_index,
                kind,
                machine_id: None,
                stage: None,
            }));
        }
    }
    cluster.produce(&topics.events, &messages(&failures));
    serve.wait_stored_offsets(1 + failures.len() as u64, WAIT);

    // The whole history, a page at a time.
    let page = |query: &str| -> serde_json::Value {
        let (status, body) = serve.get(&format!("/jobs/{JOB}?{query}"));
        assert_eq!(status, 200, "{body}");
        serde_json::from_str(&body).unwrap()
    };
    let (mut versions, mut pages, mut from) = (Vec::new(), 0, Some(0));
    while let Some(at) = from {
        let job = page(&format!("decisions_from={at}&decisions_limit=1000"));
        let decisions = job["decisions"].as_array().unwrap();
        let bytes: usize = decisions.iter().map(|d| d.to_string().len()).sum();
        assert!(
            bytes <= DECISION_PAGE_BYTES + 10_000,
            "a page of {bytes} bytes"
        );
        versions.extend(decisions.iter().map(|d| d["version"].as_u64().unwrap()));
        from = job["decisions_next"].as_u64().map(|v| v as u32);
        pages += 1;
    }
    assert_eq!(versions, (1..=1001).collect::<Vec<u64>>());
    assert!(pages > 1, "8 MB of decisions in one page");
    assert_eq!(
        page("decisions_limit=10")["decisions"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
    // A limit of 0 still moves on: one decision, and the next version.
    let one = page("decisions_limit=0");
    assert_eq!(one["decisions"].as_array().unwrap().len(), 1);
    assert_eq!(one["decisions_next"], 2);

    // Every client asks for the largest page at once.
    let burst = || -> Vec<(u16, Duration)> {
        std::thread::scope(|scope| {
            let clients: Vec<_> = (0..CLIENTS)
                .map(|_| {
                    scope.spawn(|| {
                        let started = Instant::now();
                        let (status, _) = serve.get(&format!("/jobs/{JOB}?decisions_limit=1000"));
                        (status, started.elapsed())
                    })
                })
                .collect();
            clients.into_iter().map(|c| c.join().unwrap()).collect()
        })
    };
    // The first burst starts the read threads, each with its own
    // allocator heap (about 11 MiB apiece measured); later ones reuse them.
    serve.reset_peak_rss();
    let before_kib = serve.peak_rss_kib();
    burst();
    let warm_up_mib = serve.peak_rss_kib().saturating_sub(before_kib) / 1024;
    serve.reset_peak_rss();
    let before_kib = serve.peak_rss_kib();
    let answers = burst();
    let growth_mib = serve.peak_rss_kib().saturating_sub(before_kib) / 1024;
    let slowest = answers.iter().map(|&(_, took)| took).max().unwrap();
    let answered = answers.iter().filter(|&&(status, _)| status == 200).count();
    eprintln!(
        "{CLIENTS} clients: {answered} answered 200; slowest {slowest:?}; peak RSS grew {warm_up_mib} MiB in the first burst, {growth_mib} MiB in the second"
    );
    // Every client is answered, none turned away: the slots queue them
    // within the request timeout (how fast is a benchmark's figure, not
    // this test's).
    assert_eq!(answered, CLIENTS, "{answers:?}");
    // Which burst starts the read threads depends on how the two cores
    // schedule them (a loaded machine may start only some in the first):
    // the bound is on both together.
    assert!(
        warm_up_mib + growth_mib < MAX_WARM_UP_MIB + MAX_GROWTH_MIB,
        "peak RSS grew {warm_up_mib} MiB under the first {CLIENTS} requests and {growth_mib} MiB under {CLIENTS} more"
    );
    assert_eq!(serve.get("/healthz").0, 200);
    serve.terminate();
}

/// SIGTERM while a start applies the log after its latest snapshot: the
/// instance stops at its next look (every 10,000 messages) instead of
/// finishing the restore, writes no stop snapshot (its engine holds only
/// a prefix of the state), and changes no stored record; the next start
/// restores the whole state.
#[test]
fn sigterm_during_the_restore_stops_it_without_a_snapshot_and_the_next_start_restores_all() {
    // Enough partitions that the mock cluster keeps all of each.
    const PARTITIONS: i32 = 16;
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, PARTITIONS);
    let brokers = cluster.brokers();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("generated.jsonl");
    let trace_arg = trace.to_str().unwrap();
    jobcast_ok(&["generate", "--seed", "5", "--jobs", "6000", "-o", trace_arg]);
    let replayed: serde_json::Value = serde_json::from_str(&jobcast_ok(&[
        "replay",
        "--trace",
        trace_arg,
        "--format",
        "jsonl",
        "--topic",
        &topics.events,
        "--brokers",
        &brokers,
        "--json",
    ]))
    .unwrap();
    let total = replayed["delivered"].as_u64().unwrap();
    assert_eq!(
        cluster.low_watermarks(&topics.events, PARTITIONS),
        vec![0; PARTITIONS as usize],
        "the mock cluster dropped the start of some partition: use more partitions"
    );
    let state = dir.path().join("state");

    // A first run that leaves the whole input in the log, no snapshot.
    // A short session: each start waits for the one before it to leave.
    let mut no_snapshots = SHORT_SESSION.to_vec();
    no_snapshots.extend([
        "--set",
        "storage.snapshot_every_events=1000000000",
        "--set",
        "storage.snapshot_on_stop=false",
    ]);
    let mut serve = Serve::start(&brokers, &state, &no_snapshots);
    serve.wait_stored_offsets(total, WAIT);
    serve.terminate();
    let whole = stored_state(&state);
    let snapshots = || {
        StateStore::open_read_only(&state)
            .unwrap()
            .snapshot_chain()
            .unwrap()
            .len()
    };
    assert_eq!(snapshots(), 0);

    let mut serve = Serve::start_logging(&brokers, &state, &SHORT_SESSION, "info");
    serve.wait_logged("restoring the predictor state", 0, WAIT);
    let signalled = Instant::now();
    let log = serve.terminate();
    let stopped_in = signalled.elapsed();
    let said = |what: &str| log.iter().any(|l| l.contains(what));
    assert!(
        said("stop asked for during the restore"),
        "{total} events restored before SIGTERM was seen: {log:#?}"
    );
    assert!(!said("predictor state restored"), "{log:#?}");
    assert_eq!(snapshots(), 0, "a snapshot of a half-restored engine");
    assert_eq!(stored_state(&state), whole);

    let mut serve = Serve::start_logging(&brokers, &state, &SHORT_SESSION, "info");
    let (_, line) = serve.wait_logged("predictor state restored", 0, WAIT);
    eprintln!(
        "{total} events in the log; stopped {stopped_in:?} after SIGTERM mid-restore; a whole restore: {line}"
    );
    assert!(line.contains(&format!("events={total}")), "{line}");
    serve.terminate();
    assert_eq!(snapshots(), 1, "the stop snapshot");
    assert_eq!(stored_state(&state), whole);
}

/// An instance restarted owning, from its first assignment, a partition
/// its partner stored before they were both killed restores from a
/// snapshot taken before jobs of that partition ended: its log ends them,
/// and it must store their tasks whole, though their events came before
/// the snapshot, while the partner stored the partition. (The partner,
/// once restarted, gives the partition up and deletes its copy of those
/// jobs, live in its store, which never saw their end: no other store
/// keeps them.)
///
/// The second part of the input is written while the instance runs, so
/// the order it applies it in is not a whole run's (`source/partition_merge.rs`),
/// nor are the estimates it learns; the tasks' records are facts of their
/// own job's events, which one partition orders, and must be a whole
/// run's.
#[test]
fn a_restart_owning_a_partition_its_partner_held_stores_the_tasks_of_the_jobs_its_log_ended() {
    let topics = Topics {
        decisions: "whole.decisions".into(),
        ..Topics::default()
    };
    let cluster = Cluster::new(&topics, PARTITIONS);
    cluster.mock.create_topic("pair.decisions", 1, 1).unwrap();
    // Cut where event time moves on, so that the first part is applied
    // whole before anything of the second.
    let events = excerpt_events();
    let cut = next_instant(&events, events.len() / 3);
    let end = next_instant(&events, cut + events.len() / 6);
    let (first, second) = (&events[..cut], &events[cut..end]);
    let total = end as u64;
    cluster.produce(&topics.events, &messages(first));

    let dir = tempfile::tempdir().unwrap();
    let (a_state, b_state) = (dir.path().join("a"), dir.path().join("b"));
    // Each takes a snapshot once the first part is applied, and none
    // after it.
    let snapshot = format!("storage.snapshot_every_events={cut}");
    let mut flags = restartable("pair.decisions", "pair", SHORT_SESSION).to_vec();
    flags.extend(["--set", &snapshot]);
    let brokers = cluster.brokers();
    let mut b = Serve::start(&brokers, &b_state, &flags);
    let mut a = Serve::start_logging(&brokers, &a_state, &flags, "info");
    for serve in [&mut a, &mut b] {
        serve.wait_stored_offsets(cut as u64, WAIT);
    }
    wait_balanced(&[&a, &b], PARTITIONS, WAIT);
    a.wait_logged("snapshot taken", 0, WAIT);
    let b_owned = b.owned_partitions();

    // The partner dies having applied none of the second part; the other
    // applies all of it and dies before the group (after the partner's
    // 6-second session, then a hold of the rebalance) gives it the
    // partner's partitions.
    b.kill();
    let killed_at = a.log().len();
    cluster.produce(&topics.events, &messages(second));
    a.wait_stored_offsets(total, WAIT);
    let log = a.kill();
    assert!(
        !log[killed_at..].iter().any(|l| l.contains(OWNS)),
        "the instance took its partner's partitions over before it was killed: \
         it applied the second part too slowly for this test"
    );
    // The jobs this is about: those of the partner's partitions with task
    // events in the first part and their end in the second.
    let partition_of: std::collections::BTreeMap<Vec<u8>, i32> = cluster
        .read_all(&topics.events, PARTITIONS)
        .into_iter()
        .map(|r| (r.key, r.partition))
        .collect();
    let in_partner =
        |e: &Event| b_owned.contains(&i64::from(partition_of[event_key(e).as_bytes()]));
    let with_tasks: BTreeSet<u64> = first
        .iter()
        .filter(|e| matches!(e, Event::Task(_)))
        .filter_map(Event::job_id)
        .collect();
    let ended: BTreeSet<u64> = second
        .iter()
        .filter(|e| matches!(e, Event::JobEnded(_)) && in_partner(e))
        .filter_map(Event::job_id)
        .filter(|job| with_tasks.contains(job))
        .collect();
    assert!(
        !ended.is_empty(),
        "no job of {b_owned:?} has tasks before the cut and its end after"
    );

    // Both sessions over, the restarted instance is given every partition
    // at once: it restores owning the partner's.
    std::thread::sleep(Duration::from_secs(8));
    let mut a = Serve::start_logging(&brokers, &a_state, &flags, "info");
    a.wait_stored_offsets(total, WAIT);
    let (_, assigned) = a.wait_logged(ASSIGNED, 0, WAIT);
    let assigned = logged_partitions(&assigned);
    assert!(
        b_owned.iter().all(|p| assigned.contains(p)),
        "the restarted instance was given {assigned:?} at first, not all of {b_owned:?}"
    );
    a.kill();

    let whole_state = dir.path().join("whole");
    let mut whole = Serve::start(
        &brokers,
        &whole_state,
        &["--decisions-topic", "whole.decisions", "--group", "whole"],
    );
    whole.wait_stored_offsets(total, WAIT);
    whole.terminate();
    let tasks_of = |path: &Path| -> Vec<(Vec<u8>, Vec<u8>)> {
        let job = |key: &[u8]| u64::from_be_bytes(key[..8].try_into().unwrap());
        StateStore::open_read_only(path)
            .unwrap()
            .dump(TASKS)
            .unwrap()
            .into_iter()
            .filter(|(key, _)| ended.contains(&job(key)))
            .collect()
    };
    let expected = tasks_of(&whole_state);
    assert!(
        !expected.is_empty(),
        "those jobs' tasks are not stored at all"
    );
    let stored = tasks_of(&a_state);
    assert!(
        stored == expected,
        "the restarted instance holds {} of the {} task records of the {} jobs its log ended",
        stored.len(),
        expected.len(),
        ended.len()
    );
}

/// `GET /` lists the routes; any other path answers a JSON 404 that names
/// it, and the route meant when it has a trailing slash too many;
/// `/metrics` has `jobcast_build_info` and the process's own figures.
#[test]
fn the_index_lists_the_routes_unknown_paths_get_json_errors_and_metrics_follow_prometheus() {
    let topics = Topics::default();
    let cluster = Cluster::new(&topics, 1);
    let data = tempfile::tempdir().unwrap();
    let serve = Serve::start(&cluster.brokers(), &data.path().join("state"), &[]);
    let json = |path: &str| -> (u16, serde_json::Value) {
        let (status, body) = serve.get(path);
        (
            status,
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body:?}")),
        )
    };
    let (status, index) = json("/");
    assert_eq!(status, 200);
    assert!(index["routes"]["GET /jobs/{id}"].is_string(), "{index}");
    let (status, slash) = json("/policies/");
    assert_eq!(status, 404);
    assert!(
        slash["error"]
            .as_str()
            .unwrap()
            .contains("without the trailing slash: GET /policies"),
        "{slash}"
    );
    let (status, unknown) = json("/no/such/thing");
    assert_eq!(status, 404);
    assert!(
        unknown["error"]
            .as_str()
            .unwrap()
            .contains("GET /no/such/thing"),
        "{unknown}"
    );
    // The build and the process, as every Prometheus client exports them.
    let (_, metrics) = serve.get("/metrics");
    assert!(
        metrics.contains("jobcast_build_info{version=\"")
            && metrics.contains("process_resident_memory_bytes ")
            && metrics.contains("process_cpu_seconds_total "),
        "{metrics}"
    );
    serve.terminate();
}

/// A broker address nothing listens on is said at once, naming the
/// brokers and with librdkafka's reason, and `/readyz` gives that reason.
#[test]
fn a_wrong_broker_is_named_at_once_with_librdkafkas_reason() {
    let nobody = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let brokers = nobody.local_addr().unwrap().to_string();
    drop(nobody);
    let data = tempfile::tempdir().unwrap();
    let serve = Serve::start(&brokers, &data.path().join("state"), &[]);
    let started = Instant::now();
    let said = loop {
        if let Some(line) = serve
            .log()
            .into_iter()
            .find(|l| l.contains("cannot reach the Kafka brokers"))
        {
            break line;
        }
        assert!(
            started.elapsed() < Duration::from_secs(8),
            "not said within 8 s: {:?}",
            serve.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        said.contains(&brokers) && said.contains("Connection refused"),
        "{said}"
    );
    let (status, body) = serve.get("/readyz");
    assert_eq!(status, 503);
    let ready: serde_json::Value = serde_json::from_str(&body).unwrap();
    let reason = ready["reason"].as_str().unwrap();
    assert!(
        reason.contains("do not answer") && reason.contains("Connection refused"),
        "{reason}"
    );
    serve.terminate();
}
