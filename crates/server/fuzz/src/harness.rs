//! The in-process server (started once per process, as crates/server/src/main.rs starts it)
//! and the client that runs one program on it and checks the replies' framing.

use std::collections::VecDeque;
use std::io::{BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use damselfly_commands::config::Config;
use damselfly_coord::ServerInfo;
use damselfly_net::{Backend, ListenerSpec, Listeners, Server};

use crate::program::{cli_quote, Ending, Program, KEYS};
use crate::resp::{read_reply, ReadError, Reply};

/// Shards: more than two, so keys land on several and cross-shard paths run.
pub const THREADS: usize = 3;
/// A reply that takes longer than this is a finding (a lost reply or a stall): no command the
/// harness sends does more than a few MB of work.
const REPLY_TIMEOUT: Duration = Duration::from_secs(10);

pub struct Harness {
    socket: PathBuf,
    conn: Option<Conn>,
    inputs: u64,
    /// The last few programs run before the current one. Server-wide state should not leak
    /// from one input to the next, but when a failure does not reproduce on its own, they
    /// are the suspects, so failures print them.
    history: VecDeque<Program>,
}

const HISTORY: usize = 4;

struct Conn {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

/// The process's harness, started on first use.
pub fn harness() -> MutexGuard<'static, Harness> {
    static HARNESS: OnceLock<Mutex<Harness>> = OnceLock::new();
    HARNESS
        .get_or_init(|| Mutex::new(Harness::start()))
        .lock()
        // A panic while the lock was held aborts the process, so poisoning cannot be seen.
        .unwrap_or_else(|e| e.into_inner())
}

/// A panic on any thread, the fuzz thread or a server thread, aborts the process so that
/// libFuzzer stops and writes the input out. The server catches panics in commands and
/// connections (to keep serving), but the hook runs before that unwinding starts.
fn install_panic_hook() {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        eprintln!(
            "damselfly fuzz: panic on thread {:?}; aborting so libFuzzer reports the input",
            thread.name().unwrap_or("<unnamed>")
        );
        previous(info);
        std::process::abort();
    }));
}

