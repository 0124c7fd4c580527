//! A seeded synthetic workload: recurring job families with controlled
//! job-wise and task-wise runtime variance, thin/wide and DAG jobs, Poisson
//! arrivals at a target load, and preemptible cloud VMs with bathtub
//! lifetimes.
//!
//! # Model
//!
//! **Families.** `families` recurring jobs, each with a user, a logical name
//! (e.g. `etl-0007`), per-task CPU/memory requests, a scheduling class, a
//! priority, a *family mean* task duration `μ_f ~ LogNormal(median =
//! family_median_secs, σ = family_sigma)` and a *typical width* `w_f` from a
//! Pareto(`width_alpha`) bounded to `[min_width, max_width]`. Each job picks
//! its family with Zipf weights `(rank)^−family_zipf` (0 = uniform).
//!
//! **Durations** (SLearn §4.1). A job submitted at `t` draws its mean task
//! duration `μ_j` with mean `μ_f·(1 + drift)^(t / 1 day)` and coefficient of
//! variation `job_cv` (the job-wise variance σo² = (job_cv·μ)²); each task
//! then draws its duration with mean `μ_j` and CV `task_cv` (task-wise
//! variance σ1² = (task_cv·μ_j)²). Both draws use [`DurationDist`]. All
//! tasks of a job, DAG stages included, share `μ_j`.
//!
//! **Widths.** With probability `thin_fraction` a job is *thin* (1 or 2 tasks,
//! equally likely), with probability `dag_fraction` it is a *DAG* job, and
//! otherwise a plain *wide* job. Wide and DAG jobs draw their width uniformly
//! from `[max(min_width, ⌈w_f/2⌉), min(max_width, ⌊3·w_f/2⌋)]`.
//!
//! **DAGs.** A DAG job has `k ~ U{2..=min(5, width)}` stages with ids `1..=k`
//! and the width split into `k` non-empty parts uniformly at random. Stage 1
//! is the root; every later stage depends on one uniformly chosen earlier
//! stage plus each other earlier stage with probability 0.3. Stages are named
//! in Alibaba style from their type letter, id and parents: `M1` (the root),
//! `R2_1` (one parent), `J3_1_2` (a join). A stage's tasks are submitted and
//! scheduled when the last task of its parents finishes.
//!
//! **Arrivals.** Poisson with rate `λ = load · slots / E[task-seconds per
//! job]`, where the expectation is computed analytically from the families
//! actually drawn: `Σ_f p_f · μ_f · (1.5·thin_fraction + (1 − thin_fraction)
//! · mean width_f)`. That is exact for lognormal and Pareto durations; the
//! truncated normal realises a slightly higher load when CVs exceed ~0.4 (see
//! [`DurationDist::Normal`]). λ is fixed at the drift-free value, so a drift
//! also scales the offered load by `(1 + drift)^(t / 1 day)`. Arrivals stop
//! after `jobs` jobs or at `duration_hours`, whichever comes first (neither:
//! an endless stream). With `burst_factor` F > 1 the arrivals are bursty:
//! calm periods and bursts alternate, each of exponential length (bursts
//! `burst_minutes` on average, a `burst_share` s of the time), arrivals
//! F times faster in bursts, at rates `λ/(1 − s + s·F)` and F times that,
//! so that the average load stays the target (a Markov-modulated Poisson
//! process; the bursts draw from their own stream).
//!
//! **The trace** is the run on an unbounded cluster: each task is submitted
//! and scheduled (`machine_id` absent) when its stage becomes ready and
//! finishes after its true duration, so SCHEDULE → FINISH is the ground-truth
//! runtime. A job's `job_submitted` carries its requests, width and (for
//! DAGs) stages; `job_ended` (finish) follows its last task's finish.
//!
//! **VMs.** `vms` preemptible VMs launch as a Poisson process spread over the
//! expected arrival span (`duration_hours`, or `jobs / λ` if shorter). Each
//! gets a machine `add` at launch and a `remove` at launch + lifetime, with
//! lifetime `~ vm_lifetime` ([`Bathtub`]) ending in `preempted`, unless an
//! independent user stop `~ Exp(mean vm_stop_mean_hours)` comes first
//! (`stopped`: a right-censored lifetime). Machine ids are `1..=vms` in launch
//! order.
//!
//! # Determinism and memory
//!
//! Families, jobs and VMs draw from separate ChaCha8 streams of one seed, so
//! the same configuration yields byte-identical events, and adding VMs does not
//! change the jobs. Events come out in non-decreasing time order; ties keep
//! the order in which they were created (a job's submit before its tasks,
//! a task's schedule before its finish, an earlier job before a later one).
//! Generation is lazy: a job's events are created when its arrival is due and
//! only events not yet due are buffered, so memory is bounded by the work in
//! flight, not by the length of the run.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::iter::FusedIterator;

use jobcast_ingest::event::{
    EndReason, Event, JobEnded, JobOutcome, JobSubmitted, MAX_TIME_US, MachineEvent, MachineKind,
    Stage, TaskEvent, TaskKind, VmInfo,
};
use jobcast_predictor::preemption::Bathtub;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::{Exp1, StandardNormal};

