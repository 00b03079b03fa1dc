//! What COMMAND reports: for each command Damselfly runs, Redis 7.0's own description of it
//! ([`crate::redis_meta`]: flags, ACL categories, tips, key specifications, subcommands), in
//! the shapes Redis's COMMAND, COMMAND INFO, LIST and GETKEYS(ANDFLAGS) reply with.

use std::sync::OnceLock;

use damselfly_protocol::ReplyBuf;

use crate::args::Args;
use crate::redis_meta::{self, key_flags, BeginSearch, FindKeys, RedisCommand, CATEGORIES};
use crate::table::COMMANDS;

fn meta() -> &'static [RedisCommand] {
    redis_meta::commands()
}

/// The Redis table entries of the commands in [`COMMANDS`], in its order (subcommands come
/// with their container).
pub fn supported() -> &'static [usize] {
    static SUPPORTED: OnceLock<Vec<usize>> = OnceLock::new();
    SUPPORTED.get_or_init(|| {
        COMMANDS
            .iter()
            .filter_map(|c| redis_meta::find(c.name))
            .collect()
    })
}

/// A command or `container|sub` that Damselfly runs, by name (Redis's lookupCommandBySds).
pub fn find(name: &[u8]) -> Option<usize> {
    let name = std::str::from_utf8(name).ok()?;
    let base = name.split('|').next().unwrap_or(name);
    let top = redis_meta::find(base)?;
    if !supported().contains(&top) {
        return None;
    }
    let i = redis_meta::find(name)?;
    // `get|x` names nothing: GET has no subcommands.
    (name == base || meta()[i].parent == Some(top)).then_some(i)
}

/// The command a request names, as Redis's lookupCommand finds it: a container's subcommand
/// when it has them (None for an unknown one).
pub fn find_request(args: &Args) -> Option<usize> {
    let top = find(args.get(0))?;
    if !meta()[top].has_subcommands() {
        return Some(top);
    }
    if args.len() < 2 {
        return Some(top);
    }
    let sub = std::str::from_utf8(args.get(1)).ok()?;
    redis_meta::find(&format!("{}|{sub}", meta()[top].name))
}

fn status_set(out: &mut ReplyBuf, items: &[&str]) {
    out.set(items.len());
    for i in items {
        out.simple(i);
    }
}

fn key_flag_names(flags: u16) -> Vec<&'static str> {
    key_flags::NAMES
        .iter()
        .filter(|(f, _)| flags & f != 0)
        .map(|(_, n)| *n)
        .collect()
}

fn map_of_ints(out: &mut ReplyBuf, fields: &[(&str, i64)]) {
    out.map(fields.len());
    for (k, v) in fields {
        out.bulk(k.as_bytes());
        out.int(*v);
    }
}

/// One command's COMMAND INFO entry (Redis's addReplyCommandInfo).
pub fn write_info(out: &mut ReplyBuf, i: usize) {
    let cmd = &meta()[i];
    out.array(10);
    out.bulk(cmd.name.as_bytes());
    out.int(cmd.arity.into());
    status_set(out, &cmd.flags);
    out.int(cmd.first_key.into());
    out.int(cmd.last_key.into());
    out.int(cmd.step.into());
    let cats: Vec<String> = CATEGORIES
        .iter()
        .enumerate()
        .filter(|(j, _)| cmd.categories & (1 << j) != 0)
        .map(|(_, c)| format!("@{c}"))
        .collect();
    out.set(cats.len());
    for c in &cats {
        out.simple(c);
    }
    out.set(cmd.tips.len());
    for t in &cmd.tips {
        out.bulk(t.as_bytes());
    }
    out.set(cmd.key_specs.len());
    for spec in &cmd.key_specs {
        out.map(3 + usize::from(spec.notes.is_some()));
        if let Some(notes) = spec.notes {
            out.bulk(b"notes");
            out.bulk(notes.as_bytes());
        }
        out.bulk(b"flags");
        status_set(out, &key_flag_names(spec.flags));
        out.bulk(b"begin_search");
        out.map(2);
        out.bulk(b"type");
        match spec.begin {
            BeginSearch::Index(index) => {
                out.bulk(b"index");
                out.bulk(b"spec");
                map_of_ints(out, &[("index", index as i64)]);
            }
            BeginSearch::Keyword { word, start_from } => {
                out.bulk(b"keyword");
                out.bulk(b"spec");
                out.map(2);
                out.bulk(b"keyword");
                out.bulk(word.as_bytes());
                out.bulk(b"startfrom");
                out.int(start_from);
            }
            BeginSearch::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
            }
        }
        out.bulk(b"find_keys");
        out.map(2);
        out.bulk(b"type");
        match spec.find {
            FindKeys::Range { last, step, limit } => {
                out.bulk(b"range");
                out.bulk(b"spec");
                map_of_ints(
                    out,
                    &[
                        ("lastkey", last),
                        ("keystep", step as i64),
                        ("limit", limit),
                    ],
                );
            }
            FindKeys::Keynum { index, first, step } => {
                out.bulk(b"keynum");
                out.bulk(b"spec");
                map_of_ints(
                    out,
                    &[
                        ("keynumidx", index as i64),
                        ("firstkey", first as i64),
                        ("keystep", step as i64),
                    ],
                );
            }
            FindKeys::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
            }
        }
    }
    if cmd.has_subcommands() {
        out.array(cmd.subcommands.len());
        for sub in cmd.subcommands.clone() {
            write_info(out, sub);
        }
    } else {
        out.set(0);
    }
}

