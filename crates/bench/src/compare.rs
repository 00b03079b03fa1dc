//! `damselfly-bench compare`: every scenario of docs/benchmarks.md against redis-server and
//! Damselfly in one run, servers alternating (A B A B ...) for several rounds, with each
//! server's CPU time and RSS sampled from /proc around every run.

use std::path::PathBuf;
use std::time::Instant;

use crate::servers::{Server, ServerArgs};
use crate::tools::{self, Measured};

#[derive(clap::Parser, Clone, Debug)]
pub struct CompareArgs {
    /// Rounds per scenario (cells report the median and the min-max).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Tiny request counts and populations: checks the pipeline end to end in seconds.
    #[arg(long)]
    pub quick: bool,
    /// Skip memtier_benchmark even when it is on PATH.
    #[arg(long)]
    pub no_memtier: bool,
    /// Only scenarios whose key contains one of these (comma-separated).
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// The report to (re)write: the part between the compare markers is replaced.
    #[arg(long, default_value = "docs/benchmarks.md")]
    pub report: PathBuf,
    /// Where the SVG plots go.
    #[arg(long, default_value = "docs/bench")]
    pub plots: PathBuf,
}

/// How a scenario loads the servers.
#[derive(Clone, Debug)]
pub enum Load {
    /// redis-benchmark with these arguments; the named tests are probed first and those the
    /// server does not support yet are left out for it.
    RedisBenchmark {
        args: Vec<String>,
        tests: Vec<&'static str>,
    },
    /// memtier_benchmark with these arguments, for `seconds`.
    Memtier { args: Vec<String>, seconds: u64 },
    /// `DEBUG POPULATE count prefix size` on a fresh server: memory per key.
    Memory {
        count: u64,
        prefix: &'static str,
        size: u64,
    },
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub key: &'static str,
    pub title: &'static str,
    pub load: Load,
    /// Also run over the unix socket.
    pub unix: bool,
}

/// The data-type tests of redis-benchmark the issue lists, with a command probing support.
const TYPE_TESTS: &[(&str, &[&str])] = &[
    ("set", &["SET", "probe:k", "v"]),
    ("get", &["GET", "probe:k"]),
    ("incr", &["INCR", "probe:n"]),
    ("lpush", &["LPUSH", "probe:l", "v"]),
    ("rpush", &["RPUSH", "probe:l", "v"]),
    ("lpop", &["LPOP", "probe:l"]),
    ("rpop", &["RPOP", "probe:l"]),
    ("sadd", &["SADD", "probe:s", "v"]),
    ("hset", &["HSET", "probe:h", "f", "v"]),
    ("spop", &["SPOP", "probe:s"]),
    ("zadd", &["ZADD", "probe:z", "1", "v"]),
    ("lrange_100", &["LRANGE", "probe:l", "0", "99"]),
];

