//! Keyspace notifications of the list commands and of the blocking pops (lists and sorted
//! sets), compared with Debian's redis-server 7.0 event by event (common/notify.rs): a seeded
//! random stream over keys on every shard, each command's cases one by one, and blocked
//! clients served by another client's push (same shard, across shards, BLMOVE, BZPOPMIN).
//! The sorted-set cases also need that family's events (`zadd`, and `zpopmin`/`zpopmax`,
//! which zset_family's pop records for every pop, the blocking ones included).

mod common;

use std::collections::BTreeSet;

use common::notify::{differences, events_agree, Listener};
use common::{encode, wait_blocked, Backend, Raw, Server};
use damselfly_storage::shard_for_key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// Commands of the random stream, per flag setting.
const STREAM: usize = 800;

fn cmd(parts: &[&str]) -> Vec<String> {
    parts.iter().map(|s| s.to_string()).collect()
}

/// For each shard of `threads`, the first `prefix<i>` living there.
fn one_per_shard(prefix: &str, threads: usize) -> Vec<String> {
    (0..threads)
        .map(|s| {
            (0..)
                .map(|i| format!("{prefix}{i}"))
                .find(|k| shard_for_key(k.as_bytes(), threads) == s)
                .unwrap_or_default()
        })
        .collect()
}

/// A key on the same shard as `key` (hash tag `{key}`).
fn beside(key: &str, suffix: &str) -> String {
    format!("{{{key}}}{suffix}")
}

/// Runs `setup` on both servers before any listener subscribes (FLUSHALL first).
fn prepare(redis: &Server, ours: &Server, setup: &[Vec<String>]) {
    for server in [redis, ours] {
        let mut c = server.raw();
        assert_eq!(c.cmd(&["FLUSHALL"]), b"+OK\r\n");
        for line in setup {
            c.cmd(line);
        }
    }
}

fn assert_none(found: Vec<String>) {
    assert!(
        found.is_empty(),
        "{} difference(s):\n{}",
        found.len(),
        found.join("\n")
    );
}

/// The seeded stream's picks.
struct Pick {
    rng: StdRng,
    /// `l0`..: lists, on every shard.
    keys: usize,
}

