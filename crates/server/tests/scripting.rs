//! Lua scripting against redis-server 7.0: the same EVAL/EVALSHA/SCRIPT streams go to both
//! servers and every reply must be byte-for-byte equal; seeded random scripts cover the
//! reply conversions both ways; and scripts stay atomic across shards, with declared keys
//! and with keys they did not declare (docs/scripting.md).

mod common;

use common::{assert_same, cmds, info_field, Backend, Raw, Server};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Redis's scripting test cases (docs/research/scripting-redis-7.0.md §6) that need no
/// replica, memory limit or library Damselfly lacks.
fn eval_as_redis(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    let script = cmds(&[
        // Replies and conversions.
        &["EVAL", "return 'hello'", "0"],
        &["EVAL", "return 100.5", "0"],
        &["EVAL", "return -3.99", "0"],
        &["EVAL", "return true", "0"],
        &["EVAL", "return false", "0"],
        &["EVAL", "return nil", "0"],
        &["EVAL", "return", "0"],
        &["EVAL", "return {ok='fine'}", "0"],
        &["EVAL", "return {ok='a\\r\\nb'}", "0"],
        &["EVAL", "return {err='ERR this is an error'}", "0"],
        &["EVAL", "return {err='x'}", "0"],
        &["EVAL", "return {err='a\\nb'}", "0"],
        &["EVAL", "return {ok='fine', 1, 2}", "0"],
        &["EVAL", "return {ok=1}", "0"],
        &["EVAL", "return {err=1, ok='then ok'}", "0"],
        &["EVAL", "return {err='ERR first', ok='not this'}", "0"],
        &["EVAL", "return setmetatable({}, {__index = {ok = 'hidden'}})", "0"],
        &["EVAL", "return setmetatable({7}, {__index = {err = 'hidden'}})", "0"],
        &["EVAL", "return {1,2,3,'ciao',{1,2}}", "0"],
        &["EVAL", "return {1,2,nil,3}", "0"],
        &["EVAL", "return {1,false,3}", "0"],
        &["EVAL", "return {a=1}", "0"],
        &["EVAL", "return {[2]=2}", "0"],
        &["EVAL", "return 1, 2", "0"],
        &["EVAL", "return {double=3.5}", "0"],
        // A call from inside a C function's callback (a run on one shard: no yield).
        &[
            "EVAL",
            "local t = {'b', 'c', 'a'} \
             table.sort(t, function(x, y) redis.call('incr', KEYS[1]) return x < y end) \
             return {t[1], t[2], t[3], redis.call('get', KEYS[1]) + 0 > 0}",
            "1",
            "sorts",
        ],
        &["EVAL", "return {big_number='123'}", "0"],
        &["EVAL", "return {map={a=1}}", "0"],
        &["EVAL", "return {set={a=true}}", "0"],
        &["EVAL", "return {verbatim_string={format='txt', string='hi'}}", "0"],
        &["EVAL", "return 9007199254740993", "0"],
        &["EVAL", "return {KEYS[1],KEYS[2],ARGV[1],ARGV[2]}", "2", "a{t}", "b{t}", "c{t}", "d{t}"],
        // EVAL caches; EVALSHA in either case; NOSCRIPT.
        &["SET", "mykey", "myval"],
        &["EVAL", "return redis.call('get',KEYS[1])", "1", "mykey"],
        &["EVALSHA", "fd758d1589d044dd850a6f05d52f2eefd27f033f", "1", "mykey"],
        &["EVALSHA", "FD758D1589D044DD850A6F05D52F2EEFD27F033F", "1", "mykey"],
        &["EVALSHA", "NotValidShaSUM", "0"],
        &["EVALSHA", "ffd632c7d33e571e9f24556ebed26c3479a87130", "0"],
        &["EVALSHA", "abc", "x"],
        // Redis to Lua.
        &["SET", "x", "0"],
        &["EVAL", "local foo = redis.pcall('incr',KEYS[1]) return {type(foo),foo}", "1", "x"],
        &["EVAL", "local foo = redis.pcall('set',KEYS[1],'myval') return {type(foo),foo['ok']}", "1", "mykey"],
        &["EVAL", "local foo = redis.pcall('incr',KEYS[1]) return {type(foo),foo['err']}", "1", "mykey"],
        &["DEL", "mykey"],
        &["EVAL", "local foo = redis.pcall('get',KEYS[1]) return {type(foo),foo == false}", "1", "mykey"],
        &["RPUSH", "l", "a", "b", "c"],
        &["EVAL", "return redis.call('lrange', KEYS[1], 0, -1)", "1", "l"],
        &["EVAL", "return redis.call('mget', 'l', 'x', 'nokey', 'mykey')", "0"],
        &["EVAL", "return redis.call('hgetall', 'nokey')", "0"],
        &["EVAL", "return redis.call('ping')", "0"],
        &["EVAL", "return redis.call('echo', 'e')", "0"],
        &["EVAL", "return redis.call('exists', 'l', 'x', 'nokey')", "0"],
        &["EVAL", "return redis.call('dbsize')", "0"],
        // SELECT inside a script stays inside it.
        &["SELECT", "10"],
        &["SET", "mykey", "original value"],
        &["EVAL", "return redis.pcall('select','9')", "0"],
        &["GET", "mykey"],
        &["EVAL", "redis.call('select','9') redis.call('set', 'in9', '1') return redis.call('get', 'in9')", "0"],
        &["EXISTS", "in9"],
        &["SELECT", "0"],
        // Commands scripts may not run; call errors.
        &["EVAL", "return redis.pcall('blpop','x',0)", "0"],
        &["EVAL", "return redis.pcall('multi')", "0"],
        &["EVAL", "return redis.call('eval', 'return 1', '0')", "0"],
        &["EVAL", "return redis.call()", "0"],
        &["EVAL", "return redis.pcall()", "0"],
        &["EVAL", "redis.call('nosuchcommand')", "0"],
        &["EVAL", "redis.call('get','a','b','c')", "0"],
        &["EVAL", "local x={} return redis.call(\"ping\", x)", "0"],
        &["EVAL", "return redis.pcall('ping', true)", "0"],
        &["SET", "foo", "bar"],
        &["EVAL", "redis.call('lpush',KEYS[1],'val')", "1", "foo"],
        &["EVAL", "return redis.pcall('lpush',KEYS[1],'val')", "1", "foo"],
        &["EVAL", "local x = 1\nlocal y = 2\nreturn redis.call('incr', 'foo')", "0"],
        &["EVAL", "return redis.call('select',99)", "0"],
        &["EVAL", "return redis.call('blmpop', 0, 1, 'nolist', 'LEFT')", "0"],
        // numkeys.
        &["EVAL", "return \"hello\"", "-12"],
        &["EVAL", "return 1", "1"],
        &["EVAL", "return 1", "x"],
        &["EVAL", "return 1", "01"],
        &["EVAL", "return 1"],
        &["EVALSHA", "fd758d1589d044dd850a6f05d52f2eefd27f033f"],
        // EVAL_RO.
        &["SET", "foo", "bar"],
        &["EVAL_RO", "return redis.call('get', KEYS[1]);", "1", "foo"],
        &["EVAL_RO", "redis.call('del', KEYS[1]);", "1", "foo"],
        &["EVAL_RO", "return redis.pcall('del', KEYS[1]);", "1", "foo"],
        &["EVALSHA_RO", "fd758d1589d044dd850a6f05d52f2eefd27f033f", "1", "foo"],
        // SCRIPT.
        &["SCRIPT", "FLUSH"],
        &["EVALSHA", "fd758d1589d044dd850a6f05d52f2eefd27f033f", "1", "mykey"],
        &["EVAL", "return 1+1", "0"],
        &["SCRIPT", "EXISTS", "a27e7e8a43702b7046d4f6a7ccf5b60cef6b9bd9", "a27e7e8a43702b7046d4f6a7ccf5b60cef6b9bda"],
        &["SCRIPT", "LOAD", "return 'loaded'"],
        &["EVALSHA", "b534286061d4b9e4026607613b95c06c06015ae8", "0"],
        &["SCRIPT", "LOAD", "retur n"],
        &["SCRIPT", "FLUSH", "bad"],
        &["SCRIPT", "FLUSH", "async"],
        &["SCRIPT", "FLUSH", "SYNC", "x"],
        &["SCRIPT", "KILL"],
        &["SCRIPT", "DEBUG", "no"],
        &["SCRIPT", "DEBUG", "maybe"],
        &["SCRIPT", "DEBUG"],
        &["SCRIPT", "bad_subcommand"],
        &["SCRIPT", "LOAD"],
        &["SCRIPT"],
        &["SCRIPT", "HELP"],
        // The environment.
        &["EVAL", "return a", "0"],
        &["EVAL", "local x = 1\nreturn nope", "0"],
        &["EVAL", "local ok, e = pcall(function() return nope end) return e", "0"],
        &["EVAL", "a=10", "0"],
        &["EVAL", "_G.x = 1", "0"],
        &["EVAL", "return rawget(_G, 'nope')", "0"],
        &["EVAL", "setmetatable(_G, {})", "0"],
        &["EVAL", "redis.call = function() return 1 end", "0"],
        &["EVAL", "string.foo = 1", "0"],
        &["EVAL", "loadfile('some file')", "0"],
        &["EVAL", "dofile('some file')", "0"],
        &["EVAL", "print('some data')", "0"],
        &["EVAL", "return os.clock()", "0"],
        &["EVAL", "return io", "0"],
        &["EVAL", "return debug", "0"],
        &["EVAL", "return _VERSION", "0"],
        &["EVAL", "return type(unpack)", "0"],
        &["EVAL", "local t = {} t.x = 1 table.insert(t, 5) return {t.x, t[1], #t}", "0"],
        &["EVAL", "return loadstring('return 7')()", "0"],
        &["EVAL", "return loadstring(string.dump(function() return 1 end))", "0"],
        &["EVAL", "local f = loadstring('x = 1') return pcall(f)", "0"],
        &["EVAL", "return {redis.REDIS_VERSION, redis.REDIS_VERSION_NUM}", "0"],
        &["EVAL", "return {redis.LOG_DEBUG, redis.LOG_WARNING, redis.REPL_ALL}", "0"],
        &["EVAL", "return string.format('%d %s %5.2f', 42, 'x', 3.14159)", "0"],
        &["EVAL", "return table.concat({string.byte('AB', 1, 2)}, ',')", "0"],
        &["EVAL", "return math.floor(-3.5) .. ' ' .. math.huge .. ' ' .. math.fmod(7, 3)", "0"],
        &["EVAL", "local co = coroutine.create(function(a) local b = coroutine.yield(a + 1) return b * 2 end) local _, x = coroutine.resume(co, 1) local _, y = coroutine.resume(co, 10) return {x, y}", "0"],
        &["EVAL", "local co = coroutine.wrap(function() return redis.call('get', 'foo') end) return co()", "0"],
        // Numbers as command arguments.
        &["EVAL", "local value = 9007199254740991 redis.call(\"set\",\"foo\",value) return redis.call(\"get\",\"foo\")", "1", "foo"],
        &["EVAL", "redis.call(\"set\",\"key\",\"12039611435714932082\") return redis.call(\"get\",\"key\")", "1", "key"],
        &["EVAL", "redis.call(\"set\",\"n\",0.1) return redis.call(\"get\",\"n\")", "0"],
        // Large and deep replies, and maps with number keys near zero, convert as in Redis.
        &["EVAL", "local t = {} local c = t for i = 1, 999 do local n = {} c[1] = n c = n end return t", "0"],
        &["EVAL", "redis.setresp(3) local t = {} local c = t for i = 1, 400 do local n = {} c.map = {k = n} c = n end return t", "0"],
        &["EVAL", "local t = {} for i = 1, 20000 do t[i] = tostring(i) end return t", "0"],
        &["EVAL", "redis.setresp(3) return {map = {[1e-300] = 1, [2] = 2, x = 'y'}}", "0"],
        &["EVAL", "redis.setresp(3) local m = {} for i = 1, 9000 do m['k' .. i] = i end return {map = m}", "0"],
        &["EVAL", "redis.setresp(3) local m = {} for i = 1, 9000 do m[i * 2] = true end return {set = m}", "0"],
        &["EVAL", "return #redis.call('mset', unpack((function() local t = {} for i = 1, 7990 do t[i] = 'v' .. i end return t end)()))", "0"],
        // Numbers as command arguments are `%.17g`, -0 and numbers near zero included.
        &["EVAL", "redis.call('set', 'n', -0) return redis.call('get', 'n')", "0"],
        &["EVAL", "redis.call('set', 'n', 1e-20) return redis.call('get', 'n')", "0"],
        &["EVAL", "redis.call('set', 'n', -1e-300) return redis.call('get', 'n')", "0"],
        &["EVAL", "redis.call('del', 'l') redis.call('rpush', 'l', 1/3, 1e300, 2^53 + 1, -2.5) return redis.call('lrange', 'l', 0, -1)", "0"],
        &["EVAL", "return redis.pcall('echo', 1, nil, 2)", "0"],
        &["EVAL", "redis.call('set','n',1e20) return redis.call('get','n')", "0"],
        &["EVAL", "redis.call('set','n',-0.5) return redis.call('get','n')", "0"],
        // pcall, error, sha1hex, error_reply, status_reply, log, set_repl.
        &["EVAL", "local status, res = pcall(function() return 1 end); return 'status: ' .. tostring(status) .. ' result: ' .. res", "0"],
        &["EVAL", "local status, res = pcall(function() return foo end); return 'status: ' .. tostring(status) .. ' result: ' .. res", "0"],
        &["EVAL", "return {pcall(redis.call, 'incr', 'foo')}", "0"],
        &["EVAL", "local ok, e = pcall(error, {err='CODE x'}) return e", "0"],
        &["EVAL", "local ok, e = pcall(error) return tostring(e)", "0"],
        &["EVAL", "return {pcall(nil)}", "0"],
        &["EVAL", "return {xpcall(function() error('q') end, function(e) return 'handled ' .. e end)}", "0"],
        &["EVAL", "return redis.sha1hex('')", "0"],
        &["EVAL", "return redis.sha1hex('Pizza & Mandolino')", "0"],
        &["EVAL", "return redis.sha1hex(12)", "0"],
        &["EVAL", "redis.sha1hex()", "0"],
        &["EVAL", "return redis.error_reply(\"MY_ERR_CODE custom msg\")", "0"],
        &["EVAL", "return redis.error_reply(\"\")", "0"],
        &["EVAL", "return redis.error_reply(\"x\")", "0"],
        &["EVAL", "return redis.error_reply(\"-MY_ERR x\")", "0"],
        &["EVAL", "return redis.error_reply(\"ERR\\n\")", "0"],
        &["EVAL", "return redis.status_reply(\"MY_OK_CODE custom msg\")", "0"],
        &["EVAL", "return redis.error_reply(1)", "0"],
        &["EVAL", "return redis.status_reply()", "0"],
        &["EVAL", "redis.log(redis.LOG_WARNING, 'from a script', 1) return 1", "0"],
        &["EVAL", "redis.log(1)", "0"],
        &["EVAL", "redis.log('x', 'y')", "0"],
        &["EVAL", "redis.log(9, 'y')", "0"],
        &["EVAL", "redis.set_repl(redis.REPL_ALL) return redis.replicate_commands()", "0"],
        &["EVAL", "redis.set_repl(7)", "0"],
        &["EVAL", "redis.set_repl()", "0"],
        &["EVAL", "return redis.acl_check_cmd('get', 'x')", "0"],
        &["EVAL", "return redis.acl_check_cmd('nosuch')", "0"],
        &["EVAL", "return redis.breakpoint()", "0"],
        // Runtime errors and where they happened.
        &["EVAL", "error(\"x\")", "0"],
        &["EVAL", "error(\"x\", 0)", "0"],
        &["EVAL", "error(123)", "0"],
        &["EVAL", "error()", "0"],
        &["EVAL", "#!lua\n\nerror(\"boom\")", "0"],
        &["EVAL", "error({err=\"MYERR hi\"})", "0"],
        &["EVAL", "local function f()\n  error('deep')\nend\nf()", "0"],
        &["EVAL", "local function f()\n  return redis.call('incr', 'foo')\nend\nreturn f()", "0"],
        &["EVAL", "return string.rep()", "0"],
        &["EVAL", "retur n 1", "0"],
        &["EVAL", "return 'unfinished", "0"],
        // Shebangs.
        &["EVAL", "#!not-lua\nreturn 1", "0"],
        &["EVAL", "#!lua\nreturn 1", "0"],
        &["EVAL", "#!lua badger=data\nreturn 1", "0"],
        &["EVAL", "#!lua flags=allow-oom,what?\nreturn 1", "0"],
        &["EVAL", "#!lua", "0"],
        &["EVAL", "#!lua name=foo\nreturn 1", "0"],
        &["EVAL", "#!lua flags=no-writes\nredis.call('set','x',1)\nreturn 1", "1", "x"],
        &["EVAL_RO", "#!lua\nreturn 1", "0"],
        &["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"],
        &["EVAL", "#!lua flags=no-writes\nreturn redis.call('get', 'x')", "0"],
        // math.random.
        &["EVAL", "math.randomseed(ARGV[1]); return tostring(math.random())", "0", "10"],
        &["EVAL", "math.randomseed(ARGV[1]); return tostring(math.random())", "0", "20"],
        &["EVAL", "math.randomseed(0); return {math.random(10), math.random(5, 7), tostring(math.random())}", "0"],
        &["EVAL", "return math.random(0)", "0"],
        &["EVAL", "return math.random(3, 1)", "0"],
        &["EVAL", "return math.random(1, 2, 3)", "0"],
        // bit.
        &["EVAL", "return {bit.band(0xff, 0x0f), bit.bor(1, 2, 4), bit.bxor(5, 1), bit.bnot(0), bit.lshift(1, 31), bit.arshift(-256, 4), bit.tohex(255), bit.tohex(-1, -4), bit.tobit(2^32 + 5)}", "0"],
        &["EVAL", "return bit.band('x')", "0"],
        // RESP3 through redis.setresp and the client's protocol.
        &["HSET", "hash", "field", "value"],
        &["ZADD", "z", "1.5", "m"],
        &["HELLO", "3"],
        &["EVAL", "redis.setresp(3); return redis.call('hgetall', KEYS[1])", "1", "hash"],
        &["EVAL", "redis.setresp(2); return redis.call('hgetall', KEYS[1])", "1", "hash"],
        &["EVAL", "redis.setresp(3); return redis.call('zscore', 'z', 'm')", "0"],
        &["EVAL", "redis.setresp(3); local s = redis.call('zscore', 'z', 'm') return {type(s), s['double']}", "0"],
        &["EVAL", "redis.setresp(3); return redis.call('smembers', 'nokey')", "0"],
        &["EVAL", "redis.setresp(3); return {type(redis.call('get', 'nokey'))}", "0"],
        &["EVAL", "return false", "0"],
        &["EVAL", "return true", "0"],
        &["EVAL", "redis.setresp(3); return false", "0"],
        &["EVAL", "redis.setresp(3); return true", "0"],
        &["EVAL", "return {double=3.5}", "0"],
        &["EVAL", "return {double=1/0}", "0"],
        &["EVAL", "return {big_number='12\\r\\n3'}", "0"],
        &["EVAL", "return {map={a=1}}", "0"],
        &["EVAL", "return {set={a=true}}", "0"],
        &["EVAL", "return {verbatim_string={format='markdown', string='hi'}}", "0"],
        &["EVAL", "return nil", "0"],
        &["HELLO", "2"],
        &["EVAL", "redis.setresp(3); return redis.call('hgetall', KEYS[1])", "1", "hash"],
        &["EVAL", "redis.setresp(3); return false", "0"],
        &["EVAL", "redis.setresp(3); return true", "0"],
        &["EVAL", "redis.setresp(4)", "0"],
        &["EVAL", "redis.setresp()", "0"],
        &["EVAL", "redis.setresp('3') return redis.call('zscore', 'z', 'm')", "0"],
        // Inside MULTI/EXEC.
        &["MULTI"],
        &["EVAL", "return redis.call('incr', KEYS[1])", "1", "counter"],
        &["EVAL", "return redis.call('incr', 'counter')", "0"],
        &["EVAL", "error('in exec')", "0"],
        &["EXEC"],
        &["WATCH", "counter"],
        &["EVAL", "return redis.call('incr', 'counter')", "0"],
        &["MULTI"],
        &["EVAL", "return 1", "0"],
        &["EXEC"],
    ]);
    assert_same(&mut theirs, &mut ours, &script);
}

