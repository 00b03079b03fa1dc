//! Client-side caching compared with Debian's redis-server (Redis 7.0): CLIENT TRACKING's
//! options and errors, CLIENT CACHING, GETREDIR and TRACKINGINFO byte for byte; then the
//! invalidation messages of the default (table) mode, OPTIN and OPTOUT, BCAST with and
//! without prefixes, NOLOOP, redirection to RESP2 and RESP3 clients and its breaking, flushes,
//! expiry, scripts and transactions, the table's size limit; CLIENT LIST's flags and the INFO
//! counters; tracking turned off by CLIENT TRACKING OFF and RESET.
//!
//! Damselfly sends an invalidation from the shard that changed the key, so it may reach the
//! client a little after Redis's would. A client's invalidations are therefore read with a
//! deadline until the expected ones have arrived, and compared as the multiset of keys it
//! received (how keys are grouped into messages is left open); a PING round trip and a short
//! wait then check that nothing more comes. Every scenario runs on Redis first, with the same
//! expectations, so a wrong expectation fails on `redis` rather than on `damselfly`.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::diff::{parse, Node};
use common::{encode, Backend, Raw, Server};

/// How long expected invalidations may take to arrive.
const ARRIVAL: Duration = Duration::from_secs(5);

/// How long a Damselfly client must stay silent, after a PING round trip, for "nothing more
/// comes". Redis queues a command's invalidations before it reads the next command, so
/// there the PING round trip is enough.
const QUIET: Duration = Duration::from_millis(100);

/// The read timeout between waits.
const LONG: Duration = Duration::from_secs(10);

/// The two servers every scenario runs on, Redis first.
fn servers(backend: Backend, threads: usize) -> [(&'static str, Server); 2] {
    [
        ("redis", Server::redis()),
        ("damselfly", Server::start_with(backend, threads, &[])),
    ]
}

/// One item of an invalidation message.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Event {
    /// `invalidate` naming this key.
    Key(String),
    /// `invalidate` with a null: every key (FLUSHALL, FLUSHDB).
    All,
    /// `tracking-redir-broken` with the id of the redirection client that went away.
    RedirBroken(i64),
}

fn keys(names: &[&str]) -> Vec<Event> {
    names.iter().map(|k| Event::Key(k.to_string())).collect()
}

/// The text of a bulk string.
fn text(n: &Node) -> String {
    String::from_utf8_lossy(&n.body[..n.body.len().saturating_sub(2)]).into_owned()
}

/// The value of an integer reply.
fn int_of(n: &Node) -> i64 {
    std::str::from_utf8(&n.head[1..n.head.len().saturating_sub(2)])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an integer: {n:?}"))
}

/// The events of an invalidation frame: a RESP3 push `>2 invalidate <keys | null>` or
/// `>2 tracking-redir-broken <id>`, or a RESP2 `message` on `__redis__:invalidate`
/// (received by a redirection client). None for any other frame (a reply).
fn decode(frame: &[u8]) -> Option<Vec<Event>> {
    let n = parse(frame);
    let payload = match (n.kind(), n.items.len()) {
        (b'>', 2) => match text(&n.items[0]).as_str() {
            "invalidate" => &n.items[1],
            "tracking-redir-broken" => return Some(vec![Event::RedirBroken(int_of(&n.items[1]))]),
            _ => return None,
        },
        (b'*', 3)
            if text(&n.items[0]) == "message" && text(&n.items[1]) == "__redis__:invalidate" =>
        {
            &n.items[2]
        }
        _ => return None,
    };
    if payload.head == b"_\r\n" || payload.head == b"$-1\r\n" {
        return Some(vec![Event::All]);
    }
    assert_eq!(
        payload.kind(),
        b'*',
        "an invalidation carries an array of keys or a null: {:?}",
        String::from_utf8_lossy(frame)
    );
    Some(payload.items.iter().map(|k| Event::Key(text(k))).collect())
}

/// A connection that sets its invalidation messages aside as they arrive, between replies
/// or while waiting for them.
struct Client {
    raw: Raw,
    events: Vec<Event>,
    /// Which server, for failure messages.
    server: &'static str,
    /// How long to wait for stragglers after a PING (`QUIET`, or zero on Redis).
    settle: Duration,
}

impl Client {
    /// A new connection; `resp3` switches it to RESP3 (HELLO 3), where pushes can arrive.
    fn new(server: &Server, name: &'static str, resp3: bool) -> Client {
        let raw = server.raw();
        raw.set_read_timeout(LONG);
        let mut c = Client {
            raw,
            events: Vec::new(),
            server: name,
            settle: if name == "redis" {
                Duration::ZERO
            } else {
                QUIET
            },
        };
        if resp3 {
            let hello = c.cmd(&["HELLO", "3"]);
            assert_eq!(hello.first(), Some(&b'%'), "{name}: HELLO 3");
        }
        c
    }

    /// Sends a command and returns its reply; invalidations read before it are set aside.
    fn cmd<S: AsRef<[u8]>>(&mut self, args: &[S]) -> Vec<u8> {
        self.raw.send(&encode(args));
        self.reply()
    }

    fn reply(&mut self) -> Vec<u8> {
        loop {
            let frame = self.raw.reply();
            match decode(&frame) {
                Some(events) => self.events.extend(events),
                None => return frame,
            }
        }
    }

    /// Runs a command that must answer +OK.
    fn ok(&mut self, args: &[&str]) {
        let reply = self.cmd(args);
        assert_eq!(
            String::from_utf8_lossy(&reply),
            "+OK\r\n",
            "{}: {args:?}",
            self.server
        );
    }

