//! A deterministic, trace-driven simulation of the generic scheduler GS
//! (SLearn §5.1.1) driven by a prediction [`Policy`].
//!
//! The cluster has `slots` identical task slots. Jobs arrive at their trace
//! submission time with their tasks' true runtimes; the policy decides where
//! each job goes and GS schedules:
//!
//! - **Queues.** N priority queues. Within a queue jobs are served FIFO by
//!   the time they entered it (then job id); a slot offered to a queue goes
//!   to the task of the first job there that has a runnable task.
//! - **Weighted sharing.** A free slot goes to the queue, among those with a
//!   runnable task, with the smallest (running tasks of its jobs / weight),
//!   the higher-priority queue on ties. A job's running tasks count towards
//!   the queue it is in now, so they move with it.
//! - **Runnable tasks.** A task that has not started and whose DAG stage's
//!   parents have all finished; while a job is in the `Sampling` phase, only
//!   its pilots.
//! - **Work conservation** (SLearn §5.1.2). Slots still idle after the
//!   queues are served run the non-pilot tasks of sampling-phase jobs, in
//!   FIFO order of job arrival.
//! - **LAS.** A job in the `AttainedService` phase is in the queue of its
//!   attained service (finished task time + elapsed time of its running
//!   tasks), recomputed at every scheduling point; the time it crosses a
//!   threshold is computed exactly, so no periodic tick is needed.
//! - **FIFO** (`Arrival`) jobs all sit in the queue their decision names,
//!   in arrival order.
//!
//! Tasks are never preempted.
//!
//! **Predictions.** The simulator is the downstream scheduler; what it
//! schedules by comes from a [`Predictions`] implementation, told once per
//! simulated instant what happened then, as a scheduler would report it:
//! tasks started by the previous instant's scheduling pass, task
//! completions (each followed by its job's end when it was the job's last
//! task), then arrivals ([`SimEvent`], convertible to canonical
//! [`Event`]s). It answers with the decisions those events caused, which
//! are applied before the instant's scheduling pass. [`InProcess`] calls a
//! [`Policy`] and a [`History`] directly: on a completion
//! [`Policy::on_task_end`]; on a job's end the history learns from it (the
//! job and each DAG stage) and then [`Policy::on_job_done`];
//! `crate::closed_loop` asks `jobcast serve` through Kafka instead.
//!
//! Applying an instant's decisions after all of its completions and
//! arrivals is the same as applying each right after the event that caused
//! it: a decision changes only its own job's phase, pilots and queue, and
//! what a completion or an arrival does to other jobs (free slots, running
//! counts per queue, a LAS job's own queue) commutes with that: queue
//! membership is ordered by (entry time, job id) whatever the order of
//! insertion, and nothing is scheduled until the instant's pass. A job's
//! result (its final queue, phase and estimate) is read after the
//! decisions, and no event of a finished job follows its end.
//!
//! Determinism: events at the same time are handled task completions first
//! (by job id, then task index), then arrivals (by job id), then the
//! scheduling pass; ordered sets and heaps keyed by (time, job id, task)
//! decide every tie, and nothing iterates a hash map.

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeSet, BinaryHeap, HashMap};

use jobcast_ingest::config::ConfigError;
use jobcast_ingest::event::{Event, JobEnded, JobOutcome, TaskEvent, TaskKind};
pub use jobcast_predictor::decision::{Decision, Estimate, Phase, PolicyKind};
use jobcast_predictor::decision::{Quantiles, RuntimeQuantiles};
use jobcast_predictor::eta::{self, Eta, EtaCalibration, JobProgress, Kind, Predicted, Queued};
use jobcast_predictor::history::History;
use jobcast_predictor::policies::{Context, Policy, TaskEnd};
use jobcast_predictor::queues::QueueConfig;
use jobcast_predictor::stats::percentile;
use jobcast_predictor::walltime::Walltime;
use serde::Serialize;

use crate::workload::SimJob;

/// The simulated cluster and its queues.
#[derive(Debug, Clone, PartialEq)]
pub struct SimConfig {
    pub slots: u32,
    pub queues: QueueConfig,
    /// Accuracy figures (errors, correct queue) count only jobs at least
    /// this wide, so that every policy is judged on the same jobs: the
    /// sampling policies never estimate thin jobs, and the paper reports
    /// accuracy on wide jobs only (its thin limit, 3).
    pub accuracy_min_width: u32,
    /// How long a slot a task left stays unusable, µs: a real scheduler's
    /// dispatch gap (Slurm takes about half a second to hand a freed CPU
    /// to the next task; `jobcast bench slurm` measures it). 0 for an
    /// ideal cluster, as trace simulations assume.
    pub dispatch_gap_us: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("--slots: the cluster needs at least 1 task slot")]
    NoSlots,
    #[error("queue layout: {0}")]
    Queues(ConfigError),
    #[error("job {0} appears twice in the workload")]
    DuplicateJob(u64),
    #[error("{0} jobs never finished (a scheduler bug)")]
    Stalled(usize),
    #[error("predictions: {0}")]
    Predictions(String),
    #[error("job {job_id} arrived at {time_us} µs but got no decision")]
    NoDecision { job_id: u64, time_us: u64 },
    #[error("a decision at {time_us} µs names job {job_id}, which is not running")]
    StrayDecision { job_id: u64, time_us: u64 },
}

