//! Writing a shard's journal. The shard's thread encodes records into a buffer (no system
//! call per command) and hands the buffer over once per unit of work; a writer thread of the
//! shard's own puts buffers into the current segment file and syncs it as `appendfsync` says:
//!
//! - `always`: every buffer it takes, and every buffer queued behind it, then one
//!   `fdatasync` for all of them (group commit); the durable LSN then covers them and the
//!   shard is told, so it can release the replies that waited for it;
//! - `everysec`: writes at once, `fdatasync` about once a second;
//! - `no`: writes, and leaves flushing to the kernel.
//!
//! A failed write or sync is never retried on the same file (a failed fsync is not reliably
//! reported twice): the appender stops, `failure()` says why, and the shard refuses writes
//! (MISCONF) until a new segment is opened by a successful snapshot.

use std::fs::{File, OpenOptions};
use std::io::Write;
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
    shared: Arc<Shared>,
    jobs: Option<Sender<Job>>,
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
        let writer = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name(format!("damselfly-journal-{}", header.shard))
                .spawn(move || write_loop(file, rx, shared, synced))?
        };
        Ok(Appender {
            buf: Vec::new(),
            next_lsn: header.first_lsn,
            handed: header.first_lsn.saturating_sub(1),
            shared,
            jobs: Some(tx),
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

    /// Hands the buffered records to the writer thread.
    pub fn flush(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let bytes = std::mem::take(&mut self.buf);
        let last_lsn = self.last_lsn();
        self.handed = last_lsn;
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Write { bytes, last_lsn });
        }
    }

    /// True when records were appended since the last flush.
    pub fn has_buffered(&self) -> bool {
        !self.buf.is_empty()
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
        self.flush();
        let header = SegmentHeader {
            generation,
            shard,
            seq,
            first_lsn: self.next_lsn,
        };
        if let Some(jobs) = &self.jobs {
            let _ = jobs.send(Job::Rotate {
                path: path.to_path_buf(),
                header,
            });
        }
    }
}

impl Drop for Appender {
    /// Hands over what is buffered and waits for the writer to put it on disk.
    fn drop(&mut self) {
        self.flush();
        self.jobs = None;
        if let Some(w) = self.writer.take() {
            let _ = w.join();
        }
    }
}

/// Creates a segment file holding just its header, synced (and its directory, so the file
/// itself survives a crash).
pub fn new_segment(path: &Path, header: SegmentHeader) -> std::io::Result<File> {
    let mut file = OpenOptions::new()
        .create_new(true)
        .append(true)
        .open(path)?;
    file.write_all(&header.encode())?;
    file.sync_data()?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(file)
}

fn write_loop(
    mut file: File,
    jobs: Receiver<Job>,
    shared: Arc<Shared>,
    synced: Box<dyn Fn() + Send>,
) {
    let mut last_sync = Instant::now();
    let mut unsynced: Option<u64> = None;
    let fail = |why: String| {
        let mut f = shared.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            tracing::error!("journal: {why}; writes are refused until a snapshot succeeds");
            *f = Some(why);
            shared.failed.store(true, Ordering::Release);
        }
        drop(f);
        // Whoever waits for durability must learn it will not come.
        synced();
    };
    loop {
        let policy = *shared.policy.lock().unwrap_or_else(|e| e.into_inner());
        let wait = match (policy, unsynced) {
            (FsyncPolicy::EverySec, Some(_)) => {
                Duration::from_secs(1).saturating_sub(last_sync.elapsed())
            }
            _ => Duration::from_secs(3600),
        };
        let first = match jobs.recv_timeout(wait) {
            Ok(job) => Some(job),
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                // Shutting down: what was written is synced before the thread ends.
                if let Some(lsn) = unsynced {
                    if file.sync_data().is_ok() {
                        shared.durable.store(lsn, Ordering::Release);
                    }
                }
                return;
            }
        };
        // Group commit: everything queued behind the first job goes out with it.
        let mut written = None;
        for job in first.into_iter().chain(jobs.try_iter()) {
            if shared
                .failure
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .is_some()
            {
                continue;
            }
            match job {
                Job::Write { bytes, last_lsn } => match file.write_all(&bytes) {
                    Ok(()) => {
                        shared
                            .segment_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        written = Some(last_lsn);
                    }
                    Err(e) => fail(format!("write failed: {e}")),
                },
                Job::Rotate { path, header } => {
                    if let Err(e) = file.sync_data() {
                        fail(format!("fsync failed: {e}"));
                        continue;
                    }
                    if let Some(lsn) = written.take().or(unsynced.take()) {
                        shared.durable.store(lsn, Ordering::Release);
                    }
                    match new_segment(&path, header) {
                        Ok(f) => {
                            file = f;
                            shared.segment_bytes.store(0, Ordering::Relaxed);
                        }
                        Err(e) => fail(format!("cannot create {}: {e}", path.display())),
                    }
                }
            }
        }
        if let Some(lsn) = written {
            unsynced = Some(lsn);
        }
        let Some(lsn) = unsynced else {
            continue;
        };
        let due = match policy {
            FsyncPolicy::Always => true,
            FsyncPolicy::EverySec => last_sync.elapsed() >= Duration::from_secs(1),
            FsyncPolicy::No => {
                // Handed to the kernel is as durable as `no` promises.
                shared.durable.store(lsn, Ordering::Release);
                unsynced = None;
                false
            }
        };
        if due {
            match file.sync_data() {
                Ok(()) => {
                    shared.durable.store(lsn, Ordering::Release);
                    unsynced = None;
                    last_sync = Instant::now();
                    if policy == FsyncPolicy::Always {
                        synced();
                    }
                }
                Err(e) => fail(format!("fsync failed: {e}")),
            }
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

    #[test]
    fn always_syncs_each_flush_and_reports_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.0.1.journal");
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        let header = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 1,
            first_lsn: 10,
        };
        let mut a = Appender::open(
            &path,
            header,
            FsyncPolicy::Always,
            Box::new(move || {
                seen.fetch_add(1, Ordering::SeqCst);
            }),
        )
        .unwrap();
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
        // Rotation: the next records go to a new segment that starts at their LSN.
        let next = dir.path().join("a.0.2.journal");
        a.rotate(&next, 1, 0, 2);
        a.command(0, (0, 0), &[&b"INCR"[..], b"n"]);
        drop(a);
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
