//! Learning in time: 3Sigma, Point-Est, 3SigmaTL, and 3Sigma-DAG and
//! Point-Est-DAG (§5.1.3, §6: "we similarly extended other baselines"). One decision per job, from the shared history at arrival.

use jobcast_ingest::event::JobSubmitted;

use super::dag::history_estimate;
use super::{estimated, is_thin, thin_bypass};
use crate::decision::{Decision, PolicyKind};
use crate::history::Estimator;
use crate::policies::{Context, Policy};
use serde::{Deserialize, Serialize};

/// A history-based policy. Stateless: it decides once, at arrival.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HistoryBased {
    kind: PolicyKind,
    estimator: Estimator,
    /// SLearn's thin-job bypass (3SigmaTL), with its thin limit.
    thin_limit: Option<u32>,
    /// Sum per-stage estimates for DAG jobs (3Sigma-DAG).
    per_stage: bool,
}

impl HistoryBased {
    /// 3Sigma: size = utility estimate of the mean task runtime × tasks.
    pub fn three_sigma() -> Self {
        HistoryBased {
            kind: PolicyKind::ThreeSigma,
            estimator: Estimator::Utility,
            thin_limit: None,
            per_stage: false,
        }
    }

    /// Point-Est: 3Sigma with the median for the utility estimate.
    pub fn point_est() -> Self {
        HistoryBased {
            kind: PolicyKind::PointEst,
            estimator: Estimator::Median,
            ..Self::three_sigma()
        }
    }

    /// 3SigmaTL: 3Sigma with thin jobs sent to the top queue, to isolate
    /// the effect of thin-job handling.
    pub fn three_sigma_tl(thin_limit: u32) -> Self {
        HistoryBased {
            kind: PolicyKind::ThreeSigmaTl,
            thin_limit: Some(thin_limit),
            ..Self::three_sigma()
        }
    }

    /// 3Sigma-DAG: the sum over stages of each stage's 3Sigma size.
    pub fn three_sigma_dag() -> Self {
        HistoryBased {
            kind: PolicyKind::ThreeSigmaDag,
            per_stage: true,
            ..Self::three_sigma()
        }
    }

    /// Point-Est-DAG: the sum over stages of each stage's Point-Est size.
    pub fn point_dag() -> Self {
        HistoryBased {
            kind: PolicyKind::PointDag,
            per_stage: true,
            ..Self::point_est()
        }
    }
}

