//! `damselfly-bench memcurve`: memory per key against the number of keys (100k to 10M by
//! default), for Redis and Damselfly, so the steps of each server's table growth show. Owns the
//! stepwise loading, the samples, and their CSV, markdown and plots.
//!
//! Per curve (`key 100`: `DEBUG POPULATE n key 100`; `k 10`: `DEBUG POPULATE n k 10`) and per
//! server: a freshly started server (Damselfly with `--threads`), its RSS (from /proc) and INFO
//! `used_memory` as the baseline, then for each step `DEBUG POPULATE step prefix size` (which
//! adds `prefix:{previous step}`..`prefix:{step-1}`, the keys before existing already) and a
//! sample of both. With `--ttl` each curve also runs with a TTL on every key: after each step a
//! pipelined PEXPIRE (30 days, so nothing expires during the run) of the keys that step added,
//! the same commands on both servers. Bytes per key are (sample - baseline) / keys.

use std::path::PathBuf;

use crate::report::{line_chart, server_color, Line};
use crate::servers::{Launcher, Reply, Server, ServerArgs};

#[derive(clap::Parser, Clone, Debug)]
pub struct MemcurveArgs {
    #[command(flatten)]
    pub servers: ServerArgs,
    /// The key counts at which memory is sampled (comma-separated, ascending).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "100000,200000,300000,500000,700000,1000000,1500000,2000000,3000000,5000000,7000000,10000000"
    )]
    pub steps: Vec<u64>,
    /// Leave out the steps above this many keys.
    #[arg(long)]
    pub max_keys: Option<u64>,
    /// Also run every curve with a TTL on every key.
    #[arg(long)]
    pub ttl: bool,
    /// The servers to measure (comma-separated: redis, damselfly).
    #[arg(long = "on", value_delimiter = ',', default_value = "redis,damselfly")]
    pub on: Vec<String>,
    /// Where memcurve.csv, memcurve-rss.svg and memcurve-used.svg go.
    #[arg(long, default_value = "docs/bench")]
    pub out: PathBuf,
}

/// The curves: DEBUG POPULATE's key prefix and value size.
const CURVES: [(&str, u64); 2] = [("key", 100), ("k", 10)];

/// The TTL of `--ttl` curves: far beyond any run, so no key expires while it is measured.
const TTL_MS: &str = "2592000000";

/// PEXPIREs per pipelined write.
const EXPIRE_BATCH: u64 = 1000;

/// One sample: a server's memory with `keys` keys of one curve.
#[derive(Clone, Debug)]
struct Point {
    curve: String,
    server: &'static str,
    keys: u64,
    used: u64,
    rss: u64,
    used_per_key: f64,
    rss_per_key: f64,
}

/// Sets a TTL on `prefix:{from}`..`prefix:{to-1}`; fails unless every key had one set.
fn expire(server: &Server, prefix: &str, from: u64, to: u64) -> Result<(), String> {
    let mut pipe = server.connect()?;
    let mut start = from;
    while start < to {
        let end = (start + EXPIRE_BATCH).min(to);
        for i in start..end {
            pipe.queue(&[
                b"PEXPIRE",
                format!("{prefix}:{i}").as_bytes(),
                TTL_MS.as_bytes(),
            ]);
        }
        pipe.flush()?;
        for i in start..end {
            match pipe.reply()? {
                Reply::Integer(1) => {}
                other => return Err(format!("PEXPIRE {prefix}:{i} replied {other:?}")),
            }
        }
        start = end;
    }
    Ok(())
}

