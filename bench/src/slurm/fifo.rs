//! What a choice of cluster can gain at most, on `bench federation`'s
//! workload: a model of its clusters as Slurm runs them there, each job an
//! array of one-CPU tasks started in submission order on the first CPU to
//! come free (with every task one CPU wide, backfilling has nothing to
//! fill), every task taking its runtime, with no latency anywhere. Jobs are
//! sent one by one, at their arrival, as a way chooses:
//!
//! - as the live run's random way sent them;
//! - by the time limits: where the job's first task would start, were
//!   every task that is running or waiting there to run its job's limit
//!   (what `sbatch --test-only` answers from Slurm's view);
//! - by the runtimes: where the job would end first, every runtime known.
//!
//! The third is what a chooser that knew every runtime, and the state of
//! every cluster, would reach job by job; the gap between it and the
//! second is all a better estimate can win by choosing the cluster alone.
//! [`shortest_first_avg_jct_s`] plays the same jobs on clusters that start
//! the job of least work first, as jobcast's queues do through `slurm
//! apply`: what choosing and ordering together can win.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Clusters of one-CPU slots, each starting the tasks sent to it in the
/// order they were sent.
#[derive(Debug, Clone)]
pub struct FifoClusters {
    clusters: Vec<Cluster>,
}

#[derive(Debug, Clone)]
struct Cluster {
    /// When each CPU comes free of the tasks sent so far, s.
    free_s: Vec<f64>,
    /// Every task sent: its start and end, and its job's time limit, s.
    tasks: Vec<Task>,
}

#[derive(Debug, Clone, Copy)]
struct Task {
    start_s: f64,
    end_s: f64,
    limit_s: f64,
}

/// A job as the model sends it.
#[derive(Debug, Clone)]
pub struct Job<'a> {
    pub arrival_s: f64,
    pub runtimes_s: &'a [f64],
    pub limit_s: f64,
}

/// The CPU among `free_s` that comes free first.
fn first_free(free_s: &[f64]) -> usize {
    (0..free_s.len())
        .min_by(|&a, &b| free_s[a].total_cmp(&free_s[b]))
        .expect("a cluster has a CPU")
}

/// Play `durations_s`, in order, on CPUs free at `free_s` from
/// `arrival_s`: each task's start and end.
fn play(
    free_s: &mut [f64],
    arrival_s: f64,
    durations_s: impl Iterator<Item = f64>,
) -> Vec<(f64, f64)> {
    durations_s
        .map(|d| {
            let cpu = first_free(free_s);
            let start = free_s[cpu].max(arrival_s);
            free_s[cpu] = start + d;
            (start, start + d)
        })
        .collect()
}

impl FifoClusters {
    /// Idle clusters of these many CPUs.
    pub fn new(cpus: &[u32]) -> Self {
        FifoClusters {
            clusters: cpus
                .iter()
                .map(|&n| Cluster {
                    free_s: vec![0.0; n.max(1) as usize],
                    tasks: Vec::new(),
                })
                .collect(),
        }
    }

    /// When `job` would end on cluster `c`, every runtime known.
    pub fn end_s(&self, c: usize, job: &Job) -> f64 {
        let mut free = self.clusters[c].free_s.clone();
        play(&mut free, job.arrival_s, job.runtimes_s.iter().copied())
            .into_iter()
            .map(|(_, end)| end)
            .fold(job.arrival_s, f64::max)
    }

    /// When `job`'s first task would start on cluster `c` by the time
    /// limits: the tasks running at its arrival to their start plus their
    /// limit, those waiting after them for their limit each.
    pub fn limit_start_s(&self, c: usize, job: &Job) -> f64 {
        let cluster = &self.clusters[c];
        let at = job.arrival_s;
        let mut free: Vec<f64> = cluster
            .tasks
            .iter()
            .filter(|t| t.start_s <= at && at < t.end_s)
            .map(|t| t.start_s + t.limit_s)
            .collect();
        free.resize(cluster.free_s.len(), at);
        let mut waiting: Vec<&Task> = cluster.tasks.iter().filter(|t| t.start_s > at).collect();
        waiting.sort_by(|a, b| a.start_s.total_cmp(&b.start_s));
        play(&mut free, at, waiting.iter().map(|t| t.limit_s));
        free.into_iter().fold(f64::INFINITY, f64::min).max(at)
    }

