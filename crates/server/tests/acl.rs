//! Access control lists against Debian's redis-server: the same script of ACL commands, logins
//! and refused commands, over several connections, goes to both servers and every reply must
//! agree: byte for byte, or after normalizing what Redis leaves unspecified or what differs
//! by nature (the order of single-command rules, which Redis takes from its hash table; ages
//! and client details in ACL LOG; random passwords). Then what a differential run cannot
//! show: connections of deleted and disabled users closed, the ACL file, config-file users,
//! `requirepass`, and one thread's change seen by a connection on another.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::diff::{encoded, parse, Node};
use common::{Backend, Raw, Server};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Check {
    Exact,
    /// ACL rule descriptions: runs of single-command rules compared as sets.
    Rules,
    /// ACL LOG: ages and client details replaced.
    Log,
    /// Items in any order (ACL CAT <category>).
    Unordered,
    /// A bulk string of this length (ACL GENPASS).
    Length(usize),
    /// A map reply with the same keys (HELLO).
    Keys,
    /// The connection is closed by the server.
    Closed,
}

use Check::*;

/// (connection, command, check)
type Step = (&'static str, &'static [&'static str], Check);

const SCRIPT: &[Step] = &[
    (
        "admin",
        &[
            "ACL", "SETUSER", "alice", "on", ">pw", "~k*", "%R~r*", "%W~w*", "&ch*", "+@read",
            "+@hash", "-hget", "+set", "+multi", "+exec",
        ],
        Exact,
    ),
    ("admin", &["ACL", "GETUSER", "alice"], Rules),
    (
        "admin",
        &[
            "ACL",
            "SETUSER",
            "bob",
            "on",
            "nopass",
            "allkeys",
            "allchannels",
            "+@all",
            "-@dangerous",
            "+client|kill",
            "(-@all",
            "+get",
            "~only*)",
        ],
        Exact,
    ),
    ("admin", &["ACL", "GETUSER", "bob"], Rules),
    (
        "admin",
        &[
            "ACL",
            "SETUSER",
            "carol",
            "on",
            "#5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
            "-@all",
            "+select|0",
            "+config|get",
            "+@stream",
            "-xadd",
            "%RW~x",
            "&a",
            "&b",
        ],
        Exact,
    ),
    ("admin", &["ACL", "GETUSER", "carol"], Rules),
    ("admin", &["ACL", "SETUSER", "dave"], Exact),
    (
        "admin",
        &[
            "ACL",
            "SETUSER",
            "erin",
            "reset",
            "+@all",
            "-@write",
            "-@admin",
            "+set",
            "resetchannels",
            "&x",
            "sanitize-payload",
            "skip-sanitize-payload",
        ],
        Exact,
    ),
    ("admin", &["ACL", "LIST"], Rules),
    ("admin", &["ACL", "USERS"], Exact),
    // Rules that are refused, and leave the user as it was.
    (
        "admin",
        &["ACL", "SETUSER", "alice", "+get", "+nosuch"],
        Exact,
    ),
    ("admin", &["ACL", "SETUSER", "alice", "+@nosuch"], Exact),
    ("admin", &["ACL", "SETUSER", "bob", "~x"], Exact),
    ("admin", &["ACL", "SETUSER", "bob", "&x"], Exact),
    ("admin", &["ACL", "SETUSER", "alice", "#abc"], Exact),
    (
        "admin",
        &["ACL", "SETUSER", "alice", "<notapassword"],
        Exact,
    ),
    (
        "admin",
        &[
            "ACL",
            "SETUSER",
            "alice",
            "!5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8",
        ],
        Exact,
    ),
    (
        "admin",
        &["ACL", "SETUSER", "alice", "+config|get|x"],
        Exact,
    ),
    ("admin", &["ACL", "SETUSER", "alice", "-select|0"], Exact),
    (
        "admin",
        &["ACL", "SETUSER", "alice", "+client|nosuch"],
        Exact,
    ),
    ("admin", &["ACL", "SETUSER", "alice", "+debug|"], Exact),
    ("admin", &["ACL", "SETUSER", "alice", "%X~k"], Exact),
    ("admin", &["ACL", "SETUSER", "alice", "(+get", "~a"], Exact),
    (
        "admin",
        &["ACL", "SETUSER", "alice", "(+get ~a) bogus"],
        Exact,
    ),
    ("admin", &["ACL", "SETUSER", "alice", "bogus"], Exact),
    ("admin", &["ACL", "SETUSER", "a b"], Exact),
    ("admin", &["ACL", "GETUSER", "alice"], Rules),
    ("admin", &["ACL", "DELUSER", "default"], Exact),
    ("admin", &["ACL", "DELUSER", "nobody"], Exact),
    ("admin", &["ACL", "GETUSER", "nobody"], Exact),
    ("admin", &["ACL", "CAT"], Exact),
    ("admin", &["ACL", "CAT", "hash"], Unordered),
    ("admin", &["ACL", "CAT", "DANGEROUS"], Unordered),
    ("admin", &["ACL", "CAT", "nosuch"], Exact),
    ("admin", &["ACL", "GENPASS"], Length(64)),
    ("admin", &["ACL", "GENPASS", "10"], Length(3)),
    ("admin", &["ACL", "GENPASS", "0"], Exact),
    ("admin", &["ACL", "GENPASS", "5000"], Exact),
    ("admin", &["ACL", "GENPASS", "x"], Exact),
    ("admin", &["ACL", "WHOAMI"], Exact),
    ("admin", &["ACL", "WHOAMI", "x"], Exact),
    ("admin", &["ACL", "SETUSER"], Exact),
    ("admin", &["ACL", "NOSUCH"], Exact),
    ("admin", &["ACL"], Exact),
    ("admin", &["ACL", "HELP"], Exact),
    ("admin", &["ACL", "LOAD"], Exact),
    ("admin", &["ACL", "SAVE"], Exact),
    ("admin", &["ACL", "DRYRUN", "alice", "get", "r1"], Exact),
    (
        "admin",
        &["ACL", "DRYRUN", "alice", "set", "r1", "v"],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "alice", "set", "w1", "v"],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "alice", "hget", "k1", "f"],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "alice", "publish", "ch1", "m"],
        Exact,
    ),
    (
        "admin",
        &[
            "ACL", "DRYRUN", "alice", "lmove", "r1", "w1", "left", "left",
        ],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "bob", "publish", "other", "m"],
        Exact,
    ),
    ("admin", &["ACL", "DRYRUN", "bob", "flushall"], Exact),
    (
        "admin",
        &["ACL", "DRYRUN", "bob", "client", "kill", "id", "1"],
        Exact,
    ),
    ("admin", &["ACL", "DRYRUN", "bob", "client", "list"], Exact),
    ("admin", &["ACL", "DRYRUN", "carol", "select", "0"], Exact),
    ("admin", &["ACL", "DRYRUN", "carol", "select", "1"], Exact),
    (
        "admin",
        &["ACL", "DRYRUN", "carol", "xread", "streams", "x", "0"],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "carol", "xadd", "x", "*", "f", "v"],
        Exact,
    ),
    (
        "admin",
        &["ACL", "DRYRUN", "carol", "subscribe", "a", "b", "c"],
        Exact,
    ),
    ("admin", &["ACL", "DRYRUN", "nobody", "get", "x"], Exact),
    ("admin", &["ACL", "DRYRUN", "alice", "nosuch"], Exact),
    ("admin", &["ACL", "DRYRUN", "alice", "get"], Exact),
    (
        "admin",
        &["ACL", "DRYRUN", "alice", "client", "nosuch"],
        Exact,
    ),
    // alice's own connection.
    ("alice", &["GET", "x"], Exact),
    ("alice", &["AUTH", "alice", "wrong"], Exact),
    ("alice", &["AUTH", "alice", "pw"], Exact),
    ("alice", &["ACL", "WHOAMI"], Exact),
    ("alice", &["GET", "r1"], Exact),
    ("alice", &["SET", "r1", "v"], Exact),
    ("alice", &["SET", "w1", "v"], Exact),
    ("alice", &["SET", "w1", "v", "GET"], Exact),
    ("alice", &["SET", "k1", "v"], Exact),
    ("alice", &["GET", "k1"], Exact),
    ("alice", &["HGET", "k2", "f"], Exact),
    ("alice", &["HSET", "k2", "f", "v"], Exact),
    ("alice", &["HGETALL", "k2"], Exact),
    ("alice", &["MGET", "r1", "k1", "x"], Exact),
    ("alice", &["PUBLISH", "ch1", "m"], Exact),
    ("alice", &["CLIENT", "ID"], Exact),
    ("alice", &["MULTI"], Exact),
    ("alice", &["GET", "r1"], Exact),
    ("alice", &["SET", "r1", "x"], Exact),
    ("alice", &["EXEC"], Exact),
    ("alice", &["MULTI"], Exact),
    ("alice", &["GET", "k1"], Exact),
    ("alice", &["SET", "k1", "v2"], Exact),
    (
        "admin",
        &["ACL", "SETUSER", "alice", "-get", "%R~k*"],
        Exact,
    ),
    ("alice", &["EXEC"], Exact),
    ("alice", &["GET", "k1"], Exact),
    // Logins that fail, and HELLO.
    ("other", &["AUTH", "nobody", "x"], Exact),
    ("other", &["AUTH", "only-password"], Exact),
    ("other", &["AUTH", "a", "b", "c"], Exact),
    ("other", &["HELLO", "3", "AUTH", "alice", "wrong"], Exact),
    ("other", &["HELLO", "2", "AUTH", "alice", "pw"], Keys),
    ("other", &["ACL", "WHOAMI"], Exact),
    ("admin", &["ACL", "LOG", "30"], Log),
    ("admin", &["ACL", "LOG", "2"], Log),
    ("admin", &["ACL", "LOG", "x"], Exact),
    ("admin", &["ACL", "LOG", "RESET"], Exact),
    ("admin", &["ACL", "LOG"], Exact),
    // Scripts run their calls as the caller.
    (
        "admin",
        &[
            "ACL", "SETUSER", "scripter", "on", "nopass", "~a*", "+eval", "+get", "+evalsha",
        ],
        Exact,
    ),
    ("script", &["AUTH", "scripter", "x"], Exact),
    (
        "script",
        &["EVAL", "return redis.call('get', 'a1')", "0"],
        Exact,
    ),
    (
        "script",
        &["EVAL", "return redis.call('get', 'b1')", "0"],
        Exact,
    ),
    (
        "script",
        &["EVAL", "return redis.call('set', 'a1', 'v')", "0"],
        Exact,
    ),
    (
        "script",
        &["EVAL", "return redis.pcall('set', 'a1', 'v')", "0"],
        Exact,
    ),
    (
        "script",
        &["EVAL", "return redis.call('publish', 'c', 'v')", "0"],
        Exact,
    ),
    ("admin", &["ACL", "LOG", "3"], Log),
    // requirepass is the default user's password.
    ("admin", &["CONFIG", "SET", "requirepass", "secret"], Exact),
    ("admin", &["ACL", "GETUSER", "default"], Rules),
    ("late", &["GET", "x"], Exact),
    ("late", &["AUTH", "wrong"], Exact),
    ("late", &["AUTH", "secret"], Exact),
    ("late", &["GET", "x"], Exact),
    ("admin", &["CONFIG", "SET", "requirepass", ""], Exact),
    ("admin", &["ACL", "GETUSER", "default"], Rules),
    ("admin", &["ACL", "LIST"], Rules),
    // A deleted user's connections are closed.
    (
        "admin",
        &["ACL", "DELUSER", "alice", "nobody", "carol"],
        Exact,
    ),
    ("alice", &["PING"], Closed),
    ("admin", &["ACL", "USERS"], Exact),
];