impl Pick {
    fn one<'a>(&mut self, options: &[&'a str]) -> &'a str {
        options.choose(&mut self.rng).copied().unwrap_or("")
    }

    fn chance(&mut self, n: u32) -> bool {
        self.rng.gen_ratio(1, n)
    }

    /// A list key mostly; a hash-tagged one (same shard), a string, a sorted set, or a key
    /// that is likely missing.
    fn key(&mut self) -> String {
        match self.rng.gen_range(0..24) {
            0 => "str".into(),
            1 => "zs".into(),
            2 => format!("miss{}", self.rng.gen_range(0..40)),
            3..=5 => format!("{{t}}l{}", self.rng.gen_range(0..3)),
            _ => format!("l{}", self.rng.gen_range(0..self.keys)),
        }
    }

    fn keys(&mut self, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.key())
            .collect()
    }

    /// Few distinct elements, so LREM, LINSERT and LPOS find them.
    fn element(&mut self) -> String {
        self.one(&["a", "b", "c", "1", "2", ""]).to_string()
    }

    fn elements(&mut self, max: usize) -> Vec<String> {
        (0..self.rng.gen_range(1..=max))
            .map(|_| self.element())
            .collect()
    }

    /// Small indexes mostly (lists are short), sometimes not a number.
    fn index(&mut self) -> String {
        match self.rng.gen_range(0..20) {
            0 => "x".into(),
            1 => "-100".into(),
            _ => self.rng.gen_range(-5i64..6).to_string(),
        }
    }

    fn end(&mut self) -> String {
        self.one(&["LEFT", "RIGHT", "left", "right", "UP"]).into()
    }

    fn count(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            0 => "0".into(),
            1 => "-1".into(),
            2 => "x".into(),
            _ => self.rng.gen_range(1..5).to_string(),
        }
    }

    fn command(&mut self) -> Vec<String> {
        let k = self.key();
        let with = |mut head: Vec<String>, tail: Vec<String>| {
            head.extend(tail);
            head
        };
        match self.rng.gen_range(0..100) {
            0..=15 => {
                let name = self.one(&["LPUSH", "RPUSH"]);
                let elements = self.elements(3);
                with(cmd(&[name, &k]), elements)
            }
            16..=19 => {
                let name = self.one(&["LPUSHX", "RPUSHX"]);
                let elements = self.elements(2);
                with(cmd(&[name, &k]), elements)
            }
            20..=31 => {
                let mut c = cmd(&[self.one(&["LPOP", "RPOP"]), &k]);
                match self.rng.gen_range(0..6) {
                    0..=2 => {}
                    3 | 4 => c.push(self.count()),
                    _ => c.extend(["1".into(), "2".into()]),
                }
                c
            }
            32..=34 => cmd(&["LLEN", &k]),
            35..=39 => {
                let (a, b) = (self.index(), self.index());
                cmd(&["LRANGE", &k, &a, &b])
            }
            40..=42 => cmd(&["LINDEX", &k, &self.index()]),
            43..=46 => {
                let (i, e) = (self.index(), self.element());
                cmd(&["LSET", &k, &i, &e])
            }
            47..=52 => {
                let (a, b) = (self.index(), self.index());
                cmd(&["LTRIM", &k, &a, &b])
            }
            53..=56 => {
                let at = self.one(&["BEFORE", "AFTER", "after", "middle"]);
                let (pivot, e) = (self.element(), self.element());
                cmd(&["LINSERT", &k, at, &pivot, &e])
            }
            57..=62 => {
                let n = self.rng.gen_range(-2..3).to_string();
                cmd(&["LREM", &k, &n, &self.element()])
            }
            63..=65 => {
                let mut c = cmd(&["LPOS", &k, &self.element()]);
                if self.chance(2) {
                    let opt = self.one(&["RANK", "COUNT", "MAXLEN", "BOGUS"]);
                    c.extend([opt.to_string(), self.index()]);
                }
                c
            }
            66..=72 => {
                let (dst, from, to) = (self.key(), self.end(), self.end());
                cmd(&["LMOVE", &k, &dst, &from, &to])
            }
            73..=75 => cmd(&["RPOPLPUSH", &k, &self.key()]),
            76..=82 => {
                let keys = self.keys(3);
                let n = if self.chance(10) {
                    "0".to_string()
                } else {
                    keys.len().to_string()
                };
                let mut c = with(cmd(&["LMPOP", &n]), keys);
                c.push(self.end());
                if self.chance(2) {
                    c.extend(["COUNT".into(), self.count()]);
                }
                c
            }
            83..=89 => {
                // Blocking forms: they serve at once when a key holds a list, else time out.
                let t = "0.01";
                match self.rng.gen_range(0..4) {
                    0 => {
                        let name = self.one(&["BLPOP", "BRPOP"]);
                        let mut c = with(cmd(&[name]), self.keys(3));
                        c.push(t.into());
                        c
                    }
                    1 => cmd(&["BRPOPLPUSH", &k, &self.key(), t]),
                    2 => {
                        let (dst, from, to) = (self.key(), self.end(), self.end());
                        cmd(&["BLMOVE", &k, &dst, &from, &to, t])
                    }
                    _ => {
                        let keys = self.keys(3);
                        let n = keys.len().to_string();
                        let mut c = with(cmd(&["BLMPOP", t, &n]), keys);
                        c.push(self.end());
                        if self.chance(2) {
                            c.extend(["COUNT".into(), self.count()]);
                        }
                        c
                    }
                }
            }
            _ => cmd(&["LRANGE", &k, "0", "-1"]),
        }
    }
}

/// The list keys a stream command names (for the shard coverage check).
fn named_keys(c: &[String]) -> impl Iterator<Item = &String> {
    c.iter().skip(1).filter(|a| {
        let n = a.strip_prefix("{t}l").or_else(|| a.strip_prefix('l'));
        n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    })
}

