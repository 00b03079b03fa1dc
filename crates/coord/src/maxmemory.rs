//! maxmemory (docs/eviction.md): the shards' used memory summed where every thread can read
//! it without a message (`MemoryGauge`, each worker publishing its own shard's share, plus
//! what else the allocator holds, sampled each tick; also the allocator's peak), the
//! over-the-limit decision Redis makes before a command that may grow memory
//! (`Worker::out_of_memory`), eviction down to each shard's share (`Worker::evict_to_share`,
//! the victims chosen by storage's `evict`), the time spent over the limit for INFO, and Redis's
//! rules for which client commands are refused when over it (`Connection::oom_refusal`,
//! `Connection::command_flags`; scripts' own calls follow `CallOom`).

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use damselfly_commands::table::{flags, CommandSpec, CoordCmd, Handler, COMMANDS};
use damselfly_commands::Args;
use damselfly_memory::AllocatorStats;
use damselfly_scripting::shebang::parse_eval;
use damselfly_scripting::{sha1_hex, ScriptFlags};
use damselfly_storage::{Eviction, Policy};

use crate::connection::Connection;
use crate::messages::{HopFn, ShardMsg};
use crate::worker::Worker;

/// The reply to a command refused for memory (Redis's `shared.oomerr`).
pub const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// A script declaring flags, run while over the limit without `allow-oom` (or `no-writes`).
pub(crate) const OOM_NOT_ALLOWED: &str =
    "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'";

/// A shard republishes its usage once it moved by more than `maxmemory / (shards * this)`
/// bytes from what it last published, so the sum every thread reads is within `maxmemory /
/// PUBLISH_FRACTION` (under 1%) of the shards' true total.
const PUBLISH_FRACTION: u64 = 128;
/// The publishing step without a limit, or with a large one: one shared write per 64 KiB of
/// change (with 1 KB values, per 64 writes), so even 64 shards together are within 4 MiB.
const PUBLISH_MAX_STEP: u64 = 64 << 10;

/// What every shard published of its used memory, summed, and the time the server spent over
/// `maxmemory`. Aligned to its own cache lines: shards add to it while other threads read it,
/// and it must not share a line with the transaction counter.
#[repr(align(128))]
pub struct MemoryGauge {
    total: AtomicU64,
    /// What the allocator holds beyond the shards' published data (connections, scripts,
    /// the server's own structures), sampled at thread 0's ticks (0 without a limit): the
    /// limit applies to all the process allocates, as Redis's does. An i64 stored as its
    /// bits: negative where the shards' estimates exceed what the allocator gave them.
    overhead: AtomicU64,
    /// The most the allocator was seen holding (INFO's `used_memory_peak`).
    peak: AtomicU64,
    /// What the allocator held at the first sample, once the server had started
    /// (`used_memory_startup`).
    startup: AtomicU64,
    /// When the server was found over the limit, in microseconds since `origin` plus one; 0
    /// while it is under.
    exceeded_since: AtomicU64,
    /// Microseconds over the limit in spells that ended.
    exceeded_total: AtomicU64,
    origin: Instant,
}

impl Default for MemoryGauge {
    fn default() -> Self {
        MemoryGauge {
            total: AtomicU64::new(0),
            overhead: AtomicU64::new(0),
            peak: AtomicU64::new(0),
            startup: AtomicU64::new(0),
            exceeded_since: AtomicU64::new(0),
            exceeded_total: AtomicU64::new(0),
            origin: Instant::now(),
        }
    }
}

impl MemoryGauge {
    fn now_us(&self) -> u64 {
        self.origin.elapsed().as_micros() as u64 + 1
    }

