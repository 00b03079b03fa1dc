//! Redis's zipmap (zipmap.c), the small-hash encoding of Redis 2.4 and older: a count byte
//! (254 and above: unknown), then field and value pairs, then 0xFF. A length is one byte
//! below 254, or 254 and a u32 (little-endian here, as every platform Redis ran on wrote it).
//! Each value's length is followed by a byte counting unused bytes left after the value.

use super::{le, Corrupt};

const END: u8 = 0xff;
const BIGLEN: u8 = 254;

/// A field and its value, borrowed from the blob.
pub type Pair<'a> = (&'a [u8], &'a [u8]);

/// Decodes and checks a zipmap as `zipmapValidateIntegrity(deep)` does; returns the pairs.
pub fn decode(zm: &[u8]) -> Result<Vec<Pair<'_>>, Corrupt> {
    if zm.len() < 2 || zm[zm.len() - 1] != END {
        return Err(Corrupt("zipmap without its terminator".into()));
    }
    let last = zm.len() - 1;
    let short = || Corrupt("zipmap entry runs past the end".into());
    // A length at `p`: its value and where the data starts.
    let length = |p: usize| -> Result<(usize, usize), Corrupt> {
        match *zm.get(p).ok_or_else(short)? {
            b if b < BIGLEN => Ok((usize::from(b), p + 1)),
            BIGLEN => Ok((le::<4>(zm, p + 1).ok_or_else(short)? as usize, p + 5)),
            _ => Err(short()),
        }
    };
    let mut pairs = Vec::new();
    let mut p = 1;
    while p < last {
        let (flen, f) = length(p)?;
        let field = zm
            .get(f..f.checked_add(flen).ok_or_else(short)?)
            .ok_or_else(short)?;
        let (vlen, v) = length(f + flen)?;
        let free = usize::from(*zm.get(v).ok_or_else(short)?);
        let v = v + 1;
        let value = zm
            .get(v..v.checked_add(vlen).ok_or_else(short)?)
            .ok_or_else(short)?;
        p = v + vlen + free;
        if p > last {
            return Err(short());
        }
        pairs.push((field, value));
    }
    if pairs.is_empty() {
        return Err(Corrupt("empty zipmap".into()));
    }
    if zm[0] < BIGLEN && usize::from(zm[0]) != pairs.len() {
        return Err(Corrupt(format!(
            "zipmap header says {} pairs, found {}",
            zm[0],
            pairs.len()
        )));
    }
    Ok(pairs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_example_from_zipmap_c() {
        let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        assert_eq!(
            decode(zm).unwrap(),
            vec![(&b"foo"[..], &b"bar"[..]), (&b"hello"[..], &b"world"[..])]
        );
    }

    #[test]
    fn free_bytes_and_long_lengths() {
        let long = vec![b'v'; 300];
        let mut zm = vec![1u8, 1, b'f', 254];
        zm.extend_from_slice(&300u32.to_le_bytes());
        zm.push(2); // two unused bytes after the value
        zm.extend_from_slice(&long);
        zm.extend_from_slice(b"xx\xff");
        assert_eq!(decode(&zm).unwrap(), vec![(&b"f"[..], &long[..])]);
    }

    #[test]
    fn corrupt_zipmaps_are_errors() {
        let zm = b"\x02\x03foo\x03\x00bar\x05hello\x05\x00world\xff";
        assert!(decode(&zm[..zm.len() - 1]).is_err());
        let mut bad = zm.to_vec();
        bad[0] = 3;
        assert!(decode(&bad).is_err(), "count");
        let mut bad = zm.to_vec();
        bad[1] = 200;
        assert!(decode(&bad).is_err(), "field past the end");
        let mut bad = zm.to_vec();
        bad[6] = 30;
        assert!(decode(&bad).is_err(), "free bytes past the end");
        assert!(decode(b"\x00\xff").is_err(), "empty");
    }
}