/// A seeded random stream over the list commands, under `KEA` then `KEAmn`: every reply
/// and every event agree with redis-server's.
fn random_stream_matches_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    prepare(
        &redis,
        &ours,
        &[cmd(&["SET", "str", "text"]), cmd(&["ZADD", "zs", "1", "a"])],
    );
    let mut pick = Pick {
        rng: StdRng::seed_from_u64(0x1157_0e7e + threads as u64),
        keys: if threads <= 2 { 6 } else { 14 },
    };
    let mut shards = BTreeSet::new();
    for flags in ["KEA", "KEAmn"] {
        let stream: Vec<Vec<String>> = (0..STREAM).map(|_| pick.command()).collect();
        for c in &stream {
            shards.extend(named_keys(c).map(|k| shard_for_key(k.as_bytes(), threads)));
        }
        assert_none(differences(&redis, &ours, threads, flags, &stream));
    }
    assert_eq!(shards.len(), threads, "the stream reached every shard");
}

/// Each list command's cases, with keys on one shard and across shards.
fn script(threads: usize) -> Vec<Vec<String>> {
    let k = one_per_shard("k", threads);
    let (a, b) = (k[0].as_str(), k[1].as_str());
    let a2 = beside(a, "2");
    let a2 = a2.as_str();
    let lines: &[&[&str]] = &[
        // Pushes: `new` for a created list, then the push; nothing for a miss or an error.
        &["RPUSH", a, "x", "y", "z"],
        &["LPUSH", a, "w"],
        &["LPUSH", b, "w", "v"],
        &["LPUSHX", a, "u"],
        &["RPUSHX", a, "v"],
        &["LPUSHX", "nosuch", "u"],
        &["RPUSHX", "nosuch", "u"],
        &["LPUSH", "str", "u"],
        &["RPUSHX", "str", "u"],
        &["LPUSH", a],
        // Pops: nothing for a count of 0, a miss or an error; `del` after the pop that
        // empties the list.
        &["LPOP", a],
        &["RPOP", a],
        &["LPOP", a, "0"],
        &["RPOP", a, "1"],
        &["LPOP", "nosuch"],
        &["LPOP", "nosuch", "0"],
        &["RPOP", "nosuch", "2"],
        &["LPOP", "str"],
        &["LPOP", "str", "0"],
        &["LPOP", a, "-1"],
        &["LPOP", a, "x"],
        &["LPOP", a, "1", "2"],
        &["RPOP", a, "10"],
        &["LLEN", a],
        &["RPUSH", a, "only"],
        &["LPOP", a],
        // Reads: `keymiss` for a missing key (not for another type, nor before an argument
        // error that Redis reports first).
        &["RPUSH", a, "x", "y", "x"],
        &["LLEN", a],
        &["LLEN", "nosuch"],
        &["LLEN", "str"],
        &["LINDEX", a, "1"],
        &["LINDEX", a, "9"],
        &["LINDEX", "nosuch", "0"],
        &["LINDEX", "nosuch", "x"],
        &["LINDEX", "str", "0"],
        &["LRANGE", a, "0", "-1"],
        &["LRANGE", "nosuch", "0", "-1"],
        &["LRANGE", "nosuch", "x", "1"],
        &["LRANGE", "str", "0", "1"],
        &["LPOS", a, "x"],
        &["LPOS", "nosuch", "x"],
        &["LPOS", "nosuch", "x", "COUNT", "0"],
        &["LPOS", "nosuch", "x", "RANK", "0"],
        &["LPOS", "nosuch", "x", "BOGUS", "1"],
        &["LPOS", "str", "x"],
        // LSET
        &["LSET", a, "0", "new"],
        &["LSET", a, "-1", "last"],
        &["LSET", a, "9", "v"],
        &["LSET", a, "x", "v"],
        &["LSET", "nosuch", "0", "v"],
        &["LSET", "str", "0", "v"],
        // LINSERT
        &["LINSERT", a, "BEFORE", "y", "b"],
        &["LINSERT", a, "AFTER", "last", "c"],
        &["LINSERT", a, "AFTER", "absent", "c"],
        &["LINSERT", a, "MIDDLE", "y", "c"],
        &["LINSERT", "nosuch", "BEFORE", "y", "c"],
        &["LINSERT", "str", "BEFORE", "y", "c"],
        // LREM
        &["LREM", a, "0", "absent"],
        &["LREM", a, "1", "y"],
        &["LREM", a, "-1", "c"],
        &["LREM", a, "x", "c"],
        &["LREM", "nosuch", "0", "c"],
        &["LREM", "str", "0", "c"],
        &["RPUSH", a2, "r", "r"],
        &["LREM", a2, "0", "r"],
        &["LLEN", a2],
        // LTRIM: named even when it keeps the whole list; `del` when it empties it.
        &["LTRIM", a, "0", "-1"],
        &["LTRIM", a, "1", "-2"],
        &["LTRIM", a, "x", "1"],
        &["LTRIM", "nosuch", "0", "1"],
        &["LTRIM", "str", "0", "1"],
        &["LTRIM", a, "5", "1"],
        &["LLEN", a],
        // LMOVE and RPOPLPUSH: `new` and the push on the destination, then the pop and
        // `del` on the source; the same key turned is never deleted.
        &["RPUSH", a, "1", "2", "3"],
        &["LMOVE", a, a2, "LEFT", "RIGHT"],
        &["LMOVE", a, a2, "RIGHT", "LEFT"],
        &["LMOVE", a, b, "LEFT", "LEFT"],
        &["LMOVE", b, a, "RIGHT", "RIGHT"],
        &["LMOVE", a, b, "RIGHT", "LEFT"],
        &["LMOVE", a2, a2, "LEFT", "RIGHT"],
        &["RPOPLPUSH", a2, a2],
        &["RPOPLPUSH", b, a2],
        &["RPOPLPUSH", b, a],
        &["RPOPLPUSH", b, a],
        &["LMOVE", "nosuch", a, "LEFT", "LEFT"],
        &["LMOVE", "nosuch", "str", "LEFT", "LEFT"],
        &["LMOVE", a, "str", "LEFT", "LEFT"],
        &["LMOVE", "str", a, "LEFT", "LEFT"],
        &["LMOVE", a, b, "UP", "LEFT"],
        &["RPOPLPUSH", "str", a],
        &["RPOPLPUSH", a, "str"],
        &["LMOVE", "one", "one", "LEFT", "RIGHT"],
        &["RPOPLPUSH", "one", "one"],
        &["LRANGE", a, "0", "-1"],
        &["LRANGE", a2, "0", "-1"],
        &["LRANGE", b, "0", "-1"],
        // LMPOP: the first key holding a list; WRONGTYPE at the first other type.
        &["LMPOP", "2", "nosuch", a, "LEFT"],
        &["LMPOP", "3", "nosuch", b, a, "RIGHT", "COUNT", "9"],
        &["LMPOP", "2", "nosuch", "str", "LEFT"],
        &["LMPOP", "2", a2, "str", "LEFT", "COUNT", "1"],
        &["LMPOP", "1", "nosuch", "LEFT"],
        &["LMPOP", "2", a, b, "LEFT", "COUNT", "0"],
        &["LMPOP", "2", a, a2, "LEFT", "COUNT", "9"],
        // The blocking forms when a list has data: as their non-blocking forms.
        &["RPUSH", a, "1", "2", "3"],
        &["RPUSH", b, "4"],
        &["BLPOP", "nosuch", a, "0"],
        &["BRPOP", b, a, "0"],
        &["BLMPOP", "0", "2", "nosuch", a, "RIGHT", "COUNT", "5"],
        &["RPUSH", a, "1", "2", "3"],
        &["BLMOVE", a, b, "LEFT", "RIGHT", "0"],
        &["BRPOPLPUSH", a, a2, "0"],
        &["BRPOPLPUSH", a, a, "0"],
        &["BLMOVE", a, "str", "LEFT", "RIGHT", "0"],
        &["BLPOP", "str", a, "0"],
        &["BLMPOP", "0", "1", "str", "LEFT"],
        &["BLPOP", "nosuch", "0.01"],
        &["BLMOVE", "nosuch", a, "LEFT", "RIGHT", "0.01"],
        &["BLMOVE", a, b, "RIGHT", "LEFT", "0"],
        &["LLEN", a],
    ];
    lines
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect()
}

