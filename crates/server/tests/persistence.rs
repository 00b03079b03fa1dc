//! The journal with the real binary (docs/persistence.md): what comes back after kill -9 and
//! restarts with other thread counts, under each `appendfsync`; torn tails, damage, stale
//! files. Crash rounds are `DAMSELFLY_CRASH_ROUNDS` (CI: 3 per setting; the documented long
//! run: 20).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{Backend, Raw, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn rounds() -> usize {
    std::env::var("DAMSELFLY_CRASH_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3)
}

/// A server journaling into `data` (a directory that outlives it).
fn start(b: Backend, threads: usize, data: &Path, fsync: &str, extra: &[&str]) -> Server {
    let dir = data.to_str().expect("utf-8 path");
    let mut args = vec!["--appendonly", "yes", "--appendfsync", fsync, "--dir", dir];
    args.extend_from_slice(extra);
    Server::start_with(b, threads, &args)
}

/// kill -9 (Server's Drop sends SIGKILL and reaps it).
fn kill(s: Server) {
    drop(s);
}

fn digest(c: &mut Raw) -> Vec<u8> {
    c.cmd(&["DEBUG", "DIGEST"])
}

fn int(reply: &[u8]) -> i64 {
    std::str::from_utf8(&reply[1..reply.len() - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {:?}", String::from_utf8_lossy(reply)))
}

/// Commands of every kind whose replay must rebuild the same data: relative deadlines,
/// random picks, floats, cross-shard moves, transactions, blocking pops served by a push,
/// databases, DEBUG POPULATE.
fn workload(c: &mut Raw, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    for i in 0..300 {
        let k = format!("k{}", rng.gen_range(0..40));
        let k2 = format!("k{}", rng.gen_range(0..40));
        let (script_key, script_other) = (k.clone(), k2.clone());
        let n = rng.gen_range(0..1000).to_string();
        let sk = format!("x{}", i % 3);
        let cmd: Vec<String> = match rng.gen_range(0..30) {
            0 => vec!["SET".into(), k, n, "EX".into(), "1000".into()],
            1 => vec!["INCRBYFLOAT".into(), format!("f{}", i % 5), "1.25".into()],
            2 => vec!["RPUSH".into(), format!("l{}", i % 4), n.clone(), n],
            3 => vec!["SADD".into(), format!("s{}", i % 3), n],
            4 => vec!["SPOP".into(), format!("s{}", i % 3)],
            5 => vec!["HINCRBYFLOAT".into(), "h".into(), k, "0.5".into()],
            6 => vec!["ZADD".into(), "z".into(), n, k],
            7 => vec!["ZINCRBY".into(), "z".into(), "2".into(), k],
            8 => vec!["MSET".into(), k, n.clone(), k2, n],
            9 => vec!["RENAME".into(), k, k2],
            10 => vec!["EXPIRE".into(), k, "5000".into()],
            11 => vec!["PEXPIRE".into(), k, "1".into()],
            12 => vec!["GETEX".into(), k, "PX".into(), "90000".into()],
            13 => vec!["DEL".into(), k, k2],
            14 => vec![
                "LMOVE".into(),
                "l0".into(),
                "l1".into(),
                "LEFT".into(),
                "RIGHT".into(),
            ],
            15 => vec!["SINTERSTORE".into(), "dst".into(), "s0".into(), "s1".into()],
            16 => vec!["COPY".into(), k, k2, "REPLACE".into()],
            17 => vec!["SETRANGE".into(), k, "3".into(), "xyz".into()],
            18 => vec!["APPEND".into(), k, n],
            19 => vec!["PERSIST".into(), k],
            20 => vec!["LPOP".into(), "l2".into()],
            // Streams: generated ids, approximate trims, groups, deliveries and claims.
            22 | 23 => {
                let mut c = vec!["XADD".into(), sk];
                if rng.gen_bool(0.3) {
                    c.extend(["MAXLEN".into(), "~".into(), "20".into()]);
                }
                c.extend(["*".into(), "f".into(), n]);
                c
            }
            24 => vec![
                "XGROUP".into(),
                "CREATE".into(),
                sk,
                "g".into(),
                "0".into(),
                "MKSTREAM".into(),
            ],
            25 => strings(&[
                "XREADGROUP",
                "GROUP",
                "g",
                &format!("c{}", i % 2),
                "COUNT",
                "3",
                "STREAMS",
                &sk,
                ">",
            ]),
            26 => strings(&["XAUTOCLAIM", &sk, "g", "c9", "0", "0", "COUNT", "2"]),
            27 => {
                let first = c.cmd(&["XRANGE", &sk, "-", "+", "COUNT", "1"]);
                let id = first_id(&first).unwrap_or_else(|| "1-1".into());
                strings(&["XACK", &sk, "g", &id])
            }
            28 => strings(&["XTRIM", &sk, "MAXLEN", "5"]),
            _ => vec!["INCR".into(), "counter".into()],
        };
        c.cmd(&cmd);
        if i % 50 == 0 {
            for w in ["MULTI", "SET", "INCR", "RPUSH", "EXEC"] {
                let words: Vec<String> = match w {
                    "SET" => vec!["SET".into(), format!("t{}", i), "1".into()],
                    "INCR" => vec!["INCR".into(), "k7".into()],
                    "RPUSH" => vec!["RPUSH".into(), "l3".into(), "m".into()],
                    other => vec![other.into()],
                };
                c.cmd(&words);
            }
            // A new script each time: its first run stays on its key's shard, so the second
            // runs locking that shard only and, when `k2` is elsewhere, is taken back after its
            // RPUSH and INCR and run again locking every shard (docs/scripting.md). The journal
            // must take the RPUSH back too, or replay would push twice.
            let script = format!(
                "-- {i}\nredis.call('rpush', '{{' .. KEYS[1] .. '}}:log', ARGV[1]) \
                 local n = redis.call('incr', KEYS[1]) redis.call('set', ARGV[1], n)"
            );
            let near = format!("{{{script_key}}}:near");
            c.cmd(&["EVAL", &script, "1", &script_key, &near]);
            c.cmd(&["EVAL", &script, "1", &script_key, &script_other]);
        }
    }
    // Other databases, DEBUG POPULATE, SORT ... STORE, and a deadline that passes.
    c.cmd(&["SELECT", "3"]);
    c.cmd(&["DEBUG", "POPULATE", "50", "pop", "8"]);
    c.cmd(&["RPUSH", "nums", "3", "1", "2"]);
    c.cmd(&["SORT", "nums", "STORE", "sorted"]);
    c.cmd(&["SET", "gone", "x", "PX", "1"]);
    c.cmd(&["SWAPDB", "3", "4"]);
    c.cmd(&["SELECT", "5"]);
    c.cmd(&["SET", "flushed", "1"]);
    c.cmd(&["FLUSHDB"]);
    c.cmd(&["SET", "after-flush", "1"]);
    c.cmd(&["SELECT", "4"]);
    c.cmd(&["MOVE", "nums", "5"]);
    // DEBUG DIGEST counts a key past its deadline until it is removed (as Redis does), and
    // recovery drops it: remove those first, as reads do.
    std::thread::sleep(Duration::from_millis(5));
    assert_eq!(c.cmd(&["EXISTS", "gone"]), b":0\r\n");
    c.cmd(&["SELECT", "0"]);
    for k in 0..40 {
        c.cmd(&["EXISTS", &format!("k{k}")]);
    }
    c.cmd(&["SELECT", "0"]);
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| w.to_string()).collect()
}

/// The id of the first entry of an XRANGE reply.
fn first_id(reply: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(reply);
    text.split("\r\n")
        .find(|l| l.contains('-') && l.chars().next().is_some_and(|c| c.is_ascii_digit()))
        .map(str::to_owned)
}

/// The group state of the workload's streams that a restart keeps exactly (XINFO GROUPS and
/// XPENDING have no clock readings; DEBUG DIGEST covers the entries only).
fn stream_groups(c: &mut Raw) -> Vec<Vec<u8>> {
    (0..3)
        .flat_map(|i| {
            let k = format!("x{i}");
            [
                c.cmd(&["XINFO", "GROUPS", &k]),
                c.cmd(&["XPENDING", &k, "g"]),
                c.cmd(&["XINFO", "STREAM", &k]),
            ]
        })
        .collect()
}

/// Everything comes back after kill -9, and again after restarts with 4 and 1 threads.
fn recovers_across_thread_counts(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), "everysec", &[]);
    let mut c = s.raw();
    workload(&mut c, 7);
    let mut c2 = s.raw();
    workload(&mut c2, 8);
    let restarts = common::info_field(&mut c, "stats", "script_shard_restarts");
    assert!(
        restarts.as_deref().is_some_and(|r| r != "0"),
        "no script run was taken back: {restarts:?}"
    );
    let before = digest(&mut c);
    assert_ne!(before, b"+0000000000000000000000000000000000000000\r\n");
    let keys = c.cmd(&["DBSIZE"]);
    let groups = stream_groups(&mut c);
    assert!(
        groups.iter().any(|g| g.windows(7).any(|w| w == b"pending")),
        "no group was made"
    );
    // everysec: give the writer its second, then crash.
    std::thread::sleep(Duration::from_millis(1500));
    kill(s);
    for threads in [4, 1, 2] {
        let s = start(b, threads, data.path(), "everysec", &[]);
        let mut c = s.raw();
        assert_eq!(
            String::from_utf8_lossy(&digest(&mut c)),
            String::from_utf8_lossy(&before),
            "after a restart with {threads} threads"
        );
        assert_eq!(c.cmd(&["DBSIZE"]), keys);
        let now = stream_groups(&mut c);
        for (a, b) in groups.iter().zip(&now) {
            assert_eq!(
                String::from_utf8_lossy(b),
                String::from_utf8_lossy(a),
                "after a restart with {threads} threads"
            );
        }
        kill(s);
    }
}

