//! The transform at the heart of `jobcast serve`: canonical events in,
//! scheduling decisions and state changes out.
//!
//! The engine follows each job from submission to its end, runs every
//! configured prediction policy on it in shadow, lets the *driving* policy's
//! decisions go out to schedulers, and when the job ends, teaches the shared
//! 3Sigma history what it did and scores each policy's estimate against the
//! truth. It does no I/O and reads no clock (event time drives everything),
//! so the same input gives the same output: a restarted service restores
//! its last snapshot and applies the input logged since, and reaches the
//! exact state it had.
//!
//! Events that are well-formed JSON but make no sense for the state they
//! arrive in (a task of an unknown job, a finish before any schedule, time
//! going backwards within a job, a second submission) are rejected with a
//! reason and change nothing; the service dead-letters them.
//!
//! One file per concern: `config` (what the engine runs), `records` (what
//! it knows, as stored and served) and [`layout`] (their binary form),
//! `effects` (what applying events produces), `lifecycle` (a job from
//! submission to its end), `eta` (when each live job should finish, carried
//! by its decisions), `risk` (machines, and the preemption risk of
//! tasks on transient VMs), `expiry` (giving up on jobs and machines that
//! stopped reporting) and `snapshot` (the whole state as one value,
//! which a restarted service restores instead of applying all its input
//! again).

mod config;
mod effects;
mod eta;
mod expiry;
pub mod layout;
mod lifecycle;
mod records;
mod risk;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::{Event, JobSubmitted};

use crate::config::ConfigError;
use crate::decision::PolicyKind;
use crate::eta::EtaCalibration;
use crate::history::History;
use crate::policies::build;
use crate::policy::Policy;
use crate::preemption::online::OnlineFitter;
use crate::queues::QueueConfig;

pub use config::{BathtubPrior, EngineConfig, RiskSettings, live_policies};
pub use effects::{Changed, Effects, Output, Rejection};
pub use eta::EtaSettings;
pub use expiry::ExpirySettings;
pub use records::{
    ERROR_PCT_BOUNDS, JobRecord, JobState, MachineRecord, MachineRisk, PolicyErrors,
    PredictionError, TaskRecord,
};
pub use snapshot::{RestoreError, SNAPSHOT_FORMAT, SnapshotError};

struct LiveJob {
    submitted: JobSubmitted,
    record: JobRecord,
    /// Runtime of each task's finished attempt.
    runtimes: Vec<Option<u64>>,
    last_event_us: u64,
    progress: eta::Progress,
}

pub struct Engine {
    driver: PolicyKind,
    policies: Vec<Box<dyn Policy>>,
    history: History,
    queues: QueueConfig,
    jobs: HashMap<u64, LiveJob>,
    tasks: HashMap<(u64, u32), TaskRecord>,
    /// Ended jobs' records, until the caller has stored them.
    ended: HashMap<u64, JobRecord>,
    machines: HashMap<u64, MachineRecord>,
    /// Preemption lifetimes of the VMs seen, fitted as they end.
    lifetimes: OnlineFitter,
    risk: RiskSettings,
    /// (event time, machine) at which a VM's risk is to be scored again.
    risk_refresh: BTreeSet<(u64, u64)>,
    policy_errors: BTreeMap<&'static str, PolicyErrors>,
    events: u64,
    expiry: ExpirySettings,
    /// The latest event time at which each known machine reported.
    machines_seen: HashMap<u64, u64>,
    /// The latest event time applied, and the next at which to look for
    /// what stopped reporting.
    watermark_us: u64,
    next_sweep_us: u64,
    /// How far ahead of `watermark_us` an event may be (µs), if bounded.
    max_future_skew_us: Option<u64>,
    eta_settings: EtaSettings,
    /// How far off the ETAs given to finished jobs were.
    etas: EtaCalibration,
    /// The CPUs of the machines up, for ETAs without configured slots.
    capacity_cpus: f64,
}

