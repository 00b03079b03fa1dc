//! Transactions across shards without a global lock (Very Lightweight Locking, as Dragonfly's
//! docs/transaction.md describes): ids from one counter, per-shard intent locks and per-shard
//! queues of hops. `locks` and `queue` are one shard's side; `coordinator` is the
//! connection's side. docs/transactions.md explains the algorithm and why it cannot deadlock.

pub(crate) mod coordinator;
pub mod locks;
pub mod plan;
pub mod queue;
mod undo;

pub(crate) use coordinator::{ShardWork, Tx};
pub use locks::{merge_locks, Lock, Mode, TxId};
pub use queue::TxQueue;
