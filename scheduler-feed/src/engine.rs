//! The transform at the heart of `jobcast serve`: canonical events in,
//! scheduling decisions and state changes out.
//!
//! The engine follows each job from submission to its end, runs every
//! configured prediction policy on it in shadow, lets the *driving* policy's
//! decisions go out to schedulers, and when the job ends, teaches the shared
//! 3Sigma history what it did and scores each policy's estimate against the
//! truth. It does no I/O and reads no clock (event time drives everything),
//! so the same input gives the same output: a restarted service rebuilds
//! its exact state by applying the stored event log again.
//!
//! Events that are well-formed JSON but make no sense for the state they
//! arrive in (a task of an unknown job, a finish before any schedule, time
//! going backwards within a job, a second submission) are rejected with a
//! reason and change nothing; the service dead-letters them.

use std::collections::{BTreeMap, BTreeSet};

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::{
    EndReason, Event, JobEnded, JobOutcome, JobSubmitted, MachineEvent, MachineKind, TaskEvent,
    TaskKind,
};
use jobcast_predictor::decision::{Decision, Estimate, PolicyKind};
use jobcast_predictor::history::{History, HistoryConfig, HistoryKey};
use jobcast_predictor::policies::{PolicyConfig, build};
use jobcast_predictor::policy::{Context, JobDone, Policy, TaskEnd};
use jobcast_predictor::preemption::Bathtub;
use jobcast_predictor::preemption::fit::FitConfig;
use jobcast_predictor::preemption::models::LifetimeModel;
use jobcast_predictor::preemption::online::{OnlineConfig, OnlineFitter};
use jobcast_predictor::preemption::risk::{RiskConfig, RiskScore, RuntimeEstimate, score};
use jobcast_predictor::queues::QueueConfig;
use jobcast_replay::workload::SimJob;
use serde::{Deserialize, Serialize};

/// The policies a live service can run: those that need no knowledge of
/// the future (not the Oracle) and that estimate runtimes (LAS and FIFO do
/// not, so they have nothing to score).
pub fn live_policies() -> Vec<PolicyKind> {
    PolicyKind::ALL
        .into_iter()
        .filter(|k| !matches!(k, PolicyKind::Las | PolicyKind::Fifo | PolicyKind::Oracle))
        .collect()
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EngineConfig {
    /// The policy whose decisions are published.
    pub policy: PolicyKind,
    /// Policies run in shadow for comparison (the driving policy is always
    /// run, whether listed or not).
    pub shadow: Vec<PolicyKind>,
    pub policies: PolicyConfig,
    pub history: HistoryConfig,
    pub queues: QueueConfig,
    pub risk: RiskSettings,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: PolicyKind::SLearn,
            shadow: live_policies(),
            policies: PolicyConfig::default(),
            history: HistoryConfig::default(),
            queues: QueueConfig::default(),
            risk: RiskSettings::default(),
        }
    }
}

/// When and how tasks on transient VMs are scored, and how the VM
/// lifetimes they are scored with are fitted from the machine events (see
/// [`OnlineFitter`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RiskSettings {
    pub recommendation: RiskConfig,
    /// VM ages (hours) at which a VM's risk is scored again for the task it
    /// runs: where the bathtub's hazard turns (the end of the early-failure
    /// phase, the approach of the 24 h deadline).
    pub refresh_ages_h: Vec<f64>,
    /// The lifetime model before enough preemptions are seen to fit one,
    /// and the one the pooled fit is shrunk toward afterwards.
    pub prior: BathtubPrior,
    /// Finished VM lifetimes between refits.
    pub refit_every: usize,
    /// The most recent finished VM lifetimes fitted.
    pub window: usize,
    /// `k` of the shrinkage weight `d/(d + k)`, in preemptions: how many a
    /// group needs before its own fit outweighs the pooled one (and the
    /// pooled fit the prior).
    pub shrinkage_events: f64,
}

impl Default for RiskSettings {
    fn default() -> Self {
        let online = OnlineConfig::default();
        RiskSettings {
            recommendation: RiskConfig::default(),
            refresh_ages_h: vec![3.0, 18.0, 22.0, 23.5],
            prior: BathtubPrior::default(),
            refit_every: online.refit_every,
            window: online.window,
            shrinkage_events: online.fit.shrinkage_events,
        }
    }
}

impl RiskSettings {
    /// The online fitter's configuration; an error names the bad setting.
    pub fn online(&self) -> Result<OnlineConfig, String> {
        let prior = self.prior.bathtub()?;
        if self.refit_every == 0 {
            return Err("engine.risk.refit_every must be at least 1".into());
        }
        if self.window == 0 {
            return Err("engine.risk.window must be at least 1".into());
        }
        if !(self.shrinkage_events.is_finite() && self.shrinkage_events >= 0.0) {
            return Err(format!(
                "engine.risk.shrinkage_events must be finite and ≥ 0, got {}",
                self.shrinkage_events
            ));
        }
        let defaults = OnlineConfig::default();
        let config = OnlineConfig {
            fit: FitConfig {
                max_lifetime_h: prior.max_lifetime_h(),
                priors: vec![LifetimeModel::Bathtub(prior)],
                shrinkage_events: self.shrinkage_events,
                ..defaults.fit
            },
            refit_every: self.refit_every,
            window: self.window,
        };
        config
            .fit
            .check_priors()
            .map_err(|e| format!("engine.risk.prior: {e}"))?;
        Ok(config)
    }
}

