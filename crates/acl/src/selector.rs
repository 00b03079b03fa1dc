//! One ACL selector: the commands, keys and channels it allows, how an ACL rule changes it,
//! how it is described back (ACL LIST, GETUSER), and the check of one request against it.
//! Command permissions are a bit per entry of Redis's own command table
//! ([`damselfly_commands::redis_meta`]), plus one bit meaning "commands added later" that only
//! `+@all` sets, as in Redis.

use std::collections::BTreeMap;

use damselfly_commands::args::Args;
use damselfly_commands::redis_meta::{self, key_flags, RedisCommand, CATEGORIES};
use damselfly_storage::glob::glob_match;

use crate::SetError;

/// Why a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Denied {
    Command,
    /// The argument at this position is a key the selector may not touch.
    Key(usize),
    /// The argument at this position is a channel the selector may not use.
    Channel(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyPattern {
    pub pattern: Vec<u8>,
    pub read: bool,
    pub write: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    all_commands: bool,
    pub(crate) all_keys: bool,
    pub(crate) all_channels: bool,
    allowed: Vec<u64>,
    /// First arguments allowed for a command whose bit is clear (`+select|0`).
    first_args: BTreeMap<usize, Vec<Vec<u8>>>,
    keys: Vec<KeyPattern>,
    channels: Vec<Vec<u8>>,
}

fn table() -> &'static [RedisCommand] {
    redis_meta::commands()
}

/// The bit that stands for commands Redis would load later (modules): set only by `+@all`.
fn future_bit() -> usize {
    table().len()
}

impl Selector {
    /// A selector allowing nothing; `all_channels` per `acl-pubsub-default`.
    pub fn new(all_channels: bool) -> Self {
        Selector {
            all_commands: false,
            all_keys: false,
            all_channels,
            allowed: vec![0; future_bit() / 64 + 1],
            first_args: BTreeMap::new(),
            keys: Vec::new(),
            channels: Vec::new(),
        }
    }

    /// Allows everything (the default user's root selector).
    pub fn unrestricted(&self) -> bool {
        self.all_commands && self.all_keys && self.all_channels
    }

    fn bit(&self, id: usize) -> bool {
        self.allowed[id / 64] & (1 << (id % 64)) != 0
    }

    fn set_bit(&mut self, id: usize, on: bool) {
        if on {
            self.allowed[id / 64] |= 1 << (id % 64);
        } else {
            self.allowed[id / 64] &= !(1 << (id % 64));
            self.all_commands = false;
        }
    }

    /// Allows or denies a command, and with a container every subcommand.
    fn change(&mut self, id: usize, on: bool) {
        self.set_bit(id, on);
        self.first_args.remove(&id);
        for sub in table()[id].subcommands.clone() {
            self.set_bit(sub, on);
        }
    }

    fn change_category(&mut self, bit: u32, on: bool) {
        for (id, cmd) in table().iter().enumerate() {
            if cmd.categories & bit != 0 {
                self.change(id, on);
            }
        }
    }

    fn set_all(&mut self, on: bool) {
        let fill = if on { u64::MAX } else { 0 };
        self.allowed.iter_mut().for_each(|w| *w = fill);
        self.all_commands = on;
        self.first_args.clear();
    }