    /// This connection's id (CLIENT ID).
    fn id(&mut self) -> i64 {
        int_of(&parse(&self.cmd(&["CLIENT", "ID"])))
    }

    /// An INFO field as a number.
    fn info(&mut self, section: &str, field: &str) -> i64 {
        let reply = self.cmd(&["INFO", section]);
        let text = String::from_utf8_lossy(&reply).into_owned();
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{}: INFO {section} has no {field}", self.server))
    }

    /// Reads one frame within `limit`, setting an invalidation aside; false when nothing came.
    /// Any other frame fails the test: nothing but invalidations is pending here.
    fn read_event(&mut self, limit: Duration) -> bool {
        self.raw
            .set_read_timeout(limit.max(Duration::from_millis(1)));
        let read = self.raw.try_reply();
        self.raw.set_read_timeout(LONG);
        match read {
            Ok(frame) => match decode(&frame) {
                Some(events) => {
                    self.events.extend(events);
                    true
                }
                None => panic!(
                    "{}: an unexpected frame {:?}",
                    self.server,
                    String::from_utf8_lossy(&frame)
                ),
            },
            Err(_) => false,
        }
    }

    /// Waits until the events set aside include `want` (as a multiset) or the deadline
    /// passes, then for stragglers: a PING round trip, and with `settle` a short silence.
    /// Returns every event received since the last call, sorted. (Without `settle` a late
    /// extra event still shows, in the next step's comparison.)
    fn take_events(&mut self, want: &[Event], settle: bool) -> Vec<Event> {
        let deadline = Instant::now() + ARRIVAL;
        while !includes(&self.events, want) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || !self.read_event(left) {
                break;
            }
        }
        let pong = self.cmd(&["PING"]);
        assert!(
            pong == b"+PONG\r\n" || pong.starts_with(b"*2\r\n$4\r\npong\r\n"),
            "{}: PING answered {:?}",
            self.server,
            String::from_utf8_lossy(&pong)
        );
        while settle && !self.settle.is_zero() && self.read_event(self.settle) {}
        let mut got = std::mem::take(&mut self.events);
        got.sort();
        got
    }

    /// Asserts that exactly `want` (in any order and grouping) arrives after `step`.
    fn expect(&mut self, step: &str, want: &[Event]) {
        let got = self.take_events(want, want.is_empty());
        let mut want = want.to_vec();
        want.sort();
        assert_eq!(got, want, "{}: invalidations after {step}", self.server);
    }

    /// Asserts that nothing arrives after `step`.
    fn expect_none(&mut self, step: &str) {
        self.expect(step, &[]);
    }
}

/// True when `have` holds every item of `want`, counting repeats.
fn includes(have: &[Event], want: &[Event]) -> bool {
    let mut counts: BTreeMap<&Event, i64> = BTreeMap::new();
    for e in have {
        *counts.entry(e).or_default() += 1;
    }
    want.iter().all(|e| {
        let n = counts.entry(e).or_default();
        *n -= 1;
        *n >= 0
    })
}

/// Waits until the client `id` is gone from the server's client list.
fn wait_gone(admin: &mut Client, id: i64) {
    let deadline = Instant::now() + ARRIVAL;
    let id = id.to_string();
    loop {
        let list = admin.cmd(&["CLIENT", "LIST", "ID", &id]);
        if !String::from_utf8_lossy(&list).contains(&format!("id={id} ")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{}: client {id} is still listed after disconnecting",
            admin.server
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// `reply` as text with the client id `id` written `<id>` (ids differ between servers).
fn normalised(reply: &[u8], id: i64) -> String {
    String::from_utf8_lossy(reply)
        .replace(&format!(":{id}\r\n"), ":<id>\r\n")
        .replace(&format!("redir={id} "), "redir=<id> ")
}

/// The sequence `tracking_options_and_introspection` runs in each protocol; `{id}` stands
/// for the id of another connection of the same server.
const INTROSPECTION: &[&[&str]] = &[
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKING"],
    &["CLIENT", "TRACKING", "maybe"],
    &["CLIENT", "TRACKING", "on", "BOGUS"],
    &["CLIENT", "TRACKING", "on", "PREFIX"],
    &["CLIENT", "TRACKING", "on", "REDIRECT"],
    &["CLIENT", "TRACKING", "on", "REDIRECT", "x"],
    &["CLIENT", "TRACKING", "on", "REDIRECT", "123456789"],
    &[
        "CLIENT", "TRACKING", "on", "REDIRECT", "{id}", "REDIRECT", "{id}",
    ],
    &["CLIENT", "TRACKING", "on", "PREFIX", "a"],
    &["CLIENT", "TRACKING", "on", "BCAST", "OPTIN"],
    &["CLIENT", "TRACKING", "on", "OPTOUT", "BCAST"],
    &["CLIENT", "TRACKING", "on", "OPTIN", "OPTOUT"],
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "x", "PREFIX", "xy",
    ],
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "xy", "PREFIX", "x",
    ],
    &["CLIENT", "TRACKING", "off", "BCAST"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "CACHING", "YES"],
    &["CLIENT", "CACHING", "NO"],
    &["CLIENT", "CACHING", "maybe"],
    &["CLIENT", "CACHING"],
    &["CLIENT", "GETREDIR", "x"],
    &["CLIENT", "TRACKINGINFO", "x"],
    // On, default mode.
    &["CLIENT", "tracking", "ON"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "CACHING", "YES"],
    &["CLIENT", "CACHING", "NO"],
    &["CLIENT", "CACHING", "maybe"],
    &["CLIENT", "TRACKING", "on", "BCAST"],
    // OPTIN: CACHING YES shows until the next command (CLIENT commands aside).
    &["CLIENT", "TRACKING", "on", "OPTIN"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "OPTOUT"],
    &["CLIENT", "CACHING", "NO"],
    &["CLIENT", "CACHING", "yes"],
    &["CLIENT", "TRACKINGINFO"],
    &["PING"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "off"],
    // OPTOUT with NOLOOP and a redirection.
    &[
        "CLIENT", "TRACKING", "on", "OPTOUT", "NOLOOP", "REDIRECT", "{id}",
    ],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "CACHING", "YES"],
    &["CLIENT", "CACHING", "no"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "OPTIN"],
    // ON again replaces the options and the redirection.
    &["CLIENT", "TRACKING", "on"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKING", "off"],
    // BCAST: prefixes listed in order, added to by ON again, never overlapping.
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p", "PREFIX", "b", "NOLOOP",
    ],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "pp"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", ""],
    &["CLIENT", "TRACKING", "on"],
    &["CLIENT", "TRACKING", "on", "OPTIN"],
    &["CLIENT", "CACHING", "YES"],
    &[
        "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "z", "REDIRECT", "{id}",
    ],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
    &["CLIENT", "TRACKING", "off"],
    // BCAST without a prefix: the empty prefix, which every other one overlaps.
    &["CLIENT", "TRACKING", "on", "BCAST"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "q"],
    &["CLIENT", "TRACKING", "OFF"],
    &["CLIENT", "TRACKINGINFO"],
    &["CLIENT", "GETREDIR"],
];

