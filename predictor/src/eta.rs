//! When will a job finish? A prediction from the queue state alone: the
//! work GS serves before the job (jobs in higher-priority queues, and
//! earlier arrivals in its own), the job's own work, and the cluster's
//! capacity. Capacity and each task's share of it are in one unit, task
//! slots (the simulator; a Slurm node's CPUs with a CPU a task) or CPUs
//! (a cluster's machines, each task taking its job's CPU request). The
//! model is a fluid drain that knows nothing of jobs still to
//! come, so it is biased short under load; [`EtaCalibration`] learns that
//! bias, and the spread around it, from the jobs that finished (the same
//! conformal method as [`crate::calibration`], on ln(actual / predicted)).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::calibration::Residuals;

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
}

impl Queued {
    fn order(&self) -> (u8, u64, u64) {
        (self.queue, self.since_us, self.job_id)
    }
}

/// Predicted µs until `target` finishes on a cluster of `capacity`: the
/// work served before it drains at the cluster's full rate, then the job
/// runs at the parallelism its remaining tasks and the capacity allow.
pub fn predicted_us(target: &Queued, live: impl IntoIterator<Item = Queued>, capacity: f64) -> f64 {
    let capacity = capacity.max(f64::MIN_POSITIVE);
    // Summed in whole µs, so that the same jobs give the same sum in any
    // order (a restored engine holds them in another).
    let ahead: u128 = live
        .into_iter()
        .filter(|j| j.order() < target.order())
        .map(|j| (j.remaining_work_us.max(0.0) * j.cpus_per_task.max(0.0)).round() as u128)
        .sum();
    let ahead = ahead as f64;
    let tasks = f64::from(target.remaining_tasks.max(1));
    let parallel = if target.cpus_per_task > 0.0 {
        tasks.min(capacity / target.cpus_per_task).max(1.0)
    } else {
        tasks
    };
    ahead / capacity + target.remaining_work_us.max(0.0) / parallel
}

/// The bias and spread of the model's predictions, learnt from finished
/// jobs per queue they were submitted to: the lower the queue, the more
/// work yet to arrive overtakes a job, which the model cannot see.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EtaCalibration {
    ratios: BTreeMap<u8, Residuals>,
}

/// An ETA: the time until the job finishes, µs, with an 80 % interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Eta {
    pub p10_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
}

impl EtaCalibration {
    /// The model's prediction `predicted_us` for a job in `queue` as an
    /// ETA: scaled by the ratios learnt in that queue once there are
    /// enough, the prediction itself (an empty interval) until then.
    pub fn eta(&self, queue: u8, predicted_us: f64) -> Eta {
        let ratios = self.ratios.get(&queue);
        let at =
            |level| ratios.and_then(|r| r.quantile(level)).map_or(1.0, f64::exp) * predicted_us;
        Eta {
            p10_us: at(0.1),
            p50_us: at(0.5),
            p90_us: at(0.9),
        }
    }

    /// A job submitted to `queue` and predicted to take `predicted_us`
    /// took `actual_us`.
    pub fn learn(&mut self, queue: u8, predicted_us: f64, actual_us: f64) {
        let ratio = (actual_us.max(1.0) / predicted_us.max(1.0)).ln();
        if ratio.is_finite() {
            self.ratios.entry(queue).or_default().push(ratio);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queued(job_id: u64, queue: u8, since_us: u64, work: f64, tasks: u32) -> Queued {
        Queued {
            job_id,
            queue,
            since_us,
            remaining_work_us: work,
            remaining_tasks: tasks,
            cpus_per_task: 1.0,
        }
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
        // 40 µs of work ahead on 4 slots, then 40 µs over 2 tasks.
        assert_eq!(predicted_us(&target, live, 4.0), 10.0 + 20.0);
        // One slot: the job runs one task at a time.
        assert_eq!(predicted_us(&target, live, 1.0), 40.0 + 40.0);
        // Work already overrun counts as none.
        let overrun = queued(6, 0, 0, -5.0, 1);
        assert_eq!(predicted_us(&target, [overrun], 4.0), 20.0);
    }

    #[test]
    fn in_cpus_work_weighs_by_each_tasks_request() {
        let mut target = queued(5, 1, 100, 40.0, 8);
        target.cpus_per_task = 0.5;
        let mut ahead = queued(1, 0, 0, 30.0, 3);
        ahead.cpus_per_task = 2.0;
        // 60 CPU·µs ahead on 4 CPUs, then 40 µs over the 8 tasks that
        // fit at half a CPU each.
        assert_eq!(predicted_us(&target, [ahead, target], 4.0), 15.0 + 5.0);
        // A job without a request runs all its tasks at once.
        target.cpus_per_task = 0.0;
        assert_eq!(predicted_us(&target, [ahead, target], 4.0), 15.0 + 5.0);
        // One wider than the cluster still runs, a task at a time.
        target.cpus_per_task = 8.0;
        assert_eq!(predicted_us(&target, [ahead, target], 4.0), 15.0 + 40.0);
    }

    #[test]
    fn the_bias_and_spread_of_finished_jobs_scale_later_etas() {
        let mut c = EtaCalibration::default();
        assert_eq!(
            c.eta(0, 100.0),
            Eta {
                p10_us: 100.0,
                p50_us: 100.0,
                p90_us: 100.0
            }
        );
        // Jobs took 1× to 3× their prediction, evenly.
        for i in 0..200 {
            c.learn(1, 10.0, 10.0 * (1.0 + f64::from(i) / 100.0));
        }
        // Queue 0 has learnt nothing.
        assert_eq!(c.eta(0, 100.0).p90_us, 100.0);
        let eta = c.eta(1, 100.0);
        assert!((eta.p50_us - 200.0).abs() < 2.0, "{eta:?}");
        assert!((eta.p10_us - 120.0).abs() < 2.0, "{eta:?}");
        assert!((eta.p90_us - 280.0).abs() < 2.0, "{eta:?}");
    }
}
