//! Streams against Debian's redis-server 7.0.15, reply for reply, plus a consumer-group soak:
//!
//! - `streams_like_redis`: 22,000 seeded commands over XADD, XLEN, XRANGE, XREVRANGE, XDEL,
//!   XTRIM, XREAD, XSETID, XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM and XINFO, with
//!   every option and Redis's errors (wrong types, bad, zero, partial and too small ids, missing
//!   keys, groups and consumers, BUSYGROUP, NOGROUP, arity, bad counts), on keys on every shard
//!   and two under one hash tag, in RESP2 and RESP3, inside MULTI/EXEC (with DISCARD and
//!   EXECABORT), with XREAD/XREADGROUP BLOCK timing out after a few ms, and under changing
//!   stream-node-max-entries and stream-node-max-bytes (so trimming with `~` meets many node
//!   layouts). Replies are compared byte for byte after normalising what the clock decides,
//!   which is checked rather than left out:
//!   - Ids made by `*` differ between servers. The generator numbers every XADD that may make
//!     one and refers to its id as `$ID<n>` (or to its ms part as `$MS<n>`, as in `$MS<n>-*`);
//!     each server's arguments get the id that server returned. Ids in replies go back to their
//!     `$ID<n>` (looked up per key: two keys can hold the same clock id) before comparison.
//!   - Idle times (XPENDING, XINFO CONSUMERS) and delivery and seen times (XINFO STREAM FULL)
//!     become a class (recent, idle about 10^7 ms, or since the epoch) once checked plausible.
//!     The generator only uses idle thresholds far from every class (0 and 5·10^6 ms), IDLE 0
//!     or 10^7 and TIME 0, 1 or now - 10^7, so no outcome depends on a millisecond.
//!   - A stream holding clock ids has node keys that are clock readings: its `radix-tree-keys`
//!     and `radix-tree-nodes` are checked plausible and normalised. Its node boundaries move
//!     with the size of the ids' deltas when stream-node-max-bytes can cut a node, so such a
//!     stream is then never trimmed with `~` (until deleted). XINFO has no other clock field in
//!     7.0 (`active-time` and `inactive` came in 7.2).
//! - `stream_blocking_like_redis`: XREAD and XREADGROUP blocked until an XADD from another
//!   connection (also on two keys on different shards, in RESP3, and by a MULTI adding
//!   several entries), FIFO service of blocked consumers of one group, NOGROUP for a blocked
//!   reader whose group is destroyed, UNBLOCKED for one whose key is deleted or overwritten,
//!   XREAD staying blocked across DEL, and no blocking inside MULTI: replies compared.
//! - `stream_consumer_group_soak` (Damselfly only): producers on every shard and consumers of
//!   one group on every thread pass `STREAMS_SOAK_ENTRIES` entries (100,000 by default):
//!   each is delivered to exactly one consumer, acked exactly once, and nothing stays pending.
//!
//! Every difference is kept and reported at the end; after one, a PING checks that the server
//! under test is still in step (no extra or missing reply), so the differences after it are real.
//!
//! `STREAMS_DIFF_AGAINST_REDIS=1` puts a second redis-server in Damselfly's place in all three,
//! which shows the normalisation holding between two servers: XADDs and EXECs reach the second
//! one 0 to 2 ms late, so that their ids and idle times do differ.

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::diff::{encoded, parse, Node};
use common::{encode, Backend, Raw, Server};
use damselfly_storage::shard_for_key;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

/// True with `STREAMS_DIFF_AGAINST_REDIS=1`: the server under test is then a second redis-server.
fn against_redis() -> bool {
    std::env::var("STREAMS_DIFF_AGAINST_REDIS").as_deref() == Ok("1")
}

/// The reference redis-server, at `hz 100` so a BLOCK timeout ends within about 10 ms (its
/// default timer ends them only every 100 ms).
fn reference() -> Server {
    let server = Server::redis();
    assert_eq!(
        server.raw().cmd(&["CONFIG", "SET", "hz", "100"]),
        b"+OK\r\n"
    );
    server
}

/// Damselfly with `threads` shards, or another reference under `STREAMS_DIFF_AGAINST_REDIS=1`.
fn under_test(b: Backend, threads: usize) -> Server {
    if against_redis() {
        reference()
    } else {
        Server::start_with(b, threads, &[])
    }
}

/// Milliseconds since the Unix epoch, by the clock both servers read.
fn wall_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Ids from this ms on (September 2001) are taken for clock readings; explicit ids in the
/// generator stay far below it, or far above the clock (`FUTURE_MS`).
const CLOCK_MS: u64 = 1_000_000_000_000;

/// Explicit ids "in the future" (year 2128): above any clock id, the same on both servers.
const FUTURE_MS: u64 = 5_000_000_000_000;

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// `ms-seq` as numbers, for exactly that form.
fn parse_id(text: &[u8]) -> Option<(u64, u64)> {
    let s = std::str::from_utf8(text).ok()?;
    let (ms, seq) = s.split_once('-')?;
    let digits = |p: &str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
    if !digits(ms) || !digits(seq) {
        return None;
    }
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

fn is_clock_id(text: &[u8]) -> bool {
    parse_id(text).is_some_and(|(ms, _)| ms >= CLOCK_MS)
}

/// The text of a bulk or simple string reply.
fn text(n: &Node) -> Option<&[u8]> {
    match n.kind() {
        b'$' if n.body.len() >= 2 => Some(&n.body[..n.body.len() - 2]),
        b'+' => Some(&n.head[1..n.head.len() - 2]),
        _ => None,
    }
}

fn integer(n: &Node) -> Option<i64> {
    if n.kind() != b':' {
        return None;
    }
    show(&n.head[1..n.head.len() - 2]).parse().ok()
}

fn bulk_node(text: &str) -> Node {
    Node {
        head: format!("${}\r\n", text.len()).into_bytes(),
        body: format!("{text}\r\n").into_bytes(),
        items: Vec::new(),
    }
}

/// What a normalised value becomes: a simple string `<token>`.
fn token_node(token: &str) -> Node {
    Node {
        head: format!("+<{token}>\r\n").into_bytes(),
        body: Vec::new(),
        items: Vec::new(),
    }
}

/// The value after `name` in a map reply (a RESP3 map, or RESP2's field/value array).
fn field<'a>(map: &'a Node, name: &str) -> Option<&'a Node> {
    let i = map
        .items
        .iter()
        .step_by(2)
        .position(|k| text(k) == Some(name.as_bytes()))?;
    map.items.get(2 * i + 1)
}

fn field_mut<'a>(map: &'a mut Node, name: &str) -> Option<&'a mut Node> {
    let i = map
        .items
        .iter()
        .step_by(2)
        .position(|k| text(k) == Some(name.as_bytes()))?;
    map.items.get_mut(2 * i + 1)
}

/// One server's clock-made ids: the id each numbered XADD returned there.
#[derive(Default)]
struct AutoIds {
    by_n: HashMap<usize, String>,
    /// (key, clock id) → its number; the latest number when a deleted key reused an id.
    by_key: HashMap<(Vec<u8>, Vec<u8>), usize>,
}

impl AutoIds {
    /// Notes the reply of the XADD numbered `n` on `key`, when it is an id.
    fn record(&mut self, n: usize, key: &str, reply: &Node) {
        let Some(id) = text(reply).filter(|t| reply.kind() == b'$' && parse_id(t).is_some()) else {
            return;
        };
        self.by_n.insert(n, show(id));
        if is_clock_id(id) {
            self.by_key
                .insert((key.as_bytes().to_vec(), id.to_vec()), n);
        }
    }

    /// `arg` with `$ID<n>` replaced by this server's id number `n` (`0-1` when that XADD made
    /// none), `$MS<n>` by its ms part and `$NOWM` by `nowm`.
    fn substitute(&self, arg: &str, nowm: i64) -> String {
        if !arg.contains('$') || arg == "$" {
            return arg.to_string();
        }
        let mut out = String::new();
        let mut rest = arg;
        while let Some(at) = rest.find('$') {
            out.push_str(&rest[..at]);
            let tail = &rest[at + 1..];
            let (ms_only, numbered) = if let Some(t) = tail.strip_prefix("NOWM") {
                out.push_str(&nowm.to_string());
                rest = t;
                continue;
            } else if let Some(t) = tail.strip_prefix("ID") {
                (false, t)
            } else if let Some(t) = tail.strip_prefix("MS") {
                (true, t)
            } else {
                out.push('$');
                rest = tail;
                continue;
            };
            let digits = numbered.bytes().take_while(u8::is_ascii_digit).count();
            let n: usize = numbered[..digits].parse().expect("a placeholder number");
            let id = self.by_n.get(&n).map_or("0-1", String::as_str);
            out.push_str(if ms_only {
                id.split('-').next().unwrap_or("0")
            } else {
                id
            });
            rest = &numbered[digits..];
        }
        out.push_str(rest);
        out
    }

