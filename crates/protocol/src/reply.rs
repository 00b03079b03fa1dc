//! Reply encoder. Commands write replies straight into the connection's output bytes; the
//! buffer knows whether the client speaks RESP2 or RESP3 and picks the wire type accordingly.

use crate::number::{format_f64_17g, push_i64};

/// An output buffer of encoded replies for one client protocol version.
#[derive(Debug)]
pub struct ReplyBuf {
    pub buf: Vec<u8>,
    pub resp3: bool,
    /// Offsets in `buf` where error replies start, so stats can count them by error code.
    pub error_offsets: Vec<usize>,
    /// Size past which the client this goes to is disconnected (the output buffer limit).
    /// A reply whose size the client chooses (SRANDMEMBER with a huge negative count) stops
    /// growing once `full()`: it will never be sent, so it must not be built.
    pub limit: usize,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf::new(false)
    }
}

impl ReplyBuf {
    pub fn new(resp3: bool) -> Self {
        ReplyBuf {
            buf: Vec::new(),
            resp3,
            error_offsets: Vec::new(),
            limit: usize::MAX,
        }
    }

    /// True once the buffer is past its limit: its client will be disconnected.
    pub fn full(&self) -> bool {
        self.buf.len() > self.limit
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    fn header(&mut self, tag: u8, n: i64) {
        self.buf.push(tag);
        push_i64(&mut self.buf, n);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// `+OK`-style status line.
    pub fn simple(&mut self, s: &str) {
        self.buf.push(b'+');
        self.buf.extend_from_slice(s.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
    }

    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// An error line; `msg` carries its code, e.g. `ERR syntax error` or `WRONGTYPE ...`.
    /// Newlines would break the framing, so they become spaces as in Redis.
    pub fn error(&mut self, msg: &str) {
        self.error_offsets.push(self.buf.len());
        self.buf.push(b'-');
        self.buf.extend(
            msg.bytes()
                .map(|b| if b == b'\r' || b == b'\n' { b' ' } else { b }),
        );
        self.buf.extend_from_slice(b"\r\n");
    }

    /// Redis's addReplyHelp: `<CMD> <subcommand> ...` as title, the lines, then HELP's own.
    pub fn help(&mut self, cmd: &str, lines: &[&str]) {
        self.array(lines.len() + 3);
        self.simple(&format!(
            "{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
        ));
        for l in lines {
            self.simple(l);
        }
        self.simple("HELP");
        self.simple("    Prints this help.");
    }

    pub fn int(&mut self, v: i64) {
        self.header(b':', v);
    }

    pub fn bulk(&mut self, data: &[u8]) {
        self.header(b'$', data.len() as i64);
        self.buf.extend_from_slice(data);
        self.buf.extend_from_slice(b"\r\n");
    }

    /// An integer as a bulk string (GET of an int-encoded value).
    pub fn bulk_i64(&mut self, v: i64) {
        let mut tmp = Vec::with_capacity(20);
        push_i64(&mut tmp, v);
        self.bulk(&tmp);
    }

    /// The null bulk string (`$-1` in RESP2, `_` in RESP3).
    pub fn null(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"$-1\r\n");
        }
    }

    /// The null array (`*-1` in RESP2, `_` in RESP3), e.g. an aborted EXEC.
    pub fn null_array(&mut self) {
        if self.resp3 {
            self.buf.extend_from_slice(b"_\r\n");
        } else {
            self.buf.extend_from_slice(b"*-1\r\n");
        }
    }

    pub fn array(&mut self, n: usize) {
        self.header(b'*', n as i64);
    }

    /// An out-of-band push of `n` items (`>n` in RESP3; in RESP2, where Pub/Sub messages
    /// are plain arrays, `*n`).
    pub fn push(&mut self, n: usize) {
        self.header(if self.resp3 { b'>' } else { b'*' }, n as i64);
    }

    /// A map of `n` pairs: `%n` in RESP3, a flat array of 2n in RESP2.
    pub fn map(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'%', n as i64);
        } else {
            self.header(b'*', 2 * n as i64);
        }
    }

    /// A set of `n` members: `~n` in RESP3, an array in RESP2.
    pub fn set(&mut self, n: usize) {
        if self.resp3 {
            self.header(b'~', n as i64);
        } else {
            self.header(b'*', n as i64);
        }
    }

    /// A double: `,` in RESP3, a `%.17g` bulk string in RESP2.
    pub fn double(&mut self, v: f64) {
        let mut tmp = Vec::with_capacity(32);
        format_f64_17g(v, &mut tmp);
        self.double_text(&tmp);
    }

    /// A double already formatted by the caller (Redis's "human" long doubles: GEOPOS):
    /// `,text` in RESP3, a bulk string in RESP2.
    pub fn double_text(&mut self, text: &[u8]) {
        if self.resp3 {
            self.buf.push(b',');
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, v: bool) {
        if self.resp3 {
            self.buf
                .extend_from_slice(if v { b"#t\r\n" } else { b"#f\r\n" });
        } else {
            self.int(i64::from(v));
        }
    }

    /// A verbatim string (`=` with a 3-letter format in RESP3), a bulk string in RESP2.
    pub fn verbatim(&mut self, format: &str, text: &[u8]) {
        if self.resp3 {
            self.header(b'=', (text.len() + 4) as i64);
            self.buf.extend_from_slice(format.as_bytes());
            self.buf.push(b':');
            self.buf.extend_from_slice(text);
            self.buf.extend_from_slice(b"\r\n");
        } else {
            self.bulk(text);
        }
    }

    /// Appends already-encoded replies (from another shard) for the same protocol version.
    pub fn raw(&mut self, encoded: &[u8]) {
        self.buf.extend_from_slice(encoded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use redis_protocol::resp3::decode::complete::decode;
    use redis_protocol::resp3::types::OwnedFrame;

    #[test]
    fn resp2_shapes() {
        let mut r = ReplyBuf::new(false);
        r.map(1);
        r.bulk(b"a");
        r.double(1.5);
        r.null();
        r.boolean(true);
        assert_eq!(r.buf, b"*2\r\n$1\r\na\r\n$3\r\n1.5\r\n$-1\r\n:1\r\n");
    }

    #[test]
    fn resp3_decodes_with_reference_decoder() {
        let mut r = ReplyBuf::new(true);
        r.map(2);
        r.bulk(b"k");
        r.double(0.5);
        r.simple("x");
        r.set(1);
        r.int(-7);
        r.verbatim("txt", b"hello");
        r.null();
        r.error("ERR boom\r\nx");
        let mut pos = 0;
        let mut frames = Vec::new();
        while pos < r.buf.len() {
            let (f, used) = decode(&r.buf[pos..]).unwrap().unwrap();
            frames.push(f);
            pos += used;
        }
        assert!(matches!(frames[0], OwnedFrame::Map { .. }));
        assert!(matches!(frames[1], OwnedFrame::VerbatimString { .. }));
        assert!(matches!(frames[2], OwnedFrame::Null));
        match &frames[3] {
            OwnedFrame::SimpleError { data, .. } => assert_eq!(data, "ERR boom  x"),
            other => panic!("{other:?}"),
        }
        assert_eq!(r.error_offsets.len(), 1);
    }
}
