//! FCALL, FCALL_RO and FUNCTION: Redis 7.0's function libraries. The process-wide registry
//! lives in damselfly-scripting; a thread's VM loads a library's code again the first time
//! one of its clients calls into a library version it has not run.
//!
//! Every change to the registry (LOAD, DELETE, FLUSH, RESTORE) is applied on shard 0's
//! thread, which journals the resulting set of libraries and saves them in its snapshot
//! file: one thread orders the changes, the journal and the snapshots' cuts
//! (docs/scripting.md, "Functions").

use std::any::Any;
use std::sync::Arc;

use damselfly_commands::Args;
use damselfly_persistence::dump;
use damselfly_persistence::rdb::WriteOptions;
use damselfly_protocol::number::parse_i64;
use damselfly_scripting::functions::{
    FunctionInfo, FunctionRegistry, Library, NewLibrary, RestorePolicy,
};
use damselfly_scripting::shebang::parse_library;
use damselfly_scripting::vm::Registered;
use damselfly_scripting::watchdog::RunKind;
use damselfly_scripting::ScriptVm;
use damselfly_storage::glob::glob_match;

use super::here::Target;
use super::{script_words, Call};
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::messages::{Payload, ShardMsg};
use crate::worker::Worker;

/// The shard whose thread changes the function registry, journals it and snapshots it.
const FUNCTIONS_SHARD: usize = 0;

const FUNCTION_HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];

impl Connection {
    /// FCALL and FCALL_RO: checks in Redis's order, then the run.
    pub(crate) async fn fcall(&mut self, spec: usize, args: &Args<'_>) {
        let read_only_cmd = args.get(0).eq_ignore_ascii_case(b"fcall_ro");
        let worker = self.worker.clone();
        let Some((lib, index)) = worker.cluster.functions.find(args.get(1)) else {
            return self.reply_error("ERR Function not found");
        };
        let Some(numkeys) = parse_i64(args.get(2)) else {
            return self.reply_error("ERR Bad number of keys provided");
        };
        if numkeys > (args.len() - 3) as i64 {
            return self.reply_error("ERR Number of keys can't be greater than number of args");
        }
        if numkeys < 0 {
            return self.reply_error("ERR Number of keys can't be negative");
        }
        let info = &lib.functions[index];
        if read_only_cmd && !info.flags.no_writes {
            return self
                .reply_error("ERR Can not execute a script with write flag using *_ro command.");
        }
        if let Some(refusal) = self.script_start_refusal(Some(info.flags)) {
            return self.reply_error(refusal);
        }
        let nkeys = numkeys as usize;
        let words = script_words(args);
        let (keys, argv) = words.split_at(nkeys);
        let call = Call {
            spec,
            keys,
            argv,
            kind: RunKind::Function,
            id: &info.name,
            read_only: read_only_cmd || info.flags.no_writes,
            reach: &info.reach,
            oom_checked: self.calls_checked_for_oom(Some(info.flags)),
        };
        self.run_call(&call, Target::Function(lib.clone(), index), args)
            .await;
    }

    /// FUNCTION LOAD | DELETE | LIST | DUMP | RESTORE | FLUSH | STATS | KILL | HELP.
    pub(crate) async fn function(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let n = args.len();
        let arity_ok = match sub.as_slice() {
            b"load" | b"restore" => n >= 3,
            b"delete" => n == 3,
            b"dump" | b"stats" | b"kill" | b"help" => n == 2,
            _ => true,
        };
        if !arity_ok {
            let sub = String::from_utf8_lossy(&sub).into_owned();
            return self.reply_error(&format!(
                "ERR wrong number of arguments for 'function|{sub}' command"
            ));
        }
        match sub.as_slice() {
            b"load" => self.function_load(args).await,
            b"delete" => {
                let name = args.get(2).to_vec();
                let deleted = self
                    .change_functions(move |registry| match registry.delete(&name) {
                        true => Ok(()),
                        false => Err("ERR Library not found".to_string()),
                    })
                    .await;
                match deleted {
                    Ok(()) => self.out.ok(),
                    Err(e) => self.reply_error(&e),
                }
            }
            b"list" => self.function_list(args),
            b"dump" => {
                let payload =
                    functions_payload(&self.worker.cluster, &self.worker.shard.borrow().limits);
                self.out.bulk(&payload);
            }
            b"restore" => self.function_restore(args).await,
            b"flush" => {
                let mode_ok = n == 2
                    || (n == 3 && {
                        let m = args.get(2).to_ascii_lowercase();
                        m == b"sync" || m == b"async"
                    });
                if n > 3 {
                    return self.subcommand_syntax_error(args);
                }
                if !mode_ok {
                    return self.reply_error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option");
                }
                let flushed = self
                    .change_functions(|registry| {
                        registry.flush();
                        Ok(())
                    })
                    .await;
                match flushed {
                    Ok(()) => self.out.ok(),
                    Err(e) => self.reply_error(&e),
                }
            }
            b"stats" => self.function_stats(),
            b"kill" => self.kill_busy(RunKind::Function),
            b"help" => {
                self.out.array(FUNCTION_HELP.len());
                for line in FUNCTION_HELP {
                    self.out.simple(line);
                }
            }
            _ => {
                let typed = String::from_utf8_lossy(args.get(1)).into_owned();
                self.reply_error(&format!(
                    "ERR unknown subcommand '{typed}'. Try FUNCTION HELP."
                ));
            }
        }
    }

