//! Stream commands on entries (Redis 7.0's t_stream.c): XADD, XLEN, XRANGE, XREVRANGE, XDEL,
//! XTRIM, XSETID, and XREAD/XREADGROUP's non-blocking form and the serving of a blocked
//! reader. Consumer-group commands are in `stream_group_family`, XINFO in `stream_info`.
//! Replies, errors and edge cases are Redis's; ids are parsed as Redis parses them.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::stream::{Group, Pending, Stream, StreamId, Trim, TrimTo};
use damselfly_storage::{Kind, ValueRef};

use crate::ctx::WrongType;
use crate::{errors, Args, ExecCtx};

pub(crate) const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
pub(crate) const NO_KEY: &str = "ERR no such key";

// ---------------------------------------------------------------------------------------------
// Ids

/// C's `strtoull` on the whole text: leading white space, a sign (a minus negates modulo 2^64),
/// at least one digit, nothing after; None on overflow.
fn strtoull(s: &[u8]) -> Option<u64> {
    let s = match s.iter().position(|b| !b" \t\n\x0b\x0c\r".contains(b)) {
        Some(i) => &s[i..],
        None => return None,
    };
    let (negative, digits) = match s.first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut v: u64 = 0;
    for d in digits {
        v = v.checked_mul(10)?.checked_add(u64::from(d - b'0'))?;
    }
    Some(if negative { v.wrapping_neg() } else { v })
}

/// Redis's `string2ull`: a canonical non-negative 64-bit integer, else what `strtoull` reads.
fn string2ull(s: &[u8]) -> Option<u64> {
    match damselfly_storage::value::parse_canonical_i64(s) {
        Some(v) if v < 0 => None,
        Some(v) => Some(v as u64),
        None => strtoull(s),
    }
}

/// How an id argument may be written.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdForm {
    /// `-` and `+` allowed (range bounds).
    Loose,
    /// `-` and `+` refused.
    Strict,
    /// Strict, and `ms-*` allowed (XADD): the sequence is then to be chosen.
    Add,
}

/// Parses `ms-seq`, `ms` (sequence `missing_seq`), `-`/`+` when loose, `ms-*` for XADD (then
/// the second value is false: the sequence was not given).
pub(crate) fn parse_id(arg: &[u8], missing_seq: u64, form: IdForm) -> Option<(StreamId, bool)> {
    if arg.len() > 127 {
        return None;
    }
    if form == IdForm::Loose {
        match arg {
            b"-" => return Some((StreamId::MIN, true)),
            b"+" => return Some((StreamId::MAX, true)),
            _ => {}
        }
    } else if arg == b"-" || arg == b"+" {
        return None;
    }
    // The text ends at a NUL as in C.
    let arg = &arg[..arg.iter().position(|&b| b == 0).unwrap_or(arg.len())];
    let (ms, seq) = match arg.iter().position(|&b| b == b'-') {
        Some(dash) => (&arg[..dash], Some(&arg[dash + 1..])),
        None => (arg, None),
    };
    let ms = string2ull(ms)?;
    match seq {
        None => Some((StreamId::new(ms, missing_seq), true)),
        Some(b"*") if form == IdForm::Add => Some((StreamId::new(ms, 0), false)),
        Some(seq) => Some((StreamId::new(ms, string2ull(seq)?), true)),
    }
}

/// A strict id argument, or Redis's error.
pub(crate) fn strict_id(arg: &[u8]) -> Result<StreamId, &'static str> {
    parse_id(arg, 0, IdForm::Strict)
        .map(|(id, _)| id)
        .ok_or(INVALID_ID)
}

/// A range bound: `(` excludes it (strict id then); an incomplete id takes `missing_seq`.
/// The bound is made inclusive, or the errors Redis gives when it cannot be.
pub(crate) fn range_bound(arg: &[u8], start: bool) -> Result<StreamId, &'static str> {
    let missing = if start { 0 } else { u64::MAX };
    if arg.len() > 1 && arg[0] == b'(' {
        let id = parse_id(&arg[1..], missing, IdForm::Strict)
            .ok_or(INVALID_ID)?
            .0;
        return if start {
            id.next().ok_or("ERR invalid start ID for the interval")
        } else {
            id.prev().ok_or("ERR invalid end ID for the interval")
        };
    }
    Ok(parse_id(arg, missing, IdForm::Loose).ok_or(INVALID_ID)?.0)
}

pub(crate) fn reply_id(r: &mut ReplyBuf, id: StreamId) {
    r.bulk(id.to_string().as_bytes());
}

pub(crate) fn reply_entry(r: &mut ReplyBuf, id: StreamId, pairs: &[(&[u8], &[u8])]) {
    r.array(2);
    reply_id(r, id);
    r.array(pairs.len() * 2);
    for (f, v) in pairs {
        r.bulk(f);
        r.bulk(v);
    }
}

/// Writes the entries of `start..=end` (at most `count`, 0 for all) as an array; returns
/// how many.
pub(crate) fn reply_range(
    r: &mut ReplyBuf,
    s: &Stream,
    start: StreamId,
    end: StreamId,
    count: usize,
    rev: bool,
) -> usize {
    let mut entries = Vec::new();
    s.range(start, end, rev, |id, pairs| {
        let mut one = ReplyBuf::new(r.resp3);
        reply_entry(&mut one, id, pairs);
        entries.push(one.buf);
        count == 0 || entries.len() < count
    });
    r.array(entries.len());
    for e in &entries {
        r.raw(e);
    }
    entries.len()
}

