//! Streams built by hand, record by record, for what Damselfly never writes: the encodings of
//! older Redis versions, opcodes Redis 7.0 may write that we do not, and types we refuse.
//! (Round trips of what we write, and comparisons with redis-server, are in tests/.)

use damselfly_storage::{EncodingLimits, Value};

use super::write::put_len;
use super::*;
use crate::crc64::crc64;
use crate::encoding::{intset, listpack, ziplist};
use crate::error::ErrorKind;

/// A stream under construction.
struct Raw(Vec<u8>);

impl Raw {
    fn new(version: u16) -> Raw {
        Raw(format!("REDIS{version:04}").into_bytes())
    }
    fn byte(&mut self, b: u8) -> &mut Self {
        self.0.push(b);
        self
    }
    fn len(&mut self, n: u64) -> &mut Self {
        put_len(&mut self.0, n);
        self
    }
    fn str(&mut self, s: &[u8]) -> &mut Self {
        put_len(&mut self.0, s.len() as u64);
        self.0.extend_from_slice(s);
        self
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.0.extend_from_slice(b);
        self
    }
    fn key(&mut self, ty: u8, key: &[u8]) -> &mut Self {
        self.byte(ty).str(key)
    }
    /// EOF and a correct checksum.
    fn finish(&mut self) -> Vec<u8> {
        self.0.push(opcodes::EOF);
        let crc = crc64(&self.0);
        self.0.extend_from_slice(&crc.to_le_bytes());
        self.0.clone()
    }
}

fn read_all(data: &[u8]) -> Result<Vec<Event>, crate::Error> {
    let mut r = RdbReader::new(data, EncodingLimits::default())?;
    let mut out = Vec::new();
    while let Some(e) = r.next()? {
        out.push(e);
    }
    Ok(out)
}

fn entries(data: &[u8]) -> Vec<Entry> {
    read_all(data)
        .unwrap()
        .into_iter()
        .filter_map(|e| match e {
            Event::Entry(e) => Some(e),
            _ => None,
        })
        .collect()
}

fn list_of(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::List(l) => l.iter().map(<[u8]>::to_vec).collect(),
        _ => panic!("not a list: {v:?}"),
    }
}

fn sorted_set_members(v: &Value) -> Vec<Vec<u8>> {
    match v {
        Value::Set(s) => {
            let mut m: Vec<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
            m.sort();
            m
        }
        _ => panic!("not a set: {v:?}"),
    }
}

fn hash_pairs(v: &Value) -> Vec<(Vec<u8>, Vec<u8>)> {
    match v {
        Value::Hash(h) => {
            let mut p: Vec<_> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            p.sort();
            p
        }
        _ => panic!("not a hash: {v:?}"),
    }
}

fn zset_pairs(v: &Value) -> Vec<(Vec<u8>, f64)> {
    match v {
        Value::ZSet(z) => z.all(),
        _ => panic!("not a sorted set: {v:?}"),
    }
}

