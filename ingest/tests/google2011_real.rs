//! The Google 2011 adapter on the real shared trace parts: the counts must
//! match the data's README. Ignored unless run with `--ignored`, which
//! `scripts/test.sh` does where `../shared` exists.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use jobcast_ingest::event::{Event, TaskKind};
use jobcast_ingest::{Format, open};

fn shared_trace() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/google-clusterdata-2011-2");
    assert!(dir.is_dir(), "{} not found", dir.display());
    dir
}

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn task_event_counts_match_the_data_readme() {
    let dir = shared_trace();
    let trace = open(Format::Google2011, &dir).unwrap();
    let diagnostics = trace.diagnostics().clone();
    let mut task_events = 0u64;
    let mut task_kinds: HashMap<TaskKind, u64> = HashMap::new();
    let mut task_jobs = HashSet::new();
    let mut submitted = HashSet::new();
    let mut last_time = 0;
    for event in trace {
        let event = event.unwrap();
        assert!(event.time_us() >= last_time, "out of order at {event:?}");
        last_time = event.time_us();
        match &event {
            Event::Task(t) => {
                task_events += 1;
                *task_kinds.entry(t.kind).or_default() += 1;
                task_jobs.insert(t.job_id);
                assert!(submitted.contains(&t.job_id), "task before its job: {t:?}");
            }
            Event::JobSubmitted(j) => {
                assert!(submitted.insert(j.job_id), "job submitted twice: {j:?}");
            }
            _ => {}
        }
    }
    assert_eq!(diagnostics.skipped_total(), 0, "{}", diagnostics.summary());
    assert_eq!(task_events, 1_827_856, "{}", diagnostics.summary());
    assert_eq!(task_jobs.len(), 14_484);
    // Event counts per kind, from the data README.
    assert_eq!(task_kinds[&TaskKind::Submit], 675_721);
    assert_eq!(task_kinds[&TaskKind::Schedule], 639_729);
    assert_eq!(task_kinds[&TaskKind::Finish], 230_982);
    assert_eq!(task_kinds[&TaskKind::Kill], 122_562);
    assert_eq!(task_kinds[&TaskKind::Evict], 145_550);
    assert_eq!(task_kinds[&TaskKind::Fail], 13_267);
    assert_eq!(task_kinds[&TaskKind::Update], 45);
    // The window ends with the last task event (part 00009's largest time).
    assert_eq!(last_time, 50_711_946_042);
}
