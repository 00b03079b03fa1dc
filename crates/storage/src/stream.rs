//! Streams (Redis's t_stream.c data, not its commands): entries with ids `ms-seq` kept in
//! packed nodes of at most `stream-node-max-entries` entries and `stream-node-max-bytes` bytes,
//! an ordered index over the nodes, and the consumer groups with their pending entries.
//!
//! A node is one allocation. It starts with the node's master fields (those of its first
//! entry); each entry is then a flags byte, its id as deltas from the node's master id, and
//! either only its values (when its fields are the master fields, as is usual for a stream of
//! alike events) or its field count and pairs; lengths and deltas are LEB128 varints. Deleted
//! entries stay in place, flagged, until their whole node is gone, as in Redis. Nodes split
//! where Redis's do: each counts the bytes Redis's listpack for it would hold, so approximate
//! trimming (`~`), which removes whole nodes, removes what Redis removes.

use std::collections::{BTreeMap, BTreeSet};

use crate::listpack_size::{entry_size, int_entry_size, OVERHEAD};
use crate::varint;

/// A stream entry id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId {
        ms: u64::MAX,
        seq: u64::MAX,
    };

    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next id, None after the last possible one.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId::new(ms + 1, 0)),
            (ms, seq) => Some(StreamId::new(ms, seq + 1)),
        }
    }

    /// The previous id, None before 0-0.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId::new(ms - 1, u64::MAX)),
            (ms, seq) => Some(StreamId::new(ms, seq - 1)),
        }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// `streamEncodeID`: the 128-bit big-endian form Redis files nodes and pending entries
    /// under (in its radix trees and RDB files).
    pub fn to_be_bytes(self) -> [u8; 16] {
        let mut k = [0; 16];
        k[..8].copy_from_slice(&self.ms.to_be_bytes());
        k[8..].copy_from_slice(&self.seq.to_be_bytes());
        k
    }

    pub fn from_be_bytes(b: [u8; 16]) -> StreamId {
        let (ms, seq) = b.split_at(8);
        let word = |h: &[u8]| h.iter().fold(0u64, |v, &x| (v << 8) | u64::from(x));
        StreamId::new(word(ms), word(seq))
    }
}

impl std::fmt::Display for StreamId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// An entry as an owned copy: its id and its field/value pairs in order.
pub type OwnedEntry = (StreamId, Vec<(Vec<u8>, Vec<u8>)>);

/// Node size limits: Redis's `stream-node-max-bytes` and `stream-node-max-entries` (0 means
/// no limit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeLimits {
    pub max_bytes: usize,
    pub max_entries: usize,
}

impl Default for NodeLimits {
    fn default() -> Self {
        NodeLimits {
            max_bytes: 4096,
            max_entries: 100,
        }
    }
}

/// Bytes a node costs besides its buffer: its slot in the index.
const NODE_OVERHEAD: usize = 64;

/// The largest listpack Redis lets a stream node reach (STREAM_LISTPACK_MAX_SIZE).
const LISTPACK_MAX: usize = 1 << 30;

const DELETED: u8 = 1;
const SAME_FIELDS: u8 = 2;

/// One node of entries; its master id is its key in the index.
#[derive(Debug, Clone)]
struct Node {
    data: Vec<u8>,
    /// Entries not deleted.
    live: u32,
    /// Entries flagged deleted.
    deleted: u32,
    /// Bytes of Redis's listpack for this node, less its live and deleted counters.
    lp_base: u32,
    /// The id of the node's last entry, deleted or not.
    last: StreamId,
}

/// One entry as stored: where it is, its id, and where its pairs start.
struct RawEntry {
    at: usize,
    id: StreamId,
    flags: u8,
    /// Field count (from the master fields when SAME_FIELDS).
    fields: usize,
    body: usize,
}

fn push_bytes(out: &mut Vec<u8>, b: &[u8]) {
    varint::push(out, b.len());
    out.extend_from_slice(b);
}

