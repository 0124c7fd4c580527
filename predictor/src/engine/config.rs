//! The engine's configuration: which policy drives, which run in shadow,
//! and how VM risk is scored and fitted. Every setting is checked by
//! [`Engine::new`](super::Engine::new), and an error names its key.

use serde::{Deserialize, Serialize};

use crate::deadlines::{Catalogue, Clock};
use crate::decision::{PolicyKind, Quantiles};
use crate::history::HistoryConfig;
use jobcast_ingest::config::ConfigError;

use super::expiry::ExpirySettings;
use super::progress::EtaSettings;
use super::starts::StartSettings;
use crate::policies::PolicyConfig;
use crate::preemption::Bathtub;
use crate::preemption::checkpoint::CheckpointSpec;
use crate::preemption::fit::FitConfig;
use crate::preemption::hints::CoasterConfig;
use crate::preemption::models::LifetimeModel;
use crate::preemption::online::OnlineConfig;
use crate::preemption::risk::RiskConfig;
use crate::queues::QueueConfig;

/// The policies a live service can run: those that need no knowledge of
/// the future (not the Oracle) and that estimate runtimes (LAS and FIFO do
/// not, so they have nothing to score).
pub fn live_policies() -> Vec<PolicyKind> {
    PolicyKind::ALL
        .into_iter()
        .filter(|k| {
            !matches!(
                k,
                PolicyKind::Las | PolicyKind::LasDag | PolicyKind::Fifo | PolicyKind::Oracle
            )
        })
        .collect()
}

/// The policies a service runs unless configured otherwise: every live
/// policy but Point-Est-DAG and Bayes-DAG, which a cluster of DAG jobs
/// adds to `shadow`, and HPC, which an HPC site drives with. Each policy
/// in shadow costs every event its work (Bayes the most); the DAG two
/// decide flat jobs exactly as Point-Est and Bayes do.
pub fn default_shadow() -> Vec<PolicyKind> {
    live_policies()
        .into_iter()
        .filter(|k| {
            !matches!(
                k,
                PolicyKind::PointDag | PolicyKind::BayesDag | PolicyKind::Hpc
            )
        })
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
    /// CloudCoaster's controller of the transient short partition.
    pub capacity: CapacitySettings,
    /// Teylo et al.'s maps for deadline jobs on hibernating spot VMs.
    pub deadlines: DeadlineSettings,
    pub expiry: ExpirySettings,
    pub eta: EtaSettings,
    /// Start estimates for pending jobs (`starts.rs`); off unless set.
    /// Computed as decisions are published, from no state of their own:
    /// not in the stamp.
    pub starts: StartSettings,
    /// How far (seconds) an event's time may be ahead of the latest event
    /// time applied from any partition (`clock.rs`) before it counts as a
    /// jump: held until an event of
    /// another job or machine on its partition confirms it (then applied)
    /// or shows it stood alone (then refused, `future_time`). Also how far
    /// behind the time most partitions have reached a partition is idle.
    /// A day by default: events of one partition hours apart (a small
    /// cluster at night) are no jump. Changing it needs no rebuild of the
    /// store. 0: no bound (every event applied at once).
    pub max_future_skew_secs: u64,
    /// The most jobs held live at once: a submission beyond it is refused
    /// (`over_budget`), so memory follows this setting, not the input.
    pub max_live_jobs: u64,
    /// The most tasks with a record (a task has one from its first event
    /// until its job ends) at once: a task event that would add one beyond
    /// it is refused (`over_budget`). A job's declared width costs nothing
    /// until its tasks report.
    pub max_live_tasks: u64,
    /// The most clusters listed at once (events may name their cluster;
    /// an idle one stays listed until the expiry sweep): an event that
    /// would add one beyond it is refused (`over_budget`).
    pub max_clusters: u32,
    /// The least event time (ms) between two published decisions of a job
    /// that differ only in their estimate or pilots (same phase, same
    /// queue): a newer one waits for it, and only the newest goes out
    /// (`pacing.rs`). One that changes the phase or queue, or that gives
    /// pilots when the scheduler has none of the published ones left to
    /// run, goes out at once. 0: every decision goes out.
    pub min_republish_ms: u64,
}

