//! Server-wide handles every thread shares: the mailboxes of all shards, the configuration,
//! client counters, start-up facts for INFO, and the shutdown signal. Nothing here holds
//! keyspace data.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Poll, Waker};
use std::time::Instant;

use damselfly_commands::config::Config;

use crate::durability::ShardStart;
use crate::mailbox::MailboxSender;
use crate::messages::ShardMsg;

/// Facts about the running server that INFO reports, fixed at start-up.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub multiplexing_api: &'static str,
    pub tcp_port: u16,
    pub executable: String,
    pub config_file: String,
}

/// Set once when the server should stop; wakes everyone waiting for it.
#[derive(Default)]
pub struct ShutdownSignal {
    flag: AtomicBool,
    waiters: Mutex<Vec<Waker>>,
}

impl ShutdownSignal {
    pub fn trigger(&self) {
        self.flag.store(true, Ordering::SeqCst);
        let waiters = std::mem::take(&mut *self.waiters.lock().unwrap_or_else(|e| e.into_inner()));
        for w in waiters {
            w.wake();
        }
    }

    pub fn is_triggered(&self) -> bool {
        self.flag.load(Ordering::SeqCst)
    }

    /// Resolves once shutdown has been triggered. A waiter keeps one registered waker however
    /// often it is polled: the epoll backend polls it on every wake-up of its thread, and
    /// pushing a waker each time grew the list by one per cross-thread message (about 100
    /// bytes per cross-shard transaction).
    pub async fn wait(&self) {
        let mut slot: Option<usize> = None;
        std::future::poll_fn(|cx| {
            if self.is_triggered() {
                return Poll::Ready(());
            }
            let mut waiters = self.waiters.lock().unwrap_or_else(|e| e.into_inner());
            match slot {
                // The list is only ever emptied by `trigger`, after which we return above.
                Some(i) if i < waiters.len() => {
                    if !waiters[i].will_wake(cx.waker()) {
                        waiters[i] = cx.waker().clone();
                    }
                }
                _ => {
                    waiters.push(cx.waker().clone());
                    slot = Some(waiters.len() - 1);
                }
            }
            drop(waiters);
            if self.is_triggered() {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        })
        .await
    }

    /// Wakers registered by waiters (tests check a waiter keeps one).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.waiters.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// The journal's directory, the manifest naming its files, and the segment number shards
/// append to now (all shards move to the next one together, at a rewrite's cut).
#[derive(Debug, Clone)]
pub struct JournalFiles {
    pub dir: std::path::PathBuf,
    pub manifest: damselfly_persistence::manifest::Manifest,
    pub seq: u64,
    /// Bytes of the base the manifest names (`aof_base_size`, and the automatic rewrite's
    /// measure of growth).
    pub base_bytes: u64,
}

pub struct Cluster {
    pub config: Arc<Config>,
    pub mailboxes: Vec<MailboxSender<ShardMsg>>,
    pub databases: usize,
    next_client_id: AtomicU64,
    next_txid: AtomicU64,
    pub connected_clients: AtomicU64,
    pub blocked_clients: AtomicU64,
    pub started: Instant,
    pub run_id: String,
    pub shutdown: ShutdownSignal,
    pub info: OnceLock<ServerInfo>,
    /// SAVE/BGSAVE state (crates/coord/src/snapshots.rs).
    pub saves: crate::snapshots::Saves,
    /// The save made while the server stops (SHUTDOWN [SAVE|NOSAVE], SIGTERM).
    pub final_save: crate::snapshots::FinalSave,
    /// The background journal rewrites (BGREWRITEAOF).
    pub rewrites: crate::snapshots::Saves,
    /// EVAL scripts, shared by every thread (docs/scripting.md).
    pub scripts: damselfly_scripting::ScriptCache,
    /// CLIENT PAUSE.
    pub pause: crate::pause::Pause,
    /// Function libraries, shared by every thread (FUNCTION LOAD).
    pub functions: damselfly_scripting::functions::FunctionRegistry,
    /// Script runs past `busy-reply-threshold`, on any thread.
    pub busy: Arc<damselfly_scripting::watchdog::BusyBoard>,
    /// Where the journal's files are and what the manifest names (None: no journal files).
    pub journal_files: Mutex<Option<JournalFiles>>,
    /// A BGREWRITEAOF (or BGSAVE SCHEDULE) waits for the running background job.
    pub rewrite_scheduled: AtomicBool,
    pub save_scheduled: AtomicBool,
    /// Each shard's change counter as of its last tick, for the `save` schedule.
    shard_changes: Vec<AtomicU64>,
    /// Bytes each shard journaled since the last base, as of its last tick.
    shard_journal_bytes: Vec<AtomicU64>,
    /// The shards' used memory, summed for `maxmemory` (crates/coord/src/maxmemory.rs).
    pub memory: crate::maxmemory::MemoryGauge,
    /// What each shard thread starts from (recovered data, its journal), taken by its worker.
    starts: Mutex<Vec<Option<ShardStart>>>,
    /// Users and their permissions, shared by every thread (docs/operations.md).
    pub acl: damselfly_acl::Acl,
}

impl Cluster {
    /// True when replies and multi-shard transactions wait for the journal's disk writes.
    pub fn journal_always(&self) -> bool {
        self.config.journal_always.load(Ordering::Relaxed)
    }

    pub fn new(config: Arc<Config>, mailboxes: Vec<MailboxSender<ShardMsg>>) -> Self {
        let shards = mailboxes.len();
        let databases = config.get_u64("databases").max(1) as usize;
        let started_unix = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let run_id: String = (0..40)
            .map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0'))
            .collect();
        let cluster = Cluster {
            config,
            mailboxes,
            databases,
            next_client_id: AtomicU64::new(1),
            next_txid: AtomicU64::new(1),
            connected_clients: AtomicU64::new(0),
            blocked_clients: AtomicU64::new(0),
            started: Instant::now(),
            run_id,
            shutdown: ShutdownSignal::default(),
            info: OnceLock::new(),
            starts: Mutex::new(Vec::new()),
            saves: crate::snapshots::Saves::new(started_unix),
            final_save: crate::snapshots::FinalSave::default(),
            rewrites: crate::snapshots::Saves::new(started_unix),
            scripts: Default::default(),
            pause: Default::default(),
            functions: Default::default(),
            busy: Default::default(),
            journal_files: Mutex::new(None),
            rewrite_scheduled: AtomicBool::new(false),
            save_scheduled: AtomicBool::new(false),
            shard_changes: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            shard_journal_bytes: (0..shards).map(|_| AtomicU64::new(0)).collect(),
            memory: Default::default(),
            acl: Default::default(),
        };
        cluster.apply_acl_config(true);
        cluster
    }

    /// Carries the ACL parameters into the users: `acl-pubsub-default`, and `requirepass`
    /// (the default user's one password, or `nopass` when empty) when `password` is set.
    pub fn apply_acl_config(&self, password: bool) {
        let all = self.config.get("acl-pubsub-default") == "allchannels";
        self.acl.pubsub_default_all.store(all, Ordering::Relaxed);
        if password {
            let pass = self.config.get("requirepass");
            self.acl
                .set_default_password((!pass.is_empty()).then_some(pass.as_bytes()));
        }
    }

    /// Hands each shard thread its start (before the threads run): index i goes to shard i.
    pub fn provide_starts(&self, starts: Vec<ShardStart>) {
        if let Ok(mut s) = self.starts.lock() {
            *s = starts.into_iter().map(Some).collect();
        }
    }

    /// Shard `id`'s start, if one was provided (once).
    pub(crate) fn take_start(&self, id: usize) -> Option<ShardStart> {
        self.starts.lock().ok()?.get_mut(id)?.take()
    }

    /// A shard's tick reports its change counter.
    pub(crate) fn note_changes(&self, shard: usize, dirty: u64) {
        if let Some(c) = self.shard_changes.get(shard) {
            c.store(dirty, Ordering::Relaxed);
        }
    }

    /// A shard's tick reports the bytes it journaled since the last base.
    pub(crate) fn note_journal_bytes(&self, shard: usize, bytes: u64) {
        if let Some(c) = self.shard_journal_bytes.get(shard) {
            c.store(bytes, Ordering::Relaxed);
        }
    }

    /// Bytes journaled over all shards since the last base (as of their last ticks).
    pub fn journal_bytes(&self) -> u64 {
        self.shard_journal_bytes
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// Changes made over all shards (as of their last ticks).
    pub fn changes(&self) -> u64 {
        self.shard_changes
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .sum()
    }

    /// When the server started, in seconds since the epoch.
    pub fn started_unix_secs(&self) -> u64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        now.saturating_sub(self.started.elapsed().as_secs())
    }

    pub fn num_shards(&self) -> usize {
        self.mailboxes.len()
    }

    /// A fresh transaction id; ids order conflicting transactions on every shard.
    pub fn next_txid(&self) -> u64 {
        self.next_txid.fetch_add(1, Ordering::Relaxed)
    }

    pub fn next_client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Admits a new client unless `maxclients` is reached.
    pub fn try_admit_client(&self) -> bool {
        let max = self.config.maxclients.load(Ordering::Relaxed);
        let prev = self.connected_clients.fetch_add(1, Ordering::SeqCst);
        if prev >= max {
            self.connected_clients.fetch_sub(1, Ordering::SeqCst);
            return false;
        }
        true
    }

    pub fn release_client(&self) {
        self.connected_clients.fetch_sub(1, Ordering::SeqCst);
    }

    pub fn server_info(&self) -> ServerInfo {
        self.info.get().cloned().unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    use super::ShutdownSignal;

    struct Nop;
    impl Wake for Nop {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_waiter_polled_often_keeps_one_waker() {
        let signal = ShutdownSignal::default();
        let waker = Waker::from(Arc::new(Nop));
        let mut cx = Context::from_waker(&waker);
        let mut wait = Box::pin(signal.wait());
        for _ in 0..1000 {
            assert!(wait.as_mut().poll(&mut cx).is_pending());
        }
        // Another waker replaces it rather than adding one.
        let other = Waker::from(Arc::new(Nop));
        assert!(wait
            .as_mut()
            .poll(&mut Context::from_waker(&other))
            .is_pending());
        assert_eq!(signal.registered(), 1);
        signal.trigger();
        assert_eq!(wait.as_mut().poll(&mut cx), Poll::Ready(()));
    }
}
