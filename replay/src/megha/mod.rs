//! Megha (Thiyyakat et al., `../shared/papers/megha-federated-scheduling.txt`)
//! as a downstream scheduler of the simulator: federated clusters under
//! Local Masters, scheduled by Global Masters that hold an eventually
//! consistent view of every cluster; against a centralised configuration
//! and a Sparrow-like sampler, and with jobcast's estimates deciding the
//! order of each GM's queue and the cluster each job tries first.
//!
//! # The data centre (§IV, §V)
//! `workers` workers of `worker_cores` cores and `worker_memory_gb` GB (the
//! paper: 64 and 16), in `lms` clusters of equal size, each under a Local
//! Master. Every cluster is split into one partition per Global Master.
//! The LMs hold the true state; each GM holds a copy of every worker's free
//! resources, refreshed by each LM's heartbeat (every `heartbeat_us`, the
//! paper's 10 s) and by the LM's state carried on every answer to a
//! request, so a GM's view of a cluster is stale by up to a heartbeat.
//!
//! # A task's way (§IV-B)
//! Jobs are handed to the GMs in turn; a GM takes the tasks of its queue
//! one at a time. It looks for a worker with room for the task first in
//! its internal partitions, cluster by cluster in round-robin, then in the
//! other GMs' partitions, again round-robin over the clusters: first fit
//! on its view. A worker found in an external partition is a repartition:
//! the LM lends the GM the resources. The GM sends the LM a launch request
//! and counts the resources as taken in its view. The LM checks the
//! request against its true state: a worker without room (taken by another
//! GM's repartition or launch the GM did not yet know of) is refused, with
//! the LM's state, and the GM takes the task again first. A task that
//! fits nowhere in the GM's view waits, as the paper's requeue at the tail,
//! until the view changes (a heartbeat or an answer): retrying on the same
//! view would find the same nothing.
//!
//! # Fairness (§IV-C)
//! With user queues configured, each job's user is assigned a queue (by a
//! hash of the name), each queue has a share of the data centre's cores
//! and is served by one GM, and a GM takes its queues in turn. Fairness
//! acts only under contention: a task that finds no room anywhere, whose
//! queue uses less than its share, asks the LM to preempt tasks of the
//! queue furthest over its share on a worker where that frees enough room
//! (the GM's view of free room, the queues' use as the LMs report it); the
//! LM checks the victim is still over its share and the room is there, or
//! refuses, and the GM tries again on the state the refusal carries.
//! Megha takes the first such worker it finds and preempts its latest
//! started tasks there; under jobcast the GM preempts first the tasks
//! whose jobs' predicted ends move least, on the worker where that delays
//! the fewest jobs, then the least in delay and work lost (a task whose
//! job still has tasks queued delays nothing: the job ends no sooner
//! anyway). A preempted task goes back to the front of its queue and
//! starts over. A task whose queue has its share waits, as without
//! fairness. Without user queues, jobs go to the GMs in turn.
//!
//! # Costs
//! Every message takes `network_us` one way (Sparrow's simulator: 0.5 ms).
//! A GM is one server: a decision costs `gm_request_us` plus `scan_ns` per
//! worker it examined, and folding an LM's state into its view `scan_ns`
//! per worker of the cluster. An LM is one server too, `lm_request_us` a
//! request. These stand for the prototype's measured overheads, which the
//! paper reports only as a share of the allocation time (communication
//! over 90 %, processing under 3 %, queueing about 7 %).
//!
//! # The configurations
//! - [`Scheduler::Megha`]: `gms` GMs, `lms` LMs, each GM's queue in order of
//!   arrival.
//! - [`Scheduler::MeghaJobcast`]: the same GMs, each queue ordered by
//!   jobcast's estimate of the job's work (the 3Sigma history estimate of
//!   its mean task runtime times its tasks, learning from every job that
//!   ends: the order of jobcast's decisions), each job tried first on the
//!   cluster of earliest estimated completion (least estimated work
//!   running there per core).
//! - [`Scheduler::Centralised`]: one GM and one LM over every worker.
//! - [`Scheduler::Sampling`]: Sparrow's batch sampling with late binding:
//!   `probes` reservations a task on random workers, each worker serving
//!   its reservations in order, asking the job's scheduler for a task when
//!   the head's task fits (a round trip), which sends one if any is left.
//!
//! # What is measured
//! A task's allocation time: its start on a worker less its job's arrival
//! (§III), at its first start. A job's completion time (JCT): its last
//! task's end less its arrival. A queue's share attainment: over the time
//! it had tasks waiting, the mean of its cores in use over its share (at
//! most 1).