/// A random Lua value expression and nesting depth budget.
fn lua_value(rng: &mut StdRng, depth: u32) -> String {
    let pick = if depth == 0 {
        rng.gen_range(0..8)
    } else {
        rng.gen_range(0..14)
    };
    match pick {
        0 => rng.gen_range(-1000i64..1000).to_string(),
        1 => format!("{:.3}", rng.gen_range(-100.0f64..100.0)),
        2 => format!("'s{}'", rng.gen_range(0..100)),
        3 => "true".into(),
        4 => "false".into(),
        5 => "nil".into(),
        6 => "''".into(),
        7 => format!("{}", rng.gen_range(-1e15f64..1e15)),
        8 => format!("{{ok='st{}'}}", rng.gen_range(0..9)),
        9 => format!("{{err='E{} m'}}", rng.gen_range(0..9)),
        10 => format!("{{double={}}}", rng.gen_range(-5.0f64..5.0)),
        11 => format!("{{map={{k={}}}}}", lua_value(rng, depth - 1)),
        12 => "{set={m=true}}".into(),
        _ => {
            let n = rng.gen_range(0..5);
            let items: Vec<String> = (0..n).map(|_| lua_value(rng, depth - 1)).collect();
            format!("{{{}}}", items.join(", "))
        }
    }
}

