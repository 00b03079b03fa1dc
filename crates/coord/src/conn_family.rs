//! Connection commands: PING, ECHO, QUIT, HELLO, AUTH, SELECT, RESET and the CLIENT family.
//! They change or report this connection's state, so they run on the connection's thread.

use damselfly_commands::keys_family::db_index;
use damselfly_commands::{errors, Args};
use damselfly_protocol::number::parse_i64;

use crate::client::KillFilter;
use crate::connection::{Connection, ReplyMode};
use crate::messages::ShardMsg;

pub const REDIS_VERSION: &str = "7.0.15";

/// Redis's rule for client names: printable ASCII without spaces.
fn valid_client_name(name: &[u8]) -> bool {
    name.iter().all(|&c| (b'!'..=b'~').contains(&c))
}

const BAD_NAME: &str = "ERR Client names cannot contain spaces, newlines or special characters.";

impl Connection {
    pub(crate) fn ping(&mut self, args: &Args) {
        if args.len() > 2 {
            return self.reply_error(&errors::wrong_arity("ping"));
        }
        if self.subscribed() && !self.out.resp3 {
            // RESP2 Pub/Sub mode: PING answers in the shape of a message.
            self.out.array(2);
            self.out.bulk(b"pong");
            self.out
                .bulk(if args.len() == 2 { args.get(1) } else { b"" });
        } else if args.len() == 2 {
            self.out.bulk(args.get(1));
        } else {
            self.out.simple("PONG");
        }
    }

    pub(crate) fn echo(&mut self, args: &Args) {
        self.out.bulk(args.get(1));
    }

    pub(crate) fn quit(&mut self) {
        self.out.ok();
        self.closing = true;
    }

    pub(crate) fn auth(&mut self, args: &Args) {
        if args.len() > 3 {
            self.reply_error(errors::SYNTAX);
            return;
        }
        if args.len() == 2 && self.worker.cluster.acl.default_user().nopass {
            self.reply_error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?");
            return;
        }
        let (user, pass) = if args.len() == 3 {
            (args.get(1), args.get(2))
        } else {
            (b"default".as_slice(), args.get(1))
        };
        if self.log_in(user, pass, args.get(0)) {
            self.out.ok();
        }
    }

    pub(crate) fn hello(&mut self, args: &Args) {
        let mut version = self.info.resp.get() as i64;
        let mut next = 1;
        if args.len() >= 2 {
            match parse_i64(args.get(1)) {
                None => {
                    self.reply_error("ERR Protocol version is not an integer or out of range");
                    return;
                }
                Some(v) if !(2..=3).contains(&v) => {
                    self.reply_error("NOPROTO unsupported protocol version");
                    return;
                }
                Some(v) => version = v,
            }
            next = 2;
        }
        let mut credentials = None;
        let mut name = None;
        let mut j = next;
        while j < args.len() {
            let more = args.len() - 1 - j;
            if args.is(j, "auth") && more >= 2 {
                credentials = Some((args.get(j + 1), args.get(j + 2)));
                j += 3;
            } else if args.is(j, "setname") && more >= 1 {
                let n = args.get(j + 1);
                if !valid_client_name(n) {
                    self.reply_error(BAD_NAME);
                    return;
                }
                name = Some(n);
                j += 2;
            } else {
                let opt = String::from_utf8_lossy(args.get(j)).into_owned();
                self.reply_error(&format!("ERR Syntax error in HELLO option '{opt}'"));
                return;
            }
        }
        if let Some((user, pass)) = credentials {
            if !self.log_in(user, pass, args.get(0)) {
                return;
            }
        }
        if !self.authenticated {
            self.reply_error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time");
            return;
        }
        if let Some(n) = name {
            *self.info.name.borrow_mut() = n.to_vec();
        }
        self.set_protocol(version as u8);
        let out = &mut self.out;
        out.map(7);
        out.bulk(b"server");
        out.bulk(b"redis");
        out.bulk(b"version");
        out.bulk(REDIS_VERSION.as_bytes());
        out.bulk(b"proto");
        out.int(version);
        out.bulk(b"id");
        out.int(self.info.id as i64);
        out.bulk(b"mode");
        out.bulk(b"standalone");
        out.bulk(b"role");
        out.bulk(b"master");
        out.bulk(b"modules");
        out.array(0);
    }

    pub(crate) fn select(&mut self, args: &Args) {
        let db = match errors::parse_c_int(args.get(1)) {
            Ok(n) => db_index(n.into(), self.worker.cluster.databases),
            Err(e) => return self.reply_error(e),
        };
        match db {
            Some(db) => {
                self.info.db.set(db);
                self.out.ok();
            }
            None => self.reply_error(errors::DB_INDEX),
        }
    }

    pub(crate) async fn reset_cmd(&mut self) {
        self.reset();
        self.leave_all().await;
        self.tracking_off().await;
        self.out.simple("RESET");
    }

