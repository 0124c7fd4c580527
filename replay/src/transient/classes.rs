//! Short or long: the one thing CloudCoaster (like Eagle and Hawk before it)
//! needs to know of a job, and assumes it knows. jobcast is what knows it:
//! [`Jobcast`] classes a job by the 3Sigma history estimate of its mean
//! task runtime as it arrives, learning from every job that ends;
//! [`Oracle`] by the truth, for the cost of jobcast's mistakes.

use jobcast_predictor::features::JobFeatures;
use jobcast_predictor::history::{Estimator, History};
use jobcast_predictor::stats::percentile;

use crate::workload::SimJob;

/// How a job is placed, and the task runtime the central scheduler
/// counts for it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobClass {
    pub long: bool,
    /// The mean task runtime the class was decided by, µs.
    pub task_us: f64,
}

/// Decides each job's class as it arrives.
pub trait Classifier {
    /// The class of `job`, arriving at `now_us`.
    fn classify(&mut self, job: &SimJob, now_us: u64) -> JobClass;

    /// `job` ended at `now_us`.
    fn ended(&mut self, job: &SimJob, now_us: u64);

    /// What [`crate::transient::Run`] reports it as.
    fn name(&self) -> &'static str;
}

/// The truth: long iff the job's mean task runtime is above the cutoff.
pub struct Oracle {
    pub cutoff_us: f64,
}

impl Classifier for Oracle {
    fn classify(&mut self, job: &SimJob, _now_us: u64) -> JobClass {
        let task_us = job.mean_task_runtime_us();
        JobClass {
            long: task_us > self.cutoff_us,
            task_us,
        }
    }

    fn ended(&mut self, _job: &SimJob, _now_us: u64) {}

    fn name(&self) -> &'static str {
        "oracle"
    }
}

/// jobcast's 3Sigma estimate: long iff the history's estimate of the mean
/// task runtime is above the cutoff. The history learns from every job
/// that ends, as the service's does.
pub struct Jobcast {
    pub history: History,
    pub cutoff_us: f64,
}

impl Classifier for Jobcast {
    fn classify(&mut self, job: &SimJob, now_us: u64) -> JobClass {
        let estimate =
            self.history
                .estimate(&JobFeatures::of(job.job()), now_us, Estimator::Utility);
        JobClass {
            long: estimate.mean_task_runtime_us > self.cutoff_us,
            task_us: estimate.mean_task_runtime_us,
        }
    }

    fn ended(&mut self, job: &SimJob, now_us: u64) {
        job.observe_into(&mut self.history, now_us);
    }

    fn name(&self) -> &'static str {
        "jobcast"
    }
}

/// The default cutoff: the 90th percentile of the history jobs' mean task
/// runtimes, so that about a tenth of jobs are long, as in the traces
/// Hawk and Eagle divide (a few long jobs, most of the work).
pub fn default_cutoff_us(history_jobs: &[SimJob]) -> Option<f64> {
    let mut means: Vec<f64> = history_jobs
        .iter()
        .map(|j| j.mean_task_runtime_us())
        .collect();
    means.sort_by(f64::total_cmp);
    percentile(&means, 90.0)
}
