//! Snapshots are points in time: whatever writes, deletes, expiries, splits, flushes and
//! swaps happen while one runs, the entries it saves are exactly those present when it
//! started, each once, with the values they had then.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use damselfly_storage::{Entry, Shard, SnapshotSink, Value};
use proptest::prelude::*;

type Saved = Arc<Mutex<Vec<(usize, Vec<u8>, Vec<u8>, u64)>>>;

struct Collect(Saved);

impl SnapshotSink for Collect {
    fn save(&mut self, db: usize, e: &Entry) {
        let v = e.value().to_bytes();
        self.0
            .lock()
            .expect("not poisoned")
            .push((db, e.key().to_vec(), v, e.expire_at()));
    }
}

/// The shard's content as (db, key) -> (value, deadline).
fn state(shard: &Shard) -> BTreeMap<(usize, Vec<u8>), (Vec<u8>, u64)> {
    let mut out = BTreeMap::new();
    for (db, d) in shard.dbs.iter().enumerate() {
        for e in d.table.iter() {
            out.insert(
                (db, e.key().to_vec()),
                (e.value().to_bytes(), e.expire_at()),
            );
        }
    }
    out
}

#[derive(Debug, Clone)]
enum Op {
    Set(usize, u16, u32),
    Del(usize, u16),
    Expire(usize, u16),
    Flush(usize),
    Swap,
    Step(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0usize..2, 0u16..8000, any::<u32>()).prop_map(|(d, k, v)| Op::Set(d, k, v)),
        3 => (0usize..2, 0u16..8000).prop_map(|(d, k)| Op::Del(d, k)),
        1 => (0usize..2, 0u16..8000).prop_map(|(d, k)| Op::Expire(d, k)),
        1 => (0usize..2).prop_map(Op::Flush),
        1 => Just(Op::Swap),
        4 => any::<u8>().prop_map(Op::Step),
    ]
}

fn key(k: u16) -> Vec<u8> {
    format!("key:{k}").into_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn a_snapshot_is_the_state_at_its_start(
        initial in proptest::collection::vec((0usize..2, 0u16..8000, any::<u32>()), 0..12000),
        ops in proptest::collection::vec(op(), 0..400),
    ) {
        let mut shard = Shard::new(2);
        // Enough keys for tables of several segments (the next test splits one mid-snapshot).
        for (db, k, v) in &initial {
            shard.set(*db, &key(*k), Value::Int(i64::from(*v)), 0);
        }
        let at_start = state(&shard);
        let saved: Saved = Arc::default();
        shard.start_snapshot(Box::new(Collect(saved.clone())));
        let mut done = false;
        let now = 1_000;
        for op in ops {
            match op {
                Op::Set(db, k, v) => {
                    shard.set(db, &key(k), Value::Int(i64::from(v) + 1), 0);
                }
                Op::Del(db, k) => {
                    shard.remove(db, &key(k));
                }
                Op::Expire(db, k) => {
                    // A deadline in the past: the next lookup removes the key lazily.
                    shard.update(db, &key(k), now, |e| e.set_expire_at(now - 1));
                    shard.get(db, &key(k), now);
                }
                Op::Flush(db) => shard.flush_db(db, now),
                Op::Swap => shard.swap_dbs(0, 1),
                Op::Step(n) => {
                    if !done && shard.snapshot_step(usize::from(n) + 1).is_some() {
                        done = true;
                    }
                }
            }
        }
        while !done {
            done = shard.snapshot_step(1000).is_some();
        }
        prop_assert!(!shard.snapshot_running());
        let saved = saved.lock().expect("not poisoned");
        let mut got = BTreeMap::new();
        for (db, k, v, exp) in saved.iter() {
            let dup = got.insert((*db, k.clone()), (v.clone(), *exp));
            prop_assert!(dup.is_none(), "saved twice: {:?}", String::from_utf8_lossy(k));
        }
        prop_assert_eq!(got, at_start);
    }
}

/// A segment splitting while a snapshot runs, after writes saved some of its stripes: each
/// half keeps what was saved, so nothing is saved twice or missed.
#[test]
fn a_split_during_a_snapshot_keeps_what_was_saved() {
    let mut shard = Shard::new(1);
    // One segment, full: the next new key splits it.
    for k in 0..3584u16 {
        shard.set(0, &key(k), Value::Int(i64::from(k)), 0);
    }
    let at_start = state(&shard);
    let saved: Saved = Arc::default();
    shard.start_snapshot(Box::new(Collect(saved.clone())));
    for k in (0..3584u16).step_by(97) {
        shard.set(0, &key(k), Value::Int(-1), 0);
    }
    for k in 3584..8000u16 {
        shard.set(0, &key(k), Value::Int(0), 0);
    }
    for k in (0..3584u16).step_by(13) {
        shard.remove(0, &key(k));
    }
    while shard.snapshot_step(100).is_none() {}
    let saved = saved.lock().expect("not poisoned");
    let mut got = BTreeMap::new();
    for (db, k, v, exp) in saved.iter() {
        let dup = got.insert((*db, k.clone()), (v.clone(), *exp));
        assert!(
            dup.is_none(),
            "saved twice: {:?}",
            String::from_utf8_lossy(k)
        );
    }
    assert_eq!(got, at_start);
}
