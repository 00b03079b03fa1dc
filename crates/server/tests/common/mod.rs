//! Test harness: starts the real `damselfly` binary (or `redis-server`) on a free port and a
//! unix socket in a temporary directory, and talks to it with raw sockets.

#![allow(dead_code)]

pub mod diff;
pub mod notify;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The I/O backends the suite runs under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Epoll,
    Uring,
}

impl Backend {
    pub fn flag(self) -> &'static str {
        match self {
            Backend::Epoll => "epoll",
            Backend::Uring => "uring",
        }
    }

    /// False when io_uring cannot run here, so the test is skipped: the reason goes straight
    /// to stderr (past the test harness's capture) to make the skip visible. With
    /// `DAMSELFLY_REQUIRE_URING=1` (set by .ci/run where the kernel allows io_uring) it
    /// panics instead, so a uring variant cannot pass without running.
    pub fn available(self) -> bool {
        if self == Backend::Uring {
            if let Err(why) = damselfly_net::probe::io_uring_usable() {
                if std::env::var("DAMSELFLY_REQUIRE_URING").as_deref() == Ok("1") {
                    panic!("DAMSELFLY_REQUIRE_URING=1 but io_uring is unavailable: {why}");
                }
                let _ = writeln!(std::io::stderr(), "SKIPPED under io_uring: {why}");
                return false;
            }
        }
        true
    }
}

/// Generates one test per backend from `fn(Backend)`.
#[macro_export]
macro_rules! backend_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[test]
                fn epoll() {
                    super::$name($crate::common::Backend::Epoll);
                }
                #[test]
                fn uring() {
                    if $crate::common::Backend::Uring.available() {
                        super::$name($crate::common::Backend::Uring);
                    }
                }
            }
        )*
    };
}

/// Generates from `fn(Backend, threads)` the `backend_tests!` pair with 2 threads, plus 3 and 4
/// threads under epoll: with 2 nearly every multi-shard command or EXEC takes the special
/// two-shard path, with more it spans 3 or 4 shards. Epoll only, to keep CI short: the backend
/// does not take part in routing or transactions, and both backends run the 2-thread case.
#[macro_export]
macro_rules! thread_count_tests {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                use $crate::common::Backend;
                #[test]
                fn epoll() {
                    super::$name(Backend::Epoll, 2);
                }
                #[test]
                fn uring() {
                    if Backend::Uring.available() {
                        super::$name(Backend::Uring, 2);
                    }
                }
                #[test]
                fn epoll_3_threads() {
                    super::$name(Backend::Epoll, 3);
                }
                #[test]
                fn epoll_4_threads() {
                    super::$name(Backend::Epoll, 4);
                }
            }
        )*
    };
}

pub fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind :0");
    l.local_addr().expect("addr").port()
}

pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
    pub unix: PathBuf,
    pub dir: tempfile::TempDir,
}

impl Server {
    /// Starts Damselfly with `--threads 2`, TCP and a unix socket, plus `extra` flags.
    pub fn start(backend: Backend, extra: &[&str]) -> Server {
        Self::start_with(backend, 2, extra)
    }

    pub fn start_with(backend: Backend, threads: usize, extra: &[&str]) -> Server {
        Self::start_retrying("damselfly", |port, dir| {
            let mut cmd = Command::new(env!("CARGO_BIN_EXE_damselfly"));
            cmd.args([
                "--port",
                &port.to_string(),
                "--threads",
                &threads.to_string(),
            ])
            .args(["--io-backend", backend.flag()]);
            if !extra.contains(&"--loglevel") {
                cmd.args(["--loglevel", "warning"]);
            }
            // Files (a save at shutdown, snapshots) go to the server's own directory, never
            // to the crate's, unless the test names one.
            if !extra.contains(&"--dir") {
                cmd.arg("--dir").arg(dir);
            }
            let unix = match extra.iter().position(|a| *a == "--unixsocket") {
                Some(i) => PathBuf::from(extra[i + 1]),
                None => {
                    let own = dir.join("damselfly.sock");
                    cmd.arg("--unixsocket").arg(&own);
                    own
                }
            };
            cmd.args(extra).stdout(Stdio::null()).stderr(Stdio::null());
            (cmd.spawn().expect("spawn damselfly"), unix)
        })
    }

