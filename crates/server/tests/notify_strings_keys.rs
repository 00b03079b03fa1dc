//! Keyspace notifications of the string, bitmap, HyperLogLog and generic key commands (SET and
//! its variants, MSET, the INCR family, SETBIT, BITOP, BITFIELD, PFADD, PFMERGE, DEL, the
//! EXPIRE family, PERSIST, RENAME, COPY, MOVE, RESTORE, SORT ... STORE) and the `keymiss`
//! events of their read commands, compared with Debian's redis-server command by command
//! (crates/server/tests/common/notify.rs): targeted cases for every command, keys on one shard
//! and across shards, then a seeded random stream with wrong types, missing keys and TTLs,
//! under `KEA` and under `KEAmn` (new keys and key misses too), on 2, 3 and 4 threads.
//!
//! Active expiry is off on both servers, so a key expires exactly when a command reaches it:
//! short PX values are always followed by DEBUG SLEEP before anything reads them, and then
//! the `expired` event belongs to the command that found the key past its deadline.

mod common;

use common::diff::state_difference;
use common::notify::differences;
use common::{Backend, Raw, Server};
use damselfly_storage::shard_for_key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Commands of the random stream under each flag set (`NOTIFY_STREAM_LEN` overrides, for
/// longer runs by hand).
fn stream_len() -> usize {
    std::env::var("NOTIFY_STREAM_LEN")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(750)
}

/// A time far in the future, in seconds and in milliseconds since the epoch.
const FUTURE_S: &str = "4102444800";
const FUTURE_MS: &str = "4102444800000";

fn c(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// A key `{prefix}N` on another shard than `key` among `threads`.
fn elsewhere(key: &str, prefix: &str, threads: usize) -> String {
    let home = shard_for_key(key.as_bytes(), threads);
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_for_key(k.as_bytes(), threads) != home)
        .expect("some key lives elsewhere")
}

/// Both servers with active expiry off and seeded.
fn servers(backend: Backend, threads: usize) -> (Server, Server) {
    let redis = Server::redis();
    let ours = Server::start_with(backend, threads, &[]);
    for server in [&redis, &ours] {
        let reply = server.raw().cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
        assert_eq!(reply, b"+OK\r\n");
        reseed(server);
    }
    (redis, ours)
}

/// Empties every database and adds the seed keys of every type, while nobody listens (so
/// they announce nothing).
fn reseed(server: &Server) {
    let mut c = server.raw();
    for cmd in [
        &["FLUSHALL"][..],
        &["RPUSH", "seedlist", "3", "1", "12", "5", "4", "10", "7"],
        &["HSET", "seedhash", "f", "v", "g", "w"],
        &["SADD", "seedset", "3", "1", "2"],
        &["ZADD", "seedzset", "1", "a", "2", "b", "3", "c"],
    ] {
        let reply = c.cmd(cmd);
        assert!(!reply.starts_with(b"-"), "{cmd:?}: {reply:?}");
    }
}

/// A RESTORE payload (as Redis's DUMP writes it) that is valid UTF-8, so it fits the
/// harness's text commands: the value `setup` makes from a counter is varied until the
/// payload's checksum happens to be.
fn text_payload(redis: &Server, setup: impl Fn(&mut Raw, &str)) -> String {
    let mut c = redis.raw();
    for i in 0..20_000 {
        c.cmd(&["DEL", "payload:tmp"]);
        setup(&mut c, &format!("v{i}"));
        let reply = c.cmd(&["DUMP", "payload:tmp"]);
        let body_at = reply.iter().position(|&b| b == b'\n').expect("bulk") + 1;
        let body = &reply[body_at..reply.len() - 2];
        if let Ok(text) = std::str::from_utf8(body) {
            c.cmd(&["DEL", "payload:tmp"]);
            return text.to_string();
        }
    }
    panic!("no DUMP payload that is valid UTF-8");
}

/// A string value's and a hash's payloads.
fn payloads(redis: &Server) -> (String, String) {
    let string = text_payload(redis, |c, v| {
        c.cmd(&["SET", "payload:tmp", v]);
    });
    // A long value makes it a hash table (a listpack's encoding is never UTF-8), one that
    // does not repeat itself so that it is stored as it is, not compressed.
    let hash = text_payload(redis, |c, v| {
        let long = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-*/<>";
        c.cmd(&["HSET", "payload:tmp", "f", &format!("{v}{long}")]);
    });
    (string, hash)
}

fn assert_none(found: Vec<String>, what: &str) {
    assert!(
        found.is_empty(),
        "{what}: {} difference(s)\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The targeted cases: every command of these families, its events and its misses, with the
/// second key on the same shard and on another one.
fn targeted_script(threads: usize, payload: &str, hash_payload: &str) -> Vec<Vec<String>> {
    let o = elsewhere("a", "o", threads);
    let o2 = elsewhere("a", "p", threads);
    let (o, o2) = (o.as_str(), o2.as_str());
    let mut s: Vec<Vec<String>> = Vec::new();
    let mut add = |lines: &[&[&str]]| s.extend(lines.iter().map(|l| c(l)));
    // SET and its options.
    add(&[
        &["COPY", "seedhash", "h"],
        &["SET", "a", "v"],
        &["SET", "a", "v2"],
        &["SET", "a", "v", "NX"],
        &["SET", "a", "v3", "XX"],
        &["SET", "nx1", "v", "XX"],
        &["SET", "nx2", "v", "NX"],
        &["SET", "a", "v", "GET"],
        &["SET", "missing1", "v", "GET"],
        &["SET", "h", "v", "GET"],
        &["SET", "h", "v", "GET", "EX", "abc"],
        &["SET", "a", "v", "EX", "100"],
        &["SET", "a", "v", "PX", "100000"],
        &["SET", "a", "v", "KEEPTTL"],
        &["SET", "a", "v", "EXAT", FUTURE_S],
        &["SET", "a", "v", "PXAT", FUTURE_MS, "GET"],
        &["SET", "a", "v", "EX", "100", "NX"],
        &["SET", "a", "v", "EX", "0"],
        &["SET", "a", "v", "EX", "x"],
        &["SET", "past", "v", "EXAT", "1"],
        &["GET", "past"],
        &["SET", "past", "v", "PXAT", "1", "GET"],
        &["SET", "past", "v2", "GET"],
        &["SETNX", "a", "v"],
        &["SETNX", "b", "v"],
        &["SETEX", "c", "100", "v"],
        &["PSETEX", "c", "100000", "v"],
        &["SETEX", "c", "0", "v"],
        &["SETEX", "h", "10", "v"],
        &["GETSET", "a", "x"],
        &["GETSET", "missing2", "x"],
        &["GETSET", "h", "x"],
    ]);
    // GETDEL, GETEX, reads.
    add(&[
        &["GETDEL", "missing2"],
        &["GETDEL", "missing2"],
        &["GETDEL", "h"],
        &["GETEX", "missing3"],
        &["GETEX", "a"],
        &["GETEX", "a", "EX", "100"],
        &["GETEX", "a", "PERSIST"],
        &["GETEX", "a", "PERSIST"],
        &["GETEX", "a", "PX", "100000"],
        &["GETEX", "a", "EXAT", FUTURE_S],
        &["GETEX", "a", "PXAT", FUTURE_MS],
        &["GETEX", "a", "EX", "abc"],
        &["GETEX", "h", "EX", "10"],
        &["GETEX", "missing3", "PERSIST"],
        &["GETEX", "a", "EXAT", "1"],
        &["GETEX", "a"],
        &["SET", "a", "v"],
        &["GETEX", "a", "PXAT", "1"],
        &["GET", "missing4"],
        &["GET", "h"],
        &["SET", "a", "v"],
        &["MGET", "a", "missing4", "h", o],
        &["GETRANGE", "missing4", "0", "-1"],
        &["GETRANGE", "missing4", "-1", "-5"],
        &["GETRANGE", "h", "-1", "-5"],
        &["SUBSTR", "a", "0", "1"],
        &["STRLEN", "missing4"],
        &["STRLEN", "a"],
    ]);
    // MSET, MSETNX, APPEND, SETRANGE, the INCR family.
    add(&[
        &["MSET", "a", "1", o, "2", "{a}s", "3"],
        &["MSET", "a", "1", "a", "2"],
        &["MSET", "a"],
        &["MSETNX", "a", "1", "new1", "2"],
        &["MSETNX", "new1", "1", o2, "2"],
        &["MSETNX", "new1", "1", "{new1}x", "2"],
        &["APPEND", "a", "x"],
        &["APPEND", "newa", "x"],
        &["APPEND", "h", "x"],
        &["SETRANGE", "a", "2", "xy"],
        &["SETRANGE", "newsr", "3", "z"],
        &["SETRANGE", "missing5", "0", ""],
        &["SETRANGE", "a", "0", ""],
        &["SETRANGE", "h", "0", "x"],
        &["SETRANGE", "a", "-1", "x"],
        &["INCR", "i"],
        &["INCR", "i"],
        &["DECR", "i"],
        &["INCRBY", "i", "5"],
        &["DECRBY", "i", "3"],
        &["DECR", "newd"],
        &["INCRBY", "i", "x"],
        &["INCR", "a"],
        &["INCR", "h"],
        &["SET", "big", "9223372036854775807"],
        &["INCR", "big"],
        &["INCRBYFLOAT", "f", "1.5"],
        &["INCRBYFLOAT", "f", "2"],
        &["INCRBYFLOAT", "f", "x"],
        &["INCRBYFLOAT", "a", "1"],
        &["INCRBYFLOAT", "h", "1"],
    ]);
    // Bitmaps.
    add(&[
        &["SETBIT", "bm", "7", "1"],
        &["SETBIT", "bm", "7", "1"],
        &["SETBIT", "bm", "7", "0"],
        &["SETBIT", "bm", "6", "0"],
        &["SETBIT", "bm", "100", "0"],
        &["SETBIT", "bm2", "0", "0"],
        &["SETBIT", "h", "1", "1"],
        &["SETBIT", "bm", "1", "2"],
        &["GETBIT", "missing6", "1"],
        &["BITCOUNT", "missing6"],
        &["BITPOS", "missing6", "1"],
        &["BITFIELD", "bf", "SET", "u8", "0", "255"],
        &["BITFIELD", "bf", "SET", "u8", "0", "255"],
        &["BITFIELD", "bf", "INCRBY", "u8", "0", "0"],
        &[
            "BITFIELD", "bf", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "10",
        ],
        &[
            "BITFIELD", "bf", "OVERFLOW", "WRAP", "INCRBY", "u8", "0", "1",
        ],
        &[
            "BITFIELD", "bf2", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "300",
        ],
        &["BITFIELD", "bf", "INCRBY", "u8", "100", "0"],
        &["BITFIELD", "bf", "GET", "u8", "0"],
        &["BITFIELD", "missing6", "GET", "u8", "0"],
        &["BITFIELD", "missing6"],
        &["BITFIELD_RO", "missing6", "GET", "u8", "0"],
        &["BITFIELD", "h", "SET", "u8", "0", "1"],
        &["BITFIELD", "bf", "SET", "i8", "0", "-1", "GET", "u4", "0"],
        &["BITOP", "AND", "dst", "bm", "missing6"],
        &["BITOP", "OR", "dst", "missing6", "missing7"],
        &["BITOP", "OR", "dst", "missing6", "missing7"],
        &["BITOP", "NOT", "dst", "bm"],
        &["BITOP", "XOR", o, "bm", "bf", "missing6"],
        &["BITOP", "AND", o, "missing6"],
        &["BITOP", "AND", "dst", "h"],
        &["BITOP", "AND", "dst", "missing6", "h"],
        &["BITOP", "NOT", "dst", "bm", "bf"],
    ]);
    // HyperLogLogs.
    add(&[
        &["PFADD", "hll"],
        &["PFADD", "hll"],
        &["PFADD", "hll", "a", "b"],
        &["PFADD", "hll", "a"],
        &["PFADD", "hll2", "x"],
        &["PFADD", "a", "x"],
        &["PFADD", "h", "x"],
        &["PFCOUNT", "hll"],
        &["PFCOUNT", "missing8"],
        &["PFCOUNT", "hll", "missing8", o],
        &["PFCOUNT", "hll", "hll2"],
        &["PFMERGE", "hlld", "hll", "missing8"],
        &["PFMERGE", "hlld"],
        &["PFMERGE", "hlld2"],
        &["PFMERGE", o2, "hll", "hll2"],
        &["PFMERGE", "hll", "a"],
        &["DEL", o2],
    ]);
    // DEL, EXISTS, TYPE, the EXPIRE family, PERSIST, TTL reads.
    add(&[
        &["DEL", "a", "missing9", o],
        &["SET", "a", "v"],
        &["SET", o, "v"],
        &["UNLINK", "a", o, "{a}s", "missing9"],
        &["EXISTS", "a", "missing9", o, "b", "b"],
        &["TOUCH", "b", "missing9", o],
        &["TYPE", "missing9"],
        &["TYPE", "b"],
        &["TYPE", "h"],
        &["SET", "a", "v"],
        &["EXPIRE", "a", "100"],
        &["EXPIRE", "a", "100", "NX"],
        &["EXPIRE", "a", "200", "XX"],
        &["EXPIRE", "a", "50", "GT"],
        &["EXPIRE", "a", "300", "GT"],
        &["EXPIRE", "a", "10", "LT"],
        &["EXPIRE", "a", "10", "NX", "XX"],
        &["EXPIRE", "a", "x"],
        &["PEXPIRE", "a", "100000"],
        &["EXPIREAT", "a", FUTURE_S],
        &["PEXPIREAT", "a", FUTURE_MS],
        &["PEXPIRETIME", "a"],
        &["EXPIRETIME", "a"],
        &["EXPIRE", "missing9", "10"],
        &["PERSIST", "a"],
        &["PERSIST", "a"],
        &["PERSIST", "missing9"],
        &["TTL", "a"],
        &["PTTL", "missing9"],
        &["TTL", "missing9"],
        &["EXPIRETIME", "missing9"],
        &["PEXPIRETIME", "missing9"],
        &["EXPIRE", "a", "-1"],
        &["SET", "a", "v"],
        &["PEXPIREAT", "a", "1"],
        &["SET", "a", "v"],
        &["EXPIREAT", "a", "1", "XX"],
        &["EXPIREAT", "a", "1", "LT"],
        &["EXPIREAT", "a", "1"],
        &["EXPIREAT", "a", "1"],
    ]);
    // RENAME, RENAMENX, COPY, MOVE, on one shard and across shards.
    add(&[
        &["SET", "a", "1"],
        &["RENAME", "a", "{a}s"],
        &["SET", "a", "2"],
        &["RENAME", "a", "{a}s"],
        &["RENAME", "{a}s", "{a}s"],
        &["RENAME", "missing10", "x"],
        &["RENAME", "{a}s", o],
        &["SET", "a", "3", "EX", "100"],
        &["RENAME", "a", o],
        &["RENAME", o, "a"],
        &["RENAMENX", "a", "a"],
        &["RENAMENX", "missing10", "a"],
        &["SET", "{a}s", "x"],
        &["RENAMENX", "a", "{a}s"],
        &["RENAMENX", "a", o2],
        &["RENAMENX", o2, "a"],
        &["SET", o, "y"],
        &["RENAMENX", "a", o],
        &["COPY", "a", "{a}c"],
        &["COPY", "a", "{a}c"],
        &["COPY", "a", "{a}c", "REPLACE"],
        &["COPY", "a", o2],
        &["COPY", "a", o2],
        &["COPY", "a", o2, "REPLACE"],
        &["COPY", "missing10", o2],
        &["COPY", "missing10", "{missing10}x", "REPLACE"],
        &["COPY", "missing10", o2, "REPLACE"],
        &["COPY", "a", "a"],
        &["COPY", "a", "a", "DB", "1"],
        &["COPY", "a", "a", "DB", "1"],
        &["COPY", "a", "a", "DB", "1", "REPLACE"],
        &["COPY", "a", o, "DB", "1"],
        &["COPY", "a", "b", "DB", "x"],
        &["COPY", "a", "b", "BOGUS"],
        &["MOVE", "a", "1"],
        &["MOVE", "{a}c", "1"],
        &["MOVE", "missing10", "1"],
        &["MOVE", "{a}c", "0"],
        &["MOVE", "{a}c", "99"],
        &["SELECT", "1"],
        &["MOVE", "a", "0"],
        &["GET", "missing10"],
        &["RENAME", o, "a"],
        &["SELECT", "0"],
        &["COPY", "seedlist", "l"],
    ]);
    // RESTORE.
    add(&[
        &["RESTORE", "r", "0", payload],
        &["RESTORE", "r", "0", payload],
        &["RESTORE", "r", "0", payload, "REPLACE"],
        &["RESTORE", "r", "100000", payload, "REPLACE"],
        &["RESTORE", "r", "1", payload, "REPLACE", "ABSTTL"],
        &["RESTORE", "r", "1", payload, "ABSTTL"],
        &["RESTORE", "r", "0", "bad payload"],
        &["RESTORE", "r", "-1", payload],
        &["RESTORE", "rh", "0", hash_payload],
        &[
            "RESTORE",
            "rh",
            FUTURE_MS,
            hash_payload,
            "REPLACE",
            "ABSTTL",
        ],
        &["TYPE", "rh"],
    ]);
    // SORT ... STORE.
    add(&[
        &["SORT", "l", "STORE", "sd"],
        &["SORT", "l", "STORE", "sd"],
        &["SORT", "l", "DESC", "LIMIT", "0", "2", "STORE", o],
        &["SORT", "missing11", "STORE", "sd"],
        &["SORT", "missing11", "STORE", "sd"],
        &["SORT", "missing11", "STORE", o],
        &["SET", "w_3", "1"],
        &["SET", "w_1", "2"],
        &["SORT", "l", "BY", "w_*", "GET", "w_*", "GET", "#"],
        &["SORT", "l", "BY", "w_*", "GET", "w_*", "STORE", "sd"],
        &["SORT", "l", "BY", "nosort", "GET", "w_*"],
        &["SORT", "l", "LIMIT", "10", "5", "STORE", "sd"],
        &["SORT_RO", "missing11"],
        &["SORT_RO", "l", "GET", "w_*"],
        &["SORT", "seedset", "STORE", "sd2"],
        &["SORT", "seedzset", "BY", "nosort", "ALPHA", "STORE", "sd2"],
        &["SORT", "h", "STORE", "sd"],
        &["SORT", "a", "STORE", "sd"],
        &["SORT", "l", "STORE"],
    ]);
    // Keys past their deadline, reached by each kind of command.
    let live = elsewhere("e3", "q", threads);
    let far = elsewhere("h", "u", threads);
    let expiring: &[&str] = &["e1", "e2", "e3", "e4", "e5", "e6", o, o2, "{e1}s", &far];
    let expire_all = |s: &mut Vec<Vec<String>>| {
        for k in expiring {
            s.push(c(&["SET", k, "1", "PX", "10"]));
        }
        s.push(c(&["DEBUG", "SLEEP", "0.05"]));
    };
    expire_all(&mut s);
    s.extend(
        [
            &["GET", "e1"][..],
            &["MSET", "e2", "x", o, "y"],
            &["MSETNX", "e3", "x", o2, "y"],
            &["DEL", "e4", "{e1}s"],
            &["EXISTS", "e5"],
            &["APPEND", "e6", "x"],
        ]
        .iter()
        .map(|l| c(l)),
    );
    expire_all(&mut s);
    s.extend(
        [
            &["SET", "e1", "v", "GET"][..],
            &["RENAME", "e2", "x"],
            &["SET", "x", "1"],
            &["RENAME", "x", "e3"],
            &["SET", "x", "1"],
            &["RENAMENX", "x", o],
            &["COPY", "x", "e4"],
            &["COPY", "e5", "x"],
            &["BITOP", "AND", "e6", "missing12"],
            &["PFCOUNT", "{e1}s", o2],
        ]
        .iter()
        .map(|l| c(l)),
    );
    expire_all(&mut s);
    s.extend(
        [
            &["INCR", "e1"][..],
            // MSETNX looks its keys up in order and stops at the first that exists.
            &["SET", &live, "v"],
            &["MSETNX", "e3", "x", &live, "y", o2, "z"],
            &["MSETNX", &live, "y", "e3", "x"],
            &["SETBIT", "e2", "1", "1"],
            &["PFADD", "e3", "x"],
            // PFCOUNT stops at the hash: the key after it stays, past its deadline.
            &["PFCOUNT", "h", &far],
            &["TYPE", &far],
            &["PFMERGE", "e4", o],
            &["SORT", "missing12", "STORE", "e5"],
            &["SORT", "l", "STORE", "e6"],
            &["RESTORE", "{e1}s", "0", payload, "REPLACE"],
            &["TYPE", o2],
            &["EXPIRE", "x", "1", "GT"],
        ]
        .iter()
        .map(|l| c(l)),
    );
    s
}

fn targeted(backend: Backend, threads: usize) {
    let (redis, ours) = servers(backend, threads);
    let (payload, hash_payload) = payloads(&redis);
    let script = targeted_script(threads, &payload, &hash_payload);
    for flags in ["KEAmn", "KEA", "Kgx$"] {
        for server in [&redis, &ours] {
            reseed(server);
        }
        let found = differences(&redis, &ours, threads, flags, &script);
        assert_none(found, flags);
    }
}

/// Picks arguments for the random stream.
struct Gen {
    rng: StdRng,
    /// How many plain key names: enough for every shard of 3 or 4.
    keys: usize,
    payload: String,
    hash_payload: String,
    /// The stream's connection is in database 1.
    in_db1: bool,
}

impl Gen {
    fn one<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options.choose(&mut self.rng).copied().unwrap_or("")
    }

    fn chance(&mut self, n: u32) -> bool {
        self.rng.gen_ratio(1, n)
    }

    /// A key: plain names on every shard, a hash-tagged group on one, a rarely used one.
    fn key(&mut self) -> String {
        match self.rng.gen_range(0..20) {
            0 => "nosuch".into(),
            1..=4 => format!("{{t}}{}", self.rng.gen_range(0..3)),
            _ => format!("k{}", self.rng.gen_range(0..self.keys)),
        }
    }

    fn keys(&mut self, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.key())
            .collect()
    }

    fn value(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0 => self.rng.gen_range(-5..100).to_string(),
            1 => "1.5".into(),
            2 => String::new(),
            _ => format!("v{}", self.rng.gen_range(0..50)),
        }
    }

    /// A TTL that never runs out during the stream, or one in the past.
    fn lasting_or_past(&mut self) -> (String, String) {
        match self.rng.gen_range(0..10) {
            0 => ("EXAT".into(), "1".into()),
            1 => ("PXAT".into(), "1".into()),
            2 => ("EXAT".into(), FUTURE_S.into()),
            3 => ("PXAT".into(), FUTURE_MS.into()),
            4..=6 => ("EX".into(), self.rng.gen_range(100..100_000).to_string()),
            _ => (
                "PX".into(),
                self.rng.gen_range(100_000..10_000_000).to_string(),
            ),
        }
    }

    /// One step of the stream: a command, or a few that belong together (a short TTL and
    /// the sleep that lets it run out).
    fn step(&mut self) -> Vec<Vec<String>> {
        let k = self.key();
        let mut out = Vec::new();
        let cmd = match self.rng.gen_range(0..118) {
            0..=9 => {
                let mut cmd = c(&["SET", &k, &self.value()]);
                if self.chance(3) {
                    cmd.push(self.one(&["NX", "XX"]).into());
                }
                if self.chance(3) {
                    cmd.push("GET".into());
                }
                match self.rng.gen_range(0..6) {
                    0 | 1 => {
                        let (unit, t) = self.lasting_or_past();
                        cmd.extend([unit, t]);
                    }
                    2 => cmd.push("KEEPTTL".into()),
                    3 if self.chance(10) => cmd.extend(["EX".into(), "0".into()]),
                    _ => {}
                }
                cmd
            }
            10 => c(&["SETNX", &k, &self.value()]),
            11 => {
                let t = self.rng.gen_range(100..100_000).to_string();
                c(&["SETEX", &k, &t, &self.value()])
            }
            12 => {
                let t = self.rng.gen_range(100_000..1_000_000).to_string();
                c(&["PSETEX", &k, &t, &self.value()])
            }
            13..=14 => c(&["GETSET", &k, &self.value()]),
            15..=16 => c(&["GETDEL", &k]),
            17..=19 => {
                let mut cmd = c(&["GETEX", &k]);
                match self.rng.gen_range(0..5) {
                    0 => cmd.push("PERSIST".into()),
                    1 | 2 => {
                        let (unit, t) = self.lasting_or_past();
                        cmd.extend([unit, t]);
                    }
                    _ => {}
                }
                cmd
            }
            20..=23 => c(&["GET", &k]),
            24..=25 => {
                let mut cmd = c(&["MGET"]);
                cmd.extend(self.keys(4));
                cmd
            }
            26..=28 => {
                let name = self.one(&["MSET", "MSET", "MSETNX"]);
                let mut cmd = c(&[name]);
                for key in self.keys(3) {
                    cmd.push(key);
                    cmd.push(self.value());
                }
                cmd
            }
            29..=30 => c(&["APPEND", &k, self.one(&["x", "", "yz"])]),
            31..=32 => {
                let offset = self.one(&["0", "1", "3", "-1"]);
                c(&["SETRANGE", &k, offset, self.one(&["ab", "", "z"])])
            }
            33 => c(&[
                "GETRANGE",
                &k,
                self.one(&["0", "-1", "-3"]),
                self.one(&["-1", "-5", "2"]),
            ]),
            34 => c(&["STRLEN", &k]),
            35..=38 => match self.rng.gen_range(0..5) {
                0 => c(&["INCR", &k]),
                1 => c(&["DECR", &k]),
                2 => c(&["INCRBY", &k, self.one(&["5", "-3", "0", "x"])]),
                3 => c(&["DECRBY", &k, self.one(&["2", "-7"])]),
                _ => c(&[
                    "INCRBYFLOAT",
                    &k,
                    self.one(&["1.5", "-2", "0", "x", "1e400"]),
                ]),
            },
            39..=42 => {
                let offset = self.rng.gen_range(0..40).to_string();
                c(&["SETBIT", &k, &offset, self.one(&["0", "1", "1", "2"])])
            }
            43 => c(&["GETBIT", &k, &self.rng.gen_range(0..40).to_string()]),
            44 => c(&["BITCOUNT", &k]),
            45 => c(&["BITPOS", &k, self.one(&["0", "1"])]),
            46..=47 => {
                let op = self.one(&["AND", "OR", "XOR", "NOT"]);
                let mut cmd = c(&["BITOP", op, &k]);
                if op == "NOT" {
                    cmd.push(self.key());
                } else {
                    cmd.extend(self.keys(3));
                }
                cmd
            }
            48..=50 => {
                let ro = self.chance(5);
                let mut cmd = c(&[if ro { "BITFIELD_RO" } else { "BITFIELD" }, &k]);
                for _ in 0..self.rng.gen_range(0..3) {
                    let ty = self.one(&["u8", "i8", "u4", "i16"]);
                    let at = self.rng.gen_range(0..32).to_string();
                    match self.rng.gen_range(0..4) {
                        0 => cmd.extend(c(&["GET", ty, &at])),
                        1 => cmd.extend(c(&["SET", ty, &at, self.one(&["0", "7", "-1", "300"])])),
                        2 => cmd.extend(c(&["INCRBY", ty, &at, self.one(&["0", "1", "200"])])),
                        _ => cmd.extend(c(&["OVERFLOW", self.one(&["WRAP", "SAT", "FAIL"])])),
                    }
                }
                cmd
            }
            51..=53 => {
                let mut cmd = c(&["PFADD", &k]);
                for _ in 0..self.rng.gen_range(0..3) {
                    cmd.push(format!("e{}", self.rng.gen_range(0..20)));
                }
                cmd
            }
            54..=55 => {
                let mut cmd = c(&["PFCOUNT"]);
                cmd.extend(self.keys(3));
                cmd
            }
            56..=57 => {
                let mut cmd = c(&["PFMERGE", &k]);
                cmd.extend(self.keys(2));
                cmd
            }
            58..=60 => {
                let mut cmd = c(&[self.one(&["DEL", "DEL", "UNLINK"])]);
                cmd.extend(self.keys(3));
                cmd
            }
            61..=62 => {
                let mut cmd = c(&[self.one(&["EXISTS", "TOUCH"])]);
                cmd.extend(self.keys(3));
                cmd
            }
            63 => c(&["TYPE", &k]),
            64..=69 => {
                let name = self.one(&["EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT"]);
                // Relative times now or past delete the key; absolute ones past it too (1 is
                // no short TTL there, which would run out while the stream goes on).
                let when = match (name, self.rng.gen_range(0..4)) {
                    ("EXPIRE" | "PEXPIRE", 0) => self.one(&["-1", "0"]).to_string(),
                    (_, 0) => self.one(&["-1", "0", "1"]).to_string(),
                    ("EXPIRE", _) => self.rng.gen_range(100..100_000).to_string(),
                    ("PEXPIRE", _) => self.rng.gen_range(100_000..10_000_000).to_string(),
                    ("EXPIREAT", _) => FUTURE_S.to_string(),
                    _ => FUTURE_MS.to_string(),
                };
                let mut cmd = c(&[name, &k, &when]);
                if self.chance(2) {
                    cmd.push(self.one(&["NX", "XX", "GT", "LT"]).into());
                }
                cmd
            }
            70..=71 => c(&["PERSIST", &k]),
            72..=76 => {
                let name = self.one(&["RENAME", "RENAME", "RENAMENX"]);
                c(&[name, &k, &self.key()])
            }
            77..=80 => {
                let mut cmd = c(&["COPY", &k, &self.key()]);
                if self.chance(2) {
                    cmd.push("REPLACE".into());
                }
                if self.chance(5) {
                    cmd.extend(c(&["DB", if self.in_db1 { "0" } else { "1" }]));
                }
                cmd
            }
            81 => c(&["MOVE", &k, if self.in_db1 { "0" } else { "1" }]),
            82..=84 => {
                // Other types, for WRONGTYPE and for SORT to sort.
                let seed = self.one(&["seedhash", "seedlist", "seedlist"]);
                c(&[
                    "COPY",
                    seed,
                    &k,
                    "DB",
                    if self.in_db1 { "1" } else { "0" },
                    "REPLACE",
                ])
            }
            85..=87 => {
                // A TTL of none, a lasting one, or (absolute) one in the past.
                let (ttl, absttl) = match self.rng.gen_range(0..5) {
                    0 | 1 => ("0", self.chance(3)),
                    2 => ("100000", false),
                    3 => ("1", true),
                    _ => (FUTURE_MS, self.chance(2)),
                };
                let payload = if self.chance(3) {
                    self.hash_payload.clone()
                } else {
                    self.payload.clone()
                };
                let mut cmd = c(&["RESTORE", &k, ttl, &payload]);
                if self.chance(2) {
                    cmd.push("REPLACE".into());
                }
                if absttl {
                    cmd.push("ABSTTL".into());
                }
                cmd
            }
            88..=93 => {
                // Lists only are sorted BY other keys: Redis reads a set's or sorted set's
                // BY keys in its hash order, so its misses would come in another order.
                let source = if self.chance(4) {
                    self.one(&["seedset", "seedzset", "seedlist"]).to_string()
                } else {
                    k.clone()
                };
                let ro = self.chance(5);
                let mut cmd = c(&[if ro { "SORT_RO" } else { "SORT" }, &source]);
                if !source.starts_with("seeds") && !source.starts_with("seedz") {
                    match self.rng.gen_range(0..4) {
                        0 => cmd.extend(c(&["BY", "w_*"])),
                        1 => cmd.extend(c(&["BY", "nosort"])),
                        _ => {}
                    }
                    if self.chance(3) {
                        cmd.extend(c(&["GET", self.one(&["w_*", "#"])]));
                    }
                } else if self.chance(3) {
                    cmd.push("ALPHA".into());
                }
                if self.chance(4) {
                    cmd.push("DESC".into());
                }
                if self.chance(4) {
                    cmd.extend(c(&[
                        "LIMIT",
                        self.one(&["0", "1", "5"]),
                        self.one(&["2", "-1"]),
                    ]));
                }
                if !ro && self.chance(2) {
                    cmd.extend(c(&["STORE", &self.key()]));
                }
                cmd
            }
            94..=96 => {
                let w = format!("w_{}", self.rng.gen_range(0..13));
                if self.chance(5) {
                    c(&["DEL", &w])
                } else {
                    c(&["SET", &w, &self.rng.gen_range(-3..20).to_string()])
                }
            }
            97..=100 => {
                // Short TTLs, then the sleep that lets them run out before anything reads
                // them (each key once: a second command could find it expired on one
                // server only).
                let mut keys = self.keys(3);
                keys.sort();
                keys.dedup();
                for key in keys {
                    let t = self.rng.gen_range(1..30).to_string();
                    out.push(match self.rng.gen_range(0..5) {
                        0 => c(&["PSETEX", &key, &t, "x"]),
                        1 => c(&["PEXPIRE", &key, &t]),
                        2 => c(&["GETEX", &key, "PX", &t]),
                        3 => c(&["RESTORE", &key, &t, &self.payload, "REPLACE"]),
                        _ => c(&["SET", &key, "x", "PX", &t]),
                    });
                }
                c(&["DEBUG", "SLEEP", "0.05"])
            }
            101 => {
                self.in_db1 = !self.in_db1;
                c(&["SELECT", if self.in_db1 { "1" } else { "0" }])
            }
            102..=105 => c(&["SET", &k, &self.value()]),
            106..=109 => c(&["GET", &k]),
            110..=113 => {
                let mut cmd = c(&["DEL"]);
                cmd.extend(self.keys(2));
                cmd
            }
            _ => c(&["EXISTS", &k]),
        };
        out.push(cmd);
        out
    }

    fn stream(&mut self, len: usize) -> Vec<Vec<String>> {
        self.in_db1 = false;
        let mut cmds = Vec::with_capacity(len + 8);
        while cmds.len() < len {
            cmds.extend(self.step());
        }
        cmds
    }
}

