//! One thread's Lua VM: Redis's script environment (prelude.lua), the scripts compiled on
//! this thread, and the run driver's steps. A run is a coroutine; `redis.call` yields the
//! command to the caller (`Run::resume` returns `Step::Request`), which executes it wherever
//! its key lives, possibly after awaiting another shard, and resumes the run with the reply.
//! So a script can span shards without blocking its thread.
//!
//! A run is started and resumed through Lua's C API, one protected call per step: each call
//! through mlua's safe API allocates two C closures in Lua 5.1, and with the run's tables and
//! coroutines that garbage was a quarter of a one-key script's CPU. The steps go through
//! `protected` instead, which allocates nothing: starting a run also runs it to its first
//! stop, each resume answers one request and runs to the next, and the value is written as
//! the reply from where the run left it. For the same reason a coroutine that finished
//! cleanly is kept and reused by the next run, and a run's value stays on its coroutine
//! until it is written (`Done`).

use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::rc::Rc;

use damselfly_protocol::{ReplyBuf, Span};
use mlua::{ffi, ChunkMode, Function, Lua, LuaOptions, RegistryKey, StdLib, Table, Thread, Value};

use crate::call_now;
use crate::convert::{
    push_bytes, push_reply, string_at, wrap, write_data_table, write_error_or_status, write_scalar,
    write_value, FieldNames,
};
use crate::protected::Protected;
use crate::tailcall::without_tail_calls;
use crate::{random, watchdog, ScriptFlags};

/// Memory one thread's Lua states together may use: each of its VMs (`VmSlot`) gets an
/// equal share, beyond which allocations fail inside the script.
pub const THREAD_MEMORY_LIMIT: usize = 1 << 30;

/// What the server answers `redis.REDIS_VERSION` with.
pub const REDIS_VERSION: &str = "7.0.15";
const REDIS_VERSION_NUM: i64 = 0x07_00_0f;

/// A request a run makes to its driver.
#[derive(Debug)]
pub enum Request {
    /// `redis.call` (`raise`) or `redis.pcall` of a command, under script protocol `resp`.
    Call {
        raise: bool,
        resp3: bool,
        words: Words,
    },
    /// `redis.acl_check_cmd`.
    AclCheck { words: Words },
}

/// A request's arguments laid out as a parsed command's are (one buffer, a span each), so
/// the driver runs them as they come.
#[derive(Debug, Default)]
pub struct Words {
    pub data: Vec<u8>,
    pub spans: Vec<Span>,
}

impl Words {
    pub fn from_args<'a>(args: impl Iterator<Item = &'a [u8]> + Clone) -> Words {
        let mut words = Words {
            data: Vec::with_capacity(args.clone().map(<[u8]>::len).sum()),
            spans: Vec::with_capacity(args.clone().count()),
        };
        words.refill(args);
        words
    }

    /// Replaces the words with `args`, in the memory the old ones had.
    pub fn refill<'a>(&mut self, args: impl Iterator<Item = &'a [u8]>) {
        self.data.clear();
        self.spans.clear();
        for arg in args {
            Span::push_arg(&mut self.data, &mut self.spans, arg);
        }
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &[u8]> + Clone {
        self.spans
            .iter()
            .map(|s| &self.data[s.start..s.start + s.len])
    }

    /// The first word (the command's name); empty when there is none.
    pub fn first(&self) -> &[u8] {
        self.spans
            .first()
            .map_or(&[][..], |s| &self.data[s.start..s.start + s.len])
    }
}

