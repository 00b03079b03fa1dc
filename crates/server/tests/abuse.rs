//! Abuse tests of the real binary, under both I/O backends: 10,000 idle connections,
//! slowloris clients, announced near-limit bulks that never arrive, a pipelining client that
//! never reads, a flood of short-lived connections, clients reset mid-request, and
//! `maxclients` fitted to the open-files limit. Each asserts numbers (server RSS, descriptor
//! and client counts, INFO counters, replies), never how fast the server is, and checks that a
//! control client keeps being served throughout.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use common::{bulk, encode, info_field, rss_bytes, Backend, Raw, Server};

const MB: u64 = 1 << 20;

/// Serializes the tests that hold thousands of descriptors in this process, so the epoll and
/// uring variants never need 2 x 10,000 at once (the hard limit here is 20,000).
static MANY_FDS: Mutex<()> = Mutex::new(());

/// Raises this process's soft RLIMIT_NOFILE to its hard limit; returns the new soft limit.
fn raise_nofile() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit on a struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = lim.rlim_max;
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_cur
}

/// Connects over loopback. A burst of short-lived connections can briefly use up the
/// ephemeral ports (TIME_WAIT), which is this machine's limit, not the server's: retry then.
fn connect(port: u16) -> TcpStream {
    let mut tries = 0;
    loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => {
                s.set_nodelay(true).expect("nodelay");
                s.set_read_timeout(Some(Duration::from_secs(20)))
                    .expect("read timeout");
                s.set_write_timeout(Some(Duration::from_secs(20)))
                    .expect("write timeout");
                return s;
            }
            Err(e) if e.kind() == ErrorKind::AddrNotAvailable && tries < 200 => {
                tries += 1;
                thread::sleep(Duration::from_millis(10));
            }
            Err(e) => panic!("connect: {e}"),
        }
    }
}

fn stat(admin: &mut Raw, section: &str, field: &str) -> u64 {
    info_field(admin, section, field)
        .unwrap_or_else(|| panic!("INFO {section} has no {field}"))
        .parse()
        .expect("numeric INFO field")
}

fn clients(admin: &mut Raw) -> u64 {
    stat(admin, "clients", "connected_clients")
}

fn net_input(admin: &mut Raw) -> u64 {
    stat(admin, "stats", "total_net_input_bytes")
}

/// Descriptors the server process has open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("/proc/<pid>/fd")
        .count()
}

/// Polls `done` until it holds or `limit` passes; the server's cleanup is asynchronous.
fn wait_for(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if done() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A SET and a GET on the control connection, checked byte for byte.
fn assert_served(admin: &mut Raw, tag: &str) {
    let key = format!("control:{tag}");
    let value = format!("value of {tag}");
    assert_eq!(admin.cmd(&["SET", &key, &value]), b"+OK\r\n", "SET {tag}");
    assert_eq!(admin.cmd(&["GET", &key]), bulk(&value), "GET {tag}");
}

/// The server's RSS sampled in the background; `stop` returns the highest sample.
struct PeakRss {
    stop: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    sampler: thread::JoinHandle<()>,
}

impl PeakRss {
    fn start(pid: u32) -> PeakRss {
        let stop = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(rss_bytes(pid)));
        let sampler = {
            let (stop, peak) = (stop.clone(), peak.clone());
            thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    peak.fetch_max(rss_bytes(pid), Ordering::Relaxed);
                    thread::sleep(Duration::from_millis(2));
                }
            })
        };
        PeakRss {
            stop,
            peak,
            sampler,
        }
    }

    fn stop(self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        self.sampler.join().expect("sampler");
        self.peak.load(Ordering::Relaxed)
    }
}

/// Makes `close` send a reset (SO_LINGER 0) instead of a FIN: a client that is killed.
fn reset_on_close(s: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt on a socket we own, with a correctly sized option value.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_LINGER");
}

