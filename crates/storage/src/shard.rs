//! A shard: the databases (SELECT 0..N) owned by one thread, their expiry bookkeeping, memory
//! accounting and keyspace statistics.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::evict::{EvictionConfig, Policy, Pool, CLOCK_MAX};
use crate::limits::EncodingLimits;
use crate::notify::{class, Notifications};
use crate::table::{Entry, Table};
use crate::tracking::Tracking;
use crate::undo::{ParkedUndo, Saved, UndoLog};
use crate::value::{Kind, Value};

/// Keyspace counters of one shard, summed across shards by INFO.
#[derive(Debug, Default, Clone, Copy)]
pub struct ShardStats {
    pub expired_keys: u64,
    pub evicted_keys: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expire_cycles: u64,
}

impl ShardStats {
    /// Counts a read lookup as a keyspace hit or miss.
    pub fn count_lookup(&mut self, hit: bool) {
        if hit {
            self.keyspace_hits += 1;
        } else {
            self.keyspace_misses += 1;
        }
    }
}

/// One logical database inside a shard.
#[derive(Default)]
pub struct Db {
    pub table: Table,
    /// Deadlines by key hash; stale items (TTL changed or key gone) are skipped when popped.
    deadlines: BinaryHeap<Reverse<(u64, u64)>>,
    /// Keys that currently carry a TTL.
    volatile: usize,
    /// Smoothed average remaining TTL of sampled volatile keys (INFO keyspace `avg_ttl`).
    pub avg_ttl: u64,
}

impl Db {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    pub fn volatile_count(&self) -> usize {
        self.volatile
    }

    /// Bytes of the table's index (every slot and control byte, used or free): MEMORY
    /// STATS's `overhead.hashtable.main`.
    pub fn index_bytes(&self) -> usize {
        self.table.slot_bytes()
    }

    /// Bytes of the deadline heap: MEMORY STATS's `overhead.hashtable.expires`.
    pub fn expires_bytes(&self) -> usize {
        self.deadlines.capacity() * std::mem::size_of::<Reverse<(u64, u64)>>()
    }
}

/// A key some client WATCHes: how many watches, and versions bumped by every change.
#[derive(Default)]
struct Watch {
    refs: u32,
    /// Every change.
    version: u64,
    /// Changes that were the removal of an expired key (also counted in `version`).
    expired_removals: u64,
}

/// A key's state when WATCH ran, to compare at EXEC.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WatchStamp {
    version: u64,
    expired_removals: u64,
    /// The key was present but already past its deadline.
    expired: bool,
}

type WatchMap = std::collections::HashMap<Box<[u8]>, Watch, ahash::RandomState>;

/// Where a snapshot's entries go (the persistence layer writes them to the shard's file).
pub trait SnapshotSink {
    /// Saves one entry as it is now, in database `db`.
    fn save(&mut self, db: usize, entry: &Entry);

    /// Ends the output once every entry was saved (`snapshot_step` returned the sink): the
    /// persistence layer writes its trailer and syncs its file here. Errors met while saving
    /// are reported here too.
    fn finish(self: Box<Self>) -> std::io::Result<()> {
        Ok(())
    }
}

/// A snapshot in progress: the point in time it captures is when it started. Every entry
/// present then is saved exactly once, before anything changes it: the background walk saves
/// the table stripe by stripe (each segment records how far it got), and a write to a
/// key in a stripe the walk has not reached saves that key's entry first (once) and leaves
/// the walk a note to skip it. Saved stripes cost one comparison per write.
struct Snapshot {
    version: u64,
    sink: Box<dyn SnapshotSink + Send>,
    /// Where the walk goes on: database, segment.
    cursor: (usize, usize),
}

/// The data of one shard.
pub struct Shard {
    pub dbs: Vec<Db>,
    /// Watched keys per database index (they stay with the index when SWAPDB swaps data).
    watched: Vec<WatchMap>,
    used_memory: usize,
    pub stats: ShardStats,
    pub active_expire: bool,
    /// Encoding thresholds, copied from the configuration.
    pub limits: EncodingLimits,
    /// Keys blocked clients wait on, per database (BLPOP and friends).
    awaited: Vec<KeySet>,
    /// Awaited keys written since the coordinator last took them (Redis's ready keys).
    ready: Vec<(usize, Box<[u8]>)>,
    snapshot: Option<Snapshot>,
    /// The version the last snapshot used (each new one takes the next).
    snapshot_version: u64,
    /// Counts changes: every write that changes a key bumps it, so the journal can tell a
    /// write command that changed something from one that did not.
    pub dirty: u64,
    /// Keys the shard removed on its own (deadline passed, or evicted), kept for the journal
    /// while it wants them.
    dropped_log: Option<Vec<(usize, Box<[u8]>)>>,
    /// While kept, the state before every change, so the changes can be taken back.
    undo: Option<UndoLog>,
    /// An empty undo log whose memory the next one reuses.
    spare_undo: UndoLog,
    /// Keyspace notifications: the configured classes and the events not yet published.
    pub notify: Notifications,
    /// Client-side caching: who read which key, and the invalidations owed.
    pub tracking: Tracking,
    /// The eviction policy and its settings, copied from the configuration.
    pub eviction: EvictionConfig,
    /// The best eviction candidates sampled so far.
    eviction_pool: Pool,
    /// Where the cache mode's CLOCK hand stands: database, segment, bucket.
    clock_hand: (usize, usize, usize),
    /// The latest time a caller passed in (ms): new keys' access information starts here.
    clock_ms: u64,
    rng: rand::rngs::StdRng,
}

/// How far [`Shard::evict_to`] got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// The shard is within its limit.
    Done,
    /// Keys went, but the shard is still over: the budget ran out.
    Running,
    /// The shard is over and the policy finds nothing to evict.
    Failed,
}

/// What [`Shard::rollback`] restored, for the journal.
#[derive(Debug, PartialEq)]
pub enum Undone {
    /// A key now holds what it held before (possibly nothing).
    Key { db: usize, key: Box<[u8]> },
    /// A database emptied and refilled with what it held before.
    Db(usize),
    /// Two databases swapped back.
    Swap(usize, usize),
}

type KeySet = std::collections::HashSet<Box<[u8]>, ahash::RandomState>;

fn is_expired(e: &Entry, now: u64) -> bool {
    e.expire_at() != 0 && e.expire_at() <= now
}

