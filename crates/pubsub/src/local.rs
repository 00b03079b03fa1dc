//! One thread's subscribed clients and how a message reaches them: each client has an
//! [`Inbox`] its connection drains into the socket, and each connection keeps the set of
//! names it subscribes to ([`ClientSubscriptions`]).

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use damselfly_protocol::ReplyBuf;

use crate::{Audience, Kind, Map, Message, Named};

/// Messages pushed to one client, encoded in its protocol, until its connection writes them.
pub struct Inbox {
    pub id: u64,
    out: RefCell<ReplyBuf>,
    waker: Cell<Option<Waker>>,
    /// The client's output limit: past it, messages are dropped and the client is closed
    /// when its connection next runs, so a connection that does not run cannot make its
    /// inbox grow without bound.
    limit: Cell<usize>,
    overflowed: Cell<bool>,
}

impl Inbox {
    pub fn new(id: u64, resp3: bool) -> Rc<Inbox> {
        Rc::new(Inbox {
            id,
            out: RefCell::new(ReplyBuf::new(resp3)),
            waker: Cell::new(None),
            limit: Cell::new(usize::MAX),
            overflowed: Cell::new(false),
        })
    }

    /// The client switched protocol (HELLO): later messages use the new one.
    pub fn set_resp3(&self, resp3: bool) {
        self.out.borrow_mut().resp3 = resp3;
    }

    pub fn resp3(&self) -> bool {
        self.out.borrow().resp3
    }

    /// Appends what `encode` writes in the client's protocol and wakes the connection.
    pub(crate) fn push_with(&self, encode: impl FnOnce(&mut ReplyBuf)) {
        if self.full() {
            return;
        }
        encode(&mut self.out.borrow_mut());
        self.wake();
    }

    /// Appends bytes already encoded (a message, a MONITOR line) and wakes the connection.
    pub fn push_raw(&self, bytes: &[u8]) {
        if self.full() {
            return;
        }
        self.out.borrow_mut().buf.extend_from_slice(bytes);
        self.wake();
    }

    /// Past the limit: what waits is dropped, and so is anything more.
    fn full(&self) -> bool {
        if self.len() > self.limit.get() {
            self.overflowed.set(true);
            self.out.borrow_mut().buf = Vec::new();
            self.wake();
        }
        self.overflowed.get()
    }

    /// Sets the most that may wait here (the client's output limit less what its
    /// connection has not written yet).
    pub fn set_limit(&self, bytes: usize) {
        self.limit.set(bytes);
    }

    /// True once messages were dropped at the limit: the client must be closed.
    pub fn overflowed(&self) -> bool {
        self.overflowed.get()
    }

    fn wake(&self) {
        if let Some(w) = self.waker.take() {
            w.wake();
        }
    }

    /// Ready once something waits to be written (or the inbox overflowed).
    pub fn poll_ready(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.overflowed.get() {
            return Poll::Ready(());
        }
        self.poll_beyond(0, cx).map(|_| ())
    }

    /// Ready with the bytes waiting once they are more than `seen`.
    pub fn poll_beyond(&self, seen: usize, cx: &mut Context<'_>) -> Poll<usize> {
        let waiting = self.len();
        if waiting > seen {
            Poll::Ready(waiting)
        } else {
            self.waker.set(Some(cx.waker().clone()));
            Poll::Pending
        }
    }

    /// Moves what waits to the end of `into`.
    pub fn take(&self, into: &mut Vec<u8>) {
        let mut out = self.out.borrow_mut();
        into.extend_from_slice(&out.buf);
        out.buf.clear();
    }

    pub fn len(&self) -> usize {
        self.out.borrow().len()
    }

    /// Everything waiting, taken (tests).
    #[cfg(test)]
    pub(crate) fn drained(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.take(&mut out);
        out
    }

    pub fn is_empty(&self) -> bool {
        self.out.borrow().is_empty()
    }
}

/// This thread's subscribed clients, by what they subscribe to.
#[derive(Default)]
pub struct Subscribers {
    channels: Map<Vec<Rc<Inbox>>>,
    shard_channels: Map<Vec<Rc<Inbox>>>,
    patterns: Named<Vec<Rc<Inbox>>>,
    monitors: Vec<Rc<Inbox>>,
}

