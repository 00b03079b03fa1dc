//! Stream consumer groups (Redis 7.0's t_stream.c): XGROUP and its subcommands, XACK,
//! XPENDING, XCLAIM, XAUTOCLAIM, and XINFO STREAM/GROUPS/CONSUMERS. Reading through a group
//! (XREADGROUP) is in `stream_family`.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::notify::class;
use damselfly_storage::stream::{Group, Stream, StreamId, ENTRIES_READ_UNKNOWN};

use crate::ctx::WrongType;
use crate::stream_family::{
    claim_for, estimate_distance, range_bound, range_has_tombstones, read_stream, reply_entry,
    reply_id, reply_range, strict_id, touch_consumer, write_stream, IdForm, NO_KEY,
};
use crate::{errors, Args, ExecCtx};

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

fn nogroup_key(key: &[u8], group: &[u8]) -> String {
    format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        lossy(key),
        lossy(group)
    )
}

fn nogroup_for_key(group: &[u8], key: &[u8]) -> String {
    format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        lossy(group),
        lossy(key)
    )
}

// ---------------------------------------------------------------------------------------------
// XGROUP

const XGROUP_HELP: &[&str] = &[
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
];

/// XGROUP's subcommands with their arities (Redis's `xgroup|...` entries).
pub(crate) const XGROUP_SUBCOMMANDS: &[(&str, i32)] = &[
    ("create", -5),
    ("setid", -5),
    ("destroy", 4),
    ("createconsumer", 5),
    ("delconsumer", 5),
    ("help", 2),
];

