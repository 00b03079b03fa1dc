//! The context a shard-side command runs in: the shard's data, the selected database, the
//! command's clock reading and the reply being written.

use damselfly_protocol::ReplyBuf;
use damselfly_storage::{Entry, Shard};

use crate::errors;

pub struct ExecCtx<'a> {
    pub shard: &'a mut Shard,
    pub db: usize,
    /// Milliseconds since the epoch, read once per command.
    pub now: u64,
    pub reply: &'a mut ReplyBuf,
    pub shard_id: usize,
    pub num_shards: usize,
    /// `proto-max-bulk-len`, the cap on a string's size.
    pub max_bulk_len: u64,
}

impl<'a> ExecCtx<'a> {
    /// Looks a key up for reading, counting keyspace hits and misses like Redis.
    pub fn lookup_read(&mut self, key: &[u8]) -> Option<&Entry> {
        let found = self.shard.exists(self.db, key, self.now);
        self.shard.stats.count_lookup(found);
        self.shard.dbs[self.db].table.get(key)
    }

    /// Looks a key up for writing (lazy expiry, no hit/miss counting).
    pub fn lookup_write(&mut self, key: &[u8]) -> Option<&Entry> {
        self.shard.get(self.db, key, self.now)
    }

    pub fn error(&mut self, msg: &str) {
        self.reply.error(msg);
    }

    pub fn wrongtype(&mut self) {
        self.reply.error(errors::WRONGTYPE);
    }
}
