//! SETBIT and BITFIELD that change nothing count as no change, as in Redis 7.0: the dirty
//! counter (`rdb_changes_since_last_save`) and WATCH see only a flipped bit, a new field
//! value, a new key or a longer string. Compared with redis-server step by step.

mod common;

use common::{info_field, Backend, Pair, Raw, Server};

fn changes(c: &mut Raw) -> i64 {
    info_field(c, "persistence", "rdb_changes_since_last_save")
        .and_then(|v| v.parse().ok())
        .expect("rdb_changes_since_last_save")
}

fn unchanged_bit_writes_are_not_changes(b: Backend) {
    let redis = Server::redis();
    let ours = Server::start(b, &[]);
    let mut pair = Pair::connect(&redis, &ours);
    let steps: &[&[&str]] = &[
        &["SET", "b", "x"],
        &["SETBIT", "b", "1", "1"],
        &["SETBIT", "b", "1", "1"],
        &["SETBIT", "b", "2", "0"],
        &["SETBIT", "b", "100", "0"],
        &["BITFIELD", "b", "SET", "u8", "0", "120"],
        &["BITFIELD", "b", "SET", "u8", "0", "120"],
        &["BITFIELD", "b", "INCRBY", "u8", "0", "0"],
        &[
            "BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "200",
        ],
        &[
            "BITFIELD", "b", "OVERFLOW", "FAIL", "INCRBY", "u8", "400", "200",
        ],
        &["BITFIELD", "b", "GET", "u8", "0"],
        &["SETBIT", "new", "5", "0"],
        &["BITFIELD", "new2", "SET", "u8", "0", "0"],
    ];
    for step in steps {
        let before = (changes(&mut pair.redis), changes(&mut pair.ours));
        pair.same(step);
        let after = (changes(&mut pair.redis), changes(&mut pair.ours));
        assert_eq!(
            after.1 - before.1,
            after.0 - before.0,
            "changes counted for {step:?}"
        );
    }
    // A transaction watching the key survives a write that changed nothing, and not one
    // that did, on both servers.
    let survives = |watcher: &mut Raw, server: &Server, write: &[&str]| {
        assert_eq!(watcher.cmd(&["WATCH", "b"]), b"+OK\r\n");
        server.raw().cmd(write);
        watcher.cmd(&["MULTI"]);
        watcher.cmd(&["GET", "b"]);
        watcher.cmd(&["EXEC"]) != b"*-1\r\n"
    };
    for (write, expected) in [
        (&["SETBIT", "b", "1", "1"][..], true),
        (&["BITFIELD", "b", "SET", "u8", "0", "120"], true),
        (&["SETBIT", "b", "1", "0"], false),
    ] {
        let theirs = survives(&mut pair.redis, &redis, write);
        let mine = survives(&mut pair.ours, &ours, write);
        assert_eq!((mine, theirs), (expected, expected), "{write:?}");
    }
}

backend_tests!(unchanged_bit_writes_are_not_changes);