impl Subscribers {
    pub fn add(&mut self, kind: Kind, name: &[u8], inbox: &Rc<Inbox>) {
        let list = match kind {
            Kind::Channel => self.channels.entry(name.into()).or_default(),
            Kind::ShardChannel => self.shard_channels.entry(name.into()).or_default(),
            Kind::Pattern => self.patterns.get_or_insert_with(name, Vec::new),
            Kind::Monitor => &mut self.monitors,
        };
        list.push(inbox.clone());
    }

    /// Takes client `id` off `name`'s list (a scan, as Redis's list of subscribers).
    pub fn remove(&mut self, kind: Kind, name: &[u8], id: u64) {
        let emptied = |list: &mut Vec<Rc<Inbox>>| {
            list.retain(|i| i.id != id);
            list.is_empty()
        };
        match kind {
            Kind::Channel | Kind::ShardChannel => {
                let map = if kind == Kind::Channel {
                    &mut self.channels
                } else {
                    &mut self.shard_channels
                };
                if map.get_mut(name).is_some_and(emptied) {
                    map.remove(name);
                }
            }
            Kind::Pattern => {
                if self.patterns.get_mut(name).is_some_and(emptied) {
                    self.patterns.remove(name);
                }
            }
            Kind::Monitor => {
                emptied(&mut self.monitors);
            }
        }
    }

    /// Every subscription on this thread: its kind, its channel or pattern, and the client.
    pub fn each(&self, mut f: impl FnMut(Kind, &[u8], u64)) {
        for (kind, map) in [
            (Kind::Channel, &self.channels),
            (Kind::ShardChannel, &self.shard_channels),
        ] {
            for (name, inboxes) in map {
                inboxes.iter().for_each(|i| f(kind, name, i.id));
            }
        }
        for (name, inboxes) in &self.patterns.items {
            inboxes.iter().for_each(|i| f(Kind::Pattern, name, i.id));
        }
    }

    /// Pushes `msg` to every client here subscribed to its channel or to one of the patterns
    /// the publisher matched,
    /// in Redis's order: channel subscribers, then each matching pattern's.
    pub fn deliver(&self, msg: &Message) {
        let (channel, payload) = (&*msg.channel, &*msg.payload);
        match msg.audience {
            Audience::Channel => {}
            Audience::ShardChannel => {
                if let Some(inboxes) = self.shard_channels.get(channel) {
                    push_to_all(inboxes, &[b"smessage", channel, payload]);
                }
                return;
            }
            Audience::Monitor => {
                for inbox in &self.monitors {
                    inbox.push_raw(payload);
                }
                return;
            }
        }
        if let Some(inboxes) = self.channels.get(channel) {
            push_to_all(inboxes, &[b"message", channel, payload]);
        }
        for pattern in &msg.patterns {
            if let Some(inboxes) = self.patterns.get(pattern) {
                push_to_all(inboxes, &[b"pmessage", pattern, channel, payload]);
            }
        }
    }
}

/// Pushes the same bulk strings to every inbox, encoded once per protocol rather than once
/// per subscriber (a channel may have thousands).
fn push_to_all(inboxes: &[Rc<Inbox>], words: &[&[u8]]) {
    let mut encoded: [Option<Vec<u8>>; 2] = [None, None];
    for inbox in inboxes {
        let resp3 = inbox.resp3();
        let bytes = encoded[usize::from(resp3)].get_or_insert_with(|| {
            let mut out = ReplyBuf::new(resp3);
            out.push(words.len());
            for w in words {
                out.bulk(w);
            }
            out.buf
        });
        inbox.push_raw(bytes);
    }
}

/// What one client subscribes to.
#[derive(Default)]
pub struct ClientSubscriptions {
    channels: Named<()>,
    patterns: Named<()>,
    shard_channels: Named<()>,
    /// MONITOR mode, as the one name of its kind.
    monitor: Named<()>,
}

