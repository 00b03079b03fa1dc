//! A packed sequence of byte strings in one allocation: the compact encoding behind small
//! hashes, sorted sets and list nodes (Redis's listpack plays this role). Each entry is its
//! length as a LEB128 varint, the bytes, then the length again with its varint bytes reversed,
//! so the sequence can be walked from either end. Operations are linear, which is what Redis's
//! thresholds (128 entries, 64-byte values, 8 KB list nodes) keep cheap.

use crate::varint;

/// A packed sequence of byte strings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pack {
    buf: Vec<u8>,
    count: u32,
}

/// Bytes one entry of `len` data bytes takes.
pub fn entry_size(len: usize) -> usize {
    2 * varint::len(len) + len
}

fn encode_entry(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entry_size(data.len()));
    varint::push(&mut out, data.len());
    out.extend_from_slice(data);
    let start = out.len();
    varint::push(&mut out, data.len());
    out[start..].reverse();
    out
}

impl Pack {
    pub fn new() -> Self {
        Pack::default()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.count as usize
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Size of the packed bytes.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Heap bytes held.
    pub fn mem_size(&self) -> usize {
        self.buf.capacity()
    }

    /// The entry starting at byte `pos`: its data and the position of the next entry.
    fn at(&self, pos: usize) -> (&[u8], usize) {
        let (len, n) = varint::read(&self.buf[pos..]);
        let p = pos + n;
        let data = &self.buf[p..p + len];
        (data, p + len + varint::len(len))
    }

    /// The start of the entry that ends at byte `end`.
    fn start_before(&self, end: usize) -> usize {
        let (mut len, mut shift, mut p) = (0usize, 0, end);
        loop {
            p -= 1;
            let b = self.buf[p];
            len |= ((b & 0x7f) as usize) << shift;
            if b & 0x80 == 0 {
                break;
            }
            shift += 7;
        }
        p - len - varint::len(len)
    }

    /// Position of the first entry (equal to the end when empty).
    pub fn first(&self) -> usize {
        0
    }

    /// Byte position one past the last entry.
    pub fn end(&self) -> usize {
        self.buf.len()
    }

    /// The entry at `pos` and the position of the next one.
    pub fn get(&self, pos: usize) -> (&[u8], usize) {
        self.at(pos)
    }

    /// Position of the entry before the one at `pos` (`pos` > 0).
    pub fn prev(&self, pos: usize) -> usize {
        self.start_before(pos)
    }

    /// Entries front to back.
    pub fn iter(&self) -> PackIter<'_> {
        PackIter {
            pack: self,
            front: 0,
            back: self.buf.len(),
        }
    }

    /// Position of entry number `index` (walks from the nearer end).
    pub fn position(&self, index: usize) -> usize {
        if index <= self.len() / 2 {
            let mut pos = 0;
            for _ in 0..index {
                pos = self.at(pos).1;
            }
            pos
        } else {
            let mut pos = self.buf.len();
            for _ in index..self.len() {
                pos = self.start_before(pos);
            }
            pos
        }
    }

    /// Inserts `data` as a new entry starting at byte `pos` (an entry boundary).
    pub fn insert(&mut self, pos: usize, data: &[u8]) {
        let entry = encode_entry(data);
        self.buf.reserve_exact(entry.len());
        self.buf.splice(pos..pos, entry);
        self.count += 1;
    }

    pub fn push_back(&mut self, data: &[u8]) {
        let end = self.buf.len();
        self.insert(end, data);
    }

    pub fn push_front(&mut self, data: &[u8]) {
        self.insert(0, data);
    }

    /// Removes `n` entries starting at byte `pos`; returns `pos` (now the next entry).
    pub fn remove(&mut self, pos: usize, n: usize) -> usize {
        let mut end = pos;
        for _ in 0..n {
            end = self.at(end).1;
        }
        self.buf.drain(pos..end);
        self.count -= n as u32;
        pos
    }

    /// Replaces the entry at `pos` with `data`; returns the position after it.
    pub fn replace(&mut self, pos: usize, data: &[u8]) -> usize {
        let (_, next) = self.at(pos);
        let entry = encode_entry(data);
        let after = pos + entry.len();
        self.buf.splice(pos..next, entry);
        self.buf.shrink_to_fit();
        after
    }

