//! # jobcast-connectors
//!
//! The live schedulers jobcast works with, both directions of each kept
//! together (as Arroyo keeps a connector's source and sink): what a
//! scheduler's activity says comes *in* as canonical events, and
//! jobcast's decisions go *out* as the scheduler's own actions.
//!
//! The root holds what every scheduler shares:
//!
//! - [`LiveSource`]: a scheduler as a source of canonical events. Each
//!   call looks at the cluster and says what happened since the last,
//!   remembering what it said in a state of its own. The [`watch`]er polls
//!   a source and publishes what it says to the input topic, losing and
//!   doubling nothing across restarts (`jobcast slurm watch`).
//! - [`Scheduler`]: a scheduler that carries out decisions. It says what
//!   it holds and makes one change at a time; the [`apply`]er reads the
//!   decisions topic, plans (pure) and has the scheduler act
//!   (`jobcast slurm apply`).
//! - One skeleton for both loops: a state file locked, loaded and written
//!   whole or not at all ([`state_file`]), and a tick [`every`] interval
//!   until stopped.
//!
//! [`slurm`] implements both traits for Slurm 22.05, with its own
//! metrics. Another scheduler (Kubernetes, YARN, HTCondor) is a module
//! beside it (`docs/schedulers.md`).

pub mod apply;
pub mod slurm;
pub mod state_file;
pub mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use jobcast_ingest::event::Event;

/// A scheduler whose activity becomes canonical events (events in).
pub trait LiveSource {
    /// What it must remember of what it has said (Slurm: each job's tasks
    /// and how each stands), saved by the watcher with the events it is
    /// publishing, so that a restart says nothing twice and misses nothing.
    type State: Serialize + DeserializeOwned + Default + Clone;

    /// Look at the cluster now: the events since `state` was last
    /// updated, and the state updated. An error (the scheduler did not
    /// answer) leaves `state` as it was.
    fn observe(&mut self, state: &mut Self::State) -> Result<Observed, String>;
}

/// What one look at the cluster said that the ones before had not.
#[derive(Debug, Default, PartialEq)]
pub struct Observed {
    /// In time order (a job's submission, then its tasks', then its end).
    pub events: Vec<Event>,
    /// Jobs that left the scheduler's view before they ended, ended `lost`.
    pub lost_jobs: u64,
    /// Records that could not be read, each with where and why.
    pub skipped: Vec<String>,
    /// Jobs followed now (seen and not yet gone).
    pub followed: usize,
    /// Jobs said whole from the site's history (Slurm: `sacct`'s).
    pub history_jobs: u64,
}

/// A scheduler that carries out jobcast's decisions (decisions out): it
/// says what it holds and makes one change at a time.
pub trait Scheduler {
    /// What it must remember across restarts (Slurm: each array's task
    /// numbering), saved with the applier's state.
    type Memory: Serialize + DeserializeOwned + Default;

    /// The jobs it holds now, by jobcast job id.
    fn observe(&mut self, memory: &mut Self::Memory) -> Result<apply::plan::View, String>;

    /// The command that carries out `action`, for a dry run and the log.
    fn describe(
        &self,
        memory: &Self::Memory,
        action: &apply::plan::Action,
    ) -> Result<String, String>;

    /// Carry out `action`.
    fn act(&mut self, memory: &Self::Memory, action: &apply::plan::Action) -> Result<(), String>;
}

/// A loop's interval as a flag gives it: seconds from 0.01 to 3600.
pub fn parse_interval(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(secs) if secs.is_finite() && (0.01..=3600.0).contains(&secs) => Ok(secs),
        _ => Err(format!("expected seconds from 0.01 to 3600, got `{s}`")),
    }
}

/// Call `tick` every `interval` (measured from each call's start) until
/// `stop` is set; a stop is seen within 50 ms.
pub fn every(interval: Duration, stop: &AtomicBool, mut tick: impl FnMut()) {
    while !stop.load(Ordering::Relaxed) {
        let started = Instant::now();
        tick();
        while started.elapsed() < interval && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50).min(interval));
        }
    }
}
