//! Writing a shard's journal. The shard's thread encodes records into a buffer (no system
//! call per command) and hands the buffer to a writer thread of the shard's own, which puts
//! buffers into the current segment file and syncs it as `appendfsync` says:
//!
//! - `always`: the shard's thread writes and syncs its records itself once per turn of its
//!   event loop (`sync_here`), or, where its event loop has no turn end to wait for, hands
//!   the buffer over at the end of each unit of work; the writer takes it and every buffer
//!   queued behind it, then one `fdatasync` for all of them (group commit); the durable LSN
//!   then covers them and the shard is told, so it can release the replies that waited;
//! - `everysec`: handed over at most every `HANDOVER_INTERVAL` (or once `HANDOVER_BYTES`
//!   wait), written at once, `fdatasync` about once a second;
//! - `no`: handed over as under `everysec`, written, and flushing left to the kernel.
//!
//! Replies wait for nothing under `everysec` and `no`, so nothing is gained by handing each
//! unit of work over on its own, and each handover may wake the writer thread: done after
//! every message a shard handled, that cost a fifth of the SET throughput of 50 clients on
//! two threads (docs/benchmarks.md, "Journal against Redis's AOF").
//!
//! Under `always` the writer extends the segment with zeros ahead of its records
//! (`PREALLOCATE` at a time) and writes records over them: a record that does not change the
//! file's size lets `fdatasync` skip the file system's metadata commit, which took a third of
//! each sync's time and CPU on this machine's ext4 (docs/persistence.md, "The fsync
//! contract"). Readers take zeros where a frame would start as the segment's end, and a
//! segment is cut back to its records when the writer leaves it.
//!
//! A failed write (a full disk) keeps the records in memory, cuts the file back to whole
//! records and is tried again about once a second; meanwhile `failure()` says why and the
//! shard refuses writes (MISCONF), and once a write succeeds writes are accepted again. A
//! failed fsync is never retried on the same file (it is not reliably reported twice): the
//! file takes nothing more and writes stay refused until the journal moves to a new file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

use crate::journal::{self, SegmentHeader};

/// `appendfsync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    Always,
    EverySec,
    No,
}

impl FsyncPolicy {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "always" => Some(FsyncPolicy::Always),
            "everysec" => Some(FsyncPolicy::EverySec),
            "no" => Some(FsyncPolicy::No),
            _ => None,
        }
    }
}

/// What the shard and the writer thread share.
struct Shared {
    /// Every record up to this LSN is on disk (synced); under `no`, written to the kernel.
    durable: AtomicU64,
    /// The policy, changeable at run time (CONFIG SET appendfsync).
    policy: Mutex<FsyncPolicy>,
    /// Why writing stopped, once it has.
    failure: Mutex<Option<String>>,
    /// Whether `failure` is set: read on every write command, so it is not behind the lock.
    failed: AtomicBool,
    /// Bytes written to the current segment.
    segment_bytes: AtomicU64,
}

/// Under `everysec` and `no`, records wait in the shard's buffer until this long after the
/// last handover (and the caller's next unit of work, at the latest the thread's tick)...
const HANDOVER_INTERVAL: Duration = Duration::from_millis(1);
/// ...or until this much waits.
const HANDOVER_BYTES: usize = 64 * 1024;

enum Job {
    Write {
        bytes: Vec<u8>,
        last_lsn: u64,
    },
    /// Close the current segment (synced) and continue in a new one.
    Rotate {
        path: PathBuf,
        header: SegmentHeader,
    },
}

/// A shard's side of its journal.
pub struct Appender {
    buf: Vec<u8>,
    next_lsn: u64,
    /// The last LSN handed to the writer.
    handed: u64,
    last_handover: Instant,
    shared: Arc<Shared>,
    jobs: Option<Sender<Job>>,
    /// The jobs queued for the writer, taken in order by whoever holds `segment`.
    queued: Receiver<Job>,
    /// Wakes the writer thread (one token is enough: it takes every queued job).
    wake: Option<Sender<()>>,
    /// The segment and what is written to it: the writer thread's, and the shard thread's
    /// while it syncs in place (`sync_here`).
    segment: Arc<Mutex<Writer>>,
    writer: Option<JoinHandle<()>>,
}

