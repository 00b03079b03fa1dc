//! The connection loop both backends share: read, let the coordinator run what was read, write
//! the replies, repeat. Backends only provide the socket reads and writes.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use damselfly_coord::{Connection, Step};

/// The socket operations a backend provides for one connection.
pub(crate) trait ConnIo {
    fn read(&mut self, buf: &mut [u8]) -> impl Future<Output = io::Result<usize>>;
    fn write_all(&mut self, buf: &[u8]) -> impl Future<Output = io::Result<()>>;
}

/// Yields once to the executor so one busy client cannot starve the thread's other tasks.
struct YieldNow(bool);

impl Future for YieldNow {
    type Output = ();
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.0 {
            return Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

/// Serves one client until it quits, disconnects, is killed, or the server shuts down.
pub(crate) async fn serve<I: ConnIo>(mut io: I, mut conn: Connection) {
    let cluster = conn.cluster();
    loop {
        let step = conn.step().await;
        if !conn.output().is_empty() {
            if io.write_all(conn.output()).await.is_err() {
                break;
            }
            conn.consume_output();
        }
        match step {
            Step::Close => break,
            Step::Again => YieldNow(false).await,
            Step::Read => {
                if conn.killed() || cluster.shutdown.is_triggered() {
                    break;
                }
                match io.read(conn.read_space()).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if !conn.advance(n) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

/// Refuses a client over `maxclients` with Redis's error, written straight to the socket.
pub(crate) fn refuse(fd: i32) {
    const MSG: &[u8] = b"-ERR max number of clients reached\r\n";
    // SAFETY: fd is an accepted socket we still own; a short or failed write is acceptable.
    unsafe {
        libc::send(fd, MSG.as_ptr().cast(), MSG.len(), libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT);
    }
}

/// Counts a refused connection in the thread's stats.
pub(crate) fn note_rejected(worker: &damselfly_coord::Worker) {
    worker.stats.borrow_mut().rejected_connections += 1;
}

/// Mailbox and housekeeping work of one thread, shared by both backends.
pub(crate) async fn mailbox_loop(worker: std::rc::Rc<damselfly_coord::Worker>, mailbox: damselfly_coord::Mailbox<damselfly_coord::ShardMsg>) {
    let mut msgs = Vec::with_capacity(64);
    while mailbox.recv_all(&mut msgs).await {
        for m in msgs.drain(..) {
            worker.handle(m);
        }
    }
}
