//! Set commands on one shard (Redis 7.0's t_set.c). The multi-key ones (SMOVE, SINTER...,
//! SINTERCARD) run here whole when their keys share a shard; across shards the coordinator
//! gathers the keys into one place inside a transaction and runs these same handlers.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::set::Member;
use damselfly_storage::{Kind, Set, Value, ValueRef};
use rand::Rng;

use crate::hash_family::{parse_rand_count, random_picks};
use crate::scan_args::{reply_scan, scan_collection};
use crate::{errors, Args, ExecCtx};

fn member_bulk(r: &mut ReplyBuf, m: Member) {
    match m {
        Member::Int(i) => r.bulk_i64(i),
        Member::Bytes(b) => r.bulk(b),
    }
}

pub fn sadd(ctx: &mut ExecCtx, args: &Args) {
    let added = ctx.write_or_create(args.get(1), |s: &mut Set, _, limits| {
        args.iter().skip(2).filter(|m| s.add(m, limits)).count() as i64
    });
    if let Some(n) = added {
        if n > 0 {
            ctx.notify(class::SET, "sadd", args.get(1));
        }
        ctx.reply.int(n);
    }
}

pub fn srem(ctx: &mut ExecCtx, args: &Args) {
    let (key, members) = (args.get(1), args.iter().skip(2));
    ctx.remove_each(key, members, Set::remove, class::SET, "srem");
}

pub fn sismember(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Set>(
        args.get(1),
        |r| r.int(0),
        |s, r| r.int(i64::from(s.contains(args.get(2)))),
    );
}

pub fn smismember(ctx: &mut ExecCtx, args: &Args) {
    let members = || args.iter().skip(2);
    ctx.read_as::<Set>(
        args.get(1),
        |r| {
            r.array(args.len() - 2);
            members().for_each(|_| r.int(0));
        },
        |s, r| {
            r.array(args.len() - 2);
            members().for_each(|m| r.int(i64::from(s.contains(m))));
        },
    );
}

fn reply_members(s: &Set, r: &mut ReplyBuf) {
    r.set(s.len());
    for m in s.iter() {
        member_bulk(r, m);
    }
}

pub fn smembers(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Set>(args.get(1), |r| r.set(0), reply_members);
}

pub fn scard(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Set>(args.get(1), |r| r.int(0), |s, r| r.int(s.len() as i64));
}

pub fn spop(ctx: &mut ExecCtx, args: &Args) {
    if args.len() > 3 {
        return ctx.error(errors::SYNTAX);
    }
    let count = if args.len() == 3 {
        match parse_i64(args.get(2)) {
            Some(c) if c >= 0 => Some(c as u64),
            _ => return ctx.error(errors::NOT_POSITIVE),
        }
    } else {
        None
    };
    if count == Some(0) {
        return match ctx.lookup_write(args.get(1)).map(|e| e.value().kind()) {
            Some(k) if k != Kind::Set => ctx.wrongtype(),
            _ => ctx.reply.set(0),
        };
    }
    // The journal records which members went (a random pick does not replay).
    let journaling = ctx.effects.is_some();
    let mut taken: Vec<Vec<u8>> = Vec::new();
    let mut emptied = false;
    let popped = ctx.write_as(args.get(1), |s: &mut Set, r, _| {
        let mut rng = rand::thread_rng();
        let mut take = |s: &mut Set, r: &mut ReplyBuf| {
            let i = rng.gen_range(0..s.len());
            let m = s.take_at(i);
            r.bulk(&m);
            if journaling {
                taken.push(m);
            }
        };
        match count {
            None => take(s, r),
            Some(n) if n >= s.len() as u64 => {
                reply_members(s, r);
                *s = Set::default();
                emptied = true;
            }
            Some(n) => {
                r.set(n as usize);
                for _ in 0..n {
                    take(s, r);
                }
            }
        }
    });
    let key = args.get(1);
    if let Ok(Some(())) = popped {
        ctx.notify(class::SET, "spop", key);
    }
    if emptied {
        ctx.propagate(&[b"DEL", key]);
    } else if !taken.is_empty() {
        let mut srem: Vec<&[u8]> = vec![b"SREM", key];
        srem.extend(taken.iter().map(Vec::as_slice));
        ctx.propagate(&srem);
    }
    if let Ok(None) = popped {
        match count {
            None => ctx.reply.null(),
            Some(_) => ctx.reply.set(0),
        }
    }
}

