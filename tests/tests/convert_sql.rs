//! `jobcast convert` + `jobcast sql` end to end on the bundled Google 2011
//! excerpt. Expected figures were computed independently of jobcast from the
//! excerpt's raw CSV rows (last SCHEDULE → FINISH per task; job outcomes up
//! to the last task event).

use std::io::Write;

use jobcast_tests::{convert, jobcast, jobcast_ok, repo, sql_json};
use serde_json::json;

fn convert_excerpt(out: &std::path::Path) -> String {
    convert(
        "google2011",
        &repo().join("tests/data/google2011-excerpt"),
        out,
    )
}

#[test]
fn excerpt_tables_hold_the_ground_truth() {
    let dir = tempfile::tempdir().unwrap();
    let summary = convert_excerpt(dir.path());
    assert!(
        summary.contains("jobs") && summary.contains("rows/s"),
        "{summary}"
    );
    for table in ["events", "jobs", "tasks", "machines"] {
        assert!(dir.path().join(format!("{table}.parquet")).is_file());
    }

    let rows = sql_json(
        dir.path(),
        "SELECT count(*) AS jobs,
                sum(CASE WHEN finished THEN 1 ELSE 0 END) AS finished,
                sum(CASE WHEN outcome = 'kill' THEN 1 ELSE 0 END) AS killed,
                sum(CASE WHEN censored THEN 1 ELSE 0 END) AS censored
         FROM jobs",
    );
    assert_eq!(
        rows,
        vec![json!({"jobs": 406, "finished": 267, "killed": 114, "censored": 21})]
    );

    let rows = sql_json(
        dir.path(),
        "SELECT count(*) AS tasks, sum(CASE WHEN finished THEN 1 ELSE 0 END) AS finished,
                sum(runtime_us) AS runtime_us
         FROM tasks",
    );
    assert_eq!(
        rows,
        vec![json!({"tasks": 25024, "finished": 22689, "runtime_us": 24321705133439u64})]
    );

    let rows = sql_json(
        dir.path(),
        "SELECT count(*) AS n FROM events WHERE type = 'task'",
    );
    assert_eq!(rows, vec![json!({"n": 77875})]);

    // A job's total task-time is the sum of its tasks' runtimes.
    let rows = sql_json(
        dir.path(),
        "SELECT count(*) AS mismatches FROM jobs j JOIN
           (SELECT job_id, sum(runtime_us) AS s FROM tasks GROUP BY job_id) t
           ON j.job_id = t.job_id
         WHERE j.total_task_time_us <> coalesce(t.s, 0)",
    );
    assert_eq!(rows, vec![json!({"mismatches": 0})]);
}

