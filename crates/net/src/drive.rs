//! The connection loop both backends share. It reads, lets the coordinator run what was read,
//! and writes replies, reading and writing concurrently: a client that pipelines a large
//! request without reading replies keeps being served (as Redis buffers output), while a
//! client whose unread replies exceed the output buffer limit is disconnected, so no client
//! can grow server memory without bound. Backends only provide the socket halves.

use std::future::{poll_fn, Future};
use std::io;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::pin::pin;
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};

use damselfly_coord::{Connection, PeerInfo, ShardMsg, Step, Worker};

use crate::handoff::{hand_over, ready_to_move, Movers};
use crate::turn_end::turn_end;
use crate::{Shared, SHUTDOWN_GRACE};

/// The reading half of a client socket.
pub(crate) trait ConnRead {
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>>;
}

/// The writing half of a client socket.
pub(crate) trait ConnWrite {
    /// Writes some bytes. If the future is dropped pending, the next call is made with a
    /// buffer that starts with the same bytes (the loop only appends to its output): a plain
    /// socket has written nothing then, a TLS stream may have sent part of what it took and
    /// reports it on that next call (tls.rs).
    fn write(&mut self, buf: &[u8]) -> impl Future<Output = io::Result<usize>>;

    /// Lets go of the socket without shutting it down: the connection moves to another
    /// thread, which holds a duplicate of the descriptor.
    fn let_go(self);
}

pub(crate) enum Either<A, B> {
    Left(A),
    Right(B),
}

/// Waits for whichever future finishes first; the other is dropped.
pub(crate) async fn race<A: Future, B: Future>(a: A, b: B) -> Either<A::Output, B::Output> {
    let mut a = pin!(a);
    let mut b = pin!(b);
    poll_fn(|cx| {
        if let Poll::Ready(v) = a.as_mut().poll(cx) {
            return Poll::Ready(Either::Left(v));
        }
        if let Poll::Ready(v) = b.as_mut().poll(cx) {
            return Poll::Ready(Either::Right(v));
        }
        Poll::Pending
    })
    .await
}

enum Either3<A, B, C> {
    First(A),
    Second(B),
    Third(C),
}

/// `race` over three futures.
async fn race3<A: Future, B: Future, C: Future>(
    a: A,
    b: B,
    c: C,
) -> Either3<A::Output, B::Output, C::Output> {
    match race(a, race(b, c)).await {
        Either::Left(v) => Either3::First(v),
        Either::Right(Either::Left(v)) => Either3::Second(v),
        Either::Right(Either::Right(v)) => Either3::Third(v),
    }
}

/// Longest a paused client sleeps before looking again (CLIENT UNPAUSE ends a pause early).
const PAUSE_POLL: Duration = Duration::from_millis(10);

/// Longest a blocked client waits between checks for CLIENT KILL and shutdown.
const BLOCK_TICK: Duration = Duration::from_millis(100);

/// Waits while the connection's blocking command waits: for its wake-up, its deadline, or
/// the client going away. Input arriving meanwhile is buffered, as Redis buffers a blocked
/// client's input. False when the connection must close.
async fn wait_blocked<R: ConnRead, S: Future<Output = ()>>(
    rd: &mut R,
    conn: &mut Connection,
    sleep: &impl Fn(Duration) -> S,
) -> bool {
    let cluster = conn.cluster();
    let mut buf = vec![0u8; 16 * 1024];
    let inbox = conn.push_inbox();
    let mut pushed_bytes = 0;
    while conn.is_blocked() {
        if conn.killed() || cluster.shutdown.is_triggered() {
            return false;
        }
        let tick = conn.block_deadline().map_or(BLOCK_TICK, |d| {
            d.saturating_duration_since(Instant::now()).min(BLOCK_TICK)
        });
        // Messages pushed meanwhile (a RESP3 subscriber) wait for the reply, within the
        // output limit.
        let pushed = poll_fn(|cx| inbox.poll_beyond(pushed_bytes, cx));
        match race(
            race3(
                poll_fn(|cx| conn.poll_wake(cx)),
                rd.read(&mut buf),
                sleep(tick),
            ),
            pushed,
        )
        .await
        {
            Either::Left(Either3::First(())) => conn.resume().await,
            Either::Left(Either3::Second(Ok(0) | Err(_))) => return false,
            Either::Left(Either3::Second(Ok(n))) => {
                if !conn.feed(&buf[..n]) {
                    return false;
                }
            }
            Either::Left(Either3::Third(())) => conn.check_block_timeout(Instant::now()),
            Either::Right(waiting) => {
                pushed_bytes = waiting;
                if !conn.output_within_limits(waiting as u64) {
                    return false;
                }
            }
        }
    }
    true
}