/// Something that happened in the simulated cluster, as the scheduler
/// reports it to whoever predicts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum SimEvent<'a> {
    /// The job arrived (at its submission time).
    Submitted(&'a SimJob),
    /// A task started.
    Scheduled {
        job: &'a SimJob,
        task: u32,
        time_us: u64,
    },
    /// A task finished after running `runtime_us`.
    Finished {
        job: &'a SimJob,
        task: u32,
        time_us: u64,
        runtime_us: u64,
    },
    /// The job's last task finished.
    Ended { job: &'a SimJob, time_us: u64 },
}

impl<'a> SimEvent<'a> {
    pub fn job(&self) -> &'a SimJob {
        match *self {
            SimEvent::Submitted(job)
            | SimEvent::Scheduled { job, .. }
            | SimEvent::Finished { job, .. }
            | SimEvent::Ended { job, .. } => job,
        }
    }

    pub fn time_us(&self) -> u64 {
        match *self {
            SimEvent::Submitted(job) => job.arrival_us(),
            SimEvent::Scheduled { time_us, .. }
            | SimEvent::Finished { time_us, .. }
            | SimEvent::Ended { time_us, .. } => time_us,
        }
    }

    /// The canonical event a scheduler would publish for it. Task events
    /// carry no machine (simulated slots are not machines) and, for DAG
    /// jobs, the task's stage.
    pub fn to_event(&self) -> Event {
        let task = |job: &SimJob, task: u32, time_us: u64, kind: TaskKind| {
            Event::Task(TaskEvent {
                time_us,
                job_id: job.job_id(),
                task_index: task,
                kind,
                machine_id: None,
                stage: job.job().stages.as_ref().and_then(|_| {
                    job.stages()
                        .iter()
                        .find(|s| s.tasks.contains(&task))
                        .map(|s| s.id)
                }),
            })
        };
        match *self {
            SimEvent::Submitted(job) => Event::JobSubmitted(job.job().clone()),
            SimEvent::Scheduled {
                job,
                task: index,
                time_us,
            } => task(job, index, time_us, TaskKind::Schedule),
            SimEvent::Finished {
                job,
                task: index,
                time_us,
                ..
            } => task(job, index, time_us, TaskKind::Finish),
            SimEvent::Ended { job, time_us } => Event::JobEnded(JobEnded {
                time_us,
                job_id: job.job_id(),
                outcome: JobOutcome::Finish,
            }),
        }
    }
}

/// The prediction side of the simulation.
pub trait Predictions {
    /// The policy whose decisions these are.
    fn kind(&self) -> PolicyKind;

    /// The events of the instant `now_us`, in order; returns the decisions
    /// they caused, each job's in the order they were made. Every
    /// [`SimEvent::Submitted`] job must get one.
    fn instant(&mut self, now_us: u64, events: &[SimEvent<'_>]) -> Result<Vec<Decision>, String>;

    /// A job's predicted size (task time, µs) where its decision carries
    /// no estimate (thin, sampling, FIFO, LAS), for its ETA and the ETAs
    /// of the jobs behind it.
    fn size_hint(&self, _job: &SimJob, _now_us: u64) -> Option<f64> {
        None
    }
}

/// Predictions by a policy called in process, learning into `history`.
pub struct InProcess<'p> {
    policy: &'p mut dyn Policy,
    history: History,
    queues: QueueConfig,
}

impl<'p> InProcess<'p> {
    pub fn new(policy: &'p mut dyn Policy, history: History, queues: QueueConfig) -> Self {
        InProcess {
            policy,
            history,
            queues,
        }
    }
}

impl Predictions for InProcess<'_> {
    fn kind(&self) -> PolicyKind {
        self.policy.kind()
    }

    fn instant(&mut self, now_us: u64, events: &[SimEvent<'_>]) -> Result<Vec<Decision>, String> {
        let mut decisions = Vec::new();
        for event in events {
            let ctx = Context {
                now_us,
                history: &self.history,
                queues: &self.queues,
            };
            match *event {
                SimEvent::Submitted(job) => decisions.push(self.policy.on_submit(job.job(), &ctx)),
                SimEvent::Scheduled { .. } => {}
                SimEvent::Finished {
                    job,
                    task,
                    time_us,
                    runtime_us,
                } => {
                    let end = TaskEnd {
                        job_id: job.job_id(),
                        task_index: task,
                        time_us,
                        runtime_us: Some(runtime_us),
                    };
                    decisions.extend(self.policy.on_task_end(&end, &ctx));
                }
                SimEvent::Ended { job, time_us } => {
                    job.learn(
                        time_us,
                        &mut self.history,
                        &self.queues,
                        std::iter::once(&mut *self.policy),
                    );
                }
            }
        }
        Ok(decisions)
    }

    /// The history's estimate of the job's size.
    fn size_hint(&self, job: &SimJob, now_us: u64) -> Option<f64> {
        eta::size_hint_us(&self.history, job.job(), now_us)
    }
}

/// What happened to one job.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobResult {
    pub job_id: u64,
    pub width: u32,
    pub arrival_us: u64,
    /// End of its last task minus its arrival.
    pub jct_us: u64,
    /// Start of its first task minus its arrival.
    pub wait_us: u64,
    /// The mean over its tasks of how long each waited to start once it
    /// could (its stage ready: at arrival, or when its parent stages
    /// ended): SLearn's Fig. 7 divides it by the mean task runtime.
    pub mean_task_wait_us: f64,
    /// JCT over its runtime on an idle cluster.
    pub normalized_jct: f64,
    /// Mean task runtime of the final decision's estimate, if it had one.
    pub estimated_mean_task_runtime_us: Option<f64>,
    pub true_mean_task_runtime_us: f64,
    /// |estimate − truth| / truth × 100, for jobs placed by an estimate.
    pub error_pct: Option<f64>,
    /// The queue the job finished in.
    pub queue: u8,
    /// The queue its true size belongs in.
    pub true_queue: u8,
    /// `queue == true_queue`, for jobs placed by an estimate.
    pub correct_queue: Option<bool>,
    /// The phase of its final decision (`thin_bypass` for thin jobs).
    pub phase: Phase,
    /// Quantiles of the mean task runtime and size, for jobs placed by an
    /// estimate.
    pub quantiles: Option<RuntimeQuantiles>,
    /// Its ETA when it was submitted: µs from submission to completion.
    pub eta_at_submission: Option<Eta>,
    /// How the ETA model saw it then: running at once, queued, overrun.
    pub eta_kind: Option<Kind>,
    /// |size − truth| / truth × 100 of the total size its ETA at
    /// submission was built on (the estimate, or the history's hint).
    pub eta_size_error_pct: Option<f64>,
    /// Its ETA refreshed half-way to the completion predicted at
    /// submission, if it had not finished by then: µs since submission
    /// the refresh was made at, and the ETA then (µs still to go).
    pub eta_half_way: Option<(u64, Eta)>,
}

