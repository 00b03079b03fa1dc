//! The `bit` library Redis loads (Lua BitOp 1.0's API and semantics): 32-bit operations on
//! Lua numbers, results as signed 32-bit numbers.

use mlua::{Lua, Table, Value, Variadic};

/// A number as BitOp normalizes it: rounded to an integer, then its low 32 bits, signed.
pub fn tobit(n: f64) -> i32 {
    if !n.is_finite() {
        return 0;
    }
    let r = n.round_ties_even() % 4_294_967_296.0;
    r as i64 as u32 as i32
}

/// Why an argument was refused, in `luaL_argerror`'s words. The functions return it as a
/// second value and the prelude raises it from Lua, so the message carries the calling
/// line as Lua's own errors do (an error raised from Rust would be a wrapped userdata).
type ArgError = String;

fn arg_error(n: usize, fname: &str, got: &Value) -> ArgError {
    let got = match got {
        Value::Nil => "no value",
        v => v.type_name(),
    };
    format!("bad argument #{n} to '{fname}' (number expected, got {got})")
}

fn number(v: &Value, n: usize, fname: &str) -> Result<i32, ArgError> {
    match v {
        Value::Integer(i) => Ok(tobit(*i as f64)),
        Value::Number(x) => Ok(tobit(*x)),
        Value::String(s) => s
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<f64>().ok())
            .map(tobit)
            .ok_or_else(|| arg_error(n, fname, v)),
        _ => Err(arg_error(n, fname, v)),
    }
}

fn arg(args: &Variadic<Value>, i: usize, fname: &str) -> Result<i32, ArgError> {
    number(args.get(i).unwrap_or(&Value::Nil), i + 1, fname)
}

/// A bit function's Lua results: the number, or nil and the argument error.
fn results(r: Result<i32, ArgError>) -> (Option<i32>, Option<ArgError>) {
    match r {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    }
}

type Fold = fn(i32, i32) -> i32;
type Shift = fn(i32, u32) -> i32;

/// Builds the table of `bit` functions, each returning its result or nil and an argument
/// error (the prelude wraps them to raise it).
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set(
        "tobit",
        lua.create_function(|_, a: Variadic<Value>| Ok(results(arg(&a, 0, "tobit"))))?,
    )?;
    t.set(
        "bnot",
        lua.create_function(|_, a: Variadic<Value>| Ok(results(arg(&a, 0, "bnot").map(|x| !x))))?,
    )?;
    t.set(
        "bswap",
        lua.create_function(|_, a: Variadic<Value>| {
            Ok(results(arg(&a, 0, "bswap").map(i32::swap_bytes)))
        })?,
    )?;
    let folds: [(&'static str, Fold); 3] = [
        ("band", |a, b| a & b),
        ("bor", |a, b| a | b),
        ("bxor", |a, b| a ^ b),
    ];
    for (name, op) in folds {
        t.set(
            name,
            lua.create_function(move |_, a: Variadic<Value>| {
                let fold = || {
                    let mut acc = arg(&a, 0, name)?;
                    for i in 1..a.len() {
                        acc = op(acc, arg(&a, i, name)?);
                    }
                    Ok(acc)
                };
                Ok(results(fold()))
            })?,
        )?;
    }
    let shifts: [(&'static str, Shift); 5] = [
        ("lshift", |x, n| ((x as u32) << n) as i32),
        ("rshift", |x, n| ((x as u32) >> n) as i32),
        ("arshift", |x, n| x >> n),
        ("rol", |x, n| (x as u32).rotate_left(n) as i32),
        ("ror", |x, n| (x as u32).rotate_right(n) as i32),
    ];
    for (name, op) in shifts {
        t.set(
            name,
            lua.create_function(move |_, a: Variadic<Value>| {
                let shifted = || Ok(op(arg(&a, 0, name)?, arg(&a, 1, name)? as u32 & 31));
                Ok(results(shifted()))
            })?,
        )?;
    }
    t.set(
        "tohex",
        lua.create_function(|_, a: Variadic<Value>| {
            let hex = || {
                let x = arg(&a, 0, "tohex")? as u32;
                let n = if a.len() > 1 { arg(&a, 1, "tohex")? } else { 8 };
                let digits = n.unsigned_abs().min(8) as usize;
                let hex = if n < 0 {
                    format!("{x:08X}")
                } else {
                    format!("{x:08x}")
                };
                Ok::<_, ArgError>(hex[8 - digits..].to_string())
            };
            Ok(match hex() {
                Ok(h) => (Some(h), None),
                Err(e) => (None, Some(e)),
            })
        })?,
    )?;
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_like_bitop() {
        assert_eq!(tobit(4_294_967_295.0), -1);
        assert_eq!(tobit(4_294_967_296.0), 0);
        assert_eq!(tobit(-1.0), -1);
        assert_eq!(tobit(2.5), 2);
        assert_eq!(tobit(3.5), 4);
        assert_eq!(tobit(f64::NAN), 0);
    }

    #[test]
    fn operations_from_lua() {
        let lua = Lua::new();
        let raw = library(&lua).unwrap();
        let bit = lua
            .load("local raw = ... local t = {} for k, f in pairs(raw) do t[k] = function(...) local r, e = f(...) if e then error(e, 2) end return r end end return t")
            .call::<Table>(raw)
            .unwrap();
        lua.globals().set("bit", bit).unwrap();
        let r: String = lua
            .load(
                "return table.concat({bit.band(0xff, 0x0f), bit.bor(1, 2, 4), bit.bxor(5, 1), \
                 bit.bnot(0), bit.lshift(1, 31), bit.rshift(-1, 28), bit.arshift(-256, 4), \
                 bit.rol(0x12345678, 8), bit.ror(0x12345678, 8), bit.bswap(0x12345678), \
                 bit.tohex(255), bit.tohex(-1, -4), bit.tohex(0x1234, 2), bit.tobit(2^32 + 5)}, ' ')",
            )
            .eval()
            .unwrap();
        assert_eq!(
            r,
            "15 7 4 -1 -2147483648 15 -16 878082066 2014458966 2018915346 000000ff FFFF 34 5"
        );
    }
}
