//! Reply slots: how a thread waits for answers to the messages it sent. Replies arrive through
//! the thread's own mailbox, so completing a wait is a local wake-up, not a cross-thread one.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use crate::messages::Payload;
use crate::worker::Worker;

enum SlotState {
    Free,
    Waiting(Option<Waker>),
    Ready(Payload),
    /// The waiter went away; the slot is freed when its reply arrives.
    Abandoned,
}

/// Replies this thread is waiting for, by slot number. Replies arrive through this thread's
/// own mailbox, so completing a wait is a local wake-up, not a cross-thread one.
#[derive(Default)]
pub(crate) struct ReplySlots {
    slots: Vec<SlotState>,
    free: Vec<usize>,
}

impl ReplySlots {
    pub(crate) fn open(&mut self) -> usize {
        match self.free.pop() {
            Some(i) => {
                self.slots[i] = SlotState::Waiting(None);
                i
            }
            None => {
                self.slots.push(SlotState::Waiting(None));
                self.slots.len() - 1
            }
        }
    }

    pub(crate) fn fill(&mut self, slot: usize, reply: Payload) {
        let Some(state) = self.slots.get_mut(slot) else {
            return;
        };
        match std::mem::replace(state, SlotState::Ready(reply)) {
            SlotState::Waiting(Some(w)) => w.wake(),
            SlotState::Abandoned => {
                *state = SlotState::Free;
                self.free.push(slot);
            }
            _ => {}
        }
    }

    fn poll(&mut self, slot: usize, cx: &mut Context<'_>) -> Poll<Payload> {
        let state = &mut self.slots[slot];
        match std::mem::replace(state, SlotState::Free) {
            SlotState::Ready(r) => {
                self.free.push(slot);
                Poll::Ready(r)
            }
            _ => {
                *state = SlotState::Waiting(Some(cx.waker().clone()));
                Poll::Pending
            }
        }
    }

    /// Ready once the slot's answer has arrived, without taking it (the waiter takes it
    /// later); until then the caller is woken when it comes.
    pub(crate) fn poll_arrived(&mut self, slot: usize, cx: &mut Context<'_>) -> Poll<()> {
        match &mut self.slots[slot] {
            SlotState::Waiting(w) => {
                *w = Some(cx.waker().clone());
                Poll::Pending
            }
            _ => Poll::Ready(()),
        }
    }

    pub(crate) fn close(&mut self, slot: usize) {
        self.slots[slot] = SlotState::Free;
        self.free.push(slot);
    }

    pub(crate) fn abandon(&mut self, slot: usize) {
        let state = &mut self.slots[slot];
        match state {
            SlotState::Ready(_) => {
                *state = SlotState::Free;
                self.free.push(slot);
            }
            _ => *state = SlotState::Abandoned,
        }
    }
}

/// Resolves to the answer to a message; None when the shard could not be reached.
pub(crate) struct ReplyWait {
    pub(crate) worker: Rc<Worker>,
    pub(crate) slot: usize,
    pub(crate) done: bool,
}

impl Future for ReplyWait {
    type Output = Option<Payload>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if self.done {
            return Poll::Ready(None);
        }
        let polled = self.worker.replies.borrow_mut().poll(self.slot, cx);
        match polled {
            Poll::Ready(r) => {
                self.done = true;
                Poll::Ready(Some(r))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl ReplyWait {
    /// Frees the slot of a wait no reply can come to any more (its waiter was taken back).
    pub(crate) fn close(mut self) {
        if !self.done {
            self.done = true;
            self.worker.replies.borrow_mut().close(self.slot);
        }
    }
}

impl Drop for ReplyWait {
    fn drop(&mut self) {
        if !self.done {
            self.worker.replies.borrow_mut().abandon(self.slot);
        }
    }
}