fn random_stream(backend: Backend, threads: usize) {
    let (redis, ours) = servers(backend, threads);
    let (payload, hash_payload) = payloads(&redis);
    let mut gen = Gen {
        rng: StdRng::seed_from_u64(0x4e07 + threads as u64),
        keys: if threads <= 2 { 8 } else { 14 },
        payload,
        hash_payload,
        in_db1: false,
    };
    let streams: Vec<(&str, Vec<Vec<String>>)> = ["KEA", "KEAmn"]
        .into_iter()
        .map(|flags| (flags, gen.stream(stream_len())))
        .collect();
    // `NOTIFY_DUMP=<dir>` writes the streams there, numbered as the differences name them.
    if let Ok(dir) = std::env::var("NOTIFY_DUMP") {
        for (flags, cmds) in &streams {
            let text: Vec<String> = cmds
                .iter()
                .enumerate()
                .map(|(i, c)| format!("#{i} {c:?}"))
                .collect();
            std::fs::write(
                format!("{dir}/stream-{threads}-{flags}.txt"),
                text.join("\n"),
            )
            .unwrap();
        }
    }
    for (flags, cmds) in &streams {
        let found = differences(&redis, &ours, threads, flags, cmds);
        assert_none(found, flags);
    }
    if let Some(difference) = state_difference(&mut redis.raw(), &mut ours.raw()) {
        panic!("final state differs: {difference}");
    }
    let shards: std::collections::BTreeSet<usize> = (0..gen.keys)
        .map(|i| shard_for_key(format!("k{i}").as_bytes(), threads))
        .collect();
    assert_eq!(shards.len(), threads, "the stream's keys miss a shard");
}

thread_count_tests!(targeted, random_stream);
