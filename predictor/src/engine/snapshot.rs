//! The engine's whole state as one value, so that a restarted service
//! restores it instead of applying all the input it ever received again.
//!
//! A snapshot holds everything [`Engine::apply`] reads or changes: the live
//! jobs, tasks and machines (with when each last reported), the 3Sigma
//! history, every policy (SLearn's adaptive ratio and pilot sets with their
//! random generators, the Bayesian beliefs), the VM lifetime fitter,
//! the ETAs' calibration and the capacity they divide by, pending risk
//! refreshes, the policies' error statistics, the event count
//! and the event clock (each partition's time, and the events held far
//! ahead of it). An engine restored from it applies
//! the next events exactly as the engine that wrote it would have (the
//! tests check the outputs and records of both over more input). The
//! form is postcard's compact binary serde encoding, which keeps floats bit
//! for bit; a leading format number refuses snapshots of another layout.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};

use foldhash::HashMap;
use jobcast_ingest::event::{JobSubmitted, Stage};
use serde::{Deserialize, Serialize};

use super::clock::ClockState;
use super::machines::MachinesState;
use super::pacing::Pacing;
use super::progress::Progress;
use super::{Engine, EngineConfig, JobRecord, LiveJob, MachineRecord, PolicyErrors, TaskRecord};
use crate::decision::PolicyKind;
use crate::eta::EtaCalibration;
use crate::history::{History, HistoryChanges, HistoryKey};
use crate::policies;
use crate::preemption::online::OnlineFitter;

/// The snapshot layout; bumped whenever a type in it changes shape.
pub const SNAPSHOT_FORMAT: u32 = 11;

/// Why a snapshot could not be restored.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("snapshot format {found}, this jobcast reads {SNAPSHOT_FORMAT}")]
    Format { found: u32 },
    #[error("the snapshot does not decode: {0}")]
    Decode(#[from] postcard::Error),
    #[error("the snapshot holds policies {found:?}, the configuration runs {configured:?}")]
    Policies {
        found: Vec<PolicyKind>,
        configured: Vec<PolicyKind>,
    },
    #[error("job {job_id}'s record in the snapshot: {reason}")]
    Record { job_id: u64, reason: String },
    #[error("the snapshot was taken with ended jobs not yet released")]
    Unreleased,
    #[error("the snapshots do not form a chain: {reason}")]
    Chain { reason: String },
}

/// The state, borrowed when saved and owned when restored.
#[derive(Serialize, Deserialize)]
struct State<'a> {
    format: u32,
    policies: Vec<(PolicyKind, Vec<u8>)>,
    history: HistoryPart<'a>,
    jobs: Vec<(u64, LiveJobState)>,
    tasks: Cow<'a, HashMap<(u64, u32), TaskRecord>>,
    machines: Cow<'a, HashMap<u64, MachineRecord>>,
    lifetimes: Cow<'a, OnlineFitter>,
    risk_refresh: Cow<'a, BTreeSet<(u64, u64)>>,
    policy_errors: BTreeMap<PolicyKind, PolicyErrors>,
    events: u64,
    machines_seen: Cow<'a, HashMap<u64, u64>>,
    clock: ClockState,
    next_sweep_us: u64,
    etas: Cow<'a, EtaCalibration>,
    capacity_cpus: f64,
}

/// The 3Sigma history, nearly all of a snapshot's bytes once its window is
/// full: whole, or as its changes since the snapshot before (which a
/// restore applies to that one's history).
#[derive(Serialize, Deserialize)]
enum HistoryPart<'a> {
    Whole(Cow<'a, History>),
    Changes(HistoryChanges),
}

/// A live job. The submission is spelt out field by field: the event types
/// have no serde form of their own (their wire form is JSON, which does not
/// keep every float bit for bit). The record is in its stored binary layout
/// (its JSON form tags estimate sources, which postcard cannot read).
#[derive(Serialize, Deserialize)]
struct LiveJobState {
    submitted: SubmittedState,
    #[serde(with = "serde_bytes")]
    record: Vec<u8>,
    runtimes: BTreeMap<u32, u64>,
    last_event_us: u64,
    progress: Progress,
    partition: i32,
    pacing: Pacing,
}

#[derive(Serialize, Deserialize)]
struct SubmittedState {
    time_us: u64,
    job_id: u64,
    user: String,
    job_name: String,
    logical_name: String,
    scheduling_class: u8,
    priority: u32,
    cpu_request: f64,
    mem_request: f64,
    num_tasks: u32,
    partition: String,
    time_limit_us: Option<u64>,
    stages: Option<Vec<StageState>>,
}

