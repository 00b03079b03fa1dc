//! Differential tests of the data-type families against Debian's redis-server: for each
//! family a seeded random stream of 20,000 commands (14,000 in RESP2, 6,000 in RESP3) with
//! wrong types, wrong arity, bad numbers, out-of-range indexes and empty results, over keys on
//! every one of Damselfly's shards (2, 3 or 4 threads; so multi-key commands cross shards),
//! some of it inside MULTI/EXEC. Replies are compared by `common::diff`'s rules.

mod common;

use common::diff::{run, state_difference, Check, Family};
use common::{Backend, Raw, Server};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const RESP2: usize = 14_000;
const RESP3: usize = 6_000;

/// What every family's generator shares: the random source and argument pickers.
struct Pick {
    rng: StdRng,
    /// How many keys of each family's prefix: with 3 or 4 shards, the first 6 names of some
    /// prefixes leave a shard out.
    keys: usize,
}

impl Pick {
    fn one<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options.choose(&mut self.rng).copied().unwrap_or("")
    }

    /// A key of this family (several shards, a hash-tagged pair), a string key, or a missing one.
    fn key(&mut self, prefix: &str) -> String {
        match self.rng.gen_range(0..20) {
            0 => "str".into(),
            1 => "nosuch".into(),
            2..=4 => format!("{{t}}{prefix}{}", self.rng.gen_range(0..3)),
            _ => format!("{prefix}{}", self.rng.gen_range(0..self.keys)),
        }
    }

    fn keys(&mut self, prefix: &str, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.key(prefix))
            .collect()
    }

    fn int(&mut self) -> String {
        match self.rng.gen_range(0..14) {
            i @ 0..=4 => common::EDGE_INTS[i].into(),
            5 => self.rng.gen_range(-200i64..200).to_string(),
            _ => self.rng.gen_range(-8i64..12).to_string(),
        }
    }

    fn float(&mut self) -> String {
        self.one(&common::FLOATS).to_string()
    }

    /// Short members mostly (compact encodings), integers (intsets), sometimes long ones.
    fn member(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => "x".repeat(self.rng.gen_range(60..80)),
            1..=4 => self.rng.gen_range(-5i64..40).to_string(),
            5 => String::new(),
            _ => format!("m{}", self.rng.gen_range(0..40)),
        }
    }

    fn members(&mut self, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.member())
            .collect()
    }

    fn chance(&mut self, n: u32) -> bool {
        self.rng.gen_ratio(1, n)
    }
}

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

fn with(mut head: Vec<String>, tail: Vec<String>) -> Vec<String> {
    head.extend(tail);
    head
}

struct Hashes(Pick);

impl Family for Hashes {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("h");
        let f = p.member();
        let exact = |c: Vec<String>| (c, Check::Exact);
        match p.rng.gen_range(0..100) {
            0..=19 => {
                let name = p.one(&["HSET", "HSET", "HMSET"]);
                let mut c = cmd(&[name, &k]);
                for _ in 0..p.rng.gen_range(1..5) {
                    c.push(p.member());
                    c.push(p.member());
                }
                if p.chance(15) {
                    c.pop();
                }
                exact(c)
            }
            20..=22 => exact(cmd(&["HSETNX", &k, &f, &p.member()])),
            23..=32 => exact(cmd(&["HGET", &k, &f])),
            33..=36 => exact(with(cmd(&["HMGET", &k]), p.members(4))),
            37..=44 => exact(with(cmd(&["HDEL", &k]), p.members(3))),
            45..=47 => exact(cmd(&["HEXISTS", &k, &f])),
            48..=50 => exact(cmd(&["HLEN", &k])),
            51..=52 => exact(cmd(&["HSTRLEN", &k, &f])),
            53..=54 => (cmd(&["HKEYS", &k]), Check::Unordered),
            55..=56 => (cmd(&["HVALS", &k]), Check::Unordered),
            57..=60 => (cmd(&["HGETALL", &k]), Check::UnorderedPairs),
            61..=66 => exact(cmd(&[
                "HINCRBY",
                &k,
                p.one(&["a", "b", "m1", "m2"]),
                &p.int(),
            ])),
            67..=70 => exact(cmd(&[
                "HINCRBYFLOAT",
                &k,
                p.one(&["a", "c", "m3"]),
                &p.float(),
            ])),
            71..=74 => {
                let mut c = cmd(&["HRANDFIELD", &k]);
                match p.rng.gen_range(0..5) {
                    0 => {}
                    1 => c.push(p.int()),
                    2 => c.extend([p.int(), "WITHVALUES".into()]),
                    3 => c.extend([p.int(), "BOGUS".into()]),
                    _ => c.extend(["3".into(), "WITHVALUES".into(), "x".into()]),
                }
                (c, Check::Shape)
            }
            75..=77 => {
                let mut c = cmd(&["HSCAN", &k, "0"]);
                if p.chance(2) {
                    c.extend(["MATCH".into(), p.one(&["m1*", "*", "?"]).into()]);
                }
                if p.chance(2) {
                    c.extend(["COUNT".into(), p.rng.gen_range(1..20).to_string()]);
                }
                if p.chance(10) {
                    c.push("COUNT".into());
                }
                (c, Check::Scan { pairs: true })
            }
            78 => exact(cmd(&["HSCAN", &k, p.one(&["x", "1x", " 1"])])),
            79 => exact(cmd(&[
                p.one(&["HGET", "HSET", "HDEL", "HLEN", "HINCRBY", "HMGET", "HSETNX"]),
                &k,
            ])),
            80..=81 => exact(cmd(&["TYPE", &k])),
            82..=83 => exact(cmd(&["OBJECT", "ENCODING", &k])),
            84 => exact(cmd(&["DEL", &k])),
            85 => exact(cmd(&["EXISTS", &k])),
            86 => exact(cmd(&[
                "HSET",
                &k,
                &"v".repeat(p.rng.gen_range(60..70)),
                "x",
            ])),
            87 => {
                // Grow past the listpack entry limit in one go.
                let mut c = cmd(&["HSET", &k]);
                for i in 0..p.rng.gen_range(100..140) {
                    c.push(format!("bulk{i}"));
                    c.push(i.to_string());
                }
                exact(c)
            }
            88 => exact(cmd(&["GET", &k])),
            _ => exact(cmd(&["HGET", &k, &f])),
        }
    }
}

