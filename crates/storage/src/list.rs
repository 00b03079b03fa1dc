//! The list type: a deque of [`Pack`] nodes (Redis 7.0's `quicklist` of listpacks). A node
//! holds entries up to `list-max-listpack-size` (entries when positive, a byte budget when
//! negative), so pushes and pops at either end touch one small node and the per-element cost
//! is a few bytes of length prefix.

use std::collections::VecDeque;

use crate::pack::{entry_size, Pack};

/// Byte budgets of negative `list-max-listpack-size` values (-1 .. -5).
const SIZE_CLASSES: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// A node never grows past this when the fill is a count (Redis's SIZE_SAFETY_LIMIT).
const SAFETY_LIMIT: usize = 8192;

#[derive(Debug, Clone, Default)]
pub struct List {
    nodes: VecDeque<Pack>,
    len: usize,
}

/// Whether a node may take one more entry of `size` data bytes under `fill`.
fn fits(node: &Pack, size: usize, fill: i64) -> bool {
    if node.is_empty() {
        return true;
    }
    let new_bytes = node.bytes() + entry_size(size);
    if fill >= 0 {
        (node.len() as i64) < fill.max(1) && new_bytes <= SAFETY_LIMIT
    } else {
        let class = (-fill).clamp(1, 5) as usize - 1;
        new_bytes <= SIZE_CLASSES[class]
    }
}

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    Head,
    Tail,
}

