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
//! A job's life in the engine is this file's [`Engine`]: submitted
//! (every policy decides), its tasks' events (policies may decide again,
//! e.g. SLearn once its pilots end), and its end (each policy's estimate
//! scored against the truth, and the history and policies taught through
//! [`FinishedJob::learn`]). Every other concern is a component the engine
//! holds, in a file of its own with the methods that change it: `clock`
//! (event time, from the input partitions together), `pacing` (how often
//! a job's decisions go out), `progress` (when each live job should
//! finish, carried by its decisions) with `order_sums` (the sums its ETA
//! takes of the jobs queued), `machines` (machines, and the preemption
//! risk of tasks on transient VMs), `capacity` (CloudCoaster's
//! controller), `deadlines` (Teylo et al.'s maps of deadline jobs),
//! `clusters` (what each cluster of a federation holds), `expiry` (when
//! to give up on jobs and machines that stopped reporting). Beside them: `config` (what the
//! engine runs), `records` (what it knows, as stored and served) and
//! [`layout`] (their binary form), `effects` (what applying events
//! produces) and `snapshot` (the whole state as one value, which a
//! restarted service restores instead of applying all its input again).

mod capacity;
mod clock;
mod clusters;
mod config;
mod deadlines;
mod effects;
mod expiry;
pub mod layout;
mod live_task;
mod machines;
mod order_sums;
mod pacing;
mod progress;
mod records;
mod running;
mod snapshot;
mod starts;
#[cfg(test)]
mod tests;

use std::borrow::Cow;
use std::collections::BTreeMap;

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, MachineKind, TaskEvent, TaskKind,
};

use crate::decision::{Decision, Estimate, PolicyKind, Start};
use crate::eta;
use crate::finished::FinishedJob;
use crate::history::{History, HistoryKey};
use crate::policies::{Context, Policy, TaskEnd, build};
use crate::preemption::online::OnlineFitter;
use crate::queues::QueueConfig;
use jobcast_ingest::config::ConfigError;

