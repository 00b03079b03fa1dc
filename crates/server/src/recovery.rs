//! Start-up with the journal on (docs/persistence.md, "Recovery"): loads the current
//! generation's journals, one thread per shard of the run that wrote them, replays each
//! shard's records into that shard's data with the command handlers the records came from,
//! routes every key to the shard that owns it now (the thread count may have changed), drops
//! keys whose deadline passed, and starts a new generation whose first segment per shard
//! holds the recovered keys. Only once that generation is on disk and named by the manifest
//! are the old files deleted, so a crash at any point leaves one complete generation.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use damselfly_commands::config::Config;
use damselfly_commands::table::{lookup, Handler, COMMANDS};
use damselfly_commands::{server_family, Args, ExecCtx};
use damselfly_coord::{restore_functions, Cluster, JournalFiles, ShardMsg, ShardStart};
use damselfly_persistence::appender::{new_segment, Appender, FsyncPolicy};
use damselfly_persistence::dump;
use damselfly_persistence::journal::{encode_command, Entry, Record, SegmentHeader, SegmentReader};
use damselfly_persistence::manifest::{Base, Manifest};
use damselfly_persistence::replay::{
    drop_incomplete_transactions, read_shard, ReadPolicy, SegmentBytes,
};
use damselfly_persistence::snapshot::{read_rdb_file, LoadOptions, SnapshotManifest};
use damselfly_protocol::{ReplyBuf, Span};
use damselfly_storage::{shard_for_key, EncodingLimits, Shard};

use crate::loading::Progress;

/// What start-up recovered, before the shard threads run.
pub struct Recovered {
    shards: Vec<Shard>,
    /// The function libraries' codes.
    functions: Vec<Vec<u8>>,
    journal: Option<JournalPlan>,
    /// Keys kept and keys dropped as expired, when a snapshot or dump.rdb was loaded.
    snapshot_load: Option<(u64, u64)>,
}

/// Where each shard's journal continues.
struct JournalPlan {
    dir: PathBuf,
    manifest: Manifest,
    policy: FsyncPolicy,
    /// Per shard, the LSN its next record gets (after its base records).
    next_lsn: Vec<u64>,
}

/// Records replayed between updates of the loading progress.
const PROGRESS_EVERY: usize = 4096;

/// The base segment is sequence 0 of a generation; appending continues in 1.
const FIRST_APPEND_SEQ: u64 = 1;

/// Loads what the journal holds (when `appendonly` is on) into `threads` shards, reporting
/// how far it got in `progress`.
pub fn recover(config: &Config, threads: usize, progress: &Progress) -> Result<Recovered, String> {
    let opts = load_options(config);
    let LoadOptions {
        databases, limits, ..
    } = opts;
    let empty = |n: usize| -> Vec<Shard> { (0..n).map(|_| new_shard(databases, limits)).collect() };
    if config.get("appendonly") != "yes" {
        return Ok(match load_snapshot(config, threads, &opts)? {
            Some(loaded) => Recovered {
                shards: loaded.shards,
                functions: loaded.functions,
                journal: None,
                snapshot_load: Some(loaded.counts),
            },
            None => Recovered {
                shards: empty(threads),
                functions: Vec::new(),
                journal: None,
                snapshot_load: None,
            },
        });
    }
    let dir = Path::new(&config.get("dir")).join(config.get("appenddirname"));
    std::fs::create_dir_all(&dir)
        .map_err(|e| format!("cannot create the journal directory {}: {e}", dir.display()))?;
    let started = Instant::now();
    let old = Manifest::read(&dir)?;
    let policy = ReadPolicy {
        load_truncated: config.get("aof-load-truncated") == "yes",
        force: config.get("force-recovery") == "yes",
    };
    let (loaded, mut functions) = match old {
        Some(m) => {
            let delay = Duration::from_micros(config.get_u64("key-load-delay"));
            load_generation(&dir, m, &opts, policy, delay, progress)?
        }
        None => (Vec::new(), Vec::new()),
    };
    let keys_loaded: usize = loaded.iter().map(key_count).sum();
    let mut snapshot_load = None;
    let mut shards = if old.is_none() {
        // No journal yet: start from the snapshot, if there is one; the new generation's
        // base segments then hold its keys.
        match load_snapshot(config, threads, &opts)? {
            Some(snapshot) => {
                snapshot_load = Some(snapshot.counts);
                functions = snapshot.functions;
                snapshot.shards
            }
            None => empty(threads),
        }
    } else if loaded.is_empty() {
        empty(threads)
    } else {
        route(
            loaded,
            threads,
            databases,
            limits,
            damselfly_storage::now_ms(),
        )
    };
    let manifest = Manifest::new(
        old.map_or(1, |m| m.generation.max(m.journal_generation) + 1),
        u32::try_from(threads).map_err(|_| "too many threads".to_string())?,
    );
    let next_lsn = write_bases(&dir, manifest, &mut shards, &functions)?;
    manifest
        .write(&dir)
        .map_err(|e| format!("cannot write the manifest in {}: {e}", dir.display()))?;
    match manifest.remove_unnamed(&dir) {
        Ok(_) => {}
        Err(e) => tracing::warn!("cannot delete an older generation's files: {e}"),
    }
    if old.is_some() {
        tracing::info!(
            keys = keys_loaded,
            seconds = started.elapsed().as_secs_f64(),
            generation = manifest.generation,
            "DB loaded from the journal"
        );
    }
    let fsync = FsyncPolicy::parse(&config.get("appendfsync")).unwrap_or(FsyncPolicy::EverySec);
    Ok(Recovered {
        shards,
        functions,
        journal: Some(JournalPlan {
            dir,
            manifest,
            policy: fsync,
            next_lsn,
        }),
        snapshot_load,
    })
}

