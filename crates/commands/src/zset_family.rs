//! Sorted-set commands on one shard (Redis 7.0's t_zset.c): ZADD and its flags, rank, score
//! and lex ranges (one range engine behind ZRANGE and its older spellings), removals by range,
//! pops, ZRANDMEMBER, ZSCAN, and the set algebra (ZUNION/ZINTER/ZDIFF, their STORE forms and
//! ZINTERCARD). Multi-key forms over several shards run here on the coordinator's gathered
//! copy, like the set family's.

use std::collections::HashMap;

use damselfly_protocol::number::{format_f64_17g, parse_f64, parse_i64};
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::{EncodingLimits, Kind, Value, ValueRef, ZSet};

use crate::ctx::WrongType;
use crate::hash_family::{parse_rand_args, random_picks};
use crate::list_family::parse_mpop;
use crate::scan_args::{reply_scan, scan_collection};
use crate::{errors, Args, ExecCtx};

const NOT_FLOAT_RANGE: &str = "ERR min or max is not a float";
const NOT_LEX_RANGE: &str = "ERR min or max not valid string range item";
const NAN_SCORE: &str = "ERR resulting score is not a number (NaN)";

type Pairs = Vec<(Vec<u8>, f64)>;

/// Parses a score range bound as Redis's `zslParseRange` does: an optional `(` for an
/// exclusive bound, then what C's strtod reads whole (leading blanks allowed, overflow reads as
/// an infinity, an empty string as 0); NaN is refused. Returns (value, exclusive).
fn parse_score_bound(raw: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, text) = match raw.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, raw),
    };
    if text.is_empty() {
        return Some((0.0, exclusive));
    }
    let trimmed = text.trim_ascii_start();
    let v: f64 = std::str::from_utf8(trimmed).ok()?.parse().ok()?;
    (!v.is_nan()).then_some((v, exclusive))
}

#[derive(Clone, Copy)]
struct ScoreRange {
    min: (f64, bool),
    max: (f64, bool),
}

impl ScoreRange {
    fn parse(min: &[u8], max: &[u8]) -> Option<Self> {
        Some(ScoreRange {
            min: parse_score_bound(min)?,
            max: parse_score_bound(max)?,
        })
    }

    fn below_min(&self, s: f64) -> bool {
        s < self.min.0 || (self.min.1 && s == self.min.0)
    }

    fn within_max(&self, s: f64) -> bool {
        s < self.max.0 || (!self.max.1 && s == self.max.0)
    }
}

#[derive(Clone, Copy)]
enum LexBound<'a> {
    Lowest,
    Highest,
    Inclusive(&'a [u8]),
    Exclusive(&'a [u8]),
}

fn parse_lex_bound(raw: &[u8]) -> Option<LexBound<'_>> {
    match raw.split_first()? {
        (b'+', []) => Some(LexBound::Highest),
        (b'-', []) => Some(LexBound::Lowest),
        (b'[', rest) => Some(LexBound::Inclusive(rest)),
        (b'(', rest) => Some(LexBound::Exclusive(rest)),
        _ => None,
    }
}

#[derive(Clone, Copy)]
struct LexRange<'a> {
    min: LexBound<'a>,
    max: LexBound<'a>,
}

impl<'a> LexRange<'a> {
    fn parse(min: &'a [u8], max: &'a [u8]) -> Option<Self> {
        Some(LexRange {
            min: parse_lex_bound(min)?,
            max: parse_lex_bound(max)?,
        })
    }

    fn below_min(&self, m: &[u8]) -> bool {
        match self.min {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Inclusive(b) => m < b,
            LexBound::Exclusive(b) => m <= b,
        }
    }

    fn within_max(&self, m: &[u8]) -> bool {
        match self.max {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Inclusive(b) => m <= b,
            LexBound::Exclusive(b) => m < b,
        }
    }
}

/// What a range command selects.
#[derive(Clone, Copy)]
enum Range<'a> {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange<'a>),
}

/// Ascending ranks `start..end` a rank range covers after Redis's index sanitising.
fn rank_bounds(len: usize, start: i64, end: i64, rev: bool) -> (usize, usize) {
    let len_i = len as i64;
    let mut start = if start < 0 { len_i + start } else { start };
    let mut end = if end < 0 { len_i + end } else { end };
    start = start.max(0);
    if start > end || start >= len_i {
        return (0, 0);
    }
    end = end.min(len_i - 1);
    let (start, end) = (start as usize, end as usize + 1);
    if rev {
        (len - end, len - start)
    } else {
        (start, end)
    }
}

