//! The io_uring backend: a glommio executor per shard thread. TCP connections are accepted by
//! every executor on the shared listening socket. glommio cannot adopt an already bound unix
//! listener, so a small blocking acceptor thread accepts unix connections and hands them to
//! the executors round-robin through their adoption mailboxes.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use damselfly_coord::{mailbox, Connection, Mailbox, MailboxSender, Worker};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use futures_lite::{AsyncRead, AsyncWrite};
use glommio::{spawn_local, LocalExecutorBuilder, Placement, Task};

use crate::drive::{admit, drain, mailbox_loop, serve, tune_tcp, ConnRead, ConnWrite};
use crate::handoff::{deal, send_dealt, serve_arrivals, Arrival, Movers};
use crate::listeners::{describe_tcp, describe_unix};
use crate::tls::{serve_tls, Tls};
use crate::{Adopted, AdoptedStream, Shared, ThreadStart, TICK};

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

    /// glommio's streams only close their descriptor when dropped.
    fn let_go(self) {}
}

/// Memory each executor registers with io_uring for the buffers of reads in flight. glommio's
/// 10 MiB default is sized for its storage I/O, which Damselfly does not use; pinned and
/// counted against `maxmemory`, it would be most of a small server's memory. Reads beyond it
/// get ordinary buffers.
const IO_MEMORY: usize = 1 << 20;

/// Serves a glommio stream, split into halves so reads and writes can overlap.
fn spawn_serve<S: AsyncRead + AsyncWrite + Unpin + 'static>(
    stream: S,
    conn: Connection,
    movers: &Movers,
) {
    let (rd, wr) = futures_lite::io::split(stream);
    let sleep = glommio::timer::sleep;
    spawn_local(serve(Reader(rd), Writer(wr), conn, sleep, movers.clone())).detach();
}

