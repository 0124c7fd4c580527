//! The engine's whole state as one value, so that a restarted service
//! restores it instead of applying all the input it ever received again.
//!
//! A snapshot holds everything [`Engine::apply`](super::Engine::apply) reads or changes: the live
//! jobs, tasks and machines (with when each last reported), the 3Sigma
//! history, every policy (SLearn's adaptive ratio and pilot sets with their
//! random generators, the Bayesian beliefs), the VM lifetime fitter,
//! the ETAs' calibration and the capacity they divide by, where ended
//! jobs' runtimes fell in the start projection's spreads, pending risk
//! refreshes and the risk scores awaiting their outcome with the
//! recalibration they teach, CloudCoaster's controller (the long tasks running and its
//! last decision), the policies' error statistics, the event count
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

use super::capacity::CapacityState;
use super::clock::ClockState;
use super::clusters::ClustersState;
use super::deadlines::DeadlineState;
use super::live_task::LiveTask;
use super::machines::{self, MachinesState, Outcomes};
use super::pacing::Pacing;
use super::progress::Progress;
use super::starts::StartState;
use super::{JobRecord, LiveJob, MachineRecord, PolicyErrors};
use crate::decision::PolicyKind;
use crate::eta::EtaCalibration;
use crate::history::{History, HistoryChanges};
use crate::policies::{self, Policy};
use crate::preemption::online::OnlineFitter;

/// The snapshot layout; bumped whenever a type in it changes shape.
pub const SNAPSHOT_FORMAT: u32 = 24;

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
pub(super) struct State<'a> {
    format: u32,
    policies: Vec<(PolicyKind, Vec<u8>)>,
    history: HistoryPart<'a>,
    jobs: Vec<(u64, LiveJobState)>,
    tasks: Cow<'a, HashMap<(u64, u32), LiveTask>>,
    machines: Cow<'a, HashMap<u64, MachineRecord>>,
    lifetimes: Cow<'a, OnlineFitter>,
    risk_refresh: Cow<'a, BTreeSet<(u64, u64)>>,
    policy_errors: BTreeMap<PolicyKind, PolicyErrors>,
    events: u64,
    machines_seen: Cow<'a, HashMap<u64, u64>>,
    clock: ClockState,
    next_sweep_us: u64,
    etas: Cow<'a, EtaCalibration>,
    starts: Cow<'a, StartState>,
    risk_outcomes: Cow<'a, Outcomes>,
    capacity: Cow<'a, CapacityState>,
    deadlines: Cow<'a, DeadlineState>,
    clusters: Cow<'a, ClustersState>,
}

/// The 3Sigma history, nearly all of a snapshot's bytes once its window is
/// full: whole, or as its changes since the snapshot before (which a
/// restore applies to that one's history).
#[derive(Serialize, Deserialize)]
pub(super) enum HistoryPart<'a> {
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
    group: String,
    job_name: String,
    logical_name: String,
    scheduling_class: u8,
    priority: u32,
    cpu_request: f64,
    mem_request: f64,
    num_tasks: u32,
    partition: String,
    cluster: String,
    time_limit_us: Option<u64>,
    deadline_us: Option<u64>,
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
            group: j.group.clone(),
            job_name: j.job_name.clone(),
            logical_name: j.logical_name.clone(),
            scheduling_class: j.scheduling_class,
            priority: j.priority,
            cpu_request: j.cpu_request,
            mem_request: j.mem_request,
            num_tasks: j.num_tasks,
            partition: j.partition.clone(),
            cluster: j.cluster.clone(),
            time_limit_us: j.time_limit_us,
            deadline_us: j.deadline_us,
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
            group: s.group,
            job_name: s.job_name,
            logical_name: s.logical_name,
            scheduling_class: s.scheduling_class,
            priority: s.priority,
            cpu_request: s.cpu_request,
            mem_request: s.mem_request,
            partition: s.partition,
            time_limit_us: s.time_limit_us,
            deadline_us: s.deadline_us,
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
            cluster: s.cluster,
        }
    }
}

impl From<&LiveJob> for LiveJobState {
    fn from(job: &LiveJob) -> Self {
        LiveJobState {
            submitted: (&job.submitted).into(),
            record: job.record.to_bytes(),
            runtimes: job.runtimes.clone(),
            last_event_us: job.last_event_us,
            progress: job.progress.clone(),
            partition: job.partition,
            pacing: job.pacing.clone(),
        }
    }
}

impl LiveJobState {
    fn into_live(self, job_id: u64) -> Result<LiveJob, SnapshotError> {
        let record = JobRecord::from_bytes(&self.record)
            .map_err(|reason| SnapshotError::Record { job_id, reason })?;
        Ok(LiveJob {
            submitted: self.submitted.into(),
            record,
            runtimes: self.runtimes,
            last_event_us: self.last_event_us,
            progress: self.progress,
            partition: self.partition,
            pacing: self.pacing,
        })
    }
}

