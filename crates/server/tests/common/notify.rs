//! Keyspace notifications compared with redis-server: a client runs commands one at a time on
//! each server while a subscriber listens to every `__keyspace@*__` and `__keyevent@*__`
//! channel; after each command the events each server published are compared.

use super::diff::{agree, parse, Check, Node};
use super::{Raw, Server};

/// The channel marking the end of one command's events: published by the commanding client
/// after its command, it reaches the subscriber after every event of that command (on
/// Damselfly too: the events left their shard before its reply did).
const SYNC: &str = "__notify_sync__";

/// One server's side: the client that runs commands and the subscriber.
pub struct Listener {
    pub client: Raw,
    subscriber: Raw,
    step: usize,
}

impl Listener {
    /// Sets `notify-keyspace-events` to `flags` and subscribes to every notification.
    pub fn new(server: &Server, flags: &str) -> Listener {
        let mut client = server.raw();
        let set = client.cmd(&["CONFIG", "SET", "notify-keyspace-events", flags]);
        assert_eq!(set, b"+OK\r\n", "CONFIG SET notify-keyspace-events {flags}");
        let mut subscriber = server.raw();
        subscriber.cmd(&["PSUBSCRIBE", "__key*__:*"]);
        subscriber.cmd(&["SUBSCRIBE", SYNC]);
        Listener {
            client,
            subscriber,
            step: 0,
        }
    }

    /// Runs one command; returns its reply and the events it caused, as
    /// `channel message` strings, in the order they arrived.
    pub fn run(&mut self, cmd: &[String]) -> (Vec<u8>, Vec<String>) {
        let reply = self.client.cmd(cmd);
        (reply, self.events_until_sync())
    }

    /// Events published since the last call (e.g. by expiry), up to a sync point.
    pub fn events_until_sync(&mut self) -> Vec<String> {
        self.step += 1;
        let marker = self.step.to_string();
        self.client.cmd(&["PUBLISH", SYNC, &marker]);
        let mut events = Vec::new();
        loop {
            let frame: Node = parse(&self.subscriber.reply());
            let words: Vec<String> = frame
                .items
                .iter()
                .map(|i| {
                    String::from_utf8_lossy(&i.body[..i.body.len().saturating_sub(2)]).into_owned()
                })
                .collect();
            match words.first().map(String::as_str) {
                Some("message") if words.get(1).map(String::as_str) == Some(SYNC) => {
                    if words.get(2) == Some(&marker) {
                        return events;
                    }
                }
                Some("pmessage") if words.len() == 4 => {
                    events.push(format!("{} {}", words[2], words[3]));
                }
                _ => panic!("unexpected frame on the subscriber: {frame:?}"),
            }
        }
    }
}

/// The key an event names: the keyspace channel's suffix, or a keyevent message.
fn event_key(event: &str) -> &str {
    match event.split_once(' ') {
        Some((channel, message)) if channel.starts_with("__keyevent@") => message,
        Some((channel, _)) => channel.split_once("__:").map_or(channel, |(_, k)| k),
        None => event,
    }
}

/// Whether two event sequences of one command agree: equal, or (when the command's keys
/// live on several of Damselfly's shards, whose parts run in parallel) the same events with
/// each key's events in the same order.
pub fn events_agree(ours: &[String], theirs: &[String], spans_shards: bool) -> bool {
    if ours == theirs {
        return true;
    }
    if !spans_shards {
        return false;
    }
    let (mut a, mut b) = (ours.to_vec(), theirs.to_vec());
    a.sort();
    b.sort();
    if a != b {
        return false;
    }
    let keys: std::collections::BTreeSet<&str> = ours.iter().map(|e| event_key(e)).collect();
    keys.iter().all(|k| {
        let of = |v: &[String]| -> Vec<String> {
            v.iter().filter(|e| event_key(e) == *k).cloned().collect()
        };
        of(ours) == of(theirs)
    })
}

/// Runs `cmds` on both servers with `notify-keyspace-events` set to `flags`, comparing each
/// command's reply and events; `threads` is Damselfly's thread count (to tell which commands
/// span shards). Returns every difference.
pub fn differences(
    redis: &Server,
    ours: &Server,
    threads: usize,
    flags: &str,
    cmds: &[Vec<String>],
) -> Vec<String> {
    let checked: Vec<(Vec<String>, Check)> =
        cmds.iter().map(|c| (c.clone(), Check::Exact)).collect();
    differences_checked(redis, ours, threads, flags, &checked)
}

/// [`differences`], each reply compared by its command's [`Check`] (the ones that need no
/// further commands: exact, unordered, shape), for commands with a random or unordered reply.
pub fn differences_checked(
    redis: &Server,
    ours: &Server,
    threads: usize,
    flags: &str,
    cmds: &[(Vec<String>, Check)],
) -> Vec<String> {
    let mut theirs = Listener::new(redis, flags);
    let mut mine = Listener::new(ours, flags);
    let mut found = Vec::new();
    for (i, (cmd, check)) in cmds.iter().enumerate() {
        let (their_reply, their_events) = theirs.run(cmd);
        let (my_reply, my_events) = mine.run(cmd);
        let spans = spans_shards(&mut theirs.client, cmd, threads);
        if !agree(*check, &my_reply, &their_reply)
            || !events_agree(&my_events, &their_events, spans)
        {
            found.push(format!(
                "#{i} {cmd:?}\n  reply ours:  {:?}\n  reply redis: {:?}\n  events ours:  {my_events:?}\n  events redis: {their_events:?}",
                String::from_utf8_lossy(&my_reply),
                String::from_utf8_lossy(&their_reply),
            ));
        }
    }
    found
}

/// True when the command's keys (as Redis's COMMAND GETKEYS finds them) live on more than
/// one of `threads` shards.
fn spans_shards(redis: &mut Raw, cmd: &[String], threads: usize) -> bool {
    let mut getkeys = vec!["COMMAND".to_string(), "GETKEYS".to_string()];
    getkeys.extend(cmd.iter().cloned());
    let reply = parse(&redis.cmd(&getkeys));
    let shards: std::collections::BTreeSet<usize> = reply
        .items
        .iter()
        .map(|k| {
            damselfly_storage::shard_for_key(&k.body[..k.body.len().saturating_sub(2)], threads)
        })
        .collect();
    shards.len() > 1
}
