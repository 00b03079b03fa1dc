//! Direct replies: the shard thread that runs a client's command writes its reply straight to
//! the client's socket, so the client's own thread is not woken just to relay it.
//!
//! A command whose key lives on another thread otherwise costs three wake-ups: the client's
//! thread for the request, the shard's thread to run it, and the client's thread again for
//! the reply. Where threads sleep between requests each is a context switch and an
//! inter-processor interrupt, which made random-key traffic at `-P 1` cost about twice
//! Redis's CPU per request (docs/benchmarks.md, "Request path"). With a direct reply the
//! client's thread next runs when the client's next request arrives.
//!
//! What keeps the byte stream whole:
//! - Only a round of one command, sent to another shard while nothing else may write to
//!   the connection: a plain socket (not TLS), no unwritten output, not subscribed, not
//!   tracking, not a monitor, CLIENT REPLY ON, no transaction (`Connection::writes_alone`).
//! - While that reply is in flight the connection writes and runs nothing: its next step
//!   first settles it (and pushes wait, see `take_pushes`).
//! - The shard writes once the message that made the reply is done (`Worker::handle`),
//!   without blocking, under the socket's lock. What it could not write (a
//!   full socket buffer, a reply over the client's output limit, a slow-log entry the
//!   client's thread must record) comes back as an ordinary reply, which the connection
//!   writes before anything else.
//! - Before the socket is closed or handed to another thread the connection revokes it
//!   under that lock, so a shard never writes to a descriptor that was closed and reused.
//! - When everything was written the shard tells the client's thread without waking it (the
//!   news is needed only when the client's next request arrives). A connection that needs
//!   it sooner sets `settling`, and then the shard wakes its thread.

use std::os::fd::RawFd;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::connection::{Connection, PendingSlot, ReplyMode};
use crate::messages::{BatchReply, Payload, ShardMsg};
use crate::reply_slots::ReplyWait;
use crate::worker::Worker;

/// A reply a shard is writing: the shard, and where its answer (what it did not write, or a
/// script run it handed back) arrives.
pub(crate) struct InFlight {
    pub shard: usize,
    pub wait: ReplyWait,
}

/// A client's socket as other threads may write to it.
#[derive(Debug)]
pub struct ClientSocket {
    /// The descriptor; -1 once revoked.
    fd: Mutex<RawFd>,
    /// The client's thread waits for the reply in flight: the shard must wake it.
    settling: AtomicBool,
}

impl ClientSocket {
    pub(crate) fn new(fd: RawFd) -> Arc<Self> {
        Arc::new(ClientSocket {
            fd: Mutex::new(fd),
            settling: AtomicBool::new(false),
        })
    }

