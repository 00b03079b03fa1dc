//! List commands on one shard (Redis 7.0's t_list.c), without the blocking variants. LMOVE,
//! RPOPLPUSH and LMPOP over keys on several shards run through the coordinator's gather path.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{EncodingLimits, End, Kind, List, Value};

use crate::ctx::WrongType;
use crate::{errors, Args, ExecCtx};

/// The event Redis names a push at `end` with (LPUSH, RPUSH, the push half of LMOVE).
pub fn push_event(end: End) -> &'static str {
    match end {
        End::Head => "lpush",
        End::Tail => "rpush",
    }
}

/// The event Redis names a pop from `end` with (LPOP, LMPOP, BLPOP, the pop half of LMOVE).
pub fn pop_event(end: End) -> &'static str {
    match end {
        End::Head => "lpop",
        End::Tail => "rpop",
    }
}

/// Runs `f` on the list under `key` for writing; `Ok(None)` when the key is missing,
/// `Err(WrongType)` after WRONGTYPE.
fn write_list<R>(
    ctx: &mut ExecCtx,
    key: &[u8],
    f: impl FnOnce(&mut List, &mut ReplyBuf, i64) -> R,
) -> Result<Option<R>, WrongType> {
    ctx.write_as(key, |l: &mut List, r, limits| {
        f(l, r, limits.list_max_listpack_size)
    })
}

fn push(ctx: &mut ExecCtx, args: &Args, end: End, only_existing: bool) {
    let push_all = |l: &mut List, _: &mut ReplyBuf, limits: &EncodingLimits| {
        for e in args.iter().skip(2) {
            l.push(end, e, limits.list_max_listpack_size);
        }
        l.len() as i64
    };
    let len = if only_existing {
        match ctx.write_as(args.get(1), push_all) {
            Err(WrongType) => return,
            Ok(n) => Some(n.unwrap_or(0)),
        }
    } else {
        ctx.write_or_create(args.get(1), push_all)
    };
    match len {
        // LPUSHX/RPUSHX on a missing key changed nothing.
        Some(0) => ctx.reply.int(0),
        Some(n) => {
            ctx.notify(class::LIST, push_event(end), args.get(1));
            ctx.reply.int(n);
        }
        None => {}
    }
}

pub fn lpush(ctx: &mut ExecCtx, args: &Args) {
    push(ctx, args, End::Head, false);
}

pub fn rpush(ctx: &mut ExecCtx, args: &Args) {
    push(ctx, args, End::Tail, false);
}

pub fn lpushx(ctx: &mut ExecCtx, args: &Args) {
    push(ctx, args, End::Head, true);
}

pub fn rpushx(ctx: &mut ExecCtx, args: &Args) {
    push(ctx, args, End::Tail, true);
}

fn pop(ctx: &mut ExecCtx, args: &Args, end: End) {
    if args.len() > 3 {
        let name = String::from_utf8_lossy(args.get(0)).to_lowercase();
        return ctx.error(&errors::wrong_arity(&name));
    }
    let count = if args.len() == 3 {
        match parse_i64(args.get(2)) {
            Some(c) if c >= 0 => Some(c as usize),
            _ => return ctx.error(errors::NOT_POSITIVE),
        }
    } else {
        None
    };
    let popped = write_list(ctx, args.get(1), |l, r, _| match count {
        None => match l.pop(end) {
            Some(v) => {
                r.bulk(&v);
                true
            }
            None => {
                r.null();
                false
            }
        },
        Some(n) => {
            let n = n.min(l.len());
            r.array(n);
            for _ in 0..n {
                if let Some(v) = l.pop(end) {
                    r.bulk(&v);
                }
            }
            n > 0
        }
    });
    match popped {
        Ok(None) => match count {
            None => ctx.reply.null(),
            Some(_) => ctx.reply.null_array(),
        },
        // A count of 0 pops nothing and names nothing.
        Ok(Some(true)) => ctx.notify(class::LIST, pop_event(end), args.get(1)),
        Ok(Some(false)) | Err(WrongType) => {}
    }
}

pub fn lpop(ctx: &mut ExecCtx, args: &Args) {
    pop(ctx, args, End::Head);
}

pub fn rpop(ctx: &mut ExecCtx, args: &Args) {
    pop(ctx, args, End::Tail);
}

