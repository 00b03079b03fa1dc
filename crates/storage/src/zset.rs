//! The sorted-set type: members ordered by (score, member bytes). Small sets are one [`Pack`]
//! of alternating member and 8-byte score entries kept in order (Redis's `listpack`); past
//! `zset-max-listpack-entries` members or a member longer than `zset-max-listpack-value` bytes
//! they convert to a [`Tree`] (reported as `skiplist`, as Redis names its general encoding).
//!
//! The tree is a treap in an arena, each node carrying its subtree size, so rank, select and
//! "how many come before this bound" are O(log n) expected; a hash table of node indexes
//! answers ZSCORE in O(1). Per member that is one 40-byte node, the member's allocation and
//! 5 bytes of index, against Redis's skiplist node plus dict entry.

use std::cmp::Ordering;

use hashbrown::HashTable;

use crate::dict::hash_bytes;
use crate::limits::EncodingLimits;
use crate::pack::Pack;

/// Total order of members: by score, then by bytes.
pub fn cmp(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.partial_cmp(&b.0)
        .unwrap_or(Ordering::Equal)
        .then_with(|| a.1.cmp(b.1))
}

const NIL: u32 = u32::MAX;

#[derive(Debug, Clone)]
struct Node {
    member: Box<[u8]>,
    score: f64,
    left: u32,
    right: u32,
    size: u32,
    prio: u32,
}

/// A treap of (score, member) with subtree sizes, plus a member index.
#[derive(Debug, Clone)]
pub struct Tree {
    nodes: Vec<Node>,
    free: Vec<u32>,
    root: u32,
    index: HashTable<u32>,
    heap: usize,
}

impl Default for Tree {
    fn default() -> Self {
        Tree {
            nodes: Vec::new(),
            free: Vec::new(),
            root: NIL,
            index: HashTable::new(),
            heap: 0,
        }
    }
}

impl Tree {
    fn size(&self, t: u32) -> usize {
        if t == NIL {
            0
        } else {
            self.nodes[t as usize].size as usize
        }
    }

    fn fix(&mut self, t: u32) {
        let n = &self.nodes[t as usize];
        let s = 1 + self.size(n.left) + self.size(n.right);
        self.nodes[t as usize].size = s as u32;
    }

    fn key(&self, t: u32) -> (f64, &[u8]) {
        let n = &self.nodes[t as usize];
        (n.score, &n.member)
    }

    /// Splits `t` into the nodes for which `before` holds (a prefix of the order) and the rest.
    fn split(&mut self, t: u32, before: &dyn Fn(f64, &[u8]) -> bool) -> (u32, u32) {
        if t == NIL {
            return (NIL, NIL);
        }
        let (s, m) = self.key(t);
        if before(s, m) {
            let (l, r) = self.split(self.nodes[t as usize].right, before);
            self.nodes[t as usize].right = l;
            self.fix(t);
            (t, r)
        } else {
            let (l, r) = self.split(self.nodes[t as usize].left, before);
            self.nodes[t as usize].left = r;
            self.fix(t);
            (l, t)
        }
    }

    fn merge(&mut self, a: u32, b: u32) -> u32 {
        if a == NIL {
            return b;
        }
        if b == NIL {
            return a;
        }
        if self.nodes[a as usize].prio > self.nodes[b as usize].prio {
            let r = self.merge(self.nodes[a as usize].right, b);
            self.nodes[a as usize].right = r;
            self.fix(a);
            a
        } else {
            let l = self.merge(a, self.nodes[b as usize].left);
            self.nodes[b as usize].left = l;
            self.fix(b);
            b
        }
    }

    fn find(&self, member: &[u8]) -> Option<u32> {
        let nodes = &self.nodes;
        self.index
            .find(hash_bytes(member), |&i| {
                &*nodes[i as usize].member == member
            })
            .copied()
    }

    pub fn len(&self) -> usize {
        self.size(self.root)
    }

