//! The command table: every command Damselfly runs, with its name, arity, flags, key
//! positions, how the coordinator routes it, and its handler. Arity checks and routing read
//! this table; what COMMAND, COMMAND DOCS and ACL report of a command (its ACL categories,
//! key specifications, documentation) is Redis's own description ([`crate::redis_meta`]),
//! and a test checks the two agree on arity and key positions.

use crate::{
    args::Args, bitmap_family as bits, blocking, ctx::ExecCtx, dump_family as dumps,
    geo_family as geo, hash_family as hash, hll_family as hll, keys_family as keys,
    list_family as lists, server_family as server, set_family as sets, sort_family as sort,
    stream_family as streams, stream_group_family as groups, string_family as strings,
    zset_family as zsets,
};
use damselfly_pubsub::Kind;

/// A handler that runs on the shard owning the command's keys.
pub type ShardFn = fn(&mut ExecCtx, &Args);

/// Commands the coordination layer implements itself (connection state, server-wide state).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CoordCmd {
    Ping,
    Echo,
    Quit,
    Hello,
    Auth,
    Acl,
    Select,
    Reset,
    Client,
    Command,
    Info,
    Config,
    Time,
    Shutdown,
    Debug,
    Multi,
    Exec,
    Discard,
    Watch,
    Unwatch,
    Save,
    Bgsave,
    Bgrewriteaof,
    Lastsave,
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO.
    Eval,
    Script,
    Fcall,
    Function,
    /// SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE.
    Subscribe(Kind),
    /// UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE.
    Unsubscribe(Kind),
    /// PUBLISH, or SPUBLISH when `sharded`.
    Publish {
        sharded: bool,
    },
    Pubsub,
    Monitor,
    /// MEMORY STATS, DOCTOR, MALLOC-STATS, PURGE, HELP (USAGE runs on the key's shard).
    Memory,
    /// SLOWLOG GET, LEN, RESET, HELP.
    Slowlog,
    /// LATENCY LATEST, HISTORY, RESET, GRAPH, DOCTOR, HISTOGRAM, HELP.
    Latency,
}

#[derive(Clone, Copy, Debug)]
pub enum Handler {
    Shard(ShardFn),
    Coord(CoordCmd),
}

/// How per-shard replies of a command that spans shards become one reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merge {
    /// One reply item per key, reassembled in the request's key order (MGET).
    Items,
    /// Integer replies summed (DEL, EXISTS, DBSIZE, ...).
    Sum,
    /// Every shard answers +OK (MSET, FLUSHDB).
    AllOk,
    /// Array replies concatenated (KEYS).
    Concat,
    /// One random non-null reply (RANDOMKEY).
    RandomKey,
    /// MSETNX: existence check on every shard, then MSET on every shard.
    MsetNx,
    /// RENAME, RENAMENX, COPY: the value moves between the two keys' shards.
    Transfer,
    /// The keys' values are gathered onto the coordinator, the one-shard handler runs on
    /// them there, and changed keys are written back to their shards (SMOVE, SINTERSTORE...).
    Gather,
}

/// Where a command runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// No keys: runs on the connection's thread.
    Coordinator,
    /// One key at `first_key`: runs whole on its shard.
    Key,
    /// A container whose subcommands with a key at `first_key` run whole on its shard, as
    /// `Key`, and whose subcommands without one read the whole server on the connection's
    /// thread as this coordinator command (MEMORY USAGE key, MEMORY STATS).
    KeyOrCoordinator(CoordCmd),
    /// Keys at first..=last by step: whole on one shard when they share it, else split.
    Keys(Merge),
    /// Runs on every shard; replies merged.
    AllShards(Merge),
    /// SCAN: the cursor names the shard.
    Cursor,
}

pub mod flags {
    pub const WRITE: u32 = 1;
    pub const READONLY: u32 = 1 << 1;
    pub const DENYOOM: u32 = 1 << 2;
    pub const ADMIN: u32 = 1 << 3;
    pub const NOSCRIPT: u32 = 1 << 4;
    pub const LOADING: u32 = 1 << 5;
    pub const STALE: u32 = 1 << 6;
    pub const FAST: u32 = 1 << 7;
    pub const NO_AUTH: u32 = 1 << 8;
    pub const SENTINEL: u32 = 1 << 9;
    pub const ALLOW_BUSY: u32 = 1 << 10;
    pub const NO_MULTI: u32 = 1 << 11;
    pub const SKIP_SLOWLOG: u32 = 1 << 12;
    pub const BLOCKING: u32 = 1 << 13;
    pub const MAY_REPLICATE: u32 = 1 << 14;
    pub const PUBSUB: u32 = 1 << 15;

    /// Flag names as COMMAND INFO prints them, in Redis's order.
    pub const NAMES: &[(u32, &str)] = &[
        (WRITE, "write"),
        (READONLY, "readonly"),
        (DENYOOM, "denyoom"),
        (ADMIN, "admin"),
        (PUBSUB, "pubsub"),
        (NOSCRIPT, "noscript"),
        (BLOCKING, "blocking"),
        (LOADING, "loading"),
        (STALE, "stale"),
        (SKIP_SLOWLOG, "skip_slowlog"),
        (FAST, "fast"),
        (NO_AUTH, "no_auth"),
        (SENTINEL, "sentinel"),
        (NO_MULTI, "no_multi"),
        (ALLOW_BUSY, "allow_busy"),
    ];
    // MAY_REPLICATE is internal: Redis 7.0's COMMAND INFO does not print it.
}

