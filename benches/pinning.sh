#!/usr/bin/env bash
# Pinned against unpinned shard threads, with Redis alongside (docs/benchmarks.md, "Pinning
# threads"): Damselfly `--pin-threads yes` and `--pin-threads no` (what the default, `auto`,
# picks when the affinity mask is the whole machine), taking turns with redis-server in each
# round, on the request-path workloads of benches/reqpath.sh (redis-benchmark SET+GET with 50
# clients: -P 1 on random keys, -P 1 on one key, -P 16 on random keys; memtier_benchmark
# defaults when it is on PATH) and on SET under `appendonly yes --appendfsync always`.
#
#   benches/pinning.sh [-r ROUNDS] [-n REQUESTS] [-T THREADS]
#
# Prints medians of requests/s and server CPU (user + system) per request, and the ratios to
# Redis. Needs redis-server, redis-benchmark and a release build of damselfly (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3
REQUESTS=200000
THREADS=2
while getopts "r:n:T:" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    n) REQUESTS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

cargo build --release -q -p damselfly
BIN=${CARGO_TARGET_DIR:-target}/release/damselfly
# shellcheck source=benches/servers.sh
source benches/servers.sh
SERVERS=(redis pinned unpinned)

# start_all [SERVER ARGS...]: the three servers, each with the given extra arguments.
start_all() {
  for server in "${SERVERS[@]}"; do
    [ -n "${PID[$server]:-}" ] && { kill "${PID[$server]}"; wait "${PID[$server]}" 2>/dev/null || true; }
    mkdir -p "$WORK/$server"
    case $server in
      redis) start redis redis-server --save '' --dir "$WORK/$server" "$@" || exit 1 ;;
      pinned) start pinned "$BIN" --threads "$THREADS" --pin-threads yes --loglevel warning --save '' --dir "$WORK/$server" "$@" || exit 1 ;;
      unpinned) start unpinned "$BIN" --threads "$THREADS" --pin-threads no --loglevel warning --save '' --dir "$WORK/$server" "$@" || exit 1 ;;
    esac
  done
}


RESULTS=$WORK/results
: >"$RESULTS"
# run_rounds SCENARIO...: each "name|load arguments" on every server, taking turns.
run_rounds() {
  local round s server n t0 t1 c0 c1
  for round in $(seq "$ROUNDS"); do
    for s in "$@"; do
      for server in "${SERVERS[@]}"; do
        c0=$(cpu_ticks "${PID[$server]}"); t0=$(date +%s.%N)
        n=$(load "$server" "${s#*|}")
        t1=$(date +%s.%N); c1=$(cpu_ticks "${PID[$server]}")
        line=$(python3 -c "print(f'{$n/($t1-$t0):.0f} {($c1-$c0)/$TICKS*1e6/$n:.2f}')")
        echo "${s%%|*}|$server|$line" >>"$RESULTS"
        echo "round $round: ${s%%|*} / $server: $line" >&2
      done
    done
  done
}

echo "pinning: $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, Damselfly --threads $THREADS, $ROUNDS rounds" >&2
start_all --appendonly no
SCENARIOS=(
  "P1-random|-t set,get -c 50 -P 1 -r 100000"
  "P1-onekey|-t set,get -c 50 -P 1"
  "P16-random|-t set,get -c 50 -P 16 -r 100000"
)
command -v memtier_benchmark >/dev/null && SCENARIOS+=("memtier-default|memtier")
run_rounds "${SCENARIOS[@]}"
start_all --appendonly yes --appendfsync always
run_rounds "always-SET|-t set -c 50 -P 1 -r 100000 -d 100"

python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
data = collections.defaultdict(list)
for name, server, line in rows:
    data[(name, server)].append([float(x) for x in line.split()])
print("| workload | req/s Redis / pinned / unpinned | CPU µs/req Redis / pinned / unpinned | req/s vs Redis: pinned, unpinned |")
print("|---|---|---|---|")
for n in dict.fromkeys(r[0] for r in rows):
    r, p, u = ([statistics.median(c) for c in zip(*data[(n, s)])] for s in ("redis", "pinned", "unpinned"))
    print(f"| {n} | {r[0]:,.0f} / {p[0]:,.0f} / {u[0]:,.0f} | {r[1]:.2f} / {p[1]:.2f} / {u[1]:.2f} | {p[0]/r[0]:.2f}x, {u[0]/r[0]:.2f}x |")
PY
