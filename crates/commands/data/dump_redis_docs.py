#!/usr/bin/python3
"""Writes redis-server's COMMAND DOCS reply as JSON for crates/commands/src/command_docs.rs.
Run against Debian's redis-server 7.0:

    redis-server --port 7777 --save '' --daemonize yes
    /usr/bin/python3 crates/commands/data/dump_redis_docs.py 7777 \\
        > crates/commands/data/redis-7.0-docs.json

Maps become JSON objects (the server writes their fields in Redis's fixed order), sets and
arrays JSON lists, strings and integers as they are.
"""
import json
import sys

import redis


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def pairs(flat):
    return [(text(flat[i]), flat[i + 1]) for i in range(0, len(flat), 2)]


def argument(flat):
    out = {}
    for k, v in pairs(flat):
        if k == "arguments":
            out[k] = [argument(a) for a in v]
        elif k == "flags":
            out[k] = [text(f) for f in v]
        else:
            out[k] = text(v)
    return out


def docs(flat):
    out = {}
    for k, v in pairs(flat):
        if k == "arguments":
            out[k] = [argument(a) for a in v]
        elif k == "subcommands":
            out[k] = {name: docs(d) for name, d in pairs(v)}
        elif k == "history":
            out[k] = [[text(x) for x in h] for h in v]
        elif k == "doc_flags":
            out[k] = [text(f) for f in v]
        else:
            out[k] = text(v)
    return out


def main():
    # A bare connection: redis-py's callbacks would reshape the reply.
    conn = redis.Connection(port=int(sys.argv[1]))
    conn.send_command("COMMAND", "DOCS")
    reply = conn.read_response()
    table = {name: docs(d) for name, d in pairs(reply)}
    json.dump(table, sys.stdout, sort_keys=True, separators=(",", ":"))
    print()


if __name__ == "__main__":
    main()
