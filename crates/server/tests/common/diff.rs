//! A differential runner for the data-type families: a generator's seeded command stream goes
//! to redis-server and to Damselfly, pipelined, and each pair of replies is compared by the
//! rule the command calls for: byte for byte, as unordered collections, by shape for random
//! reads, or, for random pops, by removing what Damselfly popped from Redis's copy (which
//! both checks the pop and keeps the two servers' data identical).

#![allow(dead_code)]

use super::{encode, Raw};

/// How two replies to one command must agree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Exact,
    /// Same items in any order (SMEMBERS, SUNION, HKEYS...).
    Unordered,
    /// Same pairs in any order (HGETALL; maps in RESP3).
    UnorderedPairs,
    /// Same reply type and item count (SRANDMEMBER, HRANDFIELD, ZRANDMEMBER).
    Shape,
    /// A random removal (SPOP): `remove` is the command that removes the popped items from
    /// Redis's copy, `card` the command that counts the collection first.
    Pop {
        remove: &'static str,
        card: &'static str,
    },
    /// A cursor scan: both sides are iterated to the end and the items compared as a set
    /// (`pairs` when items come as field/value or member/score pairs).
    Scan {
        pairs: bool,
    },
}

/// One parsed reply: its header line and nested items.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Node {
    pub head: Vec<u8>,
    pub body: Vec<u8>,
    pub items: Vec<Node>,
}

impl Node {
    pub fn kind(&self) -> u8 {
        self.head.first().copied().unwrap_or(b'?')
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.head);
        out.extend_from_slice(&self.body);
        for i in &self.items {
            i.encode(out);
        }
    }
}

pub fn parse(buf: &[u8]) -> Node {
    let mut pos = 0;
    parse_at(buf, &mut pos)
}

fn parse_at(buf: &[u8], pos: &mut usize) -> Node {
    let end = buf[*pos..]
        .windows(2)
        .position(|w| w == b"\r\n")
        .map_or(buf.len(), |p| *pos + p + 2);
    let head = buf[*pos..end].to_vec();
    *pos = end;
    let n: i64 = std::str::from_utf8(&head[1..head.len().saturating_sub(2)])
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(-1);
    let mut node = Node {
        head,
        body: Vec::new(),
        items: Vec::new(),
    };
    match node.kind() {
        b'$' | b'=' | b'!' if n >= 0 => {
            node.body = buf[*pos..*pos + n as usize + 2].to_vec();
            *pos += n as usize + 2;
        }
        b'*' | b'~' | b'>' => {
            for _ in 0..n.max(0) {
                node.items.push(parse_at(buf, pos));
            }
        }
        b'%' | b'|' => {
            for _ in 0..n.max(0) * 2 {
                node.items.push(parse_at(buf, pos));
            }
        }
        _ => {}
    }
    node
}

/// The bulk strings of a reply: its items, or itself when it is one bulk.
fn bulks(n: &Node) -> Vec<Vec<u8>> {
    let strip = |b: &[u8]| b[..b.len().saturating_sub(2)].to_vec();
    if n.items.is_empty() && !n.body.is_empty() {
        return vec![strip(&n.body)];
    }
    n.items.iter().map(|i| strip(&i.body)).collect()
}

fn sorted_items(n: &Node) -> Vec<Node> {
    let mut v = n.items.clone();
    v.sort();
    v
}

fn sorted_pairs(n: &Node) -> Vec<(Node, Node)> {
    let mut v: Vec<(Node, Node)> = n
        .items
        .chunks(2)
        .map(|c| {
            (
                c[0].clone(),
                c.get(1).cloned().unwrap_or_else(|| c[0].clone()),
            )
        })
        .collect();
    v.sort();
    v
}

/// Whether two replies agree under a check that needs no further commands.
pub fn agree(check: Check, ours: &[u8], theirs: &[u8]) -> bool {
    if ours == theirs {
        return true;
    }
    let (a, b) = (parse(ours), parse(theirs));
    if a.kind() == b'-' || b.kind() == b'-' {
        return false;
    }
    match check {
        Check::Unordered => a.head == b.head && sorted_items(&a) == sorted_items(&b),
        Check::UnorderedPairs => a.head == b.head && sorted_pairs(&a) == sorted_pairs(&b),
        Check::Shape => {
            let null = |n: &Node| n.head.starts_with(b"$-1") || n.head.starts_with(b"*-1");
            a.kind() == b.kind() && a.items.len() == b.items.len() && null(&a) == null(&b)
        }
        _ => false,
    }
}

