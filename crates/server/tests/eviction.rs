//! Eviction on the real binary (docs/eviction.md): clients write far past `maxmemory` under
//! each policy and never see OOM while the right class of keys goes (volatile-* never takes
//! a key without a TTL, volatile-ttl the nearest deadline first, the LRU and LFU policies the
//! keys not used); lowering `maxmemory` evicts at once; evictions are `evicted` events; and
//! OBJECT FREQ / IDLETIME / REFCOUNT / HELP as redis-server 7.0 replies them.

mod common;

use std::time::{Duration, Instant};

use common::{encode, info_field, Backend, Raw, Server};

/// Big enough that the keys are most of what the limit covers: it applies to all the process
/// allocates, start-up structures and client buffers too (a few MB).
const LIMIT: &str = "16mb";
const LIMIT_BYTES: usize = 16 << 20;
const VALUE: usize = 1000;

fn info_u64(c: &mut Raw, section: &str, field: &str) -> u64 {
    info_field(c, section, field)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("INFO {field}"))
}

/// Pipelines `SET prefix:i <1 KB> [EX ttl(i)]` for i in `range`, asserting every reply is OK.
fn write(
    c: &mut Raw,
    prefix: &str,
    range: std::ops::Range<usize>,
    ttl: impl Fn(usize) -> Option<u64>,
) {
    let value = "v".repeat(VALUE);
    let keys: Vec<usize> = range.collect();
    for chunk in keys.chunks(200) {
        let mut out = Vec::new();
        for &i in chunk {
            let key = format!("{prefix}:{i}");
            match ttl(i) {
                Some(t) => out.extend(encode(&["SET", &key, &value, "EX", &t.to_string()])),
                None => out.extend(encode(&["SET", &key, &value])),
            }
        }
        c.send(&out);
        for &i in chunk {
            assert_eq!(c.reply(), b"+OK\r\n", "{prefix}:{i}");
        }
    }
}

fn dbsize(c: &mut Raw) -> u64 {
    let reply = c.cmd(&["DBSIZE"]);
    String::from_utf8_lossy(&reply[1..])
        .trim()
        .parse()
        .expect("DBSIZE")
}

fn exists(c: &mut Raw, key: &str) -> bool {
    c.cmd(&["EXISTS", key]) == b":1\r\n"
}

/// What the allocator holds stays close to the limit whatever was written, the keys being
/// most of it.
fn assert_near_limit(c: &mut Raw) {
    let keys = dbsize(c) as usize;
    let data = keys * VALUE;
    assert!(
        data <= LIMIT_BYTES && data > LIMIT_BYTES / 2,
        "{keys} keys of {VALUE} bytes against a limit of {LIMIT_BYTES}"
    );
    let used = info_u64(c, "memory", "used_memory") as f64 / LIMIT_BYTES as f64;
    assert!(
        (0.9..=1.03).contains(&used),
        "used_memory is {used:.3} of the limit"
    );
}

fn start(b: Backend, policy: &str) -> Server {
    let args = ["--maxmemory", LIMIT, "--maxmemory-policy", policy];
    Server::start_with(b, 2, &args)
}

/// allkeys-* and cache mode: 3x the limit written without an OOM, every key written last
/// still there, most early keys gone.
fn allkeys_policies_make_room(b: Backend) {
    for policy in ["allkeys-lru", "allkeys-lfu", "allkeys-random", "cache-mode"] {
        let s = if policy == "cache-mode" {
            Server::start_with(b, 2, &["--maxmemory", LIMIT, "--cache-mode", "yes"])
        } else {
            start(b, policy)
        };
        let mut c = s.raw();
        let n = 3 * LIMIT_BYTES / VALUE;
        write(&mut c, "k", 0..n, |_| None);
        assert!(
            info_u64(&mut c, "stats", "evicted_keys") > (n / 2) as u64,
            "{policy}"
        );
        assert_near_limit(&mut c);
        assert!(
            exists(&mut c, &format!("k:{}", n - 1)),
            "{policy}: the last write"
        );
    }
}

/// volatile-*: keys without a TTL are never evicted; once only they are left, writes are
/// refused with OOM as under noeviction.
fn volatile_policies_spare_keys_without_ttl(b: Backend) {
    for policy in [
        "volatile-lru",
        "volatile-lfu",
        "volatile-random",
        "volatile-ttl",
    ] {
        let s = start(b, policy);
        let mut c = s.raw();
        let kept = LIMIT_BYTES / VALUE / 4;
        write(&mut c, "keep", 0..kept, |_| None);
        write(&mut c, "ttl", 0..2 * LIMIT_BYTES / VALUE, |_| Some(3600));
        assert!(info_u64(&mut c, "stats", "evicted_keys") > 0, "{policy}");
        for i in 0..kept {
            assert!(exists(&mut c, &format!("keep:{i}")), "{policy}: keep:{i}");
        }
        // Keys without a TTL only: nothing may go, so writes are refused.
        let value = "v".repeat(VALUE);
        let mut refused = false;
        for i in 0..LIMIT_BYTES / VALUE {
            let reply = c.cmd(&["SET", &format!("more:{i}"), &value]);
            if reply.starts_with(b"-OOM") {
                refused = true;
                break;
            }
        }
        assert!(
            refused,
            "{policy}: writes past the limit without volatile keys"
        );
        assert!(exists(&mut c, "keep:0"));
    }
}

