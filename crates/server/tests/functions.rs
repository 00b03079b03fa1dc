//! Functions (FUNCTION, FCALL) and busy scripts against redis-server 7.0: the same command
//! streams go to both servers and the replies must be byte-for-byte equal, FUNCTION DUMP
//! payloads restore into the other server, and a script that runs too long gets the same
//! BUSY, KILL and UNKILLABLE answers (docs/scripting.md).

mod common;

use std::time::Duration;

use common::{assert_same, cmds, Backend, Raw, Server};

/// Libraries of one function each, so FUNCTION LIST has one order on both servers (Redis
/// lists the functions of a library in its hash table's order).
const SETTER: &str = "#!lua name=setter\n\
    redis.register_function{function_name='set_it', callback=function(keys, args) \
    return redis.call('set', keys[1], args[1]) end}";
const READER: &str = "#!lua name=reader\n\
    redis.register_function{function_name='get_it', description='reads a key', \
    flags={'no-writes', 'allow-stale'}, callback=function(keys, args) \
    return redis.call('get', keys[1]) end}";
const SHAPES: &str = "#!lua name=shapes\n\
    local function shapes(keys, args)\n\
      if args[1] == '3' then redis.setresp(3) end\n\
      local v = redis.call('hgetall', keys[1])\n\
      return {v, #keys, args[2], {ok = 'fine'}, redis.call('type', keys[1])}\n\
    end\n\
    redis.register_function('shapes', shapes)";
const FAILING: &str = "#!lua name=failing\n\
    redis.register_function('boom', function(keys, args)\n\
      if args[1] == 'call' then return redis.call('nosuch') end\n\
      if args[1] == 'pcall' then return redis.pcall('incr', keys[1]) end\n\
      if args[1] == 'keys' then return KEYS end\n\
      if args[1] == 'write' then return redis.call('set', 'x', 1) end\n\
      error('boom')\n\
    end)";
const READ_ONLY_WRITER: &str = "#!lua name=rowriter\n\
    redis.register_function{function_name='sneaky', flags={'no-writes'}, \
    callback=function(keys) return redis.call('set', keys[1], 1) end}";

