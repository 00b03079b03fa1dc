//! A worker: one thread's shard, its statistics and client registry, and the handling of
//! messages other threads send to this shard. The runtime layer owns the thread and its event
//! loop; it hands every mailbox message and every timer tick to the worker.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use damselfly_commands::latency::{self, Events, Histograms};
use damselfly_commands::slowlog::{self, SlowCall, SlowEntry, Slowlog};
use damselfly_commands::stats::ThreadStats;
use damselfly_commands::table::{flags, flags::DENYOOM, Handler, Intents, Route, COMMANDS};
use damselfly_commands::{server_family, Args, Effects, ExecCtx};
use damselfly_persistence::appender::FsyncPolicy;
use damselfly_protocol::ReplyBuf;
use damselfly_scripting::watchdog::RunWatch;
use damselfly_storage::tracking::Caller;
use damselfly_storage::{now_ms, shard_for_key, Shard, ShardStats};

use crate::blocking::{BlockedKeys, Wake};
use crate::client::Registry;
use crate::cluster::Cluster;
use crate::crash;
use crate::durability::{JournalCell, TurnEndSync, TxTag};
use crate::mailbox::Mailbox;
use crate::maxmemory::OOM;
use crate::messages::{
    BatchReply, ExecBatch, HopFn, HopTx, Payload, ShardMsg, ThreadReport, KEPT_BUFFER_BYTES,
};
use crate::pubsub_family::ThreadPubSub;
use crate::reply_slots::{ReplySlots, ReplyWait};
use crate::tx::{plan, Lock, Mode, TxId, TxQueue};

/// Keys an active-expiry tick may remove per shard (ticks run 10 times a second).
const EXPIRE_BUDGET: usize = 20_000;
/// One command in this many is timed for commandstats; reading the clock per command costs
/// more than the command itself. The sampled time is scaled up, so `usec` stays an unbiased
/// estimate.
const TIMING_SAMPLE: u64 = 16;

/// A hop waiting for its transaction's turn.
pub(crate) enum Hop {
    Run {
        f: HopFn,
        conclude: bool,
        origin: usize,
        slot: usize,
    },
    /// A batch of plain commands stopped at a command that conflicted with a transaction;
    /// it holds that command's intents and resumes there.
    Batch(DeferredBatch),
    /// Serving the clients blocked on a key that received data while a transaction held it.
    Serve { db: usize, key: Box<[u8]> },
}

pub(crate) struct DeferredBatch {
    batch: Box<ExecBatch>,
    next: usize,
    reply: ReplyBuf,
    ends: Vec<usize>,
    /// Its slow commands, for the client's thread to log.
    slow: Vec<SlowCall>,
    origin: usize,
    slot: usize,
}

pub struct Worker {
    pub id: usize,
    pub cluster: Arc<Cluster>,
    /// This thread's end of its mailbox (`cluster.mailboxes[id]` is the sending end).
    pub mailbox: Mailbox<ShardMsg>,
    pub shard: RefCell<Shard>,
    pub stats: RefCell<ThreadStats>,
    pub clients: RefCell<Registry>,
    /// Batches this thread sent to other shards and whose replies it awaits.
    pub(crate) replies: RefCell<ReplySlots>,
    /// Replies to other threads made while handling a message, sent once it is done
    /// (`handle`): origin thread, reply slot, reply.
    outgoing: RefCell<Vec<(usize, usize, Payload)>>,
    /// Reply buffers a batch's replies were written from straight to the client's socket,
    /// kept for the next batch (`reply_buffers`).
    spare_reply: RefCell<(Vec<u8>, Vec<usize>)>,
    /// Inside `handle` (nested when a message handled here asks this shard again).
    handling: Cell<u32>,
    /// Transactions holding intents on this shard.
    pub(crate) txq: RefCell<TxQueue<Hop>>,
    /// Clients blocked on this shard's keys.
    pub(crate) blocked: RefCell<BlockedKeys>,
    /// Milliseconds since the epoch for the current round of commands (see `refresh_clock`).
    pub(crate) now_ms: Cell<u64>,
    /// Monotonic time of the same reading.
    now: Cell<Instant>,
    /// Wall-clock anchor, re-read every tick: per round only the monotonic clock is read and
    /// the wall time derived from it.
    anchor: Cell<(Instant, u64)>,
    /// Commands this shard has run.
    executed: Cell<u64>,
    /// What to measure of each command, from the configuration (see `timing`).
    timing: Cell<Timing>,
    /// This thread's slow log: commands its clients ran (docs/architecture.md).
    pub(crate) slowlog: RefCell<Slowlog>,
    /// This thread's latency monitor events and per-command latency histograms.
    pub(crate) latency_events: RefCell<Events>,
    pub(crate) histograms: RefCell<Histograms>,
    /// The configuration generation the shard's encoding limits were copied at.
    limits_generation: Cell<u64>,
    /// (time, total commands) at recent ticks, for `instantaneous_ops_per_sec`.
    ops_samples: RefCell<std::collections::VecDeque<(Instant, u64)>>,
    /// This shard's part of the used memory every thread compares with `maxmemory`.
    pub(crate) published_memory: crate::maxmemory::Published,
    /// The shard's journal, while journaling (crates/coord/src/durability.rs).
    pub(crate) journal: JournalCell,
    /// Under `always`, where the event loop has turn ends: the turn's records wait for them.
    pub(crate) turn_end_sync: TurnEndSync,
    /// The transaction the records made now belong to.
    pub(crate) current_tx: Cell<TxTag>,
    /// The transaction whose hop is running (crates/coord/src/tx/undo.rs).
    pub(crate) running_tx: Cell<TxId>,
    /// The transaction whose undo log the shard keeps now (during its hop).
    pub(crate) undo_owner: Cell<Option<TxId>>,
    /// Undo logs of transactions between two of their hops here (crates/coord/src/tx/undo.rs).
    pub(crate) parked_undo: RefCell<Vec<(TxId, damselfly_storage::undo::ParkedUndo)>>,
    /// Where the running snapshot's finished sink goes (crates/coord/src/snapshots.rs).
    pub(crate) snapshot_done:
        RefCell<Option<crossbeam_channel::Sender<crate::snapshots::Finished>>>,
    /// When the snapshot walk takes its next step: at once, or after a pause while the shard
    /// runs commands.
    pub(crate) walk_pace: Cell<crate::snapshots::WalkPace>,
    /// This thread's Lua VM, lent to one script run at a time.
    pub(crate) scripting: damselfly_scripting::VmSlot,
    /// This thread's replica of every subscription and its own subscribers.
    pub(crate) pubsub: RefCell<ThreadPubSub>,
    /// DEBUG PANIC TICK armed it: the next tick panics (debug builds, to test the policy).
    #[cfg(debug_assertions)]
    pub(crate) panic_on_tick: Cell<bool>,
}

