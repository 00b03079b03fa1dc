//! The connection's side of access control (the users and rules live in `damselfly-acl`):
//! which user a connection runs as and the check before every command, logging in (AUTH,
//! HELLO AUTH), the ACL command, and closing the connections of users deleted or switched off.

use std::sync::Arc;
use std::time::Instant;

use damselfly_acl::{Denied, LogEntry, LogReason, User};
use damselfly_commands::args::Args;
use damselfly_commands::errors;
use damselfly_commands::redis_meta::{self, CATEGORIES};
use damselfly_protocol::number::parse_i64;

use crate::client::KillFilter;
use crate::cluster::Cluster;
use crate::connection::Connection;
use crate::messages::ShardMsg;

const HELP: &[&str] = &[
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
];

const NO_ACL_FILE: &str = "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in order to store users in the Redis configuration.";

/// Where a refused command was run, for the ACL LOG.
#[derive(Clone, Copy)]
pub(crate) enum AclContext {
    Toplevel,
    Multi,
    Lua,
}

impl AclContext {
    fn name(self) -> &'static str {
        match self {
            AclContext::Toplevel => "toplevel",
            AclContext::Multi => "multi",
            AclContext::Lua => "lua",
        }
    }
}

fn lossy(b: &[u8]) -> std::borrow::Cow<'_, str> {
    String::from_utf8_lossy(b)
}

impl Connection {
    /// Re-reads the connection's user when any user changed since it last looked. False when
    /// its user was deleted or switched off: DELUSER and SETUSER off close such connections
    /// on every thread, but one moving between threads at that moment is in no registry, so
    /// it closes itself here, before it runs anything more.
    fn refresh_user(&mut self) -> bool {
        let acl = &self.worker.cluster.acl;
        let epoch = acl.epoch();
        if epoch == self.acl_epoch {
            return true;
        }
        self.acl_epoch = epoch;
        let name = self.info.user.borrow().name.clone();
        match acl.get(&name) {
            Some(u) if u.enabled || !self.authenticated => {
                *self.info.user.borrow_mut() = u;
                true
            }
            _ => {
                self.authenticated = false;
                *self.info.user.borrow_mut() = acl.default_user();
                self.closing = true;
                false
            }
        }
    }

    /// The user this connection runs as now.
    pub(crate) fn current_user(&mut self) -> Arc<User> {
        let _ = self.refresh_user();
        self.info.user.borrow().clone()
    }

    /// Whether the connection's user may do everything: checked before every command
    /// without touching the user's reference count, which every thread shares.
    fn unrestricted(&mut self) -> bool {
        self.refresh_user() && self.info.user.borrow().unrestricted
    }

    /// Redis's refusal of this request under the connection's user, logged in the ACL LOG;
    /// None when it may run.
    pub(crate) fn acl_refusal(&mut self, args: &Args) -> Option<String> {
        if !self.refresh_user() {
            return Some(errors::NO_AUTH.to_string());
        }
        let user = {
            let user = self.info.user.borrow();
            if user.unrestricted {
                return None;
            }
            user.clone()
        };
        let context = if self.multi.is_some() {
            AclContext::Multi
        } else {
            AclContext::Toplevel
        };
        let (cmd, denied) = self.acl_denial(&user, args, context)?;
        Some(match denied {
            Denied::Command => format!(
                "NOPERM this user has no permissions to run the '{}' command",
                cmd
            ),
            Denied::Key(_) => {
                "NOPERM this user has no permissions to access one of the keys used as arguments"
                    .to_string()
            }
            Denied::Channel(_) => "NOPERM this user has no permissions to access one of the channels used as arguments".to_string(),
        })
    }

    /// EXEC's refusal of a queued command the user may no longer run.
    pub(crate) fn exec_acl_refusal(&mut self, args: &Args) -> Option<String> {
        if !self.refresh_user() {
            return Some(errors::NO_AUTH.to_string());
        }
        let user = {
            let user = self.info.user.borrow();
            if user.unrestricted {
                return None;
            }
            user.clone()
        };
        let (_, denied) = self.acl_denial(&user, args, AclContext::Multi)?;
        let reason = match denied {
            Denied::Command => "no permission to execute the command or subcommand",
            Denied::Key(_) => "no permission to touch the specified keys",
            Denied::Channel(_) => "no permission to access one of the channels used as arguments",
        };
        Some(format!("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: {reason}"))
    }

