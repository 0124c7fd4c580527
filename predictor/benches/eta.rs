//! What a decision's ETA costs as the cluster's live jobs grow: the engine
//! with `live` jobs placed (each submitted, none ended), then a job
//! submitted (its first decision carries an ETA over every live job) and
//! ended again, so that each iteration sees the same `live`.
//!
//! Run: `cargo bench -p jobcast-predictor --bench eta -- --warm-up-time 1
//! --measurement-time 3` (figures in `docs/performance.md`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jobcast_ingest::event::{Event, JobEnded, JobOutcome, JobSubmitted};
use jobcast_predictor::decision::PolicyKind;
use jobcast_predictor::engine::{Effects, Engine, EngineConfig, EtaSettings, Origin, Output};

fn submit(job_id: u64, time_us: u64) -> Event {
    Event::JobSubmitted(JobSubmitted {
        user: format!("u{}", job_id % 20),
        job_name: format!("j{}", job_id % 50),
        logical_name: format!("j{}", job_id % 50),
        ..JobSubmitted::new(job_id, time_us, 4)
    })
}

fn bench(c: &mut Criterion) {
    let config = EngineConfig {
        policy: PolicyKind::ThreeSigma,
        shadow: Vec::new(),
        eta: EtaSettings {
            slots: Some(1000),
            ..EtaSettings::default()
        },
        ..EngineConfig::default()
    };
    let mut group = c.benchmark_group("decision_with_eta");
    for live in [10u64, 1_000, 10_000] {
        let mut engine = Engine::new(&config).unwrap();
        let mut effects = Effects::default();
        let mut offset = 0;
        let mut t = 1_000_000u64;
        for job_id in 0..live {
            engine
                .apply(Origin::new(0, offset), &submit(job_id, t), &mut effects)
                .unwrap();
            offset += 1;
            t += 1_000;
            effects.clear();
        }
        let mut next = live;
        group.bench_with_input(BenchmarkId::from_parameter(live), &live, |b, _| {
            b.iter(|| {
                engine
                    .apply(Origin::new(0, offset), &submit(next, t), &mut effects)
                    .unwrap();
                let with_eta = effects
                    .outputs
                    .iter()
                    .any(|o| matches!(o, Output::Decision(d) if d.eta.is_some()));
                assert!(with_eta, "the decision carries an ETA");
                let end = Event::JobEnded(JobEnded {
                    time_us: t + 1,
                    job_id: next,
                    outcome: JobOutcome::Kill,
                });
                engine
                    .apply(Origin::new(0, offset + 1), &end, &mut effects)
                    .unwrap();
                engine.release_ended();
                effects.clear();
                offset += 2;
                t += 2;
                next += 1;
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