/// A container's subcommand with its arity checked: its name, or Redis's error.
pub(crate) fn find_subcommand(
    args: &Args,
    cmd: &str,
    table: &[(&'static str, i32)],
) -> Result<&'static str, String> {
    let Some(&(name, arity)) = table.iter().find(|(n, _)| args.is(1, n)) else {
        return Err(errors::unknown_subcommand(cmd, args.get(1)));
    };
    let n = args.len() as i32;
    if (arity > 0 && n != arity) || (arity < 0 && n < -arity) {
        return Err(errors::wrong_arity(&format!("{cmd}|{name}")));
    }
    Ok(name)
}

/// [`find_subcommand`], replying the error.
fn subcommand(
    ctx: &mut ExecCtx,
    args: &Args,
    cmd: &str,
    table: &[(&'static str, i32)],
) -> Option<&'static str> {
    find_subcommand(args, cmd, table)
        .map_err(|e| ctx.error(&e))
        .ok()
}

/// XGROUP's subcommands. The container is not flagged a write (XGROUP HELP is not one), so
/// a subcommand that changed the stream records its words in the journal itself.
pub fn xgroup(ctx: &mut ExecCtx, args: &Args) {
    let Some(sub) = subcommand(ctx, args, "xgroup", XGROUP_SUBCOMMANDS) else {
        return;
    };
    let dirty = ctx.shard.dirty;
    xgroup_subcommand(ctx, args, sub);
    if ctx.shard.dirty != dirty {
        let words: Vec<&[u8]> = args.iter().collect();
        ctx.propagate(&words);
    }
}

fn xgroup_subcommand(ctx: &mut ExecCtx, args: &Args, sub: &str) {
    if sub == "help" {
        return ctx.reply.help("XGROUP", XGROUP_HELP);
    }
    let (key, name) = (args.get(2), args.get(3));
    let (create, setid) = (sub == "create", sub == "setid");
    let mut mkstream = false;
    let mut entries_read = ENTRIES_READ_UNKNOWN;
    let mut i = 5;
    while i < args.len() {
        if create && args.is(i, "mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && args.is(i, "entriesread") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                None => return ctx.error(errors::NOT_INT),
                Some(n) if n < 0 && n != ENTRIES_READ_UNKNOWN => {
                    return ctx.error("ERR value for ENTRIESREAD must be positive or -1")
                }
                Some(n) => entries_read = n,
            }
            i += 2;
        } else {
            return ctx.error(&errors::subcommand_syntax("XGROUP", args.get(1)));
        }
    }
    let (exists, has_group) = match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(s) => (s.is_some(), s.is_some_and(|s| s.groups.contains_key(name))),
    };
    if !mkstream {
        if !exists {
            return ctx.error("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
        }
        if !has_group && matches!(sub, "setid" | "createconsumer" | "delconsumer") {
            return ctx.error(&nogroup_for_key(name, key));
        }
    }
    match sub {
        "create" if args.len() <= 8 => xgroup_create(ctx, args, exists, entries_read),
        "setid" if args.len() == 5 || args.len() == 7 => {
            let arg = args.get(4);
            let id = if arg == b"$" {
                None
            } else {
                match crate::stream_family::parse_id(arg, 0, IdForm::Loose) {
                    Some((id, _)) => Some(id),
                    None => return ctx.error(crate::stream_family::INVALID_ID),
                }
            };
            let _ = write_stream(ctx, key, |s, _, _| {
                let last = s.last_id;
                if let Some(g) = s.groups.get_mut(name) {
                    g.last_id = id.unwrap_or(last);
                    g.entries_read = entries_read;
                }
                ((), true)
            });
            ctx.reply.ok();
            ctx.notify(class::STREAM, "xgroup-setid", key);
        }
        "destroy" => change_or_not(ctx, key, "xgroup-destroy", |s| {
            s.groups.remove(name).is_some()
        }),
        "createconsumer" => {
            let (consumer, now) = (args.get(4), ctx.stream_clock());
            change_or_not(ctx, key, "xgroup-createconsumer", |s| {
                s.groups.get_mut(name).is_some_and(|g| {
                    !g.consumers.contains_key(consumer) && touch_consumer(g, consumer, now)
                })
            })
        }
        "delconsumer" => {
            let consumer = args.get(4);
            let removed = write_stream(ctx, key, |s, _, _| {
                let Some(g) = s.groups.get_mut(name) else {
                    return (None, false);
                };
                match g.consumers.remove(consumer) {
                    Some(c) => {
                        for id in &c.pending {
                            g.pending.remove(id);
                        }
                        (Some(c.pending.len()), true)
                    }
                    None => (None, false),
                }
            });
            let removed = removed.ok().flatten().flatten();
            ctx.reply.int(removed.unwrap_or(0) as i64);
            if removed.is_some() {
                ctx.notify(class::STREAM, "xgroup-delconsumer", key);
            }
        }
        _ => ctx.error(&errors::subcommand_syntax("XGROUP", args.get(1))),
    }
}

/// Runs `f` on the stream; replies 1 and records `event` when it changed something, else 0.
fn change_or_not(
    ctx: &mut ExecCtx,
    key: &[u8],
    event: &'static str,
    f: impl FnOnce(&mut Stream) -> bool,
) {
    let changed = write_stream(ctx, key, |s, _, _| {
        let changed = f(s);
        (changed, changed)
    });
    let changed = matches!(changed, Ok(Some(true)));
    ctx.reply.int(i64::from(changed));
    if changed {
        ctx.notify(class::STREAM, event, key);
    }
}

/// XGROUP CREATE key group id|$ [MKSTREAM] [ENTRIESREAD n]
fn xgroup_create(ctx: &mut ExecCtx, args: &Args, exists: bool, entries_read: i64) {
    let (key, name) = (args.get(2), args.get(3));
    let id = match args.get(4) {
        b"$" => None,
        arg => match strict_id(arg) {
            Ok(id) => Some(id),
            Err(e) => return ctx.error(e),
        },
    };
    if !exists {
        ctx.store(key, damselfly_storage::Value::Stream(Box::default()));
    }
    let created = write_stream(ctx, key, |s, _, _| {
        if s.groups.contains_key(name) {
            return (false, false);
        }
        let g = Group::new(id.unwrap_or(s.last_id), entries_read);
        s.groups.insert(name.to_vec(), g);
        (true, true)
    });
    match created {
        Ok(Some(true)) => {
            ctx.reply.ok();
            ctx.notify(class::STREAM, "xgroup-create", key);
        }
        Ok(_) => ctx.error("BUSYGROUP Consumer Group name already exists"),
        Err(WrongType) => {}
    }
}

// ---------------------------------------------------------------------------------------------
// XACK, XPENDING

/// XACK key group id [id ...]
pub fn xack(ctx: &mut ExecCtx, args: &Args) {
    let (key, name) = (args.get(1), args.get(2));
    match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(s) if !s.is_some_and(|s| s.groups.contains_key(name)) => return ctx.reply.int(0),
        Ok(_) => {}
    }
    let mut ids = Vec::with_capacity(args.len() - 3);
    for i in 3..args.len() {
        match strict_id(args.get(i)) {
            Ok(id) => ids.push(id),
            Err(e) => return ctx.error(e),
        }
    }
    let acked = write_stream(ctx, key, |s, _, _| {
        let n = s
            .groups
            .get_mut(name)
            .map_or(0, |g| ids.iter().filter(|&&id| g.ack(id)).count());
        (n, n > 0)
    });
    ctx.reply.int(acked.ok().flatten().unwrap_or(0) as i64);
}

