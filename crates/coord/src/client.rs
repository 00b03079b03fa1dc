//! Client bookkeeping on one thread: who is connected here, for CLIENT LIST / INFO / KILL and
//! idle timeouts. Each thread keeps its own registry; CLIENT LIST and KILL ask every thread.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use damselfly_acl::User;
use damselfly_pubsub::{Inbox, TrackingState};

use crate::blocking::Waiter;
use crate::connection::READ_CHUNK;

/// One connected client, shared between its connection and the thread's registry.
pub struct ClientInfo {
    pub id: u64,
    pub fd: i32,
    pub addr: String,
    pub laddr: String,
    pub created: Instant,
    pub last_active: Cell<Instant>,
    pub name: RefCell<Vec<u8>>,
    pub lib_name: RefCell<Vec<u8>>,
    pub lib_ver: RefCell<Vec<u8>>,
    pub db: Cell<usize>,
    pub resp: Cell<u8>,
    pub last_cmd: Cell<&'static str>,
    /// The subcommand of the last command when it was a container (`client|list`).
    pub last_subcommand: RefCell<Vec<u8>>,
    pub query_buf: Cell<usize>,
    pub killed: Cell<bool>,
    /// Commands queued since MULTI, or -1 outside MULTI (CLIENT LIST `multi=`, flag `x`).
    pub multi: Cell<i64>,
    /// The waiter of a blocking command in progress (CLIENT UNBLOCK, CLIENT LIST flag `b`).
    pub(crate) blocked: RefCell<Option<Arc<Waiter>>>,
    /// Channels, patterns and shard channels subscribed to (CLIENT LIST `sub=`, `psub=`,
    /// `ssub=`, flag `P`).
    pub subscriptions: Cell<[usize; 3]>,
    /// In MONITOR mode (CLIENT LIST flag `O`).
    pub monitor: Cell<bool>,
    /// Where pushed messages (Pub/Sub, MONITOR, invalidations) wait for the connection.
    pub inbox: Rc<Inbox>,
    /// CLIENT TRACKING's settings while it is on.
    pub tracking: RefCell<Option<TrackingState>>,
    /// The ACL user it runs as, as of the ACL epoch its connection last saw.
    pub user: RefCell<Arc<User>>,
}

impl ClientInfo {
    pub fn new(id: u64, fd: i32, addr: String, laddr: String, user: Arc<User>) -> Self {
        let now = Instant::now();
        ClientInfo {
            id,
            fd,
            addr,
            laddr,
            created: now,
            last_active: Cell::new(now),
            name: RefCell::new(Vec::new()),
            lib_name: RefCell::new(Vec::new()),
            lib_ver: RefCell::new(Vec::new()),
            db: Cell::new(0),
            resp: Cell::new(2),
            last_cmd: Cell::new("NULL"),
            last_subcommand: RefCell::new(Vec::new()),
            query_buf: Cell::new(0),
            killed: Cell::new(false),
            multi: Cell::new(-1),
            blocked: RefCell::new(None),
            subscriptions: Cell::new([0; 3]),
            monitor: Cell::new(false),
            inbox: Inbox::new(id, false),
            tracking: RefCell::new(None),
            user: RefCell::new(user),
        }
    }

    /// The CLIENT LIST / CLIENT INFO line (without the trailing newline), in Redis's field order.
    pub fn describe(&self, now: Instant) -> String {
        let age = now.duration_since(self.created).as_secs();
        let idle = now.duration_since(self.last_active.get()).as_secs();
        let subs = self.subscriptions.get();
        format!(
            "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} qbuf={} qbuf-free=0 argv-mem=0 multi-mem=0 rbs={READ_CHUNK} rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} user={} redir={} resp={} lib-name={} lib-ver={}",
            self.id,
            self.addr,
            self.laddr,
            self.fd,
            String::from_utf8_lossy(&self.name.borrow()),
            age,
            idle,
            self.flags(),
            self.db.get(),
            subs[0],
            subs[1],
            subs[2],
            self.multi.get(),
            self.query_buf.get(),
            self.last_command_name(),
            String::from_utf8_lossy(&self.user.borrow().name),
            self.redirect(),
            self.resp.get(),
            String::from_utf8_lossy(&self.lib_name.borrow()),
            String::from_utf8_lossy(&self.lib_ver.borrow()),
        )
    }

    /// CLIENT LIST's `redir`: the REDIRECT client while tracking (0 for none), else -1.
    pub fn redirect(&self) -> i64 {
        match &*self.tracking.borrow() {
            Some(t) => t.redirect.map_or(0, |r| r.client as i64),
            None => -1,
        }
    }

    /// CLIENT LIST's flags, in Redis's order.
    fn flags(&self) -> String {
        let mut flags = String::new();
        if self.monitor.get() {
            flags.push('O');
        }
        if self.subscriptions.get().iter().any(|&n| n > 0) {
            flags.push('P');
        }
        if self.multi.get() >= 0 {
            flags.push('x');
        }
        if self.blocked.borrow().is_some() {
            flags.push('b');
        }
        if let Some(t) = &*self.tracking.borrow() {
            flags.push('t');
            if t.broken_redirect {
                flags.push('R');
            }
            if t.bcast {
                flags.push('B');
            }
        }
        if flags.is_empty() {
            flags.push('N');
        }
        flags
    }

