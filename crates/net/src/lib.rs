//! The runtime layer: it owns threads, sockets and event loops, and nothing else knows which
//! backend runs. One thread per shard, each pinned to a core; each thread runs its shard's
//! mailbox, a 10 Hz housekeeping tick, and the connections it accepted. Two interchangeable
//! backends drive those tasks: glommio executors (io_uring) and tokio current-thread runtimes
//! (epoll). Beside them, `metrics_http` serves the metrics endpoint (`--metrics-port`) on
//! blocking threads of its own.

mod cpus;
mod drive;
mod epoll_backend;
mod handoff;
mod listeners;
pub mod metrics_http;
pub mod probe;
pub mod tls;
mod turn_end;
mod uring_backend;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use damselfly_commands::config::Config;
use damselfly_coord::{mailbox, Cluster, Mailbox, ServerInfo, ShardMsg};
use handoff::{Arrival, Movers};

pub use cpus::{available_cpus, should_pin};
pub use listeners::{ListenerSpec, Listeners};
pub use tls::Tls;

/// Which I/O backend runs the event loops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Uring,
    Epoll,
}

impl Backend {
    pub fn multiplexing_api(self) -> &'static str {
        match self {
            Backend::Uring => "io_uring",
            Backend::Epoll => "epoll",
        }
    }
}

/// How often each thread runs active expiry and idle-client checks (Redis's default hz 10).
pub(crate) const TICK: Duration = Duration::from_millis(100);

/// Stack of each shard thread: 8 MiB, the main thread's default on Linux and so what Redis
/// runs its commands and scripts on. Converting a script's deeply nested reply recurses once
/// per level, and Rust's default 2 MiB for spawned threads is too little for the 1000 levels
/// scripts may return (unoptimized builds use several kilobytes per level).
pub(crate) const THREAD_STACK: usize = 8 << 20;
/// How long shutdown waits for connections to finish their in-flight commands.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Everything the threads of one server share in the runtime layer.
pub(crate) struct Shared {
    pub cluster: Arc<Cluster>,
    pub listeners: Listeners,
    pub pin: Option<Vec<core_affinity::CoreId>>,
    /// Threads that have closed all their connections during shutdown.
    pub drained: AtomicUsize,
    /// Where connections moving to each thread are sent.
    pub movers: Movers,
    /// The TLS configuration for the TLS listeners (`listeners.tls`).
    pub tls: Option<Arc<Tls>>,
}

/// What one shard thread starts with: its shard's mailbox, its mailbox for connections
/// moving to it, and the connections accepted while the data loaded that it serves.
pub(crate) struct ThreadStart {
    pub mailbox: Mailbox<ShardMsg>,
    pub arrivals: Mailbox<Arrival>,
    pub adopted: Vec<Adopted>,
}

impl Shared {
    /// Pins the calling thread to its core, when pinning is on.
    pub fn pin(&self, index: usize) {
        if let Some(cores) = &self.pin {
            if !cores.is_empty() && !core_affinity::set_for_current(cores[index % cores.len()]) {
                tracing::debug!(thread = index, "could not pin thread");
            }
        }
    }

    pub fn threads(&self) -> usize {
        self.cluster.num_shards()
    }

    /// Marks this thread drained and waits (by polling with the given sleep) until every thread
    /// is, so shards keep answering other threads' in-flight requests until nobody needs them.
    pub fn all_drained(&self) -> bool {
        self.drained.load(Ordering::SeqCst) >= self.threads()
    }
}

/// A client connection accepted before the server ran (while the data loaded), with the
/// bytes it sent that were not answered yet; the server serves it from then on.
pub struct Adopted {
    pub stream: AdoptedStream,
    pub unread: Vec<u8>,
}

pub enum AdoptedStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

/// Deals adopted connections round-robin to `threads` threads.
fn deal(adopted: Vec<Adopted>, threads: usize) -> Vec<Vec<Adopted>> {
    let mut hands: Vec<Vec<Adopted>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, a) in adopted.into_iter().enumerate() {
        hands[i % threads.max(1)].push(a);
    }
    hands
}

/// A built, not yet running server.
pub struct Server {
    shared: Arc<Shared>,
    mailboxes: Vec<Mailbox<ShardMsg>>,
    arrivals: Vec<Mailbox<Arrival>>,
    backend: Backend,
    adopted: Vec<Adopted>,
}

impl Server {
    /// Creates the shards' mailboxes and the shared state; listeners are already bound.
    pub fn new(
        config: Arc<Config>,
        threads: usize,
        backend: Backend,
        pin: bool,
        listeners: Listeners,
        info: ServerInfo,
    ) -> Server {
        let (senders, mailboxes): (Vec<_>, Vec<_>) = (0..threads).map(|_| mailbox()).unzip();
        let cluster = Arc::new(Cluster::new(config, senders));
        let _ = cluster.info.set(ServerInfo {
            multiplexing_api: backend.multiplexing_api(),
            ..info
        });
        let pin = pin.then(|| core_affinity::get_core_ids().unwrap_or_default());
        let (movers, arrivals): (Vec<_>, Vec<_>) = (0..threads).map(|_| mailbox()).unzip();
        Server {
            shared: Arc::new(Shared {
                cluster,
                listeners,
                pin,
                drained: AtomicUsize::new(0),
                movers: movers.into(),
                tls: None,
            }),
            mailboxes,
            arrivals,
            backend,
            adopted: Vec::new(),
        }
    }

    /// The TLS configuration the TLS listeners serve with (`Tls::from_config`); without it
    /// they are not served.
    pub fn set_tls(&mut self, tls: Option<Arc<Tls>>) {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.tls = tls;
        }
    }

    /// Connections to serve from the start, beside those the listeners will accept.
    pub fn adopt(&mut self, connections: Vec<Adopted>) {
        self.adopted.extend(connections);
    }

    pub fn cluster(&self) -> Arc<Cluster> {
        self.shared.cluster.clone()
    }

    /// Runs until shutdown is triggered and every thread has drained.
    pub fn run(self) -> std::io::Result<()> {
        let adopted = deal(self.adopted, self.mailboxes.len());
        let starts = self
            .mailboxes
            .into_iter()
            .zip(self.arrivals)
            .zip(adopted)
            .map(|((mailbox, arrivals), adopted)| ThreadStart {
                mailbox,
                arrivals,
                adopted,
            })
            .collect();
        match self.backend {
            Backend::Epoll => epoll_backend::run(self.shared, starts),
            Backend::Uring => uring_backend::run(self.shared, starts),
        }
    }
}
