//! The general encoding of hashes and sets: items in a dense vector, found through a hash
//! table of their indexes. The vector gives O(1) random picks (SPOP, SRANDMEMBER, HRANDFIELD)
//! and a scan cursor that needs no rehash bookkeeping; the table costs 4 bytes per item plus
//! control bytes. Removal swaps the last item into the hole, so a cursor that walks from the
//! end towards the start never misses an item that stays in the dictionary for the whole scan.

use std::marker::PhantomData;
use std::sync::OnceLock;

use hashbrown::HashTable;

/// How an item's lookup key is found inside its bytes.
pub trait KeyOf {
    fn key(item: &[u8]) -> &[u8];
}

/// The whole item is the key (set members).
#[derive(Debug, Clone, Copy, Default)]
pub struct Whole;

impl KeyOf for Whole {
    fn key(item: &[u8]) -> &[u8] {
        item
    }
}

/// The hash seed of collection tables: random per process, so clients cannot pick members
/// that collide.
pub fn seed() -> &'static ahash::RandomState {
    static SEED: OnceLock<ahash::RandomState> = OnceLock::new();
    SEED.get_or_init(ahash::RandomState::new)
}

pub fn hash_bytes(b: &[u8]) -> u64 {
    seed().hash_one(b)
}

/// Items in a vector, indexed by a hash table keyed by `K::key(item)`.
pub struct Dict<K> {
    items: Vec<Box<[u8]>>,
    index: HashTable<u32>,
    heap: usize,
    _key: PhantomData<K>,
}

impl<K> Clone for Dict<K> {
    fn clone(&self) -> Self {
        Dict {
            items: self.items.clone(),
            index: self.index.clone(),
            heap: self.heap,
            _key: PhantomData,
        }
    }
}

impl<K> std::fmt::Debug for Dict<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dict")
            .field("len", &self.items.len())
            .finish()
    }
}

impl<K> Default for Dict<K> {
    fn default() -> Self {
        Dict {
            items: Vec::new(),
            index: HashTable::new(),
            heap: 0,
            _key: PhantomData,
        }
    }
}

/// Allocation header and rounding an item's own allocation costs on average.
const ITEM_OVERHEAD: usize = 8;

impl<K: KeyOf> Dict<K> {
    pub fn with_capacity(n: usize) -> Self {
        Dict {
            items: Vec::with_capacity(n),
            index: HashTable::with_capacity(n),
            heap: 0,
            _key: PhantomData,
        }
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Heap bytes held (items, vector, table).
    pub fn mem_size(&self) -> usize {
        self.heap
            + self.items.capacity() * std::mem::size_of::<Box<[u8]>>()
            + self.index.capacity() * (std::mem::size_of::<u32>() + 1)
    }

    fn find(&self, key: &[u8]) -> Option<usize> {
        let items = &self.items;
        self.index
            .find(hash_bytes(key), |&i| K::key(&items[i as usize]) == key)
            .map(|&i| i as usize)
    }

    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.find(key).map(|i| &*self.items[i])
    }

    pub fn contains(&self, key: &[u8]) -> bool {
        self.find(key).is_some()
    }

    /// Inserts or replaces the item with the same key; true when it was new.
    pub fn insert(&mut self, item: Box<[u8]>) -> bool {
        if let Some(i) = self.find(K::key(&item)) {
            self.heap = self.heap + item.len() - self.items[i].len();
            self.items[i] = item;
            return false;
        }
        let i = self.items.len() as u32;
        let items = &self.items;
        self.index
            .insert_unique(hash_bytes(K::key(&item)), i, |&j| {
                hash_bytes(K::key(&items[j as usize]))
            });
        self.heap += item.len() + ITEM_OVERHEAD;
        self.items.push(item);
        true
    }

    /// Removes the item with this key.
    pub fn remove(&mut self, key: &[u8]) -> Option<Box<[u8]>> {
        let i = self.find(key)?;
        Some(self.remove_at(i))
    }