impl EngineConfig {
    /// What a store built with this configuration is stamped with, and
    /// must match to be recovered by it: every setting that shapes the
    /// state derived from the input, which is every setting but
    /// `max_future_skew_secs` and `starts`. The skew decides only how long
    /// an event far ahead waits for its partition to vouch for it, so an
    /// operator may change it on a running store: the events after the
    /// restart are held by the new bound (those the log holds since the
    /// last snapshot too; a stop with `storage.snapshot_on_stop` leaves
    /// none). Start estimates are computed as decisions go out, from the
    /// state the others shape: decisions after a restart carry the new
    /// setting's, and the waiting jobs' published starts are looked at
    /// again under it (with none, each goes out once more without a
    /// start).
    pub fn stamp(&self) -> Vec<u8> {
        let mut value = serde_json::to_value(self).expect("the configuration serialises");
        if let Some(settings) = value.as_object_mut() {
            settings.remove("max_future_skew_secs");
            settings.remove("starts");
        }
        serde_json::to_vec(&value).expect("the configuration serialises")
    }

    /// [`EngineConfig::max_future_skew_secs`] in µs, if bounded.
    pub(super) fn max_future_skew_us(&self) -> Result<Option<u64>, ConfigError> {
        match self.max_future_skew_secs {
            0 => Ok(None),
            secs => secs.checked_mul(1_000_000).map(Some).ok_or_else(|| {
                ConfigError::new(
                    "max_future_skew_secs",
                    format!("{secs} s do not fit in µs of event time"),
                )
            }),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            policy: PolicyKind::SLearn,
            shadow: default_shadow(),
            policies: PolicyConfig::default(),
            history: HistoryConfig::default(),
            queues: QueueConfig::default(),
            risk: RiskSettings::default(),
            capacity: CapacitySettings::default(),
            deadlines: DeadlineSettings::default(),
            expiry: ExpirySettings::default(),
            eta: EtaSettings::default(),
            starts: StartSettings::default(),
            max_future_skew_secs: 86_400,
            max_live_jobs: 500_000,
            max_live_tasks: 5_000_000,
            max_clusters: 64,
            min_republish_ms: 1_000,
        }
    }
}

/// When and how tasks on transient VMs are scored, and how the VM
/// lifetimes they are scored with are fitted from the machine events (see
/// [`OnlineFitter`](crate::preemption::online::OnlineFitter)).
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
    /// What one checkpoint costs a task, minutes: each risk score carries
    /// the optimal checkpoint schedule (the bathtub paper's dynamic
    /// programme) for a task that checkpoints at this cost, on the VM the
    /// score recommends. 0: no schedule.
    pub checkpoint_cost_minutes: f64,
    /// The schedule's grid, minutes; a cost between two steps is rounded up
    /// to the next. One table per lifetime model in use covers tasks and VM
    /// ages up to the deadline, built when first needed; its cost grows
    /// with the cube of the steps (`risk checkpoints` builds a day's table
    /// and Young–Daly's in 0.055 s at 5 minutes, 9.9 s at 1).
    pub checkpoint_step_minutes: f64,
    /// Equal-width bins of probability in which the outcomes of published
    /// scores are counted to recalibrate the next ones.
    pub recalibration_bins: usize,
    /// Outcomes (censoring-weighted) counted before scores are
    /// recalibrated; until then they are the model's.
    pub recalibration_min_outcomes: f64,
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
            checkpoint_cost_minutes: 5.0,
            checkpoint_step_minutes: 5.0,
            recalibration_bins: 50,
            recalibration_min_outcomes: 1_000.0,
        }
    }
}

