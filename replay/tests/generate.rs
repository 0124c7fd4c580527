//! End-to-end properties of the synthetic workload generator.

use std::collections::{BTreeMap, HashMap};

use jobcast_ingest::event::{EndReason, Event, JobSubmitted, MachineKind, Stage, TaskKind};
use jobcast_ingest::{decode, encode};
use jobcast_predictor::preemption::Bathtub;
use jobcast_replay::{DurationDist, WorkloadConfig, generate};

const HOUR_US: f64 = 3600e6;

fn events(config: &WorkloadConfig) -> Vec<Event> {
    generate(config).unwrap().collect()
}

fn bytes(config: &WorkloadConfig) -> Vec<u8> {
    let mut out = Vec::new();
    for event in generate(config).unwrap() {
        encode(&event, &mut out);
        out.push(b'\n');
    }
    out
}

/// A small but complete workload: DAGs, thin jobs, VMs with user stops.
fn mixed() -> WorkloadConfig {
    WorkloadConfig {
        jobs: Some(2000),
        slots: 200,
        dag_fraction: 0.3,
        max_width: 300,
        vms: 200,
        vm_stop_mean_hours: Some(12.0),
        ..WorkloadConfig::default()
    }
}

/// One task's stage and the times of its events of each kind.
#[derive(Default)]
struct TaskTrace {
    stage: Option<u32>,
    submit: Vec<u64>,
    schedule: Vec<u64>,
    finish: Vec<u64>,
    /// Stream positions of the (last) schedule and finish events.
    schedule_at: usize,
    finish_at: usize,
}

/// What one job looked like in the stream.
#[derive(Default)]
struct JobTrace {
    submitted: Option<JobSubmitted>,
    tasks: BTreeMap<u32, TaskTrace>,
    ended: Option<u64>,
    /// Stream position of the job's last event and of its `job_ended`.
    last_position: usize,
    ended_position: Option<usize>,
}

impl JobTrace {
    fn durations_secs(&self) -> Vec<f64> {
        self.tasks
            .values()
            .map(|t| (t.finish[0] - t.schedule[0]) as f64 / 1e6)
            .collect()
    }
}

fn jobs(events: &[Event]) -> BTreeMap<u64, JobTrace> {
    let mut jobs: BTreeMap<u64, JobTrace> = BTreeMap::new();
    for (position, event) in events.iter().enumerate() {
        let Some(job_id) = event.job_id() else {
            continue;
        };
        let job = jobs.entry(job_id).or_default();
        assert!(
            job.ended.is_none(),
            "job {job_id} has an event after job_ended: {event:?}"
        );
        job.last_position = position;
        match event {
            Event::JobSubmitted(s) => {
                assert!(
                    job.submitted.is_none() && job.tasks.is_empty(),
                    "job {job_id}: submit is not first"
                );
                job.submitted = Some(s.clone());
            }
            Event::Task(t) => {
                assert!(
                    job.submitted.is_some(),
                    "job {job_id}: task before job_submitted"
                );
                let entry = job.tasks.entry(t.task_index).or_insert_with(|| TaskTrace {
                    stage: t.stage,
                    ..TaskTrace::default()
                });
                assert_eq!(
                    entry.stage, t.stage,
                    "job {job_id} task {}: stage changed",
                    t.task_index
                );
                match t.kind {
                    TaskKind::Submit => entry.submit.push(t.time_us),
                    TaskKind::Schedule => {
                        entry.schedule.push(t.time_us);
                        entry.schedule_at = position;
                    }
                    TaskKind::Finish => {
                        entry.finish.push(t.time_us);
                        entry.finish_at = position;
                    }
                    other => panic!("unexpected task event {other:?}"),
                }
            }
            Event::JobEnded(e) => {
                job.ended = Some(e.time_us);
                job.ended_position = Some(position);
            }
            Event::Machine(_) => unreachable!(),
        }
    }
    jobs
}

#[test]
fn same_seed_gives_identical_bytes_and_other_seeds_differ() {
    let config = mixed();
    let first = bytes(&config);
    assert!(first.len() > 100_000);
    assert_eq!(first, bytes(&config));
    let other = bytes(&WorkloadConfig {
        seed: 1,
        ..config.clone()
    });
    assert_ne!(first, other);
    // Every line is a valid canonical event under the strict decoder.
    for line in first.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        decode(line).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(line)));
    }
}

