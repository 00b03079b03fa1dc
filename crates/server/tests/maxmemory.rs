//! maxmemory and noeviction on the real binary (docs/eviction.md): the configuration
//! parameters against redis-server 7.0 (values, units, ranges, error texts, INFO's lines),
//! the OOM rules against redis-server (plain commands, MULTI at queue time and at EXEC,
//! scripts with and without a shebang, allow-oom, no-writes, functions), the `denyoom` flags
//! COMMAND INFO prints, the time-over-the-limit counters, and a fill past the limit by
//! pipelining clients that must stop close to it without losing an acknowledged write (also
//! with 3 and 4 shards). Each runs under both backends.
//!
//! Both servers count all they allocate against the limit (Damselfly samples what is not
//! data every tick), so `maxmemory 1` puts either over it at once; both are loaded with the
//! same keys first all the same, so the data is the same when the limit bites.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::diff::{parse, Node};
use common::{assert_same, bulk, cmds, encode, info_field, Backend, Pair, Raw, Server};

const OOM: &[u8] = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n";

/// Every value each parameter is set to: good and bad ones, units, edges of the ranges.
const SETTINGS: &[(&str, &[&str])] = &[
    (
        "maxmemory",
        &[
            "1k",
            "1kb",
            "1K",
            "1KB",
            "1kB",
            "1m",
            "1mb",
            "1g",
            "1gb",
            "1b",
            "10B",
            "100",
            "00012",
            "-1",
            "abc",
            "1.5m",
            "",
            "1tb",
            "1t",
            "kb",
            "1kbb",
            " 10",
            "10 ",
            "+5",
            "0x10",
            "1 kb",
            "18446744073709551615",
            "18446744073709551616",
            "9999999999999999999999",
            "18446744073709551616k",
            "20000000000000000000kb",
            "0",
        ],
    ),
    (
        "maxmemory-policy",
        &[
            "allkeys-lru",
            "ALLKEYS-LFU",
            "allkeys-random",
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
            "lru",
            "",
            "noeviction",
        ],
    ),
    (
        "maxmemory-samples",
        &[
            "-1",
            "0",
            "1",
            "64",
            "2147483647",
            "2147483648",
            "abc",
            "1k",
            "+5",
            "05",
            "-0",
            "1.5",
            "5",
        ],
    ),
    (
        "maxmemory-eviction-tenacity",
        &["-1", "0", "100", "101", "abc", "1k", "10"],
    ),
    (
        "lfu-log-factor",
        &["-1", "0", "255", "2147483647", "2147483648", "abc", "10"],
    ),
    (
        "lfu-decay-time",
        &["-1", "0", "1000", "2147483647", "2147483648", "x", "1"],
    ),
    (
        "maxmemory-clients",
        &[
            "10%",
            "100%",
            "101%",
            "0%",
            "-1%",
            "%",
            "1k",
            "5mb",
            "",
            "abc",
            "1.5",
            "18446744073709551615",
            "9223372036854775808",
            "0",
        ],
    ),
];

/// CONFIG SET and GET of every maxmemory parameter, and INFO's maxmemory lines, as Redis.
fn config_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let mut pair = Pair::connect(&redis, &ours);
    for (name, values) in SETTINGS {
        pair.same(&["CONFIG", "GET", name]);
        for value in *values {
            pair.same(&["CONFIG", "SET", name, value]);
            pair.same(&["CONFIG", "GET", name]);
        }
    }
    pair.same(&["CONFIG", "SET", "maxmemory", "1", "maxmemory", "2"]);
    // INFO memory's lines for the limit and the policy.
    for (limit, policy) in [
        ("0", "noeviction"),
        ("20mb", "allkeys-lru"),
        ("1", "volatile-ttl"),
        ("1000", "noeviction"),
        ("2000000000000000", "noeviction"),
        ("18446744073709551615", "noeviction"),
        ("0", "noeviction"),
    ] {
        pair.same(&["CONFIG", "SET", "maxmemory", limit]);
        pair.same(&["CONFIG", "SET", "maxmemory-policy", policy]);
        for field in ["maxmemory", "maxmemory_human", "maxmemory_policy"] {
            assert_eq!(
                info_field(&mut pair.ours, "memory", field),
                info_field(&mut pair.redis, "memory", field),
                "{field} after maxmemory {limit}"
            );
        }
    }
    // (Both servers also count the moments spent over the tiny limits: their start-up
    // memory alone is over them.)
    for field in ["evicted_keys", "evicted_clients"] {
        assert_eq!(
            info_field(&mut pair.ours, "stats", field).as_deref(),
            Some("0"),
            "{field}"
        );
    }
}

