//! One thread's replica of every subscription in the process: for each channel, shard
//! channel and pattern, how many clients of each thread subscribe to it. Publishing reads it
//! to count recipients and pick the threads to send to; PUBSUB's introspection reads it too.

use damselfly_storage::glob::glob_match;

use crate::{Audience, Change, Kind, Map, Named};

/// Subscribed clients of one name, per thread.
#[derive(Debug)]
struct Counts {
    by_thread: Box<[u32]>,
    total: u64,
}

impl Counts {
    fn new(threads: usize) -> Counts {
        Counts {
            by_thread: vec![0; threads].into_boxed_slice(),
            total: 0,
        }
    }

    /// Adds one (or takes one away); true when nobody is left.
    fn change(&mut self, thread: usize, added: bool) -> bool {
        let Some(n) = self.by_thread.get_mut(thread) else {
            return self.total == 0;
        };
        if added {
            *n += 1;
            self.total += 1;
        } else if *n > 0 {
            *n -= 1;
            self.total -= 1;
        }
        self.total == 0
    }

    fn mark(&self, threads: &mut [bool]) {
        for (t, &n) in threads.iter_mut().zip(self.by_thread.iter()) {
            *t |= n > 0;
        }
    }
}

/// Every subscription in the process, as counts per thread.
#[derive(Debug)]
pub struct Directory {
    threads: usize,
    channels: Map<Counts>,
    shard_channels: Map<Counts>,
    /// Every publish walks the patterns (as Redis does).
    patterns: Named<Counts>,
    monitors: Counts,
}

impl Directory {
    pub fn new(threads: usize) -> Directory {
        Directory {
            threads,
            channels: Map::default(),
            shard_channels: Map::default(),
            patterns: Named::default(),
            monitors: Counts::new(threads),
        }
    }

    pub fn apply(&mut self, c: &Change) {
        let threads = self.threads;
        match c.kind {
            Kind::Channel | Kind::ShardChannel => {
                let map = if c.kind == Kind::Channel {
                    &mut self.channels
                } else {
                    &mut self.shard_channels
                };
                if c.added {
                    map.entry(c.name.clone())
                        .or_insert_with(|| Counts::new(threads))
                        .change(c.thread, true);
                } else if map
                    .get_mut(&c.name)
                    .is_some_and(|counts| counts.change(c.thread, false))
                {
                    map.remove(&c.name);
                }
            }
            Kind::Monitor => {
                self.monitors.change(c.thread, c.added);
            }
            Kind::Pattern => {
                let emptied = if c.added {
                    self.patterns
                        .get_or_insert_with(&c.name, || Counts::new(threads))
                        .change(c.thread, true)
                } else {
                    self.patterns
                        .get_mut(&c.name)
                        .is_some_and(|counts| counts.change(c.thread, false))
                };
                if emptied {
                    self.patterns.remove(&c.name);
                }
            }
        }
    }

    /// How many clients receive a message published on `channel` (PUBLISH's reply: a client
    /// counts once per matching subscription), marking in `threads` each thread that has one.
    pub fn recipients(
        &self,
        audience: Audience,
        channel: &[u8],
        threads: &mut [bool],
        matched: &mut Vec<Box<[u8]>>,
    ) -> u64 {
        match audience {
            Audience::Channel => {}
            Audience::ShardChannel => {
                return self.shard_channels.get(channel).map_or(0, |c| {
                    c.mark(threads);
                    c.total
                })
            }
            Audience::Monitor => {
                self.monitors.mark(threads);
                return self.monitors.total;
            }
        }
        let mut total = 0;
        if let Some(c) = self.channels.get(channel) {
            c.mark(threads);
            total += c.total;
        }
        for (pattern, c) in self.patterns.iter() {
            if glob_match(pattern, channel, false) {
                c.mark(threads);
                total += c.total;
                matched.push(pattern.into());
            }
        }
        total
    }

    /// Channels (or shard channels) with at least one subscriber, matching `pattern` if
    /// given (PUBSUB CHANNELS, SHARDCHANNELS).
    pub fn channels(&self, sharded: bool, pattern: Option<&[u8]>) -> Vec<&[u8]> {
        let map = if sharded {
            &self.shard_channels
        } else {
            &self.channels
        };
        map.keys()
            .map(|k| &**k)
            .filter(|k| pattern.is_none_or(|p| glob_match(p, k, false)))
            .collect()
    }

    /// Clients subscribed to `channel`, patterns aside (PUBSUB NUMSUB, SHARDNUMSUB).
    pub fn subscribers(&self, sharded: bool, channel: &[u8]) -> u64 {
        let map = if sharded {
            &self.shard_channels
        } else {
            &self.channels
        };
        map.get(channel).map_or(0, |c| c.total)
    }

    /// Distinct patterns with a subscriber (PUBSUB NUMPAT, INFO's pubsub_patterns).
    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }

    /// True when some client, on any thread, is in MONITOR mode.
    pub fn monitored(&self) -> bool {
        self.monitors.total > 0
    }

    /// Distinct channels (or shard channels) with a subscriber (INFO's pubsub_channels).
    pub fn channel_count(&self, sharded: bool) -> usize {
        if sharded {
            self.shard_channels.len()
        } else {
            self.channels.len()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(kind: Kind, name: &str, thread: usize, added: bool) -> Change {
        Change {
            kind,
            name: name.as_bytes().into(),
            thread,
            added,
        }
    }

    #[test]
    fn counts_follow_subscriptions_and_patterns_match() {
        let mut d = Directory::new(3);
        d.apply(&change(Kind::Channel, "news", 0, true));
        d.apply(&change(Kind::Channel, "news", 2, true));
        d.apply(&change(Kind::Pattern, "n*", 2, true));
        d.apply(&change(Kind::Pattern, "x*", 1, true));
        d.apply(&change(Kind::ShardChannel, "news", 1, true));
        let mut threads = [false; 3];
        assert_eq!(
            d.recipients(Audience::Channel, b"news", &mut threads, &mut Vec::new()),
            3
        );
        assert_eq!(threads, [true, false, true]);
        let mut threads = [false; 3];
        assert_eq!(
            d.recipients(
                Audience::ShardChannel,
                b"news",
                &mut threads,
                &mut Vec::new()
            ),
            1
        );
        assert_eq!(threads, [false, true, false]);
        assert_eq!(d.subscribers(false, b"news"), 2);
        assert_eq!(d.patterns(), 2);
        assert_eq!(d.channels(false, Some(b"n?ws")), vec![&b"news"[..]]);
        assert!(d.channels(false, Some(b"x*")).is_empty());

        d.apply(&change(Kind::Channel, "news", 0, false));
        d.apply(&change(Kind::Channel, "news", 2, false));
        d.apply(&change(Kind::Pattern, "n*", 2, false));
        assert_eq!(d.channel_count(false), 0);
        assert_eq!(d.patterns(), 1);
        let mut threads = [false; 3];
        let mut matched = Vec::new();
        assert_eq!(
            d.recipients(Audience::Channel, b"xy", &mut threads, &mut matched),
            1
        );
        assert_eq!(matched, [b"x*".as_slice().into()]);
        assert_eq!(threads, [false, true, false]);
        // A removal nobody added changes nothing.
        d.apply(&change(Kind::Pattern, "zz", 0, false));
        d.apply(&change(Kind::Channel, "zz", 0, false));
        assert_eq!((d.patterns(), d.channel_count(false)), (1, 0));
    }
}
