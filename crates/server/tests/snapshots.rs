//! Snapshots with the real binary (docs/persistence.md, "Snapshots"): BGSAVE under a load of
//! cross-shard transfers is one point in time; a snapshot loads under any thread count with
//! the same DEBUG DIGEST; redis-check-rdb accepts every shard file; a dump.rdb written by
//! redis-server loads with the same DEBUG DIGEST; files of another snapshot are never loaded;
//! replies and INFO fields match Redis 7.0's.

mod common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{fill_every_type, info_field, shard_files, wait_saved, Backend, Raw, Server};

/// A server keeping its snapshots in `data` (a directory that outlives it).
fn start(b: Backend, threads: usize, data: &Path) -> Server {
    let dir = data.to_str().expect("utf-8 path");
    Server::start_with(b, threads, &["--dir", dir])
}

/// A bulk reply holding an integer (GET of a counter).
fn bulk_int(reply: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(reply);
    text.split("\r\n")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {text:?}"))
}

fn int(reply: &[u8]) -> i64 {
    std::str::from_utf8(&reply[1..reply.len() - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {:?}", String::from_utf8_lossy(reply)))
}

/// The snapshot files (and manifest) in `from`, copied to a fresh directory.
fn copy_snapshot(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("tempdir");
    let manifest = from.join("damselfly-snapshot.manifest");
    let text = std::fs::read_to_string(&manifest).expect("a snapshot manifest");
    std::fs::copy(&manifest, to.path().join("damselfly-snapshot.manifest")).expect("copy");
    for name in text.lines().filter_map(|l| l.strip_prefix("file ")) {
        std::fs::copy(from.join(name), to.path().join(name)).expect("copy a shard file");
    }
    to
}

const ACCOUNTS: usize = 16;
const TOTAL: i64 = 16_000;

/// Transfers between accounts on every shard (MULTI: DECRBY one, INCRBY another) run while
/// BGSAVE walks 100 000 other keys; each snapshot, loaded into a fresh server with another
/// thread count, holds the exact total.
fn bgsave_under_transfers_is_a_point_in_time(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 3, data.path());
    let mut c = s.raw();
    c.cmd(&["DEBUG", "POPULATE", "100000", "bulk", "50"]);
    for a in 0..ACCOUNTS {
        c.cmd(&[
            "SET",
            &format!("acct:{a}"),
            &(TOTAL / ACCOUNTS as i64).to_string(),
        ]);
    }
    let load = common::movers(s.port, 3, ACCOUNTS, 0);
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(100));
        let before = load.done();
        assert_eq!(c.cmd(&["BGSAVE"]), b"+Background saving started\r\n");
        assert_eq!(wait_saved(&mut c), "ok", "round {round}");
        let during = load.done() - before;
        assert!(during > 0, "round {round}: no transfer ran during the save");
        let copy = copy_snapshot(data.path());
        let fresh = start(b, 1 + round, copy.path());
        let mut f = fresh.raw();
        let total: i64 = (0..ACCOUNTS)
            .map(|a| bulk_int(&f.cmd(&["GET", &format!("acct:{a}")])))
            .sum();
        assert_eq!(total, TOTAL, "round {round}: the snapshot is not one point");
        assert_eq!(int(&f.cmd(&["DBSIZE"])), 100_000 + ACCOUNTS as i64);
    }
    load.stop();
}

/// SAVE, then restarts with 1, 4 and 2 threads give the same DEBUG DIGEST; redis-check-rdb
/// accepts every shard file.
fn restart_with_other_thread_counts_keeps_the_digest(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 3, data.path());
    let mut c = s.raw();
    fill_every_type(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    drop(s);
    let files = shard_files(data.path());
    assert_eq!(files.len(), 3);
    for f in &files {
        common::assert_redis_check_rdb_accepts(f);
    }
    for threads in [1, 4, 2] {
        let s = start(b, threads, data.path());
        let mut c = s.raw();
        assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest, "{threads} threads");
        assert_eq!(c.cmd(&["EXISTS", "soon"]), b":0\r\n");
        // A save under this thread count replaces the snapshot; the next start reads it.
        assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
        assert_eq!(shard_files(data.path()).len(), threads);
    }
}