impl RiskSettings {
    /// The online fitter's configuration; an error names the bad setting
    /// (within `risk`).
    pub fn online(&self) -> Result<OnlineConfig, ConfigError> {
        let prior = self.prior.bathtub().map_err(|e| e.within("prior"))?;
        if self.refit_every == 0 {
            return Err(ConfigError::new("refit_every", "must be at least 1"));
        }
        if self.window == 0 {
            return Err(ConfigError::new("window", "must be at least 1"));
        }
        if !(self.shrinkage_events.is_finite() && self.shrinkage_events >= 0.0) {
            return Err(ConfigError::new(
                "shrinkage_events",
                format!("must be finite and ≥ 0, got {}", self.shrinkage_events),
            ));
        }
        if let Some(age) = self
            .refresh_ages_h
            .iter()
            .find(|a| !(a.is_finite() && **a > 0.0))
        {
            return Err(ConfigError::new(
                "refresh_ages_h",
                format!("must be positive hours, got {age}"),
            ));
        }
        let cost = self.checkpoint_cost_minutes;
        if !(cost.is_finite() && cost >= 0.0) {
            return Err(ConfigError::new(
                "checkpoint_cost_minutes",
                format!("must be finite and ≥ 0 (0: no schedule), got {cost}"),
            ));
        }
        if !(1.0..=60.0).contains(&self.checkpoint_step_minutes) {
            return Err(ConfigError::new(
                "checkpoint_step_minutes",
                format!(
                    "must be 1 to 60 (a finer grid costs seconds per table), got {}",
                    self.checkpoint_step_minutes
                ),
            ));
        }
        if !(1..=10_000).contains(&self.recalibration_bins) {
            return Err(ConfigError::new(
                "recalibration_bins",
                format!("must be 1 to 10000, got {}", self.recalibration_bins),
            ));
        }
        let min = self.recalibration_min_outcomes;
        if !(min.is_finite() && min >= 0.0) {
            return Err(ConfigError::new(
                "recalibration_min_outcomes",
                format!("must be finite and ≥ 0, got {min}"),
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
            .map_err(|e| ConfigError::new("prior", e.to_string()))?;
        Ok(config)
    }

    /// The checkpoint table every lifetime model's schedules come from:
    /// tasks and start ages up to the deadline `L`, the cost rounded up to
    /// the grid; `None` without a checkpoint cost.
    pub fn checkpoint_spec(&self) -> Option<CheckpointSpec> {
        let cost = self.checkpoint_cost_minutes;
        if cost <= 0.0 {
            return None;
        }
        let step = self.checkpoint_step_minutes;
        let deadline_h = self.prior.max_lifetime_h;
        Some(CheckpointSpec {
            delta_h: (cost / step).ceil() * step / 60.0,
            max_step_h: step / 60.0,
            max_job_h: deadline_h,
            max_start_age_h: deadline_h,
        })
    }
}

/// CloudCoaster's controller (`capacity.rs`): when it runs, which jobs are
/// long, and the partition's threshold and budget (its §3.1–3.2).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CapacitySettings {
    /// Publish capacity decisions (off: the cluster has no transient short
    /// partition to resize).
    pub enabled: bool,
    /// A task is long when its job's estimated mean task runtime is above
    /// this, seconds.
    pub long_cutoff_secs: f64,
    /// Grow the partition while `l_r` is above this, in (0, 1].
    pub threshold: f64,
    /// `r`: on-demand price / transient price, at least 1.
    pub cost_ratio: f64,
    /// `N`: the on-demand servers of the purely static short partition the
    /// transient one is budgeted against.
    pub static_short_servers: u32,
    /// `p`: the share of them the transient servers replace, in [0, 1].
    pub replaced_fraction: f64,
    /// A release names the transient servers likeliest to be preempted
    /// within this many minutes.
    pub release_horizon_minutes: f64,
}

impl Default for CapacitySettings {
    /// Off; when on, the paper's threshold and budget
    /// ([`CoasterConfig::default`]) and a cutoff of an hour.
    fn default() -> Self {
        let coaster = CoasterConfig::default();
        CapacitySettings {
            enabled: false,
            long_cutoff_secs: 3_600.0,
            threshold: coaster.threshold,
            cost_ratio: coaster.cost_ratio,
            static_short_servers: coaster.static_short_servers,
            replaced_fraction: coaster.replaced_fraction,
            release_horizon_minutes: 60.0,
        }
    }
}

impl CapacitySettings {
    /// Check every setting; an error names it (within `capacity`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |key: &str, value: f64| {
            if value.is_finite() && value > 0.0 {
                Ok(())
            } else {
                Err(ConfigError::new(
                    key,
                    format!("must be finite and positive, got {value}"),
                ))
            }
        };
        positive("long_cutoff_secs", self.long_cutoff_secs)?;
        positive("release_horizon_minutes", self.release_horizon_minutes)?;
        if !(self.threshold > 0.0 && self.threshold <= 1.0) {
            return Err(ConfigError::new(
                "threshold",
                format!("must be in (0, 1], got {}", self.threshold),
            ));
        }
        if !(self.cost_ratio.is_finite() && self.cost_ratio >= 1.0) {
            return Err(ConfigError::new(
                "cost_ratio",
                format!(
                    "must be at least 1 (transient servers cost less), got {}",
                    self.cost_ratio
                ),
            ));
        }
        if !(0.0..=1.0).contains(&self.replaced_fraction) {
            return Err(ConfigError::new(
                "replaced_fraction",
                format!("must be in [0, 1], got {}", self.replaced_fraction),
            ));
        }
        Ok(())
    }

