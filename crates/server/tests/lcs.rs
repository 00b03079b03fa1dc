//! LCS against Debian's redis-server: 20,000 commands over seeded random strings of small
//! alphabets (so there are many equally long subsequences, and which one comes back is
//! compared too) on keys on every shard (2, 3 or 4 threads) and under one hash tag, in every
//! reply form (the string, LEN, IDX with MINMATCHLEN and WITHMATCHLEN, RESP3's map), inside
//! MULTI/EXEC, and every error in Redis's order.

mod common;

use common::{assert_same, cmds, Backend, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

fn random_string(rng: &mut StdRng) -> String {
    let alphabet = ["ab", "abc", "acgt", "abcdefghij"][rng.gen_range(0..4)].as_bytes();
    let len = rng.gen_range(0..40);
    (0..len)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

fn lcs_like_redis(b: Backend, threads: usize) {
    let redis = Server::redis();
    let ours = Server::start_with(b, threads, &[]);
    let (mut r, mut o) = (redis.raw(), ours.raw());
    let mut rng = StdRng::seed_from_u64(15);
    let keys = ["a", "b", "c", "d", "e", "f", "{t}x", "{t}y"];
    let mut stream: Vec<Vec<String>> = Vec::new();
    let line = |parts: &[&str]| parts.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    for round in 0..2700 {
        let (k1, k2) = (keys[rng.gen_range(0..8)], keys[rng.gen_range(0..8)]);
        if round % 3 == 0 {
            let v = random_string(&mut rng);
            stream.push(line(&["SET", k1, &v]));
        }
        let v = random_string(&mut rng);
        stream.push(line(&["SET", k2, &v]));
        let min = rng.gen_range(-1..6).to_string();
        for opts in [
            &[][..],
            &["LEN"],
            &["IDX"],
            &["IDX", "WITHMATCHLEN"],
            &["IDX", "MINMATCHLEN", &min],
            &["MINMATCHLEN", &min, "WITHMATCHLEN", "IDX"],
            &["len"],
        ] {
            let mut cmd = line(&["LCS", k1, k2]);
            cmd.extend(opts.iter().map(|s| s.to_string()));
            stream.push(cmd);
        }
    }
    assert_same(&mut r, &mut o, &stream);
    assert_same(
        &mut r,
        &mut o,
        &cmds(&[
            &["SET", "a", "ohmytext"],
            &["SET", "b", "mynewtext"],
            &["LCS", "a", "nosuch"],
            &["LCS", "nosuch", "other"],
            &["LCS", "a"],
            &["LCS", "a", "b", "LEN", "IDX"],
            &["LCS", "a", "b", "FOO"],
            &["LCS", "a", "b", "MINMATCHLEN"],
            &["LCS", "a", "b", "MINMATCHLEN", "x"],
            &["RPUSH", "list", "x"],
            &["LCS", "a", "list"],
            &["LCS", "list", "a", "LEN", "FOO"],
            &["SET", "n", "12345"],
            &["SET", "m", "1245"],
            &["LCS", "n", "m", "IDX", "WITHMATCHLEN"],
            &["MULTI"],
            &["LCS", "a", "b"],
            &["LCS", "a", "b", "IDX"],
            &["LCS", "a", "list"],
            &["EXEC"],
            &["HELLO", "3"],
            &["LCS", "a", "b", "IDX", "WITHMATCHLEN"],
            &["HELLO", "2"],
            // The table for two 600-byte strings is 1.4 MB: over a 1 MB limit.
            &["CONFIG", "SET", "proto-max-bulk-len", "1mb"],
            &["SET", "x", &"a".repeat(600)],
            &["SET", "y", &"a".repeat(600)],
            &["LCS", "x", "y", "LEN"],
            &["LCS", "x", "a", "LEN"],
        ]),
    );
}

thread_count_tests!(lcs_like_redis);
