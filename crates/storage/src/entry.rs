//! One key's record: an 8-byte tagged pointer (what a table slot holds) to a single
//! allocation with the key, the expiry when there is one, and the value. Short strings and
//! integers live in the record itself; a collection's handle (its compact pack or the pointer
//! to its general encoding) sits in the record too, so a key costs one allocation plus its
//! slot. docs/architecture.md ("One key, byte by byte") walks through the layout.
//!
//! The pointer's spare bits carry what a lookup needs before touching the record: user-space
//! addresses fit in 48 bits and records are 16-byte aligned, so the low four bits hold the
//! value's encoding and whether an expiry is stored, and the top 16 bits hold the key's
//! access information for eviction (LRU clock or LFU counter), at no cost per key.
//!
//! Record layout, in order: the expiry (8 bytes, only when set); the body for fixed-size
//! encodings (an `i64`, a string's `Vec`, or a collection); the key length as a varint and
//! the key; for an inline string, its length as a varint and its bytes.

use std::alloc::{self, Layout};
use std::mem::{align_of, size_of, ManuallyDrop};
use std::ptr;

use crate::value::{Collection, Kind, Value, ValueRef};
use crate::{varint, Hash, List, Set, Stream, ZSet};

/// Strings up to this long are stored in the record; longer ones keep a buffer of their own,
/// so a large value is never copied to build or resize its record.
pub const INLINE_MAX: usize = 512;

const ALIGN: usize = 16;
/// The smallest record: allocators round smaller requests up to this anyway.
const MIN_SIZE: usize = 16;

const CODE_MASK: u64 = 0b111;
const EXPIRES: u64 = 0b1000;
const ADDR_MASK: u64 = 0x0000_ffff_ffff_fff0;
const ACCESS_SHIFT: u32 = 48;

/// Encodings, as stored in the pointer's low bits.
const INT: u64 = 0;
const INLINE: u64 = 1;
const RAW: u64 = 2;
const HASH: u64 = 3;
const LIST: u64 = 4;
const SET: u64 = 5;
const ZSET: u64 = 6;
const STREAM: u64 = 7;

// Bodies sit 8-aligned (after an optional 8-byte expiry in a 16-aligned record).
const _: () = assert!(
    align_of::<Vec<u8>>() <= 8
        && align_of::<Hash>() <= 8
        && align_of::<List>() <= 8
        && align_of::<Set>() <= 8
        && align_of::<ZSet>() <= 8
        && align_of::<Stream>() <= 8
);

fn body_size(code: u64) -> usize {
    match code {
        INT => size_of::<i64>(),
        INLINE => 0,
        RAW => size_of::<Vec<u8>>(),
        HASH => size_of::<Hash>(),
        LIST => size_of::<List>(),
        SET => size_of::<Set>(),
        ZSET => size_of::<ZSet>(),
        _ => size_of::<Stream>(),
    }
}

fn code_of(kind: Kind) -> u64 {
    match kind {
        Kind::String => RAW,
        Kind::Hash => HASH,
        Kind::List => LIST,
        Kind::Set => SET,
        Kind::ZSet => ZSET,
        Kind::Stream => STREAM,
    }
}

fn layout(size: usize) -> Layout {
    // Sizes come from keys and values the protocol limits to far below isize::MAX.
    Layout::from_size_align(size.max(MIN_SIZE), ALIGN).expect("record size fits a Layout")
}

/// Allocates a record of `size` bytes (at least `MIN_SIZE`), 16-aligned, inside the
/// 48-bit address space the tagged pointer assumes.
fn alloc_record(size: usize) -> *mut u8 {
    let layout = layout(size);
    // SAFETY: the layout is non-zero sized.
    let base = unsafe { alloc::alloc(layout) };
    if base.is_null() {
        alloc::handle_alloc_error(layout);
    }
    check_address(base);
    base
}

fn check_address(base: *mut u8) {
    assert_eq!(
        base as u64 & !ADDR_MASK,
        0,
        "a record's address must fit in 48 bits"
    );
}

/// Reads the varint at `p`, which this module wrote.
///
/// # Safety
/// `p` points at a varint inside a live record.
unsafe fn read_varint(p: *const u8) -> (usize, usize) {
    let (mut v, mut shift, mut i) = (0usize, 0, 0);
    loop {
        let byte = *p.add(i);
        v |= ((byte & 0x7f) as usize) << shift;
        i += 1;
        if byte & 0x80 == 0 {
            return (v, i);
        }
        shift += 7;
    }
}

/// A key with its value and expiry (ms since the epoch; 0 = none), owning its record.
pub struct Entry {
    slot: u64,
}