/// Ticks of history behind `instantaneous_ops_per_sec` (Redis also uses 16 samples).
const OPS_SAMPLES: usize = 16;

/// What the configuration asks to measure of every command: the slow log's threshold in
/// microseconds (negative: off), the latency monitor's in milliseconds (0: off), and
/// whether per-command histograms are kept.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    pub slower_than: i64,
    pub monitor_ms: u64,
    pub tracking: bool,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            slower_than: -1,
            monitor_ms: 0,
            tracking: false,
        }
    }
}

/// A call being timed (`Worker::start_call_timer`): what to measure, and its start when
/// this call is measured.
#[derive(Clone, Copy)]
pub(crate) struct CallTimer {
    timing: Timing,
    started: Option<quanta::Instant>,
}

impl Timing {
    /// Whether every command is timed. When nothing needs each command's duration,
    /// commandstats time one command in [`TIMING_SAMPLE`].
    pub fn every_command(&self) -> bool {
        self.slower_than >= 0 || self.monitor_ms > 0 || self.tracking
    }
}

impl Worker {
    pub fn new(id: usize, cluster: Arc<Cluster>, mailbox: Mailbox<ShardMsg>) -> Rc<Self> {
        let (shard, journal) = match cluster.take_start(id) {
            Some(start) => (start.shard, start.journal),
            None => (Shard::new(cluster.databases), None),
        };
        let threads = cluster.mailboxes.len();
        let worker = Rc::new(Worker {
            id,
            cluster,
            mailbox,
            shard: RefCell::new(shard),
            stats: RefCell::new(ThreadStats::default()),
            clients: RefCell::new(Registry::default()),
            replies: RefCell::new(ReplySlots::default()),
            outgoing: RefCell::new(Vec::new()),
            spare_reply: RefCell::default(),
            handling: Cell::new(0),
            txq: RefCell::new(TxQueue::default()),
            blocked: RefCell::new(BlockedKeys::default()),
            now_ms: Cell::new(now_ms()),
            now: Cell::new(Instant::now()),
            anchor: Cell::new((Instant::now(), now_ms())),
            executed: Cell::new(0),
            timing: Cell::new(Timing::default()),
            slowlog: RefCell::new(Slowlog::default()),
            latency_events: RefCell::new(Events::default()),
            histograms: RefCell::new(Histograms::default()),
            limits_generation: Cell::new(u64::MAX),
            ops_samples: RefCell::new(std::collections::VecDeque::from([(Instant::now(), 0)])),
            published_memory: Default::default(),
            journal: RefCell::new(None),
            turn_end_sync: TurnEndSync::default(),
            current_tx: Cell::new((0, 0)),
            running_tx: Cell::new(0),
            undo_owner: Cell::new(None),
            parked_undo: RefCell::default(),
            snapshot_done: RefCell::new(None),
            walk_pace: Cell::default(),
            scripting: Default::default(),
            pubsub: RefCell::new(ThreadPubSub::new(threads)),
            #[cfg(debug_assertions)]
            panic_on_tick: Cell::new(false),
        });
        if let Some(appender) = journal {
            worker.start_journal(appender);
        }
        // Recovered data counts against the limit from the start.
        worker.sync_limits();
        worker
    }

    /// Reads the clock for the next round of commands. Commands of one round (at most a
    /// read buffer's worth, well under a millisecond) share it, as Redis commands share a
    /// per-call time snapshot.
    pub fn refresh_clock(&self) {
        let now = Instant::now();
        let (at, wall) = self.anchor.get();
        self.now.set(now);
        self.now_ms
            .set(wall + now.saturating_duration_since(at).as_millis() as u64);
    }

    /// Wakes this thread's mailbox task if messages wait (called between rounds so a busy
    /// thread, which other threads do not signal, still serves its mailbox promptly), and
    /// the threads this one published to since (`send_owed_wakes`).
    pub fn poke_mailbox(&self) {
        self.cluster.mailboxes[self.id].poke();
        self.send_owed_wakes();
    }

    /// Handles the messages waiting now (those queued since are left to the mailbox task),
    /// between two connection rounds: a batch another thread sent then waits for one round
    /// here, not for every task queued before the mailbox's.
    pub fn serve_mailbox_now(&self) {
        for _ in 0..self.mailbox.take_queued() {
            let Some(m) = self.mailbox.pop() else { break };
            self.handle(m);
        }
        self.send_owed_wakes();
    }