    /// Splits off the entries from entry `index` on into a new pack.
    pub fn split_off(&mut self, index: usize) -> Pack {
        let pos = self.position(index);
        let tail = self.buf.split_off(pos);
        let moved = self.count - index as u32;
        self.count = index as u32;
        self.buf.shrink_to_fit();
        Pack {
            buf: tail,
            count: moved,
        }
    }

    /// Releases spare capacity (after removals).
    pub fn shrink(&mut self) {
        if self.buf.capacity() > self.buf.len() + self.buf.len() / 4 + 16 {
            self.buf.shrink_to_fit();
        }
    }
}

/// Iterates a pack's entries from both ends.
pub struct PackIter<'a> {
    pack: &'a Pack,
    front: usize,
    back: usize,
}

impl<'a> Iterator for PackIter<'a> {
    type Item = &'a [u8];

    fn next(&mut self) -> Option<&'a [u8]> {
        if self.front >= self.back {
            return None;
        }
        let (data, next) = self.pack.at(self.front);
        self.front = next;
        Some(data)
    }
}

impl DoubleEndedIterator for PackIter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        if self.front >= self.back {
            return None;
        }
        self.back = self.pack.start_before(self.back);
        Some(self.pack.at(self.back).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Debug, Clone)]
    enum Op {
        PushBack(Vec<u8>),
        PushFront(Vec<u8>),
        Insert(usize, Vec<u8>),
        Remove(usize, usize),
        Replace(usize, Vec<u8>),
        Split(usize),
    }

    fn data() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..4),
            proptest::collection::vec(any::<u8>(), 120..300),
        ]
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            data().prop_map(Op::PushBack),
            data().prop_map(Op::PushFront),
            (any::<usize>(), data()).prop_map(|(i, d)| Op::Insert(i, d)),
            (any::<usize>(), 0usize..3).prop_map(|(i, n)| Op::Remove(i, n)),
            (any::<usize>(), data()).prop_map(|(i, d)| Op::Replace(i, d)),
            any::<usize>().prop_map(Op::Split),
        ]
    }

    proptest! {
        #[test]
        fn behaves_like_a_vec(ops in proptest::collection::vec(op(), 1..60)) {
            let mut pack = Pack::new();
            let mut model: Vec<Vec<u8>> = Vec::new();
            for op in ops {
                match op {
                    Op::PushBack(d) => { pack.push_back(&d); model.push(d); }
                    Op::PushFront(d) => { pack.push_front(&d); model.insert(0, d); }
                    Op::Insert(i, d) => {
                        let i = i % (model.len() + 1);
                        let pos = pack.position(i);
                        pack.insert(pos, &d);
                        model.insert(i, d);
                    }
                    Op::Remove(i, n) if !model.is_empty() => {
                        let i = i % model.len();
                        let n = n.min(model.len() - i);
                        let pos = pack.position(i);
                        pack.remove(pos, n);
                        model.drain(i..i + n);
                    }
                    Op::Replace(i, d) if !model.is_empty() => {
                        let i = i % model.len();
                        let pos = pack.position(i);
                        pack.replace(pos, &d);
                        model[i] = d;
                    }
                    Op::Split(i) => {
                        let i = i % (model.len() + 1);
                        let tail = pack.split_off(i);
                        let model_tail = model.split_off(i);
                        prop_assert_eq!(tail.iter().collect::<Vec<_>>(), model_tail.iter().map(|v| v.as_slice()).collect::<Vec<_>>());
                        model.extend(model_tail);
                        for t in tail.iter() { pack.push_back(t); }
                    }
                    _ => {}
                }
                prop_assert_eq!(pack.len(), model.len());
                let fwd: Vec<&[u8]> = pack.iter().collect();
                prop_assert_eq!(&fwd, &model.iter().map(|v| v.as_slice()).collect::<Vec<_>>());
                let back: Vec<&[u8]> = pack.iter().rev().collect();
                prop_assert_eq!(back, model.iter().rev().map(|v| v.as_slice()).collect::<Vec<_>>());
                for (i, m) in model.iter().enumerate() {
                    prop_assert_eq!(pack.get(pack.position(i)).0, m.as_slice());
                }
            }
        }
    }

    #[test]
    fn entry_sizes() {
        assert_eq!(entry_size(0), 2);
        assert_eq!(entry_size(127), 129);
        assert_eq!(entry_size(128), 132);
    }
}