/// Ascending ranks `start..end` of the members a range selects (before LIMIT).
fn range_ranks(z: &ZSet, range: &Range, rev: bool) -> (usize, usize) {
    match range {
        Range::Rank(start, end) => rank_bounds(z.len(), *start, *end, rev),
        Range::Score(r) => (
            z.count_before(&|s, _| r.below_min(s)),
            z.count_before(&|s, _| r.within_max(s)),
        ),
        Range::Lex(r) => (
            z.count_before(&|_, m| r.below_min(m)),
            z.count_before(&|_, m| r.within_max(m)),
        ),
    }
}

/// The members a range selects, in reply order, after LIMIT (`limit` < 0: no limit).
fn select(z: &ZSet, range: &Range, rev: bool, offset: i64, limit: i64) -> Pairs {
    let (start, end) = range_ranks(z, range, rev);
    // Rank ranges take no LIMIT (only a no-op `LIMIT x -1` gets this far).
    let (offset, limit) = match range {
        Range::Rank(..) => (0, -1),
        _ => (offset, limit),
    };
    if end <= start || offset < 0 {
        return Vec::new();
    }
    let avail = (end - start).saturating_sub(offset as usize);
    if avail == 0 {
        return Vec::new();
    }
    let take = if limit < 0 {
        avail
    } else {
        avail.min(limit as usize)
    };
    let skip = offset as usize;
    if rev {
        let mut items = z.range(end - skip - take, end - skip);
        items.reverse();
        items
    } else {
        z.range(start + skip, start + skip + take)
    }
}

/// Writes members with or without their scores; `nested` pairs each member with its score in
/// a two-item array (RESP3's form), otherwise they alternate in one flat array.
fn reply_pairs(r: &mut ReplyBuf, items: &[(Vec<u8>, f64)], with_scores: bool, nested: bool) {
    reply_pairs_header(r, items.len(), with_scores, nested);
    for (m, s) in items {
        reply_pair(r, m, *s, with_scores, nested);
    }
}

/// The array header of `n` members (with scores: flat pairs in RESP2, nested in RESP3).
fn reply_pairs_header(r: &mut ReplyBuf, n: usize, with_scores: bool, nested: bool) {
    let flat_scores = with_scores && !nested;
    r.array(if flat_scores { n.saturating_mul(2) } else { n });
}

fn reply_pair(r: &mut ReplyBuf, member: &[u8], score: f64, with_scores: bool, nested: bool) {
    if with_scores && nested {
        r.array(2);
    }
    r.bulk(member);
    if with_scores {
        r.double(score);
    }
}

/// Stores `items` under `dst` (deleting it when empty), records `event` (or `del`), and
/// replies with their count. The items go one by one into `start`, so encoding conversions
/// happen where Redis's do (which shows: listpack scores are text, so a -0 inserted before a
/// conversion reads back as 0).
pub(crate) fn store_pairs(
    ctx: &mut ExecCtx,
    dst: &[u8],
    items: &[(Vec<u8>, f64)],
    mut start: ZSet,
    event: &'static str,
) {
    let limits = ctx.limits();
    for (m, s) in items {
        start.insert(m, *s, &limits);
    }
    ctx.store_result(dst, Value::ZSet(Box::new(start)), class::ZSET, event);
    ctx.reply.int(items.len() as i64);
}

// ---------------------------------------------------------------------------------------------
// ZADD, ZINCRBY, ZREM

#[derive(Default, Clone, Copy)]
pub(crate) struct AddFlags {
    pub nx: bool,
    pub xx: bool,
    pub gt: bool,
    pub lt: bool,
    pub ch: bool,
    pub incr: bool,
}

enum Added {
    New,
    Updated,
    Unchanged,
    Skipped,
}

