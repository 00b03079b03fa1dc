//! Prometheus metrics (docs/operations.md, "Metrics"): the server's figures under the names
//! redis_exporter gives them (so its Grafana dashboards and alerts work unchanged), plus
//! Damselfly's per-shard series with a `shard` label.
//!
//! A scrape runs on the metrics endpoint's own thread, never on a shard thread: [`gather`]
//! sends `ShardMsg::Report` to every shard's mailbox, exactly as INFO does, and blocks (with
//! a deadline) until each reply arrives; the figures are then merged as INFO merges them, so a
//! scrape and an INFO at the same moment report the same numbers. [`Snapshot::render`]
//! encodes them with `prometheus-client` (a [`Collector`] of constant gauges and counters),
//! in OpenMetrics text or in Prometheus's text format 0.0.4 (see [`Format`]).
//!
//! The HTTP serving lives in the net layer (crates/net/src/metrics_http.rs).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use damselfly_commands::stats::ThreadStats;
use damselfly_commands::table::COMMANDS;
use futures_channel::oneshot;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;

use crate::conn_family::REDIS_VERSION;
use crate::memory_family::MemoryFigures;
use crate::messages::{ShardMsg, ThreadReport};
use crate::Cluster;

/// The exposition format of a scrape's body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Prometheus's text format 0.0.4: counter families are named with their `_total`
    /// suffix in `# HELP` and `# TYPE`, and there is no `# EOF`.
    Prometheus,
    /// OpenMetrics 1.0 text, as `prometheus-client` writes it.
    OpenMetrics,
}

impl Format {
    /// The format a scraper's `Accept` header asks for: OpenMetrics when it names it (as
    /// Prometheus does by default), else the 0.0.4 text format.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a)
                if a.to_ascii_lowercase()
                    .contains("application/openmetrics-text") =>
            {
                Format::OpenMetrics
            }
            _ => Format::Prometheus,
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// A waker that unparks the thread blocked in [`wait_until`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `future` on this (non-runtime) thread until it completes or `deadline` passes.
fn wait_until<F: Future + Unpin>(mut future: F, deadline: Instant) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    loop {
        if let Poll::Ready(v) = Pin::new(&mut future).poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        // A spurious wake-up only polls again.
        std::thread::park_timeout(deadline - now);
    }
}

/// Asks every shard for its report and waits for all of them, at most `timeout` in all.
/// Blocks the calling thread: never call it on a shard thread (that shard could not answer).
/// None when a shard did not answer in time or has stopped (shutdown).
fn ask_shards(cluster: &Cluster, timeout: Duration) -> Option<Vec<ThreadReport>> {
    let deadline = Instant::now() + timeout;
    let mut waiting = Vec::with_capacity(cluster.mailboxes.len());
    for mailbox in &cluster.mailboxes {
        let (tx, rx) = oneshot::channel();
        if !mailbox.send(ShardMsg::Report(tx)) {
            return None;
        }
        waiting.push(rx);
    }
    waiting
        .into_iter()
        .map(|rx| wait_until(rx, deadline).and_then(Result::ok))
        .collect()
}

/// One database's line of INFO keyspace.
#[derive(Debug, Clone, Copy, Default)]
struct DbFigures {
    keys: usize,
    expires: usize,
    /// Milliseconds, averaged over the shards that have keys with a TTL (as INFO does).
    avg_ttl_ms: u64,
}

/// The server-wide figures of one scrape, merged from every shard's report as INFO merges
/// them.
#[derive(Debug)]
struct Figures {
    reports: Vec<ThreadReport>,
    stats: ThreadStats,
    dbs: Vec<DbFigures>,
    uptime: u64,
    start_time: u64,
    connected_clients: u64,
    blocked_clients: u64,
    maxclients: u64,
    used_memory: u64,
    rss: u64,
    peak: u64,
    startup: u64,
    dataset: u64,
    overhead: u64,
    lua: u64,
    client_buffers: u64,
    fragmentation: f64,
    maxmemory: u64,
    maxmemory_policy: String,
    expired: u64,
    evicted: u64,
    hits: u64,
    misses: u64,
    ops_per_sec: u64,
    pubsub_channels: usize,
    pubsub_patterns: usize,
    cpu_sys: f64,
    cpu_user: f64,
    changes_since_save: u64,
    last_save_unix: u64,
    bgsave_in_progress: bool,
    last_bgsave_ok: bool,
    aof_enabled: bool,
    aof_rewrite_in_progress: bool,
    /// redis_instance_info's labels.
    tcp_port: u16,
    run_id: String,
    process_id: u32,
}

