//! The epoll backend: a tokio current-thread runtime per shard thread. Portable: it needs no
//! io_uring and no locked memory, so it runs under Docker's and Kubernetes' default seccomp
//! profiles.

use std::io;
use std::os::fd::AsRawFd;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use damselfly_coord::{Connection, Mailbox, PeerInfo, ShardMsg, Worker};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::{spawn_local, JoinHandle};

use crate::drive::{mailbox_loop, note_rejected, refuse, serve, ConnRead, ConnWrite};
use crate::listeners::{describe_tcp, describe_unix};
use crate::{Shared, SHUTDOWN_GRACE, TICK};

struct Reader<S>(S);
struct Writer<S>(S);

impl<S: AsyncRead + Unpin> ConnRead for Reader<S> {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf).await
    }
}

impl<S: AsyncWrite + Unpin> ConnWrite for Writer<S> {
    async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).await
    }
}

pub(crate) fn run(shared: Arc<Shared>, mailboxes: Vec<Mailbox<ShardMsg>>) -> io::Result<()> {
    let mut handles = Vec::new();
    for (index, mailbox) in mailboxes.into_iter().enumerate() {
        let shared = shared.clone();
        let tcp = shared
            .listeners
            .tcp
            .iter()
            .map(|l| l.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        let unix = shared
            .listeners
            .unix
            .as_ref()
            .map(|l| l.try_clone())
            .transpose()?;
        handles.push(
            std::thread::Builder::new()
                .name(format!("damselfly-{index}"))
                .spawn(move || thread_main(index, shared, mailbox, tcp, unix))?,
        );
    }
    for h in handles {
        h.join()
            .map_err(|_| io::Error::other("a worker thread panicked"))??;
    }
    Ok(())
}

fn thread_main(
    index: usize,
    shared: Arc<Shared>,
    mailbox: Mailbox<ShardMsg>,
    tcp: Vec<std::net::TcpListener>,
    unix: Option<std::os::unix::net::UnixListener>,
) -> io::Result<()> {
    shared.pin(index);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let worker = Worker::new(index, shared.cluster.clone());
        spawn_local(mailbox_loop(worker.clone(), mailbox));
        spawn_local(tick_loop(worker.clone()));
        let mut acceptors: Vec<JoinHandle<()>> = Vec::new();
        for l in tcp {
            let listener = tokio::net::TcpListener::from_std(l)?;
            acceptors.push(spawn_local(accept_tcp(worker.clone(), listener)));
        }
        if let Some(l) = unix {
            let path = l
                .local_addr()
                .ok()
                .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
                .unwrap_or_default();
            let listener = tokio::net::UnixListener::from_std(l)?;
            acceptors.push(spawn_local(accept_unix(worker.clone(), listener, path)));
        }
        shared.cluster.shutdown.wait().await;
        for a in &acceptors {
            a.abort();
        }
        drain(&worker, &shared).await;
        Ok(())
    })
}

/// Closes this thread's clients, lets in-flight commands finish, then waits for every thread
/// to get there so no shard disappears while another thread still needs it.
async fn drain(worker: &Rc<Worker>, shared: &Shared) {
    worker.clients.borrow().close_all();
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while !worker.clients.borrow().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    shared.drained.fetch_add(1, Ordering::SeqCst);
    while !shared.all_drained() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn tick_loop(worker: Rc<Worker>) {
    let mut interval = tokio::time::interval(TICK);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        worker.tick();
    }
}

fn keepalive_secs(worker: &Worker) -> u64 {
    worker.cluster.config.get_u64("tcp-keepalive")
}

async fn accept_tcp(worker: Rc<Worker>, listener: tokio::net::TcpListener) {
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                if !worker.cluster.try_admit_client() {
                    refuse(stream.as_raw_fd());
                    note_rejected(&worker);
                    continue;
                }
                let _ = stream.set_nodelay(true);
                let secs = keepalive_secs(&worker);
                if secs > 0 {
                    let ka = socket2::TcpKeepalive::new().with_time(Duration::from_secs(secs));
                    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&ka);
                }
                let (addr, laddr) = describe_tcp(Some(peer), stream.local_addr().ok());
                let conn = Connection::new(
                    worker.clone(),
                    PeerInfo {
                        addr,
                        laddr,
                        fd: stream.as_raw_fd(),
                    },
                );
                let (rd, wr) = stream.into_split();
                spawn_local(serve(Reader(rd), Writer(wr), conn));
            }
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

async fn accept_unix(worker: Rc<Worker>, listener: tokio::net::UnixListener, path: String) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                if !worker.cluster.try_admit_client() {
                    refuse(stream.as_raw_fd());
                    note_rejected(&worker);
                    continue;
                }
                let (addr, laddr) = describe_unix(&path);
                let conn = Connection::new(
                    worker.clone(),
                    PeerInfo {
                        addr,
                        laddr,
                        fd: stream.as_raw_fd(),
                    },
                );
                let (rd, wr) = stream.into_split();
                spawn_local(serve(Reader(rd), Writer(wr), conn));
            }
            Err(e) => {
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