/// A start-up flag and a config file line set the limit too, and a bad policy is refused.
fn config_at_start_up(b: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("maxmemory.conf");
    std::fs::write(&file, "maxmemory 2mb\nmaxmemory-policy volatile-lru\n").expect("write");
    let s = Server::start(
        b,
        &[
            file.to_str().expect("path"),
            "--maxmemory-samples",
            "9",
            "--lfu-log-factor",
            "3",
        ],
    );
    let mut c = s.raw();
    let get = |c: &mut Raw, name: &str| {
        let reply = c.cmd(&["CONFIG", "GET", name]);
        let node = parse(&reply);
        String::from_utf8_lossy(&node.items[1].body)
            .trim_end()
            .to_string()
    };
    assert_eq!(get(&mut c, "maxmemory"), "2097152");
    assert_eq!(get(&mut c, "maxmemory-policy"), "volatile-lru");
    assert_eq!(get(&mut c, "maxmemory-samples"), "9");
    assert_eq!(get(&mut c, "lfu-log-factor"), "3");
    let refused = common::start_refused(dir.path(), &["--maxmemory-policy", "lru"]);
    assert!(
        refused.contains("argument(s) must be one of the following"),
        "{refused}"
    );
}

/// Loads the same data into both servers and puts both over the limit.
fn load_and_limit(pair: &mut Pair) {
    pair.same(&["DEBUG", "POPULATE", "2000"]);
    pair.same(&["SET", "k", "v"]);
    pair.same(&["SET", "k2", "v"]);
    pair.same(&["RPUSH", "list", "a", "b"]);
    pair.same(&["CONFIG", "SET", "maxmemory", "1"]);
}

/// Over the limit, commands that may grow memory get OOM; reads, deletes and the other
/// writes keep working, as in Redis.
fn plain_commands_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let mut pair = Pair::connect(&redis, &ours);
    load_and_limit(&mut pair);
    let refused = cmds(&[
        &["SET", "a", "b"],
        &["SET", "key:1", "x"],
        &["INCR", "n"],
        &["INCRBY", "key:2", "1"],
        &["LPUSH", "l", "x"],
        &["RPUSH", "list", "c"],
        &["APPEND", "k", "x"],
        &["SETRANGE", "k", "0", "x"],
        &["MSET", "a", "1", "b", "2"],
        &["MSET", "{t}a", "1", "{t}b", "2"],
        &["HSET", "h", "f", "v"],
        &["SADD", "s", "m"],
        &["ZADD", "z", "1", "m"],
        &["PFADD", "hll", "a"],
        &["SETBIT", "bits", "7", "1"],
        &["LSET", "list", "0", "x"],
        &["SUNIONSTORE", "dest", "s", "t"],
        &["COPY", "k", "kcopy"],
        &["RESTORE", "r", "0", "x"],
        &["GETSET", "k", "x"],
        &["BLMOVE", "list", "other", "LEFT", "LEFT", "0"],
    ]);
    for c in &refused {
        let reply = pair.same(&c.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(reply, OOM, "{c:?}");
    }
    assert_same(
        &mut pair.redis,
        &mut pair.ours,
        &cmds(&[
            &["GET", "k"],
            &["GET", "key:7"],
            &["MGET", "key:1", "key:2", "nosuch"],
            &["EXISTS", "k", "key:3"],
            &["LRANGE", "list", "0", "-1"],
            &["EXPIRE", "k2", "100"],
            &["PERSIST", "k2"],
            &["DEL", "k2"],
            &["UNLINK", "nosuch"],
            &["GETDEL", "key:4"],
            &["LPOP", "list"],
            &["RENAME", "key:5", "renamed"],
            &["GET", "renamed"],
            &["DBSIZE"],
            &["PING"],
            &["PUBLISH", "channel", "x"],
            &["SELECT", "1"],
            &["SELECT", "0"],
            &["FLUSHDB"],
            // Nothing is left, but Redis's own memory stays over 1 byte: so does the limit
            // here after a write.
            &["CONFIG", "SET", "maxmemory", "0"],
            &["SET", "a", "b"],
            &["CONFIG", "SET", "maxmemory", "1"],
            &["SET", "a", "c"],
            &["GET", "a"],
            &["CONFIG", "SET", "maxmemory", "0"],
            &["SET", "a", "d"],
        ]),
    );
    // Refusals count as rejected calls and OOM errors.
    let stats = String::from_utf8_lossy(&pair.ours.cmd(&["INFO", "commandstats"])).into_owned();
    let set = stats
        .lines()
        .find(|l| l.starts_with("cmdstat_set:"))
        .expect("cmdstat_set");
    assert!(set.contains("rejected_calls=3,"), "{set}");
    let errors = info_field(&mut pair.ours, "errorstats", "errorstat_OOM").expect("OOM errors");
    assert_eq!(errors, format!("count={}", refused.len() + 1));
}