/// A generator of one family's commands.
pub trait Family {
    fn command(&mut self) -> (Vec<String>, Check);
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Where a pipelined batch runs a span of its commands as one MULTI/EXEC transaction: every
/// fourth batch, a span of 1 to 6 commands, so transactions (and multi-key commands inside
/// them) cross shards in every run.
pub fn transaction_span(flushes: usize, len: usize) -> Option<(usize, usize)> {
    if !flushes.is_multiple_of(4) || len == 0 {
        return None;
    }
    let start = len / 3;
    Some((start, (start + 1 + flushes / 4 % 6).min(len)))
}

/// The wire bytes of a batch, with MULTI and EXEC around `tx`'s span.
pub fn batch_wire<S: AsRef<[u8]>>(cmds: &[&[S]], tx: Option<(usize, usize)>) -> Vec<u8> {
    let mut wire = Vec::new();
    for (i, c) in cmds.iter().enumerate() {
        if tx.is_some_and(|(start, _)| start == i) {
            wire.extend(encode(&["MULTI"]));
        }
        wire.extend(encode(c));
        if tx.is_some_and(|(_, end)| end == i + 1) {
            wire.extend(encode(&["EXEC"]));
        }
    }
    wire
}

/// Whether two EXEC replies agree: identical, or arrays of as many replies as `checks`, each
/// pair agreeing under its command's rule (via `item`).
pub fn exec_agrees<C>(
    checks: &[C],
    ours: &[u8],
    theirs: &[u8],
    item: impl Fn(&C, &[u8], &[u8]) -> bool,
) -> bool {
    if ours == theirs {
        return true;
    }
    let (a, b) = (parse(ours), parse(theirs));
    a.kind() == b'*'
        && a.head == b.head
        && a.items.len() == checks.len()
        && checks
            .iter()
            .zip(a.items.iter().zip(&b.items))
            .all(|(c, (x, y))| item(c, &encoded(x), &encoded(y)))
}

/// Runs `count` generated commands against both servers, sampling the keyspace into `seen`
/// after each transaction.
pub fn run(
    family: &mut dyn Family,
    redis: &mut Raw,
    ours: &mut Raw,
    count: usize,
    label: &str,
    seen: &mut KeysSeen,
) {
    const CHUNK: usize = 40;
    let mut history: Vec<Vec<String>> = Vec::new();
    let mut sent = 0;
    let mut flushes = 0;
    let mut batch: Vec<(Vec<String>, Check)> = Vec::new();
    while sent < count {
        let (cmd, check) = family.command();
        history.push(cmd.clone());
        sent += 1;
        let immediate = matches!(check, Check::Pop { .. } | Check::Scan { .. });
        if !immediate {
            batch.push((cmd.clone(), check));
        }
        if immediate || batch.len() == CHUNK || sent == count {
            flushes += 1;
            let tx = transaction_span(flushes, batch.len());
            if let Some((start, end)) = tx {
                // Keep the history replayable (DIFF_DUMP): the batch ends it, but for `cmd`
                // when that runs on its own.
                let first = history.len() - batch.len() - usize::from(immediate);
                history.insert(first + end, vec!["EXEC".into()]);
                history.insert(first + start, vec!["MULTI".into()]);
            }
            let cmds: Vec<&[String]> = batch.iter().map(|(c, _)| c.as_slice()).collect();
            let wire = batch_wire(&cmds, tx);
            redis.send(&wire);
            ours.send(&wire);
            let fail = |c: &[String], what: String| {
                report(&history, c);
                if let Ok(path) = std::env::var("DIFF_DUMP") {
                    let text: Vec<String> = history.iter().map(|c| c.join("\u{1}")).collect();
                    let _ = std::fs::write(path, text.join("\n"));
                }
                panic!("{label}: {what}");
            };
            for (i, (c, check)) in batch.iter().enumerate() {
                let in_tx = tx.is_some_and(|(start, end)| (start..end).contains(&i));
                if tx.is_some_and(|(start, _)| start == i) {
                    let (theirs, mine) = (redis.reply(), ours.reply());
                    if mine != theirs {
                        fail(
                            c,
                            format!(
                                "MULTI: redis {:?}, damselfly {:?}",
                                show(&theirs),
                                show(&mine)
                            ),
                        );
                    }
                }
                let (theirs, mine) = (redis.reply(), ours.reply());
                // Inside MULTI the reply is +QUEUED or a queueing error: the same on both.
                let check = if in_tx { Check::Exact } else { *check };
                if !agree(check, &mine, &theirs) {
                    fail(
                        c,
                        format!(
                            "{c:?} ({check:?}{})\n redis:     {:?}\n damselfly: {:?}",
                            if in_tx { ", queued in MULTI" } else { "" },
                            show(&theirs),
                            show(&mine)
                        ),
                    );
                }
                if let Some((start, end)) = tx.filter(|&(_, end)| end == i + 1) {
                    let (theirs, mine) = (redis.reply(), ours.reply());
                    let checks: Vec<Check> = batch[start..end].iter().map(|(_, k)| *k).collect();
                    if !exec_agrees(&checks, &mine, &theirs, |k, a, b| agree(*k, a, b)) {
                        fail(
                            c,
                            format!(
                                "EXEC of {:?}\n redis:     {:?}\n damselfly: {:?}",
                                &batch[start..end],
                                show(&theirs),
                                show(&mine)
                            ),
                        );
                    }
                }
            }
            batch.clear();
            if tx.is_some() {
                seen.sample(redis);
            }
        }
        match check {
            Check::Pop { remove, card } => pop(&cmd, remove, card, redis, ours, label),
            Check::Scan { pairs } => {
                let (a, b) = (scan_all(&cmd, pairs, redis), scan_all(&cmd, pairs, ours));
                assert_eq!(b, a, "{label}: {cmd:?}");
            }
            _ => {}
        }
    }
}

/// Prints the earlier commands that named the failing command's last argument or keys.
fn report(history: &[Vec<String>], c: &[String]) {
    let names: Vec<&String> = c.iter().skip(1).filter(|a| !a.is_empty()).collect();
    eprintln!("history of {names:?}:");
    for h in history
        .iter()
        .filter(|h| h.iter().skip(1).any(|a| names.contains(&a)))
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
    {
        eprintln!("  {h:?}");
    }
}

/// A random pop: Damselfly pops; Redis removes exactly what Damselfly popped.
fn pop(cmd: &[String], remove: &str, card: &str, redis: &mut Raw, ours: &mut Raw, label: &str) {
    let mine = ours.cmd(cmd);
    let node = parse(&mine);
    let popped = bulks(&node);
    let empty = node.kind() == b'-'
        || popped.is_empty()
        || node.head.starts_with(b"$-1")
        || node.kind() == b'_';
    if empty {
        let theirs = redis.cmd(cmd);
        assert_eq!(show(&mine), show(&theirs), "{label}: {cmd:?}");
        return;
    }
    let size = redis.cmd(&[card, cmd[1].as_str()]);
    let size: usize = show(&size[1..]).trim().parse().unwrap_or(0);
    let wanted = cmd
        .get(2)
        .and_then(|c| c.parse::<usize>().ok())
        .map_or(1, |c| c.min(size));
    assert_eq!(
        popped.len(),
        wanted,
        "{label}: {cmd:?} popped {popped:?} from {size}"
    );
    let mut rm: Vec<Vec<u8>> = vec![remove.as_bytes().to_vec(), cmd[1].as_bytes().to_vec()];
    rm.extend(popped.iter().cloned());
    let removed = redis.cmd(&rm);
    assert_eq!(
        show(&removed),
        format!(":{}\r\n", popped.len()),
        "{label}: {cmd:?} popped {popped:?}, not all of them distinct members"
    );
}

/// Iterates a scan command to the end; returns every item (or pair), sorted and deduplicated.
fn scan_all(cmd: &[String], pairs: bool, c: &mut Raw) -> Vec<Vec<Vec<u8>>> {
    let mut cmd = cmd.to_vec();
    let mut out = Vec::new();
    for _ in 0..100_000 {
        let reply = parse(&c.cmd(&cmd));
        if reply.kind() == b'-' || reply.items.len() != 2 {
            return vec![vec![reply.head]];
        }
        let cursor = bulks(&reply.items[0]).concat();
        let items = bulks(&reply.items[1]);
        if pairs {
            out.extend(items.chunks(2).map(|p| p.to_vec()));
        } else {
            out.extend(items.into_iter().map(|i| vec![i]));
        }
        if cursor == b"0" {
            break;
        }
        cmd[2] = String::from_utf8_lossy(&cursor).into_owned();
    }
    out.sort();
    out.dedup();
    out
}

/// Encodes a node back to bytes (for messages).
pub fn encoded(n: &Node) -> Vec<u8> {
    let mut out = Vec::new();
    n.encode(&mut out);
    out
}

/// The bulk string bodies of an array reply (KEYS), without their line ends.
fn items_of(reply: &[u8]) -> Vec<Vec<u8>> {
    parse(reply)
        .items
        .iter()
        .map(|i| i.body[..i.body.len().saturating_sub(2)].to_vec())
        .collect()
}

/// The first difference between the two servers' current databases, or None: the same keys,
/// and for each the same type, value (strings by GET, lists by LRANGE and sorted sets by
/// ZRANGE WITHSCORES exactly, hashes by HGETALL and sets by SMEMBERS in any order) and the same
/// presence of a TTL (its value is a clock reading, so only -1 against positive is compared).
pub fn state_difference(redis: &mut Raw, ours: &mut Raw) -> Option<String> {
    let mut keys = items_of(&redis.cmd(&["KEYS", "*"]));
    let mut ours_keys = items_of(&ours.cmd(&["KEYS", "*"]));
    keys.sort();
    ours_keys.sort();
    if keys != ours_keys {
        let only = |a: &[Vec<u8>], b: &[Vec<u8>]| -> Vec<String> {
            a.iter()
                .filter(|k| !b.contains(k))
                .map(|k| show(k))
                .collect()
        };
        return Some(format!(
            "keys only in redis: {:?}, only in damselfly: {:?}",
            only(&keys, &ours_keys),
            only(&ours_keys, &keys)
        ));
    }
    for key in keys {
        let name = show(&key);
        let ty = redis.cmd(&[&b"TYPE"[..], &key]);
        let ours_ty = ours.cmd(&[&b"TYPE"[..], &key]);
        if ty != ours_ty {
            return Some(format!(
                "type of {name:?}: redis {:?}, damselfly {:?}",
                show(&ty),
                show(&ours_ty)
            ));
        }
        let (read, check): (&[&[u8]], Check) = match ty.as_slice() {
            b"+string\r\n" => (&[b"GET"], Check::Exact),
            b"+hash\r\n" => (&[b"HGETALL"], Check::UnorderedPairs),
            b"+list\r\n" => (&[b"LRANGE", b"0", b"-1"], Check::Exact),
            b"+set\r\n" => (&[b"SMEMBERS"], Check::Unordered),
            b"+zset\r\n" => (&[b"ZRANGE", b"0", b"-1", b"WITHSCORES"], Check::Exact),
            b"+stream\r\n" => (&[b"XRANGE", b"-", b"+"], Check::Exact),
            _ => {
                return Some(format!(
                    "{name:?} has a type this check does not know: {ty:?}"
                ))
            }
        };
        let mut args: Vec<&[u8]> = vec![read[0], &key];
        args.extend_from_slice(&read[1..]);
        let (theirs, mine) = (redis.cmd(&args), ours.cmd(&args));
        if !agree(check, &mine, &theirs) {
            return Some(format!(
                "value of {name:?} ({check:?}):\n redis:     {:?}\n damselfly: {:?}",
                show(&theirs),
                show(&mine)
            ));
        }
        let has_ttl = |reply: &[u8]| match reply {
            b":-1\r\n" => "no TTL".to_string(),
            r if r.starts_with(b":") && !r.starts_with(b":-") => "a TTL".to_string(),
            r => format!("PTTL {:?}", show(r)),
        };
        let (theirs, mine) = (
            has_ttl(&redis.cmd(&[&b"PTTL"[..], &key])),
            has_ttl(&ours.cmd(&[&b"PTTL"[..], &key])),
        );
        if theirs != mine {
            return Some(format!("{name:?}: redis has {theirs}, damselfly {mine}"));
        }
    }
    None
}

/// Keys sampled from a server's keyspace during a run (KEYS, sent to Redis only, which does
/// not expire keys on KEYS), to check afterwards that a stream run with N threads put keys on
/// every shard and so ran commands across all of them.
#[derive(Default)]
pub struct KeysSeen(std::collections::BTreeSet<Vec<u8>>);

impl KeysSeen {
    pub fn sample(&mut self, redis: &mut Raw) {
        self.0.extend(items_of(&redis.cmd(&["KEYS", "*"])));
    }

    pub fn assert_on_every_shard(&self, threads: usize) {
        let shards: std::collections::BTreeSet<usize> = self
            .0
            .iter()
            .map(|k| damselfly_storage::shard_for_key(k, threads))
            .collect();
        assert_eq!(
            shards.len(),
            threads,
            "the stream's keys lay on shards {shards:?} of {threads} only"
        );
    }
}
