//! The simulator on tiny hand-computed scenarios (2 slots, a few jobs), its
//! determinism, and the workload split. The policies here are minimal
//! stand-ins written for the tests, so that each expected JCT follows from
//! GS's rules alone.

use std::collections::BTreeMap;

use jobcast_ingest::event::{
    Event, JobEnded, JobOutcome, JobSubmitted, MachineEvent, MachineKind, Stage, TaskEvent,
    TaskKind,
};
use jobcast_ingest::{Diagnostics, Trace};
use jobcast_predictor::decision::{Decision, Estimate, EstimateSource, Phase, PolicyKind};
use jobcast_predictor::history::{History, HistoryConfig};
use jobcast_predictor::policy::{Context, JobDone, Policy, TaskEnd};
use jobcast_predictor::queues::QueueConfig;
use jobcast_replay::sim::{JobResult, SimConfig, SimError, SimReport, simulate};
use jobcast_replay::workload::{Excluded, SimJob, Workload};

const S: u64 = 1_000_000;

fn submitted(id: u64, arrival_s: u64, width: usize, stages: Option<Vec<Stage>>) -> JobSubmitted {
    JobSubmitted {
        time_us: arrival_s * S,
        job_id: id,
        user: "u".into(),
        job_name: format!("job{id}"),
        logical_name: String::new(),
        scheduling_class: 0,
        priority: 0,
        cpu_request: 0.0,
        mem_request: 0.0,
        partition: String::new(),
        time_limit_us: None,
        num_tasks: width as u32,
        stages,
    }
}

fn job(id: u64, arrival_s: u64, runtimes_s: &[u64]) -> SimJob {
    let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * S).collect();
    SimJob::new(submitted(id, arrival_s, runtimes.len(), None), runtimes, 0).unwrap()
}

/// Q0 holds jobs under 5 s of task time, Q1 under 50 s, Q2 the rest;
/// weights 1, 0.1, 0.01.
fn queues() -> QueueConfig {
    QueueConfig {
        levels: 3,
        q0_upper_us: 5e6,
        growth: 10.0,
        weight_ratio: 10.0,
    }
}

fn config(slots: u32) -> SimConfig {
    SimConfig {
        slots,
        queues: queues(),
        accuracy_min_width: 0,
    }
}

fn decision(
    job_id: u64,
    queue: u8,
    phase: Phase,
    estimate: Option<Estimate>,
    pilots: Vec<u32>,
) -> Decision {
    Decision {
        job_id,
        version: 0,
        queue,
        phase,
        estimate,
        policy: PolicyKind::Fifo,
        pilots,
    }
}

fn estimate(mean_us: f64, width: u32, source: EstimateSource) -> Estimate {
    Estimate {
        mean_task_runtime_us: mean_us,
        size_us: mean_us * f64::from(width),
        log_sd: 0.0,
        source,
    }
}

/// FIFO: every job in Q0 by arrival.
struct Fifo;

impl Policy for Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fifo
    }
    fn on_submit(&mut self, job: &JobSubmitted, _: &Context<'_>) -> Decision {
        decision(job.job_id, 0, Phase::Arrival, None, Vec::new())
    }
    fn on_task_end(&mut self, _: &TaskEnd, _: &Context<'_>) -> Option<Decision> {
        None
    }
    fn on_job_done(&mut self, _: &JobDone, _: &Context<'_>) {}

    fn on_job_abandoned(&mut self, _job_id: u64) {}

    fn snapshot(&self) -> Vec<u8> {
        unreachable!("the simulator never snapshots its policies")
    }
}

/// Places each job by its true mean task runtime.
struct Oracle(BTreeMap<u64, f64>);

impl Oracle {
    fn of(jobs: &[SimJob]) -> Self {
        Oracle(
            jobs.iter()
                .map(|j| (j.job_id(), j.mean_task_runtime_us()))
                .collect(),
        )
    }
}

impl Policy for Oracle {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Oracle
    }
    fn on_submit(&mut self, job: &JobSubmitted, ctx: &Context<'_>) -> Decision {
        let e = estimate(self.0[&job.job_id], job.num_tasks, EstimateSource::Truth);
        decision(
            job.job_id,
            ctx.queues.queue_for(e.size_us),
            Phase::Estimated,
            Some(e),
            Vec::new(),
        )
    }
    fn on_task_end(&mut self, _: &TaskEnd, _: &Context<'_>) -> Option<Decision> {
        None
    }
    fn on_job_done(&mut self, _: &JobDone, _: &Context<'_>) {}

    fn on_job_abandoned(&mut self, _job_id: u64) {}

    fn snapshot(&self) -> Vec<u8> {
        unreachable!("the simulator never snapshots its policies")
    }
}