impl Appender {
    /// Opens (creating) the segment at `path` and starts its writer thread. `first_lsn` is
    /// the LSN the next record gets; `synced` is called on the writer thread whenever the
    /// durable LSN moves under `always` (the shard then releases replies that waited).
    pub fn open(
        path: &Path,
        header: SegmentHeader,
        policy: FsyncPolicy,
        synced: Box<dyn Fn() + Send>,
    ) -> std::io::Result<Appender> {
        let file = new_segment(path, header)?;
        let shared = Arc::new(Shared {
            durable: AtomicU64::new(header.first_lsn.saturating_sub(1)),
            policy: Mutex::new(policy),
            failure: Mutex::new(None),
            failed: AtomicBool::new(false),
            segment_bytes: AtomicU64::new(0),
        });
        let (tx, rx) = crossbeam_channel::unbounded();
        let (wake, woken) = crossbeam_channel::bounded(1);
        let segment = Arc::new(Mutex::new(Writer::new(file, shared.clone(), synced)));
        let writer = {
            let (segment, queued) = (segment.clone(), rx.clone());
            std::thread::Builder::new()
                .name(format!("damselfly-journal-{}", header.shard))
                .spawn(move || write_loop(&segment, &queued, &woken))?
        };
        Ok(Appender {
            buf: Vec::new(),
            next_lsn: header.first_lsn,
            handed: header.first_lsn.saturating_sub(1),
            last_handover: Instant::now(),
            shared,
            jobs: Some(tx),
            queued: rx,
            wake: Some(wake),
            segment,
            writer: Some(writer),
        })
    }

    /// Appends a command record; returns its LSN.
    pub fn command<A: AsRef<[u8]>>(&mut self, db: u32, tx: (u64, u32), args: &[A]) -> u64 {
        let lsn = self.next_lsn;
        journal::encode_command(&mut self.buf, lsn, db, tx, args);
        self.next_lsn += 1;
        lsn
    }

    /// Appends the end of this shard's part of transaction `tx`; returns its LSN.
    pub fn tx_done(&mut self, tx: (u64, u32), durable_release: bool) -> u64 {
        let lsn = self.next_lsn;
        journal::encode_tx_done(&mut self.buf, lsn, tx, durable_release);
        self.next_lsn += 1;
        lsn
    }

    /// The LSN of the last record appended (0 before any).
    pub fn last_lsn(&self) -> u64 {
        self.next_lsn - 1
    }

    /// Every record up to this LSN is durable (as the policy defines it).
    pub fn durable_lsn(&self) -> u64 {
        self.shared.durable.load(Ordering::Acquire)
    }

    /// The end of a unit of work: hands the buffered records to the writer thread at once
    /// under `always`, otherwise once a handover is due (see `HANDOVER_INTERVAL`).
    pub fn flush(&mut self) {
        if handover_due(self.buf.len(), self.last_handover.elapsed(), || {
            self.policy()
        }) {
            self.flush_now();
        }
    }

    /// Hands the buffered records to the writer thread.
    pub fn flush_now(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        self.last_handover = Instant::now();
        let bytes = std::mem::take(&mut self.buf);
        let last_lsn = self.last_lsn();
        self.handed = last_lsn;
        self.queue(Job::Write { bytes, last_lsn });
    }

