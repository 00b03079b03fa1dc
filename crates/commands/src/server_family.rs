//! Server commands' shard-side parts: DBSIZE, FLUSHDB, FLUSHALL and DEBUG POPULATE. The
//! coordinator runs them on every shard and merges the replies.

use damselfly_storage::{shard_for_key, Value};

use crate::{Args, ExecCtx};

pub fn dbsize(ctx: &mut ExecCtx, _args: &Args) {
    ctx.reply.int(ctx.shard.dbs[ctx.db].len() as i64);
}

/// FLUSHDB / FLUSHALL accept one optional ASYNC or SYNC; both free memory synchronously here.
fn flush_mode_ok(ctx: &mut ExecCtx, args: &Args) -> bool {
    let ok = match args.len() {
        1 => true,
        2 => args.is(1, "async") || args.is(1, "sync"),
        _ => false,
    };
    if !ok {
        ctx.error(crate::errors::SYNTAX);
    }
    ok
}

pub fn flushdb(ctx: &mut ExecCtx, args: &Args) {
    if flush_mode_ok(ctx, args) {
        ctx.shard.flush_db(ctx.db, ctx.now);
        ctx.reply.ok();
    }
}

pub fn flushall(ctx: &mut ExecCtx, args: &Args) {
    if flush_mode_ok(ctx, args) {
        ctx.shard.flush_all(ctx.now);
        ctx.reply.ok();
    }
}

/// DEBUG POPULATE's share for this shard: keys `prefix:i` for i in 0..count that route here and
/// do not exist yet, with Redis's values (`value:i`, cut or zero-padded to `size` when given).
pub fn populate(ctx: &mut ExecCtx, count: u64, prefix: &[u8], size: Option<usize>) {
    let mut key = Vec::with_capacity(prefix.len() + 21);
    for i in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.push(b':');
        key.extend_from_slice(i.to_string().as_bytes());
        if shard_for_key(&key, ctx.num_shards) != ctx.shard_id
            || ctx.shard.exists(ctx.db, &key, ctx.now)
        {
            continue;
        }
        let text = format!("value:{i}").into_bytes();
        let value = match size {
            None => Value::from_bytes(&text),
            Some(n) => {
                let mut v = vec![0u8; n];
                let m = n.min(text.len());
                v[..m].copy_from_slice(&text[..m]);
                Value::Str(v)
            }
        };
        ctx.shard.set(ctx.db, &key, value, 0);
    }
}
