//! The context a shard-side command runs in: the shard's data, the selected database, the
//! command's clock reading and the reply being written.

use damselfly_protocol::ReplyBuf;
use damselfly_storage::{EncodingLimits, Entry, Kind, Shard, Value};

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

    /// Looks a key up for reading and checks its type. Returns the value (None when missing)
    /// with the reply, or None after writing WRONGTYPE.
    pub fn read(&mut self, key: &[u8], kind: Kind) -> Option<(Option<&Value>, &mut ReplyBuf)> {
        let found = self.shard.exists(self.db, key, self.now);
        self.shard.stats.count_lookup(found);
        let value = self.shard.dbs[self.db].table.get(key).map(|e| &e.value);
        match value {
            Some(v) if v.kind() != kind => {
                self.reply.error(errors::WRONGTYPE);
                None
            }
            v => Some((v, &mut *self.reply)),
        }
    }

    /// Checks the type of a key about to be written: Some(exists), or None after WRONGTYPE.
    pub fn check_write(&mut self, key: &[u8], kind: Kind) -> Option<bool> {
        match self
            .shard
            .get(self.db, key, self.now)
            .map(|e| e.value.kind())
        {
            None => Some(false),
            Some(k) if k == kind => Some(true),
            Some(_) => {
                self.reply.error(errors::WRONGTYPE);
                None
            }
        }
    }

    /// Edits the existing value under `key` (type already checked), keeping memory accounting
    /// and WATCH versions right, and deletes the key if it became an empty collection.
    pub fn modify<R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut Value, &mut ReplyBuf, &EncodingLimits) -> R,
    ) -> Option<R> {
        let limits = self.shard.limits;
        let reply = &mut *self.reply;
        let (r, empty) = self.shard.update(self.db, key, self.now, |e| {
            let r = f(&mut e.value, reply, &limits);
            (r, e.value.is_empty_collection())
        })?;
        if empty {
            self.shard.remove(self.db, key);
        }
        Some(r)
    }

    /// Stores a new value without a TTL (replacing whatever was there), unless it is an empty
    /// collection: then the key is deleted, as Redis never keeps empty collections.
    pub fn store(&mut self, key: &[u8], value: Value) {
        if value.is_empty_collection() {
            self.shard.remove(self.db, key);
        } else {
            self.shard.set(self.db, key, value, 0);
        }
    }

    pub fn limits(&self) -> EncodingLimits {
        self.shard.limits
    }

    pub fn error(&mut self, msg: &str) {
        self.reply.error(msg);
    }

    pub fn wrongtype(&mut self) {
        self.reply.error(errors::WRONGTYPE);
    }
}