/// Yields once to the executor so one busy client cannot starve the thread's other tasks.
async fn yield_now() {
    let mut yielded = false;
    poll_fn(|cx| {
        if yielded {
            return Poll::Ready(());
        }
        yielded = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    })
    .await
}

pub(crate) async fn write_all<W: ConnWrite>(wr: &mut W, mut buf: &[u8]) -> io::Result<()> {
    while !buf.is_empty() {
        match wr.write(buf).await? {
            0 => return Err(io::ErrorKind::WriteZero.into()),
            n => buf = &buf[n..],
        }
    }
    Ok(())
}

/// Serves one client until it quits, disconnects, is killed, exceeds its output limit, moves
/// to another thread (`movers`), or the server shuts down. (A panic aborts the process: see
/// the panic policy in damselfly_coord::crash.)
pub(crate) async fn serve<R: ConnRead, W: ConnWrite, S: Future<Output = ()>>(
    mut rd: R,
    mut wr: W,
    mut conn: Connection,
    sleep: impl Fn(Duration) -> S,
    movers: Movers,
) {
    let moving = serve_until_done(&mut rd, &mut wr, &mut conn, sleep, &movers).await;
    // A shard may still be writing a reply to the socket: let it finish (the client may
    // still read, after a half-close), and write what it left, before the socket goes.
    if conn.reply_in_flight() {
        conn.settle().await;
        let mut rest = Vec::new();
        conn.take_output(&mut rest);
        let _ = write_all(&mut wr, &rest).await;
    }
    conn.revoke_socket();
    if let Some((fd, unix)) = moving {
        drop(rd);
        wr.let_go();
        hand_over(conn, fd, unix, &movers);
    }
}

/// `serve`'s loop; returns the socket to hand over when the connection moves.
async fn serve_until_done<R: ConnRead, W: ConnWrite, S: Future<Output = ()>>(
    rd: &mut R,
    wr: &mut W,
    conn: &mut Connection,
    sleep: impl Fn(Duration) -> S,
    movers: &Movers,
) -> Option<(OwnedFd, bool)> {
    let cluster = conn.cluster();
    let mut pending: Vec<u8> = Vec::new();
    let mut sent = 0;
    let mut rounds = 0u32;
    // The output not written yet waited for the end of its turn (or needs not).
    let mut turn_ended = false;
    loop {
        conn.set_unsent_output((pending.len() - sent) as u64);
        let (step, waited) = step_noting_waits(conn).await;
        // A round that waited (for another shard, most often) has had its turn already:
        // waiting for the turn's end again would only delay its replies.
        turn_ended |= waited;
        conn.serve_mailbox_now();
        conn.take_output(&mut pending);
        conn.take_pushes(&mut pending);
        if pending.len() > sent && conn.until_durable().await {
            // Synced at the end of a turn, with the records of the turn's other connections.
            turn_ended = true;
        }
        if !conn.output_within_limits((pending.len() - sent) as u64) {
            return None;
        }
        match step {
            Step::Close => {
                let _ = write_all(wr, &pending[sent..]).await;
                return None;
            }
            Step::Again => {
                rounds += 1;
                if rounds.is_multiple_of(16) {
                    yield_now().await;
                }
                continue;
            }
            Step::Blocked => {
                if write_all(wr, &pending[sent..]).await.is_err() {
                    return None;
                }
                pending.clear();
                sent = 0;
                if !wait_blocked(rd, conn, &sleep).await {
                    return None;
                }
                continue;
            }
            Step::Paused(left) => {
                // Replies so far go out; the paused command waits in the buffer.
                if write_all(wr, &pending[sent..]).await.is_err() {
                    return None;
                }
                pending.clear();
                sent = 0;
                sleep(left.clamp(Duration::from_millis(1), PAUSE_POLL)).await;
                if conn.killed() || cluster.shutdown.is_triggered() {
                    return None;
                }
                continue;
            }
            Step::Read => {}
        }
        if conn.killed() || cluster.shutdown.is_triggered() {
            let _ = write_all(wr, &pending[sent..]).await;
            return None;
        }
        // Messages pushed to the client (Pub/Sub) wake the loop too; the next turn takes them.
        let inbox = conn.push_inbox();
        let pushed = poll_fn(|cx| inbox.poll_ready(cx));
        if sent == pending.len() {
            pending.clear();
            sent = 0;
            turn_ended = false;
            // Every reply is written: a safe point to move to the thread of the shard the
            // client keeps using.
            if let Some(moving) = ready_to_move(conn, movers) {
                return Some(moving);
            }
            // A reply a shard could not write all of comes back here to be written.
            let answered = conn.in_flight_arrived();
            match race3(rd.read(conn.read_space()), pushed, answered).await {
                Either3::First(Ok(0) | Err(_)) => return None,
                Either3::First(Ok(n)) if !conn.advance(n) => return None,
                Either3::First(Ok(_)) | Either3::Second(()) | Either3::Third(()) => {}
            }
        } else {
            if !turn_ended {
                // Written with the other replies of this turn (turn_end.rs).
                turn_end().await;
                turn_ended = true;
            }
            match race3(
                wr.write(&pending[sent..]),
                rd.read(conn.read_space()),
                pushed,
            )
            .await
            {
                Either3::First(Ok(n)) if n > 0 => sent += n,
                Either3::First(_) => return None,
                Either3::Second(Ok(0) | Err(_)) => return None,
                Either3::Second(Ok(n)) if !conn.advance(n) => return None,
                Either3::Second(Ok(_)) | Either3::Third(()) => {}
            }
            if sent == pending.len() {
                pending.clear();
                sent = 0;
                turn_ended = false;
                if pending.capacity() > OUTPUT_SHRINK_ABOVE {
                    pending = Vec::new();
                }
            }
        }
    }
}

