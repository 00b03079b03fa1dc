//! `damselfly-bench ioprobe`: a one-thread GET/SET server with two event loops over the same
//! few lines of command code, to bound what an event loop can save against another on this
//! machine's kernel, with nothing else (no transactions, statistics, ACLs) in the way:
//!
//! - `epoll`: level-triggered `epoll_wait`, one `read` per ready socket, the turn's replies
//!   written at its end with one `write` per connection (Redis's loop);
//! - `uring`: io_uring set up with `SINGLE_ISSUER | DEFER_TASKRUN` (completions are collected
//!   when the thread enters the kernel, no task-work interrupts), a multishot accept, a
//!   multishot receive per connection into a provided buffer ring (no receive call per
//!   request), and every send of a turn submitted together with the wait for the next
//!   completions in one `io_uring_enter`.
//!
//! Used by benches/ioprobe.sh, which runs redis-benchmark against both, redis-server and
//! Damselfly and reads each server's CPU time per request (docs/benchmarks.md, "What an
//! io_uring loop saves here"). It understands RESP arrays of bulk strings only (what
//! redis-benchmark sends): SET, GET, CONFIG (an empty array) and anything else `+OK`;
//! anything malformed closes the connection. It exits by itself after `--exit-after` seconds.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use clap::{Parser, ValueEnum};

#[derive(Parser)]
pub struct IoprobeArgs {
    /// The event loop.
    #[arg(long, value_enum)]
    mode: Mode,
    #[arg(long, default_value_t = 6390)]
    port: u16,
    /// Seconds after which the process exits, whatever it is doing.
    #[arg(long, default_value_t = 600)]
    exit_after: u64,
}

#[derive(Clone, Copy, ValueEnum)]
enum Mode {
    Epoll,
    Uring,
}

pub fn run(args: IoprobeArgs) -> io::Result<()> {
    let lifetime = Duration::from_secs(args.exit_after);
    std::thread::spawn(move || {
        std::thread::sleep(lifetime);
        std::process::exit(0);
    });
    let listener = std::net::TcpListener::bind(("127.0.0.1", args.port))?;
    listener.set_nonblocking(true)?;
    match args.mode {
        Mode::Epoll => run_epoll(listener.as_raw_fd()),
        Mode::Uring => run_uring(listener.as_raw_fd()),
    }
}

type Store = HashMap<Vec<u8>, Vec<u8>>;

enum Ran {
    /// Bytes of input the complete commands took.
    Used(usize),
    /// The input is not RESP arrays of bulk strings.
    Malformed,
}

/// Runs every complete command at the start of `input`, appending replies to `out`.
fn run_commands(store: &mut Store, input: &[u8], out: &mut Vec<u8>) -> Ran {
    let mut used = 0;
    let mut args: Vec<&[u8]> = Vec::with_capacity(4);
    loop {
        args.clear();
        let mut at = used;
        let count = match header(input, at, b'*') {
            Header::Complete(n, next) => {
                at = next;
                n
            }
            Header::Incomplete => return Ran::Used(used),
            Header::Malformed => return Ran::Malformed,
        };
        for _ in 0..count {
            let len = match header(input, at, b'$') {
                Header::Complete(len, next) => {
                    at = next;
                    len
                }
                Header::Incomplete => return Ran::Used(used),
                Header::Malformed => return Ran::Malformed,
            };
            let Some(arg) = input.get(at..at.saturating_add(len)) else {
                return Ran::Used(used);
            };
            match input.get(at + len..at + len + 2) {
                None => return Ran::Used(used),
                Some(b"\r\n") => {}
                Some(_) => return Ran::Malformed,
            }
            args.push(arg);
            at += len + 2;
        }
        used = at;
        reply(store, &args, out);
    }
}

fn reply(store: &mut Store, args: &[&[u8]], out: &mut Vec<u8>) {
    match args {
        [name, key, value] if name.eq_ignore_ascii_case(b"SET") => {
            store.insert(key.to_vec(), value.to_vec());
            out.extend_from_slice(b"+OK\r\n");
        }
        [name, key] if name.eq_ignore_ascii_case(b"GET") => match store.get(*key) {
            Some(value) => {
                out.extend_from_slice(format!("${}\r\n", value.len()).as_bytes());
                out.extend_from_slice(value);
                out.extend_from_slice(b"\r\n");
            }
            None => out.extend_from_slice(b"$-1\r\n"),
        },
        [name, ..] if name.eq_ignore_ascii_case(b"CONFIG") => out.extend_from_slice(b"*0\r\n"),
        _ => out.extend_from_slice(b"+OK\r\n"),
    }
}

