//! String commands on one shard: GET/SET and their variants, MGET/MSET parts, APPEND, ranges,
//! and the INCR family. Semantics, option parsing order and error texts follow Redis 7.0's
//! t_string.c.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{Kind, Value, ValueRef};

use crate::long_double::{incr_by_float, IncrFloatError};
use crate::{errors, Args, ExecCtx};

const SET_NX: u32 = 1;
const SET_XX: u32 = 1 << 1;
const SET_GET: u32 = 1 << 2;
const KEEPTTL: u32 = 1 << 3;
const PERSIST: u32 = 1 << 4;
const EX: u32 = 1 << 5;
const PX: u32 = 1 << 6;
const EXAT: u32 = 1 << 7;
const PXAT: u32 = 1 << 8;
const ANY_EXPIRE: u32 = EX | PX | EXAT | PXAT;

#[derive(PartialEq, Eq, Clone, Copy)]
enum Caller {
    Set,
    GetEx,
}

/// Parses SET / GETEX options from argument `from` on, as parseExtendedStringArgumentsOrReply.
fn parse_string_options(args: &Args, from: usize, caller: Caller) -> Option<(u32, Option<usize>)> {
    let mut flags = 0u32;
    let mut expire_arg = None;
    let mut j = from;
    while j < args.len() {
        let opt = args.get(j).to_ascii_lowercase();
        let has_next = j + 1 < args.len();
        let set = caller == Caller::Set;
        match opt.as_slice() {
            b"nx" if flags & SET_XX == 0 && set => flags |= SET_NX,
            b"xx" if flags & SET_NX == 0 && set => flags |= SET_XX,
            b"get" if set => flags |= SET_GET,
            b"keepttl" if flags & (PERSIST | ANY_EXPIRE) == 0 && set => flags |= KEEPTTL,
            b"persist" if caller == Caller::GetEx && flags & (ANY_EXPIRE | KEEPTTL) == 0 => {
                flags |= PERSIST
            }
            b"ex" | b"px" | b"exat" | b"pxat" if has_next => {
                let this = match opt.as_slice() {
                    b"ex" => EX,
                    b"px" => PX,
                    b"exat" => EXAT,
                    _ => PXAT,
                };
                if flags & (KEEPTTL | PERSIST) != 0 || flags & (ANY_EXPIRE & !this) != 0 {
                    return None;
                }
                flags |= this;
                expire_arg = Some(j + 1);
                j += 1;
            }
            _ => return None,
        }
        j += 1;
    }
    Some((flags, expire_arg))
}

/// Turns an expire argument into an absolute time in ms, or writes Redis's error.
fn expire_millis(ctx: &mut ExecCtx, raw: &[u8], flags: u32, name: &str) -> Option<u64> {
    let Some(mut ms) = parse_i64(raw) else {
        ctx.error(errors::NOT_INT);
        return None;
    };
    let seconds = flags & (EX | EXAT) != 0;
    if ms <= 0 || (seconds && ms > i64::MAX / 1000) {
        ctx.error(&errors::invalid_expire(name));
        return None;
    }
    if seconds {
        ms *= 1000;
    }
    if flags & (EX | PX) != 0 {
        ms = ms.wrapping_add(ctx.now as i64);
    }
    if ms <= 0 {
        ctx.error(&errors::invalid_expire(name));
        return None;
    }
    Some(ms as u64)
}

/// Writes a string value as a bulk reply; false (writing nothing) for another type.
fn reply_string(reply: &mut ReplyBuf, value: ValueRef<'_>) -> bool {
    match value {
        ValueRef::Int(i) => reply.bulk_i64(i),
        ValueRef::Str(s) => reply.bulk(s),
        _ => return false,
    }
    true
}

/// Writes the value of a string key (or null); false after a WRONGTYPE error (or, with
/// `wrong_is_null`, a null for a key of another type, as MGET does). A read: a miss counts,
/// and is a `keymiss` event, as Redis's lookupKeyRead.
fn reply_value_or(ctx: &mut ExecCtx, key: &[u8], wrong_is_null: bool) -> bool {
    let ExecCtx {
        shard,
        reply,
        db,
        now,
        ..
    } = ctx;
    match shard.get_counted(*db, key, *now) {
        None => reply.null(),
        Some(e) => {
            if !reply_string(reply, e.value()) {
                if !wrong_is_null {
                    reply.error(errors::WRONGTYPE);
                    return false;
                }
                reply.null();
            }
        }
    }
    true
}

