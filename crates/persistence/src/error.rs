//! Errors from reading RDB streams and DUMP payloads. Every error carries the byte offset in
//! the input where it was found, so a damaged file can be inspected (and compared with what
//! `redis-check-rdb` says about it).

use std::fmt;
use std::io;

#[derive(Debug)]
pub struct Error {
    /// Offset in the stream (from its first byte, the magic) where the problem was found.
    pub offset: u64,
    pub kind: ErrorKind,
}

#[derive(Debug)]
pub enum ErrorKind {
    /// The underlying reader failed.
    Io(io::Error),
    /// The input ended inside a record.
    Truncated,
    /// Not an RDB stream, or a version Damselfly cannot read.
    BadHeader(String),
    /// A record or nested encoding breaks the format's rules.
    Corrupt(String),
    /// Valid Redis data that Damselfly cannot hold (module values).
    Unsupported(String),
    /// The CRC-64 trailer does not match the data.
    Checksum { stored: u64, computed: u64 },
}

impl Error {
    pub(crate) fn new(offset: u64, kind: ErrorKind) -> Error {
        Error { offset, kind }
    }

    pub(crate) fn corrupt(offset: u64, what: impl Into<String>) -> Error {
        Error::new(offset, ErrorKind::Corrupt(what.into()))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            ErrorKind::Io(e) => write!(f, "read error at byte {}: {e}", self.offset),
            ErrorKind::Truncated => write!(f, "unexpected end of data at byte {}", self.offset),
            ErrorKind::BadHeader(m) => write!(f, "{m}"),
            ErrorKind::Corrupt(m) => write!(f, "corrupt data at byte {}: {m}", self.offset),
            ErrorKind::Unsupported(m) => write!(f, "{m} (at byte {})", self.offset),
            ErrorKind::Checksum { stored, computed } => write!(
                f,
                "wrong RDB checksum at byte {}: stored {stored:016x}, computed {computed:016x}",
                self.offset
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.kind {
            ErrorKind::Io(e) => Some(e),
            _ => None,
        }
    }
}
