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
    #[serde(rename = "las-dag")]
    LasDag,
    #[serde(rename = "point-dag")]
    PointDag,
    #[serde(rename = "bayes-dag")]
    BayesDag,
    /// HPC jobs: the user's most similar recent jobs
    /// ([`crate::hpc::runtimes`]).
    #[serde(rename = "hpc")]
    Hpc,
}

impl PolicyKind {
    /// Every kind. A kind's index here is its tag in the store's binary
    /// layout (`engine/layout.rs`): new kinds are appended, never inserted.
    pub const ALL: [PolicyKind; 14] = [
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
        PolicyKind::LasDag,
        PolicyKind::PointDag,
        PolicyKind::BayesDag,
        PolicyKind::Hpc,
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
            PolicyKind::LasDag => "las-dag",
            PolicyKind::PointDag => "point-dag",
            PolicyKind::BayesDag => "bayes-dag",
            PolicyKind::Hpc => "hpc",
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

/// Durations are computed as `f64` µs (means, products, quantiles) but
/// written to JSON as whole µs: a fraction of a µs means nothing, and
/// integers are what every other time in a decision or a record is.
/// Binary encodings keep the `f64`; a reader takes either form.
pub mod whole_us {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    use super::Quantiles;

    /// `us` as a JSON integer where it is one (finite, from 0 to 2^64);
    /// as is otherwise, and in binary encodings.
    pub fn serialize<S: Serializer>(us: &f64, serializer: S) -> Result<S::Ok, S::Error> {
        // 2^64 as an f64: the first value past u64::MAX.
        const PAST_U64: f64 = 18_446_744_073_709_551_616.0;
        let whole = us.round();
        if serializer.is_human_readable() && (0.0..PAST_U64).contains(&whole) {
            serializer.serialize_u64(whole as u64)
        } else {
            serializer.serialize_f64(*us)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<f64, D::Error> {
        f64::deserialize(deserializer)
    }

    /// An optional duration, the same way.
    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(
            us: &Option<f64>,
            serializer: S,
        ) -> Result<S::Ok, S::Error> {
            match us {
                Some(us) => super::serialize(us, serializer),
                None => serializer.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Option<f64>, D::Error> {
            Option::<f64>::deserialize(deserializer)
        }
    }

    /// Quantiles of a duration, each the same way.
    pub mod quantiles {
        use super::*;

        #[derive(Serialize)]
        struct Whole {
            #[serde(serialize_with = "super::serialize")]
            p50: f64,
            #[serde(serialize_with = "super::serialize")]
            p90: f64,
            #[serde(serialize_with = "super::serialize")]
            p95: f64,
            #[serde(serialize_with = "super::serialize")]
            p99: f64,
        }

        pub fn serialize<S: Serializer>(q: &Quantiles, serializer: S) -> Result<S::Ok, S::Error> {
            let [p50, p90, p95, p99] = q.to_array();
            Whole { p50, p90, p95, p99 }.serialize(serializer)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(
            deserializer: D,
        ) -> Result<Quantiles, D::Error> {
            Quantiles::deserialize(deserializer)
        }
    }
}

/// One stage of a DAG job's estimate. A decision's stages add up to its
/// estimate's `size_us`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct StageEstimate {
    /// The stage's id, as in the job's `stages`.
    pub id: u32,
    /// Estimated mean runtime of the stage's tasks, µs.
    #[serde(with = "whole_us")]
    pub mean_task_runtime_us: f64,
    /// Its tasks' total, µs of task time.
    #[serde(with = "whole_us")]
    pub size_us: f64,
}

/// A runtime estimate.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// Estimated mean task runtime, µs.
    #[serde(with = "whole_us")]
    pub mean_task_runtime_us: f64,
    /// Estimated total job size (mean task runtime × tasks, or the sum over
    /// DAG stages), µs of task time: what GS orders jobs by.
    #[serde(with = "whole_us")]
    pub size_us: f64,
    /// Spread of the estimate: the standard deviation of ln(mean task
    /// runtime) it implies (0 when exact).
    pub log_sd: f64,
    pub source: EstimateSource,
    /// How large the job may truly be ([`crate::calibration`]). Absent
    /// only in decisions from before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantiles: Option<RuntimeQuantiles>,
}

impl Estimate {
    /// An estimate whose quantiles are, until calibration replaces them,
    /// log-normal around the point with the estimate's own spread.
    pub fn new(
        mean_task_runtime_us: f64,
        size_us: f64,
        log_sd: f64,
        source: EstimateSource,
    ) -> Self {
        let mut estimate = Estimate {
            mean_task_runtime_us,
            size_us,
            log_sd,
            source,
            quantiles: None,
        };
        estimate.set_quantiles(Quantiles::from_array(
            Quantiles::NORMAL_Z.map(|z| (z * log_sd).exp()),
        ));
        estimate
    }

    /// Set the quantiles from factors of the point estimate, one per
    /// level of [`Quantiles::LEVELS`]; the size's scale with the mean's.
    pub fn set_quantiles(&mut self, factors: Quantiles) {
        let (mean, size) = (self.mean_task_runtime_us, self.size_us);
        self.quantiles = Some(RuntimeQuantiles {
            mean_task_runtime_us: factors.map(|f| f * mean),
            size_us: factors.map(|f| f * size),
            capped: 0,
        });
    }

    /// Cap the quantiles of the mean task runtime at `horizon_us`, and
    /// the size's at the horizon times the job's tasks (size over mean), so
    /// that a level past what the service can know (a P99 of months on a
    /// trace of hours) reads as the horizon and is marked as such
    /// ([`RuntimeQuantiles::capped`]).
    pub fn cap_quantiles(&mut self, horizon_us: f64) {
        let tasks = if self.mean_task_runtime_us > 0.0 {
            self.size_us / self.mean_task_runtime_us
        } else {
            1.0
        };
        if let Some(q) = &mut self.quantiles {
            let over = q
                .mean_task_runtime_us
                .to_array()
                .iter()
                .filter(|&&v| v > horizon_us || v.is_nan())
                .count();
            q.capped = over as u8;
            q.mean_task_runtime_us = q.mean_task_runtime_us.map(|v| v.min(horizon_us));
            q.size_us = q.size_us.map(|v| v.min(horizon_us * tasks));
        }
    }
}

/// Quantiles of a job's true mean task runtime and of its true size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RuntimeQuantiles {
    #[serde(with = "whole_us::quantiles")]
    pub mean_task_runtime_us: Quantiles,
    #[serde(with = "whole_us::quantiles")]
    pub size_us: Quantiles,
    /// How many of the top levels were past the horizon
    /// (`engine.policies.quantile_horizon_secs`) and stand at it: they say
    /// only "longer than the horizon", and are no limit to run a job by.
    /// In JSON, the capped levels by name (`["p95", "p99"]`), absent when
    /// none is.
    #[serde(default, with = "capped_levels", skip_serializing_if = "is_zero")]
    pub capped: u8,
}

fn is_zero(n: &u8) -> bool {
    *n == 0
}

impl RuntimeQuantiles {
    /// Whether the level at `index` (into [`Quantiles::LEVELS`]) stands at
    /// the horizon.
    pub fn is_capped(&self, index: usize) -> bool {
        index + usize::from(self.capped) >= Quantiles::LEVELS.len()
    }
}

/// [`RuntimeQuantiles::capped`] as the names of the capped levels.
mod capped_levels {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use super::Quantiles;

    pub fn serialize<S: Serializer>(capped: &u8, serializer: S) -> Result<S::Ok, S::Error> {
        let n = Quantiles::NAMES.len();
        let from = n - usize::from(*capped).min(n);
        serializer.collect_seq(&Quantiles::NAMES[from..])
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u8, D::Error> {
        let names = Vec::<String>::deserialize(deserializer)?;
        let n = Quantiles::NAMES.len();
        if names.len() > n
            || names
                .iter()
                .zip(&Quantiles::NAMES[n - names.len()..])
                .any(|(a, b)| a != b)
        {
            return Err(D::Error::custom(format!(
                "capped levels must be the top ones of {:?}, got {names:?}",
                Quantiles::NAMES
            )));
        }
        Ok(names.len() as u8)
    }
}

/// The values at or below which a quantity lies with probability 0.5,
/// 0.9, 0.95 and 0.99.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Quantiles {
    pub p50: f64,
    pub p90: f64,
    pub p95: f64,
    pub p99: f64,
}

impl Quantiles {
    /// The levels, in field order.
    pub const LEVELS: [f64; 4] = [0.5, 0.9, 0.95, 0.99];
    /// Their names, as the fields are named.
    pub const NAMES: [&'static str; 4] = ["p50", "p90", "p95", "p99"];

    /// A level's index in [`Self::NAMES`] (`p99` is 3), or why `name` is
    /// none of them.
    pub fn index_of(name: &str) -> Result<usize, String> {
        Self::NAMES
            .iter()
            .position(|&n| n == name)
            .ok_or_else(|| format!("`{name}`: expected one of {}", Self::NAMES.join(", ")))
    }
    /// The standard normal distribution's quantiles at [`Self::LEVELS`].
    pub const NORMAL_Z: [f64; 4] = [
        0.0,
        1.281_551_565_544_600_4,
        1.644_853_626_951_472_2,
        2.326_347_874_040_840_8,
    ];

    pub fn from_array([p50, p90, p95, p99]: [f64; 4]) -> Self {
        Quantiles { p50, p90, p95, p99 }
    }

    pub fn to_array(self) -> [f64; 4] {
        [self.p50, self.p90, self.p95, self.p99]
    }

    pub fn map(self, f: impl FnMut(f64) -> f64) -> Self {
        Self::from_array(self.to_array().map(f))
    }
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

impl Phase {
    /// Every phase, in declaration order.
    pub const ALL: [Phase; 5] = [
        Phase::ThinBypass,
        Phase::Sampling,
        Phase::Estimated,
        Phase::Arrival,
        Phase::AttainedService,
    ];
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
    /// When the job should finish, given the queue state at this decision
    /// (set by the live engine, where it knows the cluster's capacity and
    /// the job's size or a guess at it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eta: Option<Completion>,
    /// A DAG job's estimate stage by stage, in the job's stage order (DAG
    /// policies; empty for flat jobs and decisions without an estimate).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stages: Vec<StageEstimate>,
    /// Where jobcast serves several clusters (events name their cluster):
    /// the job's predicted completion on each cluster with capacity, were
    /// it queued there now (its own cluster: as `eta`), by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<ClusterCompletion>,
    /// The cluster among `clusters` of the earliest median completion.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recommended_cluster: Option<String>,
    /// While the job is pending, when it should start (set by the live
    /// engine where `engine.starts` names the site's backfilling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<Start>,
}

/// A job's predicted completion on one cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterCompletion {
    pub cluster: String,
    pub eta: Completion,
}

impl Decision {
    /// `policy`'s decision `version` for a job, placing it in `queue` in
    /// `phase`, every other field empty (no estimate, pilots or ETA): a
    /// base for `Decision { field: …, ..Decision::new(…) }`.
    pub fn new(policy: PolicyKind, job_id: u64, version: u32, queue: u8, phase: Phase) -> Self {
        Decision {
            job_id,
            version,
            queue,
            phase,
            estimate: None,
            policy,
            pilots: Vec::new(),
            eta: None,
            stages: Vec::new(),
            clusters: Vec::new(),
            recommended_cluster: None,
            start: None,
        }
    }
}

/// A job's predicted completion, as event times (µs): the median and an
/// 80 % interval, predicted at `at_us` ([`crate::eta`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Completion {
    pub at_us: u64,
    pub p10_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
}

/// A pending job's start estimate, as event times (µs), given at `at_us`:
/// its site's backfilling played forward on every job's median runtime
/// (`p50_us`) and on every job's P90 (`p90_us`, the late end).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub at_us: u64,
    pub p50_us: u64,
    pub p90_us: u64,
}

/// The newest decision of each job, as a consumer of jobcast's decisions
/// keeps them: delivery is at least once, so a decision no newer than the
/// one held (a redelivery, or one overtaken) is dropped. A decision of the
/// held version is newer when its start estimate is: a waiting job's
/// refreshed start (`engine.starts.refresh_ms`), or none (the job no
/// longer fits: a refresh's last).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Newest {
    jobs: std::collections::BTreeMap<u64, Decision>,
}

impl Newest {
    /// Keep `decision` if it is newer than the job's held one; whether it
    /// was kept.
    pub fn offer(&mut self, decision: Decision) -> bool {
        match self.jobs.get(&decision.job_id) {
            Some(held) if Self::order(held) >= Self::order(&decision) => false,
            _ => {
                self.jobs.insert(decision.job_id, decision);
                true
            }
        }
    }

