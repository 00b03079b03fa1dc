//! The wire protocol: parsing client requests (RESP multibulk and inline commands) into
//! argument spans over the read buffer, and encoding replies in RESP2 or RESP3.
//!
//! This crate owns no I/O and no server state. The parser is hand-written rather than built on
//! the `redis-protocol` crate because it produces offsets into the read buffer without allocating
//! per argument (see docs/benchmarks.md for the figures); `redis-protocol` is used in the tests
//! as an independent decoder to cross-check the encoder.

pub mod number;
pub mod parser;
pub mod reply;

pub use parser::{
    parse_command, split_line, Limits, ParsedCommand, ProtocolError, RequestParser, Span,
};
pub use reply::ReplyBuf;
