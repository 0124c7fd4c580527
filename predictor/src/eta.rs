//! When will a job finish? A prediction from the queue state alone: the
//! work GS serves before the job (jobs in higher-priority queues, and
//! earlier arrivals in its own), the job's own work, and the cluster's
//! capacity. Capacity and each task's share of it are in one unit, task
//! slots (the simulator; a Slurm node's CPUs with a CPU a task) or CPUs
//! (a cluster's machines, each task taking its job's CPU request). The
//! model is a fluid one: the work ahead drains at the width its tasks
//! allow while the job runs on what it leaves free. GS does not preempt,
//! so what the running tasks of jobs behind it hold comes free only as
//! they end: under load that, not the work ahead, is most of a job's wait.
//! The model knows nothing of jobs still to come, so it is biased short;
//! [`EtaCalibration`] learns that bias, and the spread around it, from
//! the jobs that finished (the same conformal method as
//! [`crate::calibration`], on ln(actual / predicted)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::calibration::Residuals;
use crate::features::JobFeatures;
use crate::history::{Estimator, History};
use jobcast_ingest::event::JobSubmitted;

/// The history's guess at a job's size (task time, µs) at `now_us`, for
/// its ETA while its decision carries no estimate (thin, sampling, FIFO,
/// LAS): its width times 3Sigma's estimate of its mean task time (the
/// median does no better, `docs/reproduction.md`).
pub fn size_hint_us(history: &History, job: &JobSubmitted, now_us: u64) -> Option<f64> {
    let h = history.estimate(&JobFeatures::of(job), now_us, Estimator::Utility);
    Some(h.mean_task_runtime_us * f64::from(job.num_tasks)).filter(|s| s.is_finite())
}

/// A live job as the ETA sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queued {
    pub job_id: u64,
    /// Its GS queue (0 is served first).
    pub queue: u8,
    /// When it entered that queue, µs.
    pub since_us: u64,
    /// Predicted task time still to run, µs.
    pub remaining_work_us: f64,
    /// Tasks not yet finished.
    pub remaining_tasks: u32,
    /// The capacity each of its running tasks takes (1 in slots).
    pub cpus_per_task: f64,
    /// Of its tasks, those running now, and the mean time each still has
    /// to run, µs: a job behind the target holds their capacity until
    /// they end, since GS does not preempt.
    pub running_tasks: u32,
    pub running_left_us: f64,
}

/// What the model needs to know of a live job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobProgress {
    pub job_id: u64,
    pub queue: u8,
    pub since_us: u64,
    /// Its predicted size, task time, µs.
    pub size_us: f64,
    /// Its tasks, those not yet finished, and those running now.
    pub width: u32,
    pub unfinished: u32,
    pub running: u32,
    /// Task time it has run, µs, and the part of it its running tasks
    /// have run.
    pub attained_us: f64,
    pub running_attained_us: f64,
    pub cpus_per_task: f64,
}

impl From<JobProgress> for Queued {
    fn from(p: JobProgress) -> Self {
        // A running task has its job's mean task time left, less what it
        // ran; one past that mean still has a share of it left.
        let mean_task_us = p.size_us / f64::from(p.width.max(1));
        let ran_us = p.running_attained_us / f64::from(p.running.max(1));
        Queued {
            job_id: p.job_id,
            queue: p.queue,
            since_us: p.since_us,
            remaining_work_us: p.size_us - p.attained_us,
            remaining_tasks: p.unfinished,
            cpus_per_task: p.cpus_per_task,
            running_tasks: p.running,
            running_left_us: (mean_task_us - ran_us).max(mean_task_us * OVERRUN_LEFT),
        }
    }
}

/// The share of its job's mean task time a running task past that mean is
/// taken to have left.
const OVERRUN_LEFT: f64 = 0.1;

impl Queued {
    fn order(&self) -> (u8, u64, u64) {
        (self.queue, self.since_us, self.job_id)
    }
}

/// The model's prediction for a job, and what its calibration tells
/// apart.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Predicted {
    /// µs until the job finishes.
    pub us: f64,
    pub queue: u8,
    pub kind: Kind,
}

