//! The Megha simulator's own cases, each small enough to follow by hand.

use jobcast_ingest::event::JobSubmitted;
use jobcast_predictor::history::HistoryConfig;

use super::*;

const S: u64 = 1_000_000;

/// A job of `name` at `at_ms`, each task taking `share` of a worker's
/// cores for its runtime (s).
fn job(id: u64, at_ms: u64, name: &str, share: f64, runtimes_s: &[u64]) -> SimJob {
    let runtimes: Vec<u64> = runtimes_s.iter().map(|r| r * S).collect();
    let mut submitted = JobSubmitted::new(id, at_ms * 1_000, runtimes.len() as u32);
    submitted.user = "u".into();
    submitted.job_name = name.into();
    submitted.logical_name = name.into();
    submitted.cpu_request = share;
    SimJob::new(submitted, runtimes, at_ms * 1_000).unwrap()
}

fn config(workers: u32, lms: u32, gms: u32) -> MeghaConfig {
    MeghaConfig {
        workers,
        lms,
        gms,
        ..MeghaConfig::default()
    }
}

fn empty() -> History {
    History::new(HistoryConfig::default())
}

#[test]
fn every_configuration_runs_every_task() {
    let jobs: Vec<SimJob> = (0..10)
        .map(|i| job(i, i * 500, "etl", 0.5, &[30, 20, 10]))
        .collect();
    let runs = compare(&jobs, &empty(), &config(4, 2, 2)).unwrap();
    assert_eq!(runs.len(), 4);
    for r in &runs {
        assert_eq!((r.jobs, r.tasks), (10, 30), "{r:?}");
        // Two tasks a worker: 8 at once, so some wait.
        assert!(
            r.avg_jct_s >= 30.0 && r.allocation_max_ms > 1_000.0,
            "{r:?}"
        );
        assert!(r.allocation_p50_ms <= r.allocation_p99_ms);
    }
    let central = &runs[2];
    assert_eq!(
        (central.scheduler, central.lms, central.gms),
        (Scheduler::Centralised, 1, 1)
    );
    assert_eq!(central.repartitions, 0, "one GM has no external partition");
}

/// Two GMs, one worker each in one cluster. GM 0 takes both workers
/// for a job of two whole-worker tasks (the second a repartition of GM
/// 1's); GM 1, not yet told, sends its own job's task to its worker and
/// the LM refuses one of the two. Everything still runs.
#[test]
fn a_stale_view_is_refused_by_the_lm_and_the_task_runs_later() {
    let jobs = vec![
        job(1, 0, "a", 1.0, &[100, 100]),
        job(2, 1, "b", 1.0, &[100]),
    ];
    let r = simulate(&jobs, &empty(), &config(2, 1, 2), Scheduler::Megha).unwrap();
    assert_eq!(r.tasks, 3);
    assert_eq!(r.inconsistencies, 1, "{r:?}");
    assert_eq!(r.repartitions, 1, "{r:?}");
    // The refused task waits for a worker: a task's 100 s.
    assert!(r.allocation_max_ms >= 100_000.0, "{r:?}");
}

/// One worker. A long job's three tasks queue ahead of a short job's
/// in arrival order; jobcast, having seen both kinds, runs the short
/// one first, and the average completion falls.
#[test]
fn jobcast_takes_the_job_of_least_estimated_work_first() {
    let mut history = empty();
    for i in 0..5 {
        job(100 + i, 0, "long", 1.0, &[1000]).observe_into(&mut history, 1_000 * S);
        job(200 + i, 0, "short", 1.0, &[10]).observe_into(&mut history, 1_000 * S);
    }
    let jobs = vec![
        job(1, 2_000_000, "long", 1.0, &[1000, 1000, 1000]),
        job(2, 2_000_001, "short", 1.0, &[10]),
    ];
    let c = config(1, 1, 1);
    let fifo = simulate(&jobs, &history, &c, Scheduler::Megha).unwrap();
    let jobcast = simulate(&jobs, &history, &c, Scheduler::MeghaJobcast).unwrap();
    // FIFO: the short job waits for 3,000 s; jobcast: for the long
    // job's first task only (it arrived first and started at once).
    // The long job ends at 3,000 s either way.
    assert!(fifo.avg_jct_s > 3_000.0, "{fifo:?}");
    assert!(jobcast.avg_jct_s < 2_100.0, "{jobcast:?}");
}

