//! `damselfly-bench streamgeo`: streams and geo side by side with redis-server, servers
//! alternating over rounds, medians reported as a markdown table with Damselfly/Redis ratios:
//! XADD throughput at `-P 1` and `-P 16` (redis-benchmark), a consumer group drained by 10
//! consumers with XREADGROUP + XACK, GEOADD and GEOSEARCH throughput (redis-benchmark), and
//! the memory of a 1,000,000-entry stream and of a 1,000,000-member geo set.

use std::time::Instant;

use redis_protocol::resp2::types::BytesFrame;

use crate::servers::{Launcher, Server, ServerArgs};
use crate::tools::{self, Target};

#[derive(clap::Parser, Clone, Debug)]
pub struct StreamGeoArgs {
    /// Rounds per measurement (medians are reported).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    #[command(flatten)]
    pub servers: ServerArgs,
    /// Small counts: checks the pipeline end to end in seconds.
    #[arg(long)]
    pub quick: bool,
}

const SERVERS: [&str; 2] = ["redis", "damselfly"];

/// One measurement's samples per server.
struct Row {
    what: String,
    unit: &'static str,
    /// Higher is better (throughput) or lower is (memory).
    higher_better: bool,
    samples: [Vec<f64>; 2],
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(0.0)
}

fn rb(server: &Server, args: &[&str]) -> Result<f64, String> {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let measured = tools::redis_benchmark(&Target::Tcp(server.port), &args)?;
    Ok(measured.iter().map(|m| m.ops_per_sec).sum())
}

fn expect_ok(frame: BytesFrame, what: &str) -> Result<BytesFrame, String> {
    match frame {
        BytesFrame::Error(e) => Err(format!("{what}: {e}")),
        f => Ok(f),
    }
}

/// Sends `n` commands built by `cmd`, pipelined in batches, and checks the replies.
fn fill(server: &Server, n: u64, cmd: impl Fn(u64) -> Vec<Vec<u8>>) -> Result<(), String> {
    let mut pipe = server.connect()?;
    let mut i = 0;
    while i < n {
        let batch = (n - i).min(1000);
        for j in i..i + batch {
            let words = cmd(j);
            let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            pipe.queue(&refs);
        }
        pipe.flush()?;
        for _ in 0..batch {
            expect_ok(pipe.reply()?, "fill")?;
        }
        i += batch;
    }
    Ok(())
}

/// A deterministic spread of positions over the valid range.
fn position(i: u64) -> (String, String) {
    let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let lon = (x % 3_600_000) as f64 / 10_000.0 - 180.0;
    let lat = ((x >> 32) % 1_700_000) as f64 / 10_000.0 - 85.0;
    (format!("{lon:.4}"), format!("{lat:.4}"))
}

/// Entries per second of 10 consumers draining a group of `entries` entries with XREADGROUP
/// COUNT 10 and XACK.
fn drain_group(server: &Server, entries: u64) -> Result<f64, String> {
    fill(server, entries, |i| {
        vec![
            b"XADD".to_vec(),
            b"queue".to_vec(),
            b"*".to_vec(),
            b"job".to_vec(),
            format!("payload-{i}").into_bytes(),
        ]
    })?;
    server.command(&["XGROUP", "CREATE", "queue", "workers", "0"])?;
    let start = Instant::now();
    let port_server = server;
    let results: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..10)
            .map(|c| {
                scope.spawn(move || -> Result<u64, String> {
                    let mut pipe = port_server.connect()?;
                    let name = format!("consumer-{c}");
                    let mut done = 0;
                    loop {
                        pipe.queue(&[
                            b"XREADGROUP",
                            b"GROUP",
                            b"workers",
                            name.as_bytes(),
                            b"COUNT",
                            b"10",
                            b"STREAMS",
                            b"queue",
                            b">",
                        ]);
                        pipe.flush()?;
                        let ids = delivered_ids(expect_ok(pipe.reply()?, "XREADGROUP")?);
                        if ids.is_empty() {
                            return Ok(done);
                        }
                        let mut ack: Vec<&[u8]> = vec![b"XACK", b"queue", b"workers"];
                        ack.extend(ids.iter().map(Vec::as_slice));
                        pipe.queue(&ack);
                        pipe.flush()?;
                        expect_ok(pipe.reply()?, "XACK")?;
                        done += ids.len() as u64;
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("consumer panicked".into())))
            .collect()
    });
    let secs = start.elapsed().as_secs_f64();
    let mut total = 0;
    for r in results {
        total += r?;
    }
    if total != entries {
        return Err(format!(
            "{} consumers got {total} of {entries} entries",
            server.name
        ));
    }
    Ok(total as f64 / secs)
}