/// One curve on one fresh server.
fn curve(
    launcher: &Launcher,
    name: &'static str,
    (prefix, size): (&str, u64),
    ttl: bool,
    steps: &[u64],
) -> Result<Vec<Point>, String> {
    let label = format!("{prefix} {size}{}", if ttl { " ttl" } else { "" });
    let mut server = launcher.start(name, &[])?;
    let (used0, rss0) = server.memory();
    let mut points = Vec::new();
    let mut before = 0;
    for &keys in steps {
        server.populate(keys, prefix, size)?;
        if ttl {
            expire(&server, prefix, before, keys)?;
        }
        let (used, rss) = server.memory();
        let per_key = |now: u64, base: u64| (now as f64 - base as f64) / keys as f64;
        let point = Point {
            curve: label.clone(),
            server: name,
            keys,
            used,
            rss,
            used_per_key: per_key(used, used0),
            rss_per_key: per_key(rss, rss0),
        };
        eprintln!(
            "{label} {name} {keys} keys: RSS {:.1} B/key, used_memory {:.1} B/key",
            point.rss_per_key, point.used_per_key
        );
        points.push(point);
        before = keys;
    }
    server.stop();
    Ok(points)
}

/// Measures every curve, writes the CSV and plots, and returns the markdown tables.
pub fn run(args: MemcurveArgs) -> Result<String, String> {
    let steps: Vec<u64> = args
        .steps
        .iter()
        .copied()
        .filter(|&s| args.max_keys.is_none_or(|m| s <= m))
        .collect();
    if steps.is_empty() || steps.windows(2).any(|w| w[0] >= w[1]) || steps[0] == 0 {
        return Err("--steps must be positive and ascending, some within --max-keys".into());
    }
    let mut on: Vec<&'static str> = Vec::new();
    for s in &args.on {
        match s.as_str() {
            "redis" => on.push("redis"),
            "damselfly" => on.push("damselfly"),
            other => return Err(format!("unknown server {other:?} (redis or damselfly)")),
        }
    }
    let launcher = args.servers.launcher()?;
    let mut points = Vec::new();
    for &c in &CURVES {
        for ttl in [false, true] {
            if ttl && !args.ttl {
                continue;
            }
            for &server in &on {
                points.extend(curve(&launcher, server, c, ttl, &steps)?);
            }
        }
    }
    std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
    let csv = args.out.join("memcurve.csv");
    std::fs::write(&csv, to_csv(&points)).map_err(|e| format!("{}: {e}", csv.display()))?;
    for (file, what, per_key) in [
        (
            "memcurve-rss.svg",
            "RSS growth",
            (|p: &Point| p.rss_per_key) as fn(&Point) -> f64,
        ),
        ("memcurve-used.svg", "used_memory", |p: &Point| {
            p.used_per_key
        }),
    ] {
        line_chart(
            &args.out.join(file),
            &format!("{what} per key"),
            "keys (log scale)",
            "bytes per key",
            &lines(&points, per_key),
        )?;
    }
    eprintln!(
        "wrote {}, memcurve-rss.svg and memcurve-used.svg",
        csv.display()
    );
    Ok(markdown(&points, launcher.threads))
}

/// One line per server and curve: the server's colour, lighter for 10-byte values, dashed with
/// a TTL.
fn lines(points: &[Point], per_key: fn(&Point) -> f64) -> Vec<Line> {
    let mut out: Vec<Line> = Vec::new();
    for p in points {
        let label = format!("{} {}", display_name(p.server), p.curve);
        match out.iter_mut().find(|l| l.label == label) {
            Some(line) => line.points.push((p.keys as f64, per_key(p))),
            None => {
                let base = server_color(p.server);
                let color = if p.curve.starts_with("k ") {
                    let lighten = |c: u8| c + (255 - c) / 2;
                    plotters::style::RGBColor(lighten(base.0), lighten(base.1), lighten(base.2))
                } else {
                    base
                };
                out.push(Line {
                    label,
                    color,
                    dashed: p.curve.ends_with("ttl"),
                    points: vec![(p.keys as f64, per_key(p))],
                });
            }
        }
    }
    out
}

fn display_name(server: &str) -> &'static str {
    if server == "redis" {
        "Redis"
    } else {
        "Damselfly"
    }
}

fn to_csv(points: &[Point]) -> String {
    let mut out =
        String::from("curve,server,keys,used_memory,rss,used_memory_per_key,rss_per_key\n");
    for p in points {
        out.push_str(&format!(
            "{},{},{},{},{},{:.1},{:.1}\n",
            p.curve, p.server, p.keys, p.used, p.rss, p.used_per_key, p.rss_per_key
        ));
    }
    out
}

