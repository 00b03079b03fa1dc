//! Atomicity across shards, on the real binary: concurrent bank transfers in MULTI/EXEC
//! against MGET readers, MSET against MGET, optimistic WATCH increments, and a differential
//! stream of transactions, WATCH, RENAME, COPY, MOVE and SWAPDB against Debian's
//! redis-server. Each runs under both backends.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use common::{encode, Backend, Raw, Server};
use damselfly_storage::shard_for_key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

const ACCOUNTS: usize = 64;
const START_BALANCE: i64 = 1000;
const TRANSFERS: usize = 100_000;
const WRITERS: usize = 8;
const READERS: usize = 4;

/// Parses `*n` followed by n integer-or-bulk items into integers.
fn int_items(reply: &[u8]) -> Vec<i64> {
    let text = String::from_utf8_lossy(reply);
    let mut lines = text.split("\r\n");
    let header = lines.next().unwrap_or_default();
    assert!(header.starts_with('*'), "not an array: {text:?}");
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if let Some(n) = line.strip_prefix(':') {
            out.push(n.parse().expect("int"));
        } else if line.starts_with('$') {
            out.push(lines.next().unwrap_or_default().parse().expect("bulk int"));
        }
    }
    out
}

fn bulk_items(reply: &[u8]) -> Vec<String> {
    let text = String::from_utf8_lossy(reply);
    let mut lines = text.split("\r\n").skip(1);
    let mut out = Vec::new();
    while let Some(line) = lines.next() {
        if line.starts_with('$') {
            out.push(lines.next().unwrap_or_default().to_string());
        }
    }
    out
}

fn account(i: usize) -> String {
    format!("acct:{i}")
}

