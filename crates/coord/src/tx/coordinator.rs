//! The coordinator's side of a transaction: schedule it on every shard it touches, run hops
//! there, release. A transaction that touches one shard skips the scheduling round: its first
//! hop carries the locks and the shard assigns the id.

use std::any::Any;
use std::rc::Rc;

use super::locks::{Lock, TxId};
use crate::worker::{HopFn, HopTx, Payload, ReplyWait, ShardMsg, Worker};

/// Work for one shard, returning `T` to the coordinator.
pub(crate) type ShardWork<T> = Box<dyn FnOnce(&Worker) -> T + Send>;

enum Scheduling {
    /// Scheduled on several shards under one id.
    Shared(TxId),
    /// One shard; the id is known after the first hop, the locks travel with it.
    Single {
        id: Option<TxId>,
        locks: Option<Vec<Lock>>,
    },
}

/// A running transaction. Dropping it releases whatever it still holds, so a coordinator
/// that stops half-way (a panic, shutdown) never leaves intents behind.
pub(crate) struct Tx {
    worker: Rc<Worker>,
    scheduling: Scheduling,
    /// Shards where the transaction still holds intents.
    held: Vec<usize>,
    /// Its turn had come on every shard when it was scheduled, so it holds all its locks
    /// already and may release each shard right after its last hop there.
    granted_everywhere: bool,
}

impl Tx {
    /// Schedules a transaction needing `plan` (locks per shard, each shard once). None when a
    /// shard is gone (shutdown).
    pub(crate) async fn begin(worker: &Rc<Worker>, plan: Vec<(usize, Vec<Lock>)>) -> Option<Tx> {
        if plan.len() == 1 {
            let (shard, locks) = plan.into_iter().next()?;
            return Some(Tx {
                worker: worker.clone(),
                scheduling: Scheduling::Single {
                    id: None,
                    locks: Some(locks),
                },
                held: vec![shard],
                granted_everywhere: true,
            });
        }
        worker.stats.borrow_mut().multi_shard_txs += 1;
        loop {
            let id = worker.cluster.next_txid();
            let mut waiting: Vec<(usize, ReplyWait)> = Vec::new();
            let mut accepted = Vec::new();
            let mut refused = false;
            let mut granted_everywhere = true;
            for (shard, locks) in &plan {
                if *shard == worker.id {
                    match worker.schedule(id, locks.clone()) {
                        (true, granted) => {
                            accepted.push(*shard);
                            granted_everywhere &= granted;
                        }
                        (false, _) => refused = true,
                    }
                    continue;
                }
                let locks = locks.clone();
                waiting.push((
                    *shard,
                    worker.ask(*shard, |origin, slot| ShardMsg::TxSchedule {
                        id,
                        locks,
                        origin,
                        slot,
                    }),
                ));
            }
            let mut gone = false;
            for (shard, wait) in waiting {
                match wait.await {
                    Some(Payload::Scheduled {
                        accepted: true,
                        granted,
                    }) => {
                        accepted.push(shard);
                        granted_everywhere &= granted;
                    }
                    Some(_) => refused = true,
                    None => gone = true,
                }
            }
            let tx = Tx {
                worker: worker.clone(),
                scheduling: Scheduling::Shared(id),
                held: accepted,
                granted_everywhere,
            };
            if gone {
                return None;
            }
            if !refused {
                return Some(tx);
            }
            // Dropping `tx` releases the shards that accepted; try again with a larger id.
            drop(tx);
            worker.stats.borrow_mut().tx_retries += 1;
        }
    }

    /// Runs `f` on each shard of `parts` (at most one part per shard) when the transaction's
    /// turn comes there, in parallel; results in `parts` order (None if a shard is gone).
    /// `conclude` releases the transaction everywhere once these hops are done.
    ///
    /// Two-phase locking: a shard may be released with its last hop only once the
    /// transaction holds its turn on every shard. A one-shard transaction does; so does one
    /// whose turn had come everywhere when it was scheduled (the turn, once come, stays until
    /// release). Otherwise every intent is kept until all hops are done: releasing a shard as
    /// soon as its own hop ran would let a smaller id scheduled there later run after this
    /// transaction on that shard but before it on another, where this one still waits for it.
    pub(crate) async fn hops<T: Send + 'static>(
        &mut self,
        parts: Vec<(usize, ShardWork<T>)>,
        conclude: bool,
    ) -> Vec<Option<T>> {
        let release_after = conclude;
        let conclude = conclude && self.granted_everywhere;
        let mut waiting = Vec::with_capacity(parts.len());
        for (shard, f) in parts {
            let f: HopFn = Box::new(move |w: &Worker| Box::new(f(w)) as Box<dyn Any + Send>);
            let tx = match &mut self.scheduling {
                Scheduling::Shared(id) => HopTx::Scheduled(*id),
                Scheduling::Single { id: Some(id), .. } => HopTx::Scheduled(*id),
                Scheduling::Single { id: None, locks } => {
                    HopTx::Single(locks.take().unwrap_or_default())
                }
            };
            let wait = self.worker.ask(shard, |origin, slot| ShardMsg::TxHop {
                tx,
                f,
                conclude,
                origin,
                slot,
            });
            waiting.push((shard, wait));
        }
        let mut out = Vec::with_capacity(waiting.len());
        for (shard, wait) in waiting {
            match wait.await {
                Some(Payload::Hop { id, value }) => {
                    if let Scheduling::Single { id: known, .. } = &mut self.scheduling {
                        *known = Some(id);
                    }
                    if conclude {
                        self.held.retain(|&s| s != shard);
                    }
                    out.push(value.downcast::<T>().ok().map(|b| *b));
                }
                _ => out.push(None),
            }
        }
        if release_after {
            self.release_held();
        }
        out
    }

    /// Runs `f` on one shard; see [`Tx::hops`].
    pub(crate) async fn hop<T: Send + 'static>(
        &mut self,
        shard: usize,
        f: impl FnOnce(&Worker) -> T + Send + 'static,
        conclude: bool,
    ) -> Option<T> {
        self.hops(vec![(shard, Box::new(f) as Box<_>)], conclude)
            .await
            .pop()
            .flatten()
    }

    /// Releases the transaction on every shard it still holds.
    pub(crate) fn finish(mut self) {
        self.release_held();
    }

    fn release_held(&mut self) {
        let id = match self.scheduling {
            Scheduling::Shared(id) | Scheduling::Single { id: Some(id), .. } => id,
            // A single-shard transaction that never ran a hop holds nothing.
            Scheduling::Single { id: None, .. } => {
                self.held.clear();
                return;
            }
        };
        for shard in std::mem::take(&mut self.held) {
            if shard == self.worker.id {
                self.worker.release(id);
            } else {
                self.worker.cluster.mailboxes[shard].send(ShardMsg::TxRelease(id));
            }
        }
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        self.release_held();
    }
}