/// Aggregates over the jobs of one run; `None` where there is nothing to
/// aggregate (no jobs, or no job placed by an estimate).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    pub jobs: usize,
    pub avg_jct_s: Option<f64>,
    pub p50_jct_s: Option<f64>,
    pub avg_wait_s: Option<f64>,
    pub p50_error_pct: Option<f64>,
    pub p90_error_pct: Option<f64>,
    /// Share of the jobs placed by an estimate that ran in their true queue.
    pub correct_queue_pct: Option<f64>,
    /// Share that ran in a higher-priority queue than their true size
    /// belongs in (estimate too small): they delayed truly shorter jobs.
    pub too_high_queue_pct: Option<f64>,
    /// Share that ran in a lower-priority queue (estimate too large): they
    /// were themselves delayed. The three shares sum to 100.
    pub too_low_queue_pct: Option<f64>,
    /// Jobs counted in the accuracy figures (wide and placed by an estimate).
    pub estimated_jobs: usize,
    /// Jobs that bypassed to the top queue as thin.
    pub thin_jobs: usize,
    /// Share of the jobs placed by an estimate (of any width) whose true
    /// mean task runtime is at or below the estimate's P50, P90, P95, P99.
    pub coverage_pct: Option<Quantiles>,
    /// Jobs the coverage is over.
    pub quantile_jobs: usize,
    /// What `slurm apply --walltime-quantile` would do with the quantiles
    /// of those jobs, at P90, P95 and P99.
    pub walltime: Vec<WalltimeUse>,
    /// |ETA − JCT| / JCT × 100 of the ETAs made at submission (P50 of the
    /// ETA), over every job that had one.
    pub eta_p50_error_pct: Option<f64>,
    pub eta_p90_error_pct: Option<f64>,
    /// Share of those jobs whose JCT fell in the ETA's 80 % interval.
    pub eta_interval_pct: Option<f64>,
    /// Jobs the figures at submission are over: those given an ETA then.
    pub eta_jobs: usize,
    /// The same of the ETAs refreshed half-way, against the time the job
    /// still took: over the jobs that had not finished by then.
    pub eta_half_p50_error_pct: Option<f64>,
    pub eta_half_p90_error_pct: Option<f64>,
    pub eta_half_interval_pct: Option<f64>,
    /// Jobs the half-way figures are over.
    pub eta_half_jobs: usize,
    /// P50 of the jobs' `eta_size_error_pct`: an ETA is no better than
    /// the size it is built on.
    pub eta_size_p50_error_pct: Option<f64>,
    /// Share of the ETAs at submission whose model saw the job run at once
    /// (its own size alone decides them), and their P50 error.
    pub eta_at_once_pct: Option<f64>,
    pub eta_at_once_p50_error_pct: Option<f64>,
}

/// The time limits `slurm apply --walltime-quantile LEVEL` would give the
/// jobs placed by an estimate, with its default margin (3×) and floor (5
/// minutes), against their true mean task runtime.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WalltimeUse {
    pub quantile: &'static str,
    /// Jobs given a limit.
    pub limited_jobs: usize,
    /// Jobs whose level stood at the quantile horizon: no limit, their own
    /// kept.
    pub capped_jobs: usize,
    /// Share of the limited jobs whose true mean task runtime is above the
    /// limit: their tasks around the mean would be killed.
    pub below_truth_pct: Option<f64>,
    /// P50 and P90 of limit / true mean task runtime over the limited jobs:
    /// how much longer than needed a limit holds a job's slots in a
    /// scheduler's backfill plan.
    pub p50_limit_over_truth: Option<f64>,
    pub p90_limit_over_truth: Option<f64>,
}

impl WalltimeUse {
    fn of(jobs: &[(&JobResult, RuntimeQuantiles)], quantile: usize) -> WalltimeUse {
        let walltime = Walltime::with_defaults(quantile);
        let mut ratios = Vec::new();
        let (mut capped, mut below) = (0, 0);
        for (job, q) in jobs {
            match walltime.limit_from(q) {
                Some(limit_s) => {
                    let truth_s = job.true_mean_task_runtime_us / 1e6;
                    below += usize::from(truth_s > limit_s as f64);
                    ratios.push(limit_s as f64 / truth_s.max(1e-6));
                }
                None => capped += 1,
            }
        }
        ratios.sort_by(f64::total_cmp);
        WalltimeUse {
            quantile: walltime.quantile_name(),
            limited_jobs: ratios.len(),
            capped_jobs: capped,
            below_truth_pct: (!ratios.is_empty())
                .then(|| below as f64 * 100.0 / ratios.len() as f64),
            p50_limit_over_truth: percentile(&ratios, 50.0),
            p90_limit_over_truth: percentile(&ratios, 90.0),
        }
    }
}