/// Replies, errors and management commands, compared with Redis's.
fn functions_as_redis(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    let bad_loads = [
        "#!lua name=bad\nlocal x = string.len('a')",
        "#!lua name=bad\nreturn 1",
        "#!lua name=bad\nredis.register_function()",
        "#!lua name=bad\nredis.register_function('a b', function() end)",
        "#!lua name=bad\nredis.register_function('ab', 1)",
        "#!lua name=bad\nredis.register_function{function_name='x', callback=function() end, flags={'bad'}}",
        "#!lua name=bad\nredis.register_function{function_name='x', callback=function() end, foo=1}",
        "#!lua name=bad\nredis.register_function{callback=function() end}",
        "#!lua name=bad\nredis.register_function{function_name='x'}",
        "#!lua name=bad\nredis.register_function('x', function() end) redis.register_function('x', function() end)",
        "#!lua name=bad\nredis.register_function(",
        "#!lua name=bad\nerror('boom')",
        "#!lua name=bad\nredis.call('set','x','y')",
        "#!lua name=bad\nredis.register_function{function_name='x', callback=function() end, flags='no-writes'}",
        "#!lua name=bad\nredis.register_function{'x'}",
        "#!lua name=bad\nredis.register_function('x')",
        "#!lua name=bad\nredis.register_function('x', function() end, 3)",
        "#!lua name=bad\nredis.setresp(3)",
        "#!lua name=bad\nlocal x = nil + 1",
        "#!lua name=bad\nlocal t = {} t.x.y = 1",
        "#!lua name=bad\nredis.log(1)",
        "#!lua name=bad\nredis.REDIS_VERSION = 1",
        "#!lua name=bad\nKEYS = 1",
        "#!lua name=bad\nwhile true do end",
        "#!lua name=lib-3\n",
        "#!lua name=lib3 foo=bar\n",
        "#!lua\n",
        "#!py name=x\n",
        "no header",
    ];
    let mut stream: Vec<Vec<String>> = bad_loads
        .iter()
        .map(|code| vec!["FUNCTION".into(), "LOAD".into(), code.to_string()])
        .collect();
    for lib in [SETTER, READER, SHAPES, FAILING, READ_ONLY_WRITER] {
        stream.push(vec!["FUNCTION".into(), "LOAD".into(), lib.into()]);
    }
    stream.extend(cmds(&[
        &["FUNCTION", "LOAD", SETTER],
        &["FUNCTION", "LOAD", "REPLACE", SETTER],
        &["FUNCTION", "LOAD", "badopt", SETTER],
        &[
            "FUNCTION",
            "LOAD",
            "#!lua name=clash\nredis.register_function('SET_IT', function() return 1 end)",
        ],
        &["FCALL", "set_it", "1", "k", "v"],
        &["FCALL", "SET_IT", "1", "k", "v2"],
        &["FCALL", "get_it", "1", "k"],
        &["FCALL_RO", "get_it", "1", "k"],
        &["FCALL_RO", "set_it", "1", "k", "v"],
        &["FCALL", "sneaky", "1", "k"],
        &["FCALL", "nope", "0"],
        &["FCALL", "nope", "x"],
        &["FCALL", "get_it", "x"],
        &["FCALL", "get_it", "2", "a"],
        &["FCALL", "get_it", "-1"],
        &["FCALL", "get_it"],
        &["HSET", "h", "f", "v"],
        &["FCALL", "shapes", "1", "h", "2", "x"],
        &["FCALL", "shapes", "1", "h", "3", "x"],
        &["FCALL", "boom", "0", "call"],
        &["FCALL", "boom", "1", "k", "pcall"],
        &["FCALL", "boom", "0", "keys"],
        // A function does not see the KEYS an EVAL before it had (on the same VM).
        &["EVAL", "return #KEYS", "0"],
        &["FCALL", "boom", "0", "keys"],
        &["EVAL", "return KEYS[1]", "1", "k"],
        &["FCALL", "boom", "1", "k", "keys"],
        &["FCALL", "boom", "0", "error"],
        &["FCALL_RO", "boom", "0", "write"],
        // A library may register more functions than mlua keeps references for.
        &["FUNCTION", "LOAD", "#!lua name=many\nfor i = 1, 9000 do redis.register_function('f' .. i, function() return i end) end"],
        &["FCALL", "f8999", "0"],
        &["FUNCTION", "DELETE", "many"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "setter"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "read*", "WITHCODE"],
        &["FUNCTION", "LIST", "WITHCODE", "LIBRARYNAME", "shapes"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "SETTER"],
        &["FUNCTION", "LIST", "LIBRARYNAME"],
        &["FUNCTION", "LIST", "foo"],
        &["FUNCTION", "LIST", "WITHCODE", "WITHCODE"],
        &["FUNCTION", "STATS"],
        &["FUNCTION", "DELETE", "nosuch"],
        &["FUNCTION", "DELETE", "SETTER"],
        &["FUNCTION", "DELETE", "setter"],
        &["FCALL", "set_it", "1", "k", "v"],
        &["FUNCTION", "DELETE"],
        &["FUNCTION", "RESTORE"],
        &["FUNCTION", "LOAD"],
        &["FUNCTION", "DUMP", "x"],
        &["FUNCTION", "STATS", "x"],
        &["FUNCTION", "KILL"],
        &["FUNCTION", "KILL", "x"],
        &["FUNCTION", "FLUSH", "bad"],
        &["FUNCTION", "FLUSH", "sync", "extra"],
        &["FUNCTION", "RESTORE", "garbage"],
        &["FUNCTION", "RESTORE", "garbage", "badpolicy"],
        &["FUNCTION", "HELP"],
        &["FUNCTION", "foo"],
        &["SCRIPT", "FLUSH"],
        &["FCALL", "get_it", "1", "k"],
        &["EVAL", "return redis.call('fcall', 'get_it', 1, 'k')", "0"],
        &["MULTI"],
        &["FUNCTION", "LOAD", SETTER],
        &["FCALL", "set_it", "1", "k", "in-multi"],
        &["EXEC"],
        &["GET", "k"],
        &["HELLO", "3"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "reader"],
        &["FUNCTION", "STATS"],
        &["FCALL", "shapes", "1", "h", "3", "x"],
        &["FUNCTION", "FLUSH"],
        &["FUNCTION", "STATS"],
        &["FUNCTION", "LIST"],
        &["FCALL", "get_it", "1", "k"],
    ]));
    assert_same(&mut theirs, &mut ours, &stream);
}

fn bulk_payload(reply: &[u8]) -> Vec<u8> {
    let header_end = reply
        .windows(2)
        .position(|w| w == b"\r\n")
        .expect("a bulk header");
    assert_eq!(reply[0], b'$', "{}", String::from_utf8_lossy(reply));
    reply[header_end + 2..reply.len() - 2].to_vec()
}

