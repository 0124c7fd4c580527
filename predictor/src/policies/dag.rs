//! DAG jobs in the policies: a job's stages with their task ranges, the
//! per-stage history sum of the history-only DAG policies (3Sigma-DAG,
//! Point-Est-DAG), and the hybrid SLearn-DAG and Bayes-DAG share: root
//! stages sampled, later stages' history rescaled by what they showed
//! (§6). A job whose stage list cannot be trusted is treated as flat.

use jobcast_ingest::event::JobSubmitted;
use serde::{Deserialize, Serialize};

use super::Context;
use crate::decision::{Estimate, EstimateSource, StageEstimate};
use crate::features::JobFeatures;
use crate::history::Estimator;

/// One stage of a well-formed DAG job, with where its tasks are numbered.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct DagStage {
    pub(super) id: u32,
    pub(super) num_tasks: u32,
    pub(super) first_task: u32,
    pub(super) root: bool,
}

/// The stages of a DAG job with their task ranges, or `None` when the job
/// is flat or its stages cannot be trusted (none, or their task counts do
/// not add up to the job's): such jobs are treated as flat, so a malformed
/// stage list never puts a pilot on a task that does not exist.
pub(super) fn dag_stages(job: &JobSubmitted) -> Option<Vec<DagStage>> {
    let stages = job.stages.as_ref()?;
    let total: u64 = stages.iter().map(|s| u64::from(s.num_tasks)).sum();
    if stages.is_empty() || job.num_tasks == 0 || total != u64::from(job.num_tasks) {
        return None;
    }
    let mut first_task = 0u32;
    Some(
        stages
            .iter()
            .map(|s| {
                let stage = DagStage {
                    id: s.id,
                    num_tasks: s.num_tasks,
                    first_task,
                    root: s.parents.is_empty(),
                };
                // Cannot overflow: the counts add up to `job.num_tasks`.
                first_task += s.num_tasks;
                stage
            })
            .collect(),
    )
}

/// The history estimate of a job (`per_stage = false` or a flat job) or
/// the sum of its stages' (`per_stage = true`, §6 3Sigma-DAG), with the
/// stages' own (none for a flat job).
///
/// For a sum, the spread is the delta-method sd of ln(Σ sizes) with the
/// stages independent, `sqrt(Σ (sizeᵢ/size)² log_sdᵢ²)`, and the source is
/// that of the stage contributing most to the size.
pub(super) fn history_estimate(
    job: &JobSubmitted,
    ctx: &Context<'_>,
    estimator: Estimator,
    per_stage: bool,
) -> (Estimate, Vec<StageEstimate>) {
    let stages = if per_stage { dag_stages(job) } else { None };
    let Some(stages) = stages else {
        let h = ctx
            .history
            .estimate(&JobFeatures::of(job), ctx.now_us, estimator);
        let estimate = Estimate::new(
            h.mean_task_runtime_us,
            h.mean_task_runtime_us * f64::from(job.num_tasks),
            h.log_sd,
            h.source,
        );
        return (estimate, Vec::new());
    };
    let parts: Vec<_> = stages
        .iter()
        .map(|s| {
            let h = ctx
                .history
                .estimate(&JobFeatures::of_stage(job, s.id), ctx.now_us, estimator);
            (stage_estimate(s, h.mean_task_runtime_us), h)
        })
        .collect();
    let size: f64 = parts.iter().map(|(s, _)| s.size_us).sum();
    let log_sd = if size > 0.0 {
        parts
            .iter()
            .map(|(s, h)| (s.size_us / size * h.log_sd).powi(2))
            .sum::<f64>()
            .sqrt()
    } else {
        parts.iter().map(|(_, h)| h.log_sd).fold(0.0, f64::max)
    };
    let source = parts
        .iter()
        .max_by(|a, b| a.0.size_us.total_cmp(&b.0.size_us))
        .map(|(_, h)| h.source)
        .unwrap_or(EstimateSource::Fallback);
    let estimate = Estimate::new(size / f64::from(job.num_tasks), size, log_sd, source);
    (estimate, parts.into_iter().map(|(s, _)| s).collect())
}

