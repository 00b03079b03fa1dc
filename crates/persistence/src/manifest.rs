//! The manifest: the one file that says which persistence files are current (docs/
//! persistence.md, "Files"). It names a **generation** and what makes it up, per shard:
//!
//! - a base: either journal segments (the RESTORE records start-up writes, segment 0 of the
//!   journal) or an RDB file `damselfly-gG.S.base.rdb` (written by BGREWRITEAOF at a cut);
//! - the journal segments that follow it: those of journal generation J with a sequence
//!   number of at least F (`journal J F`). A rewrite starts new segments at its cut and names
//!   them only once its base is complete, so until then the old manifest still covers every
//!   record.
//!
//! Files the manifest does not name (an earlier run, perhaps with another thread count, a
//! rewrite a crash interrupted) are never read; they are deleted once a newer manifest is
//! written. The manifest is replaced atomically: written to a temporary file, synced, renamed
//! over the old one, and the directory synced, so a crash leaves either the old or the new.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::journal::segment_name;

/// The manifest's file name inside the persistence directory.
pub const MANIFEST: &str = "damselfly.manifest";
const FORMAT: &str = "damselfly-manifest 1";

/// What a generation's data starts from, before its journal segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    /// Journal records (segment 0, written at start-up).
    Segments,
    /// One RDB file per shard (`base_path`), written by a rewrite.
    Rdb,
}

/// What the manifest names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    pub generation: u64,
    /// How many shards wrote this generation (one journal each).
    pub shards: u32,
    pub base: Base,
    /// The journal segments: those of this journal generation...
    pub journal_generation: u64,
    /// ...with at least this sequence number.
    pub journal_from: u64,
}

impl Manifest {
    /// A generation written at start-up: its base is segment 0 of its own journal.
    pub fn new(generation: u64, shards: u32) -> Manifest {
        Manifest {
            generation,
            shards,
            base: Base::Segments,
            journal_generation: generation,
            journal_from: 0,
        }
    }

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
        let (mut generation, mut shards, mut base, mut journal) =
            (None, None, Base::Segments, None);
        for line in lines {
            match line.split_once(' ') {
                Some(("generation", v)) => generation = v.parse().ok(),
                Some(("shards", v)) => shards = v.parse().ok(),
                Some(("base", "rdb")) => base = Base::Rdb,
                Some(("base", "segments")) => base = Base::Segments,
                Some(("journal", v)) => {
                    journal = v
                        .split_once(' ')
                        .and_then(|(g, f)| Some((g.parse().ok()?, f.parse().ok()?)));
                    if journal.is_none() {
                        return Err(bad(&format!("bad journal line {line:?}")));
                    }
                }
                _ => return Err(bad(&format!("unexpected line {line:?}"))),
            }
        }
        match (generation, shards) {
            (Some(generation), Some(shards)) if shards > 0 => {
                let (journal_generation, journal_from) = journal.unwrap_or((generation, 0));
                Ok(Some(Manifest {
                    generation,
                    shards,
                    base,
                    journal_generation,
                    journal_from,
                }))
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
        let base = match self.base {
            Base::Segments => "segments",
            Base::Rdb => "rdb",
        };
        writeln!(f, "base {base}")?;
        writeln!(
            f,
            "journal {} {}",
            self.journal_generation, self.journal_from
        )?;
        f.sync_all()?;
        fs::rename(&tmp, dir.join(MANIFEST))?;
        File::open(dir)?.sync_all()
    }

    /// The prefix of a generation's file names.
    pub fn prefix(generation: u64) -> String {
        format!("damselfly-g{generation}")
    }

    /// The path of a segment of journal generation `generation`.
    pub fn segment_path_of(dir: &Path, generation: u64, shard: u32, seq: u64) -> PathBuf {
        dir.join(segment_name(&Self::prefix(generation), shard, seq))
    }

    /// The path of a journal segment of this generation's own journal.
    pub fn segment_path(&self, dir: &Path, shard: u32, seq: u64) -> PathBuf {
        Self::segment_path_of(dir, self.journal_generation, shard, seq)
    }

    /// The RDB base of `shard` in generation `generation` (a rewrite's).
    pub fn base_path_of(dir: &Path, generation: u64, shard: u32) -> PathBuf {
        dir.join(format!("{}.{shard}.base.rdb", Self::prefix(generation)))
    }

    /// This generation's RDB base of `shard` (when `base` is `Rdb`).
    pub fn base_path(&self, dir: &Path, shard: u32) -> PathBuf {
        Self::base_path_of(dir, self.generation, shard)
    }

    /// The journal segments of `shard` this manifest names, ordered by sequence number.
    pub fn segments(&self, dir: &Path, shard: u32) -> std::io::Result<Vec<PathBuf>> {
        let mut found: Vec<(u64, PathBuf)> = Vec::new();
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            if let Some((g, s, seq)) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(parse_segment)
            {
                if g == self.journal_generation && s == shard && seq >= self.journal_from {
                    found.push((seq, path));
                }
            }
        }
        found.sort();
        Ok(found.into_iter().map(|(_, p)| p).collect())
    }