    /// Checks a request against `user`, logging a refusal; returns the command's full name
    /// (`client|kill`) and the refusal.
    pub(crate) fn acl_denial(
        &mut self,
        user: &User,
        args: &Args,
        context: AclContext,
    ) -> Option<(&'static str, Denied)> {
        let client_info = self.info.describe(Instant::now());
        check_and_log(&self.worker.cluster, user, args, context, client_info)
    }

    fn log_acl(&self, reason: LogReason, context: AclContext, object: &[u8], username: &[u8]) {
        let client_info = self.info.describe(Instant::now());
        log(
            &self.worker.cluster,
            reason,
            context,
            object,
            username,
            client_info,
        );
    }

    /// Logs in as `user` with `password` (AUTH, HELLO AUTH), replying WRONGPASS and logging
    /// the failure otherwise. `command` is the command as the client spelled it.
    pub(crate) fn log_in(&mut self, user: &[u8], password: &[u8], command: &[u8]) -> bool {
        let acl = &self.worker.cluster.acl;
        let epoch = acl.epoch();
        match acl.authenticate(user, password) {
            Some(u) => {
                self.acl_epoch = epoch;
                *self.info.user.borrow_mut() = u;
                self.authenticated = true;
                true
            }
            None => {
                let context = if self.multi.is_some() {
                    AclContext::Multi
                } else {
                    AclContext::Toplevel
                };
                self.log_acl(LogReason::Auth, context, command, user);
                self.reply_error(errors::WRONG_PASS);
                false
            }
        }
    }

    /// Closes every connection, on every thread, logged in as one of `users`.
    async fn disconnect_users(&mut self, users: Vec<Vec<u8>>) {
        for user in users {
            let filter = KillFilter {
                user: Some(lossy(&user).into_owned()),
                caller: self.info.id,
                ..KillFilter::default()
            };
            let results = self
                .ask_all(|tx| ShardMsg::ClientKill(Box::new(filter.clone()), tx))
                .await;
            if results.iter().any(|(_, me)| *me) {
                self.closing = true;
            }
        }
    }

