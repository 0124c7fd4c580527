//! `jobcast bench pipeline` and `bench recovery` on the embedded mock
//! cluster, and `bench engine` from memory: every figure is reported and
//! consistent. No speed thresholds:
//! the rates depend on the machine and its load.

use jobcast_tests::jobcast_ok;
use serde_json::Value;

fn number(report: &Value, field: &str) -> f64 {
    report[field]
        .as_f64()
        .unwrap_or_else(|| panic!("no numeric `{field}` in {report}"))
}

/// `jobcast bench pipeline` over 300 generated jobs on 4 partitions of the
/// mock cluster, with `extra` arguments: its JSON report.
fn bench_pipeline(extra: &[&str]) -> Value {
    bench("pipeline", extra)
}

/// `jobcast bench COMMAND` over 300 generated jobs on 4 partitions of the
/// mock cluster, with `extra` arguments: its JSON report.
fn bench(command: &str, extra: &[&str]) -> Value {
    bench_on(command, 4, extra)
}

/// `jobcast bench COMMAND` over 300 generated jobs on `partitions` input
/// partitions, with `extra` arguments: its JSON report.
fn bench_on(command: &str, partitions: u32, extra: &[&str]) -> Value {
    let partitions = partitions.to_string();
    let mut args = vec![
        "bench",
        command,
        "--generate-jobs",
        "300",
        "--seed",
        "1",
        "--partitions",
        &partitions,
        "--json",
    ];
    args.extend_from_slice(extra);
    serde_json::from_str(&jobcast_ok(&args)).expect("the output is JSON")
}

#[test]
fn bench_pipeline_reports_both_rates_and_their_ratio() {
    let report = bench_pipeline(&[]);
    let events = report["events"].as_u64().expect("events is a count");
    assert!(events > 0, "{report}");
    assert_eq!(report["partitions"].as_u64(), Some(4), "{report}");
    // The output topics have as many partitions as the input unless told.
    assert_eq!(report["output_partitions"].as_u64(), Some(4), "{report}");
    assert_eq!(
        report["broker"].as_str(),
        Some("embedded mock cluster"),
        "{report}"
    );
    let raw = number(&report, "raw_consume_events_per_sec");
    let pipeline = number(&report, "pipeline_events_per_sec");
    assert!(raw > 0.0 && pipeline > 0.0, "{report}");
    assert!(number(&report, "write_events_per_sec") > 0.0, "{report}");
    let ratio = number(&report, "ratio");
    assert!(
        (ratio - pipeline / raw).abs() <= 1e-9 * ratio.abs().max(1.0),
        "{report}"
    );
    assert!(
        report["decisions"].as_u64().expect("decisions is a count") > 0,
        "{report}"
    );
    // The steps account for the pipeline's time: each measured, together
    // no more than the whole.
    let stages = &report["stages"];
    assert!(stages["batches"].as_u64().unwrap_or(0) > 0, "{report}");
    let steps: f64 = ["apply_secs", "publish_secs", "commit_secs"]
        .iter()
        .map(|k| number(stages, k))
        .sum();
    assert!(number(stages, "apply_secs") > 0.0, "{report}");
    assert!(number(stages, "commit_secs") > 0.0, "{report}");
    // The writer thread's writes overlap the steps; each batch is written.
    let write = number(stages, "write_secs");
    assert!(
        write > 0.0 && write <= events as f64 / pipeline * 1.001,
        "{report}"
    );
    assert!(steps <= events as f64 / pipeline * 1.001, "{report}");
    assert!(number(stages, "other_secs") >= 0.0, "{report}");
    // The default merge budget holds the whole of this input.
    assert_eq!(stages["input_pauses"].as_u64(), Some(0), "{report}");
}

#[test]
fn bench_pipeline_runs_the_service_with_the_given_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("jobcast.toml");
    // Batches of at most 64 events, which only this file can ask for (the
    // default is 10,000).
    std::fs::write(&config, "[consumer]\nbatch_max_events = 64\n").unwrap();
    let report = bench_pipeline(&["--config", config.to_str().unwrap()]);
    let stages = &report["stages"];
    let events = report["events"].as_u64().unwrap();
    assert!(
        stages["batches"].as_u64().unwrap() >= events.div_ceil(64),
        "{report}"
    );
}