enum Header {
    /// The number and where the next element starts.
    Complete(usize, usize),
    Incomplete,
    Malformed,
}

/// Reads `<kind><decimal>\r\n` at `at`.
fn header(input: &[u8], at: usize, kind: u8) -> Header {
    match input.get(at) {
        None => return Header::Incomplete,
        Some(&k) if k != kind => return Header::Malformed,
        Some(_) => {}
    }
    let mut n: usize = 0;
    for (i, &c) in input.iter().enumerate().skip(at + 1) {
        match c {
            b'0'..=b'9' if i - at <= 10 => n = n * 10 + usize::from(c - b'0'),
            b'\r' if i > at + 1 => {
                return match input.get(i + 1) {
                    None => Header::Incomplete,
                    Some(b'\n') => Header::Complete(n, i + 2),
                    Some(_) => Header::Malformed,
                }
            }
            _ => return Header::Malformed,
        }
    }
    Header::Incomplete
}

/// One client connection, indexed by its descriptor.
#[derive(Default)]
struct Conn {
    open: bool,
    /// Input that does not end in a complete command yet.
    input: Vec<u8>,
    /// Replies not handed to the kernel yet.
    out: Vec<u8>,
    /// Replies a send in flight reads from (uring); untouched until it completes.
    sending: Vec<u8>,
    sent: usize,
    /// A multishot receive is armed (uring).
    receiving: bool,
}

struct Conns(Vec<Conn>);

impl Conns {
    fn at(&mut self, fd: RawFd) -> &mut Conn {
        let i = usize::try_from(fd).unwrap_or(0);
        if self.0.len() <= i {
            self.0.resize_with(i + 1, Conn::default);
        }
        &mut self.0[i]
    }

    fn open(&mut self, fd: RawFd) {
        set_nodelay(fd);
        *self.at(fd) = Conn {
            open: true,
            ..Conn::default()
        };
    }
}

/// Runs what `data` completes of the connection's input; false when it is malformed.
fn feed(store: &mut Store, conn: &mut Conn, data: &[u8]) -> bool {
    if conn.input.is_empty() {
        // The common case: whole commands, run from where they arrived.
        let Ran::Used(used) = run_commands(store, data, &mut conn.out) else {
            return false;
        };
        conn.input.extend_from_slice(&data[used..]);
    } else {
        conn.input.extend_from_slice(data);
        let Ran::Used(used) = run_commands(store, &conn.input, &mut conn.out) else {
            return false;
        };
        conn.input.drain(..used);
    }
    true
}

fn set_nodelay(fd: RawFd) {
    let one: libc::c_int = 1;
    // SAFETY: setsockopt reads one c_int from a live local.
    unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_NODELAY,
            (&one as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
    }
}

fn close(fd: RawFd) {
    // SAFETY: fd is a client socket this loop accepted and closes once.
    unsafe { libc::close(fd) };
}

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

fn run_epoll(listener: RawFd) -> io::Result<()> {
    // SAFETY: plain system calls on descriptors this function owns; buffers outlive them.
    let ep = check(unsafe { libc::epoll_create1(0) })?;
    let watch = |fd: RawFd| {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: as above.
        check(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) })
    };
    watch(listener)?;
    let mut store = Store::new();
    let mut conns = Conns(Vec::new());
    let mut events = vec![libc::epoll_event { events: 0, u64: 0 }; 256];
    let mut buf = vec![0u8; 16 * 1024];
    let mut replied: Vec<RawFd> = Vec::new();
    loop {
        // SAFETY: as above.
        let ready = unsafe { libc::epoll_wait(ep, events.as_mut_ptr(), 256, -1) };
        for ev in &events[..usize::try_from(ready).unwrap_or(0)] {
            let fd = ev.u64 as RawFd;
            if fd == listener {
                loop {
                    // SAFETY: as above.
                    let fd = unsafe {
                        libc::accept4(
                            listener,
                            std::ptr::null_mut(),
                            std::ptr::null_mut(),
                            libc::SOCK_NONBLOCK,
                        )
                    };
                    if fd < 0 {
                        break;
                    }
                    conns.open(fd);
                    watch(fd)?;
                }
                continue;
            }
            // SAFETY: as above.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            let conn = conns.at(fd);
            let fine = match usize::try_from(n) {
                Ok(0) => false,
                Ok(n) => feed(&mut store, conn, &buf[..n]),
                Err(_) => io::Error::last_os_error().kind() == io::ErrorKind::WouldBlock,
            };
            if !fine {
                close(fd);
                *conn = Conn::default();
            } else if !conn.out.is_empty() {
                replied.push(fd);
            }
        }
        for fd in replied.drain(..) {
            let conn = conns.at(fd);
            let mut at = 0;
            while at < conn.out.len() {
                let rest = &conn.out[at..];
                // SAFETY: as above.
                match unsafe { libc::write(fd, rest.as_ptr().cast(), rest.len()) } {
                    n if n > 0 => at += n as usize,
                    // A client that stops reading is a client of another benchmark.
                    _ => break,
                }
            }
            conn.out.clear();
        }
    }
}