    pub(crate) async fn acl(&mut self, args: &Args<'_>) {
        if let Some(refusal) = redis_meta::subcommand_refusal(args) {
            return self.reply_error(&refusal);
        }
        let acl = &self.worker.cluster.acl;
        let sub = args.get(1).to_ascii_lowercase();
        match sub.as_slice() {
            b"setuser" => {
                let name = args.get(2);
                if name.iter().any(|b| b.is_ascii_whitespace() || *b == 0) {
                    return self
                        .reply_error("ERR Usernames can't contain spaces or null characters");
                }
                let rules: Vec<&[u8]> = args.iter().skip(3).collect();
                let existed = acl.get(name).is_some();
                if let Err(e) = acl.set_user(name, &rules) {
                    return self.reply_error(&format!("ERR {e}"));
                }
                let changed = acl.get(name);
                if changed.as_ref().is_some_and(|u| !u.enabled) {
                    self.disconnect_users(vec![name.to_vec()]).await;
                } else if existed && changed.is_some_and(|u| !u.all_channels()) {
                    // Subscribers to channels the user may no longer use are closed.
                    let (user, caller) = (name.to_vec(), self.info.id);
                    let killed = self
                        .ask_all(|done| ShardMsg::KillRevokedSubscribers {
                            user: user.clone(),
                            caller,
                            done,
                        })
                        .await;
                    self.closing |= killed.contains(&true);
                }
                self.out.ok();
            }
            b"deluser" => {
                let names: Vec<&[u8]> = args.iter().skip(2).collect();
                let existing: Vec<Vec<u8>> = names
                    .iter()
                    .filter(|n| acl.get(n).is_some())
                    .map(|n| n.to_vec())
                    .collect();
                match acl.delete(&names) {
                    Ok(n) => {
                        self.disconnect_users(existing).await;
                        self.out.int(n as i64);
                    }
                    Err(e) => self.reply_error(&format!("ERR {e}")),
                }
            }
            b"getuser" => match acl.get(args.get(2)) {
                Some(u) => self.reply_user(&u),
                None => self.out.null(),
            },
            b"list" => {
                let lines = acl.list();
                self.out.array(lines.len());
                for l in lines {
                    self.out.bulk(&l);
                }
            }
            b"users" => {
                let names = acl.names();
                self.out.array(names.len());
                for n in names {
                    self.out.bulk(&n);
                }
            }
            b"whoami" => {
                let user = self.current_user();
                self.out.bulk(&user.name);
            }
            b"cat" if args.len() == 2 => {
                self.out.array(CATEGORIES.len());
                for c in CATEGORIES {
                    self.out.bulk(c.as_bytes());
                }
            }
            b"cat" if args.len() == 3 => {
                let Some(bit) = std::str::from_utf8(args.get(2))
                    .ok()
                    .and_then(redis_meta::category_bit)
                else {
                    let name: String = lossy(args.get(2)).chars().take(128).collect();
                    return self.reply_error(&format!("ERR Unknown category '{name}'"));
                };
                let names: Vec<&str> = redis_meta::commands()
                    .iter()
                    .filter(|c| c.categories & bit != 0)
                    .map(|c| c.name)
                    .collect();
                self.out.array(names.len());
                for n in names {
                    self.out.bulk(n.as_bytes());
                }
            }
            b"genpass" if args.len() <= 3 => {
                let bits = if args.len() == 3 {
                    match parse_i64(args.get(2)) {
                        Some(b) => b,
                        None => return self.reply_error(errors::NOT_INT),
                    }
                } else {
                    256
                };
                if !(1..=4096).contains(&bits) {
                    return self.reply_error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096");
                }
                let chars = (bits as usize).div_ceil(4);
                let pass: String = (0..chars)
                    .map(|_| char::from_digit(rand::random::<u32>() % 16, 16).unwrap_or('0'))
                    .collect();
                self.out.bulk(pass.as_bytes());
            }
            b"log" if args.len() <= 3 => self.acl_log(args),
            b"dryrun" => self.dryrun(args),
            b"load" | b"save" if self.worker.cluster.config.get("aclfile").is_empty() => {
                self.reply_error(NO_ACL_FILE)
            }
            b"load" => {
                let path = self.worker.cluster.config.get("aclfile");
                match load_file(acl, &path) {
                    Ok(gone) => {
                        self.disconnect_users(gone).await;
                        self.out.ok();
                    }
                    Err(e) => self.reply_error(&format!("ERR {e}")),
                }
            }
            b"save" => {
                let path = self.worker.cluster.config.get("aclfile");
                match save_file(acl, &path) {
                    Ok(()) => self.out.ok(),
                    Err(e) => {
                        tracing::warn!("Opening temp ACL file for ACL SAVE: {e}");
                        self.reply_error("ERR There was an error trying to save the ACLs. Please check the server logs for more information")
                    }
                }
            }
            b"help" => self.out.help("ACL", HELP),
            _ => self.reply_error(&errors::subcommand_syntax("ACL", args.get(1))),
        }
    }

    /// ACL GETUSER's map: flags, passwords, the root selector's commands, keys and channels,
    /// then the other selectors.
    fn reply_user(&mut self, u: &User) {
        let out = &mut self.out;
        out.map(6);
        out.bulk(b"flags");
        let flags = u.flags();
        out.set(flags.len());
        for f in flags {
            out.bulk(f.as_bytes());
        }
        out.bulk(b"passwords");
        out.array(u.passwords.len());
        for p in &u.passwords {
            out.bulk(p.as_bytes());
        }
        let describe = |out: &mut damselfly_protocol::ReplyBuf,
                        s: &damselfly_acl::selector::Selector| {
            out.bulk(b"commands");
            out.bulk(s.describe_commands().as_bytes());
            out.bulk(b"keys");
            out.bulk(&s.describe_keys());
            out.bulk(b"channels");
            out.bulk(&s.describe_channels());
        };
        describe(out, &u.selectors[0]);
        out.bulk(b"selectors");
        out.array(u.selectors.len() - 1);
        for s in &u.selectors[1..] {
            out.map(3);
            describe(out, s);
        }
    }

