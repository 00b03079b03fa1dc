//! Decoding a fuzz input into a short list of Redis commands.
//!
//! The format is small and positional so that libFuzzer's byte mutations stay meaningful and
//! seeds can be written by hand (see `docs/fuzzing.md`). A missing byte reads as 0, so every
//! input decodes:
//!
//! - byte 0, flags: bits 0-1 = 3 ends the input with a protocol error instead of the sentinel;
//!   bit 2 sends the commands inline (quoted) instead of as multibulk; bit 3 ends an open
//!   MULTI with DISCARD instead of EXEC.
//! - then per command: a name byte (`< 250`: `COMMANDS[b % len]`, else an unknown name made of
//!   the next byte's length of raw bytes), a count byte (`< 224`: the table's arity, plus
//!   `b % 4` extra arguments when the arity is variable; else `b % 8` arguments, ignoring the
//!   arity), then one byte per argument choosing from the pools below (raw bytes take a length
//!   byte and that many bytes).

use damselfly_commands::table::{flags, MoreKeys, COMMANDS};
use damselfly_protocol::number::parse_i64;

/// At most this many commands per input, so one input stays one short pipeline.
pub const MAX_COMMANDS: usize = 24;

/// Keys spread over the shards, with hash tags so that multi-key commands run both on one
/// shard ({t}..., {x}...) and across shards (k0..k9). The empty key is a key too.
pub const KEYS: &[&str] = &[
    "k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7", "k8", "k9", "{t}a", "{t}b", "{t}c", "{x}1",
    "{x}2", "",
];

const INTS: &[&str] = &[
    "0",
    "1",
    "-1",
    "2",
    "3",
    "5",
    "10",
    "15",
    "16",
    "100",
    "-2",
    "-100",
    "9223372036854775807",
    "-9223372036854775808",
    "9223372036854775808",
    "4294967296",
    "4294967295",
    "2147483648",
    "1048576",
    "1.5",
    "nan",
    "inf",
    "-inf",
    "-0",
    "+1",
    "01",
    " 1",
    "1e3",
    "0x10",
    "",
    "abc",
    "-4611686018427387904",
];

const FLOATS: &[&str] = &[
    "0.5",
    "-1.5",
    "1e308",
    "-1e308",
    "1.7976931348623157e308",
    "5e-324",
    "inf",
    "-inf",
    "+inf",
    "nan",
    "-0.0",
    "3.0e2",
    "0.1",
    "1e",
    ".5",
    "1.",
];

/// Option words of Redis commands, so the fuzzer reaches option parsing without guessing.
const WORDS: &[&str] = &[
    "NX",
    "XX",
    "GT",
    "LT",
    "CH",
    "INCR",
    "EX",
    "PX",
    "EXAT",
    "PXAT",
    "KEEPTTL",
    "GET",
    "LIMIT",
    "WITHSCORES",
    "WITHSCORE",
    "WITHVALUES",
    "BYSCORE",
    "BYLEX",
    "REV",
    "DB",
    "REPLACE",
    "COUNT",
    "MATCH",
    "TYPE",
    "WEIGHTS",
    "AGGREGATE",
    "SUM",
    "MIN",
    "MAX",
    "LEFT",
    "RIGHT",
    "BEFORE",
    "AFTER",
    "RANK",
    "MAXLEN",
    "BY",
    "ASC",
    "DESC",
    "ALPHA",
    "STORE",
    "BIT",
    "BYTE",
    "OVERFLOW",
    "WRAP",
    "SAT",
    "FAIL",
    "INCRBY",
    "SET",
    "AND",
    "OR",
    "XOR",
    "NOT",
    "DIFF",
    "ANDOR",
    "ONE",
    "ENCODING",
    "USAGE",
    "SAMPLES",
    "HELP",
    "FLUSH",
    "ASYNC",
    "SYNC",
    "PERSIST",
    "NOVALUES",
    "FREQ",
    "IDLETIME",
    "REFCOUNT",
    "ON",
    "OFF",
    "YES",
    "NO",
    "BCAST",
    "PREFIX",
    "OPTIN",
    "OPTOUT",
    "NOLOOP",
    "REDIRECT",
    "ID",
    "NAME",
    "SETNAME",
    "AUTH",
    "default",
    "nosort",
    "#",
    "*",
    "u8",
    "i8",
    "u16",
    "i16",
    "u63",
    "i64",
    "#0",
    "#1",
    "string",
    "list",
    "set",
    "zset",
    "hash",
    "none",
    "k*",
    "*{t}*",
    "[a-z]*",
    "\\",
    "maxmemory",
    "*max*",
    // Streams and geo.
    "STREAMS",
    "GROUP",
    "NOACK",
    "BLOCK",
    "MINID",
    "~",
    "=",
    "NOMKSTREAM",
    "MKSTREAM",
    "ENTRIESREAD",
    "ENTRIESADDED",
    "MAXDELETEDID",
    "JUSTID",
    "FORCE",
    "RETRYCOUNT",
    "LASTID",
    "IDLE",
    "TIME",
    "FULL",
    "$",
    ">",
    "FROMMEMBER",
    "FROMLONLAT",
    "BYRADIUS",
    "BYBOX",
    "km",
    "m",
    "WITHCOORD",
    "WITHDIST",
    "WITHHASH",
    "ANY",
    "STOREDIST",
];

