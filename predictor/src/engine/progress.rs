//! When each live job should finish ([`crate::eta`]), as the engine knows
//! it: the queue state the driving policy's decisions build (each job's
//! queue, since when, its predicted size less the task time already run,
//! its tasks running and how long they have run),
//! the cluster's capacity (configured task slots, or the CPUs of the
//! machines up), and the ETA each published decision carries. A job that
//! finishes teaches the calibration how far off every ETA it was given
//! was, and scores the first.
//!
//! Where jobcast serves several clusters (events name their cluster),
//! each cluster has its own queues and capacity: a job's ETA is its own
//! cluster's, and a decision also carries what the job's ETA would be on
//! every other cluster with capacity, were it queued there now, and the
//! cluster that would finish it first. Which jobs are ahead of a job
//! depends on the order its cluster starts them in (`engine.eta.order`):
//! jobcast's queues, where the clusters follow its decisions, or
//! submission order, where they do not; a model of the wrong order sends
//! a short job to a cluster whose long queue it would in truth wait
//! behind.
//!
//! An ETA is the state's view at its decision: the jobs that arrive or
//! move ahead later are not in it, which the calibration learns as bias
//! per queue. The time already run is kept per job as sums (finished task
//! time, running attempts and the sum of their starts), so an ETA takes
//! no pass over any job's tasks: it walks the rows of the jobs with a
//! task running and takes the sums of the rest before its own job
//! ([`EtaRows`]).

use std::collections::BTreeMap;

use foldhash::HashMap;
use serde::{Deserialize, Serialize};

use crate::decision::{ClusterCompletion, Completion, Decision, PolicyKind};
use crate::eta::{Ahead, Around, Eta, EtaCalibration, JobProgress, Predicted, Queued};
use jobcast_ingest::config::ConfigError;

use super::LiveJob;
use super::clusters::Clusters;
use super::effects::{Effects, Output};
use super::order_sums::OrderSums;

/// The ETAs the engine gives: the capacity they assume, how far off the
/// ETAs given to finished jobs were, and the rows of the live jobs an ETA
/// walks.
#[derive(Debug)]
pub(super) struct Etas {
    settings: EtaSettings,
    calibration: EtaCalibration,
    /// The rows of the live jobs, by their cluster.
    rows: BTreeMap<String, EtaRows>,
}

impl Etas {
    pub(super) fn new(settings: EtaSettings) -> Self {
        Etas {
            settings,
            calibration: EtaCalibration::default(),
            rows: BTreeMap::new(),
        }
    }

    /// What a snapshot keeps: the calibration (the rows follow the jobs).
    pub(super) fn calibration(&self) -> &EtaCalibration {
        &self.calibration
    }

    /// Take over a snapshot's calibration; the rows are rebuilt from the
    /// restored jobs ([`Etas::rebuild`]).
    pub(super) fn restore(&mut self, calibration: EtaCalibration) {
        self.calibration = calibration;
    }

    /// Whether a task weighs its job's CPU request (capacity in CPUs from
    /// machine events) rather than one slot.
    fn per_cpu(&self) -> bool {
        self.settings.slots.is_none()
    }

    /// `job`'s row as this engine's ETAs read it.
    fn row(&self, job: &LiveJob, driver: PolicyKind) -> Option<Row> {
        job.eta_row(driver, self.per_cpu(), self.settings.order)
    }

    /// Bring `job_id`'s row up to date with `job` (none once it is gone):
    /// its placement, size, tasks; no row while it is not placed and
    /// sized.
    pub(super) fn reindex(&mut self, job_id: u64, job: Option<&LiveJob>, driver: PolicyKind) {
        let Some(job) = job else {
            return self.forget(job_id);
        };
        let cluster = job.submitted.cluster.as_str();
        match (self.row(job, driver), self.rows.get_mut(cluster)) {
            (Some(row), Some(rows)) => rows.put(row),
            (Some(row), None) => {
                let mut rows = EtaRows::default();
                rows.put(row);
                self.rows.insert(cluster.to_owned(), rows);
            }
            (None, Some(rows)) => rows.remove(job_id),
            (None, None) => {}
        }
    }

