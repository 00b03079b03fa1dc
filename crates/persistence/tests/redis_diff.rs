//! Differential test against Debian's redis-server 7.0 (CI installs it):
//! (a) a dataset built by seeded random commands in redis-server, SAVEd, read with our
//!     reader: every key's content and deadline match what redis-server returns, and our
//!     DEBUG DIGEST-VALUE / DEBUG DIGEST match redis-server's;
//! (b) the same content built as Damselfly values and written with our writer passes
//!     redis-check-rdb, and a second redis-server loading it has the same digest and content;
//! (c) every key's DUMP decodes with ours; our DUMP of it RESTOREs into redis-server with the
//!     same digest, byte for byte the same payload where the encoding is order-preserving.

mod common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{build, logical, Logical, Score};
use damselfly_persistence::digest::{to_hex, value_digest, DatasetDigest};
use damselfly_persistence::dump;
use damselfly_persistence::rdb::{Event, RdbReader, RdbWriter, WriteOptions};
use damselfly_storage::{EncodingLimits, Value};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const DBS: [u64; 3] = [0, 2, 9];

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().expect("addr").port()
}

fn start(dir: &Path, dbfilename: &str) -> Server {
    let port = free_port();
    let child = Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--enable-debug-command",
            "yes",
        ])
        .arg("--dir")
        .arg(dir)
        .args(["--dbfilename", dbfilename, "--databases", "16"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server");
    let server = Server { child, port };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(mut c) = server.conn(0) {
            // LOADING errors until the file is in.
            if redis::cmd("PING").query::<String>(&mut c).is_ok() {
                return server;
            }
        }
        assert!(Instant::now() < deadline, "redis-server did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
}

impl Server {
    fn conn(&self, db: u64) -> redis::RedisResult<redis::Connection> {
        redis::Client::open(format!("redis://127.0.0.1:{}/{db}", self.port))?.get_connection()
    }
}

fn redis_available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .output()
        .is_ok();
    if !ok {
        eprintln!("\n\n*** SKIPPED: redis-server is not installed; the RDB differential test did not run ***\n");
    }
    ok
}

/// Runs a command given as words.
fn run(c: &mut redis::Connection, args: &[Vec<u8>]) {
    let mut cmd = redis::cmd(std::str::from_utf8(&args[0]).expect("command name"));
    for a in &args[1..] {
        cmd.arg(a.as_slice());
    }
    cmd.query::<redis::Value>(c)
        .unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(&args[0])));
}

fn w(s: impl AsRef<[u8]>) -> Vec<u8> {
    s.as_ref().to_vec()
}

/// A random element: small and large integers, short text, long compressible and
/// incompressible text, binary bytes.
fn element(rng: &mut StdRng) -> Vec<u8> {
    match rng.gen_range(0..10) {
        0 => rng.gen_range(-200i64..300).to_string().into_bytes(),
        1 => rng.gen::<i64>().to_string().into_bytes(),
        2 => rng.gen_range(-70000i64..70000).to_string().into_bytes(),
        3 => format!("0{}", rng.gen_range(0..100)).into_bytes(),
        4 => "ab".repeat(rng.gen_range(11..200)).into_bytes(),
        5 => (0..rng.gen_range(21..300)).map(|_| rng.gen()).collect(),
        6 => (0..rng.gen_range(0..4)).map(|_| rng.gen()).collect(),
        _ => format!("el:{}", rng.gen_range(0..1000)).into_bytes(),
    }
}

fn score(rng: &mut StdRng) -> String {
    match rng.gen_range(0..8) {
        0 => "inf".into(),
        1 => "-inf".into(),
        2 => "-0".into(),
        3 => format!("{}", rng.gen::<f64>() * 1e300),
        4 => format!("{}", rng.gen_range(-1e6..1e6)),
        5 => rng.gen_range(-5000i64..5000).to_string(),
        6 => format!("{}", rng.gen::<f64>() / 3.0),
        _ => rng.gen::<i64>().to_string(),
    }
}

