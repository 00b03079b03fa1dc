//! The metrics endpoint (`--metrics-port`, docs/operations.md "Metrics"): scrapes `/metrics`
//! over plain HTTP, parses the body with an independent Prometheus text-format parser
//! (prometheus-parse) and checks the values against the commands run and against INFO;
//! `/healthz`, the HTTP errors, hostile requests, and that port 0 serves nothing.

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{info_field, Backend, Raw, Server};
use prometheus_parse::{Scrape, Value};

/// An HTTP reply: status code, header block, body.
struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
        })
    }
}

/// Sends `request` as is and reads the reply until the server closes the connection.
fn http(port: u16, request: &[u8]) -> std::io::Result<Reply> {
    let mut s = TcpStream::connect(("127.0.0.1", port))?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(request)?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).expect("UTF-8 reply");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head and a body");
    let (status_line, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    let mut parts = status_line.splitn(3, ' ');
    assert_eq!(parts.next(), Some("HTTP/1.1"), "{status_line}");
    let status = parts.next().and_then(|c| c.parse().ok()).expect("status");
    Ok(Reply {
        status,
        headers: headers.to_string(),
        body: body.to_string(),
    })
}

fn get(port: u16, path: &str) -> Reply {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nUser-Agent: test\r\n\r\n");
    http(port, req.as_bytes()).expect("HTTP GET")
}

/// Scrapes `/metrics` in the 0.0.4 text format and parses it.
fn scrape(port: u16) -> Scrape {
    let reply = get(port, "/metrics");
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(
        reply.header("Content-Type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    assert_eq!(
        reply.header("Content-Length").and_then(|l| l.parse().ok()),
        Some(reply.body.len())
    );
    assert!(!reply.body.contains("# EOF"), "0.0.4 has no EOF marker");
    Scrape::parse(reply.body.lines().map(|l| Ok(l.to_string()))).expect("a parseable scrape")
}

/// The value of the one sample of `name` whose labels include `labels`.
fn sample(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let found: Vec<f64> = scrape
        .samples
        .iter()
        .filter(|s| s.metric == name && labels.iter().all(|(k, v)| s.labels.get(k) == Some(*v)))
        .map(|s| match s.value {
            Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
            _ => panic!("{name} is not a plain sample"),
        })
        .collect();
    assert!(
        found.len() <= 1,
        "{name}{labels:?} has {} samples",
        found.len()
    );
    found.first().copied()
}

fn value(scrape: &Scrape, name: &str, labels: &[(&str, &str)]) -> f64 {
    sample(scrape, name, labels).unwrap_or_else(|| panic!("no sample {name}{labels:?}"))
}

/// Asserts every sample of `name` has the type its `# TYPE` line gave (redis_exporter's).
fn assert_type(scrape: &Scrape, name: &str, counter: bool) {
    let samples: Vec<_> = scrape.samples.iter().filter(|s| s.metric == name).collect();
    assert!(!samples.is_empty(), "no sample {name}");
    for s in samples {
        match (&s.value, counter) {
            (Value::Counter(_), true) | (Value::Gauge(_), false) => {}
            (v, _) => panic!(
                "{name} is {v:?}, expected a {}",
                if counter { "counter" } else { "gauge" }
            ),
        }
    }
}

fn info_u64(c: &mut Raw, section: &str, field: &str) -> f64 {
    info_field(c, section, field)
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("INFO {section} {field}"))
}

fn ok(reply: Vec<u8>) {
    assert!(
        reply.starts_with(b"+OK") || reply.starts_with(b"$"),
        "{:?}",
        String::from_utf8_lossy(&reply)
    );
}

