//! Server configuration: every parameter CONFIG GET reports and CONFIG SET changes, with Redis's
//! names, value syntax and error texts. Flags and redis.conf-style files are applied through the
//! same table, so they validate the same way. Values read on hot paths are mirrored into atomics.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::RwLock;

use damselfly_protocol::number::parse_i64;
use damselfly_storage::stream::NodeLimits;
use damselfly_storage::EncodingLimits;
use damselfly_storage::{EvictionConfig, Policy};

/// What a parameter's value may be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Int {
        min: i64,
        max: i64,
    },
    /// A byte count: accepts `1gb`, `512mb`, `100k` as Redis's memtoull does, within
    /// `min..=max`.
    Memory {
        min: u64,
        max: u64,
    },
    /// `maxmemory-clients`: a byte count, or a percentage of `maxmemory` up to 100%.
    MemoryOrPercent,
    Bool,
    Enum(&'static [&'static str]),
    Str,
    /// `notify-keyspace-events`: class letters, shown in Redis's canonical order.
    KeyspaceEvents,
    /// `latency-tracking-info-percentiles`: numbers from 0 to 100 separated by spaces.
    Percentiles,
}

/// Whether a parameter's effect is built: `Applied` ones change behaviour; `Accepted` ones are
/// stored and reported so test harnesses and clients that set them keep working (listed in
/// docs/commands.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    Applied,
    Accepted,
}

pub struct Param {
    pub name: &'static str,
    pub default: &'static str,
    pub kind: Kind,
    pub mutable: bool,
    pub effect: Effect,
}

const fn p(
    name: &'static str,
    default: &'static str,
    kind: Kind,
    mutable: bool,
    effect: Effect,
) -> Param {
    Param {
        name,
        default,
        kind,
        mutable,
        effect,
    }
}

const LOGLEVELS: &[&str] = &["debug", "verbose", "notice", "warning", "nothing"];
const BACKENDS: &[&str] = &["auto", "uring", "epoll"];
const PIN_MODES: &[&str] = &["auto", "yes", "no"];
/// Redis's `maxmemory-policy` values, in the order its CONFIG SET error lists them.
const POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];
const SCRIPT_LOCKING: &[&str] = &["declared", "all", "strict"];
const ACL_PUBSUB: &[&str] = &["allchannels", "resetchannels"];
const FSYNC: &[&str] = &["always", "everysec", "no"];
const TLS_AUTH_CLIENTS: &[&str] = &["no", "yes", "optional"];
const INT: Kind = Kind::Int {
    min: i64::MIN,
    max: i64::MAX,
};
const NONNEG: Kind = Kind::Int {
    min: 0,
    max: i64::MAX,
};
/// A C `int` that may not be negative (Redis's `createIntConfig(..., 0, INT_MAX, ...)`).
const NONNEG_INT: Kind = Kind::Int {
    min: 0,
    max: i32::MAX as i64,
};
/// A byte count stored in a signed C `long long`, as most of Redis's memory parameters are.
const MEMORY: Kind = Kind::Memory {
    min: 0,
    max: i64::MAX as u64,
};
/// Redis's floor for the protocol's buffer limits (`proto-max-bulk-len`,
/// `client-query-buffer-limit`).
const MEMORY_1MB: Kind = Kind::Memory {
    min: 1 << 20,
    max: i64::MAX as u64,
};

use Effect::{Accepted as A, Applied as Y};

