//! Direct replies (docs/architecture.md, "Direct replies"): the shard that runs a client's
//! lone command on another thread writes the reply to the client's socket itself. These
//! tests check what that must not change: replies complete and in request order when the
//! client does not wait for each one, a reply larger than the socket takes at once, the reply
//! to a client that half-closes its socket, and no bytes ever reaching the wrong client when
//! connections close and their descriptors are reused. INFO stats `direct_replies` counts the
//! replies a shard wrote whole, which is how the tests know the path was taken.

mod common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::time::Duration;

use common::{bulk, encode, info_field, Backend, Raw, Server};

fn direct_replies(admin: &mut Raw) -> u64 {
    info_field(admin, "stats", "direct_replies")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// One request at a time, alternating a key on each shard so the connection never moves:
/// every command for the other thread's shard is answered directly, and only those.
fn request_reply_alternating(b: Backend, unix: bool) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = if unix { s.raw_unix() } else { s.raw() };
    let before = direct_replies(&mut admin);
    for i in 0..100 {
        let v = format!("value-{i}");
        for key in [&k0, &k1] {
            assert_eq!(c.cmd(&["SET", key, &v]), b"+OK\r\n");
            assert_eq!(c.cmd(&["GET", key]), bulk(&v));
        }
    }
    // RESP3 and an error reply take the same path.
    c.cmd(&["HELLO", "3"]);
    for key in [&k0, &k1] {
        assert_eq!(
            c.cmd(&["HSET", key, "f", "v"]).get(..10),
            Some(&b"-WRONGTYPE"[..])
        );
        assert_eq!(c.cmd(&["DEL", key]), b":1\r\n");
        assert_eq!(c.cmd(&["HSET", key, "f", "v"]), b":1\r\n");
        assert_eq!(
            c.cmd(&["HGETALL", key]),
            [b"%1\r\n".to_vec(), bulk("f"), bulk("v")].concat()
        );
    }
    // 400 remote commands before HELLO, 4 after: one of the two keys is remote.
    assert_eq!(direct_replies(&mut admin) - before, 204);
}

fn request_reply_tcp(b: Backend) {
    request_reply_alternating(b, false);
}

fn request_reply_unix(b: Backend) {
    request_reply_alternating(b, true);
}

/// With `direct-replies no` the same traffic goes back through the client's thread.
fn switched_off(b: Backend) {
    let s = Server::start(b, &["--direct-replies", "no"]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    for i in 0..50 {
        for key in [&k0, &k1] {
            assert_eq!(
                c.cmd(&["INCR", key]),
                format!(":{}\r\n", i + 1).into_bytes()
            );
        }
    }
    assert_eq!(direct_replies(&mut admin), 0);
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "direct-replies", "yes"]),
        b"+OK\r\n"
    );
    for key in [&k0, &k1] {
        assert_eq!(c.cmd(&["INCR", key]), b":51\r\n");
    }
    assert_eq!(direct_replies(&mut admin), 1);
}

/// Commands written one by one without waiting for replies: a command that arrives while
/// the reply before it is in flight waits for it, so replies and effects stay in order.
fn unwaited_commands_stay_in_order(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let before = direct_replies(&mut admin);
    let mut w = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
    w.set_nodelay(true).expect("nodelay");
    let r = w.try_clone().expect("clone");
    r.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    const N: usize = 3_000;
    let reader = std::thread::spawn(move || {
        let mut c = Raw::over(
            Box::new(r.try_clone().expect("clone")),
            Box::new(std::io::sink()),
            r,
        );
        (0..N).map(|_| c.reply()).collect::<Vec<_>>()
    });
    for i in 0..N {
        let key = if i % 3 == 0 { &k0 } else { &k1 };
        // Every tenth command after a pause, so it is read alone with nothing left to write
        // (a direct reply); the ones after it closer and closer, so some arrive while the
        // reply before is in flight and some together in one round.
        match i % 10 {
            0 => std::thread::sleep(Duration::from_millis(2)),
            1..=5 => std::thread::sleep(Duration::from_micros(20)),
            _ => {}
        }
        w.write_all(&encode(&["INCR", key])).expect("write");
    }
    let replies = reader.join().expect("reader");
    let (mut n0, mut n1) = (0, 0);
    for (i, reply) in replies.iter().enumerate() {
        let n = if i % 3 == 0 { &mut n0 } else { &mut n1 };
        *n += 1;
        assert_eq!(reply, &format!(":{n}\r\n").into_bytes(), "reply #{i}");
    }
    assert!(
        direct_replies(&mut admin) > before,
        "no reply went the direct way"
    );
}

