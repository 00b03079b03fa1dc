//! Scripting (docs/scripting.md): EVAL and SCRIPT (`eval`), FCALL and FUNCTION
//! (`function_family`), and the driver they share between a run (the Lua side lives in
//! damselfly-scripting) and the shards. A run is one transaction that locks whole shards:
//! every shard, or only those owning its declared keys once the script has been seen to
//! stay on them. Each `redis.call` is checked as Redis checks it, then routed like a
//! client's command inside that transaction, and its reply handed back to Lua. A call that
//! reaches a shard the run did not lock restarts the run with every shard locked, after
//! taking back what it wrote (docs/scripting.md, "Keys a script does not declare").
//!
//! A run past `busy-reply-threshold` goes on the process's busy board (its watchdog lives
//! in damselfly-scripting): other clients then get `-BUSY` until it ends, and SCRIPT KILL,
//! FUNCTION KILL or SHUTDOWN NOSAVE can stop it.

mod eval;
mod function_family;

use std::sync::Arc;
use std::time::Duration;

use damselfly_commands::table::{flags, CommandSpec, COMMANDS};
use damselfly_commands::{lookup, Args};
use damselfly_protocol::Span;
use damselfly_scripting::convert::{reply_to_lua, write_lua};
use damselfly_scripting::vm::error_table;
use damselfly_scripting::watchdog::{self, RunKind, RunWatch};
use damselfly_scripting::{Reach, Request, ScriptVm, Step};
use damselfly_storage::shard_for_key;
use mlua::Value;

use crate::connection::Connection;
use crate::tx::{Lock, Mode};

const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const UNDECLARED: &str =
    "ERR Script attempted to access a key it did not declare (script-shard-locking strict)";

/// One script or function call to run.
struct Invocation<'a> {
    f: mlua::Function,
    keys: Vec<&'a [u8]>,
    argv: Vec<&'a [u8]>,
    kind: RunKind,
    /// The script's SHA or the function's name (error replies, FUNCTION STATS).
    id: &'a str,
    read_only: bool,
    reach: &'a Reach,
}

/// The shards a run locks and what it did so far.
struct RunScope {
    locked: Vec<usize>,
    /// The shards of its declared keys.
    declared: Vec<usize>,
    read_only: bool,
    /// A write command succeeded: a restart takes the run's writes back first, and SCRIPT
    /// KILL can no longer stop it.
    wrote: bool,
    /// A command reached a shard none of its declared keys is on.
    roamed: bool,
    watch: Arc<RunWatch>,
    /// Under `script-shard-locking strict`: the declared keys, the only ones calls may name.
    strict_keys: Option<Vec<Vec<u8>>>,
}

impl RunScope {
    fn lock_every_shard(&mut self, shards: usize) {
        self.locked = (0..shards).collect();
    }
}

/// How a run ended.
enum Outcome {
    Done(Value, bool),
    Failed(Failure),
    /// It reached a shard it had not locked: run it again with every shard locked (after
    /// taking back what it wrote).
    Restart,
}

/// The reply to one `redis.call`, or why it may not run here.
enum CallResult {
    Reply(Vec<u8>),
    Refused(&'static str),
    /// Its keys are on a shard the run did not lock.
    Elsewhere,
}

impl Connection {
    /// Runs `inv` to its end (restarting it if it must) and writes its reply.
    async fn invoke(&mut self, vm: &ScriptVm, inv: Invocation<'_>, args: &Args<'_>) {
        let busy_after = self
            .worker
            .cluster
            .config
            .get("busy-reply-threshold")
            .parse()
            .unwrap_or(5000);
        let watch = RunWatch::new(
            inv.kind,
            inv.id.to_string(),
            args.iter().map(<[u8]>::to_vec).collect(),
            Duration::from_millis(busy_after),
            self.worker.cluster.busy.clone(),
        );
        let _watching = watchdog::watch(watch.clone());
        let mut scope = self.run_scope(&inv.keys, inv.reach, inv.read_only, watch);
        loop {
            let outcome = self.run_script(vm, &inv, &mut scope).await;
            inv.reach.record(scope.roamed);
            match outcome {
                Outcome::Restart => {
                    scope.lock_every_shard(self.worker.num_shards());
                    self.worker.stats.borrow_mut().script_restarts += 1;
                }
                Outcome::Done(v, script_resp3) => {
                    self.out.resp3 = self.info.resp.get() == 3;
                    write_lua(&mut self.out, &v, script_resp3);
                    return;
                }
                Outcome::Failed(failure) => return self.reply_error(&failure.reply(inv.id)),
            }
        }
    }