/// How the model sees a job: the three are off by different amounts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Kind {
    /// It runs at its full width at once: predicted by its own work.
    AtOnce,
    /// It waits, for work ahead or for capacity jobs behind hold:
    /// predicted by the queue's state too.
    Queued,
    /// It has run past its predicted size: the model knows nothing of
    /// what is left, so its prediction is a unit (1 µs) and the
    /// calibration learns the time such jobs still take.
    Overrun,
}

/// When `target` should finish on a cluster of `capacity`. The jobs
/// ahead of it run at the width their remaining tasks allow (at most the
/// capacity) until their work is done; meanwhile the job runs on what
/// they leave free, then at its full width. What the running tasks of
/// jobs behind it hold is free only as they end, each after an
/// exponential time of its job's mean time left (their order of ending
/// is unknown, and the first of many ends early).
pub fn predict(
    target: &Queued,
    live: impl IntoIterator<Item = Queued>,
    capacity: f64,
) -> Predicted {
    let mut around = Around::default();
    for j in live {
        around.add(target, &j);
    }
    around.predict(target, capacity)
}

/// What an ETA sums over the live jobs other than its target: the work
/// and width of the jobs ahead of it, the capacity the running tasks of
/// the jobs behind hold. Summed in whole µs (work) and millionths
/// (width), so that the same jobs give the same sums in any order (a
/// restored engine holds them in another) and in any grouping (the
/// engine keeps the sums of its jobs with no task running, which hold
/// nothing, ready by queue order: [`Ahead`]).
#[derive(Default)]
pub struct Around {
    ahead: Ahead,
    held: Held,
}

/// The work left (task time × the capacity each task takes, whole µs)
/// and the width (tasks × capacity, millionths) of jobs ahead of a
/// target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ahead {
    pub work: u128,
    pub width: u128,
}

impl Ahead {
    /// What `j` adds once ahead of a target.
    #[inline]
    pub fn of(j: &Queued) -> Ahead {
        let cpus = j.cpus_per_task.max(0.0);
        Ahead {
            work: round_u128(j.remaining_work_us.max(0.0) * cpus),
            width: round_u128(f64::from(j.remaining_tasks) * cpus * 1e6),
        }
    }

    #[inline]
    pub fn add(&mut self, other: Ahead) {
        self.work += other.work;
        self.width += other.width;
    }
}

impl Around {
    /// Count `j`, a live job, around `target`: inlined, as the loop over
    /// the live jobs it runs in is an ETA's cost.
    #[inline]
    pub fn add(&mut self, target: &Queued, j: &Queued) {
        if j.order() < target.order() {
            self.ahead.add(Ahead::of(j));
        } else if j.job_id != target.job_id {
            let cpus = j.cpus_per_task.max(0.0);
            self.held
                .add(f64::from(j.running_tasks) * cpus, j.running_left_us);
        }
    }

    /// Count jobs ahead of the target whose sums are known already.
    pub fn add_ahead(&mut self, ahead: Ahead) {
        self.ahead.add(ahead);
    }