/// Clients that each write a key per acknowledged step: the last step acknowledged, and
/// when. They stop when the server goes away.
struct Writers {
    stop: Arc<AtomicBool>,
    acked: Arc<Mutex<Vec<(i64, Instant)>>>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

fn writers(port: u16, n: usize, round: usize) -> Writers {
    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(Mutex::new(vec![(0i64, Instant::now()); n]));
    let handles = (0..n)
        .map(|w| {
            let (stop, acked) = (stop.clone(), acked.clone());
            std::thread::spawn(move || {
                let Ok(mut c) = Raw::try_tcp(port) else {
                    return;
                };
                let counter = format!("counter:{w}");
                let mut step = 0i64;
                while !stop.load(Ordering::Relaxed) {
                    step += 1;
                    let key = format!("w:{round}:{w}:{step}");
                    // A unique key per step, and a counter moved in the same transaction.
                    let ok = c.try_send(&common::encode(&["MULTI"])).is_ok()
                        && c.try_send(&common::encode(&["SET", &key, "1"])).is_ok()
                        && c.try_send(&common::encode(&["INCR", &counter])).is_ok()
                        && c.try_send(&common::encode(&["EXEC"])).is_ok()
                        && (0..4).all(|_| c.try_reply().is_ok_and(|r| !r.is_empty()));
                    if !ok {
                        return;
                    }
                    if let Ok(mut a) = acked.lock() {
                        a[w] = (step, Instant::now());
                    }
                }
            })
        })
        .collect();
    Writers {
        stop,
        acked,
        handles,
    }
}

impl Writers {
    fn finish(self) -> Vec<(i64, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        for h in self.handles {
            let _ = h.join();
        }
        self.acked.lock().map(|a| a.clone()).unwrap_or_default()
    }
}

/// kill -9 under write load, `rounds()` times. Under `always` every acknowledged write is
/// back; under `everysec` the loss is what the last second or so wrote; counters never go
/// backwards from what a previous restart showed.
fn kill_under_load(b: Backend, fsync: &str) {
    let data = tempfile::tempdir().expect("tempdir");
    let mut floor = [0i64; 4];
    for round in 0..rounds() {
        let s = start(b, 2, data.path(), fsync, &[]);
        let mut c = s.raw();
        for (w, f) in floor.iter().enumerate() {
            assert!(
                int(&c.cmd(&["GET", &format!("counter:{w}")]).replace_nul()) >= *f,
                "round {round}: counter {w} went below {f}"
            );
        }
        let load = writers(s.port, 4, round);
        std::thread::sleep(Duration::from_millis(300 + 200 * (round as u64 % 3)));
        let killed_at = Instant::now();
        kill(s);
        let acked = load.finish();
        let s = start(b, 3, data.path(), fsync, &[]);
        let mut c = s.raw();
        for (w, (last, _)) in acked.iter().enumerate() {
            let counter = int(&c.cmd(&["GET", &format!("counter:{w}")]).replace_nul());
            assert!(
                counter >= floor[w],
                "round {round}: counter {w} went backwards"
            );
            // The journal is a prefix: the steps present are exactly 1..=k for some k.
            let mut present = 0;
            while c.cmd(&["EXISTS", &format!("w:{round}:{w}:{}", present + 1)]) == b":1\r\n" {
                present += 1;
            }
            assert_eq!(
                c.cmd(&["EXISTS", &format!("w:{round}:{w}:{}", present + 2)]),
                b":0\r\n",
                "round {round}: writer {w} has a hole after step {present}"
            );
            if fsync == "always" {
                assert!(
                    present >= *last,
                    "round {round}: writer {w} acknowledged {last} steps, {present} came back"
                );
            } else if present < *last {
                // Lost steps were acknowledged within about a second of the kill.
                assert!(
                    killed_at.duration_since(acked_time_of(&acked, w)) < Duration::from_secs(3),
                    "round {round}: writer {w} lost steps older than the fsync interval"
                );
            }
            floor[w] = counter;
        }
        kill(s);
    }
}

fn acked_time_of(acked: &[(i64, Instant)], w: usize) -> Instant {
    acked[w].1
}

trait NulIsZero {
    fn replace_nul(self) -> Vec<u8>;
}

impl NulIsZero for Vec<u8> {
    /// A missing counter reads as 0.
    fn replace_nul(self) -> Vec<u8> {
        if self == b"$-1\r\n" {
            b":0\r\n".to_vec()
        } else {
            // "$n\r\n<digits>\r\n" as ":<digits>\r\n".
            let text = String::from_utf8_lossy(&self).into_owned();
            let digits = text.split("\r\n").nth(1).unwrap_or("0").to_string();
            format!(":{digits}\r\n").into_bytes()
        }
    }
}

fn always_keeps_every_acknowledged_write(b: Backend) {
    kill_under_load(b, "always");
}

fn everysec_loses_at_most_about_a_second(b: Backend) {
    kill_under_load(b, "everysec");
}

/// Transfers between accounts on every shard (MULTI: DECRBY one, INCRBY another) killed in
/// the middle: after recovery the total is exact, under both settings.
fn bank_total_survives_kills(b: Backend) {
    const ACCOUNTS: usize = 16;
    const TOTAL: i64 = 16_000;
    for fsync in ["always", "everysec"] {
        let data = tempfile::tempdir().expect("tempdir");
        let s = start(b, 3, data.path(), fsync, &[]);
        let mut c = s.raw();
        for a in 0..ACCOUNTS {
            c.cmd(&[
                "SET",
                &format!("acct:{a}"),
                &(TOTAL / ACCOUNTS as i64).to_string(),
            ]);
        }
        let mut s = Some(s);
        for round in 0..rounds() {
            let port = s.as_ref().map_or(0, |s| s.port);
            let load = common::movers(port, 3, ACCOUNTS, round as u64);
            std::thread::sleep(Duration::from_millis(400));
            if let Some(s) = s.take() {
                kill(s);
            }
            load.stop();
            let restarted = start(b, 2 + round % 3, data.path(), fsync, &[]);
            let mut c = restarted.raw();
            let total: i64 = (0..ACCOUNTS)
                .map(|a| int(&c.cmd(&["GET", &format!("acct:{a}")]).replace_nul()))
                .sum();
            assert_eq!(total, TOTAL, "{fsync}, round {round}: the total changed");
            s = Some(restarted);
        }
    }
}

backend_tests!(
    recovers_across_thread_counts,
    always_keeps_every_acknowledged_write,
    everysec_loses_at_most_about_a_second,
    bank_total_survives_kills
);

/// Runs the binary on `data` until it is ready or exits; returns its log and, if it is
/// running, the server (killed by the caller).
fn start_logged(data: &Path, extra: &[&str]) -> (Option<std::process::Child>, u16, PathBuf) {
    let log = data.join("server.log");
    let _ = std::fs::remove_file(&log);
    let port = common::free_port();
    let mut child = Command::new(env!("CARGO_BIN_EXE_damselfly"))
        .args(["--port", &port.to_string(), "--threads", "2"])
        .args(["--appendonly", "yes", "--dir"])
        .arg(data)
        .arg("--logfile")
        .arg(&log)
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn damselfly");
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return (None, port, log);
        }
        // PONG once loaded (-LOADING before).
        if Raw::try_tcp(port)
            .is_ok_and(|mut c| c.try_cmd(&["PING"]).is_ok_and(|r| r == b"+PONG\r\n"))
        {
            return (Some(child), port, log);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("damselfly neither started nor exited");
}

/// A server process killed when the test ends, also when an assertion fails first.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn stop(child: Option<std::process::Child>) {
    if let Some(mut c) = child {
        let _ = c.kill();
        let _ = c.wait();
    }
}

