//! Writing RDB streams and values, with the encodings redis-server 7.0 chooses.

use std::io::{self, Write};

use damselfly_protocol::number::{format_f64_17g, parse_i64, push_i64};
use damselfly_storage::set::Member;
use damselfly_storage::stream::NodeLimits;
use damselfly_storage::{EncodingLimits, Hash, List, Set, StreamId, ValueRef, ZSet};

use super::stream::{ConsumerRecord, GroupRecord, PendingRecord, StreamRecord};
use super::{
    double_to_i64, enc, opcodes, types, CONTAINER_PACKED, CONTAINER_PLAIN, RDB_VERSION,
    REDIS_VERSION,
};
use crate::crc64::Crc64;
use crate::encoding::{intset, listpack};
use crate::lzf::Compressor;

/// Settings that change the bytes written, with Redis's configuration names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// `rdbcompression`: LZF-compress strings longer than 20 bytes when that saves space.
    pub compression: bool,
    /// `rdbchecksum`: write the CRC-64 trailer (0 when off, which readers then skip).
    pub checksum: bool,
    /// `list-max-listpack-size`: how list elements are grouped into listpack nodes.
    pub list_max_listpack_size: i64,
    /// `stream-node-max-bytes` and `stream-node-max-entries`: where stream nodes split.
    pub stream_node: NodeLimits,
}

impl WriteOptions {
    /// What a shard's settings ask for: `rdbcompression` and the list node size; the
    /// checksum is on (DUMP payloads always carry one).
    pub fn for_limits(limits: &EncodingLimits) -> Self {
        WriteOptions {
            compression: limits.rdb_compression,
            list_max_listpack_size: limits.list_max_listpack_size,
            stream_node: limits.stream_node,
            ..WriteOptions::default()
        }
    }
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            compression: true,
            checksum: true,
            list_max_listpack_size: -2,
            stream_node: NodeLimits::default(),
        }
    }
}

/// Where encoded bytes go: a buffer that the RDB writer drains into its `Write` every so
/// often (so one large value is not held whole in memory), or a plain `Vec` (DUMP).
pub(crate) trait Sink {
    fn buf(&mut self) -> &mut Vec<u8>;
    /// Called between the elements of a collection: a chance to drain the buffer.
    fn breathe(&mut self) -> io::Result<()>;
}

impl Sink for Vec<u8> {
    fn buf(&mut self) -> &mut Vec<u8> {
        self
    }