/// Runs one `step` of the connection; true when it had to wait on the way.
async fn step_noting_waits(conn: &mut Connection) -> (Step, bool) {
    let mut waited = false;
    let mut step = pin!(conn.step());
    let step = poll_fn(|cx| {
        let polled = step.as_mut().poll(cx);
        waited |= polled.is_pending();
        polled
    })
    .await;
    (step, waited)
}

/// An output buffer larger than this is released once written.
const OUTPUT_SHRINK_ABOVE: usize = 4 << 20;

/// Admits an accepted socket: over `maxclients` it gets Redis's error and is dropped (None);
/// otherwise its connection is registered on this thread.
pub(crate) fn admit(
    worker: &Rc<Worker>,
    fd: i32,
    (addr, laddr): (String, String),
) -> Option<Connection> {
    if !worker.cluster.try_admit_client() {
        refuse(fd, b"-ERR max number of clients reached\r\n");
        worker.stats.borrow_mut().rejected_connections += 1;
        return None;
    }
    if protected_mode_refuses(worker, fd, &addr) {
        refuse(fd, PROTECTED_MODE_DENIED);
        worker.stats.borrow_mut().rejected_connections += 1;
        worker.cluster.release_client();
        return None;
    }
    Some(Connection::new(
        worker.clone(),
        PeerInfo { addr, laddr, fd },
    ))
}

/// The TCP options Redis sets on a client socket: no Nagle delay, keepalive per config.
pub(crate) fn tune_tcp(worker: &Worker, fd: BorrowedFd<'_>) {
    let sock = socket2::SockRef::from(&fd);
    let _ = sock.set_nodelay(true);
    let secs = worker.cluster.config.get_u64("tcp-keepalive");
    if secs > 0 {
        let _ = sock
            .set_tcp_keepalive(&socket2::TcpKeepalive::new().with_time(Duration::from_secs(secs)));
    }
}

