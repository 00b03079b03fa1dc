//! Server commands that run on the connection's thread: COMMAND, INFO, CONFIG, TIME, SHUTDOWN
//! and DEBUG, plus the dispatch of every coordinator command.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use damselfly_commands::stats::ThreadStats;
use damselfly_commands::table::{CoordCmd, COMMANDS};
use damselfly_commands::{dump_family, errors, lookup, Args};
use damselfly_persistence::digest::{to_hex, DatasetDigest, Digest};
use damselfly_protocol::number::parse_i64;
use damselfly_storage::shard_for_key;

use crate::conn_family::REDIS_VERSION;
use crate::connection::Connection;
use crate::memory_family::MemoryFigures;
use crate::messages::{ShardMsg, ThreadReport};
use crate::snapshots::ShutdownSave;
use crate::tx::ShardWork;
use crate::worker::Worker;

/// INFO persistence, with every field Redis 7.0 prints. The rdb_* fields describe
/// SAVE/BGSAVE (crates/coord/src/snapshots.rs); the aof_* fields describe the journals (sizes
/// summed over shards).
fn persistence_info(cluster: &crate::Cluster, reports: &[ThreadReport]) -> String {
    let journals: Vec<_> = reports.iter().filter_map(|r| r.journal.as_ref()).collect();
    let enabled = !journals.is_empty();
    let failed = journals.iter().any(|j| j.failure.is_some());
    let saves = cluster.saves.state();
    let dirty: u64 = reports.iter().map(|r| r.dirty).sum();
    let changes = dirty.saturating_sub(saves.dirty_base);
    let in_progress = u8::from(saves.running.is_some());
    let current = saves.running.map_or(-1, |t| {
        i64::try_from(t.elapsed().as_secs()).unwrap_or(i64::MAX)
    });
    let last_save = saves.last_save_unix;
    let status = if saves.last_ok { "ok" } else { "err" };
    let (last_secs, count) = (saves.last_secs, saves.saves);
    let rewrites = cluster.rewrites.state();
    let rw_in_progress = u8::from(rewrites.running.is_some());
    let rw_scheduled = u8::from(
        cluster
            .rewrite_scheduled
            .load(std::sync::atomic::Ordering::Relaxed),
    );
    let rw_current = rewrites.running.map_or(-1, |t| {
        i64::try_from(t.elapsed().as_secs()).unwrap_or(i64::MAX)
    });
    let rw_last_secs = rewrites.last_secs;
    let rw_status = if rewrites.last_ok { "ok" } else { "err" };
    let rw_count = rewrites.saves;
    let mut s = format!(
        "loading:0\r\nasync_loading:0\r\ncurrent_cow_peak:0\r\ncurrent_cow_size:0\r\n\
         current_cow_size_age:0\r\ncurrent_fork_perc:0.00\r\ncurrent_save_keys_processed:0\r\n\
         current_save_keys_total:0\r\nrdb_changes_since_last_save:{changes}\r\n\
         rdb_bgsave_in_progress:{in_progress}\r\nrdb_last_save_time:{last_save}\r\n\
         rdb_last_bgsave_status:{status}\r\nrdb_last_bgsave_time_sec:{last_secs}\r\n\
         rdb_current_bgsave_time_sec:{current}\r\nrdb_saves:{count}\r\nrdb_last_cow_size:0\r\n\
         rdb_last_load_keys_expired:{}\r\nrdb_last_load_keys_loaded:{}\r\naof_enabled:{}\r\n\
         aof_rewrite_in_progress:{rw_in_progress}\r\naof_rewrite_scheduled:{rw_scheduled}\r\n\
         aof_last_rewrite_time_sec:{rw_last_secs}\r\naof_current_rewrite_time_sec:{rw_current}\r\n\
         aof_last_bgrewrite_status:{rw_status}\r\naof_rewrites:{rw_count}\r\n\
         aof_rewrites_consecutive_failures:0\r\n\
         aof_last_write_status:{}\r\naof_last_cow_size:0\r\nmodule_fork_in_progress:0\r\n\
         module_fork_last_cow_size:0\r\n",
        saves.last_load.1,
        saves.last_load.0,
        u8::from(enabled),
        if failed { "err" } else { "ok" },
    );
    if enabled {
        let base = cluster
            .journal_files
            .lock()
            .ok()
            .and_then(|f| f.as_ref().map(|f| f.base_bytes))
            .unwrap_or(0);
        let size: u64 = base + journals.iter().map(|j| j.appended_bytes).sum::<u64>();
        s.push_str(&format!(
            "aof_current_size:{size}\r\naof_base_size:{base}\r\naof_pending_rewrite:0\r\n\
             aof_buffer_length:0\r\naof_pending_bio_fsync:0\r\naof_delayed_fsync:0\r\n"
        ));
    }
    s
}