    /// Replaces the clock ids of `key` in `node` by their `$ID<n>`.
    fn rename(&self, key: &[u8], node: &mut Node) {
        if node.kind() == b'$' {
            let n = text(node)
                .filter(|t| is_clock_id(t))
                .and_then(|t| self.by_key.get(&(key.to_vec(), t.to_vec())));
            if let Some(n) = n {
                *node = bulk_node(&format!("$ID{n}"));
            }
        }
        for item in &mut node.items {
            self.rename(key, item);
        }
    }
}

/// Checks the times in replies and turns them into classes both servers must agree on.
struct Clock {
    start: i64,
}

impl Clock {
    fn new() -> Clock {
        Clock { start: wall_ms() }
    }

    /// The class of an idle time: recent (since the test started), about 10^7 ms (IDLE or TIME
    /// set it so), or since the epoch (TIME 0 or 1); anything else is implausible.
    fn class(&self, idle: i64) -> Result<&'static str, String> {
        let now = wall_ms();
        let bound = now - self.start + 2_000;
        if (0..=bound).contains(&idle) {
            Ok("recent")
        } else if (10_000_000..=10_000_000 + bound).contains(&idle) {
            Ok("idle about 1e7 ms")
        } else if (self.start - 2_000..=now + 2_000).contains(&idle) {
            Ok("idle since the epoch")
        } else {
            Err(format!("implausible idle time {idle} ms"))
        }
    }

    /// Replaces the idle time in `n` by its class; a problem goes to `problems`.
    fn idle(&self, n: &mut Node, problems: &mut Vec<String>) {
        self.replace(n, problems, |v| v);
    }

    /// Replaces a ms-since-the-epoch time in `n` by the class of the time since then.
    fn absolute(&self, n: &mut Node, problems: &mut Vec<String>) {
        self.replace(n, problems, |v| wall_ms() - v);
    }

    fn replace(&self, n: &mut Node, problems: &mut Vec<String>, idle_of: impl Fn(i64) -> i64) {
        let Some(v) = integer(n) else {
            problems.push(format!(
                "a time that is no integer: {:?}",
                show(&encoded(n))
            ));
            return;
        };
        match self.class(idle_of(v)) {
            Ok(class) => *n = token_node(class),
            Err(e) => {
                problems.push(format!("{e} (from {v})"));
                *n = token_node("implausible");
            }
        }
    }
}

/// Normalises one server's reply to `args` (as generated): its clock ids become `$ID<n>`, its
/// times their class. Implausible values go to `problems`.
fn normalise(
    args: &[String],
    reply: &mut Node,
    ids: &AutoIds,
    clock: &Clock,
    problems: &mut Vec<String>,
) {
    let arg = |i: usize| args.get(i).map_or(&b""[..], |a| a.as_bytes());
    match args[0].to_ascii_uppercase().as_str() {
        "XREAD" | "XREADGROUP" => {
            // RESP3: a map of key → entries; RESP2: an array of [key, entries].
            let pairs: Vec<&mut [Node]> = if reply.kind() == b'%' {
                reply.items.chunks_mut(2).collect()
            } else {
                reply
                    .items
                    .iter_mut()
                    .map(|s| s.items.as_mut_slice())
                    .collect()
            };
            for pair in pairs {
                if let [key, entries] = pair {
                    let key = text(key).unwrap_or_default().to_vec();
                    ids.rename(&key, entries);
                }
            }
        }
        "XINFO" => {
            ids.rename(arg(2), reply);
            match show(arg(1)).to_ascii_uppercase().as_str() {
                "CONSUMERS" => {
                    for consumer in &mut reply.items {
                        if let Some(idle) = field_mut(consumer, "idle") {
                            clock.idle(idle, problems);
                        }
                    }
                }
                "STREAM" => stream_info(reply, clock, problems),
                _ => {}
            }
        }
        "XPENDING" => {
            ids.rename(arg(1), reply);
            if args.len() > 3 {
                for entry in &mut reply.items {
                    if entry.items.len() == 4 {
                        clock.idle(&mut entry.items[2], problems);
                    }
                }
            }
        }
        _ => ids.rename(arg(1), reply),
    }
}

/// Whether a reply holds a clock id (renamed or not).
fn holds_clock_ids(n: &Node) -> bool {
    text(n).is_some_and(|t| t.starts_with(b"$ID") || is_clock_id(t))
        || n.items.iter().any(holds_clock_ids)
}

/// XINFO STREAM [FULL]: the radix tree sizes of a stream with clock ids, and FULL's delivery
/// and seen times.
fn stream_info(info: &mut Node, clock: &Clock, problems: &mut Vec<String>) {
    if info.items.is_empty() {
        return;
    }
    if holds_clock_ids(info) {
        let size = |name| field(info, name).and_then(integer);
        let sizes = (
            size("length"),
            size("radix-tree-keys"),
            size("radix-tree-nodes"),
        );
        match sizes {
            (Some(len), Some(keys), Some(nodes)) if 0 <= keys && keys <= nodes && keys <= len => {}
            other => problems.push(format!(
                "implausible (length, radix-tree-keys, radix-tree-nodes): {other:?}"
            )),
        }
        for name in ["radix-tree-keys", "radix-tree-nodes"] {
            if let Some(v) = field_mut(info, name) {
                *v = token_node("depends on the clock ids");
            }
        }
    }
    let Some(groups) = field_mut(info, "groups") else {
        return;
    };
    for group in &mut groups.items {
        if let Some(pel) = field_mut(group, "pending") {
            for entry in &mut pel.items {
                if let Some(t) = entry.items.get_mut(2) {
                    clock.absolute(t, problems);
                }
            }
        }
        let Some(consumers) = field_mut(group, "consumers") else {
            continue;
        };
        for consumer in &mut consumers.items {
            if let Some(t) = field_mut(consumer, "seen-time") {
                clock.absolute(t, problems);
            }
            if let Some(pel) = field_mut(consumer, "pending") {
                for entry in &mut pel.items {
                    if let Some(t) = entry.items.get_mut(1) {
                        clock.absolute(t, problems);
                    }
                }
            }
        }
    }
}

/// A generated command: its arguments, which may hold `$ID<n>`, `$MS<n>` and `$NOWM`, and for
/// an XADD the number `n` its id gets.
#[derive(Clone, Debug)]
struct Step {
    args: Vec<String>,
    names: Option<usize>,
}

impl Step {
    fn plain(args: &[&str]) -> Step {
        Step {
            args: strings(args),
            names: None,
        }
    }
}

/// One server: its connections and its clock ids.
struct Side {
    conns: Vec<Raw>,
    ids: AutoIds,
    /// Per connection: the commands queued since MULTI.
    queued: Vec<Option<Vec<Step>>>,
}

/// The reference (side 0) and the server under test (side 1), sent the same commands; every
/// difference of their normalised replies is kept for the final report.
struct Differential {
    sides: [Side; 2],
    clock: Clock,
    differences: Vec<String>,
    compared: usize,
    /// XADDs and EXECs delayed to a second redis-server.
    skews: u64,
    /// PINGs sent to check the server under test is in step.
    resyncs: u64,
}

impl Differential {
    /// `conns` connections to each server.
    fn new(reference: &Server, ours: &Server, conns: usize) -> Differential {
        let side = |s: &Server| Side {
            conns: (0..conns).map(|_| s.raw()).collect(),
            ids: AutoIds::default(),
            queued: (0..conns).map(|_| None).collect(),
        };
        Differential {
            sides: [side(reference), side(ours)],
            clock: Clock::new(),
            differences: Vec::new(),
            compared: 0,
            skews: 0,
            resyncs: 0,
        }
    }

    /// Runs `step` on connection `c` of both servers and compares the replies.
    fn run(&mut self, c: usize, step: &Step) {
        self.send(c, step);
        self.receive(c, step);
    }

    /// Sends `step` on connection `c` of both servers, each with its own ids. Against a
    /// second redis-server, whose clock reads would mostly match the reference's to the
    /// millisecond, an XADD or EXEC goes to it 0 to 2 ms later, so that ids and idle times
    /// differ as they will with Damselfly.
    fn send(&mut self, c: usize, step: &Step) {
        let nowm = wall_ms() - 10_000_000;
        let skew = against_redis() && (step.names.is_some() || step.args[0] == "EXEC");
        for (i, side) in self.sides.iter_mut().enumerate() {
            let args: Vec<String> = step
                .args
                .iter()
                .map(|a| side.ids.substitute(a, nowm))
                .collect();
            if i == 1 && skew {
                self.skews += 1;
                std::thread::sleep(Duration::from_micros(self.skews % 3 * 1000));
            }
            side.conns[c].send(&encode(&args));
        }
    }