/// CLIENT TRACKING's errors (syntax, PREFIX without BCAST, BCAST with OPTIN or OPTOUT, OPTIN
/// with OPTOUT, a missing or non-numeric REDIRECT id, switching BCAST or OPTIN/OPTOUT while
/// on, overlapping prefixes), CLIENT CACHING's in each mode, and GETREDIR and TRACKINGINFO in
/// every state (off; on; optin with caching-yes; optout with caching-no, noloop and a
/// redirection; bcast with prefixes; bcast with the empty prefix): byte for byte as Redis
/// answers, in RESP2 and then RESP3, the redirection id aside.
fn tracking_options_and_introspection(backend: Backend) {
    let mut transcripts = Vec::new();
    for (name, server) in servers(backend, 2) {
        let mut target = Client::new(&server, name, false);
        let id = target.id();
        let mut c = Client::new(&server, name, false);
        let mut lines = Vec::new();
        for resp in ["2", "3"] {
            c.cmd(&["HELLO", resp]);
            for cmd in INTROSPECTION {
                let args: Vec<String> = cmd
                    .iter()
                    .map(|a| a.replace("{id}", &id.to_string()))
                    .collect();
                let reply = c.cmd(&args);
                lines.push(format!("RESP{resp} {cmd:?} -> {}", normalised(&reply, id)));
            }
            assert!(c.events.is_empty(), "{name}: {:?}", c.events);
        }
        transcripts.push(lines);
    }
    let (redis, ours) = (&transcripts[0], &transcripts[1]);
    // Sanity: the errors are there to compare.
    assert!(redis.iter().any(|l| l.contains(
        "-ERR Prefix 'pp' overlaps with an existing prefix 'p'. Prefixes for a single client must not overlap."
    )));
    let differences: Vec<String> = redis
        .iter()
        .zip(ours)
        .filter(|(r, o)| r != o)
        .map(|(r, o)| format!("redis:     {r}\ndamselfly: {o}"))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert_eq!(redis.len(), ours.len());
}

