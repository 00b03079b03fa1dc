"""Scripts as real applications run them, through redis-py (Debian's python3-redis):
its distributed Lock (Lua release/extend/reacquire scripts), Script objects (EVALSHA with the
NOSCRIPT fallback, inside pipelines too), the `limits` rate-limiting library (python3-limits:
its moving-window and fixed-window Lua scripts, and a reset script that runs KEYS), a
sliding-window rate limiter and a reliable queue written the way libraries write them, and
Functions. Run against redis-server and against
Damselfly by crates/server/tests/script_libraries.rs; exits non-zero on the first difference
from what the library expects.

    python3 redis_py_scripts.py PORT
"""

import sys
import threading

import redis
from limits import parse, storage, strategies
from redis.exceptions import LockNotOwnedError, NoScriptError, ResponseError

PORT = int(sys.argv[1])
r = redis.Redis(port=PORT)
r.flushall()
r.script_flush()
r.function_flush()


def check(cond, what):
    if not cond:
        sys.exit("FAILED: " + what)


# --- redis-py's Lock: SET NX PX to take it, Lua scripts to release, extend, reacquire. ---
lock = r.lock("lock:report", timeout=5)
check(lock.acquire(blocking=False), "acquire a free lock")
check(lock.owned(), "owned after acquire")
check(not r.lock("lock:report").acquire(blocking=False), "a taken lock is refused")
check(lock.extend(10), "extend")
check(10000 < r.pttl("lock:report") <= 15000, "extend adds to the ttl")
check(lock.extend(3, replace_ttl=True), "extend replacing the ttl")
check(r.pttl("lock:report") <= 3000, "replace_ttl sets the ttl")
check(lock.reacquire(), "reacquire")
check(4000 < r.pttl("lock:report") <= 5000, "reacquire resets the ttl")
lock.release()
check(not r.exists("lock:report"), "release deletes the key")
expired = r.lock("lock:expired", timeout=5)
expired.acquire()
r.delete("lock:expired")
try:
    expired.release()
    check(False, "releasing a lock no longer held raises")
except LockNotOwnedError:
    pass
stolen = r.lock("lock:stolen", timeout=5)
stolen.acquire()
r.set("lock:stolen", "someone-else")
try:
    stolen.extend(5)
    check(False, "extending a lock someone else holds raises")
except LockNotOwnedError:
    pass

# Mutual exclusion: threads increment a counter with a non-atomic read-then-write, each under
# the lock; no increment is lost.
r.set("counter", 0)


def worker():
    client = redis.Redis(port=PORT)
    for _ in range(40):
        with client.lock("lock:counter", timeout=10, blocking_timeout=30, sleep=0.001):
            value = int(client.get("counter"))
            client.set("counter", value + 1)


threads = [threading.Thread(target=worker) for _ in range(6)]
for t in threads:
    t.start()
for t in threads:
    t.join()
check(int(r.get("counter")) == 240, "every increment under the lock is kept")

# --- Script objects: EVALSHA, NOSCRIPT, reload; in a pipeline. ---
incr_by = r.register_script(
    "local v = redis.call('INCRBY', KEYS[1], ARGV[1]) "
    "redis.call('EXPIRE', KEYS[1], ARGV[2]) return v"
)
check(incr_by(keys=["hits"], args=[5, 100]) == 5, "script result")
r.script_flush()
check(incr_by(keys=["hits"], args=[2, 100]) == 7, "EVALSHA after SCRIPT FLUSH falls back")
check(r.ttl("hits") == 100, "the script's EXPIRE")
pipe = r.pipeline()
for _ in range(3):
    incr_by(keys=["hits"], args=[1, 50], client=pipe)
check(pipe.execute() == [8, 9, 10], "scripts in a pipeline")
try:
    r.evalsha("0" * 40, 0)
    check(False, "an unknown sha raises")
except NoScriptError:
    pass

# --- The limits library: its Lua scripts through its published API. ---
store = storage.RedisStorage("redis://127.0.0.1:%d" % PORT)
moving = strategies.MovingWindowRateLimiter(store)
fixed = strategies.FixedWindowRateLimiter(store)
five = parse("5/minute")
hits = [moving.hit(five, "api", "alice") for _ in range(7)]
check(hits == [True] * 5 + [False] * 2, "moving window: %r" % hits)
check(moving.test(five, "api", "bob"), "another user is not limited")
check(moving.get_window_stats(five, "api", "alice")[1] == 0, "nothing left in the window")
check(moving.hit(parse("10/minute"), "api", "alice", cost=3), "a hit costing 3")
hits = [fixed.hit(five, "fixed", "alice") for _ in range(6)]
check(hits == [True] * 5 + [False], "fixed window: %r" % hits)
check(fixed.get_window_stats(five, "fixed", "alice")[1] == 0, "fixed window stats")
check(store.reset() >= 3, "reset deletes the limiter's keys (a script running KEYS)")
check(moving.hit(five, "api", "alice"), "a hit after reset")