/// Builds the dataset: every type in its small and large encodings, in several databases.
fn populate(server: &Server, rng: &mut StdRng) {
    for &db in &DBS {
        let mut c = server.conn(db).expect("connect");
        let mut keys = Vec::new();
        for i in 0..40 {
            let k = w(format!("str:{db}:{i}"));
            run(&mut c, &[w("SET"), k.clone(), element(rng)]);
            keys.push(k);
        }
        run(&mut c, &[w("SET"), w("str:empty"), w("")]);
        run(&mut c, &[w("SET"), w("str:min"), w(i64::MIN.to_string())]);
        run(&mut c, &[w("SET"), w("str:big"), w("xyz".repeat(30_000))]);
        run(
            &mut c,
            &[w("PFADD"), w("hll:sparse"), w("a"), w("b"), w("c")],
        );
        let mut pf = vec![w("PFADD"), w("hll:dense")];
        pf.extend((0..3000).map(|i| w(format!("e{i}"))));
        run(&mut c, &pf);
        for (i, n) in [1usize, 5, 200, 3000].into_iter().enumerate() {
            let k = w(format!("list:{i}"));
            for j in 0..n {
                let push = if rng.gen_bool(0.7) { "RPUSH" } else { "LPUSH" };
                run(&mut c, &[w(push), k.clone(), element(rng)]);
                if j % 97 == 5 {
                    run(
                        &mut c,
                        &[w("LINSERT"), k.clone(), w("BEFORE"), w("el:1"), w("ins")],
                    );
                }
            }
            keys.push(k);
        }
        let mut big = vec![w("RPUSH"), w("list:hugeel")];
        big.extend((0..5).map(|i| w(format!("{i}").repeat(10_000))));
        run(&mut c, &big);
        run(
            &mut c,
            &[
                w("RPUSH"),
                w("list:ordered"),
                w("a"),
                w("1"),
                w("-5"),
                w("b"),
            ],
        );
        // Sets: intsets of each width, past 512 members, text members.
        for (k, members) in [
            (
                "set:int16",
                (0..20).map(|i| w(i.to_string())).collect::<Vec<_>>(),
            ),
            ("set:int32", vec![w("-70000"), w("1"), w("99999")]),
            ("set:int64", vec![w("5000000000"), w("-3")]),
            (
                "set:ints600",
                (0..600).map(|i| w((i * 7).to_string())).collect(),
            ),
            ("set:text", (0..50).map(|_| element(rng)).collect()),
        ] {
            let mut cmd = vec![w("SADD"), w(k)];
            cmd.extend(members);
            run(&mut c, &cmd);
            keys.push(w(k));
        }
        // Hashes: listpack, long values, many fields.
        for (k, n, long) in [
            ("hash:small", 10, false),
            ("hash:long", 5, true),
            ("hash:many", 300, false),
        ] {
            for j in 0..n {
                let v = if long && j == 2 {
                    w("v".repeat(100))
                } else {
                    element(rng)
                };
                let f = if rng.gen_bool(0.3) {
                    w(j.to_string())
                } else {
                    w(format!("f{j}"))
                };
                run(&mut c, &[w("HSET"), w(k), f, v]);
            }
            keys.push(w(k));
        }
        // Sorted sets: listpack, past 128 members, a long member.
        for (k, n) in [("zset:small", 12), ("zset:many", 400), ("zset:longm", 3)] {
            for j in 0..n {
                run(
                    &mut c,
                    &[w("ZADD"), w(k), w(score(rng)), w(format!("m{}", j % 350))],
                );
            }
            keys.push(w(k));
        }
        run(
            &mut c,
            &[w("ZADD"), w("zset:longm"), w("1"), w("m".repeat(80))],
        );
        run(
            &mut c,
            &[
                w("ZADD"),
                w("zset:negzero"),
                w("-0"),
                w("a"),
                w("0"),
                w("b"),
            ],
        );
        // Deadlines on about a third of the keys, far enough not to pass during the test.
        for k in &keys {
            if rng.gen_bool(0.35) {
                run(
                    &mut c,
                    &[
                        w("PEXPIRE"),
                        k.clone(),
                        w(rng.gen_range(3_600_000i64..90_000_000).to_string()),
                    ],
                );
            }
        }
    }
}

