//! When a pending job should start: the question HPC users ask, which
//! Slurm answers (`squeue --start`) by playing its backfilling forward on
//! the time limits. jobcast plays the same backfilling
//! ([`crate::hpc::backfill`]) forward on the predicted runtimes: every
//! live job of the job's cluster, rigid (all its unfinished tasks at once,
//! each on its CPU request), the running ones to their ends, the pending
//! ones in submission order, and no further arrivals.
//!
//! It plays the schedule [`crate::hpc::starts::SAMPLES`] times, each on
//! runtimes drawn from every job's predicted quantiles (a running job's
//! given how long it has run), and answers each job's median start (the
//! estimate) and P90 (the late end of the interval): a start is an order
//! statistic of the jobs' ends, which one schedule on their medians
//! misplaces ([`crate::hpc::starts`]). Both are read among the samples
//! where real starts fell: each waiting job's samples of its first answer
//! are kept until it starts, and where its start fell among them is
//! learnt ([`crate::hpc::starts::Sampled`]). In each schedule the site's
//! scheduler decides on the jobs' medians (and their higher quantiles as
//! they outlive them), while the jobs run as drawn; and the draws follow
//! where the ended jobs' runtimes fell in their spreads, learnt as jobs end
//! and kept in the engine's snapshot. Set by `engine.starts.backfill` (the
//! site's discipline: Slurm's backfill plugin reserves for every pending
//! job it tests, `conservative`); off by default, since the model of
//! rigid jobs suits HPC sites, not clusters of many-task jobs. The
//! estimate is the one of the job's decision, as of its `at_us`. A job
//! that waits without events of its own has its start looked at again
//! every `engine.starts.refresh_ms` of event time (`pacing.rs`), and its
//! decision goes out again, same version, when the start has [`moved`].
//!
//! The cost falls on each decision of a pending job: one pass over the
//! live jobs, then the projection, played once per sample, the samples on
//! `engine.starts.threads` threads. Each sample plays the schedule event
//! by event (every end, every expected end that passes) until the job
//! starts: about 2(k + r) events for k jobs ahead and r running. An event
//! at which no waiting job is narrow enough to start costs nothing more;
//! at the others EASY passes over the queue (O(n log n) for n waiting),
//! and conservative reserves the queue's jobs in order until too few
//! processors are free for any later one to start now, each reservation
//! a pass over the profile's steps: O(k · (r + k)) at worst
//! (`docs/reproduction.md` times it on the logs: on HPC2N, whose queues
//! reach thousands, a conservative run takes 1,052 s for 71,466 answers,
//! the simulation itself included).
//! The starts looked at again at one event share one projection per
//! cluster, played until each of them has started.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::decision::{PolicyKind, Quantiles, Start};
use crate::hpc::backfill::{Backfill, Discipline, Told};
use crate::hpc::starts::{self as sampled, Fit, Queued, Running, Sampled, Seen, Spread};
use jobcast_ingest::config::ConfigError;

use super::LiveJob;
use super::clusters::Clusters;

/// `engine.starts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StartSettings {
    /// The site's backfilling, `easy` or `conservative`; unset: no start
    /// estimates.
    pub backfill: Option<BackfillKind>,
    /// The processors of each cluster; unset: the CPUs of its machines up,
    /// as machine events report them.
    pub cpus: Option<u32>,
    /// How often, in event time, a pending job's published start is looked
    /// at again; 0: never.
    pub refresh_ms: u64,
    /// What the site's scheduler plans on.
    pub plans_on: PlansOn,
    /// The threads a projection's schedules are played on (the answers do
    /// not depend on it).
    pub threads: usize,
}

impl Default for StartSettings {
    fn default() -> Self {
        StartSettings {
            backfill: None,
            cpus: None,
            refresh_ms: 300_000,
            plans_on: PlansOn::Limits,
            threads: 2,
        }
    }
}

/// The runtimes a site's scheduler plans its backfilling on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PlansOn {
    /// The jobs' time limits, as Slurm's backfill plugin does unless they
    /// are set from jobcast's estimates.
    Limits,
    /// jobcast's estimates: their median, then their P90, P95 and P99 as
    /// a running job outlives each, as a site whose walltimes jobcast sets
    /// (`slurm apply`) or whose scheduler reads them does.
    Estimates,
}

