//! DEBUG RELOAD and the save settings Redis users rely on (`stop-writes-on-bgsave-error`,
//! `rdbcompression`, `rdbchecksum`) with the real binary, against redis-server 7.0 wherever
//! both servers can run the same commands.

mod common;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{fill_every_type, info_field, wait_saved, Backend, Raw, Server};

/// A server keeping its snapshots in `data`, with more `extra` settings.
fn start(b: Backend, threads: usize, data: &Path, extra: &[&str]) -> Server {
    let dir = data.to_str().expect("utf-8 path");
    let mut args = vec!["--dir", dir];
    args.extend_from_slice(extra);
    Server::start_with(b, threads, &args)
}

/// Sends `cmds` and returns the replies.
fn replies(c: &mut Raw, cmds: &[&[&str]]) -> Vec<String> {
    cmds.iter()
        .map(|cmd| String::from_utf8_lossy(&c.cmd(cmd)).into_owned())
        .collect()
}

/// DEBUG RELOAD saves and loads back the same data set (every type, databases, deadlines);
/// the save counts as one (LASTSAVE, no changes since).
fn reload_keeps_the_data_set(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), &[]);
    let mut c = s.raw();
    fill_every_type(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let keys = c.cmd(&["DBSIZE"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_eq!(c.cmd(&["DBSIZE"]), keys);
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save").as_deref(),
        Some("0")
    );
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_saves").as_deref(),
        Some("1")
    );
    // The snapshot it wrote is what the next start loads.
    drop(s);
    let s = start(b, 3, data.path(), &[]);
    assert_eq!(s.raw().cmd(&["DEBUG", "DIGEST"]), digest);
}

/// NOSAVE loads the last snapshot back; NOFLUSH MERGE joins it to the live keys, the
/// loaded value winning; bad options get Redis's error. Same replies as redis-server.
fn reload_options_as_redis(b: Backend) {
    let redis = Server::redis();
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), &[]);
    let script: &[&[&str]] = &[
        &["DEBUG", "RELOAD", "FAST"],
        &["DEBUG", "RELOAD", "NOSAVE", "NOSAVE", "X"],
        &["MSET", "a", "1", "b", "1", "k:1", "x", "k:2", "y"],
        &["RPUSH", "list", "1", "2"],
        &["SET", "ttl", "v", "EX", "1000"],
        &["SAVE"],
        &["MSET", "a", "2", "c", "2"],
        &["DEL", "k:1"],
        &["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH", "MERGE"],
        &["MGET", "a", "b", "c", "k:1", "k:2"],
        &["LRANGE", "list", "0", "-1"],
        &["PERSIST", "ttl"],
        &["MSET", "a", "3", "d", "3"],
        &["DEBUG", "RELOAD", "nosave"],
        &["MGET", "a", "b", "c", "d", "k:1"],
        &["DBSIZE"],
        &["SET", "e", "4"],
        &["DEBUG", "RELOAD"],
        &["MGET", "a", "e"],
        &["MULTI"],
        &["SET", "f", "5"],
        &["DEBUG", "RELOAD"],
        &["GET", "f"],
        &["EXEC"],
        &["DBSIZE"],
    ];
    assert_eq!(
        replies(&mut s.raw(), script),
        replies(&mut redis.raw(), script)
    );
}

/// `rdb_last_load_keys_loaded` and `rdb_last_load_keys_expired` after DEBUG RELOAD of a file
/// holding keys whose deadline passed since the save, as redis-server counts them; a restart
/// on the same snapshot counts the same.
fn load_counts_as_redis(b: Backend) {
    let redis = Server::redis();
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), &[]);
    let fields = |c: &mut Raw| {
        ["rdb_last_load_keys_loaded", "rdb_last_load_keys_expired"]
            .map(|f| info_field(c, "persistence", f).unwrap_or_default())
    };
    let mut counts = Vec::new();
    for c in [&mut s.raw(), &mut redis.raw()] {
        assert_eq!(fields(c), ["0", "0"]);
        for i in 0..20 {
            c.cmd(&["SET", &format!("k{i}"), "v"]);
        }
        for i in 0..7 {
            c.cmd(&["SET", &format!("short{i}"), "v", "PX", "200"]);
        }
        assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
        std::thread::sleep(Duration::from_millis(300));
        assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), b"+OK\r\n");
        counts.push(fields(c));
    }
    assert_eq!(counts[0], ["20", "7"]);
    assert_eq!(counts[0], counts[1]);
    drop(s);
    let s = start(b, 3, data.path(), &[]);
    assert_eq!(fields(&mut s.raw()), ["20", "7"]);
}

