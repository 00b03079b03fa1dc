#!/bin/bash
# Memory of large and many small collections, Redis against Damselfly (--threads 2): a
# 1,000,000-field hash, a 1,000,000-member sorted set, 1,000,000 hashes of 10 fields, and
# 20,000,000 tiny strings (`DEBUG POPULATE 20000000`, as in Dragonfly's dashtable document).
# Each data set is loaded (with `redis-cli --pipe`, or the populate) into a fresh server; the
# script prints the process's resident memory growth (VmRSS after loading minus before, in
# bytes), the server's `used_memory` and its allocator's active and resident bytes. Run from
# the repo root after `cargo build --release`; ports 7783/7784. DAMSELFLY=path picks another
# binary, DATA="bighash tiny20m" some of the data sets. Results are in docs/benchmarks.md.
set -e
gen() {
  python3 - "$1" <<'PY'
import sys
kind = sys.argv[1]
out = sys.stdout.buffer
def cmd(*args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    out.write(b"".join(parts))
if kind == "bighash":
    for b in range(10000):
        args = ["HSET", "bighash"]
        for i in range(b * 100, b * 100 + 100):
            args += ["field:%d" % i, "value:%d" % i]
        cmd(*args)
elif kind == "bigzset":
    for b in range(10000):
        args = ["ZADD", "bigzset"]
        for i in range(b * 100, b * 100 + 100):
            args += [str(i * 7 % 1000003), "member:%d" % i]
        cmd(*args)
else:
    for i in range(1000000):
        args = ["HSET", "hash:%d" % i]
        for f in range(10):
            args += ["field%d" % f, "value%d" % f]
        cmd(*args)
PY
}
rss() { awk '/VmRSS/ {printf "%d", $2 * 1024}' "/proc/$1/status"; }
# used_memory and the allocator's own figures (both servers use jemalloc).
used() { redis-cli -p "$1" info memory | tr -d '\r' | awk -F: '$1 ~ /^(used_memory|allocator_active|allocator_resident)$/ {printf "%s=%s ", $1, $2}'; }
measure() { # name port pid data
  local before after
  before=$(rss "$3")
  if [ "$4" = tiny20m ]; then
    redis-cli -p "$2" debug populate 20000000 >/dev/null
  else
    gen "$4" | redis-cli -p "$2" --pipe >/dev/null
  fi
  sleep 1
  after=$(rss "$3")
  echo "$4 $1 rss_growth=$((after - before)) $(used "$2")"
}
for data in ${DATA:-bighash bigzset smallhashes tiny20m}; do
  redis-server --port 7783 --save '' --appendonly no --enable-debug-command yes >/dev/null 2>&1 &
  RP=$!
  "${DAMSELFLY:-./target/release/damselfly}" --port 7784 --threads 2 --loglevel warning --save "" >/dev/null 2>&1 &
  DP=$!
  trap 'kill $RP $DP 2>/dev/null' EXIT
  sleep 1
  measure redis 7783 $RP $data
  measure damselfly 7784 $DP $data
  kill $RP $DP
  wait $RP $DP 2>/dev/null || true
done