// ---------------------------------------------------------------------------------------------
// Writing a stream

/// Edits the stream under `key`; `f` says whether it changed anything, and only a change
/// counts as a write (dirty counter, WATCH, tracking, blocked readers), as in Redis.
/// `Ok(None)` for a missing key; WRONGTYPE is replied for another type.
pub(crate) fn write_stream<R>(
    ctx: &mut ExecCtx,
    key: &[u8],
    f: impl FnOnce(&mut Stream, &mut ReplyBuf, u64) -> (R, bool),
) -> Result<Option<R>, WrongType> {
    match ctx.lookup_write(key).map(|e| e.value().kind()) {
        None => return Ok(None),
        Some(Kind::Stream) => {}
        Some(_) => {
            ctx.wrongtype();
            return Err(WrongType);
        }
    }
    let (db, now, clock) = (ctx.db, ctx.now, ctx.stream_clock());
    let reply = &mut *ctx.reply;
    Ok(ctx.shard.update_if(db, key, now, |e| {
        match e.collection_mut::<Stream>() {
            Some(s) => f(s, reply, clock),
            // The kind was checked just above.
            None => unreachable!("a stream key holds a stream"),
        }
    }))
}

/// The stream under `key` for reading; Err after WRONGTYPE.
pub(crate) fn read_stream<'c>(
    ctx: &'c mut ExecCtx,
    key: &[u8],
) -> Result<Option<&'c Stream>, WrongType> {
    match ctx.lookup_read(key).map(|e| e.value()) {
        None => Ok(None),
        Some(ValueRef::Stream(s)) => Ok(Some(s)),
        Some(_) => Err(WrongType),
    }
}

// ---------------------------------------------------------------------------------------------
// XADD and XTRIM

/// XADD's and XTRIM's options.
struct AddArgs {
    trim: Option<Trim>,
    /// Where the MAXLEN/MINID value is (the journal records the trim's result there).
    trim_at: usize,
    no_mkstream: bool,
    /// XADD's id (None for `*`), whether its sequence was given, and where it is.
    id: Option<(StreamId, bool)>,
    id_at: usize,
}

/// Redis's streamParseAddOrTrimArgsOrReply.
fn parse_add_or_trim(ctx: &ExecCtx, args: &Args, xadd: bool) -> Result<AddArgs, String> {
    let mut a = AddArgs {
        trim: None,
        trim_at: 0,
        no_mkstream: false,
        id: None,
        id_at: 0,
    };
    let (mut approx, mut limit, mut limit_given) = (false, 0i64, false);
    let mut strategy: Option<TrimTo> = None;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            break;
        } else if (args.is(i, "maxlen") || args.is(i, "minid")) && more > 0 {
            if strategy.is_some() {
                return Err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible".into());
            }
            let maxlen = args.is(i, "maxlen");
            approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let value = args.get(i + 1);
            strategy = Some(if maxlen {
                let n = parse_i64(value).ok_or(errors::NOT_INT)?;
                if n < 0 {
                    return Err("ERR The MAXLEN argument must be >= 0.".into());
                }
                TrimTo::MaxLen(n as u64)
            } else {
                TrimTo::MinId(strict_id(value)?)
            });
            i += 1;
            a.trim_at = i;
        } else if args.is(i, "limit") && more > 0 {
            limit = parse_i64(args.get(i + 1)).ok_or(errors::NOT_INT)?;
            if limit < 0 {
                return Err("ERR The LIMIT argument must be >= 0.".into());
            }
            limit_given = true;
            i += 1;
        } else if xadd && args.is(i, "nomkstream") {
            a.no_mkstream = true;
        } else if xadd {
            let id = parse_id(opt, 0, IdForm::Add).ok_or(INVALID_ID)?;
            a.id = Some(id);
            break;
        } else {
            return Err(errors::SYNTAX.into());
        }
        i += 1;
    }
    a.id_at = i;
    if limit != 0 && strategy.is_none() {
        return Err(
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy".into(),
        );
    }
    if !xadd && strategy.is_none() {
        return Err("ERR syntax error, XTRIM must be called with a trimming strategy".into());
    }
    if limit_given {
        if !approx {
            return Err(
                "ERR syntax error, LIMIT cannot be used without the special ~ option".into(),
            );
        }
    } else if approx {
        // At most 100 nodes' worth of entries, as Redis caps an unlimited approximate trim.
        let per_node = ctx.limits().stream_node.max_entries as i64;
        limit = (100 * per_node).clamp(1, 1_000_000);
        if per_node == 0 {
            limit = 10_000;
        }
    } else {
        limit = 0;
    }
    a.trim = strategy.map(|strategy| Trim {
        strategy,
        approx,
        limit: limit as u64,
    });
    Ok(a)
}

