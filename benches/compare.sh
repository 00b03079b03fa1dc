#!/usr/bin/env bash
# Side-by-side throughput and CPU cost: redis-server vs Damselfly, same machine, same run.
#
#   benches/compare.sh [-n REQUESTS] [-r ROUNDS] [-t TESTS] [-P "1 16"] [-b "epoll uring"]
#
# For each round, transport (TCP, unix socket), pipeline depth and server (A B A B ...), runs
#   redis-benchmark -t TESTS -n REQUESTS -c 50 -P DEPTH [-s SOCKET | -p PORT] -q
# and reads each server's CPU time (utime+stime from /proc/PID/stat) around the run. Prints a
# markdown table of medians over rounds: requests/s, CPU seconds per million requests, and the
# Damselfly/Redis ratios. Needs redis-server and redis-benchmark (apt-get install redis-server
# redis-tools) and a release build (cargo build --release).
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=2000000
ROUNDS=3
TESTS="ping,set,get"
DEPTHS="1 16"
BACKENDS="epoll uring"
THREADS=2
while getopts "n:r:t:P:b:T:" opt; do
  case $opt in
    n) REQUESTS=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    t) TESTS=$OPTARG ;;
    P) DEPTHS=$OPTARG ;;
    b) BACKENDS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

BIN=target/release/damselfly
[ -x "$BIN" ] || cargo build --release -q
# shellcheck source=benches/servers.sh
source benches/servers.sh

SERVERS=(redis)
start redis redis-server --save '' --appendonly no || exit 1
for b in $BACKENDS; do
  if start "damselfly-$b" "$BIN" --threads "$THREADS" --io-backend "$b" --loglevel warning --save "" --dir "$WORK"; then
    SERVERS+=("damselfly-$b")
  else
    echo "skipping damselfly-$b" >&2
  fi
done

HZ=$(getconf CLK_TCK)
RESULTS=$WORK/results.tsv
for round in $(seq "$ROUNDS"); do
  for transport in tcp unix; do
    for depth in $DEPTHS; do
      for server in "${SERVERS[@]}"; do
        if [ "$transport" = tcp ]; then target=(-p "${PORT[$server]}"); else target=(-s "${SOCK[$server]}"); fi
        before=$(cpu_ticks "${PID[$server]}")
        out=$(redis-benchmark "${target[@]}" -t "$TESTS" -n "$REQUESTS" -c 50 -P "$depth" -q 2>/dev/null | tr '\r' '\n' | grep 'requests per second' || true)
        after=$(cpu_ticks "${PID[$server]}")
        ntests=$(echo "$out" | grep -c . || true)
        cpu=$(python3 -c "print(($after-$before)/$HZ)")
        while read -r line; do
          [ -z "$line" ] && continue
          test=${line%%:*}; rps=$(echo "$line" | sed -E 's/.*: ([0-9.]+) requests.*/\1/')
          # CPU is shared across the run's tests in proportion to their request counts.
          printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$transport" "$depth" "$server" "$test" "$rps" "$(python3 -c "print($cpu/$ntests/($REQUESTS/1e6))")" >>"$RESULTS"
        done <<<"$out"
        echo "round $round $transport -P $depth $server done" >&2
      done
    done
  done
done

python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
data = collections.defaultdict(list)
for rnd, tr, depth, server, test, rps, cpu in rows:
    data[(tr, int(depth), test, server)].append((float(rps), float(cpu)))
servers = sorted({r[3] for r in rows}, key=lambda s: (s != "redis", s))
print("| transport | -P | test | " + " | ".join(f"{s} req/s" for s in servers) + " | " +
      " | ".join(f"{s} CPU s/M req" for s in servers) + " | " +
      " | ".join(f"{s}/redis req/s" for s in servers if s != "redis") + " | " +
      " | ".join(f"{s}/redis CPU" for s in servers if s != "redis") + " |")
print("|" + "---|" * (3 + 2 * len(servers) + 2 * (len(servers) - 1)))
keys = sorted({(k[0], k[1], k[2]) for k in data}, key=lambda k: (k[0], k[1], k[2]))
for tr, depth, test in keys:
    med = {s: (statistics.median(v[0] for v in data[(tr, depth, test, s)]),
               statistics.median(v[1] for v in data[(tr, depth, test, s)]))
           for s in servers if (tr, depth, test, s) in data}
    r = med.get("redis", (0, 0))
    cells = [f"{med[s][0]:,.0f}" for s in servers] + [f"{med[s][1]:.2f}" for s in servers]
    cells += [f"{med[s][0]/r[0]:.2f}" if r[0] else "-" for s in servers if s != "redis"]
    cells += [f"{med[s][1]/r[1]:.2f}" if r[1] else "-" for s in servers if s != "redis"]
    print(f"| {tr} | {depth} | {test} | " + " | ".join(cells) + " |")
PY
