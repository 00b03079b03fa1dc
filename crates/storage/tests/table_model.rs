//! The keyspace table against a model (a `HashMap`) under random operations: inserts of every
//! string encoding the entry layout has (integers, inline strings, raw strings past the inline
//! limit, strings edited in place), overwrites, expiries added, changed and dropped, deletes,
//! and growth through many segment splits; and SCAN's guarantee (every key present for the
//! whole scan is returned) with the table changing between the calls.

use std::collections::{BTreeSet, HashMap};

use damselfly_storage::{Entry, Table, Value};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Insert { key: u16, value: Stored },
    Remove { key: u16 },
    Expire { key: u16, at: u64 },
    Append { key: u16, tail: Vec<u8> },
    Get { key: u16 },
}

/// A value in a form the model compares: what a client would read back.
#[derive(Debug, Clone, PartialEq)]
enum Stored {
    Int(i64),
    Bytes(Vec<u8>),
}

impl Stored {
    fn value(&self) -> Value {
        match self {
            Stored::Int(i) => Value::Int(*i),
            Stored::Bytes(b) => Value::Str(b.clone()),
        }
    }

    fn bytes(&self) -> Vec<u8> {
        match self {
            Stored::Int(i) => i.to_string().into_bytes(),
            Stored::Bytes(b) => b.clone(),
        }
    }
}

fn stored() -> impl Strategy<Value = Stored> {
    prop_oneof![
        any::<i64>().prop_map(Stored::Int),
        // Inline (up to 512 bytes with the key) and raw, empty included.
        proptest::collection::vec(any::<u8>(), 0..40).prop_map(Stored::Bytes),
        (500usize..700, any::<u8>()).prop_map(|(n, b)| Stored::Bytes(vec![b; n])),
    ]
}

/// Keys from a range wide enough that inserts split segments (3,584 entries each) many times.
fn op(keys: u16) -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..keys, stored()).prop_map(|(key, value)| Op::Insert { key, value }),
        2 => (0..keys).prop_map(|key| Op::Remove { key }),
        2 => (0..keys, prop_oneof![Just(0u64), 1u64..u64::MAX / 2])
            .prop_map(|(key, at)| Op::Expire { key, at }),
        1 => (0..keys, proptest::collection::vec(any::<u8>(), 0..20))
            .prop_map(|(key, tail)| Op::Append { key, tail }),
        1 => (0..keys).prop_map(|key| Op::Get { key }),
    ]
}

fn key(k: u16) -> Vec<u8> {
    // Keys of different lengths, so records of one table differ in layout.
    format!("key:{k}:{}", "x".repeat(usize::from(k % 7) * 5)).into_bytes()
}

type Model = HashMap<Vec<u8>, (Vec<u8>, u64)>;

fn apply(t: &mut Table, model: &mut Model, op: &Op) -> Result<(), TestCaseError> {
    match op {
        Op::Insert { key: k, value } => {
            let key = key(*k);
            let old = t.insert(Entry::new(&key, value.value(), 0));
            let was = model.insert(key, (value.bytes(), 0));
            prop_assert_eq!(old.map(|e| e.value().to_bytes()), was.map(|w| w.0));
        }
        Op::Remove { key: k } => {
            let key = key(*k);
            let old = t.remove(&key);
            let was = model.remove(&key);
            prop_assert_eq!(old.map(|e| (e.value().to_bytes(), e.expire_at())), was);
        }
        Op::Expire { key: k, at } => {
            let key = key(*k);
            if let Some(e) = t.get_mut(&key) {
                e.set_expire_at(*at);
            }
            if let Some(m) = model.get_mut(&key) {
                m.1 = *at;
            }
        }
        Op::Append { key: k, tail } => {
            let key = key(*k);
            if let Some(e) = t.get_mut(&key) {
                e.make_raw().extend_from_slice(tail);
            }
            if let Some(m) = model.get_mut(&key) {
                m.0.extend_from_slice(tail);
            }
        }
        Op::Get { key: k } => {
            let key = key(*k);
            let got = t.get(&key).map(|e| (e.value().to_bytes(), e.expire_at()));
            prop_assert_eq!(got.as_ref(), model.get(&key));
        }
    }
    prop_assert_eq!(t.len(), model.len());
    Ok(())
}

fn assert_same(t: &Table, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(t.len(), model.len());
    prop_assert_eq!(t.iter().count(), model.len());
    for e in t.iter() {
        let want = model.get(e.key());
        prop_assert_eq!(Some(&(e.value().to_bytes(), e.expire_at())), want);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// Every operation's result and the final contents match the model, through many splits.
    #[test]
    fn the_table_behaves_like_a_map(ops in proptest::collection::vec(op(12_000), 1..30_000)) {
        let mut t = Table::new();
        let mut model = Model::new();
        for op in &ops {
            apply(&mut t, &mut model, op)?;
        }
        assert_same(&t, &model)?;
        // Emptied again key by key.
        let keys: Vec<Vec<u8>> = model.keys().cloned().collect();
        for k in keys {
            prop_assert!(t.remove(&k).is_some());
            model.remove(&k);
        }
        assert_same(&t, &model)?;
    }

    /// A SCAN interleaved with random changes returns every key that was there from its start
    /// to its end, and nothing that never existed.
    #[test]
    fn scan_returns_every_key_present_throughout(
        initial in proptest::collection::vec((0u16..8000, stored()), 0..8000),
        ops in proptest::collection::vec(op(16_000), 0..6000),
        count in 1usize..50,
    ) {
        let mut t = Table::new();
        let mut model = Model::new();
        for (k, v) in &initial {
            apply(&mut t, &mut model, &Op::Insert { key: *k, value: v.clone() })?;
        }
        let at_start: BTreeSet<Vec<u8>> = model.keys().cloned().collect();
        let mut removed = BTreeSet::new();
        let mut ever: BTreeSet<Vec<u8>> = at_start.clone();
        let mut seen = BTreeSet::new();
        let mut pending = ops.iter();
        let mut pos = 0;
        loop {
            pos = t.scan(pos, count, |e| {
                seen.insert(e.key().to_vec());
            });
            // Changes between the calls, as other clients make them.
            for op in pending.by_ref().take(7) {
                if let Op::Remove { key: k } = op {
                    removed.insert(key(*k));
                }
                if let Op::Insert { key: k, .. } = op {
                    ever.insert(key(*k));
                }
                apply(&mut t, &mut model, op)?;
            }
            if pos == 0 {
                break;
            }
        }
        for k in at_start.difference(&removed) {
            prop_assert!(seen.contains(k), "missed {}", String::from_utf8_lossy(k));
        }
        prop_assert!(seen.is_subset(&ever));
    }
}