/// FUNCTION DUMP payloads go both ways: Redis restores Damselfly's and the other way round,
/// and the restore policies answer alike.
fn dump_and_restore_across_servers(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    for c in [&mut theirs, &mut ours] {
        c.cmd(&["FUNCTION", "LOAD", SHAPES]);
    }
    // One library: one order, so the payloads are equal byte for byte (LZF included).
    let payload = bulk_payload(&ours.cmd(&["FUNCTION", "DUMP"]));
    assert_eq!(payload, bulk_payload(&theirs.cmd(&["FUNCTION", "DUMP"])));
    for c in [&mut theirs, &mut ours] {
        c.cmd(&["FUNCTION", "LOAD", READER]);
        c.cmd(&["FUNCTION", "LOAD", SETTER]);
    }
    let from_redis = bulk_payload(&theirs.cmd(&["FUNCTION", "DUMP"]));
    let from_ours = bulk_payload(&ours.cmd(&["FUNCTION", "DUMP"]));
    let clash = "#!lua name=other\nredis.register_function('get_it', function() return 1 end)";
    for policy in ["APPEND", "REPLACE", "FLUSH"] {
        for (target, source) in [(&mut theirs, &from_ours), (&mut ours, &from_redis)] {
            let reply = target.cmd(&[&b"FUNCTION"[..], b"RESTORE", &source[..], policy.as_bytes()]);
            let reply = String::from_utf8_lossy(&reply);
            // Which library collides first depends on the payload's order.
            let expected = if policy == "APPEND" {
                reply.starts_with("-ERR Library ") && reply.ends_with(" already exists\r\n")
            } else {
                reply == "+OK\r\n"
            };
            assert!(expected, "{policy}: {reply}");
        }
    }
    let stream = cmds(&[
        &["FUNCTION", "LIST", "LIBRARYNAME", "reader", "WITHCODE"],
        &["FUNCTION", "LIST", "LIBRARYNAME", "shapes", "WITHCODE"],
        &["FCALL", "get_it", "1", "k"],
        &["FUNCTION", "STATS"],
        &["FUNCTION", "DELETE", "reader"],
        &["FUNCTION", "LOAD", clash],
    ]);
    assert_same(&mut theirs, &mut ours, &stream);
    // The restored library collides by function name with `other`.
    let with_reader = bulk_payload(&theirs.cmd(&["FUNCTION", "DUMP"]));
    for c in [&mut theirs, &mut ours] {
        c.cmd(&["FUNCTION", "FLUSH"]);
        c.cmd(&["FUNCTION", "LOAD", READER]);
    }
    let reader_only = bulk_payload(&theirs.cmd(&["FUNCTION", "DUMP"]));
    for c in [&mut theirs, &mut ours] {
        c.cmd(&["FUNCTION", "FLUSH"]);
        c.cmd(&["FUNCTION", "LOAD", clash]);
    }
    for payload in [&reader_only, &with_reader] {
        for policy in ["APPEND", "REPLACE"] {
            let a = theirs.cmd(&[
                &b"FUNCTION"[..],
                b"RESTORE",
                &payload[..],
                policy.as_bytes(),
            ]);
            let b = ours.cmd(&[
                &b"FUNCTION"[..],
                b"RESTORE",
                &payload[..],
                policy.as_bytes(),
            ]);
            assert_eq!(String::from_utf8_lossy(&b), String::from_utf8_lossy(&a));
        }
    }
    // A payload whose checksum is wrong, and one holding a key's DUMP instead.
    let mut corrupt = reader_only.clone();
    let last = corrupt.len() - 1;
    corrupt[last] ^= 1;
    theirs.cmd(&["SET", "plain", "value"]);
    let key_dump = bulk_payload(&theirs.cmd(&["DUMP", "plain"]));
    for payload in [&corrupt, &key_dump] {
        let a = theirs.cmd(&[&b"FUNCTION"[..], b"RESTORE", &payload[..]]);
        let b = ours.cmd(&[&b"FUNCTION"[..], b"RESTORE", &payload[..]]);
        assert_eq!(String::from_utf8_lossy(&b), String::from_utf8_lossy(&a));
    }
}