    /// Starts Debian's redis-server as the reference.
    pub fn redis() -> Server {
        let s = Self::start_retrying("redis-server", |port, dir| {
            let unix = dir.join("redis.sock");
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--save", "", "--appendonly", "no"])
                .args(["--enable-debug-command", "yes"])
                .arg("--unixsocket")
                .arg(&unix)
                .args(["--dir"])
                .arg(dir)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("redis-server must be installed (apt-get install redis-server); .ci/run installs it");
            (child, unix)
        });
        // The differential tests expect Redis 7.0's replies; another version would only show
        // up as confusing differences.
        let version = info_field(&mut s.raw(), "server", "redis_version").unwrap_or_default();
        assert!(
            version.starts_with("7.0."),
            "the reference redis-server must be 7.0.x, found {version:?}"
        );
        s
    }

    /// Starts a server with `spawn` (given a free port and a fresh directory; it returns the
    /// process and its unix socket) until one answers PING. Another test's server can take
    /// a free port before this one binds it: then it exits, and a new port is tried.
    fn start_retrying(
        what: &str,
        mut spawn: impl FnMut(u16, &std::path::Path) -> (Child, PathBuf),
    ) -> Server {
        for _ in 0..5 {
            let dir = tempfile::tempdir().expect("tempdir");
            let port = free_port();
            let (child, unix) = spawn(port, dir.path());
            let mut s = Server {
                child: Some(child),
                port,
                unix,
                dir,
            };
            if s.wait_ready() {
                return s;
            }
        }
        panic!("{what} did not start");
    }

    fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Some(c) = self.child.as_mut() {
                if let Ok(Some(_)) = c.try_wait() {
                    return false;
                }
            }
            if let Ok(mut c) = Raw::try_tcp(self.port) {
                // PONG, or NOAUTH when a password is set: either way it answers.
                if let Ok(reply) = c.try_cmd(&["PING"]) {
                    if reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH") {
                        return true;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    pub fn raw(&self) -> Raw {
        Raw::tcp(self.port)
    }

    pub fn raw_unix(&self) -> Raw {
        Raw::unix_at(&self.unix)
    }

    pub fn client(&self) -> redis::Connection {
        redis::Client::open(format!("redis://127.0.0.1:{}/", self.port))
            .expect("client")
            .get_connection()
            .expect("connection")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    /// Sends SIGTERM and returns the exit status.
    pub fn terminate(&mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        // SAFETY: signalling our own child process.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        wait_timeout(&mut child, Duration::from_secs(15)).expect("server exits after SIGTERM")
    }
}

pub fn wait_timeout(child: &mut Child, limit: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if let Ok(Some(st)) = child.try_wait() {
            return Some(st);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    None
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// How long `Raw::closed` waits for the server to close a connection.
pub const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// A handle on a `Raw`'s socket, kept to change its read timeout.
enum Sock {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl Sock {
    fn read_timeout(&self) -> std::io::Result<Option<Duration>> {
        match self {
            Sock::Tcp(s) => s.read_timeout(),
            Sock::Unix(s) => s.read_timeout(),
        }
    }

    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match self {
            Sock::Tcp(s) => s.set_read_timeout(t),
            Sock::Unix(s) => s.set_read_timeout(t),
        }
    }
}

/// A raw RESP client: sends bytes, reads exactly one reply at a time.
pub struct Raw {
    w: Box<dyn Write + Send>,
    r: BufReader<Box<dyn Read + Send>>,
    sock: Sock,
}

impl Raw {
    fn new(r: Box<dyn Read + Send>, w: Box<dyn Write + Send>, sock: Sock) -> Raw {
        Raw {
            w,
            r: BufReader::with_capacity(1 << 16, r),
            sock,
        }
    }

    /// A client over any byte stream carried by the TCP socket `tcp` (TLS in tests/tls.rs);
    /// `tcp` sets the read timeout.
    pub fn over(r: Box<dyn Read + Send>, w: Box<dyn Write + Send>, tcp: TcpStream) -> Raw {
        Raw::new(r, w, Sock::Tcp(tcp))
    }

    pub fn unix_at(path: &std::path::Path) -> Raw {
        let s = UnixStream::connect(path).expect("connect unix");
        s.set_read_timeout(Some(Duration::from_secs(30))).ok();
        let (r, sock) = (s.try_clone().expect("clone"), s.try_clone().expect("clone"));
        Raw::new(Box::new(r), Box::new(s), Sock::Unix(sock))
    }

    /// A second connection-independent writer is not possible on one socket through this
    /// wrapper, so pipelining tests use `w_clone`: another handle to the same TCP socket.
    pub fn w_clone(&mut self, _port: u16) -> Box<dyn Write + Send> {
        std::mem::replace(&mut self.w, Box::new(std::io::sink()))
    }

    /// Writes without panicking; Err once the server has closed the connection.
    pub fn try_send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.w.write_all(bytes)?;
        self.w.flush()
    }

    pub fn try_tcp(port: u16) -> std::io::Result<Raw> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.set_nodelay(true)?;
        let (r, sock) = (s.try_clone()?, s.try_clone()?);
        Ok(Raw::new(Box::new(r), Box::new(s), Sock::Tcp(sock)))
    }

    /// How long a read waits before failing (30 s unless set).
    pub fn set_read_timeout(&self, t: Duration) {
        self.sock.set_read_timeout(Some(t)).expect("set timeout");
    }

    pub fn tcp(port: u16) -> Raw {
        Raw::try_tcp(port).expect("connect tcp")
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).expect("write");
        self.w.flush().expect("flush");
    }

    /// Sends a command as a RESP array and returns its raw reply.
    pub fn cmd<S: AsRef<[u8]>>(&mut self, args: &[S]) -> Vec<u8> {
        self.send(&encode(args));
        self.reply()
    }

    pub fn try_cmd<S: AsRef<[u8]>>(&mut self, args: &[S]) -> std::io::Result<Vec<u8>> {
        self.try_send(&encode(args))?;
        self.try_reply()
    }

    /// Reads one complete reply, returned as its exact wire bytes.
    pub fn reply(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        self.read_value(&mut out).expect("reply");
        out
    }

    pub fn try_reply(&mut self) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::new();
        self.read_value(&mut out)?;
        Ok(out)
    }

    fn read_line(&mut self, out: &mut Vec<u8>) -> std::io::Result<Vec<u8>> {
        let mut line = Vec::new();
        let n = self.r.read_until(b'\n', &mut line)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        out.extend_from_slice(&line);
        Ok(line)
    }

    fn read_value(&mut self, out: &mut Vec<u8>) -> std::io::Result<()> {
        let line = self.read_line(out)?;
        let body = &line[1..line.len().saturating_sub(2)];
        let num = || -> i64 {
            std::str::from_utf8(body)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(-1)
        };
        match line[0] {
            b'$' | b'=' | b'!' => {
                let n = num();
                if n >= 0 {
                    let mut buf = vec![0u8; n as usize + 2];
                    self.r.read_exact(&mut buf)?;
                    out.extend_from_slice(&buf);
                }
            }
            b'*' | b'~' | b'>' => {
                for _ in 0..num().max(0) {
                    self.read_value(out)?;
                }
            }
            b'%' | b'|' => {
                for _ in 0..num().max(0) * 2 {
                    self.read_value(out)?;
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// True when the server closes the connection within `CLOSE_WAIT`.
    pub fn closed(&mut self) -> bool {
        self.closed_within(CLOSE_WAIT)
    }

    /// True when the server closes the connection within `limit`: EOF, or a reset or broken
    /// pipe (a close with our data unread). A read timeout means it is still open: false.
    /// Bytes that arrive first (buffered or new) mean "not closed yet": they are skipped and
    /// printed, and the wait goes on until EOF, an error or the deadline.
    pub fn closed_within(&mut self, limit: Duration) -> bool {
        use std::io::ErrorKind::*;
        let old = self.sock.read_timeout().expect("read_timeout");
        let deadline = Instant::now() + limit;
        let mut skipped = Vec::new();
        let mut buf = [0u8; 4096];
        let verdict = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            self.sock
                .set_read_timeout(Some(left))
                .expect("set_read_timeout");
            match self.r.read(&mut buf) {
                Ok(0) => break true,
                Ok(n) => skipped.extend_from_slice(&buf[..n]),
                Err(e) if matches!(e.kind(), ConnectionReset | ConnectionAborted | BrokenPipe) => {
                    break true
                }
                Err(e) if matches!(e.kind(), WouldBlock | TimedOut) => break false,
                Err(e) if e.kind() == Interrupted => {}
                Err(e) => panic!("waiting for the server to close the connection: {e}"),
            }
        };
        // The connection may still be used when it was not closed.
        self.sock.set_read_timeout(old).ok();
        if !skipped.is_empty() {
            eprintln!(
                "closed(): skipped {} unread bytes before {}: {:?}",
                skipped.len(),
                if verdict { "the close" } else { "the timeout" },
                String::from_utf8_lossy(&skipped[..skipped.len().min(200)])
            );
        }
        verdict
    }
}

pub fn encode<S: AsRef<[u8]>>(args: &[S]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

pub fn bulk(s: &str) -> Vec<u8> {
    format!("${}\r\n{s}\r\n", s.len()).into_bytes()
}

/// Reads a field from an INFO reply.
pub fn info_field(raw: &mut Raw, section: &str, field: &str) -> Option<String> {
    let reply = raw.cmd(&["INFO", section]);
    let text = String::from_utf8_lossy(&reply).into_owned();
    text.lines().find_map(|l| {
        l.strip_prefix(&format!("{field}:"))
            .map(|v| v.trim().to_string())
    })
}

/// Runs Damselfly (2 threads) on `dir` expecting start-up to fail; returns its log.
pub fn start_refused(dir: &std::path::Path, extra: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_damselfly"))
        .args([
            "--port",
            &free_port().to_string(),
            "--threads",
            "2",
            "--dir",
        ])
        .arg(dir)
        .args(extra)
        .output()
        .expect("run damselfly");
    let log =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(!out.status.success(), "damselfly started: {log}");
    log
}

/// The shard files the snapshot manifest in `dir` names, in shard order.
pub fn shard_files(dir: &std::path::Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(dir.join("damselfly-snapshot.manifest"))
        .expect("a snapshot manifest");
    text.lines()
        .filter_map(|l| l.strip_prefix("file "))
        .map(|n| dir.join(n))
        .collect()
}

/// Runs Debian's redis-check-rdb on `file` and asserts it finds the file sound.
pub fn assert_redis_check_rdb_accepts(file: &std::path::Path) {
    let out = Command::new("redis-check-rdb")
        .arg(file)
        .output()
        .expect("redis-check-rdb is installed with redis-server");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("RDB looks OK"),
        "redis-check-rdb refused {}: {text}",
        file.display()
    );
}

/// Waits until no save runs; returns `rdb_last_bgsave_status`.
pub fn wait_saved(c: &mut Raw) -> String {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let running = info_field(c, "persistence", "rdb_bgsave_in_progress");
        if running.as_deref() == Some("0") {
            return info_field(c, "persistence", "rdb_last_bgsave_status").unwrap_or_default();
        }
        assert!(Instant::now() < deadline, "the save did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Resident memory of a process, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    let pages: u64 = std::fs::read_to_string(format!("/proc/{pid}/statm"))
        .expect("statm")
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("rss field");
    pages * 4096
}

/// Integer arguments every generator mixes in: not numbers, the i64 extremes, a float, empty.
pub const EDGE_INTS: [&str; 5] = [
    "abc",
    "9223372036854775807",
    "-9223372036854775808",
    "1.5",
    "",
];

/// Float arguments the generators pick from: exponents, infinities, NaN, signed zero, a
/// leading space, the largest double, plain integers.
pub const FLOATS: [&str; 15] = [
    "0.1",
    "-1.5",
    "1e3",
    "3.0e-2",
    "abc",
    "inf",
    "-0",
    "10",
    "5.0e3",
    " 1",
    "1.7976931348623157e308",
    "-inf",
    "nan",
    "7",
    "-3",
];

/// Clients moving amounts between `accounts` accounts (`acct:N`, on every shard) until
/// stopped or the server goes away. Each transfer is the commands `transfer(from, to,
/// amount)` returns, pipelined; an error reply fails the test.
pub struct Movers {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Transfers completed.
    done: std::sync::Arc<std::sync::atomic::AtomicU64>,
    handles: Vec<std::thread::JoinHandle<()>>,
}

/// How one transfer is sent: the commands for (from, to, amount).
pub type Transfer = std::sync::Arc<dyn Fn(&str, &str, &str) -> Vec<Vec<String>> + Send + Sync>;

/// Movers transferring in MULTI/EXEC.
pub fn movers(port: u16, clients: u64, accounts: usize, seed: u64) -> Movers {
    let multi: Transfer = std::sync::Arc::new(|from: &str, to: &str, amount: &str| {
        vec![
            vec!["MULTI".into()],
            vec!["DECRBY".into(), from.into(), amount.into()],
            vec!["INCRBY".into(), to.into(), amount.into()],
            vec!["EXEC".into()],
        ]
    });
    movers_with(port, clients, accounts, seed, multi)
}

pub fn movers_with(
    port: u16,
    clients: u64,
    accounts: usize,
    seed: u64,
    transfer: Transfer,
) -> Movers {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let handles = (0..clients)
        .map(|m| {
            let (stop, done, transfer) = (stop.clone(), done.clone(), transfer.clone());
            std::thread::spawn(move || {
                let Ok(mut c) = Raw::try_tcp(port) else {
                    return;
                };
                let mut rng = StdRng::seed_from_u64(seed * 10 + m);
                while !stop.load(Ordering::Relaxed) {
                    let from = rng.gen_range(0..accounts);
                    let to = (from + rng.gen_range(1..accounts)) % accounts;
                    let amount = rng.gen_range(1..50).to_string();
                    let cmds = transfer(&format!("acct:{from}"), &format!("acct:{to}"), &amount);
                    let wire: Vec<u8> = cmds.iter().flat_map(|c| encode(c)).collect();
                    if c.try_send(&wire).is_err() {
                        return;
                    }
                    for _ in 0..cmds.len() {
                        match c.try_reply() {
                            Ok(r) if r.is_empty() => return,
                            Ok(r) => assert!(r[0] != b'-', "{}", String::from_utf8_lossy(&r)),
                            Err(_) => return,
                        }
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    Movers {
        stop,
        done,
        handles,
    }
}

impl Movers {
    /// Transfers completed so far.
    pub fn done(&self) -> u64 {
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Stops them and returns the transfers completed; a mover that failed fails the test.
    pub fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in self.handles {
            h.join().expect("a mover failed");
        }
        self.done.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Keys of every type and encoding, in several databases, some with deadlines.
pub fn fill_every_type(c: &mut Raw) {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for db in ["0", "3", "9"] {
        c.cmd(&["SELECT", db]);
        for i in 0..200 {
            let n = rng.gen_range(0..100_000).to_string();
            c.cmd(&["SET", &format!("s{i}"), &n]);
            c.cmd(&["SET", &format!("long{i}"), &"abc".repeat(i + 10)]);
            c.cmd(&["RPUSH", &format!("l{}", i % 7), &n, "x"]);
            c.cmd(&["SADD", &format!("iset{}", i % 5), &n]);
            c.cmd(&["SADD", &format!("set{}", i % 3), &format!("m{n}")]);
            c.cmd(&["HSET", &format!("h{}", i % 9), &format!("f{n}"), &n]);
            c.cmd(&["ZADD", &format!("z{}", i % 4), &format!("{n}.5"), &n]);
        }
        for i in 0..600 {
            c.cmd(&["RPUSH", "biglist", &i.to_string()]);
            c.cmd(&["HSET", "bighash", &format!("f{i}"), &"v".repeat(i % 90)]);
            c.cmd(&["ZADD", "bigzset", &i.to_string(), &format!("m{i}")]);
            c.cmd(&["SADD", "bigiset", &i.to_string()]);
        }
        c.cmd(&["SET", "ttl", "v", "EX", "100000"]);
        c.cmd(&["HSET", "httl", "a", "1"]);
        c.cmd(&["PEXPIRE", "httl", "90000000"]);
        c.cmd(&["SET", "soon", "v", "PX", "1"]);
    }
    // DEBUG DIGEST counts a key past its deadline until it is removed: remove them.
    std::thread::sleep(Duration::from_millis(5));
    for db in ["0", "3", "9"] {
        c.cmd(&["SELECT", db]);
        assert_eq!(c.cmd(&["EXISTS", "soon"]), b":0\r\n");
    }
    c.cmd(&["SELECT", "0"]);
}

/// Waits until `raw`'s server counts `n` blocked clients.
pub fn wait_blocked(raw: &mut Raw, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let now = info_field(raw, "clients", "blocked_clients");
        if now.as_deref() == Some(n.to_string().as_str()) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "blocked_clients stayed {now:?}, want {n}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// One connection each to redis-server and to Damselfly, to send both the same commands.
pub struct Pair {
    pub redis: Raw,
    pub ours: Raw,
}

impl Pair {
    pub fn connect(redis: &Server, ours: &Server) -> Pair {
        Pair {
            redis: redis.raw(),
            ours: ours.raw(),
        }
    }

    /// Sends `cmd` to both, asserts the replies are equal, returns ours.
    pub fn same(&mut self, cmd: &[&str]) -> Vec<u8> {
        let theirs = self.redis.cmd(cmd);
        let mine = self.ours.cmd(cmd);
        assert_eq!(
            String::from_utf8_lossy(&mine),
            String::from_utf8_lossy(&theirs),
            "{cmd:?}"
        );
        mine
    }
}

/// Sends each command to both servers and asserts equal replies, listing every difference.
/// `HELLO` replies differ by design (server name, version, id) and are not compared.
pub fn assert_same(redis: &mut Raw, ours: &mut Raw, cmds: &[Vec<String>]) {
    let mut differences = Vec::new();
    for cmd in cmds {
        let theirs = redis.cmd(cmd);
        let mine = ours.cmd(cmd);
        if cmd[0].eq_ignore_ascii_case("hello") || mine == theirs {
            continue;
        }
        differences.push(format!(
            "{cmd:?}\n  ours:  {:?}\n  redis: {:?}",
            String::from_utf8_lossy(&mine),
            String::from_utf8_lossy(&theirs)
        ));
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

pub fn cmds(lines: &[&[&str]]) -> Vec<Vec<String>> {
    lines
        .iter()
        .map(|l| l.iter().map(|s| s.to_string()).collect())
        .collect()
}

/// Function libraries for persistence tests: `fa` returns its library's version, `fb` is
/// flagged no-writes.
pub const LIBRARY_A1: &str =
    "#!lua name=liba\nredis.register_function('fa', function(keys, args) return 'a1' end)";
pub const LIBRARY_A2: &str =
    "#!lua name=liba\nredis.register_function('fa', function(keys, args) return 'a2' end)";
pub const LIBRARY_B: &str = "#!lua name=libb\nredis.register_function{function_name='fb', \
     callback=function() return 'b' end, flags={'no-writes'}, description='reads'}";
pub const LIBRARY_C: &str =
    "#!lua name=libc\nredis.register_function('fc', function() return 'c' end)";

/// One key on each shard of a two-thread server.
pub fn key_on_each_shard() -> (String, String) {
    let on = |shard: usize| {
        (0..)
            .map(|i| format!("key{i}"))
            .find(|k| damselfly_storage::shard_for_key(k.as_bytes(), 2) == shard)
            .unwrap_or_default()
    };
    (on(0), on(1))
}

/// INFO stats `connections_moved` (u64::MAX when missing, so a comparison fails).
pub fn connections_moved(admin: &mut Raw) -> u64 {
    info_field(admin, "stats", "connections_moved")
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX)
}

/// SETs `k0`..`k{n-1}` to `v` in one pipeline and reads every reply.
pub fn set_pipelined(c: &mut Raw, n: usize) {
    let wire: Vec<u8> = (0..n)
        .flat_map(|i| encode(&["SET", &format!("k{i}"), "v"]))
        .collect();
    c.send(&wire);
    for _ in 0..n {
        c.reply();
    }
}