    /// When `target` should finish on a cluster of `capacity`, with these
    /// jobs around it ([`predict`]).
    pub fn predict(self, target: &Queued, capacity: f64) -> Predicted {
        let capacity = capacity.max(f64::MIN_POSITIVE);
        let (ahead, ahead_width) = (self.ahead.work, self.ahead.width);
        let held = self.held;
        let held = held.freeing();
        let ahead = ahead as f64;
        let busy = (ahead_width as f64 / 1e6).min(capacity);
        let tasks = f64::from(target.remaining_tasks.max(1));
        let cpus = target.cpus_per_task;
        // Its tasks that fit side by side in `free` capacity.
        let width = |free: f64| {
            if cpus > 0.0 {
                tasks.min(free.max(0.0) / cpus)
            } else {
                tasks
            }
        };
        let full = width(capacity).max(1.0);
        let own = target.remaining_work_us.max(0.0);
        let predicted = |us: f64, kind: Kind| Predicted {
            us,
            queue: target.queue,
            kind,
        };
        if own <= 0.0 {
            return predicted(1.0, Kind::Overrun);
        }
        let ahead_busy = if ahead > 0.0 { busy } else { 0.0 };
        if width(capacity - ahead_busy - held.at(0.0)) >= full {
            return predicted(own / full, Kind::AtOnce);
        }
        // Step through the time the held capacity takes to come free, in
        // steps growing from a small share of the shortest time scale; then
        // the rest in closed form.
        let (mut t, mut ahead_left, mut own_left) = (0.0, ahead, own);
        let mut dt = [held.shortest_us(), own / full, ahead / capacity]
            .into_iter()
            .filter(|x| *x > 0.0)
            .fold(f64::INFINITY, f64::min)
            / FIRST_STEPS;
        while held.at(t) > HELD_NONE * capacity {
            let free = capacity - held.at(t + dt / 2.0);
            let b = if ahead_left > 0.0 {
                busy.min(free.max(0.0))
            } else {
                0.0
            };
            let mut step = dt;
            if b > 0.0 && ahead_left / b < step {
                step = ahead_left / b;
            }
            let rate = width(free - b);
            if rate > 0.0 && own_left / rate <= step {
                return predicted(t + own_left / rate, Kind::Queued);
            }
            own_left -= rate * step;
            ahead_left = if step < dt {
                0.0
            } else {
                ahead_left - b * step
            };
            t += step;
            dt *= STEP_GROWTH;
        }
        let now = width(capacity - busy);
        predicted(
            t + drain(ahead_left, busy, own_left, now, full),
            Kind::Queued,
        )
    }
}

/// `x.round() as u128`, the same value for every `x`, without the two
/// library calls (`round`, `__fixunsdfti`) that were a third of an ETA's
/// instructions: below 2^64 the truncation is one instruction and the
/// fraction it leaves is exact.
pub(crate) fn round_u128(x: f64) -> u128 {
    if (0.0..TWO_POW_64).contains(&x) {
        let t = x as u64;
        u128::from(if x - t as f64 >= 0.5 { t + 1 } else { t })
    } else {
        x.round() as u128
    }
}

const TWO_POW_64: f64 = 18_446_744_073_709_551_616.0;

/// The time `own` work takes while `ahead` drains at `busy` (running on
/// `now` of its tasks meanwhile, then on `full`).
fn drain(ahead: f64, busy: f64, own: f64, now: f64, full: f64) -> f64 {
    if ahead <= 0.0 || busy <= 0.0 || now >= full {
        return own / full;
    }
    let drain_us = ahead / busy;
    if now * drain_us >= own {
        return own / now;
    }
    drain_us + (own - now * drain_us) / full
}

/// The capacity the running tasks of jobs behind hold, by the mean time
/// their tasks have left (in powers of two: the sum over buckets costs
/// the same whatever the number of jobs). Summed in millionths of
/// capacity and whole capacity·µs, like the work ahead, so that any order
/// of the jobs gives the same sums.
#[derive(Default)]
struct Held {
    /// Per bucket: capacity held, and capacity × mean time left.
    buckets: BTreeMap<i32, (u128, u128)>,
}

impl Held {
    fn add(&mut self, capacity: f64, left_us: f64) {
        if capacity > 0.0 && left_us >= 1.0 && left_us.is_finite() {
            let b = self
                .buckets
                .entry(left_us.log2().floor() as i32)
                .or_default();
            b.0 += round_u128(capacity * 1e6);
            b.1 += round_u128(capacity * left_us);
        }
    }

    /// Per bucket, shortest first: capacity held, and its mean time left,
    /// µs; converted once, for the many times the prediction reads them.
    fn freeing(self) -> Freeing {
        Freeing {
            buckets: self
                .buckets
                .into_values()
                .filter(|&(c, _)| c > 0)
                .map(|(c, cl)| {
                    let c = c as f64 / 1e6;
                    (c, cl as f64 / c)
                })
                .collect(),
        }
    }
}