/// Score, lex and stream id bounds.
const BOUNDS: &[&str] = &[
    "(1",
    "-inf",
    "+inf",
    "[a",
    "(b",
    "-",
    "+",
    "(",
    "[",
    "(-inf",
    "(+inf",
    "(nan",
    "a",
    "(0",
    "1",
    "-1",
    "0-0",
    "1-1",
    "1-*",
    "2-0",
    "(1-1",
    "18446744073709551615-18446744073709551615",
];

/// Members, fields and values, few so that sets and hashes overlap.
const VALUES: &[&str] = &[
    "a",
    "b",
    "c",
    "1",
    "2",
    "-3",
    "hello",
    "",
    "a b",
    "\u{0}\u{ff}",
    "1.5",
    "0123456789012345678901234567890123456789012345678901234567890123456789",
];

/// Subcommands of the container commands (CONFIG SET, CLIENT KILL... are filtered out later).
fn subcommands(name: &str) -> &'static [&'static str] {
    match name {
        "client" => &[
            "ID",
            "GETNAME",
            "SETNAME",
            "INFO",
            "LIST",
            "NO-EVICT",
            "NO-TOUCH",
            "SETINFO",
            "HELP",
            "TRACKING",
            "CACHING",
            "GETREDIR",
            "TRACKINGINFO",
        ],
        "config" => &["GET", "REWRITE", "HELP"],
        "debug" => &["ERROR", "HELP", "POPULATE"],
        "object" => &["ENCODING", "FREQ", "IDLETIME", "REFCOUNT", "HELP"],
        "memory" => &["USAGE", "DOCTOR", "STATS", "HELP"],
        "command" => &[
            "INFO",
            "DOCS",
            "LIST",
            "COUNT",
            "GETKEYS",
            "HELP",
            "GETKEYSANDFLAGS",
        ],
        "hello" => &["2", "3", "1", "4"],
        "xgroup" => &[
            "CREATE",
            "SETID",
            "DESTROY",
            "CREATECONSUMER",
            "DELCONSUMER",
            "HELP",
        ],
        "xinfo" => &["STREAM", "GROUPS", "CONSUMERS", "HELP"],
        _ => &[],
    }
}

/// Names that are not in the table: Redis commands Damselfly lacks, and junk.
const UNKNOWN: &[&str] = &["wait", "migrate", "object2", "xadd2", "GET\0", "ping "];

/// How the input ends after its commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ending {
    /// `ECHO <sentinel>`: every command must have exactly one reply, then the sentinel's.
    Sentinel,
    /// Bytes that are a protocol error: the replies, then `-ERR Protocol error`, then EOF.
    ProtocolError(&'static [u8]),
}