/// Every list command's events, case by case, with every class on (`KEAmn`), with `A`
/// alone, and with one class or one channel kind alone (`del` without the list events, the
/// list events without `del`).
fn each_command_matches_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    let script = script(threads);
    let setup = [
        cmd(&["SET", "str", "text"]),
        cmd(&["RPUSH", "one", "e"]),
        cmd(&["EXPIRE", "one", "1000"]),
    ];
    for flags in ["KEAmn", "KEA", "Eg", "Kl", "Elm"] {
        prepare(&redis, &ours, &setup);
        let found = differences(&redis, &ours, threads, flags, &script);
        assert_none(
            found
                .into_iter()
                .map(|d| format!("[{flags}] {d}"))
                .collect(),
        );
        // A one-element list turned onto itself keeps its key, so its TTL.
        let ttl = ours.raw().cmd(&["TTL", "one"]);
        let secs: i64 = String::from_utf8_lossy(&ttl[1..ttl.len() - 2])
            .parse()
            .unwrap_or(-3);
        assert!(secs > 900, "TTL after LMOVE one one: {secs}");
    }
}

/// A step of a blocked-client case.
enum Step {
    /// Blocker `i` sends the command and stays blocked.
    Block(usize, Vec<String>),
    /// The client runs the command; the blockers listed are served by it and reply.
    Run(Vec<String>, Vec<usize>),
    /// The client runs MULTI or a command it queues (no sync point: it would be queued too).
    Queue(Vec<String>),
}