pub fn llen(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<List>(args.get(1), |r| r.int(0), |l, r| r.int(l.len() as i64));
}

/// A possibly negative index into a list of `len`; None when out of range.
fn resolve(index: i64, len: usize) -> Option<usize> {
    let i = if index < 0 { index + len as i64 } else { index };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// LINDEX and LSET look the key up before parsing the index, as Redis does.
pub fn lindex(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<List>(args.get(1), ReplyBuf::null, |l, r| {
        let Some(index) = parse_i64(args.get(2)) else {
            return r.error(errors::NOT_INT);
        };
        match resolve(index, l.len()).and_then(|i| l.get(i)) {
            Some(v) => r.bulk(v),
            None => r.null(),
        }
    });
}

pub fn lset(ctx: &mut ExecCtx, args: &Args) {
    let element = args.get(3);
    let done = write_list(ctx, args.get(1), |l, r, _| {
        let Some(index) = parse_i64(args.get(2)) else {
            r.error(errors::NOT_INT);
            return false;
        };
        match resolve(index, l.len()) {
            Some(i) => {
                l.set(i, element);
                r.ok();
                true
            }
            None => {
                r.error("ERR index out of range");
                false
            }
        }
    });
    match done {
        Ok(None) => ctx.error("ERR no such key"),
        Ok(Some(true)) => ctx.notify(class::LIST, "lset", args.get(1)),
        Ok(Some(false)) | Err(WrongType) => {}
    }
}

/// The `start..end` range LRANGE/LTRIM select, clamped as Redis clamps.
fn clamp_range(start: i64, stop: i64, len: usize) -> std::ops::Range<usize> {
    let len = len as i64;
    let start = if start < 0 {
        (start + len).max(0)
    } else {
        start
    };
    let stop = if stop < 0 {
        stop + len
    } else {
        stop.min(len - 1)
    };
    if start > stop || start >= len {
        0..0
    } else {
        start as usize..stop as usize + 1
    }
}

pub fn lrange(ctx: &mut ExecCtx, args: &Args) {
    let (Some(start), Some(stop)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        return ctx.error(errors::NOT_INT);
    };
    ctx.read_as::<List>(
        args.get(1),
        |r| r.array(0),
        |l, r| {
            let range = clamp_range(start, stop, l.len());
            r.array(range.len());
            for v in l.iter_from(range.start).take(range.len()) {
                r.bulk(v);
            }
        },
    );
}

pub fn ltrim(ctx: &mut ExecCtx, args: &Args) {
    let (Some(start), Some(stop)) = (parse_i64(args.get(2)), parse_i64(args.get(3))) else {
        return ctx.error(errors::NOT_INT);
    };
    let done = write_list(ctx, args.get(1), |l, r, _| {
        let range = clamp_range(start, stop, l.len());
        let tail = l.len() - range.end.max(range.start);
        l.remove_end(End::Tail, if range.is_empty() { l.len() } else { tail });
        l.remove_end(End::Head, range.start.min(l.len()));
        r.ok();
    });
    match done {
        Ok(None) => ctx.reply.ok(),
        // Redis names every LTRIM of a list, even one that kept it whole (then `del` if it
        // emptied it).
        Ok(Some(())) => ctx.notify(class::LIST, "ltrim", args.get(1)),
        Err(WrongType) => {}
    }
}

pub fn linsert(ctx: &mut ExecCtx, args: &Args) {
    let after = if args.is(2, "after") {
        true
    } else if args.is(2, "before") {
        false
    } else {
        return ctx.error(errors::SYNTAX);
    };
    let (pivot, element) = (args.get(3), args.get(4));
    let done = write_list(ctx, args.get(1), |l, r, fill| {
        let found = l.iter().position(|v| v == pivot);
        match found {
            Some(i) => {
                l.insert(i + usize::from(after), element, fill);
                r.int(l.len() as i64);
                true
            }
            None => {
                r.int(-1);
                false
            }
        }
    });
    match done {
        Ok(None) => ctx.reply.int(0),
        Ok(Some(true)) => ctx.notify(class::LIST, "linsert", args.get(1)),
        Ok(Some(false)) | Err(WrongType) => {}
    }
}

pub fn lrem(ctx: &mut ExecCtx, args: &Args) {
    let Some(count) = parse_i64(args.get(2)) else {
        return ctx.error(errors::NOT_INT);
    };
    let element = args.get(3);
    let done = write_list(ctx, args.get(1), |l, r, fill| {
        let matches: Vec<usize> = l
            .iter()
            .enumerate()
            .filter(|(_, v)| *v == element)
            .map(|(i, _)| i)
            .collect();
        let limit = if count == 0 {
            matches.len()
        } else {
            (count.unsigned_abs() as usize).min(matches.len())
        };
        let doomed: Vec<usize> = if count < 0 {
            matches[matches.len() - limit..].to_vec()
        } else {
            matches[..limit].to_vec()
        };
        let mut index = 0;
        l.retain(fill, |_| {
            let keep = doomed.binary_search(&index).is_err();
            index += 1;
            keep
        });
        r.int(doomed.len() as i64);
        !doomed.is_empty()
    });
    match done {
        Ok(None) => ctx.reply.int(0),
        Ok(Some(true)) => ctx.notify(class::LIST, "lrem", args.get(1)),
        Ok(Some(false)) | Err(WrongType) => {}
    }
}

pub fn lpos(ctx: &mut ExecCtx, args: &Args) {
    let element = args.get(2);
    let (mut rank, mut count, mut maxlen) = (1i64, None::<usize>, 0usize);
    let mut i = 3;
    while i < args.len() {
        let known = ["rank", "count", "maxlen"].iter().any(|o| args.is(i, o));
        if !known || i + 1 >= args.len() {
            return ctx.error(errors::SYNTAX);
        }
        let parsed = parse_i64(args.get(i + 1));
        let v = match parsed {
            Some(v) => v,
            None if args.is(i, "count") => return ctx.error("ERR COUNT can't be negative"),
            None if args.is(i, "maxlen") => return ctx.error("ERR MAXLEN can't be negative"),
            None => return ctx.error(errors::NOT_INT),
        };
        if args.is(i, "rank") {
            if v == 0 {
                return ctx.error("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list");
            }
            rank = v;
        } else if args.is(i, "count") {
            if v < 0 {
                return ctx.error("ERR COUNT can't be negative");
            }
            count = Some(v as usize);
        } else if args.is(i, "maxlen") {
            if v < 0 {
                return ctx.error("ERR MAXLEN can't be negative");
            }
            maxlen = v as usize;
        } else {
            return ctx.error(errors::SYNTAX);
        }
        i += 2;
    }
    ctx.read_as::<List>(
        args.get(1),
        |r| match count {
            Some(_) => r.array(0),
            None => r.null(),
        },
        |l, r| {
            let len = l.len();
            let scan = if maxlen == 0 { len } else { maxlen.min(len) };
            let want = match count {
                Some(0) => usize::MAX,
                Some(c) => c,
                None => 1,
            };
            let skip = rank.unsigned_abs() as usize - 1;
            let hits: Vec<usize> = if rank > 0 {
                l.iter()
                    .take(scan)
                    .enumerate()
                    .filter(|(_, v)| *v == element)
                    .map(|(i, _)| i)
                    .skip(skip)
                    .take(want)
                    .collect()
            } else {
                l.iter()
                    .rev()
                    .take(scan)
                    .enumerate()
                    .filter(|(_, v)| *v == element)
                    .map(|(i, _)| len - 1 - i)
                    .skip(skip)
                    .take(want)
                    .collect()
            };
            match count {
                Some(_) => {
                    r.array(hits.len());
                    hits.iter().for_each(|&h| r.int(h as i64));
                }
                None => match hits.first() {
                    Some(&h) => r.int(h as i64),
                    None => r.null(),
                },
            }
        },
    );
}

pub fn parse_end(args: &Args, i: usize) -> Option<End> {
    if args.is(i, "left") {
        Some(End::Head)
    } else if args.is(i, "right") {
        Some(End::Tail)
    } else {
        None
    }
}

/// Pops from `src` and pushes onto `dst`; replies with the element or null. Redis names the
/// push first (after `new` for a created destination), then the pop, then `del` of an
/// emptied source.
pub fn move_element(ctx: &mut ExecCtx, src: &[u8], dst: &[u8], from: End, to: End) {
    let src_ok = ctx.check_write(src, Kind::List);
    let Some(src_exists) = src_ok else { return };
    if !src_exists {
        return ctx.reply.null();
    }
    if ctx.check_write(dst, Kind::List).is_none() {
        return;
    }
    if src == dst {
        // One list turned: never emptied, so the key (and its TTL) stays, as in Redis.
        let turned = write_list(ctx, src, |l, _, fill| {
            let v = l.pop(from)?;
            l.push(to, &v, fill);
            Some(v)
        });
        let Ok(Some(Some(v))) = turned else {
            return ctx.reply.null();
        };
        ctx.notify(class::LIST, push_event(to), dst);
        ctx.notify(class::LIST, pop_event(from), src);
        return ctx.reply.bulk(&v);
    }
    let Ok(Some(Some(v))) = write_list(ctx, src, |l, _, _| l.pop(from)) else {
        return ctx.reply.null();
    };
    if ctx.check_write(dst, Kind::List) == Some(false) {
        ctx.shard.set(ctx.db, dst, Value::List(Box::default()), 0);
    }
    let _ = write_list(ctx, dst, |l, _, fill| l.push(to, &v, fill));
    ctx.notify(class::LIST, push_event(to), dst);
    // Also emits the source's deferred `del` when the pop emptied it.
    ctx.notify(class::LIST, pop_event(from), src);
    ctx.reply.bulk(&v);
}

pub fn lmove(ctx: &mut ExecCtx, args: &Args) {
    let (Some(from), Some(to)) = (parse_end(args, 3), parse_end(args, 4)) else {
        return ctx.error(errors::SYNTAX);
    };
    move_element(ctx, args.get(1), args.get(2), from, to);
}

pub fn rpoplpush(ctx: &mut ExecCtx, args: &Args) {
    move_element(ctx, args.get(1), args.get(2), End::Tail, End::Head);
}

/// Parses `numkeys key... SIDE [COUNT n]` from argument `at` (LMPOP, ZMPOP at 1; BLMPOP,
/// BZMPOP at 2), where SIDE is one of `sides`: the keys, whether the second side was named,
/// and the count (1 by default).
pub fn parse_mpop<'a>(
    args: &Args<'a>,
    at: usize,
    sides: [&str; 2],
) -> Result<(Vec<&'a [u8]>, bool, usize), &'static str> {
    let numkeys = match parse_i64(args.get(at)) {
        Some(n) if n > 0 => n as usize,
        _ => return Err("ERR numkeys should be greater than 0"),
    };
    let side_at = at + 1 + numkeys;
    if numkeys >= args.len() || side_at >= args.len() {
        return Err(errors::SYNTAX);
    }
    let second = if args.is(side_at, sides[0]) {
        false
    } else if args.is(side_at, sides[1]) {
        true
    } else {
        return Err(errors::SYNTAX);
    };
    let mut count = None;
    let mut i = side_at + 1;
    while i < args.len() {
        if count.is_none() && args.is(i, "count") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                Some(c) if c > 0 => count = Some(c as usize),
                _ => return Err("ERR count should be greater than 0"),
            }
            i += 2;
        } else {
            return Err(errors::SYNTAX);
        }
    }
    let keys = (at + 1..side_at).map(|i| args.get(i)).collect();
    Ok((keys, second, count.unwrap_or(1)))
}

/// Pops up to `count` elements from the first of `keys` holding a list, replying
/// `[key, [elements]]`; false, with no reply written, when none holds one.
pub fn pop_lists(ctx: &mut ExecCtx, keys: &[&[u8]], end: End, count: usize) -> bool {
    for &key in keys {
        let done = write_list(ctx, key, |l, r, _| {
            let n = count.min(l.len());
            r.array(2);
            r.bulk(key);
            r.array(n);
            for _ in 0..n {
                if let Some(v) = l.pop(end) {
                    r.bulk(&v);
                }
            }
        });
        match done {
            Ok(Some(())) => {
                ctx.notify(class::LIST, pop_event(end), key);
                return true;
            }
            Err(WrongType) => return true,
            Ok(None) => {}
        }
    }
    false
}

pub fn lmpop(ctx: &mut ExecCtx, args: &Args) {
    let (keys, right, count) = match parse_mpop(args, 1, ["left", "right"]) {
        Ok(p) => p,
        Err(e) => return ctx.error(e),
    };
    let end = if right { End::Tail } else { End::Head };
    if !pop_lists(ctx, &keys, end, count) {
        ctx.reply.null_array();
    }
}
