//! The RDB encoding of Redis's STREAM type (rdb.c and t_stream.c of Redis 7.0.15): a codec
//! between the bytes that follow a stream's type byte and a [`StreamRecord`], a plain
//! description of a stream's content (live entries, metadata, consumer groups). It owns the
//! node layout and the node split; it knows nothing of how Damselfly holds a stream in memory.
//!
//! The payload is: the number of nodes; per node its master id (the 128-bit big-endian id of
//! the first entry ever appended to it, as a 16-byte string: the radix-tree key) and its
//! listpack (a string, LZF-compressed when `rdbcompression` is on and it pays); the stream's
//! length and last id; from type 19 its first id, greatest deleted id and entries-added
//! counter; then the consumer groups, each with its name, last delivered id, entries-read
//! counter (type 19 on), global PEL (raw 16-byte ids, 8-byte little-endian delivery times,
//! delivery counts) and consumers (name, seen time, an active time from type 21 on, and the
//! raw ids of the PEL entries they own).
//!
//! A node's listpack holds the master entry `count deleted nfields field.. 0`, then per entry
//! `flags ms-delta seq-delta [nfields field..] value.. lp-count`: the field names and their
//! count are left out (flag SAMEFIELDS) when they are exactly the master fields, and
//! `lp-count` (the number of elements of the entry) lets Redis walk the node backwards.
//! Deleted entries stay in their node, flagged, until the node empties.

use std::io::{self, Read};
use std::ops::Range;

use damselfly_protocol::number::{parse_i64, push_i64};

use super::read::Input;
use super::write::{put_len, Encoder, Sink};
use super::{types, WriteOptions};
use crate::encoding::{listpack, Item};
use crate::error::Error;

/// RDB type of streams written by Redis 5 and 6 (no first id, greatest deleted id,
/// entries-added or entries-read: the reader derives them as Redis's loader does).
pub const RDB_TYPE_STREAM_LISTPACKS: u8 = types::STREAM_LISTPACKS;
/// RDB type of streams written by Redis 7.0 (and by [`write_stream`]).
pub const RDB_TYPE_STREAM_LISTPACKS_2: u8 = types::STREAM_LISTPACKS_2;
/// RDB type of streams written by Redis 7.2: type 19 plus each consumer's active time.
pub const RDB_TYPE_STREAM_LISTPACKS_3: u8 = types::STREAM_LISTPACKS_3;

/// `stream-node-max-bytes` default.
pub const DEFAULT_NODE_MAX_BYTES: usize = 4096;
/// `stream-node-max-entries` default.
pub const DEFAULT_NODE_MAX_ENTRIES: usize = 100;

/// `STREAM_LISTPACK_MAX_SIZE`: a node limit of 0 (none), or above this, means this.
const LISTPACK_MAX_SIZE: usize = 1 << 30;
/// Entry flags (`STREAM_ITEM_FLAG_*`).
const FLAG_DELETED: i64 = 1;
const FLAG_SAMEFIELDS: i64 = 2;
/// An empty listpack: header and terminator.
const EMPTY_LISTPACK: usize = 7;

pub use damselfly_storage::StreamId;

/// An entry: its id and its field/value pairs in order.
pub use damselfly_storage::stream::OwnedEntry as StreamEntry;

/// A stream's content as the RDB holds it, less the node structure (which the writer derives
/// from the entries as appending them would).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StreamRecord {
    /// The live entries, ids strictly ascending.
    pub entries: Vec<StreamEntry>,
    /// Number of live entries: `entries.len()` (the reader refuses a payload saying otherwise;
    /// the writer writes `entries.len()`).
    pub length: u64,
    /// `last-generated-id`.
    pub last_id: StreamId,
    /// `recorded-first-entry-id`: 0-0 when empty in what Redis 7 writes; see [`read_stream`]
    /// for type 15.
    pub first_id: StreamId,
    /// `max-deleted-entry-id`.
    pub max_deleted_id: StreamId,
    /// `entries-added`: every entry ever appended.
    pub entries_added: u64,
    /// Consumer groups. Written in name order (the order of Redis's radix tree), whatever
    /// their order here; read back in name order.
    pub groups: Vec<GroupRecord>,
}

/// A consumer group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct GroupRecord {
    pub name: Vec<u8>,
    /// `last-delivered-id`.
    pub last_id: StreamId,
    /// `entries-read`; -1 when unknown (`SCG_INVALID_ENTRIES_READ`).
    pub entries_read: i64,
    /// The group's PEL, ids ascending (the writer sorts; the reader returns them sorted).
    pub pending: Vec<PendingRecord>,
    /// Consumers, in name order when read (the writer sorts them).
    pub consumers: Vec<ConsumerRecord>,
}

/// An entry of a group's PEL: delivered to a consumer, not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PendingRecord {
    pub id: StreamId,
    /// Unix milliseconds of the last delivery (Redis's signed `mstime_t`, bit for bit).
    pub delivery_time_ms: u64,
    pub delivery_count: u64,
}

/// A consumer of a group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ConsumerRecord {
    pub name: Vec<u8>,
    /// `seen-time` in Unix milliseconds (signed in Redis, bit for bit here). Type 21's
    /// separate active time is read and dropped: Redis 7.0 has no such field.
    pub seen_time_ms: u64,
    /// The ids of the PEL entries this consumer owns, ascending; each is in the group's PEL
    /// and owned by no other consumer.
    pub pending: Vec<StreamId>,
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// Writes the payload that follows the type byte [`RDB_TYPE_STREAM_LISTPACKS_2`], exactly as
/// redis-server 7.0 would for a stream built by appending `s.entries` in order under
/// `stream-node-max-bytes` = `node_max_bytes` and `stream-node-max-entries` =
/// `node_max_entries` (0: no limit), with `rdbcompression` = `opts.compression` (listpacks
/// and names are saved with `rdbSaveRawString`, which compresses; hence the options).
/// `s.entries` must be strictly ascending.
pub fn write_stream(
    out: &mut Vec<u8>,
    s: &StreamRecord,
    node_max_bytes: usize,
    node_max_entries: usize,
    opts: &WriteOptions,
) {
    let mut enc = Encoder::new(opts);
    // A Vec sink cannot fail.
    let _ = encode_stream(out, &mut enc, s, node_max_bytes, node_max_entries);
}

/// [`write_stream`] for the RDB writer and DUMP: into any sink, with the writer's encoder,
/// giving the sink a chance to drain between nodes.
pub(crate) fn encode_stream<S: Sink>(
    sink: &mut S,
    enc: &mut Encoder,
    s: &StreamRecord,
    node_max_bytes: usize,
    node_max_entries: usize,
) -> io::Result<()> {
    debug_assert!(
        s.entries.windows(2).all(|w| w[0].0 < w[1].0),
        "stream entries must be strictly ascending"
    );
    debug_assert_eq!(s.length, s.entries.len() as u64);
    let nodes = plan_nodes(&s.entries, node_max_bytes, node_max_entries);
    put_len(sink.buf(), nodes.len() as u64);
    for (range, predicted) in nodes {
        let node = &s.entries[range];
        let lp = build_node(node);
        debug_assert_eq!(lp.len(), predicted, "node size accounting");
        enc.string(sink.buf(), &node[0].0.to_be_bytes());
        enc.string(sink.buf(), &lp);
        sink.breathe()?;
    }

    let out = sink.buf();
    put_len(out, s.entries.len() as u64);
    put_id(out, s.last_id);
    put_id(out, s.first_id);
    put_id(out, s.max_deleted_id);
    put_len(out, s.entries_added);

    // Groups, consumers and PELs in the order Redis's radix trees iterate them.
    let mut groups: Vec<&GroupRecord> = s.groups.iter().collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    put_len(sink.buf(), groups.len() as u64);
    for g in groups {
        let out = sink.buf();
        enc.string(out, &g.name);
        put_id(out, g.last_id);
        // rdbSaveLen of a long long: -1 becomes 2^64-1, which the loader casts back.
        put_len(out, g.entries_read as u64);
        let mut pel: Vec<&PendingRecord> = g.pending.iter().collect();
        pel.sort_by_key(|p| p.id);
        put_len(out, pel.len() as u64);
        for p in pel {
            out.extend_from_slice(&p.id.to_be_bytes());
            out.extend_from_slice(&p.delivery_time_ms.to_le_bytes());
            put_len(out, p.delivery_count);
        }
        let mut consumers: Vec<&ConsumerRecord> = g.consumers.iter().collect();
        consumers.sort_by(|a, b| a.name.cmp(&b.name));
        put_len(out, consumers.len() as u64);
        for c in consumers {
            let out = sink.buf();
            enc.string(out, &c.name);
            out.extend_from_slice(&c.seen_time_ms.to_le_bytes());
            let mut ids = c.pending.clone();
            ids.sort_unstable();
            put_len(out, ids.len() as u64);
            for id in ids {
                out.extend_from_slice(&id.to_be_bytes());
            }
            sink.breathe()?;
        }
    }
    Ok(())
}

fn put_id(out: &mut Vec<u8>, id: StreamId) {
    put_len(out, id.ms);
    put_len(out, id.seq);
}

/// Whether an entry's fields are exactly the master fields (the SAMEFIELDS test of
/// `streamAppendItem`, which compares texts, so "7" matches a master field stored as 7).
fn same_fields(master: &[(Vec<u8>, Vec<u8>)], pairs: &[(Vec<u8>, Vec<u8>)]) -> bool {
    master.len() == pairs.len() && master.iter().zip(pairs).all(|(m, p)| m.0 == p.0)
}