    /// Records whether the server is over the limit now: starts or ends a spell.
    fn note(&self, over: bool) {
        let since = self.exceeded_since.load(Ordering::Relaxed);
        if over && since == 0 {
            let _ = self.exceeded_since.compare_exchange(
                0,
                self.now_us(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        } else if !over && since != 0 {
            let since = self.exceeded_since.swap(0, Ordering::Relaxed);
            if since != 0 {
                self.exceeded_total
                    .fetch_add(self.now_us().saturating_sub(since), Ordering::Relaxed);
            }
        }
    }

    /// INFO's `total_eviction_exceeded_time` and `current_eviction_exceeded_time`, in
    /// milliseconds: all time over the limit, and the current spell's.
    pub fn exceeded_ms(&self) -> (u64, u64) {
        let since = self.exceeded_since.load(Ordering::Relaxed);
        let current = if since == 0 {
            0
        } else {
            self.now_us().saturating_sub(since)
        };
        let total = self.exceeded_total.load(Ordering::Relaxed) + current;
        (total / 1000, current / 1000)
    }

    /// Reads the allocator's figures, raising the peak (and noting the start-up figure the
    /// first time).
    pub fn sample(&self) -> AllocatorStats {
        let stats = AllocatorStats::read();
        let used = stats.in_use();
        self.peak.fetch_max(used, Ordering::Relaxed);
        let _ = self
            .startup
            .compare_exchange(0, used, Ordering::Relaxed, Ordering::Relaxed);
        stats
    }

    /// Samples the allocator and, under a limit, what it holds beyond the shards' data.
    fn sample_overhead(&self, maxmemory: u64) {
        let used = self.sample().in_use();
        let overhead = match maxmemory {
            0 => 0,
            _ => used.wrapping_sub(self.total.load(Ordering::Relaxed)),
        };
        self.overhead.store(overhead, Ordering::Relaxed);
    }

    /// The last sampled overhead (negative where the shards' estimates exceed the
    /// allocator's figure).
    fn overhead(&self) -> i64 {
        self.overhead.load(Ordering::Relaxed) as i64
    }

    /// The most the allocator was seen holding.
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed)
    }

    /// What the allocator held once the server had started.
    pub fn startup(&self) -> u64 {
        self.startup.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT: forgets the time spent over the limit, as Redis does.
    pub fn reset_exceeded(&self) {
        self.exceeded_total.store(0, Ordering::Relaxed);
        self.exceeded_since.store(0, Ordering::Relaxed);
    }
}

/// A worker's share of the gauge: what it last published and how far its shard may drift
/// before it publishes again. Only the owning thread touches it.
pub(crate) struct Published {
    bytes: Cell<u64>,
    step: Cell<u64>,
}

impl Default for Published {
    fn default() -> Self {
        Published {
            bytes: Cell::new(0),
            step: Cell::new(PUBLISH_MAX_STEP),
        }
    }
}

impl Worker {
    /// Publishes this shard's used memory to the gauge when it drifted past the step (after
    /// every command, message and tick), or always when `exact`.
    pub(crate) fn publish_memory(&self, exact: bool) {
        // Without a limit nobody reads the gauge; setting one publishes exactly.
        if !exact && self.cluster.config.maxmemory.load(Ordering::Relaxed) == 0 {
            return;
        }
        let used = self.shard.borrow().footprint() as u64;
        let published = self.published_memory.bytes.get();
        if exact || used.abs_diff(published) > self.published_memory.step.get() {
            // Wrapping: a shrinking shard adds a negative difference.
            self.cluster
                .memory
                .total
                .fetch_add(used.wrapping_sub(published), Ordering::Relaxed);
            self.published_memory.bytes.set(used);
        }
    }

    /// Sets the publishing step for the configured limit and publishes exactly, so a limit
    /// just set is compared with a fresh sum (called when the configuration changes).
    pub(crate) fn refresh_memory_step(&self, maxmemory: u64) {
        let shards = self.num_shards() as u64;
        let step = match maxmemory {
            0 => PUBLISH_MAX_STEP,
            max => (max / (shards * PUBLISH_FRACTION)).min(PUBLISH_MAX_STEP),
        };
        self.published_memory.step.set(step);
        self.publish_memory(true);
    }