impl Harness {
    fn start() -> Harness {
        install_panic_hook();
        // The server's own binary ignores SIGPIPE (Rust's main does); here libFuzzer's main
        // runs, and a write to a connection the other side dropped would kill the process.
        // SAFETY: setting a signal disposition to SIG_IGN.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };

        let shards: Vec<usize> = KEYS
            .iter()
            .map(|k| damselfly_storage::shard_for_key(k.as_bytes(), THREADS))
            .collect();
        assert!(
            (0..THREADS).all(|s| shards[..10].contains(&s)),
            "k0..k9 should cover every shard: {shards:?}"
        );

        let dir = std::env::temp_dir().join(format!("damselfly-fuzz-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir for the unix socket");
        let socket = dir.join("damselfly.sock");
        let config = Arc::new(Config::default());
        for (name, value) in [
            ("port", "0"),
            ("unixsocket", socket.to_str().expect("UTF-8 temp dir")),
            ("threads", "3"),
            ("io-backend", "epoll"),
            ("pin-threads", "no"),
            // Redis's minimum; bounds what SETRANGE, SETBIT, APPEND... can allocate, so a
            // fuzz input cannot make the process hold gigabytes.
            ("proto-max-bulk-len", "1mb"),
        ] {
            config.set_initial(name, value).expect(name);
        }
        let listeners = Listeners::bind(&ListenerSpec {
            bind: Vec::new(),
            port: 0,
            tls_port: 0,
            unixsocket: Some(socket.clone()),
            unixsocketperm: None,
            backlog: 128,
        })
        .expect("bind the unix socket");
        let info = ServerInfo {
            multiplexing_api: Backend::Epoll.multiplexing_api(),
            tcp_port: 0,
            executable: String::new(),
            config_file: String::new(),
        };
        let server = Server::new(config, THREADS, Backend::Epoll, false, listeners, info);
        std::thread::Builder::new()
            .name("damselfly-server".into())
            .spawn(move || {
                server.run().expect("server failed");
                panic!("the server stopped");
            })
            .expect("server thread");
        let deadline = Instant::now() + Duration::from_secs(20);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "the server did not start");
            std::thread::sleep(Duration::from_millis(10));
        }
        eprintln!(
            "damselfly fuzz: server with {THREADS} shards on {}; key shards {shards:?}",
            socket.display()
        );
        Harness {
            socket,
            conn: None,
            inputs: 0,
            history: VecDeque::new(),
        }
    }

    fn connect(&mut self) -> &mut Conn {
        self.conn.get_or_insert_with(|| {
            let s = UnixStream::connect(&self.socket).expect("connect to the server");
            s.set_read_timeout(Some(REPLY_TIMEOUT)).expect("timeout");
            Conn {
                w: s.try_clone().expect("clone"),
                r: BufReader::with_capacity(1 << 16, s),
            }
        })
    }

    /// Runs one program: RESET, SELECT 0 and FLUSHALL so it does not depend on the previous
    /// one, its commands pipelined in one write, then the sentinel (or a protocol error), then
    /// FLUSHALL again. FLUSHALL needs every database of every shard exclusively, so it
    /// stalls if the program left anything held in the server: that failure then points at
    /// the program that caused it rather than at the next one.
    /// Panics (so the process aborts) unless every command gets exactly one well-formed reply,
    /// in order, followed by the sentinel's; a reply that reports a panic caught in the server
    /// counts as a crash too.
    pub fn run(&mut self, program: &Program) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        let history = std::mem::take(&mut self.history);
        self.run_one(program, &Earlier(&history));
        self.history = history;
        self.history.push_back(program.clone());
    }

    fn run_one(&mut self, program: &Program, earlier: &Earlier) {
        self.inputs += 1;
        let token = format!("fuzz-sentinel-{}", self.inputs);
        let prologue: [&[&[u8]]; 3] = [&[b"RESET"], &[b"SELECT", b"0"], &[b"FLUSHALL"]];
        let mut wire = Vec::new();
        for cmd in prologue {
            encode_multibulk(&mut wire, cmd);
        }
        for cmd in &program.commands {
            if program.inline {
                encode_inline(&mut wire, cmd);
            } else {
                encode_multibulk(&mut wire, cmd);
            }
        }
        match program.ending {
            Ending::Sentinel => encode_multibulk(&mut wire, &[b"ECHO", token.as_bytes()]),
            Ending::ProtocolError(bytes) => wire.extend_from_slice(bytes),
        }
        let conn = self.connect();
        if let Err(e) = conn.w.write_all(&wire) {
            panic!(
                "writing the program failed ({e}): the server closed the connection?\n{program:?}{earlier}"
            );
        }

        let expect = |got: Reply, want: Reply, what: &str| {
            assert_eq!(got, want, "reply to {what}\n{program:?}{earlier}");
        };
        let mut read = |what: &dyn Fn() -> String| -> Reply {
            match read_reply(&mut conn.r) {
                Ok(r) => r,
                // The server writes a pipelined round's replies together, so a command that
                // never finishes holds back the replies of the commands before it too.
                Err(ReadError::Io(e)) => {
                    panic!("no reply to {} ({e}) or to a later command of the same round\n{program:?}{earlier}", what())
                }
                Err(ReadError::Malformed(m)) => {
                    panic!("malformed reply to {}: {m}\n{program:?}{earlier}", what())
                }
            }
        };
        expect(
            read(&|| "RESET".into()),
            Reply::Line(b'+', b"RESET".to_vec()),
            "RESET",
        );
        expect(
            read(&|| "SELECT 0".into()),
            Reply::Line(b'+', b"OK".to_vec()),
            "SELECT 0",
        );
        expect(
            read(&|| "FLUSHALL".into()),
            Reply::Line(b'+', b"OK".to_vec()),
            "FLUSHALL",
        );
        for (i, cmd) in program.commands.iter().enumerate() {
            let describe = || {
                let words: Vec<String> = cmd.iter().map(|a| cli_quote(a)).collect();
                format!("command #{i} `{}`", words.join(" "))
            };
            let reply = read(&describe);
            let text = String::from_utf8_lossy(reply.error_text());
            assert!(
                !text.contains("internal error"),
                "{} reported a panic caught in the server: {text}\n{program:?}{earlier}",
                describe()
            );
        }
        match program.ending {
            Ending::Sentinel => {
                let got = read(&|| "the sentinel ECHO".into());
                expect(
                    got,
                    Reply::Blob(b'$', Some(token.into_bytes())),
                    "the sentinel ECHO",
                );
                // Sent only now, in a round of its own, so that a stall here (something the
                // program left held) is told apart from a stall among its commands. A MONITOR
                // client may not touch the keyspace (Redis makes it a replica): RESET first.
                let monitoring = program
                    .commands
                    .iter()
                    .any(|cmd| cmd[0].eq_ignore_ascii_case(b"monitor"));
                wire.clear();
                if monitoring {
                    encode_multibulk(&mut wire, &[b"RESET"]);
                }
                encode_multibulk(&mut wire, &[b"FLUSHALL"]);
                conn.w.write_all(&wire).expect("write FLUSHALL");
                if monitoring {
                    expect(
                        read(&|| "the closing RESET".into()),
                        Reply::Line(b'+', b"RESET".to_vec()),
                        "the closing RESET",
                    );
                }
                let got = read(&|| "the closing FLUSHALL (the program left something held)".into());
                expect(
                    got,
                    Reply::Line(b'+', b"OK".to_vec()),
                    "the closing FLUSHALL",
                );
            }
            Ending::ProtocolError(_) => {
                let got = read(&|| "the protocol error".into());
                assert!(
                    got.error_text().starts_with(b"ERR Protocol error"),
                    "a protocol error got {got:?}\n{program:?}{earlier}"
                );
                let mut rest = Vec::new();
                match conn.r.read_to_end(&mut rest) {
                    Ok(_) if rest.is_empty() => {}
                    Ok(_) => panic!(
                        "bytes after a protocol error: {:?}\n{program:?}{earlier}",
                        String::from_utf8_lossy(&rest)
                    ),
                    Err(e) => panic!(
                        "the connection stayed open after a protocol error ({e})\n{program:?}{earlier}"
                    ),
                }
                self.conn = None;
                let conn = self.connect();
                wire.clear();
                encode_multibulk(&mut wire, &[b"FLUSHALL"]);
                conn.w.write_all(&wire).expect("write FLUSHALL");
                match read_reply(&mut conn.r) {
                    Ok(Reply::Line(b'+', ok)) if ok == b"OK" => {}
                    other => panic!("the closing FLUSHALL got {other:?}\n{program:?}{earlier}"),
                }
            }
        }
    }
}

/// The programs run before the failing one, for failures that depend on them.
struct Earlier<'a>(&'a VecDeque<Program>);

impl std::fmt::Display for Earlier<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, p) in self.0.iter().rev().enumerate() {
            write!(f, "# ---- the input {} before it:\n{p:?}", i + 1)?;
        }
        Ok(())
    }
}

fn encode_multibulk(out: &mut Vec<u8>, args: &[impl AsRef<[u8]>]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

/// An inline request: plain words bare, anything else double-quoted with `\xHH` escapes (so a
/// line never starts with `*` and never holds a newline).
fn encode_inline(out: &mut Vec<u8>, args: &[Vec<u8>]) {
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push(b' ');
        }
        if !a.is_empty() && a.iter().all(u8::is_ascii_alphanumeric) {
            out.extend_from_slice(a);
        } else {
            out.push(b'"');
            for &c in a {
                if c.is_ascii_alphanumeric() {
                    out.push(c);
                } else {
                    out.extend_from_slice(format!("\\x{c:02x}").as_bytes());
                }
            }
            out.push(b'"');
        }
    }
    out.extend_from_slice(b"\r\n");
}
