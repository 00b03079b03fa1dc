//! The messages between shard threads: squashed command batches and their replies,
//! transaction scheduling and hops, and the rare control messages (INFO reports, CLIENT
//! LIST/KILL, DEBUG POPULATE). Kept apart from the worker that handles them, so every module
//! that sends a message need not reach into the worker.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

use damselfly_commands::slowlog::SlowCall;
use damselfly_commands::stats::ThreadStats;
use damselfly_protocol::{ReplyBuf, Span};
use damselfly_scripting::watchdog::RunWatch;
use damselfly_storage::tracking::Caller;
use damselfly_storage::ShardStats;
use futures_channel::oneshot;

use crate::blocking::Wake;
use crate::client::KillFilter;
use crate::direct_reply::ClientSocket;
use crate::tx::{Lock, TxId};
use crate::worker::Worker;

/// One command shipped to another shard. Its arguments are `spans[first..first + nargs]`
/// over the batch's `data`.
#[derive(Debug, Clone, Copy)]
pub struct RemoteCmd {
    pub spec: usize,
    pub db: usize,
    pub resp3: bool,
    /// Count it in the executing thread's commandstats (false for parts of a fan-out, which
    /// the coordinator counts once).
    pub record: bool,
    pub first: usize,
    pub nargs: usize,
    /// The client it runs for, for CLIENT TRACKING.
    pub caller: Caller,
}

impl RemoteCmd {
    /// A whole command kept for later (a MULTI queue, a blocked command): database and
    /// protocol are filled in when it runs.
    pub fn kept(spec: usize) -> Self {
        RemoteCmd {
            spec,
            db: 0,
            resp3: false,
            record: true,
            caller: Caller::default(),
            first: 0,
            nargs: 0,
        }
    }
}

/// A script run a batch carries in its command's place (scripting/here.rs), run on the
/// shard's thread as a transaction of that shard alone, with the index of its command. It
/// writes its reply (and a slow log entry) and returns Ok, or returns its watch, which holds
/// the command, when it needs more than this shard: then nothing it did remains, and the
/// client's thread runs it the general way.
pub type BatchRun = Box<
    dyn FnOnce(&Worker, usize, &mut ReplyBuf, &mut Vec<SlowCall>) -> Result<(), Arc<RunWatch>>
        + Send,
>;

/// A script run in a batch: it stands in for command `at`, and `writes` says which intent
/// it takes on the shard when a transaction is there (a shared one for a read-only run).
pub struct BatchedRun {
    pub at: usize,
    pub writes: bool,
    pub run: BatchRun,
}

/// A batch's script runs, in command order.
#[derive(Default)]
pub struct BatchRuns(pub VecDeque<BatchedRun>);

impl std::fmt::Debug for BatchRuns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} script runs", self.0.len())
    }
}

impl BatchRuns {
    /// When command `i` is a script run: whether it writes.
    pub fn at(&self, i: usize) -> Option<bool> {
        self.0.front().and_then(|r| (r.at == i).then_some(r.writes))
    }

    /// Takes the run standing in for command `i`.
    pub fn take(&mut self, i: usize) -> Option<BatchRun> {
        match self.0.front() {
            Some(r) if r.at == i => self.0.pop_front().map(|r| r.run),
            _ => None,
        }
    }
}

/// Commands for one shard, squashed into one message; replies come back together.
#[derive(Debug)]
pub struct ExecBatch {
    pub data: Vec<u8>,
    pub spans: Vec<Span>,
    pub cmds: Vec<RemoteCmd>,
    /// Script runs standing in for some of `cmds`.
    pub runs: BatchRuns,
    /// The first command to run: past 0 when the batch comes again after a script run it
    /// carried was handed back (`BatchReply::handed_back`).
    pub next: usize,
    /// Reply bytes past which the shard stops running the batch (`ReplyBuf::limit`). Its
    /// client is then over its output buffer limit and is dropped, so running the rest would
    /// only grow memory; Redis too stops serving a client it is closing.
    pub reply_limit: usize,
    /// The client's socket, when the shard may write the reply to it (direct_reply.rs).
    pub socket: Option<Arc<ClientSocket>>,
}

impl Default for ExecBatch {
    fn default() -> Self {
        ExecBatch {
            data: Vec::new(),
            spans: Vec::new(),
            cmds: Vec::new(),
            runs: BatchRuns::default(),
            next: 0,
            reply_limit: usize::MAX,
            socket: None,
        }
    }
}

