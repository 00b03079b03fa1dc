//! What the server reports of its memory (docs/memory.md), on the real binary under both
//! backends: INFO memory's fields and MEMORY STATS's keys in Redis 7.0's order, compared with
//! redis-server holding the same data; the figures consistent with each other and with the
//! data (growing with it, given back after FLUSHALL); MEMORY's subcommands and errors against
//! redis-server; DEBUG OBJECT's fields; RESTORE's IDLETIME and FREQ.

mod common;

use common::diff::{parse, Node};
use common::{info_field, Backend, Pair, Raw, Server};

/// Both servers, started fresh, and a connection to each.
fn start_pair(b: Backend) -> (Server, Server, Pair) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let pair = Pair::connect(&redis, &ours);
    (redis, ours, pair)
}

/// The same data in both: strings, a list, a hash, keys with TTLs, two databases.
fn load(pair: &mut Pair) {
    for c in [&mut pair.redis, &mut pair.ours] {
        assert_eq!(c.cmd(&["DEBUG", "POPULATE", "3000"]), b"+OK\r\n");
        c.cmd(&["RPUSH", "list", "a", "b", "c"]);
        c.cmd(&["HSET", "hash", "f", "v"]);
        c.cmd(&["SET", "ttl", "v", "EX", "1000"]);
        c.cmd(&["SELECT", "3"]);
        c.cmd(&["SET", "other", "v"]);
        c.cmd(&["SELECT", "0"]);
    }
}

/// A bulk string's or an integer's text.
fn text(n: &Node) -> String {
    match n.kind() {
        b'$' => String::from_utf8_lossy(&n.body)
            .trim_end_matches("\r\n")
            .to_owned(),
        _ => String::from_utf8_lossy(&n.head[1..]).trim().to_owned(),
    }
}

/// MEMORY STATS as (key, value) pairs; nested maps (db.N) as their own pairs' text.
fn memory_stats(c: &mut Raw) -> Vec<(String, String)> {
    let reply = parse(&c.cmd(&["MEMORY", "STATS"]));
    reply
        .items
        .chunks(2)
        .map(|kv| {
            let value = if kv[1].items.is_empty() {
                text(&kv[1])
            } else {
                kv[1].items.iter().map(text).collect::<Vec<_>>().join(" ")
            };
            (text(&kv[0]), value)
        })
        .collect()
}

fn stat(stats: &[(String, String)], key: &str) -> f64 {
    stats
        .iter()
        .find(|(k, _)| k == key)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("MEMORY STATS {key}"))
}

fn info_names(c: &mut Raw) -> Vec<String> {
    let reply = c.cmd(&["INFO", "memory"]);
    String::from_utf8_lossy(&reply)
        .lines()
        .filter_map(|l| l.split_once(':').map(|(k, _)| k.to_owned()))
        .collect()
}

fn memory(c: &mut Raw, field: &str) -> u64 {
    info_field(c, "memory", field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {field}"))
}

/// INFO memory and MEMORY STATS name the same fields in the same order as Redis with the
/// same data, and their figures agree with each other.
fn fields_like_redis(b: Backend) {
    let (_r, _o, mut pair) = start_pair(b);
    load(&mut pair);
    assert_eq!(info_names(&mut pair.ours), info_names(&mut pair.redis));
    let ours = memory_stats(&mut pair.ours);
    let theirs = memory_stats(&mut pair.redis);
    let keys = |s: &[(String, String)]| s.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&ours), keys(&theirs));
    // Databases 0 and 3 hold keys; their maps have Redis's three fields.
    for (k, v) in ours.iter().filter(|(k, _)| k.starts_with("db.")) {
        let fields: Vec<&str> = v.split(' ').step_by(2).collect();
        assert_eq!(
            fields,
            [
                "overhead.hashtable.main",
                "overhead.hashtable.expires",
                "overhead.hashtable.slot-to-keys"
            ],
            "{k}"
        );
    }
    let total = stat(&ours, "total.allocated");
    assert_eq!(
        stat(&ours, "overhead.total") + stat(&ours, "dataset.bytes"),
        total
    );
    assert_eq!(stat(&ours, "keys.count"), 3004.0);
    let per_key = ((total - stat(&ours, "startup.allocated")).max(0.0) / 3004.0).floor();
    assert_eq!(stat(&ours, "keys.bytes-per-key"), per_key);
    assert!(stat(&ours, "peak.allocated") >= total);
    let active = stat(&ours, "allocator.active");
    let allocated = stat(&ours, "allocator.allocated");
    assert_eq!(
        stat(&ours, "allocator-fragmentation.bytes"),
        active - allocated
    );
    let ratio = stat(&ours, "allocator-fragmentation.ratio");
    assert!((ratio - active / allocated).abs() < 1e-3, "{ratio}");
    // INFO's figures from one read agree.
    let info = String::from_utf8_lossy(&pair.ours.cmd(&["INFO", "memory"])).into_owned();
    let field = |name: &str| -> u64 {
        let line = info
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")));
        line.and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name}"))
    };
    // What the program holds: the arenas' figure less the thread caches' free objects.
    assert!(field("used_memory") <= field("allocator_allocated"));
    assert_eq!(
        field("used_memory_overhead") + field("used_memory_dataset"),
        field("used_memory")
    );
    assert!(field("allocator_active") >= field("allocator_allocated"));
    assert!(field("used_memory_rss") > field("used_memory"));
    assert!(field("used_memory_peak") >= field("used_memory"));
    assert_eq!(
        info_field(&mut pair.ours, "memory", "mem_allocator").as_deref(),
        Some("jemalloc-5.3.0")
    );
}

