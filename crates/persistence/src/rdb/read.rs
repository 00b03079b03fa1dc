//! Reading RDB streams and values into Damselfly's values.
//!
//! Every length in the input is distrusted: strings are read in pieces as their bytes arrive
//! (a stated 4 GB string in a 100-byte file fails at the end of the file having allocated
//! about 100 bytes), collections are never pre-sized from a stated count, and an LZF string
//! may not state a plain length its compressed bytes could not expand to.

use std::io::{self, Read};

use damselfly_protocol::number::parse_f64;
use damselfly_storage::stream::{Consumer, Group, Pending};
use damselfly_storage::{EncodingLimits, End, Hash, List, Set, Stream, Value, ZSet};

use super::stream::StreamRecord;

use super::{enc, opcodes, types, CONTAINER_PACKED, CONTAINER_PLAIN, MAX_READ_VERSION};
use crate::crc64::Crc64;
use crate::encoding::{intset, listpack, ziplist, zipmap, Corrupt, Item};
use crate::error::{Error, ErrorKind};
use crate::lzf;

const BUF: usize = 64 * 1024;

/// Buffered input that counts and hashes the bytes it hands out.
pub(crate) struct Input<R: Read> {
    r: R,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Bytes of `buf` before this index are already in `crc`.
    hashed: usize,
    /// Offset of `buf[0]` in the stream.
    base: u64,
    crc: Crc64,
}

impl<R: Read> Input<R> {
    pub(crate) fn new(r: R) -> Self {
        Input {
            r,
            buf: vec![0; BUF].into_boxed_slice(),
            start: 0,
            end: 0,
            hashed: 0,
            base: 0,
            crc: Crc64::new(),
        }
    }

    /// Offset of the next byte.
    pub(crate) fn pos(&self) -> u64 {
        self.base + self.start as u64
    }

    /// CRC-64 of every byte handed out so far.
    fn crc(&mut self) -> u64 {
        self.crc.update(&self.buf[self.hashed..self.start]);
        self.hashed = self.start;
        self.crc.value()
    }

    /// Makes at least one byte available; false at the end of the input.
    fn fill(&mut self) -> Result<bool, Error> {
        if self.start < self.end {
            return Ok(true);
        }
        self.crc.update(&self.buf[self.hashed..self.start]);
        self.base += self.start as u64;
        self.start = 0;
        self.end = 0;
        self.hashed = 0;
        loop {
            match self.r.read(&mut self.buf) {
                Ok(0) => return Ok(false),
                Ok(n) => {
                    self.end = n;
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::new(self.pos(), ErrorKind::Io(e))),
            }
        }
    }

    fn truncated(&self) -> Error {
        Error::new(self.pos(), ErrorKind::Truncated)
    }

    pub(crate) fn u8(&mut self) -> Result<u8, Error> {
        if !self.fill()? {
            return Err(self.truncated());
        }
        let b = self.buf[self.start];
        self.start += 1;
        Ok(b)
    }

    /// The next `N` bytes.
    pub(crate) fn array<const N: usize>(&mut self) -> Result<[u8; N], Error> {
        let mut out = [0u8; N];
        for b in out.iter_mut() {
            *b = self.u8()?;
        }
        Ok(out)
    }

    /// The next `n` bytes; the buffer grows only as bytes actually arrive.
    fn take(&mut self, n: u64) -> Result<Vec<u8>, Error> {
        let mut out = Vec::with_capacity(n.min(BUF as u64) as usize);
        let mut left = n;
        while left > 0 {
            if !self.fill()? {
                return Err(self.truncated());
            }
            let k = (self.end - self.start).min(usize::try_from(left).unwrap_or(usize::MAX));
            out.extend_from_slice(&self.buf[self.start..self.start + k]);
            self.start += k;
            left -= k as u64;
        }
        Ok(out)
    }

    /// A length, or the special encoding that a `11xxxxxx` byte announces.
    fn len_or_enc(&mut self) -> Result<Len, Error> {
        let b = self.u8()?;
        Ok(match b >> 6 {
            0 => Len::Plain(u64::from(b & 0x3f)),
            1 => Len::Plain((u64::from(b & 0x3f) << 8) | u64::from(self.u8()?)),
            3 => Len::Encoded(b & 0x3f),
            _ if b == 0x80 => Len::Plain(u64::from(u32::from_be_bytes(self.array()?))),
            _ if b == 0x81 => Len::Plain(u64::from_be_bytes(self.array()?)),
            _ => {
                return Err(Error::corrupt(
                    self.pos() - 1,
                    format!("unknown length encoding {b:#04x}"),
                ))
            }
        })
    }

