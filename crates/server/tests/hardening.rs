//! Regression tests of the hardening issue. The panic policy (docs/architecture.md,
//! "Panics"): a panic anywhere — a connection's command, a mailbox message, a transaction hop,
//! a timer tick — logs a bug report and aborts the whole process, so no shard keeps serving
//! from a half-changed state; `DEBUG PANIC` exists in debug builds (which the tests run) to
//! panic on purpose in each of those places. Beside them: the client-triggered panic of COPY
//! with a dangling DB option, and database indexes past 65535, which used to be truncated to
//! 16 bits on their way to another shard.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use common::{bulk, wait_timeout, Backend, Raw, Server};
use damselfly_storage::shard_for_key;

/// Runs `DEBUG PANIC <place...>` and checks the process aborts with a report naming the panic
/// and the thread it happened on.
fn aborts_with_report(b: Backend, place: &[&str], message: &str, thread: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("damselfly.log");
    let mut s = Server::start(b, &["--logfile", log.to_str().expect("utf-8 path")]);
    let mut raw = s.raw();
    let mut cmd = vec!["DEBUG", "PANIC"];
    cmd.extend_from_slice(place);
    // The reply may or may not make it out before the process dies; either is fine.
    let _ = raw.try_cmd(&cmd);
    let mut child = s.child.take().expect("running");
    let status = wait_timeout(&mut child, Duration::from_secs(20)).expect("the server exits");
    assert_eq!(
        status.signal(),
        Some(libc::SIGABRT),
        "aborts after DEBUG PANIC {place:?}: {status:?}"
    );
    let report = std::fs::read_to_string(&log).expect("log file");
    assert!(
        report.contains("DAMSELFLY BUG REPORT START"),
        "no report in {report}"
    );
    assert!(report.contains(&format!("panic: {message}")), "{report}");
    assert!(report.contains(&format!("thread: {thread}")), "{report}");
}

fn panic_in_a_connection(b: Backend) {
    aborts_with_report(b, &[], "DEBUG PANIC", "damselfly-");
}

fn panic_in_a_mailbox_message(b: Backend) {
    aborts_with_report(b, &["SHARD", "1"], "DEBUG PANIC SHARD", "damselfly-1");
}

fn panic_in_a_transaction_hop(b: Backend) {
    aborts_with_report(b, &["HOP", "1"], "DEBUG PANIC HOP", "damselfly-1");
}

fn panic_in_a_timer_tick(b: Backend) {
    aborts_with_report(b, &["TICK", "0"], "DEBUG PANIC TICK", "damselfly-0");
}

/// `COPY src dst DB` (DB without its value) with the keys on different shards: the
/// transaction planner used to read COPY's options itself, past the last argument, and panic.
/// Now the command's own parser is the only one and replies Redis's syntax error, on every
/// path: fanned out, on one shard, and queued in MULTI (where the planner runs on a shard's
/// mailbox while another transaction holds intents).
fn copy_with_a_dangling_db_option(b: Backend) {
    let s = Server::start(b, &[]);
    let mut raw = s.raw();
    let src = "a";
    let other = shard_for_key(src.as_bytes(), 2);
    let far = (0..)
        .map(|i| format!("c{i}"))
        .find(|k| shard_for_key(k.as_bytes(), 2) != other)
        .expect("a key on the other shard");
    let near = (0..)
        .map(|i| format!("n{i}"))
        .find(|k| shard_for_key(k.as_bytes(), 2) == other)
        .expect("a key on the same shard");
    assert_eq!(raw.cmd(&["SET", src, "1"]), b"+OK\r\n");
    for dst in [far.as_str(), near.as_str()] {
        for tail in [&["DB"][..], &["DB", "x"], &["REPLACE", "DB"], &["DB", "99"]] {
            let mut cmd = vec!["COPY", src, dst];
            cmd.extend_from_slice(tail);
            let want: &[u8] = match tail.last() {
                Some(&"x") => b"-ERR value is not an integer or out of range\r\n",
                Some(&"99") => b"-ERR DB index is out of range\r\n",
                _ => b"-ERR syntax error\r\n",
            };
            assert_eq!(raw.cmd(&cmd), want, "{cmd:?}");
        }
        // Inside MULTI the same command is planned when EXEC runs.
        assert_eq!(raw.cmd(&["MULTI"]), b"+OK\r\n");
        assert_eq!(raw.cmd(&["COPY", src, dst, "DB"]), b"+QUEUED\r\n");
        assert_eq!(raw.cmd(&["GET", src]), b"+QUEUED\r\n");
        let mut want = b"*2\r\n-ERR syntax error\r\n".to_vec();
        want.extend(bulk("1"));
        assert_eq!(raw.cmd(&["EXEC"]), want);
        // And a good COPY to another database still works.
        assert_eq!(raw.cmd(&["COPY", src, dst, "DB", "3"]), b":1\r\n");
    }
    assert_eq!(raw.cmd(&["PING"]), b"+PONG\r\n");
}