/// XPENDING key group [[IDLE min-idle] start end count [consumer]]
pub fn xpending(ctx: &mut ExecCtx, args: &Args) {
    let n = args.len();
    if n != 3 && !(6..=9).contains(&n) {
        return ctx.error(errors::SYNTAX);
    }
    struct Extended<'a> {
        min_idle: i64,
        start: StreamId,
        end: StreamId,
        count: usize,
        consumer: Option<&'a [u8]>,
    }
    let mut ext = None;
    if n >= 6 {
        let mut at = 3;
        let mut min_idle = 0;
        if args.is(3, "idle") {
            match parse_i64(args.get(4)) {
                Some(v) => min_idle = v,
                None => return ctx.error(errors::NOT_INT),
            }
            if n < 8 {
                return ctx.error(errors::SYNTAX);
            }
            at += 2;
        }
        let count = match parse_i64(args.get(at + 2)) {
            Some(c) => c.max(0) as usize,
            None => return ctx.error(errors::NOT_INT),
        };
        let start = match range_bound(args.get(at), true) {
            Ok(id) => id,
            Err(e) => return ctx.error(e),
        };
        let end = match range_bound(args.get(at + 1), false) {
            Ok(id) => id,
            Err(e) => return ctx.error(e),
        };
        ext = Some(Extended {
            min_idle,
            start,
            end,
            count,
            consumer: (at + 3 < n).then(|| args.get(at + 3)),
        });
    }
    let (key, name) = (args.get(1), args.get(2));
    let (now, resp3) = (ctx.now, ctx.reply.resp3);
    let group = match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(s) => s.and_then(|s| s.groups.get(name)),
    };
    let Some(g) = group else {
        let e = nogroup_key(key, name);
        return ctx.error(&e);
    };
    let mut r = ReplyBuf::new(resp3);
    match ext {
        None => {
            r.array(4);
            r.int(g.pending.len() as i64);
            match (g.pending.keys().next(), g.pending.keys().next_back()) {
                (Some(&first), Some(&last)) => {
                    reply_id(&mut r, first);
                    reply_id(&mut r, last);
                    let busy: Vec<_> = g
                        .consumers
                        .iter()
                        .filter(|(_, c)| !c.pending.is_empty())
                        .collect();
                    r.array(busy.len());
                    for (name, c) in busy {
                        r.array(2);
                        r.bulk(name);
                        r.bulk_i64(c.pending.len() as i64);
                    }
                }
                _ => {
                    r.null();
                    r.null();
                    r.null_array();
                }
            }
        }
        Some(x) => {
            // A consumer that does not exist has nothing pending.
            let ids: Vec<StreamId> = match x.consumer {
                Some(c) => g
                    .consumers
                    .get(c)
                    .map(|c| c.pending.range(x.start..).copied().collect())
                    .unwrap_or_default(),
                None => g.pending.range(x.start..).map(|(id, _)| *id).collect(),
            };
            let mut rows = Vec::new();
            for id in ids {
                if rows.len() >= x.count || id > x.end {
                    break;
                }
                let Some(p) = g.pending.get(&id) else {
                    continue;
                };
                let idle = now as i64 - p.delivery_time as i64;
                if x.min_idle != 0 && idle < x.min_idle {
                    continue;
                }
                rows.push((id, p.consumer.clone(), idle.max(0), p.delivery_count));
            }
            r.array(rows.len());
            for (id, consumer, idle, count) in rows {
                r.array(4);
                reply_id(&mut r, id);
                r.bulk(&consumer);
                r.int(idle);
                r.int(count as i64);
            }
        }
    }
    ctx.reply.raw(&r.buf);
}

// ---------------------------------------------------------------------------------------------
// XCLAIM, XAUTOCLAIM