/// A random command a script calls, on keys of every shard.
fn redis_call(rng: &mut StdRng) -> String {
    let k = format!("'k{}'", rng.gen_range(0..12));
    let v = rng.gen_range(0..50);
    let f = if rng.gen_bool(0.3) { "pcall" } else { "call" };
    let cmd = match rng.gen_range(0..12) {
        0 => format!("'set', {k}, {v}"),
        1 => format!("'get', {k}"),
        2 => format!("'incr', {k}"),
        3 => format!("'rpush', {k}, {v}"),
        4 => format!("'lrange', {k}, 0, -1"),
        5 => format!("'hset', {k}, 'f', {v}"),
        6 => format!("'hgetall', {k}"),
        7 => format!("'zadd', {k}, {v}, 'm'"),
        8 => format!("'zscore', {k}, 'm'"),
        9 => format!("'del', {k}"),
        10 => format!("'type', {k}"),
        _ => format!("'exists', {k}, 'k1', 'k2'"),
    };
    format!("redis.{f}({cmd})")
}

/// Seeded random scripts: return values of every shape, and command replies converted to Lua
/// and back, in RESP2 and RESP3 on both sides, over keys of every shard (so most runs are
/// retried once with every shard locked: the keys are not declared).
fn seeded_scripts_as_redis(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    let mut rng = StdRng::seed_from_u64(13);
    let mut script = Vec::new();
    for i in 0..600 {
        if i % 150 == 0 {
            let proto = if i % 300 == 0 { "2" } else { "3" };
            script.push(vec!["HELLO".to_string(), proto.to_string()]);
        }
        let mut body = String::new();
        if rng.gen_bool(0.4) {
            body.push_str("redis.setresp(3) ");
        }
        let calls = rng.gen_range(0..4);
        for c in 0..calls {
            body.push_str(&format!("local r{c} = {} ", redis_call(&mut rng)));
        }
        let ret = if calls > 0 && rng.gen_bool(0.6) {
            format!("r{}", rng.gen_range(0..calls))
        } else {
            lua_value(&mut rng, 3)
        };
        body.push_str(&format!("return {ret}"));
        script.push(vec!["EVAL".to_string(), body, "0".to_string()]);
    }
    assert_same(&mut theirs, &mut ours, &script);
}

