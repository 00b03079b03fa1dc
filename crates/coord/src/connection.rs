//! The per-connection coordinator. It owns the read buffer, parses every complete command,
//! checks it against the command table and routes it: commands for this thread's shard run
//! inline; commands for other shards are squashed into one message per shard for the round
//! and their replies spliced back in request order; multi-key and whole-keyspace commands fan
//! out; connection and server commands run here.
//!
//! Ordering: replies always come back in request order. Within one connection, commands on the
//! same shard (so on the same key) take effect in request order, so a client always reads its
//! own writes. Pipelined commands on different shards may take effect in a different order as
//! seen by *other* clients; a fan-out command waits for every earlier command of its connection
//! to finish first.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use damselfly_commands::slowlog::{self, SlowCall, SlowEntry};
use damselfly_commands::table::{self, flags, CoordCmd, Handler, Route, COMMANDS};
use damselfly_commands::{errors, lookup, Args};
use damselfly_protocol::{Limits, ParsedCommand, ProtocolError, ReplyBuf, RequestParser, Span};
use damselfly_storage::shard_for_key;
use futures_channel::oneshot;

use crate::affinity::Affinity;
use crate::blocking::BlockedCmd;
use crate::client::ClientInfo;
use crate::direct_reply::{ClientSocket, InFlight};
use crate::messages::{BatchReply, ExecBatch, Payload, RemoteCmd, ShardMsg};
use crate::pubsub_family::ConnPubSub;
use crate::tx::{merge_locks, plan, Lock, ShardWork, Tx};
use crate::worker::{CallTimer, Worker};

/// Most commands handled per round before replies are flushed to the socket. Bounds the
/// memory one pipelining client can make the server hold for it.
const ROUND_MAX_COMMANDS: usize = 1024;
/// Output size at which a round stops early, leaving its remaining commands buffered, so
/// replies are flushed (and the output limit checked) before more are made.
const ROUND_MAX_OUTPUT: usize = 1 << 20;
/// Free space kept at the end of the read buffer; also how far beyond twice what has arrived
/// the buffer grows toward a large frame, so a client holds at most about twice what it sent.
pub(crate) const READ_CHUNK: usize = 16 * 1024;
/// A read buffer larger than this is released once it is empty.
const READ_SHRINK_ABOVE: usize = 1 << 20;

/// What the I/O loop does next (after writing any pending output).
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Step {
    /// Read more bytes from the client.
    Read,
    /// More complete commands are buffered: call `step` again.
    Again,
    /// A blocking command waits for data: write the output, then wait for `poll_wake`
    /// (and `resume`), the deadline (`check_block_timeout`) or the client going away.
    Blocked,
    /// Write the output, then close the connection.
    Close,
    /// CLIENT PAUSE holds the next command for up to this long: write the output, wait a
    /// little (CLIENT UNPAUSE may end it sooner), then call `step` again.
    Paused(std::time::Duration),
}

/// Where the connection came from, for CLIENT LIST.
#[derive(Debug, Clone)]
pub struct PeerInfo {
    pub addr: String,
    pub laddr: String,
    pub fd: i32,
}

#[derive(Debug, Clone, Copy)]
struct ParsedCmd {
    first: usize,
    nargs: usize,
    inline: bool,
    /// Offset in the read buffer just past the command.
    end: usize,
    /// Its index in the command table, looked up once for the round's prefetch and its run.
    spec: Option<usize>,
}

/// A remote reply to be spliced into the output at `at`.
pub(crate) struct PendingSlot {
    pub(crate) at: usize,
    pub(crate) shard: usize,
    pub(crate) index: usize,
}

pub struct Connection {
    pub(crate) worker: Rc<Worker>,
    pub(crate) info: Rc<ClientInfo>,
    pub(crate) authenticated: bool,
    /// The ACL epoch `info.user` was read at (acl_check.rs).
    pub(crate) acl_epoch: u64,
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    need: usize,
    /// Keeps its progress through a command that has not fully arrived.
    parser: RequestParser,
    spans: Vec<Span>,
    aux: Vec<u8>,
    cmds: Vec<ParsedCmd>,
    pub(crate) out: ReplyBuf,
    pub(crate) closing: bool,
    pub(crate) batches: Vec<ExecBatch>,
    /// The watches of this connection's last script runs, renewed for the next ones
    /// (`RunWatch::renew`).
    pub(crate) kept_watches: Vec<Arc<damselfly_scripting::watchdog::RunWatch>>,
    /// Emptied batch boxes, to send the next batches in (`take_batch`).
    #[allow(clippy::vec_box)] // the boxes themselves are what is sent and reused
    spare_batches: Vec<Box<ExecBatch>>,
    pub(crate) pending: Vec<PendingSlot>,
    /// The transaction this connection's commands currently run in (EXEC, a multi-shard
    /// command): while set, every keyed command runs as a hop of it.
    pub(crate) tx: Option<Tx>,
    /// Commands queued since MULTI.
    pub(crate) multi: Option<MultiState>,
    /// Keys this connection WATCHes.
    pub(crate) watching: Vec<WatchedKey>,
    /// A blocking command waiting for data; the commands after it wait in the read buffer.
    pub(crate) blocked: Option<BlockedCmd>,
    /// A round passed its output budget (`out.limit`): the client is over its output buffer
    /// limit.
    over_output_limit: bool,
    /// Subscriptions and the messages waiting for this client.
    pub(crate) pubsub: ConnPubSub,
    /// CLIENT REPLY.
    pub(crate) reply_mode: ReplyMode,
    /// Used memory was over `maxmemory` when the running client command started (Redis's
    /// `pre_command_oom_state`): the scripts it runs check their calls against it.
    pub(crate) pre_command_oom: bool,
    /// Which other shard the keyed commands have been going to (affinity.rs).
    pub(crate) affinity: Affinity,
    /// Commands in the round being run.
    pub(crate) round_len: usize,
    /// The socket, for shards to write replies to (None for TLS); direct_reply.rs.
    pub(crate) socket: Option<Arc<ClientSocket>>,
    /// A one-command round whose reply a shard writes to the socket (direct_reply.rs).
    pub(crate) in_flight: Option<InFlight>,
    /// The command just run was counted in the statistics by the shard that ran it (a
    /// script run in a batch), so its coordinator does not count it again.
    pub(crate) recorded_by_shard: bool,
    /// The shard whose batch holds a script run of this round (scripting/here.rs): until
    /// the batches come back, nothing runs for any other shard (`after_batched_runs`).
    pub(crate) runs_batched_for: Option<usize>,
    /// A run its shard handed back is running again, the general way (`run_script_again`).
    pub(crate) running_handed_back: bool,
    /// The I/O loop holds output it has not written yet.
    pub(crate) unsent_output: bool,
    /// The session went to another thread (`detach`): nothing is left to clean up here.
    pub(crate) moved_away: bool,
    /// Never moves to another thread (a TLS session's state lives in its I/O loop, not in
    /// the socket): `move_target` is always None.
    pub(crate) stays: bool,
}

