-- Builds Redis 7.0's script environment in a fresh Lua 5.1 state (docs/scripting.md).
-- Runs once per VM with the full standard library; receives the Rust primitives and
-- returns what the VM keeps: the protected environment for user code, the body of a run
-- and what reads a failed one, the CALL tag, and the environment and loader of libraries.
local prims = ...

local G = _G
local type, error, tostring, tonumber, select, rawget, rawset =
    type, error, tostring, tonumber, select, rawget, rawset
local setmetatable, getmetatable, setfenv, loadstring = setmetatable, getmetatable, setfenv, loadstring
local pairs, pcall, lower = pairs, pcall, string.lower
local floor, ceil = math.floor, math.ceil
local str_sub, str_byte, str_find = string.sub, string.byte, string.find
local getinfo = debug.getinfo
local co_create, co_resume, co_yield, co_status =
    coroutine.create, coroutine.resume, coroutine.yield, coroutine.status

-- A yield whose first value is CALL asks the Rust driver to run a command (or another
-- request); it passes through every coroutine the script made, up to the driver.
local CALL = prims.CALL

-- Read-only tables. Redis patches Lua to flag tables read-only; here every protected table
-- is an empty proxy whose metatable reads through to the real one and refuses writes.
local readonly = setmetatable({}, { __mode = "k" })
local function refuse_write()
  error("Attempt to modify a readonly table", 2)
end
local function protect(t)
  local proxy = setmetatable({}, { __index = t, __newindex = refuse_write, __metatable = false })
  readonly[proxy] = true
  return proxy
end

-- Script protocol for this run (redis.setresp), reset by every run.
local resp = 2

-- The run's calls are answered inside the script (call_now.rs), not yielded to the
-- driver; set by every run.
local now = false
local call_now = prims.call_now

-- The driver reads the arguments from the yielding coroutine's stack (vm.rs, `Run`), or
-- call_now from its own (it returns the reply, or raises it for redis.call). Each yields
-- itself: a call is one Lua frame between the script and the driver.
local redis = {}
redis.call = function(...)
  if now then
    return call_now(true, resp, ...)
  end
  local ok, reply = co_yield(CALL, "call", true, resp, ...)
  if not ok then
    error(reply)
  end
  return reply
end
redis.pcall = function(...)
  if now then
    return call_now(false, resp, ...)
  end
  local _, reply = co_yield(CALL, "call", false, resp, ...)
  return reply
end
redis.setresp = function(...)
  if select("#", ...) ~= 1 then
    error({ err = "ERR redis.setresp() requires one argument." })
  end
  local v = tonumber((...))
  if v ~= 2 and v ~= 3 then
    error({ err = "ERR RESP version must be 2 or 3." })
  end
  resp = v
end
redis.sha1hex = function(...)
  if select("#", ...) ~= 1 then
    error({ err = "ERR wrong number of arguments" })
  end
  local s = ...
  if type(s) ~= "string" and type(s) ~= "number" then
    s = ""
  end
  return prims.sha1hex(tostring(s))
end
local function wrong_reply_args()
  return { err = "ERR wrong number or type of arguments" }
