//! Geo commands against Debian's redis-server, byte for byte, in RESP2 and RESP3 and inside
//! MULTI/EXEC, with Redis's errors:
//! - GEOADD, GEOPOS, GEODIST and GEOHASH: 20,000 commands over seeded random positions
//!   (anywhere valid, at the limits, past them, on one meridian, not numbers) added with NX, XX
//!   and CH to keys on every shard, then positions, distances in every unit, geohashes and the
//!   stored scores (ZRANGE WITHSCORES).
//! - GEOSEARCH, GEOSEARCHSTORE and the GEORADIUS family: 20,000 searches over seeded points all
//!   over the globe, in clusters, near the poles and the antimeridian, and sharing positions
//!   (so equal distances show the order Redis leaves them in), by radius and by box from
//!   tiny to larger than the Earth, with every option, storing to keys on other shards.

mod common;

use common::{assert_same, cmds, Backend, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn coordinate(rng: &mut StdRng, limit: f64) -> String {
    match rng.gen_range(0..12) {
        0 => format!("{limit}"),
        1 => format!("-{limit}"),
        2 => format!("{}", limit + 0.5),
        3 => "x".into(),
        4 => "0".into(),
        5 => "12.5".into(),
        _ => format!("{:.6}", rng.gen_range(-limit..limit)),
    }
}

fn geo_like_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    let (mut r, mut o) = (redis.raw(), ours.raw());
    let mut rng = StdRng::seed_from_u64(16);
    let keys = ["g1", "g2", "g3", "g4", "{t}g", "str"];
    let members = ["a", "b", "c", "d", "e", "f", "g", "h"];
    let mut stream: Vec<Vec<String>> = vec![vec!["SET".into(), "str".into(), "v".into()]];
    for _ in 0..5000 {
        let key = keys[rng.gen_range(0..keys.len())].to_string();
        let mut cmd = vec!["GEOADD".to_string(), key.clone()];
        for flag in ["NX", "XX", "CH"] {
            if rng.gen_bool(0.15) {
                cmd.push(flag.into());
            }
        }
        for _ in 0..rng.gen_range(1..4) {
            cmd.push(coordinate(&mut rng, 180.0));
            cmd.push(coordinate(&mut rng, 85.05112878));
            cmd.push(members[rng.gen_range(0..members.len())].into());
        }
        if rng.gen_bool(0.05) {
            cmd.pop();
        }
        stream.push(cmd);
        let (m1, m2) = (
            members[rng.gen_range(0..members.len())].to_string(),
            members[rng.gen_range(0..members.len())].to_string(),
        );
        let unit = ["m", "km", "ft", "mi", "KM", "Mi", "yd"][rng.gen_range(0..7)].to_string();
        stream.push(vec![
            "GEODIST".into(),
            key.clone(),
            m1.clone(),
            m2.clone(),
            unit,
        ]);
        stream.push(vec!["GEODIST".into(), key.clone(), m1.clone(), m2.clone()]);
        stream.push(vec![
            "GEOPOS".into(),
            key.clone(),
            m1.clone(),
            m2.clone(),
            "zz".into(),
        ]);
        stream.push(vec!["GEOHASH".into(), key.clone(), m1, m2, "zz".into()]);
    }
    // Points on one meridian, where the distance is the difference of latitudes.
    stream.push(
        cmds(&[&[
            "GEOADD", "line", "7.5", "10", "p", "7.5", "-40", "q", "7.5", "85", "r",
        ]])
        .remove(0),
    );
    for (a, b) in [("p", "q"), ("q", "r"), ("p", "r")] {
        stream.push(vec![
            "GEODIST".into(),
            "line".into(),
            a.into(),
            b.into(),
            "km".into(),
        ]);
    }
    for key in keys.iter().chain(["line"].iter()) {
        stream.push(vec![
            "ZRANGE".into(),
            key.to_string(),
            "0".into(),
            "-1".into(),
            "WITHSCORES".into(),
        ]);
    }
    assert_same(&mut r, &mut o, &stream);
    assert_same(
        &mut r,
        &mut o,
        &cmds(&[
            &[
                "GEOADD",
                "sicily",
                "13.361389",
                "38.115556",
                "Palermo",
                "15.087269",
                "37.502669",
                "Catania",
            ],
            &["GEOADD", "sicily", "1", "1"],
            &["GEOADD", "sicily", "NX", "XX", "1", "1", "a"],
            &["GEOADD", "sicily", "1", "1", "a", "2"],
            &["GEOADD", "sicily", "181", "10", "x"],
            &["GEOADD", "sicily", "1", "86", "x", "1", "1", "y"],
            &["ZCARD", "sicily"],
            &[
                "GEOADD",
                "sicily",
                "CH",
                "13.361389",
                "38.115556",
                "Palermo",
                "1",
                "1",
                "a",
            ],
            &[
                "GEOADD", "sicily", "XX", "CH", "2", "2", "a", "3", "3", "new",
            ],
            &["GEODIST", "sicily", "Palermo", "Catania", "km", "x"],
            &["GEODIST", "sicily", "Palermo"],
            &["GEODIST", "nokey", "a", "b"],
            &["GEOPOS", "nokey", "a", "b"],
            &["GEOHASH", "nokey", "a"],
            &["GEOPOS", "sicily"],
            &["GEOHASH", "sicily"],
            &["GEOPOS", "str", "a"],
            &["GEODIST", "str", "a", "b"],
            &["GEOADD", "str", "1", "1", "a"],
            &["MULTI"],
            &["GEOADD", "sicily", "12", "40", "Rome"],
            &["GEOPOS", "sicily", "Rome"],
            &["GEODIST", "sicily", "Rome", "Palermo", "mi"],
            &["EXEC"],
            &["HELLO", "3"],
            &["GEOPOS", "sicily", "Palermo", "nosuch"],
            &["GEODIST", "sicily", "Palermo", "Catania"],
            &["GEOHASH", "sicily", "Palermo", "nosuch"],
            &["HELLO", "2"],
        ]),
    );
}