pub static PARAMS: &[Param] = &[
    p("port", "6379", Kind::Int { min: 0, max: 65535 }, false, Y),
    p("bind", "127.0.0.1", Kind::Str, false, Y),
    // The Prometheus endpoint (docs/operations.md, "Metrics"); 0: none.
    p(
        "metrics-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        false,
        Y,
    ),
    p("unixsocket", "", Kind::Str, false, Y),
    p("unixsocketperm", "0", Kind::Str, false, Y),
    p("requirepass", "", Kind::Str, true, Y),
    p("aclfile", "", Kind::Str, false, Y),
    p("acllog-max-len", "128", NONNEG_INT, true, Y),
    p(
        "acl-pubsub-default",
        "resetchannels",
        Kind::Enum(ACL_PUBSUB),
        true,
        Y,
    ),
    p(
        "databases",
        "16",
        Kind::Int {
            min: 1,
            max: 1_000_000,
        },
        false,
        Y,
    ),
    p(
        "maxclients",
        "10000",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
        true,
        Y,
    ),
    p("timeout", "0", NONNEG, true, Y),
    p("tcp-keepalive", "300", NONNEG, true, Y),
    p("proto-max-bulk-len", "536870912", MEMORY_1MB, true, Y),
    p(
        "client-query-buffer-limit",
        "1073741824",
        MEMORY_1MB,
        true,
        Y,
    ),
    p(
        "client-output-buffer-limit",
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
        Kind::Str,
        true,
        A,
    ),
    p(
        "damselfly-output-buffer-limit",
        "268435456",
        MEMORY,
        true,
        Y,
    ),
    p("loglevel", "notice", Kind::Enum(LOGLEVELS), true, Y),
    p("logfile", "", Kind::Str, false, Y),
    p("threads", "0", NONNEG, false, Y),
    p("io-backend", "auto", Kind::Enum(BACKENDS), false, Y),
    p("pin-threads", "auto", Kind::Enum(PIN_MODES), false, Y),
    p("migrate-connections", "yes", Kind::Bool, true, Y),
    p("direct-replies", "yes", Kind::Bool, true, Y),
    p("disable-thp", "yes", Kind::Bool, false, Y),
    p("cache-mode", "no", Kind::Bool, true, Y),
    p(
        "tcp-backlog",
        "511",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        false,
        Y,
    ),
    // The journal (docs/persistence.md); `appendonly` is read at start-up.
    p("appendonly", "no", Kind::Bool, true, Y),
    p("appendfsync", "everysec", Kind::Enum(FSYNC), true, Y),
    p("dir", ".", Kind::Str, true, Y),
    p("appenddirname", "appendonlydir", Kind::Str, false, Y),
    p("aof-load-truncated", "yes", Kind::Bool, true, Y),
    p("auto-aof-rewrite-percentage", "100", NONNEG, true, Y),
    p("auto-aof-rewrite-min-size", "67108864", MEMORY, true, Y),
    // Damselfly's: start even when a journal is damaged, keeping what precedes the damage.
    p("force-recovery", "no", Kind::Bool, false, Y),
    // Redis's testing knobs: microseconds of sleep per record loaded, per key saved.
    p("key-load-delay", "0", NONNEG, true, Y),
    p("rdb-key-save-delay", "0", NONNEG, true, Y),
    p("use-exit-on-panic", "no", Kind::Bool, true, A),
    p("watchdog-period", "0", NONNEG_INT, true, A),
    p(
        "loading-process-events-interval-bytes",
        "2097152",
        Kind::Int {
            min: 1024,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("save", "3600 1 300 100 60 10000", Kind::Str, true, Y),
    p("stop-writes-on-bgsave-error", "yes", Kind::Bool, true, Y),
    p("rdbcompression", "yes", Kind::Bool, true, Y),
    p("rdbchecksum", "yes", Kind::Bool, true, Y),
    // Read at start-up: a Redis dump.rdb to load when there is no Damselfly snapshot.
    p("dbfilename", "dump.rdb", Kind::Str, true, Y),
    // Stored and reported; their effect arrives with later work (docs/commands.md).
    p("appendfilename", "appendonly.aof", Kind::Str, false, A),
    // docs/eviction.md: the limit is enforced; the policies other than noeviction, and
    // their tuning, wait for eviction (until then nothing is evictable under any of them).
    p(
        "maxmemory",
        "0",
        Kind::Memory {
            min: 0,
            max: u64::MAX,
        },
        true,
        Y,
    ),
    p(
        "maxmemory-policy",
        "noeviction",
        Kind::Enum(POLICIES),
        true,
        Y,
    ),
    p(
        "maxmemory-samples",
        "5",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        true,
        Y,
    ),
    p(
        "maxmemory-eviction-tenacity",
        "10",
        Kind::Int { min: 0, max: 100 },
        true,
        Y,
    ),
    p("lfu-log-factor", "10", NONNEG_INT, true, Y),
    p("lfu-decay-time", "1", NONNEG_INT, true, Y),
    // Client eviction is not built: `evicted_clients` stays 0.
    p("maxmemory-clients", "0", Kind::MemoryOrPercent, true, A),
    p("hz", "10", Kind::Int { min: 1, max: 500 }, true, A),
    p("notify-keyspace-events", "", Kind::KeyspaceEvents, true, Y),
    p("tracking-table-max-keys", "1000000", NONNEG, true, A),
    p("hash-max-listpack-entries", "128", NONNEG, true, Y),
    p("hash-max-listpack-value", "64", NONNEG, true, Y),
    p("hash-max-ziplist-entries", "128", NONNEG, true, Y),
    p("hash-max-ziplist-value", "64", NONNEG, true, Y),
    p("set-max-intset-entries", "512", NONNEG, true, Y),
    p("hll-sparse-max-bytes", "3000", NONNEG, true, Y),
    p("zset-max-listpack-entries", "128", NONNEG, true, Y),
    p("zset-max-listpack-value", "64", NONNEG, true, Y),
    p("zset-max-ziplist-entries", "128", NONNEG, true, Y),
    p("zset-max-ziplist-value", "64", NONNEG, true, Y),
    p("list-max-listpack-size", "-2", INT, true, Y),
    p("list-max-ziplist-size", "-2", INT, true, Y),
    p("list-compress-depth", "0", NONNEG, true, A),
    p("stream-node-max-bytes", "4096", MEMORY, true, Y),
    p("stream-node-max-entries", "100", NONNEG, true, Y),
    // The slow log and the latency monitor (crates/commands/src/slowlog.rs, latency.rs).
    p(
        "slowlog-log-slower-than",
        "10000",
        Kind::Int {
            min: -1,
            max: i64::MAX,
        },
        true,
        Y,
    ),
    p("slowlog-max-len", "128", NONNEG, true, Y),
    p("latency-monitor-threshold", "0", NONNEG, true, Y),
    p("latency-tracking", "yes", Kind::Bool, true, Y),
    p(
        "latency-tracking-info-percentiles",
        "50 99 99.9",
        Kind::Percentiles,
        true,
        Y,
    ),
    p("lua-time-limit", "5000", INT, true, A),
    p("busy-reply-threshold", "5000", INT, true, A),
    // Damselfly's: which shards a script run locks (docs/scripting.md).
    p(
        "script-shard-locking",
        "declared",
        Kind::Enum(SCRIPT_LOCKING),
        true,
        Y,
    ),
    p("lazyfree-lazy-eviction", "no", Kind::Bool, true, A),
    p("lazyfree-lazy-expire", "no", Kind::Bool, true, A),
    p("lazyfree-lazy-server-del", "no", Kind::Bool, true, A),
    p("lazyfree-lazy-user-del", "no", Kind::Bool, true, A),
    p("lazyfree-lazy-user-flush", "no", Kind::Bool, true, A),
    p("activerehashing", "yes", Kind::Bool, true, A),
    p(
        "active-expire-effort",
        "1",
        Kind::Int { min: 1, max: 10 },
        true,
        A,
    ),
    p("protected-mode", "yes", Kind::Bool, true, A),
    p("daemonize", "no", Kind::Bool, false, A),
    p("io-threads", "1", Kind::Int { min: 1, max: 128 }, false, A),
    p("replica-read-only", "yes", Kind::Bool, true, A),
    p("cluster-enabled", "no", Kind::Bool, false, A),
    // TLS for client connections (docs/operations.md, "TLS"), with Redis 7.0's names and
    // defaults. Changing any of them rebuilds the TLS configuration for new connections
    // (`Config::set_tls_reload`); a configuration that does not build fails CONFIG SET.
    p("tls-port", "0", Kind::Int { min: 0, max: 65535 }, false, Y),
    p("tls-cert-file", "", Kind::Str, true, Y),
    p("tls-key-file", "", Kind::Str, true, Y),
    p("tls-key-file-pass", "", Kind::Str, true, Y),
    p("tls-ca-cert-file", "", Kind::Str, true, Y),
    p("tls-ca-cert-dir", "", Kind::Str, true, Y),
    p(
        "tls-auth-clients",
        "yes",
        Kind::Enum(TLS_AUTH_CLIENTS),
        true,
        Y,
    ),
    p("tls-protocols", "", Kind::Str, true, Y),
    p("tls-ciphers", "", Kind::Str, true, Y),
    p("tls-ciphersuites", "", Kind::Str, true, Y),
    p("tls-prefer-server-ciphers", "no", Kind::Bool, true, Y),
    p("tls-session-caching", "yes", Kind::Bool, true, Y),
    p("tls-session-cache-size", "20480", NONNEG_INT, true, Y),
    // rustls's session cache has no expiry of its own (docs/operations.md).
    p("tls-session-cache-timeout", "300", NONNEG_INT, true, A),
    // No replication or cluster bus, so nothing dials out with TLS; no DHE suites in rustls.
    p("tls-replication", "no", Kind::Bool, true, A),
    p("tls-cluster", "no", Kind::Bool, true, A),
    p("tls-client-cert-file", "", Kind::Str, true, A),
    p("tls-client-key-file", "", Kind::Str, true, A),
    p("tls-client-key-file-pass", "", Kind::Str, true, A),
    p("tls-dh-params-file", "", Kind::Str, true, A),
    p("list-max-ziplist-entries", "128", NONNEG, true, A),
    // The rest of Redis 7.0's parameters, with its defaults, types and ranges: replication,
    // cluster, defragmentation, process and logging settings Damselfly has no use for.
    p(
        "active-defrag-cycle-max",
        "25",
        Kind::Int { min: 1, max: 99 },
        true,
        A,
    ),
    p(
        "active-defrag-cycle-min",
        "1",
        Kind::Int { min: 1, max: 99 },
        true,
        A,
    ),
    p(
        "active-defrag-ignore-bytes",
        "104857600",
        Kind::Memory {
            min: 1,
            max: i64::MAX as u64,
        },
        true,
        A,
    ),
    p(
        "active-defrag-max-scan-fields",
        "1000",
        Kind::Int {
            min: 1,
            max: i64::MAX,
        },
        true,
        A,
    ),
    p(
        "active-defrag-threshold-lower",
        "10",
        Kind::Int { min: 0, max: 1000 },
        true,
        A,
    ),
    p(
        "active-defrag-threshold-upper",
        "100",
        Kind::Int { min: 0, max: 1000 },
        true,
        A,
    ),
    p("activedefrag", "no", Kind::Bool, true, A),
    p("always-show-logo", "no", Kind::Bool, false, A),
    p("aof-disable-auto-gc", "no", Kind::Bool, true, A),
    p("aof-rewrite-incremental-fsync", "yes", Kind::Bool, true, A),
    p("aof-timestamp-enabled", "no", Kind::Bool, true, A),
    p("aof-use-rdb-preamble", "yes", Kind::Bool, true, A),
    p("aof_rewrite_cpulist", "", Kind::Str, false, A),
    p("bgsave_cpulist", "", Kind::Str, false, A),
    p("bind-source-addr", "", Kind::Str, true, A),
    p("bio_cpulist", "", Kind::Str, false, A),
    p(
        "cluster-allow-pubsubshard-when-down",
        "yes",
        Kind::Bool,
        true,
        A,
    ),
    p("cluster-allow-reads-when-down", "no", Kind::Bool, true, A),
    p(
        "cluster-allow-replica-migration",
        "yes",
        Kind::Bool,
        true,
        A,
    ),
    p(
        "cluster-announce-bus-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        true,
        A,
    ),
    p("cluster-announce-hostname", "", Kind::Str, true, A),
    p("cluster-announce-ip", "", Kind::Str, true, A),
    p(
        "cluster-announce-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        true,
        A,
    ),
    p(
        "cluster-announce-tls-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        true,
        A,
    ),
    p("cluster-config-file", "nodes.conf", Kind::Str, false, A),
    p(
        "cluster-link-sendbuf-limit",
        "0",
        Kind::Memory {
            min: 0,
            max: i64::MAX as u64,
        },
        true,
        A,
    ),
    p(
        "cluster-migration-barrier",
        "1",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "cluster-node-timeout",
        "15000",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        true,
        A,
    ),
    p(
        "cluster-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        false,
        A,
    ),
    p(
        "cluster-preferred-endpoint-type",
        "ip",
        Kind::Enum(&["ip", "hostname", "unknown-endpoint"]),
        true,
        A,
    ),
    p("cluster-replica-no-failover", "no", Kind::Bool, true, A),
    p(
        "cluster-replica-validity-factor",
        "10",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("cluster-require-full-coverage", "yes", Kind::Bool, true, A),
    p("cluster-slave-no-failover", "no", Kind::Bool, true, A),
    p(
        "cluster-slave-validity-factor",
        "10",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("crash-log-enabled", "yes", Kind::Bool, true, A),
    p("crash-memcheck-enabled", "yes", Kind::Bool, true, A),
    p("dynamic-hz", "yes", Kind::Bool, true, A),
    p(
        "enable-debug-command",
        "yes",
        Kind::Enum(&["no", "yes", "local"]),
        false,
        A,
    ),
    p(
        "enable-module-command",
        "no",
        Kind::Enum(&["no", "yes", "local"]),
        false,
        A,
    ),
    p(
        "enable-protected-configs",
        "no",
        Kind::Enum(&["no", "yes", "local"]),
        false,
        A,
    ),
    p("ignore-warnings", "", Kind::Str, true, A),
    p("io-threads-do-reads", "no", Kind::Bool, false, A),
    p("jemalloc-bg-thread", "yes", Kind::Bool, true, A),
    p("masterauth", "", Kind::Str, true, A),
    p("masteruser", "", Kind::Str, true, A),
    p(
        "min-replicas-max-lag",
        "10",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "min-replicas-to-write",
        "0",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "min-slaves-max-lag",
        "10",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "min-slaves-to-write",
        "0",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("no-appendfsync-on-rewrite", "no", Kind::Bool, true, A),
    p(
        "oom-score-adj",
        "no",
        Kind::Enum(&["no", "yes", "relative", "absolute"]),
        true,
        A,
    ),
    p("oom-score-adj-values", "0 200 800", Kind::Str, true, A),
    p("pidfile", "/var/run/redis.pid", Kind::Str, false, A),
    p(
        "proc-title-template",
        "{title} {listen-addr} {server-mode}",
        Kind::Str,
        true,
        A,
    ),
    p(
        "propagation-error-behavior",
        "ignore",
        Kind::Enum(&["ignore", "panic", "panic-on-replicas"]),
        true,
        A,
    ),
    p("rdb-del-sync-files", "no", Kind::Bool, true, A),
    p("rdb-save-incremental-fsync", "yes", Kind::Bool, true, A),
    p(
        "repl-backlog-size",
        "1048576",
        Kind::Memory {
            min: 1,
            max: i64::MAX as u64,
        },
        true,
        A,
    ),
    p(
        "repl-backlog-ttl",
        "3600",
        Kind::Int {
            min: 0,
            max: i64::MAX,
        },
        true,
        A,
    ),
    p("repl-disable-tcp-nodelay", "no", Kind::Bool, true, A),
    p(
        "repl-diskless-load",
        "disabled",
        Kind::Enum(&["disabled", "on-empty-db", "swapdb"]),
        true,
        A,
    ),
    p("repl-diskless-sync", "yes", Kind::Bool, true, A),
    p(
        "repl-diskless-sync-delay",
        "5",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "repl-diskless-sync-max-replicas",
        "0",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "repl-ping-replica-period",
        "10",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "repl-ping-slave-period",
        "10",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p(
        "repl-timeout",
        "60",
        Kind::Int {
            min: 1,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("replica-announce-ip", "", Kind::Str, true, A),
    p(
        "replica-announce-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        true,
        A,
    ),
    p("replica-announced", "yes", Kind::Bool, true, A),
    p(
        "replica-ignore-disk-write-errors",
        "no",
        Kind::Bool,
        true,
        A,
    ),
    p("replica-ignore-maxmemory", "yes", Kind::Bool, true, A),
    p("replica-lazy-flush", "no", Kind::Bool, true, A),
    p(
        "replica-priority",
        "100",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("replica-serve-stale-data", "yes", Kind::Bool, true, A),
    p("replicaof", "", Kind::Str, false, A),
    p(
        "sanitize-dump-payload",
        "no",
        Kind::Enum(&["no", "yes", "clients"]),
        true,
        A,
    ),
    p("server_cpulist", "", Kind::Str, false, A),
    p("set-proc-title", "yes", Kind::Bool, false, A),
    p(
        "shutdown-on-sigint",
        "default",
        Kind::Enum(&["default", "save", "nosave", "now", "force"]),
        true,
        A,
    ),
    p(
        "shutdown-on-sigterm",
        "default",
        Kind::Enum(&["default", "save", "nosave", "now", "force"]),
        true,
        A,
    ),
    p(
        "shutdown-timeout",
        "10",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("slave-announce-ip", "", Kind::Str, true, A),
    p(
        "slave-announce-port",
        "0",
        Kind::Int { min: 0, max: 65535 },
        true,
        A,
    ),
    p("slave-ignore-maxmemory", "yes", Kind::Bool, true, A),
    p("slave-lazy-flush", "no", Kind::Bool, true, A),
    p(
        "slave-priority",
        "100",
        Kind::Int {
            min: 0,
            max: i32::MAX as i64,
        },
        true,
        A,
    ),
    p("slave-read-only", "yes", Kind::Bool, true, A),
    p("slave-serve-stale-data", "yes", Kind::Bool, true, A),
    p("slaveof", "", Kind::Str, false, A),
    p(
        "socket-mark-id",
        "0",
        Kind::Int {
            min: 0,
            max: u32::MAX as i64,
        },
        false,
        A,
    ),
    p(
        "supervised",
        "no",
        Kind::Enum(&["upstart", "systemd", "auto", "no"]),
        false,
        A,
    ),
    p("syslog-enabled", "no", Kind::Bool, false, A),
    p(
        "syslog-facility",
        "local0",
        Kind::Enum(&[
            "user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7",
        ]),
        false,
        A,
    ),
    p("syslog-ident", "redis", Kind::Str, false, A),
];

/// Parameters CONFIG GET shows only when asked for by name (Redis's HIDDEN_CONFIG).
const HIDDEN: &[&str] = &[
    "use-exit-on-panic",
    "rdb-key-save-delay",
    "key-load-delay",
    "watchdog-period",
    "loading-process-events-interval-bytes",
];

/// Old and new names of the same parameter (Redis 7 renamed ziplist to listpack); setting
/// either sets both.
const ALIASES: &[(&str, &str)] = &[
    ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
    ("hash-max-ziplist-value", "hash-max-listpack-value"),
    ("zset-max-ziplist-entries", "zset-max-listpack-entries"),
    ("zset-max-ziplist-value", "zset-max-listpack-value"),
    ("list-max-ziplist-size", "list-max-listpack-size"),
    ("lua-time-limit", "busy-reply-threshold"),
    ("cluster-slave-no-failover", "cluster-replica-no-failover"),
    ("slave-lazy-flush", "replica-lazy-flush"),
    ("slave-serve-stale-data", "replica-serve-stale-data"),
    ("slave-read-only", "replica-read-only"),
    ("slave-ignore-maxmemory", "replica-ignore-maxmemory"),
    ("slave-announce-ip", "replica-announce-ip"),
    (
        "cluster-slave-validity-factor",
        "cluster-replica-validity-factor",
    ),
    ("slave-priority", "replica-priority"),
    ("slave-announce-port", "replica-announce-port"),
    ("repl-ping-slave-period", "repl-ping-replica-period"),
    ("min-slaves-to-write", "min-replicas-to-write"),
    ("min-slaves-max-lag", "min-replicas-max-lag"),
    ("slaveof", "replicaof"),
];

/// The parameter an old name stands for (`hash-max-ziplist-entries` for
/// `hash-max-listpack-entries`); None for a name that is not an alias.
pub(crate) fn alias_primary(name: &str) -> Option<&'static str> {
    ALIASES
        .iter()
        .find_map(|&(alias, primary)| (alias == name).then_some(primary))
}

fn alias_of(name: &str) -> Option<&'static str> {
    ALIASES.iter().find_map(|&(a, b)| {
        if a == name {
            Some(b)
        } else if b == name {
            Some(a)
        } else {
            None
        }
    })
}

/// One class's `<hard> <soft> <seconds>` in a `client-output-buffer-limit` value such as
/// `normal 0 0 0 pubsub 32mb 8mb 60` (`slave` and `replica` name the same class).
pub fn output_limit_class(value: &str, class: &str) -> Option<[u64; 3]> {
    let words: Vec<&str> = value.split_whitespace().collect();
    words.chunks(4).rev().find_map(|c| match c {
        [name, hard, soft, secs] if name.eq_ignore_ascii_case(class) => {
            Some([parse_memory(hard)?, parse_memory(soft)?, secs.parse().ok()?])
        }
        _ => None,
    })
}

/// Parses a Redis memory value as its `memtoull` does: digits and an optional unit, any case,
/// b/k/kb/m/mb/g/gb (k = 1000, kb = 1024). Redis's edges are kept, since configuration files
/// written for Redis must mean the same here: no digits is 0 (`""`, `"kb"`), digits past
/// 2^64 - 1 saturate, and the unit's multiplication wraps.
pub fn parse_memory(s: &str) -> Option<u64> {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    let (digits, unit) = s.split_at(end);
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1 << 10,
        "m" => 1_000_000,
        "mb" => 1 << 20,
        "g" => 1_000_000_000,
        "gb" => 1 << 30,
        _ => return None,
    };
    // memtoull copies the digits into a 128-byte buffer.
    if digits.len() >= 128 {
        return None;
    }
    let value = digits.bytes().fold(0u64, |v, d| {
        v.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    });
    Some(value.wrapping_mul(mul))
}

/// `maxmemory-clients`' value as Redis stores it: bytes, or a negated percentage. A byte
/// count is read into a signed `ssize_t`, so one past `i64::MAX` reads as a percentage too.
fn parse_memory_or_percent(s: &str) -> Result<i64, String> {
    let value = match parse_memory(s) {
        Some(bytes) => bytes as i64,
        None => s
            .strip_suffix('%')
            .filter(|digits| !digits.is_empty())
            .and_then(|digits| parse_i64(digits.as_bytes()))
            .filter(|&pct| pct >= 0)
            .map(|pct| -pct)
            .ok_or_else(|| "argument must be a memory or percent value".to_string())?,
    };
    if value < -100 {
        return Err("percentage argument must be less or equal to 100".into());
    }
    Ok(value)
}

/// Why a value was refused: the text after `CONFIG SET failed (...) - `.
fn validate(param: &Param, value: &str) -> Result<String, String> {
    match param.kind {
        Kind::Int { min, max } => {
            let v = parse_i64(value.as_bytes())
                .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
            if v < min || v > max {
                return Err(format!(
                    "argument must be between {min} and {max} inclusive"
                ));
            }
            Ok(v.to_string())
        }
        Kind::Memory { min, max } => {
            let v =
                parse_memory(value).ok_or_else(|| "argument must be a memory value".to_string())?;
            if v < min || v > max {
                return Err(format!(
                    "argument must be between {min} and {max} inclusive"
                ));
            }
            Ok(v.to_string())
        }
        // Shown as Redis's CONFIG GET shows it: bytes, or the percentage with its sign.
        Kind::MemoryOrPercent => parse_memory_or_percent(value).map(|v| match v {
            v if v < 0 => format!("{}%", -v),
            v => v.to_string(),
        }),
        Kind::Bool => match value.to_ascii_lowercase().as_str() {
            "yes" => Ok("yes".into()),
            "no" => Ok("no".into()),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Kind::Enum(options) => {
            let lower = value.to_ascii_lowercase();
            if options.contains(&lower.as_str()) {
                Ok(lower)
            } else {
                Err("argument(s) must be one of the following: ".to_string() + &options.join(", "))
            }
        }
        Kind::Str => Ok(value.to_string()),
        // Kept as Redis prints it, plus the `n` that its text drops under `A` (the classes
        // stay as set, as Redis's flags do; CONFIG GET shows Redis's text).
        Kind::KeyspaceEvents => damselfly_storage::notify::parse_flags(value)
            .map(|flags| {
                let mut text = damselfly_storage::notify::flags_text(flags);
                if damselfly_storage::notify::parse_flags(&text) != Some(flags) {
                    text.push('n');
                }
                text
            })
            .ok_or_else(|| "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string()),
        Kind::Percentiles => crate::latency::parse_percentiles(value)
            .map(|ps| crate::latency::percentiles_text(&ps))
            .map_err(str::to_string),
    }
}

/// Rebuilds the TLS configuration from the parameters' values as `get` reads them (the ones
/// a CONFIG SET is about to store, the current ones for the rest), and puts it in force for
/// new connections; the error says why it does not build. Set by the runtime layer, which
/// owns TLS, so this crate (and the coordinator that runs CONFIG SET) need not know it.
pub type TlsReload = Box<dyn Fn(&dyn Fn(&str) -> String) -> Result<(), String> + Send + Sync>;

/// The live configuration of the server, shared by every thread.
pub struct Config {
    values: RwLock<BTreeMap<&'static str, String>>,
    /// Called by CONFIG SET of any `tls-*` parameter, after the values validated and before
    /// they are stored: an error fails the CONFIG SET and keeps the old values in force.
    tls_reload: std::sync::OnceLock<TlsReload>,
    pub proto_max_bulk_len: AtomicU64,
    pub query_buffer_limit: AtomicU64,
    pub output_buffer_limit: AtomicU64,
    /// The `pubsub` class of `client-output-buffer-limit`: hard bytes, soft bytes, soft
    /// seconds (0 = no limit).
    pub pubsub_output_limit: [AtomicU64; 3],
    pub maxclients: AtomicU64,
    pub timeout_secs: AtomicU64,
    /// `appendonly yes` with `appendfsync always`: replies and transactions wait for the
    /// journal to be on disk.
    pub journal_always: AtomicBool,
    pub active_expire: AtomicBool,
    /// `migrate-connections`: a connection using one other shard moves to its thread.
    pub migrate_connections: AtomicBool,
    /// `direct-replies`: a shard writes a one-command round's reply to the client's socket.
    pub direct_replies: AtomicBool,
    /// `notify-keyspace-events` as flags (damselfly_storage::notify::class).
    pub notify_flags: AtomicU32,
    /// `busy-reply-threshold` in milliseconds (read by every script run).
    pub busy_reply_ms: AtomicU64,
    /// `script-shard-locking`, as a [`ScriptLocking`] (read by every script run).
    script_locking: AtomicU8,
    /// `maxmemory` in bytes, 0 for no limit (read before every command that may grow memory).
    pub maxmemory: AtomicU64,
    /// `maxmemory-policy` as an index into [`Policy::ALL`], and its tuning, read
    /// when eviction runs ([`Config::eviction`]).
    maxmemory_policy: AtomicU8,
    maxmemory_samples: AtomicU32,
    eviction_tenacity: AtomicU32,
    lfu_log_factor: AtomicU32,
    lfu_decay_time: AtomicU32,
    /// `slowlog-log-slower-than` in microseconds (negative: off), read after every command.
    pub slowlog_slower_than: AtomicI64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: AtomicU64,
    /// `latency-monitor-threshold` in milliseconds (0: off).
    pub latency_monitor_ms: AtomicU64,
    /// `latency-tracking`: per-command latency histograms.
    pub latency_tracking: AtomicBool,
    /// Bumped by every change, so threads know to re-read what they cache (encoding limits).
    pub generation: AtomicU64,
    /// The config file the server started with (absolute), for CONFIG REWRITE.
    file: RwLock<Option<String>>,
}

impl Default for Config {
    fn default() -> Self {
        let c = Config {
            values: RwLock::new(
                PARAMS
                    .iter()
                    .map(|p| (p.name, p.default.to_string()))
                    .collect(),
            ),
            tls_reload: std::sync::OnceLock::new(),
            proto_max_bulk_len: AtomicU64::new(0),
            query_buffer_limit: AtomicU64::new(0),
            output_buffer_limit: AtomicU64::new(0),
            pubsub_output_limit: Default::default(),
            maxclients: AtomicU64::new(0),
            timeout_secs: AtomicU64::new(0),
            journal_always: AtomicBool::new(false),
            active_expire: AtomicBool::new(true),
            migrate_connections: AtomicBool::new(true),
            direct_replies: AtomicBool::new(true),
            busy_reply_ms: AtomicU64::new(0),
            notify_flags: AtomicU32::new(0),
            script_locking: AtomicU8::new(0),
            maxmemory: AtomicU64::new(0),
            maxmemory_policy: AtomicU8::new(0),
            maxmemory_samples: AtomicU32::new(0),
            eviction_tenacity: AtomicU32::new(0),
            lfu_log_factor: AtomicU32::new(0),
            lfu_decay_time: AtomicU32::new(0),
            slowlog_slower_than: AtomicI64::new(0),
            slowlog_max_len: AtomicU64::new(0),
            latency_monitor_ms: AtomicU64::new(0),
            latency_tracking: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            file: RwLock::new(None),
        };
        c.refresh_atomics();
        c
    }
}

impl Config {
    /// Records the config file the server was started with.
    pub fn set_file(&self, path: &str) {
        let absolute = std::path::absolute(path)
            .map_or_else(|_| path.to_string(), |p| p.to_string_lossy().into_owned());
        *self.file.write().unwrap_or_else(|e| e.into_inner()) = Some(absolute);
    }

    /// The config file, if the server was started with one.
    pub fn file(&self) -> Option<String> {
        self.file.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn param(name: &str) -> Option<&'static Param> {
        PARAMS.iter().find(|p| p.name.eq_ignore_ascii_case(name))
    }

    /// Sets a parameter at start-up (immutable ones allowed). Errors carry the reason.
    pub fn set_initial(&self, name: &str, value: &str) -> Result<(), String> {
        let param =
            Self::param(name).ok_or_else(|| format!("unknown configuration parameter '{name}'"))?;
        let v = validate(param, value).map_err(|e| format!("'{name}': {e}"))?;
        self.store(param.name, v);
        self.note_flags(param, value);
        self.refresh_atomics();
        Ok(())
    }

    /// CONFIG SET of several pairs, all or nothing. The error is the full Redis reply text.
    pub fn set_runtime(&self, pairs: &[(String, String)]) -> Result<(), String> {
        let mut staged = Vec::with_capacity(pairs.len());
        for (i, (name, value)) in pairs.iter().enumerate() {
            let Some(param) = Self::param(name) else {
                return Err(format!(
                    "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"
                ));
            };
            if pairs[..i].iter().any(|(n, _)| n.eq_ignore_ascii_case(name)) {
                return Err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"));
            }
            if !param.mutable {
                return Err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"));
            }
            let v = validate(param, value).map_err(|e| {
                format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")
            })?;
            staged.push((param, v, value));
        }
        if let (Some(reload), Some((first, _, _))) = (
            self.tls_reload.get(),
            staged.iter().find(|(p, _, _)| p.name.starts_with("tls-")),
        ) {
            let get = |name: &str| {
                staged
                    .iter()
                    .find(|(p, _, _)| p.name == name)
                    .map_or_else(|| self.get(name), |(_, v, _)| v.clone())
            };
            // Redis's reply; the reload logs the reason, as Redis does.
            if reload(&get).is_err() {
                return Err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{}') - Unable to update TLS configuration. Check server logs.",
                    first.name
                ));
            }
        }
        for (param, v, value) in staged {
            self.store(param.name, v);
            self.note_flags(param, value);
        }
        self.refresh_atomics();
        Ok(())
    }

    /// Installs the TLS rebuild that CONFIG SET of a `tls-*` parameter runs (once; later
    /// calls are ignored).
    pub fn set_tls_reload(&self, reload: TlsReload) {
        let _ = self.tls_reload.set(reload);
    }

    /// CONFIG GET: every (name, value) matching any of the glob patterns.
    pub fn get_matching(&self, patterns: &[&[u8]]) -> Vec<(&'static str, String)> {
        let values = self.values();
        values
            .iter()
            .filter(|(name, _)| {
                patterns.iter().any(|p| {
                    // A name without glob characters is looked up: hidden ones are found
                    // only so, as in Redis.
                    if !p.iter().any(|c| b"[*?".contains(c)) {
                        return p.eq_ignore_ascii_case(name.as_bytes());
                    }
                    !HIDDEN.contains(name)
                        && damselfly_storage::glob::glob_match(p, name.as_bytes(), true)
                })
            })
            .map(|(k, v)| match Self::param(k).map(|p| p.kind) {
                Some(Kind::KeyspaceEvents) => (
                    *k,
                    damselfly_storage::notify::flags_text(
                        damselfly_storage::notify::parse_flags(v).unwrap_or(0),
                    ),
                ),
                _ => (*k, v.clone()),
            })
            .collect()
    }

    pub fn get(&self, name: &str) -> String {
        self.values().get(name).cloned().unwrap_or_default()
    }

    pub fn get_u64(&self, name: &str) -> u64 {
        self.get(name).parse().unwrap_or(0)
    }

    fn values(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<&'static str, String>> {
        self.values.read().unwrap_or_else(|e| e.into_inner())
    }

    fn values_mut(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<&'static str, String>> {
        self.values.write().unwrap_or_else(|e| e.into_inner())
    }

    fn store(&self, name: &'static str, value: String) {
        let mut values = self.values_mut();
        if let Some(alias) = alias_of(name) {
            values.insert(alias, value.clone());
        }
        values.insert(name, value);
    }

    /// The encoding thresholds as currently configured.
    pub fn encoding_limits(&self) -> EncodingLimits {
        let size = |name: &str| self.get_u64(name) as usize;
        EncodingLimits {
            hash_max_entries: size("hash-max-listpack-entries"),
            hash_max_value: size("hash-max-listpack-value"),
            set_max_intset_entries: size("set-max-intset-entries"),
            zset_max_entries: size("zset-max-listpack-entries"),
            zset_max_value: size("zset-max-listpack-value"),
            list_max_listpack_size: self.get("list-max-listpack-size").parse().unwrap_or(-2),
            hll_sparse_max_bytes: size("hll-sparse-max-bytes"),
            rdb_compression: self.get("rdbcompression") == "yes",
            stream_node: NodeLimits {
                max_bytes: size("stream-node-max-bytes"),
                max_entries: size("stream-node-max-entries"),
            },
        }
    }

    /// `notify-keyspace-events` as flags, read from the value given: the text kept for CONFIG
    /// GET is Redis's, which leaves out `n` next to `A`, so it cannot be read back.
    fn note_flags(&self, param: &Param, value: &str) {
        if matches!(param.kind, Kind::KeyspaceEvents) {
            let flags = damselfly_storage::notify::parse_flags(value).unwrap_or(0);
            self.notify_flags.store(flags, Ordering::Relaxed);
        }
    }

    fn refresh_atomics(&self) {
        let r = Ordering::Relaxed;
        self.slowlog_slower_than.store(
            self.get("slowlog-log-slower-than").parse().unwrap_or(10000),
            r,
        );
        self.slowlog_max_len
            .store(self.get_u64("slowlog-max-len"), r);
        self.latency_monitor_ms
            .store(self.get_u64("latency-monitor-threshold"), r);
        self.latency_tracking
            .store(self.get("latency-tracking") == "yes", r);
        self.proto_max_bulk_len
            .store(self.get_u64("proto-max-bulk-len"), r);
        self.query_buffer_limit
            .store(self.get_u64("client-query-buffer-limit"), r);
        self.output_buffer_limit
            .store(self.get_u64("damselfly-output-buffer-limit"), r);
        // A value naming other classes only leaves this one as it was, as in Redis.
        if let Some(limits) = output_limit_class(&self.get("client-output-buffer-limit"), "pubsub")
        {
            for (to, v) in self.pubsub_output_limit.iter().zip(limits) {
                to.store(v, r);
            }
        }
        self.maxclients.store(self.get_u64("maxclients"), r);
        self.timeout_secs.store(self.get_u64("timeout"), r);
        self.migrate_connections
            .store(self.get("migrate-connections") == "yes", r);
        self.direct_replies
            .store(self.get("direct-replies") == "yes", r);
        self.journal_always.store(
            self.get("appendonly") == "yes" && self.get("appendfsync") == "always",
            r,
        );
        self.busy_reply_ms
            .store(self.get_u64("busy-reply-threshold"), r);
        let locking = match self.get("script-shard-locking").as_str() {
            "all" => ScriptLocking::All,
            "strict" => ScriptLocking::Strict,
            _ => ScriptLocking::Declared,
        };
        self.script_locking.store(locking as u8, r);
        self.maxmemory.store(self.get_u64("maxmemory"), r);
        // `cache-mode yes` replaces the policy with Damselfly's CLOCK sweep over all keys.
        let policy = match self.get("cache-mode").as_str() {
            "yes" => Policy::AllKeysClock,
            _ => Policy::parse(&self.get("maxmemory-policy")).unwrap_or_default(),
        };
        let index = Policy::ALL.iter().position(|p| *p == policy).unwrap_or(0);
        self.maxmemory_policy.store(index as u8, r);
        // Each is an `int` in Redis's range, so it fits.
        let int = |name: &str| u32::try_from(self.get_u64(name)).unwrap_or(u32::MAX);
        self.maxmemory_samples.store(int("maxmemory-samples"), r);
        self.eviction_tenacity
            .store(int("maxmemory-eviction-tenacity"), r);
        self.lfu_log_factor.store(int("lfu-log-factor"), r);
        self.lfu_decay_time.store(int("lfu-decay-time"), r);
        // Last, so a thread that sees the new generation sees the values above.
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// `maxmemory`, the policy and its tuning as configured now.
    pub fn eviction(&self) -> EvictionConfig {
        let r = Ordering::Relaxed;
        EvictionConfig {
            maxmemory: self.maxmemory.load(r),
            policy: Policy::ALL
                .get(usize::from(self.maxmemory_policy.load(r)))
                .copied()
                .unwrap_or_default(),
            samples: self.maxmemory_samples.load(r) as usize,
            tenacity: self.eviction_tenacity.load(r),
            lfu_log_factor: self.lfu_log_factor.load(r),
            lfu_decay_time: u64::from(self.lfu_decay_time.load(r)),
        }
    }

    pub fn script_locking(&self) -> ScriptLocking {
        match self.script_locking.load(Ordering::Relaxed) {
            1 => ScriptLocking::All,
            2 => ScriptLocking::Strict,
            _ => ScriptLocking::Declared,
        }
    }
}

/// `script-shard-locking`: what a script run locks (docs/scripting.md, "Atomicity").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptLocking {
    /// Its declared keys, or every shard once it was seen to need more.
    Declared = 0,
    /// Every shard, always.
    All = 1,
    /// Its declared keys; calls on other keys are refused.
    Strict = 2,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory("1gb"), Some(1 << 30));
        assert_eq!(parse_memory("512MB"), Some(512 << 20));
        assert_eq!(parse_memory("100k"), Some(100_000));
        assert_eq!(parse_memory("12"), Some(12));
        assert_eq!(parse_memory("x"), None);
        // memtoull's edges, as redis-server 7.0 answers them.
        assert_eq!(parse_memory("1kB"), Some(1024));
        assert_eq!(parse_memory("10B"), Some(10));
        assert_eq!(parse_memory(""), Some(0));
        assert_eq!(parse_memory("kb"), Some(0));
        assert_eq!(parse_memory("00012"), Some(12));
        assert_eq!(parse_memory("99999999999999999999999"), Some(u64::MAX));
        assert_eq!(
            parse_memory("18446744073709551616k"),
            Some(18446744073709550616)
        );
        for bad in [
            "-1", "+5", " 10", "10 ", "1.5m", "1tb", "1kbb", "0x10", "1 kb",
        ] {
            assert_eq!(parse_memory(bad), None, "{bad}");
        }
        assert_eq!(parse_memory(&"1".repeat(128)), None);
    }

    #[test]
    fn maxmemory_parameters() {
        let c = Config::default();
        assert_eq!(c.eviction().policy, Policy::NoEviction);
        assert_eq!(c.eviction().samples, 5);
        assert_eq!(c.eviction().tenacity, 10);
        let set = |name: &str, value: &str| c.set_runtime(&[(name.into(), value.into())]);
        set("maxmemory", "20mb").unwrap();
        assert_eq!(c.maxmemory.load(Ordering::Relaxed), 20 << 20);
        set("maxmemory-policy", "ALLKEYS-LFU").unwrap();
        assert_eq!(c.get("maxmemory-policy"), "allkeys-lfu");
        assert_eq!(c.eviction().policy, Policy::AllKeysLfu);
        set("lfu-log-factor", "2147483647").unwrap();
        assert_eq!(c.eviction().lfu_log_factor, i32::MAX as u32);
        assert_eq!(
            set("maxmemory-eviction-tenacity", "101").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-eviction-tenacity') - argument must be between 0 and 100 inclusive"
        );
        assert!(set("maxmemory-samples", "05").is_err());
        assert!(set("maxmemory-samples", "+5").is_err());
        for (value, shown) in [("10%", "10%"), ("0%", "0"), ("1kb", "1024"), ("", "0")] {
            set("maxmemory-clients", value).unwrap();
            assert_eq!(c.get("maxmemory-clients"), shown);
        }
        assert_eq!(
            set("maxmemory-clients", "101%").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - percentage argument must be less or equal to 100"
        );
        assert!(set("maxmemory-clients", "-1%")
            .unwrap_err()
            .ends_with("argument must be a memory or percent value"));
        assert_eq!(
            set("proto-max-bulk-len", "100").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between 1048576 and 9223372036854775807 inclusive"
        );
    }

    #[test]
    fn output_limit_classes() {
        let c = Config::default();
        let limits = |c: &Config| {
            c.pubsub_output_limit
                .each_ref()
                .map(|a| a.load(Ordering::Relaxed))
        };
        assert_eq!(limits(&c), [32 << 20, 8 << 20, 60]);
        c.set_runtime(&[(
            "client-output-buffer-limit".into(),
            "pubsub 1mb 100kb 5".into(),
        )])
        .unwrap();
        assert_eq!(limits(&c), [1 << 20, 100 << 10, 5]);
        c.set_runtime(&[("client-output-buffer-limit".into(), "normal 0 0 0".into())])
            .unwrap();
        assert_eq!(limits(&c), [1 << 20, 100 << 10, 5]);
        assert_eq!(output_limit_class("pubsub x 1 1", "pubsub"), None);
    }

    #[test]
    fn set_validates_like_redis() {
        let c = Config::default();
        assert_eq!(c.maxclients.load(Ordering::Relaxed), 10000);
        c.set_runtime(&[("maxclients".into(), "5".into())]).unwrap();
        assert_eq!(c.maxclients.load(Ordering::Relaxed), 5);
        assert_eq!(
            c.set_runtime(&[("timeout".into(), "abc".into())]).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'timeout') - argument couldn't be parsed into an integer"
        );
        assert_eq!(
            c.set_runtime(&[("nosuch".into(), "1".into())]).unwrap_err(),
            "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'"
        );
        assert!(c
            .set_runtime(&[("databases".into(), "4".into())])
            .unwrap_err()
            .contains("immutable"));
        // All or nothing.
        assert!(c
            .set_runtime(&[("timeout".into(), "7".into()), ("hz".into(), "x".into())])
            .is_err());
        assert_eq!(c.get("timeout"), "0");
        c.set_runtime(&[("proto-max-bulk-len".into(), "1mb".into())])
            .unwrap();
        assert_eq!(c.get("proto-max-bulk-len"), "1048576");
        let got = c.get_matching(&[b"*max-*-entries*"]);
        assert!(got.iter().any(|(k, _)| *k == "hash-max-listpack-entries"));
    }

    #[test]
    fn slowlog_and_latency_parameters() {
        let c = Config::default();
        let set = |name: &str, value: &str| c.set_runtime(&[(name.into(), value.into())]);
        assert_eq!(c.slowlog_slower_than.load(Ordering::Relaxed), 10000);
        assert!(c.latency_tracking.load(Ordering::Relaxed));
        set("slowlog-log-slower-than", "-1").unwrap();
        assert_eq!(c.slowlog_slower_than.load(Ordering::Relaxed), -1);
        assert_eq!(
            set("slowlog-log-slower-than", "-2").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'slowlog-log-slower-than') - argument must be between -1 and 9223372036854775807 inclusive"
        );
        set("latency-tracking-info-percentiles", "99.90 50.0 0").unwrap();
        assert_eq!(c.get("latency-tracking-info-percentiles"), "99.9 50 0");
        assert_eq!(
            set("latency-tracking-info-percentiles", "50 101").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
        );
        assert_eq!(
            set("latency-tracking-info-percentiles", "abc").unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'latency-tracking-info-percentiles') - Invalid latency-tracking-info-percentiles parameters"
        );
        set("latency-tracking", "no").unwrap();
        assert!(!c.latency_tracking.load(Ordering::Relaxed));
    }

    /// CONFIG SET of a `tls-*` parameter runs the TLS rebuild with the values being set; its
    /// failure fails the whole CONFIG SET, which keeps every old value.
    #[test]
    fn tls_parameters_go_through_the_reload() {
        use std::sync::{Arc, Mutex};
        let c = Config::default();
        assert_eq!(c.get("tls-auth-clients"), "yes");
        assert_eq!(c.get("tls-session-cache-size"), "20480");
        // Without a reload installed (no TLS port) the values are only stored.
        c.set_runtime(&[("tls-cert-file".into(), "a.crt".into())])
            .unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        c.set_tls_reload(Box::new(move |get| {
            let cert = get("tls-cert-file");
            log.lock()
                .unwrap()
                .push((cert.clone(), get("tls-auth-clients")));
            if cert == "bad.crt" {
                Err("no".into())
            } else {
                Ok(())
            }
        }));
        let set = |pairs: &[(&str, &str)]| {
            c.set_runtime(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        set(&[("tls-auth-clients", "OPTIONAL")]).unwrap();
        set(&[("maxclients", "9")]).unwrap();
        assert_eq!(
            set(&[("maxclients", "5"), ("tls-cert-file", "bad.crt")]).unwrap_err(),
            "ERR CONFIG SET failed (possibly related to argument 'tls-cert-file') - Unable to update TLS configuration. Check server logs."
        );
        assert_eq!(c.get("tls-cert-file"), "a.crt");
        assert_eq!(c.get("maxclients"), "9");
        assert!(set(&[("tls-auth-clients", "maybe")]).is_err());
        assert_eq!(
            *seen.lock().unwrap(),
            vec![
                ("a.crt".to_string(), "optional".to_string()),
                ("bad.crt".to_string(), "optional".to_string()),
            ]
        );
    }

    /// Redis prints `KEAmn` as `AKEm`, but `new` events stay on.
    #[test]
    fn keyspace_events_keep_new_under_all() {
        use damselfly_storage::notify::class;
        let c = Config::default();
        c.set_runtime(&[("notify-keyspace-events".into(), "KEAmn".into())])
            .unwrap();
        let flags = c.notify_flags.load(Ordering::Relaxed);
        assert_ne!(flags & class::NEW, 0);
        assert_ne!(flags & class::KEY_MISS, 0);
        let got = c.get_matching(&[b"notify-keyspace-events"]);
        assert_eq!(got, vec![("notify-keyspace-events", "AKEm".to_string())]);
        c.set_runtime(&[("notify-keyspace-events".into(), "KEA".into())])
            .unwrap();
        assert_eq!(c.notify_flags.load(Ordering::Relaxed) & class::NEW, 0);
    }
}