/// Money moves between accounts on every shard by a Lua transfer script while readers MGET
/// all accounts: every read sees the same total. `declared` passes the two accounts as KEYS;
/// otherwise the script declares the source account and builds the destination's name from
/// ARGV, so its runs lock every shard.
fn transfers_stay_atomic(b: Backend, declared: bool) {
    const ACCOUNTS: usize = 16;
    const START: i64 = 100;
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let names: Vec<String> = (0..ACCOUNTS).map(|i| format!("acct:{i}")).collect();
    for n in &names {
        c.cmd(&["SET", n.as_str(), &START.to_string()]);
    }
    let transfer = if declared {
        "local a = tonumber(redis.call('get', KEYS[1])) local amount = tonumber(ARGV[1]) \
         if a < amount then return 0 end \
         redis.call('decrby', KEYS[1], amount) redis.call('incrby', KEYS[2], amount) return 1"
    } else {
        "local from, to = KEYS[1], 'acct:' .. ARGV[2] \
         local a = tonumber(redis.call('get', from)) local amount = tonumber(ARGV[1]) \
         if a < amount then return 0 end \
         redis.call('decrby', from, amount) redis.call('incrby', to, amount) return 1"
    };
    let sha = String::from_utf8(c.cmd(&["SCRIPT", "LOAD", transfer])).expect("utf-8");
    let sha = sha
        .trim_start_matches(|ch| ch == '$' || char::is_ascii_digit(&ch))
        .trim()
        .to_string();
    let transfer: common::Transfer =
        std::sync::Arc::new(move |from: &str, to: &str, amount: &str| {
            let call = if declared {
                vec!["EVALSHA", &sha, "2", from, to, amount]
            } else {
                vec![
                    "EVALSHA",
                    &sha,
                    "1",
                    from,
                    amount,
                    to.trim_start_matches("acct:"),
                ]
            };
            vec![call.into_iter().map(String::from).collect()]
        });
    let movers = common::movers_with(s.port, 3, ACCOUNTS, 0, transfer);
    let mut mget: Vec<&str> = vec!["MGET"];
    mget.extend(names.iter().map(String::as_str));
    for _ in 0..400 {
        let reply = String::from_utf8(c.cmd(&mget)).expect("utf-8");
        let total: i64 = reply
            .lines()
            .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
            .map(|l| l.parse::<i64>().expect("a balance"))
            .sum();
        assert_eq!(total, START * ACCOUNTS as i64, "{reply}");
    }
    let moved = movers.stop();
    assert!(moved > 50, "only {moved} transfers ran");
    // A restart happens only when a script that stayed on its keys' shards starts to roam,
    // which declared keys never do. The undeclared script restarts at most once per mover:
    // it may look confined until its first run that reaches another shard.
    let restarted = restarts(&mut c);
    if declared {
        assert_eq!(restarted, 0);
    } else {
        assert!(restarted <= 3, "{restarted} restarts");
    }
}