/// The parameters of a prior [`Bathtub`], under its field names; the
/// default is the paper's typical GCE fit ([`Bathtub::default`]).
/// `max_lifetime_h` is the provider's deadline `L`, which the fits use too.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BathtubPrior {
    pub a: f64,
    pub tau1: f64,
    pub tau2: f64,
    pub b: f64,
    pub max_lifetime_h: f64,
}

impl Default for BathtubPrior {
    fn default() -> Self {
        let b = Bathtub::default();
        BathtubPrior {
            a: b.a(),
            tau1: b.tau1(),
            tau2: b.tau2(),
            b: b.b(),
            max_lifetime_h: b.max_lifetime_h(),
        }
    }
}

impl BathtubPrior {
    /// The bathtub, with `a` in (0, 1] and the other parameters in their
    /// domains (see [`Bathtub::new`]); an error names the parameter.
    pub fn bathtub(&self) -> Result<Bathtub, String> {
        if !(self.a > 0.0 && self.a <= 1.0) {
            return Err(format!(
                "engine.risk.prior.a must be in (0, 1], got {}",
                self.a
            ));
        }
        Bathtub::new(self.a, self.tau1, self.tau2, self.b, self.max_lifetime_h).map_err(|e| {
            format!(
                "engine.risk.prior.{} must be {}, got {}",
                e.param.as_str(),
                e.requirement,
                e.value
            )
        })
    }
}

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Finished,
    Failed,
    Killed,
    Lost,
}

/// How far a policy's estimate of a job's mean task runtime was from the
/// truth.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PredictionError {
    /// ln(estimate / actual): negative when the policy under-estimated.
    pub log_ratio: f64,
    /// |estimate − actual| / actual × 100.
    pub abs_pct: f64,
}

impl PredictionError {
    pub fn of(estimate_us: f64, actual_us: f64) -> Self {
        PredictionError {
            log_ratio: (estimate_us / actual_us).ln(),
            abs_pct: (estimate_us - actual_us).abs() / actual_us * 100.0,
        }
    }
}

/// Upper bounds (%) of the absolute-error buckets of [`PolicyErrors`]; a
/// last bucket counts the larger errors.
pub const ERROR_PCT_BOUNDS: [f64; 8] = [5.0, 10.0, 25.0, 50.0, 100.0, 200.0, 500.0, 1000.0];

/// One policy's errors over every job scored so far: stored in the
/// `policies` column family and served at `GET /policies`, so that the
/// policies running in shadow can be compared on the live workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyErrors {
    pub jobs: u64,
    /// Jobs whose runtime it under-estimated.
    pub underestimated: u64,
    pub sum_abs_pct: f64,
    pub sum_log_ratio: f64,
    pub sum_sq_log_ratio: f64,
    /// Jobs per absolute error: at most `ERROR_PCT_BOUNDS[i]` %, then the
    /// rest.
    pub abs_pct_buckets: Vec<u64>,
}

impl Default for PolicyErrors {
    fn default() -> Self {
        PolicyErrors {
            jobs: 0,
            underestimated: 0,
            sum_abs_pct: 0.0,
            sum_log_ratio: 0.0,
            sum_sq_log_ratio: 0.0,
            abs_pct_buckets: vec![0; ERROR_PCT_BOUNDS.len() + 1],
        }
    }
}

impl PolicyErrors {
    fn record(&mut self, error: &PredictionError) {
        self.jobs += 1;
        self.underestimated += u64::from(error.log_ratio < 0.0);
        self.sum_abs_pct += error.abs_pct;
        self.sum_log_ratio += error.log_ratio;
        self.sum_sq_log_ratio += error.log_ratio * error.log_ratio;
        let bucket = ERROR_PCT_BOUNDS
            .iter()
            .position(|&bound| error.abs_pct <= bound)
            .unwrap_or(ERROR_PCT_BOUNDS.len());
        self.abs_pct_buckets[bucket] += 1;
    }
}