/// A blocked-client case: its setup, then its steps.
type BlockedCase = (Vec<Vec<String>>, Vec<Step>);

/// One server's side of a blocked-client case.
struct Side {
    listener: Listener,
    blockers: Vec<Raw>,
    blocked: usize,
}

impl Side {
    fn new(server: &Server, flags: &str) -> Side {
        Side {
            listener: Listener::new(server, flags),
            blockers: (0..2).map(|_| server.raw()).collect(),
            blocked: 0,
        }
    }

    /// Runs a step; returns the client's reply, the served blockers' replies and the events.
    /// The events of a served blocker are published before its reply leaves, so its reply is
    /// awaited before the sync point.
    fn step(&mut self, step: &Step) -> (Vec<u8>, Vec<Vec<u8>>, Vec<String>) {
        let (reply, served) = match step {
            Step::Block(i, c) => {
                self.blockers[*i].send(&encode(c));
                self.blocked += 1;
                wait_blocked(&mut self.listener.client, self.blocked);
                (Vec::new(), Vec::new())
            }
            Step::Run(c, woken) => {
                let reply = self.listener.client.cmd(c);
                let served: Vec<Vec<u8>> =
                    woken.iter().map(|&i| self.blockers[i].reply()).collect();
                self.blocked -= woken.len();
                (reply, served)
            }
            Step::Queue(c) => return (self.listener.client.cmd(c), Vec::new(), Vec::new()),
        };
        (reply, served, self.listener.events_until_sync())
    }
}

/// Runs a blocked-client case on both servers; returns every difference.
fn blocked_case(
    redis: &Server,
    ours: &Server,
    flags: &str,
    setup: &[Vec<String>],
    steps: &[Step],
) -> Vec<String> {
    prepare(redis, ours, setup);
    let mut theirs = Side::new(redis, flags);
    let mut mine = Side::new(ours, flags);
    let mut found = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let t = theirs.step(step);
        let m = mine.step(step);
        // A transaction's parts on several shards publish in parallel: each key's events
        // keep their order.
        let parallel = matches!(step, Step::Run(c, _) if c[0] == "EXEC");
        if t.0 != m.0 || t.1 != m.1 || !events_agree(&m.2, &t.2, parallel) {
            let c = match step {
                Step::Block(b, c) => format!("blocker {b}: {c:?}"),
                Step::Run(c, _) | Step::Queue(c) => format!("{c:?}"),
            };
            let show = |r: &[u8]| String::from_utf8_lossy(r).into_owned();
            found.push(format!(
                "#{i} {c}\n  reply ours:  {:?} served {:?}\n  reply redis: {:?} served {:?}\n  events ours:  {:?}\n  events redis: {:?}",
                show(&m.0),
                m.1.iter().map(|r| show(r)).collect::<Vec<_>>(),
                show(&t.0),
                t.1.iter().map(|r| show(r)).collect::<Vec<_>>(),
                m.2,
                t.2,
            ));
        }
    }
    // Both sides' blockers were all served.
    assert_eq!((theirs.blocked, mine.blocked), (0, 0));
    found
}