/// Sorts each run of single-command rules (`+get -set +client|kill`) in a rule description,
/// the part whose order Redis takes from its command hash table.
fn sort_command_runs(text: &str) -> String {
    let single = |t: &str| {
        let t = t.trim_end_matches(')');
        (t.starts_with('+') || t.starts_with('-')) && !t[1..].starts_with('@')
    };
    let words: Vec<&str> = text.split(' ').collect();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < words.len() {
        if !single(words[i]) {
            out.push(words[i].to_string());
            i += 1;
            continue;
        }
        let start = i;
        while i < words.len() && single(words[i]) {
            i += 1;
            if words[i - 1].ends_with(')') {
                break;
            }
        }
        let closes = words[i - 1].ends_with(')');
        let mut run: Vec<&str> = words[start..i]
            .iter()
            .map(|w| w.trim_end_matches(')'))
            .collect();
        run.sort();
        let n = out.len();
        out.extend(run.iter().map(|w| w.to_string()));
        if closes {
            out.last_mut().expect("a run").push(')');
        }
        debug_assert!(out.len() > n);
    }
    out.join(" ")
}

fn map_bulks(n: &mut Node, f: &dyn Fn(&str) -> String) {
    if n.kind() == b'$' && n.body.len() >= 2 {
        let text = String::from_utf8_lossy(&n.body[..n.body.len() - 2]).into_owned();
        let new = f(&text);
        n.head = format!("${}\r\n", new.len()).into_bytes();
        n.body = format!("{new}\r\n").into_bytes();
    }
    for i in &mut n.items {
        map_bulks(i, f);
    }
}