pub fn srandmember(ctx: &mut ExecCtx, args: &Args) {
    if args.len() > 3 {
        return ctx.error(errors::SYNTAX);
    }
    if args.len() == 2 {
        return ctx.read_as::<Set>(args.get(1), ReplyBuf::null, |s, r| {
            let i = rand::thread_rng().gen_range(0..s.len());
            member_bulk(r, s.at(i));
        });
    }
    let count = match parse_rand_count(args.get(2), false) {
        Ok(c) => c,
        Err(e) => return ctx.error(e),
    };
    ctx.read_as::<Set>(
        args.get(1),
        |r| r.array(0),
        |s, r| {
            let picks = random_picks(s.len(), count);
            r.array(picks.len());
            for i in picks {
                if r.full() {
                    break;
                }
                member_bulk(r, s.at(i));
            }
        },
    );
}

pub fn smove(ctx: &mut ExecCtx, args: &Args) {
    let (src, dst, m) = (args.get(1), args.get(2), args.get(3));
    let src_kind = ctx.lookup_write(src).map(|e| e.value().kind());
    let dst_kind = ctx.lookup_write(dst).map(|e| e.value().kind());
    match (src_kind, dst_kind) {
        (None, _) => return ctx.reply.int(0),
        (Some(k), _) if k != Kind::Set => return ctx.wrongtype(),
        (_, Some(k)) if k != Kind::Set => return ctx.wrongtype(),
        _ => {}
    }
    if src == dst {
        let found = matches!(ctx.lookup_write(src).map(|e| e.value()), Some(ValueRef::Set(s)) if s.contains(m));
        return ctx.reply.int(i64::from(found));
    }
    let removed = ctx.write_as(src, |s: &mut Set, _, _| s.remove(m));
    if removed != Ok(Some(true)) {
        return ctx.reply.int(0);
    }
    // `srem` (then `del` if the source went), then `sadd` if the member was new there.
    ctx.notify(class::SET, "srem", src);
    if ctx.write_or_create(dst, |s: &mut Set, _, limits| s.add(m, limits)) == Some(true) {
        ctx.notify(class::SET, "sadd", dst);
    }
    ctx.reply.int(1);
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

/// Collects the sets under `keys` (None for missing keys); None after WRONGTYPE. Every key
/// is read (a miss counts, and a later key of another type is still WRONGTYPE), as Redis
/// 7.0 does; once SINTER met a missing key the others are only type-checked.
fn load_sets(ctx: &mut ExecCtx, keys: &[&[u8]], op: SetOp) -> Option<Vec<Option<Set>>> {
    let mut sets = Vec::with_capacity(keys.len());
    let mut empty_inter = false;
    for key in keys {
        match ctx.lookup_read(key).map(|e| e.value()) {
            None => {
                sets.push(None);
                empty_inter |= op == SetOp::Inter;
            }
            Some(ValueRef::Set(_)) if empty_inter => sets.push(None),
            Some(ValueRef::Set(s)) => sets.push(Some(s.clone())),
            Some(_) => {
                ctx.wrongtype();
                return None;
            }
        }
    }
    Some(sets)
}

fn combine(sets: &[Option<Set>], op: SetOp, limits: &damselfly_storage::EncodingLimits) -> Set {
    let mut out = Set::default();
    match op {
        SetOp::Union => {
            for s in sets.iter().flatten() {
                for m in s.iter() {
                    out.add(&m.to_vec(), limits);
                }
            }
        }
        SetOp::Inter => {
            if sets.iter().any(Option::is_none) {
                return out;
            }
            let mut all: Vec<&Set> = sets.iter().flatten().collect();
            all.sort_by_key(|s| s.len());
            for m in all[0].iter() {
                let m = m.to_vec();
                if all[1..].iter().all(|s| s.contains(&m)) {
                    out.add(&m, limits);
                }
            }
        }
        SetOp::Diff => {
            let Some(Some(first)) = sets.first() else {
                return out;
            };
            for m in first.iter() {
                let m = m.to_vec();
                if !sets[1..].iter().flatten().any(|s| s.contains(&m)) {
                    out.add(&m, limits);
                }
            }
        }
    }
    out
}

fn set_op(ctx: &mut ExecCtx, args: &Args, op: SetOp, store: bool) {
    let first = if store { 2 } else { 1 };
    let keys: Vec<&[u8]> = args.iter().skip(first).collect();
    let Some(sets) = load_sets(ctx, &keys, op) else {
        return;
    };
    let result = combine(&sets, op, &ctx.limits());
    if store {
        let event = match op {
            SetOp::Union => "sunionstore",
            SetOp::Inter => "sinterstore",
            SetOp::Diff => "sdiffstore",
        };
        ctx.reply.int(result.len() as i64);
        ctx.store_result(args.get(1), Value::Set(Box::new(result)), class::SET, event);
    } else {
        reply_members(&result, ctx.reply);
    }
}

pub fn sunion(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Union, false);
}

