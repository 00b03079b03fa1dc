//! Geo commands over sorted sets whose scores are Redis's 52-bit geohashes (`geohash`), so
//! ZRANGE and friends see the scores Redis stores: GEOADD (its members go in through ZADD's
//! path), GEOPOS, GEODIST, GEOHASH, and the area searches GEOSEARCH, GEOSEARCHSTORE and the
//! older GEORADIUS family, which scan the score ranges of Redis's nine-cell cover of the area
//! and keep, sort and cut the members as Redis's georadiusGeneric does.

use std::cmp::Ordering;

use damselfly_protocol::number::{parse_f64, parse_i64};
use damselfly_protocol::ReplyBuf;
use damselfly_storage::{ValueRef, ZSet};

use crate::geohash::{self, Extent, Shape};
use crate::partial_sort::sort_range;
use crate::zset_family::{add_pairs, store_pairs, AddFlags};
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
    reply_coordinates(r, lon, lat);
}

fn reply_coordinates(r: &mut ReplyBuf, lon: f64, lat: f64) {
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

// ---------------------------------------------------------------------------------------------
// GEOSEARCH, GEOSEARCHSTORE, GEORADIUS[_RO], GEORADIUSBYMEMBER[_RO]

/// Which search command runs: where its centre, source key and options are, and whether it
/// may store.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// GEORADIUS (`by_member` false) or GEORADIUSBYMEMBER, with STORE/STOREDIST unless
    /// read-only.
    Radius { by_member: bool, read_only: bool },
    /// GEOSEARCH, or GEOSEARCHSTORE when `store`.
    Search { store: bool },
}