/// ACL LOG without what differs between two servers: ages, and of the client only the
/// fields Redis and Damselfly share that do not vary (name, db, cmd, user, flags).
fn normalize_log(n: &mut Node) {
    for entry in &mut n.items {
        let mut k = 0;
        while k + 1 < entry.items.len() {
            let key = String::from_utf8_lossy(&entry.items[k].body)
                .trim()
                .to_string();
            let value = &mut entry.items[k + 1];
            match key.as_str() {
                "age-seconds" => *value = parse(b"$1\r\n0\r\n"),
                "client-info" => {
                    let text = String::from_utf8_lossy(&value.body).into_owned();
                    let kept: Vec<&str> = text
                        .split_whitespace()
                        .filter(|f| {
                            ["name=", "db=", "cmd=", "user=", "flags=", "multi="]
                                .iter()
                                .any(|p| f.starts_with(p))
                        })
                        .collect();
                    let kept = kept.join(" ");
                    *value = parse(format!("${}\r\n{kept}\r\n", kept.len()).as_bytes());
                }
                _ => {}
            }
            k += 2;
        }
    }
}

fn normalized(check: Check, reply: &[u8]) -> Vec<u8> {
    let mut n = parse(reply);
    match check {
        Rules => map_bulks(&mut n, &sort_command_runs),
        Log => normalize_log(&mut n),
        Unordered => n.items.sort(),
        Length(len) => {
            assert_eq!(n.body.len(), len + 2, "{}", String::from_utf8_lossy(reply));
            n.body = b"x\r\n".to_vec();
        }
        Keys => {
            n.items = n.items.iter().step_by(2).cloned().collect();
        }
        Exact | Closed => {}
    }
    encoded(&n)
}

