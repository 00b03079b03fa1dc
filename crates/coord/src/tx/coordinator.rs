//! The coordinator's side of a transaction: schedule it on every shard it touches, run hops
//! there, release. A transaction that touches one shard skips the scheduling round: its first
//! hop carries the locks and the shard assigns the id.

use std::any::Any;
use std::rc::Rc;

use super::locks::{Lock, TxId};
use crate::messages::{HopFn, HopTx, Payload, ShardMsg};
use crate::reply_slots::ReplyWait;
use crate::worker::Worker;

/// Work for one shard, returning `T` to the coordinator.
pub(crate) type ShardWork<T> = Box<dyn FnOnce(&Worker) -> T + Send>;

enum Scheduling {
    /// Scheduled on several shards under one id.
    Shared(TxId),
    /// This thread's shard and one other, not scheduled yet: the first hop schedules this
    /// shard directly and sends the other shard its intents together with its hop, so the
    /// whole transaction takes one round trip (see `local_first_hops`).
    LocalFirst {
        local: Vec<Lock>,
        remote: usize,
        remote_locks: Vec<Lock>,
    },
    /// A shard went away (shutdown) before the transaction was scheduled: nothing is held and
    /// no hop runs.
    Gone,
    /// One shard; the id is known after its first hop there, the locks travel with it.
    Single {
        shard: usize,
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
    /// How many shards it spans (its journal records say so).
    shards: u32,
    /// Under `appendfsync always`, a transaction over several shards releases its intents
    /// only once every shard has its end record on disk (`end`), so no later command can
    /// depend on a transaction a crash could still leave incomplete.
    durable_release: bool,
    /// Its hops keep each shard's undo log, so `roll_back` can take its changes back.
    undoable: bool,
}

impl Tx {
    /// Schedules a transaction needing `plan` (locks per shard, each shard once). None when a
    /// shard is gone (shutdown).
    pub(crate) async fn begin(worker: &Rc<Worker>, plan: Vec<(usize, Vec<Lock>)>) -> Option<Tx> {
        let shards = journaled_span(&plan);
        let durable_release = shards > 1 && worker.cluster.journal_always();
        if plan.len() == 1 {
            let (shard, locks) = plan.into_iter().next()?;
            return Some(Tx {
                worker: worker.clone(),
                scheduling: Scheduling::Single {
                    shard,
                    id: None,
                    locks: Some(locks),
                },
                held: vec![shard],
                granted_everywhere: true,
                shards,
                durable_release,
                undoable: false,
            });
        }
        worker.stats.borrow_mut().multi_shard_txs += 1;
        if plan.len() == 2 && plan.iter().any(|p| p.0 == worker.id) {
            let mut local = Vec::new();
            let mut remote = (0, Vec::new());
            for (shard, locks) in plan {
                if shard == worker.id {
                    local = locks;
                } else {
                    remote = (shard, locks);
                }
            }
            return Some(Tx {
                worker: worker.clone(),
                scheduling: Scheduling::LocalFirst {
                    local,
                    remote: remote.0,
                    remote_locks: remote.1,
                },
                held: Vec::new(),
                granted_everywhere: false,
                shards,
                durable_release,
                undoable: false,
            });
        }
        let (id, held, granted_everywhere) = schedule_all(worker, &plan).await?;
        Some(Tx {
            worker: worker.clone(),
            scheduling: Scheduling::Shared(id),
            held,
            granted_everywhere,
            shards,
            durable_release,
            undoable: false,
        })
    }

    /// From now on every hop keeps its shard's undo log (crates/coord/src/tx/undo.rs).
    pub(crate) fn keep_undo(&mut self) {
        self.undoable = true;
    }

    /// Takes back every change the transaction made on `shards` (which it must hold).
    pub(crate) async fn roll_back(&mut self, shards: &[usize]) {
        let parts = shards
            .iter()
            .map(|&s| (s, Box::new(|w: &Worker| w.roll_back()) as ShardWork<()>))
            .collect();
        self.hops(parts, false).await;
    }