#[test]
fn adding_vms_does_not_change_the_jobs() {
    let with_vms = events(&mixed());
    let without: Vec<Event> = events(&WorkloadConfig { vms: 0, ..mixed() });
    let jobs_only: Vec<&Event> = with_vms
        .iter()
        .filter(|e| !matches!(e, Event::Machine(_)))
        .collect();
    assert_eq!(jobs_only, without.iter().collect::<Vec<_>>());
}

#[test]
fn events_are_time_ordered_and_every_job_completes() {
    let events = events(&mixed());
    assert!(
        events.windows(2).all(|w| w[0].time_us() <= w[1].time_us()),
        "out of order"
    );
    let jobs = jobs(&events);
    assert_eq!(jobs.len(), 2000);
    assert_eq!(
        jobs.keys().copied().collect::<Vec<_>>(),
        (1..=2000).collect::<Vec<_>>()
    );
    for (job_id, job) in &jobs {
        let submitted = job.submitted.as_ref().expect("job_submitted");
        assert_eq!(job.tasks.len() as u32, submitted.num_tasks, "job {job_id}");
        assert_eq!(
            job.tasks.keys().copied().collect::<Vec<_>>(),
            (0..submitted.num_tasks).collect::<Vec<_>>()
        );
        let mut last_finish = 0;
        for (
            index,
            TaskTrace {
                stage,
                submit,
                schedule,
                finish,
                ..
            },
        ) in &job.tasks
        {
            assert!(
                submit.len() == 1 && schedule.len() == 1 && finish.len() == 1,
                "job {job_id} task {index}"
            );
            assert!(
                submitted.time_us <= submit[0]
                    && submit[0] <= schedule[0]
                    && schedule[0] < finish[0]
            );
            assert_eq!(stage.is_some(), submitted.stages.is_some());
            last_finish = last_finish.max(finish[0]);
        }
        assert_eq!(
            job.ended,
            Some(last_finish),
            "job {job_id}: job_ended at the last finish"
        );
        assert_eq!(
            job.ended_position,
            Some(job.last_position),
            "job {job_id}: job_ended is last"
        );
    }
}

#[test]
fn dag_stages_start_after_all_parent_tasks_finish() {
    let events = events(&mixed());
    let jobs = jobs(&events);
    let mut dags = 0;
    for (job_id, job) in &jobs {
        let submitted = job.submitted.as_ref().unwrap();
        let Some(stages) = &submitted.stages else {
            continue;
        };
        dags += 1;
        assert!((2..=5).contains(&stages.len()), "job {job_id}");
        let by_id: HashMap<u32, &Stage> = stages.iter().map(|s| (s.id, s)).collect();
        for stage in stages {
            assert!(
                stage.parents.iter().all(|&p| p < stage.id),
                "job {job_id}: cyclic"
            );
            assert_eq!(
                stage.parents.is_empty(),
                stage.id == 1,
                "job {job_id}: only stage 1 is a root"
            );
            let count = job
                .tasks
                .values()
                .filter(|t| t.stage == Some(stage.id))
                .count() as u32;
            assert_eq!(count, stage.num_tasks, "job {job_id} stage {}", stage.id);
            let parent_tasks: Vec<&TaskTrace> = job
                .tasks
                .values()
                .filter(|t| {
                    t.stage
                        .is_some_and(|s| by_id[&stage.id].parents.contains(&s))
                })
                .collect();
            let parents_done = parent_tasks
                .iter()
                .map(|t| t.finish[0])
                .max()
                .unwrap_or(submitted.time_us);
            let parents_done_at = parent_tasks.iter().map(|t| t.finish_at).max().unwrap_or(0);
            for task in job.tasks.values().filter(|t| t.stage == Some(stage.id)) {
                assert_eq!(
                    task.schedule[0], parents_done,
                    "job {job_id} stage {}: starts when parents end",
                    stage.id
                );
                // Same timestamp, but a consumer must also see it in this order.
                assert!(
                    task.schedule_at > parents_done_at,
                    "job {job_id} stage {}: scheduled before a parent's finish in the stream",
                    stage.id
                );
            }
        }
    }
    let fraction = f64::from(dags) / jobs.len() as f64;
    assert!((fraction - 0.3).abs() < 0.04, "DAG fraction {fraction}");
}

