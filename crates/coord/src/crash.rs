//! The panic policy: a panic anywhere in the server is a bug, and the process aborts after
//! logging a report, as Redis and Dragonfly crash on an assertion. A shard's data may be half
//! way through a change when code panics (a value written but its WATCH version, memory
//! accounting or blocked-client notes not yet updated); carrying on would serve, and later
//! persist, a state no command produced. Aborting keeps every shard consistent: a supervisor
//! (systemd, Kubernetes) restarts the process, and persistence recovers the last durable state.
//!
//! The report names the thread (one per shard), the command it was running when one was, the
//! panic message and location, and a backtrace.

use std::cell::Cell;

thread_local! {
    /// The command this thread is executing, for the crash report.
    static RUNNING: Cell<Option<&'static str>> = const { Cell::new(None) };
}

/// Notes the command this thread starts executing (the report names it if it panics).
pub fn running(name: &'static str) {
    RUNNING.with(|r| r.set(Some(name)));
}

/// Notes that this thread finished its command.
pub fn idle() {
    RUNNING.with(|r| r.set(None));
}

/// Installs the policy: every panic, on any thread, logs a report and aborts the process.
/// Unwinding never starts, so no `catch_unwind` can hide a bug and leave a shard inconsistent.
pub fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let command = RUNNING.with(Cell::get).unwrap_or("none");
        let location = info
            .location()
            .map_or_else(|| "unknown".to_string(), ToString::to_string);
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".to_string());
        let backtrace = std::backtrace::Backtrace::force_capture();
        let report = format!(
            "=== DAMSELFLY BUG REPORT START ===\n\
             panic: {message}\n\
             at: {location}\n\
             thread: {}\n\
             command: {command}\n\
             backtrace:\n{backtrace}\n\
             === DAMSELFLY BUG REPORT END: aborting; a supervisor restarts the server ===",
            thread.name().unwrap_or("unnamed"),
        );
        // Both: the log may be a file, and stderr reaches a container's log collector.
        tracing::error!("{report}");
        eprintln!("{report}");
        std::process::abort();
    }));
}