    pub(crate) fn len(&mut self) -> Result<u64, Error> {
        let at = self.pos();
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(n),
            Len::Encoded(_) => Err(Error::corrupt(
                at,
                "an encoded string where a length belongs",
            )),
        }
    }

    /// A string: integer-encoded ones as their decimal text.
    pub(crate) fn string(&mut self) -> Result<Vec<u8>, Error> {
        match self.string_or_int()? {
            Str::Bytes(b) => Ok(b),
            Str::Int(i) => Ok(Item::Int(i).to_vec()),
        }
    }

    fn string_or_int(&mut self) -> Result<Str, Error> {
        let at = self.pos();
        match self.len_or_enc()? {
            Len::Plain(n) => Ok(Str::Bytes(self.take(n)?)),
            Len::Encoded(enc::INT8) => Ok(Str::Int(i64::from(i8::from_le_bytes(self.array()?)))),
            Len::Encoded(enc::INT16) => Ok(Str::Int(i64::from(i16::from_le_bytes(self.array()?)))),
            Len::Encoded(enc::INT32) => Ok(Str::Int(i64::from(i32::from_le_bytes(self.array()?)))),
            Len::Encoded(enc::LZF) => {
                let clen = self.len()?;
                let len = self.len()?;
                let data = self.take(clen)?;
                if len > lzf::max_expansion(data.len()) as u64 {
                    return Err(Error::corrupt(
                        at,
                        format!("LZF string of {clen} bytes claims to expand to {len}"),
                    ));
                }
                lzf::decompress(&data, len as usize)
                    .map(Str::Bytes)
                    .map_err(|e| Error::corrupt(at, e.to_string()))
            }
            Len::Encoded(e) => Err(Error::corrupt(at, format!("unknown string encoding {e}"))),
        }
    }
}

enum Len {
    Plain(u64),
    Encoded(u8),
}

enum Str {
    Bytes(Vec<u8>),
    Int(i64),
}

/// One record of an RDB stream.
#[derive(Debug)]
pub enum Event {
    /// An AUX field (name, value): `redis-ver`, `ctime`, a snapshot id, ...
    Aux { key: Vec<u8>, value: Vec<u8> },
    /// The keys that follow belong to this database.
    SelectDb(u64),
    /// Sizing hint for the current database.
    ResizeDb { keys: u64, expires: u64 },
    /// A function library's code (FUNCTION2; the 7.0 release candidates' FUNCTION record is
    /// translated into the same `#!<engine> name=<name>` form, as Redis does).
    Function { code: Vec<u8> },
    /// A key and its value.
    Entry(Entry),
}

/// A key read from the stream, with what preceded it.
#[derive(Debug)]
pub struct Entry {
    pub db: u64,
    pub key: Vec<u8>,
    pub value: Value,
    /// Absolute deadline in Unix milliseconds (may lie in the past: the caller decides).
    pub expire_ms: Option<i64>,
    /// LRU idle time in seconds, when the writer recorded it.
    pub idle_secs: Option<u64>,
    /// LFU counter, when the writer recorded it.
    pub freq: Option<u8>,
}

/// Reads an RDB stream record by record, building values with Damselfly's own encodings
/// (chosen by the given limits, as if each value had been built by commands).
pub struct RdbReader<R: Read> {
    input: Input<R>,
    version: u16,
    limits: EncodingLimits,
    db: u64,
    done: bool,
    empty_keys: u64,
    /// `rdbchecksum`: compare the trailer with the CRC-64 of the stream.
    verify_checksum: bool,
}

