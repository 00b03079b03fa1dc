//! TLS for client connections (docs/operations.md, "TLS"). The rustls server configuration is
//! built from Redis 7.0's `tls-*` parameters and held where every thread reads it when it
//! accepts a connection; CONFIG SET of a `tls-*` parameter rebuilds it for new connections.
//!
//! The byte stream is wrapped by our own small adapter over the backends' read and write
//! halves (`ConnRead`/`ConnWrite`), so both backends and the one connection loop (`drive`)
//! serve TLS exactly as they serve plain sockets. The loop reads and writes concurrently and
//! drops whichever of the two is still pending, which the adapter allows: see `TlsWrite`.
//! A TLS connection never moves to another thread: its session lives in these halves, not in
//! the socket that a move duplicates.

use std::cell::RefCell;
use std::fs;
use std::future::Future;
use std::io::{self, Read, Write};
use std::path::Path;
use std::rc::Rc;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use damselfly_commands::config::Config;
use damselfly_coord::Connection;
use rustls::crypto::{ring, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{NoServerSessionStorage, ServerSessionMemoryCache, WebPkiClientVerifier};
use rustls::{
    RootCertStore, ServerConfig, ServerConnection, SupportedCipherSuite, SupportedProtocolVersion,
};

use crate::drive::{race, serve, write_all, ConnRead, ConnWrite, Either};
use crate::handoff::Movers;

/// The TLS configuration in force, shared by every thread. New connections take the current
/// one; connections already open keep the one they started with.
pub struct Tls {
    current: RwLock<Arc<ServerConfig>>,
}

impl Tls {
    /// The TLS configuration when `tls-port` is set (None otherwise), built from `config`;
    /// from then on CONFIG SET of a `tls-*` parameter rebuilds it. The error says why it
    /// does not build.
    pub fn from_config(config: &Config) -> Result<Option<Arc<Tls>>, String> {
        if config.get_u64("tls-port") == 0 {
            return Ok(None);
        }
        let built = build(&|name| config.get(name))?;
        let tls = Arc::new(Tls {
            current: RwLock::new(built),
        });
        let holder = tls.clone();
        config.set_tls_reload(Box::new(move |get| match build(get) {
            Ok(built) => {
                *holder.current.write().unwrap_or_else(|e| e.into_inner()) = built;
                tracing::info!("TLS configuration reloaded: new connections use it");
                Ok(())
            }
            Err(why) => {
                tracing::warn!("cannot update the TLS configuration: {why}");
                Err(why)
            }
        }));
        Ok(Some(tls))
    }

    /// The configuration a connection accepted now uses.
    pub fn server_config(&self) -> Arc<ServerConfig> {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// Builds the rustls server configuration from the `tls-*` parameters as `get` reads them.
pub fn build(get: &dyn Fn(&str) -> String) -> Result<Arc<ServerConfig>, String> {
    let cert_file = get("tls-cert-file");
    if cert_file.is_empty() {
        return Err("No tls-cert-file configured!".into());
    }
    let key_file = get("tls-key-file");
    if key_file.is_empty() {
        return Err("No tls-key-file configured!".into());
    }
    let certs = load_certs(Path::new(&cert_file))
        .map_err(|e| format!("Failed to load certificate: {cert_file}: {e}"))?;
    let key = load_key(Path::new(&key_file), &get("tls-key-file-pass"))
        .map_err(|e| format!("Failed to load private key: {key_file}: {e}"))?;
    let versions = protocols(&get("tls-protocols"))?;
    let suites = cipher_suites(&get("tls-ciphersuites"), &get("tls-ciphers"))?;
    let provider = Arc::new(CryptoProvider {
        cipher_suites: suites,
        ..ring::default_provider()
    });
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(|e| format!("Failed to configure TLS protocols and ciphers: {e}"))?;
    let auth = get("tls-auth-clients");
    let builder = if auth == "no" {
        builder.with_no_client_auth()
    } else {
        let roots = load_roots(&get("tls-ca-cert-file"), &get("tls-ca-cert-dir"))?;
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
        let verifier = if auth == "optional" {
            verifier.allow_unauthenticated()
        } else {
            verifier
        };
        builder.with_client_cert_verifier(
            verifier
                .build()
                .map_err(|e| format!("Failed to configure client certificate checks: {e}"))?,
        )
    };
    let mut config = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("Failed to use certificate {cert_file} with key {key_file}: {e}"))?;
    config.ignore_client_order = get("tls-prefer-server-ciphers") == "yes";
    let cache_size: usize = get("tls-session-cache-size").parse().unwrap_or(0);
    if get("tls-session-caching") == "yes" && cache_size > 0 {
        config.session_storage = ServerSessionMemoryCache::new(cache_size);
    } else {
        config.session_storage = Arc::new(NoServerSessionStorage {});
        config.send_tls13_tickets = 0;
    }
    Ok(Arc::new(config))
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| e.to_string())?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    if certs.is_empty() {
        return Err("no PEM certificate in the file".into());
    }
    Ok(certs)
}

const ENCRYPTED_BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
const ENCRYPTED_END: &str = "-----END ENCRYPTED PRIVATE KEY-----";

/// A PEM private key: PKCS#8, PKCS#1 (RSA) or SEC1 (EC); or an encrypted PKCS#8 key
/// (PBES2, as `openssl pkcs8 -topk8` and `openssl genpkey -aes256` write them) opened with
/// `pass`. OpenSSL's older encrypted PEM (`Proc-Type: 4,ENCRYPTED`) is refused with advice.
fn load_key(path: &Path, pass: &str) -> Result<PrivateKeyDer<'static>, String> {
    let text = fs::read_to_string(path).map_err(|e| e.to_string())?;
    if let Some(start) = text.find(ENCRYPTED_BEGIN) {
        if pass.is_empty() {
            return Err("the key is encrypted: set tls-key-file-pass".into());
        }
        let end = text[start..]
            .find(ENCRYPTED_END)
            .map(|e| start + e + ENCRYPTED_END.len())
            .ok_or("unterminated ENCRYPTED PRIVATE KEY block")?;
        let (_, doc) = pkcs8::der::Document::from_pem(&text[start..end])
            .map_err(|e| format!("bad ENCRYPTED PRIVATE KEY block: {e}"))?;
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes())
            .map_err(|e| format!("bad ENCRYPTED PRIVATE KEY block: {e}"))?;
        let plain = info
            .decrypt(pass.as_bytes())
            .map_err(|e| format!("cannot decrypt the key with tls-key-file-pass: {e}"))?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(
            plain.as_bytes().to_vec(),
        )));
    }
    if text.contains("Proc-Type: 4,ENCRYPTED") {
        return Err(
            "keys encrypted in OpenSSL's legacy PEM format are not supported: convert \
                    the key with `openssl pkcs8 -topk8 -v2 aes-256-cbc`"
                .into(),
        );
    }
    PrivateKeyDer::from_pem_slice(text.as_bytes()).map_err(|e| e.to_string())
}