//!
//! # The rooms
//! - this file: the configuration, the run's report, and the entry points;
//! - [`sim`]: the event loop, the GMs, the LMs, fairness and the sampler.

mod sim;
#[cfg(test)]
mod tests;

use jobcast_predictor::history::History;
use serde::Serialize;

use crate::workload::SimJob;
use sim::Sim;

/// The data centre and the costs of its messages.
#[derive(Debug, Clone, PartialEq)]
pub struct MeghaConfig {
    pub workers: u32,
    /// Clusters, one Local Master each.
    pub lms: u32,
    /// Global Masters; each cluster has one partition per GM.
    pub gms: u32,
    pub worker_cores: f64,
    pub worker_memory_gb: f64,
    /// A job's CPU and memory requests are shares of these (Google's are
    /// normalised to its largest machine).
    pub request_cores: f64,
    pub request_memory_gb: f64,
    pub heartbeat_us: u64,
    pub network_us: u64,
    pub gm_request_us: u64,
    pub scan_ns: u64,
    pub lm_request_us: u64,
    /// Sampling: reservations per task (Sparrow's 2).
    pub probes: u32,
    /// User queues, with fairness; none: jobs go to the GMs in turn.
    pub queues: Vec<UserQueue>,
    pub seed: u64,
}

/// A user queue: its share of the data centre's cores and its GM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct UserQueue {
    pub share: f64,
    pub gm: u32,
}

impl Default for MeghaConfig {
    fn default() -> Self {
        MeghaConfig {
            workers: 1_000,
            lms: 10,
            gms: 10,
            worker_cores: 64.0,
            worker_memory_gb: 16.0,
            request_cores: 64.0,
            request_memory_gb: 16.0,
            heartbeat_us: 10_000_000,
            network_us: 500,
            gm_request_us: 1_000,
            scan_ns: 100,
            lm_request_us: 1_000,
            probes: 2,
            queues: Vec::new(),
            seed: 1,
        }
    }
}

/// Why a configuration cannot run.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum MeghaError {
    #[error("{0}")]
    Config(String),
    #[error("no job to schedule")]
    NoJobs,
}

impl MeghaConfig {
    fn validate(&self) -> Result<(), MeghaError> {
        let bad = |m: String| Err(MeghaError::Config(m));
        if self.lms == 0 || self.gms == 0 || self.probes == 0 {
            return bad("--lms, --gms and --probes must be positive".into());
        }
        if self.workers < self.lms * self.gms {
            return bad(format!(
                "--workers {}: fewer than one per partition ({} clusters × {} GMs)",
                self.workers, self.lms, self.gms
            ));
        }
        for (flag, v) in [
            ("--worker-cores", self.worker_cores),
            ("--worker-memory-gb", self.worker_memory_gb),
            ("--request-cores", self.request_cores),
            ("--request-memory-gb", self.request_memory_gb),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{flag} {v}: must be positive"));
            }
        }
        if self.heartbeat_us == 0 {
            return bad("the heartbeat period must be positive".into());
        }
        for (i, q) in self.queues.iter().enumerate() {
            if !(q.share.is_finite() && q.share > 0.0) {
                return bad(format!("queue {i}: share {} must be positive", q.share));
            }
            if q.gm >= self.gms {
                return bad(format!(
                    "queue {i}: GM {} of {} (GMs count from 0)",
                    q.gm, self.gms
                ));
            }
        }
        let total: f64 = self.queues.iter().map(|q| q.share).sum();
        if total > 1.0 + 1e-9 {
            return bad(format!("the queues' shares add up to {total}, over 1"));
        }
        Ok(())
    }
}

