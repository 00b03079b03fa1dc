//! The line a MONITOR client receives for each command, as Redis writes it
//! (replicationFeedMonitors): `+<seconds>.<microseconds> [<db> <origin>] "<arg>" ...`, each
//! argument quoted as sdscatrepr quotes it, secrets redacted.

use std::io::Write;

const REDACTED: &[u8] = b"(redacted)";

/// Positions of the arguments Redis hides from monitors: AUTH's, HELLO's and MIGRATE's
/// credentials.
fn secret(args: &[&[u8]], i: usize) -> bool {
    let name = args
        .first()
        .map(|n| n.to_ascii_lowercase())
        .unwrap_or_default();
    let after = |token: &[u8], span: usize| {
        (1..i)
            .rev()
            .take(span)
            .any(|j| args[j].eq_ignore_ascii_case(token))
    };
    match name.as_slice() {
        b"auth" => i > 0,
        b"hello" => after(b"auth", 2),
        b"migrate" => after(b"auth", 1) || after(b"auth2", 2),
        _ => false,
    }
}

/// Appends `arg` in double quotes with Redis's escapes.
fn quote(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'"');
    for &b in arg {
        match b {
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'"' => out.extend_from_slice(b"\\\""),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            0x20..=0x7e => out.push(b),
            _ => {
                let _ = write!(out, "\\x{b:02x}");
            }
        }
    }
    out.push(b'"');
}

/// The whole line, with its line end. `micros` is the wall-clock time in microseconds since
/// the epoch; `origin` the client's address, `unix:<path>` or `lua`.
pub fn monitor_line(micros: u64, db: usize, origin: &str, args: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(48 + args.iter().map(|a| a.len() + 3).sum::<usize>());
    let _ = write!(
        out,
        "+{}.{:06} [{db} {origin}]",
        micros / 1_000_000,
        micros % 1_000_000
    );
    for (i, arg) in args.iter().enumerate() {
        out.push(b' ');
        quote(&mut out, if secret(args, i) { REDACTED } else { arg });
    }
    out.extend_from_slice(b"\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(args: &[&str]) -> String {
        let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        String::from_utf8(monitor_line(
            1_796_173_169_000_042,
            2,
            "127.0.0.1:6000",
            &args,
        ))
        .unwrap()
    }

    #[test]
    fn lines_quote_and_redact_as_redis_does() {
        assert_eq!(
            line(&["SET", "d2", "x y\"\n\u{1}\\"]),
            "+1796173169.000042 [2 127.0.0.1:6000] \"SET\" \"d2\" \"x y\\\"\\n\\x01\\\\\"\r\n"
        );
        assert_eq!(
            line(&["AUTH", "u", "p"]),
            "+1796173169.000042 [2 127.0.0.1:6000] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            line(&["HELLO", "3", "SETNAME", "x", "AUTH", "u", "p"]),
            "+1796173169.000042 [2 127.0.0.1:6000] \"HELLO\" \"3\" \"SETNAME\" \"x\" \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            line(&["MIGRATE", "h", "1", "k", "0", "10", "AUTH", "pw", "KEYS"]),
            "+1796173169.000042 [2 127.0.0.1:6000] \"MIGRATE\" \"h\" \"1\" \"k\" \"0\" \"10\" \"AUTH\" \"(redacted)\" \"KEYS\"\r\n"
        );
    }
}
