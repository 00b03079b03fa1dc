//! While start-up loads the data, the listeners already answer as Redis does while loading:
//! `-LOADING Redis is loading the dataset in memory` to commands, and INFO with `loading:1`
//! and the progress fields, so probes and clients can tell a loading server from a dead one
//! (a Kubernetes liveness probe accepts -LOADING, readiness waits for loading:0). When loading
//! ends, the shard threads take over the listeners and the connections made meanwhile, with
//! any input not answered yet, as Redis keeps serving a client that connected while it
//! loaded.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use damselfly_net::{Adopted, AdoptedStream, Listeners};
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
    thread: Option<JoinHandle<Vec<Adopted>>>,
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

    /// Loading is over: stops accepting and returns the connections still open, for the
    /// server to serve.
    pub fn finish(mut self) -> Vec<Adopted> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

fn accept_loop(
    tcp: &[TcpListener],
    unix: Option<&UnixListener>,
    stop: &Arc<AtomicBool>,
    progress: &Arc<Progress>,
    started: u64,
) -> Vec<Adopted> {
    let open = Arc::new(AtomicUsize::new(0));
    let mut conns: Vec<JoinHandle<Option<Adopted>>> = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        let mut accepted: Vec<AdoptedStream> = Vec::new();
        for l in tcp {
            while let Ok((s, _)) = l.accept() {
                accepted.push(AdoptedStream::Tcp(s));
            }
        }
        if let Some(l) = unix {
            while let Ok((s, _)) = l.accept() {
                accepted.push(AdoptedStream::Unix(s));
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
                    let kept = serve(conn, &stop, &progress, started);
                    open.fetch_sub(1, Ordering::Relaxed);
                    kept
                });
            if let Ok(h) = spawned {
                conns.push(h);
            }
        }
        conns.retain(|h| !h.is_finished());
        std::thread::sleep(POLL);
    }
    conns
        .into_iter()
        .filter_map(|h| h.join().ok().flatten())
        .collect()
}

/// A client socket as `Read` and `Write`.
struct Conn(AdoptedStream);

impl Conn {
    fn set_read_timeout(&self, t: Option<Duration>) -> std::io::Result<()> {
        match &self.0 {
            AdoptedStream::Tcp(s) => s.set_read_timeout(t),
            AdoptedStream::Unix(s) => s.set_read_timeout(t),
        }
    }

    /// Handed to the server: without the read timeout this responder polls with.
    fn adopted(self, unread: Vec<u8>) -> Option<Adopted> {
        self.set_read_timeout(None).ok()?;
        Some(Adopted {
            stream: self.0,
            unread,
        })
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        match &mut self.0 {
            AdoptedStream::Tcp(s) => s.read(buf),
            AdoptedStream::Unix(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match &mut self.0 {
            AdoptedStream::Tcp(s) => s.write(buf),
            AdoptedStream::Unix(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Answers one client until loading ends (then returns it with its unanswered input) or it
/// goes away (None).
fn serve(
    stream: AdoptedStream,
    stop: &AtomicBool,
    progress: &Progress,
    started: u64,
) -> Option<Adopted> {
    let mut conn = Conn(stream);
    conn.set_read_timeout(Some(POLL * 5)).ok()?;
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
            Ok(0) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(_) => return None,
        }
        if buf.len() > MAX_REQUEST {
            return None;
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
                            return None;
                        }
                        _ => LOADING.to_vec(),
                    };
                    if conn.write_all(&reply).is_err() {
                        return None;
                    }
                    pos = consumed;
                }
                Ok(ParsedCommand::Empty { consumed }) => pos = consumed,
                Ok(ParsedCommand::Incomplete { .. }) => break,
                Err(e) => {
                    let _ = conn.write_all(format!("-ERR {e}\r\n").as_bytes());
                    return None;
                }
            }
        }
        buf.drain(..pos);
        parser = RequestParser::default();
    }
    conn.adopted(buf)
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
