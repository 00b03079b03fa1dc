//! Client-side caching (CLIENT TRACKING): one client's tracking settings, and the
//! invalidation messages in Redis's forms. Which keys a client read is kept by the shards
//! (damselfly_storage::tracking); docs/pubsub.md tells how invalidations travel.

use crate::Inbox;

/// Where a client's invalidations go instead of to itself (REDIRECT).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Redirect {
    pub client: u64,
    pub thread: u16,
}

/// CLIENT TRACKING ON's settings for one client.
#[derive(Debug, Clone, Default)]
pub struct TrackingState {
    pub redirect: Option<Redirect>,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST prefixes (the empty prefix when none was given), sorted as Redis lists them.
    pub prefixes: Vec<Box<[u8]>>,
    /// CLIENT CACHING YES/NO, for the next command only.
    pub caching: Option<bool>,
    /// The redirect client was found gone.
    pub broken_redirect: bool,
}

impl TrackingState {
    /// Whether the keys the next command reads are remembered for this client: never in
    /// BCAST mode; under OPTIN only after CLIENT CACHING YES; under OPTOUT unless after
    /// CLIENT CACHING NO.
    pub fn tracks_reads(&self) -> bool {
        !self.bcast
            && (!self.optin || self.caching == Some(true))
            && (!self.optout || self.caching != Some(false))
    }

    /// CLIENT TRACKINGINFO's flags, in Redis's order.
    pub fn flag_words(&self) -> Vec<&'static str> {
        let mut words = vec!["on"];
        for (set, word) in [
            (self.bcast, "bcast"),
            (self.optin, "optin"),
            (self.optout, "optout"),
            (self.optin && self.caching == Some(true), "caching-yes"),
            (self.optout && self.caching == Some(false), "caching-no"),
            (self.noloop, "noloop"),
            (self.broken_redirect, "broken_redirect"),
        ] {
            if set {
                words.push(word);
            }
        }
        words
    }

    /// A registered prefix that `prefix` overlaps (one starts with the other), if any.
    pub fn overlapping(&self, prefix: &[u8]) -> Option<&[u8]> {
        self.prefixes
            .iter()
            .map(|p| &p[..])
            .find(|p| p.starts_with(prefix) || prefix.starts_with(p))
    }
}

/// The channel RESP2 clients subscribe to for redirected invalidations.
pub const INVALIDATE_CHANNEL: &[u8] = b"__redis__:invalidate";

impl Inbox {
    /// Writes an invalidation of `keys` (None: everything, after a flush): a RESP3
    /// `invalidate` push, or for a RESP2 client in Pub/Sub mode (`pubsub_mode`) a message
    /// on `__redis__:invalidate`. False when the client can receive neither.
    pub fn push_invalidation(&self, keys: Option<&[&[u8]]>, pubsub_mode: bool) -> bool {
        let resp3 = self.resp3();
        if !resp3 && !pubsub_mode {
            return false;
        }
        self.push_with(|out| {
            if resp3 {
                out.push(2);
                out.bulk(b"invalidate");
            } else {
                out.push(3);
                out.bulk(b"message");
                out.bulk(INVALIDATE_CHANNEL);
            }
            match keys {
                Some(keys) => {
                    out.array(keys.len());
                    for k in keys {
                        out.bulk(k);
                    }
                }
                None => out.null(),
            }
        });
        true
    }

    /// Tells a RESP3 client that its redirect client is gone.
    pub fn push_broken_redirect(&self, redirect: u64) {
        if self.resp3() {
            self.push_with(|out| {
                out.push(2);
                out.bulk(b"tracking-redir-broken");
                out.int(i64::try_from(redirect).unwrap_or(i64::MAX));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalidations_in_each_form() {
        let resp3 = Inbox::new(1, true);
        assert!(resp3.push_invalidation(Some(&[b"k"]), false));
        assert_eq!(
            resp3.drained(),
            b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"
        );
        assert!(resp3.push_invalidation(None, false));
        assert_eq!(resp3.drained(), b">2\r\n$10\r\ninvalidate\r\n_\r\n");
        let resp2 = Inbox::new(2, false);
        assert!(!resp2.push_invalidation(Some(&[b"k"]), false));
        assert!(resp2.push_invalidation(Some(&[b"a", b"b"]), true));
        assert_eq!(
            resp2.drained(),
            b"*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        resp2.push_broken_redirect(5);
        assert!(resp2.drained().is_empty());
        resp3.push_broken_redirect(5);
        assert_eq!(
            resp3.drained(),
            b">2\r\n$21\r\ntracking-redir-broken\r\n:5\r\n"
        );
    }

    #[test]
    fn which_reads_are_tracked() {
        let mut s = TrackingState::default();
        assert!(s.tracks_reads());
        s.optin = true;
        assert!(!s.tracks_reads());
        s.caching = Some(true);
        assert!(s.tracks_reads());
        let mut s = TrackingState {
            optout: true,
            ..TrackingState::default()
        };
        assert!(s.tracks_reads());
        s.caching = Some(false);
        assert!(!s.tracks_reads());
        s.bcast = true;
        s.caching = None;
        assert!(!s.tracks_reads());
    }

    #[test]
    fn prefixes_overlap_either_way() {
        let s = TrackingState {
            prefixes: vec![b"ab".as_slice().into()],
            ..TrackingState::default()
        };
        assert_eq!(s.overlapping(b"abc"), Some(b"ab".as_slice()));
        assert_eq!(s.overlapping(b"a"), Some(b"ab".as_slice()));
        assert_eq!(s.overlapping(b"b"), None);
    }
}