// The record is owned by its `Entry` alone and holds only plain data (bytes, `Vec`s and
// collections that are themselves `Send + Sync`); `&Entry` only reads.
unsafe impl Send for Entry {}
unsafe impl Sync for Entry {}

impl Entry {
    pub fn new(key: &[u8], value: Value, expire_at: u64) -> Entry {
        Self::build(key, value, expire_at, false)
    }

    /// An entry for a string given as bytes (SET's value), stored as [`Value::from_bytes`]
    /// would choose, without building the intermediate `Value` of a short string.
    pub fn from_bytes(key: &[u8], bytes: &[u8], expire_at: u64) -> Entry {
        match bytes.len() {
            21..=INLINE_MAX => Self::build_inline(key, bytes, expire_at),
            _ => Self::new(key, Value::from_bytes(bytes), expire_at),
        }
    }

    /// Builds a record; `raw` keeps a string in its own buffer whatever its length (a string
    /// being edited in place).
    fn build(key: &[u8], value: Value, expire_at: u64, raw: bool) -> Entry {
        let code = match &value {
            Value::Int(_) => INT,
            Value::Str(v) if !raw && v.len() <= INLINE_MAX => {
                return Self::build_inline(key, v, expire_at);
            }
            Value::Str(_) => RAW,
            Value::Hash(_) => HASH,
            Value::List(_) => LIST,
            Value::Set(_) => SET,
            Value::ZSet(_) => ZSET,
            Value::Stream(_) => STREAM,
        };
        let body_at = if expire_at != 0 { 8 } else { 0 };
        let key_at = body_at + body_size(code);
        let size = key_at + varint::len(key.len()) + key.len();
        // SAFETY: `alloc_record` returns `size` writable bytes at a 16-aligned address.
        unsafe {
            let base = alloc_record(size);
            if expire_at != 0 {
                ptr::write(base as *mut u64, expire_at);
            }
            let body = base.add(body_at);
            match value {
                Value::Int(i) => ptr::write(body as *mut i64, i),
                Value::Str(v) => ptr::write(body as *mut Vec<u8>, v),
                Value::Hash(h) => ptr::write(body as *mut Hash, *h),
                Value::List(l) => ptr::write(body as *mut List, *l),
                Value::Set(s) => ptr::write(body as *mut Set, *s),
                Value::ZSet(z) => ptr::write(body as *mut ZSet, *z),
                Value::Stream(x) => ptr::write(body as *mut Stream, *x),
            }
            let rest = std::slice::from_raw_parts_mut(base.add(key_at), size - key_at);
            let at = varint::put(rest, key.len());
            rest[at..].copy_from_slice(key);
            Self::at(base, code, expire_at)
        }
    }

    /// Builds a record holding the string `v` itself.
    fn build_inline(key: &[u8], v: &[u8], expire_at: u64) -> Entry {
        let key_at = if expire_at != 0 { 8 } else { 0 };
        let size = key_at + varint::len(key.len()) + key.len() + varint::len(v.len()) + v.len();
        // SAFETY: `alloc_record` returns `size` writable bytes at a 16-aligned address.
        unsafe {
            let base = alloc_record(size);
            if expire_at != 0 {
                ptr::write(base as *mut u64, expire_at);
            }
            let rest = std::slice::from_raw_parts_mut(base.add(key_at), size - key_at);
            let mut at = varint::put(rest, key.len());
            rest[at..at + key.len()].copy_from_slice(key);
            at += key.len();
            at += varint::put(&mut rest[at..], v.len());
            rest[at..].copy_from_slice(v);
            Self::at(base, INLINE, expire_at)
        }
    }

    /// The entry for a record at `base`.
    fn at(base: *mut u8, code: u64, expire_at: u64) -> Entry {
        let expires = if expire_at != 0 { EXPIRES } else { 0 };
        Entry {
            slot: base as u64 | code | expires,
        }
    }

    fn code(&self) -> u64 {
        self.slot & CODE_MASK
    }

    fn base(&self) -> *mut u8 {
        (self.slot & ADDR_MASK) as *mut u8
    }

