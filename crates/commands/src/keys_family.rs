//! Generic keyspace commands on one shard: DEL, EXISTS, TYPE, the EXPIRE family, TTL family,
//! PERSIST, KEYS, SCAN, RANDOMKEY, RENAME, RENAMENX, COPY, MOVE and SWAPDB. Multi-key ones see only this shard's keys; the
//! coordinator sums or concatenates per-shard replies.

use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::glob::glob_match;
use damselfly_storage::notify::class;
use damselfly_storage::{evict, EvictionConfig, Shard, Value, ValueRef, SCAN_SHARD_BITS};

use crate::scan_args::{parse_scan_cursor, reply_scan, ScanArgs};
use crate::{errors, Args, ExecCtx};

/// DEL and UNLINK: how many of the keys existed.
pub fn del(ctx: &mut ExecCtx, args: &Args) {
    let mut n = 0;
    for key in args.iter().skip(1) {
        if ctx.shard.delete(ctx.db, key, ctx.now) {
            ctx.notify(class::GENERIC, "del", key);
            n += 1;
        }
    }
    ctx.reply.int(n);
}

/// EXISTS: how many keys exist, counting repeats. Looking does not count as an access.
pub fn exists(ctx: &mut ExecCtx, args: &Args) {
    let n = args
        .iter()
        .skip(1)
        .filter(|k| ctx.inspect(k).is_some())
        .count();
    ctx.reply.int(n as i64);
}

/// TOUCH: EXISTS that records an access to each key (LRU clock, LFU counter).
pub fn touch(ctx: &mut ExecCtx, args: &Args) {
    let n = args
        .iter()
        .skip(1)
        .filter(|k| ctx.lookup_read(k).is_some())
        .count();
    ctx.reply.int(n as i64);
}

pub fn type_cmd(ctx: &mut ExecCtx, args: &Args) {
    // A read, as in Redis: a missing key is a miss (and a `keymiss` event).
    let name = ctx
        .inspect(args.get(1))
        .map_or("none", |e| e.value().type_name());
    ctx.reply.simple(name);
}

