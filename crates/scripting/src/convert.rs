//! Conversions between RESP replies and Lua values, as Redis 7.0 documents them
//! (docs/scripting.md, "Conversions"). Replies of commands a script calls are read straight
//! from the encoded bytes the command wrote (the shard may be another thread, so bytes are
//! what comes back); no intermediate frame tree is built.

use damselfly_protocol::ReplyBuf;
use std::os::raw::c_int;

use mlua::ffi;

/// Deepest nesting a script's return value may have; Redis stops where Lua's C stack ends
/// (about 8000 levels) with the same error.
const MAX_DEPTH: usize = 1000;

/// The fields a script's table value is read by to learn its kind (`{err = ...}`,
/// `{ok = ...}`, `{map = ...}`, ...), in the order Redis reads them.
#[derive(Clone, Copy)]
pub(crate) enum Field {
    Err,
    Ok,
    Double,
    BigNumber,
    VerbatimString,
    Format,
    String,
    Map,
    Set,
}

const FIELD_NAMES: [&str; 9] = [
    "err",
    "ok",
    "double",
    "big_number",
    "verbatim_string",
    "format",
    "string",
    "map",
    "set",
];

/// Those fields' names as registry slots of their strings, so that reading a field pushes
/// an existing string instead of making one (which hashes the name and may step the
/// collector): a returned array is read by seven of them, each of its nested tables too.
#[derive(Clone, Copy)]
pub(crate) struct FieldNames([c_int; FIELD_NAMES.len()]);

impl FieldNames {
    /// Puts the names in `lua`'s registry: they stay there while the returned keys live.
    pub(crate) fn new(lua: &mlua::Lua) -> mlua::Result<(FieldNames, Vec<mlua::RegistryKey>)> {
        let mut ids = [0; FIELD_NAMES.len()];
        let mut keys = Vec::with_capacity(FIELD_NAMES.len());
        for (id, name) in ids.iter_mut().zip(FIELD_NAMES) {
            let key = lua.create_registry_value(lua.create_string(name)?)?;
            *id = key.id();
            keys.push(key);
        }
        Ok((FieldNames(ids), keys))
    }
}

/// A reply that does not parse (a bug in the command that wrote it).
#[derive(Debug, Clone, Copy)]
pub struct Malformed;