/// CLIENT REPLY's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyMode {
    On,
    /// No replies until CLIENT REPLY ON.
    Off,
    /// Set by CLIENT REPLY SKIP: becomes `Skip` once that command is done.
    SkipNext,
    /// The reply of this command is dropped.
    Skip,
}

/// A MULTI block being queued.
#[derive(Default)]
pub(crate) struct MultiState {
    pub cmds: ExecBatch,
    /// A command was refused while queueing: EXEC fails with EXECABORT.
    pub dirty: bool,
    /// A queued command may grow memory: EXEC is refused while over `maxmemory`.
    pub denyoom: bool,
    /// The ACL epoch when MULTI ran: EXEC checks the commands again if it moved.
    pub acl_epoch: u64,
}

/// A watched key and its state when WATCH ran.
pub(crate) struct WatchedKey {
    pub shard: usize,
    pub db: usize,
    pub key: Vec<u8>,
    pub stamp: damselfly_storage::WatchStamp,
}

impl Connection {
    /// Registers a new client on this thread. The caller has already admitted it against
    /// `maxclients`.
    pub fn new(worker: Rc<Worker>, peer: PeerInfo) -> Self {
        let id = worker.cluster.next_client_id();
        let acl = &worker.cluster.acl;
        // The epoch first: a change racing with this start is seen at the first command.
        let acl_epoch = acl.epoch();
        let info = ClientInfo::new(id, peer.fd, peer.addr, peer.laddr, acl.default_user());
        worker.stats.borrow_mut().total_connections += 1;
        let authenticated = !acl.auth_required();
        let mut conn = Self::with_info(worker, Rc::new(info), authenticated);
        conn.acl_epoch = acl_epoch;
        conn
    }

    /// Registers the client `info` on this thread: a new one, or one moved here.
    pub(crate) fn with_info(worker: Rc<Worker>, info: Rc<ClientInfo>, authenticated: bool) -> Self {
        worker.clients.borrow_mut().add(info.clone());
        let shards = worker.num_shards();
        let socket = ClientSocket::new(info.fd);
        Connection {
            worker,
            info,
            authenticated,
            acl_epoch: 0,
            rbuf: vec![0; READ_CHUNK],
            rstart: 0,
            rend: 0,
            need: 0,
            parser: RequestParser::default(),
            spans: Vec::new(),
            aux: Vec::new(),
            cmds: Vec::new(),
            out: ReplyBuf::new(false),
            closing: false,
            batches: (0..shards).map(|_| ExecBatch::default()).collect(),
            spare_batches: Vec::new(),
            kept_watches: Vec::new(),
            pending: Vec::new(),
            tx: None,
            multi: None,
            watching: Vec::new(),
            blocked: None,
            over_output_limit: false,
            pubsub: ConnPubSub::default(),
            reply_mode: ReplyMode::On,
            pre_command_oom: false,
            affinity: Affinity::default(),
            round_len: 0,
            socket: Some(socket),
            in_flight: None,
            recorded_by_shard: false,
            runs_batched_for: None,
            running_handed_back: false,
            unsent_output: false,
            moved_away: false,
            stays: false,
        }
    }

    /// Keeps this connection on its thread for good: connection affinity never moves it.
    /// The I/O layer calls it for streams whose state cannot travel with a duplicated
    /// descriptor (TLS).
    pub fn stay_on_thread(&mut self) {
        self.stays = true;
        self.socket = None;
    }

    /// Input received and not run yet.
    pub(crate) fn unread(&self) -> &[u8] {
        &self.rbuf[self.rstart..self.rend]
    }

    /// Handles the messages waiting in this thread's mailbox (`Worker::serve_mailbox_now`);
    /// the I/O loop calls it between rounds.
    pub fn serve_mailbox_now(&self) {
        self.worker.serve_mailbox_now();
    }

    /// Under `appendfsync always`, resolves once this thread's journal holds on disk every
    /// record made so far: output that may reflect them waits for it (docs/persistence.md).
    /// True when it had to wait.
    pub async fn until_durable(&self) -> bool {
        match self.worker.durability_needed() {
            Some(lsn) => {
                self.worker.wait_durable(lsn).await;
                true
            }
            None => false,
        }
    }

    pub fn cluster(&self) -> std::sync::Arc<crate::Cluster> {
        self.worker.cluster.clone()
    }

    pub fn id(&self) -> u64 {
        self.info.id
    }

    /// The client socket's descriptor.
    pub fn fd(&self) -> i32 {
        self.info.fd
    }

    /// True once CLIENT KILL, an idle timeout or shutdown closed this client.
    pub fn killed(&self) -> bool {
        self.info.killed.get()
    }