const BUFFERS: u16 = 1024;
const BUFFER_LEN: usize = 16 * 1024;
const GROUP: u16 = 1;
const ACCEPT: u64 = 1 << 32;
const RECV: u64 = 2 << 32;
const SEND: u64 = 3 << 32;

/// The provided buffer ring multishot receives take their buffers from.
struct BufferRing {
    entries: *mut io_uring::types::BufRingEntry,
    layout: std::alloc::Layout,
    buffers: Vec<u8>,
    tail: u16,
}

impl BufferRing {
    fn new() -> io::Result<BufferRing> {
        let layout = std::alloc::Layout::from_size_align(
            usize::from(BUFFERS) * std::mem::size_of::<io_uring::types::BufRingEntry>(),
            4096,
        )
        .map_err(io::Error::other)?;
        // SAFETY: a non-zero layout; freed in Drop with the same layout.
        let entries: *mut io_uring::types::BufRingEntry =
            unsafe { std::alloc::alloc_zeroed(layout) }.cast();
        if entries.is_null() {
            return Err(io::ErrorKind::OutOfMemory.into());
        }
        Ok(BufferRing {
            entries,
            layout,
            buffers: vec![0u8; usize::from(BUFFERS) * BUFFER_LEN],
            tail: 0,
        })
    }

    fn buffer(&self, id: u16, len: usize) -> &[u8] {
        &self.buffers[usize::from(id) * BUFFER_LEN..][..len]
    }