impl Summary {
    /// Aggregate `jobs`; errors and queue placement over the jobs at least
    /// `accuracy_min_width` wide.
    pub fn of(jobs: &[JobResult], accuracy_min_width: u32) -> Summary {
        let secs = |us: u64| us as f64 / 1e6;
        let mut jct: Vec<f64> = jobs.iter().map(|j| secs(j.jct_us)).collect();
        jct.sort_by(f64::total_cmp);
        let wide = || jobs.iter().filter(|j| j.width >= accuracy_min_width);
        let mut errors: Vec<f64> = wide().filter_map(|j| j.error_pct).collect();
        errors.sort_by(f64::total_cmp);
        // Queue 0 has the highest priority: a queue below the true one
        // (Ordering::Less) is too high.
        let placed: Vec<Ordering> = wide()
            .filter(|j| j.correct_queue.is_some())
            .map(|j| j.queue.cmp(&j.true_queue))
            .collect();
        let share = |o: Ordering| {
            (!placed.is_empty()).then(|| {
                placed.iter().filter(|&&p| p == o).count() as f64 * 100.0 / placed.len() as f64
            })
        };
        let mean = |v: &[f64]| (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64);
        let waits: Vec<f64> = jobs.iter().map(|j| secs(j.wait_us)).collect();
        let with_quantiles: Vec<(&JobResult, RuntimeQuantiles)> = jobs
            .iter()
            .filter_map(|j| j.quantiles.map(|q| (j, q)))
            .collect();
        let walltime = (1..Quantiles::LEVELS.len())
            .map(|quantile| WalltimeUse::of(&with_quantiles, quantile))
            .collect();
        let coverage_pct = (!with_quantiles.is_empty()).then(|| {
            let covered = |level: usize| {
                let n = with_quantiles
                    .iter()
                    .filter(|(j, q)| {
                        j.true_mean_task_runtime_us <= q.mean_task_runtime_us.to_array()[level]
                    })
                    .count();
                n as f64 * 100.0 / with_quantiles.len() as f64
            };
            Quantiles::from_array([covered(0), covered(1), covered(2), covered(3)])
        });
        let at_submission: Vec<(f64, Eta)> = jobs
            .iter()
            .filter_map(|j| Some((j.jct_us as f64, j.eta_at_submission?)))
            .collect();
        let half_way: Vec<(f64, Eta)> = jobs
            .iter()
            .filter_map(|j| {
                let (at, eta) = j.eta_half_way?;
                Some((j.jct_us.saturating_sub(at) as f64, eta))
            })
            .collect();
        let (eta_p50_error_pct, eta_p90_error_pct, eta_interval_pct) = eta_accuracy(&at_submission);
        let at_once: Vec<(f64, Eta)> = jobs
            .iter()
            .filter(|j| j.eta_kind == Some(Kind::AtOnce))
            .filter_map(|j| Some((j.jct_us as f64, j.eta_at_submission?)))
            .collect();
        let mut size_errors: Vec<f64> = jobs.iter().filter_map(|j| j.eta_size_error_pct).collect();
        size_errors.sort_by(f64::total_cmp);
        let (eta_half_p50_error_pct, eta_half_p90_error_pct, eta_half_interval_pct) =
            eta_accuracy(&half_way);
        Summary {
            jobs: jobs.len(),
            avg_jct_s: mean(&jct),
            p50_jct_s: percentile(&jct, 50.0),
            avg_wait_s: mean(&waits),
            p50_error_pct: percentile(&errors, 50.0),
            p90_error_pct: percentile(&errors, 90.0),
            correct_queue_pct: share(Ordering::Equal),
            too_high_queue_pct: share(Ordering::Less),
            too_low_queue_pct: share(Ordering::Greater),
            estimated_jobs: errors.len(),
            thin_jobs: jobs.iter().filter(|j| j.phase == Phase::ThinBypass).count(),
            coverage_pct,
            quantile_jobs: with_quantiles.len(),
            walltime,
            eta_p50_error_pct,
            eta_p90_error_pct,
            eta_interval_pct,
            eta_jobs: at_submission.len(),
            eta_half_p50_error_pct,
            eta_half_p90_error_pct,
            eta_half_interval_pct,
            eta_half_jobs: half_way.len(),
            eta_size_p50_error_pct: percentile(&size_errors, 50.0),
            eta_at_once_pct: (!at_submission.is_empty())
                .then(|| at_once.len() as f64 * 100.0 / at_submission.len() as f64),
            eta_at_once_p50_error_pct: eta_accuracy(&at_once).0,
        }
    }
}

/// P50 and P90 of |ETA − actual| / actual × 100 over (actual µs, ETA)
/// pairs, and the share of actuals inside the ETAs' 80 % intervals.
fn eta_accuracy(pairs: &[(f64, Eta)]) -> (Option<f64>, Option<f64>, Option<f64>) {
    let mut errors: Vec<f64> = pairs
        .iter()
        .map(|(actual, eta)| (eta.p50_us - actual).abs() / actual.max(1.0) * 100.0)
        .collect();
    errors.sort_by(f64::total_cmp);
    let inside = (!pairs.is_empty()).then(|| {
        let n = pairs
            .iter()
            .filter(|(actual, eta)| (eta.p10_us..=eta.p90_us).contains(actual))
            .count();
        n as f64 * 100.0 / pairs.len() as f64
    });
    (percentile(&errors, 50.0), percentile(&errors, 90.0), inside)
}

/// Speedup of a run over a baseline run: the baseline's average JCT over
/// the run's (SLearn §5.2.1), `None` when either is undefined or zero.
pub fn speedup(run: &Summary, baseline: &Summary) -> Option<f64> {
    match (run.avg_jct_s, baseline.avg_jct_s) {
        (Some(r), Some(b)) if r > 0.0 => Some(b / r),
        _ => None,
    }
}

/// One policy's run over a workload.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimReport {
    pub policy: PolicyKind,
    pub slots: u32,
    pub summary: Summary,
    /// In order of arrival (then job id).
    pub jobs: Vec<JobResult>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskState {
    Waiting,
    Running { start_us: u64 },
    Done,
}

/// A job's state during the run.
struct Run<'a> {
    spec: &'a SimJob,
    phase: Phase,
    queue: u8,
    enter_us: u64,
    estimate: Option<Estimate>,
    pilot: Vec<bool>,
    task: Vec<TaskState>,
    stage_of: Vec<u32>,
    children: Vec<Vec<usize>>,
    /// Unfinished tasks per stage.
    stage_left: Vec<u32>,
    /// Unfinished parent stages per stage.
    parents_left: Vec<u32>,
    /// Waiting tasks whose stage is ready, and the pilots among them.
    ready: BTreeSet<u32>,
    pilots_ready: BTreeSet<u32>,
    running: u32,
    unfinished: u32,
    first_start_us: Option<u64>,
    /// When each stage's tasks could start (set when it is released).
    stage_ready_us: Vec<u64>,
    /// Σ over started tasks of start − their stage's ready time.
    task_wait_us: u128,
    /// Attained service is `done_us + running · now − running_starts_us`.
    done_us: u128,
    running_starts_us: u128,
    /// Invalidates LAS threshold crossings computed before the last change.
    las_version: u64,
    /// The key this job holds in its queue's runnable set, if any.
    queued: Option<(u8, u64)>,
    in_wc: bool,
    /// Has been put in a queue by a first decision.
    placed: bool,
    /// Its predicted size where no estimate gives one.
    size_hint_us: Option<f64>,
    /// At submission: its queue, the model's predicted JCT (µs) and the
    /// ETA made of it, and the size (µs) the model took for it.
    eta: Option<(Predicted, Eta, f64)>,
    /// Refreshed half-way: its queue then, when (µs), the model's
    /// predicted time still to go and the ETA made of it.
    half_eta: Option<(u64, Predicted, Eta)>,
}

