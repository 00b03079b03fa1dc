//! Bit operations on string values (Redis 7.0's bitops.c): SETBIT, GETBIT, BITCOUNT and BITPOS
//! (BYTE or BIT ranges), BITOP, BITFIELD and BITFIELD_RO. Bit 0 is the most significant bit
//! of the first byte; reading past the end reads zeros, writing past it grows the string.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{Kind, Value, ValueRef};

use crate::ctx::WrongType;
use crate::{errors, Args, ExecCtx};

const BIT_OFFSET: &str = "ERR bit offset is not an integer or out of range";

/// Runs `f` on the string under `key` (None when missing); WRONGTYPE for other types.
fn read_string(ctx: &mut ExecCtx, key: &[u8], f: impl FnOnce(Option<&[u8]>, &mut ReplyBuf)) {
    let reply = &mut *ctx.reply;
    match ctx
        .shard
        .get_counted(ctx.db, key, ctx.now)
        .map(|e| e.value())
    {
        None => f(None, reply),
        Some(ValueRef::Str(s)) => f(Some(s), reply),
        Some(v @ ValueRef::Int(_)) => f(Some(&v.to_bytes()), reply),
        Some(_) => reply.error(errors::WRONGTYPE),
    }
}

/// Runs `f` on the string under `key` as raw bytes, creating an empty one when missing (so
/// that a new key is one that `f` lengthens). `f` says whether it changed the bytes: a write
/// that changed nothing is not counted as a change.
fn write_string<R>(
    ctx: &mut ExecCtx,
    key: &[u8],
    f: impl FnOnce(&mut Vec<u8>) -> (R, bool),
) -> Result<R, WrongType> {
    let created = match ctx.lookup_write(key).map(|e| e.value().kind()) {
        Some(Kind::String) => false,
        Some(_) => {
            ctx.wrongtype();
            return Err(WrongType);
        }
        None => {
            ctx.shard.set(ctx.db, key, Value::Str(Vec::new()), 0);
            true
        }
    };
    // A key just made was counted as a change already: one change, as in Redis.
    let r = ctx.shard.update_if(ctx.db, key, ctx.now, |e| {
        let (r, changed) = f(e.make_raw());
        (r, changed && !created)
    });
    r.ok_or(WrongType)
}

/// A bit offset as SETBIT/GETBIT/BITFIELD take it; `#n` (BITFIELD only) counts in units of
/// `width` bits. The bit's byte must fit in `proto-max-bulk-len`.
fn parse_bit_offset(raw: &[u8], width: Option<u64>, max_bulk: u64) -> Option<u64> {
    let (hashed, digits) = match (raw.split_first(), width) {
        (Some((b'#', rest)), Some(w)) => (Some(w), rest),
        _ => (None, raw),
    };
    let v = parse_i64(digits)?;
    let v = match hashed {
        Some(w) => v.checked_mul(w as i64)?,
        None => v,
    };
    (v >= 0 && (v as u64 >> 3) < max_bulk).then_some(v as u64)
}

fn get_bit(s: &[u8], bit: u64) -> u8 {
    s.get((bit >> 3) as usize)
        .map_or(0, |b| (b >> (7 - (bit & 7))) & 1)
}

fn set_bit(s: &mut Vec<u8>, bit: u64, on: bool) -> u8 {
    let byte = (bit >> 3) as usize;
    if s.len() <= byte {
        s.resize(byte + 1, 0);
    }
    let mask = 1u8 << (7 - (bit & 7));
    let old = u8::from(s[byte] & mask != 0);
    if on {
        s[byte] |= mask;
    } else {
        s[byte] &= !mask;
    }
    old
}

