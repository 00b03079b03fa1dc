//! SORT and SORT_RO (Redis 7.0's sort.c): sorting a list, set or sorted set numerically or
//! lexicographically, by the element itself or by other keys (`BY weight_*`, `BY h_*->field`),
//! with LIMIT, GET patterns and STORE. Patterns name keys that may live on any shard: the
//! coordinator then runs SORT on a gathered copy holding the sorted key and every key its
//! patterns reach (`referenced_keys`), under shared intents on the whole database.

use std::cmp::Ordering;

use damselfly_protocol::number::{parse_f64, parse_i64};
use damselfly_storage::notify::class;
use damselfly_storage::{List, Value, ValueRef};

use crate::{errors, Args, ExecCtx};

struct SortArgs<'a> {
    desc: bool,
    alpha: bool,
    limit: Option<(i64, i64)>,
    by: Option<&'a [u8]>,
    gets: Vec<&'a [u8]>,
    store: Option<&'a [u8]>,
}

impl<'a> SortArgs<'a> {
    /// A BY pattern without `*` means "do not sort".
    fn dont_sort(&self) -> bool {
        self.by.is_some_and(|p| !p.contains(&b'*'))
    }
}

fn parse<'a>(args: &Args<'a>, read_only: bool) -> Result<SortArgs<'a>, &'static str> {
    let mut s = SortArgs {
        desc: false,
        alpha: false,
        limit: None,
        by: None,
        gets: Vec::new(),
        store: None,
    };
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        if args.is(j, "asc") {
            s.desc = false;
        } else if args.is(j, "desc") {
            s.desc = true;
        } else if args.is(j, "alpha") {
            s.alpha = true;
        } else if args.is(j, "limit") && left >= 2 {
            match (parse_i64(args.get(j + 1)), parse_i64(args.get(j + 2))) {
                (Some(a), Some(b)) => s.limit = Some((a, b)),
                _ => return Err(errors::NOT_INT),
            }
            j += 2;
        } else if !read_only && args.is(j, "store") && left >= 1 {
            s.store = Some(args.get(j + 1));
            j += 1;
        } else if args.is(j, "by") && left >= 1 {
            s.by = Some(args.get(j + 1));
            j += 1;
        } else if args.is(j, "get") && left >= 1 {
            s.gets.push(args.get(j + 1));
            j += 1;
        } else {
            return Err(errors::SYNTAX);
        }
        j += 1;
    }
    Ok(s)
}

/// Where SORT's STORE destination is, for key positions and routing (skipping the values of
/// LIMIT, BY and GET as Redis's sortGetKeys does).
pub fn store_position(args: &Args) -> Option<usize> {
    let (mut i, mut found) = (2, None);
    while i < args.len() {
        let left = args.len() - i - 1;
        if args.is(i, "limit") && left >= 2 {
            i += 3;
        } else if (args.is(i, "by") || args.is(i, "get")) && left >= 1 {
            i += 2;
        } else if args.is(i, "store") && left >= 1 {
            found = Some(i + 1);
            i += 2;
        } else {
            i += 1;
        }
    }
    found
}

/// True when a BY or GET pattern names other keys (which may live on any shard).
pub fn uses_patterns(args: &Args) -> bool {
    (2..args.len().saturating_sub(1)).any(|i| {
        let p = args.get(i + 1);
        (args.is(i, "by") || args.is(i, "get")) && p != b"#" && p.contains(&b'*')
    })
}

/// A pattern with its `*` replaced by `element`: the key, and the hash field after `->`.
fn substitute(pattern: &[u8], element: &[u8]) -> Option<(Vec<u8>, Option<Vec<u8>>)> {
    let star = pattern.iter().position(|&b| b == b'*')?;
    let after = &pattern[star + 1..];
    let arrow = after.windows(2).position(|w| w == b"->");
    let (suffix, field) = match arrow {
        Some(a) if a + 2 < after.len() => (&after[..a], Some(after[a + 2..].to_vec())),
        _ => (after, None),
    };
    let mut key = pattern[..star].to_vec();
    key.extend_from_slice(element);
    key.extend_from_slice(suffix);
    Some((key, field))
}

/// The value a pattern names for `element` (Redis's lookupKeyByPattern): `#` is the element
/// itself; otherwise a string key, or a hash field with `->`.
fn lookup_pattern(ctx: &mut ExecCtx, pattern: &[u8], element: &[u8]) -> Option<Vec<u8>> {
    if pattern == b"#" {
        return Some(element.to_vec());
    }
    let (key, field) = substitute(pattern, element)?;
    match (ctx.lookup_read(&key).map(|e| e.value()), field) {
        (Some(ValueRef::Hash(h)), Some(f)) => h.get(&f).map(<[u8]>::to_vec),
        (Some(v @ (ValueRef::Str(_) | ValueRef::Int(_))), None) => Some(v.to_bytes()),
        _ => None,
    }
}

/// The elements to sort, in the value's own order. None after WRONGTYPE.
fn elements(ctx: &mut ExecCtx, key: &[u8]) -> Option<(Vec<Vec<u8>>, bool)> {
    match ctx.lookup_read(key).map(|e| e.value()) {
        None => Some((Vec::new(), false)),
        Some(ValueRef::List(l)) => Some((l.iter().map(|e| e.to_vec()).collect(), false)),
        Some(ValueRef::Set(s)) => Some((s.iter().map(|m| m.to_vec()).collect(), true)),
        Some(ValueRef::ZSet(z)) => Some((z.all().into_iter().map(|(m, _)| m).collect(), false)),
        Some(_) => {
            ctx.wrongtype();
            None
        }
    }
}