struct Sets(Pick);

impl Family for Sets {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("s");
        let m = p.member();
        let exact = |c: Vec<String>| (c, Check::Exact);
        match p.rng.gen_range(0..100) {
            0..=21 => exact(with(cmd(&["SADD", &k]), p.members(5))),
            22..=29 => exact(with(cmd(&["SREM", &k]), p.members(3))),
            30..=34 => exact(cmd(&["SISMEMBER", &k, &m])),
            35..=37 => exact(with(cmd(&["SMISMEMBER", &k]), p.members(4))),
            38..=41 => (cmd(&["SMEMBERS", &k]), Check::Unordered),
            42..=44 => exact(cmd(&["SCARD", &k])),
            45..=48 => {
                let mut c = cmd(&["SPOP", &k]);
                match p.rng.gen_range(0..6) {
                    0 => {}
                    1 => c.push(p.int()),
                    2 => c.extend(["1".into(), "2".into()]),
                    _ => c.push(p.rng.gen_range(0..6).to_string()),
                }
                (
                    c,
                    Check::Pop {
                        remove: "SREM",
                        card: "SCARD",
                    },
                )
            }
            49..=52 => {
                let mut c = cmd(&["SRANDMEMBER", &k]);
                match p.rng.gen_range(0..4) {
                    0 => {}
                    1 => c.push(p.int()),
                    2 => c.extend(["1".into(), "2".into()]),
                    _ => c.push(p.rng.gen_range(-6..30).to_string()),
                }
                (c, Check::Shape)
            }
            53..=57 => exact(cmd(&["SMOVE", &k, &p.key("s"), &m])),
            58..=62 => {
                let name = p.one(&["SINTER", "SUNION", "SDIFF"]);
                (with(cmd(&[name]), p.keys("s", 4)), Check::Unordered)
            }
            63..=70 => {
                let name = p.one(&["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]);
                exact(with(cmd(&[name, &k]), p.keys("s", 3)))
            }
            71..=74 => {
                let keys = p.keys("s", 3);
                let n = if p.chance(8) {
                    p.int()
                } else {
                    keys.len().to_string()
                };
                let mut c = with(cmd(&["SINTERCARD", &n]), keys);
                match p.rng.gen_range(0..6) {
                    0 => c.extend(["LIMIT".into(), p.int()]),
                    1 => c.push("LIMIT".into()),
                    2 => c.push("BOGUS".into()),
                    _ => {}
                }
                exact(c)
            }
            75..=77 => {
                let mut c = cmd(&["SSCAN", &k, "0"]);
                if p.chance(2) {
                    c.extend(["MATCH".into(), p.one(&["m1*", "*", "1?"]).into()]);
                }
                if p.chance(2) {
                    c.extend(["COUNT".into(), p.rng.gen_range(1..20).to_string()]);
                }
                (c, Check::Scan { pairs: false })
            }
            78 => exact(cmd(&[
                p.one(&["SADD", "SREM", "SCARD", "SMOVE", "SINTERCARD", "SISMEMBER"]),
                &k,
            ])),
            79..=80 => exact(cmd(&["TYPE", &k])),
            81..=83 => exact(cmd(&["OBJECT", "ENCODING", &k])),
            84 => exact(cmd(&["DEL", &k])),
            85 => {
                // Grow past the intset limit.
                let mut c = cmd(&["SADD", &k]);
                c.extend((0..p.rng.gen_range(500..530)).map(|i| i.to_string()));
                exact(c)
            }
            86 => exact(cmd(&["SADD", &k, &"y".repeat(70)])),
            _ => exact(cmd(&["SCARD", &k])),
        }
    }
}

struct Lists(Pick);

impl Family for Lists {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("l");
        let e = p.member();
        let exact = |c: Vec<String>| (c, Check::Exact);
        let end = |p: &mut Pick| p.one(&["LEFT", "RIGHT", "left", "UP"]).to_string();
        exact(match p.rng.gen_range(0..100) {
            0..=13 => with(cmd(&[p.one(&["LPUSH", "RPUSH"]), &k]), p.members(5)),
            14..=16 => with(cmd(&[p.one(&["LPUSHX", "RPUSHX"]), &k]), p.members(3)),
            17..=26 => {
                let mut c = cmd(&[p.one(&["LPOP", "RPOP"]), &k]);
                match p.rng.gen_range(0..5) {
                    0 => c.push(p.int()),
                    1 => c.push(p.rng.gen_range(0..5).to_string()),
                    2 if p.chance(4) => c.extend(["1".into(), "2".into()]),
                    _ => {}
                }
                c
            }
            27..=29 => cmd(&["LLEN", &k]),
            30..=35 => cmd(&["LRANGE", &k, &p.int(), &p.int()]),
            36..=39 => {
                let (a, b) = (
                    p.rng.gen_range(-12..12).to_string(),
                    p.rng.gen_range(-12..12).to_string(),
                );
                cmd(&["LRANGE", &k, &a, &b])
            }
            40..=43 => cmd(&["LINDEX", &k, &p.int()]),
            44..=46 => cmd(&["LSET", &k, &p.int(), &e]),
            47..=49 => {
                let (a, b) = (
                    p.rng.gen_range(-8..8).to_string(),
                    p.rng.gen_range(-8..12).to_string(),
                );
                cmd(&["LTRIM", &k, &a, &b])
            }
            50..=54 => {
                let pivot = p.member();
                cmd(&[
                    "LINSERT",
                    &k,
                    p.one(&["BEFORE", "AFTER", "after", "middle"]),
                    &pivot,
                    &e,
                ])
            }
            55..=59 => {
                let n = p.rng.gen_range(-3..4).to_string();
                cmd(&["LREM", &k, &n, &e])
            }
            60..=65 => {
                let mut c = cmd(&["LPOS", &k, &e]);
                for _ in 0..p.rng.gen_range(0..3) {
                    let opt = p.one(&["RANK", "COUNT", "MAXLEN", "BOGUS"]).to_string();
                    let v = if p.chance(5) {
                        p.int()
                    } else {
                        p.rng.gen_range(-3..5).to_string()
                    };
                    c.extend([opt, v]);
                }
                if p.chance(20) {
                    c.push("RANK".into());
                }
                c
            }
            66..=72 => {
                let (from, to) = (end(p), end(p));
                cmd(&["LMOVE", &k, &p.key("l"), &from, &to])
            }
            73..=76 => cmd(&["RPOPLPUSH", &k, &p.key("l")]),
            77..=82 => {
                let keys = p.keys("l", 3);
                let n = if p.chance(8) {
                    p.int()
                } else {
                    keys.len().to_string()
                };
                let mut c = with(cmd(&["LMPOP", &n]), keys);
                c.push(end(p));
                match p.rng.gen_range(0..5) {
                    0 => c.extend(["COUNT".into(), p.int()]),
                    1 => c.extend(["COUNT".into(), p.rng.gen_range(1..4).to_string()]),
                    2 if p.chance(3) => c.push("COUNT".into()),
                    _ => {}
                }
                c
            }
            83 => cmd(&[
                p.one(&[
                    "LPUSH", "LPOP", "LRANGE", "LSET", "LINSERT", "LMOVE", "LMPOP", "LPOS", "LREM",
                ]),
                &k,
            ]),
            84..=85 => cmd(&["TYPE", &k]),
            86..=87 => cmd(&["OBJECT", "ENCODING", &k]),
            88 => cmd(&["DEL", &k]),
            89 => {
                let mut c = cmd(&["RPUSH", &k]);
                c.extend((0..p.rng.gen_range(100..300)).map(|i| format!("bulk-element-{i}")));
                c
            }
            90..=94 => {
                let t = p.timeout();
                match p.rng.gen_range(0..4) {
                    0 => {
                        let mut c = with(cmd(&[p.one(&["BLPOP", "BRPOP"])]), p.keys("l", 3));
                        c.push(t);
                        c
                    }
                    1 => cmd(&["BRPOPLPUSH", &k, &p.key("l"), &t]),
                    2 => {
                        let (from, to) = (end(p), end(p));
                        cmd(&["BLMOVE", &k, &p.key("l"), &from, &to, &t])
                    }
                    _ => {
                        let mut c = with(cmd(&["BLMPOP", &t]), p.numkeys("l", 3));
                        c.push(end(p));
                        if p.chance(2) {
                            c.extend(["COUNT".into(), p.rng.gen_range(0..4).to_string()]);
                        }
                        c
                    }
                }
            }
            _ => cmd(&["LRANGE", &k, "0", "-1"]),
        })
    }
}