/// What an approximate trim is journaled as: the exact trim leaving what it left (Redis
/// rewrites `~ n` to `= <length>` or `= <first id>`).
fn exact_trim_words(s: &Stream, t: &Trim) -> Vec<u8> {
    match t.strategy {
        TrimTo::MaxLen(_) => s.len().to_string().into_bytes(),
        TrimTo::MinId(_) => s
            .edge_id(false)
            .unwrap_or(StreamId::MAX)
            .to_string()
            .into_bytes(),
    }
}

/// XADD key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] *|id field value ...
pub fn xadd(ctx: &mut ExecCtx, args: &Args) {
    let a = match parse_add_or_trim(ctx, args, true) {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    let fields_at = a.id_at + 1;
    if args.len() < fields_at + 2 || !(args.len() - fields_at).is_multiple_of(2) {
        return ctx.error(&errors::wrong_arity("xadd"));
    }
    if let Some((id, true)) = a.id {
        if id.is_zero() {
            return ctx.error("ERR The ID specified in XADD must be greater than 0-0");
        }
    }
    let key = args.get(1);
    match ctx.lookup_write(key).map(|e| e.value().kind()) {
        Some(Kind::Stream) => {}
        Some(_) => return ctx.wrongtype(),
        None if a.no_mkstream => return ctx.reply.null(),
        None => ctx.store(key, damselfly_storage::Value::Stream(Box::default())),
    }
    let pairs: Vec<&[u8]> = (fields_at..args.len()).map(|i| args.get(i)).collect();
    let limits = ctx.limits().stream_node;
    let (now, journaling) = (ctx.now, ctx.journaling());
    let added = write_stream(ctx, key, |s, _, _| {
        match add_entry(s, a.id, &pairs, limits, now) {
            Err(e) => (Err(e), false),
            Ok(id) => {
                let (trimmed, exact) = match a.trim {
                    Some(t) => {
                        let n = s.trim(t);
                        (n, (journaling && t.approx).then(|| exact_trim_words(s, &t)))
                    }
                    None => (0, None),
                };
                (Ok((id, trimmed, exact)), true)
            }
        }
    });
    let (id, trimmed, exact) = match added {
        Ok(Some(Ok(done))) => done,
        Ok(Some(Err(e))) => return ctx.error(e),
        _ => return,
    };
    reply_id(ctx.reply, id);
    ctx.notify(class::STREAM, "xadd", key);
    if trimmed > 0 {
        ctx.notify(class::STREAM, "xtrim", key);
    }
    if !ctx.journaling() {
        return;
    }
    // The journal gets the id chosen and an approximate trim's result as an exact trim.
    let id_text = id.to_string();
    let mut words: Vec<&[u8]> = args.iter().collect();
    words[a.id_at] = id_text.as_bytes();
    if let Some(exact) = exact.as_ref() {
        words[a.trim_at - 1] = b"=";
        words[a.trim_at] = exact;
        // LIMIT has no meaning for an exact trim.
        if let Some(at) = (2..a.id_at).find(|&i| args.is(i, "limit")) {
            words.drain(at..at + 2);
        }
    }
    ctx.propagate(&words);
}

/// Appends one entry: its id from `id` (None for `*`, `ms-*` when the sequence was not given)
/// as Redis's streamAppendItem chooses it, or Redis's error.
fn add_entry(
    s: &mut Stream,
    id: Option<(StreamId, bool)>,
    pairs: &[&[u8]],
    limits: damselfly_storage::stream::NodeLimits,
    now: u64,
) -> Result<StreamId, &'static str> {
    const EXHAUSTED: &str =
        "ERR The stream has exhausted the last possible ID, unable to add more items";
    const TOO_SMALL: &str =
        "ERR The ID specified in XADD is equal or smaller than the target stream top item";
    if s.last_id == StreamId::MAX {
        return Err(EXHAUSTED);
    }
    let id = match id {
        Some((id, true)) => id,
        Some((id, false)) if id.ms == s.last_id.ms => {
            if s.last_id.seq == u64::MAX {
                return Err(TOO_SMALL);
            }
            StreamId::new(id.ms, s.last_id.seq + 1)
        }
        Some((id, false)) => id,
        None if now > s.last_id.ms => StreamId::new(now, 0),
        None => s.last_id.next().ok_or(EXHAUSTED)?,
    };
    if id <= s.last_id {
        return Err(TOO_SMALL);
    }
    // Redis caps a listpack at 1 GB.
    if pairs.iter().map(|p| p.len()).sum::<usize>() > 1 << 30 {
        return Err("ERR Elements are too large to be stored");
    }
    s.append(id, pairs, limits);
    Ok(id)
}

