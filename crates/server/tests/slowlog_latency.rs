//! SLOWLOG, LATENCY and INFO latencystats against Debian's redis-server 7.0: help texts,
//! errors and every reply that does not depend on timing are compared byte for byte; slow
//! log entries by their arguments (trimmed and redacted as Redis keeps them) and client
//! names, not their times, durations or ports; histograms by their structure and counts.
//! Then the slow log and histograms of a two-thread Damselfly, gathered from both threads.

mod common;

use common::diff::{parse, Node};
use common::{Backend, Pair, Raw, Server};

fn text(n: &Node) -> String {
    let b = &n.body;
    String::from_utf8_lossy(&b[..b.len().saturating_sub(2)]).into_owned()
}

fn int(n: &Node) -> i64 {
    let h = &n.head;
    std::str::from_utf8(&h[1..h.len() - 2])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {:?}", String::from_utf8_lossy(h)))
}

/// One SLOWLOG GET entry.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    id: i64,
    time: i64,
    duration: i64,
    argv: Vec<String>,
    peer: String,
    name: String,
}

fn slowlog_get(c: &mut Raw, count: &str) -> Vec<Entry> {
    let reply = parse(&c.cmd(&["SLOWLOG", "GET", count]));
    assert_eq!(reply.kind(), b'*', "{reply:?}");
    reply
        .items
        .iter()
        .map(|e| {
            assert_eq!(e.items.len(), 6, "{e:?}");
            Entry {
                id: int(&e.items[0]),
                time: int(&e.items[1]),
                duration: int(&e.items[2]),
                argv: e.items[3].items.iter().map(text).collect(),
                peer: text(&e.items[4]),
                name: text(&e.items[5]),
            }
        })
        .collect()
}

fn unix_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// What two servers' entries must share: arguments, client name and the peer's address.
fn comparable(entries: &[Entry]) -> Vec<(Vec<String>, String, String)> {
    entries
        .iter()
        .map(|e| {
            let ip = e.peer.rsplit_once(':').map_or("", |p| p.0).to_string();
            (e.argv.clone(), ip, e.name.clone())
        })
        .collect()
}

fn check_entry_invariants(entries: &[Entry]) {
    let now = unix_now();
    for w in entries.windows(2) {
        assert!(w[0].id > w[1].id, "ids must decrease: {entries:?}");
    }
    for e in entries {
        assert!((e.time - now).abs() <= 5, "time {e:?}");
        assert!(e.duration >= 0);
        assert!(e.peer.starts_with("127.0.0.1:"), "{e:?}");
    }
}

#[test]
fn help_errors_and_empty_replies_match_redis() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut p = Pair::connect(&redis, &ours);
    for cmd in [
        &["SLOWLOG", "HELP"][..],
        &["slowlog", "help"],
        &["LATENCY", "HELP"],
        &["SLOWLOG"],
        &["SLOWLOG", "foo"],
        &["SLOWLOG", "HELP", "x"],
        &["SLOWLOG", "GET", "1", "2"],
        &["SLOWLOG", "get", "-2"],
        &["SLOWLOG", "GET", "x"],
        &["SLOWLOG", "GET", "99999999999999999999"],
        &["SLOWLOG", "LEN", "x"],
        &["SLOWLOG", "RESET", "x"],
        &["LATENCY"],
        &["LATENCY", "foo"],
        &["LATENCY", "HISTORY"],
        &["LATENCY", "HISTORY", "a", "b"],
        &["LATENCY", "GRAPH"],
        &["LATENCY", "LATEST", "x"],
        &["LATENCY", "DOCTOR", "x"],
        &["LATENCY", "HELP", "x"],
        &["LATENCY", "GRAPH", "command"],
        &["LATENCY", "LATEST"],
        &["LATENCY", "HISTORY", "command"],
        &["LATENCY", "RESET"],
        &["LATENCY", "RESET", "command", "nosuch"],
        &["LATENCY", "DOCTOR"],
        &["LATENCY", "HISTOGRAM", "nosuchcommand"],
        &["CONFIG", "GET", "slowlog-log-slower-than"],
        &["CONFIG", "GET", "slowlog-max-len"],
        &["CONFIG", "GET", "latency-monitor-threshold"],
        &["CONFIG", "GET", "latency-tracking"],
        &["CONFIG", "GET", "latency-tracking-info-percentiles"],
        &["CONFIG", "SET", "slowlog-log-slower-than", "-2"],
        &["CONFIG", "SET", "slowlog-max-len", "-1"],
        &["CONFIG", "SET", "latency-monitor-threshold", "-1"],
        &["CONFIG", "SET", "latency-tracking", "maybe"],
        &[
            "CONFIG",
            "SET",
            "latency-tracking-info-percentiles",
            "50 101",
        ],
        &["CONFIG", "SET", "latency-tracking-info-percentiles", "abc"],
        &[
            "CONFIG",
            "SET",
            "latency-tracking-info-percentiles",
            "99.90 50.0 0",
        ],
        &["CONFIG", "GET", "latency-tracking-info-percentiles"],
        &["CONFIG", "SET", "latency-tracking-info-percentiles", ""],
        &["CONFIG", "GET", "latency-tracking-info-percentiles"],
        &["CONFIG", "SET", "slowlog-log-slower-than", "-1"],
        &["CONFIG", "GET", "slowlog-log-slower-than"],
    ] {
        p.same(cmd);
    }
    // DOCTOR's report is verbatim text in RESP3.
    p.redis.cmd(&["HELLO", "3"]);
    p.ours.cmd(&["HELLO", "3"]);
    p.same(&["LATENCY", "DOCTOR"]);
    p.same(&["LATENCY", "LATEST"]);
    p.same(&["LATENCY", "HISTOGRAM", "nosuchcommand"]);
}

