//! Taking a transaction's changes back on a shard. A transaction that may have to be undone
//! (a script run that locked only the shards of its declared keys: docs/scripting.md) has
//! each of its hops keep the shard's undo log; the log is dropped when the transaction
//! releases the shard, or applied by a rollback hop before that. The shard is locked whole
//! by the transaction meanwhile, so nobody else saw the changes taken back.

use damselfly_storage::Undone;

use super::locks::TxId;
use crate::worker::Worker;

impl Worker {
    /// Starts keeping the undo log for the transaction whose hop is running.
    pub(crate) fn keep_undo(&self) {
        self.undo_owner.set(Some(self.running_tx.get()));
        self.shard.borrow_mut().keep_undo();
    }

    /// Drops the log when transaction `id` kept it (it released the shard: its changes stay).
    pub(crate) fn end_undo(&self, id: TxId) {
        if self.undo_owner.get() == Some(id) {
            self.undo_owner.set(None);
            self.shard.borrow_mut().drop_undo();
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