fn reply_value(ctx: &mut ExecCtx, key: &[u8]) -> bool {
    reply_value_or(ctx, key, false)
}

pub fn get(ctx: &mut ExecCtx, args: &Args) {
    reply_value(ctx, args.get(1));
}

/// SET and the shared tail of SETNX / SETEX / PSETEX / GETSET.
fn set_generic(
    ctx: &mut ExecCtx,
    key: &[u8],
    val: &[u8],
    flags: u32,
    expire: Option<&[u8]>,
    name: &str,
    replies: (&str, &str),
) {
    let mut when = 0;
    if let Some(raw) = expire {
        match expire_millis(ctx, raw, flags, name) {
            Some(ms) => when = ms,
            None => return,
        }
    }
    if flags & SET_GET != 0 && !reply_value(ctx, key) {
        return;
    }
    let existing = ctx.lookup_write(key).map(|e| e.expire_at());
    if (flags & SET_NX != 0 && existing.is_some()) || (flags & SET_XX != 0 && existing.is_none()) {
        if flags & SET_GET == 0 {
            match replies.1 {
                "null" => ctx.reply.null(),
                other => ctx.reply.raw(other.as_bytes()),
            }
        }
        return;
    }
    if flags & KEEPTTL != 0 {
        when = existing.unwrap_or(0);
    }
    ctx.shard.set_bytes(ctx.db, key, val, when);
    ctx.notify(class::STRING, "set", key);
    if expire.is_some() {
        ctx.notify(class::GENERIC, "expire", key);
    }
    // Replayed later, a relative expiry would count from the wrong moment.
    if flags & (EX | PX) != 0 {
        ctx.propagate(&[b"SET", key, val, b"PXAT", when.to_string().as_bytes()]);
    }
    if flags & SET_GET == 0 {
        ctx.reply.raw(replies.0.as_bytes());
    }
}

const OK_NULL: (&str, &str) = ("+OK\r\n", "null");

pub fn set(ctx: &mut ExecCtx, args: &Args) {
    let Some((flags, exp)) = parse_string_options(args, 3, Caller::Set) else {
        ctx.error(errors::SYNTAX);
        return;
    };
    // With GET, set_generic reads the old value (a WRONGTYPE error then) after checking the
    // expire time, as Redis does.
    let expire = exp.map(|i| args.get(i));
    set_generic(ctx, args.get(1), args.get(2), flags, expire, "set", OK_NULL);
}

fn is_wrong_type(ctx: &mut ExecCtx, key: &[u8]) -> bool {
    ctx.lookup_write(key)
        .is_some_and(|e| e.value().kind() != Kind::String)
}

pub fn setnx(ctx: &mut ExecCtx, args: &Args) {
    set_generic(
        ctx,
        args.get(1),
        args.get(2),
        SET_NX,
        None,
        "setnx",
        (":1\r\n", ":0\r\n"),
    );
}

pub fn setex(ctx: &mut ExecCtx, args: &Args) {
    set_generic(
        ctx,
        args.get(1),
        args.get(3),
        EX,
        Some(args.get(2)),
        "setex",
        OK_NULL,
    );
}

pub fn psetex(ctx: &mut ExecCtx, args: &Args) {
    set_generic(
        ctx,
        args.get(1),
        args.get(3),
        PX,
        Some(args.get(2)),
        "psetex",
        OK_NULL,
    );
}

pub fn getset(ctx: &mut ExecCtx, args: &Args) {
    if is_wrong_type(ctx, args.get(1)) {
        ctx.wrongtype();
        return;
    }
    set_generic(
        ctx,
        args.get(1),
        args.get(2),
        SET_GET,
        None,
        "getset",
        OK_NULL,
    );
}

pub fn getdel(ctx: &mut ExecCtx, args: &Args) {
    let key = args.get(1);
    if is_wrong_type(ctx, key) {
        ctx.wrongtype();
        return;
    }
    reply_value(ctx, key);
    if ctx.shard.remove(ctx.db, key).is_some() {
        ctx.notify(class::GENERIC, "del", key);
    }
}