/// What jobcast knows about a job: stored in the `jobs` column family and
/// served at `GET /jobs/{id}`, with the job's decisions (`Output::Decision`,
/// stored apart in the `decisions` family) added.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    pub job_id: u64,
    pub submit_us: u64,
    pub user: String,
    pub job_name: String,
    pub logical_name: String,
    pub width: u32,
    pub state: JobState,
    pub end_us: Option<u64>,
    pub tasks_finished: u32,
    /// The latest estimate of each policy that has one, by policy (its
    /// name in JSON).
    pub estimates: BTreeMap<PolicyKind, Estimate>,
    /// True mean task runtime, once the job finished with every task's
    /// runtime known.
    pub actual_mean_task_runtime_us: Option<f64>,
    /// Each policy's error, once the truth is known.
    pub errors: BTreeMap<PolicyKind, PredictionError>,
}

/// The last known state of one task: the `tasks` column family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskRecord {
    pub job_id: u64,
    pub task_index: u32,
    /// The last event seen for the task.
    pub last: TaskKind,
    pub attempts: u32,
    pub last_schedule_us: Option<u64>,
    /// Start of the attempt running now, if one is.
    pub running_since_us: Option<u64>,
    /// Runtime of the attempt that finished.
    pub runtime_us: Option<u64>,
    pub machine_id: Option<u64>,
}

/// A machine or cloud VM: the `machines` column family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineRecord {
    pub machine_id: u64,
    pub up: bool,
    pub added_us: Option<u64>,
    pub removed_us: Option<u64>,
    pub vm_type: Option<String>,
    pub zone: Option<String>,
    pub preemptible: bool,
    pub launch_time_us: Option<u64>,
    pub end_reason: Option<EndReason>,
    /// The latest preemption-risk score of the task placed on it (transient
    /// VMs only).
    pub risk: Option<MachineRisk>,
}

/// A preemption-risk score for the task last placed on a transient VM: the
/// `risk` topic's messages and `GET /machines/{id}`'s `risk`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineRisk {
    pub machine_id: u64,
    pub job_id: u64,
    pub task_index: u32,
    /// Event time of the score, µs.
    pub time_us: u64,
    /// When the task was placed, µs.
    pub placed_us: u64,
    pub vm_type: String,
    pub zone: String,
    pub score: RiskScore,
}

/// Why an event was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Rejection {
    /// Short machine-readable class, used as a metric label.
    pub reason: &'static str,
    pub message: String,
}

fn reject(reason: &'static str, message: String) -> Rejection {
    Rejection { reason, message }
}

/// Something the engine wants the outside world to know.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// A decision of the driving policy, to publish.
    Decision(Decision),
    /// A transient VM's risk, newly scored.
    Risk(MachineRisk),
    /// A policy's error on a job that just finished.
    Scored {
        policy: PolicyKind,
        job_id: u64,
        error: PredictionError,
    },
}

/// The keys of records that changed. Marking appends (a batch marks a
/// job at each of its events, and sorted-set insertions stood out in the
/// pipeline thread's profile); [`Changed::settle`] sorts and dedups once,
/// before the records are written, so that writes stay deterministic.
#[derive(Debug)]
pub struct Changed<T>(Vec<T>);

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
    }
}

struct LiveJob {
    submitted: JobSubmitted,
    record: JobRecord,
    /// Runtime of each task's finished attempt.
    runtimes: Vec<Option<u64>>,
    last_event_us: u64,
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
}

impl Engine {
    pub fn new(config: &EngineConfig) -> Result<Self, String> {
        if matches!(config.policy, PolicyKind::Oracle) {
            return Err(
                "the oracle policy needs true runtimes, which a live service does not have".into(),
            );
        }
        config.history.validate()?;
        config.queues.validate()?;
        if let Some(age) = config
            .risk
            .refresh_ages_h
            .iter()
            .find(|a| !(a.is_finite() && **a > 0.0))
        {
            return Err(format!(
                "risk refresh ages must be positive hours, got {age}"
            ));
        }
        let online = config.risk.online()?;
        let mut kinds = vec![config.policy];
        for &kind in &config.shadow {
            if kind == PolicyKind::Oracle {
                return Err("the oracle policy cannot run in shadow".into());
            }
            if !kinds.contains(&kind) {
                kinds.push(kind);
            }
        }
        let policies = kinds
            .iter()
            .map(|&kind| build(kind, &config.policies, None))
            .collect::<Result<Vec<_>, _>>()?;
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
    /// not yet taken by [`Engine::take_ended`]).
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
        match event {
            Event::JobSubmitted(job) => self.submit(job, effects)?,
            Event::Task(task) => self.task_event(task, effects)?,
            Event::JobEnded(end) => self.end(end, effects)?,
            Event::Machine(machine) => self.machine_event(machine, effects),
        }
        self.refresh_risks(event.time_us(), effects);
        self.history.drain_changes(&mut effects.history.0);
        self.events += 1;
        Ok(())
    }