/// Blocked clients served by another client's write: Redis publishes the writer's events,
/// then the served pop's (`lpop`/`rpop`, after the push of BLMOVE), then `del` when it
/// emptied the key; Damselfly too, whether the key, the writer and the waiter share a
/// shard or not.
fn served_blocked_clients_match_redis(b: Backend, threads: usize) {
    use Step::{Block, Queue, Run};
    let k = one_per_shard("q", threads);
    let (x, y) = (k[0].as_str(), k[1].as_str());
    let x2 = beside(x, "2");
    let x2 = x2.as_str();
    let cases: Vec<BlockedCase> = vec![
        // BLPOP served on its key's shard, the list emptied.
        (
            vec![],
            vec![
                Block(0, cmd(&["BLPOP", x, "0"])),
                Run(cmd(&["RPUSH", x, "a"]), vec![0]),
                Run(cmd(&["LLEN", x]), vec![]),
            ],
        ),
        // BRPOP on two keys of two shards, served from the second, the list kept.
        (
            vec![],
            vec![
                Block(0, cmd(&["BRPOP", x, y, "0"])),
                Run(cmd(&["RPUSH", y, "a", "b"]), vec![0]),
                Run(cmd(&["LRANGE", y, "0", "-1"]), vec![]),
            ],
        ),
        // Two waiters served by one push, in the order they blocked.
        (
            vec![],
            vec![
                Block(0, cmd(&["BLPOP", x, "0"])),
                Block(1, cmd(&["BRPOP", y, x, "0"])),
                Run(cmd(&["RPUSH", x, "a", "b", "c"]), vec![0, 1]),
                Run(cmd(&["LRANGE", x, "0", "-1"]), vec![]),
            ],
        ),
        // BLMPOP with a count, emptying the list.
        (
            vec![],
            vec![
                Block(0, cmd(&["BLMPOP", "0", "2", y, x, "RIGHT", "COUNT", "5"])),
                Run(cmd(&["LPUSH", x, "a", "b"]), vec![0]),
            ],
        ),
        // BLMOVE on one shard: the push onto a new destination, the pop, `del`.
        (
            vec![],
            vec![
                Block(0, cmd(&["BLMOVE", x, x2, "LEFT", "RIGHT", "0"])),
                Run(cmd(&["LPUSH", x, "a"]), vec![0]),
                Run(cmd(&["LRANGE", x2, "0", "-1"]), vec![]),
            ],
        ),
        // BLMOVE across shards, onto an existing destination.
        (
            vec![cmd(&["RPUSH", y, "old"])],
            vec![
                Block(0, cmd(&["BLMOVE", x, y, "RIGHT", "LEFT", "0"])),
                Run(cmd(&["RPUSH", x, "a", "b"]), vec![0]),
                Run(cmd(&["LRANGE", y, "0", "-1"]), vec![]),
            ],
        ),
        // BRPOPLPUSH onto its own key: turned, never deleted.
        (
            vec![],
            vec![
                Block(0, cmd(&["BRPOPLPUSH", x, x, "0"])),
                Run(cmd(&["LPUSH", x, "a"]), vec![0]),
                Run(cmd(&["LRANGE", x, "0", "-1"]), vec![]),
            ],
        ),
        // The writer is a cross-shard LMOVE: its events, then the waiter's on another shard.
        (
            vec![cmd(&["RPUSH", x, "a"])],
            vec![
                Block(0, cmd(&["BLPOP", y, "0"])),
                Run(cmd(&["LMOVE", x, y, "LEFT", "LEFT"]), vec![0]),
            ],
        ),
        // The writer is a transaction: the waiter is served after EXEC.
        (
            vec![],
            vec![
                Block(0, cmd(&["BLPOP", x, "0"])),
                Queue(cmd(&["MULTI"])),
                Queue(cmd(&["RPUSH", x, "a"])),
                Queue(cmd(&["RPUSH", y, "b"])),
                Queue(cmd(&["RPUSH", x, "c"])),
                Run(cmd(&["EXEC"]), vec![0]),
                Run(cmd(&["LRANGE", x, "0", "-1"]), vec![]),
            ],
        ),
    ];
    run_blocked_cases(b, threads, &cases);
}

