//! The command table: every command's name, arity, flags, key positions, ACL categories, how
//! the coordinator routes it, and its handler. COMMAND, arity checks and routing all read this
//! one table, so they cannot disagree.

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
    pub acl: &'static str,
    pub group: &'static str,
    pub summary: &'static str,
    pub since: &'static str,
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

    /// Key positions given by first/last/step alone.
    fn fixed_key_positions(&self, argc: usize) -> impl Iterator<Item = usize> {
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
    acl: &'static str,
    group: &'static str,
    since: &'static str,
    summary: &'static str,
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
        acl: d.acl,
        group: d.group,
        summary: d.summary,
        since: d.since,
        route: d.route,
        handler: d.handler,
    }
}

macro_rules! cmd {
    ($name:literal, $arity:expr, $flags:expr, $keys:expr, $acl:literal, $group:literal, $since:literal, $summary:literal, $route:expr, $handler:expr) => {
        cmd!(more MoreKeys::None; $name, $arity, $flags, $keys, $acl, $group, $since, $summary, $route, $handler)
    };
    (numkeys $numkeys:literal; $name:literal, $arity:expr, $flags:expr, $keys:expr, $acl:literal, $group:literal, $since:literal, $summary:literal, $route:expr, $handler:expr) => {
        cmd!(more MoreKeys::Numkeys($numkeys); $name, $arity, $flags, $keys, $acl, $group, $since, $summary, $route, $handler)
    };
    (intents $intents:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $acl:literal, $group:literal, $since:literal, $summary:literal, $route:expr, $handler:expr) => {
        cmd!(full MoreKeys::None, $intents; $name, $arity, $flags, $keys, $acl, $group, $since, $summary, $route, $handler)
    };
    (more $more:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $acl:literal, $group:literal, $since:literal, $summary:literal, $route:expr, $handler:expr) => {
        cmd!(full $more, Intents::Keys; $name, $arity, $flags, $keys, $acl, $group, $since, $summary, $route, $handler)
    };
    (full $more:expr, $intents:expr; $name:literal, $arity:expr, $flags:expr, $keys:expr, $acl:literal, $group:literal, $since:literal, $summary:literal, $route:expr, $handler:expr) => {
        spec(Def {
            name: $name,
            arity: $arity,
            flags: $flags,
            keys: $keys,
            more_keys: $more,
            intents: $intents,
            acl: $acl,
            group: $group,
            since: $since,
            summary: $summary,
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

pub static COMMANDS: &[CommandSpec] = &[
    // connection
    cmd!("ping", -1, FAST | SENTINEL, NO_KEYS, "@fast @connection", "connection", "1.0.0", "Returns the server's liveliness response.", Coordinator, C(CoordCmd::Ping)),
    cmd!("echo", 2, FAST, NO_KEYS, "@fast @connection", "connection", "1.0.0", "Returns the given string.", Coordinator, C(CoordCmd::Echo)),
    cmd!("quit", -1, ALLOW_BUSY | NOSCRIPT | LOADING | STALE | FAST | NO_AUTH, NO_KEYS, "@fast @connection", "connection", "1.0.0", "Closes the connection.", Coordinator, C(CoordCmd::Quit)),
    cmd!("hello", -1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | SENTINEL | ALLOW_BUSY, NO_KEYS, "@fast @connection", "connection", "6.0.0", "Handshakes with the Redis server.", Coordinator, C(CoordCmd::Hello)),
    cmd!("auth", -2, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | SENTINEL | ALLOW_BUSY, NO_KEYS, "@fast @connection", "connection", "1.0.0", "Authenticates the connection.", Coordinator, C(CoordCmd::Auth)),
    cmd!("select", 2, LOADING | STALE | FAST, NO_KEYS, "@fast @connection", "connection", "1.0.0", "Changes the selected database.", Coordinator, C(CoordCmd::Select)),
    cmd!("reset", 1, NOSCRIPT | LOADING | STALE | FAST | NO_AUTH | ALLOW_BUSY, NO_KEYS, "@fast @connection", "connection", "6.2.0", "Resets the connection.", Coordinator, C(CoordCmd::Reset)),
    cmd!("acl", -2, NOSCRIPT | LOADING | STALE | SENTINEL, NO_KEYS, "@slow", "server", "6.0.0", "A container for Access List Control commands.", Coordinator, C(CoordCmd::Acl)),
    cmd!("client", -2, NOSCRIPT | LOADING | STALE | SENTINEL, NO_KEYS, "@slow @connection", "connection", "2.4.0", "A container for client connection commands.", Coordinator, C(CoordCmd::Client)),
    // transactions
    cmd!("multi", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, "@fast @transaction", "transactions", "1.2.0", "Starts a transaction.", Coordinator, C(CoordCmd::Multi)),
    cmd!("exec", 1, NOSCRIPT | LOADING | STALE | SKIP_SLOWLOG, NO_KEYS, "@slow @transaction", "transactions", "1.2.0", "Executes all commands in a transaction.", Coordinator, C(CoordCmd::Exec)),
    cmd!("discard", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, "@fast @transaction", "transactions", "2.0.0", "Discards a transaction.", Coordinator, C(CoordCmd::Discard)),
    cmd!("watch", -2, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, ALL_KEYS, "@fast @transaction", "transactions", "2.2.0", "Monitors changes to keys to determine the execution of a transaction.", Coordinator, C(CoordCmd::Watch)),
    cmd!("unwatch", 1, NOSCRIPT | LOADING | STALE | FAST | ALLOW_BUSY, NO_KEYS, "@fast @transaction", "transactions", "2.2.0", "Forgets about watched keys of a transaction.", Coordinator, C(CoordCmd::Unwatch)),
    // server
    cmd!("command", -1, LOADING | STALE | SENTINEL, NO_KEYS, "@slow @connection", "server", "2.8.13", "Returns detailed information about all commands.", Coordinator, C(CoordCmd::Command)),
    cmd!("info", -1, LOADING | STALE | SENTINEL, NO_KEYS, "@slow @dangerous", "server", "1.0.0", "Returns information and statistics about the server.", Coordinator, C(CoordCmd::Info)),
    cmd!("config", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, "@admin @slow @dangerous", "server", "2.0.0", "A container for server configuration commands.", Coordinator, C(CoordCmd::Config)),
    // Containers carry the flags of their subcommands (SLOWLOG HELP and LATENCY HELP are the
    // exceptions Redis does not flag admin), as CONFIG's row does.
    cmd!("slowlog", -2, ADMIN | LOADING | STALE, NO_KEYS, "@admin @slow @dangerous", "server", "2.2.12", "A container for slow log commands.", Coordinator, C(CoordCmd::Slowlog)),
    cmd!("latency", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, "@admin @slow @dangerous", "server", "2.8.13", "A container for latency diagnostics commands.", Coordinator, C(CoordCmd::Latency)),
    cmd!("time", 1, LOADING | STALE | FAST, NO_KEYS, "@fast", "server", "2.6.0", "Returns the server time.", Coordinator, C(CoordCmd::Time)),
    cmd!("shutdown", -1, ADMIN | NOSCRIPT | LOADING | STALE | NO_MULTI | SENTINEL | ALLOW_BUSY, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "Synchronously saves the database(s) to disk and shuts down the server.", Coordinator, C(CoordCmd::Shutdown)),
    cmd!(intents Intents::Debug; "debug", -2, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "A container for debugging commands.", Coordinator, C(CoordCmd::Debug)),
    cmd!(intents Intents::AllDbs; "save", 1, ADMIN | NOSCRIPT | NO_MULTI, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "Synchronously saves the database(s) to disk.", Coordinator, C(CoordCmd::Save)),
    cmd!(intents Intents::AllDbs; "bgsave", -1, ADMIN | NOSCRIPT, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "Asynchronously saves the database(s) to disk.", Coordinator, C(CoordCmd::Bgsave)),
    cmd!(intents Intents::AllDbs; "bgrewriteaof", 1, ADMIN | NOSCRIPT, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "Asynchronously rewrites the append-only file to disk.", Coordinator, C(CoordCmd::Bgrewriteaof)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "eval", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, "@slow @scripting", "scripting", "2.6.0", "Executes a server-side Lua script.", Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "evalsha", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, "@slow @scripting", "scripting", "2.6.0", "Executes a server-side Lua script by SHA1 digest.", Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "eval_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, "@slow @scripting", "scripting", "7.0.0", "Executes a read-only server-side Lua script.", Coordinator, C(CoordCmd::Eval)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "evalsha_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, "@slow @scripting", "scripting", "7.0.0", "Executes a read-only server-side Lua script by SHA1 digest.", Coordinator, C(CoordCmd::Eval)),
    cmd!("script", -2, NOSCRIPT, NO_KEYS, "@slow @scripting", "scripting", "2.6.0", "A container for Lua scripts management commands.", Coordinator, C(CoordCmd::Script)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "fcall", -3, NOSCRIPT | STALE | MAY_REPLICATE, NO_KEYS, "@slow @scripting", "scripting", "7.0.0", "Invokes a function.", Coordinator, C(CoordCmd::Fcall)),
    cmd!(full MoreKeys::Numkeys(2), Intents::Script; "fcall_ro", -3, NOSCRIPT | STALE | READONLY, NO_KEYS, "@slow @scripting", "scripting", "7.0.0", "Invokes a read-only function.", Coordinator, C(CoordCmd::Fcall)),
    cmd!("function", -2, NOSCRIPT, NO_KEYS, "@slow @scripting", "scripting", "7.0.0", "A container for function commands.", Coordinator, C(CoordCmd::Function)),
    cmd!("subscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, "@pubsub @slow", "pubsub", "2.0.0", "Listens for messages published to channels.", Coordinator, C(CoordCmd::Subscribe(Kind::Channel))),
    cmd!("psubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, "@pubsub @slow", "pubsub", "2.0.0", "Listens for messages published to channels that match one or more patterns.", Coordinator, C(CoordCmd::Subscribe(Kind::Pattern))),
    cmd!("ssubscribe", -2, PUBSUB | NOSCRIPT | LOADING | STALE, ALL_KEYS, "@pubsub @slow", "pubsub", "7.0.0", "Listens for messages published to shard channels.", Coordinator, C(CoordCmd::Subscribe(Kind::ShardChannel))),
    cmd!("unsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, "@pubsub @slow", "pubsub", "2.0.0", "Stops listening to messages posted to channels.", Coordinator, C(CoordCmd::Unsubscribe(Kind::Channel))),
    cmd!("punsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, NO_KEYS, "@pubsub @slow", "pubsub", "2.0.0", "Stops listening to messages published to channels that match one or more patterns.", Coordinator, C(CoordCmd::Unsubscribe(Kind::Pattern))),
    cmd!("sunsubscribe", -1, PUBSUB | NOSCRIPT | LOADING | STALE, ALL_KEYS, "@pubsub @slow", "pubsub", "7.0.0", "Stops listening to messages posted to shard channels.", Coordinator, C(CoordCmd::Unsubscribe(Kind::ShardChannel))),
    cmd!("publish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, NO_KEYS, "@pubsub @fast", "pubsub", "2.0.0", "Posts a message to a channel.", Coordinator, C(CoordCmd::Publish { sharded: false })),
    cmd!("spublish", 3, PUBSUB | LOADING | STALE | FAST | MAY_REPLICATE, ONE_KEY, "@pubsub @fast", "pubsub", "7.0.0", "Post a message to a shard channel", Coordinator, C(CoordCmd::Publish { sharded: true })),
    cmd!("monitor", 1, ADMIN | NOSCRIPT | LOADING | STALE, NO_KEYS, "@admin @slow @dangerous", "server", "1.0.0", "Listens for all requests received by the server in real-time.", Coordinator, C(CoordCmd::Monitor)),
    cmd!("pubsub", -2, 0, NO_KEYS, "@slow", "pubsub", "2.8.0", "A container for Pub/Sub commands.", Coordinator, C(CoordCmd::Pubsub)),
    cmd!("lastsave", 1, LOADING | STALE | FAST, NO_KEYS, "@admin @fast @dangerous", "server", "1.0.0", "Returns the Unix timestamp of the last successful save to disk.", Coordinator, C(CoordCmd::Lastsave)),
    cmd!("dbsize", 1, READONLY | FAST, NO_KEYS, "@keyspace @read @fast", "server", "1.0.0", "Returns the number of keys in the database.", AllShards(Merge::Sum), S(server::dbsize)),
    cmd!("flushdb", -1, WRITE, NO_KEYS, "@keyspace @write @slow @dangerous", "server", "1.0.0", "Removes all keys from the current database.", AllShards(Merge::AllOk), S(server::flushdb)),
    cmd!(intents Intents::AllDbs; "flushall", -1, WRITE, NO_KEYS, "@keyspace @write @slow @dangerous", "server", "1.0.0", "Removes all keys from all databases.", AllShards(Merge::AllOk), S(server::flushall)),
    // generic keyspace
    cmd!("del", -2, WRITE, ALL_KEYS, "@keyspace @write @slow", "generic", "1.0.0", "Deletes one or more keys.", Keys(Merge::Sum), S(keys::del)),
    cmd!("unlink", -2, WRITE | FAST, ALL_KEYS, "@keyspace @write @fast", "generic", "4.0.0", "Asynchronously deletes one or more keys.", Keys(Merge::Sum), S(keys::del)),
    cmd!("exists", -2, READONLY | FAST, ALL_KEYS, "@keyspace @read @fast", "generic", "1.0.0", "Determines whether one or more keys exist.", Keys(Merge::Sum), S(keys::exists)),
    cmd!("touch", -2, READONLY | FAST, ALL_KEYS, "@keyspace @read @fast", "generic", "3.2.1", "Returns the number of existing keys out of those specified after updating the time they were last accessed.", Keys(Merge::Sum), S(keys::touch)),
    cmd!("type", 2, READONLY | FAST, ONE_KEY, "@keyspace @read @fast", "generic", "1.0.0", "Determines the type of value stored at a key.", Key, S(keys::type_cmd)),
    cmd!("expire", -3, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "1.0.0", "Sets the expiration time of a key in seconds.", Key, S(keys::expire)),
    cmd!("pexpire", -3, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "2.6.0", "Sets the expiration time of a key in milliseconds.", Key, S(keys::pexpire)),
    cmd!("expireat", -3, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "1.2.0", "Sets the expiration time of a key to a Unix timestamp.", Key, S(keys::expireat)),
    cmd!("pexpireat", -3, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "2.6.0", "Sets the expiration time of a key to a Unix milliseconds timestamp.", Key, S(keys::pexpireat)),
    cmd!("ttl", 2, READONLY | FAST, ONE_KEY, "@keyspace @read @fast", "generic", "1.0.0", "Returns the expiration time in seconds of a key.", Key, S(keys::ttl)),
    cmd!("pttl", 2, READONLY | FAST, ONE_KEY, "@keyspace @read @fast", "generic", "2.6.0", "Returns the expiration time in milliseconds of a key.", Key, S(keys::pttl)),
    cmd!("expiretime", 2, READONLY | FAST, ONE_KEY, "@keyspace @read @fast", "generic", "7.0.0", "Returns the expiration time of a key as a Unix timestamp.", Key, S(keys::expiretime)),
    cmd!("pexpiretime", 2, READONLY | FAST, ONE_KEY, "@keyspace @read @fast", "generic", "7.0.0", "Returns the expiration time of a key as a Unix milliseconds timestamp.", Key, S(keys::pexpiretime)),
    cmd!("persist", 2, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "2.2.0", "Removes the expiration time of a key.", Key, S(keys::persist)),
    cmd!(intents Intents::Transfer; "rename", 3, WRITE, (1, 2, 1), "@keyspace @write @slow", "generic", "1.0.0", "Renames a key and overwrites the destination.", Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "renamenx", 3, WRITE | FAST, (1, 2, 1), "@keyspace @write @fast", "generic", "1.0.0", "Renames a key only when the target key name doesn't exist.", Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "copy", -3, WRITE | DENYOOM, (1, 2, 1), "@keyspace @write @slow", "generic", "6.2.0", "Copies the value of a key to a new key.", Keys(Merge::Transfer), S(keys::transfer)),
    cmd!(intents Intents::Transfer; "move", 3, WRITE | FAST, ONE_KEY, "@keyspace @write @fast", "generic", "1.0.0", "Moves a key to another database.", Key, S(keys::transfer)),
    cmd!(intents Intents::SwapDbs; "swapdb", 3, WRITE | FAST, NO_KEYS, "@keyspace @write @fast @dangerous", "server", "4.0.0", "Swaps two Redis databases.", AllShards(Merge::AllOk), S(keys::swapdb)),
    cmd!("object", -2, READONLY, (2, 2, 1), "@keyspace @read @slow", "generic", "2.2.3", "A container for object introspection commands.", Key, S(keys::object)),
    cmd!("memory", -2, READONLY, (2, 2, 1), "@read @slow", "server", "4.0.0", "A container for memory diagnostics commands.", KeyOrCoordinator(CoordCmd::Memory), S(keys::memory_usage)),
    cmd!("dump", 2, READONLY, ONE_KEY, "@keyspace @read @slow", "generic", "2.6.0", "Return a serialized version of the value stored at the specified key.", Key, S(dumps::dump)),
    cmd!("restore", -4, WRITE | DENYOOM, ONE_KEY, "@keyspace @write @slow @dangerous", "generic", "2.6.0", "Create a key using the provided serialized value, previously obtained using DUMP.", Key, S(dumps::restore)),
    cmd!("keys", 2, READONLY, NO_KEYS, "@keyspace @read @slow @dangerous", "generic", "1.0.0", "Returns all key names that match a pattern.", AllShards(Merge::Concat), S(keys::keys)),
    cmd!("scan", -2, READONLY, NO_KEYS, "@keyspace @read @slow", "generic", "2.8.0", "Iterates over the key names in the database.", Cursor, S(keys::scan)),
    cmd!("randomkey", 1, READONLY, NO_KEYS, "@keyspace @read @slow", "generic", "1.0.0", "Returns a random key name from the database.", AllShards(Merge::RandomKey), S(keys::randomkey)),
    // strings
    cmd!("get", 2, READONLY | FAST, ONE_KEY, "@read @string @fast", "string", "1.0.0", "Returns the string value of a key.", Key, S(strings::get)),
    cmd!("set", -3, WRITE | DENYOOM, ONE_KEY, "@write @string @slow", "string", "1.0.0", "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", Key, S(strings::set)),
    cmd!("setnx", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Set the string value of a key only when the key doesn't exist.", Key, S(strings::setnx)),
    cmd!("setex", 4, WRITE | DENYOOM, ONE_KEY, "@write @string @slow", "string", "2.0.0", "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.", Key, S(strings::setex)),
    cmd!("psetex", 4, WRITE | DENYOOM, ONE_KEY, "@write @string @slow", "string", "2.6.0", "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.", Key, S(strings::psetex)),
    cmd!("getset", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Returns the previous string value of a key after setting it to a new value.", Key, S(strings::getset)),
    cmd!("getdel", 2, WRITE | FAST, ONE_KEY, "@write @string @fast", "string", "6.2.0", "Returns the string value of a key after deleting the key.", Key, S(strings::getdel)),
    cmd!("getex", -2, WRITE | FAST, ONE_KEY, "@write @string @fast", "string", "6.2.0", "Returns the string value of a key after setting its expiration time.", Key, S(strings::getex)),
    cmd!("mget", -2, READONLY | FAST, ALL_KEYS, "@read @string @fast", "string", "1.0.0", "Atomically returns the string values of one or more keys.", Keys(Merge::Items), S(strings::mget)),
    cmd!("mset", -3, WRITE | DENYOOM, PAIRS, "@write @string @slow", "string", "1.0.1", "Atomically creates or modifies the string values of one or more keys.", Keys(Merge::AllOk), S(strings::mset)),
    cmd!("msetnx", -3, WRITE | DENYOOM, PAIRS, "@write @string @slow", "string", "1.0.1", "Atomically modifies the string values of one or more keys only when all keys don't exist.", Keys(Merge::MsetNx), S(strings::msetnx)),
    cmd!("append", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "2.0.0", "Appends a string to the value of a key. Creates the key if it doesn't exist.", Key, S(strings::append)),
    cmd!("lcs", -3, READONLY, (1, 2, 1), "@read @string @slow", "string", "7.0.0", "Finds the longest common substring.", Keys(Merge::Gather), S(strings::lcs)),
    cmd!("strlen", 2, READONLY | FAST, ONE_KEY, "@read @string @fast", "string", "2.2.0", "Returns the length of a string value.", Key, S(strings::strlen)),
    cmd!("getrange", 4, READONLY, ONE_KEY, "@read @string @slow", "string", "2.4.0", "Returns a substring of the string stored at a key.", Key, S(strings::getrange)),
    cmd!("substr", 4, READONLY, ONE_KEY, "@read @string @slow", "string", "1.0.0", "Returns a substring from a string value.", Key, S(strings::getrange)),
    cmd!("setrange", 4, WRITE | DENYOOM, ONE_KEY, "@write @string @slow", "string", "2.2.0", "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.", Key, S(strings::setrange)),
    cmd!("incr", 2, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Increments the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", Key, S(strings::incr)),
    cmd!("decr", 2, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Decrements the integer value of a key by one. Uses 0 as initial value if the key doesn't exist.", Key, S(strings::decr)),
    cmd!("incrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Increments the integer value of a key by a number. Uses 0 as initial value if the key doesn't exist.", Key, S(strings::incrby)),
    cmd!("decrby", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "1.0.0", "Decrements a number from the integer value of a key. Uses 0 as initial value if the key doesn't exist.", Key, S(strings::decrby)),
    cmd!("incrbyfloat", 3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @string @fast", "string", "2.6.0", "Increment the floating point value of a key by a number. Uses 0 as initial value if the key doesn't exist.", Key, S(strings::incrbyfloat)),
    // hashes
    cmd!(more MoreKeys::Sort { store: true }; "sort", -2, WRITE | DENYOOM, ONE_KEY, "@write @set @sortedset @list @slow @dangerous", "generic", "1.0.0", "Sorts the elements in a list, a set, or a sorted set, optionally storing the result.", Keys(Merge::Gather), S(sort::sort)),
    cmd!(more MoreKeys::Sort { store: false }; "sort_ro", -2, READONLY, ONE_KEY, "@read @set @sortedset @list @slow @dangerous", "generic", "7.0.0", "Returns the sorted elements of a list, a set, or a sorted set.", Keys(Merge::Gather), S(sort::sort_ro)),
    cmd!("setbit", 4, WRITE | DENYOOM, ONE_KEY, "@write @bitmap @slow", "bitmap", "2.2.0", "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.", Key, S(bits::setbit)),
    cmd!("getbit", 3, READONLY | FAST, ONE_KEY, "@read @bitmap @fast", "bitmap", "2.2.0", "Returns a bit value by offset.", Key, S(bits::getbit)),
    cmd!("bitcount", -2, READONLY, ONE_KEY, "@read @bitmap @slow", "bitmap", "2.6.0", "Counts the number of set bits (population counting) in a string.", Key, S(bits::bitcount)),
    cmd!("bitpos", -3, READONLY, ONE_KEY, "@read @bitmap @slow", "bitmap", "2.8.7", "Finds the first set (1) or clear (0) bit in a string.", Key, S(bits::bitpos)),
    cmd!("bitop", -4, WRITE | DENYOOM, (2, -1, 1), "@write @bitmap @slow", "bitmap", "2.6.0", "Performs bitwise operations on multiple strings, and stores the result.", Keys(Merge::Gather), S(bits::bitop)),
    cmd!("bitfield", -2, WRITE | DENYOOM, ONE_KEY, "@write @bitmap @slow", "bitmap", "3.2.0", "Performs arbitrary bitfield integer operations on strings.", Key, S(bits::bitfield)),
    cmd!("bitfield_ro", -2, READONLY | FAST, ONE_KEY, "@read @bitmap @fast", "bitmap", "6.0.0", "Performs arbitrary read-only bitfield integer operations on strings.", Key, S(bits::bitfield_ro)),
    cmd!("pfadd", -2, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hyperloglog @fast", "hyperloglog", "2.8.9", "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.", Key, S(hll::pfadd)),
    cmd!("pfcount", -2, READONLY | MAY_REPLICATE, ALL_KEYS, "@read @hyperloglog @slow", "hyperloglog", "2.8.9", "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).", Keys(Merge::Gather), S(hll::pfcount)),
    cmd!("pfmerge", -2, WRITE | DENYOOM, ALL_KEYS, "@write @hyperloglog @slow", "hyperloglog", "2.8.9", "Merges one or more HyperLogLog values into a single key.", Keys(Merge::Gather), S(hll::pfmerge)),
    cmd!("hset", -4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.0.0", "Creates or modifies the value of a field in a hash.", Key, S(hash::hset)),
    cmd!("hmset", -4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.0.0", "Sets the values of multiple fields.", Key, S(hash::hset)),
    cmd!("hsetnx", 4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.0.0", "Sets the value of a field in a hash only when the field doesn't exist.", Key, S(hash::hsetnx)),
    cmd!("hget", 3, READONLY | FAST, ONE_KEY, "@read @hash @fast", "hash", "2.0.0", "Returns the value of a field in a hash.", Key, S(hash::hget)),
    cmd!("hmget", -3, READONLY | FAST, ONE_KEY, "@read @hash @fast", "hash", "2.0.0", "Returns the values of all fields in a hash.", Key, S(hash::hmget)),
    cmd!("hdel", -3, WRITE | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.0.0", "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.", Key, S(hash::hdel)),
    cmd!("hexists", 3, READONLY | FAST, ONE_KEY, "@read @hash @fast", "hash", "2.0.0", "Determines whether a field exists in a hash.", Key, S(hash::hexists)),
    cmd!("hlen", 2, READONLY | FAST, ONE_KEY, "@read @hash @fast", "hash", "2.0.0", "Returns the number of fields in a hash.", Key, S(hash::hlen)),
    cmd!("hstrlen", 3, READONLY | FAST, ONE_KEY, "@read @hash @fast", "hash", "3.2.0", "Returns the length of the value of a field.", Key, S(hash::hstrlen)),
    cmd!("hkeys", 2, READONLY, ONE_KEY, "@read @hash @slow", "hash", "2.0.0", "Returns all fields in a hash.", Key, S(hash::hkeys)),
    cmd!("hvals", 2, READONLY, ONE_KEY, "@read @hash @slow", "hash", "2.0.0", "Returns all values in a hash.", Key, S(hash::hvals)),
    cmd!("hgetall", 2, READONLY, ONE_KEY, "@read @hash @slow", "hash", "2.0.0", "Returns all fields and values in a hash.", Key, S(hash::hgetall)),
    cmd!("hincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.0.0", "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't exist.", Key, S(hash::hincrby)),
    cmd!("hincrbyfloat", 4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @hash @fast", "hash", "2.6.0", "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't exist.", Key, S(hash::hincrbyfloat)),
    cmd!("hrandfield", -2, READONLY, ONE_KEY, "@read @hash @slow", "hash", "6.2.0", "Returns one or more random fields from a hash.", Key, S(hash::hrandfield)),
    cmd!("hscan", -3, READONLY, ONE_KEY, "@read @hash @slow", "hash", "2.8.0", "Iterates over fields and values of a hash.", Key, S(hash::hscan)),
    // sets
    cmd!("sadd", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @set @fast", "set", "1.0.0", "Adds one or more members to a set. Creates the key if it doesn't exist.", Key, S(sets::sadd)),
    cmd!("srem", -3, WRITE | FAST, ONE_KEY, "@write @set @fast", "set", "1.0.0", "Removes one or more members from a set. Deletes the set if the last member was removed.", Key, S(sets::srem)),
    cmd!("sismember", 3, READONLY | FAST, ONE_KEY, "@read @set @fast", "set", "1.0.0", "Determines whether a member belongs to a set.", Key, S(sets::sismember)),
    cmd!("smismember", -3, READONLY | FAST, ONE_KEY, "@read @set @fast", "set", "6.2.0", "Determines whether multiple members belong to a set.", Key, S(sets::smismember)),
    cmd!("smembers", 2, READONLY, ONE_KEY, "@read @set @slow", "set", "1.0.0", "Returns all members of a set.", Key, S(sets::smembers)),
    cmd!("scard", 2, READONLY | FAST, ONE_KEY, "@read @set @fast", "set", "1.0.0", "Returns the number of members in a set.", Key, S(sets::scard)),
    cmd!("spop", -2, WRITE | FAST, ONE_KEY, "@write @set @fast", "set", "1.0.0", "Returns one or more random members from a set after removing them. Deletes the set if the last member was popped.", Key, S(sets::spop)),
    cmd!("srandmember", -2, READONLY, ONE_KEY, "@read @set @slow", "set", "1.0.0", "Get one or multiple random members from a set", Key, S(sets::srandmember)),
    cmd!("smove", 4, WRITE | FAST, (1, 2, 1), "@write @set @fast", "set", "1.0.0", "Moves a member from one set to another.", Keys(Merge::Gather), S(sets::smove)),
    cmd!("sinter", -2, READONLY, ALL_KEYS, "@read @set @slow", "set", "1.0.0", "Returns the intersect of multiple sets.", Keys(Merge::Gather), S(sets::sinter)),
    cmd!("sunion", -2, READONLY, ALL_KEYS, "@read @set @slow", "set", "1.0.0", "Returns the union of multiple sets.", Keys(Merge::Gather), S(sets::sunion)),
    cmd!("sdiff", -2, READONLY, ALL_KEYS, "@read @set @slow", "set", "1.0.0", "Returns the difference of multiple sets.", Keys(Merge::Gather), S(sets::sdiff)),
    cmd!("sinterstore", -3, WRITE | DENYOOM, ALL_KEYS, "@write @set @slow", "set", "1.0.0", "Stores the intersect of multiple sets in a key.", Keys(Merge::Gather), S(sets::sinterstore)),
    cmd!("sunionstore", -3, WRITE | DENYOOM, ALL_KEYS, "@write @set @slow", "set", "1.0.0", "Stores the union of multiple sets in a key.", Keys(Merge::Gather), S(sets::sunionstore)),
    cmd!("sdiffstore", -3, WRITE | DENYOOM, ALL_KEYS, "@write @set @slow", "set", "1.0.0", "Stores the difference of multiple sets in a key.", Keys(Merge::Gather), S(sets::sdiffstore)),
    cmd!(numkeys 1; "sintercard", -3, READONLY, NO_KEYS, "@read @set @slow", "set", "7.0.0", "Returns the number of members of the intersect of multiple sets.", Keys(Merge::Gather), S(sets::sintercard)),
    cmd!("sscan", -3, READONLY, ONE_KEY, "@read @set @slow", "set", "2.8.0", "Iterates over members of a set.", Key, S(sets::sscan)),
    // lists
    cmd!("lpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @list @fast", "list", "1.0.0", "Prepends one or more elements to a list. Creates the key if it doesn't exist.", Key, S(lists::lpush)),
    cmd!("rpush", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @list @fast", "list", "1.0.0", "Appends one or more elements to a list. Creates the key if it doesn't exist.", Key, S(lists::rpush)),
    cmd!("lpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @list @fast", "list", "2.2.0", "Prepends one or more elements to a list only when the list exists.", Key, S(lists::lpushx)),
    cmd!("rpushx", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @list @fast", "list", "2.2.0", "Appends an element to a list only when the list exists.", Key, S(lists::rpushx)),
    cmd!("lpop", -2, WRITE | FAST, ONE_KEY, "@write @list @fast", "list", "1.0.0", "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.", Key, S(lists::lpop)),
    cmd!("rpop", -2, WRITE | FAST, ONE_KEY, "@write @list @fast", "list", "1.0.0", "Returns and removes the last elements of a list. Deletes the list if the last element was popped.", Key, S(lists::rpop)),
    cmd!("llen", 2, READONLY | FAST, ONE_KEY, "@read @list @fast", "list", "1.0.0", "Returns the length of a list.", Key, S(lists::llen)),
    cmd!("lindex", 3, READONLY, ONE_KEY, "@read @list @slow", "list", "1.0.0", "Returns an element from a list by its index.", Key, S(lists::lindex)),
    cmd!("lset", 4, WRITE | DENYOOM, ONE_KEY, "@write @list @slow", "list", "1.0.0", "Sets the value of an element in a list by its index.", Key, S(lists::lset)),
    cmd!("lrange", 4, READONLY, ONE_KEY, "@read @list @slow", "list", "1.0.0", "Returns a range of elements from a list.", Key, S(lists::lrange)),
    cmd!("ltrim", 4, WRITE, ONE_KEY, "@write @list @slow", "list", "1.0.0", "Removes elements from both ends a list. Deletes the list if all elements were trimmed.", Key, S(lists::ltrim)),
    cmd!("linsert", 5, WRITE | DENYOOM, ONE_KEY, "@write @list @slow", "list", "2.2.0", "Inserts an element before or after another element in a list.", Key, S(lists::linsert)),
    cmd!("lrem", 4, WRITE, ONE_KEY, "@write @list @slow", "list", "1.0.0", "Removes elements from a list. Deletes the list if the last element was removed.", Key, S(lists::lrem)),
    cmd!("lpos", -3, READONLY, ONE_KEY, "@read @list @slow", "list", "6.0.6", "Returns the index of matching elements in a list.", Key, S(lists::lpos)),
    cmd!("lmove", 5, WRITE | DENYOOM, (1, 2, 1), "@write @list @slow", "list", "6.2.0", "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.", Keys(Merge::Gather), S(lists::lmove)),
    cmd!("rpoplpush", 3, WRITE | DENYOOM, (1, 2, 1), "@write @list @slow", "list", "1.2.0", "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(lists::rpoplpush)),
    cmd!(numkeys 1; "lmpop", -4, WRITE, NO_KEYS, "@write @list @slow", "list", "7.0.0", "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(lists::lmpop)),
    cmd!("blpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), "@write @list @slow @blocking", "list", "2.0.0", "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(blocking::blpop)),
    cmd!("brpop", -3, WRITE | NOSCRIPT | BLOCKING, (1, -2, 1), "@write @list @slow @blocking", "list", "2.0.0", "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(blocking::brpop)),
    cmd!("brpoplpush", 4, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), "@write @list @slow @blocking", "list", "2.2.0", "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(blocking::brpoplpush)),
    cmd!("blmove", 6, WRITE | DENYOOM | NOSCRIPT | BLOCKING, (1, 2, 1), "@write @list @slow @blocking", "list", "6.2.0", "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.", Keys(Merge::Gather), S(blocking::blmove)),
    cmd!(numkeys 2; "blmpop", -5, WRITE | BLOCKING, NO_KEYS, "@write @list @slow @blocking", "list", "7.0.0", "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.", Keys(Merge::Gather), S(blocking::blmpop)),
    // streams
    cmd!("xadd", -5, WRITE | DENYOOM | FAST, ONE_KEY, "@write @stream @fast", "stream", "5.0.0", "Appends a new message to a stream. Creates the key if it doesn't exist.", Key, S(streams::xadd)),
    cmd!("xlen", 2, READONLY | FAST, ONE_KEY, "@read @stream @fast", "stream", "5.0.0", "Return the number of messages in a stream.", Key, S(streams::xlen)),
    cmd!("xrange", -4, READONLY, ONE_KEY, "@read @stream @slow", "stream", "5.0.0", "Returns the messages from a stream within a range of IDs.", Key, S(streams::xrange)),
    cmd!("xrevrange", -4, READONLY, ONE_KEY, "@read @stream @slow", "stream", "5.0.0", "Returns the messages from a stream within a range of IDs in reverse order.", Key, S(streams::xrevrange)),
    cmd!("xdel", -3, WRITE | FAST, ONE_KEY, "@write @stream @fast", "stream", "5.0.0", "Returns the number of messages after removing them from a stream.", Key, S(streams::xdel)),
    cmd!("xtrim", -4, WRITE, ONE_KEY, "@write @stream @slow", "stream", "5.0.0", "Deletes messages from the beginning of a stream.", Key, S(streams::xtrim)),
    cmd!("xsetid", -3, WRITE | DENYOOM | FAST, ONE_KEY, "@write @stream @fast", "stream", "5.0.0", "An internal command for replicating stream values.", Key, S(streams::xsetid)),
    cmd!(more MoreKeys::Streams; "xread", -4, READONLY | BLOCKING, NO_KEYS, "@read @stream @slow @blocking", "stream", "5.0.0", "Returns messages from multiple streams with IDs greater than the ones requested. Blocks until a message is available otherwise.", Keys(Merge::Gather), S(streams::xread)),
    cmd!(more MoreKeys::Streams; "xreadgroup", -7, WRITE | BLOCKING, NO_KEYS, "@write @stream @slow @blocking", "stream", "5.0.0", "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.", Keys(Merge::Gather), S(streams::xread)),
    cmd!("xgroup", -2, 0, (2, 2, 1), "@slow", "stream", "5.0.0", "A container for consumer groups commands.", Key, S(groups::xgroup)),
    cmd!("xack", -4, WRITE | FAST, ONE_KEY, "@write @stream @fast", "stream", "5.0.0", "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.", Key, S(groups::xack)),
    cmd!("xpending", -3, READONLY, ONE_KEY, "@read @stream @slow", "stream", "5.0.0", "Returns the information and entries from a stream consumer group's pending entries list.", Key, S(groups::xpending)),
    cmd!("xclaim", -6, WRITE | FAST, ONE_KEY, "@write @stream @fast", "stream", "5.0.0", "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.", Key, S(groups::xclaim)),
    cmd!("xautoclaim", -6, WRITE | FAST, ONE_KEY, "@write @stream @fast", "stream", "6.2.0", "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.", Key, S(groups::xautoclaim)),
    cmd!("xinfo", -2, 0, (2, 2, 1), "@slow", "stream", "5.0.0", "A container for stream introspection commands.", Key, S(groups::xinfo)),
    cmd!("geoadd", -5, WRITE | DENYOOM, ONE_KEY, "@write @geo @slow", "geo", "3.2.0", "Adds one or more members to a geospatial index. The key is created if it doesn't exist.", Key, S(geo::geoadd)),
    cmd!("geopos", -2, READONLY, ONE_KEY, "@read @geo @slow", "geo", "3.2.0", "Returns the longitude and latitude of members from a geospatial index.", Key, S(geo::geopos)),
    cmd!("geodist", -4, READONLY, ONE_KEY, "@read @geo @slow", "geo", "3.2.0", "Returns the distance between two members of a geospatial index.", Key, S(geo::geodist)),
    cmd!("geohash", -2, READONLY, ONE_KEY, "@read @geo @slow", "geo", "3.2.0", "Returns members from a geospatial index as geohash strings.", Key, S(geo::geohash)),
    cmd!("geosearch", -7, READONLY, ONE_KEY, "@read @geo @slow", "geo", "6.2.0", "Queries a geospatial index for members inside an area of a box or a circle.", Key, S(geo::geosearch)),
    cmd!("geosearchstore", -8, WRITE | DENYOOM, (1, 2, 1), "@write @geo @slow", "geo", "6.2.0", "Queries a geospatial index for members inside an area of a box or a circle, optionally stores the result.", Keys(Merge::Gather), S(geo::geosearchstore)),
    cmd!(more MoreKeys::GeoStore; "georadius", -6, WRITE | DENYOOM, ONE_KEY, "@write @geo @slow", "geo", "3.2.0", "Queries a geospatial index for members within a distance from a coordinate, optionally stores the result.", Keys(Merge::Gather), S(geo::georadius)),
    cmd!("georadius_ro", -6, READONLY, ONE_KEY, "@read @geo @slow", "geo", "3.2.10", "Returns members from a geospatial index that are within a distance from a coordinate.", Key, S(geo::georadius_ro)),
    cmd!(more MoreKeys::GeoStore; "georadiusbymember", -5, WRITE | DENYOOM, ONE_KEY, "@write @geo @slow", "geo", "3.2.0", "Queries a geospatial index for members within a distance from a member, optionally stores the result.", Keys(Merge::Gather), S(geo::georadiusbymember)),
    cmd!("georadiusbymember_ro", -5, READONLY, ONE_KEY, "@read @geo @slow", "geo", "3.2.10", "Returns members from a geospatial index that are within a distance from a member.", Key, S(geo::georadiusbymember_ro)),
    cmd!("zadd", -4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @sortedset @fast", "sorted-set", "1.2.0", "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.", Key, S(zsets::zadd)),
    cmd!("zincrby", 4, WRITE | DENYOOM | FAST, ONE_KEY, "@write @sortedset @fast", "sorted-set", "1.2.0", "Increments the score of a member in a sorted set.", Key, S(zsets::zincrby)),
    cmd!("zrem", -3, WRITE | FAST, ONE_KEY, "@write @sortedset @fast", "sorted-set", "1.2.0", "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.", Key, S(zsets::zrem)),
    cmd!("zcard", 2, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "1.2.0", "Returns the number of members in a sorted set.", Key, S(zsets::zcard)),
    cmd!("zcount", 4, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "2.0.0", "Returns the count of members in a sorted set that have scores within a range.", Key, S(zsets::zcount)),
    cmd!("zlexcount", 4, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "2.8.9", "Returns the number of members in a sorted set within a lexicographical range.", Key, S(zsets::zlexcount)),
    cmd!("zscore", 3, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "1.2.0", "Returns the score of a member in a sorted set.", Key, S(zsets::zscore)),
    cmd!("zmscore", -3, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "6.2.0", "Returns the score of one or more members in a sorted set.", Key, S(zsets::zmscore)),
    cmd!("zrank", 3, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "2.0.0", "Returns the index of a member in a sorted set ordered by ascending scores.", Key, S(zsets::zrank)),
    cmd!("zrevrank", 3, READONLY | FAST, ONE_KEY, "@read @sortedset @fast", "sorted-set", "2.0.0", "Returns the index of a member in a sorted set ordered by descending scores.", Key, S(zsets::zrevrank)),
    cmd!("zrange", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "1.2.0", "Returns members in a sorted set within a range of indexes, scores or lexicographical order.", Key, S(zsets::zrange)),
    cmd!("zrangestore", -5, WRITE | DENYOOM, (1, 2, 1), "@write @sortedset @slow", "sorted-set", "6.2.0", "Stores a range of members from sorted set in a key.", Keys(Merge::Gather), S(zsets::zrangestore)),
    cmd!("zrevrange", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "1.2.0", "Returns members in a sorted set within a range of indexes in reverse order.", Key, S(zsets::zrevrange)),
    cmd!("zrangebyscore", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "1.0.5", "Returns members in a sorted set within a range of scores.", Key, S(zsets::zrangebyscore)),
    cmd!("zrevrangebyscore", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "2.2.0", "Returns members in a sorted set within a range of scores in reverse order.", Key, S(zsets::zrevrangebyscore)),
    cmd!("zrangebylex", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "2.8.9", "Returns members in a sorted set within a lexicographical range.", Key, S(zsets::zrangebylex)),
    cmd!("zrevrangebylex", -4, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "2.8.9", "Returns members in a sorted set within a lexicographical range in reverse order.", Key, S(zsets::zrevrangebylex)),
    cmd!("zremrangebyrank", 4, WRITE, ONE_KEY, "@write @sortedset @slow", "sorted-set", "2.0.0", "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.", Key, S(zsets::zremrangebyrank)),
    cmd!("zremrangebyscore", 4, WRITE, ONE_KEY, "@write @sortedset @slow", "sorted-set", "1.2.0", "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.", Key, S(zsets::zremrangebyscore)),
    cmd!("zremrangebylex", 4, WRITE, ONE_KEY, "@write @sortedset @slow", "sorted-set", "2.8.9", "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.", Key, S(zsets::zremrangebylex)),
    cmd!("zpopmin", -2, WRITE | FAST, ONE_KEY, "@write @sortedset @fast", "sorted-set", "5.0.0", "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", Key, S(zsets::zpopmin)),
    cmd!("zpopmax", -2, WRITE | FAST, ONE_KEY, "@write @sortedset @fast", "sorted-set", "5.0.0", "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.", Key, S(zsets::zpopmax)),
    cmd!(numkeys 1; "zmpop", -4, WRITE, NO_KEYS, "@write @sortedset @slow", "sorted-set", "7.0.0", "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.", Keys(Merge::Gather), S(zsets::zmpop)),
    cmd!("bzpopmin", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), "@write @sortedset @fast @blocking", "sorted-set", "5.0.0", "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", Keys(Merge::Gather), S(blocking::bzpopmin)),
    cmd!("bzpopmax", -3, WRITE | NOSCRIPT | FAST | BLOCKING, (1, -2, 1), "@write @sortedset @fast @blocking", "sorted-set", "5.0.0", "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.", Keys(Merge::Gather), S(blocking::bzpopmax)),
    cmd!(numkeys 2; "bzmpop", -5, WRITE | BLOCKING, NO_KEYS, "@write @sortedset @slow @blocking", "sorted-set", "7.0.0", "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.", Keys(Merge::Gather), S(blocking::bzmpop)),
    cmd!("zrandmember", -2, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "6.2.0", "Returns one or more random members from a sorted set.", Key, S(zsets::zrandmember)),
    cmd!(numkeys 1; "zunion", -3, READONLY, NO_KEYS, "@read @sortedset @slow", "sorted-set", "6.2.0", "Returns the union of multiple sorted sets.", Keys(Merge::Gather), S(zsets::zunion)),
    cmd!(numkeys 1; "zinter", -3, READONLY, NO_KEYS, "@read @sortedset @slow", "sorted-set", "6.2.0", "Returns the intersect of multiple sorted sets.", Keys(Merge::Gather), S(zsets::zinter)),
    cmd!(numkeys 1; "zdiff", -3, READONLY, NO_KEYS, "@read @sortedset @slow", "sorted-set", "6.2.0", "Returns the difference between multiple sorted sets.", Keys(Merge::Gather), S(zsets::zdiff)),
    cmd!(numkeys 2; "zunionstore", -4, WRITE | DENYOOM, ONE_KEY, "@write @sortedset @slow", "sorted-set", "2.0.0", "Stores the union of multiple sorted sets in a key.", Keys(Merge::Gather), S(zsets::zunionstore)),
    cmd!(numkeys 2; "zinterstore", -4, WRITE | DENYOOM, ONE_KEY, "@write @sortedset @slow", "sorted-set", "2.0.0", "Stores the intersect of multiple sorted sets in a key.", Keys(Merge::Gather), S(zsets::zinterstore)),
    cmd!(numkeys 2; "zdiffstore", -4, WRITE | DENYOOM, ONE_KEY, "@write @sortedset @slow", "sorted-set", "6.2.0", "Stores the difference of multiple sorted sets in a key.", Keys(Merge::Gather), S(zsets::zdiffstore)),
    cmd!(numkeys 1; "zintercard", -3, READONLY, NO_KEYS, "@read @sortedset @slow", "sorted-set", "7.0.0", "Returns the number of members of the intersect of multiple sorted sets.", Keys(Merge::Gather), S(zsets::zintercard)),
    cmd!("zscan", -3, READONLY, ONE_KEY, "@read @sortedset @slow", "sorted-set", "2.8.0", "Iterates over members and scores of a sorted set.", Key, S(zsets::zscan)),
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
            let mut buf = Vec::new();
            let mut spans = Vec::new();
            for w in words {
                let start = buf.len();
                buf.extend_from_slice(w.as_bytes());
                spans.push(damselfly_protocol::Span {
                    start,
                    len: w.len(),
                });
            }
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
