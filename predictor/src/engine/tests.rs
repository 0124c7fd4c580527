use std::collections::BTreeSet;

use jobcast_ingest::decode;

use super::*;

/// Every event of these tests comes from one partition.
const AT: Origin = Origin {
    partition: 0,
    offset: 0,
};
use crate::decision::{Completion, Decision, Phase, Quantiles};
use crate::preemption::Bathtub;
use crate::preemption::checkpoint::{CheckpointTable, SegmentPolicy};
use crate::preemption::hints::PartitionAction;
use crate::preemption::online::OnlineConfig;
use crate::preemption::risk::{Recommendation, RiskConfig, score};

#[test]
fn changed_keys_settle_sorted_and_once() {
    let mut changed = Changed::default();
    for key in [7u64, 3, 7, 9, 3, 3] {
        changed.mark(key);
    }
    changed.settle();
    assert_eq!(changed.iter().copied().collect::<Vec<_>>(), [3, 7, 9]);
    changed.extend([1, 9]);
    changed.settle();
    assert_eq!(changed.iter().copied().collect::<Vec<_>>(), [1, 3, 7, 9]);
    changed.clear();
    assert_eq!(changed.iter().count(), 0);
}

fn event(json: &str) -> Event {
    decode(json.as_bytes()).unwrap_or_else(|e| panic!("{json}: {e}"))
}

fn submit(job: u64, t: u64, tasks: u32) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":0.1,"num_tasks":{tasks}}}"#
    ))
}

fn task(job: u64, index: u32, t: u64, kind: &str) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":{index},"kind":"{kind}","machine_id":1}}"#
    ))
}

/// A machine joining the cluster, its size unsaid.
fn plain_machine(id: u64, t: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"add"}}"#
    ))
}

fn end(job: u64, t: u64, outcome: &str) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"job_ended","time_us":{t},"job_id":{job},"outcome":"{outcome}"}}"#
    ))
}

fn decisions(effects: &Effects) -> Vec<&Decision> {
    effects
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Decision(d) => Some(d),
            _ => None,
        })
        .collect()
}

/// A job of `width` tasks that all run 10 s, start to end.
fn run_job(engine: &mut Engine, job: u64, t0: u64, width: u32, effects: &mut Effects) {
    engine.apply(AT, &submit(job, t0, width), effects).unwrap();
    for i in 0..width {
        engine
            .apply(AT, &task(job, i, t0 + 1, "schedule"), effects)
            .unwrap();
    }
    for i in 0..width {
        engine
            .apply(AT, &task(job, i, t0 + 10_000_001, "finish"), effects)
            .unwrap();
    }
    engine
        .apply(AT, &end(job, t0 + 10_000_002, "finish"), effects)
        .unwrap();
}

#[test]
fn a_wide_job_samples_then_is_placed_and_every_policy_is_scored() {
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(1, 1_000, 100), &mut effects)
        .unwrap();
    let first = decisions(&effects);
    assert_eq!(first.len(), 1, "only the driving policy publishes");
    assert_eq!((first[0].version, first[0].phase), (1, Phase::Sampling));
    let pilots = first[0].pilots.clone();
    assert!(!pilots.is_empty());
    effects.clear();

    for &p in &pilots {
        engine
            .apply(AT, &task(1, p, 2_000, "schedule"), &mut effects)
            .unwrap();
    }
    for &p in &pilots {
        engine
            .apply(AT, &task(1, p, 5_002_000, "finish"), &mut effects)
            .unwrap();
    }
    let placed = decisions(&effects);
    assert_eq!(placed.len(), 1);
    assert_eq!((placed[0].version, placed[0].phase), (2, Phase::Estimated));
    let estimate = placed[0].estimate.unwrap();
    assert_eq!(estimate.mean_task_runtime_us, 5_000_000.0);
    effects.clear();

    let others: Vec<u32> = (0..100).filter(|i| !pilots.contains(i)).collect();
    for &i in &others {
        engine
            .apply(AT, &task(1, i, 6_000_000, "schedule"), &mut effects)
            .unwrap();
    }
    for &i in &others {
        engine
            .apply(AT, &task(1, i, 11_000_000, "finish"), &mut effects)
            .unwrap();
    }
    engine
        .apply(AT, &end(1, 12_000_000, "finish"), &mut effects)
        .unwrap();
    let record = engine.job(1).unwrap().clone();
    assert_eq!(record.state, JobState::Finished);
    assert_eq!(record.tasks_finished, 100);
    assert_eq!(record.actual_mean_task_runtime_us, Some(5_000_000.0));
    assert!(
        decisions(&effects).is_empty(),
        "nothing new to decide once placed"
    );
    // SLearn's pilots saw the true mean exactly.
    assert_eq!(record.errors[&PolicyKind::SLearn].abs_pct, 0.0);
    let scored: Vec<&str> = effects
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Scored { policy, .. } => Some(policy.name()),
            _ => None,
        })
        .collect();
    assert_eq!(scored.len(), record.errors.len());
    assert!(scored.contains(&"3sigma") && scored.contains(&"bayes"));
    assert_eq!(engine.history().observed(), 1);
    assert_eq!(engine.live_jobs(), 0);
    engine.release_ended();
    assert!(engine.job(1).is_none() && engine.task(1, 0).is_none());
}

#[test]
fn impossible_events_are_rejected_and_change_nothing() {
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(1, 1_000, 2), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task(1, 0, 2_000, "schedule"), &mut effects)
        .unwrap();
    let before = engine.job(1).unwrap().clone();
    let task_before = engine.task(1, 0);
    let cases = [
        (task(2, 0, 3_000, "schedule"), "unknown_job"),
        (task(1, 5, 3_000, "schedule"), "unknown_task"),
        (task(1, 1, 3_000, "finish"), "no_running_attempt"),
        (task(1, 0, 1_500, "finish"), "time_backwards"),
        (submit(1, 3_000, 2), "duplicate_job"),
        (end(7, 3_000, "finish"), "unknown_job"),
    ];
    for (event, reason) in cases {
        effects.clear();
        let err = engine.apply(AT, &event, &mut effects).unwrap_err();
        assert_eq!(err.reason, reason, "{err}");
        assert!(effects.outputs.is_empty());
    }
    assert_eq!(engine.events(), 2);
    assert_eq!(engine.job(1), Some(&before));
    assert_eq!(engine.task(1, 0), task_before);
}

/// A task that "finishes" a year ahead would teach the history a
/// year-long runtime, and its job's end would make that year the
/// history's now. Both are held (one job's events confirm nothing), and
/// refused when the next event, of another job, is back near the clock:
/// the jobs after them are estimated as if they had never come. Without a
/// bound (0) they are applied, and do that damage.
#[test]
fn a_job_far_ahead_alone_is_held_then_refused_and_changes_nothing() {
    const YEAR_US: u64 = 365 * 24 * 3_600_000_000;
    let run = |skew_secs: u64, far_future: bool| {
        let config = EngineConfig {
            max_future_skew_secs: skew_secs,
            ..EngineConfig::default()
        };
        let mut engine = Engine::new(&config).unwrap();
        let mut effects = Effects::default();
        run_job(&mut engine, 1, 1_000, 1, &mut effects);
        let mut held = Vec::new();
        if far_future {
            engine
                .apply(AT, &submit(2, 20_000_000, 1), &mut effects)
                .unwrap();
            engine
                .apply(AT, &task(2, 0, 20_000_001, "schedule"), &mut effects)
                .unwrap();
            effects.clear();
            held.push(
                engine
                    .apply(
                        AT,
                        &task(2, 0, 20_000_002 + YEAR_US, "finish"),
                        &mut effects,
                    )
                    .unwrap(),
            );
            held.push(
                engine
                    .apply(AT, &end(2, 20_000_003 + YEAR_US, "finish"), &mut effects)
                    .unwrap(),
            );
            if skew_secs > 0 {
                assert!(
                    effects.outputs.is_empty(),
                    "held: nothing comes of them yet"
                );
            }
            assert_eq!(engine.held_events(), usize::from(skew_secs > 0) * 2);
        }
        // Within the skew: ten hours ahead is no fault.
        effects.clear();
        let applied = engine
            .apply(AT, &submit(3, 20_000_004 + 36_000_000_000, 1), &mut effects)
            .unwrap();
        assert_eq!(applied, Applied::Now);
        let estimate = engine.job(3).unwrap().estimates[&PolicyKind::ThreeSigma];
        (held, effects.refused, estimate.mean_task_runtime_us)
    };
    let (_, refused, learnt) = run(86_400, false);
    assert!(refused.is_empty());
    assert_eq!(learnt, 10_000_000.0, "job 3 is estimated from job 1");

    let (held, refused, estimate) = run(86_400, true);
    assert_eq!(held, [Applied::Held, Applied::Held]);
    assert_eq!(refused.len(), 2, "both of job 2's events stood alone");
    for r in &refused {
        assert_eq!(r.rejection.reason, "future_time", "{}", r.rejection);
        assert!(
            r.rejection.message.contains("engine.max_future_skew_secs")
                && r.rejection.message.contains("partition 0"),
            "{}",
            r.rejection
        );
    }
    assert_eq!(estimate, learnt, "the refused events changed nothing");

    let (held, refused, damaged) = run(0, true);
    assert_eq!(held, [Applied::Now, Applied::Now], "no bound: applied");
    assert!(refused.is_empty());
    assert_ne!(damaged, learnt, "applied, they emptied the window");
}

/// A quiet day longer than the skew (a long weekend, a maintenance
/// window), then normal input: every event is applied and every job
/// decided, on one partition and on three.
#[test]
fn after_a_silence_longer_than_the_skew_every_event_is_applied_and_decided() {
    const H: u64 = 3_600_000_000;
    for partitions in [1, 3] {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        let mut decided = BTreeSet::new();
        let mut refused = 0;
        for (round, t0) in [(0u64, H), (1, 26 * H)] {
            for j in 0..6u64 {
                let job = round * 100 + j;
                let origin = Origin::new((j % partitions) as i32, 0);
                for e in [
                    submit(job, t0 + j * 1_000, 1),
                    task(job, 0, t0 + j * 1_000 + 1, "schedule"),
                    task(job, 0, t0 + j * 1_000 + 10_000_000, "finish"),
                    end(job, t0 + j * 1_000 + 10_000_001, "finish"),
                ] {
                    effects.clear();
                    engine.apply(origin, &e, &mut effects).unwrap();
                    decided.extend(decisions(&effects).iter().map(|d| d.job_id));
                    refused += effects.refused.len();
                    engine.release_ended();
                }
            }
        }
        assert_eq!(refused, 0, "{partitions} partitions");
        assert_eq!(engine.held_events(), 0, "{partitions} partitions");
        assert_eq!(decided.len(), 12, "{partitions} partitions: {decided:?}");
        assert_eq!(engine.events(), 48);
        assert!(
            engine.now_us() > 26 * H,
            "the jump the partitions agree on moved the clock"
        );
    }
}

/// Machine events each just under the skew ahead of the last (23.5 h), on
/// one partition of three: 31 of them cover the 30-day expiry window. The
/// other partitions stay where they were, so the clock does not move and
/// no live job expires. On a single partition the same walk is the whole
/// input, moves the clock and expires them (no other partition could
/// outvote it).
#[test]
fn one_partition_walking_ahead_expires_nothing_while_the_others_stay() {
    const H: u64 = 3_600_000_000;
    for (walker, partitions) in [(0, 3), (0, 1)] {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        for job in 0..partitions as u64 {
            let origin = Origin::new(job as i32, 0);
            engine
                .apply(origin, &submit(job, H, 2), &mut effects)
                .unwrap();
        }
        let mut expired = Vec::new();
        for step in 1..=31u64 {
            effects.clear();
            engine
                .apply(
                    Origin::new(walker, step as i64),
                    &plain_machine(100 + step, H + step * 47 * H / 2),
                    &mut effects,
                )
                .unwrap();
            expired.extend(effects.expired_jobs.iter().copied());
            assert!(effects.refused.is_empty());
        }
        if partitions == 3 {
            assert!(expired.is_empty(), "{expired:?}");
            assert_eq!(engine.live_jobs(), 3);
            assert_eq!(engine.now_us(), H);
        } else {
            assert_eq!(expired, [0], "one partition is the whole input");
        }
    }
}

/// A held event is in the snapshot: the restored engine settles it as the
/// original does.
#[test]
fn a_held_event_survives_a_snapshot() {
    const H: u64 = 3_600_000_000;
    let config = EngineConfig::default();
    let mut original = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    run_job(&mut original, 1, 1_000, 1, &mut effects);
    original.release_ended();
    let far = submit(2, 30 * H, 1);
    assert_eq!(
        original
            .apply(Origin::new(0, 7), &far, &mut effects)
            .unwrap(),
        Applied::Held
    );
    let snapshot = original.snapshot().unwrap();
    let mut copy = Engine::restore(&config, &snapshot).unwrap();
    assert_eq!(copy.held_events(), 1);
    for engine in [&mut original, &mut copy] {
        let mut effects = Effects::default();
        engine
            .apply(Origin::new(0, 8), &submit(3, 30 * H + 5, 1), &mut effects)
            .unwrap();
        assert_eq!(
            decisions(&effects)
                .iter()
                .map(|d| d.job_id)
                .collect::<Vec<_>>(),
            [2, 3],
            "the held job is released, then the one that confirmed it"
        );
        assert_eq!(engine.held_events(), 0);
    }
}

