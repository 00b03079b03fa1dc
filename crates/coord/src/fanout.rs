//! Commands that span shards: a multi-key command whose keys live on several shards is split
//! into one sub-command per shard (same name, that shard's keys in request order); a
//! whole-keyspace command runs on every shard. The parts run as hops of one transaction, so
//! the command is atomic across shards, and the per-shard replies are merged into the reply
//! one Redis server would give.

use damselfly_commands::keys_family::{take_value, Transfer};
use damselfly_commands::table::{flags, lookup, Handler, Merge, COMMANDS};
use damselfly_commands::{errors, sort_family, Args, ExecCtx};
use damselfly_protocol::number::parse_i64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::tracking::Caller;
use damselfly_storage::{shard_for_key, Shard, Value};
use rand::seq::SliceRandom;

use crate::connection::Connection;
use crate::messages::{HopFn, ShardMsg};
use crate::tx::ShardWork;
use crate::worker::Worker;

/// Keys with their values and deadlines as one shard holds them (None: missing).
type Gathered = Vec<(Vec<u8>, Option<(Value, u64)>)>;

/// Keys with their places in a command (MSETNX's checks).
type Indexed = Vec<(usize, Vec<u8>)>;

/// What a command context over the gather path's scratch shard shares.
#[derive(Clone, Copy)]
struct ScratchBase {
    now: u64,
    shard_id: usize,
    num_shards: usize,
    max_bulk_len: u64,
}

impl ScratchBase {
    fn ctx<'a>(self, shard: &'a mut Shard, reply: &'a mut ReplyBuf) -> ExecCtx<'a> {
        ExecCtx {
            shard,
            db: 0,
            now: self.now,
            reply,
            shard_id: self.shard_id,
            num_shards: self.num_shards,
            max_bulk_len: self.max_bulk_len,
            // The scratch shard is not journaled: the write-back hops record what changed.
            effects: None,
        }
    }
}

/// Splits an encoded array reply of bulk/null items into the items' encodings.
pub(crate) fn array_items(reply: &[u8]) -> Option<Vec<&[u8]>> {
    let (count, mut pos) = header(reply, b'*')?;
    let mut items = Vec::with_capacity(count.max(0) as usize);
    for _ in 0..count {
        let start = pos;
        match reply.get(pos)? {
            b'_' => pos += 3,
            b'$' => {
                let (len, body) = header(&reply[pos..], b'$')?;
                pos += body + if len >= 0 { len as usize + 2 } else { 0 };
            }
            _ => return None,
        }
        items.push(reply.get(start..pos)?);
    }
    Some(items)
}

/// Parses `<tag><int>\r\n` at the start; returns the int and the bytes it took.
fn header(buf: &[u8], tag: u8) -> Option<(i64, usize)> {
    if buf.first() != Some(&tag) {
        return None;
    }
    let end = buf.iter().position(|&b| b == b'\r')?;
    Some((parse_i64(&buf[1..end])?, end + 2))
}

fn is_error(reply: &[u8]) -> bool {
    reply.first() == Some(&b'-')
}

