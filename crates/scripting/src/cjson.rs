//! The `cjson` library Redis loads: lua-cjson 2.1.0 as Redis 7.0 vendors it. JSON text to
//! Lua values and back, with lua-cjson's configuration functions, limits, number formats
//! and error texts. Each library table (the global one, and each `cjson.new()`) has its own
//! configuration.
//!
//! prelude.lua wraps every function. Arguments arrive as their count and a table of them:
//! mlua hands a Lua number to Rust as an integer when it is within 2^-52 of one, which
//! turns -0 and magnitudes below 2^-52 into 0, while a table slot read as a double gives the
//! number exactly. Results go back as `true, results...`, or as `false, message` (raised at
//! the caller's line, as lua-cjson's `luaL_error` is) or `false, message, argument number`
//! (worded as `luaL_argerror` words it): an error raised from Rust would reach the script as
//! an opaque callback error.
//!
//! Neither direction recurses (worker threads have small stacks, and a raised depth limit
//! lets nesting go thousands deep): encoding walks nested tables with an explicit stack;
//! decoding checks the whole text first, then builds the tables in one go (`build`).

use std::cell::Cell;
use std::ffi::{c_char, c_int};
use std::rc::Rc;

use mlua::{ffi, Function, IntoLua, LightUserData, Lua, MultiValue, Table, Value};

use crate::capi::type_name;
use crate::vm::lua_text;
use crate::watchdog;

/// Lua 5.1's `LUAI_MAXCSTACK`: the stack slots a C function may use. lua-cjson keeps the
/// tables it is in on the Lua stack and asks for room as it nests (`lua_checkstack`), so
/// with a raised depth limit nesting still fails where the slots run out: 7998 arrays or
/// 4000 objects deep when encoding, 7999 and 4000 when decoding. Counted here to fail at
/// the same depth.
const MAX_C_STACK: i64 = 8000;

const BOOL_OPTIONS: &[&str] = &["off", "on"];
const INVALID_NUMBER_OPTIONS: &[&str] = &["off", "on", "null"];

/// One library table's settings, lua-cjson's defaults as Redis builds it.
#[derive(Clone, Copy)]
struct Config {
    sparse_convert: bool,
    sparse_ratio: i32,
    sparse_safe: i32,
    encode_max_depth: i32,
    decode_max_depth: i32,
    /// 0: NaN and Inf are errors, 1: encoded as `nan`, `inf`, 2: as `null`.
    encode_invalid_numbers: u8,
    decode_invalid_numbers: bool,
    /// Only reported back: there is no buffer to keep between calls here.
    encode_keep_buffer: bool,
    encode_number_precision: i32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: false,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: true,
            encode_keep_buffer: true,
            encode_number_precision: 14,
        }
    }
}

/// Why a call failed.
enum Raised {
    /// Raised at the caller's line (`luaL_error`).
    Message(String),
    /// An argument error (`luaL_argerror`): its number and the text in parentheses.
    Arg(usize, Vec<u8>),
    /// An error of the Lua state itself (memory), passed on as it is.
    Lua(mlua::Error),
}

impl From<mlua::Error> for Raised {
    fn from(e: mlua::Error) -> Self {
        Raised::Lua(e)
    }
}

fn arg_error(n: usize, text: impl Into<Vec<u8>>) -> Raised {
    Raised::Arg(n, text.into())
}

/// The value at `t[key]`, numbers exact (see the module comment).
fn slot(t: &Table, key: impl IntoLua + Clone) -> mlua::Result<Value> {
    match t.raw_get(key.clone())? {
        Value::Integer(0) => Ok(Value::Number(t.raw_get::<f64>(key)?)),
        v => Ok(v),
    }
}

/// A call's arguments as the prelude passes them: their count, and a list of them.
struct Args {
    count: usize,
    packed: Table,
}

impl Args {
    /// Argument `i` (from 1); nil past the last.
    fn get(&self, i: usize) -> mlua::Result<Value> {
        if i > self.count {
            return Ok(Value::Nil);
        }
        slot(&self.packed, i)
    }

    /// lua-cjson's check on configuration functions: at most `max` arguments.
    fn at_most(&self, max: usize) -> Result<(), Raised> {
        if self.count > max {
            return Err(arg_error(max + 1, "found too many arguments"));
        }
        Ok(())
    }
}

fn number_of(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(i) => Some(*i as f64),
        Value::Number(n) => Some(*n),
        _ => None,
    }
}

/// Appends `x` as C's `%.<precision>g` prints it (lua-cjson's and Lua's number format).
fn format_g(x: f64, precision: i32, out: &mut Vec<u8>) {
    // An integer of at most `precision` digits prints as itself (-0 keeps its sign): no
    // printf, the slowest part of encoding numbers.
    if x.fract() == 0.0 && x.abs() < 10f64.powi(precision) && !(x == 0.0 && x.is_sign_negative()) {
        damselfly_protocol::number::push_i64(out, x as i64);
        return;
    }
    let mut buf = [0u8; 64];
    // SAFETY: the buffer is large enough for any %g rendering of at most 14 significant
    // digits, its length is passed, and snprintf NUL-terminates within it.
    let n = unsafe {
        libc::snprintf(
            buf.as_mut_ptr().cast(),
            buf.len(),
            c"%.*g".as_ptr(),
            precision as libc::c_int,
            x,
        )
    };
    let n = usize::try_from(n).unwrap_or(0).min(buf.len() - 1);
    out.extend_from_slice(&buf[..n]);
}

/// Bytes ending in a NUL, as C's string functions read them: lua-cjson parses its input as
/// a C string (a NUL byte ends it) with `strtod` for numbers.
struct CText(Vec<u8>);

impl CText {
    fn new(bytes: &[u8]) -> CText {
        let mut text = Vec::with_capacity(bytes.len() + 1);
        text.extend_from_slice(bytes);
        text.push(0);
        CText(text)
    }

    /// The byte at `i`; the terminating NUL past the end.
    fn at(&self, i: usize) -> u8 {
        self.0.get(i).copied().unwrap_or(0)
    }

    /// C's `strtod` from `at`: the number and how many bytes it read (0: none). It is what
    /// lua-cjson reads numbers with, so hex, `inf`, `nan(...)` and leading zeros parse as
    /// glibc parses them.
    fn strtod(&self, at: usize) -> (f64, usize) {
        if at >= self.0.len() {
            return (0.0, 0);
        }
        let start = self.0[at..].as_ptr().cast::<c_char>();
        let mut end = start.cast_mut();
        // SAFETY: `start` points into a buffer whose last byte is a NUL, so strtod reads
        // within it, and it sets `end` to a position in the same buffer.
        let x = unsafe { libc::strtod(start, &mut end) };
        (x, (end as usize).saturating_sub(start as usize))
    }
}

/// Lua 5.1's conversion of a string to a number (`luaO_str2d`): strtod, then only
/// whitespace may follow (up to a NUL, where C stops reading).
fn lua_str2number(s: &[u8]) -> Option<f64> {
    let text = CText::new(s);
    let (x, used) = text.strtod(0);
    if used == 0 {
        return None;
    }
    let rest = &text.0[used..];
    let rest = &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())];
    rest.iter()
        .all(|b| matches!(b, b' ' | b'\t' | b'\n' | 0x0b | 0x0c | b'\r'))
        .then_some(x)
}

/// `(lua_Integer)d` as x86-64 computes it: NaN and out of range give the smallest integer.
fn c_integer(d: f64) -> i64 {
    const LIMIT: f64 = 9_223_372_036_854_775_808.0; // 2^63
    if (-LIMIT..LIMIT).contains(&d) {
        d as i64
    } else {
        i64::MIN
    }
}

/// `luaL_checklstring`: a string, or a number as Lua prints it.
fn check_string(v: &Value, n: usize) -> Result<Vec<u8>, Raised> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        v => match number_of(v) {
            Some(x) => {
                let mut text = Vec::new();
                format_g(x, 14, &mut text);
                Ok(text)
            }
            None => Err(arg_error(
                n,
                format!("string expected, got {}", type_name(v)),
            )),
        },
    }
}

/// `luaL_checkinteger`, then the C `int` lua-cjson stores it in.
fn check_int(v: &Value, n: usize) -> Result<i32, Raised> {
    let x = match v {
        Value::String(s) => lua_str2number(&s.as_bytes()),
        v => number_of(v),
    };
    match x {
        Some(x) => Ok(c_integer(x) as i32),
        None => Err(arg_error(
            n,
            format!("number expected, got {}", type_name(v)),
        )),
    }
}

/// An integer setting: argument `n`, if given, must lie in `min..=max`. Returns the
/// setting. (lua-cjson names argument 1 in the range error whichever argument it was.)
fn integer_option(args: &Args, n: usize, setting: i32, min: i32, max: i32) -> Result<i32, Raised> {
    let v = args.get(n)?;
    if v == Value::Nil {
        return Ok(setting);
    }
    let x = check_int(&v, n)?;
    if x < min || x > max {
        return Err(arg_error(
            1,
            format!("expected integer between {min} and {max}"),
        ));
    }
    Ok(x)
}