    pub fn is_empty(&self) -> bool {
        self.root == NIL
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|i| self.nodes[i as usize].score)
    }

    /// Inserts a member that is not present.
    fn insert_new(&mut self, member: &[u8], score: f64) {
        let node = Node {
            member: member.into(),
            score,
            left: NIL,
            right: NIL,
            size: 1,
            prio: hash_bytes(member) as u32,
        };
        self.heap += member.len() + 8;
        let i = match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        };
        let nodes = &self.nodes;
        self.index.insert_unique(hash_bytes(member), i, |&j| {
            hash_bytes(&nodes[j as usize].member)
        });
        let (l, r) = self.split(self.root, &|s, m| cmp((s, m), (score, member)).is_lt());
        let l = self.merge(l, i);
        self.root = self.merge(l, r);
    }

    /// Removes the member; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let i = self.find(member)?;
        let score = self.nodes[i as usize].score;
        let (l, rest) = self.split(self.root, &|s, m| cmp((s, m), (score, member)).is_lt());
        let (mid, r) = self.split(rest, &|s, m| cmp((s, m), (score, member)).is_le());
        debug_assert_eq!(mid, i);
        self.root = self.merge(l, r);
        let nodes = &self.nodes;
        if let Ok(slot) = self.index.find_entry(hash_bytes(member), |&j| {
            &*nodes[j as usize].member == member
        }) {
            slot.remove();
        }
        let node = &mut self.nodes[i as usize];
        self.heap -= node.member.len() + 8;
        node.member = Box::default();
        node.size = 0; // marks the slot free for `scan`
        self.free.push(i);
        Some(score)
    }

    /// How many members come before the first one for which `before` is false.
    pub fn count_before(&self, before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        let (mut t, mut n) = (self.root, 0);
        while t != NIL {
            let (s, m) = self.key(t);
            let node = &self.nodes[t as usize];
            if before(s, m) {
                n += self.size(node.left) + 1;
                t = node.right;
            } else {
                t = node.left;
            }
        }
        n
    }

    /// Members with ranks in `start..end`, ascending.
    fn collect(&self, t: u32, start: usize, end: usize, out: &mut Vec<(Vec<u8>, f64)>) {
        if t == NIL || start >= end {
            return;
        }
        let node = &self.nodes[t as usize];
        let left = self.size(node.left);
        if start < left {
            self.collect(node.left, start, end.min(left), out);
        }
        if start <= left && left < end {
            out.push((node.member.to_vec(), node.score));
        }
        if end > left + 1 {
            self.collect(
                node.right,
                start.saturating_sub(left + 1),
                end - left - 1,
                out,
            );
        }
    }

    /// One step of ZSCAN over arena slots, walking down from `cursor` (0 = start) over up to
    /// `count` slots. A member keeps its slot for as long as it is in the set (a score change
    /// frees and at once reuses the same slot), so a member present for the whole scan is
    /// returned; members added meanwhile may or may not be. Returns the next cursor (0 = done).
    fn scan(&self, cursor: u64, count: usize, out: &mut Vec<(Vec<u8>, f64)>) -> u64 {
        let top = match cursor {
            0 => self.nodes.len(),
            c => (c as usize).min(self.nodes.len()),
        };
        let bottom = top.saturating_sub(count.max(1));
        out.extend(
            self.nodes[bottom..top]
                .iter()
                .rev()
                .filter(|n| n.size > 0)
                .map(|n| (n.member.to_vec(), n.score)),
        );
        bottom as u64
    }

    fn mem_size(&self) -> usize {
        self.heap
            + self.nodes.capacity() * std::mem::size_of::<Node>()
            + self.index.capacity() * 5
            + self.free.capacity() * 4
    }
}

#[derive(Debug, Clone)]
pub enum ZSet {
    Pack(Pack),
    Tree(Box<Tree>),
}

impl Default for ZSet {
    fn default() -> Self {
        ZSet::Pack(Pack::new())
    }
}

fn score_of(b: &[u8]) -> f64 {
    let mut raw = [0u8; 8];
    raw.copy_from_slice(&b[..8]);
    f64::from_le_bytes(raw)
}

/// The pack's pairs in order.
fn pairs(p: &Pack) -> impl Iterator<Item = (&[u8], f64)> {
    let mut it = p.iter();
    std::iter::from_fn(move || Some((it.next()?, score_of(it.next()?))))
}

impl ZSet {
    /// An empty set in the encoding a set of `len` members no longer than `max_member` takes.
    pub fn sized_for(len: usize, max_member: usize, limits: &EncodingLimits) -> ZSet {
        if len <= limits.zset_max_entries && max_member <= limits.zset_max_value {
            ZSet::Pack(Pack::new())
        } else {
            ZSet::Tree(Box::default())
        }
    }

