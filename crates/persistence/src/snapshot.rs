//! Snapshot files (docs/persistence.md, "Snapshots"): one RDB stream per shard, written by
//! the shard's forkless snapshot (`damselfly_storage::SnapshotSink`), and the snapshot
//! manifest that names a complete snapshot.
//!
//! A shard's file is written as `damselfly-<id>-<shard>.rdb.tmp`; once every shard's file is
//! complete and synced, each is renamed to `.rdb`, the directory synced, and only then is the
//! manifest replaced (temporary file, fsync, rename, fsync of the directory). Start-up reads
//! the files the manifest names and nothing else, so a file of another snapshot (an
//! interrupted one, or one written by a run with more threads) is never loaded.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use damselfly_storage::{EncodingLimits, Entry, SnapshotSink, Value};

use crate::rdb::{Event, RdbReader, RdbWriter, WriteOptions};

/// The snapshot manifest's file name, in `dir`.
pub const SNAPSHOT_MANIFEST: &str = "damselfly-snapshot.manifest";
const FORMAT: &str = "damselfly-snapshot 1";
/// The AUX field naming the snapshot a shard file belongs to.
pub const SNAPSHOT_ID_AUX: &[u8] = b"damselfly-snapshot-id";
/// The AUX field naming the shard that wrote a file.
pub const SHARD_AUX: &[u8] = b"damselfly-shard";

/// The file name of shard `shard`'s part of snapshot `id`.
pub fn shard_file_name(id: u64, shard: u32) -> String {
    format!("damselfly-{id}-{shard}.rdb")
}

/// The name it has while being written.
pub fn temp_file_name(id: u64, shard: u32) -> String {
    format!("{}.tmp", shard_file_name(id, shard))
}

/// What the snapshot manifest names: the current snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotManifest {
    pub id: u64,
    /// One file per shard of the run that took it, in shard order.
    pub files: Vec<String>,
}

impl SnapshotManifest {
    /// A manifest for snapshot `id` taken by `shards` shards.
    pub fn new(id: u64, shards: u32) -> Self {
        SnapshotManifest {
            id,
            files: (0..shards).map(|s| shard_file_name(id, s)).collect(),
        }
    }

    /// The manifest in `dir`; Ok(None) when there is none.
    pub fn read(dir: &Path) -> Result<Option<SnapshotManifest>, String> {
        let path = dir.join(SNAPSHOT_MANIFEST);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let bad = |why: &str| format!("{} is not a valid snapshot manifest: {why}", path.display());
        let mut lines = text.lines();
        if lines.next() != Some(FORMAT) {
            return Err(bad("unknown format line"));
        }
        let (mut id, mut shards, mut files) = (None, None, Vec::new());
        for line in lines {
            match line.split_once(' ') {
                Some(("id", v)) => id = v.parse::<u64>().ok(),
                Some(("shards", v)) => shards = v.parse::<usize>().ok(),
                Some(("file", v)) => files.push(v.to_string()),
                _ => return Err(bad(&format!("unexpected line {line:?}"))),
            }
        }
        let (Some(id), Some(shards)) = (id, shards) else {
            return Err(bad("id or shards missing"));
        };
        if shards == 0 || files.len() != shards {
            return Err(bad("the file count differs from the shard count"));
        }
        // Names only: a manifest never points outside its directory.
        if files
            .iter()
            .any(|f| f.is_empty() || f.contains('/') || f.starts_with('.'))
        {
            return Err(bad("a file name is not a plain name"));
        }
        Ok(Some(SnapshotManifest { id, files }))
    }