/// A position for the search test: anywhere, in a cluster, near a pole or the antimeridian,
/// or one already used (several members then share it).
fn search_point(rng: &mut StdRng, used: &mut Vec<(String, String)>) -> (String, String) {
    const LAT: f64 = 85.05112878;
    let p = match rng.gen_range(0..10) {
        0 | 1 if !used.is_empty() => used[rng.gen_range(0..used.len())].clone(),
        2 => (
            format!("{:.6}", rng.gen_range(-180.0..180.0)),
            format!(
                "{:.6}",
                rng.gen_range(80.0..LAT) * if rng.gen() { 1.0 } else { -1.0 }
            ),
        ),
        3 => (
            format!(
                "{:.6}",
                rng.gen_range(179.0..180.0) * if rng.gen() { 1.0 } else { -1.0 }
            ),
            format!("{:.6}", rng.gen_range(-60.0..60.0)),
        ),
        4..=6 => (
            format!("{:.6}", 13.36 + rng.gen_range(-0.3..0.3)),
            format!("{:.6}", 38.11 + rng.gen_range(-0.3..0.3)),
        ),
        _ => (
            format!("{:.6}", rng.gen_range(-180.0..180.0)),
            format!("{:.6}", rng.gen_range(-LAT..LAT)),
        ),
    };
    used.push(p.clone());
    p
}

/// A radius or box side: zero, tiny, city-sized, continent-sized or beyond the Earth's size.
fn search_distance(rng: &mut StdRng) -> String {
    match rng.gen_range(0..10) {
        0 => "0".into(),
        1 => format!("{:.3}", rng.gen_range(0.0..2.0)),
        2..=5 => format!("{:.2}", rng.gen_range(1.0..60.0)),
        6 | 7 => format!("{:.1}", rng.gen_range(100.0..3000.0)),
        _ => format!("{}", rng.gen_range(5000..40000)),
    }
}