/// Pushes one encoded reply onto `state`'s stack as a Lua value, through Lua's C API (no
/// mlua value is made, so nothing but the value itself is allocated). Returns whether it was
/// an error reply; when it is malformed nothing is pushed.
///
/// # Safety
/// `state` must be running a protected call: pushing may raise Lua's out-of-memory error.
pub unsafe fn push_reply(state: *mut ffi::lua_State, reply: &[u8]) -> Result<bool, Malformed> {
    let top = ffi::lua_gettop(state);
    let mut r = Reader { buf: reply, pos: 0 };
    match r.push(state) {
        Ok(()) => Ok(reply.first() == Some(&b'-')),
        Err(e) => {
            ffi::lua_settop(state, top);
            Err(e)
        }
    }
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Pushes a byte string.
pub(crate) unsafe fn push_bytes(state: *mut ffi::lua_State, b: &[u8]) {
    ffi::lua_pushlstring(state, b.as_ptr().cast(), b.len());
}

/// Replaces the value on top with `{[key] = value}`.
pub(crate) unsafe fn wrap(state: *mut ffi::lua_State, key: &[u8]) {
    ffi::lua_createtable(state, 0, 1);
    push_bytes(state, key);
    ffi::lua_pushvalue(state, -3);
    ffi::lua_rawset(state, -3);
    ffi::lua_remove(state, -2);
}

/// Sets `t[k] = v` for the table under the key and value on top, popping both; a nil or NaN
/// key (which Lua refuses with an error) makes the reply malformed.
unsafe fn set_pair(state: *mut ffi::lua_State) -> Result<(), Malformed> {
    let key_is_nan = ffi::lua_type(state, -2) == ffi::LUA_TNUMBER && {
        let n = ffi::lua_tonumber(state, -2);
        n.is_nan()
    };
    if ffi::lua_type(state, -2) == ffi::LUA_TNIL || key_is_nan {
        return Err(Malformed);
    }
    ffi::lua_rawset(state, -3);
    Ok(())
}

impl<'a> Reader<'a> {
    fn line(&mut self) -> Result<&'a [u8], Malformed> {
        let rest = &self.buf[self.pos..];
        let end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or(Malformed)?;
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn int(&mut self) -> Result<i64, Malformed> {
        let l = self.line()?;
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or(Malformed)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        let end = self.pos.checked_add(n).ok_or(Malformed)?;
        let b = self.buf.get(self.pos..end).ok_or(Malformed)?;
        self.pos = end + 2;
        Ok(b)
    }

    /// A count that fits the C API's table size hints (only a hint: 0 when it does not).
    fn hint(n: i64) -> c_int {
        c_int::try_from(n).unwrap_or(0)
    }

    /// Pushes the next value.
    unsafe fn push(&mut self, state: *mut ffi::lua_State) -> Result<(), Malformed> {
        // A value takes at most four slots while it is built (a wrapped map's pair).
        if ffi::lua_checkstack(state, 4) == 0 {
            return Err(Malformed);
        }
        let tag = *self.buf.get(self.pos).ok_or(Malformed)?;
        self.pos += 1;
        match tag {
            b'+' => {
                push_bytes(state, self.line()?);
                wrap(state, b"ok");
            }
            b'-' => {
                let s = self.line()?;
                if s.contains(&b' ') {
                    push_bytes(state, s);
                } else {
                    push_bytes(state, b"ERR ");
                    push_bytes(state, s);
                    ffi::lua_concat(state, 2);
                }
                wrap(state, b"err");
            }
            b':' => ffi::lua_pushnumber(state, self.int()? as f64),
            b'$' => {
                let n = self.int()?;
                match usize::try_from(n) {
                    Ok(n) => push_bytes(state, self.bytes(n)?),
                    Err(_) => ffi::lua_pushboolean(state, 0),
                }
            }
            b'*' | b'>' => {
                let n = self.int()?;
                if n < 0 {
                    ffi::lua_pushboolean(state, 0);
                    return Ok(());
                }
                ffi::lua_createtable(state, Self::hint(n), 0);
                for i in 1..=n {
                    self.push(state)?;
                    ffi::lua_rawseti(state, -2, i);
                }
            }
            b'~' => {
                let n = self.int()?;
                if n < 0 {
                    ffi::lua_pushboolean(state, 0);
                    return Ok(());
                }
                ffi::lua_createtable(state, 0, Self::hint(n));
                for _ in 0..n {
                    self.push(state)?;
                    ffi::lua_pushboolean(state, 1);
                    set_pair(state)?;
                }
                wrap(state, b"set");
            }
            b'%' => {
                let n = self.int()?;
                ffi::lua_createtable(state, 0, Self::hint(n));
                for _ in 0..n {
                    self.push(state)?;
                    self.push(state)?;
                    set_pair(state)?;
                }
                wrap(state, b"map");
            }
            b'_' => {
                self.line()?;
                ffi::lua_pushnil(state);
            }
            b'#' => {
                let t = self.line()? == b"t";
                ffi::lua_pushboolean(state, c_int::from(t));
            }
            b',' => {
                let l = self.line()?;
                let d = match l {
                    b"inf" => f64::INFINITY,
                    b"-inf" => f64::NEG_INFINITY,
                    b"nan" => f64::NAN,
                    _ => std::str::from_utf8(l)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or(Malformed)?,
                };
                ffi::lua_pushnumber(state, d);
                wrap(state, b"double");
            }
            b'(' => {
                push_bytes(state, self.line()?);
                wrap(state, b"big_number");
            }
            b'=' => {
                let n = self.int()?;
                let b = self.bytes(usize::try_from(n).unwrap_or(0))?;
                let (format, text) = if b.len() >= 4 {
                    b.split_at(3)
                } else {
                    (b, &b""[..])
                };
                ffi::lua_createtable(state, 0, 2);
                push_bytes(state, b"format");
                push_bytes(state, format);
                ffi::lua_rawset(state, -3);
                push_bytes(state, b"string");
                push_bytes(state, text.get(1..).unwrap_or_default());
                ffi::lua_rawset(state, -3);
                wrap(state, b"verbatim_string");
            }
            b'|' => {
                // Attributes are skipped; the reply after them is the value.
                let n = self.int()?;
                for _ in 0..2 * n {
                    self.push(state)?;
                    ffi::lua_settop(state, -2);
                }
                self.push(state)?;
            }
            _ => return Err(Malformed),
        }
        Ok(())
    }
}

/// Writes the value at stack index `at` (absolute).
///
/// # Safety
/// `state` must be running a protected call. Lua may raise (out of memory) only while no
/// Rust value that owns memory is alive in this walk's frames.
pub(crate) unsafe fn write_value(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    names: &FieldNames,
    script_resp3: bool,
    depth: usize,
) {
    if depth > MAX_DEPTH {
        out.error("ERR reached lua stack limit");
        return;
    }
    if !write_scalar(state, at, out, script_resp3) {
        write_table(state, at, out, names, script_resp3, depth);
    }
}

/// Writes the value at stack index `at` unless it is a table (false then). Reads only, so
/// it allocates nothing in Lua and needs no protected call.
///
/// # Safety
/// `at` must be a valid index of `state`'s stack.
pub(crate) unsafe fn write_scalar(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    script_resp3: bool,
) -> bool {
    match ffi::lua_type(state, at) {
        ffi::LUA_TSTRING => out.bulk(string_at(state, at).unwrap_or_default()),
        ffi::LUA_TNUMBER => out.int(lua_number_to_int(ffi::lua_tonumber(state, at))),
        ffi::LUA_TBOOLEAN => {
            let b = ffi::lua_toboolean(state, at) != 0;
            match (script_resp3, b) {
                (true, b) => out.boolean(b),
                (false, true) => out.int(1),
                (false, false) => out.null(),
            }
        }
        ffi::LUA_TTABLE => return false,
        _ => out.null(),
    }
    true
}

/// Writes the table at stack index `at` if it is an error or a status table (its `err`, else
/// its `ok`, field is a string), as `write_value` would; false otherwise. Reads only, so it
/// allocates nothing in Lua and needs no protected call.
///
/// # Safety
/// `at` must hold a table (an absolute index), and `state` have a free stack slot.
pub(crate) unsafe fn write_error_or_status(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    names: &FieldNames,
) -> bool {
    let string_field = |f: Field| {
        field(state, at, names, f);
        let s = string_at(state, -1);
        ffi::lua_pop(state, 1);
        // Strings a table refers to outlive this pop: the table stays on the stack.
        s
    };
    if let Some(text) = string_field(Field::Err) {
        write_error(out, text);
    } else if let Some(text) = string_field(Field::Ok) {
        write_status(out, text);
    } else {
        return false;
    }
    true
}

/// The string at `index` of `state`'s stack, if it is a string (a number is not converted,
/// which would allocate).
///
/// # Safety
/// The slice borrows Lua's string; it lives while the value stays on the stack.
pub(crate) unsafe fn string_at<'a>(state: *mut ffi::lua_State, index: c_int) -> Option<&'a [u8]> {
    if ffi::lua_type(state, index) != ffi::LUA_TSTRING {
        return None;
    }
    let mut len = 0;
    let ptr = ffi::lua_tolstring(state, index, &mut len);
    (!ptr.is_null()).then(|| std::slice::from_raw_parts(ptr.cast::<u8>(), len))
}

/// Pushes `t[key]` (raw) for the table at `at`, and returns its type.
unsafe fn field(state: *mut ffi::lua_State, at: c_int, names: &FieldNames, f: Field) -> c_int {
    ffi::lua_rawgeti(
        state,
        ffi::LUA_REGISTRYINDEX,
        ffi::lua_Integer::from(names.0[f as usize]),
    );
    ffi::lua_rawget(state, at);
    ffi::lua_type(state, -1)
}

/// An error reply of `text` (an error table's `err`).
fn write_error(out: &mut ReplyBuf, text: &[u8]) {
    out.error(&String::from_utf8_lossy(text));
}

/// A status reply of `s`, as Redis writes it.
fn write_status(out: &mut ReplyBuf, s: &[u8]) {
    match std::str::from_utf8(s) {
        Ok(text) if !s.contains(&b'\r') && !s.contains(&b'\n') => out.simple(text),
        _ => out.simple(&one_line(s)),
    }
}

/// A status line's text with CR and LF made spaces, as Redis writes it.
fn one_line(s: &[u8]) -> String {
    let text: Vec<u8> = s
        .iter()
        .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
        .collect();
    String::from_utf8_lossy(&text).into_owned()
}

unsafe fn write_table(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    names: &FieldNames,
    script_resp3: bool,
    depth: usize,
) {
    if ffi::lua_checkstack(state, 1) == 0 {
        out.error("ERR reached lua stack limit");
        return;
    }
    if !write_error_or_status(state, at, out, names) {
        write_data_table(state, at, out, names, script_resp3, depth);
    }
}

/// Writes the table at stack index `at` (absolute) that is neither an error nor a status
/// table (`write_error_or_status` said so): a double, big number, verbatim string, map, set
/// or array, by its fields in Redis's order.
///
/// # Safety
/// As `write_value`'s.
pub(crate) unsafe fn write_data_table(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    names: &FieldNames,
    script_resp3: bool,
    depth: usize,
) {
    // Up to five fields are read before the table's kind is known.
    if ffi::lua_checkstack(state, 6) == 0 {
        out.error("ERR reached lua stack limit");
        return;
    }
    let top = ffi::lua_gettop(state);
    if field(state, at, names, Field::Double) == ffi::LUA_TNUMBER {
        out.double(ffi::lua_tonumber(state, -1));
    } else if field(state, at, names, Field::BigNumber) == ffi::LUA_TSTRING {
        let text = one_line(string_at(state, -1).unwrap_or_default());
        if out.resp3 {
            out.buf.push(b'(');
            out.buf.extend_from_slice(text.as_bytes());
            out.buf.extend_from_slice(b"\r\n");
        } else {
            out.bulk(text.as_bytes());
        }
    } else if field(state, at, names, Field::VerbatimString) == ffi::LUA_TTABLE
        && field(state, top + 3, names, Field::Format) == ffi::LUA_TSTRING
        && field(state, top + 3, names, Field::String) == ffi::LUA_TSTRING
    {
        let f = string_at(state, -2).unwrap_or_default();
        let mut f3 = String::from_utf8_lossy(&f[..f.len().min(3)]).into_owned();
        while f3.len() < 3 {
            f3.push(' ');
        }
        out.verbatim(&f3, string_at(state, -1).unwrap_or_default());
    } else {
        ffi::lua_settop(state, top);
        if field(state, at, names, Field::Map) == ffi::LUA_TTABLE {
            let m = ffi::lua_gettop(state);
            out.map(pair_count(state, m));
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, m) != 0 {
                let k = ffi::lua_gettop(state) - 1;
                write_value(state, k, out, names, script_resp3, depth + 1);
                write_value(state, k + 1, out, names, script_resp3, depth + 1);
                ffi::lua_settop(state, k);
            }
        } else if field(state, at, names, Field::Set) == ffi::LUA_TTABLE {
            let m = ffi::lua_gettop(state);
            out.set(pair_count(state, m));
            ffi::lua_pushnil(state);
            while ffi::lua_next(state, m) != 0 {
                let k = ffi::lua_gettop(state) - 1;
                write_value(state, k, out, names, script_resp3, depth + 1);
                ffi::lua_settop(state, k);
            }
        } else {
            write_array(state, at, out, names, script_resp3, depth);
        }
    }
    ffi::lua_settop(state, top);
}

