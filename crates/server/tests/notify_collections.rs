//! Keyspace notifications of the hash, set and sorted-set commands against Debian's
//! redis-server 7.0 (crates/server/tests/common/notify.rs compares each command's reply and
//! events): targeted cases for every writing command of the three families (and the `keymiss`
//! of their reads), then a seeded random stream with wrong types, missing keys, keys on every
//! shard and collections emptied by removals and pops, under `KEA` and `KEAmn` (which adds
//! `new` and `keymiss`), on 2, 3 and 4 threads.

mod common;

use std::collections::BTreeSet;

use common::diff::Check;
use common::notify::differences_checked;
use common::{Backend, Server};
use damselfly_storage::shard_for_key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Commands in the random stream, per flag setting.
const STREAM: usize = 1_500;

const FLAG_SETS: [&str; 2] = ["KEA", "KEAmn"];

fn words(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn exact(parts: &[&str]) -> (Vec<String>, Check) {
    (words(parts), Check::Exact)
}

/// Runs `cmds` on a fresh pair of servers under each flag setting and fails on any
/// difference. Before notifications are on, a string key `str` is set and `setup` runs.
fn assert_same_events(
    b: Backend,
    threads: usize,
    setup: &[&[&str]],
    cmds: &[(Vec<String>, Check)],
) {
    for flags in FLAG_SETS {
        let redis = Server::redis();
        let ours = Server::start_with(b, threads, &[]);
        for s in [&redis, &ours] {
            let mut c = s.raw();
            assert_eq!(c.cmd(&["SET", "str", "text"]), b"+OK\r\n");
            for line in setup {
                c.cmd(line);
            }
        }
        let found = differences_checked(&redis, &ours, threads, flags, cmds);
        assert!(
            found.is_empty(),
            "{threads} threads, flags {flags}: {} of {} commands differ:\n{}",
            found.len(),
            cmds.len(),
            found.join("\n")
        );
    }
}

/// A key named `prefix<n>` on another shard than `other` (for cross-shard cases).
fn elsewhere(prefix: &str, other: &str, threads: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| shard_for_key(k.as_bytes(), threads) != shard_for_key(other.as_bytes(), threads))
        .unwrap_or_default()
}

/// A key named `prefix<n>` on the same shard as `other`, not `other` itself.
fn beside(prefix: &str, other: &str, threads: usize) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .find(|k| {
            k != other
                && shard_for_key(k.as_bytes(), threads) == shard_for_key(other.as_bytes(), threads)
        })
        .unwrap_or_default()
}