const OBJECT_HELP: [&str; 15] = [
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

const FREQ_NOT_TRACKED: &str = "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";
const IDLETIME_NOT_TRACKED: &str = "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.";

const IDLETIME_NOT_TRACKED_CLOCK: &str =
    "ERR The allkeys-clock maxmemory policy is selected, idle time not tracked.";

/// Redis's refcount of a shared object: the integers 0..9999 are shared unless an LRU or
/// LFU policy with a memory limit needs per-key access information.
const SHARED_REFCOUNT: i64 = i32::MAX as i64;

/// OBJECT ENCODING | FREQ | IDLETIME | REFCOUNT | HELP. Looking does not count as an access.
pub fn object(ctx: &mut ExecCtx, args: &Args) {
    if args.len() == 2 && args.is(1, "help") {
        ctx.reply.array(OBJECT_HELP.len());
        for l in OBJECT_HELP {
            ctx.reply.simple(l);
        }
        return;
    }
    let Some(sub) = ["encoding", "freq", "idletime", "refcount"]
        .into_iter()
        .find(|s| args.is(1, s))
    else {
        return ctx.error(&errors::unknown_subcommand("object", args.get(1)));
    };
    if args.len() != 3 {
        return ctx.error(&errors::wrong_arity(&format!("object|{sub}")));
    }
    let (cfg, now) = (ctx.shard.eviction, ctx.now);
    let Some(e) = ctx.peek(args.get(2)) else {
        return ctx.reply.null();
    };
    match sub {
        "encoding" => {
            let enc = e.encoding();
            ctx.reply.bulk(enc.as_bytes())
        }
        "freq" if !cfg.policy.is_lfu() => ctx.error(FREQ_NOT_TRACKED),
        "freq" => {
            let n = evict::lfu_count(e.access(), now, cfg.lfu_decay_time);
            ctx.reply.int(n as i64)
        }
        "idletime" if cfg.policy.is_lfu() => ctx.error(IDLETIME_NOT_TRACKED),
        "idletime" if cfg.policy.is_clock() => ctx.error(IDLETIME_NOT_TRACKED_CLOCK),
        "idletime" => {
            let idle = evict::idle_seconds(e.access(), now);
            ctx.reply.int(idle as i64)
        }
        _ => {
            let n = refcount(e.value(), &cfg);
            ctx.reply.int(n)
        }
    }
}

/// Redis's reference count of a value: its shared integers 0-9999 (used unless an eviction
/// policy needs per-key access data) count as never freed, everything else is 1.
pub fn refcount(value: ValueRef, cfg: &EvictionConfig) -> i64 {
    let shared = matches!(value, ValueRef::Int(0..=9999))
        && !(cfg.maxmemory > 0 && cfg.policy.tracks_access());
    if shared {
        SHARED_REFCOUNT
    } else {
        1
    }
}

/// MEMORY's subcommands that name no key, run by the coordinator when called without
/// arguments (`Route::KeyOrCoordinator`).
pub const MEMORY_KEYLESS: [&str; 5] = ["doctor", "malloc-stats", "purge", "stats", "help"];

/// MEMORY USAGE key [SAMPLES n]: the bytes the key, its value and their bookkeeping take.
/// (The other subcommands come here only when given arguments they do not take.)
pub fn memory_usage(ctx: &mut ExecCtx, args: &Args) {
    if let Some(sub) = MEMORY_KEYLESS.into_iter().find(|s| args.is(1, s)) {
        return ctx.error(&errors::wrong_arity(&format!("memory|{sub}")));
    }
    if !args.is(1, "usage") {
        return ctx.error(&errors::unknown_subcommand("memory", args.get(1)));
    }
    let mut i = 3;
    while i < args.len() {
        if args.is(i, "samples") && i + 1 < args.len() {
            match parse_i64(args.get(i + 1)) {
                None => return ctx.error(errors::NOT_INT),
                Some(n) if n < 0 => return ctx.error(errors::SYNTAX),
                Some(_) => {}
            }
            i += 2;
        } else {
            return ctx.error(errors::SYNTAX);
        }
    }
    // As Redis, straight from the table: a key past its deadline is measured, not expired
    // (nor announced as expired).
    match ctx.shard.dbs[ctx.db]
        .table
        .get(args.get(2))
        .map(|e| e.mem_size())
    {
        Some(n) => ctx.reply.int(n as i64),
        None => ctx.reply.null(),
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

pub fn expire(ctx: &mut ExecCtx, args: &Args) {
    expire_generic(ctx, args, false, Unit::Seconds, "expire");
}

pub fn pexpire(ctx: &mut ExecCtx, args: &Args) {
    expire_generic(ctx, args, false, Unit::Millis, "pexpire");
}

pub fn expireat(ctx: &mut ExecCtx, args: &Args) {
    expire_generic(ctx, args, true, Unit::Seconds, "expireat");
}

pub fn pexpireat(ctx: &mut ExecCtx, args: &Args) {
    expire_generic(ctx, args, true, Unit::Millis, "pexpireat");
}

const NX: u8 = 1;
const XX: u8 = 2;
const GT: u8 = 4;
const LT: u8 = 8;

fn expire_generic(ctx: &mut ExecCtx, args: &Args, absolute: bool, unit: Unit, name: &str) {
    let mut flags = 0u8;
    for i in 3..args.len() {
        let opt = args.get(i);
        let f = match opt.to_ascii_lowercase().as_slice() {
            b"nx" => NX,
            b"xx" => XX,
            b"gt" => GT,
            b"lt" => LT,
            _ => {
                ctx.error(&format!(
                    "ERR Unsupported option {}",
                    String::from_utf8_lossy(opt)
                ));
                return;
            }
        };
        flags |= f;
    }
    if flags & NX != 0 && flags & (XX | GT | LT) != 0 {
        ctx.error("ERR NX and XX, GT or LT options at the same time are not compatible");
        return;
    }
    if flags & GT != 0 && flags & LT != 0 {
        ctx.error("ERR GT and LT options at the same time are not compatible");
        return;
    }
    let Some(mut when) = parse_i64(args.get(2)) else {
        ctx.error(errors::NOT_INT);
        return;
    };
    if unit == Unit::Seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            ctx.error(&errors::invalid_expire(name));
            return;
        }
        when *= 1000;
    }
    let base = if absolute { 0 } else { ctx.now as i64 };
    if when > i64::MAX - base {
        ctx.error(&errors::invalid_expire(name));
        return;
    }
    when += base;
    let key = args.get(1);
    let Some(entry) = ctx.lookup_write(key) else {
        ctx.reply.int(0);
        return;
    };
    let current = entry.expire_at();
    let refused = (flags & NX != 0 && current != 0)
        || (flags & XX != 0 && current == 0)
        || (flags & GT != 0 && (current == 0 || when <= current as i64))
        || (flags & LT != 0 && current != 0 && when >= current as i64);
    if refused {
        ctx.reply.int(0);
        return;
    }
    if when <= ctx.now as i64 {
        // A time already past deletes the key, announced as `del`.
        ctx.shard.remove(ctx.db, key);
        ctx.propagate(&[b"DEL", key]);
        ctx.notify(class::GENERIC, "del", key);
    } else {
        ctx.shard
            .update(ctx.db, key, ctx.now, |e| e.set_expire_at(when as u64));
        // Absolute, so a replay sets the same deadline whenever it runs.
        ctx.propagate(&[b"PEXPIREAT", key, when.to_string().as_bytes()]);
        ctx.notify(class::GENERIC, "expire", key);
    }
    ctx.reply.int(1);
}

/// The TTL family: remaining or absolute expiry, in seconds or milliseconds.
fn ttl_generic(ctx: &mut ExecCtx, args: &Args, millis: bool, absolute: bool) {
    let now = ctx.now;
    let Some(entry) = ctx.inspect(args.get(1)) else {
        ctx.reply.int(-2);
        return;
    };
    if entry.expire_at() == 0 {
        ctx.reply.int(-1);
        return;
    }
    let expire = entry.expire_at() as i64;
    let ttl = if absolute {
        expire
    } else {
        (expire - now as i64).max(0)
    };
    ctx.reply.int(if millis { ttl } else { (ttl + 500) / 1000 });
}

pub fn ttl(ctx: &mut ExecCtx, args: &Args) {
    ttl_generic(ctx, args, false, false);
}

pub fn pttl(ctx: &mut ExecCtx, args: &Args) {
    ttl_generic(ctx, args, true, false);
}

pub fn expiretime(ctx: &mut ExecCtx, args: &Args) {
    ttl_generic(ctx, args, false, true);
}

pub fn pexpiretime(ctx: &mut ExecCtx, args: &Args) {
    ttl_generic(ctx, args, true, true);
}

pub fn persist(ctx: &mut ExecCtx, args: &Args) {
    let key = args.get(1);
    let had_ttl = ctx
        .shard
        .update(ctx.db, key, ctx.now, |e| {
            let had = e.expire_at() != 0;
            e.set_expire_at(0);
            had
        })
        .unwrap_or(false);
    if had_ttl {
        ctx.notify(class::GENERIC, "persist", key);
    }
    ctx.reply.int(i64::from(had_ttl));
}

/// Every live key of this shard matching the pattern.
pub fn keys(ctx: &mut ExecCtx, args: &Args) {
    let pattern = args.get(1);
    let all = pattern == b"*";
    let now = ctx.now;
    let matched: Vec<&[u8]> = ctx.shard.dbs[ctx.db]
        .table
        .iter()
        .filter(|e| e.expire_at() == 0 || e.expire_at() > now)
        .filter(|e| all || glob_match(pattern, e.key(), false))
        .map(|e| e.key())
        .collect();
    ctx.reply.array(matched.len());
    for k in matched {
        ctx.reply.bulk(k);
    }
}

/// A random live key of this shard, or null.
pub fn randomkey(ctx: &mut ExecCtx, _args: &Args) {
    let mut rng = rand::thread_rng();
    // Expired keys met on the way are deleted, as Redis does; bounded tries.
    for _ in 0..100 {
        let Some(e) = ctx.shard.dbs[ctx.db].table.random_entry(&mut rng) else {
            break;
        };
        if e.expire_at() != 0 && e.expire_at() <= ctx.now {
            let key = e.key().to_vec();
            ctx.shard.delete(ctx.db, &key, ctx.now);
            continue;
        }
        let key = e.key().to_vec();
        ctx.reply.bulk(&key);
        return;
    }
    ctx.reply.null();
}

/// The shard a SCAN cursor points into (the coordinator routes by it).
pub fn scan_cursor_shard(cursor: u64) -> usize {
    (cursor >> (63 - SCAN_SHARD_BITS)) as usize
}

/// SCAN on the shard named by the cursor. The cursor's low bits are a position in this shard's
/// hash order; when this shard is done the cursor moves to the next shard.
pub fn scan(ctx: &mut ExecCtx, args: &Args) {
    let Some(cursor) = parse_scan_cursor(args.get(1)) else {
        ctx.error(errors::INVALID_CURSOR);
        return;
    };
    let opts = match ScanArgs::parse(args, 2, true) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let pos_bits = 63 - SCAN_SHARD_BITS;
    let shard = scan_cursor_shard(cursor);
    let mut found: Vec<(Box<[u8]>, u64, &'static str)> = Vec::new();
    let next = if shard != ctx.shard_id {
        // A cursor from another server layout: nothing here, end the walk.
        0
    } else {
        let pos = cursor & ((1u64 << pos_bits) - 1);
        let next_pos = ctx.shard.dbs[ctx.db].table.scan(pos, opts.count, |e| {
            found.push((e.key().into(), e.expire_at(), e.value().type_name()));
        });
        if next_pos != 0 {
            ((shard as u64) << pos_bits) | next_pos
        } else if shard + 1 < ctx.num_shards {
            ((shard as u64) + 1) << pos_bits
        } else {
            0
        }
    };
    let now = ctx.now;
    let mut keys = Vec::with_capacity(found.len());
    for (key, expire_at, ty) in found {
        // Redis filters by MATCH first: only keys that pass it are checked (and lazily
        // deleted) for expiry.
        if !opts.matches(&key) {
            continue;
        }
        if expire_at != 0 && expire_at <= now {
            ctx.shard.delete(ctx.db, &key, now);
            continue;
        }
        if opts
            .type_filter
            .is_some_and(|t| !t.eq_ignore_ascii_case(ty.as_bytes()))
        {
            continue;
        }
        keys.push(key);
    }
    reply_scan(ctx.reply, next, &keys);
}

/// RENAME, RENAMENX, COPY and MOVE: a value goes from one key (or database) to another. The
/// shard-side commands handle both keys on one shard; the coordinator runs the same steps as
/// hops when they live on two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transfer {
    pub kind: TransferKind,
    pub src_db: usize,
    pub dst_db: usize,
    /// An existing destination is overwritten (RENAME, COPY ... REPLACE).
    pub replace: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransferKind {
    Rename,
    RenameNx,
    Copy,
    Move,
}

impl Transfer {
    /// Parses the command's options; errors are Redis's texts.
    pub fn parse(
        name: &str,
        args: &Args,
        db: usize,
        databases: usize,
    ) -> Result<Self, &'static str> {
        let mut t = Transfer {
            kind: TransferKind::Rename,
            src_db: db,
            dst_db: db,
            replace: false,
        };
        match name {
            "rename" => t.replace = true,
            "renamenx" => t.kind = TransferKind::RenameNx,
            "move" => {
                t.kind = TransferKind::Move;
                let n = errors::parse_c_int(args.get(2))?;
                t.dst_db = db_index(n.into(), databases).ok_or(errors::DB_INDEX)?;
                if t.dst_db == db {
                    return Err(SAME_OBJECT);
                }
            }
            _ => {
                t.kind = TransferKind::Copy;
                let mut i = 3;
                while i < args.len() {
                    if args.is(i, "replace") {
                        t.replace = true;
                    } else if args.is(i, "db") && i + 1 < args.len() {
                        let n = errors::parse_c_int(args.get(i + 1))?;
                        t.dst_db = db_index(n.into(), databases).ok_or(errors::DB_INDEX)?;
                        i += 1;
                    } else {
                        return Err(errors::SYNTAX);
                    }
                    i += 1;
                }
                if t.dst_db == db && args.get(1) == args.get(2) {
                    return Err(SAME_OBJECT);
                }
            }
        }
        Ok(t)
    }

    /// The source and destination keys (MOVE keeps the key, changing its database).
    pub fn keys<'a>(&self, args: &Args<'a>) -> (&'a [u8], &'a [u8]) {
        match self.kind {
            TransferKind::Move => (args.get(1), args.get(1)),
            _ => (args.get(1), args.get(2)),
        }
    }

    /// The source keeps its value (COPY).
    pub fn keeps_source(&self) -> bool {
        self.kind == TransferKind::Copy
    }

    /// The source does not exist.
    pub fn reply_missing(&self, reply: &mut ReplyBuf) {
        match self.kind {
            TransferKind::Rename | TransferKind::RenameNx => reply.error("ERR no such key"),
            TransferKind::Copy | TransferKind::Move => reply.int(0),
        }
    }

    /// The destination exists and may not be overwritten.
    pub fn reply_blocked(&self, reply: &mut ReplyBuf) {
        reply.int(0);
    }

    pub fn reply_done(&self, reply: &mut ReplyBuf) {
        match self.kind {
            TransferKind::Rename => reply.ok(),
            _ => reply.int(1),
        }
    }

    /// Whether the source exists, looked up as Redis does: COPY reads it (a miss counts, and
    /// is a `keymiss` event), the others look it up for writing. Both expire it if due.
    pub fn source_exists(&self, shard: &mut Shard, src: &[u8], now: u64) -> bool {
        match self.kind {
            TransferKind::Copy => shard.get_counted(self.src_db, src, now).is_some(),
            _ => shard.exists(self.src_db, src, now),
        }
    }

    /// Whether the destination holds a live key, leaving one past its deadline in place:
    /// [`Transfer::store`] expires it, so that it is announced only if the transfer gets
    /// that far (the cross-shard path checks both keys at once, Redis the source first).
    pub fn destination_taken(&self, shard: &Shard, dst: &[u8], now: u64) -> bool {
        shard.dbs[self.dst_db]
            .table
            .get(dst)
            .is_some_and(|e| e.expire_at() == 0 || e.expire_at() > now)
    }

    /// Writes the value under the destination as Redis does: the destination is looked up
    /// for writing (expired if due), any old value deleted, and the value added as a new key
    /// (`new`, even over an old value).
    pub fn store(&self, shard: &mut Shard, dst: &[u8], value: Value, expire_at: u64, now: u64) {
        shard.expire_if_needed(self.dst_db, dst, now);
        shard.remove(self.dst_db, dst);
        shard.set(self.dst_db, dst, value, expire_at);
    }

    /// The source's event once the value has moved: `rename_from` or `move_from` (COPY
    /// names only its destination).
    pub fn announce_source(&self, shard: &mut Shard, src: &[u8]) {
        let event = match self.kind {
            TransferKind::Rename | TransferKind::RenameNx => "rename_from",
            TransferKind::Move => "move_from",
            TransferKind::Copy => return,
        };
        shard.notify.record(class::GENERIC, event, self.src_db, src);
    }

    /// The destination's event: `rename_to`, `copy_to` or `move_to`.
    pub fn announce_destination(&self, shard: &mut Shard, dst: &[u8]) {
        let event = match self.kind {
            TransferKind::Rename | TransferKind::RenameNx => "rename_to",
            TransferKind::Move => "move_to",
            TransferKind::Copy => "copy_to",
        };
        shard.notify.record(class::GENERIC, event, self.dst_db, dst);
    }
}