/// The least move of a start that is published again.
const MOVE_AT_LEAST_US: u64 = 60_000_000;

/// Whether a waiting job's start estimate moved enough from `published`
/// to `now` to publish it again: its median or its P90 by a minute and by
/// a tenth of the wait `published` foresaw, so that a long wait is not
/// republished for every small change and a short one is not left a
/// minute wrong; or it has none any more.
pub(super) fn moved(published: &Start, now: Option<&Start>) -> bool {
    let Some(now) = now else {
        return true;
    };
    let wait = published.p50_us.saturating_sub(published.at_us);
    let least = MOVE_AT_LEAST_US.max(wait / 10);
    published.p50_us.abs_diff(now.p50_us) >= least || published.p90_us.abs_diff(now.p90_us) >= least
}

/// Whether `job` waits for processors: no task of it runs, and not all
/// have finished.
pub(super) fn waits(job: &LiveJob) -> bool {
    job.progress.running_since().is_none() && holds(job)
}

/// A site's backfilling discipline, by its configuration name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackfillKind {
    Easy,
    Conservative,
}

impl StartSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.cpus == Some(0) {
            return Err(ConfigError::new(
                "cpus",
                "must be at least 1 (leave it unset to take the CPUs from machine events)",
            ));
        }
        if self.threads == 0 {
            return Err(ConfigError::new("threads", "must be at least 1"));
        }
        if self.backfill.is_none() && self.cpus.is_some() {
            return Err(ConfigError::new(
                "backfill",
                "cpus is set but backfill is not: set backfill to easy or conservative to give \
                 start estimates",
            ));
        }
        Ok(())
    }

    fn discipline(&self) -> Option<Discipline> {
        Some(match self.backfill? {
            BackfillKind::Easy => Discipline::Easy(Backfill::Fcfs),
            BackfillKind::Conservative => Discipline::Conservative,
        })
    }
}

/// What the start estimates learn, as a snapshot keeps it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct StartState {
    /// Where the ended jobs' runtimes fell in the spreads the projection
    /// draws from ([`sampled::Fit`]), which the draws follow.
    fit: Fit,
    /// Where the started jobs' starts fell among the samples of their
    /// first answer, where every answer is read ([`Sampled::answer`]).
    lean: Fit,
    /// Each waiting job's samples of its first answer, until it starts or
    /// ends: no more entries than live jobs.
    first: BTreeMap<u64, Sampled>,
}

/// The start estimates: their settings, and what they learn.
#[derive(Debug, Clone)]
pub(super) struct Starts {
    settings: StartSettings,
    state: StartState,
}

impl Starts {
    pub(super) fn new(settings: StartSettings) -> Starts {
        Starts {
            settings,
            state: StartState::default(),
        }
    }

    /// What they learnt, for a snapshot.
    pub(super) fn state(&self) -> &StartState {
        &self.state
    }

    /// What a restored snapshot's learnt.
    pub(super) fn restore(&mut self, state: StartState) {
        self.state = state;
    }

    /// Where ended jobs' runtimes fell in their spreads.
    #[cfg(test)]
    pub(super) fn fit(&self) -> &Fit {
        &self.state.fit
    }

    /// Where started jobs' starts fell among their samples.
    #[cfg(test)]
    pub(super) fn lean(&self) -> &Fit {
        &self.state.lean
    }

    /// The samples of `job_id`'s first answer, while it waits.
    #[cfg(test)]
    pub(super) fn first(&self, job_id: u64) -> Option<&Sampled> {
        self.state.first.get(&job_id)
    }

