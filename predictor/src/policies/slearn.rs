//! Learning in space: SLearn (§5.1.2) and its hybrid for DAGs, SLearn-DAG
//! (§6).
//!
//! SLearn sends thin jobs to the top queue. A wide job goes to the sampling
//! queue with `max(1, ⌊ratio × width⌋)` random pilot tasks; when they have
//! all finished, the job's mean task runtime is their empirical mean, and
//! the job is placed by mean × width. The estimate's spread is the standard
//! error of the pilots' mean in log space, sd(ln runtime)/√m; with a single
//! pilot there is no sample spread and the history's configured
//! `default_log_sd` (the spread it assumes for fewer than two samples) is
//! used.
//!
//! SLearn-DAG samples the root stages (no parents) the same way, from their
//! task indices, and rescales history: with d_s the pilots' mean and d_h the
//! task-weighted history estimate of the root stages, every later stage's
//! history size is multiplied by d_s/d_h, and the job's size is the root
//! stages' sampled size plus the rescaled later sizes (`dag.rs`, `Hybrid`);
//! its decision carries each stage's estimate. Thin bypass looks at the
//! job's total width; flat jobs and jobs with malformed stages are handled
//! as by SLearn.

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::JobSubmitted;

use super::adaptive::AdaptiveRatio;
use super::dag::Hybrid;
use super::pilots::{PilotSet, PilotUpdate, log_stats, mean, pilot_count};
use super::{PolicyConfig, Sampling, estimated, is_thin, thin_bypass};
use crate::decision::{Decision, Estimate, EstimateSource, PolicyKind, StageEstimate};
use crate::policies::{Context, JobDone, Policy, TaskEnd};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
enum RatioRule {
    Fixed(f64),
    Adaptive(AdaptiveRatio),
}

