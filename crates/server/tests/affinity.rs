//! Connection affinity: a connection that keeps using one other shard moves to that shard's
//! thread. These tests check what a move must not change: the session (id, name, database,
//! protocol, authentication), the order and content of replies, input that arrived before the
//! move (mid-pipeline, a command cut in half), that connections in MULTI, WATCH, blocked
//! or subscribed stay where they are until that state is over, and that pipelining clients
//! (one hop per round, not per command) stay. Every move is counted in INFO
//! stats `connections_moved`, which is how the tests know one happened.

mod common;

use common::{bulk, encode, wait_blocked, Backend, Raw, Server};

/// More commands in a row than any move needs (64, doubling per earlier move of the
/// connection; the tests move a connection at most twice before this count).
const STREAK: usize = 300;

/// Sends `n` GETs of `key`, each after the reply to the one before (only unpipelined
/// rounds count toward a move), and checks each reply is `want`.
fn gets(c: &mut Raw, key: &str, n: usize, want: &[u8]) {
    for i in 0..n {
        assert_eq!(c.cmd(&["GET", key]), want, "GET {key} #{i}");
    }
}

/// Sends `n` GETs of `key` in one write and checks each reply is `want`.
fn pipelined_gets(c: &mut Raw, key: &str, n: usize, want: &[u8]) {
    c.send(&encode(&["GET", key]).repeat(n));
    for i in 0..n {
        assert_eq!(c.reply(), want, "GET {key} #{i}");
    }
}

/// After this the connection lives on `key`'s thread, whichever thread accepted it.
fn settle_on(c: &mut Raw, key: &str) {
    for _ in 0..STREAK {
        assert_eq!(c.cmd(&["EXISTS", key]).len(), 4);
    }
}