    /// Sends a batch to another shard; the returned future resolves to its replies (None if
    /// the shard is gone).
    pub(crate) fn send_batch(self: &Rc<Self>, shard: usize, batch: Box<ExecBatch>) -> ReplyWait {
        self.ask(shard, |origin, slot| ShardMsg::Exec {
            batch,
            origin,
            slot,
        })
    }

    /// Sends a message that answers to a reply slot; the returned future resolves to the
    /// answer (None if the shard is gone).
    pub(crate) fn ask(
        self: &Rc<Self>,
        shard: usize,
        make: impl FnOnce(usize, usize) -> ShardMsg,
    ) -> ReplyWait {
        let slot = self.replies.borrow_mut().open();
        let sent = if shard == self.id {
            // Our own shard: handled right here, the answer fills the slot directly.
            self.handle(make(self.id, slot));
            true
        } else {
            self.cluster.mailboxes[shard].send(make(self.id, slot))
        };
        if !sent {
            self.replies.borrow_mut().abandon(slot);
        }
        ReplyWait {
            worker: self.clone(),
            slot,
            done: !sent,
        }
    }

    /// Opens a reply slot that a later message (a blocked client's wake-up) will fill.
    pub(crate) fn open_wait(self: &Rc<Self>) -> (usize, ReplyWait) {
        let slot = self.replies.borrow_mut().open();
        let wait = ReplyWait {
            worker: self.clone(),
            slot,
            done: false,
        };
        (slot, wait)
    }

    /// Milliseconds since the epoch for the current round.
    pub fn now_ms(&self) -> u64 {
        self.now_ms.get()
    }

    /// The monotonic time of the current round.
    pub fn round_instant(&self) -> Instant {
        self.now.get()
    }

    pub fn num_shards(&self) -> usize {
        self.cluster.num_shards()
    }

    /// Copies the encoding limits and eviction settings into the shard, and `appendfsync`
    /// into its journal, when the configuration changed.
    pub fn sync_limits(&self) {
        let config = &self.cluster.config;
        let generation = config.generation.load(Ordering::Acquire);
        if generation != self.limits_generation.get() {
            self.limits_generation.set(generation);
            let mut shard = self.shard.borrow_mut();
            shard.limits = config.encoding_limits();
            shard.notify.flags = config.notify_flags.load(Ordering::Relaxed);
            shard.eviction = config.eviction();
            drop(shard);
            if let Some(policy) = FsyncPolicy::parse(&config.get("appendfsync")) {
                self.set_fsync_policy(policy);
            }
            self.refresh_memory_step(config.maxmemory.load(Ordering::Relaxed));
            self.timing.set(Timing {
                slower_than: config.slowlog_slower_than.load(Ordering::Relaxed),
                monitor_ms: config.latency_monitor_ms.load(Ordering::Relaxed),
                tracking: config.latency_tracking.load(Ordering::Relaxed),
            });
        }
    }

    /// Runs a shard command on this thread's shard, writing its reply to `reply`.
    /// Runs a command on this shard. Returns its duration in microseconds when it belongs
    /// in the slow log (the caller logs it on the client's thread).
    pub fn exec(
        &self,
        spec: usize,
        db: usize,
        args: &Args,
        reply: &mut ReplyBuf,
        record: bool,
        caller: Caller,
    ) -> Option<u64> {
        let Handler::Shard(f) = COMMANDS[spec].handler else {
            reply.error("ERR command cannot run on a shard");
            return None;
        };
        if COMMANDS[spec].is_write() {
            if let Some(refusal) = self.journal_refusal() {
                reply.error(&refusal);
                return None;
            }
        }
        let timer = record.then(|| self.start_call_timer());
        let errors_before = reply.error_offsets.len();
        crash::running(COMMANDS[spec].name);
        let words = COMMANDS[spec].is_write().then_some(args);
        self.shard.borrow_mut().tracking.caller = caller;
        self.with_ctx(db, reply, words, |ctx| f(ctx, args));
        self.end_tracked_call(spec, args);
        crash::idle();
        self.record_call(spec, timer?, reply, errors_before)
    }

    /// Starts timing a call this thread runs for a client: every call while the slow log or
    /// latency tracking want each one, else one in [`TIMING_SAMPLE`].
    pub(crate) fn start_call_timer(&self) -> CallTimer {
        let executed = self.executed.get().wrapping_add(1);
        self.executed.set(executed);
        let timing = self.timing();
        let every = timing.every_command();
        // quanta reads the TSC: a few nanoseconds where clock_gettime costs tens, on every
        // command while the slow log and latency tracking are on (the defaults).
        let started = (every || executed.is_multiple_of(TIMING_SAMPLE)).then(quanta::Instant::now);
        CallTimer { timing, started }
    }

    /// Counts a finished call in the command and error statistics and the latency
    /// histograms. Returns its duration when it belongs in the slow log (`observe`).
    pub(crate) fn record_call(
        &self,
        spec: usize,
        timer: CallTimer,
        reply: &ReplyBuf,
        errors_before: usize,
    ) -> Option<u64> {
        let elapsed = timer.started.map(|t| t.elapsed());
        let mut stats = self.stats.borrow_mut();
        let failed = stats.count_errors(reply, errors_before) > 0;
        match elapsed {
            Some(d) if timer.timing.every_command() => {
                let usec = d.as_micros() as u64;
                stats.record_call(spec, usec, failed);
                drop(stats);
                self.observe(spec, usec, timer.timing)
            }
            Some(d) => {
                stats.record_call(spec, d.as_micros() as u64 * TIMING_SAMPLE, failed);
                None
            }
            None => {
                stats.record_call(spec, 0, failed);
                None
            }
        }
    }