impl Connection {
    /// A multi-key command whose keys live on more than one shard.
    pub(crate) async fn fan_out_keys(&mut self, idx: usize, merge: Merge, args: &Args<'_>) {
        let started = self.worker.start_call_timer();
        let spec = &COMMANDS[idx];
        let errors_before = self.out.error_offsets.len();
        if spec.step == 2 && args.len().is_multiple_of(2) {
            self.reply_error(&errors::wrong_arity(spec.name));
            self.record_command(idx, args, started, errors_before);
            return;
        }
        let n = self.worker.num_shards();
        let step = spec.step.max(1) as usize;
        let positions: Vec<usize> = spec.key_positions(args);
        let key_shards: Vec<usize> = positions
            .iter()
            .map(|&p| shard_for_key(args.get(p), n))
            .collect();
        let split = |name: &'static [u8]| -> Vec<(usize, Vec<&[u8]>)> {
            let mut parts: Vec<(usize, Vec<&[u8]>)> = Vec::new();
            for (&p, &shard) in positions.iter().zip(&key_shards) {
                let part = match parts.iter_mut().find(|(s, _)| *s == shard) {
                    Some(part) => part,
                    None => {
                        parts.push((shard, vec![name]));
                        parts.last_mut().expect("just pushed")
                    }
                };
                part.1.extend((p..p + step).map(|i| args.get(i)));
            }
            parts
        };
        let db = self.info.db.get();
        // The command's own parser reads its options once; errors are replied before any
        // transaction is scheduled, and the plan below reads the same options.
        let transfer = match merge {
            Merge::Transfer => {
                match Transfer::parse(spec.name, args, db, self.worker.cluster.databases) {
                    Ok(t) => Some(t),
                    Err(e) => {
                        self.reply_error(e);
                        self.record_command(idx, args, started, errors_before);
                        return;
                    }
                }
            }
            _ => None,
        };
        let mut plan = Vec::new();
        self.plan(idx, db, args, &mut plan);
        let Some(own) = self.enter_tx(plan).await else {
            self.reply_error("ERR shard unavailable");
            self.record_command(idx, args, started, errors_before);
            return;
        };
        if let Some(t) = transfer {
            self.transfer(t, args, own).await;
        } else if merge == Merge::Gather {
            self.gather(idx, args, &positions, own).await;
        } else if merge == Merge::MsetNx {
            let keys = positions
                .iter()
                .enumerate()
                .map(|(i, &p)| (i, args.get(p).to_vec()))
                .collect();
            match self.msetnx_blocked(db, keys).await {
                None => self.reply_error("ERR shard unavailable"),
                Some(false) => {
                    let mset = lookup(b"mset").expect("mset is in the table");
                    let replies = self.call_shards(mset, split(b"mset"), own).await;
                    match replies.iter().find(|r| is_error(r)) {
                        Some(e) => self.raw_error(&e.clone()),
                        None => self.out.int(1),
                    }
                }
                Some(true) => self.out.int(0),
            }
        } else {
            let name: &'static [u8] = spec.name.as_bytes();
            let parts = split(name);
            let shard_order: Vec<usize> = parts.iter().map(|(s, _)| *s).collect();
            let replies = self.call_shards(idx, parts, own).await;
            match merge {
                Merge::Items => self.merge_items(&replies, &shard_order, &key_shards),
                other => self.merge_simple(other, &replies),
            }
        }
        self.leave_tx(own).await;
        self.record_command(idx, args, started, errors_before);
    }

    /// Whether one of MSETNX's keys exists. Redis looks the keys up for writing in order
    /// (no keyspace miss) and stops at the first that exists, expiring those before it that
    /// are past their deadline: the keys are peeked at on their shards at once, then only
    /// those are expired. None when a shard is unreachable.
    async fn msetnx_blocked(&mut self, db: usize, keys: Indexed) -> Option<bool> {
        self.flush_remote().await;
        let n = self.worker.num_shards();
        let mut by_shard: Vec<(usize, Indexed)> = Vec::new();
        for (i, key) in keys {
            let shard = shard_for_key(&key, n);
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push((i, key)),
                None => by_shard.push((shard, vec![(i, key)])),
            }
        }
        // Per key: its index, whether it is live, whether it is there past its deadline.
        type Seen = Vec<(usize, bool, bool)>;
        let peeks: Vec<(usize, ShardWork<Seen>)> = by_shard
            .iter()
            .map(|(shard, keys)| {
                let keys = keys.clone();
                let work: ShardWork<Seen> = Box::new(move |w: &Worker| {
                    let now = w.now_ms();
                    let shard = w.shard.borrow();
                    let table = &shard.dbs[db].table;
                    keys.iter()
                        .map(|(i, k)| match table.get(k) {
                            None => (*i, false, false),
                            Some(e) => {
                                let expired = e.expire_at() != 0 && e.expire_at() <= now;
                                (*i, !expired, expired)
                            }
                        })
                        .collect()
                });
                (*shard, work)
            })
            .collect();
        let tx = self.tx.as_mut()?;
        let mut seen = Vec::new();
        for part in tx.hops(peeks, false).await {
            seen.extend(part?);
        }
        let Some(first_live) = seen.iter().filter(|k| k.1).map(|k| k.0).min() else {
            // All are looked up: MSET's part expires those past their deadline.
            return Some(false);
        };
        let expire: Vec<(usize, ShardWork<()>)> = by_shard
            .into_iter()
            .filter_map(|(shard, keys)| {
                let keys: Vec<Vec<u8>> = keys
                    .into_iter()
                    .filter(|(i, _)| *i < first_live && seen.iter().any(|k| k.0 == *i && k.2))
                    .map(|(_, k)| k)
                    .collect();
                if keys.is_empty() {
                    return None;
                }
                let work: ShardWork<()> = Box::new(move |w: &Worker| {
                    w.sync_limits();
                    let now = w.now_ms();
                    let mut shard = w.shard.borrow_mut();
                    for k in &keys {
                        shard.expire_if_needed(db, k, now);
                    }
                    drop(shard);
                    w.publish_notifications();
                });
                Some((shard, work))
            })
            .collect();
        if !expire.is_empty() {
            tx.hops(expire, false).await;
        }
        Some(true)
    }

    /// RENAME, RENAMENX or COPY between keys on two shards, inside the transaction: check
    /// both keys, take (or clone) the source's value on its shard, store it on the other.
    async fn transfer(&mut self, t: Transfer, args: &Args<'_>, own: bool) {
        // Earlier commands of this connection (or of this EXEC) go first.
        self.flush_remote().await;
        let n = self.worker.num_shards();
        let (src, dst) = t.keys(args);
        let (src, dst) = (src.to_vec(), dst.to_vec());
        let (src_shard, dst_shard) = (shard_for_key(&src, n), shard_for_key(&dst, n));
        let Some(tx) = self.tx.as_mut() else {
            return self.reply_error("ERR shard unavailable");
        };
        if !t.replace {
            // Both keys at once. Redis looks at the destination only when the source exists,
            // so the destination is only peeked at here: a key there past its deadline is
            // expired (and announced) by the store below.
            let key = src.clone();
            let source: ShardWork<bool> = Box::new(move |w: &Worker| {
                w.sync_limits();
                let found = t.source_exists(&mut w.shard.borrow_mut(), &key, w.now_ms());
                w.publish_notifications();
                found
            });
            let key = dst.clone();
            let destination: ShardWork<bool> = Box::new(move |w: &Worker| {
                t.destination_taken(&w.shard.borrow(), &key, w.now_ms())
            });
            let found = tx
                .hops(vec![(src_shard, source), (dst_shard, destination)], false)
                .await;
            match (found[0], found[1]) {
                (Some(false), _) => return t.reply_missing(&mut self.out),
                (_, Some(true)) => return t.reply_blocked(&mut self.out),
                (Some(true), Some(false)) => {}
                _ => return self.reply_error("ERR shard unavailable"),
            }
        }
        let key = src;
        let taken = tx
            .hop(
                src_shard,
                move |w: &Worker| {
                    w.sync_limits();
                    let now = w.now_ms();
                    let mut shard = w.shard.borrow_mut();
                    // Without the check above, the source is looked up here.
                    let found = !t.replace || t.source_exists(&mut shard, &key, now);
                    let taken = found
                        .then(|| take_value(&mut shard, &t, &key, now))
                        .flatten();
                    if taken.is_some() {
                        t.announce_source(&mut shard, &key);
                    }
                    drop(shard);
                    if taken.is_some() && !t.keeps_source() {
                        w.journal_value(t.src_db, &key, None);
                    }
                    w.publish_notifications();
                    taken
                },
                false,
            )
            .await;
        let Some(taken) = taken else {
            return self.reply_error("ERR shard unavailable");
        };
        let Some((value, expire_at)) = taken else {
            return t.reply_missing(&mut self.out);
        };
        let stored = tx
            .hop(
                dst_shard,
                move |w: &Worker| {
                    w.sync_limits();
                    w.journal_value(t.dst_db, &dst, Some((&value, expire_at)));
                    let mut shard = w.shard.borrow_mut();
                    t.store(&mut shard, &dst, value, expire_at, w.now_ms());
                    t.announce_destination(&mut shard, &dst);
                    drop(shard);
                    w.publish_notifications();
                },
                own,
            )
            .await;
        match stored {
            Some(()) => t.reply_done(&mut self.out),
            None => self.reply_error("ERR shard unavailable"),
        }
    }

    /// A multi-key command whose handler needs every key's value in one place (SMOVE,
    /// SINTERSTORE, ZUNIONSTORE, LMOVE...): inside the transaction, clone the keys' values
    /// from their shards into a scratch shard, run the one-shard handler there, and write the
    /// keys it changed back to their shards. The transaction's intents make the three steps
    /// atomic; the handler is the same code that runs when the keys share a shard.
    async fn gather(&mut self, idx: usize, args: &Args<'_>, positions: &[usize], own: bool) {
        let spec = &COMMANDS[idx];
        let Handler::Shard(handler) = spec.handler else {
            return self.reply_error("ERR internal error: no shard handler");
        };
        self.flush_remote().await;
        let db = self.info.db.get();
        let n = self.worker.num_shards();
        let mut keys: Vec<Vec<u8>> = Vec::new();
        for &p in positions {
            let key = args.get(p).to_vec();
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        let writes = spec.is_write();
        let more_keys = spec.reads_unknown_keys(args);
        // A tracking client's read registers its keys where they live, as it reads them.
        let reader = Some(self.caller()).filter(|c| c.tracks && spec.flags & flags::READONLY != 0);
        let Some(gathered) = self
            .fetch_keys(db, keys, own && !writes && !more_keys, reader)
            .await
        else {
            return self.reply_error("ERR shard unavailable");
        };
        let mut scratch = Shard::new(1);
        self.worker.sync_limits();
        scratch.limits = self.worker.shard.borrow().limits;
        let now = self.worker.now_ms();
        let mut stamps = Vec::new();
        // Keys copied past their deadline: those the handler expires are expired on their
        // shards too.
        let mut expiring = Vec::new();
        for (key, found) in gathered {
            stamps.push((scratch.watch(0, &key, 0), key.clone()));
            if let Some((value, expire_at)) = found {
                if expire_at != 0 && expire_at <= now {
                    expiring.push(key.clone());
                }
                scratch.set(0, &key, value, expire_at);
            }
        }
        let max_bulk_len = self
            .worker
            .cluster
            .config
            .proto_max_bulk_len
            .load(std::sync::atomic::Ordering::Relaxed);
        let base = ScratchBase {
            now,
            shard_id: self.worker.id,
            num_shards: n,
            max_bulk_len,
        };
        if more_keys {
            // SORT's patterns: copy the keys they reach too (read only, never written back).
            // Read at time 0, so that nothing expires before the handler looks.
            let mut ignored = ReplyBuf::new(false);
            let frozen = ScratchBase { now: 0, ..base };
            let wanted =
                sort_family::referenced_keys(&mut frozen.ctx(&mut scratch, &mut ignored), args);
            // As in Redis, only the command's own keys are tracked, not those its patterns reach.
            let Some(fetched) = self.fetch_keys(db, wanted, own && !writes, None).await else {
                return self.reply_error("ERR shard unavailable");
            };
            for (key, found) in fetched {
                if let (Some((value, expire_at)), None) = (found, scratch.get(0, &key, 0)) {
                    if expire_at != 0 && expire_at <= now {
                        expiring.push(key.clone());
                    }
                    scratch.set(0, &key, value, expire_at);
                }
            }
        }
        // The handler's notifications are the command's (gathering in announced nothing);
        // they name the client's database, not the scratch shard's.
        scratch.notify.flags = self.worker.shard.borrow().notify.flags;
        let mut ctx = base.ctx(&mut scratch, &mut self.out);
        handler(&mut ctx, args);
        let mut events = scratch.notify.take();
        for e in &mut events {
            e.db = db;
        }
        self.worker.publish_events(scratch.notify.flags, events);
        expiring.retain(|k| scratch.dbs[0].table.get(k).is_none());
        if !expiring.is_empty() {
            self.expire_on_shards(db, expiring, now).await;
        }
        if !writes {
            return;
        }
        let mut changed: Vec<(usize, Gathered)> = Vec::new();
        for (stamp, key) in stamps {
            if !scratch.watch_changed(0, &key, stamp, 0) {
                continue;
            }
            let shard = shard_for_key(&key, n);
            let now_value = scratch.remove(0, &key).map(|e| {
                let expire_at = e.expire_at();
                (e.into_value(), expire_at)
            });
            match changed.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push((key, now_value)),
                None => changed.push((shard, vec![(key, now_value)])),
            }
        }
        let Some(tx) = self.tx.as_mut() else {
            return;
        };
        let stores: Vec<(usize, ShardWork<()>)> = changed
            .into_iter()
            .map(|(shard, keys)| {
                let work: ShardWork<()> = Box::new(move |w: &Worker| {
                    for (key, value) in keys {
                        w.journal_value(db, &key, value.as_ref().map(|(v, at)| (v, *at)));
                        let mut shard = w.shard.borrow_mut();
                        // The handler announced this write already (a new key included).
                        let flags = std::mem::take(&mut shard.notify.flags);
                        match value {
                            Some((v, expire_at)) => {
                                shard.set(db, &key, v, expire_at);
                            }
                            None => {
                                shard.remove(db, &key);
                            }
                        }
                        shard.notify.flags = flags;
                    }
                });
                (shard, work)
            })
            .collect();
        if !stores.is_empty() {
            tx.hops(stores, own).await;
        }
    }

    /// Expires keys on their shards, silently: the gathered copy announced them (a key
    /// written since, so no longer past its deadline, stays).
    async fn expire_on_shards(&mut self, db: usize, keys: Vec<Vec<u8>>, now: u64) {
        let n = self.worker.num_shards();
        let mut waits = Vec::new();
        for shard in 0..n {
            let here: Vec<Vec<u8>> = keys
                .iter()
                .filter(|k| shard_for_key(k, n) == shard)
                .cloned()
                .collect();
            if here.is_empty() {
                continue;
            }
            let f: HopFn = Box::new(move |w: &Worker| {
                let mut shard = w.shard.borrow_mut();
                let flags = std::mem::take(&mut shard.notify.flags);
                for k in &here {
                    shard.expire_if_needed(db, k, now);
                }
                shard.notify.flags = flags;
                Box::new(()) as Box<dyn std::any::Any + Send>
            });
            waits.push(
                self.worker
                    .ask(shard, |origin, slot| ShardMsg::Run { f, origin, slot }),
            );
        }
        for wait in waits {
            wait.await;
        }
    }

    /// Clones keys' values (with their deadlines) from their shards, as hops of the current
    /// transaction; `conclude` releases it with them. None when a shard is unreachable.
    /// The keys are remembered there for `reader` (CLIENT TRACKING) when given.
    async fn fetch_keys(
        &mut self,
        db: usize,
        keys: Vec<Vec<u8>>,
        conclude: bool,
        reader: Option<Caller>,
    ) -> Option<Gathered> {
        let n = self.worker.num_shards();
        let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
        for key in keys {
            let shard = shard_for_key(&key, n);
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push(key),
                None => by_shard.push((shard, vec![key])),
            }
        }
        if by_shard.is_empty() && !conclude {
            return Some(Vec::new());
        }
        let reads: Vec<(usize, ShardWork<Gathered>)> = by_shard
            .into_iter()
            .map(|(shard, keys)| {
                // Keys past their deadline are copied as they are: the handler meets them as
                // Redis's command would, expiring (and announcing) those it looks up.
                let work: ShardWork<Gathered> = Box::new(move |w: &Worker| {
                    if let Some(reader) = reader {
                        let tracking = &mut w.shard.borrow_mut().tracking;
                        for k in &keys {
                            tracking.remember_for(reader, k);
                        }
                    }
                    let shard = w.shard.borrow();
                    let table = &shard.dbs[db].table;
                    keys.into_iter()
                        .map(|k| {
                            let found =
                                table.get(&k).map(|e| (e.value().to_owned(), e.expire_at()));
                            (k, found)
                        })
                        .collect()
                });
                (shard, work)
            })
            .collect();
        let tx = self.tx.as_mut()?;
        let mut out = Vec::new();
        for part in tx.hops(reads, conclude).await {
            out.extend(part?);
        }
        Some(out)
    }

    /// A command that runs on every shard (DBSIZE, FLUSHDB, KEYS, RANDOMKEY, ...).
    pub(crate) async fn fan_out_all(&mut self, idx: usize, merge: Merge, args: &Args<'_>) {
        let started = self.worker.start_call_timer();
        let errors_before = self.out.error_offsets.len();
        let all: Vec<&[u8]> = args.iter().collect();
        let parts = (0..self.worker.num_shards())
            .map(|s| (s, all.clone()))
            .collect();
        let mut plan = Vec::new();
        self.plan(idx, self.info.db.get(), args, &mut plan);
        match self.enter_tx(plan).await {
            Some(own) => {
                let replies = self.call_shards(idx, parts, own).await;
                self.merge_simple(merge, &replies);
                self.leave_tx(own).await;
            }
            None => self.reply_error("ERR shard unavailable"),
        }
        self.record_command(idx, args, started, errors_before);
    }

    /// Copies an encoded error reply from a shard, marking it so stats count it.
    fn raw_error(&mut self, encoded: &[u8]) {
        self.out.error_offsets.push(self.out.buf.len());
        self.out.raw(encoded);
    }

    /// MGET: per-key items reassembled in request order.
    fn merge_items(&mut self, replies: &[Vec<u8>], shard_order: &[usize], key_shards: &[usize]) {
        if let Some(e) = replies.iter().find(|r| is_error(r)) {
            self.raw_error(&e.clone());
            return;
        }
        let mut items: Vec<std::vec::IntoIter<&[u8]>> = Vec::with_capacity(replies.len());
        for r in replies {
            match array_items(r) {
                Some(v) => items.push(v.into_iter()),
                None => {
                    self.out.error("ERR internal error merging shard replies");
                    return;
                }
            }
        }
        self.out.array(key_shards.len());
        for shard in key_shards {
            let part = shard_order.iter().position(|s| s == shard).unwrap_or(0);
            match items[part].next() {
                Some(item) => self.out.raw(item),
                None => self.out.null(),
            }
        }
    }

    fn merge_simple(&mut self, merge: Merge, replies: &[Vec<u8>]) {
        if let Some(e) = replies.iter().find(|r| is_error(r)) {
            self.raw_error(&e.clone());
            return;
        }
        match merge {
            Merge::Sum => match sum_replies(replies) {
                Ok(n) => self.out.int(n),
                Err(e) => self.raw_error(&e),
            },
            Merge::AllOk | Merge::MsetNx | Merge::Transfer | Merge::Gather => self.out.ok(),
            Merge::Concat | Merge::Items => {
                let all: Vec<&[u8]> = replies
                    .iter()
                    .filter_map(|r| array_items(r))
                    .flatten()
                    .collect();
                self.out.array(all.len());
                for item in all {
                    self.out.raw(item);
                }
            }
            Merge::RandomKey => {
                let found: Vec<&Vec<u8>> = replies
                    .iter()
                    .filter(|r| r.first() == Some(&b'$') && !r.starts_with(b"$-1"))
                    .collect();
                match found.choose(&mut rand::thread_rng()) {
                    Some(r) => self.out.raw(r),
                    None => self.out.null(),
                }
            }
        }
    }
}

/// Sums integer replies; an error reply is returned as is.
fn sum_replies(replies: &[Vec<u8>]) -> Result<i64, Vec<u8>> {
    let mut total = 0i64;
    for r in replies {
        match header(r, b':') {
            Some((n, _)) => total += n,
            None => return Err(r.clone()),
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_array_items() {
        let r = b"*3\r\n$1\r\na\r\n$-1\r\n_\r\n";
        let items = array_items(r).unwrap();
        assert_eq!(items, vec![&b"$1\r\na\r\n"[..], b"$-1\r\n", b"_\r\n"]);
        assert_eq!(array_items(b"*0\r\n").unwrap().len(), 0);
        assert!(array_items(b":1\r\n").is_none());
        assert!(array_items(b"*2\r\n$5\r\nab").is_none());
    }

    #[test]
    fn sums_integers() {
        assert_eq!(
            sum_replies(&[b":2\r\n".to_vec(), b":3\r\n".to_vec()]),
            Ok(5)
        );
        assert!(sum_replies(&[b"-ERR x\r\n".to_vec()]).is_err());
    }
}