/// The held capacity as it comes free ([`Held::freeing`]).
struct Freeing {
    buckets: Vec<(f64, f64)>,
}

impl Freeing {
    /// The capacity still held `t_us` from now.
    fn at(&self, t_us: f64) -> f64 {
        self.buckets
            .iter()
            .map(|&(c, left)| c * (-t_us / left).exp())
            .sum()
    }

    fn shortest_us(&self) -> f64 {
        self.buckets.first().map_or(0.0, |&(_, left)| left)
    }
}

/// The first step is this fraction of the shortest time scale.
const FIRST_STEPS: f64 = 16.0;
/// Each step this much longer than the one before.
const STEP_GROWTH: f64 = 1.2;
/// Capacity held below this share of the cluster is none.
const HELD_NONE: f64 = 1e-3;

/// The bias and spread of the model's predictions, learnt from finished
/// jobs apart by the queue they were in and their [`Kind`]: the lower the
/// queue, the more work yet to arrive overtakes a job, which the model
/// cannot see.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EtaCalibration {
    ratios: BTreeMap<(u8, Kind), Residuals>,
    /// Per queue, jobs at once and queued together: what either borrows
    /// while it has too few of its own.
    pooled: BTreeMap<u8, Residuals>,
}

/// An ETA: the time until the job finishes, µs, with an 80 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Eta {
    pub p10_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
}

impl EtaCalibration {
    /// The model's prediction as an ETA: scaled by the ratios learnt for
    /// its queue and kind once there are enough, or else by its queue's,
    /// the prediction itself (an empty interval) until then.
    pub fn eta(&self, predicted: Predicted) -> Eta {
        let own = self.ratios.get(&(predicted.queue, predicted.kind));
        let pooled = match predicted.kind {
            Kind::Overrun => None,
            Kind::AtOnce | Kind::Queued => self.pooled.get(&predicted.queue),
        };
        let at = |level| {
            own.and_then(|r| r.quantile(level))
                .or_else(|| pooled.and_then(|r| r.quantile(level)))
                .map_or(1.0, f64::exp)
                * predicted.us
        };
        Eta {
            p10_us: at(0.1),
            p50_us: at(0.5),
            p90_us: at(0.9),
        }
    }

