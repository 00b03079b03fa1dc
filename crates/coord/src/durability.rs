//! What a shard's worker journals, and when replies may leave (docs/persistence.md, "Journal").
//!
//! Every change a shard makes is recorded in its journal, in the order it happened: a write
//! command's own words when it changed something (or the effect its handler recorded instead,
//! see `ExecCtx::propagate`), a DEL for every key removed because its deadline passed (before
//! anything recorded after it), a RESTORE or DEL for values moved by cross-shard transactions,
//! which bypass command handlers. Records made inside a transaction carry its id and the
//! number of shards it spans; each shard closes its part with an end record, so recovery can
//! tell a complete transaction from one a crash cut short.
//!
//! Under `appendfsync always` nothing leaves a shard before the records made up to then are
//! on disk: replies to other threads wait in `deferred`, a connection's output waits in
//! `wait_durable`, and a transaction releases its intents only once every shard has its end
//! record on disk (`Tx::end`). Under `everysec` and `no` nothing waits.
//!
//! Who syncs under `always`: where the thread's event loop has turn ends (the epoll
//! backend), the shard's own thread, once per turn, after every connection and message of
//! the turn made its records (`journal_sync_task`, Redis's `beforeSleep`); elsewhere the
//! journal's writer thread, handed the records at the end of each unit of work, which then
//! tells the shard (`ShardMsg::JournalSynced`).

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::future::{poll_fn, Future};
use std::rc::Rc;
use std::task::{Poll, Waker};

use damselfly_commands::{Args, Effects};
use damselfly_persistence::appender::{Appender, FsyncPolicy};
use damselfly_persistence::dump;
use damselfly_storage::{Shard, Value};

use crate::messages::{JournalReport, Payload};
use crate::tx::TxId;
use crate::worker::Worker;

/// What a shard thread starts from: the data recovered for it and, with the journal on, the
/// journal it appends to (opened by start-up, crates/server/src/recovery.rs).
pub struct ShardStart {
    pub shard: Shard,
    pub journal: Option<Appender>,
}

/// A shard's journal as its worker uses it.
pub(crate) struct ShardJournal {
    appender: Appender,
    /// Replies held until the journal is durable up to the LSN they carry.
    deferred: VecDeque<(u64, usize, usize, Payload)>,
    /// Connections of this thread waiting for the journal to be durable up to an LSN.
    waiters: Vec<(u64, Waker)>,
    /// Transactions scheduled here that record their end: id -> shards spanned, sealed.
    txs: HashMap<TxId, (u32, bool), ahash::RandomState>,
}

impl ShardJournal {
    pub(crate) fn new(appender: Appender) -> Self {
        ShardJournal {
            appender,
            deferred: VecDeque::new(),
            waiters: Vec::new(),
            txs: HashMap::default(),
        }
    }
}

/// The transaction context records are made in: (id, shards), (0, 0) outside one.
pub(crate) type TxTag = (u64, u32);

/// The thread's journal sync task, where it runs (see the module's doc).
#[derive(Default)]
pub(crate) struct TurnEndSync {
    /// The task runs on this thread.
    running: Cell<bool>,
    /// Records wait for the end of this turn.
    wanted: Cell<bool>,
    /// The task, while nothing waits.
    task: RefCell<Option<Waker>>,
}

impl Worker {
    /// Journals from now on into `appender` (start-up, or after a snapshot began a journal).
    pub fn start_journal(&self, appender: Appender) {
        self.shard.borrow_mut().log_dropped(true);
        *self.journal.borrow_mut() = Some(ShardJournal::new(appender));
    }

    /// Stops journaling (CONFIG SET appendonly no); what was appended is written out.
    pub fn stop_journal(&self) {
        self.shard.borrow_mut().log_dropped(false);
        if let Some(mut j) = self.journal.borrow_mut().take() {
            j.appender.flush_now();
            self.release_deferred(&mut j, true);
        }
    }

