//! Pub/Sub state, without threads or I/O (docs/pubsub.md). Every thread keeps:
//!
//! - a [`Directory`]: its replica of every subscription in the process, as counts of
//!   subscribed clients per thread. A publisher reads only its own thread's replica to learn
//!   how many clients receive a message (PUBLISH's reply) and which threads to send it to, so
//!   publishing takes no lock and touches no other thread's memory. Subscription changes are
//!   sent to every thread as [`Change`]s and applied in each one's mailbox order.
//! - its [`Subscribers`]: the clients of this thread, by channel and pattern, each with an
//!   [`Inbox`] that encodes messages in its client's protocol and wakes its connection.
//!
//! A connection keeps its own [`ClientSubscriptions`] (what it is subscribed to, for its
//! replies, UNSUBSCRIBE without arguments, and clean-up when it goes away).
//!
//! CLIENT TRACKING's invalidations use the inboxes too ([`TrackingState`]).
//!
//! MONITOR rides the same fan-out: a monitoring client is a subscription of its own kind,
//! and each command's [`monitor_line`] is a message to every monitor.

mod directory;
mod local;
mod monitor;
mod tracking;

pub use directory::Directory;
pub use local::{ClientSubscriptions, Inbox, Subscribers};
pub use monitor::monitor_line;
pub use tracking::{Redirect, TrackingState, INVALIDATE_CHANNEL};

/// What a subscription names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// SUBSCRIBE: one channel.
    Channel,
    /// PSUBSCRIBE: every channel matching a glob pattern.
    Pattern,
    /// SSUBSCRIBE: a shard channel (its own namespace, published with SPUBLISH).
    ShardChannel,
    /// MONITOR: every command any client runs (the name is empty).
    Monitor,
}

impl Kind {
    /// The push kinds of a subscription change, as Redis names them in replies.
    pub fn subscribe_word(self) -> &'static str {
        match self {
            Kind::Channel => "subscribe",
            Kind::Pattern => "psubscribe",
            Kind::ShardChannel => "ssubscribe",
            Kind::Monitor => "monitor",
        }
    }

    pub fn unsubscribe_word(self) -> &'static str {
        match self {
            Kind::Channel => "unsubscribe",
            Kind::Pattern => "punsubscribe",
            Kind::ShardChannel => "sunsubscribe",
            Kind::Monitor => "monitor",
        }
    }
}

/// One client subscribing to (or leaving) one channel or pattern, on thread `thread`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Change {
    pub kind: Kind,
    pub name: Box<[u8]>,
    pub thread: usize,
    pub added: bool,
}

/// Who a message is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Audience {
    /// PUBLISH: subscribers of the channel and of matching patterns.
    Channel,
    /// SPUBLISH: subscribers of the shard channel.
    ShardChannel,
    /// Clients in MONITOR mode; the payload is the line they receive.
    Monitor,
}

/// A message on its way to the subscribers of one thread.
#[derive(Debug)]
pub struct Message {
    pub audience: Audience,
    pub channel: Box<[u8]>,
    pub payload: Box<[u8]>,
    /// The patterns the channel matches, as the publishing thread's directory found them:
    /// receiving threads look these up rather than match every pattern again.
    pub patterns: Vec<Box<[u8]>>,
}

impl Message {
    pub fn new(audience: Audience, channel: Box<[u8]>, payload: Box<[u8]>) -> Message {
        Message {
            audience,
            channel,
            payload,
            patterns: Vec::new(),
        }
    }
}

type Map<V> = std::collections::HashMap<Box<[u8]>, V, ahash::RandomState>;

/// Values by name in a vector, with an index: walked in order (patterns are matched one by
/// one), found in O(1), removed in O(1) by moving the last one into the hole.
#[derive(Debug)]
struct Named<V> {
    items: Vec<(Box<[u8]>, V)>,
    at: Map<usize>,
}

impl<V> Default for Named<V> {
    fn default() -> Self {
        Named {
            items: Vec::new(),
            at: Map::default(),
        }
    }
}

impl<V> Named<V> {
    fn get_mut(&mut self, name: &[u8]) -> Option<&mut V> {
        let at = *self.at.get(name)?;
        Some(&mut self.items[at].1)
    }

    fn get_or_insert_with(&mut self, name: &[u8], make: impl FnOnce() -> V) -> &mut V {
        let at = match self.at.get(name) {
            Some(&at) => at,
            None => {
                self.items.push((name.into(), make()));
                self.at.insert(name.into(), self.items.len() - 1);
                self.items.len() - 1
            }
        };
        &mut self.items[at].1
    }

    fn remove(&mut self, name: &[u8]) -> Option<V> {
        let at = self.at.remove(name)?;
        let (_, v) = self.items.swap_remove(at);
        if let Some((moved, _)) = self.items.get(at) {
            self.at.insert(moved.clone(), at);
        }
        Some(v)
    }

    fn get(&self, name: &[u8]) -> Option<&V> {
        let at = *self.at.get(name)?;
        Some(&self.items[at].1)
    }

    fn contains(&self, name: &[u8]) -> bool {
        self.at.contains_key(name)
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], &V)> {
        self.items.iter().map(|(k, v)| (&**k, v))
    }
}