/// An enumerated setting: argument `n`, if given, is a boolean (off or on) or one of
/// `options` by name (`luaL_checkoption`). Returns the setting's index.
fn enum_option(args: &Args, n: usize, setting: u8, options: &[&str]) -> Result<u8, Raised> {
    let v = args.get(n)?;
    match v {
        Value::Nil => Ok(setting),
        Value::Boolean(b) => Ok(u8::from(b)),
        v => {
            let name = check_string(&v, n)?;
            // C compares up to the first NUL.
            let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
            match options.iter().position(|o| o.as_bytes() == name) {
                Some(i) => Ok(i as u8),
                None => {
                    let mut text = b"invalid option '".to_vec();
                    text.extend_from_slice(name);
                    text.push(b'\'');
                    Err(Raised::Arg(n, text))
                }
            }
        }
    }
}

/// What a configuration function returns for an enumerated setting: off and on as
/// booleans, other settings by name.
fn option_value(lua: &Lua, setting: u8, options: &[&str]) -> mlua::Result<Value> {
    match setting {
        0 | 1 => Ok(Value::Boolean(setting == 1)),
        _ => Ok(Value::String(lua.create_string(
            options.get(usize::from(setting)).copied().unwrap_or(""),
        )?)),
    }
}

/// A library function under the prelude's calling convention.
fn function(
    lua: &Lua,
    body: impl Fn(&Lua, &Args) -> Result<Vec<Value>, Raised> + 'static,
) -> mlua::Result<Function> {
    lua.create_function(move |lua, (count, packed): (usize, Table)| {
        let args = Args { count, packed };
        let mut out = Vec::with_capacity(4);
        match body(lua, &args) {
            Ok(values) => {
                out.push(Value::Boolean(true));
                out.extend(values);
            }
            // The watchdog stopping the run raised its error in the Lua helper: its text goes
            // back for the prelude to raise as it is, as the run's error.
            Err(Raised::Lua(e)) if watchdog::stopping() => {
                out.push(Value::Boolean(false));
                out.push(Value::String(lua.create_string(lua_text(e))?));
            }
            Err(Raised::Lua(e)) => return Err(e),
            Err(Raised::Message(m)) => {
                out.push(Value::Boolean(false));
                out.push(Value::String(lua.create_string(m)?));
            }
            Err(Raised::Arg(n, m)) => {
                out.push(Value::Boolean(false));
                out.push(Value::String(lua.create_string(m)?));
                out.push(Value::Integer(n as i64));
            }
        }
        Ok(MultiValue::from_vec(out))
    })
}

/// How a table encodes, worked out in Lua, where keys keep their exact values (mlua would
/// hand Rust a key like 1e-20 as 0, and could not iterate on from it). With `keys` false,
/// lua-cjson's array test: `nil, largest key, key count` when every key is an integer from
/// 1, its quirks kept (0 counts as "not a number", the largest key as a C `int` becomes
/// `INT_MIN` from 2^31 up). Otherwise the keys in `next` order and their count (Rust reads
/// the list with `slot`).
const SHAPE: &str = "local next, type, floor = next, type, math.floor
return function(t, keys)
  if not keys then
    local max, items = 0, 0
    for k in next, t do
      if type(k) ~= 'number' or k == 0 or k < 1 or floor(k) ~= k then
        keys = true
        break
      end
      items = items + 1
      if k > max then
        max = k < 2147483648 and k or -2147483648
      end
    end
    if not keys then
      return nil, max, items
    end
  end
  local list, n = {}, 0
  for k in next, t do
    n = n + 1
    list[n] = k
  end
  return list, n
end";

/// Builds a `cjson` library table with its own default configuration (the raw functions:
/// the prelude wraps them).
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let config = Rc::new(Cell::new(Config::default()));
    let shape: Function = lua.load(SHAPE).set_name("=cjson").call(())?;
    let t = lua.create_table()?;

    let c = config.clone();
    t.set(
        "encode",
        function(lua, move |lua, args| {
            if args.count != 1 {
                return Err(arg_error(1, "expected 1 argument"));
            }
            let json = encode(lua, &c.get(), &shape, args.get(1)?)?;
            Ok(vec![Value::String(lua.create_string(json)?)])
        })?,
    )?;

    let c = config.clone();
    t.set(
        "decode",
        function(lua, move |lua, args| {
            if args.count != 1 {
                return Err(arg_error(1, "expected 1 argument"));
            }
            let text = check_string(&args.get(1)?, 1)?;
            Ok(vec![decode(lua, &c.get(), &text)?])
        })?,
    )?;

    let c = config.clone();
    t.set(
        "encode_sparse_array",
        function(lua, move |lua, args| {
            args.at_most(3)?;
            // Each setting is kept as soon as it is read, before a later argument can
            // fail, as lua-cjson does.
            let mut cfg = c.get();
            cfg.sparse_convert =
                enum_option(args, 1, u8::from(cfg.sparse_convert), BOOL_OPTIONS)? == 1;
            c.set(cfg);
            cfg.sparse_ratio = integer_option(args, 2, cfg.sparse_ratio, 0, i32::MAX)?;
            c.set(cfg);
            cfg.sparse_safe = integer_option(args, 3, cfg.sparse_safe, 0, i32::MAX)?;
            c.set(cfg);
            Ok(vec![
                option_value(lua, u8::from(cfg.sparse_convert), BOOL_OPTIONS)?,
                Value::Integer(cfg.sparse_ratio.into()),
                Value::Integer(cfg.sparse_safe.into()),
            ])
        })?,
    )?;

    type IntField = fn(&mut Config) -> &mut i32;
    let integer_settings: [(&str, IntField, i32, i32); 3] = [
        ("encode_max_depth", |c| &mut c.encode_max_depth, 1, i32::MAX),
        ("decode_max_depth", |c| &mut c.decode_max_depth, 1, i32::MAX),
        (
            "encode_number_precision",
            |c| &mut c.encode_number_precision,
            1,
            14,
        ),
    ];
    for (name, field, min, max) in integer_settings {
        let c = config.clone();
        t.set(
            name,
            function(lua, move |_, args| {
                args.at_most(1)?;
                let mut cfg = c.get();
                let value = integer_option(args, 1, *field(&mut cfg), min, max)?;
                *field(&mut cfg) = value;
                c.set(cfg);
                Ok(vec![Value::Integer(value.into())])
            })?,
        )?;
    }

    type GetEnum = fn(&Config) -> u8;
    type SetEnum = fn(&mut Config, u8);
    let enum_settings: [(&str, &'static [&'static str], GetEnum, SetEnum); 3] = [
        (
            "encode_keep_buffer",
            BOOL_OPTIONS,
            |c| u8::from(c.encode_keep_buffer),
            |c, v| c.encode_keep_buffer = v == 1,
        ),
        (
            "encode_invalid_numbers",
            INVALID_NUMBER_OPTIONS,
            |c| c.encode_invalid_numbers,
            |c, v| c.encode_invalid_numbers = v,
        ),
        (
            "decode_invalid_numbers",
            BOOL_OPTIONS,
            |c| u8::from(c.decode_invalid_numbers),
            |c, v| c.decode_invalid_numbers = v == 1,
        ),
    ];
    for (name, options, get, set) in enum_settings {
        let c = config.clone();
        t.set(
            name,
            function(lua, move |lua, args| {
                args.at_most(1)?;
                let mut cfg = c.get();
                let value = enum_option(args, 1, get(&cfg), options)?;
                set(&mut cfg, value);
                c.set(cfg);
                Ok(vec![option_value(lua, value, options)?])
            })?,
        )?;
    }

    t.set(
        "new",
        function(lua, |lua, _| Ok(vec![Value::Table(library(lua)?)]))?,
    )?;
    t.set(
        "null",
        Value::LightUserData(LightUserData(std::ptr::null_mut())),
    )?;
    t.set("_NAME", "cjson")?;
    t.set("_VERSION", "2.1.0")?;
    Ok(t)
}

fn null() -> Value {
    Value::LightUserData(LightUserData(std::ptr::null_mut()))
}

fn cannot(what: &str, reason: &str) -> Raised {
    Raised::Message(format!("Cannot serialise {what}: {reason}"))
}

/// A string as lua-cjson writes it: `"`, `\` and `/` escaped, the control characters and
/// DEL as escapes, other bytes (UTF-8 or not) as they are.
fn append_string(s: &[u8], out: &mut Vec<u8>) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.reserve(s.len() + 2);
    out.push(b'"');
    for &b in s {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'/' => out.extend_from_slice(b"\\/"),
            0x08 => out.extend_from_slice(b"\\b"),
            b'\t' => out.extend_from_slice(b"\\t"),
            b'\n' => out.extend_from_slice(b"\\n"),
            0x0c => out.extend_from_slice(b"\\f"),
            b'\r' => out.extend_from_slice(b"\\r"),
            0..=0x1f | 0x7f => {
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            _ => out.push(b),
        }
    }
    out.push(b'"');
}

