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
//! **Learnt reliability.** The history's spread says how much similar
//! jobs varied, not how well they predict the next one (recurring jobs
//! change, §2). Each finished job with a prior scores it by
//! (ln truth − μ0)² / σo², which is 1 on average for an honest prior; once
//! 20 jobs have, σo² is scaled by the running mean of that score (each
//! score capped at 25, a weight of 5% per job so it follows change), kept
//! apart for thin and wide jobs, whose priors fare differently.
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
//! **Placement.** A job's GS queue is that of its expected size,
//! exp(μ + sd²/2) per task, not of the median it publishes: ordering by
//! expected size minimises the mean completion time of jobs known only in
//! distribution (Smith's rule), so a job the history barely knows waits
//! behind those it knows to be short. On the shared Google window this
//! left the mean JCT over six seeds where it was and brought the ETAs
//! closer (`docs/reproduction.md`).
//!
//! **How many pilots.** The smallest m with posterior sd ≤ τ (the target),
//! i.e. m = ⌈σ1² (1/τ² − 1/σo²)⌉ (σ1 as known before the job: learnt or
//! default). m = 0 when the prior is already tight (σo ≤ τ): the job is
//! placed by the prior at once, with no sampling delay, unless the few
//! pilots it would get anyway (`min_pilot_fraction` of its tasks) would
//! cut the sd by a quarter or more: where tasks vary less than even a
//! good history does, pilots running side by side cost little delay and
//! beat the prior (`PILOT_GAIN`). Otherwise m is
//! raised to `min_pilot_fraction` of the width (pilots run side by side,
//! so more of them cost little delay, and a learnt σ1 can be too
//! optimistic to trust one pilot) and capped at `max_pilot_fraction`, or
//! for a job too narrow for that fraction to give it what it needs, at
//! `narrow_pilots` and a quarter of its tasks: under 20 tasks, 5% is a
//! single pilot, whose error is the task-wise spread itself.
//!
//! **Drift guard.** History goes stale when the job's code or machines
//! change (§2). If the pilots' z lies more than k predictive sds from the
//! prior, |z − μ0| > k √(σo² + σ1²/m), the prior is dropped and the pilots
//! alone estimate the job. How far is too far depends on the workload: a
//! guard too eager throws sound priors away where tasks are noisy, one
//! too lax keeps stale ones. So k is learnt (`learn_drift`): every sampled
//! job with a prior remembers its distance and both estimates, with the
//! prior and without; once 20 such jobs have finished, k is the choice
//! among 0.5–5 sds and never that would have erred least (in log space)
//! over the last 500. `drift_sigmas` is k until then.
//!
//! **Thin jobs** (§7: "history-based learning can be used for estimating
//! the runtime for thin jobs, while sampling-based learning is used for
//! wide jobs") are placed by the prior when the history knows similar
//! jobs, and go to the top queue as in SLearn when it knows none, or
//! (`thin_prior_max_log_sd`) when the prior is too loose to say more
//! than the bypass: a thin job's few tasks cost the top queue little. Failed
//! pilots are replaced as in SLearn.
//!
//! **Bayes-DAG** is SLearn-DAG (§6) with the pilots' mean replaced by this
//! posterior: λ is the log mean task runtime of the root stages (those
//! without parents), whose prior is their history (per stage, medians
//! weighted by tasks, the variance the task-weighted mean of theirs,
//! resting on as many jobs as the root stage that knows fewest), and whose
//! pilots are drawn from their tasks. Every later stage's 3Sigma size is
//! rescaled by exp(λ)/d_h, d_h being 3Sigma's mean task runtime of the
//! root stages, as SLearn-DAG rescales it by d_s/d_h; so the whole job's
//! mean task runtime is exp(λ)·c with the constant
//! c = (Σ_root nᵢ + later 3Sigma size / d_h) / width: the model above
//! shifted by ln c, which is how the learnt reliability and the drift
//! guard compare it with the whole job's truth. Thin bypass looks at the
//! whole width; flat jobs and jobs with malformed stages are
//! handled as by Bayes.

use foldhash::{HashMap, HashMapExt};
use jobcast_ingest::event::JobSubmitted;

use super::dag::Hybrid;
use super::pilots::{PilotSet, PilotUpdate, log_stats, mean};
use super::{BayesConfig, PolicyConfig, estimated, is_thin, sampling, thin_bypass};
use crate::decision::{Decision, Estimate, EstimateSource, PolicyKind, StageEstimate};
use crate::features::JobFeatures;
use crate::history::{Estimator, HistoryEstimate};
use crate::policies::{Context, JobDone, Policy, TaskEnd};
use serde::{Deserialize, Serialize};

/// Smallest spread used anywhere, so that identical samples give a very
/// confident, not an infinitely confident, belief.
const MIN_LOG_SD: f64 = 1e-3;

/// Weight of the newest job in a learnt spread once more than 1/weight
/// jobs taught it (a plain mean before), so it follows drift.
const SMOOTHING: f64 = 0.05;

/// Pseudo-observations the learnt task-wise spread counts for beside a
/// job's own pilots (whose k pilots count k − 1).
const TASK_SPREAD_PRIOR_WEIGHT: f64 = 2.0;

/// Finished jobs the priors' learnt reliability needs before it is used.
const MIN_PRIOR_JOBS: u64 = 20;

/// A single job's squared prior error counts up to this many variances:
/// one job from a heavy tail must not discredit every prior.
const MAX_PRIOR_ERROR: f64 = 25.0;

/// The drift thresholds (predictive sds) the guard learns to choose from.
const DRIFT_CHOICES: [f64; 7] = [0.5, 1.0, 1.5, 2.0, 3.0, 5.0, f64::INFINITY];

