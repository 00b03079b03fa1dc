//! The blocking commands (BLPOP, BRPOP, BRPOPLPUSH, BLMOVE, BLMPOP, BZPOPMIN, BZPOPMAX, BZMPOP,
//! XREAD and XREADGROUP with BLOCK) as one shard sees them: their non-blocking form (what runs first, and all that runs inside
//! MULTI), what a client that found nothing waits for ([`BlockSpec`]), and serving a waiter
//! from a key that received data. The waiting itself (per-key FIFO queues, wake-ups, timeouts,
//! disconnects) belongs to the coordinator (crates/coord/src/blocking.rs).

use damselfly_storage::notify::class;
use damselfly_storage::{End, Kind};

use crate::list_family::{move_element, parse_end, parse_mpop, pop_event, pop_lists};
use crate::stream_family::{self, GroupRead, ReadFrom, ReadStarts};
use crate::zset_family::{pop_first, PopReply};
use crate::{errors, Args, ExecCtx};

/// What serving a blocked client does with the key that has data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlockOp {
    /// BLPOP/BRPOP (`count` None: `[key, element]`) and BLMPOP (`[key, [elements]]`).
    ListPop { end: End, count: Option<usize> },
    /// BZPOPMIN/BZPOPMAX (`count` None: `[key, member, score]`) and BZMPOP.
    ZPop { max: bool, count: Option<usize> },
    /// BLMOVE/BRPOPLPUSH: moves one element onto `dst`, replies with it.
    Move { from: End, to: End, dst: Vec<u8> },
    /// XREAD/XREADGROUP: where each key is read from (`$` resolved to the stream's last id
    /// when the client blocks), at most `count` entries (0: Redis's default for a blocked
    /// read), through `group` for XREADGROUP.
    StreamRead {
        from: ReadStarts,
        count: usize,
        group: Option<GroupRead>,
    },
}

impl BlockOp {
    fn kind(&self) -> Kind {
        match self {
            BlockOp::ZPop { .. } => Kind::ZSet,
            BlockOp::StreamRead { .. } => Kind::Stream,
            _ => Kind::List,
        }
    }

    /// Keys whose start is `$`, to resolve (with [`BlockOp::resolve_last`]) on their shards
    /// before the client blocks.
    pub fn unresolved_keys(&self) -> Vec<Vec<u8>> {
        match self {
            BlockOp::StreamRead { from, .. } => from
                .iter()
                .filter(|(_, f)| *f == ReadFrom::Last)
                .map(|(k, _)| k.clone())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Sets the start of a `$` key to the stream's last id found on its shard.
    pub fn resolve_last(&mut self, key: &[u8], last: damselfly_storage::StreamId) {
        if let BlockOp::StreamRead { from, .. } = self {
            for (k, f) in from.iter_mut() {
                if k == key && *f == ReadFrom::Last {
                    *f = ReadFrom::After(last);
                }
            }
        }
    }

    /// Where a stream reader starts on `key` (unresolved `$` never has data).
    fn read_start(&self, key: &[u8]) -> damselfly_storage::StreamId {
        match self {
            BlockOp::StreamRead { from, .. } => match from.iter().find(|(k, _)| k == key) {
                Some((_, ReadFrom::After(id))) => *id,
                _ => damselfly_storage::StreamId::MAX,
            },
            _ => damselfly_storage::StreamId::MAX,
        }
    }
}

/// The last id of the stream under `key`, for resolving a blocked reader's `$`.
pub fn stream_last_id(ctx: &mut ExecCtx, key: &[u8]) -> damselfly_storage::StreamId {
    stream_family::last_id(ctx, key)
}

/// What a client whose blocking command found nothing waits for.
#[derive(Debug, Clone)]
pub struct BlockSpec {
    /// The keys it waits on, in the order it tries them.
    pub keys: Vec<Vec<u8>>,
    /// Milliseconds to wait; 0 waits forever.
    pub timeout_ms: u64,
    pub op: BlockOp,
}

const TIMEOUT_NOT_FLOAT: &str = "ERR timeout is not a float or out of range";
const TIMEOUT_RANGE: &str = "ERR timeout is out of range";

/// Parses a timeout in (fractional) seconds as Redis 7.0 does, to milliseconds rounded up;
/// `now` is the current time in milliseconds (the deadline must not overflow).
pub fn parse_timeout(raw: &[u8], now: u64) -> Result<u64, &'static str> {
    let text = std::str::from_utf8(raw).map_err(|_| TIMEOUT_NOT_FLOAT)?;
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return Err(TIMEOUT_NOT_FLOAT);
    }
    let secs: f64 = text.parse().map_err(|_| TIMEOUT_NOT_FLOAT)?;
    if secs.is_nan() {
        return Err(TIMEOUT_NOT_FLOAT);
    }
    let ms = (secs * 1000.0).ceil();
    // Redis converts to a 64-bit integer unchecked: on x86 anything past its range
    // (infinity included) becomes the most negative value, hence "negative".
    if ms < 0.0 || ms >= i64::MAX as f64 {
        return Err("ERR timeout is negative");
    }
    let ms = ms as u64;
    if ms > 0 && ms > i64::MAX as u64 - now {
        return Err(TIMEOUT_RANGE);
    }
    Ok(ms)
}