end
redis.error_reply = function(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then
    return wrong_reply_args()
  end
  if str_sub(s, 1, 1) == "-" then
    s = str_sub(s, 2)
  end
  s = (s:gsub("[\r\n]+$", ""))
  if not str_find(s, " ", 1, true) then
    s = "ERR " .. s
  end
  return { err = s }
end
redis.status_reply = function(...)
  local s = ...
  if select("#", ...) ~= 1 or type(s) ~= "string" then
    return wrong_reply_args()
  end
  return { ok = s }
end
redis.log = function(...)
  local n = select("#", ...)
  if n < 2 then
    error({ err = "ERR redis.log() requires two arguments or more." })
  end
  local level = ...
  if type(level) ~= "number" then
    error({ err = "ERR First argument must be a number (log level)." })
  end
  if level < 0 or level > 3 then
    error({ err = "ERR Invalid debug level." })
  end
  local parts = {}
  for i = 2, n do
    local v = select(i, ...)
    if type(v) == "string" or type(v) == "number" then
      parts[#parts + 1] = tostring(v)
    end
  end
  prims.log(level, table.concat(parts, " "))
end
redis.set_repl = function(...)
  if select("#", ...) ~= 1 then
    error({ err = "ERR redis.set_repl() requires two arguments." })
  end
  local flags = tonumber((...))
  if flags == nil or flags < 0 or flags > 3 then
    error({ err = "ERR Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE." })
  end
end
redis.replicate_commands = function() return true end
redis.breakpoint = function() return false end
redis.debug = function() end
redis.acl_check_cmd = function(...)
  local ok, reply = co_yield(CALL, "acl", true, resp, ...)
  if not ok then
    error(reply)
  end
  return reply
end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
redis.REPL_NONE, redis.REPL_AOF, redis.REPL_SLAVE, redis.REPL_REPLICA, redis.REPL_ALL = 0, 1, 2, 2, 3
redis.REDIS_VERSION = prims.version
redis.REDIS_VERSION_NUM = prims.version_num

-- math.random and math.randomseed over Redis's process-wide lrand48.
local function checkint(v, n, fname)
  local x = tonumber(v)
  if x == nil then
    error("bad argument #" .. n .. " to '" .. fname .. "' (number expected, got " ..
      (v == nil and "no value" or type(v)) .. ")", 3)
  end
  if x >= 0 then return floor(x) end
  return ceil(x)
end
math.random = function(...)
  local n = select("#", ...)
  local r = prims.random()
  if n == 0 then
    return r
  elseif n == 1 then
    local u = checkint((...), 1, "random")
    if u < 1 then
      error("bad argument #1 to 'random' (interval is empty)", 2)
    end
    return floor(r * u) + 1
  elseif n == 2 then
    local l, u = ...
    l, u = checkint(l, 1, "random"), checkint(u, 2, "random")
    if l > u then
      error("bad argument #2 to 'random' (interval is empty)", 2)
    end
    return floor(r * (u - l + 1)) + l
  end
  error("wrong number of arguments", 2)
end
math.randomseed = function(seed)
  prims.randomseed(checkint(seed, 1, "randomseed"))
end

-- pcall through coroutines, so a redis.call inside it can still yield to the driver.
-- As in Redis, an error table's `err` text is what pcall returns.
local stopping = prims.stopping
local function finish_pcall(co, ok, ...)
  if not ok then
    local e = ...
    if stopping() then error(e, 0) end
    if type(e) == "table" and type(rawget(e, "err")) == "string" then
      e = rawget(e, "err")
    end
    return false, e
  end
  if co_status(co) == "dead" then
    return true, ...
  end
  return finish_pcall(co, co_resume(co, co_yield(...)))
end
local function callable(f)
  if type(f) == "function" then return true end
  local mt = getmetatable(f)
  return type(mt) == "table" and rawget(mt, "__call") ~= nil
end
G.pcall = function(f, ...)
  if not callable(f) then
    return false, "attempt to call a " .. type(f) .. " value"
  end
  local co = co_create(function(...) return f(...) end)
  return finish_pcall(co, co_resume(co, ...))
end
G.xpcall = function(f, handler)
  if not callable(f) then
    return false, handler("attempt to call a " .. type(f) .. " value")
  end
  local co = co_create(function() return f() end)
  local function finish(ok, ...)
    if not ok then
      if stopping() then error((...), 0) end
      return false, handler((...))
    end
    if co_status(co) == "dead" then
      return true, ...
    end
    return finish(co_resume(co, co_yield(...)))
  end
  return finish(co_resume(co))
end

-- The script's own coroutines pass the driver's yields through.
local function finish_resume(co, ok, ...)
  if not ok and stopping() then error((...), 0) end
  if ok and co_status(co) ~= "dead" and (...) == CALL then
    return finish_resume(co, co_resume(co, co_yield(...)))
  end
  return ok, ...
end
local coroutine_lib = {
  create = co_create,
  status = co_status,
  running = coroutine.running,
  yield = co_yield,
  resume = function(co, ...) return finish_resume(co, co_resume(co, ...)) end,
  wrap = function(f)
    local co = co_create(f)
    return function(...)
      local function unwrap(ok, ...)
        if not ok then error((...), 0) end
        return ...
      end
      return unwrap(finish_resume(co, co_resume(co, ...)))
    end
  end,
}

-- What user code sees as globals: a read-only view of G that raises on unknown names. The
-- view's __index is G itself, a table, so reading a global costs no function call; G's own
-- __index raises for the names it lacks, as Redis's protected globals do (its caller, level
-- 2, is the user code that read the name). Prelude code that may read a missing name uses
-- rawget.
setmetatable(G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
})
local env = setmetatable({}, {
  __index = G,
  __newindex = refuse_write,
  __metatable = false,
})
readonly[env] = true