    /// Space to read into. Grows toward a known-size frame geometrically, as its bytes
    /// actually arrive, so a header announcing a huge bulk does not make the server allocate
    /// (and zero) it up front: a buffer is at most about twice what its client sent. Shrinks
    /// back once a large request has been consumed.
    pub fn read_space(&mut self) -> &mut [u8] {
        if self.rstart == self.rend {
            self.need = self.need.saturating_sub(self.rstart);
            self.parser.moved(self.rstart);
            self.rstart = 0;
            self.rend = 0;
            if self.rbuf.len() > READ_SHRINK_ABOVE {
                self.rbuf = vec![0; READ_CHUNK];
            }
        }
        let pending = self.rend - self.rstart;
        let toward_frame = self
            .need
            .saturating_sub(self.rstart)
            .min(pending * 2 + READ_CHUNK);
        let want = toward_frame.max(pending + READ_CHUNK);
        if self.rstart > 0 && self.rstart + want > self.rbuf.len() {
            // Move the partial frame to the front instead of growing.
            self.rbuf.copy_within(self.rstart..self.rend, 0);
            self.parser.moved(self.rstart);
            self.need = self.need.saturating_sub(self.rstart);
            self.rend -= self.rstart;
            self.rstart = 0;
        }
        let target = self.rstart + want;
        if self.rbuf.len() < target {
            self.rbuf.resize(target, 0);
        }
        &mut self.rbuf[self.rend..]
    }

    /// Accounts `n` bytes read into `read_space`. False when the query buffer limit is
    /// exceeded and the client must be dropped.
    pub fn advance(&mut self, n: usize) -> bool {
        self.rend += n;
        self.worker.stats.borrow_mut().net_input_bytes += n as u64;
        self.worker.refresh_clock();
        self.info.last_active.set(self.worker.round_instant());
        let pending = self.rend - self.rstart;
        self.info.query_buf.set(pending);
        let limit = self
            .worker
            .cluster
            .config
            .query_buffer_limit
            .load(Ordering::Relaxed);
        if pending as u64 > limit {
            tracing::warn!(client = self.info.id, addr = %self.info.addr, "closing client that reached max query buffer length");
            return false;
        }
        true
    }

    /// Buffers bytes read while a blocking command waits (they run once it is done). False
    /// when the query buffer limit is exceeded.
    pub fn feed(&mut self, mut bytes: &[u8]) -> bool {
        while !bytes.is_empty() {
            let space = self.read_space();
            let n = space.len().min(bytes.len());
            space[..n].copy_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if !self.advance(n) {
                return false;
            }
        }
        true
    }

    /// Tells the connection how many bytes the I/O loop has yet to write. That caps the
    /// reply bytes the next rounds may produce before `take_output` to what the output
    /// buffer limit leaves beside them: a round stops at the first command (or shard batch)
    /// whose replies pass it, and a reply whose size the client chooses stops growing there
    /// (`ReplyBuf::full`), so one round of a client that does not read cannot make the
    /// server hold far more than the limit. And while any wait, no shard may write to the
    /// socket directly (direct_reply.rs).
    pub fn set_unsent_output(&mut self, unsent: u64) {
        let budget = self.output_limit().saturating_sub(unsent);
        self.out.limit = usize::try_from(budget).unwrap_or(usize::MAX);
        self.unsent_output = unsent > 0;
    }

    /// The most unsent output this client may have: the server's limit, or the pubsub
    /// class's hard limit while it is subscribed, if lower.
    pub fn output_limit(&self) -> u64 {
        let config = &self.worker.cluster.config;
        let limit = config.output_buffer_limit.load(Ordering::Relaxed);
        match config.pubsub_output_limit[0].load(Ordering::Relaxed) {
            hard if hard > 0 && self.subscribed() => hard.min(limit),
            _ => limit,
        }
    }

    /// False when the client must be closed with `unsent` bytes waiting: past its hard limit,
    /// past its soft limit for too long (pubsub class), or a round passed its budget. Logs
    /// it as Redis does.
    pub fn output_within_limits(&mut self, unsent: u64) -> bool {
        let limit = self.output_limit();
        let inbox = &self.info.inbox;
        inbox.set_limit(usize::try_from(limit.saturating_sub(unsent)).unwrap_or(usize::MAX));
        let over = self.over_output_limit
            || inbox.overflowed()
            || unsent > limit
            || self.over_soft_limit_too_long(unsent);
        if over {
            tracing::warn!(
                "Client {} scheduled to be closed ASAP for overcoming of output buffer limits.",
                self.info.describe(Instant::now())
            );
        }
        !over
    }

    /// True once a round passed the output budget: the client is over its output buffer
    /// limit and must be dropped without running the rest of its input.
    pub fn over_output_limit(&self) -> bool {
        self.over_output_limit
    }

    /// The encoded replies waiting to be written.
    pub fn output(&self) -> &[u8] {
        &self.out.buf
    }

    /// Moves the encoded replies to the end of `into` (swapping buffers when `into` is empty).
    pub fn take_output(&mut self, into: &mut Vec<u8>) {
        self.worker.stats.borrow_mut().net_output_bytes += self.out.buf.len() as u64;
        if into.is_empty() {
            std::mem::swap(into, &mut self.out.buf);
        } else {
            into.extend_from_slice(&self.out.buf);
        }
        self.out.buf.clear();
        self.out.error_offsets.clear();
        if self.out.buf.capacity() > 4 * ROUND_MAX_OUTPUT {
            self.out.buf.shrink_to(ROUND_MAX_OUTPUT);
        }
    }

    fn limits(&self) -> Limits {
        Limits {
            max_bulk_len: self
                .worker
                .cluster
                .config
                .proto_max_bulk_len
                .load(Ordering::Relaxed),
            authenticated: self.authenticated,
        }
    }

