//! TLS for client connections (docs/operations.md, "TLS"), under both backends: redis-cli
//! and a rustls client speaking RESP over the TLS port, beside the plain port and the unix
//! socket; client certificates (tls-auth-clients yes, optional, no); a plain-text client on
//! the TLS port; reloading certificates with CONFIG SET (new connections get the new one, a
//! bad file fails CONFIG SET and keeps the old one); protocol and cipher restrictions; an
//! encrypted key; a TLS-only server; and TLS connections staying on their thread where a
//! plain one moves (connection affinity cannot carry a TLS session).
//!
//! Certificates are made per test with the openssl command-line tool (EC P-256 keys: fast).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{bulk, encode, free_port, info_field, Backend, Raw, Server};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{
    ClientConfig, ClientConnection, RootCertStore, StreamOwned, SupportedProtocolVersion,
};

/// A test PKI: a CA, two server certificates (SAN 127.0.0.1 and localhost) and a client
/// certificate it signed, and a client certificate from another CA.
struct Pki {
    dir: tempfile::TempDir,
}

const SERVER_EXT: &str = "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n";
const CLIENT_EXT: &str = "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n";

impl Pki {
    fn new() -> Pki {
        let pki = Pki {
            dir: tempfile::tempdir().expect("tempdir"),
        };
        pki.ca("ca", "/CN=Damselfly Test CA");
        pki.ca("rogue-ca", "/CN=Someone Else");
        pki.leaf("server", "ca", "/CN=server-one", 1001, SERVER_EXT);
        pki.leaf("server2", "ca", "/CN=server-two", 1002, SERVER_EXT);
        pki.leaf("client", "ca", "/CN=client", 2001, CLIENT_EXT);
        pki.leaf("rogue", "rogue-ca", "/CN=rogue", 3001, CLIENT_EXT);
        std::fs::write(pki.path("bad.crt"), "not a certificate\n").expect("write");
        pki
    }

    fn openssl(&self, args: &[&str]) {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(self.dir.path())
            .stdin(Stdio::null())
            .output()
            .expect("the openssl command-line tool is installed");
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn ca(&self, name: &str, subject: &str) {
        self.openssl(&[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.crt"),
            "-days",
            "30",
            "-subj",
            subject,
        ]);
    }

    fn leaf(&self, name: &str, ca: &str, subject: &str, serial: u32, ext: &str) {
        std::fs::write(self.path(&format!("{name}.ext")), ext).expect("write");
        self.openssl(&[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            subject,
        ]);
        self.openssl(&[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            &format!("{ca}.crt"),
            "-CAkey",
            &format!("{ca}.key"),
            "-set_serial",
            &serial.to_string(),
            "-days",
            "30",
            "-out",
            &format!("{name}.crt"),
            "-extfile",
            &format!("{name}.ext"),
        ]);
    }

    fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    fn arg(&self, file: &str) -> String {
        self.path(file).display().to_string()
    }

    /// The first certificate of a PEM file, DER encoded.
    fn der(&self, file: &str) -> Vec<u8> {
        CertificateDer::pem_file_iter(self.path(file))
            .expect("pem")
            .next()
            .expect("a certificate")
            .expect("parse")
            .as_ref()
            .to_vec()
    }

    /// A client configuration trusting the test CA, presenting `cert` (`client`, `rogue`)
    /// when given, speaking `versions` (every version rustls has when empty).
    fn client(
        &self,
        cert: Option<&str>,
        versions: &[&'static SupportedProtocolVersion],
    ) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(self.path("ca.crt")).expect("ca") {
            roots.add(c.expect("ca cert")).expect("add root");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider);
        let builder = if versions.is_empty() {
            builder.with_safe_default_protocol_versions()
        } else {
            builder.with_protocol_versions(versions)
        }
        .expect("versions")
        .with_root_certificates(roots);
        Arc::new(match cert {
            Some(name) => {
                let chain = CertificateDer::pem_file_iter(self.path(&format!("{name}.crt")))
                    .expect("cert")
                    .collect::<Result<Vec<_>, _>>()
                    .expect("certs");
                let key =
                    PrivateKeyDer::from_pem_file(self.path(&format!("{name}.key"))).expect("key");
                builder
                    .with_client_auth_cert(chain, key)
                    .expect("client cert")
            }
            None => builder.with_no_client_auth(),
        })
    }

    /// Server flags: TLS on `tls_port` with the first server certificate, client
    /// certificates checked against the test CA.
    fn flags(&self, tls_port: u16) -> Vec<String> {
        vec![
            "--tls-port".into(),
            tls_port.to_string(),
            "--tls-cert-file".into(),
            self.arg("server.crt"),
            "--tls-key-file".into(),
            self.arg("server.key"),
            "--tls-ca-cert-file".into(),
            self.arg("ca.crt"),
        ]
    }
}

type Tls = Arc<Mutex<StreamOwned<ClientConnection, TcpStream>>>;

/// One half of a TLS client stream for `Raw` (reads and writes take turns on one thread).
struct Half(Tls);

impl Read for Half {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").read(buf)
    }
}