/// Two queues of half the cores each on one GM. Queue A's job takes
/// both workers; queue B's task, under its share, has one of A's tasks
/// preempted and starts at once; A's task starts over later. Without
/// queues B waits for A.
#[test]
fn a_queue_under_its_share_preempts_the_one_over_it() {
    let jobs = vec![
        in_queue(job(1, 0, "a", 1.0, &[1000, 1000]), 0),
        in_queue(job(2, 10_000, "b", 1.0, &[100]), 1),
    ];
    let mut c = config(2, 1, 1);
    c.queues = vec![UserQueue { share: 0.5, gm: 0 }; 2];
    let fair = simulate(&jobs, &empty(), &c, Scheduler::Megha).unwrap();
    assert_eq!(
        (fair.preemption_attempts, fair.preemptions),
        (1, 1),
        "{fair:?}"
    );
    assert!(
        fair.allocation_max_ms < 10_100.0,
        "B starts as it arrives: {fair:?}"
    );
    let b = &fair.share_attainment[1];
    assert_eq!((b.share, b.gm, b.tasks), (0.5, 0, 1));
    assert!(b.attainment.unwrap() < 0.01, "B waited with nothing: {b:?}");
    assert_eq!(b.jobs, 1);
    assert!((b.avg_jct_s - 100.0).abs() < 0.1, "{b:?}");
    assert_eq!(fair.share_attainment[0].preempted, 1);
    // A's preempted task runs again in full once B's ends (at 110 s)
    // and the next heartbeat (120 s) tells the GM: A ends near 1,120
    // s, B took 100 s.
    assert!((fair.avg_jct_s - 610.0).abs() < 2.0, "{fair:?}");
    let unfair = simulate(&jobs, &empty(), &config(2, 1, 1), Scheduler::Megha).unwrap();
    assert_eq!(unfair.preemptions, 0);
    assert!(unfair.allocation_max_ms > 990_000.0, "{unfair:?}");
    assert!(unfair.share_attainment.is_empty());
}

/// `j` submitted by a user whose jobs go to user queue `queue` of two.
fn in_queue(j: SimJob, queue: u64) -> SimJob {
    let user = (0..)
        .map(|i| format!("user{i}"))
        .find(|u| jobcast_ingest::ids::stable_id(u.as_bytes()) % 2 == queue)
        .unwrap();
    let mut submitted = j.job().clone();
    submitted.user = user;
    SimJob::new(submitted, j.runtimes_us().to_vec(), j.end_us()).unwrap()
}

/// Two workers, two queues of half the cores each. Queue A holds both
/// workers: job x's only task on one, the first of job y's three on the
/// other (two wait). Queue B's task, under its share, needs a worker.
/// Megha preempts the first worker it finds, x's: x starts over and ends
/// some 120 s later. jobcast preempts y's task, whose job ends no later
/// for it (its other tasks wait anyway): x ends at 1,000 s.
#[test]
fn jobcast_preempts_the_task_whose_job_it_delays_least() {
    let jobs = vec![
        in_queue(job(1, 0, "x", 1.0, &[1000]), 0),
        in_queue(job(2, 1, "y", 1.0, &[1000, 1000, 1000]), 0),
        in_queue(job(3, 10_000, "b", 1.0, &[100]), 1),
    ];
    let mut c = config(2, 1, 1);
    c.queues = vec![UserQueue { share: 0.5, gm: 0 }; 2];
    let megha = simulate(&jobs, &empty(), &c, Scheduler::Megha).unwrap();
    let jobcast = simulate(&jobs, &empty(), &c, Scheduler::MeghaJobcast).unwrap();
    for r in [&megha, &jobcast] {
        assert_eq!((r.preemption_attempts, r.preemptions), (1, 1), "{r:?}");
        // The task preempted had run from its start to B's arrival.
        assert!((r.preempted_work_s - 10.0).abs() < 0.1, "{r:?}");
    }
    // B: 100 s either way; y ends after three tasks in turn on the
    // worker x leaves (about 2,120 s) either way; x: 1,000 s under
    // jobcast, about 1,120 s under Megha.
    let x_megha = megha.avg_jct_s * 3.0 - 100.0 - 2_120.0;
    let x_jobcast = jobcast.avg_jct_s * 3.0 - 100.0 - 2_120.0;
    assert!((x_jobcast - 1_000.0).abs() < 15.0, "{jobcast:?}");
    assert!(x_megha > 1_100.0, "{megha:?}");
}

