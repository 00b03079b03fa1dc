//! The commands that expose Redis's RDB value codec (damselfly-persistence): DUMP and RESTORE
//! on one shard (Redis 7.0's cluster.c), and the shard-side parts of DEBUG DIGEST and DEBUG
//! DIGEST-VALUE (debug.c), whose per-shard results the coordinator merges.

use std::fmt::Write as _;

use damselfly_persistence::digest::{value_digest, DatasetDigest, Digest};
use damselfly_persistence::dump;
use damselfly_persistence::rdb::WriteOptions;
use damselfly_protocol::number::parse_i64;
use damselfly_storage::notify::class;
use damselfly_storage::{Shard, ValueRef};

use crate::{errors, Args, ExecCtx};

const BUSYKEY: &str = "BUSYKEY Target key name already exists.";

/// DUMP key: the value's payload as redis-server 7.0 writes it (strings compressed as
/// `rdbcompression` says), or null.
pub fn dump(ctx: &mut ExecCtx, args: &Args) {
    let opts = WriteOptions::for_limits(&ctx.limits());
    match ctx
        .lookup_read(args.get(1))
        .map(|e| dump::encode(e.value(), &opts))
    {
        Some(payload) => ctx.reply.bulk(&payload),
        None => ctx.reply.null(),
    }
}

/// RESTORE's options after the payload.
struct RestoreOptions {
    replace: bool,
    absttl: bool,
    idle: Option<u64>,
    freq: Option<u8>,
}

impl RestoreOptions {
    /// Parses `[REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]` as restoreCommand does:
    /// IDLETIME and FREQ exclude each other (the second one is a syntax error), and each is
    /// range-checked.
    fn parse(args: &Args) -> Result<Self, &'static str> {
        let mut opts = RestoreOptions {
            replace: false,
            absttl: false,
            idle: None,
            freq: None,
        };
        let mut i = 4;
        while i < args.len() {
            let has_value = i + 1 < args.len();
            if args.is(i, "replace") {
                opts.replace = true;
            } else if args.is(i, "absttl") {
                opts.absttl = true;
            } else if args.is(i, "idletime") && has_value && opts.freq.is_none() {
                let n = parse_i64(args.get(i + 1)).ok_or(errors::NOT_INT)?;
                let n = u64::try_from(n).map_err(|_| "ERR Invalid IDLETIME value, must be >= 0")?;
                opts.idle = Some(n);
                i += 1;
            } else if args.is(i, "freq") && has_value && opts.idle.is_none() {
                let n = parse_i64(args.get(i + 1)).ok_or(errors::NOT_INT)?;
                let n = u8::try_from(n)
                    .map_err(|_| "ERR Invalid FREQ value, must be >= 0 and <= 255")?;
                opts.freq = Some(n);
                i += 1;
            } else {
                return Err(errors::SYNTAX);
            }
            i += 1;
        }
        Ok(opts)
    }
}

/// RESTORE key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency].
/// Redis's order of checks, which decides the error a request with several problems gets:
/// options, an existing key, the TTL, the payload's footer, the value.
pub fn restore(ctx: &mut ExecCtx, args: &Args) {
    let opts = match RestoreOptions::parse(args) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let key = args.get(1);
    if !opts.replace && ctx.lookup_write(key).is_some() {
        return ctx.error(BUSYKEY);
    }
    let ttl = match parse_i64(args.get(2)) {
        None => return ctx.error(errors::NOT_INT),
        Some(t) if t < 0 => return ctx.error("ERR Invalid TTL value, must be >= 0"),
        Some(t) => t,
    };
    let value = match dump::decode(args.get(3), &ctx.limits()) {
        Ok(v) => v,
        Err(e) => return ctx.error(e.reply()),
    };
    let now = ctx.now as i64;
    // 0 is no deadline. Redis adds the clock in C, where a relative TTL near i64::MAX wraps
    // to the past: the key is then not created, and we reply as it does.
    let deadline = if ttl != 0 && !opts.absttl {
        ttl.wrapping_add(now)
    } else {
        ttl
    };
    // REPLACE deletes the old value as Redis's dbDelete does (without an expiry check, so a
    // key past its deadline goes silently too); the value is then added as a new key.
    let replaced = opts.replace && ctx.shard.remove(ctx.db, key).is_some();
    if deadline != 0 && deadline <= now {
        // A deadline already past: REPLACE still deletes the old key, and the reply is OK.
        if replaced {
            ctx.propagate(&[b"DEL", key]);
            ctx.notify(class::GENERIC, "del", key);
        }
        return ctx.reply.ok();
    }
    ctx.shard.set(ctx.db, key, value, deadline as u64);
    let eviction = ctx.shard.eviction;
    if let Some(access) = eviction.restored_access(opts.idle, opts.freq, ctx.now) {
        if let Some(e) = ctx.shard.dbs[ctx.db].table.get_mut(key) {
            e.set_access(access);
        }
    }
    ctx.notify(class::GENERIC, "restore", key);
    if deadline != ttl {
        // The journal gets the deadline, not the time left.
        let at = deadline.to_string();
        ctx.propagate(&[
            b"RESTORE",
            key,
            at.as_bytes(),
            args.get(3),
            b"REPLACE",
            b"ABSTTL",
        ]);
    }
    ctx.reply.ok();
}