impl Write for Half {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("lock").write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.lock().expect("lock").flush()
    }
}

/// Connects to the TLS port and completes the handshake (which, under TLS 1.3, ends on the
/// client's side before the server has checked its certificate).
fn connect(port: u16, config: Arc<ClientConfig>) -> std::io::Result<Tls> {
    let sock = TcpStream::connect(("127.0.0.1", port))?;
    sock.set_read_timeout(Some(Duration::from_secs(30)))?;
    sock.set_nodelay(true)?;
    let name = ServerName::try_from("localhost").expect("name");
    let conn = ClientConnection::new(config, name).map_err(std::io::Error::other)?;
    let mut stream = StreamOwned::new(conn, sock);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock)?;
    }
    Ok(Arc::new(Mutex::new(stream)))
}

/// A RESP client over TLS, and the stream (to look at the session).
fn tls_raw(port: u16, config: Arc<ClientConfig>) -> (Raw, Tls) {
    let stream = connect(port, config).expect("TLS connection");
    let tcp = stream
        .lock()
        .expect("lock")
        .sock
        .try_clone()
        .expect("clone");
    let raw = Raw::over(
        Box::new(Half(stream.clone())),
        Box::new(Half(stream.clone())),
        tcp,
    );
    (raw, stream)
}

/// PING over a new TLS connection: the reply, or why there was none.
fn try_ping(port: u16, config: Arc<ClientConfig>) -> Result<Vec<u8>, String> {
    let stream = connect(port, config).map_err(|e| format!("handshake: {e}"))?;
    let mut s = stream.lock().expect("lock");
    s.write_all(&encode(&["PING"]))
        .and_then(|()| s.flush())
        .map_err(|e| format!("write: {e}"))?;
    let mut reply = vec![0u8; 64];
    match s.read(&mut reply) {
        Ok(0) => Err("closed".into()),
        Ok(n) => Ok(reply[..n].to_vec()),
        Err(e) => Err(format!("read: {e}")),
    }
}

/// The certificate the server presented on this connection.
fn served_cert(stream: &Tls) -> Vec<u8> {
    let s = stream.lock().expect("lock");
    s.conn.peer_certificates().expect("server certificate")[0]
        .as_ref()
        .to_vec()
}

fn start(b: Backend, pki: &Pki, extra: &[&str]) -> (Server, u16) {
    let tls_port = free_port();
    let mut flags = pki.flags(tls_port);
    flags.extend(extra.iter().map(|s| s.to_string()));
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    (Server::start(b, &flags), tls_port)
}

fn redis_cli(pki: &Pki, port: u16, with_cert: bool, args: &[&str]) -> (bool, String) {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["--tls", "--cacert", &pki.arg("ca.crt")]);
    if with_cert {
        cmd.args([
            "--cert",
            &pki.arg("client.crt"),
            "--key",
            &pki.arg("client.key"),
        ]);
    }
    let out = cmd
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("redis-cli is installed with redis-server");
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.success(), text.trim().to_string())
}

