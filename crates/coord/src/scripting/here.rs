//! Runs confined to one shard, executed in one go on that shard's thread: the usual case of a
//! script whose keys (declared or not) share a shard. The connection puts the run in its
//! round's batch for that shard (`ExecBatch::push_run`), in its command's place; the shard
//! runs it as a transaction of its own holding the whole shard, with that thread's VM,
//! executing each `redis.call` directly on the shard from inside the script (`ShardCalls`,
//! damselfly_scripting::call_now), so a call costs no message, no wait and no trip out of
//! Lua. A call that needs any other shard, or a command that does not run on a shard
//! (SELECT, keyless commands, whole-keyspace ones), takes back what the run wrote (the
//! shard's undo log) and hands the run back with the commands after it in the batch, which
//! have not run: the connection runs it the general way (`super`), locking every shard, and
//! then sends the rest again (`Connection::flush`). Until a batched run is known to have
//! stayed on its shard, the connection runs nothing for any other shard
//! (`Connection::after_batched_runs`), so a run handed back is never overtaken.
//!
//! When the run is the client's whole round and its shard is another thread's, that shard
//! also writes the reply to the client's socket, as it does for a plain command
//! (crates/coord/src/direct_reply.rs): the client's thread is not woken for the reply. A run
//! the shard hands back then comes back unanswered, and the connection runs it the general
//! way when it settles the reply (`run_script_again`). Either way the shard counts the call
//! in its statistics (slow log, latency, errors), as it counts a plain command of a batch.

use damselfly_storage::tracking::Caller;
use std::sync::Arc;

use damselfly_commands::slowlog::{self, SlowCall};
use damselfly_commands::table::{Handler, COMMANDS};
use damselfly_commands::{lookup, Args};
use damselfly_protocol::ReplyBuf;
use damselfly_scripting::call_now::{with_calls_now, CallNow};
use damselfly_scripting::declared::{key_calls, library_key_calls, CallArg, KeyedCall};
use damselfly_scripting::functions::Library;
use damselfly_scripting::vm::Callable;
use damselfly_scripting::watchdog::{self, RunWatch};
use damselfly_scripting::{Answer, Reach, Script, ScriptVm, Words};

use super::{call_answer, check_call_here, next_call, CallRules, Failure, Next, Outcome};
use crate::acl_family::ScriptAcl;
use crate::connection::{Connection, PendingSlot};
use crate::maxmemory::CallOom;
use crate::messages::RemoteCmd;
use crate::worker::Worker;

/// What a run executes: an EVAL script or a library's function.
#[derive(Clone)]
pub(super) enum Target {
    Eval(Arc<Script>),
    Function(Arc<Library>, usize),
}

impl Target {
    /// What its errors name: the script's SHA or the function's name.
    fn id(&self) -> &str {
        match self {
            Target::Eval(script) => &script.sha,
            Target::Function(lib, index) => &lib.functions[*index].name,
        }
    }

    /// Where its runs' keys were found.
    fn reach(&self) -> &Reach {
        match self {
            Target::Eval(script) => &script.reach,
            Target::Function(lib, index) => &lib.functions[*index].reach,
        }
    }

    /// Whether its source shows every call naming only declared keys, so that a run on
    /// its declared keys' shard never needs another (`names_only_declared_keys`).
    pub(super) fn stays_on_its_shard(&self) -> bool {
        match self {
            Target::Eval(script) => *script
                .names_only_declared_keys
                .get_or_init(|| names_only_declared_keys(key_calls(script.code()))),
            Target::Function(lib, _) => *lib.names_only_declared_keys.get_or_init(|| {
                names_only_declared_keys(library_key_calls(&lib.code[lib.code_start..]))
            }),
        }
    }
}

/// Whether every one of `calls` (damselfly_scripting::declared; None: the source could not
/// be read) names only declared keys, with a command that runs whole on its keys' shard
/// and whose keys are given by position: then a run whose declared keys share a shard
/// never needs another one, and cannot be handed back.
fn names_only_declared_keys(calls: Option<Vec<KeyedCall>>) -> bool {
    let Some(calls) = calls else {
        return false;
    };
    calls.iter().all(|call| {
        let Some(spec) = call
            .command
            .as_deref()
            .and_then(lookup)
            .map(|i| &COMMANDS[i])
        else {
            return false;
        };
        // An argument list that may expand leaves the count of words unknown: then only
        // keys at fixed positions before its last argument are known.
        if !spec.always_runs_on_its_keys_shard() || (call.open_ended && spec.last_key < 0) {
            return false;
        }
        let known = call.args.len() - usize::from(call.open_ended);
        let mut positions = spec.fixed_key_positions(call.args.len() + 1).peekable();
        positions.peek().is_some()
            && positions.all(|p| p <= known && call.args[p - 1] == CallArg::DeclaredKey)
    })
}