    /// The last command as Redis names it in CLIENT LIST: `get`, or `client|list`.
    pub fn last_command_name(&self) -> String {
        let sub = self.last_subcommand.borrow();
        if sub.is_empty() {
            self.last_cmd.get().to_string()
        } else {
            format!("{}|{}", self.last_cmd.get(), String::from_utf8_lossy(&sub))
        }
    }

    /// Closes the socket under the connection so its pending read ends; the connection task
    /// then cleans up. Only the owning thread calls this, while the fd is registered (open).
    pub fn kill(&self) {
        self.killed.set(true);
        // SAFETY: the fd belongs to a live connection registered on this thread.
        unsafe {
            libc::shutdown(self.fd, libc::SHUT_RDWR);
        }
    }
}

/// CLIENT KILL filters (Redis's new form; the old `ip:port` form maps to `addr`).
#[derive(Debug, Clone, Default)]
pub struct KillFilter {
    pub id: Option<u64>,
    pub addr: Option<String>,
    pub laddr: Option<String>,
    pub user: Option<String>,
    pub normal_only: Option<bool>,
    /// The caller's id when SKIPME is yes (the default).
    pub skip: Option<u64>,
    /// The caller's id, so killing oneself closes after the reply instead of at once.
    pub caller: u64,
}

impl KillFilter {
    fn matches(&self, c: &ClientInfo) -> bool {
        self.id.is_none_or(|id| id == c.id)
            && self.addr.as_ref().is_none_or(|a| *a == c.addr)
            && self.laddr.as_ref().is_none_or(|a| *a == c.laddr)
            && self
                .user
                .as_ref()
                .is_none_or(|u| u.as_bytes() == c.user.borrow().name)
            && self.normal_only.is_none_or(|n| n)
            && self.skip != Some(c.id)
    }
}

#[derive(Default)]
pub struct Registry {
    clients: BTreeMap<u64, Rc<ClientInfo>>,
}

impl Registry {
    pub fn add(&mut self, c: Rc<ClientInfo>) {
        self.clients.insert(c.id, c);
    }

    pub fn remove(&mut self, id: u64) {
        self.clients.remove(&id);
    }

    pub fn get(&self, id: u64) -> Option<&Rc<ClientInfo>> {
        self.clients.get(&id)
    }

    /// The clients with CLIENT TRACKING on.
    pub fn tracking(&self) -> impl Iterator<Item = &Rc<ClientInfo>> {
        self.clients
            .values()
            .filter(|c| c.tracking.borrow().is_some())
    }

    pub fn len(&self) -> usize {
        self.clients.len()
    }

    /// Bytes the clients' input takes: each one's read buffer and unparsed query.
    pub fn buffer_bytes(&self) -> usize {
        self.clients
            .values()
            .map(|c| READ_CHUNK + c.query_buf.get())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.clients.is_empty()
    }

    /// CLIENT LIST lines of this thread's clients (all, or those with the given ids). A
    /// killed client is left out although its task may not have cleaned up yet: Redis frees
    /// the clients it kills before it serves another command, so none is ever listed.
    pub fn list(&self, ids: &Option<Vec<u64>>) -> Vec<(u64, String)> {
        let now = Instant::now();
        self.clients
            .values()
            .filter(|c| !c.killed.get())
            .filter(|c| ids.as_ref().is_none_or(|ids| ids.contains(&c.id)))
            .map(|c| (c.id, c.describe(now)))
            .collect()
    }

    /// The waiter of client `id` if it is blocked here.
    pub(crate) fn blocked_waiter(&self, id: u64) -> Option<Arc<Waiter>> {
        self.clients.get(&id)?.blocked.borrow().clone()
    }

    /// Kills matching clients; returns (how many, whether the caller was among them). The
    /// caller itself is only flagged: it closes after its reply is written.
    pub fn kill(&self, filter: &KillFilter) -> (usize, bool) {
        let mut n = 0;
        let mut me = false;
        for c in self.clients.values().filter(|c| filter.matches(c)) {
            n += 1;
            if c.id == filter.caller {
                me = true;
                c.killed.set(true);
            } else {
                c.kill();
            }
        }
        (n, me)
    }

    /// Closes clients idle longer than `timeout_secs` (0 = never).
    pub fn close_idle(&self, timeout_secs: u64) {
        if timeout_secs == 0 {
            return;
        }
        let now = Instant::now();
        for c in self.clients.values() {
            if now.duration_since(c.last_active.get()).as_secs() >= timeout_secs {
                c.kill();
            }
        }
    }

    /// Closes every client (shutdown).
    pub fn close_all(&self) {
        for c in self.clients.values() {
            c.kill();
        }
    }
}
