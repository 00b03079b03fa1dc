#!/usr/bin/env bash
# Snapshots against Redis's fork-based BGSAVE, side by side in one run (docs/benchmarks.md,
# "Persistence"): a dataset of about KEYS keys of SIZE bytes, then BGSAVE while
# redis-benchmark overwrites the same keys at full speed; the save's duration, the memory the
# save costs (Damselfly: peak RSS growth during the save, sampled every 20 ms; Redis: its
# child's copy-on-write, rdb_last_cow_size, plus the parent's growth), and GET p99 under the
# same writers with and without a save running. Then the load at start-up: each server restarted on its own files.
#
#   benches/bgsave.sh [-k KEYS] [-s SIZE] [-T THREADS]
#
# Needs redis-server, redis-benchmark and a release build of damselfly (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=2000000
SIZE=1024
THREADS=2
while getopts "k:s:T:" opt; do
  case $opt in
    k) KEYS=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    *) exit 2 ;;
  esac
done

cargo build --release -q -p damselfly
BIN=$(realpath target/release/damselfly)
# shellcheck source=benches/servers.sh
source benches/servers.sh

rss_kb() { awk '/^VmRSS/ {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
field() { redis-cli -p "$1" info persistence | tr -d '\r' | awk -F: -v f="$2" '$1 == f {print $2}'; }
p99() { # port: GET p99 (ms) over 100k requests, 20 clients
  redis-benchmark -p "$1" -c 20 -n 100000 -r "$KEYS" -t get --csv -q | tail -1 | awk -F'","' '{gsub(/"/, "", $7); print $7}'
}

echo "bgsave: $(redis-server --version | awk '{print $3}'), $(nproc) CPUs, $KEYS keys of $SIZE bytes, Damselfly --threads $THREADS" >&2
for server in redis damselfly; do
  dir=$WORK/$server
  mkdir -p "$dir"
  if [[ $server == redis ]]; then
    start "$server" redis-server --save '' --appendonly no --dir "$dir" --enable-debug-command yes || exit 1
  else
    start "$server" "$BIN" --threads "$THREADS" --loglevel warning --save '' --dir "$dir" || exit 1
  fi
  port=${PORT[$server]}
  pid=${PID[$server]}
  # The dataset in redis-benchmark's key space (key:000000NNNNNN), so the writers below
  # overwrite existing keys: 3 x KEYS random SETs cover about 95% of the KEYS names.
  redis-benchmark -p "$port" -c 4 -P 64 -n $(( KEYS * 3 )) -r "$KEYS" -d "$SIZE" -t set -q >/dev/null 2>&1
  # Writers at full speed on the same keys, before and during the save.
  redis-benchmark -p "$port" -c 20 -n 100000000 -r "$KEYS" -d "$SIZE" -t set -q >/dev/null 2>&1 &
  writers=$!
  sleep 1
  quiet_p99=$(p99 "$port")
  before=$(rss_kb "$pid")
  start_s=$(date +%s.%N)
  redis-cli -p "$port" bgsave >/dev/null
  peak=$before
  saving_p99=""
  while [[ $(field "$port" rdb_bgsave_in_progress) == 1 ]]; do
    r=$(rss_kb "$pid"); (( r > peak )) && peak=$r
    if [[ -z $saving_p99 ]]; then
      saving_p99=$(p99 "$port")
    fi
    sleep 0.02
  done
  end_s=$(date +%s.%N)
  kill "$writers" 2>/dev/null || true
  wait "$writers" 2>/dev/null || true
  secs=$(echo "$end_s - $start_s" | bc)
  cow=$(field "$port" rdb_last_cow_size)
  status=$(field "$port" rdb_last_bgsave_status)
  growth_mb=$(( (peak - before) / 1024 ))
  data_mb=$(( before / 1024 ))
  echo "$server|save_seconds=$secs|rss_before_mb=$data_mb|parent_growth_mb=$growth_mb|cow_mb=$(( ${cow:-0} / 1048576 ))|get_p99_quiet_ms=$quiet_p99|get_p99_saving_ms=${saving_p99:-n/a}|status=$status"
  # Load at start-up: restart on the files just written.
  redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true
  wait "$pid" 2>/dev/null || true
  load_start=$(date +%s.%N)
  if [[ $server == redis ]]; then
    start "$server-load" redis-server --save '' --appendonly no --dir "$dir" || exit 1
  else
    start "$server-load" "$BIN" --threads "$THREADS" --loglevel warning --save '' --dir "$dir" || exit 1
  fi
  # Both answer -LOADING while loading: loaded once PING says PONG.
  until [[ $(redis-cli -p "${PORT[$server-load]}" ping 2>/dev/null) == PONG ]]; do sleep 0.05; done
  load_end=$(date +%s.%N)
  keys=$(redis-cli -p "${PORT[$server-load]}" dbsize)
  echo "$server|load_seconds=$(echo "$load_end - $load_start" | bc)|keys=$keys"
  redis-cli -p "${PORT[$server-load]}" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
done
