//! The Google clusterdata-2019 adapter on small hand-written exports that
//! follow `clusterdata_trace_format_v3.proto` (`tests/data/google2019/`):
//! JSON lines and CSV, plain and gzip, several parts per table.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use jobcast_ingest::event::{Event, JobEnded, JobOutcome, JobSubmitted, TaskEvent, TaskKind};
use jobcast_ingest::{Diagnostics, Format, Trace, decode, google2019};
use proptest::prelude::*;

mod common;
use common::{Skip, counts, skip, skipped_rows};

fn data(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/google2019")
        .join(dir)
}

fn read(trace: Trace) -> (Vec<Event>, Diagnostics) {
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    check(&events);
    (events, diagnostics)
}

/// Valid on the wire, in time order, every task event after its job's
/// submit, and each job submitted and ended at most once.
fn check(events: &[Event]) {
    let mut submitted = HashMap::new();
    let mut ended = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        decode(e.to_json().as_bytes()).unwrap();
        if i > 0 {
            assert!(events[i - 1].time_us() <= e.time_us(), "time order at {i}");
        }
        match e {
            Event::JobSubmitted(j) => assert!(submitted.insert(j.job_id, i).is_none(), "{e:?}"),
            Event::Task(t) => assert!(submitted.contains_key(&t.job_id), "{e:?}"),
            Event::JobEnded(j) => {
                assert!(submitted.contains_key(&j.job_id), "{e:?}");
                assert!(ended.insert(j.job_id, i).is_none(), "{e:?}");
            }
            Event::Machine(_) => panic!("no machine events"),
        }
    }
}

/// `names` are (user, job name, logical name); `request` is (cpu, memory).
fn job(
    time_us: u64,
    job_id: u64,
    (user, name, logical): (&str, &str, &str),
    scheduling_class: u8,
    priority: u32,
    (cpu, mem): (f64, f64),
    num_tasks: u32,
) -> Event {
    Event::JobSubmitted(JobSubmitted {
        user: user.into(),
        job_name: name.into(),
        logical_name: logical.into(),
        scheduling_class,
        priority,
        cpu_request: cpu,
        mem_request: mem,
        ..JobSubmitted::new(job_id, time_us, num_tasks)
    })
}

fn task(
    time_us: u64,
    job_id: u64,
    task_index: u32,
    kind: TaskKind,
    machine_id: Option<u64>,
) -> Event {
    Event::Task(TaskEvent {
        time_us,
        job_id,
        task_index,
        kind,
        machine_id,
        stage: None,
    })
}

fn end(time_us: u64, job_id: u64, outcome: JobOutcome) -> Event {
    Event::JobEnded(JobEnded {
        time_us,
        job_id,
        outcome,
    })
}

use TaskKind::{Evict, Fail, Finish, Kill, Lost, Schedule, Submit, Update};

/// Skipped rows by file and line (parts are read as the merge needs them,
/// so the order of recording is not the order of the files).
fn skips(diags: &Diagnostics) -> Vec<Skip> {
    let mut skips = skipped_rows(diags);
    skips.sort();
    skips
}

