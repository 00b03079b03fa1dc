//! DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE] (Redis's debug.c): saves a snapshot, then replaces
//! the data set with what the current snapshot holds (docs/persistence.md, "DEBUG RELOAD").
//!
//! Everything runs inside one transaction with exclusive intents on every database of every
//! shard, so no command falls between the save and the load. The load takes two rounds of
//! hops: each shard first reads its keys from the files into a data set of its own (checking
//! NOFLUSH's duplicates against its live keys), and only when every shard succeeded does a
//! second round put them in place. A failed load therefore changes nothing, where Redis has
//! already emptied its data set (and a duplicate key under NOFLUSH stops Redis).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use damselfly_commands::{lookup, Args};
use damselfly_persistence::snapshot::{read_rdb_file, LoadOptions, SnapshotManifest};
use damselfly_storage::{shard_for_key, Shard};

use crate::connection::Connection;
use crate::snapshots::publish;
use crate::tx::ShardWork;
use crate::worker::Worker;

const BAD_OPTION: &str = "ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.";
/// Redis's replies when the save or the load fails (the cause goes to the log).
const SAVE_FAILED: &str = "ERR";
const LOAD_FAILED: &str = "ERR Error trying to load the RDB dump";

/// DEBUG RELOAD's options, as Redis reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReloadOptions {
    /// MERGE: a loaded key replaces a live one of the same name.
    merge: bool,
    /// Not NOFLUSH: the data set is emptied before the load.
    flush: bool,
    /// Not NOSAVE: a snapshot is saved first.
    save: bool,
}

impl ReloadOptions {
    fn parse(args: &Args) -> Option<Self> {
        let mut o = ReloadOptions {
            merge: false,
            flush: true,
            save: true,
        };
        for word in args.iter().skip(2) {
            match word.to_ascii_lowercase().as_slice() {
                b"merge" => o.merge = true,
                b"noflush" => o.flush = false,
                b"nosave" => o.save = false,
                _ => return None,
            }
        }
        Some(o)
    }
}

/// Why a reload failed: the save (nothing was loaded) or the load (nothing changed).
enum Failure {
    Save(String),
    Load(String),
}

/// The files of the snapshot to load and the id they must carry: the current Damselfly
/// snapshot, or `dbfilename` (a Redis dump) when there is none.
fn snapshot_files(dir: &Path, dbfilename: &str) -> Result<(Vec<PathBuf>, Option<u64>), String> {
    match SnapshotManifest::read(dir)? {
        Some(m) => Ok((m.paths(dir), Some(m.id))),
        None => {
            let dump = dir.join(dbfilename);
            if dump.exists() {
                Ok((vec![dump], None))
            } else {
                Err(format!("there is no snapshot in {}", dir.display()))
            }
        }
    }
}

impl Worker {
    /// The first round of the load on this shard: its keys from `files` into a data set of
    /// its own. With one file per shard, file `i` holds exactly shard `i`'s keys; otherwise
    /// (a snapshot of a run with another thread count, a Redis dump) every file is read and
    /// the keys of other shards skipped. Keys whose deadline passed are dropped; without
    /// MERGE and FLUSH a key that exists is an error. Returns the data set and how many of
    /// its keys were dropped as expired.
    fn read_reload(
        &self,
        files: &[PathBuf],
        id: Option<u64>,
        opts: &LoadOptions,
        reload: ReloadOptions,
    ) -> Result<(Shard, u64), String> {
        let shards = self.num_shards();
        let mut loaded = Shard::new(opts.databases);
        loaded.limits = opts.limits;
        let live = self.shard.borrow();
        let now = damselfly_storage::now_ms();
        let mut expired = 0;
        let mine: Vec<(usize, &PathBuf)> = if files.len() == shards {
            vec![(self.id, &files[self.id])]
        } else {
            files.iter().enumerate().collect()
        };
        for (index, path) in mine {
            // The function libraries saved with the keys are the live ones: nothing to load.
            read_rdb_file(
                path,
                id.map(|id| (id, index)),
                opts,
                |db, key, value, at| {
                    if shard_for_key(&key, shards) != self.id {
                        return Ok(());
                    }
                    if at != 0 && at <= now {
                        expired += 1;
                        return Ok(());
                    }
                    if !reload.flush && !reload.merge && live.dbs[db].table.get(&key).is_some() {
                        return Err(format!(
                        "{} holds key {:?} of database {db}, which exists (NOFLUSH without MERGE)",
                        path.display(),
                        String::from_utf8_lossy(&key)
                    ));
                    }
                    loaded.set(db, &key, value, at);
                    Ok(())
                },
            )
            .map(drop)?;
        }
        Ok((loaded, expired))
    }

    /// The second round: the loaded keys replace the data set (or join it, NOFLUSH). The
    /// change counter stays as it was, as Redis's load leaves `dirty` alone.
    fn apply_reload(&self, mut loaded: Shard, flush: bool) {
        let mut shard = self.shard.borrow_mut();
        let dirty = shard.dirty;
        if flush {
            shard.flush_all(damselfly_storage::now_ms());
        }
        for (db, d) in loaded.dbs.iter_mut().enumerate() {
            for e in std::mem::take(&mut d.table).into_entries() {
                let key = e.key().to_vec();
                shard.put(db, &key, e);
            }
        }
        shard.dirty = dirty;
    }
}

