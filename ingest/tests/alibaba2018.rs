//! The Alibaba v2018 adapter on small hand-written files that follow the
//! published schema (`tests/data/alibaba2018/`).

use std::path::{Path, PathBuf};

use jobcast_ingest::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, Stage, TaskEvent, TaskKind,
};
use jobcast_ingest::{Diagnostics, Format, Trace, alibaba2018, decode};
use proptest::prelude::*;

mod common;
use common::{counts, skip, skipped_rows};

fn data(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/alibaba2018")
        .join(dir)
}

fn read(trace: Trace) -> (Vec<Event>, Diagnostics) {
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    for e in &events {
        let mut decoded = decode(e.to_json().as_bytes()).unwrap();
        // serde_json (without `float_roundtrip`) may read a float back one
        // ulp off; everything else must survive exactly.
        if let (Event::JobSubmitted(d), Event::JobSubmitted(j)) = (&mut decoded, e) {
            let close = |a: f64, b: f64| (a - b).abs() <= b.abs() * 1e-15;
            assert!(close(d.cpu_request, j.cpu_request) && close(d.mem_request, j.mem_request));
            (d.cpu_request, d.mem_request) = (j.cpu_request, j.mem_request);
        }
        assert_eq!(decoded, *e, "every event is valid on the wire");
    }
    assert!(
        events.windows(2).all(|w| w[0].time_us() <= w[1].time_us()),
        "time order"
    );
    (events, diagnostics)
}

const S: u64 = 1_000_000;

fn stage(id: u32, parents: &[u32], num_tasks: u32, name: &str) -> Stage {
    Stage {
        id,
        parents: parents.to_vec(),
        num_tasks,
        name: Some(name.to_owned()),
    }
}

fn job(
    secs: u64,
    job_id: u64,
    name: &str,
    cpu: f64,
    mem: f64,
    num_tasks: u32,
    stages: Vec<Stage>,
) -> Event {
    Event::JobSubmitted(JobSubmitted {
        job_name: name.to_owned(),
        logical_name: name.to_owned(),
        cpu_request: cpu,
        mem_request: mem,
        stages: Some(stages),
        ..JobSubmitted::new(job_id, secs * S, num_tasks)
    })
}

fn task(
    secs: u64,
    job_id: u64,
    task_index: u32,
    kind: TaskKind,
    machine_id: Option<u64>,
    stage: u32,
) -> Event {
    Event::Task(TaskEvent {
        time_us: secs * S,
        job_id,
        task_index,
        kind,
        machine_id,
        stage: Some(stage),
    })
}

fn end(secs: u64, job_id: u64, outcome: JobOutcome) -> Event {
    Event::JobEnded(JobEnded {
        time_us: secs * S,
        job_id,
        outcome,
    })
}