impl Recovered {
    /// Opens each shard's journal (its writer tells the shard's mailbox when records became
    /// durable) and hands the shards to the threads that will run them.
    pub fn start(self, cluster: &Arc<Cluster>) -> Result<(), String> {
        restore_functions(cluster, self.functions)?;
        let mut starts = Vec::with_capacity(self.shards.len());
        for (i, mut shard) in self.shards.into_iter().enumerate() {
            // Loading is not a change: `rdb_changes_since_last_save` starts at 0, as Redis's.
            shard.dirty = 0;
            let journal = match &self.journal {
                None => None,
                Some(plan) => Some(plan.open(i, cluster)?),
            };
            starts.push(ShardStart { shard, journal });
        }
        cluster.provide_starts(starts);
        if let Some((kept, expired)) = self.snapshot_load {
            cluster.saves.loaded(kept, expired);
        }
        if let Some(plan) = &self.journal {
            if let Ok(mut files) = cluster.journal_files.lock() {
                let base_bytes = (0..plan.manifest.shards)
                    .filter_map(|s| {
                        std::fs::metadata(plan.manifest.segment_path(&plan.dir, s, 0)).ok()
                    })
                    .map(|m| m.len())
                    .sum();
                *files = Some(JournalFiles {
                    dir: plan.dir.clone(),
                    manifest: plan.manifest,
                    seq: FIRST_APPEND_SEQ,
                    base_bytes,
                });
            }
        }
        Ok(())
    }
}

impl JournalPlan {
    fn open(&self, shard: usize, cluster: &Arc<Cluster>) -> Result<Appender, String> {
        let id = u32::try_from(shard).unwrap_or(u32::MAX);
        let path = self.manifest.segment_path(&self.dir, id, FIRST_APPEND_SEQ);
        let header = SegmentHeader {
            generation: self.manifest.generation,
            shard: id,
            seq: FIRST_APPEND_SEQ,
            first_lsn: self.next_lsn[shard],
        };
        let mailbox = cluster.mailboxes[shard].clone();
        let synced = Box::new(move || {
            mailbox.send(ShardMsg::JournalSynced);
        });
        Appender::open(&path, header, self.policy, synced)
            .map_err(|e| format!("cannot open the journal {}: {e}", path.display()))
    }
}

fn new_shard(databases: usize, limits: EncodingLimits) -> Shard {
    let mut s = Shard::new(databases);
    s.limits = limits;
    s
}

fn key_count(s: &Shard) -> usize {
    s.dbs.iter().map(|d| d.table.len()).sum()
}