fn session_survives_moves(b: Backend, unix: bool) {
    let s = Server::start(b, &["--requirepass", "pw"]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    assert_eq!(admin.cmd(&["AUTH", "pw"]), b"+OK\r\n");
    let mut c = if unix { s.raw_unix() } else { s.raw() };
    assert_eq!(c.cmd(&["AUTH", "pw"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "mover"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SELECT", "5"]), b"+OK\r\n");
    let id = c.cmd(&["CLIENT", "ID"]);
    c.cmd(&["HELLO", "3"]);
    let before = common::connections_moved(&mut admin);
    // Key by key: one of the two phases runs on a foreign shard, so at least one move; the
    // second phase needs a streak twice as long, so at most two.
    for key in [&k0, &k1] {
        for i in 0..STREAK {
            let v = i.to_string();
            assert_eq!(c.cmd(&["SET", key, &v]), b"+OK\r\n");
            assert_eq!(c.cmd(&["GET", key]), bulk(&v));
        }
        assert_eq!(
            c.cmd(&["HSET", &format!("{{{key}}}h"), "f", "v"]),
            b":1\r\n"
        );
        // RESP3 survives: a map reply.
        assert_eq!(
            c.cmd(&["HGETALL", &format!("{{{key}}}h")]),
            [b"%1\r\n".to_vec(), bulk("f"), bulk("v")].concat()
        );
    }
    let moved = common::connections_moved(&mut admin) - before;
    assert!((1..=2).contains(&moved), "moves: {moved}");
    assert_eq!(c.cmd(&["CLIENT", "ID"]), id, "the client keeps its id");
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), bulk("mover"));
    let info = String::from_utf8_lossy(&c.cmd(&["CLIENT", "INFO"])).into_owned();
    assert!(
        info.contains(" db=5 ") && info.contains(" resp=3 "),
        "{info}"
    );
    // The writes went to database 5.
    assert_eq!(admin.cmd(&["SELECT", "5"]), b"+OK\r\n");
    assert_eq!(admin.cmd(&["GET", &k0]), bulk(&(STREAK - 1).to_string()));
    assert_eq!(admin.cmd(&["GET", &k1]), bulk(&(STREAK - 1).to_string()));
    // CLIENT LIST still shows it once, under its name.
    let list = String::from_utf8_lossy(&admin.cmd(&["CLIENT", "LIST"])).into_owned();
    assert_eq!(list.matches("name=mover ").count(), 1, "{list}");
}

fn session_survives_moves_tcp(b: Backend) {
    session_survives_moves(b, false);
}

fn session_survives_moves_unix(b: Backend) {
    session_survives_moves(b, true);
}

/// A move between rounds carries input not run yet: here half a command.
fn a_move_mid_pipeline_keeps_unread_input(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", &k1, "one"]), b"+OK\r\n");
    let settled = common::connections_moved(&mut admin);
    settle_on(&mut c, &k0);
    // The streak this connection's next move needs: 64, doubled if settling moved it.
    let needed = 64 << (common::connections_moved(&mut admin) - settled);
    let before = common::connections_moved(&mut admin);
    gets(&mut c, &k1, needed - 1, &bulk("one"));
    assert_eq!(
        common::connections_moved(&mut admin),
        before,
        "one command short of a move"
    );
    // The last command of the streak, then the first half of a SET in the same write.
    let set = encode(&["SET", &k1, "two"]);
    let (head, tail) = set.split_at(set.len() / 2);
    c.send(&[encode(&["GET", &k1]), head.to_vec()].concat());
    assert_eq!(c.reply(), bulk("one"));
    // Wait for the move before the rest arrives.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while common::connections_moved(&mut admin) == before {
        assert!(
            std::time::Instant::now() < deadline,
            "the connection never moved"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    c.send(&[tail.to_vec(), encode(&["GET", &k1])].concat());
    assert_eq!(c.reply(), b"+OK\r\n");
    assert_eq!(c.reply(), bulk("two"));
    assert_eq!(common::connections_moved(&mut admin), before + 1);
}

/// MULTI and WATCH keep a connection in place; it moves once they are over, and a MULTI
/// after the move runs normally.
fn transactions_hold_a_connection_in_place(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    assert_eq!(c.cmd(&["SET", &k1, "0"]), b"+OK\r\n");
    settle_on(&mut c, &k0);
    let before = common::connections_moved(&mut admin);
    assert_eq!(c.cmd(&["WATCH", &k1]), b"+OK\r\n");
    gets(&mut c, &k1, STREAK, &bulk("0"));
    assert_eq!(
        common::connections_moved(&mut admin),
        before,
        "a watching connection stays"
    );
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    for _ in 0..STREAK {
        assert_eq!(c.cmd(&["INCR", &k1]), b"+QUEUED\r\n");
    }
    assert_eq!(
        common::connections_moved(&mut admin),
        before,
        "a connection in MULTI stays"
    );
    let exec = c.cmd(&["EXEC"]);
    assert!(exec.starts_with(format!("*{STREAK}\r\n:1\r\n:2\r\n").as_bytes()));
    assert!(exec.ends_with(format!(":{STREAK}\r\n").as_bytes()));
    // The streak built while watching is long enough: with EXEC over, the connection moves.
    assert_eq!(c.cmd(&["GET", &k1]), bulk(&STREAK.to_string()));
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(common::connections_moved(&mut admin), before + 1);
    assert_eq!(c.cmd(&["MULTI"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["INCR", &k1]), b"+QUEUED\r\n");
    assert_eq!(c.cmd(&["INCR", &k0]), b"+QUEUED\r\n");
    assert_eq!(
        c.cmd(&["EXEC"]),
        format!("*2\r\n:{}\r\n:1\r\n", STREAK + 1).as_bytes()
    );
}

/// A moved connection blocks and is woken on its new thread; a blocked or subscribed one
/// does not move.
fn blocked_and_subscribed_connections(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let list1 = format!("{{{k1}}}list");
    let mut admin = s.raw();
    let mut c = s.raw();
    settle_on(&mut c, &k0);
    let before = common::connections_moved(&mut admin);
    gets(&mut c, &k1, STREAK, b"$-1\r\n");
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        common::connections_moved(&mut admin),
        before + 1,
        "moved to k1's thread"
    );
    c.send(&encode(&["BLPOP", &list1, "0"]));
    wait_blocked(&mut admin, 1);
    assert_eq!(admin.cmd(&["RPUSH", &list1, "x"]), b":1\r\n");
    assert_eq!(
        c.reply(),
        [b"*2\r\n".to_vec(), bulk(&list1), bulk("x")].concat()
    );

    // A RESP3 subscriber may run commands, but it does not move.
    let mut sub = s.raw();
    sub.cmd(&["HELLO", "3"]);
    settle_on(&mut sub, &k0);
    sub.cmd(&["SUBSCRIBE", "news"]);
    let before = common::connections_moved(&mut admin);
    gets(&mut sub, &k1, STREAK, b"_\r\n");
    assert_eq!(sub.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        common::connections_moved(&mut admin),
        before,
        "a subscriber stays"
    );
    assert_eq!(admin.cmd(&["PUBLISH", "news", "hi"]), b":1\r\n");
    assert_eq!(
        sub.reply(),
        [
            b">3\r\n".to_vec(),
            bulk("message"),
            bulk("news"),
            bulk("hi")
        ]
        .concat()
    );
}

/// A pipelining client pays one hop per round: it stays where it was accepted.
fn pipelining_clients_stay(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    settle_on(&mut c, &k0);
    let before = common::connections_moved(&mut admin);
    for _ in 0..5 {
        pipelined_gets(&mut c, &k1, STREAK, b"$-1\r\n");
    }
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(common::connections_moved(&mut admin), before);
}

/// `migrate-connections no` keeps every connection where it was accepted.
fn moves_can_be_switched_off(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    settle_on(&mut c, &k0);
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "migrate-connections", "no"]),
        b"+OK\r\n"
    );
    let before = common::connections_moved(&mut admin);
    gets(&mut c, &k1, STREAK, b"$-1\r\n");
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(common::connections_moved(&mut admin), before);
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "migrate-connections"]),
        [b"*2\r\n".to_vec(), bulk("migrate-connections"), bulk("no")].concat()
    );
}

