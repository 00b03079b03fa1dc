//! What the server says about its memory (docs/memory.md): INFO's memory section and MEMORY
//! STATS, DOCTOR, MALLOC-STATS, PURGE and HELP, all from one set of figures
//! ([`MemoryFigures`]: the allocator's statistics, the kernel's resident set, and what every
//! thread reports of its keys, tables and clients). MEMORY USAGE runs on the key's shard
//! (`keys_family::memory_usage`).

use std::fmt::Write;
use std::sync::atomic::Ordering;

use damselfly_commands::{errors, keys_family::MEMORY_KEYLESS, Args};
use damselfly_memory::AllocatorStats;
use damselfly_storage::table::SLOT_SIZE;

use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::messages::{ShardMsg, ThreadReport};

const MEMORY_HELP: &[&str] = &[
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help.",
];

const MB: u64 = 1 << 20;

/// The server's memory at one moment, as INFO memory and MEMORY STATS report it.
pub(crate) struct MemoryFigures {
    pub allocator: AllocatorStats,
    pub rss: u64,
    pub peak: u64,
    pub startup: u64,
    /// The keys' own bytes: their records, without the tables' slots.
    pub dataset: u64,
    pub keys: u64,
    /// (database, index bytes, deadline heap bytes) of every database holding keys.
    pub dbs: Vec<(usize, u64, u64)>,
    /// The clients' input buffers.
    pub clients: u64,
    pub connected_clients: u64,
    /// EVAL scripts' bodies and Functions libraries' code.
    pub eval_caches: u64,
    pub function_caches: u64,
    pub cached_scripts: usize,
}

/// `part / whole` as Redis computes its ratios: in single precision.
fn ratio(part: u64, whole: u64) -> f32 {
    if whole == 0 {
        0.0
    } else {
        part as f32 / whole as f32
    }
}

fn difference(a: u64, b: u64) -> i64 {
    i64::try_from(a).unwrap_or(i64::MAX) - i64::try_from(b).unwrap_or(i64::MAX)
}

impl MemoryFigures {
    pub(crate) fn gather(cluster: &Cluster, reports: &[ThreadReport]) -> MemoryFigures {
        let allocator = cluster.memory.sample();
        let mut dbs: Vec<(usize, u64, u64)> = Vec::new();
        let mut keys = 0u64;
        for r in reports {
            for (db, (&(n, _, _), &(index, expires))) in
                r.keyspace.iter().zip(&r.db_overhead).enumerate()
            {
                keys += n as u64;
                if n == 0 {
                    continue;
                }
                match dbs.iter_mut().find(|d| d.0 == db) {
                    Some(d) => {
                        d.1 += index as u64;
                        d.2 += expires as u64;
                    }
                    None => dbs.push((db, index as u64, expires as u64)),
                }
            }
        }
        dbs.sort_unstable();
        let entries: u64 = reports.iter().map(|r| r.used_memory as u64).sum();
        MemoryFigures {
            allocator,
            rss: damselfly_memory::rss_bytes(),
            peak: cluster.memory.peak().max(allocator.in_use()),
            startup: cluster.memory.startup(),
            dataset: entries.saturating_sub(keys * SLOT_SIZE as u64),
            keys,
            dbs,
            clients: reports.iter().map(|r| r.client_memory as u64).sum(),
            connected_clients: cluster.connected_clients.load(Ordering::Relaxed),
            eval_caches: cluster.scripts.body_bytes(),
            function_caches: cluster
                .functions
                .list()
                .iter()
                .map(|l| l.code.len() as u64)
                .sum(),
            cached_scripts: cluster.scripts.len(),
        }
    }

    /// `used_memory`: what the allocator says the program holds.
    pub(crate) fn used(&self) -> u64 {
        self.allocator.in_use()
    }

    /// Everything allocated that is not the keys' own bytes: start-up structures, tables,
    /// clients, scripts.
    pub(crate) fn overhead(&self) -> u64 {
        self.used().saturating_sub(self.dataset)
    }

    fn net_usage(&self) -> u64 {
        self.used().saturating_sub(self.startup).max(1)
    }

    fn dataset_percentage(&self) -> f32 {
        self.dataset as f32 * 100.0 / self.net_usage() as f32
    }

    fn peak_percentage(&self) -> f32 {
        self.used() as f32 * 100.0 / self.peak.max(1) as f32
    }