/// Listpack sizes of integers, through a reused scratch buffer.
struct Sizer(Vec<u8>);

impl Sizer {
    fn int(&mut self, v: i64) -> usize {
        self.0.clear();
        push_i64(&mut self.0, v);
        listpack::entry_size(&self.0)
    }

    /// The listpack bytes one entry adds to a node whose master id and fields are given.
    fn entry(
        &mut self,
        master_id: StreamId,
        master: &[(Vec<u8>, Vec<u8>)],
        (id, pairs): &StreamEntry,
    ) -> usize {
        let same = same_fields(master, pairs);
        let (ms, seq) = deltas(master_id, *id);
        let mut n = self.int(if same { FLAG_SAMEFIELDS } else { 0 }) + self.int(ms) + self.int(seq);
        if !same {
            n += self.int(pairs.len() as i64);
            n += pairs
                .iter()
                .map(|(f, _)| listpack::entry_size(f))
                .sum::<usize>();
        }
        n += pairs
            .iter()
            .map(|(_, v)| listpack::entry_size(v))
            .sum::<usize>();
        n + self.int(lp_count(pairs.len(), same))
    }
}

/// An entry's id as stored: differences from the master id, two's complement (Redis
/// subtracts unsigned and stores the result as a signed integer: the seq delta is negative
/// when a later ms restarts the sequence below the master's, and an ms delta past 2^63 is
/// negative too).
fn deltas(master: StreamId, id: StreamId) -> (i64, i64) {
    (
        id.ms.wrapping_sub(master.ms) as i64,
        id.seq.wrapping_sub(master.seq) as i64,
    )
}

/// The lp-count trailer: flags, two deltas, the values, and unless SAMEFIELDS the field
/// count and the fields.
fn lp_count(fields: usize, same: bool) -> i64 {
    let n = fields as i64 + 3;
    if same {
        n
    } else {
        n + fields as i64 + 1
    }
}

/// Where `streamAppendItem` would put node boundaries for these entries appended in order:
/// it opens a new node when the tail node's listpack bytes plus the new entry's field and
/// value lengths reach `node_max_bytes` (0 or above 1 GB: 1 GB), or when the tail node already
/// holds `node_max_entries` entries (0: no limit). Each node comes with its listpack's size.
fn plan_nodes(
    entries: &[StreamEntry],
    max_bytes: usize,
    max_entries: usize,
) -> Vec<(Range<usize>, usize)> {
    let max_bytes = if max_bytes == 0 || max_bytes > LISTPACK_MAX_SIZE {
        LISTPACK_MAX_SIZE
    } else {
        max_bytes
    };
    let mut sz = Sizer(Vec::with_capacity(20));
    let mut nodes = Vec::new();
    // The open node: first entry index, listpack bytes without the count (the only element
    // that changes, and that may change size, as entries come), entries.
    let (mut start, mut rest, mut count) = (0usize, 0usize, 0usize);
    for (i, entry) in entries.iter().enumerate() {
        let pairs = &entry.1;
        let totelelen: usize = pairs.iter().map(|(f, v)| f.len() + v.len()).sum();
        let full = count > 0
            && (rest + sz.int(count as i64) + totelelen >= max_bytes
                || (max_entries != 0 && count >= max_entries));
        if count == 0 || full {
            if count > 0 {
                nodes.push((start..i, rest + sz.int(count as i64)));
            }
            start = i;
            count = 0;
            rest = EMPTY_LISTPACK
                + sz.int(0)
                + sz.int(pairs.len() as i64)
                + pairs
                    .iter()
                    .map(|(f, _)| listpack::entry_size(f))
                    .sum::<usize>()
                + sz.int(0);
        }
        let (master_id, master) = &entries[start];
        rest += sz.entry(*master_id, master, entry);
        count += 1;
    }
    if count > 0 {
        nodes.push((start..entries.len(), rest + sz.int(count as i64)));
    }
    nodes
}

/// A node's listpack, as the appends of its entries leave it (no deletions: `deleted` 0).
fn build_node(node: &[StreamEntry]) -> Vec<u8> {
    let (master_id, master) = &node[0];
    let mut lp = listpack::Builder::new();
    lp.push_int(node.len() as i64);
    lp.push_int(0);
    lp.push_int(master.len() as i64);
    for (f, _) in master {
        lp.push(f);
    }
    lp.push_int(0);
    for (id, pairs) in node {
        let same = same_fields(master, pairs);
        let (ms, seq) = deltas(*master_id, *id);
        lp.push_int(if same { FLAG_SAMEFIELDS } else { 0 });
        lp.push_int(ms);
        lp.push_int(seq);
        if !same {
            lp.push_int(pairs.len() as i64);
        }
        for (f, v) in pairs {
            if !same {
                lp.push(f);
            }
            lp.push(v);
        }
        lp.push_int(lp_count(pairs.len(), same));
    }
    lp.finish()
}

// ---------------------------------------------------------------------------------------------
// Reading
// ---------------------------------------------------------------------------------------------

/// [`read_stream`] over a byte slice (a DUMP payload after its type byte, say); bytes after
/// the stream are ignored, as RESTORE ignores them.
pub fn decode_stream(data: &[u8], type_byte: u8) -> Result<StreamRecord, Error> {
    read_stream(&mut Input::new(data), type_byte)
}

/// Reads the payload of a stream of RDB type `type_byte` (15, 19 or 21).
///
/// Checked beyond what the format needs: node keys are 16 bytes, strictly ascending (Redis
/// only writes them so; its loader refuses repeats); every listpack is valid, non-empty and
/// laid out as `streamValidateListpackIntegrity` (deep) demands; entry ids are strictly
/// ascending and not below their node's master id; the stated length is the number of live
/// entries; group names, consumer names and PEL ids are not repeated; every id in a
/// consumer's PEL is in the group's PEL, owned by no other consumer, and every group PEL
/// entry has an owner. Any breach, or input ending early, is an error, never a panic; no
/// buffer is sized from a stated count.
///
/// The master fields are copied into every entry that shares them (SAMEFIELDS), which Redis
/// keeps shared: a node of n bytes holding one long master field and many tiny entries would
/// decode to about n²/40 bytes. Those copies are capped at [`SHARED_FIELDS_RATIO`] times the
/// node's size (plus 1 MB); a node asking for more is refused as corrupt.
///
/// Type 15 (Redis 5 and 6) lacks some metadata; it is derived as Redis 7.0's loader does:
/// `entries_added` = length, `max_deleted_id` = 0-0, `first_id` = the first live entry or,
/// for an empty stream, `StreamId::MAX` (what `streamGetEdgeID` yields), and each group's
/// `entries_read` from `streamEstimateDistanceFromFirstEverEntry`.
pub(crate) fn read_stream<R: Read>(input: &mut Input<R>, ty: u8) -> Result<StreamRecord, Error> {
    if !matches!(
        ty,
        RDB_TYPE_STREAM_LISTPACKS | RDB_TYPE_STREAM_LISTPACKS_2 | RDB_TYPE_STREAM_LISTPACKS_3
    ) {
        return Err(Error::corrupt(
            input.pos(),
            format!("type {ty} is not a stream encoding"),
        ));
    }
    let mut entries = Vec::new();
    let nodes = input.len()?;
    let mut prev_master: Option<StreamId> = None;
    let mut last_entry: Option<StreamId> = None;
    for _ in 0..nodes {
        let at = input.pos();
        let key = input.string()?;
        let key: [u8; 16] = key.as_slice().try_into().map_err(|_| {
            Error::corrupt(
                at,
                format!("stream node key of {} bytes, not a stream id", key.len()),
            )
        })?;
        let master = StreamId::from_be_bytes(key);
        if prev_master.is_some_and(|p| p >= master) {
            return Err(Error::corrupt(
                at,
                format!("stream node {master} repeated or out of order"),
            ));
        }
        prev_master = Some(master);
        let at = input.pos();
        let lp = input.string()?;
        let items = listpack::decode(&lp)
            .map_err(|c| Error::corrupt(at, format!("stream node {master}: {c}")))?;
        read_node(&items, lp.len(), master, &mut last_entry, &mut entries)
            .map_err(|m| Error::corrupt(at, format!("stream node {master}: {m}")))?;
    }

    let at = input.pos();
    let length = input.len()?;
    if length != entries.len() as u64 {
        return Err(Error::corrupt(
            at,
            format!(
                "stream length {length}, but its nodes hold {} live entries",
                entries.len()
            ),
        ));
    }
    let last_id = read_id(input)?;
    let (first_id, max_deleted_id, entries_added) = if ty == RDB_TYPE_STREAM_LISTPACKS {
        let first = entries.first().map_or(StreamId::MAX, |e| e.0);
        (first, StreamId::default(), length)
    } else {
        (read_id(input)?, read_id(input)?, input.len()?)
    };
    let mut s = StreamRecord {
        entries,
        length,
        last_id,
        first_id,
        max_deleted_id,
        entries_added,
        groups: Vec::new(),
    };

    let ngroups = input.len()?;
    for _ in 0..ngroups {
        let group = read_group(input, ty, &s)?;
        s.groups.push(group);
    }
    s.groups.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(w) = s.groups.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::corrupt(
            input.pos(),
            format!(
                "duplicate consumer group '{}'",
                String::from_utf8_lossy(&w[0].name)
            ),
        ));
    }
    Ok(s)
}