    /// The process's used memory as the limit sees it: the other shards' published usage,
    /// this shard's own (exact) and the allocator's last sampled overhead.
    pub(crate) fn used_memory_for_limit(&self) -> u64 {
        let own = self.shard.borrow().footprint() as u64;
        let gauge = &self.cluster.memory;
        let data = gauge
            .total
            .load(Ordering::Relaxed)
            .wrapping_sub(self.published_memory.bytes.get())
            .wrapping_add(own);
        // A negative overhead sampled before the data shrank (FLUSHALL) must not wrap.
        let used = (i128::from(data) + i128::from(gauge.overhead())).max(0);
        u64::try_from(used).unwrap_or(u64::MAX)
    }

    /// Used memory is over a configured `maxmemory`.
    fn over_maxmemory(&self, maxmemory: u64) -> bool {
        maxmemory != 0 && self.used_memory_for_limit() > maxmemory
    }

    /// Redis's `performEvictions() == EVICT_FAIL`: used memory is over `maxmemory` and this
    /// shard could not evict its way back under its share of it, so a command that may grow
    /// memory must be refused. Under `noeviction` nothing is tried.
    pub(crate) fn out_of_memory(&self) -> bool {
        let maxmemory = self.cluster.config.maxmemory.load(Ordering::Relaxed);
        if maxmemory == 0 {
            return false;
        }
        let over = self.over_maxmemory(maxmemory) && self.evict_to_share() == Eviction::Failed;
        self.cluster.memory.note(self.over_maxmemory(maxmemory));
        over
    }

    /// The tick's look at the limit: evicts this shard down to its share (so shards whose
    /// threads run no client commands keep to it too, and a lowered `maxmemory` takes
    /// effect at once), and ends or starts a spell over the limit.
    pub(crate) fn note_memory_limit(&self) {
        let maxmemory = self.cluster.config.maxmemory.load(Ordering::Relaxed);
        if self.id == 0 {
            self.cluster.memory.sample_overhead(maxmemory);
        }
        // Up to 16 passes a tick: a lowered limit is reached in a few ticks.
        for _ in 0..16 {
            if maxmemory == 0
                || !self.over_maxmemory(maxmemory)
                || self.evict_to_share() != Eviction::Running
            {
                break;
            }
        }
        self.cluster.memory.note(self.over_maxmemory(maxmemory));
    }

    /// Evicts keys of this shard under the configured policy, at most one pass's budget of
    /// keys, until the process is back under `maxmemory` as far as this shard can tell: it
    /// takes the whole excess from itself, but never goes below its even share of what the
    /// limit leaves for data (so shards that evict at the same moment do not all take the
    /// same excess, and a shard holding most of the data, under hash tags, gives up more than
    /// the others).
    fn evict_to_share(&self) -> Eviction {
        let config = self.cluster.config.eviction();
        if config.policy == Policy::NoEviction {
            return Eviction::Failed;
        }
        let excess = self
            .used_memory_for_limit()
            .saturating_sub(config.maxmemory);
        let overhead = self.cluster.memory.overhead();
        let for_data = (i128::from(config.maxmemory) - i128::from(overhead)).max(0);
        let share = u64::try_from(for_data).unwrap_or(u64::MAX) / self.num_shards() as u64;
        let outcome = {
            let mut shard = self.shard.borrow_mut();
            let own = shard.footprint() as u64;
            let target = own.saturating_sub(excess).max(own.min(share));
            shard.eviction = config;
            let target = usize::try_from(target).unwrap_or(usize::MAX);
            shard.evict_to(target, config.budget(), self.now_ms.get())
        };
        self.publish_memory(true);
        self.publish_notifications();
        outcome
    }
}

/// Redis's `scriptFlagsToCmdFlags`: the flags a script or function declared replace the
/// command's own `write`, `denyoom` and `stale` (`no-writes` implies `allow-oom`).
fn script_command_flags(command: u32, script: ScriptFlags) -> u32 {
    let mut out = command & !(flags::STALE | flags::DENYOOM | flags::WRITE | flags::MAY_REPLICATE);
    if !script.allow_oom && !script.no_writes {
        out |= flags::DENYOOM;
    }
    if !script.no_writes {
        out |= flags::WRITE;
    }
    if script.allow_stale {
        out |= flags::STALE;
    }
    out
}

/// A script run's calls under Redis's `scriptVerifyOOM`: a run that started over the limit
/// (and does not allow OOM) may not call a command that may grow memory until it has called
/// a write, since a script cannot be stopped half way through its writes.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallOom {
    started_over: bool,
    wrote: bool,
}