    pub(crate) fn journaling(&self) -> bool {
        self.journal.borrow().is_some()
    }

    /// Records what a command run through `with_ctx` did. `words` are its own (None when it
    /// was not a write, or its handler records its effects itself); `changed` counts the
    /// changes it made beyond removing expired keys.
    pub(crate) fn journal_effects(
        &self,
        shard: &mut Shard,
        db: usize,
        words: Option<&Args>,
        effects: Effects,
        changed: bool,
    ) {
        let mut journal = self.journal.borrow_mut();
        let Some(j) = journal.as_mut() else {
            return;
        };
        let tx = self.current_tx.get();
        record_expired(j, shard, tx);
        let db = db_u32(db);
        match (effects.rewritten, words) {
            (Some(records), _) => {
                for args in records {
                    j.appender.command(db, tx, &args);
                }
            }
            (None, Some(args)) if changed => {
                let words: Vec<&[u8]> = args.iter().collect();
                j.appender.command(db, tx, &words);
            }
            _ => {}
        }
    }

    /// Records a key's new value (or its deletion) written outside any command: a value a
    /// cross-shard transaction moved, a gathered command's write-back. Recorded as RESTORE
    /// with an absolute deadline, or DEL.
    pub(crate) fn journal_value(&self, db: usize, key: &[u8], value: Option<(&Value, u64)>) {
        let mut journal = self.journal.borrow_mut();
        let Some(j) = journal.as_mut() else {
            return;
        };
        let tx = self.current_tx.get();
        record_expired(j, &mut self.shard.borrow_mut(), tx);
        let db = db_u32(db);
        match value {
            Some((v, expire_at)) => {
                let payload = dump::encode(v.as_ref(), &Default::default());
                let ttl = expire_at.to_string();
                let args: [&[u8]; 6] = [
                    b"RESTORE",
                    key,
                    ttl.as_bytes(),
                    &payload,
                    b"REPLACE",
                    b"ABSTTL",
                ];
                j.appender.command(db, tx, &args);
            }
            None => {
                j.appender.command(db, tx, &[&b"DEL"[..], key]);
            }
        }
    }

    /// Records a keyless command (DEBUG POPULATE) as it ran on this shard.
    pub(crate) fn journal_words(&self, db: usize, words: &[&[u8]]) {
        if let Some(j) = self.journal.borrow_mut().as_mut() {
            j.appender.command(db_u32(db), self.current_tx.get(), words);
        }
    }

    /// The end of a unit of work: hands what was journaled to the writer (or, syncing at turn
    /// ends, has the turn's end sync it), after recording keys that expired outside commands
    /// (active expiry, lookups in transaction hops).
    pub fn journal_flush(&self) {
        let mut journal = self.journal.borrow_mut();
        if let Some(j) = journal.as_mut() {
            record_expired(j, &mut self.shard.borrow_mut(), (0, 0));
            self.flush_or_want_sync(j);
        }
    }

    fn flush_or_want_sync(&self, j: &mut ShardJournal) {
        if !self.syncs_at_turn_end(j) {
            j.appender.flush();
        } else if j.appender.has_buffered() {
            self.turn_end_sync.wanted.set(true);
            if let Some(task) = self.turn_end_sync.task.take() {
                task.wake();
            }
        }
    }

    fn syncs_at_turn_end(&self, j: &ShardJournal) -> bool {
        self.turn_end_sync.running.get() && j.appender.policy() == FsyncPolicy::Always
    }

