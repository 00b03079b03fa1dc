//! The keyspace table of one database: a segmented hash table in the spirit of Dragonfly's
//! dashtable. A directory indexed by the top bits of the key hash points at segments; a full
//! segment splits in two on its own (extendible hashing), so growth never rehashes the whole
//! table at once. Each segment covers a contiguous range of hash values, which is what lets
//! SCAN walk the table in hash order with a cursor that survives splits and never misses a key
//! that exists for the whole scan.

use hashbrown::HashTable;

pub use crate::entry::Entry;

/// Entries per segment before it splits: 7/8 of 4096 buckets, the most a 4096-bucket
/// hashbrown table holds. Splitting there means a segment never doubles to 8192 buckets only
/// to split right after (measured: RSS for 1M small keys 306 MB -> 278 MB).
const SEGMENT_MAX: usize = 3584;

/// Cursor layout: the top bits name the shard, the rest a position in hash order.
pub const SCAN_SHARD_BITS: u32 = 9;
const SCAN_POS_BITS: u32 = 63 - SCAN_SHARD_BITS;

/// Bytes of table one key takes at full load: its 8-byte slot and hashbrown's control byte.
pub const SLOT_SIZE: usize = std::mem::size_of::<Entry>() + 1;

/// Parts of a segment the snapshot's walk saves in order, chosen by the low bits of the key
/// hash (the directory uses the top bits, so a stripe stays a stripe across splits): a step
/// of the walk can stop after any stripe, about 7 entries of a full segment (3,584 values of
/// 1 KB are 3.5 MB to encode, a stripe of them about 30 us).
const STRIPES: usize = 512;

fn stripe_of(hash: u64) -> usize {
    (hash as usize) & (STRIPES - 1)
}

struct Segment {
    depth: u32,
    /// The last snapshot whose walk reached this segment, and how many of its stripes (in
    /// order) that walk has saved; earlier snapshots saved them all (see `Shard`'s snapshot
    /// hooks). In a stripe the running snapshot has not saved, a write first takes its own
    /// key ([`Table::take_before_write`]). A split's two halves keep both, so entries carry
    /// their state with them.
    walked_by: u64,
    walked: usize,
    /// While a snapshot saves this segment stripe by stripe: its entries' hashes by stripe.
    pending: Option<Box<StripeIndex>>,
    slots: HashTable<Entry>,
}

/// The hashes of a segment's entries when a snapshot's walk first stopped inside it, grouped
/// by stripe, so that each step's stripes find their entries by hash instead of hashing every
/// key of the segment again (reading each key is a cache miss: a pass over 3,584 keys per
/// step would cost more than the step's saves). Keys written after the index was made are
/// the snapshot's taken keys (a new key is taken as absent), which the walk skips whether the
/// index lists them or not. A split gives both halves a copy: a hash finds its entry in
/// whichever half holds it.
#[derive(Clone)]
struct StripeIndex {
    /// The snapshot it was made for.
    version: u64,
    /// Distinct hashes, sorted by stripe.
    hashes: Vec<u64>,
    /// Stripe `i`'s hashes are `hashes[starts[i]..starts[i + 1]]`.
    starts: [u32; STRIPES + 1],
}

impl StripeIndex {
    fn new(version: u64, slots: &HashTable<Entry>, hasher: &ahash::RandomState) -> Self {
        let mut hashes: Vec<u64> = slots.iter().map(|e| hasher.hash_one(e.key())).collect();
        hashes.sort_unstable_by_key(|&h| (stripe_of(h), h));
        hashes.dedup();
        let mut starts = [0u32; STRIPES + 1];
        for &h in &hashes {
            starts[stripe_of(h) + 1] += 1;
        }
        for i in 0..STRIPES {
            starts[i + 1] += starts[i];
        }
        StripeIndex {
            version,
            hashes,
            starts,
        }
    }

    fn stripe(&self, i: usize) -> &[u64] {
        &self.hashes[self.starts[i] as usize..self.starts[i + 1] as usize]
    }
}

impl Segment {
    /// The first stripe snapshot `version` has not saved (`STRIPES` when it saved them all).
    fn walked(&self, version: u64) -> usize {
        match self.walked_by.cmp(&version) {
            std::cmp::Ordering::Less => 0,
            std::cmp::Ordering::Equal => self.walked,
            std::cmp::Ordering::Greater => STRIPES,
        }
    }

