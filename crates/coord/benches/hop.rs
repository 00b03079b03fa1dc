//! A cross-shard request/reply hop: a message to another thread's mailbox and the answer back
//! through the sender's own mailbox, as a remote command travels. Both sides wait in an
//! executor that parks the thread, so the figure includes waking a sleeping owner (the cost a
//! hop pays when the other shard is idle). `cargo bench -p damselfly-coord`.

use criterion::{criterion_group, criterion_main, Criterion};
use damselfly_coord::mailbox;

fn bench_hop(c: &mut Criterion) {
    let (to_shard, shard_box) = mailbox::<u64>();
    let (to_origin, origin_box) = mailbox::<u64>();
    let shard = std::thread::spawn(move || {
        futures_lite::future::block_on(async {
            let mut msgs = Vec::new();
            while shard_box.recv_all(&mut msgs).await {
                for m in msgs.drain(..) {
                    to_origin.send(m + 1);
                }
            }
        })
    });
    let mut replies = Vec::new();
    c.bench_function("hop/round-trip", |b| {
        b.iter(|| {
            to_shard.send(1);
            futures_lite::future::block_on(origin_box.recv_all(&mut replies));
            replies.clear();
        })
    });
    drop(to_shard);
    shard.join().expect("shard thread");
}

criterion_group!(benches, bench_hop);
criterion_main!(benches);