/// The driver's answer to a run's request, which the run's `redis.call` (or `pcall`,
/// `acl_check_cmd`) returns.
pub enum Answer {
    /// A command's encoded reply: the script gets `(true, value)`, or `(false, {err = ...})`
    /// for an error reply.
    Reply(Vec<u8>),
    /// A refusal: `(false, {err = text})`.
    Error(&'static str),
    /// `(true, true)`: an allowed `redis.acl_check_cmd`.
    Allowed,
}

/// How a run stopped.
pub enum Step {
    /// It asks for a command; resume it with the reply.
    Request(Request),
    /// An argument of `redis.call` was neither a string nor a number, or there was none:
    /// resume with this error (Redis's text) as the call's reply.
    BadRequest { raise: bool, error: &'static str },
    /// It returned a value, which `Done` writes as the reply.
    Done(Done),
    /// It raised an error: the error table, and the user-code frame it came from.
    Failed {
        error: Value,
        source: Option<String>,
        line: Option<i64>,
    },
}

/// A function a library registered while it loaded. The callback is kept in the Lua
/// registry: a `Function` holds a slot of mlua's reference stack, which Lua 5.1 caps at
/// 8000, and a library may register more functions than that.
pub struct Registered {
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: ScriptFlags,
    pub callback: RegistryKey,
}

/// A library as this VM loaded it: its callbacks with their names, in the order it
/// registered them (the order of the registry's `Library::functions`).
struct LoadedLibrary {
    name: String,
    functions: Vec<(String, RegistryKey)>,
}

pub struct ScriptVm {
    lua: Lua,
    env: Table,
    /// What every run shares: the prelude's `body` and `failure`, idle coroutines.
    runs: Rc<RunKit>,
    /// The environment of function libraries (prelude.lua).
    function_env: Table,
    load_library: Function,
    /// Compiled scripts by id (a SHA for EVAL scripts).
    compiled: HashMap<String, RegistryKey, ahash::RandomState>,
    /// Libraries loaded here, by registry version (unique across the process's life, so an
    /// FCALL finds its function by a number and an index instead of two names).
    libraries: HashMap<u64, LoadedLibrary, ahash::RandomState>,
    /// The script cache generation this VM was built for (SCRIPT FLUSH starts a new VM).
    pub generation: u64,
}

impl ScriptVm {
    pub fn new(generation: u64) -> mlua::Result<ScriptVm> {
        // The debug library is loaded for the prelude only (it removes it from the globals).
        let lua = unsafe {
            Lua::unsafe_new_with(
                StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::DEBUG,
                LuaOptions::default(),
            )
        };
        lua.set_memory_limit(THREAD_MEMORY_LIMIT / crate::slot::VMS_PER_THREAD)?;
        let prims = lua.create_table()?;
        prims.set("CALL", lua.create_table()?)?;
        prims.set(
            "sha1hex",
            lua.create_function(|_, s: mlua::String| Ok(crate::cache::sha1_hex(&s.as_bytes())))?,
        )?;
        prims.set(
            "log",
            lua.create_function(|_, (level, text): (i64, mlua::String)| {
                let text = String::from_utf8_lossy(&text.as_bytes()).into_owned();
                match level {
                    0 => tracing::debug!(target: "script", "{text}"),
                    1 | 2 => tracing::info!(target: "script", "{text}"),
                    _ => tracing::warn!(target: "script", "{text}"),
                }
                Ok(())
            })?,
        )?;
        prims.set("random", lua.create_function(|_, ()| Ok(random::next()))?)?;
        prims.set(
            "randomseed",
            lua.create_function(|_, seed: f64| {
                random::seed(seed as i64 as i32);
                Ok(())
            })?,
        )?;
        prims.set("bit", crate::bit::library(&lua)?)?;
        prims.set("cjson", crate::cjson::library(&lua)?)?;
        prims.set("cmsgpack", crate::cmsgpack::library(&lua)?)?;
        prims.set("struct", crate::struct_lib::library(&lua)?)?;
        prims.set("version", REDIS_VERSION)?;
        prims.set("version_num", REDIS_VERSION_NUM)?;
        prims.set(
            "stopping",
            lua.create_function(|_, ()| Ok(watchdog::stopping() || call_now::stopped()))?,
        )?;
        // SAFETY: call_now is a C function following Lua 5.1's calling convention.
        prims.set("call_now", unsafe {
            lua.create_c_function(call_now::call_now)?
        })?;
        let (env, body, failure, call_tag, function_env, load_library): (
            Table,
            Function,
            Function,
            Table,
            Table,
            Function,
        ) = lua
            .load(include_str!("prelude.lua"))
            .set_name("=prelude")
            .call(prims)?;
        watchdog::install(&lua)?;
        let protected = Protected::new(&lua)?;
        let (field_names, field_name_keys) = FieldNames::new(&lua)?;
        let runs = Rc::new(RunKit {
            body: lua.create_registry_value(body)?,
            failure,
            call_tag: call_tag.to_pointer(),
            _call_tag: call_tag,
            idle: RefCell::new(Vec::new()),
            protected,
            field_names,
            _field_name_keys: field_name_keys,
        });
        Ok(ScriptVm {
            lua,
            env,
            runs,
            function_env,
            load_library,
            compiled: HashMap::default(),
            libraries: HashMap::default(),
            generation,
        })
    }

    /// Runs a library's code (after its `#!lua` line) as FUNCTION LOAD does: with only the
    /// load API as globals, under the load time limit. Returns what it registered, or the
    /// error reply's text.
    pub fn load_library(&self, code: &[u8]) -> Result<Vec<Registered>, String> {
        let f = self
            .compile_in("user_function", code, &self.function_env)
            .map_err(|e| format!("ERR Error compiling function: {e}"))?;
        let watch = watchdog::RunWatch::new(
            watchdog::RunKind::Load,
            String::new(),
            Words::default(),
            watchdog::LOAD_TIME_LIMIT,
            Default::default(),
        );
        let _watching = watchdog::watch(watch);
        let (ok, result): (bool, Value) = self
            .load_library
            .call(f)
            .map_err(|e| format!("ERR Error registering functions: ERR {}", lua_text(e)))?;
        if !ok {
            let text = match result {
                Value::String(s) => s.to_string_lossy(),
                _ => String::new(),
            };
            return Err(format!("ERR Error registering functions: {text}"));
        }
        let Value::Table(list) = result else {
            return Ok(Vec::new());
        };
        let mut out = Vec::new();
        for entry in list.sequence_values::<Table>() {
            let entry = entry.map_err(lua_text)?;
            let mut flags = ScriptFlags::default();
            for f in entry
                .get::<Table>("flags")
                .map_err(lua_text)?
                .sequence_values::<mlua::String>()
            {
                flags.set(&f.map_err(lua_text)?.as_bytes());
            }
            out.push(Registered {
                name: entry.get("name").map_err(lua_text)?,
                description: entry
                    .get::<Option<mlua::String>>("description")
                    .map_err(lua_text)?
                    .map(|d| d.as_bytes().to_vec()),
                flags,
                callback: self
                    .lua
                    .create_registry_value(entry.get::<Function>("callback").map_err(lua_text)?)
                    .map_err(lua_text)?,
            });
        }
        Ok(out)
    }