/// Spawns the server with its log in a file, without waiting for it. `nofile` sets its
/// RLIMIT_NOFILE (soft, hard). `eager_purge` makes jemalloc return freed pages to the OS at
/// once (no dirty or muzzy decay), so RSS after clients leave shows what the server still holds
/// rather than pages the allocator caches for its decay time (see KILLED_RSS_AFTER).
fn spawn(b: Backend, extra: &[&str], nofile: Option<(u64, u64)>, eager_purge: bool) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = common::free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_damselfly"));
    cmd.args(["--port", &port.to_string(), "--threads", "2"])
        .args(["--io-backend", b.flag(), "--loglevel", "notice"])
        .arg("--logfile")
        .arg(dir.path().join("log"))
        .args(extra)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if eager_purge {
        cmd.env("_RJEM_MALLOC_CONF", "dirty_decay_ms:0,muzzy_decay_ms:0");
    }
    if let Some((soft, hard)) = nofile {
        // SAFETY: only setrlimit, which is async-signal-safe, runs between fork and exec.
        unsafe {
            cmd.pre_exec(move || {
                let lim = libc::rlimit {
                    rlim_cur: soft,
                    rlim_max: hard,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd.spawn().expect("spawn damselfly");
    let unix = dir.path().join("unused.sock");
    Server {
        child: Some(child),
        port,
        unix,
        dir,
    }
}

/// A connection to a freshly spawned server, once it answers PING.
fn wait_ready(s: &Server) -> Raw {
    let mut ready = None;
    let up = wait_for(Duration::from_secs(20), || {
        if let Ok(mut r) = Raw::try_tcp(s.port) {
            if r.try_cmd(&["PING"]).is_ok_and(|p| p == b"+PONG\r\n") {
                ready = Some(r);
                return true;
            }
        }
        false
    });
    assert!(up, "server did not start");
    ready.expect("connection")
}

fn log_of(s: &Server) -> String {
    std::fs::read_to_string(s.dir.path().join("log")).unwrap_or_default()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / MB as f64
}

/// Idle connections held open at once.
const IDLE: u64 = 10_000;
/// Bound on server RSS growth per idle connection. Measured (debug build, 2 threads): 22.3 KiB
/// under epoll, 22.7 KiB under io_uring, mostly the 16 KiB read buffer each connection keeps;
/// about 2.5x that.
const IDLE_RSS_PER_CONN: u64 = 56 * 1024;

/// 10,000 idle clients are all admitted and counted, cost bounded memory each, and do not
/// stop the server from serving a control client.
fn ten_thousand_idle_connections(b: Backend) {
    let _many = MANY_FDS.lock().unwrap_or_else(|e| e.into_inner());
    let nofile = raise_nofile();
    assert!(nofile > IDLE + 1000, "RLIMIT_NOFILE hard limit {nofile}");
    // The default maxclients (10000) counts the control client too.
    let s = Server::start(b, &["--maxclients", "10050"]);
    let mut admin = s.raw();
    assert_served(&mut admin, "before");
    let before = rss_bytes(s.pid());
    let idle: Vec<TcpStream> = (0..IDLE).map(|_| connect(s.port)).collect();
    let mut seen = 0;
    let all_in = wait_for(Duration::from_secs(30), || {
        seen = clients(&mut admin);
        seen == IDLE + 1
    });
    assert!(all_in, "connected_clients is {seen}, want {}", IDLE + 1);
    assert_served(&mut admin, "with 10000 idle");
    let during = rss_bytes(s.pid());
    let per_conn = during.saturating_sub(before) / IDLE;
    println!(
        "{b:?}: RSS {:.1} MiB -> {:.1} MiB with {IDLE} idle connections: {:.1} KiB each",
        mib(before),
        mib(during),
        per_conn as f64 / 1024.0
    );
    assert!(
        per_conn < IDLE_RSS_PER_CONN,
        "{per_conn} bytes of RSS per idle connection (bound {IDLE_RSS_PER_CONN})"
    );
    drop(idle);
    let mut left = 0;
    let gone = wait_for(Duration::from_secs(30), || {
        left = clients(&mut admin);
        left == 1
    });
    assert!(
        gone,
        "{left} clients still counted after closing the idle ones"
    );
    // Printed, not asserted: the allocator keeps an idle thread's freed pages (see
    // KILLED_RSS_AFTER).
    println!(
        "{b:?}: RSS {:.1} MiB once they left",
        mib(rss_bytes(s.pid()))
    );
    assert_served(&mut admin, "after");
}

const SLOW_CLIENTS: usize = 20;
const SLOW_PAUSE: Duration = Duration::from_millis(100);

/// Slowloris: clients that send their request a byte at a time hold the server up for nobody;
/// each gets its correct reply once its last byte arrives.
fn slowloris(b: Backend) {
    let s = Server::start(b, &[]);
    let mut admin = s.raw();
    let requests: Vec<Vec<u8>> = (0..SLOW_CLIENTS)
        .map(|i| encode(&["SET", &format!("slow:{i:02}"), &format!("value-{i:02}")]))
        .collect();
    let len = requests[0].len();
    assert!(requests.iter().all(|r| r.len() == len));
    let mut slow: Vec<Raw> = (0..SLOW_CLIENTS).map(|_| s.raw()).collect();
    for at in 0..len {
        for (r, req) in slow.iter_mut().zip(&requests) {
            r.send(&req[at..at + 1]);
        }
        // Until the last byte every slow request is incomplete; the control client is served.
        assert_served(&mut admin, &format!("byte {at}"));
        thread::sleep(SLOW_PAUSE);
    }
    assert_eq!(clients(&mut admin), SLOW_CLIENTS as u64 + 1);
    for (i, r) in slow.iter_mut().enumerate() {
        assert_eq!(r.reply(), b"+OK\r\n", "slow client {i}");
        assert_eq!(
            r.cmd(&["GET", &format!("slow:{i:02}")]),
            bulk(&format!("value-{i:02}"))
        );
    }
}

const BULK_CLIENTS: u64 = 200;
const BULK_SENT: usize = 4096;
/// Bound on server RSS growth while 200 clients each announce a 536,870,000-byte bulk and send
/// 4 KiB of it. Measured: 7-9 MiB under epoll, 9-13 MiB under io_uring (read buffers grow with
/// what arrives, not with what is announced; before that fix, 230 MiB); about 3x that.
const BULK_RSS_GROWTH: u64 = 32 * MB;
/// How close to its baseline RSS must be once those clients are gone. Measured: 1-6 MiB above
/// it under epoll, while io_uring returns little of its 9-13 MiB; with the growth this small
/// the bound catches gross leaks only (clients_killed_mid_request measures the return).
const BULK_RSS_AFTER: u64 = 16 * MB;

/// Announced bulks near proto-max-bulk-len whose data never comes are not allocated up front,
/// and their memory goes away with the clients.
fn announced_bulks_without_data(b: Backend) {
    let s = spawn(b, &[], None, true);
    let mut admin = wait_ready(&s);
    assert_served(&mut admin, "before");
    let base = rss_bytes(s.pid());
    let input0 = net_input(&mut admin);
    let mut request = b"*2\r\n$3\r\nSET\r\n$536870000\r\n".to_vec();
    request.resize(request.len() + BULK_SENT, b'x');
    let hangers: Vec<TcpStream> = (0..BULK_CLIENTS)
        .map(|_| {
            let mut c = connect(s.port);
            c.write_all(&request).expect("write");
            c
        })
        .collect();
    // Measure once the server has read every byte sent (this includes INFO's own requests).
    let expected = input0 + BULK_CLIENTS * request.len() as u64;
    let mut input = 0;
    let read_all = wait_for(Duration::from_secs(20), || {
        input = net_input(&mut admin);
        input >= expected
    });
    assert!(read_all, "server read {input} bytes, want {expected}");
    assert_served(&mut admin, "with hanging bulks");
    let during = rss_bytes(s.pid());
    let growth = during.saturating_sub(base);
    println!(
        "{b:?}: RSS {:.1} MiB -> {:.1} MiB with {BULK_CLIENTS} announced 512 MB bulks",
        mib(base),
        mib(during)
    );
    assert!(
        growth < BULK_RSS_GROWTH,
        "RSS grew {:.1} MiB (bound {} MiB)",
        mib(growth),
        BULK_RSS_GROWTH / MB
    );
    assert_eq!(clients(&mut admin), BULK_CLIENTS + 1);
    drop(hangers);
    let mut after = 0;
    let released = wait_for(Duration::from_secs(10), || {
        after = rss_bytes(s.pid());
        clients(&mut admin) == 1 && after < base + BULK_RSS_AFTER
    });
    println!("{b:?}: RSS {:.1} MiB after they left", mib(after));
    assert_eq!(clients(&mut admin), 1);
    assert!(
        released,
        "RSS {:.1} MiB after the clients left, baseline {:.1} MiB",
        mib(after),
        mib(base)
    );
    assert_eq!(admin.cmd(&["DBSIZE"]), b":2\r\n", "only the control keys");
}

/// The output limit set for the non-reading client.
const OUTPUT_LIMIT: u64 = 8 * MB;
/// GETs of a 1 MB value it sends: 200 MB of replies if nothing stopped it.
const UNREAD_GETS: usize = 200;
/// Server RSS may exceed its baseline by the limit plus this. Measured peak RSS growth: 15-26
/// MiB under epoll, 18-28 MiB under io_uring (the limit, the reply that passed it, and the
/// smaller blocks the output buffers outgrew while doubling, which the allocator keeps); before
/// the round was cut at the limit, 64-136 MiB.
const OUTPUT_RSS_MARGIN: u64 = 32 * MB;

/// A client that pipelines GETs of 1 MB values and never reads is disconnected once its
/// unsent replies pass damselfly-output-buffer-limit, before the server's memory grows past
/// that limit. It alternates between a key on each of the two shards, so replies build up both
/// inline on its own thread and in a batch on the other.
fn pipeliner_that_never_reads(b: Backend) {
    let s = Server::start(b, &[]);
    let mut admin = s.raw();
    let limit = OUTPUT_LIMIT.to_string();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "damselfly-output-buffer-limit", &limit]),
        b"+OK\r\n"
    );
    let keys: Vec<String> = (0..2)
        .map(|shard| {
            (0..)
                .map(|i| format!("bigkey:{i}"))
                .find(|k| damselfly_storage::shard_for_key(k.as_bytes(), 2) == shard)
                .expect("a key on each shard")
        })
        .collect();
    let big = "b".repeat(MB as usize);
    for k in &keys {
        assert_eq!(admin.cmd(&["SET", k, &big]), b"+OK\r\n");
        assert_eq!(admin.cmd(&["STRLEN", k]), b":1048576\r\n");
    }
    let base = rss_bytes(s.pid());
    let peak = PeakRss::start(s.pid());
    let mut greedy = connect(s.port);
    let gets: Vec<Vec<u8>> = keys.iter().map(|k| encode(&["GET", k])).collect();
    let mut write_failed = false;
    for i in 0..UNREAD_GETS {
        if greedy.write_all(&gets[i % 2]).is_err() {
            write_failed = true;
            break;
        }
    }
    let mut left = 0;
    let dropped = wait_for(Duration::from_secs(20), || {
        left = clients(&mut admin);
        left == 1
    });
    let peak = peak.stop();
    assert!(
        dropped,
        "the non-reading client is still connected ({left} clients)"
    );
    // Reading now drains what the kernel buffered and then meets EOF or a reset.
    let mut received = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    let ended = loop {
        match greedy.read(&mut buf) {
            Ok(0) => break "EOF",
            Ok(n) => received += n as u64,
            Err(e) if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut => {
                break "nothing (timed out)"
            }
            Err(_) => break "reset",
        }
    };
    println!(
        "{b:?}: peak RSS {:.1} MiB over a {:.1} MiB baseline; the client read {:.1} MiB then {ended} (write failed: {write_failed})",
        mib(peak.saturating_sub(base)),
        mib(base),
        mib(received)
    );
    assert!(ended != "nothing (timed out)", "the socket was not closed");
    assert!(
        received < UNREAD_GETS as u64 * MB / 2,
        "the client received {:.1} MiB of replies",
        mib(received)
    );
    assert!(
        peak < base + OUTPUT_LIMIT + OUTPUT_RSS_MARGIN,
        "peak RSS {:.1} MiB over baseline (limit {} MiB + {} MiB)",
        mib(peak.saturating_sub(base)),
        OUTPUT_LIMIT / MB,
        OUTPUT_RSS_MARGIN / MB
    );
    assert_served(&mut admin, "after the greedy client");
}

/// `SRANDMEMBER key -1000000000` (and HRANDFIELD, ZRANDMEMBER): a reply whose size the
/// client chooses (about 10 GB here) stops growing at the output buffer limit and the client
/// is dropped, whether the key is on the connection's own shard (inline) or another (a batch).
/// Before, the whole answer was allocated up front: 3.5 GB of RSS for one command.
fn huge_random_counts(b: Backend) {
    let s = spawn(b, &[], None, true);
    let mut admin = wait_ready(&s);
    let limit = OUTPUT_LIMIT.to_string();
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "damselfly-output-buffer-limit", &limit]),
        b"+OK\r\n"
    );
    let setup: [&[&str]; 3] = [
        &["SADD", "s", "a", "b", "c"],
        &["HSET", "h", "f", "v", "g", "w"],
        &["ZADD", "z", "1", "a", "2", "b"],
    ];
    for cmd in setup {
        assert!(admin.cmd(cmd).starts_with(b":"), "{cmd:?}");
    }
    let base = rss_bytes(s.pid());
    let peak = PeakRss::start(s.pid());
    let requests: [&[&str]; 4] = [
        &["SRANDMEMBER", "s", "-1000000000"],
        &["HRANDFIELD", "h", "-1000000000", "WITHVALUES"],
        &["ZRANDMEMBER", "z", "-1000000000", "WITHSCORES"],
        &["ZRANDMEMBER", "z", "-1000000000"],
    ];
    for request in requests {
        // Several connections, so the key is on some connection's own shard and not on
        // another's.
        for _ in 0..2 {
            let mut c = connect(s.port);
            c.write_all(&encode(request)).expect("send");
            let mut drained = 0u64;
            let mut buf = vec![0u8; 1 << 16];
            let ended = loop {
                match c.read(&mut buf) {
                    Ok(0) => break true,
                    Ok(n) => drained += n as u64,
                    Err(e)
                        if e.kind() == ErrorKind::WouldBlock || e.kind() == ErrorKind::TimedOut =>
                    {
                        break false
                    }
                    Err(_) => break true,
                }
            };
            assert!(ended, "{request:?}: the client was not disconnected");
            assert!(
                drained <= OUTPUT_LIMIT,
                "{request:?}: {drained} bytes reached the client"
            );
            assert_served(&mut admin, "after a huge random count");
        }
    }
    let peak = peak.stop();
    assert!(
        peak < base + OUTPUT_LIMIT + OUTPUT_RSS_MARGIN,
        "peak RSS {:.1} MiB over baseline",
        mib(peak.saturating_sub(base))
    );
    // A count the output allows still gets every pick.
    let reply = admin.cmd(&["SRANDMEMBER", "s", "-1000"]);
    assert!(reply.starts_with(b"*1000\r\n"));
    assert_eq!(common::diff::parse(&reply).items.len(), 1000);
}