/// Finished sampled jobs the learnt drift threshold looks back on.
const DRIFT_WINDOW: usize = 500;

/// A narrow job's pilots are at most 1/this of its tasks.
const NARROW_PILOT_SHARE: u32 = 4;

/// A tight prior is still sampled when its pilots would bring the sd to
/// this share of the prior's or below.
const PILOT_GAIN: f64 = 0.75;

/// Fold `x` into a learnt mean and the count of jobs it rests on.
fn learn(slot: &mut Option<(f64, u64)>, x: f64) {
    let (old, n) = slot.unwrap_or((x, 0));
    let n = n + 1;
    let w = (1.0 / n as f64).max(SMOOTHING);
    *slot = Some((old + w * (x - old), n));
}

/// A normal belief about λ = ln(mean task runtime µs).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Belief {
    mean: f64,
    /// 1/variance; 0 for a flat prior.
    precision: f64,
}

impl Belief {
    /// Knowing nothing.
    const FLAT: Belief = Belief {
        mean: 0.0,
        precision: 0.0,
    };

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

    /// How many predictive sds from this prior pilots whose mean has log
    /// `z` lie (0 from a flat prior, which nothing contradicts).
    fn distance(self, z: f64, k: u32, task_log_sd: f64) -> f64 {
        if self.precision == 0.0 {
            return 0.0;
        }
        let predictive_var = 1.0 / self.precision + task_log_sd * task_log_sd / f64::from(k);
        (z - self.mean).abs() / predictive_var.sqrt()
    }

    fn sd(self) -> f64 {
        1.0 / self.precision.sqrt()
    }
}

/// The decision that places a job by `est`'s expected size, not its
/// median: for a log-normal belief, E[size] = median · exp(σ²/2). GS
/// orders jobs shortest first, and for sizes known only in distribution
/// the order that minimises the mean completion time is by expected size
/// (Smith's rule). A job the history barely knows then waits behind the
/// jobs it knows to be short instead of holding them up with its long
/// tail; the estimate published stays the median.
fn placed(
    kind: PolicyKind,
    job_id: u64,
    version: u32,
    (est, stages): (Estimate, Vec<StageEstimate>),
    ctx: &Context<'_>,
) -> Decision {
    let mut d = estimated(kind, job_id, version, (est, stages), ctx);
    let expected = est.size_us * (est.log_sd * est.log_sd / 2.0).exp();
    if expected.is_finite() {
        d.queue = ctx.queues.queue_for(expected);
    }
    d
}

/// The smallest m with posterior sd ≤ `target`.
fn pilots_needed(prior: Belief, task_log_sd: f64, target: f64) -> u32 {
    let needed = task_log_sd * task_log_sd * (1.0 / (target * target) - prior.precision);
    // The slack keeps 16.000…01 from asking for a 17th pilot.
    (needed - 1e-9).ceil().clamp(0.0, f64::from(u32::MAX)) as u32
}

/// Whether `m` pilots of tasks with log sd `task_log_sd` would bring
/// `prior`'s sd to [`PILOT_GAIN`] of itself or below.
fn pilots_pay(prior: Belief, task_log_sd: f64, m: u32) -> bool {
    let posterior = prior.precision + f64::from(m) / (task_log_sd * task_log_sd);
    posterior > 0.0 && (prior.precision / posterior).sqrt() <= PILOT_GAIN
}

/// ⌈fraction × width⌉, at most `width`.
fn pilot_cap(fraction: f64, width: u32) -> u32 {
    ((fraction * f64::from(width) - 1e-9).ceil().max(0.0) as u32).min(width)
}

/// What a job is sampled and estimated as: its root stages for a DAG
/// under Bayes-DAG, the whole job otherwise (module doc).
struct Plan {
    /// Task ranges the pilots are drawn from.
    space: Vec<(u32, u32)>,
    /// Tasks in them.
    sampled_width: u32,
    /// The history of the sampled tasks' mean runtime: the prior.
    history: HistoryEstimate,
    /// A DAG's stages as SLearn-DAG rescales them.
    hybrid: Option<Hybrid>,
}

impl Plan {
    fn flat(job: &JobSubmitted, ctx: &Context<'_>) -> Plan {
        Plan {
            space: vec![(0, job.num_tasks)],
            sampled_width: job.num_tasks,
            history: ctx
                .history
                .estimate(&JobFeatures::of(job), ctx.now_us, Estimator::Median),
            hybrid: None,
        }
    }

    /// The root stages of a well-formed DAG job with root tasks and a
    /// usable history estimate of them; else `None`.
    fn dag(job: &JobSubmitted, ctx: &Context<'_>) -> Option<Plan> {
        let (space, hybrid) = Hybrid::plan(job, ctx)?;
        let roots: Vec<(f64, HistoryEstimate)> = hybrid
            .roots()
            .map(|(id, tasks)| {
                let features = JobFeatures::of_stage(job, id);
                let h = ctx
                    .history
                    .estimate(&features, ctx.now_us, Estimator::Median);
                (f64::from(tasks), h)
            })
            .collect();
        let n = f64::from(hybrid.root_width());
        let median = roots
            .iter()
            .map(|(w, h)| w * h.mean_task_runtime_us)
            .sum::<f64>()
            / n;
        let usable = |x: f64| x.is_finite() && x > 0.0;
        if !usable(median) || !usable(hybrid.history_root_mean_us()) {
            return None;
        }
        let log_var = roots
            .iter()
            .map(|(w, h)| w / n * h.log_sd * h.log_sd)
            .sum::<f64>();
        let largest = roots.iter().max_by(|a, b| a.0.total_cmp(&b.0))?;
        let history = HistoryEstimate {
            mean_task_runtime_us: median,
            log_sd: log_var.sqrt(),
            samples: roots.iter().map(|(_, h)| h.samples).min()?,
            source: largest.1.source,
        };
        Some(Plan {
            space,
            sampled_width: hybrid.root_width(),
            history,
            hybrid: Some(hybrid),
        })
    }
}

