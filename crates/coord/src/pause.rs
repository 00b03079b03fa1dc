//! CLIENT PAUSE: a server-wide pause, of every command or of writes, until a deadline or
//! CLIENT UNPAUSE. A paused command stays in its connection's read buffer, with everything
//! after it, and runs once the pause ends (docs/pubsub.md, "CLIENT PAUSE").

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

#[derive(Default)]
pub struct Pause {
    /// Milliseconds since the epoch when the pause ends; 0 when there is none.
    until_ms: AtomicU64,
    /// Every command waits, not only writes.
    all: AtomicBool,
}

impl Pause {
    /// Pauses until `until_ms`; a pause already running keeps its later end and its
    /// stronger mode, as in Redis.
    pub fn pause(&self, now_ms: u64, until_ms: u64, all: bool) {
        let running = self.until_ms.load(Ordering::Acquire) > now_ms;
        let all = all || (running && self.all.load(Ordering::Relaxed));
        self.all.store(all, Ordering::Relaxed);
        if running {
            self.until_ms.fetch_max(until_ms, Ordering::AcqRel);
        } else {
            self.until_ms.store(until_ms, Ordering::Release);
        }
    }

    pub fn unpause(&self) {
        self.until_ms.store(0, Ordering::Release);
        self.all.store(false, Ordering::Relaxed);
    }

    /// A pause running now: its end, and whether it holds every command (else writes).
    /// `now_ms` is read only while a pause is set (once it is over, it is cleared).
    pub fn running(&self, now_ms: impl FnOnce() -> u64) -> Option<(u64, bool)> {
        let until = self.until_ms.load(Ordering::Acquire);
        if until == 0 {
            return None;
        }
        if until <= now_ms() {
            let _ = self
                .until_ms
                .compare_exchange(until, 0, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        Some((until, self.all.load(Ordering::Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_hold_writes_or_everything_until_their_end() {
        let p = Pause::default();
        assert_eq!(p.running(|| 0), None);
        p.pause(100, 200, false);
        assert_eq!(p.running(|| 150), Some((200, false)));
        // A shorter, stronger pause keeps the later end and takes the stronger mode.
        p.pause(150, 180, true);
        assert_eq!(p.running(|| 150), Some((200, true)));
        assert_eq!(p.running(|| 200), None, "over at its end");
        p.pause(300, 400, false);
        assert_eq!(
            p.running(|| 310),
            Some((400, false)),
            "an ended pause leaves no mode behind"
        );
        p.unpause();
        assert_eq!(p.running(|| 310), None);
    }
}
