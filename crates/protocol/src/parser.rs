//! Request parser: one complete command at a time, as argument spans into the read buffer.
//!
//! Error texts and limits follow Redis 7's `processMultibulkBuffer` and
//! `processInlineBuffer`; an error means the connection replies `-ERR Protocol error: ...` and
//! closes.

use crate::number::parse_i64;

/// Longest inline command line, and longest `*N` / `$N` header line (Redis PROTO_INLINE_MAX_SIZE).
pub const INLINE_MAX: usize = 64 * 1024;

/// A byte range of one argument.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    pub fn range(self) -> std::ops::Range<usize> {
        self.start as usize..self.start as usize + self.len as usize
    }
}

/// Per-connection limits the parser enforces.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// `proto-max-bulk-len`.
    pub max_bulk_len: u64,
    /// False until a client authenticates when a password is set: Redis then caps the request
    /// at 10 arguments of at most 16 KiB each.
    pub authenticated: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_bulk_len: 512 * 1024 * 1024,
            authenticated: true,
        }
    }
}

/// The result of one parse step.
#[derive(Debug, PartialEq, Eq)]
pub enum ParsedCommand {
    /// A full command: `nargs` spans were pushed; its bytes end at `consumed`. When `inline` is
    /// true the spans point into the auxiliary buffer rather than the read buffer.
    Command {
        consumed: usize,
        nargs: usize,
        inline: bool,
    },
    /// An empty line or `*0`: nothing to run; skip to `consumed`.
    Empty { consumed: usize },
    /// More bytes are needed; `need` is the total buffer length worth retrying at (a hint).
    Incomplete { need: usize },
}

/// A protocol violation; the text follows `Protocol error: `.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtocolError(pub String);

impl std::fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Protocol error: {}", self.0)
    }
}

fn perr(msg: &str) -> ProtocolError {
    ProtocolError(msg.to_string())
}

/// Parses one command starting at `buf[pos..]`. Multibulk arguments are pushed to `spans` as
/// ranges of `buf`; inline arguments are unescaped into `aux` and their spans index `aux`.
pub fn parse_command(
    buf: &[u8],
    pos: usize,
    spans: &mut Vec<Span>,
    aux: &mut Vec<u8>,
    limits: &Limits,
) -> Result<ParsedCommand, ProtocolError> {
    if pos >= buf.len() {
        return Ok(ParsedCommand::Incomplete { need: pos + 1 });
    }
    if buf[pos] == b'*' {
        parse_multibulk(buf, pos, spans, limits)
    } else {
        parse_inline(buf, pos, spans, aux)
    }
}

/// Finds the `\r` ending a header line that starts at `from`; errors on overlong headers.
fn header_line(buf: &[u8], from: usize, what: &str) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..];
    match memchr(b'\r', window) {
        Some(i) => {
            // Redis needs the byte after '\r' present before it looks at the line.
            if from + i + 1 >= buf.len() {
                Ok(None)
            } else {
                Ok(Some(from + i))
            }
        }
        None if window.len() > INLINE_MAX => {
            Err(ProtocolError(format!("too big {what} count string")))
        }
        None => Ok(None),
    }
}

fn memchr(needle: u8, hay: &[u8]) -> Option<usize> {
    hay.iter().position(|&b| b == needle)
}

