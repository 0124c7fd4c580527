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
use jobcast_predictor::eta::Kind;
use jobcast_predictor::history::{History, HistoryConfig};
use jobcast_predictor::policies::{Context, JobDone, Policy, TaskEnd};
use jobcast_predictor::queues::QueueConfig;
use jobcast_replay::sim::{JobResult, SimConfig, SimError, SimReport, simulate};
use jobcast_replay::workload::{
    Excluded, LOAD_STEP_US, LOAD_WINDOW_US, Reason, SimJob, Workload, WorkloadError,
};

const S: u64 = 1_000_000;

fn submitted(id: u64, arrival_s: u64, width: usize, stages: Option<Vec<Stage>>) -> JobSubmitted {
    JobSubmitted {
        user: "u".into(),
        job_name: format!("job{id}"),
        stages,
        ..JobSubmitted::new(id, arrival_s * S, width as u32)
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
        ..QueueConfig::default()
    }
}

fn config(slots: u32) -> SimConfig {
    SimConfig {
        slots,
        queues: queues(),
        accuracy_min_width: 0,
        dispatch_gap_us: 0,
    }
}

/// A stand-in policy's decision, at version 0.
fn decision(job_id: u64, queue: u8, phase: Phase) -> Decision {
    Decision::new(PolicyKind::Fifo, job_id, 0, queue, phase)
}

/// A decision placing a job by `estimate`, in the queue its size falls in.
fn estimated(job_id: u64, estimate: Estimate, ctx: &Context<'_>) -> Decision {
    let queue = ctx.queues.queue_for(estimate.size_us);
    Decision {
        estimate: Some(estimate),
        ..decision(job_id, queue, Phase::Estimated)
    }
}

fn estimate(mean_us: f64, width: u32, source: EstimateSource) -> Estimate {
    Estimate::new(mean_us, mean_us * f64::from(width), 0.0, source)
}

/// FIFO: every job in Q0 by arrival.
struct Fifo;

impl Policy for Fifo {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Fifo
    }
    fn on_submit(&mut self, job: &JobSubmitted, _: &Context<'_>) -> Decision {
        decision(job.job_id, 0, Phase::Arrival)
    }
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
        estimated(job.job_id, e, ctx)
    }
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
        decision(job.job_id, self.0[&job.job_id], Phase::Arrival)
    }
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
            decision(job.job_id, 0, Phase::ThinBypass)
        } else {
            Decision {
                pilots: vec![0],
                ..decision(job.job_id, 1, Phase::Sampling)
            }
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
        Some(estimated(end.job_id, e, ctx))
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
        decision(job.job_id, 0, Phase::AttainedService)
    }
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
fn etas_at_submission_and_half_way_follow_the_queue() {
    // One slot; A and B take 100 s, C 60 s, all in Q2 by their true sizes.
    // B's ETA at t=10 is A's 90 s left and its own 100 s; half-way to it
    // (t=105) A has ended and B has run 5 s: 95 s to go. With fewer
    // finished jobs than calibration needs, an ETA is the model's own.
    let jobs = [job(1, 0, &[100]), job(2, 10, &[100]), job(3, 300, &[60])];
    let report = run(&jobs, &mut Oracle::of(&jobs), 1);
    assert_eq!(times(&report), vec![(1, 100, 0), (2, 190, 90), (3, 60, 0)]);
    let etas: Vec<(f64, u64, f64)> = report
        .jobs
        .iter()
        .map(|j| {
            let (at, half) = j.eta_half_way.unwrap();
            (j.eta_at_submission.unwrap().p50_us, at, half.p50_us)
        })
        .collect();
    assert_eq!(
        etas,
        vec![
            (100e6, 50 * S, 50e6),
            (190e6, 95 * S, 95e6),
            (60e6, 30 * S, 30e6)
        ]
    );
    let s = &report.summary;
    assert_eq!((s.eta_half_jobs, s.eta_half_p50_error_pct), (3, Some(0.0)));
    assert_eq!(s.eta_half_interval_pct, Some(100.0));
    // A and C ran at once, B waited for A; every size was the truth.
    let kinds: Vec<Option<Kind>> = report.jobs.iter().map(|j| j.eta_kind).collect();
    assert_eq!(
        kinds,
        [Some(Kind::AtOnce), Some(Kind::Queued), Some(Kind::AtOnce)]
    );
    assert_eq!(s.eta_size_p50_error_pct, Some(0.0));
    assert_eq!(
        (s.eta_at_once_pct, s.eta_at_once_p50_error_pct),
        (Some(200.0 / 3.0), Some(0.0))
    );
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
            dispatch_gap_us: 0,
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
        cluster: String::new(),
    }));
    events.sort_by_key(Event::time_us);
    let trace = Trace::new(events.into_iter().map(Ok), Diagnostics::new(), 0);
    let w = Workload::from_trace(trace, 3).unwrap();
    // Submissions span 10..160, task events 12..163: the overlap is halved.
    // The machine event at 200 does not count.
    assert_eq!(w.split.submissions_us, Some((10, 160)));
    assert_eq!(w.split.task_events_us, Some((12, 163)));
    assert_eq!((w.split.span_us, w.split.at_us), ((12, 160), 86));
    let ids = |jobs: &[SimJob]| jobs.iter().map(|j| j.job_id()).collect::<Vec<_>>();
    assert_eq!(ids(&w.training), vec![1]);
    assert_eq!(ids(&w.jobs), vec![3]);
    assert_eq!(w.jobs[0].runtimes_us(), &[30, 35]);
    assert_eq!(w.jobs[0].arrival_us(), 120);
    assert_eq!(
        w.excluded.counts,
        Excluded {
            censored: 1,
            killed: 1,
            failed: 1,
            lost: 0,
            unknown_arrival: 1,
            outside_task_events: 0,
            unknown_runtime: 1,
            too_wide: 1,
            invalid: 0,
            spans_split: 1,
            not_in_dag: 0,
        }
    );
    // Each excluded job is named with its reason.
    let mut named = w.excluded.jobs.clone();
    named.sort_unstable_by_key(|&(id, _)| id);
    assert_eq!(
        named,
        [
            (2, Reason::SpansSplit),
            (4, Reason::Killed),
            (5, Reason::Censored),
            (6, Reason::UnknownArrival),
            (7, Reason::UnknownRuntime),
            (8, Reason::TooWide),
            (9, Reason::Failed),
        ]
    );
    assert_eq!(w.excluded.counts.total(), 7);
    // 65 µs of work over the second half's 74 µs: one slot.
    assert_eq!(w.unit_load_slots(), 1);
    assert_eq!(w.train(HistoryConfig::default()).observed(), 1);
}