    /// Which shards a run locks: every shard for a script that declares no keys, for its
    /// first run, once it has been seen to reach other shards, inside EXEC, and under
    /// `script-shard-locking all`; otherwise the shards of its declared keys.
    fn run_scope(
        &self,
        keys: &[&[u8]],
        reach: &Reach,
        read_only: bool,
        watch: Arc<RunWatch>,
    ) -> RunScope {
        let n = self.worker.num_shards();
        let mut declared: Vec<usize> = keys.iter().map(|k| shard_for_key(k, n)).collect();
        declared.sort_unstable();
        declared.dedup();
        let locking = self.worker.cluster.config.get("script-shard-locking");
        let every_shard = declared.is_empty()
            || reach.needs_every_shard()
            || self.tx.is_some()
            || locking == "all";
        let locked = if every_shard {
            (0..n).collect()
        } else {
            declared.clone()
        };
        RunScope {
            locked,
            declared,
            read_only,
            wrote: false,
            roamed: false,
            watch,
            strict_keys: (locking == "strict").then(|| keys.iter().map(|k| k.to_vec()).collect()),
        }
    }

    /// One run of `f` in its own transaction (or inside the EXEC that runs it).
    async fn run_script(
        &mut self,
        vm: &ScriptVm,
        inv: &Invocation<'_>,
        scope: &mut RunScope,
    ) -> Outcome {
        let mode = Mode::for_write(!scope.read_only);
        let plan = scope
            .locked
            .iter()
            .map(|&s| (s, vec![Lock::AllDbs { mode }]))
            .collect();
        let Some(own_tx) = self.enter_tx(plan).await else {
            return Outcome::Failed(Failure::plain("ERR shard unavailable"));
        };
        let partial = scope.locked.len() < self.worker.num_shards();
        if partial && !scope.read_only {
            if let Some(tx) = self.tx.as_mut() {
                tx.keep_undo();
            }
        }
        let db = self.info.db.get();
        let outcome = self.drive(vm, inv, scope).await;
        self.info.db.set(db);
        if matches!(outcome, Outcome::Restart) && scope.wrote {
            if let Some(tx) = self.tx.as_mut() {
                tx.roll_back(&scope.locked).await;
            }
        }
        self.leave_tx(own_tx).await;
        outcome
    }

    async fn drive(
        &mut self,
        vm: &ScriptVm,
        inv: &Invocation<'_>,
        scope: &mut RunScope,
    ) -> Outcome {
        let lua = vm.lua();
        let as_globals = inv.kind == RunKind::Eval;
        let mut run = match vm.start(&inv.f, &inv.keys, &inv.argv, as_globals) {
            Ok(r) => r,
            Err(e) => {
                let text = format!("ERR {}", damselfly_scripting::vm::lua_text(e));
                return Outcome::Failed(Failure::plain(&text));
            }
        };
        scope.wrote = false;
        scope.roamed = false;
        let mut answer = None;
        loop {
            match run.resume(lua, answer.take()) {
                Step::Done(v, resp3) => return Outcome::Done(v, resp3),
                Step::Failed {
                    error,
                    source,
                    line,
                } => return Outcome::Failed(Failure::raised(&error, source, line)),
                Step::BadRequest { error, .. } => {
                    answer = Some((false, error_table(lua, error)));
                }
                Step::Request(Request::AclCheck { args }) => {
                    answer = Some(match lookup(&args[0]) {
                        Some(_) => (true, Value::Boolean(true)),
                        None => (
                            false,
                            error_table(lua, "ERR Invalid command passed to redis.acl_check_cmd()"),
                        ),
                    });
                }
                Step::Request(Request::Call { resp3, args, .. }) => {
                    let reply = match self.script_call(&args, resp3, scope).await {
                        CallResult::Reply(bytes) => {
                            let wrote = lookup(&args[0]).is_some_and(|idx| {
                                COMMANDS[idx].is_write() && bytes.first() != Some(&b'-')
                            });
                            if wrote {
                                scope.wrote = true;
                                scope.watch.note_write();
                            }
                            reply_to_lua(lua, &bytes)
                                .map(|(is_error, v)| (!is_error, v))
                                .unwrap_or_else(|_| {
                                    (false, error_table(lua, "ERR reply could not be read"))
                                })
                        }
                        CallResult::Refused(e) => (false, error_table(lua, e)),
                        CallResult::Elsewhere => return Outcome::Restart,
                    };
                    answer = Some(reply);
                }
            }
        }
    }