/// Runs the script; returns each step's normalized reply.
fn run_script(port: u16) -> Vec<Vec<u8>> {
    let mut conns: HashMap<&str, Raw> = HashMap::new();
    let mut out = Vec::new();
    for (conn, cmd, check) in SCRIPT {
        let raw = conns.entry(conn).or_insert_with(|| Raw::tcp(port));
        if *check == Closed {
            let _ = raw.try_send(&common::encode(cmd));
            let closed = raw.closed_within(Duration::from_secs(5));
            out.push(format!("closed={closed}").into_bytes());
            continue;
        }
        let reply = raw.cmd(cmd);
        out.push(normalized(*check, &reply));
    }
    out
}

fn differential(backend: Backend) {
    if !backend.available() {
        return;
    }
    let redis = Server::redis();
    let expected = run_script(redis.port);
    let ours = Server::start(backend, &[]);
    let got = run_script(ours.port);
    for (i, (step, (want, have))) in SCRIPT.iter().zip(expected.iter().zip(&got)).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(have),
            String::from_utf8_lossy(want),
            "step {i}: {} {:?}",
            step.0,
            step.1
        );
    }
}

#[test]
fn acl_matches_redis_epoll() {
    differential(Backend::Epoll);
}

#[test]
fn acl_matches_redis_uring() {
    differential(Backend::Uring);
}

#[test]
fn description_runs_sort() {
    assert_eq!(
        sort_command_runs("-@all +@read +set +get (~a -@all +z +b)"),
        "-@all +@read +get +set (~a -@all +b +z)"
    );
}

/// Logs a new connection in as `user`.
fn logged_in(port: u16, user: &str, pass: &str) -> Raw {
    let mut c = Raw::tcp(port);
    assert_eq!(c.cmd(&["AUTH", user, pass]), b"+OK\r\n");
    c
}

