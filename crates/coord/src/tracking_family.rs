//! CLIENT TRACKING, CACHING, GETREDIR and TRACKINGINFO, and how invalidations travel
//! (docs/pubsub.md, "Client-side caching").
//!
//! A shard remembers which clients read its keys (damselfly_storage::tracking) while it runs
//! their read commands, so a read and its registration are one step. A change there makes
//! invalidations, which its thread sends to the readers' threads; each thread delivers to its
//! own clients (or forwards to a REDIRECT client's thread). BCAST prefixes are replicated to
//! every thread, so each shard knows which changed keys to announce and to which threads.

use std::collections::BTreeMap;

use damselfly_commands::table::{flags, COMMANDS};
use damselfly_commands::{errors, Args};
use damselfly_protocol::number::parse_i64;
use damselfly_pubsub::{Redirect, TrackingState};
use damselfly_storage::tracking::{Caller, Pending};

use crate::client::ClientInfo;
use crate::connection::Connection;
use crate::messages::ShardMsg;
use crate::worker::Worker;

/// Invalidations for the clients of one thread: (client, key or None for everything, writer).
type ForThread = Vec<(u64, Option<Box<[u8]>>, u64)>;

/// Changed keys under BCAST prefixes, with the clients that changed them.
type ChangedKeys = Vec<(Box<[u8]>, u64)>;

/// A thread's replica of every BCAST prefix: clients per thread registered for it.
#[derive(Default)]
pub(crate) struct BcastDirectory {
    prefixes: BTreeMap<Box<[u8]>, Vec<u32>>,
}

impl BcastDirectory {
    /// Threads with a client whose prefix matches one of `keys`.
    fn threads_for(&self, keys: &ChangedKeys, threads: usize) -> Vec<bool> {
        let mut to = vec![false; threads];
        for (prefix, counts) in &self.prefixes {
            if keys.iter().any(|(k, _)| k.starts_with(prefix)) {
                for (t, &n) in counts.iter().enumerate() {
                    to[t] |= n > 0;
                }
            }
        }
        to
    }

    pub fn len(&self) -> usize {
        self.prefixes.len()
    }
}

impl Worker {
    /// After a command ran here: remembers the keys it read for its caller when it is a
    /// read command of a tracking client, and forgets the caller.
    pub(crate) fn end_tracked_call(&self, spec: usize, args: &Args) {
        let spec = &COMMANDS[spec];
        let mut shard = self.shard.borrow_mut();
        if shard.tracking.caller.tracks && spec.flags & flags::READONLY != 0 {
            for p in spec.key_positions_iter(args) {
                shard.tracking.remember(args.get(p));
            }
        }
        shard.tracking.caller = Caller::default();
    }

    /// Sends the invalidations this shard's changes made to the threads of their clients.
    pub(crate) fn send_invalidations(&self) {
        let Pending {
            invalidated,
            broadcast,
            flushed,
        } = {
            let mut shard = self.shard.borrow_mut();
            if !shard.tracking.pending() {
                return;
            }
            shard.tracking.take()
        };
        let threads = self.num_shards();
        let mut per_thread: Vec<ForThread> = vec![Vec::new(); threads];
        for inv in invalidated {
            for r in &inv.readers {
                if let Some(list) = per_thread.get_mut(usize::from(r.thread)) {
                    list.push((r.client, Some(inv.key.clone()), inv.writer));
                }
            }
        }
        let to_bcast = if broadcast.is_empty() {
            vec![false; threads]
        } else {
            self.pubsub.borrow().bcast.threads_for(&broadcast, threads)
        };
        let broadcast = std::sync::Arc::new(broadcast);
        for (t, list) in per_thread.into_iter().enumerate() {
            let bcast = to_bcast[t].then(|| broadcast.clone());
            if list.is_empty() && bcast.is_none() {
                continue;
            }
            if t == self.id {
                self.deliver_invalidations(list, bcast.as_deref());
            } else {
                self.cluster.mailboxes[t].send(ShardMsg::Call(Box::new(move |w: &Worker| {
                    w.deliver_invalidations(list, bcast.as_deref())
                })));
            }
        }
        // Every shard runs a flush, so each thread tells only its own clients.
        if flushed {
            let clients: Vec<u64> = self.clients.borrow().tracking().map(|c| c.id).collect();
            let list = clients.into_iter().map(|id| (id, None, 0)).collect();
            self.deliver_invalidations(list, None);
        }
    }