/// A table as an array, up to its first nil.
unsafe fn write_array(
    state: *mut ffi::lua_State,
    at: c_int,
    out: &mut ReplyBuf,
    names: &FieldNames,
    script_resp3: bool,
    depth: usize,
) {
    let top = ffi::lua_gettop(state);
    let mut len: ffi::lua_Integer = 0;
    loop {
        ffi::lua_rawgeti(state, at, len + 1);
        let end = ffi::lua_type(state, -1) == ffi::LUA_TNIL;
        ffi::lua_settop(state, top);
        if end {
            break;
        }
        len += 1;
    }
    out.array(usize::try_from(len).unwrap_or(0));
    for i in 1..=len {
        ffi::lua_rawgeti(state, at, i);
        write_value(state, top + 1, out, names, script_resp3, depth + 1);
        ffi::lua_settop(state, top);
    }
}

/// The number of entries of the table at `at` (a map or set).
unsafe fn pair_count(state: *mut ffi::lua_State, at: c_int) -> usize {
    let mut n = 0;
    ffi::lua_pushnil(state);
    while ffi::lua_next(state, at) != 0 {
        n += 1;
        ffi::lua_settop(state, -2);
    }
    n
}

/// C's `(long long)` of a Lua number on x86-64: truncation, and the "integer indefinite"
/// value for NaN and anything out of range.
fn lua_number_to_int(n: f64) -> i64 {
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&n) {
        i64::MIN
    } else {
        n as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(reply: &[u8], client_resp3: bool, script_resp3: bool) -> Vec<u8> {
        let lua = mlua::Lua::new();
        let protected = crate::protected::Protected::new(&lua).unwrap();
        let (names, _keys) = FieldNames::new(&lua).unwrap();
        let mut out = ReplyBuf::new(client_resp3);
        // SAFETY: push_reply leaves the value at index 1 of the call's stack, where
        // write_value reads it.
        unsafe {
            protected.call(&mut |state| {
                push_reply(state, reply).expect("a well-formed reply");
                write_value(state, 1, &mut out, &names, script_resp3, 0);
            })
        }
        .unwrap();
        out.buf
    }

    #[test]
    fn replies_come_back_as_redis_converts_them() {
        assert_eq!(roundtrip(b"+OK\r\n", false, false), b"+OK\r\n");
        assert_eq!(
            roundtrip(b"-WRONGTYPE x y\r\n", false, false),
            b"-WRONGTYPE x y\r\n"
        );
        assert_eq!(
            roundtrip(b"-nospace\r\n", false, false),
            b"-ERR nospace\r\n"
        );
        assert_eq!(roundtrip(b":-7\r\n", false, false), b":-7\r\n");
        assert_eq!(
            roundtrip(b"$3\r\na\r\n\r\n", false, false),
            b"$3\r\na\r\n\r\n"
        );
        // A nil bulk is false, which returns as nil in the client's protocol.
        assert_eq!(roundtrip(b"$-1\r\n", false, false), b"$-1\r\n");
        assert_eq!(roundtrip(b"$-1\r\n", true, false), b"_\r\n");
        assert_eq!(
            roundtrip(b"*3\r\n:1\r\n$-1\r\n:3\r\n", false, false),
            b"*3\r\n:1\r\n$-1\r\n:3\r\n"
        );
        assert_eq!(
            roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", true, true),
            b"%1\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(
            roundtrip(b"%1\r\n$1\r\na\r\n:1\r\n", false, true),
            b"*2\r\n$1\r\na\r\n:1\r\n"
        );
        assert_eq!(
            roundtrip(b"~1\r\n$1\r\nm\r\n", true, true),
            b"~1\r\n$1\r\nm\r\n"
        );
        assert_eq!(roundtrip(b",1.5\r\n", true, true), b",1.5\r\n");
        assert_eq!(roundtrip(b",1.5\r\n", false, true), b"$3\r\n1.5\r\n");
        assert_eq!(roundtrip(b"#t\r\n", true, true), b"#t\r\n");
        assert_eq!(roundtrip(b"#t\r\n", false, true), b":1\r\n");
        assert_eq!(roundtrip(b"#f\r\n", true, true), b"#f\r\n");
        assert_eq!(roundtrip(b"#f\r\n", false, true), b":0\r\n");
        assert_eq!(roundtrip(b"(123\r\n", true, true), b"(123\r\n");
        assert_eq!(roundtrip(b"_\r\n", false, true), b"$-1\r\n");
        assert_eq!(
            roundtrip(b"=8\r\ntxt:abcd\r\n", true, true),
            b"=8\r\ntxt:abcd\r\n"
        );
        assert_eq!(
            roundtrip(b"=8\r\ntxt:abcd\r\n", false, true),
            b"$4\r\nabcd\r\n"
        );
    }

    #[test]
    fn numbers_truncate_as_c_does() {
        assert_eq!(lua_number_to_int(100.5), 100);
        assert_eq!(lua_number_to_int(-3.99), -3);
        assert_eq!(lua_number_to_int(f64::NAN), i64::MIN);
        assert_eq!(lua_number_to_int(f64::INFINITY), i64::MIN);
        assert_eq!(lua_number_to_int(1e19), i64::MIN);
    }
}