impl Figures {
    fn merge(cluster: &Cluster, reports: Vec<ThreadReport>) -> Figures {
        let mut stats = ThreadStats::default();
        for r in &reports {
            stats.merge(&r.stats);
        }
        let sum = |f: fn(&ThreadReport) -> u64| reports.iter().map(f).sum::<u64>();
        let dbs = (0..cluster.databases)
            .map(|db| {
                let (keys, expires, ttl_sum, ttl_n) =
                    reports.iter().fold((0, 0, 0u64, 0u64), |acc, r| {
                        let (k, e, t) = r.keyspace.get(db).copied().unwrap_or((0, 0, 0));
                        (acc.0 + k, acc.1 + e, acc.2 + t, acc.3 + u64::from(t > 0))
                    });
                DbFigures {
                    keys,
                    expires,
                    avg_ttl_ms: ttl_sum.checked_div(ttl_n).unwrap_or(0),
                }
            })
            .collect();
        let memory = MemoryFigures::gather(cluster, &reports);
        // INFO prints the ratio with two decimals; report the same number.
        let fragmentation = format!("{:.2}", memory.fragmentation().0)
            .parse()
            .unwrap_or(0.0);
        let saves = cluster.saves.state();
        let dirty = sum(|r| r.dirty);
        let (cpu_sys, cpu_user) = crate::server_family::cpu_times();
        let info = cluster.server_info();
        let uptime = cluster.started.elapsed().as_secs();
        // The same first replica INFO would read on thread 0.
        let (pubsub_channels, pubsub_patterns) = reports.first().map_or((0, 0), |r| r.pubsub);
        Figures {
            dbs,
            uptime,
            start_time: cluster.started_unix_secs(),
            connected_clients: cluster.connected_clients.load(Ordering::Relaxed),
            blocked_clients: cluster.blocked_clients.load(Ordering::Relaxed),
            maxclients: cluster.config.maxclients.load(Ordering::Relaxed),
            used_memory: memory.used(),
            rss: memory.rss,
            peak: memory.peak,
            startup: memory.startup,
            dataset: memory.dataset,
            overhead: memory.overhead(),
            lua: sum(|r| r.lua_memory as u64),
            client_buffers: memory.clients,
            fragmentation,
            maxmemory: cluster.config.maxmemory.load(Ordering::Relaxed),
            maxmemory_policy: cluster.config.get("maxmemory-policy"),
            expired: sum(|r| r.shard_stats.expired_keys),
            evicted: sum(|r| r.shard_stats.evicted_keys),
            hits: sum(|r| r.shard_stats.keyspace_hits),
            misses: sum(|r| r.shard_stats.keyspace_misses),
            ops_per_sec: sum(|r| r.ops_per_sec),
            pubsub_channels,
            pubsub_patterns,
            cpu_sys,
            cpu_user,
            changes_since_save: dirty.saturating_sub(saves.dirty_base),
            last_save_unix: saves.last_save_unix,
            bgsave_in_progress: saves.running.is_some(),
            last_bgsave_ok: saves.last_ok,
            aof_enabled: reports.iter().any(|r| r.journal.is_some()),
            aof_rewrite_in_progress: cluster.rewrites.state().running.is_some(),
            tcp_port: info.tcp_port,
            run_id: cluster.run_id.clone(),
            process_id: std::process::id(),
            stats,
            reports,
        }
    }
}

/// What one scrape reports.
#[derive(Debug)]
pub struct Snapshot(State);

#[derive(Debug)]
enum State {
    /// The server is still loading its data at start-up.
    Loading,
    /// A shard did not answer in time (or the server is stopping): `redis_up 0`, as
    /// redis_exporter reports a server it cannot read.
    Down,
    Up(Box<Figures>),
}

/// How long a scrape waits for the shards' reports.
pub const GATHER_TIMEOUT: Duration = Duration::from_secs(3);