/// MULTI over the limit: every queued command is refused and EXEC aborts; a limit crossed
/// after queueing makes EXEC abort when it queued a write that may grow memory, and run when
/// it queued none.
fn transactions_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let mut pair = Pair::connect(&redis, &ours);
    let mut admin = Pair::connect(&redis, &ours);
    pair.same(&["DEBUG", "POPULATE", "2000"]);
    // Queued under the limit, crossed before EXEC.
    pair.same(&["MULTI"]);
    pair.same(&["SET", "q", "1"]);
    pair.same(&["GET", "key:1"]);
    admin.same(&["CONFIG", "SET", "maxmemory", "1"]);
    pair.same(&["EXEC"]);
    pair.same(&["GET", "q"]);
    admin.same(&["CONFIG", "SET", "maxmemory", "0"]);
    pair.same(&["MULTI"]);
    pair.same(&["GET", "key:1"]);
    pair.same(&["DEL", "key:2"]);
    pair.same(&["EXPIRE", "key:3", "100"]);
    admin.same(&["CONFIG", "SET", "maxmemory", "1"]);
    pair.same(&["EXEC"]);
    // Over the limit at queue time: every command but EXEC, DISCARD, QUIT and RESET.
    assert_same(
        &mut pair.redis,
        &mut pair.ours,
        &cmds(&[
            &["MULTI"],
            &["GET", "key:1"],
            &["EXEC"],
            &["MULTI"],
            &["DEL", "key:1"],
            &["EXEC"],
            &["MULTI"],
            &["SET", "x", "y"],
            &["PING"],
            &["MULTI"],
            &["WATCH", "x"],
            &["SELECT", "1"],
            &["EXEC"],
            &["SELECT", "0"],
            &["MULTI"],
            &["DISCARD"],
            &["MULTI"],
            &["RESET"],
            &["GET", "key:1"],
        ]),
    );
    pair.same(&["CONFIG", "SET", "maxmemory", "0"]);
    pair.same(&["MULTI"]);
    pair.same(&["SET", "x", "y"]);
    pair.same(&["EXEC"]);
}

