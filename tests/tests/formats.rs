//! `jobcast generate` and `jobcast convert` for every trace format, through
//! the binary: each format's fixture (or the shared real data) converts into
//! tables whose ground truth SQL can read.

use jobcast_tests::{convert, jobcast_ok, repo, shared_data, sql_json};
use serde_json::json;

#[test]
fn generated_workloads_are_deterministic_and_convert() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl");
    let args = |out: &std::path::Path| {
        vec![
            "generate".to_owned(),
            "--seed".into(),
            "11".into(),
            "--jobs".into(),
            "300".into(),
            "--vms".into(),
            "50".into(),
            "--output".into(),
            out.to_str().unwrap().to_owned(),
        ]
    };
    let argv: Vec<String> = args(&a);
    jobcast_ok(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    let argv: Vec<String> = args(&b);
    jobcast_ok(&argv.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());

    let tables = dir.path().join("tables");
    let summary = convert("jsonl", &a, &tables);
    assert!(summary.contains("0 skipped"), "{summary}");
    // The generator runs every job to completion on an unbounded cluster.
    let rows = sql_json(
        &tables,
        "SELECT count(*) AS jobs, sum(CASE WHEN finished THEN 1 ELSE 0 END) AS finished FROM jobs",
    );
    assert_eq!(rows, vec![json!({"jobs": 300, "finished": 300})]);
    let rows = sql_json(
        &tables,
        "SELECT count(*) AS vms FROM machines WHERE preemptible",
    );
    assert_eq!(rows, vec![json!({"vms": 50})]);
}

#[test]
fn fixtures_of_every_trace_format_convert() {
    let dir = tempfile::tempdir().unwrap();
    let fixtures = repo().join("ingest/tests/data");
    for (format, input) in [
        ("alibaba2018", fixtures.join("alibaba2018/full")),
        ("google2019", fixtures.join("google2019/jsonl")),
        ("google2019", fixtures.join("google2019/csv")),
    ] {
        let out = dir.path().join(format);
        let summary = convert(format, &input, &out);
        let rows = sql_json(&out, "SELECT count(*) AS jobs FROM jobs");
        assert!(rows[0]["jobs"].as_u64().unwrap() > 0, "{format}: {summary}");
    }
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn gce_lifetimes_convert_into_machine_lifetimes() {
    let path = shared_data("google-preemptible-vm-lifetimes-2019/data.json.gz");
    let dir = tempfile::tempdir().unwrap();
    convert("gce-lifetimes", &path, dir.path());
    let rows = sql_json(
        dir.path(),
        "SELECT end_reason, count(*) AS vms, min(lifetime_us) > 0 AS positive, bool_and(censored) AS censored
         FROM machines GROUP BY end_reason ORDER BY end_reason",
    );
    assert_eq!(
        rows,
        vec![
            json!({"end_reason": "preempted", "vms": 717, "positive": true, "censored": false}),
            json!({"end_reason": "stopped", "vms": 725, "positive": true, "censored": true}),
        ]
    );
}
