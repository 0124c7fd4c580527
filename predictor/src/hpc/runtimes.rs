//! jobcast's runtime of an HPC job. HPC users resubmit the same work:
//! the same application, on as many processors, asking for the same time.
//! Last-2 ([`super::last2`]) exploits that through the user alone; this
//! predictor looks for the user's most similar recent jobs first, at
//! nested levels of similarity ([`Level`]), and picks, per job, the level
//! whose predictions have erred least so far (as 3Sigma picks a feature,
//! [`crate::history`]): the same value's own running error once it has
//! one, else its level's.
//!
//! At each level a job's key keeps its last [`KEPT`] runtimes; its
//! prediction is the longer of the last two, among jobs that resemble the
//! job more than the user's others do. The longer, not Last-2's mean: an
//! under-prediction costs a backfilling scheduler more than an
//! over-prediction (the job it let jump the queue delays the head), and on
//! the four Parallel Workloads Archive logs the longer is also the more
//! accurate (`docs/reproduction.md`, "HPC runtimes"). The requested time
//! is part of the keys and caps the point, since the scheduler kills a job
//! there. The quantiles are calibrated on the predictor's own misses
//! ([`Calibration`]), with the spread of the chosen key's runtimes as the
//! scale; they are not capped, since sites let jobs overrun their request
//! (7.3 % of HPC2N's completed jobs did).

use std::collections::{BTreeMap, VecDeque};

use jobcast_ingest::event::JobSubmitted;
use jobcast_ingest::ids::stable_id;
use serde::{Deserialize, Serialize};

use crate::calibration::{self, Calibration};
use crate::decision::{Estimate, EstimateSource, Quantiles};
use crate::features::FeatureKind;

/// Runtimes kept per key: the spread needs a few.
pub const KEPT: usize = 8;
/// Weight of the newest error in a running error.
const SMOOTHING: f64 = 0.2;
/// The spread assumed while a key has one runtime.
const DEFAULT_LOG_SD: f64 = 1.0;
/// The prediction for the site's first job, if it has no request.
const NO_REQUEST_US: f64 = 3_600e6;

/// How alike a job and its predecessors must be, most alike first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Level {
    /// The user's jobs of the same application, processors and request.
    UserAppProcsRequest,
    /// The user's jobs with the same request.
    UserRequest,
    /// The user's jobs of the same application.
    UserApp,
    /// The user's jobs.
    User,
    /// Anyone's jobs of the same application, processors and request.
    AppProcsRequest,
    /// The user's group's jobs with the same request.
    GroupRequest,
    /// Every job of the site.
    Site,
}

impl Level {
    pub const ALL: [Level; 7] = [
        Level::UserAppProcsRequest,
        Level::UserRequest,
        Level::UserApp,
        Level::User,
        Level::AppProcsRequest,
        Level::GroupRequest,
        Level::Site,
    ];

    /// `job`'s key at this level; `None` where the job lacks what it needs.
    fn key(self, job: &JobSubmitted) -> Option<u64> {
        let user = (!job.user.is_empty()).then_some(job.user.as_str());
        let group = (!job.group.is_empty()).then_some(job.group.as_str());
        let app = job.logical_name.as_str();
        let request = job.time_limit_us;
        let procs = job.cpu_request.to_bits();
        let mut bytes = vec![self as u8];
        let mut put = |s: &[u8]| {
            bytes.extend_from_slice(&(s.len() as u32).to_le_bytes());
            bytes.extend_from_slice(s);
        };
        match self {
            Level::UserAppProcsRequest => {
                put(user?.as_bytes());
                put(app.as_bytes());
                put(&procs.to_le_bytes());
                put(&request?.to_le_bytes());
            }
            Level::UserRequest => {
                put(user?.as_bytes());
                put(&request?.to_le_bytes());
            }
            Level::UserApp => {
                put(user?.as_bytes());
                put(app.as_bytes());
            }
            Level::User => put(user?.as_bytes()),
            Level::GroupRequest => {
                put(group?.as_bytes());
                put(&request?.to_le_bytes());
            }
            Level::AppProcsRequest => {
                put(app.as_bytes());
                put(&procs.to_le_bytes());
                put(&request?.to_le_bytes());
            }
            Level::Site => {}
        }
        Some(stable_id(&bytes))
    }
}