use flags::*;

pub struct CommandSpec {
    /// Lowercase name.
    pub name: &'static str,
    /// Redis arity: exact count when positive, minimum when negative (name included).
    pub arity: i32,
    pub flags: u32,
    pub first_key: i32,
    pub last_key: i32,
    pub step: i32,
    /// Keys named other than by first/last/step.
    pub more_keys: MoreKeys,
    /// What a transaction running the command locks.
    pub intents: Intents,
    pub route: Route,
    pub handler: Handler,
}

/// Key arguments a command names beyond its first/last/step range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoreKeys {
    None,
    /// A `numkeys` argument at this position, its keys following it (SINTERCARD,
    /// ZUNIONSTORE, LMPOP...).
    Numkeys(usize),
    /// SORT's options: a STORE destination (when `store`), and BY/GET patterns that name
    /// keys known only while it runs.
    Sort {
        store: bool,
    },
    /// GEORADIUS's and GEORADIUSBYMEMBER's STORE/STOREDIST destination among their options.
    GeoStore,
    /// XREAD's and XREADGROUP's keys: the first half of what follows STREAMS.
    Streams,
}

/// What a transaction running a command locks on the shards it touches. Commands whose
/// arguments name databases are described here, and the planner reads their arguments with
/// the command's own parser, so the two can never disagree.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Intents {
    /// Its keys in the current database, exclusive when it writes; the whole current
    /// database when it has no keys (KEYS, DBSIZE, FLUSHDB, SCAN).
    Keys,
    /// Every database (FLUSHALL).
    AllDbs,
    /// The two databases it swaps, as [`crate::keys_family::SwapDb::parse`] reads them.
    SwapDbs,
    /// A value moving between keys or databases (RENAME, RENAMENX, COPY, MOVE), as
    /// [`crate::keys_family::Transfer::parse`] reads the command: its source (shared when
    /// the source is kept) and its destination, each in its database.
    Transfer,
    /// DEBUG: DIGEST reads every database of every shard and DIGEST-VALUE its keys, both
    /// shared; RELOAD replaces every database of every shard (exclusive); as
    /// [`crate::dump_family::DebugScope::parse`] reads them. Other subcommands take none.
    Debug,
    /// A script (EVAL, FCALL) queued in MULTI: the EXEC locks every database of every shard,
    /// since the keys a script touches are known only while it runs.
    Script,
}

impl CommandSpec {
    pub fn arity_ok(&self, argc: usize) -> bool {
        let arity = self.arity.unsigned_abs() as usize;
        if self.arity >= 0 {
            argc == arity
        } else {
            argc >= arity
        }
    }

    /// The error Redis gives before running (even when queueing it in MULTI) a container
    /// command whose subcommand is unknown or has the wrong number of arguments.
    pub fn subcommand_refusal(&self, args: &Args) -> Option<String> {
        use crate::stream_group_family::{find_subcommand, XGROUP_SUBCOMMANDS, XINFO_SUBCOMMANDS};
        let table = match self.name {
            "xgroup" => XGROUP_SUBCOMMANDS,
            "xinfo" => XINFO_SUBCOMMANDS,
            "slowlog" => crate::slowlog::SUBCOMMANDS,
            "latency" => crate::latency::SUBCOMMANDS,
            _ => return None,
        };
        find_subcommand(args, self.name, table).err()
    }

    pub fn is_write(&self) -> bool {
        self.flags & WRITE != 0
    }

    /// Positions of the key arguments of a request. With a `numkeys` argument that does not
    /// parse (or is out of range) only the fixed positions are returned; the handler then
    /// replies with Redis's error.
    pub fn key_positions(&self, args: &Args) -> Vec<usize> {
        self.key_positions_iter(args).collect()
    }

    /// `key_positions` without allocating (routing runs it for every multi-key command).
    pub fn key_positions_iter<'a>(&'a self, args: &'a Args) -> impl Iterator<Item = usize> + 'a {
        let counted = match self.more_keys {
            MoreKeys::Numkeys(at) if at < args.len() => {
                damselfly_protocol::number::parse_i64(args.get(at))
                    .filter(|&n| n > 0 && (n as u64) < (args.len() - at) as u64)
                    .map(|n| at + 1..=at + n as usize)
            }
            _ => None,
        };
        // SORT's STORE destination sits among its options (Redis's sortGetKeys).
        let store = match self.more_keys {
            MoreKeys::Sort { store: true } => crate::sort_family::store_position(args),
            _ => None,
        };
        let geo_stores = (self.more_keys == MoreKeys::GeoStore)
            .then(|| crate::geo_family::store_positions(args));
        let streams = match self.more_keys {
            MoreKeys::Streams => crate::stream_family::read_keys_at(args).map(|(at, n)| at..at + n),
            _ => None,
        };
        self.fixed_key_positions(args.len())
            .chain(counted.into_iter().flatten())
            .chain(store)
            .chain(geo_stores.into_iter().flatten())
            .chain(streams.into_iter().flatten())
    }

    /// True when the command reads keys its arguments do not name (SORT with BY/GET
    /// patterns): it then runs under shared intents on whole databases, on gathered copies.
    pub fn reads_unknown_keys(&self, args: &Args) -> bool {
        matches!(self.more_keys, MoreKeys::Sort { .. }) && crate::sort_family::uses_patterns(args)
    }