    fn breathe(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// The per-writer state of value encoding: options and a reusable LZF compressor.
pub(crate) struct Encoder {
    compression: bool,
    list_fill: i64,
    stream_node: NodeLimits,
    lzf: Compressor,
}

impl Encoder {
    pub(crate) fn new(opts: &WriteOptions) -> Self {
        Encoder {
            compression: opts.compression,
            list_fill: opts.list_max_listpack_size,
            stream_node: opts.stream_node,
            lzf: Compressor::new(),
        }
    }

    fn stream_node(&self) -> NodeLimits {
        self.stream_node
    }

    /// `rdbSaveRawString`: an integer encoding for short canonical integers, else LZF when
    /// enabled, longer than 20 bytes and at least 4 bytes smaller, else length and bytes.
    pub(crate) fn string(&mut self, out: &mut Vec<u8>, s: &[u8]) {
        if s.len() <= 11 {
            if let Some(v) = parse_i64(s) {
                if put_int_encoded(out, v) {
                    return;
                }
            }
        }
        if self.compression && s.len() > 20 {
            if let Some(c) = self.lzf.compress(s, s.len() - 4) {
                out.push(0xc0 | enc::LZF);
                put_len(out, c.len() as u64);
                put_len(out, s.len() as u64);
                out.extend_from_slice(&c);
                return;
            }
        }
        put_len(out, s.len() as u64);
        out.extend_from_slice(s);
    }
}

/// An RDB length (see the module documentation of `rdb`).
pub(crate) fn put_len(out: &mut Vec<u8>, len: u64) {
    if len < 1 << 6 {
        out.push(len as u8);
    } else if len < 1 << 14 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u64::from(u32::MAX) {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// `rdbEncodeInteger`: writes `v` as an 8-, 16- or 32-bit encoded string if it fits.
fn put_int_encoded(out: &mut Vec<u8>, v: i64) -> bool {
    if let Ok(b) = i8::try_from(v) {
        out.extend_from_slice(&[0xc0 | enc::INT8, b as u8]);
    } else if let Ok(h) = i16::try_from(v) {
        out.push(0xc0 | enc::INT16);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(0xc0 | enc::INT32);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        return false;
    }
    true
}

/// `rdbSaveLongLongAsStringObject`: integer-encoded, or its decimal text (never compressed).
fn put_int_string(out: &mut Vec<u8>, v: i64) {
    if !put_int_encoded(out, v) {
        let mut text = Vec::with_capacity(20);
        push_i64(&mut text, v);
        put_len(out, text.len() as u64);
        out.extend_from_slice(&text);
    }
}

/// The RDB type byte redis-server 7.0 writes for this value in this encoding.
pub(crate) fn value_type(v: ValueRef<'_>) -> u8 {
    match v {
        ValueRef::Int(_) | ValueRef::Str(_) => types::STRING,
        ValueRef::List(_) => types::LIST_QUICKLIST_2,
        ValueRef::Set(s) => match *s {
            Set::Ints(_) => types::SET_INTSET,
            Set::Dict(_) => types::SET,
        },
        ValueRef::Hash(h) => match *h {
            Hash::Pack(_) => types::HASH_LISTPACK,
            Hash::Dict(_) => types::HASH,
        },
        ValueRef::ZSet(z) => match *z {
            ZSet::Pack(_) => types::ZSET_LISTPACK,
            ZSet::Tree(_) => types::ZSET_2,
        },
        ValueRef::Stream(_) => types::STREAM_LISTPACKS_2,
    }
}

/// `rdbSaveObject`: the value's body (without its type byte).
pub(crate) fn write_value<S: Sink>(s: &mut S, e: &mut Encoder, v: ValueRef<'_>) -> io::Result<()> {
    match v {
        ValueRef::Int(i) => put_int_string(s.buf(), i),
        ValueRef::Str(b) => e.string(s.buf(), b),
        ValueRef::Stream(st) => {
            let limits = e.stream_node();
            super::stream::encode_stream(
                s,
                e,
                &stream_record(st),
                limits.max_bytes,
                limits.max_entries,
            )?;
        }
        ValueRef::List(l) => write_list(s, e, l)?,
        ValueRef::Set(set) => match set {
            Set::Ints(members) => e.string(s.buf(), &intset::encode(members)),
            Set::Dict(_) => {
                put_len(s.buf(), set.len() as u64);
                for m in set.iter() {
                    match m {
                        // A dict set holds no Int members; the arm keeps the match total.
                        Member::Int(i) => put_int_string(s.buf(), i),
                        Member::Bytes(b) => e.string(s.buf(), b),
                    }
                    s.breathe()?;
                }
            }
        },
        ValueRef::Hash(h) => match h {
            Hash::Pack(_) => {
                let mut lp = listpack::Builder::new();
                for (f, v) in h.iter() {
                    lp.push(f);
                    lp.push(v);
                }
                e.string(s.buf(), &lp.finish());
            }
            Hash::Dict(_) => {
                put_len(s.buf(), h.len() as u64);
                for (f, v) in h.iter() {
                    e.string(s.buf(), f);
                    e.string(s.buf(), v);
                    s.breathe()?;
                }
            }
        },
        ValueRef::ZSet(z) => match z {
            ZSet::Pack(_) => {
                let mut lp = listpack::Builder::new();
                for (m, score) in z.all() {
                    lp.push(&m);
                    push_score(&mut lp, score);
                }
                e.string(s.buf(), &lp.finish());
            }
            ZSet::Tree(_) => {
                // Greatest first, as Redis writes (its loader then inserts at the head).
                put_len(s.buf(), z.len() as u64);
                const CHUNK: usize = 1024;
                let mut end = z.len();
                while end > 0 {
                    let start = end.saturating_sub(CHUNK);
                    for (m, score) in z.range(start, end).iter().rev() {
                        e.string(s.buf(), m);
                        s.buf().extend_from_slice(&score.to_le_bytes());
                    }
                    s.breathe()?;
                    end = start;
                }
            }
        },
    }
    Ok(())
}

/// A sorted-set score in a listpack, as `zzlInsertAt` stores it: an integer when the score is
/// one (within ±2^62), else its `%.17g` text ("inf", "-inf" for infinities).
fn push_score(lp: &mut listpack::Builder, score: f64) {
    match double_to_i64(score) {
        Some(i) => lp.push_int(i),
        None => {
            let mut text = Vec::with_capacity(24);
            format_f64_17g(score, &mut text);
            lp.push(&text);
        }
    }
}

/// Elements of 1 GB and more go in a node of their own, stored plain (quicklist.c's
/// `packed_threshold`).
const PLAIN_THRESHOLD: usize = 1 << 30;
/// Listpack byte budgets of `list-max-listpack-size` -1 to -5.
const SIZE_LEVELS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// A count-limited node still stops at this many bytes.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// quicklist.c's over-estimate of one entry's overhead when deciding whether it fits.
const SIZE_ESTIMATE_OVERHEAD: usize = 8;
/// An empty listpack: header and terminator.
const EMPTY_LISTPACK: usize = 7;

/// `_quicklistNodeAllowInsert`: may a node of `bytes` and `count` entries take one more
/// element of `len` bytes?
fn node_allows(bytes: usize, count: usize, fill: i64, len: usize) -> bool {
    let new_bytes = bytes + len + SIZE_ESTIMATE_OVERHEAD;
    if fill < 0 {
        let level = fill.unsigned_abs() as usize - 1;
        if SIZE_LEVELS.get(level).is_some_and(|&max| new_bytes <= max) {
            return true;
        }
    }
    new_bytes <= SIZE_SAFETY_LIMIT && (count as i64) < fill
}

/// A list as LIST_QUICKLIST_2: its nodes grouped as pushing every element at the tail of a
/// Redis quicklist under the same `list-max-listpack-size` would group them.
fn write_list<S: Sink>(s: &mut S, e: &mut Encoder, l: &List) -> io::Result<()> {
    // First pass: the nodes' element counts (a count of 0 marks a plain node), so the node
    // count can be written before the nodes without holding them all.
    let mut nodes: Vec<usize> = Vec::new();
    let (mut open, mut bytes, mut count) = (false, 0usize, 0usize);
    for v in l.iter() {
        if v.len() >= PLAIN_THRESHOLD {
            if open {
                nodes.push(count);
                open = false;
            }
            nodes.push(0);
        } else if open && node_allows(bytes, count, e.list_fill, v.len()) {
            bytes += listpack::entry_size(v);
            count += 1;
        } else {
            if open {
                nodes.push(count);
            }
            open = true;
            bytes = EMPTY_LISTPACK + listpack::entry_size(v);
            count = 1;
        }
    }
    if open {
        nodes.push(count);
    }

    put_len(s.buf(), nodes.len() as u64);
    let mut elements = l.iter();
    for n in nodes {
        if n == 0 {
            put_len(s.buf(), CONTAINER_PLAIN);
            let v = elements.next().unwrap_or_default();
            e.string(s.buf(), v);
        } else {
            put_len(s.buf(), CONTAINER_PACKED);
            let mut lp = listpack::Builder::new();
            for v in elements.by_ref().take(n) {
                lp.push(v);
            }
            e.string(s.buf(), &lp.finish());
        }
        s.breathe()?;
    }
    Ok(())
}

/// Buffers output for the writer, hashing what it passes on.
struct Stream<W: Write> {
    out: W,
    buf: Vec<u8>,
    crc: Crc64,
    written: u64,
}

/// Output is handed to the `Write` in pieces of about this size.
const FLUSH_AT: usize = 64 * 1024;

impl<W: Write> Stream<W> {
    fn drain(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.crc.update(&self.buf);
            self.out.write_all(&self.buf)?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }
}

impl<W: Write> Sink for Stream<W> {
    fn buf(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    fn breathe(&mut self) -> io::Result<()> {
        if self.buf.len() >= FLUSH_AT {
            self.drain()?;
        }
        Ok(())
    }
}

/// Writes one RDB stream (a file, or one shard's file) record by record.
///
/// Order of calls: [`RdbWriter::new`] (magic and Redis's standard AUX fields), any further
/// [`RdbWriter::write_aux`] and [`RdbWriter::write_function`], then per non-empty database
/// [`RdbWriter::select_db`] followed by its keys ([`RdbWriter::write_entry`]), then
/// [`RdbWriter::finish`]. Nothing is validated about the order; Redis's loader accepts any.
pub struct RdbWriter<W: Write> {
    stream: Stream<W>,
    enc: Encoder,
    checksum: bool,
}

impl<W: Write> RdbWriter<W> {
    /// Starts a stream: `REDIS0010` and the AUX fields redis-server 7.0 writes first:
    /// `redis-ver`, `redis-bits`, `ctime` (seconds since the epoch), `used-mem` (bytes) and
    /// `aof-base` (whether the file is the base of an append-only log).
    pub fn new(
        out: W,
        opts: &WriteOptions,
        ctime: i64,
        used_mem: u64,
        aof_base: bool,
    ) -> io::Result<Self> {
        let mut w = RdbWriter {
            stream: Stream {
                out,
                buf: Vec::with_capacity(FLUSH_AT * 2),
                crc: Crc64::new(),
                written: 0,
            },
            enc: Encoder::new(opts),
            checksum: opts.checksum,
        };
        w.stream
            .buf
            .extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
        w.write_aux(b"redis-ver", REDIS_VERSION.as_bytes())?;
        w.write_aux(b"redis-bits", b"64")?;
        w.write_aux(b"ctime", ctime.to_string().as_bytes())?;
        // used-mem is written as Redis writes a long long; past i64 it cannot be a size.
        w.write_aux(
            b"used-mem",
            i64::try_from(used_mem)
                .unwrap_or(i64::MAX)
                .to_string()
                .as_bytes(),
        )?;
        w.write_aux(b"aof-base", if aof_base { b"1" } else { b"0" })?;
        Ok(w)
    }

    /// An AUX field: a name and a value, both strings. Loaders ignore names they do not know
    /// (Damselfly's snapshots use one for the snapshot id).
    pub fn write_aux(&mut self, key: &[u8], value: &[u8]) -> io::Result<()> {
        self.stream.buf.push(opcodes::AUX);
        self.enc.string(&mut self.stream.buf, key);
        self.enc.string(&mut self.stream.buf, value);
        self.stream.breathe()
    }

    /// A FUNCTION2 record: one library's code (Redis writes these before the databases).
    pub fn write_function(&mut self, code: &[u8]) -> io::Result<()> {
        self.stream.buf.push(opcodes::FUNCTION2);
        self.enc.string(&mut self.stream.buf, code);
        self.stream.breathe()
    }

    /// SELECTDB and RESIZEDB: the keys that follow belong to database `db`, which holds
    /// `keys` keys of which `expires` have a deadline (a sizing hint for loaders).
    pub fn select_db(&mut self, db: u64, keys: u64, expires: u64) -> io::Result<()> {
        let buf = &mut self.stream.buf;
        buf.push(opcodes::SELECTDB);
        put_len(buf, db);
        buf.push(opcodes::RESIZEDB);
        put_len(buf, keys);
        put_len(buf, expires);
        self.stream.breathe()
    }

    /// SELECTDB alone: the keys that follow belong to database `db` again (a stream may
    /// move between databases; Redis's loader and redis-check-rdb take SELECTDB anywhere).
    pub fn switch_db(&mut self, db: u64) -> io::Result<()> {
        let buf = &mut self.stream.buf;
        buf.push(opcodes::SELECTDB);
        put_len(buf, db);
        self.stream.breathe()
    }

    /// One key: its deadline (absolute Unix time in milliseconds) if it has one, its type,
    /// name and value.
    pub fn write_entry(
        &mut self,
        key: &[u8],
        value: ValueRef<'_>,
        expire_ms: Option<i64>,
    ) -> io::Result<()> {
        let buf = &mut self.stream.buf;
        if let Some(at) = expire_ms {
            buf.push(opcodes::EXPIRETIME_MS);
            buf.extend_from_slice(&at.to_le_bytes());
        }
        buf.push(value_type(value));
        self.enc.string(buf, key);
        write_value(&mut self.stream, &mut self.enc, value)?;
        self.stream.breathe()
    }

    /// Bytes handed to the `Write` so far (buffered bytes not included).
    pub fn bytes_written(&self) -> u64 {
        self.stream.written
    }

    /// Ends the stream (EOF opcode and checksum), flushes, and returns the `Write`.
    pub fn finish(mut self) -> io::Result<W> {
        self.stream.buf.push(opcodes::EOF);
        self.stream.drain()?;
        let crc = if self.checksum {
            self.stream.crc.value()
        } else {
            0
        };
        self.stream.out.write_all(&crc.to_le_bytes())?;
        self.stream.written += 8;
        self.stream.out.flush()?;
        Ok(self.stream.out)
    }
}

/// A stream's content as the RDB codec takes it.
fn stream_record(s: &damselfly_storage::Stream) -> StreamRecord {
    let entries = s.entries(StreamId::MIN, StreamId::MAX);
    let groups = s
        .groups
        .iter()
        .map(|(name, g)| GroupRecord {
            name: name.clone(),
            last_id: g.last_id,
            entries_read: g.entries_read,
            pending: g
                .pending
                .iter()
                .map(|(id, p)| PendingRecord {
                    id: *id,
                    delivery_time_ms: p.delivery_time,
                    delivery_count: p.delivery_count,
                })
                .collect(),
            consumers: g
                .consumers
                .iter()
                .map(|(name, c)| ConsumerRecord {
                    name: name.clone(),
                    seen_time_ms: c.seen_time,
                    pending: c.pending.iter().copied().collect(),
                })
                .collect(),
        })
        .collect();
    StreamRecord {
        length: entries.len() as u64,
        entries,
        last_id: s.last_id,
        first_id: s.first_id,
        max_deleted_id: s.max_deleted_id,
        entries_added: s.entries_added,
        groups,
    }
}