/// Gathers a scrape's figures from every shard. Blocks the calling thread for at most
/// `timeout`; call it from a thread of its own, never from a shard thread.
pub fn gather(cluster: &Cluster, timeout: Duration) -> Snapshot {
    match ask_shards(cluster, timeout) {
        Some(reports) => Snapshot(State::Up(Box::new(Figures::merge(cluster, reports)))),
        None => {
            tracing::warn!(
                "metrics: a shard did not report within {timeout:?}; serving redis_up 0"
            );
            Snapshot(State::Down)
        }
    }
}

/// Gathers and renders in one step (the endpoint's `GET /metrics`).
pub fn render_metrics(cluster: &Cluster, format: Format) -> String {
    gather(cluster, GATHER_TIMEOUT).render(format)
}

impl Snapshot {
    /// The scrape served while the data loads at start-up.
    pub fn loading() -> Snapshot {
        Snapshot(State::Loading)
    }

    /// The exposition text.
    pub fn render(self, format: Format) -> String {
        let mut registry = Registry::default();
        registry.register_collector(Box::new(self));
        let mut text = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &registry) {
            // Writing to a String cannot fail, nor can our collector: log rather than crash.
            tracing::error!("metrics: encoding failed: {e}");
        }
        match format {
            Format::OpenMetrics => text,
            Format::Prometheus => to_text_0_0_4(&text),
        }
    }
}

/// OpenMetrics text to Prometheus's 0.0.4 text format. The two differ, for what we write,
/// only where OpenMetrics names a counter family without its `_total` suffix in `# HELP`
/// and `# TYPE` (its samples carry it) and in the closing `# EOF`, which 0.0.4 does not have.
/// prometheus-client writes only OpenMetrics; this rewrites those lines.
fn to_text_0_0_4(openmetrics: &str) -> String {
    let mut out = String::with_capacity(openmetrics.len() + 1024);
    let mut help: Option<&str> = None;
    let flush_help = |out: &mut String, help: &mut Option<&str>| {
        if let Some(h) = help.take() {
            out.push_str(h);
            out.push('\n');
        }
    };
    for line in openmetrics.lines() {
        if line.starts_with("# HELP ") {
            flush_help(&mut out, &mut help);
            help = Some(line);
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let Some(family) = rest.strip_suffix(" counter") {
                let total = format!("{family}_total");
                if let Some(h) = help.take() {
                    let doc = h["# HELP ".len()..]
                        .strip_prefix(family)
                        .unwrap_or_default();
                    out.push_str(&format!("# HELP {total}{doc}\n"));
                }
                out.push_str(&format!("# TYPE {total} counter\n"));
                continue;
            }
        }
        flush_help(&mut out, &mut help);
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    flush_help(&mut out, &mut help);
    out
}

/// Writes metric families through prometheus-client's encoder.
struct Out<'a> {
    enc: DescriptorEncoder<'a>,
}

type Fmt = Result<(), std::fmt::Error>;

impl Out<'_> {
    fn gauge<V: EncodeGaugeValue>(&mut self, name: &str, help: &str, value: V) -> Fmt {
        let metric = ConstGauge::new(value);
        let family = self
            .enc
            .encode_descriptor(name, help, None, metric.metric_type())?;
        metric.encode(family)
    }

    /// `name` is the sample's name, ending in `_total`; the family is named without it.
    fn counter<V: EncodeCounterValue>(&mut self, name: &str, help: &str, value: V) -> Fmt {
        let metric = ConstCounter::new(value);
        let family =
            self.enc
                .encode_descriptor(family_of(name), help, None, metric.metric_type())?;
        metric.encode(family)
    }

    /// One gauge family with a sample per `(label value, value)`.
    fn gauges<V: EncodeGaugeValue + Copy>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        samples: &[(String, V)],
    ) -> Fmt {
        let mut family = self.enc.encode_descriptor(
            name,
            help,
            None,
            prometheus_client::metrics::MetricType::Gauge,
        )?;
        for (value_of_label, v) in samples {
            let labels = [(label, value_of_label.as_str())];
            ConstGauge::new(*v).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }

    /// One counter family (`name` ends in `_total`) with a sample per `(label value, value)`.
    fn counters<V: EncodeCounterValue + Copy>(
        &mut self,
        name: &str,
        help: &str,
        label: &str,
        samples: &[(String, V)],
    ) -> Fmt {
        let mut family = self.enc.encode_descriptor(
            family_of(name),
            help,
            None,
            prometheus_client::metrics::MetricType::Counter,
        )?;
        for (value_of_label, v) in samples {
            let labels = [(label, value_of_label.as_str())];
            ConstCounter::new(*v).encode(family.encode_family(&labels)?)?;
        }
        Ok(())
    }
}