    /// Writes as much of `bytes` as the socket takes without waiting; returns how much.
    fn write_now(&self, bytes: &[u8]) -> usize {
        let fd = self.fd.lock().unwrap_or_else(PoisonError::into_inner);
        if *fd < 0 {
            return 0;
        }
        let mut done = 0;
        while done < bytes.len() {
            let rest = &bytes[done..];
            // SAFETY: the descriptor stays open while its lock is held (`revoke`), and the
            // buffer is valid for `rest.len()` bytes.
            let n = unsafe {
                libc::send(
                    *fd,
                    rest.as_ptr().cast(),
                    rest.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            match usize::try_from(n) {
                Ok(n) if n > 0 => done += n,
                _ if n < 0
                    && std::io::Error::last_os_error().kind()
                        == std::io::ErrorKind::Interrupted => {}
                // A full buffer or an error: the client's thread writes the rest, and sees
                // the error itself.
                _ => break,
            }
        }
        done
    }

    /// No other thread writes to the socket after this returns.
    pub(crate) fn revoke(&self) {
        *self.fd.lock().unwrap_or_else(PoisonError::into_inner) = -1;
    }
}

impl Worker {
    /// Sends the answer to a batch that asked for a direct reply (module doc), after writing
    /// to the client's socket what it takes; after the message that made the reply has had
    /// its consequences, as for every reply (`Worker::handle`).
    pub(crate) fn reply_directly(&self, origin: usize, slot: usize, mut reply: BatchReply) {
        let mailbox = &self.cluster.mailboxes[origin];
        let socket = match reply.socket.take() {
            Some(socket) if reply.ends.len() == 1 && reply.slow.is_empty() => socket,
            _ => {
                mailbox.send(ShardMsg::Reply {
                    slot,
                    reply: Payload::Batch(reply),
                });
                return;
            }
        };
        let written = socket.write_now(&reply.out);
        let whole = written == reply.out.len();
        if whole {
            self.keep_reply_buffers(
                std::mem::take(&mut reply.out),
                std::mem::take(&mut reply.ends),
            );
            reply.written = true;
        } else {
            reply.out.drain(..written);
            reply.ends[0] = reply.out.len();
        }
        let mut stats = self.stats.borrow_mut();
        stats.net_output_bytes += written as u64;
        stats.direct_replies += u64::from(whole);
        drop(stats);
        let msg = ShardMsg::Reply {
            slot,
            reply: Payload::Batch(reply),
        };
        if !whole {
            mailbox.send(msg);
            return;
        }
        mailbox.send_quiet(msg);
        // Pairs with the fence in `settle`: either it finds this answer queued, or this sees
        // it settling and wakes its thread.
        fence(Ordering::SeqCst);
        if socket.settling.load(Ordering::SeqCst) {
            mailbox.wake_if_sleeping();
        }
    }
}

impl Connection {
    /// Nothing but this round's reply can reach the client until it is written: no other
    /// output, pushes, transaction or reply mode stands between (module doc).
    pub(crate) fn writes_alone(&self) -> bool {
        self.tx.is_none()
            && self.multi.is_none()
            && self.blocked.is_none()
            && !self.subscribed()
            && self.info.tracking.borrow().is_none()
            && !self.info.monitor.get()
            && self.info.inbox.is_empty()
            && self.reply_mode == ReplyMode::On
            && self.out.buf.is_empty()
            && !self.closing
            && !self.over_output_limit()
            && !self.killed()
    }

    /// Sends the round's one remote command with its socket, if it qualifies for a direct
    /// reply (module doc); false to wait for the reply as usual.
    pub(crate) fn send_for_direct_reply(&mut self) -> bool {
        let [PendingSlot { shard, .. }] = self.pending[..] else {
            return false;
        };
        let Some(socket) = self.direct_reply_socket(shard) else {
            return false;
        };
        let mut batch = self.take_batch(shard);
        batch.reply_limit = self.out.limit;
        batch.socket = Some(socket);
        self.pending.clear();
        self.runs_batched_for = None;
        let wait = self.worker.send_batch(shard, batch);
        self.in_flight = Some(InFlight { shard, wait });
        true
    }

    /// The socket `shard` may write this round's one reply to, when the round qualifies
    /// for a direct reply (module doc).
    pub(crate) fn direct_reply_socket(&self, shard: usize) -> Option<Arc<ClientSocket>> {
        let socket = self.socket.as_ref()?;
        let config = &self.worker.cluster.config;
        let qualifies = self.round_len == 1
            && config.direct_replies.load(Ordering::Relaxed)
            && !self.unsent_output
            && shard != self.worker.id
            && self.affinity.due().is_none()
            && self.writes_alone();
        qualifies.then(|| socket.clone())
    }

    /// True while a shard may be writing this connection's reply.
    pub fn reply_in_flight(&self) -> bool {
        self.in_flight.is_some()
    }

    /// Resolves once the answer to the reply in flight has arrived (the next `step` takes
    /// it); never when none is in flight. Holds no borrow of the connection.
    pub fn in_flight_arrived(&self) -> impl std::future::Future<Output = ()> + 'static {
        let worker = self.worker.clone();
        let slot = self.in_flight.as_ref().map(|f| f.wait.slot);
        std::future::poll_fn(move |cx| match slot {
            Some(slot) => worker.replies.borrow_mut().poll_arrived(slot, cx),
            None => std::task::Poll::Pending,
        })
    }

    /// Waits for the reply in flight and puts what the shard did not write into the output.
    pub async fn settle(&mut self) {
        let Some(InFlight { shard, wait }) = self.in_flight.take() else {
            return;
        };
        self.set_settling(true);
        fence(Ordering::SeqCst);
        // An answer sent without waking this thread may be queued already.
        self.worker.poke_mailbox();
        let mut answer = wait.await;
        self.set_settling(false);
        if let Some(Payload::Batch(r)) = &mut answer {
            if let Some(watch) = r.handed_back.take() {
                // A script run its shard did not finish (it needs other shards, or the
                // shard's VM was busy).
                return self.run_script_again(watch).await;
            }
            self.take_batch_home(shard, r);
            if r.written && r.slow.is_empty() {
                // Written whole: nothing to add.
                return;
            }
        }
        self.pending.push(PendingSlot {
            at: self.out.buf.len(),
            shard,
            index: 0,
        });
        let mut replies: Vec<Option<BatchReply>> = (0..self.batches.len()).map(|_| None).collect();
        if let Some(Payload::Batch(r)) = answer {
            replies[shard] = Some(r);
        }
        self.splice(replies);
    }

    fn set_settling(&self, on: bool) {
        if let Some(s) = &self.socket {
            s.settling.store(on, Ordering::SeqCst);
        }
    }

    /// Before the socket closes or moves: no other thread writes to it any more.
    pub fn revoke_socket(&mut self) {
        if let Some(s) = self.socket.take() {
            s.revoke();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixStream;

    use super::*;

    #[test]
    fn writes_what_the_socket_takes_and_nothing_once_revoked() {
        let (ours, mut theirs) = UnixStream::pair().expect("socketpair");
        let socket = ClientSocket::new(ours.as_raw_fd());
        assert_eq!(socket.write_now(b"+OK\r\n"), 5);
        let mut got = [0; 5];
        theirs.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"+OK\r\n");
        // More than the socket buffer holds: a part is written, without blocking.
        let big = vec![b'x'; 16 << 20];
        let written = socket.write_now(&big);
        assert!(written > 0 && written < big.len(), "wrote {written}");
        socket.revoke();
        assert_eq!(socket.write_now(b"+OK\r\n"), 0);
    }

    #[test]
    fn a_closed_peer_takes_nothing() {
        let (ours, theirs) = UnixStream::pair().expect("socketpair");
        drop(theirs);
        let socket = ClientSocket::new(ours.as_raw_fd());
        assert_eq!(socket.write_now(b"+OK\r\n"), 0);
    }
}