/// Waits until INFO clients shows `n` connected clients.
fn wait_clients(admin: &mut Raw, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got: u64 = info_field(admin, "clients", "connected_clients")
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        if got == n {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{got} clients connected, expected {n}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn redis_cli_over_tls(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    assert_eq!(
        redis_cli(&pki, tls_port, true, &["PING"]),
        (true, "PONG".into())
    );
    assert_eq!(
        redis_cli(&pki, tls_port, true, &["SET", "greeting", "hello tls"]),
        (true, "OK".into())
    );
    assert_eq!(
        redis_cli(&pki, tls_port, true, &["GET", "greeting"]),
        (true, "hello tls".into())
    );
    // The same data on the plain port and the unix socket, served at the same time.
    assert_eq!(s.raw().cmd(&["GET", "greeting"]), bulk("hello tls"));
    assert_eq!(s.raw_unix().cmd(&["GET", "greeting"]), bulk("hello tls"));
    // tls-auth-clients yes (the default): no certificate, no service.
    let (_, text) = redis_cli(&pki, tls_port, false, &["PING"]);
    assert!(
        !text.contains("PONG"),
        "served without a certificate: {text}"
    );
}

fn pipeline_and_large_values(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let (mut c, _) = tls_raw(tls_port, pki.client(Some("client"), &[]));
    // 2000 commands in one write, every reply in order.
    let mut batch = Vec::new();
    for i in 0..1000 {
        batch.extend(encode(&["SET", &format!("k{i}"), &format!("v{i}")]));
        batch.extend(encode(&["GET", &format!("k{i}")]));
    }
    c.send(&batch);
    for i in 0..1000 {
        assert_eq!(c.reply(), b"+OK\r\n", "SET k{i}");
        assert_eq!(c.reply(), bulk(&format!("v{i}")), "GET k{i}");
    }
    // 1 MB (and more) both ways, bytes of every value.
    for size in [1 << 20, 3 << 20] {
        let value: Vec<u8> = (0..size).map(|i| (i * 7 + i / 251) as u8).collect();
        assert_eq!(c.cmd(&[b"SET".as_slice(), b"big", &value]), b"+OK\r\n");
        let mut want = format!("${size}\r\n").into_bytes();
        want.extend_from_slice(&value);
        want.extend_from_slice(b"\r\n");
        assert!(c.cmd(&["GET", "big"]) == want, "GET big of {size} bytes");
        // Pipelined behind other commands.
        c.send(
            &[
                encode(&["GET", "big"]),
                encode(&["PING"]),
                encode(&["GET", "big"]),
            ]
            .concat(),
        );
        assert!(c.reply() == want);
        assert_eq!(c.reply(), b"+PONG\r\n");
        assert!(c.reply() == want);
    }
    assert_eq!(s.raw().cmd(&["STRLEN", "big"]), b":3145728\r\n");
}

fn client_certificates(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let mut admin = s.raw();
    let with_cert = || pki.client(Some("client"), &[]);
    let without = || pki.client(None, &[]);
    let rogue = || pki.client(Some("rogue"), &[]);
    assert_eq!(try_ping(tls_port, with_cert()), Ok(b"+PONG\r\n".to_vec()));
    assert!(
        try_ping(tls_port, without()).is_err(),
        "yes: no certificate"
    );
    assert!(try_ping(tls_port, rogue()).is_err(), "yes: untrusted");
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "tls-auth-clients", "optional"]),
        b"+OK\r\n"
    );
    assert_eq!(try_ping(tls_port, without()), Ok(b"+PONG\r\n".to_vec()));
    assert_eq!(try_ping(tls_port, with_cert()), Ok(b"+PONG\r\n".to_vec()));
    assert!(try_ping(tls_port, rogue()).is_err(), "optional: untrusted");
    assert_eq!(
        admin.cmd(&["CONFIG", "SET", "tls-auth-clients", "no"]),
        b"+OK\r\n"
    );
    assert_eq!(try_ping(tls_port, without()), Ok(b"+PONG\r\n".to_vec()));
    assert_eq!(
        redis_cli(&pki, tls_port, false, &["PING"]),
        (true, "PONG".into())
    );
    // Refused handshakes hold nothing: only the admin connection is left.
    wait_clients(&mut admin, 1);
}