    /// Reads the reply to `step` (sent on connection `c`) from both servers, notes a new id,
    /// normalises and compares.
    fn receive(&mut self, c: usize, step: &Step) {
        let replies: Vec<std::io::Result<Vec<u8>>> = self
            .sides
            .iter_mut()
            .map(|s| s.conns[c].try_reply())
            .collect();
        let mut raw: Vec<Vec<u8>> = Vec::new();
        for (label, reply) in ["redis", "ours"].into_iter().zip(replies) {
            match reply {
                Ok(reply) => raw.push(reply),
                Err(e) => {
                    let what = format!("{:?}\n  no reply from {label}: {e}", step.args);
                    self.differences.push(what);
                    self.finish();
                }
            }
        }
        let name = step.args[0].to_ascii_uppercase();
        if name == "HELLO" {
            return; // Server name, version and id differ by design.
        }
        let mut replies: Vec<Node> = raw.iter().map(|r| parse(r)).collect();
        let mut problems = Vec::new();
        for (label, (side, reply)) in ["redis", "ours"]
            .into_iter()
            .zip(self.sides.iter_mut().zip(&mut replies))
        {
            let mut found = Vec::new();
            let queued = &mut side.queued[c];
            match name.as_str() {
                "MULTI" if reply.head == b"+OK\r\n" => *queued = Some(Vec::new()),
                "DISCARD" => *queued = None,
                "EXEC" => {
                    let steps = queued.take().unwrap_or_default();
                    if reply.kind() == b'*' && reply.items.len() == steps.len() {
                        for (s, item) in steps.iter().zip(&mut reply.items) {
                            settle(&mut side.ids, s, item, &self.clock, &mut found);
                        }
                    }
                }
                _ => match queued {
                    Some(steps) => steps.push(step.clone()),
                    None => settle(&mut side.ids, step, reply, &self.clock, &mut found),
                },
            }
            problems.extend(found.into_iter().map(|p| format!("{label}: {p}")));
        }
        self.compared += 1;
        let normal: Vec<Vec<u8>> = replies.iter().map(encoded).collect();
        if normal[0] != normal[1] || !problems.is_empty() {
            self.differences.push(format!(
                "{:?}\n  redis: {:?}\n  ours:  {:?}\n  redis raw: {:?}\n  ours raw:  {:?}{}",
                step.args,
                show(&normal[0]),
                show(&normal[1]),
                show(&raw[0]),
                show(&raw[1]),
                problems
                    .iter()
                    .map(|p| format!("\n  {p}"))
                    .collect::<String>()
            ));
            self.resync(c);
        }
    }

    /// After a difference, checks that the server under test is still in step on connection
    /// `c` (outside MULTI): a PING with a fresh marker must come back next. Replies before it
    /// (two replies to one command, or an array shorter than its header said) are noted and
    /// skipped, so that the differences after it are real ones.
    fn resync(&mut self, c: usize) {
        let side = &mut self.sides[1];
        if side.queued[c].is_some() {
            return;
        }
        self.resyncs += 1;
        let marker = format!("in-step-{}", self.resyncs);
        side.conns[c].send(&encode(&["PING", &marker]));
        side.conns[c].set_read_timeout(Duration::from_secs(5));
        loop {
            match self.sides[1].conns[c].try_reply() {
                Ok(reply) if reply == common::bulk(&marker) => break,
                Ok(reply) => self.differences.push(format!(
                    "  out of step: skipped this extra reply from ours: {:?}",
                    show(&reply)
                )),
                Err(e) => {
                    self.differences.push(format!(
                        "  out of step: no reply to PING {marker} from ours ({e}): it owes replies"
                    ));
                    self.finish();
                }
            }
        }
        self.sides[1].conns[c].set_read_timeout(Duration::from_secs(30));
    }

