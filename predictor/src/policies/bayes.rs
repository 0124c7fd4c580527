//! Bayes: history as the prior, pilots as the evidence (the paper's §7,
//! "History-based learning can be used to establish a prior distribution,
//! and sampling-based approach can be used to refine the posterior"), with
//! as many pilots as the prior leaves uncertainty for.
//!
//! The model is §4.1's normal–normal model, in log space because runtimes
//! span orders of magnitude. Let λ = ln(the job's mean task runtime).
//!
//! **Prior.** From the history of similar jobs (median estimator: the prior
//! is a location in log space, which the utility estimate's deliberate pull
//! toward short runtimes would bias): λ ~ N(μ0, σo²) with μ0 = ln(median)
//! and σo built from the history's spread s of ln(mean task runtime) over
//! its n similar jobs, widened for small n in two ways:
//! - s itself is unreliable for few jobs, so it is pooled with the
//!   history's configured `default_log_sd` s0 as one pseudo-observation:
//!   s̃² = ((n − 1)s² + s0²) / n;
//! - μ0 is estimated from n jobs, so a new job deviates from it by the
//!   predictive spread σo² = s̃² (1 + 1/n).
//!
//! With n = 0 (no similar job at all) the prior is flat: precision 0.
//!
//! **Evidence.** k finished pilots with arithmetic mean x̄ (the quantity
//! SLearn estimates and history records): z = ln x̄, with z | λ ~
//! N(λ, σ1²/k), σ1 the task-wise sd of ln runtime (the delta method gives
//! Var(ln x̄) ≈ CV²/k ≈ σ1²/k). σ1 is the pilots' own sample sd when k ≥ 2,
//! else a running estimate learnt from earlier jobs' pilots, else the
//! configured `default_task_log_sd`.
//!
//! **Posterior.** Precision P = 1/σo² + k/σ1²; mean μ = (μ0/σo² + k z/σ1²)/P;
//! sd = P^(−1/2). The estimate is exp(μ) per task, with log_sd = sd.
//!
//! **How many pilots.** The smallest m with posterior sd ≤ τ (the target),
//! i.e. m = ⌈σ1² (1/τ² − 1/σo²)⌉ (σ1 as known before the job: learnt or
//! default), clamped to [0, ⌈5% × width⌉]. m = 0 when the prior is already
//! tight (σo ≤ τ): the job is placed by the prior at once.
//!
//! Thin jobs go to the top queue as in SLearn. DAG jobs are treated as flat
//! jobs of all their tasks. Failed pilots are replaced as in SLearn.

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::JobSubmitted;

use super::pilots::{PilotSet, PilotUpdate, log_stats, mean};
use super::{BayesConfig, PolicyConfig, decision, estimated, is_thin, thin_bypass};
use crate::decision::{Decision, Estimate, EstimateSource, Phase, PolicyKind};
use crate::features::JobFeatures;
use crate::history::{Estimator, HistoryEstimate};
use crate::policy::{Context, JobDone, Policy, TaskEnd};
use crate::queues::SAMPLING_QUEUE;
use serde::{Deserialize, Serialize};

/// Smallest spread used anywhere, so that identical samples give a very
/// confident, not an infinitely confident, belief.
const MIN_LOG_SD: f64 = 1e-3;

/// Weight of the newest job in the learnt task-wise variance once more
/// than 1/weight jobs taught it (a plain mean before), so it follows drift.
const TASK_SPREAD_SMOOTHING: f64 = 0.05;

/// A normal belief about λ = ln(mean task runtime µs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Belief {
    mean: f64,
    /// 1/variance; 0 for a flat prior.
    precision: f64,
}

impl Belief {
    /// The prior from a history estimate (module doc); `s0` is the
    /// history's default spread.
    fn prior(h: &HistoryEstimate, s0: f64) -> Belief {
        let mean = h.mean_task_runtime_us.max(1.0).ln();
        if h.samples == 0 {
            return Belief {
                mean,
                precision: 0.0,
            };
        }
        let n = h.samples as f64;
        let s = if h.log_sd.is_finite() { h.log_sd } else { s0 };
        let pooled = ((n - 1.0) * s * s + s0 * s0) / n;
        let var = (pooled * (1.0 + 1.0 / n)).max(MIN_LOG_SD * MIN_LOG_SD);
        Belief {
            mean,
            precision: 1.0 / var,
        }
    }

    /// The posterior after `k` pilots whose mean has log `z`.
    fn update(self, z: f64, k: u32, task_log_sd: f64) -> Belief {
        let evidence = f64::from(k) / (task_log_sd * task_log_sd);
        let precision = self.precision + evidence;
        Belief {
            mean: (self.precision * self.mean + evidence * z) / precision,
            precision,
        }
    }

