//! Persistence: the byte formats and the files. The formats: Redis's RDB stream (version 10
//! as redis-server 7.0 writes it; versions 1 to 11 read), the compact encodings nested inside
//! it (listpack, ziplist, intset, zipmap), LZF, CRC-64, the DUMP payload, the DEBUG DIGEST
//! algorithm, and the journal's record and segment format. The files: journal segments and
//! their writer threads (`appender`). It knows storage values and numbered shards, never
//! commands, connections or the runtime: replaying a journal's commands is left to the
//! caller. docs/persistence.md describes the formats and the guarantees.

pub mod appender;
pub mod crc64;
pub mod dump;
pub mod encoding;
pub mod error;
pub mod journal;
pub mod lzf;
pub mod manifest;
pub mod rdb;
pub mod replay;
pub mod snapshot;

pub use error::{Error, ErrorKind};
pub mod digest;
