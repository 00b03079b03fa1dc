//! Watching runs that take long: every `HOOK_INSTRUCTIONS` Lua instructions a hook checks
//! the thread's current run. A run past `busy-reply-threshold` goes on the process-wide
//! [`BusyBoard`] (other clients then get `-BUSY`); a run marked killed (SCRIPT KILL,
//! FUNCTION KILL, SHUTDOWN NOSAVE) or a library load past its time limit is stopped by an
//! error raised from the hook, which the environment's pcall, xpcall and coroutine.resume
//! pass on instead of catching (prelude.lua asks `stopping`).
//!
//! The hook is a raw Lua hook set on the VM's main state: Lua 5.1 copies a state's hook into
//! every coroutine created from it, so the run and the coroutines its pcalls make are all
//! watched. (mlua's own hooks follow one coroutine only.)

use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mlua::ffi;

/// Lua instructions between two checks.
pub const HOOK_INSTRUCTIONS: i32 = 100_000;

/// How long FUNCTION LOAD may run a library's code (Redis's fixed 500 ms).
pub const LOAD_TIME_LIMIT: Duration = Duration::from_millis(500);

/// What a run is, for BUSY texts, KILL and FUNCTION STATS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RunKind {
    Eval,
    Function,
    /// A library's code run by FUNCTION LOAD (never busy: it stops at its time limit).
    Load,
}

/// Watches a connection keeps for its next runs (`RunWatch::renew`): a pipelined round's
/// runs for another shard are in flight together, each with its own.
const WATCH_POOL: usize = 16;

/// One run as the hook and other threads see it.
pub struct RunWatch {
    pub kind: RunKind,
    /// The function's name, or the script's SHA.
    pub name: String,
    /// The command that started it, as typed (FUNCTION STATS).
    pub command: crate::Words,
    started: Instant,
    busy_after: Duration,
    board: Arc<BusyBoard>,
    on_board: AtomicBool,
    wrote: AtomicBool,
    kill: Mutex<Option<&'static str>>,
    /// Set once the hook raised its error; stays set until the run ends.
    stopping: AtomicBool,
}

impl std::fmt::Debug for RunWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunWatch")
            .field("kind", &self.kind)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RunWatch {
    pub fn new(
        kind: RunKind,
        name: String,
        command: crate::Words,
        busy_after: Duration,
        board: Arc<BusyBoard>,
    ) -> Arc<RunWatch> {
        Arc::new(RunWatch::starting(kind, name, command, busy_after, board))
    }

    /// A run that starts now: not busy, not written, not asked to stop.
    fn starting(
        kind: RunKind,
        name: String,
        command: crate::Words,
        busy_after: Duration,
        board: Arc<BusyBoard>,
    ) -> RunWatch {
        RunWatch {
            kind,
            name,
            command,
            started: Instant::now(),
            busy_after,
            board,
            on_board: AtomicBool::new(false),
            wrote: AtomicBool::new(false),
            kill: Mutex::new(None),
            stopping: AtomicBool::new(false),
        }
    }

    /// `new`, in the memory of a watch in `pool` that nothing else holds any more (the run
    /// it watched is over): a connection keeps its last watches, so a run allocates no
    /// watch, name or command copy, also while other runs of a pipelined round are still
    /// in flight with theirs. A new watch joins the pool while it has room.
    pub fn renew<'a>(
        pool: &mut Vec<Arc<RunWatch>>,
        kind: RunKind,
        name: &str,
        command: impl Iterator<Item = &'a [u8]> + Clone,
        busy_after: Duration,
        board: &Arc<BusyBoard>,
    ) -> Arc<RunWatch> {
        for watch in pool.iter_mut() {
            let Some(w) = Arc::get_mut(watch) else {
                continue;
            };
            if !Arc::ptr_eq(&w.board, board) {
                continue;
            }
            let mut kept_name = std::mem::take(&mut w.name);
            kept_name.clear();
            kept_name.push_str(name);
            let mut kept_command = std::mem::take(&mut w.command);
            kept_command.refill(command.clone());
            let board = w.board.clone();
            *w = RunWatch::starting(kind, kept_name, kept_command, busy_after, board);
            return watch.clone();
        }
        let words = crate::Words::from_args(command);
        let watch = RunWatch::new(kind, name.to_owned(), words, busy_after, board.clone());
        if pool.len() < WATCH_POOL {
            pool.push(watch.clone());
        }
        watch
    }

    /// How long it has been running.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// The run executed a write command: SCRIPT KILL can no longer stop it.
    pub fn note_write(&self) {
        self.wrote.store(true, Ordering::Relaxed);
    }

    pub fn wrote(&self) -> bool {
        self.wrote.load(Ordering::Relaxed)
    }

    /// Asks the run to stop with `reason` (the error its caller gets).
    pub fn kill(&self, reason: &'static str) {
        if let Ok(mut k) = self.kill.lock() {
            *k = Some(reason);
        }
    }

    /// Why the hook must stop the run now, if it must.
    fn check(self: &Arc<Self>) -> Option<&'static str> {
        if self.kind == RunKind::Load {
            return (self.started.elapsed() > LOAD_TIME_LIMIT).then_some("FUNCTION LOAD timeout");
        }
        if !self.on_board.load(Ordering::Relaxed) && self.started.elapsed() >= self.busy_after {
            self.on_board.store(true, Ordering::Relaxed);
            self.board.enter(self.clone());
        }
        self.kill.lock().ok().and_then(|k| *k)
    }
}