/// The blocking form of a command whose non-blocking form just replied nil (so its arguments
/// are known to be valid).
pub fn spec(args: &Args, now: u64) -> Option<BlockSpec> {
    let name = args.get(0).to_ascii_lowercase();
    let last = args.len() - 1;
    let keys = |range: std::ops::Range<usize>| range.map(|i| args.get(i).to_vec()).collect();
    let (keys, timeout_at, op) = match name.as_slice() {
        b"blpop" | b"brpop" => {
            let end = if name == b"blpop" {
                End::Head
            } else {
                End::Tail
            };
            (keys(1..last), last, BlockOp::ListPop { end, count: None })
        }
        b"bzpopmin" | b"bzpopmax" => {
            let max = name == b"bzpopmax";
            (keys(1..last), last, BlockOp::ZPop { max, count: None })
        }
        b"brpoplpush" => {
            let op = BlockOp::Move {
                from: End::Tail,
                to: End::Head,
                dst: args.get(2).to_vec(),
            };
            (keys(1..2), 3, op)
        }
        b"blmove" => {
            let op = BlockOp::Move {
                from: parse_end(args, 3)?,
                to: parse_end(args, 4)?,
                dst: args.get(2).to_vec(),
            };
            (keys(1..2), 5, op)
        }
        b"blmpop" | b"bzmpop" => {
            let sides = if name == b"blmpop" {
                ["left", "right"]
            } else {
                ["min", "max"]
            };
            let (ks, second, count) = parse_mpop(args, 2, sides).ok()?;
            let keys = ks.into_iter().map(<[u8]>::to_vec).collect();
            let op = if name == b"blmpop" {
                let end = if second { End::Tail } else { End::Head };
                BlockOp::ListPop {
                    end,
                    count: Some(count),
                }
            } else {
                BlockOp::ZPop {
                    max: second,
                    count: Some(count),
                }
            };
            (keys, 1, op)
        }
        b"xread" | b"xreadgroup" => {
            let (from, read) = stream_family::block_spec(args, now)?;
            let keys = from.iter().map(|(k, _)| k.clone()).collect();
            let op = BlockOp::StreamRead {
                from,
                count: read.count,
                group: read.group,
            };
            return Some(BlockSpec {
                keys,
                timeout_ms: read.block?,
                op,
            });
        }
        _ => return None,
    };
    let timeout_ms = parse_timeout(args.get(timeout_at), now).ok()?;
    Some(BlockSpec {
        keys,
        timeout_ms,
        op,
    })
}