fn restarts(c: &mut Raw) -> u64 {
    info_field(c, "stats", "script_shard_restarts")
        .and_then(|v| v.parse().ok())
        .expect("script_shard_restarts")
}

/// A key on the other shard from `{a}` (with 2 threads).
fn key_off_a() -> String {
    let home = damselfly_storage::shard_for_key(b"{a}", 2);
    (0..100)
        .map(|i| format!("{{b{i}}}"))
        .find(|k| damselfly_storage::shard_for_key(k.as_bytes(), 2) != home)
        .expect("a key on the other shard")
}

fn transfers_with_declared_keys(b: Backend) {
    transfers_stay_atomic(b, true);
}

fn transfers_with_undeclared_keys(b: Backend) {
    transfers_stay_atomic(b, false);
}

/// The rule for keys a script does not declare (docs/scripting.md): a first run locks every
/// shard; a script that then stayed on its keys' shards locks only those, and when a later
/// run reaches another shard it restarts with every shard locked if it has not written,
/// or has that call fail if it has. Either way its next runs lock every shard.
fn undeclared_keys_rule(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let other = key_off_a();
    c.cmd(&["SET", "{a}:2", "near"]);
    c.cmd(&["SET", other.as_str(), "far"]);
    let read = "return redis.call('get', ARGV[1])";
    assert_eq!(
        c.cmd(&["EVAL", read, "1", "{a}", "{a}:2"]),
        b"$4\r\nnear\r\n"
    );
    assert_eq!(c.cmd(&["EVAL", read, "1", "{a}", &other]), b"$3\r\nfar\r\n");
    assert_eq!(restarts(&mut c), 1);
    assert_eq!(c.cmd(&["EVAL", read, "1", "{a}", &other]), b"$3\r\nfar\r\n");
    assert_eq!(restarts(&mut c), 1);

    // A run that reaches another shard after writing is taken back and run again with every
    // shard locked: the INCR happens once.
    let count = "local n = redis.call('incr', KEYS[1]) redis.call('set', ARGV[1], n) return n";
    assert_eq!(c.cmd(&["EVAL", count, "1", "{a}", "{a}:2"]), b":1\r\n");
    assert_eq!(restarts(&mut c), 1);
    assert_eq!(c.cmd(&["EVAL", count, "1", "{a}", &other]), b":2\r\n");
    assert_eq!(restarts(&mut c), 2);
    assert_eq!(
        c.cmd(&["MGET", "{a}", &other]),
        b"*2\r\n$1\r\n2\r\n$1\r\n2\r\n"
    );
    assert_eq!(c.cmd(&["EVAL", count, "1", "{a}", &other]), b":3\r\n");
    assert_eq!(
        restarts(&mut c),
        2,
        "it roams, so it locks every shard from now on"
    );

    // A script that declares no keys runs on the connection's shard first: this one reaches
    // both shards, so it restarts once.
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('set', '{a}', 4) return redis.call('set', ARGV[1], 4)",
            "0",
            &other
        ]),
        b"+OK\r\n"
    );
    assert_eq!(restarts(&mut c), 3);
    // Once a script has run within its declared keys, its runs lock only those keys; a call
    // on any other key, even on a shard where it holds keys, takes the run back and runs it
    // again with every shard locked: the INCRs happen once.
    let both = "local n = redis.call('incr', KEYS[1]) redis.call('incr', KEYS[2]) \
                if ARGV[1] then redis.call('set', ARGV[1], n) end return n";
    assert_eq!(c.cmd(&["EVAL", both, "2", "{a}", &other]), b":5\r\n");
    assert_eq!(c.cmd(&["EVAL", both, "2", "{a}", &other]), b":6\r\n");
    assert_eq!(restarts(&mut c), 3);
    assert_eq!(
        c.cmd(&["EVAL", both, "2", "{a}", &other, "{a}:3"]),
        b":7\r\n"
    );
    assert_eq!(restarts(&mut c), 4);
    assert_eq!(
        c.cmd(&["MGET", "{a}", &other, "{a}:3"]),
        b"*3\r\n$1\r\n7\r\n$1\r\n7\r\n$1\r\n7\r\n"
    );
    // A script's pcall cannot swallow the restart: a run confined to one shard executes its
    // calls from inside the script, and one on another shard's key stops the run past any
    // pcall; it runs again with every shard locked and each INCR happens once.
    let guarded = "local n = redis.call('incr', KEYS[1]) \
                   local ok = pcall(redis.call, 'incr', ARGV[1]) \
                   return {n, ok and 1 or 0}";
    assert_eq!(
        c.cmd(&["EVAL", guarded, "1", "{a}:p", "{a}:q"]),
        b"*2\r\n:1\r\n:1\r\n"
    );
    assert_eq!(restarts(&mut c), 4);
    let far = format!("{other}:q");
    assert_eq!(
        c.cmd(&["EVAL", guarded, "1", "{a}:p", &far]),
        b"*2\r\n:2\r\n:1\r\n"
    );
    assert_eq!(restarts(&mut c), 5);
    assert_eq!(
        c.cmd(&["MGET", "{a}:p", "{a}:q", &far]),
        b"*3\r\n$1\r\n2\r\n$1\r\n1\r\n$1\r\n1\r\n"
    );
    // Under `script-shard-locking all` every run locks every shard.
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "script-shard-locking", "all"]),
        b"+OK\r\n"
    );
    let fresh = "redis.call('set', KEYS[1], 5) return redis.call('set', ARGV[1], 5)";
    assert_eq!(c.cmd(&["EVAL", fresh, "1", "{a}", "{a}:2"]), b"+OK\r\n");
    assert_eq!(c.cmd(&["EVAL", fresh, "1", "{a}", &other]), b"+OK\r\n");
    assert_eq!(restarts(&mut c), 5);

    // `strict`: a script may name only the keys it declared, whatever shard they are on.
    assert_eq!(
        c.cmd(&["CONFIG", "SET", "script-shard-locking", "strict"]),
        b"+OK\r\n"
    );
    let refused = "-ERR Script attempted to access a key it did not declare \
                   (script-shard-locking strict) script: ";
    for key in ["{a}:2", other.as_str()] {
        let reply = String::from_utf8(c.cmd(&["EVAL", read, "1", "{a}", key])).expect("utf-8");
        assert!(reply.starts_with(refused), "{reply}");
    }
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "return redis.call('get', KEYS[2])",
            "2",
            "{a}",
            &other
        ]),
        b"$1\r\n5\r\n"
    );
    let caught = "return redis.pcall('get', ARGV[1])['err']";
    let reply = String::from_utf8(c.cmd(&["EVAL", caught, "1", "{a}", "{a}:2"])).expect("utf-8");
    assert!(reply.contains("did not declare"), "{reply}");
}