/// A table per curve: bytes per key of both servers at every step, and their ratio.
fn markdown(points: &[Point], threads: usize) -> String {
    let mut out = format!(
        "Bytes per key (growth over a fresh server's baseline / keys), `DEBUG POPULATE` in \
         steps; Damselfly `--threads {threads}`. Plots: memcurve-rss.svg, memcurve-used.svg.\n"
    );
    let mut curves: Vec<&str> = Vec::new();
    for p in points {
        if !curves.contains(&p.curve.as_str()) {
            curves.push(&p.curve);
        }
    }
    for curve in curves {
        out.push_str(&format!(
            "\n`{curve}`\n\n| keys | Redis RSS B/key | Damselfly RSS B/key | ratio | Redis used_memory B/key | Damselfly used_memory B/key |\n|---|---|---|---|---|---|\n"
        ));
        let mut keys: Vec<u64> = points
            .iter()
            .filter(|p| p.curve == curve)
            .map(|p| p.keys)
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for k in keys {
            let of = |server: &str| {
                points
                    .iter()
                    .find(|p| p.curve == curve && p.server == server && p.keys == k)
            };
            let cell = |p: Option<&Point>, f: fn(&Point) -> f64| {
                p.map_or("-".to_string(), |p| format!("{:.1}", f(p)))
            };
            let (r, d) = (of("redis"), of("damselfly"));
            let ratio = match (r, d) {
                (Some(r), Some(d)) => format!("{:.2}x", d.rss_per_key / r.rss_per_key.max(1e-9)),
                _ => "-".to_string(),
            };
            out.push_str(&format!(
                "| {k} | {} | {} | {ratio} | {} | {} |\n",
                cell(r, |p| p.rss_per_key),
                cell(d, |p| p.rss_per_key),
                cell(r, |p| p.used_per_key),
                cell(d, |p| p.used_per_key),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(curve: &str, server: &'static str, keys: u64, rss_per_key: f64) -> Point {
        Point {
            curve: curve.to_string(),
            server,
            keys,
            used: keys * 100,
            rss: keys * 200,
            used_per_key: 100.0,
            rss_per_key,
        }
    }

    #[test]
    fn tables_csv_and_lines_pair_the_servers_by_curve_and_step() {
        let points = [
            point("key 100", "redis", 1000, 180.0),
            point("key 100", "redis", 2000, 190.0),
            point("key 100", "damselfly", 1000, 90.0),
            point("key 100", "damselfly", 2000, 95.0),
            point("k 10 ttl", "redis", 1000, 100.0),
        ];
        let md = markdown(&points, 2);
        assert!(
            md.contains("| 1000 | 180.0 | 90.0 | 0.50x | 100.0 | 100.0 |"),
            "{md}"
        );
        assert!(md.contains("| 2000 | 190.0 | 95.0 | 0.50x |"), "{md}");
        assert!(
            md.contains("`k 10 ttl`") && md.contains("| 1000 | 100.0 | - | - |"),
            "{md}"
        );
        assert_eq!(
            md.matches("\n| 1000 |").count(),
            2,
            "one row per step and curve:\n{md}"
        );
        let csv = to_csv(&points);
        assert_eq!(csv.lines().count(), 6);
        assert!(csv.contains("\nkey 100,damselfly,2000,200000,400000,100.0,95.0\n"));
        let lines = lines(&points, |p| p.rss_per_key);
        let labels: Vec<&str> = lines.iter().map(|l| l.label.as_str()).collect();
        assert_eq!(
            labels,
            ["Redis key 100", "Damselfly key 100", "Redis k 10 ttl"]
        );
        assert_eq!(lines[0].points, vec![(1000.0, 180.0), (2000.0, 190.0)]);
        assert!(!lines[0].dashed && lines[2].dashed);
        assert_ne!(lines[0].color, lines[2].color, "10-byte values are lighter");
    }
}
