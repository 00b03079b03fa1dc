//! Clients blocked on keys (BLPOP, BLMOVE, BZPOPMIN, ...): the per-key FIFO queues of waiters
//! on each shard, serving them when a key receives data, and the connection's side of
//! blocking (registering, waking, timing out, giving up on disconnect).
//!
//! A blocking command first runs its non-blocking form through the normal routing. If that
//! replies nil, the connection registers one [`Waiter`] on every shard owning one of its keys
//! (a shard that finds a key already holding data refuses, and the connection tries again).
//! The shard marks the key as awaited; any write to it (a command, a transaction's hop, a
//! multi-key write-back) lists it as ready, and when the shard finishes that piece of work it
//! serves the key's waiters in FIFO order, each in one step on the shard's thread: pop, reply
//! to the waiter's connection. If a transaction still holds an intent on the key (a MULTI that
//! pushed and may pop again), serving waits as a one-shard transaction of its own, so it comes
//! after every transaction already holding the key, as Redis serves blocked clients after
//! the command or EXEC that made the key ready.
//!
//! A waiter registered on several shards is served once: whoever flips its `claimed` flag
//! first (a shard serving it, or the connection on timeout or disconnect) owns it; the others
//! drop it when they meet it. BLMOVE whose destination lives on another shard cannot be served
//! by the source shard alone: it is woken instead, and its connection runs LMOVE as a normal
//! cross-shard transaction (so an element is never lost or duplicated) and blocks again if
//! another client took the element first.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use damselfly_commands::blocking::{self, BlockOp, BlockSpec};
use damselfly_commands::Args;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::{shard_for_key, StreamId};

use crate::connection::Connection;
use crate::messages::{ExecBatch, Payload, RemoteCmd, ShardMsg};
use crate::reply_slots::ReplyWait;
use crate::tx::{Lock, Mode};
use crate::worker::{Hop, Worker};

/// One blocked command, shared by the shards it waits on.
pub struct Waiter {
    claimed: AtomicBool,
    /// Where its wake-up goes: the connection's thread and reply slot.
    pub(crate) origin: usize,
    pub(crate) slot: usize,
    pub(crate) db: usize,
    pub(crate) resp3: bool,
    pub(crate) op: BlockOp,
    /// False for a BLMOVE whose destination is on another shard than its source.
    pub(crate) local: bool,
}

impl Waiter {
    pub(crate) fn new(
        origin: usize,
        slot: usize,
        db: usize,
        resp3: bool,
        op: BlockOp,
        local: bool,
    ) -> Self {
        Waiter {
            claimed: AtomicBool::new(false),
            origin,
            slot,
            db,
            resp3,
            op,
            local,
        }
    }

    /// Takes ownership of the waiter; false when a shard or its connection already did.
    pub(crate) fn claim(&self) -> bool {
        !self.claimed.swap(true, Ordering::AcqRel)
    }

    fn is_claimed(&self) -> bool {
        self.claimed.load(Ordering::Acquire)
    }
}

/// What a waiter's connection receives.
pub enum Wake {
    /// The reply, already produced on the shard.
    Served(Vec<u8>),
    /// The key has data but this shard cannot serve the command alone: run it again.
    Retry,
    /// CLIENT UNBLOCK: reply as a timeout would, or with the UNBLOCKED error.
    Unblocked { error: bool },
}

/// A waiter queue, oldest first.
type Queue = VecDeque<Arc<Waiter>>;

/// One shard's waiters, per (database, key).
#[derive(Default)]
pub(crate) struct BlockedKeys {
    queues: HashMap<(usize, Box<[u8]>), Queue, ahash::RandomState>,
}

impl BlockedKeys {
    fn front(&self, db: usize, key: &[u8]) -> Option<Arc<Waiter>> {
        self.queues.get(&(db, key.into()))?.front().cloned()
    }

    /// Drops the front waiter; true when the key has no waiter left.
    fn pop_front(&mut self, db: usize, key: &[u8]) -> bool {
        let k = (db, Box::<[u8]>::from(key));
        let Some(q) = self.queues.get_mut(&k) else {
            return true;
        };
        q.pop_front();
        let empty = q.is_empty();
        if empty {
            self.queues.remove(&k);
        }
        empty
    }
}