/// A dump.rdb written by redis-server 7.0 (SAVE) loads into Damselfly with the same DEBUG
/// DIGEST, under any thread count.
fn redis_dump_loads_with_the_same_digest(b: Backend) {
    let redis = Server::redis();
    let mut r = redis.raw();
    fill_every_type(&mut r);
    let digest = r.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(r.cmd(&["SAVE"]), b"+OK\r\n");
    r.cmd(&["SELECT", "3"]);
    for threads in [1, 3] {
        let data = tempfile::tempdir().expect("tempdir");
        std::fs::copy(
            redis.dir.path().join("dump.rdb"),
            data.path().join("dump.rdb"),
        )
        .expect("copy dump.rdb");
        let s = start(b, threads, data.path());
        let mut c = s.raw();
        assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest, "{threads} threads");
        assert_eq!(c.cmd(&["SELECT", "3"]), b"+OK\r\n");
        for (key, encoding) in [
            ("bigzset", "skiplist"),
            ("z1", "listpack"),
            ("iset1", "intset"),
            ("bighash", "hashtable"),
            ("h1", "listpack"),
        ] {
            let got = c.cmd(&["OBJECT", "ENCODING", key]);
            assert_eq!(got, r.cmd(&["OBJECT", "ENCODING", key]), "{key}");
            assert!(String::from_utf8_lossy(&got).contains(encoding), "{key}");
        }
    }
}

/// Function libraries are saved with the snapshot (redis-check-rdb accepts the file that
/// holds them) and come back under another thread count; a Redis dump.rdb's libraries load
/// as Redis lists them.
fn functions_are_saved_and_loaded(b: Backend) {
    use common::{LIBRARY_A1, LIBRARY_B};
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path());
    let mut c = s.raw();
    c.cmd(&["FUNCTION", "LOAD", LIBRARY_A1]);
    c.cmd(&["FUNCTION", "LOAD", LIBRARY_B]);
    c.cmd(&["SET", "k", "v"]);
    let listed = c.cmd(&["FUNCTION", "LIST", "WITHCODE"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    drop(s);
    for f in shard_files(data.path()) {
        common::assert_redis_check_rdb_accepts(&f);
    }
    let s = start(b, 3, data.path());
    let mut c = s.raw();
    assert_eq!(
        String::from_utf8_lossy(&c.cmd(&["FUNCTION", "LIST", "WITHCODE"])),
        String::from_utf8_lossy(&listed)
    );
    assert_eq!(c.cmd(&["FCALL", "fa", "0"]), b"$2\r\na1\r\n");
    drop(s);

    let redis = Server::redis();
    let mut r = redis.raw();
    r.cmd(&["FUNCTION", "LOAD", LIBRARY_B]);
    r.cmd(&["SET", "k", "v"]);
    assert_eq!(r.cmd(&["SAVE"]), b"+OK\r\n");
    let data = tempfile::tempdir().expect("tempdir");
    std::fs::copy(
        redis.dir.path().join("dump.rdb"),
        data.path().join("dump.rdb"),
    )
    .expect("copy dump.rdb");
    let s = start(b, 2, data.path());
    let mut c = s.raw();
    assert_eq!(
        String::from_utf8_lossy(&c.cmd(&["FUNCTION", "LIST", "WITHCODE"])),
        String::from_utf8_lossy(&r.cmd(&["FUNCTION", "LIST", "WITHCODE"]))
    );
    assert_eq!(c.cmd(&["FCALL_RO", "fb", "0"]), b"$1\r\nb\r\n");
}

/// Files of another snapshot (a run with more threads, a save a crash interrupted) lying in
/// the directory are not loaded, and the next save deletes them.
fn stale_snapshot_files_are_not_loaded(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let old = tempfile::tempdir().expect("tempdir");
    let s = start(b, 4, data.path());
    let mut c = s.raw();
    for i in 0..100 {
        c.cmd(&["SET", &format!("old{i}"), "1"]);
    }
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    let stale = shard_files(data.path());
    for f in &stale {
        std::fs::copy(f, old.path().join(f.file_name().expect("name"))).expect("copy");
    }
    drop(s);
    let s = start(b, 2, data.path());
    let mut c = s.raw();
    c.cmd(&["FLUSHALL"]);
    c.cmd(&["SET", "new", "1"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    for f in &stale {
        assert!(!f.exists(), "{} was kept", f.display());
    }
    drop(s);
    // Put the 4-shard snapshot's files back, and a temporary file of an interrupted one.
    for f in &stale {
        std::fs::copy(old.path().join(f.file_name().expect("name")), f).expect("copy");
    }
    std::fs::copy(&stale[0], data.path().join("damselfly-1-0.rdb.tmp")).expect("copy");
    let s = start(b, 3, data.path());
    let mut c = s.raw();
    assert_eq!(c.cmd(&["DBSIZE"]), b":1\r\n");
    assert_eq!(c.cmd(&["GET", "new"]), b"$1\r\n1\r\n");
    // A file renamed to the current snapshot's name says it is another: start-up refuses it.
    drop(s);
    let current = shard_files(data.path());
    std::fs::copy(&stale[0], &current[0]).expect("copy");
    let log = common::start_refused(data.path(), &[]);
    assert!(log.contains("does not hold shard 0 of snapshot"), "{log}");
}

/// Sends `cmds` and returns the replies.
fn replies(c: &mut Raw, cmds: &[&[&str]]) -> Vec<Vec<u8>> {
    cmds.iter().map(|cmd| c.cmd(cmd)).collect()
}

/// Replies match redis-server's, including while a save runs, and INFO persistence moves as
/// Redis's does.
fn replies_match_redis(b: Backend) {
    let redis = Server::redis();
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path());
    let errors: &[&[&str]] = &[
        &["BGSAVE", "NOW"],
        &["BGSAVE", "SCHEDULE", "X"],
        &["SAVE", "X"],
        &["LASTSAVE", "X"],
        &["MULTI"],
        &["SAVE"],
        &["EXEC"],
        &["MULTI"],
        &["BGSAVE"],
        &["EXEC"],
    ];
    let mut r = redis.raw();
    let mut c = s.raw();
    assert_eq!(replies(&mut c, errors), replies(&mut r, errors));
    // Redis runs the BGSAVE it scheduled in EXEC from its next cron (10 times a second, or
    // later on a busy machine); rdb_saves counts it once it starts.
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(&mut r, "persistence", "rdb_saves").as_deref() == Some("0") {
        assert!(
            Instant::now() < deadline,
            "Redis never ran the scheduled BGSAVE"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_saved(&mut r);
    wait_saved(&mut c);

    // While a save runs, slowed down by a delay per key on both servers.
    for server in [&mut r, &mut c] {
        server.cmd(&["DEBUG", "POPULATE", "2000"]);
        server.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "1000"]);
    }
    let running: &[&[&str]] = &[
        &["BGSAVE"],
        &["BGSAVE"],
        &["BGSAVE", "SCHEDULE"],
        &["SAVE"],
        &["INFO", "persistence"],
    ];
    let got = replies(&mut c, running);
    let want = replies(&mut r, running);
    assert_eq!(got[..4], want[..4]);
    for reply in [&got[4], &want[4]] {
        let text = String::from_utf8_lossy(reply);
        assert!(text.contains("rdb_bgsave_in_progress:1"), "{text}");
    }
    for server in [&mut r, &mut c] {
        server.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]);
    }
    assert_eq!(wait_saved(&mut c), "ok");
    wait_saved(&mut r);

    let field = |c: &mut Raw, f: &str| info_field(c, "persistence", f).unwrap_or_default();
    assert_eq!(field(&mut c, "rdb_changes_since_last_save"), "0");
    let saves: u64 = field(&mut c, "rdb_saves").parse().expect("rdb_saves");
    assert!(saves >= 2, "rdb_saves {saves}");
    let last = int(&c.cmd(&["LASTSAVE"]));
    assert_eq!(field(&mut c, "rdb_last_save_time"), last.to_string());
    c.cmd(&["SET", "a", "1"]);
    c.cmd(&["SET", "b", "1"]);
    assert_eq!(field(&mut c, "rdb_changes_since_last_save"), "2");
    assert_eq!(field(&mut c, "rdb_current_bgsave_time_sec"), "-1");
    assert_ne!(field(&mut c, "rdb_last_bgsave_time_sec"), "-1");
}

