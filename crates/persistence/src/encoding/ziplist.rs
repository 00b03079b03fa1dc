//! Redis's ziplist (ziplist.c), the compact encoding before 7.0: header (total bytes u32 LE,
//! offset of the last entry u32 LE, count u16 LE or 65535 when unknown), entries, 0xFF. Each
//! entry is the previous entry's size (1 byte, or 0xFE and a u32 LE), an encoding, the data.
//! Strings: `00pppppp`, `01pppppp qqqqqqqq` (14-bit big-endian length), `10000000` and a u32
//! big-endian length. Integers: 0xC0 i16, 0xD0 i32, 0xE0 i64, 0xF0 i24, 0xFE i8 (all
//! little-endian), and 0xF1..=0xFD holding 0..=12 in the encoding byte itself.
//! Only decoding is needed: Redis 7.0 loads ziplists (from RDB 9 and older) but never writes
//! them.

use super::{le, Corrupt, Item};

const HEADER: usize = 10;
const END: u8 = 0xff;

fn corrupt(what: &str, at: usize) -> Corrupt {
    Corrupt(format!("ziplist: {what} (entry at blob offset {at})"))
}

/// Decodes and checks a ziplist as `ziplistValidateIntegrity(deep)` does: stated size, tail
/// offset, terminator, every entry inside the blob, each entry's record of its predecessor's
/// size, and the count.
pub fn decode(zl: &[u8]) -> Result<Vec<Item<'_>>, Corrupt> {
    if zl.len() < HEADER + 1 {
        return Err(Corrupt(format!("ziplist of {} bytes", zl.len())));
    }
    let total = le::<4>(zl, 0).unwrap_or(0) as usize;
    let tail = le::<4>(zl, 4).unwrap_or(0) as usize;
    let stated = le::<2>(zl, 8).unwrap_or(0) as usize;
    if total != zl.len() {
        return Err(Corrupt(format!(
            "ziplist header says {total} bytes, the blob has {}",
            zl.len()
        )));
    }
    let last = zl.len() - 1;
    if zl[last] != END {
        return Err(Corrupt("ziplist without its terminator".into()));
    }
    if tail > last {
        return Err(Corrupt("ziplist tail offset past the end".into()));
    }
    // Entries may not reach into the terminator.
    let body = &zl[..last];
    let mut items = Vec::with_capacity(stated.min(zl.len() / 2));
    let (mut p, mut prev_start, mut prev_size) = (HEADER, None, 0usize);
    while p < last {
        let (prevlen, hdr) = match body[p] {
            b if b < 0xfe => (usize::from(b), 1),
            _ => (
                le::<4>(body, p + 1).ok_or_else(|| corrupt("prevlen past the end", p))? as usize,
                5,
            ),
        };
        if prevlen != prev_size {
            return Err(corrupt("previous-entry length does not match", p));
        }
        let e = p + hdr;
        let enc = *body
            .get(e)
            .ok_or_else(|| corrupt("encoding past the end", p))?;
        let get = |at: usize, n: usize| {
            at.checked_add(n)
                .and_then(|end| body.get(at..end))
                .ok_or_else(|| corrupt("data past the end", p))
        };
        let (item, end) = match enc >> 6 {
            0 => {
                let len = usize::from(enc & 0x3f);
                (Item::Bytes(get(e + 1, len)?), e + 1 + len)
            }
            1 => {
                let b = get(e + 1, 1)?[0];
                let len = (usize::from(enc & 0x3f) << 8) | usize::from(b);
                (Item::Bytes(get(e + 2, len)?), e + 2 + len)
            }
            2 if enc == 0x80 => {
                let l = get(e + 1, 4)?;
                let len = u32::from_be_bytes([l[0], l[1], l[2], l[3]]) as usize;
                (Item::Bytes(get(e + 5, len)?), e + 5 + len)
            }
            _ => {
                let int = |n: usize| -> Result<i64, Corrupt> {
                    let b = get(e + 1, n)?;
                    let u = b.iter().rev().fold(0u64, |a, &x| (a << 8) | u64::from(x));
                    let shift = 64 - 8 * n as u32;
                    Ok(((u << shift) as i64) >> shift)
                };
                match enc {
                    0xc0 => (Item::Int(int(2)?), e + 3),
                    0xd0 => (Item::Int(int(4)?), e + 5),
                    0xe0 => (Item::Int(int(8)?), e + 9),
                    0xf0 => (Item::Int(int(3)?), e + 4),
                    0xfe => (Item::Int(int(1)?), e + 2),
                    0xf1..=0xfd => (Item::Int(i64::from(enc & 0x0f) - 1), e + 1),
                    _ => return Err(corrupt(&format!("invalid encoding {enc:#04x}"), p)),
                }
            }
        };
        items.push(item);
        prev_start = Some(p);
        prev_size = end - p;
        p = end;
    }
    if prev_start.is_some_and(|s| s != tail) {
        return Err(Corrupt("ziplist tail offset is not the last entry".into()));
    }
    if stated != usize::from(u16::MAX) && stated != items.len() {
        return Err(Corrupt(format!(
            "ziplist header says {stated} entries, found {}",
            items.len()
        )));
    }
    Ok(items)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Builds a ziplist the way Redis 6.2 would, to feed the decoder and the RDB reader.
    pub(crate) fn build(items: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let (mut prev, mut tail) = (0usize, HEADER);
        for s in items {
            let start = body.len();
            tail = HEADER + start;
            if prev < 254 {
                body.push(prev as u8);
            } else {
                body.push(0xfe);
                body.extend_from_slice(&(prev as u32).to_le_bytes());
            }
            match damselfly_protocol::number::parse_i64(s) {
                Some(v @ 0..=12) => body.push(0xf1 + v as u8),
                Some(v) if i8::try_from(v).is_ok() => body.extend_from_slice(&[0xfe, v as u8]),
                Some(v) if i16::try_from(v).is_ok() => {
                    body.push(0xc0);
                    body.extend_from_slice(&(v as i16).to_le_bytes());
                }
                Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => {
                    body.push(0xf0);
                    body.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
                }
                Some(v) if i32::try_from(v).is_ok() => {
                    body.push(0xd0);
                    body.extend_from_slice(&(v as i32).to_le_bytes());
                }
                Some(v) => {
                    body.push(0xe0);
                    body.extend_from_slice(&v.to_le_bytes());
                }
                None if s.len() < 64 => body.push(s.len() as u8),
                None if s.len() < 16384 => {
                    body.extend_from_slice(&[0x40 | (s.len() >> 8) as u8, s.len() as u8])
                }
                None => {
                    body.push(0x80);
                    body.extend_from_slice(&(s.len() as u32).to_be_bytes());
                }
            }
            if damselfly_protocol::number::parse_i64(s).is_none() {
                body.extend_from_slice(s);
            }
            prev = body.len() - start;
        }
        let mut zl = Vec::new();
        zl.extend_from_slice(&((HEADER + body.len() + 1) as u32).to_le_bytes());
        zl.extend_from_slice(&(tail as u32).to_le_bytes());
        zl.extend_from_slice(&(items.len().min(65535) as u16).to_le_bytes());
        zl.extend_from_slice(&body);
        zl.push(END);
        zl
    }

    #[test]
    fn decodes_every_encoding() {
        let long = vec![b'z'; 300];
        let huge = vec![b'h'; 20000];
        let items: Vec<&[u8]> = vec![
            b"hello",
            b"0",
            b"12",
            b"13",
            b"-1",
            b"-128",
            b"200",
            b"-32768",
            b"40000",
            b"-8388608",
            b"8388608",
            b"-2147483648",
            b"2147483648",
            b"-9223372036854775808",
            &long,
            b"after-long",
            &huge,
            b"",
        ];
        let zl = build(&items);
        let got: Vec<Vec<u8>> = decode(&zl).unwrap().into_iter().map(Item::to_vec).collect();
        assert_eq!(got, items.iter().map(|s| s.to_vec()).collect::<Vec<_>>());
        // The encodings chosen above: immediate, i8, i16, i24, i32, i64.
        assert_eq!(decode(&build(&[b"12"])).unwrap(), vec![Item::Int(12)]);
        assert_eq!(zl[HEADER + 8], 0xf1, "0 is an immediate");
    }

    #[test]
    fn empty_ziplist() {
        assert_eq!(decode(&build(&[])).unwrap(), vec![]);
    }

    #[test]
    fn corrupt_ziplists_are_errors() {
        let good = build(&[b"abc", b"7", b"hello"]);
        assert!(decode(&good).is_ok());
        let flip = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            b
        };
        assert!(decode(&flip(0, 99)).is_err(), "total bytes");
        assert!(decode(&flip(4, 11)).is_err(), "tail offset");
        assert!(decode(&flip(8, 2)).is_err(), "count");
        assert!(decode(&flip(HEADER, 3)).is_err(), "first prevlen");
        assert!(
            decode(&flip(HEADER + 1, 0x3f)).is_err(),
            "string past the end"
        );
        assert!(decode(&flip(HEADER + 6, 0xff)).is_err(), "invalid encoding");
        assert!(decode(&flip(good.len() - 1, 0)).is_err(), "terminator");
        assert!(decode(&good[..HEADER]).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(items in proptest::collection::vec(prop_oneof![
            any::<i64>().prop_map(|v| v.to_string().into_bytes()),
            proptest::collection::vec(any::<u8>(), 0..300),
        ], 0..30)) {
            let refs: Vec<&[u8]> = items.iter().map(|v| v.as_slice()).collect();
            let got: Vec<Vec<u8>> = decode(&build(&refs)).unwrap().into_iter().map(Item::to_vec).collect();
            prop_assert_eq!(got, items);
        }

        #[test]
        fn garbage_never_panics(mut zl in proptest::collection::vec(any::<u8>(), 11..80)) {
            let n = zl.len() as u32;
            zl[0..4].copy_from_slice(&n.to_le_bytes());
            zl[4..8].copy_from_slice(&10u32.to_le_bytes());
            let last = zl.len() - 1;
            zl[last] = 0xff;
            let _ = decode(&zl);
        }
    }
}
