//! One shard's data: the keyspace of each logical database, values, per-key expiry and memory
//! accounting. Only the shard's owning thread touches it, so nothing here locks, and nothing
//! here does I/O or knows about connections.

pub mod glob;
pub mod shard;
pub mod table;
pub mod value;

pub use shard::{Db, Shard, ShardStats};
pub use table::{Entry, Table, SCAN_SHARD_BITS};
pub use value::Value;

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