#[test]
fn slow_log_entries_match_redis() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut p = Pair::connect(&redis, &ours);
    let long = "x".repeat(200);
    let many: Vec<String> = std::iter::once("RPUSH".to_string())
        .chain(std::iter::once("list".to_string()))
        .chain((0..38).map(|i| format!("e{i}")))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    p.same(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    p.same(&["SLOWLOG", "RESET"]);
    p.same(&["SET", "k", "v"]);
    p.same(&["GET", "k"]);
    p.same(&["SET", "long", &long]);
    p.same(&many);
    p.same(&["AUTH", "secret"]);
    p.same(&["AUTH", "someone", "secret"]);
    p.same(&["AUTH", "a", "b", "c"]);
    // HELLO's reply names the server: only its slow log entry is compared.
    p.redis.cmd(&[
        "HELLO",
        "2",
        "AUTH",
        "default",
        "pw",
        "SETNAME",
        "helloname",
    ]);
    p.ours.cmd(&[
        "HELLO",
        "2",
        "AUTH",
        "default",
        "pw",
        "SETNAME",
        "helloname",
    ]);
    p.same(&["CONFIG", "SET", "requirepass", "hunter2", "maxmemory", "0"]);
    p.same(&["CONFIG", "SET", "requirepass", ""]);
    p.same(&["CLIENT", "SETNAME", "tester"]);
    p.same(&["MULTI"]);
    p.same(&["SET", "counter", "1"]);
    p.same(&["INCR", "counter"]);
    p.same(&["EXEC"]);
    p.same(&["SLOWLOG", "LEN"]);
    let theirs = slowlog_get(&mut p.redis, "-1");
    let mine = slowlog_get(&mut p.ours, "-1");
    check_entry_invariants(&mine);
    assert_eq!(comparable(&mine), comparable(&theirs));
    // What the entries hold, spelled out.
    let argv_of = |name: &str| {
        mine.iter()
            .find(|e| e.argv[0].eq_ignore_ascii_case(name))
            .map(|e| e.argv.clone())
            .unwrap_or_else(|| panic!("no {name} entry in {mine:?}"))
    };
    assert_eq!(argv_of("rpush").len(), 32);
    assert_eq!(argv_of("rpush")[31], "... (9 more arguments)");
    assert!(mine.iter().any(
        |e| e.argv.len() == 3 && e.argv[2] == format!("{}... (72 more bytes)", "x".repeat(128))
    ));
    assert!(mine.iter().any(|e| e.argv == ["AUTH", "(redacted)"]));
    assert!(mine
        .iter()
        .any(|e| e.argv == ["AUTH", "(redacted)", "(redacted)"]));
    assert!(mine.iter().any(|e| e.argv
        == [
            "HELLO",
            "2",
            "AUTH",
            "(redacted)",
            "(redacted)",
            "SETNAME",
            "helloname"
        ]));
    assert!(mine.iter().any(|e| e.argv
        == [
            "CONFIG",
            "SET",
            "requirepass",
            "(redacted)",
            "maxmemory",
            "0"
        ]));
    assert!(
        !mine.iter().any(|e| e.argv[0] == "EXEC"),
        "EXEC is not logged"
    );
    assert_eq!(mine[0].argv, ["SLOWLOG", "LEN"]);
    assert_eq!(mine[0].name, "tester");
    // GET with a count, and the entry of the GET before.
    let theirs = slowlog_get(&mut p.redis, "2");
    let mine = slowlog_get(&mut p.ours, "2");
    assert_eq!(comparable(&mine), comparable(&theirs));
    assert_eq!(mine[0].argv, ["SLOWLOG", "GET", "-1"]);
    // slowlog-max-len caps the log; a threshold of -1 stops logging.
    p.same(&["CONFIG", "SET", "slowlog-max-len", "3"]);
    p.same(&["PING"]);
    p.same(&["SLOWLOG", "LEN"]);
    let mine = slowlog_get(&mut p.ours, "-1");
    assert_eq!(mine.len(), 3);
    p.redis.cmd(&["SLOWLOG", "GET", "-1"]);
    p.same(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    p.same(&["SLOWLOG", "RESET"]);
    p.same(&["SET", "k", "v"]);
    p.same(&["SLOWLOG", "LEN"]);
    p.same(&["SLOWLOG", "GET"]);
    // A high threshold logs nothing either.
    p.same(&["CONFIG", "SET", "slowlog-log-slower-than", "10000000"]);
    p.same(&["SET", "k", "v"]);
    p.same(&["SLOWLOG", "LEN"]);
}

/// One command's LATENCY HISTOGRAM: name, calls, (bucket, cumulative count) pairs.
type Histogram = (String, i64, Vec<(i64, i64)>);

/// The histograms of a LATENCY HISTOGRAM reply, in reply order.
fn histograms(c: &mut Raw, names: &[&str]) -> Vec<Histogram> {
    let mut cmd = vec!["LATENCY", "HISTOGRAM"];
    cmd.extend_from_slice(names);
    let reply = parse(&c.cmd(&cmd));
    reply
        .items
        .chunks(2)
        .map(|kv| {
            let body = &kv[1].items;
            assert_eq!(text(&body[0]), "calls");
            assert_eq!(text(&body[2]), "histogram_usec");
            let buckets = body[3]
                .items
                .chunks(2)
                .map(|b| (int(&b[0]), int(&b[1])))
                .collect();
            (text(&kv[0]), int(&body[1]), buckets)
        })
        .collect()
}

fn check_buckets(calls: i64, buckets: &[(i64, i64)]) {
    assert!(!buckets.is_empty());
    for w in buckets.windows(2) {
        assert!(w[0].0 < w[1].0 && w[0].1 < w[1].1, "{buckets:?}");
    }
    // Each bucket is labelled with the highest value (in microseconds) a 2-digit HdrHistogram
    // holds at 1024 ns, 2048 ns, ..., or with the top of its range past the last one.
    let labels: Vec<i64> = (0..20)
        .map(|k| {
            let level = 1024i64 << k;
            (level + level / 128 - 1) / 1000
        })
        .chain([1073741])
        .collect();
    for (b, _) in buckets {
        assert!(labels.contains(b), "{b} in {buckets:?}");
    }
    assert_eq!(buckets.last().unwrap().1, calls);
}

/// The `name` and `p<percentile>` keys of INFO latencystats' line for `cmd`.
fn percentile_keys(c: &mut Raw, cmd: &str) -> Option<Vec<String>> {
    let info = parse(&c.cmd(&["INFO", "latencystats"]));
    let info = text(&info);
    assert!(info.starts_with("# Latencystats\r\n"), "{info:?}");
    let prefix = format!("latency_percentiles_usec_{cmd}:");
    let line = info.lines().find(|l| l.starts_with(&prefix))?;
    let values = &line[prefix.len()..];
    Some(
        values
            .split(',')
            .map(|kv| {
                let (k, v) = kv.split_once('=').expect("key=value");
                let (int, frac) = v.split_once('.').expect("three decimals");
                assert!(int.parse::<u64>().is_ok() && frac.len() == 3, "{line}");
                k.to_string()
            })
            .collect(),
    )
}

#[test]
fn latency_histograms_and_info_match_redis() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut p = Pair::connect(&redis, &ours);
    p.same(&["CONFIG", "RESETSTAT"]);
    p.same(&["LATENCY", "HISTOGRAM", "set", "get"]);
    p.same(&["SET", "a", "1"]);
    p.same(&["GET", "a"]);
    p.same(&["GET", "a"]);
    let theirs = histograms(&mut p.redis, &["nosuch", "set", "GET"]);
    let mine = histograms(&mut p.ours, &["nosuch", "set", "GET"]);
    let shape = |h: &[Histogram]| {
        h.iter()
            .map(|(n, c, _)| (n.clone(), *c))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        shape(&mine),
        vec![("set".to_string(), 1), ("get".to_string(), 2)]
    );
    assert_eq!(shape(&mine), shape(&theirs));
    for (_, calls, buckets) in mine.iter().chain(&theirs) {
        check_buckets(*calls, buckets);
    }
    // All histograms: every command that ran, each once.
    let all = histograms(&mut p.ours, &[]);
    assert!(all.iter().any(|h| h.0 == "set") && all.iter().any(|h| h.0 == "get"));
    let mut names: Vec<&String> = all.iter().map(|h| &h.0).collect();
    names.dedup();
    assert_eq!(names.len(), all.len());
    // INFO latencystats: the same fields as Redis's.
    for cmd in ["set", "get"] {
        let keys = percentile_keys(&mut p.ours, cmd);
        assert_eq!(keys, Some(vec!["p50".into(), "p99".into(), "p99.9".into()]));
        assert_eq!(keys, percentile_keys(&mut p.redis, cmd));
    }
    p.same(&[
        "CONFIG",
        "SET",
        "latency-tracking-info-percentiles",
        "0 12.5 100",
    ]);
    let keys = percentile_keys(&mut p.ours, "get");
    assert_eq!(keys, Some(vec!["p0".into(), "p12.5".into(), "p100".into()]));
    assert_eq!(keys, percentile_keys(&mut p.redis, "get"));
    // INFO all has the section; INFO default does not.
    let all = text(&parse(&p.ours.cmd(&["INFO", "all"])));
    assert!(all.contains("# Latencystats\r\nlatency_percentiles_usec_"));
    let default = text(&parse(&p.ours.cmd(&["INFO"])));
    assert!(!default.contains("Latencystats"));
    // CONFIG RESETSTAT drops the histograms.
    p.same(&["CONFIG", "RESETSTAT"]);
    p.same(&["LATENCY", "HISTOGRAM", "set", "get"]);
    assert_eq!(percentile_keys(&mut p.ours, "get"), None);
    // latency-tracking no: nothing recorded, an empty section.
    p.same(&["CONFIG", "SET", "latency-tracking", "no"]);
    p.same(&["SET", "a", "1"]);
    p.same(&["LATENCY", "HISTOGRAM", "set"]);
    p.same(&["INFO", "latencystats"]);
}

