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
//! reason and change nothing; the service dead-letters them. Event time is
//! the input partitions' together ([`clock`](self::clock)): an event that
//! stands alone far ahead is held until its partition's next events say
//! whether it was real, and refused if it was not.
//!
//! One file per concern: `config` (what the engine runs), `clock` (event
//! time, from the input partitions together), `records` (what it knows,
//! as stored and served) and [`layout`] (their binary form), `effects`
//! (what applying events produces), `lifecycle` (a job from submission
//! to its end), `pacing` (how often a job's decisions go out),
//! `progress` (when each live job should finish, carried by its
//! decisions) with `order_sums` (the sums its ETA takes of the jobs
//! queued), `machines` (machines, and the preemption risk of tasks on
//! transient VMs), `expiry` (giving up on jobs and machines that stopped
//! reporting) and `snapshot` (the whole state as one value, which a
//! restarted service restores instead of applying all its input again).

mod clock;
mod config;
mod effects;
mod expiry;
pub mod layout;
mod lifecycle;
mod machines;
mod order_sums;
mod pacing;
mod progress;
mod records;
mod snapshot;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::{Event, JobSubmitted};

use crate::decision::PolicyKind;
use crate::history::History;
use crate::policies::Policy;
use crate::policies::build;
use crate::preemption::online::OnlineFitter;
use crate::queues::QueueConfig;
use jobcast_ingest::config::ConfigError;

pub use clock::{Held, MAX_HELD_PER_PARTITION, Origin, Refused};
pub use config::{BathtubPrior, EngineConfig, RiskSettings, live_policies};
pub use effects::{Changed, Effects, Output, Rejection};
pub use expiry::ExpirySettings;
pub use progress::EtaSettings;
pub use records::{
    ERROR_PCT_BOUNDS, JobRecord, JobState, MachineRecord, MachineRisk, PolicyErrors,
    PredictionError, TaskRecord,
};
pub use snapshot::{RestoreError, SNAPSHOT_FORMAT, SnapshotError};

struct LiveJob {
    submitted: JobSubmitted,
    record: JobRecord,
    /// Runtime of each task's finished attempt, by task index: only tasks
    /// that finished have an entry, so a job declaring a million tasks
    /// costs what its events cost, not what it declares.
    runtimes: BTreeMap<u32, u64>,
    last_event_us: u64,
    progress: progress::Progress,
    /// The input partition of its submission, whose events publish its
    /// waiting decision (`pacing.rs`).
    partition: i32,
    pacing: pacing::Pacing,
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
    /// Machines and VMs, the cluster's capacity, the risk of tasks on
    /// transient VMs.
    machines: machines::Machines,
    policy_errors: BTreeMap<&'static str, PolicyErrors>,
    events: u64,
    expiry: ExpirySettings,
    /// Event time, from the input partitions together.
    clock: clock::EventClock,
    /// The clock's time at which to look next for what stopped reporting.
    next_sweep_us: u64,
    /// The ETAs it gives: their capacity, calibration and the rows they
    /// walk.
    etas: progress::Etas,
    /// `engine.max_live_jobs` and `engine.max_live_tasks`.
    max_live_jobs: u64,
    max_live_tasks: u64,
    /// `engine.min_republish_ms` in µs, and the decisions waiting for it.
    min_republish_us: u64,
    due: pacing::DueQueue,
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
        for (key, max) in [
            ("max_live_jobs", config.max_live_jobs),
            ("max_live_tasks", config.max_live_tasks),
        ] {
            if max == 0 {
                return Err(ConfigError::new(key, "must be positive"));
            }
        }
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
            machines: machines::Machines::new(OnlineFitter::new(online), config.risk.clone()),
            policy_errors: BTreeMap::new(),
            events: 0,
            expiry: config.expiry,
            clock: clock::EventClock::new(max_future_skew_us),
            next_sweep_us: 0,
            etas: progress::Etas::new(config.eta),
            max_live_jobs: config.max_live_jobs,
            max_live_tasks: config.max_live_tasks,
            min_republish_us: config.min_republish_ms.saturating_mul(1000),
            due: pacing::DueQueue::default(),
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
        self.machines.get(machine_id)
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

    /// The engine's now: event time as the input partitions agree on it
    /// (`clock.rs`), which drives expiry and the store's retention.
    pub fn now_us(&self) -> u64 {
        self.clock.now_us()
    }

    /// Events held far ahead of the clock, waiting for their partitions to
    /// confirm or refute the jump.
    pub fn held_events(&self) -> usize {
        self.clock.held_events()
    }

    /// Decisions waiting for `engine.min_republish_ms` (`pacing.rs`).
    pub fn waiting_decisions(&self) -> usize {
        self.due.len()
    }

    /// Apply one event from `origin` (its input partition and offset).
    ///
    /// An event far ahead of every partition's latest event time is held
    /// (`Ok(Applied::Held)`), and
    /// applied or refused when a later event settles it (this one, or
    /// another's): what the released events produce joins `effects`, and
    /// those refused are listed in [`Effects::refused`]. On rejection the event itself
    /// changes nothing (a held run it settled is settled all the same).
    pub fn apply(
        &mut self,
        origin: Origin,
        event: &Event,
        effects: &mut Effects,
    ) -> Result<Applied, Rejection> {
        let admission = self.clock.admit(origin, event);
        for held in admission.refuse {
            let rejection = self.clock.rejection(held.origin, &held.event, false);
            effects.refused.push(Refused {
                origin: held.origin,
                event: held.event,
                rejection,
            });
        }
        for held in admission.release {
            self.release(held, effects);
        }
        let outcome = match admission.this {
            clock::Verdict::Apply => self
                .apply_now(origin, event, effects)
                .map(|()| Applied::Now),
            clock::Verdict::Hold => Ok(Applied::Held),
            clock::Verdict::Refuse => Err(self.clock.rejection(origin, event, true)),
        };
        // What this event settled elsewhere: runs the clock has caught up
        // with, or that the partitions now agree on.
        loop {
            let settled = self.clock.settle();
            if settled.is_empty() {
                break;
            }
            for held in settled {
                self.release(held, effects);
            }
        }
        outcome
    }

    /// Apply an event that was held; if it makes no sense now, it is
    /// refused as it would have been on arrival.
    fn release(&mut self, held: Held, effects: &mut Effects) {
        if let Err(rejection) = self.apply_now(held.origin, &held.event, effects) {
            effects.refused.push(Refused {
                origin: held.origin,
                event: held.event,
                rejection,
            });
        }
    }

    fn apply_now(
        &mut self,
        origin: Origin,
        event: &Event,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        let mut of_job = None;
        match event {
            Event::JobSubmitted(job) => self.submit(origin.partition, job, effects)?,
            Event::Task(task) => {
                self.task_event(task, effects)?;
                of_job = Some(task.job_id);
            }
            Event::JobEnded(end) => self.end(end, effects)?,
            Event::Machine(machine) => self.machines.event(machine, effects),
        }
        self.clock.applied(origin.partition, event.time_us());
        let now_us = self.clock.cap_us(event.time_us());
        self.publish_due(origin.partition, now_us, of_job, effects);
        self.machines.refresh_risks(now_us, effects);
        self.expire_silent(effects);
        self.history.drain_changes(&mut effects.history.0);
        self.events += 1;
        Ok(())
    }
}

/// What [`Engine::apply`] did with an event it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Now,
    /// Held, far ahead of the clock (`clock.rs`).
    Held,
}