const SECS_PER_DAY: f64 = 86_400.0;
/// ChaCha stream numbers: one per independent part of the workload.
const FAMILY_STREAM: u64 = 0;
const JOB_STREAM: u64 = 1;
const VM_STREAM: u64 = 2;
const BURST_STREAM: u64 = 3;
/// Probability that a DAG stage depends on a given earlier stage beyond its
/// one mandatory parent.
const EXTRA_PARENT_PROBABILITY: f64 = 0.3;
const MAX_STAGES: u32 = 5;
const FAMILY_KINDS: [&str; 8] = [
    "etl", "train", "index", "report", "backup", "sim", "query", "render",
];
/// GCE machine types (vCPUs) and zones the VMs are drawn from; highcpu types
/// have 0.9 GB of memory per vCPU.
const VM_TYPES: [(&str, u32); 5] = [
    ("n1-highcpu-2", 2),
    ("n1-highcpu-4", 4),
    ("n1-highcpu-8", 8),
    ("n1-highcpu-16", 16),
    ("n1-highcpu-32", 32),
];
const ZONES: [&str; 4] = [
    "us-central1-c",
    "us-east1-b",
    "us-west1-a",
    "europe-west1-b",
];

/// The distribution of job means around the family mean and of task
/// durations around the job mean. Each is parameterised by a mean and a
/// coefficient of variation (CV); a CV of 0 gives the mean exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DurationDist {
    /// Normal with standard deviation `cv·mean`, truncated to positive values
    /// by redrawing. Truncation raises the mean and lowers the CV noticeably
    /// only for large CVs (at CV 0.5: mean +2.8 %, CV −7 %).
    Normal,
    /// Lognormal with `σ² = ln(1 + cv²)` and `μ = ln(mean) − σ²/2`: exactly the
    /// requested mean and CV.
    #[default]
    LogNormal,
    /// Pareto (type I) with shape `α = 1 + √(1 + 1/cv²)` (so the CV is `cv`;
    /// α > 2 always, i.e. a finite variance but a heavy tail) and scale
    /// `mean·(α − 1)/α`.
    Pareto,
}

impl DurationDist {
    pub fn name(self) -> &'static str {
        match self {
            DurationDist::Normal => "normal",
            DurationDist::LogNormal => "lognormal",
            DurationDist::Pareto => "pareto",
        }
    }
}

/// Everything that shapes a synthetic workload. Each field names the
/// `jobcast generate` flag that sets it; [`Default`] gives the flags'
/// defaults.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkloadConfig {
    /// `--seed`: the seed of every random draw. Default 0.
    pub seed: u64,
    /// `--jobs`: stop after this many jobs. Default 10 000.
    pub jobs: Option<u64>,
    /// `--duration-hours`: stop job arrivals at this trace time. Default none.
    pub duration_hours: Option<f64>,
    /// `--slots`: task slots of the cluster the load refers to. Default 1000.
    pub slots: u32,
    /// `--load`: offered load, busy task-seconds per slot-second. Default 0.9.
    pub load: f64,
    /// `--families`: number of recurring job families. Default 100.
    pub families: u32,
    /// `--family-zipf`: Zipf exponent of family popularity (0 = uniform). Default 1.
    pub family_zipf: f64,
    /// `--family-median-secs`: median of the family mean task duration. Default 120 s.
    pub family_median_secs: f64,
    /// `--family-sigma`: log-space standard deviation of the family means
    /// (1.5 puts 90 % of them between 0.085× and 12× the median). Default 1.5.
    pub family_sigma: f64,
    /// `--job-cv`: CV of a job's mean task duration around its family mean
    /// (job-wise variation). Default 0.5.
    pub job_cv: f64,
    /// `--task-cv`: CV of task durations around their job's mean (task-wise
    /// variation). Default 0.25.
    pub task_cv: f64,
    /// `--dist`: shape of both draws. Default lognormal.
    pub dist: DurationDist,
    /// `--drift`: relative change of family means per day; means are scaled
    /// by `(1 + drift)^(t / 1 day)`. Default 0.
    pub drift: f64,
    /// `--thin-fraction`: share of jobs with 1–2 tasks. Default 0.4.
    pub thin_fraction: f64,
    /// `--dag-fraction`: share of jobs that are multi-stage DAGs. Default 0.2.
    pub dag_fraction: f64,
    /// `--min-width`: fewest tasks of a wide or DAG job (≥ 3). Default 3.
    pub min_width: u32,
    /// `--max-width`: most tasks of any job. Default 1000.
    pub max_width: u32,
    /// `--width-alpha`: Pareto shape of family typical widths (smaller = heavier tail). Default 1.2.
    pub width_alpha: f64,
    /// `--vms`: number of preemptible VMs to launch. Default 0.
    pub vms: u32,
    /// `--bathtub-a`, `--bathtub-tau1`, `--bathtub-tau2`, `--bathtub-b`,
    /// `--vm-max-lifetime-hours`: the VM lifetime distribution. Default the
    /// typical GCE fit (A 0.45, τ1 1 h, τ2 0.8 h, b 24 h, L 24 h).
    pub vm_lifetime: Bathtub,
    /// `--vm-stop-mean-hours`: mean of the exponential user-stop time that
    /// censors VM lifetimes. Default none (every VM runs until preempted).
    pub vm_stop_mean_hours: Option<f64>,
    /// `--burst-factor`: arrivals come this many times faster during
    /// bursts than between them. Default 1 (no bursts: plain Poisson).
    pub burst_factor: f64,
    /// `--burst-share`: the share of time spent in bursts. Default 0.1.
    pub burst_share: f64,
    /// `--burst-minutes`: the mean length of a burst. Default 30 min.
    pub burst_minutes: f64,
}

