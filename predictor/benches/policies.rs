//! Per-event cost of every prediction policy, together with the shared
//! 3Sigma history it consults, on a synthetic stream of recurring jobs.
//! Each job contributes a submission, one end per task and the job's end
//! (history update and `on_job_done`), as the service will see them.
//!
//! Run: `cargo bench -p jobcast-predictor --bench policies -- --warm-up-time 1
//! --measurement-time 3` (figures, and how to count instructions with
//! callgrind, in `docs/performance.md`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jobcast_ingest::event::JobSubmitted;
use jobcast_predictor::decision::PolicyKind;
use jobcast_predictor::features::JobFeatures;
use jobcast_predictor::history::{History, HistoryConfig};
use jobcast_predictor::policies::{Context, JobDone, TaskEnd};
use jobcast_predictor::policies::{JobTruth, OracleTruth, PolicyConfig, build};
use jobcast_predictor::queues::QueueConfig;

struct Job {
    submit: JobSubmitted,
    runtimes: Vec<u64>,
}

/// 2,000 jobs of 50 recurring families; widths 1–40; runtimes vary
/// ±25% around the family's mean. Deterministic (no RNG crate needed).
fn workload() -> Vec<Job> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..2000u64)
        .map(|i| {
            let family = i % 50;
            let width = 1 + (next() % 40) as u32;
            let mean = 1e6 * (10 + family * 7) as f64;
            let runtimes = (0..width)
                .map(|_| (mean * (0.75 + (next() % 1000) as f64 / 2000.0)) as u64)
                .collect();
            Job {
                submit: JobSubmitted {
                    user: format!("user{}", family % 7),
                    job_name: format!("job{family}"),
                    logical_name: format!("logical{family}"),
                    cpu_request: 0.125,
                    mem_request: 0.0625,
                    ..JobSubmitted::new(i, i * 5_000_000, width)
                },
                runtimes,
            }
        })
        .collect()
}

/// Drive one policy through the whole stream; the number of events.
fn run(kind: PolicyKind, jobs: &[Job]) -> u64 {
    let queues = QueueConfig::default();
    let mut history = History::new(HistoryConfig::default());
    let oracle: OracleTruth = jobs
        .iter()
        .map(|j| {
            let mean = j.runtimes.iter().sum::<u64>() as f64 / j.runtimes.len() as f64;
            (j.submit.job_id, JobTruth::new(mean))
        })
        .collect();
    let mut policy = build(kind, &PolicyConfig::default(), Some(oracle)).expect("valid config");
    let mut events = 0;
    for job in jobs {
        let now_us = job.submit.time_us;
        let ctx = Context {
            now_us,
            history: &history,
            queues: &queues,
        };
        std::hint::black_box(policy.on_submit(&job.submit, &ctx));
        for (task_index, &runtime_us) in job.runtimes.iter().enumerate() {
            let end = TaskEnd {
                job_id: job.submit.job_id,
                task_index: task_index as u32,
                time_us: now_us + runtime_us,
                runtime_us: Some(runtime_us),
            };
            std::hint::black_box(policy.on_task_end(&end, &ctx));
        }
        let mean = job.runtimes.iter().sum::<u64>() as f64 / job.runtimes.len() as f64;
        let end_us = now_us + job.runtimes.iter().max().copied().unwrap_or(0);
        history.observe(&JobFeatures::of(&job.submit), end_us, mean);
        let ctx = Context {
            now_us: end_us,
            history: &history,
            queues: &queues,
        };
        policy.on_job_done(
            &JobDone {
                job_id: job.submit.job_id,
                submit_us: now_us,
                end_us,
                width: job.submit.num_tasks,
                mean_task_runtime_us: mean,
                normalized_jct: 1.5,
            },
            &ctx,
        );
        events += 2 + job.runtimes.len() as u64;
    }
    events
}

fn policies(c: &mut Criterion) {
    let jobs = workload();
    let events = run(PolicyKind::Fifo, &jobs);
    let mut group = c.benchmark_group("policy_per_event");
    group.throughput(Throughput::Elements(events));
    for kind in PolicyKind::ALL {
        group.bench_function(kind.name(), |b| b.iter(|| run(kind, &jobs)));
    }
    group.finish();
}

criterion_group!(benches, policies);
criterion_main!(benches);