impl<R: Read> RdbReader<R> {
    /// Reads and checks the magic and version (1 to 11).
    pub fn new(r: R, limits: EncodingLimits) -> Result<Self, Error> {
        let mut input = Input::new(r);
        let magic: [u8; 9] = input.array()?;
        if &magic[..5] != b"REDIS" {
            return Err(Error::new(
                0,
                ErrorKind::BadHeader("not an RDB stream: it does not start with REDIS".into()),
            ));
        }
        let version = std::str::from_utf8(&magic[5..])
            .ok()
            .filter(|v| v.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|v| v.parse::<u16>().ok())
            .filter(|&v| (1..=MAX_READ_VERSION).contains(&v))
            .ok_or_else(|| {
                Error::new(
                    5,
                    ErrorKind::BadHeader(format!(
                        "unsupported RDB version {:?} (this reader takes 1 to {MAX_READ_VERSION})",
                        String::from_utf8_lossy(&magic[5..])
                    )),
                )
            })?;
        Ok(RdbReader {
            input,
            version,
            limits,
            db: 0,
            done: false,
            empty_keys: 0,
            verify_checksum: true,
        })
    }

    /// Whether the trailer is checked (`rdbchecksum no` skips it, as Redis does).
    pub fn verify_checksum(&mut self, on: bool) {
        self.verify_checksum = on;
    }

    /// The stream's RDB version.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Offset of the next unread byte.
    pub fn offset(&self) -> u64 {
        self.input.pos()
    }

    /// Keys skipped because their collection was empty (Redis skips them too: older versions
    /// could write such keys).
    pub fn empty_keys_skipped(&self) -> u64 {
        self.empty_keys
    }

    /// The next record; `None` once the EOF record and the checksum (verified unless it is
    /// 0, a file written with `rdbchecksum no`, or verification is off) have been read.
    #[allow(clippy::should_implement_trait)] // fallible, so not an Iterator
    pub fn next(&mut self) -> Result<Option<Event>, Error> {
        if self.done {
            return Ok(None);
        }
        let (mut expire_ms, mut idle_secs, mut freq) = (None, None, None);
        loop {
            let at = self.input.pos();
            let ty = self.input.u8()?;
            match ty {
                opcodes::EXPIRETIME => {
                    let secs = i32::from_le_bytes(self.input.array()?);
                    expire_ms = Some(i64::from(secs) * 1000);
                }
                opcodes::EXPIRETIME_MS => {
                    expire_ms = Some(i64::from_le_bytes(self.input.array()?));
                }
                opcodes::FREQ => freq = Some(self.input.u8()?),
                opcodes::IDLE => idle_secs = Some(self.input.len()?),
                opcodes::EOF => {
                    self.done = true;
                    if self.version >= 5 {
                        let computed = self.input.crc();
                        let at = self.input.pos();
                        let stored = u64::from_le_bytes(self.input.array()?);
                        if self.verify_checksum && stored != 0 && stored != computed {
                            return Err(Error::new(at, ErrorKind::Checksum { stored, computed }));
                        }
                    }
                    return Ok(None);
                }
                opcodes::SELECTDB => {
                    self.db = self.input.len()?;
                    return Ok(Some(Event::SelectDb(self.db)));
                }
                opcodes::RESIZEDB => {
                    let keys = self.input.len()?;
                    let expires = self.input.len()?;
                    return Ok(Some(Event::ResizeDb { keys, expires }));
                }
                opcodes::AUX => {
                    let key = self.input.string()?;
                    let value = self.input.string()?;
                    return Ok(Some(Event::Aux { key, value }));
                }
                opcodes::MODULE_AUX => {
                    let id = self.input.len()?;
                    return Err(Error::new(
                        at,
                        ErrorKind::Unsupported(format!(
                            "the stream holds data of a Redis module (module id {id:#x}), \
                             which Damselfly does not support"
                        )),
                    ));
                }
                opcodes::FUNCTION2 => {
                    let code = self.input.string()?;
                    return Ok(Some(Event::Function { code }));
                }
                opcodes::FUNCTION => {
                    let name = self.input.string()?;
                    let engine = self.input.string()?;
                    if self.input.len()? != 0 {
                        self.input.string()?; // the description, which Redis drops too
                    }
                    let body = self.input.string()?;
                    let mut code = b"#!".to_vec();
                    code.extend_from_slice(&engine);
                    code.extend_from_slice(b" name=");
                    code.extend_from_slice(&name);
                    code.push(b'\n');
                    code.extend_from_slice(&body);
                    return Ok(Some(Event::Function { code }));
                }
                _ => {
                    if !is_value_type(ty) {
                        return Err(Error::corrupt(at, format!("unknown record type {ty}")));
                    }
                    let key = self.input.string()?;
                    match read_value(&mut self.input, ty, &key, &self.limits)? {
                        Some(value) => {
                            return Ok(Some(Event::Entry(Entry {
                                db: self.db,
                                key,
                                value,
                                expire_ms,
                                idle_secs,
                                freq,
                            })))
                        }
                        None => {
                            self.empty_keys += 1;
                            (expire_ms, idle_secs, freq) = (None, None, None);
                        }
                    }
                }
            }
        }
    }
}