    /// A job gone from the engine: its row with it.
    pub(super) fn forget(&mut self, job_id: u64) {
        for rows in self.rows.values_mut() {
            rows.remove(job_id);
        }
        self.rows.retain(|_, rows| !rows.at.is_empty());
    }

    /// Every live job's row, after a restore.
    pub(super) fn rebuild<'a>(
        &mut self,
        jobs: impl Iterator<Item = &'a LiveJob>,
        driver: PolicyKind,
    ) {
        let mut rows: BTreeMap<String, EtaRows> = BTreeMap::new();
        for job in jobs {
            if let Some(row) = self.row(job, driver) {
                rows.entry(job.submitted.cluster.clone())
                    .or_default()
                    .put(row);
            }
        }
        self.rows = rows;
    }

    /// The capacity ETAs on a cluster whose machines up have `cpus` CPUs
    /// divide by: `engine.eta.slots` if set, else those CPUs.
    fn capacity(&self, cpus: f64) -> f64 {
        self.settings.slots.map_or(cpus, f64::from)
    }

    /// The model's prediction for `job` at `now_us` and its calibrated
    /// ETA, if the cluster's capacity is known and the job is placed with
    /// a size.
    fn of(
        &self,
        job: &LiveJob,
        driver: PolicyKind,
        clusters: &Clusters,
        now_us: u64,
    ) -> Option<(Predicted, Eta)> {
        let cluster = job.submitted.cluster.as_str();
        let capacity = self.capacity(clusters.cpus_of(cluster));
        if capacity < MIN_CAPACITY {
            return None;
        }
        let predicted = self
            .rows
            .get(cluster)?
            .predict(&self.row(job, driver)?, capacity, now_us);
        Some((predicted, self.calibration.eta(predicted)))
    }

    /// With several clusters: `job`'s completion on each cluster with
    /// capacity (its own: `own`; another: were it queued there at
    /// `now_us`, behind its queue, or behind every job there in
    /// submission order, with nothing of it running), by name,
    /// and the cluster of the earliest median.
    fn across(
        &self,
        job: &LiveJob,
        own: Option<Completion>,
        driver: PolicyKind,
        clusters: &Clusters,
        now_us: u64,
    ) -> (Vec<ClusterCompletion>, Option<String>) {
        if clusters.len() < 2 {
            return (Vec::new(), None);
        }
        let Some(row) = self.row(job, driver) else {
            return (Vec::new(), None);
        };
        let moved = Row {
            since_us: now_us,
            running: 0,
            running_since_sum_us: 0,
            ..row
        };
        let empty = EtaRows::default();
        let mut out = Vec::new();
        for (name, cpus) in clusters.cpus() {
            let capacity = self.capacity(cpus);
            if capacity < MIN_CAPACITY {
                continue;
            }
            let eta = if name == job.submitted.cluster {
                own
            } else {
                let rows = self.rows.get(name).unwrap_or(&empty);
                let eta = self.calibration.eta(rows.predict(&moved, capacity, now_us));
                Some(completion(now_us, eta))
            };
            if let Some(eta) = eta {
                out.push(ClusterCompletion {
                    cluster: name.to_owned(),
                    eta,
                });
            }
        }
        let recommended = out
            .iter()
            .min_by_key(|c| c.eta.p50_us)
            .map(|c| c.cluster.clone());
        (out, recommended)
    }

    /// Publish the driving policy's `decision` for `job` (none if it is
    /// not live) at `now_us`: the job takes its queue (entering at the
    /// back if the queue is new to it), and the decision carries the job's
    /// ETA if it has one.
    pub(super) fn place(
        &mut self,
        decision: &mut Decision,
        job: Option<&mut LiveJob>,
        driver: PolicyKind,
        clusters: &Clusters,
        now_us: u64,
    ) {
        let Some(job) = job else {
            self.forget(decision.job_id);
            return;
        };
        let placed = &mut job.progress.placed;
        if placed.map(|(queue, _)| queue) != Some(decision.queue) {
            *placed = Some((decision.queue, now_us));
        }
        self.reindex(decision.job_id, Some(job), driver);
        if let Some((predicted, eta)) = self.of(job, driver, clusters, now_us) {
            let completion = completion(now_us, eta);
            decision.eta = Some(completion);
            job.record.eta = Some(completion);
            job.progress.given.push(Given {
                at_us: now_us,
                predicted,
                eta,
            });
        }
        (decision.clusters, decision.recommended_cluster) =
            self.across(job, decision.eta, driver, clusters, now_us);
    }

    /// A job finished at `end_us`: every ETA it was given teaches the
    /// calibration, and the first is scored.
    pub(super) fn learn(&mut self, job: &LiveJob, end_us: u64, effects: &mut Effects) {
        for given in &job.progress.given {
            let actual_us = end_us.saturating_sub(given.at_us) as f64;
            self.calibration.learn(given.predicted, actual_us);
        }
        if let Some(first) = job.progress.given.first() {
            let actual_us = (end_us.saturating_sub(first.at_us) as f64).max(1.0);
            effects.outputs.push(Output::EtaScored {
                job_id: job.submitted.job_id,
                error_pct: (first.eta.p50_us - actual_us).abs() / actual_us * 100.0,
                within_interval: (first.eta.p10_us..=first.eta.p90_us).contains(&actual_us),
            });
        }
    }

    /// Whether every row is what the jobs give now: none missing, stale
    /// or left behind.
    #[cfg(test)]
    pub(super) fn rows_are_current<'a>(
        &self,
        jobs: impl Iterator<Item = &'a LiveJob>,
        driver: PolicyKind,
    ) -> bool {
        let mut expected: Vec<Row> = jobs.filter_map(|job| self.row(job, driver)).collect();
        let mut held: Vec<Row> = self.rows.values().flat_map(EtaRows::all).collect();
        expected.sort_by_key(|r| r.job_id);
        held.sort_by_key(|r| r.job_id);
        let indexed = self.rows.values().all(|rows| {
            rows.all().len() == rows.at.len()
                && rows.at.iter().all(|(id, slot)| match *slot {
                    Slot::Running(i) => rows.running[i].job_id == *id,
                    Slot::Idle(row, _) => row.job_id == *id,
                })
        });
        held == expected && indexed
    }
}

