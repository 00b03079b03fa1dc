//! LZF compression of 1 KB strings, as a snapshot encodes each string value longer than 20
//! bytes: random bytes (redis-benchmark's values, which LZF cannot shrink, so the work is
//! all hashing and giving up) and text that compresses. `cargo bench -p damselfly-persistence`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use damselfly_persistence::lzf::Compressor;
use rand::{Rng, SeedableRng};

fn bench_lzf(c: &mut Criterion) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let random: Vec<Vec<u8>> = (0..256)
        .map(|_| (0..1024).map(|_| rng.gen::<u8>()).collect())
        .collect();
    let words = [
        "user", "session", "id", "42", "name", "value", ":", "{", "}", ",",
    ];
    let text: Vec<Vec<u8>> = (0..256)
        .map(|_| {
            let mut s = Vec::with_capacity(1100);
            while s.len() < 1024 {
                s.extend_from_slice(words[rng.gen_range(0..words.len())].as_bytes());
            }
            s.truncate(1024);
            s
        })
        .collect();
    let mut group = c.benchmark_group("lzf");
    group.throughput(Throughput::Bytes(1024));
    for (name, inputs) in [("random-1k", &random), ("text-1k", &text)] {
        let mut lzf = Compressor::new();
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % inputs.len();
                let s = &inputs[i];
                lzf.compress(s, s.len() - 4).map(|c| c.len())
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench_lzf);
criterion_main!(benches);