/// Value types Redis 7.0 (and 7.2's SET_LISTPACK and stream v3) may write.
fn is_value_type(t: u8) -> bool {
    t <= types::MODULE_2 || (types::HASH_ZIPMAP..=types::STREAM_LISTPACKS_3).contains(&t)
}

fn unsupported(at: u64, key: &[u8], what: &str) -> Error {
    Error::new(
        at,
        ErrorKind::Unsupported(format!(
            "key '{}' holds {what}, which Damselfly does not support yet",
            String::from_utf8_lossy(key)
        )),
    )
}

/// A nested blob's complaint, placed at the blob's offset and naming the key.
fn blob_error(at: u64, key: &[u8], c: Corrupt) -> Error {
    Error::corrupt(at, format!("key '{}': {c}", String::from_utf8_lossy(key)))
}

fn duplicate(at: u64, key: &[u8], what: &str) -> Error {
    Error::corrupt(
        at,
        format!("key '{}': duplicate {what}", String::from_utf8_lossy(key)),
    )
}

/// The text of a listpack or ziplist element, borrowing when it is a string.
fn text<'a>(item: &'a Item<'a>, scratch: &'a mut Vec<u8>) -> &'a [u8] {
    match item {
        Item::Bytes(b) => b,
        Item::Int(i) => {
            scratch.clear();
            damselfly_protocol::number::push_i64(scratch, *i);
            scratch
        }
    }
}

/// A sorted-set score stored as a listpack or ziplist element (Redis reads it with strtod).
fn item_score(item: &Item) -> Option<f64> {
    match item {
        Item::Int(i) => Some(*i as f64),
        Item::Bytes(b) => parse_f64(b),
    }
}

/// Builds a sorted set from (member, score) pairs, refusing NaN scores and repeated members.
struct ZBuilder<'k> {
    z: ZSet,
    key: &'k [u8],
}

impl<'k> ZBuilder<'k> {
    fn new(key: &'k [u8], len: usize, max_member: usize, limits: &EncodingLimits) -> Self {
        ZBuilder {
            z: ZSet::sized_for(len, max_member, limits),
            key,
        }
    }

    fn add(
        &mut self,
        at: u64,
        m: &[u8],
        score: Option<f64>,
        limits: &EncodingLimits,
    ) -> Result<(), Error> {
        let score = score.filter(|s| !s.is_nan()).ok_or_else(|| {
            Error::corrupt(
                at,
                format!("key '{}': bad score", String::from_utf8_lossy(self.key)),
            )
        })?;
        if !self.z.insert(m, score, limits) {
            return Err(duplicate(at, self.key, "sorted set member"));
        }
        Ok(())
    }
}

fn set_add(
    set: &mut Set,
    at: u64,
    key: &[u8],
    m: &[u8],
    limits: &EncodingLimits,
) -> Result<(), Error> {
    if set.add(m, limits) {
        Ok(())
    } else {
        Err(duplicate(at, key, "set member"))
    }
}

fn hash_set(
    h: &mut Hash,
    at: u64,
    key: &[u8],
    f: &[u8],
    v: &[u8],
    limits: &EncodingLimits,
) -> Result<(), Error> {
    if h.set(f, v, limits) {
        Ok(())
    } else {
        Err(duplicate(at, key, "hash field"))
    }
}