    /// Job `job_id` started at `now_us`, and runs among `jobs`: where that
    /// fell among the samples of its first answer, if it had one. Unless
    /// its cluster's running jobs, it with them, then hold more processors
    /// than the cluster has: a start the projection could not have played
    /// (the cluster's size, or the jobs' widths, are not what the
    /// projection counts, or a history was replayed without its waits)
    /// says nothing of where starts fall. False for such a start.
    pub(super) fn job_started(
        &mut self,
        job_id: u64,
        now_us: u64,
        jobs: &HashMap<u64, LiveJob>,
        clusters: &Clusters,
    ) -> bool {
        let Some(samples) = self.state.first.remove(&job_id) else {
            return true;
        };
        let Some(cluster) = jobs.get(&job_id).map(|j| j.submitted.cluster.as_str()) else {
            return true;
        };
        let held: u64 = jobs
            .values()
            .filter(|j| {
                j.submitted.cluster == cluster && holds(j) && j.progress.running_since().is_some()
            })
            .map(|j| u64::from(procs(j)))
            .sum();
        if held > u64::from(self.cpus(cluster, clusters)) {
            return false;
        }
        if let Some(level) = samples.level_of(now_us) {
            self.state.lean.learn_level(level);
        }
        true
    }

    /// The processors of `cluster`: as configured, else as its machines
    /// report.
    fn cpus(&self, cluster: &str, clusters: &Clusters) -> u32 {
        self.settings
            .cpus
            .unwrap_or_else(|| clusters.cpus_of(cluster).floor() as u32)
    }

    /// Job `job_id` was given up on, silent too long: its samples go.
    pub(super) fn job_abandoned(&mut self, job_id: u64) {
        self.state.first.remove(&job_id);
    }

    /// `job` ended: where its runtime (the mean of its tasks' that ended,
    /// those killed at the limit too) fell in its spread, if start
    /// estimates are on.
    pub(super) fn job_ended(&mut self, job: &LiveJob, driver: PolicyKind) {
        self.state.first.remove(&job.submitted.job_id);
        if self.settings.backfill.is_none() || job.runtimes.is_empty() {
            return;
        }
        let total: f64 = job.runtimes.values().map(|&us| us as f64).sum();
        let runtime_us = total / job.runtimes.len() as f64;
        self.state.fit.learn(
            &Sized::of(job, driver, self.settings.plans_on).spread,
            runtime_us,
        );
    }

    /// The start estimates at `now_us` of `wanted` (ids of live jobs),
    /// among `jobs` (every live job, of every cluster) sized by `driver`,
    /// in `wanted`'s order: none for a job that is not live, or if start
    /// estimates are off, a task of the job runs, its cluster's processors
    /// are unknown, or it would never fit. A job with no task running is
    /// pending, for its unfinished tasks. One projection per cluster
    /// answers all its wanted jobs. A job's first answer keeps its samples
    /// until it starts ([`Starts::job_started`]).
    pub(super) fn starts_of(
        &mut self,
        wanted: &[u64],
        jobs: &HashMap<u64, LiveJob>,
        driver: PolicyKind,
        clusters: &Clusters,
        now_us: u64,
    ) -> Vec<Option<Start>> {
        let mut out = vec![None; wanted.len()];
        let Some(discipline) = self.settings.discipline() else {
            return out;
        };
        let mut by_cluster: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (at, id) in wanted.iter().enumerate() {
            if let Some(job) = jobs.get(id)
                && waits(job)
            {
                by_cluster
                    .entry(job.submitted.cluster.as_str())
                    .or_default()
                    .push(at);
            }
        }
        for (cluster, ats) in by_cluster {
            let cpus = self.cpus(cluster, clusters);
            if cpus == 0 {
                continue;
            }
            let mut pending: Vec<(u64, u64, Sized)> = Vec::new();
            let mut running: Vec<(u64, u64, Sized)> = Vec::new();
            for other in jobs
                .values()
                .filter(|j| j.submitted.cluster == cluster && holds(j))
            {
                let sized = Sized::of(other, driver, self.settings.plans_on);
                let id = other.submitted.job_id;
                match other.progress.running_since() {
                    Some(since_us) => running.push((since_us, id, sized)),
                    None => pending.push((other.submitted.time_us, id, sized)),
                }
            }
            pending.sort_by_key(|&(submit, id, _)| (submit, id));
            // In a fixed order, so that each job gets the same draws
            // whatever the map's order.
            running.sort_by_key(|&(since, id, _)| (since, id));
            let position: BTreeMap<u64, usize> = pending
                .iter()
                .enumerate()
                .map(|(at, &(_, id, _))| (id, at))
                .collect();
            let positions: Vec<usize> = ats.iter().map(|&at| position[&wanted[at]]).collect();
            let busy: u32 = running.iter().map(|(_, _, s)| s.procs).sum();
            let free = cpus.saturating_sub(busy);
            let queue: Vec<Queued> = pending
                .iter()
                .map(|(_, _, s)| Queued {
                    procs: s.procs,
                    spread: s.spread,
                    told: s.told,
                })
                .collect();
            let running: Vec<Running> = running
                .iter()
                .map(|&(start_us, _, s)| Running {
                    procs: s.procs,
                    start_us,
                    spread: s.spread,
                    told: s.told,
                })
                .collect();
            let starts = sampled::sampled_starts(
                discipline,
                Seen {
                    now_us,
                    free,
                    queue: &queue,
                    running: &running,
                },
                &positions,
                &self.state.fit,
                self.settings.threads,
            );
            let lean = self.state.lean.table();
            for at in ats {
                let Some(samples) = starts[position[&wanted[at]]] else {
                    continue;
                };
                if let Entry::Vacant(first) = self.state.first.entry(wanted[at]) {
                    first.insert(samples);
                }
                if let Some(s) = samples.answer(&lean) {
                    out[at] = Some(Start {
                        at_us: now_us,
                        p50_us: s.p50_us,
                        p90_us: s.p90_us,
                    });
                }
            }
        }
        out
    }
}