/// A counter's family name: its sample name without `_total`, which the encoder appends.
fn family_of(name: &str) -> &str {
    debug_assert!(
        name.ends_with("_total"),
        "counter {name} must end in _total"
    );
    name.strip_suffix("_total").unwrap_or(name)
}

const UP_HELP: &str = "1 when the server answered the scrape (every shard reported)";

fn flag(b: bool) -> u64 {
    u64::from(b)
}

impl Collector for Snapshot {
    fn encode(&self, enc: DescriptorEncoder) -> Fmt {
        let mut out = Out { enc };
        let f = match &self.0 {
            State::Loading => {
                out.gauge("redis_up", UP_HELP, 1)?;
                return out.gauge(
                    "redis_loading_dump_file",
                    "Whether the server is loading its data (INFO loading)",
                    1,
                );
            }
            State::Down => return out.gauge("redis_up", UP_HELP, 0),
            State::Up(f) => f,
        };
        encode_server(&mut out, f)?;
        encode_commands(&mut out, f)?;
        encode_keyspace(&mut out, f)?;
        encode_shards(&mut out, f)
    }
}

/// The server-wide figures of INFO's server, clients, memory, persistence, stats and cpu
/// sections.
fn encode_server(out: &mut Out, f: &Figures) -> Fmt {
    out.gauge("redis_up", UP_HELP, 1)?;
    let info = [
        ("role", "master".to_string()),
        ("redis_version", REDIS_VERSION.to_string()),
        ("redis_build_id", String::new()),
        ("redis_mode", "standalone".to_string()),
        (
            "os",
            format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
        ),
        ("maxmemory_policy", f.maxmemory_policy.clone()),
        ("tcp_port", f.tcp_port.to_string()),
        ("run_id", f.run_id.clone()),
        ("process_id", f.process_id.to_string()),
        ("damselfly_version", env!("CARGO_PKG_VERSION").to_string()),
    ];
    let mut family = out.enc.encode_descriptor(
        "redis_instance_info",
        "Information about the Redis instance",
        None,
        prometheus_client::metrics::MetricType::Gauge,
    )?;
    ConstGauge::new(1i64).encode(family.encode_family(&info)?)?;
    out.gauge(
        "redis_uptime_in_seconds",
        "Seconds since the server started (INFO uptime_in_seconds)",
        f.uptime,
    )?;
    out.gauge(
        "redis_start_time_seconds",
        "Start time of the server, seconds since the Unix epoch",
        f.start_time,
    )?;
    out.gauge(
        "damselfly_shards",
        "Shard threads (--threads)",
        f.reports.len() as u64,
    )?;
    out.gauge(
        "redis_loading_dump_file",
        "Whether the server is loading its data (INFO loading)",
        0,
    )?;
    // Clients.
    out.gauge(
        "redis_connected_clients",
        "Client connections (INFO connected_clients)",
        f.connected_clients,
    )?;
    out.gauge(
        "redis_blocked_clients",
        "Clients blocked in a blocking command (INFO blocked_clients)",
        f.blocked_clients,
    )?;
    out.gauge(
        "redis_config_maxclients",
        "The maxclients setting",
        f.maxclients,
    )?;
    // Memory.
    out.gauge(
        "redis_memory_used_bytes",
        "Bytes the allocator holds for the server (INFO used_memory)",
        f.used_memory,
    )?;
    out.gauge(
        "redis_memory_used_rss_bytes",
        "Resident set size of the process (INFO used_memory_rss)",
        f.rss,
    )?;
    out.gauge(
        "redis_memory_used_peak_bytes",
        "Peak of used memory (INFO used_memory_peak)",
        f.peak,
    )?;
    out.gauge(
        "redis_memory_used_startup_bytes",
        "Memory in use right after start-up (INFO used_memory_startup)",
        f.startup,
    )?;
    out.gauge(
        "redis_memory_used_dataset_bytes",
        "The keys' own bytes (INFO used_memory_dataset)",
        f.dataset,
    )?;
    out.gauge(
        "redis_memory_used_overhead_bytes",
        "Memory that is not the keys' own bytes (INFO used_memory_overhead)",
        f.overhead,
    )?;
    out.gauge(
        "redis_memory_used_lua_bytes",
        "Bytes the Lua VMs use (INFO used_memory_lua)",
        f.lua,
    )?;
    out.gauge(
        "redis_mem_clients_normal",
        "Bytes of the clients' buffers (INFO mem_clients_normal)",
        f.client_buffers,
    )?;
    out.gauge(
        "redis_memory_max_bytes",
        "The maxmemory setting, 0 for none (INFO maxmemory)",
        f.maxmemory,
    )?;
    out.gauge(
        "redis_mem_fragmentation_ratio",
        "Resident set size over used memory (INFO mem_fragmentation_ratio)",
        f.fragmentation,
    )?;
    // Persistence.
    out.gauge(
        "redis_rdb_changes_since_last_save",
        "Changes since the last save (INFO rdb_changes_since_last_save)",
        f.changes_since_save,
    )?;
    out.gauge(
        "redis_rdb_last_save_timestamp_seconds",
        "Time of the last successful save, seconds since the Unix epoch",
        f.last_save_unix,
    )?;
    out.gauge(
        "redis_rdb_bgsave_in_progress",
        "Whether a background save runs (INFO rdb_bgsave_in_progress)",
        flag(f.bgsave_in_progress),
    )?;
    out.gauge(
        "redis_rdb_last_bgsave_status",
        "1 when the last background save succeeded (INFO rdb_last_bgsave_status ok)",
        flag(f.last_bgsave_ok),
    )?;
    out.gauge(
        "redis_aof_enabled",
        "Whether the journal is on (INFO aof_enabled)",
        flag(f.aof_enabled),
    )?;
    out.gauge(
        "redis_aof_rewrite_in_progress",
        "Whether a journal rewrite runs (INFO aof_rewrite_in_progress)",
        flag(f.aof_rewrite_in_progress),
    )?;
    // Stats.
    let s = &f.stats;
    out.counter(
        "redis_connections_received_total",
        "Connections accepted (INFO total_connections_received)",
        s.total_connections,
    )?;
    out.counter(
        "redis_rejected_connections_total",
        "Connections refused (INFO rejected_connections)",
        s.rejected_connections,
    )?;
    out.counter(
        "redis_commands_processed_total",
        "Commands processed (INFO total_commands_processed)",
        s.total_commands,
    )?;
    out.gauge(
        "redis_instantaneous_ops_per_sec",
        "Commands per second over the last seconds (INFO instantaneous_ops_per_sec)",
        f.ops_per_sec,
    )?;
    out.counter(
        "redis_net_input_bytes_total",
        "Bytes read from clients (INFO total_net_input_bytes)",
        s.net_input_bytes,
    )?;
    out.counter(
        "redis_net_output_bytes_total",
        "Bytes written to clients (INFO total_net_output_bytes)",
        s.net_output_bytes,
    )?;
    out.counter(
        "redis_expired_keys_total",
        "Keys removed on expiry (INFO expired_keys)",
        f.expired,
    )?;
    out.counter(
        "redis_evicted_keys_total",
        "Keys evicted under maxmemory (INFO evicted_keys)",
        f.evicted,
    )?;
    out.counter(
        "redis_keyspace_hits_total",
        "Key lookups that found the key (INFO keyspace_hits)",
        f.hits,
    )?;
    out.counter(
        "redis_keyspace_misses_total",
        "Key lookups that did not find the key (INFO keyspace_misses)",
        f.misses,
    )?;
    out.gauge(
        "redis_pubsub_channels",
        "Channels with a subscriber (INFO pubsub_channels)",
        f.pubsub_channels as u64,
    )?;
    out.gauge(
        "redis_pubsub_patterns",
        "Patterns with a subscriber (INFO pubsub_patterns)",
        f.pubsub_patterns as u64,
    )?;
    out.counter(
        "damselfly_multi_shard_transactions_total",
        "Transactions scheduled on several shards (INFO multi_shard_transactions)",
        s.multi_shard_txs,
    )?;
    out.counter(
        "damselfly_transaction_schedule_retries_total",
        "Scheduling rounds a shard refused (INFO transaction_schedule_retries)",
        s.tx_retries,
    )?;
    out.counter(
        "damselfly_script_shard_restarts_total",
        "Script runs restarted with every shard locked (INFO script_shard_restarts)",
        s.script_restarts,
    )?;
    out.counter(
        "damselfly_connections_moved_total",
        "Connections moved to the thread of the shard they use (INFO connections_moved)",
        s.connections_moved,
    )?;
    out.counter(
        "damselfly_direct_replies_total",
        "Replies a shard wrote to the client's socket itself (INFO direct_replies)",
        s.direct_replies,
    )?;
    // CPU.
    out.counter(
        "redis_cpu_sys_seconds_total",
        "System CPU time of the process (INFO used_cpu_sys)",
        f.cpu_sys,
    )?;
    out.counter(
        "redis_cpu_user_seconds_total",
        "User CPU time of the process (INFO used_cpu_user)",
        f.cpu_user,
    )
}