fn strs(items: &[&str]) -> Vec<Vec<u8>> {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

#[test]
fn old_encodings_load() {
    let zl_list = ziplist::tests::build(&[b"a", b"12", b"-70000", b"bb"]);
    let zl_hash = ziplist::tests::build(&[b"f1", b"v1", b"f2", b"2"]);
    let zl_zset = ziplist::tests::build(&[b"m1", b"1", b"m2", b"2.5", b"m3", b"-inf"]);
    let zipmap = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
    let mut set_lp = listpack::Builder::new();
    for m in [&b"x"[..], b"7", b"y"] {
        set_lp.push(m);
    }
    let mut r = Raw::new(6);
    r.key(types::LIST, b"list1")
        .len(3)
        .str(b"x")
        .str(b"y")
        .bytes(&[0xc0, 5]);
    r.key(types::SET, b"set2").len(2).str(b"a").str(b"b");
    r.key(types::ZSET, b"zset3").len(4);
    r.str(b"m").bytes(&[3]).bytes(b"1.5");
    r.str(b"n")
        .byte(254)
        .str(b"o")
        .byte(255)
        .str(b"p")
        .bytes(&[2])
        .bytes(b"-0");
    r.key(types::HASH, b"hash4").len(1).str(b"f").str(b"v");
    r.key(types::ZSET_2, b"zset5")
        .len(1)
        .str(b"m")
        .bytes(&2.25f64.to_le_bytes());
    r.key(types::HASH_ZIPMAP, b"zipmap9").str(zipmap);
    r.key(types::LIST_ZIPLIST, b"zl10").str(&zl_list);
    r.key(types::SET_INTSET, b"intset11")
        .str(&intset::encode(&[-5, 3, 40000]));
    r.key(types::ZSET_ZIPLIST, b"zl12").str(&zl_zset);
    r.key(types::HASH_ZIPLIST, b"zl13").str(&zl_hash);
    r.key(types::LIST_QUICKLIST, b"ql14")
        .len(2)
        .str(&zl_list)
        .str(&zl_list);
    r.key(types::SET_LISTPACK, b"setlp20").str(&set_lp.finish());
    let data = r.finish();
    let got = entries(&data);
    let by_key = |k: &str| {
        &got.iter()
            .find(|e| e.key == k.as_bytes())
            .unwrap_or_else(|| panic!("{k} missing"))
            .value
    };
    assert_eq!(list_of(by_key("list1")), strs(&["x", "y", "5"]));
    assert_eq!(sorted_set_members(by_key("set2")), strs(&["a", "b"]));
    assert_eq!(
        zset_pairs(by_key("zset3")),
        vec![
            (b"o".to_vec(), f64::NEG_INFINITY),
            (b"p".to_vec(), 0.0),
            (b"m".to_vec(), 1.5),
            (b"n".to_vec(), f64::INFINITY)
        ]
    );
    assert_eq!(
        hash_pairs(by_key("hash4")),
        vec![(b"f".to_vec(), b"v".to_vec())]
    );
    assert_eq!(zset_pairs(by_key("zset5")), vec![(b"m".to_vec(), 2.25)]);
    assert_eq!(
        hash_pairs(by_key("zipmap9")),
        vec![
            (b"foo".to_vec(), b"bar".to_vec()),
            (b"hello".to_vec(), b"world".to_vec())
        ]
    );
    assert_eq!(list_of(by_key("zl10")), strs(&["a", "12", "-70000", "bb"]));
    assert_eq!(
        sorted_set_members(by_key("intset11")),
        strs(&["-5", "3", "40000"])
    );
    assert!(matches!(by_key("intset11"), Value::Set(s) if s.encoding() == "intset"));
    assert_eq!(
        zset_pairs(by_key("zl12")),
        vec![
            (b"m3".to_vec(), f64::NEG_INFINITY),
            (b"m1".to_vec(), 1.0),
            (b"m2".to_vec(), 2.5)
        ]
    );
    assert_eq!(
        hash_pairs(by_key("zl13")),
        vec![
            (b"f1".to_vec(), b"v1".to_vec()),
            (b"f2".to_vec(), b"2".to_vec())
        ]
    );
    assert_eq!(list_of(by_key("ql14")).len(), 8);
    assert_eq!(
        sorted_set_members(by_key("setlp20")),
        strs(&["7", "x", "y"])
    );
    assert_eq!(got.len(), 12);
}

#[test]
fn quicklist_2_plain_and_packed_nodes() {
    let mut lp = listpack::Builder::new();
    lp.push(b"a");
    lp.push(b"1");
    let lp = lp.finish();
    let mut r = Raw::new(10);
    r.key(types::LIST_QUICKLIST_2, b"l").len(3);
    r.len(CONTAINER_PACKED).str(&lp);
    r.len(CONTAINER_PLAIN).str(b"a big element");
    r.len(CONTAINER_PACKED).str(&lp);
    let got = entries(&r.finish());
    assert_eq!(
        list_of(&got[0].value),
        strs(&["a", "1", "a big element", "a", "1"])
    );

    let mut r = Raw::new(10);
    r.key(types::LIST_QUICKLIST_2, b"l").len(1).len(3).str(&lp);
    let err = read_all(&r.finish()).unwrap_err();
    assert!(err.to_string().contains("container 3"), "{err}");
}

#[test]
fn per_key_opcodes_and_metadata() {
    let mut r = Raw::new(9);
    r.byte(opcodes::AUX).str(b"redis-ver").str(b"6.2.14");
    r.byte(opcodes::AUX)
        .str(b"ctime")
        .bytes(&[0xc2])
        .bytes(&1_700_000_000i32.to_le_bytes());
    r.byte(opcodes::SELECTDB).len(2);
    r.byte(opcodes::RESIZEDB).len(3).len(1);
    r.byte(opcodes::EXPIRETIME)
        .bytes(&1_800_000_000i32.to_le_bytes());
    r.byte(opcodes::FREQ).byte(7);
    r.key(types::STRING, b"a").str(b"1");
    r.byte(opcodes::IDLE).len(300);
    r.key(types::STRING, b"b").str(b"two");
    r.byte(opcodes::EXPIRETIME_MS)
        .bytes(&1_800_000_000_123i64.to_le_bytes());
    r.key(types::STRING, b"c")
        .bytes(&[0xc1])
        .bytes(&(-300i16).to_le_bytes());
    let events = read_all(&r.finish()).unwrap();
    let mut it = events.into_iter();
    assert!(
        matches!(it.next(), Some(Event::Aux { key, value }) if key == b"redis-ver" && value == b"6.2.14")
    );
    assert!(
        matches!(it.next(), Some(Event::Aux { key, value }) if key == b"ctime" && value == b"1700000000")
    );
    assert!(matches!(it.next(), Some(Event::SelectDb(2))));
    assert!(matches!(
        it.next(),
        Some(Event::ResizeDb {
            keys: 3,
            expires: 1
        })
    ));
    let Some(Event::Entry(a)) = it.next() else {
        panic!()
    };
    assert_eq!(
        (a.db, a.expire_ms, a.freq, a.idle_secs),
        (2, Some(1_800_000_000_000), Some(7), None)
    );
    assert!(matches!(a.value, Value::Int(1)));
    let Some(Event::Entry(b)) = it.next() else {
        panic!()
    };
    assert_eq!(
        (b.expire_ms, b.freq, b.idle_secs),
        (None, None, Some(300)),
        "per-key state resets"
    );
    let Some(Event::Entry(c)) = it.next() else {
        panic!()
    };
    assert_eq!(c.expire_ms, Some(1_800_000_000_123));
    assert!(matches!(c.value, Value::Int(-300)));
    assert!(it.next().is_none());
}

#[test]
fn functions_are_events() {
    let mut r = Raw::new(10);
    r.byte(opcodes::FUNCTION2)
        .str(b"#!lua name=lib1\nredis.register_function('f', function() return 1 end)");
    r.byte(opcodes::FUNCTION)
        .str(b"lib2")
        .str(b"LUA")
        .len(1)
        .str(b"a description")
        .str(b"return 2");
    let events = read_all(&r.finish()).unwrap();
    let codes: Vec<Vec<u8>> = events
        .into_iter()
        .map(|e| match e {
            Event::Function { code } => code,
            other => panic!("{other:?}"),
        })
        .collect();
    assert!(codes[0].starts_with(b"#!lua name=lib1\n"));
    assert_eq!(codes[1], b"#!LUA name=lib2\nreturn 2");
}

#[test]
fn unsupported_types_are_named() {
    for (ty, what) in [
        (types::MODULE, "a module value"),
        (types::MODULE_2, "a module value"),
    ] {
        let mut r = Raw::new(10);
        r.key(types::STRING, b"ok").str(b"v");
        r.key(ty, b"x").len(0);
        let err = read_all(&r.finish()).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Unsupported(_)), "{err}");
        assert_eq!(
            err.to_string(),
            format!("key 'x' holds {what}, which Damselfly does not support yet (at byte 18)")
        );
    }
    let mut r = Raw::new(10);
    r.byte(opcodes::MODULE_AUX).len(12345);
    let err = read_all(&r.finish()).unwrap_err();
    assert!(err.to_string().contains("Redis module"), "{err}");
}

