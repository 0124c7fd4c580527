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

/// The newest decision of each job, as a consumer of jobcast's decisions
/// keeps them: delivery is at least once, so a decision no newer than the
/// one held (a redelivery, or one overtaken) is dropped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Newest {
    jobs: std::collections::BTreeMap<u64, Decision>,
}

impl Newest {
    /// Keep `decision` if it is newer than the job's held one; whether it
    /// was kept.
    pub fn offer(&mut self, decision: Decision) -> bool {
        match self.jobs.get(&decision.job_id) {
            Some(held) if held.version >= decision.version => false,
            _ => {
                self.jobs.insert(decision.job_id, decision);
                true
            }
        }
    }

    pub fn get(&self, job_id: u64) -> Option<&Decision> {
        self.jobs.get(&job_id)
    }

    pub fn iter(&self) -> impl Iterator<Item = &Decision> {
        self.jobs.values()
    }

    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Forget the jobs `keep` says no to (ended ones): the decisions held
    /// are bounded by the jobs alive.
    pub fn retain(&mut self, mut keep: impl FnMut(u64) -> bool) {
        self.jobs.retain(|&job_id, _| keep(job_id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(job_id: u64, version: u32, queue: u8) -> Decision {
        Decision {
            job_id,
            version,
            queue,
            phase: Phase::Estimated,
            estimate: None,
            policy: PolicyKind::SLearn,
            pilots: Vec::new(),
        }
    }

    #[test]
    fn the_newest_version_of_each_job_is_kept_whatever_the_order() {
        let mut newest = Newest::default();
        assert!(newest.offer(decision(1, 2, 5)));
        assert!(!newest.offer(decision(1, 1, 3)), "an older one is dropped");
        assert!(!newest.offer(decision(1, 2, 4)), "so is a redelivery");
        assert!(newest.offer(decision(2, 1, 0)));
        assert!(newest.offer(decision(1, 3, 2)));
        assert_eq!(newest.get(1).map(|d| (d.version, d.queue)), Some((3, 2)));
        newest.retain(|job| job != 1);
        assert_eq!(newest.len(), 1);
        assert!(newest.get(1).is_none());
    }
}
