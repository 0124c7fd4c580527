//! Policies that learn nothing (§5.1.3): LAS and FIFO, which need no size,
//! and the Oracle, which knows it.

use jobcast_ingest::event::JobSubmitted;

use super::dag::{dag_stages, history_estimate, stage_estimate};
use super::{OracleTruth, estimated};
use crate::decision::{Decision, Estimate, EstimateSource, Phase, PolicyKind, StageEstimate};
use crate::history::Estimator;
use crate::policies::{Context, JobDone, Policy};
use crate::queues::TOP_QUEUE;
use serde::{Deserialize, Serialize};

/// Least Attained Service: every job starts in the top queue; the scheduler
/// demotes it as its attained service (total task time) crosses the queue
/// thresholds, so the policy never decides again.
///
/// LAS-DAG (§6) counts the attained service of the whole DAG, which is
/// what the scheduler counts for any job: it is this policy under its own
/// name, so that Fig. 10's rows are each measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Las {
    kind: PolicyKind,
}

impl Las {
    pub fn flat() -> Self {
        Las {
            kind: PolicyKind::Las,
        }
    }

    pub fn dag() -> Self {
        Las {
            kind: PolicyKind::LasDag,
        }
    }
}

impl Policy for Las {
    fn kind(&self) -> PolicyKind {
        self.kind
    }

    fn on_submit(&mut self, job: &JobSubmitted, _ctx: &Context<'_>) -> Decision {
        Decision::new(self.kind, job.job_id, 1, TOP_QUEUE, Phase::AttainedService)
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }
}

/// FIFO: one queue, arrival order; starvation-free without queue levels.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fifo;

impl Policy for Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fifo
    }

    fn on_submit(&mut self, job: &JobSubmitted, _ctx: &Context<'_>) -> Decision {
        Decision::new(PolicyKind::Fifo, job.job_id, 1, 0, Phase::Arrival)
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }
}

/// The Oracle: places every job (thin ones too) by its true size, the true
/// mean task runtime × tasks, or for a DAG job whose every stage has a
/// truth, Σ stage mean × stage tasks. A job the truth does not know is
/// placed by 3Sigma's estimate (per stage for DAGs; its source says so) rather than
/// failing. A job's truth is dropped when the job ends.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Oracle {
    truth: OracleTruth,
}

impl Oracle {
    pub fn new(truth: OracleTruth) -> Self {
        Oracle { truth }
    }

    fn truth_estimate(&self, job: &JobSubmitted) -> Option<(Estimate, Vec<StageEstimate>)> {
        let truth = self.truth.get(job.job_id)?;
        let stages: Option<Vec<StageEstimate>> = dag_stages(job).and_then(|stages| {
            stages
                .iter()
                .map(|s| {
                    let mean = truth.stage_mean_task_runtime_us.get(&s.id)?;
                    Some(stage_estimate(s, *mean))
                })
                .collect()
        });
        let (mean_task_runtime_us, size_us, stages) = match stages {
            // Well-formed DAGs have tasks: the division is safe.
            Some(stages) => {
                let size: f64 = stages.iter().map(|s| s.size_us).sum();
                (size / f64::from(job.num_tasks), size, stages)
            }
            None => {
                let mean = truth.mean_task_runtime_us;
                (mean, mean * f64::from(job.num_tasks), Vec::new())
            }
        };
        let estimate = Estimate::new(mean_task_runtime_us, size_us, 0.0, EstimateSource::Truth);
        Some((estimate, stages))
    }
}

