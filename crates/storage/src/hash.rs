//! The hash type: field/value pairs. Small hashes are one [`Pack`] of alternating fields and
//! values (Redis's `listpack` encoding); past `hash-max-listpack-entries` fields or a field or
//! value longer than `hash-max-listpack-value` bytes they convert, once and for good, to a
//! [`Dict`] whose items hold field and value in one allocation (`hashtable`).

use crate::dict::{Dict, KeyOf};
use crate::limits::EncodingLimits;
use crate::pack::Pack;
use crate::varint;

/// A dictionary item: varint field length, field, value.
#[derive(Debug, Clone, Copy, Default)]
pub struct Field;

fn split_item(item: &[u8]) -> (&[u8], &[u8]) {
    let (len, p) = varint::read(item);
    (&item[p..p + len], &item[p + len..])
}

fn make_item(field: &[u8], value: &[u8]) -> Box<[u8]> {
    let mut out = Vec::with_capacity(field.len() + value.len() + 5);
    varint::push(&mut out, field.len());
    out.extend_from_slice(field);
    out.extend_from_slice(value);
    out.into_boxed_slice()
}

impl KeyOf for Field {
    fn key(item: &[u8]) -> &[u8] {
        split_item(item).0
    }
}

#[derive(Debug, Clone)]
pub enum Hash {
    Pack(Pack),
    Dict(Box<Dict<Field>>),
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Pack(Pack::new())
    }
}

/// Position of `field` in a pack of alternating fields and values.
fn pack_find(p: &Pack, field: &[u8]) -> Option<usize> {
    let mut pos = p.first();
    while pos < p.end() {
        let (f, next) = p.get(pos);
        if f == field {
            return Some(pos);
        }
        pos = p.get(next).1;
    }
    None
}

impl Hash {
    pub fn len(&self) -> usize {
        match self {
            Hash::Pack(p) => p.len() / 2,
            Hash::Dict(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Pack(_) => "listpack",
            Hash::Dict(_) => "hashtable",
        }
    }

    pub fn mem_size(&self) -> usize {
        match self {
            Hash::Pack(p) => p.mem_size(),
            Hash::Dict(d) => std::mem::size_of::<Dict<Field>>() + d.mem_size(),
        }
    }

    pub fn get(&self, field: &[u8]) -> Option<&[u8]> {
        match self {
            Hash::Pack(p) => pack_find(p, field).map(|pos| {
                let next = p.get(pos).1;
                p.get(next).0
            }),
            Hash::Dict(d) => d.get(field).map(|item| split_item(item).1),
        }
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.get(field).is_some()
    }

    /// Sets a field; true when it was new. Converts the encoding when a limit is crossed.
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: &EncodingLimits) -> bool {
        if let Hash::Pack(p) = self {
            if field.len() > limits.hash_max_value || value.len() > limits.hash_max_value {
                self.convert();
            } else if let Some(pos) = pack_find(p, field) {
                let next = p.get(pos).1;
                p.replace(next, value);
                return false;
            } else if p.len() / 2 < limits.hash_max_entries {
                p.push_back(field);
                p.push_back(value);
                return true;
            } else {
                self.convert();
            }
        }
        match self {
            Hash::Dict(d) => d.insert(make_item(field, value)),
            Hash::Pack(_) => unreachable!("converted above"),
        }
    }

    /// Switches to the dictionary encoding.
    pub fn convert(&mut self) {
        if let Hash::Pack(p) = self {
            let mut d = Dict::with_capacity(p.len() / 2);
            let mut it = p.iter();
            while let (Some(f), Some(v)) = (it.next(), it.next()) {
                d.insert(make_item(f, v));
            }
            *self = Hash::Dict(Box::new(d));
        }
    }

    /// Removes a field; true when it existed.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Pack(p) => match pack_find(p, field) {
                Some(pos) => {
                    p.remove(pos, 2);
                    p.shrink();
                    true
                }
                None => false,
            },
            Hash::Dict(d) => d.remove(field).is_some(),
        }
    }

    /// Fields and values in storage order.
    pub fn iter(&self) -> Box<dyn Iterator<Item = (&[u8], &[u8])> + '_> {
        match self {
            Hash::Pack(p) => {
                let mut it = p.iter();
                Box::new(std::iter::from_fn(move || Some((it.next()?, it.next()?))))
            }
            Hash::Dict(d) => Box::new(d.iter().map(split_item)),
        }
    }

    /// The pair at storage position `i` (< len), for random picks.
    pub fn at(&self, i: usize) -> (&[u8], &[u8]) {
        match self {
            Hash::Pack(p) => {
                let pos = p.position(2 * i);
                let (f, next) = p.get(pos);
                (f, p.get(next).0)
            }
            Hash::Dict(d) => split_item(d.at(i)),
        }
    }

    /// Dictionary scan step (None for the pack encoding, which is returned whole).
    pub fn dict(&self) -> Option<&Dict<Field>> {
        match self {
            Hash::Dict(d) => Some(d),
            Hash::Pack(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #[test]
        fn behaves_like_a_map_across_conversion(
            ops in proptest::collection::vec((0u8..3, 0u16..300, 0usize..80), 1..500)
        ) {
            let limits = EncodingLimits { hash_max_entries: 16, hash_max_value: 40, ..Default::default() };
            let mut h = Hash::default();
            let mut model = BTreeMap::new();
            for (op, f, vlen) in ops {
                let field = format!("f{f}").into_bytes();
                let value = vec![b'v'; vlen];
                match op {
                    0 | 1 => {
                        let new = h.set(&field, &value, &limits);
                        prop_assert_eq!(new, model.insert(field, value).is_none());
                    }
                    _ => prop_assert_eq!(h.remove(&field), model.remove(&field).is_some()),
                }
                prop_assert_eq!(h.len(), model.len());
                let should_be_packed = matches!(h, Hash::Pack(_));
                if should_be_packed {
                    prop_assert!(model.len() <= 16);
                }
            }
            for (f, v) in &model {
                prop_assert_eq!(h.get(f), Some(v.as_slice()));
            }
            let all: BTreeMap<Vec<u8>, Vec<u8>> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            prop_assert_eq!(all, model);
        }
    }

    #[test]
    fn converts_at_redis_thresholds() {
        let limits = EncodingLimits::default();
        let mut h = Hash::default();
        for i in 0..128 {
            h.set(format!("f{i}").as_bytes(), b"v", &limits);
        }
        assert_eq!(h.encoding(), "listpack");
        h.set(b"one-more", b"v", &limits);
        assert_eq!(h.encoding(), "hashtable");
        let mut h = Hash::default();
        h.set(b"f", &[b'x'; 64], &limits);
        assert_eq!(h.encoding(), "listpack");
        h.set(b"f", &[b'x'; 65], &limits);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"f").map(<[u8]>::len), Some(65));
    }
}