/// A subscriber living on `key`'s thread, subscribed to `channel`.
fn subscriber_on(s: &Server, key: &str, channel: &str) -> Raw {
    let mut sub = s.raw();
    settle_on(&mut sub, key);
    assert_eq!(
        sub.cmd(&["SUBSCRIBE", channel]),
        [
            b"*3\r\n".to_vec(),
            bulk("subscribe"),
            bulk(channel),
            b":1\r\n".to_vec()
        ]
        .concat()
    );
    sub
}

/// Publishes `first..last` on `channel` in one pipeline; each reaches `receivers`.
fn publish_numbered(p: &mut Raw, channel: &str, range: std::ops::Range<usize>, receivers: usize) {
    let wire: Vec<u8> = range
        .clone()
        .flat_map(|i| encode(&["PUBLISH", channel, &i.to_string()]))
        .collect();
    p.send(&wire);
    for i in range {
        assert_eq!(
            p.reply(),
            format!(":{receivers}\r\n").as_bytes(),
            "PUBLISH #{i}"
        );
    }
}

/// Reads messages `range` on `channel`, in order.
fn messages_in_order(sub: &mut Raw, channel: &str, range: std::ops::Range<usize>) {
    for i in range {
        let want = [
            b"*3\r\n".to_vec(),
            bulk("message"),
            bulk(channel),
            bulk(&i.to_string()),
        ]
        .concat();
        assert_eq!(sub.reply(), want, "message #{i}");
    }
}

