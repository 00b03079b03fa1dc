//! One ACL user: on/off, passwords (stored as SHA-256 hex, as Redis stores them), payload
//! sanitizing, and its selectors (the first is the root selector, the rules written outside
//! parentheses). Applying ACL SETUSER's rules, describing the user back, and checking a
//! request against every selector.

use damselfly_commands::args::Args;
use damselfly_protocol::parser::split_line;
use sha2::{Digest, Sha256};

use crate::selector::{Denied, KeyCache, Selector};
use crate::SetError;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: Vec<u8>,
    pub enabled: bool,
    pub nopass: bool,
    /// `sanitize-payload` (Some(true)) or `skip-sanitize-payload` (Some(false)), once set.
    pub sanitize_payload: Option<bool>,
    /// Lowercase hex SHA-256 digests.
    pub passwords: Vec<String>,
    /// The root selector first, then those added with `(...)`.
    pub selectors: Vec<Selector>,
    /// Every selector check can be skipped: the root selector allows everything.
    pub unrestricted: bool,
}

pub fn hash_password(clear: &[u8]) -> String {
    Sha256::digest(clear)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn valid_hash(h: &[u8]) -> bool {
    h.len() == 64
        && h.iter()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
}

impl User {
    /// A new user: off, no passwords, no permissions (Redis's ACLCreateUser).
    pub fn new(name: &[u8], pubsub_default_all: bool) -> Self {
        User {
            name: name.to_vec(),
            enabled: false,
            nopass: false,
            sanitize_payload: None,
            passwords: Vec::new(),
            selectors: vec![Selector::new(pubsub_default_all)],
            unrestricted: false,
        }
    }

    /// The `default` user as Redis creates it: on, nopass, every command, key and channel.
    pub fn default_user() -> Self {
        let mut u = User::new(b"default", true);
        for op in ["+@all", "~*", "&*", "on", "nopass"] {
            u.apply(op.as_bytes(), true)
                .expect("the default user's rules are valid");
        }
        u
    }

    /// Applies one rule (Redis's ACLSetUser). `pubsub_default_all` is `acl-pubsub-default`
    /// being `allchannels`, which `reset` and new selectors start from.
    pub fn apply(&mut self, op: &[u8], pubsub_default_all: bool) -> Result<(), SetError> {
        let result = self.apply_rule(op, pubsub_default_all);
        self.unrestricted = self.selectors[0].unrestricted();
        result
    }

    fn apply_rule(&mut self, op: &[u8], pubsub_default_all: bool) -> Result<(), SetError> {
        let is = |w: &str| op.eq_ignore_ascii_case(w.as_bytes());
        if op.is_empty() {
        } else if is("on") {
            self.enabled = true;
        } else if is("off") {
            self.enabled = false;
        } else if is("skip-sanitize-payload") {
            self.sanitize_payload = Some(false);
        } else if is("sanitize-payload") {
            self.sanitize_payload = Some(true);
        } else if is("nopass") {
            self.nopass = true;
            self.passwords.clear();
        } else if is("resetpass") {
            self.nopass = false;
            self.passwords.clear();
        } else if op[0] == b'>' || op[0] == b'#' {
            let hash = if op[0] == b'>' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(SetError::BadHash);
            };
            if !self.passwords.contains(&hash) {
                self.passwords.push(hash);
            }
            self.nopass = false;
        } else if op[0] == b'<' || op[0] == b'!' {
            let hash = if op[0] == b'<' {
                hash_password(&op[1..])
            } else if valid_hash(&op[1..]) {
                String::from_utf8_lossy(&op[1..]).into_owned()
            } else {
                return Err(SetError::BadHash);
            };
            let at = self
                .passwords
                .iter()
                .position(|p| *p == hash)
                .ok_or(SetError::NoSuchPassword)?;
            self.passwords.remove(at);
        } else if op[0] == b'(' && op[op.len() - 1] == b')' {
            let mut selector = Selector::new(pubsub_default_all);
            let inner = &op[1..op.len() - 1];
            for rule in split_line(inner).ok_or(SetError::Syntax)? {
                selector.apply(&rule)?;
            }
            self.selectors.push(selector);
        } else if is("clearselectors") {
            self.selectors.truncate(1);
        } else if is("reset") {
            for rule in ["resetpass", "resetkeys", "resetchannels"] {
                self.apply_rule(rule.as_bytes(), pubsub_default_all)?;
            }
            if pubsub_default_all {
                self.apply_rule(b"allchannels", pubsub_default_all)?;
            }
            for rule in ["off", "sanitize-payload", "clearselectors", "-@all"] {
                self.apply_rule(rule.as_bytes(), pubsub_default_all)?;
            }
        } else {
            self.selectors[0].apply(op)?;
        }
        Ok(())
    }

    /// Whether `password` authenticates this user (an enabled user with `nopass`, or one of
    /// its passwords; the digests are compared without an early exit).
    pub fn password_ok(&self, password: &[u8]) -> bool {
        if !self.enabled {
            return false;
        }
        if self.nopass {
            return true;
        }
        let hash = hash_password(password);
        self.passwords.iter().fold(false, |found, p| {
            let same = p
                .bytes()
                .zip(hash.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
            found | same
        })
    }

    /// Checks a request against every selector: allowed if one allows it, else the refusal
    /// Redis reports (a key or channel over a command; the last position among equals).
    pub fn check(&self, cmd: usize, args: &Args) -> Result<(), Denied> {
        if self.unrestricted {
            return Ok(());
        }
        let mut keys = KeyCache::default();
        let mut worst = Denied::Command;
        for s in &self.selectors {
            match s.check(cmd, args, &mut keys) {
                Ok(()) => return Ok(()),
                Err(d) => worst = worst.max(d),
            }
        }
        Err(worst)
    }

    /// Some selector allows every channel.
    pub fn all_channels(&self) -> bool {
        self.selectors.iter().any(|s| s.all_channels)
    }

    /// Whether the user may subscribe to `name` (a channel, or a pattern when `pattern`).
    pub fn may_subscribe(&self, name: &[u8], pattern: bool) -> bool {
        self.selectors
            .iter()
            .any(|s| s.channel_allowed(name, pattern))
    }

    /// Flags as ACL GETUSER lists them.
    pub fn flags(&self) -> Vec<&'static str> {
        let mut flags = vec![if self.enabled { "on" } else { "off" }];
        if self.nopass {
            flags.push("nopass");
        }
        match self.sanitize_payload {
            Some(false) => flags.push("skip-sanitize-payload"),
            Some(true) => flags.push("sanitize-payload"),
            None => {}
        }
        flags
    }

    /// The rules that recreate the user, as ACL LIST and the ACL file write them (without
    /// `user <name> `).
    pub fn describe(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in self.flags() {
            out.extend_from_slice(f.as_bytes());
            out.push(b' ');
        }
        for p in &self.passwords {
            out.push(b'#');
            out.extend_from_slice(p.as_bytes());
            out.push(b' ');
        }
        out.extend_from_slice(&self.selectors[0].describe());
        for s in &self.selectors[1..] {
            out.extend_from_slice(b" (");
            out.extend_from_slice(&s.describe());
            out.push(b')');
        }
        out
    }
}