/// Applies one score-member pair under the flags: what happened and the member's score.
fn add_one(
    z: &mut ZSet,
    member: &[u8],
    score: f64,
    f: AddFlags,
    limits: &EncodingLimits,
) -> Result<(Added, f64), &'static str> {
    match z.score(member) {
        Some(_) if f.nx => Ok((Added::Skipped, score)),
        Some(cur) => {
            let new = if f.incr { cur + score } else { score };
            if new.is_nan() {
                return Err(NAN_SCORE);
            }
            if (f.gt && new <= cur) || (f.lt && new >= cur) {
                return Ok((Added::Skipped, cur));
            }
            if new == cur {
                // Redis replies with the score it computed (0 when -0 + 0), keeping the
                // stored one (-0 == 0, so nothing changes).
                return Ok((Added::Unchanged, new));
            }
            z.insert(member, new, limits);
            Ok((Added::Updated, new))
        }
        None if f.xx => Ok((Added::Skipped, score)),
        None => {
            z.insert(member, score, limits);
            Ok((Added::New, score))
        }
    }
}

fn add_generic(ctx: &mut ExecCtx, args: &Args, mut f: AddFlags, first_pair: usize) {
    let mut at = first_pair;
    if !f.incr {
        while at < args.len() {
            let flag = match args.get(at).to_ascii_lowercase().as_slice() {
                b"nx" => &mut f.nx,
                b"xx" => &mut f.xx,
                b"gt" => &mut f.gt,
                b"lt" => &mut f.lt,
                b"ch" => &mut f.ch,
                b"incr" => &mut f.incr,
                _ => break,
            };
            *flag = true;
            at += 1;
        }
    }
    let rest = args.len() - at;
    if rest == 0 || rest % 2 == 1 {
        return ctx.error(errors::SYNTAX);
    }
    if f.nx && f.xx {
        return ctx.error("ERR XX and NX options at the same time are not compatible");
    }
    if [f.gt, f.lt, f.nx].iter().filter(|&&b| b).count() > 1 {
        return ctx.error("ERR GT, LT, and/or NX options at the same time are not compatible");
    }
    if f.incr && rest > 2 {
        return ctx.error("ERR INCR option supports a single increment-element pair");
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    for i in (at..args.len()).step_by(2) {
        match parse_f64(args.get(i)) {
            Some(s) => pairs.push((s, args.get(i + 1))),
            None => return ctx.error(errors::NOT_FLOAT),
        }
    }
    add_pairs(ctx, args.get(1), f, &pairs);
}

/// ZADD's work once its arguments are checked (GEOADD's too): applies the score-member pairs
/// to the sorted set at `key` (made when missing, unless XX), replies, and announces `zadd`
/// (or `zincr`) when something changed.
pub(crate) fn add_pairs(ctx: &mut ExecCtx, key: &[u8], f: AddFlags, pairs: &[(f64, &[u8])]) {
    // Whether some member was added or changed: then the write is announced.
    let apply = |z: &mut ZSet, r: &mut ReplyBuf, limits: &EncodingLimits| -> bool {
        let (mut changed, mut processed, mut last) = (0, 0, 0.0);
        let mut added = 0;
        for &(score, member) in pairs {
            match add_one(z, member, score, f, limits) {
                Err(e) => {
                    r.error(e);
                    return added + changed > 0;
                }
                Ok((what, s)) => {
                    last = s;
                    match what {
                        Added::New => added += 1,
                        Added::Updated => changed += 1,
                        Added::Unchanged | Added::Skipped => {}
                    }
                    if !matches!(what, Added::Skipped) {
                        processed += 1;
                    }
                }
            }
        }
        reply_added(r, f, added, changed, processed, last);
        added + changed > 0
    };
    let changed = match ctx.write_as(key, apply) {
        Err(WrongType) => false,
        Ok(Some(changed)) => changed,
        Ok(None) if f.xx => {
            reply_added(ctx.reply, f, 0, 0, 0, 0.0);
            false
        }
        Ok(None) => {
            // Redis 7.0 picks the encoding of a new set from its first member alone, and
            // converts while adding the rest (so a -0 added first reads back as 0).
            let first = pairs.first().map_or(0, |(_, m)| m.len());
            let limits = ctx.limits();
            let mut z = ZSet::sized_for(1, first, &limits);
            let changed = apply(&mut z, ctx.reply, &limits);
            ctx.store(key, Value::ZSet(Box::new(z)));
            changed
        }
    };
    if changed {
        ctx.notify(class::ZSET, if f.incr { "zincr" } else { "zadd" }, key);
    }
}

fn reply_added(r: &mut ReplyBuf, f: AddFlags, added: i64, changed: i64, processed: i64, last: f64) {
    if f.incr {
        if processed > 0 {
            r.double(last);
        } else {
            r.null();
        }
    } else if f.ch {
        r.int(added + changed);
    } else {
        r.int(added);
    }
}

pub fn zadd(ctx: &mut ExecCtx, args: &Args) {
    add_generic(ctx, args, AddFlags::default(), 2);
}

pub fn zincrby(ctx: &mut ExecCtx, args: &Args) {
    let flags = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    add_generic(ctx, args, flags, 2);
}

pub fn zrem(ctx: &mut ExecCtx, args: &Args) {
    let (key, members) = (args.get(1), args.iter().skip(2));
    ctx.remove_each(key, members, ZSet::remove, class::ZSET, "zrem");
}

// ---------------------------------------------------------------------------------------------
// Point reads

pub fn zcard(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<ZSet>(args.get(1), |r| r.int(0), |z, r| r.int(z.len() as i64));
}

fn reply_score(r: &mut ReplyBuf, s: Option<f64>) {
    match s {
        Some(s) => r.double(s),
        None => r.null(),
    }
}

pub fn zscore(ctx: &mut ExecCtx, args: &Args) {
    ctx.read_as::<ZSet>(args.get(1), ReplyBuf::null, |z, r| {
        reply_score(r, z.score(args.get(2)))
    });
}

pub fn zmscore(ctx: &mut ExecCtx, args: &Args) {
    let members = || args.iter().skip(2);
    ctx.read_as::<ZSet>(
        args.get(1),
        |r| {
            r.array(args.len() - 2);
            members().for_each(|_| r.null());
        },
        |z, r| {
            r.array(args.len() - 2);
            members().for_each(|m| reply_score(r, z.score(m)));
        },
    );
}

fn rank(ctx: &mut ExecCtx, args: &Args, rev: bool) {
    ctx.read_as::<ZSet>(args.get(1), ReplyBuf::null, |z, r| {
        match z.rank(args.get(2)) {
            Some(i) if rev => r.int((z.len() - 1 - i) as i64),
            Some(i) => r.int(i as i64),
            None => r.null(),
        }
    });
}

pub fn zrank(ctx: &mut ExecCtx, args: &Args) {
    rank(ctx, args, false);
}

pub fn zrevrank(ctx: &mut ExecCtx, args: &Args) {
    rank(ctx, args, true);
}

pub fn zcount(ctx: &mut ExecCtx, args: &Args) {
    let Some(range) = ScoreRange::parse(args.get(2), args.get(3)) else {
        return ctx.error(NOT_FLOAT_RANGE);
    };
    count_range(ctx, args, Range::Score(range));
}

pub fn zlexcount(ctx: &mut ExecCtx, args: &Args) {
    let Some(range) = LexRange::parse(args.get(2), args.get(3)) else {
        return ctx.error(NOT_LEX_RANGE);
    };
    count_range(ctx, args, Range::Lex(range));
}

fn count_range(ctx: &mut ExecCtx, args: &Args, range: Range) {
    ctx.read_as::<ZSet>(
        args.get(1),
        |r| r.int(0),
        |z, r| {
            let (start, end) = range_ranks(z, &range, false);
            r.int(end.saturating_sub(start) as i64)
        },
    );
}

// ---------------------------------------------------------------------------------------------
// ZRANGE and its spellings

#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// One range request, as parsed by Redis's `zrangeGenericCommand`.
struct RangeRequest {
    by: Option<By>,
    rev: Option<bool>,
    with_scores: bool,
    offset: i64,
    limit: i64,
}

/// Parses and runs a range command whose source key is at `src` and whose bounds follow it;
/// `by`/`rev` are fixed by the older spellings (ZRANGEBYSCORE...) and chosen by options in
/// ZRANGE and ZRANGESTORE. `dst` stores instead of replying.
fn range_generic(
    ctx: &mut ExecCtx,
    args: &Args,
    src: usize,
    by: Option<By>,
    rev: Option<bool>,
    dst: Option<&[u8]>,
) {
    let mut req = RangeRequest {
        by,
        rev,
        with_scores: false,
        offset: 0,
        limit: -1,
    };
    let mut i = src + 3;
    while i < args.len() {
        let left = args.len() - i - 1;
        if dst.is_none() && args.is(i, "withscores") {
            req.with_scores = true;
        } else if args.is(i, "limit") && left >= 2 {
            match (parse_i64(args.get(i + 1)), parse_i64(args.get(i + 2))) {
                (Some(o), Some(l)) => (req.offset, req.limit) = (o, l),
                _ => return ctx.error(errors::NOT_INT),
            }
            i += 2;
        } else if req.rev.is_none() && args.is(i, "rev") {
            req.rev = Some(true);
        } else if req.by.is_none() && args.is(i, "bylex") {
            req.by = Some(By::Lex);
        } else if req.by.is_none() && args.is(i, "byscore") {
            req.by = Some(By::Score);
        } else {
            return ctx.error(errors::SYNTAX);
        }
        i += 1;
    }
    let by = req.by.unwrap_or(By::Rank);
    let rev = req.rev.unwrap_or(false);
    // As in Redis, a LIMIT whose count is -1 (no limit) is not an error with ranks.
    if req.limit != -1 && by == By::Rank {
        return ctx.error(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        );
    }
    if req.with_scores && by == By::Lex {
        return ctx.error("ERR syntax error, WITHSCORES not supported in combination with BYLEX");
    }
    let (mut lo, mut hi) = (args.get(src + 1), args.get(src + 2));
    if rev && by != By::Rank {
        std::mem::swap(&mut lo, &mut hi);
    }
    let range = match by {
        By::Rank => match (parse_i64(lo), parse_i64(hi)) {
            (Some(a), Some(b)) => Range::Rank(a, b),
            _ => return ctx.error(errors::NOT_INT),
        },
        By::Score => match ScoreRange::parse(lo, hi) {
            Some(r) => Range::Score(r),
            None => return ctx.error(NOT_FLOAT_RANGE),
        },
        By::Lex => match LexRange::parse(lo, hi) {
            Some(r) => Range::Lex(r),
            None => return ctx.error(NOT_LEX_RANGE),
        },
    };
    if let Some(dst) = dst {
        let items = match ctx.lookup_read(args.get(src)).map(|e| e.value()) {
            None => Vec::new(),
            Some(ValueRef::ZSet(z)) => select(z, &range, rev, req.offset, req.limit),
            Some(_) => return ctx.wrongtype(),
        };
        // Redis sizes the destination by the result length when it knows it (rank ranges)
        // and otherwise starts with a listpack.
        let start = match range {
            Range::Rank(..) => ZSet::sized_for(items.len(), 0, &ctx.limits()),
            _ => ZSet::default(),
        };
        return store_pairs(ctx, dst, &items, start, "zrangestore");
    }
    let nested = ctx.reply.resp3;
    ctx.read_as::<ZSet>(
        args.get(src),
        |r| r.array(0),
        |z, r| {
            let items = select(z, &range, rev, req.offset, req.limit);
            reply_pairs(r, &items, req.with_scores, nested)
        },
    );
}

pub fn zrange(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, None, None, None);
}

