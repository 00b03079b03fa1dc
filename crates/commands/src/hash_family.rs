//! Hash commands on one shard (Redis 7.0's t_hash.c): HSET and friends, reads, the increment
//! commands, HRANDFIELD and HSCAN. Keys whose last field is deleted are removed.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{Hash, ValueRef};
use rand::seq::index::sample;
use rand::Rng;

use crate::ctx::WrongType;
use crate::long_double::{incr_by_float, IncrFloatError};
use crate::scan_args::{reply_scan, scan_collection};
use crate::{errors, Args, ExecCtx};

/// Sets field/value pairs from argument 2 on, creating the hash; returns how many were new.
fn set_pairs(ctx: &mut ExecCtx, args: &Args, only_new: bool) -> Option<i64> {
    ctx.write_or_create(args.get(1), |h: &mut Hash, _, limits| {
        let mut added = 0;
        for i in (2..args.len()).step_by(2) {
            if only_new && h.contains(args.get(i)) {
                continue;
            }
            added += i64::from(h.set(args.get(i), args.get(i + 1), limits));
        }
        added
    })
}

pub fn hset(ctx: &mut ExecCtx, args: &Args) {
    if args.len() % 2 == 1 {
        return ctx.error(&errors::wrong_arity(
            &String::from_utf8_lossy(args.get(0)).to_lowercase(),
        ));
    }
    if let Some(n) = set_pairs(ctx, args, false) {
        // Redis announces the write even when no field changed.
        ctx.notify(class::HASH, "hset", args.get(1));
        if args.is(0, "hmset") {
            ctx.reply.ok();
        } else {
            ctx.reply.int(n);
        }
    }
}

pub fn hsetnx(ctx: &mut ExecCtx, args: &Args) {
    if let Some(n) = set_pairs(ctx, args, true) {
        if n > 0 {
            ctx.notify(class::HASH, "hset", args.get(1));
        }
        ctx.reply.int(n);
    }
}

pub fn hget(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Hash>(args.get(1), ReplyBuf::null, |h, r| {
        match h.get(args.get(2)) {
            Some(v) => r.bulk(v),
            None => r.null(),
        }
    });
}

pub fn hmget(ctx: &mut ExecCtx, args: &Args) {
    let fields = || args.iter().skip(2);
    ctx.read_as::<Hash>(
        args.get(1),
        |r| {
            r.array(args.len() - 2);
            fields().for_each(|_| r.null());
        },
        |h, r| {
            r.array(args.len() - 2);
            for f in fields() {
                match h.get(f) {
                    Some(v) => r.bulk(v),
                    None => r.null(),
                }
            }
        },
    );
}

pub fn hdel(ctx: &mut ExecCtx, args: &Args) {
    let (key, fields) = (args.get(1), args.iter().skip(2));
    ctx.remove_each(key, fields, Hash::remove, class::HASH, "hdel");
}

pub fn hexists(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Hash>(
        args.get(1),
        |r| r.int(0),
        |h, r| r.int(i64::from(h.contains(args.get(2)))),
    );
}

pub fn hlen(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Hash>(args.get(1), |r| r.int(0), |h, r| r.int(h.len() as i64));
}