pub fn sinter(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Inter, false);
}

pub fn sdiff(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Diff, false);
}

pub fn sunionstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Union, true);
}

pub fn sinterstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Inter, true);
}

pub fn sdiffstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Diff, true);
}

/// Parses `numkeys key... [LIMIT n]` (SINTERCARD): the keys and the limit.
fn parse_card_args<'a>(args: &Args<'a>) -> Result<(Vec<&'a [u8]>, u64), &'static str> {
    let n = match parse_i64(args.get(1)) {
        Some(n) if n <= 0 => return Err("ERR numkeys should be greater than 0"),
        None => return Err("ERR numkeys should be greater than 0"),
        Some(n) if n as u64 > (args.len() - 2) as u64 => {
            return Err("ERR Number of keys can't be greater than number of args")
        }
        Some(n) => n as usize,
    };
    let keys = (2..2 + n).map(|i| args.get(i)).collect();
    let mut limit = 0;
    let mut i = 2 + n;
    while i < args.len() {
        if args.is(i, "limit") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                Some(l) if l >= 0 => limit = l as u64,
                _ => return Err("ERR LIMIT can't be negative"),
            }
            i += 2;
        } else {
            return Err(errors::SYNTAX);
        }
    }
    Ok((keys, limit))
}

pub fn sintercard(ctx: &mut ExecCtx, args: &Args) {
    let (keys, limit) = match parse_card_args(args) {
        Ok(k) => k,
        Err(e) => return ctx.error(e),
    };
    let Some(sets) = load_sets(ctx, &keys, SetOp::Inter) else {
        return;
    };
    let n = combine(&sets, SetOp::Inter, &ctx.limits()).len() as u64;
    let n = if limit > 0 { n.min(limit) } else { n };
    ctx.reply.int(n as i64);
}

pub fn sscan(ctx: &mut ExecCtx, args: &Args) {
    scan_collection(ctx, args, |s: &Set, cursor, opts, r| {
        let (next, items): (u64, Vec<Vec<u8>>) = match s.dict() {
            None => (0, s.iter().map(|m| m.to_vec()).collect()),
            Some(d) => {
                let (next, range) = d.scan(cursor, opts.count);
                (next, range.map(|i| d.at(i).to_vec()).collect())
            }
        };
        let items: Vec<Vec<u8>> = items.into_iter().filter(|m| opts.matches(m)).collect();
        reply_scan(r, next, &items);
    });
}