    /// Asks the CPU to start loading the record's first cache line (its key, and a small
    /// value), without waiting for it.
    pub fn prefetch(&self) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: a prefetch never faults, whatever the address; this one is the live record.
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                self.base() as *const i8
            );
        }
    }

    fn body_at(&self) -> usize {
        if self.slot & EXPIRES != 0 {
            8
        } else {
            0
        }
    }

    fn body(&self) -> *mut u8 {
        // SAFETY: the body offset lies inside the record.
        unsafe { self.base().add(self.body_at()) }
    }

    pub fn key(&self) -> &[u8] {
        // SAFETY: the record holds a varint length and that many key bytes at this offset.
        unsafe {
            let p = self.body().add(body_size(self.code()));
            let (len, n) = read_varint(p);
            std::slice::from_raw_parts(p.add(n), len)
        }
    }

    /// An inline string's bytes, right after the key.
    fn inline_bytes(&self) -> &[u8] {
        let key = self.key();
        // SAFETY: an inline record continues with a varint length and the string's bytes.
        unsafe {
            let p = key.as_ptr().add(key.len());
            let (len, n) = read_varint(p);
            std::slice::from_raw_parts(p.add(n), len)
        }
    }

    /// Bytes of the record itself.
    fn record_size(&self) -> usize {
        let key = self.key();
        // SAFETY: the key lies inside the record, which starts at `base`.
        let mut end = unsafe { key.as_ptr().add(key.len()).offset_from(self.base()) } as usize;
        if self.code() == INLINE {
            let v = self.inline_bytes();
            end += varint::len(v.len()) + v.len();
        }
        end.max(MIN_SIZE)
    }

    pub fn expire_at(&self) -> u64 {
        if self.slot & EXPIRES == 0 {
            return 0;
        }
        // SAFETY: a record with the flag starts with its 8-byte, 8-aligned expiry.
        unsafe { ptr::read(self.base() as *const u64) }
    }

    pub fn value(&self) -> ValueRef<'_> {
        let body = self.body();
        // SAFETY: the code says which type the body holds; it lives as long as `self`.
        unsafe {
            match self.code() {
                INT => ValueRef::Int(ptr::read(body as *const i64)),
                INLINE => ValueRef::Str(self.inline_bytes()),
                RAW => ValueRef::Str(&*(body as *const Vec<u8>)),
                HASH => ValueRef::Hash(&*(body as *const Hash)),
                LIST => ValueRef::List(&*(body as *const List)),
                SET => ValueRef::Set(&*(body as *const Set)),
                ZSET => ValueRef::ZSet(&*(body as *const ZSet)),
                _ => ValueRef::Stream(&*(body as *const Stream)),
            }
        }
    }

    pub fn kind(&self) -> Kind {
        self.value().kind()
    }

    /// OBJECT ENCODING's name. As in Redis, a string edited in place (APPEND, SETRANGE,
    /// SETBIT...) is `raw` whatever its length.
    pub fn encoding(&self) -> &'static str {
        match self.code() {
            RAW => "raw",
            _ => self.value().encoding(),
        }
    }

    /// Bytes this key takes: its table slot, its record rounded to the allocator's 16-byte
    /// granularity, and what the value holds outside the record.
    pub fn mem_size(&self) -> usize {
        let outside = match self.value() {
            ValueRef::Str(s) if self.code() == RAW => {
                // SAFETY: a RAW body is a `Vec<u8>`; its capacity is what it holds.
                let _ = s;
                unsafe { (*(self.body() as *const Vec<u8>)).capacity() }
            }
            v => v.heap_size(),
        };
        crate::table::SLOT_SIZE + self.record_size().next_multiple_of(ALIGN) + outside
    }

    /// The key's access information: an LRU clock or an LFU counter (see `crate::evict`).
    pub fn access(&self) -> u16 {
        (self.slot >> ACCESS_SHIFT) as u16
    }

    pub fn set_access(&mut self, access: u16) {
        self.slot = (self.slot & !(0xffff << ACCESS_SHIFT)) | (access as u64) << ACCESS_SHIFT;
    }

    pub fn set_expire_at(&mut self, expire_at: u64) {
        let has = self.slot & EXPIRES != 0;
        if has && expire_at != 0 {
            // SAFETY: the record starts with its expiry.
            unsafe { ptr::write(self.base() as *mut u64, expire_at) };
        } else if has != (expire_at != 0) {
            self.move_record(expire_at);
        }
    }

    /// Resizes the record to make (or drop) room for an expiry before the body. Reallocated
    /// rather than copied to a new allocation: within the allocator's size class (most
    /// records gain or lose 8 bytes without leaving theirs) it stays where it is, so setting
    /// TTLs on many keys leaves no trail of freed records behind.
    fn move_record(&mut self, expire_at: u64) {
        let (old_at, new_at) = (self.body_at(), if expire_at != 0 { 8 } else { 0 });
        let old_size = self.record_size();
        let key = self.key();
        // SAFETY: the key lies inside the record.
        let used = unsafe { key.as_ptr().add(key.len()).offset_from(self.base()) } as usize
            + match self.code() {
                INLINE => {
                    let v = self.inline_bytes();
                    varint::len(v.len()) + v.len()
                }
                _ => 0,
            };
        let len = used - old_at;
        let new_layout = layout(new_at + len);
        // SAFETY: the record holds `len` body bytes from `old_at`; a shrinking record slides
        // its body down before it is cut, a growing one after it grew; the body is moved
        // bitwise, never dropped.
        unsafe {
            let mut base = self.base();
            if new_at < old_at {
                ptr::copy(base.add(old_at), base.add(new_at), len);
            }
            base = alloc::realloc(base, layout(old_size), new_layout.size());
            if base.is_null() {
                alloc::handle_alloc_error(new_layout);
            }
            check_address(base);
            if new_at > old_at {
                ptr::copy(base.add(old_at), base.add(new_at), len);
                ptr::write(base as *mut u64, expire_at);
            }
            let flags = self.slot & !ADDR_MASK & !EXPIRES;
            self.slot = base as u64 | flags | if expire_at != 0 { EXPIRES } else { 0 };
        }
    }

    /// Replaces the value, keeping key, expiry and access information.
    pub fn set_value(&mut self, value: Value) {
        if let (INT, Value::Int(i)) = (self.code(), &value) {
            // SAFETY: an INT body is an i64.
            unsafe { ptr::write(self.body() as *mut i64, *i) };
            return;
        }
        self.rebuild(value, false);
    }

    fn rebuild(&mut self, value: Value, raw: bool) {
        let mut next = Entry::build(self.key(), value, self.expire_at(), raw);
        next.set_access(self.access());
        *self = next;
    }

    /// The string's bytes as a buffer to edit in place (an integer becomes its text). Only
    /// for strings.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if self.code() != RAW {
            let bytes = self.value().to_bytes();
            self.rebuild(Value::Str(bytes), true);
        }
        assert_eq!(self.code(), RAW, "make_raw is only called on strings");
        // SAFETY: a RAW body is a `Vec<u8>`, borrowed mutably through `self`.
        unsafe { &mut *(self.body() as *mut Vec<u8>) }
    }

    /// The collection stored here when it is a `T`.
    pub fn collection_mut<T: Collection>(&mut self) -> Option<&mut T> {
        if T::KIND == Kind::String || self.code() != code_of(T::KIND) {
            return None;
        }
        // SAFETY: the code names the body's type, and the code of `T::KIND` is `T`'s.
        Some(unsafe { &mut *(self.body() as *mut T) })
    }

    /// The value, taking it out of the record.
    pub fn into_value(self) -> Value {
        let this = ManuallyDrop::new(self);
        let body = this.body();
        // SAFETY: the body is read out once (moved), then the record is freed without
        // dropping it.
        unsafe {
            let value = match this.code() {
                INT => Value::Int(ptr::read(body as *const i64)),
                INLINE => Value::Str(this.inline_bytes().to_vec()),
                RAW => Value::Str(ptr::read(body as *const Vec<u8>)),
                HASH => Value::Hash(Box::new(ptr::read(body as *const Hash))),
                LIST => Value::List(Box::new(ptr::read(body as *const List))),
                SET => Value::Set(Box::new(ptr::read(body as *const Set))),
                ZSET => Value::ZSet(Box::new(ptr::read(body as *const ZSet))),
                _ => Value::Stream(Box::new(ptr::read(body as *const Stream))),
            };
            alloc::dealloc(this.base(), layout(this.record_size()));
            value
        }
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let body = self.body();
        let size = self.record_size();
        // SAFETY: the body holds the type its code names; the record is freed with the
        // layout it was allocated with (same size, same alignment).
        unsafe {
            match self.code() {
                RAW => ptr::drop_in_place(body as *mut Vec<u8>),
                HASH => ptr::drop_in_place(body as *mut Hash),
                LIST => ptr::drop_in_place(body as *mut List),
                SET => ptr::drop_in_place(body as *mut Set),
                ZSET => ptr::drop_in_place(body as *mut ZSet),
                STREAM => ptr::drop_in_place(body as *mut Stream),
                _ => {}
            }
            alloc::dealloc(self.base(), layout(size));
        }
    }
}