/// What Damselfly does where Redis would not survive or would lose data: NOFLUSH without
/// MERGE meeting a live key (Redis stops on the duplicate) and a load with no snapshot (Redis
/// has emptied its data set first) both fail and change nothing.
fn a_failed_reload_changes_nothing(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), &[]);
    let mut c = s.raw();
    let failed = b"-ERR Error trying to load the RDB dump\r\n";
    assert_eq!(c.cmd(&["SET", "a", "1"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), failed);
    assert_eq!(c.cmd(&["GET", "a"]), b"$1\r\n1\r\n");
    for i in 0..50 {
        c.cmd(&["SET", &format!("k{i}"), "old"]);
    }
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    c.cmd(&["FLUSHALL"]);
    // Only one key exists again, on one shard: every shard's load is refused all the same.
    c.cmd(&["SET", "k7", "new"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH"]), failed);
    assert_eq!(c.cmd(&["DBSIZE"]), b":1\r\n");
    assert_eq!(c.cmd(&["GET", "k7"]), b"$3\r\nnew\r\n");
    // With no clash the same load joins the live keys.
    c.cmd(&["DEL", "k7"]);
    c.cmd(&["SET", "other", "1"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["DBSIZE"]), b":52\r\n");
    // While a BGSAVE runs the reload's save cannot start (Redis would save alongside its
    // child); that is no failed save: writes go on.
    c.cmd(&["DEBUG", "POPULATE", "3000"]);
    c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "200"]);
    assert_eq!(c.cmd(&["BGSAVE"]), b"+Background saving started\r\n");
    assert_eq!(
        c.cmd(&["DEBUG", "RELOAD"]),
        b"-ERR Background save already in progress\r\n"
    );
    assert_eq!(c.cmd(&["SET", "during", "1"]), b"+OK\r\n");
    c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    assert_eq!(wait_saved(&mut c), "ok");
    // The same while a journal rewrite runs.
    c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "200"]);
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        b"+Background append only file rewriting started\r\n"
    );
    assert_eq!(
        c.cmd(&["DEBUG", "RELOAD"]),
        b"-ERR Background save already in progress\r\n"
    );
    assert_eq!(c.cmd(&["SET", "during", "1"]), b"+OK\r\n");
    c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    while info_field(&mut c, "persistence", "aof_rewrite_in_progress").as_deref() != Some("0") {
        assert!(Instant::now() < deadline, "the rewrite did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["GET", "during"]), b"$1\r\n1\r\n");
}

/// Writes on every shard while DEBUG RELOAD runs again and again: each acknowledged INCR is
/// in the final counts, so no write fell between a reload's save and its load.
fn no_write_falls_between_save_and_load(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), &[]);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|w| {
            let (stop, port) = (stop.clone(), s.port);
            std::thread::spawn(move || {
                let mut c = Raw::tcp(port);
                let mut acked = [0i64; 8];
                while !stop.load(Ordering::Relaxed) {
                    for (k, n) in acked.iter_mut().enumerate() {
                        let reply = c.cmd(&["INCR", &format!("w{w}:{k}")]);
                        assert!(reply.starts_with(b":"), "{reply:?}");
                        *n += 1;
                    }
                }
                acked
            })
        })
        .collect();
    let mut c = s.raw();
    for _ in 0..10 {
        assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), b"+OK\r\n");
        std::thread::sleep(Duration::from_millis(30));
    }
    stop.store(true, Ordering::Relaxed);
    for (w, writer) in writers.into_iter().enumerate() {
        let acked = writer.join().expect("writer");
        for (k, n) in acked.iter().enumerate() {
            let got = c.cmd(&["GET", &format!("w{w}:{k}")]);
            assert_eq!(got, common::bulk(&n.to_string()), "w{w}:{k}");
        }
    }
}

/// With the journal on, a reload that loads something else than the live data (NOSAVE)
/// rewrites the journal, so a restart finds what the reload loaded.
fn reload_nosave_reaches_the_journal(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let aof = ["--appendonly", "yes", "--appendfsync", "always"];
    let s = start(b, 2, data.path(), &aof);
    let mut c = s.raw();
    c.cmd(&["MSET", "a", "1", "b", "1"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    c.cmd(&["MSET", "a", "2", "c", "2"]);
    let rewrites = |c: &mut Raw| info_field(c, "persistence", "aof_rewrites");
    let before = rewrites(&mut c);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), b"+OK\r\n");
    let deadline = Instant::now() + Duration::from_secs(30);
    while rewrites(&mut c) == before
        || info_field(&mut c, "persistence", "aof_rewrite_in_progress").as_deref() != Some("0")
    {
        assert!(Instant::now() < deadline, "the journal was not rewritten");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s);
    let s = start(b, 2, data.path(), &aof);
    let mut c = s.raw();
    assert_eq!(
        c.cmd(&["MGET", "a", "b", "c"]),
        b"*3\r\n$1\r\n1\r\n$1\r\n1\r\n$-1\r\n"
    );
}