    /// Applies one selector rule (Redis's ACLSetSelector).
    pub fn apply(&mut self, op: &[u8]) -> Result<(), SetError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if is("allkeys") || op == b"~*" {
            self.all_keys = true;
            self.keys.clear();
        } else if is("resetkeys") {
            self.all_keys = false;
            self.keys.clear();
        } else if is("allchannels") || op == b"&*" {
            self.all_channels = true;
            self.channels.clear();
        } else if is("resetchannels") {
            self.all_channels = false;
            self.channels.clear();
        } else if is("allcommands") || is("+@all") {
            self.set_all(true);
        } else if is("nocommands") || is("-@all") {
            self.set_all(false);
        } else if op.first() == Some(&b'~') || op.first() == Some(&b'%') {
            self.add_key_pattern(op)?;
        } else if op.first() == Some(&b'&') {
            if self.all_channels {
                return Err(SetError::ChannelAfterAll);
            }
            let pattern = &op[1..];
            if has_spaces(pattern) {
                return Err(SetError::Syntax);
            }
            if !self.channels.iter().any(|c| c == pattern) {
                self.channels.push(pattern.to_vec());
            }
            self.all_channels = false;
        } else if op.len() > 1 && (op[0] == b'+' || op[0] == b'-') && op[1] == b'@' {
            let name = std::str::from_utf8(&op[2..]).map_err(|_| SetError::UnknownCommand)?;
            let bit = redis_meta::category_bit(name).ok_or(SetError::UnknownCommand)?;
            self.change_category(bit, op[0] == b'+');
        } else if op.first() == Some(&b'+') {
            self.allow_command(&op[1..])?;
        } else if op.first() == Some(&b'-') {
            let id = lookup(&op[1..]).ok_or(SetError::UnknownCommand)?;
            self.change(id, false);
        } else {
            return Err(SetError::Syntax);
        }
        Ok(())
    }

    fn add_key_pattern(&mut self, op: &[u8]) -> Result<(), SetError> {
        if self.all_keys {
            return Err(SetError::KeyAfterAll);
        }
        let (read, write, pattern) = if op[0] == b'%' {
            let (mut read, mut write) = (false, false);
            let mut at = 1;
            loop {
                match op.get(at).map(u8::to_ascii_uppercase) {
                    Some(b'R') if !read => read = true,
                    Some(b'W') if !write => write = true,
                    Some(b'~') => {
                        at += 1;
                        break;
                    }
                    _ => return Err(SetError::Syntax),
                }
                at += 1;
            }
            (read, write, &op[at..])
        } else {
            (true, true, &op[1..])
        };
        if has_spaces(pattern) {
            return Err(SetError::Syntax);
        }
        match self.keys.iter_mut().find(|k| k.pattern == pattern) {
            Some(k) => {
                k.read |= read;
                k.write |= write;
            }
            None => self.keys.push(KeyPattern {
                pattern: pattern.to_vec(),
                read,
                write,
            }),
        }
        self.all_keys = false;
        Ok(())
    }

    /// `+cmd`, `+container|sub`, or `+cmd|first-arg` for a command without subcommands.
    fn allow_command(&mut self, name: &[u8]) -> Result<(), SetError> {
        let Some(bar) = name.iter().rposition(|&b| b == b'|') else {
            let id = lookup(name).ok_or(SetError::UnknownCommand)?;
            self.change(id, true);
            return Ok(());
        };
        let (base, sub) = (&name[..bar], &name[bar + 1..]);
        let id = lookup(base).ok_or(SetError::UnknownCommand)?;
        if table()[id].parent.is_some() {
            return Err(SetError::FirstArgOfSubcommand);
        }
        if sub.is_empty() {
            return Err(SetError::Syntax);
        }
        if table()[id].has_subcommands() {
            let sub_id = lookup(name).ok_or(SetError::UnknownCommand)?;
            self.change(sub_id, true);
        } else {
            tracing::warn!(
                "Deprecation warning: Allowing a first arg of an otherwise blocked command is a misuse of ACL and may get disabled in the future (offender: +{})",
                String::from_utf8_lossy(name)
            );
            let list = self.first_args.entry(id).or_default();
            if !list.iter().any(|a| a.eq_ignore_ascii_case(sub)) {
                list.push(sub.to_vec());
            }
        }
        Ok(())
    }

    /// Checks one request; `cmd` is its entry in Redis's table (a subcommand where it names
    /// one). Redis's ACLSelectorCheckCmd.
    pub fn check(&self, cmd: usize, args: &Args, keys: &mut KeyCache) -> Result<(), Denied> {
        let meta = &table()[cmd];
        if !self.all_commands && !meta.flags.contains(&"no_auth") && !self.bit(cmd) {
            let at = if meta.parent.is_some() { 2 } else { 1 };
            let allowed = args.len() > at
                && self
                    .first_args
                    .get(&cmd)
                    .is_some_and(|list| list.iter().any(|a| a.eq_ignore_ascii_case(args.get(at))));
            if !allowed {
                return Err(Denied::Command);
            }
        }
        if !self.all_keys {
            for &(pos, flags) in keys.get(meta, args) {
                if !self.key_allowed(args.get(pos), flags) {
                    return Err(Denied::Key(pos));
                }
            }
        }
        if !self.all_channels {
            for (pos, pattern) in channels(meta.name, args.len()) {
                if !self.channel_allowed(args.get(pos), pattern) {
                    return Err(Denied::Channel(pos));
                }
            }
        }
        Ok(())
    }

    pub fn key_allowed(&self, key: &[u8], flags: u16) -> bool {
        if self.all_keys {
            return true;
        }
        let read = flags & key_flags::ACCESS != 0;
        let write = flags & (key_flags::INSERT | key_flags::DELETE | key_flags::UPDATE) != 0;
        self.keys
            .iter()
            .any(|p| (p.read || !read) && (p.write || !write) && glob_match(&p.pattern, key, false))
    }

    /// A channel name is matched against the patterns; a PSUBSCRIBE pattern only equals one.
    pub fn channel_allowed(&self, channel: &[u8], is_pattern: bool) -> bool {
        self.all_channels
            || self.channels.iter().any(|p| {
                if is_pattern {
                    p == channel
                } else {
                    glob_match(p, channel, false)
                }
            })
    }

    /// Channels granted: None for all, else the patterns.
    pub fn channel_patterns(&self) -> Option<&[Vec<u8>]> {
        (!self.all_channels).then_some(self.channels.as_slice())
    }

    /// `~* ` or the key patterns, the channels, then the command rules (ACL LIST's form).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        if self.all_keys {
            out.extend_from_slice(b"~* ");
        } else {
            for p in &self.keys {
                push_pattern(&mut out, p);
                out.push(b' ');
            }
        }
        if self.all_channels {
            out.extend_from_slice(b"&* ");
        } else {
            out.extend_from_slice(b"resetchannels ");
            for c in &self.channels {
                out.push(b'&');
                out.extend_from_slice(c);
                out.push(b' ');
            }
        }
        out.extend_from_slice(self.describe_commands().as_bytes());
        out
    }

    /// ACL GETUSER's `keys` field.
    pub fn describe_keys(&self) -> Vec<u8> {
        if self.all_keys {
            return b"~*".to_vec();
        }
        let mut out = Vec::new();
        for (i, p) in self.keys.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            push_pattern(&mut out, p);
        }
        out
    }

    /// ACL GETUSER's `channels` field.
    pub fn describe_channels(&self) -> Vec<u8> {
        if self.all_channels {
            return b"&*".to_vec();
        }
        let mut out = Vec::new();
        for (i, c) in self.channels.iter().enumerate() {
            if i > 0 {
                out.push(b' ');
            }
            out.push(b'&');
            out.extend_from_slice(c);
        }
        out
    }

    /// The command rules that rebuild this selector's permissions: `+@all` or `-@all`, the
    /// categories that fit best, then single commands (Redis's ACLDescribeSelectorCommandRules,
    /// over the same command table, so the categories chosen are Redis's).
    pub fn describe_commands(&self) -> String {
        let additive = !self.bit(future_bit());
        let mut rules = String::from(if additive { "-@all " } else { "+@all " });
        let mut fake = Selector::new(false);
        fake.set_all(!additive);
        // What is left to explain: categories applied are undone here.
        let mut rest = self.clone();
        let mut applied = [false; CATEGORIES.len()];
        loop {
            let mut best = None;
            let (mut min_diff, mut max_same) = (usize::MAX, 0);
            for (j, name) in CATEGORIES.iter().enumerate() {
                if applied[j] {
                    continue;
                }
                let (on, off) = rest.count_category(1 << j);
                let (diff, same) = if additive { (off, on) } else { (on, off) };
                if same > diff && (diff < min_diff || (diff == min_diff && same > max_same)) {
                    best = Some((j, *name));
                    min_diff = diff;
                    max_same = same;
                }
            }
            let Some((j, name)) = best else { break };
            fake.change_category(1 << j, additive);
            rest.change_category(1 << j, !additive);
            rules.push_str(if additive { "+@" } else { "-@" });
            rules.push_str(name);
            rules.push(' ');
            applied[j] = true;
        }
        for (id, cmd) in table().iter().enumerate() {
            let mine = self.bit(id);
            if mine != fake.bit(id) {
                rules.push(if mine { '+' } else { '-' });
                rules.push_str(cmd.name);
                rules.push(' ');
                fake.change(id, mine);
            }
            if !mine {
                for arg in self.first_args.get(&id).into_iter().flatten() {
                    rules.push('+');
                    rules.push_str(cmd.name);
                    rules.push('|');
                    rules.push_str(&String::from_utf8_lossy(arg));
                    rules.push(' ');
                }
            }
        }
        rules.pop();
        debug_assert_eq!(fake.allowed, self.allowed, "{rules}");
        rules
    }

    fn count_category(&self, bit: u32) -> (usize, usize) {
        let mut on = 0;
        let mut off = 0;
        for (id, cmd) in table().iter().enumerate() {
            if cmd.categories & bit != 0 {
                if self.bit(id) {
                    on += 1;
                } else {
                    off += 1;
                }
            }
        }
        (on, off)
    }
}