/// Live jobs and task records are bounded by configuration: beyond, a
/// submission or a task's first event is refused (`over_budget`) and
/// changes nothing; a job that ends frees its share.
#[test]
fn live_jobs_and_task_records_beyond_their_budget_are_refused() {
    let config = EngineConfig {
        max_live_jobs: 2,
        max_live_tasks: 3,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    engine.apply(AT, &submit(1, 10, 4), &mut effects).unwrap();
    engine.apply(AT, &submit(2, 10, 1), &mut effects).unwrap();
    let refused = engine
        .apply(AT, &submit(3, 11, 1), &mut effects)
        .unwrap_err();
    assert_eq!(refused.reason, "over_budget", "{refused}");
    assert!(
        refused.message.contains("engine.max_live_jobs"),
        "{refused}"
    );
    assert!(engine.job(3).is_none());
    for i in 0..3 {
        engine
            .apply(AT, &task(1, i, 12, "schedule"), &mut effects)
            .unwrap();
    }
    let refused = engine
        .apply(AT, &task(1, 3, 12, "schedule"), &mut effects)
        .unwrap_err();
    assert_eq!(refused.reason, "over_budget", "{refused}");
    assert!(
        refused.message.contains("engine.max_live_tasks"),
        "{refused}"
    );
    // A task that has a record may report again.
    engine
        .apply(AT, &task(1, 0, 13, "finish"), &mut effects)
        .unwrap();
    // Job 2 ends: a job's slot is free again.
    engine.apply(AT, &end(2, 14, "kill"), &mut effects).unwrap();
    engine.release_ended();
    engine.apply(AT, &submit(3, 15, 1), &mut effects).unwrap();
    let zero = EngineConfig {
        max_live_tasks: 0,
        ..EngineConfig::default()
    };
    let err = Engine::new(&zero).err().unwrap();
    assert!(err.to_string().contains("max_live_tasks"), "{err}");
}

/// A job declaring 2^20 tasks costs what its events cost: its state (in
/// the snapshot, as in memory) holds nothing per declared task.
#[test]
fn a_job_declaring_a_million_tasks_holds_no_state_per_declared_task() {
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    let small = engine.snapshot().unwrap().len();
    engine
        .apply(AT, &submit(1, 10, 1 << 20), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task(1, 7, 11, "schedule"), &mut effects)
        .unwrap();
    let wide = engine.snapshot().unwrap().len();
    assert!(
        wide - small < 64 * 1024,
        "{} bytes for one wide job",
        wide - small
    );
}

#[test]
fn a_killed_job_teaches_nothing_and_a_finished_one_teaches_the_history() {
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(1, 1_000, 1), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task(1, 0, 2_000, "schedule"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &end(1, 3_000, "kill"), &mut effects)
        .unwrap();
    assert_eq!(engine.job(1).unwrap().state, JobState::Killed);
    assert!(engine.job(1).unwrap().errors.is_empty());
    assert_eq!(engine.history().observed(), 0);

    run_job(&mut engine, 2, 10_000, 1, &mut effects);
    assert_eq!(engine.history().observed(), 1);
    // The next similar job is estimated from it.
    effects.clear();
    engine
        .apply(AT, &submit(3, 20_000_000, 1), &mut effects)
        .unwrap();
    let estimate = engine.job(3).unwrap().estimates[&PolicyKind::ThreeSigma];
    assert_eq!(estimate.mean_task_runtime_us, 10_000_000.0);
}

#[test]
fn the_same_events_give_the_same_outputs() {
    let run = || {
        let mut engine = Engine::new(&EngineConfig::default()).unwrap();
        let mut effects = Effects::default();
        for job in 0..30 {
            run_job(
                &mut engine,
                job,
                job * 1_000_000,
                1 + (job as u32 * 7) % 40,
                &mut effects,
            );
        }
        format!("{:?}", effects.outputs)
    };
    assert_eq!(run(), run());
}

const HOUR: u64 = 3_600_000_000;

fn risks(effects: &Effects) -> Vec<MachineRisk> {
    effects
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Risk(r) => Some(r.clone()),
            _ => None,
        })
        .collect()
}

/// Teach the history job 10: one task that ran `hours` on machine 1,
/// from time 0.
fn learnt_one_job(engine: &mut Engine, hours: u64, effects: &mut Effects) {
    let ended = hours * HOUR;
    engine.apply(AT, &submit(10, 0, 1), effects).unwrap();
    engine
        .apply(AT, &task(10, 0, 0, "schedule"), effects)
        .unwrap();
    engine
        .apply(AT, &task(10, 0, ended, "finish"), effects)
        .unwrap();
    engine
        .apply(AT, &end(10, ended, "finish"), effects)
        .unwrap();
}

/// An engine of `config` that has seen a 10 h job, a preemptible VM
/// launched at 9 h (03:00 CST, night, in us-central1-c), a plain
/// machine, and a similar job placed on the VM at 10 h; with the risk
/// scores of the placement.
fn placed_on_a_vm(config: &EngineConfig) -> (Engine, Effects, Vec<MachineRisk>) {
    let hour = HOUR;
    let mut engine = Engine::new(config).unwrap();
    let mut effects = Effects::default();
    // History: a similar job ran 10 h.
    learnt_one_job(&mut engine, 10, &mut effects);
    // A preemptible VM launched at 9 h; a plain machine.
    let t = 9 * hour;
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"add","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{t}}}"#
            )),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":2,"kind":"add"}}"#
            )),
            &mut effects,
        )
        .unwrap();

    // Placed at VM age 1 h with about 10 h of work.
    engine
        .apply(AT, &submit(1, 10 * hour, 1), &mut effects)
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &task(1, 0, 10 * hour, "schedule"), &mut effects)
        .unwrap();
    let placed = risks(&effects);
    (engine, effects, placed)
}

#[test]
fn a_task_placed_on_a_transient_vm_is_scored_and_rescored_as_the_vm_ages() {
    let hour = HOUR;
    let (mut engine, mut effects, first) = placed_on_a_vm(&EngineConfig::default());
    assert_eq!(first.len(), 1);
    let p = first[0].score.this_vm.preemption_probability;
    assert!(p > 0.0 && p < 1.0, "{p}");
    assert!((first[0].score.runtime.mean_h - 10.0).abs() < 1e-9);
    assert_eq!(engine.machine(1).unwrap().risk.as_ref(), Some(&first[0]));

    // The plain machine gets no score.
    engine
        .apply(AT, &submit(2, 10 * hour, 1), &mut effects)
        .unwrap();
    effects.clear();
    let on_plain = r#"{"v":1,"type":"task","time_us":36000000000,"job_id":2,"task_index":0,"kind":"schedule","machine_id":2}"#;
    engine.apply(AT, &event(on_plain), &mut effects).unwrap();
    assert!(risks(&effects).is_empty());

    // The next event after the VM turns 3 h old rescores it for the
    // 8 h of work left, at the crossing time.
    effects.clear();
    engine
        .apply(AT, &submit(3, 12 * hour + hour / 2, 1), &mut effects)
        .unwrap();
    let refreshed = risks(&effects);
    assert_eq!(refreshed.len(), 1);
    assert_eq!(refreshed[0].time_us, 12 * hour);
    assert!((refreshed[0].score.runtime.mean_h - 8.0).abs() < 1e-9);
    assert!((refreshed[0].score.this_vm.age_h - 3.0).abs() < 1e-9);
}

#[test]
fn risk_scores_start_from_the_configured_prior() {
    let custom = BathtubPrior {
        a: 0.8,
        tau1: 0.5,
        ..BathtubPrior::default()
    };
    let mut config = EngineConfig::default();
    config.risk.prior = custom;
    let (_, _, by_default) = placed_on_a_vm(&EngineConfig::default());
    let (_, _, by_custom) = placed_on_a_vm(&config);
    let (d, c) = (&by_default[0], &by_custom[0]);
    // No VM has ended, so there is no fit: each engine scores with its
    // prior, exactly, and schedules checkpoints on the VM it recommends
    // by the prior's table.
    let spec = RiskSettings::default().checkpoint_spec().unwrap();
    for (risk, prior) in [(d, Bathtub::default()), (c, custom.bathtub().unwrap())] {
        let mut want = score(
            &prior,
            risk.score.this_vm.age_h,
            risk.score.runtime,
            &RiskConfig::default(),
            None,
        )
        .unwrap();
        let on_age_h = match want.recommendation {
            Recommendation::Keep => want.this_vm.age_h,
            _ => 0.0,
        };
        let table = CheckpointTable::build(&prior, spec, SegmentPolicy::Optimal).unwrap();
        want.checkpoints = Some(table.schedule(want.runtime.mean_h, on_age_h).unwrap());
        assert_eq!(risk.score, want);
    }
    let p = |r: &MachineRisk| r.score.this_vm.preemption_probability;
    assert!(p(c) > p(d) + 0.1, "{} vs {}", p(c), p(d));
}

#[test]
fn risk_scores_carry_a_checkpoint_schedule_unless_no_cost_is_set() {
    let (_, _, scored) = placed_on_a_vm(&EngineConfig::default());
    let risk = &scored[0];
    let schedule = risk.score.checkpoints.as_ref().expect("a schedule");
    // The 10 h of work, on the 5-minute grid, split at checkpoints; the
    // expected makespan adds checkpoints and expected recomputation.
    let work: f64 = schedule.intervals_h.iter().sum();
    assert!(
        (work - risk.score.runtime.mean_h).abs() <= 5.0 / 60.0,
        "{schedule:?}"
    );
    assert!(schedule.intervals_h.len() > 1, "{schedule:?}");
    assert!(schedule.expected_makespan_h > work, "{schedule:?}");
    let mut config = EngineConfig::default();
    config.risk.checkpoint_cost_minutes = 0.0;
    let (_, _, plain) = placed_on_a_vm(&config);
    assert_eq!(plain[0].score.checkpoints, None);
    // The rest of the score is the same: a schedule is advice for tasks
    // that checkpoint, not a change of recommendation.
    let mut without = risk.score.clone();
    without.checkpoints = None;
    assert_eq!(plain[0].score, without);
}

#[test]
fn bad_online_fit_settings_are_refused_by_name() {
    let refused = |risk: RiskSettings| {
        let config = EngineConfig {
            risk,
            ..EngineConfig::default()
        };
        Engine::new(&config).err().expect("refused").to_string()
    };
    let with_prior = |prior: BathtubPrior| RiskSettings {
        prior,
        ..RiskSettings::default()
    };
    let base = BathtubPrior::default();
    for (prior, field) in [
        (BathtubPrior { a: 1.5, ..base }, "risk.prior.a"),
        (BathtubPrior { a: 0.0, ..base }, "risk.prior.a"),
        (BathtubPrior { tau1: -1.0, ..base }, "risk.prior.tau1"),
        (BathtubPrior { tau2: 0.0, ..base }, "risk.prior.tau2"),
        (
            BathtubPrior {
                b: f64::NAN,
                ..base
            },
            "risk.prior.b",
        ),
        (
            BathtubPrior {
                max_lifetime_h: 0.0,
                ..base
            },
            "risk.prior.max_lifetime_h",
        ),
        // Valid, but beyond what the fit searches (τ1 ≤ 2L).
        (
            BathtubPrior {
                tau1: 100.0,
                ..base
            },
            "`tau1`",
        ),
    ] {
        let err = refused(with_prior(prior));
        assert!(err.contains(field), "{prior:?}: {err}");
    }
    let err = refused(RiskSettings {
        refit_every: 0,
        ..RiskSettings::default()
    });
    assert!(err.contains("risk.refit_every"), "{err}");
    let err = refused(RiskSettings {
        checkpoint_step_minutes: 0.5,
        ..RiskSettings::default()
    });
    assert!(err.contains("risk.checkpoint_step_minutes"), "{err}");
    let err = refused(RiskSettings {
        checkpoint_cost_minutes: -1.0,
        ..RiskSettings::default()
    });
    assert!(err.contains("risk.checkpoint_cost_minutes"), "{err}");
    let err = refused(RiskSettings {
        window: 0,
        ..RiskSettings::default()
    });
    assert!(err.contains("risk.window"), "{err}");
    let err = refused(RiskSettings {
        shrinkage_events: -1.0,
        ..RiskSettings::default()
    });
    assert!(err.contains("risk.shrinkage_events"), "{err}");
    assert_eq!(
        RiskSettings::default().online().unwrap(),
        OnlineConfig::default()
    );
}

#[test]
fn a_live_service_cannot_run_the_oracle() {
    let config = EngineConfig {
        policy: PolicyKind::Oracle,
        ..EngineConfig::default()
    };
    assert!(Engine::new(&config).is_err());
}

/// The bundled Google 2011 excerpt (real jobs, tasks, failures), with
/// preemptible VMs among its machines: each of the first 40 machines its
/// tasks run on is added as a VM and removed (preempted, or stopped) at a
/// seeded random age, so that risk scores, refreshes and online refits all
/// happen.
fn excerpt_with_vms() -> Vec<Event> {
    use rand::{Rng, SeedableRng};
    let dir =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/google2011-excerpt");
    let events: Vec<Event> = jobcast_ingest::google2011::open(&dir)
        .unwrap()
        .map(|e| e.unwrap())
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
    let mut vms = Vec::new();
    for e in &events {
        if let Event::Task(t) = e
            && let Some(m) = t.machine_id
            && !vms.iter().any(|&(id, _)| id == m)
            && vms.len() < 40
        {
            vms.push((m, t.time_us.saturating_sub(1)));
        }
    }
    let mut out = Vec::with_capacity(events.len() + 2 * vms.len());
    for (i, &(m, launch)) in vms.iter().enumerate() {
        out.push(event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{launch},"machine_id":{m},"kind":"add","vm_type":"n1-highcpu-{}","zone":"us-central1-c","preemptible":true,"launch_time_us":{launch}}}"#,
            [2, 16][i % 2]
        )));
        let life = rng.random_range(60_000_000..4 * HOUR);
        let reason = if i % 3 == 0 { "stopped" } else { "preempted" };
        out.push(event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{},"machine_id":{m},"kind":"remove","vm_type":"n1-highcpu-{}","zone":"us-central1-c","preemptible":true,"launch_time_us":{launch},"end_reason":"{reason}"}}"#,
            launch + life,
            [2, 16][i % 2]
        )));
    }
    out.extend(events);
    out.sort_by_key(Event::time_us);
    out
}

/// Apply `events` as the service does (ended jobs released after each);
/// the outputs and the keys changed.
fn apply_all(engine: &mut Engine, events: &[Event]) -> (Vec<String>, Effects) {
    let mut effects = Effects::default();
    let mut outputs = Vec::new();
    let mut changed = Effects::default();
    for e in events {
        match engine.apply(AT, e, &mut effects) {
            Ok(_) => outputs.extend(effects.outputs.iter().map(|o| format!("{o:?}"))),
            Err(r) => outputs.push(format!("rejected: {r}")),
        }
        changed.jobs.extend(effects.jobs.iter().copied());
        changed.tasks.extend(effects.tasks.iter().copied());
        changed.machines.extend(effects.machines.iter().copied());
        changed.history.extend(effects.history.iter().copied());
        changed.policies.extend(effects.policies.iter().copied());
        effects.clear();
        for &j in changed.jobs.iter() {
            if let Some(r) = engine.job(j) {
                outputs.push(format!("{r:?}"));
            }
        }
        engine.release_ended();
        changed.jobs.clear();
    }
    changed.settle();
    (outputs, changed)
}

#[test]
fn a_restored_engine_continues_exactly_as_the_one_it_was_taken_of() {
    let config = EngineConfig {
        risk: RiskSettings {
            refit_every: 3,
            ..RiskSettings::default()
        },
        capacity: CapacitySettings {
            enabled: true,
            long_cutoff_secs: 60.0,
            ..CapacitySettings::default()
        },
        ..EngineConfig::default()
    };
    let events = excerpt_with_vms();
    let mut original = Engine::new(&config).unwrap();
    // Snapshots taken at three points; each restored engine must follow
    // the original to the end.
    let cuts = [events.len() / 10, events.len() / 2, events.len() * 9 / 10];
    let mut done = 0;
    let mut restored = Vec::new();
    // The same points as a chain: the first snapshot whole, each later
    // one with only the history changed since the one before.
    let mut chain = Vec::new();
    for cut in cuts {
        let (_, changed) = apply_all(&mut original, &events[done..cut]);
        done = cut;
        let snapshot = original.snapshot().unwrap();
        let copy = Engine::restore(&config, &snapshot).unwrap();
        assert_eq!(copy.events(), original.events());
        assert_eq!(copy.live_jobs(), original.live_jobs());
        restored.push((cut, copy));
        chain.push(if chain.is_empty() {
            snapshot
        } else {
            original
                .snapshot_changes(changed.history.iter().copied(), Vec::new())
                .unwrap()
        });
        let links: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
        restored.push((cut, Engine::restore_chain(&config, &links).unwrap()));
    }
    let links: Vec<&[u8]> = chain.iter().map(Vec::as_slice).collect();
    for wrong in [&links[1..], &[links[0], links[0]][..], &[]] {
        let err = Engine::restore_chain(&config, wrong).err().unwrap();
        assert!(
            matches!(err, RestoreError::Snapshot(SnapshotError::Chain { .. })),
            "{err}"
        );
    }
    let (expected, changed) = apply_all(&mut original, &events[done..]);
    assert!(
        original.machines.lifetimes().refits() > 3,
        "the fitter refitted"
    );
    // ETAs from the machines' CPUs, and their scores, are in what must match.
    assert!(expected.iter().any(|o| o.contains("eta: Some(Completion")));
    assert!(expected.iter().any(|o| o.starts_with("EtaScored")));
    // So are the capacity controller's decisions, and their versions.
    assert!(expected.iter().any(|o| o.starts_with("Capacity")));
    for (cut, mut copy) in restored {
        apply_all(&mut copy, &events[cut..done]);
        let (rest, _) = apply_all(&mut copy, &events[done..]);
        assert!(
            rest == expected,
            "restored at event {cut}: outputs differ from the original's"
        );
        for &j in changed.jobs.iter() {
            assert_eq!(copy.job(j), original.job(j), "job {j}");
        }
        for &(j, t) in changed.tasks.iter() {
            assert_eq!(copy.task(j, t), original.task(j, t), "task {j}/{t}");
        }
        for &m in changed.machines.iter() {
            assert_eq!(copy.machine(m), original.machine(m), "machine {m}");
        }
        for &key in changed.history.iter() {
            assert_eq!(copy.history().record(key), original.history().record(key));
        }
        for kind in config.shadow.iter() {
            assert_eq!(
                copy.policy_errors(kind.name()),
                original.policy_errors(kind.name())
            );
        }
        assert_eq!(copy.events(), original.events());
        assert_eq!(copy.capacity(), original.capacity());
    }
}