/// TCP ports the process `pid` listens on (its sockets in LISTEN state).
fn listening_ports(pid: u32) -> BTreeSet<u16> {
    let mut inodes = BTreeSet::new();
    for fd in std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fd dir")
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path()) {
            let t = target.to_string_lossy();
            if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                inodes.insert(inode.to_string());
            }
        }
    }
    let mut ports = BTreeSet::new();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // local_address is addr:port in hex, st 0A is LISTEN, inode is the 10th column.
            if cols.len() > 9 && cols[3] == "0A" && inodes.contains(cols[9]) {
                let port = cols[1].rsplit(':').next().expect("port");
                ports.insert(u16::from_str_radix(port, 16).expect("hex port"));
            }
        }
    }
    ports
}

fn start_with_metrics(b: Backend, extra: &[&str]) -> (Server, u16) {
    let mp = common::free_port();
    let mp_s = mp.to_string();
    let mut flags = vec!["--metrics-port", mp_s.as_str()];
    flags.extend_from_slice(extra);
    (Server::start(b, &flags), mp)
}

/// Known commands, then one scrape: every figure matches what was run and what INFO says.
fn scrape_reports_what_ran(b: Backend) {
    let (s, mp) = start_with_metrics(b, &[]);
    let mut c = s.raw();
    for i in 0..10 {
        ok(c.cmd(&["SET", &format!("key:{i}"), "v"]));
    }
    for i in 0..5 {
        assert_eq!(c.cmd(&["GET", &format!("key:{i}")]), b"$1\r\nv\r\n");
    }
    for i in 0..3 {
        assert_eq!(c.cmd(&["GET", &format!("missing:{i}")]), b"$-1\r\n");
    }
    ok(c.cmd(&["SELECT", "3"]));
    ok(c.cmd(&["SET", "t1", "v", "EX", "100"]));
    ok(c.cmd(&["SET", "t2", "v", "PX", "100000"]));
    ok(c.cmd(&["SET", "t3", "v"]));
    assert!(c
        .cmd(&["NOSUCHCOMMAND"])
        .starts_with(b"-ERR unknown command"));
    // Two more clients: three connected in all.
    let mut others = [s.raw(), s.raw()];
    for o in &mut others {
        assert_eq!(o.cmd(&["PING"]), b"+PONG\r\n");
    }

    let m = scrape(mp);
    assert_eq!(value(&m, "redis_up", &[]), 1.0);
    assert_eq!(value(&m, "redis_commands_total", &[("cmd", "set")]), 13.0);
    assert_eq!(value(&m, "redis_commands_total", &[("cmd", "get")]), 8.0);
    // Two PINGs here, and the harness's readiness PING.
    assert_eq!(value(&m, "redis_commands_total", &[("cmd", "ping")]), 3.0);
    assert_eq!(
        sample(&m, "redis_commands_total", &[("cmd", "lpush")]),
        None
    );
    assert_eq!(
        value(&m, "redis_commands_failed_calls_total", &[("cmd", "set")]),
        0.0
    );
    assert!(
        value(
            &m,
            "redis_commands_duration_seconds_total",
            &[("cmd", "set")]
        ) > 0.0
    );
    assert_eq!(value(&m, "redis_errors_total", &[("err", "ERR")]), 1.0);
    assert_eq!(value(&m, "redis_keyspace_hits_total", &[]), 5.0);
    assert_eq!(value(&m, "redis_keyspace_misses_total", &[]), 3.0);
    assert_eq!(value(&m, "redis_db_keys", &[("db", "db0")]), 10.0);
    assert_eq!(value(&m, "redis_db_keys", &[("db", "db3")]), 3.0);
    assert_eq!(value(&m, "redis_db_keys", &[("db", "db1")]), 0.0);
    assert_eq!(value(&m, "redis_db_keys_expiring", &[("db", "db0")]), 0.0);
    assert_eq!(value(&m, "redis_db_keys_expiring", &[("db", "db3")]), 2.0);
    // INFO's avg_ttl is an estimate the expiry tick refreshes: 0 until it has sampled.
    let ttl = value(&m, "redis_db_avg_ttl_seconds", &[("db", "db3")]);
    assert!((0.0..=100.0).contains(&ttl), "avg ttl {ttl}");
    assert_eq!(
        sample(&m, "redis_db_avg_ttl_seconds", &[("db", "db1")]),
        None
    );
    assert_eq!(value(&m, "redis_connected_clients", &[]), 3.0);
    assert_eq!(value(&m, "redis_blocked_clients", &[]), 0.0);
    assert_eq!(
        value(&m, "redis_connections_received_total", &[]),
        3.0 + 1.0
    );
    assert_eq!(value(&m, "redis_expired_keys_total", &[]), 0.0);
    assert_eq!(value(&m, "redis_evicted_keys_total", &[]), 0.0);
    assert_eq!(value(&m, "redis_pubsub_channels", &[]), 0.0);
    assert_eq!(value(&m, "redis_memory_max_bytes", &[]), 0.0);
    assert!(value(&m, "redis_memory_used_bytes", &[]) > 0.0);
    assert!(value(&m, "redis_net_input_bytes_total", &[]) > 0.0);
    assert!(value(&m, "redis_net_output_bytes_total", &[]) > 0.0);
    assert!(value(&m, "redis_uptime_in_seconds", &[]) >= 0.0);
    assert!(sample(&m, "redis_instantaneous_ops_per_sec", &[]).is_some());
    assert_eq!(value(&m, "redis_rejected_connections_total", &[]), 0.0);
    let info = &[("redis_version", "7.0.15"), ("role", "master")];
    assert_eq!(value(&m, "redis_instance_info", info), 1.0);

    // Per shard: one series per shard, summing to the totals.
    let per_shard = |name: &str| -> Vec<f64> {
        (0..2)
            .map(|i| value(&m, name, &[("shard", &i.to_string())]))
            .collect()
    };
    assert_eq!(per_shard("damselfly_shard_keys").iter().sum::<f64>(), 13.0);
    assert_eq!(
        per_shard("damselfly_shard_keys_expiring")
            .iter()
            .sum::<f64>(),
        2.0
    );
    assert_eq!(sample(&m, "damselfly_shard_keys", &[("shard", "2")]), None);
    assert_eq!(
        per_shard("damselfly_shard_commands_processed_total")
            .iter()
            .sum::<f64>(),
        value(&m, "redis_commands_processed_total", &[])
    );
    assert_eq!(
        per_shard("damselfly_shard_keyspace_hits_total")
            .iter()
            .sum::<f64>(),
        5.0
    );
    assert!(per_shard("damselfly_shard_used_memory_bytes")
        .iter()
        .all(|&v| v >= 0.0));
    let shard_mem: f64 = per_shard("damselfly_shard_used_memory_bytes").iter().sum();
    assert!(shard_mem > 0.0);
    assert_eq!(
        per_shard("damselfly_shard_connected_clients")
            .iter()
            .sum::<f64>(),
        3.0
    );

    // Types as redis_exporter declares them.
    for counter in [
        "redis_commands_total",
        "redis_commands_processed_total",
        "redis_commands_duration_seconds_total",
        "redis_keyspace_hits_total",
        "redis_keyspace_misses_total",
        "redis_connections_received_total",
        "redis_net_input_bytes_total",
        "damselfly_shard_commands_processed_total",
    ] {
        assert_type(&m, counter, true);
    }
    for gauge in [
        "redis_up",
        "redis_connected_clients",
        "redis_db_keys",
        "redis_memory_used_bytes",
        "damselfly_shard_keys",
    ] {
        assert_type(&m, gauge, false);
    }

    // The same numbers as INFO, read right after (nothing ran in between but INFO itself).
    let mut c = s.raw();
    assert_eq!(
        info_u64(&mut c, "stats", "keyspace_hits"),
        value(&m, "redis_keyspace_hits_total", &[])
    );
    assert_eq!(
        info_u64(&mut c, "stats", "keyspace_misses"),
        value(&m, "redis_keyspace_misses_total", &[])
    );
    assert_eq!(
        info_u64(&mut c, "stats", "expired_keys"),
        value(&m, "redis_expired_keys_total", &[])
    );
    assert_eq!(
        info_u64(&mut c, "memory", "maxmemory"),
        value(&m, "redis_memory_max_bytes", &[])
    );
    let processed = info_u64(&mut c, "stats", "total_commands_processed");
    let scraped = value(&m, "redis_commands_processed_total", &[]);
    // The four INFO commands before are counted by then, and perhaps this one.
    assert!(
        processed >= scraped + 4.0 && processed <= scraped + 5.0,
        "INFO {processed}, scraped {scraped}"
    );
    let keyspace = String::from_utf8_lossy(&c.cmd(&["INFO", "keyspace"])).into_owned();
    assert!(keyspace.contains("db0:keys=10,expires=0,"), "{keyspace}");
    assert!(keyspace.contains("db3:keys=3,expires=2,"), "{keyspace}");
    let commandstats = String::from_utf8_lossy(&c.cmd(&["INFO", "commandstats"])).into_owned();
    assert!(
        commandstats.contains("cmdstat_set:calls=13,"),
        "{commandstats}"
    );

    // Counters move: a second scrape after more commands.
    ok(c.cmd(&["SET", "key:0", "w"]));
    let again = scrape(mp);
    assert_eq!(
        value(&again, "redis_commands_total", &[("cmd", "set")]),
        14.0
    );
    assert_eq!(value(&again, "redis_connected_clients", &[]), 4.0);
    drop(others);
}