pub const PROTOCOL_ERRORS: &[&[u8]] = &[
    b"*1\r\n$-5\r\n",
    b"*x\r\n",
    b"*1\r\n+foo\r\n",
    b"set \"a\r\n",
    b"*1\r\n$abc\r\n",
];

/// One fuzz input, decoded.
#[derive(Clone, PartialEq, Eq)]
pub struct Program {
    pub commands: Vec<Vec<Vec<u8>>>,
    /// Send the commands in inline form.
    pub inline: bool,
    pub ending: Ending,
}

struct Bytes<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Bytes<'_> {
    fn byte(&mut self) -> u8 {
        let b = self.data.get(self.pos).copied().unwrap_or(0);
        self.pos += 1;
        b
    }

    fn done(&self) -> bool {
        self.pos >= self.data.len()
    }

    fn raw(&mut self) -> Vec<u8> {
        let len = usize::from(self.byte() % 48);
        (0..len).map(|_| self.byte()).collect()
    }
}

fn pick(pool: &[&str], b: u8) -> Vec<u8> {
    pool[usize::from(b) % pool.len()].as_bytes().to_vec()
}

/// Any argument: a key, a number, a word, a bound, a value, or raw bytes. Each pool but
/// WORDS has at least as many selector values as entries (a test checks), so all are reachable.
fn generic(b: u8, bytes: &mut Bytes) -> Vec<u8> {
    match b {
        0..=47 => pick(KEYS, b),
        48..=95 => pick(INTS, b),
        96..=111 => pick(FLOATS, b),
        // More words than selector values: the next byte picks one.
        112..=175 => pick(WORDS, bytes.byte()),
        176..=199 => pick(BOUNDS, b),
        200..=239 => pick(VALUES, b),
        _ => bytes.raw(),
    }
}

/// True when position `i` of an `argc`-argument request is a key by first/last/step.
fn fixed_key(spec_first: i32, spec_last: i32, step: i32, i: usize, argc: usize) -> bool {
    if spec_first <= 0 || (i as i32) < spec_first {
        return false;
    }
    let last = if spec_last < 0 {
        argc as i32 + spec_last
    } else {
        spec_last
    };
    i as i32 <= last && (i as i32 - spec_first) % step.max(1) == 0
}

impl Program {
    pub fn decode(data: &[u8]) -> Program {
        let mut bytes = Bytes { data, pos: 0 };
        let flags_byte = bytes.byte();
        let mut commands = Vec::new();
        while !bytes.done() && commands.len() < MAX_COMMANDS {
            commands.push(decode_command(&mut bytes));
        }
        let ending = if flags_byte & 3 == 3 {
            Ending::ProtocolError(
                PROTOCOL_ERRORS[usize::from(flags_byte >> 4) % PROTOCOL_ERRORS.len()],
            )
        } else {
            Ending::Sentinel
        };
        let mut program = Program {
            commands,
            inline: flags_byte & 4 != 0,
            ending,
        };
        program.make_safe(flags_byte & 8 != 0);
        program
    }

    /// Drops what would stall or break the harness rather than test the server, and closes an
    /// open MULTI so the sentinel is not queued.
    fn make_safe(&mut self, discard: bool) {
        let mut in_multi = false;
        let mut kept = Vec::new();
        for args in self.commands.drain(..) {
            let spec = damselfly_commands::lookup(&args[0]).map(|i| &COMMANDS[i]);
            if let Some(spec) = spec {
                // Outside MULTI a blocking command would wait for its timeout; inside, it
                // does not block.
                if spec.flags & flags::BLOCKING != 0 && !in_multi {
                    continue;
                }
                if !allowed(spec.name, &args) {
                    continue;
                }
                if args.len() == 1 {
                    match spec.name {
                        "multi" => in_multi = true,
                        "exec" | "discard" | "reset" => in_multi = false,
                        _ => {}
                    }
                }
            }
            kept.push(args);
        }
        if in_multi {
            kept.push(vec![if discard {
                b"DISCARD".to_vec()
            } else {
                b"EXEC".to_vec()
            }]);
        }
        self.commands = kept;
    }
}