/// Runs blocked-client cases under `KEAmn` and `KEA`, asserting they all agree.
fn run_blocked_cases(b: Backend, threads: usize, cases: &[BlockedCase]) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    for flags in ["KEAmn", "KEA"] {
        for (setup, steps) in cases {
            let found = blocked_case(&redis, &ours, flags, setup, steps);
            assert_none(
                found
                    .into_iter()
                    .map(|d| format!("[{flags}] {d}"))
                    .collect(),
            );
        }
    }
}

/// The blocking sorted-set pops served by a ZADD: `zpopmin`/`zpopmax` (recorded by the
/// sorted-set family's pop), then `del` when the set was emptied.
fn served_blocked_zsets_match_redis(b: Backend, threads: usize) {
    use Step::{Block, Run};
    let k = one_per_shard("q", threads);
    let (x, y) = (k[0].as_str(), k[1].as_str());
    let x2 = beside(x, "2");
    let x2 = x2.as_str();
    let cases: Vec<BlockedCase> = vec![
        // BZPOPMIN and BZPOPMAX: `zpopmin`/`zpopmax`, then `del` when emptied.
        (
            vec![],
            vec![
                Block(0, cmd(&["BZPOPMIN", x, "0"])),
                Run(cmd(&["ZADD", x, "1", "a", "2", "b"]), vec![0]),
                Block(1, cmd(&["BZPOPMAX", y, x2, "0"])),
                Run(cmd(&["ZADD", y, "3", "c"]), vec![1]),
                Run(cmd(&["LLEN", y]), vec![]),
            ],
        ),
        // BZMPOP with a count.
        (
            vec![],
            vec![
                Block(0, cmd(&["BZMPOP", "0", "2", x, y, "MAX", "COUNT", "3"])),
                Run(cmd(&["ZADD", y, "1", "a", "2", "b"]), vec![0]),
                Run(cmd(&["LLEN", y]), vec![]),
            ],
        ),
    ];
    run_blocked_cases(b, threads, &cases);
}

/// The blocking sorted-set pops when a set has data, like the list ones (`zpopmin`,
/// `zpopmax`, recorded by the sorted-set family's pop, then `del`).
fn blocking_zset_pops_with_data_match_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    let k = one_per_shard("z", threads);
    let (x, y) = (k[0].as_str(), k[1].as_str());
    let setup = [
        cmd(&["ZADD", x, "1", "a", "2", "b", "3", "c"]),
        cmd(&["ZADD", y, "1", "a"]),
        cmd(&["SET", "str", "text"]),
    ];
    let script = common::cmds(&[
        &["BZPOPMIN", "nosuch", x, "0"],
        &["BZPOPMAX", x, "0"],
        &["BZPOPMIN", y, x, "0"],
        &["BZMPOP", "0", "2", "nosuch", x, "MAX", "COUNT", "5"],
        &["LLEN", x],
        &["BZPOPMIN", "str", "0"],
        &["BZMPOP", "0", "1", "str", "MIN"],
        &["BZPOPMAX", "nosuch", "0.01"],
    ]);
    for flags in ["KEAmn", "Kz", "Eg"] {
        prepare(&redis, &ours, &setup);
        assert_none(differences(&redis, &ours, threads, flags, &script));
    }
}

thread_count_tests!(
    random_stream_matches_redis,
    each_command_matches_redis,
    served_blocked_clients_match_redis,
    served_blocked_zsets_match_redis,
    blocking_zset_pops_with_data_match_redis
);
