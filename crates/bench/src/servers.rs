//! The servers under comparison: started on free ports and unix sockets in a temporary
//! directory, waited for (PING), sampled through /proc (CPU time, RSS), asked for INFO, and
//! stopped by PID when the run ends, whatever happens. Also owns the command-line options every
//! driver shares to start them (the Damselfly binary, its shard threads) and a blocking
//! pipelined connection for drivers that send their own commands.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::tools::Target;

pub struct Server {
    pub name: &'static str,
    pub port: u16,
    pub socket: PathBuf,
    child: Child,
}

/// A unix socket path not used by another server of this run.
fn socket_path(dir: &Path, name: &str) -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    dir.join(format!("{name}-{n}.sock"))
}

fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Server {
    /// Starts `redis-server` from PATH without persistence, with `extra` arguments (e.g.
    /// `--maxmemory`).
    pub fn redis(dir: &Path, extra: &[String]) -> Result<Server, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let socket = socket_path(dir, "redis");
        let mut cmd = Command::new("redis-server");
        cmd.args([
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--enable-debug-command", "yes", "--unixsocket"])
        .arg(&socket)
        .arg("--dir")
        .arg(dir)
        .args(extra);
        Self::spawn("redis", cmd, port, socket)
    }

    /// Starts Damselfly from `binary` with `threads` shard threads, without persistence (as
    /// Redis here), its files (none) in `dir`, with `extra` arguments.
    pub fn damselfly(
        binary: &Path,
        dir: &Path,
        threads: usize,
        extra: &[String],
    ) -> Result<Server, String> {
        let port = free_port().map_err(|e| e.to_string())?;
        let socket = socket_path(dir, "damselfly");
        let mut cmd = Command::new(binary);
        cmd.args([
            "--port",
            &port.to_string(),
            "--threads",
            &threads.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .args(["--loglevel", "warning", "--unixsocket"])
        .arg(&socket)
        .arg("--dir")
        .arg(dir)
        .args(extra);
        Self::spawn("damselfly", cmd, port, socket)
    }

    fn spawn(
        name: &'static str,
        mut cmd: Command,
        port: u16,
        socket: PathBuf,
    ) -> Result<Server, String> {
        // If this driver dies (SIGKILL, Ctrl-C), the kernel stops the server too.
        // SAFETY: prctl only sets a flag of the child process between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("{name}: {e}"))?;
        eprintln!("started {name} pid {} port {port}", child.id());
        let mut server = Server {
            name,
            port,
            socket,
            child,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = server.child.try_wait() {
                return Err(format!("{name} exited at start-up: {status}"));
            }
            if server.command(&["PING"]).is_ok_and(|r| r == "+PONG") {
                return Ok(server);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(format!("{name} did not answer PING"))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn target(&self, unix: bool) -> Target {
        if unix {
            Target::Unix(self.socket.clone())
        } else {
            Target::Tcp(self.port)
        }
    }

    /// Sends one command and returns its reply's first line (bulk replies: the bulk's text).
    pub fn command(&self, args: &[&str]) -> Result<String, String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(Duration::from_secs(120))).ok();
        let mut wire = format!("*{}\r\n", args.len());
        for a in args {
            wire.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(wire.as_bytes()).map_err(|e| e.to_string())?;
        let mut r = BufReader::new(s);
        let mut line = String::new();
        r.read_line(&mut line).map_err(|e| e.to_string())?;
        let line = line.trim_end().to_string();
        if let Some(len) = line.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()) {
            let mut body = vec![0; len + 2];
            r.read_exact(&mut body).map_err(|e| e.to_string())?;
            body.truncate(len);
            return Ok(String::from_utf8_lossy(&body).into_owned());
        }
        Ok(line)
    }

    /// A field of INFO (e.g. `used_memory`).
    pub fn info_field(&self, section: &str, field: &str) -> Option<u64> {
        let info = self.command(&["INFO", section]).ok()?;
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{field}:")))
            .and_then(|v| v.trim().parse().ok())
    }

    /// (CPU seconds used so far: user + system, resident set bytes), from /proc.
    pub fn usage(&self) -> Usage {
        process_usage(self.pid())
    }

    /// (INFO `used_memory`, resident set bytes from /proc) now.
    pub fn memory(&self) -> (u64, u64) {
        (
            self.info_field("memory", "used_memory").unwrap_or(0),
            self.usage().rss,
        )
    }

    /// `DEBUG POPULATE count prefix size`: keys `prefix:0`..`prefix:{count-1}` that do not exist
    /// yet, with `size`-byte values.
    pub fn populate(&self, count: u64, prefix: &str, size: u64) -> Result<(), String> {
        let reply = self.command(&[
            "DEBUG",
            "POPULATE",
            &count.to_string(),
            prefix,
            &size.to_string(),
        ])?;
        if reply != "+OK" {
            return Err(format!("{}: DEBUG POPULATE replied {reply}", self.name));
        }
        Ok(())
    }

    /// A pipelined connection to the server over TCP.
    pub fn connect(&self) -> Result<Pipe, String> {
        Pipe::connect(self.port)
    }

    /// Stops the server (SIGTERM, then SIGKILL) and reaps it.
    pub fn stop(&mut self) {
        // SAFETY: signalling a child process this struct started and still owns.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                eprintln!("stopped {} pid {}", self.name, self.child.id());
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        eprintln!("killed {} pid {}", self.name, self.child.id());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.stop();
        }
    }
}

/// How to start the servers: the options every driver that starts them shares.
#[derive(clap::Args, Clone, Debug)]
pub struct ServerArgs {
    /// Damselfly's shard threads.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The Damselfly binary (default: release/damselfly under $CARGO_TARGET_DIR, else target/).
    #[arg(long)]
    pub damselfly: Option<PathBuf>,
}

impl ServerArgs {
    /// A launcher for this run.
    pub fn launcher(&self) -> Result<Launcher, String> {
        let binary = self.damselfly.clone().unwrap_or_else(|| {
            std::env::var_os("CARGO_TARGET_DIR")
                .map_or_else(|| PathBuf::from("target"), PathBuf::from)
                .join("release/damselfly")
        });
        let dir = std::env::temp_dir().join(format!("damselfly-bench-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        Ok(Launcher {
            binary,
            dir,
            threads: self.threads,
        })
    }
}

/// Starts fresh servers of either kind for one run, their sockets in a temporary directory
/// that goes when the launcher does.
pub struct Launcher {
    binary: PathBuf,
    dir: PathBuf,
    pub threads: usize,
}

impl Launcher {
    /// Starts `name` (`redis` or `damselfly`) with `extra` arguments.
    pub fn start(&self, name: &str, extra: &[String]) -> Result<Server, String> {
        match name {
            "redis" => Server::redis(&self.dir, extra),
            "damselfly" if !self.binary.exists() => Err(format!(
                "{} not found: build it first (cargo build --release -p damselfly)",
                self.binary.display()
            )),
            "damselfly" => Server::damselfly(&self.binary, &self.dir, self.threads, extra),
            _ => Err(format!("unknown server {name:?} (redis or damselfly)")),
        }
    }
}

impl Drop for Launcher {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A reply read from a [`Pipe`].
pub type Reply = redis_protocol::resp2::types::BytesFrame;

/// A blocking TCP connection that writes many commands at once and then reads their replies
/// in order, for drivers whose load redis-benchmark cannot express.
pub struct Pipe {
    stream: TcpStream,
    out: Vec<u8>,
    buf: bytes::BytesMut,
}

impl Pipe {
    fn connect(port: u16) -> Result<Pipe, String> {
        let stream = TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        stream
            .set_read_timeout(Some(Duration::from_secs(120)))
            .map_err(|e| e.to_string())?;
        Ok(Pipe {
            stream,
            out: Vec::new(),
            buf: bytes::BytesMut::with_capacity(64 * 1024),
        })
    }

    /// Queues one command; nothing is sent before [`Pipe::flush`].
    pub fn queue(&mut self, args: &[&[u8]]) {
        self.out
            .extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
        for a in args {
            self.out
                .extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            self.out.extend_from_slice(a);
            self.out.extend_from_slice(b"\r\n");
        }
    }

    /// Sends every queued command.
    pub fn flush(&mut self) -> Result<(), String> {
        let sent = self.stream.write_all(&self.out).map_err(|e| e.to_string());
        self.out.clear();
        sent
    }

    /// The next reply (error replies included: the caller decides what they mean).
    pub fn reply(&mut self) -> Result<Reply, String> {
        loop {
            match redis_protocol::resp2::decode::decode_bytes_mut(&mut self.buf) {
                Ok(Some((frame, _, _))) => return Ok(frame),
                Ok(None) => {
                    // Read into the buffer's tail, then keep only what arrived.
                    let start = self.buf.len();
                    self.buf.resize(start + 64 * 1024, 0);
                    let n = self
                        .stream
                        .read(&mut self.buf[start..])
                        .map_err(|e| e.to_string())?;
                    self.buf.truncate(start + n);
                    if n == 0 {
                        return Err("connection closed".into());
                    }
                }
                Err(e) => return Err(format!("bad reply: {e:?}")),
            }
        }
    }
}

/// A process's CPU time so far and its resident set.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    /// User-space CPU seconds.
    pub user: f64,
    /// Kernel CPU seconds.
    pub sys: f64,
    pub rss: u64,
}

pub fn process_usage(pid: u32) -> Usage {
    let ticks = 100.0; // USER_HZ on Linux
    let page = 4096;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // utime and stime are fields 14 and 15 (1-based), i.e. 11 and 12 after the name.
    Usage {
        user: num(11) as f64 / ticks,
        sys: num(12) as f64 / ticks,
        rss: num(21) * page,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_usage() {
        let u = process_usage(std::process::id());
        assert!(u.user > 0.0 || u.sys > 0.0, "a test process has run");
        assert!(
            u.rss > 1 << 20,
            "a test process has more than 1 MB resident"
        );
    }
}
