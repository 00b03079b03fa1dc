//! COMMAND against Debian's redis-server: COMMAND INFO of every command Damselfly runs (and of
//! every subcommand of its containers) must equal Redis's reply, with subcommands compared in
//! any order (Redis lists them in hash order); COMMAND LIST must be Redis's list narrowed to
//! what Damselfly runs; GETKEYS and GETKEYSANDFLAGS, the errors and HELP must equal Redis's.

mod common;

use common::diff::{encoded, parse, Node};
use common::{Backend, Raw, Server};

/// Sorts the subcommand arrays (field 10) of COMMAND INFO entries, recursively.
fn sort_subcommands(n: &mut Node) {
    if n.items.len() == 10 && n.items[0].kind() == b'$' {
        let subs = &mut n.items[9];
        for s in &mut subs.items {
            sort_subcommands(s);
        }
        subs.items.sort();
    }
}

fn info(raw: &mut Raw, name: &str) -> Vec<u8> {
    let mut n = parse(&raw.cmd(&["COMMAND", "INFO", name]));
    for entry in &mut n.items {
        sort_subcommands(entry);
    }
    encoded(&n)
}

fn bulk_strings(reply: &[u8]) -> Vec<String> {
    parse(reply)
        .items
        .iter()
        .map(|i| String::from_utf8_lossy(&i.body).trim_end().to_string())
        .collect()
}

const GETKEYS: &[&[&str]] = &[
    &["get", "k"],
    &["set", "k", "v"],
    &["set", "k", "v", "get"],
    &["mset", "a", "1", "b", "2"],
    &["lmove", "a", "b", "left", "right"],
    &["zunionstore", "d", "2", "a", "b", "weights", "1", "2"],
    &["zunionstore", "d", "x", "a"],
    &["eval", "return 1", "2", "k1", "k2", "a"],
    &["eval", "return 1", "0"],
    &["xread", "count", "2", "streams", "s1", "s2", "0", "0"],
    &["xreadgroup", "group", "g", "c", "streams", "s1", "0"],
    &["sort", "k", "by", "w*", "store", "d"],
    &[
        "georadius",
        "k",
        "0",
        "0",
        "1",
        "km",
        "store",
        "d",
        "storedist",
        "e",
    ],
    &["bitfield", "k", "get", "u8", "0"],
    &["bitfield", "k", "set", "u8", "0", "1"],
    &["object", "encoding", "k"],
    &["memory", "usage", "k"],
    &["xinfo", "stream", "k"],
    &["blpop", "a", "b", "0"],
    &["lmpop", "2", "a", "b", "left"],
    &["ping"],
    &["get"],
    &["nosuch", "k"],
    &["client", "kill", "id", "1"],
    &["config", "get", "x"],
    &["command", "info"],
];

