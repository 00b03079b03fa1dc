#!/usr/bin/env bash
# Instructions per request, redis-server vs Damselfly, counted by valgrind's callgrind: unlike
# time on this shared, noisy machine, the count repeats exactly for the same binary and load.
#
#   benches/instructions.sh [-n REQUESTS] [-P PIPELINE] [-t THREADS] [-b BINARY] [COMMAND...]
#
# Each server runs under callgrind (Damselfly with the epoll backend and THREADS threads,
# default 1, so one thread does everything, as redis-server's one thread does; with 2 the
# count includes the hops between threads) with instrumentation off; after
# a warm-up of 5,000 requests, instrumentation is switched on for REQUESTS requests of
# redis-benchmark (10 clients, 100,000 random keys, PIPELINE requests in flight per client),
# then off, and the count dumped. COMMAND is a redis-benchmark command; the default is
# EVALSHA of `return redis.call('set', KEYS[1], ARGV[1])` on one random key (`SHA` in
# COMMAND stands for that script's SHA). Prints instructions (callgrind's Ir) per request
# for each server. Needs valgrind, redis-server and redis-benchmark; BINARY defaults to the
# release build. Takes about a minute for 20,000 requests. With KEEP=DIR in the environment
# the callgrind files are kept in DIR (callgrind_annotate DIR/damselfly.callgrind); with
# LIBRARY=CODE, CODE is loaded with FUNCTION LOAD first, for FCALL commands.
set -euo pipefail
cd "$(dirname "$0")/.."

N=20000 P=16 THREADS=1 BIN=""
while getopts "n:P:t:b:" o; do
  case $o in
    n) N=$OPTARG ;;
    P) P=$OPTARG ;;
    t) THREADS=$OPTARG ;;
    b) BIN=$OPTARG ;;
    *) sed -n '2,18p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
if [ -z "$BIN" ]; then
  cargo build --release -q -p damselfly
  BIN=${CARGO_TARGET_DIR:-target}/release/damselfly
fi
BIN=$(realpath "$BIN")
COMMAND=("$@")
[ ${#COMMAND[@]} -gt 0 ] || COMMAND=(evalsha SHA 1 key:__rand_int__ v)
SCRIPT="return redis.call('set', KEYS[1], ARGV[1])"

WORK=$(mktemp -d)
VALGRIND=""
cleanup() { [ -n "$VALGRIND" ] && kill "$VALGRIND" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# count NAME COMMAND...: runs the server under callgrind and prints its instructions per request.
count() {
  local name=$1 port out
  shift
  port=$(free_port)
  out=$WORK/$name.callgrind
  (cd "$WORK" && exec valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$out" \
    "$@" --port "$port" >"$WORK/$name.log" 2>&1) &
  VALGRIND=$!
  for _ in $(seq 200); do
    redis-cli -p "$port" ping 2>/dev/null | grep -q PONG && break
    sleep 0.3
  done
  redis-cli -p "$port" ping 2>/dev/null | grep -q PONG || { echo "$name did not start: $(tail -3 "$WORK/$name.log")" >&2; exit 1; }
  local sha cmd=()
  sha=$(redis-cli -p "$port" script load "$SCRIPT")
  [ -z "${LIBRARY:-}" ] || redis-cli -p "$port" function load "$LIBRARY" >/dev/null
  for w in "${COMMAND[@]}"; do cmd+=("${w/#SHA/$sha}"); done
  redis-benchmark -p "$port" -c 10 -r 100000 -n 5000 -P "$P" -q "${cmd[@]}" >/dev/null
  callgrind_control -i on "$VALGRIND" >/dev/null 2>&1
  redis-benchmark -p "$port" -c 10 -r 100000 -n "$N" -P "$P" -q "${cmd[@]}" >/dev/null
  callgrind_control -i off "$VALGRIND" >/dev/null 2>&1
  callgrind_control -d "$VALGRIND" >/dev/null 2>&1
  kill "$VALGRIND"; wait "$VALGRIND" 2>/dev/null || true; VALGRIND=""
  local total
  total=$(callgrind_annotate "$out.1" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1}')
  printf '%-10s %8d instructions per request\n' "$name" $((total / N))
  if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$out.1" "$KEEP/$name.callgrind"; fi
}

echo "${COMMAND[*]}, $N requests, -P $P"
count redis redis-server --save '' --appendonly no
count damselfly "$BIN" --threads "$THREADS" --io-backend epoll --save '' --dir "$WORK"
