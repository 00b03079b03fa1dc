//! Plays the life of the pod in deploy/kubernetes on this machine, from the manifests
//! themselves: `kubectl kustomize deploy/kubernetes` renders them (offline), and the test reads
//! the container's command and arguments, the ConfigMap's damselfly.conf, the volume mounts,
//! the probes and the grace period from that render.
//!
//! A temporary directory stands in for the ConfigMap mount and another for the
//! PersistentVolume; the config file is written into the first with `dir` pointing at the
//! second, `port` at a free port and `bind` at 127.0.0.1. The real binary then starts with
//! exactly the manifest's arguments (paths mapped), as PID 1 of a new PID namespace like in a
//! container (where `unshare` can make one), with an empty environment and the volume as its
//! working directory. The probe scripts run as written (port mapped) with `sh` and redis-cli
//! (Debian's redis-tools, which .ci/run installs), and their exit codes are asserted. Then
//! data goes in, SIGTERM must stop the server with exit code 0 within
//! terminationGracePeriodSeconds, and a second start on the same data directory must pass the
//! probes again and, once persistence exists, serve the data again.
//!
//! The YAML is read with yaml-rust2 (a maintained, serde-free YAML 1.2 parser; serde_yaml is
//! deprecated): the test only walks the tree.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use common::{free_port, wait_timeout, Raw};
use yaml_rust2::{Yaml, YamlLoader};

/// The longest the test waits for the startup probe, whatever the manifest allows (10
/// minutes there, for long loads): the binary starts in milliseconds here, and a broken build
/// should not hold CI for the manifest's whole budget.
const STARTUP_CAP: Duration = Duration::from_secs(60);

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// One probe as the manifest states it.
#[derive(Clone, Debug)]
struct Probe {
    name: &'static str,
    script: String,
    period: Duration,
    timeout: Duration,
    failure_threshold: u32,
}

/// What the test needs from the rendered manifests.
#[derive(Debug)]
struct Manifest {
    command: Vec<String>,
    args: Vec<String>,
    /// The container port named `redis`, which the probes and the config name.
    port: u16,
    /// Where the ConfigMap is mounted, and its files (key -> content).
    config_mount: String,
    config_files: Vec<(String, String)>,
    /// Where the volumeClaimTemplate's volume is mounted.
    data_mount: String,
    startup: Probe,
    readiness: Probe,
    liveness: Probe,
    grace: Duration,
}

/// The probes' tools, found before anything starts: without them every probe would just fail.
fn require_redis_cli() {
    let found = Command::new("redis-cli")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "redis-cli must be installed (apt-get install redis-tools; .ci/run installs it): \
         the probe scripts run it"
    );
}

fn render() -> Vec<Yaml> {
    let dir = repo_root().join("deploy/kubernetes");
    let out = Command::new("kubectl")
        .arg("kustomize")
        .arg(&dir)
        .output()
        .expect("kubectl must be installed: it renders deploy/kubernetes (offline)");
    assert!(
        out.status.success(),
        "kubectl kustomize failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    YamlLoader::load_from_str(&String::from_utf8(out.stdout).expect("utf-8 render"))
        .expect("the render is YAML")
}

fn s(y: &Yaml) -> String {
    match y {
        Yaml::String(v) => v.clone(),
        Yaml::Integer(v) => v.to_string(),
        other => panic!("expected a string, found {other:?}"),
    }
}

fn strings(y: &Yaml) -> Vec<String> {
    y.as_vec().map_or(Vec::new(), |v| v.iter().map(s).collect())
}

fn find<'a>(docs: &'a [Yaml], kind: &str, name: Option<&str>) -> &'a Yaml {
    docs.iter()
        .find(|d| {
            d["kind"].as_str() == Some(kind)
                && match name {
                    None => true,
                    Some(n) => d["metadata"]["name"].as_str() == Some(n),
                }
        })
        .unwrap_or_else(|| panic!("no {kind} {name:?} in the render"))
}

fn secs(y: &Yaml, default: i64) -> Duration {
    Duration::from_secs(y.as_i64().unwrap_or(default) as u64)
}