pub fn zrangestore(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 2, None, None, Some(args.get(1)));
}

pub fn zrevrange(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, Some(By::Rank), Some(true), None);
}

pub fn zrangebyscore(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, Some(By::Score), Some(false), None);
}

pub fn zrevrangebyscore(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, Some(By::Score), Some(true), None);
}

pub fn zrangebylex(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, Some(By::Lex), Some(false), None);
}

pub fn zrevrangebylex(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, 1, Some(By::Lex), Some(true), None);
}

// ---------------------------------------------------------------------------------------------
// Removal by range, pops

/// ZREMRANGEBY*: removes what `range` selects, announcing it as `event` when it removed some.
fn remove_range(ctx: &mut ExecCtx, args: &Args, range: Range, event: &'static str) {
    let key = args.get(1);
    let removed = ctx.write_as(key, |z: &mut ZSet, _, _| {
        let (start, end) = range_ranks(z, &range, false);
        if end <= start {
            return 0;
        }
        z.remove_range(start, end).len() as i64
    });
    if let Ok(n) = removed {
        let n = n.unwrap_or(0);
        if n > 0 {
            ctx.notify(class::ZSET, event, key);
        }
        ctx.reply.int(n);
    }
}

pub fn zremrangebyrank(ctx: &mut ExecCtx, args: &Args) {
    match (parse_i64(args.get(2)), parse_i64(args.get(3))) {
        (Some(a), Some(b)) => remove_range(ctx, args, Range::Rank(a, b), "zremrangebyrank"),
        _ => ctx.error(errors::NOT_INT),
    }
}