/// Scripts over the limit: one without a shebang runs, but its first call that may grow
/// memory fails unless a write came before it; a shebang script is refused at the start
/// unless it declares allow-oom or no-writes; functions follow their flags; FUNCTION LOAD is
/// refused. Also inside EXEC, and for a function loaded after it was queued.
fn scripts_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let mut pair = Pair::connect(&redis, &ours);
    let mut admin = Pair::connect(&redis, &ours);
    let library = "#!lua name=lib\n\
        redis.register_function{function_name='w', callback=function(k) return redis.call('set', k[1], 'x') end}\n\
        redis.register_function{function_name='woom', callback=function(k) return redis.call('set', k[1], 'x') end, flags={'allow-oom'}}\n\
        redis.register_function{function_name='r', callback=function(k) return redis.call('get', k[1]) end, flags={'no-writes'}}";
    pair.same(&["FUNCTION", "LOAD", library]);
    load_and_limit(&mut pair);
    // FUNCTION LOAD may grow memory: refused before it finds the library exists.
    pair.same(&["FUNCTION", "LOAD", library]);
    assert_same(
        &mut pair.redis,
        &mut pair.ours,
        &cmds(&[
            &["EVAL", "return redis.call('set', 'a', 'b')", "0"],
            &["EVAL", "return redis.pcall('set', 'a', 'b')", "0"],
            &[
                "EVAL",
                "return redis.call('setnx', KEYS[1], 'b')",
                "1",
                "key:1",
            ],
            &["EVAL", "return redis.call('get', 'key:1')", "0"],
            &[
                "EVAL",
                "redis.call('del', 'nosuch'); return redis.call('set', 'a', 'b')",
                "0",
            ],
            &[
                "EVAL",
                "redis.call('expire', 'nosuch', 10); return redis.call('set', 'a', 'c')",
                "0",
            ],
            &[
                "EVAL",
                "redis.call('get', 'nosuch'); return redis.call('set', 'a', 'b')",
                "0",
            ],
            &[
                "EVAL",
                "redis.pcall('incr', 'key:1'); return redis.call('set', 'a', 'b')",
                "0",
            ],
            &["EVAL_RO", "return redis.call('get', 'a')", "0"],
            &["EVAL", "#!lua\nreturn redis.call('get', 'a')", "0"],
            &["EVAL_RO", "#!lua\nreturn redis.call('get', 'a')", "0"],
            &[
                "EVAL",
                "#!lua flags=allow-oom\nreturn redis.call('set', 'a', 'e')",
                "0",
            ],
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('get', 'a')",
                "0",
            ],
            &[
                "EVAL",
                "#!lua flags=no-writes\nreturn redis.call('set', 'a', 'b')",
                "0",
            ],
            &[
                "SCRIPT",
                "LOAD",
                "#!lua\nreturn redis.call('set', 'a', 'f')",
            ],
            &["EVALSHA", "bf2541aa43f10ba3eaff1ead40cccb37e920d7c9", "0"],
            &["EVALSHA", "0000000000000000000000000000000000000000", "0"],
            &["FCALL", "w", "1", "fa"],
            &["FCALL", "woom", "1", "fb"],
            &["FCALL", "r", "1", "fb"],
            &["FCALL_RO", "r", "1", "fb"],
            &["FCALL_RO", "w", "1", "fb"],
            &["FCALL", "nosuch", "0"],
            &[
                "FUNCTION",
                "LOAD",
                "#!lua name=lib2\nredis.register_function('f', function() return 1 end)",
            ],
            &["FUNCTION", "DELETE", "lib2"],
            &["SCRIPT", "LOAD", "return 1"],
            &["GET", "a"],
            &["GET", "fb"],
        ]),
    );
    // Queued under the limit, run by an EXEC over it.
    for script in [
        "#!lua\nreturn redis.call('set', 'a', 'g')",
        "return redis.call('set', 'a', 'h')",
        "return redis.call('get', 'a')",
    ] {
        admin.same(&["CONFIG", "SET", "maxmemory", "0"]);
        pair.same(&["MULTI"]);
        pair.same(&["EVAL", script, "0"]);
        admin.same(&["CONFIG", "SET", "maxmemory", "1"]);
        pair.same(&["EXEC"]);
    }
    // A function queued before it existed has no flags at queue time: EXEC runs, the
    // function is refused at its start.
    admin.same(&["CONFIG", "SET", "maxmemory", "0"]);
    admin.same(&["FUNCTION", "FLUSH"]);
    pair.same(&["MULTI"]);
    pair.same(&["FCALL", "w", "1", "fa"]);
    pair.same(&["FCALL", "r", "1", "fa"]);
    admin.same(&["FUNCTION", "LOAD", library]);
    admin.same(&["CONFIG", "SET", "maxmemory", "1"]);
    pair.same(&["EXEC"]);
    pair.same(&["GET", "fa"]);
}

