//! Protected calls from Rust into Lua's C API without mlua's per-call garbage.
//!
//! Code that pushes values may raise a Lua error (out of memory), so it must run inside a
//! protected call. mlua's `Lua::exec_raw` makes one by pushing two new C closures each time,
//! which in Lua 5.1 are two allocations and garbage for the collector; a run's steps made
//! four of them per script call. Here one C function is created once and kept in the
//! registry: a call pushes it from there with the address of the Rust closure to run as a
//! light userdata, and `lua_pcall`s it. Nothing is allocated.

use std::any::Any;
use std::ffi::c_void;
use std::os::raw::c_int;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

use mlua::{ffi, Lua};

use crate::convert::string_at;

/// The closure a protected call runs, given the state it runs on (a fresh C frame: an
/// empty stack).
type Body<'a> = &'a mut dyn FnMut(*mut ffi::lua_State);

/// One Lua state's way into protected calls. It holds the state open while it lives, so
/// what keeps it (a run, a run's result) never reaches a closed state.
pub struct Protected {
    _lua: Lua,
    /// The main thread, whose stack the calls run on between mlua's own calls.
    state: *mut ffi::lua_State,
    /// The registry slot of `trampoline`.
    trampoline: c_int,
}

/// What a trampoline call hands back besides Lua's status: a panic in the closure, caught
/// before it could unwind through Lua's C frames, to be resumed past them.
struct Call<'a> {
    body: Body<'a>,
    panic: Option<Box<dyn Any + Send>>,
}

/// The C function every protected call runs: takes its `Call` from the light userdata at
/// index 1 and runs the closure on an empty stack.
unsafe extern "C-unwind" fn trampoline(state: *mut ffi::lua_State) -> c_int {
    let call = ffi::lua_touserdata(state, 1).cast::<Call>();
    ffi::lua_settop(state, 0);
    // SAFETY: `Protected::call` passed the address of a `Call` it keeps alive until
    // lua_pcall returns.
    let call = &mut *call;
    if let Err(panic) = catch_unwind(AssertUnwindSafe(|| (call.body)(state))) {
        call.panic = Some(panic);
    }
    0
}

impl Protected {
    /// Sets up protected calls on `lua`'s main thread. Must be called outside any mlua
    /// callback: the state `exec_raw` hands out is then the main thread.
    pub fn new(lua: &Lua) -> mlua::Result<Protected> {
        let mut state = std::ptr::null_mut();
        let mut trampoline_ref = 0;
        // SAFETY: pushes one C function (no upvalues) and pops it into the registry.
        unsafe {
            lua.exec_raw::<()>((), |s| {
                state = s;
                ffi::lua_pushcfunction(s, trampoline);
                trampoline_ref = ffi::luaL_ref(s, ffi::LUA_REGISTRYINDEX);
            })?;
        }
        Ok(Protected {
            _lua: lua.clone(),
            state,
            trampoline: trampoline_ref,
        })
    }

    /// Runs `body` inside a protected call on the main thread, with an empty stack that is
    /// dropped afterwards. Returns the text of a Lua error it raised.
    ///
    /// # Safety
    /// No mlua call may be in progress on this state (the stack is borrowed between them).
    /// `body` may raise a Lua error only where no Rust value that owns memory is alive in its
    /// frames (the error longjmps over them).
    pub unsafe fn call(&self, body: Body) -> Result<(), String> {
        let state = self.state;
        let top = ffi::lua_gettop(state);
        if ffi::lua_checkstack(state, 2) == 0 {
            return Err("stack overflow".to_string());
        }
        let mut call = Call { body, panic: None };
        ffi::lua_rawgeti(
            state,
            ffi::LUA_REGISTRYINDEX,
            ffi::lua_Integer::from(self.trampoline),
        );
        ffi::lua_pushlightuserdata(state, (&mut call as *mut Call).cast::<c_void>());
        let status = ffi::lua_pcall(state, 1, 0, 0);
        let outcome = match status {
            ffi::LUA_OK => Ok(()),
            ffi::LUA_ERRMEM => Err("Lua memory limit reached".to_string()),
            _ => Err(string_at(state, -1)
                .map(|m| String::from_utf8_lossy(m).into_owned())
                .unwrap_or_default()),
        };
        ffi::lua_settop(state, top);
        if let Some(panic) = call.panic {
            resume_unwind(panic);
        }
        outcome
    }
}
