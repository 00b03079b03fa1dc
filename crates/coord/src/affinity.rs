//! Connection affinity: a connection whose commands keep going to one other shard moves to
//! that shard's thread, where they run inline instead of costing two cross-thread messages
//! (and often two wake-ups) each. A client hammering one key, or one hash tag, ends up on
//! the key's thread; a client spreading its keys over every shard never builds a streak and
//! stays where it was accepted. A publisher whose messages all go to subscribers on one
//! other thread moves there too, and delivers inline.
//!
//! Only unpipelined rounds count for keyed commands: a pipelined round pays one hop for many
//! commands. Every PUBLISH counts: each message for another thread is a message there.
//!
//! A move happens only between rounds, with every reply written and no state tied to the
//! thread: not in MULTI, not watching, not blocked, not subscribed, not tracking, not
//! monitoring, CLIENT REPLY on. Unread input travels with it. A connection whose I/O layer
//! holds state that cannot travel with the socket (TLS) never moves (`stay_on_thread`). The I/O loop (damselfly_net)
//! hands the socket over; this module decides when, and carries the session
//! (docs/architecture.md, "Connection affinity").

use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crate::client::ClientInfo;
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::worker::Worker;

/// Consecutive commands for one other shard before the first move. Random keys over two
/// shards make a streak of 64 about once in 10^19 commands.
const MOVE_AFTER: u32 = 64;
/// Rounds of more commands than this do not count: a pipelining client pays one hop per
/// round, not per command, and its connections spread over every thread parse and write in
/// parallel (docs/benchmarks.md, "Request path (issue #17)", compares both rules).
const UNPIPELINED_ROUND: usize = 2;
/// Each move doubles the streak the next one needs (up to this many doublings), so a client
/// whose phases alternate between shards settles instead of bouncing.
const MAX_DOUBLINGS: u32 = 10;

/// Where a connection's keyed commands have been going.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Affinity {
    shard: usize,
    streak: u32,
    moves: u32,
}

impl Affinity {
    /// Counts a command that ran on `target`, from a connection living on `home`, in a
    /// round of `round_len` commands.
    pub(crate) fn note(&mut self, target: usize, home: usize, round_len: usize) {
        if target == home || round_len > UNPIPELINED_ROUND {
            self.streak = 0;
        } else if target == self.shard {
            self.streak = self.streak.saturating_add(1);
        } else {
            self.shard = target;
            self.streak = 1;
        }
    }

    /// Counts a PUBLISH whose receivers all live on thread `only` (None: on several, or
    /// none). Pipelined rounds count too: each message to another thread is a message
    /// there, whatever the round.
    pub(crate) fn note_publish(&mut self, only: Option<usize>, home: usize) {
        if let Some(thread) = only {
            self.note(thread, home, UNPIPELINED_ROUND);
        } else {
            self.streak = 0;
        }
    }

    /// The shard to move to, once its streak is long enough.
    pub(crate) fn due(&self) -> Option<usize> {
        let needed = MOVE_AFTER << self.moves.min(MAX_DOUBLINGS);
        (self.streak >= needed).then_some(self.shard)
    }

    fn moved(&mut self) {
        self.streak = 0;
        self.moves += 1;
    }
}

/// A connection's session on its way to another thread: everything CLIENT LIST shows and the
/// commands depend on, plus the input not yet run. Until a thread attaches it, it still
/// counts as a connected client; dropping it unattached (the server shutting down) releases
/// that.
pub struct MovedClient {
    id: u64,
    addr: String,
    laddr: String,
    created: Instant,
    last_active: Instant,
    name: Vec<u8>,
    lib_name: Vec<u8>,
    lib_ver: Vec<u8>,
    db: usize,
    resp: u8,
    last_cmd: &'static str,
    last_subcommand: Vec<u8>,
    authenticated: bool,
    user: Arc<damselfly_acl::User>,
    acl_epoch: u64,
    affinity: Affinity,
    unread: Vec<u8>,
    /// Set until attached: releases the client's `maxclients` slot if it never is.
    release: Option<Arc<Cluster>>,
}

impl MovedClient {
    /// The shard thread it is going to.
    pub fn target(&self) -> usize {
        self.affinity.shard
    }
}

impl Drop for MovedClient {
    fn drop(&mut self) {
        if let Some(cluster) = self.release.take() {
            cluster.release_client();
        }
    }
}

impl Connection {
    /// The shard thread this connection should move to now, if any (see the module doc).
    pub fn move_target(&self) -> Option<usize> {
        if self.stays {
            return None;
        }
        let target = self.affinity.due()?;
        let config = &self.worker.cluster.config;
        let quiet = self.writes_alone() && self.watching.is_empty() && !self.reply_in_flight();
        let allowed = config.migrate_connections.load(Ordering::Relaxed)
            && !self.worker.cluster.shutdown.is_triggered();
        (quiet && allowed && target < self.worker.num_shards()).then_some(target)
    }

    /// Takes the session off this thread (the caller hands the socket over with it).
    pub fn detach(mut self) -> MovedClient {
        self.worker.clients.borrow_mut().remove(self.info.id);
        self.worker.stats.borrow_mut().connections_moved += 1;
        self.moved_away = true;
        self.affinity.moved();
        let info = &self.info;
        MovedClient {
            id: info.id,
            addr: info.addr.clone(),
            laddr: info.laddr.clone(),
            created: info.created,
            last_active: info.last_active.get(),
            name: info.name.take(),
            lib_name: info.lib_name.take(),
            lib_ver: info.lib_ver.take(),
            db: info.db.get(),
            resp: info.resp.get(),
            last_cmd: info.last_cmd.get(),
            last_subcommand: info.last_subcommand.take(),
            authenticated: self.authenticated,
            user: info.user.borrow().clone(),
            acl_epoch: self.acl_epoch,
            affinity: self.affinity,
            unread: self.unread().to_vec(),
            release: Some(self.worker.cluster.clone()),
        }
    }

    /// Resumes a moved session on this thread, reading from `fd` (the handed-over socket).
    /// None when its unread input alone is over the query buffer limit.
    pub fn attach(worker: Rc<Worker>, mut moved: MovedClient, fd: i32) -> Option<Connection> {
        moved.release = None;
        let mut info = ClientInfo::new(
            moved.id,
            fd,
            std::mem::take(&mut moved.addr),
            std::mem::take(&mut moved.laddr),
            moved.user.clone(),
        );
        info.created = moved.created;
        info.last_active.set(moved.last_active);
        info.name.replace(std::mem::take(&mut moved.name));
        info.lib_name.replace(std::mem::take(&mut moved.lib_name));
        info.lib_ver.replace(std::mem::take(&mut moved.lib_ver));
        info.db.set(moved.db);
        info.last_cmd.set(moved.last_cmd);
        info.last_subcommand
            .replace(std::mem::take(&mut moved.last_subcommand));
        let mut conn = Connection::with_info(worker, Rc::new(info), moved.authenticated);
        conn.set_protocol(moved.resp);
        conn.acl_epoch = moved.acl_epoch;
        conn.affinity = moved.affinity;
        conn.feed(&moved.unread).then_some(conn)
    }
}