/// Pipelined rounds mixing scripts and plain commands over keys of both shards, each round
/// sent in one write to redis-server and to Damselfly (2 threads): every reply is the same.
/// A script whose keys are on the other thread's shard travels in that shard's batch; a new
/// script that also reaches the other shard through a key it did not declare is handed back
/// from there and runs again the general way, and nothing after it in the round may run
/// before it (each command appends its number to a log the others read). Scripts whose
/// source names only declared keys do not hold the round up; one that changes `KEYS` (or a
/// function its `keys`) is not read as one of them.
fn pipelined_scripts_keep_order(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    let tags = ["{a}".to_string(), key_off_a()];
    let stay = "redis.call('append', KEYS[1], ARGV[1]) return redis.call('get', KEYS[1])";
    let library = "#!lua name=order
        redis.register_function('stay', function(keys, args)
          redis.call('append', keys[1], args[1]) return redis.call('get', keys[1]) end)
        redis.register_function('roam', function(keys, args)
          redis.call('append', keys[1], args[1]) keys[1] = args[2]
          return redis.call('append', keys[1], args[1]) end)";
    for c in [&mut theirs, &mut ours] {
        assert_eq!(c.cmd(&["FUNCTION", "LOAD", library]), b"$5\r\norder\r\n");
    }
    let mut rng = StdRng::seed_from_u64(29);
    let mut differences = Vec::new();
    for round in 0..80 {
        let mut script: Vec<Vec<String>> = Vec::new();
        for i in 0..rng.gen_range(1..40) {
            let n = format!("{round}.{i};");
            let here = format!("{}:log", tags[rng.gen_range(0..2)]);
            let there = format!("{}:log", tags[rng.gen_range(0..2)]);
            let roams = format!(
                "redis.call('append', KEYS[1], ARGV[1]) \
                 return redis.call('append', ARGV[2], ARGV[1]) -- {round}.{i}"
            );
            // Its calls name `KEYS[1]` only, after changing it: read from its source as
            // staying on its declared key, it would be overtaken.
            let roams_by_keys = format!(
                "redis.call('append', KEYS[1], ARGV[1]) KEYS[1] = ARGV[2] \
                 return redis.call('append', KEYS[1], ARGV[1]) -- {round}.{i}"
            );
            let words: Vec<&str> = match rng.gen_range(0..10) {
                0 => vec!["APPEND", &here, &n],
                1 => vec!["GET", &there],
                2 => vec!["EVAL", stay, "1", &here, &n],
                3 => vec!["EVAL", &roams, "1", &here, &n, &there],
                4 => vec!["EVAL", &roams_by_keys, "1", &here, &n, &there],
                5 => vec![
                    "EVAL_RO",
                    "return redis.call('strlen', KEYS[1])",
                    "1",
                    &there,
                ],
                6 => vec!["EVAL", "return redis.call('incr', KEYS[1])", "1", &here],
                8 => vec!["FCALL", "stay", "1", &here, &n],
                9 => vec!["FCALL", "roam", "1", &here, &n, &there],
                _ => vec!["PING"],
            };
            script.push(words.into_iter().map(String::from).collect());
        }
        let wire: Vec<u8> = script.iter().flat_map(|c| common::encode(c)).collect();
        theirs.send(&wire);
        ours.send(&wire);
        for cmd in &script {
            let expected = theirs.reply();
            let got = ours
                .try_reply()
                .unwrap_or_else(|e| panic!("round {round}, {cmd:?}: {e}"));
            if expected != got {
                differences.push(format!(
                    "round {round}: {cmd:?}\n  ours:  {:?}\n  redis: {:?}",
                    String::from_utf8_lossy(&got),
                    String::from_utf8_lossy(&expected)
                ));
            }
        }
    }
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    assert!(restarts(&mut ours) > 0, "no run was handed back");
}