    fn sd(self) -> f64 {
        1.0 / self.precision.sqrt()
    }
}

/// The smallest m with posterior sd ≤ `target`, at most `cap`.
fn pilots_needed(prior: Belief, task_log_sd: f64, target: f64, cap: u32) -> u32 {
    let needed = task_log_sd * task_log_sd * (1.0 / (target * target) - prior.precision);
    // The slack keeps 16.000…01 from asking for a 17th pilot.
    let m = (needed - 1e-9).ceil().max(0.0);
    (m as u32).min(cap)
}

/// ⌈fraction × width⌉, at most `width`.
fn pilot_cap(fraction: f64, width: u32) -> u32 {
    ((fraction * f64::from(width) - 1e-9).ceil().max(0.0) as u32).min(width)
}

/// The Bayesian policy.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bayes {
    thin_limit: u32,
    max_pilots: u32,
    seed: u64,
    config: BayesConfig,
    /// Learnt task-wise variance of ln runtime and the jobs it rests on.
    task_log_var: Option<(f64, u64)>,
    jobs: HashMap<u64, LiveJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LiveJob {
    version: u32,
    width: u32,
    prior: Belief,
    pilots: PilotSet,
}

impl Bayes {
    pub fn new(config: &PolicyConfig) -> Self {
        Bayes {
            thin_limit: config.thin_limit,
            max_pilots: config.max_pilots,
            seed: config.seed,
            config: config.bayes,
            task_log_var: None,
            jobs: HashMap::new(),
        }
    }

    /// σ1 known before a job's pilots: learnt, else the default.
    fn task_log_sd(&self) -> f64 {
        self.task_log_var
            .map_or(self.config.default_task_log_sd, |(var, _)| var.sqrt())
            .max(MIN_LOG_SD)
    }

    fn learn_task_spread(&mut self, var: f64) {
        let (old, n) = self.task_log_var.unwrap_or((var, 0));
        let n = n + 1;
        let w = (1.0 / n as f64).max(TASK_SPREAD_SMOOTHING);
        self.task_log_var = Some((old + w * (var - old), n));
    }
}