/// The journal's record of one claim: Redis's streamPropagateXCLAIM (an XCLAIM that sets the
/// pending entry exactly, or acknowledges one whose entry is gone).
fn xclaim_words(key: &[u8], group: &[u8], g: &Group, id: StreamId) -> Vec<Vec<u8>> {
    let pending = g.pending.get(&id);
    let id = id.to_string().into_bytes();
    let (consumer, time, count) = match pending {
        Some(p) => (p.consumer.clone(), p.delivery_time, p.delivery_count),
        // Gone: Redis propagates the claim of the deleted entry's last holder; replaying an
        // XACK has the same effect here.
        None => return vec![b"XACK".to_vec(), key.to_vec(), group.to_vec(), id],
    };
    let mut w: Vec<Vec<u8>> = vec![
        b"XCLAIM".to_vec(),
        key.to_vec(),
        group.to_vec(),
        consumer,
        b"0".to_vec(),
        id,
    ];
    w.extend([
        b"TIME".to_vec(),
        time.to_string().into_bytes(),
        b"RETRYCOUNT".to_vec(),
        count.to_string().into_bytes(),
        b"FORCE".to_vec(),
        b"JUSTID".to_vec(),
        b"LASTID".to_vec(),
        g.last_id.to_string().into_bytes(),
    ]);
    w
}

fn propagate_all(ctx: &mut ExecCtx, records: &[Vec<Vec<u8>>]) {
    for r in records {
        let words: Vec<&[u8]> = r.iter().map(Vec::as_slice).collect();
        ctx.propagate(&words);
    }
}

/// XCLAIM key group consumer min-idle-time id [id ...] [IDLE ms] [TIME ms] [RETRYCOUNT n]
/// [FORCE] [JUSTID] [LASTID id]
pub fn xclaim(ctx: &mut ExecCtx, args: &Args) {
    let (key, name, consumer) = (args.get(1), args.get(2), args.get(3));
    match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(s) if !s.is_some_and(|s| s.groups.contains_key(name)) => {
            let e = nogroup_key(key, name);
            return ctx.error(&e);
        }
        Ok(_) => {}
    }
    let Some(min_idle) = parse_i64(args.get(4)) else {
        return ctx.error("ERR Invalid min-idle-time argument for XCLAIM");
    };
    let min_idle = min_idle.max(0);
    let now = ctx.stream_clock() as i64;
    let mut ids = Vec::new();
    let mut j = 5;
    while j < args.len() {
        match strict_id(args.get(j)) {
            Ok(id) => ids.push(id),
            Err(_) => break,
        }
        j += 1;
    }
    let (mut force, mut justid) = (false, false);
    let (mut retry, mut delivery, mut last_id) = (-1i64, -1i64, StreamId::MIN);
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        let number = |v: &[u8], what: &str| {
            parse_i64(v).ok_or_else(|| format!("ERR Invalid {what} option argument for XCLAIM"))
        };
        if args.is(j, "force") {
            force = true;
        } else if args.is(j, "justid") {
            justid = true;
        } else if args.is(j, "idle") && more > 0 {
            j += 1;
            match number(args.get(j), "IDLE") {
                Ok(v) => delivery = now.wrapping_sub(v),
                Err(e) => return ctx.error(&e),
            }
        } else if args.is(j, "time") && more > 0 {
            j += 1;
            match number(args.get(j), "TIME") {
                Ok(v) => delivery = v,
                Err(e) => return ctx.error(&e),
            }
        } else if args.is(j, "retrycount") && more > 0 {
            j += 1;
            match number(args.get(j), "RETRYCOUNT") {
                Ok(v) => retry = v,
                Err(e) => return ctx.error(&e),
            }
        } else if args.is(j, "lastid") && more > 0 {
            j += 1;
            match strict_id(args.get(j)) {
                Ok(id) => last_id = id,
                Err(e) => return ctx.error(e),
            }
        } else {
            return ctx.error(&format!("ERR Unrecognized XCLAIM option '{}'", lossy(opt)));
        }
        j += 1;
    }
    if delivery == -1 || delivery < 0 || delivery > now {
        delivery = now;
    }
    let resp3 = ctx.reply.resp3;
    let done = write_stream(ctx, key, |s, _, _| {
        let mut out = ReplyBuf::new(resp3);
        let mut records = Vec::new();
        let mut claimed = 0;
        let mut created = false;
        let mut changed = false;
        let mut last_moved = false;
        if let Some(g) = s.groups.get_mut(name) {
            if last_id > g.last_id {
                g.last_id = last_id;
                last_moved = true;
                changed = true;
            }
        }
        for &id in &ids {
            let exists = s.contains(id);
            let Some(g) = s.groups.get_mut(name) else {
                break;
            };
            if !exists {
                if g.pending.contains_key(&id) {
                    g.ack(id);
                    records.push(xclaim_words(key, name, g, id));
                    changed = true;
                    last_moved = false;
                }
                continue;
            }
            let mut fresh = false;
            if force && !g.pending.contains_key(&id) {
                // A new pending entry of no consumer yet, delivered once now (Redis's NACK).
                g.pending.insert(
                    id,
                    damselfly_storage::stream::Pending {
                        consumer: Vec::new(),
                        delivery_time: now as u64,
                        delivery_count: 1,
                    },
                );
                fresh = true;
            }
            let Some(p) = g.pending.get(&id) else {
                continue;
            };
            if !fresh && min_idle > 0 && now - (p.delivery_time as i64) < min_idle {
                continue;
            }
            let count = match (retry, justid) {
                (r, _) if r >= 0 => r as u64,
                (_, false) => p.delivery_count + 1,
                (_, true) => p.delivery_count,
            };
            created |= touch_consumer(g, consumer, now as u64);
            claim_for(g, consumer, id, delivery as u64, count);
            records.push(xclaim_words(key, name, g, id));
            changed = true;
            last_moved = false;
            claimed += 1;
            if justid {
                reply_id(&mut out, id);
            } else {
                s.range(id, id, false, |id, pairs| {
                    reply_entry(&mut out, id, pairs);
                    false
                });
            }
        }
        if last_moved {
            if let Some(g) = s.groups.get(name) {
                let words = vec![
                    b"XGROUP".to_vec(),
                    b"SETID".to_vec(),
                    key.to_vec(),
                    name.to_vec(),
                    g.last_id.to_string().into_bytes(),
                    b"ENTRIESREAD".to_vec(),
                    g.entries_read.to_string().into_bytes(),
                ];
                records.push(words);
            }
        }
        ((claimed, out.buf, records, created), changed)
    });
    if let Ok(Some((claimed, body, records, created))) = done {
        if created {
            ctx.notify(class::STREAM, "xgroup-createconsumer", key);
        }
        ctx.reply.array(claimed);
        ctx.reply.raw(&body);
        propagate_all(ctx, &records);
    }
}