/// 64 accounts over every shard; writers move money in MULTI/EXEC, readers MGET all of it:
/// no reader ever sees money in flight, and none is lost.
fn bank_invariant(b: Backend) {
    for threads in [2, 4] {
        let server = Server::start_with(b, threads, &[]);
        let shards: std::collections::HashSet<usize> = (0..ACCOUNTS)
            .map(|i| shard_for_key(account(i).as_bytes(), threads))
            .collect();
        assert_eq!(shards.len(), threads, "accounts cover every shard");
        let mut setup = server.raw();
        let mut mset = vec!["MSET".to_string()];
        for i in 0..ACCOUNTS {
            mset.extend([account(i), START_BALANCE.to_string()]);
        }
        assert_eq!(setup.cmd(&mset), b"+OK\r\n");
        let total = START_BALANCE * ACCOUNTS as i64;
        let done = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicU64::new(0));
        let mut mget = vec!["MGET".to_string()];
        mget.extend((0..ACCOUNTS).map(account));
        let readers: Vec<_> = (0..READERS)
            .map(|_| {
                let mut c = server.raw();
                let (done, reads, mget) = (done.clone(), reads.clone(), mget.clone());
                std::thread::spawn(move || {
                    while !done.load(Ordering::Relaxed) {
                        let sum: i64 = int_items(&c.cmd(&mget)).iter().sum();
                        assert_eq!(sum, total, "a reader saw money in flight");
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let mut c = server.raw();
                std::thread::spawn(move || {
                    let mut rng = StdRng::seed_from_u64(w as u64);
                    for _ in 0..TRANSFERS / WRITERS {
                        let from = account(rng.gen_range(0..ACCOUNTS));
                        let to = account(rng.gen_range(0..ACCOUNTS));
                        let amount = rng.gen_range(1..100).to_string();
                        let mut wire = encode(&["MULTI"]);
                        wire.extend(encode(&["DECRBY", &from, &amount]));
                        wire.extend(encode(&["INCRBY", &to, &amount]));
                        wire.extend(encode(&["EXEC"]));
                        c.send(&wire);
                        assert_eq!(c.reply(), b"+OK\r\n");
                        assert_eq!(c.reply(), b"+QUEUED\r\n");
                        assert_eq!(c.reply(), b"+QUEUED\r\n");
                        let exec = c.reply();
                        assert_eq!(int_items(&exec).len(), 2, "{exec:?}");
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().expect("writer");
        }
        done.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("reader");
        }
        assert!(reads.load(Ordering::Relaxed) > 0);
        let sum: i64 = int_items(&setup.cmd(&mget)).iter().sum();
        assert_eq!(sum, total, "money was lost ({threads} threads)");
    }
}

/// MSET of eight keys on different shards against MGET readers: a reader sees all eight
/// values of one MSET, never a mix.
fn mset_is_atomic(b: Backend) {
    let server = Server::start_with(b, 4, &[]);
    let keys: Vec<String> = (1..=8).map(|i| format!("m{i}")).collect();
    let shards: std::collections::HashSet<usize> = keys
        .iter()
        .map(|k| shard_for_key(k.as_bytes(), 4))
        .collect();
    assert!(shards.len() >= 3, "keys span shards");
    let mut setup = server.raw();
    let mut first = vec!["MSET".to_string()];
    for k in &keys {
        first.extend([k.clone(), "init".into()]);
    }
    assert_eq!(setup.cmd(&first), b"+OK\r\n");
    let done = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let mut c = server.raw();
            let done = done.clone();
            let mut mget = vec!["MGET".to_string()];
            mget.extend(keys.iter().cloned());
            std::thread::spawn(move || {
                let mut seen = 0;
                while !done.load(Ordering::Relaxed) {
                    let values = bulk_items(&c.cmd(&mget));
                    assert_eq!(values.len(), 8);
                    assert!(
                        values.iter().all(|v| *v == values[0]),
                        "MGET saw a partial MSET: {values:?}"
                    );
                    seen += 1;
                }
                seen
            })
        })
        .collect();
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let mut c = server.raw();
            let keys = keys.clone();
            std::thread::spawn(move || {
                for n in 0..4000 {
                    let mut mset = vec!["MSET".to_string()];
                    for k in &keys {
                        mset.extend([k.clone(), format!("w{w}-{n}")]);
                    }
                    assert_eq!(c.cmd(&mset), b"+OK\r\n");
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    done.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().expect("reader") > 0);
    }
}

/// Optimistic increments: the counter ends at exactly the number of EXECs that succeeded.
fn watch_increments(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let successes = Arc::new(AtomicU64::new(0));
    let aborts = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let mut c = server.raw();
            let (successes, aborts) = (successes.clone(), aborts.clone());
            std::thread::spawn(move || {
                let mut mine = 0;
                while mine < 300 {
                    assert_eq!(c.cmd(&["WATCH", "counter"]), b"+OK\r\n");
                    let current = c.cmd(&["GET", "counter"]);
                    let n: i64 = bulk_items(&[b"*1\r\n".as_slice(), &current].concat())
                        .first()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    let mut wire = encode(&["MULTI"]);
                    wire.extend(encode(&["SET", "counter", &(n + 1).to_string()]));
                    wire.extend(encode(&["EXEC"]));
                    c.send(&wire);
                    assert_eq!(c.reply(), b"+OK\r\n");
                    assert_eq!(c.reply(), b"+QUEUED\r\n");
                    match c.reply().as_slice() {
                        b"*1\r\n+OK\r\n" => {
                            mine += 1;
                            successes.fetch_add(1, Ordering::Relaxed);
                        }
                        b"*-1\r\n" => {
                            aborts.fetch_add(1, Ordering::Relaxed);
                        }
                        other => panic!("EXEC replied {:?}", String::from_utf8_lossy(other)),
                    }
                }
            })
        })
        .collect();
    for c in clients {
        c.join().expect("client");
    }
    let mut c = server.raw();
    let total = successes.load(Ordering::Relaxed);
    assert_eq!(total, 2400);
    assert_eq!(c.cmd(&["GET", "counter"]), common::bulk(&total.to_string()));
}

/// WATCH sees what other clients do to a key, on any shard: writes, expiry, FLUSHALL, RENAME
/// onto it; UNWATCH forgets; a key absent in a flushed database is not touched; CLIENT LIST
/// shows a client inside MULTI.
fn watch_sees_other_clients(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let (mut a, mut other) = (server.raw(), server.raw());
    let on_shard = |shard: usize| {
        (0..)
            .map(|i| format!("w{i}"))
            .find(|k| shard_for_key(k.as_bytes(), 2) == shard)
            .expect("a key")
    };
    let (k0, k1) = (on_shard(0), on_shard(1));
    let exec_after = |a: &mut Raw| -> Vec<u8> {
        assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
        assert_eq!(a.cmd(&["PING"]), b"+QUEUED\r\n");
        a.cmd(&["EXEC"])
    };
    const ABORTED: &[u8] = b"*-1\r\n";
    const RAN: &[u8] = b"*1\r\n+PONG\r\n";

    // A write by another client, to the key on either shard.
    for (written, quiet) in [(&k0, &k1), (&k1, &k0)] {
        assert_eq!(a.cmd(&["WATCH", &k0, &k1]), b"+OK\r\n");
        assert_eq!(other.cmd(&["SET", written, "x"]), b"+OK\r\n");
        assert_eq!(exec_after(&mut a), ABORTED, "write to {written}");
        assert_eq!(a.cmd(&["WATCH", quiet]), b"+OK\r\n");
        assert_eq!(exec_after(&mut a), RAN, "{quiet} was not touched");
    }
    // Expiry.
    assert_eq!(a.cmd(&["SET", &k0, "v", "PX", "50"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["WATCH", &k0]), b"+OK\r\n");
    std::thread::sleep(std::time::Duration::from_millis(150));
    assert_eq!(exec_after(&mut a), ABORTED, "expiry");
    // FLUSHALL touches existing watched keys only.
    assert_eq!(a.cmd(&["SET", &k1, "v"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["WATCH", &k1]), b"+OK\r\n");
    assert_eq!(other.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(exec_after(&mut a), ABORTED, "FLUSHALL");
    assert_eq!(a.cmd(&["WATCH", &k1]), b"+OK\r\n");
    assert_eq!(other.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(exec_after(&mut a), RAN, "FLUSHALL of a db without the key");
    // RENAME onto a watched key, from the other shard.
    assert_eq!(a.cmd(&["SET", &k0, "v"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["WATCH", &k1]), b"+OK\r\n");
    assert_eq!(other.cmd(&["RENAME", &k0, &k1]), b"+OK\r\n");
    assert_eq!(exec_after(&mut a), ABORTED, "RENAME onto it");
    // UNWATCH forgets.
    assert_eq!(a.cmd(&["WATCH", &k1]), b"+OK\r\n");
    assert_eq!(a.cmd(&["UNWATCH"]), b"+OK\r\n");
    assert_eq!(other.cmd(&["DEL", &k1]), b":1\r\n");
    assert_eq!(exec_after(&mut a), RAN, "after UNWATCH");
    // CLIENT LIST shows the client inside MULTI.
    assert_eq!(a.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(a.cmd(&["SET", &k0, "1"]), b"+QUEUED\r\n");
    let list = String::from_utf8_lossy(&other.cmd(&["CLIENT", "LIST"])).to_string();
    assert!(
        list.contains("flags=x db=0 sub=0 psub=0 ssub=0 multi=1 "),
        "{list}"
    );
    assert_eq!(a.cmd(&["DISCARD"]), b"+OK\r\n");
    let list = String::from_utf8_lossy(&other.cmd(&["CLIENT", "LIST"])).to_string();
    assert!(!list.contains("flags=x"), "{list}");
}

/// Commands for the differential transaction stream.
struct TxGen {
    rng: StdRng,
    in_multi: bool,
}

impl TxGen {
    fn key(&mut self) -> String {
        let n = self.rng.gen_range(0..8);
        if self.rng.gen_bool(0.2) {
            format!("{{t}}{n}")
        } else {
            format!("a{n}")
        }
    }

    fn command(&mut self) -> Vec<String> {
        let (k, k2, k3) = (self.key(), self.key(), self.key());
        let v = self.rng.gen_range(-5..50).to_string();
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let c = match self.rng.gen_range(0..60) {
            0..=3 => s(&["MULTI"]),
            4..=6 if self.in_multi => s(&["EXEC"]),
            7 if self.in_multi => s(&["DISCARD"]),
            8 => s(&["EXEC"]),
            9 => s(&["DISCARD"]),
            10..=11 => s(&["WATCH", &k, &k2]),
            12 => s(&["UNWATCH"]),
            13..=16 => s(&["SET", &k, &v]),
            17 => s(&["SET", &k, "text"]),
            18..=20 => s(&["GET", &k]),
            21..=23 => s(&["INCR", &k]),
            24 => s(&["INCRBY", &k, &v]),
            25 => s(&["DEL", &k, &k2]),
            26 => s(&["MSET", &k, &v, &k2, "x", &k3, "7"]),
            27 => s(&["MGET", &k, &k2, &k3]),
            28 => s(&["MSETNX", &k, &v, &k2, &v]),
            29 => s(&["EXISTS", &k, &k2, &k3]),
            30 => s(&["APPEND", &k, "z"]),
            31..=32 => s(&["RENAME", &k, &k2]),
            33 => s(&["RENAMENX", &k, &k2]),
            34 => s(&["COPY", &k, &k2]),
            35 => s(&["COPY", &k, &k2, "REPLACE"]),
            36 => s(&["COPY", &k, &k2, "DB", "1"]),
            37 => s(&["MOVE", &k, "1"]),
            38 => s(&["SWAPDB", "0", "1"]),
            39 => s(&[
                "SELECT",
                ["0", "1"].choose(&mut self.rng).copied().unwrap_or("0"),
            ]),
            40 => s(&["DBSIZE"]),
            41 => s(&["EXPIREAT", &k, "4102444800"]),
            42 => s(&["EXPIRETIME", &k]),
            43 => s(&["PERSIST", &k]),
            44 => s(&["NOSUCHCOMMAND", &k]),
            45 => s(&["GET"]),
            46 => s(&["SET", &k]),
            47 => s(&["COPY", &k, &k2, "DB", "x"]),
            48 => s(&["MOVE", &k, "99"]),
            49 => s(&["SWAPDB", "x", "1"]),
            50 => s(&["RENAME", &k, &k]),
            51 => s(&["FLUSHDB"]),
            52 => s(&["PING"]),
            53 => s(&["MULTI"]),
            54 => s(&["WATCH", &k]),
            55 => s(&["COPY", &k, &k]),
            _ => s(&["GET", &k]),
        };
        match c[0].as_str() {
            "MULTI" => self.in_multi = true,
            "EXEC" | "DISCARD" => self.in_multi = false,
            _ => {}
        }
        c
    }
}

/// One connection, the same stream to both servers; replies byte for byte equal.
fn transactions_match_redis(b: Backend, threads: usize) {
    let redis_server = Server::redis();
    let ours_server = Server::start_with(b, threads, &[]);
    let mut redis = redis_server.raw();
    let mut ours = ours_server.raw();
    let mut gen = TxGen {
        rng: StdRng::seed_from_u64(0x7EA5),
        in_multi: false,
    };
    let mut seen = common::diff::KeysSeen::default();
    let mut run = |redis: &mut Raw, ours: &mut Raw, count: usize, label: &str| {
        let mut history: Vec<Vec<String>> = Vec::new();
        for _ in 0..count / 20 {
            let cmds: Vec<Vec<String>> = (0..20).map(|_| gen.command()).collect();
            let wire: Vec<u8> = cmds.iter().flat_map(|c| encode(c)).collect();
            redis.send(&wire);
            ours.send(&wire);
            for c in &cmds {
                history.push(c.clone());
                let (theirs, mine) = (redis.reply(), ours.reply());
                if theirs != mine {
                    std::fs::write("/tmp/txhist.txt", format!("{history:?}")).ok();
                }
                assert!(
                    theirs == mine,
                    "{label}: after {:?}\n{c:?}\n redis:     {:?}\n damselfly: {:?}",
                    &history[history.len().saturating_sub(300)..],
                    String::from_utf8_lossy(&theirs),
                    String::from_utf8_lossy(&mine)
                );
            }
            if !gen.in_multi {
                seen.sample(redis);
            }
        }
    };
    run(&mut redis, &mut ours, 12_000, "RESP2");
    for c in [&mut redis, &mut ours] {
        // The stream may have ended inside MULTI.
        c.cmd(&["DISCARD"]);
        assert!(c.cmd(&["HELLO", "3"]).starts_with(b"%7"));
    }
    run(&mut redis, &mut ours, 6_000, "RESP3");
    // The final state matches too.
    for c in [&mut redis, &mut ours] {
        c.cmd(&["DISCARD"]);
    }
    seen.assert_on_every_shard(threads);
    for db in ["0", "1"] {
        let (a, b) = (redis.cmd(&["SELECT", db]), ours.cmd(&["SELECT", db]));
        assert_eq!(a, b);
        if let Some(difference) = common::diff::state_difference(&mut redis, &mut ours) {
            panic!("final state of db {db} differs: {difference}");
        }
    }
}

backend_tests!(
    bank_invariant,
    mset_is_atomic,
    watch_increments,
    watch_sees_other_clients,
);
thread_count_tests!(transactions_match_redis);
