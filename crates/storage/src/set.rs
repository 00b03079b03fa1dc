//! The set type. A set of canonical integers stays a sorted vector of i64 (Redis's `intset`)
//! up to `set-max-intset-entries` members; any other member, or more members, converts it to a
//! [`Dict`] (`hashtable`).

use crate::dict::{Dict, Whole};
use crate::limits::EncodingLimits;
use crate::value::parse_canonical_i64;

#[derive(Debug, Clone)]
pub enum Set {
    Ints(Vec<i64>),
    Dict(Box<Dict<Whole>>),
}

impl Default for Set {
    fn default() -> Self {
        Set::Ints(Vec::new())
    }
}

/// A member as the set stores it.
pub enum Member<'a> {
    Int(i64),
    Bytes(&'a [u8]),
}

impl Member<'_> {
    pub fn to_vec(&self) -> Vec<u8> {
        match self {
            Member::Int(i) => i.to_string().into_bytes(),
            Member::Bytes(b) => b.to_vec(),
        }
    }
}

impl Set {
    pub fn len(&self) -> usize {
        match self {
            Set::Ints(v) => v.len(),
            Set::Dict(d) => d.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Dict(_) => "hashtable",
        }
    }

    pub fn mem_size(&self) -> usize {
        match self {
            Set::Ints(v) => v.capacity() * 8,
            Set::Dict(d) => std::mem::size_of::<Dict<Whole>>() + d.mem_size(),
        }
    }

    pub fn contains(&self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => parse_canonical_i64(m).is_some_and(|i| v.binary_search(&i).is_ok()),
            Set::Dict(d) => d.contains(m),
        }
    }

    /// Adds a member; true when it was new.
    pub fn add(&mut self, m: &[u8], limits: &EncodingLimits) -> bool {
        if let Set::Ints(v) = self {
            if let Some(i) = parse_canonical_i64(m) {
                match v.binary_search(&i) {
                    Ok(_) => return false,
                    Err(pos) if v.len() < limits.set_max_intset_entries => {
                        v.insert(pos, i);
                        return true;
                    }
                    Err(_) => {}
                }
            }
            self.convert();
        }
        match self {
            Set::Dict(d) => d.insert(m.into()),
            Set::Ints(_) => unreachable!("converted above"),
        }
    }

    fn convert(&mut self) {
        if let Set::Ints(v) = self {
            let mut d = Dict::with_capacity(v.len() + 1);
            for i in v.iter() {
                d.insert(i.to_string().into_bytes().into());
            }
            *self = Set::Dict(Box::new(d));
        }
    }

    /// Removes a member; true when it was there.
    pub fn remove(&mut self, m: &[u8]) -> bool {
        match self {
            Set::Ints(v) => match parse_canonical_i64(m).map(|i| v.binary_search(&i)) {
                Some(Ok(pos)) => {
                    v.remove(pos);
                    true
                }
                _ => false,
            },
            Set::Dict(d) => d.remove(m).is_some(),
        }
    }

    /// The member at storage position `i` (< len).
    pub fn at(&self, i: usize) -> Member<'_> {
        match self {
            Set::Ints(v) => Member::Int(v[i]),
            Set::Dict(d) => Member::Bytes(d.at(i)),
        }
    }

    /// Removes and returns the member at storage position `i`.
    pub fn take_at(&mut self, i: usize) -> Vec<u8> {
        match self {
            Set::Ints(v) => v.remove(i).to_string().into_bytes(),
            Set::Dict(d) => d.remove_at(i).into_vec(),
        }
    }

    /// Members in storage order (ascending for intsets).
    pub fn iter(&self) -> Box<dyn Iterator<Item = Member<'_>> + '_> {
        match self {
            Set::Ints(v) => Box::new(v.iter().map(|&i| Member::Int(i))),
            Set::Dict(d) => Box::new(d.iter().map(Member::Bytes)),
        }
    }

    pub fn dict(&self) -> Option<&Dict<Whole>> {
        match self {
            Set::Dict(d) => Some(d),
            Set::Ints(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #[test]
        fn behaves_like_a_set_across_conversion(
            ops in proptest::collection::vec((any::<bool>(), 0u16..100, any::<bool>()), 1..400)
        ) {
            let limits = EncodingLimits { set_max_intset_entries: 20, ..Default::default() };
            let mut s = Set::default();
            let mut model = BTreeSet::new();
            for (add, n, text) in ops {
                let m = if text && n % 7 == 0 { format!("m{n}") } else { n.to_string() }.into_bytes();
                if add {
                    prop_assert_eq!(s.add(&m, &limits), model.insert(m.clone()));
                } else {
                    prop_assert_eq!(s.remove(&m), model.remove(&m));
                }
                prop_assert_eq!(s.len(), model.len());
                if let Set::Ints(v) = &s {
                    prop_assert!(v.len() <= 20);
                    prop_assert!(v.windows(2).all(|w| w[0] < w[1]));
                }
            }
            let all: BTreeSet<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
            prop_assert_eq!(all, model);
        }
    }

    #[test]
    fn intset_until_redis_limits() {
        let limits = EncodingLimits::default();
        let mut s = Set::default();
        for i in 0..512 {
            s.add(i.to_string().as_bytes(), &limits);
        }
        assert_eq!(s.encoding(), "intset");
        assert!(!s.contains(b"007"), "not canonical, so not the integer 7");
        s.add(b"512", &limits);
        assert_eq!(s.encoding(), "hashtable");
        let mut s = Set::default();
        s.add(b"1", &limits);
        s.add(b"a", &limits);
        assert_eq!(s.encoding(), "hashtable");
        assert!(s.contains(b"1") && s.contains(b"a"));
    }
}