    /// How new `decision` is: its version, then its start's `at_us`; a
    /// refresh that found the start gone (its last) after any.
    fn order(decision: &Decision) -> (u32, u64) {
        (
            decision.version,
            decision.start.map_or(u64::MAX, |s| s.at_us),
        )
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
        Decision::new(PolicyKind::SLearn, job_id, version, queue, Phase::Estimated)
    }

    /// A waiting job's refreshed start goes out under the version held:
    /// it is newer when its start is later, or gone; a redelivery of
    /// either is not.
    #[test]
    fn a_refreshed_start_of_the_held_version_is_newer() {
        let at = |at_us| {
            Some(Start {
                at_us,
                p50_us: at_us + 10,
                p90_us: at_us + 20,
            })
        };
        let with = |start| Decision {
            start,
            ..decision(1, 2, 0)
        };
        let mut newest = Newest::default();
        assert!(newest.offer(with(at(100))));
        assert!(!newest.offer(with(at(100))));
        assert!(newest.offer(with(at(200))));
        assert!(!newest.offer(with(at(100))));
        assert!(newest.offer(with(None)));
        assert!(!newest.offer(with(at(200))));
        assert!(!newest.offer(with(None)));
        assert!(newest.offer(decision(1, 3, 0)));
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

    #[test]
    fn quantiles_past_the_horizon_stand_at_it_and_say_so() {
        // A 10-task job: mean 1 h, spread wide enough for a P99 of days.
        let mut estimate = Estimate::new(3.6e9, 3.6e10, 1.5, EstimateSource::Fallback);
        let before = estimate.quantiles.unwrap();
        let day_us = 86_400e6;
        assert!(before.mean_task_runtime_us.p99 > day_us);
        estimate.cap_quantiles(day_us);
        let q = estimate.quantiles.unwrap();
        assert_eq!(q.mean_task_runtime_us.p50, before.mean_task_runtime_us.p50);
        let capped: Vec<bool> = (0..4).map(|i| q.is_capped(i)).collect();
        let over: Vec<bool> = before
            .mean_task_runtime_us
            .to_array()
            .iter()
            .map(|&v| v > day_us)
            .collect();
        assert_eq!(capped, over);
        assert_eq!(q.mean_task_runtime_us.p99, day_us);
        assert!((q.size_us.p99 - 10.0 * day_us).abs() < 1.0);
        let json = serde_json::to_value(estimate).unwrap();
        let names: Vec<&str> = Quantiles::NAMES
            .iter()
            .zip(&over)
            .filter(|(_, o)| **o)
            .map(|(n, _)| *n)
            .collect();
        assert_eq!(json["quantiles"]["capped"], serde_json::json!(names));
        let back: Estimate = serde_json::from_value(json).unwrap();
        assert_eq!(back.quantiles.unwrap().capped, q.capped);
        // None capped: no field; a list that is not the top levels is refused.
        let plain = Estimate::new(3.6e9, 3.6e10, 0.1, EstimateSource::Fallback);
        let json = serde_json::to_value(plain).unwrap();
        assert!(json["quantiles"].get("capped").is_none(), "{json}");
        let mut bad = json.clone();
        bad["quantiles"]["capped"] = serde_json::json!(["p50"]);
        assert!(serde_json::from_value::<Estimate>(bad).is_err());
    }

    #[test]
    fn durations_are_written_to_json_as_whole_microseconds() {
        let estimate = Estimate::new(
            412_000_000.4,
            4.12e10 / 3.0,
            0.31,
            EstimateSource::Pilots { pilots: 3 },
        );
        let json = serde_json::to_value(estimate).unwrap();
        assert_eq!(json["mean_task_runtime_us"], 412_000_000u64);
        assert_eq!(json["size_us"], 13_733_333_333u64);
        let p99 = &json["quantiles"]["mean_task_runtime_us"]["p99"];
        assert!(p99.is_u64(), "{p99}");
        assert_eq!(json["log_sd"], 0.31, "not a duration: kept as is");
        // Read back, they are the same durations to the µs.
        let back: Estimate = serde_json::from_value(json).unwrap();
        assert_eq!(back.mean_task_runtime_us, 412_000_000.0);
        // A reader takes floats too, and a value past u64 stays a float.
        let old: Estimate = serde_json::from_str(
            r#"{"mean_task_runtime_us":1.5,"size_us":1e30,"log_sd":0.0,"source":{"kind":"truth"}}"#,
        )
        .unwrap();
        assert_eq!(old.mean_task_runtime_us, 1.5);
        assert_eq!(serde_json::to_value(old).unwrap()["size_us"], 1e30);
    }
}
