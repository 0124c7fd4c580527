//! The runtime predictors an HPC workload is measured with, behind one
//! type: jobcast's ([`Runtimes`]), Last-2 ([`Last2`]) and the user's own
//! request. Each predicts a job at its submission and learns it when it
//! ends.

use jobcast_ingest::event::JobSubmitted;
use jobcast_predictor::decision::Quantiles;
use jobcast_predictor::hpc::backfill::Told;
use jobcast_predictor::hpc::last2::Last2;
use jobcast_predictor::hpc::runtimes::{self, Runtimes};

/// One predictor and what it has learnt.
#[derive(Debug, Clone)]
pub enum Predictor {
    Jobcast(Runtimes),
    Last2(Last2),
    Request,
}

/// What a predictor said of one job, kept until the job ends.
#[derive(Debug, Clone, Copy)]
pub struct Said {
    /// The runtime, µs; `None` when the predictor knows nothing (no
    /// history and no request).
    pub point_us: Option<f64>,
    /// Its quantiles, for predictors with them.
    pub quantiles_us: Option<Quantiles>,
    pending: Option<runtimes::Pending>,
}

impl Said {
    /// What the scheduler is told of the job, whose request is
    /// `request_us`: the predictor's median where it has quantiles (the
    /// point may lean long on purpose: jobcast's takes the longer of two
    /// runs, and a backfill decision wants the likeliest end), then its
    /// P90, P95 and P99; else its point; else the request. At least a
    /// second, and at most the request.
    pub fn told(&self, request_us: Option<u64>) -> Told {
        let request = request_us.unwrap_or(u64::MAX);
        let us = |v: f64| (v.round() as u64).clamp(1_000_000.min(request), request);
        let predicted_us = self
            .quantiles_us
            .map(|q| q.p50)
            .or(self.point_us)
            .map_or(request, us);
        Told {
            predicted_us,
            later_us: self
                .quantiles_us
                .map_or([predicted_us; 3], |q| [q.p90, q.p95, q.p99].map(us)),
            request_us,
        }
    }
}

impl Predictor {
    /// Every predictor, fresh, in report order.
    pub fn all() -> [Predictor; 3] {
        [
            Predictor::Jobcast(Runtimes::new()),
            Predictor::Last2(Last2::new()),
            Predictor::Request,
        ]
    }

    /// The predictor named `name` (as [`Self::name`] gives it).
    pub fn named(name: &str) -> Option<Predictor> {
        Self::all().into_iter().find(|p| p.name() == name)
    }

    pub fn name(&self) -> &'static str {
        match self {
            Predictor::Jobcast(_) => "jobcast",
            Predictor::Last2(_) => "last2",
            Predictor::Request => "user_estimate",
        }
    }

    /// `job`'s runtime, at its submission.
    pub fn predict(&self, job: &JobSubmitted) -> Said {
        match self {
            Predictor::Jobcast(r) => {
                let (prediction, pending) = r.predict(job);
                Said {
                    point_us: Some(prediction.point_us),
                    quantiles_us: Some(prediction.quantiles_us),
                    pending: Some(pending),
                }
            }
            Predictor::Last2(l) => Said {
                point_us: l.predict(&job.user, job.time_limit_us),
                quantiles_us: None,
                pending: None,
            },
            Predictor::Request => Said {
                point_us: job.time_limit_us.map(|us| us as f64),
                quantiles_us: None,
                pending: None,
            },
        }
    }

    /// `job`, predicted as `said`, ended after running `runtime_us`.
    pub fn learn(&mut self, job: &JobSubmitted, said: Said, runtime_us: f64) {
        match self {
            Predictor::Jobcast(r) => {
                if let Some(pending) = said.pending {
                    r.learn(pending, runtime_us);
                }
            }
            Predictor::Last2(l) => l.learn(&job.user, runtime_us),
            Predictor::Request => {}
        }
    }
}
