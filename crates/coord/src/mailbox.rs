//! Per-shard mailboxes: a crossbeam channel plus an `AtomicWaker`. A sender pushes and wakes the
//! owner's mailbox task only if that task is parked; the owner drains everything queued per
//! wake-up. No lock, no blocking `recv()` inside the event loop, no spinning when idle.

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

use atomic_waker::AtomicWaker;
use crossbeam_channel::{Receiver, Sender, TryRecvError};

pub struct MailboxSender<T> {
    tx: Sender<T>,
    waker: Arc<AtomicWaker>,
}

impl<T> Clone for MailboxSender<T> {
    fn clone(&self) -> Self {
        MailboxSender {
            tx: self.tx.clone(),
            waker: self.waker.clone(),
        }
    }
}

impl<T> MailboxSender<T> {
    /// Queues a message; false when the owner has gone (server shutting down).
    pub fn send(&self, msg: T) -> bool {
        let ok = self.tx.send(msg).is_ok();
        self.waker.wake();
        ok
    }
}

pub struct Mailbox<T> {
    rx: Receiver<T>,
    waker: Arc<AtomicWaker>,
}

/// A new mailbox and its sending side.
pub fn mailbox<T>() -> (MailboxSender<T>, Mailbox<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let waker = Arc::new(AtomicWaker::new());
    (
        MailboxSender {
            tx,
            waker: waker.clone(),
        },
        Mailbox { rx, waker },
    )
}

impl<T> Mailbox<T> {
    /// Waits until at least one message is queued, then moves every queued message into `out`.
    /// Returns false when every sender is gone and the mailbox is empty.
    pub async fn recv_all(&self, out: &mut Vec<T>) -> bool {
        poll_fn(|cx| {
            if let Drained::Messages = self.drain(out) {
                return Poll::Ready(true);
            }
            self.waker.register(cx.waker());
            // Re-check after registering so a send racing with registration is not lost.
            match self.drain(out) {
                Drained::Messages => Poll::Ready(true),
                Drained::Closed => Poll::Ready(false),
                Drained::Empty => Poll::Pending,
            }
        })
        .await
    }

    fn drain(&self, out: &mut Vec<T>) -> Drained {
        let mut n = 0;
        loop {
            match self.rx.try_recv() {
                Ok(m) => {
                    out.push(m);
                    n += 1;
                }
                Err(TryRecvError::Empty) if n > 0 => return Drained::Messages,
                Err(TryRecvError::Disconnected) if n > 0 => return Drained::Messages,
                Err(TryRecvError::Empty) => return Drained::Empty,
                Err(TryRecvError::Disconnected) => return Drained::Closed,
            }
        }
    }
}

/// What one drain of the channel found.
enum Drained {
    Messages,
    Empty,
    /// Every sender is gone and nothing is queued.
    Closed,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::task::{Context, Wake, Waker};

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    #[test]
    fn wakes_a_parked_receiver_and_drains_everything() {
        let (tx, mb) = mailbox::<u32>();
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        let mut fut = Box::pin(mb.recv_all(&mut out));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        let t = std::thread::spawn(move || {
            for i in 0..3 {
                tx.send(i);
            }
        });
        t.join().unwrap();
        assert!(
            flag.0.load(std::sync::atomic::Ordering::SeqCst),
            "sender must wake the owner"
        );
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(true));
        drop(fut);
        assert_eq!(out, vec![0, 1, 2]);
    }

    use std::future::Future;
}