/// XAUTOCLAIM key group consumer min-idle-time start [COUNT n] [JUSTID]
pub fn xautoclaim(ctx: &mut ExecCtx, args: &Args) {
    let (key, name, consumer) = (args.get(1), args.get(2), args.get(3));
    let Some(min_idle) = parse_i64(args.get(4)) else {
        return ctx.error("ERR Invalid min-idle-time argument for XAUTOCLAIM");
    };
    let min_idle = min_idle.max(0);
    let start = match range_bound(args.get(5), true) {
        Ok(id) => id,
        Err(e) => return ctx.error(e),
    };
    let mut count: i64 = 100;
    let mut justid = false;
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        if args.is(j, "count") && more > 0 {
            const MAX: i64 = i64::MAX / 16;
            match parse_i64(args.get(j + 1)) {
                Some(n) if (1..=MAX).contains(&n) => count = n,
                _ => return ctx.error("ERR COUNT must be > 0"),
            }
            j += 1;
        } else if args.is(j, "justid") {
            justid = true;
        } else {
            return ctx.error(errors::SYNTAX);
        }
        j += 1;
    }
    match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(s) if !s.is_some_and(|s| s.groups.contains_key(name)) => {
            let e = nogroup_key(key, name);
            return ctx.error(&e);
        }
        Ok(_) => {}
    }
    let now = ctx.stream_clock();
    let resp3 = ctx.reply.resp3;
    let done = write_stream(ctx, key, |s, _, _| {
        let mut out = ReplyBuf::new(resp3);
        let (mut claimed, mut deleted) = (0usize, Vec::new());
        let mut records = Vec::new();
        let mut created = false;
        let mut attempts = count.saturating_mul(10);
        let mut left = count;
        let mut last_seen: Option<StreamId> = None;
        let pending: Vec<StreamId> = match s.groups.get(name) {
            Some(g) => g.pending.range(start..).map(|(id, _)| *id).collect(),
            None => Vec::new(),
        };
        for id in pending {
            if attempts == 0 || left == 0 {
                break;
            }
            attempts -= 1;
            last_seen = Some(id);
            let exists = s.contains(id);
            let Some(g) = s.groups.get_mut(name) else {
                break;
            };
            if !exists {
                g.ack(id);
                records.push(xclaim_words(key, name, g, id));
                deleted.push(id);
                left -= 1;
                continue;
            }
            let Some(p) = g.pending.get(&id) else {
                continue;
            };
            if min_idle > 0 && (now as i64 - p.delivery_time as i64) < min_idle {
                continue;
            }
            let times = if justid {
                p.delivery_count
            } else {
                p.delivery_count + 1
            };
            created |= touch_consumer(g, consumer, now);
            claim_for(g, consumer, id, now, times);
            records.push(xclaim_words(key, name, g, id));
            if justid {
                reply_id(&mut out, id);
            } else {
                s.range(id, id, false, |id, pairs| {
                    reply_entry(&mut out, id, pairs);
                    false
                });
            }
            claimed += 1;
            left -= 1;
        }
        // The cursor: the first pending id after the last one looked at (0-0 at the end).
        let next = s.groups.get(name).and_then(|g| {
            let from = match last_seen {
                Some(id) => g
                    .pending
                    .range((std::ops::Bound::Excluded(id), std::ops::Bound::Unbounded))
                    .next(),
                None => g.pending.range(start..).next(),
            };
            from.map(|(id, _)| *id)
        });
        let changed = !records.is_empty();
        (
            (
                claimed,
                out.buf,
                deleted,
                next.unwrap_or(StreamId::MIN),
                records,
                created,
            ),
            changed,
        )
    });
    if let Ok(Some((claimed, body, deleted, next, records, created))) = done {
        if created {
            ctx.notify(class::STREAM, "xgroup-createconsumer", key);
        }
        let r = &mut *ctx.reply;
        r.array(3);
        reply_id(r, next);
        r.array(claimed);
        r.raw(&body);
        r.array(deleted.len());
        for id in deleted {
            reply_id(r, id);
        }
        propagate_all(ctx, &records);
    }
}