#[test]
fn sql_output_formats_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let data = dir.path().to_str().unwrap();
    let query = "SELECT outcome, count(*) AS n FROM jobs WHERE outcome IS NOT NULL GROUP BY outcome ORDER BY outcome";

    let csv = jobcast_ok(&["sql", "--data", data, "--format", "csv", query]);
    assert_eq!(csv, "outcome,n\nfail,4\nfinish,267\nkill,114\n");

    let table = jobcast_ok(&["sql", "--data", data, query]);
    assert!(
        table.contains("| outcome |") && table.contains("| finish  | 267 |"),
        "{table}"
    );

    // A bad query fails with DataFusion's own message, not a panic.
    let out = jobcast(&["sql", "--data", data, "SELECT no_such_column FROM jobs"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("no_such_column"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");

    let out = jobcast(&["sql", "--data", "/nonexistent/dir", "SELECT 1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("not a directory"));
}

#[test]
fn malformed_rows_are_reported_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("trace");
    std::fs::create_dir_all(input.join("job_events")).unwrap();
    std::fs::create_dir_all(input.join("task_events")).unwrap();
    std::fs::write(
        input.join("job_events/part-00000-of-00500.csv"),
        "1000000,,7,0,user,1,name,logical\n\
         2000000,,7,4,user,1,name,logical\n\
         oops\n",
    )
    .unwrap();
    let mut tasks =
        std::fs::File::create(input.join("task_events/part-00000-of-00500.csv")).unwrap();
    tasks
        .write_all(
            b"1000000,,7,0,,0,user,1,9,0.1,0.1,0,0\n\
              1100000,,7,0,42,1,user,1,9,0.1,0.1,0,0\n\
              1200000,,7,0,42,12,user,1,9,0.1,0.1,0,0\n\
              -5,,7,0,42,4,user,1,9,0.1,0.1,0,0\n\
              1900000,,7,0,42,4,user,1,9,0.1,0.1,0,0\n",
        )
        .unwrap();
    drop(tasks);
    let out_dir = dir.path().join("tables");
    let summary = convert("google2011", &input, &out_dir);
    assert!(summary.contains("3 skipped"), "{summary}");
    assert!(
        summary.contains("task_events/part-00000-of-00500.csv:3"),
        "{summary}"
    );
    assert!(
        summary.contains("task_events/part-00000-of-00500.csv:4"),
        "{summary}"
    );
    assert!(
        summary.contains("job_events/part-00000-of-00500.csv:3"),
        "{summary}"
    );
    let rows = sql_json(&out_dir, "SELECT runtime_us FROM tasks");
    assert_eq!(rows, vec![json!({"runtime_us": 800000})]);
}

/// Statements piped in run in order, each result printed; one that fails
/// is named by its line and the rest still run; the exit says one failed.
#[test]
fn piped_statements_run_in_order_and_a_failure_is_named_and_exits_non_zero() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let mut child = Command::new(jobcast_tests::jobcast_bin())
        .args([
            "sql",
            "--data",
            dir.path().to_str().unwrap(),
            "--format",
            "csv",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(
            b"SELECT count(*) AS n\n  FROM jobs;\nSELECT nope FROM jobs;\nSELECT 1 AS one;\n",
        )
        .unwrap();
    let out = child.wait_with_output().unwrap();
    // Every statement runs; the failing one is named by its line, and the
    // exit says that one failed.
    assert!(!out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "n\n406\none\n1\n");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("stdin:3: ") && stderr.contains("No field named nope"),
        "{stderr}"
    );
}

#[test]
fn the_documented_queries_run() {
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let script = repo().join("docs/queries.sql");
    let out = jobcast_ok(&[
        "sql",
        "--data",
        dir.path().to_str().unwrap(),
        "--format",
        "csv",
        "--file",
        script.to_str().unwrap(),
    ]);
    // One header per query, in the order of docs/queries.sql.
    let headers: Vec<&str> = out
        .lines()
        .filter(|l| {
            l.starts_with("scheduling_class,")
                || l.starts_with("tasks_per_job,")
                || l.starts_with("jobs,")
                || l.starts_with("last_end,")
        })
        .collect();
    assert_eq!(
        headers,
        vec![
            "scheduling_class,jobs,p10_s,p50_s,p90_s",
            "tasks_per_job,jobs,pct",
            "jobs,p50_cov,p90_cov,p50_cov_3pct,p90_cov_3pct",
            "jobs,p50_cov,p90_cov",
            "last_end,tasks,evictions,mean_attempts",
        ],
        "{out}"
    );
    // Q2's shares add up to 100%.
    let q2: f64 = out
        .lines()
        .skip_while(|l| !l.starts_with("tasks_per_job,"))
        .skip(1)
        .take_while(|l| !l.is_empty() && !l.starts_with("WITH"))
        .filter_map(|l| l.rsplit(',').next()?.parse::<f64>().ok())
        .sum();
    assert!((q2 - 100.0).abs() < 0.5, "{q2}\n{out}");
}

/// Q4's history self-joins (equal names, a 3-day window) run as band
/// joins, with the answer of DataFusion's hash join: the same query with
/// each range's `b.end_time_us` cast to a float (exact for microsecond
/// times) is no band join.
#[test]
fn the_history_windows_of_q4_are_band_joins_with_the_hash_joins_answer() {
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let data = dir.path().to_str().unwrap();
    let queries = std::fs::read_to_string(repo().join("docs/queries.sql")).unwrap();
    let start = queries.find("-- Q4").expect("docs/queries.sql has Q4");
    let q4: String = queries[start..]
        .lines()
        .filter(|l| !l.starts_with("--"))
        .take_while(|l| !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    let sql = |query: &str| jobcast_ok(&["sql", "--data", data, "--format", "csv", query]);
    let explained = sql(&format!("EXPLAIN {q4}"));
    assert_eq!(explained.matches("BandJoinExec").count(), 3, "{explained}");
    // Every job's CoV, not Q4's approximate percentiles (their last digit
    // depends on the order partitions finish in).
    let per_job = format!(
        "{}SELECT job_id, round(cov, 6) AS cov FROM best ORDER BY job_id",
        &q4[..q4
            .rfind("SELECT count(*) AS jobs")
            .expect("Q4 ends in its summary")]
    );
    let hashed = per_job
        .replace("b.end_time_us <", "CAST(b.end_time_us AS DOUBLE) <")
        .replace("b.end_time_us >=", "CAST(b.end_time_us AS DOUBLE) >=");
    assert_ne!(hashed, per_job);
    let explained = sql(&format!("EXPLAIN {hashed}"));
    assert!(!explained.contains("BandJoinExec"), "{explained}");
    let answer = sql(&per_job);
    assert!(answer.starts_with("job_id,cov\n"), "{answer}");
    assert!(
        answer.lines().count() > 100,
        "too few jobs with a history: {answer}"
    );
    assert_eq!(answer, sql(&hashed));
}

#[test]
fn timing_goes_to_stderr_once_per_statement() {
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let data = dir.path().to_str().unwrap();
    let script = dir.path().join("two.sql");
    std::fs::write(
        &script,
        "SELECT count(*) AS n FROM jobs;\nSELECT count(*) AS n FROM tasks;\n",
    )
    .unwrap();
    let script = script.to_str().unwrap();
    let plain = jobcast_ok(&["sql", "--data", data, "--format", "csv", "--file", script]);
    let out = jobcast(&[
        "sql", "--data", data, "--format", "csv", "--file", script, "--timing",
    ]);
    assert!(out.status.success());
    // The results are untouched by --timing.
    assert_eq!(String::from_utf8_lossy(&out.stdout), plain);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let times: Vec<f64> = stderr
        .lines()
        .filter_map(|l| l.strip_prefix("Time: ")?.strip_suffix(" ms")?.parse().ok())
        .collect();
    assert_eq!(times.len(), 2, "{stderr}");
    assert!(times.iter().all(|&ms| ms > 0.0), "{stderr}");

    let out = jobcast(&["sql", "--data", data, "--timing", "SELECT 1 AS one"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).starts_with("Time: "),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A conversion that fails (a gzip part cut short) leaves the tables of
/// the conversion before it as they were, byte for byte, with nothing of
/// its own beside them, and names what failed; empty input converts with
/// a warning.
#[test]
fn a_failed_conversion_leaves_the_previous_tables_whole() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("tables");
    convert_excerpt(&out);
    let listing = |dir: &std::path::Path| -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                (
                    e.file_name().to_string_lossy().into_owned(),
                    std::fs::read(e.path()).unwrap(),
                )
            })
            .collect();
        files.sort();
        files
    };
    let before = listing(&out);
    assert_eq!(before.len(), 4, "four tables");

    // A copy of the excerpt with one task_events part cut in half.
    let excerpt = repo().join("tests/data/google2011-excerpt");
    let copy = dir.path().join("excerpt");
    for sub in ["job_events", "task_events"] {
        std::fs::create_dir_all(copy.join(sub)).unwrap();
        for entry in std::fs::read_dir(excerpt.join(sub)).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), copy.join(sub).join(entry.file_name())).unwrap();
        }
    }
    let cut = std::fs::read_dir(copy.join("task_events"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .unwrap();
    let bytes = std::fs::read(&cut).unwrap();
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    let failed = jobcast(&[
        "convert",
        "--format",
        "google2011",
        "--input",
        copy.to_str().unwrap(),
        "--output",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(!failed.status.success(), "{stderr}");
    let name = cut.file_name().unwrap().to_string_lossy();
    assert!(stderr.contains(&*name), "the error names {name}: {stderr}");
    assert!(listing(&out) == before, "the previous tables changed");

    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "").unwrap();
    let converted = jobcast(&[
        "convert",
        "--format",
        "jsonl",
        "--input",
        empty.to_str().unwrap(),
        "--output",
        dir.path().join("none").to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&converted.stderr);
    assert!(converted.status.success(), "{stderr}");
    assert!(
        stderr.contains("warning") && stderr.contains("no jsonl events"),
        "{stderr}"
    );
}

/// The shell runs SQL as DuckDB's does: several statements on the command
/// line or in a file run in order, each result printed (piped in:
/// `piped_statements_run_in_order_…`); the
/// failing one is named by its line, its error printed once, the others
/// still run and the exit is non-zero; `SHOW TABLES` and `.tables` list
/// the tables; JSON keeps nulls; a table ends its line.
#[test]
fn the_sql_shell_runs_statements_as_duckdbs_does() {
    let dir = tempfile::tempdir().unwrap();
    convert_excerpt(dir.path());
    let data = dir.path().to_str().unwrap();
    let csv = |query: &str| jobcast_ok(&["sql", "--data", data, "--format", "csv", query]);

    assert_eq!(csv("SELECT 1 AS a; SELECT 2 AS b"), "a\n1\nb\n2\n");
    let tables = csv("SHOW TABLES");
    assert!(tables.lines().any(|l| l.contains(",jobs,")), "{tables}");
    assert_eq!(
        jobcast_ok(&["sql", "--data", data, ".tables"]),
        "events\njobs\ntasks\nmachines\n"
    );
    let json = jobcast_ok(&[
        "sql",
        "--data",
        data,
        "--format",
        "json",
        "SELECT CAST(NULL AS BIGINT) AS x, 1 AS y",
    ]);
    assert_eq!(json, "[{\"x\":null,\"y\":1}]\n");
    assert!(jobcast_ok(&["sql", "--data", data, "SELECT 1 AS one"]).ends_with("+\n"));

    let script = dir.path().join("three.sql");
    std::fs::write(
        &script,
        "SELECT 1 AS a;\n-- the second fails\nSELECT nope FROM jobs;\nSELECT 3 AS c;\n",
    )
    .unwrap();
    let out = jobcast(&[
        "sql",
        "--data",
        data,
        "--format",
        "csv",
        "--file",
        script.to_str().unwrap(),
    ]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stdout.contains("a\n1\n") && stdout.contains("c\n3\n"),
        "{stdout}"
    );
    assert_eq!(
        stderr.lines().filter(|l| l.starts_with("error:")).count(),
        1,
        "{stderr}"
    );
    assert!(
        stderr.contains("three.sql:3: ") && stderr.contains("nope"),
        "{stderr}"
    );
}