    /// What this thread's copy of the configuration says to measure (refreshed when the
    /// configuration changed).
    pub(crate) fn timing(&self) -> Timing {
        self.sync_limits();
        self.timing.get()
    }

    /// Feeds a command's measured duration to the latency histograms and the latency
    /// monitor, as Redis's call() does. Returns the duration when the command belongs in the
    /// slow log, which the client's thread keeps (it knows the client's address and name).
    pub(crate) fn observe(&self, spec: usize, usec: u64, timing: Timing) -> Option<u64> {
        let cmd = &COMMANDS[spec];
        if timing.tracking {
            // Redis records microseconds, in nanoseconds.
            self.histograms
                .borrow_mut()
                .record(spec, usec.saturating_mul(1000));
        }
        let ms = usec / 1000;
        if timing.monitor_ms > 0 && ms >= timing.monitor_ms {
            let event = latency::command_event(cmd.flags & flags::FAST != 0);
            self.latency_events
                .borrow_mut()
                .add(event, ms, slowlog::unix_time());
        }
        let logged = timing.slower_than >= 0
            && usec >= timing.slower_than as u64
            && cmd.flags & flags::SKIP_SLOWLOG == 0;
        logged.then_some(usec)
    }

    /// Adds an entry to this thread's slow log.
    pub(crate) fn log_slow(&self, entry: SlowEntry) {
        let max = self.cluster.config.slowlog_max_len.load(Ordering::Relaxed);
        let max = usize::try_from(max).unwrap_or(usize::MAX);
        self.slowlog.borrow_mut().push(entry, max);
    }

    /// Runs `f` with a command context on this shard's database `db`, and journals what it
    /// did: `words` are the command's own, for a write (see crates/coord/src/durability.rs).
    pub(crate) fn with_ctx<R>(
        &self,
        db: usize,
        reply: &mut ReplyBuf,
        words: Option<&Args>,
        f: impl FnOnce(&mut ExecCtx) -> R,
    ) -> R {
        self.sync_limits();
        let journaling = self.journaling();
        let mut effects = Effects::default();
        let mut shard = self.shard.borrow_mut();
        let (dirty, expired) = (shard.dirty, shard.stats.expired_keys);
        let mut ctx = ExecCtx {
            shard: &mut shard,
            db,
            now: self.now_ms.get(),
            reply,
            shard_id: self.id,
            num_shards: self.num_shards(),
            max_bulk_len: self
                .cluster
                .config
                .proto_max_bulk_len
                .load(Ordering::Relaxed),
            effects: journaling.then_some(&mut effects),
        };
        let r = f(&mut ctx);
        if journaling {
            // Removing an expired key counts as a change too; those are journaled apart.
            let expiries = shard.stats.expired_keys - expired;
            let changed = shard.dirty - dirty > expiries;
            self.journal_effects(&mut shard, db, words, effects, changed);
        }
        let notified = shard.notify.pending();
        let invalidated = shard.tracking.pending();
        drop(shard);
        self.publish_memory(false);
        if notified {
            self.publish_notifications();
        }
        if invalidated {
            self.send_invalidations();
        }
        r
    }

    /// Commands this shard has run (wrapping).
    pub(crate) fn executed(&self) -> u64 {
        self.executed.get()
    }

    /// Handles one message from another thread, then serves clients blocked on keys it
    /// wrote, then sends the replies it made. Redis too writes a command's reply only after
    /// serving the clients it unblocked, so a client that sees the reply and then publishes
    /// knows its message reaches a subscriber after the keyspace events of both (events and
    /// replies travel in each thread's one mailbox, in order).
    pub fn handle(&self, msg: ShardMsg) {
        self.handling.set(self.handling.get() + 1);
        self.handle_message(msg);
        self.send_invalidations();
        self.serve_blocked();
        self.journal_flush();
        // Hops and control messages change the shard outside a command's context too.
        self.publish_memory(false);
        self.handling.set(self.handling.get() - 1);
        if self.handling.get() == 0 {
            self.send_replies();
            self.send_owed_wakes();
        }
    }

