//! COMMAND DOCS: Redis 7.0's documentation of each command (summary, since, group,
//! complexity, flags, history, arguments, subcommands), as redis-server gives it
//! (data/redis-7.0-docs.json, written by data/dump_redis_docs.py), written in Redis's field
//! order and reply types.

use std::sync::OnceLock;

use damselfly_protocol::ReplyBuf;
use serde_json::{Map, Value};

const DATA: &str = include_str!("../data/redis-7.0-docs.json");

fn table() -> &'static Map<String, Value> {
    static TABLE: OnceLock<Map<String, Value>> = OnceLock::new();
    TABLE.get_or_init(|| match serde_json::from_str(DATA) {
        Ok(Value::Object(m)) => m,
        _ => panic!("data/redis-7.0-docs.json is not a JSON object"),
    })
}

/// The documentation of `name` (`get`, or `client|kill`).
fn find(name: &str) -> Option<&'static Map<String, Value>> {
    let doc = match name.split_once('|') {
        None => table().get(name)?,
        Some((base, _)) => table().get(base)?.get("subcommands")?.get(name)?,
    };
    doc.as_object()
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

/// A list of status strings as Redis's flag sets (doc_flags, an argument's flags).
fn flags(out: &mut ReplyBuf, v: &Value) {
    let items = v.as_array().map(Vec::as_slice).unwrap_or_default();
    out.set(items.len());
    for f in items {
        out.simple(text(f));
    }
}

/// Writes one present field after another, in `order`, as a map.
fn fields(
    out: &mut ReplyBuf,
    doc: &Map<String, Value>,
    order: &[&str],
    mut write: impl FnMut(&mut ReplyBuf, &str, &Value),
) {
    let present: Vec<&str> = order
        .iter()
        .copied()
        .filter(|k| doc.contains_key(*k))
        .collect();
    out.map(present.len());
    for k in present {
        out.bulk(k.as_bytes());
        write(out, k, &doc[k]);
    }
}

fn arguments(out: &mut ReplyBuf, list: &Value) {
    let args = list.as_array().map(Vec::as_slice).unwrap_or_default();
    out.array(args.len());
    for a in args {
        let Some(a) = a.as_object() else {
            out.map(0);
            continue;
        };
        const ORDER: &[&str] = &[
            "name",
            "type",
            "key_spec_index",
            "token",
            "summary",
            "since",
            "deprecated_since",
            "flags",
            "arguments",
        ];
        fields(out, a, ORDER, |out, k, v| match k {
            "key_spec_index" => out.int(v.as_i64().unwrap_or(-1)),
            "flags" => flags(out, v),
            "arguments" => arguments(out, v),
            _ => out.bulk(text(v).as_bytes()),
        });
    }
}

fn write_doc(out: &mut ReplyBuf, doc: &Map<String, Value>) {
    const ORDER: &[&str] = &[
        "summary",
        "since",
        "group",
        "complexity",
        "module",
        "doc_flags",
        "deprecated_since",
        "replaced_by",
        "history",
        "arguments",
        "subcommands",
    ];
    fields(out, doc, ORDER, |out, k, v| match k {
        "doc_flags" => flags(out, v),
        "history" => {
            let entries = v.as_array().map(Vec::as_slice).unwrap_or_default();
            out.set(entries.len());
            for e in entries {
                let pair = e.as_array().map(Vec::as_slice).unwrap_or_default();
                out.array(pair.len());
                for p in pair {
                    out.bulk(text(p).as_bytes());
                }
            }
        }
        "arguments" => arguments(out, v),
        "subcommands" => {
            let subs = v.as_object();
            out.map(subs.map_or(0, Map::len));
            for (name, sub) in subs.into_iter().flatten() {
                out.bulk(name.as_bytes());
                match sub.as_object() {
                    Some(sub) => write_doc(out, sub),
                    None => out.map(0),
                }
            }
        }
        _ => out.bulk(text(v).as_bytes()),
    });
}

/// COMMAND DOCS of the named commands (lowercase full names) that have documentation:
/// a map of name to its documentation.
pub fn write(out: &mut ReplyBuf, names: &[&str]) {
    let found: Vec<(&str, &Map<String, Value>)> = names
        .iter()
        .filter_map(|n| find(n).map(|d| (*n, d)))
        .collect();
    out.map(found.len());
    for (name, doc) in found {
        out.bulk(name.as_bytes());
        write_doc(out, doc);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_commands_and_subcommands() {
        assert!(find("set").is_some_and(|d| d.contains_key("arguments")));
        assert!(find("client|kill").is_some());
        assert!(find("client|nosuch").is_none());
        let mut out = ReplyBuf::new(false);
        write(&mut out, &["get", "nosuch"]);
        let text = String::from_utf8(out.buf).unwrap();
        assert!(
            text.starts_with("*2\r\n$3\r\nget\r\n*10\r\n$7\r\nsummary\r\n"),
            "{text}"
        );
    }
}
