//! The manifest: the one file that says which generation of persistence files is current
//! (docs/persistence.md, "Files"). A generation is the set of files one run of the server
//! writes after recovery: per shard, its journal segments. Files of any other generation
//! are leftovers (an earlier run, perhaps with another thread count, or a rewrite a crash
//! interrupted) and are never read; they are deleted once a newer generation is named.
//!
//! The manifest is replaced atomically: written to a temporary file, synced, renamed over
//! the old one, and the directory synced, so a crash leaves either the old or the new one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::journal::segment_name;

/// The manifest's file name inside the persistence directory.
pub const MANIFEST: &str = "damselfly.manifest";
const FORMAT: &str = "damselfly-manifest 1";

/// What the manifest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    pub generation: u64,
    /// How many shards wrote this generation (one journal each).
    pub shards: u32,
}

impl Manifest {
    /// The manifest in `dir`; Ok(None) when there is none (a first start).
    pub fn read(dir: &Path) -> Result<Option<Manifest>, String> {
        let path = dir.join(MANIFEST);
        let text = match fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        let bad = |why: &str| format!("{} is not a valid manifest: {why}", path.display());
        let mut lines = text.lines();
        if lines.next() != Some(FORMAT) {
            return Err(bad("unknown format line"));
        }
        let (mut generation, mut shards) = (None, None);
        for line in lines {
            match line.split_once(' ') {
                Some(("generation", v)) => generation = v.parse().ok(),
                Some(("shards", v)) => shards = v.parse().ok(),
                _ => return Err(bad(&format!("unexpected line {line:?}"))),
            }
        }
        match (generation, shards) {
            (Some(generation), Some(shards)) if shards > 0 => {
                Ok(Some(Manifest { generation, shards }))
            }
            _ => Err(bad("generation or shards missing")),
        }
    }

    /// Names this generation as the current one, durably.
    pub fn write(&self, dir: &Path) -> std::io::Result<()> {
        let tmp = dir.join(format!("{MANIFEST}.tmp"));
        let mut f = File::create(&tmp)?;
        writeln!(f, "{FORMAT}")?;
        writeln!(f, "generation {}", self.generation)?;
        writeln!(f, "shards {}", self.shards)?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(MANIFEST))?;
        File::open(dir)?.sync_all()
    }

    /// The prefix of this generation's file names.
    pub fn prefix(generation: u64) -> String {
        format!("damselfly-g{generation}")
    }

    /// The path of a journal segment of this generation.
    pub fn segment_path(&self, dir: &Path, shard: u32, seq: u64) -> PathBuf {
        dir.join(segment_name(&Self::prefix(self.generation), shard, seq))
    }

    /// This generation's journal segments of `shard`, ordered by sequence number.
    pub fn segments(&self, dir: &Path, shard: u32) -> std::io::Result<Vec<PathBuf>> {
        let prefix = format!("{}.{shard}.", Self::prefix(self.generation));
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let seq = name
                .strip_prefix(&prefix)
                .and_then(|rest| rest.strip_suffix(".journal"))
                .and_then(|seq| seq.parse::<u64>().ok());
            if let Some(seq) = seq {
                found.push((seq, path));
            }
        }
        found.sort();
        Ok(found.into_iter().map(|(_, p)| p).collect())
    }

    /// Deletes the files of every other generation (after this one is named durably).
    pub fn remove_other_generations(&self, dir: &Path) -> std::io::Result<usize> {
        let ours = format!("{}.", Self::prefix(self.generation));
        let mut removed = 0;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if name.starts_with("damselfly-g") && !name.starts_with(&ours) {
                fs::remove_file(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), None);
        let m = Manifest {
            generation: 7,
            shards: 3,
        };
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), Some(m));
        fs::write(dir.path().join(MANIFEST), "something else\n").unwrap();
        assert!(Manifest::read(dir.path()).is_err());
    }

    #[test]
    fn segments_of_one_generation_in_order_and_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest {
            generation: 2,
            shards: 2,
        };
        let old = Manifest {
            generation: 1,
            shards: 4,
        };
        for p in [
            m.segment_path(dir.path(), 0, 10),
            m.segment_path(dir.path(), 0, 9),
            m.segment_path(dir.path(), 1, 0),
            old.segment_path(dir.path(), 0, 0),
            dir.path().join("unrelated"),
        ] {
            fs::write(p, b"x").unwrap();
        }
        let names = |v: Vec<PathBuf>| -> Vec<String> {
            v.iter()
                .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            names(m.segments(dir.path(), 0).unwrap()),
            ["damselfly-g2.0.9.journal", "damselfly-g2.0.10.journal"]
        );
        assert_eq!(m.remove_other_generations(dir.path()).unwrap(), 1);
        assert!(dir.path().join("unrelated").exists());
        assert_eq!(
            names(old.segments(dir.path(), 0).unwrap()),
            Vec::<String>::new()
        );
    }
}