#[test]
fn a_snapshot_of_another_layout_or_configuration_is_refused() {
    let config = EngineConfig::default();
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    run_job(&mut engine, 1, 0, 20, &mut effects);
    engine.release_ended();
    let snapshot = engine.snapshot().unwrap();

    let mut other_format = snapshot.clone();
    other_format[0] = (SNAPSHOT_FORMAT + 1) as u8;
    let err = Engine::restore(&config, &other_format).err().unwrap();
    assert!(
        matches!(err, RestoreError::Snapshot(SnapshotError::Format { found }) if found == SNAPSHOT_FORMAT + 1),
        "{err}"
    );

    let fewer = EngineConfig {
        shadow: vec![PolicyKind::ThreeSigma],
        ..config.clone()
    };
    let err = Engine::restore(&fewer, &snapshot).err().unwrap();
    assert!(err.to_string().contains("policies"), "{err}");

    let err = Engine::restore(&config, &snapshot[..snapshot.len() / 2])
        .err()
        .unwrap();
    assert!(
        matches!(err, RestoreError::Snapshot(SnapshotError::Decode(_))),
        "{err}"
    );

    // Ended jobs' records must reach the store before a snapshot.
    engine.apply(AT, &submit(2, 100, 1), &mut effects).unwrap();
    engine
        .apply(AT, &end(2, 200, "kill"), &mut effects)
        .unwrap();
    assert!(matches!(engine.snapshot(), Err(SnapshotError::Unreleased)));
}

#[test]
fn jobs_and_machines_silent_past_their_window_are_given_up_on_and_counted() {
    const H: u64 = 3_600_000_000;
    let mut config = EngineConfig {
        expiry: ExpirySettings {
            live_job_idle_hours: 10,
            machine_silent_hours: 20,
        },
        // This world jumps weeks between its events.
        max_future_skew_secs: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let mut apply = |engine: &mut Engine, event: Event| {
        effects.clear();
        engine.apply(AT, &event, &mut effects).unwrap();
        engine.release_ended();
        (
            effects.expired_jobs.clone(),
            effects.expired_machines.clone(),
        )
    };
    apply(&mut engine, plain_machine(1, 0));
    apply(&mut engine, plain_machine(2, 0));
    apply(&mut engine, submit(1, H, 2));
    apply(&mut engine, submit(2, H, 2));
    // Job 1 last reports at 2 h; job 2 at 9 h, on machine 1.
    apply(&mut engine, task(1, 0, 2 * H, "schedule"));
    apply(&mut engine, task(2, 0, 9 * H, "schedule"));
    assert_eq!(
        apply(&mut engine, submit(3, 11 * H + H / 2, 1)),
        (vec![], vec![])
    );

    // 12.5 h: job 1 has been silent for more than 10 h.
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(4, 12 * H + H / 2, 1), &mut effects)
        .unwrap();
    assert_eq!(effects.expired_jobs, [1]);
    assert!(
        effects.jobs.iter().any(|&j| j == 1),
        "its record is written"
    );
    let record = engine.job(1).unwrap();
    assert_eq!(record.state, JobState::Expired);
    assert_eq!(record.end_us, Some(12 * H + H / 2));
    engine.release_ended();
    let late = engine.apply(AT, &task(1, 1, 13 * H, "schedule"), &mut effects);
    assert_eq!(late.unwrap_err().reason, "unknown_job");

    // 21 h: machine 2 silent since 0 h, job 2 since 9 h; machine 1 reported
    // (a task placed on it) at 9 h.
    assert_eq!(apply(&mut engine, submit(5, 21 * H, 1)), (vec![2], vec![2]));
    assert!(engine.machine(2).is_none());
    assert!(engine.machine(1).is_some());

    // A restored engine gives up on the same, at the same time.
    let mut restored = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    let later = submit(6, 31 * H, 1);
    let expected = (vec![3, 4], vec![1]);
    assert_eq!(apply(&mut engine, later.clone()), expected);
    assert_eq!(apply(&mut restored, later), expected);

    // Windows of 0 keep everything.
    config.expiry = ExpirySettings {
        live_job_idle_hours: 0,
        machine_silent_hours: 0,
    };
    let mut keeping = Engine::new(&config).unwrap();
    apply(&mut keeping, plain_machine(1, 0));
    apply(&mut keeping, submit(1, 0, 1));
    assert_eq!(
        apply(&mut keeping, submit(2, 1000 * H, 1)),
        (vec![], vec![])
    );
    assert!(keeping.machine(1).is_some() && keeping.job(1).is_some());
}

fn eta_config(slots: Option<u32>) -> EngineConfig {
    EngineConfig {
        policy: PolicyKind::ThreeSigma,
        shadow: Vec::new(),
        eta: EtaSettings {
            slots,
            ..EtaSettings::default()
        },
        ..EngineConfig::default()
    }
}

fn machine(id: u64, t: u64, kind: &str, cpus: f64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}","cpus":{cpus}}}"#
    ))
}

/// The one decision of `effects`, with its ETA relative to `at`: (p50,
/// the job's estimated size).
fn eta_of(effects: &Effects, at: u64) -> (f64, f64) {
    let d = decisions(effects);
    assert_eq!(d.len(), 1);
    let eta = d[0].eta.expect("an ETA");
    assert_eq!(eta.at_us, at);
    ((eta.p50_us - at) as f64, d[0].estimate.unwrap().size_us)
}

#[test]
fn a_decisions_eta_counts_the_work_queued_ahead_on_the_configured_slots() {
    let mut engine = Engine::new(&eta_config(Some(2))).unwrap();
    let mut effects = Effects::default();
    // One job alone: its two tasks side by side.
    engine
        .apply(AT, &submit(1, 1_000, 2), &mut effects)
        .unwrap();
    let (eta1, size1) = eta_of(&effects, 1_000);
    assert!((eta1 - size1 / 2.0).abs() <= 1.0, "{eta1} against {size1}");
    assert_eq!(engine.job(1).unwrap().eta, decisions(&effects)[0].eta);
    effects.clear();
    // Its two tasks run for 1 s each; then a like job of one task arrives
    // behind it: the first's remaining work drains on the two slots, then
    // the second runs.
    let (eta2, size2) = two_start_then_one_arrives(&mut engine, &mut effects);
    assert_eq!(size2 * 2.0, size1, "the same mean task runtime");
    let expected = (size1 - 2.0 * 1_000_000.0) / 2.0 + size2;
    assert!((eta2 - expected).abs() <= 1.0, "{eta2} against {expected}");
    effects.clear();
    // Ended without finishing: nothing to learn, nothing scored.
    engine
        .apply(AT, &end(2, 1_003_000, "kill"), &mut effects)
        .unwrap();
    assert!(
        !effects
            .outputs
            .iter()
            .any(|o| matches!(o, Output::EtaScored { .. }))
    );
}

/// Job 1's first two tasks start at 2 ms, then a one-task job 2 arrives a
/// second later: its ETA and predicted size (its decision in `effects`).
fn two_start_then_one_arrives(engine: &mut Engine, effects: &mut Effects) -> (f64, f64) {
    for i in 0..2 {
        engine
            .apply(AT, &task(1, i, 2_000, "schedule"), effects)
            .unwrap();
    }
    effects.clear();
    engine.apply(AT, &submit(2, 1_002_000, 1), effects).unwrap();
    eta_of(effects, 1_002_000)
}

#[test]
fn a_decisions_eta_waits_for_the_slots_a_job_behind_holds() {
    let mut engine = Engine::new(&eta_config(Some(2))).unwrap();
    let mut effects = Effects::default();
    // A wide job, in a low queue by its size, runs two tasks on both slots.
    engine
        .apply(AT, &submit(1, 1_000, 100), &mut effects)
        .unwrap();
    let (_, size1) = eta_of(&effects, 1_000);
    let queue1 = decisions(&effects)[0].queue;
    // A one-task job arrives a second later in a higher queue: ahead of
    // the wide job, but GS does not preempt, so it waits for one of the
    // two tasks to end, each after an exponential time of mean R (its
    // job's mean task time less the second it ran). Free slots
    // 2(1 − e^(−t/R)) reach one at R ln 2, having run 2(R ln 2 − R/2) of
    // its work; the rest runs on one slot.
    let (eta2, size2) = two_start_then_one_arrives(&mut engine, &mut effects);
    assert!(decisions(&effects)[0].queue < queue1);
    let r = size1 / 100.0 - 1_000_000.0;
    let t1 = r * std::f64::consts::LN_2;
    let expected = t1 + size2 - 2.0 * (t1 - r / 2.0);
    assert!(
        (eta2 - expected).abs() <= expected * 5e-3,
        "{eta2} against {expected}"
    );
}

#[test]
fn no_eta_slots_is_refused_by_name() {
    let err = Engine::new(&eta_config(Some(0))).err().expect("refused");
    assert!(err.to_string().contains("eta.slots"), "{err}");
}

#[test]
fn capacity_comes_from_the_cpus_of_the_machines_up() {
    let mut engine = Engine::new(&eta_config(None)).unwrap();
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(1, 1_000, 10), &mut effects)
        .unwrap();
    assert_eq!(decisions(&effects)[0].eta, None, "no capacity known");
    effects.clear();
    // 0.5 CPUs run five of these 0.1-CPU tasks at once.
    engine
        .apply(AT, &machine(7, 2_000, "add", 0.5), &mut effects)
        .unwrap();
    engine
        .apply(AT, &submit(2, 3_000, 10), &mut effects)
        .unwrap();
    let (eta, size) = eta_of(&effects, 3_000);
    // Job 1's work (the same size) is ahead, in CPU·µs at 0.1 a task.
    let expected = size * 0.1 / 0.5 + size / 5.0;
    assert!((eta - expected).abs() <= 1.0, "{eta} against {expected}");
    assert_eq!(engine.machine(7).unwrap().cpus, Some(0.5));
    effects.clear();
    // Resized to 1 CPU: twice as fast.
    engine
        .apply(AT, &machine(7, 4_000, "update", 1.0), &mut effects)
        .unwrap();
    engine
        .apply(AT, &submit(3, 5_000, 10), &mut effects)
        .unwrap();
    let (eta, _) = eta_of(&effects, 5_000);
    let expected = 2.0 * size * 0.1 / 1.0 + size / 10.0;
    assert!((eta - expected).abs() <= 1.0, "{eta} against {expected}");
    effects.clear();
    engine
        .apply(AT, &machine(7, 6_000, "remove", 1.0), &mut effects)
        .unwrap();
    engine
        .apply(AT, &submit(4, 7_000, 10), &mut effects)
        .unwrap();
    assert_eq!(decisions(&effects)[0].eta, None, "no machine up");
}

#[test]
fn finished_jobs_calibrate_later_etas_and_score_their_first() {
    // Four slots are configured, but the tasks run one after another: every
    // job takes four times the model's prediction.
    let config = eta_config(Some(4));
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let mut scored = Vec::new();
    let mut t = 1_000;
    let mut last = None;
    for job in 1..=80 {
        engine.apply(AT, &submit(job, t, 4), &mut effects).unwrap();
        let (eta, size) = eta_of(&effects, t);
        last = Some((eta, size));
        let task_us = (size / 4.0).round() as u64;
        for i in 0..4 {
            engine
                .apply(AT, &task(job, i, t, "schedule"), &mut effects)
                .unwrap();
            t += task_us;
            engine
                .apply(AT, &task(job, i, t, "finish"), &mut effects)
                .unwrap();
        }
        engine
            .apply(AT, &end(job, t, "finish"), &mut effects)
            .unwrap();
        scored.extend(effects.outputs.iter().filter_map(|o| match o {
            Output::EtaScored { error_pct, .. } => Some(*error_pct),
            _ => None,
        }));
        effects.clear();
        engine.release_ended();
        t += 1_000;
    }
    assert_eq!(scored.len(), 80, "every finished job is scored once");
    // Uncalibrated, the first ETAs were 4x short: 75 % off.
    assert!((scored[0] - 75.0).abs() < 0.1, "{}", scored[0]);
    // Once enough jobs finished, the ETA is the job's own time.
    let (eta, size) = last.unwrap();
    assert!((eta / size - 1.0).abs() < 0.01, "{eta} against {size}");
    assert!(scored[79] < 1.0, "{}", scored[79]);
    // And a restored engine gives the same ETAs.
    let mut copy = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    let mut a = Effects::default();
    let mut b = Effects::default();
    engine.apply(AT, &submit(99, t, 4), &mut a).unwrap();
    copy.apply(AT, &submit(99, t, 4), &mut b).unwrap();
    assert_eq!(decisions(&a), decisions(&b));
}

/// Another partition than [`AT`]'s.
const ELSEWHERE: Origin = Origin {
    partition: 1,
    offset: 0,
};

/// A job of 2,000 tasks submitted at 1 ms, all its pilots started at 2 ms:
/// the engine and the pilots.
fn sampling_job(config: &EngineConfig) -> (Engine, Vec<u32>) {
    let mut engine = Engine::new(config).unwrap();
    let mut effects = Effects::default();
    engine
        .apply(AT, &submit(1, 1_000, 2_000), &mut effects)
        .unwrap();
    let pilots = decisions(&effects)[0].pilots.clone();
    assert!(pilots.len() > 10, "{} pilots", pilots.len());
    for &p in &pilots {
        engine
            .apply(AT, &task(1, p, 2_000, "schedule"), &mut effects)
            .unwrap();
    }
    (engine, pilots)
}

/// Fail `pilots` one after the other, from 3 ms on, 1 µs apart.
fn fail(engine: &mut Engine, pilots: &[u32], effects: &mut Effects) {
    for (i, &p) in pilots.iter().enumerate() {
        engine
            .apply(AT, &task(1, p, 3_000 + i as u64, "fail"), effects)
            .unwrap();
    }
}

