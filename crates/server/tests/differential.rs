//! Differential test: the same seeded random command stream goes to Debian's redis-server and
//! to Damselfly (`--threads` 2, 3 and 4), some of it inside MULTI/EXEC; every reply must be
//! byte-for-byte equal, except KEYS (order is unspecified: compared sorted) and the TTL family
//! (clock readings: compared within a tolerance). Runs in RESP2 and then RESP3, under both
//! backends with 2 threads and under epoll with 3 and 4.

mod common;

use common::{diff, Backend, Raw, Server};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const COMMANDS_RESP2: usize = 12_000;
const COMMANDS_RESP3: usize = 6_000;
const CHUNK: usize = 40;

struct Gen {
    rng: StdRng,
    now_secs: u64,
    history: Vec<Vec<String>>,
    seen: diff::KeysSeen,
}

impl Gen {
    fn key(&mut self) -> String {
        let n = self.rng.gen_range(0..24);
        match self.rng.gen_range(0..6) {
            0 => format!("{{tag}}:{n}"),
            _ => format!("k{n}"),
        }
    }

    fn value(&mut self) -> String {
        match self.rng.gen_range(0..10) {
            0 => String::new(),
            1 => self.rng.gen_range(-1000i64..1000).to_string(),
            2 => i64::MAX.to_string(),
            3 => "01".into(),
            4 => format!("{:.3}", self.rng.gen_range(-100.0f64..100.0)),
            5 => "hello world".into(),
            6 => "x".repeat(self.rng.gen_range(1..100)),
            _ => format!("v{}", self.rng.gen_range(0..1000)),
        }
    }

    fn int(&mut self) -> String {
        match self.rng.gen_range(0..12) {
            i @ 0..=4 => common::EDGE_INTS[i].into(),
            _ => self.rng.gen_range(-20i64..50).to_string(),
        }
    }

    fn float(&mut self) -> String {
        common::FLOATS
            .choose(&mut self.rng)
            .map(|s| s.to_string())
            .unwrap_or_default()
    }

    /// An expire argument that cannot race between the two servers: far future, or past.
    fn expire_arg(&mut self, unit_ms: bool, absolute: bool) -> String {
        let scale = if unit_ms { 1000 } else { 1 };
        match self.rng.gen_range(0..8) {
            0 => "0".into(),
            1 => "-5".into(),
            2 => "notanumber".into(),
            3 if absolute => ((self.now_secs - 1000) * scale).to_string(),
            _ if absolute => {
                ((self.now_secs + self.rng.gen_range(1000..100_000)) * scale).to_string()
            }
            _ => (self.rng.gen_range(1000..100_000) * scale).to_string(),
        }
    }

    fn set_options(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for _ in 0..self.rng.gen_range(0..3) {
            match self.rng.gen_range(0..9) {
                0 => out.push("NX".into()),
                1 => out.push("XX".into()),
                2 => out.push("GET".into()),
                3 => out.push("KEEPTTL".into()),
                4 => out.extend(["EX".into(), self.expire_arg(false, false)]),
                5 => out.extend(["PX".into(), self.expire_arg(true, false)]),
                6 => out.extend(["EXAT".into(), self.expire_arg(false, true)]),
                7 => out.extend(["PXAT".into(), self.expire_arg(true, true)]),
                _ => out.push("BOGUS".into()),
            }
        }
        out
    }