fn sub(args: &[Vec<u8>]) -> Vec<u8> {
    args.get(1)
        .map(|a| a.to_ascii_lowercase())
        .unwrap_or_default()
}

fn int_at(args: &[Vec<u8>], i: usize) -> Option<i64> {
    args.get(i).and_then(|a| parse_i64(a))
}

/// The harness's own rules: no command that stops the server, closes or stalls the
/// connection, suppresses replies, or changes server-wide settings for later inputs.
fn allowed(name: &str, args: &[Vec<u8>]) -> bool {
    match name {
        "shutdown" | "quit" => false,
        // Their replies are not one per command: one per channel, or pushes in RESP3 (tested
        // against Redis in crates/server/tests/pubsub.rs).
        "subscribe" | "psubscribe" | "ssubscribe" | "unsubscribe" | "punsubscribe"
        | "sunsubscribe" => false,
        // They write files into the server's directory, and whether one is refused depends
        // on an earlier input's save still running.
        "save" | "bgsave" => false,
        // CONFIG SET could set requirepass or limits that break the following inputs;
        // RESETSTAT changes server-wide counters, so an input would depend on earlier ones.
        "config" => !matches!(sub(args).as_slice(), b"set" | b"resetstat"),
        // Users are server-wide: only the subcommands that read them.
        "acl" => matches!(
            sub(args).as_slice(),
            b"whoami" | b"cat" | b"users" | b"getuser" | b"dryrun" | b"help"
        ),
        // Their resets clear what earlier inputs left, server-wide.
        "slowlog" | "latency" => sub(args).as_slice() != b"reset",
        "client" => !matches!(
            sub(args).as_slice(),
            b"kill" | b"pause" | b"unpause" | b"unblock" | b"reply"
        ),
        "debug" => match sub(args).as_slice() {
            b"error" | b"help" => true,
            // A bounded POPULATE; SLEEP, SET-ACTIVE-EXPIRE and the rest are left out.
            b"populate" => {
                int_at(args, 2).is_none_or(|n| n <= 1000)
                    && int_at(args, 4).is_none_or(|n| n <= 10_000)
            }
            _ => false,
        },
        // A large negative count asks for that many random picks: the reply grows to the
        // output limit (256 MB) and the client is dropped, correct but slow for a fuzzer.
        // Redis refuses i64::MIN, and counts beyond -LONG_MAX/2 with WITHVALUES or
        // WITHSCORES; those stay.
        "srandmember" | "hrandfield" | "zrandmember" => {
            let with = args.len() == 4;
            int_at(args, 2)
                .is_none_or(|n| n > -1000 || n == i64::MIN || (with && n < -(i64::MAX / 2)))
        }
        _ => true,
    }
}

fn decode_command(bytes: &mut Bytes) -> Vec<Vec<u8>> {
    let name_byte = bytes.byte();
    if name_byte >= 250 {
        let name = if name_byte == 255 {
            bytes.raw()
        } else {
            pick(UNKNOWN, bytes.byte())
        };
        let n = bytes.byte() % 4;
        let mut args = vec![name];
        for _ in 0..n {
            let b = bytes.byte();
            args.push(generic(b, bytes));
        }
        return args;
    }
    let spec = &COMMANDS[usize::from(name_byte) % COMMANDS.len()];
    let count_byte = bytes.byte();
    let mut argc = if count_byte < 224 {
        if spec.arity > 0 {
            spec.arity as usize
        } else {
            spec.arity.unsigned_abs() as usize + usize::from(count_byte % 4)
        }
    } else {
        1 + usize::from(count_byte % 8)
    };
    let subs = subcommands(spec.name);
    let mut args = vec![spec.name.to_ascii_uppercase().into_bytes()];
    let mut numkeys_left = 0usize;
    let mut i = 1;
    while i < argc {
        let b = bytes.byte();
        let numkeys_at = match spec.more_keys {
            MoreKeys::Numkeys(at) => Some(at),
            _ => None,
        };
        let arg = if numkeys_at == Some(i) && b < 240 {
            let n = 1 + usize::from(b % 3);
            numkeys_left = n;
            // Room for the keys it announces, when the arity is respected.
            if count_byte < 224 {
                argc = argc.max(i + 1 + n);
            }
            n.to_string().into_bytes()
        } else if numkeys_left > 0 || fixed_key(spec.first_key, spec.last_key, spec.step, i, argc) {
            numkeys_left = numkeys_left.saturating_sub(1);
            if b < 192 {
                pick(KEYS, b)
            } else {
                generic(b, bytes)
            }
        } else if i == 1 && !subs.is_empty() && b < 224 {
            pick(subs, b)
        } else {
            generic(b, bytes)
        };
        args.push(arg);
        i += 1;
    }
    args
}

