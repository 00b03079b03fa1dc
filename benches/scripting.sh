#!/usr/bin/env bash
# Lua scripting side by side: redis-server vs Damselfly, same machine, same run.
#
#   benches/scripting.sh [-n REQUESTS] [-s SECONDS] [-r ROUNDS] [-T THREADS]
#
# One-key scripts with redis-benchmark (50 clients, 100,000 random keys, -P 1 and -P 16):
# EVALSHA of a SET script and of a GET script, and FCALL of the same SET as a function, with
# a plain SET as the baseline of the request path. Then a
# two-key script (SET one key, GET the other) with `damselfly-bench load`, its keys on two
# different shards of a THREADS-thread Damselfly (--spread-shards) or on one (--same-shard),
# declared in KEYS, and the same script when it names the second key only in ARGV (its runs
# then lock every shard). Servers alternate (A B A B ...) for ROUNDS rounds; the table has the
# medians of requests per second, their ratio, and each server's CPU time per call (user +
# system, from /proc/PID/stat around each run). Needs redis-server and redis-benchmark.
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=200000
SECONDS_PER=5
ROUNDS=3
THREADS=2
while getopts "n:s:r:T:" opt; do
  case $opt in
    n) REQUESTS=$OPTARG ;;
    s) SECONDS_PER=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

# shellcheck source=benches/servers.sh
source benches/servers.sh
start_redis_and_damselfly "$THREADS"

SET_LUA="return redis.call('set', KEYS[1], ARGV[1])"
GET_LUA="return redis.call('get', KEYS[1])"
TWO_LUA="redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', KEYS[2])"
ARGV_LUA="redis.call('set', KEYS[1], ARGV[1]) return redis.call('get', ARGV[2])"
LIB="#!lua name=bench
redis.register_function('setter', function(keys, args) return redis.call('set', keys[1], args[1]) end)"
for s in redis damselfly; do
  for lua in "$SET_LUA" "$GET_LUA" "$TWO_LUA" "$ARGV_LUA"; do
    redis-cli -p "${PORT[$s]}" script load "$lua" >/dev/null
  done
  redis-cli -p "${PORT[$s]}" function load replace "$LIB" >/dev/null
done
sha() { printf '%s' "$1" | sha1sum | cut -d' ' -f1; }
SET_SHA=$(sha "$SET_LUA"); GET_SHA=$(sha "$GET_LUA"); TWO_SHA=$(sha "$TWO_LUA"); ARGV_SHA=$(sha "$ARGV_LUA")

RB="-c 50 -r 100000 -n $REQUESTS"
# name | kind (rb: redis-benchmark arguments, load: damselfly-bench load arguments)
SCENARIOS=(
  "SET without a script (baseline), -P 1|rb|$RB -P 1 set key:__rand_int__ v"
  "EVALSHA one-key SET, -P 1|rb|$RB -P 1 evalsha $SET_SHA 1 key:__rand_int__ v"
  "EVALSHA one-key SET, -P 16|rb|$RB -P 16 evalsha $SET_SHA 1 key:__rand_int__ v"
  "EVALSHA one-key GET, -P 1|rb|$RB -P 1 evalsha $GET_SHA 1 key:__rand_int__"
  "EVALSHA one-key GET, -P 16|rb|$RB -P 16 evalsha $GET_SHA 1 key:__rand_int__"
  "FCALL one-key SET, -P 1|rb|$RB -P 1 fcall setter 1 key:__rand_int__ v"
  "FCALL one-key SET, -P 16|rb|$RB -P 16 fcall setter 1 key:__rand_int__ v"
  "EVALSHA two keys, different shards|load|--cmd 'EVALSHA $TWO_SHA 2 %0 %1 v' --spread-shards $THREADS"
  "EVALSHA two keys, one shard|load|--cmd 'EVALSHA $TWO_SHA 2 %0 %1 v' --same-shard $THREADS"
  "EVALSHA second key undeclared, different shards|load|--cmd 'EVALSHA $ARGV_SHA 1 %0 v %1' --spread-shards $THREADS"
)

echo "damselfly $(git rev-parse --short HEAD), $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, ${ROUNDS} rounds, Damselfly --threads $THREADS" >&2
# Calls per second and server CPU per call: `rb` rows run redis-benchmark, `load` rows the
# load tool.
measure() { # server "kind|args"
  local kind=${2%%|*} args=${2#*|} before after out rps calls us
  before=$(cpu_ticks "${PID[$1]}")
  if [ "$kind" = rb ]; then
    # shellcheck disable=SC2086
    out=$(redis-benchmark -p "${PORT[$1]}" -q $args | tr '\r' '\n' | grep 'requests per second' | tail -1)
    rps=$(echo "$out" | sed -E 's/.*: ([0-9.]+) requests per second.*/\1/')
    calls=$REQUESTS
  else
    out=$(eval "$LOAD load --port ${PORT[$1]} --clients 50 --seconds $SECONDS_PER $args")
    rps=$(echo "$out" | tr ' ' '\n' | sed -n 's/^ops_per_sec=//p')
    calls=$(python3 -c "print(int(float('$rps') * ($SECONDS_PER + 1)))")
  fi
  after=$(cpu_ticks "${PID[$1]}")
  us=$(python3 -c "print(($after - $before) / $TICKS / $calls * 1e6)")
  echo "$rps|$us"
}
each_run measure

python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, server, rps, us = line.rstrip("\n").split("|")
    rows.setdefault(name, {}).setdefault(server, []).append((float(rps), float(us)))
med = lambda runs, i: statistics.median(r[i] for r in runs)
print("| scenario | Redis calls/s | Damselfly calls/s | ratio | Redis CPU µs/call | Damselfly CPU µs/call |")
print("|---|---|---|---|---|---|")
for name, by in rows.items():
    r, d = by["redis"], by["damselfly"]
    print(f"| {name} | {med(r,0):,.0f} | {med(d,0):,.0f} | {med(d,0)/med(r,0):.2f}x | {med(r,1):.1f} | {med(d,1):.1f} |")
PY
