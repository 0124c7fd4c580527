//! What predictors emit: a scheduling decision for a job, with the estimate
//! behind it. Downstream schedulers receive these (scheduler-feed); the
//! simulator acts on them.

use serde::{Deserialize, Serialize};

/// The prediction policies jobcast implements, by their CLI names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum PolicyKind {
    #[serde(rename = "slearn")]
    SLearn,
    #[serde(rename = "3sigma")]
    ThreeSigma,
    #[serde(rename = "3sigma-tl")]
    ThreeSigmaTl,
    #[serde(rename = "point")]
    PointEst,
    #[serde(rename = "slearn-dag")]
    SLearnDag,
    #[serde(rename = "3sigma-dag")]
    ThreeSigmaDag,
    #[serde(rename = "bayes")]
    Bayes,
    #[serde(rename = "las")]
    Las,
    #[serde(rename = "fifo")]
    Fifo,
    #[serde(rename = "oracle")]
    Oracle,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 10] = [
        PolicyKind::SLearn,
        PolicyKind::ThreeSigma,
        PolicyKind::ThreeSigmaTl,
        PolicyKind::PointEst,
        PolicyKind::SLearnDag,
        PolicyKind::ThreeSigmaDag,
        PolicyKind::Bayes,
        PolicyKind::Las,
        PolicyKind::Fifo,
        PolicyKind::Oracle,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::SLearn => "slearn",
            PolicyKind::ThreeSigma => "3sigma",
            PolicyKind::ThreeSigmaTl => "3sigma-tl",
            PolicyKind::PointEst => "point",
            PolicyKind::SLearnDag => "slearn-dag",
            PolicyKind::ThreeSigmaDag => "3sigma-dag",
            PolicyKind::Bayes => "bayes",
            PolicyKind::Las => "las",
            PolicyKind::Fifo => "fifo",
            PolicyKind::Oracle => "oracle",
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for PolicyKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        PolicyKind::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = PolicyKind::ALL.iter().map(|p| p.name()).collect();
                format!(
                    "unknown policy `{s}` (expected one of: {})",
                    names.join(", ")
                )
            })
    }
}

/// Where an estimate came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum EstimateSource {
    /// 3Sigma history of one feature value.
    History {
        feature: crate::features::FeatureKind,
    },
    /// No feature had history: the global history or the configured default.
    Fallback,
    /// The empirical mean of `pilots` finished pilot tasks.
    Pilots { pilots: u32 },
    /// Bayesian posterior from a history prior and `pilots` pilot tasks.
    Posterior { pilots: u32 },
    /// The true runtime (Oracle).
    Truth,
}

/// A runtime estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Estimated mean task runtime, µs.
    pub mean_task_runtime_us: f64,
    /// Estimated total job size (mean task runtime × tasks, or the sum over
    /// DAG stages), µs of task time: what GS orders jobs by.
    pub size_us: f64,
    /// Spread of the estimate: the standard deviation of ln(mean task
    /// runtime) it implies (0 when exact).
    pub log_sd: f64,
    pub source: EstimateSource,
}

/// Which part of a policy's life cycle a decision belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// A thin job sent straight to the top queue.
    ThinBypass,
    /// Pilot tasks are running in the sampling queue; the others wait.
    Sampling,
    /// Placed by its estimated size.
    Estimated,
    /// Arrival order (FIFO): one queue, no estimate.
    Arrival,
    /// Least attained service: the scheduler moves the job down the queues
    /// as its attained service (total task time so far) crosses their
    /// thresholds.
    AttainedService,
}

/// A scheduling decision for one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    pub job_id: u64,
    /// Increases with every new decision for the job, so that eventually
    /// consistent consumers can drop stale ones.
    pub version: u32,
    pub queue: u8,
    pub phase: Phase,
    pub estimate: Option<Estimate>,
    pub policy: PolicyKind,
    /// Task indices to run first, while sampling.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pilots: Vec<u32>,
}
