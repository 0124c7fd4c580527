//! HPC sites' jobs (`hpc`): single parallel jobs, resubmitted by their
//! users with the same application, processors and requested time. Each
//! is sized once, at arrival, from the user's most similar recent jobs
//! ([`Similar`], the predictor `jobcast evaluate --format swf` measures
//! against Last-2 and the users' requests), its point capped by the
//! request, since the batch scheduler kills the job there. The quantiles
//! are calibrated by the wrapper every policy has.

use std::collections::BTreeMap;

use jobcast_ingest::event::JobSubmitted;
use serde::{Deserialize, Serialize};

use super::estimated;
use crate::decision::{Decision, Estimate, PolicyKind};
use crate::hpc::runtimes::{Keys, Similar};
use crate::policies::{Context, JobDone, Policy};

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Hpc {
    similar: Similar,
    /// Each live job's keys, to learn its runtime by when it ends.
    live: BTreeMap<u64, Keys>,
}

impl Hpc {
    pub fn new() -> Self {
        Hpc::default()
    }
}

impl Policy for Hpc {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Hpc
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let (estimate, _, keys) = self.similar.estimate(job);
        let cap = job.time_limit_us.map_or(f64::INFINITY, |us| us as f64);
        let point = estimate.mean_task_runtime_us.min(cap);
        let size = point * f64::from(job.num_tasks.max(1));
        let estimate = Estimate::new(point, size, estimate.log_sd, estimate.source);
        self.live.insert(job.job_id, keys);
        estimated(PolicyKind::Hpc, job.job_id, 1, (estimate, Vec::new()), ctx)
    }

    fn on_job_done(&mut self, done: &JobDone, _ctx: &Context<'_>) {
        if let Some(keys) = self.live.remove(&done.job_id)
            && done.mean_task_runtime_us.is_finite()
            && done.mean_task_runtime_us >= 0.0
        {
            self.similar.learn(&keys, done.mean_task_runtime_us);
        }
    }

    fn on_job_abandoned(&mut self, job_id: u64) {
        self.live.remove(&job_id);
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::decision::Phase;
    use crate::policies::{build, restore};

    fn hpc_job(job_id: u64, app: &str, request_s: u64) -> JobSubmitted {
        JobSubmitted {
            logical_name: app.into(),
            cpu_request: 16.0,
            time_limit_us: Some(request_s * 1_000_000),
            ..job(job_id, 1)
        }
    }

    fn ended(job_id: u64, secs: f64) -> JobDone {
        JobDone {
            mean_task_runtime_us: secs * S,
            ..done(job_id, 1, 1.0)
        }
    }

    /// The user's runs of one application teach the next one's estimate,
    /// once, at arrival; the request caps it; a restored policy decides
    /// as the one saved.
    #[test]
    fn an_hpc_job_is_sized_from_the_users_similar_jobs_and_capped_by_its_request() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut policy = build(PolicyKind::Hpc, &Default::default(), None).unwrap();
        // Nothing learnt yet: the request.
        let first = policy.on_submit(&hpc_job(1, "cfd", 3600), &ctx);
        assert_eq!(
            (first.phase, first.policy),
            (Phase::Estimated, PolicyKind::Hpc)
        );
        assert_eq!(first.estimate.unwrap().mean_task_runtime_us, 3600.0 * S);
        for (id, secs) in [(1, 600.0), (2, 900.0)] {
            if id > 1 {
                policy.on_submit(&hpc_job(id, "cfd", 3600), &ctx);
            }
            policy.on_job_done(&ended(id, secs), &ctx);
        }
        // The longer of the last two of the same application.
        let next = policy.on_submit(&hpc_job(3, "cfd", 3600), &ctx);
        assert_eq!(next.estimate.unwrap().mean_task_runtime_us, 900.0 * S);
        assert!(next.estimate.unwrap().quantiles.is_some());
        // Asking for less than that: the request.
        let short = policy.on_submit(&hpc_job(4, "cfd", 300), &ctx);
        assert_eq!(short.estimate.unwrap().mean_task_runtime_us, 300.0 * S);
        // A job abandoned teaches nothing.
        policy.on_job_abandoned(4);
        let restored = restore(PolicyKind::Hpc, &policy.snapshot()).unwrap();
        let mut restored = restored;
        let a = policy.on_submit(&hpc_job(5, "cfd", 3600), &ctx);
        let b = restored.on_submit(&hpc_job(5, "cfd", 3600), &ctx);
        assert_eq!(a, b);
    }
}