/// Default mode over RESP3: keys read by a client with assorted read-only commands (GET, MGET,
/// HGET, EXISTS on missing keys, STRLEN, LLEN, SISMEMBER, ZSCORE, GETRANGE, TYPE, TTL) are
/// invalidated when another client writes them (SET, MSET over every shard, HSET, EXPIRE,
/// RENAME, SADD, ZADD, DEL), each once: a second write without a re-read sends nothing, a
/// re-read tracks the key again; keys never read, and writes that change nothing (DEL of a
/// missing key, a refused SET NX, EXPIRE of a missing key) send nothing.
fn default_mode_invalidates_keys_read(backend: Backend, threads: usize) {
    let names: Vec<String> = (0..24).map(|i| format!("key:{i}")).collect();
    let shards: std::collections::BTreeSet<usize> = names
        .iter()
        .map(|k| damselfly_storage::shard_for_key(k.as_bytes(), threads))
        .collect();
    assert_eq!(shards.len(), threads, "the keys must span every shard");
    for (name, server) in servers(backend, threads) {
        let mut w = Client::new(&server, name, false);
        let mut mset: Vec<&str> = vec!["MSET"];
        for k in &names {
            mset.extend([k.as_str(), "v"]);
        }
        w.ok(&mset);
        w.cmd(&["HSET", "h", "f", "v"]);
        w.cmd(&["RPUSH", "l", "a", "b"]);
        w.cmd(&["SADD", "s", "m"]);
        w.cmd(&["ZADD", "z", "1", "m"]);
        w.ok(&["SET", "str", "hello"]);

        let mut r = Client::new(&server, name, true);
        r.ok(&["CLIENT", "TRACKING", "on"]);
        for k in &names[..4] {
            assert_eq!(r.cmd(&["GET", k]), b"$1\r\nv\r\n");
        }
        let mut mget: Vec<&str> = vec!["MGET"];
        mget.extend(names[4..12].iter().map(String::as_str));
        mget.push("missing:0");
        r.cmd(&mget);
        r.cmd(&["HGET", "h", "f"]);
        assert_eq!(r.cmd(&["EXISTS", "missing:1", "missing:2"]), b":0\r\n");
        r.cmd(&["STRLEN", "str"]);
        r.cmd(&["LLEN", "l"]);
        r.cmd(&["SISMEMBER", "s", "m"]);
        r.cmd(&["ZSCORE", "z", "m"]);
        r.cmd(&["GETRANGE", "key:12", "0", "1"]);
        r.cmd(&["TYPE", "key:13"]);
        r.cmd(&["TTL", "missing:3"]);
        r.expect_none("the reads");

        w.ok(&["SET", "key:0", "w"]);
        r.expect("SET key:0", &keys(&["key:0"]));
        // key:1 to key:23 across every shard; 14 and up were never read.
        let mut mset: Vec<&str> = vec!["MSET"];
        for k in &names[1..] {
            mset.extend([k.as_str(), "w"]);
        }
        w.ok(&mset);
        let read: Vec<&str> = names[1..14].iter().map(String::as_str).collect();
        r.expect("MSET key:1 .. key:23", &keys(&read));
        assert_eq!(w.cmd(&["DEL", "key:0", "key:1", "key:20"]), b":3\r\n");
        r.expect_none("DEL of keys already invalidated");
        w.cmd(&["HSET", "h", "f2", "v"]);
        r.expect("HSET h", &keys(&["h"]));
        assert_eq!(w.cmd(&["EXPIRE", "str", "100"]), b":1\r\n");
        r.expect("EXPIRE str", &keys(&["str"]));
        w.ok(&["RENAME", "l", "l2"]);
        r.expect("RENAME l l2", &keys(&["l"]));
        w.cmd(&["SADD", "s", "m2"]);
        w.cmd(&["ZADD", "z", "2", "m"]);
        r.expect("SADD s, ZADD z", &keys(&["s", "z"]));
        assert_eq!(w.cmd(&["DEL", "missing:2"]), b":0\r\n");
        assert_eq!(w.cmd(&["EXPIRE", "missing:3", "10"]), b":0\r\n");
        r.expect_none("DEL and EXPIRE of missing keys");
        w.ok(&["SET", "missing:1", "v"]);
        w.ok(&["SET", "missing:0", "v"]);
        r.expect(
            "SET missing:1, SET missing:0",
            &keys(&["missing:0", "missing:1"]),
        );
        assert_eq!(w.cmd(&["SET", "missing:0", "x", "NX"]), b"$-1\r\n");
        r.expect_none("a refused SET NX");
        w.ok(&["SET", "missing:2", "v"]);
        w.ok(&["SET", "missing:3", "v"]);
        r.expect(
            "SET missing:2, SET missing:3",
            &keys(&["missing:2", "missing:3"]),
        );
        // A re-read tracks the key again.
        r.cmd(&["GET", "key:0"]);
        w.ok(&["SET", "key:0", "again"]);
        r.expect("SET key:0 after a re-read", &keys(&["key:0"]));
        w.ok(&["SET", "key:0", "and again"]);
        r.expect_none("a second SET key:0 without a re-read");

        // A read of keys on several shards (gathered in one place to run) tracks each one.
        let set = |i: usize| format!("set:{i}");
        let home = damselfly_storage::shard_for_key(set(0).as_bytes(), threads);
        let away = (1..64)
            .map(set)
            .find(|k| damselfly_storage::shard_for_key(k.as_bytes(), threads) != home)
            .expect("a set on another shard");
        assert_eq!(w.cmd(&["SADD", &set(0), "a"]), b":1\r\n");
        assert_eq!(w.cmd(&["SADD", &away, "b"]), b":1\r\n");
        assert_eq!(r.cmd(&["SINTERCARD", "2", &set(0), &away]), b":0\r\n");
        r.expect_none("SINTERCARD's read");
        assert_eq!(w.cmd(&["SADD", &away, "c"]), b":1\r\n");
        r.expect("SADD to the other shard's set", &keys(&[away.as_str()]));
        assert_eq!(w.cmd(&["SADD", &set(0), "d"]), b":1\r\n");
        r.expect("SADD to the first set", &keys(&["set:0"]));
    }
}

/// Redis's table of tracked keys ignores databases: a write to the same key name in another
/// database invalidates it, whichever database the reader and the writer use.
fn writes_in_other_databases_invalidate(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut r = Client::new(&server, name, true);
        r.ok(&["CLIENT", "TRACKING", "on"]);
        r.cmd(&["GET", "k"]);
        r.ok(&["SELECT", "2"]);
        r.cmd(&["GET", "k2"]);
        let mut w = Client::new(&server, name, false);
        w.ok(&["SELECT", "1"]);
        w.ok(&["SET", "k", "v"]);
        r.expect("SET k in db 1 (read in db 0)", &keys(&["k"]));
        w.ok(&["SELECT", "0"]);
        w.ok(&["SET", "k2", "v"]);
        r.expect("SET k2 in db 0 (read in db 2)", &keys(&["k2"]));
    }
}

