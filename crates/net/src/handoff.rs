//! Moving a connection to another shard thread (connection affinity, decided in
//! damselfly_coord's affinity module). The socket travels as a duplicate of its descriptor:
//! the old thread drops its stream (which deregisters and closes the original), the new
//! thread wraps the duplicate in its own runtime's stream and serves the session from there.
//! New connections travel the same way: each thread deals the ones it accepts round-robin
//! over all threads (`deal`), so every thread serves its share however the kernel spread the
//! accepts.

use std::cell::Cell;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use damselfly_coord::{Connection, Mailbox, MailboxSender, MovedClient, Worker};

use crate::{Adopted, AdoptedStream};

/// A connection on its way to another thread.
pub(crate) struct MovedConn {
    pub fd: OwnedFd,
    pub unix: bool,
    pub client: MovedClient,
}

/// What reaches a thread's `arrivals` mailbox.
pub(crate) enum Arrival {
    /// A session moving here (boxed: it is several times the size of a socket).
    Moved(Box<MovedConn>),
    /// A connection another thread accepted and dealt here (`deal`), not admitted yet. (If
    /// the server is shutting down the message is dropped, closing the socket.)
    Dealt(Adopted),
}

/// Sends a connection this thread accepted to thread `target` (`deal`).
pub(crate) fn send_dealt(movers: &Movers, target: usize, stream: AdoptedStream) {
    let dealt = Adopted {
        stream,
        unread: Vec::new(),
    };
    movers[target].send(Arrival::Dealt(dealt));
}

/// Hands every connection that arrives in a thread's `arrivals` mailbox to `serve`.
pub(crate) async fn serve_arrivals(arrivals: Mailbox<Arrival>, mut serve: impl FnMut(Arrival)) {
    let mut arrived = Vec::new();
    while arrivals.recv_all(&mut arrived).await {
        arrived.drain(..).for_each(&mut serve);
    }
}

/// Each thread's mailbox for connections moving to it, by thread index.
pub(crate) type Movers = Arc<[MailboxSender<Arrival>]>;

/// Where a connection this thread just accepted is served: None here, else the thread whose
/// turn it is, to be sent there as `Arrival::Dealt`. Accepts alternate over the threads,
/// starting with each thread's own, so whichever threads the kernel woke, each serves about
/// as many clients (redis-benchmark's 50 connections landed 36 to 14 without it).
/// `migrate-connections no` keeps every connection where it was accepted.
pub(crate) fn deal(worker: &Worker) -> Option<usize> {
    thread_local!(static DEALT: Cell<usize> = const { Cell::new(0) });
    let threads = worker.num_shards();
    let allowed = worker
        .cluster
        .config
        .migrate_connections
        .load(Ordering::Relaxed);
    if threads < 2 || !allowed {
        return None;
    }
    let turn = DEALT.with(|d| d.replace(d.get().wrapping_add(1)));
    let target = (worker.id + turn) % threads;
    (target != worker.id).then_some(target)
}

/// The socket's duplicate and kind when `conn` should move now; None to stay.
pub(crate) fn ready_to_move(conn: &Connection, movers: &Movers) -> Option<(OwnedFd, bool)> {
    let target = conn.move_target()?;
    if target >= movers.len() {
        return None;
    }
    // SAFETY: the descriptor belongs to this live connection's stream for this call.
    let fd = unsafe { BorrowedFd::borrow_raw(conn.fd()) };
    let unix = socket2::SockRef::from(&fd).local_addr().ok()?.is_unix();
    let dup = fd.try_clone_to_owned().ok()?;
    Some((dup, unix))
}

/// Sends the session to its new thread; the caller has already dropped its own stream. If
/// the server is shutting down the message is dropped, closing the socket.
pub(crate) fn hand_over(conn: Connection, fd: OwnedFd, unix: bool, movers: &Movers) {
    let client = conn.detach();
    let target = client.target();
    movers[target].send(Arrival::Moved(Box::new(MovedConn { fd, unix, client })));
}

impl MovedConn {
    /// Resumes the session on this thread, reading from the handed-over socket.
    pub(crate) fn attach(
        self,
        worker: &std::rc::Rc<damselfly_coord::Worker>,
    ) -> Option<(Connection, OwnedFd, bool)> {
        let raw = self.fd.as_fd().as_raw_fd();
        let conn = Connection::attach(worker.clone(), self.client, raw)?;
        Some((conn, self.fd, self.unix))
    }
}