/// What a DEBUG request reads or replaces; the planner and the coordinator both read it
/// from here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugScope {
    /// DEBUG DIGEST: every database of every shard.
    Dataset,
    /// DEBUG DIGEST-VALUE key [key ...] and DEBUG OBJECT key: the keys from argument 2 on, in
    /// the current database.
    Keys,
    /// DEBUG RELOAD [options]: replaces every database of every shard.
    Reload,
}

impl DebugScope {
    /// None for the other DEBUG subcommands (and for DIGEST with arguments, which Redis
    /// answers with its subcommand syntax error).
    pub fn parse(args: &Args) -> Option<Self> {
        if args.len() == 2 && args.is(1, "digest") {
            Some(DebugScope::Dataset)
        } else if args.len() >= 2 && args.is(1, "digest-value")
            || args.len() == 3 && args.is(1, "object")
        {
            Some(DebugScope::Keys)
        } else if args.len() >= 2 && args.is(1, "reload") {
            Some(DebugScope::Reload)
        } else {
            None
        }
    }
}

/// DEBUG OBJECT key: Redis's description of a key on this shard, None when there is none. A
/// key past its deadline is described, as in Redis (DEBUG looks without expiring).
pub fn debug_object(shard: &Shard, db: usize, key: &[u8], now_ms: u64) -> Option<String> {
    let e = shard.dbs.get(db)?.table.get(key)?;
    let cfg = &shard.eviction;
    let opts = WriteOptions::for_limits(&shard.limits);
    // A DUMP payload is the type byte, the value as RDB writes it, the version and the CRC.
    let serialized = dump::encode(e.value(), &opts).len().saturating_sub(11);
    let lru = cfg.redis_lru_field(e.access(), now_ms);
    // Redis's estimateObjectIdleTime over its 24-bit clock, whatever the policy.
    let clock = (now_ms / 1000) & 0xff_ffff;
    let idle = if clock >= lru {
        clock - lru
    } else {
        clock + (0xff_ffff - lru)
    };
    let mut line = format!(
        "Value at:{:p} refcount:{} encoding:{} serializedlength:{serialized} lru:{lru} lru_seconds_idle:{idle}",
        e as *const _,
        crate::keys_family::refcount(e.value(), cfg),
        e.encoding(),
    );
    if let ValueRef::List(list) = e.value() {
        let (nodes, bytes) = list.node_stats();
        let _ = write!(
            line,
            " ql_nodes:{nodes} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:0 ql_uncompressed_size:{bytes}",
            list.len() as f64 / nodes.max(1) as f64,
            shard.limits.list_max_listpack_size,
        );
    }
    Some(line)
}

/// This shard's part of DEBUG DIGEST. Keys past their deadline but not yet removed count, as
/// in Redis, which digests its dictionaries without expiring anything.
pub fn shard_digest(shard: &Shard) -> DatasetDigest {
    let mut digest = DatasetDigest::new();
    for (db, d) in shard.dbs.iter().enumerate() {
        for e in d.table.iter() {
            digest.add(db as u64, e.key(), e.value(), e.expire_at() != 0);
        }
    }
    digest
}

