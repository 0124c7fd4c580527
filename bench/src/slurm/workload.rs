//! A trace's jobs shaped to run on a real cluster (`jobcast bench slurm`):
//! the first `n` of the jobs drawn for it, their task runtimes scaled to
//! seconds, and their arrivals compressed or stretched so that the offered
//! load over the run is what is asked for the cluster's CPUs (one task per
//! CPU): 1, as the paper's extracted traces are (§4.3), or more.
//!
//! Once on Slurm a job is what `slurm watch` reads back: the name the
//! bench gave it (as job and logical name), the submitting user, the
//! partition, memory and time limit it asked for, one CPU a task.
//! [`SlurmShape`] gives jobs that shape, and the `sbatch` arguments that
//! ask for it, so that the simulator and the history jobcast starts from
//! ([`past_jobs`]) see the features the live service sees: a feature value
//! only the live jobs had would match none of the past.

use jobcast_ingest::event::{Event, JobSubmitted};
use jobcast_predictor::queues::QueueConfig;

use jobcast_replay::evaluate::{EvalConfig, EvalError, PolicyKind, run_policy};
use jobcast_replay::sim::{SimEvent, SimReport};
use jobcast_replay::workload::{Exclusions, SimJob, Split, Workload};

/// One job as the cluster runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct LiveJob {
    /// The trace's job.
    pub job: SimJob,
    /// The id it runs under: the trace's, or the one a cluster gave it.
    /// Policies that draw pilots draw them by job id, so a simulation of
    /// a run on the cluster picks the service's pilots only under the
    /// cluster's ids.
    pub id: u64,
    /// Seconds from the start of the run to its submission.
    pub arrival_s: f64,
    /// Each task's runtime, seconds.
    pub runtimes_s: Vec<f64>,
}

impl LiveJob {
    /// The same job in Slurm's shape at live times, µs from `start_us`, for
    /// the simulator: under its id, its submission at its live arrival,
    /// its tasks' runtimes as they run live.
    pub fn as_simulated(&self, shape: &SlurmShape, start_us: u64) -> SimJob {
        shape.job(
            &self.job,
            self.id,
            start_us + (self.arrival_s * 1e6).round() as u64,
            &self.runtimes_s,
        )
    }
}

/// How trace task runtimes become live seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TaskScale {
    /// Live seconds per trace µs (`1e-6` keeps seconds as seconds).
    pub per_us: f64,
    /// No task runs shorter (Slurm's times are whole seconds).
    pub min_s: f64,
    /// Nor longer.
    pub max_s: f64,
}

impl TaskScale {
    /// A trace runtime in live whole seconds, within the bounds.
    pub fn seconds(&self, runtime_us: u64) -> f64 {
        (runtime_us as f64 * self.per_us)
            .min(self.max_s)
            .round()
            .max(self.min_s)
    }

    /// The GS queues for jobs at this scale: the default layout with its
    /// thresholds scaled as the runtimes are, so that a job lands in the
    /// queue its trace size belongs in. Left unscaled, every job of a
    /// workload scaled 100× down whose trace size is under 10⁵ s (nearly
    /// all of Google's) falls into the top queue, where GS is FIFO.
    pub fn queues(&self) -> QueueConfig {
        let default = QueueConfig::default();
        QueueConfig {
            q0_upper_us: default.q0_upper_us * self.per_us * 1e6,
            ..default
        }
    }
}

/// What the Slurm watcher reads back of a job the bench submitted.
#[derive(Debug, Clone, PartialEq)]
pub struct SlurmShape {
    /// The user jobs are submitted as, and their group.
    pub user: String,
    pub group: String,
    /// The partition they are submitted to.
    pub partition: String,
    /// The memory each task asks for, MB.
    pub mem_per_cpu_mb: u64,
    /// The time limit each job asks for, minutes.
    pub time_limit_minutes: u64,
}

impl SlurmShape {
    /// The name a trace job is submitted under (`sbatch -J`).
    pub fn name(job: &SimJob) -> String {
        if job.job().job_name.is_empty() {
            format!("job-{}", job.job_id())
        } else {
            job.job().job_name.clone()
        }
    }

    /// The `sbatch` arguments that give a job this shape, its name aside.
    pub fn sbatch_args(&self) -> Vec<String> {
        vec![
            "-c".into(),
            "1".into(),
            "-p".into(),
            self.partition.clone(),
            format!("--mem-per-cpu={}", self.mem_per_cpu_mb),
            format!("--time={}", self.time_limit_minutes),
        ]
    }

