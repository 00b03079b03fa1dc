//! Round trips through our writer and reader (and DUMP) for every type, size and encoding,
//! and damaged files: truncated at every offset, bytes flipped.

mod common;

use common::{build, logical, Logical, Score};
use damselfly_persistence::digest::{value_digest, DatasetDigest};
use damselfly_persistence::rdb::{Event, RdbReader, RdbWriter, WriteOptions};
use damselfly_persistence::{dump, ErrorKind};
use damselfly_storage::{EncodingLimits, Entry, Value};
use proptest::prelude::*;

fn text(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Values of every type in each of their encodings under the default limits.
fn samples() -> Vec<(&'static str, Logical)> {
    let ints = |r: std::ops::Range<i64>, step: i64| -> Logical {
        Logical::Set(
            r.step_by(step as usize)
                .map(|i| text(&i.to_string()))
                .collect(),
        )
    };
    vec![
        ("int8", Logical::Str(text("-7"))),
        ("int32", Logical::Str(text("2000000000"))),
        ("int64", Logical::Str(text("-9223372036854775808"))),
        ("noncanonical", Logical::Str(text("007"))),
        ("empty", Logical::Str(Vec::new())),
        ("short", Logical::Str(text("hello"))),
        ("compressible", Logical::Str(text(&"abc".repeat(1000)))),
        (
            "binary",
            Logical::Str((0..=255u8).cycle().take(700).collect()),
        ),
        (
            "list-small",
            Logical::List(vec![text("a"), text("12"), text("-4096"), Vec::new()]),
        ),
        (
            "list-nodes",
            Logical::List((0..3000).map(|i| text(&format!("element {i}"))).collect()),
        ),
        (
            "list-bigel",
            Logical::List(vec![text(&"x".repeat(20_000)), text("y")]),
        ),
        ("intset16", ints(-100..100, 3)),
        (
            "intset64",
            Logical::Set([text("5000000000"), text("-1")].into_iter().collect()),
        ),
        ("set-ints-large", ints(0..2000, 1)),
        (
            "set-text",
            Logical::Set((0..50).map(|i| text(&format!("m{i}"))).collect()),
        ),
        (
            "hash-pack",
            Logical::Hash(
                (0..20)
                    .map(|i| (text(&format!("f{i}")), text(&i.to_string())))
                    .collect(),
            ),
        ),
        (
            "hash-longval",
            Logical::Hash([(text("f"), text(&"v".repeat(100)))].into_iter().collect()),
        ),
        (
            "hash-many",
            Logical::Hash(
                (0..500)
                    .map(|i| (text(&i.to_string()), text(&format!("v{i}"))))
                    .collect(),
            ),
        ),
        (
            "zset-pack",
            Logical::ZSet(vec![
                (text("ninf"), Score(f64::NEG_INFINITY)),
                (text("a"), Score(-2.5)),
                (text("b"), Score(0.0)),
                (text("c"), Score(1.0 / 3.0)),
                (text("d"), Score(4.0e18)),
                (text("e"), Score(1e300)),
                (text("pinf"), Score(f64::INFINITY)),
            ]),
        ),
        (
            "zset-tree",
            Logical::ZSet(
                (0..300)
                    .map(|i| {
                        (
                            text(&format!("m{i:04}")),
                            Score(if i == 0 { -0.0 } else { f64::from(i) * 0.5 }),
                        )
                    })
                    .collect(),
            ),
        ),
        (
            "zset-longmember",
            Logical::ZSet(vec![(text(&"m".repeat(100)), Score(1.0))]),
        ),
    ]
}

struct Read {
    entries: Vec<(u64, Vec<u8>, Value, Option<i64>)>,
    aux: Vec<(Vec<u8>, Vec<u8>)>,
}

fn read(data: &[u8], limits: EncodingLimits) -> Result<Read, damselfly_persistence::Error> {
    let mut r = RdbReader::new(data, limits)?;
    let mut out = Read {
        entries: Vec::new(),
        aux: Vec::new(),
    };
    while let Some(ev) = r.next()? {
        match ev {
            Event::Entry(e) => out.entries.push((e.db, e.key, e.value, e.expire_ms)),
            Event::Aux { key, value } => out.aux.push((key, value)),
            _ => {}
        }
    }
    Ok(out)
}

fn write(values: &[(u64, Vec<u8>, Value, Option<i64>)], opts: &WriteOptions) -> Vec<u8> {
    let mut w = RdbWriter::new(Vec::new(), opts, 1_700_000_000, 123_456, false).unwrap();
    w.write_aux(b"snapshot-id", b"abc").unwrap();
    let mut dbs: Vec<u64> = values.iter().map(|v| v.0).collect();
    dbs.sort();
    dbs.dedup();
    for db in dbs {
        let keys: Vec<_> = values.iter().filter(|v| v.0 == db).collect();
        let expires = keys.iter().filter(|v| v.3.is_some()).count() as u64;
        w.select_db(db, keys.len() as u64, expires).unwrap();
        for (_, k, v, t) in keys {
            w.write_entry(k, v.as_ref(), *t).unwrap();
        }
    }
    w.finish().unwrap()
}

fn dataset(limits: &EncodingLimits) -> Vec<(u64, Vec<u8>, Value, Option<i64>)> {
    samples()
        .into_iter()
        .enumerate()
        .map(|(i, (name, l))| {
            let db = [0, 0, 3, 15][i % 4];
            let expire = (i % 3 == 0).then_some(1_900_000_000_000 + i as i64);
            (db, text(name), build(&l, limits), expire)
        })
        .collect()
}

#[test]
fn every_type_and_encoding_round_trips() {
    let limits = EncodingLimits::default();
    let data = dataset(&limits);
    let mut encodings: Vec<&str> = data.iter().map(|v| v.2.encoding()).collect();
    encodings.sort();
    encodings.dedup();
    assert_eq!(
        encodings,
        [
            "embstr",
            "hashtable",
            "int",
            "intset",
            "listpack",
            "quicklist",
            "raw",
            "skiplist"
        ]
    );
    for opts in [
        WriteOptions::default(),
        WriteOptions {
            compression: false,
            checksum: false,
            list_max_listpack_size: 3,
            ..WriteOptions::default()
        },
        WriteOptions {
            list_max_listpack_size: -5,
            ..WriteOptions::default()
        },
        WriteOptions {
            list_max_listpack_size: 1,
            ..WriteOptions::default()
        },
    ] {
        let file = write(&data, &opts);
        let got = read(&file, limits).unwrap();
        assert_eq!(got.entries.len(), data.len());
        let mut data = data.clone();
        data.sort_by_key(|v| v.0);
        for (a, b) in data.iter().zip(&got.entries) {
            assert_eq!((a.0, &a.1, a.3), (b.0, &b.1, b.3));
            assert_eq!(
                logical(&a.2),
                logical(&b.2),
                "{:?}",
                String::from_utf8_lossy(&a.1)
            );
            assert_eq!(
                a.2.encoding(),
                b.2.encoding(),
                "{:?}",
                String::from_utf8_lossy(&a.1)
            );
        }
        let aux: Vec<&[u8]> = got.aux.iter().map(|(k, _)| k.as_slice()).collect();
        assert_eq!(
            aux,
            [
                &b"redis-ver"[..],
                b"redis-bits",
                b"ctime",
                b"used-mem",
                b"aof-base",
                b"snapshot-id"
            ]
        );
        assert_eq!(got.aux[2].1, b"1700000000");
        // DUMP round trip of each value.
        for (_, k, v, _) in &data {
            let back = dump::decode(&dump::encode(v.as_ref(), &opts), &limits).unwrap();
            assert_eq!(
                logical(&back),
                logical(v),
                "{:?}",
                String::from_utf8_lossy(k)
            );
        }
    }
    // With compression, the compressible string is stored in far fewer bytes.
    let small = write(&data, &WriteOptions::default()).len();
    let plain = write(
        &data,
        &WriteOptions {
            compression: false,
            ..WriteOptions::default()
        },
    )
    .len();
    assert!(small + 2500 < plain, "{small} vs {plain}");
}

#[test]
fn reading_follows_damselflys_limits() {
    // A file written under the defaults, read with smaller limits: encodings follow the
    // reader's limits, content and digests do not change.
    let data = dataset(&EncodingLimits::default());
    let file = write(&data, &WriteOptions::default());
    let small = EncodingLimits {
        hash_max_entries: 4,
        set_max_intset_entries: 8,
        zset_max_entries: 4,
        list_max_listpack_size: 2,
        ..EncodingLimits::default()
    };
    let got = read(&file, small).unwrap();
    let mut data = data;
    data.sort_by_key(|v| v.0);
    let mut a = DatasetDigest::new();
    let mut b = DatasetDigest::new();
    for (orig, back) in data.iter().zip(&got.entries) {
        assert_eq!(logical(&orig.2), logical(&back.2));
        assert_eq!(
            value_digest(orig.2.as_ref(), true),
            value_digest(back.2.as_ref(), true)
        );
        a.add(orig.0, &orig.1, orig.2.as_ref(), orig.3.is_some());
        b.add(back.0, &back.1, back.2.as_ref(), back.3.is_some());
    }
    assert_eq!(a.finish(), b.finish());
    let by_name = |n: &str| &got.entries.iter().find(|e| e.1 == n.as_bytes()).unwrap().2;
    assert_eq!(by_name("hash-pack").encoding(), "hashtable");
    assert_eq!(by_name("intset16").encoding(), "hashtable");
    assert_eq!(by_name("zset-pack").encoding(), "skiplist");
}

#[test]
fn truncation_at_every_offset_is_an_error() {
    let limits = EncodingLimits::default();
    let data: Vec<_> = dataset(&limits)
        .into_iter()
        .filter(|v| Entry::new(&v.1, v.2.clone(), 0).mem_size() < 4000)
        .collect();
    let file = write(&data, &WriteOptions::default());
    assert!(read(&file, limits).is_ok());
    for cut in 0..file.len() {
        let err = read(&file[..cut], limits)
            .err()
            .unwrap_or_else(|| panic!("cut at {cut} read fine"));
        assert!(err.offset <= cut as u64, "cut {cut}: {err}");
    }
}

#[test]
fn flipped_bytes_are_errors() {
    let limits = EncodingLimits::default();
    let data: Vec<_> = dataset(&limits)
        .into_iter()
        .filter(|v| Entry::new(&v.1, v.2.clone(), 0).mem_size() < 4000)
        .collect();
    let file = write(&data, &WriteOptions::default());
    let mut checksum_errors = 0;
    for i in 9..file.len() {
        for bit in [0x01u8, 0x80] {
            let mut bad = file.clone();
            bad[i] ^= bit;
            match read(&bad, limits) {
                Ok(_) => panic!("byte {i} ^ {bit:#x} went unnoticed"),
                Err(e) if matches!(e.kind, ErrorKind::Checksum { .. }) => checksum_errors += 1,
                Err(_) => {}
            }
        }
    }
    // Most flips leave a well-formed stream that only the checksum catches.
    assert!(
        checksum_errors > file.len() / 2,
        "{checksum_errors} of {}",
        2 * file.len()
    );
    // Without a checksum the same flips in string bytes go unnoticed, as in Redis.
    let unchecked = write(
        &data,
        &WriteOptions {
            checksum: false,
            ..WriteOptions::default()
        },
    );
    assert_eq!(&unchecked[unchecked.len() - 8..], &[0; 8]);
    assert!(read(&unchecked, limits).is_ok());
}

fn arb_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string().into_bytes()),
        (-300i64..300).prop_map(|i| i.to_string().into_bytes()),
        proptest::collection::vec(any::<u8>(), 0..40),
        (1usize..60, proptest::collection::vec(any::<u8>(), 1..4)).prop_map(|(n, u)| u.repeat(n)),
    ]
}