    fn handle_message(&self, msg: ShardMsg) {
        match msg {
            ShardMsg::Exec {
                batch,
                origin,
                slot,
            } => {
                self.refresh_clock();
                let n = batch.cmds.len() - batch.next;
                if n > 1 {
                    self.prefetch_keys(batch.cmds[batch.next..].iter().map(|c| {
                        let spans = &batch.spans[c.first..c.first + c.nargs];
                        (c.spec, c.db, Args::new(&batch.data, spans))
                    }));
                }
                let (buf, mut ends) = self.reply_buffers();
                ends.reserve(n);
                let mut reply = ReplyBuf::new(false);
                reply.buf = buf;
                reply.limit = batch.reply_limit;
                let next = batch.next;
                self.continue_batch(DeferredBatch {
                    batch,
                    next,
                    reply,
                    ends,
                    slow: Vec::new(),
                    origin,
                    slot,
                });
            }
            ShardMsg::TxSchedule {
                id,
                locks,
                shards,
                origin,
                slot,
            } => {
                let (accepted, granted) = self.schedule(id, locks, shards);
                self.reply_to(origin, slot, Payload::Scheduled { accepted, granted });
            }
            ShardMsg::TxHop {
                tx,
                f,
                conclude,
                origin,
                slot,
            } => {
                let id = match tx {
                    HopTx::Scheduled(id) => id,
                    HopTx::Single(locks) if conclude && self.no_transaction_here() => {
                        self.refresh_clock();
                        let value = self.run_alone(locks.iter().any(Lock::writes), f);
                        // It ended here, so its sender has nothing to release: no id.
                        self.reply_to(origin, slot, Payload::Hop { id: 0, value });
                        return;
                    }
                    HopTx::Single(locks) => {
                        let writes = locks.iter().any(Lock::writes);
                        let id = self.schedule_here(locks);
                        if writes {
                            self.journal_tx_begin(id, 1);
                        }
                        id
                    }
                };
                self.offer_hop(id, f, conclude, origin, slot);
            }
            ShardMsg::TxScheduleHop {
                id,
                locks,
                shards,
                f,
                conclude,
                origin,
                slot,
            } => {
                if !self.schedule(id, locks, shards).0 {
                    self.reply_to(origin, slot, Payload::Refused(f));
                    return;
                }
                self.offer_hop(id, f, conclude, origin, slot);
            }
            ShardMsg::TxRelease(id) => self.release(id),
            ShardMsg::TxSeal { id, origin, slot } => {
                let sealed = self.journal_tx_seal(id);
                self.reply_to(
                    origin,
                    slot,
                    Payload::Hop {
                        id,
                        value: Box::new(sealed),
                    },
                );
            }
            ShardMsg::JournalSynced => self.journal_synced(),
            ShardMsg::SnapshotStep => self.snapshot_step(),
            ShardMsg::Call(f) => {
                self.refresh_clock();
                f(self);
            }
            ShardMsg::Run { f, origin, slot } => {
                self.refresh_clock();
                let value = f(self);
                self.reply_to(origin, slot, Payload::Hop { id: 0, value });
            }
            ShardMsg::Reply { slot, reply } => self.replies.borrow_mut().fill(slot, reply),
            ShardMsg::Report(done) => {
                let _ = done.send(self.report());
            }
            ShardMsg::ClientList(ids, done) => {
                let _ = done.send(self.clients.borrow().list(&ids));
            }
            ShardMsg::ClientUnblock(id, error, done) => {
                let waiter = self.clients.borrow().blocked_waiter(id);
                let unblocked = waiter.is_some_and(|w| {
                    // Claimed here, the waiter is ours to answer: wake its connection.
                    let won = w.claim();
                    if won {
                        let wake = Payload::Wake(Wake::Unblocked { error });
                        self.replies.borrow_mut().fill(w.slot, wake);
                    }
                    won
                });
                let _ = done.send(unblocked);
            }
            ShardMsg::ClientKill(filter, done) => {
                let _ = done.send(self.clients.borrow().kill(&filter));
            }
            ShardMsg::KillRevokedSubscribers { user, caller, done } => {
                let _ = done.send(self.kill_revoked_subscribers(&user, caller));
            }
            ShardMsg::Populate {
                db,
                count,
                prefix,
                size,
                done,
            } => {
                self.populate(db, count, &prefix, size);
                let _ = done.send(());
            }
            ShardMsg::Subscriptions { changes, done } => {
                self.apply_subscriptions(&changes);
                if let Some(done) = done {
                    let _ = done.send(());
                }
            }
            ShardMsg::Publish(msg) => self.deliver(&msg),
            ShardMsg::ResetStats(done) => {
                self.stats.borrow_mut().reset();
                // Redis's CONFIG RESETSTAT frees every command's latency histogram too.
                self.histograms.borrow_mut().reset();
                // The rate's samples count commands since the last reset too.
                let mut samples = self.ops_samples.borrow_mut();
                samples.clear();
                samples.push_back((self.now.get(), 0));
                drop(samples);
                let mut shard = self.shard.borrow_mut();
                shard.stats = ShardStats::default();
                let _ = done.send(());
            }
        }
    }

    /// Sends a reply to `origin`; under `appendfsync always` it leaves once the journal
    /// holds, on disk, everything recorded before it.
    pub(crate) fn reply_to(&self, origin: usize, slot: usize, reply: Payload) {
        self.reply_when_durable(origin, slot, reply);
    }

    /// A reply to another thread made while handling a message waits in `outgoing` until
    /// the message is done (`handle`). Anywhere else (a connection's own transaction code,
    /// which may wait next for an answer that depends on this reply) it leaves at once.
    pub(crate) fn send_reply(&self, origin: usize, slot: usize, reply: Payload) {
        if origin == self.id {
            self.replies.borrow_mut().fill(slot, reply);
        } else if self.handling.get() > 0 {
            self.outgoing.borrow_mut().push((origin, slot, reply));
        } else {
            self.deliver_reply(origin, slot, reply);
        }
    }

    fn deliver_reply(&self, origin: usize, slot: usize, reply: Payload) {
        match reply {
            Payload::Batch(r) if r.socket.is_some() => self.reply_directly(origin, slot, r),
            reply => {
                self.cluster.mailboxes[origin].send(ShardMsg::Reply { slot, reply });
            }
        }
    }

    /// Empty buffers for a batch's replies, with the memory of the last ones written
    /// straight to a socket (`keep_reply_buffers`).
    fn reply_buffers(&self) -> (Vec<u8>, Vec<usize>) {
        std::mem::take(&mut *self.spare_reply.borrow_mut())
    }

    /// Keeps the buffers of replies written straight to a client's socket for the next
    /// batch, unless a large reply grew them.
    pub(crate) fn keep_reply_buffers(&self, mut out: Vec<u8>, mut ends: Vec<usize>) {
        if out.capacity() <= KEPT_BUFFER_BYTES {
            out.clear();
            ends.clear();
            *self.spare_reply.borrow_mut() = (out, ends);
        }
    }

