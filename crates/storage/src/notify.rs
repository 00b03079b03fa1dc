//! Keyspace notifications as a shard records them: Redis's event classes (the letters of
//! `notify-keyspace-events`) and the events a command, an expiry or a lookup produced, kept in
//! order until the shard's thread publishes them (docs/pubsub.md, "Keyspace notifications").

/// Event classes and channel kinds, as Redis's `NOTIFY_*` flags.
pub mod class {
    pub const KEYSPACE: u32 = 1 << 0;
    pub const KEYEVENT: u32 = 1 << 1;
    pub const GENERIC: u32 = 1 << 2;
    pub const STRING: u32 = 1 << 3;
    pub const LIST: u32 = 1 << 4;
    pub const SET: u32 = 1 << 5;
    pub const HASH: u32 = 1 << 6;
    pub const ZSET: u32 = 1 << 7;
    pub const EXPIRED: u32 = 1 << 8;
    pub const EVICTED: u32 = 1 << 9;
    pub const STREAM: u32 = 1 << 10;
    pub const KEY_MISS: u32 = 1 << 11;
    pub const MODULE: u32 = 1 << 12;
    pub const NEW: u32 = 1 << 13;
    /// `A`: every class but key misses and new keys.
    pub const ALL: u32 =
        GENERIC | STRING | LIST | SET | HASH | ZSET | EXPIRED | EVICTED | STREAM | MODULE;
}

/// The letters of the classes `A` stands for, in the order Redis prints them.
const LETTERS: &[(char, u32)] = &[
    ('g', class::GENERIC),
    ('$', class::STRING),
    ('l', class::LIST),
    ('s', class::SET),
    ('h', class::HASH),
    ('z', class::ZSET),
    ('x', class::EXPIRED),
    ('e', class::EVICTED),
    ('t', class::STREAM),
    ('d', class::MODULE),
    ('n', class::NEW),
];

/// Parses a `notify-keyspace-events` value; None for a letter Redis does not know.
pub fn parse_flags(value: &str) -> Option<u32> {
    value.chars().try_fold(0, |flags, c| {
        let bit = match c {
            'A' => class::ALL,
            'K' => class::KEYSPACE,
            'E' => class::KEYEVENT,
            'm' => class::KEY_MISS,
            c => LETTERS.iter().find(|(l, _)| *l == c)?.1,
        };
        Some(flags | bit)
    })
}

/// The canonical text of flags, as CONFIG GET shows it (Redis's
/// keyspaceEventsFlagsToString: with every `A` class set it prints `A` and omits `n`).
pub fn flags_text(flags: u32) -> String {
    let mut s = String::new();
    if flags & class::ALL == class::ALL {
        s.push('A');
    } else {
        s.extend(
            LETTERS
                .iter()
                .filter(|(_, bit)| flags & bit != 0)
                .map(|(c, _)| c),
        );
    }
    for (c, bit) in [
        ('K', class::KEYSPACE),
        ('E', class::KEYEVENT),
        ('m', class::KEY_MISS),
    ] {
        if flags & bit != 0 {
            s.push(c);
        }
    }
    s
}

/// One event: `event` happened to `key` in database `db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub db: usize,
    pub event: &'static str,
    pub key: Box<[u8]>,
}

/// A shard's notification settings and the events not yet published.
#[derive(Debug, Default)]
pub struct Notifications {
    /// The configured flags (0: notifications off, the default).
    pub flags: u32,
    events: Vec<Event>,
    /// Events that follow the next event of their key (a collection emptied by a write is
    /// deleted before its command names what it did: `lpop`, then `del`).
    deferred: Vec<Event>,
    /// While changes may still be taken back (an undo log is kept), events from this index on
    /// wait: a change taken back must not have been announced.
    held_from: Option<usize>,
}

impl Notifications {
    /// True when events of `class` are published: the class is on, and so is at least one
    /// of the two channel kinds.
    #[inline]
    pub fn wants(&self, class: u32) -> bool {
        self.flags & class != 0 && self.flags & (class::KEYSPACE | class::KEYEVENT) != 0
    }

    /// Records an event of `class` if it is wanted, followed by the events deferred for its
    /// key.
    #[inline]
    pub fn record(&mut self, class: u32, event: &'static str, db: usize, key: &[u8]) {
        if self.wants(class) {
            self.events.push(Event {
                db,
                event,
                key: key.into(),
            });
        }
        if !self.deferred.is_empty() {
            let (now, later): (Vec<Event>, Vec<Event>) = std::mem::take(&mut self.deferred)
                .into_iter()
                .partition(|e| e.db == db && *e.key == *key);
            self.events.extend(now);
            self.deferred = later;
        }
    }

