//! The compact encodings Redis nests inside RDB values as opaque strings: listpack (7.0's
//! small hashes, sorted sets and list nodes), intset (small integer sets), and the older
//! ziplist and zipmap that earlier versions wrote and 7.0 still loads. Decoders take the whole
//! blob, check it as Redis's `*ValidateIntegrity(deep)` functions do, and never index past it.

pub mod intset;
pub mod listpack;
pub mod ziplist;
pub mod zipmap;

/// One element of a listpack or ziplist: both store integers in binary when the text is a
/// canonical 64-bit integer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl Item<'_> {
    /// The element's text (integers in decimal, as Redis hands them out).
    pub fn to_vec(self) -> Vec<u8> {
        match self {
            Item::Int(i) => {
                let mut out = Vec::with_capacity(20);
                damselfly_protocol::number::push_i64(&mut out, i);
                out
            }
            Item::Bytes(b) => b.to_vec(),
        }
    }
}

/// Why a nested blob was rejected. The RDB reader adds the stream offset of the blob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corrupt(pub String);

impl std::fmt::Display for Corrupt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Little-endian unsigned integer of `N` bytes at `at`, or `None` past the end.
pub(crate) fn le<const N: usize>(b: &[u8], at: usize) -> Option<u64> {
    let bytes = b.get(at..at.checked_add(N)?)?;
    Some(
        bytes
            .iter()
            .rev()
            .fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
    )
}

#[cfg(test)]
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("test hex"))
        .collect()
}
