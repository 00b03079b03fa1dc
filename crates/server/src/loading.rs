//! While start-up loads the data, the listeners already answer as Redis does while loading:
//! `-LOADING Redis is loading the dataset in memory` to commands, and INFO with `loading:1`
//! and the progress fields, so probes and clients can tell a loading server from a dead one
//! (a Kubernetes liveness probe accepts -LOADING, readiness waits for loading:0). When loading
//! ends, those connections are closed and the shard threads take over the listeners.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use damselfly_net::Listeners;
use damselfly_protocol::{Limits, ParsedCommand, RequestParser};

const LOADING: &[u8] = b"-LOADING Redis is loading the dataset in memory\r\n";
/// Connections served at once while loading; more are closed at once.
const MAX_CONNECTIONS: usize = 256;
/// A request while loading is small (INFO, PING, a probe): larger ones close the connection.
const MAX_REQUEST: usize = 64 << 10;
const POLL: Duration = Duration::from_millis(20);

/// How far loading got, updated by the recovery threads.
#[derive(Default)]
pub struct Progress {
    pub total_bytes: AtomicU64,
    pub total_records: AtomicU64,
    pub done_records: AtomicU64,
}

impl Progress {
    fn loaded_bytes(&self) -> u64 {
        let total = self.total_bytes.load(Ordering::Relaxed);
        let records = self.total_records.load(Ordering::Relaxed);
        let done = self.done_records.load(Ordering::Relaxed).min(records);
        if records == 0 {
            return 0;
        }
        (u128::from(total) * u128::from(done) / u128::from(records)) as u64
    }
}

/// The loading responder: runs until `finish`.
pub struct Responder {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Responder {
    /// Starts answering on copies of the listeners (the originals stay for the server).
    pub fn start(listeners: &Listeners, progress: Arc<Progress>) -> Responder {
        let tcp: Vec<TcpListener> = listeners
            .tcp
            .iter()
            .filter_map(|l| l.try_clone().ok())
            .collect();
        let unix: Option<UnixListener> = listeners.unix.as_ref().and_then(|l| l.try_clone().ok());
        let stop = Arc::new(AtomicBool::new(false));
        let started = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("damselfly-loading".into())
            .spawn(move || accept_loop(&tcp, unix.as_ref(), &flag, &progress, started))
            .ok();
        Responder { stop, thread }
    }

    /// Loading is over: closes the connections it served and stops accepting.
    pub fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn accept_loop(
    tcp: &[TcpListener],
    unix: Option<&UnixListener>,
    stop: &Arc<AtomicBool>,
    progress: &Arc<Progress>,
    started: u64,
) {
    let open = Arc::new(AtomicUsize::new(0));
    let mut conns: Vec<JoinHandle<()>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut accepted: Vec<Box<dyn Conn>> = Vec::new();
        for l in tcp {
            while let Ok((s, _)) = l.accept() {
                accepted.push(Box::new(s));
            }
        }
        if let Some(l) = unix {
            while let Ok((s, _)) = l.accept() {
                accepted.push(Box::new(s));
            }
        }
        for conn in accepted {
            if open.load(Ordering::Relaxed) >= MAX_CONNECTIONS {
                continue;
            }
            open.fetch_add(1, Ordering::Relaxed);
            let (stop, progress, open) = (stop.clone(), progress.clone(), open.clone());
            let spawned = std::thread::Builder::new()
                .name("damselfly-loading-client".into())
                .spawn(move || {
                    serve(conn, &stop, &progress, started);
                    open.fetch_sub(1, Ordering::Relaxed);
                });
            if let Ok(h) = spawned {
                conns.push(h);
            }
        }
        conns.retain(|h| !h.is_finished());
        std::thread::sleep(POLL);
    }
    for h in conns {
        let _ = h.join();
    }
}

/// A client socket, TCP or unix.
trait Conn: Read + Write + Send {
    fn set_timeout(&self, t: Duration) -> std::io::Result<()>;
}

impl Conn for std::net::TcpStream {
    fn set_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

impl Conn for std::os::unix::net::UnixStream {
    fn set_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

fn serve(mut conn: Box<dyn Conn>, stop: &AtomicBool, progress: &Progress, started: u64) {
    if conn.set_timeout(POLL * 5).is_err() {
        return;
    }
    let mut buf = Vec::new();
    let mut parser = RequestParser::default();
    let (mut spans, mut aux) = (Vec::new(), Vec::new());
    let limits = Limits {
        max_bulk_len: MAX_REQUEST as u64,
        authenticated: true,
    };
    let mut chunk = [0u8; 4096];
    while !stop.load(Ordering::Relaxed) {
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return,
        }
        if buf.len() > MAX_REQUEST {
            return;
        }
        let mut pos = 0;
        loop {
            spans.clear();
            aux.clear();
            match parser.parse(&buf, pos, &mut spans, &mut aux, &limits) {
                Ok(ParsedCommand::Command {
                    consumed, inline, ..
                }) => {
                    let source = if inline { &aux } else { &buf };
                    let name = spans
                        .first()
                        .map(|s| source[s.start..s.start + s.len].to_ascii_lowercase())
                        .unwrap_or_default();
                    let reply = match name.as_slice() {
                        b"info" => info(progress, started),
                        b"quit" => {
                            let _ = conn.write_all(b"+OK\r\n");
                            return;
                        }
                        _ => LOADING.to_vec(),
                    };
                    if conn.write_all(&reply).is_err() {
                        return;
                    }
                    pos = consumed;
                }
                Ok(ParsedCommand::Empty { consumed }) => pos = consumed,
                Ok(ParsedCommand::Incomplete { .. }) => break,
                Err(e) => {
                    let _ = conn.write_all(format!("-ERR {e}\r\n").as_bytes());
                    return;
                }
            }
        }
        buf.drain(..pos);
        parser = RequestParser::default();
    }
}

/// INFO while loading: Redis's persistence fields with the progress.
fn info(progress: &Progress, started: u64) -> Vec<u8> {
    let total = progress.total_bytes.load(Ordering::Relaxed);
    let loaded = progress.loaded_bytes();
    let perc = if total == 0 {
        0.0
    } else {
        loaded as f64 * 100.0 / total as f64
    };
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let elapsed = now.saturating_sub(started);
    let eta = if loaded == 0 {
        1
    } else {
        (elapsed as f64 * (total - loaded.min(total)) as f64 / loaded as f64) as u64
    };
    let body = format!(
        "# Persistence\r\nloading:1\r\nasync_loading:0\r\nloading_start_time:{started}\r\n\
         loading_total_bytes:{total}\r\nloading_rdb_used_mem:0\r\nloading_loaded_bytes:{loaded}\r\n\
         loading_loaded_perc:{perc:.2}\r\nloading_eta_seconds:{eta}\r\n"
    );
    format!("${}\r\n{body}\r\n", body.len()).into_bytes()
}