impl ExecBatch {
    /// Appends a command, copying its arguments.
    pub fn push(&mut self, mut cmd: RemoteCmd, args: impl Iterator<Item = impl AsRef<[u8]>>) {
        cmd.first = self.spans.len();
        let mut n = 0;
        for a in args {
            Span::push_arg(&mut self.data, &mut self.spans, a.as_ref());
            n += 1;
        }
        cmd.nargs = n;
        self.cmds.push(cmd);
    }

    /// Appends a script run in place of its command (`cmd` and its arguments `args`, which
    /// the shard reads only to prefetch the run's first key; the run carries its own).
    pub fn push_run<'a>(
        &mut self,
        cmd: RemoteCmd,
        args: impl Iterator<Item = &'a [u8]>,
        writes: bool,
        run: BatchRun,
    ) {
        let at = self.cmds.len();
        self.push(cmd, args);
        self.runs.0.push_back(BatchedRun { at, writes, run });
    }

    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// The batch emptied for the next round of the connection that sent it, which keeps its
    /// memory; None when it grew past `KEPT_BUFFER_BYTES` (a round of large values), which
    /// is not worth holding on to.
    pub fn emptied(mut self: Box<Self>) -> Option<Box<Self>> {
        if self.data.capacity() > KEPT_BUFFER_BYTES {
            return None;
        }
        self.data.clear();
        self.spans.clear();
        self.cmds.clear();
        self.runs.0.clear();
        self.next = 0;
        self.reply_limit = usize::MAX;
        self.socket = None;
        Some(self)
    }
}

/// Bytes up to which a batch's arguments, or a reply a shard wrote to a socket, leave their
/// buffer to be reused (larger ones are freed).
pub const KEPT_BUFFER_BYTES: usize = 64 * 1024;

/// Encoded replies of a batch; reply i is `out[ends[i-1]..ends[i]]`.
#[derive(Debug, Default)]
pub struct BatchReply {
    pub out: Vec<u8>,
    pub ends: Vec<usize>,
    /// Commands that belong in the slow log, which the client's thread keeps.
    pub slow: Vec<damselfly_commands::slowlog::SlowCall>,
    /// Where to write the replies directly, if the shard may (direct_reply.rs).
    pub socket: Option<Arc<ClientSocket>>,
    /// The shard wrote the replies to the client's socket whole: nothing is left to add to
    /// the client's output (`out` and `ends` are then empty).
    pub written: bool,
    /// The batch that carried the commands, emptied, going back to its connection so the
    /// next round's batch allocates nothing (`ExecBatch::emptied`); after a hand-back, the
    /// batch with the commands not run yet.
    pub batch: Option<Box<ExecBatch>>,
    /// A script run the batch carried needs more than this shard: its watch, to run it
    /// again from. It is command `ends.len()`; it and the commands after it did not run.
    pub handed_back: Option<Arc<RunWatch>>,
}

impl BatchReply {
    pub fn get(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.out[start..self.ends[i]]
    }
}

/// Work a transaction does on one shard, run on the shard's thread; its result goes back to
/// the coordinator.
pub type HopFn = Box<dyn FnOnce(&Worker) -> Box<dyn Any + Send> + Send>;

/// What comes back to a reply slot.
pub enum Payload {
    Batch(BatchReply),
    /// A transaction hop's result, with the transaction's id on that shard.
    Hop {
        id: TxId,
        value: Box<dyn Any + Send>,
    },
    /// Whether a transaction was scheduled, and whether its turn had already come.
    Scheduled {
        accepted: bool,
        granted: bool,
    },
    /// A `TxScheduleHop` this shard refused: the hop comes back unrun.
    Refused(HopFn),
    /// A blocked client's wake-up.
    Wake(Wake),
}

/// Which transaction a hop belongs to.
pub enum HopTx {
    /// Scheduled on this shard under this id.
    Scheduled(TxId),
    /// A transaction that touches only this shard: the shard assigns the id and takes these
    /// locks when the hop arrives (no scheduling round).
    Single(Vec<Lock>),
}