    /// Fails with every difference found (the first 300 in full).
    fn finish(&self) {
        let total = self.differences.len();
        let shown: Vec<&String> = self.differences.iter().take(300).collect();
        assert!(
            total == 0,
            "{total} of {} replies differ:\n{}",
            self.compared,
            shown
                .iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// Notes the id an XADD made and normalises its reply.
fn settle(
    ids: &mut AutoIds,
    step: &Step,
    reply: &mut Node,
    clock: &Clock,
    problems: &mut Vec<String>,
) {
    if let Some(n) = step.names {
        ids.record(n, &step.args[1], reply);
    }
    normalise(&step.args, reply, ids, clock, problems);
}

const GROUPS: [&str; 3] = ["g1", "g2", "g3"];
const CONSUMERS: [&str; 4] = ["alice", "bob", "carol", "dave"];
const FIELDS: [&str; 4] = ["f", "name", "n", "x"];

/// What the generator believes about one stream key. Never read back from a server: a wrong
/// belief only changes which commands fail, the same way on both.
struct KeyModel {
    name: String,
    /// Ids believed present, oldest first: explicit `ms-seq`, or `$ID<n>`.
    ids: Vec<String>,
    /// The top id when it was given explicitly.
    top: Option<(u64, u64)>,
    /// The number of the top id when a clock made it and it is known (then `$MS<n>-*` is safe).
    auto_top: Option<usize>,
    groups: Vec<String>,
    /// Percentage of its XADDs with `*`.
    auto_share: u32,
    /// It may hold clock ids: it got an XADD with `*` since it was last deleted.
    clocked: bool,
    /// Its node boundaries may depend on the clock: it got XADDs while clocked and while
    /// stream-node-max-bytes could cut a node by size. Trimming with `~` is then avoided.
    racy_nodes: bool,
}

/// Which id an XADD used, for the model.
enum NewId {
    Auto(usize),
    Explicit(u64, u64),
    Other,
}

/// The seeded command generator.
struct Gen {
    rng: StdRng,
    keys: Vec<KeyModel>,
    /// The number the next id-making XADD gets.
    next_n: usize,
    /// stream-node-max-bytes can cut a node by size: neither 0 (1 GB), 1 (a node per entry)
    /// nor larger than any stream here grows.
    bytes_bind: bool,
    in_multi: bool,
    /// Ids added inside MULTI, known only after EXEC: (key, `$ID<n>`).
    after_exec: Vec<(usize, String)>,
}

impl Gen {
    fn new(seed: u64, names: &[&str]) -> Gen {
        let keys = names
            .iter()
            .enumerate()
            .map(|(i, name)| KeyModel {
                name: name.to_string(),
                ids: Vec::new(),
                top: None,
                auto_top: None,
                groups: Vec::new(),
                auto_share: [85, 60, 10, 0][i % 4],
                clocked: false,
                racy_nodes: false,
            })
            .collect();
        Gen {
            rng: StdRng::seed_from_u64(seed),
            keys,
            next_n: 0,
            bytes_bind: true,
            in_multi: false,
            after_exec: Vec::new(),
        }
    }

    fn pick(&mut self, from: &[&str]) -> String {
        from[self.rng.gen_range(0..from.len())].to_string()
    }

    fn key(&mut self) -> usize {
        self.rng.gen_range(0..self.keys.len())
    }

    /// A key name for a command: one of the streams, or now and then a string or a list.
    fn key_name(&mut self, k: usize) -> String {
        match self.rng.gen_range(0..40) {
            0 => "str".into(),
            1 => "lst".into(),
            _ => self.keys[k].name.clone(),
        }
    }

    fn group(&mut self, k: usize) -> String {
        let known = &self.keys[k].groups;
        if !known.is_empty() && self.rng.gen_bool(0.9) {
            return known[self.rng.gen_range(0..known.len())].clone();
        }
        self.pick(&GROUPS)
    }

    fn consumer(&mut self) -> String {
        self.pick(&CONSUMERS)
    }

    fn small_id(&mut self) -> String {
        format!(
            "{}-{}",
            self.rng.gen_range(0..500),
            self.rng.gen_range(0..4)
        )
    }

    /// An id of key `k` for reading: mostly one believed present, else another form.
    fn some_id(&mut self, k: usize) -> String {
        let n = self.keys[k].ids.len();
        match self.rng.gen_range(0..80) {
            0 | 1 => "0-0".into(),
            2..=5 => self.small_id(),
            6 => self.pick(&["abc", "1-", "-1", "1-2-3"]),
            7..=9 => self.rng.gen_range(0..400).to_string(),
            10 => format!("{FUTURE_MS}-0"),
            _ if n > 0 => {
                // Recent ids more often: older ones are often trimmed.
                let back = self.rng.gen_range(0..n.min(12));
                self.keys[k].ids[n - 1 - back].clone()
            }
            _ => self.small_id(),
        }
    }

    /// A range bound: special, exclusive, partial or an id.
    fn bound(&mut self, k: usize) -> String {
        match self.rng.gen_range(0..14) {
            0 | 1 => "-".into(),
            2 | 3 => "+".into(),
            4 | 5 => format!("({}", self.some_id(k)),
            6 => self.rng.gen_range(0..400).to_string(),
            7 => self.pick(&[
                "(-",
                "(+",
                "(0-0",
                "(18446744073709551615-18446744073709551615",
            ]),
            _ => self.some_id(k),
        }
    }

    fn count(&mut self) -> String {
        self.pick(&["1", "2", "3", "5", "10", "0", "-1", "abc", "100"])
    }

    /// The next commands: one, or a MULTI block.
    fn next(&mut self) -> Vec<Step> {
        if self.rng.gen_ratio(1, 60) {
            return self.transaction();
        }
        vec![self.command()]
    }

    /// MULTI, 1 to 6 commands (now and then one with too few arguments: EXECABORT), and EXEC
    /// or DISCARD.
    fn transaction(&mut self) -> Vec<Step> {
        self.in_multi = true;
        let mut steps = vec![Step::plain(&["MULTI"])];
        for _ in 0..self.rng.gen_range(1..=6) {
            steps.push(self.command());
        }
        if self.rng.gen_ratio(1, 15) {
            let k = self.key();
            steps.push(Step::plain(&["XADD", &self.keys[k].name.clone()]));
        }
        let end = if self.rng.gen_ratio(1, 10) {
            "DISCARD"
        } else {
            "EXEC"
        };
        steps.push(Step::plain(&[end]));
        self.in_multi = false;
        for (k, id) in std::mem::take(&mut self.after_exec) {
            self.keys[k].ids.push(id);
        }
        steps
    }

    fn command(&mut self) -> Step {
        let k = self.key();
        if self.keys[k].groups.is_empty() && self.rng.gen_ratio(1, 4) {
            // Keys lose their groups with DEL: make one, so that group commands mostly meet
            // one.
            let g = self.pick(&GROUPS);
            self.keys[k].groups.push(g.clone());
            let (name, id) = (self.keys[k].name.clone(), self.pick(&["0", "$", "0", "$"]));
            return Step::plain(&["XGROUP", "CREATE", &name, &g, &id, "MKSTREAM"]);
        }
        let args = match self.rng.gen_range(0..100) {
            0..=25 | 94 => return self.xadd(k),
            26..=29 => self.xrange(k),
            30..=31 => vec!["XLEN".into(), self.key_name(k)],
            32..=35 => self.xdel(k),
            36..=38 => self.xtrim(k),
            39..=44 => self.xread(k),
            45..=51 => self.xgroup(k),
            52..=61 => self.xreadgroup(k),
            62..=65 => self.xack(k),
            66..=71 => self.xpending(k),
            72..=77 => self.xclaim(k),
            78..=81 => self.xautoclaim(k),
            82..=90 => self.xinfo(k),
            91..=92 => self.xsetid(k),
            93 => self.del(k),
            95 => vec!["TYPE".into(), self.keys[k].name.clone()],
            96 => vec!["EXISTS".into(), self.keys[k].name.clone()],
            _ => self.xrange(k),
        };
        Step { args, names: None }
    }

    fn config(&mut self) -> Step {
        let entries = self.pick(&["100", "1", "2", "3", "5", "0"]);
        let bytes = self.pick(&["4096", "0", "1", "200", "1048576", "60"]);
        self.bytes_bind = !["0", "1", "1048576"].contains(&bytes.as_str());
        Step::plain(&[
            "CONFIG",
            "SET",
            "stream-node-max-entries",
            &entries,
            "stream-node-max-bytes",
            &bytes,
        ])
    }

    /// The id argument of an XADD, and what it is for the model.
    fn xadd_id(&mut self, k: usize) -> (String, NewId) {
        let share = self.keys[k].auto_share;
        let top = self.keys[k].top;
        if self.rng.gen_range(0..100) < share {
            return ("*".into(), NewId::Auto(self.next_n));
        }
        if let (Some(n), true) = (self.keys[k].auto_top, self.rng.gen_ratio(1, 3)) {
            // Derived from the top clock id: safe only from the top itself, and with a sequence
            // no same-millisecond burst reaches.
            let id = if self.rng.gen_bool(0.5) {
                format!("$MS{n}-*")
            } else {
                format!("$MS{n}-{}", 1_000_000 + self.rng.gen_range(0..100))
            };
            return (id, NewId::Auto(self.next_n));
        }
        let (ms, seq) = top.unwrap_or((0, 0));
        let next_ms = ms + self.rng.gen_range(0..3);
        let next_seq = if next_ms == ms {
            seq + 1 + self.rng.gen_range(0..2)
        } else {
            self.rng.gen_range(0..3)
        };
        match self.rng.gen_range(0..40) {
            0 => ("0-0".into(), NewId::Other),
            1 => ("0-*".into(), NewId::Other),
            2 => ("0".into(), NewId::Other),
            3 => ("abc".into(), NewId::Other),
            4 => (format!("{ms}-{seq}"), NewId::Other),
            5 => (self.some_id(k), NewId::Other),
            6 => ("-".into(), NewId::Other),
            7 => ("1-2-3".into(), NewId::Other),
            8 if self.rng.gen_ratio(1, 10) => (
                "18446744073709551615-18446744073709551615".into(),
                NewId::Other,
            ),
            9 => (
                format!("{}-{next_seq}", FUTURE_MS + next_ms),
                NewId::Explicit(FUTURE_MS + next_ms, next_seq),
            ),
            10..=12 => {
                let seq = if next_ms == ms && top.is_some() {
                    seq + 1
                } else {
                    0
                };
                (format!("{next_ms}-*"), NewId::Explicit(next_ms, seq))
            }
            13 | 14 if next_ms > ms => (next_ms.to_string(), NewId::Explicit(next_ms, 0)),
            _ => (
                format!("{next_ms}-{next_seq}"),
                NewId::Explicit(next_ms, next_seq),
            ),
        }
    }

    fn xadd(&mut self, k: usize) -> Step {
        let (id, new) = self.xadd_id(k);
        let names = match new {
            NewId::Auto(n) => {
                self.next_n += 1;
                Some(n)
            }
            _ => None,
        };
        let model = &mut self.keys[k];
        model.clocked |= names.is_some();
        model.racy_nodes |= model.clocked && self.bytes_bind;
        let mut args = vec!["XADD".to_string(), self.key_name(k)];
        let nomkstream = self.rng.gen_ratio(1, 20);
        let trim = if self.rng.gen_ratio(1, 5) {
            self.trim_args(k)
        } else {
            Vec::new()
        };
        if nomkstream && self.rng.gen_bool(0.5) {
            args.push("NOMKSTREAM".into());
        }
        args.extend(trim.iter().cloned());
        if nomkstream && !args.iter().any(|a| a == "NOMKSTREAM") {
            args.push("NOMKSTREAM".into());
        }
        args.push(id);
        for i in 0..self.rng.gen_range(1..=3) {
            let f = if i == 0 && self.rng.gen_bool(0.7) {
                "f".to_string()
            } else {
                self.pick(&FIELDS)
            };
            let v = match self.rng.gen_range(0..8) {
                0 => String::new(),
                1 => "hello".into(),
                2 => "-5".into(),
                3 => "x".repeat(self.rng.gen_range(1..40)),
                _ => self.rng.gen_range(0..100_000).to_string(),
            };
            args.extend([f, v]);
        }
        let broken = match self.rng.gen_range(0..60) {
            0 => args.pop().is_some(),
            1 => {
                args.truncate(args.len() - 2);
                true
            }
            _ => false,
        };
        // The model: the id is added when the command looks right.
        if broken || args[1] != self.keys[k].name || !trim_valid(&trim) {
            return Step { args, names };
        }
        let model = &mut self.keys[k];
        let placeholder = names.map(|n| format!("$ID{n}"));
        match new {
            NewId::Auto(_) => {
                let id = placeholder.unwrap_or_default();
                model.top = None;
                if self.in_multi {
                    model.auto_top = None;
                    self.after_exec.push((k, id));
                } else {
                    model.auto_top = names;
                    model.ids.push(id);
                }
            }
            NewId::Explicit(ms, seq) => {
                let fits = match model.top {
                    Some(top) => (ms, seq) > top,
                    None => !model.clocked || ms >= FUTURE_MS,
                };
                if fits {
                    model.top = Some((ms, seq));
                    model.auto_top = None;
                    model.ids.push(format!("{ms}-{seq}"));
                }
            }
            NewId::Other => {}
        }
        self.apply_trim(k, &trim);
        Step { args, names }
    }

    /// MAXLEN or MINID, with `=`, `~` or neither, and maybe LIMIT; `~` not on a stream whose
    /// nodes may depend on the clock.
    fn trim_args(&mut self, k: usize) -> Vec<String> {
        let racy = self.keys[k].racy_nodes;
        let op = match self.rng.gen_range(0..4) {
            0 => None,
            1 => Some("="),
            _ => Some(if racy { "=" } else { "~" }),
        };
        let mut args = Vec::new();
        let mut strategy = |name: &str, value: String| {
            args.push(name.to_string());
            if let Some(op) = op {
                args.push(op.to_string());
            }
            args.push(value);
        };
        match self.rng.gen_range(0..30) {
            0 => {
                strategy("MAXLEN", "1".into());
                strategy("MINID", "1".into());
            }
            1..=17 => {
                let n = self.pick(&[
                    "0", "1", "2", "3", "5", "5", "10", "10", "20", "100", "-1", "abc",
                ]);
                strategy("MAXLEN", n);
            }
            18 => strategy("maxlen", "7".into()),
            _ => {
                let id = match self.rng.gen_range(0..6) {
                    0 => "0".into(),
                    1 => "+".into(),
                    _ => self.some_id(k),
                };
                strategy("MINID", id);
            }
        }
        if self.rng.gen_ratio(1, 4) {
            args.push("LIMIT".into());
            args.push(self.pick(&["0", "1", "3", "10", "100", "-1", "abc"]));
        }
        args
    }

    /// The model after an exact MAXLEN trim.
    fn apply_trim(&mut self, k: usize, trim: &[String]) {
        if trim.iter().any(|a| a == "~") {
            return;
        }
        let Some(at) = trim.iter().position(|a| a.eq_ignore_ascii_case("MAXLEN")) else {
            return;
        };
        let value = trim.get(at + 1).filter(|v| *v != "=").or(trim.get(at + 2));
        if let Some(n) = value.and_then(|v| v.parse::<usize>().ok()) {
            let ids = &mut self.keys[k].ids;
            let drop = ids.len().saturating_sub(n);
            ids.drain(..drop);
        }
    }

    fn xtrim(&mut self, k: usize) -> Vec<String> {
        let mut args = vec!["XTRIM".to_string(), self.key_name(k)];
        match self.rng.gen_range(0..25) {
            0 => {}
            1 => args.extend(strings(&["LIMIT", "1"])),
            2 => args.extend(strings(&["FOO", "1"])),
            _ => {
                let trim = self.trim_args(k);
                self.apply_trim(k, &trim);
                args.extend(trim);
            }
        }
        args
    }

    fn xrange(&mut self, k: usize) -> Vec<String> {
        let name = self.pick(&["XRANGE", "XREVRANGE", "xrange"]);
        let mut args = vec![name, self.key_name(k), self.bound(k), self.bound(k)];
        match self.rng.gen_range(0..20) {
            0..=7 => args.extend(["COUNT".to_string(), self.count()]),
            8 => args.push("COUNT".into()),
            9 => args.extend(strings(&["FOO", "1"])),
            10 => args.truncate(3),
            _ => {}
        }
        args
    }

    fn xdel(&mut self, k: usize) -> Vec<String> {
        let mut args = vec!["XDEL".to_string(), self.key_name(k)];
        let n = if self.rng.gen_ratio(1, 40) {
            0
        } else {
            self.rng.gen_range(1..=3)
        };
        for _ in 0..n {
            let id = self.some_id(k);
            self.keys[k].ids.retain(|i| *i != id);
            args.push(id);
        }
        args
    }

    fn del(&mut self, k: usize) -> Vec<String> {
        let model = &mut self.keys[k];
        model.ids.clear();
        model.groups.clear();
        model.top = None;
        model.auto_top = None;
        if !self.in_multi {
            model.clocked = false;
            model.racy_nodes = false;
        }
        vec!["DEL".into(), model.name.clone()]
    }

    /// 1 to 3 distinct keys for XREAD and XREADGROUP, `k` first; with `group`, mostly keys
    /// believed to have it.
    fn read_keys(&mut self, k: usize, group: Option<&str>) -> Vec<(usize, String)> {
        let mut keys = vec![(k, self.key_name(k))];
        let more = [0, 0, 0, 1, 2][self.rng.gen_range(0..5)];
        for _ in 0..more {
            let other = self.key();
            let fits = group.is_none_or(|g| self.keys[other].groups.iter().any(|x| x == g));
            if keys.iter().all(|(i, _)| *i != other) && (fits || self.rng.gen_ratio(1, 4)) {
                keys.push((other, self.keys[other].name.clone()));
            }
        }
        keys
    }

    fn xread(&mut self, k: usize) -> Vec<String> {
        let keys = self.read_keys(k, None);
        // BLOCK only where nothing is new: no other client writes, so it times out.
        let block = self.rng.gen_ratio(1, 40);
        let mut options: Vec<Vec<String>> = Vec::new();
        if self.rng.gen_bool(0.5) {
            options.push(vec!["COUNT".into(), self.count()]);
        }
        if block {
            options.push(vec!["BLOCK".into(), self.rng.gen_range(1..=20).to_string()]);
        } else if self.rng.gen_ratio(1, 60) {
            options.push(vec!["BLOCK".into(), self.pick(&["-1", "abc"])]);
        }
        match self.rng.gen_range(0..60) {
            0 => options.push(strings(&["GROUP", "g1", "alice"])),
            1 => options.push(strings(&["NOACK"])),
            2 => options.push(strings(&["FOO"])),
            _ => {}
        }
        options.shuffle(&mut self.rng);
        let mut args = vec!["XREAD".to_string()];
        args.extend(options.concat());
        if self.rng.gen_ratio(1, 80) {
            return args; // No STREAMS.
        }
        args.push("STREAMS".into());
        args.extend(keys.iter().map(|(_, name)| name.clone()));
        for (i, _) in &keys {
            let id = if block {
                "$".to_string()
            } else {
                match self.rng.gen_range(0..12) {
                    0..=2 => "$".into(),
                    3 | 4 => "0".into(),
                    5 => "0-0".into(),
                    6 => self.pick(&["+", ">", "-"]),
                    _ => self.some_id(*i),
                }
            };
            args.push(id);
        }
        if self.rng.gen_ratio(1, 60) {
            args.pop(); // Unbalanced.
        }
        args
    }

    fn xreadgroup(&mut self, k: usize) -> Vec<String> {
        let g = self.group(k);
        let keys = self.read_keys(k, Some(&g));
        let block = self.rng.gen_ratio(1, 40);
        let mut options: Vec<Vec<String>> = Vec::new();
        if self.rng.gen_ratio(59, 60) {
            options.push(vec!["GROUP".into(), g, self.consumer()]);
        }
        if self.rng.gen_bool(0.5) {
            options.push(vec!["COUNT".into(), self.count()]);
        }
        if self.rng.gen_ratio(1, 8) {
            options.push(vec!["NOACK".into()]);
        }
        if block {
            options.push(vec!["BLOCK".into(), self.rng.gen_range(1..=20).to_string()]);
        }
        options.shuffle(&mut self.rng);
        let mut args = vec!["XREADGROUP".to_string()];
        args.extend(options.concat());
        args.push("STREAMS".into());
        args.extend(keys.iter().map(|(_, name)| name.clone()));
        for (i, _) in &keys {
            let id = if block {
                ">".to_string()
            } else {
                match self.rng.gen_range(0..20) {
                    0..=11 => ">".into(),
                    12 | 13 => "0".into(),
                    14 => "$".into(),
                    _ => self.some_id(*i),
                }
            };
            args.push(id);
        }
        args
    }

    fn entries_read(&mut self) -> String {
        self.pick(&["0", "1", "3", "10", "-1", "-2", "abc"])
    }

    fn xgroup(&mut self, k: usize) -> Vec<String> {
        let key = self.key_name(k);
        let g = self.group(k);
        let mut args = strings(&["XGROUP"]);
        match self.rng.gen_range(0..22) {
            0..=6 => {
                let id = match self.rng.gen_range(0..10) {
                    0..=2 => "$".into(),
                    3 | 4 => "0".into(),
                    5 => self.pick(&["-", "+", "abc"]),
                    _ => self.some_id(k),
                };
                args.extend(["CREATE".into(), key, g.clone(), id]);
                let mut options: Vec<Vec<String>> = Vec::new();
                let mkstream = self.rng.gen_bool(0.6);
                if mkstream {
                    options.push(strings(&["MKSTREAM"]));
                }
                if self.rng.gen_ratio(1, 5) {
                    options.push(vec!["ENTRIESREAD".into(), self.entries_read()]);
                }
                options.shuffle(&mut self.rng);
                args.extend(options.concat());
                let model = &mut self.keys[k];
                if (mkstream || !model.ids.is_empty()) && !model.groups.contains(&g) {
                    model.groups.push(g);
                }
            }
            7..=9 => {
                let id = match self.rng.gen_range(0..10) {
                    0..=2 => "$".into(),
                    3 | 4 => "0".into(),
                    5 => self.pick(&["-", "+", "abc"]),
                    _ => self.some_id(k),
                };
                args.extend(["SETID".into(), key, g, id]);
                if self.rng.gen_ratio(1, 3) {
                    args.extend(["ENTRIESREAD".into(), self.entries_read()]);
                }
            }
            10 | 11 => {
                self.keys[k].groups.retain(|x| *x != g);
                args.extend(["DESTROY".into(), key, g]);
            }
            12..=14 => {
                let c = self.consumer();
                args.extend(["CREATECONSUMER".into(), key, g, c]);
            }
            15 | 16 => {
                let c = self.consumer();
                args.extend(["DELCONSUMER".into(), key, g, c]);
            }
            17 => args.push(self.pick(&["HELP", "help"])),
            _ => {
                let wrong: Vec<Vec<String>> = vec![
                    vec![],
                    strings(&["FOO"]),
                    vec!["CREATE".into(), key.clone()],
                    vec![
                        "CREATE".into(),
                        key.clone(),
                        g.clone(),
                        "0".into(),
                        "BOGUS".into(),
                    ],
                    strings(&["HELP", "x"]),
                    vec!["DESTROY".into(), key.clone()],
                    vec![
                        "SETID".into(),
                        key.clone(),
                        g.clone(),
                        "0".into(),
                        "MKSTREAM".into(),
                    ],
                    vec!["CREATECONSUMER".into(), key.clone(), g.clone()],
                    vec!["DELCONSUMER".into(), key, g, "a".into(), "b".into()],
                ];
                args.extend(wrong[self.rng.gen_range(0..wrong.len())].clone());
            }
        }
        args
    }

    fn xack(&mut self, k: usize) -> Vec<String> {
        let mut args = vec!["XACK".to_string(), self.key_name(k), self.group(k)];
        let n = if self.rng.gen_ratio(1, 40) {
            0
        } else {
            self.rng.gen_range(1..=4)
        };
        for _ in 0..n {
            args.push(self.some_id(k));
        }
        args
    }

    /// An idle threshold no outcome depends on by a millisecond.
    fn min_idle(&mut self) -> String {
        self.pick(&["0", "0", "5000000", "-5", "abc"])
    }

    fn xpending(&mut self, k: usize) -> Vec<String> {
        let mut args = vec!["XPENDING".to_string(), self.key_name(k), self.group(k)];
        match self.rng.gen_range(0..20) {
            0..=7 => {}
            8 => args.push("-".into()),
            9 => args.extend(strings(&["IDLE", "5", "-", "+"])),
            _ => {
                if self.rng.gen_ratio(1, 3) {
                    args.extend(["IDLE".into(), self.min_idle()]);
                }
                args.extend([self.bound(k), self.bound(k), self.count()]);
                if self.rng.gen_bool(0.4) {
                    args.push(self.consumer());
                }
            }
        }
        args
    }

    fn xclaim(&mut self, k: usize) -> Vec<String> {
        let mut args = vec![
            "XCLAIM".to_string(),
            self.key_name(k),
            self.group(k),
            self.consumer(),
            self.min_idle(),
        ];
        for _ in 0..self.rng.gen_range(0..=3) {
            args.push(self.some_id(k));
        }
        let mut options: Vec<Vec<String>> = Vec::new();
        if self.rng.gen_ratio(1, 3) {
            let v = self.pick(&["0", "10000000", "-5", "99999999999999", "abc"]);
            options.push(vec!["IDLE".into(), v]);
        }
        if self.rng.gen_ratio(1, 4) {
            let v = self.pick(&["0", "1", "-1", "$NOWM", "99999999999999", "abc"]);
            options.push(vec!["TIME".into(), v]);
        }
        if self.rng.gen_ratio(1, 5) {
            let v = self.pick(&["0", "3", "-1", "abc"]);
            options.push(vec!["RETRYCOUNT".into(), v]);
        }
        if self.rng.gen_ratio(1, 4) {
            options.push(strings(&["FORCE"]));
        }
        if self.rng.gen_ratio(1, 3) {
            options.push(strings(&["JUSTID"]));
        }
        if self.rng.gen_ratio(1, 6) {
            options.push(vec!["LASTID".into(), self.some_id(k)]);
        }
        if self.rng.gen_ratio(1, 40) {
            options.push(strings(&["BOGUS"]));
        }
        options.shuffle(&mut self.rng);
        args.extend(options.concat());
        args
    }

    fn xautoclaim(&mut self, k: usize) -> Vec<String> {
        let start = match self.rng.gen_range(0..8) {
            0 | 1 => "0".into(),
            2 => "0-0".into(),
            3 => self.pick(&["-", "+", "abc"]),
            4 => format!("({}", self.some_id(k)),
            _ => self.some_id(k),
        };
        let mut args = vec![
            "XAUTOCLAIM".to_string(),
            self.key_name(k),
            self.group(k),
            self.consumer(),
            self.min_idle(),
            start,
        ];
        let mut options: Vec<Vec<String>> = Vec::new();
        if self.rng.gen_bool(0.5) {
            let v = self.pick(&["1", "2", "3", "10", "100", "0", "-1", "abc"]);
            options.push(vec!["COUNT".into(), v]);
        }
        if self.rng.gen_ratio(1, 3) {
            options.push(strings(&["JUSTID"]));
        }
        if self.rng.gen_ratio(1, 40) {
            options.push(strings(&["BOGUS"]));
        }
        options.shuffle(&mut self.rng);
        args.extend(options.concat());
        if self.rng.gen_ratio(1, 60) {
            args.truncate(5);
        }
        args
    }

    fn xinfo(&mut self, k: usize) -> Vec<String> {
        let key = self.key_name(k);
        let mut args = strings(&["XINFO"]);
        match self.rng.gen_range(0..30) {
            0..=7 => args.extend(["STREAM".into(), key]),
            8..=12 => args.extend(["STREAM".into(), key, "FULL".into()]),
            13..=16 => args.extend([
                "STREAM".into(),
                key,
                "FULL".into(),
                "COUNT".into(),
                self.pick(&["0", "1", "2", "5", "-1", "abc"]),
            ]),
            17..=20 => args.extend(["GROUPS".into(), key]),
            21..=26 => args.extend(["CONSUMERS".into(), key, self.group(k)]),
            27 => args.push("HELP".into()),
            _ => {
                let wrong: Vec<Vec<String>> = vec![
                    vec![],
                    vec!["STREAM".into(), key.clone(), "FULL".into(), "COUNT".into()],
                    vec!["STREAM".into(), key.clone(), "FOO".into()],
                    vec!["FOO".into(), key.clone()],
                    strings(&["HELP", "x"]),
                    vec!["CONSUMERS".into(), key.clone()],
                    vec!["GROUPS".into(), key, "x".into()],
                ];
                args.extend(wrong[self.rng.gen_range(0..wrong.len())].clone());
            }
        }
        args
    }

    fn xsetid(&mut self, k: usize) -> Vec<String> {
        let key = self.key_name(k);
        let model = &self.keys[k];
        let (top, auto_top) = (model.top, model.auto_top);
        let (id, new_top) = match (self.rng.gen_range(0..10), top, auto_top) {
            (0..=3, Some((ms, seq)), _) => {
                let (ms, seq) = (
                    ms + self.rng.gen_range(0..3),
                    seq + self.rng.gen_range(0..3),
                );
                (format!("{ms}-{seq}"), Some((ms, seq)))
            }
            (0..=3, None, Some(n)) => (format!("$ID{n}"), None),
            (4, _, _) => (format!("{FUTURE_MS}-7"), Some((FUTURE_MS, 7))),
            (5, _, _) => (self.pick(&["abc", "-", "0-0"]), None),
            _ => (self.some_id(k), None),
        };
        let mut args = vec!["XSETID".to_string(), key, id];
        if self.rng.gen_ratio(1, 4) {
            args.extend([
                "ENTRIESADDED".into(),
                self.pick(&["0", "100", "1000", "-1", "abc"]),
            ]);
        }
        if self.rng.gen_ratio(1, 4) {
            let max_deleted = match self.rng.gen_range(0..4) {
                0 => "0-1".to_string(),
                1 => "99999999999999999-0".into(),
                _ => self.some_id(k),
            };
            args.extend(["MAXDELETEDID".into(), max_deleted]);
        }
        match self.rng.gen_range(0..40) {
            0 => args.truncate(2),
            1 => args.push("BOGUS".into()),
            _ => {}
        }
        let model = &mut self.keys[k];
        if let Some(new_top) = new_top.filter(|t| top.is_none_or(|old| *t >= old)) {
            model.top = Some(new_top);
            model.auto_top = None;
        }
        args
    }
}

/// Whether trimming arguments are free of the generator's deliberate errors.
fn trim_valid(trim: &[String]) -> bool {
    let has = |a: &str| trim.iter().any(|x| x == a);
    let wrong = has("abc") || has("-1");
    let limit_without_tilde = has("LIMIT") && !has("~");
    let both = has("MAXLEN") && has("MINID");
    !(wrong || limit_without_tilde || both)
}

/// The keys of the random differential: six names that land on every shard of 2, 3 and 4
/// threads, and two sharing a hash tag (for multi-key reads on one shard).
const DIFF_KEYS: [&str; 8] = ["s1", "s2", "s3", "s4", "s5", "s8", "{t}a", "{t}b"];

/// Asserts that `keys` lie on every one of `threads` shards.
fn assert_on_every_shard(keys: &[&str], threads: usize) {
    let mut shards: Vec<usize> = keys
        .iter()
        .map(|k| shard_for_key(k.as_bytes(), threads))
        .collect();
    shards.sort_unstable();
    shards.dedup();
    assert_eq!(shards.len(), threads, "{keys:?} on shards {shards:?}");
}

fn streams_like_redis(b: Backend, threads: usize) {
    assert_on_every_shard(&DIFF_KEYS, threads);
    let redis = reference();
    let ours = under_test(b, threads);
    let mut d = Differential::new(&redis, &ours, 1);
    for setup in [&["SET", "str", "v"][..], &["RPUSH", "lst", "a"]] {
        d.run(0, &Step::plain(setup));
    }
    let mut gen = Gen::new(2024, &DIFF_KEYS);
    let (mut sent, mut round) = (0, 0);
    while sent < 22_000 {
        round += 1;
        let protocol = match round % 4000 {
            1000 => Some("3"),
            3000 => Some("2"),
            _ => None,
        };
        if let Some(p) = protocol {
            d.run(0, &Step::plain(&["HELLO", p]));
        }
        if round % 1500 == 0 {
            let config = gen.config();
            d.run(0, &config);
        }
        for step in gen.next() {
            d.run(0, &step);
            sent += 1;
        }
    }
    // The final state of every stream, its groups and their consumers, in both protocols.
    for p in ["2", "3"] {
        d.run(0, &Step::plain(&["HELLO", p]));
        for key in DIFF_KEYS {
            d.run(
                0,
                &Step::plain(&["XINFO", "STREAM", key, "FULL", "COUNT", "0"]),
            );
            d.run(0, &Step::plain(&["XINFO", "STREAM", key]));
            d.run(0, &Step::plain(&["XINFO", "GROUPS", key]));
            for g in GROUPS {
                d.run(0, &Step::plain(&["XINFO", "CONSUMERS", key, g]));
                d.run(0, &Step::plain(&["XPENDING", key, g, "-", "+", "1000"]));
            }
        }
    }
    eprintln!("streams_like_redis: {} replies compared", d.compared);
    d.finish();
}

/// Connection 0 of each server runs commands; connections 1 and 2 block. XADDs are numbered
/// as they come, for their ids.
struct Script {
    d: Differential,
    next_n: usize,
}

impl Script {
    fn step(&mut self, args: &[&str]) -> Step {
        let names = args[0].eq_ignore_ascii_case("XADD").then(|| {
            self.next_n += 1;
            self.next_n
        });
        Step {
            args: strings(args),
            names,
        }
    }

    /// Runs `args` on connection `c` and compares the replies.
    fn run(&mut self, c: usize, args: &[&str]) {
        let step = self.step(args);
        self.d.run(c, &step);
    }

    fn cmd(&mut self, args: &[&str]) {
        self.run(0, args);
    }

    /// Sends `args` on connection `c`, and waits until both servers count `blocked` blocked
    /// clients.
    fn block(&mut self, c: usize, args: &[&str], blocked: usize) -> Step {
        let step = self.step(args);
        self.d.send(c, &step);
        self.blocked(blocked);
        step
    }

    /// Waits up to 10 s until both servers count `n` blocked clients; a server that does not
    /// get there is a difference.
    fn blocked(&mut self, n: usize) {
        for (label, side) in ["redis", "ours"].into_iter().zip(&mut self.d.sides) {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let now = common::info_field(&mut side.conns[0], "clients", "blocked_clients");
                if now == Some(n.to_string()) {
                    break;
                }
                if Instant::now() > deadline {
                    self.d
                        .differences
                        .push(format!("{label}: blocked_clients stayed {now:?}, want {n}"));
                    break;
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    }

    /// Reads and compares the replies to `step`, blocked on connection `c`.
    fn woken(&mut self, c: usize, step: &Step) {
        self.d.receive(c, step);
    }

    /// Checks that blocked clients stay blocked a while: both servers still count `n` of them
    /// 50 ms later.
    fn still_blocked(&mut self, n: usize) {
        std::thread::sleep(Duration::from_millis(50));
        for (label, side) in ["redis", "ours"].into_iter().zip(&mut self.d.sides) {
            let now = common::info_field(&mut side.conns[0], "clients", "blocked_clients");
            if now != Some(n.to_string()) {
                self.d.differences.push(format!(
                    "{label}: blocked_clients is {now:?} 50 ms later, want {n} still"
                ));
            }
        }
    }
}

/// Two keys owned by different shards among `threads`.
fn keys_on_two_shards(threads: usize) -> (String, String) {
    let a = "blk-a".to_string();
    let shard = shard_for_key(a.as_bytes(), threads);
    let b = (0..)
        .map(|i| format!("blk-b{i}"))
        .find(|k| shard_for_key(k.as_bytes(), threads) != shard)
        .unwrap_or_default();
    (a, b)
}

fn stream_blocking_like_redis(b: Backend, threads: usize) {
    let redis = reference();
    let ours = under_test(b, threads);
    let mut s = Script {
        d: Differential::new(&redis, &ours, 3),
        next_n: 0,
    };
    // A blocked client is woken at once or not at all: do not wait 30 s for a missing reply.
    for side in &mut s.d.sides {
        for conn in &side.conns[1..] {
            conn.set_read_timeout(Duration::from_secs(10));
        }
    }
    let (a, b) = keys_on_two_shards(threads);
    let (a, b) = (a.as_str(), b.as_str());

    // XREAD BLOCK 0 on `$`, woken by an XADD from another connection.
    s.cmd(&["XADD", a, "*", "f", "1"]);
    let r = s.block(1, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 1);
    s.cmd(&["XADD", a, "*", "f", "2"]);
    s.woken(1, &r);
    // On two keys on different shards: the key written answers.
    let r = s.block(1, &["XREAD", "BLOCK", "0", "STREAMS", a, b, "$", "$"], 1);
    s.cmd(&["XADD", b, "*", "f", "3"]);
    s.woken(1, &r);
    // In RESP3 (a map), with COUNT.
    s.run(1, &["HELLO", "3"]);
    let r = s.block(
        1,
        &["XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", a, "$"],
        1,
    );
    s.cmd(&["XADD", a, "*", "f", "4"]);
    s.woken(1, &r);
    s.run(1, &["HELLO", "2"]);
    // A transaction adding three entries wakes the reader once, after EXEC: COUNT 2 of them.
    let r = s.block(
        1,
        &["XREAD", "BLOCK", "0", "COUNT", "2", "STREAMS", a, "$"],
        1,
    );
    s.cmd(&["MULTI"]);
    for v in ["5", "6", "7"] {
        s.cmd(&["XADD", a, "*", "f", v]);
    }
    s.cmd(&["EXEC"]);
    s.woken(1, &r);
    // An entry trimmed away at once still wakes the reader: the key with no entries.
    let r = s.block(1, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 1);
    s.cmd(&["XADD", a, "MAXLEN", "0", "*", "f", "8"]);
    s.woken(1, &r);
    // Two readers of one key both get the entry.
    let r1 = s.block(1, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 1);
    let r2 = s.block(2, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 2);
    s.cmd(&["XADD", a, "*", "f", "9"]);
    s.woken(1, &r1);
    s.woken(2, &r2);
    s.blocked(0);

    // XREADGROUP woken by an XADD: the entry is pending for the consumer.
    s.cmd(&["XGROUP", "CREATE", a, "g", "$"]);
    let r = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    s.cmd(&["XADD", a, "*", "f", "10"]);
    s.woken(1, &r);
    s.cmd(&["XPENDING", a, "g"]);
    // Consumers of one group are served in the order they blocked: the first takes the
    // entry, the second waits for the next one.
    let r1 = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "COUNT",
            "10",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    let r2 = s.block(
        2,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "BLOCK",
            "0",
            "COUNT",
            "10",
            "STREAMS",
            a,
            ">",
        ],
        2,
    );
    s.cmd(&["XADD", a, "*", "f", "11"]);
    s.woken(1, &r1);
    s.blocked(1);
    s.cmd(&["XADD", a, "*", "f", "12"]);
    s.woken(2, &r2);
    s.blocked(0);
    s.cmd(&["XPENDING", a, "g", "-", "+", "10"]);
    s.cmd(&["XINFO", "CONSUMERS", a, "g"]);
    // NOACK: delivered, not pending.
    let r = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "carol",
            "NOACK",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    s.cmd(&["XADD", a, "*", "f", "13"]);
    s.woken(1, &r);
    s.cmd(&["XPENDING", a, "g"]);
    // On two keys on different shards.
    s.cmd(&["XGROUP", "CREATE", b, "g", "$"]);
    let r = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "dave",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            b,
            ">",
            ">",
        ],
        1,
    );
    s.cmd(&["XADD", b, "*", "f", "14"]);
    s.woken(1, &r);
    // Timeouts: nil, and no consumer is made.
    s.run(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "erin",
            "BLOCK",
            "30",
            "STREAMS",
            a,
            ">",
        ],
    );
    s.run(1, &["XREAD", "BLOCK", "30", "STREAMS", a, b, "$", "$"]);
    s.cmd(&["XINFO", "CONSUMERS", a, "g"]);
    s.cmd(&["XINFO", "STREAM", a, "FULL"]);

    // A destroyed group: NOGROUP.
    let r = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    s.cmd(&["XGROUP", "DESTROY", a, "g"]);
    s.woken(1, &r);
    // A deleted key: UNBLOCKED for a group's reader, while XREAD stays blocked until the key
    // has a new entry (a later millisecond, so above the id it waits to pass).
    s.cmd(&["XGROUP", "CREATE", a, "g2", "$"]);
    let r1 = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g2",
            "alice",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    let r2 = s.block(2, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 2);
    s.cmd(&["DEL", a]);
    s.woken(1, &r1);
    s.still_blocked(1);
    s.cmd(&["XADD", a, "*", "f", "15"]);
    s.woken(2, &r2);
    // An overwritten key: UNBLOCKED for a group's reader; XREAD waits on.
    s.cmd(&["XGROUP", "CREATE", a, "g3", "$"]);
    let r1 = s.block(
        1,
        &[
            "XREADGROUP",
            "GROUP",
            "g3",
            "bob",
            "BLOCK",
            "0",
            "STREAMS",
            a,
            ">",
        ],
        1,
    );
    let r2 = s.block(2, &["XREAD", "BLOCK", "0", "STREAMS", a, "$"], 2);
    s.cmd(&["SET", a, "x"]);
    s.woken(1, &r1);
    s.still_blocked(1);
    s.cmd(&["DEL", a]);
    std::thread::sleep(Duration::from_millis(5));
    s.cmd(&["XADD", a, "*", "f", "16"]);
    s.woken(2, &r2);
    // MULTI never blocks: nil at once.
    s.cmd(&["XGROUP", "CREATE", a, "g", "$"]);
    s.cmd(&["MULTI"]);
    s.cmd(&["XREAD", "BLOCK", "0", "STREAMS", a, "$"]);
    s.cmd(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "x",
        "BLOCK",
        "0",
        "STREAMS",
        a,
        ">",
    ]);
    s.cmd(&["EXEC"]);
    s.cmd(&["XINFO", "STREAM", a, "FULL"]);
    s.d.finish();
}