/// `stage` estimated at `mean_task_runtime_us` a task.
pub(super) fn stage_estimate(stage: &DagStage, mean_task_runtime_us: f64) -> StageEstimate {
    StageEstimate {
        id: stage.id,
        mean_task_runtime_us,
        size_us: mean_task_runtime_us * f64::from(stage.num_tasks),
    }
}

/// SLearn-DAG's hybrid (§6), shared with Bayes-DAG: what the 3Sigma
/// history said of each stage of a DAG job at its arrival, to be rescaled
/// once the root stages' tasks are known to run d_s on average: the root
/// stages then take d_s a task and every later stage its 3Sigma estimate
/// × d_s/d_h, d_h being 3Sigma's mean task runtime of the root stages.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Hybrid {
    /// Each stage's id, tasks and root flag, and its 3Sigma mean task
    /// runtime (µs), in the job's stage order.
    stages: Vec<(u32, u32, bool, f64)>,
    root_width: u32,
    /// d_h, µs.
    history_root_mean_us: f64,
}

impl Hybrid {
    /// The root stages' task ranges (where pilots are drawn) and the
    /// hybrid, for a well-formed DAG job whose root stages have tasks.
    pub(super) fn plan(job: &JobSubmitted, ctx: &Context<'_>) -> Option<(Vec<(u32, u32)>, Hybrid)> {
        let stages = dag_stages(job)?;
        let mut space = Vec::new();
        let (mut root_width, mut root_size) = (0u32, 0.0);
        let stages: Vec<_> = stages
            .iter()
            .map(|s| {
                let h = ctx.history.estimate(
                    &JobFeatures::of_stage(job, s.id),
                    ctx.now_us,
                    Estimator::Utility,
                );
                if s.root {
                    if s.num_tasks > 0 {
                        space.push((s.first_task, s.num_tasks));
                    }
                    root_width += s.num_tasks;
                    root_size += h.mean_task_runtime_us * f64::from(s.num_tasks);
                }
                (s.id, s.num_tasks, s.root, h.mean_task_runtime_us)
            })
            .collect();
        (root_width > 0).then(|| {
            let hybrid = Hybrid {
                stages,
                root_width,
                history_root_mean_us: root_size / f64::from(root_width),
            };
            (space, hybrid)
        })
    }

    /// Tasks in the root stages.
    pub(super) fn root_width(&self) -> u32 {
        self.root_width
    }

    /// d_h: 3Sigma's mean task runtime of the root stages, µs.
    pub(super) fn history_root_mean_us(&self) -> f64 {
        self.history_root_mean_us
    }