    /// Removes the item at vector position `i`, moving the last item into its place.
    pub fn remove_at(&mut self, i: usize) -> Box<[u8]> {
        let items = &self.items;
        let hash = hash_bytes(K::key(&items[i]));
        if let Ok(slot) = self.index.find_entry(hash, |&j| j as usize == i) {
            slot.remove();
        }
        let last = self.items.len() - 1;
        if i != last {
            let moved_hash = hash_bytes(K::key(&self.items[last]));
            if let Some(slot) = self.index.find_mut(moved_hash, |&j| j as usize == last) {
                *slot = i as u32;
            }
        }
        let item = self.items.swap_remove(i);
        self.heap -= item.len() + ITEM_OVERHEAD;
        if self.items.capacity() > 64 && self.items.len() < self.items.capacity() / 4 {
            self.items.shrink_to(self.items.len() * 2);
            let items = &self.items;
            self.index
                .shrink_to(items.len(), |&j| hash_bytes(K::key(&items[j as usize])));
        }
        item
    }

    /// The item at vector position `i` (for random picks and cursors).
    pub fn at(&self, i: usize) -> &[u8] {
        &self.items[i]
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &[u8]> + ExactSizeIterator {
        self.items.iter().map(|b| &**b)
    }

    /// One step of a scan: returns up to about `count` items below position `cursor` (0 =
    /// start) and the next cursor (0 = done). Walking down from the end means removals, which
    /// move the last item into a hole, only ever move items to positions not yet visited
    /// or re-visit them; nothing present for the whole scan is missed.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, std::ops::Range<usize>) {
        let top = if cursor == 0 {
            self.items.len()
        } else {
            (cursor as usize).min(self.items.len())
        };
        let bottom = top.saturating_sub(count.max(1));
        let next = if bottom == 0 { 0 } else { bottom as u64 };
        (next, bottom..top)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    proptest! {
        #[test]
        fn behaves_like_a_set(ops in proptest::collection::vec((any::<bool>(), 0u8..40), 1..400)) {
            let mut d: Dict<Whole> = Dict::default();
            let mut model = BTreeSet::new();
            for (add, v) in ops {
                let item = vec![v; (v % 5) as usize + 1].into_boxed_slice();
                if add {
                    prop_assert_eq!(d.insert(item.clone()), model.insert(item));
                } else {
                    prop_assert_eq!(d.remove(&item).is_some(), model.remove(&item));
                }
                prop_assert_eq!(d.len(), model.len());
            }
            for m in &model {
                prop_assert!(d.contains(m));
            }
            let all: BTreeSet<Box<[u8]>> = d.iter().map(|i| i.into()).collect();
            prop_assert_eq!(all, model);
        }

        #[test]
        fn scan_sees_every_item_present_throughout(
            initial in 1usize..200,
            removals in proptest::collection::vec(any::<u16>(), 0..100),
            count in 1usize..20,
        ) {
            let mut d: Dict<Whole> = Dict::default();
            for i in 0..initial {
                d.insert(format!("m{i}").into_bytes().into());
            }
            let mut removed = BTreeSet::new();
            let mut seen = BTreeSet::new();
            let mut cursor = 0;
            let mut rem = removals.into_iter();
            loop {
                let (next, range) = d.scan(cursor, count);
                for i in range {
                    seen.insert(d.at(i).to_vec());
                }
                // Between steps, other clients remove and add members.
                if let Some(r) = rem.next() {
                    if !d.is_empty() {
                        let i = r as usize % d.len();
                        removed.insert(d.remove_at(i).to_vec());
                    }
                    d.insert(format!("new{r}").into_bytes().into());
                }
                if next == 0 { break; }
                cursor = next;
            }
            for i in 0..initial {
                let m = format!("m{i}").into_bytes();
                if !removed.contains(&m) {
                    prop_assert!(seen.contains(&m), "missed {:?}", m);
                }
            }
        }
    }
}