    /// Sends the replies `handle` kept back.
    fn send_replies(&self) {
        if self.outgoing.borrow().is_empty() {
            return;
        }
        let mut outgoing = self.outgoing.take();
        for (origin, slot, reply) in outgoing.drain(..) {
            self.deliver_reply(origin, slot, reply);
        }
        // The vector's memory is kept for the next message.
        let mut kept = self.outgoing.borrow_mut();
        if kept.is_empty() {
            *kept = outgoing;
        }
    }

    /// Records the intents of a transaction spanning `shards` shards here: (accepted, its
    /// turn has already come).
    pub(crate) fn schedule(&self, id: TxId, locks: Vec<Lock>, shards: u32) -> (bool, bool) {
        let mut txq = self.txq.borrow_mut();
        let accepted = txq.schedule(id, locks);
        let granted = accepted && txq.is_granted(id);
        drop(txq);
        if accepted && shards > 0 {
            self.journal_tx_begin(id, shards);
        }
        (accepted, granted)
    }

    /// Schedules a transaction that touches only this shard under a fresh id. Every id
    /// already here was drawn earlier, so a fresh one is larger and is never refused; the loop
    /// only guards that reasoning.
    pub(crate) fn schedule_here(&self, locks: Vec<Lock>) -> TxId {
        loop {
            let id = self.cluster.next_txid();
            if self.txq.borrow_mut().schedule(id, locks.clone()) {
                return id;
            }
        }
    }

    /// Runs a transaction's hop now if its turn has come here, or queues it until then.
    fn offer_hop(&self, id: TxId, f: HopFn, conclude: bool, origin: usize, slot: usize) {
        let hop = Hop::Run {
            f,
            conclude,
            origin,
            slot,
        };
        let ready = self.txq.borrow_mut().submit(id, hop);
        if let Some(hop) = ready {
            self.run_hop(id, hop);
        }
    }

    /// Drops a transaction's intents here (recording its end) and runs the hops whose turn
    /// has come.
    pub(crate) fn release(&self, id: TxId) {
        self.end_undo(id);
        self.journal_tx_end(id);
        let ready = self.txq.borrow_mut().release(id);
        for (id, hop) in ready {
            self.run_hop(id, hop);
        }
    }

    /// True when no transaction holds intents here, so `run_alone` may run.
    pub(crate) fn no_transaction_here(&self) -> bool {
        self.txq.borrow().is_idle() && self.running_tx.get() == 0
    }

    /// Runs `f` at once as a transaction of this shard alone, on its own thread, when
    /// `no_transaction_here`, with the clock as the caller last refreshed it (the round's, or
    /// the message's): `f` does not wait, so nothing runs between its start and end
    /// and it needs neither intents nor a turn, but its records are grouped and its undo log
    /// owned as a one-shard hop's are (`run_hop`), without the hop's messages and boxes.
    pub(crate) fn run_alone<R>(&self, writes: bool, f: impl FnOnce(&Worker) -> R) -> R {
        debug_assert!(self.no_transaction_here());
        let id = self.cluster.next_txid();
        if writes {
            self.journal_tx_begin(id, 1);
        }
        let value = self.run_in_tx(id, f);
        self.release(id);
        self.serve_blocked();
        value
    }

    /// Runs `f` as transaction `id`'s work here: its records belong to the transaction, and
    /// its changes to the transaction's undo log.
    fn run_in_tx<R>(&self, id: TxId, f: impl FnOnce(&Worker) -> R) -> R {
        self.current_tx.set(self.journal_tx_tag(id));
        self.running_tx.set(id);
        let value = f(self);
        self.running_tx.set(0);
        self.current_tx.set((0, 0));
        value
    }

    /// Runs a hop whose turn has come.
    pub(crate) fn run_hop(&self, id: TxId, hop: Hop) {
        self.refresh_clock();
        match hop {
            Hop::Run {
                f,
                conclude,
                origin,
                slot,
            } => {
                let value = self.run_in_tx(id, f);
                if conclude {
                    self.release(id);
                }
                self.reply_to(origin, slot, Payload::Hop { id, value });
            }
            Hop::Batch(mut d) => {
                let ran = self.exec_batch_item(&mut d, Some(id));
                self.release(id);
                match ran {
                    Ok(()) => self.continue_batch(d),
                    Err(watch) => self.finish_batch(d, Some(watch)),
                }
            }
            Hop::Serve { db, key } => {
                self.serve_key(db, &key);
                self.release(id);
            }
        }
    }

    /// Runs a batch of plain commands and script runs from `d.next`. A command that would
    /// overtake a transaction holding intents on its keys, or a script run while any
    /// transaction holds intents here, stops the batch: the rest waits, in order, as a
    /// one-shard transaction of its own. Replies passing the batch's output budget end it,
    /// and so does a script run that needs more than this shard (it is handed back).
    fn continue_batch(&self, mut d: DeferredBatch) {
        while d.next < d.batch.cmds.len() {
            let run = d.batch.runs.at(d.next);
            let locks = match run {
                Some(writes) if !self.no_transaction_here() => Some(vec![Lock::AllDbs {
                    mode: Mode::for_write(writes),
                }]),
                Some(_) => None,
                None => self.conflicting_locks(&d.batch, d.next),
            };
            if let Some(locks) = locks {
                let journaled = run == Some(true);
                let id = self.schedule_here(locks);
                if journaled {
                    self.journal_tx_begin(id, 1);
                }
                let ready = self.txq.borrow_mut().submit(id, Hop::Batch(d));
                if let Some(hop) = ready {
                    self.run_hop(id, hop);
                }
                return;
            }
            if let Err(watch) = self.exec_batch_item(&mut d, None) {
                return self.finish_batch(d, Some(watch));
            }
            if d.reply.full() {
                // Fewer replies than commands tell the coordinator why.
                break;
            }
        }
        self.finish_batch(d, None);
    }

