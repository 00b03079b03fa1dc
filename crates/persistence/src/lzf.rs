//! LZF compression as liblzf 3.6 does it, with the build options Redis uses (lzfP.h: a 2^16
//! entry hash table, `VERY_FAST`, `CHECK_INPUT`). Written here rather than taken from the `lzf`
//! crate, which its author marks deprecated. The compressor follows liblzf's algorithm step by
//! step (same hash, same match rules, same output-space checks), so for a given input it
//! produces the bytes Redis produces and gives up in the same cases; Redis decides whether to
//! store a string compressed from that outcome.
//!
//! Format, a sequence of:
//! - `000LLLLL` then L+1 literal bytes (1..=32);
//! - `LLLooooo oooooooo`: copy L+2 bytes (L = 1..=6) from `offset + 1` bytes back;
//! - `111ooooo LLLLLLLL oooooooo`: copy L+9 bytes from `offset + 1` bytes back.

const HLOG: u32 = 16;
const HSIZE: usize = 1 << HLOG;
const MAX_LIT: usize = 1 << 5;
const MAX_OFF: usize = 1 << 13;
const MAX_REF: usize = (1 << 8) + (1 << 3);

fn first(p: &[u8], i: usize) -> u32 {
    (u32::from(p[i]) << 8) | u32::from(p[i + 1])
}

fn next(v: u32, p: &[u8], i: usize) -> u32 {
    (v << 8) | u32::from(p[i + 2])
}

fn idx(h: u32) -> usize {
    ((h >> (3 * 8 - HLOG)).wrapping_sub(h.wrapping_mul(5)) as usize) & (HSIZE - 1)
}

/// An LZF compressor. It keeps its 2^16-entry hash table between calls: each call's entries
/// sit above the call's base (the previous call's end), so compressing millions of small
/// strings costs no table clearing, and an entry from an earlier call never counts.
#[derive(Default)]
pub struct Compressor {
    /// Per hash slot: the base of the call that wrote it plus the position plus one.
    htab: Vec<u32>,
    /// The next call's base: every entry written so far is at most this.
    next_base: u32,
}

impl Compressor {
    pub fn new() -> Self {
        Compressor::default()
    }

    /// Compresses `input` into at most `max_out` bytes; `None` when it does not fit (liblzf
    /// returning 0), which is also the answer for empty input or output.
    pub fn compress(&mut self, input: &[u8], max_out: usize) -> Option<Vec<u8>> {
        let in_len = u32::try_from(input.len()).ok().filter(|&n| n < u32::MAX)?;
        if in_len == 0 || max_out == 0 {
            return None;
        }
        if self.htab.is_empty() {
            self.htab = vec![0; HSIZE];
        }
        let base = match self.next_base.checked_add(in_len) {
            Some(end) => std::mem::replace(&mut self.next_base, end),
            None => {
                self.htab.fill(0);
                self.next_base = in_len;
                0
            }
        };
        let htab: &mut [u32; HSIZE] = self.htab.as_mut_slice().try_into().ok()?;
        compress_with(htab, base, input, max_out)
    }
}