#[test]
fn bench_pipeline_needs_an_input() {
    let out = jobcast_tests::jobcast(&["bench", "pipeline", "--json"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--trace") && stderr.contains("--generate-jobs"),
        "{stderr}"
    );
}

#[test]
fn bench_latency_reports_ordered_percentiles_per_load() {
    let out = jobcast_ok(&[
        "bench",
        "latency",
        "--generate-jobs",
        "300",
        "--seed",
        "1",
        "--rates",
        "2000,max",
        "--partitions",
        "4",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).expect("the output is JSON");
    assert!(
        report["events"].as_u64().expect("events is a count") > 0,
        "{report}"
    );
    let loads = report["loads"].as_array().expect("loads is a list");
    assert_eq!(loads.len(), 2, "{report}");
    assert_eq!(
        loads[0]["offered_per_sec"].as_f64(),
        Some(2000.0),
        "{report}"
    );
    assert!(loads[1]["offered_per_sec"].is_null(), "{report}");
    for load in loads {
        let service = &load["service"];
        let relay = &load["relay"];
        check_latency_figures(service, &report);
        check_latency_figures(relay, &report);
        // The service publishes later versions too; the relay answers each
        // submission once.
        assert!(service["decisions"].as_u64() > Some(300), "{report}");
        assert_eq!(relay["decisions"].as_u64(), Some(300), "{report}");
        // Every message waits a little between its poll and its batch.
        let queued = number(&service["batches"], "queued_ms");
        assert!(queued > 0.0 && queued.is_finite(), "{report}");
    }
}

/// One responder's figures at one load: every job's first decision is a
/// sample (300 jobs, 300 samples) and the percentiles are ordered.
fn check_latency_figures(figures: &Value, report: &Value) {
    assert!(number(figures, "achieved_per_sec") > 0.0, "{report}");
    let decisions = figures["decisions"].as_u64().expect("decisions is a count");
    let samples = figures["samples"].as_u64().expect("samples is a count");
    assert_eq!(samples, 300, "{report}");
    assert!(decisions >= samples, "{report}");
    let (p50, p99, p999, max) = (
        number(figures, "p50_ms"),
        number(figures, "p99_ms"),
        number(figures, "p999_ms"),
        number(figures, "max_ms"),
    );
    assert!(
        0.0 < p50 && p50 <= p99 && p99 <= p999 && p999 <= max,
        "{report}"
    );
}

#[test]
fn bench_latency_without_the_relay_on_one_output_partition_measures_the_service_alone() {
    let out = jobcast_ok(&[
        "bench",
        "latency",
        "--generate-jobs",
        "100",
        "--seed",
        "2",
        "--rates",
        "max",
        "--partitions",
        "2",
        "--output-partitions",
        "1",
        "--no-relay",
        "--json",
    ]);
    let report: Value = serde_json::from_str(&out).expect("the output is JSON");
    assert_eq!(report["partitions"].as_u64(), Some(2), "{report}");
    assert_eq!(report["output_partitions"].as_u64(), Some(1), "{report}");
    let loads = report["loads"].as_array().expect("loads is a list");
    assert_eq!(loads.len(), 1, "{report}");
    assert!(loads[0]["relay"].is_null(), "{report}");
    assert_eq!(
        loads[0]["service"]["samples"].as_u64(),
        Some(100),
        "{report}"
    );
}

#[test]
fn bench_latency_rejects_a_non_positive_rate() {
    let out = jobcast_tests::jobcast(&[
        "bench",
        "latency",
        "--generate-jobs",
        "10",
        "--rates",
        "1000,0",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("positive number of events per second"),
        "{stderr}"
    );
}

#[test]
fn bench_write_properties_reach_the_workload_writer() {
    let out = jobcast_tests::jobcast(&[
        "bench",
        "pipeline",
        "--generate-jobs",
        "10",
        "--write-property",
        "batch.num.messages=many",
    ]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("batch.num.messages"), "{stderr}");

    let out = jobcast_tests::jobcast(&["bench", "pipeline", "--write-property", "linger.ms"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("expected KEY=VALUE"), "{stderr}");
}

#[test]
fn bench_recovery_times_a_restart_that_applies_only_the_log_after_the_snapshot() {
    let report = bench("recovery", &["--snapshot-every", "2000", "--restarts", "2"]);
    let events = report["events"].as_u64().expect("events is a count");
    assert!(events > 2000, "{report}");
    // At most the snapshot interval and one batch (10,000 by default) of
    // logged messages, not every event consumed.
    let replayed = report["replayed_events"].as_u64().expect("a count");
    assert!(replayed < 2000 + 10_000 && replayed < events, "{report}");
    for field in [
        "restore_s",
        "group_join_s",
        "throughput_eps",
        "baseline_throughput_eps",
    ] {
        assert!(number(&report, field) >= 0.0, "{report}");
    }
    assert!(number(&report, "throughput_eps") > 0.0, "{report}");
    assert!(number(&report, "snapshot_bytes") > 0.0, "{report}");
    assert!(number(&report, "store_bytes") > 0.0, "{report}");
    assert!(number(&report, "compacted_store_bytes") > 0.0, "{report}");
    assert!(report["family_bytes"]["log"].is_u64(), "{report}");
    assert_eq!(report["round_ratios"].as_array().map(Vec::len), Some(1));
    let restores: Vec<f64> = report["restores_s"]
        .as_array()
        .expect("each restart's restore")
        .iter()
        .filter_map(serde_json::Value::as_f64)
        .collect();
    assert_eq!(restores.len(), 2, "{report}");
    let (low, high) = (restores[0].min(restores[1]), restores[0].max(restores[1]));
    let median = number(&report, "restore_s");
    assert!(low <= median && median <= high, "{report}");
}

#[test]
fn bench_recovery_paced_writes_each_run_its_input_while_it_consumes() {
    // A window far below the input: the writer waits for every run,
    // the takeover's two instances included. Two rounds: four runs, each
    // with its own input.
    let report = bench(
        "recovery",
        &[
            "--snapshot-every",
            "2000",
            "--pace",
            "500",
            "--takeover",
            "--rounds",
            "2",
            "--restarts",
            "1",
        ],
    );
    let ratios = report["round_ratios"].as_array().expect("a list");
    assert_eq!(ratios.len(), 2, "{report}");
    assert!(ratios.iter().all(|r| r.as_f64() > Some(0.0)), "{report}");
    let events = report["events"].as_u64().expect("events is a count");
    assert!(events > 2000, "{report}");
    assert_eq!(report["paced_window"].as_u64(), Some(500), "{report}");
    let replayed = report["replayed_events"].as_u64().expect("a count");
    assert!(replayed < 2000 + 10_000 && replayed < events, "{report}");
    assert!(number(&report, "throughput_eps") > 0.0, "{report}");
    assert!(number(&report, "baseline_throughput_eps") > 0.0, "{report}");
    let takeover = &report["takeover"];
    assert!(number(takeover, "takeover_s") > 0.0, "{report}");
    assert_eq!(takeover["replayed_events"].as_u64(), Some(0), "{report}");
}

/// `jobcast bench engine` runs the service's own steps from memory: every
/// event of the workload goes through each step, in batches of the size
/// asked for, and what it would publish is what the service publishes for
/// the same input in the same order (one input partition).
#[test]
fn bench_engine_runs_every_event_through_the_services_steps() {
    let report = bench_on("engine", 1, &["--batch", "64"]);
    let events = report["events"].as_u64().expect("events is a count");
    assert!(events > 0, "{report}");
    assert_eq!(
        report["batches"].as_u64(),
        Some(events.div_ceil(64)),
        "{report}"
    );
    assert_eq!(report["dead_lettered"].as_u64(), Some(0), "{report}");
    let steps = &report["steps"];
    let secs: Vec<f64> = [
        "decode_secs",
        "apply_encode_secs",
        "stage_secs",
        "write_secs",
    ]
    .iter()
    .map(|step| number(steps, step))
    .collect();
    assert!(secs.iter().all(|&s| s > 0.0), "{report}");
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * a.abs().max(b.abs());
    let one_thread = number(&report, "one_thread_events_per_sec");
    assert!(
        close(one_thread, events as f64 / secs.iter().sum::<f64>()),
        "{report}"
    );
    let pipeline_thread = number(&report, "pipeline_thread_events_per_sec");
    assert!(
        close(pipeline_thread, events as f64 / (secs[1] + secs[2])),
        "{report}"
    );
    assert!(
        close(
            number(&report, "two_core_ceiling_events_per_sec"),
            pipeline_thread.min(2.0 * one_thread)
        ),
        "{report}"
    );

    // Spread over partitions, every event is still applied, the engine's
    // clock agreeing across them.
    let spread = bench("engine", &[]);
    assert_eq!(spread["partitions"].as_u64(), Some(4), "{spread}");
    assert_eq!(spread["events"], report["events"], "{spread}");
    assert_eq!(spread["dead_lettered"].as_u64(), Some(0), "{spread}");
    assert!(spread["messages"].as_u64().unwrap_or(0) > 0, "{spread}");

    // Spread over the most clusters an engine holds by default, every
    // event is still applied.
    let clusters = bench_on("engine", 1, &["--batch", "64", "--clusters", "64"]);
    assert_eq!(clusters["clusters"].as_u64(), Some(64), "{clusters}");
    assert_eq!(clusters["events"], report["events"], "{clusters}");
    assert_eq!(clusters["dead_lettered"].as_u64(), Some(0), "{clusters}");
    assert_eq!(clusters["messages"], report["messages"], "{clusters}");

    let service = bench_on("pipeline", 1, &[]);
    assert_eq!(report["events"], service["events"], "{report}\n{service}");
    assert_eq!(
        report["messages"], service["decisions"],
        "{report}\n{service}"
    );
}