pub fn getex(ctx: &mut ExecCtx, args: &Args) {
    let Some((flags, exp)) = parse_string_options(args, 2, Caller::GetEx) else {
        ctx.error(errors::SYNTAX);
        return;
    };
    let key = args.get(1);
    // A read, as Redis's lookupKeyReadOrReply: a miss counts and is a `keymiss` event.
    match ctx.lookup_read(key) {
        None => return ctx.reply.null(),
        Some(e) if e.value().kind() != Kind::String => return ctx.wrongtype(),
        Some(_) => {}
    }
    let mut when = None;
    if let Some(i) = exp {
        match expire_millis(ctx, args.get(i), flags, "getex") {
            Some(ms) => when = Some(ms),
            None => return,
        }
    }
    if let Some(e) = ctx.shard.dbs[ctx.db].table.get(key) {
        reply_string(ctx.reply, e.value());
    }
    match when {
        Some(ms) if flags & (EXAT | PXAT) != 0 && ms <= ctx.now => {
            ctx.shard.remove(ctx.db, key);
            ctx.propagate(&[b"DEL", key]);
            ctx.notify(class::GENERIC, "del", key);
        }
        Some(ms) => {
            ctx.shard
                .update(ctx.db, key, ctx.now, |e| e.set_expire_at(ms));
            ctx.propagate(&[b"PEXPIREAT", key, ms.to_string().as_bytes()]);
            ctx.notify(class::GENERIC, "expire", key);
        }
        None if flags & PERSIST != 0 => {
            let table = &ctx.shard.dbs[ctx.db].table;
            let had_ttl = table.get(key).is_some_and(|e| e.expire_at() != 0);
            if had_ttl {
                ctx.shard
                    .update(ctx.db, key, ctx.now, |e| e.set_expire_at(0));
                ctx.propagate(&[b"PERSIST", key]);
                ctx.notify(class::GENERIC, "persist", key);
            }
        }
        None => {}
    }
}

/// MGET over this shard's keys: a string value or null per key (other types read as null).
pub fn mget(ctx: &mut ExecCtx, args: &Args) {
    ctx.reply.array(args.len() - 1);
    for key in args.iter().skip(1) {
        reply_value_or(ctx, key, true);
    }
}

pub fn mset(ctx: &mut ExecCtx, args: &Args) {
    if args.len().is_multiple_of(2) {
        ctx.error(&errors::wrong_arity("mset"));
        return;
    }
    for i in (1..args.len()).step_by(2) {
        set_string(ctx, args.get(i), args.get(i + 1));
    }
    ctx.reply.ok();
}

/// MSET's and MSETNX's write of one key, as Redis's setKey: a key past its deadline expires
/// first (so it is announced as expired, then new), then `set`.
fn set_string(ctx: &mut ExecCtx, key: &[u8], value: &[u8]) {
    ctx.shard.expire_if_needed(ctx.db, key, ctx.now);
    ctx.shard.set_bytes(ctx.db, key, value, 0);
    ctx.notify(class::STRING, "set", key);
}

/// MSETNX when all keys live on this shard: all set or none.
pub fn msetnx(ctx: &mut ExecCtx, args: &Args) {
    if args.len().is_multiple_of(2) {
        ctx.error(&errors::wrong_arity("msetnx"));
        return;
    }
    let any = (1..args.len())
        .step_by(2)
        .any(|i| ctx.shard.exists(ctx.db, args.get(i), ctx.now));
    if any {
        ctx.reply.int(0);
        return;
    }
    for i in (1..args.len()).step_by(2) {
        set_string(ctx, args.get(i), args.get(i + 1));
    }
    ctx.reply.int(1);
}

fn check_len(ctx: &mut ExecCtx, size: u64, append: u64) -> bool {
    if size.saturating_add(append) > ctx.max_bulk_len {
        ctx.error(errors::STRING_TOO_LONG);
        return false;
    }
    true
}

pub fn append(ctx: &mut ExecCtx, args: &Args) {
    let (key, tail) = (args.get(1), args.get(2));
    let Some(entry) = ctx.lookup_write(key) else {
        ctx.shard.set_bytes(ctx.db, key, tail, 0);
        ctx.notify(class::STRING, "append", key);
        ctx.reply.int(tail.len() as i64);
        return;
    };
    if entry.value().type_name() != "string" {
        ctx.wrongtype();
        return;
    }
    let len = entry.value().str_len() as u64;
    if !check_len(ctx, len, tail.len() as u64) {
        return;
    }
    let new_len = ctx
        .shard
        .update(ctx.db, key, ctx.now, |e| {
            let raw = e.make_raw();
            raw.extend_from_slice(tail);
            raw.len()
        })
        .unwrap_or(0);
    ctx.notify(class::STRING, "append", key);
    ctx.reply.int(new_len as i64);
}