fn read_bytes(data: &[u8], at: usize) -> (&[u8], usize) {
    let (len, n) = varint::read(&data[at..]);
    (&data[at + n..at + n + len], at + n + len)
}

fn read_u64(data: &[u8], at: usize) -> (u64, usize) {
    let (v, n) = varint::read(&data[at..]);
    (v as u64, at + n)
}

impl Node {
    fn master_fields(&self) -> (Vec<&[u8]>, usize) {
        let (n, mut at) = varint::read(&self.data);
        let mut fields = Vec::with_capacity(n);
        for _ in 0..n {
            let (f, next) = read_bytes(&self.data, at);
            fields.push(f);
            at = next;
        }
        (fields, at)
    }

    /// Whether the fields of `pairs` (fields and values alternating) are the master fields, in
    /// order, read in place (every XADD asks).
    fn has_master_fields(&self, pairs: &[&[u8]]) -> bool {
        let (n, mut at) = varint::read(&self.data);
        if n != pairs.len() / 2 {
            return false;
        }
        pairs.iter().step_by(2).all(|field| {
            let (f, next) = read_bytes(&self.data, at);
            at = next;
            f == *field
        })
    }

    /// Every entry, deleted or not, in id order.
    fn raw_entries(&self, master: StreamId) -> Vec<RawEntry> {
        let (fields, mut at) = self.master_fields();
        let mut out = Vec::with_capacity((self.live + self.deleted) as usize);
        while at < self.data.len() {
            let start = at;
            let flags = self.data[at];
            let (ms_delta, next) = read_u64(&self.data, at + 1);
            let (seq, next) = read_u64(&self.data, next);
            let id = if ms_delta == 0 {
                StreamId::new(master.ms, master.seq.wrapping_add(seq))
            } else {
                StreamId::new(master.ms.wrapping_add(ms_delta), seq)
            };
            let (count, body) = if flags & SAME_FIELDS != 0 {
                (fields.len(), next)
            } else {
                let (n, len) = varint::read(&self.data[next..]);
                (n, next + len)
            };
            let strings = if flags & SAME_FIELDS != 0 {
                count
            } else {
                2 * count
            };
            let mut end = body;
            for _ in 0..strings {
                end = read_bytes(&self.data, end).1;
            }
            out.push(RawEntry {
                at: start,
                id,
                flags,
                fields: count,
                body,
            });
            at = end;
        }
        out
    }

    /// The field/value pairs of `e`, into `pairs`.
    fn pairs<'a>(
        &'a self,
        e: &RawEntry,
        master_fields: &[&'a [u8]],
        pairs: &mut Vec<(&'a [u8], &'a [u8])>,
    ) {
        pairs.clear();
        let mut at = e.body;
        for i in 0..e.fields {
            let field = if e.flags & SAME_FIELDS != 0 {
                master_fields.get(i).copied().unwrap_or_default()
            } else {
                let (f, next) = read_bytes(&self.data, at);
                at = next;
                f
            };
            let (v, next) = read_bytes(&self.data, at);
            at = next;
            pairs.push((field, v));
        }
    }

    fn lp_bytes(&self) -> usize {
        self.lp_base as usize
            + int_entry_size(i64::from(self.live))
            + int_entry_size(i64::from(self.deleted))
    }
}

/// How XADD and XTRIM trim: to at most `MaxLen` entries or to no entry below `MinId`;
/// `approx` removes whole nodes only; `limit` (0 = none) caps how many entries go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trim {
    pub strategy: TrimTo,
    pub approx: bool,
    pub limit: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrimTo {
    MaxLen(u64),
    MinId(StreamId),
}

/// A pending entry of a group: delivered and not yet acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pending {
    pub consumer: Vec<u8>,
    /// When it was last delivered, in ms since the epoch.
    pub delivery_time: u64,
    pub delivery_count: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Consumer {
    /// When the consumer last read or claimed, in ms since the epoch.
    pub seen_time: u64,
    /// Ids of its pending entries (each also in the group's `pending`).
    pub pending: BTreeSet<StreamId>,
}