fn plain_text_on_the_tls_port(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let mut admin = s.raw();
    let (mut tls, _) = tls_raw(tls_port, pki.client(Some("client"), &[]));
    assert_eq!(tls.cmd(&["SET", "k", "v"]), b"+OK\r\n");
    for _ in 0..3 {
        let mut plain = Raw::tcp(tls_port);
        plain.send(&encode(&["PING"]));
        assert!(
            plain.closed(),
            "a plain-text client on the TLS port is closed"
        );
    }
    let mut inline = Raw::tcp(tls_port);
    inline.send(b"GET k\r\n");
    assert!(inline.closed());
    // Everything else keeps being served, and nothing is left of the plain clients.
    assert_eq!(tls.cmd(&["GET", "k"]), bulk("v"));
    assert_eq!(admin.cmd(&["GET", "k"]), bulk("v"));
    assert_eq!(
        try_ping(tls_port, pki.client(Some("client"), &[])),
        Ok(b"+PONG\r\n".to_vec())
    );
    wait_clients(&mut admin, 2);
}

fn reload_certificates(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let mut admin = s.raw();
    let config = || pki.client(Some("client"), &[]);
    let (mut old, old_stream) = tls_raw(tls_port, config());
    assert_eq!(served_cert(&old_stream), pki.der("server.crt"));
    let set = |admin: &mut Raw, args: &[&str]| {
        let mut cmd = vec!["CONFIG".to_string(), "SET".to_string()];
        cmd.extend(args.iter().map(|a| a.to_string()));
        admin.cmd(&cmd)
    };
    assert_eq!(
        set(
            &mut admin,
            &[
                "tls-cert-file",
                &pki.arg("server2.crt"),
                "tls-key-file",
                &pki.arg("server2.key"),
            ]
        ),
        b"+OK\r\n"
    );
    let (mut new, new_stream) = tls_raw(tls_port, config());
    let served = served_cert(&new_stream);
    assert_eq!(
        served,
        pki.der("server2.crt"),
        "new connections get the new certificate"
    );
    assert!(
        served.windows(10).any(|w| w == b"server-two"),
        "its subject"
    );
    assert_eq!(new.cmd(&["PING"]), b"+PONG\r\n");
    // The connection made before keeps its session.
    assert_eq!(old.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(served_cert(&old_stream), pki.der("server.crt"));
    // A file that is no certificate, a key of another certificate, a missing CA: CONFIG SET
    // fails, the values and the certificate in force stay.
    let refused: [&[&str]; 4] = [
        &["tls-cert-file", &pki.arg("bad.crt")],
        &["tls-key-file", &pki.arg("server.key")],
        &["tls-ca-cert-file", &pki.arg("missing.crt")],
        &["tls-cert-file", &pki.arg("server.crt"), "maxclients", "7"],
    ];
    for args in refused {
        let reply = String::from_utf8_lossy(&set(&mut admin, args)).into_owned();
        assert!(
            reply.starts_with("-ERR CONFIG SET failed (possibly related to argument 'tls-")
                && reply.contains("Unable to update TLS configuration"),
            "{args:?}: {reply}"
        );
    }
    let got = String::from_utf8_lossy(&admin.cmd(&["CONFIG", "GET", "tls-cert-file"])).into_owned();
    assert!(got.contains("server2.crt"), "{got}");
    assert_eq!(
        admin.cmd(&["CONFIG", "GET", "maxclients"]),
        b"*2\r\n$10\r\nmaxclients\r\n$5\r\n10000\r\n",
        "all or nothing"
    );
    let (_, again) = tls_raw(tls_port, config());
    assert_eq!(served_cert(&again), pki.der("server2.crt"));
    // Setting the same file again reloads it from disk (Redis's tls-* are volatile): the
    // first certificate's files copied over the second's paths.
    std::fs::copy(pki.path("server.crt"), pki.path("server2.crt")).expect("copy");
    std::fs::copy(pki.path("server.key"), pki.path("server2.key")).expect("copy");
    assert_eq!(
        set(&mut admin, &["tls-cert-file", &pki.arg("server2.crt")]),
        b"+OK\r\n"
    );
    let (_, reloaded) = tls_raw(tls_port, config());
    assert_eq!(served_cert(&reloaded), pki.der("server.crt"));
}

/// Unpipelined commands on one key, then on a key of the other shard: long enough streaks
/// that a plain connection moves to the second key's thread (checked first, so this test
/// would see a move), while a TLS connection stays where it was accepted.
fn tls_connections_stay_on_their_thread(b: Backend) {
    const STREAK: usize = 300;
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let mut admin = s.raw();
    let (k0, k1) = common::key_on_each_shard();
    let hammer = |c: &mut Raw| {
        for key in [&k0, &k1] {
            for i in 0..STREAK {
                let v = i.to_string();
                assert_eq!(c.cmd(&["SET", key, &v]), b"+OK\r\n");
                assert_eq!(c.cmd(&["GET", key]), bulk(&v));
            }
        }
    };
    let mut plain = s.raw();
    hammer(&mut plain);
    let after_plain = common::connections_moved(&mut admin);
    assert!(after_plain >= 1, "the plain connection moved");
    let (mut tls, _) = tls_raw(tls_port, pki.client(Some("client"), &[]));
    let id = tls.cmd(&["CLIENT", "ID"]);
    hammer(&mut tls);
    assert_eq!(
        common::connections_moved(&mut admin),
        after_plain,
        "no TLS connection moved"
    );
    assert_eq!(tls.cmd(&["CLIENT", "ID"]), id);
    let id = String::from_utf8_lossy(&id[1..id.len() - 2]).into_owned();
    let list = String::from_utf8_lossy(&admin.cmd(&["CLIENT", "LIST"])).into_owned();
    assert!(
        list.lines().any(|l| l.starts_with(&format!("id={id} "))),
        "{list}"
    );
    assert_eq!(tls.cmd(&["GET", &k1]), bulk(&(STREAK - 1).to_string()));
}

fn protocols_and_ciphers(b: Backend) {
    let pki = Pki::new();
    let (s, tls_port) = start(b, &pki, &[]);
    let mut admin = s.raw();
    let tls12 = || pki.client(Some("client"), &[&rustls::version::TLS12]);
    let tls13 = || pki.client(Some("client"), &[&rustls::version::TLS13]);
    let suite = |stream: &Tls| {
        let s = stream.lock().expect("lock");
        format!(
            "{:?}",
            s.conn.negotiated_cipher_suite().expect("suite").suite()
        )
    };
    // Both versions by default, as Redis.
    assert_eq!(try_ping(tls_port, tls12()), Ok(b"+PONG\r\n".to_vec()));
    assert_eq!(try_ping(tls_port, tls13()), Ok(b"+PONG\r\n".to_vec()));
    let ok = |admin: &mut Raw, name: &str, value: &str| {
        assert_eq!(
            admin.cmd(&["CONFIG", "SET", name, value]),
            b"+OK\r\n",
            "{name} {value}"
        );
    };
    ok(&mut admin, "tls-protocols", "TLSv1.3");
    assert!(try_ping(tls_port, tls12()).is_err(), "TLSv1.2 is off");
    ok(
        &mut admin,
        "tls-ciphersuites",
        "TLS_CHACHA20_POLY1305_SHA256",
    );
    let (_, stream) = tls_raw(tls_port, tls13());
    assert_eq!(suite(&stream), "TLS13_CHACHA20_POLY1305_SHA256");
    ok(&mut admin, "tls-protocols", "TLSv1.2");
    assert!(try_ping(tls_port, tls13()).is_err(), "TLSv1.3 is off");
    ok(&mut admin, "tls-ciphers", "ECDHE-ECDSA-AES128-GCM-SHA256");
    let (mut c, stream) = tls_raw(tls_port, tls12());
    assert_eq!(suite(&stream), "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256");
    assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    // Names rustls has no suite or version for fail CONFIG SET and change nothing.
    for (name, value) in [
        ("tls-ciphers", "AES128-SHA"),
        ("tls-ciphersuites", "TLS_AES_128_CCM_SHA256"),
        ("tls-protocols", "TLSv1.1"),
        ("tls-protocols", "SSLv3"),
    ] {
        let reply = admin.cmd(&["CONFIG", "SET", name, value]);
        assert!(
            reply.starts_with(b"-ERR CONFIG SET failed"),
            "{name} {value}"
        );
    }
    let (_, stream) = tls_raw(tls_port, tls12());
    assert_eq!(suite(&stream), "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256");
    // Back to every version and suite.
    for name in ["tls-protocols", "tls-ciphers", "tls-ciphersuites"] {
        ok(&mut admin, name, "");
    }
    assert_eq!(try_ping(tls_port, tls13()), Ok(b"+PONG\r\n".to_vec()));
}

fn encrypted_key(b: Backend) {
    let pki = Pki::new();
    pki.openssl(&[
        "pkcs8",
        "-topk8",
        "-v2",
        "aes-256-cbc",
        "-in",
        "server.key",
        "-out",
        "server-enc.key",
        "-passout",
        "pass:s3cret",
    ]);
    let conf = pki.path("tls.conf");
    std::fs::write(&conf, "tls-key-file-pass s3cret\n").expect("write");
    let tls_port = free_port();
    let mut flags = pki.flags(tls_port);
    flags[5] = pki.arg("server-enc.key");
    flags.push(conf.display().to_string());
    let flag_refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let s = Server::start(b, &flag_refs);
    assert_eq!(
        try_ping(tls_port, pki.client(Some("client"), &[])),
        Ok(b"+PONG\r\n".to_vec())
    );
    // A wrong password fails CONFIG SET, and start-up.
    let reply = s
        .raw()
        .cmd(&["CONFIG", "SET", "tls-key-file-pass", "wrong"]);
    assert!(reply.starts_with(b"-ERR CONFIG SET failed"));
    std::fs::write(&conf, "tls-key-file-pass wrong\n").expect("write");
    let dir = tempfile::tempdir().expect("tempdir");
    let mut refused = flags.clone();
    refused[1] = free_port().to_string();
    let refs: Vec<&str> = refused.iter().map(String::as_str).collect();
    let log = common::start_refused(dir.path(), &refs);
    assert!(log.contains("cannot decrypt the key"), "{log}");
    // Without any password the error says the key is encrypted.
    std::fs::write(&conf, "\n").expect("write");
    let log = common::start_refused(dir.path(), &refs);
    assert!(log.contains("set tls-key-file-pass"), "{log}");
}

/// `--port 0` with a TLS port: TLS and the unix socket only.
fn tls_only(b: Backend) {
    let pki = Pki::new();
    for _ in 0..5 {
        let dir = tempfile::tempdir().expect("tempdir");
        let tls_port = free_port();
        let sock = dir.path().join("d.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_damselfly"))
            .args(["--port", "0", "--threads", "2", "--io-backend", b.flag()])
            .args(["--loglevel", "warning", "--dir"])
            .arg(dir.path())
            .arg("--unixsocket")
            .arg(&sock)
            .args(pki.flags(tls_port))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn");
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut up = false;
        while Instant::now() < deadline && !up {
            if let Ok(Some(_)) = child.try_wait() {
                break;
            }
            up = try_ping(tls_port, pki.client(Some("client"), &[])).is_ok();
            if !up {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        if !up {
            let _ = child.kill();
            let _ = child.wait();
            continue;
        }
        let (mut c, _) = tls_raw(tls_port, pki.client(Some("client"), &[]));
        assert_eq!(c.cmd(&["SET", "only", "tls"]), b"+OK\r\n");
        assert_eq!(Raw::unix_at(&sock).cmd(&["GET", "only"]), bulk("tls"));
        let _ = child.kill();
        let _ = child.wait();
        return;
    }
    panic!("the TLS-only server did not start");
}

/// Start-up refuses a TLS port without a usable certificate.
#[test]
fn start_up_checks_the_tls_configuration() {
    let pki = Pki::new();
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port().to_string();
    let log = common::start_refused(dir.path(), &["--tls-port", &port]);
    assert!(log.contains("No tls-cert-file configured"), "{log}");
    let mut flags = pki.flags(free_port());
    flags[3] = pki.arg("bad.crt");
    let refs: Vec<&str> = flags.iter().map(String::as_str).collect();
    let log = common::start_refused(dir.path(), &refs);
    assert!(log.contains("Failed to load certificate"), "{log}");
    let log = common::start_refused(
        dir.path(),
        &[
            "--tls-port",
            &port,
            "--tls-cert-file",
            &pki.arg("server.crt"),
            "--tls-key-file",
            &pki.arg("server.key"),
        ],
    );
    assert!(log.contains("tls-ca-cert-file or tls-ca-cert-dir"), "{log}");
}

backend_tests!(
    redis_cli_over_tls,
    pipeline_and_large_values,
    client_certificates,
    plain_text_on_the_tls_port,
    reload_certificates,
    tls_connections_stay_on_their_thread,
    protocols_and_ciphers,
    encrypted_key,
    tls_only,
);