    /// Score the task just placed on `machine_id`, if that is a transient
    /// VM and the job has an estimate to score with.
    fn place_on_vm(&mut self, task: &TaskEvent, effects: &mut Effects) {
        let Some(machine_id) = task.machine_id else {
            return;
        };
        let Some(job) = self.jobs.get(&task.job_id) else {
            return;
        };
        let estimate = job
            .record
            .estimates
            .get(&self.driver)
            // A thin job placed without an estimate: the history's.
            .or_else(|| job.record.estimates.get(&PolicyKind::ThreeSigma));
        let Some(estimate) = estimate else {
            return;
        };
        let runtime = RuntimeEstimate {
            mean_h: estimate.mean_task_runtime_us / 3.6e9,
            // The log-normal whose ln-sd is the estimate's spread.
            cv: (estimate.log_sd.powi(2).exp() - 1.0).sqrt(),
        };
        self.score_vm(
            machine_id,
            task.job_id,
            task.task_index,
            task.time_us,
            task.time_us,
            runtime,
            effects,
        );
    }

    /// Score the task on a VM at `now_us` and schedule the next refresh.
    #[allow(clippy::too_many_arguments)]
    fn score_vm(
        &mut self,
        machine_id: u64,
        job_id: u64,
        task_index: u32,
        placed_us: u64,
        now_us: u64,
        runtime: RuntimeEstimate,
        effects: &mut Effects,
    ) {
        let Some(machine) = self.machines.get_mut(&machine_id) else {
            return;
        };
        let (Some(vm_type), Some(zone), Some(launch)) = (
            machine.vm_type.clone(),
            machine.zone.clone(),
            machine.launch_time_us,
        ) else {
            return;
        };
        // A NaN or non-positive runtime cannot be scored.
        let has_work = runtime.mean_h > 0.0;
        if !(machine.preemptible && machine.up && has_work) {
            return;
        }
        let age_h = now_us.saturating_sub(launch) as f64 / 3.6e9;
        // By type, zone and VM-local day/night of the launch, as fitted.
        let model = self.lifetimes.bathtub_for(&vm_type, &zone, launch);
        let Ok(score) = score(&model, age_h, runtime, &self.risk.recommendation, None) else {
            return;
        };
        let risk = MachineRisk {
            machine_id,
            job_id,
            task_index,
            time_us: now_us,
            placed_us,
            vm_type,
            zone,
            score,
        };
        machine.risk = Some(risk.clone());
        effects.machines.mark(machine_id);
        effects.outputs.push(Output::Risk(risk));
        if let Some(next) = self
            .risk
            .refresh_ages_h
            .iter()
            .copied()
            .filter(|&a| a > age_h)
            .reduce(f64::min)
        {
            self.risk_refresh
                .insert((launch.saturating_add((next * 3.6e9) as u64), machine_id));
        }
    }

    /// Score again the VMs whose age crossed a refresh age by `now_us`,
    /// for the work their task has left.
    fn refresh_risks(&mut self, now_us: u64, effects: &mut Effects) {
        while let Some(&(due, machine_id)) = self.risk_refresh.first() {
            if due > now_us {
                break;
            }
            self.risk_refresh.pop_first();
            let Some(last) = self.machines.get(&machine_id).and_then(|m| m.risk.clone()) else {
                continue;
            };
            let done_h = due.saturating_sub(last.placed_us) as f64 / 3.6e9;
            let left_h = last.score.runtime.mean_h - done_h;
            if left_h <= 0.0 {
                continue;
            }
            let runtime = RuntimeEstimate {
                mean_h: left_h,
                cv: last.score.runtime.cv,
            };
            self.score_vm(
                machine_id,
                last.job_id,
                last.task_index,
                last.placed_us,
                due,
                runtime,
                effects,
            );
        }
    }