/// The cluster's capacity, for ETAs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct EtaSettings {
    /// The cluster's task slots, each task taking one (a Slurm partition
    /// whose jobs ask one CPU a task: its CPUs). Unset: the CPUs of the
    /// machines up, as machine events report them, each task taking its
    /// job's CPU request; no ETA until a machine has reported its CPUs.
    pub slots: Option<u32>,
    /// The order each cluster starts its waiting jobs in.
    pub order: EtaOrder,
}

/// The order a cluster starts its waiting jobs in, as its ETAs model it.
/// It decides which jobs are ahead of a job, and so most of its wait; a
/// job moved to another cluster ([`Etas::across`]) joins that cluster's
/// queue as the cluster serves it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EtaOrder {
    /// The driving policy's queues, as a cluster that follows jobcast's
    /// decisions starts them (`slurm apply`, or a scheduler that reads
    /// them): a short job goes ahead of the long ones before it.
    #[default]
    Queues,
    /// Submission order, as a cluster that jobcast's decisions do not
    /// order starts them (Slurm's FIFO priority, backfilling aside): a
    /// job waits behind every job submitted before it.
    Submission,
}

impl EtaSettings {
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        if self.slots == Some(0) {
            return Err(ConfigError::new(
                "slots",
                "must be at least 1 (leave it unset to take the capacity from machine events)",
            ));
        }
        Ok(())
    }
}

/// What the ETA of a live job and of the jobs behind it need to know.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct Progress {
    /// The driving policy's queue for the job and when it entered it.
    placed: Option<(u8, u64)>,
    /// The history's estimate of its size (task time, µs) at submission,
    /// for while the driving policy has none (thin, sampling).
    size_hint_us: Option<f64>,
    /// Task time of its finished tasks, µs.
    finished_us: u64,
    /// Attempts running now, and the sum of their starts (µs).
    running: u32,
    running_since_sum_us: u128,
    /// The ETAs it was given, oldest first.
    given: Vec<Given>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