    fn queue(&self, job: Job) {
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(job);
        }
        if let Some(wake) = &self.wake {
            let _ = wake.try_send(());
        }
    }

    /// Whether records wait in the shard's buffer, not handed over or written yet.
    pub fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
    }

    /// Writes and syncs every record made so far on the calling thread, after what was
    /// handed over before them, as Redis writes and syncs its AOF before its event loop
    /// sleeps: under `always`, a shard thread that does this once at the end of its turn
    /// makes every record of the turn durable with one sync and without waking the writer
    /// thread or being woken by it (docs/persistence.md, "The fsync contract"). The durable
    /// LSN has moved when it returns, unless writing failed (see `failed`).
    pub fn sync_here(&mut self) {
        let mut w = self.segment.lock().unwrap_or_else(|e| e.into_inner());
        w.take_jobs(&self.queued);
        if !self.buf.is_empty() {
            w.backlog.extend_from_slice(&self.buf);
            self.buf.clear();
            w.backlog_lsn = self.last_lsn();
            self.handed = w.backlog_lsn;
            self.last_handover = Instant::now();
        }
        w.write_backlog();
        w.sync(false);
    }

    pub fn policy(&self) -> FsyncPolicy {
        *self.shared.policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn set_policy(&self, policy: FsyncPolicy) {
        *self.shared.policy.lock().unwrap_or_else(|e| e.into_inner()) = policy;
    }

    /// Why the journal stopped writing, if it did.
    /// Whether writing stopped (cheap; `failure` says why).
    pub fn failed(&self) -> bool {
        self.shared.failed.load(Ordering::Acquire)
    }

    pub fn failure(&self) -> Option<String> {
        self.shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Bytes in the current segment.
    pub fn segment_bytes(&self) -> u64 {
        self.shared.segment_bytes.load(Ordering::Relaxed)
    }

    /// Continues in a new segment at `path` (the old one is synced and closed first); the
    /// records buffered so far go to the old one.
    pub fn rotate(&mut self, path: &Path, generation: u64, shard: u32, seq: u64) {
        self.flush_now();
        let header = SegmentHeader {
            generation,
            shard,
            seq,
            first_lsn: self.next_lsn,
        };
        self.queue(Job::Rotate {
            path: path.to_path_buf(),
            header,
        });
    }
}

impl Drop for Appender {
    /// Hands over what is buffered and waits for the writer to put it on disk.
    fn drop(&mut self) {
        self.flush_now();
        self.jobs = None;
        self.wake = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Whether `buffered` bytes of records, the last handover `since` ago, go to the writer now.
fn handover_due(buffered: usize, since: Duration, policy: impl Fn() -> FsyncPolicy) -> bool {
    buffered >= HANDOVER_BYTES || since >= HANDOVER_INTERVAL || policy() == FsyncPolicy::Always
}

/// Creates a segment file holding just its header, synced (and its directory, so the file
/// itself survives a crash). Not opened for appending: the writer writes at its own offset,
/// over the zeros it extended the file with.
pub fn new_segment(path: &Path, header: SegmentHeader) -> std::io::Result<File> {
    let mut file = OpenOptions::new().create_new(true).write(true).open(path)?;
    file.write_all(&header.encode())?;
    file.sync_data()?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(file)
}

/// The writer thread: takes the queued jobs whenever woken (or when a sync or a retry is
/// due), writes them and syncs as the policy says. Jobs are taken only while holding the
/// segment, so a shard syncing in place (`Appender::sync_here`) never writes its records
/// ahead of jobs queued before them.
fn write_loop(segment: &Mutex<Writer>, jobs: &Receiver<Job>, woken: &Receiver<()>) {
    let lock = || segment.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let wait = lock().next_wake();
        let shutting_down = matches!(
            woken.recv_timeout(wait),
            Err(RecvTimeoutError::Disconnected)
        );
        let mut w = lock();
        // Group commit: every job queued by now goes out together.
        w.take_jobs(jobs);
        if shutting_down {
            // What was handed over is written and synced first.
            w.write_backlog();
            w.sync(true);
            w.cut_zeros();
            return;
        }
        let policy = w.policy();
        w.write_backlog();
        let due = match policy {
            FsyncPolicy::Always => true,
            FsyncPolicy::EverySec => w.last_sync.elapsed() >= Duration::from_secs(1),
            FsyncPolicy::No => {
                // Handed to the kernel is as durable as `no` promises.
                if let Some(lsn) = w.unsynced.take() {
                    w.shared.durable.store(lsn, Ordering::Release);
                }
                false
            }
        };
        if due {
            w.sync(true);
        }
    }
}

/// How often a write that failed (a full disk) is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// How far ahead of its records the writer zero-fills a segment under `always`: each
/// extension costs one metadata commit at the next sync and writes this much more to disk.
/// 256 KB kept the slowest sync under 1 ms on this machine, where 4 MB took 27 ms.
const PREALLOCATE: u64 = 256 << 10;

/// Zeros to extend a segment with, a piece at a time.
static ZEROS: [u8; 64 << 10] = [0; 64 << 10];

/// A segment and what is written to it: the writer thread's state.
struct Writer {
    file: File,
    shared: Arc<Shared>,
    synced: Box<dyn Fn() + Send>,
    /// The segment's length after the last buffer written whole: where the next one goes.
    good_len: u64,
    /// The file's length: the bytes from `good_len` to here are zeros written ahead.
    zeroed_end: u64,
    /// Records handed over and not yet written: a write that fails (ENOSPC, EFBIG) leaves
    /// them here, the file cut back to `good_len`, to be tried again.
    backlog: Vec<u8>,
    backlog_lsn: u64,
    /// The last LSN written and not yet synced.
    unsynced: Option<u64>,
    last_sync: Instant,
    /// A sync failed: what the kernel had may be lost, and a failed fsync is not reliably
    /// reported twice, so nothing more goes into this file.
    broken: bool,
}

impl Writer {
    fn new(file: File, shared: Arc<Shared>, synced: Box<dyn Fn() + Send>) -> Self {
        let good_len = file.metadata().map_or(0, |m| m.len());
        Writer {
            file,
            shared,
            synced,
            good_len,
            zeroed_end: good_len,
            backlog: Vec::new(),
            backlog_lsn: 0,
            unsynced: None,
            last_sync: Instant::now(),
            broken: false,
        }
    }

    /// How long the writer thread may sleep when no job comes.
    fn next_wake(&self) -> Duration {
        if !self.backlog.is_empty() && !self.broken {
            // A write failed (a full disk): try again about once a second.
            return RETRY;
        }
        match (self.policy(), self.unsynced) {
            (FsyncPolicy::EverySec, Some(_)) => {
                Duration::from_secs(1).saturating_sub(self.last_sync.elapsed())
            }
            _ => Duration::from_secs(3600),
        }
    }

    /// Takes every queued job, in order.
    fn take_jobs(&mut self, jobs: &Receiver<Job>) {
        for job in jobs.try_iter() {
            match job {
                Job::Write { bytes, last_lsn } => {
                    self.backlog.extend_from_slice(&bytes);
                    self.backlog_lsn = last_lsn;
                }
                Job::Rotate { path, header } => self.rotate(&path, header),
            }
        }
    }

    fn policy(&self) -> FsyncPolicy {
        *self.shared.policy.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records why writing stopped, and tells the shard (refusing writes, or under `always`
    /// ending the process).
    fn fail(&self, why: String) {
        let mut f = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            tracing::error!("journal: {why}; writes are refused until the journal can write");
        }
        *f = Some(why);
        self.shared.failed.store(true, Ordering::Release);
        drop(f);
        (self.synced)();
    }

    fn recovered(&self) {
        let mut f = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if f.take().is_some() {
            tracing::warn!("journal: writing again, writes are accepted");
        }
        self.shared.failed.store(false, Ordering::Release);
    }

    fn write_backlog(&mut self) {
        if self.broken || self.backlog.is_empty() {
            return;
        }
        let end = self.good_len + self.backlog.len() as u64;
        if end > self.zeroed_end && self.policy() == FsyncPolicy::Always {
            self.zero_fill(end + PREALLOCATE);
        }
        match self.file.write_all_at(&self.backlog, self.good_len) {
            Ok(()) => {
                let n = self.backlog.len() as u64;
                self.good_len += n;
                self.shared.segment_bytes.fetch_add(n, Ordering::Relaxed);
                self.unsynced = Some(self.backlog_lsn);
                self.backlog.clear();
                self.recovered();
            }
            Err(e) => {
                // Cut off whatever part of the buffer did get in, so the segment stays whole
                // records only; the buffer is written again later.
                if let Err(cut) = self.file.set_len(self.good_len) {
                    self.broken = true;
                    self.fail(format!(
                        "write failed ({e}) and the file cannot be cut back ({cut})"
                    ));
                } else {
                    self.zeroed_end = self.good_len;
                    self.fail(format!("write failed: {e}"));
                }
            }
        }
    }

    /// Extends the file with zeros up to `to`. A failure (a full disk) only means the records
    /// extend the file themselves: what did get in is cut off again.
    fn zero_fill(&mut self, to: u64) {
        let mut at = self.zeroed_end.max(self.good_len);
        while at < to {
            let n = (to - at).min(ZEROS.len() as u64) as usize;
            if let Err(e) = self.file.write_all_at(&ZEROS[..n], at) {
                tracing::debug!("journal: cannot zero-fill ahead ({e})");
                let _ = self.file.set_len(self.good_len);
                self.zeroed_end = self.good_len;
                return;
            }
            at += n as u64;
        }
        self.zeroed_end = to;
    }

    /// Cuts the zeros written ahead off the segment, leaving its records.
    fn cut_zeros(&mut self) {
        if self.zeroed_end > self.good_len && self.file.set_len(self.good_len).is_ok() {
            self.zeroed_end = self.good_len;
        }
    }

    /// Syncs what was written. Under `always` the shard is told (`notify`) whatever asked for
    /// the sync (a rotation's sync makes records durable too, and replies may wait for them),
    /// unless the shard's own thread synced.
    fn sync(&mut self, notify: bool) {
        let Some(lsn) = self.unsynced else {
            return;
        };
        if self.broken {
            return;
        }
        match self.file.sync_data() {
            Ok(()) => {
                self.shared.durable.store(lsn, Ordering::Release);
                self.unsynced = None;
                self.last_sync = Instant::now();
                if notify && self.policy() == FsyncPolicy::Always {
                    (self.synced)();
                }
            }
            Err(e) => {
                self.broken = true;
                self.fail(format!("fsync failed: {e}"));
            }
        }
    }

    /// Closes the segment (written and synced) and continues in a new one; on any failure
    /// the current one stays.
    fn rotate(&mut self, path: &Path, header: SegmentHeader) {
        self.write_backlog();
        if !self.backlog.is_empty() || self.broken {
            return;
        }
        self.sync(true);
        match new_segment(path, header) {
            Ok(f) => {
                self.cut_zeros();
                self.file = f;
                self.good_len = self.file.metadata().map_or(0, |m| m.len());
                self.zeroed_end = self.good_len;
                self.shared.segment_bytes.store(0, Ordering::Relaxed);
            }
            Err(e) => self.fail(format!("cannot create {}: {e}", path.display())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{Entry, SegmentReader};
    use std::sync::atomic::AtomicUsize;

    /// A command record: its LSN and words.
    type Logged = (u64, Vec<Vec<u8>>);

    fn read(path: &Path) -> (SegmentHeader, Vec<Logged>) {
        let bytes = std::fs::read(path).unwrap();
        let mut r = SegmentReader::new(&bytes).unwrap();
        let mut out = Vec::new();
        while let Some(rec) = r.next().unwrap() {
            if let Entry::Command(args) = rec.entry {
                out.push((rec.lsn, args.iter().map(|a| a.to_vec()).collect()));
            }
        }
        (r.header(), out)
    }

    /// An appender whose calls to tell the shard are counted.
    fn counted(
        path: &Path,
        policy: FsyncPolicy,
        header: SegmentHeader,
    ) -> (Appender, Arc<AtomicUsize>) {
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let notify = Box::new(move || {
            seen.fetch_add(1, Ordering::SeqCst);
        });
        (Appender::open(path, header, policy, notify).unwrap(), calls)
    }

    #[test]
    fn always_syncs_each_flush_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.0.1.journal");
        let header = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 1,
            first_lsn: 10,
        };
        let (mut a, calls) = counted(&path, FsyncPolicy::Always, header);
        assert_eq!(a.durable_lsn(), 9);
        assert_eq!(a.command(0, (0, 0), &[&b"SET"[..], b"k", b"v"]), 10);
        assert_eq!(a.command(1, (0, 0), &[&b"DEL"[..], b"k"]), 11);
        a.flush();
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.durable_lsn() < 11 {
            assert!(Instant::now() < deadline, "never synced");
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(calls.load(Ordering::SeqCst) >= 1);
        // The segment was zero-filled ahead of its records, and reads as just those records.
        let records_end = header.encode().len() as u64 + a.segment_bytes();
        let len = |p: &Path| std::fs::metadata(p).unwrap().len();
        assert!(len(&path) >= records_end + PREALLOCATE);
        assert_eq!(read(&path).1.len(), 2);
        // Rotation: the next records go to a new segment that starts at their LSN, and the
        // old one is cut back to its records.
        let next = dir.path().join("a.0.2.journal");
        a.rotate(&next, 1, 0, 2);
        a.command(0, (0, 0), &[&b"INCR"[..], b"n"]);
        drop(a);
        assert_eq!(len(&path), records_end);
        let (h1, r1) = read(&path);
        assert_eq!(h1, header);
        assert_eq!(
            r1,
            vec![
                (10, vec![b"SET".to_vec(), b"k".to_vec(), b"v".to_vec()]),
                (11, vec![b"DEL".to_vec(), b"k".to_vec()])
            ]
        );
        let (h2, r2) = read(&next);
        assert_eq!((h2.seq, h2.first_lsn), (2, 12));
        assert_eq!(r2, vec![(12, vec![b"INCR".to_vec(), b"n".to_vec()])]);
    }

    /// A shard syncing in place writes its records after the jobs it queued before them
    /// (here a record and a rotation), wherever the writer thread got to, and the durable
    /// LSN has moved when it returns, without the callback that tells the shard.
    #[test]
    fn sync_here_follows_what_was_queued_and_is_durable_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("h.0.1.journal");
        let header = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 1,
            first_lsn: 1,
        };
        let (mut a, calls) = counted(&first, FsyncPolicy::EverySec, header);
        a.command(0, (0, 0), &[&b"SET"[..], b"a", b"1"]);
        a.flush_now();
        let second = dir.path().join("h.0.2.journal");
        a.rotate(&second, 1, 0, 2);
        a.command(0, (0, 0), &[&b"SET"[..], b"b", b"2"]);
        a.set_policy(FsyncPolicy::Always);
        a.sync_here();
        assert_eq!(a.durable_lsn(), 2);
        assert!(!a.has_buffered());
        // (The rotation's sync may have told the shard; a record's sync in place does not.)
        let told = calls.load(Ordering::SeqCst);
        a.command(0, (0, 0), &[&b"SET"[..], b"c", b"3"]);
        assert!(a.has_buffered());
        a.sync_here();
        assert_eq!(a.durable_lsn(), 3);
        assert_eq!(calls.load(Ordering::SeqCst), told);
        drop(a);
        let keys = |p: &Path| -> Vec<Vec<u8>> {
            read(p).1.into_iter().map(|(_, w)| w[1].clone()).collect()
        };
        assert_eq!(keys(&first), vec![b"a".to_vec()]);
        assert_eq!(keys(&second), vec![b"b".to_vec(), b"c".to_vec()]);
    }

    #[test]
    fn records_wait_for_a_handover_only_where_replies_do_not() {
        let soon = HANDOVER_INTERVAL / 2;
        for policy in [FsyncPolicy::EverySec, FsyncPolicy::No] {
            assert!(!handover_due(100, soon, || policy));
            assert!(handover_due(100, HANDOVER_INTERVAL, || policy));
            assert!(handover_due(HANDOVER_BYTES, soon, || policy));
        }
        assert!(handover_due(100, Duration::ZERO, || FsyncPolicy::Always));
    }

    /// Under `no` a record is written once handed over; `flush_now` hands over at once and
    /// the records buffered behind a deferred flush are not lost.
    #[test]
    fn deferred_records_are_written_by_the_next_handover() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.0.1.journal");
        let header = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 1,
            first_lsn: 1,
        };
        let mut a = Appender::open(&path, header, FsyncPolicy::No, Box::new(|| {})).unwrap();
        a.command(0, (0, 0), &[&b"SET"[..], b"a", b"1"]);
        a.flush();
        a.command(0, (0, 0), &[&b"SET"[..], b"b", b"2"]);
        a.flush_now();
        let deadline = Instant::now() + Duration::from_secs(10);
        while a.durable_lsn() < 2 {
            assert!(Instant::now() < deadline, "never written");
            std::thread::sleep(Duration::from_millis(1));
        }
        let (_, records) = read(&path);
        assert_eq!(records.iter().map(|r| r.0).collect::<Vec<_>>(), vec![1, 2]);
    }

    #[test]
    fn a_segment_name_taken_is_refused_not_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.journal");
        std::fs::write(&path, b"precious").unwrap();
        let header = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 1,
            first_lsn: 1,
        };
        assert!(Appender::open(&path, header, FsyncPolicy::No, Box::new(|| {})).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    }
}