    fn submit(&mut self, job: &JobSubmitted, effects: &mut Effects) -> Result<(), Rejection> {
        if self.jobs.contains_key(&job.job_id) {
            return Err(reject(
                "duplicate_job",
                format!("job {} was already submitted", job.job_id),
            ));
        }
        let mut record = JobRecord {
            job_id: job.job_id,
            submit_us: job.time_us,
            user: job.user.clone(),
            job_name: job.job_name.clone(),
            logical_name: job.logical_name.clone(),
            width: job.num_tasks,
            state: JobState::Running,
            end_us: None,
            tasks_finished: 0,
            estimates: BTreeMap::new(),
            actual_mean_task_runtime_us: None,
            errors: BTreeMap::new(),
        };
        let ctx = Context {
            now_us: job.time_us,
            history: &self.history,
            queues: &self.queues,
        };
        for policy in &mut self.policies {
            let decision = policy.on_submit(job, &ctx);
            record_decision(&mut record, decision, self.driver, &mut effects.outputs);
        }
        self.jobs.insert(
            job.job_id,
            LiveJob {
                submitted: job.clone(),
                record,
                runtimes: vec![None; job.num_tasks as usize],
                last_event_us: job.time_us,
            },
        );
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

    fn task_event(&mut self, event: &TaskEvent, effects: &mut Effects) -> Result<(), Rejection> {
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
        let started = previous.and_then(|t| t.running_since_us);
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

        let mut task = previous.cloned().unwrap_or(TaskRecord {
            job_id: event.job_id,
            task_index: event.task_index,
            last: event.kind,
            attempts: 0,
            last_schedule_us: None,
            running_since_us: None,
            runtime_us: None,
            machine_id: None,
        });
        task.last = event.kind;
        if event.machine_id.is_some() {
            task.machine_id = event.machine_id;
        }
        if event.kind == TaskKind::Schedule {
            task.attempts += 1;
            task.last_schedule_us = Some(event.time_us);
            task.running_since_us = Some(event.time_us);
        } else if event.kind.ends_attempt() {
            task.running_since_us = None;
        }
        if runtime_us.is_some() {
            task.runtime_us = runtime_us;
        }
        self.tasks.insert(key, task);
        effects.tasks.mark(key);
        if event.kind == TaskKind::Schedule {
            self.place_on_vm(event, effects);
        }

        let job = self.jobs.get_mut(&event.job_id).expect("checked above");
        job.last_event_us = event.time_us;
        // Only ends of running attempts tell the policies anything: a
        // pilot that fails or is evicted must be replaced.
        let ended_running_attempt = event.kind.ends_attempt() && started.is_some();
        if !ended_running_attempt {
            return Ok(());
        }
        if let Some(runtime) = runtime_us {
            let slot = &mut job.runtimes[event.task_index as usize];
            if slot.is_none() {
                job.record.tasks_finished += 1;
            }
            *slot = Some(runtime);
        }
        let end = TaskEnd {
            job_id: event.job_id,
            task_index: event.task_index,
            time_us: event.time_us,
            runtime_us,
        };
        let ctx = Context {
            now_us: event.time_us,
            history: &self.history,
            queues: &self.queues,
        };
        for policy in &mut self.policies {
            if let Some(decision) = policy.on_task_end(&end, &ctx) {
                record_decision(&mut job.record, decision, self.driver, &mut effects.outputs);
            }
        }
        effects.jobs.mark(event.job_id);
        Ok(())
    }

    fn end(&mut self, end: &JobEnded, effects: &mut Effects) -> Result<(), Rejection> {
        self.live_job(end.job_id, end.time_us)?;
        let mut job = self.jobs.remove(&end.job_id).expect("checked above");
        job.record.end_us = Some(end.time_us);
        job.record.state = match end.outcome {
            JobOutcome::Finish => JobState::Finished,
            JobOutcome::Fail => JobState::Failed,
            JobOutcome::Kill => JobState::Killed,
            JobOutcome::Lost => JobState::Lost,
        };
        let runtimes: Option<Vec<u64>> = job.runtimes.iter().copied().collect();
        // Only a finished job whose every task runtime is known has a true
        // size to learn from and to score estimates against.
        let truth = match (end.outcome, runtimes) {
            (JobOutcome::Finish, Some(runtimes)) => {
                SimJob::new(job.submitted.clone(), runtimes, end.time_us).ok()
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
                        });
                    }
                }
                let jct_us = end.time_us.saturating_sub(job.submitted.time_us);
                let done = JobDone {
                    job_id: end.job_id,
                    submit_us: job.submitted.time_us,
                    end_us: end.time_us,
                    width: truth.width(),
                    mean_task_runtime_us: actual,
                    normalized_jct: (jct_us as f64 / truth.idle_runtime_us() as f64).max(1.0),
                };
                truth.observe_into(&mut self.history, end.time_us);
                let ctx = Context {
                    now_us: end.time_us,
                    history: &self.history,
                    queues: &self.queues,
                };
                for policy in &mut self.policies {
                    policy.on_job_done(&done, &ctx);
                }
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

    fn machine_event(&mut self, event: &MachineEvent, effects: &mut Effects) {
        let record = self
            .machines
            .entry(event.machine_id)
            .or_insert_with(|| MachineRecord {
                machine_id: event.machine_id,
                up: false,
                added_us: None,
                removed_us: None,
                vm_type: None,
                zone: None,
                preemptible: false,
                launch_time_us: None,
                end_reason: None,
                risk: None,
            });
        match event.kind {
            MachineKind::Add => {
                record.up = true;
                record.added_us = Some(event.time_us);
                record.removed_us = None;
                record.end_reason = None;
            }
            MachineKind::Remove => {
                record.up = false;
                record.removed_us = Some(event.time_us);
                record.risk = None;
            }
            MachineKind::Update => {}
        }
        if let Some(vm) = &event.vm {
            record.vm_type = Some(vm.vm_type.clone());
            record.zone = Some(vm.zone.clone());
            record.preemptible = vm.preemptible;
            record.launch_time_us = Some(vm.launch_time_us);
            if vm.end_reason.is_some() {
                record.end_reason = vm.end_reason;
            }
        }
        effects.machines.mark(event.machine_id);
        self.lifetimes.observe(event);
    }
}

