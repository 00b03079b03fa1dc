//! MULTI, EXEC, DISCARD, WATCH and UNWATCH. Queued commands run at EXEC as one transaction
//! across every shard they touch (docs/transactions.md): no other client observes a state in
//! between. WATCH records each key's version on its shard; EXEC checks the versions as the
//! transaction's first hop, with shared intents on the watched keys so nothing can change
//! them between the check and the commands.

use damselfly_commands::table::{CoordCmd, Handler, COMMANDS};
use damselfly_commands::Args;
use damselfly_protocol::number::parse_i64;
use damselfly_storage::{shard_for_key, WatchStamp};

use crate::connection::add_to_plan;
use crate::connection::{Connection, MultiState, WatchedKey};
use crate::messages::{Payload, ShardMsg};
use crate::tx::{Lock, Mode, ShardWork};
use crate::worker::Worker;
use damselfly_commands::keys_family::db_index;

const EXECABORT: &str = "EXECABORT Transaction discarded because of previous errors.";

impl Connection {
    pub(crate) fn multi(&mut self) {
        if self.multi.is_some() {
            self.reply_error("ERR MULTI calls can not be nested");
            return;
        }
        self.multi = Some(MultiState {
            acl_epoch: self.worker.cluster.acl.epoch(),
            ..MultiState::default()
        });
        self.info.multi.set(0);
        self.out.ok();
    }

    pub(crate) fn discard(&mut self) {
        if self.multi.take().is_none() {
            self.reply_error("ERR DISCARD without MULTI");
            return;
        }
        self.info.multi.set(-1);
        self.unwatch_all();
        self.out.ok();
    }

    pub(crate) fn unwatch(&mut self) {
        self.unwatch_all();
        self.out.ok();
    }

    /// Drops every watch of this connection (UNWATCH, DISCARD, RESET, disconnect).
    pub(crate) fn unwatch_all(&mut self) {
        let watching = std::mem::take(&mut self.watching);
        for (shard, keys) in by_shard(watching) {
            let forget = move |w: &Worker| {
                let mut shard = w.shard.borrow_mut();
                for k in &keys {
                    shard.unwatch(k.db, &k.key);
                }
            };
            if shard == self.worker.id {
                forget(&self.worker);
            } else {
                self.worker.cluster.mailboxes[shard].send(ShardMsg::Call(Box::new(forget)));
            }
        }
    }

    pub(crate) async fn watch(&mut self, args: &Args<'_>) {
        if self.multi.is_some() {
            self.reply_error("ERR WATCH inside MULTI is not allowed");
            return;
        }
        // Earlier pipelined commands of this connection take effect before the watch.
        self.flush_remote().await;
        let db = self.info.db.get();
        let n = self.worker.num_shards();
        let mut fresh: Vec<WatchedKey> = Vec::new();
        for key in args.iter().skip(1) {
            let known = |w: &WatchedKey| w.db == db && w.key == key;
            if self.watching.iter().any(known) || fresh.iter().any(known) {
                continue;
            }
            fresh.push(WatchedKey {
                shard: shard_for_key(key, n),
                db,
                key: key.to_vec(),
                stamp: WatchStamp::default(),
            });
        }
        for (shard, mut keys) in by_shard(fresh) {
            let register = move |w: &Worker| {
                let now = w.now_ms();
                let mut shard = w.shard.borrow_mut();
                for k in &mut keys {
                    k.stamp = shard.watch(k.db, &k.key, now);
                }
                keys
            };
            let keys = if shard == self.worker.id {
                self.worker.refresh_clock();
                Some(register(&self.worker))
            } else {
                let f = Box::new(move |w: &Worker| {
                    Box::new(register(w)) as Box<dyn std::any::Any + Send>
                });
                match self
                    .worker
                    .ask(shard, |origin, slot| ShardMsg::Run { f, origin, slot })
                    .await
                {
                    Some(Payload::Hop { value, .. }) => {
                        value.downcast::<Vec<WatchedKey>>().ok().map(|b| *b)
                    }
                    _ => None,
                }
            };
            match keys {
                Some(keys) => self.watching.extend(keys),
                None => {
                    self.reply_error("ERR shard unavailable");
                    return;
                }
            }
        }
        self.out.ok();
    }