impl Policy for Oracle {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Oracle
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let est = self
            .truth_estimate(job)
            .unwrap_or_else(|| history_estimate(job, ctx, Estimator::Utility, true));
        estimated(PolicyKind::Oracle, job.job_id, 1, est, ctx)
    }

    fn on_job_done(&mut self, done: &JobDone, _ctx: &Context<'_>) {
        self.truth.remove(done.job_id);
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }

    fn on_job_abandoned(&mut self, job_id: u64) {
        self.truth.remove(job_id);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::{JobTruth, PolicyConfig, build};
    use super::*;

    #[test]
    fn las_and_fifo_need_no_estimate() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        for width in [0, 1, 1000] {
            for (mut las, kind) in [
                (Las::flat(), PolicyKind::Las),
                (Las::dag(), PolicyKind::LasDag),
            ] {
                let d = las.on_submit(&job(1, width), &ctx);
                assert_eq!(
                    (d.version, d.queue, d.phase, d.estimate),
                    (1, 0, Phase::AttainedService, None)
                );
                assert_eq!(d.policy, kind);
            }
            let d = Fifo.on_submit(&job(1, width), &ctx);
            assert_eq!(
                (d.version, d.queue, d.phase, d.estimate),
                (1, 0, Phase::Arrival, None)
            );
            assert_eq!(d.policy, PolicyKind::Fifo);
        }
        assert_eq!(Las::dag().on_task_end(&finished(1, 0, 1), &ctx), None);
        assert_eq!(Fifo.on_task_end(&failed(1, 0), &ctx), None);
    }

    #[test]
    fn the_oracle_places_jobs_by_their_true_size() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let dag = dag_job(3, &[(0, &[], 10), (1, &[0], 20)]);
        let truth: OracleTruth = [
            (1, JobTruth::new(5.0 * S)),
            (2, JobTruth::new(100.0 * S)),
            (
                3,
                JobTruth::new(0.0)
                    .with_stage(0, 10.0 * S)
                    .with_stage(1, 400.0 * S),
            ),
            (4, JobTruth::new(7.0 * S).with_stage(0, 1.0)),
        ]
        .into_iter()
        .collect();
        let mut o = build(PolicyKind::Oracle, &PolicyConfig::default(), Some(truth)).unwrap();
        // 5 s × 100 = 500 s → Q0.
        let d = o.on_submit(&job(1, 100), &ctx);
        let e = d.estimate.unwrap();
        assert_eq!((d.version, d.queue, d.phase), (1, 0, Phase::Estimated));
        assert_eq!(
            (e.size_us, e.mean_task_runtime_us, e.log_sd),
            (500.0 * S, 5.0 * S, 0.0)
        );
        assert_eq!(e.source, EstimateSource::Truth);
        // No thin bypass: 1 task of 100 s is sized too (Q0); 500 → Q2.
        assert_eq!(o.on_submit(&job(2, 1), &ctx).phase, Phase::Estimated);
        assert_eq!(o.on_submit(&job(2, 500), &ctx).queue, 2);
        // DAG: 10 s × 10 + 400 s × 20 = 8100 s → Q1.
        let d = o.on_submit(&dag, &ctx);
        let e = d.estimate.unwrap();
        assert_eq!(
            (e.size_us, e.mean_task_runtime_us, d.queue),
            (8100.0 * S, 270.0 * S, 1)
        );
        let stages: Vec<(u32, f64)> = d.stages.iter().map(|s| (s.id, s.size_us / S)).collect();
        assert_eq!(stages, [(0, 100.0), (1, 8000.0)]);
        // A DAG whose stages lack truths: the job's mean × tasks.
        let dag4 = dag_job(4, &[(0, &[], 10), (1, &[0], 20)]);
        let d = o.on_submit(&dag4, &ctx);
        assert_eq!(d.estimate.unwrap().size_us, 210.0 * S);
        assert!(d.stages.is_empty());
        // Unknown job: 3Sigma's estimate (empty history: 60 s per task).
        let e = o.on_submit(&job(9, 10), &ctx).estimate.unwrap();
        assert_eq!((e.size_us, e.source), (600.0 * S, EstimateSource::Fallback));
        // Ended jobs are forgotten.
        o.on_job_done(&done(1, 100, 1.0), &ctx);
        let e = o.on_submit(&job(1, 100), &ctx).estimate.unwrap();
        assert_eq!(e.source, EstimateSource::Fallback);
    }

    #[test]
    fn the_oracle_needs_the_truth() {
        let err = build(PolicyKind::Oracle, &PolicyConfig::default(), None)
            .err()
            .unwrap();
        assert!(err.to_string().contains("true runtimes"), "{err}");
    }
}