fn fnv1a(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

use TaskKind::{Fail, Finish, Schedule, Submit};

#[test]
fn tasks_and_instances() {
    let (events, diags) = read(jobcast_ingest::open(Format::Alibaba2018, &data("full")).unwrap());
    let anon = fnv1a("anon");
    let host7 = Some(fnv1a("host7"));
    let indep = "task_Nzg3ODAwNTc5NjMyNDY2NDk0Nw==";
    let expected = vec![
        // A job named outside the `j_<n>` form, with no batch_task rows.
        job(50, anon, "anon", 0.0, 0.0, 1, vec![stage(1, &[], 1, "M1")]),
        task(50, anon, 0, Submit, None, 1),
        task(50, anon, 0, Schedule, host7, 1),
        task(60, anon, 0, Finish, host7, 1),
        end(60, anon, JobOutcome::Finish),
        // A DAG job: M1 (2 instances), M2, R3_1_2.
        job(
            100,
            1,
            "j_1",
            2.0,
            0.8,
            4,
            vec![
                stage(1, &[], 2, "M1"),
                stage(2, &[], 1, "M2"),
                stage(3, &[1, 2], 1, "R3_1_2"),
            ],
        ),
        task(100, 1, 2, Submit, None, 2),
        task(100, 1, 2, Schedule, Some(11), 2),
        task(101, 1, 0, Submit, None, 1),
        task(101, 1, 0, Schedule, Some(12), 1),
        task(102, 1, 1, Submit, None, 1),
        task(102, 1, 1, Schedule, Some(11), 1),
        // An independent task with a failed instance.
        job(105, 2, "j_2", 0.5, 0.2, 2, vec![stage(1, &[], 2, indep)]),
        task(105, 2, 0, Submit, None, 1),
        task(105, 2, 0, Schedule, Some(14), 1),
        task(106, 2, 1, Submit, None, 1),
        task(106, 2, 1, Schedule, Some(15), 1),
        task(118, 1, 2, Finish, Some(11), 2),
        task(125, 1, 1, Finish, Some(11), 1),
        task(128, 1, 0, Finish, Some(12), 1),
        task(140, 1, 3, Submit, None, 3),
        task(140, 1, 3, Schedule, Some(13), 3),
        task(140, 2, 0, Finish, Some(14), 1),
        task(150, 2, 1, Fail, Some(15), 1),
        end(150, 2, JobOutcome::Fail),
        task(160, 1, 3, Finish, Some(13), 3),
        end(160, 1, JobOutcome::Finish),
        // Censored: one instance running, one terminated without an end.
        job(
            200,
            3,
            "j_3",
            1.0,
            0.39,
            3,
            vec![stage(1, &[], 1, "M1"), stage(2, &[1], 2, "R2_1")],
        ),
        task(200, 3, 0, Submit, None, 1),
        task(200, 3, 0, Schedule, Some(1), 1),
        task(210, 3, 0, Finish, Some(1), 1),
        task(215, 3, 1, Submit, None, 2),
        task(215, 3, 1, Schedule, Some(2), 2),
        task(216, 3, 2, Submit, None, 2),
        task(216, 3, 2, Schedule, Some(3), 2),
        // A cycle (1 <-> 2, broken at 2 -> 1), a `Stg` suffix, a trailing
        // underscore, and an instance that failed once and was retried.
        job(
            300,
            4,
            "j_4",
            1.0,
            0.2,
            4,
            vec![
                stage(1, &[2], 1, "M1_2"),
                stage(2, &[], 1, "M2_1"),
                stage(3, &[1, 2], 1, "J3_1_2_Stg4"),
                stage(4, &[3], 1, "R4_3_"),
            ],
        ),
        task(300, 4, 0, Submit, None, 1),
        task(300, 4, 0, Schedule, Some(4), 1),
        task(300, 4, 1, Submit, None, 2),
        task(300, 4, 1, Schedule, Some(4), 2),
        task(305, 4, 0, Finish, Some(4), 1),
        task(306, 4, 1, Finish, Some(4), 2),
        task(307, 4, 2, Submit, None, 3),
        task(307, 4, 2, Schedule, Some(5), 3),
        task(310, 4, 2, Finish, Some(5), 3),
        task(311, 4, 3, Submit, None, 4),
        task(311, 4, 3, Schedule, Some(6), 4),
        task(315, 4, 3, Fail, Some(6), 4),
        task(320, 4, 3, Schedule, Some(6), 4),
        task(330, 4, 3, Finish, Some(6), 4),
        end(330, 4, JobOutcome::Finish),
    ];
    assert_eq!(events.len(), expected.len(), "{events:#?}");
    for (i, (got, want)) in events.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "event {i}");
    }

    assert_eq!(diags.rows_read(), 13 + 13 + 10);
    assert_eq!(
        diags.skipped(),
        counts(&[
            ("bad_number", 2),
            ("bad_status", 1),
            ("columns", 2),
            ("duplicate_task", 1),
            ("encoding", 1),
            ("end_before_start", 1),
            ("missing_field", 1),
            ("missing_time", 1),
            ("zero_time", 1),
        ])
    );
    // In the order the rows were skipped.
    assert_eq!(
        skipped_rows(&diags),
        vec![
            skip("batch_task.csv", 11, "duplicate_task"),
            skip("batch_task.csv", 12, "bad_number"),
            skip("batch_task.csv", 13, "columns"),
            skip("batch_instance-part2.csv.gz", 9, "encoding"),
            skip("batch_instance.csv", 7, "columns"),
            skip("batch_instance.csv", 8, "missing_time"),
            skip("batch_instance.csv", 9, "zero_time"),
            skip("batch_instance.csv", 10, "end_before_start"),
            skip("batch_instance.csv", 11, "bad_number"),
            skip("batch_instance.csv", 12, "bad_status"),
            skip("batch_instance.csv", 13, "missing_field"),
        ]
    );
    assert_eq!(
        diags.notes(),
        counts(&[
            ("ended runs without end_time: censored", 1),
            ("job j_4: dependency cycle 1 -> 2 -> 1", 1),
            ("job names not of the form j_<n>: ids are FNV-1a hashes", 1),
            (
                "machine names not of the form m_<n>: ids are FNV-1a hashes",
                1,
            ),
            ("negative plan values ignored", 1),
            ("tasks without a batch_task row: requests unknown", 1),
        ])
    );
    assert!(
        diags.summary().contains("batch_instance.csv:10"),
        "{}",
        diags.summary()
    );
    assert_eq!(
        diags.bytes_read(),
        std::fs::metadata(data("full/batch_instance.csv"))
            .unwrap()
            .len()
            + {
                let t = std::fs::metadata(data("full/batch_task.csv"))
                    .unwrap()
                    .len();
                let g = std::fs::metadata(data("full/batch_instance-part2.csv.gz"))
                    .unwrap()
                    .len();
                t + g
            }
    );
}

