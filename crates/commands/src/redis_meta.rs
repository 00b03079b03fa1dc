//! Redis 7.0's own description of its commands: every command and subcommand with its arity,
//! flags, ACL categories, tips and key specifications, as redis-server 7.0's COMMAND reply gives
//! them (data/redis-7.0-commands.txt, written by data/dump_redis_commands.py).
//!
//! ACL rules are resolved against this table rather than against the commands Damselfly runs,
//! so a rule names the same commands, categories and subcommands it names in Redis (`+@read`,
//! `-client|kill`, a rule for a command Damselfly lacks), and the key specifications say which
//! arguments are keys and whether a command reads or writes each one (`%R~` / `%W~`).

use std::sync::OnceLock;

use crate::args::Args;

/// Redis's ACL categories, in the order ACL CAT lists them and ACL rules are described.
pub const CATEGORIES: [&str; 21] = [
    "keyspace",
    "read",
    "write",
    "set",
    "sortedset",
    "list",
    "hash",
    "string",
    "bitmap",
    "hyperloglog",
    "geo",
    "stream",
    "pubsub",
    "admin",
    "fast",
    "slow",
    "blocking",
    "dangerous",
    "connection",
    "transaction",
    "scripting",
];

/// The bit of a category in [`RedisCommand::categories`].
pub fn category_bit(name: &str) -> Option<u32> {
    CATEGORIES
        .iter()
        .position(|c| c.eq_ignore_ascii_case(name))
        .map(|i| 1 << i)
}

/// Key specification flags (Redis's CMD_KEY_*).
pub mod key_flags {
    pub const RO: u16 = 1;
    pub const RW: u16 = 1 << 1;
    pub const OW: u16 = 1 << 2;
    pub const RM: u16 = 1 << 3;
    pub const ACCESS: u16 = 1 << 4;
    pub const UPDATE: u16 = 1 << 5;
    pub const INSERT: u16 = 1 << 6;
    pub const DELETE: u16 = 1 << 7;
    pub const NOT_KEY: u16 = 1 << 8;
    pub const INCOMPLETE: u16 = 1 << 9;
    pub const VARIABLE_FLAGS: u16 = 1 << 10;

    /// Names as COMMAND INFO and COMMAND GETKEYSANDFLAGS print them, in Redis's order.
    pub const NAMES: &[(u16, &str)] = &[
        (RO, "RO"),
        (RW, "RW"),
        (OW, "OW"),
        (RM, "RM"),
        (ACCESS, "access"),
        (UPDATE, "update"),
        (INSERT, "insert"),
        (DELETE, "delete"),
        (NOT_KEY, "not_key"),
        (INCOMPLETE, "incomplete"),
        (VARIABLE_FLAGS, "variable_flags"),
    ];

