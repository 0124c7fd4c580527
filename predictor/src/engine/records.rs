//! What the engine knows about each job, task and machine, and each
//! policy's errors: the records the service stores (in the binary layouts of
//! [`layout`](super::layout)) and the HTTP API serves (as JSON).

use std::collections::BTreeMap;

use jobcast_ingest::event::{EndReason, TaskKind};
use serde::{Deserialize, Serialize};

use crate::decision::{Completion, Estimate, PolicyKind};
use crate::preemption::hints::PartitionAction;
use crate::preemption::risk::RiskScore;

/// Where a job is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JobState {
    Running,
    Finished,
    Failed,
    Killed,
    Lost,
    /// Given up on: no event for `engine.expiry.live_job_idle_hours`.
    Expired,
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
    pub(super) fn record(&mut self, error: &PredictionError) {
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
    /// The cluster it runs on; empty for the one cluster of a source that
    /// names none.
    pub cluster: String,
    pub width: u32,
    pub state: JobState,
    pub end_us: Option<u64>,
    pub tasks_finished: u32,
    /// The latest estimate of each policy that has one, by policy (its
    /// name in JSON).
    pub estimates: BTreeMap<PolicyKind, Estimate>,
    /// True mean task runtime, once the job finished with every task's
    /// runtime known.
    #[serde(default, with = "crate::decision::whole_us::option")]
    pub actual_mean_task_runtime_us: Option<f64>,
    /// Each policy's error, once the truth is known.
    pub errors: BTreeMap<PolicyKind, PredictionError>,
    /// When it should finish, as of the driving policy's latest decision
    /// that could say.
    pub eta: Option<Completion>,
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

impl TaskRecord {
    /// Whether its last attempt ended and none runs now: a scheduler has
    /// nothing of it left to run, unless it starts it again.
    pub fn ended(&self) -> bool {
        self.running_since_us.is_none() && self.last.ends_attempt()
    }
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
    /// Its CPUs, as its events last reported them.
    pub cpus: Option<f64>,
    /// The latest preemption-risk score of the task placed on it (transient
    /// VMs only).
    pub risk: Option<MachineRisk>,
    /// Since when it is hibernated (a spot VM paused by its provider),
    /// µs; none while it runs.
    #[serde(default)]
    pub hibernated_since_us: Option<u64>,
    /// The cluster it belongs to, as its events last named it; empty for
    /// the one cluster of a source that names none.
    #[serde(default)]
    pub cluster: String,
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
    /// The lifetime model the score was computed with: `bathtub` while the
    /// VMs' lifetimes show a deadline, else the model closest to them
    /// (`weibull`, `exponential`, `gompertz-makeham`).
    pub lifetime_model: String,
    /// The chance the VM is preempted before the task ends: the model's
    /// (`score.this_vm.preemption_probability`) recalibrated on what
    /// happened to the scores before it (`preemption/recalibration.rs`).
    pub preemption_probability: f64,
    pub score: RiskScore,
}

/// A decision of CloudCoaster's controller (`capacity.rs`): the `capacity`
/// topic's messages and `GET /capacity`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CapacityDecision {
    /// Grows by one with each decision; a consumer keeps the highest.
    pub version: u64,
    /// Event time of the decision, µs.
    pub time_us: u64,
    /// Grow or shrink the transient short partition, or hold it.
    pub action: PartitionAction,
    /// Transient servers to add (`grow`) or release (`shrink`); 0 to hold.
    pub servers: u32,
    /// For `shrink`: the servers to release, likeliest to be preempted
    /// soon first.
    pub release: Vec<ReleaseCandidate>,
    /// `l_r`: machines up running a long task / machines up.
    pub long_load_ratio: f64,
    pub threshold: f64,
    pub long_servers: u32,
    pub servers_up: u32,
    /// Preemptible machines up: the transient short partition.
    pub transient_servers: u32,
    /// `K = ⌊r⌋·N·p`: the transient servers the budget buys.
    pub transient_budget: u32,
    /// A task is long when its job's estimated mean task runtime is above
    /// this.
    pub long_cutoff_us: u64,
}

/// A transient server a shrink releases.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseCandidate {
    pub machine_id: u64,
    /// Its age, hours since launch.
    pub age_h: f64,
    /// Its chance of a preemption within `release_horizon_minutes`, by the
    /// fitted lifetime model.
    pub preemption_probability: f64,
}

/// A decision about a deadline job on spot VMs (`deadlines.rs`): the
/// `deadline` kind of the decisions topic's messages, keyed by the job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadlineDecision {
    pub job_id: u64,
    /// Grows by one with each of the job's deadline decisions (apart from
    /// its runtime decisions' versions); a consumer keeps the highest.
    pub version: u32,
    /// Event time of the decision, µs.
    pub time_us: u64,
    /// When the job must have ended, µs.
    pub deadline_us: u64,
    pub action: DeadlineAction,
    /// For `plan`: the primary map.
    pub plan: Option<DeadlinePlan>,
    /// For `wait`, `migrate` and `resume`: the hibernated VM's recovery
    /// group and where it runs if it migrates.
    pub recovery: Option<Recovery>,
    /// For `unplanned`: why no map was drawn.
    pub reason: Option<String>,
    /// For `grow` and `drain`: what the elastic fleet changes.
    #[serde(default)]
    pub fleet: Option<FleetChange>,
}