    /// Runs command `d.next` of a batch: a script run as a transaction of this shard alone
    /// (`tx`'s work when one was scheduled for it, else `run_alone`'s), any other command
    /// as a plain one. Err when a script run is handed back.
    fn exec_batch_item(
        &self,
        d: &mut DeferredBatch,
        tx: Option<TxId>,
    ) -> Result<(), Arc<RunWatch>> {
        let i = d.next;
        let writes = d.batch.runs.at(i);
        if let (Some(writes), Some(run)) = (writes, d.batch.runs.take(i)) {
            let (reply, slow) = (&mut d.reply, &mut d.slow);
            match tx {
                Some(id) => self.run_in_tx(id, |w| run(w, i, reply, slow))?,
                None => self.run_alone(writes, |w| run(w, i, reply, slow))?,
            }
        } else {
            self.exec_plain_cmd(&d.batch, i, &mut d.reply, &mut d.slow);
        }
        d.ends.push(d.reply.buf.len());
        d.next += 1;
        Ok(())
    }

    /// Answers a batch with what it made; `handed_back` is a script run that needs more
    /// than this shard, sent back with the commands after it, which did not run.
    fn finish_batch(&self, mut d: DeferredBatch, handed_back: Option<Arc<RunWatch>>) {
        // A reply over the client's output limit is not written: the client is dropped.
        let socket = d.batch.socket.take().filter(|_| !d.reply.full());
        let batch = if handed_back.is_some() {
            d.batch.next = d.next + 1;
            Some(d.batch)
        } else {
            d.batch.emptied()
        };
        let reply = BatchReply {
            out: d.reply.buf,
            ends: d.ends,
            slow: d.slow,
            socket,
            written: false,
            batch,
            handed_back,
        };
        self.reply_to(d.origin, d.slot, Payload::Batch(reply));
    }

    /// The locks command `i` of a batch needs, if a transaction holds a conflicting intent
    /// (None, without computing anything, when no transaction is here).
    fn conflicting_locks(&self, batch: &ExecBatch, i: usize) -> Option<Vec<Lock>> {
        if self.txq.borrow().is_idle() {
            return None;
        }
        let c = &batch.cmds[i];
        let spans = &batch.spans[c.first..c.first + c.nargs];
        let locks = self.command_locks(c.spec, c.db, &Args::new(&batch.data, spans));
        (!self.txq.borrow().is_free(&locks)).then_some(locks)
    }

    /// The intents a command needs on this shard.
    pub(crate) fn command_locks(&self, spec: usize, db: usize, args: &Args) -> Vec<Lock> {
        let mut locks = Vec::new();
        plan::command_locks(
            spec,
            db,
            args,
            self.cluster.databases,
            self.num_shards(),
            |shard, lock| {
                if shard == self.id {
                    locks.push(lock);
                }
            },
        );
        locks
    }