/// A plain command queued behind a transaction on a shard is planned there (the mailbox task
/// checks its intents): COPY with a dangling DB must reply, not panic, on that path too.
fn copy_planned_on_a_shard_behind_a_transaction(b: Backend) {
    let s = Server::start(b, &[]);
    let mut setup = s.raw();
    assert_eq!(setup.cmd(&["SET", "a", "1"]), b"+OK\r\n");
    let mut raws: Vec<Raw> = (0..4).map(|_| s.raw()).collect();
    // Many connections pipelining COPY and multi-shard transactions keep intents held on
    // both shards while plain commands arrive.
    let mut pipeline = Vec::new();
    for i in 0..200 {
        pipeline.extend(common::encode(&["MSET", "a", "1", "zz", &i.to_string()]));
        pipeline.extend(common::encode(&["COPY", "a", "c", "DB"]));
    }
    for r in &mut raws {
        r.send(&pipeline);
    }
    for r in &mut raws {
        for _ in 0..200 {
            assert_eq!(r.reply(), b"+OK\r\n");
            assert_eq!(r.reply(), b"-ERR syntax error\r\n");
        }
    }
    assert_eq!(setup.cmd(&["PING"]), b"+PONG\r\n");
}

/// Database indexes travel to other shards whole: with 70,000 databases, `SELECT 65536` then
/// commands on keys of both shards all run in database 65536 (a 16-bit index sent them to
/// database 0), and FLUSHALL's intents cover every database.
fn database_indexes_past_65535(b: Backend) {
    let s = Server::start(b, &["--databases", "70000"]);
    let mut raw = s.raw();
    assert_eq!(raw.cmd(&["SELECT", "65536"]), b"+OK\r\n");
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let shards: std::collections::HashSet<usize> = keys
        .iter()
        .map(|k| shard_for_key(k.as_bytes(), 2))
        .collect();
    assert_eq!(shards.len(), 2, "keys on both shards");
    for k in &keys {
        assert_eq!(raw.cmd(&["SET", k, k]), b"+OK\r\n");
    }
    // Cross-shard commands and a transaction in that database too.
    assert_eq!(
        raw.cmd(&["MSET", "m0", "a", "m1", "b", "m2", "c"]),
        b"+OK\r\n"
    );
    assert_eq!(raw.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(raw.cmd(&["SET", "t0", "x"]), b"+QUEUED\r\n");
    assert_eq!(raw.cmd(&["SET", "t1", "y"]), b"+QUEUED\r\n");
    assert_eq!(raw.cmd(&["EXEC"]), b"*2\r\n+OK\r\n+OK\r\n");
    assert_eq!(raw.cmd(&["DBSIZE"]), b":25\r\n");
    for k in &keys {
        assert_eq!(raw.cmd(&["GET", k]), bulk(k));
    }
    assert_eq!(raw.cmd(&["COPY", "k0", "k0", "DB", "69999"]), b":1\r\n");
    assert_eq!(raw.cmd(&["MOVE", "k1", "65537"]), b":1\r\n");
    assert_eq!(raw.cmd(&["SELECT", "0"]), b"+OK\r\n");
    assert_eq!(
        raw.cmd(&["DBSIZE"]),
        b":0\r\n",
        "nothing landed in database 0"
    );
    assert_eq!(raw.cmd(&["SWAPDB", "0", "65536"]), b"+OK\r\n");
    assert_eq!(raw.cmd(&["DBSIZE"]), b":24\r\n");
    for (db, key) in [("69999", "k0"), ("65537", "k1")] {
        assert_eq!(raw.cmd(&["SELECT", db]), b"+OK\r\n");
        assert_eq!(raw.cmd(&["GET", key]), bulk(key), "{key} in {db}");
    }
    assert_eq!(raw.cmd(&["FLUSHALL"]), b"+OK\r\n");
    for db in ["0", "65536", "65537", "69999"] {
        assert_eq!(raw.cmd(&["SELECT", db]), b"+OK\r\n");
        assert_eq!(
            raw.cmd(&["DBSIZE"]),
            b":0\r\n",
            "database {db} after FLUSHALL"
        );
    }
    // Redis's C-int errors for indexes beyond an int.
    let int_range =
        b"-ERR value is out of range, value must between -2147483648 and 2147483647\r\n";
    assert_eq!(raw.cmd(&["SELECT", "4294967296"]), int_range);
    assert_eq!(raw.cmd(&["MOVE", "k", "4294967296"]), int_range);
    assert_eq!(
        raw.cmd(&["SELECT", "70000"]),
        b"-ERR DB index is out of range\r\n"
    );
    assert_eq!(
        raw.cmd(&["SWAPDB", "4294967296", "1"]),
        b"-ERR invalid first DB index\r\n"
    );
}

/// A round of pipelined commands whose replies pass 1 MB ends early and leaves the rest in the
/// read buffer: every command still runs once, in order, and a protocol error after them is
/// reported only after all their replies (then the connection closes).
fn rounds_that_end_early_lose_nothing(b: Backend) {
    let s = Server::start(b, &[]);
    let mut raw = s.raw();
    let value = "v".repeat(100_000);
    let keys = ["big-a", "big-b", "big-c", "big-d"];
    for k in keys {
        assert_eq!(raw.cmd(&["SET", k, &value]), b"+OK\r\n");
    }
    let mut pipeline = Vec::new();
    for i in 0..300 {
        pipeline.extend(common::encode(&["GET", keys[i % keys.len()]]));
        pipeline.extend(common::encode(&["INCR", "counter"]));
    }
    pipeline.extend_from_slice(b"*1\r\n+bad\r\n");
    raw.send(&pipeline);
    let want_value = bulk(&value);
    for i in 0..300 {
        assert_eq!(raw.reply(), want_value, "GET {i}");
        assert_eq!(
            raw.reply(),
            format!(":{}\r\n", i + 1).into_bytes(),
            "INCR {i}"
        );
    }
    assert_eq!(
        raw.reply(),
        b"-ERR Protocol error: expected '$', got '+'\r\n"
    );
    assert!(raw.closed(), "closed after the protocol error");
    let mut other = s.raw();
    assert_eq!(other.cmd(&["GET", "counter"]), bulk("300"));
}

backend_tests!(
    database_indexes_past_65535,
    rounds_that_end_early_lose_nothing,
    panic_in_a_connection,
    panic_in_a_mailbox_message,
    panic_in_a_transaction_hop,
    panic_in_a_timer_tick,
    copy_with_a_dangling_db_option,
    copy_planned_on_a_shard_behind_a_transaction,
);
