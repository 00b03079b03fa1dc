//! `damselfly-bench hitrate`: the hit rate a server keeps as a cache under `maxmemory`, per
//! eviction policy. Owns the seeded Zipfian trace, its cache-aside replay and the markdown table.
//!
//! The trace: request ranks drawn from rand_distr's Zipf sampler (exponent `--alpha`, 0.99) over
//! `--keys` keys, each rank mapped to a key `key:{id}` through a seeded shuffle, so popularity
//! does not follow key names (nor the shards they hash to). One seed gives one trace.
//!
//! The replay, against a freshly started server per policy (`--maxmemory M
//! --maxmemory-policy P`): GET the key; on a miss SET it (`--value-size` bytes), in batches of
//! pipelined GETs, then the batch's SETs, over a few connections taking batches in trace order.
//! The first `--warmup` share of the trace fills the cache; the hit rate counts the rest. A key
//! that misses twice in one batch counts two misses and is SET once.
//!
//! maxmemory is the same for every server: Redis's `used_memory` after `DEBUG POPULATE` of the
//! `--fit` share of the keys (`key:0`.., the trace's key names and value size) into a fresh
//! Redis, so about that share of the keys fits in Redis. A server that does not keep to it (SETs
//! refused with OOM, or `used_memory` well above it) is reported as such instead of a hit rate.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::Zipf;

use crate::servers::{Launcher, Reply, Server, ServerArgs};

#[derive(clap::Parser, Clone, Debug)]
pub struct HitrateArgs {
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Requests in the trace, warm-up included.
    #[arg(long, default_value_t = 10_000_000)]
    pub requests: usize,
    /// Distinct keys the trace draws from.
    #[arg(long, default_value_t = 1_000_000)]
    pub keys: u32,
    /// Bytes of every value SET.
    #[arg(long, default_value_t = 100)]
    pub value_size: usize,
    /// The Zipf exponent.
    #[arg(long, default_value_t = 0.99)]
    pub alpha: f64,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The share of the keys that should fit: sets maxmemory (see the module's doc).
    #[arg(long, default_value_t = 0.1)]
    pub fit: f64,
    /// maxmemory in bytes, instead of measuring it from --fit.
    #[arg(long)]
    pub maxmemory: Option<u64>,
    /// The share of the trace replayed before the hit rate is counted.
    #[arg(long, default_value_t = 0.2)]
    pub warmup: f64,
    /// Client connections replaying the trace.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Requests per pipelined batch.
    #[arg(long, default_value_t = 64)]
    pub batch: usize,
    /// Redis's eviction policies to run (comma-separated; empty: none).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allkeys-lru,allkeys-lfu,allkeys-random"
    )]
    pub redis_policies: Vec<String>,
    /// Damselfly's eviction policies to run (comma-separated; empty: none); `cache-mode`
    /// runs Damselfly's cache mode (`--cache-mode yes`).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "allkeys-lru,allkeys-lfu,allkeys-random,cache-mode"
    )]
    pub damselfly_policies: Vec<String>,
}

/// The key id of each popularity rank, most popular first: the first draw of a trace's
/// generator.
fn key_of_rank(keys: u32, rng: &mut StdRng) -> Vec<u32> {
    let mut ids: Vec<u32> = (0..keys).collect();
    ids.shuffle(rng);
    ids
}

/// The key ids (of `key:0`..`key:{keys-1}`) of a seeded Zipfian trace of `requests` requests.
fn trace(keys: u32, requests: usize, alpha: f64, seed: u64) -> Result<Vec<u32>, String> {
    let zipf = Zipf::new(u64::from(keys), alpha).map_err(|e| format!("zipf: {e}"))?;
    let mut rng = StdRng::seed_from_u64(seed);
    let key_of_rank = key_of_rank(keys, &mut rng);
    Ok((0..requests)
        .map(|_| {
            // Ranks are 1..=keys; the clamp guards against a float rounding past the end.
            let rank = (rng.sample(zipf) as usize).clamp(1, keys as usize);
            key_of_rank[rank - 1]
        })
        .collect())
}