/// used_memory grows with the data by about what the keys take, and FLUSHALL gives it back.
fn figures_follow_the_data(b: Backend) {
    let s = Server::start(b, &[]);
    let mut c = s.raw();
    let empty = memory(&mut c, "used_memory");
    assert_eq!(memory(&mut c, "used_memory_dataset"), 0);
    assert_eq!(
        c.cmd(&["DEBUG", "POPULATE", "100000", "key", "100"]),
        b"+OK\r\n"
    );
    let full = memory(&mut c, "used_memory");
    let dataset = memory(&mut c, "used_memory_dataset");
    // 100,000 records of at least 112 bytes, and their table.
    assert!(dataset >= 100_000 * 112, "dataset {dataset}");
    assert!(
        full - empty > dataset,
        "{empty} -> {full}, dataset {dataset}"
    );
    assert!(
        full - empty < dataset * 3 / 2,
        "{empty} -> {full}, dataset {dataset}"
    );
    let stats = memory_stats(&mut c);
    let per_key = stat(&stats, "keys.bytes-per-key");
    assert!((112.0..200.0).contains(&per_key), "{per_key} B/key");
    assert_eq!(c.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(memory(&mut c, "used_memory_dataset"), 0);
    let after = memory(&mut c, "used_memory");
    assert!(
        full - after > dataset * 9 / 10,
        "{full} -> {after} after FLUSHALL"
    );
    assert!(memory(&mut c, "used_memory_peak") >= full);
    assert_eq!(c.cmd(&["MEMORY", "PURGE"]), b"+OK\r\n");
}

/// MEMORY's subcommands, arities and errors as Redis replies them.
fn subcommands_like_redis(b: Backend) {
    let (_r, _o, mut pair) = start_pair(b);
    load(&mut pair);
    for cmd in [
        &["MEMORY", "HELP"][..],
        &["MEMORY", "help"],
        &["MEMORY", "USAGE"],
        &["MEMORY", "USAGE", "nokey"],
        &["MEMORY", "USAGE", "list", "SAMPLES"],
        &["MEMORY", "USAGE", "list", "SAMPLES", "-1"],
        &["MEMORY", "USAGE", "list", "SAMPLES", "x"],
        &["MEMORY", "USAGE", "nokey", "SAMPLES", "x"],
        &["MEMORY", "USAGE", "list", "FOO"],
        &["MEMORY", "STATS", "x"],
        &["MEMORY", "DOCTOR", "x"],
        &["MEMORY", "MALLOC-STATS", "x"],
        &["MEMORY", "PURGE", "x"],
        &["MEMORY", "HELP", "x"],
        &["MEMORY", "PURGE"],
        &["MEMORY", "FOO"],
        &["MEMORY", "FOO", "x"],
        &["MEMORY"],
        // Both are under 5 MB: the doctor declines with the same words.
        &["MEMORY", "DOCTOR"],
        &["DEBUG", "OBJECT"],
        &["DEBUG", "OBJECT", "nokey"],
        &["DEBUG", "OBJECT", "a", "b"],
    ] {
        pair.same(cmd);
    }
    // MEMORY USAGE is an integer for present keys of every kind (sizes differ by design).
    for key in ["list", "hash", "ttl", "key:1"] {
        let reply = pair.ours.cmd(&["MEMORY", "USAGE", key, "SAMPLES", "0"]);
        assert_eq!(reply[0], b':', "{key}: {}", String::from_utf8_lossy(&reply));
    }
    let stats = pair.ours.cmd(&["MEMORY", "MALLOC-STATS"]);
    let stats = String::from_utf8_lossy(&stats);
    assert!(stats.contains("Begin jemalloc statistics"), "{stats}");
    assert!(stats.contains("End jemalloc statistics"), "{stats}");
}

/// With some data the doctor looks, and finds what Redis's doctor would from the figures.
fn doctor_reports_on_data(b: Backend) {
    let s = Server::start(b, &[]);
    let mut c = s.raw();
    c.cmd(&["DEBUG", "POPULATE", "100000", "key", "100"]);
    let report = String::from_utf8_lossy(&c.cmd(&["MEMORY", "DOCTOR"])).into_owned();
    assert!(
        report.contains("Hi Sam, I can't find any memory issue in your instance")
            || report
                .contains("Sam, I detected a few issues in this Redis instance memory implants"),
        "{report}"
    );
    // A peak 1.5x over what is left after deleting most keys is reported.
    c.cmd(&["FLUSHALL"]);
    c.cmd(&["DEBUG", "POPULATE", "40000", "key", "100"]);
    let report = String::from_utf8_lossy(&c.cmd(&["MEMORY", "DOCTOR"])).into_owned();
    assert!(report.contains(" * Peak memory: In the past this instance used more than 150% the memory that is currently using."), "{report}");
    assert!(report.ends_with("I'm here to keep you safe, Sam. I want to help you.\n\r\n"));
}

/// DEBUG OBJECT describes keys as Redis does: encoding, refcount, serialized length and the
/// quicklist fields of lists.
fn debug_object_like_redis(b: Backend) {
    let (_r, _o, mut pair) = start_pair(b);
    let long = "x".repeat(100);
    for c in [&mut pair.redis, &mut pair.ours] {
        c.cmd(&["RPUSH", "list", "a", "b", "c"]);
        c.cmd(&["SET", "str", "hello"]);
        c.cmd(&["SET", "long", &long]);
        c.cmd(&["SET", "int", "12"]);
        c.cmd(&["SET", "bigint", "123456"]);
        c.cmd(&["HSET", "hash", "f", "v"]);
        c.cmd(&["SADD", "set", "1", "2"]);
        c.cmd(&["ZADD", "zset", "1", "a"]);
    }
    // Everything but the address, the clock and the idle time.
    let fields = |c: &mut Raw, key: &str| -> Vec<String> {
        let line = String::from_utf8(c.cmd(&["DEBUG", "OBJECT", key])).unwrap();
        assert!(line.starts_with("+Value at:0x"), "{line}");
        line.trim_end()
            .split(' ')
            .filter(|f| !f.starts_with("at:") && !f.starts_with("lru") && !f.starts_with("+Value"))
            .map(str::to_owned)
            .collect()
    };
    for key in [
        "list", "str", "long", "int", "bigint", "hash", "set", "zset",
    ] {
        assert_eq!(
            fields(&mut pair.ours, key),
            fields(&mut pair.redis, key),
            "{key}"
        );
    }
}

/// RESTORE's IDLETIME sets the idle time under LRU and FREQ the counter under LFU.
fn restore_sets_access(b: Backend) {
    let s = Server::start(b, &["--maxmemory-policy", "allkeys-lru"]);
    let mut c = s.raw();
    c.cmd(&["SET", "k", "v"]);
    let dumped = parse(&c.cmd(&["DUMP", "k"]));
    let payload = &dumped.body[..dumped.body.len() - 2];
    let restore = |c: &mut Raw, key: &str, opt: &str, n: &str| {
        let args = [
            b"RESTORE",
            key.as_bytes(),
            b"0",
            payload,
            opt.as_bytes(),
            n.as_bytes(),
        ];
        c.cmd(&args)
    };
    assert_eq!(restore(&mut c, "idle", "IDLETIME", "1000"), b"+OK\r\n");
    let idle: u64 = String::from_utf8_lossy(&c.cmd(&["OBJECT", "IDLETIME", "idle"]))[1..]
        .trim()
        .parse()
        .unwrap();
    assert!((1000..1010).contains(&idle), "{idle}");
    c.cmd(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
    assert_eq!(restore(&mut c, "freq", "FREQ", "100"), b"+OK\r\n");
    assert_eq!(c.cmd(&["OBJECT", "FREQ", "freq"]), b":100\r\n");
    assert_eq!(
        restore(&mut c, "x", "FREQ", "256"),
        b"-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n"
    );
}

backend_tests!(
    fields_like_redis,
    figures_follow_the_data,
    subcommands_like_redis,
    doctor_reports_on_data,
    debug_object_like_redis,
    restore_sets_access,
);