/// Job-wise CV of mean task durations within each family, corrected for the
/// sampling noise of each job's mean, and the pooled task-wise CV within jobs.
fn measured_cvs(events: &[Event], task_cv: f64) -> (f64, f64) {
    let jobs = jobs(events);
    let mut by_family: BTreeMap<&str, Vec<(f64, usize)>> = BTreeMap::new();
    let mut task_cv2 = Vec::new();
    for job in jobs.values() {
        let d = job.durations_secs();
        let n = d.len() as f64;
        let mean = d.iter().sum::<f64>() / n;
        let var = d.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
        task_cv2.push(var / (mean * mean));
        by_family
            .entry(job.submitted.as_ref().unwrap().logical_name.as_str())
            .or_default()
            .push((mean, d.len()));
    }
    let (mut squares, mut noise, mut dof, mut count) = (0.0, 0.0, 0.0, 0.0);
    for means in by_family.values() {
        let family_mean = means.iter().map(|m| m.0).sum::<f64>() / means.len() as f64;
        for &(mean, n) in means {
            let r = mean / family_mean;
            squares += (r - 1.0).powi(2);
            // Var(job's sample mean) adds task_cv²·μ_j²/n to the job-wise variance.
            noise += task_cv * task_cv * r * r / n as f64;
            count += 1.0;
        }
        dof += means.len() as f64 - 1.0;
    }
    let job_cv = (squares / dof - noise / count).sqrt();
    let task_cv = (task_cv2.iter().sum::<f64>() / task_cv2.len() as f64).sqrt();
    (job_cv, task_cv)
}

#[test]
fn job_wise_and_task_wise_cvs_match_the_configuration() {
    // CVs keep the Pareto shape above 4 (finite fourth moment) so that 3000
    // jobs estimate its variance well, and keep the normal's truncation small.
    for (dist, job_cv, task_cv) in [
        (DurationDist::Normal, 0.4, 0.2),
        (DurationDist::LogNormal, 0.5, 0.25),
        (DurationDist::Pareto, 0.3, 0.15),
    ] {
        let config = WorkloadConfig {
            seed: 3,
            jobs: Some(3000),
            families: 20,
            family_zipf: 0.0,
            thin_fraction: 0.0,
            dag_fraction: 0.0,
            min_width: 100,
            max_width: 150,
            job_cv,
            task_cv,
            dist,
            ..WorkloadConfig::default()
        };
        let (measured_job, measured_task) = measured_cvs(&events(&config), task_cv);
        eprintln!(
            "{dist:?}: job CV {measured_job:.4} (want {job_cv}), task CV {measured_task:.4} (want {task_cv})"
        );
        assert!(
            (measured_job / job_cv - 1.0).abs() < 0.15,
            "{dist:?}: job CV {measured_job} vs {job_cv}"
        );
        assert!(
            (measured_task / task_cv - 1.0).abs() < 0.15,
            "{dist:?}: task CV {measured_task} vs {task_cv}"
        );
    }
}

#[test]
fn zero_cvs_give_identical_tasks_and_jobs() {
    let config = WorkloadConfig {
        jobs: Some(300),
        families: 1,
        job_cv: 0.0,
        task_cv: 0.0,
        ..WorkloadConfig::default()
    };
    let jobs = jobs(&events(&config));
    let all: Vec<f64> = jobs.values().flat_map(|j| j.durations_secs()).collect();
    assert!(
        all.iter().all(|&d| (d - all[0]).abs() <= 1e-6),
        "durations differ"
    );
}

#[test]
fn drift_scales_family_means_over_time() {
    let config = WorkloadConfig {
        jobs: None,
        duration_hours: Some(96.0),
        slots: 100,
        families: 1,
        job_cv: 0.1,
        task_cv: 0.1,
        drift: 0.5,
        ..WorkloadConfig::default()
    };
    let jobs = jobs(&events(&config));
    // Least-squares slope of ln(job mean) against submit time in days.
    let points: Vec<(f64, f64)> = jobs
        .values()
        .map(|j| {
            let d = j.durations_secs();
            (
                j.submitted.as_ref().unwrap().time_us as f64 / (24.0 * HOUR_US),
                (d.iter().sum::<f64>() / d.len() as f64).ln(),
            )
        })
        .collect();
    let n = points.len() as f64;
    let (mx, my) = (
        points.iter().map(|p| p.0).sum::<f64>() / n,
        points.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
        / points.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
    assert!(
        (slope - 1.5f64.ln()).abs() < 0.05,
        "slope {slope} vs {}",
        1.5f64.ln()
    );
}

#[test]
fn thin_fraction_and_widths_are_respected() {
    let config = WorkloadConfig {
        jobs: Some(5000),
        thin_fraction: 0.3,
        min_width: 5,
        max_width: 400,
        ..WorkloadConfig::default()
    };
    let events = events(&config);
    let widths: Vec<u32> = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(s) => Some(s.num_tasks),
            _ => None,
        })
        .collect();
    let thin = widths.iter().filter(|&&w| w <= 2).count() as f64 / widths.len() as f64;
    assert!((thin - 0.3).abs() < 0.03, "thin fraction {thin}");
    assert!(widths.iter().all(|&w| w <= 2 || (5..=400).contains(&w)));
    assert!(widths.contains(&1) && widths.contains(&2));
    // Heavy tail: wide jobs span more than an order of magnitude.
    assert!(
        widths.iter().any(|&w| w >= 100),
        "no wide job reaches 100 tasks"
    );
}