fn key_name(id: u32) -> Vec<u8> {
    format!("key:{id}").into_bytes()
}

/// What one replay of part of the trace saw.
#[derive(Default, Debug, Clone, Copy)]
struct Replayed {
    hits: u64,
    misses: u64,
    /// SETs the server refused for lack of memory.
    oom: u64,
}

/// Replays `requests` cache-aside over `args.connections` connections (see the module's doc).
fn replay(server: &Server, requests: &[u32], args: &HitrateArgs) -> Result<Replayed, String> {
    let next = AtomicUsize::new(0);
    let value = vec![b'v'; args.value_size];
    let connection = || -> Result<Replayed, String> {
        let mut pipe = server.connect()?;
        let mut seen = Replayed::default();
        let mut missed: Vec<u32> = Vec::with_capacity(args.batch);
        loop {
            let start = next.fetch_add(args.batch, Ordering::Relaxed);
            if start >= requests.len() {
                return Ok(seen);
            }
            let batch = &requests[start..(start + args.batch).min(requests.len())];
            for &id in batch {
                pipe.queue(&[b"GET", &key_name(id)]);
            }
            pipe.flush()?;
            missed.clear();
            for &id in batch {
                match pipe.reply()? {
                    Reply::BulkString(_) => seen.hits += 1,
                    Reply::Null => {
                        seen.misses += 1;
                        if !missed.contains(&id) {
                            missed.push(id);
                        }
                    }
                    other => return Err(format!("GET replied {other:?}")),
                }
            }
            for &id in &missed {
                pipe.queue(&[b"SET", &key_name(id), &value]);
            }
            pipe.flush()?;
            for _ in &missed {
                match pipe.reply()? {
                    Reply::SimpleString(_) => {}
                    Reply::Error(e) if e.starts_with("OOM") => seen.oom += 1,
                    other => return Err(format!("SET replied {other:?}")),
                }
            }
        }
    };
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..args.connections)
            .map(|_| scope.spawn(connection))
            .collect();
        workers.into_iter().try_fold(Replayed::default(), |sum, w| {
            let one = w
                .join()
                .map_err(|_| "a replay thread panicked".to_string())??;
            Ok(Replayed {
                hits: sum.hits + one.hits,
                misses: sum.misses + one.misses,
                oom: sum.oom + one.oom,
            })
        })
    })
}

/// How far above maxmemory `used_memory` may go before the server counts as not keeping to
/// it: Redis evicts after the write that crossed the limit, so it overshoots a little.
const OVERSHOOT: f64 = 1.25;

/// Why a run's hit rate would mean nothing, if it would: the server refused SETs (OOM: it does
/// not evict, or had nothing left to evict), or holds well over maxmemory.
fn disrespected(maxmemory: u64, used: u64, oom: u64) -> Option<String> {
    let ratio = used as f64 / maxmemory.max(1) as f64;
    if oom > 0 {
        Some(format!("refused {oom} SETs with OOM rather than make room"))
    } else if ratio > OVERSHOOT {
        Some(format!(
            "used_memory is {ratio:.1}x maxmemory: it does not keep to maxmemory"
        ))
    } else {
        None
    }
}

/// What the server reported at the end.
struct Reported {
    /// Keys held at the end (DBSIZE): what the memory bought.
    keys: u64,
    evicted: u64,
    keyspace_hits: u64,
    keyspace_misses: u64,
    used: u64,
    rss: u64,
}

impl Reported {
    fn of(server: &Server) -> Reported {
        let stat = |f| server.info_field("stats", f).unwrap_or(0);
        let (used, rss) = server.memory();
        let keys = server.command(&["DBSIZE"]).ok();
        Reported {
            keys: keys
                .and_then(|k| k.trim_start_matches(':').parse().ok())
                .unwrap_or(0),
            evicted: stat("evicted_keys"),
            keyspace_hits: stat("keyspace_hits"),
            keyspace_misses: stat("keyspace_misses"),
            used,
            rss,
        }
    }
}