/// A running mean of |ln(predicted / actual)|.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
struct RunningError {
    mean: f64,
    count: u64,
}

impl RunningError {
    fn update(&mut self, error: f64) {
        self.mean = if self.count == 0 {
            error
        } else {
            self.mean + SMOOTHING * (error - self.mean)
        };
        self.count += 1;
    }
}

/// One key's recent runtimes and how its predictions have done.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Recent {
    runs: VecDeque<f64>,
    error: RunningError,
    /// When it last learnt, in jobs learnt ([`Similar::learnt`]).
    last: u64,
}

impl Recent {
    /// The longer of the last two runtimes.
    fn point(&self) -> Option<f64> {
        let mut newest = self.runs.iter().rev();
        let last = *newest.next()?;
        Some(newest.next().map_or(last, |before| last.max(*before)))
    }

    /// The sd of ln runtime over the kept runtimes.
    fn log_sd(&self) -> f64 {
        let n = self.runs.len();
        if n < 2 {
            return DEFAULT_LOG_SD;
        }
        let logs: Vec<f64> = self.runs.iter().map(|r| r.max(1.0).ln()).collect();
        let mean = logs.iter().sum::<f64>() / n as f64;
        (logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
    }
}

/// A job's predicted runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    pub point_us: f64,
    /// At [`Quantiles::LEVELS`].
    pub quantiles_us: Quantiles,
    /// The level it came from; `None`: no job had ended yet, and the
    /// prediction is the request (an hour without one).
    pub level: Option<Level>,
}

/// A job's key at every [`Level`] (`None` where it lacks what the level
/// needs): what the predictor needs back when the job ends.
pub type Keys = [Option<u64>; Level::ALL.len()];

/// What the predictor needs back when the job ends.
#[derive(Debug, Clone, Copy)]
pub struct Pending {
    keys: Keys,
    calibration: calibration::Pending,
}

/// The recent runtimes and errors of one site's jobs, and the calibration
/// of the quantiles on its own misses.
#[derive(Debug, Clone, Default)]
pub struct Runtimes {
    similar: Similar,
    calibration: Calibration,
}

impl Runtimes {
    pub fn new() -> Self {
        Runtimes::default()
    }

    /// Predict `job`'s runtime at its submission.
    pub fn predict(&self, job: &JobSubmitted) -> (Prediction, Pending) {
        let (mut estimate, level, keys) = self.similar.estimate(job);
        let point = estimate.mean_task_runtime_us;
        let calibration = self.calibration.calibrate(&mut estimate);
        let quantiles = estimate
            .quantiles
            .map_or(Quantiles::from_array([point; 4]), |q| {
                q.mean_task_runtime_us
            });
        let cap = job.time_limit_us.map_or(f64::INFINITY, |us| us as f64);
        (
            Prediction {
                point_us: point.min(cap),
                quantiles_us: quantiles,
                level,
            },
            Pending { keys, calibration },
        )
    }

    /// The job predicted with `pending` ended after running `runtime_us`.
    pub fn learn(&mut self, pending: Pending, runtime_us: f64) {
        if !(runtime_us.is_finite() && runtime_us >= 0.0) {
            return;
        }
        self.similar.learn(&pending.keys, runtime_us);
        self.calibration
            .learn(pending.calibration, runtime_us.max(1.0));
    }
}

/// Keys kept at most, over every level: past it, the tenth that learnt
/// least recently is forgotten, so that a service's memory and snapshot
/// stay bounded however many users, applications and requests its site
/// sees. A key costs about 200 bytes; the largest of the four shared logs
/// (SDSC-SP2) has 166,000 keys.
pub const MAX_KEYS: usize = 250_000;