/// A job of `width` tasks whose sampled tasks run `mean_us` on average:
/// its mean task runtime, its size and a DAG's stages.
fn whole_job(hybrid: Option<&Hybrid>, width: u32, mean_us: f64) -> (f64, f64, Vec<StageEstimate>) {
    match hybrid {
        None => (mean_us, mean_us * f64::from(width), Vec::new()),
        Some(h) => {
            let (size, stages) = h.rescaled(mean_us);
            (size / f64::from(width), size, stages)
        }
    }
}

/// c: the whole job's mean task runtime per unit of its sampled tasks'.
fn scale(hybrid: Option<&Hybrid>, width: u32) -> f64 {
    whole_job(hybrid, width, 1.0).0
}

/// The Bayesian policy, or Bayes-DAG.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Bayes {
    kind: PolicyKind,
    thin_limit: u32,
    max_pilots: u32,
    seed: u64,
    config: BayesConfig,
    /// Learnt task-wise variance of ln runtime and the jobs it rests on.
    task_log_var: Option<(f64, u64)>,
    /// How far off the history's priors really were, for thin jobs and
    /// for wide ones (the same user's both kinds differ): the mean of
    /// (ln truth − μ0)² / σo² over finished jobs (1 for honest priors),
    /// and the jobs it rests on. Priors are widened (or narrowed) by it.
    prior_error: [Option<(f64, u64)>; 2],
    jobs: HashMap<u64, LiveJob>,
    /// The history's own prior of every live job that had one, and whether
    /// the job is wide, to learn `prior_error` from when the job ends.
    priors: HashMap<u64, (Belief, bool)>,
    /// Per live job placed by pilots against a prior: the pilots' distance
    /// from the prior and the posterior's mean with the prior and without.
    guarded: HashMap<u64, Guarded>,
    /// The same of recent finished jobs, as the distance and each mean's
    /// error (|ln estimate − ln truth|).
    drift_record: std::collections::VecDeque<(f64, f64, f64)>,
    /// The drift threshold in force (module doc).
    drift_sigmas: f64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
struct Guarded {
    distance: f64,
    with_prior: f64,
    alone: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct LiveJob {
    version: u32,
    width: u32,
    /// Of the sampled tasks' λ.
    prior: Belief,
    pilots: PilotSet,
    /// A DAG's stages as SLearn-DAG rescales them.
    hybrid: Option<Hybrid>,
}

impl Bayes {
    /// Bayes (`dag = false`) or Bayes-DAG (`dag = true`).
    pub fn new(config: &PolicyConfig, dag: bool) -> Self {
        Bayes {
            kind: if dag {
                PolicyKind::BayesDag
            } else {
                PolicyKind::Bayes
            },
            thin_limit: config.thin_limit,
            max_pilots: config.max_pilots,
            seed: config.seed,
            config: config.bayes,
            task_log_var: None,
            prior_error: [None; 2],
            jobs: HashMap::new(),
            priors: HashMap::new(),
            guarded: HashMap::new(),
            drift_record: std::collections::VecDeque::new(),
            drift_sigmas: config.bayes.drift_sigmas,
        }
    }

    /// The threshold among [`DRIFT_CHOICES`] that would have erred least
    /// over the recorded jobs (the lowest of equals).
    fn best_drift_sigmas(&self) -> f64 {
        let cost = |sigmas: f64| -> f64 {
            self.drift_record
                .iter()
                .map(|&(d, with, alone)| if d > sigmas { alone } else { with })
                .sum()
        };
        DRIFT_CHOICES
            .into_iter()
            .map(|k| (cost(k), k))
            .fold((f64::INFINITY, self.drift_sigmas), |best, c| {
                if c.0 < best.0 { c } else { best }
            })
            .1
    }

    /// σ1 known before a job's pilots: learnt, else the default.
    fn task_log_sd(&self) -> f64 {
        self.task_log_var
            .map_or(self.config.default_task_log_sd, |(var, _)| var.sqrt())
            .max(MIN_LOG_SD)
    }