fn user_changes_reach_every_thread(backend: Backend) {
    if !backend.available() {
        return;
    }
    let s = Server::start(backend, &[]);
    let mut admin = Raw::tcp(s.port);
    let setuser = |admin: &mut Raw, rules: &[&str]| {
        let mut cmd = vec!["ACL", "SETUSER"];
        cmd.extend_from_slice(rules);
        assert_eq!(admin.cmd(&cmd), b"+OK\r\n");
    };
    // Connections are dealt to both threads in turn.
    setuser(&mut admin, &["carol", "on", "nopass", "~*", "+@all"]);
    let mut carols: Vec<Raw> = (0..4).map(|_| logged_in(s.port, "carol", "x")).collect();
    for c in &mut carols {
        assert_eq!(c.cmd(&["SET", "k", "v"]), b"+OK\r\n");
    }
    setuser(&mut admin, &["carol", "-set"]);
    for c in &mut carols {
        assert_eq!(
            c.cmd(&["SET", "k", "v"]),
            b"-NOPERM this user has no permissions to run the 'set' command\r\n"
        );
        assert_eq!(c.cmd(&["GET", "k"]), b"$1\r\nv\r\n");
    }
    setuser(&mut admin, &["alice", "on", ">pw", "~*", "+@all"]);
    let mut alices: Vec<Raw> = (0..4).map(|_| logged_in(s.port, "alice", "pw")).collect();
    setuser(&mut admin, &["alice", "off"]);
    for c in &mut alices {
        assert!(
            c.closed_within(Duration::from_secs(5)),
            "a disabled user's connection"
        );
    }
    assert_eq!(
        Raw::tcp(s.port).cmd(&["AUTH", "alice", "pw"]),
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    let mut carols_left = carols.split_off(2);
    assert_eq!(admin.cmd(&["ACL", "DELUSER", "carol"]), b":1\r\n");
    for c in carols.iter_mut().chain(&mut carols_left) {
        assert!(
            c.closed_within(Duration::from_secs(5)),
            "a deleted user's connection"
        );
    }
    let list = String::from_utf8(admin.cmd(&["CLIENT", "LIST"])).unwrap();
    assert!(
        !list.contains("user=carol") && !list.contains("user=alice"),
        "{list}"
    );
    assert!(list.contains("user=default"), "{list}");
}

#[test]
fn user_changes_reach_every_thread_epoll() {
    user_changes_reach_every_thread(Backend::Epoll);
}

#[test]
fn user_changes_reach_every_thread_uring() {
    user_changes_reach_every_thread(Backend::Uring);
}

#[test]
fn users_from_the_config_file() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("d.conf");
    std::fs::write(
        &conf,
        "requirepass adminpw\nuser app on >apppw ~app:* +@all\n\nuser \"ro\" on nopass %R~* +@read\n",
    )
    .unwrap();
    let s = Server::start(Backend::Epoll, &[conf.to_str().unwrap()]);
    let mut anon = Raw::tcp(s.port);
    assert_eq!(
        anon.cmd(&["GET", "x"]),
        b"-NOAUTH Authentication required.\r\n"
    );
    let mut admin = logged_in(s.port, "default", "adminpw");
    assert_eq!(
        admin.cmd(&["ACL", "USERS"]),
        b"*3\r\n$3\r\napp\r\n$7\r\ndefault\r\n$2\r\nro\r\n"
    );
    let mut app = logged_in(s.port, "app", "apppw");
    assert_eq!(app.cmd(&["SET", "app:1", "v"]), b"+OK\r\n");
    assert_eq!(
        app.cmd(&["SET", "other", "v"]),
        b"-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
    );
    let mut ro = logged_in(s.port, "ro", "any");
    assert_eq!(ro.cmd(&["GET", "app:1"]), b"$1\r\nv\r\n");

    // A line in error stops the start, naming the file and line.
    std::fs::write(&conf, "port 1\n\nuser bad on +nosuch\n").unwrap();
    let log = common::start_refused(dir.path(), &[conf.to_str().unwrap()]);
    assert!(
        log.contains("Aborting Redis startup because of ACL errors")
            && log.contains("d.conf:3: Error in applying operation '+nosuch'"),
        "{log}"
    );
    // Users in the config file and an ACL file together are refused, as in Redis.
    let acl = dir.path().join("users.acl");
    std::fs::write(&acl, "user ops on nopass +@all ~*\n").unwrap();
    std::fs::write(&conf, format!("aclfile {}\nuser app on\n", acl.display())).unwrap();
    let log = common::start_refused(dir.path(), &[conf.to_str().unwrap()]);
    assert!(log.contains("please define either an ACL file or declare users directly in your redis.conf, but not both"), "{log}");
}