/// The recent runtimes of each key at each level, and how each key and
/// level has erred: the predictor without its quantiles' calibration (the
/// service's policy has its own, as every policy does).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Similar {
    recent: BTreeMap<u64, Recent>,
    level_errors: [RunningError; Level::ALL.len()],
    /// Jobs learnt.
    learnt: u64,
    max_keys: usize,
}

impl Default for Similar {
    fn default() -> Self {
        Similar::keeping(MAX_KEYS)
    }
}

impl Similar {
    /// One that keeps at most `max_keys` keys (at least 10).
    pub fn keeping(max_keys: usize) -> Similar {
        Similar {
            recent: BTreeMap::new(),
            level_errors: Default::default(),
            learnt: 0,
            max_keys: max_keys.max(10),
        }
    }

    /// `job`'s estimate at its submission, uncalibrated and uncapped (its
    /// quantiles from the chosen key's spread); the level it came from
    /// (`None`: no job has ended yet, and it is the request, an hour
    /// without one); and its keys, to learn it by.
    pub fn estimate(&self, job: &JobSubmitted) -> (Estimate, Option<Level>, Keys) {
        let keys = Level::ALL.map(|level| level.key(job));
        let mut best: Option<(f64, usize, &Recent)> = None;
        for (i, key) in keys.iter().enumerate() {
            let Some(recent) = key.and_then(|k| self.recent.get(&k)) else {
                continue;
            };
            if recent.runs.is_empty() {
                continue;
            }
            let score = if recent.error.count > 0 {
                recent.error.mean
            } else if self.level_errors[i].count > 0 {
                self.level_errors[i].mean
            } else {
                f64::INFINITY
            };
            // On a tie (no errors yet anywhere) the more alike wins.
            if best.as_ref().is_none_or(|(s, _, _)| score < *s) {
                best = Some((score, i, recent));
            }
        }
        let (point, log_sd, level, source) = match best {
            Some((_, i, recent)) => (
                recent.point().expect("not empty"),
                recent.log_sd(),
                Some(Level::ALL[i]),
                EstimateSource::History {
                    feature: FeatureKind::User,
                },
            ),
            None => (
                job.time_limit_us.map_or(NO_REQUEST_US, |us| us as f64),
                DEFAULT_LOG_SD,
                None,
                EstimateSource::Fallback,
            ),
        };
        (Estimate::new(point, point, log_sd, source), level, keys)
    }

    /// The job of `keys` ended after running `runtime_us` (finite, at
    /// least 0): each key is scored on what it would have predicted, then
    /// learns the runtime.
    pub fn learn(&mut self, keys: &Keys, runtime_us: f64) {
        let actual = runtime_us.max(1.0);
        self.learnt += 1;
        for (i, key) in keys.iter().enumerate() {
            let Some(key) = *key else { continue };
            let recent = self.recent.entry(key).or_default();
            recent.last = self.learnt;
            if let Some(point) = recent.point() {
                let error = (point.max(1.0) / actual).ln().abs();
                recent.error.update(error);
                self.level_errors[i].update(error);
            }
            if recent.runs.len() == KEPT {
                recent.runs.pop_front();
            }
            recent.runs.push_back(runtime_us);
        }
        if self.recent.len() > self.max_keys {
            self.forget_least_recent();
        }
    }

    /// Forget the keys that learnt least recently, a tenth of the most
    /// kept: one pass over the keys every tenth of them, so a key costs
    /// O(1) amortised over the learning.
    fn forget_least_recent(&mut self) {
        let keep = self.max_keys - self.max_keys / 10;
        let mut lasts: Vec<u64> = self.recent.values().map(|r| r.last).collect();
        let cut = lasts.len() - keep;
        let (_, &mut bound, _) = lasts.select_nth_unstable(cut - 1);
        self.recent.retain(|_, r| r.last > bound);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u64, user: &str, app: &str, request_s: u64) -> JobSubmitted {
        let mut j = JobSubmitted::new(id, id * 1_000_000, 1);
        j.user = user.to_owned();
        j.logical_name = app.to_owned();
        j.cpu_request = 8.0;
        j.time_limit_us = Some(request_s * 1_000_000);
        j
    }