    /// `prior` with its variance scaled by how wrong priors of thin or
    /// `wide` jobs have been.
    fn calibrated(&self, prior: Belief, wide: bool) -> Belief {
        match self.prior_error[usize::from(wide)] {
            Some((ratio, n)) if n >= MIN_PRIOR_JOBS => Belief {
                mean: prior.mean,
                precision: prior.precision / ratio.clamp(0.1, 100.0),
            },
            _ => prior,
        }
    }
}

impl Policy for Bayes {
    fn kind(&self) -> PolicyKind {
        self.kind
    }

    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let width = job.num_tasks;
        let plan = match self.kind {
            PolicyKind::BayesDag => Plan::dag(job, ctx),
            _ => None,
        }
        .unwrap_or_else(|| Plan::flat(job, ctx));
        let h = plan.history;
        let own = Belief::prior(&h, ctx.history.config().default_log_sd);
        let wide = !is_thin(width, self.thin_limit);
        if own.precision > 0.0 {
            // Learnt against the whole job's truth: shifted by ln c.
            let whole = Belief {
                mean: own.mean + scale(plan.hybrid.as_ref(), width).ln(),
                ..own
            };
            self.priors.insert(job.job_id, (whole, wide));
        }
        let prior = self.calibrated(own, wide);
        let by_prior = || {
            let (mean, size, stages) =
                whole_job(plan.hybrid.as_ref(), width, h.mean_task_runtime_us);
            let source = EstimateSource::Posterior { pilots: 0 };
            let est = Estimate::new(mean, size, prior.sd(), source);
            placed(self.kind, job.job_id, 1, (est, stages), ctx)
        };
        if !wide {
            let informative = self
                .config
                .thin_prior_max_log_sd
                .is_none_or(|max| prior.sd() <= max);
            return if h.samples > 0 && informative {
                by_prior()
            } else {
                thin_bypass(self.kind, job.job_id)
            };
        }
        let sampled = plan.sampled_width;
        let task_log_sd = self.task_log_sd();
        let needed = pilots_needed(prior, task_log_sd, self.config.target_log_sd);
        let floor = pilot_cap(self.config.min_pilot_fraction, sampled);
        if needed == 0 && !pilots_pay(prior, task_log_sd, floor.max(1)) {
            return by_prior();
        }
        let narrow = self.config.narrow_pilots.min(sampled / NARROW_PILOT_SHARE);
        let cap = pilot_cap(self.config.max_pilot_fraction, sampled)
            .max(narrow)
            .min(self.max_pilots);
        let m = needed.max(floor).min(cap).max(1);
        let pilots = PilotSet::new(self.seed, job.job_id, plan.space, m);
        let d = sampling(self.kind, job.job_id, 1, &pilots, ctx);
        self.jobs.insert(
            job.job_id,
            LiveJob {
                version: 1,
                width,
                prior,
                pilots,
                hybrid: plan.hybrid,
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
                Some(sampling(
                    self.kind,
                    end.job_id,
                    job.version,
                    &job.pilots,
                    ctx,
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
                let hybrid = job.hybrid.clone();
                let shift = scale(hybrid.as_ref(), width).ln();
                job.version = job.version.saturating_add(1);
                let version = job.version;
                let known = self.task_log_sd();
                let task_log_sd = match own_sd {
                    Some(sd) => {
                        learn(&mut self.task_log_var, sd * sd);
                        // A few pilots' spread is itself noisy: pooled
                        // with what earlier jobs taught.
                        let own = f64::from(k - 1);
                        let pooled = (own * sd * sd + TASK_SPREAD_PRIOR_WEIGHT * known * known)
                            / (own + TASK_SPREAD_PRIOR_WEIGHT);
                        pooled.sqrt().max(MIN_LOG_SD)
                    }
                    None => known,
                };
                let distance = prior.distance(z, k, task_log_sd);
                let with_prior = prior.update(z, k, task_log_sd);
                let alone = Belief::FLAT.update(z, k, task_log_sd);
                if prior.precision > 0.0 {
                    let guarded = Guarded {
                        distance,
                        with_prior: with_prior.mean + shift,
                        alone: alone.mean + shift,
                    };
                    self.guarded.insert(end.job_id, guarded);
                }
                let post = if distance > self.drift_sigmas {
                    alone
                } else {
                    with_prior
                };
                let (mean, size, stages) = whole_job(hybrid.as_ref(), width, post.mean.exp());
                let source = EstimateSource::Posterior { pilots: k };
                let est = Estimate::new(mean, size, post.sd(), source);
                Some(placed(self.kind, end.job_id, version, (est, stages), ctx))
            }
        }
    }

    fn on_job_done(&mut self, done: &JobDone, _ctx: &Context<'_>) {
        self.jobs.remove(&done.job_id);
        if let Some(g) = self.guarded.remove(&done.job_id)
            && done.mean_task_runtime_us > 0.0
        {
            let truth = done.mean_task_runtime_us.ln();
            if self.drift_record.len() == DRIFT_WINDOW {
                self.drift_record.pop_front();
            }
            self.drift_record.push_back((
                g.distance,
                (g.with_prior - truth).abs(),
                (g.alone - truth).abs(),
            ));
            if self.config.learn_drift && self.drift_record.len() as u64 >= MIN_PRIOR_JOBS {
                self.drift_sigmas = self.best_drift_sigmas();
            }
        }
        if let Some((prior, wide)) = self.priors.remove(&done.job_id)
            && done.mean_task_runtime_us > 0.0
        {
            let z = done.mean_task_runtime_us.ln() - prior.mean;
            let error = (z * z * prior.precision).min(MAX_PRIOR_ERROR);
            learn(&mut self.prior_error[usize::from(wide)], error);
        }
    }

    fn snapshot(&self) -> Vec<u8> {
        super::snapshot_of(self)
    }

    fn on_job_abandoned(&mut self, job_id: u64) {
        self.jobs.remove(&job_id);
        self.priors.remove(&job_id);
        self.guarded.remove(&job_id);
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::*;
    use crate::decision::Phase;

    /// A history that saw `n` jobs like `job(_, 100)`, their tasks taking
    /// `secs[0]` and `secs[1]` s in turn.
    fn alternating(kit: &Kit, n: u64, secs: [f64; 2]) -> crate::history::History {
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 100));
        for i in 0..n {
            history.observe(&f, i, secs[(i % 2) as usize] * S);
        }
        history
    }