    fn command(&mut self) -> Vec<String> {
        let k = self.key();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let pick = self.rng.gen_range(0..100);
        let mut c = match pick {
            0..=9 => s(&["GET", &k]),
            10..=17 => {
                let v = self.value();
                let mut c = s(&["SET", &k, &v]);
                c.extend(self.set_options());
                c
            }
            18 => s(&["SETNX", &k, &self.value()]),
            19 => {
                let e = self.expire_arg(false, false);
                s(&["SETEX", &k, &e, &self.value()])
            }
            20 => {
                let e = self.expire_arg(true, false);
                s(&["PSETEX", &k, &e, &self.value()])
            }
            21 => s(&["GETSET", &k, &self.value()]),
            22 => s(&["GETDEL", &k]),
            23..=24 => {
                let mut c = s(&["GETEX", &k]);
                match self.rng.gen_range(0..6) {
                    0 => c.extend(["EX".into(), self.expire_arg(false, false)]),
                    1 => c.extend(["PXAT".into(), self.expire_arg(true, true)]),
                    2 => c.push("PERSIST".into()),
                    3 => c.extend(["PERSIST".into(), "EX".into(), "100".into()]),
                    4 => c.push("NX".into()),
                    _ => {}
                }
                c
            }
            25..=28 => {
                let mut c = s(&["MGET"]);
                for _ in 0..self.rng.gen_range(1..6) {
                    c.push(self.key());
                }
                c
            }
            29..=31 => {
                let mut c = s(&["MSET"]);
                for _ in 0..self.rng.gen_range(1..5) {
                    c.push(self.key());
                    c.push(self.value());
                }
                if self.rng.gen_ratio(1, 10) {
                    c.pop();
                }
                c
            }
            32 => {
                let mut c = s(&["MSETNX"]);
                for _ in 0..self.rng.gen_range(1..4) {
                    c.push(self.key());
                    c.push(self.value());
                }
                c
            }
            33..=35 => s(&["APPEND", &k, &self.value()]),
            36 => s(&["STRLEN", &k]),
            37..=38 => {
                let a = self.int();
                let b = self.int();
                let name = if self.rng.gen_bool(0.5) {
                    "GETRANGE"
                } else {
                    "SUBSTR"
                };
                s(&[name, &k, &a, &b])
            }
            39..=40 => {
                let off = match self.rng.gen_range(0..5) {
                    0 => "-1".to_string(),
                    1 => "x".to_string(),
                    _ => self.rng.gen_range(0..40).to_string(),
                };
                s(&["SETRANGE", &k, &off, &self.value()])
            }
            41..=44 => s(&["INCR", &k]),
            45..=46 => s(&["DECR", &k]),
            47..=49 => s(&["INCRBY", &k, &self.int()]),
            50..=51 => s(&["DECRBY", &k, &self.int()]),
            52..=54 => s(&["INCRBYFLOAT", &k, &self.float()]),
            55..=57 => {
                let name = ["DEL", "UNLINK", "EXISTS", "TOUCH"]
                    .choose(&mut self.rng)
                    .copied()
                    .unwrap_or("DEL");
                let mut c = s(&[name]);
                for _ in 0..self.rng.gen_range(1..5) {
                    c.push(self.key());
                }
                c
            }
            58..=59 => s(&["TYPE", &k]),
            60..=65 => {
                let (name, ms, abs) = *[
                    ("EXPIRE", false, false),
                    ("PEXPIRE", true, false),
                    ("EXPIREAT", false, true),
                    ("PEXPIREAT", true, true),
                ]
                .choose(&mut self.rng)
                .expect("non-empty");
                let mut c = s(&[name, &k, &self.expire_arg(ms, abs)]);
                for _ in 0..self.rng.gen_range(0..3) {
                    c.push(
                        ["NX", "XX", "GT", "LT", "YY"]
                            .choose(&mut self.rng)
                            .copied()
                            .unwrap_or("NX")
                            .to_string(),
                    );
                }
                c
            }
            66..=71 => {
                let name = ["TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"]
                    .choose(&mut self.rng)
                    .copied()
                    .unwrap_or("TTL");
                s(&[name, &k])
            }
            72..=73 => s(&["PERSIST", &k]),
            74..=75 => s(&["DBSIZE"]),
            76..=77 => s(&[
                "KEYS",
                ["*", "k1*", "{tag}*", "k?", "*[0-3]"]
                    .choose(&mut self.rng)
                    .copied()
                    .unwrap_or("*"),
            ]),
            78 => s(&[
                "SELECT",
                ["0", "1", "0", "99", "x"]
                    .choose(&mut self.rng)
                    .copied()
                    .unwrap_or("0"),
            ]),
            79 => s(&["ECHO", &self.value()]),
            80 => s(&["PING"]),
            81 => s(&["PING", &self.value()]),
            82 => s(&["NOSUCHCMD", &k]),
            83 => s(&[["GET", "SET", "INCR", "EXPIRE", "MGET", "TTL"]
                .choose(&mut self.rng)
                .copied()
                .unwrap_or("GET")]),
            84 => s(&["GET", &k, "extra"]),
            85 => match self.rng.gen_range(0..12) {
                0 => s(&["FLUSHDB"]),
                1 => s(&["FLUSHDB", "ASYNC"]),
                2 => s(&["FLUSHDB", "BOGUS"]),
                3 => s(&["FLUSHALL", "SYNC", "x"]),
                4 => s(&[
                    "DEBUG",
                    "POPULATE",
                    "30",
                    "k",
                    ["0", "5", "12"]
                        .choose(&mut self.rng)
                        .copied()
                        .unwrap_or("0"),
                ]),
                5 => s(&["DEBUG", "POPULATE", "25"]),
                _ => s(&["PING"]),
            },
            86..=89 => s(&["SET", &k, &self.rng.gen_range(-5i64..5).to_string()]),
            90..=92 => s(&["INCRBY", &k, &self.rng.gen_range(-3i64..3).to_string()]),
            _ => s(&["GET", &k]),
        };
        if self.rng.gen_ratio(1, 50) {
            c[0] = c[0].to_lowercase();
        }
        self.history.push(c.clone());
        c
    }
}

