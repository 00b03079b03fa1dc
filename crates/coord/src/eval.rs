//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT: the driver between a script run (the
//! Lua side lives in damselfly-scripting) and the shards. A run is one transaction that
//! locks whole shards: every shard, or only those owning its declared keys once the script
//! has been seen to stay on them. Each `redis.call` is checked as Redis checks it, then
//! routed like a client's command inside that transaction, and its reply handed back to Lua.
//! A call that reaches a shard the run did not lock restarts the run with every shard
//! locked, after taking back what it wrote (docs/scripting.md, "Keys a script does not
//! declare").

use damselfly_commands::table::{flags, COMMANDS};
use damselfly_commands::{lookup, Args};
use damselfly_protocol::number::parse_i64;
use damselfly_protocol::Span;
use damselfly_scripting::convert::{reply_to_lua, write_lua};
use damselfly_scripting::vm::error_table;
use damselfly_scripting::{Reach, Request, Script, ScriptVm, Step};
use damselfly_storage::shard_for_key;
use mlua::Value;

use crate::connection::Connection;
use crate::tx::{Lock, Mode};

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

/// The shards a run locks and what it did so far.
struct RunScope {
    locked: Vec<usize>,
    /// The shards of its declared keys.
    declared: Vec<usize>,
    read_only: bool,
    /// A write command succeeded: the run can no longer be restarted.
    wrote: bool,
    /// A command reached a shard none of its declared keys is on.
    roamed: bool,
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

const SCRIPT_HELP: &[&str] = &[
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DEBUG (YES|SYNC|NO)",
    "    Set the debug mode for subsequent scripts executed.",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
];

impl Connection {
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO.
    pub(crate) async fn eval(&mut self, args: &Args<'_>) {
        let name = args.get(0).to_ascii_lowercase();
        let by_sha = name.starts_with(b"evalsha");
        let read_only_cmd = name.ends_with(b"_ro");
        if by_sha && args.get(1).len() != 40 {
            return self.reply_error(NOSCRIPT);
        }
        let Some(numkeys) = parse_i64(args.get(2)) else {
            return self.reply_error("ERR value is not an integer or out of range");
        };
        if numkeys > (args.len() - 3) as i64 {
            return self.reply_error("ERR Number of keys can't be greater than number of args");
        }
        if numkeys < 0 {
            return self.reply_error("ERR Number of keys can't be negative");
        }
        let worker = self.worker.clone();
        let cache = &worker.cluster.scripts;
        let mut vm = match worker.scripting.lend(cache.generation()).await {
            Ok(vm) => vm,
            Err(e) => return self.reply_error(&format!("ERR {e}")),
        };
        let script = if by_sha {
            match cache.get(args.get(1)) {
                Some(s) => s,
                None => return self.reply_error(NOSCRIPT),
            }
        } else {
            match cache.add(args.get(1), |s| compile(&mut vm, s)) {
                Ok(s) => s,
                Err(e) => return self.reply_error(&e),
            }
        };
        let f = match vm.compiled(&script.sha) {
            Some(f) => f,
            None => match vm.compile(&script.sha, "user_script", script.code()) {
                Ok(f) => f,
                Err(e) => {
                    return self
                        .reply_error(&format!("ERR Error compiling script (new function): {e}"))
                }
            },
        };
        let no_writes = script.flags.is_some_and(|f| f.no_writes);
        if read_only_cmd && script.flags.is_some() && !no_writes {
            return self
                .reply_error("ERR Can not execute a script with write flag using *_ro command.");
        }
        let nkeys = numkeys as usize;
        let keys: Vec<&[u8]> = (3..3 + nkeys).map(|i| args.get(i)).collect();
        let argv: Vec<&[u8]> = (3 + nkeys..args.len()).map(|i| args.get(i)).collect();
        let read_only = read_only_cmd || no_writes;
        let mut scope = self.run_scope(&keys, &script.reach, read_only);
        loop {
            let outcome = self.run_script(&vm, &f, &keys, &argv, &mut scope).await;
            script.reach.record(scope.roamed);
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
                Outcome::Failed(failure) => return self.reply_error(&failure.reply(&script.sha)),
            }
        }
    }