    /// Send `job` to cluster `c`: its JCT, s.
    pub fn send(&mut self, c: usize, job: &Job) -> f64 {
        let cluster = &mut self.clusters[c];
        let played = play(
            &mut cluster.free_s,
            job.arrival_s,
            job.runtimes_s.iter().copied(),
        );
        let mut end = job.arrival_s;
        for (start_s, end_s) in played {
            cluster.tasks.push(Task {
                start_s,
                end_s,
                limit_s: job.limit_s,
            });
            end = end.max(end_s);
        }
        end - job.arrival_s
    }

    /// How many clusters there are to choose from.
    pub fn clusters(&self) -> usize {
        self.clusters.len()
    }
}

/// The average JCT of `jobs`, in arrival order, each sent where `choose`
/// says on idle clusters of `cpus`.
pub fn average_jct_s(
    cpus: &[u32],
    jobs: &[Job],
    mut choose: impl FnMut(usize, &FifoClusters, &Job) -> usize,
) -> f64 {
    let mut model = FifoClusters::new(cpus);
    let total: f64 = jobs
        .iter()
        .enumerate()
        .map(|(i, job)| {
            let c = choose(i, &model, job);
            model.send(c, job)
        })
        .sum();
    total / jobs.len().max(1) as f64
}

/// The cluster of the least `key`, the first on a tie.
pub fn least(model: &FifoClusters, key: impl Fn(usize) -> f64) -> usize {
    (0..model.clusters())
        .min_by(|&a, &b| key(a).total_cmp(&key(b)))
        .expect("a cluster")
}