    /// The thread's journal sync task, run by an event loop with turn ends (`turn_end`
    /// resolves once every task woken before it in this turn has run): under `always`, once
    /// records wait, it waits for the turn's end and syncs them all on this thread, then
    /// releases the replies that waited. Never returns.
    pub async fn journal_sync_task<F: Future<Output = ()>>(
        self: Rc<Self>,
        turn_end: impl Fn() -> F,
    ) {
        let sync = &self.turn_end_sync;
        sync.running.set(true);
        loop {
            poll_fn(|cx| {
                if sync.wanted.get() {
                    return Poll::Ready(());
                }
                *sync.task.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            })
            .await;
            turn_end().await;
            // This sync covers whatever asked for one until now.
            sync.wanted.set(false);
            if let Some(j) = self.journal.borrow_mut().as_mut() {
                record_expired(j, &mut self.shard.borrow_mut(), (0, 0));
                j.appender.sync_here();
            }
            self.journal_synced();
        }
    }

    /// The LSN of the last record, and whether a reply made now must wait for it.
    fn pending_durability(&self) -> Option<u64> {
        let journal = self.journal.borrow();
        let j = journal.as_ref()?;
        let last = j.appender.last_lsn();
        (j.appender.policy() == FsyncPolicy::Always && j.appender.durable_lsn() < last)
            .then_some(last)
    }

    /// Sends a reply to `origin`, or holds it until the journal is durable up to now.
    pub(crate) fn reply_when_durable(&self, origin: usize, slot: usize, reply: Payload) {
        match self.pending_durability() {
            None => self.send_reply(origin, slot, reply),
            Some(lsn) => {
                let mut journal = self.journal.borrow_mut();
                if let Some(j) = journal.as_mut() {
                    self.flush_or_want_sync(j);
                    j.deferred.push_back((lsn, origin, slot, reply));
                }
            }
        }
    }

    /// The writer thread made records durable (or failed): releases what waited for them.
    /// Under `always` a failure ends the process, as Redis does: replies that wait for
    /// records which will never be durable cannot be sent, nor may they be dropped silently.
    pub(crate) fn journal_synced(&self) {
        let mut journal = self.journal.borrow_mut();
        if let Some(j) = journal.as_mut() {
            if j.appender.failed() && j.appender.policy() == FsyncPolicy::Always {
                tracing::error!(
                    "cannot recover from a journal write error under appendfsync always \
                     ({}); exiting",
                    j.appender.failure().unwrap_or_default()
                );
                std::process::exit(1);
            }
            self.release_deferred(j, false);
        }
    }

    fn release_deferred(&self, j: &mut ShardJournal, all: bool) {
        let durable = j.appender.durable_lsn();
        while let Some((lsn, ..)) = j.deferred.front() {
            if !all && *lsn > durable {
                break;
            }
            if let Some((_, origin, slot, reply)) = j.deferred.pop_front() {
                self.send_reply(origin, slot, reply);
            }
        }
        j.waiters.retain(|(lsn, waker)| {
            let done = all || *lsn <= durable;
            if done {
                waker.wake_by_ref();
            }
            !done
        });
    }

    /// The LSN a connection's output must wait for under `always` (None: it need not wait).
    pub fn durability_needed(&self) -> Option<u64> {
        self.pending_durability()
    }

    /// Resolves once the journal is durable up to `lsn` (or journaling stopped, or the policy
    /// is no longer `always`).
    pub async fn wait_durable(self: &Rc<Self>, lsn: u64) {
        self.journal_flush();
        poll_fn(|cx| {
            let mut journal = self.journal.borrow_mut();
            match journal.as_mut() {
                Some(j)
                    if j.appender.policy() == FsyncPolicy::Always
                        && j.appender.durable_lsn() < lsn =>
                {
                    j.waiters.push((lsn, cx.waker().clone()));
                    Poll::Pending
                }
                _ => Poll::Ready(()),
            }
        })
        .await
    }

    /// Notes that transaction `id`, spanning `shards` shards, is scheduled here: its records
    /// carry its id, and its end here is recorded.
    pub(crate) fn journal_tx_begin(&self, id: TxId, shards: u32) {
        if let Some(j) = self.journal.borrow_mut().as_mut() {
            j.txs.insert(id, (shards, false));
        }
    }

