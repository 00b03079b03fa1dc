//! The epoll backend: a tokio current-thread runtime per shard thread. Portable: it needs no
//! io_uring and no locked memory, so it runs under Docker's and Kubernetes' default seccomp
//! profiles.

use std::io;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use damselfly_coord::{Connection, MailboxSender, Worker};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::task::{spawn_local, JoinHandle};

use crate::drive::{admit, drain, mailbox_loop, serve, tune_tcp, ConnRead, ConnWrite};
use crate::handoff::{deal, send_dealt, serve_arrivals, Arrival, MovedConn, Movers};
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

impl<S: AsyncWrite + Unpin + LetGo> ConnWrite for Writer<S> {
    async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.write(buf).await
    }

    fn let_go(self) {
        self.0.let_go();
    }
}

/// tokio's write halves shut the socket's writing side down when dropped; `forget` does not.
trait LetGo {
    fn let_go(self);
}

impl LetGo for tokio::net::tcp::OwnedWriteHalf {
    fn let_go(self) {
        self.forget();
    }
}

impl LetGo for tokio::net::unix::OwnedWriteHalf {
    fn let_go(self) {
        self.forget();
    }
}

pub(crate) fn run(shared: Arc<Shared>, starts: Vec<ThreadStart>) -> io::Result<()> {
    let mut handles = Vec::new();
    for (index, start) in starts.into_iter().enumerate() {
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
        let tls = shared
            .listeners
            .tls
            .iter()
            .map(|l| l.try_clone())
            .collect::<io::Result<Vec<_>>>()?;
        handles.push(
            std::thread::Builder::new()
                .name(format!("damselfly-{index}"))
                .stack_size(crate::THREAD_STACK)
                .spawn(move || thread_main(index, shared, start, tcp, unix, tls))?,
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
    start: ThreadStart,
    tcp: Vec<std::net::TcpListener>,
    unix: Option<std::os::unix::net::UnixListener>,
    tls: Vec<std::net::TcpListener>,
) -> io::Result<()> {
    shared.pin(index);
    let rt = runtime(&shared.cluster.mailboxes[index])?;
    let local = tokio::task::LocalSet::new();
    local.block_on(&rt, async move {
        let worker = Worker::new(index, shared.cluster.clone(), start.mailbox);
        let movers = shared.movers.clone();
        // tokio's yield_now wakes the task only after the runtime polled its I/O driver.
        let fine = FineSleep::new().ok().map(Rc::new);
        spawn_local(mailbox_loop(
            worker.clone(),
            tokio::task::yield_now,
            move |pause| {
                let fine = fine.clone();
                async move {
                    match fine {
                        Some(timer) => timer.sleep(pause).await,
                        None => tokio::time::sleep(pause).await,
                    }
                }
            },
        ));
        spawn_local(tick_loop(worker.clone()));
        spawn_local(crate::turn_end::run_turn_ends());
        // Under appendfsync always, a turn's records are synced together at its end.
        spawn_local(worker.clone().journal_sync_task(crate::turn_end::turn_end));
        if index == 0 {
            // One thread runs the `save` schedule (its cut spans every shard).
            spawn_local(damselfly_coord::save_schedule(
                worker.clone(),
                tokio::time::sleep,
            ));
        }
        let mut acceptors: Vec<JoinHandle<()>> = Vec::new();
        for l in tcp {
            let listener = tokio::net::TcpListener::from_std(l)?;
            acceptors.push(spawn_local(accept_tcp(
                worker.clone(),
                listener,
                movers.clone(),
                None,
            )));
        }
        if let Some(config) = &shared.tls {
            for l in tls {
                let listener = tokio::net::TcpListener::from_std(l)?;
                acceptors.push(spawn_local(accept_tcp(
                    worker.clone(),
                    listener,
                    movers.clone(),
                    Some(config.clone()),
                )));
            }
        }
        let path = unix
            .as_ref()
            .and_then(|l| l.local_addr().ok())
            .and_then(|a| a.as_pathname().map(|p| p.display().to_string()))
            .unwrap_or_default();
        let (w, p, m) = (worker.clone(), path.clone(), movers.clone());
        spawn_local(serve_arrivals(start.arrivals, move |a| {
            arrive(&w, a, &p, &m)
        }));
        if let Some(l) = unix {
            let listener = tokio::net::UnixListener::from_std(l)?;
            acceptors.push(spawn_local(accept_unix(
                worker.clone(),
                listener,
                path.clone(),
                movers.clone(),
            )));
        }
        for a in start.adopted {
            // Made non-blocking for the runtime; one that fails is dropped (its client
            // reconnects, as after any lost connection).
            let _ = adopt(&worker, a, &path, &movers);
        }
        shared.cluster.shutdown.wait().await;
        for a in &acceptors {
            a.abort();
        }
        drain(&worker, &shared, tokio::time::sleep).await;
        Ok(())
    })
}

/// A shard thread's runtime. It tells the shard's mailbox when the thread parks and wakes, so
/// other threads signal it (an eventfd write) only when it may be asleep; while it runs, its
/// connections poke the mailbox between rounds (docs/architecture.md, "Mailboxes").
fn runtime<T: Send + 'static>(mailbox: &MailboxSender<T>) -> io::Result<tokio::runtime::Runtime> {
    let parking = mailbox.clone();
    let waking = mailbox.clone();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .on_thread_park(move || parking.before_park())
        .on_thread_unpark(move || waking.after_unpark())
        .build()
}

/// Sleeps with microsecond precision, for the pauses of a snapshot walk (a few hundred
/// microseconds): tokio's timers tick in milliseconds, and on a busy thread its sleeps of
/// about 1 ms took about 6 ms.
struct FineSleep(tokio::io::unix::AsyncFd<OwnedFd>);

impl FineSleep {
    fn new() -> io::Result<Self> {
        // SAFETY: timerfd_create returns a new descriptor or -1.
        let fd = unsafe {
            libc::timerfd_create(
                libc::CLOCK_MONOTONIC,
                libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the descriptor was just created and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: the AsyncFd owns the descriptor, which stays open and the same until it
        // is dropped.
        let fd = unsafe {
            tokio::io::unix::AsyncFd::register_with_interest(fd, tokio::io::Interest::READABLE)
        };
        Ok(FineSleep(fd.map_err(io::Error::from)?))
    }

    async fn sleep(&self, pause: Duration) {
        if pause.is_zero() {
            return;
        }
        let fd = self.0.get_ref().as_raw_fd();
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: libc::timespec {
                tv_sec: libc::time_t::try_from(pause.as_secs()).unwrap_or(libc::time_t::MAX),
                tv_nsec: libc::c_long::from(pause.subsec_nanos()),
            },
        };
        // SAFETY: `fd` is our timerfd and `spec` a valid setting; arming it again replaces
        // (and clears) an earlier arming whose sleep was dropped.
        if unsafe { libc::timerfd_settime(fd, 0, &spec, std::ptr::null_mut()) } < 0 {
            return tokio::time::sleep(pause).await;
        }
        loop {
            let Ok(mut ready) = self.0.readable().await else {
                return tokio::time::sleep(pause).await;
            };
            let mut expirations = [0u8; 8];
            // SAFETY: reads at most 8 bytes into a buffer of 8.
            let n = unsafe { libc::read(fd, expirations.as_mut_ptr().cast(), 8) };
            if n == 8 {
                return;
            }
            ready.clear_ready();
        }
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

/// Accepts clients of a TCP listener: the plain port, or the TLS port (`tls`).
async fn accept_tcp(
    worker: Rc<Worker>,
    listener: tokio::net::TcpListener,
    movers: Movers,
    tls: Option<Arc<Tls>>,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => match (&tls, deal(&worker)) {
                (None, None) => start_tcp(&worker, stream, &[], &movers),
                (None, Some(target)) => {
                    if let Ok(s) = stream.into_std() {
                        send_dealt(&movers, target, AdoptedStream::Tcp(s));
                    }
                }
                // A TLS session stays on its thread (it never moves).
                (Some(tls), _) => start_tls(&worker, stream, &movers, tls),
            },
            Err(e) => accept_failed(e).await,
        }
    }
}

/// Admits a client of the TLS port and serves it after its handshake, with the TLS
/// configuration in force now.
fn start_tls(worker: &Rc<Worker>, stream: tokio::net::TcpStream, movers: &Movers, tls: &Tls) {
    let peer = describe_tcp(stream.peer_addr().ok(), stream.local_addr().ok());
    if let Some(conn) = admit(worker, stream.as_raw_fd(), peer) {
        tune_tcp(worker, stream.as_fd());
        let (rd, wr) = stream.into_split();
        spawn_local(serve_tls(
            Reader(rd),
            Writer(wr),
            conn,
            tokio::time::sleep,
            movers.clone(),
            tls.server_config(),
        ));
    }
}

async fn accept_unix(
    worker: Rc<Worker>,
    listener: tokio::net::UnixListener,
    path: String,
    movers: Movers,
) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => match deal(&worker) {
                None => start_unix(&worker, stream, &path, &[], &movers),
                Some(target) => {
                    if let Ok(s) = stream.into_std() {
                        send_dealt(&movers, target, AdoptedStream::Unix(s));
                    }
                }
            },
            Err(e) => accept_failed(e).await,
        }
    }
}

