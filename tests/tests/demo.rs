//! `jobcast demo`, the README's run command: the service on the embedded
//! Kafka with the bundled excerpt replayed into it, start to summary.

use std::fmt::Write;

use jobcast_tests::{excerpt_events, jobcast_ok};

/// `jobcast demo` on `trace` (JSON lines), written to `path`, on four
/// input partitions (event time is taken from them together): its summary.
fn demo_on(path: &std::path::Path, trace: &str) -> String {
    std::fs::write(path, trace).unwrap();
    jobcast_ok(&[
        "demo",
        "--http",
        "127.0.0.1:0",
        "--partitions",
        "4",
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

/// The summary without its one figure of the machine (the time taken).
fn without_elapsed(summary: &str) -> String {
    summary
        .lines()
        .filter(|l| !l.trim_start().starts_with("elapsed"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_demo_replays_the_bundled_excerpt_through_the_service() {
    let summary = jobcast_ok(&["demo", "--http", "127.0.0.1:0"]);
    // On its one input partition a second run repeats every figure.
    let again = jobcast_ok(&["demo", "--http", "127.0.0.1:0"]);
    assert_eq!(without_elapsed(&again), without_elapsed(&summary));
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

/// A small trace of two jobs, as JSON lines.
fn two_jobs() -> String {
    let mut trace = String::new();
    for job in 1..=2u64 {
        let t = job * 1_000_000;
        writeln!(
            trace,
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":0.1,"num_tasks":1}}"#
        )
        .unwrap();
    }
    trace
}

/// On a terminal (here `script`'s pseudo-terminal) the demo keeps the
/// service and its API up once the trace is done, for the curls its
/// header offers, and says so; Ctrl-C (SIGINT) ends it with its summary.
#[test]
fn on_a_terminal_the_demo_stays_up_after_the_replay_until_ctrl_c() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};

    let port = jobcast_tests::serve::free_port();
    let demo = format!(
        "{} demo --http 127.0.0.1:{port}",
        jobcast_tests::jobcast_bin().display(),
    );
    let mut script = Command::new("script")
        .args(["-qec", &demo, "/dev/null"])
        .env("JOBCAST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .expect("script runs");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = script.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            eprintln!("[demo] {line}");
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|l: &String| l.contains("replay done; API still up") && l.contains("Ctrl-C"))
    {
        let left = deadline.saturating_duration_since(Instant::now());
        seen.push(
            rx.recv_timeout(left)
                .expect("the demo said the replay is done"),
        );
    }
    // It names a job the driving policy (slearn) estimated and that
    // finished: its record holds slearn's estimate and error.
    let example = rx
        .recv_timeout(Duration::from_secs(5))
        .expect("an example job follows");
    seen.push(example.clone());
    let path = example
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("http://127.0.0.1:{port}")))
        .unwrap_or_else(|| panic!("no example job: {example}"))
        .to_owned();
    assert!(example.contains("slearn estimated"), "{example}");
    // Still up a few seconds later, answering.
    std::thread::sleep(Duration::from_secs(3));
    let health = ureq::get(&format!("http://127.0.0.1:{port}/healthz"))
        .call()
        .expect("the API answers after the replay");
    assert_eq!(health.status(), 200);
    let job: serde_json::Value = ureq::get(&format!("http://127.0.0.1:{port}{path}"))
        .call()
        .expect("the example job is there")
        .body_mut()
        .read_json()
        .unwrap();
    assert!(
        job["estimates"].get("slearn").is_some() && job["errors"].get("slearn").is_some(),
        "{job}"
    );
    // `script` runs the command through `$SHELL -c`; dash (the `/bin/sh`
    // used when SHELL is unset, as under CI) stays as the demo's parent,
    // and a SIGINT sent to it never reaches the demo. Only the process
    // whose command line starts with the binary itself is the demo.
    let pattern = format!(
        "^{} demo --http 127.0.0.1:{port}( |$)",
        jobcast_tests::jobcast_bin().display()
    );
    let pid = String::from_utf8(
        Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let pids: Vec<&str> = pid
        .lines()
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .collect();
    assert_eq!(
        pids.len(),
        1,
        "one demo process matches {pattern}: {pids:?}"
    );
    assert!(
        Command::new("kill")
            .args(["-INT", pids[0]])
            .status()
            .unwrap()
            .success()
    );
    let stop_by = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = script.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > stop_by {
            let _ = Command::new("kill").args(["-KILL", pids[0]]).status();
            let _ = script.kill();
            panic!("the demo did not stop within 60 s of SIGINT: {seen:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    while let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
        seen.push(line);
    }
    assert!(status.success(), "{status}: {seen:?}");
    assert!(
        seen.iter().any(|l| l.contains("jobcast demo: summary")),
        "{seen:?}"
    );
}

/// Bad flags and a taken port are named: `--format` needs `--trace`; a
/// host name is resolved; an address in use is named with the OS error.
#[test]
fn the_demo_names_what_is_wrong_with_its_flags_and_its_address() {
    let refused = jobcast_tests::jobcast(&["demo", "--format", "jsonl"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success() && stderr.contains("--trace"),
        "{stderr}"
    );

    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("two.jsonl");
    std::fs::write(&trace, two_jobs()).unwrap();
    let trace = trace.to_str().unwrap();
    let flags = |http: &str| {
        jobcast_tests::jobcast(&[
            "demo", "--http", http, "--trace", trace, "--format", "jsonl",
        ])
    };
    let out = flags(&address);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success()
            && stderr.contains(&address)
            && stderr.contains("in use")
            && !stderr.contains("channel is empty"),
        "{stderr}"
    );

    let out = flags("localhost:0");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("jobcast demo: summary"));
}

/// A trace line that is no event is reported as `convert` reports it (the
/// file, the line, the class and the reason) and counted in the summary;
/// the rest is replayed.
#[test]
fn the_demo_reports_the_trace_lines_it_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("bad.jsonl");
    let mut lines: Vec<String> = two_jobs().lines().map(str::to_owned).collect();
    lines.insert(
        1,
        r#"{"v":1,"type":"job_submitted","time_us":"soon"}"#.into(),
    );
    // Job 1's task starts after job 2's submission, then a line goes back
    // in job 1's time (the reader skips it, line 5), and a task of a job
    // never submitted reaches the service, which dead-letters it.
    lines.extend([
        r#"{"v":1,"type":"task","time_us":2500000,"job_id":1,"task_index":0,"kind":"schedule"}"#
            .into(),
        r#"{"v":1,"type":"task","time_us":1500000,"job_id":1,"task_index":0,"kind":"finish"}"#
            .into(),
        r#"{"v":1,"type":"task","time_us":3000000,"job_id":99,"task_index":0,"kind":"schedule"}"#
            .into(),
    ]);
    std::fs::write(&trace, lines.join("\n") + "\n").unwrap();
    let out = jobcast_tests::jobcast(&[
        "demo",
        "--http",
        "127.0.0.1:0",
        "--trace",
        trace.to_str().unwrap(),
        "--format",
        "jsonl",
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stderr}");
    assert_eq!(figure(&stdout, "input rows skipped"), 2, "{stdout}");
    assert_eq!(figure(&stdout, "events replayed"), 4, "{stdout}");
    assert!(stderr.contains("bad.jsonl:2"), "{stderr}");
    assert!(
        stderr.contains("bad.jsonl:5") && stderr.contains("time_backwards"),
        "{stderr}"
    );
    // The dead letter is shown with its reason, where it came from and
    // what it held, though its topic went with the embedded Kafka.
    assert_eq!(figure(&stdout, "dead-lettered"), 1, "{stdout}");
    let letters = stderr
        .split_once("dead letters, by reason")
        .unwrap_or_else(|| panic!("no dead letters shown:\n{stderr}"))
        .1;
    assert!(
        letters.contains("unknown_job: 1")
            && letters.contains("job 99 is not running")
            && letters.contains(r#""job_id":99"#),
        "{letters}"
    );
}

/// The first screen of `jobcast --help` says what to run first; `admin
/// --help` lists every store operation.
#[test]
fn the_help_opens_with_what_to_run_first() {
    let help = jobcast_ok(&["--help"]);
    let first: Vec<&str> = help.lines().take(4).collect();
    assert!(
        first[0].starts_with("Start here")
            && first.iter().any(|l| l.contains("jobcast demo"))
            && first.iter().any(|l| l.contains("jobcast serve")),
        "{help}"
    );
    let admin = jobcast_ok(&["admin", "--help"]);
    assert!(admin.contains("parked"), "{admin}");
}
