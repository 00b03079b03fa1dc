#!/usr/bin/env bash
# Pub/Sub side by side: redis-server vs Damselfly, same machine, same run.
#
#   benches/pubsub.sh [-s SECONDS] [-r ROUNDS] [-T THREADS]
#
# `damselfly-bench pubsub` (closed-loop publishers, 16 PUBLISHes in flight each, 32-byte
# payloads carrying their send time; one second of warm-up, then SECONDS measured): one
# publisher on one channel with 1, 100 and 1,000 subscribers (every message reaches every
# subscriber); 50 publishers round-robin over 1,000 channels with 1,000 subscribers (each
# message reaches one); one publisher over 100 channels with 100 pattern subscribers (each
# PSUBSCRIBEs a pattern that matches one channel). Servers alternate (A B A B ...) for ROUNDS
# rounds; the table has the medians of messages delivered per second, their ratio, the 99th
# percentile of delivery latency (PUBLISH sent to message read), and each server's CPU time
# (user + system, from /proc/PID/stat around each run) per delivered message, warm-up and
# drain included. Runs that lost messages or had subscribers disconnected are listed after
# the table. Needs redis-server and redis-cli. Set CARGO_TARGET_DIR to build elsewhere.
set -euo pipefail
cd "$(dirname "$0")/.."

SECONDS_PER=5
ROUNDS=3
THREADS=2
while getopts "s:r:T:" opt; do
  case $opt in
    s) SECONDS_PER=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

# The client holds up to 1,050 connections.
if [ "$(ulimit -n)" != unlimited ] && [ "$(ulimit -n)" -lt 4096 ]; then
  ulimit -n 4096 || { echo "need an open-files limit of at least 4096" >&2; exit 1; }
fi

# shellcheck source=benches/servers.sh
source benches/servers.sh
start_redis_and_damselfly "$THREADS"
for s in redis damselfly; do
  max=$(redis-cli -p "${PORT[$s]}" config get maxclients | tail -1)
  if [ "$max" -lt 2000 ]; then
    echo "$s: maxclients is $max, too low for 1,050 clients" >&2
    exit 1
  fi
done

field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# name | damselfly-bench pubsub arguments
SCENARIOS=(
  "1 publisher, 1 channel, 1 subscriber|--publishers 1 --channels 1 --subscribers 1"
  "1 publisher, 1 channel, 100 subscribers|--publishers 1 --channels 1 --subscribers 100"
  "1 publisher, 1 channel, 1,000 subscribers|--publishers 1 --channels 1 --subscribers 1000"
  "50 publishers, 1,000 channels, 1,000 subscribers|--publishers 50 --channels 1000 --subscribers 1000"
  "1 publisher, 100 channels, 100 pattern subscribers|--publishers 1 --channels 100 --subscribers 100 --patterns"
)

echo "damselfly $(git rev-parse --short HEAD), $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, ${ROUNDS} rounds of ${SECONDS_PER} s, Damselfly --threads $THREADS" >&2
# Delivered/s, p99, CPU per delivered message, lost, disconnected, and the tool's whole line.
measure() { # server args
  local before after line us
  before=$(cpu_ticks "${PID[$1]}")
  # shellcheck disable=SC2086
  line=$("$LOAD" pubsub --port "${PORT[$1]}" --seconds "$SECONDS_PER" $2)
  after=$(cpu_ticks "${PID[$1]}")
  us=$(python3 -c "print(($after - $before) / $TICKS / max($(field delivered_all "$line"), 1) * 1e6)")
  echo "$(field delivered_per_sec "$line")|$(field p99_us "$line")|$us|$(field lost "$line")|$(field disconnected "$line")|$line"
}
each_run measure

python3 - "$RESULTS" <<'PY'
import sys, statistics, collections
rows = collections.OrderedDict()
odd = []
for line in open(sys.argv[1]):
    name, server, rate, p99, us, lost, disc, raw = line.rstrip("\n").split("|")
    rows.setdefault(name, {}).setdefault(server, []).append((float(rate), float(p99), float(us)))
    if int(lost) != 0 or int(disc) != 0:
        odd.append(f"- {name} / {server}: {raw}")
med = lambda runs, i: statistics.median(r[i] for r in runs)
print("| scenario | Redis delivered/s | Damselfly delivered/s | ratio | Redis p99 µs | Damselfly p99 µs | Redis CPU µs/msg | Damselfly CPU µs/msg |")
print("|---|---|---|---|---|---|---|---|")
for name, by in rows.items():
    r, d = by["redis"], by["damselfly"]
    print(f"| {name} | {med(r,0):,.0f} | {med(d,0):,.0f} | {med(d,0)/max(med(r,0),1):.2f}x "
          f"| {med(r,1):,.0f} | {med(d,1):,.0f} | {med(r,2):.2f} | {med(d,2):.2f} |")
print()
print("Runs that lost messages or subscribers:" if odd else "No run lost a message or a subscriber.")
for o in odd:
    print(o)
PY