#[test]
fn task_rows_stand_in_for_instances() {
    let (events, diags) = read(alibaba2018::open(&data("tasks_only")).unwrap());
    let expected = vec![
        job(
            10,
            7,
            "j_7",
            1.5,
            0.6,
            5,
            vec![stage(1, &[], 2, "M1"), stage(2, &[1], 3, "R2_1")],
        ),
        task(10, 7, 0, Submit, None, 1),
        task(10, 7, 1, Submit, None, 1),
        task(10, 7, 0, Schedule, None, 1),
        task(10, 7, 1, Schedule, None, 1),
        // A DAG task and an independent one: the latter gets a fresh id.
        job(
            11,
            8,
            "j_8",
            0.5,
            0.1,
            2,
            vec![stage(1, &[], 1, "M1"), stage(2, &[], 1, "task_abc==")],
        ),
        task(11, 8, 0, Submit, None, 1),
        task(11, 8, 0, Schedule, None, 1),
        task(12, 8, 1, Submit, None, 2),
        task(12, 8, 1, Schedule, None, 2),
        task(15, 8, 0, Finish, None, 1),
        task(20, 7, 0, Finish, None, 1),
        task(20, 7, 1, Finish, None, 1),
        task(25, 7, 2, Submit, None, 2),
        task(25, 7, 3, Submit, None, 2),
        task(25, 7, 4, Submit, None, 2),
        task(25, 7, 2, Schedule, None, 2),
        task(25, 7, 3, Schedule, None, 2),
        task(25, 7, 4, Schedule, None, 2),
        // Zero-length instances: submit, schedule, finish at one time.
        job(
            30,
            10,
            "j_10",
            0.5,
            0.1,
            5,
            vec![
                stage(1, &[], 4, "M1"),
                stage(2, &[], 0, "M2"),
                stage(3, &[], 1, "M3"),
            ],
        ),
        task(30, 10, 0, Submit, None, 1),
        task(30, 10, 1, Submit, None, 1),
        task(30, 10, 2, Submit, None, 1),
        task(30, 10, 3, Submit, None, 1),
        task(30, 10, 0, Schedule, None, 1),
        task(30, 10, 1, Schedule, None, 1),
        task(30, 10, 2, Schedule, None, 1),
        task(30, 10, 3, Schedule, None, 1),
        task(30, 10, 0, Finish, None, 1),
        task(30, 10, 1, Finish, None, 1),
        task(30, 10, 2, Finish, None, 1),
        task(30, 10, 3, Finish, None, 1),
        task(33, 10, 4, Submit, None, 3),
        task(33, 10, 4, Schedule, None, 3),
        task(40, 7, 2, Fail, None, 2),
        task(40, 7, 3, Fail, None, 2),
        task(40, 7, 4, Fail, None, 2),
        end(40, 7, JobOutcome::Fail),
    ];
    assert_eq!(events, expected);
    assert_eq!(diags.rows_read(), 8);
    assert_eq!(diags.skipped(), counts(&[("zero_time", 1)]));
    assert_eq!(diags.examples()[0].at.line, 5);
    assert_eq!(
        diags.notes(),
        counts(&[("ended runs without end_time: censored", 1)])
    );

    // The file itself is an input too.
    let (same, _) = read(alibaba2018::open(&data("tasks_only/batch_task.csv")).unwrap());
    assert_eq!(same, expected);

    // So is an extract under another name with a header line and whole
    // numbers printed as floats, as the shared DAG selection is.
    let original = std::fs::read_to_string(data("tasks_only/batch_task.csv")).unwrap();
    let mut extract = String::from(
        "task_name,instance_num,job_name,task_type,status,start_time,end_time,plan_cpu,plan_mem\n",
    );
    for line in original.lines() {
        let fields: Vec<String> = line
            .split(',')
            .enumerate()
            .map(|(i, f)| match i {
                1 | 5 | 6 if !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()) => {
                    format!("{f}.0")
                }
                _ => f.to_owned(),
            })
            .collect();
        extract += &(fields.join(",") + "\n");
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("selected_DAGs.csv");
    std::fs::write(&path, extract).unwrap();
    let (same, diags) = read(alibaba2018::open(&path).unwrap());
    assert_eq!(same, expected);
    assert_eq!(diags.rows_read(), 8, "the header is not a row");
    let notes = diags.notes();
    assert_eq!(notes.get("header lines skipped"), Some(&1), "{notes:?}");
    assert!(
        notes.contains_key("whole numbers printed as floats (`1.0`) read as whole numbers"),
        "{notes:?}"
    );
}

