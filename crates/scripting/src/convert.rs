//! Conversions between RESP replies and Lua values, as Redis 7.0 documents them
//! (docs/scripting.md, "Conversions"). Replies of commands a script calls are read straight
//! from the encoded bytes the command wrote (the shard may be another thread, so bytes are
//! what comes back); no intermediate frame tree is built.

use damselfly_protocol::ReplyBuf;
use mlua::{Lua, Table, Value};

/// Deepest nesting a script's return value may have; Redis stops where Lua's C stack ends
/// (about 8000 levels) with the same error.
const MAX_DEPTH: usize = 1000;

/// Converts one encoded reply to a Lua value. Returns whether it was an error reply, and the
/// value (`{err = ...}` for an error).
pub fn reply_to_lua(lua: &Lua, reply: &[u8]) -> mlua::Result<(bool, Value)> {
    let mut r = Reader { buf: reply, pos: 0 };
    let is_error = reply.first() == Some(&b'-');
    let v = r.value(lua)?;
    Ok((is_error, v))
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

fn bad() -> mlua::Error {
    mlua::Error::RuntimeError("ERR malformed reply".into())
}

impl<'a> Reader<'a> {
    fn line(&mut self) -> mlua::Result<&'a [u8]> {
        let rest = &self.buf[self.pos..];
        let end = rest.windows(2).position(|w| w == b"\r\n").ok_or_else(bad)?;
        self.pos += end + 2;
        Ok(&rest[..end])
    }

    fn int(&mut self) -> mlua::Result<i64> {
        let l = self.line()?;
        std::str::from_utf8(l)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad)
    }

    fn bytes(&mut self, n: usize) -> mlua::Result<&'a [u8]> {
        let end = self.pos.checked_add(n).ok_or_else(bad)?;
        let b = self.buf.get(self.pos..end).ok_or_else(bad)?;
        self.pos = end + 2;
        Ok(b)
    }

    fn value(&mut self, lua: &Lua) -> mlua::Result<Value> {
        let tag = *self.buf.get(self.pos).ok_or_else(bad)?;
        self.pos += 1;
        Ok(match tag {
            b'+' => {
                let s = self.line()?;
                Value::Table(one(lua, "ok", lua.create_string(s)?)?)
            }
            b'-' => {
                let s = self.line()?;
                let text = if s.contains(&b' ') {
                    lua.create_string(s)?
                } else {
                    lua.create_string([b"ERR ".as_slice(), s].concat())?
                };
                Value::Table(one(lua, "err", text)?)
            }
            b':' => Value::Number(self.int()? as f64),
            b'$' => {
                let n = self.int()?;
                if n < 0 {
                    Value::Boolean(false)
                } else {
                    Value::String(lua.create_string(self.bytes(n as usize)?)?)
                }
            }
            b'*' | b'~' | b'>' => {
                let n = self.int()?;
                if n < 0 {
                    return Ok(Value::Boolean(false));
                }
                let t = lua.create_table()?;
                for i in 1..=n {
                    let v = self.value(lua)?;
                    if tag == b'~' {
                        t.raw_set(v, true)?;
                    } else {
                        t.raw_set(i, v)?;
                    }
                }
                if tag == b'~' {
                    Value::Table(one(lua, "set", t)?)
                } else {
                    Value::Table(t)
                }
            }
            b'%' => {
                let n = self.int()?;
                let t = lua.create_table()?;
                for _ in 0..n {
                    let k = self.value(lua)?;
                    let v = self.value(lua)?;
                    t.raw_set(k, v)?;
                }
                Value::Table(one(lua, "map", t)?)
            }
            b'_' => {
                self.line()?;
                Value::Nil
            }
            b'#' => Value::Boolean(self.line()? == b"t"),
            b',' => {
                let l = self.line()?;
                let d = match l {
                    b"inf" => f64::INFINITY,
                    b"-inf" => f64::NEG_INFINITY,
                    b"nan" => f64::NAN,
                    _ => std::str::from_utf8(l)
                        .ok()
                        .and_then(|s| s.parse().ok())
                        .ok_or_else(bad)?,
                };
                Value::Table(one(lua, "double", d)?)
            }
            b'(' => {
                let l = self.line()?;
                Value::Table(one(lua, "big_number", lua.create_string(l)?)?)
            }
            b'=' => {
                let n = self.int()?;
                let b = self.bytes(n.max(0) as usize)?;
                let (format, text) = if b.len() >= 4 {
                    b.split_at(3)
                } else {
                    (b, &b""[..])
                };
                let inner = lua.create_table()?;
                inner.raw_set("format", lua.create_string(format)?)?;
                inner.raw_set(
                    "string",
                    lua.create_string(text.get(1..).unwrap_or_default())?,
                )?;
                Value::Table(one(lua, "verbatim_string", inner)?)
            }
            b'|' => {
                // Attributes are skipped; the reply after them is the value.
                let n = self.int()?;
                for _ in 0..2 * n {
                    self.value(lua)?;
                }
                self.value(lua)?
            }
            _ => return Err(bad()),
        })
    }
}

fn one(lua: &Lua, key: &str, v: impl mlua::IntoLua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.raw_set(key, v)?;
    Ok(t)
}

