//! HyperLogLog commands (Redis 7.0's hyperloglog.c): PFADD, PFCOUNT (one key, with the
//! cached cardinality, or the union of several), PFMERGE. A HyperLogLog is a string value in
//! Redis's byte format (crates/storage/src/hll.rs); PFCOUNT and PFMERGE over keys on several
//! shards run on the coordinator's gathered copy.

use damselfly_storage::hll::{self, Corrupt};
use damselfly_storage::notify::class;
use damselfly_storage::{Kind, Value, ValueRef};

use crate::{errors, Args, ExecCtx};

const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

/// The HyperLogLog bytes of a value, or the error Redis gives for anything else.
fn hll_bytes(v: ValueRef<'_>) -> Result<&[u8], &'static str> {
    match v {
        ValueRef::Str(s) if hll::is_valid(s) => Ok(s),
        v if v.kind() != Kind::String => Err(errors::WRONGTYPE),
        _ => Err(NOT_HLL),
    }
}

fn corrupt(_: Corrupt) -> &'static str {
    CORRUPT
}

pub fn pfadd(ctx: &mut ExecCtx, args: &Args) {
    let (key, elements) = (args.get(1), || args.iter().skip(2));
    let max_bytes = ctx.limits().hll_sparse_max_bytes;
    match ctx.lookup_write(key).map(|e| e.value()) {
        None => {
            let mut h = hll::new_hll();
            for element in elements() {
                // A fresh HyperLogLog cannot be corrupt.
                let _ = hll::add(&mut h, element, max_bytes);
            }
            hll::changed(&mut h);
            ctx.shard.set(ctx.db, key, Value::Str(h), 0);
            ctx.notify(class::STRING, "pfadd", key);
            return ctx.reply.int(1);
        }
        Some(v) => match hll_bytes(v) {
            Err(e) => return ctx.error(e),
            // Unchanged registers: no write at all (WATCH sees nothing, as in Redis).
            Ok(h) if !elements().any(|e| hll::would_raise(h, e)) => return ctx.reply.int(0),
            Ok(_) => {}
        },
    }
    // Edited in place, as Redis does: elements added before a corruption is found stay.
    let added = ctx.shard.update(ctx.db, key, ctx.now, |e| {
        let h = e.make_raw();
        let mut updated = false;
        for element in elements() {
            updated |= hll::add(h, element, max_bytes)?;
        }
        if updated {
            hll::changed(h);
        }
        Ok(updated)
    });
    match added {
        Some(Ok(updated)) => {
            if updated {
                ctx.notify(class::STRING, "pfadd", key);
            }
            ctx.reply.int(i64::from(updated))
        }
        Some(Err(c)) => ctx.error(corrupt(c)),
        None => ctx.reply.int(0),
    }
}

/// Raises `max` to the registers of the HyperLogLog under `key` (missing: nothing); whether
/// it is dense. Err(reply) for another type or a corrupt value.
fn merge_key(ctx: &mut ExecCtx, key: &[u8], max: &mut [u8]) -> Result<bool, &'static str> {
    match ctx.lookup_read(key).map(|e| e.value()) {
        None => Ok(false),
        Some(v) => {
            let h = hll_bytes(v)?;
            hll::merge_into(max, h).map_err(corrupt)?;
            Ok(hll::is_dense(h))
        }
    }
}

pub fn pfcount(ctx: &mut ExecCtx, args: &Args) {
    if args.len() > 2 {
        let mut max = vec![0u8; hll::REGISTERS];
        for key in args.iter().skip(1) {
            if let Err(e) = merge_key(ctx, key, &mut max) {
                return ctx.error(e);
            }
        }
        return ctx.reply.int(hll::count_registers(&max) as i64);
    }
    let key = args.get(1);
    let counted = match ctx.lookup_read(key).map(|e| e.value()) {
        None => return ctx.reply.int(0),
        Some(v) => match hll_bytes(v) {
            Err(e) => return ctx.error(e),
            Ok(h) => match hll::cached(h) {
                Some(card) => return ctx.reply.int(card as i64),
                None => hll::count(h),
            },
        },
    };
    match counted {
        Ok(card) => {
            // As in Redis, counting refreshes the cache stored in the value.
            ctx.shard.update(ctx.db, key, ctx.now, |e| {
                hll::set_cached(e.make_raw(), card)
            });
            ctx.reply.int(card as i64);
        }
        Err(c) => ctx.error(corrupt(c)),
    }
}

pub fn pfmerge(ctx: &mut ExecCtx, args: &Args) {
    let mut max = vec![0u8; hll::REGISTERS];
    let mut dense = false;
    for key in args.iter().skip(1) {
        match merge_key(ctx, key, &mut max) {
            Ok(d) => dense |= d,
            Err(e) => return ctx.error(e),
        }
    }
    let dst = args.get(1);
    let max_bytes = ctx.limits().hll_sparse_max_bytes;
    let write = |h: &mut Vec<u8>| hll::store_registers(h, &max, dense, max_bytes);
    // The destination was among the sources, so it is missing or a valid HyperLogLog.
    let stored = match ctx
        .shard
        .update(ctx.db, dst, ctx.now, |e| write(e.make_raw()))
    {
        Some(r) => r,
        None => {
            let mut h = hll::new_hll();
            let r = write(&mut h);
            ctx.shard.set(ctx.db, dst, Value::Str(h), 0);
            r
        }
    };
    match stored {
        Ok(()) => {
            // PFMERGE announces itself as PFADD, as in Redis.
            ctx.notify(class::STRING, "pfadd", dst);
            ctx.reply.ok()
        }
        Err(c) => ctx.error(corrupt(c)),
    }
}