#[test]
fn pilot_replacements_wait_for_the_interval_and_only_the_newest_goes_out() {
    let config = EngineConfig::default();
    let (mut engine, pilots) = sampling_job(&config);
    let half = &pilots[..pilots.len() / 2];
    let mut effects = Effects::default();
    fail(&mut engine, half, &mut effects);
    assert!(decisions(&effects).is_empty(), "each replacement waits");
    assert_eq!(effects.overtaken, half.len() as u64 - 1);
    assert_eq!(engine.waiting_decisions(), 1);

    // Another partition's events do not publish it, even past its due time.
    engine
        .apply(ELSEWHERE, &plain_machine(7, 1_001_000), &mut effects)
        .unwrap();
    assert!(decisions(&effects).is_empty());
    // Its own partition's first event at its due time (1 s after the
    // decision published at 1 ms) does, as of that time.
    engine
        .apply(AT, &plain_machine(8, 1_000_999), &mut effects)
        .unwrap();
    assert!(decisions(&effects).is_empty(), "before its due time");
    engine
        .apply(AT, &plain_machine(9, 1_001_000), &mut effects)
        .unwrap();
    let out = decisions(&effects);
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].version, 1 + half.len() as u32, "the newest");
    assert_eq!(out[0].phase, Phase::Sampling);
    let replaced: BTreeSet<u32> = out[0].pilots.iter().copied().collect();
    assert!(half.iter().all(|p| !replaced.contains(p)));
    assert!(pilots[half.len()..].iter().all(|p| replaced.contains(p)));
    assert_eq!(engine.waiting_decisions(), 0);
}

#[test]
fn a_replacement_goes_out_at_once_when_no_published_pilot_is_left_to_run() {
    let config = EngineConfig::default();
    let (mut engine, pilots) = sampling_job(&config);
    let mut effects = Effects::default();
    fail(&mut engine, &pilots, &mut effects);
    // Every published pilot failed: the scheduler would have nothing of
    // the job to run until the interval passed.
    let out = decisions(&effects);
    assert_eq!(out.len(), 1, "only the last, at once");
    assert_eq!(out[0].version, 1 + pilots.len() as u32);
    assert!(out[0].pilots.iter().all(|p| !pilots.contains(p)));
    assert_eq!(effects.overtaken, pilots.len() as u64 - 1);
    assert_eq!(engine.waiting_decisions(), 0);
}

#[test]
fn without_an_interval_every_replacement_goes_out() {
    let config = EngineConfig {
        min_republish_ms: 0,
        ..EngineConfig::default()
    };
    let (mut engine, pilots) = sampling_job(&config);
    let mut effects = Effects::default();
    fail(&mut engine, &pilots, &mut effects);
    let versions: Vec<u32> = decisions(&effects).iter().map(|d| d.version).collect();
    assert_eq!(versions, (2..=1 + pilots.len() as u32).collect::<Vec<_>>());
    assert_eq!(effects.overtaken, 0);
}

#[test]
fn a_waiting_decision_survives_a_snapshot_and_dies_with_its_job() {
    let config = EngineConfig::default();
    let (mut engine, pilots) = sampling_job(&config);
    let mut effects = Effects::default();
    fail(&mut engine, &pilots[..3], &mut effects);
    let mut copy = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    assert_eq!(copy.waiting_decisions(), 1);
    let mut published = Vec::new();
    for engine in [&mut engine, &mut copy] {
        let mut effects = Effects::default();
        engine
            .apply(AT, &plain_machine(9, 1_001_000), &mut effects)
            .unwrap();
        published.push(decisions(&effects).into_iter().cloned().collect::<Vec<_>>());
    }
    assert_eq!(published[0].len(), 1);
    assert_eq!(published[0], published[1]);

    // A job that ends drops what waits for it.
    let (mut engine, pilots) = sampling_job(&config);
    let mut effects = Effects::default();
    fail(&mut engine, &pilots[..3], &mut effects);
    engine
        .apply(AT, &end(1, 4_000, "kill"), &mut effects)
        .unwrap();
    assert_eq!(engine.waiting_decisions(), 0);
    assert_eq!(effects.overtaken, 3);
    engine
        .apply(AT, &plain_machine(9, 1_001_000), &mut effects)
        .unwrap();
    assert!(decisions(&effects).is_empty());
}

/// The ETA rows follow every change to a job (placement, estimate, tasks
/// started and ended, its end) and a restore rebuilds them: after each
/// event they are what the jobs give.
#[test]
fn eta_rows_follow_every_job_through_submissions_tasks_ends_and_a_restore() {
    let config = EngineConfig {
        policy: PolicyKind::SLearn,
        eta: EtaSettings {
            slots: Some(8),
            ..EtaSettings::default()
        },
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let mut with_eta = 0;
    let mut apply = |engine: &mut Engine, event: &Event| {
        effects.clear();
        let _ = engine.apply(AT, event, &mut effects);
        with_eta += decisions(&effects)
            .iter()
            .filter(|d| d.eta.is_some())
            .count();
        assert!(
            engine
                .etas
                .rows_are_current(engine.jobs.values(), engine.driver),
            "after {event:?}"
        );
    };
    let mut t = 1_000_000;
    for job in 1..=40u64 {
        let width = [1, 2, 5, 12][job as usize % 4];
        apply(&mut engine, &submit(job, t, width));
        t += 1_000;
        for i in 0..width {
            apply(&mut engine, &task(job, i, t, "schedule"));
            t += 10;
        }
        // Every other job: its tasks finish (one fails first and runs
        // again), then it ends; the rest stay running.
        if job % 2 == 0 {
            apply(&mut engine, &task(job, 0, t, "fail"));
            apply(&mut engine, &task(job, 0, t + 1, "schedule"));
            for i in 0..width {
                t += 50_000 * (u64::from(i) + 1);
                apply(&mut engine, &task(job, i, t, "finish"));
            }
            apply(&mut engine, &end(job, t + 1, "finish"));
        }
        if job == 20 {
            engine.release_ended();
            let snapshot = engine.snapshot().unwrap();
            engine = Engine::restore(&config, &snapshot).unwrap();
            assert!(
                engine
                    .etas
                    .rows_are_current(engine.jobs.values(), engine.driver),
                "after the restore"
            );
        }
    }
    assert!(with_eta > 40, "{with_eta} decisions carried an ETA");
}

/// A capacity trace's events: four on-demand machines, a job of 10 h
/// that teaches the history, then four like it placed one per machine.
fn crowded_by_long_tasks(engine: &mut Engine, effects: &mut Effects) {
    for m in 1..=4 {
        engine.apply(AT, &plain_machine(m, 0), effects).unwrap();
    }
    learnt_one_job(engine, 10, effects);
    for (job, machine) in (11..=14).zip(1..=4) {
        let t = 10 * HOUR + job;
        engine.apply(AT, &submit(job, t, 1), effects).unwrap();
        engine
            .apply(
                AT,
                &event(&format!(
                    r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":0,"kind":"schedule","machine_id":{machine}}}"#
                )),
                effects,
            )
            .unwrap();
    }
}

fn capacity_decisions(effects: &Effects) -> Vec<CapacityDecision> {
    effects
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Capacity(c) => Some(c.clone()),
            _ => None,
        })
        .collect()
}

/// A preemptible VM launched at `launch`, joining at `t`.
fn transient_vm(id: u64, t: u64, launch: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"add","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{launch}}}"#
    ))
}

#[test]
fn long_tasks_crowding_the_cluster_grow_the_transient_partition_and_their_end_shrinks_it() {
    let config = EngineConfig {
        capacity: CapacitySettings {
            enabled: true,
            long_cutoff_secs: 3_600.0,
            // K = ⌊3⌋·2·0.5 = 3 transient servers.
            static_short_servers: 2,
            ..CapacitySettings::default()
        },
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    crowded_by_long_tasks(&mut engine, &mut effects);
    // Job 10 had no estimate when placed: short. Its successors, long
    // by the history, hold all four machines: l_r = 1, and one server
    // brings it to 0.8 ≤ 0.95.
    let decided = capacity_decisions(&effects);
    assert_eq!(decided.len(), 1, "{decided:?}");
    let grow = &decided[0];
    assert_eq!(
        (grow.action, grow.servers, grow.version),
        (PartitionAction::Grow, 1, 1)
    );
    assert_eq!(
        (grow.long_servers, grow.servers_up, grow.transient_servers),
        (4, 4, 0)
    );
    assert_eq!(grow.transient_budget, 3);
    assert_eq!(grow.long_load_ratio, 1.0);
    assert_eq!(engine.capacity(), Some(grow));

    // The server joins: l_r = 0.8, and releasing it would take l_r back
    // over: hold.
    effects.clear();
    let t = 11 * HOUR;
    engine
        .apply(AT, &transient_vm(5, t, t), &mut effects)
        .unwrap();
    let decided = capacity_decisions(&effects);
    assert_eq!(decided.len(), 1, "{decided:?}");
    assert_eq!(
        (decided[0].action, decided[0].version),
        (PartitionAction::Hold, 2)
    );
    assert_eq!(decided[0].transient_servers, 1);

    // A second, launched 23 h ago, near GCE's 24 h deadline: with it
    // l_r = 4/6, and one may go. The old one goes, not the other in the
    // flat middle of its life.
    effects.clear();
    let t = 25 * HOUR;
    engine
        .apply(AT, &transient_vm(6, t, t - 23 * HOUR), &mut effects)
        .unwrap();
    let decided = capacity_decisions(&effects);
    assert_eq!(decided.len(), 1, "{decided:?}");
    let shrink = &decided[0];
    assert_eq!(
        (shrink.action, shrink.servers, shrink.version),
        (PartitionAction::Shrink, 1, 3)
    );
    assert_eq!(shrink.release.len(), 1);
    assert_eq!(shrink.release[0].machine_id, 6);
    assert!((shrink.release[0].age_h - 23.0).abs() < 1e-9);
    assert!(shrink.release[0].preemption_probability > 0.5, "{shrink:?}");

    // Nothing new asked while the same holds: another long task, on a
    // machine that runs one already.
    effects.clear();
    engine
        .apply(AT, &submit(20, t + 1, 1), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task(20, 0, t + 2, "schedule"), &mut effects)
        .unwrap();
    assert!(capacity_decisions(&effects).is_empty());

    // The long tasks end (one by a job's end, one by its machine's
    // leave, two by their attempts' ends): l_r falls to 0 and the
    // partition shrinks on; the snapshot keeps where the controller is.
    effects.clear();
    let t = 26 * HOUR;
    engine
        .apply(AT, &task(11, 0, t, "finish"), &mut effects)
        .unwrap();
    engine.apply(AT, &end(12, t, "kill"), &mut effects).unwrap();
    engine.apply(AT, &end(20, t, "kill"), &mut effects).unwrap();
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":3,"kind":"remove"}}"#
            )),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(AT, &task(14, 0, t, "evict"), &mut effects)
        .unwrap();
    // Still one to release, of the same two: nothing new to say.
    assert!(capacity_decisions(&effects).is_empty());
    engine.release_ended();
    let mut restored = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    assert_eq!(restored.capacity(), engine.capacity());
    // The old VM is released; the restored engine decides as the original.
    let released = event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":6,"kind":"remove"}}"#,
        t = t + 1
    ));
    effects.clear();
    let mut again = Effects::default();
    engine.apply(AT, &released, &mut effects).unwrap();
    restored.apply(AT, &released, &mut again).unwrap();
    let decided = capacity_decisions(&effects);
    assert_eq!(capacity_decisions(&again), decided);
    assert_eq!(decided.len(), 1, "{decided:?}");
    let last = &decided[0];
    assert_eq!((last.action, last.version), (PartitionAction::Shrink, 4));
    assert_eq!(
        (last.long_servers, last.servers_up, last.transient_servers),
        (0, 4, 1)
    );
    assert_eq!(last.release[0].machine_id, 5);

    // Off, nothing is decided.
    let mut off = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    crowded_by_long_tasks(&mut off, &mut effects);
    assert!(capacity_decisions(&effects).is_empty());
    assert_eq!(off.capacity(), None);
}

#[test]
fn bad_capacity_settings_are_refused_by_name() {
    for (bad, key) in [
        (
            CapacitySettings {
                threshold: 0.0,
                ..CapacitySettings::default()
            },
            "capacity.threshold",
        ),
        (
            CapacitySettings {
                cost_ratio: 0.5,
                ..CapacitySettings::default()
            },
            "capacity.cost_ratio",
        ),
        (
            CapacitySettings {
                replaced_fraction: 1.5,
                ..CapacitySettings::default()
            },
            "capacity.replaced_fraction",
        ),
        (
            CapacitySettings {
                long_cutoff_secs: f64::NAN,
                ..CapacitySettings::default()
            },
            "capacity.long_cutoff_secs",
        ),
        (
            CapacitySettings {
                release_horizon_minutes: 0.0,
                ..CapacitySettings::default()
            },
            "capacity.release_horizon_minutes",
        ),
    ] {
        let config = EngineConfig {
            capacity: bad,
            ..EngineConfig::default()
        };
        let err = Engine::new(&config).err().expect("refused");
        assert!(err.to_string().contains(key), "{err}");
    }
}

/// A task event of `job` on `machine`.
fn task_on(job: u64, t: u64, kind: &str, machine: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":0,"kind":"{kind}","machine_id":{machine}}}"#
    ))
}

