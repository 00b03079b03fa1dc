//! The slow log (Redis 7.0's slowlog.c): commands that ran longer than
//! `slowlog-log-slower-than` microseconds. Each thread keeps its own bounded log of the
//! commands its clients ran; SLOWLOG GET, LEN and RESET gather every thread's log (the
//! coordination layer asks each thread) and merge them here, newest first. Entry ids come
//! from one counter shared by all threads, touched only when a command is slow, so they are
//! unique and increase across threads as Redis's do.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};

use damselfly_protocol::ReplyBuf;

use crate::Args;

/// Arguments an entry keeps; the last kept one says how many more there were.
pub const MAX_ARGC: usize = 32;
/// Bytes an argument keeps; the rest is replaced by "... (N more bytes)".
pub const MAX_STRING: usize = 128;

/// What replaces an argument that must not be shown (a password).
pub const REDACTED: &[u8] = b"(redacted)";

/// SLOWLOG's subcommands and their arities, as Redis 7.0's command table has them.
pub const SUBCOMMANDS: &[(&str, i32)] = &[("get", -2), ("help", 2), ("len", 2), ("reset", 2)];

/// SLOWLOG HELP's lines (Redis adds the title and the HELP lines).
pub const HELP: &[&str] = &[
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
];

/// One logged command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlowEntry {
    pub id: u64,
    /// Unix time in seconds when it was logged.
    pub time: u64,
    /// How long it ran, in microseconds.
    pub duration: u64,
    /// Its arguments, trimmed and redacted as Redis keeps them.
    pub argv: Vec<Vec<u8>>,
    /// The client's `ip:port`.
    pub peer: String,
    /// The client's name, empty when it has none.
    pub name: Vec<u8>,
}

/// A slow command measured on a shard's thread for a client of another thread: the client's
/// own thread completes it (id, address, name) when the reply comes back.
#[derive(Debug, Clone)]
pub struct SlowCall {
    /// The command's index in its batch.
    pub index: usize,
    pub time: u64,
    pub duration: u64,
    pub argv: Vec<Vec<u8>>,
}

/// The ids of every thread's entries.
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

/// The next entry id (Redis's `slowlog_entry_id++`).
pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Seconds since the epoch.
pub fn unix_time() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The positions of arguments Redis 7.0 redacts (`redactClientCommandArgument`) before a
/// command reaches the slow log: AUTH's password (and user name), HELLO's AUTH pair, ACL
/// SETUSER's user and rules, and the values CONFIG SET gives to sensitive parameters.
pub fn redacted_positions(args: &Args) -> Vec<usize> {
    let n = args.len();
    let name = args.get(0);
    let mut out = Vec::new();
    if name.eq_ignore_ascii_case(b"auth") {
        // AUTH with too many arguments fails before it redacts anything.
        if n <= 3 {
            out.push(1);
            if n == 3 {
                out.push(2);
            }
        }
    } else if name.eq_ignore_ascii_case(b"hello") {
        if n < 2 {
            return out;
        }
        let version = damselfly_protocol::number::parse_i64(args.get(1));
        if !matches!(version, Some(2 | 3)) {
            return out;
        }
        let mut j = 2;
        while j < n {
            let more = n - 1 - j;
            if args.is(j, "auth") && more >= 2 {
                out.extend([j + 1, j + 2]);
                j += 3;
            } else if args.is(j, "setname") && more >= 1 {
                j += 2;
            } else {
                break;
            }
        }
    } else if name.eq_ignore_ascii_case(b"acl") && n >= 3 && args.is(1, "setuser") {
        // The user name and every rule: a rule may be a password.
        out.extend(2..n);
    } else if name.eq_ignore_ascii_case(b"config") && n >= 4 && args.is(1, "set") {
        // Every pair is looked at, even after an invalid one, as Redis does.
        let mut j = 2;
        while j + 1 < n {
            let param = args.get(j);
            if [&b"requirepass"[..], b"masterauth", b"masteruser"]
                .iter()
                .any(|s| param.eq_ignore_ascii_case(s))
            {
                out.push(j + 1);
            }
            j += 2;
        }
    }
    out
}

/// A command's arguments as an entry keeps them: at most [`MAX_ARGC`] (the last kept one
/// replaced by "... (N more arguments)"), each cut to [`MAX_STRING`] bytes, redacted ones
/// replaced by "(redacted)".
pub fn entry_argv(args: &Args) -> Vec<Vec<u8>> {
    let argc = args.len();
    let kept = argc.min(MAX_ARGC);
    let redacted = redacted_positions(args);
    let mut out = Vec::with_capacity(kept);
    for j in 0..kept {
        if kept != argc && j == kept - 1 {
            out.push(format!("... ({} more arguments)", argc - kept + 1).into_bytes());
        } else if redacted.contains(&j) {
            out.push(REDACTED.to_vec());
        } else {
            let a = args.get(j);
            if a.len() > MAX_STRING {
                let mut s = a[..MAX_STRING].to_vec();
                s.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes(),
                );
                out.push(s);
            } else {
                out.push(a.to_vec());
            }
        }
    }
    out
}

/// One thread's slow log, newest entry first.
#[derive(Debug, Default, Clone)]
pub struct Slowlog {
    entries: VecDeque<SlowEntry>,
}