pub fn zremrangebyscore(ctx: &mut ExecCtx, args: &Args) {
    match ScoreRange::parse(args.get(2), args.get(3)) {
        Some(r) => remove_range(ctx, args, Range::Score(r), "zremrangebyscore"),
        None => ctx.error(NOT_FLOAT_RANGE),
    }
}

pub fn zremrangebylex(ctx: &mut ExecCtx, args: &Args) {
    match LexRange::parse(args.get(2), args.get(3)) {
        Some(r) => remove_range(ctx, args, Range::Lex(r), "zremrangebylex"),
        None => ctx.error(NOT_LEX_RANGE),
    }
}

/// Removes up to `count` members from the low (`max` false) or high end; highest first for
/// the high end.
fn pop_end(z: &mut ZSet, max: bool, count: usize) -> Pairs {
    let n = count.min(z.len());
    if max {
        let len = z.len();
        let mut items = z.remove_range(len - n, len);
        items.reverse();
        items
    } else {
        z.remove_range(0, n)
    }
}

/// How a pop replies (Redis's genericZpopCommand).
#[derive(Clone, Copy)]
pub enum PopReply {
    /// ZPOPMIN/ZPOPMAX: `count` absent means one flat member-score pair.
    Plain { count_given: bool },
    /// ZMPOP, BZMPOP: `[key, [[member, score]...]]`.
    WithKey,
    /// BZPOPMIN/BZPOPMAX: `[key, member, score]`.
    KeyMemberScore,
}

