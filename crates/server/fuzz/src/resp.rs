//! A strict RESP2/RESP3 reply reader: any byte out of place is a framing bug in the server.

use std::io::BufRead;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// `+`, `-`, `:`, `_`, `#`, `,`, `(`: the type byte and the line.
    Line(u8, Vec<u8>),
    /// `$`, `=`, `!`: the payload, None for RESP2's null bulk.
    Blob(u8, Option<Vec<u8>>),
    /// `*`, `~`, `%` (keys and values in turn): None for RESP2's null array.
    Aggregate(u8, Option<Vec<Reply>>),
}

impl Reply {
    pub fn is_error(&self) -> bool {
        matches!(self, Reply::Line(b'-', _) | Reply::Blob(b'!', _))
    }

    /// An error's text, or the empty string.
    pub fn error_text(&self) -> &[u8] {
        match self {
            Reply::Line(b'-', t) | Reply::Blob(b'!', Some(t)) => t,
            _ => b"",
        }
    }
}

#[derive(Debug)]
pub enum ReadError {
    /// The connection closed (or a read failed) before a whole reply arrived.
    Io(std::io::Error),
    /// The bytes are not RESP.
    Malformed(String),
}

impl From<std::io::Error> for ReadError {
    fn from(e: std::io::Error) -> Self {
        ReadError::Io(e)
    }
}

fn malformed(what: impl Into<String>) -> ReadError {
    ReadError::Malformed(what.into())
}

/// A line ending in exactly `\r\n`, without it; no other `\r` or `\n` inside.
fn line(r: &mut impl BufRead) -> Result<Vec<u8>, ReadError> {
    let mut l = Vec::new();
    r.read_until(b'\n', &mut l)?;
    if l.last() != Some(&b'\n') {
        return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into()));
    }
    if l.len() < 2 || l[l.len() - 2] != b'\r' {
        return Err(malformed(format!(
            "line not ended by CRLF: {:?}",
            String::from_utf8_lossy(&l)
        )));
    }
    l.truncate(l.len() - 2);
    if l.iter().any(|&c| c == b'\r' || c == b'\n') {
        return Err(malformed(format!(
            "CR or LF inside a line: {:?}",
            String::from_utf8_lossy(&l)
        )));
    }
    Ok(l)
}

fn int(body: &[u8]) -> Result<i64, ReadError> {
    damselfly_protocol::number::parse_i64(body).ok_or_else(|| {
        malformed(format!(
            "not an integer: {:?}",
            String::from_utf8_lossy(body)
        ))
    })
}

/// Reads one reply; `>` push messages and MONITOR lines before it are skipped (they are not
/// replies).
pub fn read_reply(r: &mut impl BufRead) -> Result<Reply, ReadError> {
    loop {
        match read_value(r, 0)? {
            Some(Reply::Line(b'+', line)) if is_monitor_line(&line) => {}
            Some(reply) => return Ok(reply),
            None => {}
        }
    }
}

/// `<seconds>.<micros> [<db> ...`: what MONITOR sends. No command's status reply looks like
/// it (a script could return one, but the fuzzer writes no Lua).
fn is_monitor_line(line: &[u8]) -> bool {
    let digits = |s: &[u8]| !s.is_empty() && s.iter().all(u8::is_ascii_digit);
    let mut words = line.splitn(2, |&b| b == b' ');
    let (Some(time), Some(rest)) = (words.next(), words.next()) else {
        return false;
    };
    let mut parts = time.splitn(2, |&b| b == b'.');
    let (Some(secs), Some(micros)) = (parts.next(), parts.next()) else {
        return false;
    };
    digits(secs) && digits(micros) && rest.starts_with(b"[")
}

/// None for a push message.
fn read_value(r: &mut impl BufRead, depth: usize) -> Result<Option<Reply>, ReadError> {
    if depth > 64 {
        return Err(malformed("replies nested deeper than 64"));
    }
    let l = line(r)?;
    let Some((&kind, body)) = l.split_first() else {
        return Err(malformed("empty line where a reply starts"));
    };
    let body = body.to_vec();
    let reply = match kind {
        b'+' | b'-' => Reply::Line(kind, body),
        b':' => {
            int(&body)?;
            Reply::Line(kind, body)
        }
        b'_' if body.is_empty() => Reply::Line(kind, body),
        b'#' if body == b"t" || body == b"f" => Reply::Line(kind, body),
        b',' => {
            let text = std::str::from_utf8(&body).map_err(|_| malformed("double not UTF-8"))?;
            if !matches!(text, "inf" | "-inf" | "nan") && text.parse::<f64>().is_err() {
                return Err(malformed(format!("not a double: {text:?}")));
            }
            Reply::Line(kind, body)
        }
        b'(' => {
            let digits = body.strip_prefix(b"-").unwrap_or(&body);
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(malformed("bad big number"));
            }
            Reply::Line(kind, body)
        }
        b'$' | b'=' | b'!' => {
            let n = int(&body)?;
            if n == -1 && kind == b'$' {
                Reply::Blob(kind, None)
            } else if n < 0 {
                return Err(malformed(format!("negative length {n}")));
            } else {
                let mut payload = vec![0u8; n as usize + 2];
                r.read_exact(&mut payload)?;
                if !payload.ends_with(b"\r\n") {
                    return Err(malformed("blob not followed by CRLF"));
                }
                payload.truncate(n as usize);
                if kind == b'=' && (payload.len() < 4 || payload[3] != b':') {
                    return Err(malformed("verbatim string without its 3-letter format"));
                }
                Reply::Blob(kind, Some(payload))
            }
        }
        b'*' | b'~' | b'%' | b'>' | b'|' => {
            let n = int(&body)?;
            if n == -1 && kind == b'*' {
                return Ok(Some(Reply::Aggregate(kind, None)));
            }
            if n < 0 {
                return Err(malformed(format!("negative count {n}")));
            }
            let items = if matches!(kind, b'%' | b'|') {
                n * 2
            } else {
                n
            };
            let mut v = Vec::new();
            for _ in 0..items {
                match read_value(r, depth + 1)? {
                    Some(item) => v.push(item),
                    None => return Err(malformed("push message inside a reply")),
                }
            }
            match kind {
                b'>' => return Ok(None),
                // An attribute describes the reply that follows it.
                b'|' => return read_value(r, depth),
                _ => Reply::Aggregate(kind, Some(v)),
            }
        }
        _ => {
            return Err(malformed(format!(
                "unknown reply type {:?}",
                char::from(kind)
            )))
        }
    };
    Ok(Some(reply))
}
