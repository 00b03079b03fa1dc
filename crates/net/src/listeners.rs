//! Listening sockets, bound once at start-up so a port or socket path that is in use is an
//! error before any thread starts. TCP sockets are bound without SO_REUSEPORT, so a second
//! server on the same port fails instead of silently binding beside the first. A unix socket
//! file left by a crashed run is replaced; one a live server answers on is an error.

use std::io;
use std::net::{SocketAddr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;

use socket2::{Domain, Socket, Type};

/// What to listen on.
#[derive(Debug, Clone, Default)]
pub struct ListenerSpec {
    /// Addresses like Redis's `bind`: `*` is every IPv4 address, `::*` every IPv6 one, and a
    /// leading `-` makes an address optional (skipped when unavailable).
    pub bind: Vec<String>,
    /// 0 disables TCP.
    pub port: u16,
    /// The TLS port, on the same addresses; 0 disables TLS.
    pub tls_port: u16,
    pub unixsocket: Option<PathBuf>,
    /// Octal mode for the socket file (e.g. 0o700); None leaves the umask's.
    pub unixsocketperm: Option<u32>,
    pub backlog: i32,
}

pub struct Listeners {
    pub tcp: Vec<TcpListener>,
    /// TLS clients' listeners (`tls-port`): served only by the shard threads, not while the
    /// data loads.
    pub tls: Vec<TcpListener>,
    pub unix: Option<UnixListener>,
    unix_path: Option<PathBuf>,
}

fn bind_tcp(addr: SocketAddr, backlog: i32) -> io::Result<TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn bind_unix(path: &PathBuf, perm: Option<u32>) -> io::Result<UnixListener> {
    if path.exists() {
        if UnixStream::connect(path).is_ok() {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!(
                    "unix socket {} is in use by a running server",
                    path.display()
                ),
            ));
        }
        tracing::info!(path = %path.display(), "removing stale unix socket file");
        std::fs::remove_file(path)?;
    }
    let listener = UnixListener::bind(path)?;
    if let Some(mode) = perm {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    listener.set_nonblocking(true)?;
    Ok(listener)
}

impl Listeners {
    pub fn bind(spec: &ListenerSpec) -> io::Result<Listeners> {
        let tcp = bind_port(spec, spec.port)?;
        let tls = bind_port(spec, spec.tls_port)?;
        let unix = match &spec.unixsocket {
            Some(path) => Some(bind_unix(path, spec.unixsocketperm)?),
            None => None,
        };
        if tcp.is_empty() && tls.is_empty() && unix.is_none() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "no listener configured: set --port, --tls-port or --unixsocket",
            ));
        }
        Ok(Listeners {
            tcp,
            tls,
            unix,
            unix_path: spec.unixsocket.clone(),
        })
    }

    /// The TCP port in use (the first listener's), 0 when TCP is off.
    pub fn tcp_port(&self) -> u16 {
        self.tcp
            .first()
            .and_then(|l| l.local_addr().ok())
            .map_or(0, |a| a.port())
    }

    /// One line naming every listener, for the start-up log.
    pub fn describe(&self) -> String {
        let mut parts: Vec<String> = self
            .tcp
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .map(|a| format!("tcp {a}"))
            .collect();
        parts.extend(
            self.tls
                .iter()
                .filter_map(|l| l.local_addr().ok())
                .map(|a| format!("tls {a}")),
        );
        if let Some(p) = &self.unix_path {
            parts.push(format!("unix {}", p.display()));
        }
        parts.join(", ")
    }
}

/// Listens on `port` at every `bind` address (none when `port` is 0).
fn bind_port(spec: &ListenerSpec, port: u16) -> io::Result<Vec<TcpListener>> {
    let mut listeners = Vec::new();
    if port == 0 {
        return Ok(listeners);
    }
    for raw in &spec.bind {
        let (optional, host) = match raw.strip_prefix('-') {
            Some(h) => (true, h),
            None => (false, raw.as_str()),
        };
        let ip = match host {
            "*" => "0.0.0.0",
            "::*" => "::",
            other => other,
        };
        let addr: SocketAddr = match ip.parse::<std::net::IpAddr>() {
            Ok(ip) => SocketAddr::new(ip, port),
            Err(_) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid bind address '{raw}'"),
                ))
            }
        };
        match bind_tcp(addr, spec.backlog) {
            Ok(l) => listeners.push(l),
            Err(e) if optional => {
                tracing::warn!("skipping optional bind address {addr}: {e}")
            }
            Err(e) => {
                return Err(io::Error::new(
                    e.kind(),
                    format!("could not listen on {addr}: {e}"),
                ))
            }
        }
    }
    Ok(listeners)
}

impl Drop for Listeners {
    fn drop(&mut self) {
        if let (Some(path), Some(_)) = (&self.unix_path, &self.unix) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The peer and local address of an accepted socket, as CLIENT LIST prints them.
pub(crate) fn describe_tcp(
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
) -> (String, String) {
    let f = |a: Option<SocketAddr>| a.map_or_else(|| "?:0".to_string(), |a| a.to_string());
    (f(peer), f(local))
}

/// Unix clients show the socket path with port 0, as in Redis.
pub(crate) fn describe_unix(path: &str) -> (String, String) {
    (format!("{path}:0"), format!("{path}:0"))
}