/// True when `op` has an answer from `key` now: the key holds a collection of the right type
/// (collections are never empty). A move whose destination holds another type answers too:
/// WRONGTYPE, the element left in the source, as Redis does.
pub fn ready(ctx: &mut ExecCtx, op: &BlockOp, key: &[u8]) -> bool {
    if let BlockOp::StreamRead { group, .. } = op {
        return stream_family::read_answers(ctx, key, op.read_start(key), group.as_ref(), true);
    }
    ctx.lookup_write(key).map(|e| e.value().kind()) == Some(op.kind())
}

/// True when the command's non-blocking form would answer from `key` now (a client finding
/// that when it registers runs the command again instead). For a stream reader that is a live
/// entry past its start, while [`ready`] wakes it once the stream's last id passed its start
/// (Redis answers a woken reader whose new entries were deleted with an empty list).
pub fn serves_now(ctx: &mut ExecCtx, op: &BlockOp, key: &[u8]) -> bool {
    if let BlockOp::StreamRead { group, .. } = op {
        return stream_family::read_answers(ctx, key, op.read_start(key), group.as_ref(), false);
    }
    ready(ctx, op, key)
}

/// Serves a blocked client from `key` (which `ready` accepted), writing its reply. The
/// journal records the non-blocking command that has the same effect.
pub fn serve(ctx: &mut ExecCtx, op: &BlockOp, key: &[u8]) {
    let count = |n: &Option<usize>| n.map(|n| n.to_string());
    let side = |e: &End| -> &[u8] {
        if *e == End::Head {
            b"LEFT"
        } else {
            b"RIGHT"
        }
    };
    match op {
        BlockOp::StreamRead { count, group, .. } => {
            let start = op.read_start(key);
            stream_family::serve_blocked_read(ctx, key, start, *count, group.as_ref());
        }
        BlockOp::ListPop { end, count: n } => {
            let name: &[u8] = if *end == End::Head { b"LPOP" } else { b"RPOP" };
            let text = count(n);
            let mut args = vec![name, key];
            args.extend(text.as_deref().map(str::as_bytes));
            ctx.propagate(&args);
            match n {
                None => {
                    pop_one_list(ctx, &[key], *end);
                }
                Some(n) => {
                    pop_lists(ctx, &[key], *end, *n);
                }
            }
        }
        BlockOp::ZPop { max, count: n } => {
            let name: &[u8] = if *max { b"ZPOPMAX" } else { b"ZPOPMIN" };
            let text = count(n);
            let mut args = vec![name, key];
            args.extend(text.as_deref().map(str::as_bytes));
            ctx.propagate(&args);
            match n {
                None => {
                    pop_first(ctx, &[key], *max, 1, PopReply::KeyMemberScore);
                }
                Some(n) => {
                    pop_first(ctx, &[key], *max, *n, PopReply::WithKey);
                }
            }
        }
        // The destination holds another type: WRONGTYPE was the answer, nothing moved.
        BlockOp::Move { dst, .. } if ctx.check_write(dst, Kind::List).is_none() => {}
        BlockOp::Move { from, to, dst } => {
            ctx.propagate(&[b"LMOVE", key, dst, side(from), side(to)]);
            move_element(ctx, key, dst, *from, *to);
        }
    }
}

/// BLPOP/BRPOP's pop: `[key, element]` from the first key holding a list.
fn pop_one_list(ctx: &mut ExecCtx, keys: &[&[u8]], end: End) -> bool {
    for &key in keys {
        let done = ctx.write_as(key, |l: &mut damselfly_storage::List, r, _| {
            r.array(2);
            r.bulk(key);
            match l.pop(end) {
                Some(v) => r.bulk(&v),
                None => r.null(),
            }
        });
        match done {
            Ok(None) => {}
            Ok(Some(())) => {
                // Then `del`, when the pop emptied the list.
                ctx.notify(class::LIST, pop_event(end), key);
                return true;
            }
            Err(_) => return true,
        }
    }
    false
}

