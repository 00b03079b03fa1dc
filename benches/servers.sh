# Sourced by the benchmark scripts: a work directory, a free TCP port, and start NAME CMD...
# which runs a server on a free port and its own unix socket, waits for PING and records
# PORT[NAME], SOCK[NAME] and PID[NAME]; start_redis_and_damselfly THREADS builds the release
# binaries and starts both servers as `redis` and `damselfly` (BIN and LOAD name the server
# and the load tool, under $CARGO_TARGET_DIR when it is set). Everything started is killed
# when the script exits. cpu_ticks PID reads a process's CPU time (user + system, in TICKS
# per second); each_run MEASURE runs the SCENARIOS for ROUNDS rounds.
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

declare -A PORT SOCK PID
start() { # name command...
  local name=$1; shift
  PORT[$name]=$(free_port); SOCK[$name]=$WORK/$name.sock
  "$@" --port "${PORT[$name]}" --unixsocket "${SOCK[$name]}" >"$WORK/$name.log" 2>&1 &
  PID[$name]=$!; PIDS+=("$!")
  for _ in $(seq 100); do redis-cli -p "${PORT[$name]}" ping >/dev/null 2>&1 && return; sleep 0.1; done
  echo "$name did not start: $(tail -1 "$WORK/$name.log")" >&2; return 1
}

start_redis_and_damselfly() { # threads
  cargo build --release -q -p damselfly -p damselfly-bench
  BIN=${CARGO_TARGET_DIR:-target}/release/damselfly
  LOAD=${CARGO_TARGET_DIR:-target}/release/damselfly-bench
  start redis redis-server --save '' --appendonly no || exit 1
  start damselfly "$BIN" --threads "$1" --loglevel warning --save "" --dir "$WORK" || exit 1
}

TICKS=$(getconf CLK_TCK)
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# each_run MEASURE: for ROUNDS rounds, each "name|rest" of SCENARIOS on redis, then damselfly
# (taking turns), runs `MEASURE SERVER REST`, which prints one line, and appends
# "name|server|line" to $RESULTS, showing progress on stderr.
each_run() {
  RESULTS=$WORK/results
  : >"$RESULTS"
  local round s name server line
  for round in $(seq "$ROUNDS"); do
    for s in "${SCENARIOS[@]}"; do
      name=${s%%|*}
      for server in redis damselfly; do
        line=$("$1" "$server" "${s#*|}")
        echo "$name|$server|$line" >>"$RESULTS"
        echo "round $round: $name / $server: $line" >&2
      done
    done
  done
}

# load SERVER ARGS [REQUESTS]: runs redis-benchmark with ARGS (its -t tests, REQUESTS each,
# $REQUESTS by default), or memtier_benchmark's defaults when ARGS is `memtier` (for about
# as long as REQUESTS take at 30,000 a second, at least one second), against SERVER; prints
# the requests it made.
load() {
  local server=$1 args=$2 n=${3:-$REQUESTS}
  if [ "$args" = memtier ]; then
    local secs=$(((n + 29999) / 30000))
    memtier_benchmark -p "${PORT[$server]}" --hide-histogram --test-time=$secs 2>/dev/null |
      awk -v s="$secs" '/^Totals/ {print int($2 * s)}'
  else
    # shellcheck disable=SC2086
    redis-benchmark -p "${PORT[$server]}" $args -n "$n" -q >/dev/null 2>&1
    echo $((n * $(echo "$args" | awk '{for (i = 1; i < NF; i++) if ($i == "-t") print split($(i + 1), t, ",")}')))
  fi
}
