//! Pub/Sub (docs/pubsub.md): SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their opposites, PUBLISH,
//! SPUBLISH and PUBSUB; the worker's part of the fan-out; a connection's Pub/Sub state.
//!
//! Each thread holds a replica of every subscription ([`Directory`]) and its own subscribed
//! clients ([`Subscribers`]). A subscription change is applied on the subscriber's thread,
//! then sent to every other thread; SUBSCRIBE and UNSUBSCRIBE reply once every thread has
//! applied it, so a PUBLISH issued after the reply, from any thread, counts and reaches the
//! client. PUBLISH reads its own thread's replica for the count and the threads to send to,
//! delivers on its thread directly (after the messages other threads published here before
//! it) and sends the message to the others' mailboxes: one sending thread's messages arrive
//! in the order sent, so one publisher's messages reach a subscriber in publish order.

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use damselfly_commands::errors;
use damselfly_commands::table::{flags, CommandSpec};
use damselfly_commands::Args;
use damselfly_pubsub::{
    monitor_line, Audience, Change, ClientSubscriptions, Directory, Inbox, Kind, Message,
    Subscribers,
};
use damselfly_storage::notify::{class, Event};
use futures_channel::oneshot;

use crate::connection::{Connection, ReplyMode};
use crate::messages::ShardMsg;
use crate::worker::Worker;

/// From this many recipients a message's wake-ups of other threads wait for the end of the
/// round (`Worker::publish`). Measured with `damselfly-bench pubsub`: with 1,000 subscribers
/// waking at the end of the round cut the sends per message by a tenth and CPU per message
/// by 0-7%; with one subscriber, where there are few sends to save, runs that did so were
/// slower more often than not (within this machine's noise).
const DEFER_WAKES_FROM: u64 = 16;

/// What a publish reached.
pub struct Published {
    /// How many clients receive it (PUBLISH's reply).
    pub receivers: u64,
    /// The thread all of them live on, when one does: a publishing connection moves there
    /// once its messages keep going to one other thread (crates/coord/src/affinity.rs).
    pub only_thread: Option<usize>,
}

/// A thread's Pub/Sub state, kept by its worker.
pub(crate) struct ThreadPubSub {
    pub directory: Directory,
    pub subscribers: Subscribers,
    /// Every client's CLIENT TRACKING BCAST prefixes.
    pub bcast: crate::tracking_family::BcastDirectory,
    /// Scratch for the threads a message goes to.
    targets: Vec<bool>,
    /// Threads sent messages without a wake-up yet (`send_owed_wakes`).
    wakes_owed: Vec<usize>,
}

impl ThreadPubSub {
    pub fn new(threads: usize) -> ThreadPubSub {
        ThreadPubSub {
            directory: Directory::new(threads),
            subscribers: Subscribers::default(),
            bcast: Default::default(),
            targets: vec![false; threads],
            wakes_owed: Vec::new(),
        }
    }
}

/// A connection's Pub/Sub state.
#[derive(Default)]
pub(crate) struct ConnPubSub {
    pub subs: ClientSubscriptions,
    /// During a script run, what it publishes waits here until the run is final: a run that
    /// is taken back and run again must not publish twice.
    pub held: Option<Vec<Message>>,
    /// While EXEC runs, messages to this client go out after EXEC's reply.
    pub after_reply: bool,
    /// Since when the output has been over the soft limit of the pubsub class.
    pub over_soft_since: Option<Instant>,
}