pub fn strlen(ctx: &mut ExecCtx, args: &Args) {
    let n = match ctx.lookup_read(args.get(1)) {
        None => 0,
        Some(e) if e.value().kind() != Kind::String => return ctx.wrongtype(),
        Some(e) => e.value().str_len(),
    };
    ctx.reply.int(n as i64);
}

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common
/// subsequence of two strings (a missing key is the empty string), its length, or its matching
/// ranges, with Redis 7.0's checks in its order: the keys' types, the options, the table size.
pub fn lcs(ctx: &mut ExecCtx, args: &Args) {
    let mut strings = [Vec::new(), Vec::new()];
    for (n, s) in strings.iter_mut().enumerate() {
        if let Some(e) = ctx.lookup_read(args.get(n + 1)) {
            if e.value().kind() != Kind::String {
                return ctx.error("ERR The specified keys must contain string values");
            }
            *s = e.value().to_bytes();
        }
    }
    let (mut len_only, mut idx, mut with_len, mut min_len) = (false, false, false, 0u64);
    let mut i = 3;
    while i < args.len() {
        if args.is(i, "idx") {
            idx = true;
        } else if args.is(i, "len") {
            len_only = true;
        } else if args.is(i, "withmatchlen") {
            with_len = true;
        } else if args.is(i, "minmatchlen") && i + 1 < args.len() {
            let Some(n) = parse_i64(args.get(i + 1)) else {
                return ctx.error(errors::NOT_INT);
            };
            min_len = n.max(0) as u64;
            i += 1;
        } else {
            return ctx.error(errors::SYNTAX);
        }
        i += 1;
    }
    if idx && len_only {
        return ctx.error("ERR If you want both the length and indexes, please just use IDX.");
    }
    let [a, b] = &strings;
    if crate::lcs::table_bytes(a.len(), b.len()) > u128::from(ctx.max_bulk_len) {
        return ctx
            .error("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len");
    }
    let found = crate::lcs::lcs(a, b);
    if len_only {
        return ctx.reply.int(found.len as i64);
    }
    if !idx {
        return ctx.reply.bulk(&found.text);
    }
    let kept: Vec<_> = found
        .matches
        .iter()
        .filter(|m| m.len() as u64 >= min_len)
        .collect();
    let reply = &mut *ctx.reply;
    reply.map(2);
    reply.bulk(b"matches");
    reply.array(kept.len());
    for m in kept {
        reply.array(2 + usize::from(with_len));
        for (start, end) in [m.a, m.b] {
            reply.array(2);
            reply.int(start as i64);
            reply.int(end as i64);
        }
        if with_len {
            reply.int(m.len() as i64);
        }
    }
    reply.bulk(b"len");
    reply.int(found.len as i64);
}

/// GETRANGE and SUBSTR.
pub fn getrange(ctx: &mut ExecCtx, args: &Args) {
    let (Some(mut start), Some(mut end)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        ctx.error(errors::NOT_INT);
        return;
    };
    let Some(entry) = ctx.lookup_read(args.get(1)) else {
        ctx.reply.bulk(b"");
        return;
    };
    if entry.value().kind() != Kind::String {
        return ctx.wrongtype();
    }
    // Checked once the key is read, as Redis does (a missing key is a miss, another type
    // WRONGTYPE).
    if start < 0 && end < 0 && start > end {
        ctx.reply.bulk(b"");
        return;
    }
    let bytes = entry.value().to_bytes();
    let len = bytes.len() as i64;
    if start < 0 {
        start += len;
    }
    if end < 0 {
        end += len;
    }
    start = start.max(0);
    end = end.max(0);
    if end >= len {
        end = len - 1;
    }
    if start > end || len == 0 {
        ctx.reply.bulk(b"");
    } else {
        ctx.reply.bulk(&bytes[start as usize..=end as usize]);
    }
}