    /// Delivers invalidations to this thread's clients: per key to table-mode clients, per
    /// prefix to BCAST clients; NOLOOP clients skip what they changed themselves.
    fn deliver_invalidations(&self, list: ForThread, broadcast: Option<&ChangedKeys>) {
        for (id, key, writer) in list {
            let Some(info) = self.clients.borrow().get(id).cloned() else {
                continue;
            };
            let wanted = info.tracking.borrow().as_ref().is_some_and(|t| {
                // A flush reaches every tracking client, BCAST ones too.
                key.is_none() || !(t.bcast || t.noloop && writer == id)
            });
            if wanted {
                let keys = key.as_ref().map(|k| vec![&k[..]]);
                self.send_tracking_message(&info, keys.as_deref());
            }
        }
        let Some(broadcast) = broadcast else {
            return;
        };
        let clients: Vec<_> = self.clients.borrow().tracking().cloned().collect();
        for info in clients {
            let (prefixes, noloop) = match &*info.tracking.borrow() {
                Some(t) if t.bcast => (t.prefixes.clone(), t.noloop),
                _ => continue,
            };
            for prefix in prefixes {
                let mut keys: Vec<&[u8]> = broadcast
                    .iter()
                    .filter(|(k, writer)| k.starts_with(&prefix) && !(noloop && *writer == info.id))
                    .map(|(k, _)| &k[..])
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                if !keys.is_empty() {
                    self.send_tracking_message(&info, Some(&keys));
                }
            }
        }
    }

    /// Sends one invalidation to a tracking client, or to its REDIRECT client (here or on
    /// its thread).
    fn send_tracking_message(&self, info: &ClientInfo, keys: Option<&[&[u8]]>) {
        let redirect = match &*info.tracking.borrow() {
            Some(t) => t.redirect,
            None => return,
        };
        match redirect {
            None => {
                info.inbox.push_invalidation(keys, false);
            }
            Some(r) if usize::from(r.thread) == self.id => {
                if !self.push_redirected(r.client, keys) {
                    self.redirect_broken(info.id);
                }
            }
            Some(r) => {
                let keys: Option<Vec<Box<[u8]>>> =
                    keys.map(|ks| ks.iter().map(|&k| k.into()).collect());
                let (origin, origin_thread) = (info.id, self.id);
                let target = r.client;
                self.cluster.mailboxes[usize::from(r.thread)].send(ShardMsg::Call(Box::new(
                    move |w: &Worker| {
                        let words: Option<Vec<&[u8]>> =
                            keys.as_ref().map(|ks| ks.iter().map(|k| &k[..]).collect());
                        if !w.push_redirected(target, words.as_deref()) {
                            w.cluster.mailboxes[origin_thread].send(ShardMsg::Call(Box::new(
                                move |w: &Worker| w.redirect_broken(origin),
                            )));
                        }
                    },
                )));
            }
        }
    }

    /// Writes a redirected invalidation to client `target` of this thread: a push in RESP3,
    /// a `__redis__:invalidate` message in RESP2 Pub/Sub mode. False when it is gone.
    fn push_redirected(&self, target: u64, keys: Option<&[&[u8]]>) -> bool {
        let Some(t) = self.clients.borrow().get(target).cloned() else {
            return false;
        };
        let pubsub_mode = t.subscriptions.get().iter().any(|&n| n > 0);
        t.inbox.push_invalidation(keys, pubsub_mode);
        true
    }

