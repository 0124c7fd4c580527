//! What a restart pays for the 3Sigma history, nearly all of a snapshot:
//! encoding and decoding a history somewhat larger than the one the service
//! holds once its 3-day window is full (`docs/performance.md`, restarts).
//!
//! Run: `cargo bench --profile release --workspace --bench history --
//! --warm-up-time 1 --measurement-time 5`

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use jobcast_predictor::features::JobFeatures;
use jobcast_predictor::history::{History, HistoryConfig};

/// Jobs learnt: with the feature values below, 252,495 feature values and
/// about 1.24 million samples, 41.3 MB encoded (the service's history after
/// 10 million generated events: 277,000 values, 28.3 MB).
const JOBS: u64 = 400_000;

/// A history learnt from `JOBS` jobs ending over 2.5 days, so that none
/// has left the window. Deterministic (no RNG crate needed).
fn full_history() -> History {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut history = History::new(HistoryConfig::default());
    let span_us = 60 * 3_600_000_000u64;
    for i in 0..JOBS {
        let family = next() % 180_000;
        // Each feature's values apart from the others'.
        let value = |feature: u64, v: u64| Some((feature << 32) | v);
        let features = JobFeatures {
            values: [
                value(0, family % 3_000),
                value(1, family),
                value(2, family / 2),
                value(3, family % 24),
                value(4, next() % 64),
                value(5, next() % 64),
                value(6, family % 4),
                value(7, family % 40),
                value(8, family % 300),
            ],
        };
        let runtime_us =
            1e6 * (10 + family % 500) as f64 * (0.75 + (next() % 1000) as f64 / 2000.0);
        history.observe(&features, i * span_us / JOBS, runtime_us);
    }
    history
}

fn history(c: &mut Criterion) {
    let history = full_history();
    // Encoded from a copy: `history` itself keeps no encodings, so that
    // its clones below start with every value to encode.
    let bytes = postcard::to_allocvec(&history.clone()).expect("the history encodes");
    eprintln!(
        "history: {} feature values, {} bytes encoded",
        history.tracked_values(),
        bytes.len()
    );
    let mut group = c.benchmark_group("history");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(bytes.len() as u64));
    // A whole snapshot after every value changed.
    group.bench_function("encode", |b| {
        b.iter_batched_ref(
            || history.clone(),
            |h| postcard::to_allocvec(h).expect("the history encodes"),
            BatchSize::LargeInput,
        )
    });
    // A whole snapshot with no value changed since the one before: the
    // encodings kept are copied.
    let encoded = history.clone();
    postcard::to_allocvec(&encoded).expect("the history encodes");
    group.bench_function("encode_unchanged", |b| {
        b.iter(|| postcard::to_allocvec(&encoded).expect("the history encodes"))
    });
    // What a restore pays: each value's bytes copied, to be decoded on
    // first use. A restore keeps what it decodes: the drop is not timed.
    group.bench_function("decode", |b| {
        b.iter_with_large_drop(|| {
            postcard::from_bytes::<History>(&bytes).expect("the history decodes")
        })
    });
    group.finish();
    // Compared value by value, every value decoded.
    let decoded: History = postcard::from_bytes(&bytes).expect("the history decodes");
    assert!(decoded == history, "decoding gives back the history");
}

criterion_group!(benches, history);
criterion_main!(benches);