#[test]
fn offered_load_matches_the_target() {
    // Busy task-time of the jobs arriving in [0, H), over H · slots.
    for (seed, load) in [(11, 0.9), (12, 0.5)] {
        let hours = 72.0;
        let slots = 500;
        let config = WorkloadConfig {
            seed,
            jobs: None,
            duration_hours: Some(hours),
            slots,
            load,
            ..WorkloadConfig::default()
        };
        let busy_secs: f64 = jobs(&events(&config))
            .values()
            .flat_map(|j| j.durations_secs())
            .sum();
        let measured = busy_secs / (hours * 3600.0 * f64::from(slots));
        eprintln!("seed {seed}: offered load {measured:.4} (want {load})");
        assert!(
            (measured / load - 1.0).abs() < 0.1,
            "offered load {measured} vs {load}"
        );
    }
}

/// Bursts: arrivals in 10-minute windows are far more dispersed than a
/// Poisson stream's (index of dispersion ≈ 1), the average rate is kept,
/// and the busiest windows see about the burst factor times the calm rate.
#[test]
fn bursts_keep_the_average_rate_and_concentrate_arrivals() {
    let hours = 200.0;
    let arrivals = |burst_factor: f64| -> Vec<u64> {
        let config = WorkloadConfig {
            seed: 21,
            jobs: None,
            duration_hours: Some(hours),
            slots: 300,
            burst_factor,
            ..WorkloadConfig::default()
        };
        let window_us = 600e6;
        let mut counts = vec![0u64; (hours * 6.0) as usize];
        for event in events(&config) {
            if let Event::JobSubmitted(job) = event {
                counts[(job.time_us as f64 / window_us) as usize] += 1;
            }
        }
        counts
    };
    let stats = |counts: &[u64]| {
        let n = counts.len() as f64;
        let mean = counts.iter().sum::<u64>() as f64 / n;
        let var = counts
            .iter()
            .map(|&c| (c as f64 - mean).powi(2))
            .sum::<f64>()
            / n;
        (mean, var / mean)
    };
    let (calm_mean, calm_dispersion) = stats(&arrivals(1.0));
    let bursty = arrivals(5.0);
    let (bursty_mean, bursty_dispersion) = stats(&bursty);
    eprintln!(
        "per 10 min: plain {calm_mean:.1} (dispersion {calm_dispersion:.2}), \
         bursty {bursty_mean:.1} (dispersion {bursty_dispersion:.2})"
    );
    assert!((0.7..1.4).contains(&calm_dispersion), "{calm_dispersion}");
    assert!(bursty_dispersion > 5.0, "{bursty_dispersion}");
    assert!((bursty_mean / calm_mean - 1.0).abs() < 0.1);
    // Calm rate λ/(1 − 0.1 + 0.5) = λ/1.4, bursts 5× that: 3.6λ.
    let mut sorted = bursty.clone();
    sorted.sort_unstable();
    let top = sorted[sorted.len() * 97 / 100] as f64 / calm_mean;
    let median = sorted[sorted.len() / 2] as f64 / calm_mean;
    assert!(top > 2.5, "{top}");
    assert!((0.55..0.9).contains(&median), "{median}");
}

/// `(lifetime hours, end reason)` of every VM, checking add/remove pairing.
fn vm_lifetimes(events: &[Event]) -> Vec<(f64, EndReason)> {
    let mut launched: HashMap<u64, u64> = HashMap::new();
    let mut out = Vec::new();
    for event in events {
        let Event::Machine(m) = event else { continue };
        let vm = m.vm.as_ref().expect("VM info");
        assert!(vm.preemptible);
        match m.kind {
            MachineKind::Add => {
                assert_eq!((vm.launch_time_us, vm.end_reason), (m.time_us, None));
                assert!(
                    launched.insert(m.machine_id, m.time_us).is_none(),
                    "VM {} added twice",
                    m.machine_id
                );
            }
            MachineKind::Remove => {
                let launch = launched.remove(&m.machine_id).expect("remove after add");
                assert_eq!(vm.launch_time_us, launch);
                out.push((
                    (m.time_us - launch) as f64 / HOUR_US,
                    vm.end_reason.expect("end reason"),
                ));
            }
            other => panic!("unexpected {}", other.as_str()),
        }
    }
    assert!(launched.is_empty(), "VMs never removed");
    out
}

