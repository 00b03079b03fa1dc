//! The context a shard-side command runs in: the shard's data, the selected database, the
//! command's clock reading and the reply being written.

use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{Collection, EncodingLimits, Entry, Kind, Shard, Value};

use crate::errors;

/// A write found the key holding another type; WRONGTYPE has been replied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrongType;

/// What the journal records of a write command. By default its own words, when it changed
/// something; a handler whose words would not reproduce its effect when replayed (a relative
/// time, a random pick, a float computed again) records the effect instead with
/// [`ExecCtx::propagate`], as Redis rewrites what it propagates to the AOF and replicas.
#[derive(Debug, Default)]
pub struct Effects {
    /// The commands a handler recorded in place of its own words.
    pub rewritten: Option<Vec<Vec<Vec<u8>>>>,
}

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
    /// Present while the journal is on: where a handler records a rewritten effect.
    pub effects: Option<&'a mut Effects>,
}

impl<'a> ExecCtx<'a> {
    /// Records `args` in the journal in place of the command's own words (once per call; a
    /// handler may record several commands). Nothing happens while the journal is off.
    pub fn propagate(&mut self, args: &[&[u8]]) {
        if let Some(e) = &mut self.effects {
            e.rewritten
                .get_or_insert_with(Vec::new)
                .push(args.iter().map(|a| a.to_vec()).collect());
        }
    }

    /// Whether the journal is on (so a handler need not build words [`ExecCtx::propagate`]
    /// would drop).
    pub fn journaling(&self) -> bool {
        self.effects.is_some()
    }

    /// Records the keyspace notification `event` of `class` (damselfly_storage::notify::class)
    /// for `key`; the shard's thread publishes it after the command, if that class is on.
    pub fn notify(&mut self, class: u32, event: &'static str, key: &[u8]) {
        self.shard.notify.record(class, event, self.db, key);
    }

    /// Looks a key up for reading, counting keyspace hits and misses like Redis.
    pub fn lookup_read(&mut self, key: &[u8]) -> Option<&Entry> {
        self.shard.get_counted(self.db, key, self.now)
    }

    /// Looks a key up for reading without recording an access (Redis's LOOKUP_NOTOUCH: TYPE,
    /// TTL and EXISTS look at a key without using it); counts hits and misses.
    pub fn inspect(&mut self, key: &[u8]) -> Option<&Entry> {
        self.shard.inspect(self.db, key, self.now)
    }

    /// Looks at a key without counting or recording an access (OBJECT, MEMORY USAGE).
    pub fn peek(&mut self, key: &[u8]) -> Option<&Entry> {
        self.shard.expire_if_needed(self.db, key, self.now);
        self.shard.dbs[self.db].table.get(key)
    }

    /// Looks a key up for writing (lazy expiry, no hit/miss counting).
    pub fn lookup_write(&mut self, key: &[u8]) -> Option<&Entry> {
        self.shard.get(self.db, key, self.now)
    }

    /// Reads the collection of type `T` under `key`: `found` writes the reply when it exists,
    /// `missing` when it does not; another type gets WRONGTYPE.
    pub fn read_as<T: Collection>(
        &mut self,
        key: &[u8],
        missing: impl FnOnce(&mut ReplyBuf),
        found: impl FnOnce(&T, &mut ReplyBuf),
    ) {
        let value = self
            .shard
            .get_counted(self.db, key, self.now)
            .map(Entry::value);
        match value {
            None => missing(self.reply),
            Some(v) => match T::of(v) {
                Some(c) => found(c, self.reply),
                None => self.reply.error(errors::WRONGTYPE),
            },
        }
    }

