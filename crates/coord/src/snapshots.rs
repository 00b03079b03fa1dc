//! SAVE, BGSAVE and LASTSAVE (docs/persistence.md, "Snapshots").
//!
//! The cut: one transaction with shared intents on every database of every shard (DEBUG
//! DIGEST's pattern), whose hop on each shard opens that shard's temporary RDB file and calls
//! `Shard::start_snapshot` with it. No write can fall between two shards' hops, so the files
//! together hold one point in time. Each shard then walks its data stripe by stripe in
//! steps of `STEP_TIME`, one step per pass of its mailbox loop (the worker sends itself a
//! `SnapshotStep` message after each step, and the mailbox loop waits for the runtime's next
//! I/O poll before the next one), so clients keep being served between steps; while they
//! keep the thread busy, the walk pauses between steps so that it takes at most a third of
//! the time (`WalkPace`). A write saves its key's entry first if the walk has not reached it.
//!
//! Each shard hands its finished sink to a finishing thread, which writes the trailers and
//! syncs the files (off the shard threads), renames them to `.rdb`, syncs the directory and
//! then names the snapshot in the manifest. Any error makes the save fail
//! (`rdb_last_bgsave_status:err`); the temporary files are deleted and the previous snapshot
//! stays current.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use damselfly_commands::lookup;
use damselfly_commands::Args;
use damselfly_persistence::manifest::{Base, Manifest};
use damselfly_persistence::rdb::WriteOptions;
use damselfly_persistence::snapshot::{
    shard_file_name, sync_dir, temp_file_name, RdbFileSink, SnapshotManifest,
};
use damselfly_storage::SnapshotSink;
use futures_channel::oneshot;

use crate::connection::Connection;
use crate::messages::ShardMsg;
use crate::tx::coordinator::Tx;
use crate::tx::{Lock, Mode, ShardWork};
use crate::worker::Worker;
use std::sync::atomic::Ordering;

/// How long a snapshot step saves before the shard serves anything else. The walk goes
/// stripe by stripe (about 1/512 of a table segment), checking the clock after each batch of
/// `STEP_BATCH` entries, so a step of large values ends about as soon as one of small values
/// and clients wait at most about this long (plus one stripe) between steps.
const STEP_TIME: Duration = Duration::from_micros(250);
/// Entries saved between two looks at the clock within a step (about one stripe of a full
/// segment): 8 values of 1 KB take about 20 us, and a look at the clock costs about 25 ns.
const STEP_BATCH: usize = 8;
/// While clients keep the thread busy, the walk pauses this many times the CPU time of its
/// last step before the next one: it then takes at most a third of the thread, so a save
/// slows requests little, and takes longer, which costs nothing but time.
const PAUSE_PER_STEP: u32 = 2;

/// The walk's pacing. An idle shard walks step after step; a shard that ran commands since
/// the last step pauses the walk for `PAUSE_PER_STEP` times that step's CPU time before the
/// next. The step is measured in the thread's CPU time: on cores shared with other processes
/// a thread is often descheduled, and that time is not the walk's. The pause is wall time,
/// so that other threads and processes get the cores too: on a machine shared with its load,
/// a walk that took every spare cycle of its thread starved the load's own processes, and
/// requests during a save ran at a third of their rate. (Busy is counted in commands, not in CPU time
/// between steps: an idle thread spends 30 us of CPU between two steps on its own.)
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct WalkPace {
    /// The shard's executed-command count when the last step ended (None: no walk running).
    ended: Option<u64>,
    /// The shard ran commands between the last two steps.
    busy: bool,
    /// When the paused walk takes its next step.
    resume_at: Option<Instant>,
}

impl WalkPace {
    /// A step starts; the shard has executed `executed` commands.
    fn start(&mut self, executed: u64) {
        self.resume_at = None;
        self.busy = self.ended.is_some_and(|ended| executed != ended);
    }

    /// The step that started at CPU time `started` ended at `ended`, wall time `now`, with
    /// `executed` commands run: when the next one may start (None: at once), or nothing more
    /// when the walk is over.
    fn end(
        &mut self,
        started: Duration,
        ended: Duration,
        executed: u64,
        now: Instant,
        running: bool,
    ) -> Option<Instant> {
        if !running {
            *self = WalkPace::default();
            return None;
        }
        self.ended = Some(executed);
        self.resume_at = self
            .busy
            .then(|| now + ended.saturating_sub(started) * PAUSE_PER_STEP);
        self.resume_at
    }
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        u64::try_from(ts.tv_sec).unwrap_or(0),
        u32::try_from(ts.tv_nsec).unwrap_or(0),
    )
}

/// A finished shard: its id and its sink (to finish on the finishing thread).
pub(crate) type Finished = (usize, Box<dyn SnapshotSink + Send>);