/// Reads and replays every shard's journal of generation `m`, each shard on its own thread;
/// one data set per shard of the run that wrote them, and the function libraries.
fn load_generation(
    dir: &Path,
    m: Manifest,
    opts: &LoadOptions,
    policy: ReadPolicy,
    delay: Duration,
    progress: &Progress,
) -> Result<(Vec<Shard>, Vec<Vec<u8>>), String> {
    let files: Vec<Vec<SegmentBytes>> = (0..m.shards)
        .map(|s| read_segments(&m, dir, s))
        .collect::<Result<_, _>>()?;
    let bytes: usize = files.iter().flatten().map(|f| f.bytes.len()).sum();
    progress.total_bytes.store(bytes as u64, Ordering::Relaxed);
    let mut warnings = Vec::new();
    let mut records: Vec<Vec<Record<'_>>> = Vec::with_capacity(files.len());
    for segs in &files {
        records.push(read_shard(segs, policy, &mut warnings).map_err(|e| e.to_string())?);
    }
    for w in &warnings {
        tracing::warn!("{w}");
    }
    let dropped = drop_incomplete_transactions(&mut records);
    if dropped > 0 {
        tracing::warn!(
            transactions = dropped,
            "dropped multi-shard transactions a crash left incomplete"
        );
    }
    let old_shards = records.len();
    let total: usize = records.iter().map(Vec::len).sum();
    progress
        .total_records
        .store(total as u64, Ordering::Relaxed);
    let replayed = on_threads(records.iter().collect(), |id, recs| {
        // A rewritten generation starts from its RDB base, written at the cut.
        let start = match m.base {
            Base::Rdb => load_rdb_file(
                &m.base_path(dir, u32::try_from(id).unwrap_or(u32::MAX)),
                Some((m.generation, id)),
                opts,
            )?,
            Base::Segments => (new_shard(opts.databases, opts.limits), Vec::new()),
        };
        replay(recs, start, (id, old_shards), delay, progress)
    })?;
    Ok(split_functions(replayed))
}

/// The shards, and the function libraries (only the first shard holds any).
fn split_functions(loaded: Vec<(Shard, Vec<Vec<u8>>)>) -> (Vec<Shard>, Vec<Vec<u8>>) {
    let mut functions = Vec::new();
    let shards = loaded
        .into_iter()
        .map(|(shard, libs)| {
            functions.extend(libs);
            shard
        })
        .collect();
    (shards, functions)
}

/// Runs `f` on each item on its own thread (one per shard or file), collecting the results
/// in order; the first error (or a panicked thread) is the result.
fn on_threads<I: Send, T: Send>(
    items: Vec<I>,
    f: impl Fn(usize, I) -> Result<T, String> + Sync,
) -> Result<Vec<T>, String> {
    std::thread::scope(|scope| {
        let f = &f;
        let handles: Vec<_> = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| scope.spawn(move || f(i, item)))
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("a recovery thread panicked".into()))
            })
            .collect()
    })
}

