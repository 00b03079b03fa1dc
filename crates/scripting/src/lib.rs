//! Lua scripting (docs/scripting.md): what runs inside a script, independent of where its
//! commands execute. The coordination layer drives runs: it executes each `redis.call` on
//! the shard owning its keys, inside the run's transaction, and hands the reply back.
//!
//! - `vm`: one thread's Lua 5.1 state with Redis's environment (`prelude.lua`), compiled
//!   scripts, and the run coroutine the driver resumes.
//! - `call_now`: `redis.call` answered inside the script, for a driver that can run every
//!   command at once.
//! - `slot`: lends a thread's VM to one run at a time.
//! - `cache`: the process-wide EVAL script cache (SCRIPT LOAD is seen by every thread).
//! - `declared`: which arguments of a script's `redis.call`s are declared keys, read from
//!   its source.
//! - `shebang`: `#!lua flags=...` and `#!lua name=...` first lines.
//! - `convert`: RESP replies to Lua values and back.
//! - `tailcall`: keeps the caller's frame under `return redis.call(...)`.
//! - `protected`: protected calls into the C API without mlua's per-call closures.
//! - `random`, `bit`, `cjson`: Redis's `math.random` generator and the `bit` and `cjson`
//!   libraries.
//! - `cmsgpack`, `struct_lib`: Redis's `cmsgpack` and `struct` libraries, on `capi`, what
//!   they share with Lua's C API.
//! - `watchdog`: the instruction hook behind BUSY, SCRIPT/FUNCTION KILL and the load time
//!   limit.
//! - `functions`: the process-wide registry of function libraries (FUNCTION LOAD).
//!
//! mlua with a vendored Lua 5.1 is the Lua binding: Redis embeds Lua 5.1, scripts depend on
//! its semantics (`unpack`, `table.getn`, `loadstring`, numbers as doubles), and mlua is the
//! maintained safe binding that builds it from source with no system library.

pub mod bit;
pub mod cache;
pub mod call_now;
pub mod capi;
pub mod cjson;
pub mod cmsgpack;
pub mod convert;
pub mod declared;
pub mod functions;
pub mod protected;
pub mod random;
pub mod shebang;
pub mod slot;
pub mod struct_lib;
pub mod tailcall;
pub mod vm;
pub mod watchdog;

pub use cache::{sha1_hex, Reach, Script, ScriptCache};
pub use shebang::ScriptFlags;
pub use slot::{VmLease, VmSlot};
pub use vm::{Answer, Request, Run, ScriptVm, Step, Words};
