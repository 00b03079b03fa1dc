//! Redis's RDB format (rdb.h, rdb.c of Redis 7.0.15).
//!
//! A stream is `REDIS` and a 4-digit version, then records each introduced by a one-byte
//! opcode or value type, then the EOF opcode and (from version 5) a CRC-64 of everything
//! before the trailer, little-endian, 0 when the writer had checksums off.
//!
//! Lengths use 1, 2, 5 or 9 bytes: the top two bits of the first byte select 6 bits, 14 bits
//! (big-endian), or a 32- or 64-bit big-endian length in the following bytes; `11` marks a
//! specially encoded string instead (8-, 16- or 32-bit little-endian integer, or LZF).

mod read;
pub mod stream;
mod write;

pub use read::{Entry, Event, RdbReader};
pub use write::{RdbWriter, WriteOptions};

pub(crate) use read::{read_value, Input};
pub(crate) use write::{value_type, write_value, Encoder};

/// The version written: Redis 7.0's.
pub const RDB_VERSION: u16 = 10;
/// The newest version read (Redis 7.2's; it adds only `SET_LISTPACK` and a stream encoding).
pub const MAX_READ_VERSION: u16 = 11;
/// `redis-ver` written in the header: the version whose format and encodings we follow.
pub const REDIS_VERSION: &str = "7.0.15";

/// Value types (the byte before a key).
pub(crate) mod types {
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const MODULE: u8 = 6;
    pub const MODULE_2: u8 = 7;
    pub const HASH_ZIPMAP: u8 = 9;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS_2: u8 = 19;
    pub const SET_LISTPACK: u8 = 20;
    pub const STREAM_LISTPACKS_3: u8 = 21;
}

/// Opcodes (bytes that are not value types).
pub(crate) mod opcodes {
    pub const FUNCTION2: u8 = 245;
    pub const FUNCTION: u8 = 246;
    pub const MODULE_AUX: u8 = 247;
    pub const IDLE: u8 = 248;
    pub const FREQ: u8 = 249;
    pub const AUX: u8 = 250;
    pub const RESIZEDB: u8 = 251;
    pub const EXPIRETIME_MS: u8 = 252;
    pub const EXPIRETIME: u8 = 253;
    pub const SELECTDB: u8 = 254;
    pub const EOF: u8 = 255;
}

/// String encodings after a `11xxxxxx` length byte.
pub(crate) mod enc {
    pub const INT8: u8 = 0;
    pub const INT16: u8 = 1;
    pub const INT32: u8 = 2;
    pub const LZF: u8 = 3;
}

/// Quicklist node containers (LIST_QUICKLIST_2).
pub(crate) const CONTAINER_PLAIN: u64 = 1;
pub(crate) const CONTAINER_PACKED: u64 = 2;

/// `double2ll`: the integer a score equals exactly, when within ±2^62 (Redis stores such
/// scores as listpack integers, and so turns -0 into 0).
pub(crate) fn double_to_i64(d: f64) -> Option<i64> {
    let half = (i64::MAX / 2) as f64;
    if !(-half..=half).contains(&d) {
        return None;
    }
    let l = d as i64;
    (l as f64 == d).then_some(l)
}

#[cfg(test)]
mod tests;