    /// Names this snapshot as the current one, durably.
    pub fn write(&self, dir: &Path) -> io::Result<()> {
        let tmp = dir.join(format!("{SNAPSHOT_MANIFEST}.tmp"));
        let mut f = File::create(&tmp)?;
        let mut text = format!("{FORMAT}\nid {}\nshards {}\n", self.id, self.files.len());
        for name in &self.files {
            text.push_str(&format!("file {name}\n"));
        }
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(SNAPSHOT_MANIFEST))?;
        sync_dir(dir)
    }

    /// The paths of the files it names, in shard order.
    pub fn paths(&self, dir: &Path) -> Vec<PathBuf> {
        self.files.iter().map(|f| dir.join(f)).collect()
    }

    /// Deletes snapshot files in `dir` this manifest does not name (earlier snapshots, and
    /// temporary files of interrupted ones). Returns how many went.
    pub fn remove_others(&self, dir: &Path) -> io::Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if is_snapshot_file(name) && !self.files.iter().any(|f| f == name) {
                fs::remove_file(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// True for names of the form `damselfly-<id>-<shard>.rdb[.tmp]`.
fn is_snapshot_file(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("damselfly-") else {
        return false;
    };
    let rest = rest.strip_suffix(".tmp").unwrap_or(rest);
    let Some(rest) = rest.strip_suffix(".rdb") else {
        return false;
    };
    match rest.split_once('-') {
        Some((id, shard)) => {
            !id.is_empty()
                && !shard.is_empty()
                && id.bytes().all(|b| b.is_ascii_digit())
                && shard.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// Syncs a directory (after files in it were created or renamed).
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Buffers in flight to a snapshot file's writer thread (64 KB each: 64 MB at most).
const WRITES_IN_FLIGHT: usize = 1024;

/// A file written by a thread of its own: the shard thread only hands over buffers, so a
/// slow disk or the kernel's writeback throttling never holds up the clients the shard
/// serves between snapshot steps. Only when the disk falls 64 MB behind does a write wait.
/// After a failed write the rest is dropped and `finish` reports the error.
struct BackgroundFile {
    tx: Option<crossbeam_channel::Sender<Vec<u8>>>,
    writer: Option<std::thread::JoinHandle<io::Result<File>>>,
}

impl BackgroundFile {
    fn create(path: &Path) -> io::Result<Self> {
        let mut file = File::create(path)?;
        let (tx, rx) = crossbeam_channel::bounded::<Vec<u8>>(WRITES_IN_FLIGHT);
        let writer = std::thread::Builder::new()
            .name("damselfly-snapshot-file".into())
            .spawn(move || {
                let mut result = Ok(());
                for buf in rx {
                    if result.is_ok() {
                        result = file.write_all(&buf);
                    }
                }
                result.map(|()| file)
            })?;
        Ok(BackgroundFile {
            tx: Some(tx),
            writer: Some(writer),
        })
    }

    /// Waits for every write; the file, or the first write error.
    fn finish(mut self) -> io::Result<File> {
        self.tx = None;
        match self.writer.take().map(|w| w.join()) {
            Some(Ok(result)) => result,
            _ => Err(io::Error::other("the snapshot file's writer stopped")),
        }
    }
}

impl Write for BackgroundFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let sent = self.tx.as_ref().map(|tx| tx.send(buf.to_vec()));
        match sent {
            Some(Ok(())) => Ok(buf.len()),
            _ => Err(io::Error::other("the snapshot file's writer stopped")),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// One shard's snapshot file: receives the shard's entries (in any order of databases: a
/// write saves its segment first, wherever the walk is) and writes them as one RDB stream.
/// A SELECTDB precedes each run of entries of one database; the first one of a database
/// carries its sizes at the snapshot's start (RESIZEDB), later ones repeat only SELECTDB.
///
/// A write error is kept and reported by `finish`; the entries after it are dropped.
pub struct RdbFileSink {
    writer: Option<RdbWriter<BackgroundFile>>,
    error: Option<io::Error>,
    /// The database of the last entry written.
    current: Option<usize>,
    /// (keys, keys with a deadline) per database at the start; None once announced.
    sizes: Vec<Option<(u64, u64)>>,
    entries: u64,
}

impl RdbFileSink {
    /// Creates `path` (truncating it) and writes the stream's header: Redis's AUX fields,
    /// the snapshot id and the shard, then the function libraries' codes (`functions`: shard
    /// 0 saves them, as a FUNCTION2 record each, where Redis writes them). `sizes` are each
    /// database's (keys, keys with a deadline) at the snapshot's start.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        path: &Path,
        id: u64,
        shard: u32,
        sizes: Vec<(u64, u64)>,
        functions: &[&[u8]],
        opts: &WriteOptions,
        ctime: i64,
        used_mem: u64,
    ) -> io::Result<Self> {
        let file = BackgroundFile::create(path)?;
        let mut writer = RdbWriter::new(file, opts, ctime, used_mem, false)?;
        writer.write_aux(SNAPSHOT_ID_AUX, id.to_string().as_bytes())?;
        writer.write_aux(SHARD_AUX, shard.to_string().as_bytes())?;
        for code in functions {
            writer.write_function(code)?;
        }
        Ok(RdbFileSink {
            writer: Some(writer),
            error: None,
            current: None,
            sizes: sizes.into_iter().map(Some).collect(),
            entries: 0,
        })
    }

    fn write(&mut self, db: usize, e: &Entry) -> io::Result<()> {
        let Some(w) = self.writer.as_mut() else {
            return Ok(());
        };
        if self.current != Some(db) {
            match self.sizes.get_mut(db).and_then(Option::take) {
                Some((keys, expires)) => w.select_db(db as u64, keys, expires)?,
                None => w.switch_db(db as u64)?,
            }
            self.current = Some(db);
        }
        let deadline =
            (e.expire_at() != 0).then(|| i64::try_from(e.expire_at()).unwrap_or(i64::MAX));
        w.write_entry(e.key(), e.value(), deadline)?;
        self.entries += 1;
        Ok(())
    }

    /// Entries written so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }
}

impl SnapshotSink for RdbFileSink {
    fn save(&mut self, db: usize, entry: &Entry) {
        if self.error.is_none() {
            if let Err(e) = self.write(db, entry) {
                self.error = Some(e);
                // Nothing more is written; the file is discarded.
                self.writer = None;
            }
        }
    }

    fn finish(mut self: Box<Self>) -> io::Result<()> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        let Some(w) = self.writer.take() else {
            return Err(io::Error::other("the snapshot file was already finished"));
        };
        let file = w.finish()?.finish()?;
        file.sync_all()
    }
}

/// How RDB files are read: into `databases` databases, values built with `limits`, the
/// trailer checked unless `rdbchecksum` is off.
#[derive(Debug, Clone, Copy)]
pub struct LoadOptions {
    pub databases: usize,
    pub limits: EncodingLimits,
    pub verify_checksum: bool,
}

/// Reads one RDB file, a shard's snapshot file or a Redis `dump.rdb`, handing each key to
/// `each` as (database, key, value, deadline in Unix ms or 0). `expect`: the snapshot id and
/// shard number the file must say it holds (None for a Redis file); a file of another
/// snapshot is refused before any of its keys is handed over. A key in a database past
/// `databases` is an error naming the setting to change. Returns the function libraries'
/// codes the file holds (FUNCTION2 records), in file order.
pub fn read_rdb_file(
    path: &Path,
    expect: Option<(u64, usize)>,
    opts: &LoadOptions,
    mut each: impl FnMut(usize, Vec<u8>, Value, u64) -> Result<(), String>,
) -> Result<Vec<Vec<u8>>, String> {
    let name = path.display();
    let file = File::open(path).map_err(|e| format!("cannot open {name}: {e}"))?;
    let mut reader = RdbReader::new(io::BufReader::with_capacity(1 << 20, file), opts.limits)
        .map_err(|e| format!("cannot load {name}: {e}"))?;
    reader.verify_checksum(opts.verify_checksum);
    let (mut id_seen, mut shard_seen) = (None, None);
    let wrong_file = |id: Option<u64>, shard: Option<usize>| match expect {
        Some((want, index)) if id != Some(want) || shard != Some(index) => Some(format!(
            "{name} does not hold shard {index} of snapshot {want} (it says snapshot {id:?}, \
             shard {shard:?}); move it away to start"
        )),
        _ => None,
    };
    let mut functions = Vec::new();
    while let Some(event) = reader
        .next()
        .map_err(|e| format!("cannot load {name}: {e}"))?
    {
        match event {
            Event::Aux { key, value } if key == SNAPSHOT_ID_AUX => {
                id_seen = String::from_utf8_lossy(&value).parse::<u64>().ok();
            }
            Event::Aux { key, value } if key == SHARD_AUX => {
                shard_seen = String::from_utf8_lossy(&value).parse::<usize>().ok();
            }
            Event::Function { code } => functions.push(code),
            Event::Entry(e) => {
                // The AUX fields come first: a file of another snapshot stops here.
                if let Some(why) = wrong_file(id_seen, shard_seen) {
                    return Err(why);
                }
                let db = usize::try_from(e.db).unwrap_or(usize::MAX);
                if db >= opts.databases {
                    return Err(format!(
                        "{name} has keys in database {db}, but `databases` is {}: start with \
                         at least {} databases",
                        opts.databases,
                        db.saturating_add(1)
                    ));
                }
                // A deadline at or before the epoch has passed: 1 keeps it a deadline.
                let at = e
                    .expire_ms
                    .map_or(0, |ms| u64::try_from(ms).unwrap_or(0).max(1));
                each(db, e.key, e.value, at)?;
            }
            _ => {}
        }
    }
    if let Some(why) = wrong_file(id_seen, shard_seen) {
        return Err(why);
    }
    if reader.empty_keys_skipped() > 0 {
        tracing::warn!(
            file = %name,
            keys = reader.empty_keys_skipped(),
            "empty keys skipped"
        );
    }
    Ok(functions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trip_and_checks() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(SnapshotManifest::read(dir.path()).unwrap(), None);
        let m = SnapshotManifest::new(17, 3);
        m.write(dir.path()).unwrap();
        assert_eq!(SnapshotManifest::read(dir.path()).unwrap(), Some(m.clone()));
        assert_eq!(m.files[2], "damselfly-17-2.rdb");
        for bad in [
            "other\n",
            "damselfly-snapshot 1\nid 1\nshards 2\nfile a\n",
            "damselfly-snapshot 1\nid 1\nshards 1\nfile ../x\n",
            "damselfly-snapshot 1\nshards 1\nfile a\n",
        ] {
            fs::write(dir.path().join(SNAPSHOT_MANIFEST), bad).unwrap();
            assert!(SnapshotManifest::read(dir.path()).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_sink_moving_between_databases_reads_back() {
        use crate::rdb::{Event, RdbReader};
        use damselfly_storage::{EncodingLimits, Value};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(temp_file_name(9, 1));
        let mut sink: Box<dyn SnapshotSink + Send> = Box::new(
            RdbFileSink::create(
                &path,
                9,
                1,
                vec![(2, 1), (1, 0)],
                &[b"#!lua name=lib\nredis.register_function('f', function() return 1 end)"],
                &WriteOptions::default(),
                0,
                0,
            )
            .unwrap(),
        );
        let e = |k: &str, v: i64, at: u64| Entry::new(k.as_bytes(), Value::Int(v), at);
        sink.save(0, &e("a", 1, 0));
        sink.save(1, &e("b", 2, 0));
        sink.save(0, &e("c", 3, 5000));
        sink.finish().unwrap();
        let mut r = RdbReader::new(File::open(&path).unwrap(), EncodingLimits::default()).unwrap();
        let (mut got, mut id, mut selects, mut functions) = (Vec::new(), None, 0, Vec::new());
        while let Some(ev) = r.next().unwrap() {
            match ev {
                // Redis's order: functions before the first database.
                Event::Function { code } if selects == 0 => functions.push(code),
                Event::Entry(en) => got.push((en.db, en.key, en.expire_ms)),
                Event::Aux { key, value } if key == SNAPSHOT_ID_AUX => id = Some(value),
                Event::SelectDb(_) => selects += 1,
                _ => {}
            }
        }
        assert_eq!(id.as_deref(), Some(&b"9"[..]));
        assert_eq!(selects, 3);
        assert_eq!(
            functions,
            [b"#!lua name=lib\nredis.register_function('f', function() return 1 end)".to_vec()]
        );
        assert_eq!(
            got,
            [
                (0, b"a".to_vec(), None),
                (1, b"b".to_vec(), None),
                (0, b"c".to_vec(), Some(5000))
            ]
        );
    }

    #[test]
    fn only_unnamed_snapshot_files_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let m = SnapshotManifest::new(5, 2);
        for name in [
            "damselfly-5-0.rdb",
            "damselfly-5-1.rdb",
            "damselfly-4-0.rdb",
            "damselfly-4-3.rdb",
            "damselfly-6-0.rdb.tmp",
            "dump.rdb",
            "damselfly-x-0.rdb",
            "damselfly.manifest",
        ] {
            fs::write(dir.path().join(name), b"x").unwrap();
        }
        assert_eq!(m.remove_others(dir.path()).unwrap(), 3);
        let mut left: Vec<String> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(
            left,
            [
                "damselfly-5-0.rdb",
                "damselfly-5-1.rdb",
                "damselfly-x-0.rdb",
                "damselfly.manifest",
                "dump.rdb"
            ]
        );
    }
}