#[test]
fn json_lines_export() {
    let (events, diags) = read(jobcast_ingest::open(Format::Google2019, &data("jsonl")).unwrap());
    let expected = vec![
        // Submitted before the trace (time 0); two instances, the first
        // request is instance 0's SUBMIT.
        job(
            0,
            100,
            ("alice", "wc", "wc-logical"),
            2,
            200,
            (0.5, 0.25),
            2,
        ),
        task(1, 100, 0, Submit, None),
        task(2, 100, 1, Submit, None),
        task(6, 100, 0, Schedule, Some(7)),
        task(7, 100, 1, Schedule, Some(8)),
        job(20, 300, ("carol", "n3", "l3"), 1, 100, (0.125, 0.0), 1),
        task(21, 300, 0, Submit, None),
        task(22, 300, 0, Schedule, None),
        // The job's SUBMIT before its instance's at the same time.
        job(30, 500, ("dave", "n5", "l5"), 3, 0, (0.0, 0.0), 1),
        task(30, 500, 0, Submit, None),
        // No SUBMIT for 400: synthesised from its first instance event, with
        // the names and priority of its (later) collection event.
        job(50, 400, ("bob", "n4", "l4"), 1, 25, (0.2, 0.1), 2),
        task(50, 400, 3, Submit, None),
        task(50, 400, 5, Submit, None),
        task(55, 400, 5, Update, None),
        task(60, 400, 3, Schedule, Some(1)),
        task(100, 100, 1, Evict, Some(8)),
        task(110, 100, 1, Schedule, Some(9)),
        task(120, 100, 1, Update, Some(9)),
        task(400, 100, 0, Finish, Some(7)),
        // Task events before the job end at the same time.
        task(600, 500, 0, Finish, Some(2)),
        end(600, 500, JobOutcome::Finish),
        task(690, 400, 3, Fail, Some(1)),
        task(695, 400, 5, Lost, None),
        end(700, 400, JobOutcome::Fail),
        task(800, 300, 0, Kill, None),
        end(800, 300, JobOutcome::Kill),
        task(890, 100, 1, Finish, Some(9)),
        end(900, 100, JobOutcome::Finish),
    ];
    assert_eq!(events.len(), expected.len(), "{events:#?}");
    for (i, (got, want)) in events.iter().zip(&expected).enumerate() {
        assert_eq!(got, want, "event {i}");
    }

    assert_eq!(diags.rows_read(), 9 + 6 + 14 + 17);
    let file = "instance_events-000000000001.json";
    assert_eq!(
        skips(&diags),
        vec![
            skip(file, 2, "bad_json"),
            skip(file, 3, "bad_number"),
            skip(file, 4, "missing_field"),
            skip(file, 5, "bad_event_type"),
            skip(file, 6, "out_of_range"),
            skip(file, 7, "bad_field"),
            skip(file, 12, "out_of_order"),
        ]
    );
    assert_eq!(diags.skipped_total(), 7);
    assert_eq!(
        diags.notes(),
        counts(&[
            ("alloc set collection events dropped", 2),
            ("alloc set instance events dropped", 1),
            ("collection ENABLE events dropped", 1),
            ("collection SCHEDULE events dropped", 1),
            ("instance ENABLE events dropped", 1),
            ("instance QUEUE events dropped", 1),
            ("job ends without a submit dropped", 1),
            ("job submits synthesised at a first instance event", 1),
            ("repeated job ends dropped", 1),
            ("repeated job submits dropped", 1),
            ("rows after the end of the trace dropped", 2),
            ("rows with missing_type set (kept)", 1),
            ("start_after_collection_ids ignored", 1),
        ])
    );
    // Every file is read twice: once to count instances, once to stream.
    let paths: Vec<PathBuf> = std::fs::read_dir(data("jsonl"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let size: u64 = paths
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert_eq!(diags.bytes_read(), 2 * size);
}

#[test]
fn csv_export() {
    let (events, diags) = read(google2019::open(&data("csv")).unwrap());
    let expected = vec![
        job(10, 7, ("u7", "n7", "l7"), 1, 100, (0.1, 0.2), 2),
        // Equal times across parts: the earlier part first.
        task(11, 7, 0, Submit, None),
        task(11, 7, 1, Submit, None),
        task(12, 7, 0, Schedule, Some(3)),
        task(13, 7, 1, Schedule, Some(4)),
        job(15, 8, ("u8", "n8", "l8"), 0, 0, (0.3, 0.4), 1),
        task(15, 8, 0, Submit, None),
        task(20, 8, 0, Schedule, Some(5)),
        task(50, 7, 0, Finish, Some(3)),
        task(90, 8, 0, Kill, Some(5)),
        end(90, 8, JobOutcome::Kill),
        task(100, 7, 1, Finish, Some(4)),
        end(100, 7, JobOutcome::Finish),
    ];
    assert_eq!(events, expected);
    assert_eq!(diags.rows_read(), 5 + 8 + 7);
    assert_eq!(
        skips(&diags),
        vec![
            skip("instance_events-0.csv", 6, "bad_number"),
            skip("instance_events-0.csv", 7, "columns"),
            skip("instance_events-1.csv.gz", 4, "missing_field"),
            skip("instance_events-1.csv.gz", 5, "out_of_order"),
            skip("instance_events-1.csv.gz", 6, "encoding"),
        ]
    );
    assert_eq!(
        diags.notes(),
        counts(&[
            ("collection SCHEDULE events dropped", 1),
            ("rows after the end of the trace dropped", 1),
        ])
    );
}

#[test]
fn one_file_is_an_input() {
    let (events, diags) = read(google2019::open(&data("csv/collection_events.csv.gz")).unwrap());
    assert_eq!(
        events,
        vec![
            job(10, 7, ("u7", "n7", "l7"), 1, 100, (0.0, 0.0), 0),
            job(15, 8, ("u8", "n8", "l8"), 0, 0, (0.0, 0.0), 0),
            end(90, 8, JobOutcome::Kill),
            end(100, 7, JobOutcome::Finish),
        ]
    );
    assert_eq!(diags.rows_read(), 5);
}

#[test]
fn unusable_inputs_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    assert!(google2019::open(dir.path()).is_err(), "no files");
    assert!(google2019::open(&dir.path().join("absent")).is_err());
    let other = dir.path().join("machine_events.csv");
    std::fs::write(&other, "time,machine_id\n").unwrap();
    assert!(google2019::open(&other).is_err());

    let headless = dir.path().join("instance_events-0.csv");
    std::fs::write(&headless, "time,type,collection_id,machine_id\n1,0,2,3\n").unwrap();
    let err = google2019::open(dir.path()).err().unwrap();
    assert!(err.to_string().contains("`instance_index`"), "{err}");
}

/// Field values, valid and not.
fn value() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => (0u64..40).prop_map(|n| n.to_string()),
        1 => Just("\"7\"".to_owned()),
        1 => Just("null".to_owned()),
        1 => Just("-1".to_owned()),
        1 => Just("9223372036854775807".to_owned()),
        1 => Just("1e400".to_owned()),
        1 => Just("\"x\"".to_owned()),
        1 => Just("[]".to_owned()),
        1 => Just("{\"cpus\":0.5}".to_owned()),
    ]
}

