//! Heap allocations per request on the GET/SET path: a connection parses, runs and answers
//! requests from its own thread's shard, and once its buffers have grown to the traffic,
//! a GET allocates nothing and a SET that replaces a value allocates only the new record.
//! A command for another thread's shard allocates nothing either, on both threads, once its
//! batch and reply buffers go round. A one-key script run stays within a fixed number of
//! allocations. Counted with a counting global allocator, per thread (the test's own, which
//! here plays every thread).

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::future::Future;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use damselfly_commands::config::Config;
use damselfly_coord::{mailbox, Cluster, Connection, PeerInfo, Step, Worker};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the counter is a thread-local Cell, which does
// not allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout)
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
        System.realloc(ptr, layout, new_size)
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

/// Polls a future that must finish without waiting (a local command never waits).
fn run_now<F: Future>(f: F) -> F::Output {
    let mut f = pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => panic!("a local command waited"),
    }
}

fn resp(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Feeds `request` to the connection, runs it, and returns the reply.
fn serve(conn: &mut Connection, request: &[u8], out: &mut Vec<u8>) {
    let space = conn.read_space();
    space[..request.len()].copy_from_slice(request);
    assert!(conn.advance(request.len()));
    assert!(matches!(run_now(conn.step()), Step::Read));
    out.clear();
    conn.take_output(out);
}

/// A connection on the only thread of a one-shard cluster.
fn one_thread_connection() -> Connection {
    let (tx, rx) = mailbox();
    let cluster = Arc::new(Cluster::new(Arc::new(Config::default()), vec![tx]));
    let worker = Worker::new(0, cluster, rx);
    let peer = PeerInfo {
        addr: "127.0.0.1:1".into(),
        laddr: "127.0.0.1:2".into(),
        fd: -1,
    };
    Connection::new(worker, peer)
}

#[test]
fn get_and_set_allocate_nothing_beyond_the_new_record() {
    let mut conn = one_thread_connection();
    let value = [b'v'; 100];
    let set = resp(&[b"SET", b"key:000042", &value]);
    let get = resp(&[b"GET", b"key:000042"]);
    let miss = resp(&[b"GET", b"key:nothere"]);
    let mut out = Vec::new();
    // Warm up: buffers grow to the traffic, the table to its first segment.
    for _ in 0..100 {
        serve(&mut conn, &set, &mut out);
        serve(&mut conn, &get, &mut out);
        serve(&mut conn, &miss, &mut out);
    }
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");

    let before = allocations();
    for _ in 0..1000 {
        serve(&mut conn, &get, &mut out);
        assert_eq!(out, want);
    }
    assert_eq!(allocations() - before, 0, "allocations in 1000 GETs (hits)");

    let before = allocations();
    for _ in 0..1000 {
        serve(&mut conn, &miss, &mut out);
        assert_eq!(out, b"$-1\r\n");
    }
    assert_eq!(
        allocations() - before,
        0,
        "allocations in 1000 GETs (misses)"
    );

    let before = allocations();
    for _ in 0..1000 {
        serve(&mut conn, &set, &mut out);
        assert_eq!(out, b"+OK\r\n");
    }
    let per_set = (allocations() - before) as f64 / 1000.0;
    assert!(per_set <= 1.0, "{per_set} allocations per SET");
}

/// Handles every message waiting in `worker`'s mailbox, as its thread's loop would.
fn handle_mail(worker: &Worker) {
    if run_now(futures_lite::future::poll_once(worker.mailbox.ready())).is_some() {
        while let Some(m) = worker.mailbox.pop() {
            worker.handle(m);
        }
    }
}

/// A key that `shards` shards route to `shard`.
fn key_on(shard: usize, shards: usize) -> Vec<u8> {
    (0..)
        .map(|i| format!("key:{i}").into_bytes())
        .find(|k| damselfly_storage::shard_for_key(k, shards) == shard)
        .expect("some key routes to every shard")
}

/// Commands alternating between the connection's own shard and the other thread's (so the
/// connection never moves): each remote one goes as a batch, the other thread writes its
/// reply to the socket itself and sends back an empty answer with the batch's memory.
#[test]
fn commands_for_another_shard_allocate_nothing_with_direct_replies() {
    let (tx0, rx0) = mailbox();
    let (tx1, rx1) = mailbox();
    let cluster = Arc::new(Cluster::new(Arc::new(Config::default()), vec![tx0, tx1]));
    let here = Worker::new(0, cluster.clone(), rx0);
    let there = Worker::new(1, cluster, rx1);
    let (server_end, mut client_end) = UnixStream::pair().expect("a socket pair");
    client_end.set_nonblocking(true).expect("non-blocking");
    let peer = PeerInfo {
        addr: "127.0.0.1:1".into(),
        laddr: "127.0.0.1:2".into(),
        fd: server_end.as_raw_fd(),
    };
    let mut conn = Connection::new(here.clone(), peer);
    let (local, remote) = (key_on(0, 2), key_on(1, 2));
    let value = [b'v'; 100];
    let set_remote = resp(&[b"SET", &remote, &value]);
    let get_remote = resp(&[b"GET", &remote]);
    let get_local = resp(&[b"GET", &local]);
    let mut want = format!("${}\r\n", value.len()).into_bytes();
    want.extend_from_slice(&value);
    want.extend_from_slice(b"\r\n");
    let mut out = Vec::new();
    let mut from_socket = vec![0; 4096];
    // Serves one request and lets both threads handle their mail; returns what reached the
    // socket without going through the connection's output.
    let mut round = |conn: &mut Connection, request: &[u8], out: &mut Vec<u8>| -> usize {
        serve(conn, request, out);
        handle_mail(&there);
        handle_mail(&here);
        client_end.read(&mut from_socket).unwrap_or(0)
    };
    let mut check = |conn: &mut Connection, out: &mut Vec<u8>| {
        assert_eq!(round(conn, &set_remote, out), b"+OK\r\n".len());
        assert!(out.is_empty(), "a remote reply goes straight to the socket");
        assert_eq!(round(conn, &get_remote, out), want.len());
        assert!(out.is_empty());
        assert_eq!(round(conn, &get_local, out), 0);
        assert_eq!(out, b"$-1\r\n");
    };
    for _ in 0..100 {
        check(&mut conn, &mut out);
    }
    let direct = there.stats.borrow().direct_replies;
    assert_eq!(direct, 200, "direct replies in the warm-up");
    let before = allocations();
    for _ in 0..1000 {
        check(&mut conn, &mut out);
    }
    // Each SET makes its new record; the mailboxes' channel allocates a block per 31
    // messages (crossbeam's unbounded list), and a remote command is two messages.
    let per_round = (allocations() - before) as f64 / 1000.0;
    assert!(
        per_round <= 1.0 + 4.0 / 31.0 + 0.01,
        "{per_round} allocations per remote SET, remote GET and local GET"
    );
}

/// A one-key EVALSHA that SETs its key. Each run still allocates (Redis's own runs do too):
/// the KEYS and ARGV tables, the call's words and reply, the status table Lua gets back.
/// What it must not do again is allocate
/// per mlua call and per coroutine (98 per run before the C API path, 53 before the
/// trampoline for the other steps), go through a one-shard transaction's messages and boxes
/// when its shard is the connection's own and idle (38 before), build a new watch of the
/// run (25 before), copy each call's words out of Lua into a new buffer (21 before calls
/// were answered inside the script), or build each call's plan of intents to learn that it
/// runs on the run's shard (19 before), collect its keys and its arguments into two
/// vectors (16 before), or, when it cannot be handed back (its source names only its
/// declared keys), keep an undo log or collect its command's words into a vector (15
/// before; 11 now).
#[test]
fn a_one_key_script_allocates_a_bounded_amount() {
    let mut conn = one_thread_connection();
    let mut out = Vec::new();
    let load = resp(&[
        b"SCRIPT",
        b"LOAD",
        b"return redis.call('set', KEYS[1], ARGV[1])",
    ]);
    serve(&mut conn, &load, &mut out);
    // `$40\r\n<sha>\r\n`
    let sha = out[5..45].to_vec();
    let call = resp(&[b"EVALSHA", &sha, b"1", b"key:000042", b"value"]);
    for _ in 0..100 {
        serve(&mut conn, &call, &mut out);
        assert_eq!(out, b"+OK\r\n");
    }
    let before = allocations();
    for _ in 0..1000 {
        serve(&mut conn, &call, &mut out);
    }
    let per_run = (allocations() - before) as f64 / 1000.0;
    assert!(per_run <= 11.5, "{per_run} allocations per EVALSHA");
}
