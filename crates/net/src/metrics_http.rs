//! The metrics endpoint (`--metrics-port`, docs/operations.md "Metrics"): a small blocking
//! HTTP/1.1 server on threads of its own, apart from the shard threads. Scrapes are rare, so
//! each connection gets one request and one reply (`Connection: close`), served on a
//! short-lived thread; at most [`MAX_CONNECTIONS`] are served at once and further ones are
//! closed at once. The request head is read with a size limit and a deadline, so a slow or
//! hostile client costs one thread for a few seconds at most and cannot reach the shards.
//!
//! - `GET /metrics`: the figures `damselfly_coord::metrics` renders (200), in OpenMetrics
//!   when the `Accept` header asks for it, else Prometheus's text format 0.0.4;
//! - `GET /healthz`: 200 `ok` once the server runs, 503 while it loads its data at start-up
//!   or after shutdown began;
//! - another path: 404; another method than GET or HEAD: 405; a malformed request: 400; a
//!   request head over [`MAX_HEAD`] bytes: 431.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use damselfly_coord::metrics::{self, Format, Snapshot};
use damselfly_coord::Cluster;

use crate::{ListenerSpec, Listeners};

/// Largest request head (request line and headers) read.
pub const MAX_HEAD: usize = 8 << 10;
/// How long a client has to send its whole request head.
pub const READ_DEADLINE: Duration = Duration::from_secs(5);
/// How long writing the reply may block.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 16;

/// What the endpoint's threads share.
struct State {
    /// Set once the data has loaded and the shards run.
    cluster: OnceLock<Arc<Cluster>>,
    /// Connections being served.
    active: AtomicUsize,
}

/// The running endpoint: serves `/healthz` 503 and a loading scrape until [`serve`] hands it
/// the running server.
///
/// [`serve`]: MetricsEndpoint::serve
pub struct MetricsEndpoint {
    state: Arc<State>,
}

impl MetricsEndpoint {
    /// Binds `port` on the addresses of `bind` (the same as Redis's listeners: `*`, `::*`,
    /// `-` for optional) and starts accepting. Errors when no address can be bound.
    pub fn start(bind: &[String], port: u16) -> io::Result<MetricsEndpoint> {
        let spec = ListenerSpec {
            bind: bind.to_vec(),
            port,
            tls_port: 0,
            unixsocket: None,
            unixsocketperm: None,
            backlog: 64,
        };
        let mut listeners = Listeners::bind(&spec).map_err(|e| {
            io::Error::new(e.kind(), format!("metrics endpoint (--metrics-port): {e}"))
        })?;
        let state = Arc::new(State {
            cluster: OnceLock::new(),
            active: AtomicUsize::new(0),
        });
        for listener in std::mem::take(&mut listeners.tcp) {
            listener.set_nonblocking(false)?;
            let state = state.clone();
            std::thread::Builder::new()
                .name("damselfly-metrics".into())
                .spawn(move || accept_loop(&listener, &state))?;
        }
        Ok(MetricsEndpoint { state })
    }

    /// Loading is over: serve the running server's figures from now on.
    pub fn serve(&self, cluster: Arc<Cluster>) {
        let _ = self.state.cluster.set(cluster);
    }
}