impl<'a> State<'a> {
    /// The state of the engine's parts, borrowed; `history` whole or as
    /// its changes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn of(
        policies: &[Box<dyn Policy>],
        history: HistoryPart<'a>,
        jobs: &HashMap<u64, LiveJob>,
        tasks: &'a HashMap<(u64, u32), LiveTask>,
        machines: machines::Saved<'a>,
        policy_errors: &BTreeMap<&'static str, PolicyErrors>,
        events: u64,
        clock: ClockState,
        next_sweep_us: u64,
        etas: &'a EtaCalibration,
        capacity: &'a CapacityState,
        deadlines: &'a DeadlineState,
        clusters: &'a ClustersState,
        starts: &'a StartState,
    ) -> Self {
        State {
            format: SNAPSHOT_FORMAT,
            policies: policies.iter().map(|p| (p.kind(), p.snapshot())).collect(),
            history,
            jobs: jobs.iter().map(|(&id, job)| (id, job.into())).collect(),
            tasks: Cow::Borrowed(tasks),
            machines: Cow::Borrowed(machines.records),
            lifetimes: Cow::Borrowed(machines.lifetimes),
            risk_refresh: Cow::Borrowed(machines.refresh),
            policy_errors: PolicyKind::ALL
                .iter()
                .filter_map(|&k| Some((k, policy_errors.get(k.name())?.clone())))
                .collect(),
            events,
            machines_seen: Cow::Borrowed(machines.seen),
            clock,
            next_sweep_us,
            etas: Cow::Borrowed(etas),
            starts: Cow::Borrowed(starts),
            risk_outcomes: Cow::Borrowed(machines.outcomes),
            capacity: Cow::Borrowed(capacity),
            deadlines: Cow::Borrowed(deadlines),
            clusters: Cow::Borrowed(clusters),
        }
    }

    /// Appended to `out`.
    pub(super) fn encode(&self, out: Vec<u8>) -> Result<Vec<u8>, SnapshotError> {
        Ok(postcard::to_extend(self, out)?)
    }
}

/// What a chain of snapshots restores, owned, for the engine to take
/// over ([`Engine::restore_chain`](super::Engine::restore_chain)).
pub(super) struct Restored {
    pub(super) policies: Vec<Box<dyn Policy>>,
    pub(super) history: History,
    pub(super) jobs: HashMap<u64, LiveJob>,
    pub(super) tasks: HashMap<(u64, u32), LiveTask>,
    pub(super) machines: machines::Restored,
    pub(super) policy_errors: BTreeMap<&'static str, PolicyErrors>,
    pub(super) events: u64,
    pub(super) clock: ClockState,
    pub(super) next_sweep_us: u64,
    pub(super) etas: EtaCalibration,
    pub(super) capacity: CapacityState,
    pub(super) deadlines: DeadlineState,
    pub(super) clusters: ClustersState,
    pub(super) starts: StartState,
}

/// The state of `chain`: the first a whole snapshot, each after it taken
/// with the history changed since the one before; `configured`, the
/// policies the engine runs, must be those it holds.
pub(super) fn restore_chain(
    chain: &[&[u8]],
    configured: &[PolicyKind],
) -> Result<Restored, SnapshotError> {
    let (first, later) = chain.split_first().ok_or(SnapshotError::Chain {
        reason: "no snapshot".into(),
    })?;
    let mut state = decode(first)?;
    let HistoryPart::Whole(history) = state.history else {
        return Err(SnapshotError::Chain {
            reason: "the first snapshot holds only history changes".into(),
        });
    };
    let mut history = history.into_owned();
    for snapshot in later {
        state = decode(snapshot)?;
        let HistoryPart::Changes(changes) = state.history else {
            return Err(SnapshotError::Chain {
                reason: "a whole snapshot after the first".into(),
            });
        };
        history
            .apply_changes(changes)
            .map_err(|reason| SnapshotError::Chain { reason })?;
    }
    let found: Vec<PolicyKind> = state.policies.iter().map(|(k, _)| *k).collect();
    if found != configured {
        return Err(SnapshotError::Policies {
            found,
            configured: configured.to_vec(),
        });
    }
    Ok(Restored {
        policies: state
            .policies
            .iter()
            .map(|(kind, bytes)| policies::restore(*kind, bytes))
            .collect::<Result<_, _>>()?,
        history,
        jobs: state
            .jobs
            .into_iter()
            .map(|(id, job)| Ok((id, job.into_live(id)?)))
            .collect::<Result<_, SnapshotError>>()?,
        tasks: state.tasks.into_owned(),
        machines: MachinesState {
            records: state.machines.into_owned(),
            seen: state.machines_seen.into_owned(),
            lifetimes: state.lifetimes.into_owned(),
            refresh: state.risk_refresh.into_owned(),
            outcomes: state.risk_outcomes.into_owned(),
        },
        policy_errors: state
            .policy_errors
            .into_iter()
            .map(|(k, errors)| (k.name(), errors))
            .collect(),
        events: state.events,
        clock: state.clock,
        next_sweep_us: state.next_sweep_us,
        etas: state.etas.into_owned(),
        capacity: state.capacity.into_owned(),
        deadlines: state.deadlines.into_owned(),
        clusters: state.clusters.into_owned(),
        starts: state.starts.into_owned(),
    })
}

fn decode(snapshot: &[u8]) -> Result<State<'static>, SnapshotError> {
    let format = postcard::take_from_bytes::<u32>(snapshot)?.0;
    if format != SNAPSHOT_FORMAT {
        return Err(SnapshotError::Format { found: format });
    }
    Ok(postcard::from_bytes(snapshot)?)
}

/// Why [`Engine::restore`](super::Engine::restore) failed: the configuration, or the snapshot.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(transparent)]
    Config(jobcast_ingest::config::ConfigError),
    #[error(transparent)]
    Snapshot(#[from] SnapshotError),
}