    /// Keeps the callbacks of library `name` at registry `version` (replacing older ones).
    pub fn install_library(&mut self, name: &str, version: u64, functions: Vec<Registered>) {
        self.libraries.retain(|_, loaded| loaded.name != name);
        let functions = functions
            .into_iter()
            .map(|f| (f.name, f.callback))
            .collect();
        let name = name.to_string();
        self.libraries
            .insert(version, LoadedLibrary { name, functions });
    }

    /// Whether this VM loaded the library at registry `version`.
    pub fn has_library(&self, version: u64) -> bool {
        self.libraries.contains_key(&version)
    }

    /// Function `function`, the `index`th the library at registry `version` registered, if
    /// this VM loaded that version. (Found by name should the library have registered its
    /// functions in another order here.)
    pub fn library_function(
        &self,
        version: u64,
        index: usize,
        function: &str,
    ) -> Option<Callable<'_>> {
        let functions = &self.libraries.get(&version)?.functions;
        functions
            .get(index)
            .filter(|(name, _)| name == function)
            .or_else(|| functions.iter().find(|(name, _)| name == function))
            .map(|(_, key)| Callable(key))
    }

    pub fn lua(&self) -> &Lua {
        &self.lua
    }

    /// Bytes the Lua state uses (INFO `used_memory_lua`).
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Compiles `code` as chunk `chunk` (`user_script`, `user_function`) into the protected
    /// environment, keeping it under `id`. The error is Lua's message, e.g.
    /// `user_script:1: '=' expected near 'n'`.
    pub fn compile(&mut self, id: &str, chunk: &str, code: &[u8]) -> Result<(), String> {
        let f = self.load(chunk, code)?;
        let key = self.lua.create_registry_value(f).map_err(lua_text)?;
        self.compiled.insert(id.to_string(), key);
        Ok(())
    }

    /// Compiles without keeping the result (a syntax check, or a library body run once).
    pub fn load(&self, chunk: &str, code: &[u8]) -> Result<Function, String> {
        self.compile_in(chunk, code, &self.env)
    }

    fn compile_in(&self, chunk: &str, code: &[u8], env: &Table) -> Result<Function, String> {
        let compiled = self
            .lua
            .load(code)
            .set_name(format!("@{chunk}"))
            .into_function()
            .map_err(lua_text)?;
        let f = match without_tail_calls(&compiled.dump(false)) {
            Some(patched) => self
                .lua
                .load(&patched)
                .set_mode(ChunkMode::Binary)
                .into_function()
                .map_err(lua_text)?,
            None => compiled,
        };
        f.set_environment(env.clone()).map_err(lua_text)?;
        Ok(f)
    }

    /// A script compiled on this thread before.
    pub fn compiled(&self, id: &str) -> Option<Callable<'_>> {
        self.compiled.get(id).map(Callable)
    }

    /// Starts a run of `f` with `KEYS` and `ARGV` globals (EVAL) or with `keys, args` as
    /// its two arguments (a function). With `calls_now` its `redis.call`s are answered
    /// inside the script by the executor `call_now::with_calls_now` installed, instead of
    /// yielding to the driver.
    pub fn start<'w>(
        &self,
        f: Callable,
        mut keys: impl ExactSizeIterator<Item = &'w [u8]>,
        mut argv: impl ExactSizeIterator<Item = &'w [u8]>,
        as_globals: bool,
        calls_now: bool,
    ) -> mlua::Result<Run> {
        let idle = self.runs.idle.borrow_mut().pop();
        let coroutine = match idle {
            Some(coroutine) => coroutine,
            None => {
                let mut co = std::ptr::null_mut();
                // SAFETY: pushes one new thread, which exec_raw returns (and so anchors).
                let thread = unsafe {
                    self.lua.exec_raw::<Thread>((), |state| {
                        co = ffi::lua_newthread(state);
                    })?
                };
                Coroutine { thread, co }
            }
        };
        let (co, body, f) = (coroutine.co, self.runs.body.id(), f.0.id());
        let call_tag = self.runs.call_tag;
        let mut resumed = Resumed::Raised;
        // SAFETY: the coroutine gets the body and its five arguments, pushed from the
        // registry and built here (within the LUA_MINSTACK slots a C function and an idle
        // coroutine have free), and runs to its first stop in the same protected call. Only
        // Lua allocates here, so an error raised (out of memory) skips no Rust destructor.
        unsafe {
            self.runs.protected.call(&mut |state| {
                ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, body.into());
                ffi::lua_pushboolean(state, c_int::from(as_globals));
                ffi::lua_rawgeti(state, ffi::LUA_REGISTRYINDEX, f.into());
                push_sequence(state, &mut keys);
                push_sequence(state, &mut argv);
                ffi::lua_pushboolean(state, c_int::from(calls_now));
                ffi::lua_xmove(state, co, 6);
                resumed = resume_coroutine(state, co, 5, call_tag);
            })
        }
        .map_err(mlua::Error::RuntimeError)?;
        Ok(Run {
            coroutine: Some(coroutine),
            kit: self.runs.clone(),
            first_stop: Some(resumed),
        })
    }
}

