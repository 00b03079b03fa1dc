//! Bugs found by fuzzing (docs/fuzzing.md), each reduced to the commands that triggered it and
//! checked against Redis's reply, so it cannot come back.

mod common;

use std::time::Duration;

use common::{encode, info_field, rss_bytes, Backend, Server};
use damselfly_storage::shard_for_key;

/// Two keys owned by different shards of the two-thread test server.
fn keys_on_two_shards() -> (String, String) {
    let a = "fuzz-a".to_string();
    let shard = shard_for_key(a.as_bytes(), 2);
    let b = (0..)
        .map(|i| format!("fuzz-b{i}"))
        .find(|k| shard_for_key(k.as_bytes(), 2) != shard)
        .unwrap_or_default();
    (a, b)
}

/// `COPY src dst DB` with DB's value missing, src and dst on different shards: the transaction
/// planner read the argument after DB itself, without checking it was there, and panicked.
/// It now reads COPY's options with COPY's own parser (crates/coord/src/tx/plan.rs). Redis:
/// a syntax error.
fn copy_db_without_value(backend: Backend) {
    let server = Server::start(backend, &[]);
    let mut c = server.raw_unix();
    let (a, b) = keys_on_two_shards();
    assert_eq!(c.cmd(&["SET", &a, "1"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["COPY", &a, &b, "DB"]), b"-ERR syntax error\r\n");
    assert_eq!(c.cmd(&["GET", &b]), b"$-1\r\n");
}

/// Inside MULTI, SWAPDB with two invalid indexes planned no intent, yet EXEC (a transaction,
/// because GET's key needs one) still ran it on every shard. Afterwards no whole-database
/// write could get its intents: FLUSHALL, FLUSHDB and SWAPDB waited forever, on every
/// connection. Arguments SWAPDB's parser rejects now plan as an ordinary whole-keyspace
/// command (its database on every shard). Redis answers the error inside EXEC's reply and
/// goes on.
fn swapdb_in_multi_with_invalid_indexes(backend: Backend) {
    let server = Server::start(backend, &[]);
    let mut c = server.raw_unix();
    c.send(
        &[
            encode(&["MULTI"]),
            encode(&["SWAPDB", "a", "b"]),
            encode(&["GET", "k"]),
            encode(&["EXEC"]),
        ]
        .concat(),
    );
    assert_eq!(c.reply(), b"+OK\r\n");
    assert_eq!(c.reply(), b"+QUEUED\r\n");
    assert_eq!(c.reply(), b"+QUEUED\r\n");
    assert_eq!(c.reply(), b"*2\r\n-ERR invalid first DB index\r\n$-1\r\n");
    let mut other = server.raw_unix();
    assert_eq!(other.try_cmd(&["FLUSHALL"]).ok(), Some(b"+OK\r\n".to_vec()));
    assert_eq!(c.try_cmd(&["FLUSHDB"]).ok(), Some(b"+OK\r\n".to_vec()));
}

/// CONFIG RESETSTAT zeroed each thread's command count but kept the samples that
/// `instantaneous_ops_per_sec` is computed from, so the next INFO subtracted a larger old
/// count from a smaller new one (crates/coord/src/worker.rs `ops_per_sec`): with overflow
/// checks (a debug build) the shard's mailbox task panicked, in a release build the rate was
/// absurd. The samples now reset with the counts. Redis reports a small rate.
fn info_after_config_resetstat(backend: Backend) {
    let server = Server::start(backend, &[]);
    let mut c = server.raw_unix();
    let sets: Vec<u8> = (0..300)
        .flat_map(|i| encode(&["SET", &format!("k{}", i % 10), "v"]))
        .collect();
    c.send(&sets);
    for _ in 0..300 {
        assert_eq!(c.reply(), b"+OK\r\n");
    }
    // Long enough for every one of the 16 samples (one per 100 ms tick) to hold the count.
    std::thread::sleep(Duration::from_millis(2000));
    assert_eq!(c.cmd(&["CONFIG", "RESETSTAT"]), b"+OK\r\n");
    std::thread::sleep(Duration::from_millis(300));
    let ops: u64 = info_field(&mut c, "stats", "instantaneous_ops_per_sec")
        .and_then(|v| v.parse().ok())
        .expect("instantaneous_ops_per_sec");
    assert!(ops < 1_000_000, "instantaneous_ops_per_sec:{ops}");
    for i in 0..10 {
        assert_eq!(c.cmd(&["GET", &format!("k{i}")]), b"$1\r\nv\r\n");
    }
}

/// Transactions that span shards (an MGET of keys on several shards, FLUSHALL, ...) left
/// memory behind under the epoll backend: with three threads the server's resident memory grew
/// about 95 bytes per transaction (600,000 MGETs over three shards: 24 MB to 88 MB). The
/// cause was the shutdown signal's waiter, which pushed a new waker every time it was polled,
/// and the epoll backend polls it on every wake-up of its thread
/// (crates/coord/src/cluster.rs `ShutdownSignal::wait`). Found through the `commands` fuzz
/// target's memory growing about 0.4 KB per input. Redis: flat.
fn cross_shard_transactions_keep_memory_flat(backend: Backend) {
    let server = Server::start_with(backend, 3, &[]);
    let mut c = server.raw_unix();
    // One key on each of the three shards.
    let mut keys: Vec<String> = Vec::new();
    for i in 0.. {
        let k = format!("fuzz-{i}");
        if !keys
            .iter()
            .any(|o| shard_for_key(o.as_bytes(), 3) == shard_for_key(k.as_bytes(), 3))
        {
            keys.push(k);
        }
        if keys.len() == 3 {
            break;
        }
    }
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    let batch: Vec<u8> = (0..1000).flat_map(|_| encode(&mget)).collect();
    let mut run = |rounds: usize| {
        for _ in 0..rounds {
            c.send(&batch);
            for _ in 0..1000 {
                assert_eq!(c.reply(), b"*3\r\n$-1\r\n$-1\r\n$-1\r\n");
            }
        }
    };
    // Warm up (allocator pools, buffers), then measure 60,000 more: the leak grew RSS by
    // about 5.7 MB over as many.
    run(10);
    let before = rss_bytes(server.pid());
    run(60);
    let grown = rss_bytes(server.pid()).saturating_sub(before);
    println!("{backend:?}: RSS grew {} KB over 60,000 MGETs", grown >> 10);
    assert!(
        grown < 2 << 20,
        "resident memory grew {} KB over 60,000 MGETs across three shards",
        grown >> 10
    );
}

/// Inside MULTI, a keyless command that runs on the connection's own shard (OBJECT HELP),
/// then INFO (which sends the queued hops before it runs, without ending the transaction),
/// then a command on another shard's key: the transaction's intents are on that one shard,
/// but they went out with its first hop, whichever shard that hop was for. The connection's
/// own shard then held an intent on the other shard's key that no release ever reached, and
/// every later whole-keyspace write (FLUSHALL) waited for it forever. Found by the long
/// `commands` run (with BITPOS and more noise around it).
fn keyless_command_before_a_keyed_one_in_exec(backend: Backend) {
    let server = Server::start(backend, &[]);
    let (a, b) = keys_on_two_shards();
    // The leak needed the key on another shard than the connection's. Connections land on
    // either thread (the uring backend hands unix connections out in turn), so every key is
    // used by two connections in a row, ten times.
    for key in (0..10).flat_map(|_| [&a, &a, &b, &b]) {
        let mut c = server.raw_unix();
        c.send(
            &[
                encode(&["MULTI"]),
                encode(&["OBJECT", "HELP"]),
                encode(&["INFO", "server"]),
                encode(&["GET", key]),
                encode(&["EXEC"]),
            ]
            .concat(),
        );
        assert_eq!(c.reply(), b"+OK\r\n");
        for _ in 0..3 {
            assert_eq!(c.reply(), b"+QUEUED\r\n");
        }
        let exec = c.reply();
        assert!(
            exec.starts_with(b"*3\r\n*"),
            "{}",
            String::from_utf8_lossy(&exec)
        );
        assert!(exec.ends_with(b"$-1\r\n"));
    }
    let mut other = server.raw_unix();
    assert_eq!(other.cmd(&["FLUSHALL"]), b"+OK\r\n");
    assert_eq!(other.cmd(&["SET", &a, "1"]), b"+OK\r\n");
    assert_eq!(other.cmd(&["SET", &b, "1"]), b"+OK\r\n");
}

backend_tests!(
    keyless_command_before_a_keyed_one_in_exec,
    copy_db_without_value,
    swapdb_in_multi_with_invalid_indexes,
    info_after_config_resetstat,
    cross_shard_transactions_keep_memory_flat,
);