/// A DAG stage: its id, parents, tasks and name.
type StageState = (u32, Vec<u32>, u32, Option<String>);

impl From<&JobSubmitted> for SubmittedState {
    fn from(j: &JobSubmitted) -> Self {
        SubmittedState {
            time_us: j.time_us,
            job_id: j.job_id,
            user: j.user.clone(),
            job_name: j.job_name.clone(),
            logical_name: j.logical_name.clone(),
            scheduling_class: j.scheduling_class,
            priority: j.priority,
            cpu_request: j.cpu_request,
            mem_request: j.mem_request,
            num_tasks: j.num_tasks,
            partition: j.partition.clone(),
            time_limit_us: j.time_limit_us,
            stages: j.stages.as_ref().map(|stages| {
                stages
                    .iter()
                    .map(|s| (s.id, s.parents.clone(), s.num_tasks, s.name.clone()))
                    .collect()
            }),
        }
    }
}

impl From<SubmittedState> for JobSubmitted {
    fn from(s: SubmittedState) -> Self {
        JobSubmitted {
            time_us: s.time_us,
            job_id: s.job_id,
            user: s.user,
            job_name: s.job_name,
            logical_name: s.logical_name,
            scheduling_class: s.scheduling_class,
            priority: s.priority,
            cpu_request: s.cpu_request,
            mem_request: s.mem_request,
            partition: s.partition,
            time_limit_us: s.time_limit_us,
            num_tasks: s.num_tasks,
            stages: s.stages.map(|stages| {
                stages
                    .into_iter()
                    .map(|(id, parents, num_tasks, name)| Stage {
                        id,
                        parents,
                        num_tasks,
                        name,
                    })
                    .collect()
            }),
        }
    }
}

impl Engine {
    /// The engine's whole state (see the [module docs](self)). Taken
    /// between batches, once ended jobs are released
    /// ([`Engine::release_ended`]): their records belong to the store.
    pub fn snapshot(&self) -> Result<Vec<u8>, SnapshotError> {
        self.snapshot_to(Vec::new())
    }

    /// [`Self::snapshot`] appended to `out`, which a caller sizes for it
    /// (a whole snapshot is tens of MB: growing a buffer to that size
    /// copies it over and over).
    pub fn snapshot_to(&self, out: Vec<u8>) -> Result<Vec<u8>, SnapshotError> {
        self.encode(HistoryPart::Whole(Cow::Borrowed(&self.history)), out)
    }

    /// The engine's whole state but for the history, which it holds only as
    /// the feature values in `changed` (every key the history reported
    /// changed since the snapshot before), appended to `out`: a fraction
    /// of the bytes of [`Self::snapshot`]. A restore needs every snapshot
    /// from the last whole one on ([`Self::restore_chain`]).
    pub fn snapshot_changes(
        &self,
        changed: impl IntoIterator<Item = HistoryKey>,
        out: Vec<u8>,
    ) -> Result<Vec<u8>, SnapshotError> {
        self.encode(HistoryPart::Changes(self.history.changes(changed)), out)
    }

    fn encode(&self, history: HistoryPart<'_>, out: Vec<u8>) -> Result<Vec<u8>, SnapshotError> {
        if !self.ended.is_empty() {
            return Err(SnapshotError::Unreleased);
        }
        let jobs: Vec<(u64, LiveJobState)> = self
            .jobs
            .iter()
            .map(|(&id, job)| {
                (
                    id,
                    LiveJobState {
                        submitted: (&job.submitted).into(),
                        record: job.record.to_bytes(),
                        runtimes: job.runtimes.clone(),
                        last_event_us: job.last_event_us,
                        progress: job.progress.clone(),
                        partition: job.partition,
                        pacing: job.pacing.clone(),
                    },
                )
            })
            .collect();
        let machines = self.machines.state();
        let state = State {
            format: SNAPSHOT_FORMAT,
            policies: self
                .policies
                .iter()
                .map(|p| (p.kind(), p.snapshot()))
                .collect(),
            history,
            jobs,
            tasks: Cow::Borrowed(&self.tasks),
            machines: Cow::Borrowed(machines.records),
            lifetimes: Cow::Borrowed(machines.lifetimes),
            risk_refresh: Cow::Borrowed(machines.refresh),
            policy_errors: PolicyKind::ALL
                .iter()
                .filter_map(|&k| Some((k, self.policy_errors.get(k.name())?.clone())))
                .collect(),
            events: self.events,
            machines_seen: Cow::Borrowed(machines.seen),
            clock: self.clock.state(),
            next_sweep_us: self.next_sweep_us,
            etas: Cow::Borrowed(self.etas.calibration()),
            capacity_cpus: machines.capacity_cpus,
        };
        Ok(postcard::to_extend(&state, out)?)
    }