/// One run to execute on a shard's thread.
pub(super) struct HereJob {
    /// The command's index in the command table (EVALSHA, FCALL, ...).
    pub spec: usize,
    pub target: Target,
    /// How many keys it declares: they, then its arguments, follow the command's first three
    /// words in `watch.command` (`EVALSHA sha numkeys`, `FCALL name numkeys`).
    pub nkeys: usize,
    /// The client's database and protocol.
    pub db: usize,
    pub resp3: bool,
    pub read_only: bool,
    pub strict_keys: Option<Vec<Vec<u8>>>,
    /// Its calls are checked against `maxmemory` (`CallOom`).
    pub oom_checked: bool,
    pub watch: Arc<RunWatch>,
    /// The script cache generation (which VM the thread must use).
    pub generation: u64,
    /// The client running it: what its calls read is tracked for it.
    pub caller: Caller,
    /// Its user's permissions, for a user not allowed everything.
    pub acl: Option<ScriptAcl>,
}

pub(super) enum HereResult {
    /// The whole reply, in the client's protocol.
    Reply(ReplyBuf),
    /// It needed another shard (or a command that runs elsewhere): nothing it did remains.
    Elsewhere,
    /// The thread's VM is held by a run waiting for other shards.
    VmBusy,
}

impl Worker {
    /// Runs `job` here, in one go (the caller holds the whole shard in a transaction).
    pub(super) fn run_script_here(&self, job: HereJob) -> HereResult {
        // A run that cannot be handed back may not be turned away either, and keeps no undo
        // log: nothing it does is ever taken back.
        let may_hand_back = !job.target.stays_on_its_shard();
        let mut vm = if !may_hand_back {
            match self.scripting.lend_now(job.generation) {
                Ok(vm) => vm,
                Err(e) => {
                    let mut reply = ReplyBuf::new(job.resp3);
                    reply.error(&format!("ERR {e}"));
                    return HereResult::Reply(reply);
                }
            }
        } else {
            let Some(vm) = self.scripting.try_lend(job.generation) else {
                return HereResult::VmBusy;
            };
            vm
        };
        let (vm, f) = match resolve(&mut vm, &job.target) {
            Ok(found) => found,
            Err(e) => {
                let mut reply = ReplyBuf::new(job.resp3);
                reply.error(&e);
                return HereResult::Reply(reply);
            }
        };
        let _watching = watchdog::watch(job.watch.clone());
        if may_hand_back && !job.read_only {
            self.keep_undo();
        }
        let command = &job.watch.command;
        let keys = command.iter().skip(3).take(job.nkeys);
        let argv = command.iter().skip(3 + job.nkeys);
        let as_globals = matches!(job.target, Target::Eval(_));
        let mut calls = ShardCalls {
            worker: self,
            job: &job,
            oom: CallOom::new(job.oom_checked),
            may_hand_back,
        };
        let (outcome, elsewhere) = with_calls_now(&mut calls, || {
            match vm.start(f, keys, argv, as_globals, true) {
                Ok(mut run) => match next_call(&mut run, vm.lua(), None) {
                    Next::End(outcome) => Some(outcome),
                    // Its calls do not yield (`calls_now`); one that did goes the general way.
                    Next::Call { .. } => None,
                },
                Err(e) => Some(Outcome::Failed(Failure::plain(&format!(
                    "ERR {}",
                    damselfly_scripting::vm::lua_text(e)
                )))),
            }
        });
        let outcome = if elsewhere { None } else { outcome };
        let mut reply = ReplyBuf::new(job.resp3);
        match outcome {
            Some(Outcome::Done(done)) => done.write(&mut reply),
            Some(Outcome::Failed(failure)) => reply.error(&failure.reply(job.target.id())),
            None | Some(Outcome::Restart) if may_hand_back => {
                self.roll_back();
                return HereResult::Elsewhere;
            }
            // Not reached: such a run's calls are answered here (`ShardCalls`).
            None | Some(Outcome::Restart) => reply.error(OFF_SHARD),
        }
        self.end_undo(self.running_tx.get());
        HereResult::Reply(reply)
    }