impl<'a> Run<'a> {
    fn new(spec: &'a SimJob) -> Self {
        let stages = spec.stages();
        let width = spec.runtimes_us().len();
        let mut stage_of = vec![0u32; width];
        let mut children = vec![Vec::new(); stages.len()];
        for (i, s) in stages.iter().enumerate() {
            for t in s.tasks.clone() {
                stage_of[t as usize] = i as u32;
            }
            for &p in &s.parents {
                children[p].push(i);
            }
        }
        Run {
            spec,
            phase: Phase::Arrival,
            queue: 0,
            enter_us: spec.arrival_us(),
            estimate: None,
            pilot: vec![false; width],
            task: vec![TaskState::Waiting; width],
            stage_of,
            children,
            stage_left: stages.iter().map(|s| s.tasks.len() as u32).collect(),
            parents_left: stages.iter().map(|s| s.parents.len() as u32).collect(),
            ready: BTreeSet::new(),
            pilots_ready: BTreeSet::new(),
            running: 0,
            unfinished: width as u32,
            first_start_us: None,
            stage_ready_us: vec![0; stages.len()],
            task_wait_us: 0,
            done_us: 0,
            running_starts_us: 0,
            las_version: 0,
            queued: None,
            in_wc: false,
            placed: false,
            size_hint_us: None,
            eta: None,
            half_eta: None,
        }
    }

    fn attained_us(&self, now: u64) -> u128 {
        self.done_us + self.running_attained_us(now)
    }

    /// The part of it its running tasks have run.
    fn running_attained_us(&self, now: u64) -> u128 {
        u128::from(self.running) * u128::from(now) - self.running_starts_us
    }

    /// Stage `first` became ready at `now`: its tasks become runnable;
    /// stages without tasks finish at once and release their children.
    fn release(&mut self, first: usize, now: u64) {
        let mut work = vec![first];
        while let Some(s) = work.pop() {
            self.stage_ready_us[s] = now;
            if self.stage_left[s] == 0 {
                for c in self.children[s].clone() {
                    self.parents_left[c] -= 1;
                    if self.parents_left[c] == 0 {
                        work.push(c);
                    }
                }
            } else {
                for t in self.spec.stages()[s].tasks.clone() {
                    self.ready.insert(t);
                    if self.pilot[t as usize] {
                        self.pilots_ready.insert(t);
                    }
                }
            }
        }
    }

    /// A task the job's queue may start now.
    fn queue_task(&self) -> Option<u32> {
        if self.phase == Phase::Sampling {
            self.pilots_ready.first().copied()
        } else {
            self.ready.first().copied()
        }
    }

    /// A task work conservation may start now.
    fn spare_task(&self) -> Option<u32> {
        if self.phase != Phase::Sampling {
            return None;
        }
        self.ready
            .iter()
            .copied()
            .find(|&t| !self.pilot[t as usize])
    }
}

struct Sim<'a> {
    queues: QueueConfig,
    slots: u32,
    /// The ETA model's learnt bias and spread, at submission and half-way
    /// (apart: less of the future is unknown half-way).
    etas: EtaCalibration,
    half_etas: EtaCalibration,
    /// (time, run) of the half-way ETA refreshes still to make.
    refreshes: BinaryHeap<Reverse<(u64, usize)>>,
    free: u32,
    runs: Vec<Run<'a>>,
    /// Per queue: jobs with a runnable task, by (entry time, job id).
    runnable: Vec<BTreeSet<(u64, u64, usize)>>,
    /// Sampling-phase jobs with runnable non-pilot tasks, by arrival.
    spare: BTreeSet<(u64, u64, usize)>,
    /// Running tasks per queue.
    in_use: Vec<u32>,
    /// (end, job id, task, run) of running tasks.
    completions: BinaryHeap<Reverse<(u64, u64, u32, usize)>>,
    dispatch_gap_us: u64,
    /// When slots left by finished tasks become usable again.
    releases: BinaryHeap<Reverse<u64>>,
    /// (time, job id, run, version) at which a LAS job crosses its
    /// queue's upper threshold.
    crossings: BinaryHeap<Reverse<(u64, u64, usize, u64)>>,
    /// Tasks started by the last scheduling pass, to report with the next
    /// instant's events.
    started: Vec<SimEvent<'a>>,
    results: Vec<Option<JobResult>>,
}

/// Replay `jobs` (any order; their arrivals are their submission times) on
/// a cluster of `config.slots` slots, with `policy` placing the jobs and
/// `history` (trained beforehand, e.g. by
/// [`Workload::train`](crate::workload::Workload::train)) learning from
/// every job that finishes.
pub fn simulate(
    jobs: &[SimJob],
    history: History,
    policy: &mut dyn Policy,
    config: &SimConfig,
) -> Result<SimReport, SimError> {
    let mut predictions = InProcess::new(policy, history, config.queues.clone());
    simulate_with(jobs, &mut predictions, config)
}