    /// The submission the watcher reports for `job`: its name as job and
    /// logical name, this user and group, partition, memory and time limit,
    /// one CPU a task.
    fn submitted(&self, job: &SimJob, job_id: u64, time_us: u64) -> JobSubmitted {
        let name = Self::name(job);
        JobSubmitted {
            time_us,
            job_id,
            user: self.user.clone(),
            group: self.group.clone(),
            job_name: name.clone(),
            logical_name: name,
            scheduling_class: 0,
            priority: 0,
            cpu_request: 1.0,
            mem_request: self.mem_per_cpu_mb as f64,
            num_tasks: job.width(),
            partition: self.partition.clone(),
            time_limit_us: Some(self.time_limit_minutes * 60_000_000),
            deadline_us: None,
            stages: None,
            cluster: String::new(),
        }
    }

    /// `job` as `job_id` submitted at `time_us` in this shape, its tasks
    /// running `runtimes_s` side by side.
    fn job(&self, job: &SimJob, job_id: u64, time_us: u64, runtimes_s: &[f64]) -> SimJob {
        let runtimes: Vec<u64> = runtimes_s
            .iter()
            .map(|r| (r * 1e6).round() as u64)
            .collect();
        let end = time_us + runtimes.iter().max().copied().unwrap_or(0);
        SimJob::new(self.submitted(job, job_id, time_us), runtimes, end)
            .expect("a job the trace already accepted")
    }
}

