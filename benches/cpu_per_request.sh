#!/usr/bin/env bash
# Server CPU time per request of two Damselfly builds, alternating: each run starts a build
# with --threads 2, preloads 200,000 SETs, then measures the server's user+system time
# (/proc/<pid>/stat) across one redis-benchmark run. Prints one line per run; compare medians.
#
#   benches/cpu_per_request.sh OLD_BINARY NEW_BINARY [rounds] [-- redis-benchmark options]
#   benches/cpu_per_request.sh /tmp/df-old target/release/damselfly 5 -- -t get -P 16 -n 3000000
set -euo pipefail
old=$1 new=$2 rounds=${3:-5}
shift $(( $# >= 3 ? 3 : $# ))
[ "${1:-}" = "--" ] && shift
bench=("$@")
[ ${#bench[@]} -eq 0 ] && bench=(-t get -P 16 -n 3000000)
n=3000000
for ((i = 0; i < ${#bench[@]}; i++)); do
  [ "${bench[$i]}" = "-n" ] && n=${bench[$((i + 1))]}
done
port=7901
hz=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
for ((round = 1; round <= rounds; round++)); do
  for which in old new; do
    bin=$old; [ "$which" = new ] && bin=$new
    dir=$(mktemp -d)
    "$bin" --port "$port" --dir "$dir" --threads 2 --save "" >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p "$port" -t set -c 50 -P 16 -n 200000 -r 100000 -q >/dev/null 2>&1
    before=$(ticks "$pid")
    redis-benchmark -p "$port" -c 50 -r 100000 -q "${bench[@]}" >/dev/null 2>&1
    after=$(ticks "$pid")
    echo "$round $which cpu_us_per_request=$(echo "scale=3; ($after - $before) * 1000000 / $hz / $n" | bc)"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
  done
done