struct SortedSets(Pick);

impl Pick {
    /// Mostly small integers and halves (exact sums), sometimes the float pickers' odd forms.
    fn score(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => self.float(),
            1 => format!("{}.5", self.rng.gen_range(-5..5)),
            _ => self.rng.gen_range(-10..20).to_string(),
        }
    }

    fn score_bound(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0 => self
                .one(&["-inf", "+inf", "inf", "(", "", "abc", "( 3", " 2", "2 "])
                .into(),
            1..=3 => format!("({}", self.rng.gen_range(-10..20)),
            4 => format!("{}.5", self.rng.gen_range(-5..10)),
            _ => self.rng.gen_range(-10..20).to_string(),
        }
    }

    fn lex_member(&mut self) -> String {
        format!(
            "{}{}",
            self.one(&["a", "b", "c", "m"]),
            self.rng.gen_range(0..12)
        )
    }

    fn lex_bound(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0 => self.one(&["-", "+", "", "[", "(", "x", "++"]).into(),
            1..=2 => self.one(&["-", "+"]).into(),
            3..=6 => format!("[{}", self.lex_member()),
            _ => format!("({}", self.lex_member()),
        }
    }

    /// A blocking command's timeout: short (a key that stays empty costs 10 ms on both
    /// servers), sometimes invalid; never 0, which would wait forever.
    fn timeout(&mut self) -> String {
        self.one(&[
            "0.01", "0.01", "0.01", "0.005", "-1", "abc", "inf", " 1", "-0.5",
        ])
        .into()
    }

    /// A `numkeys key...` list, sometimes with a bad count.
    fn numkeys(&mut self, prefix: &str, max: usize) -> Vec<String> {
        let keys = self.keys(prefix, max);
        let n = match self.rng.gen_range(0..10) {
            0 => self.int(),
            1 => (keys.len() + 1).to_string(),
            _ => keys.len().to_string(),
        };
        with(vec![n], keys)
    }
}