/// Every writing command of the three families once per outcome: the event it names, `del`
/// when it empties (or, for a store command, empties or deletes) a key, `new` when it creates
/// one, nothing when it changes nothing; reads name `keymiss` for each missing key.
fn targeted(b: Backend, threads: usize) {
    // Store destinations and SMOVE targets beside and away from their sources.
    let near = beside("d", "src", threads);
    let far = elsewhere("d", "src", threads);
    let far2 = elsewhere("e", "src", threads);
    let (near, far, far2) = (near.as_str(), far.as_str(), far2.as_str());
    let mut c: Vec<(Vec<String>, Check)> = Vec::new();
    let mut add = |lines: &[&[&str]]| c.extend(lines.iter().map(|l| exact(l)));
    // Hashes.
    add(&[
        &["HSET", "h", "a", "1", "b", "2"],
        &["HSET", "h", "a", "1"],
        &["HMSET", "h", "c", "3"],
        &["HSET", "h", "a"],
        &["HSET", "str", "a", "1"],
        &["HSETNX", "h", "a", "9"],
        &["HSETNX", "h", "d", "4"],
        &["HSETNX", "h2", "a", "1"],
        &["HSETNX", "str", "a", "1"],
        &["HINCRBY", "h", "a", "5"],
        &["HINCRBY", "h", "n", "-2"],
        &["HINCRBY", "h3", "n", "1"],
        &["HINCRBY", "h", "a", "x"],
        &["HINCRBY", "h", "a", "9223372036854775807"],
        &["HSET", "h", "t", "text"],
        &["HINCRBY", "h", "t", "1"],
        &["HINCRBY", "str", "a", "1"],
        &["HINCRBYFLOAT", "h", "a", "1.5"],
        &["HINCRBYFLOAT", "h4", "f", "0.25"],
        &["HINCRBYFLOAT", "h", "t", "1"],
        &["HINCRBYFLOAT", "h", "a", "inf"],
        &["HINCRBYFLOAT", "str", "a", "1"],
        &["HDEL", "h", "nosuch"],
        &["HDEL", "h", "a", "b", "nosuch"],
        &["HDEL", "nosuch", "a"],
        &["HDEL", "str", "a"],
        &["HDEL", "h2", "a"],
        &["HDEL", "h", "c", "d", "n", "t"],
        &["HGET", "h", "a"],
        &["HMGET", "h", "a", "b"],
        &["HEXISTS", "h", "a"],
        &["HLEN", "h3"],
        &["HSTRLEN", "h3", "n"],
        &["HGETALL", "h"],
        &["HKEYS", "h"],
        &["HVALS", "h"],
        &["HRANDFIELD", "h"],
        &["HRANDFIELD", "h", "2", "WITHVALUES"],
        &["HSCAN", "h", "0"],
        &["HGET", "str", "a"],
        &["HLEN", "h3"],
    ]);
    // Sets.
    add(&[
        &["SADD", "src", "a", "b", "c", "1"],
        &["SADD", "src", "a"],
        &["SADD", "str", "a"],
        &["SREM", "src", "x"],
        &["SREM", "src", "1", "x"],
        &["SREM", "nosuch", "a"],
        &["SREM", "str", "a"],
        &["SADD", "one", "a"],
        &["SREM", "one", "a", "b"],
        &["SADD", "one", "a"],
        &["SPOP", "one"],
        &["SPOP", "one"],
        &["SPOP", "str"],
        &["SADD", "two", "5"],
        &["SPOP", "two", "0"],
        &["SPOP", "two", "1"],
        &["SPOP", "two", "1"],
        &["SADD", "two", "5", "6"],
        &["SPOP", "two", "5"],
        &["SPOP", "two", "5"],
        &["SPOP", "str", "0"],
        &["SPOP", "two", "-1"],
        // SMOVE beside and across shards: srem (then del), new, sadd.
        &["SMOVE", "src", near, "a"],
        &["SMOVE", "src", near, "a"],
        &["SMOVE", "src", far, "b"],
        &["SADD", far, "c"],
        &["SMOVE", "src", far, "c"],
        &["SMOVE", far, "src", "zz"],
        &["SMOVE", "src", "src", "a"],
        &["SMOVE", "nosuch", far, "a"],
        &["SMOVE", "str", far, "a"],
        &["SMOVE", far, "str", "b"],
        &["SMOVE", far, near, "b"],
        &["SMOVE", far, near, "c"],
        &["SADD", "src", "a", "b", "c", "d"],
        &["SADD", far2, "b", "c", "x"],
    ]);
    for name in ["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"] {
        for dst in [near, far] {
            add(&[
                // A result, over a missing and then an existing destination.
                &[name, dst, "src", far2],
                &[name, dst, "src", far2],
                // An empty result over an existing destination: del; then over none.
                &[name, dst, "nosuch", "nosuch2"],
                &[name, dst, "nosuch", "nosuch2"],
                // A destination of another type is replaced.
                &["HSET", dst, "f", "v"],
                &[name, dst, "src", far2],
                &["HSET", dst, "f", "v"],
                &[name, dst, "nosuch"],
                &[name, dst, "src", "str"],
                &[name, dst, "nosuch", "str"],
                &["SCARD", dst],
            ]);
        }
    }
    add(&[
        &["SINTERSTORE", far, "src", "src"],
        &["SDIFFSTORE", far, "src", "src"],
        &["SINTERSTORE", "src", "src", far2],
        &["SINTER", "src", "nosuch", far2, "nosuch2"],
        &["SINTER", "nosuch", "str"],
        &["SINTER", "nosuch", "src"],
        &["SDIFF", "nosuch", "src"],
        &["SINTERCARD", "3", "src", "nosuch", far2],
        &["SINTERCARD", "2", "nosuch", "str"],
        &["SINTERCARD", "2", "src", far2, "LIMIT", "1"],
        &["SISMEMBER", "nosuch", "a"],
        &["SMISMEMBER", "nosuch", "a", "b"],
        &["SMEMBERS", "nosuch"],
        &["SCARD", "nosuch"],
        &["SRANDMEMBER", "nosuch"],
        &["SRANDMEMBER", "nosuch", "3"],
        &["SSCAN", "nosuch", "0"],
        &["SSCAN", "nosuch", "0", "BOGUS"],
        &["SISMEMBER", "str", "a"],
    ]);
    c.extend(
        [
            &["SMEMBERS", "src"][..],
            &["SUNION", "src", far2],
            &["SDIFF", "src", far2],
            &["SUNION", "nosuch", "src", "nosuch2"],
        ]
        .iter()
        .map(|l| (words(l), Check::Unordered)),
    );
    let mut add = |lines: &[&[&str]]| c.extend(lines.iter().map(|l| exact(l)));
    // Sorted sets.
    add(&[
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZADD", "z", "1", "a"],
        &["ZADD", "z", "5", "a"],
        &["ZADD", "z", "NX", "9", "a"],
        &["ZADD", "z", "NX", "4", "d"],
        &["ZADD", "z", "XX", "7", "e"],
        &["ZADD", "z", "XX", "CH", "7", "d"],
        &["ZADD", "z", "GT", "1", "a"],
        &["ZADD", "z", "GT", "6", "a"],
        &["ZADD", "z", "LT", "8", "a"],
        &["ZADD", "z", "LT", "CH", "0", "a", "2", "b"],
        &["ZADD", "z", "INCR", "2", "a"],
        &["ZADD", "z", "INCR", "0", "a"],
        &["ZADD", "z", "XX", "INCR", "1", "nosuch"],
        &["ZADD", "z", "NX", "INCR", "1", "a"],
        &["ZADD", "z", "GT", "INCR", "-1", "a"],
        &["ZADD", "znew", "XX", "1", "a"],
        &["ZADD", "znew", "GT", "CH", "1", "a"],
        &["ZADD", "znew2", "INCR", "1", "a"],
        &["ZADD", "z", "NX", "XX", "1", "a"],
        &["ZADD", "z", "1"],
        &["ZADD", "z", "x", "a"],
        &["ZADD", "str", "1", "a"],
        &["ZADD", "z", "inf", "inf"],
        &["ZADD", "z", "INCR", "-inf", "inf"],
        &["ZINCRBY", "z", "2", "b"],
        &["ZINCRBY", "z", "2", "new"],
        &["ZINCRBY", "znew3", "2", "m"],
        &["ZINCRBY", "z", "x", "b"],
        &["ZINCRBY", "str", "1", "b"],
        &["ZINCRBY", "z", "-inf", "inf"],
        &["ZINCRBY", "z", "0", "b"],
        &["ZREM", "z", "nosuch"],
        &["ZREM", "z", "inf", "new", "nosuch"],
        &["ZREM", "nosuch", "a"],
        &["ZREM", "str", "a"],
        &["ZREM", "znew2", "a"],
        &["ZREMRANGEBYRANK", "z", "5", "9"],
        &["ZREMRANGEBYRANK", "z", "0", "0"],
        &["ZREMRANGEBYRANK", "z", "x", "0"],
        &["ZREMRANGEBYRANK", "nosuch", "0", "-1"],
        &["ZREMRANGEBYSCORE", "z", "(100", "+inf"],
        &["ZREMRANGEBYSCORE", "z", "-inf", "(3"],
        &["ZREMRANGEBYSCORE", "z", "x", "1"],
        &["ZREMRANGEBYSCORE", "str", "0", "1"],
        &["ZADD", "lx", "0", "a", "0", "b", "0", "c", "0", "d"],
        &["ZREMRANGEBYLEX", "lx", "(x", "+"],
        &["ZREMRANGEBYLEX", "lx", "-", "[a"],
        &["ZREMRANGEBYLEX", "lx", "x", "+"],
        &["ZREMRANGEBYLEX", "lx", "-", "+"],
        &["ZREMRANGEBYRANK", "z", "0", "-1"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d"],
        &["ZPOPMIN", "z"],
        &["ZPOPMAX", "z", "0"],
        &["ZPOPMAX", "z", "2"],
        &["ZPOPMIN", "nosuch"],
        &["ZPOPMIN", "str"],
        &["ZPOPMIN", "z", "-1"],
        &["ZPOPMAX", "z"],
        &["ZADD", "z", "1", "a", "2", "b"],
        &["ZPOPMIN", "z", "5"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZADD", far2, "1", "x"],
        &["ZMPOP", "2", "nosuch", "z", "MIN"],
        &["ZMPOP", "2", "z", far2, "MAX", "COUNT", "5"],
        &["ZMPOP", "2", "nosuch", far2, "MAX", "COUNT", "5"],
        &["ZMPOP", "2", "nosuch", far2, "MAX"],
        &["ZMPOP", "2", "nosuch", "str", "MIN"],
        &["ZMPOP", "1", "z", "UP"],
        &["ZADD", "z", "1", "a", "2", "b", "3", "c"],
        &["ZADD", far2, "1", "a", "5", "x"],
        &["SADD", "sset", "a", "q"],
    ]);
    for name in ["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"] {
        for dst in [near, far] {
            add(&[
                &[name, dst, "2", "z", far2],
                &[name, dst, "2", "z", far2],
                &[name, dst, "2", "nosuch", "nosuch2"],
                &[name, dst, "2", "nosuch", "nosuch2"],
                &["HSET", dst, "f", "v"],
                &[name, dst, "2", "z", "sset"],
                &["HSET", dst, "f", "v"],
                &[name, dst, "1", "nosuch"],
                &[name, dst, "2", "z", "str"],
                &[name, dst, "2", "nosuch", "str"],
                &[name, dst, "2", "nosuch", "z", "BOGUS"],
                &[name, dst, "0", "z"],
                &["ZCARD", dst],
            ]);
        }
    }
    add(&[
        &[
            "ZUNIONSTORE",
            far,
            "2",
            "z",
            far2,
            "WEIGHTS",
            "1",
            "2",
            "AGGREGATE",
            "MAX",
        ],
        &["ZINTERSTORE", far, "2", "z", far2, "WEIGHTS", "1", "x"],
        &["ZINTERSTORE", "z", "2", "z", "z"],
    ]);
    for dst in [near, far] {
        add(&[
            &["ZRANGESTORE", dst, "z", "0", "-1"],
            &["ZRANGESTORE", dst, "z", "0", "1"],
            &["ZRANGESTORE", dst, "z", "5", "9"],
            &["ZRANGESTORE", dst, "z", "5", "9"],
            &["HSET", dst, "f", "v"],
            &["ZRANGESTORE", dst, "nosuch", "0", "-1"],
            &["HSET", dst, "f", "v"],
            &[
                "ZRANGESTORE",
                dst,
                "z",
                "(1",
                "+inf",
                "BYSCORE",
                "LIMIT",
                "0",
                "1",
            ],
            &["ZRANGESTORE", dst, "z", "[z", "[a", "BYLEX", "REV"],
            &["ZRANGESTORE", dst, "z", "x", "1"],
            &["ZRANGESTORE", dst, "str", "0", "-1"],
            &["ZRANGESTORE", dst, "z", "0", "-1", "WITHSCORES"],
            &["ZCARD", dst],
        ]);
    }
    add(&[
        &["ZUNION", "3", "nosuch", "z", "nosuch2", "WITHSCORES"],
        &["ZINTER", "2", "z", "nosuch"],
        &["ZDIFF", "2", "nosuch", "z"],
        &["ZINTERCARD", "2", "nosuch", "z"],
        &["ZUNION", "2", "nosuch", "str"],
        &["ZUNION", "2", "nosuch", "z", "BOGUS"],
        &["ZCARD", "nosuch"],
        &["ZSCORE", "nosuch", "a"],
        &["ZMSCORE", "nosuch", "a"],
        &["ZRANK", "nosuch", "a"],
        &["ZREVRANK", "nosuch", "a"],
        &["ZCOUNT", "nosuch", "0", "1"],
        &["ZCOUNT", "nosuch", "x", "1"],
        &["ZLEXCOUNT", "nosuch", "-", "+"],
        &["ZRANGE", "nosuch", "0", "-1"],
        &["ZRANGE", "nosuch", "0", "-1", "BOGUS"],
        &["ZRANGEBYSCORE", "nosuch", "0", "1"],
        &["ZREVRANGEBYLEX", "nosuch", "+", "-"],
        &["ZRANDMEMBER", "nosuch"],
        &["ZRANDMEMBER", "nosuch", "2", "WITHSCORES"],
        &["ZSCAN", "nosuch", "0"],
        &["ZSCORE", "str", "a"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
    ]);
    // Commands on several keys must have crossed shards (else the cases above prove less).
    assert_ne!(
        shard_for_key(far.as_bytes(), threads),
        shard_for_key(b"src", threads)
    );
    assert_same_events(b, threads, &[], &c);
}

/// Store commands over keys past their deadline (active expiry off, so only lookups expire
/// them): a source or a destination that expired is announced (`expired`) before what the
/// command did with it, on its own shard or another; an empty result over a destination past
/// its deadline deletes it (`del`) unlooked-up, as Redis's dbDelete does, when it shares the
/// command's shard.
fn expired_keys(b: Backend, threads: usize) {
    let near = beside("d", "src", threads);
    let far = elsewhere("d", "src", threads);
    let gone = elsewhere("g", "src", threads);
    let (near, far, gone) = (near.as_str(), far.as_str(), gone.as_str());
    let setup: &[&[&str]] = &[
        &["DEBUG", "SET-ACTIVE-EXPIRE", "0"],
        &["SADD", "src", "a", "b"],
        &["ZADD", "zsrc", "1", "a"],
        &["SADD", near, "x"],
        &["SADD", far, "x"],
        &["SADD", gone, "x"],
        &["SADD", "{z}a", "x"],
        &["SADD", "{z}b", "x"],
        &["HSET", "h", "f", "1"],
        &["SADD", "s", "a"],
        &["ZADD", "z", "1", "a"],
        &["PEXPIRE", near, "50"],
        &["PEXPIRE", far, "50"],
        &["PEXPIRE", gone, "50"],
        &["PEXPIRE", "{z}a", "50"],
        &["PEXPIRE", "{z}b", "50"],
        &["PEXPIRE", "h", "50"],
        &["PEXPIRE", "s", "50"],
        &["PEXPIRE", "z", "50"],
    ];
    let c: Vec<(Vec<String>, Check)> = [
        &["DEBUG", "SLEEP", "0.1"][..],
        &["SUNIONSTORE", near, "src"],
        &["SUNIONSTORE", far, "src"],
        &["SUNIONSTORE", "d9", gone, "src"],
        &["SINTERSTORE", "{z}a", "{z}nosuch"],
        &["ZUNIONSTORE", "{z}b", "1", "{z}nosuch"],
        &["HSET", "h", "f", "2"],
        &["SADD", "s", "b"],
        &["ZADD", "z", "1", "b"],
    ]
    .iter()
    .map(|l| exact(l))
    .collect();
    assert_same_events(b, threads, setup, &c);
}

/// The random stream's generator.
struct Gen {
    rng: StdRng,
    /// Names per key prefix: enough for every shard of 4.
    keys: usize,
    /// A counter for members never used before (the pop sets' members).
    fresh: usize,
    /// Every key named, to check that they reached every shard.
    seen: BTreeSet<String>,
}

impl Gen {
    fn one<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options.choose(&mut self.rng).copied().unwrap_or("")
    }

    /// A key of `prefix` (untagged on any shard, or hash-tagged so multi-key commands also
    /// stay on one shard), sometimes another family's (WRONGTYPE), the string, or a missing one.
    fn key(&mut self, prefix: &str) -> String {
        let k = match self.rng.gen_range(0..24) {
            0 => "str".to_string(),
            1 => format!("nosuch{}", self.rng.gen_range(0..3)),
            2 => {
                let other = self.one(&["h", "s", "z"]);
                format!("{other}{}", self.rng.gen_range(0..self.keys))
            }
            3..=8 => format!("{{t}}{prefix}{}", self.rng.gen_range(0..3)),
            // Mostly a few names (so collections grow, shrink and empty), all of them at times.
            9..=13 => format!("{prefix}{}", self.rng.gen_range(0..self.keys)),
            _ => format!("{prefix}{}", self.rng.gen_range(0..4)),
        };
        self.seen.insert(k.clone());
        k
    }

    fn keys(&mut self, prefix: &str, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.key(prefix))
            .collect()
    }

    /// Few distinct members, so removals and pops empty collections often.
    fn member(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0..=2 => self.rng.gen_range(0..4).to_string(),
            _ => format!("m{}", self.rng.gen_range(0..4)),
        }
    }

    fn members(&mut self, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.member())
            .collect()
    }

    fn int(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => self
                .one(&["x", "9223372036854775807", "-9223372036854775808", "1.5"])
                .into(),
            _ => self.rng.gen_range(-3..6).to_string(),
        }
    }

    fn score(&mut self) -> String {
        match self.rng.gen_range(0..14) {
            0 => self.one(&["inf", "-inf", "x", "1.5", "nan"]).into(),
            _ => self.rng.gen_range(-3..6).to_string(),
        }
    }

    fn score_bound(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0 => self.one(&["-inf", "+inf", "x"]).into(),
            1..=2 => format!("({}", self.rng.gen_range(-3..6)),
            _ => self.rng.gen_range(-3..6).to_string(),
        }
    }

    fn lex_bound(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0 => self.one(&["-", "+", "x"]).into(),
            1..=4 => format!("[{}", self.member()),
            _ => format!("({}", self.member()),
        }
    }

    fn chance(&mut self, n: u32) -> bool {
        self.rng.gen_ratio(1, n)
    }

    fn command(&mut self) -> (Vec<String>, Check) {
        let exact = |c: Vec<String>| (c, Check::Exact);
        match self.rng.gen_range(0..3) {
            0 => self.hash_command(),
            1 => match self.rng.gen_range(0..6) {
                0 => self.pop_set_command(),
                _ => self.set_command(),
            },
            _ => match self.rng.gen_range(0..6) {
                0 => exact(self.lex_command()),
                _ => self.zset_command(),
            },
        }
    }

    fn hash_command(&mut self) -> (Vec<String>, Check) {
        let k = self.key("h");
        let f = self.member();
        let c = |parts: &[&str]| words(parts);
        let cmd = match self.rng.gen_range(0..40) {
            0..=5 => {
                let mut v = c(&[self.one(&["HSET", "HSET", "HMSET"]), &k]);
                for _ in 0..self.rng.gen_range(1..3) {
                    v.push(self.member());
                    v.push(self.member());
                }
                if self.chance(15) {
                    v.pop();
                }
                v
            }
            6..=7 => c(&["HSETNX", &k, &f, &self.member()]),
            8..=14 => {
                let mut v = c(&["HDEL", &k]);
                v.extend(self.members(3));
                v
            }
            15..=18 => c(&["HINCRBY", &k, &f, &self.int()]),
            19..=20 => c(&["HINCRBYFLOAT", &k, &f, &self.score()]),
            21..=22 => c(&["HGET", &k, &f]),
            23 => c(&["HMGET", &k, &f, &self.member()]),
            24 => c(&["HEXISTS", &k, &f]),
            25..=26 => c(&["HLEN", &k]),
            27 => c(&["HSTRLEN", &k, &f]),
            28 => return (c(&["HGETALL", &k]), Check::UnorderedPairs),
            29 => return (c(&[self.one(&["HKEYS", "HVALS"]), &k]), Check::Unordered),
            30 => return (c(&["HRANDFIELD", &k, &self.int()]), Check::Shape),
            31 => return (c(&["HSCAN", &k, "0"]), Check::Shape),
            32 => c(&["HRANDFIELD", &k, "0"]),
            _ => c(&["HLEN", &k]),
        };
        (cmd, Check::Exact)
    }

    /// Sets whose members are never repeated (so SADD's count is known whatever was popped):
    /// SPOP's random picks leave both servers with sets of the same sizes.
    fn pop_set_command(&mut self) -> (Vec<String>, Check) {
        // Never a key other commands may make a set of (a random pop there would leave the
        // servers with different members).
        let k = match self.rng.gen_range(0..10) {
            0 => "lx0".to_string(),
            1 => "nosuch".to_string(),
            _ => format!("p{}", self.rng.gen_range(0..self.keys)),
        };
        self.seen.insert(k.clone());
        match self.rng.gen_range(0..10) {
            0..=3 => {
                let mut v = words(&["SADD", &k]);
                for _ in 0..self.rng.gen_range(1..4) {
                    self.fresh += 1;
                    v.push(if self.chance(2) {
                        self.fresh.to_string()
                    } else {
                        format!("u{}", self.fresh)
                    });
                }
                (v, Check::Exact)
            }
            4..=5 => (words(&["SPOP", &k]), Check::Shape),
            6..=8 => {
                let n = self.one(&["0", "1", "2", "3", "100", "-1", "x"]);
                (words(&["SPOP", &k, n]), Check::Shape)
            }
            _ => (words(&["SCARD", &k]), Check::Exact),
        }
    }

    fn set_command(&mut self) -> (Vec<String>, Check) {
        let k = self.key("s");
        let m = self.member();
        let c = |parts: &[&str]| words(parts);
        let cmd = match self.rng.gen_range(0..40) {
            0..=7 => {
                let mut v = c(&["SADD", &k]);
                v.extend(self.members(4));
                v
            }
            8..=14 => {
                let mut v = c(&["SREM", &k]);
                v.extend(self.members(3));
                v
            }
            15..=18 => c(&["SMOVE", &k, &self.key("s"), &m]),
            19..=23 => {
                let name = self.one(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
                let mut v = c(&[name, &k]);
                v.extend(self.keys("s", 3));
                v
            }
            24..=25 => {
                let mut v = c(&[self.one(&["SINTER", "SUNION", "SDIFF"])]);
                v.extend(self.keys("s", 3));
                return (v, Check::Unordered);
            }
            26 => {
                let keys = self.keys("s", 3);
                let mut v = c(&["SINTERCARD", &keys.len().to_string()]);
                v.extend(keys);
                if self.chance(3) {
                    v.extend(["LIMIT".into(), self.rng.gen_range(0..3).to_string()]);
                }
                v
            }
            // The whole set, or none of it: SPOP's random choice does not show.
            27 => c(&["SPOP", &k, self.one(&["100", "0"])]),
            28 => c(&["SISMEMBER", &k, &m]),
            29 => c(&["SMISMEMBER", &k, &m, &self.member()]),
            30 => return (c(&["SMEMBERS", &k]), Check::Unordered),
            31 => return (c(&["SRANDMEMBER", &k, &self.int()]), Check::Shape),
            32 => return (c(&["SSCAN", &k, "0"]), Check::Shape),
            _ => c(&["SCARD", &k]),
        };
        if cmd[0] == "SPOP" {
            return (cmd, Check::Unordered);
        }
        (cmd, Check::Exact)
    }

    /// `numkeys key...` of sorted sets (and sets, which the set algebra reads too).
    fn numkeys(&mut self, max: usize) -> Vec<String> {
        let keys: Vec<String> = (0..self.rng.gen_range(1..=max))
            .map(|_| {
                let prefix = if self.chance(5) { "s" } else { "z" };
                self.key(prefix)
            })
            .collect();
        let mut v = vec![if self.chance(20) {
            self.one(&["0", "x", "9"]).to_string()
        } else {
            keys.len().to_string()
        }];
        v.extend(keys);
        v
    }

    fn zset_command(&mut self) -> (Vec<String>, Check) {
        let k = self.key("z");
        let m = self.member();
        let c = |parts: &[&str]| words(parts);
        let cmd = match self.rng.gen_range(0..50) {
            0..=12 => {
                let mut v = c(&["ZADD", &k]);
                for _ in 0..self.rng.gen_range(0..3) {
                    v.push(self.one(&["NX", "XX", "GT", "LT", "CH", "INCR"]).into());
                }
                for _ in 0..self.rng.gen_range(1..3) {
                    v.push(self.score());
                    v.push(self.member());
                }
                v
            }
            13..=14 => c(&["ZINCRBY", &k, &self.score(), &m]),
            15..=18 => {
                let mut v = c(&["ZREM", &k]);
                v.extend(self.members(3));
                v
            }
            19..=20 | 47 => c(&["ZREMRANGEBYRANK", &k, &self.int(), &self.int()]),
            21..=22 | 48 => {
                // Mostly min <= max, so something goes.
                let (a, b) = (self.rng.gen_range(-3..6), self.rng.gen_range(-3..6));
                let (min, max) = match self.rng.gen_range(0..6) {
                    0 => (self.score_bound(), self.score_bound()),
                    1 => (format!("({}", a.min(b)), "+inf".to_string()),
                    _ => (a.min(b).to_string(), a.max(b).to_string()),
                };
                c(&["ZREMRANGEBYSCORE", &k, &min, &max])
            }
            23..=25 => {
                let mut v = c(&[self.one(&["ZPOPMIN", "ZPOPMAX"]), &k]);
                if self.chance(2) {
                    v.push(self.one(&["0", "1", "2", "5", "-1"]).into());
                }
                v
            }
            26..=27 => {
                let mut v = c(&["ZMPOP"]);
                v.extend(self.numkeys(3));
                v.push(self.one(&["MIN", "MAX", "UP"]).into());
                if self.chance(2) {
                    v.extend(["COUNT".into(), self.one(&["1", "2", "9", "0"]).into()]);
                }
                v
            }
            28..=31 => {
                let name = self.one(&["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]);
                let mut v = c(&[name, &k]);
                v.extend(self.numkeys(3));
                if name != "ZDIFFSTORE" && self.chance(4) {
                    v.extend(["AGGREGATE".into(), self.one(&["MIN", "MAX", "BAD"]).into()]);
                }
                v
            }
            32..=34 => {
                let mut v = c(&["ZRANGESTORE", &k, &self.key("z")]);
                let (lo, hi) = (self.score_bound(), self.score_bound());
                match self.rng.gen_range(0..3) {
                    0 => v.extend([self.int(), self.int()]),
                    1 => v.extend([lo, hi, "BYSCORE".into()]),
                    _ => v.extend([hi, lo, "BYSCORE".into(), "REV".into()]),
                }
                v
            }
            35..=36 => {
                let mut v = c(&[self.one(&["ZUNION", "ZINTER", "ZDIFF", "ZINTERCARD"])]);
                v.extend(self.numkeys(3));
                if v[0] != "ZINTERCARD" && self.chance(2) {
                    v.push("WITHSCORES".into());
                }
                v
            }
            37 => c(&["ZSCORE", &k, &m]),
            38 => c(&["ZMSCORE", &k, &m, &self.member()]),
            39 => c(&[self.one(&["ZRANK", "ZREVRANK"]), &k, &m]),
            40 => c(&["ZCOUNT", &k, &self.score_bound(), &self.score_bound()]),
            41..=42 => c(&["ZRANGE", &k, "0", "-1", "WITHSCORES"]),
            43 => {
                let (lo, hi) = (self.score_bound(), self.score_bound());
                c(&["ZRANGEBYSCORE", &k, &lo, &hi])
            }
            44 => c(&["ZREVRANGE", &k, &self.int(), &self.int()]),
            45 => return (c(&["ZRANDMEMBER", &k, &self.int()]), Check::Shape),
            46 => return (c(&["ZSCAN", &k, "0"]), Check::Shape),
            _ => c(&["ZCARD", &k]),
        };
        (cmd, Check::Exact)
    }

    /// Sorted sets whose scores are all 0, for the lex ranges.
    fn lex_command(&mut self) -> Vec<String> {
        let k = match self.rng.gen_range(0..8) {
            0 => "nosuch".to_string(),
            1 => "str".to_string(),
            _ => format!("lx{}", self.rng.gen_range(0..self.keys)),
        };
        self.seen.insert(k.clone());
        match self.rng.gen_range(0..6) {
            0..=1 => {
                let mut v = words(&["ZADD", &k]);
                for _ in 0..self.rng.gen_range(1..4) {
                    v.push("0".into());
                    v.push(self.member());
                }
                v
            }
            2..=3 => words(&["ZREMRANGEBYLEX", &k, &self.lex_bound(), &self.lex_bound()]),
            4 => words(&["ZLEXCOUNT", &k, &self.lex_bound(), &self.lex_bound()]),
            _ => words(&["ZRANGEBYLEX", &k, &self.lex_bound(), &self.lex_bound()]),
        }
    }
}

fn random_stream(b: Backend, threads: usize) {
    let mut g = Gen {
        rng: StdRng::seed_from_u64(0x6e07 + threads as u64),
        keys: if threads <= 2 { 5 } else { 14 },
        fresh: 0,
        seen: BTreeSet::new(),
    };
    let cmds: Vec<(Vec<String>, Check)> = (0..STREAM).map(|_| g.command()).collect();
    for prefix in ["h", "s", "z", "p", "lx"] {
        let shards: BTreeSet<usize> = g
            .seen
            .iter()
            .filter(|k| k.starts_with(prefix))
            .map(|k| shard_for_key(k.as_bytes(), threads))
            .collect();
        assert_eq!(shards.len(), threads, "keys of {prefix} miss a shard");
    }
    assert_same_events(b, threads, &[], &cmds);
}

thread_count_tests!(targeted, expired_keys, random_stream);