impl List {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn encoding(&self) -> &'static str {
        "quicklist"
    }

    /// (nodes, their bytes as listpacks: entries plus Redis's 6-byte header and end byte):
    /// DEBUG OBJECT's quicklist fields.
    pub fn node_stats(&self) -> (usize, usize) {
        let bytes = self.nodes.iter().map(|n| n.bytes() + 7).sum();
        (self.nodes.len(), bytes)
    }

    pub fn mem_size(&self) -> usize {
        self.nodes.capacity() * std::mem::size_of::<Pack>()
            + self.nodes.iter().map(Pack::mem_size).sum::<usize>()
    }

    pub fn push(&mut self, end: End, v: &[u8], fill: i64) {
        let node = match end {
            End::Head => self.nodes.front_mut(),
            End::Tail => self.nodes.back_mut(),
        };
        match node {
            Some(n) if fits(n, v.len(), fill) => match end {
                End::Head => n.push_front(v),
                End::Tail => n.push_back(v),
            },
            _ => {
                let mut n = Pack::new();
                n.push_back(v);
                match end {
                    End::Head => self.nodes.push_front(n),
                    End::Tail => self.nodes.push_back(n),
                }
            }
        }
        self.len += 1;
    }

    pub fn pop(&mut self, end: End) -> Option<Vec<u8>> {
        let n = match end {
            End::Head => self.nodes.front_mut()?,
            End::Tail => self.nodes.back_mut()?,
        };
        let pos = match end {
            End::Head => n.first(),
            End::Tail => n.prev(n.end()),
        };
        let v = n.get(pos).0.to_vec();
        n.remove(pos, 1);
        if n.is_empty() {
            match end {
                End::Head => self.nodes.pop_front(),
                End::Tail => self.nodes.pop_back(),
            };
        } else {
            n.shrink();
        }
        self.len -= 1;
        Some(v)
    }

    /// The node holding element `i` and the element's index inside it.
    fn locate(&self, mut i: usize) -> (usize, usize) {
        if i < self.len / 2 {
            for (n, node) in self.nodes.iter().enumerate() {
                if i < node.len() {
                    return (n, i);
                }
                i -= node.len();
            }
        } else {
            let mut from_end = self.len - i;
            for (n, node) in self.nodes.iter().enumerate().rev() {
                if from_end <= node.len() {
                    return (n, node.len() - from_end);
                }
                from_end -= node.len();
            }
        }
        (self.nodes.len(), 0)
    }

    pub fn get(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len {
            return None;
        }
        let (n, at) = self.locate(i);
        let node = &self.nodes[n];
        Some(node.get(node.position(at)).0)
    }

    /// Replaces element `i`; false when out of range.
    pub fn set(&mut self, i: usize, v: &[u8]) -> bool {
        if i >= self.len {
            return false;
        }
        let (n, at) = self.locate(i);
        let node = &mut self.nodes[n];
        let pos = node.position(at);
        node.replace(pos, v);
        true
    }

    /// Inserts `v` so that it becomes element `i` (0..=len).
    pub fn insert(&mut self, i: usize, v: &[u8], fill: i64) {
        if i == 0 {
            return self.push(End::Head, v, fill);
        }
        if i >= self.len {
            return self.push(End::Tail, v, fill);
        }
        let (n, at) = self.locate(i);
        let node = &mut self.nodes[n];
        let pos = node.position(at);
        node.insert(pos, v);
        self.len += 1;
        if !fits(&self.nodes[n], 0, fill) && self.nodes[n].len() > 1 {
            let half = self.nodes[n].len() / 2;
            let tail = self.nodes[n].split_off(half);
            self.nodes.insert(n + 1, tail);
        }
    }

    /// Elements front to back.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + '_ {
        self.nodes.iter().flat_map(|n| n.iter())
    }

    /// Elements from index `start` on, front to back.
    pub fn iter_from(&self, start: usize) -> impl Iterator<Item = &[u8]> + '_ {
        let (n, at) = if start >= self.len {
            (self.nodes.len(), 0)
        } else {
            self.locate(start)
        };
        self.nodes
            .iter()
            .skip(n)
            .enumerate()
            .flat_map(move |(k, node)| node.iter().skip(if k == 0 { at } else { 0 }))
    }

    /// Removes `n` elements from one end, dropping whole nodes where it can.
    pub fn remove_end(&mut self, end: End, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let node = match end {
                End::Head => self.nodes.front_mut(),
                End::Tail => self.nodes.back_mut(),
            };
            let Some(node) = node else { break };
            if node.len() <= n {
                n -= node.len();
                match end {
                    End::Head => self.nodes.pop_front(),
                    End::Tail => self.nodes.pop_back(),
                };
            } else {
                let keep = node.len() - n;
                match end {
                    End::Head => {
                        node.remove(node.first(), n);
                    }
                    End::Tail => {
                        let pos = node.position(keep);
                        node.remove(pos, n);
                    }
                }
                node.shrink();
                n = 0;
            }
        }
    }

    /// Keeps only the elements for which `keep` says so, in order (LREM).
    pub fn retain(&mut self, fill: i64, mut keep: impl FnMut(&[u8]) -> bool) {
        let mut out = List::default();
        for v in self.iter() {
            if keep(v) {
                out.push(End::Tail, v, fill);
            }
        }
        *self = out;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        Push(bool, usize),
        Pop(bool),
        Set(usize, usize),
        Insert(usize, usize),
        Trim(bool, usize),
        RemoveEvery(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => (any::<bool>(), 0usize..300).prop_map(|(h, n)| Op::Push(h, n)),
            2 => any::<bool>().prop_map(Op::Pop),
            1 => (any::<usize>(), 0usize..300).prop_map(|(i, n)| Op::Set(i, n)),
            1 => (any::<usize>(), 0usize..300).prop_map(|(i, n)| Op::Insert(i, n)),
            1 => (any::<bool>(), 0usize..40).prop_map(|(h, n)| Op::Trim(h, n)),
            1 => (0u8..10).prop_map(Op::RemoveEvery),
        ]
    }

    fn value(n: usize) -> Vec<u8> {
        let mut v = format!("{n}:").into_bytes();
        v.resize(n % 150 + 2, b'x');
        v
    }

    proptest! {
        #[test]
        fn behaves_like_a_deque(ops in proptest::collection::vec(op(), 1..300), fill in prop_oneof![Just(-1i64), Just(-2), Just(3), Just(128)]) {
            let mut l = List::default();
            let mut model: VecDeque<Vec<u8>> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(head, n) => {
                        let v = value(n);
                        if head { l.push(End::Head, &v, fill); model.push_front(v); }
                        else { l.push(End::Tail, &v, fill); model.push_back(v); }
                    }
                    Op::Pop(head) => {
                        let (a, b) = if head { (l.pop(End::Head), model.pop_front()) } else { (l.pop(End::Tail), model.pop_back()) };
                        prop_assert_eq!(a, b);
                    }
                    Op::Set(i, n) if !model.is_empty() => {
                        let i = i % model.len();
                        prop_assert!(l.set(i, &value(n)));
                        model[i] = value(n);
                    }
                    Op::Insert(i, n) => {
                        let i = i % (model.len() + 1);
                        l.insert(i, &value(n), fill);
                        model.insert(i, value(n));
                    }
                    Op::Trim(head, n) => {
                        l.remove_end(if head { End::Head } else { End::Tail }, n);
                        for _ in 0..n.min(model.len()) {
                            if head { model.pop_front(); } else { model.pop_back(); }
                        }
                    }
                    Op::RemoveEvery(d) => {
                        let digit = b'0' + d;
                        l.retain(fill, |v| v[0] != digit);
                        model.retain(|v| v[0] != digit);
                    }
                    _ => {}
                }
                prop_assert_eq!(l.len(), model.len());
            }
            let all: Vec<&[u8]> = l.iter().collect();
            prop_assert_eq!(all, model.iter().map(|v| v.as_slice()).collect::<Vec<_>>());
            let rev: Vec<&[u8]> = l.iter().rev().collect();
            prop_assert_eq!(rev, model.iter().rev().map(|v| v.as_slice()).collect::<Vec<_>>());
            for i in 0..model.len() {
                prop_assert_eq!(l.get(i), Some(model[i].as_slice()));
                let tail: Vec<&[u8]> = l.iter_from(i).collect();
                prop_assert_eq!(tail.len(), model.len() - i);
                prop_assert_eq!(tail[0], model[i].as_slice());
            }
            if fill > 0 {
                prop_assert!(l.nodes.iter().all(|n| n.len() as i64 <= fill.max(1) || n.len() == 1 || n.bytes() <= SAFETY_LIMIT));
            }
        }
    }
}
