//! `jobcast simulate --scheduler megha` end to end: Megha's federated
//! clusters, the centralised master and the sampler on one trace, with
//! and without jobcast's order and cluster choice.

use jobcast_tests::{jobcast, jobcast_ok, shared_data};
use serde_json::Value;

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Every configuration runs every task of a generated trace on a small,
/// crowded data centre; the GMs' stale views are refused by the LMs;
/// jobcast's order shortens the average completion.
#[test]
fn megha_configurations_on_a_generated_trace() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("g.jsonl");
    let trace = trace.to_str().unwrap();
    jobcast_ok(&[
        "generate", "--seed", "11", "--jobs", "600", "--output", trace,
    ]);
    let args = [
        "simulate",
        "--scheduler",
        "megha",
        "--trace",
        trace,
        "--format",
        "jsonl",
        "--workers",
        "8",
        "--lms",
        "2",
        "--gms",
        "2",
        "--json",
    ];
    let out = jobcast_ok(&args);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let c = &v["configurations"];
    let names = ["megha", "megha_jobcast", "centralised", "sampling"];
    let tasks = f(&c["megha"], "tasks");
    assert!(tasks > 1_000.0, "{c}");
    for name in names {
        let run = &c[name];
        assert_eq!(f(run, "tasks"), tasks, "{name}: every task runs");
        for key in [
            "allocation_p50_ms",
            "allocation_p99_ms",
            "avg_jct_s",
            "p50_jct_s",
        ] {
            assert!(f(run, key) > 0.0, "{name} {key}");
        }
        assert!(f(run, "allocation_p50_ms") <= f(run, "allocation_p99_ms"));
    }
    assert_eq!(
        (f(&c["centralised"], "lms"), f(&c["centralised"], "gms")),
        (1.0, 1.0)
    );
    assert_eq!(f(&c["centralised"], "repartitions"), 0.0);
    assert!(
        f(&c["megha"], "inconsistencies") > 0.0,
        "stale views are refused"
    );
    assert!(
        f(&c["megha"], "repartitions") > 0.0,
        "GMs borrow each other's partitions"
    );
    assert_eq!(f(&c["sampling"], "inconsistencies"), 0.0);
    assert!(
        f(&c["megha_jobcast"], "avg_jct_s") < f(&c["megha"], "avg_jct_s"),
        "{c}"
    );
    // The same seed, the same runs.
    assert_eq!(jobcast_ok(&args), out);

    // With the paper's four user queues: every queue served near its
    // share while it waits, by preempting the queues over theirs; the
    // sampler, which has no fairness, serves the worst one less.
    let mut fair = args.to_vec();
    fair.extend([
        "--queue-shares",
        "0.1,0.25,0.15,0.5",
        "--queue-gms",
        "0,1,1,0",
    ]);
    let v: Value = serde_json::from_str(&jobcast_ok(&fair)).unwrap();
    let c = &v["configurations"];
    let worst = |name: &str| {
        let queues = c[name]["share_attainment"].as_array().unwrap();
        assert_eq!(queues.len(), 4, "{name}");
        queues
            .iter()
            .filter_map(|q| q["attainment"].as_f64())
            .fold(f64::INFINITY, f64::min)
    };
    assert!(f(&c["megha"], "preemptions") > 0.0, "{c}");
    assert!(worst("megha") > 0.8, "{c}");
    assert!(worst("megha") > worst("sampling"), "{c}");
    assert_eq!(f(&c["sampling"], "preemptions"), 0.0);
}

#[test]
fn simulate_megha_refuses_a_data_centre_without_room_for_its_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("g.jsonl");
    let trace = trace.to_str().unwrap();
    jobcast_ok(&["generate", "--seed", "3", "--jobs", "50", "--output", trace]);
    let base = ["simulate", "--trace", trace, "--format", "jsonl"];
    for (extra, expected) in [
        (
            vec![
                "--scheduler",
                "megha",
                "--workers",
                "3",
                "--lms",
                "2",
                "--gms",
                "2",
            ],
            "--workers 3: fewer than one per partition (2 clusters × 2 GMs)",
        ),
        (
            vec!["--scheduler", "megha", "--arrival-speedup", "0.5"],
            "--arrival-speedup 0.5: must be 1 or more",
        ),
        (
            vec!["--scheduler", "megha", "--policy", "3sigma"],
            "cannot be used with",
        ),
        (vec!["--scheduler", "yarn"], "invalid value 'yarn'"),
    ] {
        let mut args = base.to_vec();
        args.extend(extra);
        let out = jobcast(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

/// The Google window on a crowded federation (20 workers of 64 cores in 5
/// clusters, 2 GMs, arrivals 30 times faster): jobcast's order and
/// cluster choice complete jobs at least 1.3 times sooner on average than
/// Megha's arrival order, as the issue asks.
#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn megha_with_jobcast_on_the_google_window() {
    let trace = shared_data("google-clusterdata-2011-2");
    let out = jobcast_ok(&[
        "simulate",
        "--scheduler",
        "megha",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "google2011",
        "--workers",
        "20",
        "--lms",
        "5",
        "--gms",
        "2",
        "--arrival-speedup",
        "30",
        "--json",
    ]);
    let v: Value = serde_json::from_str(&out).unwrap();
    let c = &v["configurations"];
    let speedup = f(&c["megha"], "avg_jct_s") / f(&c["megha_jobcast"], "avg_jct_s");
    assert!(speedup >= 1.3, "jobcast {speedup:.2}× Megha: {c}");
    assert!(
        f(&c["megha_jobcast"], "p50_jct_s") < f(&c["megha"], "p50_jct_s"),
        "{c}"
    );
    // Under this load the sampler's workers queue behind tasks that do not
    // fit: its median allocation is the worst.
    for name in ["megha", "megha_jobcast", "centralised"] {
        assert!(
            f(&c["sampling"], "allocation_p50_ms") > f(&c[name], "allocation_p50_ms"),
            "{name}: {c}"
        );
    }
}
