//! The RocksDB write path of one service batch, by batch size: for each
//! event, its log entry (a 134-byte payload, the size of the Google 2011
//! excerpt's average event) and one changed task record (46 bytes, the
//! size of a finished task's binary record), then the partition's offset,
//! in one atomic commit
//! without fsync. The store grows as the benchmark runs, as it does in
//! service.
//!
//! Run: `cargo bench -p jobcast-storage --bench write -- --warm-up-time 1
//! --measurement-time 3` (figures in `docs/performance.md`).

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use jobcast_storage::state::StateStore;

const PAYLOAD: [u8; 134] = [b'x'; 134];

const TASK_RECORD: [u8; 46] = [7; 46];

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store = StateStore::open(dir.path(), false).expect("the store opens");
    let mut seq = 0u64;
    let mut group = c.benchmark_group("commit");
    for size in [1u64, 100, 1_000, 10_000] {
        group.throughput(Throughput::Elements(size));
        group.bench_function(format!("{size} events per batch"), |b| {
            b.iter_batched(
                || {
                    let mut batch = store.batch();
                    for _ in 0..size {
                        let job_id = seq / 64;
                        batch.put_task(job_id, (seq % 64) as u32, &TASK_RECORD);
                        batch.append_log(seq, 0, seq as i64, Some(b"1234567"), Some(&PAYLOAD));
                        seq += 1;
                    }
                    batch.set_offset("events", 0, seq as i64);
                    batch
                },
                |batch| store.commit(batch).expect("the batch commits"),
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