    /// Runs `job` as `run_script_here` does, as command `index` of a batch
    /// (`ExecBatch::push_run`): its reply goes into the batch's, and the call is counted
    /// here as the client's thread would count it. Err with its watch when it could not
    /// finish here (module doc).
    fn run_batched(
        &self,
        job: HereJob,
        index: usize,
        reply: &mut ReplyBuf,
        slow: &mut Vec<SlowCall>,
    ) -> Result<(), Arc<RunWatch>> {
        let timer = self.start_call_timer();
        let (spec, watch, target) = (job.spec, job.watch.clone(), job.target.clone());
        let ran = match self.run_script_here(job) {
            HereResult::Reply(ran) => ran,
            HereResult::Elsewhere => {
                target.reach().record(true);
                self.stats.borrow_mut().script_restarts += 1;
                return Err(watch);
            }
            HereResult::VmBusy => return Err(watch),
        };
        target.reach().record(false);
        if let Some(duration) = self.record_call(spec, timer, &ran, 0) {
            let command = &watch.command;
            slow.push(SlowCall {
                index,
                time: slowlog::unix_time(),
                duration,
                argv: slowlog::entry_argv(&Args::new(&command.data, &command.spans)),
            });
        }
        reply.buf.extend_from_slice(&ran.buf);
        Ok(())
    }
}

/// A here-run's calls, executed on this shard as the script makes them
/// (damselfly_scripting::call_now).
struct ShardCalls<'a> {
    worker: &'a Worker,
    job: &'a HereJob,
    oom: CallOom,
    /// False for a run whose source names only declared keys (`stays_on_its_shard`).
    may_hand_back: bool,
}

/// What a call gets that needs another shard in a run that may not be handed back. The
/// reading of the source (`names_only_declared_keys`) rules that out; were it wrong, the
/// call fails rather than the run running twice (it keeps no undo log).
const OFF_SHARD: &str = "ERR Script attempted to access a key outside its declared keys' shard";

impl CallNow for ShardCalls<'_> {
    /// None when the call needs another shard, or a command that does not run on one, and
    /// the run may be handed back.
    fn call(&mut self, resp3: bool, words: &Words) -> Option<Answer> {
        let (worker, job) = (self.worker, self.job);
        let args = Args::new(&words.data, &words.spans);
        let rules = CallRules {
            read_only: job.read_only,
            strict_keys: job.strict_keys.as_deref(),
            oom: &mut self.oom,
            acl: job.acl.as_ref(),
        };
        let reply = match check_call_here(worker, job.db, &args, rules) {
            Err(refusal) => Err(refusal),
            Ok((_, false)) if self.may_hand_back => return None,
            Ok((_, false)) => {
                debug_assert!(
                    false,
                    "a run whose source names only declared keys left its shard"
                );
                Err(OFF_SHARD)
            }
            Ok((idx, true)) => {
                let mut reply = ReplyBuf::new(resp3);
                worker.exec(idx, job.db, &args, &mut reply, true, job.caller);
                Ok((idx, reply.buf))
            }
        };
        Some(call_answer(reply, &job.watch, &mut false))
    }
}

/// The function to run, compiling or loading it into this thread's VM when it has not run
/// here before; with the VM, borrowed for as long as the function.
pub(super) fn resolve<'v>(
    vm: &'v mut ScriptVm,
    target: &Target,
) -> Result<(&'v ScriptVm, Callable<'v>), String> {
    match target {
        Target::Eval(script) => {
            if vm.compiled(&script.sha).is_none() {
                vm.compile(&script.sha, "user_script", script.code())
                    .map_err(|e| format!("ERR Error compiling script (new function): {e}"))?;
            }
            let vm: &ScriptVm = vm;
            let f = vm.compiled(&script.sha);
            f.map(|f| (vm, f))
                .ok_or_else(|| "ERR Error compiling script (new function)".to_string())
        }
        Target::Function(lib, index) => {
            let name = &lib.functions[*index].name;
            if !vm.has_library(lib.version) {
                super::function_family::load_into(vm, lib)?;
            }
            let vm: &ScriptVm = vm;
            let f = vm.library_function(lib.version, *index, name);
            f.map(|f| (vm, f))
                .ok_or_else(|| "ERR Function not found".to_string())
        }
    }
}