fn append_number(x: f64, cfg: &Config, out: &mut Vec<u8>) -> Result<(), Raised> {
    match cfg.encode_invalid_numbers {
        0 if !x.is_finite() => return Err(cannot("number", "must not be NaN or Inf")),
        // Written out: printf could print NaN as "-nan".
        1 if x.is_nan() => {
            out.extend_from_slice(b"nan");
            return Ok(());
        }
        2 if !x.is_finite() => {
            out.extend_from_slice(b"null");
            return Ok(());
        }
        _ => {}
    }
    format_g(x, cfg.encode_number_precision, out);
    Ok(())
}

/// Any value but a table.
fn append_scalar(v: &Value, cfg: &Config, out: &mut Vec<u8>) -> Result<(), Raised> {
    match v {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::Boolean(true) => out.extend_from_slice(b"true"),
        Value::Boolean(false) => out.extend_from_slice(b"false"),
        Value::String(s) => append_string(&s.as_bytes(), out),
        Value::LightUserData(p) if p.0.is_null() => out.extend_from_slice(b"null"),
        v => match number_of(v) {
            Some(x) => append_number(x, cfg, out)?,
            None => return Err(cannot(type_name(v), "type not supported")),
        },
    }
    Ok(())
}

/// An object key and its colon: strings as strings, numbers as strings of their JSON.
fn append_key(key: &Value, cfg: &Config, out: &mut Vec<u8>) -> Result<(), Raised> {
    if let Value::String(s) = key {
        append_string(&s.as_bytes(), out);
        out.push(b':');
        return Ok(());
    }
    let Some(x) = number_of(key) else {
        return Err(cannot(
            type_name(key),
            "table key must be a number or string",
        ));
    };
    out.push(b'"');
    append_number(x, cfg, out)?;
    out.extend_from_slice(b"\":");
    Ok(())
}

/// Whether lua-cjson encodes a table with this largest key and key count (from `SHAPE`) as
/// an array: not when it is excessively sparse (an error, unless such tables are encoded as
/// objects), nor when the largest key is not positive.
fn is_array(max: i32, items: i32, cfg: &Config) -> Result<bool, Raised> {
    if cfg.sparse_ratio > 0 && max > items.wrapping_mul(cfg.sparse_ratio) && max > cfg.sparse_safe {
        if !cfg.sparse_convert {
            return Err(cannot("table", "excessively sparse array"));
        }
        return Ok(false);
    }
    Ok(max > 0)
}

/// The outer tables of an explicit stack (with what goes with them): the first `NEAR` as
/// mlua references, deeper ones in a Lua table, since mlua has room for about 8000
/// references at a time and nesting can go deeper.
struct Held {
    near: Vec<Value>,
    far: Option<Table>,
    far_len: i64,
}

const NEAR: usize = 128;

impl Held {
    fn new() -> Held {
        Held {
            near: Vec::new(),
            far: None,
            far_len: 0,
        }
    }

    fn push(&mut self, lua: &Lua, v: Value) -> mlua::Result<()> {
        if self.near.len() < NEAR {
            self.near.push(v);
            return Ok(());
        }
        let far = match &self.far {
            Some(far) => far,
            None => self.far.insert(lua.create_table()?),
        };
        self.far_len += 1;
        far.raw_set(self.far_len, v)
    }

    /// The last value pushed (nil when none is left).
    fn pop(&mut self) -> mlua::Result<Value> {
        if let (Some(far), true) = (&self.far, self.far_len > 0) {
            let v = far.raw_get(self.far_len)?;
            self.far_len -= 1;
            return Ok(v);
        }
        Ok(self.near.pop().unwrap_or(Value::Nil))
    }
}

/// A table being encoded: its array length or key count, and the position to encode next
/// (from 1).
struct Frame {
    len: i64,
    next: i64,
}

/// The innermost table being encoded, with its key list when it is encoded as an object.
struct Inner {
    table: Table,
    keys: Option<Table>,
}

/// The stack slots lua-cjson holds while encoding a table's values: the value for an
/// array, the key and value for an object.
fn encode_slots(object: bool) -> i64 {
    if object {
        2
    } else {
        1
    }
}

fn encode(lua: &Lua, cfg: &Config, shape: &Function, value: Value) -> Result<Vec<u8>, Raised> {
    let mut out = Vec::new();
    let mut frames: Vec<Frame> = Vec::new();
    // The innermost table being encoded; the outer ones and their key lists are held.
    let mut current: Option<Inner> = None;
    let mut outer = Held::new();
    // lua-cjson's stack slots in use: the argument, then what each open table holds.
    let mut slots: i64 = 1;
    let mut next_value = Some(value);
    loop {
        match next_value.take() {
            Some(Value::Table(table)) => {
                let depth = frames.len() as i64 + 1;
                if depth > i64::from(cfg.encode_max_depth) || slots + 3 > MAX_C_STACK {
                    return Err(Raised::Message(format!(
                        "Cannot serialise, excessive nesting ({depth})"
                    )));
                }
                let (mut keys, mut len, items): (Option<Table>, i64, Option<i64>) =
                    shape.call((&table, false))?;
                if keys.is_none() && !is_array(len as i32, items.unwrap_or(0) as i32, cfg)? {
                    (keys, len) = shape.call((&table, true))?;
                }
                out.push(if keys.is_some() { b'{' } else { b'[' });
                slots += encode_slots(keys.is_some());
                if let Some(parent) = current.take() {
                    outer.push(lua, Value::Table(parent.table))?;
                    outer.push(lua, parent.keys.map_or(Value::Nil, Value::Table))?;
                }
                frames.push(Frame { len, next: 1 });
                current = Some(Inner { table, keys });
            }
            Some(v) => append_scalar(&v, cfg, &mut out)?,
            None => {}
        }
        let (Some(frame), Some(inner)) = (frames.last_mut(), current.as_ref()) else {
            return Ok(out);
        };
        if frame.next <= frame.len {
            let i = frame.next;
            frame.next += 1;
            if i > 1 {
                out.push(b',');
            }
            next_value = Some(match &inner.keys {
                None => slot(&inner.table, i)?,
                Some(keys) => {
                    let key = slot(keys, i)?;
                    append_key(&key, cfg, &mut out)?;
                    slot(&inner.table, key)?
                }
            });
            continue;
        }
        // The innermost table is done: back to its parent.
        let object = inner.keys.is_some();
        out.push(if object { b'}' } else { b']' });
        slots -= encode_slots(object);
        frames.pop();
        current = if frames.is_empty() {
            None
        } else {
            let keys = lua.unpack(outer.pop()?)?;
            Some(Inner {
                table: lua.unpack(outer.pop()?)?,
                keys,
            })
        };
    }
}

/// A JSON token, as lua-cjson's tokenizer sees it.
#[derive(Clone, Copy)]
enum Token {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    /// Where its bytes are in the parser's `strings`.
    Str(usize, usize),
    Number(f64),
    Boolean(bool),
    Null,
    Colon,
    Comma,
    End,
    /// What was wrong, where a token was expected.
    Error(&'static str),
}

impl Token {
    /// How a parse error names it.
    fn name(self) -> &'static str {
        match self {
            Token::ObjBegin => "T_OBJ_BEGIN",
            Token::ObjEnd => "T_OBJ_END",
            Token::ArrBegin => "T_ARR_BEGIN",
            Token::ArrEnd => "T_ARR_END",
            Token::Str(..) => "T_STRING",
            Token::Number(_) => "T_NUMBER",
            Token::Boolean(_) => "T_BOOLEAN",
            Token::Null => "T_NULL",
            Token::Colon => "T_COLON",
            Token::Comma => "T_COMMA",
            Token::End => "T_END",
            Token::Error(why) => why,
        }
    }
}

/// What parsing found, in order; built into Lua values in one go afterwards.
#[derive(Clone, Copy)]
enum Event {
    /// An array (false) or object (true) opens.
    Open(bool),
    /// The innermost array or object closes.
    Close,
    /// An object key, at these positions in `strings`.
    Key(usize, usize),
    Str(usize, usize),
    Number(f64),
    Boolean(bool),
    Null,
}

/// The stack slots lua-cjson holds while decoding an array's or object's values: the
/// table, and for an object the key.
fn decode_slots(object: bool) -> i64 {
    if object {
        2
    } else {
        1
    }
}

struct Parser<'a> {
    text: CText,
    pos: usize,
    cfg: &'a Config,
    /// Open arrays and objects, counting those being opened.
    depth: i64,
    /// lua-cjson's stack slots in use: the argument, then what each open table holds.
    slots: i64,
    /// The strings decoded so far, end to end.
    strings: Vec<u8>,
}