impl ClientSubscriptions {
    fn of(&self, kind: Kind) -> &Named<()> {
        match kind {
            Kind::Channel => &self.channels,
            Kind::Pattern => &self.patterns,
            Kind::ShardChannel => &self.shard_channels,
            Kind::Monitor => &self.monitor,
        }
    }

    fn of_mut(&mut self, kind: Kind) -> &mut Named<()> {
        match kind {
            Kind::Channel => &mut self.channels,
            Kind::Pattern => &mut self.patterns,
            Kind::ShardChannel => &mut self.shard_channels,
            Kind::Monitor => &mut self.monitor,
        }
    }

    /// True when it was not subscribed yet.
    pub fn insert(&mut self, kind: Kind, name: &[u8]) -> bool {
        let set = self.of_mut(kind);
        !set.contains(name) && {
            set.get_or_insert_with(name, || ());
            true
        }
    }

    /// True when it was subscribed.
    pub fn remove(&mut self, kind: Kind, name: &[u8]) -> bool {
        self.of_mut(kind).remove(name).is_some()
    }

    /// The names of one kind, in subscription order while none was removed.
    pub fn names(&self, kind: Kind) -> Vec<Box<[u8]>> {
        self.of(kind).iter().map(|(k, _)| k.into()).collect()
    }

    pub fn len(&self, kind: Kind) -> usize {
        self.of(kind).len()
    }

    /// The count SUBSCRIBE, PSUBSCRIBE and their opposites reply with (shard channels are
    /// counted apart, as Redis does).
    pub fn count_for(&self, kind: Kind) -> usize {
        match kind {
            Kind::ShardChannel => self.shard_channels.len(),
            Kind::Channel | Kind::Pattern => self.channels.len() + self.patterns.len(),
            Kind::Monitor => self.monitor.len(),
        }
    }

    /// Subscribed to anything: the client is in Pub/Sub mode.
    pub fn any(&self) -> bool {
        self.channels.len() + self.patterns.len() + self.shard_channels.len() > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_reach_channel_then_pattern_subscribers_in_their_protocols() {
        let (a, b) = (Inbox::new(1, false), Inbox::new(2, true));
        let mut subs = Subscribers::default();
        subs.add(Kind::Channel, b"news", &a);
        subs.add(Kind::Pattern, b"n*", &a);
        subs.add(Kind::ShardChannel, b"news", &b);
        let msg = |sharded| Message {
            audience: if sharded {
                Audience::ShardChannel
            } else {
                Audience::Channel
            },
            channel: (*b"news").into(),
            payload: (*b"hi").into(),
            // What the publishing thread's directory matched.
            patterns: vec![(*b"n*").into(), (*b"x*").into()],
        };
        subs.deliver(&msg(false));
        assert_eq!(
            a.drained(),
            b"*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n\
              *4\r\n$8\r\npmessage\r\n$2\r\nn*\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        assert!(b.is_empty());
        subs.deliver(&msg(true));
        assert_eq!(
            b.drained(),
            b">3\r\n$8\r\nsmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        subs.remove(Kind::Pattern, b"n*", 1);
        subs.remove(Kind::Channel, b"news", 1);
        subs.deliver(&msg(false));
        assert!(a.is_empty());
    }

    #[test]
    fn a_client_counts_its_subscriptions_as_redis_does() {
        let mut c = ClientSubscriptions::default();
        assert!(c.insert(Kind::Channel, b"a"));
        assert!(!c.insert(Kind::Channel, b"a"));
        assert!(c.insert(Kind::Pattern, b"a"));
        assert!(c.insert(Kind::ShardChannel, b"s"));
        assert_eq!(c.count_for(Kind::Channel), 2);
        assert_eq!(c.count_for(Kind::ShardChannel), 1);
        assert!(c.remove(Kind::Channel, b"a"));
        assert!(!c.remove(Kind::Channel, b"a"));
        assert_eq!(c.names(Kind::Pattern), vec![Box::from(&b"a"[..])]);
        assert!(c.any());
        c.remove(Kind::Pattern, b"a");
        c.remove(Kind::ShardChannel, b"s");
        assert!(!c.any());
    }
}