impl Engine {
    /// An engine for `config`; an error names the bad setting (its key
    /// relative to the `engine` section).
    pub fn new(config: &EngineConfig) -> Result<Self, ConfigError> {
        if matches!(config.policy, PolicyKind::Oracle) {
            return Err(ConfigError::new(
                "policy",
                "the oracle policy needs true runtimes, which a live service does not have",
            ));
        }
        config.history.validate().map_err(|e| e.within("history"))?;
        config.expiry.validate().map_err(|e| e.within("expiry"))?;
        config.queues.validate().map_err(|e| e.within("queues"))?;
        config.eta.validate().map_err(|e| e.within("eta"))?;
        let max_future_skew_us = config.max_future_skew_us()?;
        let online = config.risk.online().map_err(|e| e.within("risk"))?;
        let mut kinds = vec![config.policy];
        for &kind in &config.shadow {
            if kind == PolicyKind::Oracle {
                return Err(ConfigError::new(
                    "shadow",
                    "the oracle policy cannot run in shadow",
                ));
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        let policies = kinds
            .iter()
            .map(|&kind| build(kind, &config.policies, None))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.within("policies"))?;
        Ok(Engine {
            driver: config.policy,
            policies,
            history: {
                let mut history = History::new(config.history.clone());
                history.track_changes();
                history
            },
            queues: config.queues.clone(),
            jobs: HashMap::new(),
            tasks: HashMap::new(),
            ended: HashMap::new(),
            machines: HashMap::new(),
            lifetimes: OnlineFitter::new(online),
            risk: config.risk.clone(),
            risk_refresh: BTreeSet::new(),
            policy_errors: BTreeMap::new(),
            events: 0,
            expiry: config.expiry,
            machines_seen: HashMap::new(),
            watermark_us: 0,
            next_sweep_us: 0,
            max_future_skew_us,
            eta_settings: config.eta,
            etas: EtaCalibration::default(),
            capacity_cpus: 0.0,
        })
    }

    /// Events applied so far.
    pub fn events(&self) -> u64 {
        self.events
    }

    pub fn live_jobs(&self) -> usize {
        self.jobs.len()
    }

    pub fn history(&self) -> &History {
        &self.history
    }

    /// The current record of a job the engine holds (live, or ended and
    /// not yet released by [`Engine::release_ended`]).
    pub fn job(&self, job_id: u64) -> Option<&JobRecord> {
        self.jobs
            .get(&job_id)
            .map(|j| &j.record)
            .or_else(|| self.ended.get(&job_id))
    }

    pub fn task(&self, job_id: u64, task_index: u32) -> Option<&TaskRecord> {
        self.tasks.get(&(job_id, task_index))
    }

    /// A policy's errors so far, once it has scored a job.
    pub fn policy_errors(&self, policy: &str) -> Option<&PolicyErrors> {
        self.policy_errors.get(policy)
    }

    pub fn machine(&self, machine_id: u64) -> Option<&MachineRecord> {
        self.machines.get(&machine_id)
    }

    /// Release the records of jobs that have ended (and their tasks') once
    /// they are stored, so memory follows the live jobs only.
    pub fn release_ended(&mut self) {
        for (job_id, record) in self.ended.drain() {
            for index in 0..record.width {
                self.tasks.remove(&(job_id, index));
            }
        }
    }

    /// Apply one event. On rejection nothing changes.
    pub fn apply(&mut self, event: &Event, effects: &mut Effects) -> Result<(), Rejection> {
        self.check_not_ahead(event.time_us())?;
        match event {
            Event::JobSubmitted(job) => self.submit(job, effects)?,
            Event::Task(task) => self.task_event(task, effects)?,
            Event::JobEnded(end) => self.end(end, effects)?,
            Event::Machine(machine) => self.machine_event(machine, effects),
        }
        self.refresh_risks(event.time_us(), effects);
        self.expire_silent(event.time_us(), effects);
        self.history.drain_changes(&mut effects.history.0);
        self.events += 1;
        Ok(())
    }

    /// Reject an event further ahead of the latest event time applied than
    /// the configured skew. The first event has nothing to be ahead of.
    fn check_not_ahead(&self, time_us: u64) -> Result<(), Rejection> {
        let Some(skew_us) = self.max_future_skew_us else {
            return Ok(());
        };
        if self.events == 0 || time_us <= self.watermark_us.saturating_add(skew_us) {
            return Ok(());
        }
        Err(effects::reject(
            "future_time",
            format!(
                "event time {time_us} µs is {:.0} s ahead of the latest applied ({} µs), more \
                 than engine.max_future_skew_secs ({} s)",
                (time_us - self.watermark_us) as f64 / 1e6,
                self.watermark_us,
                skew_us / 1_000_000
            ),
        ))
    }
}