    /// A client's REDIRECT client is gone: flagged, and told (RESP3 only) in place of each
    /// invalidation it misses, as Redis does.
    fn redirect_broken(&self, id: u64) {
        let Some(info) = self.clients.borrow().get(id).cloned() else {
            return;
        };
        let mut tracking = info.tracking.borrow_mut();
        if let Some(t) = tracking.as_mut() {
            if let Some(r) = t.redirect {
                t.broken_redirect = true;
                info.inbox.push_broken_redirect(r.client);
            }
        }
    }

    /// Applies a client's BCAST prefixes registered (`added`) or dropped on `thread`, and
    /// gives the shard the new set.
    fn apply_bcast(&self, prefixes: &[Box<[u8]>], thread: usize, added: bool) {
        let mut ps = self.pubsub.borrow_mut();
        let dir = &mut ps.bcast.prefixes;
        let threads = self.num_shards();
        for p in prefixes {
            let counts = dir.entry(p.clone()).or_insert_with(|| vec![0; threads]);
            if added {
                counts[thread] += 1;
            } else {
                counts[thread] = counts[thread].saturating_sub(1);
                if counts.iter().all(|&n| n == 0) {
                    dir.remove(p);
                }
            }
        }
        let all = dir.keys().cloned().collect();
        self.shard.borrow_mut().tracking.set_prefixes(all);
    }

    /// Keeps this shard's share of `tracking-table-max-keys` (tick).
    pub(crate) fn limit_tracking_table(&self) {
        let keys = self.shard.borrow().tracking.keys();
        if keys == 0 {
            return;
        }
        let max = self.cluster.config.get_u64("tracking-table-max-keys");
        if max == 0 {
            return;
        }
        // Rounded down, so the shards together stay within the limit.
        let share = usize::try_from(max / self.num_shards() as u64).unwrap_or(usize::MAX);
        self.shard.borrow_mut().tracking.limit(share);
        self.send_invalidations();
    }

    /// (tracking clients here, tracked keys, tracked items) for INFO.
    pub(crate) fn tracking_counts(&self) -> (usize, usize, usize) {
        let shard = self.shard.borrow();
        (
            self.clients.borrow().tracking().count(),
            shard.tracking.keys(),
            shard.tracking.items(),
        )
    }

    /// Distinct BCAST prefixes in the whole server (INFO `tracking_total_prefixes`).
    pub(crate) fn tracking_prefixes(&self) -> usize {
        self.pubsub.borrow().bcast.len()
    }
}

/// CLIENT TRACKING ON's options.
#[derive(Default)]
struct TrackingOptions {
    redirect: Option<u64>,
    bcast: bool,
    optin: bool,
    optout: bool,
    noloop: bool,
    prefixes: Vec<Box<[u8]>>,
}

impl Connection {
    /// Who runs this client's commands on a shard: itself, and whether its reads are tracked.
    pub(crate) fn caller(&self) -> Caller {
        Caller {
            client: self.info.id,
            thread: u16::try_from(self.worker.id).unwrap_or(u16::MAX),
            tracks: self
                .info
                .tracking
                .borrow()
                .as_ref()
                .is_some_and(TrackingState::tracks_reads),
        }
    }

    /// CLIENT CACHING lasts one command: any but CLIENT, and all of a MULTI up to EXEC.
    pub(crate) fn after_command_caching(&self, name: &[u8]) {
        if self.multi.is_none() && !name.eq_ignore_ascii_case(b"client") {
            if let Some(t) = self.info.tracking.borrow_mut().as_mut() {
                t.caching = None;
            }
        }
    }