/// Redis's "entries read" value for a group whose count is unknown.
pub const ENTRIES_READ_UNKNOWN: i64 = -1;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries the group has read (for the lag), or ENTRIES_READ_UNKNOWN.
    pub entries_read: i64,
    pub pending: BTreeMap<StreamId, Pending>,
    /// Consumers by name (ordered, as Redis's radix tree lists them).
    pub consumers: BTreeMap<Vec<u8>, Consumer>,
}

impl Group {
    pub fn new(last_id: StreamId, entries_read: i64) -> Group {
        Group {
            last_id,
            entries_read,
            pending: BTreeMap::new(),
            consumers: BTreeMap::new(),
        }
    }

    /// Removes `id` from the group's and its consumer's pending lists; whether it was there.
    pub fn ack(&mut self, id: StreamId) -> bool {
        match self.pending.remove(&id) {
            Some(p) => {
                if let Some(c) = self.consumers.get_mut(&p.consumer) {
                    c.pending.remove(&id);
                }
                true
            }
            None => false,
        }
    }

    /// Bytes its pending lists and consumers take, roughly (for memory accounting).
    fn mem_size(&self) -> usize {
        let pending: usize = self.pending.values().map(|p| 64 + p.consumer.len()).sum();
        let consumers: usize = self
            .consumers
            .iter()
            .map(|(name, c)| 64 + name.len() + 32 * c.pending.len())
            .sum();
        96 + pending + consumers
    }
}

/// A stream.
#[derive(Debug, Clone, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Node>,
    /// Bytes the nodes hold (their buffers' capacity and a per-node overhead), kept as they
    /// change: memory accounting asks after every write.
    node_bytes: usize,
    length: u64,
    /// The greatest id ever added (or set by XSETID).
    pub last_id: StreamId,
    /// The first live entry's id, 0-0 when empty.
    pub first_id: StreamId,
    /// The greatest id deleted by XDEL (or set by XSETID).
    pub max_deleted_id: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups by name.
    pub groups: BTreeMap<Vec<u8>, Group>,
}

impl Stream {
    pub fn new() -> Stream {
        Stream::default()
    }