/// Pops from the first of `keys` that exists (WRONGTYPE if that one is not a sorted set),
/// recording `zpopmin` or `zpopmax` (then `del` if the key went) as Redis's genericZpopCommand
/// does for every pop, the blocking ones included. Returns false when no key held anything,
/// having written no reply.
pub fn pop_first(
    ctx: &mut ExecCtx,
    keys: &[&[u8]],
    max: bool,
    count: usize,
    how: PopReply,
) -> bool {
    let nested = ctx.reply.resp3;
    for &key in keys {
        let done = ctx.write_as(key, |z: &mut ZSet, r, _| {
            let items = pop_end(z, max, count);
            match how {
                PopReply::Plain { count_given } => {
                    reply_pairs(r, &items, true, nested && count_given)
                }
                PopReply::WithKey => {
                    r.array(2);
                    r.bulk(key);
                    reply_pairs(r, &items, true, true);
                }
                PopReply::KeyMemberScore => {
                    r.array(3);
                    r.bulk(key);
                    if let Some((m, s)) = items.first() {
                        r.bulk(m);
                        r.double(*s);
                    }
                }
            }
        });
        match done {
            Err(WrongType) => return true,
            Ok(Some(())) => {
                ctx.notify(class::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
                return true;
            }
            Ok(None) => {}
        }
    }
    false
}

fn zpop(ctx: &mut ExecCtx, args: &Args, max: bool) {
    if args.len() > 3 {
        return ctx.error(errors::SYNTAX);
    }
    let count = match args.len() {
        3 => match parse_i64(args.get(2)) {
            Some(c) if c >= 0 => Some(c as usize),
            _ => return ctx.error(errors::NOT_POSITIVE),
        },
        _ => None,
    };
    let how = PopReply::Plain {
        count_given: count.is_some(),
    };
    if count == Some(0) {
        return match ctx.lookup_write(args.get(1)).map(|e| e.value().kind()) {
            Some(k) if k != Kind::ZSet => ctx.wrongtype(),
            _ => ctx.reply.array(0),
        };
    }
    if !pop_first(ctx, &[args.get(1)], max, count.unwrap_or(1), how) {
        ctx.reply.array(0);
    }
}

pub fn zpopmin(ctx: &mut ExecCtx, args: &Args) {
    zpop(ctx, args, false);
}

pub fn zpopmax(ctx: &mut ExecCtx, args: &Args) {
    zpop(ctx, args, true);
}

pub fn zmpop(ctx: &mut ExecCtx, args: &Args) {
    let (keys, max, count) = match parse_mpop(args, 1, ["min", "max"]) {
        Ok(p) => p,
        Err(e) => return ctx.error(e),
    };
    if !pop_first(ctx, &keys, max, count, PopReply::WithKey) {
        ctx.reply.null_array();
    }
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER, ZSCAN

pub fn zrandmember(ctx: &mut ExecCtx, args: &Args) {
    if args.len() == 2 {
        return ctx.read_as::<ZSet>(args.get(1), ReplyBuf::null, |z, r| {
            let i = rand::Rng::gen_range(&mut rand::thread_rng(), 0..z.len());
            match z.at(i) {
                Some((m, _)) => r.bulk(&m),
                None => r.null(),
            }
        });
    }
    let (count, with_scores) = match parse_rand_args(args, "withscores") {
        Ok(parsed) => parsed,
        Err(e) => return ctx.error(e),
    };
    let nested = ctx.reply.resp3;
    ctx.read_as::<ZSet>(
        args.get(1),
        |r| r.array(0),
        |z, r| {
            let picks = random_picks(z.len(), count);
            // Rank lookups are O(log n) on a tree but O(n) in a listpack; past a few picks
            // one ordered copy is cheaper.
            let all = (picks.len().saturating_mul(8) >= z.len()).then(|| z.all());
            reply_pairs_header(r, picks.len(), with_scores, nested);
            for i in picks {
                if r.full() {
                    break;
                }
                let pair = match &all {
                    Some(all) => all.get(i).cloned(),
                    None => z.at(i),
                };
                if let Some((m, s)) = pair {
                    reply_pair(r, &m, s, with_scores, nested);
                }
            }
        },
    );
}

pub fn zscan(ctx: &mut ExecCtx, args: &Args) {
    scan_collection(ctx, args, |z: &ZSet, cursor, opts, r| {
        let (next, items) = z.scan(cursor, opts.count);
        let mut flat = Vec::with_capacity(items.len() * 2);
        for (m, s) in items.into_iter().filter(|(m, _)| opts.matches(m)) {
            let mut score = Vec::new();
            format_f64_17g(s, &mut score);
            flat.push(m);
            flat.push(score);
        }
        reply_scan(r, next, &flat);
    });
}

// ---------------------------------------------------------------------------------------------
// ZUNION, ZINTER, ZDIFF and their STORE forms, ZINTERCARD

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    fn apply(self, target: &mut f64, v: f64) {
        match self {
            Aggregate::Sum => {
                *target += v;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if v < *target {
                    *target = v;
                }
            }
            Aggregate::Max => {
                if v > *target {
                    *target = v;
                }
            }
        }
    }
}

/// One input of the set algebra: a sorted set, or a plain set whose members score 1.
struct Source {
    members: HashMap<Vec<u8>, f64, ahash::RandomState>,
    weight: f64,
}

/// Reads the input keys (sorted sets or sets; missing keys are empty). None after WRONGTYPE.
fn load_sources(ctx: &mut ExecCtx, keys: &[&[u8]]) -> Option<Vec<Source>> {
    let mut out = Vec::with_capacity(keys.len());
    for key in keys {
        let mut members = HashMap::default();
        match ctx.lookup_read(key).map(|e| e.value()) {
            None => {}
            Some(ValueRef::ZSet(z)) => members.extend(z.all()),
            Some(ValueRef::Set(s)) => members.extend(s.iter().map(|m| (m.to_vec(), 1.0))),
            Some(_) => {
                ctx.wrongtype();
                return None;
            }
        }
        out.push(Source {
            members,
            weight: 1.0,
        });
    }
    Some(out)
}

fn combine(mut srcs: Vec<Source>, op: SetOp, agg: Aggregate) -> Pairs {
    let mut out: HashMap<Vec<u8>, f64, ahash::RandomState> = HashMap::default();
    match op {
        SetOp::Union => {
            srcs.sort_by_key(|s| s.members.len());
            for src in &srcs {
                for (m, s) in &src.members {
                    let mut v = s * src.weight;
                    if v.is_nan() {
                        v = 0.0;
                    }
                    match out.get_mut(m) {
                        Some(t) => agg.apply(t, v),
                        None => {
                            out.insert(m.clone(), v);
                        }
                    }
                }
            }
        }
        SetOp::Inter => {
            srcs.sort_by_key(|s| s.members.len());
            let Some((first, rest)) = srcs.split_first() else {
                return Vec::new();
            };
            'members: for (m, s) in &first.members {
                let mut v = s * first.weight;
                if v.is_nan() {
                    v = 0.0;
                }
                for other in rest {
                    match other.members.get(m) {
                        Some(s2) => agg.apply(&mut v, s2 * other.weight),
                        None => continue 'members,
                    }
                }
                out.insert(m.clone(), v);
            }
        }
        SetOp::Diff => {
            let Some((first, rest)) = srcs.split_first() else {
                return Vec::new();
            };
            for (m, s) in &first.members {
                if !rest.iter().any(|o| o.members.contains_key(m)) {
                    out.insert(m.clone(), *s);
                }
            }
        }
    }
    let mut items: Pairs = out.into_iter().collect();
    items.sort_by(|a, b| damselfly_storage::zset::cmp((a.1, &a.0), (b.1, &b.0)));
    items
}

