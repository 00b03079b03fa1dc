//! Scripting (docs/scripting.md): EVAL and SCRIPT (`eval`), FCALL and FUNCTION
//! (`function_family`), and the driver they share between a run (the Lua side lives in
//! damselfly-scripting) and the shards. A run whose declared keys share a shard runs there
//! in one go (`here`); otherwise a run is one transaction that holds every shard whole, or
//! only its declared keys once the script has been seen to stay within them. Each
//! `redis.call` is checked as Redis checks it, then routed like a client's command inside
//! that transaction, and its reply handed back to Lua. A call needing what the run does not
//! hold restarts the run with every shard locked, after taking back what it wrote
//! (docs/scripting.md, "Atomicity").
//!
//! A run past `busy-reply-threshold` goes on the process's busy board (its watchdog lives
//! in damselfly-scripting): other clients then get `-BUSY` until it ends, and SCRIPT KILL,
//! FUNCTION KILL or SHUTDOWN NOSAVE can stop it.

mod eval;
mod function_family;
mod here;

pub use function_family::restore_functions;

use std::sync::Arc;
use std::time::Duration;

use damselfly_commands::config::ScriptLocking;
use damselfly_commands::table::{flags, CommandSpec, Intents, COMMANDS};
use damselfly_commands::{lookup, Args};
use damselfly_scripting::vm::{Callable, Done};
use damselfly_scripting::watchdog::{self, RunKind, RunWatch};
use damselfly_scripting::{Answer, Reach, Request, Run, ScriptVm, Step, Words};
use damselfly_storage::shard_for_key;
use mlua::Value;

use self::here::{HereJob, HereResult, Target};
use crate::acl_family::ScriptAcl;
use crate::connection::Connection;
use crate::maxmemory::CallOom;
use crate::tx::{Lock, Mode};

const BUSY_EVAL: &str =
    "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";
const BUSY_FUNCTION: &str =
    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.";
const KILLED: &str = "Script killed by user with SCRIPT KILL...";
const UNDECLARED: &str =
    "ERR Script attempted to access a key it did not declare (script-shard-locking strict)";

/// One script or function call to run.
struct Call<'a> {
    /// The command's index in the command table (EVALSHA, FCALL, ...).
    spec: usize,
    keys: &'a [&'a [u8]],
    argv: &'a [&'a [u8]],
    kind: RunKind,
    /// The script's SHA or the function's name (error replies, FUNCTION STATS).
    id: &'a str,
    read_only: bool,
    reach: &'a Reach,
    /// It started over `maxmemory` without `allow-oom`: its calls are checked (`CallOom`).
    oom_checked: bool,
}

/// What a run locks and what it did so far.
struct RunScope {
    /// Shards it holds whole (every database).
    whole: Vec<usize>,
    /// Its declared keys (shard, database, key), each held on its own when its shard is not
    /// held whole.
    declared: Vec<(usize, usize, Vec<u8>)>,
    read_only: bool,
    /// A write command succeeded: a restart takes the run's writes back first, and SCRIPT
    /// KILL can no longer stop it.
    wrote: bool,
    /// A command needed more than its declared keys.
    roamed: bool,
    watch: Arc<RunWatch>,
    /// Under `script-shard-locking strict`: the declared keys, the only ones calls may name.
    strict_keys: Option<Vec<Vec<u8>>>,
    /// maxmemory's rule for the run's calls.
    oom: CallOom,
    /// The user's permissions, for a user not allowed everything.
    acl: Option<ScriptAcl>,
}

impl RunScope {
    fn lock_every_shard(&mut self, shards: usize) {
        self.whole = (0..shards).collect();
    }

    /// The locks to take: whole shards, and the declared keys on the other shards.
    fn plan(&self) -> Vec<(usize, Vec<Lock>)> {
        let mode = Mode::for_write(!self.read_only);
        let mut plan: Vec<(usize, Vec<Lock>)> = self
            .whole
            .iter()
            .map(|&s| (s, vec![Lock::AllDbs { mode }]))
            .collect();
        for (shard, db, key) in &self.declared {
            if self.whole.contains(shard) {
                continue;
            }
            let lock = Lock::Key {
                db: *db,
                key: key.as_slice().into(),
                mode,
            };
            crate::connection::add_to_plan(&mut plan, *shard, lock);
        }
        plan
    }

    /// Every shard it holds something on.
    fn shards(&self) -> Vec<usize> {
        let mut shards = self.whole.clone();
        shards.extend(self.declared.iter().map(|d| d.0));
        shards.sort_unstable();
        shards.dedup();
        shards
    }