/// A publisher whose messages all go to subscribers on one other thread moves there, even
/// pipelining, and every message arrives once, in order, across the move; a publisher whose
/// subscribers live on both threads stays.
fn publishers_move_to_their_subscribers(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut sub = subscriber_on(&s, &k1, "news");
    let mut publisher = s.raw();
    settle_on(&mut publisher, &k0);
    let before = common::connections_moved(&mut admin);
    for round in 0..4 {
        let range = round * STREAK..(round + 1) * STREAK;
        publish_numbered(&mut publisher, "news", range.clone(), 1);
        messages_in_order(&mut sub, "news", range);
    }
    assert_eq!(publisher.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        common::connections_moved(&mut admin),
        before + 1,
        "the publisher moved to its subscriber's thread"
    );

    // A second subscriber on the publisher's first thread: the messages go to both threads.
    let mut sub0 = subscriber_on(&s, &k0, "news");
    let mut spread = s.raw();
    settle_on(&mut spread, &k0);
    let before = common::connections_moved(&mut admin);
    publish_numbered(&mut spread, "news", 0..STREAK, 2);
    for sub in [&mut sub, &mut sub0] {
        messages_in_order(sub, "news", 0..STREAK);
    }
    assert_eq!(spread.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        common::connections_moved(&mut admin),
        before,
        "no one thread to go to"
    );
}

/// INFO shards' `clients=` of each thread.
fn clients_per_thread(admin: &mut Raw) -> Vec<usize> {
    let info = String::from_utf8_lossy(&admin.cmd(&["INFO", "shards"])).into_owned();
    info.lines()
        .filter_map(|l| l.split(",clients=").nth(1))
        .filter_map(|rest| rest.split(',').next()?.parse().ok())
        .collect()
}

/// Waits until the threads serve `total` clients between them.
fn placed(admin: &mut Raw, total: usize) -> Vec<usize> {
    for _ in 0..200 {
        let counts = clients_per_thread(admin);
        if counts.iter().sum::<usize>() == total {
            return counts;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("never {total} clients: {:?}", clients_per_thread(admin));
}

/// Each thread deals the connections it accepts round-robin over the threads, so however
/// the kernel spread the accepts, every thread serves its share; with
/// `migrate-connections no` each stays where it was accepted.
fn accepted_connections_are_dealt(b: Backend, unix: bool) {
    let s = Server::start_with(b, 3, &[]);
    let mut admin = s.raw();
    let open = |n: usize| -> Vec<Raw> {
        (0..n)
            .map(|_| {
                let mut c = if unix { s.raw_unix() } else { s.raw() };
                assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
                c
            })
            .collect()
    };
    let clients = open(60);
    let counts = placed(&mut admin, 61);
    assert_eq!(counts.len(), 3);
    // 61 clients dealt in turns from up to 3 acceptors: at most 2 off an even share.
    assert!(
        counts.iter().all(|&n| n.abs_diff(61 / 3) <= 2),
        "{counts:?}"
    );
    // Every dealt client is served: its session works end to end.
    for (i, mut c) in clients.into_iter().enumerate() {
        let key = format!("dealt{i}");
        assert_eq!(c.cmd(&["SET", &key, "v"]), b"+OK\r\n");
        assert_eq!(c.cmd(&["GET", &key]), bulk("v"));
    }
    assert_eq!(
        common::connections_moved(&mut admin),
        0,
        "dealing is not moving"
    );
}

fn accepted_connections_are_dealt_tcp(b: Backend) {
    accepted_connections_are_dealt(b, false);
}

fn accepted_connections_are_dealt_unix(b: Backend) {
    accepted_connections_are_dealt(b, true);
}

backend_tests!(
    accepted_connections_are_dealt_tcp,
    accepted_connections_are_dealt_unix,
    session_survives_moves_tcp,
    session_survives_moves_unix,
    a_move_mid_pipeline_keeps_unread_input,
    transactions_hold_a_connection_in_place,
    blocked_and_subscribed_connections,
    moves_can_be_switched_off,
    pipelining_clients_stay,
    publishers_move_to_their_subscribers,
);