// ---------------------------------------------------------------------------------------------
// XINFO

const XINFO_HELP: &[&str] = &[
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
];

pub(crate) const XINFO_SUBCOMMANDS: &[(&str, i32)] =
    &[("consumers", 4), ("groups", 3), ("stream", -3), ("help", 2)];

/// Redis's streamReplyWithCGLag: the entries the group has yet to read, or nil when that
/// cannot be known.
fn reply_lag(r: &mut ReplyBuf, s: &Stream, g: &Group) {
    let added = s.entries_added as i64;
    if added == 0 {
        return r.int(0);
    }
    if g.entries_read != ENTRIES_READ_UNKNOWN && !range_has_tombstones(s, g.last_id) {
        return r.int(added - g.entries_read);
    }
    match estimate_distance(s, g.last_id) {
        ENTRIES_READ_UNKNOWN => r.null(),
        read => r.int(added - read),
    }
}

fn reply_entries_read(r: &mut ReplyBuf, g: &Group) {
    if g.entries_read == ENTRIES_READ_UNKNOWN {
        r.null();
    } else {
        r.int(g.entries_read);
    }
}

pub fn xinfo(ctx: &mut ExecCtx, args: &Args) {
    let Some(sub) = subcommand(ctx, args, "xinfo", XINFO_SUBCOMMANDS) else {
        return;
    };
    if sub == "help" {
        return ctx.reply.help("XINFO", XINFO_HELP);
    }
    let key = args.get(2);
    let now = ctx.now;
    let resp3 = ctx.reply.resp3;
    let s = match read_stream(ctx, key) {
        Err(WrongType) => return ctx.wrongtype(),
        Ok(None) => return ctx.error(NO_KEY),
        Ok(Some(s)) => s,
    };
    let mut r = ReplyBuf::new(resp3);
    let result = match sub {
        "consumers" => info_consumers(&mut r, s, key, args.get(3), now),
        "groups" => {
            info_groups(&mut r, s);
            Ok(())
        }
        _ => info_stream(&mut r, s, args),
    };
    match result {
        Ok(()) => ctx.reply.raw(&r.buf),
        Err(e) => ctx.error(&e),
    }
}

fn info_consumers(
    r: &mut ReplyBuf,
    s: &Stream,
    key: &[u8],
    name: &[u8],
    now: u64,
) -> Result<(), String> {
    let Some(g) = s.groups.get(name) else {
        return Err(nogroup_for_key(name, key));
    };
    r.array(g.consumers.len());
    for (name, c) in &g.consumers {
        r.map(3);
        r.bulk(b"name");
        r.bulk(name);
        r.bulk(b"pending");
        r.int(c.pending.len() as i64);
        r.bulk(b"idle");
        r.int((now as i64 - c.seen_time as i64).max(0));
    }
    Ok(())
}