    fn is_declared(&self, shard: usize, lock: &Lock) -> bool {
        matches!(lock, Lock::Key { db, key, .. }
            if self.declared.iter().any(|(s, d, k)| (*s, *d) == (shard, *db) && **k == **key))
    }

    /// Whether a call's locks are all held by the run.
    fn covers(&self, plan: &Plan) -> bool {
        plan.iter().all(|(shard, locks)| {
            self.whole.contains(shard) || locks.iter().all(|l| self.is_declared(*shard, l))
        })
    }

    /// Whether a call stays within the declared keys (what the next runs may lock alone).
    fn within_declared(&self, plan: &Plan) -> bool {
        plan.iter()
            .all(|(shard, locks)| locks.iter().all(|l| self.is_declared(*shard, l)))
    }
}

/// How a run ended.
enum Outcome {
    Done(Done),
    Failed(Failure),
    /// It reached a shard it had not locked: run it again with every shard locked (after
    /// taking back what it wrote).
    Restart,
}

/// The reply to one `redis.call`, or why it may not run here.
enum CallResult {
    /// Command `idx`'s reply.
    Reply(usize, Vec<u8>),
    Refused(&'static str),
    /// Its keys are on a shard the run did not lock.
    Elsewhere,
}

impl Connection {
    /// Runs `call` in one go on the thread of the shard its keys are on, when it has not been
    /// seen to reach other shards (`here`): at once when that is this thread's shard and no
    /// transaction or earlier command waits there, else in the round's batch for that shard.
    /// True when it replied or was batched; false when it must run the general way (it
    /// needed another shard, and nothing it did remains).
    async fn run_on_its_shard(
        &mut self,
        call: &Call<'_>,
        target: &Target,
        args: &Args<'_>,
    ) -> bool {
        let n = self.worker.num_shards();
        let locking = self.worker.cluster.config.script_locking();
        if self.tx.is_some()
            || self.running_handed_back
            || locking == ScriptLocking::All
            || call.reach.roams()
        {
            return false;
        }
        let mut shard = self.worker.id;
        for (i, key) in call.keys.iter().enumerate() {
            let s = shard_for_key(key, n);
            if i > 0 && s != shard {
                return false;
            }
            shard = s;
        }
        self.after_batched_runs(Some(shard)).await;
        let job = HereJob {
            spec: call.spec,
            target: target.clone(),
            nkeys: call.keys.len(),
            db: self.info.db.get(),
            resp3: self.info.resp.get() == 3,
            read_only: call.read_only,
            strict_keys: (locking == ScriptLocking::Strict)
                .then(|| call.keys.iter().map(|k| k.to_vec()).collect()),
            oom_checked: call.oom_checked,
            watch: self.run_watch(call, args),
            generation: self.worker.cluster.scripts.generation(),
            caller: self.caller(),
            acl: self.script_acl(),
        };
        // Earlier commands for other shards may still be running: a run that stays here
        // does not see them (as a plain command here would not), and one that does not
        // stay starts over the general way, after them.
        if shard == self.worker.id
            && self.batches[shard].is_empty()
            && self.worker.no_transaction_here()
        {
            let result = self
                .worker
                .run_alone(!call.read_only, |w| w.run_script_here(job));
            return self.take_here_result(call, result);
        }
        self.batch_run(shard, job);
        true
    }

    /// Writes the reply of a run on its keys' shard; false when it must run the general way.
    fn take_here_result(&mut self, call: &Call<'_>, result: HereResult) -> bool {
        match result {
            HereResult::Reply(reply) => {
                call.reach.record(false);
                if reply.buf.first() == Some(&b'-') {
                    self.out.error_offsets.push(self.out.buf.len());
                }
                self.out.raw(&reply.buf);
                true
            }
            HereResult::Elsewhere => {
                call.reach.record(true);
                self.worker.stats.borrow_mut().script_restarts += 1;
                false
            }
            HereResult::VmBusy => false,
        }
    }

    fn run_watch(&mut self, call: &Call<'_>, args: &Args<'_>) -> Arc<RunWatch> {
        let busy_after = self
            .worker
            .cluster
            .config
            .busy_reply_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        RunWatch::renew(
            &mut self.kept_watches,
            call.kind,
            call.id,
            args.iter(),
            Duration::from_millis(busy_after),
            &self.worker.cluster.busy,
        )
    }