/// The journal segment files of the current generation (appending ones, not the bases).
fn appended_segments(data: &Path) -> Vec<PathBuf> {
    let dir = data.join("appendonlydir");
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("journal directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".1.journal"))
        .collect();
    v.sort();
    v
}

/// A segment's bytes up to its last record: under `always` the writer fills a segment with
/// zeros ahead of its records, and a killed server leaves them there (the segment's last
/// byte, a record's last argument in these tests, is never zero).
fn written(segment: &Path) -> Vec<u8> {
    let mut bytes = std::fs::read(segment).expect("segment");
    let end = bytes.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    bytes.truncate(end);
    bytes
}

/// Writes `n` keys and kills the server: a journal whose last record is `SET last <n>`.
fn journal_with_keys(data: &Path, n: usize) -> PathBuf {
    let (child, port, _) = start_logged(data, &["--appendfsync", "always"]);
    let mut c = Raw::tcp(port);
    for i in 0..n {
        c.cmd(&["SET", &format!("key{i}"), "v"]);
    }
    // One shard gets the last record: SET on a key of shard 0 or 1, whichever file grows.
    let sizes: Vec<usize> = appended_segments(data)
        .iter()
        .map(|p| written(p).len())
        .collect();
    c.cmd(&["SET", "last", "record"]);
    stop(child);
    appended_segments(data)
        .into_iter()
        .zip(sizes)
        .find(|(p, before)| written(p).len() > *before)
        .map(|(p, _)| p)
        .expect("a segment grew")
}

/// Cutting the last record at every byte: start-up succeeds, warns naming the file and the
/// offset, and loses only that record.
#[test]
fn a_torn_tail_loses_only_the_last_record() {
    let data = tempfile::tempdir().expect("tempdir");
    let seg = journal_with_keys(data.path(), 20);
    let whole = written(&seg);
    let copy = data.path().join("whole-copy");
    std::fs::write(&copy, &whole).expect("copy");
    // The last record is `SET last record`: its frame is the file's last bytes.
    let record_len = 8 + 8 + 4 + 8 + 4 + 1 + 4 + (4 + 3) + (4 + 4) + (4 + 6);
    for cut in 1..record_len {
        // Each start writes a new generation: restore the old one each time.
        restore_generation(data.path(), &seg, &whole[..whole.len() - cut]);
        let (child, port, log) = start_logged(data.path(), &[]);
        let mut c = Raw::tcp(port);
        assert_eq!(c.cmd(&["DBSIZE"]), b":20\r\n", "cut {cut} bytes");
        assert_eq!(c.cmd(&["EXISTS", "last"]), b":0\r\n", "cut {cut} bytes");
        stop(child);
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            log.contains("WARN") && log.contains("incomplete record") && log.contains(".journal"),
            "cut {cut}: {log}"
        );
    }
    restore_generation(data.path(), &seg, &whole);
    let (child, port, _) = start_logged(data.path(), &[]);
    assert_eq!(Raw::tcp(port).cmd(&["GET", "last"]), b"$6\r\nrecord\r\n");
    stop(child);
}

