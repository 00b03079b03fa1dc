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
    pub start: usize,
    pub len: usize,
}

impl Span {
    pub fn range(self) -> std::ops::Range<usize> {
        self.start..self.start + self.len
    }

    /// Appends one argument to arguments laid out by hand (a journal record, a queued
    /// command, a test): its bytes to `buf`, its span to `spans`.
    pub fn push_arg(buf: &mut Vec<u8>, spans: &mut Vec<Span>, arg: &[u8]) {
        spans.push(Span {
            start: buf.len(),
            len: arg.len(),
        });
        buf.extend_from_slice(arg);
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

/// Parses one command starting at `buf[pos..]` with no memory of earlier reads (tests and
/// tools; a connection keeps a [`RequestParser`]).
pub fn parse_command(
    buf: &[u8],
    pos: usize,
    spans: &mut Vec<Span>,
    aux: &mut Vec<u8>,
    limits: &Limits,
) -> Result<ParsedCommand, ProtocolError> {
    RequestParser::default().parse(buf, pos, spans, aux, limits)
}

/// The longest argument list kept for reuse: a 200,000-key MSET's is released after it.
const SPARE_ARGS_MAX: usize = 1024;

/// A connection's request parser. It remembers how far it got through a command that has not
/// fully arrived, so each byte of a large request arriving in pieces is examined once, not
/// once per read (a 200,000-argument MSET sent in 16 KB writes would otherwise cost O(n^2)).
#[derive(Debug, Default)]
pub struct RequestParser {
    progress: Option<Progress>,
    /// Argument headers (`$<len>` lines) parsed so far: lets tests bound the work per byte.
    headers_parsed: u64,
    /// The argument list of the last finished command, kept for the next one, so parsing a
    /// command allocates nothing once the list has grown to the commands a client sends.
    spare_args: Vec<Span>,
}

/// An unfinished command: where it starts in the buffer and what is known of it.
#[derive(Debug)]
struct Progress {
    start: usize,
    state: State,
}

#[derive(Debug)]
enum State {
    /// The first line (an inline command, or a multibulk's `*<count>`) has not ended yet:
    /// its first `scanned` bytes hold no line end.
    Line {
        scanned: usize,
    },
    Multibulk(Multibulk),
}

/// A multibulk command part of which has arrived. Offsets are relative to its first byte,
/// so they stay valid when the caller moves the unparsed bytes within its buffer.
#[derive(Debug)]
struct Multibulk {
    count: usize,
    /// The arguments parsed so far.
    args: Vec<Span>,
    /// Where the next argument's `$<len>` header starts.
    next: usize,
    /// Bytes of that header already known to hold no `\r`.
    scanned: usize,
    /// The next argument's header has been parsed; its payload is `bulk`.
    bulk: Option<Span>,
}

impl RequestParser {
    /// Parses one command starting at `buf[pos..]`. Multibulk arguments are pushed to `spans`
    /// as ranges of `buf`; inline arguments are unescaped into `aux` and their spans index
    /// `aux`. After `Incomplete`, call again with the same `pos` (adjusted by
    /// [`Self::moved`]) once more bytes arrived: parsing resumes where it stopped. The bytes
    /// of an unfinished command must not change between calls.
    pub fn parse(
        &mut self,
        buf: &[u8],
        pos: usize,
        spans: &mut Vec<Span>,
        aux: &mut Vec<u8>,
        limits: &Limits,
    ) -> Result<ParsedCommand, ProtocolError> {
        // Progress belongs to the command it was made for. A caller that went back to an
        // earlier command (one that waited behind a blocked command, say) parses that one
        // fresh and finds the progress again when it gets back to the unfinished command.
        let state = match &self.progress {
            Some(p) if p.start == pos => self.progress.take().map(|p| p.state),
            _ => None,
        };
        if pos >= buf.len() {
            return Ok(ParsedCommand::Incomplete { need: pos + 1 });
        }
        let (result, state) = if buf[pos] == b'*' {
            self.parse_multibulk(buf, pos, state, spans, limits)
        } else {
            parse_inline(buf, pos, state, spans, aux)
        };
        if let (Ok(ParsedCommand::Incomplete { .. }), Some(state)) = (&result, state) {
            self.progress = Some(Progress { start: pos, state });
        }
        result
    }

    /// The caller dropped the first `shift` bytes of its buffer (moving the rest to the
    /// front): an unfinished command it kept moved with it.
    pub fn moved(&mut self, shift: usize) {
        match &mut self.progress {
            Some(p) if p.start >= shift => p.start -= shift,
            _ => self.progress = None,
        }
    }

    /// Argument headers parsed since this parser was created.
    pub fn headers_parsed(&self) -> u64 {
        self.headers_parsed
    }

    fn parse_multibulk(
        &mut self,
        buf: &[u8],
        pos: usize,
        state: Option<State>,
        spans: &mut Vec<Span>,
        limits: &Limits,
    ) -> (Result<ParsedCommand, ProtocolError>, Option<State>) {
        let mut m = match state {
            Some(State::Multibulk(m)) => m,
            other => {
                let mut scanned = match other {
                    Some(State::Line { scanned }) => scanned,
                    _ => 0,
                };
                let cr = match line_end(buf, pos, &mut scanned, "mbulk") {
                    Ok(Some(cr)) => cr,
                    Ok(None) => {
                        let need = buf.len() + 1;
                        return (
                            Ok(ParsedCommand::Incomplete { need }),
                            Some(State::Line { scanned }),
                        );
                    }
                    Err(e) => return (Err(e), None),
                };
                let count = match parse_i64(&buf[pos + 1..cr]) {
                    Some(n) if n <= i64::from(i32::MAX) && (limits.authenticated || n <= 10) => n,
                    _ => return (Err(perr("invalid multibulk length")), None),
                };
                let Ok(count) = usize::try_from(count) else {
                    return (Ok(ParsedCommand::Empty { consumed: cr + 2 }), None);
                };
                if count == 0 {
                    return (Ok(ParsedCommand::Empty { consumed: cr + 2 }), None);
                }
                let mut args = std::mem::take(&mut self.spare_args);
                args.clear();
                // The count is the client's word: reserve for what arrives, not for it.
                args.reserve(count.min(64));
                Multibulk {
                    count,
                    args,
                    next: cr + 2 - pos,
                    scanned: 0,
                    bulk: None,
                }
            }
        };
        while m.args.len() < m.count {
            let bulk = match m.bulk {
                Some(bulk) => bulk,
                None => match self.bulk_header(buf, pos, &mut m, limits) {
                    Ok(Some(bulk)) => bulk,
                    Ok(None) => {
                        let need = (pos + m.next + m.scanned).max(buf.len()) + 1;
                        return (
                            Ok(ParsedCommand::Incomplete { need }),
                            Some(State::Multibulk(m)),
                        );
                    }
                    Err(e) => return (Err(e), None),
                },
            };
            // Like Redis, the two bytes after the payload are skipped, not checked.
            let end = pos + bulk.start + bulk.len + 2;
            if end > buf.len() {
                m.bulk = Some(bulk);
                return (
                    Ok(ParsedCommand::Incomplete { need: end }),
                    Some(State::Multibulk(m)),
                );
            }
            m.args.push(bulk);
            m.bulk = None;
            m.next = end - pos;
            m.scanned = 0;
        }
        spans.extend(m.args.iter().map(|s| Span {
            start: s.start + pos,
            len: s.len,
        }));
        if m.args.capacity() <= SPARE_ARGS_MAX {
            self.spare_args = m.args;
        }
        (
            Ok(ParsedCommand::Command {
                consumed: pos + m.next,
                nargs: m.count,
                inline: false,
            }),
            None,
        )
    }

    /// Parses the `$<len>` header of the next argument of `m`; its payload's span (relative
    /// to `pos`), or None until the header has fully arrived.
    fn bulk_header(
        &mut self,
        buf: &[u8],
        pos: usize,
        m: &mut Multibulk,
        limits: &Limits,
    ) -> Result<Option<Span>, ProtocolError> {
        let p = pos + m.next;
        if p >= buf.len() {
            return Ok(None);
        }
        let Some(cr) = line_end(buf, p, &mut m.scanned, "bulk")? else {
            return Ok(None);
        };
        self.headers_parsed += 1;
        if buf[p] != b'$' {
            return Err(ProtocolError(format!(
                "expected '$', got '{}'",
                char::from(buf[p])
            )));
        }
        let max = if limits.authenticated {
            limits.max_bulk_len
        } else {
            16384
        };
        let len = parse_i64(&buf[p + 1..cr])
            .and_then(|n| u64::try_from(n).ok())
            .filter(|&n| n <= max)
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| perr("invalid bulk length"))?;
        Ok(Some(Span {
            start: cr + 2 - pos,
            len,
        }))
    }
}

/// Finds the `\r` ending a header line that starts at `from`. `scanned` bytes of the line are
/// already known to hold none and is advanced past what this call searched. Errors on
/// overlong headers, as Redis does.
fn line_end(
    buf: &[u8],
    from: usize,
    scanned: &mut usize,
    what: &str,
) -> Result<Option<usize>, ProtocolError> {
    let window = &buf[from..];
    match memchr::memchr(b'\r', &window[(*scanned).min(window.len())..]) {
        Some(i) => {
            let cr = from + *scanned + i;
            // Redis needs the byte after '\r' present before it looks at the line.
            if cr + 1 >= buf.len() {
                *scanned = cr - from;
                Ok(None)
            } else {
                Ok(Some(cr))
            }
        }
        None if window.len() > INLINE_MAX => {
            Err(ProtocolError(format!("too big {what} count string")))
        }
        None => {
            *scanned = window.len();
            Ok(None)
        }
    }
}

fn parse_inline(
    buf: &[u8],
    pos: usize,
    state: Option<State>,
    spans: &mut Vec<Span>,
    aux: &mut Vec<u8>,
) -> (Result<ParsedCommand, ProtocolError>, Option<State>) {
    let scanned = match state {
        Some(State::Line { scanned }) => scanned,
        _ => 0,
    };
    let window = &buf[pos..];
    let Some(nl) = memchr::memchr(b'\n', &window[scanned.min(window.len())..]).map(|i| i + scanned)
    else {
        if window.len() > INLINE_MAX {
            return (Err(perr("too big inline request")), None);
        }
        let scanned = window.len();
        return (
            Ok(ParsedCommand::Incomplete {
                need: buf.len() + 1,
            }),
            Some(State::Line { scanned }),
        );
    };
    let mut line = &window[..nl];
    if line.last() == Some(&b'\r') {
        line = &line[..line.len() - 1];
    }
    let consumed = pos + nl + 1;
    let mark = spans.len();
    if !split_args(line, spans, aux) {
        spans.truncate(mark);
        return (Err(perr("unbalanced quotes in request")), None);
    }
    let nargs = spans.len() - mark;
    if nargs == 0 {
        return (Ok(ParsedCommand::Empty { consumed }), None);
    }
    (
        Ok(ParsedCommand::Command {
            consumed,
            nargs,
            inline: true,
        }),
        None,
    )
}

/// C's `isspace` in the C locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r')
}

