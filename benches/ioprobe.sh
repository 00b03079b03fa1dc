#!/usr/bin/env bash
# What an event loop can save in the kernel on this machine: redis-server, the bare one-thread
# GET/SET server of `damselfly-bench ioprobe` over epoll and over io_uring (multishot receive
# into provided buffers, a turn's sends and its wait in one io_uring_enter, DEFER_TASKRUN),
# and Damselfly with one thread (epoll backend), taking turns:
#
#   benches/ioprobe.sh [-r ROUNDS] [-n REQUESTS] [-P PIPELINE]
#
# Each round runs `redis-benchmark -t set,get -c 50 -r 100000 -n REQUESTS -P PIPELINE` against
# each server and reads the server's user and kernel CPU time from /proc around it. Prints a
# markdown table of medians: requests/s (SET, GET) and user and kernel µs per request. Needs
# redis-server and redis-benchmark, and a kernel that allows io_uring (6.1 or later).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS=3 REQUESTS=200000 PIPELINE=1
while getopts "r:n:P:" o; do
  case $o in
    r) ROUNDS=$OPTARG ;;
    n) REQUESTS=$OPTARG ;;
    P) PIPELINE=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
cargo build --release -q -p damselfly -p damselfly-bench
BIN=${CARGO_TARGET_DIR:-target}/release
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
OUT=$(mktemp)
DIR=$(mktemp -d)
PID=""
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$OUT" "$DIR"; }
trap cleanup EXIT
ticks=$(getconf CLK_TCK)

for round in $(seq "$ROUNDS"); do
  for server in redis probe-epoll probe-uring damselfly-1; do
    # A fresh port each time: a closed io_uring lets go of its listening socket a little
    # after its process is gone.
    PORT=$(free_port)
    case $server in
      redis) redis-server --port "$PORT" --save "" --appendonly no >/dev/null 2>&1 & ;;
      probe-*) "$BIN/damselfly-bench" ioprobe --mode "${server#probe-}" --port "$PORT" --exit-after 900 >/dev/null 2>&1 & ;;
      damselfly-1) "$BIN/damselfly" --port "$PORT" --threads 1 --io-backend epoll --save "" --dir "$DIR" >"$DIR/log" 2>&1 & ;;
    esac
    PID=$!
    for _ in $(seq 100); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
    read -r u0 s0 < <(awk '{print $14, $15}' "/proc/$PID/stat")
    rates=$(redis-benchmark -p "$PORT" -t set,get -c 50 -r 100000 -n "$REQUESTS" -P "$PIPELINE" -q 2>/dev/null \
      | tr '\r' '\n' | grep "requests per second" | awk '{print $2}' | tr '\n' ' ')
    read -r u1 s1 < <(awk '{print $14, $15}' "/proc/$PID/stat")
    kill "$PID"; wait "$PID" 2>/dev/null || true; PID=""
    echo "$server $rates $(( u1 - u0 )) $(( s1 - s0 ))" >>"$OUT"
    echo "round $round $server: $rates" >&2
  done
done

python3 - "$OUT" "$REQUESTS" "$ticks" "$PIPELINE" <<'EOF'
import statistics, sys
path, n, ticks, p = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = {}
for line in open(path):
    name, set_rate, get_rate, user, kernel = line.split()
    rows.setdefault(name, []).append((float(set_rate), float(get_rate),
        int(user) * 1e6 / ticks / (2 * n), int(kernel) * 1e6 / ticks / (2 * n)))
print(f"| server, -P {p} | SET req/s | GET req/s | user µs/req | kernel µs/req |")
print("|---|---|---|---|---|")
for name, samples in rows.items():
    med = [statistics.median(s[i] for s in samples) for i in range(4)]
    print(f"| {name} | {med[0]:,.0f} | {med[1]:,.0f} | {med[2]:.2f} | {med[3]:.2f} |")
EOF