    /// Parses and runs the buffered complete commands (up to a round's worth).
    pub async fn step(&mut self) -> Step {
        self.settle().await;
        if self.closing || self.over_output_limit {
            return Step::Close;
        }
        if self.rend < self.need {
            return Step::Read;
        }
        let (parsed_to, more, protocol_error) = self.parse_round();
        let cmds = std::mem::take(&mut self.cmds);
        let rbuf = std::mem::take(&mut self.rbuf);
        let aux = std::mem::take(&mut self.aux);
        let spans = std::mem::take(&mut self.spans);
        // Where the round stopped before its last parsed command: a blocked command, or the
        // round's output budget spent (so replies are flushed before more are made).
        let mut stopped_at = None;
        let mut paused = None;
        self.round_len = cmds.len();
        if cmds.len() > 1 {
            let db = self.info.db.get();
            self.worker.prefetch_keys(cmds.iter().filter_map(|c| {
                let src: &[u8] = if c.inline { &aux } else { &rbuf };
                let args = Args::new(src, &spans[c.first..c.first + c.nargs]);
                c.spec.map(|spec| (spec, db, args))
            }));
        }
        for (i, c) in cmds.iter().enumerate() {
            let src: &[u8] = if c.inline { &aux } else { &rbuf };
            let args = Args::new(src, &spans[c.first..c.first + c.nargs]);
            if let Some(until) = self.paused(&args) {
                // It stays in the buffer, with the commands after it.
                stopped_at = Some(if i == 0 { self.rstart } else { cmds[i - 1].end });
                paused = Some(until);
                break;
            }
            self.dispatch(c.spec, &args).await;
            if self.out.full() {
                self.over_output_limit = true;
            }
            if self.closing || self.over_output_limit {
                break;
            }
            let last = i + 1 == cmds.len();
            if self.blocked.is_some() || (!last && self.out.buf.len() >= ROUND_MAX_OUTPUT) {
                stopped_at = Some(c.end);
                break;
            }
        }
        if !self.over_output_limit && !self.send_for_direct_reply() {
            self.flush_remote().await;
        }
        // Changes made on this thread's shard outside a command context (a fan-out's local
        // part) owe their invalidations now.
        self.worker.send_invalidations();
        self.cmds = cmds;
        self.rbuf = rbuf;
        self.aux = aux;
        self.spans = spans;
        // Commands after the stop stay in the buffer, to be parsed again next round.
        self.rstart = stopped_at.unwrap_or(parsed_to);
        if stopped_at.is_some() {
            self.need = 0;
        }
        self.info.query_buf.set(self.rend - self.rstart);
        // A protocol error past the stop is found again when parsing gets there.
        let protocol_error = protocol_error.filter(|_| stopped_at.is_none());
        if let Some(e) = protocol_error {
            self.pushes_before_closing();
            self.refuse(&format!("ERR {e}"));
            tracing::debug!(client = self.info.id, "protocol error: {e}");
            self.closing = true;
        }
        if self.closing || self.over_output_limit {
            Step::Close
        } else if self.blocked.is_some() {
            Step::Blocked
        } else if let Some(until) = paused {
            let left = until.saturating_sub(damselfly_storage::now_ms());
            Step::Paused(std::time::Duration::from_millis(left))
        } else if more || stopped_at.is_some() {
            Step::Again
        } else {
            Step::Read
        }
    }

    /// Parses complete commands into `self.cmds`. Returns where parsing stopped, whether more
    /// complete commands may follow, and a protocol error if one ended the stream.
    fn parse_round(&mut self) -> (usize, bool, Option<ProtocolError>) {
        self.cmds.clear();
        self.spans.clear();
        self.aux.clear();
        let limits = self.limits();
        // Until a client authenticates its limits change after each command, so parse one.
        let max = if self.authenticated {
            ROUND_MAX_COMMANDS
        } else {
            1
        };
        let mut pos = self.rstart;
        let buf = &self.rbuf[..self.rend];
        while self.cmds.len() < max {
            let first = self.spans.len();
            match self
                .parser
                .parse(buf, pos, &mut self.spans, &mut self.aux, &limits)
            {
                Ok(ParsedCommand::Command {
                    consumed,
                    nargs,
                    inline,
                }) => {
                    let src: &[u8] = if inline { &self.aux } else { buf };
                    let spec = self
                        .spans
                        .get(first)
                        .and_then(|name| src.get(name.range()))
                        .and_then(lookup);
                    self.cmds.push(ParsedCmd {
                        first,
                        nargs,
                        inline,
                        end: consumed,
                        spec,
                    });
                    pos = consumed;
                }
                Ok(ParsedCommand::Empty { consumed }) => pos = consumed,
                Ok(ParsedCommand::Incomplete { need }) => {
                    self.need = need;
                    return (pos, false, None);
                }
                Err(e) => return (pos, false, Some(e)),
            }
        }
        self.need = 0;
        (pos, pos < self.rend, None)
    }

    /// Writes an error reply. The caller's path counts it in the stats once: dispatch for
    /// coordinator commands and refusals, the worker for shard commands.
    pub(crate) fn reply_error(&mut self, msg: &str) {
        self.out.error(msg);
    }

    /// Writes and counts an error for a command that never ran.
    fn refuse(&mut self, msg: &str) {
        let before = self.out.error_offsets.len();
        self.out.error(msg);
        self.worker
            .stats
            .borrow_mut()
            .count_errors(&self.out, before);
    }

    /// The end of a CLIENT PAUSE that holds this command, if one does (EXEC counts as a write
    /// when it would run one).
    fn paused(&self, args: &Args) -> Option<u64> {
        let (until, all) = self
            .worker
            .cluster
            .pause
            .running(damselfly_storage::now_ms)?;
        if all {
            return Some(until);
        }
        let spec = &COMMANDS[lookup(args.get(0))?];
        let writes = spec.is_write()
            || (matches!(spec.handler, Handler::Coord(CoordCmd::Exec))
                && self
                    .multi
                    .as_ref()
                    .is_some_and(|m| m.cmds.cmds.iter().any(|c| COMMANDS[c.spec].is_write())));
        writes.then_some(until)
    }

    /// Runs one command, its reply kept or dropped as CLIENT REPLY says.
    async fn dispatch(&mut self, spec: Option<usize>, args: &Args<'_>) {
        self.dispatch_in_mode(spec, args).await;
        let caching = self.info.tracking.borrow().as_ref().map(|t| t.caching);
        if let Some(Some(_)) = caching {
            self.after_command_caching(args.get(0));
        }
    }

