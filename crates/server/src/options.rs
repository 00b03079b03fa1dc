//! Command-line flags and redis.conf-style files. Both are applied through the configuration
//! table, so they accept what CONFIG SET accepts; flags override the file.

use std::path::PathBuf;

use clap::Parser;
use damselfly_commands::config::Config;
use damselfly_net::ListenerSpec;

#[derive(Parser, Debug)]
#[command(
    name = "damselfly",
    version,
    about = "A Redis-compatible, multi-threaded, shared-nothing in-memory datastore"
)]
pub struct Options {
    /// A redis.conf-style file (`name value` per line); flags override it.
    pub config_file: Option<String>,
    /// TCP port; 0 disables TCP.
    #[arg(long)]
    pub port: Option<u16>,
    /// Addresses to listen on (space separated, `-` prefix = optional).
    #[arg(long, num_args = 1..)]
    pub bind: Option<Vec<String>>,
    /// Port of the Prometheus endpoint (/metrics, /healthz) on the --bind addresses; 0 = off.
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,
    /// Unix socket path.
    #[arg(long)]
    pub unixsocket: Option<String>,
    /// Unix socket permissions, octal (e.g. 700).
    #[arg(long)]
    pub unixsocketperm: Option<String>,
    /// Password clients must AUTH with.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// Number of databases (SELECT 0..N-1).
    #[arg(long)]
    pub databases: Option<String>,
    /// Most clients connected at once.
    #[arg(long)]
    pub maxclients: Option<String>,
    /// Close clients idle this many seconds (0 = never).
    #[arg(long)]
    pub timeout: Option<String>,
    /// TCP keepalive interval in seconds (0 = off).
    #[arg(long = "tcp-keepalive")]
    pub tcp_keepalive: Option<String>,
    /// Largest bulk string a client may send (e.g. 512mb).
    #[arg(long = "proto-max-bulk-len")]
    pub proto_max_bulk_len: Option<String>,
    /// Largest unparsed query buffer per client (e.g. 1gb).
    #[arg(long = "client-query-buffer-limit")]
    pub client_query_buffer_limit: Option<String>,
    /// debug, verbose, notice, warning or nothing.
    #[arg(long)]
    pub loglevel: Option<String>,
    /// Log to this file instead of standard output.
    #[arg(long)]
    pub logfile: Option<String>,
    /// Shard threads (default: CPUs this process may use).
    #[arg(long)]
    pub threads: Option<String>,
    /// auto, uring or epoll.
    #[arg(long = "io-backend")]
    pub io_backend: Option<String>,
    /// auto (pin only when the affinity mask leaves out some of the machine's CPUs), yes or no:
    /// whether thread i is pinned to the i-th CPU of the mask.
    #[arg(long = "pin-threads")]
    pub pin_threads: Option<String>,
    /// The same as --pin-threads no.
    #[arg(long = "no-pin")]
    pub no_pin: bool,
    /// yes: journal every shard's changes under --dir and load them at start-up.
    #[arg(long)]
    pub appendonly: Option<String>,
    /// always, everysec or no: when journal writes are synced (docs/persistence.md).
    #[arg(long)]
    pub appendfsync: Option<String>,
    /// The working directory: the journal lives in its --appenddirname subdirectory.
    #[arg(long)]
    pub dir: Option<String>,
    /// The journal's directory inside --dir.
    #[arg(long)]
    pub appenddirname: Option<String>,
    /// yes: a journal's torn last record (a crash mid-append) is cut off with a warning.
    #[arg(long = "aof-load-truncated")]
    pub aof_load_truncated: Option<String>,
    /// yes: start even when a journal is damaged, keeping only what precedes the damage.
    #[arg(long = "force-recovery")]
    pub force_recovery: Option<String>,
    /// Save points "S N ...": a background save after N changes within S seconds, and at
    /// SIGTERM; "" turns saving off.
    #[arg(long)]
    pub save: Option<String>,
    /// The Redis dump loaded at start-up when there is no snapshot of Damselfly's own.
    #[arg(long)]
    pub dbfilename: Option<String>,
    /// yes: snapshot files and DUMP payloads LZF-compress long strings.
    #[arg(long)]
    pub rdbcompression: Option<String>,
    /// yes: snapshot files end with a CRC-64 that loading checks; no: a zero trailer, and
    /// loading checks nothing.
    #[arg(long)]
    pub rdbchecksum: Option<String>,
    /// yes: after a failed save, writes get MISCONF until a save succeeds (with save points).
    #[arg(long = "stop-writes-on-bgsave-error")]
    pub stop_writes_on_bgsave_error: Option<String>,
    /// Most memory the data may use (e.g. 4gb; 0 = no limit): past it, commands that may
    /// grow memory get OOM (docs/eviction.md).
    #[arg(long)]
    pub maxmemory: Option<String>,
    /// What goes when maxmemory is reached: noeviction (writes get OOM), allkeys-lru,
    /// allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random, volatile-ttl.
    #[arg(long = "maxmemory-policy")]
    pub maxmemory_policy: Option<String>,
    /// Keys sampled per eviction by the LRU, LFU and TTL policies.
    #[arg(long = "maxmemory-samples")]
    pub maxmemory_samples: Option<String>,
    /// 0-100: how many keys one eviction pass may remove (64 at 10, doubling every 10).
    #[arg(long = "maxmemory-eviction-tenacity")]
    pub maxmemory_eviction_tenacity: Option<String>,
    /// The LFU counter's logarithm factor.
    #[arg(long = "lfu-log-factor")]
    pub lfu_log_factor: Option<String>,
    /// Minutes for an idle key's LFU counter to drop by one.
    #[arg(long = "lfu-decay-time")]
    pub lfu_decay_time: Option<String>,
    /// yes: past maxmemory, evict any key by a CLOCK sweep instead of maxmemory-policy
    /// (Damselfly's cache mode, docs/eviction.md).
    #[arg(long = "cache-mode")]
    pub cache_mode: Option<String>,
    /// yes (default): a connection that keeps using one other shard moves to that shard's
    /// thread (docs/architecture.md, "Connection affinity").
    #[arg(long = "migrate-connections")]
    pub migrate_connections: Option<String>,
    /// yes (default): the shard that runs a client's lone command on another thread writes
    /// its reply to the client's socket itself (docs/architecture.md, "Direct replies").
    #[arg(long = "direct-replies")]
    pub direct_replies: Option<String>,
    /// yes (default): transparent huge pages off for this process, as Redis does.
    #[arg(long = "disable-thp")]
    pub disable_thp: Option<String>,
    /// Client eviction's limit, bytes or a percentage of maxmemory (accepted; not built).
    #[arg(long = "maxmemory-clients")]
    pub maxmemory_clients: Option<String>,
    /// TLS port, beside --port (0 = off): needs --tls-cert-file and --tls-key-file
    /// (docs/operations.md, "TLS").
    #[arg(long = "tls-port")]
    pub tls_port: Option<String>,
    /// The server's certificate chain (PEM).
    #[arg(long = "tls-cert-file")]
    pub tls_cert_file: Option<String>,
    /// The server certificate's private key (PEM).
    #[arg(long = "tls-key-file")]
    pub tls_key_file: Option<String>,
    /// CA certificates (PEM) that client certificates are checked against.
    #[arg(long = "tls-ca-cert-file")]
    pub tls_ca_cert_file: Option<String>,
    /// yes (default): clients must present a certificate; optional: checked if presented;
    /// no: not asked for.
    #[arg(long = "tls-auth-clients")]
    pub tls_auth_clients: Option<String>,
    #[arg(long = "protected-mode")]
    pub protected_mode: Option<String>,
    #[arg(long)]
    pub daemonize: Option<String>,
}

