//! Redis's listpack (listpack.c): a 6-byte header (total bytes, u32 LE; element count, u16 LE,
//! 65535 when unknown), the entries, and an 0xFF terminator. Each entry is an encoding byte
//! with the value, then its own length ("backlen") in 1 to 5 bytes readable from the end, so
//! the list can be walked backwards. Texts that are canonical 64-bit integers are stored as
//! integers in the smallest of six integer encodings; other texts as 6-, 12- or 32-bit-length
//! strings.

use super::{le, Corrupt, Item};
use damselfly_protocol::number::parse_i64;
use damselfly_storage::listpack_size::backlen_size;

const HEADER: usize = 6;
const EOF: u8 = 0xff;
/// The header's count when there are this many elements or more.
const COUNT_UNKNOWN: usize = u16::MAX as usize;

/// Builds a listpack the way Redis's `lpAppend` does, byte for byte.
#[derive(Debug, Clone)]
pub struct Builder {
    buf: Vec<u8>,
    count: usize,
}

impl Default for Builder {
    fn default() -> Self {
        Builder {
            buf: vec![0; HEADER],
            count: 0,
        }
    }
}

impl Builder {
    pub fn new() -> Self {
        Builder::default()
    }

    /// Elements so far.
    pub fn len(&self) -> usize {
        self.count
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// What `lpBytes` would say now: header, entries and the terminator.
    pub fn bytes(&self) -> usize {
        self.buf.len() + 1
    }

    /// Appends a text, stored as an integer when it is a canonical i64 (`lpStringToInt64`).
    pub fn push(&mut self, s: &[u8]) {
        match parse_i64(s) {
            Some(v) => self.push_int(v),
            None => self.push_str(s),
        }
    }

    /// Appends an integer in the smallest encoding that holds it.
    pub fn push_int(&mut self, v: i64) {
        let start = self.buf.len();
        // Two's complement in the encoding's width: the masks keep the low bits.
        if (0..=127).contains(&v) {
            self.buf.push(v as u8);
        } else if (-4096..=4095).contains(&v) {
            let u = (v as u64) & 0x1fff;
            self.buf
                .extend_from_slice(&[0xc0 | (u >> 8) as u8, u as u8]);
        } else if (-32768..=32767).contains(&v) {
            self.buf.push(0xf1);
            self.buf.extend_from_slice(&(v as i16).to_le_bytes());
        } else if (-8388608..=8388607).contains(&v) {
            self.buf.push(0xf2);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
        } else if (-2147483648..=2147483647).contains(&v) {
            self.buf.push(0xf3);
            self.buf.extend_from_slice(&(v as i32).to_le_bytes());
        } else {
            self.buf.push(0xf4);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
        self.end_entry(start);
    }

    /// Appends a text as a string entry whatever it holds.
    fn push_str(&mut self, s: &[u8]) {
        let start = self.buf.len();
        let len = s.len();
        if len < 64 {
            self.buf.push(0x80 | len as u8);
        } else if len < 4096 {
            self.buf
                .extend_from_slice(&[0xe0 | (len >> 8) as u8, len as u8]);
        } else {
            self.buf.push(0xf0);
            self.buf.extend_from_slice(&(len as u32).to_le_bytes());
        }
        self.buf.extend_from_slice(s);
        self.end_entry(start);
    }

    /// Writes the backlen of the entry that started at `start`: the high 7-bit group first
    /// without a continuation bit, the lower groups after it with one, so a reader going
    /// backwards meets the low bits first.
    fn end_entry(&mut self, start: usize) {
        let l = self.buf.len() - start;
        let n = backlen_size(l);
        for i in (0..n).rev() {
            let group = ((l >> (7 * i)) & 127) as u8;
            self.buf.push(if i + 1 == n { group } else { group | 128 });
        }
        self.count += 1;
    }

    /// The finished listpack.
    pub fn finish(mut self) -> Vec<u8> {
        self.buf.push(EOF);
        let total = self.buf.len() as u32;
        self.buf[0..4].copy_from_slice(&total.to_le_bytes());
        let count = self.count.min(COUNT_UNKNOWN) as u16;
        self.buf[4..6].copy_from_slice(&count.to_le_bytes());
        self.buf
    }
}

/// Bytes the entry for a text takes in a listpack, backlen included (what `lpAppend` adds):
/// the storage layer counts them too, to split stream nodes where Redis does.
pub use damselfly_storage::listpack_size::entry_size;

fn corrupt(what: &str, at: usize) -> Corrupt {
    Corrupt(format!("listpack: {what} (entry at blob offset {at})"))
}

/// One entry at `p`: its value and its encoded size without the backlen.
fn entry(lp: &[u8], p: usize) -> Result<(Item<'_>, usize), Corrupt> {
    let b = lp[p];
    let need = |n: usize| le_signed(lp, p + 1, n).ok_or_else(|| corrupt("integer past the end", p));
    let (item, size) = match b {
        0x00..=0x7f => (Item::Int(i64::from(b)), 1),
        0x80..=0xbf => {
            let len = usize::from(b & 0x3f);
            (Item::Bytes(bytes(lp, p + 1, len, p)?), 1 + len)
        }
        0xc0..=0xdf => {
            let hi = u64::from(b & 0x1f);
            let lo = *lp
                .get(p + 1)
                .ok_or_else(|| corrupt("header past the end", p))?;
            let u = (hi << 8) | u64::from(lo);
            let v = if u >= 1 << 12 {
                u as i64 - (1 << 13)
            } else {
                u as i64
            };
            (Item::Int(v), 2)
        }
        0xe0..=0xef => {
            let lo = *lp
                .get(p + 1)
                .ok_or_else(|| corrupt("header past the end", p))?;
            let len = (usize::from(b & 0x0f) << 8) | usize::from(lo);
            (Item::Bytes(bytes(lp, p + 2, len, p)?), 2 + len)
        }
        0xf0 => {
            let len = le::<4>(lp, p + 1).ok_or_else(|| corrupt("header past the end", p))?;
            let len = len as usize;
            (Item::Bytes(bytes(lp, p + 5, len, p)?), 5 + len)
        }
        0xf1 => (Item::Int(need(2)?), 3),
        0xf2 => (Item::Int(need(3)?), 4),
        0xf3 => (Item::Int(need(4)?), 5),
        0xf4 => (Item::Int(need(8)?), 9),
        _ => return Err(corrupt(&format!("invalid encoding byte {b:#04x}"), p)),
    };
    Ok((item, size))
}

/// A sign-extended little-endian integer of `n` bytes.
fn le_signed(b: &[u8], at: usize, n: usize) -> Option<i64> {
    let bytes = b.get(at..at.checked_add(n)?)?;
    let mut v = 0u64;
    for &x in bytes.iter().rev() {
        v = (v << 8) | u64::from(x);
    }
    let shift = 64 - 8 * n as u32;
    Some(((v << shift) as i64) >> shift)
}

fn bytes(lp: &[u8], at: usize, len: usize, entry_at: usize) -> Result<&[u8], Corrupt> {
    at.checked_add(len)
        .and_then(|end| lp.get(at..end))
        .ok_or_else(|| corrupt("string past the end", entry_at))
}

/// Decodes and checks a whole listpack: the stated size, the terminator, every entry's
/// encoding and backlen, and the count.
pub fn decode(lp: &[u8]) -> Result<Vec<Item<'_>>, Corrupt> {
    if lp.len() < HEADER + 1 {
        return Err(Corrupt(format!("listpack of {} bytes", lp.len())));
    }
    let total = le::<4>(lp, 0).unwrap_or(0) as usize;
    if total != lp.len() {
        return Err(Corrupt(format!(
            "listpack header says {total} bytes, the blob has {}",
            lp.len()
        )));
    }
    if lp[lp.len() - 1] != EOF {
        return Err(Corrupt("listpack without its terminator".into()));
    }
    let stated = le::<2>(lp, 4).unwrap_or(0) as usize;
    let last = lp.len() - 1;
    let mut items = Vec::with_capacity(stated.min(lp.len() / 2));
    let mut p = HEADER;
    while p < last {
        let (item, size) = entry(&lp[..last], p)?;
        let n = backlen_size(size);
        let end = p + size + n;
        if end > last {
            return Err(corrupt("entry runs past the end", p));
        }
        if decode_backlen(&lp[p + size..end]) != Some(size) {
            return Err(corrupt("backlen does not match the entry", p));
        }
        items.push(item);
        p = end;
    }
    if stated != COUNT_UNKNOWN && stated != items.len() {
        return Err(Corrupt(format!(
            "listpack header says {stated} entries, found {}",
            items.len()
        )));
    }
    Ok(items)
}

/// Reads a backlen from its bytes (written high group first).
fn decode_backlen(b: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for (i, &x) in b.iter().enumerate() {
        let last = i + 1 == b.len();
        // Only the first byte has no continuation bit.
        if (x & 128 == 0) != (i == 0) {
            return None;
        }
        v = (v << 7) | usize::from(x & 127);
        if last {
            return Some(v);
        }
    }
    None
}

/// Decodes a listpack of alternating fields and values (hashes, sorted sets), refusing an
/// odd count.
pub fn decode_pairs(lp: &[u8]) -> Result<Vec<(Item<'_>, Item<'_>)>, Corrupt> {
    let items = decode(lp)?;
    if items.len() % 2 != 0 {
        return Err(Corrupt(format!(
            "listpack of pairs has an odd number of entries ({})",
            items.len()
        )));
    }
    Ok(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
}

#[cfg(test)]
mod tests {
    use super::super::hex;
    use super::*;
    use proptest::prelude::*;

    fn build(items: &[&[u8]]) -> Vec<u8> {
        let mut b = Builder::new();
        for i in items {
            b.push(i);
        }
        b.finish()
    }

    #[test]
    fn redis_hash_listpack() {
        // HSET h f1 v1 num 12345 neg -7 big 9223372036854775807 on redis-server 7.0.15,
        // DUMP h: this listpack follows the type byte and its 1-byte length.
        let redis = hex(
            "2f000000 0800 826631 03 827631 03 836e756d 04 f13930 03 836e6567 04 dff9 02
             83626967 04 f4ffffffffffffff7f 09 ff",
        );
        let ours = build(&[
            b"f1",
            b"v1",
            b"num",
            b"12345",
            b"neg",
            b"-7",
            b"big",
            b"9223372036854775807",
        ]);
        assert_eq!(ours, redis);
        let items = decode(&redis).unwrap();
        assert_eq!(items[3], Item::Int(12345));
        assert_eq!(items[5], Item::Int(-7));
        assert_eq!(items[7], Item::Int(i64::MAX));
        assert_eq!(items[0], Item::Bytes(b"f1"));
        let pairs = decode_pairs(&redis).unwrap();
        assert_eq!(pairs.len(), 4);
    }

    #[test]
    fn every_integer_width_round_trips() {
        let values = [
            0i64,
            127,
            128,
            -1,
            -4096,
            4095,
            4096,
            -4097,
            32767,
            -32768,
            32768,
            8388607,
            -8388608,
            8388608,
            i32::MAX as i64,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MAX,
            i64::MIN,
        ];
        let mut b = Builder::new();
        for v in values {
            b.push_int(v);
        }
        let lp = b.finish();
        let got: Vec<Item> = decode(&lp).unwrap();
        assert_eq!(
            got,
            values.iter().map(|&v| Item::Int(v)).collect::<Vec<_>>()
        );
    }

    #[test]
    fn non_canonical_numbers_stay_text() {
        for s in [
            &b"-0"[..],
            b"01",
            b"+1",
            b" 1",
            b"1 ",
            b"9223372036854775808",
            b"",
        ] {
            let lp = build(&[s]);
            assert_eq!(decode(&lp).unwrap(), vec![Item::Bytes(s)], "{s:?}");
        }
    }

    #[test]
    fn long_strings_and_backlens() {
        for len in [63, 64, 127, 128, 4095, 4096, 16382, 16383, 70000] {
            let s = vec![b'x'; len];
            let lp = build(&[&s, b"tail"]);
            assert_eq!(
                decode(&lp).unwrap(),
                vec![Item::Bytes(&s), Item::Bytes(b"tail")]
            );
        }
    }

    #[test]
    fn entry_size_is_what_push_adds() {
        for s in [
            &b"5"[..],
            b"-5",
            b"4095",
            b"-30000",
            b"8000000",
            b"-2000000000",
            b"1099511627776",
            b"",
            b"x",
            &[b'y'; 63],
            &[b'y'; 64],
            &[b'y'; 200],
            &[b'y'; 4096],
            &[b'y'; 20000],
        ] {
            let mut b = Builder::new();
            let before = b.bytes();
            b.push(s);
            assert_eq!(b.bytes() - before, entry_size(s), "{s:?}");
        }
    }

    #[test]
    fn count_saturates() {
        let mut b = Builder::new();
        for _ in 0..70_000 {
            b.push_int(1);
        }
        let lp = b.finish();
        assert_eq!(&lp[4..6], &[0xff, 0xff]);
        assert_eq!(decode(&lp).unwrap().len(), 70_000);
    }

    #[test]
    fn corrupt_listpacks_are_errors() {
        let good = build(&[b"abc", b"12", b"hello"]);
        assert!(decode(&good).is_ok());
        let mut bad = good.clone();
        bad[0] += 1; // total bytes
        assert!(decode(&bad).is_err());
        let mut bad = good.clone();
        bad[4] = 2; // count
        assert!(decode(&bad).is_err());
        let mut bad = good.clone();
        *bad.last_mut().unwrap() = 0;
        assert!(decode(&bad).is_err());
        let mut bad = good.clone();
        bad[HEADER + 4] = 7; // backlen of "abc"
        assert!(decode(&bad).is_err());
        let mut bad = good.clone();
        bad[HEADER] = 0xf7; // invalid encoding
        assert!(decode(&bad).is_err());
        let mut bad = good.clone();
        bad[HEADER] = 0x8f; // string longer than the blob
        assert!(decode(&bad).is_err());
        assert!(decode(&good[..5]).is_err());
        assert!(decode_pairs(&good).is_err(), "odd count");
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(prop_oneof![
            any::<i64>().prop_map(|v| v.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..100),
            proptest::collection::vec(any::<u8>(), 4000..4200),
        ], 0..40)) {
            let refs: Vec<&[u8]> = items.iter().map(|v| v.as_slice()).collect();
            let lp = build(&refs);
            let got: Vec<Vec<u8>> = decode(&lp).unwrap().into_iter().map(Item::to_vec).collect();
            prop_assert_eq!(got, items);
        }

        #[test]
        fn garbage_never_panics(mut lp in proptest::collection::vec(any::<u8>(), 0..64)) {
            if lp.len() >= 7 {
                let n = lp.len() as u32;
                lp[0..4].copy_from_slice(&n.to_le_bytes());
                let last = lp.len() - 1;
                lp[last] = 0xff;
            }
            let _ = decode(&lp);
        }
    }
}