fn hex_val(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

/// Splits a line into arguments as Redis's `sdssplitargs` does (inline commands, script
/// shebangs, library headers). None on unbalanced quotes.
pub fn split_line(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut spans = Vec::new();
    let mut aux = Vec::new();
    if !split_args(line, &mut spans, &mut aux) {
        return None;
    }
    Some(spans.iter().map(|s| aux[s.range()].to_vec()).collect())
}

/// Splits an inline line like Redis's `sdssplitargs`: whitespace separated, with "double
/// quoted" (C escapes, \xHH) and 'single quoted' (only \') tokens. Returns false on unbalanced
/// quotes or a closing quote not followed by a space.
fn split_args(line: &[u8], spans: &mut Vec<Span>, aux: &mut Vec<u8>) -> bool {
    // sdssplitargs works on a C string: a NUL byte ends the line.
    let line = match memchr::memchr(0, line) {
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
            start,
            len: aux.len() - start,
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

    /// Feeds `wire` to one parser in pieces of `chunk` bytes, parsing after every piece as a
    /// connection does; returns the commands and the parser.
    fn parse_in_pieces(wire: &[u8], chunk: usize) -> (Vec<Vec<Vec<u8>>>, RequestParser) {
        let mut parser = RequestParser::default();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut end = 0;
        while end < wire.len() {
            end = (end + chunk).min(wire.len());
            loop {
                let mut spans = Vec::new();
                let mut aux = Vec::new();
                match parser.parse(&wire[..end], pos, &mut spans, &mut aux, &Limits::default()) {
                    Ok(ParsedCommand::Command {
                        consumed, inline, ..
                    }) => {
                        let src: &[u8] = if inline { &aux } else { &wire[..end] };
                        out.push(spans.iter().map(|s| src[s.range()].to_vec()).collect());
                        pos = consumed;
                    }
                    Ok(ParsedCommand::Empty { consumed }) => pos = consumed,
                    Ok(ParsedCommand::Incomplete { .. }) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        (out, parser)
    }

    #[test]
    fn a_large_request_in_pieces_parses_each_header_once() {
        let args: Vec<Vec<u8>> = std::iter::once(b"MSET".to_vec())
            .chain((0..20_000).flat_map(|i| [format!("key:{i}").into_bytes(), vec![b'v'; 20]]))
            .collect();
        let wire = encode(&args);
        for chunk in [1, 7, 4096, 16 * 1024] {
            let (cmds, parser) = parse_in_pieces(&wire, chunk);
            assert_eq!(cmds, vec![args.clone()], "chunk {chunk}");
            // Without kept progress every read would re-parse every header before it.
            assert_eq!(parser.headers_parsed(), args.len() as u64, "chunk {chunk}");
        }
    }

    #[test]
    fn progress_follows_moved_bytes_and_is_dropped_elsewhere() {
        let wire = encode(&[b"SET".to_vec(), b"k".to_vec(), b"value".to_vec()]);
        let mut parser = RequestParser::default();
        let (mut spans, mut aux) = (Vec::new(), Vec::new());
        let lim = Limits::default();
        // The command starts at 3 behind three bytes of an earlier one; half of it arrives.
        let mut buf = b"xyz".to_vec();
        buf.extend_from_slice(&wire[..18]);
        let r = parser.parse(&buf, 3, &mut spans, &mut aux, &lim).unwrap();
        assert!(matches!(r, ParsedCommand::Incomplete { .. }));
        assert_eq!(parser.headers_parsed(), 2);
        // Going back to an earlier command keeps the progress for the unfinished one.
        let ping = b"*1\r\n$4\r\nPING\r\n";
        let r = parser
            .parse(ping, 0, &mut Vec::new(), &mut aux, &lim)
            .unwrap();
        assert!(matches!(r, ParsedCommand::Command { nargs: 1, .. }));
        // The caller drops the three bytes before the partial command, then the rest arrives.
        parser.moved(3);
        let r = parser.parse(&wire, 0, &mut spans, &mut aux, &lim).unwrap();
        assert_eq!(
            r,
            ParsedCommand::Command {
                consumed: wire.len(),
                nargs: 3,
                inline: false
            }
        );
        assert_eq!(
            parser.headers_parsed(),
            4,
            "SET's two, PING's, then SET's last"
        );
        let got: Vec<&[u8]> = spans.iter().map(|s| &wire[s.range()]).collect();
        assert_eq!(got, vec![&b"SET"[..], b"k", b"value"]);
        // Dropping the bytes of an unfinished command drops its progress.
        spans.clear();
        let r = parser
            .parse(&wire[..18], 0, &mut spans, &mut aux, &lim)
            .unwrap();
        assert!(matches!(r, ParsedCommand::Incomplete { .. }));
        parser.moved(5);
        let other = encode(&[b"GET".to_vec(), b"key".to_vec()]);
        let r = parser.parse(&other, 0, &mut spans, &mut aux, &lim).unwrap();
        assert!(matches!(r, ParsedCommand::Command { nargs: 2, .. }));
        assert_eq!(&other[spans[1].range()], b"key");
    }

    #[test]
    fn a_long_inline_line_in_single_bytes_is_scanned_once() {
        let mut line = b"SET k ".to_vec();
        line.extend(vec![b'a'; 60_000]);
        line.extend_from_slice(b"\r\n");
        let (cmds, _) = parse_in_pieces(&line, 1);
        assert_eq!(cmds.len(), 1);
        assert_eq!(cmds[0][2].len(), 60_000);
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
        fn any_split_parses_like_the_whole(
            cmds in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..40), 1..6), 1..5),
            chunk in 1usize..64) {
            let mut wire = Vec::new();
            for c in &cmds { wire.extend(encode(c)); }
            prop_assert_eq!(parse_in_pieces(&wire, chunk).0, cmds);
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