    /// The root stages' ids and tasks.
    pub(super) fn roots(&self) -> impl Iterator<Item = (u32, u32)> + '_ {
        self.stages
            .iter()
            .filter(|s| s.2 && s.1 > 0)
            .map(|&(id, tasks, _, _)| (id, tasks))
    }

    /// The job's size and its stages' estimates when the root stages'
    /// tasks run `root_mean_us` (d_s) on average. A degenerate d_h cannot
    /// be rescaled: the later stages keep their history estimates.
    pub(super) fn rescaled(&self, root_mean_us: f64) -> (f64, Vec<StageEstimate>) {
        let d_h = self.history_root_mean_us;
        let ratio = if d_h.is_finite() && d_h > 0.0 {
            root_mean_us / d_h
        } else {
            1.0
        };
        let stages: Vec<StageEstimate> = self
            .stages
            .iter()
            .map(|&(id, num_tasks, root, history_mean_us)| {
                let stage = DagStage {
                    id,
                    num_tasks,
                    first_task: 0,
                    root,
                };
                let mean = if root {
                    root_mean_us
                } else {
                    ratio * history_mean_us
                };
                stage_estimate(&stage, mean)
            })
            .collect();
        (stages.iter().map(|s| s.size_us).sum(), stages)
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;

    #[test]
    fn malformed_stages_make_a_flat_job() {
        let ok = dag_job(1, &[(0, &[], 2), (5, &[0], 3)]);
        let stages = dag_stages(&ok).unwrap();
        assert_eq!(
            stages
                .iter()
                .map(|s| (s.id, s.first_task, s.num_tasks, s.root))
                .collect::<Vec<_>>(),
            [(0, 0, 2, true), (5, 2, 3, false)]
        );
        let mut wrong_sum = ok.clone();
        wrong_sum.num_tasks = 4;
        assert_eq!(dag_stages(&wrong_sum), None);
        let mut empty = ok.clone();
        empty.stages = Some(Vec::new());
        assert_eq!(dag_stages(&empty), None);
        assert_eq!(dag_stages(&dag_job(2, &[(0, &[], 0)])), None);
        assert_eq!(dag_stages(&job(3, 5)), None);
        // Stage counts whose sum overflows u32 cannot match any width.
        let mut huge = dag_job(4, &[(0, &[], 1), (1, &[0], 1)]);
        huge.num_tasks = u32::MAX;
        if let Some(stages) = huge.stages.as_mut() {
            stages[0].num_tasks = u32::MAX;
        }
        assert_eq!(dag_stages(&huge), None);
    }

    #[test]
    fn the_hybrid_rescales_later_stages_and_its_stages_add_up() {
        let kit = Kit::new();
        let mut history = kit.history();
        // Roots 0 (10 tasks) and 2 (10 tasks), stage 1 (5 tasks) after 0.
        let dag = dag_job(4, &[(0, &[], 10), (1, &[0], 5), (2, &[], 10)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 100.0), (2, 30.0)]);
        let (space, hybrid) = Hybrid::plan(&dag, &kit.ctx(&history)).unwrap();
        assert_eq!(space, [(0, 10), (15, 10)]);
        assert_eq!(hybrid.root_width(), 20);
        assert_eq!(hybrid.roots().collect::<Vec<_>>(), [(0, 10), (2, 10)]);
        // d_h = 20 s; the roots ran 40 s: ratio 2.
        assert!((hybrid.history_root_mean_us() - 20.0 * S).abs() < 1e-6);
        let (size, stages) = hybrid.rescaled(40.0 * S);
        assert!((size - 1800.0 * S).abs() < 1e-6, "{size}");
        let means: Vec<(u32, f64)> = stages
            .iter()
            .map(|s| (s.id, s.mean_task_runtime_us / S))
            .collect();
        assert_eq!(means, [(0, 40.0), (1, 200.0), (2, 40.0)]);
        let sum: f64 = stages.iter().map(|s| s.size_us).sum();
        assert!((sum - size).abs() < 1e-6);

        // A flat job, or one without root tasks, has no hybrid.
        assert!(Hybrid::plan(&job(5, 10), &kit.ctx(&history)).is_none());
        let rootless = dag_job(6, &[(0, &[], 0), (1, &[0], 3)]);
        assert!(Hybrid::plan(&rootless, &kit.ctx(&history)).is_none());
    }

    #[test]
    fn the_history_sum_gives_each_stage_its_own_estimate() {
        let kit = Kit::new();
        let mut history = kit.history();
        let dag = dag_job(3, &[(0, &[], 100), (1, &[0], 50)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 40.0)]);
        let ctx = kit.ctx(&history);
        let (estimate, stages) = history_estimate(&dag, &ctx, Estimator::Utility, true);
        assert_eq!(stages.len(), 2);
        assert_eq!((stages[0].id, stages[1].id), (0, 1));
        assert!((stages[0].size_us - 1000.0 * S).abs() < 1e-6);
        assert!((stages[1].size_us - 2000.0 * S).abs() < 1e-6);
        assert!((estimate.size_us - 3000.0 * S).abs() < 1e-6);
        // Flat, or not per stage: no stages.
        assert!(
            history_estimate(&dag, &ctx, Estimator::Utility, false)
                .1
                .is_empty()
        );
        assert!(
            history_estimate(&job(4, 5), &ctx, Estimator::Utility, true)
                .1
                .is_empty()
        );
    }
}