struct Given {
    at_us: u64,
    /// The model's prediction, µs from `at_us`.
    predicted: Predicted,
    /// The calibrated ETA published, µs from `at_us`.
    eta: Eta,
}

impl Progress {
    /// A job just submitted, whose size the history guesses at
    /// `size_hint_us`.
    pub(super) fn submitted(size_hint_us: Option<f64>) -> Self {
        Progress {
            size_hint_us,
            ..Progress::default()
        }
    }

    /// When its running attempts started, on average; `None` while none
    /// runs.
    pub(super) fn running_since(&self) -> Option<u64> {
        (self.running > 0).then(|| {
            let mean = self.running_since_sum_us / u128::from(self.running);
            u64::try_from(mean).unwrap_or(u64::MAX)
        })
    }

    pub(super) fn attempt_started(&mut self, at_us: u64) {
        self.running += 1;
        self.running_since_sum_us += u128::from(at_us);
    }

    /// A running attempt that started at `since_us` ended; `finished_us`
    /// is its runtime if it was the task's first to finish.
    pub(super) fn attempt_ended(&mut self, since_us: u64, finished_us: Option<u64>) {
        self.running = self.running.saturating_sub(1);
        self.running_since_sum_us = self
            .running_since_sum_us
            .saturating_sub(u128::from(since_us));
        self.finished_us += finished_us.unwrap_or(0);
    }
}

/// A placed and sized live job as the ETA model reads it: what of the job
/// an ETA needs, apart from the job itself.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Row {
    job_id: u64,
    queue: u8,
    since_us: u64,
    size_us: f64,
    width: u32,
    unfinished: u32,
    running: u32,
    finished_us: u64,
    running_since_sum_us: u128,
    cpus_per_task: f64,
}

impl Row {
    fn order(&self) -> Order {
        (self.queue, self.since_us, self.job_id)
    }

    /// The job as the ETA model sees it at `now_us`.
    fn queued(&self, now_us: u64) -> Queued {
        // Task time its running attempts have run by `now_us`, µs.
        let running_us = running_us(self.running, now_us, self.running_since_sum_us);
        Queued::from(JobProgress {
            job_id: self.job_id,
            queue: self.queue,
            since_us: self.since_us,
            size_us: self.size_us,
            width: self.width,
            unfinished: self.unfinished,
            running: self.running,
            attained_us: self.finished_us as f64 + running_us,
            running_attained_us: running_us,
            cpus_per_task: self.cpus_per_task,
        })
    }
}

/// Task time `running` attempts whose starts sum to `since_sum_us` have
/// run by `now_us`, µs. In 64 bits where it fits (always, in practice): a
/// 128-bit integer's conversion to f64 is a library call, and this runs
/// for every live job at every ETA. The same integer either way, so the
/// same f64.
fn running_us(running: u32, now_us: u64, since_sum_us: u128) -> f64 {
    match (
        u64::from(running).checked_mul(now_us),
        u64::try_from(since_sum_us),
    ) {
        (Some(total), Ok(since)) => total.saturating_sub(since) as f64,
        _ => (u128::from(running) * u128::from(now_us)).saturating_sub(since_sum_us) as f64,
    }
}

/// The rows of every placed and sized live job. An ETA counts every live
/// job ahead of or beside its own: thousands of them on a busy cluster,
/// at each decision.
///
/// A job with a task running adds to an ETA what depends on the time
/// (the work its running tasks have left, the capacity they hold): its
/// row is walked at every ETA, in one array (walked through the jobs
/// themselves, each in a map entry of several cache lines, that walk was
/// a sixth of the service's time on the Google window). There are at
/// most as many as the cluster runs tasks. A job with none adds the same
/// at any time, and only if it is ahead: those rows (a deep queue's
/// thousands) are summed by queue order as they change ([`OrderSums`]),
/// and an ETA takes their sum before its job in O(log n). The sums are
/// integer sums, so neither the order of the rows nor their grouping
/// changes an ETA.
///
/// [`Etas::reindex`] keeps a job's row current wherever its placement,
/// size or tasks change.
#[derive(Debug, Default)]
struct EtaRows {
    running: Vec<Row>,
    idle: OrderSums<Order>,
    /// Where each job's row is.
    at: HashMap<u64, Slot>,
}