/// INFO commandstats and errorstats.
fn encode_commands(out: &mut Out, f: &Figures) -> Fmt {
    let used: Vec<usize> = (0..f.stats.cmds.len())
        .filter(|&i| {
            let c = &f.stats.cmds[i];
            c.calls != 0 || c.rejected != 0 || c.failed != 0
        })
        .collect();
    let per = |value: fn(&damselfly_commands::stats::CmdStat) -> u64| -> Vec<(String, u64)> {
        used.iter()
            .map(|&i| (COMMANDS[i].name.to_string(), value(&f.stats.cmds[i])))
            .collect()
    };
    out.counters(
        "redis_commands_total",
        "Calls per command (INFO commandstats calls)",
        "cmd",
        &per(|c| c.calls),
    )?;
    let seconds: Vec<(String, f64)> = used
        .iter()
        .map(|&i| {
            let usec = f.stats.cmds[i].usec;
            (COMMANDS[i].name.to_string(), usec as f64 / 1e6)
        })
        .collect();
    out.counters(
        "redis_commands_duration_seconds_total",
        "Seconds spent per command (INFO commandstats usec)",
        "cmd",
        &seconds,
    )?;
    out.counters(
        "redis_commands_rejected_calls_total",
        "Calls refused before running, per command (INFO commandstats rejected_calls)",
        "cmd",
        &per(|c| c.rejected),
    )?;
    out.counters(
        "redis_commands_failed_calls_total",
        "Calls that failed while running, per command (INFO commandstats failed_calls)",
        "cmd",
        &per(|c| c.failed),
    )?;
    let errors: Vec<(String, u64)> = f
        .stats
        .errors
        .iter()
        .map(|(code, n)| (code.clone(), *n))
        .collect();
    out.counters(
        "redis_errors_total",
        "Error replies per error code (INFO errorstats)",
        "err",
        &errors,
    )
}

