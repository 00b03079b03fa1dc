//! What the Rust halves of the C libraries Redis bundles (`cmsgpack`, `struct`) share with
//! Lua 5.1's C API: reading arguments as the `luaL_check*` functions do, the errors a C
//! function raises, the 8000 stack slots a C function may use, and C's conversions of doubles
//! to integers as x86-64 performs them.
//!
//! The call protocol with prelude.lua's wrapper: a library function gets its arguments as a
//! table and their count, because mlua reads a number argument within 2^-52 of zero as the
//! integer 0 while a table slot read as `f64` stays exact. It returns `(true, results, n)`
//! with the results in slots 1..n, or `(false, kind, message, argument)`, which the wrapper
//! raises from Lua so that the message names the calling line and function as the C
//! library's does (an error raised from Rust would reach the script as a wrapped userdata).
//! Results go through a table because mlua holds every value it returns in a slot of its
//! reference stack, which Lua 5.1 also caps at 8000, and it panics past that.

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Lua's name of a value's type (`lua_typename`; mlua's own says "integer" for numbers it
/// reads as integers).
pub fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// LUAI_MAXCSTACK: the stack slots a C function may use; `lua_checkstack` refuses more.
pub const MAX_C_STACK: usize = 8000;

/// How a C library function fails; the prelude raises it.
#[derive(Debug, PartialEq)]
pub enum Raise {
    /// `luaL_argerror(L, arg, message)`: `bad argument #arg to 'name' (message)`, at the
    /// calling line.
    Arg(usize, Vec<u8>),
    /// `luaL_error`: the message at the calling line.
    Error(Vec<u8>),
    /// An error the Lua core raises inside the C function (`table index is nil`) or one that
    /// passed through it (the watchdog's): the message alone.
    Core(Vec<u8>),
}

impl Raise {
    pub fn arg(n: usize, message: impl Into<Vec<u8>>) -> Raise {
        Raise::Arg(n, message.into())
    }

    pub fn error(message: impl Into<Vec<u8>>) -> Raise {
        Raise::Error(message.into())
    }
}

impl From<mlua::Error> for Raise {
    fn from(e: mlua::Error) -> Raise {
        Raise::Core(crate::vm::lua_text(e).into_bytes())
    }
}

pub type CResult<T> = Result<T, Raise>;

/// `luaL_checkstack(L, space, what)` in a C function using `used` slots.
pub fn check_stack(used: usize, space: usize, what: &str) -> CResult<()> {
    if used + space > MAX_C_STACK {
        return Err(Raise::error(format!("stack overflow ({what})")));
    }
    Ok(())
}

/// The values a C function leaves on its stack to return, kept in a Lua table.
pub struct Results {
    table: Table,
    len: usize,
}

/// Above this many results the wrapper unpacks with `unpack(t)` instead of `unpack(t, 1, n)`:
/// the two extra arguments take two of unpack's 8000 slots.
const UNPACK_WITH_BOUNDS: usize = MAX_C_STACK - 3;

impl Results {
    pub fn new(lua: &Lua) -> mlua::Result<Results> {
        Ok(Results {
            table: lua.create_table()?,
            len: 0,
        })
    }

    pub fn push(&mut self, v: Value) -> mlua::Result<()> {
        self.len += 1;
        self.table.raw_set(self.len, v)
    }

    /// Replaces result `i` (from 1).
    pub fn set(&mut self, i: usize, v: Value) -> mlua::Result<()> {
        self.table.raw_set(i, v)
    }

    /// Removes the last result (`lua_pop`).
    pub fn pop(&mut self) -> mlua::Result<()> {
        self.table.raw_set(self.len, Value::Nil)?;
        self.len -= 1;
        Ok(())
    }

    /// The last result, numbers exact.
    pub fn last(&self) -> mlua::Result<Value> {
        exact_get(&self.table, self.len)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The results as the wrapper takes them. Past what `unpack(t, 1, n)` can return, they
    /// move to a table whose array part ends at the last one that is not nil, so that `#t`
    /// counts them all but trailing nils, which `unpack(t)` then leaves out.
    fn into_lua(self, lua: &Lua) -> mlua::Result<(Table, usize)> {
        if self.len <= UNPACK_WITH_BOUNDS {
            return Ok((self.table, self.len));
        }
        let mut last = self.len;
        while last > 0 && self.table.raw_get::<Value>(last)?.is_nil() {
            last -= 1;
        }
        let sized = lua.create_table_with_capacity(last, 0)?;
        for i in 1..=last {
            sized.raw_set(i, exact_get(&self.table, i)?)?;
        }
        Ok((sized, self.len))
    }
}

/// Slot `i` of `t`, a number read as `f64` (mlua's `Value` reads one within 2^-52 of zero
/// as the integer 0).
pub fn exact_get(t: &Table, i: usize) -> mlua::Result<Value> {
    match t.raw_get::<Value>(i)? {
        Value::Integer(_) | Value::Number(_) => Ok(Value::Number(t.raw_get::<f64>(i)?)),
        v => Ok(v),
    }
}

/// A C library function's arguments.
pub struct Args<'a> {
    lua: &'a Lua,
    table: Table,
    len: usize,
}

impl Args<'_> {
    /// How many arguments there are (`lua_gettop` on entry).
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Argument `i` (from 1), numbers exact; nil past the last.
    pub fn get(&self, i: usize) -> CResult<Value> {
        if i > self.len {
            return Ok(Value::Nil);
        }
        Ok(exact_get(&self.table, i)?)
    }

    /// These arguments with one nil more, as a C function sees its stack after pushing a
    /// nil above its arguments (struct.pack's mark).
    pub fn with_nil_pushed(&self) -> Args<'_> {
        Args {
            lua: self.lua,
            table: self.table.clone(),
            len: self.len + 1,
        }
    }

    /// `luaL_typename`.
    fn type_name(&self, i: usize) -> CResult<&'static str> {
        if i > self.len {
            return Ok("no value");
        }
        Ok(type_name(&self.get(i)?))
    }

    /// `luaL_typerror`.
    fn type_error(&self, i: usize, expected: &str) -> Raise {
        match self.type_name(i) {
            Ok(got) => Raise::arg(i, format!("{expected} expected, got {got}")),
            Err(e) => e,
        }
    }

    /// `lua_tonumber`: a number, or a string Lua reads as one.
    fn to_number(&self, v: Value) -> CResult<Option<f64>> {
        to_number(self.lua, v)
    }

    /// `luaL_checknumber`.
    pub fn check_number(&self, i: usize) -> CResult<f64> {
        self.to_number(self.get(i)?)?
            .ok_or_else(|| self.type_error(i, "number"))
    }

    /// `luaL_checkinteger`: the number cast to `ptrdiff_t`.
    pub fn check_integer(&self, i: usize) -> CResult<i64> {
        Ok(double_to_i64(self.check_number(i)?))
    }

    /// `luaL_optinteger`.
    pub fn opt_integer(&self, i: usize, default: i64) -> CResult<i64> {
        match self.get(i)? {
            Value::Nil => Ok(default),
            _ => self.check_integer(i),
        }
    }

    /// `luaL_checklstring`: a string, or a number as Lua writes it (`%.14g`).
    pub fn check_string(&self, i: usize) -> CResult<mlua::String> {
        match self.get(i)? {
            Value::String(s) => Ok(s),
            v @ Value::Number(_) => self
                .lua
                .coerce_string(v)?
                .ok_or_else(|| self.type_error(i, "string")),
            _ => Err(self.type_error(i, "string")),
        }
    }
}