/// The server's saves, for SAVE/BGSAVE/LASTSAVE and INFO persistence.
pub struct Saves {
    state: Mutex<SaveState>,
    /// The last save failed: read by every write while it is true (MISCONF), so kept apart
    /// from the mutex.
    failed: std::sync::atomic::AtomicBool,
}

#[derive(Debug, Clone)]
pub struct SaveState {
    /// When the running save started.
    pub running: Option<Instant>,
    pub last_ok: bool,
    /// Unix seconds of the last successful save (the start time before any).
    pub last_save_unix: u64,
    /// Seconds the last save took, -1 before any.
    pub last_secs: i64,
    /// Successful saves.
    pub saves: u64,
    /// The shards' summed `dirty` at the cut of the last successful save.
    pub dirty_base: u64,
    /// Unix seconds when the last save started (ok or not).
    pub last_try_unix: u64,
    /// Keys the last load of a snapshot or dump.rdb kept, and those it dropped because their
    /// deadline had passed (`rdb_last_load_keys_loaded`, `rdb_last_load_keys_expired`).
    pub last_load: (u64, u64),
    last_id: u64,
}

impl Saves {
    pub fn new(started_unix: u64) -> Self {
        Saves {
            state: Mutex::new(SaveState {
                running: None,
                last_ok: true,
                last_save_unix: started_unix,
                last_secs: -1,
                saves: 0,
                dirty_base: 0,
                last_try_unix: 0,
                last_load: (0, 0),
                last_id: 0,
            }),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Forgets a save that `begin` marked running but that never started.
    pub(crate) fn cancel(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).running = None;
    }

    /// Records what the last load of a snapshot or dump.rdb kept and dropped.
    pub fn loaded(&self, kept: u64, expired: u64) {
        self.state
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_load = (kept, expired);
    }

    /// Whether the last save failed (`rdb_last_bgsave_status:err`).
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::Relaxed)
    }

    pub fn state(&self) -> SaveState {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Marks a save as running and returns its id; None when one runs already.
    pub(crate) fn begin(&self) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if s.running.is_some() {
            return None;
        }
        s.running = Some(Instant::now());
        s.last_try_unix = damselfly_storage::now_ms() / 1000;
        let id = damselfly_storage::now_ms().max(s.last_id + 1);
        s.last_id = id;
        Some(id)
    }

    pub(crate) fn end(&self, ok: bool, dirty_at_cut: u64) {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let took = s.running.take().map_or(0, |t| t.elapsed().as_secs());
        s.last_ok = ok;
        self.failed.store(!ok, Ordering::Relaxed);
        s.last_secs = i64::try_from(took).unwrap_or(i64::MAX);
        if ok {
            s.saves += 1;
            s.last_save_unix = damselfly_storage::now_ms() / 1000;
            s.dirty_base = dirty_at_cut;
        }
    }
}

impl Worker {
    /// The cut on this shard: opens its temporary file and starts the snapshot; for a journal
    /// rewrite the journal also moves to its next segment here, so the base holds exactly
    /// what precedes that segment. Returns the shard's change counter at the cut.
    fn begin_snapshot(&self, target: &Target, done: Sender<Finished>) -> Result<u64, String> {
        // The encodings and `rdbcompression` as configured now.
        self.sync_limits();
        let mut shard = self.shard.borrow_mut();
        if shard.snapshot_running() {
            return Err("a snapshot is already running on this shard".into());
        }
        let sizes = shard
            .dbs
            .iter()
            .map(|d| (d.len() as u64, d.volatile_count() as u64))
            .collect();
        let opts = WriteOptions {
            checksum: self.cluster.config.get("rdbchecksum") == "yes",
            ..WriteOptions::for_limits(&shard.limits)
        };
        let number = u32::try_from(self.id).unwrap_or(u32::MAX);
        let path = target.temp(number);
        let ctime = i64::try_from(damselfly_storage::now_ms() / 1000).unwrap_or(0);
        let used = shard.used_memory() as u64;
        // Shard 0 saves the function libraries. Every change to them runs on its thread
        // (`Worker::change_functions`), so this cut sees them as its journal does.
        let libraries = if self.id == 0 {
            self.cluster.functions.list()
        } else {
            Vec::new()
        };
        let codes: Vec<&[u8]> = libraries.iter().map(|l| l.code.as_slice()).collect();
        let sink = RdbFileSink::create(
            &path,
            target.id(),
            number,
            sizes,
            &codes,
            &opts,
            ctime,
            used,
        )
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
        shard.start_snapshot(Box::new(sink));
        let dirty = shard.dirty;
        drop(shard);
        if let Target::JournalBase {
            dir,
            journal_generation,
            seq,
            open,
            ..
        } = target
        {
            let next = Manifest::segment_path_of(dir, *journal_generation, number, *seq);
            if *open {
                self.open_journal(&next, *journal_generation, *seq)?;
            } else {
                self.journal_rotate(&next, *journal_generation, *seq);
            }
        }
        *self.snapshot_done.borrow_mut() = Some(done);
        self.cluster.mailboxes[self.id].send(ShardMsg::SnapshotStep);
        Ok(dirty)
    }