/// A failed BGSAVE with save points set refuses writes (and PING) with Redis's MISCONF,
/// inside MULTI too, until `stop-writes-on-bgsave-error no`, no save points, or a save that
/// succeeds; reads keep working. Same replies as redis-server.
fn a_failed_save_stops_writes_as_redis(b: Backend) {
    let redis = Server::redis();
    let data = tempfile::tempdir().expect("tempdir");
    let ours = data.path().join("dir");
    std::fs::create_dir(&ours).expect("mkdir");
    let s = start(b, 2, &ours, &[]);
    let (mut c, mut r) = (s.raw(), redis.raw());
    let mut lastsave = Vec::new();
    // Each server's directory removed (Redis 7.0 refuses CONFIG SET dir): the next save
    // cannot create its file.
    for (dir, conn) in [(ours.as_path(), &mut c), (redis.dir.path(), &mut r)] {
        conn.cmd(&["CONFIG", "SET", "save", "3600 1"]);
        conn.cmd(&["SET", "k", "0"]);
        lastsave.push(conn.cmd(&["LASTSAVE"]));
        std::fs::remove_dir_all(dir).expect("rm -r");
        assert_eq!(conn.cmd(&["SAVE"]), b"-ERR\r\n", "{}", dir.display());
        assert_eq!(conn.cmd(&["BGSAVE"]), b"+Background saving started\r\n");
        assert_eq!(wait_saved(conn), "err", "{}", dir.display());
    }
    let script: &[&[&str]] = &[
        &["SET", "k", "1"],
        &["PING"],
        &["GET", "k"],
        &["INCR", "n"],
        &["MULTI"],
        &["GET", "k"],
        &["SET", "k", "2"],
        &["EXEC"],
        &["MULTI"],
        &["GET", "k"],
        &["EXEC"],
        &["CONFIG", "SET", "stop-writes-on-bgsave-error", "no"],
        &["SET", "k", "3"],
        &["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"],
        &["DEL", "k"],
        &["CONFIG", "SET", "save", ""],
        &["SET", "k", "4"],
        &["CONFIG", "SET", "save", "3600 1"],
        &["SET", "k", "5"],
        &["GET", "k"],
    ];
    assert_eq!(replies(&mut c, script), replies(&mut r, script));
    assert_eq!(
        c.cmd(&["LASTSAVE"]),
        lastsave[0],
        "a failed save is no save"
    );
    // A save that succeeds lets writes in again.
    std::fs::create_dir(&ours).expect("mkdir");
    assert_eq!(c.cmd(&["BGSAVE"]), b"+Background saving started\r\n");
    assert_eq!(wait_saved(&mut c), "ok");
    assert_eq!(c.cmd(&["SET", "k", "6"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
}

/// `rdbcompression` as Redis: DUMP payloads are byte-identical to redis-server's with it on
/// and off, and snapshot files hold long strings compressed or not.
fn rdbcompression_as_redis(b: Backend) {
    let redis = Server::redis();
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 1, data.path(), &[]);
    let (mut c, mut r) = (s.raw(), redis.raw());
    let long = "damselfly ".repeat(40);
    let script: &[&[&str]] = &[
        &["SET", "long", &long],
        &["DUMP", "long"],
        &["CONFIG", "SET", "rdbcompression", "no"],
        &["CONFIG", "GET", "rdbcompression"],
        &["DUMP", "long"],
        &["RESTORE", "copy", "0", "x"],
    ];
    let ours = replies(&mut c, script);
    assert_eq!(ours, replies(&mut r, script));
    assert_ne!(ours[1], ours[4], "compression changed nothing");
    let has_plain_text = |dir: &Path| {
        let bytes = std::fs::read(&common::shard_files(dir)[0]).expect("read");
        bytes.windows(long.len()).any(|w| w == long.as_bytes())
    };
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    assert!(has_plain_text(data.path()), "rdbcompression no compressed");
    c.cmd(&["CONFIG", "SET", "rdbcompression", "yes"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    assert!(!has_plain_text(data.path()), "rdbcompression yes did not");
}

/// `rdbchecksum no` writes a zero trailer (which redis-check-rdb accepts) and loads a file
/// whose checksum is wrong, as Redis does; with `yes` that file is refused.
fn rdbchecksum_as_redis(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 1, data.path(), &["--rdbchecksum", "no"]);
    let mut c = s.raw();
    fill_every_type(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    drop(s);
    let file = common::shard_files(data.path()).remove(0);
    let mut bytes = std::fs::read(&file).expect("read");
    let trailer = bytes.len() - 8;
    assert_eq!(bytes[trailer..], [0; 8], "a checksum was written");
    common::assert_redis_check_rdb_accepts(&file);
    // A wrong checksum: loaded with `rdbchecksum no`, refused with `yes`.
    bytes[trailer] = 1;
    std::fs::write(&file, &bytes).expect("write");
    let s = start(b, 2, data.path(), &["--rdbchecksum", "no"]);
    assert_eq!(s.raw().cmd(&["DEBUG", "DIGEST"]), digest);
    drop(s);
    let log = common::start_refused(data.path(), &[]);
    assert!(log.contains("checksum"), "{log}");
}

backend_tests!(
    reload_keeps_the_data_set,
    reload_options_as_redis,
    load_counts_as_redis,
    a_failed_reload_changes_nothing,
    no_write_falls_between_save_and_load,
    reload_nosave_reaches_the_journal,
    a_failed_save_stops_writes_as_redis,
    rdbcompression_as_redis,
    rdbchecksum_as_redis,
);