/// Pipelines of scripts that push onto two lists, one on each shard (so each run is
/// confined to one shard and travels in that shard's batch when it is another thread's),
/// while another client moves elements between the lists with LMOVE, a transaction that
/// copies both lists out and writes them back in a later hop: a run slipping in between
/// would have its push overwritten. Every push must still be there at the end.
fn batched_runs_wait_behind_transactions(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let lists = ["{a}:list".to_string(), format!("{}:list", key_off_a())];
    for l in &lists {
        for i in 0..10 {
            c.cmd(&["RPUSH", l.as_str(), &format!("seed{i}")]);
        }
    }
    let push = "return redis.call('rpush', KEYS[1], ARGV[1])";
    let sha = String::from_utf8(c.cmd(&["SCRIPT", "LOAD", push])).expect("utf-8");
    let sha = sha.lines().nth(1).expect("a SHA").to_string();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|w| {
            let (stop, sha, lists, port) = (stop.clone(), sha.clone(), lists.clone(), s.port);
            std::thread::spawn(move || {
                let mut c = Raw::tcp(port);
                let mut rng = StdRng::seed_from_u64(w);
                let mut pushed = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut wire = Vec::new();
                    for i in 0..16 {
                        let list = &lists[rng.gen_range(0..2)];
                        let item = format!("w{w}:{pushed}:{i}");
                        wire.extend(common::encode(&["EVALSHA", &sha, "1", list, &item]));
                    }
                    c.send(&wire);
                    for _ in 0..16 {
                        let r = c.reply();
                        assert!(r.first() == Some(&b':'), "{r:?}");
                    }
                    pushed += 16;
                }
                pushed
            })
        })
        .collect();
    for i in 0..400 {
        let (from, to) = if i % 2 == 0 {
            (&lists[0], &lists[1])
        } else {
            (&lists[1], &lists[0])
        };
        let r = c.cmd(&["LMOVE", from.as_str(), to.as_str(), "LEFT", "RIGHT"]);
        assert!(r.first() == Some(&b'$'), "{r:?}");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let pushed: u64 = writers.into_iter().map(|h| h.join().expect("writer")).sum();
    let len = |c: &mut Raw, l: &str| -> u64 {
        let r = String::from_utf8(c.cmd(&["LLEN", l])).expect("utf-8");
        r.trim_start_matches(':').trim().parse().expect("a length")
    };
    let total = len(&mut c, &lists[0]) + len(&mut c, &lists[1]);
    assert!(pushed > 100, "only {pushed} pushes");
    assert_eq!(total, 20 + pushed, "pushes were lost");
    assert_eq!(restarts(&mut c), 0, "runs on one shard never restart");
}