pub fn scenarios(quick: bool) -> Vec<Scenario> {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    // redis-benchmark with `args`, `-n` requests (a small number with --quick), these tests.
    let rb = |args: &[&str], full: u64, small: u64, tests: Vec<&'static str>| {
        let mut args = s(args);
        args.extend([
            "-n".to_string(),
            if quick { small } else { full }.to_string(),
        ]);
        Load::RedisBenchmark { args, tests }
    };
    let type_tests: Vec<&'static str> = TYPE_TESTS.iter().map(|t| t.0).collect();
    let mut list = vec![
        Scenario {
            key: "memtier-default",
            title:
                "memtier_benchmark defaults: 4 threads x 50 clients, SET:GET 1:10, 32-byte values",
            load: Load::Memtier {
                args: Vec::new(),
                seconds: if quick { 2 } else { 20 },
            },
            unix: true,
        },
        Scenario {
            key: "memtier-pipeline16",
            title: "memtier_benchmark defaults with --pipeline=16",
            load: Load::Memtier {
                args: s(&["--pipeline=16"]),
                seconds: if quick { 2 } else { 20 },
            },
            unix: true,
        },
        Scenario {
            key: "set-get-100k",
            title: "50 connections, 100-byte values, 100,000 keys, SET then GET",
            load: rb(
                &["-c", "50", "-d", "100", "-r", "100000"],
                500_000,
                20_000,
                vec!["set", "get"],
            ),
            unix: true,
        },
    ];
    for depth in ["1", "16"] {
        list.push(Scenario {
            key: if depth == "1" {
                "types-P1"
            } else {
                "types-P16"
            },
            title: if depth == "1" {
                "redis-benchmark data-type tests, 50 clients, -P 1"
            } else {
                "redis-benchmark data-type tests, 50 clients, -P 16"
            },
            load: rb(
                &["-c", "50", "-P", depth, "-r", "100000"],
                if depth == "1" { 200_000 } else { 1_000_000 },
                20_000,
                type_tests.clone(),
            ),
            unix: true,
        });
    }
    list.push(Scenario {
        key: "types-P1-hotkey",
        title: "redis-benchmark data-type tests, 50 clients, -P 1, every request on one key",
        load: rb(
            &["-c", "50", "-P", "1"],
            200_000,
            20_000,
            type_tests.clone(),
        ),
        unix: true,
    });
    list.push(Scenario {
        key: "large-values",
        title: "SET/GET of 64 KB values, 50 clients",
        load: rb(
            &["-c", "50", "-d", "65536", "-r", "1000"],
            100_000,
            2_000,
            vec!["set", "get"],
        ),
        unix: true,
    });
    for (prefix, size) in [("key", 100), ("k", 10)] {
        list.push(Scenario {
            key: if size == 100 {
                "memory-100b"
            } else {
                "memory-10b"
            },
            title: if size == 100 {
                "memory per key: DEBUG POPULATE 1000000 key 100"
            } else {
                "memory per key: DEBUG POPULATE 1000000 k 10"
            },
            load: Load::Memory {
                count: if quick { 10_000 } else { 1_000_000 },
                prefix,
                size,
            },
            unix: false,
        });
    }
    list
}

/// One server's result for one scenario, transport and round.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    pub scenario: String,
    pub unix: bool,
    pub server: String,
    /// Tests the server ran (those it does not support yet are left out).
    pub tests: Vec<Measured>,
    pub cpu_us_per_op: f64,
    /// The user-space part of `cpu_us_per_op` (runs saved before it was measured: 0).
    #[serde(default)]
    pub user_us_per_op: f64,
    pub rss: u64,
    /// Memory scenarios: (used_memory bytes per key, RSS bytes per key).
    pub per_key: Option<(f64, f64)>,
}

/// A finished comparison: what ran and every sample. Saved as JSON beside the plots, so the
/// report and plots can be rebuilt without measuring again (`damselfly-bench report`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Run {
    pub rounds: usize,
    pub threads: usize,
    pub quick: bool,
    pub memtier: bool,
    pub elapsed_secs: f64,
    /// CPUs, kernel, redis-server and Damselfly versions.
    pub machine: String,
    pub samples: Vec<Sample>,
}

impl Run {
    /// The scenarios that have samples, in the suite's order.
    pub fn scenarios(&self) -> Vec<Scenario> {
        scenarios(self.quick)
            .into_iter()
            .filter(|sc| self.samples.iter().any(|s| s.scenario == sc.key))
            .collect()
    }
}