/// Admits a TCP client and serves it; `unread` is input it sent before (adopted clients).
fn start_tcp(worker: &Rc<Worker>, stream: tokio::net::TcpStream, unread: &[u8], movers: &Movers) {
    let peer = describe_tcp(stream.peer_addr().ok(), stream.local_addr().ok());
    if let Some(mut conn) = admit(worker, stream.as_raw_fd(), peer) {
        tune_tcp(worker, stream.as_fd());
        if conn.feed(unread) {
            serve_tcp(stream, conn, movers);
        }
    }
}

fn start_unix(
    worker: &Rc<Worker>,
    stream: tokio::net::UnixStream,
    path: &str,
    unread: &[u8],
    movers: &Movers,
) {
    if let Some(mut conn) = admit(worker, stream.as_raw_fd(), describe_unix(path)) {
        if conn.feed(unread) {
            serve_unix(stream, conn, movers);
        }
    }
}

fn serve_tcp(stream: tokio::net::TcpStream, conn: Connection, movers: &Movers) {
    let (rd, wr) = stream.into_split();
    let sleep = tokio::time::sleep;
    spawn_local(serve(Reader(rd), Writer(wr), conn, sleep, movers.clone()));
}

fn serve_unix(stream: tokio::net::UnixStream, conn: Connection, movers: &Movers) {
    let (rd, wr) = stream.into_split();
    let sleep = tokio::time::sleep;
    spawn_local(serve(Reader(rd), Writer(wr), conn, sleep, movers.clone()));
}

