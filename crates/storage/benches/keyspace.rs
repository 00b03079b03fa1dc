//! One shard's keyspace: insert, lookup (hit and miss) and delete on a table of 1M keys.
//! `cargo bench -p damselfly-storage`.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use damselfly_storage::{Shard, Value};

const KEYS: usize = 1_000_000;

fn key(i: usize) -> Vec<u8> {
    format!("key:{i:012}").into_bytes()
}

fn filled() -> Shard {
    let mut s = Shard::new(1);
    for i in 0..KEYS {
        s.set(0, &key(i), Value::Str(b"value".to_vec()), 0);
    }
    s
}

fn bench_keyspace(c: &mut Criterion) {
    let mut shard = filled();
    let keys: Vec<Vec<u8>> = (0..4096).map(|i| key(i * 241 % KEYS)).collect();
    let missing: Vec<Vec<u8>> = (0..4096).map(|i| key(KEYS + i)).collect();
    let mut group = c.benchmark_group("keyspace-1m");
    let mut i = 0;
    group.bench_function("lookup-hit", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(shard.get(0, &keys[i], 0).is_some())
        })
    });
    group.bench_function("lookup-miss", |b| {
        b.iter(|| {
            i = (i + 1) % missing.len();
            black_box(shard.get(0, &missing[i], 0).is_some())
        })
    });
    group.bench_function("overwrite", |b| {
        b.iter(|| {
            i = (i + 1) % keys.len();
            black_box(shard.set(0, &keys[i], Value::Int(7), 0))
        })
    });
    group.bench_function("insert-then-delete", |b| {
        b.iter_batched(
            || {
                i = (i + 1) % missing.len();
                missing[i].clone()
            },
            |k| {
                shard.set(0, &k, Value::Int(1), 0);
                black_box(shard.delete(0, &k, 0))
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench_keyspace);
criterion_main!(benches);