/// Splits a config-file line like Redis's `sdssplitargs` (quotes supported).
fn split_line(line: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        let Some(&first) = chars.peek() else {
            return Some(out);
        };
        let mut word = String::new();
        if first == '"' || first == '\'' {
            chars.next();
            loop {
                match chars.next() {
                    None => return None,
                    Some('\\') if first == '"' => match chars.next() {
                        Some('n') => word.push('\n'),
                        Some('t') => word.push('\t'),
                        Some(c) => word.push(c),
                        None => return None,
                    },
                    Some(c) if c == first => break,
                    Some(c) => word.push(c),
                }
            }
        } else {
            while let Some(&c) = chars.peek() {
                if c.is_whitespace() {
                    break;
                }
                word.push(c);
                chars.next();
            }
        }
        out.push(word);
    }
}

impl Options {
    pub fn parse_from_env() -> Options {
        Options::parse()
    }

    /// Applies the config file, then the flags. Returns warnings to log once logging is up,
    /// and the file's `user` directives.
    pub fn apply(&self, config: &Config) -> Result<Applied, String> {
        let mut warnings = Vec::new();
        let mut users = String::new();
        if let Some(path) = &self.config_file {
            let text = std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read config file {path}: {e}"))?;
            config.set_file(path);
            for (n, line) in text.lines().enumerate() {
                let line = line.trim();
                if line.is_empty() || line.starts_with('#') {
                    continue;
                }
                let words = split_line(line)
                    .ok_or_else(|| format!("{path}:{}: unbalanced quotes", n + 1))?;
                let (name, values) = words.split_first().ok_or("empty line")?;
                let value = values.join(" ");
                if name == "user" {
                    // Blank lines keep the file's line numbers for the ACL's errors.
                    users.extend(std::iter::repeat_n('\n', n - users.lines().count()));
                    users += &words.join(" ");
                    users.push('\n');
                    continue;
                }
                if Config::param(name).is_none() {
                    warnings.push(format!(
                        "{path}:{}: ignoring unsupported directive '{name}'",
                        n + 1
                    ));
                    continue;
                }
                config
                    .set_initial(name, &value)
                    .map_err(|e| format!("{path}:{}: {e}", n + 1))?;
            }
        }
        let flags: [(&str, Option<String>); 44] = [
            ("port", self.port.map(|p| p.to_string())),
            ("bind", self.bind.as_ref().map(|b| b.join(" "))),
            ("metrics-port", self.metrics_port.map(|p| p.to_string())),
            ("unixsocket", self.unixsocket.clone()),
            ("unixsocketperm", self.unixsocketperm.clone()),
            ("requirepass", self.requirepass.clone()),
            ("databases", self.databases.clone()),
            ("maxclients", self.maxclients.clone()),
            ("timeout", self.timeout.clone()),
            ("tcp-keepalive", self.tcp_keepalive.clone()),
            ("proto-max-bulk-len", self.proto_max_bulk_len.clone()),
            (
                "client-query-buffer-limit",
                self.client_query_buffer_limit.clone(),
            ),
            ("loglevel", self.loglevel.clone()),
            ("logfile", self.logfile.clone()),
            ("threads", self.threads.clone()),
            ("io-backend", self.io_backend.clone()),
            (
                "pin-threads",
                if self.no_pin {
                    Some("no".to_string())
                } else {
                    self.pin_threads.clone()
                },
            ),
            ("save", self.save.clone()),
            ("appendonly", self.appendonly.clone()),
            ("appendfsync", self.appendfsync.clone()),
            ("dir", self.dir.clone()),
            ("appenddirname", self.appenddirname.clone()),
            ("aof-load-truncated", self.aof_load_truncated.clone()),
            ("force-recovery", self.force_recovery.clone()),
            ("dbfilename", self.dbfilename.clone()),
            ("rdbcompression", self.rdbcompression.clone()),
            ("rdbchecksum", self.rdbchecksum.clone()),
            (
                "stop-writes-on-bgsave-error",
                self.stop_writes_on_bgsave_error.clone(),
            ),
            ("maxmemory", self.maxmemory.clone()),
            ("maxmemory-policy", self.maxmemory_policy.clone()),
            ("maxmemory-samples", self.maxmemory_samples.clone()),
            (
                "maxmemory-eviction-tenacity",
                self.maxmemory_eviction_tenacity.clone(),
            ),
            ("lfu-log-factor", self.lfu_log_factor.clone()),
            ("lfu-decay-time", self.lfu_decay_time.clone()),
            ("cache-mode", self.cache_mode.clone()),
            ("migrate-connections", self.migrate_connections.clone()),
            ("direct-replies", self.direct_replies.clone()),
            ("disable-thp", self.disable_thp.clone()),
            ("maxmemory-clients", self.maxmemory_clients.clone()),
            ("tls-port", self.tls_port.clone()),
            ("tls-cert-file", self.tls_cert_file.clone()),
            ("tls-key-file", self.tls_key_file.clone()),
            ("tls-ca-cert-file", self.tls_ca_cert_file.clone()),
            ("tls-auth-clients", self.tls_auth_clients.clone()),
        ];
        for (name, value) in flags {
            if let Some(v) = value {
                config
                    .set_initial(name, &v)
                    .map_err(|e| format!("--{name}: {e}"))?;
            }
        }
        for (name, value) in [
            ("protected-mode", &self.protected_mode),
            ("daemonize", &self.daemonize),
        ] {
            if let Some(v) = value {
                config
                    .set_initial(name, v)
                    .map_err(|e| format!("--{name}: {e}"))?;
            }
        }
        if config.get("daemonize") == "yes" {
            return Err("daemonize yes is not supported; run under a supervisor instead".into());
        }
        let maxmemory = config.get_u64("maxmemory");
        if maxmemory > 0 && maxmemory < 1 << 20 {
            warnings.push(format!("WARNING: You specified a maxmemory value that is less than 1MB (current value is {maxmemory} bytes). Are you sure this is what you really want?"));
        }
        Ok(Applied { warnings, users })
    }
}

