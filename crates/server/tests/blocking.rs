//! Blocking commands (BLPOP, BLMOVE, BZPOPMAX, ...): FIFO wake order, timeouts, disconnect
//! while blocked, MULTI, wake-ups from transactions and multi-key commands, and cross-shard
//! BLMOVE under concurrent producers and consumers losing and duplicating nothing.

mod common;

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{bulk, wait_blocked, Backend, Raw, Server};
use damselfly_storage::shard_for_key;

/// Two keys owned by different shards of a two-thread server.
fn keys_on_two_shards(prefix: &str) -> (String, String) {
    let a = format!("{prefix}-a");
    let other = shard_for_key(a.as_bytes(), 2);
    let b = (0..)
        .map(|i| format!("{prefix}-b{i}"))
        .find(|k| shard_for_key(k.as_bytes(), 2) != other)
        .unwrap_or_default();
    (a, b)
}

/// Starts a client that sends `args` and hands its reply back through the join handle.
fn blocked_client(port: u16, args: Vec<String>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || Raw::tcp(port).cmd(&args))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

fn fifo_wake_order(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut admin = server.raw();
    let mut waiting = Vec::new();
    for i in 0..3 {
        waiting.push(blocked_client(server.port, strings(&["BLPOP", "q", "0"])));
        wait_blocked(&mut admin, i + 1);
    }
    assert_eq!(admin.cmd(&["RPUSH", "q", "a", "b", "c"]), b":3\r\n");
    let got: Vec<Vec<u8>> = waiting
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    for (reply, element) in got.iter().zip(["a", "b", "c"]) {
        let want = [b"*2\r\n".to_vec(), bulk("q"), bulk(element)].concat();
        assert_eq!(reply, &want, "clients are served in the order they blocked");
    }
    assert_eq!(admin.cmd(&["EXISTS", "q"]), b":0\r\n");
    wait_blocked(&mut admin, 0);
}

/// A blocked BRPOPLPUSH or BLMOVE whose destination holds another type gets WRONGTYPE when
/// the source gets an element, which stays in the source, as in Redis; with the destination
/// on the same shard (the next waiter then gets the element) and on the other one (alone:
/// a cross-shard move is retried by its connection, and a waiter behind it can take the
/// element first, a known difference from Redis's order).
fn move_to_a_wrong_type_answers_wrongtype(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut admin = server.raw();
    let (src, far) = keys_on_two_shards("mv");
    let near = "{mv-a}near".to_string();
    assert_eq!(
        shard_for_key(near.as_bytes(), 2),
        shard_for_key(src.as_bytes(), 2)
    );
    for (dst, block) in [
        (&near, vec!["BRPOPLPUSH", &src, &near, "0"]),
        (&far, vec!["BLMOVE", &src, &far, "LEFT", "RIGHT", "0"]),
    ] {
        assert_eq!(admin.cmd(&["SET", dst, "string"]), b"+OK\r\n");
        let mover = blocked_client(server.port, strings(&block));
        wait_blocked(&mut admin, 1);
        let popper = (dst == &near).then(|| {
            let popper = blocked_client(server.port, strings(&["BLPOP", &src, "0"]));
            wait_blocked(&mut admin, 2);
            popper
        });
        assert_eq!(admin.cmd(&["RPUSH", &src, "x"]), b":1\r\n");
        assert_eq!(
            mover.join().unwrap_or_default(),
            b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n",
            "{block:?}"
        );
        match popper {
            Some(popper) => {
                let want = [b"*2\r\n".to_vec(), bulk(&src), bulk("x")].concat();
                assert_eq!(popper.join().unwrap_or_default(), want, "{block:?}");
            }
            None => assert_eq!(admin.cmd(&["LPOP", &src]), bulk("x")),
        }
        assert_eq!(admin.cmd(&["GET", dst]), bulk("string"));
        wait_blocked(&mut admin, 0);
    }
}