pub fn setrange(ctx: &mut ExecCtx, args: &Args) {
    let (key, value) = (args.get(1), args.get(3));
    let Some(offset) = parse_i64(args.get(2)) else {
        ctx.error(errors::NOT_INT);
        return;
    };
    if offset < 0 {
        ctx.error(errors::OFFSET_RANGE);
        return;
    }
    let offset = offset as u64;
    match ctx.lookup_write(key) {
        None => {
            if value.is_empty() {
                ctx.reply.int(0);
                return;
            }
            if !check_len(ctx, offset, value.len() as u64) {
                return;
            }
            let mut v = vec![0u8; offset as usize];
            v.extend_from_slice(value);
            let n = v.len();
            ctx.shard.set(ctx.db, key, Value::Str(v), 0);
            ctx.notify(class::STRING, "setrange", key);
            ctx.reply.int(n as i64);
        }
        Some(e) => {
            if e.value().type_name() != "string" {
                ctx.wrongtype();
                return;
            }
            let olen = e.value().str_len();
            if value.is_empty() {
                ctx.reply.int(olen as i64);
                return;
            }
            if !check_len(ctx, offset, value.len() as u64) {
                return;
            }
            let n = ctx
                .shard
                .update(ctx.db, key, ctx.now, |e| {
                    let raw = e.make_raw();
                    let end = offset as usize + value.len();
                    if raw.len() < end {
                        raw.resize(end, 0);
                    }
                    raw[offset as usize..end].copy_from_slice(value);
                    raw.len()
                })
                .unwrap_or(0);
            ctx.notify(class::STRING, "setrange", key);
            ctx.reply.int(n as i64);
        }
    }
}

fn incr_generic(ctx: &mut ExecCtx, key: &[u8], by: i64) {
    let current = match ctx.lookup_write(key).map(|e| e.value()) {
        None => None,
        Some(ValueRef::Int(i)) => Some(i),
        Some(ValueRef::Str(s)) => match parse_i64(s) {
            Some(i) => Some(i),
            None => {
                ctx.error(errors::NOT_INT);
                return;
            }
        },
        Some(_) => return ctx.wrongtype(),
    };
    let old = current.unwrap_or(0);
    let Some(new) = old.checked_add(by) else {
        ctx.error(errors::OVERFLOW);
        return;
    };
    if current.is_some() {
        ctx.shard
            .update(ctx.db, key, ctx.now, |e| e.set_value(Value::Int(new)));
    } else {
        ctx.shard.set(ctx.db, key, Value::Int(new), 0);
    }
    ctx.notify(class::STRING, "incrby", key);
    ctx.reply.int(new);
}

pub fn incr(ctx: &mut ExecCtx, args: &Args) {
    incr_generic(ctx, args.get(1), 1);
}

pub fn decr(ctx: &mut ExecCtx, args: &Args) {
    incr_generic(ctx, args.get(1), -1);
}

pub fn incrby(ctx: &mut ExecCtx, args: &Args) {
    match parse_i64(args.get(2)) {
        Some(by) => incr_generic(ctx, args.get(1), by),
        None => ctx.error(errors::NOT_INT),
    }
}

pub fn decrby(ctx: &mut ExecCtx, args: &Args) {
    match parse_i64(args.get(2)) {
        Some(i64::MIN) => ctx.error("ERR decrement would overflow"),
        Some(by) => incr_generic(ctx, args.get(1), -by),
        None => ctx.error(errors::NOT_INT),
    }
}

pub fn incrbyfloat(ctx: &mut ExecCtx, args: &Args) {
    let key = args.get(1);
    if is_wrong_type(ctx, key) {
        return ctx.wrongtype();
    }
    let current = ctx.lookup_write(key).map(|e| e.value().to_bytes());
    match incr_by_float(current.as_deref(), args.get(2)) {
        Ok(text) => {
            let value = Value::from_bytes(&text);
            if current.is_some() {
                ctx.shard
                    .update(ctx.db, key, ctx.now, |e| e.set_value(value));
            } else {
                ctx.shard.set(ctx.db, key, value, 0);
            }
            ctx.notify(class::STRING, "incrbyfloat", key);
            // The result, not the increment: replaying float arithmetic is Redis's reason too.
            ctx.propagate(&[b"SET", key, &text, b"KEEPTTL"]);
            ctx.reply.bulk(&text);
        }
        Err(IncrFloatError::ValueNotFloat | IncrFloatError::IncrNotFloat) => {
            ctx.error(errors::NOT_FLOAT)
        }
        Err(IncrFloatError::NanOrInfinity) => ctx.error(errors::NAN_OR_INF),
    }
}
