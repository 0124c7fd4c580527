//! The prediction policies of SLearn (NSDI '22) and its baselines, behind
//! the [`Policy`] trait, and [`build`], which makes one by its
//! [`PolicyKind`].
//!
//! | kind         | first decision                         | later decisions            |
//! |--------------|----------------------------------------|----------------------------|
//! | `3sigma`     | history (utility) size                 | none                       |
//! | `point`      | history (median) size                  | none                       |
//! | `3sigma-tl`  | thin → top queue, else as `3sigma`     | none                       |
//! | `3sigma-dag` | Σ per-stage history sizes              | none                       |
//! | `point-dag`  | Σ per-stage history (median) sizes     | none                       |
//! | `slearn`     | thin → top queue, else pilots          | pilot replaced; estimated  |
//! | `slearn-dag` | as `slearn`, pilots from root stages   | history rescaled by pilots |
//! | `bayes`      | prior (thin without it → top) or pilots| pilot replaced; posterior  |
//! | `bayes-dag`  | as `bayes`, pilots from root stages    | history rescaled by posterior |
//! | `las`        | top queue, attained service            | none                       |
//! | `las-dag`    | as `las`, the whole DAG's service      | none                       |
//! | `fifo`       | queue 0, arrival order                 | none                       |
//! | `oracle`     | true size                              | none                       |
//! | `hpc`        | the user's most similar recent runtimes | none                      |
//!
//! Every policy made by [`build`] is wrapped in `calibrated`, which gives
//! its estimates calibrated quantiles ([`crate::calibration`]).
//!
//! Every policy keeps state only for live jobs and drops it in
//! [`Policy::on_job_done`]. Randomness (which tasks are pilots) comes from a
//! ChaCha8 stream keyed by `(seed, job id)`, so a job's pilots never depend
//! on other jobs or on the order jobs arrive in.

mod adaptive;
mod baselines;
mod bayes;
mod calibrated;
mod dag;
mod history_based;
mod hpc;
mod interface;
mod pilots;
mod slearn;
#[cfg(test)]
mod testkit;

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use adaptive::{AdaptiveRatio, RATIO_PERCENTS};
pub use baselines::{Fifo, Las, Oracle};
pub use bayes::Bayes;
use calibrated::Calibrated;
pub use history_based::HistoryBased;
pub use hpc::Hpc;
pub use interface::{Context, JobDone, Policy, TaskEnd};
pub use slearn::SLearn;

use crate::decision::{Decision, Estimate, Phase, PolicyKind, StageEstimate};
use jobcast_ingest::config::ConfigError;

/// How SLearn picks its sampling ratio.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "mode")]
pub enum Sampling {
    /// The adaptive algorithm of the paper's Figure 4, over blocks of
    /// `block` (T) wide jobs.
    Adaptive { block: u32 },
    /// A fixed fraction of a job's tasks, in (0, 1].
    Fixed { ratio: f64 },
}

/// Settings of the Bayesian policy (see [`Bayes`] for the model).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct BayesConfig {
    /// Posterior spread (sd of ln mean task runtime) at which sampling
    /// stops paying: pilots are added until the posterior sd would fall
    /// below it. 0.25 is roughly a ±28% error at one sd.
    pub target_log_sd: f64,
    /// Task-wise spread σ1 (sd of ln task runtime within a job) assumed
    /// before any job's pilots have taught one.
    pub default_task_log_sd: f64,
    /// At most this fraction of a job's tasks (rounded up) become pilots:
    /// the top of SLearn's 1–5% range.
    pub max_pilot_fraction: f64,
    /// A job that is sampled at all gets at least this fraction (rounded
    /// up): pilots run side by side, so a few more barely lengthen the
    /// sampling phase, and SLearn's usual 3% keeps its accuracy where the
    /// learnt task-wise spread would ask for a single pilot.
    pub min_pilot_fraction: f64,
    /// A job too narrow for `max_pilot_fraction` to give it the pilots its
    /// prior leaves room for may still have up to this many, at most a
    /// quarter of its tasks: a single pilot says little about a job whose
    /// tasks vary (0: no exception).
    pub narrow_pilots: u32,
    /// Pilots whose mean lies more than this many predictive sds from the
    /// prior's say the history has drifted: the prior is dropped and the
    /// pilots alone estimate the job. With `learn_drift`, only until 20
    /// sampled jobs have shown what threshold suits the workload.
    pub drift_sigmas: f64,
    /// Learn the drift threshold from finished jobs (bayes.rs).
    pub learn_drift: bool,
    /// A thin job is placed by its prior only when the prior's sd (as
    /// learnt reliability widens it) is at most this; else it goes to the
    /// top queue unestimated, as under SLearn. `None`: whenever the history
    /// knows similar jobs.
    pub thin_prior_max_log_sd: Option<f64>,
}