impl Default for WorkloadConfig {
    fn default() -> Self {
        WorkloadConfig {
            seed: 0,
            jobs: Some(10_000),
            duration_hours: None,
            slots: 1000,
            load: 0.9,
            families: 100,
            family_zipf: 1.0,
            family_median_secs: 120.0,
            family_sigma: 1.5,
            job_cv: 0.5,
            task_cv: 0.25,
            dist: DurationDist::LogNormal,
            drift: 0.0,
            thin_fraction: 0.4,
            dag_fraction: 0.2,
            min_width: 3,
            max_width: 1000,
            width_alpha: 1.2,
            vms: 0,
            vm_lifetime: Bathtub::default(),
            vm_stop_mean_hours: None,
            burst_factor: 1.0,
            burst_share: 0.1,
            burst_minutes: 30.0,
        }
    }
}

/// A configuration value is out of range; `flag` names the offending flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{flag}: {message}")]
pub struct ConfigError {
    pub flag: &'static str,
    pub message: String,
}

/// Upper bounds on the configuration. They keep timestamps far below
/// [`MAX_TIME_US`] (1e6 h ≈ 114 years), family means and hence the arrival
/// rate finite (e^(5·9) · 1e7 s is still finite), and one job's buffered events
/// within memory (a job of 10⁶ tasks buffers ~3·10⁶ events).
const MAX_DURATION_HOURS: f64 = 1e6;
const MAX_FAMILY_MEDIAN_SECS: f64 = 1e7;
const MAX_FAMILY_SIGMA: f64 = 5.0;
const MAX_FAMILIES: u32 = 1_000_000;
const MAX_WIDTH: u32 = 1_000_000;