/// A client's own write invalidates the keys it read, the message coming after the write's
/// reply; with NOLOOP its own writes send nothing (and the key is no longer tracked: a later
/// write by another client sends nothing either), while other clients' writes still do.
fn own_writes_and_noloop(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut c = Client::new(&server, name, true);
        let mut w = Client::new(&server, name, false);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        c.cmd(&["GET", "a"]);
        c.raw.send(&encode(&["SET", "a", "1"]));
        assert_eq!(
            String::from_utf8_lossy(&c.raw.reply()),
            "+OK\r\n",
            "{name}: the write's reply comes before its own invalidation"
        );
        c.expect("its own SET a", &keys(&["a"]));

        c.ok(&["CLIENT", "TRACKING", "on", "NOLOOP"]);
        c.cmd(&["GET", "b"]);
        c.cmd(&["GET", "c"]);
        c.ok(&["SET", "b", "1"]);
        c.expect_none("its own SET b with NOLOOP");
        w.ok(&["SET", "b", "2"]);
        c.expect_none("another client's SET b after its own");
        w.ok(&["SET", "c", "2"]);
        c.expect("another client's SET c with NOLOOP", &keys(&["c"]));
        c.cmd(&["GET", "b"]);
        w.ok(&["SET", "b", "3"]);
        c.expect("another client's SET b after a re-read", &keys(&["b"]));
    }
}

/// OPTIN tracks only what the command right after CLIENT CACHING YES reads (a whole MULTI
/// when CACHING YES comes before it); OPTOUT tracks everything but the command (or
/// transaction) right after CLIENT CACHING NO.
fn optin_and_optout(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut w = Client::new(&server, name, false);
        let write_all = |w: &mut Client| {
            let mut mset = vec!["MSET".to_string()];
            for i in 1..=7 {
                mset.extend([format!("k{i}"), "v".to_string()]);
            }
            w.ok(&mset.iter().map(String::as_str).collect::<Vec<_>>());
        };
        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on", "OPTIN"]);
        c.cmd(&["GET", "k1"]);
        c.ok(&["CLIENT", "CACHING", "YES"]);
        c.cmd(&["GET", "k2"]);
        c.cmd(&["GET", "k3"]);
        c.ok(&["CLIENT", "CACHING", "YES"]);
        c.ok(&["MULTI"]);
        c.cmd(&["GET", "k4"]);
        c.cmd(&["MGET", "k5", "k5"]);
        assert_eq!(c.cmd(&["EXEC"]).first(), Some(&b'*'));
        c.cmd(&["GET", "k6"]);
        c.ok(&["MULTI"]);
        c.cmd(&["GET", "k7"]);
        c.cmd(&["EXEC"]);
        write_all(&mut w);
        c.expect("MSET k1 .. k7 (OPTIN)", &keys(&["k2", "k4", "k5"]));

        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on", "OPTOUT"]);
        c.cmd(&["GET", "k1"]);
        c.ok(&["CLIENT", "CACHING", "NO"]);
        c.cmd(&["GET", "k2"]);
        c.cmd(&["GET", "k3"]);
        c.ok(&["CLIENT", "CACHING", "NO"]);
        c.ok(&["MULTI"]);
        c.cmd(&["GET", "k4"]);
        c.cmd(&["GET", "k5"]);
        c.cmd(&["EXEC"]);
        c.ok(&["MULTI"]);
        c.cmd(&["GET", "k6"]);
        c.cmd(&["EXEC"]);
        write_all(&mut w);
        c.expect("MSET k1 .. k7 (OPTOUT)", &keys(&["k1", "k3", "k6"]));
    }
}

/// BCAST: every key written under one of the client's prefixes is sent, read or not, every
/// time; keys outside them are not; BCAST without a prefix gets every key; a client that
/// reads nothing in default mode gets nothing. The client's own writes are sent too (after
/// the reply), unless NOLOOP. Writes spread over every shard all arrive.
fn bcast_prefixes(backend: Backend, threads: usize) {
    for (name, server) in servers(backend, threads) {
        let mut w = Client::new(&server, name, false);
        let mut a = Client::new(&server, name, true);
        a.ok(&[
            "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "user:", "PREFIX", "obj",
        ]);
        let mut all = Client::new(&server, name, true);
        all.ok(&["CLIENT", "TRACKING", "on", "BCAST"]);
        let mut idle = Client::new(&server, name, true);
        idle.ok(&["CLIENT", "TRACKING", "on"]);

        w.ok(&[
            "MSET", "user:1", "a", "user:2", "b", "objx", "c", "other", "d",
        ]);
        a.expect("MSET", &keys(&["objx", "user:1", "user:2"]));
        all.expect("MSET", &keys(&["objx", "other", "user:1", "user:2"]));
        w.ok(&["SET", "user:1", "z"]);
        a.expect("SET user:1 again", &keys(&["user:1"]));
        all.expect("SET user:1 again", &keys(&["user:1"]));

        a.raw.send(&encode(&["SET", "user:9", "x"]));
        assert_eq!(
            String::from_utf8_lossy(&a.raw.reply()),
            "+OK\r\n",
            "{name}: the write's reply comes before its own invalidation"
        );
        a.expect("its own SET user:9", &keys(&["user:9"]));
        all.expect("SET user:9", &keys(&["user:9"]));

        a.ok(&["CLIENT", "TRACKING", "off"]);
        a.ok(&[
            "CLIENT", "TRACKING", "on", "BCAST", "NOLOOP", "PREFIX", "user:",
        ]);
        a.ok(&["SET", "user:9", "y"]);
        a.expect_none("its own SET user:9 with NOLOOP");
        all.expect("SET user:9 (NOLOOP elsewhere)", &keys(&["user:9"]));
        w.cmd(&["DEL", "user:9", "objx"]);
        a.expect("DEL user:9 objx", &keys(&["user:9"]));
        all.expect("DEL user:9 objx", &keys(&["objx", "user:9"]));

        let many: Vec<String> = (0..40).map(|i| format!("user:{i}:x")).collect();
        let mut mset = vec!["MSET"];
        for k in &many {
            mset.extend([k.as_str(), "v"]);
        }
        mset.extend(["nouser", "v"]);
        w.ok(&mset);
        let want: Vec<&str> = many.iter().map(String::as_str).collect();
        a.expect("MSET of 40 user: keys and nouser", &keys(&want));
        let mut with_nouser = want.clone();
        with_nouser.push("nouser");
        all.expect("MSET of 40 user: keys and nouser", &keys(&with_nouser));
        idle.expect_none("every write (default mode, nothing read)");
    }
}