enum Outcome {
    /// It kept to maxmemory.
    Measured {
        /// Hits over the measured part of the trace.
        hit_rate: f64,
        /// Requests (GETs) per second over the measured part.
        per_sec: f64,
        reported: Reported,
    },
    /// It did not (why); no hit rate.
    Disrespected(String, Reported),
    /// It did not start, or stopped answering.
    Failed(String),
}

struct Row {
    policy: String,
    server: &'static str,
    outcome: Outcome,
}

/// One policy on one fresh server.
fn run_one(
    launcher: &Launcher,
    name: &str,
    policy: &str,
    maxmemory: u64,
    trace: &[u32],
    args: &HitrateArgs,
) -> Result<Outcome, String> {
    let (flag, value) = match policy {
        "cache-mode" => ("--cache-mode", "yes"),
        p => ("--maxmemory-policy", p),
    };
    let extra = [
        "--maxmemory".to_string(),
        maxmemory.to_string(),
        flag.to_string(),
        value.to_string(),
    ];
    let mut server = launcher.start(name, &extra)?;
    let applied = server.info_field("memory", "maxmemory");
    if applied != Some(maxmemory) {
        return Err(format!(
            "INFO reports maxmemory {applied:?}, not {maxmemory}"
        ));
    }
    let warm = (trace.len() as f64 * args.warmup) as usize;
    let warmed = replay(&server, &trace[..warm], args)?;
    if let Some(why) = disrespected(maxmemory, server.memory().0, warmed.oom) {
        let reported = Reported::of(&server);
        server.stop();
        return Ok(Outcome::Disrespected(
            format!("{why} (after warm-up)"),
            reported,
        ));
    }
    let started = Instant::now();
    let measured = replay(&server, &trace[warm..], args)?;
    let per_sec = (trace.len() - warm) as f64 / started.elapsed().as_secs_f64();
    let reported = Reported::of(&server);
    server.stop();
    if let Some(why) = disrespected(maxmemory, reported.used, measured.oom) {
        return Ok(Outcome::Disrespected(why, reported));
    }
    let total = (measured.hits + measured.misses).max(1) as f64;
    Ok(Outcome::Measured {
        hit_rate: measured.hits as f64 / total,
        per_sec,
        reported,
    })
}

/// Redis's `used_memory` with `count` of the trace's keys and values in a fresh Redis.
fn measure_maxmemory(launcher: &Launcher, count: u64, size: usize) -> Result<u64, String> {
    let mut redis = launcher.start("redis", &[])?;
    redis.populate(count, "key", size as u64)?;
    let (used, _) = redis.memory();
    redis.stop();
    Ok(used)
}

/// Runs every policy on every server and returns the markdown report.
pub fn run(args: HitrateArgs) -> Result<String, String> {
    if args.keys == 0 || args.requests == 0 || args.batch == 0 || args.connections == 0 {
        return Err("--keys, --requests, --batch and --connections must be positive".into());
    }
    let fits = args.fit > 0.0 && args.fit <= 1.0;
    if !fits || !(0.0..1.0).contains(&args.warmup) {
        return Err("--fit must be in (0, 1] and --warmup in [0, 1)".into());
    }
    let launcher = args.servers.launcher()?;
    let started = Instant::now();
    let trace = trace(args.keys, args.requests, args.alpha, args.seed)?;
    eprintln!(
        "trace of {} requests over {} keys in {:.1} s",
        args.requests,
        args.keys,
        started.elapsed().as_secs_f64()
    );
    let fit_keys = ((f64::from(args.keys) * args.fit).round() as u64).max(1);
    let maxmemory = match args.maxmemory {
        Some(m) => m,
        None => measure_maxmemory(&launcher, fit_keys, args.value_size)?,
    };
    let policies = |list: &[String]| -> Vec<String> {
        list.iter().filter(|p| !p.is_empty()).cloned().collect()
    };
    let (redis, damselfly) = (
        policies(&args.redis_policies),
        policies(&args.damselfly_policies),
    );
    let mut order = redis.clone();
    order.extend(damselfly.iter().filter(|p| !redis.contains(p)).cloned());
    let mut rows = Vec::new();
    for policy in &order {
        for (server, list) in [("redis", &redis), ("damselfly", &damselfly)] {
            if !list.contains(policy) {
                continue;
            }
            let outcome = run_one(&launcher, server, policy, maxmemory, &trace, &args)
                .unwrap_or_else(Outcome::Failed);
            let row = Row {
                policy: policy.clone(),
                server,
                outcome,
            };
            eprintln!("{}", markdown_row(&row, maxmemory));
            rows.push(row);
        }
    }
    let setup = format!(
        "`damselfly-bench hitrate --requests {} --keys {} --value-size {} --alpha {} --seed {} \
         --warmup {} --batch {} --connections {}`: a Zipf trace of {} requests (the first {} \
         warm up) over {} keys; GET, then SET on a miss; keyspace hits / misses are the server's \
         for the whole run. maxmemory {} bytes: {}. Damselfly runs with `--threads {}`. {:.0} s \
         in all.\n",
        args.requests,
        args.keys,
        args.value_size,
        args.alpha,
        args.seed,
        args.warmup,
        args.batch,
        args.connections,
        args.requests,
        (args.requests as f64 * args.warmup) as usize,
        args.keys,
        maxmemory,
        match args.maxmemory {
            Some(_) => "given".to_string(),
            None => format!(
                "Redis's used_memory with {fit_keys} of the keys ({}%) populated",
                args.fit * 100.0
            ),
        },
        launcher.threads,
        started.elapsed().as_secs_f64(),
    );
    Ok(markdown(&setup, &rows, maxmemory))
}