    /// Edits the collection of type `T` under `key` with one table lookup, keeping memory
    /// accounting and WATCH versions right, and deletes the key if it became empty.
    /// `Ok(None)` when the key is missing.
    pub fn write_as<T: Collection, R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut T, &mut ReplyBuf, &EncodingLimits) -> R,
    ) -> Result<Option<R>, WrongType> {
        let limits = self.shard.limits;
        let reply = &mut *self.reply;
        let done = self
            .shard
            .update_kind(self.db, key, self.now, T::KIND, |e| {
                let r = e.collection_mut::<T>().map(|c| f(c, reply, &limits));
                (r, e.value().is_empty_collection())
            });
        match done {
            Err(_) => {
                self.reply.error(errors::WRONGTYPE);
                Err(WrongType)
            }
            Ok(None) => Ok(None),
            Ok(Some((r, empty))) => {
                if empty {
                    self.shard.remove(self.db, key);
                    // Redis names the command's own event first (`lpop`, then `del`).
                    self.shard
                        .notify
                        .record_after_next(class::GENERIC, "del", self.db, key);
                }
                Ok(r)
            }
        }
    }

    /// [`ExecCtx::write_as`], creating an empty collection first when the key is missing.
    /// None after WRONGTYPE.
    pub fn write_or_create<T: Collection, R>(
        &mut self,
        key: &[u8],
        f: impl FnOnce(&mut T, &mut ReplyBuf, &EncodingLimits) -> R,
    ) -> Option<R> {
        let limits = self.shard.limits;
        let mut f = Some(f);
        let mut run =
            |c: &mut T, r: &mut ReplyBuf, l: &EncodingLimits| f.take().map(|f| f(c, r, l));
        match self.write_as(key, &mut run) {
            Err(WrongType) => None,
            Ok(Some(r)) => r,
            Ok(None) => {
                let mut c = T::default();
                let r = run(&mut c, self.reply, &limits);
                self.store(key, c.into_value());
                r
            }
        }
    }

    /// HDEL, SREM, ZREM: removes each of `items` from the collection under `key` and replies
    /// with how many were there (0 for a missing key); when some were, records `event` of
    /// `event_class` (then `del` if the key went).
    pub fn remove_each<'i, T: Collection>(
        &mut self,
        key: &[u8],
        items: impl Iterator<Item = &'i [u8]>,
        remove: impl Fn(&mut T, &[u8]) -> bool,
        event_class: u32,
        event: &'static str,
    ) {
        let removed = self.write_as(key, |c: &mut T, _, _| {
            items.filter(|item| remove(c, item)).count() as i64
        });
        if let Ok(n) = removed {
            let n = n.unwrap_or(0);
            if n > 0 {
                self.notify(event_class, event, key);
            }
            self.reply.int(n);
        }
    }

    /// The type of a key about to be written: Some(exists), or None after WRONGTYPE when it
    /// holds another kind than `kind` (multi-key commands check every key before changing any).
    pub fn check_write(&mut self, key: &[u8], kind: Kind) -> Option<bool> {
        match self
            .shard
            .get(self.db, key, self.now)
            .map(|e| e.value().kind())
        {
            None => Some(false),
            Some(k) if k == kind => Some(true),
            Some(_) => {
                self.reply.error(errors::WRONGTYPE);
                None
            }
        }
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

    /// A store command's result (SINTERSTORE, ZUNIONSTORE, ZRANGESTORE...), as Redis's setKey
    /// and dbDelete do it: a non-empty `value` replaces the key without a TTL (a key past its
    /// deadline expiring first) and records `event` of `event_class`; an empty one deletes
    /// the key, recording `del` if there was one (with no expiry check, as dbDelete).
    pub fn store_result(
        &mut self,
        key: &[u8],
        value: Value,
        event_class: u32,
        event: &'static str,
    ) {
        if value.is_empty_collection() {
            if self.shard.remove(self.db, key).is_some() {
                self.notify(class::GENERIC, "del", key);
            }
        } else {
            self.shard.get(self.db, key, self.now);
            self.shard.set(self.db, key, value, 0);
            self.notify(event_class, event, key);
        }
    }

    /// The clock of stream bookkeeping (delivery and seen times): the command's time, or the
    /// wall clock while the journal is replayed, whose commands run at time 0 so that nothing
    /// expires mid-replay.
    pub fn stream_clock(&self) -> u64 {
        if self.now == 0 {
            damselfly_storage::now_ms()
        } else {
            self.now
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
