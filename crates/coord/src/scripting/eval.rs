//! EVAL, EVALSHA, EVAL_RO, EVALSHA_RO and SCRIPT: the EVAL script cache's commands. Runs go
//! through the shared driver (`super`).

use std::borrow::Cow;

use damselfly_commands::Args;
use damselfly_protocol::number::parse_i64;
use damselfly_scripting::watchdog::RunKind;
use damselfly_scripting::{sha1_hex, Script, ScriptVm};

use super::here::Target;
use super::{script_words, Call};
use crate::connection::Connection;

const NOSCRIPT: &str = "NOSCRIPT No matching script. Please use EVAL.";

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
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO (`spec`, the command's index in the table).
    pub(crate) async fn eval(&mut self, spec: usize, args: &Args<'_>) {
        let name = args.get(0);
        let by_sha = name
            .get(..7)
            .is_some_and(|n| n.eq_ignore_ascii_case(b"evalsha"));
        let read_only_cmd = name.len() > 3 && name[name.len() - 3..].eq_ignore_ascii_case(b"_ro");
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
        let known = if by_sha {
            Cow::Borrowed(args.get(1))
        } else {
            Cow::Owned(sha1_hex(args.get(1)).into_bytes())
        };
        let script = match cache.get(&known) {
            Some(s) => s,
            None if by_sha => return self.reply_error(NOSCRIPT),
            None => {
                let mut vm = match worker.scripting.lend(cache.generation()).await {
                    Ok(vm) => vm,
                    Err(e) => return self.reply_error(&format!("ERR {e}")),
                };
                match cache.add(args.get(1), |s| compile(&mut vm, s)) {
                    Ok(s) => s,
                    Err(e) => return self.reply_error(&e),
                }
            }
        };
        let no_writes = script.flags.is_some_and(|f| f.no_writes);
        if read_only_cmd && script.flags.is_some() && !no_writes {
            return self
                .reply_error("ERR Can not execute a script with write flag using *_ro command.");
        }
        if let Some(refusal) = self.script_start_refusal(script.flags) {
            return self.reply_error(refusal);
        }
        let nkeys = numkeys as usize;
        let words = script_words(args);
        let (keys, argv) = words.split_at(nkeys);
        let read_only = read_only_cmd || no_writes;
        let call = Call {
            spec,
            keys,
            argv,
            kind: RunKind::Eval,
            id: &script.sha,
            read_only,
            reach: &script.reach,
            oom_checked: self.calls_checked_for_oom(script.flags),
        };
        self.run_call(&call, Target::Eval(script.clone()), args)
            .await;
    }

    /// SCRIPT LOAD | EXISTS | FLUSH | KILL | DEBUG | HELP.
    pub(crate) async fn script(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let cluster = self.worker.cluster.clone();
        let cache = &cluster.scripts;
        let arity_ok = match sub.as_slice() {
            b"load" => args.len() == 3,
            b"exists" => args.len() >= 3,
            b"debug" => args.len() == 3,
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
            b"kill" => self.kill_busy(RunKind::Eval),
            // The Lua debugger is not built: NO (the default) is accepted, a session refused.
            b"debug" => match args.get(2).to_ascii_lowercase().as_slice() {
                b"no" => self.out.ok(),
                b"yes" | b"sync" => self.reply_error(
                    "ERR SCRIPT DEBUG is not supported: Damselfly has no Lua debugger",
                ),
                _ => self.reply_error("ERR Use SCRIPT DEBUG YES/SYNC/NO"),
            },
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
        .map_err(|e| format!("ERR Error compiling script (new function): {e}"))
}