    async fn function_load(&mut self, args: &Args<'_>) {
        let mut replace = false;
        let mut at = 2;
        while at < args.len() - 1 {
            if !args.get(at).eq_ignore_ascii_case(b"replace") {
                let opt = String::from_utf8_lossy(args.get(at)).into_owned();
                return self.reply_error(&format!("ERR Unknown option given: {opt}"));
            }
            replace = true;
            at += 1;
        }
        let code = args.get(args.len() - 1);
        let worker = self.worker.clone();
        let mut vm = match worker
            .scripting
            .lend(worker.cluster.scripts.generation())
            .await
        {
            Ok(vm) => vm,
            Err(e) => return self.reply_error(&format!("ERR {e}")),
        };
        let (new, registered) = match compile_library(&vm, code) {
            Ok(r) => r,
            Err(e) => return self.reply_error(&e),
        };
        match self
            .change_functions(move |registry| registry.load(new, replace))
            .await
        {
            Ok(lib) => {
                // Its callbacks are kept here; other threads load the code when called.
                vm.install_library(&lib.name, lib.version, registered);
                self.out.bulk(lib.name.as_bytes());
            }
            Err(e) => self.reply_error(&e),
        }
    }

    fn function_list(&mut self, args: &Args<'_>) {
        let mut with_code = false;
        let mut pattern: Option<&[u8]> = None;
        let mut i = 2;
        while i < args.len() {
            let a = args.get(i);
            if !with_code && a.eq_ignore_ascii_case(b"withcode") {
                with_code = true;
            } else if pattern.is_none() && a.eq_ignore_ascii_case(b"libraryname") {
                if i + 1 >= args.len() {
                    return self.reply_error("ERR library name argument was not given");
                }
                i += 1;
                pattern = Some(args.get(i));
            } else {
                let a = String::from_utf8_lossy(a).into_owned();
                return self.reply_error(&format!("ERR Unknown argument {a}"));
            }
            i += 1;
        }
        let libs: Vec<Arc<Library>> = self
            .worker
            .cluster
            .functions
            .list()
            .into_iter()
            .filter(|l| pattern.is_none_or(|p| glob_match(p, l.name.as_bytes(), true)))
            .collect();
        let out = &mut self.out;
        out.array(libs.len());
        for lib in libs {
            out.map(if with_code { 4 } else { 3 });
            out.bulk(b"library_name");
            out.bulk(lib.name.as_bytes());
            out.bulk(b"engine");
            out.bulk(b"LUA");
            out.bulk(b"functions");
            out.array(lib.functions.len());
            for f in &lib.functions {
                out.map(3);
                out.bulk(b"name");
                out.bulk(f.name.as_bytes());
                out.bulk(b"description");
                match &f.description {
                    Some(d) => out.bulk(d),
                    None => out.null(),
                }
                out.bulk(b"flags");
                let names = f.flags.names();
                out.set(names.len());
                for name in names {
                    out.simple(name);
                }
            }
            if with_code {
                out.bulk(b"library_code");
                out.bulk(&lib.code);
            }
        }
    }

    async fn function_restore(&mut self, args: &Args<'_>) {
        if args.len() > 4 {
            return self.subcommand_syntax_error(args);
        }
        let policy = if args.len() == 4 {
            match args.get(3).to_ascii_lowercase().as_slice() {
                b"flush" => RestorePolicy::Flush,
                b"append" => RestorePolicy::Append,
                b"replace" => RestorePolicy::Replace,
                _ => {
                    return self.reply_error(
                        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                    )
                }
            }
        } else {
            RestorePolicy::Append
        };
        let codes = match dump::decode_functions(args.get(2)) {
            Ok(codes) => codes,
            Err(e) => return self.reply_error(e),
        };
        let worker = self.worker.clone();
        let vm = match worker
            .scripting
            .lend(worker.cluster.scripts.generation())
            .await
        {
            Ok(vm) => vm,
            Err(e) => return self.reply_error(&format!("ERR {e}")),
        };
        let mut libs = Vec::with_capacity(codes.len());
        for code in codes {
            match compile_library(&vm, &code) {
                Ok((lib, _)) => libs.push(lib),
                Err(e) => return self.reply_error(&e),
            }
        }
        drop(vm);
        match self
            .change_functions(move |registry| registry.restore(libs, policy))
            .await
        {
            Ok(()) => self.out.ok(),
            Err(e) => self.reply_error(&e),
        }
    }