/// INFO sections printed by plain `INFO` / `INFO default`.
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "modules",
    "errorstats",
    "cluster",
    "keyspace",
];
/// Sections `INFO all` adds to the default ones.
const EXTRA_SECTIONS: &[&str] = &["commandstats", "latencystats", "shards"];

pub(crate) fn cpu_times() -> (f64, f64) {
    // SAFETY: getrusage fills the struct we pass.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_stime), secs(ru.ru_utime))
}

impl Connection {
    /// Redis's `getPositiveLongFromObjectOrReply`: a non-negative integer, or the error reply.
    fn non_negative(&mut self, arg: &[u8]) -> Option<u64> {
        match parse_i64(arg) {
            Some(n) if n >= 0 => Some(n as u64),
            Some(_) => {
                self.reply_error(errors::NOT_POSITIVE);
                None
            }
            None => {
                self.reply_error(errors::NOT_INT);
                None
            }
        }
    }

    pub(crate) async fn run_coordinator(&mut self, idx: usize, cmd: CoordCmd, args: &Args<'_>) {
        match cmd {
            CoordCmd::Ping => self.ping(args),
            CoordCmd::Echo => self.echo(args),
            CoordCmd::Quit => self.quit(),
            CoordCmd::Hello => self.hello(args),
            CoordCmd::Auth => self.auth(args),
            CoordCmd::Acl => self.acl(args).await,
            CoordCmd::Select => self.select(args),
            CoordCmd::Reset => self.reset_cmd().await,
            CoordCmd::Subscribe(kind) => self.subscribe(kind, args).await,
            CoordCmd::Unsubscribe(kind) => self.unsubscribe(kind, args).await,
            CoordCmd::Publish { sharded } => self.publish(sharded, args).await,
            CoordCmd::Pubsub => self.pubsub_cmd(args),
            CoordCmd::Monitor => self.monitor().await,
            CoordCmd::Client => self.client(args).await,
            CoordCmd::Command => self.command(args),
            CoordCmd::Info => self.info_cmd(args).await,
            CoordCmd::Memory => self.memory(args).await,
            CoordCmd::Config => self.config(args).await,
            CoordCmd::Time => self.time(),
            CoordCmd::Shutdown => self.shutdown(args).await,
            CoordCmd::Debug => self.debug(args).await,
            CoordCmd::Multi => self.multi(),
            CoordCmd::Exec => self.exec().await,
            CoordCmd::Discard => self.discard(),
            CoordCmd::Watch => self.watch(args).await,
            CoordCmd::Unwatch => self.unwatch(),
            CoordCmd::Save => self.save_cmd(args, true).await,
            CoordCmd::Bgsave => self.save_cmd(args, false).await,
            CoordCmd::Bgrewriteaof => self.bgrewriteaof_cmd(args).await,
            CoordCmd::Lastsave => self.lastsave_cmd(),
            CoordCmd::Eval => self.eval(idx, args).await,
            CoordCmd::Script => self.script(args).await,
            CoordCmd::Fcall => self.fcall(idx, args).await,
            CoordCmd::Function => self.function(args).await,
            CoordCmd::Slowlog => self.slowlog_cmd(args).await,
            CoordCmd::Latency => self.latency_cmd(args).await,
        }
    }

    fn time(&mut self) {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        self.out.array(2);
        self.out.bulk(now.as_secs().to_string().as_bytes());
        self.out.bulk(now.subsec_micros().to_string().as_bytes());
    }