pub fn setbit(ctx: &mut ExecCtx, args: &Args) {
    let Some(bit) = parse_bit_offset(args.get(2), None, ctx.max_bulk_len) else {
        return ctx.error(BIT_OFFSET);
    };
    let on = match parse_i64(args.get(3)) {
        Some(v @ (0 | 1)) => v == 1,
        _ => return ctx.error("ERR bit is not an integer or out of range"),
    };
    let key = args.get(1);
    let written = write_string(ctx, key, |s| {
        let len = s.len();
        let old = set_bit(s, bit, on);
        // Redis counts a change only: a new key or a longer string, or a flipped bit.
        let changed = s.len() != len || old != u8::from(on);
        ((old, changed), changed)
    });
    if let Ok((old, changed)) = written {
        if changed {
            ctx.notify(class::STRING, "setbit", key);
        }
        ctx.reply.int(i64::from(old));
    }
}

pub fn getbit(ctx: &mut ExecCtx, args: &Args) {
    let Some(bit) = parse_bit_offset(args.get(2), None, ctx.max_bulk_len) else {
        return ctx.error(BIT_OFFSET);
    };
    read_string(ctx, args.get(1), |s, r| {
        r.int(i64::from(get_bit(s.unwrap_or_default(), bit)))
    });
}

/// A BITCOUNT/BITPOS range after Redis's normalisation, in bits: `start..=end` (empty when
/// start > end).
fn bit_range(len_bytes: usize, start: i64, end: i64, in_bits: bool) -> (i64, i64) {
    let total = if in_bits {
        len_bytes as i64 * 8
    } else {
        len_bytes as i64
    };
    let norm = |v: i64| if v < 0 { (total + v).max(0) } else { v };
    let (start, end) = (norm(start), norm(end).min(total - 1));
    if in_bits {
        (start, end)
    } else {
        (
            start.saturating_mul(8),
            end.saturating_mul(8).saturating_add(7),
        )
    }
}

/// Parses the optional `BYTE | BIT` unit at argument `at`.
fn parse_unit(args: &Args, at: usize) -> Option<bool> {
    if at >= args.len() {
        Some(false)
    } else if args.is(at, "bit") {
        Some(true)
    } else if args.is(at, "byte") {
        Some(false)
    } else {
        None
    }
}

fn count_bits(s: &[u8], start: i64, end: i64) -> i64 {
    if start > end {
        return 0;
    }
    let (first, last) = ((start / 8) as usize, (end / 8) as usize);
    let mut n: u32 = s[first..=last].iter().map(|b| b.count_ones()).sum();
    // Take off the bits of the edge bytes that lie outside the range.
    let before = (start % 8) as u32;
    if before > 0 {
        n -= (s[first] >> (8 - before)).count_ones();
    }
    let after = 7 - (end % 8) as u32;
    n -= (s[last] & ((1u16 << after) - 1) as u8).count_ones();
    i64::from(n)
}

pub fn bitcount(ctx: &mut ExecCtx, args: &Args) {
    // As in Redis, a missing key counts 0 before the range is even parsed.
    read_string(ctx, args.get(1), |s, r| {
        let Some(s) = s else {
            return r.int(0);
        };
        let (start, end) = match args.len() {
            2 => (0, s.len() as i64 * 8 - 1),
            4 | 5 => match (parse_i64(args.get(2)), parse_i64(args.get(3))) {
                // Redis counts nothing for a reversed range of negative indexes (before it
                // even reads the unit).
                (Some(a), Some(b)) if a < 0 && b < 0 && a > b => return r.int(0),
                (Some(a), Some(b)) => match parse_unit(args, 4) {
                    Some(bits) => bit_range(s.len(), a, b, bits),
                    None => return r.error(errors::SYNTAX),
                },
                _ => return r.error(errors::NOT_INT),
            },
            _ => return r.error(errors::SYNTAX),
        };
        r.int(count_bits(s, start, end));
    });
}

pub fn bitpos(ctx: &mut ExecCtx, args: &Args) {
    let bit = match parse_i64(args.get(2)) {
        None => return ctx.error(errors::NOT_INT),
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return ctx.error("ERR The bit argument must be 1 or 0."),
    };
    // As in Redis, the range is parsed only once the key is known to hold a string.
    read_string(ctx, args.get(1), |s, r| {
        let Some(s) = s else {
            return r.int(if bit { -1 } else { 0 });
        };
        let (start, end, in_bits) = match parse_bitpos_range(args) {
            Ok(range) => range,
            Err(e) => return r.error(e),
        };
        let (from, to) = bit_range(s.len(), start.unwrap_or(0), end.unwrap_or(-1), in_bits);
        if from > to {
            return r.int(-1);
        }
        let found = (from..=to).find(|&i| (get_bit(s, i as u64) == 1) == bit);
        r.int(match found {
            Some(i) => i,
            // Without an explicit end the string counts as followed by zeros.
            None if !bit && end.is_none() => to + 1,
            None => -1,
        });
    });
}