#[test]
fn latency_monitor_records_slow_commands_like_redis() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut p = Pair::connect(&redis, &ours);
    p.same(&["CONFIG", "SET", "latency-monitor-threshold", "20"]);
    // Fast commands stay under the threshold.
    p.same(&["SET", "a", "1"]);
    p.same(&["LATENCY", "LATEST"]);
    p.same(&["DEBUG", "SLEEP", "0.05"]);
    for c in [&mut p.redis, &mut p.ours] {
        let latest = parse(&c.cmd(&["LATENCY", "LATEST"]));
        assert_eq!(latest.items.len(), 1, "{latest:?}");
        let e = &latest.items[0].items;
        assert_eq!(text(&e[0]), "command");
        assert!((int(&e[1]) - unix_now()).abs() <= 5);
        assert!((50..1000).contains(&int(&e[2])), "{e:?}");
        assert_eq!(int(&e[3]), int(&e[2]));
        let history = parse(&c.cmd(&["LATENCY", "HISTORY", "command"]));
        assert_eq!(history.items.len(), 1);
        assert_eq!(int(&history.items[0].items[1]), int(&e[2]));
        let graph = text(&parse(&c.cmd(&["LATENCY", "GRAPH", "command"])));
        let ms = int(&e[2]);
        assert!(
            graph.starts_with(&format!(
                "command - high {ms} ms, low {ms} ms (all time high {ms} ms)\n{}\n",
                "-".repeat(80)
            )),
            "{graph:?}"
        );
        let doctor = text(&parse(&c.cmd(&["LATENCY", "DOCTOR"])));
        assert!(
            doctor.contains(&format!("1. command: 1 latency spikes (average {ms}ms, mean deviation 0ms, period 1.00 sec). Worst all time event {ms}ms.")),
            "{doctor:?}"
        );
        assert!(doctor.contains("- Check your Slow Log"));
        // Case-sensitive names for HISTORY and GRAPH, not for RESET.
        assert_eq!(c.cmd(&["LATENCY", "HISTORY", "COMMAND"]), b"*0\r\n");
    }
    p.same(&["LATENCY", "GRAPH", "COMMAND"]);
    p.same(&["LATENCY", "RESET", "COMMAND", "fast-command"]);
    p.same(&["LATENCY", "LATEST"]);
    p.same(&["LATENCY", "RESET"]);
}