    /// Records an event of `class` to follow the next event of the same key (or the end of
    /// the command).
    pub fn record_after_next(&mut self, class: u32, event: &'static str, db: usize, key: &[u8]) {
        if self.wants(class) {
            self.deferred.push(Event {
                db,
                event,
                key: key.into(),
            });
        }
    }

    /// True when events can be published.
    pub fn pending(&self) -> bool {
        self.held_from.is_none() && (!self.events.is_empty() || !self.deferred.is_empty())
    }

    /// Takes every recorded event, in order, deferred ones last; nothing while held.
    pub fn take(&mut self) -> Vec<Event> {
        if self.held_from.is_some() {
            return Vec::new();
        }
        let mut events = std::mem::take(&mut self.events);
        events.append(&mut self.deferred);
        events
    }

    /// Changes may be taken back from now on: hold the events they record.
    pub fn hold(&mut self) {
        self.held_from.get_or_insert(self.events.len());
    }

    /// Takes the held events out and stops holding (their changes' transaction pauses here;
    /// the events recorded meanwhile are others' and go when they are taken).
    pub(crate) fn take_held(&mut self) -> Vec<Event> {
        match self.held_from.take() {
            Some(from) => self.events.split_off(from),
            None => Vec::new(),
        }
    }

    /// Holds again, with the events `take_held` took out first.
    pub(crate) fn hold_again(&mut self, events: Vec<Event>) {
        self.hold();
        self.events.extend(events);
    }

    /// Events held apart until now may go.
    pub(crate) fn publish(&mut self, events: Vec<Event>) {
        self.events.extend(events);
    }

    /// The held changes stay: their events may go.
    pub fn release(&mut self) {
        self.held_from = None;
    }

    /// The held changes were taken back: so are their events.
    pub fn discard_held(&mut self) {
        if let Some(from) = self.held_from.take() {
            self.events.truncate(from);
            self.deferred.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_read_and_print_as_redis_does() {
        for (given, shown) in [
            ("KEA", "AKE"),
            ("Kgx", "gxK"),
            ("KEAmn", "AKEm"),
            ("Kln", "lnK"),
            ("Ktzdx$", "$zxtdK"),
            ("hs$lg", "g$lsh"),
            ("n", "n"),
            ("", ""),
        ] {
            assert_eq!(flags_text(parse_flags(given).unwrap()), shown, "{given}");
        }
        assert_eq!(parse_flags("KQ"), None);
    }

    #[test]
    fn events_are_kept_only_when_wanted() {
        let mut n = Notifications {
            flags: parse_flags("Kl").unwrap(),
            ..Default::default()
        };
        n.record(class::LIST, "lpush", 0, b"k");
        n.record(class::SET, "sadd", 0, b"k");
        assert_eq!(n.events.len(), 1);
        n.flags = parse_flags("l").unwrap();
        n.record(class::LIST, "lpush", 0, b"k");
        assert_eq!(n.events.len(), 1, "no channel kind, no events");
    }

    #[test]
    fn deferred_events_follow_the_next_event_of_their_key() {
        let mut n = Notifications {
            flags: parse_flags("KA").unwrap(),
            ..Default::default()
        };
        n.record_after_next(class::GENERIC, "del", 0, b"src");
        n.record(class::LIST, "lpush", 0, b"dst");
        n.record(class::LIST, "rpop", 0, b"src");
        n.record_after_next(class::GENERIC, "del", 0, b"other");
        let names: Vec<(&str, Vec<u8>)> = n
            .take()
            .into_iter()
            .map(|e| (e.event, e.key.to_vec()))
            .collect();
        let want = [
            ("lpush", "dst"),
            ("rpop", "src"),
            ("del", "src"),
            ("del", "other"),
        ];
        let want: Vec<(&str, Vec<u8>)> = want
            .iter()
            .map(|(e, k)| (*e, k.as_bytes().to_vec()))
            .collect();
        assert_eq!(names, want);
        assert!(!n.pending());
        n.record(class::LIST, "lpush", 0, b"a");
        n.hold();
        n.record(class::LIST, "lpush", 0, b"b");
        assert!(n.take().is_empty(), "held");
        n.discard_held();
        assert_eq!(n.take().len(), 1, "only the event from before the hold");
        n.hold();
        n.record(class::LIST, "lpush", 0, b"c");
        n.release();
        assert_eq!(n.take().len(), 1);
        assert!(!n.pending());
    }
}
