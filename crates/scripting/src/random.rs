//! Redis's `math.random` generator: its own `lrand48` (a 48-bit linear congruential
//! generator), one state for the whole process, seeded at start-up and advanced by every call
//! on any thread, so a fresh server gives the same sequence as a fresh redis-server 7.0.

use std::sync::atomic::{AtomicU64, Ordering};

const MULTIPLIER: u64 = 0x5_DEEC_E66D;
const INCREMENT: u64 = 0xB;
const MASK: u64 = (1 << 48) - 1;
const INITIAL: u64 = 0x1234_ABCD_330E;

static STATE: AtomicU64 = AtomicU64::new(INITIAL);

/// The next number in [0, 1), as Redis's `math.random()` computes it.
pub fn next() -> f64 {
    let step = |x: u64| (x.wrapping_mul(MULTIPLIER).wrapping_add(INCREMENT)) & MASK;
    let prev = STATE
        .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| Some(step(x)))
        .unwrap_or(INITIAL);
    let drawn = (step(prev) >> 17) as u32 as i32;
    f64::from(drawn.rem_euclid(i32::MAX)) / f64::from(i32::MAX)
}

/// `math.randomseed(seed)`: Redis's `srand48` of the seed truncated to 32 bits.
pub fn seed(seed: i32) {
    let s = seed as u32 as u64;
    STATE.store(
        ((s >> 16) << 32) | ((s & 0xFFFF) << 16) | 0x330E,
        Ordering::Relaxed,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Figures printed by redis-server 7.0.15 (docs/research/scripting-redis-7.0.md §3.4).
    /// One test, since the state is process-wide.
    #[test]
    fn matches_redis_sequence() {
        let fmt = |v: f64| format!("{:.14}", v);
        assert_eq!(fmt(next()), "0.39646477363839");
        assert_eq!(fmt(next()), "0.84048536971234");
        seed(0);
        assert_eq!(fmt(next()), "0.17082803611217");
    }
}