/// The options after the centre and area, in random order, sometimes wrong.
fn search_options(rng: &mut StdRng, with: bool, stores: &[&str]) -> Vec<String> {
    let mut opts: Vec<Vec<String>> = Vec::new();
    if with {
        for w in ["WITHCOORD", "WITHDIST", "WITHHASH"] {
            if rng.gen_bool(0.3) {
                opts.push(vec![w.into()]);
            }
        }
    }
    match rng.gen_range(0..4) {
        0 => opts.push(vec!["ASC".into()]),
        1 => opts.push(vec!["DESC".into()]),
        _ => {}
    }
    if rng.gen_bool(0.5) {
        let n = ["1", "2", "3", "5", "10", "0", "-1", "x"][rng.gen_range(0..8)];
        let mut count = vec!["COUNT".to_string(), n.to_string()];
        if rng.gen_bool(0.3) {
            count.push("ANY".into());
        }
        opts.push(count);
    } else if rng.gen_bool(0.03) {
        opts.push(vec!["ANY".into()]);
    }
    for s in stores {
        opts.push(s.split(' ').map(String::from).collect());
    }
    if rng.gen_bool(0.02) {
        opts.push(vec!["BOGUS".into()]);
    }
    let n = opts.len();
    for i in 0..n {
        opts.swap(i, rng.gen_range(0..n));
    }
    opts.concat()
}

