//! One shard's intent-lock table (Very Lightweight Locking). A transaction scheduled on the
//! shard records an *intent* on every key (or whole database) it will touch, tagged with its
//! transaction id. Nothing waits inside the table: it only answers three questions.
//!
//! - May a transaction be added? Not if a *larger* id already holds a conflicting intent: the
//!   newcomer would have to be ordered before it, and that one may already be running. The
//!   coordinator then retries with a fresh (larger) id. So a transaction only ever waits for
//!   smaller ids, and waits cannot form a cycle.
//! - Is a transaction's turn here? When no *smaller* id holds a conflicting intent.
//! - May a plain command run now? When no intent at all conflicts with it.

use std::collections::HashMap;

pub type TxId = u64;

/// Shared (read) or exclusive (write) intent.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    Shared,
    Exclusive,
}

impl Mode {
    pub fn conflicts(self, other: Mode) -> bool {
        self == Mode::Exclusive || other == Mode::Exclusive
    }

    pub fn for_write(write: bool) -> Mode {
        if write {
            Mode::Exclusive
        } else {
            Mode::Shared
        }
    }
}

/// What a transaction locks on one shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lock {
    Key {
        db: u16,
        key: Box<[u8]>,
        mode: Mode,
    },
    /// A whole database (FLUSHDB, SWAPDB, KEYS, DBSIZE, ...).
    Db {
        db: u16,
        mode: Mode,
    },
}

impl Lock {
    fn db(&self) -> u16 {
        match self {
            Lock::Key { db, .. } | Lock::Db { db, .. } => *db,
        }
    }

    fn mode(&self) -> Mode {
        match self {
            Lock::Key { mode, .. } | Lock::Db { mode, .. } => *mode,
        }
    }
}

/// Adds `lock` to `locks`, merging with an existing lock on the same key or database (the
/// stronger mode wins).
pub fn add_lock(locks: &mut Vec<Lock>, lock: Lock) {
    for l in locks.iter_mut() {
        match (&mut *l, &lock) {
            (
                Lock::Key { db, key, mode },
                Lock::Key {
                    db: d,
                    key: k,
                    mode: m,
                },
            ) if db == d && key == k => {
                *mode = (*mode).max(*m);
                return;
            }
            (Lock::Db { db, mode }, Lock::Db { db: d, mode: m }) if db == d => {
                *mode = (*mode).max(*m);
                return;
            }
            _ => {}
        }
    }
    locks.push(lock);
}

/// Which transactions a conflict check looks at, relative to an id.
#[derive(Clone, Copy)]
enum Side {
    Any,
    Larger,
    Smaller,
}

type KeyMap = HashMap<Box<[u8]>, Vec<(TxId, Mode)>, ahash::RandomState>;

/// Intents by key and by database, each list sorted by transaction id.
#[derive(Default)]
pub struct LockTable {
    keys: Vec<KeyMap>,
    dbs: Vec<(TxId, u16, Mode)>,
    intents: usize,
}

impl LockTable {
    pub fn is_empty(&self) -> bool {
        self.intents == 0
    }

    /// True when a plain command needing `locks` conflicts with no intent.
    pub fn is_free(&self, locks: &[Lock]) -> bool {
        self.intents == 0 || !locks.iter().any(|l| self.conflict(0, l, Side::Any))
    }

    /// True when a transaction on `side` of `id` holds an intent conflicting with `lock`.
    fn conflict(&self, id: TxId, lock: &Lock, side: Side) -> bool {
        let on_side = |other: TxId| match side {
            Side::Any => true,
            Side::Larger => other > id,
            Side::Smaller => other < id,
        };
        let (db, mode) = (lock.db(), lock.mode());
        if self
            .dbs
            .iter()
            .any(|&(t, d, m)| d == db && on_side(t) && m.conflicts(mode))
        {
            return true;
        }
        let Some(map) = self.keys.get(db as usize) else {
            return false;
        };
        match lock {
            Lock::Key { key, .. } => map
                .get(key)
                .is_some_and(|list| list.iter().any(|&(t, m)| on_side(t) && m.conflicts(mode))),
            Lock::Db { .. } => map
                .values()
                .flatten()
                .any(|&(t, m)| on_side(t) && m.conflicts(mode)),
        }
    }

