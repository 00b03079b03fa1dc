//! The `commands` fuzz target's parts: decoding an input into commands (`program`), the
//! in-process server and its client (`harness`), and a strict reply reader (`resp`).

pub mod harness;
pub mod program;
pub mod resp;