#[test]
fn published_risks_are_recalibrated_on_what_happened_to_the_scores_before() {
    let config = EngineConfig {
        risk: RiskSettings {
            recalibration_bins: 10,
            recalibration_min_outcomes: 6.0,
            ..RiskSettings::default()
        },
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    // History: a similar job ran 2 h.
    learnt_one_job(&mut engine, 2, &mut effects);
    // Tasks of 2 h placed on fresh VMs, every one of which is preempted an
    // hour later: the model says a few per cent, the outcomes say all.
    let mut t = 3 * HOUR;
    let mut published = Vec::new();
    for k in 0..8u64 {
        let (vm, job) = (100 + k, 20 + k);
        effects.clear();
        engine
            .apply(AT, &transient_vm(vm, t, t), &mut effects)
            .unwrap();
        engine.apply(AT, &submit(job, t, 1), &mut effects).unwrap();
        engine
            .apply(AT, &task_on(job, t, "schedule", vm), &mut effects)
            .unwrap();
        let risk = risks(&effects).pop().expect("scored");
        published.push((
            risk.score.this_vm.preemption_probability,
            risk.preemption_probability,
        ));
        let gone = t + HOUR;
        engine
            .apply(
                AT,
                &event(&format!(
                    r#"{{"v":1,"type":"machine","time_us":{gone},"machine_id":{vm},"kind":"remove","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{t},"end_reason":"preempted"}}"#
                )),
                &mut effects,
            )
            .unwrap();
        engine
            .apply(AT, &task_on(job, gone, "lost", vm), &mut effects)
            .unwrap();
        engine
            .apply(AT, &end(job, gone, "lost"), &mut effects)
            .unwrap();
        engine.release_ended();
        t += 2 * HOUR;
    }
    // The model's own until six outcomes are in; then what they say.
    for (i, &(model, published)) in published.iter().enumerate() {
        assert!(model < 0.5, "{published:?}");
        if i < 6 {
            assert_eq!(published, model, "score {i}");
        } else {
            assert_eq!(published, 1.0, "score {i}");
        }
    }
    // A VM that outlives its task teaches the other way, and a restored
    // engine has learnt the same.
    let vm = 200;
    effects.clear();
    engine
        .apply(AT, &transient_vm(vm, t, t), &mut effects)
        .unwrap();
    engine.apply(AT, &submit(30, t, 1), &mut effects).unwrap();
    engine
        .apply(AT, &task_on(30, t, "schedule", vm), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_on(30, t + 2 * HOUR, "finish", vm), &mut effects)
        .unwrap();
    engine
        .apply(AT, &end(30, t + 2 * HOUR, "finish"), &mut effects)
        .unwrap();
    engine.release_ended();
    let mut restored = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    let t = t + 3 * HOUR;
    let mut scored = Vec::new();
    for e in [&mut engine, &mut restored] {
        let mut effects = Effects::default();
        e.apply(AT, &submit(31, t, 1), &mut effects).unwrap();
        e.apply(AT, &task_on(31, t, "schedule", 200), &mut effects)
            .unwrap();
        scored.push(risks(&effects).pop().expect("scored"));
    }
    assert_eq!(scored[0], scored[1]);
    let p = scored[0].preemption_probability;
    assert!(
        p < 1.0 && p > scored[0].score.this_vm.preemption_probability,
        "{p}"
    );

    // A task killed is scored no more and its VM's later preemption says
    // nothing of it; one evicted just before its VM's preemption failed.
    let counted = engine.machines.outcomes_counted();
    let gone = |vm: u64, at: u64, launch: u64| {
        event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{at},"machine_id":{vm},"kind":"remove","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{launch},"end_reason":"preempted"}}"#
        ))
    };
    let mut effects = Effects::default();
    engine
        .apply(AT, &task_on(31, t + HOUR, "kill", 200), &mut effects)
        .unwrap();
    assert!(engine.machine(200).unwrap().risk.is_none());
    engine
        .apply(AT, &gone(200, t + 20 * HOUR, t - 5 * HOUR), &mut effects)
        .unwrap();
    assert!(
        risks(&effects).is_empty(),
        "no refresh of a task that ended"
    );
    assert_eq!(engine.machines.outcomes_counted(), counted);
    let t = t + 21 * HOUR;
    engine
        .apply(AT, &transient_vm(201, t, t), &mut effects)
        .unwrap();
    engine.apply(AT, &submit(32, t, 1), &mut effects).unwrap();
    engine
        .apply(AT, &task_on(32, t, "schedule", 201), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_on(32, t + HOUR, "evict", 201), &mut effects)
        .unwrap();
    engine
        .apply(AT, &gone(201, t + HOUR + 60_000_000, t), &mut effects)
        .unwrap();
    assert_eq!(engine.machines.outcomes_counted(), counted + 1.0);
}

/// A spot VM's hibernation is kept on its record until it resumes, and is
/// no end of its life; a job's deadline survives a snapshot.
#[test]
fn a_hibernated_vm_stays_up_and_a_deadline_survives_a_snapshot() {
    let hour = HOUR;
    let (mut engine, mut effects, _) = placed_on_a_vm(&EngineConfig::default());
    let vm = |t: u64, kind: &str| {
        event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"{kind}","vm_type":"n1-highcpu-16","zone":"us-central1-c","preemptible":true,"launch_time_us":{}}}"#,
            9 * hour
        ))
    };
    engine
        .apply(AT, &vm(11 * hour, "hibernate"), &mut effects)
        .unwrap();
    let m = engine.machine(1).unwrap();
    assert_eq!((m.up, m.hibernated_since_us), (true, Some(11 * hour)));
    // A second hibernate keeps the first's time.
    engine
        .apply(AT, &vm(11 * hour + 5, "hibernate"), &mut effects)
        .unwrap();
    assert_eq!(
        engine.machine(1).unwrap().hibernated_since_us,
        Some(11 * hour)
    );
    engine
        .apply(AT, &vm(12 * hour, "resume"), &mut effects)
        .unwrap();
    let m = engine.machine(1).unwrap();
    assert_eq!(
        (m.up, m.hibernated_since_us, m.removed_us),
        (true, None, None)
    );

    let with_deadline = event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{},"job_id":2,"num_tasks":3,"deadline_us":{}}}"#,
        12 * hour,
        30 * hour
    ));
    engine.apply(AT, &with_deadline, &mut effects).unwrap();
    engine.release_ended();
    let restored = Engine::restore(&EngineConfig::default(), &engine.snapshot().unwrap()).unwrap();
    assert_eq!(
        restored.jobs[&2].submitted.deadline_us,
        Some(30 * hour),
        "the deadline is in the snapshot"
    );
    assert_eq!(restored.machine(1), engine.machine(1));
}

fn deadline_decisions(effects: &Effects) -> Vec<&DeadlineDecision> {
    effects
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Deadline { decision, .. } => Some(decision),
            _ => None,
        })
        .collect()
}

/// `engine.deadlines` on; event time may leap (the tests jump hours).
fn deadline_config() -> EngineConfig {
    EngineConfig {
        deadlines: DeadlineSettings {
            enabled: true,
            ..DeadlineSettings::default()
        },
        max_future_skew_secs: 0,
        ..EngineConfig::default()
    }
}

/// An engine of [`deadline_config`] that has learnt a job of 10 h, with a
/// preemptible VM (machine 1) up.
fn deadline_engine() -> (Engine, Effects) {
    let mut engine = Engine::new(&deadline_config()).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"add","vm_type":"c4.large","zone":"us-east-1a","preemptible":true,"launch_time_us":{t}}}"#,
                t = 10 * HOUR
            )),
            &mut effects,
        )
        .unwrap();
    effects.clear();
    (engine, effects)
}

fn with_deadline(job: u64, t: u64, tasks: u32, deadline_us: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":1024,"num_tasks":{tasks},"deadline_us":{deadline_us}}}"#
    ))
}

fn vm_event(t: u64, kind: &str) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":1,"kind":"{kind}"}}"#
    ))
}

/// A deadline job is planned from 3Sigma's estimate; a hibernation of the
/// VM its tasks run on waits until `start_bkp`, a resume ends the wait,
/// and a second hibernation left to run migrates the group when event
/// time reaches it, after a snapshot and restore as without.
#[test]
fn a_deadline_job_is_planned_and_a_hibernation_waits_then_migrates() {
    let (mut engine, mut effects) = deadline_engine();
    let t0 = 11 * HOUR;
    let deadline_us = t0 + 100 * HOUR;
    engine
        .apply(AT, &with_deadline(2, t0, 4, deadline_us), &mut effects)
        .unwrap();
    let plan = deadline_decisions(&effects);
    assert_eq!(plan.len(), 1, "{:?}", effects.outputs);
    let plan = plan[0].clone();
    assert_eq!(
        (plan.job_id, plan.version, plan.action),
        (2, 1, DeadlineAction::Plan)
    );
    let map = plan.plan.as_ref().unwrap();
    assert_eq!(map.policy, PolicyKind::ThreeSigma);
    assert_eq!(map.quantile, "p90");
    assert!(map.valid);
    // 3Sigma's p90 of the job's mean task runtime (one job of 10 h seen:
    // the model's own spread).
    let p90 = engine.job(2).unwrap().estimates[&PolicyKind::ThreeSigma]
        .quantiles
        .unwrap()
        .mean_task_runtime_us
        .p90;
    assert_eq!(map.task_runtime_us, p90.round() as u64);
    assert!(p90 > 10.0 * HOUR as f64);
    let planned: BTreeSet<u32> = map
        .vms
        .iter()
        .flat_map(|vm| vm.tasks.iter().map(|t| t.task_index))
        .collect();
    assert_eq!(planned, BTreeSet::from([0, 1, 2, 3]));
    assert!(
        map.vms
            .iter()
            .all(|vm| vm.market == crate::deadlines::Market::Spot)
    );
    assert!(map.end_us <= t0 + 50 * HOUR, "within D · time_limit");
    assert_eq!(engine.deadline(2).unwrap().plan.as_ref(), Some(map));

    // Every task runs on the VM; it hibernates, and resumes in time.
    for i in 0..4 {
        engine
            .apply(AT, &task(2, i, t0 + 60_000_000, "schedule"), &mut effects)
            .unwrap();
    }
    effects.clear();
    let t1 = t0 + HOUR;
    engine
        .apply(AT, &vm_event(t1, "hibernate"), &mut effects)
        .unwrap();
    let wait = deadline_decisions(&effects)[0].clone();
    assert_eq!((wait.version, wait.action), (2, DeadlineAction::Wait));
    let group = wait.recovery.as_ref().unwrap();
    assert_eq!(group.tasks, [0, 1, 2, 3]);
    assert_eq!(group.hibernated_us, t1);
    // The p90 on the fastest types, boot included.
    assert!(group.runtime_us > 2 * 60_000_000 && group.runtime_us < map.task_runtime_us);
    assert_eq!(
        group.start_backup_us,
        deadline_us - group.runtime_us - 60_000_000
    );
    assert!(group.meets_deadline && group.start_backup_us > t1);
    let placed: BTreeSet<u32> = group
        .backups
        .iter()
        .flat_map(|vm| vm.tasks.iter().map(|t| t.task_index))
        .collect();
    assert_eq!(placed, BTreeSet::from([0, 1, 2, 3]));
    // A second hibernate of the same VM changes nothing.
    effects.clear();
    engine
        .apply(AT, &vm_event(t1 + 5, "hibernate"), &mut effects)
        .unwrap();
    assert!(deadline_decisions(&effects).is_empty());

    engine
        .apply(AT, &vm_event(t1 + HOUR, "resume"), &mut effects)
        .unwrap();
    let resume = deadline_decisions(&effects)[0];
    assert_eq!((resume.version, resume.action), (3, DeadlineAction::Resume));
    assert_eq!(
        engine.deadline(2).unwrap().recoveries[0].state,
        RecoveryState::Resumed
    );

    // Hibernated again, past start_bkp: the group moves when event time
    // reaches it, whatever event brings it there.
    let t2 = t1 + 2 * HOUR;
    engine
        .apply(AT, &vm_event(t2, "hibernate"), &mut effects)
        .unwrap();
    let start = engine.deadline(2).unwrap().recoveries[0].start_backup_us;
    engine.release_ended();
    let snapshot = engine.snapshot().unwrap();
    let mut restored = Engine::restore(&deadline_config(), &snapshot).unwrap();
    let mut outcomes = Vec::new();
    for engine in [&mut engine, &mut restored] {
        let mut effects = Effects::default();
        engine
            .apply(AT, &plain_machine(5, start - 1), &mut effects)
            .unwrap();
        assert!(deadline_decisions(&effects).is_empty(), "not yet due");
        engine
            .apply(AT, &plain_machine(6, start), &mut effects)
            .unwrap();
        let migrate = deadline_decisions(&effects)[0].clone();
        assert_eq!(
            (migrate.version, migrate.action),
            (5, DeadlineAction::Migrate)
        );
        assert_eq!(migrate.time_us, start);
        assert_eq!(
            migrate.recovery.as_ref().unwrap().state,
            RecoveryState::Migrated
        );
        // A resume after the move ends no wait.
        effects.clear();
        engine
            .apply(AT, &vm_event(start + 1, "resume"), &mut effects)
            .unwrap();
        assert!(deadline_decisions(&effects).is_empty());
        outcomes.push(migrate);
    }
    assert_eq!(outcomes[0], outcomes[1], "the snapshot holds the wait");

    // The job's end forgets it.
    let mut effects = Effects::default();
    engine
        .apply(AT, &end(2, start + 2, "kill"), &mut effects)
        .unwrap();
    assert!(engine.deadline(2).is_none());
}

/// Task `index` of job `job` on machine `machine`.
fn task_at(job: u64, index: u32, t: u64, kind: &str, machine: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"task","time_us":{t},"job_id":{job},"task_index":{index},"kind":"{kind}","machine_id":{machine}}}"#
    ))
}

/// A spot VM `id` of type `vm_type` joining at `t`.
fn vm_of_type(id: u64, t: u64, vm_type: &str) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"add","vm_type":"{vm_type}","zone":"z","preemptible":true,"launch_time_us":{t}}}"#
    ))
}

/// An engine with `engine.deadlines.fleet = "elastic"` that has learnt a
/// job of 10 h and been given job 2 at `t0` (returned with its
/// configuration, and the effects of the submission): four tasks of 50 GB
/// each by a deadline of 10 h, so one task at a time per VM and two per
/// VM within the 5 h occupation limit.
fn elastic_engine() -> (EngineConfig, Engine, Effects, u64) {
    let mut config = deadline_config();
    config.deadlines.fleet = FleetMode::Elastic;
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    effects.clear();
    let t0 = 11 * HOUR;
    let submit = event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{t0},"job_id":2,"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":51200,"num_tasks":4,"deadline_us":{}}}"#,
        t0 + 10 * HOUR
    ));
    engine.apply(AT, &submit, &mut effects).unwrap();
    (config, engine, effects, t0)
}

