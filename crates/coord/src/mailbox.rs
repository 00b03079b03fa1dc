//! Per-shard mailboxes: a crossbeam channel plus an `AtomicWaker`. The owner drains everything
//! queued per wake-up. No lock, no blocking `recv()` inside the event loop, no spinning when
//! idle.
//!
//! Waking another thread costs a syscall (an eventfd write) and often a context switch, so a
//! sender signals the owner only when the owner is parked or about to park. The owner's event
//! loop reports that through `before_park` / `after_unpark` (the epoll backend wires them to
//! tokio's park hooks); before parking it re-checks the queue, so a message sent while it was
//! busy is never stranded. An event loop that does not report parking (glommio, which has no
//! such hook) is always signalled: `parked` starts true and stays so.
//!
//! The owner may also reach into its queue while it works ([`Mailbox::take_ahead`]): Pub/Sub
//! delivers the messages other threads published before one it publishes itself, and the
//! rest wait in order for the loop.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;
use std::task::Poll;

use atomic_waker::AtomicWaker;
use crossbeam_channel::{Receiver, Sender, TryRecvError};

/// How the owner is woken, shared by both sides.
struct Signal {
    waker: AtomicWaker,
    /// True while the owner's thread may be asleep (or does not report parking).
    parked: AtomicBool,
}

pub struct MailboxSender<T> {
    tx: Sender<T>,
    signal: Arc<Signal>,
}

impl<T> Clone for MailboxSender<T> {
    fn clone(&self) -> Self {
        MailboxSender {
            tx: self.tx.clone(),
            signal: self.signal.clone(),
        }
    }
}

impl<T> MailboxSender<T> {
    /// Queues a message; false when the owner has gone (server shutting down).
    pub fn send(&self, msg: T) -> bool {
        let ok = self.send_quiet(msg);
        self.wake_if_sleeping();
        ok
    }

    /// Queues a message without waking the owner: it is found when the owner's thread next
    /// runs for another reason (or is poked). False when the owner has gone.
    pub fn send_quiet(&self, msg: T) -> bool {
        self.tx.send(msg).is_ok()
    }

    /// Wakes the owner's mailbox task if the owner may be asleep.
    pub fn wake_if_sleeping(&self) {
        // The fence pairs with the one in `before_park` (a store-load pattern that needs
        // both): either we see the owner parked, or it sees our message when it re-checks
        // the queue.
        fence(Ordering::SeqCst);
        if self.signal.parked.load(Ordering::SeqCst) {
            self.signal.waker.wake();
        }
    }

    /// True when messages are queued.
    pub fn has_pending(&self) -> bool {
        !self.tx.is_empty()
    }

    /// Called by the owner's thread: wakes its mailbox task if messages are queued (a local
    /// wake-up, no syscall).
    pub fn poke(&self) {
        if self.has_pending() {
            self.signal.waker.wake();
        }
    }

    /// True while the owner may be asleep, so a send signals it.
    pub fn owner_may_sleep(&self) -> bool {
        self.signal.parked.load(Ordering::SeqCst)
    }

    /// Called by the owner's event loop just before it parks.
    pub fn before_park(&self) {
        self.signal.parked.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        self.poke();
    }

    /// Called by the owner's event loop when it wakes up.
    pub fn after_unpark(&self) {
        self.signal.parked.store(false, Ordering::SeqCst);
    }
}

pub struct Mailbox<T> {
    rx: Receiver<T>,
    signal: Arc<Signal>,
    /// Messages taken from the channel and not handed out yet, oldest first.
    taken: RefCell<VecDeque<T>>,
}

/// A new mailbox and its sending side.
pub fn mailbox<T>() -> (MailboxSender<T>, Mailbox<T>) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let signal = Arc::new(Signal {
        waker: AtomicWaker::new(),
        parked: AtomicBool::new(true),
    });
    (
        MailboxSender {
            tx,
            signal: signal.clone(),
        },
        Mailbox {
            rx,
            signal,
            taken: RefCell::new(VecDeque::new()),
        },
    )
}

impl<T> Mailbox<T> {
    /// Waits until at least one message is queued, then moves every queued message into `out`.
    /// Returns false when every sender is gone and the mailbox is empty.
    pub async fn recv_all(&self, out: &mut Vec<T>) -> bool {
        let open = self.ready().await;
        out.extend(self.taken.borrow_mut().drain(..));
        open
    }

    /// Waits until at least one message is queued, then takes every queued message, for
    /// `pop` to hand out in order. Returns false when every sender is gone and nothing is left.
    pub async fn ready(&self) -> bool {
        poll_fn(|cx| {
            if let Drained::Messages = self.drain() {
                return Poll::Ready(true);
            }
            self.signal.waker.register(cx.waker());
            // Re-check after registering so a send racing with registration is not lost.
            match self.drain() {
                Drained::Messages => Poll::Ready(true),
                Drained::Closed => Poll::Ready(false),
                Drained::Empty => Poll::Pending,
            }
        })
        .await
    }