/// BITPOS's optional `start [end [BYTE | BIT]]`.
fn parse_bitpos_range(args: &Args) -> Result<(Option<i64>, Option<i64>, bool), &'static str> {
    if args.len() > 6 {
        return Err(errors::SYNTAX);
    }
    let int_at = |i: usize| {
        (i < args.len())
            .then(|| parse_i64(args.get(i)).ok_or(errors::NOT_INT))
            .transpose()
    };
    let start = int_at(3)?;
    let in_bits = parse_unit(args, 5).ok_or(errors::SYNTAX)?;
    let end = int_at(4)?;
    Ok((start, end, in_bits))
}

pub fn bitop(ctx: &mut ExecCtx, args: &Args) {
    let op = args.get(1).to_ascii_lowercase();
    if !matches!(op.as_slice(), b"and" | b"or" | b"xor" | b"not") {
        return ctx.error(errors::SYNTAX);
    }
    if op == b"not" && args.len() != 4 {
        return ctx.error("ERR BITOP NOT must be called with a single source key.");
    }
    let mut sources: Vec<Option<Vec<u8>>> = Vec::with_capacity(args.len() - 3);
    for i in 3..args.len() {
        match ctx.lookup_read(args.get(i)).map(|e| e.value()) {
            None => sources.push(None),
            Some(v) if v.kind() == Kind::String => sources.push(Some(v.to_bytes())),
            Some(_) => return ctx.wrongtype(),
        }
    }
    let len = sources.iter().flatten().map(Vec::len).max().unwrap_or(0);
    let byte =
        |s: &Option<Vec<u8>>, i: usize| s.as_ref().and_then(|s| s.get(i)).copied().unwrap_or(0);
    let result: Vec<u8> = (0..len)
        .map(|i| {
            let mut bytes = sources.iter().map(|s| byte(s, i));
            let first = bytes.next().unwrap_or(0);
            match op.as_slice() {
                b"and" => bytes.fold(first, |a, b| a & b),
                b"or" => bytes.fold(first, |a, b| a | b),
                b"xor" => bytes.fold(first, |a, b| a ^ b),
                _ => !first,
            }
        })
        .collect();
    let dst = args.get(2);
    if result.is_empty() {
        // As Redis's dbDelete: a key past its deadline but not yet removed is deleted too.
        if ctx.shard.remove(ctx.db, dst).is_some() {
            ctx.notify(class::GENERIC, "del", dst);
        }
    } else {
        ctx.shard.expire_if_needed(ctx.db, dst, ctx.now);
        ctx.shard.set(ctx.db, dst, Value::Str(result), 0);
        ctx.notify(class::STRING, "set", dst);
    }
    ctx.reply.int(len as i64);
}

// ---------------------------------------------------------------------------------------------
// BITFIELD

