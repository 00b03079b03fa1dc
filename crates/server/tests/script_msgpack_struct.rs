//! Redis's `cmsgpack` and `struct` Lua libraries against redis-server 7.0: the same EVAL and
//! FCALL commands go to both servers and every reply, error replies included, must be
//! byte-for-byte equal. Scripts hex-dump what they pack so the replies stay readable.

mod common;

use common::{assert_same, Backend, Server};

/// `hex(s)` and `str(...)` (every value with `tostring`, joined by spaces) for the scripts.
const HELPERS: &str = "local function hex(s) return (string.gsub(s, '.', function(c) \
    return string.format('%02x', string.byte(c)) end)) end \
    local function str(...) local t = {} for i = 1, select('#', ...) do \
    t[i] = tostring((select(i, ...))) end return table.concat(t, ' ') end ";

const CMSGPACK_SCRIPTS: &[&str] = &[
    // Redis's own cases.
    "return hex(cmsgpack.pack(0.1))",
    "return hex(cmsgpack.pack(-1099511627776))",
    "local a = {x = nil, y = 5} local b = {x = a} a['x'] = b \
     local re = cmsgpack.unpack(cmsgpack.pack(a)) \
     return {hex(cmsgpack.pack(a)), re.x.x.x.x.x.x.x.x.y == re.y, re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil}",
    "local t = {} for i = 1, 100000 do t[i] = i end local m = {} \
     for i = 1, 100000 do m[tostring(i)] = i end \
     local v = {s = string.rep('x', 100000), a = t, m = m, d = 0.1, i = -3147483648} \
     local d = cmsgpack.unpack(cmsgpack.pack(v)) \
     return {#d.s, #d.a, d.a[100000], d.m['77777'], tostring(d.d), d.i}",
    // Integers in their smallest form, floats as float 32 when exact.
    "return hex(cmsgpack.pack(0, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296, 2^53))",
    "return hex(cmsgpack.pack(-1, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649, -2^63))",
    "return hex(cmsgpack.pack(3.0, -0.0, 1.5, 1e20, 1e-300, 2^63, math.huge, -math.huge, 0/0))",
    // Strings and tables of every size class.
    "return hex(cmsgpack.pack('', 'hello', string.rep('x', 31)))",
    "local h = {} for _, n in ipairs({32, 255, 256, 65535, 65536}) do \
     h[#h + 1] = hex(cmsgpack.pack(string.rep('x', n)):sub(1, 5)) end return h",
    "return hex(cmsgpack.pack({}, {1, 2, 3}, {a = 1}, {1, 2, nil, 4}, {[2] = 1}, {[1.5] = 1}, {n = 1, [1] = 2}))",
    "local h = {} for _, n in ipairs({15, 16, 65535, 65536}) do local t = {} \
     for i = 1, n do t[i] = 0 end h[#h + 1] = hex(cmsgpack.pack(t):sub(1, 5)) end return h",
    "local h = {} for _, n in ipairs({15, 16, 65535, 65536}) do local t = {} \
     for i = 1, n do t[-i] = 0 end h[#h + 1] = hex(cmsgpack.pack(t):sub(1, 5)) end return h",
    "return hex(cmsgpack.pack({a = 1, b = 2, c = 3, d = 4}, true, false, nil, string.len))",
    "local a = {} a[1] = a return hex(cmsgpack.pack(a))",
    // Unpacking.
    "return {cmsgpack.unpack(cmsgpack.pack(1, 'two', {3, {4}}, true, -5))}",
    "return str(cmsgpack.unpack(string.char(0xcf, 255, 255, 255, 255, 255, 255, 255, 255, 0xca, 0x3f, 0xc0, 0, 0, 0xd1, 255, 1)))",
    "return str(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 1))",
    "return {cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 5)}",
    "return str(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 2))",
    "return str(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 0, 1))",
    "return str(cmsgpack._NAME, cmsgpack._VERSION, cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION)",
    "return select('#', cmsgpack.unpack(string.rep(string.char(1), 7999)))",
    // Errors.
    "return cmsgpack.unpack(string.char(0xc4, 1, 0))",
    "return cmsgpack.unpack(string.char(0xcd, 1))",
    "return cmsgpack.unpack(string.char(0x81, 0xc0, 1))",
    "return cmsgpack.pack()",
    "local p = cmsgpack.pack return p()",
    "return {pcall(cmsgpack.unpack, string.char(0xc1))}",
    "return cmsgpack.unpack_one('abc', -1)",
    "return cmsgpack.unpack_limit('abc', 1, 4)",
    "return cmsgpack.unpack_limit('abc')",
    "return cmsgpack.unpack({})",
    "return select('#', cmsgpack.unpack(string.rep(string.char(1), 8000)))",
    "cmsgpack.pack = function() return 1 end",
];