/// Keep a policy's estimate on the job's record; publish the driving
/// policy's decision.
fn record_decision(
    record: &mut JobRecord,
    decision: Decision,
    driver: PolicyKind,
    outputs: &mut Vec<Output>,
) {
    if let Some(estimate) = decision.estimate {
        record.estimates.insert(decision.policy, estimate);
    }
    if decision.policy == driver {
        outputs.push(Output::Decision(decision));
    }
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::decode;
    use jobcast_predictor::decision::Phase;

    use super::*;

    #[test]
    fn changed_keys_settle_sorted_and_once() {
        let mut changed = Changed::default();
        for key in [7u64, 3, 7, 9, 3, 3] {
            changed.mark(key);
        }
        changed.settle();
        assert_eq!(changed.iter().copied().collect::<Vec<_>>(), [3, 7, 9]);
        changed.extend([1, 9]);
        changed.settle();
        assert_eq!(changed.iter().copied().collect::<Vec<_>>(), [1, 3, 7, 9]);
        changed.clear();
        assert_eq!(changed.iter().count(), 0);
    }

    fn event(json: &str) -> Event {
        decode(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"))
    }

    fn submit(job: u64, t: u64, tasks: u32) -> Event {
        event(&format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":0.1,"num_tasks":{tasks}}}"#
        ))
    }

    fn task(job: u64, index: u32, t: u64, kind: &str) -> Event {
        event(&format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":{index},"kind":"{kind}","machine_id":1}}"#
        ))
    }

    fn end(job: u64, t: u64, outcome: &str) -> Event {
        event(&format!(
            r#"{{"v":1,"type":"job_ended","time_us":{t},"job_id":{job},"outcome":"{outcome}"}}"#
        ))
    }

    fn decisions(effects: &Effects) -> Vec<&Decision> {
        effects
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Decision(d) => Some(d),
                _ => None,
            })
            .collect()
    }

    /// A job of `width` tasks that all run 10 s, start to end.
    fn run_job(engine: &mut Engine, job: u64, t0: u64, width: u32, effects: &mut Effects) {
        engine.apply(&submit(job, t0, width), effects).unwrap();
        for i in 0..width {
            engine
                .apply(&task(job, i, t0 + 1, "schedule"), effects)
                .unwrap();
        }
        for i in 0..width {
            engine
                .apply(&task(job, i, t0 + 10_000_001, "finish"), effects)
                .unwrap();
        }
        engine
            .apply(&end(job, t0 + 10_000_002, "finish"), effects)
            .unwrap();
    }

    #[test]
    fn a_wide_job_samples_then_is_placed_and_every_policy_is_scored() {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        engine.apply(&submit(1, 1_000, 100), &mut effects).unwrap();
        let first = decisions(&effects);
        assert_eq!(first.len(), 1, "only the driving policy publishes");
        assert_eq!((first[0].version, first[0].phase), (1, Phase::Sampling));
        let pilots = first[0].pilots.clone();
        assert!(!pilots.is_empty());
        effects.clear();

        for &p in &pilots {
            engine
                .apply(&task(1, p, 2_000, "schedule"), &mut effects)
                .unwrap();
        }
        for &p in &pilots {
            engine
                .apply(&task(1, p, 5_002_000, "finish"), &mut effects)
                .unwrap();
        }
        let placed = decisions(&effects);
        assert_eq!(placed.len(), 1);
        assert_eq!((placed[0].version, placed[0].phase), (2, Phase::Estimated));
        let estimate = placed[0].estimate.unwrap();
        assert_eq!(estimate.mean_task_runtime_us, 5_000_000.0);
        effects.clear();

        let others: Vec<u32> = (0..100).filter(|i| !pilots.contains(i)).collect();
        for &i in &others {
            engine
                .apply(&task(1, i, 6_000_000, "schedule"), &mut effects)
                .unwrap();
        }
        for &i in &others {
            engine
                .apply(&task(1, i, 11_000_000, "finish"), &mut effects)
                .unwrap();
        }
        engine
            .apply(&end(1, 12_000_000, "finish"), &mut effects)
            .unwrap();
        let record = engine.job(1).unwrap().clone();
        assert_eq!(record.state, JobState::Finished);
        assert_eq!(record.tasks_finished, 100);
        assert_eq!(record.actual_mean_task_runtime_us, Some(5_000_000.0));
        assert!(
            decisions(&effects).is_empty(),
            "nothing new to decide once placed"
        );
        // SLearn's pilots saw the true mean exactly.
        assert_eq!(record.errors[&PolicyKind::SLearn].abs_pct, 0.0);
        let scored: Vec<&str> = effects
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Scored { policy, .. } => Some(policy.name()),
                _ => None,
            })
            .collect();
        assert_eq!(scored.len(), record.errors.len());
        assert!(scored.contains(&"3sigma") && scored.contains(&"bayes"));
        assert_eq!(engine.history().observed(), 1);
        assert_eq!(engine.live_jobs(), 0);
        engine.release_ended();
        assert!(engine.job(1).is_none() && engine.task(1, 0).is_none());
    }

    #[test]
    fn impossible_events_are_rejected_and_change_nothing() {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        engine.apply(&submit(1, 1_000, 2), &mut effects).unwrap();
        engine
            .apply(&task(1, 0, 2_000, "schedule"), &mut effects)
            .unwrap();
        let before = engine.job(1).unwrap().clone();
        let task_before = engine.task(1, 0).cloned();
        let cases = [
            (task(2, 0, 3_000, "schedule"), "unknown_job"),
            (task(1, 5, 3_000, "schedule"), "unknown_task"),
            (task(1, 1, 3_000, "finish"), "no_running_attempt"),
            (task(1, 0, 1_500, "finish"), "time_backwards"),
            (submit(1, 3_000, 2), "duplicate_job"),
            (end(7, 3_000, "finish"), "unknown_job"),
        ];
        for (event, reason) in cases {
            effects.clear();
            let err = engine.apply(&event, &mut effects).unwrap_err();
            assert_eq!(err.reason, reason, "{err}");
            assert!(effects.outputs.is_empty());
        }
        assert_eq!(engine.events(), 2);
        assert_eq!(engine.job(1), Some(&before));
        assert_eq!(engine.task(1, 0).cloned(), task_before);
    }

    #[test]
    fn a_killed_job_teaches_nothing_and_a_finished_one_teaches_the_history() {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        engine.apply(&submit(1, 1_000, 1), &mut effects).unwrap();
        engine
            .apply(&task(1, 0, 2_000, "schedule"), &mut effects)
            .unwrap();
        engine.apply(&end(1, 3_000, "kill"), &mut effects).unwrap();
        assert_eq!(engine.job(1).unwrap().state, JobState::Killed);
        assert!(engine.job(1).unwrap().errors.is_empty());
        assert_eq!(engine.history().observed(), 0);

        run_job(&mut engine, 2, 10_000, 1, &mut effects);
        assert_eq!(engine.history().observed(), 1);
        // The next similar job is estimated from it.
        effects.clear();
        engine
            .apply(&submit(3, 20_000_000, 1), &mut effects)
            .unwrap();
        let estimate = engine.job(3).unwrap().estimates[&PolicyKind::ThreeSigma];
        assert_eq!(estimate.mean_task_runtime_us, 10_000_000.0);
    }

    #[test]
    fn the_same_events_give_the_same_outputs() {
        let run = || {
            let mut engine = Engine::new(&EngineConfig::default()).unwrap();
            let mut effects = Effects::default();
            for job in 0..30 {
                run_job(
                    &mut engine,
                    job,
                    job * 1_000_000,
                    1 + (job as u32 * 7) % 40,
                    &mut effects,
                );
            }
            format!("{:?}", effects.outputs)
        };
        assert_eq!(run(), run());
    }

    const HOUR: u64 = 3_600_000_000;

    fn risks(effects: &Effects) -> Vec<MachineRisk> {
        effects
            .outputs
            .iter()
            .filter_map(|o| match o {
                Output::Risk(r) => Some(r.clone()),
                _ => None,
            })
            .collect()
    }

    /// An engine of `config` that has seen a 10 h job, a preemptible VM
    /// launched at 9 h (03:00 CST, night, in us-central1-c), a plain
    /// machine, and a similar job placed on the VM at 10 h; with the risk
    /// scores of the placement.
    fn placed_on_a_vm(config: &EngineConfig) -> (Engine, Effects, Vec<MachineRisk>) {
        let hour = HOUR;
        let mut engine = Engine::new(config).unwrap();
        let mut effects = Effects::default();
        // History: a similar job ran 10 h.
        engine.apply(&submit(10, 0, 1), &mut effects).unwrap();
        engine
            .apply(&task(10, 0, 0, "schedule"), &mut effects)
            .unwrap();
        engine
            .apply(&task(10, 0, 10 * hour, "finish"), &mut effects)
            .unwrap();
        engine
            .apply(&end(10, 10 * hour, "finish"), &mut effects)
            .unwrap();
        // A preemptible VM launched at 9 h; a plain machine.
        let t = 9 * hour;
        engine
            .apply(
                &event(&format!(
                    r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"add","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{t}}}"#
                )),
                &mut effects,
            )
            .unwrap();
        engine
            .apply(
                &event(&format!(
                    r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":2,"kind":"add"}}"#
                )),
                &mut effects,
            )
            .unwrap();

        // Placed at VM age 1 h with about 10 h of work.
        engine
            .apply(&submit(1, 10 * hour, 1), &mut effects)
            .unwrap();
        effects.clear();
        engine
            .apply(&task(1, 0, 10 * hour, "schedule"), &mut effects)
            .unwrap();
        let placed = risks(&effects);
        (engine, effects, placed)
    }

    #[test]
    fn a_task_placed_on_a_transient_vm_is_scored_and_rescored_as_the_vm_ages() {
        let hour = HOUR;
        let (mut engine, mut effects, first) = placed_on_a_vm(&EngineConfig::default());
        assert_eq!(first.len(), 1);
        let p = first[0].score.this_vm.preemption_probability;
        assert!(p > 0.0 && p < 1.0, "{p}");
        assert!((first[0].score.runtime.mean_h - 10.0).abs() < 1e-9);
        assert_eq!(engine.machine(1).unwrap().risk.as_ref(), Some(&first[0]));

        // The plain machine gets no score.
        engine
            .apply(&submit(2, 10 * hour, 1), &mut effects)
            .unwrap();
        effects.clear();
        let on_plain = r#"{"v":1,"type":"task","time_us":36000000000,"job_id":2,"task_index":0,"kind":"schedule","machine_id":2}"#;
        engine.apply(&event(on_plain), &mut effects).unwrap();
        assert!(risks(&effects).is_empty());

        // The next event after the VM turns 3 h old rescores it for the
        // 8 h of work left, at the crossing time.
        effects.clear();
        engine
            .apply(&submit(3, 12 * hour + hour / 2, 1), &mut effects)
            .unwrap();
        let refreshed = risks(&effects);
        assert_eq!(refreshed.len(), 1);
        assert_eq!(refreshed[0].time_us, 12 * hour);
        assert!((refreshed[0].score.runtime.mean_h - 8.0).abs() < 1e-9);
        assert!((refreshed[0].score.this_vm.age_h - 3.0).abs() < 1e-9);
    }

    #[test]
    fn risk_scores_start_from_the_configured_prior() {
        let custom = BathtubPrior {
            a: 0.8,
            tau1: 0.5,
            ..BathtubPrior::default()
        };
        let mut config = EngineConfig::default();
        config.risk.prior = custom;
        let (_, _, by_default) = placed_on_a_vm(&EngineConfig::default());
        let (_, _, by_custom) = placed_on_a_vm(&config);
        let (d, c) = (&by_default[0], &by_custom[0]);
        // No VM has ended, so there is no fit: each engine scores with its
        // prior, exactly.
        for (risk, prior) in [(d, Bathtub::default()), (c, custom.bathtub().unwrap())] {
            let want = score(
                &prior,
                risk.score.this_vm.age_h,
                risk.score.runtime,
                &RiskConfig::default(),
                None,
            )
            .unwrap();
            assert_eq!(risk.score, want);
        }
        let p = |r: &MachineRisk| r.score.this_vm.preemption_probability;
        assert!(p(c) > p(d) + 0.1, "{} vs {}", p(c), p(d));
    }

    #[test]
    fn bad_online_fit_settings_are_refused_by_name() {
        let refused = |risk: RiskSettings| {
            let config = EngineConfig {
                risk,
                ..EngineConfig::default()
            };
            Engine::new(&config).err().expect("refused")
        };
        let with_prior = |prior: BathtubPrior| RiskSettings {
            prior,
            ..RiskSettings::default()
        };
        let base = BathtubPrior::default();
        for (prior, field) in [
            (BathtubPrior { a: 1.5, ..base }, "risk.prior.a"),
            (BathtubPrior { a: 0.0, ..base }, "risk.prior.a"),
            (BathtubPrior { tau1: -1.0, ..base }, "risk.prior.tau1"),
            (BathtubPrior { tau2: 0.0, ..base }, "risk.prior.tau2"),
            (
                BathtubPrior {
                    b: f64::NAN,
                    ..base
                },
                "risk.prior.b",
            ),
            (
                BathtubPrior {
                    max_lifetime_h: 0.0,
                    ..base
                },
                "risk.prior.max_lifetime_h",
            ),
            // Valid, but beyond what the fit searches (τ1 ≤ 2L).
            (
                BathtubPrior {
                    tau1: 100.0,
                    ..base
                },
                "`tau1`",
            ),
        ] {
            let err = refused(with_prior(prior));
            assert!(err.contains(field), "{prior:?}: {err}");
        }
        let err = refused(RiskSettings {
            refit_every: 0,
            ..RiskSettings::default()
        });
        assert!(err.contains("risk.refit_every"), "{err}");
        let err = refused(RiskSettings {
            window: 0,
            ..RiskSettings::default()
        });
        assert!(err.contains("risk.window"), "{err}");
        let err = refused(RiskSettings {
            shrinkage_events: -1.0,
            ..RiskSettings::default()
        });
        assert!(err.contains("risk.shrinkage_events"), "{err}");
        assert_eq!(
            RiskSettings::default().online().unwrap(),
            OnlineConfig::default()
        );
    }

    #[test]
    fn a_live_service_cannot_run_the_oracle() {
        let config = EngineConfig {
            policy: PolicyKind::Oracle,
            ..EngineConfig::default()
        };
        assert!(Engine::new(&config).is_err());
    }
}