fn compare(backend: Backend) {
    if !backend.available() {
        return;
    }
    let redis = Server::redis();
    let ours = Server::start(backend, &[]);
    let mut r = Raw::tcp(redis.port);
    let mut o = Raw::tcp(ours.port);

    let supported = bulk_strings(&o.cmd(&["COMMAND", "LIST"]));
    let all_redis = bulk_strings(&r.cmd(&["COMMAND", "LIST"]));
    assert!(supported.len() > 200, "{}", supported.len());
    for name in &supported {
        assert!(all_redis.contains(name), "{name} is not a Redis command");
        assert_eq!(
            String::from_utf8_lossy(&info(&mut o, name)),
            String::from_utf8_lossy(&info(&mut r, name)),
            "COMMAND INFO {name}"
        );
    }
    let count = |raw: &mut Raw| raw.cmd(&["COMMAND", "COUNT"]);
    let top_level = supported.iter().filter(|n| !n.contains('|')).count();
    assert_eq!(count(&mut o), format!(":{top_level}\r\n").into_bytes());
    // Filters: Redis's answer narrowed to Damselfly's commands.
    for filter in [
        ["ACLCAT", "dangerous"],
        ["PATTERN", "x*"],
        ["PATTERN", "CLIENT|*"],
        ["ACLCAT", "nosuch"],
        ["MODULE", "m"],
    ] {
        let mut want = bulk_strings(&r.cmd(&["COMMAND", "LIST", "FILTERBY", filter[0], filter[1]]));
        want.retain(|n| supported.contains(n));
        want.sort();
        let mut got = bulk_strings(&o.cmd(&["COMMAND", "LIST", "FILTERBY", filter[0], filter[1]]));
        got.sort();
        assert_eq!(got, want, "COMMAND LIST FILTERBY {filter:?}");
    }
    let mut same = |cmd: &[&str]| {
        assert_eq!(
            String::from_utf8_lossy(&o.cmd(cmd)),
            String::from_utf8_lossy(&r.cmd(cmd)),
            "{cmd:?}"
        );
    };
    for request in GETKEYS {
        for sub in ["GETKEYS", "GETKEYSANDFLAGS"] {
            let mut cmd = vec!["COMMAND", sub];
            cmd.extend_from_slice(request);
            same(&cmd);
        }
    }
    for cmd in [
        &["COMMAND", "HELP"][..],
        &["COMMAND", "INFO", "get", "client|kill", "get|x", "nosuch"],
        &["COMMAND", "COUNT", "x"],
        &["COMMAND", "LIST", "FILTERBY", "x", "y"],
        &["COMMAND", "LIST", "x"],
        &["COMMAND", "GETKEYS"],
        &["COMMAND", "NOSUCH"],
    ] {
        same(cmd);
    }
}

#[test]
fn command_matches_redis_epoll() {
    compare(Backend::Epoll);
}

#[test]
fn command_matches_redis_uring() {
    compare(Backend::Uring);
}

/// Every parameter Redis 7.0 has is known to CONFIG GET, and
/// CONFIG HELP, SET errors and GET of unknown names answer as Redis does.
#[test]
fn config_knows_redis_parameters() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut r = Raw::tcp(redis.port);
    let mut o = Raw::tcp(ours.port);
    let names = |raw: &mut Raw| -> Vec<String> {
        bulk_strings(&raw.cmd(&["CONFIG", "GET", "*"]))
            .into_iter()
            .step_by(2)
            .collect()
    };
    let ours_names = names(&mut o);
    let redis_names = names(&mut r);
    let missing: Vec<&String> = redis_names
        .iter()
        .filter(|n| !ours_names.contains(n))
        .collect();
    assert!(missing.is_empty(), "{missing:?}");
    for hidden in ["key-load-delay", "rdb-key-save-delay"] {
        assert!(
            !ours_names.iter().any(|n| n == hidden),
            "{hidden} is hidden"
        );
    }
    for cmd in [
        &["CONFIG", "HELP"][..],
        &["CONFIG", "SET", "maxmemory", "10mb", "nosuch", "1"],
        &["CONFIG", "SET", "replica-priority", "x"],
        &["CONFIG", "SET", "repl-diskless-load", "bogus"],
        &["CONFIG", "SET", "slave-priority", "7"],
        &["CONFIG", "GET", "replica-priority"],
        &["CONFIG", "SET", "supervised", "no"],
        &["CONFIG", "GET", "nosuch"],
        &["CONFIG", "GET", "key-load-delay"],
        &["CONFIG", "GET", "KEY-LOAD-DELA?"],
        &["CONFIG", "GET", "watchdog-period"],
        &["CONFIG", "GET", "use-exit-on-panic"],
    ] {
        assert_eq!(
            String::from_utf8_lossy(&o.cmd(cmd)),
            String::from_utf8_lossy(&r.cmd(cmd)),
            "{cmd:?}"
        );
    }
}