/// A row's place in the queues: (queue, since when, job id), the order GS
/// serves them in.
type Order = (u8, u64, u64);

#[derive(Debug, Clone, Copy)]
enum Slot {
    /// At this index of `running`.
    Running(usize),
    /// Summed in `idle` at its order, with what it adds there.
    Idle(Row, Ahead),
}

impl EtaRows {
    fn put(&mut self, row: Row) {
        let slot = if row.running > 0 {
            if let Some(&Slot::Running(i)) = self.at.get(&row.job_id) {
                self.running[i] = row;
                return;
            }
            self.remove(row.job_id);
            self.running.push(row);
            Slot::Running(self.running.len() - 1)
        } else {
            // Its terms at any time: with no task running, the time is
            // not in them. Most changes of an idle job (its tasks' events
            // while none runs) change neither them nor its place.
            let own = Ahead::of(&row.queued(0));
            if let Some(Slot::Idle(held, held_own)) = self.at.get_mut(&row.job_id)
                && held.order() == row.order()
                && *held_own == own
            {
                *held = row;
                return;
            }
            self.remove(row.job_id);
            self.idle.insert(row.order(), own);
            Slot::Idle(row, own)
        };
        self.at.insert(row.job_id, slot);
    }

    fn remove(&mut self, job_id: u64) {
        match self.at.remove(&job_id) {
            Some(Slot::Running(i)) => {
                self.running.swap_remove(i);
                if let Some(moved) = self.running.get(i) {
                    self.at.insert(moved.job_id, Slot::Running(i));
                }
            }
            Some(Slot::Idle(row, _)) => {
                self.idle.remove(&row.order());
            }
            None => {}
        }
    }

    /// The model's prediction at `now_us`, on `capacity`, for the job of
    /// `target`, a row held here: [`crate::eta::predict`] over every row.
    fn predict(&self, target: &Row, capacity: f64, now_us: u64) -> Predicted {
        let queued = target.queued(now_us);
        let mut around = Around::default();
        around.add_ahead(self.idle.sum_before(&target.order()));
        for other in &self.running {
            around.add(&queued, &other.queued(now_us));
        }
        around.predict(&queued, capacity)
    }

    /// Every row, for the tests' check.
    #[cfg(test)]
    fn all(&self) -> Vec<Row> {
        let mut rows = self.running.clone();
        let mut idle: Vec<Row> = self
            .at
            .values()
            .filter_map(|slot| match slot {
                Slot::Idle(row, _) => Some(*row),
                Slot::Running(_) => None,
            })
            .collect();
        idle.sort_by_key(Row::order);
        assert_eq!(
            idle.iter().map(Row::order).collect::<Vec<_>>(),
            self.idle.keys(),
            "the sums hold the idle rows"
        );
        rows.extend(idle);
        rows
    }
}

impl LiveJob {
    /// The job's ETA row once it is placed and its size is predicted (by
    /// `driver`, or else by the history); `per_cpu` weighs its tasks by
    /// their CPU request (capacity in CPUs) rather than as one slot each;
    /// `order` places it among the cluster's jobs: by its queue and since
    /// when it is there, or by its submission.
    fn eta_row(&self, driver: PolicyKind, per_cpu: bool, order: EtaOrder) -> Option<Row> {
        let placed = self.progress.placed?;
        let (queue, since_us) = match order {
            EtaOrder::Queues => placed,
            EtaOrder::Submission => (0, self.submitted.time_us),
        };
        let size_us = self
            .record
            .estimates
            .get(&driver)
            .map(|e| e.size_us)
            .or(self.progress.size_hint_us)
            .filter(|s| s.is_finite())?;
        Some(Row {
            job_id: self.submitted.job_id,
            queue,
            since_us,
            size_us,
            width: self.record.width,
            unfinished: self.record.width.saturating_sub(self.record.tasks_finished),
            running: self.progress.running,
            finished_us: self.progress.finished_us,
            running_since_sum_us: self.progress.running_since_sum_us,
            cpus_per_task: if per_cpu {
                self.submitted.cpu_request
            } else {
                1.0
            },
        })
    }
}

