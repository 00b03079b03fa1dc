#!/usr/bin/env bash
# Where a request's CPU goes, Redis against Damselfly, side by side on one machine:
#
#   benches/reqpath.sh [-r ROUNDS] [-n REQUESTS] [-T THREADS] [-p]
#
# For each workload (redis-benchmark SET+GET, 50 clients: -P 1 on 100,000 random keys, -P 1
# on one key, -P 16 on 100,000 random keys; memtier_benchmark defaults when it is on PATH),
# each round runs it against redis-server and Damselfly (--threads THREADS, 2 by default),
# taking turns, and reads from /proc around the run each server's user and kernel CPU time
# and its context switches (all threads). Prints a markdown table of medians per request:
# requests/s, user µs, kernel µs, context switches, and the ratios. Then, once per workload
# and server with fewer requests, `strace -c -f` counts the system calls per request, and
# with -p `perf record -g` prints the top of a profile (the machine's perf must be allowed:
# kernel.perf_event_paranoid <= 1, or root). Needs redis-server, redis-benchmark, strace.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3
REQUESTS=300000
THREADS=2
PROFILE=0
while getopts "r:n:T:p" opt; do
  case $opt in
    r) ROUNDS=$OPTARG ;;
    n) REQUESTS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    p) PROFILE=1 ;;
    *) exit 2 ;;
  esac
done

# shellcheck source=benches/servers.sh
source benches/servers.sh
start_redis_and_damselfly "$THREADS"

SCENARIOS=(
  "P1-random|-t set,get -c 50 -P 1 -r 100000"
  "P1-onekey|-t set,get -c 50 -P 1"
  "P16-random|-t set,get -c 50 -P 16 -r 100000"
)
MEMTIER=0
if command -v memtier_benchmark >/dev/null; then
  MEMTIER=1
  SCENARIOS+=("memtier-default|memtier")
fi

switches() { cat /proc/"$1"/task/*/status | awk '/ctxt_switches/ {s += $2} END {print s}'; }
usage() { awk '{print $14, $15}' "/proc/$1/stat"; }


measure() { # server args -> "req/s user_us sys_us switches"
  local server=$1 args=$2 p=${PID[$1]}
  local u0 s0 c0 u1 s1 c1 t0 t1 n
  read -r u0 s0 < <(usage "$p"); c0=$(switches "$p"); t0=$(date +%s.%N)
  n=$(load "$server" "$args")
  t1=$(date +%s.%N); read -r u1 s1 < <(usage "$p"); c1=$(switches "$p")
  python3 -c "n=$n; t=$t1-$t0; print(f'{n/t:.0f} {($u1-$u0)/$TICKS*1e6/n:.3f} {($s1-$s0)/$TICKS*1e6/n:.3f} {($c1-$c0)/n:.3f}')"
}

each_run measure

echo "Damselfly --threads $THREADS; $ROUNDS round(s); medians per request."
echo
python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = [l.rstrip("\n").split("|") for l in open(sys.argv[1]) if l.strip()]
data = collections.defaultdict(list)
for name, server, line in rows:
    data[(name, server)].append([float(x) for x in line.split()])
names = list(dict.fromkeys(r[0] for r in rows))
print("| workload | req/s Redis / Damselfly | user µs/req Redis / Damselfly | kernel µs/req Redis / Damselfly | context switches/req Redis / Damselfly | ratios: req/s, user, total CPU |")
print("|---|---|---|---|---|---|")
for n in names:
    r = [statistics.median(c) for c in zip(*data[(n, "redis")])]
    d = [statistics.median(c) for c in zip(*data[(n, "damselfly")])]
    print(f"| {n} | {r[0]:,.0f} / {d[0]:,.0f} | {r[1]:.2f} / {d[1]:.2f} | {r[2]:.2f} / {d[2]:.2f} | "
          f"{r[3]:.3f} / {d[3]:.3f} | {d[0]/r[0]:.2f}x, {d[1]/r[1]:.2f}x, {(d[1]+d[2])/(r[1]+r[2]):.2f}x |")
PY

echo
echo "System calls per request (strace -c -f, $((REQUESTS / 10)) requests per test):"
for s in "${SCENARIOS[@]}"; do
  name=${s%%|*}
  for server in redis damselfly; do
    strace -c -f -p "${PID[$server]}" -o "$WORK/strace" &
    tracer=$!
    sleep 0.5
    n=$(load "$server" "${s#*|}" $((REQUESTS / 10)))
    kill -INT "$tracer"; wait "$tracer" 2>/dev/null || true
    calls=$(awk -v n="$n" '$NF ~ /^[a-z_0-9]+$/ && $4 ~ /^[0-9]+$/ {printf "%s %.3f, ", $NF, $4 / n}' "$WORK/strace")
    echo "- $name / $server: ${calls%, }"
  done
done

if [ "$PROFILE" = 1 ]; then
  for s in "${SCENARIOS[@]}"; do
    name=${s%%|*}
    for server in redis damselfly; do
      perf record -F 2000 -g -p "${PID[$server]}" -o "$WORK/perf.data" >/dev/null 2>&1 &
      rec=$!
      sleep 0.5
      load "$server" "${s#*|}" >/dev/null
      kill -INT "$rec"; wait "$rec" 2>/dev/null || true
      echo
      echo "Profile, $name / $server (self time, top symbols):"
      perf report -i "$WORK/perf.data" --no-children --sort sym 2>/dev/null >"$WORK/report" || true
      grep -E '^ +[0-9.]+%' "$WORK/report" | head -12 | sed 's/^/    /' || true
    done
  done
fi
[ "$MEMTIER" = 1 ] || echo "(memtier_benchmark not on PATH: its workload was skipped)"