/// The first `n` of `jobs` (in order of arrival), each task's runtime
/// scaled, and arrivals spread, in the trace's order and proportions, over
/// the time `cpus` CPUs need for all their work divided by `load`.
pub fn live_workload(
    jobs: &[SimJob],
    n: usize,
    scale: &TaskScale,
    cpus: u32,
    load: f64,
) -> Vec<LiveJob> {
    let chosen = &jobs[..n.min(jobs.len())];
    let mut live: Vec<LiveJob> = chosen
        .iter()
        .map(|job| LiveJob {
            job: job.clone(),
            id: job.job_id(),
            arrival_s: 0.0,
            runtimes_s: job
                .runtimes_us()
                .iter()
                .map(|&r| scale.seconds(r))
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

/// Job ids of the past start here: above any Slurm job id (Slurm's
/// largest is 67,043,328), so that no past job is taken for a live one.
pub const PAST_JOB_IDS: u64 = 1 << 40;

/// The cluster's past as jobcast would have seen it: the trace's history
/// jobs in Slurm's shape with scaled runtimes, in the order they ended,
/// one submitted each second from `start_us`, numbered from
/// [`PAST_JOB_IDS`].
pub fn past_jobs(
    history: &[SimJob],
    scale: &TaskScale,
    shape: &SlurmShape,
    start_us: u64,
) -> Vec<SimJob> {
    let mut ordered: Vec<&SimJob> = history.iter().collect();
    ordered.sort_by_key(|j| (j.end_us(), j.job_id()));
    ordered
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            let runtimes: Vec<f64> = job
                .runtimes_us()
                .iter()
                .map(|&r| scale.seconds(r))
                .collect();
            let i = i as u64;
            shape.job(job, PAST_JOB_IDS + i, start_us + i * 1_000_000, &runtimes)
        })
        .collect()
}

/// `policy` over the `live` jobs, simulated on `cpus` slots with `queues`
/// and the cluster's dispatch gap (µs, [`SimConfig::dispatch_gap_us`])
/// after `past` (none: from an empty history, as a new service starts),
/// every job in Slurm's shape, the policy as warm as the service that was
/// fed `past`. The report's jobs carry the live jobs' ids.
///
/// [`SimConfig::dispatch_gap_us`]: jobcast_replay::sim::SimConfig::dispatch_gap_us
pub fn simulate_live(
    live: &[LiveJob],
    past: &[SimJob],
    shape: &SlurmShape,
    cpus: u32,
    dispatch_gap_us: u64,
    policy: PolicyKind,
    queues: &QueueConfig,
) -> Result<SimReport, EvalError> {
    // The run starts as the last past job ends.
    let start = past.iter().map(SimJob::end_us).max().unwrap_or(0);
    let jobs = live.iter().map(|j| j.as_simulated(shape, start)).collect();
    let last = live
        .last()
        .map_or(start, |j| start + (j.arrival_s * 1e6) as u64);
    let workload = Workload {
        training: past.to_vec(),
        jobs,
        split: Split {
            span_us: (start, last),
            at_us: start,
            ..Split::default()
        },
        end_us: last,
        excluded: Exclusions::default(),
    };
    let config = EvalConfig {
        slots: Some(cpus),
        queues: queues.clone(),
        cold_start: past.is_empty(),
        dispatch_gap_us,
        warm_policy: true,
        ..EvalConfig::default()
    };
    run_policy(&workload, policy, &config, cpus)
}

/// The events a scheduler would have published for a finished job: its
/// submission, each task started on submission and finished, its end.
pub fn finished_job_events(job: &SimJob) -> Vec<Event> {
    let start = job.arrival_us();
    let mut events = vec![SimEvent::Submitted(job).to_event()];
    for (task, &runtime_us) in (0..).zip(job.runtimes_us()) {
        events.push(
            SimEvent::Scheduled {
                job,
                task,
                time_us: start,
            }
            .to_event(),
        );
        events.push(
            SimEvent::Finished {
                job,
                task,
                time_us: start + runtime_us,
                runtime_us,
            }
            .to_event(),
        );
    }
    events.push(
        SimEvent::Ended {
            job,
            time_us: job.end_us(),
        }
        .to_event(),
    );
    events
}

#[cfg(test)]
mod tests {
    use jobcast_ingest::event::JobSubmitted;

    use super::*;

    fn job(id: u64, arrival_s: u64, runtimes_s: &[u64]) -> SimJob {
        let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * 1_000_000).collect();
        let submitted = JobSubmitted {
            user: "u".into(),
            job_name: format!("j{id}"),
            ..JobSubmitted::new(id, arrival_s * 1_000_000, runtimes.len() as u32)
        };
        SimJob::new(submitted, runtimes, 0).unwrap()
    }

    /// Trace seconds to tenths of live seconds, 1 to 100 s a task.
    const TENTHS: TaskScale = TaskScale {
        per_us: 1e-7,
        min_s: 1.0,
        max_s: 100.0,
    };

    fn shape() -> SlurmShape {
        SlurmShape {
            user: "root".into(),
            group: "root".into(),
            partition: "debug".into(),
            mem_per_cpu_mb: 100,
            time_limit_minutes: 1440,
        }
    }

    /// Scaled down, a workload keeps its GS order only with the queues
    /// scaled too: under the trace's thresholds every scaled job is in the
    /// top queue, where even the Oracle is FIFO.
    #[test]
    fn scaled_jobs_are_reordered_only_in_scaled_queues() {
        assert_eq!(TENTHS.queues().q0_upper_us, 1e8);
        // A wide long job (8 × 90 live s: 720 s, under the trace's 1,000 s
        // threshold of Q0), then short ones while it runs, on 2 CPUs.
        let mut jobs = vec![job(1, 0, &[900; 8])];
        jobs.extend((2..6).map(|id| job(id, id, &[20])));
        let live = live_workload(&jobs, jobs.len(), &TENTHS, 2, 1.0);
        let avg = |policy, queues: &QueueConfig| {
            simulate_live(&live, &[], &shape(), 2, 0, policy, queues)
                .unwrap()
                .summary
                .avg_jct_s
                .expect("every job finishes")
        };
        let fifo = avg(PolicyKind::Fifo, &QueueConfig::default());
        assert_eq!(avg(PolicyKind::Oracle, &QueueConfig::default()), fifo);
        let scaled = avg(PolicyKind::Oracle, &TENTHS.queues());
        assert!(
            scaled < 0.7 * fifo,
            "Oracle {scaled} s against FIFO {fifo} s"
        );
    }

    /// Each slot a task leaves is usable again only after the gap: on one
    /// CPU, three 10-s jobs end at 10, 21 and 32 s with a 1-s gap; the
    /// last starts at an instant when only a slot came back.
    #[test]
    fn a_dispatch_gap_holds_each_freed_slot() {
        let jobs: Vec<SimJob> = (1..=3).map(|id| job(id, 0, &[100])).collect();
        let live = live_workload(&jobs, jobs.len(), &TENTHS, 1, 1.0);
        let avg = |gap_us| {
            simulate_live(
                &live,
                &[],
                &shape(),
                1,
                gap_us,
                PolicyKind::Fifo,
                &TENTHS.queues(),
            )
            .unwrap()
            .summary
            .avg_jct_s
            .expect("every job finishes")
        };
        assert_eq!(avg(0), 20.0);
        assert_eq!(avg(1_000_000), 21.0);
    }

    #[test]
    fn arrivals_spread_over_the_time_the_cpus_need_for_the_work() {
        let jobs = [
            job(1, 100, &[600, 1200]),
            job(2, 400, &[60]),
            job(3, 1100, &[300, 300, 300]),
            job(4, 5000, &[1]),
        ];
        let live = live_workload(&jobs, 3, &TENTHS, 4, 1.0);
        assert_eq!(live.len(), 3);
        // 120 s is capped at 100 s.
        assert_eq!(live[0].runtimes_s, [60.0, 100.0]);
        assert_eq!(live[1].runtimes_s, [6.0]);
        // 256 s of work on 4 CPUs: arrivals over 64 s, in the trace's
        // proportions (0, 300 and 1000 s of 1000).
        let arrivals: Vec<f64> = live.iter().map(|j| j.arrival_s).collect();
        assert_eq!(arrivals, [0.0, 0.3 * 64.0, 64.0]);
        let simulated = live[2].as_simulated(&shape(), 5_000_000);
        assert_eq!(simulated.arrival_us(), 69_000_000);
        assert_eq!(simulated.runtimes_us(), [30_000_000; 3]);
        assert_eq!(simulated.job_id(), 3);
        // In the shape the watcher reads back.
        let submitted = simulated.job();
        assert_eq!(
            (
                submitted.user.as_str(),
                submitted.job_name.as_str(),
                submitted.logical_name.as_str(),
                submitted.cpu_request,
                submitted.partition.as_str(),
                submitted.mem_request,
                submitted.time_limit_us
            ),
            (
                "root",
                "j3",
                "j3",
                1.0,
                "debug",
                100.0,
                Some(86_400_000_000)
            )
        );
        assert_eq!(
            shape().sbatch_args(),
            ["-c", "1", "-p", "debug", "--mem-per-cpu=100", "--time=1440"]
        );
        // A task shorter than the floor is raised to it.
        assert_eq!(
            live_workload(&jobs[3..], 1, &TENTHS, 4, 1.0)[0].runtimes_s,
            [1.0]
        );
        // Twice the load: arrivals twice as close.
        let doubled = live_workload(&jobs, 3, &TENTHS, 4, 2.0);
        assert_eq!(doubled[2].arrival_s, 32.0);
    }

    /// The shape is what the watcher reads back of a job `sbatch` was
    /// given the shape's arguments for (Slurm 22.05 lists them as the
    /// partition, `memory_per_cpu` in MB and `time_limit` in minutes).
    #[test]
    fn the_shape_is_what_the_watcher_reads_back() {
        use jobcast_connectors::slurm::{SlurmTracker, SqueueJob};
        let record = SqueueJob {
            job_id: 42,
            array_job_id: 42,
            array_task_id: None,
            array_task_string: "0-2".into(),
            name: "j7".into(),
            user_name: "root".into(),
            group_name: "root".into(),
            partition: "debug".into(),
            cluster: String::new(),
            account: String::new(),
            job_state: "PENDING".into(),
            submit_time: 1_700_000_000,
            start_time: 0,
            end_time: 0,
            cpus: Some(1),
            memory_per_cpu: Some(100),
            memory_per_node: None,
            restart_cnt: 0,
            priority: Some(1),
            time_limit: Some(1440),
            deadline: 0,
        };
        let events = SlurmTracker::default().observe(&vec![record].into()).events;
        let Some(Event::JobSubmitted(read)) = events.first() else {
            panic!("no submission: {events:?}");
        };
        let trace_job = job(7, 0, &[10, 10, 10]);
        let shaped = shape().submitted(&trace_job, 42, 1_700_000_000_000_000);
        assert_eq!(read, &shaped);
    }

    /// The simulator's policy starts as the bench's service does, having
    /// decided and learnt from every past job. Bayes learns from the past
    /// how far its priors miss and widens them: here 30 names ran 1 s
    /// three times and then 50 s, so a fourth run of a name seen at 1 s
    /// three times is placed by a wide prior, whose expected size is past
    /// Q0's 10 s, by the service and the simulator alike. A policy fresh
    /// but for its calibration would place it in Q0.
    #[test]
    fn the_simulator_places_a_job_as_the_service_fed_the_same_past_does() {
        use jobcast_predictor::engine::{Effects, Engine, EngineConfig, Origin, Output};
        let named = |id: u64, name: &str, secs: u64| {
            let job = job(id, id, &[secs * 10]);
            let mut submitted = job.job().clone();
            submitted.job_name = name.into();
            SimJob::new(submitted, job.runtimes_us().to_vec(), id * 1_000_000).unwrap()
        };
        let mut history = Vec::new();
        for _ in 0..3 {
            for n in 0..30 {
                history.push(named(history.len() as u64 + 1, &format!("n{n}"), 1));
            }
            history.push(named(history.len() as u64 + 1, "k", 1));
        }
        for n in 0..30 {
            history.push(named(history.len() as u64 + 1, &format!("n{n}"), 50));
        }
        let past = past_jobs(&history, &TENTHS, &shape(), 0);
        let live = live_workload(&[named(500, "k", 1)], 1, &TENTHS, 2, 1.0);
        let queues = QueueConfig {
            q0_upper_us: 1e7,
            ..QueueConfig::default()
        };
        let simulated = simulate_live(&live, &past, &shape(), 2, 0, PolicyKind::Bayes, &queues)
            .unwrap()
            .jobs[0]
            .queue;

        let mut engine = Engine::new(&EngineConfig {
            policy: PolicyKind::Bayes,
            queues,
            ..EngineConfig::default()
        })
        .unwrap();
        let mut events: Vec<Event> = past.iter().flat_map(finished_job_events).collect();
        events.sort_by_key(Event::time_us);
        let start = past.iter().map(SimJob::end_us).max().unwrap();
        let job = live[0].as_simulated(&shape(), start);
        events.push(SimEvent::Submitted(&job).to_event());
        let mut effects = Effects::default();
        for (offset, event) in events.iter().enumerate() {
            engine
                .apply(Origin::new(0, offset as i64), event, &mut effects)
                .unwrap();
        }
        let served = effects
            .outputs
            .iter()
            .rev()
            .find_map(|o| match o {
                Output::Decision(d) if d.job_id == job.job_id() => Some(d.queue),
                _ => None,
            })
            .expect("the service decides the job");
        assert_eq!(simulated, served);
        assert!(served > 0, "placed by the prior's width, not its median");
    }

    #[test]
    fn the_past_ends_before_the_run_and_reads_as_finished_jobs() {
        // Ended at 900, 300 and 2000 s of trace time.
        let mut history = vec![
            job(7, 100, &[800, 20]),
            job(8, 200, &[100]),
            job(9, 0, &[5000]),
        ];
        for (job, end_s) in history.iter_mut().zip([900u64, 300, 2000]) {
            *job = SimJob::new(
                job.job().clone(),
                job.runtimes_us().to_vec(),
                end_s * 1_000_000,
            )
            .unwrap();
        }
        let start = 10_000_000;
        let past = past_jobs(&history, &TENTHS, &shape(), start);
        // In the order they ended, a second apart, in Slurm's shape.
        let names: Vec<&str> = past.iter().map(|j| j.job().job_name.as_str()).collect();
        assert_eq!(names, ["j8", "j7", "j9"]);
        let ids: Vec<u64> = past.iter().map(|j| j.job_id()).collect();
        assert_eq!(ids, [PAST_JOB_IDS, PAST_JOB_IDS + 1, PAST_JOB_IDS + 2]);
        let arrivals: Vec<u64> = past.iter().map(|j| j.arrival_us()).collect();
        assert_eq!(arrivals, [start, start + 1_000_000, start + 2_000_000]);
        assert_eq!(past[1].runtimes_us(), [80_000_000, 2_000_000]);
        assert_eq!(past[2].runtimes_us(), [100_000_000], "capped");
        assert_eq!(past[1].job().user, "root");
        let ends: Vec<u64> = past.iter().map(|j| j.end_us()).collect();
        assert_eq!(
            ends,
            [start + 10_000_000, start + 81_000_000, start + 102_000_000]
        );

        let events: Vec<(String, u64)> = finished_job_events(&past[1])
            .iter()
            .map(|e| {
                let name = match e {
                    Event::Task(t) => format!("{:?}", t.kind),
                    other => other.type_name().to_owned(),
                };
                (name, e.time_us())
            })
            .collect();
        let s = start + 1_000_000;
        let expected = [
            ("job_submitted", s),
            ("Schedule", s),
            ("Finish", s + 80_000_000),
            ("Schedule", s),
            ("Finish", s + 2_000_000),
            ("job_ended", s + 80_000_000),
        ];
        let expected: Vec<(String, u64)> =
            expected.iter().map(|(n, t)| (n.to_string(), *t)).collect();
        assert_eq!(events, expected);
    }
}