impl Slowlog {
    /// Adds an entry, dropping the oldest beyond `max_len` (Redis's slowlogPushEntryIfNeeded).
    pub fn push(&mut self, entry: SlowEntry, max_len: usize) {
        self.entries.push_front(entry);
        self.entries.truncate(max_len);
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// A copy of the newest `max_len` entries (what SLOWLOG asks of each thread).
    pub fn snapshot(&mut self, max_len: usize) -> Vec<SlowEntry> {
        // A lowered slowlog-max-len trims on the next read, as Redis trims on the next push.
        self.entries.truncate(max_len);
        self.entries.iter().cloned().collect()
    }
}

/// Every thread's entries merged, newest (highest id) first, at most `max_len` of them: the
/// one slow log Redis would have kept.
pub fn merge(parts: Vec<Vec<SlowEntry>>, max_len: usize) -> Vec<SlowEntry> {
    let mut all: Vec<SlowEntry> = parts.into_iter().flatten().collect();
    all.sort_unstable_by_key(|e| std::cmp::Reverse(e.id));
    all.truncate(max_len);
    all
}

/// SLOWLOG GET's count argument: 10 when absent, every entry for -1.
pub fn parse_count(args: &Args) -> Result<Option<usize>, &'static str> {
    if args.len() < 3 {
        return Ok(Some(10));
    }
    // Redis's getRangeLongFromObjectOrReply gives its message for a non-number too.
    const RANGE: &str = "ERR count should be greater than or equal to -1";
    match damselfly_protocol::number::parse_i64(args.get(2)) {
        None => Err(RANGE),
        Some(-1) => Ok(None),
        Some(n) if n < -1 => Err(RANGE),
        Some(n) => Ok(Some(usize::try_from(n).unwrap_or(usize::MAX))),
    }
}

/// SLOWLOG GET's reply: up to `count` entries (all for None), each
/// `[id, time, duration, [args...], peer, name]`.
pub fn reply_entries(r: &mut ReplyBuf, entries: &[SlowEntry], count: Option<usize>) {
    let n = count.map_or(entries.len(), |c| c.min(entries.len()));
    r.array(n);
    for e in &entries[..n] {
        r.array(6);
        r.int(e.id as i64);
        r.int(e.time as i64);
        r.int(e.duration as i64);
        r.array(e.argv.len());
        for a in &e.argv {
            r.bulk(a);
        }
        r.bulk(e.peer.as_bytes());
        r.bulk(&e.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use damselfly_protocol::Span;

    fn with_args<R>(words: &[&[u8]], f: impl FnOnce(&Args) -> R) -> R {
        let mut buf = Vec::new();
        let mut spans = Vec::new();
        for w in words {
            Span::push_arg(&mut buf, &mut spans, w);
        }
        f(&Args::new(&buf, &spans))
    }

    #[test]
    fn trims_arguments_and_their_count() {
        let long = vec![b'x'; 200];
        let argv = with_args(&[b"set", b"k", &long], entry_argv);
        assert_eq!(argv[2].len(), 128 + "... (72 more bytes)".len());
        assert!(argv[2].ends_with(b"x... (72 more bytes)"));
        let many: Vec<Vec<u8>> = (0..40).map(|i| format!("a{i}").into_bytes()).collect();
        let words: Vec<&[u8]> = many.iter().map(|w| w.as_slice()).collect();
        let argv = with_args(&words, entry_argv);
        assert_eq!(argv.len(), 32);
        assert_eq!(argv[30], b"a30");
        assert_eq!(argv[31], b"... (9 more arguments)");
        // Exactly 32 arguments are all kept.
        let argv = with_args(&words[..32], entry_argv);
        assert_eq!(argv[31], b"a31");
    }

    #[test]
    fn redacts_as_redis_does() {
        let red = |w: &[&[u8]]| with_args(w, redacted_positions);
        assert_eq!(red(&[b"AUTH", b"pw"]), vec![1]);
        assert_eq!(red(&[b"auth", b"user", b"pw"]), vec![1, 2]);
        assert!(red(&[b"auth", b"a", b"b", b"c"]).is_empty());
        assert_eq!(
            red(&[b"hello", b"3", b"SETNAME", b"n", b"auth", b"u", b"p"]),
            vec![5, 6]
        );
        assert!(red(&[b"hello", b"4", b"auth", b"u", b"p"]).is_empty());
        assert!(red(&[b"hello", b"3", b"auth", b"u"]).is_empty());
        assert_eq!(
            red(&[b"config", b"set", b"maxmemory", b"1", b"REQUIREPASS", b"x"]),
            vec![5]
        );
        let argv = with_args(&[b"auth", b"secret"], entry_argv);
        assert_eq!(argv, vec![b"auth".to_vec(), b"(redacted)".to_vec()]);
        assert_eq!(
            red(&[b"acl", b"setuser", b"u", b">pw"]),
            vec![2, 3],
            "ACL SETUSER's user and rules"
        );
    }

    #[test]
    fn merges_newest_first_and_caps() {
        let e = |id| SlowEntry {
            id,
            time: 0,
            duration: 0,
            argv: vec![],
            peer: String::new(),
            name: vec![],
        };
        let merged = merge(vec![vec![e(5), e(2)], vec![e(4), e(3), e(1)]], 4);
        let ids: Vec<u64> = merged.iter().map(|e| e.id).collect();
        assert_eq!(ids, vec![5, 4, 3, 2]);
        let mut log = Slowlog::default();
        for id in 0..5 {
            log.push(e(id), 3);
        }
        assert_eq!(log.len(), 3);
        assert_eq!(
            log.snapshot(2).iter().map(|e| e.id).collect::<Vec<_>>(),
            [4, 3]
        );
        assert_eq!(log.len(), 2);
    }
}