/// OpenMetrics when the scraper asks for it (Prometheus does by default).
fn openmetrics_on_request(b: Backend) {
    let (s, mp) = start_with_metrics(b, &[]);
    ok(s.raw().cmd(&["SET", "a", "1"]));
    let req = "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n\r\n";
    let reply = http(mp, req.as_bytes()).expect("scrape");
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("Content-Type"),
        Some("application/openmetrics-text; version=1.0.0; charset=utf-8")
    );
    assert!(reply.body.ends_with("# EOF\n"), "{}", reply.body);
    assert!(reply.body.contains("# TYPE redis_commands counter\n"));
    assert!(reply.body.contains("redis_commands_total{cmd=\"set\"} 1\n"));
    assert!(reply
        .body
        .contains("# TYPE redis_connected_clients gauge\n"));
}

/// /healthz, unknown paths, other methods, HEAD.
fn http_routes(b: Backend) {
    let (s, mp) = start_with_metrics(b, &[]);
    let h = get(mp, "/healthz");
    assert_eq!((h.status, h.body.as_str()), (200, "ok\n"));
    assert_eq!(h.header("Connection"), Some("close"));
    assert_eq!(get(mp, "/metrics?debug=1").status, 200);
    assert_eq!(get(mp, "/").status, 404);
    assert_eq!(get(mp, "/metricsx").status, 404);
    assert_eq!(get(mp, "/healthz/x").status, 404);
    let post = http(mp, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n").expect("POST");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("Allow"), Some("GET, HEAD"));
    assert_eq!(
        http(mp, b"DELETE /healthz HTTP/1.1\r\n\r\n")
            .expect("DELETE")
            .status,
        405
    );
    let head = http(mp, b"HEAD /healthz HTTP/1.1\r\n\r\n").expect("HEAD");
    assert_eq!((head.status, head.body.as_str()), (200, ""));
    assert_eq!(head.header("Content-Length"), Some("3"));
    // HTTP/1.0 and bare LF line ends are read too.
    assert_eq!(
        http(mp, b"GET /healthz HTTP/1.0\n\n").expect("1.0").status,
        200
    );
    // CONFIG reports the port, and it cannot change at run time.
    let mut c = s.raw();
    let got = c.cmd(&["CONFIG", "GET", "metrics-port"]);
    assert!(String::from_utf8_lossy(&got).contains(&mp.to_string()));
    let set = c.cmd(&["CONFIG", "SET", "metrics-port", "1234"]);
    assert!(
        set.starts_with(b"-ERR CONFIG SET failed"),
        "{:?}",
        String::from_utf8_lossy(&set)
    );
    // The endpoint listens on its port beside Redis's.
    let ports = listening_ports(s.pid());
    assert!(ports.contains(&s.port) && ports.contains(&mp), "{ports:?}");
}

/// Garbage, oversized and stalled requests get an error or a close; the endpoint and the
/// Redis listeners keep serving.
fn hostile_requests(b: Backend) {
    let (s, mp) = start_with_metrics(b, &[]);
    // A client that connects and sends nothing does not hold up others.
    let mut stalled = TcpStream::connect(("127.0.0.1", mp)).expect("connect");
    stalled.write_all(b"GET /metr").expect("partial");
    let started = Instant::now();
    assert_eq!(get(mp, "/healthz").status, 200);
    assert!(started.elapsed() < Duration::from_secs(3));
    // Garbage.
    for junk in [
        &b"\x00\x01\x02garbage\r\n\r\n"[..],
        b"GET\r\n\r\n",
        b"GET /metrics HTTP/9.9\r\n\r\n",
        b"GET /metrics HTTP/1.1\r\nno-colon-header\r\n\r\n",
        b"\xff\xfe\xfd /metrics HTTP/1.1\r\n\r\n",
        b"*1\r\n$4\r\nPING\r\n\r\n",
    ] {
        let r = http(mp, junk).expect("an answer");
        assert_eq!(r.status, 400, "{:?}", String::from_utf8_lossy(junk));
    }
    // A head past the 8 KiB limit: 431 or a reset, never a hang or a crash.
    let mut big = b"GET /metrics HTTP/1.1\r\n".to_vec();
    while big.len() < 64 << 10 {
        big.extend_from_slice(
            b"X-Padding: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n",
        );
    }
    let mut conn = TcpStream::connect(("127.0.0.1", mp)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = conn.write_all(&big);
    let mut answer = Vec::new();
    match conn.read_to_end(&mut answer) {
        Ok(_) => {
            let text = String::from_utf8_lossy(&answer);
            assert!(
                text.is_empty() || text.starts_with("HTTP/1.1 431"),
                "{text}"
            );
        }
        Err(e) => assert!(
            matches!(e.kind(), std::io::ErrorKind::ConnectionReset),
            "oversized request: {e}"
        ),
    }
    // A client that closes half way through its head.
    let mut half = TcpStream::connect(("127.0.0.1", mp)).expect("connect");
    half.write_all(b"GET /metrics HTTP/1.1\r\nHost:").unwrap();
    drop(half);
    // The stalled client is closed once its deadline passes.
    stalled
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = stalled.read_to_end(&mut rest);
    assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest));
    // Everything still serves.
    assert_eq!(get(mp, "/healthz").status, 200);
    assert_eq!(value(&scrape(mp), "redis_up", &[]), 1.0);
    assert_eq!(s.raw().cmd(&["PING"]), b"+PONG\r\n");
}