/// The keys SORT's patterns reach from the elements of the key it sorts (the coordinator
/// gathers them before running SORT away from their shards).
pub fn referenced_keys(ctx: &mut ExecCtx, args: &Args) -> Vec<Vec<u8>> {
    let Ok(opts) = parse(args, false) else {
        return Vec::new();
    };
    let Some((items, _)) = elements(ctx, args.get(1)) else {
        return Vec::new();
    };
    let patterns: Vec<&[u8]> = opts
        .by
        .into_iter()
        .chain(opts.gets.iter().copied())
        .collect();
    let mut keys: Vec<Vec<u8>> = items
        .iter()
        .flat_map(|e| {
            patterns
                .iter()
                .filter_map(|p| substitute(p, e).map(|(k, _)| k))
        })
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// C's strtod over a whole string, as SORT reads scores: leading blanks allowed, an empty
/// string is 0; NaN, overflow and underflow are errors.
fn sort_score(text: &[u8]) -> Option<f64> {
    if text.is_empty() {
        return Some(0.0);
    }
    parse_f64(text.trim_ascii_start())
}

fn run(ctx: &mut ExecCtx, args: &Args, read_only: bool) {
    let opts = match parse(args, read_only) {
        Ok(o) => o,
        Err(e) => return ctx.error(e),
    };
    let Some((mut items, is_set)) = elements(ctx, args.get(1)) else {
        return;
    };
    let mut dont_sort = opts.dont_sort();
    let mut alpha = opts.alpha;
    let mut by = opts.by;
    // A set has no order of its own: stored results are sorted for determinism, as in Redis.
    if dont_sort && is_set && opts.store.is_some() {
        dont_sort = false;
        alpha = true;
        by = None;
    }
    if dont_sort && opts.desc && !is_set {
        items.reverse();
    }
    if !dont_sort {
        let keys: Option<Vec<Option<Vec<u8>>>> =
            by.map(|p| items.iter().map(|e| lookup_pattern(ctx, p, e)).collect());
        let mut order: Vec<usize> = (0..items.len()).collect();
        if alpha {
            let cmp = |a: &usize, b: &usize| match &keys {
                Some(k) => k[*a].cmp(&k[*b]),
                None => items[*a].cmp(&items[*b]),
            };
            order.sort_by(|a, b| directed(cmp(a, b), opts.desc));
        } else {
            let mut scores = Vec::with_capacity(items.len());
            for (i, e) in items.iter().enumerate() {
                let text = match &keys {
                    Some(k) => k[i].as_deref(),
                    None => Some(e.as_slice()),
                };
                match text.map(sort_score) {
                    None => scores.push(0.0),
                    Some(Some(s)) => scores.push(s),
                    Some(None) => {
                        return ctx.error("ERR One or more scores can't be converted into double")
                    }
                }
            }
            order.sort_by(|&a, &b| {
                let c = scores[a]
                    .partial_cmp(&scores[b])
                    .unwrap_or(Ordering::Equal)
                    .then_with(|| items[a].cmp(&items[b]));
                directed(c, opts.desc)
            });
        }
        items = order
            .into_iter()
            .map(|i| std::mem::take(&mut items[i]))
            .collect();
    }
    let len = items.len() as i64;
    let (mut start, mut end) = match opts.limit {
        None => (0, len - 1),
        Some((s, c)) => {
            let start = s.max(0);
            let end = if c < 0 {
                len - 1
            } else {
                start.saturating_add(c) - 1
            };
            (start, end)
        }
    };
    if start >= len {
        (start, end) = (len - 1, len - 2);
    }
    end = end.min(len - 1);
    let picked: &[Vec<u8>] = if end >= start {
        &items[start as usize..=end as usize]
    } else {
        &[]
    };
    let mut out: Vec<Option<Vec<u8>>> = Vec::new();
    for e in picked {
        if opts.gets.is_empty() {
            out.push(Some(e.clone()));
        }
        for g in &opts.gets {
            out.push(lookup_pattern(ctx, g, e));
        }
    }
    match opts.store {
        None => {
            ctx.reply.array(out.len());
            for v in &out {
                match v {
                    Some(v) => ctx.reply.bulk(v),
                    None => ctx.reply.null(),
                }
            }
        }
        Some(dst) => {
            let fill = ctx.limits().list_max_listpack_size;
            let mut list = List::default();
            for v in &out {
                list.push(
                    damselfly_storage::End::Tail,
                    v.as_deref().unwrap_or_default(),
                    fill,
                );
            }
            if out.is_empty() {
                // As Redis's dbDelete: a key past its deadline but not yet removed goes too.
                if ctx.shard.remove(ctx.db, dst).is_some() {
                    ctx.notify(class::GENERIC, "del", dst);
                }
            } else {
                ctx.shard.expire_if_needed(ctx.db, dst, ctx.now);
                ctx.shard.set(ctx.db, dst, Value::List(Box::new(list)), 0);
                ctx.notify(class::LIST, "sortstore", dst);
            }
            // The stored list itself: elements that compare equal may come out in another
            // order from a replica of the source with another layout.
            ctx.propagate(&[b"DEL", dst]);
            if !out.is_empty() {
                let mut rpush: Vec<&[u8]> = vec![b"RPUSH", dst];
                rpush.extend(out.iter().map(|v| v.as_deref().unwrap_or_default()));
                ctx.propagate(&rpush);
            }
            ctx.reply.int(out.len() as i64);
        }
    }
}

fn directed(c: Ordering, desc: bool) -> Ordering {
    if desc {
        c.reverse()
    } else {
        c
    }
}

pub fn sort(ctx: &mut ExecCtx, args: &Args) {
    run(ctx, args, false);
}

pub fn sort_ro(ctx: &mut ExecCtx, args: &Args) {
    run(ctx, args, true);
}