    /// Runs `call` of `target`: in one go on its keys' shard when it can, else with this
    /// thread's VM as a transaction over the shards it may touch.
    async fn run_call(&mut self, call: &Call<'_>, target: Target, args: &Args<'_>) {
        if self.run_on_its_shard(call, &target, args).await {
            return;
        }
        // Runs batched before it go first: one of them may need this thread's VM.
        self.flush_remote().await;
        let worker = self.worker.clone();
        let mut vm = match worker
            .scripting
            .lend(worker.cluster.scripts.generation())
            .await
        {
            Ok(vm) => vm,
            Err(e) => return self.reply_error(&format!("ERR {e}")),
        };
        match here::resolve(&mut vm, &target) {
            Ok((vm, f)) => self.invoke(vm, f, call, args).await,
            Err(e) => self.reply_error(&e),
        }
    }

    /// Runs `f` for `call` as one transaction over the shards it may touch (restarting it
    /// with every shard locked if it must) and writes its reply.
    async fn invoke(&mut self, vm: &ScriptVm, f: Callable<'_>, call: &Call<'_>, args: &Args<'_>) {
        let watch = self.run_watch(call, args);
        let _watching = watchdog::watch(watch.clone());
        let mut scope = self.run_scope(call.keys, call.reach, call.read_only, watch);
        loop {
            self.hold_publishing();
            let outcome = self.run_script(vm, f, call, &mut scope).await;
            call.reach.record(scope.roamed);
            self.release_publishing(!matches!(outcome, Outcome::Restart));
            match outcome {
                Outcome::Restart => {
                    scope.lock_every_shard(self.worker.num_shards());
                    self.worker.stats.borrow_mut().script_restarts += 1;
                }
                Outcome::Done(done) => {
                    self.out.resp3 = self.info.resp.get() == 3;
                    done.write(&mut self.out);
                    return;
                }
                Outcome::Failed(failure) => return self.reply_error(&failure.reply(call.id)),
            }
        }
    }

    /// What a run locks: every shard whole for a script that declares no keys, for its
    /// first run, once it has been seen to need more than its declared keys, inside EXEC,
    /// and under `script-shard-locking all`; otherwise only its declared keys.
    fn run_scope(
        &mut self,
        keys: &[&[u8]],
        reach: &Reach,
        read_only: bool,
        watch: Arc<RunWatch>,
    ) -> RunScope {
        let n = self.worker.num_shards();
        let db = self.info.db.get();
        let declared: Vec<(usize, usize, Vec<u8>)> = keys
            .iter()
            .map(|k| (shard_for_key(k, n), db, k.to_vec()))
            .collect();
        let locking = self.worker.cluster.config.script_locking();
        let every_shard = declared.is_empty()
            || reach.needs_every_shard()
            || self.tx.is_some()
            || locking == ScriptLocking::All;
        let whole = if every_shard {
            (0..n).collect()
        } else {
            Vec::new()
        };
        RunScope {
            whole,
            declared,
            read_only,
            wrote: false,
            roamed: false,
            watch,
            strict_keys: (locking == ScriptLocking::Strict)
                .then(|| keys.iter().map(|k| k.to_vec()).collect()),
            oom: CallOom::default(),
            acl: self.script_acl(),
        }
    }

    /// One run of `f` in its own transaction (or inside the EXEC that runs it).
    async fn run_script(
        &mut self,
        vm: &ScriptVm,
        f: Callable<'_>,
        call: &Call<'_>,
        scope: &mut RunScope,
    ) -> Outcome {
        let Some(own_tx) = self.enter_tx(scope.plan()).await else {
            return Outcome::Failed(Failure::plain("ERR shard unavailable"));
        };
        let partial = scope.whole.len() < self.worker.num_shards();
        if partial && !scope.read_only {
            if let Some(tx) = self.tx.as_mut() {
                tx.keep_undo();
            }
        }
        let db = self.info.db.get();
        let outcome = self.drive(vm, f, call, scope).await;
        self.info.db.set(db);
        if matches!(outcome, Outcome::Restart) && scope.wrote {
            if let Some(tx) = self.tx.as_mut() {
                tx.roll_back(&scope.shards()).await;
            }
        }
        self.leave_tx(own_tx).await;
        outcome
    }