    fn allocator_frag(&self) -> (f32, i64) {
        let a = &self.allocator;
        (
            ratio(a.active, a.allocated),
            difference(a.active, a.allocated),
        )
    }

    fn allocator_rss(&self) -> (f32, i64) {
        let a = &self.allocator;
        (
            ratio(a.resident, a.active),
            difference(a.resident, a.active),
        )
    }

    fn rss_overhead(&self) -> (f32, i64) {
        let a = &self.allocator;
        (
            ratio(self.rss, a.resident),
            difference(self.rss, a.resident),
        )
    }

    pub(crate) fn fragmentation(&self) -> (f32, i64) {
        (
            ratio(self.rss, self.used()),
            difference(self.rss, self.used()),
        )
    }

    /// INFO's memory section, in Redis 7.0's field order.
    pub(crate) fn info(
        &self,
        cluster: &Cluster,
        reports: &[ThreadReport],
        maxmemory: u64,
    ) -> String {
        let used = self.used();
        let lua: u64 = reports.iter().map(|r| r.lua_memory as u64).sum();
        let scripts = self.eval_caches + self.function_caches;
        let system = damselfly_memory::total_system_memory();
        let (alloc_frag, alloc_frag_bytes) = self.allocator_frag();
        let (alloc_rss, alloc_rss_bytes) = self.allocator_rss();
        let (rss_over, rss_over_bytes) = self.rss_overhead();
        let (frag, frag_bytes) = self.fragmentation();
        let mut s = String::new();
        let mut field = |name: &str, value: &dyn std::fmt::Display| {
            let _ = write!(s, "{name}:{value}\r\n");
        };
        field("used_memory", &used);
        field("used_memory_human", &human_bytes(used));
        field("used_memory_rss", &self.rss);
        field("used_memory_rss_human", &human_bytes(self.rss));
        field("used_memory_peak", &self.peak);
        field("used_memory_peak_human", &human_bytes(self.peak));
        field(
            "used_memory_peak_perc",
            &format!("{:.2}%", self.peak_percentage()),
        );
        field("used_memory_overhead", &self.overhead());
        field("used_memory_startup", &self.startup);
        field("used_memory_dataset", &self.dataset);
        field(
            "used_memory_dataset_perc",
            &format!("{:.2}%", self.dataset_percentage()),
        );
        field("allocator_allocated", &self.allocator.allocated);
        field("allocator_active", &self.allocator.active);
        field("allocator_resident", &self.allocator.resident);
        field("total_system_memory", &system);
        field("total_system_memory_human", &human_bytes(system));
        // A thread's one Lua VM runs both EVAL scripts and functions, so the VM figures
        // count all of it under eval and none under functions.
        field("used_memory_lua", &lua);
        field("used_memory_vm_eval", &lua);
        field("used_memory_lua_human", &human_bytes(lua));
        field("used_memory_scripts_eval", &self.eval_caches);
        field("number_of_cached_scripts", &self.cached_scripts);
        let (libraries, functions) = cluster.functions.counts();
        field("number_of_functions", &functions);
        field("number_of_libraries", &libraries);
        field("used_memory_vm_functions", &0);
        field("used_memory_vm_total", &lua);
        field("used_memory_vm_total_human", &human_bytes(lua));
        field("used_memory_functions", &self.function_caches);
        field("used_memory_scripts", &scripts);
        field("used_memory_scripts_human", &human_bytes(scripts));
        // Redis prints the unsigned limit with %lld: 2^64 - 1 shows as -1.
        field("maxmemory", &(maxmemory as i64));
        field("maxmemory_human", &human_bytes(maxmemory));
        field("maxmemory_policy", &cluster.config.get("maxmemory-policy"));
        field("allocator_frag_ratio", &format!("{alloc_frag:.2}"));
        field("allocator_frag_bytes", &alloc_frag_bytes);
        field("allocator_rss_ratio", &format!("{alloc_rss:.2}"));
        field("allocator_rss_bytes", &alloc_rss_bytes);
        field("rss_overhead_ratio", &format!("{rss_over:.2}"));
        field("rss_overhead_bytes", &rss_over_bytes);
        field("mem_fragmentation_ratio", &format!("{frag:.2}"));
        field("mem_fragmentation_bytes", &frag_bytes);
        field("mem_not_counted_for_evict", &0);
        field("mem_replication_backlog", &0);
        field("mem_total_replication_buffers", &0);
        field("mem_clients_slaves", &0);
        field("mem_clients_normal", &self.clients);
        field("mem_cluster_links", &0);
        field("mem_aof_buffer", &0);
        field("mem_allocator", &damselfly_memory::ALLOCATOR_NAME);
        field("active_defrag_running", &0);
        field("lazyfree_pending_objects", &0);
        field("lazyfreed_objects", &0);
        s
    }

