#!/usr/bin/env bash
# Two Damselfly builds and Redis side by side, same run: the cross-shard workloads (multi-key
# commands and transactions over two shards, redis-benchmark SET/GET where half the requests
# hop to the other thread), to measure a change against the build before it.
#
#   benches/ab.sh BEFORE_BIN AFTER_BIN [-s SECONDS] [-r ROUNDS] [-c CLIENTS] [-T THREADS]
#
# Servers take turns within each round (redis, before, after); the table gives medians over
# the rounds and the after/before ratio. Needs redis-server, redis-benchmark and a release
# build of damselfly-bench (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

BEFORE=$(realpath "$1")
AFTER=$(realpath "$2")
shift 2
SECONDS_PER=5
ROUNDS=3
CLIENTS=50
THREADS=2
while getopts "s:r:c:T:" opt; do
  case $opt in
    s) SECONDS_PER=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    c) CLIENTS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

cargo build --release -q -p damselfly-bench
LOAD=target/release/damselfly-bench
# shellcheck source=benches/servers.sh
source benches/servers.sh
start redis redis-server --save '' --appendonly no || exit 1
start before "$BEFORE" --threads "$THREADS" --loglevel warning --save "" --dir "$WORK" || exit 1
start after "$AFTER" --threads "$THREADS" --loglevel warning --save "" --dir "$WORK" || exit 1

SPREAD="--spread-shards $THREADS"
MGET10="MGET %0 %1 %2 %3 %4 %5 %6 %7 %8 %9"
# name | command (PORT is replaced by the server's port)
SCENARIOS=(
  "MSET 2 keys, different shards|$LOAD load --port PORT --clients $CLIENTS --seconds $SECONDS_PER --cmd 'MSET %0 v %1 v' $SPREAD"
  "MGET 10 keys, spread over shards|$LOAD load --port PORT --clients $CLIENTS --seconds $SECONDS_PER --cmd '$MGET10' $SPREAD"
  "MULTI SET SET EXEC, different shards|$LOAD load --port PORT --clients $CLIENTS --seconds $SECONDS_PER --cmd MULTI --cmd 'SET %0 v' --cmd 'SET %1 v' --cmd EXEC $SPREAD"
  "redis-benchmark SET -P 1|redis-benchmark -p PORT -c $CLIENTS -n 200000 -r 100000 -d 100 -t set -q --csv"
  "redis-benchmark GET -P 1|redis-benchmark -p PORT -c $CLIENTS -n 200000 -r 100000 -d 100 -t get -q --csv"
)

echo "ab: before $BEFORE, after $AFTER, $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, $CLIENTS clients, $ROUNDS rounds, Damselfly --threads $THREADS" >&2
RESULTS=$WORK/results
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
  for s in "${SCENARIOS[@]}"; do
    name=${s%%|*}; cmd=${s#*|}
    for server in redis before after; do
      line=$(eval "${cmd//PORT/${PORT[$server]}}")
      # damselfly-bench prints key=value fields; redis-benchmark --csv prints "test","rps",...
      if [[ $line == \"* ]]; then
        rps=$(echo "$line" | tail -1 | awk -F'","' '{print $2}')
        line="ops_per_sec=$rps"
      fi
      echo "$name|$server|$line" >>"$RESULTS"
      echo "round $round: $name / $server: $line" >&2
    done
  done
done

python3 - "$RESULTS" <<'EOF'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, server, fields = line.rstrip("\n").split("|")
    kv = dict(f.split("=") for f in fields.split())
    rows.setdefault(name, {}).setdefault(server, []).append(float(kv["ops_per_sec"]))
print("| scenario | Redis ops/s | before ops/s | after ops/s | before/Redis | after/Redis | after/before |")
print("|---|---|---|---|---|---|---|")
for name, by in rows.items():
    r, b, a = (statistics.median(by[s]) for s in ("redis", "before", "after"))
    print(f"| {name} | {r:,.0f} | {b:,.0f} | {a:,.0f} | {b/r:.2f}x | {a/r:.2f}x | {a/b:.2f}x |")
EOF