    /// Records `id`'s intents, unless a larger id already holds a conflicting one (then
    /// nothing is recorded and the caller must retry with a fresh id).
    pub fn try_acquire(&mut self, id: TxId, locks: &[Lock]) -> bool {
        if locks.iter().any(|l| self.conflict(id, l, Side::Larger)) {
            return false;
        }
        for lock in locks {
            match lock {
                Lock::Key { db, key, mode } => {
                    let db = *db as usize;
                    if self.keys.len() <= db {
                        self.keys.resize_with(db + 1, KeyMap::default);
                    }
                    let list = self.keys[db].entry(key.clone()).or_default();
                    let at = list.partition_point(|&(t, _)| t < id);
                    list.insert(at, (id, *mode));
                }
                Lock::Db { db, mode } => {
                    let at = self.dbs.partition_point(|&(t, _, _)| t < id);
                    self.dbs.insert(at, (id, *db, *mode));
                }
            }
            self.intents += 1;
        }
        true
    }

    /// True when no smaller id holds an intent conflicting with any of `locks`.
    pub fn is_granted(&self, id: TxId, locks: &[Lock]) -> bool {
        !locks.iter().any(|l| self.conflict(id, l, Side::Smaller))
    }

    /// Drops `id`'s intents.
    pub fn release(&mut self, id: TxId, locks: &[Lock]) {
        for lock in locks {
            match lock {
                Lock::Key { db, key, .. } => {
                    let Some(map) = self.keys.get_mut(*db as usize) else {
                        continue;
                    };
                    if let Some(list) = map.get_mut(key) {
                        if let Some(at) = list.iter().position(|&(t, _)| t == id) {
                            list.remove(at);
                            self.intents -= 1;
                        }
                        if list.is_empty() {
                            map.remove(key);
                        }
                    }
                }
                Lock::Db { db, .. } => {
                    if let Some(at) = self.dbs.iter().position(|&(t, d, _)| t == id && d == *db) {
                        self.dbs.remove(at);
                        self.intents -= 1;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str, mode: Mode) -> Lock {
        Lock::Key {
            db: 0,
            key: k.as_bytes().into(),
            mode,
        }
    }

    use Mode::{Exclusive as X, Shared as S};

    #[test]
    fn smaller_ids_go_first_and_larger_conflicts_reject() {
        let mut t = LockTable::default();
        assert!(t.try_acquire(5, &[key("a", X)]));
        assert!(t.is_granted(5, &[key("a", X)]));
        assert!(t.try_acquire(7, &[key("a", X), key("b", X)]));
        assert!(!t.is_granted(7, &[key("a", X), key("b", X)]));
        // 6 would have to run before 7, which may already be granted elsewhere.
        assert!(!t.try_acquire(6, &[key("b", S)]));
        // ...but it may go first on keys 7 does not touch.
        assert!(t.try_acquire(6, &[key("c", X)]));
        assert!(t.is_granted(6, &[key("c", X)]));
        t.release(5, &[key("a", X)]);
        assert!(t.is_granted(7, &[key("a", X), key("b", X)]));
        t.release(7, &[key("a", X), key("b", X)]);
        t.release(6, &[key("c", X)]);
        assert!(t.is_empty());
        assert!(t.keys[0].is_empty());
    }

    #[test]
    fn readers_share() {
        let mut t = LockTable::default();
        assert!(t.try_acquire(2, &[key("a", S)]));
        assert!(t.try_acquire(1, &[key("a", S)]));
        assert!(t.is_granted(2, &[key("a", S)]));
        assert!(t.is_free(&[key("a", S)]));
        assert!(!t.is_free(&[key("a", X)]));
        assert!(t.is_free(&[key("b", X)]));
        assert!(t.is_free(&[Lock::Key {
            db: 1,
            key: b"a"[..].into(),
            mode: X
        }]));
        assert!(!t.is_free(&[Lock::Db { db: 0, mode: X }]));
    }

    #[test]
    fn database_locks_cover_their_keys() {
        let mut t = LockTable::default();
        assert!(t.try_acquire(3, &[key("a", S)]));
        assert!(t.try_acquire(4, &[Lock::Db { db: 0, mode: X }]));
        assert!(!t.is_granted(4, &[Lock::Db { db: 0, mode: X }]));
        assert!(!t.is_free(&[key("zzz", S)]));
        assert!(t.is_free(&[Lock::Key {
            db: 1,
            key: b"zzz"[..].into(),
            mode: X
        }]));
        assert!(!t.try_acquire(2, &[key("q", S)]), "4 holds the whole db");
        t.release(3, &[key("a", S)]);
        assert!(t.is_granted(4, &[Lock::Db { db: 0, mode: X }]));
    }

    #[test]
    fn merging_keeps_the_stronger_mode() {
        let mut locks = Vec::new();
        add_lock(&mut locks, key("a", S));
        add_lock(&mut locks, key("a", X));
        add_lock(&mut locks, key("a", S));
        add_lock(&mut locks, Lock::Db { db: 1, mode: S });
        assert_eq!(locks, vec![key("a", X), Lock::Db { db: 1, mode: S }]);
    }
}
