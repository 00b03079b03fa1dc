//! Geo commands over sorted sets whose scores are Redis's 52-bit geohashes (`geohash`), so
//! ZRANGE and friends see the scores Redis stores: GEOADD (its members go in through ZADD's
//! path), GEOPOS, GEODIST and GEOHASH.

use damselfly_protocol::number::parse_f64;
use damselfly_protocol::ReplyBuf;
use damselfly_storage::ZSet;

use crate::geohash;
use crate::zset_family::{add_pairs, AddFlags};
use crate::{errors, Args, ExecCtx};

/// GEOADD key [NX|XX] [CH] longitude latitude member [...]: checks every position first, then
/// adds them as ZADD would (replies, `zadd` events).
pub fn geoadd(ctx: &mut ExecCtx, args: &Args) {
    let mut f = AddFlags::default();
    let mut at = 2;
    while at < args.len() {
        match args.get(at).to_ascii_lowercase().as_slice() {
            b"nx" => f.nx = true,
            b"xx" => f.xx = true,
            b"ch" => f.ch = true,
            _ => break,
        }
        at += 1;
    }
    if !(args.len() - at).is_multiple_of(3) || (f.nx && f.xx) {
        return ctx.error(errors::SYNTAX);
    }
    let mut pairs = Vec::with_capacity((args.len() - at) / 3);
    for i in (at..args.len()).step_by(3) {
        let (Some(lon), Some(lat)) = (parse_f64(args.get(i)), parse_f64(args.get(i + 1))) else {
            return ctx.error(errors::NOT_FLOAT);
        };
        if !geohash::valid(lon, lat) {
            return ctx.error(&format!(
                "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
            ));
        }
        pairs.push((geohash::encode(lon, lat) as f64, args.get(i + 2)));
    }
    add_pairs(ctx, args.get(1), f, &pairs);
}

/// A position as GEOPOS replies it: longitude and latitude as Redis prints long doubles.
fn reply_position(r: &mut ReplyBuf, score: f64) {
    let (lon, lat) = geohash::decode(score as u64);
    r.array(2);
    r.double_text(geohash::human(lon).as_bytes());
    r.double_text(geohash::human(lat).as_bytes());
}

/// GEOPOS key [member ...]: each member's position, or a null array when it has none.
pub fn geopos(ctx: &mut ExecCtx, args: &Args) {
    per_member(ctx, args, ReplyBuf::null_array, reply_position);
}

/// One reply per member named from argument 2 on: `found` with its score, else `missing`
/// (also for every member of a missing key).
fn per_member(
    ctx: &mut ExecCtx,
    args: &Args,
    missing: fn(&mut ReplyBuf),
    found: fn(&mut ReplyBuf, f64),
) {
    let members = || args.iter().skip(2);
    let n = args.len() - 2;
    ctx.read_as::<ZSet>(
        args.get(1),
        |r| {
            r.array(n);
            members().for_each(|_| missing(r));
        },
        |z, r| {
            r.array(n);
            for m in members() {
                match z.score(m) {
                    Some(s) => found(r, s),
                    None => missing(r),
                }
            }
        },
    );
}

/// GEODIST key member1 member2 [M|KM|FT|MI]: the distance in the unit, 4 decimals; null when
/// a member is missing.
pub fn geodist(ctx: &mut ExecCtx, args: &Args) {
    let to_meters = match args.len() {
        4 => 1.0,
        5 => match geohash::unit(args.get(4)) {
            Some(u) => u,
            None => return ctx.error("ERR unsupported unit provided. please use M, KM, FT, MI"),
        },
        _ => return ctx.error(errors::SYNTAX),
    };
    ctx.read_as::<ZSet>(args.get(1), ReplyBuf::null, |z, r| {
        match (z.score(args.get(2)), z.score(args.get(3))) {
            (Some(a), Some(b)) => {
                let ((lon1, lat1), (lon2, lat2)) =
                    (geohash::decode(a as u64), geohash::decode(b as u64));
                let d = geohash::distance(lon1, lat1, lon2, lat2) / to_meters;
                r.bulk(format!("{d:.4}").as_bytes());
            }
            _ => r.null(),
        }
    });
}

/// GEOHASH key [member ...]: each member's standard 11-character geohash, or null.
pub fn geohash(ctx: &mut ExecCtx, args: &Args) {
    per_member(ctx, args, ReplyBuf::null, |r, s| {
        r.bulk(&geohash::to_standard(s as u64))
    });
}
