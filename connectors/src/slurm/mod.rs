//! A Slurm cluster's jobs as canonical events, from successive snapshots of
//! `squeue --json` (Slurm 22.05, OpenAPI v0.0.38; `docs/schedulers.md` says
//! why snapshots of `squeue`). One step per file: `squeue` reads a
//! snapshot, [`SlurmTracker`] (pure) remembers what it has already said so
//! that each snapshot yields only what is new, and [`SlurmSource`] is the
//! two as a [`LiveSource`], which the watcher polls and
//! publishes, losing and doubling nothing across restarts.
//!
//! The mapping:
//!
//! - A Slurm job is a canonical job; a job array is *one* job whose tasks
//!   are the array's tasks (the shape SLearn samples), keyed by the array's
//!   id; a plain job is a one-task job. An array's tasks are numbered by
//!   their array index in increasing order (`--array=1,3,5-7` gives tasks
//!   0–4), from the indices known when the array is first seen: the
//!   pending array's `array_task_string` and the tasks already split off.
//! - `job_submitted` at the job's `submit_time`, with its user, name, CPUs
//!   and memory (MB) per task.
//! - `schedule` at a task's `start_time` once it has run; its end at its
//!   `end_time`: COMPLETED is `finish`; FAILED, OUT_OF_MEMORY, NODE_FAIL,
//!   BOOT_FAIL and DEADLINE are `fail`; CANCELLED is `kill`; TIMEOUT is
//!   `timeout`; PREEMPTED is `evict`. A task cancelled before it ran (Slurm then gives
//!   it a start equal to its end) ends with no `schedule`. A requeued job
//!   (`restart_cnt` up, `submit_time` the requeue's) has its running
//!   attempt `evict`ed at the requeue; it is scheduled again when it runs.
//! - `job_ended` once every task has ended, at the last end: `finish` if all
//!   finished, else `fail` if any failed, else `kill` (a cancel or a limit).
//! - A job that leaves `squeue` before it ended (Slurm forgot it) ends
//!   `lost` at the latest Slurm time seen, and is counted.
//!
//! Times are Slurm's own (seconds, as µs), never the watcher's clock.

pub mod metrics;
mod sacct;
mod scheduler;
mod squeue;
mod tracker;

use std::process::Command;

use serde::{Deserialize, Serialize};

pub use sacct::{Accounted, History};
pub use scheduler::{Scope, Slurm};
pub use squeue::{Snapshot, SqueueError, SqueueJob, array_indices, parse_squeue, run_squeue};
pub use tracker::SlurmTracker;

use jobcast_ingest::event::Event;
use jobcast_predictor::walltime::Walltime;

use crate::{LiveSource, Observed};

/// A Slurm cluster as a [`LiveSource`]: `squeue --json` read every call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmSource {
    /// The command that prints the cluster's jobs: `squeue --json`, as
    /// words.
    pub squeue: Vec<String>,
    /// Follow only jobs submitted at or after this Slurm time (Unix s):
    /// the jobs of an earlier run must not teach jobcast the runtimes of
    /// the same jobs run again (`jobcast bench slurm`).
    pub since: Option<u64>,
    /// The site's accounting history, said at the state's first look.
    #[serde(default)]
    pub history: Option<History>,
}

impl LiveSource for SlurmSource {
    type State = SlurmTracker;

    /// A look at `squeue`; at the first, the jobs the site's history
    /// ([`History`]) says had ended, said first. The history is read
    /// before `squeue`, so a job it says has ended is either listed then
    /// (and not said again while listed) or gone for good; a job that
    /// ends in between is the live watcher's. None is said twice.
    fn observe(&mut self, tracker: &mut SlurmTracker) -> Result<Observed, String> {
        let history = match &self.history {
            Some(source) if tracker.wants_history() => source.read()?,
            _ => Accounted::default(),
        };
        let mut snapshot = run_squeue(&self.squeue)?;
        if let Some(since) = self.since {
            snapshot.jobs.retain(|record| record.submit_time >= since);
        }
        if tracker.wants_history() {
            tracker.history_read(history.jobs.keys().copied());
        }
        let mut observed = tracker.observe(&snapshot);
        observed.history_jobs = history.jobs.len() as u64;
        let mut events: Vec<Event> = history.jobs.into_values().flatten().collect();
        // Stable: a job's events keep their order within one time.
        events.sort_by_key(Event::time_us);
        events.append(&mut observed.events);
        observed.events = events;
        let mut skipped = history.skipped;
        skipped.append(&mut snapshot.skipped);
        skipped.append(&mut observed.skipped);
        observed.skipped = skipped;
        Ok(observed)
    }
}

