//! Which intents a command needs, on which shards. Read from the command table: key positions,
//! flags and the command's `Intents`; commands whose arguments name databases are read with
//! the command's own parser, so planning never disagrees with (or runs ahead of) execution.

use damselfly_commands::dump_family::DebugScope;
use damselfly_commands::keys_family::{self, SwapDb, Transfer};
use damselfly_commands::table::{CommandSpec, Intents, Route, COMMANDS};
use damselfly_commands::Args;
use damselfly_storage::shard_for_key;

use super::locks::{Lock, Mode};

/// Calls `add(shard, lock)` for every intent command `idx` with `args`, run in database
/// `db`, needs. Arguments the command's parser rejects plan as an ordinary command on its key
/// positions: the command then replies with its error under those intents.
pub fn command_locks(
    idx: usize,
    db: usize,
    args: &Args,
    databases: usize,
    shards: usize,
    mut add: impl FnMut(usize, Lock),
) {
    let spec = &COMMANDS[idx];
    let mode = Mode::for_write(spec.is_write());
    let mut key_lock = |key: &[u8], db: usize, mode: Mode| {
        add(
            shard_for_key(key, shards),
            Lock::Key {
                db,
                key: key.into(),
                mode,
            },
        )
    };
    match spec.intents {
        Intents::Transfer => {
            if let Ok(t) = Transfer::parse(spec.name, args, db, databases) {
                let (src, dst) = t.keys(args);
                let src_mode = if t.keeps_source() {
                    Mode::Shared
                } else {
                    Mode::Exclusive
                };
                key_lock(src, t.src_db, src_mode);
                key_lock(dst, t.dst_db, Mode::Exclusive);
                return;
            }
        }
        Intents::Script => {
            for shard in 0..shards {
                add(
                    shard,
                    Lock::AllDbs {
                        mode: Mode::Exclusive,
                    },
                );
            }
            return;
        }
        Intents::AllDbs => {
            for shard in 0..shards {
                add(shard, Lock::AllDbs { mode });
            }
            return;
        }
        Intents::SwapDbs => {
            if let Ok(SwapDb(a, b)) = SwapDb::parse(args, databases) {
                for shard in 0..shards {
                    add(shard, Lock::Db { db: a, mode });
                    add(shard, Lock::Db { db: b, mode });
                }
                return;
            }
        }
        Intents::Debug => {
            match DebugScope::parse(args) {
                Some(DebugScope::Dataset) => {
                    for shard in 0..shards {
                        add(shard, Lock::AllDbs { mode: Mode::Shared });
                    }
                }
                Some(DebugScope::Reload) => {
                    for shard in 0..shards {
                        add(
                            shard,
                            Lock::AllDbs {
                                mode: Mode::Exclusive,
                            },
                        );
                    }
                }
                Some(DebugScope::Keys) => {
                    for key in args.iter().skip(2) {
                        key_lock(key, db, Mode::Shared);
                    }
                }
                None => {}
            }
            return;
        }
        Intents::Keys => {}
    }
    ordinary_locks(spec, db, args, shards, mode, &mut add);
}

/// A command's keys (or its whole database when it has none) in database `db`.
fn ordinary_locks(
    spec: &CommandSpec,
    db: usize,
    args: &Args,
    shards: usize,
    mode: Mode,
    add: &mut impl FnMut(usize, Lock),
) {
    match spec.route {
        Route::Coordinator => {}
        Route::Cursor => {
            let cursor = damselfly_protocol::number::parse_u64(args.get(1)).unwrap_or(0);
            let shard = keys_family::scan_cursor_shard(cursor).min(shards - 1);
            add(shard, Lock::Db { db, mode });
        }
        Route::AllShards(_) => {
            for shard in 0..shards {
                add(shard, Lock::Db { db, mode });
            }
        }
        Route::Key | Route::KeyOrCoordinator(_) | Route::Keys(_) => {
            for at in spec.key_positions_iter(args) {
                let key = args.get(at);
                let lock = Lock::Key {
                    db,
                    key: key.into(),
                    mode,
                };
                add(shard_for_key(key, shards), lock);
            }
            // SORT's BY/GET patterns reach keys known only once it runs: it reads under a
            // shared intent on the whole database of every shard.
            if spec.reads_unknown_keys(args) {
                for shard in 0..shards {
                    add(
                        shard,
                        Lock::Db {
                            db,
                            mode: Mode::Shared,
                        },
                    );
                }
            }
        }
    }
}