/// What a thread reports for INFO.
#[derive(Debug, Clone, Default)]
pub struct ThreadReport {
    pub shard_id: usize,
    pub stats: ThreadStats,
    pub shard_stats: ShardStats,
    /// Bytes of the shard's keys (their entries' `mem_size`, each counting its slot).
    pub used_memory: usize,
    /// (keys, keys with TTL, avg_ttl) per database.
    pub keyspace: Vec<(usize, usize, u64)>,
    /// (index bytes, deadline heap bytes) per database, for MEMORY STATS.
    pub db_overhead: Vec<(usize, usize)>,
    pub clients: usize,
    /// Bytes of this thread's clients' buffers (MEMORY STATS `clients.normal`).
    pub client_memory: usize,
    /// Commands per second over the last ~1.6 s of ticks.
    pub ops_per_sec: u64,
    /// The journal's state, while journaling.
    pub journal: Option<JournalReport>,
    /// The shard's change counter (INFO's `rdb_changes_since_last_save`).
    pub dirty: u64,
    /// Bytes the thread's Lua VM uses (0 while a run has it, or before the first script).
    pub lua_memory: usize,
    /// (tracking clients here, tracked keys, tracked items) for CLIENT TRACKING.
    pub tracking: (usize, usize, usize),
    /// (channels, patterns) with a subscriber in this thread's replica of every
    /// subscription (the same on every thread once changes have spread), for /metrics.
    pub pubsub: (usize, usize),
}

/// One shard's journal, for INFO persistence.
#[derive(Debug, Clone, Default)]
pub struct JournalReport {
    /// Bytes in the segment being appended to (the base segment aside).
    pub appended_bytes: u64,
    /// Why writes stopped, if they did.
    pub failure: Option<String>,
}

/// Messages between threads.
pub enum ShardMsg {
    /// Run a batch; reply with `Reply { slot }` to the `origin` thread's mailbox.
    Exec {
        batch: Box<ExecBatch>,
        origin: usize,
        slot: usize,
    },
    /// The reply to something this thread sent.
    Reply {
        slot: usize,
        reply: Payload,
    },
    /// Record the intents of a transaction spanning `shards` shards; reply `Scheduled`.
    TxSchedule {
        id: TxId,
        locks: Vec<Lock>,
        shards: u32,
        origin: usize,
        slot: usize,
    },
    /// Run a transaction's hop when its turn comes; `conclude` releases its intents after.
    TxHop {
        tx: HopTx,
        f: HopFn,
        conclude: bool,
        origin: usize,
        slot: usize,
    },
    /// Record a transaction's intents and, if accepted, run its hop when its turn comes (the
    /// coordinator's every other shard has already accepted); refused: reply `Refused`.
    TxScheduleHop {
        id: TxId,
        locks: Vec<Lock>,
        shards: u32,
        f: HopFn,
        conclude: bool,
        origin: usize,
        slot: usize,
    },
    /// Drop a transaction's intents.
    TxRelease(TxId),
    /// Record the end of a transaction's part here (appendfsync always: before its intents
    /// are released); reply once it is durable.
    TxSeal {
        id: TxId,
        origin: usize,
        slot: usize,
    },
    /// The journal's writer made records durable: release the replies waiting for them.
    JournalSynced,
    /// Continue this shard's running snapshot (the worker sends it to itself).
    SnapshotStep,
    /// Run a function now, outside any transaction; no reply.
    Call(Box<dyn FnOnce(&Worker) + Send>),
    /// Run a function now, outside any transaction, and reply with its result.
    Run {
        f: HopFn,
        origin: usize,
        slot: usize,
    },
    Report(oneshot::Sender<ThreadReport>),
    ClientList(Option<Vec<u64>>, oneshot::Sender<Vec<(u64, String)>>),
    ClientKill(Box<KillFilter>, oneshot::Sender<(usize, bool)>),
    /// After ACL SETUSER: closes this thread's clients of the user that are subscribed to a
    /// channel or pattern the user may no longer use; says whether the caller (this client
    /// id) was one of them.
    KillRevokedSubscribers {
        user: Vec<u8>,
        caller: u64,
        done: oneshot::Sender<bool>,
    },
    /// CLIENT UNBLOCK: (client id, reply with an error) -> whether it was blocked here.
    ClientUnblock(u64, bool, oneshot::Sender<bool>),
    Populate {
        db: usize,
        count: u64,
        prefix: Vec<u8>,
        size: Option<usize>,
        done: oneshot::Sender<()>,
    },
    ResetStats(oneshot::Sender<()>),
    /// Subscriptions made or left on another thread: apply them to this thread's replica,
    /// then answer `done`.
    Subscriptions {
        changes: std::sync::Arc<[damselfly_pubsub::Change]>,
        done: Option<oneshot::Sender<()>>,
    },
    /// A message published on another thread, for this thread's subscribers.
    Publish(std::sync::Arc<damselfly_pubsub::Message>),
}
