#!/usr/bin/python3
"""Writes redis-server's own description of its commands (the COMMAND reply) as the line
format crates/commands/src/redis_meta.rs reads. Run against Debian's redis-server 7.0:

    redis-server --port 7777 --save '' --daemonize yes
    /usr/bin/python3 crates/commands/data/dump_redis_commands.py 7777 \
        > crates/commands/data/redis-7.0-commands.txt

Lines (fields separated by one space, lists by commas, '-' for an empty list):
    cmd  <name or container|sub> <arity> <flags> <first> <last> <step> <categories> <tips>
    spec <flags> index <pos> | keyword <word> <startfrom> | unknown   range <last> <step> <limit> | keynum <idx> <first> <step> | unknown   [notes <text to the end of the line>]
A `spec` line belongs to the `cmd` line above it.
"""
import sys

import redis


def text(v):
    return v.decode() if isinstance(v, bytes) else v


def as_map(flat):
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def words(items):
    items = [text(i).lstrip("@") for i in items]
    return ",".join(items) if items else "-"


def emit(entry, out):
    name, arity, flags, first, last, step, cats, tips, specs, subs = entry[:10]
    out.append(f"cmd {text(name)} {arity} {words(flags)} {first} {last} {step} {words(cats)} {words(tips)}")
    for spec in specs:
        s = as_map(spec)
        bs = as_map(s["begin_search"])
        bspec = as_map(bs["spec"]) if bs.get("spec") else {}
        if text(bs["type"]) == "index":
            begin = f"index {bspec['index']}"
        elif text(bs["type"]) == "keyword":
            begin = f"keyword {text(bspec['keyword'])} {bspec['startfrom']}"
        else:
            begin = "unknown"
        fk = as_map(s["find_keys"])
        fspec = as_map(fk["spec"]) if fk.get("spec") else {}
        kind = text(fk["type"])
        if kind == "range":
            find = f"range {fspec['lastkey']} {fspec['keystep']} {fspec['limit']}"
        elif kind == "keynum":
            find = f"keynum {fspec['keynumidx']} {fspec['firstkey']} {fspec['keystep']}"
        else:
            find = "unknown"
        notes = f" notes {text(s['notes'])}" if "notes" in s else ""
        out.append(f"spec {words(s['flags'])} {begin} {find}{notes}")
    for sub in sorted(subs, key=lambda e: text(e[0])):
        emit(sub, out)


def main():
    # A bare connection: redis-py's COMMAND callback would reshape the reply.
    conn = redis.Connection(port=int(sys.argv[1]))
    conn.send_command("COMMAND")
    reply = conn.read_response()
    out = []
    for entry in sorted(reply, key=lambda e: text(e[0])):
        emit(entry, out)
    print("\n".join(out))


if __name__ == "__main__":
    main()
