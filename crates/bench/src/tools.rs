//! Running the load generators users have (redis-benchmark always, memtier_benchmark when it
//! is on PATH) and reading their output. The generators are not re-implemented: their output
//! is parsed, and the parsers are tested on recorded samples.

use std::process::Command;

/// One measured test of one run.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Measured {
    /// The generator's test name (`SET`, `GET`, `Totals`, ...).
    pub test: String,
    pub ops_per_sec: f64,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

/// Parses redis-benchmark's default (non-quiet) output: one section per test, each with a
/// throughput summary, a latency summary and a percentile distribution (for p99.9).
pub fn parse_redis_benchmark(output: &str) -> Vec<Measured> {
    let text = output.replace('\r', "\n");
    let mut out = Vec::new();
    let mut current: Option<Measured> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim();
        if let Some(name) = t
            .strip_prefix("====== ")
            .and_then(|s| s.strip_suffix(" ======"))
        {
            out.extend(current.take());
            current = Some(Measured {
                test: name.to_string(),
                ops_per_sec: 0.0,
                avg_ms: 0.0,
                p50_ms: 0.0,
                p99_ms: 0.0,
                p999_ms: 0.0,
            });
            continue;
        }
        let Some(m) = current.as_mut() else {
            continue;
        };
        if let Some(rest) = t.strip_prefix("throughput summary:") {
            m.ops_per_sec = first_number(rest).unwrap_or(0.0);
        } else if t.starts_with("avg") && t.contains("p99") {
            let names: Vec<&str> = t.split_whitespace().collect();
            if let Some(values) = lines.next() {
                let values: Vec<f64> = values
                    .split_whitespace()
                    .filter_map(|v| v.parse().ok())
                    .collect();
                for (n, v) in names.iter().zip(values) {
                    match *n {
                        "avg" => m.avg_ms = v,
                        "p50" => m.p50_ms = v,
                        "p99" => m.p99_ms = v,
                        _ => {}
                    }
                }
            }
        } else if m.p999_ms == 0.0 {
            // "99.902% <= 2.239 milliseconds (cumulative count 19981)"
            if let Some((pct, rest)) = t.split_once("% <= ") {
                if pct.parse::<f64>().is_ok_and(|p| p >= 99.9) {
                    m.p999_ms = first_number(rest).unwrap_or(0.0);
                }
            }
        }
    }
    out.extend(current);
    out
}

/// Parses memtier_benchmark's "ALL STATS" table: the `Totals` row (and Sets/Gets), columns
/// found by their headers.
pub fn parse_memtier(output: &str) -> Vec<Measured> {
    let mut header: Vec<String> = Vec::new();
    let mut out = Vec::new();
    for line in output.lines() {
        let cols: Vec<&str> = line.split_whitespace().collect();
        if cols.first() == Some(&"Type") {
            // "Avg. Latency" and "p50 Latency" are two words each: join on "Latency".
            header.clear();
            let mut i = 0;
            while i < cols.len() {
                if cols.get(i + 1) == Some(&"Latency") {
                    header.push(format!("{} Latency", cols[i]));
                    i += 2;
                } else {
                    header.push(cols[i].to_string());
                    i += 1;
                }
            }
            continue;
        }
        let Some(&kind) = cols.first() else {
            continue;
        };
        if header.is_empty() || !matches!(kind, "Sets" | "Gets" | "Totals") {
            continue;
        }
        let value = |name: &str| -> f64 {
            header
                .iter()
                .position(|h| h == name)
                .and_then(|i| cols.get(i))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0.0)
        };
        out.push(Measured {
            test: kind.to_string(),
            ops_per_sec: value("Ops/sec"),
            avg_ms: value("Avg. Latency"),
            p50_ms: value("p50 Latency"),
            p99_ms: value("p99 Latency"),
            p999_ms: value("p99.9 Latency"),
        });
    }
    out
}

fn first_number(s: &str) -> Option<f64> {
    s.split_whitespace().find_map(|w| w.parse().ok())
}

/// True when `program` can be run (found on PATH).
pub fn available(program: &str) -> bool {
    Command::new(program)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() || !o.stdout.is_empty())
}

/// Where a generator connects.
#[derive(Debug, Clone)]
pub enum Target {
    Tcp(u16),
    Unix(std::path::PathBuf),
}

/// Runs redis-benchmark with `args` against `target`; parsed results.
pub fn redis_benchmark(target: &Target, args: &[String]) -> Result<Vec<Measured>, String> {
    let mut cmd = Command::new("redis-benchmark");
    match target {
        Target::Tcp(port) => cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]),
        Target::Unix(path) => cmd.arg("-s").arg(path),
    };
    let out = cmd
        .args(args)
        .output()
        .map_err(|e| format!("redis-benchmark: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let parsed = parse_redis_benchmark(&text);
    if parsed.is_empty() {
        return Err(format!(
            "redis-benchmark printed no results: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(parsed)
}

/// Runs memtier_benchmark with `args` against `target`; parsed results.
pub fn memtier(target: &Target, args: &[String]) -> Result<Vec<Measured>, String> {
    let mut cmd = Command::new("memtier_benchmark");
    match target {
        Target::Tcp(port) => cmd.args(["-s", "127.0.0.1", "-p", &port.to_string()]),
        Target::Unix(path) => cmd.arg(format!("--unix-socket={}", path.display())),
    };
    let out = cmd
        .args(["--hide-histogram"])
        .args(args)
        .output()
        .map_err(|e| format!("memtier_benchmark: {e}"))?;
    let parsed = parse_memtier(&String::from_utf8_lossy(&out.stdout));
    if parsed.is_empty() {
        return Err("memtier_benchmark printed no results".into());
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const REDIS_BENCHMARK: &str = include_str!("../tests/data/redis-benchmark.txt");
    const MEMTIER: &str = include_str!("../tests/data/memtier.txt");

    #[test]
    fn reads_redis_benchmark_sections() {
        let r = parse_redis_benchmark(REDIS_BENCHMARK);
        assert_eq!(r.len(), 2);
        assert_eq!(
            r[0],
            Measured {
                test: "SET".into(),
                ops_per_sec: 74626.87,
                avg_ms: 0.351,
                p50_ms: 0.343,
                p99_ms: 0.583,
                p999_ms: 1.271,
            }
        );
        assert_eq!(r[1].test, "GET");
        assert_eq!(r[1].ops_per_sec, 73529.41);
        assert_eq!(r[1].p999_ms, 0.687);
    }

    #[test]
    fn reads_memtier_totals() {
        let r = parse_memtier(MEMTIER);
        let totals = r.iter().find(|m| m.test == "Totals").expect("totals");
        assert_eq!(totals.ops_per_sec, 127098.45);
        assert_eq!(totals.avg_ms, 1.57172);
        assert_eq!(totals.p50_ms, 1.439);
        assert_eq!(totals.p99_ms, 4.127);
        assert_eq!(totals.p999_ms, 9.023);
        assert_eq!(r.iter().filter(|m| m.test == "Sets").count(), 1);
    }

    #[test]
    fn empty_or_foreign_output_gives_nothing() {
        assert!(parse_redis_benchmark("").is_empty());
        assert!(parse_memtier("Error: connection refused").is_empty());
    }
}