#[test]
fn empty_collections_are_skipped_as_redis_does() {
    let empty_lp = listpack::Builder::new().finish();
    let empty_zl = ziplist::tests::build(&[]);
    let mut r = Raw::new(10);
    r.byte(opcodes::EXPIRETIME_MS).bytes(&5i64.to_le_bytes());
    r.key(types::LIST, b"l").len(0);
    r.key(types::HASH_LISTPACK, b"h").str(&empty_lp);
    r.key(types::ZSET_ZIPLIST, b"z").str(&empty_zl);
    r.key(types::LIST_QUICKLIST_2, b"q")
        .len(1)
        .len(CONTAINER_PACKED)
        .str(&empty_lp);
    r.key(types::STRING, b"s").str(b"kept");
    let data = r.finish();
    let mut reader = RdbReader::new(&data[..], EncodingLimits::default()).unwrap();
    let Some(Event::Entry(e)) = reader.next().unwrap() else {
        panic!()
    };
    assert_eq!(e.key, b"s");
    assert_eq!(
        e.expire_ms, None,
        "the skipped key's deadline is not carried over"
    );
    assert!(reader.next().unwrap().is_none());
    assert_eq!(reader.empty_keys_skipped(), 4);
}

#[test]
fn duplicates_and_nan_are_corrupt() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("set member", {
            let mut r = Raw::new(10);
            r.key(types::SET, b"k").len(2).str(b"a").str(b"a");
            r.finish()
        }),
        ("hash field", {
            let mut r = Raw::new(10);
            r.key(types::HASH, b"k")
                .len(2)
                .str(b"f")
                .str(b"1")
                .str(b"f")
                .str(b"2");
            r.finish()
        }),
        ("sorted set member", {
            let mut r = Raw::new(10);
            r.key(types::ZSET_2, b"k").len(2);
            r.str(b"m")
                .bytes(&1f64.to_le_bytes())
                .str(b"m")
                .bytes(&2f64.to_le_bytes());
            r.finish()
        }),
        ("bad score", {
            let mut r = Raw::new(10);
            r.key(types::ZSET_2, b"k")
                .len(1)
                .str(b"m")
                .bytes(&f64::NAN.to_le_bytes());
            r.finish()
        }),
        ("bad score", {
            let mut r = Raw::new(10);
            r.key(types::ZSET, b"k").len(1).str(b"m").byte(253);
            r.finish()
        }),
        ("hash field", {
            let mut r = Raw::new(10);
            r.key(types::HASH_ZIPLIST, b"k")
                .str(&ziplist::tests::build(&[b"f", b"1", b"f", b"2"]));
            r.finish()
        }),
        ("odd number", {
            let mut lp = listpack::Builder::new();
            lp.push(b"m");
            let mut r = Raw::new(10);
            r.key(types::ZSET_LISTPACK, b"k").str(&lp.finish());
            r.finish()
        }),
    ];
    for (what, data) in cases {
        let err = read_all(&data).unwrap_err();
        assert!(matches!(err.kind, ErrorKind::Corrupt(_)), "{err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
    }
}

