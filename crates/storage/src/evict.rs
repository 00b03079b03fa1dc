//! Eviction: which key a shard drops when it is over its share of `maxmemory`, and the
//! per-key access information the choice rests on.
//!
//! Every key carries 16 bits of access information in its table slot (`Entry::access`), so
//! LRU and LFU cost nothing per key. Under an LRU policy they are a clock in seconds (Redis
//! keeps 24 bits; 16 wrap after 18.2 hours, so a key idle longer than that looks younger
//! than it is). Under an LFU policy they are Redis's pair: the high byte is the time of the
//! last decrement in minutes (wrapping after 4.3 hours, where Redis's 16 bits wrap after 45
//! days), the low byte the logarithmic access counter.
//!
//! Victims are chosen as Redis chooses them: sample `maxmemory-samples` keys, keep the best
//! candidates in a small pool across rounds, drop the best. `volatile-*` policies sample the
//! keys with a TTL only (from the expiry heap), and `volatile-ttl` takes the nearest deadline
//! straight from that heap.
//!
//! `allkeys-clock` is Damselfly's cache mode: no sampling and no clock per key. A hand sweeps
//! the table's slots in order; each key's access bits are a 2-bit counter that a read or
//! write raises (to at most 3) and the hand lowers; the hand evicts the first key it finds
//! at 0. Keys used since the hand last passed survive, and keys used often survive several
//! passes, so one-off keys (scans, cold misses) go before the hot set does (docs/eviction.md
//! compares its hit rate with Redis's policies).

use crate::entry::Entry;

/// Redis's `maxmemory-policy` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Policy {
    #[default]
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
    /// Damselfly's cache mode (not a Redis policy): a CLOCK sweep over every key.
    AllKeysClock,
}

impl Policy {
    pub const ALL: [Policy; 9] = [
        Policy::NoEviction,
        Policy::AllKeysLru,
        Policy::AllKeysLfu,
        Policy::AllKeysRandom,
        Policy::VolatileLru,
        Policy::VolatileLfu,
        Policy::VolatileRandom,
        Policy::VolatileTtl,
        Policy::AllKeysClock,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::NoEviction => "noeviction",
            Policy::AllKeysLru => "allkeys-lru",
            Policy::AllKeysLfu => "allkeys-lfu",
            Policy::AllKeysRandom => "allkeys-random",
            Policy::VolatileLru => "volatile-lru",
            Policy::VolatileLfu => "volatile-lfu",
            Policy::VolatileRandom => "volatile-random",
            Policy::VolatileTtl => "volatile-ttl",
            Policy::AllKeysClock => "allkeys-clock",
        }
    }

    /// The policy a `maxmemory-policy` value names (case-insensitive, as Redis).
    pub fn parse(name: &str) -> Option<Policy> {
        Policy::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name))
    }

    /// Access information is an LFU counter (else an LRU clock).
    pub fn is_lfu(self) -> bool {
        matches!(self, Policy::AllKeysLfu | Policy::VolatileLfu)
    }

    /// The policy reads keys' access information (LRU or LFU).
    pub fn tracks_access(self) -> bool {
        !matches!(
            self,
            Policy::NoEviction
                | Policy::AllKeysRandom
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    /// Access information is a CLOCK counter (cache mode).
    pub fn is_clock(self) -> bool {
        self == Policy::AllKeysClock
    }

    /// Only keys with a TTL may be evicted.
    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }
}

/// The highest CLOCK counter: a key survives at most this many passes of the hand unused.
pub const CLOCK_MAX: u16 = 3;

/// The counter a new key starts with under LFU (Redis's LFU_INIT_VAL), so that a key just
/// written is not the first to go.
pub const LFU_INIT: u8 = 5;