fn timeouts_reply_nil(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut c = server.raw();
    for (args, nil) in [
        (vec!["BLPOP", "e1", "e2", "0.2"], &b"*-1\r\n"[..]),
        (
            vec!["BLMOVE", "e1", "e2", "LEFT", "RIGHT", "0.2"],
            b"*-1\r\n", // a timed-out BLMOVE too replies a null array, as in Redis
        ),
        (vec!["BZPOPMAX", "e3", "0.2"], b"*-1\r\n"),
        (vec!["BZMPOP", "0.2", "2", "e3", "e4", "MIN"], b"*-1\r\n"),
    ] {
        let started = Instant::now();
        assert_eq!(c.cmd(&args), nil, "{args:?}");
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "{args:?} waited its timeout"
        );
    }
    assert!(c.cmd(&["HELLO", "3"]).starts_with(b"%"));
    assert_eq!(c.cmd(&["BRPOP", "e1", "0.05"]), b"_\r\n");
    // Commands pipelined behind a blocked one run after it, in order.
    c.send(
        &[
            common::encode(&["BLPOP", "e1", "0.1"]),
            common::encode(&["PING"]),
        ]
        .concat(),
    );
    assert_eq!(c.reply(), b"_\r\n");
    assert_eq!(c.reply(), b"+PONG\r\n");
    assert_eq!(
        c.cmd(&["BLPOP", "e1", "-1"]),
        b"-ERR timeout is negative\r\n"
    );
    // A timeout near the largest Redis accepts waits like any other.
    c.send(&common::encode(&["BLPOP", "far", "9000000000000000"]));
    let mut admin = server.raw();
    wait_blocked(&mut admin, 1);
    admin.cmd(&["RPUSH", "far", "x"]);
    assert_eq!(
        c.reply(),
        [b"*2\r\n".to_vec(), bulk("far"), bulk("x")].concat()
    );
    assert_eq!(
        c.cmd(&["BLPOP", "e1", "x"]),
        b"-ERR timeout is not a float or out of range\r\n"
    );
}

fn disconnect_while_blocked(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut admin = server.raw();
    let mut gone = server.raw();
    gone.send(&common::encode(&["BLPOP", "dq", "0"]));
    wait_blocked(&mut admin, 1);
    drop(gone);
    wait_blocked(&mut admin, 0);
    assert_eq!(admin.cmd(&["LPUSH", "dq", "x"]), b":1\r\n");
    assert_eq!(
        admin.cmd(&["LLEN", "dq"]),
        b":1\r\n",
        "nobody took the element"
    );
}

fn client_unblock(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut admin = server.raw();
    for (how, want) in [
        ("TIMEOUT", b"*-1\r\n".to_vec()),
        (
            "ERROR",
            b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_vec(),
        ),
    ] {
        let mut blocked = server.raw();
        let id = String::from_utf8_lossy(&blocked.cmd(&["CLIENT", "ID"]))
            .trim_matches(|c: char| !c.is_ascii_digit())
            .to_string();
        blocked.send(&common::encode(&["BLPOP", "uq", "ub", "0"]));
        wait_blocked(&mut admin, 1);
        let list = admin.cmd(&["CLIENT", "LIST", "ID", &id]);
        assert!(
            String::from_utf8_lossy(&list).contains("flags=b"),
            "{list:?}"
        );
        assert_eq!(admin.cmd(&["CLIENT", "UNBLOCK", &id, how]), b":1\r\n");
        assert_eq!(blocked.reply(), want, "{how}");
        wait_blocked(&mut admin, 0);
        assert_eq!(
            admin.cmd(&["CLIENT", "UNBLOCK", &id]),
            b":0\r\n",
            "not blocked now"
        );
        // Unblocked, the client is no longer waiting: data for its keys stays.
        admin.cmd(&["RPUSH", "ub", "x"]);
        assert_eq!(admin.cmd(&["LPOP", "ub"]), bulk("x"));
    }
    assert_eq!(
        admin.cmd(&["CLIENT", "UNBLOCK", "1", "MAYBE"]),
        b"-ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR\r\n"
    );
}

fn multi_runs_the_non_blocking_form(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut c = server.raw();
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["BLPOP", "mq", "0"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["BZPOPMIN", "mz", "0"]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["EXEC"]), b"*2\r\n*-1\r\n*-1\r\n");
}