/// A compiled script or a library's function, as a run starts it: the registry slot that
/// holds it, borrowed from the VM that keeps it.
#[derive(Clone, Copy)]
pub struct Callable<'a>(&'a RegistryKey);

impl<'a> From<&'a RegistryKey> for Callable<'a> {
    fn from(key: &'a RegistryKey) -> Callable<'a> {
        Callable(key)
    }
}

/// Pushes a new table holding `items` as a sequence of strings.
///
/// # Safety
/// `state` must have two free stack slots; it may raise a Lua error (out of memory).
unsafe fn push_sequence<'w>(
    state: *mut ffi::lua_State,
    items: &mut impl ExactSizeIterator<Item = &'w [u8]>,
) {
    ffi::lua_createtable(state, c_int::try_from(items.len()).unwrap_or(0), 0);
    for (i, item) in (1..).zip(items) {
        push_bytes(state, item);
        ffi::lua_rawseti(state, -2, i);
    }
}

/// What the runs of one VM share.
struct RunKit {
    /// prelude.lua's `body(as_globals, f, keys, argv)`, which each run's coroutine runs.
    body: RegistryKey,
    /// prelude.lua's `failure(co, e)`: the error table, source and line of a failed run.
    failure: Function,
    /// The table a CALL yield starts with, by address (tables do not move in Lua 5.1).
    call_tag: *const c_void,
    _call_tag: Table,
    /// Coroutines whose run finished cleanly, ready for the next run.
    idle: RefCell<Vec<Coroutine>>,
    /// The steps' way into Lua's C API.
    protected: Protected,
    /// The names a run's table value is read by (`Done::write`), and what keeps them.
    field_names: FieldNames,
    _field_name_keys: Vec<RegistryKey>,
}

/// A run's coroutine: the mlua handle that keeps it alive, and its state for the C API.
struct Coroutine {
    thread: Thread,
    co: *mut ffi::lua_State,
}

impl RunKit {
    /// Takes back a coroutine whose run returned: Lua 5.1 has reset it (status 0, no
    /// frames), and its stack is emptied here.
    fn reuse(&self, coroutine: Coroutine) {
        // SAFETY: the coroutine is not running, and emptying a stack allocates nothing.
        unsafe { ffi::lua_settop(coroutine.co, 0) };
        let mut idle = self.idle.borrow_mut();
        if idle.len() < IDLE_COROUTINES {
            idle.push(coroutine);
        }
    }
}

/// Idle coroutines kept per VM: one run at a time uses a VM, so more are never needed.
const IDLE_COROUTINES: usize = 2;

/// One script run in progress.
pub struct Run {
    /// None once it returned (the coroutine went to its `Done`).
    coroutine: Option<Coroutine>,
    kit: Rc<RunKit>,
    /// Where the run first stopped: `start` runs it that far in the same protected call,
    /// and the first `resume` reports it.
    first_stop: Option<Resumed>,
}

/// What one resume of the coroutine found, read while the values were on its stack.
enum Resumed {
    /// A CALL yield: the request kind `acl`, raise, RESP3, and the arguments (None when one
    /// was neither a string nor a number).
    Call {
        acl: bool,
        raise: bool,
        resp3: bool,
        words: Option<Words>,
    },
    /// Something else yielded from the top level.
    StrayYield,
    /// It returned; its value is left alone on its stack. True: the script chose RESP3.
    Returned(bool),
    /// It raised; the error value is on top of its stack.
    Raised,
}