/// The entry ids of an XREADGROUP reply (`[[key, [[id, fields]...]]]`, nil when empty).
fn delivered_ids(reply: BytesFrame) -> Vec<Vec<u8>> {
    let BytesFrame::Array(streams) = reply else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    for s in streams {
        let BytesFrame::Array(kv) = s else { continue };
        let Some(BytesFrame::Array(entries)) = kv.get(1) else {
            continue;
        };
        for e in entries {
            if let BytesFrame::Array(e) = e {
                if let Some(BytesFrame::BulkString(id)) = e.first() {
                    ids.push(id.to_vec());
                }
            }
        }
    }
    ids
}

/// Bytes of memory (INFO used_memory, RSS) a dataset built by `build` adds to a fresh server.
fn memory_of(
    launcher: &Launcher,
    name: &str,
    build: &dyn Fn(&Server) -> Result<(), String>,
) -> Result<(f64, f64), String> {
    let mut server = launcher.start(name, &[])?;
    let (used0, rss0) = server.memory();
    build(&server)?;
    // Let freed pages settle (jemalloc's background purge, Redis's lazy frees).
    std::thread::sleep(std::time::Duration::from_secs(2));
    let (used, rss) = server.memory();
    server.stop();
    Ok((
        used.saturating_sub(used0) as f64,
        rss.saturating_sub(rss0) as f64,
    ))
}