fn read_id<R: Read>(input: &mut Input<R>) -> Result<StreamId, Error> {
    Ok(StreamId::new(input.len()?, input.len()?))
}

fn read_raw_id<R: Read>(input: &mut Input<R>) -> Result<StreamId, Error> {
    Ok(StreamId::from_be_bytes(input.array()?))
}

fn read_group<R: Read>(
    input: &mut Input<R>,
    ty: u8,
    s: &StreamRecord,
) -> Result<GroupRecord, Error> {
    let name = input.string()?;
    let last_id = read_id(input)?;
    let entries_read = if ty == RDB_TYPE_STREAM_LISTPACKS {
        estimate_entries_read(s, last_id)
    } else {
        input.len()? as i64
    };
    let named = |what: &str| {
        format!(
            "consumer group '{}': {what}",
            String::from_utf8_lossy(&name)
        )
    };

    let npel = input.len()?;
    let mut pending = Vec::new();
    for _ in 0..npel {
        let id = read_raw_id(input)?;
        let delivery_time_ms = u64::from_le_bytes(input.array()?);
        let delivery_count = input.len()?;
        pending.push(PendingRecord {
            id,
            delivery_time_ms,
            delivery_count,
        });
    }
    pending.sort_by_key(|p| p.id);
    if let Some(w) = pending.windows(2).find(|w| w[0].id == w[1].id) {
        return Err(Error::corrupt(
            input.pos(),
            named(&format!("PEL entry {} repeated", w[0].id)),
        ));
    }
    // Which group PEL entries a consumer has claimed.
    let mut owned = vec![false; pending.len()];

    let nconsumers = input.len()?;
    let mut consumers = Vec::new();
    for _ in 0..nconsumers {
        let cname = input.string()?;
        let seen_time_ms = u64::from_le_bytes(input.array()?);
        if ty == RDB_TYPE_STREAM_LISTPACKS_3 {
            let _active_time: [u8; 8] = input.array()?;
        }
        let n = input.len()?;
        let mut ids = Vec::new();
        for _ in 0..n {
            let at = input.pos();
            let id = read_raw_id(input)?;
            let i = pending.binary_search_by_key(&id, |p| p.id).map_err(|_| {
                Error::corrupt(
                    at,
                    named(&format!("consumer entry {id} not found in the group PEL")),
                )
            })?;
            if std::mem::replace(&mut owned[i], true) {
                return Err(Error::corrupt(
                    at,
                    named(&format!("PEL entry {id} owned twice")),
                ));
            }
            ids.push(id);
        }
        ids.sort_unstable();
        consumers.push(ConsumerRecord {
            name: cname,
            seen_time_ms,
            pending: ids,
        });
    }
    consumers.sort_by(|a: &ConsumerRecord, b| a.name.cmp(&b.name));
    if let Some(w) = consumers.windows(2).find(|w| w[0].name == w[1].name) {
        return Err(Error::corrupt(
            input.pos(),
            named(&format!(
                "duplicate consumer '{}'",
                String::from_utf8_lossy(&w[0].name)
            )),
        ));
    }
    if let Some(i) = owned.iter().position(|&o| !o) {
        return Err(Error::corrupt(
            input.pos(),
            named(&format!("PEL entry {} without consumer", pending[i].id)),
        ));
    }
    Ok(GroupRecord {
        name,
        last_id,
        entries_read,
        pending,
        consumers,
    })
}

/// `streamEstimateDistanceFromFirstEverEntry`: a group's entries-read counter when the RDB
/// (type 15) does not have it; -1 when it cannot be known.
fn estimate_entries_read(s: &StreamRecord, id: StreamId) -> i64 {
    if s.entries_added == 0 {
        return 0;
    }
    if s.length == 0 && id <= s.last_id {
        return s.entries_added as i64;
    }
    if id == s.last_id {
        return s.entries_added as i64;
    }
    if id > s.last_id {
        return -1;
    }
    if s.max_deleted_id.is_zero() || s.max_deleted_id < s.first_id {
        let base = s.entries_added.wrapping_sub(s.length) as i64;
        if id < s.first_id {
            return base;
        }
        if id == s.first_id {
            return base.wrapping_add(1);
        }
    }
    -1
}

/// Walks a decoded node listpack.
struct Cursor<'a> {
    items: &'a [Item<'a>],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn next(&mut self, what: &str) -> Result<Item<'a>, String> {
        let item = self
            .items
            .get(self.pos)
            .ok_or_else(|| format!("listpack ends where the {what} belongs"))?;
        self.pos += 1;
        Ok(*item)
    }

    /// An integer element (`lpGetIntegerIfValid`: a string holding a canonical integer
    /// counts).
    fn int(&mut self, what: &str) -> Result<i64, String> {
        match self.next(what)? {
            Item::Int(i) => Ok(i),
            Item::Bytes(b) => parse_i64(b).ok_or_else(|| format!("the {what} is not an integer")),
        }
    }

    fn count(&mut self, what: &str) -> Result<u64, String> {
        let v = self.int(what)?;
        u64::try_from(v).map_err(|_| format!("negative {what} {v}"))
    }

    /// The next `n` elements as texts; `n` is checked against what is left before anything
    /// is allocated.
    fn texts(&mut self, n: u64, what: &str) -> Result<Vec<Vec<u8>>, String> {
        let left = (self.items.len() - self.pos) as u64;
        if n > left {
            return Err(format!("{n} {what} stated, {left} elements left"));
        }
        let n = n as usize;
        let out = self.items[self.pos..self.pos + n]
            .iter()
            .map(|i| i.to_vec())
            .collect();
        self.pos += n;
        Ok(out)
    }
}

/// How many times its own size a node's entries may copy of its master fields. Real streams
/// stay far below (ten fields of 20 bytes with one-byte values copy about 9 times the node);
/// a crafted payload cannot make a RESTORE allocate without bound.
pub const SHARED_FIELDS_RATIO: usize = 256;