fn accept_loop(listener: &TcpListener, state: &Arc<State>) {
    loop {
        let stream = match listener.accept() {
            Ok((stream, _)) => stream,
            Err(e) => {
                // EMFILE and the like: wait rather than spin.
                tracing::debug!("metrics endpoint: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        if state.active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            state.active.fetch_sub(1, Ordering::SeqCst);
            drop(stream);
            continue;
        }
        let state2 = state.clone();
        let spawned = std::thread::Builder::new()
            .name("damselfly-metrics-conn".into())
            .spawn(move || {
                if let Err(e) = handle(stream, &state2) {
                    tracing::debug!("metrics endpoint: {e}");
                }
                state2.active.fetch_sub(1, Ordering::SeqCst);
            });
        if let Err(e) = spawned {
            state.active.fetch_sub(1, Ordering::SeqCst);
            tracing::warn!("metrics endpoint: cannot start a thread: {e}");
        }
    }
}

/// Why a request head could not be read.
enum HeadError {
    TooLarge,
    /// Closed, timed out or failed before the head ended: nothing to answer.
    Gone,
}

/// Reads up to the blank line ending the head, at most `MAX_HEAD` bytes, before `deadline`.
fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Vec<u8>, HeadError> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    loop {
        if let Some(end) = head_end(&head) {
            head.truncate(end);
            return Ok(head);
        }
        if head.len() >= MAX_HEAD {
            return Err(HeadError::TooLarge);
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return Err(HeadError::Gone);
        }
        let want = buf.len().min(MAX_HEAD + 4 - head.len());
        match stream.read(&mut buf[..want]) {
            Ok(0) | Err(_) => return Err(HeadError::Gone),
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
}

/// Where the head ends (the start of its blank line), accepting bare LF line ends.
fn head_end(bytes: &[u8]) -> Option<usize> {
    let crlf = bytes.windows(4).position(|w| w == b"\r\n\r\n");
    let lf = bytes.windows(2).position(|w| w == b"\n\n");
    match (crlf, lf) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// A parsed request: method, path (without the query), and the `Accept` header.
struct Request {
    method: String,
    path: String,
    accept: Option<String>,
}

fn parse(head: &[u8]) -> Option<Request> {
    let text = std::str::from_utf8(head).ok()?;
    let mut lines = text.split('\n').map(|l| l.strip_suffix('\r').unwrap_or(l));
    let mut parts = lines.next()?.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(|b| b.is_ascii_uppercase())
        || !target.starts_with('/')
        || !version.starts_with("HTTP/1.")
    {
        return None;
    }
    let mut accept = None;
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        if name.trim().eq_ignore_ascii_case("accept") {
            accept = Some(value.trim().to_string());
        }
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some(Request {
        method: method.to_string(),
        path: path.to_string(),
        accept,
    })
}

fn respond(
    stream: &mut TcpStream,
    status: &str,
    content_type: &str,
    extra: &str,
    body: &str,
    head_only: bool,
) -> io::Result<()> {
    stream.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let mut reply = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if !head_only {
        reply.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&reply)?;
    stream.flush()?;
    // Drain nothing: the client sent only a head (GET has no body); close our side.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

const TEXT: &str = "text/plain; charset=utf-8";

fn handle(mut stream: TcpStream, state: &State) -> io::Result<()> {
    let head = match read_head(&mut stream, Instant::now() + READ_DEADLINE) {
        Ok(head) => head,
        Err(HeadError::TooLarge) => {
            return respond(
                &mut stream,
                "431 Request Header Fields Too Large",
                TEXT,
                "",
                "request head too large\n",
                false,
            )
        }
        Err(HeadError::Gone) => return Ok(()),
    };
    let Some(req) = parse(&head) else {
        return respond(
            &mut stream,
            "400 Bad Request",
            TEXT,
            "",
            "bad request\n",
            false,
        );
    };
    let head_only = req.method == "HEAD";
    if req.method != "GET" && !head_only {
        return respond(
            &mut stream,
            "405 Method Not Allowed",
            TEXT,
            "Allow: GET, HEAD\r\n",
            "method not allowed\n",
            false,
        );
    }
    let cluster = state.cluster.get();
    match req.path.as_str() {
        "/metrics" => {
            let format = Format::from_accept(req.accept.as_deref());
            let body = match cluster {
                Some(cluster) => metrics::render_metrics(cluster, format),
                None => Snapshot::loading().render(format),
            };
            respond(
                &mut stream,
                "200 OK",
                format.content_type(),
                "",
                &body,
                head_only,
            )
        }
        "/healthz" => {
            let (status, body) = match cluster {
                None => ("503 Service Unavailable", "loading\n"),
                Some(c) if c.shutdown.is_triggered() => {
                    ("503 Service Unavailable", "shutting down\n")
                }
                Some(_) => ("200 OK", "ok\n"),
            };
            respond(&mut stream, status, TEXT, "", body, head_only)
        }
        _ => respond(
            &mut stream,
            "404 Not Found",
            TEXT,
            "",
            "not found: try /metrics or /healthz\n",
            head_only,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_scrape_request() {
        let r = parse(b"GET /metrics?x=1 HTTP/1.1\r\nHost: a\r\nAccept: text/plain\r\n").unwrap();
        assert_eq!(r.method, "GET");
        assert_eq!(r.path, "/metrics");
        assert_eq!(r.accept.as_deref(), Some("text/plain"));
        assert!(parse(b"GET /metrics HTTP/1.0\n").is_some());
    }

    #[test]
    fn refuses_malformed_requests() {
        for bad in [
            &b""[..],
            b"GET",
            b"GET /metrics",
            b"get /metrics HTTP/1.1",
            b"GET metrics HTTP/1.1",
            b"GET /metrics SPDY/3",
            b"GET /metrics HTTP/1.1 extra",
            b"GET /metrics HTTP/1.1\r\nno colon here",
            b"\xff\xfe /metrics HTTP/1.1",
        ] {
            assert!(parse(bad).is_none(), "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn finds_the_end_of_a_head() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\n\n"), Some(14));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n"), None);
    }
}