    /// Opens this shard's journal at `path` (CONFIG SET appendonly yes, at the cut).
    fn open_journal(&self, path: &Path, generation: u64, seq: u64) -> Result<(), String> {
        let shard = u32::try_from(self.id).unwrap_or(u32::MAX);
        let header = damselfly_persistence::journal::SegmentHeader {
            generation,
            shard,
            seq,
            first_lsn: 1,
        };
        let policy = damselfly_persistence::appender::FsyncPolicy::parse(
            &self.cluster.config.get("appendfsync"),
        )
        .unwrap_or(damselfly_persistence::appender::FsyncPolicy::EverySec);
        let mailbox = self.cluster.mailboxes[self.id].clone();
        let synced = Box::new(move || {
            mailbox.send(ShardMsg::JournalSynced);
        });
        let appender =
            damselfly_persistence::appender::Appender::open(path, header, policy, synced)
                .map_err(|e| format!("cannot open the journal {}: {e}", path.display()))?;
        self.start_journal(appender);
        Ok(())
    }

    /// One step of the walk; asks for the next one, or hands the finished sink over.
    pub(crate) fn snapshot_step(&self) {
        // Redis's testing knob: microseconds per key saved; one key per step then, so the
        // shard keeps serving between the pauses.
        let delay = self.cluster.config.get_u64("rdb-key-save-delay");
        let started = thread_cpu_time();
        let mut pace = self.walk_pace.get();
        pace.start(self.executed());
        let mut shard = self.shard.borrow_mut();
        let finished = if delay > 0 {
            std::thread::sleep(Duration::from_micros(delay));
            shard.snapshot_step(1)
        } else {
            let until = Instant::now() + STEP_TIME;
            loop {
                let finished = shard.snapshot_step(STEP_BATCH);
                // Not running: a step left over from a save that ended (DEBUG RELOAD's).
                if finished.is_some() || !shard.snapshot_running() || Instant::now() >= until {
                    break finished;
                }
            }
        };
        let running = shard.snapshot_running();
        drop(shard);
        let paused = pace.end(
            started,
            thread_cpu_time(),
            self.executed(),
            Instant::now(),
            running,
        );
        self.walk_pace.set(pace);
        match finished {
            Some(sink) => {
                if let Some(done) = self.snapshot_done.borrow_mut().take() {
                    let _ = done.send((self.id, sink));
                }
            }
            // A paused walk's next step comes from the mailbox loop when the pause is over.
            None if running && paused.is_none() => {
                self.cluster.mailboxes[self.id].send(ShardMsg::SnapshotStep);
            }
            None => {}
        }
    }

    /// When a paused snapshot walk takes its next step (the mailbox loop then hands this
    /// worker a `SnapshotStep`).
    pub fn walk_resumes_at(&self) -> Option<Instant> {
        self.walk_pace.get().resume_at
    }
}

/// Where a snapshot goes.
#[derive(Debug, Clone)]
enum Target {
    /// SAVE, BGSAVE, the schedule: `dir`, named by the snapshot manifest.
    Snapshot { dir: PathBuf, id: u64 },
    /// BGREWRITEAOF: the RDB base of the journal's generation `generation`, followed by the
    /// journal's segments from `seq` on (the shards move to that segment at the cut).
    JournalBase {
        dir: PathBuf,
        generation: u64,
        shards: u32,
        journal_generation: u64,
        seq: u64,
        /// The journal is being turned on (CONFIG SET appendonly yes): the cut opens each
        /// shard's journal instead of moving it to a new segment.
        open: bool,
    },
}

impl Target {
    /// The id the files carry in their AUX fields.
    fn id(&self) -> u64 {
        match self {
            Target::Snapshot { id, .. } => *id,
            Target::JournalBase { generation, .. } => *generation,
        }
    }

    fn temp(&self, shard: u32) -> PathBuf {
        match self {
            Target::Snapshot { dir, id } => dir.join(temp_file_name(*id, shard)),
            Target::JournalBase {
                dir, generation, ..
            } => {
                let mut p = Manifest::base_path_of(dir, *generation, shard).into_os_string();
                p.push(".tmp");
                PathBuf::from(p)
            }
        }
    }

    /// Makes the complete, synced files current.
    fn publish(&self, shards: usize) -> Result<(), String> {
        match self {
            Target::Snapshot { dir, id } => publish(dir, *id, shards),
            Target::JournalBase {
                dir,
                generation,
                shards,
                journal_generation,
                seq,
                ..
            } => {
                for s in 0..*shards {
                    let from = self.temp(s);
                    let to = Manifest::base_path_of(dir, *generation, s);
                    std::fs::rename(&from, &to)
                        .map_err(|e| format!("cannot rename {}: {e}", from.display()))?;
                }
                sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
                let manifest = Manifest {
                    base: Base::Rdb,
                    journal_generation: *journal_generation,
                    journal_from: *seq,
                    ..Manifest::new(*generation, *shards)
                };
                manifest
                    .write(dir)
                    .map_err(|e| format!("cannot write the journal manifest: {e}"))?;
                if let Err(e) = manifest.remove_unnamed(dir) {
                    tracing::warn!("cannot delete the journal's older files: {e}");
                }
                Ok(())
            }
        }
    }
}