/// Shutdown of one thread: closes its clients, lets their in-flight commands finish, then
/// waits until every thread got there so no shard disappears while another thread still
/// needs it. `sleep` is the backend's timer.
pub(crate) async fn drain<S: Future<Output = ()>>(
    worker: &Worker,
    shared: &Shared,
    sleep: impl Fn(Duration) -> S,
) {
    worker.clients.borrow().close_all();
    let deadline = Instant::now() + SHUTDOWN_GRACE;
    while !worker.clients.borrow().is_empty() && Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
    }
    shared.drained.fetch_add(1, Ordering::SeqCst);
    while !shared.all_drained() && Instant::now() < deadline {
        sleep(Duration::from_millis(5)).await;
    }
    // Every shard has finished its work: the save at shutdown (with save points, or SHUTDOWN
    // SAVE), then the journal's last records go to disk, synced.
    worker.save_at_shutdown();
    worker.stop_journal();
}

/// Refuses a client over `maxclients` with Redis's error, written straight to the socket.
fn refuse(fd: i32, msg: &[u8]) {
    // SAFETY: fd is an accepted socket we still own; a short or failed write is acceptable.
    unsafe {
        libc::send(
            fd,
            msg.as_ptr().cast(),
            msg.len(),
            libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
        );
    }
}

/// Redis's protected mode: while `protected-mode` is yes and the default user needs no
/// password, only clients on the loopback address or the unix socket are served.
fn protected_mode_refuses(worker: &Worker, fd: i32, addr: &str) -> bool {
    let cluster = &worker.cluster;
    if !cluster.acl.default_user().nopass || cluster.config.get("protected-mode") != "yes" {
        return false;
    }
    !is_unix_socket(fd) && !is_loopback(addr)
}

fn is_unix_socket(fd: i32) -> bool {
    // SAFETY: getsockname writes at most `len` bytes into the storage we own.
    unsafe {
        let mut storage: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        libc::getsockname(
            fd,
            (&mut storage as *mut libc::sockaddr_storage).cast(),
            &mut len,
        ) == 0
            && i32::from(storage.ss_family) == libc::AF_UNIX
    }
}

/// TCP from 127.0.0.1 or ::1 exactly, as Redis's islocalClient decides (`ip:port`).
fn is_loopback(addr: &str) -> bool {
    let ip = addr.rsplit_once(':').map_or(addr, |(ip, _)| ip);
    let ip = ip.trim_start_matches('[').trim_end_matches(']');
    ip == "127.0.0.1" || ip == "::1"
}

const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Hands every message sent to this thread's shard to its worker. `after_io` waits until
/// the runtime has polled for I/O (each backend has its way); `sleep` waits out a paused
/// snapshot walk, whose next step the loop then hands over.
pub(crate) async fn mailbox_loop<F: Future<Output = ()>, S: Future<Output = ()>>(
    worker: Rc<Worker>,
    after_io: impl Fn() -> F,
    sleep: impl Fn(Duration) -> S,
) {
    loop {
        let step_due = match worker.walk_resumes_at() {
            None => {
                if !worker.mailbox.ready().await {
                    break;
                }
                false
            }
            // Checked first: with messages always waiting, a race would never let it win.
            Some(at) if at <= Instant::now() => true,
            Some(at) => {
                let pause = at.saturating_duration_since(Instant::now());
                let paused = async {
                    sleep(pause).await;
                    None
                };
                match futures_lite::future::or(async { Some(worker.mailbox.ready().await) }, paused)
                    .await
                {
                    Some(false) => break,
                    Some(true) => false,
                    None => true,
                }
            }
        };
        let mut stepped = step_due;
        if step_due {
            worker.handle(ShardMsg::SnapshotStep);
        }
        // One message at a time: a message's handling may take later ones ahead
        // (`Mailbox::take_ahead`), which must then not run twice.
        while let Some(m) = worker.mailbox.pop() {
            stepped |= matches!(m, ShardMsg::SnapshotStep);
            worker.handle(m);
        }
        // A snapshot step asks for the next one at once, so the mailbox is always ready
        // while a walk runs. Both runtimes poll for I/O only between runs of ready tasks
        // (glommio after its 100 ms time slice, tokio every 61 polls): a plain yield would
        // leave sockets unread for that long. Waiting for the next I/O poll lets the
        // thread's connections read, run and reply between any two steps.
        if stepped {
            after_io().await;
        } else {
            // Messages may keep coming (a publisher on another thread never waits for its
            // deliveries): without a yield this task would never give the thread back, and
            // the connections it wakes (subscribers) would never write.
            yield_now().await;
        }
    }
}