/// The standard output of `words` (a command split into words), run with
/// `setup`'s further arguments and environment; the error names the
/// command and why it failed (its status and standard error).
fn output(words: &[String], setup: impl FnOnce(&mut Command)) -> Result<Vec<u8>, String> {
    let failed = |reason: String| format!("`{}`: {reason}", words.join(" "));
    let (program, args) = words
        .split_first()
        .ok_or_else(|| failed("no command".into()))?;
    let mut command = Command::new(program);
    command.args(args);
    setup(&mut command);
    let output = command.output().map_err(|e| failed(e.to_string()))?;
    if !output.status.success() {
        return Err(failed(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output.stdout)
}

/// The walltime settings of `--walltime-*`, checked: an error names the
/// flag. `bench slurm` checks its own with it before its first run.
pub fn walltime(quantile: usize, margin: f64, min_minutes: u64) -> Result<Walltime, String> {
    if !(margin.is_finite() && margin >= 1.0) {
        return Err(format!(
            "--walltime-margin {margin}: must be at least 1 (a limit below the estimate kills the job)"
        ));
    }
    if min_minutes == 0 {
        return Err("--walltime-min-minutes: must be at least 1".into());
    }
    Ok(Walltime {
        quantile,
        margin,
        min_s: min_minutes * 60,
        step_s: Walltime::SLURM_STEP_S,
    })
}

/// A cluster named on the command line as `NAME=SLURM_CONF` (`slurm
/// submit`, `bench federation`): its name and its `slurm.conf`.
pub fn parse_cluster(s: &str) -> Result<(String, std::path::PathBuf), String> {
    match s.split_once('=') {
        Some((name, conf)) if !name.is_empty() && !conf.is_empty() => {
            Ok((name.to_owned(), conf.into()))
        }
        _ => Err(format!("`{s}`: expected NAME=SLURM_CONF")),
    }
}

/// Refuse, by name, a cluster whose configuration is not there: sbatch
/// would look for a controller for a minute before failing.
pub fn check_cluster_files(clusters: &[(String, std::path::PathBuf)]) -> Result<(), String> {
    match clusters.iter().find(|(_, conf)| !conf.is_file()) {
        Some((name, conf)) => Err(format!(
            "--cluster {name}={}: no such file (the cluster's slurm.conf)",
            conf.display()
        )),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sacct` failing at the first look (no accounting, slurmdbd down)
    /// fails the look and changes nothing, so the next look reads the
    /// history again; a history with no jobs lets the look go on, once.
    #[test]
    fn a_failing_history_fails_the_first_look_and_is_read_again() {
        let dir = tempfile::tempdir().unwrap();
        let current = dir.path().join("current");
        let snapshot = include_str!("../../tests/data/slurm/squeue-22.05.jsonl")
            .lines()
            .next()
            .unwrap();
        std::fs::write(&current, snapshot).unwrap();
        let history = |sacct: &[&str]| {
            Some(History {
                sacct: sacct.iter().map(|w| (*w).to_owned()).collect(),
                since: 0,
            })
        };
        let mut source = SlurmSource {
            squeue: vec!["cat".into(), current.display().to_string()],
            since: None,
            history: history(&["false"]),
        };
        let mut tracker = SlurmTracker::default();
        let err = source.observe(&mut tracker).unwrap_err();
        assert!(err.starts_with("`false`: exit status: 1"), "{err}");
        assert_eq!(tracker, SlurmTracker::default());
        // `sh -c` takes the flags the history adds as its own arguments.
        source.history = history(&["sh", "-c", "echo 'JobID|State|Submit'", "sh"]);
        let observed = source.observe(&mut tracker).unwrap();
        assert!(!observed.events.is_empty());
        assert!(!tracker.wants_history());
    }
}