/// REDIRECT to a RESP2 client subscribed to `__redis__:invalidate`: it receives the keys as
/// `message`s, the tracking client nothing; REDIRECT to a RESP3 client: it receives the
/// `invalidate` push. When the redirection client is gone, a RESP3 tracking client receives
/// `tracking-redir-broken` with its id at each invalidation instead of the keys, and
/// TRACKINGINFO shows `broken_redirect` from then on (compared with Redis byte for byte).
fn redirection(backend: Backend) {
    let mut transcripts = Vec::new();
    for (name, server) in servers(backend, 2) {
        let mut lines = Vec::new();
        let mut w = Client::new(&server, name, false);
        let mut sub = Client::new(&server, name, false);
        let sub_id = sub.id();
        assert_eq!(
            sub.cmd(&["SUBSCRIBE", "__redis__:invalidate"]),
            b"*3\r\n$9\r\nsubscribe\r\n$20\r\n__redis__:invalidate\r\n:1\r\n"
        );
        let mut t2 = Client::new(&server, name, false);
        t2.ok(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id.to_string()]);
        t2.cmd(&["GET", "rk"]);
        w.ok(&["SET", "rk", "1"]);
        sub.expect("SET rk (RESP2 redirection)", &keys(&["rk"]));
        t2.expect_none("SET rk (redirected)");

        let mut target = Client::new(&server, name, true);
        let target_id = target.id();
        let mut t3 = Client::new(&server, name, true);
        t3.ok(&[
            "CLIENT",
            "TRACKING",
            "on",
            "REDIRECT",
            &target_id.to_string(),
        ]);
        t3.cmd(&["GET", "rk2"]);
        w.ok(&["SET", "rk2", "1"]);
        target.expect("SET rk2 (RESP3 redirection)", &keys(&["rk2"]));
        t3.expect_none("SET rk2 (redirected)");

        t3.cmd(&["GET", "rk3"]);
        drop(target);
        wait_gone(&mut w, target_id);
        let info = t3.cmd(&["CLIENT", "TRACKINGINFO"]);
        lines.push(format!("before: {}", normalised(&info, target_id)));
        w.ok(&["SET", "rk3", "1"]);
        t3.expect(
            "SET rk3 (redirection gone)",
            &[Event::RedirBroken(target_id)],
        );
        let info = t3.cmd(&["CLIENT", "TRACKINGINFO"]);
        lines.push(format!("after: {}", normalised(&info, target_id)));
        let redir = t3.cmd(&["CLIENT", "GETREDIR"]);
        lines.push(format!("getredir: {}", normalised(&redir, target_id)));
        t3.cmd(&["GET", "rk3"]);
        w.ok(&["SET", "rk3", "2"]);
        t3.expect("SET rk3 again", &[Event::RedirBroken(target_id)]);
        transcripts.push(lines);
    }
    assert_eq!(transcripts[1], transcripts[0]);
    assert!(transcripts[0][1].contains("broken_redirect"));
}

/// FLUSHALL and FLUSHDB (of any database, even an empty one) invalidate everything: every
/// tracking client (default mode, BCAST, one that read nothing) gets `invalidate` with a
/// null, a RESP2 redirection client a `message` with a null bulk; a client not tracking gets
/// nothing. The flusher's own message comes after its reply. Keys read before a flush are
/// no longer tracked after it.
fn flushes_invalidate_everything(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut w = Client::new(&server, name, false);
        let mut a = Client::new(&server, name, true);
        a.ok(&["CLIENT", "TRACKING", "on"]);
        a.cmd(&["GET", "k"]);
        let mut b = Client::new(&server, name, true);
        b.ok(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "zz"]);
        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        let mut sub = Client::new(&server, name, false);
        let sub_id = sub.id().to_string();
        sub.cmd(&["SUBSCRIBE", "__redis__:invalidate"]);
        let mut t = Client::new(&server, name, false);
        t.ok(&["CLIENT", "TRACKING", "on", "REDIRECT", &sub_id]);
        let mut off = Client::new(&server, name, true);
        off.cmd(&["GET", "k"]);
        w.ok(&["SET", "k", "v"]);
        a.expect("SET k", &keys(&["k"]));
        a.cmd(&["GET", "k"]);

        w.ok(&["FLUSHALL"]);
        for x in [&mut a, &mut b, &mut c, &mut sub] {
            x.expect("FLUSHALL", &[Event::All]);
        }
        off.expect_none("FLUSHALL (not tracking)");
        w.ok(&["SET", "k", "v"]);
        a.expect_none("SET k after FLUSHALL");

        w.ok(&["SELECT", "3"]);
        w.ok(&["FLUSHDB"]);
        for x in [&mut a, &mut b, &mut c, &mut sub] {
            x.expect("FLUSHDB of an empty db 3", &[Event::All]);
        }
        a.raw.send(&encode(&["FLUSHDB"]));
        assert_eq!(
            String::from_utf8_lossy(&a.raw.reply()),
            "+OK\r\n",
            "{name}: FLUSHDB's reply comes before its own invalidation"
        );
        for x in [&mut a, &mut b, &mut c, &mut sub] {
            x.expect("its own FLUSHDB", &[Event::All]);
        }
        t.expect_none("the flushes (redirected)");
    }
}