    pub(crate) async fn exec(&mut self) {
        let Some(multi) = self.multi.take() else {
            self.reply_error("ERR EXEC without MULTI");
            return;
        };
        if multi.dirty {
            self.info.multi.set(-1);
            self.unwatch_all();
            self.reply_error(EXECABORT);
            return;
        }
        // CLIENT LIST shows the transaction (flag `x`, `multi=`) until EXEC is done.
        let _in_exec = ExecState(self.info.clone());
        self.flush_remote().await;
        let watching = std::mem::take(&mut self.watching);
        let batch = &multi.cmds;
        let args_of = |i: usize| {
            let c = &batch.cmds[i];
            Args::new(&batch.data, &batch.spans[c.first..c.first + c.nargs])
        };
        // Every intent of every queued command, following SELECTs as they will run.
        let mut plan: Vec<(usize, Vec<Lock>)> = Vec::new();
        let mut db = self.info.db.get();
        for i in 0..batch.cmds.len() {
            let idx = batch.cmds[i].spec;
            let args = args_of(i);
            if matches!(COMMANDS[idx].handler, Handler::Coord(CoordCmd::Select)) {
                let databases = self.worker.cluster.databases;
                if let Some(d) = parse_i64(args.get(1)).and_then(|d| db_index(d, databases)) {
                    db = d;
                }
                continue;
            }
            self.plan(idx, db, &args, &mut plan);
        }
        for w in &watching {
            let lock = Lock::Key {
                db: w.db,
                key: w.key.as_slice().into(),
                mode: Mode::Shared,
            };
            add_to_plan(&mut plan, w.shard, lock);
        }
        let own = if plan.is_empty() {
            false
        } else {
            match self.enter_tx(plan).await {
                Some(own) => own,
                None => {
                    self.reply_error("ERR shard unavailable");
                    return;
                }
            }
        };
        if !watching.is_empty() && !self.watches_hold(watching).await {
            self.leave_tx(own).await;
            self.out.null_array();
            return;
        }
        // Commands were checked when queued; a change of any user since is checked again.
        let acl_changed = self.worker.cluster.acl.epoch() != multi.acl_epoch;
        self.out.array(batch.cmds.len());
        // Messages published to this client inside EXEC follow its reply (Redis 7.2's order;
        // 7.0 wrote them inside the reply's array).
        self.pushes_after_reply(true);
        for i in 0..batch.cmds.len() {
            // Boxed: EXEC is itself routed, so this recursion needs an indirection.
            let args = args_of(i);
            if acl_changed {
                if let Some(refusal) = self.exec_acl_refusal(&args) {
                    self.reply_error(&refusal);
                    continue;
                }
            }
            let run: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + '_>> =
                Box::pin(self.route(batch.cmds[i].spec, &args));
            run.await;
            if self.closing {
                break;
            }
        }
        self.pushes_after_reply(false);
        self.flush(own).await;
        self.leave_tx(own).await;
    }

    /// EXEC's first hop: true when no watched key changed since WATCH. The watches end here
    /// either way.
    async fn watches_hold(&mut self, watching: Vec<WatchedKey>) -> bool {
        let parts = by_shard(watching)
            .into_iter()
            .map(|(shard, keys)| {
                let check: ShardWork<bool> = Box::new(move |w: &Worker| {
                    let now = w.now_ms();
                    let mut shard = w.shard.borrow_mut();
                    let mut held = true;
                    for k in &keys {
                        held &= !shard.watch_changed(k.db, &k.key, k.stamp, now);
                        shard.unwatch(k.db, &k.key);
                    }
                    held
                });
                (shard, check)
            })
            .collect();
        match self.tx.as_mut() {
            Some(tx) => tx
                .hops(parts, false)
                .await
                .into_iter()
                .all(|held| held == Some(true)),
            None => false,
        }
    }
}

/// Groups watched keys by shard.
fn by_shard(keys: Vec<WatchedKey>) -> Vec<(usize, Vec<WatchedKey>)> {
    let mut groups: Vec<(usize, Vec<WatchedKey>)> = Vec::new();
    for k in keys {
        match groups.iter_mut().find(|g| g.0 == k.shard) {
            Some(g) => g.1.push(k),
            None => groups.push((k.shard, vec![k])),
        }
    }
    groups
}

/// Ends the client's MULTI state (CLIENT LIST's `multi=-1`) when EXEC returns, on every path.
struct ExecState(std::rc::Rc<crate::client::ClientInfo>);

impl Drop for ExecState {
    fn drop(&mut self) {
        self.0.multi.set(-1);
    }
}
