//! The options of SCAN, HSCAN, SSCAN and ZSCAN (`MATCH`, `COUNT`, and `TYPE` for SCAN only),
//! parsed once with Redis's errors, and the reply they share.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::glob::glob_match;
use damselfly_storage::Collection;

use crate::{errors, Args, ExecCtx};

pub struct ScanArgs<'a> {
    pub count: usize,
    pub pattern: Option<&'a [u8]>,
    pub type_filter: Option<&'a [u8]>,
}

impl<'a> ScanArgs<'a> {
    /// Parses options from argument `from` on; `allow_type` for SCAN.
    pub fn parse(args: &Args<'a>, from: usize, allow_type: bool) -> Result<Self, &'static str> {
        let mut out = ScanArgs {
            count: 10,
            pattern: None,
            type_filter: None,
        };
        let mut i = from;
        while i < args.len() {
            let has_value = i + 1 < args.len();
            if args.is(i, "count") && has_value {
                match parse_i64(args.get(i + 1)) {
                    None => return Err(errors::NOT_INT),
                    Some(c) if c < 1 => return Err(errors::SYNTAX),
                    Some(c) => out.count = c as usize,
                }
            } else if args.is(i, "match") && has_value {
                let p = args.get(i + 1);
                out.pattern = if p == b"*" { None } else { Some(p) };
            } else if allow_type && args.is(i, "type") && has_value {
                out.type_filter = Some(args.get(i + 1));
            } else {
                return Err(errors::SYNTAX);
            }
            i += 2;
        }
        Ok(out)
    }

    /// True when `item` passes MATCH.
    pub fn matches(&self, item: &[u8]) -> bool {
        self.pattern.is_none_or_match(item)
    }
}

trait PatternExt {
    fn is_none_or_match(&self, item: &[u8]) -> bool;
}

impl PatternExt for Option<&[u8]> {
    fn is_none_or_match(&self, item: &[u8]) -> bool {
        match self {
            None => true,
            Some(p) => glob_match(p, item, false),
        }
    }
}

/// Parses a cursor as Redis 7.0 does: decimal digits with an optional `-` (a negative cursor
/// wraps around), nothing else; an empty cursor is 0.
pub fn parse_scan_cursor(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() {
        return Some(0);
    }
    let (negative, digits) = match raw.first() {
        Some(b'-') => (true, &raw[1..]),
        _ => (false, raw),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let v: u64 = std::str::from_utf8(digits).ok()?.parse().ok()?;
    Some(if negative { v.wrapping_neg() } else { v })
}

/// Writes `[cursor, [items...]]`.
pub fn reply_scan<I: AsRef<[u8]>>(reply: &mut ReplyBuf, cursor: u64, items: &[I]) {
    reply.array(2);
    reply.bulk(cursor.to_string().as_bytes());
    reply.array(items.len());
    for i in items {
        reply.bulk(i.as_ref());
    }
}

/// HSCAN, SSCAN and ZSCAN: parses the cursor and options in Redis's order (a bad option is
/// reported only when the key exists), scans a missing key as empty, and lets `step` write
/// one step of the collection's scan.
pub fn scan_collection<T: Collection>(
    ctx: &mut ExecCtx,
    args: &Args,
    step: impl FnOnce(&T, u64, &ScanArgs, &mut ReplyBuf),
) {
    let Some(cursor) = parse_scan_cursor(args.get(2)) else {
        return ctx.error(errors::INVALID_CURSOR);
    };
    let opts = ScanArgs::parse(args, 3, false);
    ctx.read_as::<T>(
        args.get(1),
        |r| reply_scan::<&[u8]>(r, 0, &[]),
        |c, r| match opts {
            Ok(opts) => step(c, cursor, &opts, r),
            Err(e) => r.error(e),
        },
    );
}