    /// Runs one command for a script: Redis's checks in Redis's order, then the command
    /// routed inside the run's transaction, replying in the script's protocol.
    async fn script_call(
        &mut self,
        argv: &[Vec<u8>],
        resp3: bool,
        scope: &mut RunScope,
    ) -> CallResult {
        let mut data = Vec::new();
        let mut spans = Vec::with_capacity(argv.len());
        for a in argv {
            Span::push_arg(&mut data, &mut spans, a);
        }
        let args = Args::new(&data, &spans);
        let Some(idx) = lookup(args.get(0)) else {
            return CallResult::Refused("ERR Unknown Redis command called from script");
        };
        let spec = &COMMANDS[idx];
        if !spec.arity_ok(args.len()) {
            return CallResult::Refused(
                "ERR Wrong number of args calling Redis command from script",
            );
        }
        if spec.flags & flags::NOSCRIPT != 0 {
            return CallResult::Refused("ERR This Redis command is not allowed from script");
        }
        if scope.read_only && spec.flags & (flags::WRITE | flags::MAY_REPLICATE) != 0 {
            return CallResult::Refused(
                "ERR Write commands are not allowed from read-only scripts.",
            );
        }
        let mut plan = Vec::new();
        self.plan(idx, self.info.db.get(), &args, &mut plan);
        if let Some(allowed) = &scope.strict_keys {
            let undeclared = plan.iter().flat_map(|(_, locks)| locks).any(
                |l| matches!(l, Lock::Key { key, .. } if !allowed.iter().any(|k| **k == **key)),
            );
            if undeclared {
                return CallResult::Refused(UNDECLARED);
            }
        }
        if plan
            .iter()
            .any(|(shard, _)| !scope.declared.contains(shard))
        {
            scope.roamed = true;
            if plan.iter().any(|(shard, _)| !scope.locked.contains(shard)) {
                return CallResult::Elsewhere;
            }
        }
        let client_resp = self.info.resp.get();
        self.info.resp.set(if resp3 { 3 } else { 2 });
        self.out.resp3 = resp3;
        let mark = self.out.buf.len();
        let errors = self.out.error_offsets.len();
        // Boxed: EVAL is itself routed, so this recursion needs an indirection.
        let run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>> =
            Box::pin(self.route(idx, &args));
        run.await;
        self.flush(false).await;
        self.info.resp.set(client_resp);
        self.out.resp3 = client_resp == 3;
        let reply = self.out.buf.split_off(mark.min(self.out.buf.len()));
        self.out.error_offsets.truncate(errors);
        CallResult::Reply(reply)
    }

    /// `-BUSY` for a command other clients may not run while a script is busy (Redis's
    /// `allow_busy` commands may), or None.
    pub(crate) fn busy_refusal(&self, spec: &CommandSpec, args: &Args) -> Option<&'static str> {
        let board = &self.worker.cluster.busy;
        if !board.is_busy() {
            return None;
        }
        let sub = args.len() > 1 && {
            let sub = args.get(1).to_ascii_lowercase();
            match spec.name {
                "script" => sub == b"kill",
                "function" => sub == b"kill" || sub == b"stats",
                _ => false,
            }
        };
        if spec.flags & flags::ALLOW_BUSY != 0 || sub {
            return None;
        }
        Some(busy_text(board))
    }

    /// SCRIPT KILL (`kind` Eval) and FUNCTION KILL: stops the busy runs of that kind, as
    /// Redis's scriptKill answers.
    fn kill_busy(&mut self, kind: RunKind) {
        let runs = self.worker.cluster.busy.runs();
        if runs.is_empty() {
            return self.reply_error("NOTBUSY No scripts in execution right now.");
        }
        if runs.iter().any(|r| r.wrote()) {
            return self.reply_error(
                "UNKILLABLE Sorry the script already executed write commands against the \
                 dataset. You can either wait the script termination or kill the server in a \
                 hard way using the SHUTDOWN NOSAVE command.",
            );
        }
        if let Some(other) = runs.iter().find(|r| r.kind != kind) {
            return self.reply_error(if other.kind == RunKind::Eval {
                BUSY_EVAL
            } else {
                BUSY_FUNCTION
            });
        }
        for r in runs {
            r.kill(KILLED);
        }
        self.out.ok();
    }
}

/// The BUSY text for the busy runs: the function form when a function is among them.
fn busy_text(board: &watchdog::BusyBoard) -> &'static str {
    if board.runs().iter().any(|r| r.kind == RunKind::Function) {
        BUSY_FUNCTION
    } else {
        BUSY_EVAL
    }
}

/// SHUTDOWN while a script is busy: without NOSAVE it is refused with BUSY; with NOSAVE
/// every busy run is stopped, whatever it wrote, so the server can stop.
pub(crate) fn shutdown_refusal(board: &watchdog::BusyBoard, nosave: bool) -> Option<&'static str> {
    let runs = board.runs();
    if runs.is_empty() {
        return None;
    }
    if !nosave {
        return Some(busy_text(board));
    }
    for r in runs {
        r.kill(KILLED);
    }
    None
}

/// The error a failed run raised and the user-code line it came from.
struct Failure {
    /// The error table's `err` text; None when the error carried none.
    err: Option<String>,
    /// `@user_script:<line>`.
    at: Option<String>,
}

impl Failure {
    fn plain(text: &str) -> Failure {
        Failure {
            err: Some(text.to_string()),
            at: None,
        }
    }

    fn raised(error: &Value, source: Option<String>, line: Option<i64>) -> Failure {
        let err = match error {
            Value::Table(t) => match t.raw_get::<Value>("err") {
                Ok(Value::String(s)) => Some(String::from_utf8_lossy(&s.as_bytes()).into_owned()),
                _ => None,
            },
            _ => None,
        };
        let at = source.zip(line).map(|(s, l)| format!("{s}:{l}"));
        Failure { err, at }
    }

    /// The error reply, as Redis words it: `<err> script: <id>, on <source>:<line>.`
    fn reply(&self, id: &str) -> String {
        match (&self.err, &self.at) {
            (Some(err), Some(at)) => format!("{err} script: {id}, on {at}."),
            (Some(err), None) => err.clone(),
            (None, _) => format!("ERR Error running script {id}, the error carried no message"),
        }
    }
}
