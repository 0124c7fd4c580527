//! `jobcast generate` + `jobcast evaluate` / `jobcast simulate` end to end.
//! The synthetic workload has tiny task-wise and large job-wise variation,
//! the regime where SLearn's sampling predicts far better than 3Sigma's
//! history (SLearn §4.1), so SLearn must beat 3Sigma and nothing may beat
//! the Oracle. (With narrow jobs of 3–5 tasks the pilot delay can outweigh
//! the accuracy and 3Sigma wins on some seeds: the paper's case is wide
//! jobs.)

use std::path::Path;

use jobcast_tests::{jobcast, jobcast_ok};
use serde_json::Value;

const POLICIES: [&str; 10] = [
    "slearn",
    "3sigma",
    "3sigma-tl",
    "point",
    "slearn-dag",
    "3sigma-dag",
    "bayes",
    "las",
    "fifo",
    "oracle",
];

/// Jobs of 10–150 tasks (so one pilot is a small share of a job, as in the
/// paper's wide jobs), job means spread with CV 3 around their family's,
/// task runtimes with CV 0.05 around their job's mean. SLearn beats 3Sigma on every seed
/// tried (1.1–2.1x over seeds 1–6); seed 3 gives 1.9x.
fn generate(path: &Path) {
    let args = "generate --seed 3 --jobs 3000 --slots 200 --load 0.9 --families 50 --job-cv 3 \
                --task-cv 0.05 --thin-fraction 0.1 --dag-fraction 0 --min-width 10 --max-width 150";
    let mut args: Vec<&str> = args.split_whitespace().collect();
    args.extend(["--output", path.to_str().unwrap()]);
    jobcast_ok(&args);
}

#[test]
fn slearn_beats_3sigma_and_the_oracle_beats_all() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    generate(&trace);
    let plots = dir.path().join("plots");
    let out = jobcast_ok(&[
        "evaluate",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "jsonl",
        "--json",
        "--plots",
        plots.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    let policies = v["policies"].as_object().unwrap();
    let mut names: Vec<&str> = policies.keys().map(String::as_str).collect();
    let mut expected = POLICIES.to_vec();
    names.sort_unstable();
    expected.sort_unstable();
    assert_eq!(names, expected);
    assert!(
        v["slots"].as_u64().unwrap() > 0 && v["jobs"].as_u64().unwrap() > 500,
        "{v}"
    );

    let avg = |p: &str| v["policies"][p]["avg_jct_s"].as_f64().unwrap();
    let table: Vec<String> = POLICIES
        .iter()
        .map(|p| format!("{p} {:.1}", avg(p)))
        .collect();
    assert!(avg("slearn") < avg("3sigma"), "{table:?}");
    for p in POLICIES {
        assert!(avg("oracle") <= avg(p), "oracle vs {p}: {table:?}");
    }
    let speedup = v["speedup_of_slearn"]["3sigma"].as_f64().unwrap();
    assert!((speedup - avg("3sigma") / avg("slearn")).abs() < 1e-9);
    assert!(v["speedup_of_slearn"].get("slearn").is_none());

    // Sampling predicts better; LAS and FIFO predict nothing.
    let err = |p: &str| v["policies"][p]["p50_error_pct"].as_f64();
    assert!(err("slearn").unwrap() < err("3sigma").unwrap(), "{v}");
    assert_eq!(err("oracle"), Some(0.0));
    for p in ["las", "fifo"] {
        assert!(
            v["policies"][p]["p50_error_pct"].is_null()
                && v["policies"][p]["correct_queue_pct"].is_null()
        );
    }
    assert_eq!(
        v["policies"]["oracle"]["correct_queue_pct"].as_f64(),
        Some(100.0)
    );
    // The wrong placements split into too high and too low queues.
    for p in POLICIES {
        let share = |key: &str| v["policies"][p][key].as_f64();
        let split = (share("too_high_queue_pct"), share("too_low_queue_pct"));
        match (share("correct_queue_pct"), split) {
            (Some(right), (Some(high), Some(low))) => {
                assert!((right + high + low - 100.0).abs() < 1e-9, "{p}: {v}")
            }
            (None, (None, None)) => {}
            _ => panic!("{p}: queue shares defined inconsistently: {v}"),
        }
    }
    assert_eq!(
        v["policies"]["oracle"]["too_high_queue_pct"].as_f64(),
        Some(0.0)
    );

    for name in ["error_cdf.svg", "speedup_cdf.svg"] {
        let svg = std::fs::read_to_string(plots.join(name)).unwrap();
        assert!(
            svg.contains("<svg") && svg.contains("<text") && svg.contains("CDF of jobs"),
            "{name}"
        );
        assert!(
            svg.contains("slearn") || svg.contains("over 3sigma"),
            "{name} has a legend"
        );
    }
}

#[test]
fn simulate_prints_a_table_and_rejects_zero_slots() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    generate(&trace);
    let trace = trace.to_str().unwrap();
    let out = jobcast_ok(&[
        "simulate", "--trace", trace, "--format", "jsonl", "--policy", "slearn", "--slots", "150",
    ]);
    for row in [
        "policy",
        "slearn",
        "slots",
        "150",
        "avg JCT (s)",
        "P50 error (%)",
        "thin jobs",
    ] {
        assert!(out.contains(row), "{row}: {out}");
    }
    let json = jobcast_ok(&[
        "simulate",
        "--trace",
        trace,
        "--format",
        "jsonl",
        "--policy",
        "fifo",
        "--json",
        "--sampling-ratio",
        "0.05",
    ]);
    let v: Value = serde_json::from_str(&json).unwrap();
    let jobs = v["jobs"].as_array().unwrap();
    assert_eq!(jobs.len() as u64, v["summary"]["jobs"].as_u64().unwrap());
    assert!(
        jobs.iter()
            .all(|j| j["phase"] == "arrival" && j["error_pct"].is_null())
    );

    let out = jobcast(&[
        "simulate", "--trace", trace, "--format", "jsonl", "--policy", "fifo", "--slots", "0",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--slots"));
    let out = jobcast(&[
        "evaluate",
        "--trace",
        trace,
        "--format",
        "jsonl",
        "--sampling-ratio",
        "2",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--sampling-ratio"));
}