    async fn drive(
        &mut self,
        vm: &ScriptVm,
        f: Callable<'_>,
        call: &Call<'_>,
        scope: &mut RunScope,
    ) -> Outcome {
        let lua = vm.lua();
        let as_globals = call.kind == RunKind::Eval;
        watchdog::executing(&scope.watch);
        let mut run = match vm.start(
            f,
            call.keys.iter().copied(),
            call.argv.iter().copied(),
            as_globals,
            false,
        ) {
            Ok(r) => r,
            Err(e) => {
                let text = format!("ERR {}", damselfly_scripting::vm::lua_text(e));
                return Outcome::Failed(Failure::plain(&text));
            }
        };
        scope.wrote = false;
        scope.roamed = false;
        scope.oom = CallOom::new(call.oom_checked);
        let mut answer = None;
        loop {
            let (resp3, words) = match next_call(&mut run, lua, answer.take()) {
                Next::End(outcome) => return outcome,
                Next::Call { resp3, words } => (resp3, words),
            };
            let reply = match self.script_call(&words, resp3, scope).await {
                CallResult::Reply(idx, bytes) => Ok((idx, bytes)),
                CallResult::Refused(e) => Err(e),
                CallResult::Elsewhere => return Outcome::Restart,
            };
            answer = Some(call_answer(reply, &scope.watch, &mut scope.wrote));
            // Other runs on this thread may have executed while this one waited.
            watchdog::executing(&scope.watch);
        }
    }

    /// Runs one command for a script: Redis's checks in Redis's order, then the command
    /// routed inside the run's transaction, replying in the script's protocol.
    async fn script_call(
        &mut self,
        words: &Words,
        resp3: bool,
        scope: &mut RunScope,
    ) -> CallResult {
        let args = Args::new(&words.data, &words.spans);
        let db = self.info.db.get();
        let rules = CallRules {
            read_only: scope.read_only,
            strict_keys: scope.strict_keys.as_deref(),
            oom: &mut scope.oom,
            acl: scope.acl.as_ref(),
        };
        let checked = check_call(&self.worker, db, &args, rules);
        let (idx, plan) = match checked {
            Ok(c) => c,
            Err(refusal) => return CallResult::Refused(refusal),
        };
        if !scope.within_declared(&plan) {
            scope.roamed = true;
            if !scope.covers(&plan) {
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
        CallResult::Reply(idx, reply)
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

/// What a run asks for next.
enum Next {
    Call { resp3: bool, words: Words },
    End(Outcome),
}

/// Resumes `run` until it calls a command or ends, answering what needs no command
/// (argument errors, `redis.acl_check_cmd`) on the way.
fn next_call(run: &mut Run, lua: &mlua::Lua, mut answer: Option<Answer>) -> Next {
    loop {
        match run.resume(lua, answer.take()) {
            Step::Done(done) => return Next::End(Outcome::Done(done)),
            Step::Failed {
                error,
                source,
                line,
            } => return Next::End(Outcome::Failed(Failure::raised(&error, source, line))),
            Step::BadRequest { error, .. } => answer = Some(Answer::Error(error)),
            Step::Request(Request::AclCheck { words }) => {
                answer = Some(match lookup(words.first()) {
                    Some(_) => Answer::Allowed,
                    None => Answer::Error("ERR Invalid command passed to redis.acl_check_cmd()"),
                });
            }
            Step::Request(Request::Call { resp3, words, .. }) => {
                return Next::Call { resp3, words }
            }
        }
    }
}

/// What Lua gets back from a call: the reply of command `idx` (an error reply as an error
/// table) or the refusal. A write that succeeded is noted in `wrote` and on the run's watch.
fn call_answer(
    reply: Result<(usize, Vec<u8>), &'static str>,
    watch: &RunWatch,
    wrote: &mut bool,
) -> Answer {
    let (idx, bytes) = match reply {
        Ok(reply) => reply,
        Err(refusal) => return Answer::Error(refusal),
    };
    if COMMANDS[idx].is_write() && bytes.first() != Some(&b'-') {
        *wrote = true;
        watch.note_write();
    }
    Answer::Reply(bytes)
}

/// Intents per shard.
type Plan = Vec<(usize, Vec<Lock>)>;

/// The keys, then the arguments, of `EVAL script numkeys ...` or `FCALL name numkeys ...`
/// (one vector for both: split at `numkeys`).
fn script_words<'a>(args: &Args<'a>) -> Vec<&'a [u8]> {
    (3..args.len()).map(|i| args.get(i)).collect()
}

/// Redis's checks of one `redis.call`, in Redis's order, then the intents it needs per shard.
/// The error is the reply the call gets.
fn check_call(
    worker: &crate::worker::Worker,
    db: usize,
    args: &Args,
    rules: CallRules,
) -> Result<(usize, Plan), &'static str> {
    checked_call(worker, args, rules, |idx, strict_keys| {
        call_plan(worker, idx, db, args, strict_keys)
    })
}

/// `check_call` for a run executing on one shard's thread: whether the call runs whole on
/// that shard (`worker`'s). A command with ordinary intents and no key check to make
/// (`strict_keys`) is decided from its keys' shards alone, without building its plan.
fn check_call_here(
    worker: &crate::worker::Worker,
    db: usize,
    args: &Args,
    rules: CallRules,
) -> Result<(usize, bool), &'static str> {
    checked_call(worker, args, rules, |idx, strict_keys| {
        let spec = &COMMANDS[idx];
        let whole_here = spec.runs_on_its_keys_shard(args);
        if strict_keys.is_none() && spec.intents == Intents::Keys {
            // Its plan would be one key intent per key position, on each key's shard.
            let n = worker.num_shards();
            let mut keys = spec.key_positions_iter(args).peekable();
            let any = keys.peek().is_some();
            return Ok(whole_here
                && any
                && keys.all(|at| shard_for_key(args.get(at), n) == worker.id));
        }
        let plan = call_plan(worker, idx, db, args, strict_keys)?;
        Ok(whole_here && !plan.is_empty() && plan.iter().all(|(s, _)| *s == worker.id))
    })
}

/// Looks the called command up and makes Redis's checks (`check_rules`), then `then`
/// (given the command and the keys a strict run may name); a refused command counts in
/// its `rejected_calls`, as in Redis.
fn checked_call<T>(
    worker: &crate::worker::Worker,
    args: &Args,
    mut rules: CallRules,
    then: impl FnOnce(usize, Option<&[Vec<u8>]>) -> Result<T, &'static str>,
) -> Result<(usize, T), &'static str> {
    let idx = lookup_call(args)?;
    let checked =
        check_rules(worker, idx, args, &mut rules).and_then(|()| then(idx, rules.strict_keys));
    if checked.is_err() {
        worker.stats.borrow_mut().record_rejected(idx);
    }
    checked.map(|t| (idx, t))
}

