//! Every adapter refuses a row whose event would break a canonical limit
//! (`Event::check_limits`, the decoder's own rules): the row is skipped as
//! `out_of_range` with its file and line (or record) and the field, and the
//! rest of the trace still reads. Without this, `jobcast replay` would
//! publish events that the service dead-letters.

use std::path::{Path, PathBuf};

use jobcast_ingest::event::{Event, MAX_STRING_BYTES, decode};
use jobcast_ingest::{Diagnostics, Format, open};

/// A string one byte over the limit.
fn too_long() -> String {
    "u".repeat(MAX_STRING_BYTES + 1)
}

fn write(dir: &Path, name: &str, lines: &[String]) {
    let path = dir.join(name);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Read the whole trace, checking that every event decodes after encoding.
fn read(format: Format, input: &Path) -> (Vec<Event>, Diagnostics) {
    let trace = open(format, input).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    for e in &events {
        decode(e.to_json().as_bytes()).unwrap_or_else(|err| panic!("{err}: {e:?}"));
    }
    (events, diagnostics)
}

/// Exactly one row was skipped, as `out_of_range`, at `file:line`, naming
/// `field`.
fn assert_one_refusal(diagnostics: &Diagnostics, file: &Path, line: u64, field: &str) {
    assert_eq!(diagnostics.skipped_total(), 1, "{}", diagnostics.summary());
    let skipped = &diagnostics.examples()[0];
    assert_eq!(
        (skipped.at.file.as_path(), skipped.at.line),
        (file, line),
        "{}",
        diagnostics.summary()
    );
    assert!(
        skipped
            .reason
            .starts_with(&format!("out_of_range: field `{field}`: 4097 bytes long")),
        "{}",
        skipped.reason
    );
}

fn submitted(events: &[Event]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) => Some(j.job_id),
            _ => None,
        })
        .collect()
}

#[test]
fn google2011_skips_a_job_row_with_a_long_user_and_a_machine_with_a_long_platform() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "job_events/part-00000-of-00001.csv",
        &[
            "0,,10,0,alice,2,wc,wc-l".to_owned(),
            format!("5,,11,0,{},1,sort,sort-l", too_long()),
            "6,,12,0,carol,1,grep,grep-l".to_owned(),
        ],
    );
    write(
        root,
        "task_events/part-00000-of-00001.csv",
        &[
            "1,,10,0,,0,alice,2,9,0.125,0.0625,0.001,0".to_owned(),
            "7,,12,0,,0,carol,1,3,0.25,0.125,0.001,0".to_owned(),
            "9,,12,0,7,1,carol,1,3,0.25,0.125,0.001,0".to_owned(),
        ],
    );
    let (events, diagnostics) = read(Format::Google2011, root);
    assert_one_refusal(
        &diagnostics,
        &root.join("job_events/part-00000-of-00001.csv"),
        2,
        "user",
    );
    assert_eq!(submitted(&events), vec![10, 12]);
    assert_eq!(events.len(), 5);

    write(
        root,
        "machine_events/part-00000-of-00001.csv",
        &[
            "0,7,0,P1,0.5,0.25".to_owned(),
            format!("0,8,0,{},0.5,0.25", too_long()),
        ],
    );
    let (events, diagnostics) = read(Format::Google2011, root);
    assert_eq!(diagnostics.skipped_total(), 2, "{}", diagnostics.summary());
    assert!(
        diagnostics
            .summary()
            .contains("machine_events/part-00000-of-00001.csv:2: out_of_range: field `platform`"),
        "{}",
        diagnostics.summary()
    );
    assert_eq!(
        events
            .iter()
            .filter(|e| matches!(e, Event::Machine(_)))
            .count(),
        1
    );
}

#[test]
fn google2011_names_the_task_row_of_a_refused_synthesised_submit() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write(
        root,
        "job_events/part-00000-of-00001.csv",
        &["0,,10,0,alice,2,wc,wc-l".to_owned()],
    );
    // Job 11 has no SUBMIT row: its submit is synthesised from its first
    // task row, whose user is too long.
    write(
        root,
        "task_events/part-00000-of-00001.csv",
        &[
            "1,,10,0,,0,alice,2,9,0.125,0.0625,0.001,0".to_owned(),
            format!("2,,11,0,,0,{},1,3,0.25,0.125,0.001,0", too_long()),
            "3,,10,0,7,1,alice,2,9,0.125,0.0625,0.001,0".to_owned(),
        ],
    );
    let (events, diagnostics) = read(Format::Google2011, root);
    assert_one_refusal(
        &diagnostics,
        &root.join("task_events/part-00000-of-00001.csv"),
        2,
        "user",
    );
    assert_eq!(submitted(&events), vec![10]);
}

