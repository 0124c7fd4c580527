//! A trace's jobs shaped to run on a real cluster (`jobcast bench slurm`):
//! the first `n` of the jobs drawn for it, their task runtimes scaled to seconds, and
//! their arrivals compressed or stretched so that the offered load over the
//! run is what is asked for the cluster's CPUs (one task per CPU): 1, as
//! the paper's extracted traces are (§4.3), or more.

use crate::workload::SimJob;

/// One job as the cluster runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveJob {
    /// The trace's job.
    pub job: SimJob,
    /// Seconds from the start of the run to its submission.
    pub arrival_s: f64,
    /// Each task's runtime, seconds.
    pub runtimes_s: Vec<f64>,
}

impl LiveJob {
    /// The same job at live times, µs, for the simulator: its submission at
    /// its live arrival, its tasks' runtimes as they run live.
    pub fn as_simulated(&self) -> SimJob {
        let mut job = self.job.job().clone();
        job.time_us = (self.arrival_s * 1e6).round() as u64;
        let runtimes: Vec<u64> = self
            .runtimes_s
            .iter()
            .map(|r| (r * 1e6).round() as u64)
            .collect();
        let end = job.time_us + runtimes.iter().sum::<u64>();
        SimJob::new(job, runtimes, end).expect("a job the trace already accepted")
    }
}

/// The first `n` of `jobs` (in order of arrival), each task's runtime
/// multiplied by `time_scale` (trace µs to live s: `1e-6` keeps seconds as
/// seconds) and raised to at least `min_task_s`, and arrivals spread, in
/// the trace's order and proportions, over the time `cpus` CPUs need for
/// all their work divided by `load`.
pub fn live_workload(
    jobs: &[SimJob],
    n: usize,
    time_scale: f64,
    min_task_s: f64,
    cpus: u32,
    load: f64,
) -> Vec<LiveJob> {
    let chosen = &jobs[..n.min(jobs.len())];
    let mut live: Vec<LiveJob> = chosen
        .iter()
        .map(|job| LiveJob {
            job: job.clone(),
            arrival_s: 0.0,
            runtimes_s: job
                .runtimes_us()
                .iter()
                .map(|&r| (r as f64 * time_scale).max(min_task_s))
                .collect(),
        })
        .collect();
    let work: f64 = live.iter().flat_map(|j| &j.runtimes_s).sum();
    let span_s = work / f64::from(cpus.max(1)) / load;
    let first = chosen.first().map_or(0, |j| j.arrival_us());
    let last = chosen.last().map_or(0, |j| j.arrival_us());
    let trace_span = last.saturating_sub(first) as f64;
    for (job, trace) in live.iter_mut().zip(chosen) {
        job.arrival_s = if trace_span > 0.0 {
            (trace.arrival_us() - first) as f64 / trace_span * span_s
        } else {
            0.0
        };
    }
    live
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::event::JobSubmitted;

    use super::*;

    fn job(id: u64, arrival_s: u64, runtimes_s: &[u64]) -> SimJob {
        let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * 1_000_000).collect();
        let submitted = JobSubmitted {
            time_us: arrival_s * 1_000_000,
            job_id: id,
            user: "u".into(),
            job_name: format!("j{id}"),
            logical_name: String::new(),
            scheduling_class: 0,
            priority: 0,
            cpu_request: 0.0,
            mem_request: 0.0,
            num_tasks: runtimes.len() as u32,
            partition: String::new(),
            time_limit_us: None,
            stages: None,
        };
        SimJob::new(submitted, runtimes, 0).unwrap()
    }

    #[test]
    fn arrivals_spread_over_the_time_the_cpus_need_for_the_work() {
        let jobs = [
            job(1, 100, &[600, 1200]),
            job(2, 400, &[60]),
            job(3, 1100, &[300, 300, 300]),
            job(4, 5000, &[1]),
        ];
        // Trace seconds to tenths of live seconds, at least 1 s a task.
        let live = live_workload(&jobs, 3, 1e-7, 1.0, 4, 1.0);
        assert_eq!(live.len(), 3);
        assert_eq!(live[0].runtimes_s, [60.0, 120.0]);
        assert_eq!(live[1].runtimes_s, [6.0]);
        // 276 s of work on 4 CPUs: arrivals over 69 s, in the trace's
        // proportions (0, 300 and 1000 s of 1000).
        let arrivals: Vec<f64> = live.iter().map(|j| j.arrival_s).collect();
        assert_eq!(arrivals, [0.0, 0.3 * 69.0, 69.0]);
        let simulated = live[2].as_simulated();
        assert_eq!(simulated.arrival_us(), 69_000_000);
        assert_eq!(simulated.runtimes_us(), [30_000_000; 3]);
        assert_eq!(simulated.job_id(), 3);
        // A task shorter than the floor is raised to it.
        assert_eq!(
            live_workload(&jobs[3..], 1, 1e-7, 1.0, 4, 1.0)[0].runtimes_s,
            [1.0]
        );
        // Twice the load: arrivals twice as close.
        let doubled = live_workload(&jobs, 3, 1e-7, 1.0, 4, 2.0);
        assert_eq!(doubled[2].arrival_s, 34.5);
    }
}