/// [`simulate`] with the decisions coming from `predictions`.
pub fn simulate_with(
    jobs: &[SimJob],
    predictions: &mut dyn Predictions,
    config: &SimConfig,
) -> Result<SimReport, SimError> {
    if config.slots == 0 {
        return Err(SimError::NoSlots);
    }
    config.queues.validate().map_err(SimError::Queues)?;
    let mut order: Vec<&SimJob> = jobs.iter().collect();
    order.sort_by_key(|j| (j.arrival_us(), j.job_id()));
    let mut ids: Vec<u64> = order.iter().map(|j| j.job_id()).collect();
    ids.sort_unstable();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(SimError::DuplicateJob(w[0]));
    }
    let levels = usize::from(config.queues.levels);
    let mut sim = Sim {
        queues: config.queues.clone(),
        slots: config.slots,
        etas: EtaCalibration::default(),
        half_etas: EtaCalibration::default(),
        refreshes: BinaryHeap::new(),
        free: config.slots,
        runs: order.iter().map(|j| Run::new(j)).collect(),
        runnable: vec![BTreeSet::new(); levels],
        spare: BTreeSet::new(),
        in_use: vec![0; levels],
        completions: BinaryHeap::new(),
        dispatch_gap_us: config.dispatch_gap_us,
        releases: BinaryHeap::new(),
        crossings: BinaryHeap::new(),
        started: Vec::new(),
        results: vec![None; order.len()],
    };
    let run_of: HashMap<u64, usize> = order
        .iter()
        .enumerate()
        .map(|(r, j)| (j.job_id(), r))
        .collect();
    let mut next = 0;
    let mut events: Vec<SimEvent<'_>> = Vec::new();
    let (mut ended, mut arrived) = (Vec::new(), Vec::new());
    loop {
        let next_end = sim.completions.peek().map(|Reverse(c)| c.0);
        let next_arrival = order.get(next).map(|j| j.arrival_us());
        let next_event = match (next_end, next_arrival) {
            (Some(e), Some(a)) => Some(e.min(a)),
            (e, a) => e.or(a),
        };
        let next_release = sim.releases.peek().map(|Reverse(t)| *t);
        let next_change = match (next_event, next_release) {
            (Some(e), Some(r)) => Some(e.min(r)),
            (e, r) => e.or(r),
        };
        // A refresh only reads the state, so it is no instant of its own:
        // the policy and the scheduler see the same instants without it.
        let next_refresh = sim.refreshes.peek().map(|Reverse(r)| r.0);
        if let Some(at) = next_refresh.filter(|&at| next_change.is_none_or(|c| at < c)) {
            sim.refresh_etas(at, next);
            continue;
        }
        // Nor is a slot coming back: the policy has nothing to learn, the
        // scheduler starts what it can.
        if let Some(at) = next_release.filter(|&at| next_event.is_none_or(|e| at < e)) {
            sim.release_slots(at);
            sim.schedule(at);
            continue;
        }
        let Some(now) = next_event else {
            break;
        };
        events.clear();
        events.append(&mut sim.started);
        while let Some(&Reverse((end, _, task, run))) = sim.completions.peek() {
            if end != now {
                break;
            }
            sim.completions.pop();
            if let Some(finished) = sim.finish_task(run, task, now) {
                events.push(finished);
                if sim.runs[run].unfinished == 0 {
                    events.push(SimEvent::Ended {
                        job: sim.runs[run].spec,
                        time_us: now,
                    });
                    ended.push(run);
                }
            }
        }
        while next < order.len() && order[next].arrival_us() == now {
            sim.runs[next].size_hint_us = predictions.size_hint(order[next], now);
            sim.arrive(next);
            events.push(SimEvent::Submitted(order[next]));
            arrived.push(next);
            next += 1;
        }
        let decisions = predictions
            .instant(now, &events)
            .map_err(SimError::Predictions)?;
        for decision in decisions {
            match run_of.get(&decision.job_id) {
                Some(&r) if r < next && sim.results[r].is_none() => sim.apply(r, decision, now),
                _ => {
                    return Err(SimError::StrayDecision {
                        job_id: decision.job_id,
                        time_us: now,
                    });
                }
            }
        }
        if let Some(&r) = arrived.iter().find(|&&r| !sim.runs[r].placed) {
            return Err(SimError::NoDecision {
                job_id: sim.runs[r].spec.job_id(),
                time_us: now,
            });
        }
        sim.predict_etas(&arrived, next, now);
        arrived.clear();
        for r in ended.drain(..) {
            sim.complete(r, now);
        }
        sim.due_crossings(now);
        sim.release_slots(now);
        sim.schedule(now);
    }
    let unfinished = sim.results.iter().filter(|r| r.is_none()).count();
    if unfinished > 0 {
        return Err(SimError::Stalled(unfinished));
    }
    let jobs: Vec<JobResult> = sim.results.into_iter().flatten().collect();
    Ok(SimReport {
        policy: predictions.kind(),
        slots: config.slots,
        summary: Summary::of(&jobs, config.accuracy_min_width),
        jobs,
    })
}

impl<'a> Sim<'a> {
    /// A run as the ETA model sees it at `now`, if its size is predicted.
    fn queued(r: &Run<'_>, now: u64) -> Option<Queued> {
        let size_us = r.estimate.map(|e| e.size_us).or(r.size_hint_us)?;
        Some(Queued::from(JobProgress {
            job_id: r.spec.job_id(),
            queue: r.queue,
            since_us: r.enter_us,
            size_us,
            width: r.spec.width(),
            unfinished: r.unfinished,
            running: r.running,
            attained_us: r.attained_us(now) as f64,
            running_attained_us: r.running_attained_us(now) as f64,
            cpus_per_task: 1.0,
        }))
    }

    /// The unfinished jobs of the `next` runs that have arrived, as jobcast
    /// holds them at `now`: queues, predicted sizes less attained service,
    /// unfinished tasks.
    fn live(&self, next: usize, now: u64) -> Vec<Queued> {
        self.runs[..next]
            .iter()
            .filter(|r| r.unfinished > 0)
            .filter_map(|r| Self::queued(r, now))
            .collect()
    }

    /// The ETA of each job in `arrived`, from the queue state of the `next`
    /// runs that have arrived; a refresh is due half-way to it.
    fn predict_etas(&mut self, arrived: &[usize], next: usize, now: u64) {
        let live = self.live(next, now);
        for &r in arrived {
            if let Some(target) = Self::queued(&self.runs[r], now) {
                let predicted = eta::predict(&target, live.iter().copied(), f64::from(self.slots));
                let eta = self.etas.eta(predicted);
                self.runs[r].eta = Some((predicted, eta, target.remaining_work_us));
                let half = (eta.p50_us / 2.0).round();
                if half >= 1.0 && half < (u64::MAX - now) as f64 {
                    self.refreshes.push(Reverse((now + half as u64, r)));
                }
            }
        }
    }

