//! Access control lists, as Redis 7.0 has them (docs/operations.md): users with passwords and
//! selectors of commands, keys and channels; the rules of ACL SETUSER and the ACL file; the
//! check of a request against its user; and the ACL LOG. One [`Acl`] is shared by every
//! thread. It changes rarely (ACL SETUSER, DELUSER, LOAD, CONFIG SET requirepass), so it sits
//! behind a lock with an epoch counter: a connection keeps its user and re-reads it only when
//! the epoch moved, so a request costs one atomic load, plus the check itself for a user that
//! is not allowed everything.

pub mod log;
pub mod selector;
pub mod user;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

pub use log::{AclLog, LogEntry, LogReason};
pub use selector::Denied;
pub use user::User;

/// Why an ACL rule was refused (Redis's ACLSetUserStringError).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetError {
    UnknownCommand,
    Syntax,
    KeyAfterAll,
    ChannelAfterAll,
    NoSuchPassword,
    BadHash,
    FirstArgOfSubcommand,
    DuplicateUser,
}

impl SetError {
    pub fn message(self) -> &'static str {
        match self {
            SetError::UnknownCommand => "Unknown command or category name in ACL",
            SetError::Syntax => "Syntax error",
            SetError::KeyAfterAll => "Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not have any effect. Try 'resetkeys' to start with an empty list of patterns",
            SetError::ChannelAfterAll => "Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does not have any effect. Try 'resetchannels' to start with an empty list of channels",
            SetError::NoSuchPassword => "The password you are trying to remove from the user does not exist",
            SetError::BadHash => "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
            SetError::FirstArgOfSubcommand => "Allowing first-arg of a subcommand is not supported",
            SetError::DuplicateUser => "Duplicate user found. A user can only be defined once in config files",
        }
    }
}

/// Every user, the epoch that moves on each change, and the ACL LOG.
pub struct Acl {
    users: RwLock<BTreeMap<Vec<u8>, Arc<User>>>,
    epoch: AtomicU64,
    /// The default user has a password or is off: new connections must authenticate.
    auth_required: AtomicBool,
    /// `acl-pubsub-default`: new users and selectors start with every channel.
    pub pubsub_default_all: AtomicBool,
    pub log: Mutex<AclLog>,
}

impl Default for Acl {
    fn default() -> Self {
        Self::new()
    }
}

/// Joins rules split by spaces back into whole selectors: `(+get` `~k)` is `(+get ~k)`.
fn merge_selectors(rules: &[&[u8]]) -> Result<Vec<Vec<u8>>, String> {
    let mut out = Vec::new();
    let mut open: Option<(usize, Vec<u8>)> = None;
    for (i, &rule) in rules.iter().enumerate() {
        match &mut open {
            Some((_, selector)) => {
                selector.push(b' ');
                selector.extend_from_slice(rule);
                if rule.last() == Some(&b')') {
                    out.push(open.take().expect("open selector").1);
                }
            }
            None if rule.first() == Some(&b'(') && rule.last() != Some(&b')') => {
                open = Some((i, rule.to_vec()));
            }
            None => out.push(rule.to_vec()),
        }
    }
    match open {
        Some((i, _)) => Err(format!(
            "Unmatched parenthesis in acl selector starting at '{}'.",
            String::from_utf8_lossy(rules[i])
        )),
        None => Ok(out),
    }
}