fn info_groups(r: &mut ReplyBuf, s: &Stream) {
    r.array(s.groups.len());
    for (name, g) in &s.groups {
        r.map(6);
        r.bulk(b"name");
        r.bulk(name);
        r.bulk(b"consumers");
        r.int(g.consumers.len() as i64);
        r.bulk(b"pending");
        r.int(g.pending.len() as i64);
        r.bulk(b"last-delivered-id");
        reply_id(r, g.last_id);
        r.bulk(b"entries-read");
        reply_entries_read(r, g);
        r.bulk(b"lag");
        reply_lag(r, s, g);
    }
}

/// XINFO STREAM key [FULL [COUNT n]]
fn info_stream(r: &mut ReplyBuf, s: &Stream, args: &Args) -> Result<(), String> {
    let opts = args.len() - 3;
    let mut count: i64 = 10;
    let full = opts > 0;
    if full {
        if (opts != 1 && opts != 3) || !args.is(3, "full") || (opts == 3 && !args.is(4, "count")) {
            return Err(errors::subcommand_syntax("XINFO", args.get(1)));
        }
        if opts == 3 {
            count = parse_i64(args.get(5)).ok_or(errors::NOT_INT)?;
            if count < 0 {
                count = 10;
            }
        }
    }
    r.map(if full { 9 } else { 10 });
    r.bulk(b"length");
    r.int(s.len() as i64);
    r.bulk(b"radix-tree-keys");
    r.int(s.node_count() as i64);
    r.bulk(b"radix-tree-nodes");
    r.int(s.rax_node_count() as i64);
    r.bulk(b"last-generated-id");
    reply_id(r, s.last_id);
    r.bulk(b"max-deleted-entry-id");
    reply_id(r, s.max_deleted_id);
    r.bulk(b"entries-added");
    r.int(s.entries_added as i64);
    r.bulk(b"recorded-first-entry-id");
    reply_id(r, s.first_id);
    if !full {
        r.bulk(b"groups");
        r.int(s.groups.len() as i64);
        for (label, rev) in [(&b"first-entry"[..], false), (b"last-entry", true)] {
            r.bulk(label);
            let mut found = false;
            s.range(StreamId::MIN, StreamId::MAX, rev, |id, pairs| {
                reply_entry(r, id, pairs);
                found = true;
                false
            });
            if !found {
                r.null();
            }
        }
        return Ok(());
    }
    let count = count as usize;
    let limit = |n: usize| if count == 0 { n } else { n.min(count) };
    r.bulk(b"entries");
    reply_range(r, s, StreamId::MIN, StreamId::MAX, count, false);
    r.bulk(b"groups");
    r.array(s.groups.len());
    for (name, g) in &s.groups {
        r.map(7);
        r.bulk(b"name");
        r.bulk(name);
        r.bulk(b"last-delivered-id");
        reply_id(r, g.last_id);
        r.bulk(b"entries-read");
        reply_entries_read(r, g);
        r.bulk(b"lag");
        reply_lag(r, s, g);
        r.bulk(b"pel-count");
        r.int(g.pending.len() as i64);
        r.bulk(b"pending");
        r.array(limit(g.pending.len()));
        for (id, p) in g.pending.iter().take(limit(g.pending.len())) {
            r.array(4);
            reply_id(r, *id);
            r.bulk(&p.consumer);
            r.int(p.delivery_time as i64);
            r.int(p.delivery_count as i64);
        }
        r.bulk(b"consumers");
        r.array(g.consumers.len());
        for (name, c) in &g.consumers {
            r.map(4);
            r.bulk(b"name");
            r.bulk(name);
            r.bulk(b"seen-time");
            r.int(c.seen_time as i64);
            r.bulk(b"pel-count");
            r.int(c.pending.len() as i64);
            r.bulk(b"pending");
            r.array(limit(c.pending.len()));
            for id in c.pending.iter().take(limit(c.pending.len())) {
                let p = g.pending.get(id);
                r.array(3);
                reply_id(r, *id);
                r.int(p.map_or(0, |p| p.delivery_time as i64));
                r.int(p.map_or(0, |p| p.delivery_count as i64));
            }
        }
    }
    Ok(())
}