/// A job submitted at `submit` whose one task (of `runtime`) is seen only
/// when `tasks_seen`, as in a download with more `job_events` parts than
/// `task_events` parts.
fn ev_job_seen(id: u64, submit: u64, runtime: u64, tasks_seen: bool) -> Vec<Event> {
    if tasks_seen {
        return ev_job(id, submit, submit, &[runtime], Some(JobOutcome::Finish));
    }
    vec![
        ev_submit(submit, id, 1),
        ev_end(submit + runtime, id, JobOutcome::Finish),
    ]
}

fn trace_of(mut events: Vec<Event>) -> Trace {
    events.sort_by_key(Event::time_us);
    Trace::new(events.into_iter().map(Ok), Diagnostics::new(), 0)
}

#[test]
fn the_split_falls_where_task_events_are_not_where_job_events_reach() {
    // Submissions every 10 µs over 10..=1000, tasks seen only for jobs
    // submitted in 300..=500: the middle of the submissions (505) would
    // leave no evaluated job, and the halves are taken from 300..=505.
    let mut events = Vec::new();
    for id in 1..=100 {
        let submit = id * 10;
        events.extend(ev_job_seen(id, submit, 5, (300..=500).contains(&submit)));
    }
    let w = Workload::from_trace(trace_of(events), 150).unwrap();
    assert_eq!(w.split.task_events_us, Some((300, 505)));
    assert_eq!((w.split.span_us, w.split.at_us), ((300, 505), 402));
    // 300..=390 ended before the split, 410..=500 came after it.
    assert_eq!(w.training.len(), 10);
    assert_eq!(w.jobs.len(), 10);
    // The rest are named as outside the task events, not as lost runtimes.
    assert_eq!(w.excluded.counts.outside_task_events, 79);
    assert_eq!(w.excluded.counts.spans_split, 1);
    assert_eq!(w.excluded.counts.total(), 80);
    assert!(
        w.split.describe().starts_with("split at 402 µs"),
        "{}",
        w.split.describe()
    );
}