/// Puts back the generation `seg` belongs to (its manifest and files were replaced by the
/// last start), with `seg` holding `bytes`.
fn restore_generation(data: &Path, seg: &Path, bytes: &[u8]) {
    let dir = data.join("appendonlydir");
    let saved = data.join("saved-generation");
    if !saved.exists() {
        std::fs::create_dir(&saved).expect("mkdir");
        for e in std::fs::read_dir(&dir).expect("dir").flatten() {
            std::fs::copy(e.path(), saved.join(e.file_name())).expect("save");
        }
    }
    for e in std::fs::read_dir(&dir).expect("dir").flatten() {
        std::fs::remove_file(e.path()).expect("clear");
    }
    for e in std::fs::read_dir(&saved).expect("saved").flatten() {
        std::fs::copy(e.path(), dir.join(e.file_name())).expect("restore");
    }
    std::fs::write(seg, bytes).expect("write segment");
}

/// A flipped byte in the middle of a journal stops start-up with a message naming the file
/// and offset; `--force-recovery yes` starts with what precedes the damage.
#[test]
fn damage_stops_start_up_unless_forced() {
    let data = tempfile::tempdir().expect("tempdir");
    let seg = journal_with_keys(data.path(), 20);
    let mut bytes = written(&seg);
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x5a;
    restore_generation(data.path(), &seg, &bytes);
    let (child, _, log) = start_logged(data.path(), &[]);
    assert!(child.is_none(), "started on a damaged journal");
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    let name = seg.file_name().map(|n| n.to_string_lossy().into_owned());
    assert!(
        log.contains("damaged at byte") && log.contains(&name.unwrap_or_default()),
        "{log}"
    );
    let (child, port, log) = start_logged(data.path(), &["--force-recovery", "yes"]);
    assert!(child.is_some(), "--force-recovery did not start");
    let keys = int(&Raw::tcp(port).cmd(&["DBSIZE"]));
    assert!((1..21).contains(&keys), "{keys} keys after forced recovery");
    stop(child);
    assert!(std::fs::read_to_string(&log)
        .unwrap_or_default()
        .contains("--force-recovery"));
}

/// Files of another generation (an earlier run with more threads) are not loaded, and are
/// deleted once the new generation is named.
#[test]
fn files_of_another_generation_are_ignored() {
    let data = tempfile::tempdir().expect("tempdir");
    let seg = journal_with_keys(data.path(), 5);
    let dir = data.path().join("appendonlydir");
    // A stale shard file: the same content under a generation the manifest does not name.
    let stale = dir.join("damselfly-g0.7.1.journal");
    std::fs::copy(&seg, &stale).expect("copy");
    let (child, port, _) = start_logged(data.path(), &[]);
    assert_eq!(Raw::tcp(port).cmd(&["DBSIZE"]), b":6\r\n");
    stop(child);
    assert!(!stale.exists(), "the stale file is still there");
}

