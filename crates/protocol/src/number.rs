//! Number parsing and formatting with Redis's exact rules (`string2ll`, `%.17g`).

/// Parses a signed 64-bit integer the way Redis's `string2ll` does: optional `-`, no `+`, no
/// leading zeros (except "0" itself), no spaces, no overflow.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || digits[0] == b'0' {
        return None;
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > (i64::MAX as u64) + 1 {
            None
        } else {
            Some((v as i64).wrapping_neg())
        }
    } else if v > i64::MAX as u64 {
        None
    } else {
        Some(v as i64)
    }
}

/// Parses an unsigned decimal the way `string2ull` does (used for cursors).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s[0] == b'-' {
        return None;
    }
    let mut v: u64 = 0;
    for &c in s {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    Some(v)
}

/// Parses a double the way Redis's `string2d` does (strtod, whole string consumed, no leading
/// space, NaN rejected, and strtod's ERANGE: overflow to infinity or underflow to zero is an
/// error). Accepts `inf`, `+inf`, `-inf`.
pub fn parse_f64(s: &[u8]) -> Option<f64> {
    if s.is_empty() || s[0].is_ascii_whitespace() || s.len() > 5000 {
        return None;
    }
    let text = std::str::from_utf8(s).ok()?;
    let lower = text.to_ascii_lowercase();
    let v = match lower.trim_start_matches(['+', '-']) {
        "inf" | "infinity" => {
            if lower.starts_with('-') {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        }
        _ => {
            if lower.contains("nan") || lower.ends_with(char::is_whitespace) {
                return None;
            }
            let v = text.parse::<f64>().ok()?;
            let underflow = v == 0.0 && mantissa_digits(text).any(|d| d != b'0');
            if v.is_infinite() || underflow {
                return None;
            }
            v
        }
    };
    if v.is_nan() {
        None
    } else {
        Some(v)
    }
}

/// The digits of a decimal number's mantissa (before any exponent).
fn mantissa_digits(text: &str) -> impl Iterator<Item = u8> + '_ {
    text.bytes()
        .take_while(|b| !matches!(b, b'e' | b'E'))
        .filter(u8::is_ascii_digit)
}

/// Formats with C's `%.17g`, which is what Redis 7.0 uses for double replies.
pub fn format_f64_17g(v: f64, out: &mut Vec<u8>) {
    if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    let mut buf = [0u8; 64];
    // SAFETY: the buffer is large enough for any %.17g rendering and snprintf NUL-terminates.
    let n = unsafe { libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.17g".as_ptr(), v) };
    let n = usize::try_from(n).unwrap_or(0).min(buf.len() - 1);
    out.extend_from_slice(&buf[..n]);
}

/// Appends the decimal form of `v`.
pub fn push_i64(out: &mut Vec<u8>, v: i64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    let mut n = v.unsigned_abs();
    loop {
        i -= 1;
        tmp[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&tmp[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string2ll_rules() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-1"), Some(-1));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        assert_eq!(parse_i64(b"01"), None);
        assert_eq!(parse_i64(b"+1"), None);
        assert_eq!(parse_i64(b" 1"), None);
        assert_eq!(parse_i64(b"-0"), None);
        assert_eq!(parse_i64(b"-"), None);
        assert_eq!(parse_i64(b""), None);
    }

    #[test]
    fn double_formatting_matches_printf() {
        let mut out = Vec::new();
        format_f64_17g(0.1, &mut out);
        assert_eq!(out, b"0.10000000000000001");
        out.clear();
        format_f64_17g(3.0, &mut out);
        assert_eq!(out, b"3");
        out.clear();
        format_f64_17g(f64::NEG_INFINITY, &mut out);
        assert_eq!(out, b"-inf");
    }

    #[test]
    fn parse_double_rules() {
        assert_eq!(parse_f64(b"1.5"), Some(1.5));
        assert_eq!(parse_f64(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_f64(b"nan"), None);
        assert_eq!(parse_f64(b" 1"), None);
        assert_eq!(parse_f64(b"1 "), None);
        // strtod's ERANGE: overflow and underflow to zero are errors, subnormals are not.
        assert_eq!(parse_f64(b"1e400"), None);
        assert_eq!(parse_f64(b"1e-400"), None);
        assert_eq!(parse_f64(b"0e-400"), Some(0.0));
        assert!(parse_f64(b"5e-324").is_some());
        assert_eq!(parse_f64(b"abc"), None);
    }

    proptest::proptest! {
        #[test]
        fn i64_roundtrip(v: i64) {
            let mut out = Vec::new();
            push_i64(&mut out, v);
            proptest::prop_assert_eq!(parse_i64(&out), Some(v));
            proptest::prop_assert_eq!(out, v.to_string().into_bytes());
        }
    }
}