    /// Prefetches the table memory of every key this shard owns among `cmds` (a round's or
    /// a batch's single-key commands and scripts' first declared keys, as spec, database and
    /// arguments), so the lookups that follow overlap their cache misses instead of taking
    /// them one after another.
    pub(crate) fn prefetch_keys<'a>(&self, cmds: impl Iterator<Item = (usize, usize, Args<'a>)>) {
        let shard = self.shard.borrow();
        let n = self.num_shards();
        for (spec, db, args) in cmds {
            let spec = &COMMANDS[spec];
            let at = match (spec.route, spec.intents) {
                (Route::Key, _) => spec.first_key as usize,
                // A script's first declared key (EVAL, FCALL: `numkeys`, then the keys),
                // which its run will most likely read or write on this thread.
                (_, Intents::Script) => match spec.key_positions_iter(&args).next() {
                    Some(at) => at,
                    None => continue,
                },
                _ => continue,
            };
            if at >= args.len() || db >= shard.dbs.len() {
                continue;
            }
            let key = args.get(at);
            if n == 1 || shard_for_key(key, n) == self.id {
                shard.dbs[db].table.prefetch(key);
            }
        }
    }

    /// True when a plain command may run on this shard now without overtaking a transaction.
    pub(crate) fn may_run_now(&self, spec: usize, db: usize, args: &Args) -> bool {
        self.txq.borrow().is_idle() || {
            let locks = self.command_locks(spec, db, args);
            self.txq.borrow().is_free(&locks)
        }
    }

    fn exec_batch_cmd(
        &self,
        batch: &ExecBatch,
        i: usize,
        reply: &mut ReplyBuf,
        slow: &mut Vec<SlowCall>,
    ) {
        let c = &batch.cmds[i];
        reply.resp3 = c.resp3;
        let spans = &batch.spans[c.first..c.first + c.nargs];
        let args = Args::new(&batch.data, spans);
        if let Some(duration) = self.exec(c.spec, c.db, &args, reply, c.record, c.caller) {
            slow.push(SlowCall {
                index: i,
                time: slowlog::unix_time(),
                duration,
                argv: slowlog::entry_argv(&args),
            });
        }
    }

    /// Runs command `i` of a plain batch (a client's commands sent to this shard, not a
    /// transaction's), refusing one that may grow memory while used memory is over
    /// `maxmemory`. The client's thread checked it when it arrived, but a round's batch may
    /// carry many writes, and this shard's own usage is exact only here (docs/eviction.md).
    fn exec_plain_cmd(
        &self,
        batch: &ExecBatch,
        i: usize,
        reply: &mut ReplyBuf,
        slow: &mut Vec<SlowCall>,
    ) {
        let c = &batch.cmds[i];
        let limited = self.cluster.config.maxmemory.load(Ordering::Relaxed) != 0;
        if limited && COMMANDS[c.spec].flags & DENYOOM != 0 && self.out_of_memory() {
            reply.resp3 = c.resp3;
            let before = reply.error_offsets.len();
            reply.error(OOM);
            let mut stats = self.stats.borrow_mut();
            stats.record_rejected(c.spec);
            stats.count_errors(reply, before);
            return;
        }
        self.exec_batch_cmd(batch, i, reply, slow);
    }

    /// Runs a whole batch (a transaction's hop: its intents are held).
    pub(crate) fn run_batch(&self, batch: &ExecBatch) -> BatchReply {
        let mut reply = ReplyBuf::new(false);
        let mut ends = Vec::with_capacity(batch.cmds.len());
        let mut slow = Vec::new();
        for i in 0..batch.cmds.len() {
            self.exec_batch_cmd(batch, i, &mut reply, &mut slow);
            ends.push(reply.buf.len());
        }
        BatchReply {
            out: reply.buf,
            ends,
            slow,
            ..BatchReply::default()
        }
    }

    pub fn populate(&self, db: usize, count: u64, prefix: &[u8], size: Option<usize>) {
        self.refresh_clock();
        let mut shard = self.shard.borrow_mut();
        let mut reply = ReplyBuf::new(false);
        let mut ctx = ExecCtx {
            shard: &mut shard,
            db,
            now: self.now_ms.get(),
            reply: &mut reply,
            shard_id: self.id,
            num_shards: self.num_shards(),
            max_bulk_len: u64::MAX,
            effects: None,
        };
        server_family::populate(&mut ctx, count, prefix, size);
        drop(shard);
        // Replayed on this shard's data, it creates the same keys (the ones routed here).
        let count = count.to_string();
        let size = size.map(|n| n.to_string());
        let mut words: Vec<&[u8]> = vec![b"DEBUG", b"POPULATE", count.as_bytes(), prefix];
        words.extend(size.as_deref().map(str::as_bytes));
        self.journal_words(db, &words);
        self.journal_flush();
    }

    pub fn report(&self) -> ThreadReport {
        let tracking = self.tracking_counts();
        let (channels, patterns, _) = self.pubsub_counts();
        let shard = self.shard.borrow();
        ThreadReport {
            shard_id: self.id,
            stats: self.stats.borrow().clone(),
            shard_stats: shard.stats,
            used_memory: shard.used_memory(),
            keyspace: shard
                .dbs
                .iter()
                .map(|d| (d.len(), d.volatile_count(), d.avg_ttl))
                .collect(),
            db_overhead: shard
                .dbs
                .iter()
                .map(|d| (d.index_bytes(), d.expires_bytes()))
                .collect(),
            clients: self.clients.borrow().len(),
            client_memory: self.clients.borrow().buffer_bytes(),
            ops_per_sec: self.ops_per_sec(),
            journal: self.journal_report(),
            dirty: shard.dirty,
            lua_memory: self.scripting.used_memory(),
            tracking,
            pubsub: (channels, patterns),
        }
    }

    fn ops_per_sec(&self) -> u64 {
        let samples = self.ops_samples.borrow();
        match (samples.front(), samples.back()) {
            (Some(first), Some(last)) if last.0 > first.0 => {
                let secs = last.0.duration_since(first.0).as_secs_f64();
                (last.1.saturating_sub(first.1) as f64 / secs) as u64
            }
            _ => 0,
        }
    }

    /// Periodic work, 10 times a second: active expiry, idle-client timeouts, and a look at
    /// the mailbox.
    pub fn tick(&self) {
        #[cfg(debug_assertions)]
        if self.panic_on_tick.get() {
            panic!("DEBUG PANIC TICK");
        }
        self.anchor.set((Instant::now(), now_ms()));
        self.refresh_clock();
        self.cluster
            .note_changes(self.id, self.shard.borrow().dirty);
        if let Some(r) = self.journal_report() {
            self.cluster.note_journal_bytes(self.id, r.appended_bytes);
        }
        {
            let mut samples = self.ops_samples.borrow_mut();
            samples.push_back((self.now.get(), self.stats.borrow().total_commands));
            if samples.len() > OPS_SAMPLES {
                samples.pop_front();
            }
        }
        let active = self.cluster.config.active_expire.load(Ordering::Relaxed);
        // Active expiry announces `expired` as currently configured, even on a shard that ran
        // no command since notify-keyspace-events changed.
        self.sync_limits();
        {
            let mut shard = self.shard.borrow_mut();
            shard.active_expire = active;
            shard.expire_cycle(self.now_ms.get(), EXPIRE_BUDGET);
        }
        self.publish_memory(false);
        self.note_memory_limit();
        self.publish_notifications();
        self.send_invalidations();
        self.limit_tracking_table();
        let timeout = self.cluster.config.timeout_secs.load(Ordering::Relaxed);
        self.clients.borrow().close_idle(timeout);
        // A safety net under the wake-up rule: should a signal ever be missed (an event loop
        // that reports no parking relies on its executor's cross-thread wake-ups), queued
        // messages wait at most one tick, not until some client happens to send a command.
        self.journal_flush();
        self.poke_mailbox();
    }
}