    fn acl_log(&mut self, args: &Args) {
        let acl = &self.worker.cluster.acl;
        let mut count = 10;
        if args.len() == 3 {
            if args.is(2, "reset") {
                acl.log.lock().unwrap_or_else(|e| e.into_inner()).reset();
                return self.out.ok();
            }
            match parse_i64(args.get(2)) {
                Some(n) => count = n.max(0) as usize,
                None => return self.reply_error(errors::NOT_INT),
            }
        }
        let now = damselfly_storage::now_ms();
        let entries: Vec<LogEntry> = acl
            .log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .newest(count)
            .cloned()
            .collect();
        let out = &mut self.out;
        out.array(entries.len());
        for e in entries {
            out.map(7);
            out.bulk(b"count");
            out.int(e.count as i64);
            out.bulk(b"reason");
            out.bulk(e.reason.name().as_bytes());
            out.bulk(b"context");
            out.bulk(e.context.as_bytes());
            out.bulk(b"object");
            out.bulk(&e.object);
            out.bulk(b"username");
            out.bulk(&e.username);
            out.bulk(b"age-seconds");
            out.double(now.saturating_sub(e.time_ms) as f64 / 1000.0);
            out.bulk(b"client-info");
            out.bulk(e.client_info.as_bytes());
        }
    }

    /// ACL DRYRUN user command [args...]: whether the user may run it, without running it.
    fn dryrun(&mut self, args: &Args) {
        let Some(user) = self.worker.cluster.acl.get(args.get(2)) else {
            return self.reply_error(&format!("ERR User '{}' not found", lossy(args.get(2))));
        };
        let request = Args::new(args.buf(), &args.spans()[3..]);
        let Some(cmd) = redis_meta::for_request(&request).filter(|&c| {
            // A container's unknown subcommand names no command.
            let meta = &redis_meta::commands()[c];
            !(meta.has_subcommands() && request.len() > 1)
        }) else {
            return self.reply_error(&format!("ERR Command '{}' not found", lossy(args.get(3))));
        };
        let meta = &redis_meta::commands()[cmd];
        let n = request.len() as i32;
        if (meta.arity > 0 && meta.arity != n) || n < -meta.arity {
            return self.reply_error(&errors::wrong_arity(meta.name));
        }
        match user.check(cmd, &request) {
            Ok(()) => self.out.ok(),
            Err(Denied::Command) => self.out.bulk(
                format!(
                    "This user has no permissions to run the '{}' command",
                    meta.name
                )
                .as_bytes(),
            ),
            Err(Denied::Key(at)) => self.out.bulk(
                format!(
                    "This user has no permissions to access the '{}' key",
                    lossy(request.get(at))
                )
                .as_bytes(),
            ),
            Err(Denied::Channel(at)) => self.out.bulk(
                format!(
                    "This user has no permissions to access the '{}' channel",
                    lossy(request.get(at))
                )
                .as_bytes(),
            ),
        }
    }
}

impl crate::worker::Worker {
    /// Closes this thread's clients of `user` subscribed to a channel or pattern it may no
    /// longer use (Redis's ACLKillPubsubClientsIfNeeded); true when `caller` was one.
    pub(crate) fn kill_revoked_subscribers(&self, user: &[u8], caller: u64) -> bool {
        let Some(rules) = self.cluster.acl.get(user) else {
            return false;
        };
        let clients = self.clients.borrow();
        let mut doomed = Vec::new();
        self.pubsub.borrow().subscribers.each(|kind, name, id| {
            let theirs = clients
                .get(id)
                .is_some_and(|c| c.user.borrow().name == user);
            let pattern = kind == damselfly_pubsub::Kind::Pattern;
            if theirs && !rules.may_subscribe(name, pattern) && !doomed.contains(&id) {
                doomed.push(id);
            }
        });
        let mut caller_killed = false;
        for id in doomed {
            let Some(c) = clients.get(id) else { continue };
            if id == caller {
                // It closes once its reply is written.
                c.killed.set(true);
                caller_killed = true;
            } else {
                c.kill();
            }
        }
        caller_killed
    }
}