    pub fn len(&self) -> u64 {
        self.length
    }

    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Nodes holding entries (XINFO's `radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Appends an entry with an id greater than `last_id` (the caller checks); `pairs` are
    /// fields and values alternating.
    pub fn append(&mut self, id: StreamId, pairs: &[&[u8]], limits: NodeLimits) {
        debug_assert!(id > self.last_id || (self.last_id.is_zero() && self.length == 0));
        let numfields = pairs.len() / 2;
        let text_bytes: usize = pairs.iter().map(|p| p.len()).sum();
        let max_bytes = match limits.max_bytes {
            0 => LISTPACK_MAX,
            b => b.min(LISTPACK_MAX),
        };
        let tail_fits = self.nodes.last_key_value().is_some_and(|(_, n)| {
            n.lp_bytes() + text_bytes < max_bytes
                && (limits.max_entries == 0 || ((n.live + n.deleted) as usize) < limits.max_entries)
        });
        if !tail_fits {
            // The tail node is full: give back its spare capacity (Redis shrinks the listpack
            // to fit at this point too).
            if let Some((_, tail)) = self.nodes.iter_mut().next_back() {
                let before = tail.data.capacity();
                tail.data.shrink_to_fit();
                self.node_bytes -= before - tail.data.capacity();
            }
            let mut data = Vec::new();
            varint::push(&mut data, numfields);
            let mut lp_base = OVERHEAD + int_entry_size(numfields as i64) + int_entry_size(0);
            for f in pairs.iter().step_by(2) {
                push_bytes(&mut data, f);
                lp_base += entry_size(f);
            }
            let node = Node {
                data,
                live: 0,
                deleted: 0,
                lp_base: lp_base as u32,
                last: id,
            };
            self.node_bytes += NODE_OVERHEAD + node.data.capacity();
            self.nodes.insert(id, node);
        }
        let Some((&master, node)) = self.nodes.iter_mut().next_back() else {
            return;
        };
        let capacity = node.data.capacity();
        let same = node.has_master_fields(pairs);
        let flags = if same { SAME_FIELDS } else { 0 };
        let ms_delta = id.ms - master.ms;
        let seq = if ms_delta == 0 {
            id.seq - master.seq
        } else {
            id.seq
        };
        node.data.push(flags);
        varint::push(&mut node.data, ms_delta as usize);
        varint::push(&mut node.data, seq as usize);
        // Redis's entry: flags, ms and seq deltas, [count, fields,] values, lp-count.
        let mut lp = int_entry_size(i64::from(flags))
            + int_entry_size(ms_delta as i64)
            + int_entry_size(id.seq.wrapping_sub(master.seq) as i64);
        let mut lp_count = numfields + 3;
        if same {
            for v in pairs.iter().skip(1).step_by(2) {
                push_bytes(&mut node.data, v);
                lp += entry_size(v);
            }
        } else {
            varint::push(&mut node.data, numfields);
            lp += int_entry_size(numfields as i64);
            for p in pairs {
                push_bytes(&mut node.data, p);
                lp += entry_size(p);
            }
            lp_count += numfields + 1;
        }
        lp += int_entry_size(lp_count as i64);
        node.lp_base += lp as u32;
        self.node_bytes += node.data.capacity() - capacity;
        node.live += 1;
        node.last = id;
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
    }

    /// Calls `f` with each live entry whose id is in `start..=end`, ascending (or descending
    /// when `rev`), until it returns false.
    pub fn range(
        &self,
        start: StreamId,
        end: StreamId,
        rev: bool,
        mut f: impl FnMut(StreamId, &[(&[u8], &[u8])]) -> bool,
    ) {
        if start > end {
            return;
        }
        // The node holding `start` may begin before it.
        let from = self
            .nodes
            .range(..=start)
            .next_back()
            .map_or(start, |(k, _)| *k);
        let mut visit = |master: StreamId, node: &Node| -> bool {
            let mut pairs = Vec::new();
            let (fields, _) = node.master_fields();
            let entries = node.raw_entries(master);
            let mut each = |e: &RawEntry| -> Option<bool> {
                if e.id < start || e.id > end {
                    return None;
                }
                if e.flags & DELETED != 0 {
                    return Some(true);
                }
                node.pairs(e, &fields, &mut pairs);
                Some(f(e.id, &pairs))
            };
            if rev {
                for e in entries.iter().rev() {
                    if each(e) == Some(false) {
                        return false;
                    }
                }
            } else {
                for e in &entries {
                    if each(e) == Some(false) {
                        return false;
                    }
                }
            }
            true
        };
        if rev {
            for (master, node) in self.nodes.range(from..=end).rev() {
                if node.last >= start && !visit(*master, node) {
                    return;
                }
            }
        } else {
            for (master, node) in self.nodes.range(from..=end) {
                if node.last >= start && !visit(*master, node) {
                    return;
                }
            }
        }
    }

    /// The live entries of `start..=end`, ascending, as owned copies.
    pub fn entries(&self, start: StreamId, end: StreamId) -> Vec<OwnedEntry> {
        let mut out = Vec::new();
        self.range(start, end, false, |id, pairs| {
            let pairs = pairs.iter().map(|(f, v)| (f.to_vec(), v.to_vec()));
            out.push((id, pairs.collect()));
            true
        });
        out
    }

    /// The pairs of the entry `id`, if it is live.
    pub fn get(&self, id: StreamId) -> Option<Vec<(Vec<u8>, Vec<u8>)>> {
        self.entries(id, id).pop().map(|(_, pairs)| pairs)
    }

    pub fn contains(&self, id: StreamId) -> bool {
        let mut found = false;
        self.range(id, id, false, |_, _| {
            found = true;
            false
        });
        found
    }

    /// The first (or last) live entry's id.
    pub fn edge_id(&self, last: bool) -> Option<StreamId> {
        let mut found = None;
        self.range(StreamId::MIN, StreamId::MAX, last, |id, _| {
            found = Some(id);
            false
        });
        found
    }

    /// Flags the live entry `id` deleted (dropping its node when it was the node's last live
    /// one); whether there was one. `first_id` and `max_deleted_id` are the caller's to update.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master, node)) = self.nodes.range_mut(..=id).next_back() else {
            return false;
        };
        let Some(e) = node
            .raw_entries(master)
            .into_iter()
            .find(|e| e.id == id && e.flags & DELETED == 0)
        else {
            return false;
        };
        node.data[e.at] |= DELETED;
        node.live -= 1;
        node.deleted += 1;
        if node.live == 0 {
            self.drop_node(master);
        }
        self.length -= 1;
        true
    }

    fn drop_node(&mut self, master: StreamId) {
        if let Some(n) = self.nodes.remove(&master) {
            self.node_bytes -= NODE_OVERHEAD + n.data.capacity();
        }
    }

    /// Sets `first_id` from the entries after deletions (0-0 when empty).
    pub fn refresh_first_id(&mut self) {
        self.first_id = if self.length == 0 {
            StreamId::MIN
        } else {
            self.edge_id(false).unwrap_or(StreamId::MAX)
        };
    }

    /// Trims as Redis's streamTrim does: whole nodes from the oldest while the strategy allows
    /// (and the limit is not passed), then, unless approximate, entries of the next node one
    /// by one. Returns the entries removed.
    pub fn trim(&mut self, t: Trim) -> u64 {
        let mut removed = 0u64;
        while let Some((&master, node)) = self.nodes.first_key_value() {
            if let TrimTo::MaxLen(max) = t.strategy {
                if self.length <= max {
                    break;
                }
            }
            let entries = u64::from(node.live);
            if t.limit != 0 && removed + entries > t.limit {
                break;
            }
            let whole = match t.strategy {
                TrimTo::MaxLen(max) => self.length - entries >= max,
                TrimTo::MinId(min) => node.last < min,
            };
            if whole {
                self.drop_node(master);
                self.length -= entries;
                removed += entries;
                continue;
            }
            if t.approx {
                break;
            }
            let Some(node) = self.nodes.get_mut(&master) else {
                break;
            };
            for e in node.raw_entries(master) {
                let stop = match t.strategy {
                    TrimTo::MaxLen(max) => self.length <= max,
                    TrimTo::MinId(min) => e.id >= min,
                };
                if stop {
                    break;
                }
                if e.flags & DELETED == 0 {
                    node.data[e.at] |= DELETED;
                    node.live -= 1;
                    node.deleted += 1;
                    self.length -= 1;
                    removed += 1;
                }
            }
            // Redis keeps a node whose entries were all flagged here.
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if removed > 0 {
            self.refresh_first_id();
        }
        removed
    }

    /// How many nodes Redis's radix tree would have for these node keys (XINFO's
    /// `radix-tree-nodes`): the root, every branching point's children, and every end of a
    /// chain of single children, over the 16-byte big-endian keys.
    pub fn rax_node_count(&self) -> usize {
        let keys: Vec<[u8; 16]> = self.nodes.keys().map(|k| k.to_be_bytes()).collect();
        if keys.is_empty() {
            return 1;
        }
        fn count(keys: &[[u8; 16]], depth: usize) -> usize {
            if depth == 16 {
                return 1;
            }
            let (first, last) = (&keys[0], &keys[keys.len() - 1]);
            if first[depth] == last[depth] {
                // One child: a compressed run up to where the keys part (or end).
                let common = (depth..16).take_while(|&i| first[i] == last[i]).count();
                return 1 + count(keys, depth + common);
            }
            let mut total = 1;
            let mut lo = 0;
            while lo < keys.len() {
                let b = keys[lo][depth];
                let hi = lo + keys[lo..].iter().take_while(|k| k[depth] == b).count();
                total += count(&keys[lo..hi], depth + 1);
                lo = hi;
            }
            total
        }
        count(&keys, 0)
    }

    /// Bytes the stream holds in its own allocations: exact for the entries, estimated for
    /// the consumer groups; O(number of groups).
    pub fn mem_size(&self) -> usize {
        let groups: usize = self
            .groups
            .iter()
            .map(|(name, g)| name.len() + g.mem_size())
            .sum();
        self.node_bytes + groups
    }

    /// Node boundaries and Redis listpack sizes, for tests.
    #[cfg(test)]
    fn shape(&self) -> Vec<(StreamId, u32, u32, usize)> {
        self.nodes
            .iter()
            .map(|(k, n)| (*k, n.live, n.deleted, n.lp_bytes()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    fn all(s: &Stream) -> Vec<OwnedEntry> {
        s.entries(StreamId::MIN, StreamId::MAX)
    }

    #[test]
    fn appends_read_back_with_same_and_other_fields() {
        let mut s = Stream::new();
        let limits = NodeLimits::default();
        s.append(id(5, 0), &[b"a", b"1", b"b", b"2"], limits);
        s.append(id(5, 1), &[b"a", b"3", b"b", b"4"], limits);
        s.append(id(7, 0), &[b"x", b"y"], limits);
        s.append(id(u64::MAX, 3), &[], limits);
        let got = all(&s);
        assert_eq!(got.len(), 4);
        assert_eq!(got[1].0, id(5, 1));
        assert_eq!(
            got[1].1,
            vec![
                (b"a".to_vec(), b"3".to_vec()),
                (b"b".to_vec(), b"4".to_vec())
            ]
        );
        assert_eq!(got[2].1, vec![(b"x".to_vec(), b"y".to_vec())]);
        assert!(got[3].1.is_empty());
        assert_eq!(
            (s.len(), s.first_id, s.last_id),
            (4, id(5, 0), id(u64::MAX, 3))
        );
        let mut rev = Vec::new();
        s.range(id(5, 1), id(7, 0), true, |id, _| {
            rev.push(id);
            true
        });
        assert_eq!(rev, vec![id(7, 0), id(5, 1)]);
    }

    #[test]
    fn nodes_split_where_redis_listpacks_do() {
        // Redis 7.0: 100 one-field entries of "f"=<small int> per node; the listpack of a
        // full node is 7 + master (2+2+2+2+2) + first entry ... what lpBytes reports.
        let mut s = Stream::new();
        for i in 0..250u64 {
            s.append(
                id(1, i),
                &[b"f", i.to_string().as_bytes()],
                NodeLimits::default(),
            );
        }
        let shape = s.shape();
        assert_eq!(shape.len(), 3);
        assert_eq!(shape[0].1, 100);
        assert_eq!(shape[2], (id(1, 200), 50, 0, shape[2].3));
        // A byte limit splits earlier: every entry is over 100 bytes of text.
        let mut s = Stream::new();
        let big = vec![b'v'; 120];
        let limits = NodeLimits {
            max_bytes: 1000,
            max_entries: 0,
        };
        for i in 0..20u64 {
            s.append(id(1, i), &[b"f", &big], limits);
        }
        assert!(s.shape().iter().all(|n| n.3 < 1000 + 200));
        assert!(s.node_count() > 2);
    }

    #[test]
    fn deletes_flag_entries_and_drop_empty_nodes() {
        let mut s = Stream::new();
        let limits = NodeLimits {
            max_bytes: 4096,
            max_entries: 2,
        };
        for i in 1..=5u64 {
            s.append(id(i, 0), &[b"f", b"v"], limits);
        }
        assert!(s.delete(id(2, 0)));
        assert!(!s.delete(id(2, 0)), "already deleted");
        assert!(!s.delete(id(9, 0)));
        assert_eq!(s.node_count(), 3);
        assert!(s.delete(id(1, 0)));
        assert_eq!(s.node_count(), 2, "the first node had no live entry left");
        s.refresh_first_id();
        assert_eq!(s.first_id, id(3, 0));
        assert_eq!(
            all(&s).iter().map(|e| e.0).collect::<Vec<_>>(),
            vec![id(3, 0), id(4, 0), id(5, 0)]
        );
        assert_eq!(s.get(id(4, 0)), Some(vec![(b"f".to_vec(), b"v".to_vec())]));
        assert_eq!(s.get(id(2, 0)), None);
    }

    #[test]
    fn trims_whole_nodes_when_approximate() {
        let limits = NodeLimits {
            max_bytes: 4096,
            max_entries: 10,
        };
        let fresh = || {
            let mut s = Stream::new();
            for i in 0..35u64 {
                s.append(id(1, i), &[b"f", b"v"], limits);
            }
            s
        };
        let mut s = fresh();
        let t = |strategy, approx| Trim {
            strategy,
            approx,
            limit: 0,
        };
        assert_eq!(s.trim(t(TrimTo::MaxLen(12), true)), 20);
        assert_eq!(s.len(), 15);
        let mut s = fresh();
        assert_eq!(s.trim(t(TrimTo::MaxLen(12), false)), 23);
        assert_eq!(s.first_id, id(1, 23));
        let mut s = fresh();
        assert_eq!(s.trim(t(TrimTo::MinId(id(1, 15)), false)), 15);
        assert_eq!(s.edge_id(false), Some(id(1, 15)));
        let mut s = fresh();
        let limited = Trim {
            strategy: TrimTo::MaxLen(0),
            approx: true,
            limit: 15,
        };
        assert_eq!(
            s.trim(limited),
            10,
            "a node that would pass the limit stays"
        );
    }

    #[test]
    fn node_bytes_follow_every_change() {
        let recount = |s: &Stream| -> usize {
            s.nodes
                .values()
                .map(|n| NODE_OVERHEAD + n.data.capacity())
                .sum()
        };
        let limits = NodeLimits {
            max_bytes: 300,
            max_entries: 7,
        };
        let mut s = Stream::new();
        for i in 0..200u64 {
            let v = "x".repeat((i % 40) as usize);
            s.append(id(i + 1, 0), &[b"f", v.as_bytes()], limits);
            assert_eq!(s.node_bytes, recount(&s));
        }
        for i in (1..200u64).step_by(3) {
            s.delete(id(i, 0));
            assert_eq!(s.node_bytes, recount(&s));
        }
        let t = Trim {
            strategy: TrimTo::MaxLen(20),
            approx: false,
            limit: 0,
        };
        s.trim(t);
        assert_eq!(s.node_bytes, recount(&s));
        assert_eq!(s.mem_size(), recount(&s), "no groups");
    }

    #[test]
    fn radix_tree_node_counts() {
        let mut s = Stream::new();
        assert_eq!(s.rax_node_count(), 1);
        s.append(id(1, 0), &[b"f", b"v"], NodeLimits::default());
        assert_eq!(s.rax_node_count(), 2, "root and the key's leaf");
        let limits = NodeLimits {
            max_bytes: 4096,
            max_entries: 1,
        };
        s.append(id(2, 0), &[b"f", b"v"], limits);
        // The root's run to byte 7, the branching there, and for each key a run over its
        // last 8 bytes to its leaf.
        assert_eq!(s.rax_node_count(), 6);
    }
}