    /// A job predicted as `predicted` took `actual_us`.
    pub fn learn(&mut self, predicted: Predicted, actual_us: f64) {
        let ratio = (actual_us.max(1.0) / predicted.us.max(1.0)).ln();
        if !ratio.is_finite() {
            return;
        }
        self.ratios
            .entry((predicted.queue, predicted.kind))
            .or_default()
            .push(ratio);
        if predicted.kind != Kind::Overrun {
            self.pooled.entry(predicted.queue).or_default().push(ratio);
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The rounding the ETA sums take gives exactly what `round() as
    /// u128` gives: at the edges of each branch, halves, and anywhere.
    #[test]
    fn the_fast_rounding_gives_the_library_value() {
        let edges = [
            0.0,
            -0.0,
            0.49999999999999994,
            0.5,
            1.5,
            2.5,
            4_503_599_627_370_495.5,
            4_503_599_627_370_496.0,
            9_007_199_254_740_993.0,
            TWO_POW_64 - 4096.0,
            TWO_POW_64,
            TWO_POW_64 * 4.0,
            -1.5,
            f64::MAX,
            f64::INFINITY,
            f64::NAN,
            f64::MIN_POSITIVE,
        ];
        for x in edges {
            assert_eq!(round_u128(x), x.round() as u128, "{x}");
        }
    }

    proptest! {
        #[test]
        fn round_u128_is_round_as_u128(bits in any::<u64>(), small in 0.0f64..1e12) {
            let x = f64::from_bits(bits);
            prop_assert_eq!(round_u128(x), x.round() as u128);
            prop_assert_eq!(round_u128(small), small.round() as u128);
        }
    }

    fn queued(job_id: u64, queue: u8, since_us: u64, work: f64, tasks: u32) -> Queued {
        Queued {
            job_id,
            queue,
            since_us,
            remaining_work_us: work,
            remaining_tasks: tasks,
            cpus_per_task: 1.0,
            running_tasks: 0,
            running_left_us: 0.0,
        }
    }

    /// The prediction's µs and kind.
    fn of(target: &Queued, live: impl IntoIterator<Item = Queued>, capacity: f64) -> (f64, Kind) {
        let p = predict(target, live, capacity);
        assert_eq!(p.queue, target.queue);
        (p.us, p.kind)
    }

    #[test]
    fn the_work_served_first_drains_then_the_job_runs_as_wide_as_it_can() {
        let target = queued(5, 1, 100, 40.0, 2);
        let live = [
            queued(1, 0, 500, 30.0, 3), // a higher queue: ahead
            queued(2, 1, 50, 10.0, 1),  // its queue, earlier: ahead
            queued(3, 1, 200, 99.0, 9), // its queue, later: behind
            queued(4, 2, 0, 99.0, 9),   // a lower queue: behind
            target,
        ];
        // The 4 tasks ahead fill 4 slots: their 40 µs drain, then the
        // job's 40 µs run over its 2 tasks.
        assert_eq!(of(&target, live, 4.0), (10.0 + 20.0, Kind::Queued));
        // One slot: the job runs one task at a time.
        assert_eq!(of(&target, live, 1.0), (40.0 + 40.0, Kind::Queued));
        // Eight: it starts at once, beside them.
        assert_eq!(of(&target, live, 8.0), (20.0, Kind::AtOnce));
        // Five: one task runs beside them while they drain (10 µs), the
        // rest at full width.
        assert_eq!(of(&target, live, 5.0), (10.0 + 30.0 / 2.0, Kind::Queued));
        // A small job is done on the one slot before they are.
        let small = queued(5, 1, 100, 4.0, 2);
        assert_eq!(of(&small, live, 5.0), (4.0, Kind::Queued));
        // Work already overrun counts as none.
        let overrun = queued(6, 0, 0, -5.0, 1);
        assert_eq!(of(&target, [overrun], 4.0), (20.0, Kind::AtOnce));
        // A job itself overrun is a unit, whatever is ahead.
        assert_eq!(of(&overrun, [target], 4.0), (1.0, Kind::Overrun));
    }

    #[test]
    fn the_capacity_jobs_behind_hold_comes_free_as_their_tasks_end() {
        let target = queued(5, 0, 100, 10.0, 1);
        // A job behind runs 4 tasks with 100 µs left each, on all 4 slots.
        let mut behind = queued(6, 1, 0, 400.0, 4);
        behind.running_tasks = 4;
        behind.running_left_us = 100.0;
        // Ending after exponential times of mean 100 µs, they leave
        // 4(1 − e^(−t/100)) slots free, of which the job takes one:
        // ∫ 4(1 − e^(−t/100)) dt = 10 at t ≈ 23.4 µs.
        let (us, kind) = of(&target, [behind, target], 4.0);
        assert_eq!(kind, Kind::Queued);
        assert!((us - 23.4).abs() < 0.5, "{us}");
        // Holding 2 of the 4, it leaves the job room at once.
        behind.running_tasks = 2;
        assert_eq!(of(&target, [behind, target], 4.0), (10.0, Kind::AtOnce));
        // The running tasks of a job ahead are its width, not held twice:
        // as without them, the job waits for its 10 µs of work.
        let mut ahead = behind;
        ahead.queue = 0;
        ahead.since_us = 0;
        ahead.remaining_work_us = 40.0;
        ahead.running_tasks = 4;
        assert_eq!(
            of(&target, [ahead, target], 4.0),
            (10.0 + 10.0, Kind::Queued)
        );
    }

    #[test]
    fn a_running_task_has_its_jobs_mean_task_time_left_less_what_it_ran() {
        let progress = JobProgress {
            job_id: 1,
            queue: 2,
            since_us: 5,
            size_us: 400.0,
            width: 4,
            unfinished: 3,
            running: 2,
            attained_us: 160.0,
            running_attained_us: 60.0,
            cpus_per_task: 1.0,
        };
        let q = Queued::from(progress);
        assert_eq!((q.remaining_work_us, q.remaining_tasks), (240.0, 3));
        // Tasks of 100 µs on average; the two running ran 30 µs each.
        assert_eq!((q.running_tasks, q.running_left_us), (2, 70.0));
        // Past the mean, a tenth of it.
        let late = Queued::from(JobProgress {
            running_attained_us: 300.0,
            ..progress
        });
        assert_eq!(late.running_left_us, 10.0);
    }

    #[test]
    fn in_cpus_work_and_width_weigh_by_each_tasks_request() {
        let mut target = queued(5, 1, 100, 40.0, 8);
        target.cpus_per_task = 0.5;
        let mut ahead = queued(1, 0, 0, 30.0, 3);
        ahead.cpus_per_task = 2.0;
        // 60 CPU·µs ahead fill the 4 CPUs, then 40 µs over the 8 tasks
        // that fit at half a CPU each.
        assert_eq!(
            of(&target, [ahead, target], 4.0),
            (15.0 + 5.0, Kind::Queued)
        );
        // A job without a request is held by no CPU: all its tasks at once.
        target.cpus_per_task = 0.0;
        assert_eq!(of(&target, [ahead, target], 4.0), (5.0, Kind::AtOnce));
        // One wider than the cluster still runs, a task at a time.
        target.cpus_per_task = 8.0;
        assert_eq!(
            of(&target, [ahead, target], 4.0),
            (15.0 + 40.0, Kind::Queued)
        );
    }

    #[test]
    fn the_bias_and_spread_of_finished_jobs_scale_later_etas() {
        let mut c = EtaCalibration::default();
        let predicted = |us, queue, kind| Predicted { us, queue, kind };
        assert_eq!(
            c.eta(predicted(100.0, 0, Kind::Queued)),
            Eta {
                p10_us: 100.0,
                p50_us: 100.0,
                p90_us: 100.0
            }
        );
        // Waiting jobs of queue 1 took 1× to 3× their prediction, evenly.
        for i in 0..200 {
            c.learn(
                predicted(10.0, 1, Kind::Queued),
                10.0 * (1.0 + f64::from(i) / 100.0),
            );
        }
        // Queue 0 learnt nothing.
        assert_eq!(c.eta(predicted(100.0, 0, Kind::Queued)).p90_us, 100.0);
        let eta = c.eta(predicted(100.0, 1, Kind::Queued));
        assert!((eta.p50_us - 200.0).abs() < 2.0, "{eta:?}");
        assert!((eta.p10_us - 120.0).abs() < 2.0, "{eta:?}");
        assert!((eta.p90_us - 280.0).abs() < 2.0, "{eta:?}");
        // Its jobs that start at once borrow those ratios while they have
        // too few of their own, then have theirs: here, exact.
        assert_eq!(c.eta(predicted(100.0, 1, Kind::AtOnce)), eta);
        for _ in 0..100 {
            c.learn(predicted(10.0, 1, Kind::AtOnce), 10.0);
        }
        assert_eq!(c.eta(predicted(100.0, 1, Kind::AtOnce)).p10_us, 100.0);
        assert_eq!(c.eta(predicted(100.0, 1, Kind::AtOnce)).p90_us, 100.0);
        assert_eq!(c.eta(predicted(100.0, 1, Kind::Queued)).p50_us, eta.p50_us);
        // Overrun jobs borrow nothing: their time still to go is learnt
        // as such (here 5 to 15 s, evenly).
        assert_eq!(c.eta(predicted(1.0, 1, Kind::Overrun)).p90_us, 1.0);
        for i in 0..100 {
            c.learn(predicted(1.0, 1, Kind::Overrun), 5e6 + 1e5 * f64::from(i));
        }
        let eta = c.eta(predicted(1.0, 1, Kind::Overrun));
        assert!((eta.p50_us - 10e6).abs() < 0.2e6, "{eta:?}");
    }
}
