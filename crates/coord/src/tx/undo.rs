//! Taking a transaction's changes back on a shard. A transaction that may have to be undone
//! (a script run that locked only its declared keys: docs/scripting.md) has each of its hops
//! keep the shard's undo log for it; between its hops the log is set aside (parked), because
//! other transactions and commands run there meanwhile on keys it does not hold, and taking
//! their changes back would lose acknowledged writes. The log is dropped when the
//! transaction releases the shard, or applied by a rollback hop before that. It only ever
//! holds keys the transaction holds (a call on any other key restarts the run first), so
//! nobody else saw the changes taken back.

use damselfly_storage::Undone;

use super::locks::TxId;
use crate::worker::Worker;

impl Worker {
    /// Keeps the undo log of the transaction whose hop is running: the one its earlier hops
    /// here kept, or a new one.
    pub(crate) fn keep_undo(&self) {
        let id = self.running_tx.get();
        self.undo_owner.set(Some(id));
        let parked = self.unpark_undo(id);
        let mut shard = self.shard.borrow_mut();
        match parked {
            Some(log) => shard.resume_undo(log),
            None => shard.keep_undo(),
        }
    }

    /// Sets the running transaction's log aside at the end of its hop, until its next hop
    /// here or its end.
    pub(crate) fn park_undo(&self) {
        let id = self.running_tx.get();
        if self.undo_owner.get() != Some(id) {
            return;
        }
        self.undo_owner.set(None);
        if let Some(log) = self.shard.borrow_mut().park_undo() {
            self.parked_undo.borrow_mut().push((id, log));
        }
    }

    fn unpark_undo(&self, id: TxId) -> Option<damselfly_storage::undo::ParkedUndo> {
        let mut parked = self.parked_undo.borrow_mut();
        let at = parked.iter().position(|(owner, _)| *owner == id)?;
        Some(parked.swap_remove(at).1)
    }

    /// Drops transaction `id`'s log (it released the shard: its changes stay) and publishes
    /// the keyspace events it held, which would otherwise wait for the shard's next command.
    pub(crate) fn end_undo(&self, id: TxId) {
        if self.undo_owner.get() == Some(id) {
            self.undo_owner.set(None);
            self.shard.borrow_mut().drop_undo();
        } else if let Some(log) = self.unpark_undo(id) {
            self.shard.borrow_mut().end_parked_undo(log);
        } else {
            return;
        }
        if self.shard.borrow().notify.pending() {
            self.publish_notifications();
        }
    }

    /// Takes back the running transaction's changes here and journals the restored state
    /// as part of the transaction, so recovery ends where memory does.
    pub(crate) fn roll_back(&self) {
        if self.undo_owner.get() != Some(self.running_tx.get()) {
            return;
        }
        self.undo_owner.set(None);
        let now = self.now_ms();
        let undone = self.shard.borrow_mut().rollback(now);
        if !self.journaling() {
            return;
        }
        for u in undone {
            match u {
                Undone::Key { db, key } => self.journal_current(db, &key),
                Undone::Db(db) => {
                    self.journal_words(db, &[b"FLUSHDB"]);
                    let keys: Vec<Box<[u8]>> = self.shard.borrow().dbs[db]
                        .table
                        .iter()
                        .map(|e| e.key().into())
                        .collect();
                    for key in keys {
                        self.journal_current(db, &key);
                    }
                }
                Undone::Swap(a, b) => {
                    let (a, b) = (a.to_string(), b.to_string());
                    self.journal_words(0, &[b"SWAPDB", a.as_bytes(), b.as_bytes()]);
                }
            }
        }
    }

    /// Journals what `key` holds now (RESTORE, or DEL when absent).
    fn journal_current(&self, db: usize, key: &[u8]) {
        let shard = self.shard.borrow();
        let value = shard.dbs[db]
            .table
            .get(key)
            .map(|e| (e.value().to_owned(), e.expire_at()));
        drop(shard);
        self.journal_value(db, key, value.as_ref().map(|(v, t)| (v, *t)));
    }
}