impl Worker {
    /// Registers `waiter` on `keys` (all on this shard) unless one of them can serve it now;
    /// returns whether it was registered.
    pub(crate) fn block_on(&self, waiter: Arc<Waiter>, keys: &[Vec<u8>]) -> bool {
        let any_ready = keys.iter().any(|k| {
            self.with_ctx(waiter.db, &mut ReplyBuf::new(false), None, |ctx| {
                blocking::serves_now(ctx, &waiter.op, k)
            })
        });
        if any_ready {
            return false;
        }
        let mut blocked = self.blocked.borrow_mut();
        let mut shard = self.shard.borrow_mut();
        for k in keys {
            let q = blocked
                .queues
                .entry((waiter.db, k.as_slice().into()))
                .or_default();
            q.push_back(waiter.clone());
            shard.await_key(waiter.db, k);
        }
        true
    }

    /// Removes a waiter its connection took back (timeout, disconnect, served elsewhere).
    pub(crate) fn unblock(&self, waiter: &Arc<Waiter>, keys: &[Vec<u8>]) {
        let mut blocked = self.blocked.borrow_mut();
        let mut shard = self.shard.borrow_mut();
        for k in keys {
            let id = (waiter.db, Box::<[u8]>::from(k.as_slice()));
            if let Some(q) = blocked.queues.get_mut(&id) {
                q.retain(|w| !Arc::ptr_eq(w, waiter));
                if q.is_empty() {
                    blocked.queues.remove(&id);
                    shard.forget_awaited(waiter.db, k);
                }
            }
        }
    }

    /// Serves the waiters of keys written since the last call. Called when a message, a hop
    /// or a connection's inline command is done (never in the middle of a transaction's hop).
    pub(crate) fn serve_blocked(&self) {
        loop {
            let ready = {
                let mut shard = self.shard.borrow_mut();
                if !shard.has_ready_keys() {
                    return;
                }
                shard.take_ready_keys()
            };
            for (db, key) in ready {
                let locks = vec![Lock::Key {
                    db,
                    key: key.clone(),
                    mode: Mode::Exclusive,
                }];
                let free = {
                    let txq = self.txq.borrow();
                    txq.is_idle() || txq.is_free(&locks)
                };
                if free {
                    self.serve_key(db, &key);
                } else {
                    let id = self.schedule_here(locks);
                    let hop = Hop::Serve { db, key };
                    if let Some(hop) = self.txq.borrow_mut().submit(id, hop) {
                        self.run_hop(id, hop);
                    }
                }
            }
        }
    }

    /// Serves `key`'s waiters, oldest first, while it has data for them.
    pub(crate) fn serve_key(&self, db: usize, key: &[u8]) {
        loop {
            let Some(w) = self.blocked.borrow().front(db, key) else {
                return;
            };
            if !w.is_claimed() {
                let mut reply = ReplyBuf::new(w.resp3);
                if !self.with_ctx(db, &mut reply, None, |ctx| blocking::ready(ctx, &w.op, key)) {
                    return;
                }
                if w.claim() {
                    let wake = if w.local {
                        self.with_ctx(db, &mut reply, None, |ctx| blocking::serve(ctx, &w.op, key));
                        Wake::Served(reply.buf)
                    } else {
                        Wake::Retry
                    };
                    self.reply_to(w.origin, w.slot, Payload::Wake(wake));
                }
            }
            if self.blocked.borrow_mut().pop_front(db, key) {
                self.shard.borrow_mut().forget_awaited(db, key);
            }
        }
    }
}

/// A connection's blocking command while it waits.
pub(crate) struct BlockedCmd {
    waiter: Arc<Waiter>,
    wait: ReplyWait,
    /// The shards it is registered on, with its keys there.
    shards: Vec<(usize, Vec<Vec<u8>>)>,
    deadline: Option<Instant>,
    /// The command, kept to run again after a `Retry` wake.
    cmd: ExecBatch,
    idx: usize,
    /// The wake-up, once it arrived.
    woken: Option<Option<Payload>>,
}