/// The soak's size: `STREAMS_SOAK_ENTRIES`, or 100,000 entries.
fn soak_entries() -> usize {
    std::env::var("STREAMS_SOAK_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

const SOAK_THREADS: usize = 4;
const SOAK_PRODUCERS: usize = 8;
const SOAK_CONSUMERS: usize = 8;

/// One delivery: the key, the entry id and the entry's number.
type Delivery = (String, String, usize);

/// Raises `stop` when the thread holding it panics, so that the others end at once.
struct StopOnPanic(Arc<AtomicBool>);

impl Drop for StopOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

/// Adds entries `p`, `p + SOAK_PRODUCERS`, ... below `entries`, entry `n` to key `n % keys`,
/// 100 at a time pipelined.
fn produce(port: u16, p: usize, keys: &[String], entries: usize, stop: Arc<AtomicBool>) {
    let _stop = StopOnPanic(stop);
    let mut c = Raw::tcp(port);
    let mine: Vec<usize> = (p..entries).step_by(SOAK_PRODUCERS).collect();
    for batch in mine.chunks(100) {
        let wire: Vec<u8> = batch
            .iter()
            .flat_map(|n| encode(&["XADD", &keys[n % keys.len()], "*", "n", &n.to_string()]))
            .collect();
        c.send(&wire);
        for n in batch {
            let reply = c.reply();
            assert!(
                reply.starts_with(b"$"),
                "XADD of entry {n}: {:?}",
                show(&reply)
            );
        }
    }
}

/// Reads as consumer `c<i>` of group `g` on every key until `acked` reaches `entries` (or
/// another thread failed), acking each entry on its own (XACK must answer 1); returns what it
/// got.
fn consume(
    port: u16,
    i: usize,
    keys: &[String],
    acked: &AtomicUsize,
    entries: usize,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) -> Vec<Delivery> {
    let stop = StopOnPanic(stop);
    let mut c = Raw::tcp(port);
    let consumer = format!("c{i}");
    let mut read = strings(&["XREADGROUP", "GROUP", "g", &consumer, "COUNT", "100"]);
    read.extend(strings(&["BLOCK", "100", "STREAMS"]));
    read.extend(keys.iter().cloned());
    read.extend(keys.iter().map(|_| ">".to_string()));
    let mut got = Vec::new();
    while acked.load(Ordering::SeqCst) < entries && !stop.0.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "{consumer}: {} of {entries} entries acked when time ran out",
            acked.load(Ordering::SeqCst)
        );
        let raw = c.cmd(&read);
        let reply = parse(&raw);
        assert!(reply.kind() == b'*', "{consumer}: {:?}", show(&raw));
        let mut batch: Vec<Delivery> = Vec::new();
        for stream in &reply.items {
            let key = show(text(&stream.items[0]).unwrap_or_default());
            for entry in &stream.items[1].items {
                let id = show(text(&entry.items[0]).unwrap_or_default());
                let n = text(&entry.items[1].items[1])
                    .and_then(|v| show(v).parse().ok())
                    .unwrap_or_else(|| panic!("{consumer}: entry {:?}", encoded(entry)));
                batch.push((key.clone(), id, n));
            }
        }
        let wire: Vec<u8> = batch
            .iter()
            .flat_map(|(key, id, _)| encode(&["XACK", key, "g", id]))
            .collect();
        c.send(&wire);
        for (key, id, n) in &batch {
            let reply = c.reply();
            assert_eq!(
                show(&reply),
                ":1\r\n",
                "{consumer}: XACK {key} g {id} (entry {n})"
            );
        }
        acked.fetch_add(batch.len(), Ordering::SeqCst);
        got.extend(batch);
    }
    got
}