    /// Runs a command under CLIENT REPLY's mode.
    async fn dispatch_in_mode(&mut self, spec: Option<usize>, args: &Args<'_>) {
        let before = self.reply_mode;
        if before == ReplyMode::On {
            self.dispatch_one(spec, args).await;
        } else {
            // Earlier commands' replies from other shards land first, so the mark holds.
            self.flush_remote().await;
            let mark = self.out.buf.len();
            self.dispatch_one(spec, args).await;
            let switched_on = before == ReplyMode::Off && self.reply_mode == ReplyMode::On;
            if !switched_on {
                // Replies from other shards land in place first, then go with the rest.
                self.flush_remote().await;
                self.out.buf.truncate(mark);
            }
            if before == ReplyMode::Skip && self.reply_mode == ReplyMode::Skip {
                self.reply_mode = ReplyMode::On;
            }
        }
        if self.reply_mode == ReplyMode::SkipNext {
            self.reply_mode = ReplyMode::Skip;
        }
    }

    /// Runs a command whose index in the command table is `spec` (None: unknown).
    async fn dispatch_one(&mut self, spec: Option<usize>, args: &Args<'_>) {
        let Some(idx) = spec else {
            let name = args.get(0);
            self.refuse_command(&errors::unknown_command(name, args.iter().skip(1)));
            return;
        };
        let spec = &COMMANDS[idx];
        // Set before any refusal, as Redis sets the client's command at lookup.
        self.info.last_cmd.set(spec.name);
        {
            let mut sub = self.info.last_subcommand.borrow_mut();
            sub.clear();
            if table::has_subcommands(idx) && args.len() > 1 {
                sub.extend(args.get(1).iter().take(32).map(u8::to_ascii_lowercase));
            }
        }
        if !spec.arity_ok(args.len()) {
            self.worker.stats.borrow_mut().record_rejected(idx);
            self.refuse_command(&errors::wrong_arity(spec.name));
            return;
        }
        if let Some(e) = spec.subcommand_refusal(args) {
            self.worker.stats.borrow_mut().record_rejected(idx);
            self.refuse_command(&e);
            return;
        }
        if !self.authenticated && spec.flags & flags::NO_AUTH == 0 {
            self.worker.stats.borrow_mut().record_rejected(idx);
            self.refuse_command(errors::NO_AUTH);
            return;
        }
        if let Some(refusal) = self.acl_refusal(args) {
            self.worker.stats.borrow_mut().record_rejected(idx);
            self.refuse_command(&refusal);
            return;
        }
        if let Some(busy) = self.busy_refusal(spec, args) {
            self.worker.stats.borrow_mut().record_rejected(idx);
            self.refuse_command(busy);
            return;
        }
        if let Some(refusal) = self.oom_refusal(idx, args) {
            return self.refuse_before_run(idx, refusal);
        }
        if let Some(refusal) = self.save_error_refusal(idx) {
            return self.refuse_before_run(idx, refusal);
        }
        let pubsub_context = match spec.handler {
            Handler::Coord(
                CoordCmd::Subscribe(_)
                | CoordCmd::Unsubscribe(_)
                | CoordCmd::Ping
                | CoordCmd::Quit
                | CoordCmd::Reset,
            ) => true,
            // An unknown subcommand or a wrong count is refused first, as in Redis's lookup.
            Handler::Coord(CoordCmd::Pubsub) => !crate::pubsub_family::well_formed(args),
            _ => false,
        };
        if let Some(refusal) = self.pubsub_refusal(pubsub_context) {
            return self.refuse_before_run(idx, &refusal);
        }
        if let Some(refusal) = self.monitor_refusal(spec) {
            return self.refuse_before_run(idx, refusal);
        }
        if self.multi.is_some() {
            let runs_now = matches!(
                spec.handler,
                Handler::Coord(
                    CoordCmd::Exec
                        | CoordCmd::Discard
                        | CoordCmd::Multi
                        | CoordCmd::Watch
                        | CoordCmd::Quit
                        | CoordCmd::Reset
                )
            );
            if !runs_now {
                if spec.flags & flags::NO_MULTI != 0 {
                    self.refuse_command("ERR Command not allowed inside a transaction");
                    return;
                }
                // Flags as they are when queued, as Redis's EXEC sees them.
                let denyoom = self.command_flags(idx, args) & flags::DENYOOM != 0;
                if let Some(multi) = &mut self.multi {
                    multi.denyoom |= denyoom;
                    multi.cmds.push(RemoteCmd::kept(idx), args.iter());
                    self.info.multi.set(multi.cmds.cmds.len() as i64);
                }
                self.out.simple("QUEUED");
                return;
            }
        }
        if spec.flags & flags::BLOCKING != 0 && self.tx.is_none() {
            self.feed_monitors(spec, args);
            return self.run_blocking(idx, args).await;
        }
        self.route(idx, args).await;
    }

    /// Refuses a command that passed lookup and arity; a refused EXEC discards its
    /// transaction, as Redis's execCommandAbort does.
    fn refuse_before_run(&mut self, idx: usize, refusal: &str) {
        self.worker.stats.borrow_mut().record_rejected(idx);
        if matches!(COMMANDS[idx].handler, Handler::Coord(CoordCmd::Exec)) {
            self.multi = None;
            self.info.multi.set(-1);
            self.unwatch_all();
            // Redis's plain rejections carry no code there: `because of: Can't execute...`.
            let reason = refusal.strip_prefix("ERR ").unwrap_or(refusal);
            self.refuse(&format!(
                "EXECABORT Transaction discarded because of: {reason}"
            ));
        } else {
            self.refuse_command(refusal);
        }
    }

