//! GEOADD, GEOPOS, GEODIST and GEOHASH against Debian's redis-server: 20,000 commands over
//! seeded random positions (anywhere valid, at the limits, past them, on one meridian, not
//! numbers) added with NX, XX and CH to keys on every shard, then positions, distances in
//! every unit, geohashes and the stored scores (ZRANGE WITHSCORES) compared byte for byte, in
//! RESP2 and RESP3, inside MULTI/EXEC, with Redis's errors.

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

thread_count_tests!(geo_like_redis);