/// What a deadline decision asks of the scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineAction {
    /// Run the job on these VMs (Algorithm 1's primary map).
    Plan,
    /// No map could be drawn for the job (`reason` says why).
    Unplanned,
    /// A spot VM running the job's tasks hibernated: wait for it to resume
    /// until `start_backup_us`, the latest moment the recovery group can
    /// still move and meet the deadline (Eq. 3).
    Wait,
    /// Move the recovery group to its on-demand VMs now.
    Migrate,
    /// The VM resumed before `start_backup_us`: the waiting is over and
    /// nothing moves.
    Resume,
    /// The elastic fleet cannot end the job in time: buy these VMs now.
    Grow,
    /// The elastic fleet ends the job in time without this VM: give it no
    /// more of the job's tasks, and release it once its running ones end.
    Drain,
}

impl DeadlineAction {
    pub fn as_str(self) -> &'static str {
        match self {
            DeadlineAction::Plan => "plan",
            DeadlineAction::Unplanned => "unplanned",
            DeadlineAction::Wait => "wait",
            DeadlineAction::Migrate => "migrate",
            DeadlineAction::Resume => "resume",
            DeadlineAction::Grow => "grow",
            DeadlineAction::Drain => "drain",
        }
    }
}

/// The primary map of a deadline job, as published.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadlinePlan {
    /// The policy whose estimate the runtimes come from.
    pub policy: PolicyKind,
    /// The estimate's quantile every task is planned at: the highest, up
    /// to `engine.deadlines.quantile`, whose maps are valid; else `p50`.
    pub quantile: String,
    /// The planned runtime of each task on the baseline core, µs.
    pub task_runtime_us: u64,
    /// The primary map keeps within `D · time_limit` and every recovery
    /// group of the backup map meets the deadline.
    pub valid: bool,
    /// What the primary map's contracted slots cost, USD.
    pub cost_usd: f64,
    /// When the primary map's last task ends, µs of event time.
    pub end_us: u64,
    /// The VMs to start, spot ones first as Algorithm 1 bought them.
    pub vms: Vec<PlannedVm>,
}

/// A VM of a map: its type, market and tasks, each with its planned start
/// and end (µs of event time).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannedVm {
    pub vm_type: String,
    pub market: crate::deadlines::Market,
    pub tasks: Vec<PlannedTask>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PlannedTask {
    pub task_index: u32,
    pub start_us: u64,
    pub end_us: u64,
}

/// The recovery group of a hibernated VM (Eq. 2, from the tasks running
/// on it and those the primary map put after them), placed on on-demand
/// VMs (Algorithm 2) at the hibernation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recovery {
    pub machine_id: u64,
    pub hibernated_us: u64,
    pub tasks: Vec<u32>,
    /// The on-demand VMs to move them to; task times count from the
    /// migration, boot included.
    pub backups: Vec<PlannedVm>,
    /// How long the group takes there, boot included, µs.
    pub runtime_us: u64,
    /// `start_bkp` (Eq. 3): the deadline less the group's runtime and one
    /// period, µs of event time.
    pub start_backup_us: u64,
    /// Migrating at `start_backup_us` still meets the deadline.
    pub meets_deadline: bool,
    /// Where the group stands.
    pub state: RecoveryState,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecoveryState {
    /// The VM is hibernated; the group moves at `start_backup_us`.
    Waiting,
    /// The group was moved.
    Migrated,
    /// The VM resumed in time.
    Resumed,
}

/// A deadline job's plan and its recoveries so far: stored in the
/// `deadlines` column family and served at `GET /jobs/{id}` as `deadline`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeadlineRecord {
    pub job_id: u64,
    pub deadline_us: u64,
    /// The latest deadline decision's version.
    pub version: u32,
    pub plan: Option<DeadlinePlan>,
    /// Why no map was drawn, if none was.
    pub reason: Option<String>,
    /// By hibernated VM, the latest hibernation's group.
    pub recoveries: Vec<Recovery>,
    /// With `engine.deadlines.fleet = "elastic"`: the fleet as it stands.
    #[serde(default)]
    pub fleet: Option<FleetRecord>,
}

/// A deadline job's elastic fleet as it stands.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetRecord {
    /// Its VMs: the primary map's, then those bought, in that order.
    pub vms: Vec<FleetVm>,
    /// Tasks no VM runs.
    pub queued: u32,
    /// The task runtime the fleet assumes, µs on the baseline core: the
    /// Kaplan–Meier mean of the ended tasks, the running ones censored at
    /// their age; the plan's until a task ends.
    pub task_runtime_us: u64,
}

/// A VM of an elastic fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetVm {
    pub vm_type: String,
    pub market: crate::deadlines::Market,
    /// The machine that plays it, once one ran a task of the job.
    pub machine_id: Option<u64>,
    /// When it was bought (`grow`), µs of event time; none for the map's.
    pub bought_us: Option<u64>,
    /// It takes no more of the job's tasks.
    pub draining: bool,
    pub hibernated: bool,
}

/// What a `grow` or `drain` decision changes in the elastic fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FleetChange {
    /// `grow`: the VMs to buy now.
    pub buy: Vec<FleetVm>,
    /// `drain`: the machine to give no more of the job's tasks.
    pub drain_machine_id: Option<u64>,
    /// Tasks no VM runs, after the change.
    pub queued: u32,
    /// The task runtime the decision assumes, µs on the baseline core.
    pub task_runtime_us: u64,
    /// Tasks that hibernations stopped and that run again on on-demand
    /// VMs only (a `grow`'s on-demand VMs are bought for them), the
    /// queued ones first.
    #[serde(default)]
    pub on_demand_tasks: Vec<u32>,
}

/// What one cluster of a federation holds now: `GET /clusters`, and the
/// `jobcast_cluster_*` gauges.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClusterRecord {
    /// Its name; empty for the one cluster of a source that names none.
    pub cluster: String,
    pub machines_up: u32,
    /// The CPUs of its machines up (those whose events give them).
    pub cpus: f64,
    pub live_jobs: u64,
}