impl Form {
    fn source(self) -> usize {
        match self {
            Form::Search { store: true } => 2,
            _ => 1,
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Order {
    Unsorted,
    Asc,
    Desc,
}

/// A parsed search; `shape` is None only when the source key is missing (a member centre
/// cannot be looked up, so Redis parses on and answers empty).
struct Query<'a> {
    shape: Option<Shape>,
    with_dist: bool,
    with_hash: bool,
    with_coord: bool,
    order: Order,
    /// At most this many results; 0 for all.
    count: usize,
    /// Stop collecting at `count` results instead of taking the nearest.
    any: bool,
    store: Option<&'a [u8]>,
    store_dist: bool,
}

struct Found {
    member: Vec<u8>,
    score: f64,
    lon: f64,
    lat: f64,
    /// Meters from the centre.
    dist: f64,
}

const MEMBER_MISSING: &str = "ERR could not decode requested zset member";

fn float_at(args: &Args, i: usize, error: &str) -> Result<f64, String> {
    parse_f64(args.get(i)).ok_or_else(|| error.to_owned())
}

/// A longitude and latitude at `i`, `i + 1`, checked as GEOADD checks them.
fn position_at(args: &Args, i: usize) -> Result<(f64, f64), String> {
    let lon = float_at(args, i, errors::NOT_FLOAT)?;
    let lat = float_at(args, i + 1, errors::NOT_FLOAT)?;
    if !geohash::valid(lon, lat) {
        return Err(format!(
            "ERR invalid longitude,latitude pair {lon:.6},{lat:.6}"
        ));
    }
    Ok((lon, lat))
}

fn member_position(z: &ZSet, member: &[u8]) -> Result<(f64, f64), String> {
    let score = z.score(member).ok_or(MEMBER_MISSING)?;
    Ok(geohash::decode(score as u64))
}

fn unit_at(args: &Args, i: usize) -> Result<f64, String> {
    geohash::unit(args.get(i))
        .ok_or_else(|| "ERR unsupported unit provided. please use M, KM, FT, MI".to_owned())
}

/// `radius unit` at `i`: the extent and meters per unit.
fn radius_at(args: &Args, i: usize) -> Result<(Extent, f64), String> {
    let r = float_at(args, i, "ERR need numeric radius")?;
    if r < 0.0 {
        return Err("ERR radius cannot be negative".to_owned());
    }
    Ok((Extent::Radius(r), unit_at(args, i + 1)?))
}

/// `width height unit` at `i`: the extent and meters per unit.
fn box_at(args: &Args, i: usize) -> Result<(Extent, f64), String> {
    let width = float_at(args, i, "ERR need numeric width")?;
    let height = float_at(args, i + 1, "ERR need numeric height")?;
    if height < 0.0 || width < 0.0 {
        return Err("ERR height or width cannot be negative".to_owned());
    }
    Ok((Extent::Box { width, height }, unit_at(args, i + 2)?))
}

/// Parses a search as Redis does, in its order: the centre member is looked up (and a missing
/// one reported) as soon as it is read, before later options are checked.
fn parse<'a>(args: &Args<'a>, form: Form, z: Option<&ZSet>) -> Result<Query<'a>, String> {
    let mut q = Query {
        shape: None,
        with_dist: false,
        with_hash: false,
        with_coord: false,
        order: Order::Unsorted,
        count: 0,
        any: false,
        store: None,
        store_dist: false,
    };
    let mut centre = None;
    let mut extent = None;
    let first_option = match form {
        Form::Radius {
            by_member: false, ..
        } => {
            centre = Some(position_at(args, 2)?);
            extent = Some(radius_at(args, 4)?);
            6
        }
        Form::Radius {
            by_member: true, ..
        } => {
            if let Some(z) = z {
                centre = Some(member_position(z, args.get(2))?);
                extent = Some(radius_at(args, 3)?);
            }
            5
        }
        Form::Search { store } => {
            if store {
                q.store = Some(args.get(1));
            }
            form.source() + 1
        }
    };
    let (searching, may_store) = match form {
        Form::Radius { read_only, .. } => (false, !read_only),
        Form::Search { .. } => (true, false),
    };
    let (mut from_member, mut from_lonlat, mut by_radius, mut by_box) =
        (false, false, false, false);
    let mut i = first_option;
    while i < args.len() {
        let left = args.len() - i - 1;
        let option = args.get(i).to_ascii_lowercase();
        match option.as_slice() {
            b"withdist" => q.with_dist = true,
            b"withhash" => q.with_hash = true,
            b"withcoord" => q.with_coord = true,
            b"any" => q.any = true,
            b"asc" => q.order = Order::Asc,
            b"desc" => q.order = Order::Desc,
            b"count" if left >= 1 => {
                let n = parse_i64(args.get(i + 1)).ok_or(errors::NOT_INT)?;
                if n <= 0 {
                    return Err("ERR COUNT must be > 0".to_owned());
                }
                q.count = usize::try_from(n).unwrap_or(usize::MAX);
                i += 1;
            }
            b"store" | b"storedist" if left >= 1 && may_store => {
                q.store = Some(args.get(i + 1));
                q.store_dist = option == b"storedist";
                i += 1;
            }
            b"storedist" if form == (Form::Search { store: true }) => q.store_dist = true,
            b"frommember" if left >= 1 && searching && !from_lonlat => {
                if let Some(z) = z {
                    centre = Some(member_position(z, args.get(i + 1))?);
                }
                from_member = true;
                i += 1;
            }
            b"fromlonlat" if left >= 2 && searching && !from_member => {
                centre = Some(position_at(args, i + 1)?);
                from_lonlat = true;
                i += 2;
            }
            b"byradius" if left >= 2 && searching && !by_box => {
                extent = Some(radius_at(args, i + 1)?);
                by_radius = true;
                i += 2;
            }
            b"bybox" if left >= 3 && searching && !by_radius => {
                extent = Some(box_at(args, i + 1)?);
                by_box = true;
                i += 3;
            }
            _ => return Err(errors::SYNTAX.to_owned()),
        }
        i += 1;
    }
    if q.store.is_some() && (q.with_dist || q.with_hash || q.with_coord) {
        let what = match form {
            Form::Search { .. } => "GEOSEARCHSTORE",
            Form::Radius { .. } => "STORE option in GEORADIUS",
        };
        return Err(format!(
            "ERR {what} is not compatible with WITHDIST, WITHHASH and WITHCOORD options"
        ));
    }
    let name = String::from_utf8_lossy(args.get(0));
    if searching && !(from_member || from_lonlat) {
        return Err(format!(
            "ERR exactly one of FROMMEMBER or FROMLONLAT can be specified for {name}"
        ));
    }
    if searching && !(by_radius || by_box) {
        return Err(format!(
            "ERR exactly one of BYRADIUS and BYBOX can be specified for {name}"
        ));
    }
    if q.any && q.count == 0 {
        return Err("ERR the ANY argument requires COUNT argument".to_owned());
    }
    // COUNT returns the nearest ones, unless ANY asks for the first found.
    if q.count != 0 && q.order == Order::Unsorted && !q.any {
        q.order = Order::Asc;
    }
    q.shape = centre
        .zip(extent)
        .map(|((lon, lat), (extent, to_meters))| Shape {
            lon,
            lat,
            extent,
            to_meters,
        });
    Ok(q)
}

/// The members inside the area, cell by cell in Redis's order; with `limit` (ANY) it stops
/// once that many are found.
fn collect(z: &ZSet, shape: &Shape, limit: usize) -> Vec<Found> {
    let mut found = Vec::new();
    let full = |found: &Vec<Found>| limit != 0 && found.len() >= limit;
    for (min, max) in shape.score_ranges() {
        if full(&found) {
            break;
        }
        let start = z.count_before(&|s, _| s < min);
        let end = z.count_before(&|s, _| s < max);
        for (member, score) in z.range(start, end) {
            let (lon, lat) = geohash::decode(score as u64);
            if let Some(dist) = shape.distance_within(lon, lat) {
                found.push(Found {
                    member,
                    score,
                    lon,
                    lat,
                    dist,
                });
            }
            if full(&found) {
                break;
            }
        }
    }
    found
}

/// Redis's comparison of distances (its qsort callback).
fn nearer(a: &Found, b: &Found) -> Ordering {
    if a.dist > b.dist {
        Ordering::Greater
    } else if a.dist == b.dist {
        Ordering::Equal
    } else {
        Ordering::Less
    }
}