    /// Redis's memory doctor: the report for these figures.
    fn doctor(&self) -> String {
        let used = self.used();
        if used < 5 * MB {
            return "Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I will be back to our programming as soon as I finished rebooting.\n".to_owned();
        }
        let high = |(r, bytes): (f32, i64), limit: f32| r > limit && bytes > 10 << 20;
        let mut findings = Vec::new();
        if ratio(self.peak, used) > 1.5 {
            findings.push(" * Peak memory: In the past this instance used more than 150% the memory that is currently using. The allocator is normally not able to release memory after a peak, so you can expect to see a big fragmentation ratio, however this is actually harmless and is only due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently bigger than expected, the memory will be used as soon as you fill the Redis instance with more data. If the memory peak was only occasional and you want to try to reclaim memory, please try the MEMORY PURGE command, otherwise the only other option is to shutdown and restart the instance.\n\n".to_owned());
        }
        if high(self.fragmentation(), 1.4) {
            findings.push(format!(" * High total RSS: This instance has a memory fragmentation and RSS overhead greater than 1.4 (this means that the Resident Set Size of the Redis process is much larger than the sum of the logical allocations Redis performed). This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. If the problem is a large peak memory, then there is no issue. Otherwise, make sure you are using the Jemalloc allocator and not the default libc malloc. Note: The currently used allocator is \"{}\".\n\n", damselfly_memory::ALLOCATOR_NAME));
        }
        if high(self.allocator_frag(), 1.1) {
            findings.push(" * High allocator fragmentation: This instance has an allocator external fragmentation greater than 1.1. This problem is usually due either to a large peak memory (check if there is a peak memory entry above in the report) or may result from a workload that causes the allocator to fragment memory a lot. You can try enabling 'activedefrag' config option.\n\n".to_owned());
        }
        if high(self.allocator_rss(), 1.1) {
            findings.push(" * High allocator RSS overhead: This instance has an RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the allocator is much larger than the sum what the allocator actually holds). This problem is usually due to a large peak memory (check if there is a peak memory entry above in the report), you can try the MEMORY PURGE command to reclaim it.\n\n".to_owned());
        }
        if high(self.rss_overhead(), 1.1) {
            findings.push(" * High process RSS overhead: This instance has non-allocator RSS memory overhead is greater than 1.1 (this means that the Resident Set Size of the Redis process is much larger than the RSS the allocator holds). This problem may be due to Lua scripts or Modules.\n\n".to_owned());
        }
        if self.clients / self.connected_clients.max(1) > 200 * 1024 {
            findings.push(" * Big client buffers: The clients output buffers in this instance are greater than 200K per client (on average). This may result from different causes, like Pub/Sub clients subscribed to channels bot not receiving data fast enough, so that data piles on the Redis instance output buffer, or clients sending commands with large replies or very large sequences of commands in the same pipeline. Please use the CLIENT LIST command in order to investigate the issue if it causes problems in your instance, or to understand better why certain clients are using a big amount of memory.\n\n".to_owned());
        }
        if self.cached_scripts > 1000 {
            findings.push(" * Many scripts: There seem to be many cached scripts in this instance (more than 1000). This may be because scripts are generated and `EVAL`ed, instead of being parameterized (with KEYS and ARGV), `SCRIPT LOAD`ed and `EVALSHA`ed. Unless `SCRIPT FLUSH` is called periodically, the scripts' caches may end up consuming most of your memory.\n\n".to_owned());
        }
        if findings.is_empty() {
            return "Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this base.\n".to_owned();
        }
        let mut s =
            "Sam, I detected a few issues in this Redis instance memory implants:\n\n".to_owned();
        for f in findings {
            s.push_str(&f);
        }
        s.push_str("I'm here to keep you safe, Sam. I want to help you.\n");
        s
    }
}