#[test]
fn acl_file_load_and_save() {
    let dir = tempfile::tempdir().unwrap();
    let acl = dir.path().join("users.acl");
    let conf = dir.path().join("d.conf");
    std::fs::write(&conf, format!("aclfile {}\n", acl.display())).unwrap();
    std::fs::write(
        &acl,
        "user ops on >opspw ~* &* +@all\nuser default on nopass ~* &* +@all\n",
    )
    .unwrap();
    let s = Server::start(Backend::Epoll, &[conf.to_str().unwrap()]);
    let mut admin = Raw::tcp(s.port);
    let mut ops = logged_in(s.port, "ops", "opspw");
    assert_eq!(
        admin.cmd(&["ACL", "SETUSER", "new", "on", ">newpw", "~n:*", "+get"]),
        b"+OK\r\n"
    );
    assert_eq!(admin.cmd(&["ACL", "SAVE"]), b"+OK\r\n");
    let saved = std::fs::read_to_string(&acl).unwrap();
    let new_line = saved.lines().find(|l| l.starts_with("user new ")).unwrap();
    assert!(
        new_line.starts_with("user new on #")
            && new_line.ends_with(" ~n:* resetchannels -@all +get"),
        "{saved}"
    );
    assert_eq!(saved.lines().count(), 3, "{saved}");

    // A bad line: nothing changes, the error names the line.
    std::fs::write(&acl, format!("{saved}user broken on +@nosuch\n")).unwrap();
    let reply = String::from_utf8(admin.cmd(&["ACL", "LOAD"])).unwrap();
    assert!(
        reply.starts_with(&format!("-ERR {}:4: Error in applying operation '+@nosuch'", acl.display()))
            && reply.contains("WARNING: ACL errors detected, no change to the previously active ACL rules was performed"),
        "{reply}"
    );
    assert_eq!(ops.cmd(&["PING"]), b"+PONG\r\n");

    // A good file replaces every user and closes the connections of all but default's.
    std::fs::write(&acl, "user ops on >other ~* +@all\n").unwrap();
    assert_eq!(admin.cmd(&["ACL", "LOAD"]), b"+OK\r\n");
    assert!(ops.closed_within(Duration::from_secs(5)));
    assert_eq!(admin.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(
        admin.cmd(&["ACL", "USERS"]),
        b"*2\r\n$7\r\ndefault\r\n$3\r\nops\r\n"
    );
    logged_in(s.port, "ops", "other");

    // A file that cannot be read.
    std::fs::remove_file(&acl).unwrap();
    let reply = String::from_utf8(admin.cmd(&["ACL", "LOAD"])).unwrap();
    assert_eq!(
        reply,
        format!(
            "-ERR Error loading ACLs, opening file '{}': No such file or directory\r\n",
            acl.display()
        )
    );
}

#[test]
fn monitor_hides_acl_setuser() {
    let s = Server::start(Backend::Epoll, &[]);
    let mut monitor = Raw::tcp(s.port);
    assert_eq!(monitor.cmd(&["MONITOR"]), b"+OK\r\n");
    let mut c = Raw::tcp(s.port);
    c.cmd(&["ACL", "SETUSER", "u", ">secret"]);
    c.cmd(&["ACL", "WHOAMI"]);
    let line = String::from_utf8(monitor.reply()).unwrap();
    assert!(line.contains("\"ACL\" \"WHOAMI\""), "{line}");
}

/// A client connecting to 127.0.0.1 from 127.0.0.2: on the loopback interface, but not the
/// address Redis's protected mode counts as local.
fn from_other_address(port: u16) -> std::net::TcpStream {
    use socket2::{Domain, Socket, Type};
    let sock = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let from: std::net::SocketAddr = "127.0.0.2:0".parse().unwrap();
    sock.bind(&from.into()).expect("bind 127.0.0.2");
    let to: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    sock.connect(&to.into()).expect("connect");
    sock.into()
}

/// What a client from another address gets first: its reply, or "closed".
fn first_reply(port: u16) -> Vec<u8> {
    use std::io::{Read, Write};
    let mut s = from_other_address(port);
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.write_all(b"*1\r\n$4\r\nPING\r\n");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
        if out.ends_with(b"\r\n") && !out.starts_with(b"-DENIED") {
            break;
        }
    }
    out
}

