//! DEBUG DIGEST and DEBUG DIGEST-VALUE as Redis 7.0 computes them (debug.c).
//!
//! Two SHA-1 based operations: `xor(d, data)` xors SHA1(data) into `d` (order does not
//! matter: used for unordered elements), and `mix(d, data)` sets `d = SHA1(d xor SHA1(data))`
//! (order matters). A value's digest starts at zero, mixes its type number (4 bytes,
//! big-endian) and then its content:
//! - string: mix the text (integers in decimal);
//! - list: mix each element in order;
//! - set: xor each member;
//! - hash: per field, a fresh digest mixing field then value, then `xor(d, that digest)`;
//! - sorted set: per member, a fresh digest mixing the member then the score as `%.17g`,
//!   then `xor(d, that digest)`;
//!
//! and finally, if the key has a deadline, xors in the text `!!expire!!` (not the time).
//! A key's digest mixes the key name into a zero digest first, then does the above. The
//! dataset digest starts at zero and, for each non-empty database in order, mixes the
//! database number (4 bytes, big-endian) and then does `xor(d, key digest)` for every key. Redis digests
//! the logical content, so the result does not depend on encodings.

use damselfly_protocol::number::format_f64_17g;
use damselfly_storage::set::Member;
use damselfly_storage::{Kind, StreamId, ValueRef};

/// A 20-byte digest.
pub type Digest = [u8; 20];

fn sha1(data: &[u8]) -> Digest {
    sha1_smol::Sha1::from(data).digest().bytes()
}

/// `xorDigest`.
fn xor(d: &mut Digest, data: &[u8]) {
    for (a, b) in d.iter_mut().zip(sha1(data)) {
        *a ^= b;
    }
}

/// `mixDigest`.
fn mix(d: &mut Digest, data: &[u8]) {
    xor(d, data);
    *d = sha1(d);
}

/// Redis's type numbers (`OBJ_STRING` ... `OBJ_HASH`).
fn type_number(kind: Kind) -> u32 {
    match kind {
        Kind::String => 0,
        Kind::List => 1,
        Kind::Set => 2,
        Kind::ZSet => 3,
        Kind::Hash => 4,
        Kind::Stream => 6,
    }
}

/// `xorObjectDigest`: adds a value to `d`.
fn add_value(d: &mut Digest, value: ValueRef<'_>, has_expire: bool) {
    mix(d, &type_number(value.kind()).to_be_bytes());
    let mut buf = Vec::new();
    match value {
        ValueRef::Int(_) | ValueRef::Str(_) => mix(d, &value.to_bytes()),
        ValueRef::List(l) => {
            for e in l.iter() {
                mix(d, e);
            }
        }
        ValueRef::Set(s) => {
            for m in s.iter() {
                match m {
                    Member::Int(i) => {
                        buf.clear();
                        damselfly_protocol::number::push_i64(&mut buf, i);
                        xor(d, &buf);
                    }
                    Member::Bytes(b) => xor(d, b),
                }
            }
        }
        ValueRef::Hash(h) => {
            for (f, v) in h.iter() {
                let mut e = Digest::default();
                mix(&mut e, f);
                mix(&mut e, v);
                xor(d, &e);
            }
        }
        ValueRef::ZSet(z) => {
            const CHUNK: usize = 1024;
            let mut start = 0;
            while start < z.len() {
                for (m, score) in z.range(start, start + CHUNK) {
                    let mut e = Digest::default();
                    mix(&mut e, &m);
                    buf.clear();
                    format_f64_17g(score, &mut buf);
                    mix(&mut e, &buf);
                    xor(d, &e);
                }
                start += CHUNK;
            }
        }
        ValueRef::Stream(s) => s.range(StreamId::MIN, StreamId::MAX, false, |id, pairs| {
            mix(d, format!("{}.{}", id.ms, id.seq).as_bytes());
            for (f, v) in pairs {
                mix(d, f);
                mix(d, v);
            }
            true
        }),
    }
    if has_expire {
        xor(d, b"!!expire!!");
    }
}

/// DEBUG DIGEST-VALUE for one key's value (a missing key's digest is all zeros).
pub fn value_digest(value: ValueRef<'_>, has_expire: bool) -> Digest {
    let mut d = Digest::default();
    add_value(&mut d, value, has_expire);
    d
}