fn probe(container: &Yaml, name: &'static str) -> Probe {
    let p = &container[name];
    let command = strings(&p["exec"]["command"]);
    assert!(
        command.len() == 3 && command[0] == "sh" && command[1] == "-c",
        "{name} must be `sh -c SCRIPT`, found {command:?}"
    );
    // Kubernetes' defaults where a field is left out.
    Probe {
        name,
        script: command[2].clone(),
        period: secs(&p["periodSeconds"], 10),
        timeout: secs(&p["timeoutSeconds"], 1),
        failure_threshold: p["failureThreshold"].as_i64().unwrap_or(3) as u32,
    }
}

fn manifest() -> Manifest {
    require_redis_cli();
    let docs = render();
    let sts = find(&docs, "StatefulSet", None);
    let pod = &sts["spec"]["template"]["spec"];
    let containers = pod["containers"].as_vec().expect("containers");
    assert_eq!(containers.len(), 1, "one container");
    let c = &containers[0];
    let port = c["ports"]
        .as_vec()
        .expect("ports")
        .iter()
        .find(|p| p["name"].as_str() == Some("redis"))
        .and_then(|p| p["containerPort"].as_i64())
        .expect("a container port named redis") as u16;
    let mounts: Vec<(String, String)> = c["volumeMounts"]
        .as_vec()
        .expect("volumeMounts")
        .iter()
        .map(|m| (s(&m["name"]), s(&m["mountPath"])))
        .collect();
    let mount_path = |volume: &str| {
        mounts
            .iter()
            .find(|(n, _)| n == volume)
            .map(|(_, p)| p.clone())
            .unwrap_or_else(|| panic!("volume {volume} is not mounted"))
    };
    let config_volume = pod["volumes"]
        .as_vec()
        .expect("volumes")
        .iter()
        .find(|v| !v["configMap"].is_badvalue())
        .expect("a ConfigMap volume");
    let config_map = find(
        &docs,
        "ConfigMap",
        Some(&s(&config_volume["configMap"]["name"])),
    );
    let config_files = config_map["data"]
        .as_hash()
        .expect("ConfigMap data")
        .iter()
        .map(|(k, v)| (s(k), s(v)))
        .collect();
    let claim = &sts["spec"]["volumeClaimTemplates"][0]["metadata"]["name"];
    Manifest {
        command: strings(&c["command"]),
        args: strings(&c["args"]),
        port,
        config_mount: mount_path(&s(&config_volume["name"])),
        config_files,
        data_mount: mount_path(&s(claim)),
        startup: probe(c, "startupProbe"),
        readiness: probe(c, "readinessProbe"),
        liveness: probe(c, "livenessProbe"),
        grace: secs(&pod["terminationGracePeriodSeconds"], 30),
    }
}

/// `path` inside `mount`, re-rooted at `to`; None when it is not inside.
fn map_path(path: &str, mount: &str, to: &Path) -> Option<PathBuf> {
    let rest = path.strip_prefix(mount.trim_end_matches('/'))?;
    if rest.is_empty() {
        return Some(to.to_path_buf());
    }
    rest.strip_prefix('/').map(|r| to.join(r))
}

/// The ConfigMap's config file as the server gets it here: `port`, `bind` and `dir` rewritten
/// (each must be there, and `dir` must be the volume's mount path), the rest unchanged.
fn rewrite_config(text: &str, m: &Manifest, port: u16, data: &Path) -> String {
    let mut seen = Vec::new();
    let mut out = String::new();
    for line in text.lines() {
        let (directive, value) = line.trim().split_once(' ').unwrap_or((line.trim(), ""));
        let value = value.trim();
        let replaced = match directive {
            "port" => {
                assert_eq!(value, m.port.to_string(), "config port = container port");
                format!("port {port}")
            }
            "bind" => "bind 127.0.0.1".to_string(),
            "dir" => {
                assert_eq!(value, m.data_mount, "config dir = the volume's mountPath");
                format!("dir \"{}\"", data.display())
            }
            _ => {
                out.push_str(line);
                out.push('\n');
                continue;
            }
        };
        seen.push(directive);
        out.push_str(&replaced);
        out.push('\n');
    }
    seen.sort_unstable();
    assert_eq!(seen, ["bind", "dir", "port"], "each once in the config");
    out
}

