//! Cost of decoding one input message: jobcast's JSON event (what the
//! service's consumer decodes for every message it polls), over the
//! bundled Google 2011 excerpt's 87,679 events as the replay encodes them.
//!
//! Run: `cargo bench -p jobcast-ingest --bench decode -- --warm-up-time 1
//! --measurement-time 3` (figures in `docs/performance.md`).

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use jobcast_ingest::{Format, decode, encode, open};

fn excerpt_messages() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/data/google2011-excerpt");
    open(Format::Google2011, &dir)
        .expect("the bundled excerpt opens")
        .map(|event| {
            let mut bytes = Vec::new();
            encode(&event.expect("the bundled excerpt is clean"), &mut bytes);
            bytes
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let messages = excerpt_messages();
    let bytes: usize = messages.iter().map(Vec::len).sum();
    let mut group = c.benchmark_group("decode");
    group.throughput(Throughput::Elements(messages.len() as u64));
    group.bench_function(
        format!(
            "{} events, {} bytes each on average",
            messages.len(),
            bytes / messages.len()
        ),
        |b| {
            b.iter(|| {
                for message in &messages {
                    std::hint::black_box(decode(message).expect("the excerpt decodes"));
                }
            })
        },
    );
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