/// SLearn, or SLearn-DAG.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SLearn {
    kind: PolicyKind,
    thin_limit: u32,
    max_pilots: u32,
    seed: u64,
    ratio: RatioRule,
    /// Wide jobs until they end: the adaptive ratio needs each job's
    /// ratio when its normalized JCT comes in.
    jobs: HashMap<u64, LiveJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LiveJob {
    version: u32,
    /// The adaptive ratio the job used, in percent.
    percent: Option<u8>,
    /// Present while the job is sampling.
    sampling: Option<JobSampling>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobSampling {
    pilots: PilotSet,
    width: u32,
    /// SLearn-DAG's history of the job's stages at its arrival.
    hybrid: Option<Hybrid>,
}

impl SLearn {
    /// SLearn (`dag = false`) or SLearn-DAG (`dag = true`).
    pub fn new(config: &PolicyConfig, dag: bool) -> Self {
        SLearn {
            kind: if dag {
                PolicyKind::SLearnDag
            } else {
                PolicyKind::SLearn
            },
            thin_limit: config.thin_limit,
            max_pilots: config.max_pilots,
            seed: config.seed,
            ratio: match config.sampling {
                Sampling::Adaptive { block } => RatioRule::Adaptive(AdaptiveRatio::new(block)),
                Sampling::Fixed { ratio } => RatioRule::Fixed(ratio),
            },
            jobs: HashMap::new(),
        }
    }
}

impl JobSampling {
    /// The estimate from the finished pilots, if any finished, with a
    /// DAG's stages.
    fn estimate(&self, single_pilot_log_sd: f64) -> Option<(Estimate, Vec<StageEstimate>)> {
        let runtimes = self.pilots.runtimes();
        if runtimes.is_empty() {
            return None;
        }
        let k = runtimes.len() as u32;
        let d_s = mean(&runtimes);
        let log_sd = log_stats(&runtimes)
            .1
            .map_or(single_pilot_log_sd, |sd| sd / f64::from(k).sqrt());
        let (size_us, stages) = match &self.hybrid {
            None => (d_s * f64::from(self.width), Vec::new()),
            Some(h) => h.rescaled(d_s),
        };
        let estimate = Estimate::new(
            size_us / f64::from(self.width),
            size_us,
            log_sd,
            EstimateSource::Pilots { pilots: k },
        );
        Some((estimate, stages))
    }
}

impl Policy for SLearn {
    fn kind(&self) -> PolicyKind {
        self.kind
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let width = job.num_tasks;
        if is_thin(width, self.thin_limit) {
            return thin_bypass(self.kind, job.job_id);
        }
        let (percent, ratio) = match &mut self.ratio {
            RatioRule::Fixed(r) => (None, *r),
            RatioRule::Adaptive(a) => {
                let p = a.next_percent();
                (Some(p), f64::from(p) / 100.0)
            }
        };
        let plan = if self.kind == PolicyKind::SLearnDag {
            Hybrid::plan(job, ctx)
        } else {
            None
        };
        let (space, hybrid) = match plan {
            Some((space, hybrid)) => (space, Some(hybrid)),
            None => (vec![(0, width)], None),
        };
        let sampled_width = hybrid.as_ref().map_or(width, Hybrid::root_width);
        let m = pilot_count(ratio, sampled_width).min(self.max_pilots);
        let pilots = PilotSet::new(self.seed, job.job_id, space, m);
        let d = super::sampling(self.kind, job.job_id, 1, &pilots, ctx);
        self.jobs.insert(
            job.job_id,
            LiveJob {
                version: 1,
                percent,
                sampling: Some(JobSampling {
                    pilots,
                    width,
                    hybrid,
                }),
            },
        );
        d
    }

    fn on_task_end(&mut self, end: &TaskEnd, ctx: &Context<'_>) -> Option<Decision> {
        let job = self.jobs.get_mut(&end.job_id)?;
        let sampling = job.sampling.as_mut()?;
        match sampling.pilots.on_task_end(end.task_index, end.runtime_us) {
            PilotUpdate::Unchanged => None,
            PilotUpdate::Replaced => {
                job.version = job.version.saturating_add(1);
                Some(super::sampling(
                    self.kind,
                    end.job_id,
                    job.version,
                    &sampling.pilots,
                    ctx,
                ))
            }
            PilotUpdate::Complete => {
                let est = sampling.estimate(ctx.history.config().default_log_sd)?;
                job.sampling = None;
                job.version = job.version.saturating_add(1);
                Some(estimated(self.kind, end.job_id, job.version, est, ctx))
            }
        }
    }

    fn on_job_done(&mut self, done: &JobDone, _ctx: &Context<'_>) {
        let Some(job) = self.jobs.remove(&done.job_id) else {
            return;
        };
        if let (Some(p), RatioRule::Adaptive(a)) = (job.percent, &mut self.ratio) {
            a.record(p, done.normalized_jct);
        }
    }

    /// An abandoned job says nothing about how well its sampling ratio
    /// did, so it is not scored.
    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }

    fn on_job_abandoned(&mut self, job_id: u64) {
        self.jobs.remove(&job_id);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::decision::Phase;

    fn fixed(ratio: f64) -> PolicyConfig {
        PolicyConfig {
            sampling: Sampling::Fixed { ratio },
            ..PolicyConfig::default()
        }
    }

    #[test]
    fn thin_jobs_bypass_and_wide_jobs_sample() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(0.03), false);
        let d = p.on_submit(&job(1, 2), &ctx);
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 0, Phase::ThinBypass, None)
        );
        assert!(d.pilots.is_empty());
        assert_eq!(p.on_task_end(&finished(1, 0, 5), &ctx), None);
        assert!(p.jobs.is_empty(), "thin jobs hold no state");

        let d = p.on_submit(&job(2, 100), &ctx);
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 1, Phase::Sampling, None)
        );
        assert_eq!(d.policy, PolicyKind::SLearn);
        assert_eq!(d.pilots.len(), 3);
        assert!(d.pilots.windows(2).all(|w| w[0] < w[1]));
        assert!(d.pilots.iter().all(|&t| t < 100));
        // 3% of 3 tasks floors to 0: one pilot.
        assert_eq!(p.on_submit(&job(3, 3), &ctx).pilots.len(), 1);
    }

    #[test]
    fn a_very_wide_job_gets_at_most_max_pilots() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let config = PolicyConfig {
            max_pilots: 1000,
            ..fixed(0.03)
        };
        let mut p = SLearn::new(&config, false);
        // 3% of 2^20 tasks would be 31,457 pilots.
        let d = p.on_submit(&job(1, 1 << 20), &ctx);
        assert_eq!(d.pilots.len(), 1000);
        assert!(d.pilots.iter().all(|&t| t < 1 << 20));
        // Below max_pilots / ratio the ratio alone decides.
        assert_eq!(p.on_submit(&job(2, 30_000), &ctx).pilots.len(), 900);
        // A replacement republishes the capped list, not a longer one.
        let lost = d.pilots[0];
        let replaced = p.on_task_end(&failed(1, lost), &ctx).unwrap();
        assert_eq!(replaced.pilots.len(), 1000);
        assert!(!replaced.pilots.contains(&lost));
        assert!(serde_json::to_vec(&replaced).unwrap().len() < 10_000);
    }

    #[test]
    fn the_estimate_is_the_pilots_empirical_mean() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(0.03), false);
        let pilots = p.on_submit(&job(2, 100), &ctx).pilots;
        let other = (0..100).find(|t| !pilots.contains(t)).unwrap();
        assert_eq!(
            p.on_task_end(&finished(2, other, 1), &ctx),
            None,
            "not a pilot"
        );
        assert_eq!(p.on_task_end(&finished(2, pilots[0], 100), &ctx), None);
        assert_eq!(p.on_task_end(&finished(2, pilots[1], 200), &ctx), None);
        let d = p.on_task_end(&finished(2, pilots[2], 300), &ctx).unwrap();
        // Mean 200 s × 100 tasks = 2·10¹⁰ µs → Q2.
        assert_eq!((d.version, d.queue, d.phase), (2, 2, Phase::Estimated));
        assert!(d.pilots.is_empty());
        let e = d.estimate.unwrap();
        assert_eq!(e.mean_task_runtime_us, 200.0 * S);
        assert_eq!(e.size_us, 2e10);
        assert_eq!(e.source, EstimateSource::Pilots { pilots: 3 });
        // sd of ln{100, 200, 300} = sd{0, ln 2, ln 3} = 0.55553; / √3.
        assert!((e.log_sd - 0.320_736).abs() < 1e-5, "{e:?}");
        // Later task ends change nothing; the job's end forgets it.
        assert_eq!(p.on_task_end(&finished(2, pilots[0], 100), &ctx), None);
        p.on_job_done(&done(2, 100, 1.5), &ctx);
        assert!(p.jobs.is_empty());
        assert_eq!(p.on_task_end(&finished(2, pilots[0], 100), &ctx), None);
        assert_eq!(
            p.on_task_end(&finished(99, 0, 100), &ctx),
            None,
            "unknown job"
        );
    }

    #[test]
    fn failed_pilots_are_replaced_by_fresh_tasks() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(0.2), false);
        let first = p.on_submit(&job(5, 10), &ctx).pilots;
        assert_eq!(first.len(), 2);
        let d = p.on_task_end(&failed(5, first[0]), &ctx).unwrap();
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (2, 1, Phase::Sampling, None)
        );
        assert_eq!(d.pilots.len(), 2);
        assert!(d.pilots.contains(&first[1]));
        assert!(!d.pilots.contains(&first[0]));
        // The replaced task's retry finishing is not a pilot result.
        assert_eq!(p.on_task_end(&finished(5, first[0], 1), &ctx), None);
        assert_eq!(p.on_task_end(&finished(5, d.pilots[0], 10), &ctx), None);
        let e = p.on_task_end(&finished(5, d.pilots[1], 30), &ctx).unwrap();
        assert_eq!(e.version, 3);
        assert_eq!(e.estimate.unwrap().mean_task_runtime_us, 20.0 * S);
    }

    #[test]
    fn with_no_task_left_to_try_the_finished_pilots_decide() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(1.0), false);
        // Every task is a pilot: a failure cannot be replaced.
        assert_eq!(p.on_submit(&job(6, 3), &ctx).pilots, [0, 1, 2]);
        assert_eq!(p.on_task_end(&failed(6, 1), &ctx), None);
        assert_eq!(p.on_task_end(&finished(6, 0, 10), &ctx), None);
        let d = p.on_task_end(&finished(6, 2, 20), &ctx).unwrap();
        assert_eq!(d.version, 2);
        let e = d.estimate.unwrap();
        assert_eq!(
            (e.mean_task_runtime_us, e.source),
            (15.0 * S, EstimateSource::Pilots { pilots: 2 })
        );

        // One finished, the others fail: estimate from the one, with the
        // history's default spread.
        p.on_submit(&job(7, 3), &ctx);
        assert_eq!(p.on_task_end(&finished(7, 2, 8), &ctx), None);
        assert_eq!(p.on_task_end(&failed(7, 0), &ctx), None);
        let d = p.on_task_end(&failed(7, 1), &ctx).unwrap();
        let e = d.estimate.unwrap();
        assert_eq!((e.mean_task_runtime_us, e.size_us), (8.0 * S, 24.0 * S));
        assert_eq!(e.log_sd, history.config().default_log_sd);

        // All fail: the last stays a pilot and its retry decides.
        p.on_submit(&job(8, 3), &ctx);
        assert_eq!(p.on_task_end(&failed(8, 0), &ctx), None);
        assert_eq!(p.on_task_end(&failed(8, 1), &ctx), None);
        assert_eq!(p.on_task_end(&failed(8, 2), &ctx), None);
        assert_eq!(p.on_task_end(&finished(8, 0, 5), &ctx), None, "dropped");
        let d = p.on_task_end(&finished(8, 2, 4), &ctx).unwrap();
        assert_eq!(d.estimate.unwrap().mean_task_runtime_us, 4.0 * S);
    }

    #[test]
    fn pilots_depend_only_on_seed_and_job() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let draw = |seed: u64, order: &[u64]| {
            let mut p = SLearn::new(&PolicyConfig { seed, ..fixed(0.1) }, false);
            let mut got: Vec<(u64, Vec<u32>)> = order
                .iter()
                .map(|&id| (id, p.on_submit(&job(id, 100), &ctx).pilots))
                .collect();
            got.sort();
            got
        };
        let forward = draw(7, &[1, 2, 3, 4]);
        assert_eq!(forward, draw(7, &[4, 2, 3, 1]));
        assert!(forward.iter().all(|(_, pilots)| pilots.len() == 10));
        // Distinct jobs get distinct draws; other seeds, other draws.
        assert_ne!(forward[0].1, forward[1].1);
        let other = draw(8, &[1, 2, 3, 4]);
        assert!(forward.iter().zip(&other).all(|(a, b)| a.1 != b.1));
    }

    #[test]
    fn the_adaptive_ratio_steps_through_startup_and_learns() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let config = PolicyConfig {
            sampling: Sampling::Adaptive { block: 1 },
            ..PolicyConfig::default()
        };
        let mut p = SLearn::new(&config, false);
        // Thin jobs are not counted: the wide ones get 3%, 2%, 4%.
        p.on_submit(&job(100, 1), &ctx);
        assert_eq!(p.on_submit(&job(1, 100), &ctx).pilots.len(), 3);
        assert_eq!(p.on_submit(&job(2, 100), &ctx).pilots.len(), 2);
        assert_eq!(p.on_submit(&job(3, 100), &ctx).pilots.len(), 4);
        // No job done yet: 3%.
        assert_eq!(p.on_submit(&job(4, 100), &ctx).pilots.len(), 3);
        p.on_job_done(&done(100, 1, 0.1), &ctx); // thin: no score
        p.on_job_done(&done(1, 100, 2.0), &ctx); // 3%
        p.on_job_done(&done(2, 100, 1.0), &ctx); // 2%
        p.on_job_done(&done(3, 100, 3.0), &ctx); // 4%
        // 2% is best and 1.1 × 1.0 < 2.0: 1%.
        assert_eq!(p.on_submit(&job(5, 100), &ctx).pilots.len(), 1);
        // Block 1 keeps only the last score per ratio: 3% becomes 0.5, the
        // best.
        p.on_job_done(&done(4, 100, 0.5), &ctx);
        assert_eq!(p.on_submit(&job(6, 100), &ctx).pilots.len(), 3);
        p.on_job_done(&done(5, 100, 9.0), &ctx);
        p.on_job_done(&done(6, 100, 9.0), &ctx);
        assert!(p.jobs.is_empty());
    }

    #[test]
    fn slearn_dag_rescales_later_stages_by_the_sampled_ratio() {
        let kit = Kit::new();
        let mut history = kit.history();
        let dag = dag_job(3, &[(0, &[], 100), (1, &[0], 50), (2, &[1], 10)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 40.0), (2, 5.0)]);
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(0.03), true);
        let d = p.on_submit(&dag, &ctx);
        assert_eq!(
            (d.queue, d.phase, d.policy),
            (1, Phase::Sampling, PolicyKind::SLearnDag)
        );
        assert!(d.stages.is_empty(), "no estimate yet");
        // 3% of the root stage's 100 tasks, all in the root stage.
        assert_eq!(d.pilots.len(), 3);
        assert!(d.pilots.iter().all(|&t| t < 100));
        for &t in &d.pilots[..2] {
            assert_eq!(p.on_task_end(&finished(3, t, 40), &ctx), None);
        }
        let d = p.on_task_end(&finished(3, d.pilots[2], 40), &ctx).unwrap();
        // d_s = 40 s, d_h = 10 s: ratio 4. Size = 40 × 100 + 4 × (40 × 50
        // + 5 × 10) = 12200 s = 1.22·10¹⁰ µs → Q2.
        let e = d.estimate.unwrap();
        assert!((e.size_us / S - 12_200.0).abs() < 1e-6, "{e:?}");
        assert!((e.mean_task_runtime_us / S - 12_200.0 / 160.0).abs() < 1e-9);
        assert_eq!((d.version, d.queue), (2, 2));
        assert_eq!(e.source, EstimateSource::Pilots { pilots: 3 });
        assert_eq!(e.log_sd, 0.0);
        // Each stage's own: the root's sampled 40 s, the later ones'
        // history × 4.
        let stages: Vec<(u32, f64, f64)> = d
            .stages
            .iter()
            .map(|s| (s.id, s.mean_task_runtime_us / S, s.size_us / S))
            .collect();
        assert_eq!(
            stages,
            [(0, 40.0, 4000.0), (1, 160.0, 8000.0), (2, 20.0, 200.0)]
        );
    }

    #[test]
    fn slearn_dag_samples_every_root_stage_and_bypasses_by_total_width() {
        let kit = Kit::new();
        let mut history = kit.history();
        // Roots 0 (tasks 0..10) and 2 (tasks 15..25); stage 1 (10..15)
        // depends on 0.
        let dag = dag_job(4, &[(0, &[], 10), (1, &[0], 5), (2, &[], 10)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 100.0), (2, 30.0)]);
        let ctx = kit.ctx(&history);
        let mut p = SLearn::new(&fixed(1.0), true);
        let d = p.on_submit(&dag, &ctx);
        let roots: Vec<u32> = (0..10).chain(15..25).collect();
        assert_eq!(d.pilots, roots);
        for &t in &roots[..19] {
            assert_eq!(p.on_task_end(&finished(4, t, 40), &ctx), None);
        }
        let d = p.on_task_end(&finished(4, roots[19], 40), &ctx).unwrap();
        // d_h = (10 × 10 + 30 × 10) / 20 = 20 s; d_s = 40 s: ratio 2.
        // Size = 40 × 20 + 2 × 100 × 5 = 1800 s.
        assert!((d.estimate.unwrap().size_us / S - 1800.0).abs() < 1e-6);

        // Two tasks in all: thin, even though each stage has one.
        let thin = dag_job(5, &[(0, &[], 1), (1, &[0], 1)]);
        assert_eq!(p.on_submit(&thin, &ctx).phase, Phase::ThinBypass);

        // Stages that do not add up: sampled as a flat job of num_tasks.
        let mut bad = dag_job(6, &[(0, &[], 2), (1, &[0], 2)]);
        bad.num_tasks = 6;
        assert_eq!(p.on_submit(&bad, &ctx).pilots, [0, 1, 2, 3, 4, 5]);
        for t in 0..6 {
            p.on_task_end(&finished(6, t, 7), &ctx);
        }
        assert!(p.jobs[&6].sampling.is_none());
    }
}
