//! One shard's transactions: their intents (in the [`LockTable`]) and the hop each one waits
//! to run. A hop is a unit of a transaction's work on this shard; it runs when the
//! transaction's turn has come here (no smaller conflicting id left). Generic over the hop
//! type so the ordering logic is tested without threads.

use std::collections::{BTreeSet, HashMap};

use super::locks::{Lock, LockTable, TxId};

struct ShardTx<H> {
    locks: Vec<Lock>,
    /// A hop that arrived before the transaction's turn.
    waiting: Option<H>,
}

pub struct TxQueue<H> {
    table: LockTable,
    txs: HashMap<TxId, ShardTx<H>, ahash::RandomState>,
    /// Transactions with a waiting hop, in id order.
    blocked: BTreeSet<TxId>,
}

impl<H> Default for TxQueue<H> {
    fn default() -> Self {
        TxQueue {
            table: LockTable::default(),
            txs: HashMap::default(),
            blocked: BTreeSet::new(),
        }
    }
}

impl<H> TxQueue<H> {
    /// True when no transaction holds intents here (the common case: one comparison on the
    /// single-key fast path).
    pub fn is_idle(&self) -> bool {
        self.table.is_empty()
    }

    /// True when a plain command needing `locks` may run now without overtaking a
    /// transaction.
    pub fn is_free(&self, locks: &[Lock]) -> bool {
        self.table.is_free(locks)
    }

    /// Records a transaction's intents. False when a larger conflicting id is already here
    /// (the coordinator retries with a fresh id).
    pub fn schedule(&mut self, id: TxId, locks: Vec<Lock>) -> bool {
        if !self.table.try_acquire(id, &locks) {
            return false;
        }
        self.txs.insert(
            id,
            ShardTx {
                locks,
                waiting: None,
            },
        );
        true
    }

    /// True when transaction `id`'s turn has come here (no smaller conflicting id ahead).
    /// Stays true until it is released: a smaller conflicting id arriving later is refused.
    pub fn is_granted(&self, id: TxId) -> bool {
        self.txs
            .get(&id)
            .is_some_and(|tx| self.table.is_granted(id, &tx.locks))
    }

    /// Offers a hop of transaction `id`: returns it when it may run now, otherwise keeps it
    /// until its turn. A hop of a transaction not scheduled here runs at once.
    pub fn submit(&mut self, id: TxId, hop: H) -> Option<H> {
        let Some(tx) = self.txs.get_mut(&id) else {
            return Some(hop);
        };
        if self.table.is_granted(id, &tx.locks) {
            return Some(hop);
        }
        tx.waiting = Some(hop);
        self.blocked.insert(id);
        None
    }

    /// Drops a transaction's intents (and a hop it left waiting) and returns the hops whose
    /// turn has now come, in id order.
    pub fn release(&mut self, id: TxId) -> Vec<(TxId, H)> {
        let Some(tx) = self.txs.remove(&id) else {
            return Vec::new();
        };
        self.table.release(id, &tx.locks);
        self.blocked.remove(&id);
        let mut ready = Vec::new();
        let table = &self.table;
        let txs = &mut self.txs;
        self.blocked.retain(|&b| {
            let Some(tx) = txs.get_mut(&b) else {
                return false;
            };
            if !table.is_granted(b, &tx.locks) {
                return true;
            }
            if let Some(hop) = tx.waiting.take() {
                ready.push((b, hop));
            }
            false
        });
        ready
    }

