//! `jobcast risk score | checkpoints | reuse | reuse-mc` end to end, on the
//! paper's typical bathtub fit (the default `--params`). The figures checked
//! are the ones `docs/preemption.md` reports.

use jobcast_tests::{jobcast, jobcast_ok, shared_data};
use serde_json::Value;

fn json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--json");
    let out = jobcast_ok(&all);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

fn f(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` missing in {v}"))
}

#[test]
fn score_keeps_a_stable_vm_and_gives_up_an_old_one() {
    let base = [
        "risk",
        "score",
        "--vm-type",
        "n1-highcpu-16",
        "--zone",
        "us-east1-b",
    ];
    let mut args = base.to_vec();
    args.extend(["--age-hours", "10", "--runtime-hours", "3"]);
    let v = json(&args);
    assert_eq!(v["recommendation"], "keep");
    assert_eq!(v["vm_type"], "n1-highcpu-16");
    assert_eq!(v["zone"], "us-east1-b");
    let this = &v["this_vm"];
    let fresh = &v["fresh_vm"];
    assert!(f(this, "preemption_probability") < f(fresh, "preemption_probability"));
    assert!(f(this, "expected_completion_h") >= 3.0);
    assert_eq!(f(&v, "on_demand_cost"), 9.0);
    assert!(v["checkpoints"].is_null());

    let mut args = base.to_vec();
    args.extend([
        "--age-hours",
        "20",
        "--runtime-hours",
        "6",
        "--runtime-cv",
        "0.3",
    ]);
    let v = json(&args);
    assert_eq!(v["recommendation"], "fresh_vm");
    assert_eq!(f(&v["runtime"], "cv"), 0.3);

    // A 23 h task fails on any preemptible VM more often than not.
    let mut args = base.to_vec();
    args.extend(["--age-hours", "0", "--runtime-hours", "23"]);
    let v = json(&args);
    assert_eq!(v["recommendation"], "on_demand");
    assert_eq!(v["reason"], "failure_threshold");
    // With checkpoints it is fine on a fresh VM.
    args.extend(["--checkpoint-delta-minutes", "6"]);
    let v = json(&args);
    assert_eq!(v["recommendation"], "keep");
    let intervals = v["checkpoints"]["intervals_h"].as_array().unwrap();
    let total: f64 = intervals.iter().map(|x| x.as_f64().unwrap()).sum();
    assert!((total - 23.0).abs() < 1e-6, "{total}");

    let text = jobcast_ok(&args[..args.len() - 2]);
    assert!(
        text.contains("recommendation: on_demand (failure_threshold)"),
        "{text}"
    );

    // At or past the deadline (24 h) the VM is gone: refused, naming the
    // flag and the range.
    for age in ["24", "30", "-1"] {
        let flag = format!("--age-hours={age}");
        let mut args = base.to_vec();
        args.extend([flag.as_str(), "--runtime-hours", "3"]);
        let out = jobcast(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success()
                && stderr.contains(&format!("--age-hours {age}"))
                && stderr.contains("[0, 24)"),
            "{stderr}"
        );
    }
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn score_uses_the_bathtub_fitted_for_the_vm_type_and_zone() {
    let dir = shared_data("google-preemptible-vm-lifetimes-2019");
    let data = dir.join("data.json.gz");
    let data = data.to_str().unwrap();
    let score_args = |vm_type: &'static str, zone: &'static str| {
        vec![
            "risk",
            "score",
            "--vm-type",
            vm_type,
            "--zone",
            zone,
            "--age-hours",
            "10",
            "--runtime-hours",
            "3",
            "--lifetimes",
            data,
        ]
    };
    let fits = json(&[
        "risk",
        "fit",
        "--lifetimes",
        data,
        "--by",
        "type+zone,type,zone",
    ]);
    let bathtub = |group: &str| {
        fits.as_array()
            .unwrap()
            .iter()
            .find(|f| f["group"] == group && f["model"] == "bathtub")
            .unwrap_or_else(|| panic!("no bathtub fit for {group}"))["params"]
            .clone()
    };
    // The most specific fitted group: type+zone where the data has it, the
    // pooled fit for a type and zone it has never seen.
    for (vm_type, zone, group) in [
        (
            "n1-highcpu-16",
            "us-east1-b",
            "type=n1-highcpu-16,zone=us-east1-b",
        ),
        ("n9-unknown", "mars-1a", "all"),
    ] {
        let v = json(&score_args(vm_type, zone));
        assert_eq!(v["fit_group"], group, "the group whose fit scored it");
        let want = bathtub(group);
        for key in ["a", "tau1", "tau2", "b"] {
            assert!(
                (f(&v["params"], key) - f(&want, key)).abs() <= 1e-12 * f(&want, key),
                "{group} {key}: {} vs {want}",
                v["params"]
            );
        }
        assert_eq!(v["recommendation"], "keep", "{v}");
    }
    // The two groups differ, and neither is the paper's typical fit.
    let (a, b) = (
        bathtub("type=n1-highcpu-16,zone=us-east1-b"),
        bathtub("all"),
    );
    assert_ne!(a["a"], b["a"]);
    assert_ne!(f(&a, "a"), 0.45);
    // --params and --lifetimes are alternatives.
    let mut both = score_args("n1-highcpu-16", "us-east1-b");
    both.extend(["--params", "0.45,1,0.8,24"]);
    let out = jobcast(&both);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be used with"));
}

#[test]
fn checkpoints_for_a_five_hour_job_beat_young_daly() {
    let base = [
        "risk",
        "checkpoints",
        "--job-hours",
        "5",
        "--delta-minutes",
        "1",
    ];
    let v = json(&base);
    let intervals: Vec<f64> = v["intervals_minutes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    // Increasing as the early hazard falls, like the paper's 15, 28, 38, 59, 128.
    assert!(intervals.windows(2).all(|w| w[0] <= w[1]), "{intervals:?}");
    assert!((intervals.iter().sum::<f64>() - 300.0).abs() < 1e-6);
    let dp = f(&v, "expected_makespan_minutes");
    let yd = f(&v, "young_daly_expected_makespan_minutes");
    assert!(dp > 300.0 && dp < yd, "{dp} vs {yd}");
    assert!(dp < f(&v, "no_checkpoint_expected_makespan_minutes"));
    // τ = √(2·δ·MTTF) with the model's mean lifetime.
    let mttf = f(&v, "young_daly_mttf_hours");
    let tau = f(&v, "young_daly_interval_minutes");
    assert!((tau - (2.0 * (1.0 / 60.0) * mttf).sqrt() * 60.0).abs() < 1e-9);

    let mut args = base.to_vec();
    args.extend(["--young-daly-mttf-hours", "1"]);
    let v = json(&args);
    assert!((f(&v, "young_daly_interval_minutes") - 10.954_451_150_103_322).abs() < 1e-9);
    assert!(f(&v, "young_daly_overhead_percent") > f(&v, "overhead_percent"));

    // Bad input is an error with a message, not a panic.
    let out = jobcast(&[
        "risk",
        "checkpoints",
        "--job-hours",
        "5",
        "--delta-minutes=-1",
    ]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("delta_h"));
}

#[test]
fn reuse_figures_match_the_paper() {
    // §6.1: a 10 h job on a fresh VM loses about 30 min (5%); ~2 h if uniform.
    let v = json(&["risk", "reuse", "--job-hours", "10"]);
    let increase = f(&v, "expected_increase_hours");
    assert!((0.4..0.5).contains(&increase), "{increase}");
    let uniform = f(&v, "uniform_expected_increase_hours");
    assert!((uniform - 100.0 / 48.0).abs() < 1e-9, "{uniform}");
    // §6.2.1: a 6 h job fails with probability ≈ F(6) ≈ 0.45 on a fresh VM and
    // goes to a fresh VM late in the VM's life.
    let v = json(&["risk", "reuse", "--job-hours", "6", "--age-hours", "19"]);
    assert!((f(&v, "fresh_preemption_probability") - 0.449).abs() < 0.01);
    assert_eq!(v["keep"], false);
    let switch = f(&v, "fresh_vm_from_age_hours");
    assert!((14.0..18.0).contains(&switch), "{switch}");
    assert_eq!(
        json(&["risk", "reuse", "--job-hours", "6", "--age-hours", "8"])["keep"],
        true
    );
}

#[test]
fn reuse_monte_carlo_is_seeded_and_beats_the_memoryless_policy() {
    let args = [
        "risk",
        "reuse-mc",
        "--job-hours",
        "6,12",
        "--samples",
        "4000",
        "--seed",
        "5",
    ];
    let v = json(&args);
    assert_eq!(v, json(&args));
    for key in ["expected_running_time", "failure_probability"] {
        for row in v[key].as_array().unwrap() {
            assert!(
                f(row, "policy_failure") < f(row, "memoryless_failure"),
                "{row}"
            );
            assert!(
                (f(row, "memoryless_failure") - f(row, "memoryless_failure_exact")).abs() < 0.03,
                "{row}"
            );
        }
    }
}
