//! What one risk score costs (`preemption::risk::score`, the work the
//! engine does for each task placed on a transient VM and each refresh):
//! under the bathtub the closed forms serve it; under the deadline-free
//! models the engine falls back to for spot VMs (Weibull, exponential) the
//! expected running times are integrated numerically. Then the lookup of a
//! checkpoint schedule in a built table, and the recalibration map.
//!
//! Run: `cargo bench -p jobcast-predictor --bench risk -- --warm-up-time 1
//! --measurement-time 3` (figures in `docs/performance.md`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use jobcast_predictor::preemption::Bathtub;
use jobcast_predictor::preemption::checkpoint::{CheckpointSpec, CheckpointTable, SegmentPolicy};
use jobcast_predictor::preemption::models::{Exponential, LifetimeModel, Weibull};
use jobcast_predictor::preemption::recalibration::Recalibration;
use jobcast_predictor::preemption::risk::{RiskConfig, RuntimeEstimate, score};

fn bench(c: &mut Criterion) {
    let models = [
        ("bathtub", LifetimeModel::Bathtub(Bathtub::default())),
        (
            // SkyPilot's AWS spot fit: k < 1, no deadline.
            "weibull",
            LifetimeModel::Weibull(Weibull::new(0.6, 0.7, f64::INFINITY).unwrap()),
        ),
        (
            "exponential",
            LifetimeModel::Exponential(Exponential::new(0.6, f64::INFINITY).unwrap()),
        ),
    ];
    let config = RiskConfig::default();
    let runtime = RuntimeEstimate {
        mean_h: 3.0,
        cv: 0.5,
    };
    let mut group = c.benchmark_group("risk_score");
    for (name, model) in &models {
        group.bench_with_input(BenchmarkId::from_parameter(name), model, |b, model| {
            b.iter(|| score(model, std::hint::black_box(5.0), runtime, &config, None).unwrap())
        });
    }
    group.finish();

    let bathtub = &models[0].1;
    let spec = CheckpointSpec {
        delta_h: 5.0 / 60.0,
        max_step_h: 5.0 / 60.0,
        max_job_h: 24.0,
        max_start_age_h: 24.0,
    };
    let table = CheckpointTable::build(bathtub, spec, SegmentPolicy::Optimal).unwrap();
    c.bench_function("checkpoint_schedule_lookup", |b| {
        b.iter(|| table.schedule(std::hint::black_box(3.0), 5.0).unwrap())
    });

    let mut recalibration = Recalibration::new(50, 0.0);
    for i in 0..10_000u32 {
        let p = f64::from(i % 1000) / 1000.0;
        recalibration.observe(p, i % 7 == 0, 1.0);
    }
    recalibration.refit();
    c.bench_function("recalibration_map", |b| {
        b.iter(|| recalibration.map(std::hint::black_box(0.37)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