/// Serves a connection accepted elsewhere (while the data loaded, or by another thread that
/// dealt it here).
fn adopt(worker: &Rc<Worker>, a: Adopted, path: &str, movers: &Movers) -> io::Result<()> {
    match a.stream {
        AdoptedStream::Tcp(s) => {
            s.set_nonblocking(true)?;
            let stream = tokio::net::TcpStream::from_std(s)?;
            start_tcp(worker, stream, &a.unread, movers);
        }
        AdoptedStream::Unix(s) => {
            s.set_nonblocking(true)?;
            let stream = tokio::net::UnixStream::from_std(s)?;
            start_unix(worker, stream, path, &a.unread, movers);
        }
    }
    Ok(())
}

/// Serves a connection another thread moved or dealt here. One whose socket the runtime
/// cannot take is dropped (its client reconnects).
fn arrive(worker: &Rc<Worker>, arrival: Arrival, path: &str, movers: &Movers) {
    let _ = match arrival {
        Arrival::Moved(m) => resume(worker, *m, movers),
        Arrival::Dealt(a) => adopt(worker, a, path, movers),
    };
}

fn resume(worker: &Rc<Worker>, moved: MovedConn, movers: &Movers) -> io::Result<()> {
    let Some((conn, fd, unix)) = moved.attach(worker) else {
        return Ok(());
    };
    if unix {
        let stream = std::os::unix::net::UnixStream::from(fd);
        serve_unix(tokio::net::UnixStream::from_std(stream)?, conn, movers);
    } else {
        let stream = std::net::TcpStream::from(fd);
        serve_tcp(tokio::net::TcpStream::from_std(stream)?, conn, movers);
    }
    Ok(())
}

/// Out of descriptors and similar: back off instead of spinning.
async fn accept_failed(e: io::Error) {
    tracing::warn!("accept failed: {e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;

    #[test]
    fn the_runtime_reports_parking_to_the_mailbox() {
        let (tx, mb) = damselfly_coord::mailbox::<u32>();
        let rt = runtime(&tx).expect("runtime");
        let local = tokio::task::LocalSet::new();
        local.block_on(&rt, async {
            // `parked` starts true (an owner that never reports is always signalled): park
            // and wake once so the hooks have run before the other thread looks at it.
            tokio::time::sleep(Duration::from_millis(1)).await;
            assert!(!tx.owner_may_sleep(), "waking must report running");
            let sender = tx.clone();
            let remote = std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !sender.owner_may_sleep() {
                    assert!(
                        Instant::now() < deadline,
                        "the owner never reported parking"
                    );
                    std::thread::sleep(Duration::from_millis(1));
                }
                // Parked: this send must wake it.
                sender.send(7);
            });
            let mut got = Vec::new();
            assert!(mb.recv_all(&mut got).await);
            assert_eq!(got, vec![7]);
            // Without the hooks `parked` would stay true and every send would signal.
            assert!(
                !tx.owner_may_sleep(),
                "a running owner must not be signalled"
            );
            remote.join().expect("sender thread");
        });
    }

    /// The walk's pauses wait at least as long as asked, also after a sleep that was dropped
    /// before it fired (its arming must not wake the next one early).
    #[test]
    fn fine_sleeps_wait_their_time() {
        let (tx, _mb) = damselfly_coord::mailbox::<u32>();
        let rt = runtime(&tx).expect("runtime");
        rt.block_on(async {
            let timer = FineSleep::new().expect("timerfd");
            let start = Instant::now();
            timer.sleep(Duration::from_micros(2500)).await;
            assert!(start.elapsed() >= Duration::from_micros(2500));
            // A short sleep dropped unfired, then its time passing, then a longer one.
            let dropped = tokio::time::timeout(
                Duration::from_millis(1),
                timer.sleep(Duration::from_millis(5)),
            )
            .await;
            assert!(dropped.is_err(), "a 5 ms sleep ended within 1 ms");
            std::thread::sleep(Duration::from_millis(6));
            let start = Instant::now();
            timer.sleep(Duration::from_millis(3)).await;
            assert!(start.elapsed() >= Duration::from_millis(3));
            let start = Instant::now();
            timer.sleep(Duration::ZERO).await;
            assert!(start.elapsed() < Duration::from_secs(1));
        });
    }
}
