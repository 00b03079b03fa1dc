//! The command layer: the command table (name, arity, flags, key positions, how a command is
//! routed) and the command families that run against one shard. Families never see sockets,
//! threads or other shards: the coordination layer decides where a command runs and merges
//! per-shard replies of commands that span shards.

pub mod args;
pub mod bitmap_family;
pub mod blocking;
pub mod command_docs;
pub mod config;
pub mod config_rewrite;
pub mod ctx;
pub mod dump_family;
pub mod errors;
pub mod geo_family;
mod geohash;
pub mod hash_family;
pub mod hll_family;
pub mod introspection;
pub mod keys_family;
pub mod latency;
mod lcs;
pub mod list_family;
mod long_double;
mod partial_sort;
pub mod redis_meta;
pub mod scan_args;
pub mod server_family;
pub mod set_family;
pub mod slowlog;
pub mod sort_family;
pub mod stats;
pub mod stream_family;
pub mod stream_group_family;
pub mod string_family;
pub mod table;
pub mod zset_family;

pub use args::Args;
pub use ctx::{Effects, ExecCtx};
pub use table::{lookup, CommandSpec, CoordCmd, Handler, Merge, Route, COMMANDS};