/// Starts `cmd` on a new connection and returns the thread waiting for its reply.
fn in_background(port: u16, cmd: &[&str]) -> std::thread::JoinHandle<std::io::Result<Vec<u8>>> {
    let cmd: Vec<String> = cmd.iter().map(|s| s.to_string()).collect();
    std::thread::spawn(move || Raw::tcp(port).try_cmd(&cmd))
}

/// A new connection once the server answers BUSY (the script passed the threshold), served
/// by a thread other than the script's: Damselfly's thread running a script serves nothing
/// else until the script ends, so a connection that thread accepted gets no answer yet.
fn busy_client(port: u16) -> Raw {
    for _ in 0..100 {
        let c = Raw::tcp(port);
        c.set_read_timeout(Duration::from_millis(500));
        let mut c = c;
        if c.try_cmd(&["PING"]).is_ok_and(|r| r.starts_with(b"-BUSY")) {
            c.set_read_timeout(Duration::from_secs(30));
            return c;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("the script never became busy");
}

const SPIN: &str = "#!lua name=spin\n\
    redis.register_function('spin', function() while true do end end)";

/// What a client sees around busy scripts; durations left out.
fn busy_replies(port: u16) -> Vec<String> {
    let mut setup = Raw::tcp(port);
    let mut seen = Vec::new();
    let mut note = |r: Vec<u8>| seen.push(String::from_utf8_lossy(&r).into_owned());
    note(setup.cmd(&["CONFIG", "SET", "busy-reply-threshold", "100"]));
    note(setup.cmd(&["FUNCTION", "LOAD", "REPLACE", SPIN]));

    // A script that wrote nothing: SCRIPT KILL stops it; its caller gets the error.
    let run = in_background(
        port,
        &["EVAL", "local i = 0 while true do i = i + 1 end", "0"],
    );
    let mut c = busy_client(port);
    for cmd in [
        &["GET", "x"][..],
        &["FUNCTION", "STATS"],
        &["FUNCTION", "KILL"],
        &["MULTI"],
        &["DISCARD"],
    ] {
        note(c.cmd(cmd));
    }
    note(c.cmd(&["SCRIPT", "KILL"]));
    note(run.join().expect("client").expect("reply"));
    note(c.cmd(&["PING"]));
    note(c.cmd(&["SCRIPT", "KILL"]));

    // A function: FUNCTION KILL, and FUNCTION STATS names it.
    let run = in_background(port, &["FCALL", "spin", "0"]);
    let mut c = busy_client(port);
    note(c.cmd(&["GET", "x"]));
    note(c.cmd(&["SCRIPT", "KILL"]));
    let stats = String::from_utf8_lossy(&c.cmd(&["FUNCTION", "STATS"])).into_owned();
    assert!(
        stats.contains("$4\r\nspin\r\n$7\r\ncommand\r\n*3\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:"),
        "{stats}"
    );
    note(c.cmd(&["FUNCTION", "KILL"]));
    note(run.join().expect("client").expect("reply"));

    // After a write it cannot be killed; SHUTDOWN needs NOSAVE, which stops it.
    let run = in_background(
        port,
        &["EVAL", "redis.call('set', 'x', 1) while true do end", "0"],
    );
    let mut c = busy_client(port);
    note(c.cmd(&["SCRIPT", "KILL"]));
    note(c.cmd(&["FUNCTION", "KILL"]));
    note(c.cmd(&["SHUTDOWN"]));
    c.send(&common::encode(&["SHUTDOWN", "NOSAVE"]));
    assert!(c.closed_within(Duration::from_secs(10)), "SHUTDOWN NOSAVE");
    let _ = run.join();
    seen
}

fn busy_scripts_as_redis(b: Backend) {
    let mut redis = Server::redis();
    let mut s = Server::start_with(b, 2, &[]);
    let theirs = busy_replies(redis.port);
    let ours = busy_replies(s.port);
    assert_eq!(ours, theirs);
    assert!(ours.iter().any(|r| r.starts_with("-UNKILLABLE")));
    // SHUTDOWN NOSAVE stopped both.
    for server in [&mut redis, &mut s] {
        let child = server.child.as_mut().expect("running");
        let stopped = common::wait_timeout(child, Duration::from_secs(10));
        assert!(stopped.is_some_and(|st| st.success()), "{stopped:?}");
    }
}

/// Clients of the other threads get BUSY at once (`busy_client` finds one); a client of the
/// busy script's own thread is answered once the script ends, since that thread is running
/// the script. Which thread accepted each connection is the kernel's choice, so each
/// connected client must get one answer or the other.
fn busy_on_every_thread(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    s.raw()
        .cmd(&["CONFIG", "SET", "busy-reply-threshold", "100"]);
    let mut clients: Vec<Raw> = (0..8).map(|_| s.raw()).collect();
    for c in &mut clients {
        assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    }
    let run = in_background(s.port, &["EVAL", "while true do end", "0"]);
    let mut admin = busy_client(s.port);
    for c in &mut clients {
        c.send(&common::encode(&["PING"]));
    }
    std::thread::sleep(Duration::from_millis(300));
    let busy = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    let mut waiting = Vec::new();
    for (i, c) in clients.iter_mut().enumerate() {
        c.set_read_timeout(Duration::from_millis(200));
        match c.try_reply() {
            Ok(r) => assert_eq!(r, busy, "{}", String::from_utf8_lossy(&r)),
            Err(_) => waiting.push(i),
        }
        c.set_read_timeout(Duration::from_secs(30));
    }
    assert_eq!(admin.cmd(&["SCRIPT", "KILL"]), b"+OK\r\n");
    let killed = String::from_utf8_lossy(&run.join().expect("client").expect("reply")).into_owned();
    assert!(
        killed.starts_with("-ERR Script killed by user with SCRIPT KILL..."),
        "{killed}"
    );
    for i in waiting {
        assert_eq!(clients[i].reply(), b"+PONG\r\n");
    }
    for c in &mut clients {
        assert_eq!(c.cmd(&["PING"]), b"+PONG\r\n");
    }
}

/// A transfer function over accounts on every shard, with MGET readers: every read sees the
/// same total.
fn function_transfers_stay_atomic(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    c.cmd(&[
        "FUNCTION",
        "LOAD",
        "#!lua name=bank\n\
         redis.register_function('transfer', function(keys, args)\n\
           local a = tonumber(redis.call('get', keys[1]))\n\
           local amount = tonumber(args[1])\n\
           if a < amount then return 0 end\n\
           redis.call('decrby', keys[1], amount)\n\
           redis.call('incrby', 'acct:' .. args[2], amount)\n\
           return 1\n\
         end)",
    ]);
    let transfer: common::Transfer = std::sync::Arc::new(|from: &str, to: &str, amount: &str| {
        let to = to.trim_start_matches("acct:");
        vec![["FCALL", "transfer", "1", from, amount, to]
            .map(String::from)
            .to_vec()]
    });
    for i in 0..16 {
        c.cmd(&["SET", &format!("acct:{i}"), "100"]);
    }
    let movers = common::movers_with(s.port, 3, 16, 0, transfer);
    let mut mget: Vec<String> = vec!["MGET".into()];
    mget.extend((0..16).map(|i| format!("acct:{i}")));
    for _ in 0..300 {
        let reply = String::from_utf8(c.cmd(&mget)).expect("utf-8");
        let total: i64 = reply
            .lines()
            .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
            .map(|l| l.parse::<i64>().expect("a balance"))
            .sum();
        assert_eq!(total, 1600, "{reply}");
    }
    assert!(movers.stop() > 50);
}

/// INFO memory counts scripts, functions and the Lua VMs' memory.
fn scripting_memory_in_info(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let field = |c: &mut Raw, name: &str| -> u64 {
        common::info_field(c, "memory", name)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("INFO memory has no {name}"))
    };
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 0);
    assert_eq!(field(&mut c, "used_memory_scripts_eval"), 0);
    c.cmd(&["SCRIPT", "LOAD", "return 1"]);
    c.cmd(&["EVAL", "return 2", "0"]);
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 2);
    assert_eq!(field(&mut c, "used_memory_scripts_eval"), 16);
    assert!(field(&mut c, "used_memory_lua") > 10_000);
    c.cmd(&["FUNCTION", "LOAD", SETTER]);
    assert_eq!(field(&mut c, "number_of_functions"), 1);
    assert_eq!(
        field(&mut c, "used_memory_scripts"),
        16 + SETTER.len() as u64
    );
    c.cmd(&["SCRIPT", "FLUSH"]);
    c.cmd(&["FUNCTION", "FLUSH"]);
    assert_eq!(field(&mut c, "number_of_cached_scripts"), 0);
    assert_eq!(field(&mut c, "used_memory_scripts"), 0);
}

backend_tests!(
    scripting_memory_in_info,
    functions_as_redis,
    dump_and_restore_across_servers,
    busy_scripts_as_redis,
    busy_on_every_thread,
    function_transfers_stay_atomic,
);