/// An argument as redis-cli would take it: bare when plain, else double-quoted with escapes.
pub fn cli_quote(arg: &[u8]) -> String {
    let plain = !arg.is_empty()
        && arg
            .iter()
            .all(|&c| c.is_ascii_graphic() && !matches!(c, b'"' | b'\'' | b'\\'));
    if plain {
        return String::from_utf8_lossy(arg).into_owned();
    }
    let mut s = String::from("\"");
    for &c in arg {
        match c {
            b'"' => s.push_str("\\\""),
            b'\\' => s.push_str("\\\\"),
            b'\n' => s.push_str("\\n"),
            b'\r' => s.push_str("\\r"),
            b'\t' => s.push_str("\\t"),
            c if c.is_ascii_graphic() || c == b' ' => s.push(char::from(c)),
            c => s.push_str(&format!("\\x{c:02x}")),
        }
    }
    s.push('"');
    s
}

/// Prints the program as redis-cli input (what `cargo fuzz fmt commands <input>` shows).
impl std::fmt::Debug for Program {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "# sent {}; each input starts with RESET, SELECT 0, FLUSHALL",
            if self.inline {
                "inline"
            } else {
                "as multibulk"
            }
        )?;
        for args in &self.commands {
            let words: Vec<String> = args.iter().map(|a| cli_quote(a)).collect();
            writeln!(f, "{}", words.join(" "))?;
        }
        match self.ending {
            Ending::Sentinel => writeln!(f, "# then ECHO <sentinel>"),
            Ending::ProtocolError(bytes) => {
                writeln!(f, "# then the protocol error {}", cli_quote(bytes))
            }
        }
    }
}

impl<'a> libfuzzer_sys::arbitrary::Arbitrary<'a> for Program {
    fn arbitrary(
        u: &mut libfuzzer_sys::arbitrary::Unstructured<'a>,
    ) -> libfuzzer_sys::arbitrary::Result<Self> {
        let len = u.len();
        Ok(Program::decode(u.bytes(len)?))
    }

    fn arbitrary_take_rest(
        u: libfuzzer_sys::arbitrary::Unstructured<'a>,
    ) -> libfuzzer_sys::arbitrary::Result<Self> {
        Ok(Program::decode(u.take_rest()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_fit_their_selector_ranges() {
        for (pool, values) in [
            (KEYS, 48),
            (INTS, 48),
            (FLOATS, 16),
            (BOUNDS, 24),
            (VALUES, 40),
        ] {
            assert!(pool.len() <= values, "{pool:?}");
        }
    }

    #[test]
    fn any_bytes_decode() {
        assert!(Program::decode(b"").commands.is_empty());
        let p = Program::decode(&[0xff; 300]);
        assert!(p.commands.len() <= MAX_COMMANDS);
    }

    #[test]
    fn multi_is_closed() {
        let multi = COMMANDS.iter().position(|c| c.name == "multi").unwrap() as u8;
        let p = Program::decode(&[0, multi, 0]);
        assert_eq!(
            p.commands,
            vec![b"MULTI".to_vec(), b"EXEC".to_vec()]
                .into_iter()
                .map(|c| vec![c])
                .collect::<Vec<_>>()
        );
    }
}