/// A reply larger than the socket buffer: the shard writes what fits, the client's thread
/// the rest, and the stream stays whole.
fn reply_larger_than_the_socket_takes(b: Backend) {
    let s = Server::start(b, &["--migrate-connections", "no"]);
    let (k0, k1) = common::key_on_each_shard();
    let big: String = (0..8 << 20)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let mut c = s.raw();
    for key in [&k0, &k1] {
        assert_eq!(c.cmd(&["SET", key, &big]), b"+OK\r\n");
    }
    for round in 0..3 {
        for key in [&k0, &k1] {
            c.send(&encode(&["GET", key]));
            // Not reading for a while lets the socket buffer fill up.
            std::thread::sleep(Duration::from_millis(100));
            assert!(c.reply() == bulk(&big), "GET {key} round {round}");
            assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
        }
    }
}

/// A client that sends its last command and half-closes still gets the reply.
fn half_closed_client_gets_its_reply(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    for key in [&k0, &k1] {
        assert_eq!(admin.cmd(&["SET", key, "v"]), b"+OK\r\n");
    }
    for i in 0..100 {
        let key = if i % 2 == 0 { &k0 } else { &k1 };
        let mut t = TcpStream::connect(("127.0.0.1", s.port)).expect("connect");
        t.set_read_timeout(Some(Duration::from_secs(10))).ok();
        t.write_all(&encode(&["GET", key])).expect("write");
        t.shutdown(Shutdown::Write).expect("shutdown");
        let mut got = Vec::new();
        t.read_to_end(&mut got).expect("read");
        assert_eq!(got, bulk("v"), "GET {key} #{i}");
    }
}