impl Parser<'_> {
    /// The next token and its position (an error's: where it was found).
    fn next_token(&mut self) -> (Token, usize) {
        while matches!(self.text.at(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let start = self.pos;
        let single = match self.text.at(start) {
            b'{' => Some(Token::ObjBegin),
            b'}' => Some(Token::ObjEnd),
            b'[' => Some(Token::ArrBegin),
            b']' => Some(Token::ArrEnd),
            b',' => Some(Token::Comma),
            b':' => Some(Token::Colon),
            _ => None,
        };
        if let Some(token) = single {
            self.pos += 1;
            return (token, start);
        }
        let token = match self.text.at(start) {
            0 => Token::End,
            b'"' => self.string_token(),
            b'-' | b'0'..=b'9' => {
                if !self.cfg.decode_invalid_numbers && self.invalid_number() {
                    Token::Error("invalid number")
                } else {
                    self.number_token()
                }
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => self.word_token(),
            _ => Token::Error("invalid token"),
        };
        match token {
            Token::Error(_) => (token, self.pos),
            _ => (token, start),
        }
    }

    /// `true`, `false`, `null`, or with invalid numbers allowed `inf`, `nan` and `+...`.
    fn word_token(&mut self) -> Token {
        let rest = &self.text.0[self.pos..];
        let (token, len) = if rest.starts_with(b"true") {
            (Token::Boolean(true), 4)
        } else if rest.starts_with(b"false") {
            (Token::Boolean(false), 5)
        } else if rest.starts_with(b"null") {
            (Token::Null, 4)
        } else if self.cfg.decode_invalid_numbers && self.invalid_number() {
            return self.number_token();
        } else {
            return Token::Error("invalid token");
        };
        self.pos += len;
        token
    }

    /// lua-cjson's test for what strtod reads but JSON forbids: a leading `+`, hex, leading
    /// zeros, `inf` and `nan`.
    fn invalid_number(&self) -> bool {
        let mut p = self.pos;
        match self.text.at(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let c = self.text.at(p);
        if c == b'0' {
            let next = self.text.at(p + 1);
            return next | 0x20 == b'x' || next.is_ascii_digit();
        }
        // C compares a signed char: bytes from 0x80 count as below '9'.
        if c <= b'9' || c >= 0x80 {
            return false;
        }
        let word = |w: &[u8]| {
            self.text
                .0
                .get(p..p + 3)
                .is_some_and(|s| s.eq_ignore_ascii_case(w))
        };
        word(b"inf") || word(b"nan")
    }

    fn number_token(&mut self) -> Token {
        let (x, used) = self.text.strtod(self.pos);
        if used == 0 {
            return Token::Error("invalid number");
        }
        self.pos += used;
        Token::Number(x)
    }

    /// A string from its opening quote, added to `self.strings`. Control characters and
    /// invalid UTF-8 pass, as in lua-cjson; a NUL ends the text.
    fn string_token(&mut self) -> Token {
        self.pos += 1;
        let start = self.strings.len();
        loop {
            match self.text.at(self.pos) {
                b'"' => {
                    self.pos += 1;
                    return Token::Str(start, self.strings.len());
                }
                0 => return Token::Error("unexpected end of string"),
                b'\\' => {
                    let c = match self.text.at(self.pos + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => 0x08,
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => 0x0c,
                        b'r' => b'\r',
                        b'u' => {
                            if self.unicode_escape() {
                                continue;
                            }
                            return Token::Error("invalid unicode escape code");
                        }
                        _ => return Token::Error("invalid escape code"),
                    };
                    self.strings.push(c);
                    self.pos += 2;
                }
                c => {
                    self.strings.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        (at..at + 4).try_fold(0, |v, i| {
            char::from(self.text.at(i)).to_digit(16).map(|d| v << 4 | d)
        })
    }

    /// `\uXXXX` at `self.pos` (a UTF-16 surrogate pair as two escapes) as UTF-8; false if
    /// invalid.
    fn unicode_escape(&mut self) -> bool {
        let Some(mut code) = self.hex4(self.pos + 2) else {
            return false;
        };
        let mut len = 6;
        if code & 0xf800 == 0xd800 {
            // A high surrogate must come first, and an escaped low one after it.
            if code & 0x400 != 0
                || self.text.at(self.pos + 6) != b'\\'
                || self.text.at(self.pos + 7) != b'u'
            {
                return false;
            }
            let Some(low) = self.hex4(self.pos + 8) else {
                return false;
            };
            if low & 0xfc00 != 0xdc00 {
                return false;
            }
            code = (((code & 0x3ff) << 10) | (low & 0x3ff)) + 0x10000;
            len = 12;
        }
        let Some(c) = char::from_u32(code) else {
            return false;
        };
        let mut utf8 = [0u8; 4];
        self.strings
            .extend_from_slice(c.encode_utf8(&mut utf8).as_bytes());
        self.pos += len;
        true
    }

    fn error(&self, expected: &str, (token, at): (Token, usize)) -> Raised {
        Raised::Message(format!(
            "Expected {expected} but found {} at character {}",
            token.name(),
            at + 1
        ))
    }

    /// Enters an array or object, which needs `slots` stack slots in lua-cjson.
    fn descend(&mut self, slots: i64) -> Result<(), Raised> {
        self.depth += 1;
        if self.depth > i64::from(self.cfg.decode_max_depth) || self.slots + slots > MAX_C_STACK {
            return Err(Raised::Message(format!(
                "Found too many nested data structures ({}) at character {}",
                self.depth, self.pos
            )));
        }
        Ok(())
    }

    /// An object's key (the token given) and the colon after it.
    fn object_key(&mut self, token: (Token, usize)) -> Result<Event, Raised> {
        let Token::Str(start, end) = token.0 else {
            return Err(self.error("object key string", token));
        };
        let colon = self.next_token();
        if !matches!(colon.0, Token::Colon) {
            return Err(self.error("colon", colon));
        }
        Ok(Event::Key(start, end))
    }

    /// The whole text, checked as lua-cjson checks it, as events.
    fn parse(&mut self) -> Result<Vec<Event>, Raised> {
        let mut events = Vec::new();
        // Per open array or object, whether it is an object.
        let mut open: Vec<bool> = Vec::new();
        let mut token = self.next_token();
        loop {
            // `token` starts a value.
            match token.0 {
                Token::Str(start, end) => events.push(Event::Str(start, end)),
                Token::Number(x) => events.push(Event::Number(x)),
                Token::Boolean(b) => events.push(Event::Boolean(b)),
                Token::Null => events.push(Event::Null),
                Token::ObjBegin | Token::ArrBegin => {
                    let object = matches!(token.0, Token::ObjBegin);
                    self.descend(if object { 3 } else { 2 })?;
                    events.push(Event::Open(object));
                    token = self.next_token();
                    let empty = if object {
                        matches!(token.0, Token::ObjEnd)
                    } else {
                        matches!(token.0, Token::ArrEnd)
                    };
                    if empty {
                        self.depth -= 1;
                        events.push(Event::Close);
                    } else {
                        if object {
                            events.push(self.object_key(token)?);
                            token = self.next_token();
                        }
                        self.slots += decode_slots(object);
                        open.push(object);
                        continue;
                    }
                }
                _ => return Err(self.error("value", token)),
            }
            // After a value: the next one, or the end of arrays and objects.
            loop {
                let Some(&object) = open.last() else {
                    let end = self.next_token();
                    if !matches!(end.0, Token::End) {
                        return Err(self.error("the end", end));
                    }
                    return Ok(events);
                };
                let after = self.next_token();
                match (after.0, object) {
                    (Token::Comma, _) => {
                        token = self.next_token();
                        if object {
                            events.push(self.object_key(token)?);
                            token = self.next_token();
                        }
                        break;
                    }
                    (Token::ArrEnd, false) | (Token::ObjEnd, true) => {
                        events.push(Event::Close);
                        self.slots -= decode_slots(object);
                        self.depth -= 1;
                        open.pop();
                    }
                    (_, false) => return Err(self.error("comma or array end", after)),
                    (_, true) => return Err(self.error("comma or object end", after)),
                }
            }
        }
    }
}

fn decode(lua: &Lua, cfg: &Config, json: &[u8]) -> Result<Value, Raised> {
    // Only the first character is sure to be ASCII in JSON text; a NUL among the first two
    // means a wider encoding.
    if json.len() >= 2 && (json[0] == 0 || json[1] == 0) {
        return Err(Raised::Message(
            "JSON parser does not support UTF-16 or UTF-32".into(),
        ));
    }
    let mut p = Parser {
        text: CText::new(json),
        pos: 0,
        cfg,
        depth: 0,
        slots: 1,
        strings: Vec::new(),
    };
    let events = p.parse()?;
    let bytes = |start: usize, end: usize| p.strings.get(start..end).unwrap_or_default();
    match events.as_slice() {
        [Event::Str(start, end)] => Ok(Value::String(lua.create_string(bytes(*start, *end))?)),
        [Event::Number(x)] => Ok(Value::Number(*x)),
        [Event::Boolean(b)] => Ok(Value::Boolean(*b)),
        [Event::Null] => Ok(null()),
        events => Ok(Value::Table(build(lua, events, &p.strings)?)),
    }
}

/// Builds decoded arrays and objects in one protected call. Through mlua, each allocation
/// (a table, a string, a table slot) is a protected call of its own, with a C closure to
/// collect, which made decoding several times slower than lua-cjson.
fn build(lua: &Lua, events: &[Event], strings: &[u8]) -> Result<Table, Raised> {
    // Per open array its next index, 0 for an open object.
    let mut next_index: Vec<c_int> = Vec::new();
    let mut built = false;
    // SAFETY: `build_raw` runs inside exec_raw's protected call with the state it gives and
    // keeps to its requirements; exec_raw then reads the table it leaves on the stack.
    let table = unsafe {
        lua.exec_raw::<Table>((), |state| {
            built = build_raw(state, events, strings, &mut next_index);
        })?
    };
    if !built {
        // Parsing held the nesting to what lua-cjson finds room for.
        return Err(Raised::Message("stack overflow".into()));
    }
    Ok(table)
}

/// Pushes the value `events` describe onto `state`'s stack; false if the stack had no room.
///
/// # Safety
///
/// `state` must be in a protected call with room for a value on its stack. A memory error
/// unwinds past this function with longjmp, so it owns nothing that would need dropping.
unsafe fn build_raw(
    state: *mut ffi::lua_State,
    events: &[Event],
    strings: &[u8],
    next_index: &mut Vec<c_int>,
) -> bool {
    let push_bytes = |start: usize, end: usize| {
        let s = strings.get(start..end).unwrap_or_default();
        ffi::lua_pushlstring(state, s.as_ptr().cast(), s.len());
    };
    for event in events {
        match *event {
            Event::Open(object) => {
                // The table, a key and a value.
                if ffi::lua_checkstack(state, 3) == 0 {
                    return false;
                }
                ffi::lua_createtable(state, 0, 0);
                next_index.push(if object { 0 } else { 1 });
                continue;
            }
            Event::Key(start, end) => {
                push_bytes(start, end);
                continue;
            }
            Event::Close => {
                next_index.pop();
            }
            Event::Str(start, end) => push_bytes(start, end),
            Event::Number(x) => ffi::lua_pushnumber(state, x),
            Event::Boolean(b) => ffi::lua_pushboolean(state, c_int::from(b)),
            Event::Null => ffi::lua_pushlightuserdata(state, std::ptr::null_mut()),
        }
        // The value on top goes into the innermost open array or object.
        match next_index.last_mut() {
            None => {}
            Some(0) => ffi::lua_rawset(state, -3),
            Some(i) => {
                ffi::lua_rawseti_(state, -2, *i);
                *i += 1;
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    //! Every expected value below was taken from redis-server 7.0.15 (`redis-cli eval
    //! <script> 0`, the error replies up to their ` script: <sha>` suffix).

    use mlua::Value;

    use crate::vm::{ScriptVm, Step};

    /// The string a script returns, or the text of the error it fails with.
    fn run(vm: &mut ScriptVm, code: &str) -> String {
        if let Err(e) = vm.compile("t", "user_script", code.as_bytes()) {
            return format!("does not compile: {e}");
        }
        let f = vm.compiled("t").expect("compiled");
        let mut run = vm
            .start(f, [].into_iter(), [].into_iter(), true, false)
            .expect("a run starts");
        match run.resume(vm.lua(), None) {
            Step::Done(done) => match done.value(vm.lua()) {
                Value::String(s) => s.to_string_lossy(),
                v => format!("not a string: {v:?}"),
            },
            Step::Failed {
                error: Value::Table(t),
                ..
            } => t.get::<String>("err").unwrap_or_default(),
            _ => "neither done nor failed".to_string(),
        }
    }

    /// Runs the scripts in order on one VM (settings carry over, as in Redis's Lua state).
    fn check(cases: &[(&str, &str)]) {
        let mut vm = ScriptVm::new(0).expect("a VM");
        for (code, want) in cases {
            assert_eq!(run(&mut vm, code), *want, "{code}");
        }
    }

    #[test]
    fn encodes_scalars() {
        check(&[
            ("return cjson.encode(nil)", "null"),
            ("return cjson.encode(cjson.null)", "null"),
            ("return cjson.encode(true)", "true"),
            ("return cjson.encode(false)", "false"),
            ("return cjson.encode(100)", "100"),
            ("return cjson.encode(-0)", "-0"),
            ("return cjson.encode(0.1)", "0.1"),
            ("return cjson.encode(1/3)", "0.33333333333333"),
            ("return cjson.encode(0.1 + 0.2)", "0.3"),
            ("return cjson.encode(99999999999999)", "99999999999999"),
            ("return cjson.encode(-99999999999999)", "-99999999999999"),
            ("return cjson.encode(100000000000000)", "1e+14"),
            ("return cjson.encode(1e15)", "1e+15"),
            (
                "return cjson.encode(123456789012345)",
                "1.2345678901234e+14",
            ),
            ("return cjson.encode(2^53)", "9.007199254741e+15"),
            ("return cjson.encode(-2^63)", "-9.2233720368548e+18"),
            ("return cjson.encode(1e300 * 10)", "1e+301"),
            ("return cjson.encode(-1.5e-7)", "-1.5e-07"),
            ("return cjson.encode(1e-20)", "1e-20"),
            ("return cjson.encode('xxx')", "\"xxx\""),
            (
                "return cjson.encode('a\"b\\\\c/d\\b\\f\\n\\r\\t\\1\\127\\31 ')",
                "\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u0001\\u007f\\u001f \"",
            ),
            ("return cjson.encode('\\0')", "\"\\u0000\""),
            // Bytes from 0x80 pass as they are, UTF-8 or not.
            (
                "local s = cjson.encode('\\200\\201\\255abc\\239\\187\\191') local h = {} \
                 for i = 1, #s do h[#h+1] = string.format('%02x', s:byte(i)) end \
                 return table.concat(h)",
                "22c8c9ff616263efbbbf22",
            ),
        ]);
    }

    #[test]
    fn encodes_tables() {
        check(&[
            ("return cjson.encode({1,2,3})", "[1,2,3]"),
            ("return cjson.encode({})", "{}"),
            ("return cjson.encode({'a',{}})", "[\"a\",{}]"),
            ("return cjson.encode({1,nil,3})", "[1,null,3]"),
            (
                "return cjson.encode({cjson.null, {}, {{}}, ''})",
                "[null,{},[{}],\"\"]",
            ),
            (
                "return cjson.encode({a={b={c={1,{d=cjson.null}}}}})",
                "{\"a\":{\"b\":{\"c\":[1,{\"d\":null}]}}}",
            ),
            (
                "return cjson.encode({1,2,x=3})",
                "{\"1\":1,\"2\":2,\"x\":3}",
            ),
            ("return cjson.encode({[1.5]=1})", "{\"1.5\":1}"),
            ("return cjson.encode({[-1]=1})", "{\"-1\":1}"),
            ("return cjson.encode({[0]=1})", "{\"0\":1}"),
            ("return cjson.encode({[-0]=1})", "{\"-0\":1}"),
            ("return cjson.encode({[1e-20]=1})", "{\"1e-20\":1}"),
            (
                "return cjson.encode({[-0]=1, [1e-30]=2, [0.5]=3})",
                "{\"-0\":1,\"1e-30\":2,\"0.5\":3}",
            ),
            (
                "return cjson.encode({1e-20, -0, 1e-310})",
                "[1e-20,-0,1e-310]",
            ),
            ("return cjson.encode({a=-0})", "{\"a\":-0}"),
            (
                "return cjson.encode({['a/b']='c\\\\d'})",
                "{\"a\\/b\":\"c\\\\d\"}",
            ),
            ("return cjson.encode({[''] = ''})", "{\"\":\"\"}"),
            ("return cjson.encode({['\\0'] = 1})", "{\"\\u0000\":1}"),
            (
                "return cjson.encode({[2^53] = 1})",
                "{\"9.007199254741e+15\":1}",
            ),
            // Keys from 2^31 make lua-cjson's largest key a negative C int: an object.
            ("return cjson.encode({[2^31]=1})", "{\"2147483648\":1}"),
            // Sparse arrays: more than twice as many slots as values, past index 10.
            (
                "return cjson.encode({[1]=1,[2]=2,[10]=3})",
                "[1,2,null,null,null,null,null,null,null,3]",
            ),
            ("return cjson.encode({[3]=1})", "[null,null,1]"),
            (
                "return cjson.encode({[1]=1, [2]=2, [3]=3, [4]=4, [5]=5, [6]=6, [12]=1})",
                "[1,2,3,4,5,6,null,null,null,null,null,1]",
            ),
            (
                "return cjson.encode({[1]=1,[2]=2,[11]=3})",
                "ERR user_script:1: Cannot serialise table: excessively sparse array",
            ),
            (
                "return cjson.encode({[2^31-1]=1})",
                "ERR user_script:1: Cannot serialise table: excessively sparse array",
            ),
            (
                "local t = {} for i = 1, 50000 do t[i] = i % 7 == 0 and cjson.null or i end \
                 local s = cjson.encode(t) return #s .. s:sub(1, 40)",
                "283338[1,2,3,4,5,6,null,8,9,10,11,12,13,null,1",
            ),
            // Raw access: metatables play no part.
            (
                "return cjson.encode(setmetatable({}, {__index=function() return 1 end}))",
                "{}",
            ),
        ]);
    }

    #[test]
    fn encode_errors() {
        check(&[
            (
                "return cjson.encode()",
                "ERR user_script:1: bad argument #1 to 'encode' (expected 1 argument)",
            ),
            (
                "return cjson.encode(nil, nil)",
                "ERR user_script:1: bad argument #1 to 'encode' (expected 1 argument)",
            ),
            (
                "return cjson.encode(0/0)",
                "ERR user_script:1: Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "return cjson.encode(2^1023*2)",
                "ERR user_script:1: Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "return cjson.encode({[1/0]=1})",
                "ERR user_script:1: Cannot serialise number: must not be NaN or Inf",
            ),
            (
                "return cjson.encode(function() end)",
                "ERR user_script:1: Cannot serialise function: type not supported",
            ),
            (
                "return cjson.encode(coroutine.create(function() end))",
                "ERR user_script:1: Cannot serialise thread: type not supported",
            ),
            (
                "return cjson.encode({[true]=1})",
                "ERR user_script:1: Cannot serialise boolean: table key must be a number or string",
            ),
            (
                "return cjson.encode({[{}]=1})",
                "ERR user_script:1: Cannot serialise table: table key must be a number or string",
            ),
            (
                "local ok, e = pcall(cjson.encode, {a = {b = function() end}}) return e",
                "Cannot serialise function: type not supported",
            ),
            (
                "local t = {} t[1] = t local ok, e = pcall(cjson.encode, t) return e",
                "Cannot serialise, excessive nesting (1001)",
            ),
        ]);
    }

    #[test]
    fn decodes_values() {
        check(&[
            (
                "return table.concat(cjson.decode('[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]'), ' ')",
                "0 -5000 -1 0.0003 1023.2 0",
            ),
            (
                "local d = cjson.decode('{\"a\":[1,2,{\"b\":true,\"c\":false}],\"d\":\"x\"}') \
                 return table.concat({d.a[1], tostring(d.a[3].b), tostring(d.a[3].c), d.d}, ' ')",
                "1 true false x",
            ),
            (
                "return tostring(cjson.decode('[1,null,3]')[2] == cjson.null)",
                "true",
            ),
            (
                "return tostring(cjson.decode('null') == cjson.null)",
                "true",
            ),
            (
                "return table.concat(cjson.decode(' \\t\\r\\n[ 1 , 2 ] \\n'), ',')",
                "1,2",
            ),
            ("return tostring(cjson.decode('{\"a\":1,\"a\":2}').a)", "2"),
            ("return cjson.decode('\"\\\\u00e9\\\\u0041\\\\u20AC\"')", "éA€"),
            ("return cjson.decode('\"\\\\ud83d\\\\ude00\"')", "😀"),
            (
                "return cjson.decode('\"\\\\u0041\\\\u0000x\"') == 'A\\0x' and 'yes' or 'no'",
                "yes",
            ),
            ("return cjson.decode('{\"\\\\u00e9\":1}')['\\195\\169'] .. ''", "1"),
            // Control characters and invalid UTF-8 pass.
            (
                "local d = cjson.decode('\"\\200\\201\\255\\1\\31x\"') local h = {} \
                 for i = 1, #d do h[#h+1] = string.format('%02x', d:byte(i)) end \
                 return table.concat(h)",
                "c8c9ff011f78",
            ),
            // Numbers as strtod reads them.
            (
                "return tostring(cjson.decode('1E+2')) .. ' ' .. tostring(cjson.decode('-0.0e-0')) \
                 .. ' ' .. tostring(cjson.decode('123456789012345678901234567890'))",
                "100 -0 1.2345678901235e+29",
            ),
            ("return tostring(cjson.decode('+5'))", "5"),
            ("return tostring(cjson.decode('0x10'))", "16"),
            ("return tostring(cjson.decode('0x1p3'))", "8"),
            ("return tostring(cjson.decode('01'))", "1"),
            ("return tostring(cjson.decode('inf'))", "inf"),
            ("return tostring(cjson.decode('-Infinity'))", "-inf"),
            ("return tostring(cjson.decode('NaN'))", "nan"),
            ("return tostring(cjson.decode('-nan'))", "-nan"),
            ("return tostring(cjson.decode('1e400'))", "inf"),
            (
                "return tostring(cjson.decode('[Infinity]')[1]) .. \
                 tostring(cjson.decode('[-Infinity, NAN, +inf]')[3])",
                "infinf",
            ),
            // A number argument is read as Lua prints it; a NUL ends the text.
            ("return tostring(cjson.decode(12))", "12"),
            ("return tostring(cjson.decode(0.1))", "0.1"),
            (
                "return tostring(cjson.decode(-0)) .. tostring(cjson.decode(1e-20)) .. \
                 tostring(cjson.decode(2^60))",
                "-01e-201.1529215046068e+18",
            ),
            ("return tostring(cjson.decode('12\\0x'))", "12"),
        ]);
    }

    #[test]
    fn round_trips() {
        check(&[
            (
                "return cjson.encode(cjson.decode('[1,2,3,\"sss\",{\"a\":1}]'))",
                "[1,2,3,\"sss\",{\"a\":1}]",
            ),
            (
                "return cjson.encode(cjson.decode('{\"a\":null}'))",
                "{\"a\":null}",
            ),
            (
                "return cjson.encode(cjson.decode('\"\\\\/\\\\b\\\\f\\\\n\\\\r\\\\t\\\\\\\\\\\\\"\"'))",
                "\"\\/\\b\\f\\n\\r\\t\\\\\\\"\"",
            ),
            ("return cjson.encode(cjson.decode('[]'))", "{}"),
            ("return cjson.encode(cjson.decode('{}'))", "{}"),
            (
                "return cjson.encode(cjson.decode('{\"a\":[1,{\"b\":[]}]}'))",
                "{\"a\":[1,{\"b\":{}}]}",
            ),
            (
                "return cjson.encode(cjson.decode('[1e2, 1E-2, -0, 0.5e1, 1e-300, 5e-324]'))",
                "[100,0.01,-0,5,1e-300,4.9406564584125e-324]",
            ),
            (
                "return cjson.encode(cjson.decode('\"\\\\ud83d\\\\ude00 \\\\u00e9\"'))",
                "\"😀 é\"",
            ),
            (
                "local t = {} for i = 1, 20000 do t['key' .. i] = i end \
                 local d = cjson.decode(cjson.encode(t)) local n = 0 \
                 for k, v in pairs(d) do if t[k] ~= v then return 'bad' end n = n + 1 end \
                 return tostring(n)",
                "20000",
            ),
            // Deeper than the tables Rust keeps references to.
            (
                "local s = string.rep('[', 700) .. '1,\"x\",{\"a\":[null,true]}' .. \
                 string.rep(']', 700) local e = cjson.encode(cjson.decode(s)) \
                 return tostring(e == s) .. ' ' .. #e",
                "true 1423",
            ),
            (
                "local t = {} local c = t for i = 1, 500 do c.k = {i, {x = i}} c = c.k end \
                 local s = cjson.encode(t) return #s .. ' ' .. s:sub(1, 50) .. s:sub(-10)",
                "13777 {\"k\":{\"1\":1,\"2\":{\"x\":1},\"k\":{\"1\":2,\"2\":{\"x\":2},\"k\"}}}}}}}}}}",
            ),
        ]);
    }

    #[test]
    fn decode_errors() {
        let at = |text: &str| format!("ERR user_script:1: {text}");
        check(&[
            (
                "return cjson.decode('')",
                &at("Expected value but found T_END at character 1"),
            ),
            (
                "return cjson.decode('  ')",
                &at("Expected value but found T_END at character 3"),
            ),
            (
                "return cjson.decode('{')",
                &at("Expected object key string but found T_END at character 2"),
            ),
            (
                "return cjson.decode('[1,2')",
                &at("Expected comma or array end but found T_END at character 5"),
            ),
            (
                "return cjson.decode('[12')",
                &at("Expected comma or array end but found T_END at character 4"),
            ),
            (
                "return cjson.decode('[1,')",
                &at("Expected value but found T_END at character 4"),
            ),
            (
                "return cjson.decode('[1 2]')",
                &at("Expected comma or array end but found T_NUMBER at character 4"),
            ),
            (
                "return cjson.decode('[true false]')",
                &at("Expected comma or array end but found T_BOOLEAN at character 7"),
            ),
            (
                "return cjson.decode('[1,2,]')",
                &at("Expected value but found T_ARR_END at character 6"),
            ),
            (
                "return cjson.decode(']')",
                &at("Expected value but found T_ARR_END at character 1"),
            ),
            (
                "return cjson.decode('{1:2}')",
                &at("Expected object key string but found T_NUMBER at character 2"),
            ),
            (
                "return cjson.decode('{\"a\" 1}')",
                &at("Expected colon but found T_NUMBER at character 6"),
            ),
            (
                "return cjson.decode('{\"a\"')",
                &at("Expected colon but found T_END at character 5"),
            ),
            (
                "return cjson.decode('{\"a\":}')",
                &at("Expected value but found T_OBJ_END at character 6"),
            ),
            (
                "return cjson.decode('{\"a\":1')",
                &at("Expected comma or object end but found T_END at character 7"),
            ),
            (
                "return cjson.decode('{\"a\":1 \"b\"}')",
                &at("Expected comma or object end but found T_STRING at character 8"),
            ),
            (
                "return cjson.decode('{\"a\":1,}')",
                &at("Expected object key string but found T_OBJ_END at character 8"),
            ),
            (
                "return cjson.decode('{\"a\":1}}')",
                &at("Expected the end but found T_OBJ_END at character 8"),
            ),
            (
                "return cjson.decode('[1,2]x')",
                &at("Expected the end but found invalid token at character 6"),
            ),
            (
                "return cjson.decode('tru')",
                &at("Expected value but found invalid token at character 1"),
            ),
            (
                "return cjson.decode('.5')",
                &at("Expected value but found invalid token at character 1"),
            ),
            (
                "return cjson.decode('\\128')",
                &at("Expected value but found invalid token at character 1"),
            ),
            (
                "return cjson.decode('[nulls]')",
                &at("Expected comma or array end but found invalid token at character 6"),
            ),
            (
                "return cjson.decode('info')",
                &at("Expected the end but found invalid token at character 4"),
            ),
            (
                "return cjson.decode('1e')",
                &at("Expected the end but found invalid token at character 2"),
            ),
            (
                "return cjson.decode('nan(123)x')",
                &at("Expected the end but found invalid token at character 9"),
            ),
            (
                "return cjson.decode('-')",
                &at("Expected value but found invalid number at character 1"),
            ),
            (
                "return cjson.decode('\"a\\\\x\"')",
                &at("Expected value but found invalid escape code at character 3"),
            ),
            (
                "return cjson.decode('\"\\\\')",
                &at("Expected value but found invalid escape code at character 2"),
            ),
            (
                "return cjson.decode('\"abc')",
                &at("Expected value but found unexpected end of string at character 5"),
            ),
            (
                "return cjson.decode('\"a\\0b\"')",
                &at("Expected value but found unexpected end of string at character 3"),
            ),
            (
                "return cjson.decode('\"\\\\u12\"')",
                &at("Expected value but found invalid unicode escape code at character 2"),
            ),
            (
                "return cjson.decode('\"\\\\udc00\"')",
                &at("Expected value but found invalid unicode escape code at character 2"),
            ),
            (
                "return cjson.decode('\"\\\\ud800\"')",
                &at("Expected value but found invalid unicode escape code at character 2"),
            ),
            (
                "return cjson.decode('\"\\\\ud800\\\\u0041\"')",
                &at("Expected value but found invalid unicode escape code at character 2"),
            ),
            (
                "return cjson.decode('\"\\\\ud800\\\\udbff\"')",
                &at("Expected value but found invalid unicode escape code at character 2"),
            ),
            (
                "return cjson.decode('[1,\\0]')",
                &at("Expected value but found T_END at character 4"),
            ),
            (
                "return cjson.decode('\\0')",
                &at("Expected value but found T_END at character 1"),
            ),
            (
                "return cjson.decode('1\\0x')",
                &at("JSON parser does not support UTF-16 or UTF-32"),
            ),
            (
                "return cjson.decode()",
                &at("bad argument #1 to 'decode' (expected 1 argument)"),
            ),
            (
                "return cjson.decode(1, 2)",
                &at("bad argument #1 to 'decode' (expected 1 argument)"),
            ),
            (
                "return cjson.decode(nil)",
                &at("bad argument #1 to 'decode' (string expected, got nil)"),
            ),
            (
                "return cjson.decode({})",
                &at("bad argument #1 to 'decode' (string expected, got table)"),
            ),
            (
                "return cjson.decode(true)",
                &at("bad argument #1 to 'decode' (string expected, got boolean)"),
            ),
        ]);
    }

    /// Argument errors name the function as its caller did, as luaL_argerror does.
    #[test]
    fn errors_name_the_function_as_called() {
        check(&[
            (
                "local ok, e = pcall(cjson.decode) return e",
                "bad argument #1 to '?' (expected 1 argument)",
            ),
            (
                "local d = cjson.decode d()",
                "ERR user_script:1: bad argument #1 to 'd' (expected 1 argument)",
            ),
            (
                "return cjson:decode(1)",
                "ERR user_script:1: calling 'decode' on bad self (expected 1 argument)",
            ),
            (
                "local ok, e = pcall(function() return cjson.encode(function() end) end) return e",
                "user_script:1: Cannot serialise function: type not supported",
            ),
            (
                "local x = 1\nreturn cjson.decode('[')",
                "ERR user_script:2: Expected value but found T_END at character 2",
            ),
        ]);
    }

    #[test]
    fn configuration() {
        check(&[
            (
                "local a, b, c = cjson.encode_sparse_array() return tostring(a) .. b .. c",
                "false210",
            ),
            ("return tostring(cjson.encode_max_depth())", "1000"),
            ("return tostring(cjson.decode_max_depth())", "1000"),
            ("return tostring(cjson.encode_number_precision())", "14"),
            ("return tostring(cjson.encode_keep_buffer())", "true"),
            ("return tostring(cjson.encode_invalid_numbers())", "false"),
            ("return tostring(cjson.decode_invalid_numbers())", "true"),
            (
                "return select('#', cjson.encode_sparse_array()) .. ' ' .. \
                 select('#', cjson.encode(1)) .. ' ' .. select('#', cjson.new())",
                "3 1 1",
            ),
            (
                "return table.concat({cjson._NAME, cjson._VERSION, type(cjson.null)}, ' ')",
                "cjson 2.1.0 userdata",
            ),
            // Sparse arrays.
            (
                "local a, b, c = cjson.encode_sparse_array(true, 3, 5) return tostring(a) .. b .. c",
                "true35",
            ),
            ("return cjson.encode({[1]=1,[20]=2})", "{\"1\":1,\"20\":2}"),
            ("return tostring(cjson.encode_sparse_array('off'))", "false"),
            (
                "return cjson.encode({[1]=1,[20]=2})",
                "ERR user_script:1: Cannot serialise table: excessively sparse array",
            ),
            ("return tostring(cjson.encode_sparse_array('on'))", "true"),
            (
                "cjson.encode_sparse_array(true, 1, 0) return cjson.encode({[1]=1, [3]=2})",
                "{\"1\":1,\"3\":2}",
            ),
            (
                "cjson.encode_sparse_array(false, 2, 0) local ok, r = pcall(cjson.encode, {[2]=1}) \
                 return tostring(r) .. ' ' .. cjson.encode({[2]=1, [1]=0})",
                "[null,1] [0,1]",
            ),
            (
                "cjson.encode_sparse_array(false, 0) return #cjson.encode({[1]=1, [1000]=2}) .. ''",
                "4995",
            ),
            // A setting is kept before a later argument fails.
            (
                "pcall(cjson.encode_sparse_array, true, 'x') return tostring(cjson.encode_sparse_array())",
                "true",
            ),
            (
                "local a, b, c = cjson.encode_sparse_array(false, 2, 10) return tostring(a) .. b .. c",
                "false210",
            ),
            // Precision.
            (
                "cjson.encode_number_precision(3) return cjson.encode({3.14159, 1234567})",
                "[3.14,1.23e+06]",
            ),
            (
                "cjson.encode_number_precision(1) return cjson.encode({9, 10, 15, 0.05, -0.95})",
                "[9,1e+01,2e+01,0.05,-0.9]",
            ),
            (
                "cjson.encode_number_precision(2) return cjson.encode({99, 100, 2.5, 0.125})",
                "[99,1e+02,2.5,0.12]",
            ),
            ("return tostring(cjson.encode_number_precision(14))", "14"),
            // NaN and Inf.
            ("return tostring(cjson.encode_invalid_numbers('null'))", "null"),
            (
                "return cjson.encode({0/0, 1/0, -1/0, [1/0]=1})",
                "{\"1\":null,\"2\":null,\"3\":null,\"null\":1}",
            ),
            ("return tostring(cjson.encode_invalid_numbers(true))", "true"),
            (
                "return cjson.encode({0/0, 1/0, -1/0, -(0/0)})",
                "[nan,inf,-inf,nan]",
            ),
            ("return tostring(cjson.encode_invalid_numbers('off'))", "false"),
            // Invalid numbers refused by the decoder.
            (
                "cjson.decode_invalid_numbers(false) local e = {} \
                 for _, s in ipairs({'nan', '+1', '0x10', '-inf', '01', 'Infinity'}) do \
                 local ok, m = pcall(cjson.decode, s) e[#e+1] = m end \
                 cjson.decode_invalid_numbers(true) return table.concat(e, '|')",
                "Expected value but found invalid token at character 1|\
                 Expected value but found invalid token at character 1|\
                 Expected value but found invalid number at character 1|\
                 Expected value but found invalid number at character 1|\
                 Expected value but found invalid number at character 1|\
                 Expected value but found invalid token at character 1",
            ),
            ("return tostring(cjson.encode_keep_buffer(false))", "false"),
            ("return tostring(cjson.encode_keep_buffer('on'))", "true"),
            // Integer arguments are converted as luaL_checkinteger does, into a C int.
            ("return tostring(cjson.encode_max_depth(2.7))", "2"),
            ("return tostring(cjson.encode_max_depth(2^32+5))", "5"),
            ("return tostring(cjson.encode_max_depth(' 0x10 '))", "16"),
            ("return tostring(cjson.encode_max_depth(' 5\\n'))", "5"),
            ("return tostring(cjson.encode_max_depth(1000))", "1000"),
        ]);
    }

    #[test]
    fn configuration_errors() {
        let bad = |text: &str| format!("ERR user_script:1: bad argument {text}");
        check(&[
            (
                "return cjson.encode_sparse_array('x')",
                &bad("#1 to 'encode_sparse_array' (invalid option 'x')"),
            ),
            (
                "return cjson.encode_sparse_array(1)",
                &bad("#1 to 'encode_sparse_array' (invalid option '1')"),
            ),
            (
                "return cjson.encode_sparse_array({})",
                &bad("#1 to 'encode_sparse_array' (string expected, got table)"),
            ),
            (
                "return cjson.encode_sparse_array(nil, -1)",
                &bad("#1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)"),
            ),
            (
                "return cjson.encode_sparse_array(nil, nil, -1)",
                &bad("#1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)"),
            ),
            (
                "return cjson.encode_sparse_array(nil, 'a')",
                &bad("#2 to 'encode_sparse_array' (number expected, got string)"),
            ),
            (
                "return cjson.encode_sparse_array(nil, nil, nil, 1)",
                &bad("#4 to 'encode_sparse_array' (found too many arguments)"),
            ),
            (
                "return cjson.encode_max_depth(0)",
                &bad("#1 to 'encode_max_depth' (expected integer between 1 and 2147483647)"),
            ),
            (
                "return cjson.encode_max_depth(-0)",
                &bad("#1 to 'encode_max_depth' (expected integer between 1 and 2147483647)"),
            ),
            (
                "return cjson.encode_max_depth(2^31)",
                &bad("#1 to 'encode_max_depth' (expected integer between 1 and 2147483647)"),
            ),
            (
                "return cjson.encode_max_depth(1/0)",
                &bad("#1 to 'encode_max_depth' (expected integer between 1 and 2147483647)"),
            ),
            (
                "return cjson.encode_max_depth(1, 2)",
                &bad("#2 to 'encode_max_depth' (found too many arguments)"),
            ),
            (
                "return cjson.encode_max_depth('5x')",
                &bad("#1 to 'encode_max_depth' (number expected, got string)"),
            ),
            (
                "return cjson.decode_max_depth('abc')",
                &bad("#1 to 'decode_max_depth' (number expected, got string)"),
            ),
            (
                "return cjson.encode_number_precision(15)",
                &bad("#1 to 'encode_number_precision' (expected integer between 1 and 14)"),
            ),
            (
                "return cjson.encode_number_precision(0)",
                &bad("#1 to 'encode_number_precision' (expected integer between 1 and 14)"),
            ),
            (
                "return cjson.encode_number_precision(true)",
                &bad("#1 to 'encode_number_precision' (number expected, got boolean)"),
            ),
            (
                "return cjson.encode_invalid_numbers(1)",
                &bad("#1 to 'encode_invalid_numbers' (invalid option '1')"),
            ),
            (
                "return cjson.encode_invalid_numbers('a\\0b')",
                &bad("#1 to 'encode_invalid_numbers' (invalid option 'a')"),
            ),
            (
                "return cjson.encode_keep_buffer(1, 2)",
                &bad("#2 to 'encode_keep_buffer' (found too many arguments)"),
            ),
            (
                "cjson.x = 1",
                "ERR user_script:1: Attempt to modify a readonly table",
            ),
            (
                "cjson.encode = function() return 1 end",
                "ERR user_script:1: Attempt to modify a readonly table",
            ),
        ]);
    }

    #[test]
    fn new_instances_have_their_own_settings() {
        check(&[
            (
                "local c = cjson.new() c.encode_max_depth(1) local ok = pcall(cjson.encode, {{1}}) \
                 local ok2, e2 = pcall(c.encode, {{1}}) c.foo = 1 \
                 return table.concat({tostring(ok), tostring(ok2), e2, c.foo, c._VERSION, \
                 tostring(c.null == cjson.null)}, ' ')",
                "true false Cannot serialise, excessive nesting (2) 1 2.1.0 true",
            ),
            (
                "local c = cjson.new() local d = c.new() d.encode_max_depth(5) \
                 return c.encode_max_depth() .. ' ' .. d.encode_max_depth() .. ' ' .. \
                 cjson.encode_max_depth()",
                "1000 5 1000",
            ),
            ("local t = cjson.new() return tostring(t.new == cjson.new)", "false"),
            ("local c = cjson.new() return c.encode(c.decode('[1,2]'))", "[1,2]"),
            (
                "local c = cjson.new() return c:encode()",
                "ERR user_script:1: Cannot serialise function: type not supported",
            ),
        ]);
    }

    #[test]
    fn depth_limits() {
        check(&[
            (
                "local t = {} local c = t for i = 1, 1000 do c[1] = {} c = c[1] end return cjson.encode(t)",
                "ERR user_script:1: Cannot serialise, excessive nesting (1001)",
            ),
            (
                "local t = {} local c = t for i = 1, 999 do c[1] = {} c = c[1] end return #cjson.encode(t) .. ''",
                "2000",
            ),
            (
                "local t = {} local c = t for i = 1, 999 do c.a = {} c = c.a end return #cjson.encode(t) .. ''",
                "5996",
            ),
            (
                "return cjson.decode(string.rep('[', 1001) .. string.rep(']', 1001))",
                "ERR user_script:1: Found too many nested data structures (1001) at character 1001",
            ),
            (
                "return #cjson.decode(string.rep('[', 1000) .. string.rep(']', 1000)) .. ''",
                "1",
            ),
            (
                "return cjson.decode(string.rep('{\"a\":', 1001))",
                "ERR user_script:1: Found too many nested data structures (1001) at character 5001",
            ),
            (
                "cjson.decode_max_depth(1) local ok, e = pcall(cjson.decode, '  {\"a\" : {\"b\":1}}') \
                 cjson.decode_max_depth(1000) return e",
                "Found too many nested data structures (2) at character 10",
            ),
            // With the limits raised, lua-cjson runs out of Lua stack slots.
            ("cjson.encode_max_depth(100000) cjson.decode_max_depth(100000) return ''", ""),
            (
                "local t = {} local c = t for i = 1, 10000 do c[1] = {} c = c[1] end \
                 local ok, e = pcall(cjson.encode, t) return e",
                "Cannot serialise, excessive nesting (7998)",
            ),
            (
                "local t = {} local c = t for i = 1, 10000 do c.a = {} c = c.a end \
                 local ok, e = pcall(cjson.encode, t) return e",
                "Cannot serialise, excessive nesting (4000)",
            ),
            (
                "local t = {} local c = t for i = 1, 7996 do c[1] = {} c = c[1] end \
                 return #cjson.encode(t) .. ''",
                "15994",
            ),
            (
                "local ok, e = pcall(cjson.decode, string.rep('[', 10000)) return e",
                "Found too many nested data structures (7999) at character 7999",
            ),
            (
                "local ok, e = pcall(cjson.decode, string.rep('{\"a\":', 10000)) return e",
                "Found too many nested data structures (4000) at character 19996",
            ),
            (
                "local d = cjson.decode(string.rep('[', 7998) .. string.rep(']', 7998)) \
                 local n = 0 while d[1] do d = d[1] n = n + 1 end \
                 return n .. ' ' .. cjson.encode(d)",
                "7997 {}",
            ),
            (
                "local d = cjson.decode(string.rep('{\"a\":', 3999) .. '1' .. string.rep('}', 3999)) \
                 for i = 1, 3998 do d = d.a end return tostring(d.a)",
                "1",
            ),
        ]);
    }

    /// Redis's own cjson tests (tests/unit/scripting.tcl); its smoke test of encode, decode
    /// and the settings runs against redis-server in crates/server/tests/script_cjson.rs.
    #[test]
    fn redis_test_suite() {
        check(&[
            (
                "return table.concat(cjson.decode(\"[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]\"), \" \")",
                "0 -5000 -1 0.0003 1023.2 0",
            ),
            (
                "local decoded = cjson.decode('{\"keya\": \"a\", \"keyb\": \"b\"}') \
                 return decoded.keya .. ' ' .. decoded.keyb",
                "a b",
            ),
        ]);
    }

    /// Function libraries see cjson in their functions (not while loading, as in Redis).
    #[test]
    fn function_libraries() {
        let vm = ScriptVm::new(0).expect("a VM");
        let registered = vm
            .load_library(
                b"\nredis.register_function('f', function(keys, args) \
                  return cjson.encode(cjson.decode(args[1])) end)",
            )
            .expect("the library loads");
        let mut run = vm
            .start(
                (&registered[0].callback).into(),
                [].into_iter(),
                [&b"[1,{\"a\":null}]"[..]].into_iter(),
                false,
                false,
            )
            .expect("a run starts");
        match run.resume(vm.lua(), None) {
            Step::Done(done) => match done.value(vm.lua()) {
                Value::String(s) => assert_eq!(s.to_string_lossy(), "[1,{\"a\":null}]"),
                v => panic!("the function returns its JSON, not {v:?}"),
            },
            _ => panic!("the function returns its JSON"),
        }
        let Err(e) = vm.load_library(b"\nlocal x = cjson.encode({1})") else {
            panic!("cjson is not a load-time global")
        };
        assert_eq!(
            e,
            "ERR Error registering functions: ERR user_function:2: Script attempted to access \
             nonexistent global variable 'cjson'"
        );
    }
}
