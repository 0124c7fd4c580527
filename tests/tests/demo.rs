//! `jobcast demo`, the README's run command: the service on the embedded
//! Kafka with the bundled excerpt replayed into it, start to summary.

use std::fmt::Write;

use jobcast_tests::{excerpt_events, jobcast_ok};

/// `jobcast demo` on `trace` (JSON lines), written to `path`: its summary.
fn demo_on(path: &std::path::Path, trace: &str) -> String {
    std::fs::write(path, trace).unwrap();
    jobcast_ok(&[
        "demo",
        "--http",
        "127.0.0.1:0",
        "--trace",
        path.to_str().unwrap(),
        "--format",
        "jsonl",
    ])
}

fn figure(summary: &str, label: &str) -> u64 {
    summary
        .lines()
        .find_map(|line| line.trim().strip_prefix(label))
        .and_then(|rest| rest.trim().parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` in the summary:\n{summary}"))
}

#[test]
fn the_demo_replays_the_bundled_excerpt_through_the_service() {
    let summary = jobcast_ok(&["demo", "--http", "127.0.0.1:0"]);
    let events = excerpt_events().len() as u64;
    assert_eq!(figure(&summary, "events replayed"), events);
    let applied = figure(&summary, "events applied");
    let dead = figure(&summary, "dead-lettered");
    assert_eq!(applied + dead, events, "{summary}");
    assert!(applied > events / 2, "{summary}");
    assert!(figure(&summary, "decisions") > 0);
    // Every shadow policy has been scored on finished jobs.
    for policy in ["slearn", "3sigma", "bayes"] {
        let row = summary
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{policy} ")))
            .unwrap_or_else(|| panic!("no {policy} row:\n{summary}"));
        let jobs: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
        assert!(jobs > 0, "{row}");
        // Its quantiles' coverage: four shares that rise with the level.
        let shares: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.strip_suffix('%'))
            .skip(2)
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(shares.len(), 4, "{row}");
        assert!(shares.windows(2).all(|w| w[0] <= w[1]), "{row}");
    }
    // The ETAs' errors and interval, over finished jobs.
    let eta = summary
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("ETA at a job's first decision, over ")
        })
        .unwrap_or_else(|| panic!("no ETA line:\n{summary}"));
    let words: Vec<&str> = eta.split_whitespace().collect();
    let jobs: f64 = words[words.iter().position(|&w| w == "over").unwrap() + 1]
        .parse()
        .unwrap();
    let shares: Vec<f64> = words
        .iter()
        .filter_map(|w| w.trim_end_matches(',').strip_suffix('%'))
        .map(|v| v.parse().unwrap())
        .collect();
    // P50 and P90 errors, the share within, the interval's 80.
    let [p50, p90, within, eighty] = shares[..] else {
        panic!("{eta}");
    };
    assert!(
        jobs > 0.0 && p50 <= p90 && (0.0..=100.0).contains(&within),
        "{eta}"
    );
    assert_eq!(eighty, 80.0, "{eta}");
}

/// Five jobs, a silence of a day and an hour (longer than
/// `engine.max_future_skew_secs`), five more: every event applied, none
/// dead-lettered or left held, and every job decided, on the demo's four
/// partitions.
#[test]
fn after_a_silence_of_a_day_and_an_hour_every_job_is_decided() {
    const H: u64 = 3_600_000_000;
    let mut trace = String::new();
    let mut events = 0;
    for (round, start) in [(0u64, H), (1, 26 * H)] {
        for j in 0..5u64 {
            let job = 1 + round * 5 + j;
            let t = start + j * 10_000_000;
            let mut line = |json: String| {
                writeln!(trace, "{json}").unwrap();
                events += 1;
            };
            line(format!(
                r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":0.1,"num_tasks":2}}"#
            ));
            for (kind, at) in [("schedule", t + 1), ("finish", t + 60_000_000)] {
                for i in 0..2 {
                    line(format!(
                        r#"{{"v":1,"type":"task","time_us":{at},"job_id":{job},"task_index":{i},"kind":"{kind}","machine_id":1}}"#
                    ));
                }
            }
            line(format!(
                r#"{{"v":1,"type":"job_ended","time_us":{},"job_id":{job},"outcome":"finish"}}"#,
                t + 60_000_001
            ));
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let summary = demo_on(&dir.path().join("quiet-day.jsonl"), &trace);
    assert_eq!(figure(&summary, "events replayed"), events, "{summary}");
    assert_eq!(figure(&summary, "events applied"), events, "{summary}");
    assert_eq!(figure(&summary, "events held"), 0, "{summary}");
    assert_eq!(figure(&summary, "dead-lettered"), 0, "{summary}");
    // 3Sigma estimates every job at its submission, and is scored on each
    // that finished: all ten.
    let row = summary
        .lines()
        .find(|l| l.trim_start().starts_with("3sigma "))
        .unwrap_or_else(|| panic!("no 3sigma row:\n{summary}"));
    let scored: u64 = row.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(scored, 10, "{summary}");
}

/// The bundled Google 2011 excerpt replayed as it is, and with every event
/// from its middle on four days later (a downtime in a replayed log, four
/// times the skew): every event is applied or refused as without the gap,
/// and none is left held.
#[test]
fn a_real_trace_with_a_gap_of_four_days_is_applied_as_without_it() {
    const GAP_US: u64 = 4 * 24 * 3_600_000_000;
    let events = excerpt_events();
    let middle = events[events.len() / 2].time_us();
    let dir = tempfile::tempdir().unwrap();
    let run = |gap_us: u64| {
        let mut trace = String::new();
        for event in &events {
            let mut json: serde_json::Value = serde_json::from_str(&event.to_json()).unwrap();
            if event.time_us() >= middle {
                json["time_us"] = (event.time_us() + gap_us).into();
            }
            writeln!(trace, "{json}").unwrap();
        }
        demo_on(&dir.path().join(format!("gap-{gap_us}.jsonl")), &trace)
    };
    let (plain, gapped) = (run(0), run(GAP_US));
    for label in ["events replayed", "events applied", "dead-lettered"] {
        assert_eq!(
            figure(&gapped, label),
            figure(&plain, label),
            "{label}:\n{plain}\n{gapped}"
        );
    }
    assert_eq!(figure(&gapped, "events held"), 0, "{gapped}");
    assert_eq!(
        figure(&gapped, "events applied") + figure(&gapped, "dead-lettered"),
        events.len() as u64
    );
}
