//! Writing a turn's replies together. A thread's event loop wakes the connections whose
//! sockets became readable; each reads, runs its commands and has replies to write. Written
//! at once, each reply can wake its client (often one process holding many connections: a
//! load generator, a pooled application) between the reads of the other connections, and
//! each wake-up of a sleeping process costs the writer an inter-processor interrupt. Redis
//! writes every reply of an event-loop turn together just before it sleeps (`beforeSleep`),
//! so such a client is woken once per turn. Here a connection with replies to write waits
//! for the *turn end*: a task that the first waiting connection wakes, which the executor
//! runs after every task woken before it (tokio's `LocalSet` runs tasks in the order they
//! were woken), and which lets every waiting connection go on to write.
//!
//! Only the epoll backend runs the turn-end task (`run_turn_ends`); on a thread without one
//! `turn_end` resolves at once.

use std::cell::RefCell;
use std::future::poll_fn;
use std::task::{Poll, Waker};

#[derive(Default)]
struct TurnEnds {
    /// This thread runs the turn-end task.
    enabled: bool,
    /// Turns ended so far.
    ended: u64,
    /// Connections waiting for the current turn to end.
    waiting: Vec<Waker>,
    /// The turn-end task, while no connection waits.
    task: Option<Waker>,
}

thread_local! {
    static TURN_ENDS: RefCell<TurnEnds> = RefCell::new(TurnEnds::default());
}

/// Resolves once the tasks woken in this turn before this one have run (at once where no
/// turn-end task runs).
pub(crate) async fn turn_end() {
    let mut turn = None;
    poll_fn(|cx| {
        TURN_ENDS.with(|t| {
            let mut t = t.borrow_mut();
            match turn {
                _ if !t.enabled => Poll::Ready(()),
                Some(waited) if t.ended > waited => Poll::Ready(()),
                _ => {
                    turn = Some(t.ended);
                    t.waiting.push(cx.waker().clone());
                    if let Some(task) = t.task.take() {
                        task.wake();
                    }
                    Poll::Pending
                }
            }
        })
    })
    .await
}

/// The turn-end task of this thread's executor: each time it runs, the turn ends and the
/// connections waiting for it go on. Never returns.
pub(crate) async fn run_turn_ends() {
    TURN_ENDS.with(|t| t.borrow_mut().enabled = true);
    poll_fn(|cx| {
        TURN_ENDS.with(|t| {
            let mut t = t.borrow_mut();
            if !t.waiting.is_empty() {
                t.ended += 1;
                for waker in t.waiting.drain(..) {
                    waker.wake();
                }
            }
            t.task = Some(cx.waker().clone());
        });
        Poll::<()>::Pending
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use tokio::task::{spawn_local, LocalSet};

    use super::*;

    /// Two connections woken in one turn: both make their replies before either writes.
    fn order_of(with_turn_ends: bool) -> Vec<&'static str> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let log = Rc::new(RefCell::new(Vec::new()));
        let local = LocalSet::new();
        let seen = log.clone();
        local.block_on(&rt, async move {
            if with_turn_ends {
                spawn_local(run_turn_ends());
                tokio::task::yield_now().await;
            }
            let connection = |name: [&'static str; 2], log: Rc<RefCell<Vec<&'static str>>>| async move {
                log.borrow_mut().push(name[0]);
                turn_end().await;
                log.borrow_mut().push(name[1]);
            };
            let a = spawn_local(connection(["a replies", "a writes"], seen.clone()));
            let b = spawn_local(connection(["b replies", "b writes"], seen.clone()));
            let _ = a.await;
            let _ = b.await;
        });
        TURN_ENDS.with(|t| *t.borrow_mut() = TurnEnds::default());
        let order = log.borrow().clone();
        order
    }

    #[test]
    fn replies_of_one_turn_are_written_together() {
        assert_eq!(
            order_of(true),
            ["a replies", "b replies", "a writes", "b writes"]
        );
    }

    #[test]
    fn without_the_task_a_reply_is_written_at_once() {
        assert_eq!(
            order_of(false),
            ["a replies", "a writes", "b replies", "b writes"]
        );
    }
}