#[test]
fn config_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("d.conf");
    std::fs::write(
        &conf,
        "# kept comment\nmaxmemory 1gb\n\nuser app on >pw ~* +@all\nsome-unknown-directive x\n",
    )
    .unwrap();
    let conf_arg = conf.to_str().unwrap();
    {
        let s = Server::start(Backend::Epoll, &[conf_arg]);
        let mut c = Raw::tcp(s.port);
        assert_eq!(
            c.cmd(&[
                "CONFIG",
                "SET",
                "maxmemory",
                "100mb",
                "maxmemory-policy",
                "allkeys-lru"
            ]),
            b"+OK\r\n"
        );
        assert_eq!(
            c.cmd(&["ACL", "SETUSER", "bob", "on", "nopass", "+get"]),
            b"+OK\r\n"
        );
        assert_eq!(c.cmd(&["CONFIG", "REWRITE"]), b"+OK\r\n");
        let text = std::fs::read_to_string(&conf).unwrap();
        assert!(
            text.starts_with("# kept comment\nmaxmemory 100mb\n\nuser app on #"),
            "{text}"
        );
        assert!(text.contains("# ??? some-unknown-directive x\n"), "{text}");
        let appended = text
            .split("# Generated by CONFIG REWRITE\n")
            .nth(1)
            .unwrap();
        assert!(
            appended.contains("maxmemory-policy allkeys-lru\n"),
            "{text}"
        );
        assert!(
            appended.contains("user bob on nopass resetchannels -@all +get\n"),
            "{text}"
        );
        assert!(
            appended.contains("user default on nopass ~* &* +@all\n"),
            "{text}"
        );
        assert!(!appended.contains("maxmemory 1"), "{text}");
    }
    // The rewritten file starts the next run with the same settings.
    let s = Server::start(Backend::Epoll, &[conf_arg]);
    let mut c = Raw::tcp(s.port);
    assert_eq!(
        c.cmd(&["CONFIG", "GET", "maxmemory-policy"]),
        b"*2\r\n$16\r\nmaxmemory-policy\r\n$11\r\nallkeys-lru\r\n"
    );
    assert_eq!(
        c.cmd(&["ACL", "USERS"]),
        b"*3\r\n$3\r\napp\r\n$3\r\nbob\r\n$7\r\ndefault\r\n"
    );
    // Without a config file, Redis's error.
    let plain = Server::start(Backend::Epoll, &[]);
    assert_eq!(
        Raw::tcp(plain.port).cmd(&["CONFIG", "REWRITE"]),
        b"-ERR The server is running without a config file\r\n"
    );
}

/// COMMAND DOCS equals Redis's for every command Damselfly runs (subcommands in any order).
#[test]
fn command_docs_match_redis() {
    let redis = Server::redis();
    let ours = Server::start(Backend::Epoll, &[]);
    let mut r = Raw::tcp(redis.port);
    let mut o = Raw::tcp(ours.port);
    let docs = |raw: &mut Raw, name: &str| {
        let mut n = parse(&raw.cmd(&["COMMAND", "DOCS", name]));
        sort_doc_maps(&mut n);
        encoded(&n)
    };
    for name in bulk_strings(&o.cmd(&["COMMAND", "LIST"])) {
        assert_eq!(
            String::from_utf8_lossy(&docs(&mut o, &name)),
            String::from_utf8_lossy(&docs(&mut r, &name)),
            "COMMAND DOCS {name}"
        );
    }
    assert_eq!(
        docs(&mut o, "nosuch"),
        docs(&mut r, "nosuch"),
        "unknown names are left out"
    );
    let all = parse(&o.cmd(&["COMMAND", "DOCS"]));
    assert_eq!(all.items.len() / 2, top_level(&mut o));
}

/// The subcommands map of a docs reply, sorted by name (Redis writes it in hash order).
fn sort_doc_maps(n: &mut Node) {
    let mut i = 0;
    while i + 1 < n.items.len() {
        let key = String::from_utf8_lossy(&n.items[i].body)
            .trim_end()
            .to_string();
        if key == "subcommands" {
            let map = &mut n.items[i + 1];
            let mut pairs: Vec<(Node, Node)> = map
                .items
                .chunks(2)
                .map(|c| (c[0].clone(), c[1].clone()))
                .collect();
            pairs.sort();
            map.items = pairs.into_iter().flat_map(|(k, v)| [k, v]).collect();
        }
        i += 1;
    }
    for item in &mut n.items {
        sort_doc_maps(item);
    }
}

fn top_level(raw: &mut Raw) -> usize {
    let reply = String::from_utf8(raw.cmd(&["COMMAND", "COUNT"])).unwrap();
    reply.trim_start_matches(':').trim_end().parse().unwrap()
}
