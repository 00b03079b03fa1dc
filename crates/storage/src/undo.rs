//! An undo log: what a shard looked like before a unit of work changed it, so that work can
//! be taken back. A script that locked only the shards of its declared keys and then reaches
//! another shard after writing is rolled back with it and run again with every shard locked
//! (docs/scripting.md). Each key is saved once, before its first change; a change to a whole
//! database saves the database.

use std::collections::HashSet;

use crate::table::Entry;

/// One saved state, in the order the changes happened.
pub(crate) enum Saved {
    /// A key as it was (None: absent).
    Key {
        db: usize,
        key: Box<[u8]>,
        before: Option<(crate::Value, u64)>,
    },
    /// Every entry of a database, before FLUSHDB or FLUSHALL emptied it.
    Db { db: usize, entries: Vec<Entry> },
    /// SWAPDB of two databases (undone by swapping them back).
    Swap { a: usize, b: usize },
}

/// A transaction's undo log set aside between two of its hops on the shard (others' work
/// runs meanwhile and must not land in it), with the notifications of the changes it may
/// take back, which wait for the transaction's end.
pub struct ParkedUndo {
    pub(crate) log: UndoLog,
    pub(crate) events: Vec<crate::notify::Event>,
}

#[derive(Default)]
pub struct UndoLog {
    pub(crate) saved: Vec<Saved>,
    /// Keys saved since the last whole-database change, per database (later changes to them
    /// need no copy).
    seen: Vec<HashSet<Box<[u8]>, ahash::RandomState>>,
}

impl UndoLog {
    /// True when `key` still needs saving before it changes.
    pub(crate) fn wants(&self, db: usize, key: &[u8]) -> bool {
        self.seen.get(db).is_none_or(|keys| !keys.contains(key))
    }

    pub(crate) fn save_key(&mut self, db: usize, key: &[u8], before: Option<&Entry>) {
        if self.seen.len() <= db {
            self.seen.resize_with(db + 1, HashSet::default);
        }
        self.seen[db].insert(key.into());
        self.saved.push(Saved::Key {
            db,
            key: key.into(),
            before: before.map(|e| (e.value().to_owned(), e.expire_at())),
        });
    }

    pub(crate) fn save_db(&mut self, db: usize, entries: Vec<Entry>) {
        self.seen.clear();
        self.saved.push(Saved::Db { db, entries });
    }

    pub(crate) fn save_swap(&mut self, a: usize, b: usize) {
        self.seen.clear();
        self.saved.push(Saved::Swap { a, b });
    }

    /// Empties the log for its next use, keeping its memory unless a large unit of work
    /// grew it (clearing a large set costs as much as its capacity, on every later use).
    pub(crate) fn clear(&mut self) {
        const KEPT_KEYS: usize = 1024;
        self.saved.clear();
        self.saved.shrink_to(KEPT_KEYS);
        for keys in &mut self.seen {
            if keys.capacity() > KEPT_KEYS {
                *keys = HashSet::default();
            } else {
                keys.clear();
            }
        }
    }

    /// True when nothing changed while it was kept.
    pub fn is_empty(&self) -> bool {
        self.saved.is_empty()
    }
}