    /// The rule's configuration.
    pub fn coaster(&self) -> CoasterConfig {
        CoasterConfig {
            threshold: self.threshold,
            cost_ratio: self.cost_ratio,
            static_short_servers: self.static_short_servers,
            replaced_fraction: self.replaced_fraction,
        }
    }
}

/// Deadline jobs on hibernating spot VMs (`deadlines.rs`): the VM
/// catalogue, the clock of the maps, and the quantile of the estimates
/// they plan at.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct DeadlineSettings {
    /// Draw maps for jobs with a deadline, and publish their decisions.
    pub enabled: bool,
    /// The quantile of the estimated task runtime the maps plan at (p50,
    /// p90, p95 or p99); a lower one where its maps are not valid.
    pub quantile: String,
    /// `VM_timelimit`: no VM of the primary map is busy past this share
    /// of the time to the deadline, in (0, 1].
    pub time_limit: f64,
    /// A period of the maps, seconds (the paper: a minute).
    pub period_secs: u64,
    /// Periods billed as one slot (the paper: an hour of minutes).
    pub slot_periods: u64,
    /// GB in one unit of a job's `mem_request`: Slurm reports MB.
    pub memory_gb_per_unit: f64,
    /// Jobs of more tasks get no map (`unplanned`): a map lists every
    /// task, and a decision is one Kafka message.
    pub max_tasks: u32,
    /// The VM types on offer and their boot time (default: Table VI of
    /// the paper, 2 minutes' boot).
    pub catalogue: Catalogue,
    /// How a planned job's VMs follow it: `static` (the paper's maps, and
    /// a recovery group for each hibernation), or `elastic` (the maps' VMs
    /// to begin with, grown and drained on the job's ended tasks:
    /// `crate::deadlines::fleet`).
    pub fleet: FleetMode,
}

/// How a planned deadline job's VMs follow it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FleetMode {
    /// The paper's static execution: the primary map, and the backup
    /// map's recovery groups.
    #[default]
    Static,
    /// The elastic fleet: `grow` and `drain` decisions.
    Elastic,
}

impl Default for DeadlineSettings {
    fn default() -> Self {
        DeadlineSettings {
            enabled: false,
            quantile: "p90".into(),
            time_limit: 0.5,
            period_secs: 60,
            slot_periods: 60,
            memory_gb_per_unit: 1.0 / 1024.0,
            max_tasks: 2_000,
            catalogue: Catalogue::teylo_2018(),
            fleet: FleetMode::Static,
        }
    }
}

impl DeadlineSettings {
    /// Check every setting; an error names it (within `deadlines`).
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.quantile_index()?;
        if !(self.time_limit > 0.0 && self.time_limit <= 1.0) {
            return Err(ConfigError::new(
                "time_limit",
                format!("must be in (0, 1], got {}", self.time_limit),
            ));
        }
        for (key, value) in [
            ("period_secs", self.period_secs),
            ("slot_periods", self.slot_periods),
            ("max_tasks", u64::from(self.max_tasks)),
        ] {
            if value == 0 {
                return Err(ConfigError::new(key, "must be positive"));
            }
        }
        if !(self.memory_gb_per_unit.is_finite() && self.memory_gb_per_unit >= 0.0) {
            return Err(ConfigError::new(
                "memory_gb_per_unit",
                format!(
                    "must be finite and not negative, got {}",
                    self.memory_gb_per_unit
                ),
            ));
        }
        self.catalogue
            .validate()
            .map_err(|e| ConfigError::new("catalogue", e.to_string()))
    }

    /// The quantile's index in [`Quantiles::NAMES`].
    pub fn quantile_index(&self) -> Result<usize, ConfigError> {
        Quantiles::index_of(&self.quantile).map_err(|e| ConfigError::new("quantile", e))
    }

    /// The clock the maps are drawn on.
    pub fn clock(&self) -> Clock {
        Clock {
            period_s: self.period_secs,
            slot_periods: self.slot_periods,
        }
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
    pub fn bathtub(&self) -> Result<Bathtub, ConfigError> {
        if !(self.a > 0.0 && self.a <= 1.0) {
            return Err(ConfigError::new(
                "a",
                format!("must be in (0, 1], got {}", self.a),
            ));
        }
        Bathtub::new(self.a, self.tau1, self.tau2, self.b, self.max_lifetime_h).map_err(|e| {
            ConfigError::new(
                e.param.as_str(),
                format!("must be {}, got {}", e.requirement, e.value),
            )
        })
    }
}