const SAME_OBJECT: &str = "ERR source and destination objects are the same";

/// RENAME, RENAMENX, COPY, MOVE with both keys on this shard.
pub fn transfer(ctx: &mut ExecCtx, args: &Args) {
    let name = if args.is(0, "rename") {
        "rename"
    } else if args.is(0, "renamenx") {
        "renamenx"
    } else if args.is(0, "move") {
        "move"
    } else {
        "copy"
    };
    let t = match Transfer::parse(name, args, ctx.db, ctx.shard.dbs.len()) {
        Ok(t) => t,
        Err(e) => return ctx.error(e),
    };
    let (src, dst) = t.keys(args);
    if !t.source_exists(ctx.shard, src, ctx.now) {
        return t.reply_missing(ctx.reply);
    }
    if src == dst && t.src_db == t.dst_db {
        // RENAME of a key to itself changes nothing.
        return match t.kind {
            TransferKind::RenameNx => t.reply_blocked(ctx.reply),
            _ => t.reply_done(ctx.reply),
        };
    }
    if !t.replace && ctx.shard.exists(t.dst_db, dst, ctx.now) {
        return t.reply_blocked(ctx.reply);
    }
    let Some((value, expire_at)) = take_value(ctx.shard, &t, src, ctx.now) else {
        return t.reply_missing(ctx.reply);
    };
    // Redis's order: the destination is added (`new`), then the source's event, then the
    // destination's.
    t.store(ctx.shard, dst, value, expire_at, ctx.now);
    t.announce_source(ctx.shard, src);
    t.announce_destination(ctx.shard, dst);
    t.reply_done(ctx.reply);
}