fn check_timeout(ctx: &mut ExecCtx, args: &Args, at: usize) -> bool {
    match parse_timeout(args.get(at), ctx.now) {
        Ok(_) => true,
        Err(e) => {
            ctx.error(e);
            false
        }
    }
}

/// BLPOP, BRPOP, BZPOPMIN, BZPOPMAX: `key... timeout`; `pop(keys)` pops from the first key
/// holding data or returns false.
fn bpop(ctx: &mut ExecCtx, args: &Args, pop: impl FnOnce(&mut ExecCtx, &[&[u8]]) -> bool) {
    let last = args.len() - 1;
    if !check_timeout(ctx, args, last) {
        return;
    }
    let keys: Vec<&[u8]> = (1..last).map(|i| args.get(i)).collect();
    if !pop(ctx, &keys) {
        ctx.reply.null_array();
    }
}

pub fn blpop(ctx: &mut ExecCtx, args: &Args) {
    bpop(ctx, args, |ctx, keys| pop_one_list(ctx, keys, End::Head));
}

pub fn brpop(ctx: &mut ExecCtx, args: &Args) {
    bpop(ctx, args, |ctx, keys| pop_one_list(ctx, keys, End::Tail));
}

pub fn brpoplpush(ctx: &mut ExecCtx, args: &Args) {
    if check_timeout(ctx, args, 3) {
        move_element(ctx, args.get(1), args.get(2), End::Tail, End::Head);
    }
}

pub fn blmove(ctx: &mut ExecCtx, args: &Args) {
    let (Some(from), Some(to)) = (parse_end(args, 3), parse_end(args, 4)) else {
        return ctx.error(errors::SYNTAX);
    };
    if check_timeout(ctx, args, 5) {
        move_element(ctx, args.get(1), args.get(2), from, to);
    }
}

/// BLMPOP and BZMPOP: `timeout numkeys key... SIDE [COUNT n]`, the timeout checked after the
/// rest as Redis does; `pop(keys, second side, count)` pops or returns false.
fn bmpop(
    ctx: &mut ExecCtx,
    args: &Args,
    sides: [&str; 2],
    pop: impl FnOnce(&mut ExecCtx, &[&[u8]], bool, usize) -> bool,
) {
    let (keys, second, count) = match parse_mpop(args, 2, sides) {
        Ok(p) => p,
        Err(e) => return ctx.error(e),
    };
    if check_timeout(ctx, args, 1) && !pop(ctx, &keys, second, count) {
        ctx.reply.null_array();
    }
}

pub fn blmpop(ctx: &mut ExecCtx, args: &Args) {
    bmpop(ctx, args, ["left", "right"], |ctx, keys, right, count| {
        let end = if right { End::Tail } else { End::Head };
        pop_lists(ctx, keys, end, count)
    });
}

fn bzpop(ctx: &mut ExecCtx, args: &Args, max: bool) {
    bpop(ctx, args, |ctx, keys| {
        pop_first(ctx, keys, max, 1, PopReply::KeyMemberScore)
    });
}

pub fn bzpopmin(ctx: &mut ExecCtx, args: &Args) {
    bzpop(ctx, args, false);
}

pub fn bzpopmax(ctx: &mut ExecCtx, args: &Args) {
    bzpop(ctx, args, true);
}

pub fn bzmpop(ctx: &mut ExecCtx, args: &Args) {
    bmpop(ctx, args, ["min", "max"], |ctx, keys, max, count| {
        pop_first(ctx, keys, max, count, PopReply::WithKey)
    });
}

/// Whether a reply is the nil a blocking command's non-blocking form gives when it found
/// nothing (the coordinator then blocks the client instead of sending it).
pub fn is_nil_reply(reply: &[u8]) -> bool {
    matches!(reply, b"*-1\r\n" | b"$-1\r\n" | b"_\r\n")
}