/// The CA certificates client certificates are checked against: every certificate in
/// `file`, and in each file of `dir` that holds PEM certificates.
fn load_roots(file: &str, dir: &str) -> Result<RootCertStore, String> {
    if file.is_empty() && dir.is_empty() {
        return Err("Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, tls-replication or tls-auth-clients are enabled!".into());
    }
    let mut roots = RootCertStore::empty();
    let fail = |what: &str, e: String| {
        format!("Failed to configure CA certificate(s) file/directory: {what}: {e}")
    };
    if !file.is_empty() {
        for cert in load_certs(Path::new(file)).map_err(|e| fail(file, e))? {
            roots.add(cert).map_err(|e| fail(file, e.to_string()))?;
        }
    }
    if !dir.is_empty() {
        let entries = fs::read_dir(dir).map_err(|e| fail(dir, e.to_string()))?;
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.is_file() {
                continue;
            }
            // As OpenSSL's directory lookup, files that hold no certificate are skipped.
            if let Ok(certs) = load_certs(&path) {
                for cert in certs {
                    roots
                        .add(cert)
                        .map_err(|e| fail(&path.display().to_string(), e.to_string()))?;
                }
            }
        }
    }
    if roots.is_empty() {
        return Err(fail(
            format!("{file} {dir}").trim(),
            "no CA certificate found".into(),
        ));
    }
    Ok(roots)
}