/// DEBUG DIGEST-VALUE of keys on this shard, in order: zeros for a missing key; a key past
/// its deadline is digested (and left in place), as Redis does.
pub fn value_digests(shard: &Shard, db: usize, keys: &[Vec<u8>]) -> Vec<Digest> {
    keys.iter()
        .map(|k| {
            shard.dbs[db]
                .table
                .get(k)
                .map_or_else(Digest::default, |e| {
                    value_digest(e.value(), e.expire_at() != 0)
                })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use damselfly_protocol::{ReplyBuf, Span};
    use damselfly_storage::Value;

    const NOW: u64 = 1_700_000_000_000;

    /// Runs a handler on `shard`, database 0, at `NOW`; returns the reply's bytes.
    fn run(shard: &mut Shard, f: fn(&mut ExecCtx, &Args), words: &[&[u8]]) -> Vec<u8> {
        let (mut buf, mut spans) = (Vec::new(), Vec::new());
        for w in words {
            Span::push_arg(&mut buf, &mut spans, w);
        }
        let mut reply = ReplyBuf::new(false);
        let mut ctx = ExecCtx {
            shard,
            db: 0,
            now: NOW,
            reply: &mut reply,
            shard_id: 0,
            num_shards: 1,
            max_bulk_len: u64::MAX,
            effects: None,
        };
        f(&mut ctx, &Args::new(&buf, &spans));
        reply.buf
    }

    /// The DUMP payload of a string.
    fn payload(text: &[u8]) -> Vec<u8> {
        dump::encode(Value::from_bytes(text).as_ref(), &WriteOptions::default())
    }

    fn deadline(shard: &Shard, key: &[u8]) -> Option<u64> {
        shard.dbs[0].table.get(key).map(|e| e.expire_at())
    }

    #[test]
    fn options_parse_as_redis() {
        // Replies checked against redis-server 7.0.15.
        let p = payload(b"v");
        let cases: &[(&[&[u8]], &[u8])] = &[
            (&[b"replace", b"absttl", b"idletime", b"0"], b"+OK\r\n"),
            (&[b"FREQ", b"255", b"FREQ", b"0", b"REPLACE"], b"+OK\r\n"),
            (
                &[b"idletime", b"5", b"freq", b"3"],
                b"-ERR syntax error\r\n",
            ),
            (
                &[b"freq", b"3", b"idletime", b"5"],
                b"-ERR syntax error\r\n",
            ),
            (&[b"idletime"], b"-ERR syntax error\r\n"),
            (&[b"bogus"], b"-ERR syntax error\r\n"),
            (
                &[b"idletime", b"-1"],
                b"-ERR Invalid IDLETIME value, must be >= 0\r\n",
            ),
            (
                &[b"freq", b"256"],
                b"-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n",
            ),
            (
                &[b"freq", b"1.5"],
                b"-ERR value is not an integer or out of range\r\n",
            ),
        ];
        for (opts, want) in cases {
            let mut shard = Shard::new(1);
            let mut words: Vec<&[u8]> = vec![b"restore", b"k", b"0", &p];
            words.extend_from_slice(opts);
            let got = run(&mut shard, restore, &words);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(want),
                "{opts:?}"
            );
        }
    }

    #[test]
    fn deadlines() {
        let p = payload(b"v");
        let mut shard = Shard::new(1);
        let ok = b"+OK\r\n".to_vec();
        let restore_ttl = |shard: &mut Shard, key: &[u8], ttl: &str, more: &[&[u8]]| {
            let mut words: Vec<&[u8]> = vec![b"restore", key, ttl.as_bytes(), &p];
            words.extend_from_slice(more);
            run(shard, restore, &words)
        };
        assert_eq!(restore_ttl(&mut shard, b"none", "0", &[]), ok);
        assert_eq!(deadline(&shard, b"none"), Some(0));
        assert_eq!(restore_ttl(&mut shard, b"rel", "1500", &[]), ok);
        assert_eq!(deadline(&shard, b"rel"), Some(NOW + 1500));
        let at = (NOW + 9).to_string();
        assert_eq!(restore_ttl(&mut shard, b"abs", &at, &[b"ABSTTL"]), ok);
        assert_eq!(deadline(&shard, b"abs"), Some(NOW + 9));
        assert_eq!(restore_ttl(&mut shard, b"abs0", "0", &[b"absttl"]), ok);
        assert_eq!(deadline(&shard, b"abs0"), Some(0));
        // Past deadlines (one by wrapping around i64, as Redis's C addition does) create
        // nothing and reply OK.
        for (ttl, more) in [
            (NOW.to_string(), &[&b"absttl"[..]][..]),
            ("1".to_string(), &[&b"absttl"[..]][..]),
            (i64::MAX.to_string(), &[][..]),
        ] {
            assert_eq!(restore_ttl(&mut shard, b"past", &ttl, more), ok);
            assert_eq!(deadline(&shard, b"past"), None, "{ttl}");
        }
        // ... and with REPLACE they still delete the old key.
        assert_eq!(
            restore_ttl(&mut shard, b"rel", "1", &[b"absttl", b"replace"]),
            ok
        );
        assert_eq!(deadline(&shard, b"rel"), None);
        // An existing key is BUSYKEY before the TTL or payload is looked at; a key past its
        // deadline does not exist.
        let busy = b"-BUSYKEY Target key name already exists.\r\n".to_vec();
        assert_eq!(restore_ttl(&mut shard, b"none", "x", &[]), busy);
        shard.set(0, b"stale", Value::from_bytes(b"old"), NOW - 1);
        assert_eq!(restore_ttl(&mut shard, b"stale", "0", &[]), ok);
        assert_eq!(deadline(&shard, b"stale"), Some(0));
    }

    #[test]
    fn dump_restores_every_value() {
        let mut shard = Shard::new(1);
        let limits = shard.limits;
        let mut set = damselfly_storage::Set::default();
        for m in [&b"3"[..], b"a", b"-7"] {
            set.add(m, &limits);
        }
        shard.set(0, b"s", Value::Set(Box::new(set)), 0);
        shard.set(0, b"n", Value::from_bytes(b"12345"), NOW + 50);
        for key in [&b"s"[..], b"n"] {
            let reply = run(&mut shard, dump, &[b"dump", key]);
            // `$<len>\r\n<payload>\r\n`
            let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
            let p = reply[start..reply.len() - 2].to_vec();
            let ok = run(
                &mut shard,
                restore,
                &[b"restore", b"copy", b"0", &p, b"replace"],
            );
            assert_eq!(ok, b"+OK\r\n");
            let (a, b) = (
                value_digests(&shard, 0, &[key.to_vec()]),
                value_digests(&shard, 0, &[b"copy".to_vec()]),
            );
            // The copy has no deadline: its digest differs exactly by the expire marker.
            let original = shard.dbs[0].table.get(key).unwrap();
            assert_eq!(b[0], value_digest(original.value(), false));
            assert_eq!(
                a[0],
                value_digest(original.value(), original.expire_at() != 0)
            );
        }
        assert_eq!(run(&mut shard, dump, &[b"dump", b"nosuch"]), b"$-1\r\n");
    }

    #[test]
    fn digests_include_keys_past_their_deadline() {
        let mut shard = Shard::new(2);
        shard.set(1, b"gone", Value::from_bytes(b"v"), 1);
        let mut alone = DatasetDigest::new();
        alone.add(1, b"gone", Value::from_bytes(b"v").as_ref(), true);
        assert_eq!(shard_digest(&shard), alone);
        let d = value_digests(&shard, 1, &[b"gone".to_vec(), b"missing".to_vec()]);
        assert_eq!(d[0], value_digest(Value::from_bytes(b"v").as_ref(), true));
        assert_eq!(d[1], Digest::default());
        assert!(shard.dbs[1].table.get(b"gone").is_some(), "left in place");
    }

    #[test]
    fn digest_scope() {
        let scope = |words: &[&str]| {
            let (mut buf, mut spans) = (Vec::new(), Vec::new());
            for w in words {
                Span::push_arg(&mut buf, &mut spans, w.as_bytes());
            }
            DebugScope::parse(&Args::new(&buf, &spans))
        };
        assert_eq!(scope(&["debug", "DIGEST"]), Some(DebugScope::Dataset));
        assert_eq!(scope(&["debug", "digest", "k"]), None);
        assert_eq!(scope(&["debug", "digest-value"]), Some(DebugScope::Keys));
        assert_eq!(
            scope(&["debug", "Digest-Value", "a", "b"]),
            Some(DebugScope::Keys)
        );
        assert_eq!(scope(&["debug", "sleep", "0"]), None);
        assert_eq!(scope(&["debug", "reload"]), Some(DebugScope::Reload));
        assert_eq!(
            scope(&["debug", "RELOAD", "nosave", "x"]),
            Some(DebugScope::Reload)
        );
    }
}