pub fn hstrlen(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<Hash>(
        args.get(1),
        |r| r.int(0),
        |h, r| r.int(h.get(args.get(2)).map_or(0, <[u8]>::len) as i64),
    );
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Parts {
    Fields,
    Values,
    Both,
}

fn get_all(ctx: &mut ExecCtx, args: &Args, parts: Parts) {
    ctx.read_as::<Hash>(
        args.get(1),
        |r| {
            if parts == Parts::Both {
                r.map(0)
            } else {
                r.array(0)
            }
        },
        |h, r| {
            match parts {
                Parts::Both => r.map(h.len()),
                _ => r.array(h.len()),
            }
            for (f, v) in h.iter() {
                if parts != Parts::Values {
                    r.bulk(f);
                }
                if parts != Parts::Fields {
                    r.bulk(v);
                }
            }
        },
    );
}

pub fn hkeys(ctx: &mut ExecCtx, args: &Args) {
    get_all(ctx, args, Parts::Fields);
}

pub fn hvals(ctx: &mut ExecCtx, args: &Args) {
    get_all(ctx, args, Parts::Values);
}

pub fn hgetall(ctx: &mut ExecCtx, args: &Args) {
    get_all(ctx, args, Parts::Both);
}

/// Stores `text` as the field's new value, creating the hash if needed, and records `event`.
fn store_field(ctx: &mut ExecCtx, key: &[u8], field: &[u8], text: &[u8], event: &'static str) {
    ctx.write_or_create(key, |h: &mut Hash, _, limits| h.set(field, text, limits));
    ctx.notify(class::HASH, event, key);
}

/// The field's current value: Err(WrongType) after WRONGTYPE.
fn current_field(
    ctx: &mut ExecCtx,
    key: &[u8],
    field: &[u8],
) -> Result<Option<Vec<u8>>, WrongType> {
    match ctx.lookup_write(key).map(|e| e.value()) {
        None => Ok(None),
        Some(ValueRef::Hash(h)) => Ok(h.get(field).map(<[u8]>::to_vec)),
        Some(_) => {
            ctx.wrongtype();
            Err(WrongType)
        }
    }
}

pub fn hincrby(ctx: &mut ExecCtx, args: &Args) {
    let Some(incr) = parse_i64(args.get(3)) else {
        return ctx.error(errors::NOT_INT);
    };
    let (key, field) = (args.get(1), args.get(2));
    let Ok(current) = current_field(ctx, key, field) else {
        return;
    };
    let old = match current {
        None => 0,
        Some(text) => match parse_i64(&text) {
            Some(v) => v,
            None => return ctx.error("ERR hash value is not an integer"),
        },
    };
    let Some(new) = old.checked_add(incr) else {
        return ctx.error(errors::OVERFLOW);
    };
    store_field(ctx, key, field, new.to_string().as_bytes(), "hincrby");
    ctx.reply.int(new);
}

pub fn hincrbyfloat(ctx: &mut ExecCtx, args: &Args) {
    match incr_by_float(None, args.get(3)) {
        Err(IncrFloatError::NanOrInfinity) => return ctx.error("ERR value is NaN or Infinity"),
        Err(_) => return ctx.error(errors::NOT_FLOAT),
        Ok(_) => {}
    }
    let (key, field) = (args.get(1), args.get(2));
    let Ok(old) = current_field(ctx, key, field) else {
        return;
    };
    match incr_by_float(old.as_deref(), args.get(3)) {
        Ok(text) => {
            store_field(ctx, key, field, &text, "hincrbyfloat");
            ctx.propagate(&[b"HSET", key, field, &text]);
            ctx.reply.bulk(&text);
        }
        Err(IncrFloatError::ValueNotFloat) => ctx.error("ERR hash value is not a float"),
        Err(IncrFloatError::NanOrInfinity) => ctx.error(errors::NAN_OR_INF),
        Err(IncrFloatError::IncrNotFloat) => ctx.error(errors::NOT_FLOAT),
    }
}

/// Parses the count argument of HRANDFIELD / SRANDMEMBER / ZRANDMEMBER with Redis's range
/// errors (WITHVALUES halves the range, as the reply doubles).
pub fn parse_rand_count(raw: &[u8], with_values: bool) -> Result<i64, &'static str> {
    match parse_i64(raw) {
        None => Err(errors::NOT_INT),
        Some(i64::MIN) => Err("ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807"),
        Some(c) if with_values && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&c) => {
            Err("ERR value is out of range")
        }
        Some(c) => Ok(c),
    }
}