impl Policy for Bayes {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Bayes
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let width = job.num_tasks;
        if is_thin(width, self.thin_limit) {
            return thin_bypass(PolicyKind::Bayes, job.job_id);
        }
        let h = ctx
            .history
            .estimate(&JobFeatures::of(job), ctx.now_us, Estimator::Median);
        let prior = Belief::prior(&h, ctx.history.config().default_log_sd);
        let cap = pilot_cap(self.config.max_pilot_fraction, width).min(self.max_pilots);
        let m = pilots_needed(prior, self.task_log_sd(), self.config.target_log_sd, cap);
        if m == 0 {
            let est = Estimate::new(
                h.mean_task_runtime_us,
                h.mean_task_runtime_us * f64::from(width),
                prior.sd(),
                EstimateSource::Posterior { pilots: 0 },
            );
            return estimated(PolicyKind::Bayes, job.job_id, 1, est, ctx);
        }
        let pilots = PilotSet::new(self.seed, job.job_id, vec![(0, width)], m);
        let d = decision(
            PolicyKind::Bayes,
            job.job_id,
            1,
            SAMPLING_QUEUE,
            Phase::Sampling,
            None,
            pilots.pilots(),
        );
        self.jobs.insert(
            job.job_id,
            LiveJob {
                version: 1,
                width,
                prior,
                pilots,
            },
        );
        d
    }

    fn on_task_end(&mut self, end: &TaskEnd, ctx: &Context<'_>) -> Option<Decision> {
        let job = self.jobs.get_mut(&end.job_id)?;
        match job.pilots.on_task_end(end.task_index, end.runtime_us) {
            PilotUpdate::Unchanged => None,
            PilotUpdate::Replaced => {
                job.version = job.version.saturating_add(1);
                Some(decision(
                    PolicyKind::Bayes,
                    end.job_id,
                    job.version,
                    SAMPLING_QUEUE,
                    Phase::Sampling,
                    None,
                    job.pilots.pilots(),
                ))
            }
            PilotUpdate::Complete => {
                let runtimes = job.pilots.runtimes();
                if runtimes.is_empty() {
                    return None;
                }
                let k = runtimes.len() as u32;
                let z = mean(&runtimes).max(1.0).ln();
                let own_sd = log_stats(&runtimes).1;
                let (width, prior) = (job.width, job.prior);
                job.version = job.version.saturating_add(1);
                let version = job.version;
                let task_log_sd = match own_sd {
                    Some(sd) => {
                        self.learn_task_spread(sd * sd);
                        sd.max(MIN_LOG_SD)
                    }
                    None => self.task_log_sd(),
                };
                let post = prior.update(z, k, task_log_sd);
                let mean_task_runtime_us = post.mean.exp();
                let est = Estimate::new(
                    mean_task_runtime_us,
                    mean_task_runtime_us * f64::from(width),
                    post.sd(),
                    EstimateSource::Posterior { pilots: k },
                );
                Some(estimated(PolicyKind::Bayes, end.job_id, version, est, ctx))
            }
        }
    }

    fn on_job_done(&mut self, done: &JobDone, _ctx: &Context<'_>) {
        self.jobs.remove(&done.job_id);
    }

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

    fn end_us(job_id: u64, task_index: u32, runtime_us: u64) -> TaskEnd {
        TaskEnd {
            job_id,
            task_index,
            time_us: 0,
            runtime_us: Some(runtime_us),
        }
    }

    #[test]
    fn thin_jobs_bypass() {
        let kit = Kit::new();
        let history = kit.history();
        let mut b = Bayes::new(&PolicyConfig::default());
        let d = b.on_submit(&job(1, 2), &kit.ctx(&history));
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 0, Phase::ThinBypass, None)
        );
        assert_eq!(d.policy, PolicyKind::Bayes);
    }

    #[test]
    fn a_vague_prior_asks_for_pilots_up_to_the_cap() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default());
        // No history: flat prior; σ1 = 1, τ = 0.25: m = ⌈1/0.0625⌉ = 16.
        let d = b.on_submit(&job(1, 1000), &ctx);
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 1, Phase::Sampling, None)
        );
        assert_eq!(d.pilots.len(), 16);
        // 5% of 100 tasks caps it at 5; 5% of 3 rounds up to 1.
        assert_eq!(b.on_submit(&job(2, 100), &ctx).pilots.len(), 5);
        assert_eq!(b.on_submit(&job(3, 3), &ctx).pilots.len(), 1);
        // A failed pilot is replaced, as in SLearn.
        let p3 = b.jobs[&3].pilots.pilots()[0];
        let d = b.on_task_end(&failed(3, p3), &ctx).unwrap();
        assert_eq!(
            (d.version, d.phase, d.pilots.len()),
            (2, Phase::Sampling, 1)
        );
        assert_ne!(d.pilots[0], p3);
        for id in 1..=3 {
            b.on_job_done(&done(id, 1, 1.0), &ctx);
        }
        assert!(b.jobs.is_empty());
    }

    #[test]
    fn a_tight_prior_places_the_job_without_pilots() {
        let kit = Kit::new();
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 100));
        for i in 0..50u64 {
            let r = if i % 2 == 0 { 20.0 } else { 22.0 };
            history.observe(&f, i, r * S);
        }
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default());
        let d = b.on_submit(&job(1, 100), &ctx);
        // Median 21 s × 100 = 2100 s → Q1, at once.
        assert_eq!((d.version, d.queue, d.phase), (1, 1, Phase::Estimated));
        assert!(d.pilots.is_empty());
        let e = d.estimate.unwrap();
        assert!((e.mean_task_runtime_us - 21.0 * S).abs() < 1e-6);
        assert_eq!(e.source, EstimateSource::Posterior { pilots: 0 });
        // s² = 50 (ln 1.1 / 2)² / 49; s̃² = (49 s² + 1) / 50; σo² = s̃² × 1.02.
        let s2 = 50.0 * (1.1f64.ln() / 2.0).powi(2) / 49.0;
        let sigma_o = ((49.0 * s2 + 1.0) / 50.0 * 1.02).sqrt();
        assert!((e.log_sd - sigma_o).abs() < 1e-9, "{e:?}");
        assert!((sigma_o - 0.1507).abs() < 1e-4);
        assert!(b.jobs.is_empty(), "nothing to wait for");
    }

    #[test]
    fn the_posterior_matches_the_closed_form() {
        let kit = Kit::new();
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 1000));
        for (i, r) in [10.0, 10.0, 40.0, 40.0].into_iter().enumerate() {
            history.observe(&f, i as u64, r * S);
        }
        let ctx = kit.ctx(&history);
        // Prior: μ0 = ln 25 s; s² = 4 (ln 2)² / 3; s̃² = (3 s² + 1) / 4;
        // σo² = 1.25 s̃² = 0.913066. m = ⌈1 × (16 − 1/0.913066)⌉ = 15.
        let s2 = 4.0 * 2f64.ln().powi(2) / 3.0;
        let var_o = (3.0 * s2 + 1.0) / 4.0 * 1.25;
        assert!((var_o - 0.913_066).abs() < 1e-6);
        let mut b = Bayes::new(&PolicyConfig::default());
        let pilots = b.on_submit(&job(1, 1000), &ctx).pilots;
        assert_eq!(pilots.len(), 15);
        // Eight pilots take 50 s, seven 100 s.
        let mut last = None;
        for (i, &t) in pilots.iter().enumerate() {
            last = b.on_task_end(&finished(1, t, if i < 8 { 50 } else { 100 }), &ctx);
        }
        let d = last.unwrap();
        assert_eq!((d.version, d.phase), (2, Phase::Estimated));
        let e = d.estimate.unwrap();
        assert_eq!(e.source, EstimateSource::Posterior { pilots: 15 });

        let mu0 = (25.0 * S).ln();
        let z = ((8.0 * 50.0 + 7.0 * 100.0) / 15.0 * S).ln();
        let var1 = 2f64.ln().powi(2) * 840.0 / 225.0 / 14.0;
        let precision = 1.0 / var_o + 15.0 / var1;
        let mu = (mu0 / var_o + 15.0 * z / var1) / precision;
        assert!((e.mean_task_runtime_us.ln() - mu).abs() < 1e-9, "{e:?}");
        assert!((e.log_sd - precision.powf(-0.5)).abs() < 1e-9);
        assert!(
            mu0 < mu && mu < z,
            "between prior and sample: {mu0} {mu} {z}"
        );
        assert!((e.size_us - 1000.0 * mu.exp()).abs() < 1e-3);
        // 73.3 s × 1000 ≈ 7·10¹⁰ µs → Q2.
        assert_eq!(d.queue, 2);
    }

    #[test]
    fn the_task_spread_is_learnt_from_earlier_pilots() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default());
        let pilots = b.on_submit(&job(1, 1000), &ctx).pilots;
        assert_eq!(pilots.len(), 16);
        // ln runtimes ±c around ln 10 s, 8 each: sample variance 16c²/15 = 0.3.
        let c = (0.3f64 * 15.0 / 16.0).sqrt();
        for (i, &t) in pilots.iter().enumerate() {
            let sign = if i % 2 == 0 { 1.0 } else { -1.0 };
            let r = (10.0 * S * (sign * c).exp()).round() as u64;
            b.on_task_end(&end_us(1, t, r), &ctx);
        }
        let (var, n) = b.task_log_var.unwrap();
        assert!((var - 0.3).abs() < 1e-6 && n == 1, "{var} {n}");
        // Next job: m = ⌈0.3 × 16⌉ = 5.
        assert_eq!(b.on_submit(&job(2, 1000), &ctx).pilots.len(), 5);
        // One pilot (5% of 20): the learnt σ1 is the evidence's spread.
        let pilots = b.on_submit(&job(3, 20), &ctx).pilots;
        assert_eq!(pilots.len(), 1);
        let e = b
            .on_task_end(&finished(3, pilots[0], 10), &ctx)
            .unwrap()
            .estimate
            .unwrap();
        assert!(
            (e.mean_task_runtime_us - 10.0 * S).abs() < 1e-3,
            "flat prior: the sample"
        );
        assert!((e.log_sd - 0.3f64.sqrt()).abs() < 1e-6);
        assert_eq!(b.task_log_var.unwrap().1, 1, "one pilot teaches no spread");
    }

    #[test]
    fn pilot_numbers_by_hand() {
        let flat = Belief {
            mean: 0.0,
            precision: 0.0,
        };
        assert_eq!(pilots_needed(flat, 1.0, 0.25, 100), 16);
        assert_eq!(pilots_needed(flat, 1.0, 0.25, 7), 7);
        // σo = 0.5: 16 − 4 = 12.
        let prior = Belief {
            mean: 0.0,
            precision: 4.0,
        };
        assert_eq!(pilots_needed(prior, 1.0, 0.25, 100), 12);
        // σo = 0.25 exactly: no pilots.
        let tight = Belief {
            mean: 0.0,
            precision: 16.0,
        };
        assert_eq!(pilots_needed(tight, 1.0, 0.25, 100), 0);
        assert_eq!(pilot_cap(0.05, 100), 5);
        assert_eq!(pilot_cap(0.05, 101), 6);
        assert_eq!(pilot_cap(0.05, 1), 1);
        // Posterior of a flat prior is the evidence; of equal precisions,
        // the midpoint.
        let post = flat.update(2.0, 4, 1.0);
        assert_eq!((post.mean, post.sd()), (2.0, 0.5));
        let post = prior.update(2.0, 4, 1.0);
        assert_eq!((post.mean, post.precision), (1.0, 8.0));
    }
}