impl Connection {
    /// DEBUG RELOAD [MERGE] [NOFLUSH] [NOSAVE].
    pub(crate) async fn debug_reload(&mut self, args: &Args<'_>) {
        let Some(reload) = ReloadOptions::parse(args) else {
            return self.reply_error(BAD_OPTION);
        };
        let cluster = self.worker.cluster.clone();
        let save_id = if reload.save {
            let begun = match cluster.rewrites.state().running {
                Some(_) => None,
                None => cluster.saves.begin(),
            };
            match begun {
                Some(id) => Some(id),
                None => return self.reply_error("ERR Background save already in progress"),
            }
        } else {
            None
        };
        let spec = lookup(b"debug").unwrap_or(0);
        let mut plan = Vec::new();
        self.plan(spec, self.info.db.get(), args, &mut plan);
        let Some(own) = self.enter_tx(plan).await else {
            if save_id.is_some() {
                // Nothing was saved: no failed save to report.
                cluster.saves.cancel();
            }
            return self.reply_error("ERR shard unavailable");
        };
        // Earlier commands of this EXEC go first.
        self.flush_remote().await;
        let result = self.reload_in_tx(reload, save_id).await;
        self.leave_tx(own).await;
        match result {
            Ok(()) => {
                tracing::warn!("DB reloaded by DEBUG RELOAD");
                let journal_on = cluster
                    .journal_files
                    .lock()
                    .is_ok_and(|files| files.is_some());
                if journal_on && !(reload.save && reload.flush) {
                    // The journal does not hold what was loaded: a rewrite catches it up.
                    cluster.rewrite_scheduled.store(true, Ordering::SeqCst);
                }
                self.out.ok();
            }
            Err(Failure::Save(e)) => {
                tracing::warn!("DEBUG RELOAD: the save failed: {e}");
                self.reply_error(SAVE_FAILED);
            }
            Err(Failure::Load(e)) => {
                tracing::warn!("DEBUG RELOAD: the load failed, nothing changed: {e}");
                self.reply_error(LOAD_FAILED);
            }
        }
    }

    /// The save (when `save_id` is given) and the two rounds of the load, as hops of the
    /// running transaction.
    async fn reload_in_tx(
        &mut self,
        reload: ReloadOptions,
        save_id: Option<u64>,
    ) -> Result<(), Failure> {
        let cluster = self.worker.cluster.clone();
        let config = &cluster.config;
        let dir = PathBuf::from(config.get("dir"));
        let shards = self.worker.num_shards();
        if let Some(id) = save_id {
            let parts = (0..shards)
                .map(|shard| {
                    let dir = dir.clone();
                    let work: ShardWork<Result<u64, String>> =
                        Box::new(move |w: &Worker| w.save_now(&dir, id));
                    (shard, work)
                })
                .collect();
            let saved: Result<Vec<u64>, String> = self
                .tx_hops(parts)
                .await
                .ok_or_else(|| "a shard is unavailable".to_string())
                .and_then(|r| r.into_iter().collect());
            let published = saved.and_then(|dirty| {
                publish(&dir, id, shards)?;
                Ok(dirty.iter().sum())
            });
            match published {
                Ok(dirty) => cluster.saves.end(true, dirty),
                Err(e) => {
                    crate::snapshots::discard_temp_files(&dir, id, shards);
                    cluster.saves.end(false, 0);
                    return Err(Failure::Save(e));
                }
            }
        }
        let (files, id) = snapshot_files(&dir, &config.get("dbfilename")).map_err(Failure::Load)?;
        let opts = LoadOptions {
            databases: self.worker.shard.borrow().dbs.len(),
            limits: config.encoding_limits(),
            verify_checksum: config.get("rdbchecksum") == "yes",
        };
        let parts = (0..shards)
            .map(|shard| {
                let files = files.clone();
                let work: ShardWork<Result<(Shard, u64), String>> =
                    Box::new(move |w: &Worker| w.read_reload(&files, id, &opts, reload));
                (shard, work)
            })
            .collect();
        let loaded: Vec<(Shard, u64)> = self
            .tx_hops(parts)
            .await
            .ok_or_else(|| "a shard is unavailable".to_string())
            .and_then(|r| r.into_iter().collect())
            .map_err(Failure::Load)?;
        let kept = loaded
            .iter()
            .map(|(s, _)| s.dbs.iter().map(|d| d.table.len() as u64).sum::<u64>())
            .sum();
        let expired = loaded.iter().map(|(_, n)| n).sum();
        let parts = loaded
            .into_iter()
            .enumerate()
            .map(|(shard, (data, _))| {
                let work: ShardWork<()> =
                    Box::new(move |w: &Worker| w.apply_reload(data, reload.flush));
                (shard, work)
            })
            .collect();
        self.tx_hops(parts)
            .await
            .ok_or_else(|| Failure::Load("a shard is unavailable".into()))?;
        cluster.saves.loaded(kept, expired);
        Ok(())
    }

    /// Runs `parts` as hops of the running transaction, without concluding it. None when a
    /// shard is unavailable.
    async fn tx_hops<T: Send + 'static>(
        &mut self,
        parts: Vec<(usize, ShardWork<T>)>,
    ) -> Option<Vec<T>> {
        let tx = self.tx.as_mut()?;
        tx.hops(parts, false).await.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use damselfly_protocol::Span;

    fn parse(words: &[&str]) -> Option<ReloadOptions> {
        let (mut buf, mut spans) = (Vec::new(), Vec::new());
        for w in words {
            Span::push_arg(&mut buf, &mut spans, w.as_bytes());
        }
        ReloadOptions::parse(&Args::new(&buf, &spans))
    }

    #[test]
    fn options_as_redis_reads_them() {
        let all = ReloadOptions {
            merge: false,
            flush: true,
            save: true,
        };
        assert_eq!(parse(&["debug", "reload"]), Some(all));
        assert_eq!(
            parse(&["debug", "reload", "NoSave", "noflush", "MERGE"]),
            Some(ReloadOptions {
                merge: true,
                flush: false,
                save: false
            })
        );
        assert_eq!(parse(&["debug", "reload", "nosave", "x"]), None);
    }
}