/// A JSON line with some of the fields, mostly sensible values.
fn line() -> impl Strategy<Value = String> {
    (
        0u64..50,
        0u8..12,
        0u64..4,
        0u32..4,
        prop::option::of(0u8..3),
        proptest::collection::vec(
            (
                prop::sample::select(vec![
                    "machine_id",
                    "priority",
                    "scheduling_class",
                    "missing_type",
                    "resource_request",
                    "user",
                    "time",
                    "start_after_collection_ids",
                ]),
                value(),
            ),
            0..3,
        ),
        any::<bool>(),
    )
        .prop_map(|(time, ty, coll, index, ctype, extra, garble)| {
            let mut fields = vec![
                format!("\"time\":{time}"),
                format!("\"type\":{ty}"),
                format!("\"collection_id\":{coll}"),
                format!("\"instance_index\":{index}"),
            ];
            if let Some(c) = ctype {
                fields.push(format!("\"collection_type\":{c}"));
            }
            for (k, v) in extra {
                fields.push(format!("\"{k}\":{v}"));
            }
            let line = format!("{{{}}}", fields.join(","));
            if garble {
                line.replacen(',', ";", 1)
            } else {
                line
            }
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Arbitrary (partly unsorted, partly broken) parts: no panic, and the
    /// output keeps every invariant of `check`.
    #[test]
    fn arbitrary_parts_never_panic(
        parts in proptest::collection::vec((any::<bool>(), proptest::collection::vec(line(), 0..30)), 1..4)
    ) {
        let dir = tempfile::tempdir().unwrap();
        for (i, (collections, mut lines)) in parts.into_iter().enumerate() {
            lines.sort_by_key(|l| l.len() % 3 == 0);
            let table = if collections { "collection_events" } else { "instance_events" };
            std::fs::write(dir.path().join(format!("{table}-{i}.json")), lines.join("\n")).unwrap();
        }
        let trace = google2019::open(dir.path()).unwrap();
        let diags = trace.diagnostics().clone();
        let events: Vec<Event> = trace.map(Result::unwrap).collect();
        check(&events);
        prop_assert!(diags.skipped_total() <= diags.rows_read());
    }
}