/// COMMAND INFO prints `denyoom` for the commands Redis 7.0 flags so.
fn denyoom_flags_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let (mut r, mut o) = (redis.raw(), ours.raw());
    let names: Vec<String> = parse(&o.cmd(&["COMMAND"]))
        .items
        .iter()
        .map(|c| {
            String::from_utf8_lossy(&c.items[0].body)
                .trim_end()
                .to_string()
        })
        .collect();
    assert!(names.len() > 150, "{}", names.len());
    let denyoom = |node: &Node| {
        node.items[0].items[2]
            .items
            .iter()
            .any(|f| f.head == b"+denyoom\r\n")
    };
    let mut flagged = 0;
    for name in &names {
        let theirs = parse(&r.cmd(&["COMMAND", "INFO", name]));
        let mine = parse(&o.cmd(&["COMMAND", "INFO", name]));
        assert_eq!(denyoom(&mine), denyoom(&theirs), "{name}");
        flagged += usize::from(denyoom(&mine));
    }
    assert!(flagged > 40, "{flagged} commands flagged denyoom");
}

/// INFO's time over the limit: counts while over, stops once under (the tick notices
/// without any command), and CONFIG RESETSTAT clears it.
fn exceeded_time(b: Backend) {
    let s = Server::start(b, &[]);
    let mut c = s.raw();
    let ms = |c: &mut Raw, field: &str| -> u64 {
        info_field(c, "stats", field)
            .and_then(|v| v.parse().ok())
            .expect(field)
    };
    c.cmd(&["DEBUG", "POPULATE", "1000"]);
    c.cmd(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(c.cmd(&["SET", "a", "b"]), OOM);
    std::thread::sleep(Duration::from_millis(300));
    assert!(ms(&mut c, "current_eviction_exceeded_time") >= 250);
    c.cmd(&["CONFIG", "SET", "maxmemory", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(ms(&mut c, "current_eviction_exceeded_time"), 0);
    let total = ms(&mut c, "total_eviction_exceeded_time");
    assert!((250..5000).contains(&total), "{total}");
    c.cmd(&["CONFIG", "RESETSTAT"]);
    assert_eq!(ms(&mut c, "total_eviction_exceeded_time"), 0);
    assert_eq!(ms(&mut c, "evicted_keys"), 0);
}

const LIMIT: u64 = 20 << 20;
const VALUE: usize = 1024;
const CLIENTS: usize = 32;
const BATCH: usize = 256;

/// What one filling client did: the keys acknowledged OK, and whether it saw OOM.
struct Filled {
    acked: Vec<String>,
    refused: usize,
}

/// Pipelines batches of SETs of 1 KB values until a batch meets OOM (or another client's did).
fn fill(port: u16, client: usize, stop: Arc<AtomicBool>) -> Filled {
    let mut c = Raw::tcp(port);
    let value = "v".repeat(VALUE);
    let mut filled = Filled {
        acked: Vec::new(),
        refused: 0,
    };
    let mut next = 0;
    while !stop.load(Ordering::Relaxed) {
        let keys: Vec<String> = (next..next + BATCH)
            .map(|i| format!("fill:{client}:{i}"))
            .collect();
        next += BATCH;
        let mut out = Vec::new();
        for k in &keys {
            out.extend(encode(&["SET", k.as_str(), value.as_str()]));
        }
        c.send(&out);
        for k in keys {
            match c.reply().as_slice() {
                b"+OK\r\n" => filled.acked.push(k),
                reply => {
                    assert_eq!(reply, OOM, "{k}");
                    filled.refused += 1;
                }
            }
        }
        if filled.refused > 0 {
            stop.store(true, Ordering::Relaxed);
        }
    }
    filled
}

/// 32 clients pipeline SETs of 1 KB values past a 20 MB limit: they get OOM once it is
/// reached; once one client has filled the room their buffers left, used memory (all the
/// allocator holds) is within a few percent of the limit,
/// every acknowledged key reads back, and deleting (or FLUSHALL) makes room again.
fn fill_stops_at_the_limit(b: Backend, threads: usize) {
    let s = Server::start_with(
        b,
        threads,
        &["--maxmemory", "20mb", "--maxmemory-policy", "noeviction"],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (port, stop) = (s.port, stop.clone());
            std::thread::spawn(move || fill(port, i, stop))
        })
        .collect();
    let filled: Vec<Filled> = clients
        .into_iter()
        .map(|h| h.join().expect("client"))
        .collect();
    assert!(started.elapsed() < Duration::from_secs(60));
    let acked: Vec<&String> = filled.iter().flat_map(|f| &f.acked).collect();
    assert!(filled.iter().any(|f| f.refused > 0));
    let mut c = s.raw();
    // Every acknowledged write is there; nothing refused is.
    assert_eq!(
        c.cmd(&["DBSIZE"]),
        format!(":{}\r\n", acked.len()).into_bytes()
    );
    let value = bulk(&"v".repeat(VALUE));
    for chunk in acked.chunks(500) {
        let mut mget = vec!["MGET"];
        mget.extend(chunk.iter().map(|k| k.as_str()));
        let reply = c.cmd(&mget);
        let items = parse(&reply).items;
        assert_eq!(items.len(), chunk.len());
        for (k, item) in chunk.iter().zip(items) {
            let mut got = item.head.clone();
            got.extend(&item.body);
            assert_eq!(got, value, "{k}");
        }
    }
    // The clients' buffers (and this client's MGET replies) counted toward the limit too:
    // with them gone, which the limit sees at the next tick's look at the allocator, writes
    // fit again until the keys take their place. Twice, a tick apart, so buffers freed
    // during the first round are seen too.
    let mut extra = 0;
    for _ in 0..2 {
        std::thread::sleep(Duration::from_millis(300));
        loop {
            let reply = c.cmd(&["SET", &format!("extra:{extra}"), &"v".repeat(VALUE)]);
            if reply == OOM {
                break;
            }
            assert_eq!(reply, b"+OK\r\n");
            extra += 1;
            assert!(extra < 20_000, "no OOM after {extra} more keys");
        }
    }
    let used: u64 = info_field(&mut c, "memory", "used_memory")
        .and_then(|v| v.parse().ok())
        .expect("used_memory");
    let shards: u64 = String::from_utf8_lossy(&c.cmd(&["INFO", "shards"]))
        .lines()
        .filter_map(|l| l.split("used_memory=").nth(1))
        .map(|v| {
            v.split(',')
                .next()
                .and_then(|n| n.parse::<u64>().ok())
                .expect("shard")
        })
        .sum();
    let ratio = used as f64 / LIMIT as f64;
    assert!(
        (0.97..=1.02).contains(&ratio),
        "used_memory {used} is {ratio:.4} of the limit"
    );
    // The limit holds for all the allocator holds, the keys being most of it.
    assert!(
        shards < used && shards > used / 2,
        "the shards' keys {shards} of {used}"
    );
    assert_eq!(c.cmd(&["GET", acked[0].as_str()]), value);
    // Deleting a few hundred KB makes room, on every shard's keys.
    let mut del = vec!["DEL"];
    del.extend(acked.iter().take(500).map(|k| k.as_str()));
    assert_eq!(c.cmd(&del), b":500\r\n");
    for k in ["after:1", "after:2", "after:3", "after:4"] {
        assert_eq!(c.cmd(&["SET", k, "x"]), b"+OK\r\n");
    }
    let stats = String::from_utf8_lossy(&c.cmd(&["INFO", "stats"])).into_owned();
    assert!(stats.contains("evicted_keys:0\r\n"), "{stats}");
    // Emptied, the server takes writes at once, before a tick samples the allocator again.
    assert_eq!(c.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", "after:flush", "x"]), b"+OK\r\n");
}

backend_tests!(
    config_like_redis,
    config_at_start_up,
    plain_commands_like_redis,
    transactions_like_redis,
    scripts_like_redis,
    denyoom_flags_like_redis,
    exceeded_time,
);
thread_count_tests!(fill_stops_at_the_limit);