fn parse_multibulk(
    buf: &[u8],
    pos: usize,
    spans: &mut Vec<Span>,
    limits: &Limits,
) -> Result<ParsedCommand, ProtocolError> {
    let Some(cr) = header_line(buf, pos, "mbulk")? else {
        return Ok(ParsedCommand::Incomplete {
            need: buf.len() + 1,
        });
    };
    let count = parse_i64(&buf[pos + 1..cr]).ok_or_else(|| perr("invalid multibulk length"))?;
    if count > i64::from(i32::MAX) || (!limits.authenticated && count > 10) {
        return Err(perr("invalid multibulk length"));
    }
    let mut p = cr + 2;
    if count <= 0 {
        return Ok(ParsedCommand::Empty { consumed: p });
    }
    let mark = spans.len();
    for _ in 0..count {
        if p >= buf.len() {
            spans.truncate(mark);
            return Ok(ParsedCommand::Incomplete { need: p + 1 });
        }
        let Some(cr) = header_line(buf, p, "bulk")? else {
            spans.truncate(mark);
            return Ok(ParsedCommand::Incomplete {
                need: buf.len() + 1,
            });
        };
        if buf[p] != b'$' {
            spans.truncate(mark);
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(buf[p])
            )));
        }
        let len = parse_i64(&buf[p + 1..cr]).ok_or_else(|| perr("invalid bulk length"))?;
        let max = if limits.authenticated {
            limits.max_bulk_len
        } else {
            16384
        };
        if len < 0 || len as u64 > max || len as u64 > u64::from(u32::MAX) {
            spans.truncate(mark);
            return Err(perr("invalid bulk length"));
        }
        let start = cr + 2;
        let end = start + len as usize;
        // Like Redis, the two bytes after the payload are skipped, not checked.
        if end + 2 > buf.len() {
            spans.truncate(mark);
            return Ok(ParsedCommand::Incomplete { need: end + 2 });
        }
        spans.push(Span {
            start: start as u32,
            len: len as u32,
        });
        p = end + 2;
    }
    Ok(ParsedCommand::Command {
        consumed: p,
        nargs: count as usize,
        inline: false,
    })
}

