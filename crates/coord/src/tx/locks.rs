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
        db: usize,
        key: Box<[u8]>,
        mode: Mode,
    },
    /// A whole database (FLUSHDB, SWAPDB, KEYS, DBSIZE, ...).
    Db { db: usize, mode: Mode },
    /// Every database (FLUSHALL): one intent however many databases are configured.
    AllDbs { mode: Mode },
}

impl Lock {
    /// Whether the transaction holding it may write (its records then go to the journal).
    pub(crate) fn writes(&self) -> bool {
        self.mode() == Mode::Exclusive
    }

    /// The database it covers; None for every database.
    fn scope(&self) -> Option<usize> {
        match self {
            Lock::Key { db, .. } | Lock::Db { db, .. } => Some(*db),
            Lock::AllDbs { .. } => None,
        }
    }

    pub(crate) fn mode(&self) -> Mode {
        match self {
            Lock::Key { mode, .. } | Lock::Db { mode, .. } | Lock::AllDbs { mode } => *mode,
        }
    }

    /// What it locks, as a sortable value (mode aside).
    fn target(&self) -> (u8, usize, &[u8]) {
        match self {
            Lock::Key { db, key, .. } => (0, *db, key),
            Lock::Db { db, .. } => (1, *db, &[]),
            Lock::AllDbs { .. } => (2, 0, &[]),
        }
    }
}

/// Merges intents on the same key or database (the stronger mode wins). Sorts, so a command
/// with many keys costs O(n log n), not a scan per key.
pub fn merge_locks(locks: &mut Vec<Lock>) {
    if locks.len() < 2 {
        return;
    }
    locks.sort_unstable_by(|a, b| a.target().cmp(&b.target()));
    locks.dedup_by(|later, kept| {
        if later.target() != kept.target() {
            return false;
        }
        let mode = later.mode().max(kept.mode());
        match kept {
            Lock::Key { mode: m, .. } | Lock::Db { mode: m, .. } | Lock::AllDbs { mode: m } => {
                *m = mode
            }
        }
        true
    });
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
    /// Whole-database intents; None covers every database.
    dbs: Vec<(TxId, Option<usize>, Mode)>,
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
        let (scope, mode) = (lock.scope(), lock.mode());
        let overlaps = |d: Option<usize>| d.is_none() || scope.is_none() || d == scope;
        if self
            .dbs
            .iter()
            .any(|&(t, d, m)| overlaps(d) && on_side(t) && m.conflicts(mode))
        {
            return true;
        }
        let conflicts_in = |map: &KeyMap| {
            map.values()
                .flatten()
                .any(|&(t, m)| on_side(t) && m.conflicts(mode))
        };
        match lock {
            Lock::Key { db, key, .. } => self
                .keys
                .get(*db)
                .and_then(|map| map.get(key))
                .is_some_and(|list| list.iter().any(|&(t, m)| on_side(t) && m.conflicts(mode))),
            Lock::Db { db, .. } => self.keys.get(*db).is_some_and(conflicts_in),
            Lock::AllDbs { .. } => self.keys.iter().any(conflicts_in),
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
                    let db = *db;
                    if self.keys.len() <= db {
                        self.keys.resize_with(db + 1, KeyMap::default);
                    }
                    let list = self.keys[db].entry(key.clone()).or_default();
                    let at = list.partition_point(|&(t, _)| t < id);
                    list.insert(at, (id, *mode));
                }
                Lock::Db { .. } | Lock::AllDbs { .. } => {
                    let at = self.dbs.partition_point(|&(t, _, _)| t < id);
                    self.dbs.insert(at, (id, lock.scope(), lock.mode()));
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
                    let Some(map) = self.keys.get_mut(*db) else {
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
                Lock::Db { .. } | Lock::AllDbs { .. } => {
                    let scope = lock.scope();
                    if let Some(at) = self.dbs.iter().position(|&(t, d, _)| t == id && d == scope) {
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
    fn an_all_databases_intent_covers_every_database() {
        let mut t = LockTable::default();
        let far = Lock::Key {
            db: 70_000,
            key: b"k"[..].into(),
            mode: S,
        };
        assert!(t.try_acquire(3, std::slice::from_ref(&far)));
        assert!(t.try_acquire(4, &[Lock::AllDbs { mode: X }]));
        assert!(!t.is_granted(4, &[Lock::AllDbs { mode: X }]));
        assert!(!t.is_free(&[Lock::Db {
            db: 65_536,
            mode: S
        }]));
        assert!(
            !t.try_acquire(2, &[Lock::Db { db: 9, mode: S }]),
            "4 holds every db"
        );
        t.release(3, &[far]);
        assert!(t.is_granted(4, &[Lock::AllDbs { mode: X }]));
        t.release(4, &[Lock::AllDbs { mode: X }]);
        assert!(t.is_empty());
        assert!(t.dbs.is_empty());
    }

    #[test]
    fn merging_keeps_the_stronger_mode() {
        let mut locks = vec![
            Lock::Db { db: 1, mode: S },
            key("b", S),
            key("a", S),
            Lock::AllDbs { mode: S },
            key("a", X),
            Lock::Db { db: 1, mode: S },
            key("a", S),
            Lock::AllDbs { mode: X },
        ];
        merge_locks(&mut locks);
        assert_eq!(
            locks,
            vec![
                key("a", X),
                key("b", S),
                Lock::Db { db: 1, mode: S },
                Lock::AllDbs { mode: X }
            ]
        );
    }
}