    /// Redis's MISCONF while the last save failed, save points are set and
    /// `stop-writes-on-bgsave-error` is on: for a write, PING, or EXEC of queued writes.
    fn save_error_refusal(&self, idx: usize) -> Option<&'static str> {
        let cluster = &self.worker.cluster;
        if !cluster.saves.failed() {
            return None;
        }
        let spec = &COMMANDS[idx];
        let writes = spec.is_write()
            || match spec.handler {
                Handler::Coord(CoordCmd::Ping) => true,
                Handler::Coord(CoordCmd::Exec) => self
                    .multi
                    .as_ref()
                    .is_some_and(|m| m.cmds.cmds.iter().any(|c| COMMANDS[c.spec].is_write())),
                _ => false,
            };
        let refuse = writes
            && cluster.config.get("stop-writes-on-bgsave-error") == "yes"
            && !cluster.config.get("save").trim().is_empty();
        refuse.then_some(errors::MISCONF_SAVE)
    }

    /// Refuses a command before it runs; inside MULTI this also dooms the transaction.
    fn refuse_command(&mut self, msg: &str) {
        if let Some(multi) = &mut self.multi {
            multi.dirty = true;
        }
        self.refuse(msg);
    }

    /// Runs a checked command where it belongs, and shows it to monitors: after it ran, as
    /// Redis does (the database it leaves selected), but scripts before their calls.
    pub(crate) async fn route(&mut self, idx: usize, args: &Args<'_>) {
        let spec = &COMMANDS[idx];
        let script = matches!(
            spec.handler,
            Handler::Coord(CoordCmd::Eval | CoordCmd::Fcall)
        );
        if script {
            self.feed_monitors(spec, args);
        }
        self.route_to(idx, args).await;
        if !script {
            self.feed_monitors(spec, args);
        }
    }

    async fn route_to(&mut self, idx: usize, args: &Args<'_>) {
        let spec = &COMMANDS[idx];
        let db = self.info.db.get();
        match spec.route {
            Route::Key => {
                // A container command called without its key (OBJECT HELP) runs locally.
                let at = spec.first_key as usize;
                let shard = if at < args.len() {
                    shard_for_key(args.get(at), self.worker.num_shards())
                } else {
                    self.worker.id
                };
                self.after_batched_runs(Some(shard)).await;
                self.run_on(shard, idx, db, args);
            }
            Route::KeyOrCoordinator(cmd) => {
                let at = spec.first_key as usize;
                if at < args.len() {
                    let shard = shard_for_key(args.get(at), self.worker.num_shards());
                    self.after_batched_runs(Some(shard)).await;
                    self.run_on(shard, idx, db, args);
                } else {
                    self.after_batched_runs(None).await;
                    self.run_coordinator_recorded(idx, cmd, args).await;
                }
            }
            Route::Keys(merge) => {
                let n = self.worker.num_shards();
                let mut shards = spec
                    .key_positions_iter(args)
                    .map(|p| shard_for_key(args.get(p), n));
                let first = shards.next().unwrap_or(self.worker.id);
                let one_shard = shards.all(|s| s == first);
                if one_shard && (n == 1 || !spec.reads_unknown_keys(args)) {
                    self.after_batched_runs(Some(first)).await;
                    self.run_on(first, idx, db, args);
                } else {
                    self.fan_out_keys(idx, merge, args).await;
                }
            }
            Route::AllShards(merge) => self.fan_out_all(idx, merge, args).await,
            Route::Cursor => {
                let cursor = damselfly_protocol::number::parse_u64(args.get(1)).unwrap_or(0);
                let shard = damselfly_commands::keys_family::scan_cursor_shard(cursor);
                let target = if shard < self.worker.num_shards() {
                    shard
                } else {
                    self.worker.id
                };
                self.after_batched_runs(Some(target)).await;
                self.run_on(target, idx, db, args);
            }
            Route::Coordinator => {
                if let Handler::Coord(cmd) = spec.handler {
                    // A script finds its shard first (`run_on_its_shard`).
                    if !matches!(cmd, CoordCmd::Eval | CoordCmd::Fcall) {
                        self.after_batched_runs(None).await;
                    }
                    self.run_coordinator_recorded(idx, cmd, args).await;
                }
            }
        }
    }

    /// Runs a coordinator command and counts it in the command statistics.
    pub(crate) async fn run_coordinator_recorded(
        &mut self,
        idx: usize,
        cmd: CoordCmd,
        args: &Args<'_>,
    ) {
        let started = self.worker.start_call_timer();
        let errors_before = self.out.error_offsets.len();
        crate::crash::running(COMMANDS[idx].name);
        self.run_coordinator(idx, cmd, args).await;
        crate::crash::idle();
        if !std::mem::take(&mut self.recorded_by_shard) {
            self.record_command(idx, args, started, errors_before);
        }
    }

    /// Counts a command timed on this thread (a coordinator command, a fan-out) in the
    /// command statistics, the latency histograms and monitor, and the slow log.
    pub(crate) fn record_command(
        &mut self,
        idx: usize,
        args: &Args,
        started: CallTimer,
        errors_before: usize,
    ) {
        if let Some(usec) = self
            .worker
            .record_call(idx, started, &self.out, errors_before)
        {
            self.log_slow(slowlog::entry_argv(args), slowlog::unix_time(), usec);
        }
    }

    /// Logs the slow commands the shards ran for this round's batches, in request order.
    fn log_remote_slow(&mut self, replies: &mut [Option<BatchReply>]) {
        let mut slow: Vec<(usize, SlowCall)> = Vec::new();
        for (shard, r) in replies.iter_mut().enumerate() {
            if let Some(r) = r {
                slow.extend(std::mem::take(&mut r.slow).into_iter().map(|c| (shard, c)));
            }
        }
        if slow.is_empty() {
            return;
        }
        let order = |shard: usize, index: usize| {
            self.pending
                .iter()
                .position(|p| p.shard == shard && p.index == index)
        };
        slow.sort_by_key(|(shard, c)| order(*shard, c.index));
        for (_, call) in slow {
            self.log_slow(call.argv, call.time, call.duration);
        }
    }

    /// Adds a command of this connection to its thread's slow log.
    pub(crate) fn log_slow(&self, argv: Vec<Vec<u8>>, time: u64, duration: u64) {
        self.worker.log_slow(SlowEntry {
            id: slowlog::next_id(),
            time,
            duration,
            argv,
            peer: self.info.addr.clone(),
            name: self.info.name.borrow().clone(),
        });
    }

    fn resp3(&self) -> bool {
        self.info.resp.get() == 3
    }

    /// Runs a whole command on `shard`: inline when local, else queued for the round's batch.
    /// A local command waits in the batch too when it would overtake a transaction holding
    /// its keys, and so does every later local command of the round (request order); inside
    /// a transaction every command is a hop of it.
    fn run_on(&mut self, shard: usize, spec: usize, db: usize, args: &Args) {
        self.affinity.note(shard, self.worker.id, self.round_len);
        if shard == self.worker.id
            && self.tx.is_none()
            && self.batches[shard].is_empty()
            && self.worker.may_run_now(spec, db, args)
        {
            self.out.resp3 = self.resp3();
            let caller = self.caller();
            let slow = self
                .worker
                .exec(spec, db, args, &mut self.out, true, caller);
            if let Some(usec) = slow {
                self.log_slow(slowlog::entry_argv(args), slowlog::unix_time(), usec);
            }
            self.worker.serve_blocked();
            return;
        }
        let cmd = RemoteCmd {
            spec,
            db,
            resp3: self.resp3(),
            record: true,
            caller: self.caller(),
            first: 0,
            nargs: 0,
        };
        let batch = &mut self.batches[shard];
        batch.push(cmd, args.iter());
        self.pending.push(PendingSlot {
            at: self.out.buf.len(),
            shard,
            index: batch.cmds.len() - 1,
        });
    }

    /// The round's batch for `shard`, boxed to be sent; the connection keeps collecting in
    /// the memory of an earlier batch that came back (`take_batch_home`).
    pub(crate) fn take_batch(&mut self, shard: usize) -> Box<ExecBatch> {
        let mut boxed = self.spare_batches.pop().unwrap_or_default();
        std::mem::swap(&mut *boxed, &mut self.batches[shard]);
        boxed
    }

    /// Keeps the memory of a batch its shard sent back with `reply`, for the next rounds.
    pub(crate) fn take_batch_home(&mut self, shard: usize, reply: &mut BatchReply) {
        let Some(mut batch) = reply.batch.take() else {
            return;
        };
        if self.batches[shard].is_empty()
            && self.batches[shard].data.capacity() < batch.data.capacity()
        {
            std::mem::swap(&mut *batch, &mut self.batches[shard]);
        }
        if self.spare_batches.len() < self.batches.len() {
            self.spare_batches.push(batch);
        }
    }

    /// Sends the round's squashed batches, waits for their replies and splices them into the
    /// output in request order.
    pub(crate) async fn flush_remote(&mut self) {
        self.flush(false).await;
    }

    /// Before a command for `shard` (None: not one shard's): when a script run waits in
    /// another shard's batch, the batches go first. Such a run may yet need any shard, and
    /// then runs again the general way (scripting/here.rs), which nothing after it in the
    /// round may overtake; commands for the run's own shard follow it in its batch.
    pub(crate) async fn after_batched_runs(&mut self, shard: Option<usize>) {
        if self.runs_batched_for.is_some_and(|s| Some(s) != shard) {
            self.flush_remote().await;
        }
    }

    /// `flush_remote`; inside a transaction, `conclude` releases it with these hops.
    pub(crate) async fn flush(&mut self, conclude: bool) {
        if self.pending.is_empty() {
            return;
        }
        let mut replies: Vec<Option<BatchReply>> = (0..self.batches.len()).map(|_| None).collect();
        let full: Vec<usize> = (0..self.batches.len())
            .filter(|&s| !self.batches[s].is_empty())
            .collect();
        if let Some(tx) = self.tx.as_mut() {
            let parts = full
                .iter()
                .map(|&shard| {
                    let batch = std::mem::take(&mut self.batches[shard]);
                    let run: ShardWork<BatchReply> =
                        Box::new(move |w: &Worker| w.run_batch(&batch));
                    (shard, run)
                })
                .collect();
            for (shard, r) in full.iter().zip(tx.hops(parts, conclude).await) {
                replies[*shard] = r;
            }
        } else {
            let mut waiting = Vec::new();
            for &shard in &full {
                let mut batch = self.take_batch(shard);
                batch.reply_limit = self.out.limit;
                waiting.push((shard, self.worker.send_batch(shard, batch)));
            }
            for (shard, wait) in waiting {
                if let Some(Payload::Batch(r)) = wait.await {
                    replies[shard] = Some(r);
                }
            }
            // Only the batch of `runs_batched_for` may hand a run back (scripting/here.rs);
            // every batch is looked at so that no reply could ever be lost.
            self.runs_batched_for = None;
            for (shard, reply) in replies.iter_mut().enumerate() {
                if let Some(reply) = reply.as_mut().filter(|r| r.handed_back.is_some()) {
                    self.run_handed_back(shard, reply).await;
                }
            }
        }
        self.splice(replies);
    }

    /// Runs each script run `shard` handed back in `reply` here, the general way, and
    /// sends the commands after it again, until the batch is done; their replies join
    /// `reply`'s, at the places of their commands.
    async fn run_handed_back(&mut self, shard: usize, reply: &mut BatchReply) {
        while let Some(watch) = reply.handed_back.take() {
            // The run's reply alone, while this round's output and slots wait.
            let pending = std::mem::take(&mut self.pending);
            let out = std::mem::take(&mut self.out.buf);
            let errors = std::mem::take(&mut self.out.error_offsets);
            // Boxed: running it may flush batches again (a rare path).
            Box::pin(self.run_script_again(watch)).await;
            let ran = std::mem::replace(&mut self.out.buf, out);
            self.out.error_offsets = errors;
            self.pending = pending;
            reply.out.extend_from_slice(&ran);
            reply.ends.push(reply.out.len());
            let Some(mut rest) = reply.batch.take() else {
                return;
            };
            if rest.next >= rest.cmds.len() {
                reply.batch = rest.emptied();
                return;
            }
            rest.reply_limit = self.out.limit;
            let Some(Payload::Batch(more)) = self.worker.send_batch(shard, rest).await else {
                return;
            };
            let base = reply.out.len();
            reply.out.extend_from_slice(&more.out);
            reply.ends.extend(more.ends.iter().map(|end| base + end));
            reply.slow.extend(more.slow);
            reply.batch = more.batch;
            reply.handed_back = more.handed_back;
        }
    }

    /// Puts the round's remote replies (by shard) into the output, in request order.
    pub(crate) fn splice(&mut self, mut replies: Vec<Option<BatchReply>>) {
        for (shard, reply) in replies.iter_mut().enumerate() {
            if let Some(reply) = reply {
                self.take_batch_home(shard, reply);
            }
        }
        self.log_remote_slow(&mut replies);
        let stopped_early = self.pending.iter().any(|p| {
            replies[p.shard]
                .as_ref()
                .is_some_and(|r| p.index >= r.ends.len())
        });
        let total =
            self.out.buf.len() + replies.iter().flatten().map(|r| r.out.len()).sum::<usize>();
        if stopped_early || total > self.out.limit {
            // A shard passed the output budget: nothing more is written to this client (and
            // the replies are not copied into its output).
            self.pending.clear();
            self.over_output_limit = true;
            return;
        }
        let local = std::mem::take(&mut self.out.buf);
        let mut merged = Vec::with_capacity(total);
        let mut copied = 0;
        for slot in self.pending.drain(..) {
            merged.extend_from_slice(&local[copied..slot.at]);
            copied = slot.at;
            match &replies[slot.shard] {
                Some(r) => merged.extend_from_slice(r.get(slot.index)),
                None => merged.extend_from_slice(b"-ERR shard unavailable\r\n"),
            }
        }
        merged.extend_from_slice(&local[copied..]);
        self.out.buf = merged;
        // Offsets of local errors moved; they were already counted.
        self.out.error_offsets.clear();
    }

    /// The intents command `idx` needs, per shard (each shard once, sorted).
    pub(crate) fn plan(
        &self,
        idx: usize,
        db: usize,
        args: &Args,
        plan: &mut Vec<(usize, Vec<Lock>)>,
    ) {
        plan::command_locks(
            idx,
            db,
            args,
            self.worker.cluster.databases,
            self.worker.num_shards(),
            |shard, lock| add_to_plan(plan, shard, lock),
        );
    }

    /// Makes sure a transaction is running: inside EXEC it already is; otherwise one is
    /// scheduled for `plan`. Returns whether this call began it (and must end it), or None
    /// when a shard is unavailable.
    pub(crate) async fn enter_tx(&mut self, plan: Vec<(usize, Vec<Lock>)>) -> Option<bool> {
        if self.tx.is_some() {
            return Some(false);
        }
        self.flush_remote().await;
        let mut plan = plan;
        for (_, locks) in &mut plan {
            merge_locks(locks);
        }
        self.tx = Some(Tx::begin(&self.worker, plan).await?);
        Some(true)
    }

    /// Ends a transaction `enter_tx` began.
    pub(crate) async fn leave_tx(&mut self, own: bool) {
        if own {
            if let Some(tx) = self.tx.take() {
                tx.end().await;
            }
        }
    }

    /// Runs commands on several shards as hops of the current transaction and returns each
    /// reply, in `parts` order (at most one part per shard). Earlier commands of this
    /// connection are flushed first, so these see their effects. `conclude` releases the
    /// transaction with these hops.
    pub(crate) async fn call_shards(
        &mut self,
        spec: usize,
        parts: Vec<(usize, Vec<&[u8]>)>,
        conclude: bool,
    ) -> Vec<Vec<u8>> {
        self.flush_remote().await;
        let db = self.info.db.get();
        let resp3 = self.resp3();
        let caller = self.caller();
        let hops = parts
            .iter()
            .map(|(shard, args)| {
                let mut batch = ExecBatch::default();
                let cmd = RemoteCmd {
                    spec,
                    db,
                    resp3,
                    record: false,
                    caller,
                    first: 0,
                    nargs: 0,
                };
                batch.push(cmd, args.iter());
                let run: ShardWork<Vec<u8>> = Box::new(move |w: &Worker| w.run_batch(&batch).out);
                (*shard, run)
            })
            .collect();
        let results = match self.tx.as_mut() {
            Some(tx) => tx.hops(hops, conclude).await,
            None => vec![None; parts.len()],
        };
        results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| b"-ERR shard unavailable\r\n".to_vec()))
            .collect()
    }

    /// Sends a message to every thread and collects the answers, in shard order.
    pub(crate) async fn ask_all<T>(
        &mut self,
        make: impl Fn(oneshot::Sender<T>) -> ShardMsg,
    ) -> Vec<T> {
        self.flush_remote().await;
        let mut waiting = Vec::new();
        for mb in &self.worker.cluster.mailboxes {
            let (tx, rx) = oneshot::channel();
            if mb.send(make(tx)) {
                waiting.push(rx);
            }
        }
        let mut out = Vec::with_capacity(waiting.len());
        for rx in waiting {
            if let Ok(v) = rx.await {
                out.push(v);
            }
        }
        out
    }

    /// Resets per-connection state (RESET).
    pub(crate) fn reset(&mut self) {
        self.multi = None;
        self.info.multi.set(-1);
        self.unwatch_all();
        self.info.db.set(0);
        self.set_protocol(2);
        self.reply_mode = ReplyMode::On;
        self.info.name.borrow_mut().clear();
        let acl = &self.worker.cluster.acl;
        self.acl_epoch = acl.epoch();
        *self.info.user.borrow_mut() = acl.default_user();
        self.authenticated = !acl.auth_required();
    }
}

/// Adds an intent on `shard` to a plan (shards in order; duplicates are merged when the
/// transaction begins).
pub(crate) fn add_to_plan(plan: &mut Vec<(usize, Vec<Lock>)>, shard: usize, lock: Lock) {
    match plan.binary_search_by_key(&shard, |p| p.0) {
        Ok(i) => plan[i].1.push(lock),
        Err(i) => plan.insert(i, (shard, vec![lock])),
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.revoke_socket();
        if self.moved_away {
            // Its session lives on in the `MovedClient`; it held nothing on this thread.
            return;
        }
        self.abandon_block();
        self.drop_subscriptions();
        self.drop_tracking();
        self.unwatch_all();
        self.worker.clients.borrow_mut().remove(self.info.id);
        self.worker.cluster.release_client();
    }
}
