//! A reference for the inline splitter: Redis's `sdssplitargs` (sds.c) and the framing of
//! `processInlineBuffer` (networking.c), transliterated from the C to be easy to compare with
//! it line by line rather than fast. It shares no code with the parser under test.

/// Redis's PROTO_INLINE_MAX_SIZE.
const PROTO_INLINE_MAX_SIZE: usize = 64 * 1024;

/// C's `isspace` in the C locale.
fn isspace(c: u8) -> bool {
    c == b' ' || c == b'\t' || c == b'\n' || c == 0x0b || c == 0x0c || c == b'\r'
}

fn is_hex_digit(c: u8) -> bool {
    c.is_ascii_hexdigit()
}

fn hex_digit_to_int(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        b'A'..=b'F' => c - b'A' + 10,
        _ => 0,
    }
}

/// `sdssplitargs(line)`: None where the C returns NULL (unbalanced quotes, or a closing quote
/// followed by something other than a space).
pub fn sdssplitargs(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    // The C reads a NUL-terminated string: `at(i)` is `*(p)` with the terminator past the end,
    // and a NUL inside the line ends it.
    let at = |i: usize| -> u8 { line.get(i).copied().unwrap_or(0) };
    let mut p = 0usize;
    let mut vector = Vec::new();
    loop {
        // skip blanks
        while at(p) != 0 && isspace(at(p)) {
            p += 1;
        }
        if at(p) == 0 {
            return Some(vector);
        }
        // get a token
        let mut inq = false;
        let mut insq = false;
        let mut done = false;
        let mut current = Vec::new();
        while !done {
            if inq {
                if at(p) == b'\\'
                    && at(p + 1) == b'x'
                    && is_hex_digit(at(p + 2))
                    && is_hex_digit(at(p + 3))
                {
                    current.push(hex_digit_to_int(at(p + 2)) * 16 + hex_digit_to_int(at(p + 3)));
                    p += 3;
                } else if at(p) == b'\\' && at(p + 1) != 0 {
                    p += 1;
                    current.push(match at(p) {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        c => c,
                    });
                } else if at(p) == b'"' {
                    // closing quote must be followed by a space or nothing at all
                    if at(p + 1) != 0 && !isspace(at(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if at(p) == 0 {
                    // unterminated quotes
                    return None;
                } else {
                    current.push(at(p));
                }
            } else if insq {
                if at(p) == b'\\' && at(p + 1) == b'\'' {
                    p += 1;
                    current.push(b'\'');
                } else if at(p) == b'\'' {
                    if at(p + 1) != 0 && !isspace(at(p + 1)) {
                        return None;
                    }
                    done = true;
                } else if at(p) == 0 {
                    return None;
                } else {
                    current.push(at(p));
                }
            } else {
                match at(p) {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => done = true,
                    b'"' => inq = true,
                    b'\'' => insq = true,
                    c => current.push(c),
                }
            }
            if at(p) != 0 {
                p += 1;
            }
        }
        vector.push(current);
    }
}

/// What `processInlineBuffer` makes of the buffer from `pos`, which does not start with `*`.
#[derive(Debug, PartialEq, Eq)]
pub enum Inline {
    /// No newline yet, and not too long: wait for more.
    Incomplete,
    /// "too big inline request" or "unbalanced quotes in request".
    Error(&'static str),
    /// The line's arguments (none for a blank line) and where the next request starts.
    Line { args: Vec<Vec<u8>>, consumed: usize },
}

pub fn process_inline(buf: &[u8], pos: usize) -> Inline {
    let window = &buf[pos..];
    // Redis looks for the newline with strchr, which would stop at a NUL; Damselfly's parser
    // searches the whole buffer (and sdssplitargs then stops at the NUL). The reference follows
    // Damselfly here, where Redis would wait for more input.
    let Some(newline) = window.iter().position(|&c| c == b'\n') else {
        if window.len() > PROTO_INLINE_MAX_SIZE {
            return Inline::Error("too big inline request");
        }
        return Inline::Incomplete;
    };
    let mut querylen = newline;
    // Handle the \r\n case.
    if newline != 0 && window[newline - 1] == b'\r' {
        querylen -= 1;
    }
    match sdssplitargs(&window[..querylen]) {
        None => Inline::Error("unbalanced quotes in request"),
        Some(args) => Inline::Line {
            args,
            consumed: pos + newline + 1,
        },
    }
}
