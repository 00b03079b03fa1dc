//! The maxmemory settings a shard evicts by: `maxmemory-policy` and its tuning knobs
//! (`maxmemory-samples`, `maxmemory-eviction-tenacity`, `lfu-log-factor`, `lfu-decay-time`),
//! with Redis's names. The server keeps them in its configuration and hands a copy to the
//! eviction step (docs/eviction.md); storage knows nothing of where they come from.

/// `maxmemory-policy`: which keys may go when used memory passes `maxmemory`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvictionPolicy {
    /// Nothing is evicted: commands that may grow memory are refused with OOM.
    NoEviction,
    AllKeysLru,
    AllKeysLfu,
    AllKeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl EvictionPolicy {
    /// Every policy with its configuration name, in Redis's order (its CONFIG SET error
    /// lists them so).
    pub const ALL: [(EvictionPolicy, &'static str); 8] = [
        (EvictionPolicy::VolatileLru, "volatile-lru"),
        (EvictionPolicy::VolatileLfu, "volatile-lfu"),
        (EvictionPolicy::VolatileRandom, "volatile-random"),
        (EvictionPolicy::VolatileTtl, "volatile-ttl"),
        (EvictionPolicy::AllKeysLru, "allkeys-lru"),
        (EvictionPolicy::AllKeysLfu, "allkeys-lfu"),
        (EvictionPolicy::AllKeysRandom, "allkeys-random"),
        (EvictionPolicy::NoEviction, "noeviction"),
    ];
}

/// A policy and its tuning, as configured when eviction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EvictionSettings {
    pub policy: EvictionPolicy,
    /// `maxmemory-samples`: keys sampled per victim by the approximated policies.
    pub samples: u32,
    /// `maxmemory-eviction-tenacity` (0-100): how long one eviction step may run.
    pub tenacity: u32,
    /// `lfu-log-factor`: how slowly the logarithmic access counter grows.
    pub lfu_log_factor: u32,
    /// `lfu-decay-time`: minutes after which an idle key's counter is halved (0: never).
    pub lfu_decay_time: u32,
}