impl Default for BayesConfig {
    fn default() -> Self {
        BayesConfig {
            target_log_sd: 0.25,
            default_task_log_sd: 1.0,
            max_pilot_fraction: 0.05,
            min_pilot_fraction: 0.03,
            narrow_pilots: 3,
            drift_sigmas: 1.0,
            learn_drift: true,
            thin_prior_max_log_sd: None,
        }
    }
}

/// Settings shared by all policies. The default is the paper's setup, with
/// the pilots of a job capped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct PolicyConfig {
    /// Jobs with fewer tasks than this are thin: they skip sampling and go
    /// straight to the top queue (§5.1.2, thinLimit = 3).
    pub thin_limit: u32,
    pub sampling: Sampling,
    /// At most this many pilots per job, whatever the ratio. The paper's
    /// ratios (1–5%) give a 2^20-task job 10,000–52,000 pilots: every
    /// decision would carry them all (8 bytes each), and the estimate's
    /// sampling error (σ1/√m) is already ±3% at 1,000 pilots for σ1 = 1.
    /// Jobs narrower than `max_pilots / ratio` are sampled as in the paper.
    pub max_pilots: u32,
    /// Seed of the pilot choice.
    pub seed: u64,
    pub bayes: BayesConfig,
    /// Every estimate's quantiles of the mean task runtime stand at most
    /// this far (seconds), and its size's at this times its tasks: a level
    /// past it (a P99 of months on a trace of hours) is capped there and
    /// marked `capped`, and `slurm apply --walltime-quantile` sets no limit
    /// from it. A week by default; 0: no cap.
    pub quantile_horizon_secs: u64,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            thin_limit: 3,
            sampling: Sampling::Adaptive { block: 100 },
            max_pilots: 1000,
            seed: 0,
            bayes: BayesConfig::default(),
            quantile_horizon_secs: 7 * 86_400,
        }
    }
}

impl PolicyConfig {
    /// Check the settings, naming the bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match self.sampling {
            Sampling::Adaptive { block: 0 } => {
                return Err(ConfigError::new("sampling.block", "must be at least 1 job"));
            }
            Sampling::Fixed { ratio } if !(ratio > 0.0 && ratio <= 1.0) => {
                return Err(ConfigError::new(
                    "sampling.ratio",
                    format!("must be in (0, 1], got {ratio}"),
                ));
            }
            _ => {}
        }
        if self.max_pilots == 0 {
            return Err(ConfigError::new("max_pilots", "must be at least 1"));
        }
        let b = &self.bayes;
        if !(b.target_log_sd.is_finite() && b.target_log_sd > 0.0) {
            return Err(ConfigError::new(
                "bayes.target_log_sd",
                format!("must be positive, got {}", b.target_log_sd),
            ));
        }
        if !(b.default_task_log_sd.is_finite() && b.default_task_log_sd > 0.0) {
            return Err(ConfigError::new(
                "bayes.default_task_log_sd",
                format!("must be positive, got {}", b.default_task_log_sd),
            ));
        }
        if !(b.max_pilot_fraction > 0.0 && b.max_pilot_fraction <= 1.0) {
            return Err(ConfigError::new(
                "bayes.max_pilot_fraction",
                format!("must be in (0, 1], got {}", b.max_pilot_fraction),
            ));
        }
        if !(b.min_pilot_fraction >= 0.0 && b.min_pilot_fraction <= b.max_pilot_fraction) {
            return Err(ConfigError::new(
                "bayes.min_pilot_fraction",
                format!(
                    "must be in [0, max_pilot_fraction = {}], got {}",
                    b.max_pilot_fraction, b.min_pilot_fraction
                ),
            ));
        }
        if let Some(max) = b.thin_prior_max_log_sd
            && !(max.is_finite() && max > 0.0)
        {
            return Err(ConfigError::new(
                "bayes.thin_prior_max_log_sd",
                format!("must be positive, got {max}"),
            ));
        }
        if b.drift_sigmas.is_nan() || b.drift_sigmas <= 0.0 {
            return Err(ConfigError::new(
                "bayes.drift_sigmas",
                format!("must be positive (infinity: never), got {}", b.drift_sigmas),
            ));
        }
        Ok(())
    }
}