/// Finishes a snapshot on its own thread: waits for `started` shards, then trailers, syncs,
/// and `Target::publish`.
struct Finisher {
    target: Target,
    shards: usize,
    /// Why the cut failed on some shard, if it did.
    cut_error: Option<String>,
    started: usize,
}

impl Finisher {
    fn run(&self, rx: Receiver<Finished>) -> Result<(), String> {
        let mut error = self.cut_error.clone();
        for _ in 0..self.started {
            match rx.recv() {
                Ok((shard, sink)) => {
                    if let Err(e) = sink.finish() {
                        let name = self.target.temp(shard as u32);
                        error.get_or_insert(format!("writing {}: {e}", name.display()));
                    }
                }
                Err(_) => {
                    error.get_or_insert("a shard stopped before its snapshot ended".into());
                    break;
                }
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        self.target.publish(self.shards)
    }

    /// Deletes this snapshot's temporary files (after a failure).
    fn discard(&self) {
        for s in 0..self.shards {
            let _ = std::fs::remove_file(self.target.temp(s as u32));
        }
    }
}

/// Makes snapshot `id` current once every shard's temporary file is complete and synced:
/// renames the files, syncs the directory, names the snapshot in the manifest, and only then
/// deletes other snapshots' files.
pub(crate) fn publish(dir: &Path, id: u64, shards: usize) -> Result<(), String> {
    let shards = u32::try_from(shards).map_err(|_| "too many shards".to_string())?;
    for s in 0..shards {
        let from = dir.join(temp_file_name(id, s));
        let to = dir.join(shard_file_name(id, s));
        std::fs::rename(&from, &to)
            .map_err(|e| format!("cannot rename {}: {e}", from.display()))?;
    }
    let manifest = SnapshotManifest::new(id, shards);
    sync_dir(dir).map_err(|e| format!("cannot sync {}: {e}", dir.display()))?;
    manifest
        .write(dir)
        .map_err(|e| format!("cannot write the snapshot manifest: {e}"))?;
    if let Err(e) = manifest.remove_others(dir) {
        tracing::warn!("cannot delete an earlier snapshot's files: {e}");
    }
    Ok(())
}

/// Deletes the temporary files of snapshot `id` (after a failure).
pub(crate) fn discard_temp_files(dir: &Path, id: u64, shards: usize) {
    for s in 0..shards {
        let _ = std::fs::remove_file(dir.join(temp_file_name(id, s as u32)));
    }
}

/// Whether SHUTDOWN asked to save, not to save, or left it to the save points (SIGTERM too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownSave {
    Default,
    Save,
    NoSave,
}

/// The save made while the server stops: once every thread has finished its clients' work
/// nothing changes any more, so each shard writes its file on its own thread with no cut
/// to take, and the last one to finish names the snapshot.
pub struct FinalSave {
    mode: Mutex<ShutdownSave>,
    id: std::sync::OnceLock<u64>,
    done: std::sync::atomic::AtomicUsize,
    failed: std::sync::atomic::AtomicBool,
}

impl Default for FinalSave {
    fn default() -> Self {
        FinalSave {
            mode: Mutex::new(ShutdownSave::Default),
            id: std::sync::OnceLock::new(),
            done: std::sync::atomic::AtomicUsize::new(0),
            failed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

impl FinalSave {
    /// SHUTDOWN SAVE / NOSAVE (before it triggers the shutdown).
    pub fn set_mode(&self, mode: ShutdownSave) {
        *self.mode.lock().unwrap_or_else(|e| e.into_inner()) = mode;
    }

    /// True when the final save failed (the process then exits with an error).
    pub fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Worker {
    /// This shard's part of the save at shutdown (called by every thread once its clients are
    /// gone and every other thread got there too): with save points configured, or SHUTDOWN
    /// SAVE, unless SHUTDOWN NOSAVE, as Redis decides.
    pub fn save_at_shutdown(&self) {
        use std::sync::atomic::Ordering::SeqCst;
        let cluster = &self.cluster;
        let fin = &cluster.final_save;
        let mode = *fin.mode.lock().unwrap_or_else(|e| e.into_inner());
        let points = !cluster.config.get("save").trim().is_empty();
        if mode == ShutdownSave::NoSave || (mode == ShutdownSave::Default && !points) {
            return;
        }
        if cluster.saves.state().running.is_some() {
            // A running BGSAVE's walk stops with the threads; its files are discarded.
            self.shard.borrow_mut().abort_snapshot();
        }
        let id = *fin
            .id
            .get_or_init(|| damselfly_storage::now_ms().max(cluster.saves.state().last_id + 1));
        let dir = PathBuf::from(cluster.config.get("dir"));
        // No client is left to serve: the whole file is written at once.
        if let Err(e) = self.save_now(&dir, id) {
            tracing::error!("Error trying to save the DB at shutdown: {e}");
            fin.failed.store(true, SeqCst);
        }
        if fin.done.fetch_add(1, SeqCst) + 1 == self.num_shards() {
            if fin.failed() {
                discard_temp_files(&dir, id, self.num_shards());
                return;
            }
            match publish(&dir, id, self.num_shards()) {
                Ok(()) => tracing::info!(id, "DB saved on disk"),
                Err(e) => {
                    tracing::error!("Error trying to save the DB at shutdown: {e}");
                    fin.failed.store(true, SeqCst);
                }
            }
        }
    }
}

impl Worker {
    /// Writes this shard's whole file of snapshot `id` in `dir` now, serving nothing in
    /// between (the save at shutdown, DEBUG RELOAD). Returns the shard's change counter.
    pub(crate) fn save_now(&self, dir: &Path, id: u64) -> Result<u64, String> {
        let target = Target::Snapshot {
            dir: dir.to_path_buf(),
            id,
        };
        let (tx, _rx) = crossbeam_channel::bounded::<Finished>(1);
        let result = self.begin_snapshot(&target, tx).and_then(|dirty| {
            let sink = loop {
                if let Some(sink) = self.shard.borrow_mut().snapshot_step(usize::MAX) {
                    break sink;
                }
            };
            sink.finish()
                .map(|()| dirty)
                .map_err(|e| format!("writing shard {}'s file: {e}", self.id))
        });
        self.snapshot_done.borrow_mut().take();
        result
    }
}

/// One save from its cut to its files being current: the parts the cut runs on each shard,
/// then the finishing thread. Used by SAVE/BGSAVE, the `save` schedule and BGREWRITEAOF.
struct SaveRun {
    cluster: std::sync::Arc<crate::Cluster>,
    target: Target,
    shards: usize,
    done_tx: Option<Sender<Finished>>,
    done_rx: Receiver<Finished>,
}

impl SaveRun {
    /// A snapshot into `dir`; None when a save or a rewrite runs.
    fn snapshot(worker: &Worker) -> Option<SaveRun> {
        let cluster = worker.cluster.clone();
        if cluster.rewrites.state().running.is_some() {
            return None;
        }
        let id = cluster.saves.begin()?;
        let dir = PathBuf::from(cluster.config.get("dir"));
        Some(Self::new(worker, Target::Snapshot { dir, id }))
    }

    /// A journal rewrite; None when a save or a rewrite runs.
    fn rewrite(worker: &Worker) -> Option<SaveRun> {
        let cluster = worker.cluster.clone();
        if cluster.saves.state().running.is_some() {
            return None;
        }
        cluster.rewrites.begin()?;
        let shards = u32::try_from(worker.num_shards()).unwrap_or(u32::MAX);
        let mut files = cluster
            .journal_files
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let target = match files.as_mut() {
            Some(f) => {
                // The shards move to the next segment at the cut.
                f.seq += 1;
                Target::JournalBase {
                    dir: f.dir.clone(),
                    generation: f.manifest.generation.max(f.manifest.journal_generation) + 1,
                    shards,
                    journal_generation: f.manifest.journal_generation,
                    seq: f.seq,
                    open: false,
                }
            }
            None => {
                // No journal: a base alone, which a start with appendonly yes loads.
                let dir = std::path::Path::new(&cluster.config.get("dir"))
                    .join(cluster.config.get("appenddirname"));
                let _ = std::fs::create_dir_all(&dir);
                let generation = Manifest::read(&dir)
                    .ok()
                    .flatten()
                    .map_or(1, |m| m.generation.max(m.journal_generation) + 1);
                // CONFIG SET appendonly yes: the cut opens the journals.
                let open = cluster.config.get("appendonly") == "yes";
                Target::JournalBase {
                    dir,
                    generation,
                    shards,
                    journal_generation: generation,
                    seq: 1,
                    open,
                }
            }
        };
        drop(files);
        Some(Self::new(worker, target))
    }

    fn new(worker: &Worker, target: Target) -> SaveRun {
        let (tx, rx) = crossbeam_channel::unbounded::<Finished>();
        SaveRun {
            cluster: worker.cluster.clone(),
            target,
            shards: worker.num_shards(),
            done_tx: Some(tx),
            done_rx: rx,
        }
    }

    /// What the cut runs on each shard: open its file, start its snapshot.
    fn parts(&self) -> Vec<(usize, ShardWork<Result<u64, String>>)> {
        let tx = self.done_tx.clone();
        (0..self.shards)
            .filter_map(|shard| {
                let (target, tx) = (self.target.clone(), tx.clone()?);
                let work: ShardWork<Result<u64, String>> =
                    Box::new(move |w: &Worker| w.begin_snapshot(&target, tx));
                Some((shard, work))
            })
            .collect()
    }

    /// After the cut: starts the finishing thread; its verdict arrives on the receiver.
    /// None when the thread cannot start (the run is then over, failed).
    fn finish(
        mut self,
        results: Option<Vec<Result<u64, String>>>,
    ) -> Option<oneshot::Receiver<bool>> {
        self.done_tx = None;
        let (mut started, mut dirty_at_cut, mut cut_error) = (0, 0, None);
        match results {
            Some(results) => {
                for r in results {
                    match r {
                        Ok(d) => {
                            started += 1;
                            dirty_at_cut += d;
                        }
                        Err(e) => {
                            cut_error.get_or_insert(e);
                        }
                    }
                }
            }
            None => cut_error = Some("a shard is unavailable".into()),
        }
        let rewrite = matches!(self.target, Target::JournalBase { .. });
        let finisher = Finisher {
            target: self.target.clone(),
            shards: self.shards,
            cut_error,
            started,
        };
        let (done_tx, done_rx) = oneshot::channel::<bool>();
        let (owner, rx) = (self.cluster.clone(), self.done_rx);
        let spawned = std::thread::Builder::new()
            .name("damselfly-save".into())
            .spawn(move || {
                let what = if rewrite { "rewrite" } else { "save" };
                let ok = match finisher.run(rx) {
                    Ok(()) => {
                        tracing::info!(id = finisher.target.id(), "background {what} done");
                        true
                    }
                    Err(e) => {
                        tracing::warn!(id = finisher.target.id(), "background {what} failed: {e}");
                        finisher.discard();
                        false
                    }
                };
                if rewrite {
                    if ok {
                        note_rewritten(&owner, &finisher.target);
                    }
                    owner.rewrites.end(ok, 0);
                } else {
                    owner.saves.end(ok, dirty_at_cut);
                }
                let _ = done_tx.send(ok);
            });
        match spawned {
            Ok(_) => Some(done_rx),
            Err(e) => {
                tracing::warn!("background job failed: cannot start a thread: {e}");
                None
            }
        }
    }
}

/// A finished rewrite: the journal's manifest is the one it wrote.
fn note_rewritten(cluster: &crate::Cluster, target: &Target) {
    if let Target::JournalBase {
        dir,
        generation,
        shards,
        journal_generation,
        seq,
        open,
    } = target
    {
        if *open {
            let mut files = cluster
                .journal_files
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            files.get_or_insert(crate::JournalFiles {
                dir: dir.clone(),
                manifest: Manifest::new(*generation, *shards),
                seq: *seq,
                base_bytes: 0,
            });
        }
        if let Some(f) = cluster
            .journal_files
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            f.manifest = Manifest {
                base: Base::Rdb,
                journal_generation: *journal_generation,
                journal_from: *seq,
                ..Manifest::new(*generation, *shards)
            };
            f.base_bytes = (0..*shards)
                .filter_map(|s| std::fs::metadata(f.manifest.base_path(&f.dir, s)).ok())
                .map(|m| m.len())
                .sum();
        }
    }
}

/// Runs `parts` as hops of one transaction with shared intents on every database of every
/// shard, outside any client: a cut no write falls across. None when a shard is gone.
async fn over_every_shard<T: Send + 'static>(
    worker: &std::rc::Rc<Worker>,
    parts: Vec<(usize, ShardWork<T>)>,
) -> Option<Vec<T>> {
    let plan = (0..worker.num_shards())
        .map(|shard| (shard, vec![Lock::AllDbs { mode: Mode::Shared }]))
        .collect();
    let mut tx = Tx::begin(worker, plan).await?;
    let results = tx.hops(parts, true).await;
    tx.end().await;
    results.into_iter().collect()
}

/// Runs the cut of `run` outside any client (`over_every_shard`), then its finishing thread.
async fn cut_and_finish(
    worker: &std::rc::Rc<Worker>,
    run: SaveRun,
) -> Option<oneshot::Receiver<bool>> {
    let results = over_every_shard(worker, run.parts()).await;
    let state_is_rewrite = matches!(run.target, Target::JournalBase { .. });
    let cluster = run.cluster.clone();
    let done = run.finish(results);
    if done.is_none() {
        if state_is_rewrite {
            cluster.rewrites.end(false, 0);
        } else {
            cluster.saves.end(false, 0);
        }
    }
    done
}

/// The `save` points as (seconds, changes) pairs; empty when saving is off. Malformed text
/// (CONFIG SET checks it) counts as none.
fn save_points(text: &str) -> Vec<(u64, u64)> {
    let nums: Vec<u64> = text
        .split_whitespace()
        .filter_map(|n| n.parse().ok())
        .collect();
    nums.chunks_exact(2).map(|p| (p[0], p[1])).collect()
}

/// Whether the journal grew enough for an automatic rewrite, as Redis decides: past
/// `auto-aof-rewrite-min-size` and by `auto-aof-rewrite-percentage` percent of its base
/// (0: never).
fn rewrite_due(cluster: &crate::Cluster) -> bool {
    let percentage = cluster.config.get_u64("auto-aof-rewrite-percentage");
    if percentage == 0 {
        return false;
    }
    let base = match cluster.journal_files.lock() {
        Ok(files) => match files.as_ref() {
            Some(f) => f.base_bytes,
            None => return false,
        },
        Err(_) => return false,
    };
    let grown = cluster.journal_bytes();
    let current = base + grown;
    current >= cluster.config.get_u64("auto-aof-rewrite-min-size")
        && u128::from(grown) * 100 >= u128::from(percentage) * u128::from(base.max(1))
}

/// How long after a failed automatic save the next one may start (Redis's
/// CONFIG_BGSAVE_RETRY_DELAY).
const RETRY_AFTER_FAILURE: u64 = 5;

/// The `save` schedule, run by one thread: once a second, a background save starts when a
/// save point is met (at least N changes and at least S seconds since the last save), as
/// Redis's cron does. The cut is the same transaction over every shard as BGSAVE's.
pub async fn save_schedule<S: std::future::Future<Output = ()>>(
    worker: std::rc::Rc<Worker>,
    sleep: impl Fn(Duration) -> S,
) {
    let cluster = worker.cluster.clone();
    loop {
        sleep(Duration::from_secs(1)).await;
        if cluster.shutdown.is_triggered() {
            return;
        }
        let busy =
            cluster.saves.state().running.is_some() || cluster.rewrites.state().running.is_some();
        if busy {
            continue;
        }
        // What BGREWRITEAOF or BGSAVE SCHEDULE left waiting for the job that ran.
        if cluster.rewrite_scheduled.swap(false, Ordering::SeqCst) {
            if let Some(run) = SaveRun::rewrite(&worker) {
                cut_and_finish(&worker, run).await;
            }
            continue;
        }
        if rewrite_due(&cluster) {
            tracing::info!("the journal grew past auto-aof-rewrite-percentage, rewriting");
            if let Some(run) = SaveRun::rewrite(&worker) {
                cut_and_finish(&worker, run).await;
            }
            continue;
        }
        let state = cluster.saves.state();
        let now = damselfly_storage::now_ms() / 1000;
        let since = now.saturating_sub(state.last_save_unix);
        let changes = cluster.changes().saturating_sub(state.dirty_base);
        let retry_ok =
            state.last_ok || now.saturating_sub(state.last_try_unix) >= RETRY_AFTER_FAILURE;
        let due = save_points(&cluster.config.get("save"))
            .into_iter()
            .any(|(secs, n)| changes >= n && since >= secs);
        let scheduled = cluster.save_scheduled.swap(false, Ordering::SeqCst);
        if !scheduled && (!due || !retry_ok) {
            continue;
        }
        if !scheduled {
            tracing::info!(changes, seconds = since, "save point reached, saving");
        }
        if let Some(run) = SaveRun::snapshot(&worker) {
            cut_and_finish(&worker, run).await;
        }
    }
}

impl Connection {
    /// SAVE (`wait`: reply once the snapshot is on disk) or BGSAVE [SCHEDULE].
    pub(crate) async fn save_cmd(&mut self, args: &Args<'_>, wait: bool) {
        let schedule = args.len() == 2 && args.is(1, "schedule");
        if !wait && args.len() > 1 && !schedule {
            return self.reply_error(damselfly_commands::errors::SYNTAX);
        }
        // Inside EXEC Redis defers a BGSAVE and says so; here the cut is taken at once, in
        // the transaction, and the reply is Redis's.
        let in_exec = self.tx.is_some();
        let cluster = self.worker.cluster.clone();
        if cluster.rewrites.state().running.is_some() {
            // Redis's replies while its AOF rewrite child runs.
            if schedule {
                cluster.save_scheduled.store(true, Ordering::SeqCst);
                return self.out.simple("Background saving scheduled");
            }
            return self.reply_error(if wait {
                "ERR Background save already in progress"
            } else {
                "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible."
            });
        }
        let Some(save) = SaveRun::snapshot(&self.worker) else {
            return self.reply_error("ERR Background save already in progress");
        };
        let spec = lookup(if wait { b"save" } else { b"bgsave" }).unwrap_or(0);
        let results = self.all_shard_hops(spec, args, save.parts()).await;
        let Some(done) = save.finish(results) else {
            cluster.saves.end(false, 0);
            return self.reply_error("ERR");
        };
        if wait {
            match done.await {
                Ok(true) => self.out.ok(),
                _ => self.reply_error("ERR"),
            }
        } else if in_exec {
            self.out.simple("Background saving scheduled");
        } else {
            self.out.simple("Background saving started");
        }
    }

    /// CONFIG SET appendonly: `yes` starts a rewrite whose cut opens every shard's journal
    /// (the journal is durable from the moment its manifest names the base, as Redis's AOF
    /// is from the end of its first rewrite); `no` stops every shard's journal.
    pub(crate) async fn switch_journal(&mut self, on: bool) {
        let cluster = self.worker.cluster.clone();
        if on {
            if cluster.saves.state().running.is_some() || cluster.rewrites.state().running.is_some()
            {
                cluster.rewrite_scheduled.store(true, Ordering::SeqCst);
                return;
            }
            if let Some(run) = SaveRun::rewrite(&self.worker) {
                self.flush_remote().await;
                cut_and_finish(&self.worker, run).await;
            }
        } else {
            self.flush_remote().await;
            let parts = (0..self.worker.num_shards())
                .map(|shard| {
                    let work: ShardWork<()> = Box::new(|w: &Worker| w.stop_journal());
                    (shard, work)
                })
                .collect();
            over_every_shard(&self.worker, parts).await;
            if let Ok(mut files) = cluster.journal_files.lock() {
                *files = None;
            }
        }
    }

    /// BGREWRITEAOF: a new base for the journal, taken at a cut across every shard, after
    /// which the journal's earlier segments are deleted (docs/persistence.md, "Rewrites").
    pub(crate) async fn bgrewriteaof_cmd(&mut self, args: &Args<'_>) {
        let cluster = self.worker.cluster.clone();
        if cluster.rewrites.state().running.is_some() {
            return self
                .reply_error("ERR Background append only file rewriting already in progress");
        }
        if cluster.saves.state().running.is_some() || self.tx.is_some() {
            cluster.rewrite_scheduled.store(true, Ordering::SeqCst);
            return self
                .out
                .simple("Background append only file rewriting scheduled");
        }
        let Some(run) = SaveRun::rewrite(&self.worker) else {
            cluster.rewrite_scheduled.store(true, Ordering::SeqCst);
            return self
                .out
                .simple("Background append only file rewriting scheduled");
        };
        let spec = lookup(b"bgrewriteaof").unwrap_or(0);
        let results = self.all_shard_hops(spec, args, run.parts()).await;
        if run.finish(results).is_none() {
            cluster.rewrites.end(false, 0);
            return self.reply_error("ERR Can't execute an AOF background rewriting. Please check the server logs for more information.");
        }
        self.out
            .simple("Background append only file rewriting started");
    }

    /// LASTSAVE: Unix time of the last successful save (the start time before any).
    pub(crate) fn lastsave_cmd(&mut self) {
        let at = self.worker.cluster.saves.state().last_save_unix;
        self.out.int(i64::try_from(at).unwrap_or(i64::MAX));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(n: u64) -> Duration {
        Duration::from_micros(n)
    }

    /// Pauses after steps of `step` us of CPU each, with `commands[i]` commands run by the
    /// shard before step `i`.
    fn pauses(commands: &[u64], step: u64) -> Vec<Option<Duration>> {
        let mut pace = WalkPace::default();
        let (mut cpu, mut executed) = (us(1000), 0);
        let now = Instant::now();
        commands
            .iter()
            .map(|&n| {
                executed += n;
                let started = cpu;
                pace.start(executed);
                cpu += us(step);
                pace.end(started, cpu, executed, now, true)
                    .map(|at| at - now)
            })
            .collect()
    }

    #[test]
    fn an_idle_shard_walks_without_pauses() {
        assert_eq!(pauses(&[0, 0, 0, 0], 250), vec![None; 4]);
    }

    /// After the shard ran commands, the walk pauses `PAUSE_PER_STEP` times its step's CPU
    /// time; once it is idle again it goes on at once.
    #[test]
    fn busy_shards_pause_the_walk() {
        let pause = Some(us(200) * PAUSE_PER_STEP);
        assert_eq!(
            pauses(&[5, 300, 1, 0, 2000], 200),
            vec![None, pause, pause, None, pause]
        );
    }

    #[test]
    fn a_new_walk_starts_without_a_pause() {
        let mut pace = WalkPace::default();
        let now = Instant::now();
        pace.start(0);
        assert_eq!(pace.end(us(0), us(100), 0, now, true), None);
        pace.start(3);
        assert!(pace.end(us(500), us(600), 3, now, true).is_some());
        assert_eq!(pace.resume_at, Some(now + us(100) * PAUSE_PER_STEP));
        // The walk ends: nothing more is due, and the next walk starts afresh.
        pace.start(9);
        assert_eq!(pace.end(us(700), us(800), 9, now, false), None);
        assert_eq!(pace.resume_at, None);
        pace.start(20);
        assert_eq!(pace.end(us(5000), us(5100), 20, now, true), None);
    }
}