#[test]
fn google2019_skips_a_submit_with_a_long_user_once() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let collection = |time: u64, kind: u8, id: u64, user: &str| {
        format!(
            r#"{{"time":"{time}","type":"{kind}","collection_id":"{id}","collection_type":0,"user":"{user}","collection_name":"n","collection_logical_name":"l"}}"#
        )
    };
    let instance = |time: u64, kind: u8, id: u64| {
        format!(
            r#"{{"time":"{time}","type":"{kind}","collection_id":"{id}","instance_index":0,"resource_request":{{"cpus":0.1,"memory":0.2}}}}"#
        )
    };
    write(
        root,
        "collection_events-0.json",
        &[
            collection(0, 0, 100, "alice"),
            collection(1, 0, 200, &too_long()),
            collection(90, 6, 100, "alice"),
        ],
    );
    write(
        root,
        "instance_events-0.json",
        &[
            instance(2, 0, 100),
            instance(3, 0, 200),
            instance(4, 3, 200),
        ],
    );
    let (events, diagnostics) = read(Format::Google2019, root);
    // Reported once, at the SUBMIT row, not again at each instance row.
    assert_one_refusal(
        &diagnostics,
        &root.join("collection_events-0.json"),
        2,
        "user",
    );
    assert_eq!(submitted(&events), vec![100]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::JobEnded(j) if j.job_id == 100))
    );
}

#[test]
fn alibaba2018_drops_a_job_whose_stage_name_is_too_long_at_that_task_row() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let long_task = format!("task_{}", "x".repeat(MAX_STRING_BYTES - 4));
    write(
        root,
        "batch_task.csv",
        &[
            "M1,2,j_1,1,Terminated,100,130,100,0.5".to_owned(),
            "M1,1,j_2,1,Terminated,100,130,100,0.5".to_owned(),
            format!("{long_task},1,j_2,1,Terminated,100,130,100,0.5"),
            "M2_1,1,j_2,1,Terminated,140,150,100,0.5".to_owned(),
        ],
    );
    let (events, diagnostics) = read(Format::Alibaba2018, root);
    assert_eq!(diagnostics.skipped_total(), 1, "{}", diagnostics.summary());
    let skipped = &diagnostics.examples()[0];
    assert_eq!(
        (skipped.at.file.clone(), skipped.at.line),
        (root.join("batch_task.csv"), 3)
    );
    assert!(
        skipped.reason.starts_with("out_of_range: field `stages[")
            && skipped.reason.contains("].name`: 4097 bytes long"),
        "{}",
        skipped.reason
    );
    assert_eq!(submitted(&events), vec![1]);
    assert!(events.iter().all(|e| e.job_id() == Some(1)));
}

#[test]
fn alibaba2018_drops_a_job_whose_name_is_too_long_at_its_first_row() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let long_job = format!("j_{}", "x".repeat(MAX_STRING_BYTES - 1));
    write(
        root,
        "batch_task.csv",
        &[
            "M1,1,j_1,1,Terminated,100,130,100,0.5".to_owned(),
            format!("M1,1,{long_job},1,Terminated,100,130,100,0.5"),
            format!("M2_1,1,{long_job},1,Terminated,140,150,100,0.5"),
        ],
    );
    let (events, diagnostics) = read(Format::Alibaba2018, root);
    assert_one_refusal(&diagnostics, &root.join("batch_task.csv"), 2, "job_name");
    assert_eq!(submitted(&events), vec![1]);
}

#[test]
fn gce_skips_a_vm_with_a_long_zone_by_record() {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("data.json");
    let vm = |zone: &str, id: u8| {
        format!(
            r#"{{"instance_data":{{"ZONE":"{zone}","MACHINE_TYPE":"n1-highcpu-2","PREEMPTIBLE":true}},"time_in_sec":60,"insert":{{"insertTime":"2019-01-01T00:00:00Z","targetId":"{id}"}},"stop":{{"insertTime":"2019-01-01T00:01:00Z"}}}}"#
        )
    };
    std::fs::write(
        &path,
        format!(
            r#"{{"a":{},"b":{}}}"#,
            vm("us-east1-b", 1),
            vm(&too_long(), 2)
        ),
    )
    .unwrap();
    let (events, diagnostics) = read(Format::GceLifetimes, &path);
    assert_eq!(diagnostics.skipped_total(), 1, "{}", diagnostics.summary());
    let skipped = &diagnostics.examples()[0];
    assert_eq!(skipped.at.record.as_deref(), Some("b"));
    assert!(
        skipped.reason.starts_with("out_of_range: field `zone`"),
        "{}",
        skipped.reason
    );
    // Both of VM a's events, neither of b's.
    assert_eq!(events.len(), 2);
}

#[test]
fn jsonl_skips_a_line_with_a_long_user() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let job = |id: u64, user: &str| {
        format!(
            r#"{{"v":1,"type":"job_submitted","time_us":1,"job_id":{id},"num_tasks":1,"user":"{user}"}}"#
        )
    };
    write(
        dir.path(),
        "events.jsonl",
        &[job(1, "a"), job(2, &too_long()), job(3, "c")],
    );
    let (events, diagnostics) = read(Format::Jsonl, &path);
    assert_one_refusal(&diagnostics, &path, 2, "user");
    assert_eq!(submitted(&events), vec![1, 3]);
}