    /// The half-way ETAs due at `at` of the jobs not yet finished.
    fn refresh_etas(&mut self, at: u64, next: usize) {
        let mut due = Vec::new();
        while let Some(&Reverse((t, r))) = self.refreshes.peek() {
            if t != at {
                break;
            }
            self.refreshes.pop();
            if self.runs[r].unfinished > 0 {
                due.push(r);
            }
        }
        if due.is_empty() {
            return;
        }
        let live = self.live(next, at);
        for r in due {
            if let Some(target) = Self::queued(&self.runs[r], at) {
                let predicted = eta::predict(&target, live.iter().copied(), f64::from(self.slots));
                let eta = self.half_etas.eta(predicted);
                self.runs[r].half_eta = Some((at, predicted, eta));
            }
        }
    }

    /// The job's root stages become runnable; it is placed by its first
    /// decision.
    fn arrive(&mut self, r: usize) {
        let roots: Vec<usize> = (0..self.runs[r].parents_left.len())
            .filter(|&s| self.runs[r].parents_left[s] == 0)
            .collect();
        let now = self.runs[r].spec.arrival_us();
        for s in roots {
            self.runs[r].release(s, now);
        }
    }

    /// Act on a decision: phase, estimate, pilots and queue; a job that
    /// changes queue re-enters at the back of the new one.
    fn apply(&mut self, r: usize, decision: Decision, now: u64) {
        let levels = self.queues.levels;
        let run = &mut self.runs[r];
        run.phase = decision.phase;
        run.estimate = decision.estimate;
        run.pilot.fill(false);
        for p in decision.pilots {
            if let Some(flag) = run.pilot.get_mut(p as usize) {
                *flag = true;
            }
        }
        run.pilots_ready = run
            .ready
            .iter()
            .copied()
            .filter(|&t| run.pilot[t as usize])
            .collect();
        if run.phase == Phase::AttainedService {
            self.las_update(r, now);
        } else {
            self.move_to(r, decision.queue.min(levels - 1), now);
        }
        self.refresh(r);
    }

    /// Put the job in `queue`, at the back, with its running tasks; a job
    /// already there keeps its place.
    fn move_to(&mut self, r: usize, queue: u8, now: u64) {
        let run = &mut self.runs[r];
        if run.placed && run.queue == queue {
            return;
        }
        self.in_use[usize::from(run.queue)] -= run.running;
        self.in_use[usize::from(queue)] += run.running;
        run.queue = queue;
        run.enter_us = now;
        run.placed = true;
    }

    /// Put a LAS job in the queue of its attained service now and compute
    /// when, at its current number of running tasks, it crosses that
    /// queue's upper threshold.
    fn las_update(&mut self, r: usize, now: u64) {
        let attained = self.runs[r].attained_us(now) as f64;
        let queue = self.queues.queue_for(attained);
        self.move_to(r, queue, now);
        let run = &mut self.runs[r];
        run.las_version += 1;
        if run.running > 0 && queue + 1 < self.queues.levels {
            let need = self.queues.upper_us(queue) - attained;
            let dt = (need / f64::from(run.running)).ceil().max(1.0);
            let at = now.saturating_add(dt.min(u64::MAX as f64) as u64);
            self.crossings
                .push(Reverse((at, run.spec.job_id(), r, run.las_version)));
        }
    }

    fn due_crossings(&mut self, now: u64) {
        while let Some(&Reverse((at, _, r, version))) = self.crossings.peek() {
            if at > now {
                break;
            }
            self.crossings.pop();
            let run = &self.runs[r];
            if version == run.las_version
                && run.phase == Phase::AttainedService
                && run.unfinished > 0
            {
                self.las_update(r, now);
                self.refresh(r);
            }
        }
    }

    /// Bring the job's membership of the runnable sets up to date.
    fn refresh(&mut self, r: usize) {
        let run = &mut self.runs[r];
        let id = run.spec.job_id();
        let want = run.queue_task().map(|_| (run.queue, run.enter_us));
        if want != run.queued {
            if let Some((q, t)) = run.queued {
                self.runnable[usize::from(q)].remove(&(t, id, r));
            }
            if let Some((q, t)) = want {
                self.runnable[usize::from(q)].insert((t, id, r));
            }
            run.queued = want;
        }
        let spare = run.spare_task().is_some();
        if spare != run.in_wc {
            let key = (run.spec.arrival_us(), id, r);
            if spare {
                self.spare.insert(key);
            } else {
                self.spare.remove(&key);
            }
            run.in_wc = spare;
        }
    }

    /// Fill free slots: weighted sharing across queues, then work
    /// conservation.
    fn schedule(&mut self, now: u64) {
        while self.free > 0 {
            let mut best: Option<(f64, usize)> = None;
            for (q, set) in self.runnable.iter().enumerate() {
                if set.is_empty() {
                    continue;
                }
                let share = f64::from(self.in_use[q]) / self.queues.weight(q as u8);
                if best.is_none_or(|(b, _)| share < b) {
                    best = Some((share, q));
                }
            }
            let pick = match best {
                Some((_, q)) => self.runnable[q]
                    .first()
                    .and_then(|&(_, _, r)| Some((r, self.runs[r].queue_task()?))),
                None => self
                    .spare
                    .first()
                    .and_then(|&(_, _, r)| Some((r, self.runs[r].spare_task()?))),
            };
            let Some((r, task)) = pick else { break };
            self.start_task(r, task, now);
        }
    }

    fn start_task(&mut self, r: usize, task: u32, now: u64) {
        let run = &mut self.runs[r];
        run.task[task as usize] = TaskState::Running { start_us: now };
        run.ready.remove(&task);
        run.pilots_ready.remove(&task);
        run.running += 1;
        run.running_starts_us += u128::from(now);
        run.first_start_us.get_or_insert(now);
        let ready = run.stage_ready_us[run.stage_of[task as usize] as usize];
        run.task_wait_us += u128::from(now.saturating_sub(ready));
        let end = now.saturating_add(run.spec.runtimes_us()[task as usize]);
        self.completions
            .push(Reverse((end, run.spec.job_id(), task, r)));
        self.started.push(SimEvent::Scheduled {
            job: run.spec,
            task,
            time_us: now,
        });
        self.in_use[usize::from(run.queue)] += 1;
        self.free -= 1;
        if run.phase == Phase::AttainedService {
            self.las_update(r, now);
        }
        self.refresh(r);
    }

