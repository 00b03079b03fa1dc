#!/usr/bin/env bash
# Multi-key commands and transactions, side by side: redis-server vs Damselfly, same machine,
# same run.
#
#   benches/tx.sh [-s SECONDS] [-r ROUNDS] [-c CLIENTS] [-T THREADS]
#
# Each scenario runs `damselfly-bench load` (crates/bench) with CLIENTS connections for SECONDS
# (after 1 s of warm-up) against each server in turn (A B A B ...) for ROUNDS rounds, and prints
# a markdown table of medians: groups per second, p50 and p99 latency, and Damselfly/Redis
# ratios. Keys are placed with --spread-shards (every key of a group on a different shard of a
# THREADS-thread Damselfly) or --same-shard (all on one shard), so the cost of a cross-shard
# transaction shows against the same command on one shard. Needs redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

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

# shellcheck source=benches/servers.sh
source benches/servers.sh
start_redis_and_damselfly "$THREADS"

SPREAD="--spread-shards $THREADS"
SAME="--same-shard $THREADS"
MGET10="MGET %0 %1 %2 %3 %4 %5 %6 %7 %8 %9"
# name | load arguments
SCENARIOS=(
  "MSET 2 keys, different shards|--cmd 'MSET %0 v %1 v' $SPREAD"
  "MSET 2 keys, one shard|--cmd 'MSET %0 v %1 v' $SAME"
  "MGET 10 keys, spread over shards|--cmd '$MGET10' $SPREAD"
  "MGET 10 keys, one shard|--cmd '$MGET10' $SAME"
  "MULTI SET SET EXEC, different shards|--cmd MULTI --cmd 'SET %0 v' --cmd 'SET %1 v' --cmd EXEC $SPREAD"
  "MULTI SET SET EXEC, one shard|--cmd MULTI --cmd 'SET %0 v' --cmd 'SET %1 v' --cmd EXEC $SAME"
)

echo "damselfly $(git rev-parse --short HEAD), $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, $CLIENTS clients, ${SECONDS_PER}s x $ROUNDS rounds, Damselfly --threads $THREADS" >&2
measure() { eval "$LOAD load --port ${PORT[$1]} --clients $CLIENTS --seconds $SECONDS_PER $2"; }
each_run measure

python3 - "$RESULTS" <<'EOF'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    name, server, fields = line.rstrip("\n").split("|")
    kv = dict(f.split("=") for f in fields.split())
    rows.setdefault(name, {}).setdefault(server, []).append(kv)
med = lambda runs, k: statistics.median(float(r[k]) for r in runs)
print("| scenario | Redis ops/s | Damselfly ops/s | ratio | Redis p50/p99 µs | Damselfly p50/p99 µs |")
print("|---|---|---|---|---|---|")
for name, by in rows.items():
    r, d = by["redis"], by["damselfly"]
    print(f"| {name} | {med(r,'ops_per_sec'):,.0f} | {med(d,'ops_per_sec'):,.0f} | "
          f"{med(d,'ops_per_sec')/med(r,'ops_per_sec'):.2f}x | "
          f"{med(r,'p50_us'):.0f} / {med(r,'p99_us'):.0f} | {med(d,'p50_us'):.0f} / {med(d,'p99_us'):.0f} |")
EOF