impl Worker {
    /// Publishes a message from this thread: delivered here directly, sent to every other
    /// thread with a recipient. Returns how many clients receive it.
    ///
    /// Messages other threads published to this one and still in its mailbox are delivered
    /// first: their publishers may already have answered the client whose command publishes
    /// now (a served blocker's events, then that client's PUBLISH), and a subscriber must see
    /// them in that order. Other mailbox messages wait for the loop as before; none of them
    /// has had an effect a client could have seen.
    ///
    /// A message with many recipients is queued to other threads without waking them; the
    /// wake-ups go out when this thread's round or message is done (`send_owed_wakes`), so
    /// a receiving thread takes all of a round's messages (a pipeline of PUBLISHes) at once
    /// and each of its subscribers writes them with one system call, not one per message.
    /// With few recipients the receiving thread is woken at once: there the system calls
    /// saved are few and the delivery's latency counts more.
    pub fn publish(&self, mut msg: Message) -> Published {
        let mut ps = self.pubsub.borrow_mut();
        let ps = &mut *ps;
        ps.targets.fill(false);
        msg.patterns.clear();
        let count = ps.directory.recipients(
            msg.audience,
            &msg.channel,
            &mut ps.targets,
            &mut msg.patterns,
        );
        let mut reached = ps.targets.iter().enumerate().filter(|&(_, &on)| on);
        let published = Published {
            receivers: count,
            only_thread: match (reached.next(), reached.next()) {
                (Some((t, _)), None) => Some(t),
                _ => None,
            },
        };
        if count == 0 {
            return published;
        }
        let remote = ps
            .targets
            .iter()
            .enumerate()
            .any(|(t, &on)| on && t != self.id);
        if ps.targets.get(self.id).copied().unwrap_or(false) {
            if self.cluster.mailboxes[self.id].has_pending() {
                self.mailbox.take_ahead(|m| match m {
                    ShardMsg::Publish(earlier) => {
                        ps.subscribers.deliver(&earlier);
                        None
                    }
                    other => Some(other),
                });
            }
            ps.subscribers.deliver(&msg);
        }
        if remote {
            let shared = Arc::new(msg);
            for (t, _) in ps
                .targets
                .iter()
                .enumerate()
                .filter(|&(t, &on)| on && t != self.id)
            {
                let mailbox = &self.cluster.mailboxes[t];
                if count < DEFER_WAKES_FROM {
                    mailbox.send(ShardMsg::Publish(shared.clone()));
                    continue;
                }
                mailbox.send_quiet(ShardMsg::Publish(shared.clone()));
                if !ps.wakes_owed.contains(&t) {
                    ps.wakes_owed.push(t);
                }
            }
        }
        published
    }

    /// Wakes the threads `publish` sent messages to since the last call (if they sleep).
    /// Called when a connection's round ends and when a mailbox message is done.
    pub(crate) fn send_owed_wakes(&self) {
        let mut ps = self.pubsub.borrow_mut();
        for &t in &ps.wakes_owed {
            self.cluster.mailboxes[t].wake_if_sleeping();
        }
        ps.wakes_owed.clear();
    }

    /// How many clients would receive a message on `channel` now.
    fn recipients(&self, audience: Audience, channel: &[u8]) -> u64 {
        let mut ps = self.pubsub.borrow_mut();
        let ps = &mut *ps;
        ps.directory
            .recipients(audience, channel, &mut ps.targets, &mut Vec::new())
    }

    /// Applies subscription changes made on another thread (or this one).
    pub(crate) fn apply_subscriptions(&self, changes: &[Change]) {
        let mut ps = self.pubsub.borrow_mut();
        for c in changes {
            ps.directory.apply(c);
        }
    }

    /// Delivers a message another thread published to this thread's subscribers.
    pub(crate) fn deliver(&self, msg: &Message) {
        self.pubsub.borrow().subscribers.deliver(msg);
    }

    /// Publishes the keyspace notifications this shard recorded, in order: to
    /// `__keyspace@<db>__:<key>` (the event as message) and `__keyevent@<db>__:<event>` (the
    /// key), as the configured channel kinds ask.
    pub(crate) fn publish_notifications(&self) {
        let (flags, events) = {
            let mut shard = self.shard.borrow_mut();
            (shard.notify.flags, shard.notify.take())
        };
        self.publish_events(flags, events);
    }

    /// Publishes keyspace notifications recorded anywhere (a scratch shard's too).
    pub(crate) fn publish_events(&self, flags: u32, events: Vec<Event>) {
        for e in events {
            if flags & class::KEYSPACE != 0 {
                let mut channel = format!("__keyspace@{}__:", e.db).into_bytes();
                channel.extend_from_slice(&e.key);
                self.publish(Message::new(
                    Audience::Channel,
                    channel.into(),
                    e.event.as_bytes().into(),
                ));
            }
            if flags & class::KEYEVENT != 0 {
                let channel = format!("__keyevent@{}__:{}", e.db, e.event).into_bytes();
                self.publish(Message::new(Audience::Channel, channel.into(), e.key));
            }
        }
    }

    /// (channels, patterns, shard channels) with a subscriber, for INFO.
    pub(crate) fn pubsub_counts(&self) -> (usize, usize, usize) {
        let ps = self.pubsub.borrow();
        let d = &ps.directory;
        (d.channel_count(false), d.patterns(), d.channel_count(true))
    }
}

