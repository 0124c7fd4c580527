//! Every policy's estimates leave with calibrated quantiles: a wrapper
//! that passes the policy's decisions through [`Calibration`] and, when a
//! job ends, scores the estimate that placed it.

use std::collections::BTreeMap;

use jobcast_ingest::event::JobSubmitted;
use serde::{Deserialize, Serialize};

use crate::calibration::{Calibration, Pending};
use crate::decision::{Decision, PolicyKind};
use crate::policies::{Context, JobDone, Policy, TaskEnd};

pub(super) struct Calibrated {
    inner: Box<dyn Policy>,
    state: State,
}

/// What the wrapper learns and holds, beside the policy's own state.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct State {
    calibration: Calibration,
    /// The newest estimate of each live job that has one.
    pending: BTreeMap<u64, Pending>,
    /// Quantiles of the mean task runtime are capped here, µs
    /// ([`Estimate::cap_quantiles`](crate::decision::Estimate::cap_quantiles));
    /// 0: not capped.
    horizon_us: f64,
}

impl State {
    /// A new wrapper's state, capping quantiles at `horizon_secs` (0: no
    /// cap).
    pub(super) fn new(horizon_secs: u64) -> State {
        State {
            horizon_us: horizon_secs as f64 * 1e6,
            ..State::default()
        }
    }

    /// This state's live jobs and horizon with `other`'s calibration.
    pub(super) fn with_calibration_of(self, other: State) -> State {
        State {
            calibration: other.calibration,
            ..self
        }
    }
}

impl Calibrated {
    pub(super) fn new(inner: Box<dyn Policy>, state: State) -> Self {
        Calibrated { inner, state }
    }

    fn pass(&mut self, mut decision: Decision) -> Decision {
        if let Some(estimate) = &mut decision.estimate {
            let pending = self.state.calibration.calibrate(estimate);
            if self.state.horizon_us > 0.0 {
                estimate.cap_quantiles(self.state.horizon_us);
            }
            self.state.pending.insert(decision.job_id, pending);
        }
        decision
    }
}

impl Policy for Calibrated {
    fn kind(&self) -> PolicyKind {
        self.inner.kind()
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let decision = self.inner.on_submit(job, ctx);
        self.pass(decision)
    }

    fn on_task_end(&mut self, end: &TaskEnd, ctx: &Context<'_>) -> Option<Decision> {
        let decision = self.inner.on_task_end(end, ctx)?;
        Some(self.pass(decision))
    }

    fn on_job_done(&mut self, done: &JobDone, ctx: &Context<'_>) {
        if let Some(pending) = self.state.pending.remove(&done.job_id) {
            self.state
                .calibration
                .learn(pending, done.mean_task_runtime_us);
        }
        self.inner.on_job_done(done, ctx);
    }

    fn on_job_abandoned(&mut self, job_id: u64) {
        self.state.pending.remove(&job_id);
        self.inner.on_job_abandoned(job_id);
    }

    /// The policy's own snapshot, then the wrapper's state.
    fn snapshot(&self) -> Vec<u8> {
        postcard::to_allocvec(&(serde_bytes::Bytes::new(&self.inner.snapshot()), &self.state))
            .expect("a policy serialises")
    }
}

/// Split a [`Calibrated::snapshot`] into the policy's and the wrapper's.
pub(super) fn split_snapshot(state: &[u8]) -> Result<(Vec<u8>, State), postcard::Error> {
    let (inner, state): (serde_bytes::ByteBuf, State) = postcard::from_bytes(state)?;
    Ok((inner.into_vec(), state))
}