/// With `appendonly yes` and no journal yet, start-up loads the snapshot, and its keys go
/// into the journal's first generation (the next start reads them from the journal).
fn appendonly_without_a_journal_starts_from_the_snapshot(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().expect("utf-8 path");
    let s = start(b, 2, data.path());
    let mut c = s.raw();
    fill_every_type(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    drop(s);
    let aof = [
        "--dir",
        dir,
        "--appendonly",
        "yes",
        "--appendfsync",
        "always",
    ];
    let s = Server::start_with(b, 3, &aof);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_eq!(c.cmd(&["SET", "journaled", "1"]), b"+OK\r\n");
    drop(s);
    // The snapshot is still there, but the journal now has a generation: it is what loads.
    let s = Server::start_with(b, 2, &aof);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["GET", "journaled"]), b"$1\r\n1\r\n");
    c.cmd(&["DEL", "journaled"]);
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
}

backend_tests!(
    appendonly_without_a_journal_starts_from_the_snapshot,
    bgsave_under_transfers_is_a_point_in_time,
    restart_with_other_thread_counts_keeps_the_digest,
    redis_dump_loads_with_the_same_digest,
    functions_are_saved_and_loaded,
    stale_snapshot_files_are_not_loaded,
    replies_match_redis,
);

/// `damselfly export-rdb` writes the snapshot of 3 shards as one dump.rdb: redis-server 7.0
/// starts from it with the same DEBUG DIGEST and function libraries, and redis-check-rdb
/// accepts it.
#[test]
fn export_rdb_gives_redis_the_same_dataset() {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(Backend::Epoll, 3, data.path());
    let mut c = s.raw();
    fill_every_type(&mut c);
    c.cmd(&["FUNCTION", "LOAD", common::LIBRARY_B]);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let functions = c.cmd(&["FUNCTION", "LIST", "WITHCODE"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    drop(s);
    let redis_dir = tempfile::tempdir().expect("tempdir");
    let dump = redis_dir.path().join("dump.rdb");
    let out = Command::new(env!("CARGO_BIN_EXE_damselfly"))
        .args(["export-rdb", "--dir"])
        .arg(data.path())
        .arg(&dump)
        .output()
        .expect("run export-rdb");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    common::assert_redis_check_rdb_accepts(&dump);
    let port = common::free_port();
    let mut redis = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--enable-debug-command",
            "yes",
        ])
        .arg("--dir")
        .arg(redis_dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("redis-server");
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut r = loop {
        if let Ok(mut r) = Raw::try_tcp(port) {
            if r.try_cmd(&["PING"]).is_ok_and(|p| p == b"+PONG\r\n") {
                break r;
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(20));
    };
    let theirs = r.cmd(&["DEBUG", "DIGEST"]);
    let their_functions = r.cmd(&["FUNCTION", "LIST", "WITHCODE"]);
    let _ = redis.kill();
    let _ = redis.wait();
    assert_eq!(
        String::from_utf8_lossy(&theirs),
        String::from_utf8_lossy(&digest)
    );
    assert_eq!(
        String::from_utf8_lossy(&their_functions),
        String::from_utf8_lossy(&functions)
    );
}

/// SIGTERM with save points configured saves (writes since the last save are kept); SHUTDOWN
/// NOSAVE does not; SHUTDOWN SAVE saves even without save points; `save ""` at SIGTERM does
/// not.
fn shutdown_saves_as_redis(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    // Default save points, SIGTERM: saved.
    let mut s = start(b, 2, data.path());
    s.raw().cmd(&["SET", "a", "1"]);
    assert!(s.terminate().success());
    let s2 = start(b, 2, data.path());
    assert_eq!(s2.raw().cmd(&["GET", "a"]), b"$1\r\n1\r\n");
    // SHUTDOWN NOSAVE: the write after the last save is gone.
    let mut c = s2.raw();
    c.cmd(&["SET", "b", "2"]);
    c.send(&common::encode(&["SHUTDOWN", "NOSAVE"]));
    assert!(c.closed(), "SHUTDOWN closes the connection");
    let mut s2 = s2;
    let status = common::wait_timeout(s2.child.as_mut().expect("running"), Duration::from_secs(15));
    assert!(status.expect("exits").success());
    drop(s2);
    let dir = data.path().to_str().expect("utf-8");
    let s3 = Server::start_with(b, 2, &["--dir", dir, "--save", ""]);
    let mut c = s3.raw();
    assert_eq!(c.cmd(&["EXISTS", "a", "b"]), b":1\r\n");
    // No save points, SHUTDOWN SAVE: saved.
    c.cmd(&["SET", "c", "3"]);
    c.send(&common::encode(&["SHUTDOWN", "SAVE"]));
    assert!(c.closed());
    let mut s3 = s3;
    let status = common::wait_timeout(s3.child.as_mut().expect("running"), Duration::from_secs(15));
    assert!(status.expect("exits").success());
    drop(s3);
    // No save points, SIGTERM: not saved.
    let mut s4 = Server::start_with(b, 2, &["--dir", dir, "--save", ""]);
    let mut c = s4.raw();
    assert_eq!(c.cmd(&["EXISTS", "a", "b", "c"]), b":2\r\n");
    c.cmd(&["SET", "d", "4"]);
    assert!(s4.terminate().success());
    let s5 = start(b, 2, data.path());
    assert_eq!(s5.raw().cmd(&["EXISTS", "a", "c", "d"]), b":2\r\n");
}

backend_tests!(shutdown_saves_as_redis);

/// The `save` points start background saves as Redis's cron does: `save "1 5"` saves within
/// seconds of the fifth change, and a kill -9 afterwards keeps what was saved.
fn save_points_schedule_saves(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().expect("utf-8");
    let s = Server::start_with(b, 2, &["--dir", dir, "--save", "1 5"]);
    let mut c = s.raw();
    for i in 0..4 {
        c.cmd(&["SET", &format!("k{i}"), "v"]);
    }
    // Four changes: below the point, nothing is saved.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_saves").as_deref(),
        Some("0")
    );
    c.cmd(&["SET", "k4", "v"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut c, "persistence", "rdb_saves").as_deref() != Some("1") {
        assert!(Instant::now() < deadline, "the save point did not save");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        info_field(&mut c, "persistence", "rdb_changes_since_last_save").as_deref(),
        Some("0")
    );
    drop(s);
    let s = Server::start_with(b, 2, &["--dir", dir, "--save", ""]);
    assert_eq!(s.raw().cmd(&["DBSIZE"]), b":5\r\n");
}

backend_tests!(save_points_schedule_saves);