/// With `engine.deadlines.fleet = "elastic"`, the map's VMs are bound to
/// the machines their types run on; a VM about to open a new billing slot
/// that the rest can do without drains; a hibernation requeues its tasks
/// and buys VMs for them instead of waiting for `start_bkp`; a machine of
/// a bought type is bound to the VM bought; and a restored engine goes on
/// as the one that wrote the snapshot.
#[test]
fn an_elastic_fleet_drains_grows_and_binds_its_vms_live() {
    let (config, mut engine, mut effects, t0) = elastic_engine();
    let plan = deadline_decisions(&effects)[0].clone();
    let map = plan.plan.as_ref().unwrap();
    assert!(map.vms.len() >= 2, "{map:?}");
    let fleet = engine.deadline(2).unwrap().fleet.clone().unwrap();
    assert_eq!(fleet.vms.len(), map.vms.len());
    assert_eq!(fleet.queued, 4);
    assert_eq!(fleet.task_runtime_us, map.task_runtime_us);
    effects.clear();
    // Machines 11 and 12 play the map's first two VMs; each starts the
    // first task the map put on it.
    let (a, b) = (&map.vms[0], &map.vms[1]);
    for (id, vm) in [(11, a), (12, b)] {
        engine
            .apply(AT, &vm_of_type(id, t0, &vm.vm_type), &mut effects)
            .unwrap();
        let first = vm.tasks[0].task_index;
        engine
            .apply(
                AT,
                &task_at(2, first, t0 + 60_000_000, "schedule", id),
                &mut effects,
            )
            .unwrap();
    }
    assert!(deadline_decisions(&effects).is_empty());
    effects.clear();

    // A's task ends at 55 min: the next one would take it past its paid
    // hour, and B ends the other two by the limit: A drains.
    let minute = 60_000_000;
    engine
        .apply(
            AT,
            &task_at(2, a.tasks[0].task_index, t0 + 55 * minute, "finish", 11),
            &mut effects,
        )
        .unwrap();
    let drain = deadline_decisions(&effects);
    assert_eq!(drain.len(), 1, "{drain:?}");
    assert_eq!(drain[0].action, DeadlineAction::Drain);
    assert_eq!(drain[0].version, 2);
    let change = drain[0].fleet.as_ref().unwrap();
    assert_eq!(change.drain_machine_id, Some(11));
    assert!(change.buy.is_empty());
    assert!(change.task_runtime_us > map.task_runtime_us / 10);
    // The record, as of the latest decision: machines 11 and 12 play the
    // map's VMs, two tasks wait.
    let fleet = engine.deadline(2).unwrap().fleet.clone().unwrap();
    assert_eq!(fleet.vms[0].machine_id, Some(11));
    assert_eq!(fleet.vms[1].machine_id, Some(12));
    assert!(fleet.vms[0].draining && !fleet.vms[1].draining);
    assert_eq!(fleet.queued, 2);
    effects.clear();

    // B hibernates: no VM of the fleet can run the three tasks left, so
    // it buys VMs for them at once; no recovery group waits.
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{},"machine_id":12,"kind":"hibernate"}}"#,
                t0 + 60 * minute
            )),
            &mut effects,
        )
        .unwrap();
    let grow = deadline_decisions(&effects);
    assert_eq!(grow.len(), 1, "{grow:?}");
    assert_eq!(grow[0].action, DeadlineAction::Grow);
    let change = grow[0].fleet.as_ref().unwrap();
    assert!(!change.buy.is_empty());
    assert_eq!(change.queued, 3);
    assert!(
        change
            .buy
            .iter()
            .all(|vm| vm.bought_us == Some(t0 + 60 * minute) && vm.machine_id.is_none())
    );
    let bought = change.buy[0].vm_type.clone();
    let record = engine.deadline(2).unwrap().clone();
    assert!(record.recoveries.is_empty());
    assert!(record.fleet.as_ref().unwrap().vms[1].hibernated);

    // After a snapshot, a machine of the bought type takes a task, playing
    // the VM bought, and hibernates: its task goes back to the queue, and
    // the fleet grows again, in both engines alike.
    engine.release_ended();
    let snapshot = engine.snapshot().unwrap();
    let mut restored = Engine::restore(&config, &snapshot).unwrap();
    let mut outcomes = Vec::new();
    for engine in [&mut engine, &mut restored] {
        let mut effects = Effects::default();
        let t = t0 + 63 * minute;
        engine
            .apply(AT, &vm_of_type(13, t, &bought), &mut effects)
            .unwrap();
        engine
            .apply(
                AT,
                &task_at(2, b.tasks[0].task_index, t, "schedule", 13),
                &mut effects,
            )
            .unwrap();
        assert!(deadline_decisions(&effects).is_empty());
        let hibernate = format!(
            r#"{{"v":1,"type":"machine","time_us":{},"machine_id":13,"kind":"hibernate"}}"#,
            t + minute
        );
        engine.apply(AT, &event(&hibernate), &mut effects).unwrap();
        let grow = deadline_decisions(&effects);
        assert_eq!(grow.len(), 1, "{grow:?}");
        assert_eq!((grow[0].action, grow[0].version), (DeadlineAction::Grow, 4));
        let change = grow[0].fleet.as_ref().unwrap();
        assert_eq!(change.queued, 3);
        // Stopped a second time, the task runs again on demand only, and
        // the fleet buys on demand for it.
        assert_eq!(change.on_demand_tasks, vec![b.tasks[0].task_index]);
        assert!(
            change
                .buy
                .iter()
                .any(|vm| vm.market == crate::deadlines::Market::OnDemand),
            "{change:?}"
        );
        let fleet = engine.deadline(2).unwrap().fleet.clone().unwrap();
        let played = &fleet.vms[map.vms.len()];
        assert_eq!((played.machine_id, played.hibernated), (Some(13), true));
        outcomes.push((grow[0].clone(), engine.deadline(2).unwrap().clone()));
    }
    assert_eq!(outcomes[0], outcomes[1], "the snapshot holds the fleet");

    // B, hibernated before the snapshot, resumes: both engines reach it
    // in the fleet, and the rest of the fleet ends the bag without it.
    let mut resumed = Vec::new();
    for engine in [&mut engine, &mut restored] {
        let mut effects = Effects::default();
        let resume = format!(
            r#"{{"v":1,"type":"machine","time_us":{},"machine_id":12,"kind":"resume"}}"#,
            t0 + 70 * minute
        );
        engine.apply(AT, &event(&resume), &mut effects).unwrap();
        let drain = deadline_decisions(&effects);
        assert_eq!(drain.len(), 1, "{drain:?}");
        assert_eq!(drain[0].action, DeadlineAction::Drain);
        assert_eq!(drain[0].fleet.as_ref().unwrap().drain_machine_id, Some(12));
        resumed.push(engine.deadline(2).unwrap().clone());
    }
    assert_eq!(resumed[0], resumed[1]);
    assert!(!resumed[0].fleet.as_ref().unwrap().vms[1].hibernated);
}

/// A deadline job planned only once its pilot has ended (SLearn's
/// estimate, with no 3Sigma beside it); the elastic fleet counts the pilot
/// done, its runtime on the baseline core by its VM's slowdown, as it
/// counts every task that ends under the plan.
#[test]
fn an_elastic_fleet_planned_after_its_pilot_counts_it_by_its_vms_slowdown() {
    let mut config = deadline_config();
    config.deadlines.fleet = FleetMode::Elastic;
    config.policy = PolicyKind::SLearn;
    config.shadow = Vec::new();
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let (t0, minute) = (HOUR, 60_000_000);
    let submit = event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{t0},"job_id":2,"user":"u","job_name":"n","logical_name":"l","scheduling_class":0,"priority":0,"cpu_request":0.1,"mem_request":51200,"num_tasks":4,"deadline_us":{}}}"#,
        t0 + 10 * HOUR
    ));
    engine.apply(AT, &submit, &mut effects).unwrap();
    let early = deadline_decisions(&effects);
    assert!(early.is_empty(), "no estimate yet: {early:?}");
    let pilot = decisions(&effects)[0].pilots[0];
    // The pilot runs 60 minutes on a c4.large (slowdown 0.655).
    engine
        .apply(AT, &vm_of_type(11, t0, "c4.large"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_at(2, pilot, t0, "schedule", 11), &mut effects)
        .unwrap();
    effects.clear();
    engine
        .apply(
            AT,
            &task_at(2, pilot, t0 + 60 * minute, "finish", 11),
            &mut effects,
        )
        .unwrap();
    let plan = deadline_decisions(&effects);
    assert_eq!(plan.len(), 1, "{plan:?}");
    assert_eq!(plan[0].action, DeadlineAction::Plan);
    effects.clear();
    // Another task runs 60 minutes on a c4.large: with the pilot, the
    // bag's runtime is 60 / 0.655 minutes on the baseline core.
    let other = (0..4).find(|&i| i != pilot).unwrap();
    engine
        .apply(AT, &vm_of_type(12, t0, "c4.large"), &mut effects)
        .unwrap();
    engine
        .apply(
            AT,
            &task_at(2, other, t0 + 60 * minute, "schedule", 12),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(
            AT,
            &task_at(2, other, t0 + 120 * minute, "finish", 12),
            &mut effects,
        )
        .unwrap();
    let changed = deadline_decisions(&effects);
    let change = changed
        .last()
        .and_then(|d| d.fleet.as_ref())
        .unwrap_or_else(|| panic!("a grow or drain: {changed:?}"));
    let expected = 3600.0 / 0.655 * 1e6;
    let runtime = change.task_runtime_us as f64;
    assert!(
        (runtime - expected).abs() < 1e6,
        "{runtime} against {expected}"
    );
}

/// An elastic fleet live, on input a week of production brings: a task
/// that fails goes back to the queue; a machine removed while idle no
/// longer counts; a machine of a type the fleet has none of joins it;
/// events of a machine and of the job out of order, and a
/// task starting on a hibernated machine before its resume arrives, are
/// taken without a fault, and decisions keep their order.
#[test]
fn an_elastic_fleet_takes_failures_idle_removals_and_late_events() {
    let (_, mut engine, mut effects, t0) = elastic_engine();
    let minute = 60_000_000;
    let map = deadline_decisions(&effects)[0].plan.clone().unwrap();
    assert_eq!(map.vms.len(), 2, "{map:?}");
    effects.clear();
    for (id, vm) in [(11, &map.vms[0]), (12, &map.vms[1])] {
        engine
            .apply(AT, &vm_of_type(id, t0, &vm.vm_type), &mut effects)
            .unwrap();
    }
    let (first, second) = (
        map.vms[0].tasks[0].task_index,
        map.vms[1].tasks[0].task_index,
    );
    engine
        .apply(
            AT,
            &task_at(2, first, t0 + minute, "schedule", 11),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(
            AT,
            &task_at(2, second, t0 + minute, "schedule", 12),
            &mut effects,
        )
        .unwrap();
    // The task on 12 fails: it waits again, and 12 is idle.
    engine
        .apply(
            AT,
            &task_at(2, second, t0 + 5 * minute, "fail", 12),
            &mut effects,
        )
        .unwrap();
    assert!(deadline_decisions(&effects).is_empty());
    // 12 leaves while idle, and 11 hibernates: the fleet buys VMs for the
    // three tasks nothing runs; its record counts 12 out.
    let gone = format!(
        r#"{{"v":1,"type":"machine","time_us":{},"machine_id":12,"kind":"remove"}}"#,
        t0 + 6 * minute
    );
    engine.apply(AT, &event(&gone), &mut effects).unwrap();
    // A machine of a type the fleet has no VM of takes a task: the fleet
    // counts it as one of its VMs.
    let third = (0..4).find(|&i| i != first && i != second).unwrap();
    let t = t0 + 6 * minute + 30_000_000;
    engine
        .apply(AT, &vm_of_type(14, t, "c4.large"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_at(2, third, t, "schedule", 14), &mut effects)
        .unwrap();
    let hibernate_11 = format!(
        r#"{{"v":1,"type":"machine","time_us":{},"machine_id":11,"kind":"hibernate"}}"#,
        t0 + 7 * minute
    );
    engine
        .apply(AT, &event(&hibernate_11), &mut effects)
        .unwrap();
    let grows: Vec<&DeadlineDecision> = deadline_decisions(&effects)
        .into_iter()
        .filter(|d| d.action == DeadlineAction::Grow)
        .collect();
    let grow = grows.last().expect("a grow once nothing runs");
    assert_eq!(grow.fleet.as_ref().unwrap().queued, 3, "{grow:?}");
    let bought = grow.fleet.as_ref().unwrap().buy[0].vm_type.clone();
    let fleet = engine.deadline(2).unwrap().fleet.clone().unwrap();
    assert!(
        fleet.vms[0].hibernated && fleet.vms[1].hibernated,
        "{fleet:?}"
    );
    let adopted = &fleet.vms[2];
    assert_eq!(
        (adopted.machine_id, adopted.vm_type.as_str(), adopted.market),
        (Some(14), "c4.large", crate::deadlines::Market::Spot),
        "{fleet:?}"
    );
    let mut versions: Vec<u32> = deadline_decisions(&effects)
        .iter()
        .map(|d| d.version)
        .collect();
    effects.clear();
    // Machine 13 of the type bought hibernates; a task starts on it
    // before its resume arrives, and the resume comes with an earlier
    // time than the start.
    let at = |m: u64| t0 + m * minute;
    engine
        .apply(AT, &vm_of_type(13, at(9), &bought), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_at(2, second, at(9), "schedule", 13), &mut effects)
        .unwrap();
    let machine = |t: u64, kind: &str| {
        event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":13,"kind":"{kind}"}}"#
        ))
    };
    engine
        .apply(AT, &machine(at(20), "hibernate"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_at(2, third, at(30), "schedule", 13), &mut effects)
        .unwrap();
    engine
        .apply(AT, &machine(at(25), "resume"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &task_at(2, second, at(31), "finish", 13), &mut effects)
        .unwrap();
    versions.extend(deadline_decisions(&effects).iter().map(|d| d.version));
    assert_eq!(versions.first(), Some(&2), "{versions:?}");
    assert!(
        versions.windows(2).all(|w| w[1] == w[0] + 1),
        "{versions:?}"
    );
    let fleet = engine.deadline(2).unwrap().fleet.clone().unwrap();
    assert!(fleet.queued <= 4, "{fleet:?}");
}

/// With a spot price series in the catalogue, a plan is drawn at the
/// prices in effect when it is made: once spot is dearer than on demand,
/// the map buys on demand.
#[test]
fn a_plan_is_drawn_at_the_spot_prices_of_its_time() {
    use crate::deadlines::{Market, SpotPrice};
    let mut config = deadline_config();
    let series = config
        .deadlines
        .catalogue
        .types
        .iter()
        .map(|t| {
            let change = |from_us, usd_h| SpotPrice { from_us, usd_h };
            let changes = vec![
                change(0, t.spot_usd_h.unwrap()),
                change(11 * HOUR, 10.0 * t.on_demand_usd_h),
            ];
            (t.name.clone(), changes)
        })
        .collect();
    config.deadlines.catalogue.set_spot_prices(&series);
    config.deadlines.validate().unwrap();
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    effects.clear();
    for (job, t) in [(2, 10 * HOUR + 1), (3, 12 * HOUR)] {
        engine
            .apply(AT, &with_deadline(job, t, 4, t + 100 * HOUR), &mut effects)
            .unwrap();
    }
    let markets: Vec<BTreeSet<Market>> = deadline_decisions(&effects)
        .iter()
        .map(|d| {
            d.plan
                .as_ref()
                .unwrap()
                .vms
                .iter()
                .map(|v| v.market)
                .collect()
        })
        .collect();
    assert_eq!(
        markets,
        [
            BTreeSet::from([Market::Spot]),
            BTreeSet::from([Market::OnDemand])
        ]
    );
}

/// Hibernations as the `spot-hibernation` adapter reads them from a
/// spot trace drive the same decisions: the VM its market's capacity
/// left waits, and resumes when the capacity comes back.
#[test]
fn a_spot_trace_read_for_hibernation_drives_wait_and_resume() {
    let dir = tempfile::tempdir().unwrap();
    // Hourly ticks from 0 (an undated directory): capacity from hour 10,
    // none at hour 12, back at hour 13, until hour 20.
    let mut capacity = vec![0; 10];
    capacity.extend([1, 1, 0]);
    capacity.extend([1; 7]);
    std::fs::write(
        dir.path().join("us-east-1a_c4.large.json"),
        serde_json::json!({"metadata": {"gap_seconds": 3600}, "data": capacity}).to_string(),
    )
    .unwrap();
    let vm_events: Vec<Event> =
        jobcast_ingest::open(jobcast_ingest::Format::SpotHibernation, dir.path())
            .unwrap()
            .map(Result::unwrap)
            .collect();
    let kinds: Vec<(u64, &str)> = vm_events
        .iter()
        .map(|e| match e {
            Event::Machine(m) => (m.time_us / HOUR, m.kind.as_str()),
            e => panic!("{e:?}"),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            (10, "add"),
            (12, "hibernate"),
            (13, "resume"),
            (20, "remove")
        ]
    );
    let Event::Machine(added) = &vm_events[0] else {
        unreachable!()
    };
    let vm = added.machine_id;

    let mut engine = Engine::new(&deadline_config()).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    let t0 = 11 * HOUR;
    let mut job = vec![with_deadline(2, t0, 2, t0 + 100 * HOUR)];
    job.extend((0..2).map(|i| {
        event(&format!(
            r#"{{"v":1,"type":"task","time_us":{t},"job_id":2,"task_index":{i},"kind":"schedule","machine_id":{vm}}}"#,
            t = t0 + 60_000_000
        ))
    }));
    let mut all: Vec<Event> = vm_events[..3].iter().cloned().chain(job).collect();
    all.sort_by_key(Event::time_us);
    effects.clear();
    for e in &all {
        engine.apply(AT, e, &mut effects).unwrap();
    }
    let actions: Vec<DeadlineAction> = deadline_decisions(&effects)
        .iter()
        .map(|d| d.action)
        .collect();
    assert_eq!(
        actions,
        [
            DeadlineAction::Plan,
            DeadlineAction::Wait,
            DeadlineAction::Resume
        ]
    );
    let record = engine.deadline(2).unwrap();
    assert_eq!(record.recoveries[0].hibernated_us, 12 * HOUR);
    assert_eq!(record.recoveries[0].state, RecoveryState::Resumed);
}

/// Jobs no map can be drawn for are told why; a VM removed while
/// hibernated moves its group at once; without `engine.deadlines` nothing
/// is decided.
#[test]
fn unplannable_jobs_say_why_and_a_removed_vm_migrates_at_once() {
    let (mut engine, mut effects) = deadline_engine();
    let t0 = 11 * HOUR;
    engine
        .apply(
            AT,
            &with_deadline(3, t0, 5_000, t0 + 100 * HOUR),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(AT, &with_deadline(4, t0, 2, t0 - 1), &mut effects)
        .unwrap();
    let refused: Vec<(u64, DeadlineAction, String)> = deadline_decisions(&effects)
        .iter()
        .map(|d| (d.job_id, d.action, d.reason.clone().unwrap()))
        .collect();
    assert_eq!(
        refused,
        [
            (
                3,
                DeadlineAction::Unplanned,
                "5000 tasks, more than engine.deadlines.max_tasks (2000)".to_owned()
            ),
            (
                4,
                DeadlineAction::Unplanned,
                "the deadline has passed".to_owned()
            )
        ]
    );
    // Their tasks are not followed.
    engine
        .apply(AT, &task(3, 0, t0 + 1, "schedule"), &mut effects)
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &vm_event(t0 + 2, "hibernate"), &mut effects)
        .unwrap();
    assert!(deadline_decisions(&effects).is_empty());

    // A planned job's VM hibernates, then is removed before start_bkp.
    engine
        .apply(
            AT,
            &with_deadline(5, t0 + 3, 2, t0 + 200 * HOUR),
            &mut effects,
        )
        .unwrap();
    engine
        .apply(AT, &vm_event(t0 + 4, "resume"), &mut effects)
        .unwrap();
    for i in 0..2 {
        engine
            .apply(AT, &task(5, i, t0 + 5, "schedule"), &mut effects)
            .unwrap();
    }
    engine
        .apply(AT, &task(5, 1, t0 + 6, "finish"), &mut effects)
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &vm_event(t0 + 7, "hibernate"), &mut effects)
        .unwrap();
    let wait = deadline_decisions(&effects)[0].clone();
    assert_eq!(wait.action, DeadlineAction::Wait);
    assert_eq!(
        wait.recovery.unwrap().tasks,
        [0],
        "the finished task stays out"
    );
    effects.clear();
    engine
        .apply(AT, &vm_event(t0 + 8, "remove"), &mut effects)
        .unwrap();
    let moved = deadline_decisions(&effects);
    assert_eq!(moved.len(), 1);
    assert_eq!(
        (moved[0].action, moved[0].time_us),
        (DeadlineAction::Migrate, t0 + 8)
    );

    // Off: nothing.
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    engine
        .apply(AT, &with_deadline(2, t0, 4, t0 + 100 * HOUR), &mut effects)
        .unwrap();
    assert!(deadline_decisions(&effects).is_empty());
    assert!(engine.deadline(2).is_none());
}

/// Jobs and machines that name their cluster are counted per cluster, the
/// same after a restore; one cluster past `engine.max_clusters` is
/// refused; a cluster that holds nothing stays listed until the expiry
/// sweep finds it idle past the silent-job window.
#[test]
fn clusters_count_their_jobs_and_machines_and_are_bounded() {
    let config = EngineConfig {
        max_clusters: 2,
        expiry: ExpirySettings {
            live_job_idle_hours: 1,
            machine_silent_hours: 1000,
        },
        max_future_skew_secs: 0,
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let machine = |id: u64, t: u64, kind: &str, cluster: &str| {
        event(&format!(
            r#"{{"v":1,"type":"machine","time_us":{t},"machine_id":{id},"kind":"{kind}","cpus":8{cluster}}}"#,
            cluster = if cluster.is_empty() {
                String::new()
            } else {
                format!(r#","cluster":"{cluster}""#)
            }
        ))
    };
    let job = |id: u64, t: u64, cluster: &str| {
        event(&format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"num_tasks":1,"cluster":"{cluster}"}}"#
        ))
    };
    for (i, cluster) in ["east", "east", "west"].iter().enumerate() {
        engine
            .apply(AT, &machine(i as u64 + 1, 1, "add", cluster), &mut effects)
            .unwrap();
    }
    engine.apply(AT, &job(1, 2, "east"), &mut effects).unwrap();
    engine.apply(AT, &job(2, 2, "west"), &mut effects).unwrap();
    engine.apply(AT, &job(3, 2, "west"), &mut effects).unwrap();
    // A machine event that names no cluster keeps the machine's.
    engine
        .apply(AT, &machine(3, 3, "update", ""), &mut effects)
        .unwrap();
    let held = |engine: &Engine| -> Vec<(String, u32, f64, u64)> {
        engine
            .clusters()
            .into_iter()
            .map(|c| (c.cluster, c.machines_up, c.cpus, c.live_jobs))
            .collect()
    };
    assert_eq!(
        held(&engine),
        [
            ("east".to_owned(), 2, 16.0, 1),
            ("west".to_owned(), 1, 8.0, 2)
        ]
    );
    assert_eq!(engine.job(2).unwrap().cluster, "west");
    assert_eq!(engine.machine(3).unwrap().cluster, "west");

    // A third cluster is refused, by job or machine, and changes nothing.
    let refused = engine
        .apply(AT, &job(4, 4, "north"), &mut effects)
        .unwrap_err();
    assert_eq!(refused.reason, "over_budget");
    assert!(refused.message.contains("`north`"), "{}", refused.message);
    assert_eq!(
        engine
            .apply(AT, &machine(9, 4, "add", "north"), &mut effects)
            .unwrap_err()
            .reason,
        "over_budget"
    );
    assert!(engine.job(4).is_none() && engine.machine(9).is_none());

    // East empties (its job ends, its machines leave) and stays listed,
    // idle: north is still refused...
    engine
        .apply(AT, &end(1, 5, "finish"), &mut effects)
        .unwrap();
    for id in [1, 2] {
        engine
            .apply(AT, &machine(id, 5, "remove", ""), &mut effects)
            .unwrap();
    }
    assert_eq!(
        held(&engine),
        [
            ("east".to_owned(), 0, 0.0, 0),
            ("west".to_owned(), 1, 8.0, 2)
        ]
    );
    assert!(engine.apply(AT, &job(4, 6, "north"), &mut effects).is_err());
    // ... until the sweep, past the hour a silent job is kept, forgets it
    // (and west's silent jobs).
    let later = 5 + 2 * HOUR;
    engine
        .apply(AT, &machine(3, later, "update", ""), &mut effects)
        .unwrap();
    engine
        .apply(AT, &job(4, later + 1, "north"), &mut effects)
        .unwrap();
    assert_eq!(
        held(&engine),
        [
            ("north".to_owned(), 0, 0.0, 1),
            ("west".to_owned(), 1, 8.0, 0)
        ]
    );
    engine.release_ended();
    let restored = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    assert_eq!(held(&restored), held(&engine));
}

/// An engine of `config` that has learnt a 10 h job, with two clusters,
/// `east` and `west`, of one 8-CPU machine each from `t0`.
fn east_and_west(config: &EngineConfig, t0: u64) -> (Engine, Effects) {
    let mut engine = Engine::new(config).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    for (id, cluster) in [(1, "east"), (2, "west")] {
        engine
            .apply(
                AT,
                &event(&format!(
                    r#"{{"v":1,"type":"machine","time_us":{t0},"machine_id":{id},"kind":"add","cpus":8,"cluster":"{cluster}"}}"#
                )),
                &mut effects,
            )
            .unwrap();
    }
    (engine, effects)
}

/// With two clusters, a decision carries the job's completion on each:
/// its own cluster's as its ETA, the other's as if queued there now; the
/// cluster that would finish it first is recommended.
#[test]
fn a_decision_carries_each_clusters_completion_and_recommends_the_first() {
    let t0 = 11 * HOUR;
    let (mut engine, mut effects) = east_and_west(&EngineConfig::default(), t0);
    let job = |id: u64, t: u64, cluster: &str| {
        event(&format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"user":"u","job_name":"n","logical_name":"l","cpu_request":2,"num_tasks":4,"cluster":"{cluster}"}}"#
        ))
    };
    // East is busy: four jobs of 4 two-CPU tasks, every task running.
    for id in 20..24 {
        engine
            .apply(AT, &job(id, t0 + 1, "east"), &mut effects)
            .unwrap();
        for i in 0..4 {
            engine
                .apply(AT, &task(id, i, t0 + 2, "schedule"), &mut effects)
                .unwrap();
        }
    }
    effects.clear();
    engine
        .apply(AT, &job(30, t0 + 3, "east"), &mut effects)
        .unwrap();
    let d = decisions(&effects)[0].clone();
    let eta = d.eta.expect("an ETA on its own cluster");
    let by_name: BTreeMap<&str, Completion> = d
        .clusters
        .iter()
        .map(|c| (c.cluster.as_str(), c.eta))
        .collect();
    assert_eq!(by_name.len(), 2, "{d:?}");
    assert_eq!(by_name["east"], eta, "its own cluster's is its ETA");
    assert!(
        by_name["west"].p50_us < eta.p50_us,
        "the idle cluster finishes it first: {by_name:?}"
    );
    assert_eq!(d.recommended_cluster.as_deref(), Some("west"));

    // One cluster: nothing of the kind.
    let mut engine = Engine::new(&EngineConfig::default()).unwrap();
    let mut effects = Effects::default();
    learnt_one_job(&mut engine, 10, &mut effects);
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t0},"machine_id":1,"kind":"add","cpus":8}}"#
            )),
            &mut effects,
        )
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &submit(30, t0 + 3, 4), &mut effects)
        .unwrap();
    let d = decisions(&effects)[0].clone();
    assert!(d.eta.is_some() && d.clusters.is_empty() && d.recommended_cluster.is_none());
}

