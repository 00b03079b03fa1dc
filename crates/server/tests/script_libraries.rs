//! Scripts as applications use them, through real client libraries: redis-py's Lock, Script
//! objects (EVALSHA with the NOSCRIPT fallback, in pipelines), the `limits` rate limiter's
//! scripts, a reliable queue and Functions (tests/clients/redis_py_scripts.py). The program first runs against
//! redis-server, so its expectations are Redis's, then against Damselfly.

mod common;

use std::path::Path;
use std::process::Command;

use common::{Backend, Server};

/// Debian's python3-redis and python3-limits install into the system interpreter (.ci/run
/// installs them).
const PYTHON: &str = "/usr/bin/python3";

fn run_program(port: u16) -> (bool, String) {
    let program = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/redis_py_scripts.py");
    let out = Command::new(PYTHON)
        .arg(program)
        .arg(port.to_string())
        .output()
        .expect("python3 (apt-get install python3-redis python3-limits)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (
        out.status.success() && text.trim_end().ends_with("ok"),
        text,
    )
}

fn redis_py_scripts(b: Backend) {
    let redis = Server::redis();
    let (ok, text) = run_program(redis.port);
    assert!(ok, "the program fails against redis-server: {text}");
    drop(redis);
    let s = Server::start(b, &[]);
    let (ok, text) = run_program(s.port);
    assert!(ok, "against Damselfly: {text}");
}

backend_tests!(redis_py_scripts);