impl Policy for HistoryBased {
    fn kind(&self) -> PolicyKind {
        self.kind
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        if self
            .thin_limit
            .is_some_and(|limit| is_thin(job.num_tasks, limit))
        {
            return thin_bypass(self.kind, job.job_id);
        }
        let est = history_estimate(job, ctx, self.estimator, self.per_stage);
        estimated(self.kind, job.job_id, 1, est, ctx)
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::decision::{EstimateSource, Phase};
    use crate::features::JobFeatures;

    #[test]
    fn three_sigma_and_point_est_size_jobs_from_history() {
        let kit = Kit::new();
        let mut history = kit.history();
        // Two similar jobs ran 10 s and 40 s per task.
        let template = job(0, 50);
        history.observe(&JobFeatures::of(&template), 1, 10.0 * S);
        history.observe(&JobFeatures::of(&template), 2, 40.0 * S);
        let ctx = kit.ctx(&history);

        // Utility (1/r²): ((10⁻² + 40⁻²)/2)^(−1/2) = 13.7199 s; × 50 tasks =
        // 686 s < 10⁹ µs → Q0.
        let d = HistoryBased::three_sigma().on_submit(&job(7, 50), &ctx);
        let e = d.estimate.unwrap();
        assert_eq!(
            (d.job_id, d.version, d.queue, d.phase),
            (7, 1, 0, Phase::Estimated)
        );
        assert_eq!(d.policy, PolicyKind::ThreeSigma);
        assert!((e.mean_task_runtime_us / S - 13.7199).abs() < 1e-3, "{e:?}");
        assert!((e.size_us / S - 685.99).abs() < 0.05, "{e:?}");
        assert!((e.log_sd - 4f64.ln() / 2f64.sqrt()).abs() < 1e-9);
        assert!(matches!(e.source, EstimateSource::History { .. }));
        assert!(d.pilots.is_empty());

        // Median 25 s × 50 = 1250 s ≥ 10⁹ µs → Q1.
        let d = HistoryBased::point_est().on_submit(&job(7, 50), &ctx);
        assert_eq!((d.queue, d.policy), (1, PolicyKind::PointEst));
        assert!((d.estimate.unwrap().size_us - 1250.0 * S).abs() < 1e-3);
    }

    #[test]
    fn three_sigma_places_thin_jobs_by_size_and_3sigma_tl_bypasses_them() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        // Empty history: the default 60 s per task; 2 × 60 s → Q0 by size.
        let d = HistoryBased::three_sigma().on_submit(&job(1, 2), &ctx);
        assert_eq!((d.queue, d.phase), (0, Phase::Estimated));
        assert_eq!(d.estimate.unwrap().source, EstimateSource::Fallback);
        assert_eq!(d.estimate.unwrap().size_us, 120.0 * S);

        let mut tl = HistoryBased::three_sigma_tl(3);
        let d = tl.on_submit(&job(1, 2), &ctx);
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 0, Phase::ThinBypass, None)
        );
        assert_eq!(d.policy, PolicyKind::ThreeSigmaTl);
        // A wide job: 3 × 60 s = 180 s → Q0; 100 × 60 s = 6000 s → Q1.
        let d = tl.on_submit(&job(2, 100), &ctx);
        assert_eq!((d.queue, d.phase), (1, Phase::Estimated));
        assert_eq!(tl.on_task_end(&finished(2, 0, 5), &ctx), None);
    }

    #[test]
    fn three_sigma_dag_sums_stage_estimates() {
        let kit = Kit::new();
        let mut history = kit.history();
        let dag = dag_job(3, &[(0, &[], 100), (1, &[0], 50), (2, &[1], 10)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 40.0), (2, 5.0)]);
        let ctx = kit.ctx(&history);
        // 10 s × 100 + 40 s × 50 + 5 s × 10 = 3050 s → Q1.
        let d = HistoryBased::three_sigma_dag().on_submit(&dag, &ctx);
        let e = d.estimate.unwrap();
        assert!((e.size_us / S - 3050.0).abs() < 1e-6, "{e:?}");
        assert!((e.mean_task_runtime_us / S - 3050.0 / 160.0).abs() < 1e-9);
        assert_eq!(
            (d.queue, d.phase, d.policy),
            (1, Phase::Estimated, PolicyKind::ThreeSigmaDag)
        );
        // Each stage's history has identical samples: no spread.
        assert!(e.log_sd.abs() < 1e-9, "{e:?}");
        let stages: Vec<(u32, f64)> = d.stages.iter().map(|s| (s.id, s.size_us / S)).collect();
        assert_eq!(stages, [(0, 1000.0), (1, 2000.0), (2, 50.0)]);

        // Stages that do not add up to the job: the job is sized as flat,
        // from the job-level history.
        let mut bad = dag.clone();
        bad.num_tasks = 170;
        let d = HistoryBased::three_sigma_dag().on_submit(&bad, &ctx);
        let flat = HistoryBased::three_sigma().on_submit(&bad, &ctx);
        assert_eq!(d.estimate, flat.estimate);
        assert!(d.stages.is_empty());
        assert!(
            (d.estimate.unwrap().size_us - 170.0 * flat.estimate.unwrap().mean_task_runtime_us)
                .abs()
                < 1e-6
        );
        // A flat job is sized as by 3Sigma.
        let flat = job(4, 10);
        assert_eq!(
            HistoryBased::three_sigma_dag()
                .on_submit(&flat, &ctx)
                .estimate,
            HistoryBased::three_sigma().on_submit(&flat, &ctx).estimate
        );
    }
}