/// Whether `unshare --pid --fork` works here (root, or user namespaces allowed).
fn unshare_works() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    *WORKS.get_or_init(|| {
        let ok = Command::new("unshare")
            .args(["--pid", "--fork", "--kill-child", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = writeln!(
                std::io::stderr(),
                "NOTE: unshare --pid is not available: the server runs as a plain child, not as PID 1"
            );
        }
        ok
    })
}

/// The host pid of `unshare`'s child (the server), waiting for it to appear; a server that
/// exits at once (a refused config, say) fails the test with its log.
fn child_of(unshare: &mut Child, log: &Path) -> u32 {
    let parent = unshare.id();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        let children = std::fs::read_to_string(format!("/proc/{parent}/task/{parent}/children"))
            .unwrap_or_default();
        if let Some(pid) = children.split_whitespace().next() {
            return pid.parse().expect("pid");
        }
        if let Ok(Some(status)) = unshare.try_wait() {
            panic!(
                "the server exited at once ({status}); log:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    panic!("unshare started no child");
}

/// The container: the server started as the manifest says, on the stand-in directories.
struct Pod {
    /// `unshare` (which exits with the server's status) or the server itself.
    child: Option<Child>,
    /// The server's pid as seen from here: what SIGTERM goes to.
    server_pid: u32,
    port: u16,
    config_file: PathBuf,
    log: PathBuf,
}

impl Pod {
    fn start(m: &Manifest, root: &Path, data: &Path) -> Pod {
        let port = free_port();
        // The ConfigMap mount: every key a file, as the kubelet writes them.
        let config_dir = root.join("configmap");
        std::fs::create_dir_all(&config_dir).expect("config dir");
        for (key, text) in &m.config_files {
            let text = if key.ends_with(".conf") {
                rewrite_config(text, m, port, data)
            } else {
                text.clone()
            };
            std::fs::write(config_dir.join(key), text).expect("write config");
        }
        let mut args = Vec::new();
        for a in m.command.iter().skip(1).chain(&m.args) {
            assert!(
                !matches!(a.as_str(), "--port" | "--bind"),
                "the manifest passes {a}: map it here as the config's port and bind are"
            );
            let mapped = map_path(a, &m.config_mount, &config_dir)
                .or_else(|| map_path(a, &m.data_mount, data))
                .map_or_else(|| a.clone(), |p| p.display().to_string());
            args.push(mapped);
        }
        let config_file = PathBuf::from(&args[0]);
        assert!(
            config_file.starts_with(&config_dir) && config_file.is_file(),
            "the first argument {:?} must be a file of the ConfigMap mount",
            m.args.first()
        );
        assert_eq!(
            Path::new(&m.command[0]).file_name(),
            Some(std::ffi::OsStr::new("damselfly")),
            "the container runs the damselfly binary"
        );
        let bin = env!("CARGO_BIN_EXE_damselfly");
        let log = root.join(format!("pod-{port}.log"));
        let out = std::fs::File::create(&log).expect("log");
        let mut cmd = if unshare_works() {
            let mut c = Command::new("unshare");
            c.args(["--pid", "--fork", "--kill-child", "--", bin]);
            c
        } else {
            Command::new(bin)
        };
        cmd.args(&args)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .current_dir(data)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log"))
            .stderr(out);
        let mut child = cmd.spawn().expect("start the server");
        let server_pid = if unshare_works() {
            child_of(&mut child, &log)
        } else {
            child.id()
        };
        Pod {
            child: Some(child),
            server_pid,
            port,
            config_file,
            log,
        }
    }

    fn exited(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM to the server and waits for its exit code, at most `grace`.
    fn terminate(&mut self, grace: Duration) -> i32 {
        // SAFETY: signalling the server this test started.
        unsafe { libc::kill(self.server_pid as i32, libc::SIGTERM) };
        let mut child = self.child.take().expect("running");
        let status = wait_timeout(&mut child, grace).unwrap_or_else(|| {
            panic!(
                "the server did not exit within terminationGracePeriodSeconds ({grace:?}); log:\n{}",
                self.log()
            )
        });
        status.code().unwrap_or_else(|| panic!("killed: {status}"))
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: killing the server this test started.
            unsafe { libc::kill(self.server_pid as i32, libc::SIGKILL) };
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Runs a probe's script once against `port`; returns its exit code (None on timeout) and
/// what it printed.
fn run_probe(m: &Manifest, probe: &Probe, port: u16) -> (Option<i32>, String) {
    let from = format!("-p {}", m.port);
    assert!(
        probe.script.contains(&from),
        "{} must name the container port: {}",
        probe.name,
        probe.script
    );
    let script = probe.script.replace(&from, &format!("-p {port}"));
    let out = tempfile::tempfile().expect("probe output");
    let mut child = Command::new("sh")
        .args(["-c", &script])
        .stdin(Stdio::null())
        .stdout(out.try_clone().expect("out"))
        .stderr(out.try_clone().expect("out"))
        .spawn()
        .expect("sh");
    let code = wait_timeout(&mut child, probe.timeout).map(|s| s.code().unwrap_or(-1));
    let mut text = String::new();
    let mut out = out;
    use std::io::Seek;
    out.rewind().ok();
    out.read_to_string(&mut text).ok();
    (code, text)
}

fn assert_probe(m: &Manifest, probe: &Probe, port: u16, pass: bool) {
    let (code, out) = run_probe(m, probe, port);
    assert_eq!(
        code == Some(0),
        pass,
        "{} exited {code:?} (expected {}); output: {out}",
        probe.name,
        if pass { "0" } else { "a failure" }
    );
}

/// The kubelet's start-up: the container starts, the startup probe runs until it passes
/// (within the manifest's budget, capped), then liveness must pass and readiness must pass
/// once loading ends. A start that
/// lost its free port to another process in the meantime is retried on another port.
fn start_pod(m: &Manifest, root: &Path, data: &Path) -> Pod {
    let budget = (m.startup.period * m.startup.failure_threshold).min(STARTUP_CAP);
    'attempt: for _ in 0..5 {
        let mut pod = Pod::start(m, root, data);
        let deadline = Instant::now() + budget;
        loop {
            let (code, out) = run_probe(m, &m.startup, pod.port);
            if code == Some(0) {
                break;
            }
            if pod.exited() {
                if pod.log().contains("Address already in use") {
                    continue 'attempt;
                }
                panic!("the server exited during start-up; log:\n{}", pod.log());
            }
            assert!(
                Instant::now() < deadline,
                "startup probe still failing after {budget:?}: {out}; log:\n{}",
                pod.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // Liveness passes at once (it accepts -LOADING); readiness, which the kubelet keeps
        // running, passes once the data is loaded.
        assert_probe(m, &m.liveness, pod.port, true);
        loop {
            let (code, out) = run_probe(m, &m.readiness, pod.port);
            if code == Some(0) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "readiness probe still failing after {budget:?}: {out}; log:\n{}",
                pod.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        assert_probe(m, &m.liveness, pod.port, true);
        return pod;
    }
    panic!("no free port in 5 attempts");
}

/// The server runs as PID 1 of its PID namespace, as in a container (when unshare works).
fn assert_pid_one(pod: &Pod) {
    if !unshare_works() {
        return;
    }
    let status = std::fs::read_to_string(format!("/proc/{}/status", pod.server_pid)).unwrap();
    let nspid = status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .expect("NSpid");
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "NSpid: {nspid}");
}

/// Every directive of the config file the server read is in effect (CONFIG GET shows it), and
/// none was skipped as unknown.
fn assert_config_applied(pod: &Pod, raw: &mut Raw) {
    let text = std::fs::read_to_string(&pod.config_file).unwrap();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line.split_once(' ').unwrap_or((line, ""));
        let value = value.trim().trim_matches('"');
        let reply = raw.cmd(&["CONFIG", "GET", name]);
        let expected = common::encode(&[name, value]);
        // CONFIG GET's reply is the array [name, value]: the same bytes as the request form.
        assert_eq!(
            String::from_utf8_lossy(&reply),
            String::from_utf8_lossy(&expected),
            "CONFIG GET {name}"
        );
    }
    let log = pod.log();
    assert!(!log.contains("ignoring unsupported directive"), "{log}");
    // What `kubectl logs` shows: plain text, no terminal colour codes.
    assert!(log.contains("ready to accept connections"), "{log}");
    assert!(!log.contains('\x1b'), "escape codes in the log: {log:?}");
    let reported = common::info_field(raw, "server", "config_file").unwrap_or_default();
    assert_eq!(Path::new(&reported), pod.config_file);
}

const STRINGS: usize = 1000;

fn load_dataset(raw: &mut Raw) {
    for i in 0..STRINGS {
        let reply = raw.cmd(&["SET", &format!("key:{i}"), &format!("value:{i}")]);
        assert_eq!(reply, b"+OK\r\n");
    }
    for (cmd, want) in [
        (
            &["HSET", "hash", "f1", "v1", "f2", "v2"][..],
            &b":2\r\n"[..],
        ),
        (&["RPUSH", "list", "a", "b", "c"], b":3\r\n"),
        (&["SADD", "set", "x", "y"], b":2\r\n"),
        (&["ZADD", "zset", "1", "one", "2", "two"], b":2\r\n"),
        (&["SET", "expiring", "v", "EX", "3600"], b"+OK\r\n"),
        (&["SELECT", "3"], b"+OK\r\n"),
        (&["SET", "in-db-3", "here"], b"+OK\r\n"),
        (&["SELECT", "0"], b"+OK\r\n"),
    ] {
        assert_eq!(raw.cmd(cmd), want, "{cmd:?}");
    }
}

fn assert_dataset(raw: &mut Raw) {
    let int = |r: Vec<u8>| -> i64 {
        String::from_utf8_lossy(&r)
            .trim()
            .trim_start_matches(':')
            .parse()
            .unwrap_or_else(|_| panic!("integer reply, got {:?}", String::from_utf8_lossy(&r)))
    };
    assert_eq!(int(raw.cmd(&["DBSIZE"])), STRINGS as i64 + 5);
    for i in 0..STRINGS {
        let value = format!("value:{i}");
        assert_eq!(
            raw.cmd(&["GET", &format!("key:{i}")]),
            common::bulk(&value),
            "key:{i}"
        );
    }
    assert_eq!(raw.cmd(&["HGET", "hash", "f2"]), common::bulk("v2"));
    assert_eq!(int(raw.cmd(&["HLEN", "hash"])), 2);
    assert_eq!(
        raw.cmd(&["LRANGE", "list", "0", "-1"]),
        common::encode(&["a", "b", "c"])
    );
    assert_eq!(int(raw.cmd(&["SISMEMBER", "set", "y"])), 1);
    assert_eq!(int(raw.cmd(&["SCARD", "set"])), 2);
    assert_eq!(
        raw.cmd(&["ZRANGE", "zset", "0", "-1", "WITHSCORES"]),
        common::encode(&["one", "1", "two", "2"])
    );
    let ttl = int(raw.cmd(&["TTL", "expiring"]));
    assert!((1..=3600).contains(&ttl), "TTL {ttl}");
    assert_eq!(raw.cmd(&["SELECT", "3"]), b"+OK\r\n");
    assert_eq!(raw.cmd(&["GET", "in-db-3"]), common::bulk("here"));
    assert_eq!(raw.cmd(&["SELECT", "0"]), b"+OK\r\n");
}

/// Start, probes, data, SIGTERM, start again on the same volume, probes (and the data).
fn pod_life(check_data: bool) {
    let m = manifest();
    let root = tempfile::tempdir().expect("tempdir");
    // A fresh PersistentVolume: an empty directory.
    let data = root.path().join("volume");
    std::fs::create_dir(&data).unwrap();

    // Nothing listens yet: every probe fails.
    let nobody = free_port();
    for p in [&m.startup, &m.readiness, &m.liveness] {
        assert_probe(&m, p, nobody, false);
    }

    let mut pod = start_pod(&m, root.path(), &data);
    assert_pid_one(&pod);
    let mut raw = Raw::tcp(pod.port);
    assert_config_applied(&pod, &mut raw);
    load_dataset(&mut raw);
    assert_dataset(&mut raw);
    drop(raw);
    let started = Instant::now();
    assert_eq!(pod.terminate(m.grace), 0, "exit code after SIGTERM");
    eprintln!("SIGTERM to exit: {:?}", started.elapsed());
    let port = pod.port;
    for p in [&m.startup, &m.readiness, &m.liveness] {
        assert_probe(&m, p, port, false);
    }

    // The pod again, on the same volume.
    let mut pod = start_pod(&m, root.path(), &data);
    if check_data {
        assert_dataset(&mut Raw::tcp(pod.port));
    }
    assert_eq!(pod.terminate(m.grace), 0, "exit code after SIGTERM");
}

#[test]
fn probes_and_shutdown_follow_the_manifest() {
    pod_life(false);
}

/// The journal (`appendonly yes` in the ConfigMap) brings the data back.
#[test]
fn data_survives_a_restart() {
    pod_life(true);
}

/// How a stand-in server answers a command (its name in upper case): the raw reply.
type Reply = fn(&str) -> String;

/// A stand-in server answering each command through `reply` (command name in upper case ->
/// raw reply), to play replies the real server gives only while loading its data.
fn fake_server(reply: Reply) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(conn) = conn else { continue };
            std::thread::spawn(move || {
                let mut w = conn.try_clone().expect("clone");
                let mut r = BufReader::new(conn);
                loop {
                    // A RESP array of bulk strings, as redis-cli sends.
                    let mut line = String::new();
                    if r.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let n: usize = line.trim().trim_start_matches('*').parse().unwrap_or(0);
                    let mut words = Vec::new();
                    for _ in 0..n {
                        let mut len = String::new();
                        r.read_line(&mut len).unwrap_or(0);
                        let len: usize = len.trim().trim_start_matches('$').parse().unwrap_or(0);
                        let mut buf = vec![0u8; len + 2];
                        if r.read_exact(&mut buf).is_err() {
                            return;
                        }
                        words.push(String::from_utf8_lossy(&buf[..len]).to_uppercase());
                    }
                    let name = words.first().cloned().unwrap_or_default();
                    if w.write_all(reply(&name).as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    port
}

fn loading(_: &str) -> String {
    "-LOADING Redis is loading the dataset in memory\r\n".into()
}

/// An INFO reply: one bulk string.
fn info(body: &str) -> String {
    format!("${}\r\n{body}\r\n", body.len())
}

/// The probe scripts read the replies: liveness and startup accept PONG or -LOADING,
/// readiness needs PONG and loading:0, and an error such as NOAUTH fails them all. Played
/// against stand-in servers, since only a loading server (persistence) gives -LOADING.
#[test]
fn probes_read_the_replies() {
    let m = manifest();
    // What the server replies, and whether startup, readiness and liveness pass.
    let cases: [(&str, Reply, [bool; 3]); 5] = [
        (
            "loaded",
            |cmd| match cmd {
                "PING" => "+PONG\r\n".into(),
                _ => info("# Persistence\r\nloading:0\r\nasync_loading:0"),
            },
            [true, true, true],
        ),
        (
            "loading: -LOADING to everything",
            loading,
            [true, false, true],
        ),
        (
            "PONG but INFO says loading:1",
            |cmd| match cmd {
                "PING" => "+PONG\r\n".into(),
                _ => info("# Persistence\r\nloading:1\r\nasync_loading:0"),
            },
            [true, false, true],
        ),
        (
            "PONG but INFO has no loading field",
            |cmd| match cmd {
                "PING" => "+PONG\r\n".into(),
                _ => info("# Persistence\r\nloading:10\r\naof_enabled:0"),
            },
            [true, false, true],
        ),
        (
            "a password is required",
            |_| "-NOAUTH Authentication required.\r\n".into(),
            [false, false, false],
        ),
    ];
    for (what, reply, [startup, readiness, liveness]) in cases {
        let port = fake_server(reply);
        for (probe, pass) in [
            (&m.startup, startup),
            (&m.readiness, readiness),
            (&m.liveness, liveness),
        ] {
            let (code, out) = run_probe(&m, probe, port);
            assert_eq!(
                code == Some(0),
                pass,
                "{what}: {} exited {code:?}; output: {out}",
                probe.name
            );
        }
    }
}
