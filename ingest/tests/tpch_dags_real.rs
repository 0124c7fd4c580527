//! The TPC-H DAG adapter on the real shared runs: counts from the data's
//! README (154 DAGs of 1,414 stages, 1,600,776 task durations). Ignored
//! unless run with `--ignored`, which `scripts/test.sh` does where
//! `../shared` exists.

use std::collections::HashMap;
use std::path::PathBuf;

use jobcast_ingest::event::{Event, JobOutcome, TaskKind};
use jobcast_ingest::{Format, open};

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn every_run_is_a_dag_job_with_every_task_of_the_readme() {
    let dir =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/spark-tpch-dags-decima");
    assert!(dir.is_dir(), "{} not found", dir.display());
    let trace = open(Format::TpchDags, &dir).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
    assert_eq!(diagnostics.rows_read(), 1414);

    let (mut jobs, mut ended) = (HashMap::new(), 0);
    let (mut scheduled, mut finished) = (0u64, 0u64);
    for e in &events {
        match e {
            Event::JobSubmitted(j) => {
                assert_eq!(j.user, "tpch");
                assert!(j.job_name.starts_with('q'), "{}", j.job_name);
                let stages = j.stages.as_ref().unwrap();
                let total: u32 = stages.iter().map(|s| s.num_tasks).sum();
                assert_eq!(total, j.num_tasks);
                jobs.insert(j.job_id, (j.time_us, j.job_name.clone()));
            }
            Event::Task(t) => {
                assert!(t.stage.is_some());
                match t.kind {
                    TaskKind::Schedule => scheduled += 1,
                    TaskKind::Finish => finished += 1,
                    other => panic!("{other:?}"),
                }
            }
            Event::JobEnded(j) => {
                assert_eq!(j.outcome, JobOutcome::Finish);
                ended += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    // Every (size, query, executor count) with tasks in every stage: 1,378
    // runs of 22 queries, 1,600,776 tasks in all.
    assert_eq!((jobs.len(), ended), (1378, 1378));
    assert_eq!((scheduled, finished), (1_600_776, 1_600_776));
    let names: std::collections::BTreeSet<&String> = jobs.values().map(|(_, n)| n).collect();
    assert_eq!(names.len(), 22);
    assert!(events.windows(2).all(|w| w[0].time_us() <= w[1].time_us()));
}