const FLOOD_THREADS: usize = 4;
const FLOOD_CYCLES: usize = 20_000;
const SILENT_CONNECTS: usize = 5_000;
const SILENT_BATCH: usize = 500;

/// One connect / PING / close cycle.
fn ping_once(port: u16) {
    let mut c = connect(port);
    c.write_all(b"*1\r\n$4\r\nPING\r\n").expect("write PING");
    let mut pong = [0u8; 7];
    c.read_exact(&mut pong).expect("read PONG");
    assert_eq!(&pong, b"+PONG\r\n");
}

/// A flood of short connections leaves no descriptor or client behind, and every one of them
/// is counted in total_connections_received.
fn connection_flood(b: Backend) {
    let s = Server::start(b, &[]);
    let mut admin = s.raw();
    // Whatever a backend opens lazily on first use exists before the baseline is taken.
    for _ in 0..20 {
        ping_once(s.port);
    }
    assert!(wait_for(Duration::from_secs(10), || clients(&mut admin) == 1));
    let fds0 = open_fds(s.pid());
    let total0 = stat(&mut admin, "stats", "total_connections_received");
    let port = s.port;
    let pingers: Vec<_> = (0..FLOOD_THREADS)
        .map(|_| {
            thread::spawn(move || {
                for _ in 0..FLOOD_CYCLES / FLOOD_THREADS {
                    ping_once(port);
                }
            })
        })
        .collect();
    // Meanwhile, connections that close without sending a byte.
    for _ in 0..SILENT_CONNECTS / SILENT_BATCH {
        let batch: Vec<TcpStream> = (0..SILENT_BATCH).map(|_| connect(port)).collect();
        drop(batch);
    }
    assert_served(&mut admin, "during the flood");
    for p in pingers {
        p.join().expect("flood thread");
    }
    let expected = total0 + (FLOOD_CYCLES + SILENT_CONNECTS) as u64;
    let (mut n, mut fds, mut total) = (0, 0, 0);
    let settled = wait_for(Duration::from_secs(20), || {
        n = clients(&mut admin);
        fds = open_fds(s.pid());
        total = stat(&mut admin, "stats", "total_connections_received");
        n == 1 && fds <= fds0 && total == expected
    });
    println!("{b:?}: after the flood: {n} clients, {fds} descriptors (baseline {fds0}), {total} connections received (baseline {total0})");
    assert!(settled, "did not settle");
    assert_eq!(n, 1);
    assert_eq!(fds, fds0);
    assert_eq!(total, expected);
    assert_served(&mut admin, "after the flood");
}