    /// Submit job `id` of 100 tasks and finish its pilots, which take
    /// `secs` and twice that in turn: the estimate that placed it and the
    /// pilots' mean, µs.
    fn sample(b: &mut Bayes, ctx: &Context<'_>, id: u64, secs: u64) -> (f64, f64) {
        let pilots = b.on_submit(&job(id, 100), ctx).pilots;
        assert!(!pilots.is_empty());
        let (mut last, mut sum) = (None, 0);
        for (i, &t) in pilots.iter().enumerate() {
            let r = secs * (1 + i as u64 % 2);
            sum += r;
            last = b.on_task_end(&finished(id, t, r), ctx);
        }
        let mean = sum as f64 / pilots.len() as f64 * S;
        (last.unwrap().estimate.unwrap().mean_task_runtime_us, mean)
    }

    fn end_us(job_id: u64, task_index: u32, runtime_us: u64) -> TaskEnd {
        TaskEnd {
            job_id,
            task_index,
            time_us: 0,
            runtime_us: Some(runtime_us),
        }
    }

    #[test]
    fn jobs_are_placed_by_their_expected_size_and_publish_their_median() {
        let kit = Kit::new();
        let mut history = kit.history();
        // Two kinds of one-task job, told apart by user, name and hour:
        // one always takes 600 s, the other 150, 600 or 2400 s.
        let tight = JobSubmitted {
            user: "t".into(),
            job_name: "t".into(),
            ..job(1, 1)
        };
        let loose = JobSubmitted {
            user: "l".into(),
            job_name: "l".into(),
            time_us: 3_600_000_000,
            ..job(2, 1)
        };
        for i in 0..21u64 {
            history.observe(&JobFeatures::of(&tight), i, 600.0 * S);
            let secs = [150.0, 600.0, 2400.0][(i % 3) as usize];
            history.observe(&JobFeatures::of(&loose), i, secs * S);
        }
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        let (t, l) = (b.on_submit(&tight, &ctx), b.on_submit(&loose, &ctx));
        let (te, le) = (t.estimate.unwrap(), l.estimate.unwrap());
        // The same median, 600 s, under Q0's 1000 s...
        assert_eq!(te.mean_task_runtime_us, 600.0 * S);
        assert_eq!(le.mean_task_runtime_us, 600.0 * S);
        // ...but the loose kind's spread puts its mean above: it waits in
        // Q1 behind the jobs known to be short.
        let expected = |e: Estimate| e.size_us * (e.log_sd * e.log_sd / 2.0).exp();
        assert!(expected(te) < 1000.0 * S, "{te:?}");
        assert!(expected(le) > 1000.0 * S, "{le:?}");
        assert_eq!((t.queue, l.queue), (0, 1));
    }