/// INFO keyspace: every database, with zeros for the empty ones (as redis_exporter fills in
/// the databases INFO leaves out); the average TTL only where INFO prints a line.
fn encode_keyspace(out: &mut Out, f: &Figures) -> Fmt {
    let db = |i: usize| format!("db{i}");
    let keys: Vec<(String, u64)> = f
        .dbs
        .iter()
        .enumerate()
        .map(|(i, d)| (db(i), d.keys as u64))
        .collect();
    out.gauges("redis_db_keys", "Keys per database", "db", &keys)?;
    let expiring: Vec<(String, u64)> = f
        .dbs
        .iter()
        .enumerate()
        .map(|(i, d)| (db(i), d.expires as u64))
        .collect();
    out.gauges(
        "redis_db_keys_expiring",
        "Keys with a TTL per database",
        "db",
        &expiring,
    )?;
    let ttl: Vec<(String, f64)> = f
        .dbs
        .iter()
        .enumerate()
        .filter(|(_, d)| d.keys > 0)
        .map(|(i, d)| (db(i), d.avg_ttl_ms as f64 / 1000.0))
        .collect();
    out.gauges(
        "redis_db_avg_ttl_seconds",
        "Average TTL of the keys with one, per database (INFO keyspace avg_ttl)",
        "db",
        &ttl,
    )
}