fn parse_inline(
    buf: &[u8],
    pos: usize,
    spans: &mut Vec<Span>,
    aux: &mut Vec<u8>,
) -> Result<ParsedCommand, ProtocolError> {
    let window = &buf[pos..];
    let Some(nl) = memchr(b'\n', window) else {
        if window.len() > INLINE_MAX {
            return Err(perr("too big inline request"));
        }
        return Ok(ParsedCommand::Incomplete {
            need: buf.len() + 1,
        });
    };
    let mut line = &window[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let consumed = pos + nl + 1;
    let mark = spans.len();
    if !split_args(line, spans, aux) {
        spans.truncate(mark);
        return Err(perr("unbalanced quotes in request"));
    }
    let nargs = spans.len() - mark;
    if nargs == 0 {
        return Ok(ParsedCommand::Empty { consumed });
    }
    Ok(ParsedCommand::Command {
        consumed,
        nargs,
        inline: true,
    })
}

/// C's `isspace` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Splits an inline line like Redis's `sdssplitargs`: whitespace separated, with "double
/// quoted" (C escapes, \xHH) and 'single quoted' (only \') tokens. Returns false on unbalanced
/// quotes or a closing quote not followed by a space.
fn split_args(line: &[u8], spans: &mut Vec<Span>, aux: &mut Vec<u8>) -> bool {
    // sdssplitargs works on a C string: a NUL byte ends the line.
    let line = match memchr(0, line) {
        Some(z) => &line[..z],
        None => line,
    };
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && is_space(line[i]) {
            i += 1;
        }
        if i >= n {
            return true;
        }
        let start = aux.len();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return false;
                }
                let c = line[i];
                if c == b'\\' && i + 3 < n && line[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex_val(line[i + 2]), hex_val(line[i + 3])) {
                        aux.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < n {
                    aux.push(match line[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                } else if c == b'"' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return false;
                    }
                    i += 1;
                    break;
                } else {
                    aux.push(c);
                    i += 1;
                }
            } else if in_sq {
                if i >= n {
                    return false;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    aux.push(b'\'');
                    i += 2;
                } else if c == b'\'' {
                    if i + 1 < n && !is_space(line[i + 1]) {
                        return false;
                    }
                    i += 1;
                    break;
                } else {
                    aux.push(c);
                    i += 1;
                }
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => aux.push(c),
                }
                i += 1;
            }
        }
        spans.push(Span {
            start: start as u32,
            len: (aux.len() - start) as u32,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse_all(buf: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut pos = 0;
        let mut out = Vec::new();
        loop {
            let mut spans = Vec::new();
            let mut aux = Vec::new();
            match parse_command(buf, pos, &mut spans, &mut aux, &Limits::default())? {
                ParsedCommand::Command {
                    consumed, inline, ..
                } => {
                    let src: &[u8] = if inline { &aux } else { buf };
                    out.push(spans.iter().map(|s| src[s.range()].to_vec()).collect());
                    pos = consumed;
                }
                ParsedCommand::Empty { consumed } => pos = consumed,
                ParsedCommand::Incomplete { .. } => return Ok(out),
            }
        }
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut v = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            v.extend_from_slice(a);
            v.extend_from_slice(b"\r\n");
        }
        v
    }

    #[test]
    fn multibulk_and_inline() {
        let cmds = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nPING\r\nset  \"a b\" 'c\\'d'\r\n\r\n")
            .unwrap();
        assert_eq!(
            cmds,
            vec![
                vec![b"GET".to_vec(), b"k".to_vec()],
                vec![b"PING".to_vec()],
                vec![b"set".to_vec(), b"a b".to_vec(), b"c'd".to_vec()],
            ]
        );
    }

    #[test]
    fn inline_escapes() {
        let cmds = parse_all(b"echo \"\\x41\\n\"\n").unwrap();
        assert_eq!(cmds, vec![vec![b"echo".to_vec(), b"A\n".to_vec()]]);
    }

    #[test]
    fn redis_error_texts() {
        let err = |b: &[u8]| parse_all(b).unwrap_err().0;
        assert_eq!(err(b"*x\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*3000000000\r\n"), "invalid multibulk length");
        assert_eq!(err(b"*1\r\n+foo\r\n"), "expected '$', got '+'");
        assert_eq!(err(b"*1\r\n$-1\r\n"), "invalid bulk length");
        assert_eq!(err(b"*1\r\n$600000000\r\n"), "invalid bulk length");
        assert_eq!(err(b"set \"a\r\n"), "unbalanced quotes in request");
        assert_eq!(err(b"set \"a\"b\r\n"), "unbalanced quotes in request");
        assert_eq!(err(&vec![b'a'; INLINE_MAX + 1]), "too big inline request");
        let mut big = b"*1".to_vec();
        big.extend(vec![b'1'; INLINE_MAX + 1]);
        assert_eq!(err(&big), "too big mbulk count string");
    }

    #[test]
    fn unauthenticated_limits() {
        let lim = Limits {
            authenticated: false,
            ..Limits::default()
        };
        let mut spans = Vec::new();
        let mut aux = Vec::new();
        let r = parse_command(b"*11\r\n", 0, &mut spans, &mut aux, &lim);
        assert_eq!(r.unwrap_err().0, "invalid multibulk length");
        let r = parse_command(b"*1\r\n$16385\r\n", 0, &mut spans, &mut aux, &lim);
        assert_eq!(r.unwrap_err().0, "invalid bulk length");
    }

    #[test]
    fn empty_multibulk_is_skipped() {
        assert_eq!(
            parse_all(b"*0\r\n*-1\r\n").unwrap(),
            Vec::<Vec<Vec<u8>>>::new()
        );
    }

    proptest! {
        #[test]
        fn roundtrip(cmds in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6), 1..5)) {
            let mut wire = Vec::new();
            for c in &cmds { wire.extend(encode(c)); }
            prop_assert_eq!(parse_all(&wire).unwrap(), cmds.clone());
        }

        #[test]
        fn split_anywhere_is_incomplete_then_whole(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6),
            cut in 0usize..400) {
            let wire = encode(&args);
            let cut = cut % wire.len();
            let mut spans = Vec::new();
            let mut aux = Vec::new();
            let r = parse_command(&wire[..cut], 0, &mut spans, &mut aux, &Limits::default()).unwrap();
            let incomplete = matches!(r, ParsedCommand::Incomplete { .. });
            prop_assert!(incomplete);
            prop_assert!(spans.is_empty());
            prop_assert_eq!(parse_all(&wire).unwrap(), vec![args]);
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse_all(&bytes);
            let mut with_star = b"*".to_vec();
            with_star.extend(&bytes);
            let _ = parse_all(&with_star);
        }

        #[test]
        fn agrees_with_redis_protocol_crate(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6)) {
            let wire = encode(&args);
            let (frame, used) = redis_protocol::resp2::decode::decode(&wire).unwrap().unwrap();
            prop_assert_eq!(used, wire.len());
            let theirs: Vec<Vec<u8>> = match frame {
                redis_protocol::resp2::types::OwnedFrame::Array(items) => items
                    .into_iter()
                    .map(|f| match f {
                        redis_protocol::resp2::types::OwnedFrame::BulkString(b) => b,
                        other => panic!("unexpected {other:?}"),
                    })
                    .collect(),
                other => panic!("unexpected {other:?}"),
            };
            prop_assert_eq!(parse_all(&wire).unwrap(), vec![theirs]);
        }
    }
}