    /// CLIENT PAUSE timeout [WRITE|ALL].
    fn client_pause(&mut self, args: &Args) {
        let Some(ms) = damselfly_protocol::number::parse_i64(args.get(2)) else {
            return self.reply_error("ERR timeout is not an integer or out of range");
        };
        if ms < 0 {
            return self.reply_error("ERR timeout is negative");
        }
        let all = match args.len() {
            3 => true,
            _ if args.is(3, "all") => true,
            _ if args.is(3, "write") => false,
            _ => return self.reply_error("ERR CLIENT PAUSE mode must be WRITE or ALL"),
        };
        let now = damselfly_storage::now_ms();
        self.worker
            .cluster
            .pause
            .pause(now, now.saturating_add(ms as u64), all);
        self.out.ok();
    }

    /// The client speaks RESP `version` from now on: replies and pushed messages.
    pub(crate) fn set_protocol(&mut self, version: u8) {
        self.info.resp.set(version);
        self.out.resp3 = version == 3;
        self.info.inbox.set_resp3(version == 3);
    }

    pub(crate) async fn client(&mut self, args: &Args<'_>) {
        let sub = args.get(1).to_ascii_lowercase();
        let arity_ok = |n: usize| match sub.as_slice() {
            b"id" | b"getname" | b"info" => n == 2,
            b"setname" | b"no-evict" | b"no-touch" | b"reply" => n == 3,
            b"pause" => n == 3 || n == 4,
            b"unpause" => n == 2,
            b"setinfo" => n == 4,
            b"list" | b"kill" => n >= 2,
            b"unblock" => n == 3 || n == 4,
            b"help" | b"getredir" | b"trackinginfo" => n == 2,
            b"caching" => n == 3,
            b"tracking" => n >= 3,
            _ => true,
        };
        if !arity_ok(args.len()) {
            let full = format!("client|{}", String::from_utf8_lossy(&sub));
            self.reply_error(&errors::wrong_arity(&full));
            return;
        }
        match sub.as_slice() {
            b"id" => self.out.int(self.info.id as i64),
            b"getname" => {
                let name = self.info.name.borrow().clone();
                if name.is_empty() {
                    self.out.null();
                } else {
                    self.out.bulk(&name);
                }
            }
            b"setname" => {
                let n = args.get(2);
                if !valid_client_name(n) {
                    self.reply_error(BAD_NAME);
                    return;
                }
                *self.info.name.borrow_mut() = n.to_vec();
                self.out.ok();
            }
            b"setinfo" => {
                let value = args.get(3);
                let field = if args.is(2, "lib-name") {
                    &self.info.lib_name
                } else if args.is(2, "lib-ver") {
                    &self.info.lib_ver
                } else {
                    let attr = String::from_utf8_lossy(args.get(2)).into_owned();
                    self.reply_error(&format!("ERR Unrecognized option '{attr}'"));
                    return;
                };
                if !valid_client_name(value) {
                    let attr = String::from_utf8_lossy(args.get(2)).to_ascii_lowercase();
                    self.reply_error(&format!(
                        "ERR {attr} cannot contain spaces, newlines or special characters."
                    ));
                    return;
                }
                *field.borrow_mut() = value.to_vec();
                self.out.ok();
            }
            b"info" => {
                let line = self.info.describe(std::time::Instant::now()) + "\n";
                self.out.verbatim("txt", line.as_bytes());
            }
            b"list" => self.client_list(args).await,
            b"kill" => self.client_kill(args).await,
            b"unblock" => self.client_unblock(args).await,
            b"tracking" => self.client_tracking(args).await,
            b"caching" => self.client_caching(args),
            b"getredir" => self.client_getredir(),
            b"trackinginfo" => self.client_trackinginfo(),
            b"no-evict" | b"no-touch" => {
                if args.is(2, "on") || args.is(2, "off") {
                    self.out.ok();
                } else {
                    self.reply_error(errors::SYNTAX);
                }
            }
            b"pause" => self.client_pause(args),
            b"unpause" => {
                self.worker.cluster.pause.unpause();
                self.out.ok();
            }
            b"reply" => {
                // OFF and SKIP answer nothing (their reply would be the first one dropped).
                if args.is(2, "on") {
                    self.reply_mode = ReplyMode::On;
                    self.out.ok();
                } else if args.is(2, "off") {
                    self.reply_mode = ReplyMode::Off;
                } else if args.is(2, "skip") {
                    self.reply_mode = ReplyMode::SkipNext;
                } else {
                    self.reply_error(errors::SYNTAX);
                }
            }
            b"help" => {
                let lines = [
                    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                    "ID",
                    "    Return the ID of the current connection.",
                    "GETNAME",
                    "    Return the name of the current connection.",
                    "SETNAME <name>",
                    "    Assign the name <name> to the current connection.",
                    "SETINFO <LIB-NAME|LIB-VER> <value>",
                    "    Set client library name or version.",
                    "INFO",
                    "    Return information about the current client connection.",
                    "LIST [TYPE NORMAL] [ID <id> [<id> ...]]",
                    "    Return information about client connections.",
                    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
                    "    Unblock the specified blocked client.",
                    "KILL <ip:port>",
                    "    Kill connection made from <ip:port>.",
                    "KILL <option> <value> [<option> <value> [...]]",
                    "    Kill connections. Options are: ID, ADDR, LADDR, TYPE, USER, SKIPME.",
                    "HELP",
                    "    Print this help.",
                ];
                self.out.array(lines.len());
                for l in lines {
                    self.out.simple(l);
                }
            }
            _ => self.reply_error(&errors::unknown_subcommand("client", args.get(1))),
        }
    }