const HEADER: &str = "| policy | server | hit rate | keys held | evicted keys | keyspace hits / misses | used_memory / maxmemory | RSS MB | requests/s |\n|---|---|---|---|---|---|---|---|---|\n";

fn markdown(setup: &str, rows: &[Row], maxmemory: u64) -> String {
    let mut out = format!("{setup}\n{HEADER}");
    for row in rows {
        out.push_str(&markdown_row(row, maxmemory));
        out.push('\n');
    }
    out
}

fn markdown_row(row: &Row, maxmemory: u64) -> String {
    let mb = |b: u64| b as f64 / 1e6;
    let reported = |r: &Reported| {
        format!(
            "{} | {} | {} / {} | {:.1} / {:.1} MB ({:.2}x) | {:.1}",
            r.keys,
            r.evicted,
            r.keyspace_hits,
            r.keyspace_misses,
            mb(r.used),
            mb(maxmemory),
            r.used as f64 / maxmemory.max(1) as f64,
            mb(r.rss)
        )
    };
    let cells = match &row.outcome {
        Outcome::Measured {
            hit_rate,
            per_sec,
            reported: r,
        } => format!("{:.2}% | {} | {per_sec:.0}", hit_rate * 100.0, reported(r)),
        Outcome::Disrespected(why, r) => format!("not measured: {why} | {} | ", reported(r)),
        Outcome::Failed(e) => format!("failed: {e} | | | | | | "),
    };
    format!("| {} | {} | {cells} |", row.policy, row.server)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rank-to-key mapping of the trace of `seed` (its generator's first draw).
    fn mapping(keys: u32, seed: u64) -> Vec<u32> {
        key_of_rank(keys, &mut StdRng::seed_from_u64(seed))
    }

    /// How often each popularity rank was requested (index 0: rank 1).
    fn rank_counts(keys: u32, requests: usize, alpha: f64, seed: u64) -> Vec<u64> {
        let mut rank_of_key = vec![0usize; keys as usize];
        for (rank, key) in mapping(keys, seed).into_iter().enumerate() {
            rank_of_key[key as usize] = rank;
        }
        let mut counts = vec![0u64; keys as usize];
        for key in trace(keys, requests, alpha, seed).unwrap() {
            counts[rank_of_key[key as usize]] += 1;
        }
        counts
    }

    #[test]
    fn one_seed_gives_one_trace() {
        let a = trace(10_000, 100_000, 0.99, 42).unwrap();
        assert_eq!(a, trace(10_000, 100_000, 0.99, 42).unwrap());
        assert_ne!(a, trace(10_000, 100_000, 0.99, 43).unwrap());
        assert!(a.iter().all(|&k| k < 10_000));
    }

    #[test]
    fn ranks_are_shuffled_onto_keys() {
        let map = mapping(1000, 1);
        let mut keys = map.clone();
        keys.sort_unstable();
        assert_eq!(keys, (0..1000).collect::<Vec<u32>>(), "a permutation");
        assert_ne!(
            map[..10],
            (0..10).collect::<Vec<u32>>()[..],
            "popularity is not name order"
        );
        assert_ne!(map, mapping(1000, 2));
        // The most requested key is rank 1's.
        let mut counts = vec![0u32; 1000];
        for k in trace(1000, 10_000, 0.99, 1).unwrap() {
            counts[k as usize] += 1;
        }
        let top = (0..1000).max_by_key(|&k| counts[k as usize]).unwrap();
        assert_eq!(top, map[0]);
    }

    #[test]
    fn ranks_follow_zipf_with_exponent_099() {
        let (keys, n, alpha) = (1000u32, 2_000_000usize, 0.99f64);
        let counts = rank_counts(keys, n, alpha, 7);
        let h: f64 = (1..=keys).map(|r| f64::from(r).powf(-alpha)).sum();
        // The top ranks get P(r) = r^-alpha / H within 4% (rank 20 has ~14k samples: 0.9% sd).
        for r in 1..=20u32 {
            let expected = n as f64 * f64::from(r).powf(-alpha) / h;
            let got = counts[r as usize - 1] as f64;
            assert!(
                (got / expected - 1.0).abs() < 0.04,
                "rank {r}: {got} requests, expected {expected:.0}"
            );
        }
        // log(count) against log(rank) over the top 100 ranks has slope -alpha.
        let points: Vec<(f64, f64)> = (1..=100usize)
            .map(|r| ((r as f64).ln(), (counts[r - 1] as f64).ln()))
            .collect();
        let mean = |f: fn(&(f64, f64)) -> f64| points.iter().map(f).sum::<f64>() / 100.0;
        let (mx, my) = (mean(|p| p.0), mean(|p| p.1));
        let slope = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum::<f64>()
            / points.iter().map(|p| (p.0 - mx).powi(2)).sum::<f64>();
        assert!((slope + alpha).abs() < 0.02, "slope {slope}");
    }

    #[test]
    fn a_server_that_does_not_evict_has_no_hit_rate() {
        assert_eq!(
            disrespected(1000, 1100, 0),
            None,
            "a small overshoot is eviction"
        );
        let oom = disrespected(1000, 900, 3).unwrap();
        assert!(oom.contains("refused 3 SETs with OOM"), "{oom}");
        let grew = disrespected(1000, 9800, 0).unwrap();
        assert!(grew.contains("9.8x maxmemory"), "{grew}");
        let rows = [
            Row {
                policy: "allkeys-lru".into(),
                server: "redis",
                outcome: Outcome::Measured {
                    hit_rate: 0.5,
                    per_sec: 1e5,
                    reported: Reported {
                        keys: 40,
                        evicted: 7,
                        keyspace_hits: 5,
                        keyspace_misses: 5,
                        used: 1_000_000,
                        rss: 5_000_000,
                    },
                },
            },
            Row {
                policy: "allkeys-lru".into(),
                server: "damselfly",
                outcome: Outcome::Disrespected(
                    grew,
                    Reported {
                        keys: 90,
                        evicted: 0,
                        keyspace_hits: 5,
                        keyspace_misses: 5,
                        used: 9_800_000,
                        rss: 20_000_000,
                    },
                ),
            },
        ];
        let table = markdown("setup\n", &rows, 1_000_000);
        assert!(table.contains("| allkeys-lru | redis | 50.00% | 40 | 7 | 5 / 5 | 1.0 / 1.0 MB (1.00x) | 5.0 | 100000 |"), "{table}");
        assert!(
            table.contains(
                "| allkeys-lru | damselfly | not measured: used_memory is 9.8x maxmemory"
            ),
            "{table}"
        );
    }
}