    async fn shutdown(&mut self, args: &Args<'_>) {
        for a in args.iter().skip(1) {
            let a = a.to_ascii_lowercase();
            if !matches!(
                a.as_slice(),
                b"nosave" | b"save" | b"now" | b"force" | b"abort"
            ) {
                self.reply_error(errors::SYNTAX);
                return;
            }
        }
        if args
            .iter()
            .skip(1)
            .any(|a| a.eq_ignore_ascii_case(b"abort"))
        {
            self.reply_error("ERR No shutdown in progress.");
            return;
        }
        let has = |word: &[u8]| args.iter().skip(1).any(|a| a.eq_ignore_ascii_case(word));
        if let Some(busy) =
            crate::scripting::shutdown_refusal(&self.worker.cluster.busy, has(b"nosave"))
        {
            return self.reply_error(busy);
        }
        // Earlier commands of this client complete before the server stops.
        self.flush_remote().await;
        let mode = if has(b"nosave") {
            ShutdownSave::NoSave
        } else if has(b"save") {
            ShutdownSave::Save
        } else {
            ShutdownSave::Default
        };
        self.worker.cluster.final_save.set_mode(mode);
        tracing::warn!("User requested shutdown...");
        self.worker.cluster.shutdown.trigger();
        // Like Redis, a successful SHUTDOWN closes the connection without a reply.
        self.closing = true;
    }

    fn command(&mut self, args: &Args) {
        use damselfly_commands::introspection as intro;
        if args.len() == 1 {
            let all = intro::supported();
            self.out.array(all.len());
            for &i in all {
                intro::write_info(&mut self.out, i);
            }
            return;
        }
        if let Some(refusal) = damselfly_commands::redis_meta::subcommand_refusal(args) {
            return self.reply_error(&refusal);
        }
        let sub = args.get(1).to_ascii_lowercase();
        match sub.as_slice() {
            b"count" => self.out.int(COMMANDS.len() as i64),
            b"info" => {
                if args.len() == 2 {
                    return self.command(&Args::new(args.buf(), &args.spans()[..1]));
                }
                self.out.array(args.len() - 2);
                for name in args.iter().skip(2) {
                    match intro::find(name) {
                        Some(i) => intro::write_info(&mut self.out, i),
                        None => self.out.null(),
                    }
                }
            }
            b"docs" => {
                let names: Vec<String> = if args.len() == 2 {
                    COMMANDS.iter().map(|c| c.name.to_string()).collect()
                } else {
                    args.iter()
                        .skip(2)
                        .filter(|n| intro::find(n).is_some())
                        .map(|n| String::from_utf8_lossy(n).to_ascii_lowercase())
                        .collect()
                };
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                damselfly_commands::command_docs::write(&mut self.out, &names);
            }
            b"list" => {
                let filter = match args.len() {
                    2 => None,
                    5 if args.is(2, "filterby") => {
                        Some((args.get(3).to_ascii_lowercase(), args.get(4)))
                    }
                    _ => return self.reply_error(errors::SYNTAX),
                };
                let names = match &filter {
                    None => intro::list(|_| true),
                    Some((kind, v)) => match kind.as_slice() {
                        b"pattern" => intro::list(|c| {
                            damselfly_storage::glob::glob_match(v, c.name.as_bytes(), true)
                        }),
                        b"aclcat" => {
                            let bit = std::str::from_utf8(v)
                                .ok()
                                .and_then(damselfly_commands::redis_meta::category_bit)
                                .unwrap_or(0);
                            intro::list(|c| c.categories & bit != 0)
                        }
                        b"module" => Vec::new(),
                        _ => return self.reply_error(errors::SYNTAX),
                    },
                };
                self.out.array(names.len());
                for n in names {
                    self.out.bulk(n.as_bytes());
                }
            }
            b"getkeys" | b"getkeysandflags" => {
                let request = Args::new(args.buf(), &args.spans()[2..]);
                let with_flags = sub.as_slice() == b"getkeysandflags";
                let mark = self.out.buf.len();
                if let Err(e) = intro::write_keys(&mut self.out, &request, with_flags) {
                    self.out.buf.truncate(mark);
                    self.reply_error(e);
                }
            }
            b"help" => {
                const HELP: &[&str] = &[
                    "(no subcommand)",
                    "    Return details about all Redis commands.",
                    "COUNT",
                    "    Return the total number of commands in this Redis server.",
                    "LIST",
                    "    Return a list of all commands in this Redis server.",
                    "INFO [<command-name> ...]",
                    "    Return details about multiple Redis commands.",
                    "    If no command names are given, documentation details for all",
                    "    commands are returned.",
                    "DOCS [<command-name> ...]",
                    "    Return documentation details about multiple Redis commands.",
                    "    If no command names are given, documentation details for all",
                    "    commands are returned.",
                    "GETKEYS <full-command>",
                    "    Return the keys from a full Redis command.",
                    "GETKEYSANDFLAGS <full-command>",
                    "    Return the keys and the access flags from a full Redis command.",
                ];
                self.out.help("COMMAND", HELP);
            }
            _ => self.reply_error(&errors::unknown_subcommand("command", args.get(1))),
        }
    }

