#!/usr/bin/env bash
# A large request arriving in pieces, side by side: one MSET of KEYS keys with 80-byte values
# (about 21 MB for 200,000 keys) written in 16 KB writes, against redis-server and Damselfly,
# ROUNDS times each, alternating; prints the seconds from the first write to the reply.
#
#   benches/pieces.sh [-k KEYS] [-r ROUNDS] [-T THREADS] [-t TAG]
#
# -t puts every key in one hash tag (one shard, no transaction); by default the keys spread
# over the shards and the MSET runs as a cross-shard transaction. Needs redis-server.
set -euo pipefail
cd "$(dirname "$0")/.."

KEYS=200000
ROUNDS=3
THREADS=2
TAG=""
while getopts "k:r:T:t:" opt; do
  case $opt in
    k) KEYS=$OPTARG ;;
    r) ROUNDS=$OPTARG ;;
    T) THREADS=$OPTARG ;;
    t) TAG=$OPTARG ;;
    *) exit 2 ;;
  esac
done

cargo build --release -q -p damselfly
# shellcheck source=benches/servers.sh
source benches/servers.sh
start redis redis-server --save '' --appendonly no || exit 1
start damselfly target/release/damselfly --threads "$THREADS" --loglevel warning --save "" --dir "$WORK" || exit 1

mset() { # port
  python3 - "$1" "$KEYS" "$TAG" <<'PY'
import socket, sys, time
port, n, tag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3].encode()
parts = [b"*%d\r\n$4\r\nMSET\r\n" % (1 + 2 * n)]
for i in range(n):
    k = tag + b"key:%08d" % i
    parts.append(b"$%d\r\n%s\r\n$80\r\n%s\r\n" % (len(k), k, b"v" * 80))
wire = b"".join(parts)
s = socket.create_connection(("127.0.0.1", port))
start = time.time()
for off in range(0, len(wire), 16384):
    s.sendall(wire[off:off + 16384])
reply = b""
while not reply.endswith(b"\r\n"):
    reply += s.recv(64)
assert reply == b"+OK\r\n", reply
print(f"{time.time() - start:.3f}")
PY
}

echo "pieces: $KEYS keys, tag '${TAG}', $ROUNDS rounds, Damselfly --threads $THREADS, $(git rev-parse --short HEAD)" >&2
for round in $(seq "$ROUNDS"); do
  for server in redis damselfly; do
    echo "round $round: $server $(mset "${PORT[$server]}") s"
  done
done