/// liblzf's compressor over a table whose entries count only when above `base`, so the
/// outcome is that of a fresh table (liblzf's own starts as garbage and relies on its range
/// checks; a clean table takes the same decision for every genuine match).
fn compress_with(
    htab: &mut [u32; HSIZE],
    base: u32,
    input: &[u8],
    max_out: usize,
) -> Option<Vec<u8>> {
    let in_len = input.len();
    // Entries hold `base` plus position plus one; in_len < u32::MAX - base (see `compress`).
    let stamp = |pos: usize| base + pos as u32 + 1;
    let mut out = vec![0u8; max_out];
    let mut op = 1usize; // out[0] is the first literal run's header
    let mut lit = 0usize;
    let mut ip = 0usize;

    let mut hval = if in_len >= 2 { first(input, 0) } else { 0 };
    while ip + 2 < in_len {
        hval = next(hval, input, ip);
        let slot = idx(hval);
        let entry = htab[slot];
        htab[slot] = stamp(ip);

        // A reference must be from this call, behind `ip`, within reach, past the first byte
        // (liblzf tests `ref > in_data`), and match three bytes.
        let r = entry.wrapping_sub(base).wrapping_sub(1) as usize;
        let found = entry > base
            && r > 0
            && r < ip
            && ip - r - 1 < MAX_OFF
            && input[r..r + 3] == input[ip..ip + 3];
        if found {
            let off = ip - r - 1;
            let maxlen = (in_len - ip - 2).min(MAX_REF);

            // liblzf's two checks: three bytes of back reference plus a new run header must
            // fit (counting the empty run header that is taken back).
            if op + 3 + 1 >= max_out && op - usize::from(lit == 0) + 3 + 1 >= max_out {
                return None;
            }
            out[op - lit - 1] = (lit as u8).wrapping_sub(1); // close the run
            op -= usize::from(lit == 0); // drop an empty run header

            // The match's length: where the bytes first differ, at most `maxlen`, but at
            // least 3. liblzf compares the first 16 bytes unrolled whenever more than 16 may
            // match, so near the end of the input its match can run past `maxlen` up to 19.
            let limit = if maxlen > 16 { maxlen.max(19) } else { maxlen };
            let mut len = first_mismatch(input, r, ip, 3, limit).max(3);
            len -= 2; // now the number of octets minus one
            ip += 1;

            if len < 7 {
                out[op] = ((off >> 8) + (len << 5)) as u8;
                op += 1;
            } else {
                out[op] = ((off >> 8) + (7 << 5)) as u8;
                out[op + 1] = (len - 7) as u8;
                op += 2;
            }
            out[op] = off as u8;
            op += 1;

            lit = 0;
            op += 1; // start a new run

            ip += len + 1;
            if ip + 2 >= in_len {
                break;
            }
            // VERY_FAST: hash the two positions before the new `ip` as well.
            ip -= 2;
            hval = first(input, ip);
            hval = next(hval, input, ip);
            htab[idx(hval)] = stamp(ip);
            ip += 1;
            hval = next(hval, input, ip);
            htab[idx(hval)] = stamp(ip);
            ip += 1;
        } else {
            *out.get_mut(op)? = input[ip];
            lit += 1;
            op += 1;
            ip += 1;
            if lit == MAX_LIT {
                out[op - lit - 1] = (lit - 1) as u8;
                lit = 0;
                op += 1;
            }
        }
    }

    if op + 3 > max_out {
        return None;
    }
    while ip < in_len {
        lit += 1;
        out[op] = input[ip];
        op += 1;
        ip += 1;
        if lit == MAX_LIT {
            out[op - lit - 1] = (lit - 1) as u8;
            lit = 0;
            op += 1;
        }
    }
    out[op - lit - 1] = (lit as u8).wrapping_sub(1);
    op -= usize::from(lit == 0);
    out.truncate(op);
    Some(out)
}

/// The first `k` in `from..to` where `input[a + k]` and `input[b + k]` differ, or `to`;
/// eight bytes at a time.
fn first_mismatch(input: &[u8], a: usize, b: usize, from: usize, to: usize) -> usize {
    let load = |i: usize| {
        let mut word = [0u8; 8];
        word.copy_from_slice(&input[i..i + 8]);
        u64::from_le_bytes(word)
    };
    let mut k = from;
    while k + 8 <= to {
        let diff = load(a + k) ^ load(b + k);
        if diff != 0 {
            return k + (diff.trailing_zeros() / 8) as usize;
        }
        k += 8;
    }
    while k < to && input[a + k] == input[b + k] {
        k += 1;
    }
    k
}

/// Why compressed data could not be expanded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LzfError {
    /// The data expands to more than the expected length.
    TooLong,
    /// A literal run or back reference runs past the end of the input.
    Truncated,
    /// A back reference points before the start of the output.
    BadReference,
    /// The data expands to fewer bytes than expected.
    TooShort { got: usize },
}

impl std::fmt::Display for LzfError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LzfError::TooLong => write!(f, "LZF data expands past its stated length"),
            LzfError::Truncated => write!(f, "LZF data ends inside an instruction"),
            LzfError::BadReference => write!(f, "LZF back reference before the start"),
            LzfError::TooShort { got } => {
                write!(f, "LZF data expands to only {got} bytes")
            }
        }
    }
}

/// Expands `input`, which must produce exactly `out_len` bytes (Redis stores that length
/// beside the data and rejects any other outcome). The output buffer is never larger than
/// `out_len`, and callers bound `out_len` by what the input could possibly expand to.
pub fn decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, LzfError> {
    let mut out: Vec<u8> = Vec::with_capacity(out_len);
    let mut ip = 0usize;
    while ip < input.len() {
        let ctrl = usize::from(input[ip]);
        ip += 1;
        if ctrl < 32 {
            let n = ctrl + 1;
            if out.len() + n > out_len {
                return Err(LzfError::TooLong);
            }
            let lits = input.get(ip..ip + n).ok_or(LzfError::Truncated)?;
            out.extend_from_slice(lits);
            ip += n;
        } else {
            let mut len = ctrl >> 5;
            let mut back = (ctrl & 0x1f) << 8;
            if len == 7 {
                len += usize::from(*input.get(ip).ok_or(LzfError::Truncated)?);
                ip += 1;
            }
            back += usize::from(*input.get(ip).ok_or(LzfError::Truncated)?);
            ip += 1;
            let len = len + 2;
            if out.len() + len > out_len {
                return Err(LzfError::TooLong);
            }
            let start = out
                .len()
                .checked_sub(back + 1)
                .ok_or(LzfError::BadReference)?;
            // Byte by byte: the source may overlap what is being written (a run).
            for k in 0..len {
                let b = out[start + k];
                out.push(b);
            }
        }
    }
    if out.len() != out_len {
        return Err(LzfError::TooShort { got: out.len() });
    }
    Ok(out)
}

