//! A worker: one thread's shard, its statistics and client registry, and the handling of
//! messages other threads send to this shard. The runtime layer owns the thread and its event
//! loop; it hands every mailbox message and every timer tick to the worker.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use damselfly_commands::stats::ThreadStats;
use damselfly_commands::table::{Handler, COMMANDS};
use damselfly_commands::{server_family, Args, ExecCtx};
use damselfly_protocol::{ReplyBuf, Span};
use damselfly_storage::{now_ms, Shard, ShardStats};
use futures_channel::oneshot;

use crate::client::{KillFilter, Registry};
use crate::cluster::Cluster;

/// Keys an active-expiry tick may remove per shard (ticks run 10 times a second).
const EXPIRE_BUDGET: usize = 20_000;
/// One command in this many is timed for commandstats; reading the clock per command costs
/// more than the command itself. The sampled time is scaled up, so `usec` stays an unbiased
/// estimate.
const TIMING_SAMPLE: u64 = 16;

/// One command shipped to another shard. Its arguments are `spans[first..first + nargs]`
/// over the batch's `data`.
#[derive(Debug, Clone, Copy)]
pub struct RemoteCmd {
    pub spec: u16,
    pub db: u16,
    pub resp3: bool,
    /// Count it in the executing thread's commandstats (false for parts of a fan-out, which
    /// the coordinator counts once).
    pub record: bool,
    pub first: u32,
    pub nargs: u32,
}

/// Commands for one shard, squashed into one message; replies come back together.
#[derive(Debug, Default)]
pub struct ExecBatch {
    pub data: Vec<u8>,
    pub spans: Vec<Span>,
    pub cmds: Vec<RemoteCmd>,
}

impl ExecBatch {
    /// Appends a command, copying its arguments.
    pub fn push(&mut self, mut cmd: RemoteCmd, args: impl Iterator<Item = impl AsRef<[u8]>>) {
        cmd.first = self.spans.len() as u32;
        let mut n = 0;
        for a in args {
            let a = a.as_ref();
            self.spans.push(Span {
                start: self.data.len() as u32,
                len: a.len() as u32,
            });
            self.data.extend_from_slice(a);
            n += 1;
        }
        cmd.nargs = n;
        self.cmds.push(cmd);
    }

    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }
}

/// Encoded replies of a batch; reply i is `out[ends[i-1]..ends[i]]`.
#[derive(Debug, Default)]
pub struct BatchReply {
    pub out: Vec<u8>,
    pub ends: Vec<u32>,
}

impl BatchReply {
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] as usize };
        &self.out[start..self.ends[i] as usize]
    }
}

/// What a thread reports for INFO.
#[derive(Debug, Clone, Default)]
pub struct ThreadReport {
    pub shard_id: usize,
    pub stats: ThreadStats,
    pub shard_stats: ShardStats,
    pub used_memory: usize,
    /// (keys, keys with TTL, avg_ttl) per database.
    pub keyspace: Vec<(usize, usize, u64)>,
    pub clients: usize,
    /// Commands per second over the last ~1.6 s of ticks.
    pub ops_per_sec: u64,
    /// Highest `used_memory` this shard has reached.
    pub peak_memory: usize,
}

/// Messages between threads.
pub enum ShardMsg {
    /// Run a batch; reply with `Reply { slot }` to the `origin` thread's mailbox.
    Exec {
        batch: ExecBatch,
        origin: usize,
        slot: u32,
    },
    /// The replies to a batch this thread sent.
    Reply {
        slot: u32,
        reply: BatchReply,
    },
    Report(oneshot::Sender<ThreadReport>),
    ClientList(Option<Vec<u64>>, oneshot::Sender<Vec<(u64, String)>>),
    ClientKill(KillFilter, oneshot::Sender<(usize, bool)>),
    Populate {
        db: usize,
        count: u64,
        prefix: Vec<u8>,
        size: Option<usize>,
        done: oneshot::Sender<()>,
    },
    ResetStats(oneshot::Sender<()>),
}

pub struct Worker {
    pub id: usize,
    pub cluster: Arc<Cluster>,
    pub shard: RefCell<Shard>,
    pub stats: RefCell<ThreadStats>,
    pub clients: RefCell<Registry>,
    /// Batches this thread sent to other shards and whose replies it awaits.
    pub(crate) replies: RefCell<ReplySlots>,
    /// Milliseconds since the epoch for the current round of commands (see `refresh_clock`).
    now_ms: Cell<u64>,
    /// Monotonic time of the same reading.
    now: Cell<Instant>,
    /// Wall-clock anchor, re-read every tick: per round only the monotonic clock is read and
    /// the wall time derived from it.
    anchor: Cell<(Instant, u64)>,
    executed: Cell<u64>,
    /// (time, total commands) at recent ticks, for `instantaneous_ops_per_sec`.
    ops_samples: RefCell<std::collections::VecDeque<(Instant, u64)>>,
    peak_memory: Cell<usize>,
}