impl CallOom {
    /// `started_over`: the run started over the limit and has no `allow-oom` flag.
    pub(crate) fn new(started_over: bool) -> Self {
        CallOom {
            started_over,
            wrote: false,
        }
    }

    /// Checks one call that passed the checks before it, and notes a write.
    pub(crate) fn check(&mut self, spec: &CommandSpec) -> Result<(), &'static str> {
        if self.started_over && !self.wrote && spec.flags & flags::DENYOOM != 0 {
            return Err(OOM);
        }
        self.wrote |= spec.is_write();
        Ok(())
    }
}

impl Connection {
    /// A command's flags as Redis's `getCommandFlags` gives them: an EVAL script's shebang or a
    /// function's declared flags replace the command's own, and FUNCTION LOAD and RESTORE
    /// carry their subcommands' `write denyoom`.
    pub(crate) fn command_flags(&self, idx: usize, args: &Args) -> u32 {
        let spec = &COMMANDS[idx];
        let cluster = &self.worker.cluster;
        match spec.handler {
            Handler::Coord(CoordCmd::Eval) => {
                let by_sha = spec.name.starts_with("evalsha");
                let body = args.get(1);
                let cached = if by_sha {
                    cluster.scripts.get(body)
                } else {
                    cluster.scripts.get(sha1_hex(body).as_bytes())
                };
                let declared = match cached {
                    Some(script) => script.flags,
                    None if by_sha => None,
                    None => parse_eval(body).ok().and_then(|h| h.flags),
                };
                declared.map_or(spec.flags, |f| script_command_flags(spec.flags, f))
            }
            Handler::Coord(CoordCmd::Fcall) => cluster
                .functions
                .find(args.get(1))
                .map_or(spec.flags, |(lib, i)| {
                    script_command_flags(spec.flags, lib.functions[i].flags)
                }),
            Handler::Coord(CoordCmd::Function) => {
                let sub = args.get(1);
                if sub.eq_ignore_ascii_case(b"load") || sub.eq_ignore_ascii_case(b"restore") {
                    spec.flags | flags::WRITE | flags::DENYOOM
                } else {
                    spec.flags
                }
            }
            _ => spec.flags,
        }
    }