fn arb_logical() -> impl Strategy<Value = Logical> {
    let score = prop_oneof![
        any::<f64>().prop_filter("no NaN", |f| !f.is_nan()),
        (-1000i32..1000).prop_map(f64::from),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
    ];
    prop_oneof![
        arb_bytes().prop_map(Logical::Str),
        proptest::collection::vec(arb_bytes(), 1..300).prop_map(Logical::List),
        proptest::collection::btree_set(arb_bytes(), 1..300).prop_map(Logical::Set),
        proptest::collection::btree_map(arb_bytes(), arb_bytes(), 1..200).prop_map(Logical::Hash),
        proptest::collection::btree_map(arb_bytes(), score, 1..200).prop_map(|m| {
            let mut v: Vec<(Vec<u8>, Score)> =
                m.into_iter().map(|(k, s)| (k, Score(s + 0.0))).collect();
            v.sort_by(|a, b| {
                a.1 .0
                    .partial_cmp(&b.1 .0)
                    .unwrap()
                    .then_with(|| a.0.cmp(&b.0))
            });
            Logical::ZSet(v)
        }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_values_round_trip(
        values in proptest::collection::vec((0u64..20, arb_logical(), proptest::option::of(any::<i64>())), 1..8),
        compression in any::<bool>(),
        fill in prop_oneof![Just(-2i64), Just(-1), Just(4)],
    ) {
        let limits = EncodingLimits::default();
        let mut data: Vec<_> = values
            .into_iter()
            .enumerate()
            .map(|(i, (db, l, t))| (db, format!("k{i}").into_bytes(), build(&l, &limits), t))
            .collect();
        data.sort_by_key(|v| v.0);
        let opts = WriteOptions { compression, list_max_listpack_size: fill, ..WriteOptions::default() };
        let got = read(&write(&data, &opts), limits).unwrap();
        prop_assert_eq!(got.entries.len(), data.len());
        for (a, b) in data.iter().zip(&got.entries) {
            prop_assert_eq!((a.0, &a.1, a.3), (b.0, &b.1, b.3));
            prop_assert_eq!(logical(&a.2), logical(&b.2));
            prop_assert_eq!(value_digest(a.2.as_ref(), false), value_digest(b.2.as_ref(), false));
            let back = dump::decode(&dump::encode(a.2.as_ref(), &opts), &limits).unwrap();
            prop_assert_eq!(logical(&back), logical(&a.2));
        }
    }
}