impl Connection {
    /// Runs a blocking command (outside MULTI): its non-blocking form first, then, if that
    /// found nothing, registers the client and returns with `self.blocked` set.
    pub(crate) async fn run_blocking(&mut self, idx: usize, args: &Args<'_>) {
        self.flush_remote().await;
        let mut cmd = ExecBatch::default();
        cmd.push(RemoteCmd::kept(idx), args.iter());
        self.attempt_then_block(idx, cmd).await;
    }

    async fn attempt_then_block(&mut self, idx: usize, cmd: ExecBatch) {
        loop {
            let args = Args::new(&cmd.data, &cmd.spans);
            let mark = self.out.buf.len();
            self.route(idx, &args).await;
            self.flush_remote().await;
            if !blocking::is_nil_reply(&self.out.buf[mark..]) {
                return;
            }
            let Some(spec) = blocking::spec(&args, self.worker.now_ms()) else {
                return;
            };
            self.out.buf.truncate(mark);
            if let Some(mut b) = self.register(&spec).await {
                b.idx = idx;
                b.cmd = cmd;
                *self.info.blocked.borrow_mut() = Some(b.waiter.clone());
                self.blocked = Some(b);
                self.worker
                    .cluster
                    .blocked_clients
                    .fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }

    /// Registers a waiter on every shard owning one of the keys. None when a key already had
    /// data (the caller runs the command again).
    async fn register(&mut self, spec: &BlockSpec) -> Option<BlockedCmd> {
        let n = self.worker.num_shards();
        let local = match &spec.op {
            BlockOp::Move { dst, .. } => shard_for_key(&spec.keys[0], n) == shard_for_key(dst, n),
            _ => true,
        };
        let db = self.info.db.get();
        let op = self.resolve_last_ids(db, spec.op.clone()).await;
        let (slot, wait) = self.worker.open_wait();
        let waiter = Arc::new(Waiter::new(
            self.worker.id,
            slot,
            db,
            self.info.resp.get() == 3,
            op,
            local,
        ));
        let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
        for k in &spec.keys {
            let shard = shard_for_key(k, n);
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push(k.clone()),
                None => by_shard.push((shard, vec![k.clone()])),
            }
        }
        let asks: Vec<_> = by_shard
            .iter()
            .map(|(shard, keys)| {
                let (w, keys) = (waiter.clone(), keys.clone());
                self.worker.ask(*shard, move |origin, slot| ShardMsg::Run {
                    f: Box::new(move |wk: &Worker| {
                        Box::new(wk.block_on(w, &keys)) as Box<dyn Any + Send>
                    }),
                    origin,
                    slot,
                })
            })
            .collect();
        let mut shards = Vec::new();
        let mut refused = false;
        for ((shard, keys), ask) in by_shard.into_iter().zip(asks) {
            let registered = match ask.await {
                Some(Payload::Hop { value, .. }) => value.downcast::<bool>().is_ok_and(|b| *b),
                _ => false,
            };
            if registered {
                shards.push((shard, keys));
            } else {
                refused = true;
            }
        }
        // Redis accepts timeouts of millions of years; a deadline past what `Instant` can
        // hold on this platform is no deadline (rather than a panic).
        let deadline = (spec.timeout_ms > 0)
            .then(|| Instant::now().checked_add(Duration::from_millis(spec.timeout_ms)))
            .flatten();
        let blocked = BlockedCmd {
            waiter,
            wait,
            shards,
            deadline,
            cmd: ExecBatch::default(),
            idx: 0,
            woken: None,
        };
        if refused && blocked.waiter.claim() {
            self.release_waiter(blocked, true);
            return None;
        }
        // Registered everywhere, or a shard served the waiter meanwhile: its reply is coming.
        Some(blocked)
    }

    /// Resolves a blocking XREAD's `$` starts to each stream's last id, asked of the key's
    /// shard: the read then waits for what arrives after this point.
    async fn resolve_last_ids(&mut self, db: usize, mut op: BlockOp) -> BlockOp {
        let n = self.worker.num_shards();
        for key in op.unresolved_keys() {
            let k = key.clone();
            let ask = self
                .worker
                .ask(shard_for_key(&key, n), move |origin, slot| ShardMsg::Run {
                    f: Box::new(move |wk: &Worker| {
                        let last = wk.with_ctx(db, &mut ReplyBuf::new(false), None, |ctx| {
                            blocking::stream_last_id(ctx, &k)
                        });
                        Box::new(last) as Box<dyn Any + Send>
                    }),
                    origin,
                    slot,
                });
            let last = match ask.await {
                Some(Payload::Hop { value, .. }) => value.downcast::<StreamId>().ok().map(|b| *b),
                _ => None,
            };
            // A shard that went away (shutdown) leaves the read waiting for anything new.
            op.resolve_last(&key, last.unwrap_or(StreamId::MIN));
        }
        op
    }

    /// Takes a waiter off every shard it was registered on; `claimed_here` when this
    /// connection claimed it, so no reply can arrive any more.
    fn release_waiter(&self, b: BlockedCmd, claimed_here: bool) {
        for (shard, keys) in b.shards {
            let w = b.waiter.clone();
            if shard == self.worker.id {
                self.worker.unblock(&w, &keys);
            } else {
                let f = Box::new(move |wk: &Worker| wk.unblock(&w, &keys));
                self.worker.cluster.mailboxes[shard].send(ShardMsg::Call(f));
            }
        }
        if claimed_here {
            b.wait.close();
        }
    }

    fn end_block(&mut self) -> Option<BlockedCmd> {
        let b = self.blocked.take()?;
        self.info.blocked.borrow_mut().take();
        self.worker
            .cluster
            .blocked_clients
            .fetch_sub(1, Ordering::Relaxed);
        Some(b)
    }

    /// True while a blocking command waits.
    pub fn is_blocked(&self) -> bool {
        self.blocked.is_some()
    }

    /// When the blocked command times out (None: it waits until served).
    pub fn block_deadline(&self) -> Option<Instant> {
        self.blocked.as_ref().and_then(|b| b.deadline)
    }

    /// Ready once the blocked command's wake-up arrived (cancel-safe: the wake-up is kept).
    pub fn poll_wake(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        let Some(b) = self.blocked.as_mut() else {
            return Poll::Ready(());
        };
        if b.woken.is_some() {
            return Poll::Ready(());
        }
        match Pin::new(&mut b.wait).poll(cx) {
            Poll::Ready(p) => {
                b.woken = Some(p);
                Poll::Ready(())
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// Handles an arrived wake-up: writes the reply, or runs the command again (which may
    /// block again).
    pub async fn resume(&mut self) {
        let Some(woken) = self.blocked.as_mut().and_then(|b| b.woken.take()) else {
            return;
        };
        let Some(mut b) = self.end_block() else {
            return;
        };
        let (idx, cmd) = (b.idx, std::mem::take(&mut b.cmd));
        self.release_waiter(b, false);
        match woken {
            Some(Payload::Wake(Wake::Served(reply))) => self.out.raw(&reply),
            Some(Payload::Wake(Wake::Retry)) => self.attempt_then_block(idx, cmd).await,
            Some(Payload::Wake(Wake::Unblocked { error: true })) => self
                .out
                .error("UNBLOCKED client unblocked via CLIENT UNBLOCK"),
            // The shard went away (shutdown): answer as a timeout would.
            _ => self.write_timeout_reply(),
        }
    }

    /// Ends the wait with the timeout reply if the deadline passed and no shard claimed the
    /// waiter first (then its reply is on the way and the wait goes on without a deadline).
    pub fn check_block_timeout(&mut self, now: Instant) {
        let Some(b) = self.blocked.as_mut() else {
            return;
        };
        if b.deadline.is_none_or(|d| now < d) {
            return;
        }
        b.deadline = None;
        if !b.waiter.claim() {
            return;
        }
        if let Some(b) = self.end_block() {
            self.release_waiter(b, true);
            self.write_timeout_reply();
        }
    }

    /// Redis answers every timed-out blocking command with a null array (BLMOVE too).
    fn write_timeout_reply(&mut self) {
        self.out.resp3 = self.info.resp.get() == 3;
        self.out.null_array();
    }

    /// Gives up a blocked command (the client disconnected or is being closed).
    pub(crate) fn abandon_block(&mut self) {
        if let Some(b) = self.end_block() {
            let claimed = b.waiter.claim();
            self.release_waiter(b, claimed);
        }
    }
}
