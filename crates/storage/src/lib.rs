//! One shard's data: the keyspace of each logical database, values, per-key expiry and memory
//! accounting. Only the shard's owning thread touches it, so nothing here locks, and nothing
//! here does I/O or knows about connections.

pub mod dict;
pub mod entry;
pub mod evict;
pub mod glob;
pub mod hash;
pub mod hll;
pub mod limits;
pub mod list;
pub mod listpack_size;
pub mod notify;
pub mod pack;
pub mod set;
pub mod shard;
pub mod stream;
pub mod table;
pub mod tracking;
pub mod undo;
pub mod value;
pub mod varint;
pub mod zset;

pub use evict::{EvictionConfig, Policy};
pub use hash::Hash;
pub use limits::EncodingLimits;
pub use list::{End, List};
pub use set::Set;
pub use shard::{Db, Eviction, Shard, ShardStats, SnapshotSink, Undone, WatchStamp};
pub use stream::{Stream, StreamId};
pub use table::{Entry, Table, SCAN_SHARD_BITS};
pub use value::{Collection, Kind, Value, ValueRef};
pub use zset::ZSet;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The shard that owns `key` among `shards`: xxh3 of the key's hash tag (the part between the
/// first `{` and the next `}`, when non-empty, as in Redis Cluster) modulo the shard count.
/// The function is fixed across runs and platforms, so persisted data can be routed again.
pub fn shard_for_key(key: &[u8], shards: usize) -> usize {
    if shards <= 1 {
        return 0;
    }
    (xxhash_rust::xxh3::xxh3_64(hash_tag(key)) % shards as u64) as usize
}

/// The part of a key that routing hashes: the `{tag}` content when present and non-empty.
pub fn hash_tag(key: &[u8]) -> &[u8] {
    // memchr scans a word at a time: routing hashes every key, often several times.
    if let Some(open) = memchr::memchr(b'{', key) {
        if let Some(close) = memchr::memchr(b'}', &key[open + 1..]) {
            if close > 0 {
                return &key[open + 1..open + 1 + close];
            }
        }
    }
    key
}

#[cfg(test)]
mod routing_tests {
    use super::*;

    #[test]
    fn hash_tags_route_together() {
        assert_eq!(hash_tag(b"{user1}:a"), b"user1");
        assert_eq!(hash_tag(b"x{user1}y{z}"), b"user1");
        assert_eq!(
            hash_tag(b"{}a"),
            b"{}a",
            "an empty tag hashes the whole key"
        );
        assert_eq!(hash_tag(b"a{b"), b"a{b");
        for n in 1..9 {
            assert_eq!(
                shard_for_key(b"{user1}:a", n),
                shard_for_key(b"{user1}:b", n)
            );
            assert_eq!(shard_for_key(b"{user1}:a", n), shard_for_key(b"user1", n));
        }
    }

    #[test]
    fn routing_is_fixed_and_spreads() {
        // A fixed function: this value must never change between releases (tests/routing.rs
        // pins shard_for_key's outputs themselves).
        assert_eq!(xxhash_rust::xxh3::xxh3_64(b"foo"), 0xab6e5f64077e7d8a);
        let mut counts = [0usize; 4];
        for i in 0..40_000 {
            counts[shard_for_key(format!("key:{i}").as_bytes(), 4)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven spread {counts:?}");
        }
    }
}