impl Clone for Entry {
    fn clone(&self) -> Self {
        let mut e = Entry::build(
            self.key(),
            self.value().to_owned(),
            self.expire_at(),
            self.code() == RAW,
        );
        e.set_access(self.access());
        e
    }
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("key", &self.key())
            .field("value", &self.value())
            .field("expire_at", &self.expire_at())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings() -> Vec<Value> {
        vec![
            Value::Int(-7),
            Value::Str(Vec::new()),
            Value::Str(b"value:12".to_vec()),
            Value::Str(vec![b'x'; INLINE_MAX]),
            Value::Str(vec![b'y'; INLINE_MAX + 1]),
        ]
    }

    #[test]
    fn keeps_key_value_and_expiry_in_every_encoding() {
        let big_key = vec![b'k'; 300];
        for key in [&b""[..], b"k", b"key:123456", &big_key] {
            for value in strings() {
                for expire_at in [0, 1_700_000_000_000] {
                    let want = value.clone();
                    let e = Entry::new(key, value.clone(), expire_at);
                    assert_eq!(e.key(), key);
                    assert_eq!(e.expire_at(), expire_at);
                    assert_eq!(e.value().to_bytes(), want.as_ref().to_bytes());
                    assert_eq!(
                        e.clone().into_value().as_ref().to_bytes(),
                        want.as_ref().to_bytes()
                    );
                }
            }
        }
    }