impl Family for SortedSets {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("z");
        // Lex ranges are defined only when all scores are equal: lex keys get score 0 only,
        // and never share the keys other commands may fill with random scores.
        let lk = match p.key("lx") {
            k if k == "nosuch" => "lxmissing".to_string(),
            k if k == "str" => "lx3".to_string(), // seeded as a hash: WRONGTYPE
            k => k,
        };
        let m = p.member();
        let exact = |c: Vec<String>| (c, Check::Exact);
        match p.rng.gen_range(0..100) {
            0..=15 => {
                let mut c = cmd(&["ZADD", &k]);
                for _ in 0..p.rng.gen_range(0..3) {
                    c.push(p.one(&["NX", "XX", "GT", "LT", "CH", "INCR", "ch"]).into());
                }
                for _ in 0..p.rng.gen_range(1..4) {
                    c.push(p.score());
                    c.push(p.member());
                }
                if p.chance(20) {
                    c.pop();
                }
                exact(c)
            }
            16..=19 => {
                let mut c = cmd(&["ZADD", &lk]);
                for _ in 0..p.rng.gen_range(1..4) {
                    c.push("0".into());
                    c.push(p.lex_member());
                }
                exact(c)
            }
            20..=22 => exact(cmd(&["ZINCRBY", &k, &p.score(), &m])),
            23..=26 => exact(with(cmd(&["ZREM", &k]), p.members(3))),
            27..=28 => exact(cmd(&["ZCARD", &k])),
            29..=31 => exact(cmd(&["ZSCORE", &k, &m])),
            32 => exact(with(cmd(&["ZMSCORE", &k]), p.members(3))),
            33..=34 => exact(cmd(&[p.one(&["ZRANK", "ZREVRANK"]), &k, &m])),
            35..=36 => exact(cmd(&["ZCOUNT", &k, &p.score_bound(), &p.score_bound()])),
            37 => exact(cmd(&["ZLEXCOUNT", &lk, &p.lex_bound(), &p.lex_bound()])),
            38..=45 => {
                let by = p.rng.gen_range(0..3);
                let (src, bounds) = match by {
                    0 => (k, [p.int(), p.rng.gen_range(-5..8).to_string()]),
                    1 => (k, [p.score_bound(), p.score_bound()]),
                    _ => (lk, [p.lex_bound(), p.lex_bound()]),
                };
                let store = p.chance(5);
                let mut c = if store {
                    cmd(&["ZRANGESTORE", &p.key("z"), &src])
                } else {
                    cmd(&["ZRANGE", &src])
                };
                c.extend(bounds);
                let mut opts: Vec<String> = Vec::new();
                if by == 1 || p.chance(15) {
                    opts.push("BYSCORE".into());
                }
                if by == 2 || p.chance(15) {
                    opts.push("BYLEX".into());
                }
                if p.chance(3) {
                    opts.push("REV".into());
                }
                if p.chance(3) {
                    opts.extend([
                        "LIMIT".into(),
                        p.rng.gen_range(-1..4).to_string(),
                        p.rng.gen_range(-1..4).to_string(),
                    ]);
                }
                if p.chance(2) {
                    opts.push("WITHSCORES".into());
                }
                opts.shuffle(&mut p.rng);
                exact(with(c, opts))
            }
            46..=51 => {
                let name = p.one(&[
                    "ZREVRANGE",
                    "ZRANGEBYSCORE",
                    "ZREVRANGEBYSCORE",
                    "ZRANGEBYLEX",
                    "ZREVRANGEBYLEX",
                ]);
                let mut c = match name {
                    "ZREVRANGE" => cmd(&[name, &k, &p.int(), &p.rng.gen_range(-3..6).to_string()]),
                    "ZRANGEBYSCORE" | "ZREVRANGEBYSCORE" => {
                        cmd(&[name, &k, &p.score_bound(), &p.score_bound()])
                    }
                    _ => cmd(&[name, &lk, &p.lex_bound(), &p.lex_bound()]),
                };
                if p.chance(2) {
                    c.push("WITHSCORES".into());
                }
                if p.chance(3) {
                    c.extend([
                        "LIMIT".into(),
                        p.rng.gen_range(-1..3).to_string(),
                        p.rng.gen_range(-1..4).to_string(),
                    ]);
                }
                exact(c)
            }
            52..=55 => exact(match p.rng.gen_range(0..3) {
                0 => cmd(&[
                    "ZREMRANGEBYRANK",
                    &k,
                    &p.int(),
                    &p.rng.gen_range(-3..3).to_string(),
                ]),
                1 => cmd(&["ZREMRANGEBYSCORE", &k, &p.score_bound(), &p.score_bound()]),
                _ => cmd(&["ZREMRANGEBYLEX", &lk, &p.lex_bound(), &p.lex_bound()]),
            }),
            56..=61 => {
                let key = if p.chance(3) { lk } else { k };
                let mut c = cmd(&[p.one(&["ZPOPMIN", "ZPOPMAX"]), &key]);
                match p.rng.gen_range(0..5) {
                    0 => c.push(p.int()),
                    1 => c.push(p.rng.gen_range(0..4).to_string()),
                    2 if p.chance(4) => c.extend(["1".into(), "2".into()]),
                    _ => {}
                }
                exact(c)
            }
            62..=65 => {
                let mut c = with(cmd(&["ZMPOP"]), p.numkeys("z", 3));
                c.push(p.one(&["MIN", "MAX", "max", "UP"]).into());
                match p.rng.gen_range(0..5) {
                    0 => c.extend(["COUNT".into(), p.int()]),
                    1 => c.extend(["COUNT".into(), p.rng.gen_range(1..4).to_string()]),
                    2 if p.chance(3) => c.push("COUNT".into()),
                    _ => {}
                }
                exact(c)
            }
            66..=68 => {
                let mut c = cmd(&["ZRANDMEMBER", &k]);
                match p.rng.gen_range(0..4) {
                    0 => {}
                    1 => c.push(p.int()),
                    2 => c.extend([p.rng.gen_range(-5..8).to_string(), "WITHSCORES".into()]),
                    _ => c.push(p.rng.gen_range(-6..30).to_string()),
                }
                (c, Check::Shape)
            }
            69..=77 => {
                let (name, store) = *[
                    ("ZUNION", false),
                    ("ZINTER", false),
                    ("ZDIFF", false),
                    ("ZUNIONSTORE", true),
                    ("ZINTERSTORE", true),
                    ("ZDIFFSTORE", true),
                ]
                .choose(&mut p.rng)
                .unwrap_or(&("ZUNION", false));
                let mut c = cmd(&[name]);
                if store {
                    c.push(p.key("z"));
                }
                let nk = p.numkeys("z", 3);
                let n = nk.len() - 1;
                c.extend(nk);
                if p.chance(3) {
                    c.push("WEIGHTS".into());
                    for _ in 0..n {
                        c.push(if p.chance(8) {
                            p.float()
                        } else {
                            p.rng.gen_range(-2..4).to_string()
                        });
                    }
                }
                if p.chance(3) {
                    c.extend([
                        "AGGREGATE".into(),
                        p.one(&["SUM", "MIN", "max", "AVG"]).into(),
                    ]);
                }
                if p.chance(2) {
                    c.push("WITHSCORES".into());
                }
                exact(c)
            }
            78..=79 => {
                let mut c = with(cmd(&["ZINTERCARD"]), p.numkeys("z", 3));
                match p.rng.gen_range(0..6) {
                    0 => c.extend(["LIMIT".into(), p.int()]),
                    1 => c.push("LIMIT".into()),
                    2 => c.push("WITHSCORES".into()),
                    _ => {}
                }
                exact(c)
            }
            80..=81 => {
                let mut c = cmd(&["ZSCAN", &k, "0"]);
                if p.chance(2) {
                    c.extend(["MATCH".into(), p.one(&["m1*", "*", "1?"]).into()]);
                }
                if p.chance(2) {
                    c.extend(["COUNT".into(), p.rng.gen_range(1..20).to_string()]);
                }
                (c, Check::Scan { pairs: true })
            }
            82 => exact(cmd(&[
                p.one(&[
                    "ZADD",
                    "ZREM",
                    "ZRANGE",
                    "ZUNIONSTORE",
                    "ZINTERCARD",
                    "ZSCORE",
                    "ZMPOP",
                ]),
                &k,
            ])),
            83..=84 => exact(cmd(&["TYPE", &k])),
            85..=87 => exact(cmd(&["OBJECT", "ENCODING", &k])),
            88 => exact(cmd(&["DEL", &k])),
            89 => {
                // Grow past the listpack limit.
                let mut c = cmd(&["ZADD", &k]);
                for i in 0..p.rng.gen_range(120..140) {
                    c.push(p.rng.gen_range(-50..50).to_string());
                    c.push(format!("n{i}"));
                }
                exact(c)
            }
            90 => exact(cmd(&["ZADD", &k, "1", &"y".repeat(70)])),
            91..=94 => {
                let t = p.timeout();
                exact(if p.chance(2) {
                    let mut c = with(cmd(&[p.one(&["BZPOPMIN", "BZPOPMAX"])]), p.keys("z", 3));
                    c.push(t);
                    c
                } else {
                    let mut c = with(cmd(&["BZMPOP", &t]), p.numkeys("z", 3));
                    c.push(p.one(&["MIN", "MAX", "UP"]).into());
                    if p.chance(2) {
                        c.extend(["COUNT".into(), p.rng.gen_range(0..4).to_string()]);
                    }
                    c
                })
            }
            _ => exact(cmd(&["ZRANGE", &k, "0", "-1", "WITHSCORES"])),
        }
    }
}