    /// Number of transactions holding intents here.
    pub fn len(&self) -> usize {
        self.txs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.txs.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tx::locks::Mode;
    use rand::rngs::StdRng;
    use rand::seq::SliceRandom;
    use rand::{Rng, SeedableRng};

    fn lock(k: u8, write: bool) -> Lock {
        Lock::Key {
            db: 0,
            key: vec![k].into(),
            mode: Mode::for_write(write),
        }
    }

    #[test]
    fn hop_waits_for_smaller_conflicting_id() {
        let mut q: TxQueue<&str> = TxQueue::default();
        assert!(q.schedule(1, vec![lock(1, true)]));
        assert!(q.schedule(2, vec![lock(1, true)]));
        assert_eq!(q.submit(2, "second"), None);
        assert_eq!(q.submit(1, "first"), Some("first"));
        assert_eq!(q.release(1), vec![(2, "second")]);
        assert!(q.release(2).is_empty());
        assert!(q.is_idle() && q.is_empty());
    }

    #[test]
    fn releasing_a_cancelled_transaction_drops_its_hop() {
        let mut q: TxQueue<&str> = TxQueue::default();
        assert!(q.schedule(1, vec![lock(1, true)]));
        assert!(q.schedule(2, vec![lock(1, false)]));
        assert!(q.schedule(3, vec![lock(1, false)]));
        assert_eq!(q.submit(2, "a"), None);
        assert_eq!(q.submit(3, "b"), None);
        assert!(q.release(2).is_empty(), "2 is cancelled, 1 still runs");
        assert_eq!(q.release(1), vec![(3, "b")]);
    }

    /// What one simulated coordinator does next.
    #[derive(Clone, Copy, PartialEq, Debug)]
    enum Phase {
        Schedule,
        Run,
        Done,
    }

    struct SimTx {
        /// (shard, key, write)
        ops: Vec<(usize, u8, bool)>,
        id: TxId,
        phase: Phase,
        accepted: Vec<usize>,
        ran: Vec<usize>,
        /// Granted on every shard when scheduled: each shard is released right after its hop.
        granted_everywhere: bool,
        /// Shards whose scheduling message is still in flight.
        unscheduled: Vec<usize>,
        refused: bool,
        /// Two shards, "local first": the first is scheduled, then the second gets its intents
        /// and its hop in one message; it may release with its hop if the first shard's turn
        /// had come at scheduling (`early`).
        local_first: bool,
        first_granted: bool,
        early: Vec<usize>,
    }

    /// Randomized schedules: transactions over several shards, messages delivered in random
    /// order, plain commands interleaved. Every execution order must be serializable: the
    /// conflict graph over what each key saw is acyclic, and plain reads never see half of a
    /// transaction.
    #[test]
    fn random_schedules_are_serializable() {
        for seed in 0..2000u64 {
            run_schedule(seed);
        }
    }

    fn run_schedule(seed: u64) {
        let mut rng = StdRng::seed_from_u64(seed);
        let shards = rng.gen_range(1..4);
        let keys = rng.gen_range(2..6u8);
        let mut queues: Vec<TxQueue<usize>> = (0..shards).map(|_| TxQueue::default()).collect();
        let mut next_id: TxId = 1;
        let mut txs: Vec<SimTx> = (0..rng.gen_range(2..8))
            .map(|_| SimTx {
                ops: (0..rng.gen_range(1..4))
                    .map(|_| {
                        let k = rng.gen_range(0..keys);
                        (k as usize % shards, k, rng.gen_bool(0.6))
                    })
                    .collect(),
                id: 0,
                phase: Phase::Schedule,
                accepted: Vec::new(),
                ran: Vec::new(),
                granted_everywhere: false,
                unscheduled: Vec::new(),
                refused: false,
                local_first: false,
                first_granted: false,
                early: Vec::new(),
            })
            .collect();
        // Per key, the sequence of (transaction, write) that touched it.
        let mut history: Vec<Vec<(usize, bool)>> = vec![Vec::new(); keys as usize];
        let mut runnable: Vec<(usize, usize)> = Vec::new(); // (tx, shard)
        let mut steps = 0;
        while txs.iter().any(|t| t.phase != Phase::Done) {
            steps += 1;
            assert!(steps < 100_000, "seed {seed}: no progress (deadlock?)");
            // Run a hop whose turn has come, or advance a random coordinator.
            if !runnable.is_empty() && rng.gen_bool(0.5) {
                let (t, shard) = runnable.swap_remove(rng.gen_range(0..runnable.len()));
                for &(s, k, w) in &txs[t].ops {
                    if s == shard {
                        history[k as usize].push((t, w));
                    }
                }
                txs[t].ran.push(shard);
                let involved = shards_of(&txs[t]);
                let id = txs[t].id;
                let mut release_now: Vec<usize> = Vec::new();
                if txs[t].granted_everywhere || txs[t].early.contains(&shard) {
                    release_now.push(shard);
                }
                if txs[t].ran.len() == involved.len() {
                    release_now.extend(involved.iter().copied());
                }
                for s in release_now {
                    for (_, hop) in queues[s].release(id) {
                        runnable.push((hop, s));
                    }
                }
                if txs[t].ran.len() == involved.len() {
                    txs[t].phase = Phase::Done;
                }
                continue;
            }
            // A plain single-key command on a random key.
            if rng.gen_bool(0.2) {
                let k = rng.gen_range(0..keys);
                let shard = k as usize % shards;
                let write = rng.gen_bool(0.5);
                if queues[shard].is_free(&[lock(k, write)]) {
                    history[k as usize].push((usize::MAX - k as usize, write));
                }
                continue;
            }
            let t = rng.gen_range(0..txs.len());
            match txs[t].phase {
                Phase::Schedule => {
                    // One scheduling message is delivered per step, so other transactions
                    // interleave with a half-scheduled one.
                    if txs[t].id == 0 {
                        txs[t].id = next_id;
                        next_id += 1;
                        let mut order = shards_of(&txs[t]);
                        order.shuffle(&mut rng);
                        txs[t].local_first = order.len() == 2 && rng.gen_bool(0.5);
                        txs[t].unscheduled = order;
                        txs[t].accepted.clear();
                        txs[t].refused = false;
                        txs[t].granted_everywhere = !txs[t].local_first;
                        txs[t].early.clear();
                    }
                    let id = txs[t].id;
                    if let Some(s) = txs[t].unscheduled.pop() {
                        let mut locks = Vec::new();
                        for &(sh, k, w) in &txs[t].ops {
                            if sh == s {
                                locks.push(lock(k, w));
                            }
                        }
                        super::super::locks::merge_locks(&mut locks);
                        if queues[s].schedule(id, locks) {
                            txs[t].accepted.push(s);
                            txs[t].granted_everywhere &= queues[s].is_granted(id);
                            if txs[t].accepted.len() == 1 {
                                txs[t].first_granted = queues[s].is_granted(id);
                            }
                            let second_accepted = txs[t].local_first
                                && txs[t].unscheduled.is_empty()
                                && !txs[t].refused;
                            if second_accepted {
                                // Its hop arrived with its intents: offered at once.
                                if txs[t].first_granted {
                                    txs[t].early.push(s);
                                }
                                txs[t].phase = Phase::Run;
                                for sh in shards_of(&txs[t]) {
                                    if let Some(hop) = queues[sh].submit(id, t) {
                                        runnable.push((hop, sh));
                                    }
                                }
                            }
                        } else {
                            txs[t].refused = true;
                        }
                        continue;
                    }
                    if txs[t].refused {
                        for s in std::mem::take(&mut txs[t].accepted) {
                            for (_, hop) in queues[s].release(id) {
                                runnable.push((hop, s));
                            }
                        }
                        txs[t].id = 0;
                        continue;
                    }
                    txs[t].phase = Phase::Run;
                    for s in shards_of(&txs[t]) {
                        if let Some(hop) = queues[s].submit(id, t) {
                            runnable.push((hop, s));
                        }
                    }
                }
                Phase::Run | Phase::Done => {}
            }
        }
        assert!(queues.iter().all(|q| q.is_idle() && q.is_empty()));
        assert_acyclic(&history, txs.len(), seed);
    }

    fn shards_of(t: &SimTx) -> Vec<usize> {
        let mut s: Vec<usize> = t.ops.iter().map(|o| o.0).collect();
        s.sort_unstable();
        s.dedup();
        s
    }

    /// Builds the conflict graph (a before b when they touched a key in that order and one of
    /// them wrote) over transactions and plain commands, and checks it has no cycle.
    fn assert_acyclic(history: &[Vec<(usize, bool)>], _txs: usize, seed: u64) {
        use std::collections::{HashMap, HashSet};
        let mut edges: HashMap<usize, HashSet<usize>> = HashMap::new();
        let mut nodes: HashSet<usize> = HashSet::new();
        for h in history {
            // Plain commands are distinct events: give each occurrence its own node.
            let events: Vec<(usize, bool)> = h
                .iter()
                .enumerate()
                .map(|(i, &(who, w))| {
                    if who > usize::MAX / 2 {
                        (1_000_000 + i * 1000 + (usize::MAX - who), w)
                    } else {
                        (who, w)
                    }
                })
                .collect();
            for (i, &(a, wa)) in events.iter().enumerate() {
                nodes.insert(a);
                for &(b, wb) in &events[i + 1..] {
                    if a != b && (wa || wb) {
                        edges.entry(a).or_default().insert(b);
                    }
                }
            }
        }
        // Kahn's algorithm.
        let mut indeg: HashMap<usize, usize> = nodes.iter().map(|&n| (n, 0)).collect();
        for targets in edges.values() {
            for t in targets {
                *indeg.get_mut(t).expect("node") += 1;
            }
        }
        let mut ready: Vec<usize> = indeg.iter().filter(|e| *e.1 == 0).map(|e| *e.0).collect();
        let mut seen = 0;
        while let Some(n) = ready.pop() {
            seen += 1;
            for t in edges.get(&n).into_iter().flatten() {
                let d = indeg.get_mut(t).expect("node");
                *d -= 1;
                if *d == 0 {
                    ready.push(*t);
                }
            }
        }
        assert_eq!(
            seen,
            nodes.len(),
            "seed {seed}: conflict cycle in {history:?}"
        );
    }
}