#[derive(Clone, Copy)]
struct FieldType {
    signed: bool,
    bits: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

enum FieldOp {
    Get,
    Set(i64),
    IncrBy(i64),
}

struct FieldCmd {
    op: FieldOp,
    ty: FieldType,
    offset: u64,
    overflow: Overflow,
}

fn parse_type(raw: &[u8]) -> Option<FieldType> {
    let (signed, digits) = match raw.split_first()? {
        (b'i', rest) => (true, rest),
        (b'u', rest) => (false, rest),
        _ => return None,
    };
    let bits = parse_i64(digits)?;
    let max = if signed { 64 } else { 63 };
    (1..=max).contains(&bits).then_some(FieldType {
        signed,
        bits: bits as u32,
    })
}

fn read_field(s: &[u8], offset: u64, ty: FieldType) -> i64 {
    let mut v: u64 = 0;
    for i in 0..u64::from(ty.bits) {
        v = (v << 1) | u64::from(get_bit(s, offset + i));
    }
    if ty.signed && ty.bits < 64 && v >> (ty.bits - 1) & 1 == 1 {
        v |= u64::MAX << ty.bits;
    }
    v as i64
}

fn write_field(s: &mut Vec<u8>, offset: u64, ty: FieldType, value: i64) {
    let v = value as u64;
    for i in 0..u64::from(ty.bits) {
        let bit = (v >> (u64::from(ty.bits) - 1 - i)) & 1;
        set_bit(s, offset + i, bit == 1);
    }
}

/// `value + incr` in a signed field of `bits` under the overflow policy (None: FAIL), with
/// Redis's exact range checks, whose 64-bit wrap-arounds decide some edge cases (SET of
/// i64::MIN into a small field saturates high, as in Redis).
fn signed_add(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrapped = || {
        let c = (value as u64).wrapping_add(incr as u64);
        if bits == 64 {
            c as i64
        } else if c & (1 << (bits - 1)) != 0 {
            (c | u64::MAX << bits) as i64
        } else {
            (c & !(u64::MAX << bits)) as i64
        }
    };
    let high = value > max
        || (bits != 64 && incr > max_incr)
        || (value >= 0 && incr > 0 && incr > max_incr);
    let low = value < min
        || (bits != 64 && incr < min_incr)
        || (value < 0 && incr < 0 && incr < min_incr);
    match (high, low, overflow) {
        (false, false, _) => Some(value.wrapping_add(incr)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => Some(wrapped()),
        (true, _, Overflow::Sat) => Some(max),
        (false, true, Overflow::Sat) => Some(min),
    }
}

/// `value + incr` in an unsigned field of `bits` (at most 63) under the overflow policy.
fn unsigned_add(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = (value as i64).wrapping_neg();
    let wrapped = || value.wrapping_add(incr as u64) & max;
    let high = value > max || (incr > 0 && incr > max_incr);
    let low = incr < 0 && incr < min_incr;
    match (high, low, overflow) {
        (false, false, _) => Some(value.wrapping_add(incr as u64)),
        (_, _, Overflow::Fail) => None,
        (_, _, Overflow::Wrap) => Some(wrapped()),
        (true, _, Overflow::Sat) => Some(max),
        (false, true, Overflow::Sat) => Some(0),
    }
}

/// The field's new value for `base + incr` (a SET is `value + 0`), or None on FAIL.
fn field_add(ty: FieldType, base: i64, incr: i64, overflow: Overflow) -> Option<i64> {
    if ty.signed {
        signed_add(base, incr, ty.bits, overflow)
    } else {
        unsigned_add(base as u64, incr, ty.bits, overflow).map(|v| v as i64)
    }
}

fn parse_bitfield(args: &Args, read_only: bool, max_bulk: u64) -> Result<Vec<FieldCmd>, String> {
    let mut cmds = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut i = 2;
    while i < args.len() {
        let left = args.len() - i - 1;
        let word = args.get(i).to_ascii_lowercase();
        let needs = match word.as_slice() {
            b"get" => 2,
            b"set" | b"incrby" => 3,
            b"overflow" => 1,
            _ => usize::MAX,
        };
        if needs > left {
            return Err(errors::SYNTAX.into());
        }
        if word == b"overflow" {
            overflow = match args.get(i + 1).to_ascii_lowercase().as_slice() {
                b"wrap" => Overflow::Wrap,
                b"sat" => Overflow::Sat,
                b"fail" => Overflow::Fail,
                _ => return Err("ERR Invalid OVERFLOW type specified".into()),
            };
            i += 2;
            continue;
        }
        let Some(ty) = parse_type(args.get(i + 1)) else {
            return Err("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.".into());
        };
        let Some(offset) = parse_bit_offset(args.get(i + 2), Some(u64::from(ty.bits)), max_bulk)
        else {
            return Err(BIT_OFFSET.into());
        };
        let op = if word == b"get" {
            FieldOp::Get
        } else {
            let Some(v) = parse_i64(args.get(i + 3)) else {
                return Err(errors::NOT_INT.into());
            };
            if word == b"set" {
                FieldOp::Set(v)
            } else {
                FieldOp::IncrBy(v)
            }
        };
        cmds.push(FieldCmd {
            op,
            ty,
            offset,
            overflow,
        });
        i += needs + 1;
    }
    // Checked once the whole request parsed, as Redis does.
    if read_only && cmds.iter().any(|c| !matches!(c.op, FieldOp::Get)) {
        return Err("ERR BITFIELD_RO only supports the GET subcommand".into());
    }
    Ok(cmds)
}

/// Runs the subcommands in order: their results, whether a SET or INCRBY wrote (was not
/// cancelled by OVERFLOW FAIL), and whether one changed a field's value.
fn run_fields(s: &mut Vec<u8>, cmds: &[FieldCmd]) -> (Vec<Option<i64>>, bool, bool) {
    let (mut wrote, mut changed) = (false, false);
    let mut write = |s: &mut Vec<u8>, c: &FieldCmd, old: i64, new: i64| {
        write_field(s, c.offset, c.ty, new);
        wrote = true;
        changed |= read_field(s, c.offset, c.ty) != old;
    };
    let results = cmds
        .iter()
        .map(|c| {
            let old = read_field(s, c.offset, c.ty);
            match c.op {
                FieldOp::Get => Some(old),
                FieldOp::Set(v) => {
                    let new = field_add(c.ty, v, 0, c.overflow)?;
                    write(s, c, old, new);
                    Some(old)
                }
                FieldOp::IncrBy(by) => {
                    let new = field_add(c.ty, old, by, c.overflow)?;
                    write(s, c, old, new);
                    Some(new)
                }
            }
        })
        .collect();
    (results, wrote, changed)
}

fn reply_fields(r: &mut ReplyBuf, results: &[Option<i64>]) {
    r.array(results.len());
    for v in results {
        match v {
            Some(v) => r.int(*v),
            None => r.null(),
        }
    }
}

fn bitfield_generic(ctx: &mut ExecCtx, args: &Args, read_only: bool) {
    let cmds = match parse_bitfield(args, read_only, ctx.max_bulk_len) {
        Ok(c) => c,
        Err(e) => return ctx.error(&e),
    };
    // The highest bit a SET or INCRBY touches: the string grows to cover it up front, even
    // when an overflow then cancels the write, as in Redis.
    let last_written = cmds
        .iter()
        .filter(|c| !matches!(c.op, FieldOp::Get))
        .map(|c| c.offset + u64::from(c.ty.bits) - 1)
        .max();
    let Some(last_written) = last_written else {
        return read_string(ctx, args.get(1), |s, r| {
            let s = s.unwrap_or_default();
            let results: Vec<Option<i64>> = cmds
                .iter()
                .map(|c| Some(read_field(s, c.offset, c.ty)))
                .collect();
            reply_fields(r, &results);
        });
    };
    let key = args.get(1);
    let ran = write_string(ctx, key, |s| {
        let need = (last_written / 8 + 1) as usize;
        let grown = s.len() < need;
        if grown {
            s.resize(need, 0);
        }
        let (results, wrote, changed) = run_fields(s, &cmds);
        // The data changed if the string grew or a field took a new value; the event is
        // announced, as in Redis, only for a write that OVERFLOW FAIL did not cancel.
        let changed = grown || changed;
        ((results, wrote && changed), changed)
    });
    if let Ok((results, announce)) = ran {
        if announce {
            ctx.notify(class::STRING, "setbit", key);
        }
        reply_fields(ctx.reply, &results);
    }
}

pub fn bitfield(ctx: &mut ExecCtx, args: &Args) {
    bitfield_generic(ctx, args, false);
}

pub fn bitfield_ro(ctx: &mut ExecCtx, args: &Args) {
    bitfield_generic(ctx, args, true);
}
