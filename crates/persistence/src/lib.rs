//! Redis-compatible persistence codecs, shared by snapshots (SAVE/BGSAVE and loading at
//! start-up), DUMP/RESTORE and DEBUG DIGEST. This crate owns the byte formats: Redis's RDB
//! stream (version 10 as redis-server 7.0 writes it; versions 1 to 11 read), the compact
//! encodings nested inside it (listpack, ziplist, intset, zipmap), LZF, CRC-64, the DUMP
//! payload and the DEBUG DIGEST algorithm. It turns storage values into bytes and back and
//! does nothing else: no files, no threads, no knowledge of shards or commands. Callers hand
//! it a `std::io::Write` or `std::io::Read`.

pub mod crc64;
pub mod dump;
pub mod encoding;
pub mod error;
pub mod journal;
pub mod lzf;
pub mod rdb;

pub use error::{Error, ErrorKind};
pub mod digest;