/// Producers on every shard and consumers of one group spread over every thread: each entry is
/// delivered to exactly one consumer and acked exactly once, and nothing stays pending.
fn stream_consumer_group_soak(b: Backend) {
    let entries = soak_entries();
    let server = under_test(b, SOAK_THREADS);
    let mut keys: Vec<String> = Vec::new();
    for i in 0.. {
        let key = format!("soak{i}");
        let shard = shard_for_key(key.as_bytes(), SOAK_THREADS);
        if keys
            .iter()
            .all(|k| shard_for_key(k.as_bytes(), SOAK_THREADS) != shard)
        {
            keys.push(key);
        }
        if keys.len() == SOAK_THREADS {
            break;
        }
    }
    let mut admin = server.raw();
    for key in &keys {
        assert_eq!(
            admin.cmd(&["XGROUP", "CREATE", key, "g", "$", "MKSTREAM"]),
            b"+OK\r\n"
        );
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    let acked = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let consumers: Vec<_> = (0..SOAK_CONSUMERS)
        .map(|i| {
            let (keys, acked, stop) = (keys.clone(), acked.clone(), stop.clone());
            std::thread::spawn(move || consume(port, i, &keys, &acked, entries, deadline, stop))
        })
        .collect();
    let producers: Vec<_> = (0..SOAK_PRODUCERS)
        .map(|p| {
            let (keys, stop) = (keys.clone(), stop.clone());
            std::thread::spawn(move || produce(port, p, &keys, entries, stop))
        })
        .collect();
    for p in producers {
        p.join().expect("a producer failed");
    }
    let mut all: Vec<Delivery> = Vec::new();
    let mut per_consumer = Vec::new();
    for c in consumers {
        let got = c.join().expect("a consumer failed");
        per_consumer.push(got.len());
        all.extend(got);
    }
    let mut numbers: Vec<usize> = all.iter().map(|d| d.2).collect();
    numbers.sort_unstable();
    let missing = (0..entries)
        .filter(|n| numbers.binary_search(n).is_err())
        .count();
    numbers.dedup();
    assert_eq!(
        (all.len(), missing),
        (entries, 0),
        "deliveries (each entry exactly once) and entries never delivered"
    );
    assert_eq!(numbers.len(), entries);
    let mut total = 0;
    for key in &keys {
        assert_eq!(
            admin.cmd(&["XPENDING", key, "g"]),
            b"*4\r\n:0\r\n$-1\r\n$-1\r\n*-1\r\n",
            "nothing pending on {key}"
        );
        let len = show(&admin.cmd(&["XLEN", key]));
        total += len[1..].trim().parse::<usize>().unwrap_or(0);
    }
    assert_eq!(total, entries, "XLEN over the keys");
    // Acking again finds nothing.
    for (key, id, _) in all.iter().step_by((entries / 100).max(1)) {
        assert_eq!(admin.cmd(&["XACK", key, "g", id]), b":0\r\n");
    }
    eprintln!(
        "stream_consumer_group_soak: {entries} entries in {:?}, per consumer {per_consumer:?}",
        started.elapsed()
    );
}

thread_count_tests!(streams_like_redis, stream_blocking_like_redis);
backend_tests!(stream_consumer_group_soak);