    async fn client_list(&mut self, args: &Args<'_>) {
        let mut ids: Option<Vec<u64>> = None;
        let mut j = 2;
        while j < args.len() {
            if args.is(j, "type") && j + 1 < args.len() {
                let t = args.get(j + 1).to_ascii_lowercase();
                match t.as_slice() {
                    b"normal" => {}
                    b"master" | b"replica" | b"slave" | b"pubsub" => ids = Some(Vec::new()),
                    _ => {
                        let t = String::from_utf8_lossy(args.get(j + 1)).into_owned();
                        self.reply_error(&format!("ERR Unknown client type '{t}'"));
                        return;
                    }
                }
                j += 2;
            } else if args.is(j, "id") && j + 1 < args.len() {
                let mut list = Vec::new();
                for k in j + 1..args.len() {
                    match parse_i64(args.get(k)) {
                        Some(id) if id > 0 => list.push(id as u64),
                        _ => {
                            self.reply_error("ERR Invalid client ID");
                            return;
                        }
                    }
                }
                ids = Some(list);
                j = args.len();
            } else {
                self.reply_error(errors::SYNTAX);
                return;
            }
        }
        let mut lines: Vec<(u64, String)> = self
            .ask_all(|tx| ShardMsg::ClientList(ids.clone(), tx))
            .await
            .into_iter()
            .flatten()
            .collect();
        lines.sort_by_key(|(id, _)| *id);
        let mut text = String::new();
        for (_, l) in lines {
            text.push_str(&l);
            text.push('\n');
        }
        self.out.verbatim("txt", text.as_bytes());
    }

    /// CLIENT UNBLOCK id [TIMEOUT|ERROR]: ends another client's blocking command.
    async fn client_unblock(&mut self, args: &Args<'_>) {
        let Some(id) = parse_i64(args.get(2)) else {
            return self.reply_error(errors::NOT_INT);
        };
        let error = match args.len() {
            3 => false,
            _ if args.is(3, "timeout") => false,
            _ if args.is(3, "error") => true,
            _ => {
                return self.reply_error("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR");
            }
        };
        // Client ids are positive; no client has any other.
        let Ok(id) = u64::try_from(id) else {
            return self.out.int(0);
        };
        let results = self
            .ask_all(|tx| ShardMsg::ClientUnblock(id, error, tx))
            .await;
        self.out.int(i64::from(results.into_iter().any(|b| b)));
    }

    async fn client_kill(&mut self, args: &Args<'_>) {
        let mut filter = KillFilter {
            skip: Some(self.info.id),
            caller: self.info.id,
            ..KillFilter::default()
        };
        let old_form = args.len() == 3;
        if old_form {
            filter.addr = Some(String::from_utf8_lossy(args.get(2)).into_owned());
            filter.skip = None;
        } else {
            if !args.len().is_multiple_of(2) {
                self.reply_error(errors::SYNTAX);
                return;
            }
            for j in (2..args.len()).step_by(2) {
                let value = String::from_utf8_lossy(args.get(j + 1)).into_owned();
                match args.get(j).to_ascii_lowercase().as_slice() {
                    b"id" => match parse_i64(args.get(j + 1)) {
                        Some(id) if id > 0 => filter.id = Some(id as u64),
                        _ => {
                            self.reply_error("ERR client-id should be greater than 0");
                            return;
                        }
                    },
                    b"addr" => filter.addr = Some(value),
                    b"laddr" => filter.laddr = Some(value),
                    b"user" => filter.user = Some(value),
                    b"type" => match value.to_ascii_lowercase().as_str() {
                        "normal" => filter.normal_only = Some(true),
                        "master" | "replica" | "slave" | "pubsub" => {
                            filter.normal_only = Some(false)
                        }
                        _ => {
                            self.reply_error(&format!("ERR Unknown client type '{value}'"));
                            return;
                        }
                    },
                    b"skipme" => match value.to_ascii_lowercase().as_str() {
                        "yes" => filter.skip = Some(self.info.id),
                        "no" => filter.skip = None,
                        _ => {
                            self.reply_error(errors::SYNTAX);
                            return;
                        }
                    },
                    _ => {
                        self.reply_error(errors::SYNTAX);
                        return;
                    }
                }
            }
        }
        let results = self
            .ask_all(|tx| ShardMsg::ClientKill(Box::new(filter.clone()), tx))
            .await;
        let killed: usize = results.iter().map(|(n, _)| n).sum();
        if results.iter().any(|(_, me)| *me) {
            self.closing = true;
        }
        if old_form {
            if killed == 0 {
                self.reply_error("ERR No such client");
            } else {
                self.out.ok();
            }
        } else {
            self.out.int(killed as i64);
        }
    }
}
