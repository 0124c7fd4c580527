//! A live cluster's scheduler as a source of canonical events: the
//! "events in" half of a scheduler integration (the "actions out" half is
//! `jobcast_scheduler_feed::apply::Scheduler`). A scheduler implements
//! [`LiveSource`]: each call looks at the cluster and says what happened
//! since the last, remembering what it said in a state of its own. The
//! [`watch`]er (with the `kafka` feature) polls a source and publishes
//! what it says, losing and doubling nothing across restarts, whatever
//! the scheduler; [`crate::slurm`] is the source for Slurm.

pub mod state_file;
#[cfg(feature = "kafka")]
pub mod watch;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::event::Event;

/// A scheduler whose activity becomes canonical events.
pub trait LiveSource {
    /// What it must remember of what it has said (Slurm: each job's tasks
    /// and how each stands), saved by the watcher with the events it is
    /// publishing, so that a restart says nothing twice and misses nothing.
    type State: Serialize + DeserializeOwned + Default;

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