/// Returns the integer of a `:n` reply.
fn int_reply(r: &[u8]) -> Option<i64> {
    std::str::from_utf8(r.strip_prefix(b":")?)
        .ok()?
        .trim_end()
        .parse()
        .ok()
}

/// Splits a flat array of bulk strings into its items (for KEYS).
fn sorted_items(r: &[u8]) -> Vec<Vec<u8>> {
    let text = r.to_vec();
    let mut items: Vec<Vec<u8>> = Vec::new();
    let mut pos = text
        .iter()
        .position(|&b| b == b'\n')
        .map_or(text.len(), |p| p + 1);
    while pos < text.len() {
        let end = text[pos..]
            .iter()
            .position(|&b| b == b'\n')
            .map_or(text.len(), |p| pos + p + 1);
        let len: usize = std::str::from_utf8(&text[pos + 1..end - 2])
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0);
        items.push(text[end..end + len].to_vec());
        pos = end + len + 2;
    }
    items.sort();
    items
}

fn equivalent(cmd: &[String], ours: &[u8], theirs: &[u8]) -> bool {
    if ours == theirs {
        return true;
    }
    match cmd[0].to_ascii_uppercase().as_str() {
        "KEYS" => ours[..1] == theirs[..1] && sorted_items(ours) == sorted_items(theirs),
        name @ ("TTL" | "PTTL" | "EXPIRETIME" | "PEXPIRETIME") => {
            let tolerance = if name.starts_with('P') { 1000 } else { 1 };
            matches!((int_reply(ours), int_reply(theirs)), (Some(a), Some(b)) if a >= 0 && b >= 0 && (a - b).abs() <= tolerance)
        }
        _ => false,
    }
}