/// What applying the options leaves for later: warnings to log once logging is up, and the
/// config file's `user` lines (as ACL file text, on their own line numbers).
#[derive(Debug)]
pub struct Applied {
    pub warnings: Vec<String>,
    pub users: String,
}

/// Listener settings from the configuration.
pub fn listener_spec(config: &Config) -> ListenerSpec {
    let unixsocket = config.get("unixsocket");
    let perm = config.get("unixsocketperm");
    ListenerSpec {
        bind: config
            .get("bind")
            .split_whitespace()
            .map(str::to_string)
            .collect(),
        port: u16::try_from(config.get_u64("port")).unwrap_or(0),
        tls_port: u16::try_from(config.get_u64("tls-port")).unwrap_or(0),
        unixsocket: (!unixsocket.is_empty()).then(|| PathBuf::from(unixsocket)),
        unixsocketperm: u32::from_str_radix(&perm, 8).ok().filter(|&m| m != 0),
        // The parameter's range is a C int's (as Redis's), so this cannot truncate.
        backlog: i32::try_from(config.get_u64("tcp-backlog")).unwrap_or(i32::MAX),
    }
}

/// tracing output at the configured level, to the logfile or standard output.
pub fn init_logging(config: &Config) -> Result<(), String> {
    let level = match config.get("loglevel").as_str() {
        "debug" | "verbose" => "debug",
        "warning" => "warn",
        "nothing" => "off",
        _ => "info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("DAMSELFLY_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    let logfile = config.get("logfile");
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false);
    if logfile.is_empty() {
        // Colours only on a terminal: under a supervisor or in a container standard output is
        // a pipe or a file (`kubectl logs`, journald), where escape codes are noise.
        builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()))
            .init();
    } else {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&logfile)
            .map_err(|e| format!("cannot open logfile {logfile}: {e}"))?;
        builder
            .with_ansi(false)
            .with_writer(std::sync::Mutex::new(file))
            .init();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_config_lines() {
        assert_eq!(
            split_line("bind 127.0.0.1 -::1").unwrap(),
            vec!["bind", "127.0.0.1", "-::1"]
        );
        assert_eq!(split_line("save \"\"").unwrap(), vec!["save", ""]);
        assert_eq!(
            split_line("requirepass 'a b'").unwrap(),
            vec!["requirepass", "a b"]
        );
        assert!(split_line("x \"open").is_none());
    }

    #[test]
    fn file_then_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("d.conf");
        std::fs::write(&path, "# comment\nport 7000\nmaxclients 5\nsupervised no\n").unwrap();
        let opts = Options::parse_from(["damselfly", path.to_str().unwrap(), "--maxclients", "9"]);
        let config = Config::default();
        opts.apply(&config).unwrap();
        assert_eq!(config.get("port"), "7000");
        assert_eq!(config.get("maxclients"), "9");
        let bad = Options::parse_from(["damselfly", "--timeout", "x"]);
        assert!(bad.apply(&Config::default()).is_err());
    }

    #[test]
    fn maxmemory_from_file_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.conf");
        std::fs::write(
            &path,
            "maxmemory 100kb\nmaxmemory-policy allkeys-lru\nlfu-log-factor 3\nmaxmemory-clients 5%\n",
        )
        .unwrap();
        let opts = Options::parse_from([
            "damselfly",
            path.to_str().unwrap(),
            "--maxmemory-samples",
            "7",
            "--maxmemory-eviction-tenacity",
            "20",
            "--lfu-decay-time",
            "0",
        ]);
        let config = Config::default();
        let warnings = opts.apply(&config).unwrap().warnings;
        assert_eq!(config.get("maxmemory"), "102400");
        assert_eq!(config.get("maxmemory-clients"), "5%");
        let eviction = config.eviction();
        assert_eq!(
            (
                eviction.samples,
                eviction.tenacity,
                eviction.lfu_log_factor,
                eviction.lfu_decay_time
            ),
            (7, 20, 3, 0)
        );
        assert!(warnings[0].contains("maxmemory value that is less than 1MB"));
        let bad = Options::parse_from(["damselfly", "--maxmemory-policy", "lru"]);
        assert!(bad
            .apply(&Config::default())
            .unwrap_err()
            .contains("argument(s) must be one of the following: volatile-lru"));
    }
}