/// A PUBSUB subcommand Redis knows, with an argument count it accepts.
pub(crate) fn well_formed(args: &Args) -> bool {
    let n = args.len();
    match args.get(1).to_ascii_lowercase().as_slice() {
        b"help" | b"numpat" => n == 2,
        b"channels" | b"shardchannels" => n <= 3,
        b"numsub" | b"shardnumsub" => true,
        _ => false,
    }
}

const PUBSUB_HELP: &[&str] = &[
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help.",
];

impl Connection {
    /// The inbox the I/O loop waits on beside the socket.
    pub fn push_inbox(&self) -> Rc<Inbox> {
        self.info.inbox.clone()
    }

    /// Moves pushed messages waiting for this client to the end of `into` (under CLIENT
    /// REPLY OFF they are dropped, as Redis drops every reply then).
    pub fn take_pushes(&mut self, into: &mut Vec<u8>) {
        if self.reply_in_flight() {
            // A shard may be writing to the socket; they go out after that reply.
            return;
        }
        let before = into.len();
        drain_inbox(&self.info.inbox, self.reply_mode, into);
        self.worker.stats.borrow_mut().net_output_bytes += (into.len() - before) as u64;
    }

    /// Before the reply that closes the connection (a protocol error): the pushes waiting go
    /// first, as Redis wrote each when it came, and none may follow it.
    pub(crate) fn pushes_before_closing(&mut self) {
        drain_inbox(&self.info.inbox, self.reply_mode, &mut self.out.buf);
    }

    /// In Pub/Sub mode (subscribed to anything): the pubsub output-limit class applies.
    pub fn subscribed(&self) -> bool {
        self.pubsub.subs.any()
    }

    /// A subscribed client over the pubsub class's soft limit for longer than its seconds.
    pub(crate) fn over_soft_limit_too_long(&mut self, unsent: u64) -> bool {
        let limits = &self.worker.cluster.config.pubsub_output_limit;
        let soft = limits[1].load(Ordering::Relaxed);
        if !self.subscribed() || soft == 0 || unsent <= soft {
            self.pubsub.over_soft_since = None;
            return false;
        }
        let now = Instant::now();
        let since = *self.pubsub.over_soft_since.get_or_insert(now);
        now.duration_since(since) > Duration::from_secs(limits[2].load(Ordering::Relaxed))
    }

    /// Pushes already waiting for this client go into the output now, so a message it
    /// published to itself precedes the PUBLISH reply, as in Redis.
    fn pushes_now(&mut self) {
        if !self.pubsub.after_reply {
            self.info.inbox.take(&mut self.out.buf);
        }
    }

    pub(crate) async fn subscribe(&mut self, kind: Kind, args: &Args<'_>) {
        let inbox = self.info.inbox.clone();
        let mut changes = Vec::new();
        for name in args.iter().skip(1) {
            if self.pubsub.subs.insert(kind, name) {
                self.worker
                    .pubsub
                    .borrow_mut()
                    .subscribers
                    .add(kind, name, &inbox);
                changes.push(self.change(kind, name, true));
            }
            self.subscription_reply(kind.subscribe_word(), Some(name), kind);
        }
        self.share_changes(changes, true).await;
    }

    /// MONITOR: from now on this client receives a line for every command run.
    pub(crate) async fn monitor(&mut self) {
        let inbox = self.info.inbox.clone();
        if self.pubsub.subs.insert(Kind::Monitor, b"") {
            self.info.monitor.set(true);
            self.worker
                .pubsub
                .borrow_mut()
                .subscribers
                .add(Kind::Monitor, b"", &inbox);
            let change = self.change(Kind::Monitor, b"", true);
            self.share_changes(vec![change], true).await;
        }
        self.out.ok();
    }