/// A tracked key that expires (the active expiry, nobody touching it) is invalidated.
fn expired_keys_are_invalidated(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut w = Client::new(&server, name, false);
        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        w.ok(&["SET", "later", "v", "EX", "1000"]);
        // A read that comes too late (a busy machine) finds nothing and is tried again.
        let soon = (0..5)
            .map(|i| format!("soon:{i}"))
            .find(|k| {
                w.ok(&["SET", k, "v", "PX", "200"]);
                c.cmd(&["MGET", k, "later"]) == b"*2\r\n$1\r\nv\r\n$1\r\nv\r\n"
            })
            .expect("a read before the deadline");
        c.expect("the expiry of a key read", &keys(&[&soon]));
    }
}

/// Keys a tracking client's script reads are tracked for it; writes made by another client's
/// script or transaction invalidate.
fn scripts_and_transactions(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut w = Client::new(&server, name, false);
        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        w.ok(&["SET", "sk", "v"]);
        assert_eq!(
            c.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "sk"]),
            b"$1\r\nv\r\n"
        );
        c.expect_none("the script's read");
        w.ok(&["SET", "sk", "w"]);
        c.expect("SET sk", &keys(&["sk"]));

        c.cmd(&["GET", "w1"]);
        c.cmd(&["GET", "w2"]);
        c.cmd(&["GET", "w3"]);
        w.cmd(&["EVAL", "return redis.call('set', KEYS[1], 'x')", "1", "w1"]);
        c.expect("a script's SET w1", &keys(&["w1"]));
        w.ok(&["MULTI"]);
        w.cmd(&["SET", "w2", "x"]);
        w.cmd(&["INCR", "w3"]);
        w.cmd(&["SET", "w4", "x"]);
        assert_eq!(w.cmd(&["EXEC"]), b"*3\r\n+OK\r\n:1\r\n+OK\r\n");
        c.expect("a transaction's SET w2, INCR w3", &keys(&["w2", "w3"]));
    }
}

/// tracking-table-max-keys: CONFIG GET and SET round-trip as in Redis; with a limit of 10,
/// reading 50 keys makes the server drop tracked keys until at most 10 are left
/// (`tracking_total_keys`), invalidating each one it drops; a write of all 50 then
/// invalidates the rest: every key exactly once in all.
fn tracking_table_max_keys(backend: Backend) {
    let mut config = Vec::new();
    for (name, server) in servers(backend, 3) {
        let mut admin = Client::new(&server, name, false);
        let get = ["CONFIG", "GET", "tracking-table-max-keys"];
        config.push(admin.cmd(&get));
        admin.ok(&["CONFIG", "SET", "tracking-table-max-keys", "10"]);
        config.push(admin.cmd(&get));

        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        let names: Vec<String> = (0..50).map(|i| format!("m:{i}")).collect();
        for k in &names {
            c.cmd(&["GET", k]);
        }
        let deadline = Instant::now() + ARRIVAL;
        loop {
            let tracked = c.info("stats", "tracking_total_keys");
            if tracked <= 10 && c.events.len() >= 40 {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: {tracked} keys still tracked, {} dropped",
                c.events.len()
            );
            c.read_event(Duration::from_millis(10));
        }
        assert!(
            c.events.iter().all(|e| matches!(e, Event::Key(_))),
            "{name}: {:?}",
            c.events
        );
        let mut mset = vec!["MSET"];
        for k in &names {
            mset.extend([k.as_str(), "v"]);
        }
        admin.ok(&mset);
        let all: Vec<&str> = names.iter().map(String::as_str).collect();
        c.expect("dropping keys, then MSET of all 50", &keys(&all));
    }
    assert_eq!(config[2..], config[..2]);
    assert_eq!(
        String::from_utf8_lossy(&config[0]),
        "*2\r\n$23\r\ntracking-table-max-keys\r\n$7\r\n1000000\r\n"
    );
}