/// Whether `job` holds or waits for processors: not once its tasks have
/// all finished, while its end is on its way.
fn holds(job: &LiveJob) -> bool {
    job.record.width == 0 || job.record.tasks_finished < job.record.width
}

/// The processors `job` holds or waits for: its unfinished tasks' CPU
/// requests.
fn procs(job: &LiveJob) -> u32 {
    let unfinished = job
        .record
        .width
        .saturating_sub(job.record.tasks_finished)
        .max(1);
    let per_task = job.submitted.cpu_request.max(1.0);
    (f64::from(unfinished) * per_task)
        .ceil()
        .min(f64::from(u32::MAX)) as u32
}

/// A live job as the projection sees it.
#[derive(Debug, Clone, Copy)]
struct Sized {
    procs: u32,
    /// Its runtime: the driving policy's quantiles, capped by its time
    /// limit. A policy without quantiles gives its estimate as the median
    /// and the limit (or an hour, with neither) as the rest.
    spread: Spread,
    /// What the site's scheduler plans it on ([`PlansOn`]); a job
    /// without a time limit, on its estimate.
    told: Told,
}

/// The runtime assumed of a job with neither an estimate nor a time
/// limit.
const UNKNOWN_US: f64 = 3_600_000_000.0;

impl Sized {
    fn of(job: &LiveJob, driver: PolicyKind, plans_on: PlansOn) -> Sized {
        let procs = procs(job);
        let limit = job.submitted.time_limit_us;
        let estimate = job.record.estimates.get(&driver);
        let fallback = limit.map_or(UNKNOWN_US, |l| l as f64);
        let median = estimate
            .map(|e| e.mean_task_runtime_us)
            .filter(|us| us.is_finite())
            .unwrap_or(fallback);
        let quantiles = estimate
            .and_then(|e| e.quantiles)
            .map(|q| q.mean_task_runtime_us)
            .filter(|q| q.to_array().iter().all(|us| us.is_finite()))
            .unwrap_or(Quantiles::from_array([
                median, fallback, fallback, fallback,
            ]));
        let [p50, p90, p95, p99] = quantiles.to_array().map(|us| us.round() as u64);
        let told = match (plans_on, limit) {
            (PlansOn::Limits, Some(limit)) => Told::predicted(limit, Some(limit)),
            _ => Told {
                predicted_us: p50,
                later_us: [p90, p95, p99],
                request_us: limit,
            },
        };
        Sized {
            procs,
            spread: Spread::new(quantiles, limit),
            told,
        }
    }
}