pub(crate) fn run(shared: Arc<Shared>, starts: Vec<ThreadStart>) -> io::Result<()> {
    let (adopt_tx, adopt_rx): (Vec<MailboxSender<i32>>, Vec<Mailbox<i32>>) =
        (0..starts.len()).map(|_| mailbox()).unzip();
    let unix_path = shared
        .listeners
        .unix
        .as_ref()
        .and_then(|l| l.local_addr().ok())
        .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
        .unwrap_or_default();
    let acceptor = match &shared.listeners.unix {
        Some(l) => {
            let l = l.try_clone()?;
            l.set_nonblocking(false)?;
            let shared = shared.clone();
            Some(
                std::thread::Builder::new()
                    .name("damselfly-unix-accept".into())
                    .spawn(move || unix_acceptor(l, adopt_tx, shared))?,
            )
        }
        None => None,
    };
    let mut handles = Vec::new();
    for (index, (start, adopt)) in starts.into_iter().zip(adopt_rx).enumerate() {
        let shared = shared.clone();
        let tcp = shared
            .listeners
            .tcp
            .iter()
            .map(|l| l.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        let tls = shared
            .listeners
            .tls
            .iter()
            .map(|l| l.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        let unix_path = unix_path.clone();
        // Our own thread, for its stack size (glommio's spawn takes none), running an
        // executor made on it.
        let name = format!("damselfly-{index}");
        let handle = std::thread::Builder::new()
            .name(name.clone())
            .stack_size(crate::THREAD_STACK)
            .spawn(move || -> io::Result<()> {
                let executor = LocalExecutorBuilder::new(Placement::Unbound)
                    .name(&name)
                    .io_memory(IO_MEMORY)
                    .make()
                    .map_err(|e| io::Error::other(format!("cannot start glommio executor: {e}")))?;
                executor.run(thread_main(
                    index, shared, start, adopt, tcp, tls, unix_path,
                ))
            })?;
        handles.push(handle);
    }
    let mut result = Ok(());
    for h in handles {
        match h.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => result = Err(e),
            Err(_) => result = Err(io::Error::other("an executor thread panicked")),
        }
    }
    if let Some(a) = acceptor {
        let _ = a.join();
    }
    result
}

/// Blocking accept loop for the unix socket; ends when shutdown closes the listener.
fn unix_acceptor(
    listener: std::os::unix::net::UnixListener,
    targets: Vec<MailboxSender<i32>>,
    shared: Arc<Shared>,
) {
    let mut next = 0;
    for stream in listener.incoming() {
        if shared.cluster.shutdown.is_triggered() {
            break;
        }
        match stream {
            Ok(s) => {
                let fd = s.into_raw_fd();
                if !targets[next % targets.len()].send(fd) {
                    // SAFETY: fd was just released by into_raw_fd and nobody else owns it.
                    unsafe { libc::close(fd) };
                }
                next += 1;
            }
            Err(e) => {
                if shared.cluster.shutdown.is_triggered() {
                    break;
                }
                tracing::warn!("unix accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

async fn thread_main(
    index: usize,
    shared: Arc<Shared>,
    start: ThreadStart,
    adopt: Mailbox<i32>,
    tcp: Vec<std::net::TcpListener>,
    tls: Vec<std::net::TcpListener>,
    unix_path: String,
) -> io::Result<()> {
    shared.pin(index);
    let worker = Worker::new(index, shared.cluster.clone(), start.mailbox);
    let movers = shared.movers.clone();
    // A timer fires only when the reactor runs, which also reaps I/O completions.
    spawn_local(mailbox_loop(
        worker.clone(),
        || glommio::timer::sleep(Duration::from_micros(20)),
        glommio::timer::sleep,
    ))
    .detach();
    let (w, path, m) = (worker.clone(), unix_path.clone(), movers.clone());
    spawn_local(serve_arrivals(start.arrivals, move |a| {
        arrive(&w, a, &path, &m)
    }))
    .detach();
    spawn_local(tick_loop(worker.clone())).detach();
    if index == 0 {
        // One thread runs the `save` schedule (its cut spans every shard).
        spawn_local(damselfly_coord::save_schedule(
            worker.clone(),
            glommio::timer::sleep,
        ))
        .detach();
    }
    let mut acceptors: Vec<Task<()>> = Vec::new();
    for l in tcp {
        // SAFETY: the descriptor comes from a bound, listening socket we own.
        let listener = unsafe { glommio::net::TcpListener::from_raw_fd(l.into_raw_fd()) };
        acceptors.push(spawn_local(accept_tcp(
            worker.clone(),
            listener,
            movers.clone(),
            None,
        )));
    }
    if let Some(config) = &shared.tls {
        for l in tls {
            // SAFETY: as above.
            let listener = unsafe { glommio::net::TcpListener::from_raw_fd(l.into_raw_fd()) };
            acceptors.push(spawn_local(accept_tcp(
                worker.clone(),
                listener,
                movers.clone(),
                Some(config.clone()),
            )));
        }
    }
    for a in start.adopted {
        adopt_loaded(&worker, a, &unix_path, &movers);
    }
    acceptors.push(spawn_local(adopt_unix(
        worker.clone(),
        adopt,
        unix_path,
        movers,
    )));
    shared.cluster.shutdown.wait().await;
    drop(acceptors);
    if index == 0 {
        if let Some(l) = &shared.listeners.unix {
            // Wakes the blocking acceptor thread so it can exit.
            // SAFETY: shutting down a listening socket we own.
            unsafe { libc::shutdown(l.as_raw_fd(), libc::SHUT_RDWR) };
        }
    }
    drain(&worker, &shared, glommio::timer::sleep).await;
    Ok(())
}

async fn tick_loop(worker: Rc<Worker>) {
    loop {
        glommio::timer::sleep(TICK).await;
        worker.tick();
    }
}

/// Accepts clients of a TCP listener: the plain port, or the TLS port (`tls`: each client
/// served after its handshake, with the TLS configuration in force when it connected).
async fn accept_tcp(
    worker: Rc<Worker>,
    listener: glommio::net::TcpListener,
    movers: Movers,
    tls: Option<Arc<Tls>>,
) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                if let (None, Some(target)) = (&tls, deal(&worker)) {
                    // The stream's own descriptor closes with it; a duplicate travels.
                    // SAFETY: the descriptor stays owned by `stream` for this call.
                    let fd = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) };
                    if let Ok(dup) = fd.try_clone_to_owned() {
                        let stream = AdoptedStream::Tcp(std::net::TcpStream::from(dup));
                        send_dealt(&movers, target, stream);
                    }
                    continue;
                }
                let peer = describe_tcp(stream.peer_addr().ok(), stream.local_addr().ok());
                let Some(conn) = admit(&worker, stream.as_raw_fd(), peer) else {
                    continue;
                };
                // SAFETY: the descriptor stays owned by `stream` for this call.
                tune_tcp(&worker, unsafe {
                    BorrowedFd::borrow_raw(stream.as_raw_fd())
                });
                match &tls {
                    None => spawn_serve(stream, conn, &movers),
                    Some(tls) => {
                        let (rd, wr) = futures_lite::io::split(stream);
                        spawn_local(serve_tls(
                            Reader(rd),
                            Writer(wr),
                            conn,
                            glommio::timer::sleep,
                            movers.clone(),
                            tls.server_config(),
                        ))
                        .detach();
                    }
                }
            }
            Err(e) => {
                // Out of descriptors and similar: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                glommio::timer::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// Serves a connection accepted elsewhere (while the data loaded, or by another thread that
/// dealt it here), with the input it sent then.
fn adopt_loaded(worker: &Rc<Worker>, a: Adopted, path: &str, movers: &Movers) {
    match a.stream {
        AdoptedStream::Tcp(s) if s.set_nonblocking(true).is_ok() => {
            let peer = describe_tcp(s.peer_addr().ok(), s.local_addr().ok());
            let fd = s.into_raw_fd();
            // SAFETY: into_raw_fd released the connected socket to us; the stream owns it now.
            let stream = unsafe { glommio::net::TcpStream::from_raw_fd(fd) };
            if let Some(mut conn) = admit(worker, fd, peer) {
                // SAFETY: the descriptor stays owned by `stream` for this call.
                tune_tcp(worker, unsafe { BorrowedFd::borrow_raw(fd) });
                if conn.feed(&a.unread) {
                    spawn_serve(stream, conn, movers);
                }
            }
        }
        AdoptedStream::Unix(s) if s.set_nonblocking(true).is_ok() => {
            let fd = s.into_raw_fd();
            // SAFETY: as above, for a unix socket.
            let stream = unsafe { glommio::net::UnixStream::from_raw_fd(fd) };
            if let Some(mut conn) = admit(worker, fd, describe_unix(path)) {
                if conn.feed(&a.unread) {
                    spawn_serve(stream, conn, movers);
                }
            }
        }
        // Dropped: its client reconnects, as after any lost connection.
        _ => {}
    }
}

/// Serves unix connections handed over by the acceptor thread.
async fn adopt_unix(worker: Rc<Worker>, adopt: Mailbox<i32>, path: String, movers: Movers) {
    let mut fds = Vec::new();
    while adopt.recv_all(&mut fds).await {
        for fd in fds.drain(..) {
            // SAFETY: the acceptor thread handed us ownership of this connected socket; the
            // stream closes it when dropped, also when the client is refused.
            let stream = unsafe { glommio::net::UnixStream::from_raw_fd(fd) };
            if let Some(conn) = admit(&worker, fd, describe_unix(&path)) {
                spawn_serve(stream, conn, &movers);
            }
        }
    }
}

/// Serves a connection another thread moved or dealt here.
fn arrive(worker: &Rc<Worker>, arrival: Arrival, path: &str, movers: &Movers) {
    let moved = match arrival {
        Arrival::Moved(m) => *m,
        Arrival::Dealt(a) => return adopt_loaded(worker, a, path, movers),
    };
    let Some((conn, fd, unix)) = moved.attach(worker) else {
        return;
    };
    let fd = fd.into_raw_fd();
    // SAFETY: into_raw_fd released the moved socket to us; the stream owns it now.
    if unix {
        let stream = unsafe { glommio::net::UnixStream::from_raw_fd(fd) };
        spawn_serve(stream, conn, movers);
    } else {
        let stream = unsafe { glommio::net::TcpStream::from_raw_fd(fd) };
        spawn_serve(stream, conn, movers);
    }
}