const HALF_CLIENTS: usize = 100;
const HALF_SENT: usize = 100 * 1024;
const PIPE_CLIENTS: usize = 50;
const PIPE_DEPTH: usize = 500;
/// How close to its baseline RSS must return after the killed clients are gone. Measured: 28-32
/// MiB above it while they are connected, 2-7 MiB above it after; about 2x that. The server runs
/// without jemalloc's decay: by default freed pages stay with the allocator for 10 s (Redis's
/// behaviour too), which would hide whether the server itself let go.
const KILLED_RSS_AFTER: u64 = 12 * MB;

/// Clients reset halfway through a 1 MB SET, and clients that pipeline and close without
/// reading, leave no client, descriptor, memory or half-written key behind.
fn clients_killed_mid_request(b: Backend) {
    let s = spawn(b, &[], None, true);
    let mut admin = wait_ready(&s);
    for _ in 0..20 {
        ping_once(s.port);
    }
    assert!(wait_for(Duration::from_secs(10), || clients(&mut admin) == 1));
    let fds0 = open_fds(s.pid());
    let base = rss_bytes(s.pid());
    let input0 = net_input(&mut admin);
    let mut sent = 0u64;
    let half: Vec<TcpStream> = (0..HALF_CLIENTS)
        .map(|i| {
            let key = format!("halfsent:{i:03}");
            let mut c = connect(s.port);
            let mut req =
                format!("*3\r\n$3\r\nSET\r\n${}\r\n{key}\r\n$1048576\r\n", key.len()).into_bytes();
            req.resize(req.len() + HALF_SENT, b'h');
            c.write_all(&req).expect("write half a SET");
            sent += req.len() as u64;
            c
        })
        .collect();
    // Kill them only once the server holds their partial requests.
    let mut input = 0;
    let holding = wait_for(Duration::from_secs(20), || {
        input = net_input(&mut admin);
        input >= input0 + sent
    });
    assert!(holding, "server read {input} bytes, want {}", input0 + sent);
    let during = rss_bytes(s.pid());
    for c in half {
        reset_on_close(&c);
    }
    let pipeline: Vec<u8> = (0..PIPE_DEPTH)
        .flat_map(|j| {
            let mut cmds = encode(&["SET", &format!("pipe:{j}"), "a value of some thirty bytes"]);
            cmds.extend(encode(&["GET", &format!("pipe:{j}")]));
            cmds
        })
        .collect();
    for _ in 0..PIPE_CLIENTS {
        let mut c = connect(s.port);
        c.write_all(&pipeline).expect("write pipeline");
    }
    assert_served(&mut admin, "after the kills");
    let (mut n, mut fds, mut rss) = (0, 0, 0);
    let settled = wait_for(Duration::from_secs(20), || {
        n = clients(&mut admin);
        fds = open_fds(s.pid());
        rss = rss_bytes(s.pid());
        n == 1 && fds <= fds0 && rss < base + KILLED_RSS_AFTER
    });
    println!(
        "{b:?}: RSS {:.1} MiB with the half requests, {:.1} MiB after (baseline {:.1} MiB); {n} clients, {fds} descriptors (baseline {fds0})",
        mib(during),
        mib(rss),
        mib(base)
    );
    assert!(settled, "did not settle");
    assert_eq!(n, 1);
    assert_eq!(fds, fds0);
    assert_eq!(admin.cmd(&["KEYS", "halfsent:*"]), b"*0\r\n");
    assert_served(&mut admin, "after the killed clients left");
}