/// Starts the binary with files limited to `limit` bytes (RLIMIT_FSIZE, SIGXFSZ ignored):
/// journal writes past it fail with EFBIG, as on a full disk.
fn start_with_file_limit(data: &Path, fsync: &str, limit: u64) -> (Running, u16) {
    use std::os::unix::process::CommandExt;
    let port = common::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_damselfly"));
    cmd.args([
        "--port",
        &port.to_string(),
        "--threads",
        "2",
        "--loglevel",
        "warning",
    ])
    .args(["--appendonly", "yes", "--appendfsync", fsync, "--dir"])
    .arg(data)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            // The soft limit only: lifting it again needs no privilege.
            let lim = libc::rlimit {
                rlim_cur: limit,
                rlim_max: libc::RLIM_INFINITY,
            };
            libc::setrlimit(libc::RLIMIT_FSIZE, &lim);
            libc::signal(libc::SIGXFSZ, libc::SIG_IGN);
            Ok(())
        });
    }
    let mut child = Running(cmd.spawn().expect("spawn damselfly"));
    let deadline = Instant::now() + Duration::from_secs(20);
    while Raw::try_tcp(port).map_or(true, |mut c| {
        !c.try_cmd(&["PING"]).is_ok_and(|r| r == b"+PONG\r\n")
    }) {
        assert!(Instant::now() < deadline, "damselfly did not start");
        assert!(matches!(child.0.try_wait(), Ok(None)), "damselfly exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, port)
}

/// Writes 1 KB values until the journal cannot take more; returns the keys acknowledged.
fn fill(c: &mut Raw) -> (Vec<String>, Vec<u8>) {
    let value = "v".repeat(1024);
    let mut acked = Vec::new();
    for i in 0..10_000 {
        let key = format!("fill:{i}");
        match c.try_cmd(&["SET", &key, &value]) {
            Ok(r) if r == b"+OK\r\n" => acked.push(key),
            Ok(r) => return (acked, r),
            Err(_) => return (acked, Vec::new()),
        }
        // everysec: let the writer find out.
        if i % 16 == 0 {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    panic!("the journal never filled up");
}

/// A full disk under `everysec`: writes get MISCONF, reads keep working, INFO says so; once
/// there is room again writes resume, and nothing acknowledged is lost.
#[test]
fn a_full_disk_refuses_writes_until_there_is_room() {
    let data = tempfile::tempdir().expect("tempdir");
    let (child, port) = start_with_file_limit(data.path(), "everysec", 64 << 10);
    let mut c = Raw::tcp(port);
    let (mut acked, refusal) = fill(&mut c);
    let text = String::from_utf8_lossy(&refusal).into_owned();
    assert!(
        text.starts_with("-MISCONF Errors writing to the AOF file"),
        "{text}"
    );
    assert!(
        acked.len() > 20,
        "only {} writes before the disk filled",
        acked.len()
    );
    assert_eq!(c.cmd(&["EXISTS", &acked[0]]), b":1\r\n", "reads work");
    let info = String::from_utf8_lossy(&c.cmd(&["INFO", "persistence"])).into_owned();
    assert!(info.contains("aof_last_write_status:err"), "{info}");
    // Room again (the file size limit lifted): writes resume within the retry interval.
    let unlimited = libc::rlimit {
        rlim_cur: libc::RLIM_INFINITY,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: changing a limit of our own child process.
    let lifted = unsafe {
        libc::prlimit(
            child.0.id() as i32,
            libc::RLIMIT_FSIZE,
            &unlimited,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(lifted, 0, "prlimit");
    let deadline = Instant::now() + Duration::from_secs(10);
    while common::info_field(&mut c, "persistence", "aof_last_write_status").as_deref()
        != Some("ok")
    {
        assert!(Instant::now() < deadline, "the journal did not resume");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Keys on every shard take writes again.
    for i in 0..16 {
        let key = format!("resumed:{i}");
        assert_eq!(c.cmd(&["SET", &key, "1"]), b"+OK\r\n", "{key}");
        acked.push(key);
    }
    // everysec: past the next sync, then a crash.
    std::thread::sleep(Duration::from_millis(1500));
    drop(child);
    let s = start(Backend::Epoll, 2, data.path(), "everysec", &[]);
    let mut c = s.raw();
    for key in &acked {
        assert_eq!(c.cmd(&["EXISTS", key]), b":1\r\n", "{key} was acknowledged");
    }
}

/// A full disk under `always`: the server exits, as Redis does, and every write it
/// acknowledged comes back.
#[test]
fn a_full_disk_under_always_exits_and_loses_nothing_acknowledged() {
    let data = tempfile::tempdir().expect("tempdir");
    let (mut child, port) = start_with_file_limit(data.path(), "always", 64 << 10);
    let mut c = Raw::tcp(port);
    let (acked, _) = fill(&mut c);
    let status = common::wait_timeout(&mut child.0, Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(1));
    let s = start(Backend::Epoll, 2, data.path(), "always", &[]);
    let mut c = s.raw();
    for key in &acked {
        assert_eq!(c.cmd(&["EXISTS", key]), b":1\r\n", "{key} was acknowledged");
    }
}

/// INFO persistence has Redis 7.0's fields, and its aof_* ones follow the journal.
#[test]
fn info_persistence_describes_the_journal() {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(Backend::Epoll, 2, data.path(), "always", &[]);
    let mut c = s.raw();
    let field = |c: &mut Raw, name: &str| common::info_field(c, "persistence", name);
    assert_eq!(field(&mut c, "aof_enabled").as_deref(), Some("1"));
    assert_eq!(
        field(&mut c, "aof_last_write_status").as_deref(),
        Some("ok")
    );
    assert_eq!(field(&mut c, "loading").as_deref(), Some("0"));
    let before: u64 = field(&mut c, "aof_current_size")
        .and_then(|v| v.parse().ok())
        .expect("aof_current_size");
    c.cmd(&["SET", "k", "v"]);
    let after: u64 = field(&mut c, "aof_current_size")
        .and_then(|v| v.parse().ok())
        .expect("aof_current_size");
    assert!(after > before, "{before} -> {after}");
    let redis = Server::redis();
    let theirs = String::from_utf8_lossy(&redis.raw().cmd(&["INFO", "persistence"])).into_owned();
    let ours = String::from_utf8_lossy(&c.cmd(&["INFO", "persistence"])).into_owned();
    let names = |t: &str| -> Vec<String> {
        t.lines()
            .filter_map(|l| l.split_once(':').map(|(n, _)| n.to_string()))
            .collect()
    };
    for name in names(&theirs) {
        assert!(
            names(&ours).contains(&name),
            "INFO persistence lacks {name}"
        );
    }
    let plain = Server::start(Backend::Epoll, &[]);
    assert_eq!(
        common::info_field(&mut plain.raw(), "persistence", "aof_enabled").as_deref(),
        Some("0")
    );
}

/// While the journal loads, commands get -LOADING and INFO says loading:1 with progress, as
/// Redis does; once loaded, the data is there and loading:0, also for a client that connected
/// while loading (its half-sent command included).
#[test]
fn clients_get_loading_while_the_journal_loads() {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(Backend::Epoll, 2, data.path(), "everysec", &[]);
    let mut c = s.raw();
    common::set_pipelined(&mut c, 4000);
    drop(c);
    // A clean shutdown syncs the journal (a kill under everysec could lose the last second).
    let mut s = s;
    assert!(s.terminate().success());
    // Redis's testing knob slows loading: 500 us per record, about a second here.
    let conf = data.path().join("slow.conf");
    std::fs::write(&conf, "key-load-delay 500\n").expect("config");
    let port = common::free_port();
    let _server = Running(
        Command::new(env!("CARGO_BIN_EXE_damselfly"))
            .arg(&conf)
            .args([
                "--port",
                &port.to_string(),
                "--threads",
                "2",
                "--loglevel",
                "warning",
            ])
            .args(["--appendonly", "yes", "--dir"])
            .arg(data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn damselfly"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut saw_loading, mut saw_info) = (false, false);
    let mut early: Option<Raw> = None;
    loop {
        assert!(Instant::now() < deadline, "never loaded");
        if let Ok(mut c) = Raw::try_tcp(port) {
            // PING and INFO in one write are answered together: connections served while
            // loading are closed when it ends, which may fall between two separate requests.
            let mut pair = common::encode(&["PING"]);
            pair.extend(common::encode(&["INFO", "persistence"]));
            let replies = c
                .try_send(&pair)
                .and_then(|()| Ok((c.try_reply()?, c.try_reply()?)));
            match replies {
                Ok((pong, _)) if pong == b"+PONG\r\n" => break,
                Ok((loading, info)) => {
                    assert_eq!(
                        loading,
                        b"-LOADING Redis is loading the dataset in memory\r\n"
                    );
                    saw_loading = true;
                    let info = String::from_utf8_lossy(&info);
                    if info.contains("loading:1") && info.contains("loading_loaded_perc:") {
                        saw_info = true;
                    }
                    if early.is_none() {
                        c.send(b"*1\r\n$6\r\nDBS");
                        early = Some(c);
                    }
                }
                Err(_) => {}
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        saw_loading && saw_info,
        "LOADING {saw_loading}, INFO {saw_info}"
    );
    let mut c = Raw::tcp(port);
    assert_eq!(c.cmd(&["DBSIZE"]), b":4000\r\n");
    let mut early = early.expect("a connection made while loading");
    early.send(b"IZE\r\n");
    assert_eq!(
        early.reply(),
        b":4000\r\n",
        "the early client is served after loading"
    );
    assert_eq!(
        common::info_field(&mut c, "persistence", "loading").as_deref(),
        Some("0")
    );
}

fn checker(args: &[&str]) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_damselfly"))
        .args(args)
        .output()
        .expect("run the checker");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text)
}

/// `check-journal` says a segment is whole, finds a torn tail, and `--fix` cuts it so that
/// the segment is whole again.
#[test]
fn check_journal_finds_and_fixes_a_torn_tail() {
    let data = tempfile::tempdir().expect("tempdir");
    let seg = journal_with_keys(data.path(), 5);
    let path = seg.to_str().expect("utf-8");
    let (ok, text) = checker(&["check-journal", path]);
    assert!(ok && text.contains("OK,"), "{text}");
    let bytes = written(&seg);
    std::fs::write(&seg, &bytes[..bytes.len() - 3]).expect("tear");
    let (ok, text) = checker(&["check-journal", path]);
    assert!(!ok && text.contains("--fix"), "{text}");
    let (ok, text) = checker(&["check-journal", "--fix", path]);
    assert!(ok && text.contains("cut at byte"), "{text}");
    let (ok, text) = checker(&["check-journal", "--dump", path]);
    assert!(ok && text.contains("\"SET\""), "{text}");
}

/// `check-snapshot` reads a redis-server dump.rdb to its checksum, and names the offset of
/// damage.
#[test]
fn check_snapshot_reads_a_redis_dump_and_finds_damage() {
    let redis = Server::redis();
    let mut c = redis.raw();
    c.cmd(&["DEBUG", "POPULATE", "1000"]);
    c.cmd(&["SELECT", "2"]);
    c.cmd(&["SET", "x", "y", "EX", "100"]);
    assert_eq!(c.cmd(&["SAVE"]), b"+OK\r\n");
    let dump = redis.dir.path().join("dump.rdb");
    let path = dump.to_str().expect("utf-8");
    let (ok, text) = checker(&["check-snapshot", path]);
    assert!(
        ok && text.contains("OK, 1001 keys") && text.contains("db2: keys=1 expires=1"),
        "{text}"
    );
    let mut bytes = std::fs::read(&dump).expect("dump");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x21;
    let damaged = redis.dir.path().join("damaged.rdb");
    std::fs::write(&damaged, &bytes).expect("write");
    let (ok, text) = checker(&["check-snapshot", damaged.to_str().expect("utf-8")]);
    assert!(!ok && text.contains("at byte"), "{text}");
}

fn wait_rewrites(c: &mut Raw, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let done = common::info_field(c, "persistence", "aof_rewrites")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        let running = common::info_field(c, "persistence", "aof_rewrite_in_progress");
        if done >= n && running.as_deref() == Some("0") {
            assert_eq!(
                common::info_field(c, "persistence", "aof_last_bgrewrite_status").as_deref(),
                Some("ok")
            );
            return;
        }
        assert!(Instant::now() < deadline, "rewrite {n} did not finish");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn journal_files(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("appendonlydir"))
        .expect("journal directory")
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .collect();
    v.sort();
    v
}

/// BGREWRITEAOF writes an RDB base at a cut and continues the journal in new segments: the
/// older segments go, and after kill -9 the base plus the journal after the cut give back
/// exactly the data (with another thread count too); a second rewrite replaces the base.
fn bgrewriteaof_compacts_the_journal(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), "always", &["--save", ""]);
    let mut c = s.raw();
    workload(&mut c, 11);
    let before = journal_files(data.path());
    assert!(
        before.iter().any(|f| f.ends_with(".1.journal")),
        "{before:?}"
    );
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        b"+Background append only file rewriting started\r\n"
    );
    wait_rewrites(&mut c, 1);
    let after = journal_files(data.path());
    assert!(
        after.iter().filter(|f| f.ends_with(".base.rdb")).count() == 2,
        "{after:?}"
    );
    assert!(
        !after
            .iter()
            .any(|f| f.ends_with(".0.journal") || f.ends_with(".1.journal")),
        "segments before the cut are still there: {after:?}"
    );
    // Writes after the cut go to the new segments.
    workload(&mut c, 12);
    let digest_after_first = digest(&mut c);
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        b"+Background append only file rewriting started\r\n"
    );
    wait_rewrites(&mut c, 2);
    c.cmd(&["SET", "after-second-cut", "1"]);
    c.cmd(&["DEL", "k1", "k2"]);
    let digest = digest(&mut c);
    assert_ne!(digest, digest_after_first);
    let files = journal_files(data.path());
    assert_eq!(
        files.iter().filter(|f| f.ends_with(".base.rdb")).count(),
        2,
        "{files:?}"
    );
    drop(s);
    for threads in [3, 1] {
        let s = start(b, threads, data.path(), "always", &["--save", ""]);
        let mut c = s.raw();
        assert_eq!(
            String::from_utf8_lossy(&c.cmd(&["DEBUG", "DIGEST"])),
            String::from_utf8_lossy(&digest),
            "{threads} threads"
        );
        drop(s);
    }
}

/// A rewrite taken while transfers run across shards is a cut: after kill -9 the base and the
/// journal after it give the exact total.
fn bgrewriteaof_under_transfers_keeps_the_total(b: Backend) {
    const ACCOUNTS: usize = 12;
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 3, data.path(), "always", &["--save", ""]);
    let mut c = s.raw();
    for a in 0..ACCOUNTS {
        c.cmd(&["SET", &format!("acct:{a}"), "1000"]);
    }
    let load = common::movers(s.port, 2, ACCOUNTS, 0);
    std::thread::sleep(Duration::from_millis(200));
    for n in 1..=2 {
        c.cmd(&["BGREWRITEAOF"]);
        wait_rewrites(&mut c, n);
    }
    std::thread::sleep(Duration::from_millis(200));
    drop(s);
    load.stop();
    let s = start(b, 2, data.path(), "always", &["--save", ""]);
    let mut c = s.raw();
    let total: i64 = (0..ACCOUNTS)
        .map(|a| int(&c.cmd(&["GET", &format!("acct:{a}")]).replace_nul()))
        .sum();
    assert_eq!(total, 1000 * ACCOUNTS as i64);
}

/// Function libraries come back after kill -9 under any thread count: from the journal,
/// then from a rewrite's base plus the segments after its cut; a FLUSH is kept too.
fn functions_survive_kills_and_rewrites(b: Backend) {
    use common::{LIBRARY_A1, LIBRARY_A2, LIBRARY_B, LIBRARY_C};
    let data = tempfile::tempdir().expect("tempdir");
    let start = |threads| start(b, threads, data.path(), "always", &["--save", ""]);
    // kill -9 and a start with `threads` threads: the libraries are as they were.
    let restart = |s: Server, threads: usize| {
        let listed = s.raw().cmd(&["FUNCTION", "LIST", "WITHCODE"]);
        kill(s);
        let s = start(threads);
        assert_eq!(
            String::from_utf8_lossy(&s.raw().cmd(&["FUNCTION", "LIST", "WITHCODE"])),
            String::from_utf8_lossy(&listed),
            "{threads} threads"
        );
        s
    };
    let s = start(2);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY_A1]), b"$4\r\nliba\r\n");
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY_B]), b"$4\r\nlibb\r\n");
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY_C]), b"$4\r\nlibc\r\n");
    assert_eq!(c.cmd(&["FUNCTION", "DELETE", "libc"]), b"+OK\r\n");
    assert_eq!(
        c.cmd(&["FUNCTION", "LOAD", "REPLACE", LIBRARY_A2]),
        b"$4\r\nliba\r\n"
    );
    let s = restart(s, 3);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FCALL", "fa", "0"]), b"$2\r\na2\r\n");
    assert_eq!(c.cmd(&["FCALL_RO", "fb", "0"]), b"$1\r\nb\r\n");
    assert_eq!(
        c.cmd(&["BGREWRITEAOF"]),
        b"+Background append only file rewriting started\r\n"
    );
    wait_rewrites(&mut c, 1);
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIBRARY_C]), b"$4\r\nlibc\r\n");
    let s = restart(s, 1);
    let mut c = s.raw();
    assert_eq!(c.cmd(&["FCALL", "fc", "0"]), b"$1\r\nc\r\n");
    assert_eq!(c.cmd(&["FUNCTION", "FLUSH"]), b"+OK\r\n");
    let s = restart(s, 2);
    assert_eq!(s.raw().cmd(&["FUNCTION", "LIST"]), b"*0\r\n");
    kill(s);
}