    /// Whether a call with these words runs whole on its keys' shard when they share one: a
    /// shard handler routed by its keys, reading no key it learns only while it runs.
    pub fn runs_on_its_keys_shard(&self, args: &Args) -> bool {
        matches!(
            self.route,
            Route::Key | Route::KeyOrCoordinator(_) | Route::Keys(_)
        ) && matches!(self.handler, Handler::Shard(_))
            && !self.reads_unknown_keys(args)
    }

    /// `runs_on_its_keys_shard` whatever the words, with every key at a position
    /// `fixed_key_positions` gives: no container subcommand without a key, no `numkeys`, no
    /// SORT options. What can be decided from a script's source, before its arguments exist.
    pub fn always_runs_on_its_keys_shard(&self) -> bool {
        matches!(self.route, Route::Key | Route::Keys(_))
            && matches!(self.handler, Handler::Shard(_))
            && self.more_keys == MoreKeys::None
    }

    /// Key positions given by first/last/step alone, for `argc` words (the name included).
    pub fn fixed_key_positions(&self, argc: usize) -> impl Iterator<Item = usize> {
        let step = self.step.max(1) as usize;
        let range = if self.first_key <= 0 {
            0..0
        } else {
            let end = if self.last_key < 0 {
                // last_key -1 is the last argument, -2 the one before it, ...
                argc.saturating_sub(self.last_key.unsigned_abs() as usize - 1)
            } else {
                self.last_key as usize + 1
            };
            self.first_key as usize..end.min(argc)
        };
        range.step_by(step)
    }
}

struct Def {
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: (i32, i32, i32),
    more_keys: MoreKeys,
    intents: Intents,
    route: Route,
    handler: Handler,
}

const fn spec(d: Def) -> CommandSpec {
    CommandSpec {
        name: d.name,
        arity: d.arity,
        flags: d.flags,
        first_key: d.keys.0,
        last_key: d.keys.1,
        step: d.keys.2,
        more_keys: d.more_keys,
        intents: d.intents,
        route: d.route,
        handler: d.handler,
    }
}

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        cmd!(more MoreKeys::None; $name, $arity, $flags, $keys, $route, $handler)
    };
    (numkeys $numkeys:literal; $name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        cmd!(more MoreKeys::Numkeys($numkeys); $name, $arity, $flags, $keys, $route, $handler)
    };
    (intents $intents:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        cmd!(full MoreKeys::None, $intents; $name, $arity, $flags, $keys, $route, $handler)
    };
    (more $more:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        cmd!(full $more, Intents::Keys; $name, $arity, $flags, $keys, $route, $handler)
    };
    (full $more:expr, $intents:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $route:expr, $handler:expr) => {
        spec(Def {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            more_keys: $more,
            intents: $intents,
            route: $route,
            handler: $handler,
        })
    };
}

const NO_KEYS: (i32, i32, i32) = (0, 0, 0);
const ONE_KEY: (i32, i32, i32) = (1, 1, 1);
const ALL_KEYS: (i32, i32, i32) = (1, -1, 1);
const PAIRS: (i32, i32, i32) = (1, -1, 2);

use Handler::{Coord as C, Shard as S};
use Route::{AllShards, Coordinator, Cursor, Key, KeyOrCoordinator, Keys};