pub fn run(args: &StreamGeoArgs) -> Result<String, String> {
    if !tools::available("redis-benchmark") {
        return Err("redis-benchmark is not installed (apt-get install redis-tools)".into());
    }
    let launcher = args.servers.launcher()?;
    let q = |full: u64, small: u64| if args.quick { small } else { full };
    let (n1, n16, ngeo, nsearch) = (
        q(200_000, 5_000),
        q(1_000_000, 20_000),
        q(200_000, 5_000),
        q(20_000, 1_000),
    );
    let (drain, big) = (q(200_000, 5_000), q(1_000_000, 20_000));
    let row = |what: String, unit, higher_better| Row {
        what,
        unit,
        higher_better,
        samples: [Vec::new(), Vec::new()],
    };
    let mut rows = vec![
        row("XADD, 50 clients, -P 1, 100 streams".into(), "ops/s", true),
        row("XADD, 50 clients, -P 16, 100 streams".into(), "ops/s", true),
        row(
            format!("XREADGROUP COUNT 10 + XACK, 10 consumers, {drain} entries"),
            "entries/s",
            true,
        ),
        row("GEOADD, 50 clients, -P 1, 100 keys".into(), "ops/s", true),
        row(
            "GEOSEARCH BYRADIUS 200 km COUNT 10 over 10,000 points, 50 clients".into(),
            "ops/s",
            true,
        ),
        row(
            format!("memory of a {big}-entry stream (used_memory)"),
            "bytes/entry",
            false,
        ),
        row(
            format!("memory of a {big}-entry stream (RSS)"),
            "bytes/entry",
            false,
        ),
        row(
            format!("memory of a {big}-member geo set (used_memory)"),
            "bytes/member",
            false,
        ),
        row(
            format!("memory of a {big}-member geo set (RSS)"),
            "bytes/member",
            false,
        ),
    ];
    for round in 0..args.rounds {
        for (s, name) in SERVERS.iter().enumerate() {
            eprintln!("round {} of {}: {name}", round + 1, args.rounds);
            let mut server = launcher.start(name, &[])?;
            let n = |v: u64| v.to_string();
            let xadd = [
                "-c",
                "50",
                "-r",
                "100",
                "XADD",
                "s:__rand_int__",
                "*",
                "f",
                "v",
            ];
            rows[0].samples[s].push(rb(
                &server,
                &[&["-n", &n(n1), "-P", "1"][..], &xadd].concat(),
            )?);
            rows[1].samples[s].push(rb(
                &server,
                &[&["-n", &n(n16), "-P", "16"][..], &xadd].concat(),
            )?);
            rows[2].samples[s].push(drain_group(&server, drain)?);
            let geoadd = [
                "-c",
                "50",
                "-r",
                "100",
                "GEOADD",
                "g:__rand_int__",
                "13.361389",
                "38.115556",
                "m:__rand_int__",
            ];
            rows[3].samples[s].push(rb(&server, &[&["-n", &n(ngeo)][..], &geoadd].concat())?);
            fill(&server, 10_000, |i| {
                let (lon, lat) = position(i);
                let lon = format!("{:.4}", 13.0 + lon.parse::<f64>().unwrap_or(0.0) / 90.0);
                let lat = format!("{:.4}", 38.0 + lat.parse::<f64>().unwrap_or(0.0) / 90.0);
                vec![
                    b"GEOADD".to_vec(),
                    b"points".to_vec(),
                    lon.into_bytes(),
                    lat.into_bytes(),
                    format!("p{i}").into_bytes(),
                ]
            })?;
            let search = [
                "-c",
                "50",
                "GEOSEARCH",
                "points",
                "FROMLONLAT",
                "13.36",
                "38.11",
                "BYRADIUS",
                "200",
                "km",
                "COUNT",
                "10",
            ];
            rows[4].samples[s].push(rb(&server, &[&["-n", &n(nsearch)][..], &search].concat())?);
            server.stop();
            let stream = |sv: &Server| {
                fill(sv, big, |i| {
                    vec![
                        b"XADD".to_vec(),
                        b"big".to_vec(),
                        b"*".to_vec(),
                        b"sensor".to_vec(),
                        format!("{}", i % 1000).into_bytes(),
                    ]
                })
            };
            let (used, rss) = memory_of(&launcher, name, &stream)?;
            rows[5].samples[s].push(used / big as f64);
            rows[6].samples[s].push(rss / big as f64);
            let geo = |sv: &Server| {
                fill(sv, big, |i| {
                    let (lon, lat) = position(i);
                    vec![
                        b"GEOADD".to_vec(),
                        b"world".to_vec(),
                        lon.into_bytes(),
                        lat.into_bytes(),
                        format!("member:{i}").into_bytes(),
                    ]
                })
            };
            let (used, rss) = memory_of(&launcher, name, &geo)?;
            rows[7].samples[s].push(used / big as f64);
            rows[8].samples[s].push(rss / big as f64);
        }
    }
    let mut out = String::from(
        "| measurement | Redis | Damselfly | Damselfly / Redis | target |\n|---|---|---|---|---|\n",
    );
    for r in &rows {
        let (redis, ours) = (median(&r.samples[0]), median(&r.samples[1]));
        let ratio = if redis > 0.0 { ours / redis } else { 0.0 };
        let met = if r.higher_better {
            ratio >= 1.0
        } else {
            ratio <= 1.0
        };
        let digits = if r.higher_better { 0 } else { 1 };
        out.push_str(&format!(
            "| {} | {:.*} {} | {:.*} {} | {:.2}x | {} |\n",
            r.what,
            digits,
            redis,
            r.unit,
            digits,
            ours,
            r.unit,
            ratio,
            if met { "met" } else { "missed" }
        ));
    }
    Ok(out)
}