/// `lua_tonumber` of a value: a number, or a string Lua reads as one.
pub fn to_number(lua: &Lua, v: Value) -> CResult<Option<f64>> {
    Ok(match v {
        Value::Number(n) => Some(n),
        v @ Value::String(_) => lua.coerce_number(v)?,
        _ => None,
    })
}

/// 2^63, the first double above the `int64_t` range.
const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;

/// `(int64_t)d` as x86-64 computes it (cvttsd2si): truncated toward zero, and i64::MIN for
/// NaN and values out of range (where Rust's `as` would saturate).
pub fn double_to_i64(d: f64) -> i64 {
    if d.is_nan() || !(-TWO_POW_63..TWO_POW_63).contains(&d) {
        return i64::MIN;
    }
    d as i64
}

/// `(uint64_t)d` as gcc compiles it for x86-64: values below 2^63 (and NaN) through
/// cvttsd2si, others offset by 2^63 first, so 2^64 and above become 0 and negative values
/// wrap around.
pub fn double_to_u64(d: f64) -> u64 {
    if d >= TWO_POW_63 {
        // cvttsd2si of the offset value, its high bit flipped (by the offset taken back, or
        // flipping i64::MIN's, which is how 2^64 and above come out 0).
        (double_to_i64(d - TWO_POW_63) as u64) ^ (1 << 63)
    } else {
        double_to_i64(d) as u64
    }
}

/// A library function for the prelude's wrapper (see the module doc): `f` gets the
/// arguments and returns its results or what to raise.
pub fn function<F>(lua: &Lua, f: F) -> mlua::Result<Function>
where
    F: Fn(&Lua, &Args) -> CResult<Results> + 'static,
{
    lua.create_function(move |lua, (table, len): (Table, usize)| {
        let args = Args { lua, table, len };
        let outcome = f(lua, &args).and_then(|r| Ok(r.into_lua(lua)?));
        let mut out = MultiValue::new();
        match outcome {
            Ok((results, n)) => {
                out.push_back(Value::Boolean(true));
                out.push_back(Value::Table(results));
                out.push_back(Value::Integer(n as i64));
            }
            Err(raise) => {
                let (kind, message, arg) = match raise {
                    Raise::Arg(n, m) => ("arg", m, Some(n)),
                    Raise::Error(m) => ("error", m, None),
                    Raise::Core(m) => ("core", m, None),
                };
                out.push_back(Value::Boolean(false));
                out.push_back(Value::String(lua.create_string(kind)?));
                out.push_back(Value::String(lua.create_string(message)?));
                out.push_back(match arg {
                    Some(n) => Value::Integer(n as i64),
                    None => Value::Nil,
                });
            }
        }
        Ok(out)
    })
}

/// One result.
pub fn single(lua: &Lua, v: Value) -> CResult<Results> {
    let mut r = Results::new(lua)?;
    r.push(v)?;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_convert_as_on_x86_64() {
        assert_eq!(double_to_i64(-1.9), -1);
        assert_eq!(double_to_i64(1e30), i64::MIN);
        assert_eq!(double_to_i64(-1e30), i64::MIN);
        assert_eq!(double_to_i64(-TWO_POW_63), i64::MIN);
        assert_eq!(double_to_i64(f64::NAN), i64::MIN);
        assert_eq!(double_to_u64(-1.0), u64::MAX);
        assert_eq!(double_to_u64(TWO_POW_63), 1 << 63);
        assert_eq!(double_to_u64(TWO_POW_63 * 1.5), 0xc000_0000_0000_0000);
        assert_eq!(double_to_u64(TWO_POW_63 * 2.0), 0);
        assert_eq!(double_to_u64(f64::INFINITY), 0);
        assert_eq!(double_to_u64(f64::NAN), 1 << 63);
    }
}