    #[test]
    fn adding_and_dropping_an_expiry_keeps_key_and_value_in_every_encoding() {
        let big_key = vec![b'k'; 300];
        for key in [&b""[..], b"k", b"key:123456", &big_key] {
            for value in strings() {
                let want = value.as_ref().to_bytes();
                let mut e = Entry::new(key, value, 0);
                e.set_access(0x1234);
                for expire_at in [1_700_000_000_000, 5, 0, 9, 0] {
                    e.set_expire_at(expire_at);
                    assert_eq!(e.expire_at(), expire_at);
                    assert_eq!((e.key(), e.access()), (key, 0x1234));
                    assert_eq!(e.value().to_bytes(), want);
                }
            }
        }
    }

    #[test]
    fn from_bytes_stores_as_a_built_value_would() {
        let long = vec![b'z'; INLINE_MAX + 1];
        for text in [&b"42"[..], b"-7", b"007", b"value:1", &[b'1'; 25], &long] {
            let (a, b) = (
                Entry::from_bytes(b"k", text, 9),
                Entry::new(b"k", Value::from_bytes(text), 9),
            );
            assert_eq!(a.encoding(), b.encoding(), "{text:?}");
            assert_eq!(a.value().to_bytes(), text);
            assert_eq!((a.key(), a.expire_at()), (&b"k"[..], 9));
        }
    }

    #[test]
    fn expiry_and_access_survive_each_other() {
        let mut e = Entry::new(b"key", Value::Str(b"abc".to_vec()), 0);
        e.set_access(0xbeef);
        e.set_expire_at(5000);
        assert_eq!((e.expire_at(), e.access()), (5000, 0xbeef));
        e.set_expire_at(6000);
        assert_eq!(e.expire_at(), 6000);
        e.set_value(Value::Int(3));
        assert_eq!(
            (e.expire_at(), e.access(), e.key()),
            (6000, 0xbeef, &b"key"[..])
        );
        e.set_expire_at(0);
        assert_eq!((e.expire_at(), e.access()), (0, 0xbeef));
        assert!(matches!(e.value(), ValueRef::Int(3)));
    }

    #[test]
    fn a_string_edited_in_place_is_raw() {
        let mut e = Entry::new(b"k", Value::Int(12), 99);
        assert_eq!(e.encoding(), "int");
        e.make_raw().extend_from_slice(b"34");
        assert_eq!(e.value().to_bytes(), b"1234");
        assert_eq!((e.encoding(), e.expire_at()), ("raw", 99));
        let small = Entry::new(b"k", Value::Str(b"abc".to_vec()), 0);
        assert_eq!(small.encoding(), "embstr");
    }

    #[test]
    fn collections_live_in_the_record() {
        let mut h = Hash::default();
        h.set(b"f", b"v", &crate::EncodingLimits::default());
        let mut e = Entry::new(b"h", Value::Hash(Box::new(h)), 0);
        assert_eq!(e.kind(), Kind::Hash);
        assert!(e.collection_mut::<List>().is_none());
        let h = e.collection_mut::<Hash>().expect("a hash");
        h.set(b"g", b"w", &crate::EncodingLimits::default());
        e.set_expire_at(10);
        match e.value() {
            ValueRef::Hash(h) => assert_eq!(h.len(), 2),
            other => panic!("{other:?}"),
        }
        let Value::Hash(h) = e.into_value() else {
            panic!("not a hash")
        };
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn a_small_record_is_one_allocation_of_its_payload_and_two_bytes() {
        // "key:123456" and a 100-byte value: 112 bytes, one allocator size class.
        let e = Entry::new(b"key:123456", Value::Str(vec![b'v'; 100]), 0);
        assert_eq!(e.record_size(), 112);
        assert_eq!(size_of::<Entry>(), 8);
    }
}