backend_tests!(
    bgrewriteaof_compacts_the_journal,
    bgrewriteaof_under_transfers_keeps_the_total,
    functions_survive_kills_and_rewrites
);

/// The journal rewrites itself once it grows past auto-aof-rewrite-min-size and by
/// auto-aof-rewrite-percentage of its base, as Redis's does.
#[test]
fn the_journal_rewrites_itself_when_it_grows() {
    let data = tempfile::tempdir().expect("tempdir");
    let conf = data.path().join("auto.conf");
    std::fs::write(
        &conf,
        "auto-aof-rewrite-min-size 200kb\nauto-aof-rewrite-percentage 100\n",
    )
    .expect("config");
    let conf = conf.to_str().expect("utf-8").to_string();
    let s = start(Backend::Epoll, 2, data.path(), "everysec", &[&conf]);
    let mut c = s.raw();
    let value = "x".repeat(1000);
    // 100 KB: under the minimum size, no rewrite.
    for i in 0..100 {
        c.cmd(&["SET", &format!("k{}", i % 20), &value]);
    }
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_rewrites").as_deref(),
        Some("0")
    );
    // 300 KB more, overwriting the same 20 keys: a rewrite shrinks it to about 20 KB.
    for i in 0..300 {
        c.cmd(&["SET", &format!("k{}", i % 20), &value]);
    }
    wait_rewrites(&mut c, 1);
    let current: u64 = common::info_field(&mut c, "persistence", "aof_current_size")
        .and_then(|v| v.parse().ok())
        .expect("aof_current_size");
    assert!(current < 100_000, "the journal is still {current} bytes");
    assert_eq!(c.cmd(&["DBSIZE"]), b":20\r\n");
}