const STRUCT_SCRIPTS: &[&str] = &[
    "return hex(struct.pack('bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5))",
    "return hex(struct.pack('>bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5))",
    "return hex(struct.pack('>i3<i3I16i0', -3, -3, -1, 9))",
    "return hex(struct.pack('>LLlBb', 1e20, 0/0, -1e30, -1, 300))",
    "return hex(struct.pack('fd>fd', 0.1, 0.1, 0.1, 0.1))",
    "return hex(struct.pack('sc3c0xc', 'hi', 'hello', 'whole', 'abc'))",
    "return hex(struct.pack('!bi!2bd!4bhbib', 1, 2, 3, 4, 5, 6, 7, 8, 9))",
    "return {struct.unpack('>bBhHlLTiI', struct.pack('>bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5))}",
    "return str(struct.unpack('<fd', struct.pack('<fd', 0.1, 0.1)))",
    "return str(struct.unpack('>i9', string.rep(string.char(0), 8) .. string.char(0x80)))",
    "return {struct.unpack('bc0s', string.char(3) .. 'abcde\\0')}",
    "return {struct.unpack('!4bi', 'abcdefgh', 1)}",
    "return {struct.unpack('', 'abc', -1)}",
    "return {struct.size('bhlTifdxc5'), struct.size('!bhlTifdxc5'), struct.size('q')}",
    "return select('#', struct.unpack(string.rep('b', 7997), string.rep('a', 8000)))",
    // Errors, the security fixes among them.
    "return struct.pack('q')",
    "return struct.pack('b', 'x')",
    "return struct.pack('bb', 1)",
    "return struct.pack('c5', 'ab')",
    "return struct.pack('i33', 1)",
    "return struct.pack('i2147483648', 1)",
    "return struct.pack('!3b', 1)",
    "return struct.unpack('c2147483647', 'abc')",
    "return struct.unpack('b', 'abc', -1)",
    "return struct.unpack('', 'abc', 0)",
    "return struct.unpack('c0', 'abc')",
    "return struct.unpack('s', 'abc')",
    "return struct.size('s')",
    "return struct:pack('b')",
    "return {pcall(struct.pack, 'q')}",
    "return select('#', struct.unpack(string.rep('b', 7998), string.rep('a', 8000)))",
    "struct.pack = function() return 1 end",
];

/// A library whose functions use both libraries, and one that uses them while it loads
/// (its code sees only the load API, as in Redis 7.0).
const PACKER: &str = "#!lua name=packer\n\
    redis.register_function('pack_them', function(keys, args) \
      return {struct.pack('>I2', #args), cmsgpack.unpack(cmsgpack.pack(args))} end)\n\
    redis.register_function('bad_pack', function() return struct.pack('q') end)";
const LOAD_TIME: &str = "#!lua name=loadtime\nlocal x = cmsgpack.pack(1)";

fn libraries_as_redis(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    let mut script: Vec<Vec<String>> = CMSGPACK_SCRIPTS
        .iter()
        .chain(STRUCT_SCRIPTS)
        .map(|code| vec!["EVAL".into(), format!("{HELPERS}{code}"), "0".into()])
        .collect();
    for cmd in [
        &["FUNCTION", "LOAD", PACKER][..],
        &["FCALL", "pack_them", "0", "a", "b"],
        &["FCALL", "bad_pack", "0"],
        &["FUNCTION", "LOAD", LOAD_TIME],
    ] {
        script.push(cmd.iter().map(|s| s.to_string()).collect());
    }
    assert_same(&mut theirs, &mut ours, &script);
}

backend_tests!(libraries_as_redis);