/// Which scheduler runs the data centre.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scheduler {
    Megha,
    MeghaJobcast,
    Centralised,
    Sampling,
}

impl Scheduler {
    pub const ALL: [Scheduler; 4] = [
        Scheduler::Megha,
        Scheduler::MeghaJobcast,
        Scheduler::Centralised,
        Scheduler::Sampling,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Megha => "megha",
            Scheduler::MeghaJobcast => "megha_jobcast",
            Scheduler::Centralised => "centralised",
            Scheduler::Sampling => "sampling",
        }
    }
}

/// One configuration's run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MeghaRun {
    pub scheduler: Scheduler,
    pub workers: u32,
    pub lms: u32,
    pub gms: u32,
    pub jobs: usize,
    pub tasks: usize,
    pub allocation_p50_ms: f64,
    pub allocation_p99_ms: f64,
    pub allocation_max_ms: f64,
    pub avg_jct_s: f64,
    pub p50_jct_s: f64,
    /// Launch requests an LM refused: the GM's view was stale.
    pub inconsistencies: u64,
    /// Launches in another GM's partition.
    pub repartitions: u64,
    /// Tasks that found no room in their GM's view and waited for it to
    /// change.
    pub requeues: u64,
    /// Preemption requests sent to an LM, and tasks preempted.
    pub preemption_attempts: u64,
    pub preemptions: u64,
    /// Work lost to preemption: the time the preempted attempts had run,
    /// summed over tasks.
    pub preempted_work_s: f64,
    /// Per user queue, when queues are configured.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub share_attainment: Vec<QueueAttainment>,
}

/// What one user queue got.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueAttainment {
    pub queue: usize,
    pub share: f64,
    pub gm: u32,
    pub tasks: u64,
    /// Over the time it had tasks waiting, its cores in use over its
    /// share, at most 1; none if it never waited.
    pub attainment: Option<f64>,
    pub waiting_s: f64,
    /// Its tasks preempted.
    pub preempted: u64,
    /// Its jobs, and their average completion time.
    pub jobs: usize,
    pub avg_jct_s: f64,
}

/// Run `jobs` (in order of arrival) under `scheduler`; `history` is what
/// jobcast knows before the first arrives (only
/// [`Scheduler::MeghaJobcast`] uses it).
pub fn simulate(
    jobs: &[SimJob],
    history: &History,
    config: &MeghaConfig,
    scheduler: Scheduler,
) -> Result<MeghaRun, MeghaError> {
    config.validate()?;
    if jobs.is_empty() {
        return Err(MeghaError::NoJobs);
    }
    let mut config = config.clone();
    if scheduler == Scheduler::Centralised {
        config.lms = 1;
        config.gms = 1;
        for q in &mut config.queues {
            q.gm = 0;
        }
    }
    let mut sim = Sim::new(jobs, &config, scheduler, history.clone());
    sim.run();
    Ok(sim.report())
}

/// `jobs` arriving `speedup` times faster, from the first's arrival: the
/// load multiplied by as much, each job as it was.
pub fn speed_up_arrivals(jobs: &[SimJob], speedup: f64) -> Vec<SimJob> {
    let first = jobs.iter().map(|j| j.job().time_us).min().unwrap_or(0);
    jobs.iter()
        .map(|j| {
            let after = (j.job().time_us - first) as f64 / speedup;
            j.arriving_at(first + after.round() as u64)
        })
        .collect()
}

/// Every configuration on the same jobs.
pub fn compare(
    jobs: &[SimJob],
    history: &History,
    config: &MeghaConfig,
) -> Result<Vec<MeghaRun>, MeghaError> {
    Scheduler::ALL
        .iter()
        .map(|&s| simulate(jobs, history, config, s))
        .collect()
}
