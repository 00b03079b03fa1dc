//! The process's memory allocator and its figures (docs/memory.md): the global allocator the
//! server binary installs ([`Allocator`], jemalloc, chosen by measurement), the statistics
//! INFO memory and MEMORY STATS report ([`AllocatorStats`], the resident set from the kernel),
//! and the allocator's own controls (`MEMORY PURGE`, `MEMORY MALLOC-STATS`). No other crate
//! talks to the allocator directly.

use tikv_jemalloc_ctl::{background_thread, epoch, raw, stats, stats_print};

/// The allocator the server binary installs with `#[global_allocator]`.
pub use tikv_jemallocator::Jemalloc as Allocator;

/// INFO's `mem_allocator`, as Redis names it.
pub const ALLOCATOR_NAME: &str = "jemalloc-5.3.0";

/// jemalloc's `MALLCTL_ARENAS_ALL`: an arena index meaning every arena.
const ARENAS_ALL: u32 = 4096;

/// How long freed pages stay with the allocator before its background thread returns them to
/// the kernel. jemalloc's default is 10 s; a store that frees memory in bulk (a table that grew,
/// a deadline heap that doubled, FLUSHALL) would keep that much resident for as long.
pub const DECAY_MS: isize = 1000;

/// Starts jemalloc's background thread, which returns freed pages to the kernel after
/// [`DECAY_MS`] (as Redis's `jemalloc-bg-thread yes` does; without it pages are returned only
/// from inside later allocation calls), and sets that decay on every arena. Returns false if
/// this jemalloc refused any of it.
pub fn start_background_purging() -> bool {
    let mut ok = background_thread::write(true).is_ok();
    // SAFETY: these controls take an ssize_t, which `isize` is.
    unsafe {
        for name in ["arenas.dirty_decay_ms\0", "arenas.muzzy_decay_ms\0"] {
            ok &= raw::write(name.as_bytes(), DECAY_MS).is_ok();
        }
        // The arenas made already; the others are made with the defaults set above (and
        // refuse the setting until then, so their errors are not failures).
        let arenas = raw::read::<u32>(b"arenas.narenas\0").unwrap_or(0);
        for arena in 0..arenas {
            for kind in ["dirty", "muzzy"] {
                let name = format!("arena.{arena}.{kind}_decay_ms\0");
                let _ = raw::write(name.as_bytes(), DECAY_MS);
            }
        }
    }
    ok
}

/// What the allocator holds, in bytes, as of the moment [`AllocatorStats::read`] ran.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AllocatorStats {
    /// Bytes the arenas have handed out, the thread caches' free objects included
    /// (`allocator_allocated`).
    pub allocated: u64,
    /// Bytes in pages that hold at least one allocation (`allocator_active`).
    pub active: u64,
    /// Bytes of the allocator's pages that are resident in RAM, metadata included
    /// (`allocator_resident`).
    pub resident: u64,
    /// Bytes of the allocator's own bookkeeping.
    pub metadata: u64,
    /// Bytes mapped in active extents.
    pub mapped: u64,
    /// Bytes of address space kept mapped but given back to the kernel.
    pub retained: u64,
    /// Bytes of free objects the threads' caches hold (cached or stashed): allocated as far
    /// as the arenas know, free as far as the program does.
    pub thread_cached: u64,
}

impl AllocatorStats {
    /// Refreshes jemalloc's statistics (advancing its epoch: a lock over every arena, some
    /// microseconds, so this is for ticks and introspection, never per command) and reads
    /// them. All zero if the statistics cannot be read.
    pub fn read() -> AllocatorStats {
        if epoch::advance().is_err() {
            return AllocatorStats::default();
        }
        let get = |r: tikv_jemalloc_ctl::Result<usize>| r.map_or(0, |v| v as u64);
        AllocatorStats {
            allocated: get(stats::allocated::read()),
            active: get(stats::active::read()),
            resident: get(stats::resident::read()),
            metadata: get(stats::metadata::read()),
            mapped: get(stats::mapped::read()),
            retained: get(stats::retained::read()),
            thread_cached: ["tcache_bytes", "tcache_stashed_bytes"]
                .iter()
                .map(|stat| {
                    let name = format!("stats.arenas.{ARENAS_ALL}.{stat}\0");
                    // SAFETY: both controls are a size_t, which `usize` is.
                    get(unsafe { raw::read::<usize>(name.as_bytes()) })
                })
                .sum(),
        }
    }

    /// Bytes the program holds: allocated less what the thread caches hold free (Redis's
    /// `used_memory` counts the program's allocations the same way, with its own counter).
    pub fn in_use(&self) -> u64 {
        self.allocated.saturating_sub(self.thread_cached)
    }
}

/// `MEMORY PURGE`: returns every arena's unused dirty pages to the kernel now. Returns false
/// if jemalloc refused.
pub fn purge() -> bool {
    let name = format!("arena.{ARENAS_ALL}.purge\0");
    // SAFETY: a void control takes no old or new value; both pointers are null, the name
    // is NUL-terminated and outlives the call.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

/// `MEMORY MALLOC-STATS`: jemalloc's own report, as Redis returns it.
pub fn malloc_stats() -> String {
    let mut out = Vec::new();
    match stats_print::stats_print(&mut out, stats_print::Options::default()) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => "Stats not supported for the current allocator".to_owned(),
    }
}

/// The process's resident set size in bytes, from /proc (0 where there is none).
pub fn rss_bytes() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page)
}

/// The machine's RAM in bytes (INFO's `total_system_memory`), 0 if unknown.
pub fn total_system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kib| kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[global_allocator]
    static GLOBAL: Allocator = Allocator;

    #[test]
    fn allocations_show_in_the_statistics_and_purge_returns_pages() {
        // Other tests' threads allocate and free meanwhile: 1 MB of slack either way.
        let slack = 1 << 20;
        let before = AllocatorStats::read();
        let block = vec![7u8; 8 << 20];
        let during = AllocatorStats::read();
        assert!(
            during.allocated + slack >= before.allocated + (8 << 20),
            "{before:?} {during:?}"
        );
        assert!(during.active >= during.allocated);
        assert!(during.resident >= during.active);
        assert!(during.in_use() <= during.allocated);
        assert!(during.in_use() + slack >= before.in_use() + (8 << 20));
        drop(block);
        assert!(purge());
        let after = AllocatorStats::read();
        assert!(
            after.allocated + (8 << 20) <= during.allocated + slack,
            "{during:?} {after:?}"
        );
        assert!(after.resident < during.resident, "{during:?} {after:?}");
    }

    #[test]
    fn malloc_stats_is_jemallocs_report() {
        let report = malloc_stats();
        assert!(report.contains("Begin jemalloc statistics"), "{report}");
        assert!(report.contains("End jemalloc statistics"));
    }

    #[test]
    fn the_process_has_a_resident_set_and_the_machine_memory() {
        assert!(rss_bytes() > 0);
        assert!(total_system_memory() > rss_bytes());
    }
}