/// A key's content as redis-server returns it through commands.
fn fetch(c: &mut redis::Connection, key: &[u8]) -> Logical {
    let ty: String = redis::cmd("TYPE").arg(key).query(c).expect("TYPE");
    let pairs = |flat: Vec<Vec<u8>>| -> Vec<(Vec<u8>, Vec<u8>)> {
        flat.chunks_exact(2)
            .map(|p| (p[0].clone(), p[1].clone()))
            .collect()
    };
    match ty.as_str() {
        "string" => Logical::Str(redis::cmd("GET").arg(key).query(c).expect("GET")),
        "list" => Logical::List(
            redis::cmd("LRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .query(c)
                .expect("LRANGE"),
        ),
        "set" => Logical::Set(
            redis::cmd("SMEMBERS")
                .arg(key)
                .query::<Vec<Vec<u8>>>(c)
                .expect("SMEMBERS")
                .into_iter()
                .collect(),
        ),
        "hash" => Logical::Hash(
            pairs(redis::cmd("HGETALL").arg(key).query(c).expect("HGETALL"))
                .into_iter()
                .collect(),
        ),
        "zset" => {
            let flat: Vec<Vec<u8>> = redis::cmd("ZRANGE")
                .arg(key)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .query(c)
                .expect("ZRANGE");
            Logical::ZSet(
                pairs(flat)
                    .into_iter()
                    .map(|(m, s)| {
                        let s = std::str::from_utf8(&s).expect("score text");
                        (
                            m,
                            Score(s.parse::<f64>().unwrap_or_else(|_| panic!("score {s}"))),
                        )
                    })
                    .collect(),
            )
        }
        other => panic!("unexpected type {other}"),
    }
}

fn pexpiretime(c: &mut redis::Connection, key: &[u8]) -> Option<i64> {
    let t: i64 = redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(c)
        .expect("PEXPIRETIME");
    (t >= 0).then_some(t)
}

/// (database, key) to (content, deadline).
type Keyspace = BTreeMap<(u64, Vec<u8>), (Logical, Option<i64>)>;

/// Every key of `DBS` as (content, deadline), read through commands.
fn snapshot(server: &Server) -> Keyspace {
    let mut out = BTreeMap::new();
    for &db in &DBS {
        let mut c = server.conn(db).expect("connect");
        let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(&mut c).expect("KEYS");
        for k in keys {
            let v = fetch(&mut c, &k);
            let t = pexpiretime(&mut c, &k);
            out.insert((db, k), (v, t));
        }
    }
    out
}

fn debug_digest(server: &Server) -> String {
    let mut c = server.conn(0).expect("connect");
    redis::cmd("DEBUG")
        .arg("DIGEST")
        .query(&mut c)
        .expect("DEBUG DIGEST")
}

struct Loaded {
    entries: Vec<(u64, Vec<u8>, Value, Option<i64>)>,
    aux: BTreeMap<Vec<u8>, Vec<u8>>,
}

fn read_rdb(path: &Path) -> Loaded {
    let file = std::fs::File::open(path).expect("open rdb");
    let mut r =
        RdbReader::new(std::io::BufReader::new(file), EncodingLimits::default()).expect("header");
    let mut loaded = Loaded {
        entries: Vec::new(),
        aux: BTreeMap::new(),
    };
    while let Some(ev) = r
        .next()
        .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
    {
        match ev {
            Event::Entry(e) => loaded.entries.push((e.db, e.key, e.value, e.expire_ms)),
            Event::Aux { key, value } => {
                loaded.aux.insert(key, value);
            }
            _ => {}
        }
    }
    assert_eq!(r.empty_keys_skipped(), 0);
    loaded
}

#[test]
fn rdb_and_dump_match_redis_server() {
    if !redis_available() {
        return;
    }
    let started = Instant::now();
    let limits = EncodingLimits::default();
    let dir = tempfile::tempdir().expect("tempdir");
    let redis = start(dir.path(), "dump.rdb");
    populate(&redis, &mut StdRng::seed_from_u64(0x5eed_0001));
    let expected = snapshot(&redis);
    let redis_digest = debug_digest(&redis);
    assert!(expected.len() > 150, "dataset of {} keys", expected.len());

    // (a) redis-server's file, read with our reader.
    let mut c0 = redis.conn(0).expect("connect");
    redis::cmd("SAVE").query::<()>(&mut c0).expect("SAVE");
    let loaded = read_rdb(&dir.path().join("dump.rdb"));
    assert_eq!(
        loaded.aux.get(&b"redis-ver"[..]).map(Vec::as_slice),
        Some(&b"7.0.15"[..])
    );
    assert_eq!(loaded.entries.len(), expected.len());
    let mut ours = DatasetDigest::new();
    let mut encodings = BTreeMap::new();
    for (db, key, value, expire) in &loaded.entries {
        let (content, deadline) = &expected[&(*db, key.clone())];
        assert_eq!(
            &logical(value),
            content,
            "db {db} key {:?}",
            String::from_utf8_lossy(key)
        );
        assert_eq!(
            expire,
            deadline,
            "deadline of {:?}",
            String::from_utf8_lossy(key)
        );
        let mut c = redis.conn(*db).expect("connect");
        let theirs: Vec<String> = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(key)
            .query(&mut c)
            .expect("DIGEST-VALUE");
        assert_eq!(
            to_hex(&value_digest(value.as_ref(), expire.is_some())),
            theirs[0],
            "DIGEST-VALUE of {:?} ({})",
            String::from_utf8_lossy(key),
            value.encoding()
        );
        ours.add(*db, key, value.as_ref(), expire.is_some());
        *encodings.entry(value.encoding()).or_insert(0) += 1;
    }
    assert_eq!(to_hex(&ours.finish()), redis_digest, "DEBUG DIGEST");
    for enc in [
        "int",
        "embstr",
        "raw",
        "quicklist",
        "intset",
        "hashtable",
        "listpack",
        "skiplist",
    ] {
        assert!(
            encodings.contains_key(enc),
            "no {enc} value in the dataset: {encodings:?}"
        );
    }

    // (b) the same content as Damselfly values, written by our writer, loaded by redis-server.
    let dir2 = tempfile::tempdir().expect("tempdir");
    for (name, opts) in [
        ("ours.rdb", WriteOptions::default()),
        (
            "plain.rdb",
            WriteOptions {
                compression: false,
                checksum: false,
                ..WriteOptions::default()
            },
        ),
    ] {
        let path = dir2.path().join(name);
        write_rdb(&path, &expected, &opts, &limits);
        check_rdb(&path);
        let second = start(dir2.path(), name);
        let reloaded = snapshot(&second);
        assert_eq!(reloaded.len(), expected.len());
        for (k, v) in &expected {
            assert_eq!(reloaded.get(k), Some(v), "{name}: {k:?}");
        }
        assert_eq!(
            debug_digest(&second),
            redis_digest,
            "DEBUG DIGEST after loading {name}"
        );
    }

    // (c) DUMP and RESTORE both ways.
    let mut identical = 0;
    for ((db, key), (content, deadline)) in &expected {
        let mut c = redis.conn(*db).expect("connect");
        let payload: Vec<u8> = redis::cmd("DUMP").arg(key).query(&mut c).expect("DUMP");
        let value = dump::decode(&payload, &limits).unwrap_or_else(|e| panic!("{key:?}: {e}"));
        assert_eq!(
            &logical(&value),
            content,
            "DUMP of {:?}",
            String::from_utf8_lossy(key)
        );
        let mine = dump::encode(value.as_ref(), &WriteOptions::default());
        let enc: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(key)
            .query(&mut c)
            .expect("OBJECT");
        if mine == payload {
            identical += 1;
        } else {
            // Where the order of elements is the value's own, the bytes are Redis's.
            assert!(
                !matches!(
                    enc.as_str(),
                    "int" | "embstr" | "raw" | "intset" | "listpack"
                ),
                "{enc} payload of {:?} differs",
                String::from_utf8_lossy(key)
            );
        }
        let mut c15 = redis.conn(15).expect("connect");
        let mut restore = redis::cmd("RESTORE");
        restore
            .arg(key)
            .arg(deadline.unwrap_or(0))
            .arg(mine.as_slice())
            .arg("REPLACE");
        if deadline.is_some() {
            restore.arg("ABSTTL");
        }
        restore
            .query::<()>(&mut c15)
            .unwrap_or_else(|e| panic!("RESTORE {key:?}: {e}"));
        let a: Vec<String> = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(key)
            .query(&mut c)
            .expect("digest");
        let b: Vec<String> = redis::cmd("DEBUG")
            .arg("DIGEST-VALUE")
            .arg(key)
            .query(&mut c15)
            .expect("digest");
        assert_eq!(a, b, "restored {:?}", String::from_utf8_lossy(key));
    }
    assert!(
        identical * 2 > expected.len(),
        "only {identical} identical payloads"
    );
    eprintln!(
        "redis differential: {} keys, {identical} DUMP payloads byte-identical, {:?}",
        expected.len(),
        started.elapsed()
    );
}

fn write_rdb(path: &Path, data: &Keyspace, opts: &WriteOptions, limits: &EncodingLimits) {
    let file = std::fs::File::create(path).expect("create");
    let mut wr = RdbWriter::new(
        std::io::BufWriter::new(file),
        opts,
        1_700_000_000,
        1 << 20,
        false,
    )
    .expect("header");
    wr.write_aux(b"damselfly-snapshot-id", b"0123456789abcdef")
        .expect("aux");
    for &db in &DBS {
        let keys: Vec<_> = data.iter().filter(|((d, _), _)| *d == db).collect();
        let expires = keys.iter().filter(|(_, (_, t))| t.is_some()).count();
        wr.select_db(db, keys.len() as u64, expires as u64)
            .expect("select");
        for ((_, key), (content, deadline)) in keys {
            wr.write_entry(key, build(content, limits).as_ref(), *deadline)
                .expect("entry");
        }
    }
    wr.finish().expect("finish");
}

fn check_rdb(path: &Path) {
    let out = Command::new("redis-check-rdb")
        .arg(path)
        .output()
        .expect("run redis-check-rdb");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("RDB looks OK"),
        "redis-check-rdb on {}:\n{text}",
        path.display()
    );
}
