//! `commands`: each input is decoded into a short list of Redis commands (names from the
//! command table, arguments from pools of keys spread over the shards, edge-case numbers,
//! option words, score bounds and raw bytes; see src/program.rs) and run, pipelined, against
//! an in-process 3-shard server over a unix socket.
//!
//! Asserts: no panic anywhere in the process (server threads included: the panic hook
//! aborts); every command gets exactly one well-formed RESP2/RESP3 reply, in order, and then
//! the sentinel's (a lost, extra or garbled reply is a finding); no reply reports a panic the
//! server caught; no reply takes longer than 10 s; a protocol error ends with
//! `-ERR Protocol error` and the connection closing.
#![no_main]

use damselfly_server_fuzz::{harness::harness, program::Program};
use libfuzzer_sys::fuzz_target;

// The server binary's allocator (crates/server/src/main.rs), so the server runs here as it does
// in production.
#[global_allocator]
static GLOBAL: damselfly_memory::Allocator = damselfly_memory::Allocator;

fuzz_target!(|program: Program| {
    harness().run(&program);
});