/// Redis's `bytesToHuman`: bytes, or K/M/G/T/P (powers of 1024) with two decimals.
pub(crate) fn human_bytes(n: u64) -> String {
    if n < 1024 {
        return format!("{n}B");
    }
    for (i, unit) in ["K", "M", "G", "T", "P"].iter().enumerate() {
        let scale = 1u64 << (10 * (i + 1));
        if n < scale << 10 {
            return format!("{:.2}{unit}", n as f64 / scale as f64);
        }
    }
    // Redis's bytesToHuman prints exabytes as plain bytes (maxmemory 18446744073709551615).
    format!("{n}B")
}

impl Connection {
    /// MEMORY called without a key: STATS, DOCTOR, MALLOC-STATS, PURGE, HELP (and USAGE
    /// missing its key).
    pub(crate) async fn memory(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        match sub.as_slice() {
            b"usage" => self.reply_error(&errors::wrong_arity("memory|usage")),
            b"help" => {
                self.out.array(MEMORY_HELP.len());
                for line in MEMORY_HELP {
                    self.out.simple(line);
                }
            }
            b"purge" => {
                if damselfly_memory::purge() {
                    self.out.ok();
                } else {
                    self.reply_error("ERR Error purging dirty pages");
                }
            }
            b"malloc-stats" => {
                let text = damselfly_memory::malloc_stats();
                self.out.verbatim("txt", text.as_bytes());
            }
            b"stats" | b"doctor" => {
                let reports = self.ask_all(ShardMsg::Report).await;
                let figures = MemoryFigures::gather(&self.worker.cluster, &reports);
                if sub == b"doctor" {
                    self.out.verbatim("txt", figures.doctor().as_bytes());
                } else {
                    self.memory_stats(&figures);
                }
            }
            _ => {
                debug_assert!(!MEMORY_KEYLESS.iter().any(|s| s.as_bytes() == sub));
                self.reply_error(&errors::unknown_subcommand("memory", args.get(1)));
            }
        }
    }

    /// MEMORY STATS: Redis 7.0's map, in its order.
    fn memory_stats(&mut self, f: &MemoryFigures) {
        let out = &mut self.out;
        out.map(27 + f.dbs.len());
        let int = |out: &mut damselfly_protocol::ReplyBuf, name: &str, v: i64| {
            out.bulk(name.as_bytes());
            out.int(v);
        };
        let signed = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        int(out, "peak.allocated", signed(f.peak));
        int(out, "total.allocated", signed(f.used()));
        int(out, "startup.allocated", signed(f.startup));
        int(out, "replication.backlog", 0);
        int(out, "clients.slaves", 0);
        int(out, "clients.normal", signed(f.clients));
        int(out, "cluster.links", 0);
        int(out, "aof.buffer", 0);
        int(out, "lua.caches", signed(f.eval_caches));
        int(out, "functions.caches", signed(f.function_caches));
        for &(db, index, expires) in &f.dbs {
            out.bulk(format!("db.{db}").as_bytes());
            out.map(3);
            int(out, "overhead.hashtable.main", signed(index));
            int(out, "overhead.hashtable.expires", signed(expires));
            int(out, "overhead.hashtable.slot-to-keys", 0);
        }
        int(out, "overhead.total", signed(f.overhead()));
        int(out, "keys.count", signed(f.keys));
        let per_key = f.used().saturating_sub(f.startup).checked_div(f.keys);
        int(out, "keys.bytes-per-key", signed(per_key.unwrap_or(0)));
        int(out, "dataset.bytes", signed(f.dataset));
        let double = |out: &mut damselfly_protocol::ReplyBuf, name: &str, v: f32| {
            out.bulk(name.as_bytes());
            out.double(f64::from(v));
        };
        double(out, "dataset.percentage", f.dataset_percentage());
        double(out, "peak.percentage", f.peak_percentage());
        int(out, "allocator.allocated", signed(f.allocator.allocated));
        int(out, "allocator.active", signed(f.allocator.active));
        int(out, "allocator.resident", signed(f.allocator.resident));
        for (names, (r, bytes)) in [
            (
                [
                    "allocator-fragmentation.ratio",
                    "allocator-fragmentation.bytes",
                ],
                f.allocator_frag(),
            ),
            (
                ["allocator-rss.ratio", "allocator-rss.bytes"],
                f.allocator_rss(),
            ),
            (
                ["rss-overhead.ratio", "rss-overhead.bytes"],
                f.rss_overhead(),
            ),
            (["fragmentation", "fragmentation.bytes"], f.fragmentation()),
        ] {
            double(out, names[0], r);
            int(out, names[1], bytes);
        }
    }
}
