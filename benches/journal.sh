#!/usr/bin/env bash
# The journal against Redis's AOF, side by side in one run (docs/benchmarks.md, "Journal"):
# redis-benchmark SET and GET (1:1, 50 clients, random keys, 100-byte values) against
# redis-server and Damselfly with the same `appendfsync`, for always, everysec and no; and the
# bytes each wrote to disk per SET. With -m SECONDS, also memtier_benchmark's defaults (4
# threads x 50 clients, 32-byte values, random keys) with a 1:1 SET:GET ratio for SECONDS.
#
#   benches/journal.sh [-n REQUESTS] [-r ROUNDS] [-c CLIENTS] [-T THREADS] [-m SECONDS]
#
# Servers take turns within each round; the table gives medians over the rounds. Needs
# redis-server, redis-benchmark and a release build of damselfly (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

REQUESTS=100000
ROUNDS=3
CLIENTS=50
THREADS=2
MEMTIER=0
while getopts "n:r:c:T:m:" opt; do
  case $opt in
    n) REQUESTS=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    c) CLIENTS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    m) MEMTIER=$OPTARG ;;
    *) exit 2 ;;
  esac
done

cargo build --release -q -p damselfly
BIN=target/release/damselfly
# shellcheck source=benches/servers.sh
source benches/servers.sh

echo "journal: $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, $CLIENTS clients, $REQUESTS requests per test, $ROUNDS rounds, Damselfly --threads $THREADS" >&2
RESULTS=$WORK/results
: >"$RESULTS"
for round in $(seq "$ROUNDS"); do
  for fsync in always everysec no; do
    for server in redis damselfly; do
      dir=$WORK/$server-$fsync-$round
      mkdir -p "$dir"
      if [[ $server == redis ]]; then
        start "$server" redis-server --save '' --appendonly yes --appendfsync "$fsync" --dir "$dir" || exit 1
        files=$dir/appendonlydir
      else
        start "$server" "$BIN" --threads "$THREADS" --loglevel warning --appendonly yes --appendfsync "$fsync" --dir "$dir" || exit 1
        files=$dir/appendonlydir
      fi
      before=$(du -sb "$files" | cut -f1)
      for t in set get; do
        line=$(redis-benchmark -p "${PORT[$server]}" -c "$CLIENTS" -n "$REQUESTS" -r 100000 -d 100 -t "$t" -q --csv | tail -1)
        rps=$(echo "$line" | awk -F'","' '{print $2}')
        echo "$fsync|$t|$server|$rps" >>"$RESULTS"
        echo "round $round: $fsync $t / $server: $rps" >&2
      done
      after=$(du -sb "$files" | cut -f1)
      echo "$fsync|bytes per SET|$server|$(( (after - before) / REQUESTS ))" >>"$RESULTS"
      if [ "$MEMTIER" -gt 0 ]; then
        rps=$(memtier_benchmark -p "${PORT[$server]}" --ratio=1:1 --test-time="$MEMTIER" \
          --hide-histogram 2>/dev/null | awk '/^Totals/ {print $2}')
        echo "$fsync|memtier 1:1|$server|$rps" >>"$RESULTS"
        echo "round $round: $fsync memtier 1:1 / $server: $rps" >&2
      fi
      kill "${PID[$server]}"; wait "${PID[$server]}" 2>/dev/null || true
    done
  done
done

python3 - "$RESULTS" <<'EOF'
import sys, statistics, collections
rows = collections.OrderedDict()
for line in open(sys.argv[1]):
    fsync, test, server, value = line.rstrip("\n").split("|")
    rows.setdefault((fsync, test), {}).setdefault(server, []).append(float(value))
print("| appendfsync | test | Redis | Damselfly | Damselfly/Redis |")
print("|---|---|---|---|---|")
for (fsync, test), by in rows.items():
    r, d = (statistics.median(by[s]) for s in ("redis", "damselfly"))
    unit = "" if test.startswith("bytes") else " ops/s"
    print(f"| {fsync} | {test.upper() if test in ('set', 'get') else test} | {r:,.0f}{unit} | {d:,.0f}{unit} | {d/r:.2f}x |")
EOF
