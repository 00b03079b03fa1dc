//! Client-side caching (CLIENT TRACKING) on one shard: which clients read which of its keys,
//! and the invalidations its changes produce, for the coordinator to deliver.
//!
//! As in Redis the table is keyed by name alone, whatever the database: a change to `k` in
//! database 1 invalidates a client that read `k` in database 0. A key's readers are dropped
//! when it is invalidated; the client reads (and registers) it again when it wants it.

use std::collections::HashMap;

/// Who runs a command on a shard: the client (0 for the server itself, e.g. expiry) and its
/// thread, and whether what it reads is remembered for it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caller {
    pub client: u64,
    pub thread: u16,
    pub tracks: bool,
}

/// A client that read a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reader {
    pub client: u64,
    pub thread: u16,
}

/// A key that changed while clients held it, and the client whose command changed it (for
/// NOLOOP; 0 when none).
#[derive(Debug)]
pub struct Invalidation {
    pub key: Box<[u8]>,
    pub readers: Vec<Reader>,
    pub writer: u64,
}

#[derive(Default)]
pub struct Tracking {
    table: HashMap<Box<[u8]>, Vec<Reader>, ahash::RandomState>,
    /// Reader entries over all keys (INFO `tracking_total_items`).
    items: usize,
    /// The BCAST prefixes any client anywhere registered, sorted.
    prefixes: Vec<Box<[u8]>>,
    /// The command running now.
    pub caller: Caller,
    invalidated: Vec<Invalidation>,
    /// Changed keys under some BCAST prefix, with their writers.
    broadcast: Vec<(Box<[u8]>, u64)>,
    /// A FLUSHDB/FLUSHALL ran: every tracking client is told to drop everything.
    flushed: bool,
}

/// What [`Tracking::take`] hands the coordinator.
#[derive(Default)]
pub struct Pending {
    pub invalidated: Vec<Invalidation>,
    pub broadcast: Vec<(Box<[u8]>, u64)>,
    pub flushed: bool,
}

impl Tracking {
    /// Remembers that the caller read `key` (when it tracks).
    pub fn remember(&mut self, key: &[u8]) {
        self.remember_for(self.caller, key);
    }

    /// Remembers that `caller` read `key` (when it tracks).
    pub fn remember_for(&mut self, caller: Caller, key: &[u8]) {
        let Caller {
            client,
            thread,
            tracks,
        } = caller;
        if !tracks {
            return;
        }
        let readers = match self.table.get_mut(key) {
            Some(readers) => readers,
            None => self.table.entry(key.into()).or_default(),
        };
        if !readers.iter().any(|r| r.client == client) {
            readers.push(Reader { client, thread });
            self.items += 1;
        }
    }

    /// A key changed: its readers are owed an invalidation, and BCAST clients too when it is
    /// under a registered prefix. One emptiness check each when nobody tracks.
    pub fn changed(&mut self, key: &[u8]) {
        if !self.table.is_empty() {
            if let Some(readers) = self.table.remove(key) {
                self.items -= readers.len();
                self.invalidated.push(Invalidation {
                    key: key.into(),
                    readers,
                    writer: self.caller.client,
                });
            }
        }
        if !self.prefixes.is_empty() && self.prefixes.iter().any(|p| key.starts_with(p)) {
            self.broadcast.push((key.into(), self.caller.client));
        }
    }

    /// A database was emptied: every tracking client drops everything, and the table is
    /// cleared (as Redis does for FLUSHDB too).
    pub fn flushed(&mut self) {
        self.table.clear();
        self.items = 0;
        self.flushed = true;
    }

    /// True when invalidations wait to be delivered.
    pub fn pending(&self) -> bool {
        self.flushed || !self.invalidated.is_empty() || !self.broadcast.is_empty()
    }

    pub fn take(&mut self) -> Pending {
        Pending {
            invalidated: std::mem::take(&mut self.invalidated),
            broadcast: std::mem::take(&mut self.broadcast),
            flushed: std::mem::take(&mut self.flushed),
        }
    }

    /// Replaces the BCAST prefixes (the coordinator keeps the server-wide set).
    pub fn set_prefixes(&mut self, mut prefixes: Vec<Box<[u8]>>) {
        prefixes.sort();
        prefixes.dedup();
        self.prefixes = prefixes;
    }

    /// Keys with readers (INFO `tracking_total_keys`).
    pub fn keys(&self) -> usize {
        self.table.len()
    }

    /// Reader entries (INFO `tracking_total_items`).
    pub fn items(&self) -> usize {
        self.items
    }

    /// Drops keys, each with an invalidation to its readers, until at most `max` remain
    /// (`tracking-table-max-keys`, this shard's share). Which keys go is arbitrary, as in
    /// Redis's random walk.
    pub fn limit(&mut self, max: usize) {
        let over = self.table.len().saturating_sub(max);
        if over == 0 {
            return;
        }
        let victims: Vec<Box<[u8]>> = self.table.keys().take(over).cloned().collect();
        let caller = std::mem::take(&mut self.caller);
        for key in victims {
            self.changed(&key);
        }
        self.caller = caller;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(t: &mut Tracking, client: u64, key: &[u8]) {
        t.caller = Caller {
            client,
            thread: 1,
            tracks: true,
        };
        t.remember(key);
        t.caller = Caller::default();
    }

    #[test]
    fn a_change_invalidates_readers_once() {
        let mut t = Tracking::default();
        reading(&mut t, 7, b"k");
        reading(&mut t, 7, b"k");
        reading(&mut t, 8, b"k");
        assert_eq!((t.keys(), t.items()), (1, 2));
        t.caller.client = 8;
        t.changed(b"k");
        t.changed(b"k");
        let p = t.take();
        assert_eq!(p.invalidated.len(), 1);
        let clients: Vec<u64> = p.invalidated[0].readers.iter().map(|r| r.client).collect();
        assert_eq!(clients, [7, 8]);
        assert_eq!(p.invalidated[0].writer, 8);
        assert_eq!((t.keys(), t.items()), (0, 0));
        assert!(!t.pending());
    }

    #[test]
    fn only_tracking_callers_are_remembered() {
        let mut t = Tracking {
            caller: Caller {
                client: 3,
                thread: 0,
                tracks: false,
            },
            ..Tracking::default()
        };
        t.remember(b"k");
        assert_eq!(t.keys(), 0);
    }

    #[test]
    fn broadcast_takes_keys_under_prefixes() {
        let mut t = Tracking::default();
        t.set_prefixes(vec![b"user:".as_slice().into(), b"a".as_slice().into()]);
        t.changed(b"user:1");
        t.changed(b"other");
        t.changed(b"ab");
        let keys: Vec<&[u8]> = t.broadcast.iter().map(|(k, _)| &k[..]).collect();
        assert_eq!(keys, [b"user:1".as_slice(), b"ab"]);
    }

    #[test]
    fn limit_invalidates_the_excess() {
        let mut t = Tracking::default();
        for i in 0..10u8 {
            reading(&mut t, 1, &[i]);
        }
        t.limit(4);
        assert_eq!(t.keys(), 4);
        assert_eq!(t.take().invalidated.len(), 6);
    }
}