-- loadstring compiles into the protected environment and refuses bytecode.
local function load_source(s, name)
  if type(s) == "string" and str_byte(s, 1) == 27 then
    return nil, "bytecode is not allowed"
  end
  local f, e = loadstring(s, name)
  if f then setfenv(f, env) end
  return f, e
end
G.loadstring = load_source
G.load = function(chunk, name)
  if type(chunk) == "string" then return load_source(chunk, name) end
  local parts = {}
  while true do
    local piece = chunk()
    if piece == nil or piece == "" then break end
    parts[#parts + 1] = piece
  end
  return load_source(table.concat(parts), name)
end
G.setmetatable = function(t, mt)
  if readonly[t] then error("Attempt to modify a readonly table", 0) end
  return setmetatable(t, mt)
end
G.rawset = function(t, k, v)
  if readonly[t] then error("Attempt to modify a readonly table", 0) end
  return rawset(t, k, v)
end

for _, name in ipairs({ "print", "dofile", "loadfile", "getfenv", "setfenv", "newproxy",
  "module", "require", "package", "debug", "os", "io" }) do
  G[name] = nil
end
-- The bit functions return (nil, message) on a bad argument; raised here so the error
-- names the calling line, as errors from Lua's C functions do.
local bit = {}
for name, f in pairs(prims.bit) do
  bit[name] = function(...)
    local r, e = f(...)
    if e then error(e, 2) end
    return r
  end
end
G.bit = protect(bit)
-- The Rust halves of the C libraries (capi.rs): a function gets its arguments as a table and
-- their count, and returns (true, results, n) or (false, kind, message, argument).
local unpack = unpack
local function spread(t, n)
  -- A C function may use 8000 stack slots, so returns up to 7999 values; unpack(t, 1, n)
  -- takes 3 slots for itself, unpack(t) one (Rust made #t n, less any trailing nils).
  if n > 7997 then return unpack(t) end
  return unpack(t, 1, n)
end
-- (ok, results, n) or (ok, kind, message, argument). Called by a library function, not
-- tail-called, so that the levels below are right.
local function c_result(ok, a, b, c)
  if ok then return spread(a, b) end
  if a == "core" then error(b, 0) end
  -- Raised as luaL_error and luaL_argerror raise: at the caller's line (level 3, past this
  -- function and the library function), and an argument error names the library function
  -- as its caller did (level 2 of getinfo), '?' when that is unknown.
  if a == "arg" then
    local ar = getinfo(2, "n") or {}
    local name = ar.name or "?"
    if ar.namewhat == "method" then
      c = c - 1
      if c == 0 then
        error("calling '" .. name .. "' on bad self (" .. b .. ")", 3)
      end
    end
    b = "bad argument #" .. c .. " to '" .. name .. "' (" .. b .. ")"
  end
  error(b, 3)
end
local function c_library(raw)
  local lib = {}
  for name, v in pairs(raw) do
    if type(v) == "function" then
      -- select keeps this frame under c_result (a tail call to it would drop the frame).
      lib[name] = function(...)
        return select(1, c_result(v({ ... }, select("#", ...))))
      end
    else
      lib[name] = v
    end
  end
  return lib
end
G.cmsgpack = protect(c_library(prims.cmsgpack))
G.struct = protect(c_library(prims.struct))

-- The cjson functions (cjson.rs) take their argument count and a table of the arguments
-- and answer true and their results, or false and a message (with the argument's number
-- for an argument error); a run being stopped fails with the watchdog's error as it is.
local function pack(...)
  return { n = select("#", ...), ... }
end
-- A library table from the Rust one; cjson.new() makes another with its own settings.
local function cjson_library(raw)
  local lib = {}
  for name, v in pairs(raw) do
    if type(v) == "function" then
      lib[name] = function(...)
        local r = pack(v(select("#", ...), { ... }))
        if not r[1] then
          local kind = (stopping() and "core") or (r[3] and "arg") or "error"
          c_result(false, kind, r[2], r[3])
        end
        return unpack(r, 2, r.n)
      end
    else
      lib[name] = v
    end
  end
  local new = lib.new
  lib.new = function(...) return cjson_library(new(...)) end
  return lib
end
G.cjson = protect(cjson_library(prims.cjson))
G.redis = protect(redis)
G.string = protect(string)
G.table = protect(table)
G.math = protect(math)
G.coroutine = protect(coroutine_lib)
G._G = env
-- ("x"):upper() reads the real string table; its metatable cannot be swapped or changed.
local string_mt = getmetatable("")
string_mt.__metatable = false

-- The innermost frame of user code in a failed run (Redis reports its line).
local function where(co)
  for level = 0, 200 do
    local info = getinfo(co, level, "Sl")
    if not info then return nil end
    if info.what ~= "C" and str_sub(info.source, 1, 6) == "@user_" then
      return info.source, info.currentline
    end
  end
end

-- Whether G holds an EVAL's KEYS and ARGV, which a library callback must not see.
local eval_globals = false

-- One run, in the coroutine the Rust driver resumes (vm.rs, `Run`): the protocol starts at
-- RESP2; an EVAL script gets KEYS and ARGV as globals, a function gets them as arguments;
-- `calls_now` says whether its calls are answered inside the script.
-- Returns the script's value and the protocol it chose; its CALL requests yield straight
-- through to the driver.
local function body(as_globals, f, keys, argv, calls_now)
  resp, now = 2, calls_now
  local v
  if as_globals then
    G.KEYS, G.ARGV = keys, argv
    eval_globals = true
    v = f()
  else
    -- A library callback reads the globals through G (fenv): not an earlier EVAL's.
    if eval_globals then
      G.KEYS, G.ARGV = nil, nil
      eval_globals = false
    end
    v = f(keys, argv)
  end
  return v, resp
end

-- A failed run's error table, and the user-code frame it failed in.
local function failure(co, e)
  if type(e) ~= "table" then
    e = { err = "ERR " .. tostring(e) }
  end
  return e, where(co)
end

-- Function libraries (FUNCTION LOAD). As in Redis 7.0, a library's code runs with only the
-- load API as globals (redis.register_function, redis.log, the log levels and version
-- fields); the callbacks it registers run later with the whole environment but EVAL's KEYS
-- and ARGV (they get keys and args as arguments). One environment serves every library:
-- what its globals resolve to depends on whether a library is loading.
local function nonexistent(k)
  error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 3)