impl Run {
    /// Runs until the script asks for something or ends. `answer` answers the last request
    /// (None on the first resume).
    pub fn resume(&mut self, lua: &Lua, answer: Option<Answer>) -> Step {
        let Some(co) = self.coroutine.as_ref().map(|c| c.co) else {
            return Step::Failed {
                error: error_table(lua, "ERR the script's run has ended"),
                source: None,
                line: None,
            };
        };
        let resumed = match self.first_stop.take() {
            Some(first) => first,
            None => {
                let mut resumed = Resumed::Raised;
                let call_tag = self.kit.call_tag;
                // SAFETY: the coroutine's stack holds the last yield's values, which are
                // dropped for the answer, built on the call's stack and moved over, within
                // the free slots a C function and a yielded coroutine have. What is read is
                // copied into `resumed`, owned by the caller, so an error raised here (out
                // of memory) skips no Rust destructor.
                let stepped = unsafe {
                    self.kit.protected.call(&mut |state| {
                        push_answer(state, answer.as_ref());
                        ffi::lua_settop(co, 0);
                        ffi::lua_xmove(state, co, 2);
                        resumed = resume_coroutine(state, co, 2, call_tag);
                    })
                };
                if let Err(text) = stepped {
                    return Step::Failed {
                        error: error_table(lua, &format!("ERR {text}")),
                        source: None,
                        line: None,
                    };
                }
                resumed
            }
        };
        match resumed {
            Resumed::Call {
                acl,
                raise,
                resp3,
                words,
            } => {
                let Some(words) = words else {
                    return Step::BadRequest {
                        raise,
                        error: "ERR Lua redis lib command arguments must be strings or integers",
                    };
                };
                if words.spans.is_empty() {
                    return Step::BadRequest {
                        raise,
                        error: if acl {
                            "ERR Invalid command passed to redis.acl_check_cmd()"
                        } else {
                            "ERR Please specify at least one argument for this redis lib call"
                        },
                    };
                }
                Step::Request(if acl {
                    Request::AclCheck { words }
                } else {
                    Request::Call {
                        raise,
                        resp3,
                        words,
                    }
                })
            }
            Resumed::Returned(resp3) => Step::Done(Done {
                coroutine: self.coroutine.take(),
                kit: self.kit.clone(),
                resp3,
            }),
            Resumed::StrayYield => self.failed(lua, "attempt to yield from outside a coroutine"),
            Resumed::Raised => {
                // SAFETY: moves the error from the coroutine's stack to the call's, where
                // exec_raw takes it.
                let error =
                    unsafe { lua.exec_raw::<Value>((), |state| ffi::lua_xmove(co, state, 1)) };
                self.failed(lua, error.unwrap_or(Value::Nil))
            }
        }
    }

    /// The step of a run that raised `error`, with the user-code line it came from.
    fn failed(&self, lua: &Lua, error: impl mlua::IntoLua) -> Step {
        let thread = self.coroutine.as_ref().map(|c| &c.thread);
        match self
            .kit
            .failure
            .call::<(Value, Option<String>, Option<f64>)>((thread, error))
        {
            Ok((error, source, line)) => Step::Failed {
                error,
                source,
                line: line.map(|l| l as i64),
            },
            Err(e) => Step::Failed {
                error: error_table(lua, &format!("ERR {}", lua_text(e))),
                source: None,
                line: None,
            },
        }
    }
}

/// A run that returned. Its value waits alone on the coroutine's stack until it is written
/// as the reply (or read); then the coroutine goes back to the idle ones.
pub struct Done {
    coroutine: Option<Coroutine>,
    kit: Rc<RunKit>,
    /// The script chose RESP3 (`redis.setresp(3)`), which decides how booleans come out.
    resp3: bool,
}

impl Done {
    pub fn script_resp3(&self) -> bool {
        self.resp3
    }

    /// Writes the value as a reply in the client's protocol (`out.resp3`): a scalar or a
    /// status or error table where it lies, anything else walked through Lua's C API in
    /// one protected call.
    pub fn write(self, out: &mut ReplyBuf) {
        let Some(co) = self.coroutine.as_ref().map(|c| c.co) else {
            return out.null();
        };
        let resp3 = self.resp3;
        let names = &self.kit.field_names;
        // SAFETY: the value is alone on the stack of a coroutine that returned, which has
        // LUA_MINSTACK free slots (so checking for one allocates nothing); the usual values
        // (a string, a number, a status or error table) are read where they are, without
        // allocating, so without the cost of a protected call.
        let mut kind_read = false;
        let written = unsafe {
            write_scalar(co, 1, out, resp3) || {
                kind_read = ffi::lua_checkstack(co, 1) != 0;
                kind_read && write_error_or_status(co, 1, out, names)
            }
        };
        if written {
            return;
        }
        let mark = (out.buf.len(), out.error_offsets.len());
        // SAFETY: moves the value to the call's stack and walks it there, checking for the
        // slots each table level needs.
        let walked = unsafe {
            self.kit.protected.call(&mut |state| {
                ffi::lua_xmove(co, state, 1);
                if kind_read {
                    // A table, and neither an error nor a status one.
                    write_data_table(state, 1, out, names, resp3, 0);
                } else {
                    write_value(state, 1, out, names, resp3, 0);
                }
            })
        };
        if let Err(text) = walked {
            // Whatever was written of it goes: the reply is the error alone.
            out.buf.truncate(mark.0);
            out.error_offsets.truncate(mark.1);
            out.error(&format!("ERR {text}"));
        }
    }