/// The (soft, hard) limits on the process's open files, from /proc/<pid>/limits.
fn max_open_files(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let nums: Vec<u64> = line
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    (nums[0], nums[1])
}

/// At start-up the open-files limit is raised to maxclients plus a reserve (Redis's 32, and 5
/// per thread: 42 here) when the hard limit allows, and otherwise maxclients is lowered to
/// fit, with Redis's log lines; a limit too low for even the reserve stops the server.
fn maxclients_fits_the_open_files_limit(b: Backend) {
    // Room to raise: the soft limit goes up to what maxclients needs.
    let s = spawn(b, &["--maxclients", "2000"], Some((1024, 4096)), false);
    let mut r = wait_ready(&s);
    assert_eq!(stat(&mut r, "clients", "maxclients"), 2000);
    assert_eq!(max_open_files(s.pid()), (2042, 2042));
    assert!(log_of(&s).contains(
        "Increased maximum number of open files to 2042 (it was originally set to 1024)."
    ));
    drop(s);
    // No room: maxclients (default 10000) shrinks to the limit minus the reserve.
    let s = spawn(b, &[], Some((1024, 1024)), false);
    let mut r = wait_ready(&s);
    assert_eq!(stat(&mut r, "clients", "maxclients"), 982);
    assert_eq!(
        r.cmd(&["CONFIG", "GET", "maxclients"]),
        b"*2\r\n$10\r\nmaxclients\r\n$3\r\n982\r\n"
    );
    let log = log_of(&s);
    for line in [
        "You requested maxclients of 10000 requiring at least 10042 max file descriptors.",
        "Server can't set maximum open files to 10042 because of OS error: Operation not permitted.",
        "Current maximum open files is 1024. maxclients has been reduced to 982 to compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
    ] {
        assert!(log.contains(line), "log lacks {line:?}:\n{log}");
    }
    drop(s);
    // Not even the reserve: exit status 1.
    let mut s = spawn(b, &[], Some((32, 32)), false);
    let mut child = s.child.take().expect("child");
    let status = common::wait_timeout(&mut child, Duration::from_secs(20)).expect("exits");
    assert_eq!(status.code(), Some(1));
    assert!(log_of(&s).contains("Your current 'ulimit -n' of 32 is not enough for the server to start. Please increase your open file limit to at least 10042. Exiting."));
}

backend_tests!(
    ten_thousand_idle_connections,
    slowloris,
    announced_bulks_without_data,
    pipeliner_that_never_reads,
    huge_random_counts,
    connection_flood,
    clients_killed_mid_request,
    maxclients_fits_the_open_files_limit,
);
