//! `redis.call` and `redis.pcall` answered inside the script. A run's calls normally yield
//! to the driver, which may have to send each to another shard and wait. A driver that can
//! execute every command of a run at once (a run holding its whole shard, on that shard's
//! thread: crates/coord/src/scripting/here.rs) installs an executor instead, and the run's
//! calls go to the C function `call_now`, which reads the command from its own stack, has
//! the executor run it and returns its answer as the yield would have: no coroutine switch
//! and no trip out of Lua per call, as Redis calls its commands from inside `redis.call`.
//!
//! A command the executor cannot run (it needs another shard) stops the run with an error
//! no `pcall` of the script catches (`stopped`, which the prelude's `stopping` reports),
//! and the driver takes the run back, as it does a yielded call it cannot serve.

use std::any::Any;
use std::cell::Cell;
use std::os::raw::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use mlua::ffi;

use crate::vm::{push_answer, read_words, Answer, Words};

/// Runs a run's commands as it calls them.
pub trait CallNow {
    /// The answer to a `redis.call` of `words` under script protocol RESP3 (`resp3`), or
    /// None when the command must run elsewhere.
    fn call(&mut self, resp3: bool, words: &Words) -> Option<Answer>;
}

/// The executor `with_calls_now` installed, and what its calls keep between them. It lives
/// in `with_calls_now`'s frame, not `call_now`'s: a Lua error raised in `call_now` longjmps
/// over that frame, which must then own nothing.
struct Installed {
    exec: *mut (dyn CallNow + 'static),
    words: Words,
    answer: Option<Answer>,
    stopped: bool,
    panic: Option<Box<dyn Any + Send>>,
}

thread_local! {
    static INSTALLED: Cell<*mut Installed> = const { Cell::new(std::ptr::null_mut()) };
    /// The words buffer of the thread's last run, for its next one.
    static SPARE_WORDS: Cell<Words> = Cell::new(Words::default());
}

/// Runs `run` (which starts and drives runs with `calls_now`) with `exec` answering their
/// calls. Returns what `run` returned, and whether a call stopped the run because it must
/// run elsewhere (the run's outcome is then that error, to be discarded).
pub fn with_calls_now<R>(exec: &mut dyn CallNow, run: impl FnOnce() -> R) -> (R, bool) {
    let exec: *mut (dyn CallNow + '_) = exec;
    // SAFETY: only the lifetime changes; the pointer is used only while `run` runs, within
    // this call, while `exec` is borrowed.
    let exec: *mut (dyn CallNow + 'static) = unsafe { std::mem::transmute(exec) };
    let mut installed = Installed {
        exec,
        words: SPARE_WORDS.with(Cell::take),
        answer: None,
        stopped: false,
        panic: None,
    };
    let here: *mut Installed = &mut installed;
    let outer = INSTALLED.with(|i| i.replace(here));
    struct Restore(*mut Installed);
    impl Drop for Restore {
        fn drop(&mut self) {
            INSTALLED.with(|i| i.set(self.0));
        }
    }
    let restore = Restore(outer);
    let result = run();
    drop(restore);
    // SAFETY: `here` points at `installed`, which nothing else uses any more.
    let installed = unsafe { &mut *here };
    SPARE_WORDS.with(|spare| spare.set(std::mem::take(&mut installed.words)));
    if let Some(panic) = installed.panic.take() {
        resume_unwind(panic);
    }
    (result, installed.stopped)
}

/// True when a call stopped the current run (it must run elsewhere).
pub fn stopped() -> bool {
    let installed = INSTALLED.with(Cell::get);
    // SAFETY: a non-null pointer is a live `Installed` (see `with_calls_now`).
    !installed.is_null() && unsafe { (*installed).stopped }
}

const BAD_ARGUMENT: &str = "ERR Lua redis lib command arguments must be strings or integers";
const NO_ARGUMENTS: &str = "ERR Please specify at least one argument for this redis lib call";
/// The error that stops a run whose call must run elsewhere; the client never sees it.
const ELSEWHERE: &std::ffi::CStr = c"the call needs another shard";

/// `call_now(raise, resp, command, args...)`, the prelude's `redis.call` (`raise`) and
/// `redis.pcall` while the run's driver executes calls at once: returns the reply a
/// yielded call's resume hands back (vm.rs, `push_answer`), or raises it when it is an
/// error and `raise` is set, as `redis.call` does.
///
/// # Safety
/// Called by Lua as a C function, with the installed executor (if any) alive.
pub(crate) unsafe extern "C-unwind" fn call_now(state: *mut ffi::lua_State) -> c_int {
    let installed = INSTALLED.with(Cell::get);
    if installed.is_null() {
        ffi::lua_pushstring(state, ELSEWHERE.as_ptr());
        ffi::lua_error(state);
    }
    // SAFETY: a non-null pointer is a live `Installed`; no other reference to it is in use
    // while the script runs. A reference owns nothing, so the longjmp of a Lua error may
    // skip it.
    let installed = &mut *installed;
    let raise = ffi::lua_toboolean(state, 1) != 0;
    let resp3 = ffi::lua_tonumber(state, 2) == 3.0;
    let top = ffi::lua_gettop(state);
    installed.answer = if !read_words(state, 3, top, &mut installed.words) {
        Some(Answer::Error(BAD_ARGUMENT))
    } else if installed.words.spans.is_empty() {
        Some(Answer::Error(NO_ARGUMENTS))
    } else {
        let (exec, words) = (installed.exec, &installed.words);
        // A panic must not unwind through Lua's C frames: it is resumed once the run
        // is over (`with_calls_now`), and the run stops here.
        match catch_unwind(AssertUnwindSafe(|| (*exec).call(resp3, words))) {
            Ok(answer) => answer,
            Err(panic) => {
                installed.panic = Some(panic);
                None
            }
        }
    };
    if installed.answer.is_none() {
        installed.stopped = true;
        ffi::lua_pushstring(state, ELSEWHERE.as_ptr());
        ffi::lua_error(state);
    }
    ffi::lua_settop(state, 0);
    push_answer(state, installed.answer.as_ref());
    // The stack is `ok, reply`.
    if raise && ffi::lua_toboolean(state, 1) == 0 {
        ffi::lua_error(state);
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::{ScriptVm, Step};
    use mlua::Value;

    /// Answers GET with the key's name as a bulk string, refuses DEL, and sends anything
    /// else elsewhere; records the calls it got.
    #[derive(Default)]
    struct Echo {
        calls: Vec<Vec<Vec<u8>>>,
    }

    impl CallNow for Echo {
        fn call(&mut self, _resp3: bool, words: &Words) -> Option<Answer> {
            self.calls.push(words.iter().map(<[u8]>::to_vec).collect());
            match words.first() {
                b"get" => {
                    let key = words.iter().nth(1).unwrap_or_default();
                    let mut reply = format!("${}\r\n", key.len()).into_bytes();
                    reply.extend_from_slice(key);
                    reply.extend_from_slice(b"\r\n");
                    Some(Answer::Reply(reply))
                }
                b"del" => Some(Answer::Error("ERR refused")),
                _ => None,
            }
        }
    }

    fn run(vm: &mut ScriptVm, code: &str, exec: &mut Echo) -> (Step, bool) {
        vm.compile("t", "user_script", code.as_bytes()).unwrap();
        let vm = &*vm;
        with_calls_now(exec, || {
            let mut run = vm
                .start(
                    vm.compiled("t").unwrap(),
                    [&b"k1"[..]].into_iter(),
                    [].into_iter(),
                    true,
                    true,
                )
                .unwrap();
            run.resume(vm.lua(), None)
        })
    }

    /// Calls are answered inside the script, numbers go as Lua prints them, and bad
    /// arguments and refusals come back as they do through the driver.
    #[test]
    fn calls_are_answered_inside_the_script() {
        let mut vm = ScriptVm::new(0).unwrap();
        let mut exec = Echo::default();
        let code = "local a = redis.call('get', KEYS[1]) \
                    local b = redis.pcall('get', 2.5) \
                    local c = redis.pcall('del', 'x') \
                    local d = redis.pcall('get', {}) \
                    return {a, b, c.err, d.err}";
        let (step, stopped) = run(&mut vm, code, &mut exec);
        assert!(!stopped);
        let Step::Done(done) = step else {
            panic!("the run ends")
        };
        let Value::Table(t) = done.value(vm.lua()) else {
            panic!("a table")
        };
        let got: Vec<String> = (1..=4).map(|i| t.get(i).unwrap()).collect();
        assert_eq!(
            got,
            [
                "k1",
                "2.5",
                "ERR refused",
                "ERR Lua redis lib command arguments must be strings or integers"
            ]
        );
        assert_eq!(
            exec.calls.len(),
            3,
            "the bad argument never reaches the executor"
        );
        assert!(!super::stopped(), "nothing is installed after the run");
    }

    /// A call that must run elsewhere stops the run, and the script's pcall cannot catch
    /// the stop.
    #[test]
    fn a_call_elsewhere_stops_the_run_through_pcall() {
        let mut vm = ScriptVm::new(0).unwrap();
        let mut exec = Echo::default();
        let code = "local ok = pcall(function() return redis.call('set', 'x', 1) end) \
                    redis.call('get', 'after') return ok";
        let (step, stopped) = run(&mut vm, code, &mut exec);
        assert!(stopped);
        assert!(matches!(step, Step::Failed { .. }));
        assert_eq!(exec.calls.len(), 1, "nothing ran after the stop");
    }
}
