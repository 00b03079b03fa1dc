//! `damselfly export-rdb [--dir DIR] OUT`: writes the current snapshot (one RDB file per shard,
//! named by the snapshot manifest in DIR, default `.`) as one RDB file that redis-server 7.0
//! loads: the way back from Damselfly to Redis (docs/persistence.md, "Migration").

use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

use damselfly_persistence::rdb::{Event, RdbReader, RdbWriter, WriteOptions};
use damselfly_persistence::snapshot::{sync_dir, SnapshotManifest};
use damselfly_storage::EncodingLimits;

const USAGE: &str = "usage: damselfly export-rdb [--dir DIR] OUT";

/// Runs `export-rdb` when `args` name it; None otherwise.
pub fn run(args: &[String]) -> Option<ExitCode> {
    let (name, rest) = args.split_first()?;
    if name != "export-rdb" {
        return None;
    }
    let (dir, out) = match rest {
        [flag, dir, out] if flag == "--dir" => (PathBuf::from(dir), PathBuf::from(out)),
        [out] => (PathBuf::from("."), PathBuf::from(out)),
        _ => {
            eprintln!("{USAGE}");
            return Some(ExitCode::from(2));
        }
    };
    Some(match export(&dir, &out) {
        Ok(keys) => {
            println!(
                "{}: {keys} keys, from the snapshot in {}",
                out.display(),
                dir.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    })
}

/// Copies every key (and function library) of every shard file into `out` (written to a temporary file, synced and
/// renamed). Returns the number of keys.
fn export(dir: &Path, out: &Path) -> Result<u64, String> {
    let manifest = SnapshotManifest::read(dir)?.ok_or_else(|| {
        format!(
            "{} holds no Damselfly snapshot (run SAVE first)",
            dir.display()
        )
    })?;
    let tmp = out.with_extension("tmp-export");
    let file = File::create(&tmp).map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let ctime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0));
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", tmp.display());
    let mut writer = RdbWriter::new(
        BufWriter::new(file),
        &WriteOptions::default(),
        ctime,
        0,
        false,
    )
    .map_err(fail)?;
    let mut keys = 0u64;
    let mut current_db = None;
    for path in manifest.paths(dir) {
        let name = path.display().to_string();
        let f = File::open(&path).map_err(|e| format!("cannot open {name}: {e}"))?;
        // Values are decoded with Redis's default limits, so the encodings written are the
        // ones redis-server would choose.
        let mut reader = RdbReader::new(BufReader::new(f), EncodingLimits::default())
            .map_err(|e| format!("{name}: {e}"))?;
        while let Some(event) = reader.next().map_err(|e| format!("{name}: {e}"))? {
            match event {
                // Only the first shard's file holds libraries, before its keys: they land
                // before every database, where Redis expects them.
                Event::Function { code } => writer.write_function(&code).map_err(fail)?,
                Event::Entry(e) => {
                    if current_db != Some(e.db) {
                        writer.switch_db(e.db).map_err(fail)?;
                        current_db = Some(e.db);
                    }
                    writer
                        .write_entry(&e.key, e.value.as_ref(), e.expire_ms)
                        .map_err(fail)?;
                    keys += 1;
                }
                _ => {}
            }
        }
    }
    let file = writer
        .finish()
        .map_err(fail)?
        .into_inner()
        .map_err(|e| fail(e.into_error()))?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, out).map_err(|e| format!("cannot rename to {}: {e}", out.display()))?;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        sync_dir(parent).map_err(|e| format!("cannot sync {}: {e}", parent.display()))?;
    }
    Ok(keys)
}