fn woken_by_transactions_and_multi_key_commands(b: Backend) {
    let server = Server::start_with(b, 2, &[]);
    let mut admin = server.raw();
    // An EXEC that pushes and pops again: the blocked client gets what is left after it.
    let waiter = blocked_client(server.port, strings(&["BLPOP", "tq", "0"]));
    wait_blocked(&mut admin, 1);
    admin.cmd(&["MULTI"]);
    admin.cmd(&["RPUSH", "tq", "a", "b"]);
    admin.cmd(&["LPOP", "tq"]);
    let exec = admin.cmd(&["EXEC"]);
    assert_eq!(exec, [b"*2\r\n:2\r\n".to_vec(), bulk("a")].concat());
    let want = [b"*2\r\n".to_vec(), bulk("tq"), bulk("b")].concat();
    assert_eq!(waiter.join().unwrap_or_default(), want);
    // A cross-shard LMOVE writes the destination through a transaction's write-back.
    let (src, dst) = keys_on_two_shards("mk");
    let waiter = blocked_client(server.port, strings(&["BRPOP", "unrelated", &dst, "0"]));
    wait_blocked(&mut admin, 1);
    admin.cmd(&["RPUSH", &src, "moved"]);
    assert_eq!(
        admin.cmd(&["LMOVE", &src, &dst, "LEFT", "LEFT"]),
        bulk("moved")
    );
    let want = [b"*2\r\n".to_vec(), bulk(&dst), bulk("moved")].concat();
    assert_eq!(waiter.join().unwrap_or_default(), want);
    // A sorted set, and a wrong-typed write that does not wake the client.
    let waiter = blocked_client(server.port, strings(&["BZPOPMAX", "zq", "0"]));
    wait_blocked(&mut admin, 1);
    admin.cmd(&["ZADD", "zq", "1", "low", "2", "high"]);
    let want = [b"*3\r\n".to_vec(), bulk("zq"), bulk("high"), bulk("2")].concat();
    assert_eq!(waiter.join().unwrap_or_default(), want);
    assert_eq!(admin.cmd(&["ZCARD", "zq"]), b":1\r\n");
}

fn cross_shard_blmove_loses_nothing(b: Backend) {
    const PRODUCERS: usize = 2;
    const PER_PRODUCER: usize = 50_000;
    const CONSUMERS: usize = 3;
    let server = Arc::new(Server::start_with(b, 2, &[]));
    let (src, dst) = keys_on_two_shards("mv");
    let producing = Arc::new(AtomicBool::new(true));
    let moved = Arc::new(AtomicUsize::new(0));
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|_| {
            let (port, src, dst) = (server.port, src.clone(), dst.clone());
            let (producing, moved) = (producing.clone(), moved.clone());
            std::thread::spawn(move || {
                let mut c = Raw::tcp(port);
                loop {
                    let r = c.cmd(&["BLMOVE", &src, &dst, "LEFT", "RIGHT", "0.2"]);
                    if r == b"*-1\r\n" {
                        if !producing.load(Ordering::SeqCst) {
                            return;
                        }
                    } else {
                        assert!(r.starts_with(b"$"), "unexpected reply {r:?}");
                        moved.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            let (port, src) = (server.port, src.clone());
            std::thread::spawn(move || {
                let mut c = Raw::tcp(port);
                for chunk in 0..PER_PRODUCER / 50 {
                    let mut args = vec!["RPUSH".to_string(), src.clone()];
                    args.extend((0..50).map(|i| format!("p{p}-{}", chunk * 50 + i)));
                    assert!(c.cmd(&args).starts_with(b":"));
                }
            })
        })
        .collect();
    for p in producers {
        p.join().expect("producer");
    }
    producing.store(false, Ordering::SeqCst);
    for c in consumers {
        c.join().expect("consumer");
    }
    let total = PRODUCERS * PER_PRODUCER;
    let mut admin = server.raw();
    let left = common::diff::parse(&admin.cmd(&["LRANGE", &src, "0", "-1"]))
        .items
        .len();
    let items = common::diff::parse(&admin.cmd(&["LRANGE", &dst, "0", "-1"])).items;
    let distinct: HashSet<Vec<u8>> = items.iter().map(|n| n.body.clone()).collect();
    assert_eq!(
        moved.load(Ordering::Relaxed),
        items.len(),
        "every reply is in dst once"
    );
    assert_eq!(distinct.len(), items.len(), "no element duplicated");
    assert_eq!(items.len() + left, total, "no element lost");
    assert_eq!(left, 0, "consumers drained the source");
}

backend_tests!(
    client_unblock,
    fifo_wake_order,
    move_to_a_wrong_type_answers_wrongtype,
    timeouts_reply_nil,
    disconnect_while_blocked,
    multi_runs_the_non_blocking_form,
    woken_by_transactions_and_multi_key_commands,
    cross_shard_blmove_loses_nothing
);