impl WorkloadConfig {
    /// Check every field; the error names the flag of the first bad one.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let fail = |flag, message: String| Err(ConfigError { flag, message });
        let positive = |flag, x: f64| {
            if x.is_finite() && x > 0.0 {
                Ok(())
            } else {
                fail(flag, format!("must be a finite number > 0, got {x}"))
            }
        };
        let non_negative = |flag, x: f64| {
            if x.is_finite() && x >= 0.0 {
                Ok(())
            } else {
                fail(flag, format!("must be a finite number ≥ 0, got {x}"))
            }
        };
        let at_most = |flag, x: f64, limit: f64| {
            if x <= limit {
                Ok(())
            } else {
                fail(flag, format!("must be at most {limit}, got {x}"))
            }
        };
        let fraction = |flag, x: f64| {
            if (0.0..=1.0).contains(&x) {
                Ok(())
            } else {
                fail(flag, format!("must be between 0 and 1, got {x}"))
            }
        };
        if let Some(hours) = self.duration_hours {
            positive("--duration-hours", hours)?;
            at_most("--duration-hours", hours, MAX_DURATION_HOURS)?;
        }
        if self.slots == 0 {
            return fail("--slots", "must be at least 1".into());
        }
        positive("--load", self.load)?;
        if !(1..=MAX_FAMILIES).contains(&self.families) {
            return fail(
                "--families",
                format!(
                    "must be between 1 and {MAX_FAMILIES}, got {}",
                    self.families
                ),
            );
        }
        non_negative("--family-zipf", self.family_zipf)?;
        positive("--family-median-secs", self.family_median_secs)?;
        at_most(
            "--family-median-secs",
            self.family_median_secs,
            MAX_FAMILY_MEDIAN_SECS,
        )?;
        non_negative("--family-sigma", self.family_sigma)?;
        at_most("--family-sigma", self.family_sigma, MAX_FAMILY_SIGMA)?;
        non_negative("--job-cv", self.job_cv)?;
        non_negative("--task-cv", self.task_cv)?;
        if !(self.drift.is_finite() && self.drift > -1.0) {
            return fail(
                "--drift",
                format!("must be a finite number > -1, got {}", self.drift),
            );
        }
        fraction("--thin-fraction", self.thin_fraction)?;
        fraction("--dag-fraction", self.dag_fraction)?;
        if self.thin_fraction + self.dag_fraction > 1.0 {
            return fail(
                "--dag-fraction",
                format!(
                    "thin ({}) and DAG ({}) jobs are disjoint, so their fractions must add up to at most 1",
                    self.thin_fraction, self.dag_fraction
                ),
            );
        }
        if self.min_width < 3 {
            return fail(
                "--min-width",
                format!(
                    "must be at least 3 (1–2 task jobs are thin), got {}",
                    self.min_width
                ),
            );
        }
        if !(self.min_width..=MAX_WIDTH).contains(&self.max_width) {
            return fail(
                "--max-width",
                format!(
                    "must be between --min-width ({}) and {MAX_WIDTH}, got {}",
                    self.min_width, self.max_width
                ),
            );
        }
        positive("--width-alpha", self.width_alpha)?;
        if let Some(mean) = self.vm_stop_mean_hours {
            positive("--vm-stop-mean-hours", mean)?;
        }
        if !(self.burst_factor.is_finite() && self.burst_factor >= 1.0) {
            return fail(
                "--burst-factor",
                format!(
                    "must be a finite number ≥ 1 (1: no bursts), got {}",
                    self.burst_factor
                ),
            );
        }
        if !(self.burst_share > 0.0 && self.burst_share < 1.0) {
            return fail(
                "--burst-share",
                format!("must be in (0, 1), got {}", self.burst_share),
            );
        }
        positive("--burst-minutes", self.burst_minutes)?;
        if self.vms > 0 && self.jobs.is_none_or(|n| n == 0) && self.duration_hours.is_none() {
            return fail(
                "--vms",
                "VM launches are spread over the run, so it needs --jobs > 0 or --duration-hours"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Start generating the workload described by `config` (validated first).
pub fn generate(config: &WorkloadConfig) -> Result<Generator, ConfigError> {
    config.validate()?;
    Ok(Generator::new(config))
}

/// A positive random factor with mean 1 and a given CV: multiplied by a mean,
/// it gives one draw of a [`DurationDist`]. Constants are precomputed.
#[derive(Debug, Clone, Copy)]
enum Spread {
    Fixed,
    Normal { cv: f64 },
    LogNormal { sigma: f64 },
    Pareto { inv_alpha: f64, scale: f64 },
}

impl Spread {
    fn new(dist: DurationDist, cv: f64) -> Spread {
        if cv == 0.0 {
            return Spread::Fixed;
        }
        match dist {
            DurationDist::Normal => Spread::Normal { cv },
            DurationDist::LogNormal => Spread::LogNormal {
                sigma: cv.mul_add(cv, 1.0).ln().sqrt(),
            },
            DurationDist::Pareto => {
                let alpha = 1.0 + (1.0 + 1.0 / (cv * cv)).sqrt();
                Spread::Pareto {
                    inv_alpha: 1.0 / alpha,
                    scale: (alpha - 1.0) / alpha,
                }
            }
        }
    }

    fn draw(self, rng: &mut ChaCha8Rng) -> f64 {
        match self {
            Spread::Fixed => 1.0,
            Spread::Normal { cv } => loop {
                let x = cv.mul_add(rng.sample::<f64, _>(StandardNormal), 1.0);
                if x > 0.0 {
                    return x;
                }
            },
            Spread::LogNormal { sigma } => sigma
                .mul_add(rng.sample::<f64, _>(StandardNormal), -0.5 * sigma * sigma)
                .exp(),
            // 1 − U lies in (0, 1], so the power is finite.
            Spread::Pareto { inv_alpha, scale } => {
                scale * (1.0 - rng.random::<f64>()).powf(-inv_alpha)
            }
        }
    }
}

struct Family {
    user: String,
    logical_name: String,
    mean_secs: f64,
    /// The range a wide or DAG job's width is drawn from uniformly.
    width_lo: u32,
    width_hi: u32,
    cpu_request: f64,
    mem_request: f64,
    scheduling_class: u8,
    priority: u32,
    /// Jobs of this family so far; numbers the job names.
    runs: u64,
}

/// A log-uniform draw from `[lo, hi]` (for resource requests), rounded to
/// 4 decimals to keep the JSON readable.
fn log_uniform(rng: &mut ChaCha8Rng, lo: f64, hi: f64) -> f64 {
    let x = (lo.ln() + rng.random::<f64>() * (hi / lo).ln()).exp();
    (x * 1e4).round() / 1e4
}

impl Family {
    fn draw(index: u32, users: u32, config: &WorkloadConfig, rng: &mut ChaCha8Rng) -> Family {
        let kind = FAMILY_KINDS[rng.random_range(0..FAMILY_KINDS.len())];
        let user = format!("user{:03}", rng.random_range(0..users));
        let mean_secs = config.family_median_secs
            * (config.family_sigma * rng.sample::<f64, _>(StandardNormal)).exp();
        // Bounded Pareto on [min, max + 1) by inversion, floored to an integer.
        let (lo, hi) = (
            f64::from(config.min_width),
            f64::from(config.max_width) + 1.0,
        );
        let tail = 1.0 - (lo / hi).powf(config.width_alpha);
        let x = lo / (1.0 - rng.random::<f64>() * tail).powf(1.0 / config.width_alpha);
        let typical = (x as u32).clamp(config.min_width, config.max_width);
        Family {
            user,
            logical_name: format!("{kind}-{index:04}"),
            mean_secs,
            width_lo: typical.div_ceil(2).max(config.min_width),
            width_hi: (typical + typical / 2).min(config.max_width),
            cpu_request: log_uniform(rng, 0.005, 0.5),
            mem_request: log_uniform(rng, 0.002, 0.25),
            scheduling_class: rng.random_range(0..=3),
            priority: rng.random_range(0..=11),
            runs: 0,
        }
    }

    fn mean_width(&self) -> f64 {
        0.5 * (f64::from(self.width_lo) + f64::from(self.width_hi))
    }
}

/// An event waiting in the buffer, ordered by time and then creation order.
struct Pending {
    time_us: u64,
    seq: u64,
    event: Event,
}

impl Pending {
    fn key(&self) -> (u64, u64) {
        (self.time_us, self.seq)
    }
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

fn secs_to_us(secs: f64) -> u64 {
    // `as` saturates; the bound keeps sums of times within MAX_TIME_US.
    (secs * 1e6).round().clamp(0.0, (MAX_TIME_US / 4) as f64) as u64
}

fn add_us(t: u64, d: u64) -> u64 {
    t.saturating_add(d).min(MAX_TIME_US)
}

/// The preemptible VMs still to launch.
struct VmLaunches {
    rng: ChaCha8Rng,
    lifetime: Bathtub,
    stop_mean_hours: Option<f64>,
    mean_gap_secs: f64,
    remaining: u32,
    next_id: u64,
    /// Trace time of the next launch, in seconds.
    next_secs: f64,
}

/// The workload as an iterator of canonical events in time order; see the
/// [module docs](self). Create it with [`generate`].
pub struct Generator {
    families: Vec<Family>,
    /// Running sums of the Zipf weights, for picking a family.
    cumulative_weight: Vec<f64>,
    job_spread: Spread,
    task_spread: Spread,
    thin_fraction: f64,
    dag_fraction: f64,
    /// ln(1 + drift): family means grow by this per day, in log space.
    log_drift_per_day: f64,
    arrival_rate_per_sec: f64,
    /// Bursty arrivals, when `burst_factor` > 1.
    bursts: Option<Bursts>,
    rng: ChaCha8Rng,
    jobs_left: Option<u64>,
    end_secs: Option<f64>,
    /// Trace time of the next job arrival in seconds; `None` once arrivals
    /// have stopped.
    next_arrival_secs: Option<f64>,
    next_job_id: u64,
    vms: Option<VmLaunches>,
    pending: BinaryHeap<Reverse<Pending>>,
    seq: u64,
}

/// A two-state (Markov-modulated) Poisson process: calm periods and
/// bursts, each of exponential length, with arrivals `factor` times faster
/// in bursts and the average rate kept at the load's.
struct Bursts {
    rng: ChaCha8Rng,
    factor: f64,
    /// Mean lengths of a calm period and of a burst, seconds.
    calm_mean_secs: f64,
    burst_mean_secs: f64,
    /// The calm rate over the average rate: `1 / (1 − s + s·factor)`.
    calm_share_of_rate: f64,
    in_burst: bool,
    /// When the current period ends.
    until_secs: f64,
}

impl Bursts {
    fn new(config: &WorkloadConfig) -> Bursts {
        let share = config.burst_share;
        let burst_mean_secs = config.burst_minutes * 60.0;
        let calm_mean_secs = burst_mean_secs * (1.0 - share) / share;
        let mut rng = chacha(config.seed, BURST_STREAM);
        let until_secs = calm_mean_secs * rng.sample::<f64, _>(Exp1);
        Bursts {
            rng,
            factor: config.burst_factor,
            calm_mean_secs,
            burst_mean_secs,
            calm_share_of_rate: 1.0 / (1.0 - share + share * config.burst_factor),
            in_burst: false,
            until_secs,
        }
    }

    /// The first arrival after `now_secs` at average rate `rate_per_sec`:
    /// drawn at the current period's rate, and drawn again from the
    /// period's end if it falls past it (the exponential forgets).
    fn next_arrival(&mut self, now_secs: f64, rate_per_sec: f64, rng: &mut ChaCha8Rng) -> f64 {
        let mut t = now_secs;
        loop {
            while t >= self.until_secs {
                self.in_burst = !self.in_burst;
                let mean = if self.in_burst {
                    self.burst_mean_secs
                } else {
                    self.calm_mean_secs
                };
                self.until_secs += mean * self.rng.sample::<f64, _>(Exp1);
            }
            let factor = if self.in_burst { self.factor } else { 1.0 };
            let rate = rate_per_sec * self.calm_share_of_rate * factor;
            let next = t + rng.sample::<f64, _>(Exp1) / rate;
            if next < self.until_secs {
                return next;
            }
            t = self.until_secs;
        }
    }
}

fn chacha(seed: u64, stream: u64) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    rng.set_stream(stream);
    rng
}

impl Generator {
    fn new(config: &WorkloadConfig) -> Generator {
        let mut family_rng = chacha(config.seed, FAMILY_STREAM);
        let users = (config.families / 4).max(1);
        let families: Vec<Family> = (0..config.families)
            .map(|f| Family::draw(f, users, config, &mut family_rng))
            .collect();
        let mut cumulative_weight = Vec::with_capacity(families.len());
        let mut total = 0.0;
        for rank in 1..=config.families {
            total += f64::from(rank).powf(-config.family_zipf);
            cumulative_weight.push(total);
        }
        let thin_mean_width = 1.5;
        let work_secs_per_job: f64 = families
            .iter()
            .enumerate()
            .map(|(f, family)| {
                let p = (cumulative_weight[f]
                    - if f == 0 {
                        0.0
                    } else {
                        cumulative_weight[f - 1]
                    })
                    / total;
                let width = config.thin_fraction * thin_mean_width
                    + (1.0 - config.thin_fraction) * family.mean_width();
                p * family.mean_secs * width
            })
            .sum();
        let arrival_rate_per_sec = config.load * f64::from(config.slots) / work_secs_per_job;
        let end_secs = config.duration_hours.map(|h| h * 3600.0);

        let vms = (config.vms > 0).then(|| {
            // With `--jobs 0` (a VM-only trace) the duration alone sets the span.
            let by_jobs = config
                .jobs
                .filter(|&n| n > 0)
                .map(|n| n as f64 / arrival_rate_per_sec);
            let span_secs = match (end_secs, by_jobs) {
                (Some(a), Some(b)) => a.min(b),
                (a, b) => a.or(b).unwrap_or(0.0),
            };
            let mut rng = chacha(config.seed, VM_STREAM);
            let mean_gap_secs = span_secs / f64::from(config.vms);
            let next_secs = mean_gap_secs * rng.sample::<f64, _>(Exp1);
            VmLaunches {
                rng,
                lifetime: config.vm_lifetime,
                stop_mean_hours: config.vm_stop_mean_hours,
                mean_gap_secs,
                remaining: config.vms,
                next_id: 1,
                next_secs,
            }
        });

        let mut generator = Generator {
            families,
            cumulative_weight,
            job_spread: Spread::new(config.dist, config.job_cv),
            task_spread: Spread::new(config.dist, config.task_cv),
            thin_fraction: config.thin_fraction,
            dag_fraction: config.dag_fraction,
            log_drift_per_day: config.drift.ln_1p(),
            arrival_rate_per_sec,
            bursts: (config.burst_factor > 1.0).then(|| Bursts::new(config)),
            rng: chacha(config.seed, JOB_STREAM),
            jobs_left: config.jobs,
            end_secs,
            next_arrival_secs: Some(0.0),
            next_job_id: 1,
            vms,
            pending: BinaryHeap::new(),
            seq: 0,
        };
        generator.advance_arrival(0.0);
        generator
    }

    /// The Poisson arrival rate that yields the target load, in jobs per hour.
    pub fn arrival_rate_per_hour(&self) -> f64 {
        self.arrival_rate_per_sec * 3600.0
    }

    /// Draw the next arrival after `now_secs`, or stop arrivals if a bound is hit.
    fn advance_arrival(&mut self, now_secs: f64) {
        if self.jobs_left == Some(0) {
            self.next_arrival_secs = None;
            return;
        }
        let next = match &mut self.bursts {
            None => now_secs + self.rng.sample::<f64, _>(Exp1) / self.arrival_rate_per_sec,
            Some(bursts) => bursts.next_arrival(now_secs, self.arrival_rate_per_sec, &mut self.rng),
        };
        self.next_arrival_secs = match self.end_secs {
            Some(end) if next >= end => None,
            _ => Some(next),
        };
    }

    fn push(&mut self, event: Event) {
        self.seq += 1;
        self.pending.push(Reverse(Pending {
            time_us: event.time_us(),
            seq: self.seq,
            event,
        }));
    }

    fn pick_family(&mut self) -> usize {
        let total = self.cumulative_weight.last().copied().unwrap_or(0.0);
        let x = self.rng.random::<f64>() * total;
        self.cumulative_weight
            .partition_point(|&c| c <= x)
            .min(self.families.len() - 1)
    }

    /// Split `width` tasks into `k` non-empty stages with random parents.
    fn draw_stages(&mut self, width: u32) -> Vec<Stage> {
        let k = self.rng.random_range(2..=width.min(MAX_STAGES));
        // k − 1 distinct cut points in 1..width give a uniform composition.
        let mut cuts: Vec<u32> = Vec::with_capacity(k as usize + 1);
        while cuts.len() < k as usize - 1 {
            let cut = self.rng.random_range(1..width);
            if !cuts.contains(&cut) {
                cuts.push(cut);
            }
        }
        cuts.push(0);
        cuts.push(width);
        cuts.sort_unstable();
        (1..=k)
            .map(|id| {
                let parents: Vec<u32> = if id == 1 {
                    Vec::new()
                } else {
                    let required = self.rng.random_range(1..id);
                    (1..id)
                        .filter(|&p| {
                            p == required || self.rng.random_bool(EXTRA_PARENT_PROBABILITY)
                        })
                        .collect()
                };
                let letter = match parents.len() {
                    0 => 'M',
                    1 => 'R',
                    _ => 'J',
                };
                let mut name = format!("{letter}{id}");
                for p in &parents {
                    name.push_str(&format!("_{p}"));
                }
                let i = id as usize;
                Stage {
                    id,
                    parents,
                    num_tasks: cuts[i] - cuts[i - 1],
                    name: Some(name),
                }
            })
            .collect()
    }

    /// Create every event of the job arriving at `now_secs` and buffer them.
    fn spawn_job(&mut self, now_secs: f64) {
        let submit_us = secs_to_us(now_secs);
        let job_id = self.next_job_id;
        self.next_job_id += 1;
        let f = self.pick_family();
        let kind = self.rng.random::<f64>();
        let (width_lo, width_hi) = (self.families[f].width_lo, self.families[f].width_hi);
        let (num_tasks, stages) = if kind < self.thin_fraction {
            (self.rng.random_range(1..=2), None)
        } else {
            let width = self.rng.random_range(width_lo..=width_hi);
            let dag = kind < self.thin_fraction + self.dag_fraction;
            (width, dag.then(|| self.draw_stages(width)))
        };
        let drift = (self.log_drift_per_day * now_secs / SECS_PER_DAY).exp();
        let job_mean_secs =
            self.families[f].mean_secs * drift * self.job_spread.draw(&mut self.rng);

        let family = &mut self.families[f];
        let job_name = format!("{}-r{}", family.logical_name, family.runs);
        family.runs += 1;
        let submitted = JobSubmitted {
            time_us: submit_us,
            job_id,
            user: family.user.clone(),
            group: String::new(),
            job_name,
            logical_name: family.logical_name.clone(),
            scheduling_class: family.scheduling_class,
            priority: family.priority,
            cpu_request: family.cpu_request,
            mem_request: family.mem_request,
            partition: String::new(),
            time_limit_us: None,
            deadline_us: None,
            num_tasks,
            stages: stages.clone(),
            cluster: String::new(),
        };
        self.push(Event::JobSubmitted(submitted));

        // Stage ids are topologically ordered (parents < id), so one pass
        // computes every stage's start from its parents' finish times.
        let plan: Vec<(Option<u32>, u32, Vec<u32>)> = match stages {
            Some(stages) => stages
                .into_iter()
                .map(|s| (Some(s.id), s.num_tasks, s.parents))
                .collect(),
            None => vec![(None, num_tasks, Vec::new())],
        };
        let mut stage_end_us: Vec<u64> = Vec::with_capacity(plan.len());
        let mut first_task = 0;
        for (stage, count, parents) in plan {
            let start_us = parents
                .iter()
                .map(|&p| stage_end_us[p as usize - 1])
                .max()
                .unwrap_or(submit_us);
            let tasks = first_task..first_task + count;
            first_task += count;
            let task_event = |time_us, task_index, kind| {
                Event::Task(TaskEvent {
                    time_us,
                    job_id,
                    task_index,
                    kind,
                    machine_id: None,
                    stage,
                })
            };
            for kind in [TaskKind::Submit, TaskKind::Schedule] {
                for task_index in tasks.clone() {
                    self.push(task_event(start_us, task_index, kind));
                }
            }
            let mut end_us = start_us;
            for task_index in tasks {
                let secs = job_mean_secs * self.task_spread.draw(&mut self.rng);
                let finish_us = add_us(start_us, secs_to_us(secs).max(1));
                end_us = end_us.max(finish_us);
                self.push(task_event(finish_us, task_index, TaskKind::Finish));
            }
            stage_end_us.push(end_us);
        }
        let end_us = stage_end_us.into_iter().max().unwrap_or(submit_us);
        self.push(Event::JobEnded(JobEnded {
            time_us: end_us,
            job_id,
            outcome: JobOutcome::Finish,
        }));

        if let Some(left) = &mut self.jobs_left {
            *left -= 1;
        }
        self.advance_arrival(now_secs);
    }

    /// Launch the next VM: buffer its `add` and its `remove`.
    fn launch_vm(&mut self) {
        let Some(vms) = &mut self.vms else { return };
        let launch_us = secs_to_us(vms.next_secs);
        let machine_id = vms.next_id;
        let (vm_type, cpus) = VM_TYPES[vms.rng.random_range(0..VM_TYPES.len())];
        let zone = ZONES[vms.rng.random_range(0..ZONES.len())];
        let lifetime_h = vms.lifetime.sample(&mut vms.rng);
        let stop_h = vms
            .stop_mean_hours
            .map(|mean| mean * vms.rng.sample::<f64, _>(Exp1));
        let (alive_h, end_reason) = match stop_h {
            Some(stop) if stop < lifetime_h => (stop, EndReason::Stopped),
            _ => (lifetime_h, EndReason::Preempted),
        };
        vms.next_id += 1;
        vms.remaining -= 1;
        vms.next_secs += vms.mean_gap_secs * vms.rng.sample::<f64, _>(Exp1);
        let machine = |time_us, kind, end_reason| {
            Event::Machine(MachineEvent {
                time_us,
                machine_id,
                kind,
                platform: None,
                cpus: Some(f64::from(cpus)),
                memory: Some(0.9 * f64::from(cpus)),
                vm: Some(VmInfo {
                    name: Some(format!("vm-{machine_id:05}")),
                    vm_type: vm_type.to_owned(),
                    zone: zone.to_owned(),
                    preemptible: true,
                    launch_time_us: launch_us,
                    end_reason,
                }),
                cluster: String::new(),
            })
        };
        let add = machine(launch_us, MachineKind::Add, None);
        let remove = machine(
            add_us(launch_us, secs_to_us(alive_h * 3600.0)),
            MachineKind::Remove,
            Some(end_reason),
        );
        self.push(add);
        self.push(remove);
    }

    fn next_vm_launch_secs(&self) -> Option<f64> {
        self.vms
            .as_ref()
            .filter(|v| v.remaining > 0)
            .map(|v| v.next_secs)
    }
}

impl Iterator for Generator {
    type Item = Event;

    fn next(&mut self) -> Option<Event> {
        loop {
            // Expand arrivals and launches due no later than the earliest
            // buffered event, so nothing created later can precede it; jobs
            // go before VMs at equal times.
            let due_us = self.pending.peek().map(|p| p.0.time_us);
            let job = self.next_arrival_secs;
            let vm = self.next_vm_launch_secs();
            let (source_secs, is_job) = match (job, vm) {
                (Some(j), Some(v)) if secs_to_us(v) < secs_to_us(j) => (Some(v), false),
                (Some(j), _) => (Some(j), true),
                (None, v) => (v, false),
            };
            match source_secs {
                Some(secs) if due_us.is_none_or(|due| secs_to_us(secs) <= due) => {
                    if is_job {
                        self.spawn_job(secs);
                    } else {
                        self.launch_vm();
                    }
                }
                _ => return self.pending.pop().map(|p| p.0.event),
            }
        }
    }
}

/// Once arrivals and launches are exhausted and the buffer drained, it stays empty.
impl FusedIterator for Generator {}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_and_cv(xs: &[f64]) -> (f64, f64) {
        let n = xs.len() as f64;
        let mean = xs.iter().sum::<f64>() / n;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        (mean, var.sqrt() / mean)
    }

    #[test]
    fn spreads_have_mean_one_and_the_requested_cv() {
        let mut rng = chacha(1, 0);
        for (dist, cv, tolerance) in [
            (DurationDist::Normal, 0.3, 0.02),
            (DurationDist::LogNormal, 0.5, 0.03),
            (DurationDist::LogNormal, 0.0, 0.0),
            (DurationDist::Pareto, 0.3, 0.05),
        ] {
            let spread = Spread::new(dist, cv);
            let xs: Vec<f64> = (0..400_000).map(|_| spread.draw(&mut rng)).collect();
            assert!(xs.iter().all(|&x| x > 0.0));
            let (mean, measured) = mean_and_cv(&xs);
            assert!((mean - 1.0).abs() < 0.01, "{dist:?}: mean {mean}");
            assert!(
                (measured - cv).abs() <= tolerance * cv.max(1.0),
                "{dist:?}: CV {measured} vs {cv}"
            );
        }
    }

    #[test]
    fn dag_stages_are_acyclic_named_and_sum_to_the_width() {
        let mut generator = generate(&WorkloadConfig::default()).unwrap();
        for width in [3, 4, 5, 17, 1000] {
            for _ in 0..200 {
                let stages = generator.draw_stages(width);
                assert!((2..=5).contains(&stages.len()));
                assert_eq!(stages.iter().map(|s| s.num_tasks).sum::<u32>(), width);
                for (i, s) in stages.iter().enumerate() {
                    assert_eq!(s.id as usize, i + 1);
                    assert!(s.num_tasks >= 1);
                    assert_eq!(s.parents.is_empty(), s.id == 1);
                    assert!(
                        s.parents.windows(2).all(|w| w[0] < w[1])
                            && s.parents.iter().all(|&p| p < s.id)
                    );
                    let mut expected =
                        format!("{}{}", ['M', 'R', 'J'][s.parents.len().min(2)], s.id);
                    s.parents
                        .iter()
                        .for_each(|p| expected.push_str(&format!("_{p}")));
                    assert_eq!(s.name.as_deref(), Some(expected.as_str()));
                }
            }
        }
    }

    #[test]
    fn invalid_configs_name_their_flag() {
        type Break = fn(&mut WorkloadConfig);
        let cases: [(&str, Break); 18] = [
            ("--job-cv", |c| c.job_cv = -0.1),
            ("--task-cv", |c| c.task_cv = f64::NAN),
            ("--load", |c| c.load = 0.0),
            ("--slots", |c| c.slots = 0),
            ("--families", |c| c.families = 0),
            ("--duration-hours", |c| c.duration_hours = Some(-1.0)),
            ("--drift", |c| c.drift = -1.0),
            ("--thin-fraction", |c| c.thin_fraction = 1.5),
            ("--dag-fraction", |c| {
                (c.thin_fraction, c.dag_fraction) = (0.7, 0.5)
            }),
            ("--min-width", |c| c.min_width = 2),
            ("--max-width", |c| c.max_width = 2),
            ("--max-width", |c| c.max_width = u32::MAX),
            ("--families", |c| c.families = 2_000_000),
            ("--family-sigma", |c| c.family_sigma = 50.0),
            ("--family-median-secs", |c| {
                c.family_median_secs = f64::INFINITY
            }),
            ("--width-alpha", |c| c.width_alpha = 0.0),
            ("--vm-stop-mean-hours", |c| c.vm_stop_mean_hours = Some(0.0)),
            ("--vms", |c| (c.vms, c.jobs) = (5, None)),
        ];
        for (flag, break_it) in cases {
            let mut config = WorkloadConfig::default();
            break_it(&mut config);
            let err = generate(&config).err().expect(flag);
            assert_eq!(err.flag, flag, "{err}");
            assert!(err.to_string().starts_with(flag), "{err}");
        }
        assert!(WorkloadConfig::default().validate().is_ok());
    }

    #[test]
    fn an_unbounded_config_streams_forever() {
        let config = WorkloadConfig {
            jobs: None,
            duration_hours: None,
            ..WorkloadConfig::default()
        };
        let jobs = generate(&config)
            .unwrap()
            .take(200_000)
            .filter(|e| matches!(e, Event::JobSubmitted(_)))
            .count();
        assert!(jobs > 100, "{jobs}");
    }
}