struct Bitmaps(Pick);

impl Pick {
    fn bit_offset(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => self.int(),
            1 => "4294967296".into(),
            2 => format!("#{}", self.rng.gen_range(0..6)),
            _ => self.rng.gen_range(0..120).to_string(),
        }
    }

    fn field_type(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => self
                .one(&["u64", "i65", "x8", "i0", "u", "I8", "U3"])
                .into(),
            1 => "i64".into(),
            2 => "u63".into(),
            _ => format!("{}{}", self.one(&["i", "u"]), self.rng.gen_range(1..17)),
        }
    }

    fn range_bound(&mut self) -> String {
        match self.rng.gen_range(0..8) {
            0 => self.int(),
            _ => self.rng.gen_range(-20..40).to_string(),
        }
    }
}

impl Family for Bitmaps {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("b");
        let exact = |c: Vec<String>| (c, Check::Exact);
        exact(match p.rng.gen_range(0..100) {
            0..=19 => {
                let bit = p.one(&["0", "1", "1", "1", "2", "abc", "-1"]).to_string();
                cmd(&["SETBIT", &k, &p.bit_offset(), &bit])
            }
            20..=29 => cmd(&["GETBIT", &k, &p.bit_offset()]),
            30..=39 => {
                let mut c = cmd(&["BITCOUNT", &k]);
                match p.rng.gen_range(0..5) {
                    0 => {}
                    1 => c.push(p.range_bound()),
                    _ => {
                        c.extend([p.range_bound(), p.range_bound()]);
                        if p.chance(2) {
                            c.push(p.one(&["BYTE", "BIT", "bit", "WORD"]).into());
                        }
                    }
                }
                c
            }
            40..=51 => {
                let bit = p.one(&["0", "1", "1", "0", "2", "x"]).to_string();
                let mut c = cmd(&["BITPOS", &k, &bit]);
                for _ in 0..p.rng.gen_range(0..3) {
                    c.push(p.range_bound());
                }
                if c.len() == 5 && p.chance(2) {
                    c.push(p.one(&["BYTE", "BIT", "bit", "WORD"]).into());
                }
                if p.chance(30) {
                    c.extend(["1".into(), "2".into(), "BIT".into()]);
                }
                c
            }
            52..=59 => {
                let op = p.one(&["AND", "OR", "XOR", "NOT", "not", "NAND"]);
                with(cmd(&["BITOP", op, &p.key("b")]), p.keys("b", 3))
            }
            60..=74 => {
                let ro = p.chance(5);
                let mut c = cmd(&[if ro { "BITFIELD_RO" } else { "BITFIELD" }, &k]);
                for _ in 0..p.rng.gen_range(0..4) {
                    match p.rng.gen_range(0..8) {
                        0..=2 => c.extend(["GET".into(), p.field_type(), p.bit_offset()]),
                        3..=4 => c.extend(["SET".into(), p.field_type(), p.bit_offset(), p.int()]),
                        5..=6 => {
                            c.extend(["INCRBY".into(), p.field_type(), p.bit_offset(), p.int()])
                        }
                        _ => c.extend([
                            "OVERFLOW".into(),
                            p.one(&["WRAP", "SAT", "FAIL", "fail", "MAYBE"]).into(),
                        ]),
                    }
                }
                if p.chance(20) {
                    c.push("GET".into());
                }
                c
            }
            75..=79 => cmd(&[
                "SET",
                &k,
                p.one(&["foobar", "12345", "-7", "\u{ff}\u{1}", ""]),
            ]),
            80..=82 => cmd(&["APPEND", &k, p.one(&["a", "\u{0}", "xyz"])]),
            83..=86 => cmd(&["GET", &k]),
            87 => cmd(&["STRLEN", &k]),
            88 => cmd(&["DEL", &k]),
            89 => cmd(&[
                p.one(&["SETBIT", "GETBIT", "BITOP", "BITFIELD_RO", "BITPOS"]),
                &k,
            ]),
            _ => cmd(&["TYPE", &k]),
        })
    }
}