    /// Redis's maxmemory check before a client's command runs: with a limit set and used
    /// memory over it (eviction failing), a command that may grow memory is refused, and so
    /// is every command queued inside MULTI but EXEC, DISCARD, QUIT and RESET; EXEC is refused
    /// when it queued one that may grow memory. The state is kept for the scripts the command
    /// runs (EVAL, FCALL, or the EXEC running them), which check their calls against it.
    pub(crate) fn oom_refusal(&mut self, idx: usize, args: &Args) -> Option<&'static str> {
        self.pre_command_oom = false;
        if self.worker.cluster.config.maxmemory.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let spec = &COMMANDS[idx];
        let refusable = match spec.handler {
            Handler::Coord(CoordCmd::Exec) => self.multi.as_ref().is_some_and(|m| m.denyoom),
            _ => {
                // Queueing grows memory; a command MULTI refuses anyway keeps its own error.
                let queued = self.multi.is_some()
                    && spec.flags & flags::NO_MULTI == 0
                    && !matches!(
                        spec.handler,
                        Handler::Coord(CoordCmd::Discard | CoordCmd::Quit | CoordCmd::Reset)
                    );
                queued || self.command_flags(idx, args) & flags::DENYOOM != 0
            }
        };
        let runs_scripts = matches!(
            spec.handler,
            Handler::Coord(CoordCmd::Eval | CoordCmd::Fcall | CoordCmd::Exec)
        );
        if !refusable && !runs_scripts {
            return None;
        }
        let out_of_memory = self.worker.out_of_memory();
        self.pre_command_oom = out_of_memory;
        (out_of_memory && refusable).then_some(OOM)
    }

    /// CONFIG SET changed `maxmemory`: every shard takes the new publishing step and
    /// publishes its usage exactly before the reply, so the commands after it are judged
    /// against the new limit with a fresh sum. Lowering the limit will evict here too, once
    /// eviction exists (docs/eviction.md).
    pub(crate) async fn apply_maxmemory(&mut self) {
        let waits: Vec<_> = (0..self.worker.num_shards())
            .map(|shard| {
                let f: HopFn = Box::new(|w: &Worker| {
                    w.sync_limits();
                    Box::new(()) as Box<dyn std::any::Any + Send>
                });
                self.worker
                    .ask(shard, |origin, slot| ShardMsg::Run { f, origin, slot })
            })
            .collect();
        for wait in waits {
            wait.await;
        }
    }

    /// A script declaring `flags` may not start while over the limit unless it allows OOM or
    /// does not write (Redis's scriptPrepareForRun); scripts without a shebang may, and their
    /// calls are checked instead.
    pub(crate) fn script_start_refusal(&self, flags: Option<ScriptFlags>) -> Option<&'static str> {
        let refused = flags.is_some_and(|f| !f.allow_oom && !f.no_writes) && self.pre_command_oom;
        refused.then_some(OOM_NOT_ALLOWED)
    }

    /// Whether a run with these flags must check its calls against the limit (`CallOom`).
    pub(crate) fn calls_checked_for_oom(&self, flags: Option<ScriptFlags>) -> bool {
        self.pre_command_oom && !flags.is_some_and(|f| f.allow_oom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_flags_replace_the_commands() {
        let eval = flags::NOSCRIPT | flags::STALE | flags::MAY_REPLICATE;
        let plain = script_command_flags(eval, ScriptFlags::default());
        assert_eq!(plain, flags::NOSCRIPT | flags::DENYOOM | flags::WRITE);
        let oom = ScriptFlags {
            allow_oom: true,
            ..Default::default()
        };
        assert_eq!(
            script_command_flags(eval, oom),
            flags::NOSCRIPT | flags::WRITE
        );
        let ro = ScriptFlags {
            no_writes: true,
            allow_stale: true,
            ..Default::default()
        };
        assert_eq!(
            script_command_flags(eval, ro),
            flags::NOSCRIPT | flags::STALE
        );
    }

    #[test]
    fn calls_are_refused_until_a_write() {
        let spec = |name: &str| &COMMANDS[damselfly_commands::lookup(name.as_bytes()).unwrap()];
        let mut oom = CallOom::new(true);
        assert_eq!(oom.check(spec("get")), Ok(()));
        assert_eq!(oom.check(spec("set")), Err(OOM));
        assert_eq!(oom.check(spec("del")), Ok(()));
        assert_eq!(oom.check(spec("set")), Ok(()));
        let mut fine = CallOom::new(false);
        assert_eq!(fine.check(spec("set")), Ok(()));
    }

    #[test]
    fn exceeded_time_counts_spells() {
        let gauge = MemoryGauge::default();
        assert_eq!(gauge.exceeded_ms(), (0, 0));
        gauge.note(true);
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (total, current) = gauge.exceeded_ms();
        assert!(current >= 5 && total >= current);
        gauge.note(false);
        let (total, current) = gauge.exceeded_ms();
        assert!(total >= 5);
        assert_eq!(current, 0);
        gauge.reset_exceeded();
        assert_eq!(gauge.exceeded_ms(), (0, 0));
    }
}