    /// CONFIG REWRITE: the config file rewritten in Redis's manner (config_rewrite.rs), then
    /// replaced atomically (a temporary file, synced, renamed, the directory synced).
    fn rewrite_config_file(&self) -> Result<(), String> {
        let cluster = &self.worker.cluster;
        let Some(path) = cluster.config.file() else {
            return Err("ERR The server is running without a config file".into());
        };
        let failed = |e: std::io::Error| {
            let why = e.to_string();
            let why = why.split(" (os error").next().unwrap_or(&why).to_string();
            tracing::warn!("CONFIG REWRITE failed: {why}");
            format!("ERR Rewriting config file: {why}")
        };
        let old = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(failed(e)),
        };
        // Users go to the ACL file when there is one, else into this file.
        let users = cluster.config.get("aclfile").is_empty().then(|| {
            cluster
                .acl
                .list()
                .iter()
                .map(|l| String::from_utf8_lossy(l).into_owned())
                .collect()
        });
        let text = damselfly_commands::config_rewrite::rewrite(&cluster.config, &old, users);
        let path = std::path::Path::new(&path);
        let tmp = path.with_extension(format!("rewrite-{}", std::process::id()));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, path)?;
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            failed(e)
        })
    }

    async fn config(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let config = self.worker.cluster.config.clone();
        match sub.as_slice() {
            b"get" if args.len() >= 3 => {
                let patterns: Vec<&[u8]> = args.iter().skip(2).collect();
                let pairs = config.get_matching(&patterns);
                self.out.map(pairs.len());
                for (k, v) in pairs {
                    self.out.bulk(k.as_bytes());
                    self.out.bulk(v.as_bytes());
                }
            }
            b"set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
                let pairs: Vec<(String, String)> = (2..args.len())
                    .step_by(2)
                    .map(|i| {
                        (
                            String::from_utf8_lossy(args.get(i)).into_owned(),
                            String::from_utf8_lossy(args.get(i + 1)).into_owned(),
                        )
                    })
                    .collect();
                let journal_was = config.get("appendonly") == "yes";
                let maxmemory_was = config.maxmemory.load(Ordering::Relaxed);
                match config.set_runtime(&pairs) {
                    Ok(()) => {
                        let password = pairs
                            .iter()
                            .any(|(k, _)| k.eq_ignore_ascii_case("requirepass"));
                        self.worker.cluster.apply_acl_config(password);
                        if config.maxmemory.load(Ordering::Relaxed) != maxmemory_was {
                            self.apply_maxmemory().await;
                            self.warn_if_below_usage();
                        }
                        let journal_is = config.get("appendonly") == "yes";
                        if journal_was != journal_is {
                            self.switch_journal(journal_is).await;
                        }
                        self.out.ok();
                    }
                    Err(e) => self.reply_error(&e),
                }
            }
            b"resetstat" if args.len() == 2 => {
                self.ask_all(ShardMsg::ResetStats).await;
                self.worker.cluster.memory.reset_exceeded();
                self.out.ok();
            }
            b"rewrite" if args.len() == 2 => match self.rewrite_config_file() {
                Ok(()) => {
                    tracing::info!("CONFIG REWRITE executed with success.");
                    self.out.ok();
                }
                Err(e) => self.reply_error(&e),
            },
            b"help" if args.len() == 2 => {
                const HELP: &[&str] = &[
                    "GET <pattern>",
                    "    Return parameters matching the glob-like <pattern> and their values.",
                    "SET <directive> <value>",
                    "    Set the configuration <directive> to <value>.",
                    "RESETSTAT",
                    "    Reset statistics reported by the INFO command.",
                    "REWRITE",
                    "    Rewrite the configuration file.",
                ];
                self.out.help("CONFIG", HELP);
            }
            b"get" | b"set" | b"resetstat" | b"rewrite" | b"help" => {
                let full = format!("config|{}", String::from_utf8_lossy(&sub));
                self.reply_error(&errors::wrong_arity(&full));
            }
            _ => self.reply_error(&errors::unknown_subcommand("config", args.get(1))),
        }
    }

    async fn debug(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let argc = args.len();
        match sub.as_slice() {
            b"sleep" if argc == 3 => {
                let secs = std::str::from_utf8(args.get(2))
                    .ok()
                    .and_then(|s| s.trim().parse::<f64>().ok())
                    .unwrap_or(0.0);
                if secs > 0.0 && secs.is_finite() {
                    // Blocks this thread, as Redis blocks its server.
                    std::thread::sleep(std::time::Duration::from_secs_f64(secs.min(1e6)));
                }
                self.out.ok();
            }
            b"error" if argc == 3 => {
                // Redis replies `-` and the text as it is: `LOADING x` is a LOADING error,
                // `-BUSY y` comes back as `--BUSY y`.
                self.reply_error(&String::from_utf8_lossy(args.get(2)));
            }
            b"set-active-expire" if argc == 3 => {
                let on = parse_i64(args.get(2)).unwrap_or(0) != 0;
                self.worker
                    .cluster
                    .config
                    .active_expire
                    .store(on, Ordering::Relaxed);
                self.out.ok();
            }
            b"populate" if (3..=5).contains(&argc) => {
                let Some(count) = self.non_negative(args.get(2)) else {
                    return;
                };
                let prefix = if argc >= 4 {
                    args.get(3).to_vec()
                } else {
                    b"key".to_vec()
                };
                let size = if argc == 5 {
                    match self.non_negative(args.get(4)) {
                        Some(n) => (n > 0).then_some(n as usize),
                        None => return,
                    }
                } else {
                    None
                };
                let db = self.info.db.get();
                self.ask_all(|done| ShardMsg::Populate {
                    db,
                    count,
                    prefix: prefix.clone(),
                    size,
                    done,
                })
                .await;
                self.out.ok();
            }
            b"digest" if argc == 2 => self.debug_digest(args).await,
            b"reload" => self.debug_reload(args).await,
            b"digest-value" => self.debug_digest_values(args).await,
            b"object" if argc == 3 => self.debug_object(args).await,
            #[cfg(debug_assertions)]
            b"panic" => self.debug_panic(args).await,
            b"help" => {
                self.out.array(1);
                self.out.simple(
                    "DEBUG <SLEEP|ERROR|SET-ACTIVE-EXPIRE|POPULATE|DIGEST|DIGEST-VALUE|OBJECT|RELOAD> ...",
                );
            }
            _ => {
                let sub = String::from_utf8_lossy(args.get(1)).into_owned();
                self.reply_error(&format!(
                    "ERR unknown subcommand or wrong number of arguments for '{sub}'. Try DEBUG HELP."
                ));
            }
        }
    }

    /// Runs `parts` as hops of a transaction holding DEBUG's intents (or of the EXEC running
    /// it, whose plan holds them): digests and descriptions see one consistent state, never
    /// half of a cross-shard command. None when a shard is unavailable.
    async fn debug_hops<T: Send + 'static>(
        &mut self,
        args: &Args<'_>,
        parts: Vec<(usize, ShardWork<T>)>,
    ) -> Option<Vec<T>> {
        let debug = lookup(b"debug").expect("debug is in the table");
        self.all_shard_hops(debug, args, parts).await
    }

    /// Runs `parts` as hops of a transaction holding the intents command `spec` plans for
    /// `args` (or of the EXEC running it, whose plan holds them). None when a shard is
    /// unavailable.
    pub(crate) async fn all_shard_hops<T: Send + 'static>(
        &mut self,
        spec: usize,
        args: &Args<'_>,
        parts: Vec<(usize, ShardWork<T>)>,
    ) -> Option<Vec<T>> {
        let mut plan = Vec::new();
        self.plan(spec, self.info.db.get(), args, &mut plan);
        let own = self.enter_tx(plan).await?;
        // Earlier commands of this EXEC go first.
        self.flush_remote().await;
        let results = match self.tx.as_mut() {
            Some(tx) => Some(tx.hops(parts, own).await),
            None => None,
        };
        self.leave_tx(own).await;
        results?.into_iter().collect()
    }

    /// DEBUG DIGEST: every shard digests its keys, the digests merge (databases in order).
    async fn debug_digest(&mut self, args: &Args<'_>) {
        let parts = (0..self.worker.num_shards())
            .map(|shard| {
                let work: ShardWork<DatasetDigest> =
                    Box::new(|w: &Worker| dump_family::shard_digest(&w.shard.borrow()));
                (shard, work)
            })
            .collect();
        match self.debug_hops(args, parts).await {
            Some(digests) => {
                let mut all = DatasetDigest::new();
                for d in &digests {
                    all.merge(d);
                }
                self.out.simple(&to_hex(&all.finish()));
            }
            None => self.reply_error("ERR shard unavailable"),
        }
    }

    /// DEBUG OBJECT key: the key's shard describes it.
    async fn debug_object(&mut self, args: &Args<'_>) {
        let (db, key) = (self.info.db.get(), args.get(2).to_vec());
        let shard = shard_for_key(&key, self.worker.num_shards());
        let work: ShardWork<Option<String>> = Box::new(move |w: &Worker| {
            dump_family::debug_object(&w.shard.borrow(), db, &key, w.now_ms.get())
        });
        match self.debug_hops(args, vec![(shard, work)]).await {
            Some(mut described) => match described.pop().flatten() {
                Some(line) => self.out.simple(&line),
                None => self.reply_error("ERR no such key"),
            },
            None => self.reply_error("ERR shard unavailable"),
        }
    }

    /// DEBUG DIGEST-VALUE key [key ...]: each shard digests its keys; the replies go back in
    /// request order.
    async fn debug_digest_values(&mut self, args: &Args<'_>) {
        let n = self.worker.num_shards();
        let db = self.info.db.get();
        let key_shards: Vec<usize> = args.iter().skip(2).map(|k| shard_for_key(k, n)).collect();
        let mut by_shard: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
        for (key, &shard) in args.iter().skip(2).zip(&key_shards) {
            match by_shard.iter_mut().find(|(s, _)| *s == shard) {
                Some((_, keys)) => keys.push(key.to_vec()),
                None => by_shard.push((shard, vec![key.to_vec()])),
            }
        }
        let order: Vec<usize> = by_shard.iter().map(|(s, _)| *s).collect();
        let parts = by_shard
            .into_iter()
            .map(|(shard, keys)| {
                let work: ShardWork<Vec<Digest>> = Box::new(move |w: &Worker| {
                    dump_family::value_digests(&w.shard.borrow(), db, &keys)
                });
                (shard, work)
            })
            .collect();
        let digests = if key_shards.is_empty() {
            Some(Vec::new())
        } else {
            self.debug_hops(args, parts).await
        };
        let Some(digests) = digests else {
            return self.reply_error("ERR shard unavailable");
        };
        let mut per_shard: Vec<std::vec::IntoIter<Digest>> =
            digests.into_iter().map(Vec::into_iter).collect();
        self.out.array(key_shards.len());
        for shard in key_shards {
            let next = order
                .iter()
                .position(|&s| s == shard)
                .and_then(|i| per_shard[i].next());
            self.out.simple(&to_hex(&next.unwrap_or_default()));
        }
    }

    /// DEBUG PANIC [SHARD n | HOP n | TICK n], in debug builds only: panics on purpose on
    /// this connection's thread, in a mailbox message to shard n, in a transaction hop on
    /// shard n, or in shard n's next timer tick, so tests can check the panic policy holds
    /// wherever code runs (damselfly_coord::crash).
    #[cfg(debug_assertions)]
    async fn debug_panic(&mut self, args: &Args<'_>) {
        if args.len() == 2 {
            panic!("DEBUG PANIC");
        }
        let shard = match (args.len(), parse_i64(args.get(args.len() - 1))) {
            (4, Some(n)) => usize::try_from(n)
                .ok()
                .filter(|&n| n < self.worker.num_shards()),
            _ => None,
        };
        let Some(shard) = shard else {
            return self.reply_error(errors::SYNTAX);
        };
        let place = args.get(2).to_ascii_lowercase();
        match place.as_slice() {
            b"shard" => {
                let panics = ShardMsg::Call(Box::new(|_| panic!("DEBUG PANIC SHARD")));
                self.worker.cluster.mailboxes[shard].send(panics);
            }
            b"tick" => {
                let arms = ShardMsg::Call(Box::new(|w| w.panic_on_tick.set(true)));
                self.worker.cluster.mailboxes[shard].send(arms);
            }
            b"hop" => {
                let db = self.info.db.get();
                let mode = crate::tx::Mode::Shared;
                let plan = vec![(shard, vec![crate::tx::Lock::Db { db, mode }])];
                let Some(own) = self.enter_tx(plan).await else {
                    return self.reply_error("ERR shard unavailable");
                };
                if let Some(tx) = self.tx.as_mut() {
                    tx.hop(shard, |_| -> () { panic!("DEBUG PANIC HOP") }, own)
                        .await;
                }
                self.leave_tx(own).await;
            }
            _ => return self.reply_error(errors::SYNTAX),
        }
        self.out.ok();
    }

    async fn info_cmd(&mut self, args: &Args<'_>) {
        let mut sections: Vec<String> = Vec::new();
        for a in args.iter().skip(1) {
            let s = String::from_utf8_lossy(a).to_ascii_lowercase();
            match s.as_str() {
                "default" => sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string())),
                "all" | "everything" => sections.extend(
                    DEFAULT_SECTIONS
                        .iter()
                        .chain(EXTRA_SECTIONS)
                        .map(|s| s.to_string()),
                ),
                _ => sections.push(s),
            }
        }
        if sections.is_empty() {
            sections.extend(DEFAULT_SECTIONS.iter().map(|s| s.to_string()));
        }
        let reports = self.ask_all(ShardMsg::Report).await;
        let latencystats = if sections.iter().any(|s| s == "latencystats") {
            self.latencystats_info().await
        } else {
            String::new()
        };
        let text = self.render_info(&sections, &reports, &latencystats);
        self.out.verbatim("txt", text.as_bytes());
    }

    /// Redis's warning when CONFIG SET sets `maxmemory` below what is in use.
    fn warn_if_below_usage(&self) {
        let maxmemory = self.worker.cluster.config.maxmemory.load(Ordering::Relaxed);
        let used = self.worker.used_memory_for_limit();
        if maxmemory != 0 && maxmemory < used {
            tracing::warn!(
                "WARNING: the new maxmemory value set via CONFIG SET ({maxmemory}) is smaller than the current memory usage ({used}). This will result in key eviction and/or the inability to accept new write commands depending on the maxmemory-policy."
            );
        }
    }

    fn render_info(
        &self,
        wanted: &[String],
        reports: &[ThreadReport],
        latencystats: &str,
    ) -> String {
        let cluster = &self.worker.cluster;
        let mut stats = ThreadStats::default();
        for r in reports {
            stats.merge(&r.stats);
        }
        let mut expired = 0;
        let mut evicted = 0;
        let mut hits = 0;
        let mut misses = 0;
        for r in reports {
            expired += r.shard_stats.expired_keys;
            evicted += r.shard_stats.evicted_keys;
            hits += r.shard_stats.keyspace_hits;
            misses += r.shard_stats.keyspace_misses;
        }
        let ops: u64 = reports.iter().map(|r| r.ops_per_sec).sum();
        let (exceeded_total, exceeded_now) = cluster.memory.exceeded_ms();
        // Every thread's replica names every subscription.
        let (channels, patterns, shard_channels) = self.worker.pubsub_counts();
        let info = cluster.server_info();
        let uptime = cluster.started.elapsed().as_secs();
        let mut out = String::new();
        let mut first = true;
        let mut section = |name: &str, body: &str, out: &mut String| {
            if !wanted.iter().any(|w| w == &name.to_ascii_lowercase()) {
                return;
            }
            if !first {
                out.push_str("\r\n");
            }
            first = false;
            let _ = write!(out, "# {name}\r\n{body}");
        };
        let mut s = String::new();
        let _ = write!(
            s,
            "redis_version:{REDIS_VERSION}\r\ndamselfly_version:{}\r\nredis_mode:standalone\r\nos:{} {}\r\narch_bits:{}\r\nmultiplexing_api:{}\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nserver_time_usec:{}\r\nuptime_in_seconds:{}\r\nuptime_in_days:{}\r\nhz:10\r\nexecutable:{}\r\nconfig_file:{}\r\nthreads:{}\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            usize::BITS,
            info.multiplexing_api,
            std::process::id(),
            cluster.run_id,
            info.tcp_port,
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_micros(),
            uptime,
            uptime / 86400,
            info.executable,
            info.config_file,
            cluster.num_shards(),
        );
        section("Server", &s, &mut out);
        let s = format!(
            "connected_clients:{}\r\ncluster_connections:0\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\nclients_in_timeout_table:0\r\n",
            cluster.connected_clients.load(Ordering::Relaxed),
            cluster.config.maxclients.load(Ordering::Relaxed),
            cluster.blocked_clients.load(Ordering::Relaxed),
            reports.iter().map(|r| r.tracking.0).sum::<usize>(),
        );
        section("Clients", &s, &mut out);
        if wanted.iter().any(|w| w == "memory") {
            let maxmemory = cluster.config.maxmemory.load(Ordering::Relaxed);
            let figures = MemoryFigures::gather(cluster, reports);
            section(
                "Memory",
                &figures.info(cluster, reports, maxmemory),
                &mut out,
            );
        }
        section("Persistence", &persistence_info(cluster, reports), &mut out);
        let s = format!(
            "total_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{ops}\r\ntotal_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\nrejected_connections:{}\r\nexpired_keys:{expired}\r\nevicted_keys:{evicted}\r\nevicted_clients:0\r\ntotal_eviction_exceeded_time:{exceeded_total}\r\ncurrent_eviction_exceeded_time:{exceeded_now}\r\nkeyspace_hits:{hits}\r\nkeyspace_misses:{misses}\r\npubsub_channels:{}\r\npubsub_patterns:{}\r\npubsubshard_channels:{}\r\ntracking_total_keys:{}\r\ntracking_total_items:{}\r\ntracking_total_prefixes:{}\r\ntotal_error_replies:{}\r\nmulti_shard_transactions:{}\r\ntransaction_schedule_retries:{}\r\nscript_shard_restarts:{}\r\nconnections_moved:{}\r\ndirect_replies:{}\r\n",
            stats.total_connections,
            stats.total_commands,
            stats.net_input_bytes,
            stats.net_output_bytes,
            stats.rejected_connections,
            channels,
            patterns,
            shard_channels,
            reports.iter().map(|r| r.tracking.1).sum::<usize>(),
            reports.iter().map(|r| r.tracking.2).sum::<usize>(),
            self.worker.tracking_prefixes(),
            stats.total_error_replies,
            stats.multi_shard_txs,
            stats.tx_retries,
            stats.script_restarts,
            stats.connections_moved,
            stats.direct_replies,
        );
        section("Stats", &s, &mut out);
        section(
            "Replication",
            "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:0\r\n",
            &mut out,
        );
        let (sys, user) = cpu_times();
        let s = format!("used_cpu_sys:{sys:.6}\r\nused_cpu_user:{user:.6}\r\n");
        section("CPU", &s, &mut out);
        section("Modules", "", &mut out);
        let mut s = String::new();
        for (i, c) in stats.cmds.iter().enumerate() {
            if c.calls == 0 && c.rejected == 0 && c.failed == 0 {
                continue;
            }
            let per = if c.calls > 0 {
                c.usec as f64 / c.calls as f64
            } else {
                0.0
            };
            let _ = write!(
                s,
                "cmdstat_{}:calls={},usec={},usec_per_call={per:.2},rejected_calls={},failed_calls={}\r\n",
                COMMANDS[i].name, c.calls, c.usec, c.rejected, c.failed
            );
        }
        section("Commandstats", &s, &mut out);
        let mut s = String::new();
        for (code, n) in &stats.errors {
            let _ = write!(s, "errorstat_{code}:count={n}\r\n");
        }
        section("Errorstats", &s, &mut out);
        section("Latencystats", latencystats, &mut out);
        section("Cluster", "cluster_enabled:0\r\n", &mut out);
        let mut s = String::new();
        for db in 0..cluster.databases {
            let (keys, expires, ttl_sum, ttl_n) =
                reports.iter().fold((0, 0, 0u64, 0u64), |acc, r| {
                    let (k, e, t) = r.keyspace.get(db).copied().unwrap_or((0, 0, 0));
                    (acc.0 + k, acc.1 + e, acc.2 + t, acc.3 + u64::from(t > 0))
                });
            if keys > 0 {
                let avg = ttl_sum.checked_div(ttl_n).unwrap_or(0);
                let _ = write!(s, "db{db}:keys={keys},expires={expires},avg_ttl={avg}\r\n");
            }
        }
        section("Keyspace", &s, &mut out);
        let mut s = String::new();
        for r in reports {
            let keys: usize = r.keyspace.iter().map(|k| k.0).sum();
            let _ = write!(
                s,
                "shard{}:keys={keys},used_memory={},clients={},commands={},expired_keys={}\r\n",
                r.shard_id,
                r.used_memory,
                r.clients,
                r.stats.total_commands,
                r.shard_stats.expired_keys
            );
        }
        section("Shards", &s, &mut out);
        out
    }
}
