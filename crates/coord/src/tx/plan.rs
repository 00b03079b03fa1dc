//! Which intents a command needs, on which shards. Read from the command table's key
//! positions and flags; the few commands whose keys live in another database (COPY ... DB,
//! MOVE) or that cover whole databases (FLUSHDB, KEYS, SWAPDB, ...) are spelled out here.

use damselfly_commands::table::{Route, COMMANDS};
use damselfly_commands::{keys_family, Args};
use damselfly_protocol::number::parse_i64;
use damselfly_storage::shard_for_key;

use super::locks::{Lock, Mode};

/// Calls `add(shard, lock)` for every intent command `idx` with `args`, run in database
/// `db`, needs.
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
    let db16 = db as u16;
    let other_db = |at: usize| -> Option<u16> {
        let n = parse_i64(args.get(at))?;
        (0..databases as i64).contains(&n).then_some(n as u16)
    };
    match spec.route {
        Route::Coordinator => {}
        Route::Cursor => {
            let cursor = damselfly_protocol::number::parse_u64(args.get(1)).unwrap_or(0);
            let shard = keys_family::scan_cursor_shard(cursor).min(shards - 1);
            add(shard, Lock::Db { db: db16, mode });
        }
        Route::AllShards(_) => {
            let dbs: Vec<u16> = match spec.name {
                "flushall" => (0..databases as u16).collect(),
                "swapdb" => [other_db(1), other_db(2)].into_iter().flatten().collect(),
                _ => vec![db16],
            };
            for shard in 0..shards {
                for &d in &dbs {
                    add(shard, Lock::Db { db: d, mode });
                }
            }
        }
        Route::Key | Route::Keys(_) => {
            let key_lock = |at: usize, db: u16, mode: Mode| {
                let key = args.get(at);
                (
                    shard_for_key(key, shards),
                    Lock::Key {
                        db,
                        key: key.into(),
                        mode,
                    },
                )
            };
            match spec.name {
                "copy" => {
                    let (s, l) = key_lock(1, db16, Mode::Shared);
                    add(s, l);
                    let target = (3..args.len())
                        .find(|&i| args.get(i).eq_ignore_ascii_case(b"db"))
                        .and_then(|i| other_db(i + 1))
                        .unwrap_or(db16);
                    let (s, l) = key_lock(2, target, Mode::Exclusive);
                    add(s, l);
                }
                "move" => {
                    let (s, l) = key_lock(1, db16, Mode::Exclusive);
                    add(s, l);
                    if let Some(target) = other_db(2) {
                        let (s, l) = key_lock(1, target, Mode::Exclusive);
                        add(s, l);
                    }
                }
                _ => {
                    for at in spec.key_positions_iter(args) {
                        let (s, l) = key_lock(at, db16, mode);
                        add(s, l);
                    }
                    // SORT's BY/GET patterns reach keys known only once it runs: it reads
                    // under a shared intent on the whole database of every shard.
                    if spec.reads_unknown_keys(args) {
                        for shard in 0..shards {
                            add(
                                shard,
                                Lock::Db {
                                    db: db16,
                                    mode: Mode::Shared,
                                },
                            );
                        }
                    }
                }
            }
        }
    }
}
