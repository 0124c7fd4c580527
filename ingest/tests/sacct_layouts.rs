//! The two layouts of `sacct`, as a real Slurm 22.05 cluster wrote them at
//! one moment (`tests/data/sacct`): JSON (`sacct --json`) and parsable
//! (`sacct -P`) give the same events, each job as Slurm accounted it. The
//! parsable output was asked for without the `Group` column, so its jobs
//! have no group; the JSON's have Slurm's (the parsable column is read in
//! `sacct_real.rs`, on a site's full layout).

use std::path::PathBuf;

use jobcast_ingest::event::{Event, JobOutcome, TaskKind};
use jobcast_ingest::{Format, open};

fn read(name: &str) -> Vec<Event> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/sacct")
        .join(name);
    let trace = open(Format::Sacct, &path).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
    events
}

#[test]
fn json_and_parsable_layouts_give_the_same_events() {
    let mut json = read("slurm-22.05.json");
    let parsable = read("slurm-22.05.txt");
    for event in &mut json {
        if let Event::JobSubmitted(j) = event {
            assert_eq!(j.group, "root", "{j:?}");
            j.group.clear();
        }
    }
    assert_eq!(json, parsable);

    let submitted: Vec<_> = json
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(j) => Some(j),
            _ => None,
        })
        .collect();
    let ids: Vec<u64> = submitted.iter().map(|j| j.job_id).collect();
    assert_eq!(ids, [1, 2, 5, 6, 8, 12, 13, 14]);
    let job = |id: u64| submitted.iter().find(|j| j.job_id == id).unwrap();
    // The arrays: one job each, a task per element.
    assert_eq!((job(2).num_tasks, job(8).num_tasks), (3, 3));
    assert_eq!(job(8).cpu_request, 3.0);
    assert_eq!(job(8).mem_request, 2048.0);
    assert_eq!(job(8).time_limit_us, Some(600_000_000));
    // Memory per CPU: the job's whole request.
    assert_eq!((job(12).cpu_request, job(12).mem_request), (2.0, 600.0));
    assert_eq!(
        (job(1).user.as_str(), job(1).partition.as_str()),
        ("root", "debug")
    );
    assert_eq!(job(1).cluster, "jobcast");

    let outcome = |id: u64| {
        json.iter().find_map(|e| match e {
            Event::JobEnded(end) if end.job_id == id => Some(end.outcome),
            _ => None,
        })
    };
    assert_eq!(outcome(1), Some(JobOutcome::Finish));
    assert_eq!(outcome(5), Some(JobOutcome::Fail));
    assert_eq!(outcome(6), Some(JobOutcome::Kill));
    // Running and pending: open.
    assert_eq!((outcome(13), outcome(14)), (None, None));
    let scheduled = |id: u64| {
        json.iter()
            .any(|e| matches!(e, Event::Task(t) if t.job_id == id && t.kind == TaskKind::Schedule))
    };
    assert!(scheduled(13) && !scheduled(14));
}