/// The cluster recommended for a short job on `east`, whose long jobs
/// wait behind one that fills it, against `west`, as full, with one short
/// job waiting, when the ETAs take the clusters to start their jobs in
/// `order`.
fn recommended_beside_a_long_queue(order: EtaOrder) -> Option<String> {
    let config = EngineConfig {
        eta: EtaSettings {
            order,
            ..EtaSettings::default()
        },
        ..EngineConfig::default()
    };
    let t0 = 11 * HOUR;
    let (mut engine, mut effects) = east_and_west(&config, t0);
    let job = |id: u64, t: u64, tasks: u32, cluster: &str| {
        event(&format!(
            r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{id},"user":"u","job_name":"n","logical_name":"l","cpu_request":1,"num_tasks":{tasks},"cluster":"{cluster}"}}"#
        ))
    };
    // Each cluster runs a job of 8 tasks on its 8 CPUs.
    for (id, cluster) in [(20, "east"), (21, "west")] {
        engine
            .apply(AT, &job(id, t0 + 1, 8, cluster), &mut effects)
            .unwrap();
        for i in 0..8 {
            engine
                .apply(AT, &task(id, i, t0 + 2, "schedule"), &mut effects)
                .unwrap();
        }
    }
    // East has three long jobs waiting, west one short job.
    for id in 22..25 {
        engine
            .apply(AT, &job(id, t0 + 2, 16, "east"), &mut effects)
            .unwrap();
    }
    engine
        .apply(AT, &job(25, t0 + 2, 1, "west"), &mut effects)
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &job(30, t0 + 3, 1, "east"), &mut effects)
        .unwrap();
    decisions(&effects)[0].recommended_cluster.clone()
}

/// A short job goes ahead of a cluster's long queue only where the
/// cluster starts its jobs in jobcast's queues; where it starts them in
/// submission order the job would wait behind that queue, and the
/// cluster with the shorter one is recommended.
#[test]
fn the_cluster_recommended_follows_the_order_the_clusters_start_jobs_in() {
    assert_eq!(
        recommended_beside_a_long_queue(EtaOrder::Queues).as_deref(),
        Some("east"),
        "in jobcast's queues the short job passes east's long ones"
    );
    assert_eq!(
        recommended_beside_a_long_queue(EtaOrder::Submission).as_deref(),
        Some("west"),
        "in submission order it waits behind them"
    );
}

/// A deadline job under SLearn alone (no 3Sigma in shadow) is planned
/// once its pilots give an estimate; what already runs is followed from
/// then on, so a hibernation moves the tasks still running, not the
/// pilots that finished.
#[test]
fn a_deadline_job_planned_late_follows_the_tasks_already_running() {
    let config = EngineConfig {
        shadow: Vec::new(),
        ..deadline_config()
    };
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let t0 = 11 * HOUR;
    engine
        .apply(
            AT,
            &event(&format!(
                r#"{{"v":1,"type":"machine","time_us":{t0},"machine_id":1,"kind":"add","vm_type":"c4.large","zone":"us-east-1a","preemptible":true,"launch_time_us":{t0}}}"#
            )),
            &mut effects,
        )
        .unwrap();
    effects.clear();
    engine
        .apply(AT, &with_deadline(7, t0, 8, t0 + 100 * HOUR), &mut effects)
        .unwrap();
    assert!(
        deadline_decisions(&effects).is_empty(),
        "no estimate with quantiles yet"
    );
    let pilots = decisions(&effects)[0].pilots.clone();
    assert!(!pilots.is_empty() && pilots.len() < 8);
    for i in 0..8 {
        engine
            .apply(AT, &task(7, i, t0 + 1, "schedule"), &mut effects)
            .unwrap();
    }
    effects.clear();
    for &p in &pilots {
        engine
            .apply(AT, &task(7, p, t0 + HOUR, "finish"), &mut effects)
            .unwrap();
    }
    let planned = deadline_decisions(&effects);
    assert_eq!(planned.len(), 1, "{:?}", effects.outputs);
    assert_eq!(planned[0].action, DeadlineAction::Plan);
    assert_eq!(planned[0].plan.as_ref().unwrap().policy, PolicyKind::SLearn);
    effects.clear();
    engine
        .apply(AT, &vm_event(t0 + 2 * HOUR, "hibernate"), &mut effects)
        .unwrap();
    let wait = deadline_decisions(&effects);
    assert_eq!(wait.len(), 1, "{:?}", effects.outputs);
    let running: Vec<u32> = (0..8).filter(|i| !pilots.contains(i)).collect();
    let group = &wait[0].recovery.as_ref().unwrap().tasks;
    assert!(
        running.iter().all(|t| group.contains(t)) && pilots.iter().all(|p| !group.contains(p)),
        "{group:?}, pilots {pilots:?}"
    );
}