/// volatile-ttl takes the nearest deadlines first: the keys expiring soonest are gone, those
/// expiring last are all there.
fn volatile_ttl_takes_the_nearest_deadline(b: Backend) {
    let s = start(b, "volatile-ttl");
    let mut c = s.raw();
    let n = 2 * LIMIT_BYTES / VALUE;
    write(&mut c, "t", 0..n, |i| Some(10_000 + i as u64));
    let survivors = dbsize(&mut c) as usize;
    assert!(survivors < n);
    let tail = survivors / 2;
    for i in n - tail..n {
        assert!(exists(&mut c, &format!("t:{i}")), "t:{i} expires last");
    }
    for i in 0..n / 4 {
        assert!(!exists(&mut c, &format!("t:{i}")), "t:{i} expires first");
    }
}

/// allkeys-lru keeps the keys in use: a hot set read between writes survives a fill of
/// several times the limit.
fn allkeys_lru_keeps_the_keys_in_use(b: Backend) {
    let s = start(b, "allkeys-lru");
    let mut c = s.raw();
    let hot = 500;
    write(&mut c, "hot", 0..hot, |_| None);
    let per_round = LIMIT_BYTES / VALUE / 4;
    for round in 0..12 {
        // The LRU clock counts seconds: let time pass between reads and cold writes.
        std::thread::sleep(Duration::from_millis(1100));
        let mut out = Vec::new();
        for i in 0..hot {
            out.extend(encode(&["GET", &format!("hot:{i}")]));
        }
        c.send(&out);
        for _ in 0..hot {
            c.reply();
        }
        write(
            &mut c,
            "cold",
            round * per_round..(round + 1) * per_round,
            |_| None,
        );
    }
    let kept = (0..hot)
        .filter(|i| exists(&mut c, &format!("hot:{i}")))
        .count();
    assert!(kept * 10 >= hot * 9, "{kept} of {hot} hot keys kept");
}

/// CONFIG SET maxmemory below the data evicts down to it without waiting for a write.
fn lowering_the_limit_evicts_at_once(b: Backend) {
    let s = Server::start_with(b, 2, &["--maxmemory-policy", "allkeys-random"]);
    let mut c = s.raw();
    write(&mut c, "k", 0..2 * LIMIT_BYTES / VALUE, |_| None);
    assert_eq!(c.cmd(&["CONFIG", "SET", "maxmemory", LIMIT]), b"+OK\r\n");
    let started = Instant::now();
    loop {
        let keys = dbsize(&mut c) as usize;
        let used = info_u64(&mut c, "memory", "used_memory") as usize;
        // INFO's own buffers are part of the figure it reads: 1% of slack.
        if keys * VALUE <= LIMIT_BYTES && used <= LIMIT_BYTES / 100 * 101 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{keys} keys left, used_memory {used}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_near_limit(&mut c);
}

/// Every eviction is an `evicted` keyevent, published from the shard that evicted.
fn evictions_are_announced(b: Backend) {
    let s = start(b, "allkeys-random");
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "Ee"]),
        b"+OK\r\n"
    );
    let mut sub = s.raw();
    sub.cmd(&["SUBSCRIBE", "__keyevent@0__:evicted"]);
    write(&mut c, "k", 0..2 * LIMIT_BYTES / VALUE, |_| None);
    let evicted = info_u64(&mut c, "stats", "evicted_keys");
    assert!(evicted > 0);
    sub.set_read_timeout(Duration::from_secs(10));
    for _ in 0..evicted {
        let msg = String::from_utf8_lossy(&sub.reply()).into_owned();
        assert!(
            msg.contains("__keyevent@0__:evicted") && msg.contains("k:"),
            "{msg}"
        );
    }
}

/// OBJECT's access subcommands as redis-server 7.0 replies them, under LRU and LFU.
fn object_like_redis(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let (mut r, mut o) = (redis.raw(), ours.raw());
    let mut same = |cmd: &[&str]| {
        let (theirs, mine) = (r.cmd(cmd), o.cmd(cmd));
        assert_eq!(
            String::from_utf8_lossy(&mine),
            String::from_utf8_lossy(&theirs),
            "{cmd:?}"
        );
    };
    for cmd in [
        &["SET", "s", "hello"][..],
        &["SET", "n", "42"],
        &["SET", "big", "100000"],
        &["OBJECT", "HELP"],
        &["OBJECT", "IDLETIME", "s"],
        &["OBJECT", "FREQ", "s"],
        &["OBJECT", "REFCOUNT", "s"],
        &["OBJECT", "REFCOUNT", "n"],
        &["OBJECT", "REFCOUNT", "big"],
        &["OBJECT", "IDLETIME", "missing"],
        &["OBJECT", "REFCOUNT"],
        &["OBJECT", "IDLETIME", "s", "extra"],
        &["OBJECT", "NOSUCH", "s"],
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"],
        &["SET", "f", "hello"],
        &["OBJECT", "FREQ", "f"],
        &["GET", "f"],
        &["OBJECT", "FREQ", "f"],
        &["OBJECT", "IDLETIME", "f"],
        &["OBJECT", "FREQ", "missing"],
        &["TYPE", "f"],
        &["EXISTS", "f"],
        &["OBJECT", "FREQ", "f"],
    ] {
        same(cmd);
    }
}

backend_tests!(
    allkeys_policies_make_room,
    volatile_policies_spare_keys_without_ttl,
    volatile_ttl_takes_the_nearest_deadline,
    allkeys_lru_keeps_the_keys_in_use,
    lowering_the_limit_evicts_at_once,
    evictions_are_announced,
    object_like_redis
);