/// Ticks of history behind `instantaneous_ops_per_sec` (Redis also uses 16 samples).
const OPS_SAMPLES: usize = 16;

impl Worker {
    pub fn new(id: usize, cluster: Arc<Cluster>) -> Rc<Self> {
        let shard = Shard::new(cluster.databases);
        Rc::new(Worker {
            id,
            cluster,
            shard: RefCell::new(shard),
            stats: RefCell::new(ThreadStats::default()),
            clients: RefCell::new(Registry::default()),
            replies: RefCell::new(ReplySlots::default()),
            now_ms: Cell::new(now_ms()),
            now: Cell::new(Instant::now()),
            anchor: Cell::new((Instant::now(), now_ms())),
            executed: Cell::new(0),
            ops_samples: RefCell::new(std::collections::VecDeque::from([(Instant::now(), 0)])),
            peak_memory: Cell::new(0),
        })
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
    /// thread, which other threads do not signal, still serves its mailbox promptly).
    pub fn poke_mailbox(&self) {
        self.cluster.mailboxes[self.id].poke();
    }

    /// Sends a batch to another shard; the returned future resolves to its replies (None if
    /// the shard is gone).
    pub(crate) fn send_batch(self: &Rc<Self>, shard: usize, batch: ExecBatch) -> ReplyWait {
        let slot = self.replies.borrow_mut().open();
        let sent = self.cluster.mailboxes[shard].send(ShardMsg::Exec {
            batch,
            origin: self.id,
            slot,
        });
        if !sent {
            self.replies.borrow_mut().abandon(slot);
        }
        ReplyWait {
            worker: self.clone(),
            slot,
            done: !sent,
        }
    }

    /// The monotonic time of the current round.
    pub fn round_instant(&self) -> Instant {
        self.now.get()
    }

    pub fn num_shards(&self) -> usize {
        self.cluster.num_shards()
    }

    /// Runs a shard command on this thread's shard, writing its reply to `reply`.
    pub fn exec(&self, spec: usize, db: usize, args: &Args, reply: &mut ReplyBuf, record: bool) {
        let Handler::Shard(f) = COMMANDS[spec].handler else {
            reply.error("ERR command cannot run on a shard");
            return;
        };
        let executed = self.executed.get().wrapping_add(1);
        self.executed.set(executed);
        let started = (record && executed.is_multiple_of(TIMING_SAMPLE)).then(Instant::now);
        let errors_before = reply.error_offsets.len();
        {
            let mut shard = self.shard.borrow_mut();
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
            };
            // A bug in one command must not take the shard's thread down with it.
            let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut ctx, args)));
            if ran.is_err() {
                tracing::error!(
                    command = COMMANDS[spec].name,
                    "command panicked; replying with an error"
                );
                ctx.reply.error("ERR internal error executing the command");
            }
        }
        if record {
            let mut stats = self.stats.borrow_mut();
            let failed = stats.count_errors(reply, errors_before) > 0;
            let usec = started.map_or(0, |t| t.elapsed().as_micros() as u64 * TIMING_SAMPLE);
            stats.record_call(spec, usec, failed);
        }
    }

    /// Handles one message from another thread.
    pub fn handle(&self, msg: ShardMsg) {
        match msg {
            ShardMsg::Exec {
                batch,
                origin,
                slot,
            } => {
                self.refresh_clock();
                let mut reply = ReplyBuf::new(false);
                let mut ends = Vec::with_capacity(batch.cmds.len());
                for c in &batch.cmds {
                    reply.resp3 = c.resp3;
                    let spans = &batch.spans[c.first as usize..(c.first + c.nargs) as usize];
                    let args = Args::new(&batch.data, spans);
                    self.exec(c.spec as usize, c.db as usize, &args, &mut reply, c.record);
                    ends.push(reply.buf.len() as u32);
                }
                let reply = BatchReply {
                    out: reply.buf,
                    ends,
                };
                self.cluster.mailboxes[origin].send(ShardMsg::Reply { slot, reply });
            }
            ShardMsg::Reply { slot, reply } => self.replies.borrow_mut().fill(slot, reply),
            ShardMsg::Report(done) => {
                let _ = done.send(self.report());
            }
            ShardMsg::ClientList(ids, done) => {
                let _ = done.send(self.clients.borrow().list(&ids));
            }
            ShardMsg::ClientKill(filter, done) => {
                let _ = done.send(self.clients.borrow().kill(&filter));
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
            ShardMsg::ResetStats(done) => {
                self.stats.borrow_mut().reset();
                let mut shard = self.shard.borrow_mut();
                shard.stats = ShardStats::default();
                let _ = done.send(());
            }
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
        };
        server_family::populate(&mut ctx, count, prefix, size);
    }

    pub fn report(&self) -> ThreadReport {
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
            clients: self.clients.borrow().len(),
            ops_per_sec: self.ops_per_sec(),
            peak_memory: self.peak_memory.get().max(shard.used_memory()),
        }
    }

    fn ops_per_sec(&self) -> u64 {
        let samples = self.ops_samples.borrow();
        match (samples.front(), samples.back()) {
            (Some(first), Some(last)) if last.0 > first.0 => {
                let secs = last.0.duration_since(first.0).as_secs_f64();
                ((last.1 - first.1) as f64 / secs) as u64
            }
            _ => 0,
        }
    }

    /// Periodic work, 10 times a second: active expiry and idle-client timeouts.
    pub fn tick(&self) {
        self.anchor.set((Instant::now(), now_ms()));
        self.refresh_clock();
        {
            let mut samples = self.ops_samples.borrow_mut();
            samples.push_back((self.now.get(), self.stats.borrow().total_commands));
            if samples.len() > OPS_SAMPLES {
                samples.pop_front();
            }
        }
        let active = self.cluster.config.active_expire.load(Ordering::Relaxed);
        {
            let mut shard = self.shard.borrow_mut();
            shard.active_expire = active;
            shard.expire_cycle(self.now_ms.get(), EXPIRE_BUDGET);
            self.peak_memory
                .set(self.peak_memory.get().max(shard.used_memory()));
        }
        let timeout = self.cluster.config.timeout_secs.load(Ordering::Relaxed);
        self.clients.borrow().close_idle(timeout);
    }
}

