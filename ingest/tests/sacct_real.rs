//! The `sacct` adapter on the real samples of
//! `../shared/data/slurm-sacct-samples`: the full parsable layout
//! (`--format=ALL -P`) gives its one job with the runtime `ElapsedRaw`
//! says, its steps left out; the layouts without submission times are
//! refused, naming what is missing. Ignored unless run with `--ignored`,
//! which `scripts/test.sh` does where `../shared` exists.

use std::path::PathBuf;

use jobcast_ingest::event::{Event, JobOutcome, TaskKind};
use jobcast_ingest::{Format, open};

fn sample(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/slurm-sacct-samples")
        .join(name);
    assert!(path.is_file(), "{} not found", path.display());
    path
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn the_full_layout_gives_each_job_as_slurm_accounted_it() {
    let trace = open(Format::Sacct, &sample("slurm-usage-report-rs/sacct.csv")).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let events: Vec<Event> = trace.map(Result::unwrap).collect();
    assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
    assert_eq!(diagnostics.rows_read(), 3);
    assert_eq!(
        diagnostics.notes().values().sum::<u64>(),
        2,
        "{}",
        diagnostics.summary()
    );
    let Event::JobSubmitted(job) = &events[0] else {
        panic!("{events:?}")
    };
    assert_eq!(job.job_id, 33979);
    assert_eq!(
        (job.user.as_str(), job.group.as_str()),
        ("hermes", "bioinfo")
    );
    assert_eq!(
        (job.num_tasks, job.cpu_request, job.mem_request),
        (1, 1.0, 1000.0)
    );
    assert_eq!(job.cluster, "cluster-genomique");
    let start = events.iter().find_map(|e| match e {
        Event::Task(t) if t.kind == TaskKind::Schedule => Some(t.time_us),
        _ => None,
    });
    let Some(Event::JobEnded(end)) = events.last() else {
        panic!("{events:?}")
    };
    assert_eq!(end.outcome, JobOutcome::Finish);
    assert_eq!(end.time_us - start.unwrap(), 778_000_000, "ElapsedRaw 778");
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn layouts_without_submission_times_are_refused_by_what_they_lack() {
    let err = open(Format::Sacct, &sample("osc-ood-sacct/sacct.txt"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("osc-ood-sacct/sacct.txt") && err.contains("`Submit`"),
        "{err}"
    );
    let err = open(Format::Sacct, &sample("cpu-usage-sacct/sacct_output.csv"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("sacct_output.csv") && err.contains("-P"),
        "{err}"
    );
}