    /// The engine `snapshot` was taken of. `config` must be the one it ran
    /// with (the store refuses another): the snapshot carries the state,
    /// the configuration carries what is not state (the driving policy, the
    /// queues, the risk settings).
    pub fn restore(config: &EngineConfig, snapshot: &[u8]) -> Result<Engine, RestoreError> {
        Self::restore_chain(config, &[snapshot])
    }

    /// The engine the last of `chain` was taken of: the first a whole
    /// snapshot ([`Self::snapshot`]), each after it taken with the history
    /// changed since the one before ([`Self::snapshot_changes`]).
    pub fn restore_chain(config: &EngineConfig, chain: &[&[u8]]) -> Result<Engine, RestoreError> {
        let (first, later) = chain.split_first().ok_or(SnapshotError::Chain {
            reason: "no snapshot".into(),
        })?;
        let mut state = decode(first)?;
        let HistoryPart::Whole(history) = state.history else {
            return Err(SnapshotError::Chain {
                reason: "the first snapshot holds only history changes".into(),
            }
            .into());
        };
        let mut history = history.into_owned();
        for snapshot in later {
            state = decode(snapshot)?;
            let HistoryPart::Changes(changes) = state.history else {
                return Err(SnapshotError::Chain {
                    reason: "a whole snapshot after the first".into(),
                }
                .into());
            };
            history
                .apply_changes(changes)
                .map_err(|reason| SnapshotError::Chain { reason })?;
        }
        let mut engine = Engine::new(config).map_err(RestoreError::Config)?;
        let configured: Vec<PolicyKind> = engine.policies.iter().map(|p| p.kind()).collect();
        let found: Vec<PolicyKind> = state.policies.iter().map(|(k, _)| *k).collect();
        if found != configured {
            return Err(SnapshotError::Policies { found, configured }.into());
        }
        engine.policies = state
            .policies
            .iter()
            .map(|(kind, bytes)| policies::restore(*kind, bytes))
            .collect::<Result<_, _>>()
            .map_err(SnapshotError::from)?;
        engine.history = history;
        engine.history.track_changes();
        engine.jobs = state
            .jobs
            .into_iter()
            .map(|(id, job)| {
                let record = JobRecord::from_bytes(&job.record)
                    .map_err(|reason| SnapshotError::Record { job_id: id, reason })?;
                let live = LiveJob {
                    submitted: job.submitted.into(),
                    record,
                    runtimes: job.runtimes,
                    last_event_us: job.last_event_us,
                    progress: job.progress,
                    partition: job.partition,
                    pacing: job.pacing,
                };
                Ok((id, live))
            })
            .collect::<Result<_, SnapshotError>>()?;
        engine.tasks = state.tasks.into_owned();
        engine.machines.restore(MachinesState {
            records: state.machines.into_owned(),
            seen: state.machines_seen.into_owned(),
            lifetimes: state.lifetimes.into_owned(),
            refresh: state.risk_refresh.into_owned(),
            capacity_cpus: state.capacity_cpus,
        });
        engine.policy_errors = state
            .policy_errors
            .into_iter()
            .map(|(k, errors)| (k.name(), errors))
            .collect();
        engine.events = state.events;
        engine
            .clock
            .restore(state.clock)
            .map_err(|reason| SnapshotError::Chain { reason })?;
        engine.next_sweep_us = state.next_sweep_us;
        engine.etas.restore(state.etas.into_owned());
        engine.rebuild_due();
        engine.etas.rebuild(engine.jobs.values(), engine.driver);
        Ok(engine)
    }
}

fn decode(snapshot: &[u8]) -> Result<State<'static>, SnapshotError> {
    let format = postcard::take_from_bytes::<u32>(snapshot)?.0;
    if format != SNAPSHOT_FORMAT {
        return Err(SnapshotError::Format { found: format });
    }
    Ok(postcard::from_bytes(snapshot)?)
}

/// Why [`Engine::restore`] failed: the configuration, or the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Config(jobcast_ingest::config::ConfigError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}
