//! HyperLogLog commands (Redis 7.0's hyperloglog.c): PFADD, PFCOUNT (one key, with the
//! cached cardinality, or the union of several), PFMERGE. A HyperLogLog is a string value in
//! Redis's byte format (crates/storage/src/hll.rs); PFCOUNT and PFMERGE over keys on several
//! shards run on the coordinator's gathered copy.

use damselfly_storage::hll::{self, Corrupt};
use damselfly_storage::{Kind, Value};

use crate::{errors, Args, ExecCtx};

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// The HyperLogLog under `key`, copied: Ok(None) when missing, Err(reply) when the key holds
/// something else.
fn load(ctx: &mut ExecCtx, key: &[u8]) -> Result<Option<Vec<u8>>, &'static str> {
    match ctx.lookup_read(key).map(|e| &e.value) {
        None => Ok(None),
        Some(v) if v.kind() != Kind::String => Err(errors::WRONGTYPE),
        Some(v) => {
            let bytes = v.to_bytes();
            if hll::is_valid(&bytes) {
                Ok(Some(bytes))
            } else {
                Err(NOT_HLL)
            }
        }
    }
}

fn corrupt(_: Corrupt) -> &'static str {
    CORRUPT
}

pub fn pfadd(ctx: &mut ExecCtx, args: &Args) {
    let key = args.get(1);
    let (mut h, created) = match load(ctx, key) {
        Err(e) => return ctx.error(e),
        Ok(Some(h)) => (h, false),
        Ok(None) => (hll::new_hll(), true),
    };
    let max_bytes = ctx.limits().hll_sparse_max_bytes;
    let mut updated = created;
    for element in args.iter().skip(2) {
        match hll::add(&mut h, element, max_bytes) {
            Ok(changed) => updated |= changed,
            Err(c) => {
                // Redis edits in place: the elements added before the corruption stay.
                if updated {
                    store(ctx, key, h);
                }
                return ctx.error(corrupt(c));
            }
        }
    }
    if updated {
        hll::changed(&mut h);
        store(ctx, key, h);
    }
    ctx.reply.int(i64::from(updated));
}

/// Writes a HyperLogLog back, keeping the key's TTL (Redis edits the string in place).
fn store(ctx: &mut ExecCtx, key: &[u8], h: Vec<u8>) {
    let mut h = Some(h);
    let found = ctx.shard.update(ctx.db, key, ctx.now, |e| {
        if let Some(h) = h.take() {
            e.value = Value::Str(h);
        }
    });
    if let (None, Some(h)) = (found, h) {
        ctx.shard.set(ctx.db, key, Value::Str(h), 0);
    }
}

pub fn pfcount(ctx: &mut ExecCtx, args: &Args) {
    if args.len() > 2 {
        let mut max = vec![0u8; hll::REGISTERS];
        for key in args.iter().skip(1) {
            match load(ctx, key) {
                Err(e) => return ctx.error(e),
                Ok(None) => {}
                Ok(Some(h)) => {
                    if let Err(c) = hll::merge_into(&mut max, &h) {
                        return ctx.error(corrupt(c));
                    }
                }
            }
        }
        return ctx.reply.int(hll::count_registers(&max) as i64);
    }
    let key = args.get(1);
    let mut h = match load(ctx, key) {
        Err(e) => return ctx.error(e),
        Ok(None) => return ctx.reply.int(0),
        Ok(Some(h)) => h,
    };
    let card = match hll::cached(&h) {
        Some(c) => c,
        None => match hll::count(&h) {
            Ok(c) => {
                // As in Redis, counting refreshes the cache stored in the value.
                hll::set_cached(&mut h, c);
                store(ctx, key, h);
                c
            }
            Err(c) => return ctx.error(corrupt(c)),
        },
    };
    ctx.reply.int(card as i64);
}

pub fn pfmerge(ctx: &mut ExecCtx, args: &Args) {
    let mut max = vec![0u8; hll::REGISTERS];
    let mut dense = false;
    for key in args.iter().skip(1) {
        match load(ctx, key) {
            Err(e) => return ctx.error(e),
            Ok(None) => {}
            Ok(Some(h)) => {
                dense |= hll::is_dense(&h);
                if let Err(c) = hll::merge_into(&mut max, &h) {
                    return ctx.error(corrupt(c));
                }
            }
        }
    }
    let dst = args.get(1);
    let mut h = match load(ctx, dst) {
        Ok(Some(h)) => h,
        _ => hll::new_hll(),
    };
    let max_bytes = ctx.limits().hll_sparse_max_bytes;
    if let Err(c) = hll::store_registers(&mut h, &max, dense, max_bytes) {
        return ctx.error(corrupt(c));
    }
    store(ctx, dst, h);
    ctx.reply.ok();
}
