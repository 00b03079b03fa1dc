//! Coordination: everything between a parsed request and a shard. It routes keys to shards,
//! runs local commands inline, ships remote ones through per-shard mailboxes (squashing a
//! round's commands for one shard into one message), fans multi-key and whole-keyspace commands
//! out and merges their replies, and implements the commands that need connection or
//! server-wide state (HELLO, CLIENT, INFO, CONFIG, COMMAND, DEBUG, ...).
//!
//! It is runtime-agnostic: it uses only `std` futures, crossbeam channels, `AtomicWaker` and
//! `futures-channel` oneshots, so the same code runs under the io_uring (glommio) and the epoll
//! (tokio) backends.

pub mod acl_family;
mod affinity;
pub mod blocking;
pub mod client;
pub mod cluster;
mod conn_family;
pub mod connection;
pub mod crash;
mod direct_reply;
mod durability;
mod fanout;
mod latency_family;
pub mod mailbox;
mod maxmemory;
mod memory_family;
pub mod messages;
pub mod metrics;
mod multi_family;
pub mod pause;
mod pubsub_family;
mod reload;
mod reply_slots;
mod scripting;
mod server_family;
mod snapshots;
mod tracking_family;
pub mod tx;
pub mod worker;

pub use affinity::MovedClient;
pub use cluster::{Cluster, JournalFiles, ServerInfo, ShutdownSignal};
pub use connection::{Connection, PeerInfo, Step};
pub use durability::ShardStart;
pub use mailbox::{mailbox, Mailbox, MailboxSender};
pub use messages::ShardMsg;
pub use scripting::restore_functions;
pub use snapshots::{save_schedule, SaveState, Saves};
pub use worker::Worker;