    /// Make the slots due back by `now` usable.
    fn release_slots(&mut self, now: u64) {
        while self.releases.peek().is_some_and(|&Reverse(at)| at <= now) {
            self.releases.pop();
            self.free += 1;
        }
    }

    /// The task's end, for the predictions; `None` if it was not running.
    fn finish_task(&mut self, r: usize, task: u32, now: u64) -> Option<SimEvent<'a>> {
        let run = &mut self.runs[r];
        let TaskState::Running { start_us } = run.task[task as usize] else {
            return None;
        };
        run.task[task as usize] = TaskState::Done;
        run.running -= 1;
        run.unfinished -= 1;
        run.running_starts_us -= u128::from(start_us);
        run.done_us += u128::from(now - start_us);
        self.in_use[usize::from(run.queue)] -= 1;
        if self.dispatch_gap_us == 0 {
            self.free += 1;
        } else {
            self.releases.push(Reverse(now + self.dispatch_gap_us));
        }
        let stage = run.stage_of[task as usize] as usize;
        run.stage_left[stage] -= 1;
        if run.stage_left[stage] == 0 {
            for c in run.children[stage].clone() {
                run.parents_left[c] -= 1;
                if run.parents_left[c] == 0 {
                    run.release(c, now);
                }
            }
        }
        if run.phase == Phase::AttainedService {
            self.las_update(r, now);
        }
        self.refresh(r);
        Some(SimEvent::Finished {
            job: self.runs[r].spec,
            task,
            time_us: now,
            runtime_us: now - start_us,
        })
    }

    /// Record the result of a job whose last task ended at `now`, once the
    /// instant's decisions are applied.
    fn complete(&mut self, r: usize, now: u64) {
        let run = &self.runs[r];
        let spec = run.spec;
        let arrival = spec.arrival_us();
        let jct_us = now - arrival;
        let normalized_jct = spec.normalized_jct(now);
        let true_mean = spec.mean_task_runtime_us();
        let placed = run.phase == Phase::Estimated;
        let estimate = run.estimate.map(|e| e.mean_task_runtime_us);
        let error_pct = estimate
            .filter(|_| placed)
            .map(|e| (e - true_mean).abs() / true_mean * 100.0);
        let true_queue = self.queues.queue_for(spec.total_task_time_us() as f64);
        let (eta, half_eta) = (run.eta, run.half_eta);
        if let Some((predicted, _, _)) = eta {
            self.etas.learn(predicted, jct_us as f64);
        }
        if let Some((at, predicted, _)) = half_eta {
            self.half_etas.learn(predicted, (now - at) as f64);
        }
        let run = &self.runs[r];
        self.results[r] = Some(JobResult {
            job_id: spec.job_id(),
            width: spec.width(),
            arrival_us: arrival,
            jct_us,
            wait_us: run.first_start_us.unwrap_or(now) - arrival,
            mean_task_wait_us: run.task_wait_us as f64 / f64::from(spec.width().max(1)),
            normalized_jct,
            estimated_mean_task_runtime_us: estimate,
            true_mean_task_runtime_us: true_mean,
            error_pct,
            queue: run.queue,
            true_queue,
            correct_queue: (placed && estimate.is_some()).then_some(run.queue == true_queue),
            phase: run.phase,
            quantiles: run.estimate.filter(|_| placed).and_then(|e| e.quantiles),
            eta_at_submission: eta.map(|(_, e, _)| e),
            eta_kind: eta.map(|(p, _, _)| p.kind),
            eta_size_error_pct: eta.map(|(_, _, size)| {
                let truth = spec.total_task_time_us() as f64;
                (size - truth).abs() / truth.max(1.0) * 100.0
            }),
            eta_half_way: half_eta.map(|(at, _, e)| (at - arrival, e)),
        });
    }
}

/// A job placed by an estimate in `queue` whose size belongs in
/// `true_queue`: the base of tests' results.
#[cfg(test)]
pub(crate) fn placed(width: u32, queue: u8, true_queue: u8) -> JobResult {
    JobResult {
        job_id: 0,
        width,
        arrival_us: 0,
        jct_us: 1_000_000,
        wait_us: 0,
        mean_task_wait_us: 0.0,
        normalized_jct: 1.0,
        estimated_mean_task_runtime_us: Some(1.0),
        true_mean_task_runtime_us: 1.0,
        error_pct: Some(0.0),
        queue,
        true_queue,
        correct_queue: Some(queue == true_queue),
        phase: Phase::Estimated,
        quantiles: None,
        eta_at_submission: None,
        eta_kind: None,
        eta_size_error_pct: None,
        eta_half_way: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_queues_split_into_too_high_and_too_low() {
        let jobs = [
            placed(5, 2, 2),
            placed(5, 0, 3),
            placed(5, 1, 2),
            placed(5, 4, 2),
            placed(5, 3, 3),
            placed(5, 2, 1),
            placed(5, 5, 4),
            placed(5, 6, 6),
            // Too narrow to count, and not placed by an estimate.
            placed(2, 0, 9),
            JobResult {
                estimated_mean_task_runtime_us: None,
                error_pct: None,
                correct_queue: None,
                phase: Phase::ThinBypass,
                ..placed(5, 0, 9)
            },
        ];
        let s = Summary::of(&jobs, 3);
        assert_eq!(s.correct_queue_pct, Some(3.0 / 8.0 * 100.0));
        assert_eq!(s.too_high_queue_pct, Some(2.0 / 8.0 * 100.0));
        assert_eq!(s.too_low_queue_pct, Some(3.0 / 8.0 * 100.0));
        let none = Summary::of(&jobs[8..], 3);
        assert_eq!(
            (
                none.correct_queue_pct,
                none.too_high_queue_pct,
                none.too_low_queue_pct
            ),
            (None, None, None)
        );
    }
}