/// The most bytes `compressed` bytes of LZF can expand to: a 3-byte back reference yields at
/// most 264 bytes. Used to refuse absurd stated lengths before allocating.
pub fn max_expansion(compressed: usize) -> usize {
    compressed.saturating_mul(88).saturating_add(MAX_LIT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn round_trips_compressible_data() {
        let data = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
        let c = Compressor::new().compress(data, data.len() - 4).unwrap();
        assert!(c.len() < 10, "{c:?}");
        assert_eq!(decompress(&c, data.len()).unwrap(), data);
    }

    #[test]
    fn incompressible_data_does_not_fit() {
        let data: Vec<u8> = (0..64u8).collect();
        assert_eq!(Compressor::new().compress(&data, data.len() - 4), None);
        // With room to spare it is stored as literal runs (one header per 32 bytes).
        let c = Compressor::new().compress(&data, 100).unwrap();
        assert_eq!(c.len(), 66);
        assert_eq!(decompress(&c, 64).unwrap(), data);
    }

    #[test]
    fn matches_redis_output() {
        // `SET k <"abc" x 20>` then DUMP k on redis-server 7.0.15 gives, after the type byte,
        // 0xc3 (LZF), compressed length 11, plain length 60, then these bytes. The first
        // match starts at offset 4, not 3: liblzf never refers back to offset 0.
        let c = hex("03616263 61e02d02 016263".replace(' ', "").as_str());
        let plain = "abc".repeat(20);
        assert_eq!(Compressor::new().compress(plain.as_bytes(), 56).unwrap(), c);
        assert_eq!(decompress(&c, 60).unwrap(), plain.as_bytes());
    }

    /// When the bases would pass u32::MAX the table is cleared and they start again: the
    /// outcome stays that of a fresh compressor, before, across and after the wrap.
    #[test]
    fn the_table_base_wraps_cleanly() {
        let data = "abcabcabd".repeat(40);
        let fresh = Compressor::new().compress(data.as_bytes(), 400);
        let mut lzf = Compressor::new();
        lzf.compress(data.as_bytes(), 400);
        lzf.next_base = u32::MAX - 500;
        for _ in 0..4 {
            assert_eq!(lzf.compress(data.as_bytes(), 400), fresh);
        }
        assert!(lzf.next_base < 2000, "wrapped: {}", lzf.next_base);
    }

    #[test]
    fn corrupt_input_is_an_error() {
        assert_eq!(decompress(&[5, b'a'], 6), Err(LzfError::Truncated));
        assert_eq!(decompress(&[0x20, 0x00], 3), Err(LzfError::BadReference));
        assert_eq!(decompress(&[0, b'a', 0xe0], 100), Err(LzfError::Truncated));
        assert_eq!(
            decompress(&[0, b'a'], 2),
            Err(LzfError::TooShort { got: 1 })
        );
        assert_eq!(decompress(&[1, b'a', b'b'], 1), Err(LzfError::TooLong));
        assert_eq!(
            decompress(&[0, b'a', 0x20, 0x00], 2),
            Err(LzfError::TooLong)
        );
    }

    proptest! {
        #[test]
        fn round_trip(data in prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..2000),
            proptest::collection::vec(0u8..3, 1..5000),
            (proptest::collection::vec(any::<u8>(), 1..40), 1usize..200)
                .prop_map(|(unit, n)| unit.repeat(n)),
        ]) {
            if let Some(c) = Compressor::new().compress(&data, data.len() + data.len() / 16 + 64) {
                prop_assert_eq!(decompress(&c, data.len()).unwrap(), data.clone());
                prop_assert!(data.len() <= max_expansion(c.len()));
            } else {
                prop_assert!(false, "room for literal runs was given");
            }
            // A tighter limit either fits or gives up; it never writes past it.
            let tight = data.len().saturating_sub(4);
            if let Some(c) = Compressor::new().compress(&data, tight) {
                prop_assert!(c.len() <= tight);
                prop_assert_eq!(decompress(&c, data.len()).unwrap(), data);
            }
        }

        #[test]
        fn a_reused_compressor_acts_as_a_fresh_one(inputs in proptest::collection::vec(
            proptest::collection::vec(0u8..4, 1..300), 1..20)) {
            let mut reused = Compressor::new();
            for data in inputs {
                let room = data.len() + 40;
                prop_assert_eq!(reused.compress(&data, room), Compressor::new().compress(&data, room));
            }
        }

        #[test]
        fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..200), n in 0usize..1000) {
            let _ = decompress(&data, n);
        }
    }
}