fn read_segments(m: &Manifest, dir: &Path, shard: u32) -> Result<Vec<SegmentBytes>, String> {
    let paths = m
        .segments(dir, shard)
        .map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    paths
        .into_iter()
        .map(|p| {
            let bytes =
                std::fs::read(&p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
            // A file renamed or copied in from elsewhere says so in its header.
            if let Ok(h) = SegmentReader::new(&bytes).map(|r| r.header()) {
                if (h.generation, h.shard) != (m.journal_generation, shard) {
                    return Err(format!(
                        "{} holds generation {} shard {}, not generation {} shard {shard} as \
                         its name says; move it away to start",
                        p.display(),
                        h.generation,
                        h.shard,
                        m.journal_generation
                    ));
                }
            }
            Ok(SegmentBytes {
                name: p.display().to_string(),
                bytes,
            })
        })
        .collect()
}

/// Applies one shard's records to a fresh shard (with the function libraries of its base),
/// as shard `id` of `shards` (so DEBUG POPULATE creates the keys it created then). The
/// clock reads 0: nothing expires while replaying, deadlines are absolute in the records,
/// and expired keys go afterwards. A FUNCTION record holds every library at that point.
fn replay(
    records: &[Record<'_>],
    (mut shard, mut functions): (Shard, Vec<Vec<u8>>),
    (id, shards): (usize, usize),
    delay: Duration,
    progress: &Progress,
) -> Result<(Shard, Vec<Vec<u8>>), String> {
    let databases = shard.dbs.len();
    let mut buf = Vec::new();
    let mut spans = Vec::new();
    let mut failures = 0u64;
    for (i, r) in records.iter().enumerate() {
        if i % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
            progress
                .done_records
                .fetch_add(PROGRESS_EVERY as u64, Ordering::Relaxed);
        }
        let Entry::Command(words) = &r.entry else {
            continue;
        };
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
        if let [name, _, payload, ..] = words[..] {
            if name.eq_ignore_ascii_case(b"function") {
                functions = dump::decode_functions(payload).map_err(|e| {
                    format!("the journal of shard {id} holds damaged function libraries: {e}")
                })?;
                continue;
            }
        }
        let db = usize::try_from(r.db).unwrap_or(usize::MAX);
        if db >= databases {
            return Err(format!(
                "the journal of shard {id} writes to database {db}, but `databases` is \
                 {databases}: start with at least {} databases",
                db + 1
            ));
        }
        buf.clear();
        spans.clear();
        for w in words {
            Span::push_arg(&mut buf, &mut spans, w);
        }
        let args = Args::new(&buf, &spans);
        let mut reply = ReplyBuf::new(false);
        let mut ctx = ExecCtx {
            shard: &mut shard,
            db,
            now: 0,
            reply: &mut reply,
            shard_id: id,
            num_shards: shards,
            max_bulk_len: u64::MAX,
            effects: None,
        };
        if !apply(&mut ctx, &args) || !reply.error_offsets.is_empty() {
            failures += 1;
            if failures <= 5 {
                tracing::warn!(
                    shard = id,
                    lsn = r.lsn,
                    command = %String::from_utf8_lossy(words.first().copied().unwrap_or(b"")),
                    reply = %String::from_utf8_lossy(&reply.buf).trim_end(),
                    "a journal record failed when replayed"
                );
            }
        }
    }
    if failures > 0 {
        tracing::warn!(
            shard = id,
            failures,
            "journal records that failed when replayed"
        );
    }
    Ok((shard, functions))
}

/// Runs one journaled command; false when no shard handler takes it.
fn apply(ctx: &mut ExecCtx, args: &Args) -> bool {
    if args.len() >= 3 && args.is(0, "debug") && args.is(1, "populate") {
        let count = std::str::from_utf8(args.get(2))
            .ok()
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let prefix = if args.len() > 3 { args.get(3) } else { b"key" };
        let size = (args.len() > 4)
            .then(|| std::str::from_utf8(args.get(4)).ok()?.parse().ok())
            .flatten();
        server_family::populate(ctx, count, prefix, size);
        return true;
    }
    match lookup(args.get(0)).map(|spec| &COMMANDS[spec].handler) {
        Some(Handler::Shard(f)) => {
            f(ctx, args);
            true
        }
        _ => false,
    }
}

/// The loaded shards as `threads` shards: each key on the shard that owns it now, keys whose
/// deadline passed dropped.
fn route(
    loaded: Vec<Shard>,
    threads: usize,
    databases: usize,
    limits: EncodingLimits,
    now: u64,
) -> Vec<Shard> {
    let expired = |at: u64| at != 0 && at <= now;
    if loaded.len() == threads {
        return loaded
            .into_iter()
            .map(|mut s| {
                for db in 0..databases {
                    let gone: Vec<Box<[u8]>> = s.dbs[db]
                        .table
                        .iter()
                        .filter(|e| expired(e.expire_at()))
                        .map(|e| e.key().into())
                        .collect();
                    for key in gone {
                        s.remove(db, &key);
                    }
                }
                s
            })
            .collect();
    }
    let mut shards: Vec<Shard> = (0..threads).map(|_| new_shard(databases, limits)).collect();
    for mut old in loaded {
        for db in 0..databases {
            let table = std::mem::take(&mut old.dbs[db].table);
            for e in table.into_entries() {
                if !expired(e.expire_at()) {
                    let key = e.key().to_vec();
                    shards[shard_for_key(&key, threads)].put(db, &key, e);
                }
            }
        }
    }
    shards
}

/// Writes each shard's base segment (sequence 0 of the new generation): a RESTORE with an
/// absolute deadline for every key, and in the first shard's the function libraries,
/// synced. Returns each shard's next LSN.
fn write_bases(
    dir: &Path,
    m: Manifest,
    shards: &mut [Shard],
    functions: &[Vec<u8>],
) -> Result<Vec<u64>, String> {
    // `&mut`: a shard is Send, not Sync.
    on_threads(shards.iter_mut().collect(), |i, shard| {
        let functions = if i == 0 { functions } else { &[] };
        write_base(dir, m, i, shard, functions)
    })
}

fn write_base(
    dir: &Path,
    m: Manifest,
    index: usize,
    shard: &Shard,
    functions: &[Vec<u8>],
) -> Result<u64, String> {
    use std::io::Write;
    let id = u32::try_from(index).unwrap_or(u32::MAX);
    let path = m.segment_path(dir, id, 0);
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    let header = SegmentHeader {
        generation: m.generation,
        shard: id,
        seq: 0,
        first_lsn: 1,
    };
    let mut file = new_segment(&path, header).map_err(fail)?;
    let mut lsn = 1;
    let mut buf = Vec::new();
    if !functions.is_empty() {
        let codes: Vec<&[u8]> = functions.iter().map(Vec::as_slice).collect();
        let payload = dump::encode_functions(&codes, &Default::default());
        let args: [&[u8]; 4] = [b"FUNCTION", b"RESTORE", &payload, b"FLUSH"];
        encode_command(&mut buf, lsn, 0, (0, 0), &args);
        lsn += 1;
    }
    for (db, d) in shard.dbs.iter().enumerate() {
        let db = u32::try_from(db).unwrap_or(u32::MAX);
        for e in d.table.iter() {
            let payload = dump::encode(e.value(), &Default::default());
            let at = e.expire_at().to_string();
            let args: [&[u8]; 6] = [
                b"RESTORE",
                e.key(),
                at.as_bytes(),
                &payload,
                b"REPLACE",
                b"ABSTTL",
            ];
            encode_command(&mut buf, lsn, db, (0, 0), &args);
            lsn += 1;
            if buf.len() >= 1 << 20 {
                file.write_all(&buf).map_err(fail)?;
                buf.clear();
            }
        }
    }
    file.write_all(&buf).map_err(fail)?;
    file.sync_data().map_err(fail)?;
    Ok(lsn)
}

/// Loads the current snapshot (docs/persistence.md, "Snapshots") into `threads` shards: the
/// files the snapshot manifest in `dir` names, each read on its own thread, every key routed
/// to the shard that owns it now, keys whose deadline passed dropped. Without a manifest,
/// `dir/dbfilename` (a Redis `dump.rdb`) is loaded the same way. Ok(None): neither exists.
fn load_snapshot(
    config: &Config,
    threads: usize,
    opts: &LoadOptions,
) -> Result<Option<LoadedSnapshot>, String> {
    let dir = PathBuf::from(config.get("dir"));
    let started = Instant::now();
    let (files, id) = match SnapshotManifest::read(&dir)? {
        Some(m) => (m.paths(&dir), Some(m.id)),
        None => {
            let dump = dir.join(config.get("dbfilename"));
            if !dump.exists() {
                return Ok(None);
            }
            (vec![dump], None)
        }
    };
    let (loaded, functions) = split_functions(on_threads(files.iter().collect(), |i, path| {
        load_rdb_file(path, id.map(|id| (id, i)), opts)
    })?);
    let keys: usize = loaded.iter().map(key_count).sum();
    let shards = route(
        loaded,
        threads,
        opts.databases,
        opts.limits,
        damselfly_storage::now_ms(),
    );
    let kept: usize = shards.iter().map(key_count).sum();
    tracing::info!(
        keys = kept,
        expired = keys - kept,
        files = files.len(),
        seconds = started.elapsed().as_secs_f64(),
        "DB loaded from disk"
    );
    Ok(Some(LoadedSnapshot {
        shards,
        functions,
        counts: (kept as u64, (keys - kept) as u64),
    }))
}

/// A snapshot (or dump.rdb) loaded into the shards.
struct LoadedSnapshot {
    shards: Vec<Shard>,
    /// The function libraries' codes.
    functions: Vec<Vec<u8>>,
    /// The keys kept and the keys dropped because their deadline had passed.
    counts: (u64, u64),
}

/// How start-up reads RDB files, from the configuration.
fn load_options(config: &Config) -> LoadOptions {
    LoadOptions {
        databases: usize::try_from(config.get_u64("databases").max(1)).unwrap_or(usize::MAX),
        limits: config.encoding_limits(),
        verify_checksum: config.get("rdbchecksum") == "yes",
    }
}

/// Reads one RDB file into one shard (as the shard of the run that wrote it), with the
/// function libraries it holds. `snapshot`: the snapshot id and shard number the file must
/// say it holds (None for a Redis file).
fn load_rdb_file(
    path: &Path,
    snapshot: Option<(u64, usize)>,
    opts: &LoadOptions,
) -> Result<(Shard, Vec<Vec<u8>>), String> {
    let mut shard = new_shard(opts.databases, opts.limits);
    let functions = read_rdb_file(path, snapshot, opts, |db, key, value, at| {
        if shard.dbs[db].table.get(&key).is_some() {
            return Err(format!(
                "{} holds key {:?} of database {db} twice",
                path.display(),
                String::from_utf8_lossy(&key)
            ));
        }
        shard.set(db, &key, value, at);
        Ok(())
    })?;
    Ok((shard, functions))
}