impl Shard {
    pub fn new(databases: usize) -> Self {
        Shard {
            dbs: (0..databases).map(|_| Db::default()).collect(),
            watched: (0..databases).map(|_| WatchMap::default()).collect(),
            used_memory: 0,
            stats: ShardStats::default(),
            active_expire: true,
            limits: EncodingLimits::default(),
            awaited: (0..databases).map(|_| KeySet::default()).collect(),
            ready: Vec::new(),
            snapshot: None,
            snapshot_version: 0,
            dirty: 0,
            dropped_log: None,
            undo: None,
            spare_undo: UndoLog::default(),
            notify: Notifications::default(),
            tracking: Tracking::default(),
            eviction: EvictionConfig::default(),
            eviction_pool: Pool::default(),
            clock_hand: (0, 0, 0),
            clock_ms: crate::now_ms(),
            rng: rand::SeedableRng::seed_from_u64(0x5eed),
        }
    }

    /// Starts a snapshot of everything present now; its entries go to `sink` as they are
    /// saved (`snapshot_step` and writes), until `snapshot_step` says it is complete.
    pub fn start_snapshot(&mut self, sink: Box<dyn SnapshotSink + Send>) {
        self.snapshot_version += 1;
        self.snapshot = Some(Snapshot {
            version: self.snapshot_version,
            sink,
            cursor: (0, 0),
        });
    }

