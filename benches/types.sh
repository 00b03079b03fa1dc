#!/bin/bash
# redis-benchmark data-type tests against redis-server and Damselfly (--threads 2), alternating,
# 2 rounds, 50 clients, 100k requests, -P 1 and -P 16. Run from the repo root after
# `cargo build --release`; ports 7781/7782. Medians are in docs/benchmarks.md.
set -e
T=lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,lrange_100,lrange_600
redis-server --port 7781 --save '' --appendonly no >/dev/null 2>&1 &
RP=$!
./target/release/damselfly --port 7782 --threads 2 --loglevel warning --save "" >/dev/null 2>&1 &
DP=$!
trap 'kill $RP $DP 2>/dev/null' EXIT
sleep 1
for round in 1 2; do
  for P in 1 16; do
    for port in 7781 7782; do
      redis-cli -p $port flushall >/dev/null
      echo "round=$round P=$P port=$port"
      redis-benchmark -p $port -t $T -c 50 -n 100000 -P $P -q 2>/dev/null | tr '\r' '\n' | grep -E "requests per second" 
    done
  done
done