/// CONFIG SET appendonly yes on a running server writes a base at a cut and opens every
/// shard's journal there: after kill -9, a start with the journal on has everything. `no`
/// turns it off again.
fn appendonly_can_be_turned_on_while_running(b: Backend) {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().expect("utf-8");
    let s = Server::start_with(
        b,
        2,
        &["--dir", dir, "--save", "", "--appendfsync", "always"],
    );
    let mut c = s.raw();
    workload(&mut c, 21);
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_enabled").as_deref(),
        Some("0")
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), b"+OK\r\n");
    wait_rewrites(&mut c, 1);
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_enabled").as_deref(),
        Some("1")
    );
    workload(&mut c, 22);
    let digest = digest(&mut c);
    drop(s);
    let s = start(b, 3, data.path(), "always", &["--save", ""]);
    let mut c = s.raw();
    assert_eq!(
        String::from_utf8_lossy(&c.cmd(&["DEBUG", "DIGEST"])),
        String::from_utf8_lossy(&digest)
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), b"+OK\r\n");
    assert_eq!(
        common::info_field(&mut c, "persistence", "aof_enabled").as_deref(),
        Some("0")
    );
    assert_eq!(c.cmd(&["SET", "k", "v"]), b"+OK\r\n");
}

/// Replies held for the disk under `always` leave when the policy turns to `everysec` while
/// they wait: nothing waits for a sync under `everysec`, and no sync under it tells the shard.
/// Writers keep SETting while the policy flips; after each flip to `everysec` every writer
/// must move on within a second and a half.
fn switching_away_from_always_releases_waiting_replies(b: Backend) {
    const WRITERS: usize = 8;
    let data = tempfile::tempdir().expect("tempdir");
    let s = start(b, 2, data.path(), "always", &["--save", ""]);
    let stop = Arc::new(AtomicBool::new(false));
    let done: Arc<Vec<AtomicU64>> = Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let port = s.port;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (stop, done) = (stop.clone(), done.clone());
            std::thread::spawn(move || {
                let mut c = Raw::tcp(port);
                c.set_read_timeout(Duration::from_secs(5));
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let key = format!("w{w}:{n}");
                    match c.try_cmd(&["SET", key.as_str(), "v"]) {
                        Ok(r) if r == b"+OK\r\n" => done[w].store(n, Ordering::Relaxed),
                        _ => return,
                    }
                }
            })
        })
        .collect();
    let mut c = s.raw();
    let mut stuck = Vec::new();
    for flip in 0..20 {
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "appendfsync", "always"]),
            b"+OK\r\n"
        );
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            c.cmd(&["CONFIG", "SET", "appendfsync", "everysec"]),
            b"+OK\r\n"
        );
        std::thread::sleep(Duration::from_millis(20));
        let at: Vec<u64> = done.iter().map(|d| d.load(Ordering::Relaxed)).collect();
        let deadline = Instant::now() + Duration::from_millis(1500);
        while Instant::now() < deadline
            && done
                .iter()
                .zip(&at)
                .any(|(d, a)| d.load(Ordering::Relaxed) == *a)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        for (w, (d, a)) in done.iter().zip(&at).enumerate() {
            if d.load(Ordering::Relaxed) == *a {
                stuck.push(format!("flip {flip}: writer {w} stayed at {a}"));
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        let _ = h.join();
    }
    assert!(stuck.is_empty(), "{}", stuck.join("\n"));
}

backend_tests!(
    appendonly_can_be_turned_on_while_running,
    switching_away_from_always_releases_waiting_replies,
);