/// Damselfly's per-shard series (INFO shards, and each shard's share of the stats).
fn encode_shards(out: &mut Out, f: &Figures) -> Fmt {
    let shard = |r: &ThreadReport| r.shard_id.to_string();
    let per = |value: &dyn Fn(&ThreadReport) -> u64| -> Vec<(String, u64)> {
        f.reports.iter().map(|r| (shard(r), value(r))).collect()
    };
    out.gauges(
        "damselfly_shard_keys",
        "Keys in the shard, all databases",
        "shard",
        &per(&|r| r.keyspace.iter().map(|k| k.0 as u64).sum()),
    )?;
    out.gauges(
        "damselfly_shard_keys_expiring",
        "Keys with a TTL in the shard, all databases",
        "shard",
        &per(&|r| r.keyspace.iter().map(|k| k.1 as u64).sum()),
    )?;
    out.gauges(
        "damselfly_shard_used_memory_bytes",
        "Bytes of the shard's keys (INFO shards used_memory)",
        "shard",
        &per(&|r| r.used_memory as u64),
    )?;
    out.gauges(
        "damselfly_shard_connected_clients",
        "Client connections served by the shard's thread",
        "shard",
        &per(&|r| r.clients as u64),
    )?;
    out.gauges(
        "damselfly_shard_instantaneous_ops_per_sec",
        "Commands per second on the shard's thread",
        "shard",
        &per(&|r| r.ops_per_sec),
    )?;
    out.counters(
        "damselfly_shard_commands_processed_total",
        "Commands processed by the shard's thread",
        "shard",
        &per(&|r| r.stats.total_commands),
    )?;
    out.counters(
        "damselfly_shard_expired_keys_total",
        "Keys the shard removed on expiry",
        "shard",
        &per(&|r| r.shard_stats.expired_keys),
    )?;
    out.counters(
        "damselfly_shard_evicted_keys_total",
        "Keys the shard evicted",
        "shard",
        &per(&|r| r.shard_stats.evicted_keys),
    )?;
    out.counters(
        "damselfly_shard_keyspace_hits_total",
        "Key lookups on the shard that found the key",
        "shard",
        &per(&|r| r.shard_stats.keyspace_hits),
    )?;
    out.counters(
        "damselfly_shard_keyspace_misses_total",
        "Key lookups on the shard that did not find the key",
        "shard",
        &per(&|r| r.shard_stats.keyspace_misses),
    )?;
    out.counters(
        "damselfly_shard_net_input_bytes_total",
        "Bytes read from the clients of the shard's thread",
        "shard",
        &per(&|r| r.stats.net_input_bytes),
    )?;
    out.counters(
        "damselfly_shard_net_output_bytes_total",
        "Bytes written to the clients of the shard's thread",
        "shard",
        &per(&|r| r.stats.net_output_bytes),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_their_total_name_in_the_0_0_4_format() {
        let om = "# HELP redis_commands Calls per command.\n\
                  # TYPE redis_commands counter\n\
                  redis_commands_total{cmd=\"set\"} 3\n\
                  # HELP redis_up Up.\n\
                  # TYPE redis_up gauge\n\
                  redis_up 1\n\
                  # EOF\n";
        assert_eq!(
            to_text_0_0_4(om),
            "# HELP redis_commands_total Calls per command.\n\
             # TYPE redis_commands_total counter\n\
             redis_commands_total{cmd=\"set\"} 3\n\
             # HELP redis_up Up.\n\
             # TYPE redis_up gauge\n\
             redis_up 1\n"
        );
    }

    #[test]
    fn loading_and_down_scrapes() {
        let text = Snapshot::loading().render(Format::Prometheus);
        assert!(text.contains("\nredis_up 1\n"), "{text}");
        assert!(text.contains("\nredis_loading_dump_file 1\n"), "{text}");
        let text = Snapshot(State::Down).render(Format::OpenMetrics);
        assert!(text.contains("\nredis_up 0\n"), "{text}");
        assert!(text.ends_with("# EOF\n"), "{text}");
    }

    #[test]
    fn accept_header_picks_the_format() {
        let prometheus = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
        assert_eq!(Format::from_accept(Some(prometheus)), Format::OpenMetrics);
        assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
        assert_eq!(Format::from_accept(None), Format::Prometheus);
    }

    #[test]
    fn a_waited_future_gives_up_at_its_deadline() {
        let (_tx, rx) = oneshot::channel::<u32>();
        let start = Instant::now();
        assert!(wait_until(rx, start + Duration::from_millis(50)).is_none());
        assert!(start.elapsed() >= Duration::from_millis(50));
        let (tx, rx) = oneshot::channel::<u32>();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            let _ = tx.send(7);
        });
        let got = wait_until(rx, Instant::now() + Duration::from_secs(5));
        assert_eq!(got, Some(Ok(7)));
    }
}