    /// Deletes every Damselfly journal or base file this manifest does not name (after it was
    /// written durably). Returns how many.
    pub fn remove_unnamed(&self, dir: &Path) -> std::io::Result<usize> {
        let mut removed = 0;
        for entry in fs::read_dir(dir)? {
            let path = entry?.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            if !name.starts_with("damselfly-g") {
                continue;
            }
            let named = match parse_segment(name) {
                Some((g, s, seq)) => {
                    g == self.journal_generation && s < self.shards && seq >= self.journal_from
                }
                None => {
                    self.base == Base::Rdb
                        && (0..self.shards).any(|s| self.base_path(dir, s) == path)
                }
            };
            if !named {
                fs::remove_file(&path)?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

/// `damselfly-gG.S.Q.journal` as (G, S, Q).
fn parse_segment(name: &str) -> Option<(u64, u32, u64)> {
    let rest = name.strip_prefix("damselfly-g")?.strip_suffix(".journal")?;
    let mut parts = rest.split('.');
    let g = parts.next()?.parse().ok()?;
    let s = parts.next()?.parse().ok()?;
    let q = parts.next()?.parse().ok()?;
    parts.next().is_none().then_some((g, s, q))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), None);
        let m = Manifest {
            base: Base::Rdb,
            journal_generation: 5,
            journal_from: 4,
            ..Manifest::new(7, 3)
        };
        m.write(dir.path()).unwrap();
        assert_eq!(Manifest::read(dir.path()).unwrap(), Some(m));
        fs::write(dir.path().join(MANIFEST), "something else\n").unwrap();
        assert!(Manifest::read(dir.path()).is_err());
    }

    #[test]
    fn segments_of_one_generation_in_order_and_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest::new(2, 2);
        let old = Manifest::new(1, 4);
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
        assert_eq!(m.remove_unnamed(dir.path()).unwrap(), 1);
        assert!(dir.path().join("unrelated").exists());
        assert_eq!(
            names(old.segments(dir.path(), 0).unwrap()),
            Vec::<String>::new()
        );
    }
}

#[cfg(test)]
mod rewrite_tests {
    use super::*;

    /// After a rewrite: the RDB bases of the new generation and the old journal's segments
    /// from the cut on are named; earlier segments and older bases are not.
    #[test]
    fn a_rewritten_generation_names_its_base_and_the_segments_after_the_cut() {
        let dir = tempfile::tempdir().unwrap();
        let m = Manifest {
            base: Base::Rdb,
            journal_generation: 3,
            journal_from: 2,
            ..Manifest::new(4, 2)
        };
        let keep = [
            Manifest::segment_path_of(dir.path(), 3, 0, 2),
            Manifest::segment_path_of(dir.path(), 3, 1, 2),
            Manifest::segment_path_of(dir.path(), 3, 1, 3),
            m.base_path(dir.path(), 0),
            m.base_path(dir.path(), 1),
        ];
        let drop = [
            Manifest::segment_path_of(dir.path(), 3, 0, 1),
            Manifest::segment_path_of(dir.path(), 3, 0, 0),
            Manifest::base_path_of(dir.path(), 2, 0),
            Manifest::segment_path_of(dir.path(), 4, 0, 1),
        ];
        for p in keep.iter().chain(&drop) {
            fs::write(p, b"x").unwrap();
        }
        assert_eq!(m.segments(dir.path(), 1).unwrap(), keep[1..3].to_vec());
        assert_eq!(m.remove_unnamed(dir.path()).unwrap(), drop.len());
        assert!(keep.iter().all(|p| p.exists()));
    }
}