    /// Takes every queued message now; returns how many wait to be handed out.
    pub fn take_queued(&self) -> usize {
        self.drain();
        self.taken.borrow().len()
    }

    /// The oldest message taken and not handed out yet.
    pub fn pop(&self) -> Option<T> {
        self.taken.borrow_mut().pop_front()
    }

    /// Takes every queued message now and passes each message taken and not handed out yet,
    /// oldest first, to `take`, which handles those it wants and gives back the others; those
    /// keep their order for `pop`. The owner's thread calls it, also while it handles a
    /// message it popped.
    pub fn take_ahead(&self, mut take: impl FnMut(T) -> Option<T>) {
        self.drain();
        let mut taken = self.taken.borrow_mut();
        for _ in 0..taken.len() {
            let Some(m) = taken.pop_front() else { break };
            if let Some(m) = take(m) {
                taken.push_back(m);
            }
        }
        // The senders' wake-ups were for messages now out of the channel, where the owner's
        // park check no longer sees them: wake its loop for those left (a local wake).
        if !taken.is_empty() {
            self.signal.waker.wake();
        }
    }

    /// Moves every queued message behind those taken before.
    fn drain(&self) -> Drained {
        let mut taken = self.taken.borrow_mut();
        loop {
            match self.rx.try_recv() {
                Ok(m) => taken.push_back(m),
                Err(_) if !taken.is_empty() => return Drained::Messages,
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

    /// A waker that records whether it was woken.
    fn flag_waker() -> (Arc<Flag>, Waker) {
        let flag = Arc::new(Flag(false.into()));
        let waker = Waker::from(flag.clone());
        (flag, waker)
    }

    #[test]
    fn wakes_a_parked_receiver_and_drains_everything() {
        let (tx, mb) = mailbox::<u32>();
        let (flag, waker) = flag_waker();
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

    #[test]
    fn a_busy_owner_is_not_signalled_but_finds_its_mail_before_parking() {
        let (tx, mb) = mailbox::<u32>();
        let (flag, waker) = flag_waker();
        let mut cx = Context::from_waker(&waker);
        let mut out = Vec::new();
        let mut fut = Box::pin(mb.recv_all(&mut out));
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        tx.after_unpark();
        let remote = tx.clone();
        std::thread::spawn(move || remote.send(7)).join().unwrap();
        assert!(
            !flag.0.load(std::sync::atomic::Ordering::SeqCst),
            "no signal while busy"
        );
        tx.before_park();
        assert!(
            flag.0.load(std::sync::atomic::Ordering::SeqCst),
            "woken before parking"
        );
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(true));
        drop(fut);
        assert_eq!(out, vec![7]);
    }

    #[test]
    fn messages_taken_ahead_are_handled_once_and_the_rest_keep_their_order() {
        let (tx, mb) = mailbox::<u32>();
        let (flag, waker) = flag_waker();
        let mut cx = Context::from_waker(&waker);
        let evens = |handled: &mut Vec<u32>| {
            let mut take = |m: u32| {
                if m.is_multiple_of(2) {
                    handled.push(m);
                    None
                } else {
                    Some(m)
                }
            };
            mb.take_ahead(&mut take);
        };
        tx.send(1);
        tx.send(2);
        assert_eq!(
            Box::pin(mb.ready()).as_mut().poll(&mut cx),
            Poll::Ready(true)
        );
        assert_eq!(mb.pop(), Some(1));
        // While 1 is handled, 3 and 4 arrive and the owner takes the even ones ahead.
        tx.send(3);
        tx.send(4);
        let mut handled = Vec::new();
        evens(&mut handled);
        assert_eq!(handled, vec![2, 4]);
        assert_eq!((mb.pop(), mb.pop()), (Some(3), None));

        // The loop waits; a busy owner's other task takes 6 ahead and leaves 5 to the loop,
        // which no sender signalled.
        let mut ready = Box::pin(mb.ready());
        assert!(ready.as_mut().poll(&mut cx).is_pending());
        tx.after_unpark();
        tx.send(5);
        tx.send(6);
        assert!(!flag.0.load(std::sync::atomic::Ordering::SeqCst));
        evens(&mut handled);
        assert_eq!(handled, vec![2, 4, 6]);
        assert!(!tx.has_pending(), "the channel was emptied");
        assert!(
            flag.0.load(std::sync::atomic::Ordering::SeqCst),
            "the loop is woken for what was left to it"
        );
        assert_eq!(ready.as_mut().poll(&mut cx), Poll::Ready(true));
        assert_eq!((mb.pop(), mb.pop()), (Some(5), None));
    }

    use std::future::Future;
}