fn geo_search_like_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    let (mut r, mut o) = (redis.raw(), ours.raw());
    let mut rng = StdRng::seed_from_u64(1616);
    let sources = ["p1", "p2", "{t}p", "big", "nokey", "str"];
    let dests = ["d1", "d2", "{t}d", "str2"];
    let units = ["m", "km", "ft", "mi", "KM", "yd"];
    let mut used = Vec::new();
    let mut stream = cmds(&[&["SET", "str", "v"], &["SET", "str2", "v"]]);
    // "big" holds more members than a listpack does.
    for i in 0..300 {
        let (lon, lat) = search_point(&mut rng, &mut used);
        stream.push(vec![
            "GEOADD".into(),
            "big".into(),
            lon,
            lat,
            format!("m{i}"),
        ]);
    }
    for round in 0..10_500 {
        let src = sources[rng.gen_range(0..sources.len())].to_string();
        if src.starts_with('p') || src == "{t}p" {
            let (lon, lat) = search_point(&mut rng, &mut used);
            let member = format!("m{}", rng.gen_range(0..60));
            stream.push(vec!["GEOADD".into(), src.clone(), lon, lat, member]);
        }
        if round % 500 == 250 {
            stream.push(vec!["HELLO".into(), "3".into()]);
        } else if round % 500 == 499 {
            stream.push(vec!["HELLO".into(), "2".into()]);
        }
        let (lon, lat) = search_point(&mut rng, &mut used);
        let member = format!("m{}", rng.gen_range(0..70));
        let unit = units[rng.gen_range(0..units.len())].to_string();
        let dst = dests[rng.gen_range(0..dests.len())].to_string();
        let from = if rng.gen_bool(0.5) {
            vec!["FROMMEMBER".to_string(), member.clone()]
        } else {
            vec!["FROMLONLAT".to_string(), lon.clone(), lat.clone()]
        };
        let by = if rng.gen_bool(0.5) {
            vec![
                "BYRADIUS".to_string(),
                search_distance(&mut rng),
                unit.clone(),
            ]
        } else {
            let (w, h) = (search_distance(&mut rng), search_distance(&mut rng));
            vec!["BYBOX".to_string(), w, h, unit.clone()]
        };
        let mut area = [from, by].concat();
        match rng.gen_range(0..40) {
            0 => area.truncate(area.len() - area.len().min(3)),
            1 => area.extend(["BYRADIUS".to_string(), "1".into(), "km".into()]),
            2 => area.extend(["FROMLONLAT".to_string(), "1".into(), "1".into()]),
            3 => area[1] = "-5".into(),
            _ => {}
        }
        let radius = search_distance(&mut rng);
        let command = match rng.gen_range(0..8) {
            0 | 1 => [
                vec!["GEOSEARCH".to_string(), src.clone()],
                area,
                search_options(&mut rng, true, &[]),
            ]
            .concat(),
            2 | 3 => {
                let storedist: &[&str] = if rng.gen() { &["STOREDIST"] } else { &[] };
                let with = rng.gen_bool(0.05);
                [
                    vec!["GEOSEARCHSTORE".to_string(), dst.clone(), src.clone()],
                    area,
                    search_options(&mut rng, with, storedist),
                ]
                .concat()
            }
            4 | 5 => {
                let name = ["GEORADIUS", "GEORADIUS_RO"][rng.gen_range(0..2)];
                let store = format!("{} {dst}", ["STORE", "STOREDIST"][rng.gen_range(0..2)]);
                let stores: Vec<&str> = if rng.gen_bool(0.3) {
                    vec![&store]
                } else {
                    vec![]
                };
                let with = stores.is_empty() || rng.gen_bool(0.05);
                [
                    vec![name.to_string(), src.clone(), lon, lat, radius, unit],
                    search_options(&mut rng, with, &stores),
                ]
                .concat()
            }
            _ => {
                let name = ["GEORADIUSBYMEMBER", "GEORADIUSBYMEMBER_RO"][rng.gen_range(0..2)];
                let store = format!("{} {dst}", ["STORE", "STOREDIST"][rng.gen_range(0..2)]);
                let stores: Vec<&str> = if rng.gen_bool(0.3) {
                    vec![&store]
                } else {
                    vec![]
                };
                let with = stores.is_empty() || rng.gen_bool(0.05);
                [
                    vec![name.to_string(), src.clone(), member, radius, unit],
                    search_options(&mut rng, with, &stores),
                ]
                .concat()
            }
        };
        let stored = command[0].contains("STORE") || command.iter().any(|a| a.starts_with("STORE"));
        stream.push(command);
        if stored {
            stream.push(vec![
                "ZRANGE".into(),
                dst,
                "0".into(),
                "-1".into(),
                "WITHSCORES".into(),
            ]);
        }
    }
    stream.extend(cmds(&[
        &["OBJECT", "ENCODING", "big"],
        &[
            "GEOSEARCHSTORE",
            "d1",
            "big",
            "FROMLONLAT",
            "0",
            "0",
            "BYRADIUS",
            "30000",
            "km",
        ],
        &["OBJECT", "ENCODING", "d1"],
        &["MULTI"],
        &[
            "GEOSEARCH",
            "big",
            "FROMLONLAT",
            "13.3",
            "38.1",
            "BYRADIUS",
            "50",
            "km",
            "COUNT",
            "3",
        ],
        &[
            "GEORADIUS",
            "big",
            "13.3",
            "38.1",
            "50",
            "km",
            "STORE",
            "{t}d",
        ],
        &["EXEC"],
        &[
            "COMMAND",
            "GETKEYS",
            "GEORADIUS",
            "k",
            "1",
            "1",
            "1",
            "km",
            "STORE",
            "a",
            "STOREDIST",
            "b",
        ],
        &[
            "COMMAND",
            "GETKEYS",
            "GEORADIUSBYMEMBER",
            "k",
            "m",
            "1",
            "km",
            "COUNT",
            "2",
            "STORE",
            "x",
        ],
        &[
            "COMMAND",
            "GETKEYS",
            "GEOSEARCHSTORE",
            "d",
            "s",
            "FROMLONLAT",
            "1",
            "1",
            "BYRADIUS",
            "1",
            "km",
        ],
        &[
            "COMMAND",
            "GETKEYS",
            "GEORADIUS_RO",
            "k",
            "1",
            "1",
            "1",
            "km",
        ],
    ]));
    assert!(stream.len() >= 20_000, "{} commands", stream.len());
    let mut searches = 0;
    for cmd in &stream {
        searches += usize::from(cmd[0].starts_with("GEOSEARCH") || cmd[0].starts_with("GEORADIUS"));
    }
    assert!(searches >= 10_000, "{searches} searches");
    assert_same(&mut r, &mut o, &stream);
}

thread_count_tests!(geo_like_redis, geo_search_like_redis);