/// The completion `eta` (µs from `now_us`) gives, as event times.
fn completion(now_us: u64, eta: Eta) -> Completion {
    Completion {
        at_us: now_us,
        p10_us: later(now_us, eta.p10_us),
        p50_us: later(now_us, eta.p50_us),
        p90_us: later(now_us, eta.p90_us),
    }
}

/// Capacity below this (CPUs) is none: what is left of machines added and
/// removed again is rounding.
const MIN_CAPACITY: f64 = 1e-9;

/// `now_us` plus `duration_us`, rounded, saturating.
fn later(now_us: u64, duration_us: f64) -> u64 {
    now_us.saturating_add(duration_us.max(0.0).round().min(u64::MAX as f64) as u64)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn row(job_id: u64, (queue, since_us, size, width, running, finished): RowParts) -> Row {
        let unfinished = width.saturating_sub(finished);
        let running = running.min(unfinished);
        Row {
            job_id,
            queue,
            since_us,
            size_us: size,
            width,
            unfinished,
            running,
            finished_us: u64::from(finished) * 1_000,
            running_since_sum_us: u128::from(running) * u128::from(since_us),
            cpus_per_task: if job_id.is_multiple_of(3) { 0.5 } else { 1.0 },
        }
    }

    type RowParts = (u8, u64, f64, u32, u32, u32);

    fn parts() -> impl Strategy<Value = RowParts> {
        (
            0u8..4,
            0u64..1_000_000,
            0.0f64..1e7,
            1u32..50,
            0u32..8,
            0u32..10,
        )
    }

    proptest! {
        /// The prediction from the idle rows' sums and a walk over the
        /// running ones is, bit for bit, the one a walk over every row
        /// gives, after any puts and removes (rows moving between idle and
        /// running, between queues, leaving).
        #[test]
        fn an_eta_from_the_sums_is_the_eta_of_a_walk_over_every_row(
            ops in prop::collection::vec((0u64..60, prop::option::of(parts())), 1..300),
            now_us in 1_000_000u64..3_000_000,
            capacity in 1.0f64..200.0,
        ) {
            let mut rows = EtaRows::default();
            for (job_id, parts) in ops {
                match parts {
                    Some(parts) => rows.put(row(job_id, parts)),
                    None => rows.remove(job_id),
                }
            }
            let all = rows.all();
            for target in &all {
                let walked = crate::eta::predict(
                    &target.queued(now_us),
                    all.iter().map(|r| r.queued(now_us)),
                    capacity,
                );
                let summed = rows.predict(target, capacity, now_us);
                prop_assert_eq!(summed.us.to_bits(), walked.us.to_bits());
                prop_assert_eq!(summed.kind, walked.kind);
            }
        }
    }

    fn wide(running: u32, now_us: u64, since_sum_us: u128) -> f64 {
        (u128::from(running) * u128::from(now_us)).saturating_sub(since_sum_us) as f64
    }

    #[test]
    fn running_time_is_the_128_bit_value_at_the_edges() {
        for (running, now, since) in [
            (0, 0, 0),
            (1, u64::MAX, 0),
            (2, u64::MAX, 1),
            (u32::MAX, u64::MAX, u128::MAX),
            (3, 10, 31),
            (3, 10, u128::from(u64::MAX) + 1),
            (7, 1 << 60, 5),
        ] {
            assert_eq!(
                running_us(running, now, since).to_bits(),
                wide(running, now, since).to_bits(),
                "{running} {now} {since}"
            );
        }
    }

    proptest! {
        #[test]
        fn running_time_is_the_128_bit_value(
            running in any::<u32>(),
            now in any::<u64>(),
            since in any::<u128>(),
            small_since in any::<u64>(),
        ) {
            prop_assert_eq!(running_us(running, now, since).to_bits(), wide(running, now, since).to_bits());
            let small = u128::from(small_since);
            prop_assert_eq!(running_us(running, now, small).to_bits(), wide(running, now, small).to_bits());
        }
    }
}