/// `tls-protocols`: TLSv1.2 and TLSv1.3 by default, as Redis; rustls has no TLS 1.0 or 1.1.
fn protocols(value: &str) -> Result<Vec<&'static SupportedProtocolVersion>, String> {
    let mut versions = Vec::new();
    for word in value.split_whitespace() {
        let version = match word.to_ascii_lowercase().as_str() {
            "tlsv1.2" => &rustls::version::TLS12,
            "tlsv1.3" => &rustls::version::TLS13,
            "tlsv1" | "tlsv1.1" => {
                return Err(format!(
                    "tls-protocols: {word} is not supported (rustls implements TLSv1.2 and TLSv1.3)"
                ))
            }
            _ => {
                return Err("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.".into())
            }
        };
        if !versions.contains(&version) {
            versions.push(version);
        }
    }
    if versions.is_empty() {
        versions = vec![&rustls::version::TLS12, &rustls::version::TLS13];
    }
    Ok(versions)
}

/// TLS 1.3 suites by their standard names (`tls-ciphersuites`).
const TLS13_SUITES: &[(&str, SupportedCipherSuite)] = &[
    (
        "TLS_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS13_AES_256_GCM_SHA384,
    ),
    (
        "TLS_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS13_AES_128_GCM_SHA256,
    ),
    (
        "TLS_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
    ),
];

/// TLS 1.2 suites by OpenSSL's names (`tls-ciphers`) and their IANA names.
const TLS12_SUITES: &[(&str, &str, SupportedCipherSuite)] = &[
    (
        "ECDHE-ECDSA-AES256-GCM-SHA384",
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-ECDSA-AES128-GCM-SHA256",
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-ECDSA-CHACHA20-POLY1305",
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
    (
        "ECDHE-RSA-AES256-GCM-SHA384",
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
    ),
    (
        "ECDHE-RSA-AES128-GCM-SHA256",
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
    ),
    (
        "ECDHE-RSA-CHACHA20-POLY1305",
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ring::cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
    ),
];

/// The suites offered, in preference order: `tls-ciphersuites` (TLS 1.3, `:`-separated
/// standard names) then `tls-ciphers` (TLS 1.2, an OpenSSL cipher list). Empty means every
/// suite rustls has. In a cipher list, `DEFAULT`, `HIGH` and `ALL` stand for all of rustls's
/// TLS 1.2 suites (every one is an ECDHE AEAD suite), and `!`/`-` exclusions remove the
/// suites they name (excluding what rustls lacks anyway, like `!MEDIUM`, changes nothing).
/// Any other name rustls has no suite for is an error.
fn cipher_suites(tls13: &str, tls12: &str) -> Result<Vec<SupportedCipherSuite>, String> {
    let split = |s: &str| -> Vec<String> {
        s.split([':', ',', ' '])
            .filter(|w| !w.is_empty())
            .map(str::to_string)
            .collect()
    };
    let mut suites = Vec::new();
    let words13 = split(tls13);
    if words13.is_empty() {
        suites.extend(TLS13_SUITES.iter().map(|(_, s)| *s));
    }
    for word in &words13 {
        let suite = TLS13_SUITES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(word))
            .map(|(_, s)| *s)
            .ok_or_else(|| format!("Failed to configure ciphersuites: {tls13}: rustls has no TLSv1.3 suite {word} (it has TLS_AES_256_GCM_SHA384, TLS_AES_128_GCM_SHA256 and TLS_CHACHA20_POLY1305_SHA256)"))?;
        if !suites.contains(&suite) {
            suites.push(suite);
        }
    }
    let words12 = split(tls12);
    let mut list12: Vec<SupportedCipherSuite> = Vec::new();
    if words12.is_empty() {
        list12.extend(TLS12_SUITES.iter().map(|(_, _, s)| *s));
    }
    let find12 = |name: &str| {
        TLS12_SUITES
            .iter()
            .find(|(openssl, iana, _)| {
                openssl.eq_ignore_ascii_case(name) || iana.eq_ignore_ascii_case(name)
            })
            .map(|(_, _, s)| *s)
    };
    let mut excluded = Vec::new();
    for word in &words12 {
        if let Some(name) = word.strip_prefix(['!', '-']) {
            excluded.extend(find12(name));
            continue;
        }
        let word = word.strip_prefix('+').unwrap_or(word);
        let found: Vec<SupportedCipherSuite> = if ["DEFAULT", "HIGH", "ALL"]
            .contains(&word.to_ascii_uppercase().as_str())
        {
            TLS12_SUITES.iter().map(|(_, _, s)| *s).collect()
        } else {
            vec![find12(word).ok_or_else(|| {
                format!("Failed to configure ciphers: {tls12}: rustls has no TLSv1.2 cipher {word}")
            })?]
        };
        for suite in found {
            if !list12.contains(&suite) {
                list12.push(suite);
            }
        }
    }
    suites.extend(list12.into_iter().filter(|s| !excluded.contains(s)));
    Ok(suites)
}