/// XTRIM key MAXLEN|MINID [=|~] threshold [LIMIT count]
pub fn xtrim(ctx: &mut ExecCtx, args: &Args) {
    let a = match parse_add_or_trim(ctx, args, false) {
        Ok(a) => a,
        Err(e) => return ctx.error(&e),
    };
    let Some(t) = a.trim else { return };
    let key = args.get(1);
    let done = write_stream(ctx, key, |s, _, _| {
        let n = s.trim(t);
        ((n, exact_trim_words(s, &t)), n > 0)
    });
    match done {
        Err(WrongType) => {}
        Ok(None) => ctx.reply.int(0),
        Ok(Some((n, exact))) => {
            if n > 0 {
                ctx.notify(class::STREAM, "xtrim", key);
                if t.approx {
                    let mut words: Vec<&[u8]> = args.iter().collect();
                    words[a.trim_at - 1] = b"=";
                    words[a.trim_at] = &exact;
                    if let Some(at) = (2..args.len()).find(|&i| args.is(i, "limit")) {
                        words.drain(at..at + 2);
                    }
                    ctx.propagate(&words);
                }
            }
            ctx.reply.int(n as i64);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// XLEN, XRANGE, XREVRANGE, XDEL, XSETID

pub fn xlen(ctx: &mut ExecCtx, args: &Args) {
    match read_stream(ctx, args.get(1)) {
        Err(WrongType) => ctx.wrongtype(),
        Ok(s) => {
            let n = s.map_or(0, |s| s.len());
            ctx.reply.int(n as i64)
        }
    }
}

fn range_generic(ctx: &mut ExecCtx, args: &Args, rev: bool) {
    let (start_at, end_at) = if rev { (3, 2) } else { (2, 3) };
    let start = match range_bound(args.get(start_at), true) {
        Ok(id) => id,
        Err(e) => return ctx.error(e),
    };
    let end = match range_bound(args.get(end_at), false) {
        Ok(id) => id,
        Err(e) => return ctx.error(e),
    };
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if args.is(j, "count") && j + 1 < args.len() {
            match parse_i64(args.get(j + 1)) {
                Some(n) => count = n.max(0),
                None => return ctx.error(errors::NOT_INT),
            }
            j += 2;
        } else {
            return ctx.error(errors::SYNTAX);
        }
    }
    let resp3 = ctx.reply.resp3;
    match read_stream(ctx, args.get(1)) {
        Err(WrongType) => ctx.wrongtype(),
        Ok(None) => ctx.reply.array(0),
        Ok(Some(_)) if count == 0 => ctx.reply.null_array(),
        Ok(Some(s)) => {
            let mut out = ReplyBuf::new(resp3);
            reply_range(&mut out, s, start, end, count.max(0) as usize, rev);
            ctx.reply.raw(&out.buf);
        }
    }
}

/// XRANGE key start end [COUNT n]
pub fn xrange(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, false);
}

/// XREVRANGE key end start [COUNT n]
pub fn xrevrange(ctx: &mut ExecCtx, args: &Args) {
    range_generic(ctx, args, true);
}

/// XDEL key id [id ...]
pub fn xdel(ctx: &mut ExecCtx, args: &Args) {
    // The key first: a missing key answers 0 whatever the ids, as in Redis.
    match ctx.lookup_write(args.get(1)).map(|e| e.value().kind()) {
        None => return ctx.reply.int(0),
        Some(Kind::Stream) => {}
        Some(_) => return ctx.wrongtype(),
    }
    let mut ids = Vec::with_capacity(args.len() - 2);
    for i in 2..args.len() {
        match strict_id(args.get(i)) {
            Ok(id) => ids.push(id),
            Err(e) => return ctx.error(e),
        }
    }
    let key = args.get(1);
    let done = write_stream(ctx, key, |s, _, _| {
        let mut deleted = 0;
        let mut first = false;
        for &id in &ids {
            if s.delete(id) {
                first |= id == s.first_id;
                if id > s.max_deleted_id {
                    s.max_deleted_id = id;
                }
                deleted += 1;
            }
        }
        if deleted > 0 && (s.is_empty() || first) {
            s.refresh_first_id();
        }
        (deleted, deleted > 0)
    });
    match done {
        Err(WrongType) => {}
        Ok(None) => ctx.reply.int(0),
        Ok(Some(n)) => {
            if n > 0 {
                ctx.notify(class::STREAM, "xdel", key);
            }
            ctx.reply.int(n)
        }
    }
}

/// XSETID key last-id [ENTRIESADDED n] [MAXDELETEDID id]
pub fn xsetid(ctx: &mut ExecCtx, args: &Args) {
    let id = match strict_id(args.get(2)) {
        Ok(id) => id,
        Err(e) => return ctx.error(e),
    };
    let (mut entries_added, mut max_deleted) = (-1i64, StreamId::MIN);
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if args.is(i, "entriesadded") && more > 0 {
            match parse_i64(args.get(i + 1)) {
                None => return ctx.error(errors::NOT_INT),
                Some(n) if n < 0 => return ctx.error("ERR entries_added must be positive"),
                Some(n) => entries_added = n,
            }
        } else if args.is(i, "maxdeletedid") && more > 0 {
            match strict_id(args.get(i + 1)) {
                Err(e) => return ctx.error(e),
                Ok(m) if id < m => {
                    return ctx.error("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
                }
                Ok(m) => max_deleted = m,
            }
        } else {
            return ctx.error(errors::SYNTAX);
        }
        i += 2;
    }
    let key = args.get(1);
    let done = write_stream(ctx, key, |s, _, _| {
        if !s.is_empty() {
            if s.edge_id(true).is_some_and(|top| id < top) {
                return (
                    Err(
                        "ERR The ID specified in XSETID is smaller than the target stream top item",
                    ),
                    false,
                );
            }
            if entries_added != -1 && s.len() > entries_added as u64 {
                return (Err("ERR The entries_added specified in XSETID is smaller than the target stream length"), false);
            }
        }
        s.last_id = id;
        if entries_added != -1 {
            s.entries_added = entries_added as u64;
        }
        if !max_deleted.is_zero() {
            s.max_deleted_id = max_deleted;
        }
        (Ok(()), true)
    });
    match done {
        Err(WrongType) => {}
        Ok(None) => ctx.error(NO_KEY),
        Ok(Some(Err(e))) => ctx.error(e),
        Ok(Some(Ok(()))) => {
            ctx.notify(class::STREAM, "xsetid", key);
            ctx.reply.ok()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// XREAD and XREADGROUP

/// XREADGROUP's GROUP option.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRead {
    pub group: Vec<u8>,
    pub consumer: Vec<u8>,
    pub noack: bool,
}

/// Where a reader starts on one key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// After this id.
    After(StreamId),
    /// `$`: after the stream's last id when the command ran.
    Last,
    /// `>`: the group's new entries.
    New,
}

/// Each key of a read with where it starts.
pub type ReadStarts = Vec<(Vec<u8>, ReadFrom)>;

/// A parsed XREAD/XREADGROUP.
pub struct ReadArgs {
    /// Milliseconds to block (0 = forever), None without BLOCK.
    pub block: Option<u64>,
    /// 0 = no limit.
    pub count: usize,
    pub group: Option<GroupRead>,
    /// Where the keys start.
    pub keys_at: usize,
    pub from: Vec<ReadFrom>,
}

const XREAD_BLOCK_DEFAULT_COUNT: usize = 1000;

/// Where XREAD's/XREADGROUP's STREAMS keys start, as Redis's xreadGetKeys finds them; None
/// when the command is malformed.
pub fn read_keys_at(args: &Args) -> Option<(usize, usize)> {
    let mut i = 1;
    while i < args.len() {
        if args.is(i, "block") || args.is(i, "count") {
            i += 2;
        } else if args.is(i, "group") {
            i += 3;
        } else if args.is(i, "noack") {
            i += 1;
        } else if args.is(i, "streams") {
            let n = args.len() - i - 1;
            return (n > 0 && n.is_multiple_of(2)).then_some((i + 1, n / 2));
        } else {
            return None;
        }
    }
    None
}

/// Parses XREAD/XREADGROUP's options (not the ids), as Redis does.
fn parse_read(args: &Args, now: u64) -> Result<ReadArgs, String> {
    let readgroup = args.get(0).len() == 10;
    let mut r = ReadArgs {
        block: None,
        count: 0,
        group: None,
        keys_at: 0,
        from: Vec::new(),
    };
    let mut noack = false;
    let mut streams = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - i - 1;
        if args.is(i, "block") && more > 0 {
            i += 1;
            let ms =
                parse_i64(args.get(i)).ok_or("ERR timeout is not an integer or out of range")?;
            if ms < 0 {
                return Err("ERR timeout is negative".into());
            }
            if ms > 0 && ms as u64 > i64::MAX as u64 - now {
                return Err("ERR timeout is out of range".into());
            }
            r.block = Some(ms as u64);
        } else if args.is(i, "count") && more > 0 {
            i += 1;
            r.count = parse_i64(args.get(i)).ok_or(errors::NOT_INT)?.max(0) as usize;
        } else if args.is(i, "streams") && more > 0 {
            let n = args.len() - i - 1;
            if !n.is_multiple_of(2) {
                return Err("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified.".into());
            }
            streams = Some((i + 1, n / 2));
            break;
        } else if args.is(i, "group") && more >= 2 {
            if !readgroup {
                return Err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            r.group = Some(GroupRead {
                group: args.get(i + 1).to_vec(),
                consumer: args.get(i + 2).to_vec(),
                noack: false,
            });
            i += 2;
        } else if args.is(i, "noack") {
            if !readgroup {
                return Err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead.".into());
            }
            noack = true;
        } else {
            return Err(errors::SYNTAX.into());
        }
        i += 1;
    }
    let Some((keys_at, n)) = streams else {
        return Err(errors::SYNTAX.into());
    };
    if readgroup && r.group.is_none() {
        return Err("ERR Missing GROUP option for XREADGROUP".into());
    }
    if let Some(g) = &mut r.group {
        g.noack = noack;
    }
    r.keys_at = keys_at;
    r.from = Vec::with_capacity(n);
    Ok(r)
}

/// Marks `name` seen now, creating it; whether it was created.
pub(crate) fn touch_consumer(g: &mut Group, name: &[u8], now: u64) -> bool {
    match g.consumers.get_mut(name) {
        Some(c) => {
            c.seen_time = now;
            false
        }
        None => {
            let c = damselfly_storage::stream::Consumer {
                seen_time: now,
                ..Default::default()
            };
            g.consumers.insert(name.to_vec(), c);
            true
        }
    }
}

/// Delivers the entries after the group's last id to its `consumer` (created if needed):
/// moves the group's last id, counts what it read, adds them to the pending lists unless
/// `noack`, and writes them as an array. Returns whether the consumer was created.
fn deliver_new(s: &mut Stream, r: &mut ReplyBuf, g: &GroupRead, count: usize, now: u64) -> bool {
    let Some(group) = s.groups.get_mut(&g.group) else {
        r.array(0);
        return false;
    };
    let created = touch_consumer(group, &g.consumer, now);
    let Some(start) = group.last_id.next() else {
        r.array(0);
        return created;
    };
    let mut delivered: Vec<StreamId> = Vec::new();
    let mut out = ReplyBuf::new(r.resp3);
    s.range(start, StreamId::MAX, false, |id, pairs| {
        reply_entry(&mut out, id, pairs);
        delivered.push(id);
        count == 0 || delivered.len() < count
    });
    for &id in &delivered {
        advance_group(s, &g.group, id);
    }
    if let Some(group) = s.groups.get_mut(&g.group) {
        if !g.noack {
            for &id in &delivered {
                claim_for(group, &g.consumer, id, now, 1);
            }
        }
    }
    r.array(delivered.len());
    r.raw(&out.buf);
    created
}

/// Moves `group`'s last id to `id` (delivered past it) and counts the read, as Redis's
/// streamReplyWithRange does.
fn advance_group(s: &mut Stream, group: &[u8], id: StreamId) {
    let tombstones = range_has_tombstones(s, id);
    let estimate = estimate_distance(s, id);
    let added = s.entries_added;
    let Some(g) = s.groups.get_mut(group) else {
        return;
    };
    if id <= g.last_id {
        return;
    }
    if g.entries_read != damselfly_storage::stream::ENTRIES_READ_UNKNOWN && !tombstones {
        g.entries_read += 1;
    } else if added > 0 {
        g.entries_read = estimate;
    }
    g.last_id = id;
}

/// Makes `id` pending for `consumer` (taking it from another consumer if it was theirs),
/// delivered at `now` `count` times.
pub(crate) fn claim_for(g: &mut Group, consumer: &[u8], id: StreamId, now: u64, count: u64) {
    if let Some(prev) = g.pending.get(&id).map(|p| p.consumer.clone()) {
        if let Some(c) = g.consumers.get_mut(&prev) {
            c.pending.remove(&id);
        }
    }
    g.pending.insert(
        id,
        Pending {
            consumer: consumer.to_vec(),
            delivery_time: now,
            delivery_count: count,
        },
    );
    g.consumers
        .entry(consumer.to_vec())
        .or_default()
        .pending
        .insert(id);
}

/// Redis's streamRangeHasTombstones from `start` to the end.
pub(crate) fn range_has_tombstones(s: &Stream, start: StreamId) -> bool {
    if s.is_empty() || s.max_deleted_id.is_zero() || s.first_id > s.max_deleted_id {
        return false;
    }
    start <= s.max_deleted_id
}

/// Redis's streamEstimateDistanceFromFirstEverEntry: how many entries were added up to `id`,
/// or ENTRIES_READ_UNKNOWN.
pub(crate) fn estimate_distance(s: &Stream, id: StreamId) -> i64 {
    let unknown = damselfly_storage::stream::ENTRIES_READ_UNKNOWN;
    let added = s.entries_added as i64;
    if added == 0 {
        return 0;
    }
    if s.is_empty() && id <= s.last_id {
        return added;
    }
    if id == s.last_id {
        return added;
    } else if id > s.last_id {
        return unknown;
    }
    if s.max_deleted_id.is_zero() || s.max_deleted_id < s.first_id {
        if id < s.first_id {
            return added - s.len() as i64;
        } else if id == s.first_id {
            return added - s.len() as i64 + 1;
        }
    }
    unknown
}

/// A consumer's own pending entries from `start` (XREADGROUP with an id): each delivered
/// again (count and time updated), or `[id, nil]` for one deleted from the stream.
fn deliver_history(
    s: &mut Stream,
    r: &mut ReplyBuf,
    g: &GroupRead,
    start: StreamId,
    count: usize,
    now: u64,
) -> bool {
    let Some(group) = s.groups.get_mut(&g.group) else {
        r.array(0);
        return false;
    };
    let created = touch_consumer(group, &g.consumer, now);
    let ids: Vec<StreamId> = group
        .consumers
        .get(&g.consumer)
        .map(|c| {
            c.pending
                .range(start..)
                .take(if count == 0 { usize::MAX } else { count })
                .copied()
                .collect()
        })
        .unwrap_or_default();
    r.array(ids.len());
    let mut found = Vec::new();
    for &id in &ids {
        let mut any = false;
        s.range(id, id, false, |id, pairs| {
            reply_entry(r, id, pairs);
            any = true;
            false
        });
        if !any {
            r.array(2);
            reply_id(r, id);
            r.null_array();
        } else {
            found.push(id);
        }
    }
    if let Some(group) = s.groups.get_mut(&g.group) {
        for id in found {
            if let Some(p) = group.pending.get_mut(&id) {
                p.delivery_time = now;
                p.delivery_count += 1;
            }
        }
    }
    created
}

/// XREAD [COUNT n] [BLOCK ms] STREAMS key ... id ...
/// XREADGROUP GROUP g c [COUNT n] [BLOCK ms] [NOACK] STREAMS key ... id ...
/// The non-blocking form: replies nil when nothing could be served (the coordinator then
/// blocks the client when BLOCK was given).
pub fn xread(ctx: &mut ExecCtx, args: &Args) {
    let mut r = match parse_read(args, ctx.now) {
        Ok(r) => r,
        Err(e) => return ctx.error(&e),
    };
    let n = (args.len() - r.keys_at) / 2;
    // Check every key (type, group) and id before serving any, as Redis does.
    for k in 0..n {
        let key = args.get(r.keys_at + k);
        let arg = args.get(r.keys_at + n + k);
        let s = match read_stream(ctx, key) {
            Err(WrongType) => return ctx.wrongtype(),
            Ok(s) => s,
        };
        if let Some(g) = &r.group {
            if !s.is_some_and(|s| s.groups.contains_key(&g.group)) {
                return ctx.error(&format!(
                    "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                    String::from_utf8_lossy(key),
                    String::from_utf8_lossy(&g.group)
                ));
            }
        }
        let from = match arg {
            b"$" if r.group.is_some() => return ctx.error("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set."),
            b"$" => ReadFrom::After(s.map_or(StreamId::MIN, |s| s.last_id)),
            b">" if r.group.is_none() => return ctx.error("ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option."),
            b">" => ReadFrom::New,
            _ => match strict_id(arg) {
                Ok(id) => ReadFrom::After(id),
                Err(e) => return ctx.error(e),
            },
        };
        r.from.push(from);
    }
    let resp3 = ctx.reply.resp3;
    let mut served: Vec<Vec<u8>> = Vec::new();
    for k in 0..n {
        let key = args.get(r.keys_at + k);
        let mut one = ReplyBuf::new(resp3);
        if serve_key(ctx, key, r.from[k], r.count, r.group.as_ref(), &mut one) {
            served.push(one.buf);
        }
    }
    if served.is_empty() {
        return ctx.reply.null_array();
    }
    if resp3 {
        ctx.reply.map(served.len());
    } else {
        ctx.reply.array(served.len());
    }
    for s in &served {
        ctx.reply.raw(s);
    }
}

/// Serves one key of a read now if it has something: writes `key, entries` (a two-item
/// array in RESP2, a map entry in RESP3) and returns true.
fn serve_key(
    ctx: &mut ExecCtx,
    key: &[u8],
    from: ReadFrom,
    count: usize,
    group: Option<&GroupRead>,
    out: &mut ReplyBuf,
) -> bool {
    let Ok(Some(s)) = read_stream(ctx, key) else {
        return false;
    };
    let top = s.edge_id(true);
    let after = match (group, from) {
        (Some(_), ReadFrom::After(id)) => {
            // A consumer's history after `id`: served whatever it holds.
            let g = group.cloned();
            let id = id.next().unwrap_or(StreamId::MAX);
            return serve_group(ctx, key, out, |s, r, now| match &g {
                Some(g) => deliver_history(s, r, g, id, count, now),
                None => false,
            });
        }
        (Some(g), _) => match s.groups.get(&g.group) {
            Some(grp) if top.is_some_and(|t| t > grp.last_id) => grp.last_id,
            _ => return false,
        },
        (None, ReadFrom::After(id)) if top.is_some_and(|t| t > id) => id,
        _ => return false,
    };
    match group {
        Some(g) => {
            let g = g.clone();
            serve_group(ctx, key, out, |s, r, now| deliver_new(s, r, &g, count, now))
        }
        None => {
            if !out.resp3 {
                out.array(2);
            }
            out.bulk(key);
            let start = after.next().unwrap_or(StreamId::MAX);
            reply_range(out, s, start, StreamId::MAX, count, false);
            true
        }
    }
}

/// Writes `key` and what `f` delivers from the group (a write: pending lists, last id; `f`
/// says whether it created the consumer).
fn serve_group(
    ctx: &mut ExecCtx,
    key: &[u8],
    out: &mut ReplyBuf,
    f: impl FnOnce(&mut Stream, &mut ReplyBuf, u64) -> bool,
) -> bool {
    if !out.resp3 {
        out.array(2);
    }
    out.bulk(key);
    let mut entries = ReplyBuf::new(out.resp3);
    let created = write_stream(ctx, key, |s, _, now| (f(s, &mut entries, now), true));
    if let Ok(Some(true)) = created {
        ctx.notify(class::STREAM, "xgroup-createconsumer", key);
    }
    out.raw(&entries.buf);
    true
}

/// The stream's last id for a blocked `$` reader (0-0 when the key holds no stream).
pub fn last_id(ctx: &mut ExecCtx, key: &[u8]) -> StreamId {
    match ctx.lookup_write(key).map(|e| e.value()) {
        Some(ValueRef::Stream(s)) => s.last_id,
        _ => StreamId::MIN,
    }
}

/// Whether a reader of `key` blocked after `after` has an answer: entries past its start (its
/// group's last delivered id for a group reader), or, for a group reader, the error of a
/// group or key that is gone. A client about to block asks whether a live entry is there to
/// serve (`woken` false); a waiter is woken once the stream's last id passed its start,
/// which Redis answers even when those entries were deleted (with an empty list).
pub fn read_answers(
    ctx: &mut ExecCtx,
    key: &[u8],
    after: StreamId,
    group: Option<&GroupRead>,
    woken: bool,
) -> bool {
    match (ctx.lookup_write(key).map(|e| e.value()), group) {
        (Some(ValueRef::Stream(s)), group) => {
            let start = match group {
                None => after,
                Some(g) => match s.groups.get(&g.group) {
                    Some(grp) => grp.last_id,
                    None => return true,
                },
            };
            let top = if woken {
                Some(s.last_id)
            } else {
                s.edge_id(true)
            };
            top.is_some_and(|top| top > start)
        }
        (_, Some(_)) => true,
        _ => false,
    }
}

/// Serves a blocked reader from `key` (which `read_answers` accepted), as Redis's
/// serveClientsBlockedOnStreamKey does: `[[key, entries]]`, or the group's error.
pub fn serve_blocked_read(
    ctx: &mut ExecCtx,
    key: &[u8],
    after: StreamId,
    count: usize,
    group: Option<&GroupRead>,
) {
    let count = if count == 0 {
        XREAD_BLOCK_DEFAULT_COUNT
    } else {
        count
    };
    let resp3 = ctx.reply.resp3;
    let single = |r: &mut ReplyBuf| {
        if resp3 {
            r.map(1);
        } else {
            r.array(1);
            r.array(2);
        }
    };
    match (ctx.lookup_write(key).map(|e| e.value()), group) {
        (Some(ValueRef::Stream(s)), Some(g)) if !s.groups.contains_key(&g.group) => {
            ctx.error("NOGROUP the consumer group this client was blocked on no longer exists")
        }
        (Some(ValueRef::Stream(_)), Some(g)) => {
            single(ctx.reply);
            ctx.reply.bulk(key);
            let g = g.clone();
            let mut entries = ReplyBuf::new(resp3);
            let created = write_stream(ctx, key, |s, _, now| {
                (deliver_new(s, &mut entries, &g, count, now), true)
            });
            if let Ok(Some(true)) = created {
                ctx.notify(class::STREAM, "xgroup-createconsumer", key);
            }
            ctx.reply.raw(&entries.buf);
            propagate_group_read(ctx, key, &g, count);
        }
        (Some(ValueRef::Stream(s)), None) => {
            let mut out = ReplyBuf::new(resp3);
            single(&mut out);
            out.bulk(key);
            let start = after.next().unwrap_or(StreamId::MAX);
            reply_range(&mut out, s, start, StreamId::MAX, count, false);
            ctx.reply.raw(&out.buf);
        }
        _ => ctx.error("UNBLOCKED the stream key no longer exists"),
    }
}

/// The journal's record of a served blocked XREADGROUP: the same read, non-blocking.
fn propagate_group_read(ctx: &mut ExecCtx, key: &[u8], g: &GroupRead, count: usize) {
    let count = count.to_string();
    let mut words: Vec<&[u8]> = vec![
        b"XREADGROUP",
        b"GROUP",
        &g.group,
        &g.consumer,
        b"COUNT",
        count.as_bytes(),
    ];
    if g.noack {
        words.push(b"NOACK");
    }
    words.extend([&b"STREAMS"[..], key, b">"]);
    ctx.propagate(&words);
}

/// The keys of a blocking XREAD/XREADGROUP, where each starts, its count, group and timeout,
/// for a command whose non-blocking form replied nil.
pub fn block_spec(args: &Args, now: u64) -> Option<(ReadStarts, ReadArgs)> {
    let r = parse_read(args, now).ok()?;
    r.block?;
    let n = (args.len() - r.keys_at) / 2;
    let mut keys = Vec::with_capacity(n);
    for k in 0..n {
        let arg = args.get(r.keys_at + n + k);
        let from = match arg {
            b"$" => ReadFrom::Last,
            b">" => ReadFrom::New,
            _ => ReadFrom::After(strict_id(arg).ok()?),
        };
        keys.push((args.get(r.keys_at + k).to_vec(), from));
    }
    Some((keys, r))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_parse_as_redis_parses_them() {
        let p = |s: &str| parse_id(s.as_bytes(), 7, IdForm::Strict).map(|(id, _)| id);
        assert_eq!(p("5-3"), Some(StreamId::new(5, 3)));
        assert_eq!(p("5"), Some(StreamId::new(5, 7)));
        assert_eq!(
            p("18446744073709551615-18446744073709551615"),
            Some(StreamId::MAX)
        );
        assert_eq!(p("18446744073709551616"), None);
        assert_eq!(p("-1"), None, "a leading dash splits off an empty ms");
        assert_eq!(
            p(" 5-1"),
            Some(StreamId::new(5, 1)),
            "strtoull skips white space"
        );
        assert_eq!(p("+5-1"), Some(StreamId::new(5, 1)));
        assert_eq!(p("5-"), None);
        assert_eq!(p("5-1-1"), None);
        assert_eq!(p("-"), None);
        assert_eq!(
            parse_id(b"-", 0, IdForm::Loose),
            Some((StreamId::MIN, true))
        );
        assert_eq!(
            parse_id(b"5-*", 0, IdForm::Add),
            Some((StreamId::new(5, 0), false))
        );
        assert_eq!(p("5-*"), None);
        assert_eq!(range_bound(b"(5-0", false), Ok(StreamId::new(4, u64::MAX)));
        assert_eq!(
            range_bound(b"(0-0", false),
            Err("ERR invalid end ID for the interval")
        );
        assert_eq!(range_bound(b"5", false), Ok(StreamId::new(5, u64::MAX)));
    }
}