/// A run holding only its declared keys that restarts (it reached an undeclared key) takes
/// back its own writes and nothing else: other clients' writes to other keys of the same
/// shards, plain or from other runs, made while the run was under way, stay; and its own
/// writes are taken back whatever ran on its shards in between (its INCRs happen once).
fn restarts_take_back_only_their_own_writes(b: Backend) {
    use std::time::{Duration, Instant};
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let other = key_off_a();
    let roamer = "redis.call('incr', KEYS[1]) redis.call('incr', KEYS[2]) \
                  if ARGV[1] == 'roam' then \
                    local i = 0 while i < tonumber(ARGV[3]) do i = i + 1 end \
                    redis.call('get', ARGV[2]) \
                  end return 1";
    let stayer = "redis.call('incr', KEYS[1]) redis.call('incr', KEYS[2]) return 1";
    // A first run stays on its keys, so later ones lock only their keys.
    for script in [roamer, stayer] {
        let keys = ["{a}:warm".to_string(), format!("{other}:warm")];
        assert_eq!(
            c.cmd(&["EVAL", script, "2", &keys[0], &keys[1], "stay"]),
            b":1\r\n"
        );
    }
    let mut spin = 1_000_000u64;
    for round in 1.. {
        // Connections are dealt over both threads: those on the thread the run does not
        // spin on have their command on that thread's shard run while the run spins. One
        // command per connection, so its reply does not wait behind one for the other shard.
        let keys = |i: usize| {
            [
                format!("{{a}}:by{i}:{round}"),
                format!("{other}:by{i}:{round}"),
            ]
        };
        let commands: Vec<Vec<u8>> = (0..4)
            .flat_map(|i| {
                let [near, far] = keys(i);
                let counted = common::encode(&[
                    "EVAL",
                    stayer,
                    "2",
                    &format!("{near}:n"),
                    &format!("{far}:n"),
                ]);
                [
                    common::encode(&["SET", &near, "v"]),
                    common::encode(&["SET", &far, "v"]),
                    counted,
                ]
            })
            .collect();
        let bystanders: Vec<Raw> = commands.iter().map(|_| s.raw()).collect();
        let mut run = s.raw();
        run.send(&common::encode(&[
            "EVAL",
            roamer,
            "2",
            "{a}:n",
            &format!("{other}:n"),
            "roam",
            "{a}:undeclared",
            &spin.to_string(),
        ]));
        std::thread::sleep(Duration::from_millis(10));
        let writers: Vec<_> = bystanders
            .into_iter()
            .zip(commands)
            .map(|(mut o, command)| {
                std::thread::spawn(move || {
                    o.send(&command);
                    let reply = o.reply();
                    assert!(reply == b"+OK\r\n" || reply == b":1\r\n", "{reply:?}");
                    Instant::now()
                })
            })
            .collect();
        assert_eq!(run.reply(), b":1\r\n");
        let run_ended = Instant::now();
        let done: Vec<Instant> = writers
            .into_iter()
            .map(|w| w.join().expect("writer"))
            .collect();
        let during_run = done.iter().filter(|&&t| t < run_ended).count();
        let n = round.to_string();
        assert_eq!(
            c.cmd(&["MGET", "{a}:n", &format!("{other}:n")]),
            common::encode(&[n.as_str(), n.as_str()]),
            "the run's INCRs happened once each ({during_run} of 12 commands done while it ran)"
        );
        for i in 0..4 {
            for k in keys(i) {
                let kept = c.cmd(&["MGET", &k, &format!("{k}:n")]);
                assert_eq!(
                    kept, b"*2\r\n$1\r\nv\r\n$1\r\n1\r\n",
                    "{k} lost a write ({during_run} of 12 commands done while the run was under way)"
                );
            }
        }
        if during_run > 0 {
            break;
        }
        // Well under the 5 s after which other clients get -BUSY, on a loaded machine too.
        assert!(spin < 16_000_000, "nothing ran while the run was under way");
        spin *= 4;
    }
}

/// The keyspace events of a run that holds only its declared keys (and so may be taken back,
/// its undo logs set aside between its hops with the events they hold) go when it ends.
fn events_of_runs_that_could_restart_go_when_they_end(b: Backend) {
    let s = Server::start_with(b, 2, &[]);
    let mut c = s.raw();
    let other = key_off_a();
    c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "E$"]);
    let mut sub = s.raw();
    sub.cmd(&["SUBSCRIBE", "__keyevent@0__:incrby"]);
    let both = "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])";
    // The first run locks every shard; the later ones only their keys, keeping undo logs.
    for run in 1..=3 {
        let n = format!(":{run}\r\n");
        assert_eq!(c.cmd(&["EVAL", both, "2", "{a}", &other]), n.as_bytes());
        let mut got: Vec<Vec<u8>> = (0..2).map(|_| sub.reply()).collect();
        got.sort();
        let event = |k: &str| common::encode(&["message", "__keyevent@0__:incrby", k]);
        let mut want = vec![event("{a}"), event(&other)];
        want.sort();
        assert_eq!(got, want, "run {run}");
    }
}

backend_tests!(
    eval_as_redis,
    events_of_runs_that_could_restart_go_when_they_end,
    restarts_take_back_only_their_own_writes,
    batched_runs_wait_behind_transactions,
    pipelined_scripts_keep_order,
    seeded_scripts_as_redis,
    transfers_with_declared_keys,
    transfers_with_undeclared_keys,
    undeclared_keys_rule,
);