/// Clients on both threads of a two-thread server, keys on both shards: every slow command
/// is in the merged log once, with unique ids, newest first, capped at slowlog-max-len.
#[test]
fn slow_log_merges_every_thread() {
    // Accepted connections are dealt over the threads (with `migrate-connections no` the
    // kernel's choice of accepting thread would stand, and it may pick one thread for all).
    // Six commands per client are far from the streak a move needs.
    let ours = Server::start_with(Backend::Epoll, 2, &[]);
    let mut admin = ours.raw();
    // Open clients until both threads have some (a dealt client arrives a moment later).
    let mut clients: Vec<Raw> = Vec::new();
    for _ in 0..40 {
        clients.push(ours.raw());
        let shards = text(&parse(&admin.cmd(&["INFO", "shards"])));
        let busy = shards
            .lines()
            .filter(|l| l.starts_with("shard") && !l.contains(",clients=0,"))
            .count();
        if busy == 2 && clients.len() >= 4 {
            break;
        }
    }
    let shards = text(&parse(&admin.cmd(&["INFO", "shards"])));
    assert!(
        !shards.contains(",clients=0,"),
        "no clients on some thread: {shards}"
    );
    admin.cmd(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    admin.cmd(&["CONFIG", "SET", "slowlog-max-len", "1000"]);
    admin.cmd(&["CONFIG", "RESETSTAT"]);
    assert_eq!(admin.cmd(&["SLOWLOG", "RESET"]), b"+OK\r\n");
    let per_client = 6;
    for (i, c) in clients.iter_mut().enumerate() {
        assert_eq!(c.cmd(&["CLIENT", "SETNAME", &format!("c{i}")]), b"+OK\r\n");
        for j in 0..per_client {
            // Different keys land on both shards: some run on another thread.
            assert_eq!(c.cmd(&["SET", &format!("key:{i}:{j}"), "v"]), b"+OK\r\n");
        }
    }
    let entries = slowlog_get(&mut admin, "-1");
    check_entry_invariants(&entries);
    let mut ids: Vec<i64> = entries.iter().map(|e| e.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), entries.len(), "ids are unique");
    for (i, _) in clients.iter().enumerate() {
        for j in 0..per_client {
            let key = format!("key:{i}:{j}");
            let found: Vec<&Entry> = entries
                .iter()
                .filter(|e| e.argv.len() == 3 && e.argv[1] == key)
                .collect();
            assert_eq!(found.len(), 1, "SET {key} logged once: {entries:?}");
            assert_eq!(found[0].name, format!("c{i}"));
        }
    }
    // Each client's commands in the order it sent them.
    for (i, _) in clients.iter().enumerate() {
        let keys: Vec<&str> = entries
            .iter()
            .rev()
            .filter(|e| e.name == format!("c{i}") && e.argv[0] == "SET")
            .map(|e| e.argv[1].as_str())
            .collect();
        let expected: Vec<String> = (0..per_client).map(|j| format!("key:{i}:{j}")).collect();
        assert_eq!(keys, expected);
    }
    let logged = clients.len() * (per_client + 1) + 1;
    assert_eq!(entries.len(), logged, "{entries:?}");
    assert_eq!(
        admin.cmd(&["SLOWLOG", "LEN"]),
        format!(":{}\r\n", logged + 1).into_bytes()
    );
    // Histograms from both threads added up.
    let h = histograms(&mut admin, &["set"]);
    assert_eq!(h[0].1, (clients.len() * per_client) as i64);
    // The cap keeps the newest entries of all threads.
    admin.cmd(&["CONFIG", "SET", "slowlog-max-len", "10"]);
    let capped = slowlog_get(&mut admin, "-1");
    assert_eq!(capped.len(), 10);
    assert_eq!(capped[0].argv, ["CONFIG", "SET", "slowlog-max-len", "10"]);
    assert_eq!(capped[1].argv, ["LATENCY", "HISTOGRAM", "set"]);
    assert_eq!(capped[2].argv, ["SLOWLOG", "LEN"]);
    assert_eq!(capped[3].argv, ["SLOWLOG", "GET", "-1"]);
    let newest: Vec<i64> = entries.iter().take(6).map(|e| e.id).collect();
    let kept: Vec<i64> = capped[4..].iter().map(|e| e.id).collect();
    assert_eq!(kept, newest);
    assert_eq!(admin.cmd(&["SLOWLOG", "LEN"]), b":10\r\n");
    // RESET empties every thread's log (the RESET itself is then logged).
    admin.cmd(&["SLOWLOG", "RESET"]);
    assert_eq!(admin.cmd(&["SLOWLOG", "LEN"]), b":1\r\n");
}