    /// The value (for a caller that wants it as Lua data rather than a reply).
    pub fn value(self, lua: &Lua) -> Value {
        let Some(co) = self.coroutine.as_ref().map(|c| c.co) else {
            return Value::Nil;
        };
        // SAFETY: moves the value from the coroutine's stack to the call's, where exec_raw
        // takes it.
        unsafe { lua.exec_raw::<Value>((), |state| ffi::lua_xmove(co, state, 1)) }
            .unwrap_or(Value::Nil)
    }
}

impl Drop for Done {
    fn drop(&mut self) {
        if let Some(coroutine) = self.coroutine.take() {
            self.kit.reuse(coroutine);
        }
    }
}

/// Resumes `co` with the `nargs` values on top of its stack and reads where it stopped; a
/// finished run keeps only its value (`Done`).
///
/// # Safety
/// `state` must be running a protected call and `co` be a fresh or yielded coroutine whose
/// stack holds the body and its arguments or the resume's values. Reading allocates nothing
/// in Lua.
unsafe fn resume_coroutine(
    state: *mut ffi::lua_State,
    co: *mut ffi::lua_State,
    nargs: c_int,
    call_tag: *const c_void,
) -> Resumed {
    let mut results = 0;
    match ffi::lua_resume(co, state, nargs, &mut results) {
        ffi::LUA_YIELD => read_yield(co, call_tag),
        ffi::LUA_OK => {
            // `body` returns the value and the protocol the script chose.
            let resp3 = results >= 2
                && ffi::lua_type(co, 2) == ffi::LUA_TNUMBER
                && ffi::lua_tonumber(co, 2) == 3.0;
            ffi::lua_settop(co, 1);
            Resumed::Returned(resp3)
        }
        _ => Resumed::Raised,
    }
}

/// Pushes `ok` and the value a request returns to the script.
///
/// # Safety
/// `state` must be running a protected call with four free slots; it may raise (out of
/// memory).
pub(crate) unsafe fn push_answer(state: *mut ffi::lua_State, answer: Option<&Answer>) {
    let refused = |state, text: &[u8]| {
        ffi::lua_pushboolean(state, 0);
        push_bytes(state, text);
        wrap(state, b"err");
    };
    match answer {
        Some(Answer::Reply(reply)) => match push_reply(state, reply) {
            Ok(is_error) => {
                ffi::lua_pushboolean(state, c_int::from(!is_error));
                ffi::lua_insert(state, -2);
            }
            Err(_) => refused(state, b"ERR reply could not be read"),
        },
        Some(Answer::Error(text)) => refused(state, text.as_bytes()),
        Some(Answer::Allowed) => {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_pushboolean(state, 1);
        }
        None => {
            ffi::lua_pushboolean(state, 1);
            ffi::lua_pushnil(state);
        }
    }
}

/// Reads a yield's values from `co`'s stack: a CALL (the tag, kind, raise, protocol, then
/// the command's arguments) or a stray yield.
///
/// # Safety
/// `co` must be a coroutine that just yielded. Nothing here allocates in Lua.
unsafe fn read_yield(co: *mut ffi::lua_State, call_tag: *const c_void) -> Resumed {
    let n = ffi::lua_gettop(co);
    if n < 4 || ffi::lua_topointer(co, 1) != call_tag {
        return Resumed::StrayYield;
    }
    let acl = string_at(co, 2).is_some_and(|kind| kind == b"acl");
    let raise = ffi::lua_toboolean(co, 3) != 0;
    let resp3 = ffi::lua_tonumber(co, 4) == 3.0;
    let mut words = Words::default();
    let read = read_words(co, 5, n, &mut words);
    Resumed::Call {
        acl,
        raise,
        resp3,
        words: read.then_some(words),
    }
}

/// Reads stack slots `from..=to` of `state` into `words` (emptied first) as a command's
/// arguments: strings as they are, numbers as Lua prints them with `%.17g`. False when one
/// is neither.
///
/// # Safety
/// The slots must be on `state`'s stack. Nothing here allocates in Lua.
pub(crate) unsafe fn read_words(
    state: *mut ffi::lua_State,
    from: c_int,
    to: c_int,
    words: &mut Words,
) -> bool {
    words.data.clear();
    words.spans.clear();
    // Room for every string, and for a number's 24 bytes at most.
    let room: usize = (from..=to)
        .map(|i| match ffi::lua_type(state, i) {
            ffi::LUA_TSTRING => ffi::lua_objlen(state, i),
            _ => 24,
        })
        .sum();
    words.data.reserve(room);
    words
        .spans
        .reserve(usize::try_from(to - from + 1).unwrap_or(0));
    for i in from..=to {
        let start = words.data.len();
        match ffi::lua_type(state, i) {
            ffi::LUA_TSTRING => words
                .data
                .extend_from_slice(string_at(state, i).unwrap_or_default()),
            ffi::LUA_TNUMBER => damselfly_protocol::number::format_f64_17g(
                ffi::lua_tonumber(state, i),
                &mut words.data,
            ),
            _ => return false,
        }
        words.spans.push(Span {
            start,
            len: words.data.len() - start,
        });
    }
    true
}