    /// CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]... [BCAST] [OPTIN] [OPTOUT] [NOLOOP].
    pub(crate) async fn client_tracking(&mut self, args: &Args<'_>) {
        let mut o = TrackingOptions::default();
        let mut j = 3;
        while j < args.len() {
            let more = j + 1 < args.len();
            match args.get(j).to_ascii_lowercase().as_slice() {
                b"redirect" if more => {
                    j += 1;
                    if o.redirect.is_some() {
                        return self.reply_error(
                            "ERR A client can only redirect to a single other client",
                        );
                    }
                    let Some(id) = parse_i64(args.get(j)) else {
                        return self.reply_error(errors::NOT_INT);
                    };
                    o.redirect = Some(id as u64);
                }
                b"prefix" if more => {
                    j += 1;
                    o.prefixes.push(args.get(j).into());
                }
                b"bcast" => o.bcast = true,
                b"optin" => o.optin = true,
                b"optout" => o.optout = true,
                b"noloop" => o.noloop = true,
                _ => return self.reply_error(errors::SYNTAX),
            }
            j += 1;
        }
        // Redis looks the redirect client up while parsing, before the other checks.
        let redirect = match o.redirect {
            Some(id) => match self.find_client(id).await {
                Some(thread) => Some(Redirect { client: id, thread }),
                None => {
                    return self
                        .reply_error("ERR The client ID you want redirect to does not exist")
                }
            },
            None => None,
        };
        if args.is(2, "off") {
            self.tracking_off().await;
            return self.out.ok();
        }
        if !args.is(2, "on") {
            return self.reply_error(errors::SYNTAX);
        }
        if let Some(refusal) = self.tracking_refusal(&o) {
            return self.reply_error(&refusal);
        }
        let mut state = self.info.tracking.borrow_mut().take().unwrap_or_default();
        let mut added = Vec::new();
        if o.bcast {
            // BCAST without PREFIX registers the empty prefix, even beside others.
            if o.prefixes.is_empty() {
                o.prefixes.push(Box::default());
            }
            for p in o.prefixes {
                if !state.prefixes.contains(&p) {
                    state.prefixes.push(p.clone());
                    added.push(p);
                }
            }
            state.prefixes.sort();
        }
        state.redirect = redirect;
        state.bcast = o.bcast;
        state.optin = o.optin;
        state.optout = o.optout;
        state.noloop = o.noloop;
        state.broken_redirect = false;
        *self.info.tracking.borrow_mut() = Some(state);
        if !added.is_empty() {
            self.share_bcast(added, true).await;
        }
        self.out.ok();
    }

    /// Redis's checks of CLIENT TRACKING ON, in its order.
    fn tracking_refusal(&self, o: &TrackingOptions) -> Option<String> {
        let current = self.info.tracking.borrow();
        if !o.bcast && !o.prefixes.is_empty() {
            return Some("ERR PREFIX option requires BCAST mode to be enabled".into());
        }
        if current.as_ref().is_some_and(|t| t.bcast != o.bcast) {
            return Some("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.".into());
        }
        if o.bcast && (o.optin || o.optout) {
            return Some("ERR OPTIN and OPTOUT are not compatible with BCAST".into());
        }
        if o.optin && o.optout {
            return Some("ERR You can't specify both OPTIN mode and OPTOUT mode".into());
        }
        if let Some(t) = current.as_ref() {
            if (o.optin && t.optout) || (o.optout && t.optin) {
                return Some("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.".into());
            }
        }
        let lossy = |p: &[u8]| String::from_utf8_lossy(p).into_owned();
        for (i, p) in o.prefixes.iter().enumerate() {
            if let Some(existing) = current.as_ref().and_then(|t| t.overlapping(p)) {
                return Some(format!("ERR Prefix '{}' overlaps with an existing prefix '{}'. Prefixes for a single client must not overlap.", lossy(p), lossy(existing)));
            }
            if let Some(other) = o.prefixes[i + 1..]
                .iter()
                .find(|q| q.starts_with(p) || p.starts_with(q))
            {
                return Some(format!("ERR Prefix '{}' overlaps with another provided prefix '{}'. Prefixes for a single client must not overlap.", lossy(p), lossy(other)));
            }
        }
        None
    }