    /// A user alternating two applications, one of ten minutes and one of
    /// an hour, all asking for two hours: Last-2 averages the two, this
    /// predictor tells them apart; and its point never passes the request.
    #[test]
    fn the_most_alike_recent_jobs_predict_and_the_request_caps() {
        let mut r = Runtimes::new();
        for i in 0..40 {
            let (app, run) = if i % 2 == 0 {
                ("short", 600e6)
            } else {
                ("long", 3600e6)
            };
            let (_, pending) = r.predict(&job(i, "alice", app, 7200));
            r.learn(pending, run);
        }
        let (p, _) = r.predict(&job(100, "alice", "short", 7200));
        assert!((p.point_us - 600e6).abs() < 1e-3, "{p:?}");
        assert!(p.quantiles_us.p90 >= p.point_us, "{p:?}");
        let (p, _) = r.predict(&job(101, "alice", "long", 7200));
        assert!((p.point_us - 3600e6).abs() < 1e-3, "{p:?}");
        let (p, _) = r.predict(&job(102, "alice", "long", 60));
        assert_eq!(p.point_us, 60e6);
        // Nothing alike: the site's last two, capped.
        let (p, _) = r.predict(&job(103, "bob", "other", 600));
        assert_eq!((p.point_us, p.level), (600e6, Some(Level::Site)));
        let (p, _) = Runtimes::new().predict(&job(0, "bob", "other", 600));
        assert_eq!((p.point_us, p.level), (600e6, None));
    }

    /// A user new to the site, in a group whose members' jobs asking for
    /// two hours run ten minutes while the site's others run an hour: the
    /// group's jobs with the same request predict the newcomer's.
    #[test]
    fn a_newcomer_is_predicted_from_the_groups_jobs_with_the_same_request() {
        let mut r = Runtimes::new();
        let in_group = |mut j: JobSubmitted, group: &str| {
            j.group = group.to_owned();
            j
        };
        for i in 0..40 {
            let (j, run) = if i % 2 == 0 {
                (
                    in_group(job(i, &format!("chem{i}"), &format!("a{i}"), 7200), "chem"),
                    600e6,
                )
            } else {
                (
                    in_group(job(i, &format!("phys{i}"), &format!("a{i}"), 7200), "phys"),
                    3600e6,
                )
            };
            let (_, pending) = r.predict(&j);
            r.learn(pending, run);
        }
        let newcomer = in_group(job(100, "carol", "new", 7200), "chem");
        let (p, _) = r.predict(&newcomer);
        assert_eq!(p.level, Some(Level::GroupRequest), "{p:?}");
        assert!((p.point_us - 600e6).abs() < 1e-3, "{p:?}");
    }

    /// A site whose every job is a new user's: the keys stay within the
    /// bound, and the newest users' keys are the ones kept.
    #[test]
    fn keys_beyond_the_bound_forget_the_least_recently_learnt() {
        let mut similar = Similar::keeping(20);
        for i in 0..100 {
            // Twice each: a key that has erred (here not at all) is
            // trusted over the site's.
            for _ in 0..2 {
                let (_, _, keys) = similar.estimate(&job(i, &format!("user{i}"), "app", 600));
                similar.learn(&keys, 60e6);
                assert!(similar.recent.len() <= 20, "{} keys", similar.recent.len());
            }
        }
        let (_, level, _) = similar.estimate(&job(100, "user99", "app", 600));
        assert_eq!(level, Some(Level::UserAppProcsRequest));
        let (_, level, _) = similar.estimate(&job(101, "user0", "app", 600));
        assert_ne!(level, Some(Level::UserAppProcsRequest));
    }
}