#[test]
fn stated_lengths_do_not_allocate() {
    // A 4 GB string, a billion-member set, an LZF string claiming 1 TB: each in a few bytes.
    let mut r = Raw::new(10);
    r.key(types::STRING, b"k")
        .byte(0x80)
        .bytes(&u32::MAX.to_be_bytes())
        .bytes(b"abc");
    let err = read_all(&r.0).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::Truncated), "{err}");
    assert_eq!(err.offset, r.0.len() as u64);

    let mut r = Raw::new(10);
    r.key(types::SET, b"k").len(1_000_000_000).str(b"a");
    assert!(matches!(
        read_all(&r.0).unwrap_err().kind,
        ErrorKind::Truncated
    ));

    let mut r = Raw::new(10);
    r.key(types::STRING, b"k")
        .byte(0xc3)
        .len(2)
        .len(1 << 40)
        .bytes(&[0, b'a']);
    let err = read_all(&r.finish()).unwrap_err();
    assert!(err.to_string().contains("claims to expand"), "{err}");
}

#[test]
fn headers_and_trailers() {
    assert!(matches!(
        read_all(b"RADIS0010").unwrap_err().kind,
        ErrorKind::BadHeader(_)
    ));
    assert!(matches!(
        read_all(b"REDIS0012\xff").unwrap_err().kind,
        ErrorKind::BadHeader(_)
    ));
    assert!(matches!(
        read_all(b"REDIS00").unwrap_err().kind,
        ErrorKind::Truncated
    ));
    // Versions before 5 have no checksum; later ones with 0 skip the check.
    assert!(read_all(b"REDIS0004\xff").unwrap().is_empty());
    let mut zero = b"REDIS0010\xff".to_vec();
    zero.extend_from_slice(&[0; 8]);
    assert!(read_all(&zero).unwrap().is_empty());
    let mut wrong = b"REDIS0010\xff".to_vec();
    wrong.extend_from_slice(&[1; 8]);
    let err = read_all(&wrong).unwrap_err();
    assert!(matches!(err.kind, ErrorKind::Checksum { .. }));
    assert_eq!(err.offset, 10);
    // A missing trailer is a truncation.
    assert!(matches!(
        read_all(b"REDIS0010\xff\x00\x00").unwrap_err().kind,
        ErrorKind::Truncated
    ));
    let unknown = Raw::new(10).byte(8).finish();
    assert!(read_all(&unknown)
        .unwrap_err()
        .to_string()
        .contains("unknown record type 8"));
}

#[test]
fn list_nodes_follow_list_max_listpack_size() {
    use damselfly_storage::{End, List};
    let mut l = List::default();
    for i in 0..10 {
        l.push(End::Tail, format!("e{i}").as_bytes(), 128);
    }
    let v = Value::List(Box::new(l));
    // The node count follows the type byte and the (empty) key in a DUMP-style body.
    let nodes = |fill: i64| {
        let opts = WriteOptions {
            list_max_listpack_size: fill,
            ..WriteOptions::default()
        };
        let payload = crate::dump::encode(v.as_ref(), &opts);
        assert_eq!(payload[0], types::LIST_QUICKLIST_2);
        payload[1]
    };
    assert_eq!(nodes(3), 4);
    assert_eq!(nodes(1), 10);
    assert_eq!(nodes(-2), 1);
    // 4 KB nodes for -1: 300-byte elements, about 13 per node.
    let mut l = List::default();
    for _ in 0..40 {
        l.push(End::Tail, &[b'x'; 300], -2);
    }
    let v = Value::List(Box::new(l));
    let opts = WriteOptions {
        list_max_listpack_size: -1,
        compression: false,
        ..WriteOptions::default()
    };
    let payload = crate::dump::encode(v.as_ref(), &opts);
    assert_eq!(
        payload[1], 4,
        "40 entries of 304 bytes, 13 to a node of at most 4096"
    );
}