/// Each job in a fixed queue.
struct Fixed(BTreeMap<u64, u8>);

impl Policy for Fixed {
    fn kind(&self) -> PolicyKind {
        PolicyKind::PointEst
    }
    fn on_submit(&mut self, job: &JobSubmitted, _: &Context<'_>) -> Decision {
        decision(
            job.job_id,
            self.0[&job.job_id],
            Phase::Arrival,
            None,
            Vec::new(),
        )
    }
    fn on_task_end(&mut self, _: &TaskEnd, _: &Context<'_>) -> Option<Decision> {
        None
    }
    fn on_job_done(&mut self, _: &JobDone, _: &Context<'_>) {}

    fn on_job_abandoned(&mut self, _job_id: u64) {}

    fn snapshot(&self) -> Vec<u8> {
        unreachable!("the simulator never snapshots its policies")
    }
}

/// SLearn in miniature: jobs of 1–2 tasks bypass to Q0; wider jobs sample
/// their first task in Q1 and are then placed by its runtime.
#[derive(Default)]
struct Sampler {
    widths: BTreeMap<u64, u32>,
    done: Vec<JobDone>,
}

impl Policy for Sampler {
    fn kind(&self) -> PolicyKind {
        PolicyKind::SLearn
    }
    fn on_submit(&mut self, job: &JobSubmitted, _: &Context<'_>) -> Decision {
        self.widths.insert(job.job_id, job.num_tasks);
        if job.num_tasks < 3 {
            decision(job.job_id, 0, Phase::ThinBypass, None, Vec::new())
        } else {
            decision(job.job_id, 1, Phase::Sampling, None, vec![0])
        }
    }
    fn on_task_end(&mut self, end: &TaskEnd, ctx: &Context<'_>) -> Option<Decision> {
        let width = self.widths[&end.job_id];
        if width < 3 || end.task_index != 0 {
            return None;
        }
        let e = estimate(
            end.runtime_us? as f64,
            width,
            EstimateSource::Pilots { pilots: 1 },
        );
        Some(decision(
            end.job_id,
            ctx.queues.queue_for(e.size_us),
            Phase::Estimated,
            Some(e),
            Vec::new(),
        ))
    }
    fn on_job_done(&mut self, done: &JobDone, _: &Context<'_>) {
        self.done.push(*done);
    }

    fn on_job_abandoned(&mut self, _job_id: u64) {}