impl Connection {
    /// Puts `job` in the round's batch for `shard`, in its command's place (module doc).
    pub(super) fn batch_run(&mut self, shard: usize, job: HereJob) {
        let cmd = RemoteCmd {
            spec: job.spec,
            db: job.db,
            resp3: job.resp3,
            record: true,
            caller: job.caller,
            first: 0,
            nargs: 0,
        };
        let writes = !job.read_only;
        let watch = job.watch.clone();
        if !job.target.stays_on_its_shard() {
            self.runs_batched_for = Some(shard);
        }
        let batch = &mut self.batches[shard];
        batch.push_run(
            cmd,
            watch.command.iter(),
            writes,
            Box::new(move |w: &Worker, index, reply, slow| w.run_batched(job, index, reply, slow)),
        );
        self.pending.push(PendingSlot {
            at: self.out.buf.len(),
            shard,
            index: batch.cmds.len() - 1,
        });
        self.recorded_by_shard = true;
    }

    /// Runs a script its shard handed back (module doc) here, the general way, as the
    /// command the client sent (its watch keeps it).
    pub(crate) async fn run_script_again(&mut self, watch: Arc<RunWatch>) {
        let command = &watch.command;
        let args = Args::new(&command.data, &command.spans);
        let Some(spec) = lookup(args.get(0)) else {
            return;
        };
        let Handler::Coord(cmd) = COMMANDS[spec].handler else {
            return;
        };
        // Not a round's only command any more: its reply is awaited here.
        let round_len = std::mem::replace(&mut self.round_len, 0);
        let again = std::mem::replace(&mut self.running_handed_back, true);
        self.run_coordinator_recorded(spec, cmd, &args).await;
        self.running_handed_back = again;
        self.round_len = round_len;
    }
}

#[cfg(test)]
mod tests {
    use super::names_only_declared_keys;
    use damselfly_scripting::declared::{key_calls, library_key_calls};

    #[test]
    fn scripts_whose_calls_name_only_declared_keys() {
        for stays in [
            "return redis.call('set', KEYS[1], ARGV[1])",
            "return redis.call('GET', KEYS[1])",
            "redis.call('mset', KEYS[1], ARGV[1], KEYS[2], ARGV[2])",
            "return redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')",
            // Arguments after the keys may expand: the keys' positions are fixed.
            "return redis.call('rpush', KEYS[1], unpack(ARGV))",
            "return redis.pcall('del', KEYS[1], KEYS[2])",
            "return redis.sha1hex(ARGV[1])",
        ] {
            assert!(
                names_only_declared_keys(key_calls(stays.as_bytes())),
                "{stays}"
            );
        }
        for roams in [
            "return redis.call('get', ARGV[1])",
            "return redis.call('mset', KEYS[1], ARGV[1], ARGV[2], ARGV[3])",
            // DEL's keys run to the end, which `unpack` leaves open.
            "return redis.call('del', KEYS[1], unpack(ARGV))",
            "return redis.call(ARGV[1], KEYS[1])",
            "return redis.call('nosuchcommand', KEYS[1])",
            // Keyless, whole-keyspace, or keys not given by position.
            "return redis.call('publish', 'c', 'm')",
            "return redis.call('select', '1')",
            "return redis.call('dbsize')",
            "return redis.call('sort', KEYS[1], 'BY', 'w_*')",
            "return redis.call('zunionstore', KEYS[1], 1, KEYS[2])",
            "local k = KEYS[1] return redis.call('get', k)",
            "KEYS[1] = ARGV[1] return redis.call('get', KEYS[1])",
        ] {
            assert!(
                !names_only_declared_keys(key_calls(roams.as_bytes())),
                "{roams}"
            );
        }
        let library = |code: &str| names_only_declared_keys(library_key_calls(code.as_bytes()));
        assert!(library(
            "redis.register_function('setter', function(keys, args)
               return redis.call('set', keys[1], args[1]) end)"
        ));
        assert!(!library(
            "redis.register_function('setter', function(keys, args)
               return redis.call('set', args[1], keys[1]) end)"
        ));
    }
}