enum SlotState {
    Free,
    Waiting(Option<Waker>),
    Ready(BatchReply),
    /// The waiter went away; the slot is freed when its reply arrives.
    Abandoned,
}

/// Replies this thread is waiting for, by slot number. Replies arrive through this thread's
/// own mailbox, so completing a wait is a local wake-up, not a cross-thread one.
#[derive(Default)]
pub(crate) struct ReplySlots {
    slots: Vec<SlotState>,
    free: Vec<u32>,
}

impl ReplySlots {
    fn open(&mut self) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.slots[i as usize] = SlotState::Waiting(None);
                i
            }
            None => {
                self.slots.push(SlotState::Waiting(None));
                (self.slots.len() - 1) as u32
            }
        }
    }

    fn fill(&mut self, slot: u32, reply: BatchReply) {
        let Some(state) = self.slots.get_mut(slot as usize) else {
            return;
        };
        match std::mem::replace(state, SlotState::Ready(reply)) {
            SlotState::Waiting(Some(w)) => w.wake(),
            SlotState::Abandoned => {
                *state = SlotState::Free;
                self.free.push(slot);
            }
            _ => {}
        }
    }

    fn poll(&mut self, slot: u32, cx: &mut Context<'_>) -> Poll<BatchReply> {
        let state = &mut self.slots[slot as usize];
        match std::mem::replace(state, SlotState::Free) {
            SlotState::Ready(r) => {
                self.free.push(slot);
                Poll::Ready(r)
            }
            _ => {
                *state = SlotState::Waiting(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }

    fn abandon(&mut self, slot: u32) {
        let state = &mut self.slots[slot as usize];
        match state {
            SlotState::Ready(_) => {
                *state = SlotState::Free;
                self.free.push(slot);
            }
            _ => *state = SlotState::Abandoned,
        }
    }
}

/// Resolves to a batch's replies; None when the shard could not be reached.
pub(crate) struct ReplyWait {
    worker: Rc<Worker>,
    slot: u32,
    done: bool,
}

impl Future for ReplyWait {
    type Output = Option<BatchReply>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = self.worker.replies.borrow_mut().poll(self.slot, cx);
        match polled {
            Poll::Ready(r) => {
                self.done = true;
                Poll::Ready(Some(r))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ReplyWait {
    fn drop(&mut self) {
        if !self.done {
            self.worker.replies.borrow_mut().abandon(self.slot);
        }
    }
}