/// Every key a full SCAN iteration returns (cursors differ between servers by design).
fn scan_all(c: &mut Raw, options: &[String]) -> Vec<Vec<u8>> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    loop {
        let mut cmd = vec!["SCAN".to_string(), cursor.clone()];
        cmd.extend_from_slice(options);
        let reply = c.cmd(&cmd);
        // *2 $n cursor *m keys...
        let text = reply.clone();
        let mut lines = text.split(|&b| b == b'\n');
        lines.next();
        lines.next();
        cursor = String::from_utf8_lossy(lines.next().unwrap_or_default())
            .trim_end()
            .to_string();
        let rest_start = reply
            .windows(2)
            .enumerate()
            .filter(|(_, w)| w == b"\r\n")
            .nth(2)
            .map_or(reply.len(), |(i, _)| i + 2);
        keys.extend(sorted_items(&reply[rest_start..]));
        if cursor == "0" {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    keys
}

/// SCAN (full iterations, compared as sets) and RANDOMKEY (null exactly when empty).
fn compare_iteration(gen: &mut Gen, redis: &mut Raw, ours: &mut Raw, label: &str) {
    let mut options = Vec::new();
    if gen.rng.gen_bool(0.5) {
        options.extend([
            "MATCH".to_string(),
            ["k1*", "{tag}*", "*", "k?"]
                .choose(&mut gen.rng)
                .copied()
                .unwrap_or("*")
                .to_string(),
        ]);
    }
    if gen.rng.gen_bool(0.3) {
        options.extend(["TYPE".to_string(), "string".to_string()]);
    }
    options.extend(["COUNT".to_string(), gen.rng.gen_range(1..20).to_string()]);
    assert_eq!(
        scan_all(ours, &options),
        scan_all(redis, &options),
        "{label}: SCAN {options:?}"
    );
    // RANDOMKEY lazily deletes the logically expired keys it happens to draw, a random
    // change each server makes differently: probe it only when no such key exists.
    let live = sorted_items(&redis.cmd(&["KEYS", "*"])).len();
    if int_reply(&redis.cmd(&["DBSIZE"])) != Some(live as i64) {
        return;
    }
    let (a, b) = (redis.cmd(&["RANDOMKEY"]), ours.cmd(&["RANDOMKEY"]));
    assert_eq!(
        a == b"$-1\r\n" || a == b"_\r\n",
        b == b"$-1\r\n" || b == b"_\r\n",
        "{label}: RANDOMKEY"
    );
}

fn run_stream(gen: &mut Gen, redis: &mut Raw, ours: &mut Raw, count: usize, label: &str) {
    let mut sent = 0;
    let mut chunks = 0;
    while sent < count {
        let cmds: Vec<Vec<String>> = (0..CHUNK).map(|_| gen.command()).collect();
        chunks += 1;
        // Some chunks run a span of their commands as one MULTI/EXEC transaction.
        let tx = diff::transaction_span(chunks, cmds.len());
        let first = gen.history.len() - cmds.len();
        if let Some((start, end)) = tx {
            gen.history.insert(first + end, vec!["EXEC".into()]);
            gen.history.insert(first + start, vec!["MULTI".into()]);
        }
        let slices: Vec<&[String]> = cmds.iter().map(|c| c.as_slice()).collect();
        let wire = diff::batch_wire(&slices, tx);
        redis.send(&wire);
        ours.send(&wire);
        for (i, c) in cmds.iter().enumerate() {
            // The command's place in the history, past the MULTI inserted before it.
            let at = first + i + usize::from(tx.is_some_and(|(start, _)| start <= i));
            if tx.is_some_and(|(start, _)| start == i) {
                let multi = ["MULTI".to_string()];
                let (theirs, mine) = (redis.reply(), ours.reply());
                check(gen, label, sent, &multi, &mine, &theirs, at - 1, false);
            }
            let (theirs, mine) = (redis.reply(), ours.reply());
            check(gen, label, sent, c, &mine, &theirs, at, false);
            sent += 1;
            if let Some((start, end)) = tx.filter(|&(_, end)| end == i + 1) {
                let (theirs, mine) = (redis.reply(), ours.reply());
                let exec = ["EXEC".to_string()];
                let agree = diff::exec_agrees(&cmds[start..end], &mine, &theirs, |c, a, b| {
                    equivalent(c, a, b)
                });
                check(gen, label, sent, &exec, &mine, &theirs, at + 1, agree);
            }
        }
        if tx.is_some() {
            gen.seen.sample(redis);
        }
        if gen.rng.gen_ratio(1, 8) {
            compare_iteration(gen, redis, ours, label);
        }
    }
}

/// Asserts that two replies to `c` (at `at` in the history) are equivalent, or `agreed`
/// already; on a difference prints the key's history and dumps the stream (DIFF_DUMP).
#[allow(clippy::too_many_arguments)]
fn check(
    gen: &Gen,
    label: &str,
    sent: usize,
    c: &[String],
    mine: &[u8],
    theirs: &[u8],
    at: usize,
    agreed: bool,
) {
    if agreed || equivalent(c, mine, theirs) {
        return;
    }
    if let Ok(path) = std::env::var("DIFF_DUMP") {
        let text: Vec<String> = gen.history.iter().map(|c| c.join("\u{1}")).collect();
        let _ = std::fs::write(path, text.join("\n"));
    }
    if c.len() > 1 {
        eprintln!("history of {}:", c[1]);
        for h in gen.history[..=at]
            .iter()
            .filter(|h| h.len() > 1 && h[1..].contains(&c[1]))
        {
            eprintln!("  {h:?}");
        }
    } else {
        let from = at.saturating_sub(10);
        eprintln!("commands before it: {:?}", &gen.history[from..=at]);
    }
    panic!(
        "{label}: command #{sent} {c:?}\n redis:     {:?}\n damselfly: {:?}",
        String::from_utf8_lossy(theirs),
        String::from_utf8_lossy(mine)
    );
}

fn same_replies_as_redis(b: Backend, threads: usize) {
    let redis_server = Server::redis();
    let ours_server = Server::start_with(b, threads, &[]);
    let mut redis = redis_server.raw();
    let mut ours = ours_server.raw();
    // Keys set with an expiry already in the past stay until touched or actively expired;
    // active expiry runs on each server's own clock, so it is off and only lazy expiry (which
    // both apply on access, deterministically) removes them.
    for c in [&mut redis, &mut ours] {
        assert_eq!(c.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), b"+OK\r\n");
    }
    let now_secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let mut gen = Gen {
        rng: StdRng::seed_from_u64(0xDA5E_1F1E),
        now_secs,
        history: Vec::new(),
        seen: diff::KeysSeen::default(),
    };
    run_stream(&mut gen, &mut redis, &mut ours, COMMANDS_RESP2, "RESP2");
    for c in [&mut redis, &mut ours] {
        let hello = c.cmd(&["HELLO", "3"]);
        assert!(hello.starts_with(b"%7"));
    }
    run_stream(&mut gen, &mut redis, &mut ours, COMMANDS_RESP3, "RESP3");
    // A full SCAN sees exactly what KEYS sees, on both servers (checks the SCAN walk itself).
    for c in [&mut redis, &mut ours] {
        c.cmd(&["SELECT", "0"]);
        let all = sorted_items(&c.cmd(&["KEYS", "*"]));
        assert!(!all.is_empty());
        assert_eq!(scan_all(c, &["COUNT".to_string(), "3".to_string()]), all);
    }
    gen.seen.assert_on_every_shard(threads);
    // The final state matches too: keys, values and TTLs.
    for db in ["0", "1"] {
        redis.cmd(&["SELECT", db]);
        ours.cmd(&["SELECT", db]);
        if let Some(difference) = common::diff::state_difference(&mut redis, &mut ours) {
            panic!("final state of db {db} differs: {difference}");
        }
    }
}

thread_count_tests!(same_replies_as_redis);