/// Checks a request against `user` and logs a refusal. Commands Redis does not have are
/// refused to any user not allowed everything.
fn check_and_log(
    cluster: &Cluster,
    user: &User,
    args: &Args,
    context: AclContext,
    client_info: String,
) -> Option<(&'static str, Denied)> {
    let Some(cmd) = redis_meta::for_request(args) else {
        return Some(("", Denied::Command));
    };
    let denied = user.check(cmd, args).err()?;
    let name = redis_meta::commands()[cmd].name;
    let (reason, object) = match denied {
        Denied::Command => (LogReason::Command, name.as_bytes()),
        Denied::Key(at) => (LogReason::Key, args.get(at)),
        Denied::Channel(at) => (LogReason::Channel, args.get(at)),
    };
    log(cluster, reason, context, object, &user.name, client_info);
    Some((name, denied))
}

fn log(
    cluster: &Cluster,
    reason: LogReason,
    context: AclContext,
    object: &[u8],
    username: &[u8],
    client_info: String,
) {
    let entry = LogEntry {
        count: 1,
        reason,
        context: context.name(),
        object: object.to_vec(),
        username: username.to_vec(),
        time_ms: damselfly_storage::now_ms(),
        client_info,
    };
    let max_len = cluster.config.get_u64("acllog-max-len") as usize;
    cluster
        .acl
        .log
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .add(entry, max_len);
}

/// The user a script runs as, when it is not allowed everything, and its client (for the
/// ACL LOG): each `redis.call` is checked against it, on whichever thread runs it.
#[derive(Clone)]
pub(crate) struct ScriptAcl {
    user: Arc<User>,
    client_info: String,
}

impl ScriptAcl {
    /// Redis's error for a call the user may not make, logged with context `lua`.
    pub(crate) fn refusal(&self, cluster: &Cluster, args: &Args) -> Option<&'static str> {
        let (_, denied) = check_and_log(
            cluster,
            &self.user,
            args,
            AclContext::Lua,
            self.client_info.clone(),
        )?;
        Some(match denied {
            Denied::Command => {
                "ERR The user executing the script can't run this command or subcommand"
            }
            Denied::Key(_) => "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments",
            Denied::Channel(_) => "ERR The user executing the script can't publish to the channel mentioned in the command",
        })
    }
}

impl Connection {
    /// What the calls of a script this client runs now are checked against; None when its
    /// user is allowed everything.
    pub(crate) fn script_acl(&mut self) -> Option<ScriptAcl> {
        if self.unrestricted() {
            return None;
        }
        Some(ScriptAcl {
            user: self.current_user(),
            client_info: self.info.describe(Instant::now()),
        })
    }
}

/// Loads the ACL file (ACL LOAD, and at start-up): the users that are gone, or Redis's error.
pub fn load_file(acl: &damselfly_acl::Acl, path: &str) -> Result<Vec<Vec<u8>>, String> {
    let text = std::fs::read(path).map_err(|e| {
        format!(
            "Error loading ACLs, opening file '{path}': {}",
            strerror(&e)
        )
    })?;
    acl.load(path, &text)
}

/// Writes every user to the ACL file: a temporary file, synced, renamed over it.
fn save_file(acl: &damselfly_acl::Acl, path: &str) -> std::io::Result<()> {
    use std::io::Write;
    let tmp = format!("{path}.tmp-{}", std::process::id());
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(&acl.file_text())?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// An I/O error as C's strerror words it (without Rust's " (os error N)").
fn strerror(e: &std::io::Error) -> String {
    let text = e.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}
