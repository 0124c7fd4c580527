//! The site's accounting history (`sacct`), read once when the watcher
//! starts fresh, so that the service begins warm: the jobs that had ended,
//! as `jobcast_ingest::sacct` reads `sacct`'s parsable layout, each said as
//! the live watcher says a job.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;

use chrono::DateTime;
use serde::{Deserialize, Serialize};

use jobcast_ingest::event::{Event, TaskKind};
use jobcast_ingest::sacct;
use jobcast_ingest::source::Diagnostics;

/// The columns asked of `sacct`: those the adapter reads.
const FORMAT: &str =
    "JobID,JobName,User,Partition,Cluster,Submit,Start,End,State,NCPUS,ReqMem,TimelimitRaw";

/// Where the history comes from: the `sacct` command (as words), and the
/// jobs it covers, those submitted at or after `since` (Unix s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub sacct: Vec<String>,
    pub since: u64,
}

/// What the history says: each ended job's events, in time order, and
/// the rows that could not be read.
#[derive(Debug, Default)]
pub struct Accounted {
    /// Per job, its events (submission to end).
    pub jobs: BTreeMap<u64, Vec<Event>>,
    pub skipped: Vec<String>,
}

impl History {
    /// Run `sacct` over every user's jobs since `since`, in UTC, and keep
    /// the jobs submitted since then that had ended; a job still pending
    /// or running is the live watcher's.
    pub fn read(&self) -> Result<Accounted, String> {
        let failed = |reason: String| format!("`{}`: {reason}", self.sacct.join(" "));
        let since = i64::try_from(self.since)
            .ok()
            .and_then(|s| DateTime::from_timestamp(s, 0))
            .ok_or_else(|| failed(format!("--history-since {}: not a time", self.since)))?;
        let stdout = super::output(&self.sacct, |sacct| {
            sacct
                .args(["--allusers", "--parsable2"])
                .arg(format!("--format={FORMAT}"))
                .arg(format!("--starttime={}", since.format("%Y-%m-%dT%H:%M:%S")))
                .arg("--endtime=now")
                // Times as the adapter reads them: UTC, ISO 8601.
                .env("TZ", "UTC")
                .env("SLURM_TIME_FORMAT", "standard");
        })?;
        let size = stdout.len() as u64;
        let trace = sacct::read(
            Path::new("sacct"),
            Box::new(Cursor::new(stdout)),
            Diagnostics::new(),
            size,
        )
        .map_err(|e| failed(e.to_string()))?;
        let diagnostics = trace.diagnostics().clone();
        let mut jobs: BTreeMap<u64, Vec<Event>> = BTreeMap::new();
        for event in trace {
            let event = event.map_err(|e| failed(e.to_string()))?;
            // As the live watcher says a job: its tasks are submitted with it.
            if matches!(&event, Event::Task(t) if t.kind == TaskKind::Submit) {
                continue;
            }
            if let Some(job_id) = event.job_id() {
                jobs.entry(job_id).or_default().push(event);
            }
        }
        let since_us = self.since.saturating_mul(1_000_000);
        jobs.retain(|_, events| {
            let submitted = matches!(&events[0], Event::JobSubmitted(j) if j.time_us >= since_us);
            let ended = matches!(events.last(), Some(Event::JobEnded(_)));
            submitted && ended
        });
        let skipped = diagnostics
            .examples()
            .into_iter()
            .map(|s| format!("{}: {}", s.at, s.reason))
            .collect();
        Ok(Accounted { jobs, skipped })
    }
}

#[cfg(test)]
mod tests {
    use chrono::NaiveDate;

    use super::*;

    /// The history of a real Slurm 22.05 cluster's accounting
    /// (`ingest/tests/data/sacct`): the jobs submitted since the given
    /// time that had ended, each as the live watcher says a job (no task
    /// submissions); those submitted before, and those still pending or
    /// running, are left out.
    #[test]
    fn the_history_keeps_the_jobs_ended_since_its_start() {
        let fixture = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../ingest/tests/data/sacct/slurm-22.05.txt"
        );
        let since = NaiveDate::from_ymd_opt(2026, 11, 30)
            .and_then(|d| d.and_hms_opt(22, 48, 30))
            .unwrap()
            .and_utc()
            .timestamp() as u64;
        let history = History {
            // `sh -c` takes the flags the history adds as its arguments.
            sacct: ["sh", "-c", &format!("cat {fixture}"), "sh"]
                .map(str::to_owned)
                .to_vec(),
            since,
        };
        let accounted = history.read().unwrap();
        assert!(accounted.skipped.is_empty(), "{:?}", accounted.skipped);
        let jobs: Vec<u64> = accounted.jobs.keys().copied().collect();
        assert_eq!(jobs, [5, 6, 8, 12]);
        for events in accounted.jobs.values() {
            assert!(matches!(events[0], Event::JobSubmitted(_)), "{events:?}");
            assert!(
                matches!(events.last(), Some(Event::JobEnded(_))),
                "{events:?}"
            );
            assert!(
                !events
                    .iter()
                    .any(|e| matches!(e, Event::Task(t) if t.kind == TaskKind::Submit)),
                "{events:?}"
            );
        }
        let err = History {
            sacct: vec!["false".into()],
            since,
        }
        .read()
        .unwrap_err();
        assert!(err.starts_with("`false`: exit status: 1"), "{err}");
    }
}