#[rustfmt::skip]
pub static COMMANDS: &[CommandSpec] = &[
    // connection
    cmd!("ping", -1, FAST | SENTINEL, NO_KEYS, Coordinator, C(CoordCmd::Ping)),
    cmd!("echo", 2, FAST, NO_KEYS, Coordinator, C(CoordCmd::Echo)),
    cmd!("quit", -1, ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH, NO_KEYS, Coordinator, C(CoordCmd::Quit)),
    cmd!("hello", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | SENTINEL | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Hello)),
    cmd!("auth", -2, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | SENTINEL | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Auth)),
    cmd!("select", 2, LOADING | STALE | FAST, NO_KEYS, Coordinator, C(CoordCmd::Select)),
    cmd!("reset", 1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Reset)),
    cmd!("acl", -2, NOSCRIPT | LOADING | STALE | SENTINEL, NO_KEYS, Coordinator, C(CoordCmd::Acl)),
    cmd!("client", -2, NOSCRIPT | LOADING | STALE | SENTINEL, NO_KEYS, Coordinator, C(CoordCmd::Client)),
    // transactions
    cmd!("multi", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Multi)),
    cmd!("exec", 1, NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG, NO_KEYS, Coordinator, C(CoordCmd::Exec)),
    cmd!("discard", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Discard)),
    cmd!("watch", -2, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, ALL_KEYS, Coordinator, C(CoordCmd::Watch)),
    cmd!("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Unwatch)),
    // server
    cmd!("command", -1, LOADING | STALE | SENTINEL, NO_KEYS, Coordinator, C(CoordCmd::Command)),
    cmd!("info", -1, LOADING | STALE | SENTINEL, NO_KEYS, Coordinator, C(CoordCmd::Info)),
    cmd!("config", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Config)),
    // Containers carry the flags of their subcommands (SLOWLOG HELP and LATENCY HELP are the
    // exceptions Redis does not flag admin), as CONFIG's row does.
    cmd!("slowlog", -2, ADMIN | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Slowlog)),
    cmd!("latency", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Latency)),
    cmd!("time", 1, LOADING | STALE | FAST, NO_KEYS, Coordinator, C(CoordCmd::Time)),
    cmd!("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | SENTINEL | ALLOW_BUSY, NO_KEYS, Coordinator, C(CoordCmd::Shutdown)),
    cmd!(intents Intents::Debug; "debug", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Debug)),
    cmd!(intents Intents::AllDbs; "save", 1, ADMIN | NOSCRIPT | NO_MULTI, NO_KEYS, Coordinator, C(CoordCmd::Save)),
    cmd!(intents Intents::AllDbs; "bgsave", -1, ADMIN | NOSCRIPT, NO_KEYS, Coordinator, C(CoordCmd::Bgsave)),
    cmd!(intents Intents::AllDbs; "bgrewriteaof", 1, ADMIN | NOSCRIPT, NO_KEYS, Coordinator, C(CoordCmd::Bgrewriteaof)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "eval", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "evalsha", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "eval_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "evalsha_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, Coordinator, C(CoordCmd::Eval)),
    cmd!("script", -2, NOSCRIPT, NO_KEYS, Coordinator, C(CoordCmd::Script)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "fcall", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, Coordinator, C(CoordCmd::Fcall)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "fcall_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, Coordinator, C(CoordCmd::Fcall)),
    cmd!("function", -2, NOSCRIPT, NO_KEYS, Coordinator, C(CoordCmd::Function)),
    cmd!("subscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Subscribe(Kind::Channel))),
    cmd!("psubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Subscribe(Kind::Pattern))),
    cmd!("ssubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, ALL_KEYS, Coordinator, C(CoordCmd::Subscribe(Kind::ShardChannel))),
    cmd!("unsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Unsubscribe(Kind::Channel))),
    cmd!("punsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Unsubscribe(Kind::Pattern))),
    cmd!("sunsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, ALL_KEYS, Coordinator, C(CoordCmd::Unsubscribe(Kind::ShardChannel))),
    cmd!("publish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, NO_KEYS, Coordinator, C(CoordCmd::Publish { sharded: false })),
    cmd!("spublish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, ONE_KEY, Coordinator, C(CoordCmd::Publish { sharded: true })),
    cmd!("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, Coordinator, C(CoordCmd::Monitor)),
    cmd!("pubsub", -2, 0, NO_KEYS, Coordinator, C(CoordCmd::Pubsub)),
    cmd!("lastsave", 1, LOADING | STALE | FAST, NO_KEYS, Coordinator, C(CoordCmd::Lastsave)),
    cmd!("dbsize", 1, READONLY | FAST, NO_KEYS, AllShards(Merge::Sum), S(server::dbsize)),
    cmd!("flushdb", -1, WRITE, NO_KEYS, AllShards(Merge::AllOk), S(server::flushdb)),
    cmd!(intents Intents::AllDbs; "flushall", -1, WRITE, NO_KEYS, AllShards(Merge::AllOk), S(server::flushall)),
    // generic keyspace
    cmd!("del", -2, WRITE, ALL_KEYS, Keys(Merge::Sum), S(keys::del)),
    cmd!("unlink", -2, WRITE | FAST, ALL_KEYS, Keys(Merge::Sum), S(keys::del)),
    cmd!("exists", -2, READONLY | FAST, ALL_KEYS, Keys(Merge::Sum), S(keys::exists)),
    cmd!("touch", -2, READONLY | FAST, ALL_KEYS, Keys(Merge::Sum), S(keys::touch)),
    cmd!("type", 2, READONLY | FAST, ONE_KEY, Key, S(keys::type_cmd)),
    cmd!("expire", -3, WRITE | FAST, ONE_KEY, Key, S(keys::expire)),
    cmd!("pexpire", -3, WRITE | FAST, ONE_KEY, Key, S(keys::pexpire)),
    cmd!("expireat", -3, WRITE | FAST, ONE_KEY, Key, S(keys::expireat)),
    cmd!("pexpireat", -3, WRITE | FAST, ONE_KEY, Key, S(keys::pexpireat)),
    cmd!("ttl", 2, READONLY | FAST, ONE_KEY, Key, S(keys::ttl)),
    cmd!("pttl", 2, READONLY | FAST, ONE_KEY, Key, S(keys::pttl)),
    cmd!("expiretime", 2, READONLY | FAST, ONE_KEY, Key, S(keys::expiretime)),
    cmd!("pexpiretime", 2, READONLY | FAST, ONE_KEY, Key, S(keys::pexpiretime)),
    cmd!("persist", 2, WRITE | FAST, ONE_KEY, Key, S(keys::persist)),
    cmd!(intents Intents::Transfer; "rename", 3, WRITE, (1, 2, 1), Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "renamenx", 3, WRITE | FAST, (1, 2, 1), Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "copy", -3, WRITE | DENYOOM, (1, 2, 1), Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "move", 3, WRITE | FAST, ONE_KEY, Key, S(keys::transfer)),
    cmd!(intents Intents::SwapDbs; "swapdb", 3, WRITE | FAST, NO_KEYS, AllShards(Merge::AllOk), S(keys::swapdb)),
    cmd!("object", -2, READONLY, (2, 2, 1), Key, S(keys::object)),
    cmd!("memory", -2, READONLY, (2, 2, 1), KeyOrCoordinator(CoordCmd::Memory), S(keys::memory_usage)),
    cmd!("dump", 2, READONLY, ONE_KEY, Key, S(dumps::dump)),
    cmd!("restore", -4, WRITE | DENYOOM, ONE_KEY, Key, S(dumps::restore)),
    cmd!("keys", 2, READONLY, NO_KEYS, AllShards(Merge::Concat), S(keys::keys)),
    cmd!("scan", -2, READONLY, NO_KEYS, Cursor, S(keys::scan)),
    cmd!("randomkey", 1, READONLY, NO_KEYS, AllShards(Merge::RandomKey), S(keys::randomkey)),
    // strings
    cmd!("get", 2, READONLY | FAST, ONE_KEY, Key, S(strings::get)),
    cmd!("set", -3, WRITE | DENYOOM, ONE_KEY, Key, S(strings::set)),
    cmd!("setnx", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::setnx)),
    cmd!("setex", 4, WRITE | DENYOOM, ONE_KEY, Key, S(strings::setex)),
    cmd!("psetex", 4, WRITE | DENYOOM, ONE_KEY, Key, S(strings::psetex)),
    cmd!("getset", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::getset)),
    cmd!("getdel", 2, WRITE | FAST, ONE_KEY, Key, S(strings::getdel)),
    cmd!("getex", -2, WRITE | FAST, ONE_KEY, Key, S(strings::getex)),
    cmd!("mget", -2, READONLY | FAST, ALL_KEYS, Keys(Merge::Items), S(strings::mget)),
    cmd!("mset", -3, WRITE | DENYOOM, PAIRS, Keys(Merge::AllOk), S(strings::mset)),
    cmd!("msetnx", -3, WRITE | DENYOOM, PAIRS, Keys(Merge::MsetNx), S(strings::msetnx)),
    cmd!("append", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::append)),
    cmd!("lcs", -3, READONLY, (1, 2, 1), Keys(Merge::Gather), S(strings::lcs)),
    cmd!("strlen", 2, READONLY | FAST, ONE_KEY, Key, S(strings::strlen)),
    cmd!("getrange", 4, READONLY, ONE_KEY, Key, S(strings::getrange)),
    cmd!("substr", 4, READONLY, ONE_KEY, Key, S(strings::getrange)),
    cmd!("setrange", 4, WRITE | DENYOOM, ONE_KEY, Key, S(strings::setrange)),
    cmd!("incr", 2, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::incr)),
    cmd!("decr", 2, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::decr)),
    cmd!("incrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::incrby)),
    cmd!("decrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::decrby)),
    cmd!("incrbyfloat", 3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(strings::incrbyfloat)),
    // hashes
    cmd!(more MoreKeys::Sort { store: true }; "sort", -2, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(sort::sort)),
    cmd!(more MoreKeys::Sort { store: false }; "sort_ro", -2, READONLY, ONE_KEY, Keys(Merge::Gather), S(sort::sort_ro)),
    cmd!("setbit", 4, WRITE | DENYOOM, ONE_KEY, Key, S(bits::setbit)),
    cmd!("getbit", 3, READONLY | FAST, ONE_KEY, Key, S(bits::getbit)),
    cmd!("bitcount", -2, READONLY, ONE_KEY, Key, S(bits::bitcount)),
    cmd!("bitpos", -3, READONLY, ONE_KEY, Key, S(bits::bitpos)),
    cmd!("bitop", -4, WRITE | DENYOOM, (2, -1, 1), Keys(Merge::Gather), S(bits::bitop)),
    cmd!("bitfield", -2, WRITE | DENYOOM, ONE_KEY, Key, S(bits::bitfield)),
    cmd!("bitfield_ro", -2, READONLY | FAST, ONE_KEY, Key, S(bits::bitfield_ro)),
    cmd!("pfadd", -2, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hll::pfadd)),
    cmd!("pfcount", -2, READONLY | MAY_REPLICATE, ALL_KEYS, Keys(Merge::Gather), S(hll::pfcount)),
    cmd!("pfmerge", -2, WRITE | DENYOOM, ALL_KEYS, Keys(Merge::Gather), S(hll::pfmerge)),
    cmd!("hset", -4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hash::hset)),
    cmd!("hmset", -4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hash::hset)),
    cmd!("hsetnx", 4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hash::hsetnx)),
    cmd!("hget", 3, READONLY | FAST, ONE_KEY, Key, S(hash::hget)),
    cmd!("hmget", -3, READONLY | FAST, ONE_KEY, Key, S(hash::hmget)),
    cmd!("hdel", -3, WRITE | FAST, ONE_KEY, Key, S(hash::hdel)),
    cmd!("hexists", 3, READONLY | FAST, ONE_KEY, Key, S(hash::hexists)),
    cmd!("hlen", 2, READONLY | FAST, ONE_KEY, Key, S(hash::hlen)),
    cmd!("hstrlen", 3, READONLY | FAST, ONE_KEY, Key, S(hash::hstrlen)),
    cmd!("hkeys", 2, READONLY, ONE_KEY, Key, S(hash::hkeys)),
    cmd!("hvals", 2, READONLY, ONE_KEY, Key, S(hash::hvals)),
    cmd!("hgetall", 2, READONLY, ONE_KEY, Key, S(hash::hgetall)),
    cmd!("hincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hash::hincrby)),
    cmd!("hincrbyfloat", 4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(hash::hincrbyfloat)),
    cmd!("hrandfield", -2, READONLY, ONE_KEY, Key, S(hash::hrandfield)),
    cmd!("hscan", -3, READONLY, ONE_KEY, Key, S(hash::hscan)),
    // sets
    cmd!("sadd", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(sets::sadd)),
    cmd!("srem", -3, WRITE | FAST, ONE_KEY, Key, S(sets::srem)),
    cmd!("sismember", 3, READONLY | FAST, ONE_KEY, Key, S(sets::sismember)),
    cmd!("smismember", -3, READONLY | FAST, ONE_KEY, Key, S(sets::smismember)),
    cmd!("smembers", 2, READONLY, ONE_KEY, Key, S(sets::smembers)),
    cmd!("scard", 2, READONLY | FAST, ONE_KEY, Key, S(sets::scard)),
    cmd!("spop", -2, WRITE | FAST, ONE_KEY, Key, S(sets::spop)),
    cmd!("srandmember", -2, READONLY, ONE_KEY, Key, S(sets::srandmember)),
    cmd!("smove", 4, WRITE | FAST, (1, 2, 1), Keys(Merge::Gather), S(sets::smove)),
    cmd!("sinter", -2, READONLY, ALL_KEYS, Keys(Merge::Gather), S(sets::sinter)),
    cmd!("sunion", -2, READONLY, ALL_KEYS, Keys(Merge::Gather), S(sets::sunion)),
    cmd!("sdiff", -2, READONLY, ALL_KEYS, Keys(Merge::Gather), S(sets::sdiff)),
    cmd!("sinterstore", -3, WRITE | DENYOOM, ALL_KEYS, Keys(Merge::Gather), S(sets::sinterstore)),
    cmd!("sunionstore", -3, WRITE | DENYOOM, ALL_KEYS, Keys(Merge::Gather), S(sets::sunionstore)),
    cmd!("sdiffstore", -3, WRITE | DENYOOM, ALL_KEYS, Keys(Merge::Gather), S(sets::sdiffstore)),
    cmd!(numkeys 1; "sintercard", -3, READONLY, NO_KEYS, Keys(Merge::Gather), S(sets::sintercard)),
    cmd!("sscan", -3, READONLY, ONE_KEY, Key, S(sets::sscan)),
    // lists
    cmd!("lpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(lists::lpush)),
    cmd!("rpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(lists::rpush)),
    cmd!("lpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(lists::lpushx)),
    cmd!("rpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(lists::rpushx)),
    cmd!("lpop", -2, WRITE | FAST, ONE_KEY, Key, S(lists::lpop)),
    cmd!("rpop", -2, WRITE | FAST, ONE_KEY, Key, S(lists::rpop)),
    cmd!("llen", 2, READONLY | FAST, ONE_KEY, Key, S(lists::llen)),
    cmd!("lindex", 3, READONLY, ONE_KEY, Key, S(lists::lindex)),
    cmd!("lset", 4, WRITE | DENYOOM, ONE_KEY, Key, S(lists::lset)),
    cmd!("lrange", 4, READONLY, ONE_KEY, Key, S(lists::lrange)),
    cmd!("ltrim", 4, WRITE, ONE_KEY, Key, S(lists::ltrim)),
    cmd!("linsert", 5, WRITE | DENYOOM, ONE_KEY, Key, S(lists::linsert)),
    cmd!("lrem", 4, WRITE, ONE_KEY, Key, S(lists::lrem)),
    cmd!("lpos", -3, READONLY, ONE_KEY, Key, S(lists::lpos)),
    cmd!("lmove", 5, WRITE | DENYOOM, (1, 2, 1), Keys(Merge::Gather), S(lists::lmove)),
    cmd!("rpoplpush", 3, WRITE | DENYOOM, (1, 2, 1), Keys(Merge::Gather), S(lists::rpoplpush)),
    cmd!(numkeys 1; "lmpop", -4, WRITE, NO_KEYS, Keys(Merge::Gather), S(lists::lmpop)),
    cmd!("blpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), Keys(Merge::Gather), S(blocking::blpop)),
    cmd!("brpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), Keys(Merge::Gather), S(blocking::brpop)),
    cmd!("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), Keys(Merge::Gather), S(blocking::brpoplpush)),
    cmd!("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), Keys(Merge::Gather), S(blocking::blmove)),
    cmd!(numkeys 2; "blmpop", -5, WRITE | BLOCKING, NO_KEYS, Keys(Merge::Gather), S(blocking::blmpop)),
    // streams
    cmd!("xadd", -5, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(streams::xadd)),
    cmd!("xlen", 2, READONLY | FAST, ONE_KEY, Key, S(streams::xlen)),
    cmd!("xrange", -4, READONLY, ONE_KEY, Key, S(streams::xrange)),
    cmd!("xrevrange", -4, READONLY, ONE_KEY, Key, S(streams::xrevrange)),
    cmd!("xdel", -3, WRITE | FAST, ONE_KEY, Key, S(streams::xdel)),
    cmd!("xtrim", -4, WRITE, ONE_KEY, Key, S(streams::xtrim)),
    cmd!("xsetid", -3, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(streams::xsetid)),
    cmd!(more MoreKeys::Streams; "xread", -4, READONLY | BLOCKING, NO_KEYS, Keys(Merge::Gather), S(streams::xread)),
    cmd!(more MoreKeys::Streams; "xreadgroup", -7, WRITE | BLOCKING, NO_KEYS, Keys(Merge::Gather), S(streams::xread)),
    cmd!("xgroup", -2, 0, (2, 2, 1), Key, S(groups::xgroup)),
    cmd!("xack", -4, WRITE | FAST, ONE_KEY, Key, S(groups::xack)),
    cmd!("xpending", -3, READONLY, ONE_KEY, Key, S(groups::xpending)),
    cmd!("xclaim", -6, WRITE | FAST, ONE_KEY, Key, S(groups::xclaim)),
    cmd!("xautoclaim", -6, WRITE | FAST, ONE_KEY, Key, S(groups::xautoclaim)),
    cmd!("xinfo", -2, 0, (2, 2, 1), Key, S(groups::xinfo)),
    cmd!("geoadd", -5, WRITE | DENYOOM, ONE_KEY, Key, S(geo::geoadd)),
    cmd!("geopos", -2, READONLY, ONE_KEY, Key, S(geo::geopos)),
    cmd!("geodist", -4, READONLY, ONE_KEY, Key, S(geo::geodist)),
    cmd!("geohash", -2, READONLY, ONE_KEY, Key, S(geo::geohash)),
    cmd!("geosearch", -7, READONLY, ONE_KEY, Key, S(geo::geosearch)),
    cmd!("geosearchstore", -8, WRITE | DENYOOM, (1, 2, 1), Keys(Merge::Gather), S(geo::geosearchstore)),
    cmd!(more MoreKeys::GeoStore; "georadius", -6, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(geo::georadius)),
    cmd!("georadius_ro", -6, READONLY, ONE_KEY, Key, S(geo::georadius_ro)),
    cmd!(more MoreKeys::GeoStore; "georadiusbymember", -5, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(geo::georadiusbymember)),
    cmd!("georadiusbymember_ro", -5, READONLY, ONE_KEY, Key, S(geo::georadiusbymember_ro)),
    cmd!("zadd", -4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(zsets::zadd)),
    cmd!("zincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, Key, S(zsets::zincrby)),
    cmd!("zrem", -3, WRITE | FAST, ONE_KEY, Key, S(zsets::zrem)),
    cmd!("zcard", 2, READONLY | FAST, ONE_KEY, Key, S(zsets::zcard)),
    cmd!("zcount", 4, READONLY | FAST, ONE_KEY, Key, S(zsets::zcount)),
    cmd!("zlexcount", 4, READONLY | FAST, ONE_KEY, Key, S(zsets::zlexcount)),
    cmd!("zscore", 3, READONLY | FAST, ONE_KEY, Key, S(zsets::zscore)),
    cmd!("zmscore", -3, READONLY | FAST, ONE_KEY, Key, S(zsets::zmscore)),
    cmd!("zrank", 3, READONLY | FAST, ONE_KEY, Key, S(zsets::zrank)),
    cmd!("zrevrank", 3, READONLY | FAST, ONE_KEY, Key, S(zsets::zrevrank)),
    cmd!("zrange", -4, READONLY, ONE_KEY, Key, S(zsets::zrange)),
    cmd!("zrangestore", -5, WRITE | DENYOOM, (1, 2, 1), Keys(Merge::Gather), S(zsets::zrangestore)),
    cmd!("zrevrange", -4, READONLY, ONE_KEY, Key, S(zsets::zrevrange)),
    cmd!("zrangebyscore", -4, READONLY, ONE_KEY, Key, S(zsets::zrangebyscore)),
    cmd!("zrevrangebyscore", -4, READONLY, ONE_KEY, Key, S(zsets::zrevrangebyscore)),
    cmd!("zrangebylex", -4, READONLY, ONE_KEY, Key, S(zsets::zrangebylex)),
    cmd!("zrevrangebylex", -4, READONLY, ONE_KEY, Key, S(zsets::zrevrangebylex)),
    cmd!("zremrangebyrank", 4, WRITE, ONE_KEY, Key, S(zsets::zremrangebyrank)),
    cmd!("zremrangebyscore", 4, WRITE, ONE_KEY, Key, S(zsets::zremrangebyscore)),
    cmd!("zremrangebylex", 4, WRITE, ONE_KEY, Key, S(zsets::zremrangebylex)),
    cmd!("zpopmin", -2, WRITE | FAST, ONE_KEY, Key, S(zsets::zpopmin)),
    cmd!("zpopmax", -2, WRITE | FAST, ONE_KEY, Key, S(zsets::zpopmax)),
    cmd!(numkeys 1; "zmpop", -4, WRITE, NO_KEYS, Keys(Merge::Gather), S(zsets::zmpop)),
    cmd!("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), Keys(Merge::Gather), S(blocking::bzpopmin)),
    cmd!("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), Keys(Merge::Gather), S(blocking::bzpopmax)),
    cmd!(numkeys 2; "bzmpop", -5, WRITE | BLOCKING, NO_KEYS, Keys(Merge::Gather), S(blocking::bzmpop)),
    cmd!("zrandmember", -2, READONLY, ONE_KEY, Key, S(zsets::zrandmember)),
    cmd!(numkeys 1; "zunion", -3, READONLY, NO_KEYS, Keys(Merge::Gather), S(zsets::zunion)),
    cmd!(numkeys 1; "zinter", -3, READONLY, NO_KEYS, Keys(Merge::Gather), S(zsets::zinter)),
    cmd!(numkeys 1; "zdiff", -3, READONLY, NO_KEYS, Keys(Merge::Gather), S(zsets::zdiff)),
    cmd!(numkeys 2; "zunionstore", -4, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(zsets::zunionstore)),
    cmd!(numkeys 2; "zinterstore", -4, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(zsets::zinterstore)),
    cmd!(numkeys 2; "zdiffstore", -4, WRITE | DENYOOM, ONE_KEY, Keys(Merge::Gather), S(zsets::zdiffstore)),
    cmd!(numkeys 1; "zintercard", -3, READONLY, NO_KEYS, Keys(Merge::Gather), S(zsets::zintercard)),
    cmd!("zscan", -3, READONLY, ONE_KEY, Key, S(zsets::zscan)),
];

/// Finds a command by name, case-insensitively. Returns its index in [`COMMANDS`].
pub fn lookup(name: &[u8]) -> Option<usize> {
    let mut lower = [0u8; 24];
    if name.len() > lower.len() {
        return None;
    }
    for (d, s) in lower.iter_mut().zip(name) {
        *d = s.to_ascii_lowercase();
    }
    let lower = &lower[..name.len()];
    index().get(lower).copied()
}

/// Whether Redis gives the command at this index subcommands (ACL, CLIENT, CONFIG, OBJECT,
/// ...): CLIENT LIST and the ACL LOG then name the subcommand, `client|list`.
pub fn has_subcommands(idx: usize) -> bool {
    static CONTAINERS: std::sync::OnceLock<Vec<bool>> = std::sync::OnceLock::new();
    let containers = CONTAINERS.get_or_init(|| {
        let meta = crate::redis_meta::commands();
        COMMANDS
            .iter()
            .map(|c| crate::redis_meta::find(c.name).is_some_and(|i| meta[i].has_subcommands()))
            .collect()
    });
    containers.get(idx).copied().unwrap_or(false)
}

type Index = std::collections::HashMap<&'static [u8], usize, ahash::RandomState>;

fn index() -> &'static Index {
    static INDEX: std::sync::OnceLock<Index> = std::sync::OnceLock::new();
    INDEX.get_or_init(|| {
        COMMANDS
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.as_bytes(), i))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_always_on_their_keys_shard_are_so_for_any_words() {
        let words: Vec<Vec<Vec<u8>>> = vec![
            vec![],
            vec![b"k".to_vec()],
            vec![
                b"k".to_vec(),
                b"BY".to_vec(),
                b"w_*".to_vec(),
                b"GET".to_vec(),
                b"#".to_vec(),
            ],
            vec![
                b"1".to_vec(),
                b"k".to_vec(),
                b"STORE".to_vec(),
                b"d".to_vec(),
            ],
        ];
        let mut always = 0;
        for spec in COMMANDS
            .iter()
            .filter(|c| c.always_runs_on_its_keys_shard())
        {
            always += 1;
            assert!(spec.first_key > 0, "{}", spec.name);
            for rest in &words {
                let mut w = vec![spec.name.as_bytes().to_vec()];
                w.extend(rest.iter().cloned());
                let (buf, spans) = crate::args::lay_out(&w);
                let args = Args::new(&buf, &spans);
                assert!(spec.runs_on_its_keys_shard(&args), "{}", spec.name);
                let fixed: Vec<usize> = spec.fixed_key_positions(args.len()).collect();
                let all: Vec<usize> = spec.key_positions_iter(&args).collect();
                assert_eq!(fixed, all, "{} {rest:?}", spec.name);
            }
        }
        assert!(always > 100, "{always}");
        let sort = &COMMANDS[lookup(b"sort").expect("sort")];
        assert!(!sort.always_runs_on_its_keys_shard());
    }

    #[test]
    fn lookup_is_case_insensitive() {
        let i = lookup(b"GeT").expect("get");
        assert_eq!(COMMANDS[i].name, "get");
        assert!(lookup(b"nosuchcommand").is_none());
        assert!(lookup(&[b'a'; 100]).is_none());
    }

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut seen = std::collections::HashSet::new();
        for c in COMMANDS {
            assert_eq!(c.name, c.name.to_ascii_lowercase());
            assert!(seen.insert(c.name), "duplicate {}", c.name);
            assert!(c.name.len() <= 24);
        }
    }

    #[test]
    fn key_positions() {
        let positions = |name: &str, words: &[&str]| {
            let (buf, spans) = crate::args::lay_out(words);
            let spec = &COMMANDS[lookup(name.as_bytes()).unwrap()];
            spec.key_positions(&Args::new(&buf, &spans))
        };
        assert_eq!(
            positions("mset", &["mset", "a", "1", "b", "2", "c", "3"]),
            vec![1, 3, 5]
        );
        assert_eq!(positions("get", &["get", "k"]), vec![1]);
        assert!(positions("ping", &["ping"]).is_empty());
        assert_eq!(
            positions("sintercard", &["sintercard", "2", "a", "b", "LIMIT", "1"]),
            vec![2, 3]
        );
        assert!(positions("sintercard", &["sintercard", "9", "a"]).is_empty());
        assert!(positions("sintercard", &["sintercard", "x", "a"]).is_empty());
        let mset = &COMMANDS[lookup(b"mset").unwrap()];
        let get = &COMMANDS[lookup(b"get").unwrap()];
        assert!(get.arity_ok(2) && !get.arity_ok(3));
        assert!(mset.arity_ok(3) && mset.arity_ok(9) && !mset.arity_ok(2));
    }
}

#[cfg(test)]
mod docs_tests {
    use super::COMMANDS;

    #[test]
    fn every_command_is_documented() {
        let docs = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/commands.md"
        ))
        .expect("docs/commands.md");
        for c in COMMANDS {
            let entry = format!("| `{}` |", c.name.to_ascii_uppercase());
            assert!(
                docs.contains(&entry),
                "docs/commands.md does not list {}",
                c.name
            );
        }
        for p in crate::config::PARAMS {
            assert!(
                docs.contains(&format!("| `{}` |", p.name)),
                "docs/commands.md does not list {}",
                p.name
            );
        }
    }
}