fn lookup_call(args: &Args) -> Result<usize, &'static str> {
    lookup(args.get(0)).ok_or("ERR Unknown Redis command called from script")
}

/// What a run's calls are checked against, beside the command itself.
struct CallRules<'a> {
    read_only: bool,
    /// Under `script-shard-locking strict`: the keys calls may name.
    strict_keys: Option<&'a [Vec<u8>]>,
    oom: &'a mut CallOom,
    acl: Option<&'a ScriptAcl>,
}

/// Redis's checks of a known command called from a script, in Redis's order.
fn check_rules(
    worker: &crate::worker::Worker,
    idx: usize,
    args: &Args,
    rules: &mut CallRules,
) -> Result<(), &'static str> {
    let spec = &COMMANDS[idx];
    if !spec.arity_ok(args.len()) {
        return Err("ERR Wrong number of args calling Redis command from script");
    }
    if spec.flags & flags::NOSCRIPT != 0 {
        return Err("ERR This Redis command is not allowed from script");
    }
    if let Some(refusal) = rules.acl.and_then(|a| a.refusal(&worker.cluster, args)) {
        return Err(refusal);
    }
    if rules.read_only && spec.flags & (flags::WRITE | flags::MAY_REPLICATE) != 0 {
        return Err("ERR Write commands are not allowed from read-only scripts.");
    }
    rules.oom.check(spec)
}

/// The intents a call needs per shard; under `strict_keys`, refused when it names a key
/// the script did not declare.
fn call_plan(
    worker: &crate::worker::Worker,
    idx: usize,
    db: usize,
    args: &Args,
    strict_keys: Option<&[Vec<u8>]>,
) -> Result<Plan, &'static str> {
    let mut plan = Vec::new();
    crate::tx::plan::command_locks(
        idx,
        db,
        args,
        worker.cluster.databases,
        worker.num_shards(),
        |shard, lock| crate::connection::add_to_plan(&mut plan, shard, lock),
    );
    if let Some(allowed) = strict_keys {
        let undeclared = plan
            .iter()
            .flat_map(|(_, locks)| locks)
            .any(|l| matches!(l, Lock::Key { key, .. } if !allowed.iter().any(|k| **k == **key)));
        if undeclared {
            return Err(UNDECLARED);
        }
    }
    Ok(plan)
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