/// The digest of a key and its value, as the dataset digest xors it in.
pub fn key_digest(key: &[u8], value: ValueRef<'_>, has_expire: bool) -> Digest {
    let mut d = Digest::default();
    mix(&mut d, key);
    add_value(&mut d, value, has_expire);
    d
}

/// Accumulates DEBUG DIGEST over keys met in any order, on any number of shards: per
/// database, the xor of its keys' digests. Shards' accumulators merge, then `finish` orders
/// the databases as Redis does.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DatasetDigest {
    dbs: std::collections::BTreeMap<u64, Digest>,
}

impl DatasetDigest {
    pub fn new() -> Self {
        DatasetDigest::default()
    }

    /// Adds one key of database `db`.
    pub fn add(&mut self, db: u64, key: &[u8], value: ValueRef<'_>, has_expire: bool) {
        let k = key_digest(key, value, has_expire);
        xor(self.dbs.entry(db).or_default(), &k);
    }

    /// Adds the keys another accumulator saw (another shard's).
    pub fn merge(&mut self, other: &DatasetDigest) {
        for (db, d) in &other.dbs {
            let acc = self.dbs.entry(*db).or_default();
            for (a, b) in acc.iter_mut().zip(d) {
                *a ^= b;
            }
        }
    }

    /// The dataset digest (all zeros when no key was added).
    pub fn finish(&self) -> Digest {
        let mut d = Digest::default();
        for (db, keys) in &self.dbs {
            // Redis numbers databases with an int; htonl of it.
            mix(&mut d, &(*db as u32).to_be_bytes());
            for (a, b) in d.iter_mut().zip(keys) {
                *a ^= b;
            }
        }
        d
    }
}

/// The 40 lowercase hex digits DEBUG DIGEST replies with.
pub fn to_hex(d: &Digest) -> String {
    hex::encode(d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use damselfly_storage::{EncodingLimits, Hash, Value, ZSet};

    // Expected values come from redis-server 7.0.15 (DEBUG DIGEST-VALUE / DEBUG DIGEST after
    // the commands named in each case).

    #[test]
    fn empty_dataset_is_zeros() {
        assert_eq!(to_hex(&DatasetDigest::new().finish()), "0".repeat(40));
    }

    #[test]
    fn redis_digests() {
        let limits = EncodingLimits::default();
        // SET s hello
        assert_eq!(
            to_hex(&value_digest(Value::from_bytes(b"hello").as_ref(), false)),
            REDIS_STRING_HELLO
        );
        // SET n 123 (an integer-encoded string digests as its text)
        assert_eq!(
            to_hex(&value_digest(Value::from_bytes(b"123").as_ref(), false)),
            REDIS_STRING_123
        );
        // HSET h a 1 b 2
        let mut h = Hash::default();
        h.set(b"a", b"1", &limits);
        h.set(b"b", b"2", &limits);
        let hv = Value::Hash(Box::new(h));
        assert_eq!(to_hex(&value_digest(hv.as_ref(), false)), REDIS_HASH);
        // ZADD z 1.5 a 3 b; PEXPIRE z 100000
        let mut z = ZSet::default();
        z.insert(b"a", 1.5, &limits);
        z.insert(b"b", 3.0, &limits);
        let zv = Value::ZSet(Box::new(z));
        assert_eq!(to_hex(&value_digest(zv.as_ref(), true)), REDIS_ZSET_EXPIRE);
        // The dataset: SET s hello in db 0, HSET h a 1 b 2 in db 3.
        let mut all = DatasetDigest::new();
        all.add(0, b"s", Value::from_bytes(b"hello").as_ref(), false);
        let mut other_shard = DatasetDigest::new();
        other_shard.add(3, b"h", hv.as_ref(), false);
        all.merge(&other_shard);
        assert_eq!(to_hex(&all.finish()), REDIS_DATASET);
    }

    const REDIS_STRING_HELLO: &str = "36b23a1456b2dce2c3ed252c456761301dba8060";
    const REDIS_STRING_123: &str = "89f7f51b707418f666d5b45e053bd5bbbf82ac2b";
    const REDIS_HASH: &str = "6c8f22b3bf510fdcfd6122dd0f908a80e88243bf";
    const REDIS_ZSET_EXPIRE: &str = "a35353b6fbe62c9a7e6f27a15701d2483d26dd94";
    const REDIS_DATASET: &str = "447ee0f9aab1a07cc4a6794922770f5bffd8cdbe";
}
