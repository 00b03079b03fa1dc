//! LEB128 lengths, as packs, hash items and table entries store them: seven bits per byte,
//! low bits first, the high bit set on every byte but the last. A length below 128 takes one
//! byte, which is what keeps small records small.

/// Bytes the varint of `v` takes.
pub fn len(mut v: usize) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Appends the varint of `v`.
pub fn push(out: &mut Vec<u8>, mut v: usize) {
    while v >= 0x80 {
        out.push((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Writes the varint of `v` at the start of `out` (which is at least `len(v)` long) and
/// returns the bytes written.
pub fn put(out: &mut [u8], mut v: usize) -> usize {
    let mut i = 0;
    while v >= 0x80 {
        out[i] = (v as u8 & 0x7f) | 0x80;
        v >>= 7;
        i += 1;
    }
    out[i] = v as u8;
    i + 1
}

/// The varint at the start of `b`: its value and its length in bytes.
pub fn read(b: &[u8]) -> (usize, usize) {
    let (mut v, mut shift, mut i) = (0usize, 0, 0);
    loop {
        let byte = b[i];
        v |= ((byte & 0x7f) as usize) << shift;
        i += 1;
        if byte & 0x80 == 0 {
            return (v, i);
        }
        shift += 7;
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips_at_every_width() {
        for v in [0, 1, 127, 128, 16_383, 16_384, 1 << 29, usize::MAX >> 1] {
            let mut out = Vec::new();
            super::push(&mut out, v);
            assert_eq!(out.len(), super::len(v));
            assert_eq!(super::read(&out), (v, out.len()));
            let mut fixed = [0u8; 10];
            assert_eq!(super::put(&mut fixed, v), out.len());
            assert_eq!(&fixed[..out.len()], &out[..]);
        }
    }
}