/// An HPC job of `procs` processors asking for `limit_s`, of user "u" and
/// application "cfd".
fn hpc_submit(job: u64, t: u64, procs: u32, limit_s: u64) -> Event {
    event(&format!(
        r#"{{"v":1,"type":"job_submitted","time_us":{t},"job_id":{job},"user":"u","job_name":"n","logical_name":"cfd","scheduling_class":0,"priority":0,"cpu_request":{procs},"mem_request":0.1,"num_tasks":1,"time_limit_us":{}}}"#,
        limit_s * 1_000_000
    ))
}

fn starts_config(backfill: Option<BackfillKind>, cpus: Option<u32>) -> EngineConfig {
    EngineConfig {
        policy: PolicyKind::Hpc,
        shadow: Vec::new(),
        starts: StartSettings {
            backfill,
            cpus,
            ..StartSettings::default()
        },
        ..EngineConfig::default()
    }
}

/// Where the median and the P90 of a running job's sampled ends fall: it
/// started at `start_us` with `quantiles` and `limit_us`, and is seen at
/// `now_us`. Stratified, the `k`-th smallest of the samples lies in the
/// `k`-th slice of its distribution beyond its age.
fn sampled_end_slices(
    fit: &crate::hpc::starts::Fit,
    quantiles: Quantiles,
    limit_us: u64,
    start_us: u64,
    now_us: u64,
) -> [(u64, u64); 2] {
    use crate::hpc::starts::{SAMPLES, Spread};
    let spread = Spread::new(quantiles, Some(limit_us));
    let table = fit.table();
    let from = table.share(spread.cdf((now_us - start_us) as f64));
    let n = SAMPLES as f64;
    let end = |slice: f64| {
        let level = table.level(from + (1.0 - from) * slice / n);
        start_us + spread.quantile(level).round() as u64
    };
    // An answer lies between two samples, each in its slice.
    [0.5, 0.9].map(|share| {
        let k = (share * n - 0.5).floor();
        (end(k), end(k + 2.0))
    })
}

/// A site of 4 processors, conservative backfilling. The user's first run
/// of the application takes 100 s; the second starts at 200 s; a third,
/// submitted at 210 s, should start when the second ends: its median and
/// P90 are those of the second's end, drawn from its predicted quantiles
/// given that it has run 10 s, through where the first's runtime fell in
/// its own ([`crate::hpc::starts::Fit`]). The second, submitted to an idle machine,
/// starts at once; a job wider than the machine gets no start; a running
/// job's decisions carry none.
#[test]
fn a_pending_jobs_decision_carries_its_start_played_forward_on_the_predictions() {
    const S: u64 = 1_000_000;
    let config = starts_config(Some(BackfillKind::Conservative), Some(4));
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let apply = |engine: &mut Engine, e: Event, effects: &mut Effects| {
        engine.apply(AT, &e, effects).unwrap()
    };
    apply(&mut engine, hpc_submit(1, S, 4, 1000), &mut effects);
    apply(&mut engine, task(1, 0, S + 1, "schedule"), &mut effects);
    apply(&mut engine, task(1, 0, 101 * S + 1, "finish"), &mut effects);
    apply(&mut engine, end(1, 101 * S + 2, "finish"), &mut effects);
    effects.clear();
    apply(&mut engine, hpc_submit(2, 200 * S, 4, 1000), &mut effects);
    let second = decisions(&effects)[0].clone();
    let start = second.start.expect("a start estimate");
    assert_eq!(
        (start.at_us, start.p50_us, start.p90_us),
        (200 * S, 200 * S, 200 * S)
    );
    apply(&mut engine, task(2, 0, 200 * S, "schedule"), &mut effects);
    effects.clear();
    apply(&mut engine, hpc_submit(3, 210 * S, 4, 1000), &mut effects);
    let d = decisions(&effects)[0].clone();
    assert_eq!(d.estimate.unwrap().mean_task_runtime_us, 100e6);
    let start = d.start.expect("a start estimate");
    assert_eq!(start.at_us, 210 * S);
    let quantiles = second
        .estimate
        .unwrap()
        .quantiles
        .unwrap()
        .mean_task_runtime_us;
    let [median, p90] =
        sampled_end_slices(engine.starts.fit(), quantiles, 1000 * S, 200 * S, 210 * S);
    assert_ne!(engine.starts.fit(), &crate::hpc::starts::Fit::default());
    assert!(
        (median.0..=median.1).contains(&start.p50_us) && (p90.0..=p90.1).contains(&start.p90_us),
        "{start:?}: median in {median:?}, P90 in {p90:?}, of {quantiles:?}"
    );
    effects.clear();
    apply(&mut engine, hpc_submit(4, 220 * S, 8, 1000), &mut effects);
    assert_eq!(decisions(&effects)[0].start, None);
    // Without `engine.starts`, no decision carries one.
    let mut off = Engine::new(&starts_config(None, None)).unwrap();
    let mut effects = Effects::default();
    off.apply(AT, &hpc_submit(1, S, 4, 1000), &mut effects)
        .unwrap();
    assert_eq!(decisions(&effects)[0].start, None);
}

/// The site above: job 3's first answer keeps its samples, through a
/// snapshot, until it starts; where its start fell among them is learnt,
/// and the next answer is read there. Job 2, which started on arrival
/// (its samples all agree), teaches nothing, nor does a job started on
/// an over-full cluster.
#[test]
fn a_start_is_learnt_among_the_samples_of_its_first_answer() {
    use crate::hpc::starts::Fit;
    const S: u64 = 1_000_000;
    let config = starts_config(Some(BackfillKind::Conservative), Some(4));
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    for e in [
        hpc_submit(1, S, 4, 1000),
        task(1, 0, S + 1, "schedule"),
        task(1, 0, 101 * S + 1, "finish"),
        end(1, 101 * S + 2, "finish"),
        hpc_submit(2, 200 * S, 4, 1000),
        task(2, 0, 200 * S, "schedule"),
        hpc_submit(3, 210 * S, 4, 1000),
    ] {
        engine.apply(AT, &e, &mut effects).unwrap();
    }
    assert_eq!(engine.starts.first(2), None);
    assert_eq!(engine.starts.lean(), &Fit::default());
    let samples = *engine.starts.first(3).expect("job 3's samples");
    let answered = decisions(&effects).last().unwrap().start.unwrap();
    assert_eq!(
        answered.p50_us,
        samples.answer(&Fit::default().table()).unwrap().p50_us
    );
    // Later answers keep the first samples.
    effects.clear();
    engine
        .apply(AT, &hpc_submit(4, 220 * S, 4, 1000), &mut effects)
        .unwrap();
    assert_eq!(engine.starts.first(3), Some(&samples));
    engine.release_ended();
    let mut engine = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    assert_eq!(engine.starts.first(3), Some(&samples));
    // Job 2 ends late, past every sample: job 3 starts at its late edge.
    for e in [
        task(2, 0, 1_500 * S, "finish"),
        end(2, 1_500 * S, "finish"),
        task(3, 0, 1_500 * S, "schedule"),
    ] {
        engine.apply(AT, &e, &mut effects).unwrap();
    }
    let level = samples.level_of(1_500 * S).expect("samples that differ");
    assert!(level > 0.95, "{level}: {samples:?}");
    let mut learnt = Fit::default();
    learnt.learn_level(level);
    assert_eq!(engine.starts.lean(), &learnt);
    assert_eq!(engine.starts.first(3), None);
    // Job 5 waits behind jobs 3 and 4, and is answered at the lean.
    effects.clear();
    engine
        .apply(AT, &hpc_submit(5, 1_510 * S, 4, 1000), &mut effects)
        .unwrap();
    let job5 = *engine.starts.first(5).expect("job 5's samples");
    let start = decisions(&effects)
        .into_iter()
        .find(|d| d.job_id == 5)
        .and_then(|d| d.start)
        .expect("job 5's start");
    let read = job5.answer(&learnt.table()).unwrap();
    assert_eq!((start.p50_us, start.p90_us), (read.p50_us, read.p90_us));
    assert_ne!(job5.answer(&Fit::default().table()), Some(read));
    // Job 5 starts beside job 3, the two holding 8 of the 4 processors:
    // a start the projection could not play teaches nothing.
    effects.clear();
    engine
        .apply(AT, &task(5, 0, 1_520 * S, "schedule"), &mut effects)
        .unwrap();
    assert_eq!(effects.starts_overfull, 1);
    assert_eq!(engine.starts.first(5), None);
    assert_eq!(engine.starts.lean(), &learnt);
}

/// The site above, its starts looked at again every minute of event
/// time, the user's earlier runs of the application all 100 s long (four
/// of them, ended before job 2): job 3 waits behind job 2 with no event of
/// its own. Before job 2 outlives its runs, its start has not moved and
/// nothing goes out again; once it has, job 3's decision goes out again,
/// same version, with the later start; and, through a snapshot, when job
/// 2 ends the start comes forward and goes out again. Once job 3 runs,
/// its start is not looked at again.
#[test]
fn a_waiting_jobs_start_goes_out_again_when_it_moves() {
    const S: u64 = 1_000_000;
    let mut config = starts_config(Some(BackfillKind::Conservative), Some(4));
    config.starts.refresh_ms = 60_000;
    let mut engine = Engine::new(&config).unwrap();
    let mut effects = Effects::default();
    let mut past = Vec::new();
    for (run, job) in (11..15).enumerate() {
        let t = run as u64 * 25 * S;
        past.extend([
            hpc_submit(job, t + 1, 1, 1000),
            task(job, 0, t + 2, "schedule"),
            task(job, 0, t + 100 * S + 2, "finish"),
            end(job, t + 100 * S + 3, "finish"),
        ]);
    }
    past.sort_by_key(|e| e.time_us());
    for e in past.into_iter().chain([
        hpc_submit(2, 200 * S, 4, 1000),
        task(2, 0, 200 * S, "schedule"),
    ]) {
        engine.apply(AT, &e, &mut effects).unwrap();
    }
    effects.clear();
    engine
        .apply(AT, &hpc_submit(3, 210 * S, 4, 1000), &mut effects)
        .unwrap();
    let first = decisions(&effects)[0].clone();
    assert_eq!(first.start.unwrap().p50_us, 300 * S);
    // Other jobs' events: a job too wide to start, at 280 s (due, and
    // not moved) and at 350 s (job 2 has outlived its median).
    let job3 = |effects: &Effects| -> Vec<Decision> {
        decisions(effects)
            .into_iter()
            .filter(|d| d.job_id == 3)
            .cloned()
            .collect()
    };
    effects.clear();
    engine
        .apply(AT, &hpc_submit(4, 280 * S, 8, 1000), &mut effects)
        .unwrap();
    assert!(job3(&effects).is_empty(), "{:?}", effects.outputs);
    assert_eq!(effects.starts_refreshed, 0);
    effects.clear();
    engine
        .apply(AT, &hpc_submit(5, 350 * S, 8, 1000), &mut effects)
        .unwrap();
    let again = job3(&effects);
    assert_eq!(again.len(), 1, "{:?}", effects.outputs);
    assert_eq!(effects.starts_refreshed, 1);
    assert_eq!(again[0].version, first.version);
    assert_eq!(again[0].estimate, first.estimate);
    let later = again[0].start.unwrap();
    assert_eq!(later.at_us, 350 * S);
    assert!(later.p50_us > 350 * S, "{later:?}");
    // Through a snapshot: job 2 ends at 420 s, and job 3 can start then.
    engine.release_ended();
    let learnt = engine.starts.fit().clone();
    let mut engine = Engine::restore(&config, &engine.snapshot().unwrap()).unwrap();
    assert_eq!(engine.starts.fit(), &learnt);
    assert_ne!(learnt, crate::hpc::starts::Fit::default());
    effects.clear();
    engine
        .apply(AT, &task(2, 0, 420 * S, "finish"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &end(2, 420 * S, "finish"), &mut effects)
        .unwrap();
    let sooner = job3(&effects);
    assert_eq!(sooner.len(), 1, "{:?}", effects.outputs);
    assert_eq!(sooner[0].version, first.version);
    assert_eq!(sooner[0].start.unwrap().p50_us, 420 * S);
    // Its own start: no start any more, and not looked at again.
    effects.clear();
    engine
        .apply(AT, &task(3, 0, 421 * S, "schedule"), &mut effects)
        .unwrap();
    engine
        .apply(AT, &hpc_submit(6, 600 * S, 8, 1000), &mut effects)
        .unwrap();
    assert!(
        job3(&effects).iter().all(|d| d.start.is_none()),
        "{:?}",
        effects.outputs
    );
    assert_eq!(effects.starts_refreshed, 0);
}

/// What the site plans on decides a backfill. A site of 4 processors,
/// conservative; the user's 2-processor runs took 100 s, the 1-processor
/// ones 20 s, all asking for 1,000 s. Job A (2 processors) runs from
/// 200 s; B (4) waits for it; C (1 processor) arrives at 220 s. Planned on
/// the estimates, A ends at 300 s, B is reserved from then, and C, done
/// by 240 s, backfills now. Planned on the limits, A ends at 1,200 s and
/// C would run into B's reservation, so it waits behind B.
#[test]
fn a_start_follows_what_the_site_plans_on() {
    const S: u64 = 1_000_000;
    let start_of_c = |plans_on: PlansOn| {
        let mut config = starts_config(Some(BackfillKind::Conservative), Some(4));
        config.starts.plans_on = plans_on;
        let mut engine = Engine::new(&config).unwrap();
        let mut effects = Effects::default();
        let mut past = Vec::new();
        for (run, job) in (11..19).enumerate() {
            let t = run as u64 * 20 * S;
            let (procs, took) = if job < 15 { (2, 100) } else { (1, 20) };
            past.extend([
                hpc_submit(job, t + 1, procs, 1000),
                task(job, 0, t + 2, "schedule"),
                task(job, 0, t + took * S + 2, "finish"),
                end(job, t + took * S + 3, "finish"),
            ]);
        }
        past.sort_by_key(|e| e.time_us());
        for e in past.into_iter().chain([
            hpc_submit(1, 200 * S, 2, 1000),
            task(1, 0, 200 * S, "schedule"),
            hpc_submit(2, 210 * S, 4, 1000),
        ]) {
            engine.apply(AT, &e, &mut effects).unwrap();
        }
        effects.clear();
        engine
            .apply(AT, &hpc_submit(3, 220 * S, 1, 1000), &mut effects)
            .unwrap();
        decisions(&effects)[0].start.expect("a start estimate")
    };
    let on_estimates = start_of_c(PlansOn::Estimates);
    assert_eq!(on_estimates.p50_us, 220 * S, "{on_estimates:?}");
    let on_limits = start_of_c(PlansOn::Limits);
    assert!(on_limits.p50_us > 260 * S, "{on_limits:?}");
}

#[test]
fn start_settings_without_a_backfilling_or_threads_are_refused_by_name() {
    let err = Engine::new(&starts_config(None, Some(4)))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("starts.backfill"), "{err}");
    let err = Engine::new(&starts_config(Some(BackfillKind::Easy), Some(0)))
        .err()
        .expect("refused");
    assert!(err.to_string().contains("starts.cpus"), "{err}");
    let mut no_threads = starts_config(Some(BackfillKind::Easy), Some(4));
    no_threads.starts.threads = 0;
    let err = Engine::new(&no_threads).err().expect("refused");
    assert!(err.to_string().contains("starts.threads"), "{err}");
}