    /// Marks stripes `from..to` saved by `version` and returns their entries, but for the
    /// keys writes took already (which leave `taken` here: their stripe is saved now).
    fn take_stripes(
        &mut self,
        from: usize,
        to: usize,
        version: u64,
        hasher: &ahash::RandomState,
        taken: &mut Option<Box<TakenKeys>>,
    ) -> Vec<&Entry> {
        self.walked_by = version;
        self.walked = to;
        let done = to == STRIPES;
        let Segment { pending, slots, .. } = self;
        let index = pending.as_deref().filter(|p| p.version == version);
        let mut entries: Vec<&Entry> = match index {
            _ if from == 0 && done => slots.iter().collect(),
            Some(index) => (from..to)
                .flat_map(|i| index.stripe(i).iter().copied())
                .flat_map(|h| {
                    slots
                        .iter_hash(h)
                        .filter(move |e| hasher.hash_one(e.key()) == h)
                })
                .collect(),
            None => slots
                .iter()
                .filter(|e| (from..to).contains(&stripe_of(hasher.hash_one(e.key()))))
                .collect(),
        };
        if done {
            // Every stripe is saved: the index has served.
            *pending = None;
        }
        if let Some(taken) = taken.as_deref_mut().filter(|t| t.version == version) {
            entries.retain(|e| !taken.keys.remove(e.key()));
        }
        entries
    }
}

/// The keys writes took (saved as they were, or found absent) before the running snapshot's
/// walk reached their stripes: the walk must not save what they hold now.
struct TakenKeys {
    /// The snapshot they belong to.
    version: u64,
    keys: std::collections::HashSet<Box<[u8]>, ahash::RandomState>,
}

/// The hash used inside a shard's tables. Seeds are fixed so SCAN order is reproducible.
fn hasher() -> ahash::RandomState {
    ahash::RandomState::with_seeds(
        0x5a17_c0de_0000_0001,
        0x243f_6a88_85a3_08d3,
        0x1319_8a2e_0370_7344,
        0xa409_3822_299f_31d0,
    )
}

/// A segmented hash table of entries keyed by their key bytes.
pub struct Table {
    hasher: ahash::RandomState,
    global_depth: u32,
    dir: Vec<u32>,
    segments: Vec<Segment>,
    len: usize,
    /// Bytes of the segments' slot arrays, used or not (kept as segments grow and split).
    slot_bytes: usize,
    /// While a snapshot runs: the keys writes took from stripes its walk had not saved.
    taken: Option<Box<TakenKeys>>,
}