/// Writes a script's return value as a reply in the client's protocol (`out.resp3`);
/// `script_resp3` is the protocol the script chose (redis.setresp), which decides only how
/// booleans come out.
pub fn write_lua(out: &mut ReplyBuf, v: &Value, script_resp3: bool) {
    write_value(out, v, script_resp3, 0);
}

fn write_value(out: &mut ReplyBuf, v: &Value, script_resp3: bool, depth: usize) {
    if depth > MAX_DEPTH {
        out.error("ERR reached lua stack limit");
        return;
    }
    match v {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Integer(i) => out.int(*i),
        Value::Number(n) => out.int(lua_number_to_int(*n)),
        Value::Boolean(true) => {
            if script_resp3 {
                out.boolean(true)
            } else {
                out.int(1)
            }
        }
        Value::Boolean(false) => {
            if script_resp3 {
                out.boolean(false)
            } else {
                out.null()
            }
        }
        Value::Table(t) => write_table(out, t, script_resp3, depth),
        _ => out.null(),
    }
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

fn raw_string(t: &Table, key: &str) -> Option<mlua::String> {
    match t.raw_get::<Value>(key) {
        Ok(Value::String(s)) => Some(s),
        _ => None,
    }
}

fn write_table(out: &mut ReplyBuf, t: &Table, script_resp3: bool, depth: usize) {
    if let Some(e) = raw_string(t, "err") {
        let text = String::from_utf8_lossy(&e.as_bytes()).into_owned();
        out.error(&text);
        return;
    }
    if let Some(s) = raw_string(t, "ok") {
        let text: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        out.simple(&String::from_utf8_lossy(&text));
        return;
    }
    match t.raw_get::<Value>("double") {
        Ok(Value::Number(d)) => return out.double(d),
        Ok(Value::Integer(i)) => return out.double(i as f64),
        _ => {}
    }
    if let Some(s) = raw_string(t, "big_number") {
        let text: Vec<u8> = s
            .as_bytes()
            .iter()
            .map(|&b| if b == b'\r' || b == b'\n' { b' ' } else { b })
            .collect();
        if out.resp3 {
            out.buf.push(b'(');
            out.buf.extend_from_slice(&text);
            out.buf.extend_from_slice(b"\r\n");
        } else {
            out.bulk(&text);
        }
        return;
    }
    if let Ok(Value::Table(v)) = t.raw_get::<Value>("verbatim_string") {
        if let (Some(format), Some(text)) = (raw_string(&v, "format"), raw_string(&v, "string")) {
            let f = format.as_bytes();
            let mut f3 = String::from_utf8_lossy(&f[..f.len().min(3)]).into_owned();
            while f3.len() < 3 {
                f3.push(' ');
            }
            out.verbatim(&f3, &text.as_bytes());
            return;
        }
    }
    let mark = (out.buf.len(), out.error_offsets.len());
    let walked = if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        out.map(pair_count(&m));
        m.for_each::<Value, Value>(|k, v| {
            write_value(out, &k, script_resp3, depth + 1);
            write_value(out, &v, script_resp3, depth + 1);
            Ok(())
        })
    } else if let Ok(Value::Table(members)) = t.raw_get::<Value>("set") {
        out.set(pair_count(&members));
        members.for_each::<Value, Value>(|m, _| {
            write_value(out, &m, script_resp3, depth + 1);
            Ok(())
        })
    } else {
        return write_array(out, t, script_resp3, depth);
    };
    if let Err(e) = walked {
        // Whatever was written of it goes: the reply is the error alone.
        out.buf.truncate(mark.0);
        out.error_offsets.truncate(mark.1);
        out.error(&format!("ERR {}", crate::vm::lua_text(e)));
    }
}

/// A table as an array, up to its first nil.
fn write_array(out: &mut ReplyBuf, t: &Table, script_resp3: bool, depth: usize) {
    // Items are read one at a time, twice (count, then write), never held together: mlua keeps each live value in a slot of a stack that Lua 5.1 caps
    // at 8000.
    let item = |i: usize| match t.raw_get::<Value>(i) {
        Ok(Value::Nil) | Err(_) => None,
        Ok(v) => Some(v),
    };
    let len = (1..).take_while(|&i| item(i).is_some()).count();
    out.array(len);
    for i in 1..=len {
        if let Some(v) = item(i) {
            write_value(out, &v, script_resp3, depth + 1);
        }
    }
}

/// The number of entries of a map or set table. `for_each` walks with the key Lua gave
/// (mlua's `pairs` walks with the key read back as a `Value`, and a number near zero read
/// back as 0 is not a key of the table).
fn pair_count(t: &Table) -> usize {
    let mut n = 0;
    let _ = t.for_each::<Value, Value>(|_, _| {
        n += 1;
        Ok(())
    });
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(reply: &[u8], client_resp3: bool, script_resp3: bool) -> Vec<u8> {
        let lua = Lua::new();
        let (_, v) = reply_to_lua(&lua, reply).unwrap();
        let mut out = ReplyBuf::new(client_resp3);
        write_lua(&mut out, &v, script_resp3);
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