/// What the set algebra does with its result.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output {
    Reply,
    Store,
    /// ZINTERCARD: only the size.
    Card,
}

fn set_op(ctx: &mut ExecCtx, args: &Args, op: SetOp, output: Output) {
    let numkeys_at = if output == Output::Store { 2 } else { 1 };
    let Some(n) = parse_i64(args.get(numkeys_at)) else {
        return ctx.error(errors::NOT_INT);
    };
    if n < 1 {
        let name = String::from_utf8_lossy(args.get(0)).to_lowercase();
        return ctx.error(&format!(
            "ERR at least 1 input key is needed for '{name}' command"
        ));
    }
    if n as u64 > (args.len() - numkeys_at - 1) as u64 {
        return ctx.error(errors::SYNTAX);
    }
    let n = n as usize;
    let keys: Vec<&[u8]> = (numkeys_at + 1..=numkeys_at + n)
        .map(|i| args.get(i))
        .collect();
    let Some(mut srcs) = load_sources(ctx, &keys) else {
        return;
    };
    let mut agg = Aggregate::Sum;
    let (mut with_scores, mut limit) = (false, 0u64);
    let options = op != SetOp::Diff && output != Output::Card;
    let mut i = numkeys_at + 1 + n;
    while i < args.len() {
        let left = args.len() - i;
        if options && left > n && args.is(i, "weights") {
            for src in srcs.iter_mut() {
                i += 1;
                match parse_f64(args.get(i)) {
                    Some(w) => src.weight = w,
                    None => return ctx.error("ERR weight value is not a float"),
                }
            }
        } else if options && left >= 2 && args.is(i, "aggregate") {
            i += 1;
            agg = match args.get(i).to_ascii_lowercase().as_slice() {
                b"sum" => Aggregate::Sum,
                b"min" => Aggregate::Min,
                b"max" => Aggregate::Max,
                _ => return ctx.error(errors::SYNTAX),
            };
        } else if output == Output::Reply && args.is(i, "withscores") {
            with_scores = true;
        } else if output == Output::Card && left >= 2 && args.is(i, "limit") {
            i += 1;
            match parse_i64(args.get(i)) {
                Some(l) if l >= 0 => limit = l as u64,
                _ => return ctx.error("ERR LIMIT can't be negative"),
            }
        } else {
            return ctx.error(errors::SYNTAX);
        }
        i += 1;
    }
    let items = combine(srcs, op, agg);
    match output {
        Output::Store => {
            // Redis builds the result as a skiplist and converts it when small enough.
            let longest = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
            let start = ZSet::sized_for(items.len(), longest, &ctx.limits());
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            store_pairs(ctx, args.get(1), &items, start, event)
        }
        Output::Card => {
            let n = items.len() as u64;
            ctx.reply
                .int(if limit > 0 { n.min(limit) } else { n } as i64);
        }
        Output::Reply => {
            let nested = ctx.reply.resp3;
            reply_pairs(ctx.reply, &items, with_scores, nested);
        }
    }
}

pub fn zunion(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Union, Output::Reply);
}

pub fn zinter(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Inter, Output::Reply);
}

pub fn zdiff(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Diff, Output::Reply);
}

pub fn zunionstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Union, Output::Store);
}

pub fn zinterstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Inter, Output::Store);
}

pub fn zdiffstore(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Diff, Output::Store);
}

pub fn zintercard(ctx: &mut ExecCtx, args: &Args) {
    set_op(ctx, args, SetOp::Inter, Output::Card);
}