/// What one job really did, for the Oracle.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobTruth {
    /// Mean runtime of all the job's tasks, µs.
    pub mean_task_runtime_us: f64,
    /// Mean task runtime per DAG stage id, µs (empty for flat jobs).
    pub stage_mean_task_runtime_us: HashMap<u32, f64>,
}

impl JobTruth {
    pub fn new(mean_task_runtime_us: f64) -> Self {
        JobTruth {
            mean_task_runtime_us,
            stage_mean_task_runtime_us: HashMap::new(),
        }
    }

    /// Add one stage's true mean task runtime.
    pub fn with_stage(mut self, stage_id: u32, mean_task_runtime_us: f64) -> Self {
        self.stage_mean_task_runtime_us
            .insert(stage_id, mean_task_runtime_us);
        self
    }
}

/// Ground truth for the Oracle, by job id: a simulator that knows every
/// task's runtime fills it before the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OracleTruth {
    jobs: HashMap<u64, JobTruth>,
}

impl OracleTruth {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn insert(&mut self, job_id: u64, truth: JobTruth) {
        self.jobs.insert(job_id, truth);
    }

    pub fn get(&self, job_id: u64) -> Option<&JobTruth> {
        self.jobs.get(&job_id)
    }

    /// Forget a job (the Oracle drops truths of ended jobs).
    pub fn remove(&mut self, job_id: u64) -> Option<JobTruth> {
        self.jobs.remove(&job_id)
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

impl FromIterator<(u64, JobTruth)> for OracleTruth {
    fn from_iter<I: IntoIterator<Item = (u64, JobTruth)>>(iter: I) -> Self {
        OracleTruth {
            jobs: iter.into_iter().collect(),
        }
    }
}

/// Make the policy `kind`. The Oracle needs `oracle`; other policies
/// ignore it.
pub fn build(
    kind: PolicyKind,
    config: &PolicyConfig,
    oracle: Option<OracleTruth>,
) -> Result<Box<dyn Policy>, ConfigError> {
    config.validate()?;
    let thin = config.thin_limit;
    let policy: Box<dyn Policy> = match kind {
        PolicyKind::ThreeSigma => Box::new(HistoryBased::three_sigma()),
        PolicyKind::PointEst => Box::new(HistoryBased::point_est()),
        PolicyKind::ThreeSigmaTl => Box::new(HistoryBased::three_sigma_tl(thin)),
        PolicyKind::ThreeSigmaDag => Box::new(HistoryBased::three_sigma_dag()),
        PolicyKind::PointDag => Box::new(HistoryBased::point_dag()),
        PolicyKind::SLearn => Box::new(SLearn::new(config, false)),
        PolicyKind::SLearnDag => Box::new(SLearn::new(config, true)),
        PolicyKind::Bayes => Box::new(Bayes::new(config, false)),
        PolicyKind::BayesDag => Box::new(Bayes::new(config, true)),
        PolicyKind::Hpc => Box::new(Hpc::new()),
        PolicyKind::Las => Box::new(Las::flat()),
        PolicyKind::LasDag => Box::new(Las::dag()),
        PolicyKind::Fifo => Box::new(Fifo),
        PolicyKind::Oracle => Box::new(Oracle::new(oracle.ok_or_else(|| {
            ConfigError::new("policy", "the oracle policy needs the jobs' true runtimes")
        })?)),
    };
    Ok(Box::new(Calibrated::new(
        policy,
        calibrated::State::new(config.quantile_horizon_secs),
    )))
}

/// A policy's [`Policy::snapshot`]: the whole policy, in postcard's
/// compact binary form (floats bit for bit, so a restored policy decides
/// exactly as the one saved).
fn snapshot_of<P: Serialize>(policy: &P) -> Vec<u8> {
    postcard::to_allocvec(policy).expect("a policy serialises")
}

/// The policy `kind` as [`Policy::snapshot`] saved it.
pub fn restore(kind: PolicyKind, state: &[u8]) -> Result<Box<dyn Policy>, postcard::Error> {
    let (state, calibration) = calibrated::split_snapshot(state)?;
    restore_calibrated(kind, &state, calibration)
}

/// `policy` as it is, but with the quantile calibration `warm` has learnt:
/// an evaluation starts calibrated, as a service that has been running
/// is, without `warm`'s other state.
pub fn with_calibration_of(policy: &dyn Policy, warm: &dyn Policy) -> Box<dyn Policy> {
    let decode = |p: &dyn Policy| {
        calibrated::split_snapshot(&p.snapshot()).expect("a policy's own snapshot decodes")
    };
    let (inner, own) = decode(policy);
    let (_, learnt) = decode(warm);
    restore_calibrated(policy.kind(), &inner, own.with_calibration_of(learnt))
        .expect("a policy's own snapshot decodes")
}

fn restore_calibrated(
    kind: PolicyKind,
    state: &[u8],
    calibration: calibrated::State,
) -> Result<Box<dyn Policy>, postcard::Error> {
    fn boxed<P: Policy + serde::de::DeserializeOwned + 'static>(
        state: &[u8],
    ) -> Result<Box<dyn Policy>, postcard::Error> {
        Ok(Box::new(postcard::from_bytes::<P>(state)?))
    }
    let policy = match kind {
        PolicyKind::ThreeSigma
        | PolicyKind::PointEst
        | PolicyKind::ThreeSigmaTl
        | PolicyKind::ThreeSigmaDag
        | PolicyKind::PointDag => boxed::<HistoryBased>(state),
        PolicyKind::SLearn | PolicyKind::SLearnDag => boxed::<SLearn>(state),
        PolicyKind::Bayes | PolicyKind::BayesDag => boxed::<Bayes>(state),
        PolicyKind::Hpc => boxed::<Hpc>(state),
        PolicyKind::Las | PolicyKind::LasDag => boxed::<Las>(state),
        PolicyKind::Fifo => boxed::<Fifo>(state),
        PolicyKind::Oracle => boxed::<Oracle>(state),
    }?;
    Ok(Box::new(Calibrated::new(policy, calibration)))
}

/// Is a job of `width` tasks thin (§5.1.2)? A job without tasks has nothing
/// to sample, so it is thin whatever the limit.
fn is_thin(width: u32, thin_limit: u32) -> bool {
    width == 0 || width < thin_limit
}

fn decision(
    policy: PolicyKind,
    job_id: u64,
    version: u32,
    queue: u8,
    phase: Phase,
    estimate: Option<Estimate>,
    pilots: Vec<u32>,
) -> Decision {
    Decision {
        estimate,
        pilots,
        ..Decision::new(policy, job_id, version, queue, phase)
    }
}

/// A sampling job's decision: in the sampling queue, its pilots running
/// (at version 1 when it is submitted; at the next when a pilot is
/// replaced).
fn sampling(
    policy: PolicyKind,
    job_id: u64,
    version: u32,
    pilots: &pilots::PilotSet,
    ctx: &Context<'_>,
) -> Decision {
    decision(
        policy,
        job_id,
        version,
        ctx.queues.sampling_queue,
        Phase::Sampling,
        None,
        pilots.pilots(),
    )
}

/// The first decision for a thin job.
fn thin_bypass(policy: PolicyKind, job_id: u64) -> Decision {
    decision(
        policy,
        job_id,
        1,
        crate::queues::TOP_QUEUE,
        Phase::ThinBypass,
        None,
        Vec::new(),
    )
}

/// A decision placing a job by its estimated size, with the estimate's
/// stages (a DAG policy's; else none).
fn estimated(
    policy: PolicyKind,
    job_id: u64,
    version: u32,
    (est, stages): (Estimate, Vec<StageEstimate>),
    ctx: &Context<'_>,
) -> Decision {
    let queue = ctx.queues.queue_for(est.size_us);
    Decision {
        stages,
        ..decision(
            policy,
            job_id,
            version,
            queue,
            Phase::Estimated,
            Some(est),
            Vec::new(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::testkit::*;
    use super::*;

    #[test]
    fn a_policy_takes_the_calibration_another_has_learnt() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let build = || build(PolicyKind::ThreeSigma, &PolicyConfig::default(), None).unwrap();
        let quantiles = |p: &mut Box<dyn Policy>, id| {
            let d = p.on_submit(&job(id, 4), &ctx);
            d.estimate.unwrap().quantiles.unwrap().mean_task_runtime_us
        };
        // Every job truly runs 1 s a task, whatever the fallback said.
        let mut warm = build();
        for id in 0..crate::calibration::MIN_RESIDUALS as u64 {
            warm.on_submit(&job(id, 4), &ctx);
            warm.on_job_done(&done(id, 4, 1.0), &ctx);
        }
        let mut fresh = build();
        let own = quantiles(&mut fresh, 100);
        assert!(own.p90 > own.p50, "the model's own spread: {own:?}");
        let mut policy = with_calibration_of(fresh.as_ref(), warm.as_ref());
        assert_eq!(policy.kind(), PolicyKind::ThreeSigma);
        // 50 residuals reach up to the P95; the P99 (the 51st of 50) is
        // still the model's own.
        let learnt = quantiles(&mut policy, 101);
        for q in [learnt.p50, learnt.p90, learnt.p95] {
            assert!((q - S).abs() < 1e-6, "{learnt:?}");
        }
        assert_eq!(learnt.p99, own.p99);
    }

    #[test]
    fn the_default_config_is_the_papers() {
        let c = PolicyConfig::default();
        assert_eq!(c.thin_limit, 3);
        assert_eq!(c.sampling, Sampling::Adaptive { block: 100 });
        assert_eq!(c.bayes.target_log_sd, 0.25);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn bad_settings_are_named() {
        let bad = |c: PolicyConfig, word: &str| {
            let err = c.validate().unwrap_err();
            assert!(err.to_string().contains(word), "{err}");
            assert!(build(PolicyKind::SLearn, &c, None).is_err());
        };
        let d = PolicyConfig::default();
        bad(
            PolicyConfig {
                sampling: Sampling::Adaptive { block: 0 },
                ..d
            },
            "block",
        );
        for ratio in [0.0, -0.1, 1.5, f64::NAN] {
            bad(
                PolicyConfig {
                    sampling: Sampling::Fixed { ratio },
                    ..d
                },
                "ratio",
            );
        }
        bad(PolicyConfig { max_pilots: 0, ..d }, "max_pilots");
        let b = d.bayes;
        for x in [0.0, -1.0, f64::INFINITY, f64::NAN] {
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        target_log_sd: x,
                        ..b
                    },
                    ..d
                },
                "target_log_sd",
            );
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        default_task_log_sd: x,
                        ..b
                    },
                    ..d
                },
                "default_task_log_sd",
            );
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        max_pilot_fraction: x,
                        ..b
                    },
                    ..d
                },
                "max_pilot_fraction",
            );
        }
        for x in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        thin_prior_max_log_sd: Some(x),
                        ..b
                    },
                    ..d
                },
                "thin_prior_max_log_sd",
            );
        }
        for x in [0.0, -1.0, f64::NAN] {
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        drift_sigmas: x,
                        ..b
                    },
                    ..d
                },
                "drift_sigmas",
            );
        }
        for x in [-0.01, 0.06, f64::NAN] {
            bad(
                PolicyConfig {
                    bayes: BayesConfig {
                        min_pilot_fraction: x,
                        ..b
                    },
                    ..d
                },
                "min_pilot_fraction",
            );
        }
        let fixed_all = PolicyConfig {
            sampling: Sampling::Fixed { ratio: 1.0 },
            ..d
        };
        assert_eq!(fixed_all.validate(), Ok(()));
    }

    #[test]
    fn build_makes_every_kind_and_versions_start_at_1() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        for kind in PolicyKind::ALL {
            let truth = (kind == PolicyKind::Oracle).then(OracleTruth::new);
            let mut p = build(kind, &PolicyConfig::default(), truth).unwrap();
            assert_eq!(p.kind(), kind);
            for (id, width) in [(1, 0), (2, 1), (3, 1000)] {
                let d = p.on_submit(&job(id, width), &ctx);
                assert_eq!((d.job_id, d.version, d.policy), (id, 1, kind));
                assert!(d.queue < ctx.queues.levels);
            }
            assert_eq!(
                p.on_task_end(&finished(42, 0, 1), &ctx),
                None,
                "{kind}: unknown job"
            );
            for id in 1..=3 {
                p.on_job_done(&done(id, 1, 1.0), &ctx);
            }
        }
    }
}