/// Reads the body of a value of type `ty` stored under `key`. `None` is an empty collection
/// (which Redis skips when loading).
pub(crate) fn read_value<R: Read>(
    input: &mut Input<R>,
    ty: u8,
    key: &[u8],
    limits: &EncodingLimits,
) -> Result<Option<Value>, Error> {
    let fill = limits.list_max_listpack_size;
    let at = input.pos();
    let value = match ty {
        types::STRING => match input.string_or_int()? {
            Str::Int(i) => Value::Int(i),
            Str::Bytes(b) => Value::from_vec(b),
        },
        types::LIST => {
            let n = input.len()?;
            let mut l = List::default();
            for _ in 0..n {
                l.push(End::Tail, &input.string()?, fill);
            }
            Value::List(Box::new(l))
        }
        types::SET => {
            let n = input.len()?;
            let mut s = Set::default();
            for _ in 0..n {
                let at = input.pos();
                set_add(&mut s, at, key, &input.string()?, limits)?;
            }
            Value::Set(Box::new(s))
        }
        types::ZSET | types::ZSET_2 => {
            // Read every member before choosing the encoding, as Redis loads a skiplist and
            // then converts it when small: a -0 score survives only in the skiplist.
            let n = input.len()?;
            let mut entries = Vec::new();
            for _ in 0..n {
                let at = input.pos();
                let m = input.string()?;
                let score = if ty == types::ZSET_2 {
                    Some(f64::from_le_bytes(input.array()?))
                } else {
                    text_double(input)?
                };
                entries.push((at, m, score));
            }
            let max_member = entries.iter().map(|(_, m, _)| m.len()).max().unwrap_or(0);
            let mut z = ZBuilder::new(key, entries.len(), max_member, limits);
            for (at, m, score) in entries {
                z.add(at, &m, score, limits)?;
            }
            Value::ZSet(Box::new(z.z))
        }
        types::HASH => {
            let n = input.len()?;
            let mut h = Hash::default();
            for _ in 0..n {
                let at = input.pos();
                let f = input.string()?;
                let v = input.string()?;
                hash_set(&mut h, at, key, &f, &v, limits)?;
            }
            Value::Hash(Box::new(h))
        }
        types::MODULE | types::MODULE_2 => return Err(unsupported(at, key, "a module value")),
        types::STREAM_LISTPACKS | types::STREAM_LISTPACKS_2 | types::STREAM_LISTPACKS_3 => {
            let record = super::stream::read_stream(input, ty)?;
            Value::Stream(Box::new(stream_from_record(record, limits)))
        }
        types::LIST_QUICKLIST | types::LIST_QUICKLIST_2 => {
            let nodes = input.len()?;
            let mut l = List::default();
            let mut scratch = Vec::new();
            for _ in 0..nodes {
                let container = if ty == types::LIST_QUICKLIST_2 {
                    input.len()?
                } else {
                    CONTAINER_PACKED
                };
                let at = input.pos();
                let blob = input.string()?;
                if blob.is_empty() {
                    return Err(Error::corrupt(at, "empty quicklist node"));
                }
                match container {
                    CONTAINER_PLAIN => l.push(End::Tail, &blob, fill),
                    CONTAINER_PACKED => {
                        let items = if ty == types::LIST_QUICKLIST_2 {
                            listpack::decode(&blob)
                        } else {
                            ziplist::decode(&blob)
                        }
                        .map_err(|c| blob_error(at, key, c))?;
                        for item in &items {
                            l.push(End::Tail, text(item, &mut scratch), fill);
                        }
                    }
                    c => return Err(Error::corrupt(at, format!("quicklist container {c}"))),
                }
            }
            if l.is_empty() {
                return Ok(None);
            }
            Value::List(Box::new(l))
        }
        _ => return read_blob_value(input, ty, key, limits),
    };
    Ok((!value.as_ref().is_empty_collection()).then_some(value))
}

/// A stream holding what an RDB record describes, its entries appended into nodes of this
/// server's size.
fn stream_from_record(r: StreamRecord, limits: &EncodingLimits) -> Stream {
    let mut s = Stream::new();
    for (id, pairs) in &r.entries {
        let flat: Vec<&[u8]> = pairs
            .iter()
            .flat_map(|(f, v)| [f.as_slice(), v.as_slice()])
            .collect();
        s.append(*id, &flat, limits.stream_node);
    }
    s.last_id = r.last_id;
    s.first_id = r.first_id;
    s.max_deleted_id = r.max_deleted_id;
    s.entries_added = r.entries_added;
    for g in r.groups {
        let mut group = Group::new(g.last_id, g.entries_read);
        for c in g.consumers {
            for id in &c.pending {
                // The reader gives the group's pending entries in id order.
                if let Ok(i) = g.pending.binary_search_by_key(id, |p| p.id) {
                    let p = &g.pending[i];
                    group.pending.insert(
                        *id,
                        Pending {
                            consumer: c.name.clone(),
                            delivery_time: p.delivery_time_ms,
                            delivery_count: p.delivery_count,
                        },
                    );
                }
            }
            let consumer = Consumer {
                seen_time: c.seen_time_ms,
                pending: c.pending.into_iter().collect(),
            };
            group.consumers.insert(c.name, consumer);
        }
        s.groups.insert(g.name, group);
    }
    s
}