pub fn run(args: CompareArgs) -> Result<Run, String> {
    let launcher = args.servers.launcher()?;
    let memtier = !args.no_memtier && tools::available("memtier_benchmark");
    let chosen: Vec<Scenario> = scenarios(args.quick)
        .into_iter()
        .filter(|s| args.only.is_empty() || args.only.iter().any(|o| s.key.contains(o.as_str())))
        .filter(|s| memtier || !matches!(s.load, Load::Memtier { .. }))
        .collect();
    let start_pair = || -> Result<[Server; 2], String> {
        Ok([
            launcher.start("redis", &[])?,
            launcher.start("damselfly", &[])?,
        ])
    };
    let mut samples = Vec::new();
    let started = Instant::now();
    let mut servers = start_pair()?;
    for round in 0..args.rounds {
        for sc in &chosen {
            for unix in [false, true] {
                if unix && !sc.unix {
                    continue;
                }
                for server in servers.iter_mut() {
                    let sample = match &sc.load {
                        Load::Memory {
                            count,
                            prefix,
                            size,
                        } => {
                            // A fresh server, so RSS is not inflated or hidden by earlier runs.
                            let mut fresh = launcher.start(server.name, &[])?;
                            let s = measure_memory(&fresh, sc, *count, prefix, *size);
                            fresh.stop();
                            s?
                        }
                        _ => measure_load(server, sc, unix)?,
                    };
                    eprintln!(
                        "round {} {} {} {}: {}",
                        round + 1,
                        sc.key,
                        if unix { "unix" } else { "tcp" },
                        server.name,
                        sample
                            .tests
                            .iter()
                            .map(|t| format!("{} {:.0}/s", t.test, t.ops_per_sec))
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                    samples.push(sample);
                }
            }
        }
    }
    for s in servers.iter_mut() {
        s.stop();
    }
    Ok(Run {
        rounds: args.rounds,
        threads: launcher.threads,
        quick: args.quick,
        memtier,
        elapsed_secs: started.elapsed().as_secs_f64(),
        machine: crate::report::machine(),
        samples,
    })
}

fn measure_load(server: &Server, sc: &Scenario, unix: bool) -> Result<Sample, String> {
    let target = server.target(unix);
    let before = server.usage();
    let (tests, ops) = match &sc.load {
        Load::RedisBenchmark { args, tests } => {
            let ok: Vec<&str> = tests
                .iter()
                .copied()
                .filter(|t| supported(server, t))
                .collect();
            let mut a = args.clone();
            a.extend(["-t".to_string(), ok.join(",")]);
            let requests: f64 = args
                .iter()
                .position(|x| x == "-n")
                .and_then(|i| args.get(i + 1))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0);
            let measured = if ok.is_empty() {
                Vec::new()
            } else {
                tools::redis_benchmark(&target, &a)?
            };
            let ops = requests * measured.len() as f64;
            (measured, ops)
        }
        Load::Memtier { args, seconds } => {
            let mut a = args.clone();
            a.push(format!("--test-time={seconds}"));
            let measured = tools::memtier(&target, &a)?;
            let total = measured
                .iter()
                .find(|m| m.test == "Totals")
                .map_or(0.0, |m| m.ops_per_sec);
            (measured, total * *seconds as f64)
        }
        Load::Memory { .. } => unreachable!("memory scenarios are measured separately"),
    };
    let after = server.usage();
    let _ = server.command(&["FLUSHALL"]);
    let per_op = |seconds: f64| if ops > 0.0 { seconds * 1e6 / ops } else { 0.0 };
    Ok(Sample {
        scenario: sc.key.to_string(),
        unix,
        server: server.name.to_string(),
        tests,
        cpu_us_per_op: per_op(after.user + after.sys - before.user - before.sys),
        user_us_per_op: per_op(after.user - before.user),
        rss: after.rss,
        per_key: None,
    })
}

/// Redis's `redis-benchmark -t` names a test the server can run: probed with one command.
fn supported(server: &Server, test: &str) -> bool {
    let probe = TYPE_TESTS
        .iter()
        .find(|t| t.0 == test)
        .map_or(&[][..], |t| t.1);
    probe.is_empty()
        || server
            .command(probe)
            .is_ok_and(|r| !r.starts_with("-ERR unknown command"))
}

fn measure_memory(
    server: &Server,
    sc: &Scenario,
    count: u64,
    prefix: &str,
    size: u64,
) -> Result<Sample, String> {
    let (used0, rss0) = server.memory();
    server.populate(count, prefix, size)?;
    let (used1, rss1) = server.memory();
    let per_key = |after: u64, before: u64| (after as f64 - before as f64) / count as f64;
    Ok(Sample {
        scenario: sc.key.to_string(),
        unix: false,
        server: server.name.to_string(),
        tests: Vec::new(),
        cpu_us_per_op: 0.0,
        user_us_per_op: 0.0,
        rss: rss1,
        per_key: Some((per_key(used1, used0), per_key(rss1, rss0))),
    })
}
