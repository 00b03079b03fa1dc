//! The `cjson` library against redis-server 7.0: the same EVAL and FCALL streams go to both
//! servers and every reply must be byte-for-byte equal, errors included.

mod common;

use common::{assert_same, cmds, Backend, Server};

/// A library whose function encodes what it decodes (cjson is there when functions run, not
/// while the library loads).
const ROUND_TRIP: &str = "#!lua name=cj\n\
    redis.register_function('cj', function(keys, args)\n\
      if args[1] == 'err' then return cjson.decode('[') end\n\
      return cjson.encode(cjson.decode(args[1]))\n\
    end)";
const AT_LOAD: &str = "#!lua name=cjload\nlocal x = cjson.encode({1})";

fn cjson_as_redis(b: Backend) {
    let redis = Server::redis();
    let s = Server::start_with(b, 2, &[]);
    let (mut theirs, mut ours) = (redis.raw(), s.raw());
    // A script that changes a setting puts it back: Redis has one Lua state, Damselfly one
    // per thread, and these scripts may run on either.
    let script = cmds(&[
        // Encoding.
        &["EVAL", "return cjson.encode({1,2,3})", "0"],
        &["EVAL", "return cjson.encode({-0, 1e15, 0.1, 1/3, 123456789012345, 99999999999999, 1e-20})", "0"],
        &["EVAL", r#"return cjson.encode('a"b\\c/d\b\f\n\r\t\1\127\200 ')"#, "0"],
        &["EVAL", "return cjson.encode({a={b={c={1,{d=cjson.null}}}}})", "0"],
        &["EVAL", "return cjson.encode({{}, '', true, false, nil, 5})", "0"],
        &["EVAL", "return cjson.encode({1,2,x=3,[1.5]=4})", "0"],
        &["EVAL", "return cjson.encode({[-0]=1})", "0"],
        &["EVAL", "return cjson.encode({[2^31]=1})", "0"],
        &["EVAL", "return cjson.encode({[1]=1,[2]=2,[10]=3})", "0"],
        &["EVAL", "return cjson.encode({[1]=1,[2]=2,[11]=3})", "0"],
        &["EVAL", "return cjson.encode(0/0)", "0"],
        &["EVAL", "return cjson.encode({x = 1/0})", "0"],
        &["EVAL", "return cjson.encode(function() end)", "0"],
        &["EVAL", "return cjson.encode({[true]=1})", "0"],
        &["EVAL", "return cjson.encode()", "0"],
        &["EVAL", "local t = {} t[1] = t return cjson.encode(t)", "0"],
        // Decoding, and the replies decoded values make.
        &["EVAL", r#"return cjson.decode('[1,2,3,"sss",{"a":1}]')"#, "0"],
        &["EVAL", r#"return table.concat(cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), " ")"#, "0"],
        &["EVAL", r#"local d = cjson.decode('{"keya": "a", "keyb": "b"}') return {d.keya, d.keyb}"#, "0"],
        &["EVAL", "return cjson.decode('[1,null,3,true,false,1.5]')", "0"],
        &["EVAL", "return cjson.null", "0"],
        &["EVAL", r#"return cjson.encode(cjson.decode('{"a":null}'))"#, "0"],
        &["EVAL", r#"return cjson.decode('"\\u00e9\\u20ac\\ud83d\\ude00\\/\\n"')"#, "0"],
        &["EVAL", "return {tostring(cjson.decode('0x10')), tostring(cjson.decode('-Infinity')), tostring(cjson.decode('nan')), tostring(cjson.decode('+5')), tostring(cjson.decode(0.1))}", "0"],
        &["EVAL", "return cjson.decode('')", "0"],
        &["EVAL", "return cjson.decode('{')", "0"],
        &["EVAL", "return cjson.decode('[1,2')", "0"],
        &["EVAL", "return cjson.decode('[12')", "0"],
        &["EVAL", r#"return cjson.decode('{"a" 1}')"#, "0"],
        &["EVAL", r#"return cjson.decode('"a\\x"')"#, "0"],
        &["EVAL", r#"return cjson.decode('"\\ud800"')"#, "0"],
        &["EVAL", r#"return cjson.decode('"abc')"#, "0"],
        &["EVAL", "return cjson.decode('tru')", "0"],
        &["EVAL", "return cjson.decode('-')", "0"],
        &["EVAL", "return cjson.decode('[1]x')", "0"],
        &["EVAL", "return cjson.decode('1\\0x')", "0"],
        &["EVAL", "return cjson.decode({})", "0"],
        &["EVAL", "return cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))", "0"],
        // Configuration.
        &["EVAL", "return {cjson.encode_sparse_array()}", "0"],
        &["EVAL", "return {cjson.encode_max_depth(), cjson.decode_max_depth(), cjson.encode_number_precision()}", "0"],
        &["EVAL", "return {tostring(cjson.encode_keep_buffer()), tostring(cjson.encode_invalid_numbers()), tostring(cjson.decode_invalid_numbers())}", "0"],
        &["EVAL", "cjson.encode_number_precision(3) local r = cjson.encode({3.14159, 1234567}) cjson.encode_number_precision(14) return r", "0"],
        &["EVAL", "local r = cjson.encode_invalid_numbers('null') local s = cjson.encode({0/0, 1/0}) cjson.encode_invalid_numbers(true) local t = cjson.encode({0/0, -1/0}) cjson.encode_invalid_numbers(false) return {r, s, t}", "0"],
        &["EVAL", "cjson.encode_sparse_array(true) local r = cjson.encode({[1]=1,[20]=2}) cjson.encode_sparse_array(false) return r", "0"],
        &["EVAL", "cjson.decode_invalid_numbers(false) local ok, e = pcall(cjson.decode, '0x10') cjson.decode_invalid_numbers(true) return e", "0"],
        &["EVAL", "return cjson.encode_max_depth(0)", "0"],
        &["EVAL", "return cjson.encode_number_precision(15)", "0"],
        &["EVAL", "return cjson.encode_sparse_array('x')", "0"],
        &["EVAL", "return cjson.encode_sparse_array(nil, 'a')", "0"],
        &["EVAL", "return cjson.encode_sparse_array(nil, nil, nil, 1)", "0"],
        &["EVAL", "local c = cjson.new() c.encode_max_depth(1) local ok, e = pcall(c.encode, {{1}}) return {e, cjson.encode({{1}}), c._NAME, c._VERSION}", "0"],
        &["EVAL", "cjson.encode = function() return 1 end", "0"],
        &["EVAL", "local ok, e = pcall(cjson.decode) return e", "0"],
        &["EVAL", "return cjson:decode(1)", "0"],
        // With the depth limits raised, lua-cjson runs out of Lua stack slots.
        &["EVAL", "cjson.encode_max_depth(100000) local t = {} local c = t for i = 1, 10000 do c.a = {} c = c.a end local ok, e = pcall(cjson.encode, t) cjson.encode_max_depth(1000) return e", "0"],
        &["EVAL", "cjson.decode_max_depth(100000) local ok, e = pcall(cjson.decode, string.rep('[', 10000)) cjson.decode_max_depth(1000) return e", "0"],
        // Redis's smoke test (tests/unit/scripting.tcl).
        &["EVAL", r#"
            local some_map = {s1="Some string", n1=100, a1={"Some","String","Array"},
                nil1=nil, b1=true, b2=false}
            local encoded = cjson.encode(some_map)
            local decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))
            cjson.encode_keep_buffer(false)
            encoded = cjson.encode(some_map)
            decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))
            cjson.encode_keep_buffer(true)
            local table1 = {one="one", [1]="one"}
            encoded = cjson.encode(table1)
            decoded = cjson.decode(encoded)
            assert(decoded["one"] == table1["one"])
            assert(decoded["1"] == table1[1])
            local invalid_map = {}
            invalid_map[false] = "false"
            local ok, encoded = pcall(cjson.encode, invalid_map)
            assert(ok == false)
            cjson.encode_max_depth(1)
            ok, encoded = pcall(cjson.encode, some_map)
            assert(ok == false)
            cjson.decode_max_depth(1)
            ok, decoded = pcall(cjson.decode, '{"obj": {"array": [1,2,3,4]}}')
            assert(ok == false)
            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == false)
            cjson.encode_invalid_numbers(true)
            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == true)
            cjson.decode_max_depth(1000)
            cjson.encode_max_depth(1000)
            cjson.encode_invalid_numbers(false)
            return 'passed'"#, "0"],
        // Functions.
        &["FUNCTION", "LOAD", ROUND_TRIP],
        &["FCALL", "cj", "0", r#"[1,{"a":null,"b":"\u00e9"},-0.5]"#],
        &["FCALL", "cj", "0", "err"],
        &["FUNCTION", "LOAD", AT_LOAD],
    ]);
    assert_same(&mut theirs, &mut ours, &script);
}

backend_tests!(cjson_as_redis);