#[test]
fn a_split_that_leaves_a_half_empty_is_refused() {
    // One job: submitted at the split, so evaluated, and no history.
    let only = ev_job(1, 100, 100, &[5, 5], Some(JobOutcome::Finish));
    let err = Workload::from_trace(trace_of(only), 150).unwrap_err();
    assert!(
        matches!(
            err,
            WorkloadError::EmptyHalf {
                half: "history",
                evaluated: 1,
                ..
            }
        ),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("leaves the history half empty"),
        "{message}"
    );
    // A job that spans the split and a killed one: nothing on either side.
    let mut events = ev_job(1, 10, 10, &[100], Some(JobOutcome::Finish));
    events.extend(ev_job(2, 20, 20, &[100], Some(JobOutcome::Kill)));
    let err = Workload::from_trace(trace_of(events), 150).unwrap_err();
    assert!(
        matches!(
            err,
            WorkloadError::EmptyHalf {
                history: 0,
                evaluated: 0,
                excluded: 2,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn a_uniform_sample_is_rescaled_to_unit_load_and_reported_per_window() {
    let full = Workload::from_trace(synthetic_trace(5), 150).unwrap();
    let slots = full.unit_load_slots();
    let n = full.jobs.len() / 4;
    let draw = |seed| {
        let mut w = full.clone();
        w.sample(n, seed, slots).unwrap();
        w
    };
    let w = draw(7);
    assert_eq!(w.jobs.len(), n);
    assert_eq!(w, draw(7), "the same seed draws the same jobs");
    let ids = |w: &Workload| w.jobs.iter().map(|j| j.job_id()).collect::<Vec<_>>();
    assert_ne!(ids(&w), ids(&draw(8)));
    // Distinct jobs of the second half, still in arrival order, with their
    // tasks unchanged.
    let mut seen = std::collections::HashSet::new();
    for job in &w.jobs {
        assert!(seen.insert(job.job_id()));
        let original = full
            .jobs
            .iter()
            .find(|j| j.job_id() == job.job_id())
            .unwrap();
        assert_eq!(job.runtimes_us(), original.runtimes_us());
        assert!(job.arrival_us() >= w.split.at_us);
    }
    assert!(
        w.jobs
            .windows(2)
            .all(|p| p[0].arrival_us() <= p[1].arrival_us())
    );
    // The sample's work fills the same slots over its shorter span.
    assert_eq!(w.unit_load_slots(), slots);
    assert!(w.end_us < full.end_us);
    assert_eq!(w.training, full.training);
    let load = w.load_profile(slots);
    assert!(load.windows > 5, "{load:?}");
    assert!((0.7..1.3).contains(&load.average), "{load:?}");
    assert!(load.p50 <= load.p90, "{load:?}");
    assert!(matches!(
        full.clone().sample(full.jobs.len() + 1, 0, slots),
        Err(WorkloadError::TooFewJobs { .. })
    ));
}

#[test]
fn the_load_profile_slides_a_1000_s_window_by_100_s() {
    // Submissions from 1 s to 2999 s put the split at 1500 s. Evaluated:
    // job 2 at 1500 s (2000 slot-s of work), job 3 at 2450 s (1000
    // slot-s). Windows start at 1500, 1600, ..., 1900 s; the first holds
    // both jobs, the other four job 3 alone.
    let s = 1_000_000;
    let mut events = ev_job(1, s, s, &[10 * s], Some(JobOutcome::Finish));
    let two = [1000 * s, 1000 * s];
    events.extend(ev_job(
        2,
        1500 * s,
        1500 * s,
        &two,
        Some(JobOutcome::Finish),
    ));
    events.extend(ev_job(
        3,
        2450 * s,
        2450 * s,
        &[1000 * s],
        Some(JobOutcome::Finish),
    ));
    events.push(ev_submit(2999 * s, 4, 1));
    events.push(ev_task(2999 * s, 4, 0, TaskKind::Schedule));
    let w = Workload::from_trace(trace_of(events), 150).unwrap();
    assert_eq!(w.split.at_us, 1500 * s);
    assert_eq!((LOAD_WINDOW_US, LOAD_STEP_US), (1000 * s, 100 * s));
    let load = w.load_profile(2);
    assert_eq!(load.windows, 5);
    assert!((load.average - 0.7).abs() < 1e-12, "{load:?}");
    assert_eq!((load.p50, load.p90), (0.5, 1.5));
}