    /// Sends the monitors, if any, this command's line: the client's database and address,
    /// `lua` for a script's calls. Administrative commands are not shown, as in Redis.
    pub(crate) fn feed_monitors(&self, spec: &CommandSpec, args: &Args) {
        if spec.flags & flags::ADMIN != 0 || !self.worker.pubsub.borrow().directory.monitored() {
            return;
        }
        // Administrative subcommands (ACL SETUSER and its passwords, CONFIG SET) neither.
        let admin_sub = damselfly_commands::redis_meta::for_request(args).is_some_and(|c| {
            damselfly_commands::redis_meta::commands()[c]
                .flags
                .contains(&"admin")
        });
        if admin_sub {
            return;
        }
        let origin = if self.pubsub.held.is_some() {
            "lua".to_string()
        } else if self.info.addr.starts_with('/') {
            // A unix socket's path, described as `path:0`.
            format!("unix:{}", self.info.addr.trim_end_matches(":0"))
        } else {
            self.info.addr.clone()
        };
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_micros() as u64);
        let words: Vec<&[u8]> = args.iter().collect();
        let line = monitor_line(micros, self.info.db.get(), &origin, &words);
        self.worker
            .publish(Message::new(Audience::Monitor, Box::default(), line.into()));
    }

    pub(crate) async fn unsubscribe(&mut self, kind: Kind, args: &Args<'_>) {
        let names: Vec<Box<[u8]>> = if args.len() > 1 {
            args.iter().skip(1).map(Box::from).collect()
        } else {
            self.pubsub.subs.names(kind)
        };
        if names.is_empty() {
            self.subscription_reply(kind.unsubscribe_word(), None, kind);
            return;
        }
        let mut changes = Vec::new();
        for name in &names {
            if let Some(c) = self.leave(kind, name) {
                changes.push(c);
            }
            self.subscription_reply(kind.unsubscribe_word(), Some(name), kind);
        }
        self.share_changes(changes, true).await;
    }

    /// Leaves every subscription without replies (RESET), once every thread has applied it.
    pub(crate) async fn leave_all(&mut self) {
        let changes = self.leave_everything();
        self.share_changes(changes, true).await;
    }

    fn leave_everything(&mut self) -> Vec<Change> {
        let mut changes = Vec::new();
        for kind in [
            Kind::Channel,
            Kind::Pattern,
            Kind::ShardChannel,
            Kind::Monitor,
        ] {
            for name in self.pubsub.subs.names(kind) {
                changes.extend(self.leave(kind, &name));
            }
        }
        changes
    }

    /// A disconnecting client's subscriptions go, without waiting for other threads.
    pub(crate) fn drop_subscriptions(&mut self) {
        let changes = self.leave_everything();
        if !changes.is_empty() {
            self.send_changes(changes, false);
        }
    }

    fn leave(&mut self, kind: Kind, name: &[u8]) -> Option<Change> {
        if !self.pubsub.subs.remove(kind, name) {
            return None;
        }
        if kind == Kind::Monitor {
            self.info.monitor.set(false);
        }
        self.worker
            .pubsub
            .borrow_mut()
            .subscribers
            .remove(kind, name, self.info.id);
        Some(self.change(kind, name, false))
    }

    fn change(&self, kind: Kind, name: &[u8], added: bool) -> Change {
        Change {
            kind,
            name: name.into(),
            thread: self.worker.id,
            added,
        }
    }

    /// CLIENT LIST's sub, psub and ssub.
    fn note_counts(&self) {
        let subs = &self.pubsub.subs;
        self.info.subscriptions.set([
            subs.len(Kind::Channel),
            subs.len(Kind::Pattern),
            subs.len(Kind::ShardChannel),
        ]);
    }

    /// `[subscribe, channel, count]` as a push (an array in RESP2).
    fn subscription_reply(&mut self, word: &str, name: Option<&[u8]>, kind: Kind) {
        self.out.push(3);
        self.out.bulk(word.as_bytes());
        match name {
            Some(n) => self.out.bulk(n),
            None => self.out.null(),
        }
        self.out.int(self.pubsub.subs.count_for(kind) as i64);
    }

    /// Applies changes here, sends them to every other thread and, with `wait`, returns once
    /// all have applied them.
    async fn share_changes(&mut self, changes: Vec<Change>, wait: bool) {
        if changes.is_empty() {
            return;
        }
        for ack in self.send_changes(changes, wait) {
            let _ = ack.await;
        }
    }

    /// Applies changes here and sends them to every other thread; with `acked`, returns a
    /// receiver per thread that resolves once it has applied them.
    fn send_changes(&self, changes: Vec<Change>, acked: bool) -> Vec<oneshot::Receiver<()>> {
        self.note_counts();
        self.worker.apply_subscriptions(&changes);
        let changes: Arc<[Change]> = changes.into();
        let mut acks = Vec::new();
        for (t, mb) in self.worker.cluster.mailboxes.iter().enumerate() {
            if t == self.worker.id {
                continue;
            }
            let (done, ack) = match acked {
                true => {
                    let (done, ack) = oneshot::channel();
                    (Some(done), Some(ack))
                }
                false => (None, None),
            };
            let changes = changes.clone();
            if mb.send(ShardMsg::Subscriptions { changes, done }) {
                acks.extend(ack);
            }
        }
        acks
    }

    pub(crate) async fn publish(&mut self, sharded: bool, args: &Args<'_>) {
        // Earlier commands of this client take effect first: a subscriber reacting to the
        // message sees them.
        self.flush_remote().await;
        let audience = if sharded {
            Audience::ShardChannel
        } else {
            Audience::Channel
        };
        let msg = Message::new(audience, args.get(1).into(), args.get(2).into());
        let count = match &mut self.pubsub.held {
            Some(held) => {
                let count = self.worker.recipients(audience, &msg.channel);
                held.push(msg);
                count
            }
            None => {
                let published = self.worker.publish(msg);
                self.affinity
                    .note_publish(published.only_thread, self.worker.id);
                published.receivers
            }
        };
        self.pushes_now();
        self.out.int(count as i64);
    }

    /// A script run starts: what it publishes is held until it is final.
    pub(crate) fn hold_publishing(&mut self) {
        self.pubsub.held = Some(Vec::new());
    }

    /// The run is final: publishes what it held (`keep`), or forgets it (the run is taken
    /// back to be run again).
    pub(crate) fn release_publishing(&mut self, keep: bool) {
        if let Some(held) = self.pubsub.held.take() {
            if keep {
                for msg in held {
                    self.worker.publish(msg);
                }
                self.pushes_now();
            }
        }
    }

    /// EXEC starts (`true`) or ends: messages to this client wait until its reply is out.
    pub(crate) fn pushes_after_reply(&mut self, defer: bool) {
        self.pubsub.after_reply = defer;
    }

    /// Redis's refusal of a command in RESP2 Pub/Sub mode, or None.
    pub(crate) fn pubsub_refusal(&self, allowed: bool) -> Option<String> {
        (!allowed && self.subscribed() && self.info.resp.get() == 2).then(|| {
            format!(
                "ERR Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
                self.info.last_command_name()
            )
        })
    }

    /// Redis makes a MONITOR client a replica, and a replica may not touch the keyspace:
    /// every read, write or replicated command is refused.
    pub(crate) fn monitor_refusal(&self, spec: &CommandSpec) -> Option<&'static str> {
        const KEYSPACE: u32 = flags::WRITE | flags::READONLY | flags::MAY_REPLICATE;
        (spec.flags & KEYSPACE != 0 && self.pubsub.subs.len(Kind::Monitor) > 0)
            .then_some("ERR Replica can't interact with the keyspace")
    }

    pub(crate) fn pubsub_cmd(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        if !well_formed(args) {
            let msg = match sub.as_slice() {
                b"help" | b"numpat" => {
                    errors::wrong_arity(&format!("pubsub|{}", String::from_utf8_lossy(&sub)))
                }
                b"channels" | b"shardchannels" => format!(
                    "ERR unknown subcommand or wrong number of arguments for '{}'. Try PUBSUB HELP.",
                    String::from_utf8_lossy(args.get(1))
                ),
                _ => errors::unknown_subcommand("pubsub", args.get(1)),
            };
            return self.out.error(&msg);
        }
        let worker = self.worker.clone();
        let directory = &worker.pubsub.borrow().directory;
        let out = &mut self.out;
        let sharded = sub.starts_with(b"shard");
        match sub.as_slice() {
            b"help" => {
                out.array(PUBSUB_HELP.len());
                for line in PUBSUB_HELP {
                    out.simple(line);
                }
            }
            b"channels" | b"shardchannels" => {
                let pattern = (args.len() == 3).then(|| args.get(2));
                let names = directory.channels(sharded, pattern);
                out.array(names.len());
                for name in names {
                    out.bulk(name);
                }
            }
            b"numsub" | b"shardnumsub" => {
                out.array(2 * (args.len() - 2));
                for channel in args.iter().skip(2) {
                    out.bulk(channel);
                    out.int(directory.subscribers(sharded, channel) as i64);
                }
            }
            _ => out.int(directory.patterns() as i64),
        }
    }
}

/// Moves an inbox's pushes to `into`, or drops them under CLIENT REPLY OFF.
fn drain_inbox(inbox: &Inbox, mode: ReplyMode, into: &mut Vec<u8>) {
    if mode == ReplyMode::Off {
        inbox.take(&mut Vec::new());
    } else {
        inbox.take(into);
    }
}