struct HyperLogLogs(Pick);

impl Family for HyperLogLogs {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let k = p.key("p");
        let exact = |c: Vec<String>| (c, Check::Exact);
        let element = |p: &mut Pick| format!("e{}", p.rng.gen_range(0..5000));
        exact(match p.rng.gen_range(0..100) {
            0..=34 => {
                let mut c = cmd(&["PFADD", &k]);
                for _ in 0..p.rng.gen_range(0..5) {
                    c.push(element(p));
                }
                c
            }
            35..=39 => {
                // Enough new registers to cross hll-sparse-max-bytes now and then.
                let mut c = cmd(&["PFADD", &k]);
                c.extend((0..p.rng.gen_range(100..400)).map(|_| element(p)));
                c
            }
            40..=54 => cmd(&["PFCOUNT", &k]),
            55..=64 => with(cmd(&["PFCOUNT"]), p.keys("p", 3)),
            65..=74 => with(cmd(&["PFMERGE", &p.key("p")]), p.keys("p", 3)),
            75..=82 => cmd(&["GET", &k]),
            83..=84 => cmd(&["STRLEN", &k]),
            85 => cmd(&["SET", &k, "not a hyperloglog"]),
            86 => cmd(&["APPEND", &k, "x"]),
            87..=88 => cmd(&["DEL", &k]),
            89 => cmd(&["PFMERGE"]),
            _ => cmd(&["TYPE", &k]),
        })
    }
}

