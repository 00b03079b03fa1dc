//! Pins `shard_for_key`'s outputs: what data written by one run depends on to be routed again by
//! the next. The expected shards were computed once from the implementation (the reference);
//! a change here is a change of routing, not a test to update.

use damselfly_storage::shard_for_key;

/// The thread counts pinned: small, odd, powers of two, and large.
const THREADS: [usize; 8] = [1, 2, 3, 4, 7, 8, 16, 64];

/// (key, its shard for each of `THREADS`).
const PINNED: &[(&[u8], [usize; 8])] = &[
    // Plain keys, and the empty key.
    (b"", [0, 0, 1, 2, 4, 2, 2, 2]),
    (b"foo", [0, 0, 2, 2, 6, 2, 10, 10]),
    (b"key:1", [0, 0, 1, 2, 3, 2, 10, 58]),
    (b"user:1000", [0, 1, 0, 3, 0, 7, 15, 31]),
    (b"hello world", [0, 1, 1, 3, 1, 3, 11, 11]),
    (b"a", [0, 1, 1, 3, 1, 7, 15, 31]),
    // Hash tags: the content of the first `{...}` is hashed, so these route as `user1` ...
    (b"{user1}:a", [0, 0, 1, 0, 0, 4, 12, 28]),
    (b"{user1}:b", [0, 0, 1, 0, 0, 4, 12, 28]),
    (b"user1", [0, 0, 1, 0, 0, 4, 12, 28]),
    (b"x{user1}y{z}", [0, 0, 1, 0, 0, 4, 12, 28]),
    (b"}{user1}", [0, 0, 1, 0, 0, 4, 12, 28]),
    // ... this one as `a`, and this one as `{user1` (the first `}` closes the tag).
    (b"{a}{b}", [0, 1, 1, 3, 1, 7, 15, 31]),
    (b"{{user1}}", [0, 1, 2, 1, 5, 5, 5, 21]),
    // An empty tag means the whole key is hashed (Redis's rule), even when a tag follows.
    (b"{}", [0, 0, 1, 2, 5, 6, 6, 22]),
    (b"{}a", [0, 1, 2, 3, 2, 3, 11, 43]),
    (b"{}{user1}", [0, 1, 2, 1, 4, 1, 1, 49]),
    // No closing brace after the first `{`: the whole key.
    (b"{", [0, 0, 2, 2, 5, 6, 14, 30]),
    (b"a{b", [0, 1, 2, 1, 2, 1, 1, 17]),
    (b"a}{b", [0, 0, 0, 2, 6, 2, 2, 34]),
    // Binary keys, and a binary tag.
    (b"\x00", [0, 1, 0, 3, 2, 3, 11, 27]),
    (b"\xff\xfe\x00\x01", [0, 0, 0, 2, 1, 2, 2, 2]),
    (b"bin\r\n\x00key", [0, 0, 0, 0, 0, 0, 8, 56]),
    (b"{\x00\xff}tail", [0, 1, 1, 3, 3, 3, 3, 51]),
    (b"\x00\xff", [0, 1, 1, 3, 3, 3, 3, 51]),
];

#[test]
fn shard_for_key_is_pinned() {
    let mut wrong = Vec::new();
    for (key, shards) in PINNED {
        for (&n, &want) in THREADS.iter().zip(shards) {
            let got = shard_for_key(key, n);
            if got != want {
                wrong.push(format!(
                    "{:?} with {n} threads: {got}, pinned {want}",
                    String::from_utf8_lossy(key)
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "routing changed:\n{}", wrong.join("\n"));
}

#[test]
fn long_key_is_pinned() {
    // xxh3 switches algorithms with the input length; 1000 bytes takes its long-input path.
    let key = vec![b'k'; 1000];
    let got: Vec<usize> = THREADS.iter().map(|&n| shard_for_key(&key, n)).collect();
    assert_eq!(got, [0, 1, 0, 1, 0, 1, 9, 57]);
}

#[test]
fn tag_rules_hold_for_every_thread_count() {
    // The relations the table encodes, checked directly so a mistyped pin cannot hide them.
    for n in THREADS {
        let user1 = shard_for_key(b"user1", n);
        for key in [&b"{user1}:a"[..], b"{user1}:b", b"x{user1}y{z}"] {
            assert_eq!(shard_for_key(key, n), user1, "{key:?} with {n} threads");
        }
        assert_eq!(
            shard_for_key(b"{\x00\xff}tail", n),
            shard_for_key(b"\x00\xff", n)
        );
    }
    let row = |key: &[u8]| THREADS.map(|n| shard_for_key(key, n));
    // An empty tag does not fall through to the next one.
    assert_ne!(row(b"{}{user1}"), row(b"user1"));
}