    pub fn len(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.len() / 2,
            ZSet::Tree(t) => t.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Pack(_) => "listpack",
            ZSet::Tree(_) => "skiplist",
        }
    }

    pub fn mem_size(&self) -> usize {
        match self {
            ZSet::Pack(p) => p.mem_size(),
            ZSet::Tree(t) => std::mem::size_of::<Tree>() + t.mem_size(),
        }
    }

    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Pack(p) => pairs(p).find(|(m, _)| *m == member).map(|(_, s)| s),
            ZSet::Tree(t) => t.score(member),
        }
    }

    /// Sets a member's score (adding it when absent); true when it was new.
    pub fn insert(&mut self, member: &[u8], score: f64, limits: &EncodingLimits) -> bool {
        let existed = self.remove(member);
        if let ZSet::Pack(p) = self {
            if p.len() / 2 >= limits.zset_max_entries || member.len() > limits.zset_max_value {
                self.convert();
            } else {
                let mut pos = p.first();
                while pos < p.end() {
                    let (m, next) = p.get(pos);
                    let (s, after) = p.get(next);
                    if cmp((score_of(s), m), (score, member)).is_gt() {
                        break;
                    }
                    pos = after;
                }
                // Redis keeps listpack scores as text, which turns -0 into 0.
                p.insert(pos, &(score + 0.0).to_le_bytes());
                p.insert(pos, member);
                return !existed;
            }
        }
        if let ZSet::Tree(t) = self {
            t.insert_new(member, score);
        }
        !existed
    }

    fn convert(&mut self) {
        if let ZSet::Pack(p) = self {
            let mut t = Tree::default();
            for (m, s) in pairs(p) {
                t.insert_new(m, s);
            }
            *self = ZSet::Tree(Box::new(t));
        }
    }

    /// Removes a member; true when it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            ZSet::Pack(p) => {
                let mut pos = p.first();
                while pos < p.end() {
                    let (m, next) = p.get(pos);
                    if m == member {
                        p.remove(pos, 2);
                        p.shrink();
                        return true;
                    }
                    pos = p.get(next).1;
                }
                false
            }
            ZSet::Tree(t) => t.remove(member).is_some(),
        }
    }

    /// 0-based ascending rank of a member.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let score = self.score(member)?;
        Some(self.count_before(&|s, m| cmp((s, m), (score, member)).is_lt()))
    }

    /// How many members come before the first for which `before` is false (`before` must hold
    /// for a prefix of the order).
    pub fn count_before(&self, before: &dyn Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            ZSet::Pack(p) => pairs(p).take_while(|&(m, s)| before(s, m)).count(),
            ZSet::Tree(t) => t.count_before(before),
        }
    }

    /// Members with ascending ranks in `start..end` (clamped to the length).
    pub fn range(&self, start: usize, end: usize) -> Vec<(Vec<u8>, f64)> {
        let end = end.min(self.len());
        let mut out = Vec::with_capacity(end.saturating_sub(start));
        match self {
            ZSet::Pack(p) => out.extend(
                pairs(p)
                    .skip(start)
                    .take(end.saturating_sub(start))
                    .map(|(m, s)| (m.to_vec(), s)),
            ),
            ZSet::Tree(t) => t.collect(t.root, start, end, &mut out),
        }
        out
    }

    /// Removes the members with ascending ranks in `start..end`; returns them.
    pub fn remove_range(&mut self, start: usize, end: usize) -> Vec<(Vec<u8>, f64)> {
        let gone = self.range(start, end);
        match self {
            ZSet::Pack(p) if !gone.is_empty() => {
                let pos = p.position(2 * start);
                p.remove(pos, 2 * gone.len());
                p.shrink();
            }
            ZSet::Pack(_) => {}
            ZSet::Tree(t) => {
                for (m, _) in &gone {
                    t.remove(m);
                }
            }
        }
        gone
    }

    /// One step of ZSCAN: the members it returns and the next cursor (0 = done). A listpack
    /// is returned whole in one step, as Redis does.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(Vec<u8>, f64)>) {
        match self {
            ZSet::Pack(_) => (0, self.all()),
            ZSet::Tree(t) => {
                let mut out = Vec::new();
                let next = t.scan(cursor, count, &mut out);
                (next, out)
            }
        }
    }

    /// The member at ascending rank `i` (< len).
    pub fn at(&self, i: usize) -> Option<(Vec<u8>, f64)> {
        self.range(i, i + 1).pop()
    }

    /// Every member, ascending.
    pub fn all(&self) -> Vec<(Vec<u8>, f64)> {
        self.range(0, self.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    fn model_order(model: &BTreeMap<Vec<u8>, f64>) -> Vec<(Vec<u8>, f64)> {
        let mut v: Vec<(Vec<u8>, f64)> = model.iter().map(|(m, s)| (m.clone(), *s)).collect();
        v.sort_by(|a, b| cmp((a.1, &a.0), (b.1, &b.0)));
        v
    }

    proptest! {
        #[test]
        fn behaves_like_a_sorted_model(
            ops in proptest::collection::vec((0u8..4, 0u16..200, -5i8..5, 0usize..10), 1..400)
        ) {
            let limits = EncodingLimits { zset_max_entries: 12, zset_max_value: 30, ..Default::default() };
            let mut z = ZSet::default();
            let mut model: BTreeMap<Vec<u8>, f64> = BTreeMap::new();
            for (op, m, score, extra) in ops {
                let mut member = format!("m{m}").into_bytes();
                if m % 50 == 0 { member.resize(40, b'x'); }
                let score = f64::from(score) / 2.0;
                match op {
                    0 | 1 => prop_assert_eq!(z.insert(&member, score, &limits), model.insert(member.clone(), score).is_none()),
                    2 => prop_assert_eq!(z.remove(&member), model.remove(&member).is_some()),
                    _ => {
                        let ordered = model_order(&model);
                        let start = extra.min(ordered.len());
                        let end = (start + extra).min(ordered.len());
                        let gone = z.remove_range(start, end);
                        prop_assert_eq!(&gone, &ordered[start..end].to_vec());
                        for (g, _) in gone { model.remove(&g); }
                    }
                }
                prop_assert_eq!(z.len(), model.len());
            }
            let ordered = model_order(&model);
            prop_assert_eq!(z.all(), ordered.clone());
            for (i, (m, s)) in ordered.iter().enumerate() {
                prop_assert_eq!(z.score(m), Some(*s));
                prop_assert_eq!(z.rank(m), Some(i));
                prop_assert_eq!(z.count_before(&|sc, _| sc < *s), ordered.iter().filter(|(_, x)| x < s).count());
            }
        }
    }

    proptest! {
        /// ZSCAN's guarantee: a member present from the first to the last step is returned,
        /// whatever is added, removed or re-scored between steps.
        #[test]
        fn scan_returns_members_present_throughout(
            initial in 130u16..400,
            churn in proptest::collection::vec((0u8..3, 0u16..600), 0..300),
            count in 1usize..40,
        ) {
            let limits = EncodingLimits::default();
            let mut z = ZSet::default();
            for i in 0..initial {
                z.insert(format!("m{i}").as_bytes(), f64::from(i), &limits);
            }
            let mut touched = std::collections::HashSet::new();
            let (mut cursor, mut seen) = (0u64, std::collections::HashSet::new());
            let mut churn = churn.into_iter();
            loop {
                let (next, items) = z.scan(cursor, count);
                seen.extend(items.into_iter().map(|(m, _)| m));
                for (op, m) in churn.by_ref().take(5) {
                    let member = format!("m{m}").into_bytes();
                    match op {
                        0 => { z.remove(&member); touched.insert(member); }
                        1 => { z.insert(&member, f64::from(m) * 3.0, &limits); }
                        _ => { z.insert(&member, -1.0, &limits); }
                    }
                }
                cursor = next;
                if cursor == 0 { break; }
            }
            for i in 0..initial {
                let member = format!("m{i}").into_bytes();
                if z.score(&member).is_some() && !touched.contains(&member) {
                    prop_assert!(seen.contains(&member), "missed {:?}", String::from_utf8_lossy(&member));
                }
            }
        }
    }

    #[test]
    fn converts_at_redis_thresholds() {
        let limits = EncodingLimits::default();
        let mut z = ZSet::default();
        for i in 0..128 {
            z.insert(format!("m{i}").as_bytes(), f64::from(i), &limits);
        }
        assert_eq!(z.encoding(), "listpack");
        z.insert(b"m0", 5.0, &limits);
        assert_eq!(z.encoding(), "listpack", "updating is not growing");
        z.insert(b"extra", 1.0, &limits);
        assert_eq!(z.encoding(), "skiplist");
        assert_eq!(z.rank(b"extra"), Some(0), "ties order by member bytes");
        let mut z = ZSet::default();
        z.insert(&[b'x'; 65], 1.0, &limits);
        assert_eq!(z.encoding(), "skiplist");
    }

    #[test]
    fn large_tree_ranks() {
        let limits = EncodingLimits::default();
        let mut z = ZSet::default();
        for i in 0..20_000u32 {
            z.insert(format!("m{i}").as_bytes(), f64::from(i % 1000), &limits);
        }
        assert_eq!(z.len(), 20_000);
        assert_eq!(z.count_before(&|s, _| s < 500.0), 10_000);
        let mid = z.range(10_000, 10_003);
        assert!(mid.iter().all(|(_, s)| *s == 500.0));
        for i in 0..10_000u32 {
            assert!(z.remove(format!("m{i}").as_bytes()));
        }
        assert_eq!(z.len(), 10_000);
        assert_eq!(z.range(0, 1)[0].1, 0.0);
    }
}