fn vm_config(stop: Option<f64>) -> WorkloadConfig {
    WorkloadConfig {
        jobs: Some(0),
        duration_hours: Some(48.0),
        vms: 20_000,
        vm_stop_mean_hours: stop,
        ..WorkloadConfig::default()
    }
}

#[test]
fn vm_lifetimes_follow_the_bathtub_model() {
    let model = Bathtub::default();
    let mut lifetimes: Vec<f64> = vm_lifetimes(&events(&vm_config(None)))
        .into_iter()
        .map(|(hours, reason)| {
            assert_eq!(reason, EndReason::Preempted);
            hours
        })
        .collect();
    assert_eq!(lifetimes.len(), 20_000);
    lifetimes.sort_by(f64::total_cmp);
    let n = lifetimes.len() as f64;
    let mut ks: f64 = 0.0;
    for (i, &t) in lifetimes.iter().enumerate() {
        // G's left limit at the deadline excludes the point mass there.
        let left = if t >= model.max_lifetime_h() {
            1.0 - model.deadline_mass()
        } else {
            model.cdf(t)
        };
        ks = ks
            .max((i + 1) as f64 / n - model.cdf(t))
            .max(left - i as f64 / n);
    }
    // 1 % critical value 1.63/√n ≈ 0.0115, plus µs rounding (negligible).
    assert!(ks < 0.0115, "KS distance {ks}");
    let at_deadline = lifetimes
        .iter()
        .filter(|&&t| t == model.max_lifetime_h())
        .count() as f64
        / n;
    assert!(
        (at_deadline - model.deadline_mass()).abs() < 0.01,
        "{at_deadline} vs {}",
        model.deadline_mass()
    );
}

#[test]
fn user_stops_censor_the_expected_share_of_vms() {
    let model = Bathtub::default();
    for mean_stop in [4.0, 24.0] {
        // P(stop < T) = E[1 − e^(−T/m)] over G, by Simpson on the density plus the atom at L.
        let steps = 100_000;
        let h = model.continuous_end_h() / f64::from(steps);
        let mut expected = 0.0;
        for i in 0..=steps {
            let t = (f64::from(i) * h).min(model.continuous_end_h() * (1.0 - 1e-15));
            let w = if i == 0 || i == steps {
                1.0
            } else if i % 2 == 1 {
                4.0
            } else {
                2.0
            };
            expected += w * model.density(t) * -(-t / mean_stop).exp_m1();
        }
        expected = expected * h / 3.0
            + model.deadline_mass() * -(-model.max_lifetime_h() / mean_stop).exp_m1();
        let lifetimes = vm_lifetimes(&events(&vm_config(Some(mean_stop))));
        let stopped = lifetimes
            .iter()
            .filter(|l| l.1 == EndReason::Stopped)
            .count() as f64
            / lifetimes.len() as f64;
        eprintln!("mean stop {mean_stop} h: censored {stopped:.4} (expected {expected:.4})");
        // Binomial sd ≈ 0.0035 at n = 20 000.
        assert!(
            (stopped - expected).abs() < 0.015,
            "censored {stopped} vs {expected}"
        );
        assert!(lifetimes.iter().all(|l| l.0 <= model.max_lifetime_h()));
    }
}

#[test]
fn vm_launches_spread_over_the_run() {
    let events = events(&WorkloadConfig {
        vms: 500,
        ..mixed()
    });
    let adds: Vec<u64> = events
        .iter()
        .filter_map(|e| match e {
            Event::Machine(m) if m.kind == MachineKind::Add => Some(m.time_us),
            _ => None,
        })
        .collect();
    let last_submit = events
        .iter()
        .filter_map(|e| match e {
            Event::JobSubmitted(s) => Some(s.time_us),
            _ => None,
        })
        .max()
        .unwrap();
    assert_eq!(adds.len(), 500);
    let median = adds[adds.len() / 2] as f64 / last_submit as f64;
    assert!(
        (0.4..0.6).contains(&median),
        "median launch at {median} of the run"
    );
}
