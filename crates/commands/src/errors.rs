//! Redis's error texts, shared by every family so the wording stays identical.

pub const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
pub const NOT_INT: &str = "ERR value is not an integer or out of range";
pub const NOT_FLOAT: &str = "ERR value is not a valid float";
pub const SYNTAX: &str = "ERR syntax error";
/// Writes (and PING) while the last save failed, with save points and
/// `stop-writes-on-bgsave-error yes` (Redis's shared.bgsaveerr).
pub const MISCONF_SAVE: &str = "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Redis logs for details about the RDB error.";
pub const OVERFLOW: &str = "ERR increment or decrement would overflow";
pub const NAN_OR_INF: &str = "ERR increment would produce NaN or Infinity";
pub const STRING_TOO_LONG: &str = "ERR string exceeds maximum allowed size (proto-max-bulk-len)";
pub const OFFSET_RANGE: &str = "ERR offset is out of range";
pub const INVALID_CURSOR: &str = "ERR invalid cursor";
pub const NOT_POSITIVE: &str = "ERR value is out of range, must be positive";
pub const NO_AUTH: &str = "NOAUTH Authentication required.";
pub const WRONG_PASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
pub const DB_INDEX: &str = "ERR DB index is out of range";

/// Redis's `getIntFromObjectOrReply`: a C int, with its two error texts.
pub fn parse_c_int(arg: &[u8]) -> Result<i32, &'static str> {
    let n = damselfly_protocol::number::parse_i64(arg).ok_or(NOT_INT)?;
    i32::try_from(n)
        .map_err(|_| "ERR value is out of range, value must between -2147483648 and 2147483647")
}

/// `ERR wrong number of arguments for 'name' command`.
pub fn wrong_arity(name: &str) -> String {
    format!("ERR wrong number of arguments for '{name}' command")
}

/// `ERR invalid expire time in 'name' command`.
pub fn invalid_expire(name: &str) -> String {
    format!("ERR invalid expire time in '{name}' command")
}

/// Redis's reply to an unknown command: the name and the first arguments, quoted.
pub fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> String {
    let mut list = String::new();
    for a in args {
        if list.len() >= 128 {
            break;
        }
        let room = 128 - list.len();
        let text = String::from_utf8_lossy(a);
        let cut: String = text.chars().take(room).collect();
        list.push_str(&format!("'{cut}' "));
    }
    let name = String::from_utf8_lossy(name);
    let name: String = name.chars().take(128).collect();
    format!("ERR unknown command '{name}', with args beginning with: {list}")
}

/// `ERR unknown subcommand 'x'. Try CMD HELP.`
pub fn unknown_subcommand(cmd: &str, sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(sub);
    let sub: String = sub.chars().take(128).collect();
    format!(
        "ERR unknown subcommand '{sub}'. Try {} HELP.",
        cmd.to_ascii_uppercase()
    )
}

/// Redis's addReplySubcommandSyntaxError.
pub fn subcommand_syntax(cmd: &str, sub: &[u8]) -> String {
    let sub = String::from_utf8_lossy(sub);
    let sub: String = sub.chars().take(128).collect();
    format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP.")
}