struct Sorts(Pick);

impl Pick {
    fn sort_element(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0 => self
                .one(&["abc", "x", "", " 7", "1e3", "-2.5", "inf"])
                .into(),
            1..=2 => format!("{}.5", self.rng.gen_range(-5..5)),
            _ => self.rng.gen_range(-10..30).to_string(),
        }
    }
}

impl Family for Sorts {
    fn command(&mut self) -> (Vec<String>, Check) {
        let p = &mut self.0;
        let exact = |c: Vec<String>| (c, Check::Exact);
        match p.rng.gen_range(0..100) {
            0..=9 => {
                let mut c = cmd(&["RPUSH", &p.key("sl")]);
                c.extend((0..p.rng.gen_range(1..6)).map(|_| p.sort_element()));
                exact(c)
            }
            10..=14 => {
                let mut c = cmd(&["SADD", &p.key("ss")]);
                c.extend((0..p.rng.gen_range(1..6)).map(|_| p.sort_element()));
                exact(c)
            }
            15..=19 => {
                let mut c = cmd(&["ZADD", &p.key("sz")]);
                for _ in 0..p.rng.gen_range(1..4) {
                    c.push(p.rng.gen_range(-5..5).to_string());
                    c.push(p.sort_element());
                }
                exact(c)
            }
            20..=27 => {
                let e = p.sort_element();
                let v = p.sort_element();
                exact(cmd(&["SET", &format!("w_{e}"), &v]))
            }
            28..=32 => {
                let e = p.sort_element();
                let v = p.sort_element();
                exact(cmd(&["HSET", &format!("h_{e}"), "f", &v]))
            }
            33..=89 => {
                let ro = p.chance(4);
                let source = match p.rng.gen_range(0..4) {
                    0 => p.key("ss"),
                    1 => p.key("sz"),
                    _ => p.key("sl"),
                };
                // "str" and "nosuch" may have become sets too.
                let is_set = source.contains("ss") || source == "str" || source == "nosuch";
                let mut c = cmd(&[if ro { "SORT_RO" } else { "SORT" }, &source]);
                let by = match p.rng.gen_range(0..5) {
                    0 => Some("w_*"),
                    1 => Some("h_*->f"),
                    2 => Some("nosort"),
                    _ => None,
                };
                let alpha = p.chance(3);
                let mut opts: Vec<Vec<String>> = Vec::new();
                if let Some(b) = by {
                    opts.push(vec!["BY".into(), b.into()]);
                }
                if alpha {
                    opts.push(vec!["ALPHA".into()]);
                }
                if p.chance(3) {
                    opts.push(vec![p.one(&["ASC", "DESC", "desc"]).into()]);
                }
                // Ties (equal BY values under ALPHA, or a set's own order) make the
                // order, hence LIMIT's slice and a stored list, depend on internals.
                let ordered = by.is_none() || !(is_set || alpha);
                if ordered && p.chance(3) {
                    opts.push(vec![
                        "LIMIT".into(),
                        p.rng.gen_range(-1..4).to_string(),
                        p.rng.gen_range(-1..4).to_string(),
                    ]);
                }
                for _ in 0..p.rng.gen_range(0..3) {
                    let g = p.one(&["#", "w_*", "h_*->f", "nokey", "h_*->"]);
                    opts.push(vec!["GET".into(), g.into()]);
                }
                if ordered && !ro && p.chance(4) {
                    opts.push(vec!["STORE".into(), p.key("sd")]);
                }
                // A stray option. Amid the others a STORE takes the next one as its
                // destination, so in a command whose order ties leave open it goes last, where
                // it is a syntax error, and stores nothing that the final state would compare.
                let stray = p.chance(30).then(|| p.one(&["LIMIT", "BOGUS", "STORE"]));
                if let Some(stray) = stray.filter(|_| ordered) {
                    opts.push(vec![stray.into()]);
                }
                opts.shuffle(&mut p.rng);
                c.extend(opts.into_iter().flatten());
                if let Some(stray) = stray.filter(|_| !ordered) {
                    c.push(stray.into());
                }
                let check = if ordered {
                    Check::Exact
                } else {
                    Check::Unordered
                };
                (c, check)
            }
            90..=94 => exact(cmd(&["LRANGE", &p.key("sd"), "0", "-1"])),
            95 => {
                let prefix = p.one(&["sl", "ss", "sz", "sd"]);
                exact(cmd(&["DEL", &p.key(prefix)]))
            }
            _ => exact(cmd(&["TYPE", &p.key("sd")])),
        }
    }
}