/// INFO's counters as Redis keeps them: `tracking_clients` (every mode), and in stats
/// `tracking_total_keys` (keys tracked), `tracking_total_items` (key and client pairs) and
/// `tracking_total_prefixes` (BCAST prefixes), through reads, an invalidation and clients
/// turning tracking off or leaving.
fn info_counters(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut admin = Client::new(&server, name, false);
        // -1 leaves a counter unchecked.
        let counters = |admin: &mut Client, step: &str, want: [i64; 4]| {
            let deadline = Instant::now() + ARRIVAL;
            loop {
                let now = [
                    admin.info("clients", "tracking_clients"),
                    admin.info("stats", "tracking_total_keys"),
                    admin.info("stats", "tracking_total_items"),
                    admin.info("stats", "tracking_total_prefixes"),
                ];
                if now.iter().zip(want).all(|(n, w)| w == -1 || *n == w) {
                    return;
                }
                assert!(
                    Instant::now() < deadline,
                    "{name}: after {step}: clients, keys, items, prefixes are {now:?}, want {want:?}"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        };
        counters(&mut admin, "start", [0, 0, 0, 0]);
        let mut a = Client::new(&server, name, true);
        a.ok(&["CLIENT", "TRACKING", "on"]);
        let mut a2 = Client::new(&server, name, false);
        a2.ok(&["CLIENT", "TRACKING", "on", "OPTOUT"]);
        let mut b = Client::new(&server, name, false);
        b.ok(&[
            "CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "x", "PREFIX", "y",
        ]);
        counters(&mut admin, "three clients on", [3, 0, 0, 2]);
        a.cmd(&["GET", "shared"]);
        a.cmd(&["MGET", "solo", "shared"]);
        a2.cmd(&["GET", "shared"]);
        counters(&mut admin, "reads", [3, 2, 3, 2]);
        admin.ok(&["SET", "shared", "v"]);
        a.expect("SET shared", &keys(&["shared"]));
        counters(&mut admin, "SET shared", [3, 1, 1, 2]);
        b.ok(&["CLIENT", "TRACKING", "off"]);
        counters(&mut admin, "BCAST off", [2, 1, 1, 0]);
        drop(a2);
        assert_eq!(a.cmd(&["RESET"]), b"+RESET\r\n");
        // (Redis leaves the keys of clients that stopped tracking in its table until they
        // are written: not checked.)
        counters(&mut admin, "RESET and a disconnection", [0, -1, -1, 0]);
    }
}

/// CLIENT LIST's `flags` and `redir`: `t` and redir=0 when tracking, `tB` for BCAST, the
/// redirection's id, `tR` once an invalidation found the redirection client gone, `N` and
/// redir=-1 when not tracking (ids normalised, compared with Redis).
fn client_list_flags(backend: Backend) {
    let mut transcripts = Vec::new();
    for (name, server) in servers(backend, 2) {
        let mut admin = Client::new(&server, name, false);
        let mut target = Client::new(&server, name, false);
        let target_id = target.id();
        let mut plain = Client::new(&server, name, false);
        let mut on = Client::new(&server, name, true);
        on.ok(&["CLIENT", "TRACKING", "on"]);
        let mut bcast = Client::new(&server, name, false);
        bcast.ok(&["CLIENT", "TRACKING", "on", "BCAST", "PREFIX", "p"]);
        let mut redirected = Client::new(&server, name, false);
        redirected.ok(&[
            "CLIENT",
            "TRACKING",
            "on",
            "REDIRECT",
            &target_id.to_string(),
        ]);
        redirected.cmd(&["GET", "k"]);
        let fields = |admin: &mut Client, c: &mut Client| -> String {
            let id = c.id();
            let line = admin.cmd(&["CLIENT", "LIST", "ID", &id.to_string()]);
            let line = normalised(&line, target_id);
            let pick = |f: &str| {
                line.split_whitespace()
                    .find(|w| w.starts_with(&format!("{f}=")))
                    .unwrap_or("missing")
                    .to_string()
            };
            format!("{} {} {}", pick("flags"), pick("redir"), pick("resp"))
        };
        let mut lines = Vec::new();
        for c in [&mut plain, &mut on, &mut bcast, &mut redirected] {
            lines.push(fields(&mut admin, c));
        }
        drop(target);
        wait_gone(&mut admin, target_id);
        admin.ok(&["SET", "k", "v"]);
        // The broken redirection shows once the invalidation was attempted.
        let deadline = Instant::now() + ARRIVAL;
        let broken = loop {
            let f = fields(&mut admin, &mut redirected);
            if f.contains('R') || Instant::now() > deadline {
                break f;
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        lines.push(broken);
        on.ok(&["CLIENT", "TRACKING", "off"]);
        lines.push(fields(&mut admin, &mut on));
        transcripts.push(lines);
    }
    assert_eq!(transcripts[1], transcripts[0]);
    assert_eq!(transcripts[0][4], "flags=tR redir=<id> resp=2");
}

/// CLIENT TRACKING OFF stops invalidations (TRACKINGINFO says off); RESET turns tracking off
/// too: a client that switches back to RESP3 after it gets nothing for what it reads.
fn off_and_reset(backend: Backend) {
    for (name, server) in servers(backend, 2) {
        let mut w = Client::new(&server, name, false);
        let mut c = Client::new(&server, name, true);
        c.ok(&["CLIENT", "TRACKING", "on"]);
        c.cmd(&["GET", "k1"]);
        c.cmd(&["GET", "k2"]);
        w.ok(&["SET", "k1", "v"]);
        c.expect("SET k1", &keys(&["k1"]));
        c.ok(&["CLIENT", "TRACKING", "off"]);
        c.cmd(&["GET", "k3"]);
        w.ok(&["MSET", "k2", "v", "k3", "v"]);
        c.expect_none("MSET k2 k3 after TRACKING off");

        c.ok(&["CLIENT", "TRACKING", "on", "NOLOOP"]);
        c.cmd(&["GET", "k4"]);
        assert_eq!(c.cmd(&["RESET"]), b"+RESET\r\n");
        assert_eq!(
            String::from_utf8_lossy(&c.cmd(&["CLIENT", "TRACKINGINFO"])),
            "*6\r\n$5\r\nflags\r\n*1\r\n$3\r\noff\r\n$8\r\nredirect\r\n:-1\r\n$8\r\nprefixes\r\n*0\r\n",
            "{name}: TRACKINGINFO after RESET"
        );
        c.cmd(&["HELLO", "3"]);
        c.cmd(&["GET", "k5"]);
        w.ok(&["MSET", "k4", "v", "k5", "v"]);
        c.expect_none("MSET k4 k5 after RESET");
    }
}

thread_count_tests!(default_mode_invalidates_keys_read, bcast_prefixes);
backend_tests!(
    tracking_options_and_introspection,
    writes_in_other_databases_invalidate,
    own_writes_and_noloop,
    optin_and_optout,
    redirection,
    flushes_invalidate_everything,
    expired_keys_are_invalidated,
    scripts_and_transactions,
    tracking_table_max_keys,
    info_counters,
    client_list_flags,
    off_and_reset,
);