/// Longest a client may take to complete its TLS handshake (Redis has no such limit; a
/// client that connects and says nothing would hold its connection slot forever).
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// How often a handshake in progress looks for CLIENT KILL and shutdown.
const HANDSHAKE_TICK: Duration = Duration::from_millis(100);

/// Ciphertext read from the socket at once: one full TLS record and its header.
const READ_BUF: usize = 16 * 1024 + 512;

/// Plaintext handed to rustls per write: its default send buffer limit.
const WRITE_CHUNK: usize = 64 * 1024;

/// Feeds ciphertext to the session and processes it; how many bytes it took.
fn feed(session: &mut ServerConnection, mut bytes: &[u8]) -> io::Result<usize> {
    let n = session.read_tls(&mut bytes)?;
    if n == 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "TLS input not taken",
        ));
    }
    session
        .process_new_packets()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(n)
}

/// Moves every record the session has to send into `out`.
fn drain_tls(session: &mut ServerConnection, out: &mut Vec<u8>) -> io::Result<()> {
    while session.wants_write() {
        session.write_tls(out)?;
    }
    Ok(())
}

/// The decrypting half: reads ciphertext from the socket and returns plaintext.
pub(crate) struct TlsRead<R> {
    raw: R,
    session: Rc<RefCell<ServerConnection>>,
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

/// The encrypting half. `write` returns only once the records carrying the bytes it took
/// are on the socket; if it is dropped before (the loop's read won the race), it remembers
/// how many bytes it took (`owed`) and the records not yet sent, and its next call, which the
/// connection loop makes with the same bytes first (it only ever appends to its output),
/// finishes sending them and reports those bytes. So, as for a plain socket, no reply byte
/// is lost or sent twice, and nothing waits unflushed inside the adapter.
pub(crate) struct TlsWrite<W> {
    raw: W,
    session: Rc<RefCell<ServerConnection>>,
    out: Vec<u8>,
    sent: usize,
    owed: usize,
}

impl<R: ConnRead> ConnRead for TlsRead<R> {
    async fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            {
                let mut session = self.session.borrow_mut();
                match session.reader().read(buf) {
                    // 0: the client's close_notify.
                    Ok(n) => return Ok(n),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => return Err(e),
                }
                if self.start < self.end {
                    self.start += feed(&mut session, &self.buf[self.start..self.end])?;
                    continue;
                }
            }
            // Records the reads produced to send (alerts, key updates) go with the next write.
            let n = self.raw.read(&mut self.buf).await?;
            if n == 0 {
                return Ok(0);
            }
            self.start = 0;
            self.end = n;
        }
    }
}

impl<W: ConnWrite> ConnWrite for TlsWrite<W> {
    async fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            if self.sent < self.out.len() {
                match self.raw.write(&self.out[self.sent..]).await? {
                    0 => return Ok(0),
                    n => self.sent += n,
                }
                continue;
            }
            self.out.clear();
            self.sent = 0;
            if self.owed > 0 {
                return Ok(std::mem::take(&mut self.owed));
            }
            if buf.is_empty() {
                return Ok(0);
            }
            let mut session = self.session.borrow_mut();
            let taken = session.writer().write(&buf[..buf.len().min(WRITE_CHUNK)])?;
            drain_tls(&mut session, &mut self.out)?;
            if taken == 0 && self.out.is_empty() {
                return Ok(0);
            }
            self.owed = taken;
        }
    }

    fn let_go(self) {
        self.raw.let_go();
    }
}

