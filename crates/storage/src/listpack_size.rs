//! The sizes of Redis's listpack entries (listpack.c). Streams split their nodes where Redis
//! does, at `stream-node-max-bytes` of listpack, so they count the bytes Redis's listpack
//! would hold while storing their own denser encoding; the RDB writer builds real listpacks
//! with the same sizes.

use crate::value::parse_canonical_i64;

/// Bytes the backlen of an entry of `len` bytes takes (Redis switches at 127, 16382, ...).
pub fn backlen_size(len: usize) -> usize {
    match len {
        0..=127 => 1,
        128..=16382 => 2,
        16383..=2097150 => 3,
        2097151..=268435454 => 4,
        _ => 5,
    }
}

/// Bytes an integer entry takes, backlen included (`lpAppendInteger`).
pub fn int_entry_size(v: i64) -> usize {
    let size = match v {
        0..=127 => 1,
        -4096..=4095 => 2,
        -32768..=32767 => 3,
        -8388608..=8388607 => 4,
        -2147483648..=2147483647 => 5,
        _ => 9,
    };
    size + backlen_size(size)
}

/// Bytes the entry for `s` takes, backlen included (`lpAppend`: a canonical 64-bit integer
/// is stored as one).
pub fn entry_size(s: &[u8]) -> usize {
    if s.len() <= 20 {
        if let Some(v) = parse_canonical_i64(s) {
            return int_entry_size(v);
        }
    }
    let size = match s.len() {
        0..=63 => 1 + s.len(),
        64..=4095 => 2 + s.len(),
        _ => 5 + s.len(),
    };
    size + backlen_size(size)
}

/// A listpack's header (total bytes and count) and terminator.
pub const OVERHEAD: usize = 7;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_follow_the_encodings() {
        assert_eq!(int_entry_size(0), 2);
        assert_eq!(int_entry_size(127), 2);
        assert_eq!(int_entry_size(128), 3);
        assert_eq!(int_entry_size(-1), 3);
        assert_eq!(int_entry_size(40000), 5);
        assert_eq!(int_entry_size(i64::MIN), 10);
        assert_eq!(entry_size(b"12"), 2);
        assert_eq!(entry_size(b"012"), 5, "not canonical: a string");
        assert_eq!(entry_size(b"abc"), 5);
        assert_eq!(entry_size(&[b'x'; 63]), 65);
        assert_eq!(entry_size(&[b'x'; 64]), 67, "a two-byte header");
        assert_eq!(entry_size(&[b'x'; 200]), 204, "a two-byte backlen");
        assert_eq!(entry_size(&[b'x'; 5000]), 5005 + 2);
    }
}