/// Orders the results and keeps the first `count`: a full sort is stable, as glibc's qsort
/// (a merge sort) is; a partial one follows Redis's pqsort, so equal distances come out in
/// Redis's order either way.
fn sort_and_cut(found: &mut Vec<Found>, order: Order, count: usize) {
    let returned = if count == 0 {
        found.len()
    } else {
        count.min(found.len())
    };
    let farther = |a: &Found, b: &Found| nearer(a, b).reverse();
    match order {
        Order::Unsorted => {}
        Order::Asc if returned == found.len() => found.sort_by(nearer),
        Order::Desc if returned == found.len() => found.sort_by(farther),
        Order::Asc => sort_range(found, 0, returned - 1, &nearer),
        Order::Desc => sort_range(found, 0, returned - 1, &farther),
    }
    found.truncate(returned);
}

fn search(ctx: &mut ExecCtx, args: &Args, form: Form) {
    let src = args.get(form.source());
    let z = match ctx.lookup_read(src).map(|e| e.value()) {
        None => None,
        Some(ValueRef::ZSet(z)) => Some(z),
        Some(_) => return ctx.wrongtype(),
    };
    let (q, found) = match parse(args, form, z) {
        Err(e) => return ctx.error(&e),
        Ok(q) => {
            let found = match (z, &q.shape) {
                (Some(z), Some(shape)) => {
                    let mut found = collect(z, shape, if q.any { q.count } else { 0 });
                    sort_and_cut(&mut found, q.order, q.count);
                    found
                }
                _ => Vec::new(),
            };
            (q, found)
        }
    };
    let to_meters = q.shape.map_or(1.0, |s| s.to_meters);
    if let Some(dst) = q.store {
        let items: Vec<(Vec<u8>, f64)> = found
            .into_iter()
            .map(|f| {
                let score = if q.store_dist {
                    f.dist / to_meters
                } else {
                    f.score
                };
                (f.member, score)
            })
            .collect();
        let longest = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
        let start = ZSet::sized_for(items.len(), longest, &ctx.limits());
        let event = match form {
            Form::Search { .. } => "geosearchstore",
            Form::Radius { .. } => "georadiusstore",
        };
        return store_pairs(ctx, dst, &items, start, event);
    }
    let r = &mut ctx.reply;
    let extras = usize::from(q.with_dist) + usize::from(q.with_hash) + usize::from(q.with_coord);
    r.array(found.len());
    for f in &found {
        if extras > 0 {
            r.array(extras + 1);
        }
        r.bulk(&f.member);
        if q.with_dist {
            r.bulk(format!("{:.4}", f.dist / to_meters).as_bytes());
        }
        if q.with_hash {
            r.int(f.score as i64);
        }
        if q.with_coord {
            reply_coordinates(r, f.lon, f.lat);
        }
    }
}

/// GEOSEARCH key FROMMEMBER m | FROMLONLAT lon lat  BYRADIUS r unit | BYBOX w h unit
/// [ASC|DESC] [COUNT n [ANY]] [WITHCOORD] [WITHDIST] [WITHHASH].
pub fn geosearch(ctx: &mut ExecCtx, args: &Args) {
    search(ctx, args, Form::Search { store: false });
}

/// GEOSEARCHSTORE dst src ... [STOREDIST]: the results as a sorted set under `dst` (scores
/// the geohashes, or the distances with STOREDIST); replies with their count.
pub fn geosearchstore(ctx: &mut ExecCtx, args: &Args) {
    search(ctx, args, Form::Search { store: true });
}

/// GEORADIUS key lon lat radius unit [options] [STORE key | STOREDIST key].
pub fn georadius(ctx: &mut ExecCtx, args: &Args) {
    let form = Form::Radius {
        by_member: false,
        read_only: false,
    };
    search(ctx, args, form);
}

pub fn georadius_ro(ctx: &mut ExecCtx, args: &Args) {
    let form = Form::Radius {
        by_member: false,
        read_only: true,
    };
    search(ctx, args, form);
}

/// GEORADIUSBYMEMBER key member radius unit [options] [STORE key | STOREDIST key].
pub fn georadiusbymember(ctx: &mut ExecCtx, args: &Args) {
    let form = Form::Radius {
        by_member: true,
        read_only: false,
    };
    search(ctx, args, form);
}

pub fn georadiusbymember_ro(ctx: &mut ExecCtx, args: &Args) {
    let form = Form::Radius {
        by_member: true,
        read_only: true,
    };
    search(ctx, args, form);
}

/// Where GEORADIUS's and GEORADIUSBYMEMBER's STORE/STOREDIST destinations are, for key
/// positions and routing: each one given (the command stores into the last), as Redis's key
/// specifications report them.
pub fn store_positions<'a>(args: &'a Args) -> impl Iterator<Item = usize> + 'a {
    let mut i = 5;
    std::iter::from_fn(move || {
        while i + 1 < args.len() {
            i += 1;
            if args.is(i - 1, "store") || args.is(i - 1, "storedist") {
                i += 1;
                return Some(i - 1);
            }
        }
        None
    })
}