    /// The first hops of a `LocalFirst` transaction whose parts are on its two shards,
    /// including the remote one. This shard is scheduled directly; the remote shard gets its
    /// intents and its hop in one message and runs the hop as soon as it accepts and its turn
    /// comes. That is safe because every other shard (this one) had already accepted, so no
    /// refusal can follow a hop that ran. A refusing remote returns the hop unrun and both are
    /// tried again under a fresh id. The remote releases with its hop only when asked to
    /// conclude and this shard's turn had already come at scheduling (then the transaction holds
    /// every lock when the remote releases: two-phase locking still holds).
    async fn local_first_hops<T: Send + 'static>(
        &mut self,
        parts: Vec<(usize, ShardWork<T>)>,
        conclude: bool,
    ) -> Vec<Option<T>> {
        let Scheduling::LocalFirst {
            local,
            remote,
            remote_locks,
        } = std::mem::replace(&mut self.scheduling, Scheduling::Gone)
        else {
            return parts.iter().map(|_| None).collect();
        };
        let worker = self.worker.clone();
        let mut remote_hop: Option<HopFn> = None;
        let mut local_hop: Option<ShardWork<T>> = None;
        let order: Vec<usize> = parts.iter().map(|p| p.0).collect();
        for (shard, f) in parts {
            if shard == remote {
                remote_hop = Some(Box::new(move |w: &Worker| {
                    Box::new(f(w)) as Box<dyn Any + Send>
                }));
            } else {
                local_hop = Some(f);
            }
        }
        let mut remote_value = None;
        loop {
            let id = worker.cluster.next_txid();
            let (accepted, local_granted) = worker.schedule(id, local.clone(), self.shards);
            if !accepted {
                worker.stats.borrow_mut().tx_retries += 1;
                continue;
            }
            let Some(f) = remote_hop.take() else {
                worker.release(id);
                break;
            };
            let remote_concludes = conclude && local_granted && !self.durable_release;
            let locks = remote_locks.clone();
            let shards = self.shards;
            let answer = worker
                .ask(remote, |origin, slot| ShardMsg::TxScheduleHop {
                    id,
                    locks,
                    shards,
                    f,
                    conclude: remote_concludes,
                    origin,
                    slot,
                })
                .await;
            match answer {
                Some(Payload::Refused(f)) => {
                    worker.release(id);
                    remote_hop = Some(f);
                    worker.stats.borrow_mut().tx_retries += 1;
                }
                Some(Payload::Hop { value, .. }) => {
                    self.scheduling = Scheduling::Shared(id);
                    self.held = if remote_concludes {
                        vec![worker.id]
                    } else {
                        vec![worker.id, remote]
                    };
                    remote_value = value.downcast::<T>().ok().map(|b| *b);
                    break;
                }
                _ => {
                    worker.release(id);
                    break;
                }
            }
        }
        let Scheduling::Shared(id) = self.scheduling else {
            return order.iter().map(|_| None).collect();
        };
        let mut local_value = None;
        if let Some(f) = local_hop {
            let f: HopFn = Box::new(move |w: &Worker| Box::new(f(w)) as Box<dyn Any + Send>);
            if let Some(Payload::Hop { value, .. }) = worker
                .ask(worker.id, |origin, slot| ShardMsg::TxHop {
                    tx: HopTx::Scheduled(id),
                    f,
                    conclude: false,
                    origin,
                    slot,
                })
                .await
            {
                local_value = value.downcast::<T>().ok().map(|b| *b);
            }
        }
        if conclude {
            self.end_held().await;
        }
        let (mut remote_value, mut local_value) = (remote_value, local_value);
        order
            .iter()
            .map(|&shard| {
                if shard == remote {
                    remote_value.take()
                } else {
                    local_value.take()
                }
            })
            .collect()
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
        let parts = if self.undoable {
            parts
                .into_iter()
                .map(|(shard, f)| {
                    let kept: ShardWork<T> = Box::new(move |w: &Worker| {
                        w.keep_undo();
                        let value = f(w);
                        w.park_undo();
                        value
                    });
                    (shard, kept)
                })
                .collect()
        } else {
            parts
        };
        if let Scheduling::LocalFirst {
            local,
            remote,
            remote_locks,
        } = &mut self.scheduling
        {
            let (remote, local_id) = (*remote, self.worker.id);
            if parts.iter().any(|p| p.0 == remote)
                && parts.iter().all(|p| p.0 == remote || p.0 == local_id)
            {
                return self.local_first_hops(parts, conclude).await;
            }
            // The first hops are elsewhere: schedule both shards the ordinary way first.
            let plan = vec![
                (local_id, std::mem::take(local)),
                (remote, std::mem::take(remote_locks)),
            ];
            match schedule_all(&self.worker, &plan).await {
                Some((id, held, granted)) => {
                    self.scheduling = Scheduling::Shared(id);
                    self.held = held;
                    self.granted_everywhere = granted;
                }
                None => {
                    self.scheduling = Scheduling::Gone;
                    return parts.iter().map(|_| None).collect();
                }
            }
        }
        let release_after = conclude;
        let conclude = conclude && self.granted_everywhere && !self.durable_release;
        if matches!(
            self.scheduling,
            Scheduling::LocalFirst { .. } | Scheduling::Gone
        ) {
            return parts.iter().map(|_| None).collect();
        }
        let mut waiting = Vec::with_capacity(parts.len());
        for (shard, f) in parts {
            let f: HopFn = Box::new(move |w: &Worker| Box::new(f(w)) as Box<dyn Any + Send>);
            // A hop names the transaction's id; the first hop of a one-shard transaction
            // carries its locks instead. A part for a shard the transaction holds no intents
            // on (a keyless command such as OBJECT HELP runs on the connection's own shard)
            // runs there outside it: sending it the locks would take intents that no release
            // ever reaches.
            let tx = match &mut self.scheduling {
                Scheduling::Shared(id) => Some(HopTx::Scheduled(*id)),
                Scheduling::Single {
                    shard: planned,
                    id,
                    locks,
                } if *planned == shard => Some(match id {
                    Some(id) => HopTx::Scheduled(*id),
                    None => HopTx::Single(locks.take().unwrap_or_default()),
                }),
                _ => None,
            };
            let wait = match tx {
                Some(tx) => self.worker.ask(shard, |origin, slot| ShardMsg::TxHop {
                    tx,
                    f,
                    conclude,
                    origin,
                    slot,
                }),
                None => self
                    .worker
                    .ask(shard, |origin, slot| ShardMsg::Run { f, origin, slot }),
            };
            waiting.push((shard, wait));
        }
        let mut out = Vec::with_capacity(waiting.len());
        for (shard, wait) in waiting {
            match wait.await {
                Some(Payload::Hop { id, value }) => {
                    if let Scheduling::Single {
                        shard: planned,
                        id: known,
                        ..
                    } = &mut self.scheduling
                    {
                        if *planned == shard {
                            *known = Some(id);
                        }
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
            self.end_held().await;
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

    /// Ends the transaction: releases it on every shard it still holds, under
    /// `durable_release` once each of them has its end record on disk.
    pub(crate) async fn end(mut self) {
        self.end_held().await;
    }

    async fn end_held(&mut self) {
        if self.durable_release {
            let id = match self.scheduling {
                Scheduling::Shared(id) | Scheduling::Single { id: Some(id), .. } => id,
                _ => return self.release_held(),
            };
            let seals: Vec<ReplyWait> = self
                .held
                .iter()
                .map(|&shard| {
                    self.worker
                        .ask(shard, |origin, slot| ShardMsg::TxSeal { id, origin, slot })
                })
                .collect();
            for seal in seals {
                seal.await;
            }
        }
        self.release_held();
    }

    fn release_held(&mut self) {
        let id = match self.scheduling {
            Scheduling::Shared(id) | Scheduling::Single { id: Some(id), .. } => id,
            // Not scheduled anywhere yet: nothing is held.
            Scheduling::Single { id: None, .. }
            | Scheduling::LocalFirst { .. }
            | Scheduling::Gone => {
                self.held.clear();
                return;
            }
        };
        for shard in std::mem::take(&mut self.held) {
            release_on(&self.worker, shard, id);
        }
    }
}

/// How many shards a transaction's journal records say it spans: all of its shards when it
/// may write anywhere, 0 for a read-only one, which records nothing (no end records).
fn journaled_span(plan: &[(usize, Vec<Lock>)]) -> u32 {
    if plan.iter().any(|(_, locks)| locks.iter().any(Lock::writes)) {
        u32::try_from(plan.len()).unwrap_or(u32::MAX)
    } else {
        0
    }
}

/// Schedules `plan` on every shard in it, retrying with a fresh id until no shard refuses.
/// Returns the id, the shards holding it, and whether its turn had come on all of them. None
/// when a shard is gone (shutdown).
async fn schedule_all(
    worker: &Rc<Worker>,
    plan: &[(usize, Vec<Lock>)],
) -> Option<(TxId, Vec<usize>, bool)> {
    let shards = journaled_span(plan);
    loop {
        let id = worker.cluster.next_txid();
        let mut waiting: Vec<(usize, ReplyWait)> = Vec::new();
        let mut accepted = Vec::new();
        let mut refused = false;
        let mut granted_everywhere = true;
        for (shard, locks) in plan {
            if *shard == worker.id {
                match worker.schedule(id, locks.clone(), shards) {
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
                    shards,
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
        if gone || refused {
            for &shard in &accepted {
                release_on(worker, shard, id);
            }
        }
        if gone {
            return None;
        }
        if !refused {
            return Some((id, accepted, granted_everywhere));
        }
        worker.stats.borrow_mut().tx_retries += 1;
    }
}

/// Drops transaction `id`'s intents on `shard`.
fn release_on(worker: &Worker, shard: usize, id: TxId) {
    if shard == worker.id {
        worker.release(id);
    } else {
        worker.cluster.mailboxes[shard].send(ShardMsg::TxRelease(id));
    }
}

impl Drop for Tx {
    fn drop(&mut self) {
        self.release_held();
    }
}