/// The eviction settings a shard applies, copied from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct EvictionConfig {
    /// The process's `maxmemory` (0: no limit); each shard's share is set apart.
    pub maxmemory: u64,
    pub policy: Policy,
    /// Keys sampled per round (`maxmemory-samples`).
    pub samples: usize,
    /// `lfu-log-factor`: how many accesses it takes to raise the counter.
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`: minutes for the counter to drop by one (0: never).
    pub lfu_decay_time: u64,
    /// `maxmemory-eviction-tenacity` (0-100): how many keys one eviction pass may remove.
    pub tenacity: u32,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig {
            maxmemory: 0,
            policy: Policy::NoEviction,
            samples: 5,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            tenacity: 10,
        }
    }
}

/// The LRU clock: seconds, wrapping at 16 bits.
fn lru_clock(now_ms: u64) -> u16 {
    (now_ms / 1000) as u16
}

/// LFU time: minutes, wrapping at 8 bits.
fn lfu_minutes(now_ms: u64) -> u8 {
    (now_ms / 60_000) as u8
}

/// Seconds since the key's last access under LRU (OBJECT IDLETIME).
pub fn idle_seconds(access: u16, now_ms: u64) -> u64 {
    lru_clock(now_ms).wrapping_sub(access) as u64
}

/// The key's LFU counter after the decay its idle minutes call for (OBJECT FREQ).
pub fn lfu_count(access: u16, now_ms: u64, decay_time: u64) -> u8 {
    let (last, counter) = ((access >> 8) as u8, access as u8);
    let elapsed = lfu_minutes(now_ms).wrapping_sub(last) as u64;
    let periods = elapsed.checked_div(decay_time).unwrap_or(0);
    counter.saturating_sub(periods.min(255) as u8)
}

impl EvictionConfig {
    /// Keys one eviction pass may remove before the command goes on (Redis bounds a pass by
    /// time, 500 µs at the default tenacity of 10): 64 at 10, doubling every 10 points,
    /// unbounded at 100.
    pub fn budget(&self) -> usize {
        match self.tenacity {
            100.. => usize::MAX,
            t => 32 << (t / 10),
        }
    }

    /// A new key's access information.
    pub fn initial_access(&self, now_ms: u64) -> u16 {
        if self.policy.is_clock() {
            // A new key survives the hand's next pass.
            1
        } else if self.policy.is_lfu() {
            (lfu_minutes(now_ms) as u16) << 8 | LFU_INIT as u16
        } else {
            lru_clock(now_ms)
        }
    }

    /// The access information RESTORE's IDLETIME or FREQ gives a key (Redis's
    /// objectSetLRUOrLFU): under an LFU policy the counter `freq`, under LRU (or no policy)
    /// a last access `idle` seconds ago (at most the clock's 18 hours). None when the option
    /// given does not apply to the policy, or under cache mode, which keeps no clock.
    pub fn restored_access(&self, idle: Option<u64>, freq: Option<u8>, now_ms: u64) -> Option<u16> {
        if self.policy.is_clock() {
            None
        } else if self.policy.is_lfu() {
            freq.map(|f| (lfu_minutes(now_ms) as u16) << 8 | f as u16)
        } else {
            idle.map(|i| lru_clock(now_ms).wrapping_sub(i.min(u16::MAX as u64) as u16))
        }
    }

    /// Redis's `lru` field of DEBUG OBJECT for a key's access information: the 24-bit LRU
    /// clock (seconds) of its last access, or under LFU the 16-bit minute of its last
    /// decrement and its counter.
    pub fn redis_lru_field(&self, access: u16, now_ms: u64) -> u64 {
        if self.policy.is_lfu() {
            let (last, counter) = ((access >> 8) as u8, access as u8);
            let elapsed = u64::from(lfu_minutes(now_ms).wrapping_sub(last));
            ((now_ms / 60_000 - elapsed) & 0xffff) << 8 | u64::from(counter)
        } else {
            (now_ms / 1000 - idle_seconds(access, now_ms)) & 0xff_ffff
        }
    }

    /// Records an access to `e`: the clock under LRU; under LFU the decayed counter, raised
    /// with probability 1 / ((counter - LFU_INIT) * lfu-log-factor + 1) as Redis does.
    /// `random` is a uniform draw in [0, 1).
    pub fn touch(&self, e: &mut Entry, now_ms: u64, random: f64) {
        if self.policy.is_clock() {
            e.set_access((e.access() + 1).min(CLOCK_MAX));
            return;
        }
        if !self.policy.is_lfu() {
            e.set_access(lru_clock(now_ms));
            return;
        }
        let mut counter = lfu_count(e.access(), now_ms, self.lfu_decay_time);
        if counter < 255 {
            let base = counter.saturating_sub(LFU_INIT) as f64;
            if random < 1.0 / (base * self.lfu_log_factor as f64 + 1.0) {
                counter += 1;
            }
        }
        e.set_access((lfu_minutes(now_ms) as u16) << 8 | counter as u16);
    }

    /// How good a victim `e` is: higher goes first.
    pub fn score(&self, e: &Entry, now_ms: u64) -> u64 {
        match self.policy {
            Policy::VolatileTtl => u64::MAX - e.expire_at(),
            p if p.is_lfu() => 255 - lfu_count(e.access(), now_ms, self.lfu_decay_time) as u64,
            Policy::AllKeysRandom | Policy::VolatileRandom | Policy::AllKeysClock => 0,
            _ => idle_seconds(e.access(), now_ms),
        }
    }
}

/// Best victims seen so far, best last (Redis's eviction pool of 16).
#[derive(Debug, Default)]
pub struct Pool {
    candidates: Vec<Candidate>,
}

#[derive(Debug)]
pub struct Candidate {
    pub score: u64,
    pub db: usize,
    pub key: Box<[u8]>,
}

const POOL_SIZE: usize = 16;

impl Pool {
    /// Offers a sampled key; the pool keeps the best `POOL_SIZE`, each key once.
    pub fn offer(&mut self, score: u64, db: usize, key: &[u8]) {
        if let Some(c) = self
            .candidates
            .iter_mut()
            .find(|c| c.db == db && &*c.key == key)
        {
            c.score = score;
        } else if self.candidates.len() < POOL_SIZE || score > self.candidates[0].score {
            if self.candidates.len() == POOL_SIZE {
                self.candidates.remove(0);
            }
            self.candidates.push(Candidate {
                score,
                db,
                key: key.into(),
            });
        }
        self.candidates.sort_by_key(|c| c.score);
    }

    /// The best candidate, taken out of the pool.
    pub fn take_best(&mut self) -> Option<Candidate> {
        self.candidates.pop()
    }

    pub fn clear(&mut self) {
        self.candidates.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Value;

    #[test]
    fn policies_parse_by_name_in_any_case() {
        for p in Policy::ALL {
            assert_eq!(Policy::parse(&p.name().to_uppercase()), Some(p));
        }
        assert_eq!(Policy::parse("allkeys-lfu-ish"), None);
    }

    #[test]
    fn lru_measures_idle_seconds_across_the_wrap() {
        let cfg = EvictionConfig {
            policy: Policy::AllKeysLru,
            ..Default::default()
        };
        let mut e = Entry::new(b"k", Value::Int(1), 0);
        let t = 65_535_000; // one second before the 16-bit clock wraps
        cfg.touch(&mut e, t, 0.0);
        assert_eq!(idle_seconds(e.access(), t + 3_000), 3);
        assert!(cfg.score(&e, t + 10_000) > cfg.score(&e, t + 1_000));
    }

    #[test]
    fn lfu_counts_logarithmically_and_decays_by_the_minute() {
        let cfg = EvictionConfig {
            policy: Policy::AllKeysLfu,
            ..Default::default()
        };
        let now = 1_000 * 60_000;
        let mut e = Entry::new(b"k", Value::Int(1), 0);
        e.set_access(cfg.initial_access(now));
        assert_eq!(lfu_count(e.access(), now, 1), LFU_INIT);
        // A draw of 0 always counts; a draw of 0.5 counts only while the odds are above it.
        for _ in 0..10 {
            cfg.touch(&mut e, now, 0.0);
        }
        assert_eq!(lfu_count(e.access(), now, 1), LFU_INIT + 10);
        cfg.touch(&mut e, now, 0.5);
        assert_eq!(lfu_count(e.access(), now, 1), LFU_INIT + 10);
        assert_eq!(lfu_count(e.access(), now + 3 * 60_000, 1), LFU_INIT + 7);
        assert_eq!(lfu_count(e.access(), now + 3 * 60_000, 0), LFU_INIT + 10);
    }

    #[test]
    fn the_pool_keeps_the_best_candidates_once() {
        let mut pool = Pool::default();
        for i in 0..40u64 {
            pool.offer(i % 20, 0, format!("k{}", i % 20).as_bytes());
        }
        let best: Vec<u64> = std::iter::from_fn(|| pool.take_best().map(|c| c.score)).collect();
        assert_eq!(best, (4..20).rev().collect::<Vec<_>>());
    }
}