fn protected_mode(backend: Backend) {
    if !backend.available() {
        return;
    }
    let redis = Server::redis();
    let ours = Server::start(backend, &[]);
    let denied = first_reply(redis.port);
    assert!(denied.starts_with(b"-DENIED Redis is running in protected mode"));
    assert_eq!(
        String::from_utf8_lossy(&first_reply(ours.port)),
        String::from_utf8_lossy(&denied),
        "refused with Redis's text, then closed"
    );
    let mut local = Raw::tcp(ours.port);
    assert_eq!(local.cmd(&["PING"]), b"+PONG\r\n");
    assert_eq!(Raw::unix_at(&ours.unix).cmd(&["PING"]), b"+PONG\r\n");
    let rejected = common::info_field(&mut local, "stats", "rejected_connections");
    assert_eq!(rejected.as_deref(), Some("1"));
    // A password for the default user lifts it, as does protected-mode no.
    local.cmd(&["CONFIG", "SET", "requirepass", "pw"]);
    assert_eq!(
        first_reply(ours.port),
        b"-NOAUTH Authentication required.\r\n"
    );
    assert_eq!(local.cmd(&["AUTH", "pw"]), b"+OK\r\n");
    local.cmd(&["CONFIG", "SET", "requirepass", ""]);
    assert!(first_reply(ours.port).starts_with(b"-DENIED"));
    local.cmd(&["CONFIG", "SET", "protected-mode", "no"]);
    assert_eq!(first_reply(ours.port), b"+PONG\r\n");
}

#[test]
fn protected_mode_epoll() {
    protected_mode(Backend::Epoll);
}

#[test]
fn protected_mode_uring() {
    protected_mode(Backend::Uring);
}

/// Which of a user's subscribers ACL SETUSER closes when it takes channels away: those
/// subscribed to a channel (or pattern, compared literally) no longer allowed, as in Redis.
fn revoked_subscribers_closed(port: u16) -> Vec<bool> {
    let mut admin = Raw::tcp(port);
    assert_eq!(
        admin.cmd(&[
            "ACL",
            "SETUSER",
            "sub",
            "on",
            "nopass",
            "+@all",
            "~*",
            "resetchannels",
            "&news.*",
            "&sport"
        ]),
        b"+OK\r\n"
    );
    let subscribe = |cmd: &str, name: &str| {
        let mut c = logged_in(port, "sub", "x");
        let reply = c.cmd(&[cmd, name]);
        assert!(
            reply.starts_with(b"*3\r\n"),
            "{}",
            String::from_utf8_lossy(&reply)
        );
        c
    };
    let mut subs = [
        subscribe("SUBSCRIBE", "news.a"),
        subscribe("SUBSCRIBE", "sport"),
        subscribe("PSUBSCRIBE", "news.*"),
        subscribe("SSUBSCRIBE", "news.b"),
    ];
    assert_eq!(
        admin.cmd(&[
            "ACL",
            "SETUSER",
            "sub",
            "resetchannels",
            "&sport",
            "&news.a"
        ]),
        b"+OK\r\n"
    );
    subs.iter_mut()
        .map(|c| c.closed_within(Duration::from_millis(500)))
        .collect()
}

#[test]
fn revoked_subscribers_are_closed_as_in_redis() {
    let redis = Server::redis();
    let expected = revoked_subscribers_closed(redis.port);
    assert_eq!(expected, vec![false, false, true, true]);
    for backend in [Backend::Epoll, Backend::Uring] {
        if backend.available() {
            let ours = Server::start(backend, &[]);
            assert_eq!(
                revoked_subscribers_closed(ours.port),
                expected,
                "{backend:?}"
            );
        }
    }
}