/// One worker, two queues of half of it each; tasks of half a worker.
/// Queue A: job y's three tasks (the first ends at 50 s, two start at
/// once) and job x's one, at 55 s. At the heartbeat of 60 s jobcast
/// starts x (less work than y) beside y's second task; Megha starts y's
/// third. Queue B's task at 100 s preempts one of A's two: Megha the
/// latest started (40 s lost); jobcast y's second, whose job has a task
/// queued and so ends no later for it, though it had run 100 s.
#[test]
fn jobcast_preempts_on_a_worker_the_task_whose_job_it_delays_least() {
    let jobs = vec![
        in_queue(job(1, 0, "y", 0.5, &[50, 1000, 1000]), 0),
        in_queue(job(2, 55_000, "x", 0.5, &[1000]), 0),
        in_queue(job(3, 100_000, "b", 0.5, &[100]), 1),
    ];
    let mut c = config(1, 1, 1);
    c.queues = vec![UserQueue { share: 0.5, gm: 0 }; 2];
    let megha = simulate(&jobs, &empty(), &c, Scheduler::Megha).unwrap();
    let jobcast = simulate(&jobs, &empty(), &c, Scheduler::MeghaJobcast).unwrap();
    assert_eq!(megha.preemptions, 1, "{megha:?}");
    assert_eq!(jobcast.preemptions, 1, "{jobcast:?}");
    assert!((megha.preempted_work_s - 40.0).abs() < 1.0, "{megha:?}");
    assert!(
        (jobcast.preempted_work_s - 100.0).abs() < 1.0,
        "{jobcast:?}"
    );
}

#[test]
fn queues_must_fit_the_data_centre() {
    let jobs = vec![job(1, 0, "a", 0.1, &[5])];
    let mut c = config(4, 2, 2);
    c.queues = vec![
        UserQueue { share: 0.7, gm: 0 },
        UserQueue { share: 0.7, gm: 1 },
    ];
    let err = simulate(&jobs, &empty(), &c, Scheduler::Megha).unwrap_err();
    assert!(err.to_string().contains("add up to 1.4"), "{err}");
    c.queues = vec![UserQueue { share: 0.5, gm: 2 }];
    let err = simulate(&jobs, &empty(), &c, Scheduler::Megha).unwrap_err();
    assert!(err.to_string().contains("queue 0: GM 2 of 2"), "{err}");
}

#[test]
fn arrivals_sped_up_keep_the_first_and_the_jobs() {
    let jobs = vec![
        job(1, 10_000, "a", 0.1, &[5]),
        job(2, 30_000, "a", 0.1, &[7]),
    ];
    let fast = speed_up_arrivals(&jobs, 4.0);
    assert_eq!(fast[0].job().time_us, 10 * S);
    assert_eq!(fast[1].job().time_us, 15 * S);
    assert_eq!(fast[1].runtimes_us(), jobs[1].runtimes_us());
}

#[test]
fn a_data_centre_too_small_for_its_partitions_is_refused() {
    let jobs = vec![job(1, 0, "a", 0.1, &[5])];
    let err = simulate(&jobs, &empty(), &config(3, 2, 2), Scheduler::Megha).unwrap_err();
    assert!(
        err.to_string().contains("fewer than one per partition"),
        "{err}"
    );
    assert_eq!(
        simulate(&[], &empty(), &config(4, 2, 2), Scheduler::Megha).unwrap_err(),
        MeghaError::NoJobs
    );
}