/// Runs one family on a fresh pair of servers, RESP2 then RESP3.
fn differential(b: Backend, threads: usize, family: &mut dyn Family, seed_keys: &[&[&str]]) {
    let redis_server = Server::redis();
    let ours_server = Server::start_with(b, threads, &[]);
    let mut redis = redis_server.raw();
    let mut ours = ours_server.raw();
    for c in [&mut redis, &mut ours] {
        // redis.conf's value (Redis's built-in default is 512); Damselfly defaults to 128.
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "hash-max-listpack-entries", "128"]),
            b"+OK\r\n"
        );
        assert_eq!(c.cmd(&["SET", "str", "text"]), b"+OK\r\n");
        for setup in seed_keys {
            c.cmd(setup);
        }
    }
    let mut seen = common::diff::KeysSeen::default();
    run(family, &mut redis, &mut ours, RESP2, "RESP2", &mut seen);
    for c in [&mut redis, &mut ours] {
        assert!(c.cmd(&["HELLO", "3"]).starts_with(b"%7"));
    }
    run(family, &mut redis, &mut ours, RESP3, "RESP3", &mut seen);
    final_state_matches(&mut redis, &mut ours);
    seen.assert_on_every_shard(threads);
}

/// Every key, type, value and TTL presence agree at the end.
fn final_state_matches(redis: &mut Raw, ours: &mut Raw) {
    if let Some(difference) = state_difference(redis, ours) {
        panic!("final state differs: {difference}");
    }
}

/// The final-state check itself finds each kind of difference: two Redis servers with the same
/// data, then one write on one side only (undone by the same write on the other side).
#[test]
fn final_state_check_sees_every_difference() {
    let (a, b) = (Server::redis(), Server::redis());
    let (mut a, mut b) = (a.raw(), b.raw());
    let setup: &[&[&str]] = &[
        &["SET", "s", "v"],
        &["SET", "t", "v", "EX", "1000"],
        &["HSET", "h", "f1", "1", "f2", "2"],
        &["RPUSH", "l", "a", "b", "c"],
        &["SADD", "set", "a", "b"],
        &["ZADD", "z", "1", "a", "2", "b"],
    ];
    for c in setup {
        a.cmd(c);
        b.cmd(c);
    }
    assert_eq!(state_difference(&mut a, &mut b), None);
    let one_sided: &[&[&str]] = &[
        &["SET", "s", "w"],
        &["PERSIST", "t"],
        &["EXPIRE", "s", "1000"],
        &["HSET", "h", "f2", "3"],
        &["LSET", "l", "1", "x"],
        &["LMOVE", "l", "l", "LEFT", "RIGHT"],
        &["SADD", "set", "c"],
        &["ZADD", "z", "3", "a"],
        &["ZADD", "z", "1", "b"],
        &["SET", "extra", "1"],
        &["DEL", "h"],
        &["SET", "set", "now a string"],
    ];
    for c in one_sided {
        b.cmd(c);
        assert!(state_difference(&mut a, &mut b).is_some(), "{c:?} unseen");
        a.cmd(c);
        assert_eq!(state_difference(&mut a, &mut b), None, "after {c:?}");
    }
}

fn pick(seed: u64, threads: usize) -> Pick {
    Pick {
        rng: StdRng::seed_from_u64(seed),
        // 6 for the 2-thread streams as they always were; 14 names cover every shard of 3 or 4
        // for every prefix (differential() checks that the keys reached every shard).
        keys: if threads <= 2 { 6 } else { 14 },
    }
}

fn hashes_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut Hashes(pick(0x4a54, threads)),
        &[&["SADD", "s0", "a"]],
    );
}

fn sets_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut Sets(pick(0x5e75, threads)),
        &[&["HSET", "h0", "a", "1"]],
    );
}

fn lists_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut Lists(pick(0x1157, threads)),
        &[&["SADD", "l0", "a"]],
    );
}

fn sorted_sets_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut SortedSets(pick(0x25e7, threads)),
        &[&["SADD", "z5", "a", "m1", "3"], &["HSET", "lx3", "a", "1"]],
    );
}

fn bitmaps_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut Bitmaps(pick(0xb175, threads)),
        &[&["HSET", "b5", "a", "1"]],
    );
}

fn hyperloglogs_match_redis(b: Backend, threads: usize) {
    differential(
        b,
        threads,
        &mut HyperLogLogs(pick(0x4111, threads)),
        &[&["HSET", "p5", "a", "1"]],
    );
}

fn sorts_match_redis(b: Backend, threads: usize) {
    differential(b, threads, &mut Sorts(pick(0x5027, threads)), &[]);
}

thread_count_tests!(
    bitmaps_match_redis,
    sorts_match_redis,
    hyperloglogs_match_redis,
    hashes_match_redis,
    sets_match_redis,
    lists_match_redis,
    sorted_sets_match_redis
);