    /// Applies `change` to the registry on shard 0's thread (see the module's doc); its
    /// result, or Redis's error reply.
    async fn change_functions<T: Send + 'static>(
        &self,
        change: impl FnOnce(&FunctionRegistry) -> Result<T, String> + Send + 'static,
    ) -> Result<T, String> {
        let f =
            Box::new(move |w: &Worker| Box::new(w.change_functions(change)) as Box<dyn Any + Send>);
        let answer = self
            .worker
            .ask(FUNCTIONS_SHARD, |origin, slot| ShardMsg::Run {
                f,
                origin,
                slot,
            })
            .await;
        match answer {
            Some(Payload::Hop { value, .. }) => value
                .downcast::<Result<T, String>>()
                .map_or_else(|_| Err("ERR shard unavailable".to_string()), |r| *r),
            _ => Err("ERR shard unavailable".to_string()),
        }
    }

    /// Redis's addReplySubcommandSyntaxError, naming the subcommand as typed.
    fn subcommand_syntax_error(&mut self, args: &Args<'_>) {
        let typed = String::from_utf8_lossy(args.get(1)).into_owned();
        self.reply_error(&format!(
            "ERR unknown subcommand or wrong number of arguments for '{typed}'. Try FUNCTION HELP."
        ));
    }

    fn function_stats(&mut self) {
        let running = self.worker.cluster.busy.runs().into_iter().next();
        if running.as_ref().is_some_and(|r| r.kind == RunKind::Eval) {
            return self.reply_error(super::BUSY_EVAL);
        }
        let (libraries, functions) = self.worker.cluster.functions.counts();
        let out = &mut self.out;
        out.map(2);
        out.bulk(b"running_script");
        match running {
            Some(run) => {
                out.map(3);
                out.bulk(b"name");
                out.bulk(run.name.as_bytes());
                out.bulk(b"command");
                out.array(run.command.spans.len());
                for word in run.command.iter() {
                    out.bulk(word);
                }
                out.bulk(b"duration_ms");
                out.int(i64::try_from(run.elapsed().as_millis()).unwrap_or(i64::MAX));
            }
            None => out.null(),
        }
        out.bulk(b"engines");
        out.map(1);
        out.bulk(b"LUA");
        out.map(2);
        out.bulk(b"libraries_count");
        out.int(libraries as i64);
        out.bulk(b"functions_count");
        out.int(functions as i64);
    }
}

/// Checks a library's code as FUNCTION LOAD does: its header, then its code run in `vm`.
/// Returns the library for the registry and the callbacks it registered.
fn compile_library(vm: &ScriptVm, code: &[u8]) -> Result<(NewLibrary, Vec<Registered>), String> {
    let header = parse_library(code)?;
    let registered = vm.load_library(&code[header.code_start..])?;
    if registered.is_empty() {
        return Err("ERR No functions registered".into());
    }
    let functions = registered
        .iter()
        .map(|r| FunctionInfo {
            name: r.name.clone(),
            description: r.description.clone(),
            flags: r.flags,
            reach: Default::default(),
        })
        .collect();
    let lib = NewLibrary {
        name: header.name,
        code: code.to_vec(),
        code_start: header.code_start,
        functions,
    };
    Ok((lib, registered))
}

/// Runs `lib`'s code in this thread's VM and keeps its callbacks.
pub(super) fn load_into(vm: &mut ScriptVm, lib: &Library) -> Result<(), String> {
    let registered = vm.load_library(&lib.code[lib.code_start..])?;
    vm.install_library(&lib.name, lib.version, registered);
    Ok(())
}

impl Worker {
    /// Shard 0's side of a registry change: applies it and, when it succeeded, journals the
    /// whole resulting set of libraries (as FUNCTION RESTORE ... FLUSH, so replaying the
    /// last such record rebuilds the registry whatever came before it).
    fn change_functions<T>(
        &self,
        change: impl FnOnce(&FunctionRegistry) -> Result<T, String>,
    ) -> Result<T, String> {
        let out = change(&self.cluster.functions)?;
        if self.journaling() {
            let payload = functions_payload(&self.cluster, &self.shard.borrow().limits);
            self.journal_words(0, &[b"FUNCTION", b"RESTORE", &payload, b"FLUSH"]);
        }
        Ok(out)
    }
}

/// Every library's code as a FUNCTION DUMP payload.
fn functions_payload(cluster: &Cluster, limits: &damselfly_storage::EncodingLimits) -> Vec<u8> {
    let libs = cluster.functions.list();
    let codes: Vec<&[u8]> = libs.iter().map(|l| l.code.as_slice()).collect();
    dump::encode_functions(&codes, &WriteOptions::for_limits(limits))
}

/// Puts the libraries recovered at start-up (`codes`, from a snapshot, a Redis dump.rdb or
/// the journal) in the registry, checking each as FUNCTION LOAD does.
pub fn restore_functions(cluster: &Cluster, codes: Vec<Vec<u8>>) -> Result<(), String> {
    if codes.is_empty() {
        return Ok(());
    }
    let vm = ScriptVm::new(cluster.scripts.generation()).map_err(|e| e.to_string())?;
    let mut libs = Vec::with_capacity(codes.len());
    for code in codes {
        let (lib, _) = compile_library(&vm, &code)
            .map_err(|e| format!("cannot load a saved function library: {e}"))?;
        libs.push(lib);
    }
    cluster.functions.restore(libs, RestorePolicy::Flush)
}