/// Port 0 (the default): nothing but Redis's port listens.
fn port_zero_serves_nothing(b: Backend) {
    let s = Server::start(b, &["--metrics-port", "0"]);
    let ports = listening_ports(s.pid());
    assert_eq!(ports, BTreeSet::from([s.port]));
    let d = Server::start(b, &[]);
    assert_eq!(listening_ports(d.pid()), BTreeSet::from([d.port]));
    let got = d.raw().cmd(&["CONFIG", "GET", "metrics-port"]);
    assert_eq!(got, b"*2\r\n$12\r\nmetrics-port\r\n$1\r\n0\r\n");
}

backend_tests!(
    scrape_reports_what_ran,
    openmetrics_on_request,
    http_routes,
    hostile_requests,
    port_zero_serves_nothing,
);

/// A metrics port another process holds stops start-up with a message naming it.
#[test]
fn a_taken_metrics_port_fails_start_up() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().unwrap().port().to_string();
    let dir = tempfile::tempdir().expect("tempdir");
    let log = common::start_refused(dir.path(), &["--metrics-port", &port]);
    assert!(log.contains("metrics endpoint"), "{log}");
}

struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// While the journal loads at start-up, /healthz says 503 and /metrics reports loading; both
/// turn to the running server's once loaded.
#[test]
fn healthz_is_503_while_loading() {
    let data = tempfile::tempdir().expect("tempdir");
    let dir = data.path().to_str().unwrap().to_string();
    let mut s = Server::start(Backend::Epoll, &["--appendonly", "yes", "--dir", &dir]);
    let mut c = s.raw();
    common::set_pipelined(&mut c, 4000);
    drop(c);
    assert!(s.terminate().success());
    // Redis's testing knob slows loading: 500 us per record, about a second here.
    let conf = data.path().join("slow.conf");
    std::fs::write(&conf, "key-load-delay 500\n").expect("config");
    let (port, mp) = (common::free_port(), common::free_port());
    let _server = Running(
        Command::new(env!("CARGO_BIN_EXE_damselfly"))
            .arg(&conf)
            .args([
                "--port",
                &port.to_string(),
                "--metrics-port",
                &mp.to_string(),
            ])
            .args([
                "--threads",
                "2",
                "--loglevel",
                "warning",
                "--appendonly",
                "yes",
            ])
            .args(["--dir", &dir])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn damselfly"),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let (mut saw_503, mut saw_loading_scrape) = (false, false);
    loop {
        assert!(Instant::now() < deadline, "never became healthy");
        let Ok(h) = http(mp, b"GET /healthz HTTP/1.1\r\n\r\n") else {
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if h.status == 200 {
            break;
        }
        assert_eq!((h.status, h.body.as_str()), (503, "loading\n"));
        saw_503 = true;
        if !saw_loading_scrape {
            let m = scrape(mp);
            if sample(&m, "redis_connected_clients", &[]).is_none() {
                assert_eq!(value(&m, "redis_loading_dump_file", &[]), 1.0);
                assert_eq!(value(&m, "redis_up", &[]), 1.0);
                saw_loading_scrape = true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        saw_503 && saw_loading_scrape,
        "503 {saw_503}, loading scrape {saw_loading_scrape}"
    );
    let m = scrape(mp);
    assert_eq!(value(&m, "redis_loading_dump_file", &[]), 0.0);
    assert_eq!(value(&m, "redis_db_keys", &[("db", "db0")]), 4000.0);
    let _ = Raw::try_tcp(port).map(|mut c| assert_eq!(c.cmd(&["DBSIZE"]), b":4000\r\n"));
}

/// A shard thread that does not answer (DEBUG SLEEP blocks it) cannot hang a scrape: after
/// the gathering deadline (3 s) it reports `redis_up 0` alone, and the full figures again
/// once the shard is back. Epoll only: the backend plays no part in gathering.
#[test]
fn a_stuck_shard_gives_redis_up_0_not_a_hang() {
    let (s, mp) = start_with_metrics(Backend::Epoll, &[]);
    let mut sleeper = s.raw();
    sleeper.send(&common::encode(&["DEBUG", "SLEEP", "6"]));
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    let m = scrape(mp);
    let took = started.elapsed();
    assert_eq!(value(&m, "redis_up", &[]), 0.0);
    assert_eq!(sample(&m, "redis_connected_clients", &[]), None);
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    // /healthz does not gather: it answers at once.
    let started = Instant::now();
    assert_eq!(get(mp, "/healthz").status, 200);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(sleeper.reply(), b"+OK\r\n");
    assert_eq!(value(&scrape(mp), "redis_up", &[]), 1.0);
}