    pub(super) fn parse(name: &str) -> u16 {
        NAMES
            .iter()
            .find(|(_, n)| *n == name)
            .map_or(0, |(f, _)| *f)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginSearch {
    Index(usize),
    Keyword { word: &'static str, start_from: i64 },
    Unknown,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FindKeys {
    Range {
        last: i64,
        step: usize,
        limit: i64,
    },
    Keynum {
        index: usize,
        first: usize,
        step: usize,
    },
    Unknown,
}

#[derive(Debug, Clone, Copy)]
pub struct KeySpec {
    pub flags: u16,
    pub begin: BeginSearch,
    pub find: FindKeys,
    pub notes: Option<&'static str>,
}

#[derive(Debug)]
pub struct RedisCommand {
    /// Lowercase, `container|sub` for a subcommand.
    pub name: &'static str,
    pub arity: i32,
    pub flags: Vec<&'static str>,
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    /// Bits of [`CATEGORIES`].
    pub categories: u32,
    pub tips: Vec<&'static str>,
    pub key_specs: Vec<KeySpec>,
    /// The container's index, for a subcommand.
    pub parent: Option<usize>,
    /// Indexes of the subcommands, for a container.
    pub subcommands: std::ops::Range<usize>,
}

impl RedisCommand {
    pub fn has_subcommands(&self) -> bool {
        !self.subcommands.is_empty()
    }

    /// The key arguments of a request and their key-spec flags, as Redis finds them for ACL
    /// checks: from the key specifications, or where those cannot say (a spec Redis marks
    /// incomplete, unknown or with variable flags) by parsing the arguments as the command
    /// does. Positions count the command name as 0 (for a subcommand, the container's name).
    pub fn keys(&self, args: &Args) -> Vec<(usize, u16)> {
        use key_flags::*;
        let varies = self.key_specs.iter().any(|s| s.flags & VARIABLE_FLAGS != 0);
        if !varies {
            if let Some(keys) = self.keys_from_specs(args) {
                return keys;
            }
        }
        let name = self.name;
        let argc = args.len();
        match name {
            "set" => {
                let get = (3..argc).any(|i| args.is(i, "get"));
                let flags = if get {
                    RW | ACCESS | UPDATE
                } else {
                    OW | UPDATE
                };
                vec![(1, flags)]
            }
            "bitfield" => {
                let writes = (2..argc)
                    .any(|i| ["set", "incrby"].iter().any(|w| args.is(i, w)) && argc - i >= 4);
                let flags = if writes {
                    RW | ACCESS | UPDATE
                } else {
                    RO | ACCESS
                };
                vec![(1, flags)]
            }
            "sort" | "sort_ro" => {
                let mut keys = vec![(1, RO | ACCESS)];
                if name == "sort" {
                    keys.extend(crate::sort_family::store_position(args).map(|p| (p, OW | UPDATE)));
                }
                keys
            }
            "migrate" => {
                // The key, or the KEYS list when the key argument is empty.
                match (3..argc).find(|&i| args.is(i, "keys")) {
                    Some(at) if args.get(3).is_empty() => {
                        (at + 1..argc).map(|i| (i, RW | ACCESS | DELETE)).collect()
                    }
                    _ if argc > 3 => vec![(3, RW | ACCESS | DELETE)],
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }

    /// Redis's getKeysUsingKeySpecs; None when a spec cannot be applied to these arguments.
    fn keys_from_specs(&self, args: &Args) -> Option<Vec<(usize, u16)>> {
        let argc = args.len() as i64;
        let mut keys = Vec::new();
        for spec in &self.key_specs {
            if spec.flags & key_flags::NOT_KEY != 0 {
                continue;
            }
            let first = match spec.begin {
                BeginSearch::Index(i) => i as i64,
                BeginSearch::Keyword { word, start_from } => {
                    let found = if start_from > 0 {
                        (start_from..argc).find(|&i| args.is(i as usize, word))
                    } else {
                        (1..=argc + start_from)
                            .rev()
                            .find(|&i| args.is(i as usize, word))
                    };
                    match found {
                        Some(i) => i + 1,
                        None => continue,
                    }
                }
                BeginSearch::Unknown => return None,
            };
            let (first, last, step) = match spec.find {
                FindKeys::Range { last, step, limit } => {
                    let end = if last >= 0 {
                        first + last
                    } else if limit == 0 {
                        argc + last
                    } else {
                        first + ((argc - first) / limit + last)
                    };
                    (first, end, step)
                }
                FindKeys::Keynum {
                    index,
                    first: at,
                    step,
                } => {
                    let n_at = first + index as i64;
                    if n_at >= argc {
                        return None;
                    }
                    let n = damselfly_protocol::number::parse_i64(args.get(n_at as usize))
                        .filter(|&n| n >= 0)?;
                    let start = first + at as i64;
                    (start, start + n - 1, step)
                }
                FindKeys::Unknown => return None,
            };
            if last >= argc || last < first || first >= argc {
                return None;
            }
            let mut i = first;
            while i <= last {
                keys.push((i as usize, spec.flags));
                i += step.max(1) as i64;
            }
            if spec.flags & key_flags::INCOMPLETE != 0 {
                return None;
            }
        }
        Some(keys)
    }
}

const DATA: &str = include_str!("../data/redis-7.0-commands.txt");

/// Every Redis 7.0 command, each container followed by its subcommands, sorted by name.
pub fn commands() -> &'static [RedisCommand] {
    static TABLE: OnceLock<Vec<RedisCommand>> = OnceLock::new();
    TABLE.get_or_init(|| parse(DATA))
}

/// The index of a command (`get`) or subcommand (`client|kill`), case-insensitively.
pub fn find(name: &str) -> Option<usize> {
    type Index = std::collections::HashMap<&'static str, usize, ahash::RandomState>;
    static INDEX: OnceLock<Index> = OnceLock::new();
    let index = INDEX.get_or_init(|| {
        commands()
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name, i))
            .collect()
    });
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        index.get(name.to_ascii_lowercase().as_str()).copied()
    } else {
        index.get(name).copied()
    }
}

/// The entry a request runs as: the subcommand of a container when its first argument names
/// one, else the command itself.
pub fn for_request(args: &Args) -> Option<usize> {
    let name = std::str::from_utf8(args.get(0)).ok()?;
    let top = find(name)?;
    let cmd = &commands()[top];
    if cmd.has_subcommands() && args.len() > 1 {
        let sub = std::str::from_utf8(args.get(1)).ok()?;
        return find(&format!("{}|{}", cmd.name, sub)).or(Some(top));
    }
    Some(top)
}

/// What Redis replies before running a container command (`ACL`, `CLIENT`, ...) whose
/// subcommand it does not know or whose argument count is wrong for that subcommand.
pub fn subcommand_refusal(args: &Args) -> Option<String> {
    let container = &commands()[find(std::str::from_utf8(args.get(0)).ok()?)?];
    let sub = args.get(1);
    let Some(i) = std::str::from_utf8(sub)
        .ok()
        .and_then(|s| find(&format!("{}|{s}", container.name)))
    else {
        return Some(crate::errors::unknown_subcommand(container.name, sub));
    };
    let cmd = &commands()[i];
    let n = args.len() as i32;
    let fits = if cmd.arity >= 0 {
        n == cmd.arity
    } else {
        n >= -cmd.arity
    };
    (!fits).then(|| crate::errors::wrong_arity(cmd.name))
}

fn list(field: &'static str) -> Vec<&'static str> {
    if field == "-" {
        Vec::new()
    } else {
        field.split(',').collect()
    }
}

fn number<T: std::str::FromStr>(field: Option<&str>) -> T {
    field
        .and_then(|f| f.parse().ok())
        .unwrap_or_else(|| panic!("data/redis-7.0-commands.txt: bad number {field:?}"))
}

fn parse(data: &'static str) -> Vec<RedisCommand> {
    let mut table: Vec<RedisCommand> = Vec::new();
    let mut container: Option<usize> = None;
    for line in data.lines() {
        let (line, notes) = match line.split_once(" notes ") {
            Some((l, n)) => (l, Some(n)),
            None => (line, None),
        };
        let mut f = line.split(' ');
        match f.next() {
            Some("cmd") => {
                let name = f.next().expect("command name");
                let parent = if name.contains('|') { container } else { None };
                if parent.is_none() {
                    container = Some(table.len());
                }
                let i = table.len();
                if let Some(p) = parent {
                    // The subcommands follow their container.
                    table[p].subcommands.end = i + 1;
                }
                table.push(RedisCommand {
                    name,
                    arity: number(f.next()),
                    flags: list(f.next().expect("flags")),
                    first_key: number(f.next()),
                    last_key: number(f.next()),
                    step: number(f.next()),
                    categories: list(f.next().expect("categories"))
                        .iter()
                        .filter_map(|c| category_bit(c))
                        .fold(0, |a, b| a | b),
                    tips: list(f.next().expect("tips")),
                    key_specs: Vec::new(),
                    parent,
                    subcommands: i + 1..i + 1,
                });
            }
            Some("spec") => {
                let flags = list(f.next().expect("key flags"))
                    .iter()
                    .fold(0, |a, n| a | key_flags::parse(n));
                let begin = match f.next() {
                    Some("index") => BeginSearch::Index(number(f.next())),
                    Some("keyword") => BeginSearch::Keyword {
                        word: f.next().expect("keyword"),
                        start_from: number(f.next()),
                    },
                    _ => BeginSearch::Unknown,
                };
                let find = match f.next() {
                    Some("range") => FindKeys::Range {
                        last: number(f.next()),
                        step: number(f.next()),
                        limit: number(f.next()),
                    },
                    Some("keynum") => FindKeys::Keynum {
                        index: number(f.next()),
                        first: number(f.next()),
                        step: number(f.next()),
                    },
                    _ => FindKeys::Unknown,
                };
                let cmd = table.last_mut().expect("spec after cmd");
                cmd.key_specs.push(KeySpec {
                    flags,
                    begin,
                    find,
                    notes,
                });
            }
            _ => {}
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(words: &[&str]) -> Vec<(usize, u16)> {
        let (buf, spans) = crate::args::lay_out(words);
        let a = Args::new(&buf, &spans);
        commands()[for_request(&a).expect("known")].keys(&a)
    }

    #[test]
    fn table_has_every_command_and_its_subcommands() {
        let t = commands();
        assert!(t.len() > 350, "{}", t.len());
        let client = &t[find("CLIENT").unwrap()];
        let kill = &t[find("client|kill").unwrap()];
        assert_eq!(kill.parent, Some(find("client").unwrap()));
        assert!(client.subcommands.contains(&find("client|kill").unwrap()));
        assert!(client.subcommands.contains(&find("client|id").unwrap()));
        assert!(!client.subcommands.contains(&find("cluster").unwrap()));
        assert_eq!(
            kill.categories & category_bit("dangerous").unwrap(),
            1 << 17
        );
        assert!(t[find("get").unwrap()].subcommands.is_empty());
    }

    #[test]
    fn keys_from_specs() {
        use key_flags::*;
        assert_eq!(keys(&["get", "k"]), vec![(1, RO | ACCESS)]);
        assert_eq!(
            keys(&["mset", "a", "1", "b", "2"]),
            vec![(1, OW | UPDATE), (3, OW | UPDATE)]
        );
        assert_eq!(
            keys(&["lmove", "a", "b", "left", "right"]),
            vec![(1, RW | ACCESS | DELETE), (2, RW | INSERT)]
        );
        assert_eq!(
            keys(&["zunionstore", "d", "2", "a", "b"]),
            vec![(1, OW | UPDATE), (3, RO | ACCESS), (4, RO | ACCESS)]
        );
        assert_eq!(
            keys(&["xread", "count", "1", "streams", "s1", "s2", "0", "0"]),
            vec![(4, RO | ACCESS), (5, RO | ACCESS)]
        );
        assert_eq!(keys(&["set", "k", "v"]), vec![(1, OW | UPDATE)]);
        assert_eq!(
            keys(&["set", "k", "v", "GET"]),
            vec![(1, RW | ACCESS | UPDATE)]
        );
        assert_eq!(
            keys(&["sort", "k", "store", "d"]),
            vec![(1, RO | ACCESS), (3, OW | UPDATE)]
        );
        assert_eq!(keys(&["object", "encoding", "k"]), vec![(2, RO)]);
        assert!(keys(&["zunionstore", "d", "x", "a"]).is_empty());
        assert!(keys(&["ping"]).is_empty());
    }
}