    /// Turns tracking off (CLIENT TRACKING OFF, RESET, disconnection).
    pub(crate) async fn tracking_off(&mut self) {
        let state = self.info.tracking.borrow_mut().take();
        if let Some(t) = state {
            if t.bcast && !t.prefixes.is_empty() {
                self.share_bcast(t.prefixes, false).await;
            }
        }
    }

    /// A disconnecting client's BCAST prefixes go, without waiting for other threads.
    pub(crate) fn drop_tracking(&mut self) {
        let state = self.info.tracking.borrow_mut().take();
        if let Some(t) = state.filter(|t| t.bcast) {
            let thread = self.worker.id;
            for mb in &self.worker.cluster.mailboxes {
                let prefixes = t.prefixes.clone();
                mb.send(ShardMsg::Call(Box::new(move |w: &Worker| {
                    w.apply_bcast(&prefixes, thread, false)
                })));
            }
        }
    }

    /// Registers (or drops) BCAST prefixes on every thread, and waits until all did, so
    /// a write anywhere after the reply is announced.
    async fn share_bcast(&mut self, prefixes: Vec<Box<[u8]>>, added: bool) {
        let thread = self.worker.id;
        self.ask_all(|done| {
            let prefixes = prefixes.clone();
            ShardMsg::Call(Box::new(move |w: &Worker| {
                w.apply_bcast(&prefixes, thread, added);
                let _ = done.send(());
            }))
        })
        .await;
    }

    /// The thread of client `id`, if it is connected.
    async fn find_client(&mut self, id: u64) -> Option<u16> {
        let found = self
            .ask_all(|done| {
                ShardMsg::Call(Box::new(move |w: &Worker| {
                    let here = w.clients.borrow().get(id).is_some();
                    let _ = done.send(here.then_some(w.id));
                }))
            })
            .await;
        found
            .into_iter()
            .flatten()
            .next()
            .and_then(|t| u16::try_from(t).ok())
    }

    /// CLIENT CACHING YES|NO.
    pub(crate) fn client_caching(&mut self, args: &Args<'_>) {
        let mut tracking = self.info.tracking.borrow_mut();
        let Some(t) = tracking.as_mut() else {
            drop(tracking);
            return self.reply_error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled");
        };
        let refusal = if args.is(2, "yes") {
            if t.optin {
                t.caching = Some(true);
                None
            } else {
                Some("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
            }
        } else if args.is(2, "no") {
            if t.optout {
                t.caching = Some(false);
                None
            } else {
                Some("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
            }
        } else {
            Some(errors::SYNTAX)
        };
        drop(tracking);
        match refusal {
            Some(e) => self.reply_error(e),
            None => self.out.ok(),
        }
    }

    /// CLIENT GETREDIR: the REDIRECT client, 0 when tracking without one, -1 when off.
    pub(crate) fn client_getredir(&mut self) {
        let redirect = self.info.redirect();
        self.out.int(redirect);
    }

    /// CLIENT TRACKINGINFO: flags, redirect and prefixes.
    pub(crate) fn client_trackinginfo(&mut self) {
        let redirect = self.info.redirect();
        let (words, prefixes) = match &*self.info.tracking.borrow() {
            Some(t) => (t.flag_words(), t.prefixes.clone()),
            None => (vec!["off"], Vec::new()),
        };
        let out = &mut self.out;
        out.map(3);
        out.bulk(b"flags");
        out.set(words.len());
        for w in words {
            out.bulk(w.as_bytes());
        }
        out.bulk(b"redirect");
        out.int(redirect);
        out.bulk(b"prefixes");
        out.array(prefixes.len());
        for p in prefixes {
            out.bulk(&p);
        }
    }
}