    /// Gives buffer `id` (back) to the kernel.
    fn give(&mut self, id: u16) {
        // SAFETY: the entry index is masked into the ring; the tail is the kernel-shared
        // field the kernel reads with acquire ordering.
        unsafe {
            let entry = &mut *self.entries.add(usize::from(self.tail & (BUFFERS - 1)));
            entry.set_addr(self.buffers.as_ptr().add(usize::from(id) * BUFFER_LEN) as u64);
            entry.set_len(BUFFER_LEN as u32);
            entry.set_bid(id);
            self.tail = self.tail.wrapping_add(1);
            let tail = io_uring::types::BufRingEntry::tail(self.entries)
                .cast::<std::sync::atomic::AtomicU16>();
            (*tail).store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for BufferRing {
    fn drop(&mut self) {
        // SAFETY: allocated in new with this layout; the ring it was registered on is gone.
        unsafe { std::alloc::dealloc(self.entries.cast(), self.layout) };
    }
}

/// Closes a connection that ended once no operation of the ring refers to it any more: until
/// then its descriptor's number must not be reused (completions are told apart by it) and
/// a send in flight still reads its buffer.
fn close_when_idle(conn: &mut Conn, fd: RawFd) {
    if !conn.open && !conn.receiving && conn.sending.is_empty() {
        close(fd);
        *conn = Conn::default();
    }
}

fn run_uring(listener: RawFd) -> io::Result<()> {
    use io_uring::{cqueue, opcode, squeue, types, IoUring};
    // Declared before the ring, so the ring (and the kernel's use of the buffers) goes first.
    let mut buffers = BufferRing::new()?;
    let mut ring: IoUring<squeue::Entry, cqueue::Entry> = IoUring::builder()
        .setup_single_issuer()
        .setup_defer_taskrun()
        .setup_cqsize(8192)
        .build(1024)?;
    // SAFETY: the entries and buffers outlive the ring (see above).
    unsafe {
        ring.submitter()
            .register_buf_ring_with_flags(buffers.entries as u64, BUFFERS, GROUP, 0)?
    };
    for id in 0..BUFFERS {
        buffers.give(id);
    }
    let recv = |fd: RawFd| {
        opcode::RecvMulti::new(types::Fd(fd), GROUP)
            .build()
            .user_data(RECV | fd as u64)
    };
    let send = |fd: RawFd, bytes: &[u8]| {
        opcode::Send::new(types::Fd(fd), bytes.as_ptr(), bytes.len() as u32)
            .build()
            .user_data(SEND | fd as u64)
    };
    let accept = || {
        opcode::AcceptMulti::new(types::Fd(listener))
            .build()
            .user_data(ACCEPT)
    };
    let mut store = Store::new();
    let mut conns = Conns(Vec::new());
    let mut submissions: Vec<squeue::Entry> = vec![accept()];
    let mut completions: Vec<(u64, i32, u32)> = Vec::new();
    let mut replied: Vec<RawFd> = Vec::new();
    loop {
        {
            let mut sq = ring.submission();
            for entry in submissions.drain(..) {
                // SAFETY: every buffer an entry points at (a connection's `sending`) stays
                // untouched until its completion arrives.
                if unsafe { sq.push(&entry) }.is_err() {
                    return Err(io::Error::other("submission queue full"));
                }
            }
        }
        ring.submit_and_wait(1)?;
        completions.extend(
            ring.completion()
                .map(|c| (c.user_data(), c.result(), c.flags())),
        );
        for (user_data, res, flags) in completions.drain(..) {
            let fd = (user_data & 0xffff_ffff) as RawFd;
            match user_data & !0xffff_ffff {
                ACCEPT => {
                    if res >= 0 {
                        conns.open(res);
                        conns.at(res).receiving = true;
                        submissions.push(recv(res));
                    }
                    if !cqueue::more(flags) {
                        submissions.push(accept());
                    }
                }
                RECV => {
                    let conn = conns.at(fd);
                    let mut fine = res > 0 || res == -libc::ENOBUFS;
                    if let Some(id) = cqueue::buffer_select(flags) {
                        if let Ok(n @ 1..) = usize::try_from(res) {
                            fine = feed(&mut store, conn, buffers.buffer(id, n));
                            if !conn.out.is_empty() && conn.sending.is_empty() {
                                replied.push(fd);
                            }
                        }
                        buffers.give(id);
                    }
                    if !fine && conn.open {
                        conn.open = false;
                        // Ends the armed receive (malformed input), which then completes.
                        // SAFETY: shuts down a socket this loop accepted and still holds.
                        unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
                    }
                    if !cqueue::more(flags) {
                        conn.receiving = conn.open;
                        if conn.open {
                            submissions.push(recv(fd));
                        }
                    }
                    close_when_idle(conn, fd);
                }
                SEND => {
                    let conn = conns.at(fd);
                    if let Ok(n) = usize::try_from(res) {
                        conn.sent += n;
                    }
                    if res > 0 && conn.sent < conn.sending.len() && conn.open {
                        submissions.push(send(fd, &conn.sending[conn.sent..]));
                        continue;
                    }
                    conn.sending.clear();
                    conn.sent = 0;
                    if conn.open && !conn.out.is_empty() {
                        replied.push(fd);
                    }
                    close_when_idle(conn, fd);
                }
                _ => {}
            }
        }
        for fd in replied.drain(..) {
            let conn = conns.at(fd);
            if conn.open && conn.sending.is_empty() && !conn.out.is_empty() {
                std::mem::swap(&mut conn.sending, &mut conn.out);
                submissions.push(send(fd, &conn.sending));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(input: &[u8]) -> (Option<usize>, Vec<u8>) {
        let mut store = Store::new();
        let mut out = Vec::new();
        let used = match run_commands(&mut store, input, &mut out) {
            Ran::Used(n) => Some(n),
            Ran::Malformed => None,
        };
        (used, out)
    }

    #[test]
    fn runs_complete_commands_and_keeps_the_rest() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nvv\r\n";
        let get = b"*2\r\n$3\r\nget\r\n$1\r\nk\r\n";
        let mut input = [&set[..], &get[..], &get[..7]].concat();
        let (used, out) = run(&input);
        assert_eq!(used, Some(set.len() + get.len()));
        assert_eq!(out, b"+OK\r\n$2\r\nvv\r\n");
        input.truncate(set.len() - 1);
        assert_eq!(run(&input), (Some(0), Vec::new()));
    }

    #[test]
    fn malformed_input_is_refused_not_run() {
        for bad in [
            &b"PING\r\n"[..],
            b"*1\r\n+OK\r\n",
            b"*x\r\n",
            b"*1\r\n$1\r\nab\r\n",
            b"*99999999999999999999\r\n",
            b"*\r\n",
        ] {
            assert_eq!(run(bad).0, None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
