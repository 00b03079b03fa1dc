//! RESP reply encoding: the replies GET, INCR and MGET of ten keys produce.
//! `cargo bench -p damselfly-protocol --bench encode`.

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use damselfly_protocol::ReplyBuf;

fn bench_encode(c: &mut Criterion) {
    let value = vec![b'x'; 100];
    let mut group = c.benchmark_group("encode");
    group.bench_function("bulk-100b", |b| {
        let mut out = ReplyBuf::new(false);
        b.iter(|| {
            out.buf.clear();
            out.bulk(black_box(&value));
            black_box(out.buf.len())
        })
    });
    group.bench_function("int", |b| {
        let mut out = ReplyBuf::new(false);
        b.iter(|| {
            out.buf.clear();
            out.int(black_box(1234567));
            black_box(out.buf.len())
        })
    });
    group.bench_function("array-10-bulks", |b| {
        let mut out = ReplyBuf::new(false);
        b.iter(|| {
            out.buf.clear();
            out.array(10);
            for _ in 0..10 {
                out.bulk(black_box(&value[..16]));
            }
            black_box(out.buf.len())
        })
    });
    group.finish();
}

criterion_group!(benches, bench_encode);
criterion_main!(benches);