impl Acl {
    pub fn new() -> Self {
        let mut users = BTreeMap::new();
        users.insert(b"default".to_vec(), Arc::new(User::default_user()));
        Acl {
            users: RwLock::new(users),
            epoch: AtomicU64::new(0),
            auth_required: AtomicBool::new(false),
            pubsub_default_all: AtomicBool::new(false),
            log: Mutex::new(AclLog::default()),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<Vec<u8>, Arc<User>>> {
        self.users.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<Vec<u8>, Arc<User>>> {
        self.users.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves on every change to any user; connections compare it to re-read their user.
    pub fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Acquire)
    }

    fn changed(&self) {
        let default = self.default_user();
        self.auth_required
            .store(!default.nopass || !default.enabled, Ordering::Release);
        self.epoch.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether a new connection starts unauthenticated (Redis's authRequired).
    pub fn auth_required(&self) -> bool {
        self.auth_required.load(Ordering::Acquire)
    }

    pub fn get(&self, name: &[u8]) -> Option<Arc<User>> {
        self.read().get(name).cloned()
    }

    pub fn default_user(&self) -> Arc<User> {
        self.get(b"default")
            .expect("the default user always exists")
    }

    /// The user `name` when `password` authenticates it.
    pub fn authenticate(&self, name: &[u8], password: &[u8]) -> Option<Arc<User>> {
        self.get(name).filter(|u| u.password_ok(password))
    }

    /// Applies ACL SETUSER's rules to a copy of the user (a new user if none), and stores it
    /// only when every rule is valid. Returns Redis's error text otherwise.
    pub fn set_user(&self, name: &[u8], rules: &[&[u8]]) -> Result<(), String> {
        let rules = merge_selectors(rules)?;
        let pubsub_all = self.pubsub_default_all.load(Ordering::Relaxed);
        let mut users = self.write();
        let mut user = match users.get(name) {
            Some(u) => User::clone(u),
            None => User::new(name, pubsub_all),
        };
        for rule in &rules {
            user.apply(rule, pubsub_all).map_err(|e| {
                format!(
                    "Error in ACL SETUSER modifier '{}': {}",
                    String::from_utf8_lossy(rule),
                    e.message()
                )
            })?;
        }
        users.insert(name.to_vec(), Arc::new(user));
        drop(users);
        self.changed();
        Ok(())
    }

    /// Deletes users; returns how many existed. The caller closes their connections.
    pub fn delete(&self, names: &[&[u8]]) -> Result<usize, &'static str> {
        if names.iter().any(|n| *n == b"default") {
            return Err("The 'default' user cannot be removed");
        }
        let mut users = self.write();
        let n = names.iter().filter(|n| users.remove(**n).is_some()).count();
        drop(users);
        self.changed();
        Ok(n)
    }

    /// Every user name, sorted as Redis lists them.
    pub fn names(&self) -> Vec<Vec<u8>> {
        self.read().keys().cloned().collect()
    }

    /// ACL LIST: `user <name> <rules>` for every user.
    pub fn list(&self) -> Vec<Vec<u8>> {
        self.read()
            .values()
            .map(|u| {
                let mut line = b"user ".to_vec();
                line.extend_from_slice(&u.name);
                line.push(b' ');
                line.extend_from_slice(&u.describe());
                line
            })
            .collect()
    }

    /// `requirepass`: the default user gets this one password, or `nopass` without one.
    pub fn set_default_password(&self, password: Option<&[u8]>) {
        let mut rule = b">".to_vec();
        let rules: Vec<&[u8]> = match password {
            Some(p) => {
                rule.extend_from_slice(p);
                vec![b"resetpass", &rule]
            }
            None => vec![b"resetpass", b"nopass"],
        };
        self.set_user(b"default", &rules)
            .expect("password rules are always valid");
    }

    /// Replaces every user with the ones an ACL file defines (Redis's ACLLoadFromFile), all
    /// or nothing; without a `user default` line the default user is reset to Redis's
    /// default. Returns the names of the users replaced (all but the default user), whose
    /// connections the caller closes; or Redis's error text, each error naming `<file>:<line>`.
    pub fn load(&self, file: &str, text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
        let pubsub_all = self.pubsub_default_all.load(Ordering::Relaxed);
        let mut fresh: BTreeMap<Vec<u8>, Arc<User>> = BTreeMap::new();
        let mut errors = String::new();
        for (i, line) in text.split(|&b| b == b'\n').enumerate() {
            let n = i + 1;
            let line = trim(line);
            if line.is_empty() {
                continue;
            }
            // Plain single spaces, as Redis splits the file (no quoting).
            let words: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
            if words[0] != b"user" || words.len() < 2 {
                errors += &format!(
                    "{file}:{n} should start with user keyword followed by the username. "
                );
                continue;
            }
            let name = words[1];
            let shown = String::from_utf8_lossy(name);
            if name.iter().any(|b| b.is_ascii_whitespace() || *b == 0) {
                errors += &format!("'{file}:{n}: username '{shown}' contains invalid characters. ");
                continue;
            }
            if fresh.contains_key(name) {
                errors += &format!("WARNING: Duplicate user '{shown}' found on line {n}. ");
                continue;
            }
            let Ok(rules) = merge_selectors(&words[2..]) else {
                errors += &format!("{file}:{n}: Unmatched parenthesis in selector definition.");
                continue;
            };
            let mut user = User::new(name, pubsub_all);
            let mut syntax_error = false;
            for rule in &rules {
                let rule = trim(rule);
                match user.apply(rule, pubsub_all) {
                    Ok(()) => {}
                    // Unknown names are safe to print; other errors may quote a password.
                    Err(e @ SetError::UnknownCommand) => {
                        errors += &format!(
                            "{file}:{n}: Error in applying operation '{}': {}. ",
                            String::from_utf8_lossy(rule),
                            e.message()
                        )
                    }
                    Err(e) if !syntax_error => {
                        errors += &format!("{file}:{n}: {}. ", e.message());
                        syntax_error = true;
                    }
                    Err(_) => {}
                }
            }
            fresh.insert(name.to_vec(), Arc::new(user));
        }
        if !errors.is_empty() {
            errors += "WARNING: ACL errors detected, no change to the previously active ACL rules was performed";
            return Err(errors);
        }
        fresh
            .entry(b"default".to_vec())
            .or_insert_with(|| Arc::new(User::default_user()));
        let mut users = self.write();
        // Every user but the default one is replaced by a new definition, and its
        // connections are closed, as Redis frees the old users.
        let gone = users
            .keys()
            .filter(|n| n.as_slice() != b"default")
            .cloned()
            .collect();
        *users = fresh;
        drop(users);
        self.changed();
        Ok(gone)
    }

    /// The ACL file's text: one `user` line per user.
    pub fn file_text(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for line in self.list() {
            out.extend_from_slice(&line);
            out.push(b'\n');
        }
        out
    }
}

fn trim(s: &[u8]) -> &[u8] {
    let is_blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = s.iter().position(|b| !is_blank(b)).unwrap_or(s.len());
    let end = s
        .iter()
        .rposition(|b| !is_blank(b))
        .map_or(start, |e| e + 1);
    &s[start..end]
}

#[cfg(test)]
mod tests;