#[test]
fn inputs_that_are_not_a_trace_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(alibaba2018::open(dir.path()).is_err(), "no files");
    assert!(alibaba2018::open(&dir.path().join("absent")).is_err());
    let other = dir.path().join("machine_meta.csv");
    std::fs::write(&other, "m_1,0,1,1,96,100,USING\n").unwrap();
    assert!(alibaba2018::open(&other).is_err());
    std::fs::write(dir.path().join("batch_task.tar.gz"), b"\x1f\x8b").unwrap();
    let err = alibaba2018::open(dir.path()).err().unwrap();
    assert!(err.to_string().contains("tar archive"), "{err}");
}

/// Field values, valid and not, for rows of the right shape.
fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("0".to_owned()),
        Just("Terminated".to_owned()),
        Just("Failed".to_owned()),
        Just("Running".to_owned()),
        "[0-9]{1,3}",
        "1[0-9]{19}",
        "-[0-9]",
        "j_[0-9]",
        "m_[0-9]{1,2}",
        "[MRJ][0-9](_[0-9]){0,3}_?(_Stg[0-9])?",
        "task_[a-z=]{3}",
        "\\PC{0,4}",
    ]
}

/// Mostly `valid`, sometimes any field value.
fn or_junk(valid: impl Strategy<Value = String> + 'static) -> BoxedStrategy<String> {
    prop_oneof![9 => valid, 1 => field()].boxed()
}

/// Rows over a few jobs, tasks and instances, mostly valid, so that jobs
/// with DAGs, retries, censoring and clashes get built.
fn rows(instances: bool) -> impl Strategy<Value = String> {
    let status = || or_junk("Terminated|Failed|Running|Waiting".prop_map(String::from));
    let time = || or_junk((1u32..60).prop_map(|t| t.to_string()));
    let end = || {
        or_junk(prop_oneof![
            Just(String::new()),
            (1u32..80).prop_map(|t| t.to_string())
        ])
    };
    let task = || or_junk("[MR][1-4](_[1-4]){0,2}_?|task_[ab]".prop_map(String::from));
    let job = || or_junk("j_[1-3]|job[ab]".prop_map(String::from));
    let row = if instances {
        (
            or_junk("ins_[1-3]".prop_map(String::from)),
            task(),
            job(),
            status(),
            time(),
            end(),
            or_junk("m_[1-3]|host".prop_map(String::from)),
        )
            .prop_map(|(i, t, j, s, a, b, m)| format!("{i},{t},{j},1,{s},{a},{b},{m},1,1,,,,"))
            .boxed()
    } else {
        (
            task(),
            or_junk((0u32..4).prop_map(|n| n.to_string())),
            job(),
            status(),
            time(),
            end(),
            or_junk((0u32..300).prop_map(|n| n.to_string())),
        )
            .prop_map(|(t, n, j, s, a, b, c)| format!("{t},{n},{j},1,{s},{a},{b},{c},0.5"))
            .boxed()
    };
    proptest::collection::vec(row, 0..40).prop_map(|rows| rows.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any rows: no panic, events valid, in time order and consistent.
    #[test]
    fn arbitrary_rows_never_panic(tasks in rows(false), instances in rows(true), with_instances in any::<bool>()) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("batch_task.csv"), &tasks).unwrap();
        if with_instances {
            std::fs::write(dir.path().join("batch_instance.csv"), &instances).unwrap();
        }
        let trace = alibaba2018::open(dir.path()).unwrap();
        let (events, diags) = read(trace);
        prop_assert!(diags.skipped_total() <= diags.rows_read());
        // Every task event belongs to a submitted job, within its task count.
        let mut jobs = std::collections::HashMap::new();
        for e in &events {
            match e {
                Event::JobSubmitted(j) => prop_assert!(jobs.insert(j.job_id, j.num_tasks).is_none()),
                Event::Task(t) => prop_assert!(t.task_index < jobs[&t.job_id]),
                Event::JobEnded(j) => prop_assert!(jobs.contains_key(&j.job_id)),
                Event::Machine(_) => prop_assert!(false),
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("batch_task.csv"), &bytes).unwrap();
        std::fs::write(dir.path().join("batch_instance.csv"), &bytes).unwrap();
        let trace = alibaba2018::open(dir.path()).unwrap();
        if bytes.starts_with(&[0x1f, 0x8b]) {
            // A broken gzip stream is an I/O error, reported, not a panic.
            prop_assert!(trace.last().is_some_and(|r| r.is_err()));
        } else {
            read(trace);
        }
    }
}