    /// Which shards a run locks: every shard for a script that declares no keys, for its
    /// first run, once it has been seen to reach other shards, inside EXEC, and under
    /// `script-shard-locking all`; otherwise the shards of its declared keys.
    fn run_scope(&self, keys: &[&[u8]], reach: &Reach, read_only: bool) -> RunScope {
        let n = self.worker.num_shards();
        let mut declared: Vec<usize> = keys.iter().map(|k| shard_for_key(k, n)).collect();
        declared.sort_unstable();
        declared.dedup();
        let every_shard = declared.is_empty()
            || reach.needs_every_shard()
            || self.tx.is_some()
            || self.worker.cluster.config.get("script-shard-locking") == "all";
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
        }
    }

    /// One run of `f` in its own transaction (or inside the EXEC that runs it).
    async fn run_script(
        &mut self,
        vm: &ScriptVm,
        f: &mlua::Function,
        keys: &[&[u8]],
        argv: &[&[u8]],
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
        let outcome = self.drive(vm, f, keys, argv, scope).await;
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
        f: &mlua::Function,
        keys: &[&[u8]],
        argv: &[&[u8]],
        scope: &mut RunScope,
    ) -> Outcome {
        let lua = vm.lua();
        let mut run = match vm.start(f, keys, argv, true) {
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
                            if let Some(idx) = lookup(&args[0]) {
                                scope.wrote |=
                                    COMMANDS[idx].is_write() && bytes.first() != Some(&b'-');
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

    /// SCRIPT LOAD | EXISTS | FLUSH | KILL | HELP.
    pub(crate) async fn script(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let cluster = self.worker.cluster.clone();
        let cache = &cluster.scripts;
        let arity_ok = match sub.as_slice() {
            b"load" => args.len() == 3,
            b"exists" => args.len() >= 3,
            b"kill" | b"help" => args.len() == 2,
            _ => true,
        };
        if !arity_ok {
            let sub = String::from_utf8_lossy(&sub).into_owned();
            return self.reply_error(&format!(
                "ERR wrong number of arguments for 'script|{sub}' command"
            ));
        }
        match sub.as_slice() {
            b"load" => {
                let worker = self.worker.clone();
                let mut vm = match worker.scripting.lend(cache.generation()).await {
                    Ok(vm) => vm,
                    Err(e) => return self.reply_error(&format!("ERR {e}")),
                };
                match cache.add(args.get(2), |s| compile(&mut vm, s)) {
                    Ok(s) => self.out.bulk(s.sha.as_bytes()),
                    Err(e) => self.reply_error(&e),
                }
            }
            b"exists" => {
                self.out.array(args.len() - 2);
                for sha in args.iter().skip(2) {
                    self.out.int(i64::from(cache.get(sha).is_some()));
                }
            }
            b"flush" => {
                let mode_ok = args.len() == 2
                    || (args.len() == 3 && {
                        let m = args.get(2).to_ascii_lowercase();
                        m == b"sync" || m == b"async"
                    });
                if !mode_ok {
                    return self.reply_error("ERR SCRIPT FLUSH only support SYNC|ASYNC option");
                }
                cache.flush();
                self.out.ok();
            }
            b"kill" => self.reply_error("NOTBUSY No scripts in execution right now."),
            b"help" => {
                self.out.array(SCRIPT_HELP.len());
                for line in SCRIPT_HELP {
                    self.out.simple(line);
                }
            }
            _ => {
                let typed = String::from_utf8_lossy(args.get(1)).into_owned();
                self.reply_error(&format!(
                    "ERR unknown subcommand '{typed}'. Try SCRIPT HELP."
                ));
            }
        }
    }
}

/// Compiles a new script into this thread's VM (the cache keeps only scripts that compile).
fn compile(vm: &mut ScriptVm, s: &Script) -> Result<(), String> {
    vm.compile(&s.sha, "user_script", s.code())
        .map(|_| ())
        .map_err(|e| format!("ERR Error compiling script (new function): {e}"))
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