/// Full names for COMMAND LIST: every supported command and its subcommands, those for which
/// `keep` holds.
pub fn list(keep: impl Fn(&RedisCommand) -> bool) -> Vec<&'static str> {
    supported()
        .iter()
        .flat_map(|&i| std::iter::once(i).chain(meta()[i].subcommands.clone()))
        .map(|i| &meta()[i])
        .filter(|c| keep(c))
        .map(|c| c.name)
        .collect()
}

/// COMMAND GETKEYS and GETKEYSANDFLAGS of the request in `args` (Redis's
/// getKeysSubcommandImpl): the reply, or Redis's error.
pub fn write_keys(out: &mut ReplyBuf, args: &Args, with_flags: bool) -> Result<(), &'static str> {
    let cmd = find_request(args).ok_or("ERR Invalid command specified")?;
    let cmd = &meta()[cmd];
    if cmd
        .key_specs
        .iter()
        .all(|s| s.flags & key_flags::NOT_KEY != 0)
    {
        return Err("ERR The command has no key arguments");
    }
    let argc = args.len() as i32;
    if (cmd.arity > 0 && cmd.arity != argc) || argc < -cmd.arity {
        return Err("ERR Invalid number of arguments specified for command");
    }
    let keys = cmd.keys(args);
    if keys.is_empty() && !cmd.flags.contains(&"no_mandatory_keys") {
        return Err("ERR Invalid arguments specified for command");
    }
    out.array(keys.len());
    for (pos, flags) in keys {
        if with_flags {
            out.array(2);
            out.bulk(args.get(pos));
            status_set(out, &key_flag_names(flags));
        } else {
            out.bulk(args.get(pos));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Containers whose row in [`COMMANDS`] names the key position of their keyed
    /// subcommands (for routing), where Redis's container row names none.
    const ROUTED_BY_SUBCOMMAND: &[&str] = &["object", "xgroup", "xinfo", "memory"];

    #[test]
    fn every_command_is_in_redis_table_with_the_same_arity_and_keys() {
        let mut differ = Vec::new();
        for c in COMMANDS {
            let i = redis_meta::find(c.name)
                .unwrap_or_else(|| panic!("{} is not a Redis 7.0 command", c.name));
            let m = &meta()[i];
            let ours = (c.arity, c.first_key, c.last_key, c.step);
            let redis = (m.arity, m.first_key, m.last_key, m.step);
            if ours != redis && !ROUTED_BY_SUBCOMMAND.contains(&c.name) {
                differ.push(format!("{}: {ours:?} vs Redis {redis:?}", c.name));
            }
        }
        assert!(differ.is_empty(), "{differ:#?}");
        assert_eq!(supported().len(), COMMANDS.len());
    }

    #[test]
    fn lookups() {
        assert!(find(b"get").is_some());
        assert!(find(b"CLIENT|KILL").is_some());
        assert!(find(b"get|x").is_none());
        assert!(find(b"client|nosuch").is_none());
        assert!(find(b"nosuch").is_none());
    }
}