/// The runs past `busy-reply-threshold`, on every thread.
#[derive(Default)]
pub struct BusyBoard {
    runs: Mutex<Vec<Arc<RunWatch>>>,
    count: AtomicUsize,
}

impl BusyBoard {
    /// True while some run is busy (one atomic load: checked before every command).
    pub fn is_busy(&self) -> bool {
        self.count.load(Ordering::Relaxed) != 0
    }

    /// The busy runs now.
    pub fn runs(&self) -> Vec<Arc<RunWatch>> {
        self.runs.lock().map(|r| r.clone()).unwrap_or_default()
    }

    fn enter(&self, run: Arc<RunWatch>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.push(run);
            self.count.store(runs.len(), Ordering::Relaxed);
        }
    }

    fn leave(&self, run: &Arc<RunWatch>) {
        if let Ok(mut runs) = self.runs.lock() {
            runs.retain(|r| !Arc::ptr_eq(r, run));
            self.count.store(runs.len(), Ordering::Relaxed);
        }
    }
}

thread_local! {
    /// The run whose Lua this thread is executing. A thread has several runs under way when
    /// some wait for other shards (`VmSlot`), but executes one at a time: a run that resumes
    /// after waiting says so first (`executing`).
    static CURRENT: RefCell<Option<Arc<RunWatch>>> = const { RefCell::new(None) };
}

/// Watches `run` until the guard drops (then takes it off the busy board).
pub fn watch(run: Arc<RunWatch>) -> Watching {
    CURRENT.with(|c| *c.borrow_mut() = Some(run.clone()));
    Watching { run }
}

/// `run`, watched, executes again after waiting (other runs may have executed meanwhile).
pub fn executing(run: &Arc<RunWatch>) {
    CURRENT.with(|c| {
        let mut current = c.borrow_mut();
        if !current.as_ref().is_some_and(|r| Arc::ptr_eq(r, run)) {
            *current = Some(run.clone());
        }
    });
}

pub struct Watching {
    run: Arc<RunWatch>,
}

impl Drop for Watching {
    fn drop(&mut self) {
        CURRENT.with(|c| {
            let mut current = c.borrow_mut();
            if current.as_ref().is_some_and(|r| Arc::ptr_eq(r, &self.run)) {
                *current = None;
            }
        });
        if self.run.on_board.load(Ordering::Relaxed) {
            self.run.board.leave(&self.run);
        }
    }
}

/// True when the current run is being stopped (the prelude's pcall re-raises then).
pub fn stopping() -> bool {
    CURRENT.with(|c| {
        c.borrow()
            .as_ref()
            .is_some_and(|r| r.stopping.load(Ordering::Relaxed))
    })
}

/// Installs the hook on `lua`'s main state (before any run's coroutine is made).
pub fn install(lua: &mlua::Lua) -> mlua::Result<()> {
    // SAFETY: sets a hook on the main state inside mlua's protected call; the hook only
    // reads thread-local state and raises a Lua error from a frame holding no Rust values
    // that need dropping.
    unsafe {
        lua.exec_raw::<()>((), |state| {
            ffi::lua_sethook(state, Some(hook), ffi::LUA_MASKCOUNT, HOOK_INSTRUCTIONS);
        })
    }
}

unsafe extern "C-unwind" fn hook(state: *mut ffi::lua_State, _ar: *mut ffi::lua_Debug) {
    let reason = CURRENT.with(|c| {
        let current = c.borrow();
        let run = current.as_ref()?;
        let reason = run.check()?;
        run.stopping.store(true, Ordering::Relaxed);
        Some(reason)
    });
    if let Some(reason) = reason {
        ffi::lua_pushlstring(state, reason.as_ptr().cast(), reason.len());
        ffi::lua_error(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn renew(pool: &mut Vec<Arc<RunWatch>>, board: &Arc<BusyBoard>, key: &[u8]) -> Arc<RunWatch> {
        let command: [&[u8]; 4] = [b"EVALSHA", b"sha", b"1", key];
        RunWatch::renew(
            pool,
            RunKind::Eval,
            "sha",
            command.into_iter(),
            Duration::from_secs(5),
            board,
        )
    }

    /// Runs in flight together get a watch each; once they are over, the next runs get
    /// theirs back, with the new command in them.
    #[test]
    fn renewing_reuses_the_watches_of_runs_that_are_over() {
        let board = Arc::new(BusyBoard::default());
        let mut pool = Vec::new();
        let first = renew(&mut pool, &board, b"k1");
        let second = renew(&mut pool, &board, b"k2");
        assert!(!Arc::ptr_eq(&first, &second), "both runs are in flight");
        assert_eq!(pool.len(), 2);
        let (first_at, second_at) = (Arc::as_ptr(&first), Arc::as_ptr(&second));
        drop((first, second));
        let third = renew(&mut pool, &board, b"k3");
        let fourth = renew(&mut pool, &board, b"k4");
        assert_eq!(Arc::as_ptr(&third), first_at);
        assert_eq!(Arc::as_ptr(&fourth), second_at);
        assert_eq!(third.command.iter().last(), Some(&b"k3"[..]));
        assert_eq!(fourth.command.iter().last(), Some(&b"k4"[..]));
        assert_eq!(pool.len(), 2);
    }
}
