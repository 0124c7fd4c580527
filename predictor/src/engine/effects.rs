//! What applying events produces: outputs for the outside world, the keys
//! of the records to write back, and the reason an event was refused.

use crate::decision::{Decision, PolicyKind};
use crate::history::HistoryKey;

use super::clock::Refused;
use super::records::{
    CapacityDecision, DeadlineDecision, DeadlineRecord, MachineRisk, PredictionError,
};

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// Short machine-readable class, used as a metric label.
    pub reason: &'static str,
    pub message: String,
}

pub(super) fn reject(reason: &'static str, message: String) -> Rejection {
    Rejection { reason, message }
}

/// Something the engine wants the outside world to know.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A decision of the driving policy, to publish.
    Decision(Decision),
    /// A transient VM's risk, newly scored.
    Risk(MachineRisk),
    /// A new decision of CloudCoaster's controller (`capacity.rs`).
    Capacity(CapacityDecision),
    /// A decision about a deadline job on spot VMs (`deadlines.rs`), with
    /// the job's plan and recoveries as they now stand.
    Deadline {
        decision: DeadlineDecision,
        record: DeadlineRecord,
    },
    /// A policy's error on a job that just finished.
    Scored {
        policy: PolicyKind,
        job_id: u64,
        error: PredictionError,
        /// Whether the truth was at or below each of the estimate's
        /// quantiles ([`crate::decision::Quantiles::LEVELS`]), if it had
        /// them.
        covered: Option<[bool; 4]>,
    },
    /// The first ETA of a job that just finished, against its completion.
    EtaScored {
        job_id: u64,
        /// |ETA's median − actual time to completion| / actual × 100.
        error_pct: f64,
        /// Whether the completion fell within the ETA's 80 % interval.
        within_interval: bool,
    },
}

/// The keys of records that changed. Marking appends (a batch marks a
/// job at each of its events, and sorted-set insertions stood out in the
/// pipeline thread's profile); [`Changed::settle`] sorts and dedups once,
/// before the records are written, so that writes stay deterministic.
#[derive(Debug)]
pub struct Changed<T>(pub(super) Vec<T>);

impl<T> Default for Changed<T> {
    fn default() -> Self {
        Changed(Vec::new())
    }
}

impl<T: Ord> Changed<T> {
    pub fn mark(&mut self, key: T) {
        self.0.push(key);
    }

    /// Sort the keys and drop repeats.
    pub fn settle(&mut self) {
        self.0.sort_unstable();
        self.0.dedup();
    }

    /// The keys: in order and each once after [`Self::settle`], and until
    /// the next mark.
    pub fn iter(&self) -> std::slice::Iter<'_, T> {
        self.0.iter()
    }

    pub fn clear(&mut self) {
        self.0.clear();
    }
}

impl<T: Ord> Extend<T> for Changed<T> {
    fn extend<I: IntoIterator<Item = T>>(&mut self, keys: I) {
        self.0.extend(keys);
    }
}

impl<'a, T: Ord> IntoIterator for &'a Changed<T> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}

/// What one or more applied events produced: outputs to publish and the
/// records to write back, by key; [`Effects::settle`] them before writing.
#[derive(Debug, Default)]
pub struct Effects {
    pub outputs: Vec<Output>,
    pub jobs: Changed<u64>,
    pub tasks: Changed<(u64, u32)>,
    pub machines: Changed<u64>,
    /// History distributions changed or dropped ([`Engine::history`]'s
    /// `record` gives the new content, `None` when dropped).
    pub history: Changed<HistoryKey>,
    /// Policies whose [`PolicyErrors`] changed.
    pub policies: Changed<&'static str>,
    /// Jobs given up on, and machines forgotten, for being silent too long
    /// (`expiry.rs`); both are among `jobs` and `machines` too.
    pub expired_jobs: Vec<u64>,
    pub expired_machines: Vec<u64>,
    /// Events held far ahead of the clock that turned out to stand alone
    /// (or that a release found no sense in): to dead-letter, as an event
    /// refused on arrival is.
    pub refused: Vec<Refused>,
    /// Decisions that waited for `engine.min_republish_ms` and were
    /// overtaken (by a newer one, or the job's end): never published.
    pub overtaken: u64,
    /// Decisions published again for their pending job's start estimate
    /// moved (`engine.starts.refresh_ms`).
    pub starts_refreshed: u64,
    /// Pending jobs that started while their cluster's running jobs, they
    /// with them, held more processors than the cluster has: where their
    /// starts fell is not learnt.
    pub starts_overfull: u64,
}

impl Effects {
    /// Sort every key list and drop repeats.
    pub fn settle(&mut self) {
        self.jobs.settle();
        self.tasks.settle();
        self.machines.settle();
        self.history.settle();
        self.policies.settle();
    }

    pub fn clear(&mut self) {
        self.outputs.clear();
        self.jobs.clear();
        self.tasks.clear();
        self.machines.clear();
        self.history.clear();
        self.policies.clear();
        self.expired_jobs.clear();
        self.expired_machines.clear();
        self.refused.clear();
        self.overtaken = 0;
        self.starts_refreshed = 0;
        self.starts_overfull = 0;
    }
}