/// The source's value and deadline: removed from the source, or cloned for COPY.
pub fn take_value(shard: &mut Shard, t: &Transfer, src: &[u8], now: u64) -> Option<(Value, u64)> {
    if t.keeps_source() {
        let e = shard.get(t.src_db, src, now)?;
        Some((e.value().to_owned(), e.expire_at()))
    } else {
        shard.get(t.src_db, src, now)?;
        let e = shard.remove(t.src_db, src)?;
        let expire_at = e.expire_at();
        Some((e.into_value(), expire_at))
    }
}

/// SWAPDB's two database indexes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapDb(pub usize, pub usize);

impl SwapDb {
    /// Parses the indexes as Redis does (C ints, then the range check); errors are Redis's
    /// texts.
    pub fn parse(args: &Args, databases: usize) -> Result<Self, &'static str> {
        let index = |at: usize, invalid: &'static str| {
            parse_i64(args.get(at))
                .filter(|n| i32::try_from(*n).is_ok())
                .ok_or(invalid)
        };
        let a = index(1, "ERR invalid first DB index")?;
        let b = index(2, "ERR invalid second DB index")?;
        match (db_index(a, databases), db_index(b, databases)) {
            (Some(a), Some(b)) => Ok(SwapDb(a, b)),
            _ => Err(errors::DB_INDEX),
        }
    }
}

/// A database index within `databases`.
pub fn db_index(n: i64, databases: usize) -> Option<usize> {
    usize::try_from(n).ok().filter(|&n| n < databases)
}

/// SWAPDB on this shard (the coordinator runs it on every shard in one transaction).
pub fn swapdb(ctx: &mut ExecCtx, args: &Args) {
    match SwapDb::parse(args, ctx.shard.dbs.len()) {
        Ok(SwapDb(a, b)) => {
            ctx.shard.swap_dbs(a, b);
            ctx.reply.ok();
        }
        Err(e) => ctx.error(e),
    }
}
