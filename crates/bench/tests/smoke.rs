//! A smoke run of `damselfly-bench compare`: a few seconds of redis-benchmark scenarios and one
//! memory scenario against redis-server and Damselfly. It must start both, measure, stop every
//! process it started, and write the report and plots.

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

#[test]
fn compare_runs_measures_stops_and_reports() {
    let dir = tempfile::tempdir().expect("tempdir");
    let report = dir.path().join("benchmarks.md");
    std::fs::write(&report, "# Benchmarks\n\nhand-written analysis\n").expect("write");
    let plots = dir.path().join("plots");
    let out = Command::new(env!("CARGO_BIN_EXE_damselfly-bench"))
        .args(["compare", "--quick", "--rounds", "1", "--no-memtier"])
        .args(["--only", "set-get,memory-10b,types-P1"])
        .arg("--damselfly")
        .arg(damselfly_binary())
        .arg("--report")
        .arg(&report)
        .arg("--plots")
        .arg(&plots)
        .output()
        .expect("run compare");
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "compare failed:\n{log}");

    // Everything it started is gone.
    let pids: Vec<u32> = log
        .lines()
        .filter_map(|l| l.strip_prefix("started "))
        .filter_map(|l| l.split_whitespace().nth(2)?.parse().ok())
        .collect();
    assert!(
        pids.len() >= 4,
        "two servers plus a fresh pair for the memory scenario:\n{log}"
    );
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still running"
        );
    }

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