    #[test]
    fn thin_jobs_bypass_without_history_and_follow_the_prior_with_it() {
        let kit = Kit::new();
        let mut history = kit.history();
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        let d = b.on_submit(&job(1, 2), &kit.ctx(&history));
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 0, Phase::ThinBypass, None)
        );
        assert_eq!(d.policy, PolicyKind::Bayes);
        // Similar jobs took 2000 s a task: two tasks belong in Q1, not at
        // the top.
        let f = JobFeatures::of(&job(0, 2));
        for i in 0..5u64 {
            history.observe(&f, i, 2000.0 * S);
        }
        let d = b.on_submit(&job(2, 2), &kit.ctx(&history));
        assert_eq!((d.version, d.queue, d.phase), (1, 1, Phase::Estimated));
        let e = d.estimate.unwrap();
        assert_eq!(e.source, EstimateSource::Posterior { pilots: 0 });
        assert!((e.size_us - 4000.0 * S).abs() < 1e-3, "{e:?}");
        assert!(b.jobs.is_empty(), "nothing to wait for");
    }

    #[test]
    fn a_thin_job_with_a_loose_prior_bypasses_when_so_configured() {
        let kit = Kit::new();
        let mut history = kit.history();
        // Similar jobs took 20 s and 2000 s a task: a loose prior.
        let f = JobFeatures::of(&job(0, 2));
        for i in 0..6u64 {
            history.observe(&f, i, [20.0, 2000.0][(i % 2) as usize] * S);
        }
        let ctx = kit.ctx(&history);
        let d = Bayes::new(&PolicyConfig::default(), false).on_submit(&job(1, 2), &ctx);
        assert_eq!(d.phase, Phase::Estimated);
        let sd = d.estimate.unwrap().log_sd;
        assert!(sd > 1.0, "{sd}");
        let bounded = |max: f64| PolicyConfig {
            bayes: BayesConfig {
                thin_prior_max_log_sd: Some(max),
                ..BayesConfig::default()
            },
            ..PolicyConfig::default()
        };
        let d = Bayes::new(&bounded(1.0), false).on_submit(&job(1, 2), &ctx);
        assert_eq!((d.queue, d.phase), (0, Phase::ThinBypass));
        let d = Bayes::new(&bounded(sd + 0.01), false).on_submit(&job(1, 2), &ctx);
        assert_eq!(d.phase, Phase::Estimated);
    }

    #[test]
    fn priors_that_proved_overconfident_are_widened() {
        let kit = Kit::new();
        let history = alternating(&kit, 50, [20.0, 22.0]);
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        // σo ≈ 0.15: tight enough to place jobs at once.
        let first = b.on_submit(&job(1, 100), &ctx);
        assert!(first.pilots.is_empty());
        let sigma_o = first.estimate.unwrap().log_sd;
        // Yet jobs keep ending 3 σo from it: the score is 9.
        for id in 1..=MIN_PRIOR_JOBS {
            if id > 1 {
                assert!(b.on_submit(&job(id, 100), &ctx).pilots.is_empty());
            }
            let truth = 21.0 * S * (3.0 * sigma_o).exp();
            let end = JobDone {
                mean_task_runtime_us: truth,
                ..done(id, 100, 1.0)
            };
            b.on_job_done(&end, &ctx);
        }
        assert_eq!(b.prior_error[0], None, "thin jobs' priors are apart");
        let (score, n) = b.prior_error[1].unwrap();
        assert!((score - 9.0).abs() < 1e-6 && n == MIN_PRIOR_JOBS, "{score}");
        assert!(b.priors.is_empty(), "dropped with their jobs");
        // Now σo counts 3× wider, 0.45 > τ: the next job is sampled.
        let d = b.on_submit(&job(99, 100), &ctx);
        assert_eq!(d.phase, Phase::Sampling);
        assert!(!d.pilots.is_empty());
    }

    #[test]
    fn pilots_far_from_a_drifted_prior_estimate_alone() {
        let kit = Kit::new();
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 100));
        // Similar jobs took 10 or 20 s a task: a prior too loose to skip
        // sampling, sure that tasks take seconds, not minutes.
        for i in 0..20u64 {
            history.observe(&f, i, if i % 2 == 0 { 10.0 } else { 20.0 } * S);
        }
        let ctx = kit.ctx(&history);
        let mut config = PolicyConfig::default();
        config.bayes.drift_sigmas = 3.0;
        config.bayes.learn_drift = false;
        let mut b = Bayes::new(&config, false);
        let run = |b: &mut Bayes, id: u64, secs: u64| sample(b, &ctx, id, secs);
        // Pilots near the prior are pulled toward it.
        let (near, mean) = run(&mut b, 1, 25);
        assert!(near < 0.95 * mean && near > 15.0 * S, "{near} {mean}");
        // The code changed: tasks now take 10 minutes. The prior is dropped.
        let (far, mean) = run(&mut b, 2, 600);
        assert!((far / mean - 1.0).abs() < 1e-9, "{far} {mean}");
        // Without the guard the stale prior drags it down.
        config.bayes.drift_sigmas = f64::INFINITY;
        let mut unguarded = Bayes::new(&config, false);
        let (dragged, mean) = run(&mut unguarded, 3, 600);
        assert!(dragged < 0.7 * mean, "{dragged} {mean}");
    }

    #[test]
    fn a_vague_prior_asks_for_pilots_up_to_the_cap() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        // No history: flat prior; σ1 = 1, τ = 0.25: m = ⌈1/0.0625⌉ = 16.
        let d = b.on_submit(&job(1, 500), &ctx);
        assert_eq!(
            (d.version, d.queue, d.phase, d.estimate),
            (1, 1, Phase::Sampling, None)
        );
        assert_eq!(d.pilots.len(), 16);
        // At least 3% of 1000 tasks; at most 5% of 100; 5% of 3 rounds up
        // to 1.
        assert_eq!(b.on_submit(&job(4, 1000), &ctx).pilots.len(), 30);
        assert_eq!(b.on_submit(&job(2, 100), &ctx).pilots.len(), 5);
        assert_eq!(b.on_submit(&job(3, 3), &ctx).pilots.len(), 1);
        // Narrow jobs, where 5% is one pilot: up to 3, a quarter of the
        // tasks at most; none of that with `narrow_pilots` 0.
        let pilots = |b: &mut Bayes, id, width| b.on_submit(&job(id, width), &ctx).pilots.len();
        assert_eq!(pilots(&mut b, 5, 8), 2);
        assert_eq!(pilots(&mut b, 6, 12), 3);
        assert_eq!(pilots(&mut b, 7, 40), 3);
        let mut config = PolicyConfig::default();
        config.bayes.narrow_pilots = 0;
        let mut one = Bayes::new(&config, false);
        assert_eq!(pilots(&mut one, 6, 12), 1);
        for id in 5..=7 {
            b.on_job_done(&done(id, 1, 1.0), &ctx);
        }
        // A failed pilot is replaced, as in SLearn.
        let p3 = b.jobs[&3].pilots.pilots()[0];
        let d = b.on_task_end(&failed(3, p3), &ctx).unwrap();
        assert_eq!(
            (d.version, d.phase, d.pilots.len()),
            (2, Phase::Sampling, 1)
        );
        assert_ne!(d.pilots[0], p3);
        for id in 1..=4 {
            b.on_job_done(&done(id, 1, 1.0), &ctx);
        }
        assert!(b.jobs.is_empty());
    }

    #[test]
    fn a_tight_prior_places_the_job_without_pilots_unless_pilots_would_be_far_tighter() {
        let kit = Kit::new();
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 100));
        for i in 0..50u64 {
            let r = if i % 2 == 0 { 20.0 } else { 22.0 };
            history.observe(&f, i, r * S);
        }
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), false);
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

        // Where earlier pilots found tasks within about 10 % of each
        // other, the 3 pilots of 3 % would leave σo at a third: sampled.
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        b.task_log_var = Some((0.01, 100));
        let d = b.on_submit(&job(1, 100), &ctx);
        assert_eq!((d.phase, d.pilots.len()), (Phase::Sampling, 3));
    }

    #[test]
    fn the_posterior_matches_the_closed_form() {
        let kit = Kit::new();
        let mut history = kit.history();
        let f = JobFeatures::of(&job(0, 500));
        for (i, r) in [10.0, 10.0, 40.0, 40.0].into_iter().enumerate() {
            history.observe(&f, i as u64, r * S);
        }
        let ctx = kit.ctx(&history);
        // Prior: μ0 = ln 25 s; s² = 4 (ln 2)² / 3; s̃² = (3 s² + 1) / 4;
        // σo² = 1.25 s̃² = 0.913066. m = ⌈1 × (16 − 1/0.913066)⌉ = 15.
        let s2 = 4.0 * 2f64.ln().powi(2) / 3.0;
        let var_o = (3.0 * s2 + 1.0) / 4.0 * 1.25;
        assert!((var_o - 0.913_066).abs() < 1e-6);
        // The guard set wide: this test is the update itself.
        let mut config = PolicyConfig::default();
        config.bayes.drift_sigmas = 3.0;
        let mut b = Bayes::new(&config, false);
        let pilots = b.on_submit(&job(1, 500), &ctx).pilots;
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
        // The pilots' own variance, pooled with the default σ1 = 1 as two
        // pseudo-observations beside their 14.
        let own = 2f64.ln().powi(2) * 840.0 / 225.0 / 14.0;
        let var1 = (14.0 * own + 2.0) / 16.0;
        let precision = 1.0 / var_o + 15.0 / var1;
        let mu = (mu0 / var_o + 15.0 * z / var1) / precision;
        assert!((e.mean_task_runtime_us.ln() - mu).abs() < 1e-9, "{e:?}");
        assert!((e.log_sd - precision.powf(-0.5)).abs() < 1e-9);
        assert!(
            mu0 < mu && mu < z,
            "between prior and sample: {mu0} {mu} {z}"
        );
        assert!((e.size_us - 500.0 * mu.exp()).abs() < 1e-3);
        // 73.3 s × 500 ≈ 3.7·10¹⁰ µs → Q2.
        assert_eq!(d.queue, 2);
    }

    #[test]
    fn the_task_spread_is_learnt_from_earlier_pilots() {
        let kit = Kit::new();
        let history = kit.history();
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), false);
        let pilots = b.on_submit(&job(1, 500), &ctx).pilots;
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
        assert_eq!(b.on_submit(&job(2, 150), &ctx).pilots.len(), 5);
        // One pilot (a quarter of 4): the learnt σ1 is the evidence's
        // spread.
        let pilots = b.on_submit(&job(3, 4), &ctx).pilots;
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
        assert_eq!(pilots_needed(flat, 1.0, 0.25), 16);
        // σo = 0.5: 16 − 4 = 12.
        let prior = Belief {
            mean: 0.0,
            precision: 4.0,
        };
        assert_eq!(pilots_needed(prior, 1.0, 0.25), 12);
        // σo = 0.25 exactly: no pilots.
        let tight = Belief {
            mean: 0.0,
            precision: 16.0,
        };
        assert_eq!(pilots_needed(tight, 1.0, 0.25), 0);
        // Three pilots of σ1 = 1 leave it at √(16/19) ≈ 0.92 of its sd; of
        // σ1 = 0.25, at √(16/64) = 0.5: worth running.
        assert!(!pilots_pay(tight, 1.0, 3));
        assert!(pilots_pay(tight, 0.25, 3));
        assert!(!pilots_pay(flat, 1.0, 0), "no pilots, no gain");
        assert_eq!(pilot_cap(0.05, 100), 5);
        assert_eq!(pilot_cap(0.05, 101), 6);
        assert_eq!(pilot_cap(0.05, 1), 1);
        // Posterior of a flat prior is the evidence; of equal precisions,
        // the midpoint.
        let post = flat.update(2.0, 4, 1.0);
        assert_eq!((post.mean, post.sd()), (2.0, 0.5));
        let post = prior.update(2.0, 4, 1.0);
        assert_eq!((post.mean, post.precision), (1.0, 8.0));
        // Drift: σo = 0.5 and 4 pilots of σ1 = 1 give a predictive sd of
        // √(0.25 + 0.25) ≈ 0.707.
        let sd = 0.5f64.sqrt();
        assert!((prior.distance(2.1, 4, 1.0) - 2.1 / sd).abs() < 1e-12);
        assert!((prior.distance(-2.2, 4, 1.0) - 2.2 / sd).abs() < 1e-12);
        assert_eq!(flat.distance(1e6, 1, 1.0), 0.0, "a flat prior never drifts");
    }

    #[test]
    fn the_drift_threshold_is_learnt_from_which_estimate_proved_right() {
        let kit = Kit::new();
        let history = alternating(&kit, 20, [10.0, 20.0]);
        let ctx = kit.ctx(&history);
        // The job, sampled, truly takes `truth` s a task.
        let run = |b: &mut Bayes, id: u64, secs: u64, truth: f64| {
            let placed = sample(b, &ctx, id, secs);
            let end = JobDone {
                mean_task_runtime_us: truth * S,
                ..done(id, 100, 1.0)
            };
            b.on_job_done(&end, &ctx);
            placed
        };
        let mut config = PolicyConfig::default();
        // However sure the prior proves, every job is sampled.
        config.bayes.target_log_sd = 0.01;
        // Noisy tasks, a sound prior: the pilots' mean lands far from it,
        // yet the jobs take what the history says. An eager guard throws
        // the prior away until the jobs show it should not.
        config.bayes.drift_sigmas = 0.5;
        let mut b = Bayes::new(&config, false);
        let as_history = |id: u64| if id.is_multiple_of(2) { 10.0 } else { 20.0 };
        let (first, mean) = run(&mut b, 1, 30, as_history(1));
        assert!((first / mean - 1.0).abs() < 1e-9, "dropped: {first} {mean}");
        for id in 2..=MIN_PRIOR_JOBS {
            run(&mut b, id, 30, as_history(id));
        }
        let distance = b.drift_record[0].0;
        assert!(b.drift_sigmas > distance, "{} ≤ {distance}", b.drift_sigmas);
        let (kept, mean) = run(&mut b, 99, 30, as_history(99));
        assert!(kept < 0.95 * mean, "pulled toward the prior: {kept} {mean}");
        assert!(b.guarded.is_empty(), "dropped with their jobs");
        // Stale history: the jobs take what the pilots say. A guard that
        // never fires learns to.
        config.bayes.drift_sigmas = f64::INFINITY;
        let mut b = Bayes::new(&config, false);
        let (first, mean) = run(&mut b, 1, 400, 600.0);
        assert!(first < 0.7 * mean, "dragged: {first} {mean}");
        for id in 2..=MIN_PRIOR_JOBS {
            run(&mut b, id, 400, 600.0);
        }
        assert!(b.drift_sigmas < b.drift_record[0].0);
        let (alone, mean) = run(&mut b, 99, 400, 600.0);
        assert!((alone / mean - 1.0).abs() < 1e-9, "{alone} {mean}");
        // Without learning, the threshold stays.
        config.bayes.learn_drift = false;
        let mut b = Bayes::new(&config, false);
        for id in 1..=MIN_PRIOR_JOBS {
            run(&mut b, id, 400, 600.0);
        }
        assert_eq!(b.drift_sigmas, f64::INFINITY);
    }

    #[test]
    fn bayes_dag_samples_the_root_stages_and_rescales_the_later_ones() {
        let kit = Kit::new();
        let mut history = kit.history();
        let dag = dag_job(3, &[(0, &[], 100), (1, &[0], 50), (2, &[1], 10)]);
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 40.0), (2, 5.0)]);
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), true);
        let d = b.on_submit(&dag, &ctx);
        assert_eq!((d.phase, d.policy), (Phase::Sampling, PolicyKind::BayesDag));
        // Two similar stages are a loose prior: at most 5% of the root
        // stage's 100 tasks, all of them in it.
        assert_eq!(d.pilots.len(), 5);
        assert!(d.pilots.iter().all(|&t| t < 100), "{:?}", d.pilots);
        let mut last = None;
        for &t in &d.pilots {
            last = b.on_task_end(&finished(3, t, 40), &ctx);
        }
        let last = last.unwrap();
        let e = last.estimate.unwrap();
        assert_eq!(e.source, EstimateSource::Posterior { pilots: 5 });
        // Each stage's own, adding up to the whole: the root's posterior,
        // the later ones' history rescaled by it.
        assert_eq!(last.stages.len(), 3);
        let sum: f64 = last.stages.iter().map(|s| s.size_us).sum();
        assert!((sum - e.size_us).abs() < 1e-3, "{:?}", last.stages);
        let root = last.stages[0].mean_task_runtime_us;
        assert!((last.stages[1].mean_task_runtime_us - 4.0 * root).abs() < 1e-3);
        // size = x × 100 + (x / 10 s) × (40 s × 50 + 5 s × 10) = 305 x, with
        // x the root stage's posterior mean task runtime, between the
        // prior's 10 s and the pilots' 40 s.
        let x = e.size_us / 305.0;
        assert!(x > 10.0 * S && x <= 40.0 * S * (1.0 + 1e-12), "{e:?}");
        assert!((e.mean_task_runtime_us - e.size_us / 160.0).abs() < 1e-6);

        // A thin DAG the history knows is placed by its prior: the sum of
        // its stages' medians, as Point-Est-DAG sizes it.
        let thin = dag_job(5, &[(0, &[], 1), (1, &[0], 1)]);
        learn_stages(&mut history, &thin, &[(0, 10.0), (1, 40.0)]);
        let ctx = kit.ctx(&history);
        let d = b.on_submit(&thin, &ctx);
        assert_eq!(d.phase, Phase::Estimated);
        let point = super::super::HistoryBased::point_dag().on_submit(&thin, &ctx);
        let (e, p) = (d.estimate.unwrap(), point.estimate.unwrap());
        assert!((e.size_us - 50.0 * S).abs() < 1e-6, "{e:?}");
        assert!((e.size_us - p.size_us).abs() < 1e-6, "{p:?}");

        // A flat job is decided as by Bayes.
        let (mut flat, mut dagged) = (
            Bayes::new(&PolicyConfig::default(), false),
            Bayes::new(&PolicyConfig::default(), true),
        );
        let (f, g) = (
            flat.on_submit(&job(7, 100), &ctx),
            dagged.on_submit(&job(7, 100), &ctx),
        );
        assert_eq!(
            (f.pilots, f.queue, f.estimate),
            (g.pilots, g.queue, g.estimate)
        );
    }

    #[test]
    fn bayes_dag_learns_its_priors_against_the_whole_job() {
        let kit = Kit::new();
        let mut history = kit.history();
        let dag = dag_job(1, &[(0, &[], 1), (1, &[0], 1)]);
        // The root stage took 10 s, the later one 30 s: a task of the
        // whole job 20 s on average.
        learn_stages(&mut history, &dag, &[(0, 10.0), (1, 30.0)]);
        let ctx = kit.ctx(&history);
        let mut b = Bayes::new(&PolicyConfig::default(), true);
        for id in 1..=MIN_PRIOR_JOBS {
            let d = b.on_submit(&dag_job(id, &[(0, &[], 1), (1, &[0], 1)]), &ctx);
            assert_eq!(d.estimate.unwrap().mean_task_runtime_us, 20.0 * S);
            b.on_job_done(
                &JobDone {
                    mean_task_runtime_us: 20.0 * S,
                    ..done(id, 2, 1.0)
                },
                &ctx,
            );
        }
        // Every job ended where its prior said: no error to learn, so
        // the priors are trusted more, not widened.
        let (score, n) = b.prior_error[0].unwrap();
        assert_eq!(n, MIN_PRIOR_JOBS);
        assert!(score < 1e-9, "{score}");
    }
}