    /// The context records of transaction `id` are made in.
    pub(crate) fn journal_tx_tag(&self, id: TxId) -> TxTag {
        self.journal
            .borrow()
            .as_ref()
            .and_then(|j| j.txs.get(&id).map(|&(shards, _)| (id, shards)))
            .unwrap_or((0, 0))
    }

    /// Records the end of transaction `id` here before its intents are released under
    /// `appendfsync always` (`durable_release`): the coordinator releases them only once every
    /// shard's end record is durable. Returns whether the transaction is journaled here.
    pub(crate) fn journal_tx_seal(&self, id: TxId) -> bool {
        let mut journal = self.journal.borrow_mut();
        let Some(j) = journal.as_mut() else {
            return false;
        };
        let Some((shards, sealed)) = j.txs.get_mut(&id) else {
            return false;
        };
        if !*sealed {
            *sealed = true;
            let shards = *shards;
            j.appender.tx_done((id, shards), true);
        }
        true
    }

    /// Transaction `id` ends here: its end record, unless it was sealed already.
    pub(crate) fn journal_tx_end(&self, id: TxId) {
        let mut journal = self.journal.borrow_mut();
        if let Some(j) = journal.as_mut() {
            if let Some((shards, sealed)) = j.txs.remove(&id) {
                if !sealed {
                    j.appender.tx_done((id, shards), false);
                }
            }
        }
    }

    /// The error a write gets while this shard's journal cannot be written (Redis's MISCONF).
    pub(crate) fn journal_refusal(&self) -> Option<String> {
        let journal = self.journal.borrow();
        let j = journal.as_ref()?;
        if !j.appender.failed() {
            return None;
        }
        let why = j.appender.failure().unwrap_or_default();
        Some(format!("MISCONF Errors writing to the AOF file: {why}"))
    }

    pub(crate) fn journal_report(&self) -> Option<JournalReport> {
        let journal = self.journal.borrow();
        let j = journal.as_ref()?;
        Some(JournalReport {
            appended_bytes: j.appender.segment_bytes(),
            failure: j.appender.failure(),
        })
    }

    /// Continues the journal in a new segment (a rewrite's cut): what was recorded up to now
    /// goes to the current one. False when not journaling.
    pub(crate) fn journal_rotate(&self, path: &std::path::Path, generation: u64, seq: u64) -> bool {
        let mut journal = self.journal.borrow_mut();
        let Some(j) = journal.as_mut() else {
            return false;
        };
        let shard = u32::try_from(self.id).unwrap_or(u32::MAX);
        j.appender.rotate(path, generation, shard, seq);
        true
    }

    /// Why journal writes stopped, if they did (writes are refused meanwhile).
    pub fn journal_failure(&self) -> Option<String> {
        self.journal
            .borrow()
            .as_ref()
            .and_then(|j| j.appender.failure())
    }

    /// Applies `appendfsync`. Replies and connections waiting for a sync under `always`
    /// leave when it changes to `everysec` or `no`: nothing waits for the disk under those,
    /// and none of their syncs tells the shard (`journal_synced`), so they would wait until
    /// `always` came back.
    pub fn set_fsync_policy(&self, policy: FsyncPolicy) {
        if let Some(j) = self.journal.borrow_mut().as_mut() {
            j.appender.set_policy(policy);
            if policy != FsyncPolicy::Always {
                self.release_deferred(j, true);
            }
        }
    }
}

/// Records a DEL for every key the shard removed because its deadline passed, before any
/// record made after that removal.
fn record_expired(j: &mut ShardJournal, shard: &mut Shard, tx: TxTag) {
    for (db, key) in shard.take_dropped() {
        j.appender.command(db_u32(db), tx, &[&b"DEL"[..], &key]);
    }
}

/// Database indexes are below `databases`, itself at most 1,000,000.
fn db_u32(db: usize) -> u32 {
    u32::try_from(db).unwrap_or(u32::MAX)
}

/// The worker's journal: present while journaling.
pub(crate) type JournalCell = RefCell<Option<ShardJournal>>;