/// Clients that close right after sending, while others connect (reusing descriptors) and
/// check every byte they receive: a shard never writes to a descriptor after its
/// connection let go of it.
fn no_bytes_reach_the_wrong_client(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    for key in [&k0, &k1] {
        assert_eq!(admin.cmd(&["SET", key, key]), b"+OK\r\n");
    }
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let (k0, k1, port) = (k0.clone(), k1.clone(), s.port);
            std::thread::spawn(move || {
                for i in 0..300 {
                    let key = if (i + w) % 2 == 0 { &k0 } else { &k1 };
                    let mut t = TcpStream::connect(("127.0.0.1", port)).expect("connect");
                    t.write_all(&encode(&["GET", key])).expect("write");
                    if i % 2 == 0 {
                        // Gone before the reply.
                        continue;
                    }
                    t.set_read_timeout(Some(Duration::from_secs(10))).ok();
                    let want = bulk(key);
                    let mut got = vec![0; want.len()];
                    t.read_exact(&mut got).expect("read");
                    assert_eq!(got, want, "worker {w} #{i}");
                    t.write_all(&encode(&["PING"])).expect("write");
                    let mut pong = [0; 7];
                    t.read_exact(&mut pong).expect("read");
                    assert_eq!(&pong, b"+PONG\r\n", "worker {w} #{i}: stray bytes");
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert_eq!(admin.cmd(&["PING"]), b"+PONG\r\n");
}

/// A command the slow log must record comes back to the client's thread, which logs it.
fn slow_commands_are_logged(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        b"+OK\r\n"
    );
    assert_eq!(c.cmd(&["CLIENT", "SETNAME", "slowpoke"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    for key in [&k0, &k1] {
        assert_eq!(c.cmd(&["SET", key, "v"]), b"+OK\r\n");
    }
    let log = String::from_utf8_lossy(&c.cmd(&["SLOWLOG", "GET"])).into_owned();
    for key in [&k0, &k1] {
        assert!(log.contains(key.as_str()), "{key} missing from {log}");
    }
    assert_eq!(log.matches("slowpoke").count(), 3, "{log}");
}

/// Under `appendfsync always` the shard writes the reply once its record is on disk.
fn journal_always(b: Backend) {
    let s = Server::start(b, &["--appendonly", "yes", "--appendfsync", "always"]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    let before = direct_replies(&mut admin);
    for i in 0..20 {
        for key in [&k0, &k1] {
            assert_eq!(
                c.cmd(&["INCR", key]),
                format!(":{}\r\n", i + 1).into_bytes()
            );
        }
    }
    assert_eq!(direct_replies(&mut admin) - before, 20);
}

/// A script whose keys live on the other thread's shard runs there and replies from there,
/// counted in the command statistics as if its own thread had run it; one the shard hands
/// back (it reaches a key on another shard) runs again on its own thread, once; one the
/// slow log must record comes back to be logged.
fn scripts_reply_from_their_shard(b: Backend) {
    let s = Server::start(b, &[]);
    let (k0, k1) = common::key_on_each_shard();
    let mut admin = s.raw();
    let mut c = s.raw();
    let set = "return redis.call('set', KEYS[1], ARGV[1])";
    let get = "return redis.call('get', KEYS[1])";
    let fail = "return redis.error_reply('MYERR ' .. KEYS[1])";
    let before = direct_replies(&mut admin);
    for i in 0..50 {
        let v = format!("value-{i}");
        for key in [&k0, &k1] {
            assert_eq!(c.cmd(&["EVAL", set, "1", key, &v]), b"+OK\r\n");
            assert_eq!(c.cmd(&["EVAL", get, "1", key]), bulk(&v));
        }
    }
    for key in [&k0, &k1] {
        assert_eq!(
            c.cmd(&["EVAL", fail, "1", key]),
            format!("-MYERR {key}\r\n").into_bytes()
        );
    }
    // 200 scripts, 2 errors: half on the other thread's shard.
    assert_eq!(direct_replies(&mut admin) - before, 101);
    let stats = String::from_utf8_lossy(&admin.cmd(&["INFO", "commandstats"])).into_owned();
    assert!(
        stats.contains("cmdstat_eval:calls=202,") && stats.contains("failed_calls=2"),
        "{stats}"
    );
    let errors = String::from_utf8_lossy(&admin.cmd(&["INFO", "errorstats"])).into_owned();
    assert!(errors.contains("errorstat_MYERR:count=2"), "{errors}");

    // Each key's script reaches the other key's shard: handed back and run again there.
    let restarts = || info_field(&mut s.raw(), "stats", "script_shard_restarts");
    let roam = "redis.call('incr', KEYS[1]) return redis.call('incr', ARGV[1])";
    assert_eq!(c.cmd(&["SET", &k0, "0"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["SET", &k1, "0"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["EVAL", roam, "1", &k0, &k1]), b":1\r\n");
    assert_eq!(restarts().as_deref(), Some("1"));
    let twice = format!("{roam} ");
    assert_eq!(c.cmd(&["EVAL", &twice, "1", &k1, &k0]), b":2\r\n");
    assert_eq!(restarts().as_deref(), Some("2"));
    assert_eq!(c.cmd(&["MGET", &k0, &k1]), b"*2\r\n$1\r\n2\r\n$1\r\n2\r\n");

    assert_eq!(
        c.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        b"+OK\r\n"
    );
    assert_eq!(c.cmd(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    for key in [&k0, &k1] {
        assert_eq!(c.cmd(&["EVAL", get, "1", key]), b"$1\r\n2\r\n");
    }
    let log = String::from_utf8_lossy(&c.cmd(&["SLOWLOG", "GET"])).into_owned();
    for key in [&k0, &k1] {
        assert!(log.contains(key.as_str()), "{key} missing from {log}");
    }
}

backend_tests!(
    scripts_reply_from_their_shard,
    request_reply_tcp,
    request_reply_unix,
    switched_off,
    unwaited_commands_stay_in_order,
    reply_larger_than_the_socket_takes,
    half_closed_client_gets_its_reply,
    no_bytes_reach_the_wrong_client,
    slow_commands_are_logged,
    journal_always,
);