pub use clock::{Held, MAX_HELD_PER_PARTITION, Origin, Refused};
pub use config::{
    BathtubPrior, CapacitySettings, DeadlineSettings, EngineConfig, FleetMode, RiskSettings,
    live_policies,
};
use effects::reject;
pub use effects::{Changed, Effects, Output, Rejection};
pub use expiry::ExpirySettings;
use live_task::LiveTask;
pub use progress::{EtaOrder, EtaSettings};
pub use records::{
    CapacityDecision, ClusterRecord, DeadlineAction, DeadlineDecision, DeadlinePlan,
    DeadlineRecord, ERROR_PCT_BOUNDS, FleetChange, FleetRecord, FleetVm, JobRecord, JobState,
    MachineRecord, MachineRisk, PlannedTask, PlannedVm, PolicyErrors, PredictionError, Recovery,
    RecoveryState, TaskRecord,
};
use snapshot::HistoryPart;
pub use snapshot::{RestoreError, SNAPSHOT_FORMAT, SnapshotError};
pub use starts::{BackfillKind, PlansOn, StartSettings};

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
    tasks: HashMap<(u64, u32), LiveTask>,
    /// Ended jobs' records, until the caller has stored them.
    ended: HashMap<u64, JobRecord>,
    /// Machines and VMs, and the risk of tasks on transient VMs.
    machines: machines::Machines,
    /// CloudCoaster's controller of the transient short partition.
    capacity: capacity::Capacity,
    /// Teylo et al.'s maps of deadline jobs, and the hibernated VMs'
    /// recovery groups.
    deadlines: deadlines::Deadlines,
    /// What each cluster holds: its machines up and their CPUs (the
    /// capacity its ETAs divide by), its live jobs.
    clusters: clusters::Clusters,
    policy_errors: BTreeMap<&'static str, PolicyErrors>,
    events: u64,
    /// When to look next for jobs and machines that stopped reporting.
    expiry: expiry::Expiry,
    /// Event time, from the input partitions together.
    clock: clock::EventClock,
    /// The ETAs it gives: their capacity, calibration and the rows they
    /// walk.
    etas: progress::Etas,
    /// `engine.starts`: whether and how pending jobs get start estimates.
    starts: starts::Starts,
    /// `engine.max_live_jobs` and `engine.max_live_tasks`.
    max_live_jobs: u64,
    max_live_tasks: u64,
    /// `engine.min_republish_ms`, and the decisions waiting for it.
    pacer: pacing::Pacer,
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
        config.starts.validate().map_err(|e| e.within("starts"))?;
        config
            .capacity
            .validate()
            .map_err(|e| e.within("capacity"))?;
        config
            .deadlines
            .validate()
            .map_err(|e| e.within("deadlines"))?;
        let max_future_skew_us = config.max_future_skew_us()?;
        for (key, max) in [
            ("max_live_jobs", config.max_live_jobs),
            ("max_live_tasks", config.max_live_tasks),
            ("max_clusters", u64::from(config.max_clusters)),
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
            capacity: capacity::Capacity::new(&config.capacity),
            deadlines: deadlines::Deadlines::new(&config.deadlines),
            clusters: clusters::Clusters::new(config.max_clusters),
            policy_errors: BTreeMap::new(),
            events: 0,
            expiry: expiry::Expiry::new(config.expiry),
            clock: clock::EventClock::new(max_future_skew_us),
            etas: progress::Etas::new(config.eta),
            starts: starts::Starts::new(config.starts),
            max_live_jobs: config.max_live_jobs,
            max_live_tasks: config.max_live_tasks,
            pacer: pacing::Pacer::new(config.min_republish_ms, config.starts.refresh_ms),
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

    pub fn task(&self, job_id: u64, task_index: u32) -> Option<TaskRecord> {
        let key = (job_id, task_index);
        self.tasks.get(&key).map(|t| t.record(key))
    }

    /// A policy's errors so far, once it has scored a job.
    pub fn policy_errors(&self, policy: &str) -> Option<&PolicyErrors> {
        self.policy_errors.get(policy)
    }

    pub fn machine(&self, machine_id: u64) -> Option<&MachineRecord> {
        self.machines.get(machine_id)
    }

    /// The last decision of CloudCoaster's controller, if it runs and has
    /// made one.
    pub fn capacity(&self) -> Option<&CapacityDecision> {
        self.capacity.last()
    }

    /// Every cluster listed (holding jobs or machines, or idle until the
    /// expiry sweep), by name
    /// (`clusters.rs`).
    pub fn clusters(&self) -> Vec<ClusterRecord> {
        self.clusters.records()
    }

    /// A live deadline job's plan and recoveries (`deadlines.rs`).
    pub fn deadline(&self, job_id: u64) -> Option<&DeadlineRecord> {
        self.deadlines.record(job_id)
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
        self.pacer.waiting()
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
        let mut to_plan = None;
        match event {
            Event::JobSubmitted(job) => {
                self.submit(origin.partition, job, effects)?;
                to_plan = Some(job.job_id);
            }
            Event::Task(task) => {
                self.task_event(task, effects)?;
                of_job = Some(task.job_id);
                to_plan = of_job;
            }
            Event::JobEnded(end) => self.end(end, effects)?,
            Event::Machine(machine) => {
                let id = machine.machine_id;
                let before = self.machines.get(id);
                let cluster = match (&machine.cluster, before) {
                    (named, _) if !named.is_empty() => named.as_str(),
                    (_, Some(record)) => record.cluster.as_str(),
                    (_, None) => "",
                };
                if machine.kind != MachineKind::Remove && !self.clusters.admits(cluster) {
                    return Err(self.too_many_clusters(&format!("machine {id}"), cluster));
                }
                let before = before.map(|m| {
                    let (cluster, up, cpus) = clusters::counted(m);
                    (cluster.to_owned(), up, cpus)
                });
                // Whether the task scored on the VM still runs there.
                let running = self.machines.pending_task(id).is_some_and(|key| {
                    self.tasks.get(&key).is_some_and(|t| {
                        t.running_since_us().is_some() && t.machine_id() == Some(id)
                    })
                });
                self.machines.event(machine, effects);
                self.clusters.machine_changed(
                    before
                        .as_ref()
                        .map(|(c, up, cpus)| (c.as_str(), *up, *cpus)),
                    self.machines.get(id).map(clusters::counted),
                    machine.time_us,
                );
                if machine.kind == MachineKind::Remove {
                    self.machines.vm_left(machine, running);
                }
                if !self.machines.is_up(id) {
                    self.capacity.machine_gone(id);
                }
                self.hibernation(machine.kind, id, machine.time_us, effects);
            }
        }
        self.clock.applied(origin.partition, event.time_us());
        let now_us = self.clock.cap_us(event.time_us());
        if let Some(job_id) = to_plan {
            self.plan_deadline(job_id, now_us, effects);
        }
        self.deadlines.due(now_us, effects);
        self.publish_due(origin.partition, now_us, of_job, effects);
        self.machines.refresh_risks(now_us, effects);
        self.expire_silent(effects);
        self.capacity.decide(now_us, &self.machines, effects);
        self.history.drain_changes(&mut effects.history.0);
        self.events += 1;
        Ok(())
    }

    fn submit(
        &mut self,
        partition: i32,
        job: &JobSubmitted,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        if self.jobs.contains_key(&job.job_id) {
            return Err(reject(
                "duplicate_job",
                format!("job {} was already submitted", job.job_id),
            ));
        }
        if !self.clusters.admits(&job.cluster) {
            return Err(self.too_many_clusters(&format!("job {}", job.job_id), &job.cluster));
        }
        if self.jobs.len() as u64 >= self.max_live_jobs {
            return Err(reject(
                "over_budget",
                format!(
                    "job {}: {} jobs are live, engine.max_live_jobs",
                    job.job_id,
                    self.jobs.len()
                ),
            ));
        }
        let record = JobRecord {
            job_id: job.job_id,
            submit_us: job.time_us,
            user: job.user.clone(),
            job_name: job.job_name.clone(),
            logical_name: job.logical_name.clone(),
            cluster: job.cluster.clone(),
            width: job.num_tasks,
            state: JobState::Running,
            end_us: None,
            tasks_finished: 0,
            estimates: BTreeMap::new(),
            actual_mean_task_runtime_us: None,
            errors: BTreeMap::new(),
            eta: None,
        };
        self.clusters.job_started(&job.cluster, job.time_us);
        let progress =
            progress::Progress::submitted(eta::size_hint_us(&self.history, job, job.time_us));
        self.jobs.insert(
            job.job_id,
            LiveJob {
                submitted: job.clone(),
                record,
                runtimes: BTreeMap::new(),
                last_event_us: job.time_us,
                progress,
                partition,
                pacing: Default::default(),
            },
        );
        self.consult_policies(job.job_id, job.time_us, effects, |policy, ctx| {
            Some(policy.on_submit(job, ctx))
        });
        self.reindex_eta(job.job_id);
        effects.jobs.mark(job.job_id);
        Ok(())
    }

    fn live_job(&self, job_id: u64, time_us: u64) -> Result<&LiveJob, Rejection> {
        let job = self.jobs.get(&job_id).ok_or_else(|| {
            reject(
                "unknown_job",
                format!("job {job_id} is not running (never submitted, or already ended)"),
            )
        })?;
        if time_us < job.last_event_us {
            return Err(reject(
                "time_backwards",
                format!(
                    "job {job_id}: event at {time_us} µs is earlier than its previous event at {} µs",
                    job.last_event_us
                ),
            ));
        }
        Ok(job)
    }

    /// Apply a task event; its job's ETA row follows what it changed
    /// (tasks running and finished, the driving policy's estimate).
    fn task_event(&mut self, event: &TaskEvent, effects: &mut Effects) -> Result<(), Rejection> {
        self.apply_task_event(event, effects)?;
        self.reindex_eta(event.job_id);
        Ok(())
    }

    fn apply_task_event(
        &mut self,
        event: &TaskEvent,
        effects: &mut Effects,
    ) -> Result<(), Rejection> {
        let job = self.live_job(event.job_id, event.time_us)?;
        if event.task_index >= job.submitted.num_tasks {
            return Err(reject(
                "unknown_task",
                format!(
                    "job {} has {} tasks; there is no task {}",
                    event.job_id, job.submitted.num_tasks, event.task_index
                ),
            ));
        }
        let key = (event.job_id, event.task_index);
        let previous = self.tasks.get(&key);
        if previous.is_none() && self.tasks.len() as u64 >= self.max_live_tasks {
            return Err(reject(
                "over_budget",
                format!(
                    "job {} task {}: {} tasks have records, engine.max_live_tasks",
                    event.job_id,
                    event.task_index,
                    self.tasks.len()
                ),
            ));
        }
        let started = previous.and_then(LiveTask::running_since_us);
        let runtime_us = match event.kind {
            TaskKind::Finish => Some(
                event.time_us
                    - started.ok_or_else(|| {
                        reject(
                            "no_running_attempt",
                            format!(
                                "job {} task {}: finished without a running attempt",
                                event.job_id, event.task_index
                            ),
                        )
                    })?,
            ),
            _ => None,
        };

        let mut task = previous.copied().unwrap_or(LiveTask::new(event.kind));
        task.apply(event.kind, event.time_us, event.machine_id, runtime_us);
        self.tasks.insert(key, task);
        if event.kind.ends_attempt()
            && let Some(machine_id) = task.machine_id()
        {
            self.machines.attempt_ended(machine_id, event, effects);
        }
        effects.tasks.mark(key);
        if let Some(machine_id) = event.machine_id {
            self.machines.seen(machine_id, event.time_us);
        }
        if event.kind == TaskKind::Schedule {
            self.place_on_vm(event, effects);
        }
        self.count_long(event);
        self.track_deadline_task(event, runtime_us, effects);

        let job = self.jobs.get_mut(&event.job_id).expect("checked above");
        job.last_event_us = event.time_us;
        let mut waited = false;
        if event.kind == TaskKind::Schedule {
            if let Some(since) = started {
                // A schedule over a running attempt replaces it.
                job.progress.attempt_ended(since, None);
            }
            waited = starts::waits(job);
            job.progress.attempt_started(event.time_us);
        }
        if waited
            && !self
                .starts
                .job_started(event.job_id, event.time_us, &self.jobs, &self.clusters)
        {
            effects.starts_overfull += 1;
        }
        let job = self.jobs.get_mut(&event.job_id).expect("checked above");
        // Only ends of running attempts tell the policies anything: a
        // pilot that fails or is evicted must be replaced.
        let ended_running_attempt = event.kind.ends_attempt() && started.is_some();
        if !ended_running_attempt {
            return Ok(());
        }
        let mut first_finish = None;
        if let Some(runtime) = runtime_us
            && job.runtimes.insert(event.task_index, runtime).is_none()
        {
            job.record.tasks_finished += 1;
            first_finish = Some(runtime);
        }
        if let Some(since) = started {
            job.progress.attempt_ended(since, first_finish);
        }
        let end = TaskEnd {
            job_id: event.job_id,
            task_index: event.task_index,
            time_us: event.time_us,
            runtime_us,
        };
        self.consult_policies(event.job_id, event.time_us, effects, |policy, ctx| {
            policy.on_task_end(&end, ctx)
        });
        effects.jobs.mark(event.job_id);
        Ok(())
    }

    fn end(&mut self, end: &JobEnded, effects: &mut Effects) -> Result<(), Rejection> {
        self.live_job(end.job_id, end.time_us)?;
        self.forget_pacing(end.job_id, effects);
        let mut job = self.jobs.remove(&end.job_id).expect("checked above");
        self.etas.forget(end.job_id);
        self.capacity.job_ended(end.job_id);
        self.deadlines.job_ended(end.job_id);
        self.clusters.job_ended(&job.submitted.cluster, end.time_us);
        self.starts.job_ended(&job, self.driver);
        job.record.end_us = Some(end.time_us);
        job.record.state = match end.outcome {
            JobOutcome::Finish => JobState::Finished,
            JobOutcome::Fail => JobState::Failed,
            JobOutcome::Kill => JobState::Killed,
            JobOutcome::Lost => JobState::Lost,
        };
        if end.outcome == JobOutcome::Finish {
            self.etas.learn(&job, end.time_us, effects);
        }
        let every_task = job.runtimes.len() as u64 == u64::from(job.submitted.num_tasks);
        let runtimes = every_task.then(|| job.runtimes.values().copied().collect::<Vec<u64>>());
        // Only a finished job whose every task runtime is known has a true
        // size to learn from and to score estimates against.
        let truth = match (end.outcome, runtimes) {
            (JobOutcome::Finish, Some(runtimes)) => {
                FinishedJob::new(job.submitted.clone(), runtimes).ok()
            }
            _ => None,
        };
        match truth {
            Some(truth) => {
                let actual = truth.mean_task_runtime_us();
                job.record.actual_mean_task_runtime_us = Some(actual);
                for policy in &self.policies {
                    let kind = policy.kind();
                    if let Some(estimate) = job.record.estimates.get(&kind) {
                        let error = PredictionError::of(estimate.mean_task_runtime_us, actual);
                        job.record.errors.insert(kind, error);
                        self.policy_errors
                            .entry(kind.name())
                            .or_default()
                            .record(&error);
                        effects.policies.mark(kind.name());
                        effects.outputs.push(Output::Scored {
                            policy: kind,
                            job_id: end.job_id,
                            error,
                            covered: estimate
                                .quantiles
                                .map(|q| q.mean_task_runtime_us.to_array().map(|v| actual <= v)),
                        });
                    }
                }
                // The history's window moves with what it learns: never
                // further than the skew ahead of the partitions' clock.
                truth.learn(
                    self.clock.cap_us(end.time_us),
                    &mut self.history,
                    &self.queues,
                    self.policies
                        .iter_mut()
                        .map(|p| p.as_mut() as &mut dyn Policy),
                );
            }
            None => {
                for policy in &mut self.policies {
                    policy.on_job_abandoned(end.job_id);
                }
            }
        }
        effects.jobs.mark(end.job_id);
        self.ended.insert(end.job_id, job.record);
        Ok(())
    }

    /// The engine's whole state (`snapshot.rs`). Taken between batches,
    /// once ended jobs are released ([`Engine::release_ended`]): their
    /// records belong to the store.
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
        snapshot::State::of(
            &self.policies,
            history,
            &self.jobs,
            &self.tasks,
            self.machines.state(),
            &self.policy_errors,
            self.events,
            self.clock.state(),
            self.expiry.next_sweep_us(),
            self.etas.calibration(),
            self.capacity.state(),
            self.deadlines.state(),
            self.clusters.state(),
            self.starts.state(),
        )
        .encode(out)
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
        let mut engine = Engine::new(config).map_err(RestoreError::Config)?;
        let configured: Vec<PolicyKind> = engine.policies.iter().map(|p| p.kind()).collect();
        let state = snapshot::restore_chain(chain, &configured)?;
        engine.policies = state.policies;
        engine.history = state.history;
        engine.history.track_changes();
        engine.jobs = state.jobs;
        engine.tasks = state.tasks;
        engine.machines.restore(state.machines);
        engine.policy_errors = state.policy_errors;
        engine.events = state.events;
        engine
            .clock
            .restore(state.clock)
            .map_err(|reason| SnapshotError::Chain { reason })?;
        engine.expiry.restore(state.next_sweep_us);
        engine.etas.restore(state.etas);
        engine.capacity.restore(state.capacity);
        engine.deadlines.restore(state.deadlines);
        engine.pacer.rebuild(
            engine
                .jobs
                .iter()
                .map(|(&id, job)| (id, job.partition, &job.pacing)),
        );
        engine.etas.rebuild(engine.jobs.values(), engine.driver);
        engine.clusters.restore(state.clusters);
        engine.starts.restore(state.starts);
        Ok(engine)
    }

    /// The refusal of an event (`what`) that names a cluster beyond
    /// `engine.max_clusters`.
    fn too_many_clusters(&self, what: &str, cluster: &str) -> Rejection {
        reject(
            "over_budget",
            format!(
                "{what}: cluster `{cluster}` would be one more than the {} clusters listed, engine.max_clusters",
                self.clusters.max()
            ),
        )
    }

    /// Score the task just placed, if on a transient VM and its job has
    /// an estimate to score with.
    fn place_on_vm(&mut self, task: &TaskEvent, effects: &mut Effects) {
        if let Some(estimate) = placement_estimate(&self.jobs, self.driver, task.job_id) {
            self.machines.placed(task, estimate, effects);
        }
    }

    /// Keep CloudCoaster's controller's count of long tasks running: a
    /// task placed on a machine up counts if its job is long now (a job
    /// without an estimate is not); an ended attempt counts no more.
    fn count_long(&mut self, task: &TaskEvent) {
        if !self.capacity.enabled() {
            return;
        }
        let key = (task.job_id, task.task_index);
        if task.kind == TaskKind::Schedule {
            let estimate = placement_estimate(&self.jobs, self.driver, task.job_id)
                .map(|e| e.mean_task_runtime_us);
            let Some(long) = self.capacity.is_long(estimate) else {
                return;
            };
            match task.machine_id.filter(|&m| self.machines.is_up(m)) {
                Some(machine_id) => self.capacity.started(key, machine_id, long),
                None => self.capacity.ended(key),
            }
        } else if task.kind.ends_attempt() {
            self.capacity.ended(key);
        }
    }

    /// Follow where a deadline job's tasks run (`deadlines.rs`).
    fn track_deadline_task(
        &mut self,
        task: &TaskEvent,
        runtime_us: Option<u64>,
        effects: &mut Effects,
    ) {
        let key = (task.job_id, task.task_index);
        if task.kind == TaskKind::Schedule {
            let vm = task
                .machine_id
                .and_then(|m| self.machines.get(m))
                .and_then(|m| Some((m.vm_type.as_deref()?, m.preemptible)));
            self.deadlines
                .task_started(key, task.machine_id, vm, task.time_us, effects);
        } else if task.kind.ends_attempt() {
            self.deadlines
                .task_ended(key, runtime_us, task.time_us, effects);
        }
    }

    /// Draw the maps of the deadline job `job_id` once it has an estimate
    /// with quantiles: the driving policy's, else 3Sigma's.
    fn plan_deadline(&mut self, job_id: u64, now_us: u64, effects: &mut Effects) {
        let Some(job) = self.jobs.get(&job_id) else {
            return;
        };
        if !self.deadlines.wants_plan(job_id, job.submitted.deadline_us) {
            return;
        }
        let estimate = [self.driver, PolicyKind::ThreeSigma]
            .into_iter()
            .find_map(|kind| {
                let estimate = job.record.estimates.get(&kind)?;
                estimate.quantiles.is_some().then_some((kind, estimate))
            });
        self.deadlines
            .plan(&job.submitted, estimate, now_us, effects);
        // What already ran or runs, where the estimate came late (SLearn's,
        // once its pilots ended); a planned job has at most
        // `engine.deadlines.max_tasks`.
        if self
            .deadlines
            .record(job_id)
            .is_none_or(|r| r.plan.is_none())
        {
            return;
        }
        for index in 0..job.submitted.num_tasks {
            let key = (job_id, index);
            if let Some(task) = self.tasks.get(&key)
                && task.running_since_us().is_some()
            {
                let machine_id = task.machine_id();
                let vm = machine_id
                    .and_then(|m| self.machines.get(m))
                    .and_then(|m| Some((m.vm_type.as_deref()?, m.preemptible)));
                self.deadlines
                    .task_started(key, machine_id, vm, now_us, effects);
            }
        }
        for (&index, &runtime_us) in &job.runtimes {
            let vm_type = self
                .tasks
                .get(&(job_id, index))
                .and_then(|t| self.machines.get(t.machine_id()?))
                .and_then(|m| m.vm_type.as_deref());
            self.deadlines
                .finished_before((job_id, index), runtime_us, vm_type);
        }
    }

    /// A VM hibernated, resumed or left: the recovery groups of the
    /// deadline jobs on it start, end their wait, or move.
    fn hibernation(
        &mut self,
        kind: MachineKind,
        machine_id: u64,
        time_us: u64,
        effects: &mut Effects,
    ) {
        let (jobs, driver) = (&self.jobs, self.driver);
        match kind {
            MachineKind::Hibernate => self.deadlines.hibernated(
                machine_id,
                time_us,
                |job_id| placement_estimate(jobs, driver, job_id),
                effects,
            ),
            MachineKind::Resume => self.deadlines.resumed(machine_id, time_us, effects),
            MachineKind::Remove => self.deadlines.machine_gone(machine_id, time_us, effects),
            MachineKind::Add | MachineKind::Update => {}
        }
    }

    /// Ask every policy about the live job `job_id` at `now_us` (`ask`:
    /// the policy's new decision, if it makes one), keep their estimates on
    /// the job's record and offer the driving policy's decision.
    fn consult_policies(
        &mut self,
        job_id: u64,
        now_us: u64,
        effects: &mut Effects,
        mut ask: impl FnMut(&mut dyn Policy, &Context<'_>) -> Option<Decision>,
    ) {
        let record = &mut self.jobs.get_mut(&job_id).expect("a live job").record;
        let ctx = Context {
            now_us,
            history: &self.history,
            queues: &self.queues,
        };
        let mut published = Vec::new();
        for policy in &mut self.policies {
            if let Some(decision) = ask(policy.as_mut(), &ctx) {
                published.extend(record_decision(record, decision, self.driver));
            }
        }
        for decision in published {
            self.offer(decision, now_us, effects);
        }
    }

    /// The driving policy decided `decision` at `now_us`: publish it now,
    /// or let it wait (`pacing.rs`).
    fn offer(&mut self, decision: Decision, now_us: u64, effects: &mut Effects) {
        let Some(job) = self.jobs.get_mut(&decision.job_id) else {
            return self.publish(decision, now_us, effects);
        };
        let partition = job.partition;
        if let Some(decision) = self.pacer.offer(
            &mut job.pacing,
            partition,
            decision,
            now_us,
            &self.tasks,
            effects,
        ) {
            self.publish(decision, now_us, effects);
        }
    }

    /// Publish the waiting decisions of `partition` that are due at
    /// `now_us`, and that of `job_id` (whose event this was) if the
    /// scheduler has none of its published pilots left to run.
    fn publish_due(
        &mut self,
        partition: i32,
        now_us: u64,
        job_id: Option<u64>,
        effects: &mut Effects,
    ) {
        let mut ready = self.pacer.due(partition, now_us);
        if let Some(job_id) = job_id
            && let Some(job) = self.jobs.get(&job_id)
            && job.pacing.stalled(job_id, &self.tasks)
        {
            ready.push(job_id);
        }
        for job_id in ready {
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            let partition = job.partition;
            if let Some(decision) = self.pacer.take(job_id, &mut job.pacing, partition, now_us) {
                self.publish(decision, now_us, effects);
            }
        }
        self.refresh_starts(partition, now_us, effects);
    }

    /// Look again at the published starts of `partition`'s pending jobs
    /// due at `now_us`, and publish again each decision whose start has
    /// moved (`pacing.rs`, `starts.rs`).
    fn refresh_starts(&mut self, partition: i32, now_us: u64, effects: &mut Effects) {
        let due = self.pacer.starts_due(partition, now_us);
        if due.is_empty() {
            return;
        }
        let starts = self
            .starts
            .starts_of(&due, &self.jobs, self.driver, &self.clusters, now_us);
        for (job_id, start) in due.into_iter().zip(starts) {
            let Some(job) = self.jobs.get_mut(&job_id) else {
                continue;
            };
            let partition = job.partition;
            if !starts::waits(job) {
                // It runs, or has run: it needs no start.
                self.pacer.unwatch(job_id, &mut job.pacing, partition);
                continue;
            }
            if let Some(decision) = self.pacer.refresh_start(
                job_id,
                &mut job.pacing,
                partition,
                now_us,
                start,
                starts::moved,
            ) {
                effects.starts_refreshed += 1;
                self.send(decision, start, now_us, effects);
            }
        }
    }

    /// A job ends: its waiting decision, if any, is never published, and
    /// its start is not looked at again.
    fn forget_pacing(&mut self, job_id: u64, effects: &mut Effects) {
        if let Some(job) = self.jobs.get_mut(&job_id) {
            let partition = job.partition;
            self.pacer
                .forget(job_id, &mut job.pacing, partition, effects);
            self.pacer.unwatch(job_id, &mut job.pacing, partition);
        }
    }

    /// Publish the policy's `decision` at `now_us`, with its start
    /// estimate while the job is pending, if the engine gives them
    /// (`starts.rs`).
    fn publish(&mut self, decision: Decision, now_us: u64, effects: &mut Effects) {
        let start = self
            .starts
            .starts_of(
                &[decision.job_id],
                &self.jobs,
                self.driver,
                &self.clusters,
                now_us,
            )
            .pop()
            .flatten();
        self.send(decision, start, now_us, effects);
    }

    /// Send `decision` at `now_us` with `start` and its job's ETA if it
    /// has one (`progress.rs`).
    fn send(
        &mut self,
        mut decision: Decision,
        start: Option<Start>,
        now_us: u64,
        effects: &mut Effects,
    ) {
        let job = self.jobs.get_mut(&decision.job_id);
        self.etas
            .place(&mut decision, job, self.driver, &self.clusters, now_us);
        decision.start = start;
        if let Some(job) = self.jobs.get_mut(&decision.job_id) {
            let partition = job.partition;
            self.pacer.sent(
                decision.job_id,
                &mut job.pacing,
                partition,
                &decision,
                now_us,
            );
        }
        effects.outputs.push(Output::Decision(decision));
    }

    /// Bring `job_id`'s ETA row up to date with the job.
    fn reindex_eta(&mut self, job_id: u64) {
        self.etas
            .reindex(job_id, self.jobs.get(&job_id), self.driver);
    }

    /// When the clock crosses a step, give up on the jobs and machines
    /// silent for longer than their window (`expiry.rs`): in id order, so
    /// that the outcome is a function of the input alone.
    fn expire_silent(&mut self, effects: &mut Effects) {
        let watermark = self.clock.now_us();
        let Some(sweep) = self.expiry.due(watermark) else {
            return;
        };
        if let Some(bound) = sweep.jobs_before {
            self.clusters.forget_idle(bound);
            let mut silent: Vec<u64> = self
                .jobs
                .iter()
                .filter(|(_, job)| job.last_event_us < bound)
                .map(|(&id, _)| id)
                .collect();
            silent.sort_unstable();
            for job_id in silent {
                self.forget_pacing(job_id, effects);
                let mut job = self.jobs.remove(&job_id).expect("listed above");
                self.etas.forget(job_id);
                self.capacity.job_ended(job_id);
                self.deadlines.job_ended(job_id);
                self.clusters.job_ended(&job.submitted.cluster, watermark);
                self.starts.job_abandoned(job_id);
                job.record.state = JobState::Expired;
                job.record.end_us = Some(watermark);
                for policy in &mut self.policies {
                    policy.on_job_abandoned(job_id);
                }
                effects.jobs.mark(job_id);
                effects.expired_jobs.push(job_id);
                self.ended.insert(job_id, job.record);
            }
        }
        if let Some(bound) = sweep.machines_before {
            let before = effects.expired_machines.len();
            self.machines.expire_silent(bound, effects);
            let gone = effects.expired_machines[before..].to_vec();
            if !gone.is_empty() {
                self.clusters
                    .recount_machines(self.machines.state().records.values(), watermark);
            }
            for machine_id in gone {
                self.capacity.machine_gone(machine_id);
                self.deadlines.machine_gone(machine_id, watermark, effects);
            }
        }
    }
}

/// What [`Engine::apply`] did with an event it did not refuse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Now,
    /// Held, far ahead of the clock (`clock.rs`).
    Held,
}

/// The estimate a job's placed tasks are judged by: the driving policy's,
/// or else (a thin job placed without one) the history's.
fn placement_estimate(
    jobs: &HashMap<u64, LiveJob>,
    driver: PolicyKind,
    job_id: u64,
) -> Option<&Estimate> {
    let job = jobs.get(&job_id)?;
    job.record
        .estimates
        .get(&driver)
        .or_else(|| job.record.estimates.get(&PolicyKind::ThreeSigma))
}

/// Keep a policy's estimate on the job's record; the driving policy's
/// decision is returned, to publish.
fn record_decision(
    record: &mut JobRecord,
    decision: Decision,
    driver: PolicyKind,
) -> Option<Decision> {
    if let Some(estimate) = decision.estimate {
        record.estimates.insert(decision.policy, estimate);
    }
    (decision.policy == driver).then_some(decision)
}
