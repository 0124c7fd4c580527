//! The SWF adapter on the four Parallel Workloads Archive logs of
//! `../shared/data/parallel-workloads-archive-swf`: every line read, no
//! line skipped, one job a line ended as its status says, the machine's
//! size from the header, and every event in time order. Ignored unless run
//! with `--ignored`, which `scripts/test.sh` does where `../shared` exists.

use std::collections::HashMap;
use std::path::PathBuf;

use jobcast_ingest::event::{Event, JobOutcome};
use jobcast_ingest::{Format, open};

/// A log, its machine's processors, and its jobs by final status.
struct Log {
    file: &'static str,
    procs: f64,
    finished: usize,
    failed: usize,
    cancelled: usize,
    unknown: usize,
}

const LOGS: [Log; 4] = [
    Log {
        file: "CTC-SP2-1996-3.1-cln.swf.gz",
        procs: 338.0,
        finished: 60_553,
        failed: 16_669,
        cancelled: 0,
        unknown: 0,
    },
    Log {
        file: "HPC2N-2002-2.2-cln.swf.gz",
        procs: 240.0,
        finished: 201_993,
        failed: 0,
        cancelled: 0,
        unknown: 878,
    },
    Log {
        file: "KTH-SP2-1996-2.1-cln.swf.gz",
        procs: 100.0,
        finished: 20_530,
        failed: 7_946,
        cancelled: 0,
        unknown: 0,
    },
    Log {
        file: "SDSC-SP2-1998-4.2-cln.swf.gz",
        procs: 128.0,
        finished: 43_117,
        failed: 0,
        cancelled: 16_598,
        unknown: 0,
    },
];

#[test]
#[ignore = "needs ../shared/data, the shared traces: scripts/test.sh runs it where they exist"]
fn every_job_of_the_four_logs_is_read_in_time_order() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../shared/data/parallel-workloads-archive-swf");
    for log in LOGS {
        let path = dir.join(log.file);
        assert!(path.is_file(), "{} not found", path.display());
        let trace = open(Format::Swf, &path).unwrap();
        let diagnostics = trace.diagnostics().clone();
        let (mut last_us, mut machines) = (0, Vec::new());
        let mut submitted: HashMap<u64, u64> = HashMap::new();
        let mut outcomes: HashMap<JobOutcome, usize> = HashMap::new();
        for event in trace {
            let event = event.unwrap();
            assert!(event.time_us() >= last_us, "{}: {event:?}", log.file);
            last_us = event.time_us();
            match event {
                Event::Machine(m) => machines.push(m.cpus),
                Event::JobSubmitted(j) => {
                    assert_eq!(j.num_tasks, 1);
                    assert!(j.cpu_request >= 1.0, "{j:?}");
                    assert!(j.user.starts_with('u'), "{j:?}");
                    assert!(submitted.insert(j.job_id, j.time_us).is_none(), "{j:?}");
                }
                Event::JobEnded(e) => {
                    assert!(e.time_us >= submitted[&e.job_id]);
                    *outcomes.entry(e.outcome).or_default() += 1;
                }
                Event::Task(_) => {}
            }
        }
        assert_eq!(
            diagnostics.skipped_total(),
            0,
            "{}: {}",
            log.file,
            diagnostics.summary()
        );
        assert_eq!(machines, [Some(log.procs)], "{}", log.file);
        let count = |o| outcomes.get(&o).copied().unwrap_or(0);
        assert_eq!(
            (
                count(JobOutcome::Finish),
                count(JobOutcome::Fail),
                count(JobOutcome::Kill),
                count(JobOutcome::Lost)
            ),
            (log.finished, log.failed, log.cancelled, log.unknown),
            "{}",
            log.file
        );
        assert_eq!(
            submitted.len(),
            log.finished + log.failed + log.cancelled + log.unknown
        );
    }
}
