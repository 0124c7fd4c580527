//! The site's accounting history (`sacct`), read once when the watcher
//! starts fresh, so that the service begins warm: the jobs that had ended,
//! as `jobcast_ingest::sacct` reads `sacct`'s parsable layout, each said as
//! the live watcher says a job.

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::Path;
use std::process::Command;

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
        let (program, args) = self
            .sacct
            .split_first()
            .ok_or_else(|| failed("no command".into()))?;
        let since = i64::try_from(self.since)
            .ok()
            .and_then(|s| DateTime::from_timestamp(s, 0))
            .ok_or_else(|| failed(format!("--history-since {}: not a time", self.since)))?;
        let output = Command::new(program)
            .args(args)
            .args(["--allusers", "--parsable2"])
            .arg(format!("--format={FORMAT}"))
            .arg(format!("--starttime={}", since.format("%Y-%m-%dT%H:%M:%S")))
            .arg("--endtime=now")
            // Times as the adapter reads them: UTC, ISO 8601.
            .env("TZ", "UTC")
            .env("SLURM_TIME_FORMAT", "standard")
            .output()
            .map_err(|e| failed(e.to_string()))?;
        if !output.status.success() {
            return Err(failed(format!(
                "{}: {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            )));
        }
        let size = output.stdout.len() as u64;
        let trace = sacct::read(
            Path::new("sacct"),
            Box::new(Cursor::new(output.stdout)),
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