/// Bytes of a hashbrown table holding up to `capacity` items: each bucket is a slot and a
/// control byte, and hashbrown fills 7/8 of its buckets.
fn slot_array_bytes(capacity: usize) -> usize {
    match capacity {
        0 => 0,
        c => (c * 8 / 7).next_power_of_two() * SLOT_SIZE,
    }
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

fn dir_index(hash: u64, depth: u32) -> usize {
    if depth == 0 {
        0
    } else {
        (hash >> (64 - depth)) as usize
    }
}

impl Table {
    pub fn new() -> Self {
        Self::with_version(0)
    }

    /// An empty table whose segments count as saved by snapshot `version` (a table created
    /// while that snapshot runs holds nothing it must save).
    pub fn with_version(version: u64) -> Self {
        Table {
            hasher: hasher(),
            global_depth: 0,
            dir: vec![0],
            segments: vec![Segment {
                depth: 0,
                walked_by: version,
                walked: STRIPES,
                pending: None,
                slots: HashTable::new(),
            }],
            len: 0,
            slot_bytes: 0,
            taken: None,
        }
    }

    pub fn hash(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn segment_of(&self, hash: u64) -> usize {
        self.dir[dir_index(hash, self.global_depth)] as usize
    }

    pub fn get(&self, key: &[u8]) -> Option<&Entry> {
        let h = self.hash(key);
        self.segments[self.segment_of(h)]
            .slots
            .find(h, |e| e.key() == key)
    }

    /// Starts loading what a lookup of `key` will read, without waiting for it: the probe
    /// reads the control bytes and the slot (cache misses that overlap when several keys are
    /// prefetched in a row) and prefetches the record of the first slot whose hash tag
    /// matches. A round of pipelined commands does this for all its keys before running
    /// them, so their lookups find the memory in cache.
    pub fn prefetch(&self, key: &[u8]) {
        let h = self.hash(key);
        let _ = self.segments[self.segment_of(h)].slots.find(h, |e| {
            e.prefetch();
            true
        });
    }

    pub fn get_mut(&mut self, key: &[u8]) -> Option<&mut Entry> {
        let h = self.hash(key);
        let seg = self.segment_of(h);
        self.segments[seg].slots.find_mut(h, |e| e.key() == key)
    }

    /// The key of an entry with this full hash that satisfies `f` (expiry by hash).
    pub fn find_by_hash(&self, hash: u64, mut f: impl FnMut(&Entry) -> bool) -> Option<Box<[u8]>> {
        let seg = self.segment_of(hash);
        self.segments[seg]
            .slots
            .find(hash, |e| f(e) && self.hasher.hash_one(e.key()) == hash)
            .map(|e| e.key().into())
    }

    /// Inserts or replaces; returns the previous entry.
    pub fn insert(&mut self, entry: Entry) -> Option<Entry> {
        let h = self.hash(entry.key());
        let mut seg = self.segment_of(h);
        if let Some(old) = self.segments[seg]
            .slots
            .find_mut(h, |e| e.key() == entry.key())
        {
            return Some(std::mem::replace(old, entry));
        }
        if self.segments[seg].slots.len() >= SEGMENT_MAX {
            self.split(seg);
            seg = self.segment_of(h);
        }
        let hasher = self.hasher.clone();
        let slots = &mut self.segments[seg].slots;
        let before = slots.capacity();
        slots.insert_unique(h, entry, |e| hasher.hash_one(e.key()));
        if slots.capacity() != before {
            self.slot_bytes += slot_array_bytes(slots.capacity());
            self.slot_bytes -= slot_array_bytes(before);
        }
        self.len += 1;
        None
    }

    pub fn remove(&mut self, key: &[u8]) -> Option<Entry> {
        let h = self.hash(key);
        let seg = self.segment_of(h);
        match self.segments[seg].slots.find_entry(h, |e| e.key() == key) {
            Ok(occupied) => {
                self.len -= 1;
                Some(occupied.remove().0)
            }
            Err(_) => None,
        }
    }

    /// Splits one full segment in two, doubling the directory if needed.
    fn split(&mut self, seg: usize) {
        if self.segments[seg].depth == self.global_depth {
            // Doubling the directory: every slot i becomes slots 2i and 2i+1.
            let mut dir = Vec::with_capacity(self.dir.len() * 2);
            for &s in &self.dir {
                dir.push(s);
                dir.push(s);
            }
            self.dir = dir;
            self.global_depth += 1;
        }
        let depth = self.segments[seg].depth + 1;
        self.slot_bytes -= slot_array_bytes(self.segments[seg].slots.capacity());
        let bit = 1u64 << (64 - depth);
        let hasher = self.hasher.clone();
        // Sized for its half up front: growing by doubling from empty would leave a trail of
        // freed smaller tables in the allocator on every split.
        let mut moved = HashTable::with_capacity(self.segments[seg].slots.len() / 2 + 64);
        for e in self.segments[seg]
            .slots
            .extract_if(|e| hasher.hash_one(e.key()) & bit != 0)
        {
            let h = hasher.hash_one(e.key());
            moved.insert_unique(h, e, |e: &Entry| hasher.hash_one(e.key()));
        }
        self.segments[seg].depth = depth;
        self.segments[seg]
            .slots
            .shrink_to_fit(|e| hasher.hash_one(e.key()));
        self.slot_bytes += slot_array_bytes(self.segments[seg].slots.capacity());
        self.slot_bytes += slot_array_bytes(moved.capacity());
        let new_id = self.segments.len() as u32;
        let Segment {
            walked_by, walked, ..
        } = self.segments[seg];
        let pending = self.segments[seg].pending.clone();
        self.segments.push(Segment {
            depth,
            walked_by,
            walked,
            pending,
            slots: moved,
        });
        // Directory slots of the old segment whose bit at `depth` is set now point to the new one.
        let shift = self.global_depth - depth;
        for (i, s) in self.dir.iter_mut().enumerate() {
            if *s as usize == seg && (i >> shift) & 1 == 1 {
                *s = new_id;
            }
        }
    }

    pub fn clear(&mut self) {
        *self = Table::new();
    }

    /// Bytes of the slot arrays, used or not: the table's own cost, of which each entry's
    /// `mem_size` counts one full slot.
    pub fn slot_bytes(&self) -> usize {
        self.slot_bytes
    }

    /// A random entry (None when empty): a random segment, then the first entry at or after
    /// a random bucket. Cheap, and close enough to uniform for sampling eviction victims.
    pub fn sample(&self, rng: &mut impl rand::Rng) -> Option<&Entry> {
        if self.len == 0 {
            return None;
        }
        loop {
            let slots = &self.segments[self.segment_of(rng.gen())].slots;
            let buckets = slots.num_buckets();
            if slots.is_empty() {
                continue;
            }
            let start = rng.gen_range(0..buckets);
            if let Some(e) = (start..buckets)
                .chain(0..start)
                .find_map(|i| slots.get_bucket(i))
            {
                return Some(e);
            }
        }
    }

    /// Buckets of segment `seg` (where a CLOCK hand may stand).
    pub fn bucket_count(&self, seg: usize) -> usize {
        self.segments[seg].slots.num_buckets()
    }

    /// The entry in bucket `i` of segment `seg`, if any. Only its access bits may change
    /// through it: the snapshot does not see such edits.
    pub fn bucket_mut(&mut self, seg: usize, i: usize) -> Option<&mut Entry> {
        self.segments[seg].slots.get_bucket_mut(i)
    }

    /// Segments in the table; they are only ever added (by splits).
    pub fn segment_count(&self) -> usize {
        self.segments.len()
    }

    /// Marks segment `seg` saved by snapshot `version`, returning the entries of its stripes
    /// that snapshot had not saved yet (none when it saved them all).
    pub fn mark_segment(&mut self, seg: usize, version: u64) -> Vec<&Entry> {
        self.mark_stripes(seg, version, usize::MAX).0
    }

    /// The walk's part: marks saved by snapshot `version` the stripes of segment `seg` it has
    /// not saved, in stripe order, until about `budget` entries are taken (at least one
    /// stripe), and returns their entries and whether the segment is now saved whole. A
    /// segment nothing saved yet and that fits in the budget is taken without hashing a key.
    pub fn mark_stripes(&mut self, seg: usize, version: u64, budget: usize) -> (Vec<&Entry>, bool) {
        let Table {
            hasher,
            segments,
            taken,
            ..
        } = self;
        let s = &mut segments[seg];
        let from = s.walked(version);
        if from == STRIPES {
            return (Vec::new(), true);
        }
        if from == 0 && s.slots.len() <= budget {
            return (s.take_stripes(0, STRIPES, version, hasher, taken), true);
        }
        if s.pending.as_ref().is_none_or(|p| p.version != version) {
            s.pending = Some(Box::new(StripeIndex::new(version, &s.slots, hasher)));
        }
        let mut to = from;
        if let Some(index) = s.pending.as_deref() {
            let mut counted = 0;
            while to < STRIPES {
                let n = index.stripe(to).len();
                if to > from && counted + n > budget {
                    break;
                }
                counted += n;
                to += 1;
            }
        }
        (
            s.take_stripes(from, to, version, hasher, taken),
            to == STRIPES,
        )
    }

    /// Before a write to `key` while snapshot `version` runs: when the walk has not saved
    /// the key's stripe and no earlier write took the key, takes it now, returning its entry
    /// as it is (to save) or None when it is absent, and the walk will skip the key. A write
    /// costs one entry's save, not its stripe's, and keys nobody writes cost nothing.
    pub fn take_before_write(&mut self, key: &[u8], version: u64) -> Option<&Entry> {
        let h = self.hash(key);
        let seg = self.segment_of(h);
        if stripe_of(h) < self.segments[seg].walked(version) {
            return None;
        }
        let taken = match &mut self.taken {
            Some(t) if t.version == version => t,
            slot => slot.insert(Box::new(TakenKeys {
                version,
                keys: Default::default(),
            })),
        };
        if !taken.keys.insert(key.into()) {
            return None;
        }
        self.segments[seg].slots.find(h, |e| e.key() == key)
    }

    /// Forgets what the snapshot that just ended (or was abandoned) took.
    pub fn end_snapshot(&mut self) {
        self.taken = None;
    }

    pub fn iter(&self) -> impl Iterator<Item = &Entry> {
        self.segments.iter().flat_map(|s| s.slots.iter())
    }

    /// Every entry, by value (recovery moves keys to the shards that own them now).
    pub fn into_entries(self) -> impl Iterator<Item = Entry> {
        self.segments.into_iter().flat_map(|s| s.slots.into_iter())
    }

    /// Removes every entry for which `f` returns false.
    pub fn retain(&mut self, mut f: impl FnMut(&Entry) -> bool) {
        let mut removed = 0;
        for s in &mut self.segments {
            s.slots.retain(|e| {
                let keep = f(e);
                if !keep {
                    removed += 1;
                }
                keep
            });
        }
        self.len -= removed;
    }

    /// A uniformly chosen segment's random entry; None when empty.
    pub fn random_entry(&self, rng: &mut impl rand::Rng) -> Option<&Entry> {
        if self.len == 0 {
            return None;
        }
        // Pick by global position so every entry is equally likely.
        let mut n = rng.gen_range(0..self.len);
        for s in &self.segments {
            if n < s.slots.len() {
                return s.slots.iter().nth(n);
            }
            n -= s.slots.len();
        }
        None
    }

    /// Visits entries in hash order starting at cursor position `pos` (see SCAN_POS_BITS),
    /// calling `f` for at least `count` entries (more when several share a position, or when
    /// finishing a position range). Returns the next position, or 0 when the walk is complete.
    pub fn scan(&self, pos: u64, count: usize, mut f: impl FnMut(&Entry)) -> u64 {
        let shift = 64 - SCAN_POS_BITS;
        let mut from = pos << shift;
        let mut visited = 0;
        loop {
            let seg = &self.segments[self.segment_of(from)];
            // The segment covers [lo, hi) of the hash space.
            let lo = if seg.depth == 0 {
                0
            } else {
                (from >> (64 - seg.depth)) << (64 - seg.depth)
            };
            let hi = if seg.depth == 0 {
                None
            } else {
                lo.checked_add(1u64 << (64 - seg.depth))
            };
            let mut items: Vec<(u64, &Entry)> = seg
                .slots
                .iter()
                .map(|e| (self.hasher.hash_one(e.key()) >> shift, e))
                .filter(|(h, _)| *h >= from >> shift)
                .collect();
            items.sort_unstable_by_key(|(h, _)| *h);
            let mut i = 0;
            while i < items.len() {
                let h = items[i].0;
                // All entries at one position go together so the cursor never splits them.
                while i < items.len() && items[i].0 == h {
                    f(items[i].1);
                    visited += 1;
                    i += 1;
                }
                if visited >= count && i < items.len() {
                    return items[i].0;
                }
            }
            match hi {
                Some(next) => {
                    from = next;
                    if visited >= count {
                        return from >> shift;
                    }
                }
                None => return 0,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::{Value, ValueRef};
    use std::collections::{BTreeSet, HashMap};

    fn entry(k: &[u8], v: i64) -> Entry {
        Entry::new(k, Value::Int(v), 0)
    }

    /// A table of keys `{prefix}0` .. `{prefix}{n - 1}`, each holding its number.
    fn filled(prefix: &str, n: i64) -> Table {
        let mut t = Table::new();
        for i in 0..n {
            t.insert(entry(format!("{prefix}{i}").as_bytes(), i));
        }
        t
    }

    /// A write saves only its own entry, once, before it changes; a key that was absent is
    /// taken as absent; the walk then saves every other entry, so each entry present at the
    /// start is saved exactly once with its old value and nothing written later is.
    #[test]
    fn a_write_saves_only_its_key_and_the_walk_skips_it() {
        let mut t = filled("k", 3000);
        assert_eq!(t.segment_count(), 1);
        let first = t.take_before_write(b"k7", 1).map(|e| int_of(e.value()));
        assert_eq!(first, Some(Some(7)));
        t.insert(entry(b"k7", -7));
        assert!(t.take_before_write(b"k7", 1).is_none(), "saved twice");
        assert!(t.take_before_write(b"new", 1).is_none(), "absent");
        t.insert(entry(b"new", 1));
        assert!(t.take_before_write(b"k8", 1).is_some());
        t.remove(b"k8");
        let rest: BTreeSet<Vec<u8>> = t
            .mark_segment(0, 1)
            .into_iter()
            .map(|e| e.key().to_vec())
            .collect();
        assert_eq!(rest.len(), 2998);
        for k in [&b"k7"[..], b"k8", b"new"] {
            assert!(!rest.contains(k), "{k:?} saved by the walk");
        }
        // Saved stripes: writes take nothing more.
        assert!(t.take_before_write(b"k9", 1).is_none());
        assert!(t.mark_segment(0, 1).is_empty());
        assert!(
            t.segments[0].pending.is_none(),
            "the index outlived the snapshot"
        );
        t.end_snapshot();
        // The next snapshot saves everything again.
        assert_eq!(t.mark_segment(0, 2).len(), 3000);
    }

    /// The walk can stop inside a segment (by stripes): what it saved and what writes took
    /// in between add up to the segment, once each.
    #[test]
    fn the_walk_saves_a_segment_in_steps_around_the_writes() {
        let mut t = filled("k", 3000);
        let mut saved = BTreeSet::new();
        let mut whole = false;
        let mut i = 0;
        while !whole {
            let (entries, done) = t.mark_stripes(0, 1, 100);
            assert!(
                !entries.is_empty() && entries.len() < 300,
                "{}",
                entries.len()
            );
            for e in entries {
                assert!(saved.insert(e.key().to_vec()), "saved twice");
            }
            whole = done;
            for _ in 0..5 {
                let k = format!("k{}", i * 7 % 3000);
                if let Some(e) = t.take_before_write(k.as_bytes(), 1) {
                    assert!(saved.insert(e.key().to_vec()), "saved twice: {k}");
                }
                t.insert(entry(k.as_bytes(), -1));
                i += 1;
            }
        }
        assert_eq!(saved.len(), 3000);
    }

    #[test]
    fn grows_by_splitting_and_keeps_every_key() {
        let mut t = Table::new();
        for i in 0..50_000i64 {
            assert!(t.insert(entry(format!("key:{i}").as_bytes(), i)).is_none());
        }
        assert_eq!(t.len(), 50_000);
        assert!(t.segments.len() > 8, "the table must have split");
        for i in 0..50_000i64 {
            let e = t.get(format!("key:{i}").as_bytes()).expect("present");
            assert_eq!(int_of(e.value()), Some(i));
        }
        for i in (0..50_000i64).step_by(2) {
            assert!(t.remove(format!("key:{i}").as_bytes()).is_some());
        }
        assert_eq!(t.len(), 25_000);
        assert_eq!(t.iter().count(), 25_000);
    }

    #[test]
    fn scan_visits_stable_keys_despite_splits_and_deletes() {
        let mut t = filled("stable:", 3000);
        let mut seen = BTreeSet::new();
        let mut pos = 0;
        let mut round = 0;
        loop {
            pos = t.scan(pos, 10, |e| {
                seen.insert(e.key().to_vec());
            });
            // Churn between calls: grow (forcing splits) and delete other keys.
            for j in 0..40 {
                t.insert(entry(format!("churn:{round}:{j}").as_bytes(), j));
            }
            t.remove(format!("churn:{}:0", round.max(1) - 1).as_bytes());
            round += 1;
            if pos == 0 {
                break;
            }
        }
        for i in 0..3000 {
            assert!(
                seen.contains(format!("stable:{i}").as_bytes()),
                "missed stable:{i}"
            );
        }
    }

    fn int_of(v: ValueRef) -> Option<i64> {
        match v {
            ValueRef::Int(i) => Some(i),
            _ => None,
        }
    }

    proptest::proptest! {
        #[test]
        fn behaves_like_a_hashmap(ops in proptest::collection::vec((0u8..3, 0u16..600, proptest::prelude::any::<i64>()), 1..3000)) {
            let mut t = Table::new();
            let mut model = HashMap::new();
            for (op, k, v) in ops {
                let key = format!("k{k}").into_bytes();
                match op {
                    0 => {
                        let old = t.insert(entry(&key, v)).map(|e| int_of(e.value()));
                        proptest::prop_assert_eq!(old, model.insert(key, v).map(Some));
                    }
                    1 => {
                        let old = t.remove(&key).map(|e| int_of(e.value()));
                        proptest::prop_assert_eq!(old, model.remove(&key).map(Some));
                    }
                    _ => {
                        proptest::prop_assert_eq!(t.get(&key).and_then(|e| int_of(e.value())), model.get(&key).copied());
                    }
                }
                proptest::prop_assert_eq!(t.len(), model.len());
            }
        }
    }
}