    fn snapshot(&self) -> Vec<u8> {
        unreachable!("the simulator never snapshots its policies")
    }
}

/// Least attained service: the simulator moves the jobs.
struct Las;

impl Policy for Las {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Las
    }
    fn on_submit(&mut self, job: &JobSubmitted, _: &Context<'_>) -> Decision {
        decision(job.job_id, 0, Phase::AttainedService, None, Vec::new())
    }
    fn on_task_end(&mut self, _: &TaskEnd, _: &Context<'_>) -> Option<Decision> {
        None
    }
    fn on_job_done(&mut self, _: &JobDone, _: &Context<'_>) {}

    fn on_job_abandoned(&mut self, _job_id: u64) {}

    fn snapshot(&self) -> Vec<u8> {
        unreachable!("the simulator never snapshots its policies")
    }
}

fn history() -> History {
    History::new(HistoryConfig::default())
}

fn run(jobs: &[SimJob], policy: &mut dyn Policy, slots: u32) -> SimReport {
    simulate(jobs, history(), policy, &config(slots)).unwrap()
}

fn result(report: &SimReport, id: u64) -> &JobResult {
    report.jobs.iter().find(|j| j.job_id == id).unwrap()
}

/// (JCT, wait) in seconds per job id.
fn times(report: &SimReport) -> Vec<(u64, u64, u64)> {
    report
        .jobs
        .iter()
        .map(|j| (j.job_id, j.jct_us / S, j.wait_us / S))
        .collect()
}

#[test]
fn fifo_serves_jobs_in_arrival_order() {
    // A: 4 tasks of 4 s at t=1; B: 2 tasks of 1 s at t=2.
    // t=1 A0,A1 → 5; t=5 A2,A3 → 9; t=9 B0,B1 → 10.
    let jobs = [job(1, 1, &[4, 4, 4, 4]), job(2, 2, &[1, 1])];
    let report = run(&jobs, &mut Fifo, 2);
    assert_eq!(times(&report), vec![(1, 8, 0), (2, 8, 7)]);
    assert_eq!(report.summary.avg_jct_s, Some(8.0));
    assert_eq!(report.summary.estimated_jobs, 0);
    assert_eq!(report.summary.p50_error_pct, None);
    assert_eq!(result(&report, 2).normalized_jct, 8.0);
}

#[test]
fn oracle_runs_small_jobs_first() {
    // A (16 s) goes to Q1, B (2 s) to Q0. t=5: B0 (Q0) → 6 and A2 → 9;
    // t=6: B1 (Q0 has priority) → 7; t=7: A3 → 11.
    let jobs = [job(1, 1, &[4, 4, 4, 4]), job(2, 2, &[1, 1])];
    let report = run(&jobs, &mut Oracle::of(&jobs), 2);
    assert_eq!(times(&report), vec![(1, 10, 0), (2, 5, 3)]);
    let (a, b) = (result(&report, 1), result(&report, 2));
    assert_eq!((a.queue, a.true_queue, b.queue, b.true_queue), (1, 1, 0, 0));
    assert_eq!((a.error_pct, a.correct_queue), (Some(0.0), Some(true)));
    assert_eq!(report.summary.correct_queue_pct, Some(100.0));
    assert_eq!(report.summary.avg_jct_s, Some(7.5));
}

#[test]
fn queues_share_slots_by_weight() {
    // X (Q0): 4 × 2 s, Y (Q1): 2 × 3 s, both at t=1. A slot goes to the
    // queue with the least use per weight: t=1 X0 and Y0 (Q1 is idle);
    // t=3 X1 (Q0 idle); t=4 Y1 (Q1 idle); t=5 X2; t=7 X3 → 9.
    let jobs = [job(1, 1, &[2, 2, 2, 2]), job(2, 1, &[3, 3])];
    let mut policy = Fixed(BTreeMap::from([(1, 0), (2, 1)]));
    let report = run(&jobs, &mut policy, 2);
    assert_eq!(times(&report), vec![(1, 8, 0), (2, 6, 0)]);
    // With one slot Q0 always wins while it has work.
    let report = run(&jobs, &mut Fixed(BTreeMap::from([(1, 0), (2, 1)])), 1);
    assert_eq!(times(&report), vec![(1, 8, 0), (2, 14, 8)]);
}

#[test]
fn dag_stages_wait_for_their_parents() {
    // Stage 1: tasks 0, 1 (2 s, 3 s); stage 2 after stage 1: task 2 (1 s);
    // stage 3 independent: task 3 (5 s). t=1: 0, 1; t=3: 3 (2 is not
    // ready); t=4: 2 → 5; t=8: 3 done.
    let stages = vec![
        Stage {
            id: 1,
            parents: vec![],
            num_tasks: 2,
            name: None,
        },
        Stage {
            id: 2,
            parents: vec![1],
            num_tasks: 1,
            name: None,
        },
        Stage {
            id: 3,
            parents: vec![],
            num_tasks: 1,
            name: None,
        },
    ];
    let runtimes = vec![2 * S, 3 * S, S, 5 * S];
    let dag = SimJob::new(submitted(7, 1, 4, Some(stages)), runtimes, 0).unwrap();
    // Critical path: max(3 + 1, 5).
    assert_eq!(dag.idle_runtime_us(), 5 * S);
    let report = run(std::slice::from_ref(&dag), &mut Fifo, 2);
    assert_eq!(times(&report), vec![(7, 7, 0)]);
    assert!((report.jobs[0].normalized_jct - 1.4).abs() < 1e-12);

    // Stages must list parents first and cover the tasks.
    let bad = vec![Stage {
        id: 2,
        parents: vec![1],
        num_tasks: 1,
        name: None,
    }];
    assert!(SimJob::new(submitted(8, 1, 1, Some(bad)), vec![S], 0).is_err());
    let short = vec![Stage {
        id: 1,
        parents: vec![],
        num_tasks: 1,
        name: None,
    }];
    assert!(SimJob::new(submitted(9, 1, 2, Some(short)), vec![S, S], 0).is_err());
}

#[test]
fn idle_slots_run_non_pilot_tasks() {
    // W: 4 tasks (2, 4, 4, 4 s) samples task 0 in Q1; the idle slot runs
    // task 1 by work conservation. T (thin, 1 s) arrives at 2.
    // t=1: W0 → 3, W1 → 5 (spare); t=3: W estimated (mean 2 s, size 8 s:
    // Q1); T (Q0, idle) → 4; t=4: W2 → 8; t=5: W3 → 9.
    let jobs = [job(1, 1, &[2, 4, 4, 4]), job(3, 2, &[1])];
    let mut policy = Sampler::default();
    let report = run(&jobs, &mut policy, 2);
    assert_eq!(times(&report), vec![(1, 8, 0), (3, 2, 1)]);
    let (w, t) = (result(&report, 1), result(&report, 3));
    assert_eq!(w.phase, Phase::Estimated);
    assert_eq!(w.estimated_mean_task_runtime_us, Some(2e6));
    assert!((w.error_pct.unwrap() - 1.5 / 3.5 * 100.0).abs() < 1e-9);
    assert_eq!((w.queue, w.true_queue, w.correct_queue), (1, 1, Some(true)));
    assert_eq!(
        (t.phase, t.error_pct, t.correct_queue),
        (Phase::ThinBypass, None, None)
    );
    assert_eq!(
        (report.summary.thin_jobs, report.summary.estimated_jobs),
        (1, 1)
    );
    // The policy heard of both ends, with JCT over idle runtime.
    let done: Vec<(u64, f64)> = policy
        .done
        .iter()
        .map(|d| (d.job_id, d.normalized_jct))
        .collect();
    assert_eq!(done, vec![(3, 2.0), (1, 2.0)]);
}

#[test]
fn without_idle_slots_pilots_come_first() {
    // One slot: W samples task 0 (2 s) and is then placed; no slot is idle.
    let jobs = [job(1, 1, &[2, 4, 4, 4])];
    let report = run(&jobs, &mut Sampler::default(), 1);
    assert_eq!(times(&report), vec![(1, 14, 0)]);
    // Two slots without the thin job of the test above: t=1 W0 and W1
    // (spare); t=3 W2; t=5 W3 → 9.
    let report = run(&jobs, &mut Sampler::default(), 2);
    assert_eq!(times(&report), vec![(1, 8, 0)]);
}

#[test]
fn las_demotes_jobs_as_they_attain_service() {
    // L: 4 × 4 s at t=1 crosses Q0's 5 s at t=3.5 and drops to Q1; M (2 ×
    // 1 s) arrives at t=2 in Q0. t=5: M0 (Q0) and L2 (Q1 idle); t=6: M1;
    // t=7: L3 → 11.
    let jobs = [job(1, 1, &[4, 4, 4, 4]), job(2, 2, &[1, 1])];
    let report = run(&jobs, &mut Las, 2);
    assert_eq!(times(&report), vec![(1, 10, 0), (2, 5, 3)]);
    let l = result(&report, 1);
    assert_eq!(
        (l.queue, l.phase, l.error_pct),
        (1, Phase::AttainedService, None)
    );
    // FIFO would have finished L first.
    assert_eq!(times(&run(&jobs, &mut Fifo, 2)), vec![(1, 8, 0), (2, 8, 7)]);
}

#[test]
fn odd_inputs_are_errors_not_panics() {
    let jobs = [job(1, 1, &[1])];
    assert_eq!(
        simulate(&jobs, history(), &mut Fifo, &config(0)).unwrap_err(),
        SimError::NoSlots
    );
    assert!(SimError::NoSlots.to_string().contains("--slots"));
    let twice = [job(1, 1, &[1]), job(1, 2, &[1])];
    assert_eq!(
        simulate(&twice, history(), &mut Fifo, &config(1)).unwrap_err(),
        SimError::DuplicateJob(1)
    );
    let empty = run(&[], &mut Fifo, 3);
    assert_eq!((empty.summary.jobs, empty.summary.avg_jct_s), (0, None));
    assert!(SimJob::new(submitted(1, 1, 0, None), Vec::new(), 0).is_err());
}

fn synthetic_trace(seed: u64) -> Trace {
    let config = jobcast_replay::WorkloadConfig {
        seed,
        jobs: Some(400),
        slots: 50,
        max_width: 40,
        ..Default::default()
    };
    let events: Vec<Event> = jobcast_replay::generate(&config).unwrap().collect();
    Trace::new(events.into_iter().map(Ok), Diagnostics::new(), 0)
}

#[test]
fn the_same_input_gives_the_same_report() {
    let workload = Workload::from_trace(synthetic_trace(3), 150).unwrap();
    let (evaluated, training) = (workload.jobs.len(), workload.training.len());
    assert!(
        evaluated > 100 && training > 100,
        "{evaluated} evaluated, {training} history"
    );
    let slots = workload.unit_load_slots();
    let go = |policy: &mut dyn Policy| {
        let cfg = SimConfig {
            slots,
            queues: QueueConfig::default(),
            accuracy_min_width: 3,
        };
        simulate(
            &workload.jobs,
            workload.train(HistoryConfig::default()),
            policy,
            &cfg,
        )
        .unwrap()
    };
    assert_eq!(go(&mut Sampler::default()), go(&mut Sampler::default()));
    assert_eq!(go(&mut Las), go(&mut Las));
    let oracle = go(&mut Oracle::of(&workload.jobs));
    assert_eq!(oracle, go(&mut Oracle::of(&workload.jobs)));
    assert_eq!(oracle.summary.jobs, workload.jobs.len());
    // Jobs come out in arrival order.
    assert!(
        oracle
            .jobs
            .windows(2)
            .all(|w| (w[0].arrival_us, w[0].job_id) < (w[1].arrival_us, w[1].job_id))
    );
}

fn ev_submit(t: u64, id: u64, tasks: u32) -> Event {
    let mut s = submitted(id, 0, tasks as usize, None);
    s.time_us = t;
    Event::JobSubmitted(s)
}

fn ev_task(t: u64, id: u64, index: u32, kind: TaskKind) -> Event {
    Event::Task(TaskEvent {
        time_us: t,
        job_id: id,
        task_index: index,
        kind,
        machine_id: None,
        stage: None,
    })
}

fn ev_end(t: u64, id: u64, outcome: JobOutcome) -> Event {
    Event::JobEnded(JobEnded {
        time_us: t,
        job_id: id,
        outcome,
    })
}

/// A job of one task per runtime, all scheduled at `start`.
fn ev_job(
    id: u64,
    submit: u64,
    start: u64,
    runtimes: &[u64],
    outcome: Option<JobOutcome>,
) -> Vec<Event> {
    let mut events = vec![ev_submit(submit, id, runtimes.len() as u32)];
    for (i, r) in runtimes.iter().enumerate() {
        events.push(ev_task(start, id, i as u32, TaskKind::Schedule));
        events.push(ev_task(start + r, id, i as u32, TaskKind::Finish));
    }
    let end = start + runtimes.iter().max().unwrap();
    if let Some(outcome) = outcome {
        events.push(ev_end(end, id, outcome));
    }
    events
}

#[test]
fn the_trace_splits_into_history_and_evaluated_halves() {
    use JobOutcome::*;
    let mut events = Vec::new();
    events.extend(ev_job(1, 10, 12, &[20, 28], Some(Finish))); // ends 40: history
    events.extend(ev_job(2, 50, 50, &[100], Some(Finish))); // 50 → 150 spans the split
    events.extend(ev_job(3, 120, 125, &[30, 35], Some(Finish))); // evaluated
    events.extend(ev_job(4, 130, 130, &[5], Some(Kill)));
    events.extend(ev_job(5, 140, 140, &[5], None)); // censored
    events.extend(ev_job(6, 0, 15, &[5], Some(Finish))); // submitted before the window
    // Job 7 finished, but one task never reported a finish.
    events.extend([
        ev_submit(20, 7, 2),
        ev_task(21, 7, 0, TaskKind::Schedule),
        ev_task(22, 7, 1, TaskKind::Schedule),
    ]);
    events.extend([ev_task(30, 7, 0, TaskKind::Finish), ev_end(31, 7, Finish)]);
    events.extend(ev_job(8, 150, 150, &[1, 1, 1, 1], Some(Finish))); // too wide
    events.extend(ev_job(9, 160, 161, &[2], Some(Fail)));
    events.push(Event::Machine(MachineEvent {
        time_us: 200,
        machine_id: 1,
        kind: MachineKind::Add,
        platform: None,
        cpus: None,
        memory: None,
        vm: None,
    }));
    events.sort_by_key(Event::time_us);
    let trace = Trace::new(events.into_iter().map(Ok), Diagnostics::new(), 0);
    let w = Workload::from_trace(trace, 3).unwrap();
    // Submissions span 10..160; the machine event at 200 does not count.
    assert_eq!((w.span_us, w.split_us), ((10, 160), 85));
    let ids = |jobs: &[SimJob]| jobs.iter().map(|j| j.job_id()).collect::<Vec<_>>();
    assert_eq!(ids(&w.training), vec![1]);
    assert_eq!(ids(&w.jobs), vec![3]);
    assert_eq!(w.jobs[0].runtimes_us(), &[30, 35]);
    assert_eq!(w.jobs[0].arrival_us(), 120);
    assert_eq!(
        w.excluded,
        Excluded {
            censored: 1,
            killed: 1,
            failed: 1,
            lost: 0,
            unknown_arrival: 1,
            unknown_runtime: 1,
            too_wide: 1,
            invalid: 0,
            spans_split: 1,
        }
    );
    assert_eq!(w.excluded.total(), 7);
    // 65 µs of work over the second half's 75 µs: one slot.
    assert_eq!(w.unit_load_slots(), 1);
    assert_eq!(w.train(HistoryConfig::default()).observed(), 1);
}
