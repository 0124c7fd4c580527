//! `jobcast bench transient` end to end: CloudCoaster's transient short
//! partition beside Eagle on the static cluster, in the simulator, with
//! jobcast's job classes and the oracle's, transient servers preempted by
//! the measured GCE lifetimes.

use jobcast_tests::{jobcast, jobcast_ok, shared_data};
use serde_json::Value;

fn lifetimes() -> String {
    shared_data("google-preemptible-vm-lifetimes-2019")
        .join("data.json.gz")
        .to_str()
        .unwrap()
        .to_owned()
}

fn bench(args: &[&str]) -> (String, Value) {
    let mut all = vec!["bench", "transient", "--json"];
    all.extend(args);
    let out = jobcast_ok(&all);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    (out, v)
}

fn f(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("no {key} in {v}"))
}

/// Every run finishes every job; Eagle has no transient server; CloudCoaster
/// grows its partition within the budget, loses work to preemptions and
/// still finishes everything; the headline figures are what the runs say;
/// the same flags give the same bytes.
#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn cloudcoaster_beside_eagle_on_bursty_generated_jobs_with_measured_preemptions() {
    let lifetimes = lifetimes();
    let args = [
        "--generate-jobs",
        "6000",
        "--servers",
        "400",
        "--load",
        "1",
        "--lifetimes",
        &lifetimes,
    ];
    let (out, v) = bench(&args);
    let runs = v["runs"].as_array().unwrap();
    let names: Vec<(&str, &str)> = runs
        .iter()
        .map(|r| {
            (
                r["scheduler"].as_str().unwrap(),
                r["classes"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            ("eagle", "jobcast"),
            ("cloudcoaster", "jobcast"),
            ("eagle", "oracle"),
            ("cloudcoaster", "oracle")
        ]
    );
    for r in runs {
        assert_eq!(r["unfinished"], 0, "{r}");
        assert!(f(&r["short_delay"], "tasks") > 1000.0, "{r}");
    }
    for eagle in [&runs[0], &runs[2]] {
        assert_eq!(f(eagle, "grown"), 0.0);
        assert_eq!(f(eagle, "avg_transient_servers"), 0.0);
        assert!(eagle["cost_saved_pct"].is_null());
    }
    // K = ⌊3⌋ · 8 · 0.5 = 12 transient servers at most.
    for coaster in [&runs[1], &runs[3]] {
        assert!(f(coaster, "grown") > 0.0, "{coaster}");
        assert!(f(coaster, "max_transient_servers") <= 12.0, "{coaster}");
        assert!(f(coaster, "max_long_load_ratio") > 0.95, "{coaster}");
    }
    assert!(f(&v, "preemptions") > 0.0, "{out}");
    assert_eq!(f(&v, "preemptions"), f(&runs[1], "preemptions"));
    let delay = |r: &Value| f(&r["short_delay"], "mean_s");
    assert_eq!(f(&v, "short_queueing_delay_s"), delay(&runs[1]));
    assert_eq!(f(&v, "baseline_short_queueing_delay_s"), delay(&runs[0]));
    let speedup = f(&v, "queueing_delay_speedup");
    assert!((speedup - delay(&runs[0]) / delay(&runs[1])).abs() < 1e-9);
    let oracle = f(&v, "oracle_queueing_delay_speedup");
    assert!((oracle - delay(&runs[2]) / delay(&runs[3])).abs() < 1e-9);
    let cost = f(&v, "cost_saved_pct");
    assert!((0.0..=100.0).contains(&cost), "{out}");
    // Measured: 2.31× (oracle 2.61×), 9.1 % saved: transient servers help
    // in the bursts.
    assert!(speedup > 1.5 && oracle > 1.5, "{out}");
    // The same bytes again, and the four runs' delays drawn.
    let dir = tempfile::tempdir().unwrap();
    let plots = dir.path().join("plots");
    let mut again = args.to_vec();
    again.extend(["--plots", plots.to_str().unwrap()]);
    assert_eq!(bench(&again).0, out);
    let svg = std::fs::read_to_string(plots.join("short_delay_cdf.svg")).unwrap();
    assert!(svg.contains("cloudcoaster, oracle") && svg.contains("eagle, jobcast"));
}

/// The shared Google window on a cluster it loads to 1 at 100 servers,
/// two of them short-only: long tasks crowd it and transient servers come.
#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn cloudcoaster_on_the_google_window() {
    let trace = shared_data("google-clusterdata-2011-2");
    let lifetimes = lifetimes();
    let (out, v) = bench(&[
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "google2011",
        "--servers",
        "100",
        "--lifetimes",
        &lifetimes,
    ]);
    assert_eq!(f(&v, "jobs"), 3054.0, "{out}");
    assert_eq!(f(&v, "short_servers"), 2.0, "{out}");
    let runs = v["runs"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["unfinished"] == 0), "{out}");
    assert!(f(&runs[3], "grown") > 0.0, "{out}");
    // jobcast's classes against the truth: some of its 3054 jobs misplaced.
    let wrong = f(&runs[1], "short_as_long") + f(&runs[1], "long_as_short");
    assert!(wrong > 0.0 && wrong < 400.0, "{out}");
}

#[test]
fn bad_partitions_are_named_by_their_flag() {
    let out = jobcast(&[
        "bench",
        "transient",
        "--generate-jobs",
        "10",
        "--servers",
        "10",
        "--short-servers",
        "10",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--short-servers") && stderr.contains("no general partition"),
        "{stderr}"
    );
    let out = jobcast(&["bench", "transient", "--generate-jobs", "10", "--load", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--load"));
    for (flag, value) in [("--cutoff-s", "0"), ("--probe-ratio", "0")] {
        let out = jobcast(&["bench", "transient", "--generate-jobs", "10", flag, value]);
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag}: {stderr}");
    }
}

/// Transient servers preempted by AWS spot lifetimes (no cap, 1.6 h on
/// average): far more preemptions, every job still finishes, and the
/// controller's release model is the deadline-free one.
#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn cloudcoaster_under_spot_preemptions() {
    let spot = shared_data("spot-traces/skypilot/preemption");
    let (out, v) = bench(&[
        "--generate-jobs",
        "6000",
        "--servers",
        "400",
        "--lifetimes",
        spot.to_str().unwrap(),
        "--lifetimes-format",
        "spot-traces",
    ]);
    let runs = v["runs"].as_array().unwrap();
    assert!(runs.iter().all(|r| r["unfinished"] == 0), "{out}");
    let gce = bench(&[
        "--generate-jobs",
        "6000",
        "--servers",
        "400",
        "--lifetimes",
        &lifetimes(),
    ])
    .1;
    // Spot instances live 1.6 h on average, GCE's preemptible VMs most of
    // a day: the same runs meet more preemptions.
    assert!(f(&v, "preemptions") > f(&gce, "preemptions"), "{out}");
    assert!(f(&runs[1], "tasks_lost") > 0.0, "{out}");
}