fn push_pattern(out: &mut Vec<u8>, p: &KeyPattern) {
    out.extend_from_slice(match (p.read, p.write) {
        (true, true) => b"~".as_slice(),
        (true, false) => b"%R~",
        _ => b"%W~",
    });
    out.extend_from_slice(&p.pattern);
}

fn has_spaces(s: &[u8]) -> bool {
    s.iter().any(|&b| b.is_ascii_whitespace() || b == 0)
}

/// A command (`get`) or subcommand (`config|get`) of Redis's table.
fn lookup(name: &[u8]) -> Option<usize> {
    let name = std::str::from_utf8(name).ok()?;
    if name.matches('|').count() > 1 {
        return None;
    }
    let id = redis_meta::find(name)?;
    // `select|0` names no entry: SELECT has no subcommands.
    let base_has_subs = match name.split_once('|') {
        Some((base, _)) => redis_meta::find(base).is_some_and(|b| table()[b].has_subcommands()),
        None => true,
    };
    base_has_subs.then_some(id)
}

/// The channel arguments of a Pub/Sub request and whether each is a pattern; UNSUBSCRIBE's
/// are not checked, as in Redis.
fn channels(name: &str, argc: usize) -> impl Iterator<Item = (usize, bool)> {
    let (range, pattern) = match name {
        "publish" | "spublish" => (1..2.min(argc), false),
        "subscribe" | "ssubscribe" => (1..argc, false),
        "psubscribe" => (1..argc, true),
        _ => (0..0, false),
    };
    range.map(move |i| (i, pattern))
}

/// The keys of one request, found once and shared by every selector that checks it.
#[derive(Default)]
pub struct KeyCache {
    keys: Option<Vec<(usize, u16)>>,
}

impl KeyCache {
    fn get(&mut self, meta: &RedisCommand, args: &Args) -> &[(usize, u16)] {
        self.keys.get_or_insert_with(|| meta.keys(args))
    }
}