/// Old ZSET (type 3) scores: a length byte, 253/254/255 for NaN/+inf/-inf, else the text.
fn text_double<R: Read>(input: &mut Input<R>) -> Result<Option<f64>, Error> {
    Ok(match input.u8()? {
        255 => Some(f64::NEG_INFINITY),
        254 => Some(f64::INFINITY),
        253 => None,
        n => parse_f64(&input.take(u64::from(n))?),
    })
}

/// Values stored as one encoded blob: zipmap, ziplist, intset, listpack.
fn read_blob_value<R: Read>(
    input: &mut Input<R>,
    ty: u8,
    key: &[u8],
    limits: &EncodingLimits,
) -> Result<Option<Value>, Error> {
    let at = input.pos();
    let blob = input.string()?;
    let bad = |c: Corrupt| blob_error(at, key, c);
    let mut scratch = Vec::new();
    let value = match ty {
        types::HASH_ZIPMAP => {
            let mut h = Hash::default();
            for (f, v) in zipmap::decode(&blob).map_err(bad)? {
                hash_set(&mut h, at, key, f, v, limits)?;
            }
            Value::Hash(Box::new(h))
        }
        types::LIST_ZIPLIST => {
            let mut l = List::default();
            for item in &ziplist::decode(&blob).map_err(bad)? {
                l.push(
                    End::Tail,
                    text(item, &mut scratch),
                    limits.list_max_listpack_size,
                );
            }
            Value::List(Box::new(l))
        }
        types::SET_INTSET => {
            let members = intset::decode(&blob).map_err(bad)?;
            if members.len() <= limits.set_max_intset_entries {
                Value::Set(Box::new(Set::Ints(members)))
            } else {
                let mut s = Set::default();
                for m in members {
                    set_add(&mut s, at, key, &Item::Int(m).to_vec(), limits)?;
                }
                Value::Set(Box::new(s))
            }
        }
        types::SET_LISTPACK => {
            let mut s = Set::default();
            for item in &listpack::decode(&blob).map_err(bad)? {
                set_add(&mut s, at, key, text(item, &mut scratch), limits)?;
            }
            Value::Set(Box::new(s))
        }
        types::HASH_ZIPLIST | types::HASH_LISTPACK => {
            let items = if ty == types::HASH_ZIPLIST {
                ziplist::decode(&blob)
            } else {
                listpack::decode(&blob)
            }
            .map_err(bad)?;
            if items.len() % 2 != 0 {
                return Err(bad(Corrupt("odd number of entries in a hash".into())));
            }
            let mut h = Hash::default();
            let mut scratch2 = Vec::new();
            for pair in items.chunks_exact(2) {
                let f = text(&pair[0], &mut scratch);
                let v = text(&pair[1], &mut scratch2);
                hash_set(&mut h, at, key, f, v, limits)?;
            }
            Value::Hash(Box::new(h))
        }
        types::ZSET_ZIPLIST | types::ZSET_LISTPACK => {
            let items = if ty == types::ZSET_ZIPLIST {
                ziplist::decode(&blob)
            } else {
                listpack::decode(&blob)
            }
            .map_err(bad)?;
            if items.len() % 2 != 0 {
                return Err(bad(Corrupt("odd number of entries in a sorted set".into())));
            }
            let max_member = items
                .iter()
                .step_by(2)
                .map(|m| text(m, &mut scratch).len())
                .max()
                .unwrap_or(0);
            let mut z = ZBuilder::new(key, items.len() / 2, max_member, limits);
            for pair in items.chunks_exact(2) {
                z.add(
                    at,
                    text(&pair[0], &mut scratch),
                    item_score(&pair[1]),
                    limits,
                )?;
            }
            Value::ZSet(Box::new(z.z))
        }
        _ => {
            return Err(Error::corrupt(
                at.saturating_sub(1),
                format!("unknown value type {ty}"),
            ))
        }
    };
    Ok((!value.as_ref().is_empty_collection()).then_some(value))
}