/// Runs the server side of the handshake over the socket's halves; then the halves that
/// carry the session. Input the client sent after its last handshake message stays for the
/// first read.
async fn accept<R: ConnRead, W: ConnWrite>(
    mut rd: R,
    mut wr: W,
    config: Arc<ServerConfig>,
) -> io::Result<(TlsRead<R>, TlsWrite<W>)> {
    let mut session = ServerConnection::new(config).map_err(io::Error::other)?;
    let mut buf = vec![0u8; READ_BUF].into_boxed_slice();
    let (mut start, mut end) = (0, 0);
    let mut out = Vec::new();
    loop {
        if session.wants_write() {
            out.clear();
            drain_tls(&mut session, &mut out)?;
            write_all(&mut wr, &out).await?;
            continue;
        }
        if !session.is_handshaking() {
            break;
        }
        if start < end {
            match feed(&mut session, &buf[start..end]) {
                Ok(n) => start += n,
                Err(e) => {
                    // The alert rustls queued tells the client why, when it can hear it.
                    out.clear();
                    if drain_tls(&mut session, &mut out).is_ok() {
                        let _ = write_all(&mut wr, &out).await;
                    }
                    return Err(e);
                }
            }
            continue;
        }
        let n = rd.read(&mut buf).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        start = 0;
        end = n;
    }
    let session = Rc::new(RefCell::new(session));
    Ok((
        TlsRead {
            raw: rd,
            session: session.clone(),
            buf,
            start,
            end,
        },
        TlsWrite {
            raw: wr,
            session,
            out: Vec::new(),
            sent: 0,
            owed: 0,
        },
    ))
}

/// Serves a client of the TLS port: the handshake (within `HANDSHAKE_TIMEOUT`, given up if
/// the client is killed or the server shuts down meanwhile), then the same connection loop
/// as a plain client, over the decrypting and encrypting halves. A failed handshake (a
/// plain-text client, a missing or untrusted client certificate) is logged at debug level
/// and closes the connection.
pub(crate) async fn serve_tls<R: ConnRead, W: ConnWrite, S: Future<Output = ()>>(
    rd: R,
    wr: W,
    mut conn: Connection,
    sleep: impl Fn(Duration) -> S,
    movers: Movers,
    config: Arc<ServerConfig>,
) {
    conn.stay_on_thread();
    let cluster = conn.cluster();
    let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
    let watch = async {
        loop {
            sleep(HANDSHAKE_TICK).await;
            if conn.killed() || cluster.shutdown.is_triggered() || Instant::now() >= deadline {
                return;
            }
        }
    };
    let (rd, wr) = match race(accept(rd, wr, config), watch).await {
        Either::Left(Ok(halves)) => halves,
        Either::Left(Err(e)) => {
            tracing::debug!(client = conn.id(), "TLS handshake failed: {e}");
            return;
        }
        Either::Right(()) => {
            tracing::debug!(
                client = conn.id(),
                "TLS handshake not completed in time, or the client was closed meanwhile"
            );
            return;
        }
    };
    serve(rd, wr, conn, sleep, movers).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protocols_parse_like_redis() {
        assert_eq!(protocols("").unwrap().len(), 2);
        assert_eq!(protocols("TLSv1.3").unwrap(), vec![&rustls::version::TLS13]);
        assert_eq!(protocols("tlsv1.2 TLSV1.2").unwrap().len(), 1);
        assert!(protocols("TLSv1.1").unwrap_err().contains("not supported"));
        assert!(protocols("SSLv3").unwrap_err().contains("Invalid"));
    }

    #[test]
    fn cipher_names_map_to_rustls_suites() {
        let all = cipher_suites("", "").unwrap();
        assert_eq!(all.len(), 9);
        let only = cipher_suites(
            "TLS_CHACHA20_POLY1305_SHA256",
            "ECDHE-RSA-AES128-GCM-SHA256:TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
        )
        .unwrap();
        assert_eq!(
            only,
            vec![
                ring::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
                ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
                ring::cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            ]
        );
        // redis.conf's example: every rustls suite is HIGH, none is MEDIUM.
        assert_eq!(cipher_suites("", "DEFAULT:!MEDIUM").unwrap().len(), 9);
        assert_eq!(
            cipher_suites("", "HIGH:!ECDHE-RSA-CHACHA20-POLY1305")
                .unwrap()
                .len(),
            8
        );
        assert!(cipher_suites("TLS_AES_128_CCM_SHA256", "").is_err());
        assert!(cipher_suites("", "AES128-SHA").is_err());
    }
}