end
local function strict(t)
  local proxy = setmetatable({}, {
    __index = function(_, k)
      local v = t[k]
      if v == nil then nonexistent(k) end
      return v
    end,
    __newindex = refuse_write,
    __metatable = false,
  })
  readonly[proxy] = true
  return proxy
end

-- The registrations of the library loading now; nil when none is.
local registered
-- Their names, to refuse a second function of one name in O(1).
local registered_names

local FLAGS = { ["no-writes"] = true, ["allow-oom"] = true, ["allow-stale"] = true,
  ["no-cluster"] = true, ["allow-cross-slot-keys"] = true }
local function fail(text)
  error({ err = "ERR " .. text })
end
local function text_arg(v, what)
  if type(v) == "string" or type(v) == "number" then return tostring(v) end
  fail(what)
end
local function read_flags(t)
  local out = {}
  for _, f in pairs(t) do
    if type(f) ~= "string" or not FLAGS[f] then return nil end
    out[#out + 1] = f
  end
  return out
end

local function register_function(...)
  local n = select("#", ...)
  if n < 1 or n > 2 then
    fail("wrong number of arguments to redis.register_function")
  end
  local name, callback, flags, description
  if n == 2 then
    local a, b = ...
    name = text_arg(a, "first argument to redis.register_function must be a string")
    if type(b) ~= "function" then
      fail("second argument to redis.register_function must be a function")
    end
    callback = b
  else
    local t = ...
    if type(t) ~= "table" then
      fail("calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
    end
    for k, v in pairs(t) do
      if type(k) ~= "string" and type(k) ~= "number" then
        fail("named argument key given to redis.register_function is not a string")
      end
      local key = lower(tostring(k))
      if key == "function_name" then
        name = text_arg(v, "function_name argument given to redis.register_function must be a string")
      elseif key == "description" then
        description = text_arg(v, "description argument given to redis.register_function must be a string")
      elseif key == "callback" then
        if type(v) ~= "function" then
          fail("callback argument given to redis.register_function must be a function")
        end
        callback = v
      elseif key == "flags" then
        if type(v) ~= "table" then
          fail("flags argument to redis.register_function must be a table representing function flags")
        end
        flags = read_flags(v)
        if not flags then fail("unknown flag given") end
      else
        fail("unknown argument given to redis.register_function")
      end
    end
    if not name then fail("redis.register_function must get a function name argument") end
    if not callback then fail("redis.register_function must get a callback argument") end
  end
  if not str_find(name, "^[%w_]+$") then
    -- Redis's text names libraries here too.
    fail("Library names can only contain letters, numbers, or underscores(_) and must be at least one character long")
  end
  if registered_names[name] then fail("Function already exists in the library") end
  registered_names[name] = true
  registered[#registered + 1] = { name = name, callback = callback, flags = flags or {},
    description = description }
end

local load_redis = { register_function = register_function, log = redis.log,
  REDIS_VERSION = redis.REDIS_VERSION, REDIS_VERSION_NUM = redis.REDIS_VERSION_NUM }
for _, level in ipairs({ "LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING" }) do
  load_redis[level] = redis[level]
end
-- What a loading library's code reads as globals; other names raise (level 2 is the code
-- that read the name).
local load_globals = setmetatable({ redis = strict(load_redis) }, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
})

-- The libraries' environment reads through tables, not functions, so a global read in a
-- callback costs what it costs in EVAL: G while callbacks run (`body` clears EVAL's KEYS
-- and ARGV from it first), load_globals while a library loads (load_library switches).
local fenv_meta = { __index = G, __newindex = refuse_write, __metatable = false }
local fenv = setmetatable({}, fenv_meta)
readonly[fenv] = true

-- Runs a library's compiled code: (true, registrations) or (false, error text).
local function load_library(f)
  registered, registered_names = {}, {}
  fenv_meta.__index = load_globals
  local ok, e = pcall(f)
  fenv_meta.__index = G
  local r = registered
  registered, registered_names = nil, nil
  if ok then return true, r end
  if type(e) == "table" and type(rawget(e, "err")) == "string" then
    return false, rawget(e, "err")
  end
  return false, "ERR " .. tostring(e)
end

return env, body, failure, CALL, fenv, load_library