/// HRANDFIELD's and ZRANDMEMBER's `key count [WITHVALUES|WITHSCORES]`, in Redis's order: the
/// count is read (with its range error) before the option is checked.
pub fn parse_rand_args(args: &Args, option: &str) -> Result<(i64, bool), &'static str> {
    let with = args.len() == 4 && args.is(3, option);
    let count = parse_rand_count(args.get(2), with)?;
    if args.len() > 4 || (args.len() == 4 && !with) {
        return Err(errors::SYNTAX);
    }
    Ok((count, with))
}

pub fn hrandfield(ctx: &mut ExecCtx, args: &Args) {
    if args.len() == 2 {
        return ctx.read_as::<Hash>(args.get(1), ReplyBuf::null, |h, r| {
            let i = rand::thread_rng().gen_range(0..h.len());
            r.bulk(h.at(i).0);
        });
    }
    let (count, with_values) = match parse_rand_args(args, "withvalues") {
        Ok(parsed) => parsed,
        Err(e) => return ctx.error(e),
    };
    let resp3 = ctx.reply.resp3;
    ctx.read_as::<Hash>(
        args.get(1),
        |r| r.array(0),
        |h, r| {
            let picks = random_picks(h.len(), count);
            let pair = |r: &mut ReplyBuf, (f, v): (&[u8], &[u8])| {
                if with_values && resp3 {
                    r.array(2);
                }
                r.bulk(f);
                if with_values {
                    r.bulk(v);
                }
            };
            let per_pick = if with_values && !resp3 { 2 } else { 1 };
            r.array(picks.len().saturating_mul(per_pick));
            for i in picks {
                if r.full() {
                    break;
                }
                pair(r, h.at(i));
            }
        },
    );
}

/// Storage positions for a random read of `count` from `len` items: distinct when the count
/// is positive (everything when it covers the collection), with repeats when negative. The
/// repeats are drawn as the reply is written, not collected first: their number is the
/// client's choice, and the reply loop stops once its buffer is `full()`.
pub fn random_picks(len: usize, count: i64) -> RandomPicks {
    let mut rng = rand::thread_rng();
    if count < 0 {
        RandomPicks::Repeating {
            left: usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX),
            len,
            rng,
        }
    } else if usize::try_from(count).map_or(true, |c| c >= len) {
        RandomPicks::Distinct((0..len).collect::<Vec<_>>().into_iter())
    } else {
        let count = usize::try_from(count).unwrap_or(len);
        RandomPicks::Distinct(sample(&mut rng, len, count).into_vec().into_iter())
    }
}

/// The positions `random_picks` chose.
pub enum RandomPicks {
    Distinct(std::vec::IntoIter<usize>),
    Repeating {
        left: usize,
        len: usize,
        rng: rand::rngs::ThreadRng,
    },
}

impl Iterator for RandomPicks {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        match self {
            RandomPicks::Distinct(picks) => picks.next(),
            RandomPicks::Repeating { left, len, rng } => {
                *left = left.checked_sub(1)?;
                Some(rng.gen_range(0..*len))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = match self {
            RandomPicks::Distinct(picks) => picks.len(),
            RandomPicks::Repeating { left, .. } => *left,
        };
        (n, Some(n))
    }
}

impl ExactSizeIterator for RandomPicks {}

pub fn hscan(ctx: &mut ExecCtx, args: &Args) {
    scan_collection(ctx, args, |h: &Hash, cursor, opts, r| {
        type Pairs<'a> = Vec<(&'a [u8], &'a [u8])>;
        let (next, items): (u64, Pairs) = match h.dict() {
            None => (0, h.iter().collect()),
            Some(d) => {
                let (next, range) = d.scan(cursor, opts.count);
                (next, range.map(|i| h.at(i)).collect())
            }
        };
        let flat: Vec<&[u8]> = items
            .into_iter()
            .filter(|(f, _)| opts.matches(f))
            .flat_map(|(f, v)| [f, v])
            .collect();
        reply_scan(r, next, &flat);
    });
}