/// The average JCT of `jobs` on idle clusters of `cpus` that start their
/// waiting tasks shortest job first (by the job's work, every runtime
/// known; in arrival order among equals), each job sent to the cluster
/// with the least work left per CPU at its arrival: what a choice of
/// cluster and an order within each cluster can gain together.
pub fn shortest_first_avg_jct_s(cpus: &[u32], jobs: &[Job]) -> f64 {
    // Times in whole µs, so that the heaps order them.
    let us = |s: f64| (s * 1e6).round() as u64;
    struct Ordered {
        free: u32,
        cpus: u32,
        /// Running tasks: their end and their job.
        running: BinaryHeap<Reverse<(u64, usize)>>,
        /// Waiting tasks: their job's work, the job, the runtime.
        waiting: BinaryHeap<Reverse<(u64, usize, u64)>>,
    }
    impl Ordered {
        /// Work left per CPU at `now`.
        fn left(&self, now: u64) -> u64 {
            let running: u64 = self.running.iter().map(|Reverse((t, _))| t - now).sum();
            let waiting: u64 = self.waiting.iter().map(|Reverse((_, _, r))| r).sum();
            (running + waiting) / u64::from(self.cpus)
        }
    }
    let mut clusters: Vec<Ordered> = cpus
        .iter()
        .map(|&n| Ordered {
            free: n.max(1),
            cpus: n.max(1),
            running: BinaryHeap::new(),
            waiting: BinaryHeap::new(),
        })
        .collect();
    let mut order: Vec<usize> = (0..jobs.len()).collect();
    order.sort_by_key(|&j| us(jobs[j].arrival_s));
    let mut ends: Vec<u64> = jobs.iter().map(|j| us(j.arrival_s)).collect();
    let mut arrivals = order.into_iter().peekable();
    loop {
        let next_end = clusters
            .iter()
            .filter_map(|c| c.running.peek().map(|Reverse((t, _))| *t))
            .min();
        let next_arrival = arrivals.peek().map(|&j| us(jobs[j].arrival_s));
        let Some(now) = next_end.into_iter().chain(next_arrival).min() else {
            break;
        };
        for c in &mut clusters {
            while let Some(&Reverse((t, j))) = c.running.peek()
                && t <= now
            {
                c.running.pop();
                ends[j] = ends[j].max(t);
                c.free += 1;
            }
        }
        while let Some(j) = arrivals.next_if(|&j| us(jobs[j].arrival_s) <= now) {
            let c = (0..clusters.len())
                .min_by_key(|&c| clusters[c].left(now))
                .expect("a cluster");
            let work = jobs[j].runtimes_s.iter().map(|&r| us(r)).sum();
            for &r in jobs[j].runtimes_s {
                clusters[c].waiting.push(Reverse((work, j, us(r))));
            }
        }
        for c in &mut clusters {
            while c.free > 0
                && let Some(Reverse((_, j, r))) = c.waiting.pop()
            {
                c.free -= 1;
                c.running.push(Reverse((now + r, j)));
            }
        }
    }
    let total: u64 = jobs
        .iter()
        .zip(&ends)
        .map(|(job, &end)| end - us(job.arrival_s))
        .sum();
    total as f64 / 1e6 / jobs.len().max(1) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(arrival_s: f64, runtimes_s: &[f64], limit_s: f64) -> Job<'_> {
        Job {
            arrival_s,
            runtimes_s,
            limit_s,
        }
    }

    /// Two CPUs: a job of three 10-s tasks runs two at once, then the
    /// third; a job sent after it waits for the first CPU to come free.
    #[test]
    fn tasks_start_in_order_on_the_first_cpu_free() {
        let mut model = FifoClusters::new(&[2]);
        assert_eq!(model.send(0, &job(0.0, &[10.0, 10.0, 10.0], 60.0)), 20.0);
        // At 5 s one CPU is busy to 20 s, the other to 10 s: it then
        // takes both tasks, one after the other.
        assert_eq!(model.end_s(0, &job(5.0, &[1.0, 1.0], 60.0)), 12.0);
        assert_eq!(model.send(0, &job(5.0, &[1.0, 1.0], 60.0)), 7.0);
    }

    /// By the limits, a running task holds its CPU to its start plus its
    /// limit, and a waiting one for its limit after that.
    #[test]
    fn the_time_limits_view_holds_each_task_for_its_limit() {
        let mut model = FifoClusters::new(&[1, 1]);
        // Cluster 0: a 10-s task that asked for 100 s, and one waiting.
        model.send(0, &job(0.0, &[10.0, 10.0], 100.0));
        // Cluster 1: a 50-s task that asked for 60 s.
        model.send(1, &job(0.0, &[50.0], 60.0));
        let next = job(5.0, &[1.0], 60.0);
        assert_eq!(model.limit_start_s(0, &next), 200.0);
        assert_eq!(model.limit_start_s(1, &next), 60.0);
        // The runtimes say otherwise: cluster 0 frees at 20 s, 1 at 50 s.
        assert_eq!(model.end_s(0, &next), 21.0);
        assert_eq!(model.end_s(1, &next), 51.0);
        // Once a task has ended, its limit holds nothing.
        let later = job(15.0, &[1.0], 60.0);
        assert_eq!(model.limit_start_s(0, &later), 110.0);
    }

    /// The choice by the runtimes sends each job where it ends first.
    #[test]
    fn the_choice_by_runtimes_beats_the_choice_by_limits_here() {
        let runtimes = [[10.0], [50.0], [1.0]];
        let jobs: Vec<Job> = [(0.0, 100.0), (0.0, 60.0), (5.0, 60.0)]
            .iter()
            .zip(&runtimes)
            .map(|(&(a, l), r)| job(a, r, l))
            .collect();
        let fixed = |i: usize| [0, 1][i.min(1)];
        let by_limits = average_jct_s(&[1, 1], &jobs, |i, m, j| {
            if i < 2 {
                fixed(i)
            } else {
                least(m, |c| m.limit_start_s(c, j))
            }
        });
        let by_runtimes = average_jct_s(&[1, 1], &jobs, |i, m, j| {
            if i < 2 {
                fixed(i)
            } else {
                least(m, |c| m.end_s(c, j))
            }
        });
        // The third job: by the limits to cluster 1 (ends at 51 s), by the
        // runtimes to cluster 0 (ends at 11 s).
        assert_eq!(by_limits, (10.0 + 50.0 + 46.0) / 3.0);
        assert_eq!(by_runtimes, (10.0 + 50.0 + 6.0) / 3.0);
    }

    /// One CPU: a job running at the arrivals keeps its CPU; then the
    /// job of least work goes first, whatever its arrival. Two CPUs
    /// apart: each job goes where the least work is left.
    #[test]
    fn shortest_first_serves_the_least_work_on_the_least_loaded_cluster() {
        // Jobs A, B and C arriving at 0, 1 and 2 s.
        let abc = |runtimes: [&'static [f64]; 3]| -> Vec<Job<'static>> {
            [0.0, 1.0, 2.0]
                .into_iter()
                .zip(runtimes)
                .map(|(a, r)| job(a, r, 60.0))
                .collect()
        };
        // A 0–10 s; C (1 s of work) 10–11 s, before B's 20 s: 11–21, 21–31.
        let jobs = abc([&[10.0], &[10.0, 10.0], &[1.0]]);
        assert_eq!(
            shortest_first_avg_jct_s(&[1], &jobs),
            (10.0 + 30.0 + 9.0) / 3.0
        );
        // A on cluster 0; B where nothing is left (1), 1–6 s; C where 4 s
        // are left against 8 (1 again), 6–7 s.
        let jobs = abc([&[10.0], &[5.0], &[1.0]]);
        assert_eq!(
            shortest_first_avg_jct_s(&[1, 1], &jobs),
            (10.0 + 5.0 + 5.0) / 3.0
        );
    }
}
