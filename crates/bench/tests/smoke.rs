//! Smoke runs of the drivers that start servers, with tiny counts: `compare` (a few seconds of
//! redis-benchmark scenarios and one memory scenario), `hitrate` and `memcurve`, each against
//! redis-server and Damselfly. Each must start both, measure, stop every process it started,
//! and write its report (and plots).

use std::path::PathBuf;
use std::process::Command;

fn damselfly_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let binary = target.join("debug/damselfly");
    if !binary.exists() {
        let status = Command::new(env!("CARGO"))
            .args(["build", "-p", "damselfly"])
            .status()
            .expect("cargo build");
        assert!(status.success());
    }
    binary
}

/// Runs the driver with `args` and the debug Damselfly; its stdout, after checking that it
/// succeeded and that every server it started (`started NAME pid PID` on stderr, at least
/// `min_started`) is gone.
fn run_driver(args: &[&str], min_started: usize) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_damselfly-bench"))
        .args(args)
        .arg("--damselfly")
        .arg(damselfly_binary())
        .output()
        .expect("run the driver");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?} failed:\n{log}");
    let pids: Vec<u32> = log
        .lines()
        .filter_map(|l| l.strip_prefix("started "))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect();
    assert!(pids.len() >= min_started, "too few servers started:\n{log}");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still running"
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn compare_runs_measures_stops_and_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("benchmarks.md");
    std::fs::write(&report, "# Benchmarks\n\nhand-written analysis\n").expect("write");
    let plots = dir.path().join("plots");
    // Two servers plus a fresh pair for the memory scenario.
    run_driver(
        &[
            "compare",
            "--quick",
            "--rounds",
            "1",
            "--no-memtier",
            "--only",
            "set-get,memory-10b,types-P1",
            "--report",
            report.to_str().unwrap(),
            "--plots",
            plots.to_str().unwrap(),
        ],
        4,
    );

    let text = std::fs::read_to_string(&report).expect("report");
    assert!(text.starts_with("# Benchmarks\n\nhand-written analysis\n"));
    assert!(text.contains("<!-- compare:begin -->") && text.contains("<!-- compare:end -->"));
    for row in [
        "| SET | TCP | ",
        "| GET | unix | ",
        "| Damselfly | ",
        "| LPUSH | TCP | ",
    ] {
        assert!(text.contains(row), "report lacks {row:?}:\n{text}");
    }
    for svg in ["set-get-100k-throughput.svg", "set-get-100k-p99.svg"] {
        let body = std::fs::read_to_string(plots.join(svg)).expect(svg);
        assert!(
            body.starts_with("<svg") && body.contains("Damselfly"),
            "{svg}"
        );
    }
}

#[test]
fn hitrate_measures_redis_and_reports_both_servers() {
    // A fresh Redis to measure maxmemory, then one server per row.
    let table = run_driver(
        &[
            "hitrate",
            // maxmemory also holds each server's start-up memory (Redis ~0.9 MB, Damselfly
            // ~0.3 MB with 2 threads) and the replay's client buffers (~0.2 MB), so the cache
            // must be well above that: 20,000 keys, about 4.7 MB. The trace touches enough
            // distinct keys (about 45,000) that both must evict.
            "--requests",
            "200000",
            "--keys",
            "200000",
            "--fit",
            "0.1",
            "--redis-policies",
            "allkeys-lru,allkeys-random",
            "--damselfly-policies",
            "allkeys-lru,cache-mode",
        ],
        5,
    );
    assert!(table.contains("| policy | server | hit rate |"), "{table}");
    for (policy, server) in [
        ("allkeys-lru", "redis"),
        ("allkeys-random", "redis"),
        ("allkeys-lru", "damselfly"),
        ("cache-mode", "damselfly"),
    ] {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("| {policy} | {server} | ")))
            .unwrap_or_else(|| panic!("no {policy} row for {server}:\n{table}"));
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let rate: f64 = cells[3].trim_end_matches('%').parse().expect(row);
        assert!(
            rate > 5.0 && rate < 95.0,
            "a cache of 10% of the keys: {row}"
        );
        let (keys, evicted): (u64, u64) =
            (cells[4].parse().expect(row), cells[5].parse().expect(row));
        assert!(evicted > 0, "{server} evicts under maxmemory: {row}");
        // 200,000 keys, a tenth of them fit in Redis (more in Damselfly, whose keys are
        // smaller).
        assert!(
            (5000..50_000).contains(&keys),
            "{server} holds {keys} keys: {row}"
        );
    }
}

#[test]
fn memcurve_samples_every_step_and_plots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_str().unwrap();
    // Two curves, each with and without TTL, on both servers: eight fresh servers.
    let tables = run_driver(
        &["memcurve", "--steps", "1000,3000", "--ttl", "--out", out],
        8,
    );
    for curve in ["`key 100`", "`k 10`", "`key 100 ttl`", "`k 10 ttl`"] {
        assert!(tables.contains(curve), "no table for {curve}:\n{tables}");
    }
    let csv = std::fs::read_to_string(dir.path().join("memcurve.csv")).expect("csv");
    assert_eq!(csv.lines().count(), 1 + 4 * 2 * 2, "{csv}");
    for line in csv.lines().skip(1) {
        let used_per_key: f64 = line.rsplit(',').nth(1).unwrap().parse().expect(line);
        assert!(used_per_key > 10.0, "used_memory grows with keys: {line}");
    }
    for svg in ["memcurve-rss.svg", "memcurve-used.svg"] {
        let body = std::fs::read_to_string(dir.path().join(svg)).expect(svg);
        assert!(
            body.starts_with("<svg") && body.contains("Damselfly k 10 ttl"),
            "{svg}"
        );
    }
}