/// One node: appends its live entries to `out`, checking its layout.
fn read_node(
    items: &[Item<'_>],
    node_bytes: usize,
    master: StreamId,
    last: &mut Option<StreamId>,
    out: &mut Vec<StreamEntry>,
) -> Result<(), String> {
    let budget = node_bytes
        .saturating_mul(SHARED_FIELDS_RATIO)
        .saturating_add(1 << 20);
    let mut copied = 0usize;
    if items.is_empty() {
        return Err("empty listpack".into());
    }
    let mut c = Cursor { items, pos: 0 };
    let live = c.count("entry count")?;
    let deleted = c.count("deleted count")?;
    let nfields = c.count("master field count")?;
    let master_fields = c.texts(nfields, "master fields")?;
    if c.int("master terminator")? != 0 {
        return Err("master entry not terminated by 0".into());
    }
    let total = live.checked_add(deleted).ok_or("entry counts overflow")?;
    // Each entry takes at least 4 elements, so a huge stated count fails when they run out.
    for _ in 0..total {
        let flags = c.int("entry flags")?;
        let ms = c.int("ms delta")?;
        let seq = c.int("seq delta")?;
        let id = StreamId::new(
            master.ms.wrapping_add(ms as u64),
            master.seq.wrapping_add(seq as u64),
        );
        if id < master {
            return Err(format!("entry {id} below the node's master id"));
        }
        if last.is_some_and(|l| l >= id) {
            return Err(format!("entry {id} repeated or out of order"));
        }
        *last = Some(id);
        let same = flags & FLAG_SAMEFIELDS != 0;
        let pairs: Vec<(Vec<u8>, Vec<u8>)> = if same {
            copied = copied.saturating_add(master_fields.iter().map(Vec::len).sum::<usize>());
            if copied > budget {
                return Err(
                    "entries copy more of the master fields than the node could mean".into(),
                );
            }
            let values = c.texts(nfields, "values")?;
            master_fields.iter().cloned().zip(values).collect()
        } else {
            let n = c.count("field count")?;
            // Fields and values alternate: 2n elements.
            let flat = c.texts(n.saturating_mul(2), "fields and values")?;
            let mut it = flat.into_iter();
            let mut pairs = Vec::with_capacity(n as usize);
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                pairs.push((f, v));
            }
            pairs
        };
        let stated = c.int("lp-count")?;
        if stated != lp_count(pairs.len(), same) {
            return Err(format!("entry {id}: lp-count {stated} does not match"));
        }
        if flags & FLAG_DELETED == 0 {
            out.push((id, pairs));
        }
    }
    if c.pos != items.len() {
        return Err(format!(
            "{} elements after the last entry",
            items.len() - c.pos
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::{verify, with_footer};
    use proptest::prelude::*;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    fn id(ms: u64, seq: u64) -> StreamId {
        StreamId::new(ms, seq)
    }

    fn pairs(p: &[(&str, &str)]) -> Vec<(Vec<u8>, Vec<u8>)> {
        p.iter()
            .map(|(f, v)| (f.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect()
    }

    /// A record holding `entries`, with metadata as appending them would leave it.
    fn record(entries: Vec<StreamEntry>, groups: Vec<GroupRecord>) -> StreamRecord {
        StreamRecord {
            length: entries.len() as u64,
            last_id: entries.last().map_or(StreamId::default(), |e| e.0),
            first_id: entries.first().map_or(StreamId::default(), |e| e.0),
            max_deleted_id: StreamId::default(),
            entries_added: entries.len() as u64,
            entries,
            groups,
        }
    }

    fn opts(compression: bool) -> WriteOptions {
        WriteOptions {
            compression,
            ..WriteOptions::default()
        }
    }

    fn encode(
        s: &StreamRecord,
        max_bytes: usize,
        max_entries: usize,
        compression: bool,
    ) -> Vec<u8> {
        let mut out = Vec::new();
        write_stream(&mut out, s, max_bytes, max_entries, &opts(compression));
        out
    }

    /// Decodes and checks that the whole input was consumed.
    fn decode_all(data: &[u8], ty: u8) -> Result<StreamRecord, Error> {
        let mut input = Input::new(data);
        let s = read_stream(&mut input, ty)?;
        assert_eq!(input.pos(), data.len() as u64, "trailing bytes");
        Ok(s)
    }

    /// The nodes of a payload: master ids and listpacks.
    fn nodes_of(data: &[u8]) -> Vec<(StreamId, Vec<u8>)> {
        let mut input = Input::new(data);
        let n = input.len().unwrap();
        (0..n)
            .map(|_| {
                let key: [u8; 16] = input.string().unwrap().try_into().unwrap();
                (StreamId::from_be_bytes(key), input.string().unwrap())
            })
            .collect()
    }

    fn groups_example() -> Vec<GroupRecord> {
        vec![
            GroupRecord {
                name: b"workers".to_vec(),
                last_id: id(5, 1),
                entries_read: 4,
                pending: vec![
                    PendingRecord {
                        id: id(1, 0),
                        delivery_time_ms: 1_700_000_000_123,
                        delivery_count: 1,
                    },
                    PendingRecord {
                        id: id(2, 7),
                        delivery_time_ms: 1_700_000_000_456,
                        delivery_count: 3,
                    },
                    PendingRecord {
                        id: id(5, 1),
                        delivery_time_ms: u64::MAX, // -1 as Redis's signed time
                        delivery_count: 1 << 40,
                    },
                ],
                consumers: vec![
                    ConsumerRecord {
                        name: b"alice".to_vec(),
                        seen_time_ms: 1_700_000_000_999,
                        pending: vec![id(1, 0), id(5, 1)],
                    },
                    ConsumerRecord {
                        name: b"bob".to_vec(),
                        seen_time_ms: 17,
                        pending: vec![id(2, 7)],
                    },
                    ConsumerRecord {
                        name: b"idle".to_vec(),
                        seen_time_ms: 0,
                        pending: vec![],
                    },
                ],
            },
            GroupRecord {
                name: b"x-unknown-read".to_vec(),
                last_id: id(3, 0),
                entries_read: -1,
                pending: vec![],
                consumers: vec![],
            },
            GroupRecord {
                name: b"y-12345".to_vec(), // sorted after "x-"; names are bytes
                last_id: StreamId::default(),
                entries_read: 0,
                pending: vec![],
                consumers: vec![],
            },
        ]
    }

    fn mixed_entries() -> Vec<StreamEntry> {
        let long = "L".repeat(300);
        vec![
            (id(1, 0), pairs(&[("temp", "21"), ("hum", "40")])),
            (id(1, 1), pairs(&[("temp", "-3"), ("hum", "41")])),
            (id(2, 7), pairs(&[("hum", "40"), ("temp", "21")])), // same set, other order
            (id(2, 8), pairs(&[("temp", "21")])),
            (
                id(3, 0),
                pairs(&[("temp", "9223372036854775807"), ("hum", "")]),
            ),
            (id(4, 0), pairs(&[("12", "-4097"), ("13", "007")])), // integer field names
            (id(5, 1), pairs(&[("temp", &long), ("hum", "x\0y")])),
            (id(5, 2), pairs(&[("temp", "1"), ("hum", "2")])),
            (id(u64::MAX - 1, 0), pairs(&[("temp", "1"), ("hum", "2")])),
            (id(u64::MAX, u64::MAX), pairs(&[("k", "v")])),
        ]
    }

    #[test]
    fn round_trips() {
        let mut cases = vec![
            // An empty stream (XGROUP CREATE ... MKSTREAM), with groups.
            record(vec![], groups_example()),
            record(vec![], vec![]),
            record(mixed_entries(), vec![]),
            record(mixed_entries(), groups_example()),
        ];
        // An empty stream whose entries were all deleted.
        let mut gone = record(vec![], vec![]);
        gone.last_id = id(9, 9);
        gone.max_deleted_id = id(9, 9);
        gone.entries_added = 12;
        cases.push(gone);
        // First id, deleted id and counters not derivable from the entries.
        let mut odd = record(mixed_entries()[3..].to_vec(), groups_example());
        odd.first_id = id(2, 8);
        odd.max_deleted_id = id(2, 7);
        odd.entries_added = 1 << 50;
        odd.last_id = id(u64::MAX, u64::MAX);
        cases.push(odd);
        // An entry without fields (Redis's XADD cannot make one; the format can hold it).
        cases.push(record(
            vec![
                (id(1, 1), vec![]),
                (id(1, 2), vec![]),
                (id(1, 3), pairs(&[("a", "b")])),
            ],
            vec![],
        ));
        for s in &cases {
            for (max_bytes, max_entries) in [(4096, 100), (0, 0), (1, 0), (0, 3), (60, 2), (200, 0)]
            {
                for compression in [true, false] {
                    let bytes = encode(s, max_bytes, max_entries, compression);
                    let back = decode_all(&bytes, RDB_TYPE_STREAM_LISTPACKS_2).unwrap();
                    assert_eq!(&back, s, "limits {max_bytes}/{max_entries}");
                    let again = decode_stream(&bytes, RDB_TYPE_STREAM_LISTPACKS_2).unwrap();
                    assert_eq!(&again, s);
                }
            }
        }
    }

    #[test]
    fn writer_orders_groups_consumers_and_pels() {
        let mut s = record(mixed_entries(), groups_example());
        let sorted = s.clone();
        s.groups.reverse();
        for g in &mut s.groups {
            g.pending.reverse();
            g.consumers.reverse();
            for c in &mut g.consumers {
                c.pending.reverse();
            }
        }
        assert_eq!(
            encode(&s, 4096, 100, true),
            encode(&sorted, 4096, 100, true)
        );
        assert_eq!(
            decode_all(&encode(&s, 4096, 100, true), 19).unwrap(),
            sorted
        );
    }

    #[test]
    fn nodes_split_at_the_limits() {
        let entries: Vec<StreamEntry> = (0..10)
            .map(|i| (id(100 + i, 0), pairs(&[("f", "value")])))
            .collect();
        let s = record(entries, vec![]);
        let masters = |max_bytes, max_entries| -> Vec<u64> {
            nodes_of(&encode(&s, max_bytes, max_entries, false))
                .iter()
                .map(|(m, _)| m.ms)
                .collect()
        };
        assert_eq!(masters(0, 3), vec![100, 103, 106, 109]);
        assert_eq!(masters(0, 0), vec![100]);
        assert_eq!(masters(4096, 100), vec![100]);
        assert_eq!(masters(1, 0), (100..110).collect::<Vec<_>>());
        // Master entry: 6-byte header, 1 (count), 0 (deleted), 1 (fields), "f", 0 and the
        // terminator = 18 bytes; each entry adds flags, deltas, "value" and lp-count = 15.
        // Room for another entry while bytes + 6 ("f" + "value") < max.
        assert_eq!(nodes_of(&encode(&s, 4096, 1, false))[0].1.len(), 18 + 15);
        assert_eq!(masters(33 + 6, 0), (100..110).collect::<Vec<_>>());
        assert_eq!(masters(33 + 7, 0), vec![100, 102, 104, 106, 108]);
        // Every node but the last stops where the next entry would have reached the limit,
        // and took its last entry while it had not.
        for max in [40, 64, 100, 333] {
            let nodes = nodes_of(&encode(&s, max, 0, false));
            for (_, lp) in &nodes[..nodes.len() - 1] {
                assert!(lp.len() + 6 >= max, "{max}: {}", lp.len());
                assert!(
                    lp.len() == 33 || lp.len() - 15 + 6 < max,
                    "{max}: {}",
                    lp.len()
                );
            }
        }
    }

    #[test]
    fn node_layout_is_redis_layout() {
        let s = record(
            vec![
                (id(5, 3), pairs(&[("a", "1"), ("b", "x")])),
                (id(6, 0), pairs(&[("a", "2"), ("b", "y")])),
                (id(6, 1), pairs(&[("c", "3")])),
            ],
            vec![],
        );
        let nodes = nodes_of(&encode(&s, 4096, 100, false));
        assert_eq!(nodes.len(), 1);
        assert_eq!(nodes[0].0, id(5, 3));
        let items: Vec<Vec<u8>> = listpack::decode(&nodes[0].1)
            .unwrap()
            .into_iter()
            .map(Item::to_vec)
            .collect();
        let expect: Vec<&[u8]> = vec![
            b"3", b"0", b"2", b"a", b"b", b"0", // master entry
            b"2", b"0", b"0", b"1", b"x", b"5", // SAMEFIELDS, 5-3
            b"2", b"1", b"-3", b"2", b"y", b"5", // 6-0: seq delta -3
            b"0", b"1", b"-2", b"1", b"c", b"3", b"6", // own fields
        ];
        assert_eq!(items, expect);
    }

    #[test]
    fn node_counts_past_127_change_size() {
        // The master entry's count goes from a 1-byte to a 2-byte integer at 128 entries,
        // which moves where the byte limit falls; the writer's accounting (checked against
        // the built listpack in debug builds) follows it.
        let entries: Vec<StreamEntry> = (0..1000u64)
            .map(|i| {
                let v = (i as i64 - 500).pow(3).to_string();
                (id(i / 7, i % 7), pairs(&[("n", &v)]))
            })
            .collect();
        let s = record(entries, vec![]);
        for (max_bytes, max_entries) in [(0, 0), (3000, 0), (0, 128), (0, 200), (5000, 300)] {
            let bytes = encode(&s, max_bytes, max_entries, true);
            assert_eq!(decode_all(&bytes, 19).unwrap(), s);
        }
    }

    fn random_entries(rng: &mut StdRng, n: usize) -> Vec<StreamEntry> {
        let names: [&[u8]; 6] = [
            b"temp",
            b"hum",
            b"1",
            b"-20",
            b"",
            b"a much longer field name",
        ];
        let mut ms = rng.gen_range(0..1u64 << 50);
        let mut seq = 0u64;
        let mut layout: Vec<&[u8]> = vec![b"temp", b"hum"];
        (0..n)
            .map(|_| {
                if rng.gen_bool(0.6) {
                    ms += rng.gen_range(1..5000);
                    seq = rng.gen_range(0..3);
                } else {
                    seq += rng.gen_range(1..1000);
                }
                if rng.gen_bool(0.15) {
                    let k = rng.gen_range(1..5);
                    layout = (0..k)
                        .map(|_| names[rng.gen_range(0..names.len())])
                        .collect();
                }
                let pairs = layout
                    .iter()
                    .map(|f| {
                        let v = match rng.gen_range(0..6) {
                            0 => rng.gen::<i64>().to_string().into_bytes(),
                            1 => rng.gen_range(-5000i64..5000).to_string().into_bytes(),
                            2 => (0..rng.gen_range(0..40)).map(|_| rng.gen()).collect(),
                            3 => vec![b'z'; rng.gen_range(0..700)],
                            4 => b"07".to_vec(),
                            _ => b"on".to_vec(),
                        };
                        (f.to_vec(), v)
                    })
                    .collect();
                (id(ms, seq), pairs)
            })
            .collect()
    }

    /// Groups over `entries`: PELs of random entries split among consumers.
    fn random_groups(rng: &mut StdRng, entries: &[StreamEntry]) -> Vec<GroupRecord> {
        (0..rng.gen_range(0..4))
            .map(|g| {
                let mut pending = Vec::new();
                for e in entries {
                    if rng.gen_bool(0.2) {
                        pending.push(PendingRecord {
                            id: e.0,
                            delivery_time_ms: rng.gen_range(1_600_000_000_000..1_800_000_000_000),
                            delivery_count: rng.gen_range(1..20),
                        });
                    }
                }
                let n = rng.gen_range(1..4);
                let mut consumers: Vec<ConsumerRecord> = (0..n)
                    .map(|c| ConsumerRecord {
                        name: format!("consumer-{c}").into_bytes(),
                        seen_time_ms: rng.gen_range(1_600_000_000_000..1_800_000_000_000),
                        pending: vec![],
                    })
                    .collect();
                for p in &pending {
                    consumers[rng.gen_range(0..n)].pending.push(p.id);
                }
                GroupRecord {
                    name: format!("group-{g}").into_bytes(),
                    last_id: entries.last().map_or(StreamId::default(), |e| e.0),
                    entries_read: if rng.gen_bool(0.2) {
                        -1
                    } else {
                        entries.len() as i64
                    },
                    pending,
                    consumers,
                }
            })
            .collect()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn random_round_trips(seed in any::<u64>(), n in 0usize..300,
                              max_bytes in prop_oneof![Just(0usize), 1usize..5000],
                              max_entries in 0usize..150, compression in any::<bool>()) {
            let mut rng = StdRng::seed_from_u64(seed);
            let entries = random_entries(&mut rng, n);
            let groups = random_groups(&mut rng, &entries);
            let s = record(entries, groups);
            let bytes = encode(&s, max_bytes, max_entries, compression);
            prop_assert_eq!(decode_all(&bytes, 19).unwrap(), s);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Older and newer types, built by hand.
    // -----------------------------------------------------------------------------------------

    /// The node part of a payload (node count, keys and listpacks) for these entries.
    fn node_part(entries: &[StreamEntry], max_entries: usize) -> Vec<u8> {
        let mut out = Vec::new();
        let mut enc = Encoder::new(&opts(false));
        let nodes = plan_nodes(entries, 0, max_entries);
        put_len(&mut out, nodes.len() as u64);
        for (r, _) in nodes {
            enc.string(&mut out, &entries[r.start].0.to_be_bytes());
            enc.string(&mut out, &build_node(&entries[r]));
        }
        out
    }

    #[test]
    fn type_15_derives_what_it_lacks() {
        let entries = mixed_entries()[..6].to_vec();
        let mut out = node_part(&entries, 4);
        put_len(&mut out, entries.len() as u64);
        put_id(&mut out, id(4, 0)); // last id
        put_len(&mut out, 4);
        // A group at the last id, one before the first entry, one at the first entry, one in
        // the middle (unknown), one in the future (unknown).
        for (name, last) in [
            ("at-last", id(4, 0)),
            ("before", id(0, 5)),
            ("at-first", id(1, 0)),
            ("middle", id(2, 7)),
        ] {
            Encoder::new(&opts(false)).string(&mut out, name.as_bytes());
            put_id(&mut out, last);
            put_len(&mut out, 1); // PEL
            out.extend_from_slice(&id(1, 1).to_be_bytes());
            out.extend_from_slice(&1234u64.to_le_bytes());
            put_len(&mut out, 2);
            put_len(&mut out, 1); // consumers
            Encoder::new(&opts(false)).string(&mut out, b"c");
            out.extend_from_slice(&99u64.to_le_bytes());
            put_len(&mut out, 1);
            out.extend_from_slice(&id(1, 1).to_be_bytes());
        }
        let s = decode_all(&out, RDB_TYPE_STREAM_LISTPACKS).unwrap();
        assert_eq!(s.entries, entries);
        assert_eq!(s.first_id, id(1, 0));
        assert_eq!(s.max_deleted_id, StreamId::default());
        assert_eq!(s.entries_added, 6);
        let read: Vec<(&[u8], i64)> = s
            .groups
            .iter()
            .map(|g| (g.name.as_slice(), g.entries_read))
            .collect();
        assert_eq!(
            read,
            vec![
                (&b"at-first"[..], 1),
                (b"at-last", 6),
                (b"before", 0),
                (b"middle", -1),
            ]
        );
        assert_eq!(s.groups[0].consumers[0].pending, vec![id(1, 1)]);

        // An empty type-15 stream: Redis's loader records the first id as the greatest id.
        let mut out = node_part(&[], 0);
        put_len(&mut out, 0);
        put_id(&mut out, id(7, 7));
        put_len(&mut out, 0);
        let s = decode_all(&out, RDB_TYPE_STREAM_LISTPACKS).unwrap();
        assert_eq!(s.first_id, StreamId::MAX);
        assert_eq!(s.last_id, id(7, 7));
    }

    #[test]
    fn type_21_active_time_is_read_and_dropped() {
        let entries = mixed_entries()[..2].to_vec();
        let mut out = node_part(&entries, 0);
        put_len(&mut out, 2);
        put_id(&mut out, id(1, 1));
        put_id(&mut out, id(1, 0));
        put_id(&mut out, id(0, 0));
        put_len(&mut out, 2);
        put_len(&mut out, 1);
        Encoder::new(&opts(false)).string(&mut out, b"g");
        put_id(&mut out, id(1, 1));
        put_len(&mut out, 2);
        put_len(&mut out, 0); // PEL
        put_len(&mut out, 1);
        Encoder::new(&opts(false)).string(&mut out, b"c");
        out.extend_from_slice(&5u64.to_le_bytes()); // seen
        out.extend_from_slice(&6u64.to_le_bytes()); // active
        put_len(&mut out, 0);
        let s = decode_all(&out, RDB_TYPE_STREAM_LISTPACKS_3).unwrap();
        assert_eq!(s.groups[0].consumers[0].seen_time_ms, 5);
        assert_eq!(s.groups[0].entries_read, 2);
        // As type 19 the active time would be read as the consumer's PEL.
        assert!(decode_all(&out, 19).is_err());
    }

    // -----------------------------------------------------------------------------------------
    // Corrupt input.
    // -----------------------------------------------------------------------------------------

    fn corrupt_message(data: &[u8], ty: u8) -> String {
        match decode_stream(data, ty) {
            Ok(s) => panic!("accepted: {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    /// A payload of raw nodes (key, listpack) and an empty stream's tail.
    fn raw_nodes(nodes: &[(&[u8], Vec<u8>)], length: u64) -> Vec<u8> {
        let mut out = Vec::new();
        put_len(&mut out, nodes.len() as u64);
        for (k, lp) in nodes {
            put_len(&mut out, k.len() as u64);
            out.extend_from_slice(k);
            put_len(&mut out, lp.len() as u64);
            out.extend_from_slice(lp);
        }
        put_len(&mut out, length);
        for _ in 0..7 {
            put_len(&mut out, 0);
        }
        put_len(&mut out, 0);
        out
    }

    fn lp(items: &[&[u8]]) -> Vec<u8> {
        let mut b = listpack::Builder::new();
        for i in items {
            b.push(i);
        }
        b.finish()
    }

    #[test]
    fn redis_consistency_checks_are_errors() {
        let good = record(mixed_entries(), groups_example());
        assert!(decode_stream(&encode(&good, 4096, 100, true), 19).is_ok());
        let mutate = |f: &dyn Fn(&mut StreamRecord)| {
            let mut s = good.clone();
            f(&mut s);
            corrupt_message(&encode(&s, 4096, 100, true), 19)
        };
        let m = mutate(&|s| s.groups[0].consumers[1].pending.push(id(4, 0)));
        assert!(
            m.contains("consumer entry 4-0 not found in the group PEL"),
            "{m}"
        );
        let m = mutate(&|s| s.groups[0].consumers[1].pending.push(id(1, 0)));
        assert!(m.contains("PEL entry 1-0 owned twice"), "{m}");
        let m = mutate(&|s| s.groups[0].consumers[0].pending.push(id(1, 0)));
        assert!(m.contains("owned twice"), "{m}");
        let m = mutate(&|s| s.groups[0].consumers[1].pending.clear());
        assert!(m.contains("PEL entry 2-7 without consumer"), "{m}");
        let m = mutate(&|s| {
            let p = s.groups[0].pending[0];
            s.groups[0].pending.push(p);
        });
        assert!(m.contains("PEL entry 1-0 repeated"), "{m}");
        let m = mutate(&|s| {
            let g = s.groups[1].clone();
            s.groups.push(g);
        });
        assert!(
            m.contains("duplicate consumer group 'x-unknown-read'"),
            "{m}"
        );
        let m = mutate(&|s| {
            let c = s.groups[0].consumers[2].clone();
            s.groups[0].consumers.push(c);
        });
        assert!(m.contains("duplicate consumer 'idle'"), "{m}");
        // The stated length must be the number of live entries.
        let mut short = encode(
            &record(mixed_entries()[..3].to_vec(), vec![]),
            4096,
            100,
            false,
        );
        let nodes_end = short.len() - 9; // length, six id halves, entries-added, 0 groups
        assert_eq!(short[nodes_end], 3);
        short[nodes_end] = 2;
        let m = corrupt_message(&short, 19);
        assert!(m.contains("stream length 2, but its nodes hold 3"), "{m}");

        let k = |ms: u64| id(ms, 0).to_be_bytes();
        let node = |ms: &[u8]| lp(&[b"1", b"0", b"1", b"f", b"0", b"2", ms, b"0", b"v", b"4"]);
        assert!(decode_stream(&raw_nodes(&[(&k(1), node(b"0"))], 1), 19).is_ok());
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (
                raw_nodes(&[(&k(1)[..15], node(b"0"))], 1),
                "node key of 15 bytes",
            ),
            (
                raw_nodes(&[(&k(2), node(b"0")), (&k(1), node(b"0"))], 2),
                "out of order",
            ),
            (
                raw_nodes(&[(&k(1), node(b"0")), (&k(1), node(b"1"))], 2),
                "repeated",
            ),
            (raw_nodes(&[(&k(1), lp(&[]))], 0), "empty listpack"),
            (
                raw_nodes(&[(&k(1), node(b"-1"))], 1),
                "below the node's master id",
            ),
            (
                raw_nodes(&[(&k(1), node(b"5")), (&k(2), node(b"0"))], 2),
                "entry 2-0 repeated or out of order",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"5"]),
                    )],
                    1,
                ),
                "lp-count 5 does not match",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[b"1", b"0", b"1", b"f", b"1", b"2", b"0", b"0", b"v", b"4"]),
                    )],
                    1,
                ),
                "master entry not terminated",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[
                            b"1", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4", b"9",
                        ]),
                    )],
                    1,
                ),
                "1 elements after the last entry",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[b"2", b"0", b"1", b"f", b"0", b"2", b"0", b"0", b"v", b"4"]),
                    )],
                    1,
                ),
                "listpack ends where the entry flags belong",
            ),
            (
                raw_nodes(&[(&k(1), lp(&[b"1", b"0", b"9", b"f", b"0"]))], 1),
                "9 master fields stated, 2 elements left",
            ),
            (
                raw_nodes(&[(&k(1), lp(&[b"-1", b"0", b"1", b"f", b"0"]))], 1),
                "negative entry count",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[b"1", b"0", b"1", b"f", b"0", b"x", b"0", b"0", b"v", b"4"]),
                    )],
                    1,
                ),
                "the entry flags is not an integer",
            ),
            (
                raw_nodes(
                    &[(
                        &k(1),
                        lp(&[
                            b"1",
                            b"0",
                            b"1",
                            b"f",
                            b"0",
                            b"0",
                            b"0",
                            b"0",
                            b"4611686018427387904",
                            b"f",
                            b"v",
                            b"4",
                        ]),
                    )],
                    1,
                ),
                "fields and values stated",
            ),
            (
                raw_nodes(&[(&k(1), vec![1, 2, 3])], 1),
                "listpack of 3 bytes",
            ),
        ];
        for (data, want) in cases {
            let m = corrupt_message(&data, 19);
            assert!(m.contains(want), "want {want:?}, got {m}");
        }
        let m = corrupt_message(&encode(&good, 4096, 100, true), 4);
        assert!(m.contains("type 4 is not a stream encoding"), "{m}");
    }

    #[test]
    fn deleted_entries_are_skipped() {
        // Two live and one deleted entry (flags 1|2), as XDEL leaves a node.
        let node = lp(&[
            b"2", b"1", b"1", b"f", b"0", //
            b"2", b"0", b"0", b"a", b"4", //
            b"3", b"0", b"1", b"b", b"4", //
            b"2", b"0", b"2", b"c", b"4",
        ]);
        let data = raw_nodes(&[(&id(1, 0).to_be_bytes(), node)], 2);
        let s = decode_stream(&data, 19).unwrap();
        assert_eq!(
            s.entries,
            vec![
                (id(1, 0), pairs(&[("f", "a")])),
                (id(1, 2), pairs(&[("f", "c")]))
            ]
        );
    }

    #[test]
    fn shared_master_fields_are_copied_within_a_budget() {
        // One node of 3,000 entries sharing a 4 KB field: about 20 KB of listpack that would
        // decode to 12 MB of field copies, past 256 times the node.
        let field = vec![b'f'; 4096];
        let record = |n: u64| StreamRecord {
            entries: (1..=n)
                .map(|i| (StreamId::new(i, 0), vec![(field.clone(), b"1".to_vec())]))
                .collect(),
            length: n,
            last_id: StreamId::new(n, 0),
            first_id: StreamId::new(1, 0),
            entries_added: n,
            ..StreamRecord::default()
        };
        let opts = WriteOptions {
            compression: false,
            ..WriteOptions::default()
        };
        let mut out = Vec::new();
        write_stream(&mut out, &record(3000), 0, 0, &opts);
        let err = decode_stream(&out, 19).unwrap_err();
        assert!(err.to_string().contains("master fields"), "{err}");
        // Within the budget the same shape decodes.
        let mut out = Vec::new();
        write_stream(&mut out, &record(200), 0, 0, &opts);
        let decoded = decode_stream(&out, 19).expect("a node within the budget");
        assert_eq!(decoded.entries.len(), 200);
    }

    #[test]
    fn stated_counts_do_not_allocate() {
        // Counts of 2^62 for nodes, groups, PELs, consumers: each fails at the end of the input
        // having allocated about what the input holds.
        let huge = |prefix: &[u8]| {
            let mut out = prefix.to_vec();
            put_len(&mut out, 1 << 62);
            out
        };
        assert!(decode_stream(&huge(&[]), 19).is_err());
        let empty_meta = {
            let mut out = raw_nodes(&[], 0);
            out.pop(); // the group count
            out
        };
        assert!(decode_stream(&huge(&empty_meta), 19).is_err());
        let mut group = empty_meta.clone();
        put_len(&mut group, 1);
        group.extend_from_slice(&[1, b'g', 0, 0, 0]);
        assert!(decode_stream(&huge(&group), 19).is_err());
        let mut consumers = group.clone();
        put_len(&mut consumers, 0);
        assert!(decode_stream(&huge(&consumers), 19).is_err());
        let mut cpel = consumers;
        put_len(&mut cpel, 1);
        cpel.extend_from_slice(&[1, b'c']);
        cpel.extend_from_slice(&[0; 8]);
        assert!(decode_stream(&huge(&cpel), 19).is_err());
        // A node listpack stating 4 GB.
        let mut lp = vec![1];
        lp.extend_from_slice(&[0; 16]);
        lp.push(0x80);
        lp.extend_from_slice(&u32::MAX.to_be_bytes());
        assert!(decode_stream(&lp, 19).is_err());
    }

    #[test]
    fn truncations_and_flips_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        let mut entries = mixed_entries();
        entries.extend(
            random_entries(&mut rng, 60)
                .into_iter()
                .map(|(i, p)| (id(i.ms, i.seq), p)),
        );
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        let s = record(entries, groups_example());
        for compression in [false, true] {
            let good = encode(&s, 300, 7, compression);
            assert_eq!(decode_all(&good, 19).unwrap(), s);
            for n in 0..good.len() {
                assert!(decode_stream(&good[..n], 19).is_err(), "truncated to {n}");
            }
            for _ in 0..4000 {
                let mut bad = good.clone();
                for _ in 0..rng.gen_range(1..4) {
                    let i = rng.gen_range(0..bad.len());
                    bad[i] = match rng.gen_range(0..3) {
                        0 => bad[i] ^ (1 << rng.gen_range(0..8)),
                        1 => rng.gen(),
                        _ => 0xff,
                    };
                }
                for ty in [15, 19, 21] {
                    let _ = decode_stream(&bad, ty);
                }
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // Against Debian's redis-server 7.0.
    // -----------------------------------------------------------------------------------------

    use redis::Value as RValue;
    use std::collections::HashMap;
    use std::net::TcpListener;
    use std::process::{Child, Command, Stdio};
    use std::time::{Duration, Instant};

    struct Server {
        child: Child,
        port: u16,
        _dir: tempfile::TempDir,
    }

    impl Drop for Server {
        fn drop(&mut self) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }

    /// Starts redis-server (a test fails, not skips, without it) with RESTORE checking
    /// payloads as deeply as it can (`sanitize-dump-payload yes`).
    fn start_redis() -> (Server, redis::Connection) {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("free port")
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--sanitize-dump-payload", "yes"])
            .arg("--dir")
            .arg(dir.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (CI installs Debian's redis-server 7.0)");
        let server = Server {
            child,
            port,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let conn = redis::Client::open(format!("redis://127.0.0.1:{}/", server.port))
                .and_then(|c| c.get_connection());
            if let Ok(mut c) = conn {
                if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                    return (server, c);
                }
            }
            assert!(Instant::now() < deadline, "redis-server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn bytes(v: &RValue) -> Vec<u8> {
        match v {
            RValue::BulkString(b) => b.clone(),
            RValue::SimpleString(s) => s.clone().into_bytes(),
            RValue::Int(i) => i.to_string().into_bytes(),
            other => panic!("not a string: {other:?}"),
        }
    }

    fn int(v: &RValue) -> i64 {
        match v {
            RValue::Int(i) => *i,
            other => panic!("not an integer: {other:?}"),
        }
    }

    fn array(v: &RValue) -> &[RValue] {
        match v {
            RValue::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// A RESP2 flat key/value array as a map.
    fn map(v: &RValue) -> HashMap<String, &RValue> {
        array(v)
            .chunks_exact(2)
            .map(|kv| (String::from_utf8(bytes(&kv[0])).unwrap(), &kv[1]))
            .collect()
    }

    fn parse_id(v: &RValue) -> StreamId {
        let s = String::from_utf8(bytes(v)).unwrap();
        let (ms, seq) = s.split_once('-').expect("an id");
        id(ms.parse().unwrap(), seq.parse().unwrap())
    }

    /// What XRANGE and XINFO STREAM FULL show of a stream.
    #[derive(Debug, PartialEq)]
    struct View {
        length: u64,
        last_id: StreamId,
        max_deleted_id: StreamId,
        entries_added: u64,
        first_id: StreamId,
        entries: Vec<StreamEntry>,
        groups: Vec<GroupView>,
    }

    #[derive(Debug, PartialEq)]
    struct GroupView {
        name: Vec<u8>,
        last_id: StreamId,
        entries_read: Option<i64>,
        /// id, owner, delivery time, delivery count
        pending: Vec<(StreamId, Vec<u8>, u64, u64)>,
        consumers: Vec<ConsumerView>,
    }

    /// A consumer's name, seen time and PEL (id, delivery time, delivery count).
    type ConsumerView = (Vec<u8>, u64, Vec<(StreamId, u64, u64)>);

    fn view_of(s: &StreamRecord) -> View {
        let mut groups: Vec<GroupView> = s
            .groups
            .iter()
            .map(|g| {
                let owner = |id: StreamId| {
                    g.consumers
                        .iter()
                        .find(|c| c.pending.contains(&id))
                        .map(|c| c.name.clone())
                        .expect("owned")
                };
                let nack = |id: StreamId| {
                    let p = g.pending.iter().find(|p| p.id == id).expect("in PEL");
                    (id, p.delivery_time_ms, p.delivery_count)
                };
                let mut pending: Vec<_> = g
                    .pending
                    .iter()
                    .map(|p| (p.id, owner(p.id), p.delivery_time_ms, p.delivery_count))
                    .collect();
                pending.sort();
                let mut consumers: Vec<_> = g
                    .consumers
                    .iter()
                    .map(|c| {
                        let mut pel: Vec<_> = c.pending.iter().map(|&i| nack(i)).collect();
                        pel.sort();
                        (c.name.clone(), c.seen_time_ms, pel)
                    })
                    .collect();
                consumers.sort();
                GroupView {
                    name: g.name.clone(),
                    last_id: g.last_id,
                    entries_read: (g.entries_read != -1).then_some(g.entries_read),
                    pending,
                    consumers,
                }
            })
            .collect();
        groups.sort_by(|a, b| a.name.cmp(&b.name));
        View {
            length: s.length,
            last_id: s.last_id,
            max_deleted_id: s.max_deleted_id,
            entries_added: s.entries_added,
            first_id: s.first_id,
            entries: s.entries.clone(),
            groups,
        }
    }

    fn entries_from(v: &RValue) -> Vec<StreamEntry> {
        array(v)
            .iter()
            .map(|e| {
                let e = array(e);
                let fv = array(&e[1]);
                let pairs = fv
                    .chunks_exact(2)
                    .map(|p| (bytes(&p[0]), bytes(&p[1])))
                    .collect();
                (parse_id(&e[0]), pairs)
            })
            .collect()
    }

    fn view_in_redis(c: &mut redis::Connection, key: &str) -> (View, usize) {
        let range: RValue = redis::cmd("XRANGE")
            .arg(key)
            .arg("-")
            .arg("+")
            .query(c)
            .unwrap();
        let info: RValue = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(key)
            .arg("FULL")
            .arg("COUNT")
            .arg(0)
            .query(c)
            .unwrap();
        let info = map(&info);
        let entries = entries_from(&range);
        assert_eq!(entries, entries_from(info["entries"]), "XINFO's entries");
        let groups = array(info["groups"])
            .iter()
            .map(|g| {
                let g = map(g);
                let pending = array(g["pending"])
                    .iter()
                    .map(|p| {
                        let p = array(p);
                        (
                            parse_id(&p[0]),
                            bytes(&p[1]),
                            int(&p[2]) as u64,
                            int(&p[3]) as u64,
                        )
                    })
                    .collect();
                let consumers = array(g["consumers"])
                    .iter()
                    .map(|c| {
                        let c = map(c);
                        let pel = array(c["pending"])
                            .iter()
                            .map(|p| {
                                let p = array(p);
                                (parse_id(&p[0]), int(&p[1]) as u64, int(&p[2]) as u64)
                            })
                            .collect();
                        (bytes(c["name"]), int(c["seen-time"]) as u64, pel)
                    })
                    .collect();
                GroupView {
                    name: bytes(g["name"]),
                    last_id: parse_id(g["last-delivered-id"]),
                    entries_read: match g["entries-read"] {
                        RValue::Nil => None,
                        v => Some(int(v)),
                    },
                    pending,
                    consumers,
                }
            })
            .collect();
        let view = View {
            length: int(info["length"]) as u64,
            last_id: parse_id(info["last-generated-id"]),
            max_deleted_id: parse_id(info["max-deleted-entry-id"]),
            entries_added: int(info["entries-added"]) as u64,
            first_id: parse_id(info["recorded-first-entry-id"]),
            entries,
            groups,
        };
        (view, int(info["radix-tree-keys"]) as usize)
    }

    fn dump(c: &mut redis::Connection, key: &str) -> Vec<u8> {
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(c).unwrap();
        assert!(verify(&payload), "DUMP footer of {key}");
        payload
    }

    /// The record in a DUMP payload (type byte, body, footer).
    fn decode_dump(payload: &[u8]) -> StreamRecord {
        assert_eq!(payload[0], RDB_TYPE_STREAM_LISTPACKS_2);
        let body = &payload[1..payload.len() - 10];
        decode_all(body, payload[0]).unwrap()
    }

    /// Our DUMP payload of a record.
    fn our_dump(
        s: &StreamRecord,
        max_bytes: usize,
        max_entries: usize,
        compression: bool,
    ) -> Vec<u8> {
        let mut out = vec![RDB_TYPE_STREAM_LISTPACKS_2];
        write_stream(&mut out, s, max_bytes, max_entries, &opts(compression));
        with_footer(out)
    }

    fn restore(c: &mut redis::Connection, key: &str, payload: &[u8]) {
        redis::cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(payload)
            .arg("REPLACE")
            .query::<()>(c)
            .unwrap_or_else(|e| panic!("RESTORE {key}: {e}"));
    }

    fn xadd(c: &mut redis::Connection, key: &str, entries: &[StreamEntry]) {
        let mut pipe = redis::pipe();
        for (i, p) in entries {
            let cmd = pipe.cmd("XADD").arg(key).arg(i.to_string());
            for (f, v) in p {
                cmd.arg(f.as_slice()).arg(v.as_slice());
            }
            cmd.ignore();
        }
        pipe.query::<()>(c).unwrap();
    }

    fn run(c: &mut redis::Connection, args: &[&str]) -> RValue {
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.query(c).unwrap_or_else(|e| panic!("{args:?}: {e}"))
    }

    fn redis_entries(seed: u64, n: usize) -> Vec<StreamEntry> {
        // Redis refuses fields-less entries; ours never makes them.
        random_entries(&mut StdRng::seed_from_u64(seed), n)
    }

    /// (a) Streams built in redis-server with deletions, trims and groups: their DUMPs decode
    /// to what XRANGE and XINFO STREAM FULL show, and our re-encoding RESTOREs to the same.
    #[test]
    fn redis_dumps_decode() {
        let (_server, mut c) = start_redis();
        let c = &mut c;
        let entries = redis_entries(1, 400);
        let ids: Vec<String> = entries.iter().map(|e| e.0.to_string()).collect();

        // Mixed layouts, deletions (one whole node, the first entry, scattered ones), groups.
        xadd(c, "mixed", &entries);
        let mut del = vec!["XDEL", "mixed", &ids[0]];
        del.extend(ids[100..200].iter().map(String::as_str)); // nodes 2 (and part of 3)
        del.extend(ids.iter().skip(7).step_by(13).map(String::as_str));
        run(c, &del);
        run(c, &["XGROUP", "CREATE", "mixed", "g1", "0"]);
        run(
            c,
            &[
                "XREADGROUP",
                "GROUP",
                "g1",
                "alice",
                "COUNT",
                "50",
                "STREAMS",
                "mixed",
                ">",
            ],
        );
        run(
            c,
            &[
                "XREADGROUP",
                "GROUP",
                "g1",
                "bob",
                "COUNT",
                "70",
                "STREAMS",
                "mixed",
                ">",
            ],
        );
        let mut ack = vec!["XACK", "mixed", "g1"];
        ack.extend(ids[1..60].iter().step_by(3).map(String::as_str));
        run(c, &ack);
        run(
            c,
            &[
                "XCLAIM", "mixed", "g1", "carol", "0", &ids[2], &ids[4], &ids[230],
            ],
        );
        run(c, &["XGROUP", "CREATE", "mixed", "g2", "$"]);
        run(c, &["XGROUP", "CREATECONSUMER", "mixed", "g2", "dave"]);
        run(c, &["XGROUP", "CREATE", "mixed", "g3", &ids[250]]); // entries-read unknown
        run(
            c,
            &["XGROUP", "CREATE", "mixed", "g4", "0", "ENTRIESREAD", "3"],
        );
        run(
            c,
            &[
                "XREADGROUP",
                "GROUP",
                "g4",
                "erin",
                "COUNT",
                "5",
                "STREAMS",
                "mixed",
                ">",
            ],
        );
        // Deleting entries that are pending leaves them in the PELs.
        run(c, &["XDEL", "mixed", &ids[3], &ids[5]]);

        // Empty, with a group.
        run(c, &["XGROUP", "CREATE", "empty", "g", "$", "MKSTREAM"]);
        // Every entry deleted.
        xadd(c, "gone", &entries[..5]);
        let mut del = vec!["XDEL", "gone"];
        del.extend(ids[..5].iter().map(String::as_str));
        run(c, &del);
        // Trimmed exactly: a node left with deleted entries, a new first id.
        xadd(c, "trimmed", &entries[..250]);
        run(c, &["XTRIM", "trimmed", "MAXLEN", "55"]);
        run(c, &["XGROUP", "CREATE", "trimmed", "g", "0"]);
        run(
            c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c1",
                "COUNT",
                "3",
                "STREAMS",
                "trimmed",
                ">",
            ],
        );

        for key in ["mixed", "empty", "gone", "trimmed"] {
            let payload = dump(c, key);
            let s = decode_dump(&payload);
            let (view, _) = view_in_redis(c, key);
            assert_eq!(view_of(&s), view, "{key}");

            // Ours, RESTOREd: the same stream.
            let copy = format!("{key}:copy");
            restore(c, &copy, &our_dump(&s, 4096, 100, true));
            assert_eq!(view_in_redis(c, &copy).0, view, "{copy}");
        }
        // The deletions left node holes and tombstones.
        let s = decode_dump(&dump(c, "mixed"));
        assert!(s.max_deleted_id > StreamId::default() && s.length < 400);
        assert_eq!(s.groups.len(), 4);
        assert_eq!(s.groups[2].entries_read, -1);
    }

    /// (b) Records of ours RESTOREd into redis-server (which sanitizes them deeply): XRANGE and
    /// XINFO STREAM FULL show the record, the node count is the one we chose, redis-server
    /// appends to our last node, and its DUMP gives our bytes back.
    #[test]
    fn our_payloads_restore_into_redis() {
        let (_server, mut c) = start_redis();
        let c = &mut c;
        let mut cases = vec![
            (
                "handmade",
                record(mixed_entries(), groups_example()),
                4096,
                100,
            ),
            ("empty", record(vec![], groups_example()), 4096, 100),
        ];
        for seed in 0..6u64 {
            let mut rng = StdRng::seed_from_u64(100 + seed);
            let n = rng.gen_range(1..400);
            let entries = random_entries(&mut rng, n);
            let groups = random_groups(&mut rng, &entries);
            let mut s = record(entries, groups);
            s.entries_added += seed * 10;
            let limits = [(4096, 100), (0, 5), (500, 0), (1, 0), (0, 0), (2000, 30)];
            let (b, e) = limits[seed as usize];
            cases.push((["r0", "r1", "r2", "r3", "r4", "r5"][seed as usize], s, b, e));
        }
        for (key, s, max_bytes, max_entries) in &cases {
            for compression in [true, false] {
                let payload = our_dump(s, *max_bytes, *max_entries, compression);
                restore(c, key, &payload);
                let (view, nodes) = view_in_redis(c, key);
                assert_eq!(view, view_of(s), "{key}");
                let mut body = Vec::new();
                write_stream(&mut body, s, *max_bytes, *max_entries, &opts(compression));
                assert_eq!(nodes, nodes_of(&body).len(), "{key}: radix-tree-keys");
                run(
                    c,
                    &[
                        "CONFIG",
                        "SET",
                        "rdbcompression",
                        if compression { "yes" } else { "no" },
                    ],
                );
                assert_eq!(
                    dump(c, key),
                    payload,
                    "{key}: redis-server's DUMP of our stream"
                );
            }
            if let Some(last) = s.entries.last() {
                // Redis appends to our tail node (reading its master entry), and the node is
                // then what our writer makes of the longer stream.
                if last.0.ms < u64::MAX {
                    let next = (id(last.0.ms + 1, 0), last.1.clone());
                    xadd(c, key, std::slice::from_ref(&next));
                    let mut longer = s.clone();
                    longer.entries.push(next.clone());
                    let got = decode_dump(&dump(c, key));
                    assert_eq!(got.entries, longer.entries, "{key}");
                }
            }
        }
    }

    /// (c) Streams built in redis-server by XADD alone (plus groups), under several node
    /// limits and both compression settings: our encoding of the decoded record is byte for
    /// byte redis-server's DUMP. This pins the node split and layout.
    #[test]
    fn byte_identical_to_redis_dump() {
        let (_server, mut c) = start_redis();
        let c = &mut c;
        let limits: [(usize, usize); 7] = [
            (4096, 100),
            (0, 7),
            (300, 0),
            (1, 0),
            (0, 0),
            (50_000, 1000),
            (1000, 130),
        ];
        let mut n = 0;
        for (i, &(max_bytes, max_entries)) in limits.iter().enumerate() {
            run(
                c,
                &[
                    "CONFIG",
                    "SET",
                    "stream-node-max-bytes",
                    &max_bytes.to_string(),
                ],
            );
            run(
                c,
                &[
                    "CONFIG",
                    "SET",
                    "stream-node-max-entries",
                    &max_entries.to_string(),
                ],
            );
            let mut streams = vec![redis_entries(1000 + i as u64, 350)];
            // Alike events: SAMEFIELDS throughout.
            streams.push(
                (0..260u64)
                    .map(|j| {
                        let t = (j * 37 % 101).to_string();
                        (
                            id(1_700_000_000_000 + j / 4, j % 4),
                            pairs(&[("temp", &t), ("unit", "C")]),
                        )
                    })
                    .collect(),
            );
            // Id deltas past i64: stored as negative integers.
            streams.push(vec![
                (id(1, 1), pairs(&[("a", "1")])),
                (id(1 << 63, 0), pairs(&[("a", "2")])),
                (id(u64::MAX, 5), pairs(&[("a", "3")])),
                (id(u64::MAX, u64::MAX), pairs(&[("b", "4")])),
            ]);
            for entries in streams {
                let key = format!("s{n}");
                n += 1;
                xadd(c, &key, &entries);
                run(c, &["XGROUP", "CREATE", &key, "readers", "0"]);
                run(c, &["XGROUP", "CREATE", &key, "late", "$"]);
                run(
                    c,
                    &[
                        "XREADGROUP",
                        "GROUP",
                        "readers",
                        "r1",
                        "COUNT",
                        "9",
                        "STREAMS",
                        &key,
                        ">",
                    ],
                );
                run(
                    c,
                    &[
                        "XREADGROUP",
                        "GROUP",
                        "readers",
                        "r2",
                        "COUNT",
                        "4",
                        "STREAMS",
                        &key,
                        ">",
                    ],
                );
                let first = entries[0].0.to_string();
                run(c, &["XACK", &key, "readers", &first]);
                for compression in [true, false] {
                    run(
                        c,
                        &[
                            "CONFIG",
                            "SET",
                            "rdbcompression",
                            if compression { "yes" } else { "no" },
                        ],
                    );
                    let payload = dump(c, &key);
                    let s = decode_dump(&payload);
                    assert_eq!(s.entries, entries, "{key}");
                    let ours = our_dump(&s, max_bytes, max_entries, compression);
                    assert!(
                        ours == payload,
                        "{key} (limits {max_bytes}/{max_entries}, compression {compression}): \
                         {} nodes in redis-server's DUMP, {} in ours",
                        nodes_of(&payload[1..]).len(),
                        nodes_of(&ours[1..]).len()
                    );
                }
            }
        }
    }
}