    /// True while a snapshot runs.
    pub fn snapshot_running(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Saves unsaved stripes until about `budget` entries went out (at least one stripe). Returns the sink once
    /// the snapshot is complete (and ends it), None while there is more to save.
    pub fn snapshot_step(&mut self, budget: usize) -> Option<Box<dyn SnapshotSink + Send>> {
        let snap = self.snapshot.as_mut()?;
        let mut saved = 0;
        while snap.cursor.0 < self.dbs.len() {
            let (db, seg) = snap.cursor;
            let table = &mut self.dbs[db].table;
            if seg >= table.segment_count() {
                snap.cursor = (db + 1, 0);
                continue;
            }
            let (entries, whole) = table.mark_stripes(seg, snap.version, budget - saved);
            for e in &entries {
                snap.sink.save(db, e);
            }
            saved += entries.len();
            if whole {
                snap.cursor.1 += 1;
            }
            if saved >= budget {
                return None;
            }
        }
        self.end_snapshot()
    }

    /// Abandons a running snapshot (its file is discarded), returning its sink.
    pub fn abort_snapshot(&mut self) -> Option<Box<dyn SnapshotSink + Send>> {
        self.end_snapshot()
    }

    fn end_snapshot(&mut self) -> Option<Box<dyn SnapshotSink + Send>> {
        for d in &mut self.dbs {
            d.table.end_snapshot();
        }
        self.snapshot.take().map(|s| s.sink)
    }

    /// Saves `key`'s entry first if the running snapshot has not saved it: the snapshot
    /// keeps the state from its start, whatever is about to change.
    #[inline]
    fn before_change(&mut self, db: usize, key: &[u8]) {
        if let Some(snap) = &mut self.snapshot {
            if let Some(e) = self.dbs[db].table.take_before_write(key, snap.version) {
                snap.sink.save(db, e);
            }
        }
        if let Some(undo) = &mut self.undo {
            if undo.wants(db, key) {
                undo.save_key(db, key, self.dbs[db].table.get(key));
            }
        }
    }

    /// Starts keeping the state before every change (if not already), for [`Shard::rollback`].
    pub fn keep_undo(&mut self) {
        self.undo
            .get_or_insert_with(|| std::mem::take(&mut self.spare_undo));
        self.notify.hold();
    }

    /// Stops keeping it: the changes stay, and their notifications may go.
    pub fn drop_undo(&mut self) {
        if let Some(log) = self.undo.take() {
            self.recycle_undo(log);
        }
        self.notify.release();
    }

    /// Sets the kept undo log aside, with the notifications it holds, until its transaction's
    /// next hop here (`resume_undo`) or its end (`end_parked_undo`): changes made meanwhile
    /// belong to others and must not be taken back with it. None when none is kept.
    pub fn park_undo(&mut self) -> Option<ParkedUndo> {
        let log = self.undo.take()?;
        let events = self.notify.take_held();
        Some(ParkedUndo { log, events })
    }

    /// Keeps `parked` again: its transaction's hop runs.
    pub fn resume_undo(&mut self, parked: ParkedUndo) {
        debug_assert!(
            self.undo.is_none(),
            "another transaction's undo log is kept"
        );
        self.undo = Some(parked.log);
        self.notify.hold_again(parked.events);
    }

    /// Its transaction ended without taking it back: the changes stay and their
    /// notifications go.
    pub fn end_parked_undo(&mut self, parked: ParkedUndo) {
        self.recycle_undo(parked.log);
        self.notify.publish(parked.events);
    }

    /// Keeps an undo log's memory for the next unit of work (most are scripts, one after
    /// another, each saving a few keys).
    fn recycle_undo(&mut self, mut log: UndoLog) {
        log.clear();
        self.spare_undo = log;
    }

    /// Takes back every change since [`Shard::keep_undo`], newest first, and stops keeping
    /// the log. Returns what was restored, in the order it was restored.
    pub fn rollback(&mut self, now: u64) -> Vec<Undone> {
        let Some(mut log) = self.undo.take() else {
            return Vec::new();
        };
        let mut undone = Vec::with_capacity(log.saved.len());
        for saved in log.saved.drain(..).rev() {
            match saved {
                Saved::Key { db, key, before } => {
                    match before {
                        Some((value, expire_at)) => {
                            self.set(db, &key, value, expire_at);
                        }
                        None => {
                            self.remove(db, &key);
                        }
                    }
                    undone.push(Undone::Key { db, key });
                }
                Saved::Db { db, entries } => {
                    self.flush_db(db, now);
                    for e in entries {
                        let key = e.key().to_vec();
                        self.put(db, &key, e);
                    }
                    undone.push(Undone::Db(db));
                }
                Saved::Swap { a, b } => {
                    self.swap_dbs(a, b);
                    undone.push(Undone::Swap(a, b));
                }
            }
        }
        self.notify.discard_held();
        self.recycle_undo(log);
        undone
    }

    /// Saves every unsaved segment of `db` (before a change to the whole database).
    fn before_db_change(&mut self, db: usize) {
        if let Some(snap) = &mut self.snapshot {
            let table = &mut self.dbs[db].table;
            for seg in 0..table.segment_count() {
                for e in table.mark_segment(seg, snap.version) {
                    snap.sink.save(db, e);
                }
            }
        }
    }

    /// Keeps the keys the shard removes on its own (expired or evicted), for `take_dropped`
    /// (the journal records their deletion, as Redis propagates a DEL).
    pub fn log_dropped(&mut self, on: bool) {
        self.dropped_log = on.then(Vec::new);
    }

    /// Keys removed by expiry or eviction since the last call, as (db, key).
    pub fn take_dropped(&mut self) -> Vec<(usize, Box<[u8]>)> {
        match &mut self.dropped_log {
            Some(log) => std::mem::take(log),
            None => Vec::new(),
        }
    }

    /// Marks a key as waited on: writes to it are reported by `take_ready_keys`.
    pub fn await_key(&mut self, db: usize, key: &[u8]) {
        self.awaited[db].insert(key.into());
    }

    /// No client waits on the key any more.
    pub fn forget_awaited(&mut self, db: usize, key: &[u8]) {
        self.awaited[db].remove(key);
    }

    /// Awaited keys written since the last call (possibly repeated), as (db, key).
    pub fn take_ready_keys(&mut self) -> Vec<(usize, Box<[u8]>)> {
        std::mem::take(&mut self.ready)
    }

    /// True when awaited keys were written since `take_ready_keys` last ran.
    pub fn has_ready_keys(&self) -> bool {
        !self.ready.is_empty()
    }

    /// Records a write for blocked clients: one emptiness check when nobody waits.
    fn note_write(&mut self, db: usize, key: &[u8]) {
        if !self.awaited[db].is_empty() && self.awaited[db].contains(key) {
            self.ready.push((db, key.into()));
        }
    }

    /// Bytes of this shard's keys: the sum of their entries' `mem_size`.
    pub fn used_memory(&self) -> usize {
        self.used_memory
    }

    /// All this shard's data takes: its keys and its tables' free slots. The figure
    /// `maxmemory` is kept by.
    pub fn footprint(&self) -> usize {
        self.used_memory() + self.table_slack()
    }

    /// Bytes of the tables' free slots (each entry's `mem_size` counts its own slot): with
    /// [`Shard::used_memory`], all this shard's data takes.
    pub fn table_slack(&self) -> usize {
        self.dbs
            .iter()
            .map(|d| {
                d.table
                    .slot_bytes()
                    .saturating_sub(d.table.len() * crate::table::SLOT_SIZE)
            })
            .sum()
    }

    /// Looks a key up for a command, deleting it first if its TTL has passed (lazy expiry),
    /// and records the access (LRU clock or LFU counter) as Redis's lookupKey does.
    pub fn get(&mut self, db: usize, key: &[u8], now: u64) -> Option<&Entry> {
        self.expire_if_needed(db, key, now);
        self.record_access(db, key, now)
    }

    /// [`Shard::get`] for a read command: also counts a keyspace hit or miss, as Redis does.
    pub fn get_counted(&mut self, db: usize, key: &[u8], now: u64) -> Option<&Entry> {
        self.expire_if_needed(db, key, now);
        self.clock_ms = now;
        let draw = self.lfu_draw();
        let e = self.dbs[db].table.get_mut(key);
        Self::count_lookup(&mut self.stats, &mut self.notify, db, key, e.is_some());
        let e = e?;
        self.eviction.touch(e, now, draw);
        Some(e)
    }

    /// [`Shard::get_counted`] that leaves the key's access information alone (Redis's
    /// LOOKUP_NOTOUCH: TYPE, TTL, EXISTS, OBJECT look without using).
    pub fn inspect(&mut self, db: usize, key: &[u8], now: u64) -> Option<&Entry> {
        self.expire_if_needed(db, key, now);
        let e = self.dbs[db].table.get(key);
        Self::count_lookup(&mut self.stats, &mut self.notify, db, key, e.is_some());
        e
    }

    /// Records an access to `key` and returns its entry.
    fn record_access(&mut self, db: usize, key: &[u8], now: u64) -> Option<&Entry> {
        self.clock_ms = now;
        let draw = self.lfu_draw();
        let e = self.dbs[db].table.get_mut(key)?;
        self.eviction.touch(e, now, draw);
        Some(e)
    }

    /// The random draw an LFU counter increment needs (none under LRU).
    fn lfu_draw(&mut self) -> f64 {
        if self.eviction.policy.is_lfu() {
            rand::Rng::gen(&mut self.rng)
        } else {
            0.0
        }
    }

    /// Counts a read's keyspace hit or miss; a miss is a `keymiss` notification too.
    pub fn note_lookup(&mut self, db: usize, key: &[u8], hit: bool) {
        Self::count_lookup(&mut self.stats, &mut self.notify, db, key, hit);
    }

    fn count_lookup(
        stats: &mut ShardStats,
        notify: &mut Notifications,
        db: usize,
        key: &[u8],
        hit: bool,
    ) {
        stats.count_lookup(hit);
        if !hit {
            notify.record(class::KEY_MISS, "keymiss", db, key);
        }
    }

    /// True when the key exists (after lazy expiry).
    pub fn exists(&mut self, db: usize, key: &[u8], now: u64) -> bool {
        self.get(db, key, now).is_some()
    }

    /// Removes `key` if its deadline has passed. Without volatile keys in the database (the
    /// common case) this costs no lookup, so reads and writes probe the table once.
    pub fn expire_if_needed(&mut self, db: usize, key: &[u8], now: u64) {
        if self.dbs[db].volatile == 0 {
            return;
        }
        let expired = matches!(self.dbs[db].table.get(key), Some(e) if is_expired(e, now));
        if expired {
            self.remove_expired(db, key);
        }
    }

    /// Edits an existing value in place, keeping memory accounting right. Returns None when the
    /// key does not exist.
    pub fn update<R>(
        &mut self,
        db: usize,
        key: &[u8],
        now: u64,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Option<R> {
        self.update_if(db, key, now, |e| (f(e), true))
    }

    /// [`Shard::update`] for a write that may turn out to change nothing (SETBIT of a bit
    /// already set): `f` says whether it changed the value, and only a change counts as one
    /// (the dirty counter, WATCH, client tracking, blocked clients), as in Redis.
    pub fn update_if<R>(
        &mut self,
        db: usize,
        key: &[u8],
        now: u64,
        f: impl FnOnce(&mut Entry) -> (R, bool),
    ) -> Option<R> {
        self.expire_if_needed(db, key, now);
        self.before_change(db, key);
        self.clock_ms = now;
        let draw = self.lfu_draw();
        let e = self.dbs[db].table.get_mut(key)?;
        self.eviction.touch(e, now, draw);
        let before = e.mem_size();
        let had_ttl = e.expire_at();
        let (r, changed) = f(e);
        let after = e.mem_size();
        let now_ttl = e.expire_at();
        self.used_memory = self.used_memory + after - before.min(self.used_memory + after);
        self.track_ttl_change(db, key, had_ttl, now_ttl);
        if changed {
            self.dirty += 1;
            Self::touch(&mut self.watched[db], key);
            self.tracking.changed(key);
            self.note_write(db, key);
        }
        Some(r)
    }

    /// [`Shard::update`] for a value of one kind, with a single table lookup (the hot write
    /// path of every collection command). `Err(actual)` when the key holds another kind; then
    /// nothing is touched, so WATCH does not see a failed write.
    pub fn update_kind<R>(
        &mut self,
        db: usize,
        key: &[u8],
        now: u64,
        kind: Kind,
        f: impl FnOnce(&mut Entry) -> R,
    ) -> Result<Option<R>, Kind> {
        // Saving the segment first is harmless if nothing changes after all; checking first
        // would cost a second lookup on every write.
        self.before_change(db, key);
        self.clock_ms = now;
        let draw = self.lfu_draw();
        let Some(e) = self.dbs[db].table.get_mut(key) else {
            return Ok(None);
        };
        if is_expired(e, now) {
            self.remove_expired(db, key);
            return Ok(None);
        }
        let actual = e.kind();
        if actual != kind {
            return Err(actual);
        }
        self.eviction.touch(e, now, draw);
        self.dirty += 1;
        let before = e.mem_size();
        let had_ttl = e.expire_at();
        let r = f(e);
        let (after, now_ttl) = (e.mem_size(), e.expire_at());
        Self::touch(&mut self.watched[db], key);
        self.tracking.changed(key);
        self.used_memory = self.used_memory + after - before.min(self.used_memory + after);
        self.track_ttl_change(db, key, had_ttl, now_ttl);
        self.note_write(db, key);
        Ok(Some(r))
    }

    fn track_ttl_change(&mut self, db: usize, key: &[u8], old: u64, new: u64) {
        let d = &mut self.dbs[db];
        match (old != 0, new != 0) {
            (false, true) => d.volatile += 1,
            (true, false) => d.volatile -= 1,
            _ => {}
        }
        if new != 0 && new != old {
            let h = d.table.hash(key);
            d.deadlines.push(Reverse((new, h)));
        }
    }

    /// Sets a key, replacing any value; returns the old entry.
    pub fn set(&mut self, db: usize, key: &[u8], value: Value, expire_at: u64) -> Option<Entry> {
        self.put_new(db, key, Entry::new(key, value, expire_at))
    }

    /// [`Shard::set`] for a string given as bytes (SET's value): short strings go straight
    /// into the key's record.
    pub fn set_bytes(
        &mut self,
        db: usize,
        key: &[u8],
        bytes: &[u8],
        expire_at: u64,
    ) -> Option<Entry> {
        self.put_new(db, key, Entry::from_bytes(key, bytes, expire_at))
    }

    /// Stores a newly made entry, which starts its access information now.
    fn put_new(&mut self, db: usize, key: &[u8], mut entry: Entry) -> Option<Entry> {
        entry.set_access(self.eviction.initial_access(self.clock_ms));
        self.put(db, key, entry)
    }

    /// Stores `entry` (whose key is `key`), replacing any; returns the old entry.
    pub fn put(&mut self, db: usize, key: &[u8], entry: Entry) -> Option<Entry> {
        let expire_at = entry.expire_at();
        self.before_change(db, key);
        self.dirty += 1;
        self.used_memory += entry.mem_size();
        Self::touch(&mut self.watched[db], key);
        self.tracking.changed(key);
        let old = self.dbs[db].table.insert(entry);
        if old.is_none() {
            self.notify.record(class::NEW, "new", db, key);
        }
        let old_ttl = old.as_ref().map_or(0, Entry::expire_at);
        if let Some(o) = &old {
            self.used_memory -= o.mem_size().min(self.used_memory);
        }
        self.track_ttl_change(db, key, old_ttl, expire_at);
        self.note_write(db, key);
        old
    }

    /// Removes a key (no expiry check: the caller decides what counts as existing).
    pub fn remove(&mut self, db: usize, key: &[u8]) -> Option<Entry> {
        self.before_change(db, key);
        let old = self.dbs[db].table.remove(key)?;
        self.dirty += 1;
        Self::touch(&mut self.watched[db], key);
        self.tracking.changed(key);
        // A group reader blocked on a deleted stream is answered with an error.
        self.note_write(db, key);
        self.used_memory -= old.mem_size().min(self.used_memory);
        if old.expire_at() != 0 {
            self.dbs[db].volatile -= 1;
        }
        Some(old)
    }

    /// Deletes a live key; true when it existed.
    pub fn delete(&mut self, db: usize, key: &[u8], now: u64) -> bool {
        self.expire_if_needed(db, key, now);
        self.remove(db, key).is_some()
    }

    pub fn flush_db(&mut self, db: usize, now: u64) {
        self.before_db_change(db);
        if let Some(undo) = &mut self.undo {
            let entries = self.dbs[db].table.iter().cloned().collect();
            undo.save_db(db, entries);
        }
        self.dirty += 1;
        self.tracking.flushed();
        for (key, w) in self.watched[db].iter_mut() {
            if let Some(e) = self.dbs[db].table.get(key) {
                w.version += 1;
                if is_expired(e, now) {
                    w.expired_removals += 1;
                }
            }
        }
        let version = self.snapshot.as_ref().map_or(0, |s| s.version);
        let d = &mut self.dbs[db];
        let freed: usize = d.table.iter().map(Entry::mem_size).sum();
        *d = Db {
            table: Table::with_version(version),
            ..Db::default()
        };
        self.used_memory -= freed.min(self.used_memory);
        // Group readers blocked on streams that went are answered with an error.
        let keys: Vec<Box<[u8]>> = self.awaited[db].iter().cloned().collect();
        self.ready.extend(keys.into_iter().map(|k| (db, k)));
    }

    pub fn flush_all(&mut self, now: u64) {
        for db in 0..self.dbs.len() {
            self.flush_db(db, now);
        }
    }

    /// Swaps two databases' contents (SWAPDB within this shard).
    pub fn swap_dbs(&mut self, a: usize, b: usize) {
        // A snapshot saves each entry under the database it was in when the snapshot began.
        self.before_db_change(a);
        self.before_db_change(b);
        if let Some(undo) = &mut self.undo {
            undo.save_swap(a, b);
        }
        self.dirty += 1;
        self.touch_existing(a, b);
        self.touch_existing(b, a);
        self.dbs.swap(a, b);
        // Clients blocked in either database may now find data under their keys.
        for db in [a, b] {
            let keys: Vec<Box<[u8]>> = self.awaited[db].iter().cloned().collect();
            self.ready.extend(keys.into_iter().map(|k| (db, k)));
        }
    }

    /// Bumps the version of a watched key (every change to a key calls this).
    fn touch(watched: &mut WatchMap, key: &[u8]) {
        if !watched.is_empty() {
            if let Some(w) = watched.get_mut(key) {
                w.version += 1;
            }
        }
    }

    /// Removes a key whose deadline has passed (lazy or active expiry).
    fn remove_expired(&mut self, db: usize, key: &[u8]) {
        if self.remove(db, key).is_some() {
            if let Some(w) = self.watched[db].get_mut(key) {
                w.expired_removals += 1;
            }
            self.stats.expired_keys += 1;
            if let Some(log) = &mut self.dropped_log {
                log.push((db, key.into()));
            }
            self.notify.record(class::EXPIRED, "expired", db, key);
        }
    }

    /// Bumps the watched keys of `db` that exist in `db` or in `other` (SWAPDB: as in Redis, a
    /// watched key that exists in neither is not changed by it).
    fn touch_existing(&mut self, db: usize, other: usize) {
        let (dbs, watched) = (&self.dbs, &mut self.watched[db]);
        for (key, w) in watched.iter_mut() {
            if dbs[db].table.get(key).is_some() || dbs[other].table.get(key).is_some() {
                w.version += 1;
            }
        }
    }

    /// Starts watching a key; returns its state to compare at EXEC.
    pub fn watch(&mut self, db: usize, key: &[u8], now: u64) -> WatchStamp {
        let expired = matches!(self.dbs[db].table.get(key), Some(e) if is_expired(e, now));
        let w = self.watched[db].entry(key.into()).or_default();
        w.refs += 1;
        WatchStamp {
            version: w.version,
            expired_removals: w.expired_removals,
            expired,
        }
    }

    /// True when a watched key changed since `stamp` (Redis's rules: a key already expired
    /// at WATCH may be removed by expiry without counting as a change; a live key that has
    /// since passed its deadline counts as changed even before it is removed).
    pub fn watch_changed(&self, db: usize, key: &[u8], stamp: WatchStamp, now: u64) -> bool {
        let Some(w) = self.watched[db].get(key) else {
            return true;
        };
        let changes = w.version - stamp.version;
        if stamp.expired {
            let removals = w.expired_removals - stamp.expired_removals;
            return changes > removals.min(1);
        }
        changes > 0 || matches!(self.dbs[db].table.get(key), Some(e) if is_expired(e, now))
    }

    /// Drops one watch of a key.
    pub fn unwatch(&mut self, db: usize, key: &[u8]) {
        if let Some(w) = self.watched[db].get_mut(key) {
            w.refs -= 1;
            if w.refs == 0 {
                self.watched[db].remove(key);
            }
        }
    }

    /// Active expiry: removes keys whose deadline has passed, visiting at most `budget` heap
    /// items across all databases. Returns how many keys were removed.
    pub fn expire_cycle(&mut self, now: u64, budget: usize) -> usize {
        self.clock_ms = now;
        if !self.active_expire {
            return 0;
        }
        self.stats.expire_cycles += 1;
        let mut removed = 0;
        let mut work = 0;
        for db in 0..self.dbs.len() {
            self.sample_avg_ttl(db, now);
            while work < budget {
                let Some(&Reverse((deadline, hash))) = self.dbs[db].deadlines.peek() else {
                    break;
                };
                if deadline > now {
                    break;
                }
                self.dbs[db].deadlines.pop();
                work += 1;
                let victim = self.dbs[db]
                    .table
                    .find_by_hash(hash, |e| e.expire_at() == deadline);
                if let Some(key) = victim {
                    self.remove_expired(db, &key);
                    removed += 1;
                }
            }
            self.compact_deadlines(db, 1024);
        }
        removed
    }

    /// Evicts keys under the configured policy until this shard's data takes at most `limit`
    /// bytes, removing at most `budget` keys in this call (a large excess is worked off over
    /// several calls, as Redis bounds each eviction pass).
    pub fn evict_to(&mut self, limit: usize, budget: usize, now: u64) -> Eviction {
        let mut evicted = 0;
        while self.footprint() > limit {
            if evicted == budget {
                return Eviction::Running;
            }
            let Some((db, key)) = self.pick_victim(now) else {
                return Eviction::Failed;
            };
            self.evict(db, &key);
            evicted += 1;
        }
        Eviction::Done
    }

    fn evict(&mut self, db: usize, key: &[u8]) {
        if self.remove(db, key).is_none() {
            return;
        }
        self.stats.evicted_keys += 1;
        if let Some(log) = &mut self.dropped_log {
            log.push((db, key.into()));
        }
        self.notify.record(class::EVICTED, "evicted", db, key);
    }

    /// The next key the policy would evict, if any may go.
    fn pick_victim(&mut self, now: u64) -> Option<(usize, Box<[u8]>)> {
        let cfg = self.eviction;
        match cfg.policy {
            Policy::NoEviction => None,
            Policy::VolatileTtl => self.nearest_deadline(),
            Policy::AllKeysClock => self.sweep(),
            Policy::AllKeysRandom | Policy::VolatileRandom => {
                let volatile = cfg.policy.volatile_only();
                let dbs: Vec<usize> = (0..self.dbs.len())
                    .filter(|&db| self.candidates_in(db, volatile) > 0)
                    .collect();
                let db = *dbs.get(rand::Rng::gen_range(&mut self.rng, 0..dbs.len().max(1)))?;
                let key = self.sample_keys(db, volatile, 1).pop()?;
                Some((db, key))
            }
            _ => {
                let volatile = cfg.policy.volatile_only();
                for db in 0..self.dbs.len() {
                    if self.candidates_in(db, volatile) == 0 {
                        continue;
                    }
                    for key in self.sample_keys(db, volatile, cfg.samples) {
                        if let Some(e) = self.dbs[db].table.get(&key) {
                            self.eviction_pool.offer(cfg.score(e, now), db, &key);
                        }
                    }
                }
                // Pooled keys may have gone (or lost their TTL) since they were sampled.
                while let Some(c) = self.eviction_pool.take_best() {
                    let live = self.dbs[c.db].table.get(&c.key);
                    if live.is_some_and(|e| !volatile || e.expire_at() != 0) {
                        return Some((c.db, c.key));
                    }
                }
                None
            }
        }
    }

    /// Moves the CLOCK hand until it finds a key whose counter is 0, lowering the counters
    /// it passes. Four passes over every key lower any counter to 0, which bounds the sweep.
    fn sweep(&mut self) -> Option<(usize, Box<[u8]>)> {
        let keys: usize = self.dbs.iter().map(Db::len).sum();
        if keys == 0 {
            return None;
        }
        let (mut db, mut seg, mut bucket) = self.clock_hand;
        let mut visited = 0;
        while visited <= (CLOCK_MAX as usize + 1) * keys {
            let table = &mut self.dbs[db].table;
            if seg >= table.segment_count() {
                (db, seg, bucket) = ((db + 1) % self.dbs.len(), 0, 0);
                continue;
            }
            if bucket >= table.bucket_count(seg) {
                (seg, bucket) = (seg + 1, 0);
                continue;
            }
            let here = bucket;
            bucket += 1;
            let Some(e) = table.bucket_mut(seg, here) else {
                continue;
            };
            visited += 1;
            match e.access().min(CLOCK_MAX) {
                0 => {
                    self.clock_hand = (db, seg, bucket);
                    return Some((db, e.key().into()));
                }
                n => e.set_access(n - 1),
            }
        }
        None
    }

    /// Keys of `db` a policy may choose from.
    fn candidates_in(&self, db: usize, volatile: bool) -> usize {
        if volatile {
            self.dbs[db].volatile
        } else {
            self.dbs[db].len()
        }
    }

    /// Up to `n` random keys of `db` (with a TTL only, when `volatile`: drawn from the
    /// deadline heap, as Redis samples its expires dict).
    fn sample_keys(&mut self, db: usize, volatile: bool, n: usize) -> Vec<Box<[u8]>> {
        if volatile {
            // Mostly stale items would make samples miss: evictions leave their deadlines.
            self.compact_deadlines(db, 0);
        }
        let d = &self.dbs[db];
        let rng = &mut self.rng;
        let mut keys = Vec::with_capacity(n);
        if !volatile {
            keys.extend(
                (0..n)
                    .filter_map(|_| d.table.sample(rng))
                    .map(|e| e.key().into()),
            );
            return keys;
        }
        let heap = d.deadlines.as_slice();
        // Stale heap items (TTL changed, key gone) find nothing; bounded tries.
        for _ in 0..n * 4 {
            if keys.len() == n || heap.is_empty() {
                break;
            }
            let Reverse((deadline, hash)) = heap[rand::Rng::gen_range(rng, 0..heap.len())];
            if let Some(key) = d.table.find_by_hash(hash, |e| e.expire_at() == deadline) {
                keys.push(key);
            }
        }
        if keys.is_empty() {
            // Unlucky draws must not make a key with a TTL unevictable: take the first live one.
            keys.extend(heap.iter().find_map(|&Reverse((deadline, hash))| {
                d.table.find_by_hash(hash, |e| e.expire_at() == deadline)
            }));
        }
        keys
    }

    /// The key with the nearest deadline in any database (volatile-ttl), dropping stale heap
    /// items met on the way.
    fn nearest_deadline(&mut self) -> Option<(usize, Box<[u8]>)> {
        let mut best: Option<(u64, usize, Box<[u8]>)> = None;
        for db in 0..self.dbs.len() {
            let d = &mut self.dbs[db];
            while let Some(&Reverse((deadline, hash))) = d.deadlines.peek() {
                match d.table.find_by_hash(hash, |e| e.expire_at() == deadline) {
                    Some(key) => {
                        if best.as_ref().is_none_or(|b| deadline < b.0) {
                            best = Some((deadline, db, key));
                        }
                        break;
                    }
                    None => {
                        d.deadlines.pop();
                    }
                }
            }
        }
        best.map(|(_, db, key)| (db, key))
    }

    /// Rebuilds a deadline heap dominated by stale items (keys re-expired or deleted).
    fn compact_deadlines(&mut self, db: usize, slack: usize) {
        let d = &mut self.dbs[db];
        if d.deadlines.len() <= 2 * d.volatile + slack {
            return;
        }
        let table = &d.table;
        d.deadlines = table
            .iter()
            .filter(|e| e.expire_at() != 0)
            .map(|e| Reverse((e.expire_at(), table.hash(e.key()))))
            .collect();
    }

    fn sample_avg_ttl(&mut self, db: usize, now: u64) {
        let d = &mut self.dbs[db];
        if d.volatile == 0 {
            d.avg_ttl = 0;
            return;
        }
        let (sum, n) = d
            .deadlines
            .iter()
            .take(20)
            .filter(|Reverse((t, _))| *t > now)
            .fold((0u64, 0u64), |(s, n), Reverse((t, _))| {
                (s + (t - now), n + 1)
            });
        if let Some(sample) = sum.checked_div(n) {
            // Same smoothing as Redis: 2% weight for the new sample.
            d.avg_ttl = if d.avg_ttl == 0 {
                sample
            } else {
                (d.avg_ttl / 50) * 49 + sample / 50
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every database's entries, sorted, as text.
    fn contents(s: &Shard) -> Vec<Vec<String>> {
        s.dbs
            .iter()
            .map(|d| {
                let mut v: Vec<String> = d.table.iter().map(|e| format!("{e:?}")).collect();
                v.sort();
                v
            })
            .collect()
    }

    #[test]
    fn rollback_restores_every_change() {
        let mut s = Shard::new(4);
        s.set(0, b"a", Value::Int(1), 0);
        s.set(0, b"b", Value::Str(b"two".to_vec()), 5000);
        s.set(1, b"c", Value::Int(3), 0);
        s.set(2, b"d", Value::Int(4), 0);
        let (before, memory) = (contents(&s), s.used_memory());
        s.keep_undo();
        s.update(0, b"a", 0, |e| e.set_value(Value::Int(10)));
        s.update(0, b"a", 0, |e| e.set_value(Value::Int(11)));
        s.set(0, b"new", Value::Int(5), 0);
        s.delete(0, b"b", 0);
        s.flush_db(1, 0);
        s.set(1, b"after-flush", Value::Int(6), 0);
        s.swap_dbs(2, 3);
        s.set(2, b"after-swap", Value::Int(7), 0);
        assert_ne!(contents(&s), before);
        let undone = s.rollback(0);
        assert_eq!(
            undone.first(),
            Some(&Undone::Key {
                db: 2,
                key: b"after-swap"[..].into()
            })
        );
        assert!(undone.contains(&Undone::Swap(2, 3)) && undone.contains(&Undone::Db(1)));
        assert_eq!(contents(&s), before);
        assert_eq!(s.used_memory(), memory);
        assert_eq!(s.dbs[0].volatile_count(), 1);
        // The log is gone: later changes stay.
        s.set(0, b"a", Value::Int(12), 0);
        assert!(s.rollback(0).is_empty());
        assert_ne!(contents(&s), before);
    }

    #[test]
    fn a_parked_log_keeps_only_its_own_changes() {
        let mut s = Shard::new(1);
        s.notify.flags = class::KEYEVENT | class::GENERIC;
        s.set(0, b"held", Value::Int(1), 0);
        s.keep_undo();
        s.set(0, b"held", Value::Int(2), 0);
        s.notify.record(class::GENERIC, "mine", 0, b"held");
        let parked = s.park_undo().expect("kept");
        // Another client's work between two hops of the transaction: not in its log, and
        // its events are not held.
        s.set(0, b"other", Value::Int(3), 0);
        s.notify.record(class::GENERIC, "theirs", 0, b"other");
        let names =
            |s: &mut Shard| -> Vec<&str> { s.notify.take().iter().map(|e| e.event).collect() };
        assert_eq!(names(&mut s), ["theirs"]);
        s.resume_undo(parked);
        s.set(0, b"held", Value::Int(4), 0);
        assert!(names(&mut s).is_empty(), "the transaction's events wait");
        s.rollback(0);
        assert!(matches!(
            s.get(0, b"held", 0).map(|e| e.value().to_owned()),
            Some(Value::Int(1))
        ));
        assert!(
            s.exists(0, b"other", 0),
            "another client's write was taken back"
        );
        assert!(
            names(&mut s).is_empty(),
            "events of changes taken back never go"
        );

        // Ended without a rollback: the changes stay and their events go.
        s.keep_undo();
        s.set(0, b"held", Value::Int(5), 0);
        s.notify.record(class::GENERIC, "kept", 0, b"held");
        let parked = s.park_undo().expect("kept");
        s.end_parked_undo(parked);
        assert_eq!(names(&mut s), ["kept"]);
        assert!(s.rollback(0).is_empty());
    }

    #[test]
    fn dropping_the_log_keeps_the_changes() {
        let mut s = Shard::new(1);
        s.keep_undo();
        s.set(0, b"a", Value::Int(1), 0);
        s.drop_undo();
        assert!(s.rollback(0).is_empty());
        assert!(s.exists(0, b"a", 0));
    }

    #[test]
    fn lazy_expiry_removes_on_access() {
        let mut s = Shard::new(16);
        s.set(0, b"k", Value::Int(1), 1000);
        assert!(s.exists(0, b"k", 999));
        assert!(!s.exists(0, b"k", 1000));
        assert_eq!(s.stats.expired_keys, 1);
        assert_eq!(s.dbs[0].len(), 0);
        assert_eq!(s.used_memory(), 0);
    }

    #[test]
    fn active_expiry_is_bounded_and_complete() {
        let mut s = Shard::new(1);
        for i in 0..10_000 {
            s.set(
                0,
                format!("k{i}").as_bytes(),
                Value::Str(vec![b'x'; 50]),
                500,
            );
        }
        s.set(0, b"persistent", Value::Int(1), 0);
        assert_eq!(s.expire_cycle(100, 1000), 0, "nothing is due yet");
        assert_eq!(s.expire_cycle(600, 1000), 1000, "budget bounds the work");
        let mut total = 1000;
        while total < 10_000 {
            total += s.expire_cycle(600, 1000);
        }
        assert_eq!(s.dbs[0].len(), 1);
        assert_eq!(s.dbs[0].volatile_count(), 0);
        assert_eq!(s.stats.expired_keys, 10_000);
        let e = s.dbs[0].table.get(b"persistent").expect("kept");
        assert_eq!(s.used_memory(), e.mem_size());
    }

    #[test]
    fn changed_ttl_is_honoured() {
        let mut s = Shard::new(1);
        s.set(0, b"k", Value::Int(1), 100);
        s.update(0, b"k", 0, |e| e.set_expire_at(10_000));
        s.expire_cycle(200, 100);
        assert!(
            s.exists(0, b"k", 200),
            "the stale deadline must not delete it"
        );
        s.update(0, b"k", 0, |e| e.set_expire_at(0));
        assert_eq!(s.dbs[0].volatile_count(), 0);
        s.expire_cycle(20_000, 100);
        assert!(s.exists(0, b"k", 20_000));
    }

    #[test]
    fn watched_versions_change_with_the_key() {
        let mut s = Shard::new(2);
        let v = s.watch(0, b"k", 0);
        s.watch(0, b"k", 0);
        assert!(!s.watch_changed(0, b"k", v, 0));
        s.remove(0, b"k");
        assert!(
            !s.watch_changed(0, b"k", v, 0),
            "removing a missing key is no change"
        );
        s.set(0, b"other", Value::Int(1), 0);
        assert!(!s.watch_changed(0, b"k", v, 0));
        s.set(0, b"k", Value::Int(1), 100);
        assert!(s.watch_changed(0, b"k", v, 0));
        s.unwatch(0, b"k");
        s.unwatch(0, b"k");
        assert!(s.watched[0].is_empty());

        let live = s.watch(0, b"k", 0);
        assert!(
            s.watch_changed(0, b"k", live, 100),
            "passing the deadline is a change"
        );
        let expired = s.watch(0, b"k", 100);
        assert!(!s.exists(0, b"k", 100));
        assert!(
            !s.watch_changed(0, b"k", expired, 100),
            "removing it by expiry is not"
        );
        s.set(0, b"k", Value::Int(1), 0);
        assert!(s.watch_changed(0, b"k", expired, 100));

        let stamp = s.watch(1, b"k", 100);
        s.flush_db(1, 100);
        assert!(
            !s.watch_changed(1, b"k", stamp, 100),
            "flushing a db without the key"
        );
        s.swap_dbs(0, 1);
        assert!(
            s.watch_changed(1, b"k", stamp, 100),
            "the key appeared by SWAPDB"
        );
    }

    fn shard_with(policy: Policy) -> Shard {
        let mut s = Shard::new(2);
        s.eviction = EvictionConfig {
            policy,
            samples: 10,
            ..EvictionConfig::default()
        };
        s
    }

    /// 100 plain keys in db 0 and 100 keys with TTLs 1000..1099 in db 1.
    fn fill(s: &mut Shard) {
        for i in 0..100u64 {
            s.set(0, format!("plain{i}").as_bytes(), Value::Int(i as i64), 0);
            s.set(
                1,
                format!("ttl{i}").as_bytes(),
                Value::Int(i as i64),
                1000 + i,
            );
        }
    }

    #[test]
    fn noeviction_evicts_nothing() {
        let mut s = shard_with(Policy::NoEviction);
        fill(&mut s);
        assert_eq!(s.evict_to(0, 1000, 0), Eviction::Failed);
        assert_eq!(s.dbs[0].len() + s.dbs[1].len(), 200);
    }

    #[test]
    fn volatile_policies_never_evict_keys_without_ttl() {
        for policy in [
            Policy::VolatileLru,
            Policy::VolatileLfu,
            Policy::VolatileRandom,
            Policy::VolatileTtl,
        ] {
            let mut s = shard_with(policy);
            fill(&mut s);
            assert_eq!(s.evict_to(0, 10_000, 0), Eviction::Failed, "{policy:?}");
            assert_eq!((s.dbs[0].len(), s.dbs[1].len()), (100, 0), "{policy:?}");
            assert_eq!(s.stats.evicted_keys, 100);
        }
    }

    #[test]
    fn volatile_ttl_evicts_the_nearest_deadline_first() {
        let mut s = shard_with(Policy::VolatileTtl);
        fill(&mut s);
        s.log_dropped(true);
        s.notify.flags = class::KEYEVENT | class::EVICTED;
        let limit = s.used_memory() + s.table_slack() - 1;
        assert_eq!(s.evict_to(limit, 1, 0), Eviction::Done);
        assert_eq!(s.take_dropped(), vec![(1, b"ttl0"[..].into())]);
        assert_eq!(s.evict_to(0, 5, 0), Eviction::Running);
        let gone: Vec<Box<[u8]>> = s.take_dropped().into_iter().map(|(_, k)| k).collect();
        let want: Vec<Box<[u8]>> = (1..6)
            .map(|i| format!("ttl{i}").as_bytes().into())
            .collect();
        assert_eq!(gone, want);
        let events = s.notify.take();
        assert_eq!(events.len(), 6, "one evicted event per key");
        assert!(events.iter().all(|e| e.event == "evicted"));
    }

    #[test]
    fn allkeys_lru_evicts_the_idle_keys_first() {
        let mut s = shard_with(Policy::AllKeysLru);
        for i in 0..200 {
            s.clock_ms = 1_000;
            s.set(0, format!("k{i}").as_bytes(), Value::Int(i), 0);
        }
        // The first hundred are read an hour later; the rest stay idle.
        for i in 0..100 {
            s.get(0, format!("k{i}").as_bytes(), 3_601_000);
        }
        assert_eq!(s.evict_to(0, 100, 3_601_000), Eviction::Running);
        let kept_recent = (0..100)
            .filter(|i| s.dbs[0].table.get(format!("k{i}").as_bytes()).is_some())
            .count();
        let kept_idle = (100..200)
            .filter(|i| s.dbs[0].table.get(format!("k{i}").as_bytes()).is_some())
            .count();
        assert!(
            kept_recent > 80 && kept_idle < 20,
            "recent {kept_recent}, idle {kept_idle}"
        );
    }

    /// 200 keys, the first 100 read `reads` times, then 100 evicted: the shard, and how many
    /// of the read keys are left.
    fn evict_half_after_reads(policy: Policy, reads: usize) -> (Shard, usize) {
        let mut s = shard_with(policy);
        for i in 0..200 {
            s.set(0, format!("k{i}").as_bytes(), Value::Int(i), 0);
        }
        for _ in 0..reads {
            for i in 0..100 {
                s.get(0, format!("k{i}").as_bytes(), 0);
            }
        }
        assert_eq!(s.evict_to(0, 100, 0), Eviction::Running);
        let kept = (0..100)
            .filter(|i| s.dbs[0].table.get(format!("k{i}").as_bytes()).is_some())
            .count();
        (s, kept)
    }

    #[test]
    fn allkeys_lfu_evicts_the_rarely_used_keys_first() {
        let (_, kept_hot) = evict_half_after_reads(Policy::AllKeysLfu, 50);
        assert!(kept_hot > 80, "hot keys kept: {kept_hot}");
    }

    #[test]
    fn cache_mode_evicts_keys_unused_since_the_hand_passed() {
        let (mut s, kept_hot) = evict_half_after_reads(Policy::AllKeysClock, 2);
        assert_eq!(kept_hot, 100, "every used key outlives the unused ones");
        // The hand goes on where it stopped and empties the shard in the end.
        assert_eq!(s.evict_to(0, 1000, 0), Eviction::Failed);
        assert_eq!(s.dbs[0].len(), 0);
    }

    #[test]
    fn allkeys_random_empties_every_database() {
        let mut s = shard_with(Policy::AllKeysRandom);
        fill(&mut s);
        // The tables keep their slots: the shard stays over a limit of 0 with no keys left.
        assert_eq!(s.evict_to(0, 10_000, 0), Eviction::Failed);
        assert_eq!(s.dbs[0].len() + s.dbs[1].len(), 0);
        assert_eq!(s.used_memory(), 0);
        assert_eq!(s.stats.evicted_keys, 200);
    }

    #[test]
    fn memory_accounting_tracks_updates() {
        let mut s = Shard::new(1);
        s.set(0, b"k", Value::Str(b"abc".to_vec()), 0);
        let base = s.used_memory();
        s.update(0, b"k", 0, |e| {
            e.make_raw().extend_from_slice(&[b'z'; 1000])
        });
        assert!(s.used_memory() >= base + 1000);
        s.delete(0, b"k", 0);
        assert_eq!(s.used_memory(), 0);
    }
}