# --- A sliding-window rate limiter (sorted set of timestamps), as rate-limit libraries
# write it: at most 5 calls per window. ---
limiter = r.register_script(
    """
local key, now, window, limit = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local used = redis.call('ZCARD', key)
if used < limit then
  redis.call('ZADD', key, now, ARGV[4])
  redis.call('PEXPIRE', key, window)
  return {1, limit - used - 1}
end
local oldest = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')
return {0, tonumber(oldest[2]) + window - now}
"""
)
results = [limiter(keys=["rl:user1"], args=[1000 + i, 100, 5, "req%d" % i]) for i in range(7)]
check([x[0] for x in results] == [1, 1, 1, 1, 1, 0, 0], "the limit holds: %r" % results)
check(results[4][1] == 0 and results[5][1] == 95, "remaining and retry-after: %r" % results)
check(limiter(keys=["rl:user1"], args=[1101, 100, 5, "late"])[0] == 1, "the window slides")

# --- A reliable queue: move a job to a processing list with a deadline, ack it, requeue
# the expired ones (the pattern of BullMQ's and Sidekiq's scripts). ---
take = r.register_script(
    """
local job = redis.call('RPOPLPUSH', KEYS[1], KEYS[2])
if not job then return false end
redis.call('ZADD', KEYS[3], ARGV[1], job)
return job
"""
)
ack = r.register_script(
    "redis.call('LREM', KEYS[1], 1, ARGV[1]) return redis.call('ZREM', KEYS[2], ARGV[1])"
)
requeue = r.register_script(
    """
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[1])
for _, job in ipairs(due) do
  redis.call('LREM', KEYS[2], 1, job)
  redis.call('ZREM', KEYS[3], job)
  redis.call('LPUSH', KEYS[1], job)
end
return #due
"""
)
q = ["{q}:wait", "{q}:active", "{q}:deadlines"]
r.lpush(q[0], "job1", "job2", "job3")
check(take(keys=q, args=[10]) == b"job1", "take the oldest job")
check(take(keys=q, args=[20]) == b"job2", "take the next job")
check(ack(keys=q[1:], args=["job1"]) == 1, "ack")
check(requeue(keys=q, args=[15]) == 0, "nothing due yet")
check(requeue(keys=q, args=[25]) == 1, "the expired job is requeued")
check(r.lrange(q[0], 0, -1) == [b"job2", b"job3"], "queue order after requeue")
check(take(keys=["{q}:empty", q[1], q[2]], args=[1]) is None, "an empty queue gives nil")

# --- Errors reach the client as redis-py expects. ---
try:
    r.eval("return redis.call('INCR', KEYS[1])", 1, "lock:stolen")
    check(False, "INCR on a non-integer raises")
except ResponseError as e:
    check("not an integer" in str(e), "the error text: %s" % e)

# --- Functions through redis-py. ---
library = """#!lua name=counters
redis.register_function('bump', function(keys, args)
  return redis.call('INCRBY', keys[1], args[1])
end)
redis.register_function{function_name='peek', callback=function(keys)
  return redis.call('GET', keys[1])
end, flags={'no-writes'}}
"""
check(r.function_load(library) == b"counters", "function_load")
check(r.fcall("bump", 1, "fn:counter", 3) == 3, "fcall")
check(r.fcall_ro("peek", 1, "fn:counter") == b"3", "fcall_ro")
try:
    r.fcall_ro("bump", 1, "fn:counter", 1)
    check(False, "fcall_ro of a writing function raises")
except ResponseError:
    pass
check(r.function_load(library, replace=True) == b"counters", "replace")
listed = r.function_list()
check(
    len(listed) == 1 and listed[0][:4] == [b"library_name", b"counters", b"engine", b"LUA"]
    and sorted(f[1] for f in listed[0][5]) == [b"bump", b"peek"],
    "function_list: %r" % listed,
)
dumped = r.function_dump()
r.function_flush()
r.function_restore(dumped)
check(r.fcall("bump", 1, "fn:counter", 1) == 4, "dump and restore")
print("ok")