/// `{err = text}`.
pub fn error_table(lua: &Lua, text: &str) -> Value {
    match lua.create_table() {
        Ok(t) => {
            let _ = t.raw_set("err", text);
            Value::Table(t)
        }
        Err(_) => Value::Nil,
    }
}

/// An mlua error as the text Lua raised, without mlua's traceback.
pub fn lua_text(e: mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message,
        mlua::Error::RuntimeError(m) => m
            .split("\nstack traceback:")
            .next()
            .unwrap_or("")
            .to_string(),
        mlua::Error::MemoryError(_) => "Lua memory limit reached".to_string(),
        mlua::Error::CallbackError { cause, .. } => lua_text((*cause).clone()),
        other => other.to_string(),
    }
}

/// Running scripts in tests as EVAL runs them.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// Lua helpers the scripts may use: `hex(s)`, and `show(...)`, which writes its arguments
    /// separated by spaces, strings with `%q`, tables as `{k=v,...}` sorted, anything else
    /// with `tostring`. One line, so the script's line numbers stay.
    const HELPERS: &str = "local function hex(s) return (string.gsub(s, '.', function(c) return string.format('%02x', string.byte(c)) end)) end local function dump(v) if type(v) == 'string' then return string.format('%q', v) elseif type(v) == 'table' then local parts = {} for k, x in pairs(v) do parts[#parts + 1] = dump(k) .. '=' .. dump(x) end table.sort(parts) return '{' .. table.concat(parts, ',') .. '}' else return tostring(v) end end local function show(...) local t = {} for i = 1, select('#', ...) do t[i] = dump((select(i, ...))) end return table.concat(t, ' ') end";

    /// Runs `code` after the helpers as an EVAL script that calls no command, on a fresh VM:
    /// the string it returns, or its error's text.
    pub fn run(code: &str) -> String {
        let mut vm = ScriptVm::new(0).expect("a VM");
        let code = format!("{HELPERS} {code}");
        if let Err(e) = vm.compile("t", "user_script", code.as_bytes()) {
            return e;
        }
        let f = vm.compiled("t").expect("compiled");
        let mut run = vm
            .start(f, [].into_iter(), [].into_iter(), true, false)
            .expect("a run");
        match run.resume(vm.lua(), None) {
            Step::Done(done) => match done.value(vm.lua()) {
                Value::String(s) => s.to_string_lossy(),
                _ => "(no string returned)".into(),
            },
            Step::Failed {
                error: Value::Table(t),
                ..
            } => t
                .get::<mlua::String>("err")
                .map(|e| e.to_string_lossy())
                .unwrap_or_default(),
            _ => "(no string returned)".into(),
        }
    }

    /// Runs each script and compares what it returns, or its error's text, with what
    /// redis-server 7.0.15 returned for the same script (the expected values were taken
    /// from it).
    pub fn assert_as_redis(cases: &[(&str, &str)]) {
        let differences: Vec<String> = cases
            .iter()
            .filter_map(|(code, redis)| {
                let ours = run(code);
                (ours != *redis).then(|| format!("{code}\n  ours:  {ours}\n  redis: {redis}"))
            })
            .collect();
        assert!(differences.is_empty(), "{}", differences.join("\n"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `code`, answering its requests in order; the VM is returned with the last step
    /// because the step's values live in it.
    fn run_with_answers(code: &str, answers: Vec<(bool, &str)>) -> (ScriptVm, Step, usize) {
        let mut vm = ScriptVm::new(0).unwrap();
        vm.compile("t", "user_script", code.as_bytes()).unwrap();
        let mut run = vm
            .start(
                vm.compiled("t").unwrap(),
                [&b"k"[..]].into_iter(),
                [&b"a"[..]].into_iter(),
                true,
                false,
            )
            .unwrap();
        let mut asked = 0;
        let mut answer = None;
        let mut answers = answers.into_iter();
        loop {
            match run.resume(vm.lua(), answer.take()) {
                Step::Request(_) => {
                    asked += 1;
                    let (ok, text) = answers.next().expect("an answer per request");
                    answer = Some(Answer::Reply(if ok {
                        format!("${}\r\n{text}\r\n", text.len()).into_bytes()
                    } else {
                        format!("-{text}\r\n").into_bytes()
                    }));
                }
                step => return (vm, step, asked),
            }
        }
    }

    /// A killed run stops even when it catches errors in a loop: pcall, xpcall and
    /// coroutine.resume pass the watchdog's error on.
    #[test]
    fn a_killed_run_cannot_catch_its_stop() {
        use std::sync::Arc;
        use std::time::Duration;
        let board = Arc::new(watchdog::BusyBoard::default());
        for code in [
            "while true do pcall(function() while true do end end) end",
            "while true do xpcall(function() while true do end end, function(e) return e end) end",
            "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
            // Nearly every instruction runs in cmsgpack.pack's walk of the table (Lua code
            // called from Rust), where the stop is passed on as the hook raised it.
            "local t = {string.byte(string.rep('a', 7000), 1, 7000)} \
             while true do pcall(function() while true do cmsgpack.pack(t) end end) end",
        ] {
            let mut vm = ScriptVm::new(0).unwrap();
            vm.compile("t", "user_script", code.as_bytes()).unwrap();
            let watch = watchdog::RunWatch::new(
                watchdog::RunKind::Eval,
                "t".into(),
                Words::default(),
                Duration::ZERO,
                board.clone(),
            );
            let _watching = watchdog::watch(watch.clone());
            watch.kill("Script killed by user with SCRIPT KILL...");
            let mut run = vm.start(vm.compiled("t").unwrap(), [].into_iter(), [].into_iter(), true, false).unwrap();
            match run.resume(vm.lua(), None) {
                Step::Failed { error, line, .. } => {
                    let Value::Table(t) = error else {
                        panic!("{code}: an error table")
                    };
                    let err: String = t.get("err").unwrap();
                    assert_eq!(err, "ERR Script killed by user with SCRIPT KILL...", "{code}");
                    assert_eq!(line, Some(1));
                }
                _ => panic!("{code}: the run must fail"),
            }
            // It went on the busy board at once (threshold 0) and leaves it with the guard.
            assert!(board.is_busy());
            drop(_watching);
            assert!(!board.is_busy());
        }
    }

    /// Coroutines are reused, and each run starts clean (its own KEYS, RESP2) after runs
    /// that returned, failed, or yielded from the top level.
    #[test]
    fn each_run_starts_clean_on_a_reused_coroutine() {
        let mut vm = ScriptVm::new(0).unwrap();
        let scripts: [(&str, &[u8]); 4] = [
            ("echo", b"return KEYS[1]"),
            ("resp3", b"redis.setresp(3) return 1"),
            ("fail", b"error('boom')"),
            ("stray", b"coroutine.yield(1)"),
        ];
        for (id, code) in scripts {
            vm.compile(id, "user_script", code).unwrap();
        }
        let run = |id: &str, key: &[u8]| {
            let mut run = vm
                .start(
                    vm.compiled(id).unwrap(),
                    [key].into_iter(),
                    [].into_iter(),
                    true,
                    false,
                )
                .unwrap();
            run.resume(vm.lua(), None)
        };
        let echoes = |step: Step, want: &str| match step {
            Step::Done(done) if !done.script_resp3() => match done.value(vm.lua()) {
                Value::String(s) => assert_eq!(s.to_str().unwrap(), want),
                v => panic!("expected {want}, got {v:?}"),
            },
            _ => panic!("expected {want} in RESP2"),
        };
        let error_text = |step: Step| match step {
            Step::Failed {
                error: Value::Table(t),
                line,
                ..
            } => (t.get::<String>("err").unwrap(), line),
            _ => panic!("expected a failure"),
        };
        echoes(run("echo", b"a"), "a");
        assert!(matches!(run("resp3", b"x"), Step::Done(d) if d.script_resp3()));
        echoes(run("echo", b"b"), "b");
        let (err, line) = error_text(run("fail", b"x"));
        assert!(err.ends_with("boom"), "{err}");
        assert_eq!(line, Some(1));
        echoes(run("echo", b"c"), "c");
        let (err, line) = error_text(run("stray", b"x"));
        assert_eq!(err, "ERR attempt to yield from outside a coroutine");
        assert_eq!(line, Some(1));
        echoes(run("echo", b"d"), "d");
    }

    #[test]
    fn a_load_past_its_time_limit_stops() {
        let vm = ScriptVm::new(0).unwrap();
        let Err(e) = vm.load_library(b"\nlocal t = {} while true do t[1] = 1 end") else {
            panic!("a library that never ends cannot load")
        };
        assert_eq!(
            e,
            "ERR Error registering functions: ERR FUNCTION LOAD timeout"
        );
    }

    #[test]
    fn a_failed_call_reports_the_calling_line() {
        let (_vm, step, asked) = run_with_answers(
            "local x = 1\nreturn redis.call('incr', KEYS[1])",
            vec![(false, "ERR not an integer")],
        );
        assert_eq!(asked, 1);
        match step {
            Step::Failed { source, line, .. } => {
                assert_eq!(source.as_deref(), Some("@user_script"));
                assert_eq!(line, Some(2));
            }
            _ => panic!("expected a failure"),
        }
    }

    #[test]
    fn pcall_passes_calls_through_and_returns_error_text() {
        let (vm, step, asked) = run_with_answers(
            "local ok, e = pcall(redis.call, 'incr', 'x')\nlocal v = redis.call('get', 'y')\nreturn {tostring(ok), e, v}",
            vec![(false, "ERR not an integer"), (true, "val")],
        );
        assert_eq!(asked, 2);
        let Step::Done(done) = step else {
            panic!("expected a result")
        };
        let Value::Table(t) = done.value(vm.lua()) else {
            panic!("expected a table")
        };
        let items: Vec<String> = t.sequence_values::<String>().map(Result::unwrap).collect();
        assert_eq!(items, ["false", "ERR not an integer", "val"]);
    }
}
