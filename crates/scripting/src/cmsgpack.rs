//! Redis's `cmsgpack` library: lua-cmsgpack 0.4.0 as Redis 7.0 bundles it, MessagePack
//! encoding of Lua values (`pack`) and decoding (`unpack`, `unpack_one`, `unpack_limit`),
//! byte for byte and error for error as the C library built for x86-64.
//!
//! Packing: a number that converts to int64 and back unchanged is an integer in its smallest
//! form (positive fixint, uint 8/16/32/64, negative fixint, int 8/16/32/64); any other number
//! a float 32 when it survives the conversion to float, else a float 64; a string a fixstr,
//! str 8, str 16 or str 32; a table whose keys are exactly 1..n an array, any other a map in
//! `next` order; a table 16 tables deep (so a cycle ends), a function or nil is nil.
//! Unpacking reads those forms back; bin, ext and fixext are `Bad data format in input.`

use mlua::{Function, Lua, Table, Value};

use crate::capi::{self, check_stack, exact_get, Args, CResult, Raise, Results, MAX_C_STACK};

/// LUACMSGPACK_MAX_NESTING: tables this many tables deep are packed as nil.
const MAX_NESTING: usize = 16;

const MISSING_BYTES: &str = "Missing bytes in input.";
const BAD_FORMAT: &str = "Bad data format in input.";
const TOO_MANY_VALUES: &str =
    "too many return values at once; use unpack_one or unpack_limit instead.";

/// A table's keys and values, alternately, in `next` order (the C library's `lua_next`
/// walk). Walked in Lua because mlua's `pairs` reads a numeric key near zero as 0 and then
/// fails to find it.
const ENTRIES: &str = "local next = next
return function(t)
  local out, n = {}, 0
  for k, v in next, t do
    out[n + 1] = k
    out[n + 2] = v
    n = n + 2
  end
  return out, n
end";

/// Builds the `cmsgpack` table: the functions for prelude.lua's wrapper (see `capi`) and the
/// library's fields.
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let entries: Function = lua.load(ENTRIES).set_name("=cmsgpack").eval()?;
    let t = lua.create_table()?;
    t.set(
        "pack",
        capi::function(lua, move |lua, args| pack(lua, args, &entries))?,
    )?;
    t.set(
        "unpack",
        capi::function(lua, |lua, args| {
            let data = args.check_string(1)?;
            // Its arguments stay on the stack under the values.
            unpack(lua, &data.as_bytes(), 0, 0, args.len())
        })?,
    )?;
    t.set(
        "unpack_one",
        capi::function(lua, |lua, args| {
            let offset = args.opt_integer(2, 0)?;
            let data = args.check_string(1)?;
            unpack(lua, &data.as_bytes(), 1, offset, 1)
        })?,
    )?;
    t.set(
        "unpack_limit",
        capi::function(lua, |lua, args| {
            let limit = args.check_integer(2)?;
            let offset = args.opt_integer(3, 0)?;
            let data = args.check_string(1)?;
            unpack(lua, &data.as_bytes(), limit, offset, 1)
        })?,
    )?;
    t.set("_NAME", "cmsgpack")?;
    t.set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.set("_COPYRIGHT", "Copyright (C) 2012, Salvatore Sanfilippo")?;
    t.set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

/// `cmsgpack.pack(...)`: the arguments packed one after the other.
fn pack(lua: &Lua, args: &Args, entries: &Function) -> CResult<Results> {
    let n = args.len();
    if n == 0 {
        return Err(Raise::arg(0, "MessagePack pack needs input."));
    }
    // `lua_checkstack(L, nargs)` above the arguments.
    if 2 * n > MAX_C_STACK {
        return Err(Raise::arg(0, "Too many arguments for MessagePack pack."));
    }
    let mut encoder = Encoder {
        entries,
        out: Vec::new(),
    };
    for i in 1..=n {
        // The arguments and one packed string per earlier argument are on the stack; the
        // argument's copy goes above them.
        let used = n + i - 1;
        check_stack(used, 1, "in function mp_check")?;
        encoder.value(args.get(i)?, 0, used + 1)?;
    }
    capi::single(lua, Value::String(lua.create_string(&encoder.out)?))
}

struct Encoder<'a> {
    entries: &'a Function,
    out: Vec<u8>,
}

impl Encoder<'_> {
    /// Packs `v`, which is `level` tables deep and sits in slot `top` of the C function's
    /// stack (its stack checks fail where the C library's do).
    fn value(&mut self, v: Value, level: usize, top: usize) -> CResult<()> {
        match v {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Boolean(b) => self.out.push(if b { 0xc3 } else { 0xc2 }),
            Value::Number(n) => self.number(n),
            // mlua's integers are Lua numbers (doubles) that happened to be integral.
            Value::Integer(i) => self.number(i as f64),
            Value::Table(t) if level < MAX_NESTING => self.table(&t, level, top)?,
            _ => self.out.push(0xc0),
        }
        Ok(())
    }

    fn number(&mut self, n: f64) {
        // An integer when the cast to int64 gives it back (the cast's comparison converts the
        // integer back to a double, as here).
        let i = capi::double_to_i64(n);
        if !n.is_infinite() && i as f64 == n {
            self.integer(i);
        } else {
            self.double(n);
        }
    }

    fn integer(&mut self, n: i64) {
        let out = &mut self.out;
        if n >= 0 {
            if let Ok(b) = u8::try_from(n) {
                if b > 127 {
                    out.push(0xcc);
                }
                out.push(b);
            } else if let Ok(x) = u16::try_from(n) {
                out.push(0xcd);
                out.extend_from_slice(&x.to_be_bytes());
            } else if let Ok(x) = u32::try_from(n) {
                out.push(0xce);
                out.extend_from_slice(&x.to_be_bytes());
            } else {
                out.push(0xcf);
                out.extend_from_slice(&n.to_be_bytes());
            }
        } else if let Ok(b) = i8::try_from(n) {
            if b < -32 {
                out.push(0xd0);
            }
            out.extend_from_slice(&b.to_be_bytes());
        } else if let Ok(x) = i16::try_from(n) {
            out.push(0xd1);
            out.extend_from_slice(&x.to_be_bytes());
        } else if let Ok(x) = i32::try_from(n) {
            out.push(0xd2);
            out.extend_from_slice(&x.to_be_bytes());
        } else {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }

    fn double(&mut self, d: f64) {
        // C's `float f = d`: rounded to nearest, infinite past the float range.
        let f = d as f32;
        if f64::from(f) == d {
            self.out.push(0xca);
            self.out.extend_from_slice(&f.to_be_bytes());
        } else {
            self.out.push(0xcb);
            self.out.extend_from_slice(&d.to_be_bytes());
        }
    }

    fn string(&mut self, s: &[u8]) {
        let len = s.len();
        if len < 32 {
            self.out.push(0xa0 | len as u8);
        } else if let Ok(l) = u8::try_from(len) {
            self.out.extend_from_slice(&[0xd9, l]);
        } else if let Ok(l) = u16::try_from(len) {
            self.out.push(0xda);
            self.out.extend_from_slice(&l.to_be_bytes());
        } else {
            self.out.push(0xdb);
            self.out.extend_from_slice(&length_32(len));
        }
        self.out.extend_from_slice(s);
    }

    /// An array or map header: fix form below 16 entries, 16-bit or 32-bit count above.
    fn header(&mut self, fix: u8, long: u8, n: usize) {
        if n <= 15 {
            self.out.push(fix | n as u8);
        } else if let Ok(x) = u16::try_from(n) {
            self.out.push(long);
            self.out.extend_from_slice(&x.to_be_bytes());
        } else {
            self.out.push(long + 1);
            self.out.extend_from_slice(&length_32(n));
        }
    }

    fn table(&mut self, t: &Table, level: usize, top: usize) -> CResult<()> {
        check_stack(top, 2, "in function table_is_an_array")?;
        let (entries, n): (Table, usize) = self.entries.call(t)?;
        let count = n / 2;
        // An array when every key is a number in 1..=INT_MAX with no fraction (the C
        // library's `(int)n == n`) and the largest is the count: keys 1..count, so `#t` is
        // the count as well.
        let mut max = 0.0;
        let mut array = true;
        for i in (1..=n).step_by(2) {
            match exact_get(&entries, i)? {
                Value::Number(k) if k > 0.0 && k <= f64::from(i32::MAX) && k.fract() == 0.0 => {
                    max = f64::max(max, k);
                }
                _ => {
                    array = false;
                    break;
                }
            }
        }
        if array && max == count as f64 {
            self.header(0x90, 0xdc, count);
            check_stack(top, 1, "in function mp_encode_lua_table_as_array")?;
            for j in 1..=count {
                self.value(exact_get(t, j)?, level + 1, top + 1)?;
            }
        } else {
            check_stack(top, 3, "in function mp_encode_lua_table_as_map")?;
            self.header(0x80, 0xde, count);
            for i in (1..=n).step_by(2) {
                // `lua_next` leaves the key and value above the table and the key is copied
                // above them to be packed.
                self.value(exact_get(&entries, i)?, level + 1, top + 3)?;
                self.value(exact_get(&entries, i + 1)?, level + 1, top + 2)?;
            }
        }
        Ok(())
    }
}

/// A 32-bit length as the C library writes it: its low 32 bits, big-endian (past 4 GiB too).
fn length_32(n: usize) -> [u8; 4] {
    (n as u32).to_be_bytes()
}

/// `mp_unpack_full`: up to `limit` values (all of them when `limit` and `offset` are both 0,
/// and then without the next offset) from byte `offset` of `data`. `base` is how many
/// arguments are on the stack under the values.
fn unpack(lua: &Lua, data: &[u8], limit: i64, offset: i64, base: usize) -> CResult<Results> {
    let len = data.len();
    let all = limit == 0 && offset == 0;
    // The messages print `(int)` casts of the numbers, and the input length where they say
    // limit.
    let start = match usize::try_from(offset) {
        Ok(start) if limit >= 0 => start,
        _ => {
            return Err(Raise::error(format!(
                "Invalid request to unpack with offset of {} and limit of {}.",
                offset as i32, len as i32
            )))
        }
    };
    if start > len {
        return Err(Raise::error(format!(
            "Start offset {} greater than input length {}.",
            offset as i32, len as i32
        )));
    }
    let limit = if all {
        i32::MAX as usize
    } else {
        usize::try_from(limit).unwrap_or(usize::MAX)
    };
    let mut results = Results::new(lua)?;
    if !all {
        // The next offset comes first; it is pushed after the values.
        results.push(Value::Nil)?;
    }
    let mut decoder = Decoder {
        lua,
        data,
        pos: start,
    };
    let mut count = 0;
    while decoder.pos < len && count < limit {
        let v = decoder.value(base + count)?;
        results.push(v)?;
        count += 1;
    }
    if !all {
        check_stack(base + count, 1, "in function mp_unpack_full")?;
        let next = if decoder.pos == len {
            -1
        } else {
            decoder.pos as i64
        };
        results.set(1, Value::Integer(next))?;
    }
    Ok(results)
}

/// A container being filled.
struct Open {
    map: bool,
    /// Entries still to read.
    left: usize,
    /// The next array index.
    index: i64,
    /// A map's key is read and waits for its value.
    keyed: bool,
}

impl Open {
    /// The stack slots the C library uses for it while reading an element: the table, and
    /// the array index or the map's key once read.
    fn slots(&self) -> usize {
        if self.map && !self.keyed {
            1
        } else {
            2
        }
    }
}

/// What a header byte starts.
enum Item {
    Value(Value),
    Array(usize),
    Map(usize),
}

struct Decoder<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// `mp_cur_need` and `mp_cur_consume`: the next `n` bytes.
    fn take(&mut self, n: usize) -> CResult<&'a [u8]> {
        if self.data.len() - self.pos < n {
            return Err(Raise::error(MISSING_BYTES));
        }
        let data = self.data;
        let bytes = &data[self.pos..self.pos + n];
        self.pos += n;
        Ok(bytes)
    }

    /// The `N` bytes after the header byte (both consumed).
    fn fixed<const N: usize>(&mut self) -> CResult<[u8; N]> {
        let bytes = self.take(N + 1)?;
        let mut out = [0; N];
        out.copy_from_slice(&bytes[1..]);
        Ok(out)
    }

    /// A string of `len` bytes after a header of `header` bytes.
    fn string(&mut self, header: usize, len: usize) -> CResult<Item> {
        if self.data.len() - self.pos < header {
            return Err(Raise::error(MISSING_BYTES));
        }
        self.pos += header;
        let s = self.take(len)?;
        Ok(Item::Value(Value::String(self.lua.create_string(s)?)))
    }

    fn item(&mut self) -> CResult<Item> {
        let n = |x: f64| Ok(Item::Value(Value::Number(x)));
        match self.data[self.pos] {
            b @ 0x00..=0x7f => {
                self.pos += 1;
                n(f64::from(b))
            }
            b @ 0x80..=0x8f => {
                self.pos += 1;
                Ok(Item::Map(usize::from(b & 0x0f)))
            }
            b @ 0x90..=0x9f => {
                self.pos += 1;
                Ok(Item::Array(usize::from(b & 0x0f)))
            }
            b @ 0xa0..=0xbf => self.string(1, usize::from(b & 0x1f)),
            0xc0 => {
                self.pos += 1;
                Ok(Item::Value(Value::Nil))
            }
            b @ (0xc2 | 0xc3) => {
                self.pos += 1;
                Ok(Item::Value(Value::Boolean(b == 0xc3)))
            }
            0xca => n(f64::from(f32::from_be_bytes(self.fixed()?))),
            0xcb => n(f64::from_be_bytes(self.fixed()?)),
            0xcc => n(f64::from(u8::from_be_bytes(self.fixed()?))),
            0xcd => n(f64::from(u16::from_be_bytes(self.fixed()?))),
            0xce => n(f64::from(u32::from_be_bytes(self.fixed()?))),
            // Pushed with lua_pushinteger, whose ptrdiff_t takes values from 2^63 as
            // negative; the double is then the nearest to that integer.
            0xcf => n(i64::from_be_bytes(self.fixed()?) as f64),
            0xd0 => n(f64::from(i8::from_be_bytes(self.fixed()?))),
            0xd1 => n(f64::from(i16::from_be_bytes(self.fixed()?))),
            0xd2 => n(f64::from(i32::from_be_bytes(self.fixed()?))),
            // The nearest double, as lua_pushnumber's conversion gives.
            0xd3 => n(i64::from_be_bytes(self.fixed()?) as f64),
            0xd9 => {
                let [l] = self.peek::<1>()?;
                self.string(2, usize::from(l))
            }
            0xda => {
                let l = u16::from_be_bytes(self.peek()?);
                self.string(3, usize::from(l))
            }
            0xdb => {
                let l = u32::from_be_bytes(self.peek()?);
                self.string(5, widen(l))
            }
            0xdc => Ok(Item::Array(usize::from(u16::from_be_bytes(self.fixed()?)))),
            0xdd => Ok(Item::Array(widen(u32::from_be_bytes(self.fixed()?)))),
            0xde => Ok(Item::Map(usize::from(u16::from_be_bytes(self.fixed()?)))),
            0xdf => Ok(Item::Map(widen(u32::from_be_bytes(self.fixed()?)))),
            b @ 0xe0..=0xff => {
                self.pos += 1;
                n(f64::from(i8::from_be_bytes([b])))
            }
            _ => Err(Raise::error(BAD_FORMAT)),
        }
    }

    /// The `N` bytes after the header byte, consuming nothing.
    fn peek<const N: usize>(&self) -> CResult<[u8; N]> {
        let bytes = self
            .data
            .get(self.pos + 1..self.pos + 1 + N)
            .ok_or_else(|| Raise::error(MISSING_BYTES))?;
        let mut out = [0; N];
        out.copy_from_slice(bytes);
        Ok(out)
    }

    /// One value with everything in it, decoded while `used` stack slots are taken. The
    /// containers being filled live in a Lua table, not in Rust: mlua keeps each value Rust
    /// holds in a slot of a stack Lua 5.1 caps at 8000, and nesting goes about 4000 deep.
    fn value(&mut self, used: usize) -> CResult<Value> {
        let lua = self.lua;
        // open[2d - 1] is the table at depth d, open[2d] its map key waiting for a value.
        let open = lua.create_table()?;
        let mut stack: Vec<Open> = Vec::new();
        let mut slots = used;
        loop {
            if self.pos >= self.data.len() {
                return Err(Raise::error(MISSING_BYTES));
            }
            check_stack(slots, 1, TOO_MANY_VALUES)?;
            let mut v = match self.item()? {
                Item::Value(v) => v,
                Item::Array(len) => {
                    // lua_newtable, then the array's own check for its index.
                    check_stack(slots + 1, 1, "in function mp_decode_to_lua_array")?;
                    match self.open(&open, &mut stack, &mut slots, false, len)? {
                        Some(empty) => empty,
                        None => continue,
                    }
                }
                Item::Map(len) => match self.open(&open, &mut stack, &mut slots, true, len)? {
                    Some(empty) => empty,
                    None => continue,
                },
            };
            // Store the value, closing the containers it completes.
            loop {
                let depth = stack.len();
                let Some(frame) = stack.last_mut() else {
                    return Ok(v);
                };
                if frame.map && !frame.keyed {
                    open.raw_set(2 * depth, v)?;
                    frame.keyed = true;
                    slots += 1;
                    break;
                }
                let table: Table = open.raw_get(2 * depth - 1)?;
                if frame.map {
                    let key = exact_get(&open, 2 * depth)?;
                    set(&table, key, v)?;
                    open.raw_set(2 * depth, Value::Nil)?;
                    frame.keyed = false;
                    slots -= 1;
                } else {
                    table.raw_set(frame.index, v)?;
                    frame.index += 1;
                }
                frame.left -= 1;
                if frame.left > 0 {
                    break;
                }
                slots -= frame.slots();
                stack.pop();
                open.raw_set(2 * depth - 1, Value::Nil)?;
                v = Value::Table(table);
            }
        }
    }

    /// A new container of `len` entries: the empty table itself when there are none, else
    /// None, with the container open to be filled.
    fn open(
        &self,
        open: &Table,
        stack: &mut Vec<Open>,
        slots: &mut usize,
        map: bool,
        len: usize,
    ) -> CResult<Option<Value>> {
        let t = self.lua.create_table()?;
        if len == 0 {
            return Ok(Some(Value::Table(t)));
        }
        let frame = Open {
            map,
            left: len,
            index: 1,
            keyed: false,
        };
        *slots += frame.slots();
        stack.push(frame);
        open.raw_set(2 * stack.len() - 1, t)?;
        Ok(None)
    }
}

/// `lua_settable` on a fresh table: a nil or NaN key is the Lua core's error.
fn set(table: &Table, key: Value, v: Value) -> CResult<()> {
    match key {
        Value::Nil => Err(Raise::Core(b"table index is nil".to_vec())),
        Value::Number(k) if k.is_nan() => Err(Raise::Core(b"table index is NaN".to_vec())),
        key => Ok(table.raw_set(key, v)?),
    }
}

/// A 32-bit length as a `size_t`.
fn widen(n: u32) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// Scripts run through the whole environment (prelude.lua's wrapper included), each compared
/// with what redis-server 7.0.15 returned for it.
#[cfg(test)]
mod tests {
    use crate::vm::testing::assert_as_redis;

    /// Fixints, uint 8-64 and int 8-64 at their boundaries ("cmsgpack can pack negative int64?").
    #[test]
    fn packs_integers_in_their_smallest_form() {
        assert_as_redis(&[
            (
                r#"return hex(cmsgpack.pack(0, 1, 127, 128, 255, 256, 65535, 65536, 4294967295, 4294967296, 2^53, 2^63 - 1024))"#,
                r#"00017fcc80ccffcd0100cdffffce00010000ceffffffffcf0000000100000000cf0020000000000000cf7ffffffffffffc00"#,
            ),
            (
                r#"return hex(cmsgpack.pack(-1, -32, -33, -128, -129, -32768, -32769, -2147483648, -2147483649, -2^63))"#,
                r#"ffe0d0dfd080d1ff7fd18000d2ffff7fffd280000000d3ffffffff7fffffffd38000000000000000"#,
            ),
            (
                r#"return hex(cmsgpack.pack(-1099511627776))"#,
                r#"d3ffffff0000000000"#,
            ),
        ]);
    }

    /// Integral doubles are integers, others float 32 when exact, else float 64 ("cmsgpack can pack double?"); infinities, NaNs, doubles past int64.
    #[test]
    fn packs_floats_as_float_32_when_exact() {
        assert_as_redis(&[
            (
                r#"return hex(cmsgpack.pack(3.0, -0.0, 0.1, 0.5, 1.5, -2.25))"#,
                r#"0300cb3fb999999999999aca3f000000ca3fc00000cac0100000"#,
            ),
            (
                r#"return hex(cmsgpack.pack(1e20, 1e39, 1e-300, 2^63, 2^64, -2^64))"#,
                r#"cb4415af1d78b58c40cb48078287f49c4a1dcb01a56e1fc2f8f359ca5f000000ca5f800000cadf800000"#,
            ),
            (
                r#"return hex(cmsgpack.pack(math.huge, -math.huge, 0/0, -(0/0)))"#,
                r#"ca7f800000caff800000cbfff8000000000000cb7ff8000000000000"#,
            ),
        ]);
    }

    /// fixstr up to 31 bytes, str 8 to 255, str 16 to 65535, str 32 above: header and total length.
    #[test]
    fn packs_strings_by_length() {
        assert_as_redis(&[
            (
                r#"return hex(cmsgpack.pack('', 'a', 'hello'))"#,
                r#"a0a161a568656c6c6f"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 31)):sub(1, 3)) .. ' ' .. #cmsgpack.pack(string.rep('x', 31))"#,
                r#"bf7878 32"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 32)):sub(1, 3)) .. ' ' .. #cmsgpack.pack(string.rep('x', 32))"#,
                r#"d92078 34"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 255)):sub(1, 3)) .. ' ' .. #cmsgpack.pack(string.rep('x', 255))"#,
                r#"d9ff78 257"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 256)):sub(1, 4)) .. ' ' .. #cmsgpack.pack(string.rep('x', 256))"#,
                r#"da010078 259"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 65535)):sub(1, 4)) .. ' ' .. #cmsgpack.pack(string.rep('x', 65535))"#,
                r#"daffff78 65538"#,
            ),
            (
                r#"return hex(cmsgpack.pack(string.rep('x', 65536)):sub(1, 6)) .. ' ' .. #cmsgpack.pack(string.rep('x', 65536))"#,
                r#"db0001000078 65541"#,
            ),
        ]);
    }

    /// Arrays (fixarray to 15, array 16, array 32) for keys 1..n, maps otherwise (fixmap, map 16, map 32, in `next` order); nil, booleans, functions, threads.
    #[test]
    fn packs_tables_as_arrays_or_maps() {
        assert_as_redis(&[
            (
                r#"return hex(cmsgpack.pack(true, false, nil, string.len, coroutine.create(function() end)))"#,
                r#"c3c2c0c0c0"#,
            ),
            (
                r#"return hex(cmsgpack.pack({}, {1}, {'a', 'b', 'c'}, {1, {2, {3}}}))"#,
                r#"90910193a161a162a163920192029103"#,
            ),
            (
                r#"local t = {} for i = 1, 15 do t[i] = i end return hex(cmsgpack.pack(t))"#,
                r#"9f0102030405060708090a0b0c0d0e0f"#,
            ),
            (
                r#"local t = {} for i = 1, 16 do t[i] = i end return hex(cmsgpack.pack(t))"#,
                r#"dc00100102030405060708090a0b0c0d0e0f10"#,
            ),
            (
                r#"local t = {} for i = 1, 65535 do t[i] = 0 end local e = cmsgpack.pack(t) return hex(e:sub(1, 5)) .. ' ' .. #e"#,
                r#"dcffff0000 65538"#,
            ),
            (
                r#"local t = {} for i = 1, 65536 do t[i] = 0 end local e = cmsgpack.pack(t) return hex(e:sub(1, 7)) .. ' ' .. #e"#,
                r#"dd000100000000 65541"#,
            ),
            (
                r#"return hex(cmsgpack.pack({a = 1}, {a = 1, b = 2, c = 3, d = 4}))"#,
                r#"81a1610184a16101a16404a16303a16202"#,
            ),
            (
                r#"local t = {} for i = 1, 15 do t['k' .. i] = 1 end local e = cmsgpack.pack(t) return hex(e:sub(1, 1)) .. ' ' .. #e"#,
                r#"8f 67"#,
            ),
            (
                r#"local t = {} for i = 1, 16 do t['k' .. i] = 1 end local e = cmsgpack.pack(t) return hex(e:sub(1, 3)) .. ' ' .. #e"#,
                r#"de0010 74"#,
            ),
            (
                r#"local t = {} for i = 1, 65535 do t[-i] = 0 end local e = cmsgpack.pack(t) return hex(e:sub(1, 3)) .. ' ' .. #e"#,
                r#"deffff 327517"#,
            ),
            (
                r#"local t = {} for i = 1, 65536 do t[-i] = 0 end local e = cmsgpack.pack(t) return hex(e:sub(1, 5)) .. ' ' .. #e"#,
                r#"df00010000 327525"#,
            ),
            (
                r#"return hex(cmsgpack.pack({1, 2, nil, 4}))"#,
                r#"83010102020404"#,
            ),
            (
                r#"return hex(cmsgpack.pack({[2] = 1}, {[0] = 1}, {[-1] = 1, [1] = 2}, {[1.5] = 1}, {n = 1, [1] = 2}))"#,
                r#"81020181000182ff01010281ca3fc0000001820102a16e01"#,
            ),
            (
                r#"return hex(cmsgpack.pack({[2^31] = 1}, {[2^31 - 1] = 1}, {[1e-300] = 1}, {[true] = 1}))"#,
                r#"81ce800000000181ce7fffffff0181cb01a56e1fc2f8f3590181c301"#,
            ),
        ]);
    }

    /// Tables nested 16 deep are nil, so cycles end ("cmsgpack can pack and unpack circular references?").
    #[test]
    fn packs_tables_16_deep() {
        assert_as_redis(&[
            (
                r#"local a = {x = nil, y = 5} local b = {x = a} a['x'] = b return hex(cmsgpack.pack(a))"#,
                r#"82a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a178c0"#,
            ),
            (
                r#"local a = {} a[1] = a return hex(cmsgpack.pack(a))"#,
                r#"91919191919191919191919191919191c0"#,
            ),
        ]);
    }

    /// No argument, more than 4000, the C stack checks of tables near that many; the function named as its caller named it; the fields.
    #[test]
    fn pack_errors_and_stack_limits() {
        assert_as_redis(&[
            (
                r#"local t = {} for i = 1, 4000 do t[i] = i end t[3999] = {1} return hex(cmsgpack.pack(unpack(t)):sub(1, 4))"#,
                r#"ERR user_script:1: stack overflow (in function table_is_an_array)"#,
            ),
            (
                r#"return show(cmsgpack.pack())"#,
                r#"ERR user_script:1: bad argument #0 to 'pack' (MessagePack pack needs input.)"#,
            ),
            (
                r#"local p = cmsgpack.pack return show(p())"#,
                r#"ERR user_script:1: bad argument #0 to 'p' (MessagePack pack needs input.)"#,
            ),
            (
                r#"return show(pcall(cmsgpack.pack))"#,
                r#"false "bad argument #0 to '?' (MessagePack pack needs input.)""#,
            ),
            (
                r#"local t = {} for i = 1, 4000 do t[i] = i end return tostring(#cmsgpack.pack(unpack(t)))"#,
                r#"11618"#,
            ),
            (
                r#"local t = {} for i = 1, 4001 do t[i] = i end return tostring(#cmsgpack.pack(unpack(t)))"#,
                r#"ERR user_script:1: bad argument #0 to 'pack' (Too many arguments for MessagePack pack.)"#,
            ),
            (
                r#"local t = {} for i = 1, 4000 do t[i] = i end t[4000] = {1} return tostring(#cmsgpack.pack(unpack(t)))"#,
                r#"ERR user_script:1: stack overflow (in function table_is_an_array)"#,
            ),
            (
                r#"local t = {} for i = 1, 4000 do t[i] = i end t[3999] = {a = {1}} return tostring(#cmsgpack.pack(unpack(t)))"#,
                r#"ERR user_script:1: stack overflow (in function table_is_an_array)"#,
            ),
            (
                r#"return show(cmsgpack._NAME, cmsgpack._VERSION, cmsgpack._COPYRIGHT, cmsgpack._DESCRIPTION)"#,
                r#""cmsgpack" "lua-cmsgpack 0.4.0" "Copyright (C) 2012, Salvatore Sanfilippo" "MessagePack C implementation for Lua""#,
            ),
            (
                r#"local t = {} for i = 1, 4000 do t[i] = i end t[3990] = {1} return hex(cmsgpack.pack(unpack(t)):sub(-30, -20))"#,
                r#"cd0f97cd0f98cd0f99cd0f"#,
            ),
        ]);
    }

    /// Every form the library reads, uint 64 past int64 wrapped as lua_pushinteger does, a number argument read as its string.
    #[test]
    fn unpacks_every_form() {
        assert_as_redis(&[
            (
                r#"return show(cmsgpack.unpack(string.char(0, 0x7f, 0xcc, 200, 0xcd, 1, 2, 0xce, 255, 255, 255, 255)))"#,
                r#"0 127 200 258 4294967295"#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xe0, 0xff, 0xd0, 128, 0xd1, 255, 1, 0xd2, 128, 0, 0, 0)))"#,
                r#"-32 -1 -128 -255 -2147483648"#,
            ),
            (
                r#"return string.format('%.17g %.17g', cmsgpack.unpack(string.char(0xcf, 0x80, 0, 0, 0, 0, 0, 0, 1, 0xcf, 255, 255, 255, 255, 255, 255, 255, 255)))"#,
                r#"-9.2233720368547758e+18 -1"#,
            ),
            (
                r#"return string.format('%.17g %.17g', cmsgpack.unpack(string.char(0xd3, 0x80, 0, 0, 0, 0, 0, 0, 1, 0xd3, 0x7f, 255, 255, 255, 255, 255, 255, 255)))"#,
                r#"-9.2233720368547758e+18 9.2233720368547758e+18"#,
            ),
            (
                r#"return string.format('%.17g %.17g %.17g', cmsgpack.unpack(string.char(0xca, 0x3d, 0xcc, 0xcc, 0xcd, 0xca, 0x7f, 0x80, 0, 0, 0xcb, 0x3f, 0xb9, 0x99, 0x99, 0x99, 0x99, 0x99, 0x9a)))"#,
                r#"0.10000000149011612 inf 0.10000000000000001"#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xc0, 0xc2, 0xc3, 0xa0, 0xa3, 97, 98, 99, 0xd9, 2, 104, 105, 0xda, 0, 1, 33, 0xdb, 0, 0, 0, 2, 0, 1)))"#,
                r#"nil false true "" "abc" "hi" "!" "\000""#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x90, 0x80, 0x93, 1, 0xc0, 3, 0x82, 0xa1, 97, 0x91, 1, 2, 0xc0)))"#,
                r#"{} {} {1=1,3=3} {"a"={1=1}}"#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xdc, 0, 2, 1, 2, 0xdd, 0, 0, 0, 1, 7, 0xde, 0, 1, 1, 2, 0xdf, 0, 0, 0, 1, 0xca, 0x3f, 0xc0, 0, 0, 9)))"#,
                r#"{1=1,2=2} {1=7} {1=2} {1.5=9}"#,
            ),
            (r#"return show(cmsgpack.unpack(''))"#, r#""#),
            (r#"return show(cmsgpack.unpack(5))"#, r#"53"#),
            (
                r#"return show(cmsgpack.unpack(cmsgpack.pack(1, -1, 0.1, 'abc', true, false, nil, 1e100, 2^40, {1, {a = {}}})))"#,
                r#"1 -1 0.1 "abc" true false nil 1e+100 1099511627776 {1=1,2={"a"={}}}"#,
            ),
            (
                r#"local a = {x = nil, y = 5} local b = {x = a} a['x'] = b local re = cmsgpack.unpack(cmsgpack.pack(a)) return show(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y, re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y, re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x)"#,
                r#"5 nil nil"#,
            ),
        ]);
    }

    /// Bin, ext, fixext and 0xc1; truncated data; nil and NaN map keys (Lua core errors, without position); argument errors.
    #[test]
    fn unpack_errors() {
        assert_as_redis(&[
            (
                r#"return show(cmsgpack.unpack(string.char(0xc1)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xc4, 1, 0)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xc7, 1, 1, 0)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xd4, 1, 1)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(1, 0x92, 0xc1)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xcd, 1)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xcb, 0, 0, 0)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xa5, 65, 66)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xd9)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xdb, 0, 0, 0, 5, 65)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x92, 1)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0xdd, 255, 255, 255, 255)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x81, 1)))"#,
                r#"ERR user_script:1: Missing bytes in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x81, 0xc0, 1)))"#,
                r#"ERR table index is nil"#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x81, 0xcb, 0xff, 0xf8, 0, 0, 0, 0, 0, 0, 1)))"#,
                r#"ERR table index is NaN"#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x81, 0xc0, 0xc1)))"#,
                r#"ERR user_script:1: Bad data format in input."#,
            ),
            (
                r#"return show(cmsgpack.unpack(string.char(0x81, 1, 0xc0)))"#,
                r#"{}"#,
            ),
            (
                r#"return show(pcall(cmsgpack.unpack, string.char(0x81, 0xc0, 1)))"#,
                r#"false "table index is nil""#,
            ),
            (
                r#"return show(pcall(cmsgpack.unpack, string.char(0xc1)))"#,
                r#"false "Bad data format in input.""#,
            ),
            (
                r#"return show(cmsgpack.unpack())"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack' (string expected, got no value)"#,
            ),
            (
                r#"return show(cmsgpack.unpack({}))"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack' (string expected, got table)"#,
            ),
        ]);
    }

    /// The next offset first (-1 at the end), then the values; limit 0 and offset 0 decode everything; offset and limit errors.
    #[test]
    fn unpack_one_and_unpack_limit_return_the_next_offset() {
        assert_as_redis(&[
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3})))"#,
                r#"1 1"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 1))"#,
                r#"5 "two""#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 5))"#,
                r#"-1 {1=3}"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 6))"#,
                r#"-1 3"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), '1'))"#,
                r#"5 "two""#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 1.9))"#,
                r#"5 "two""#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 2))"#,
                r#"3 116"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 7))"#,
                r#"-1"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), -1))"#,
                r#"ERR user_script:1: Invalid request to unpack with offset of -1 and limit of 7."#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(cmsgpack.pack(1, 'two', {3}), 'x'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack_one' (number expected, got string)"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one())"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack_one' (string expected, got no value)"#,
            ),
            (
                r#"return show(cmsgpack.unpack_one(nil, 1))"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack_one' (string expected, got nil)"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 2))"#,
                r#"5 1 "two""#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 2, 1))"#,
                r#"-1 "two" {1=3}"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 9, 1))"#,
                r#"-1 "two" {1=3}"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 0))"#,
                r#"1 "two" {1=3}"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 0, 1))"#,
                r#"1"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 0, 6))"#,
                r#"6"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), -1))"#,
                r#"ERR user_script:1: Invalid request to unpack with offset of 0 and limit of 7."#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 1, -4294967297))"#,
                r#"ERR user_script:1: Invalid request to unpack with offset of -1 and limit of 7."#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 1, 99))"#,
                r#"ERR user_script:1: Start offset 99 greater than input length 7."#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3})))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got no value)"#,
            ),
            (
                r#"return show(cmsgpack.unpack_limit(cmsgpack.pack(1, 'two', {3}), 'x'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack_limit' (number expected, got string)"#,
            ),
        ]);
    }

    /// At most 7999 values (fewer with more arguments; unpack_limit needs a slot for the offset); nesting about 4000 deep.
    #[test]
    fn unpack_stack_limits() {
        assert_as_redis(&[
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(1), 7999))))"#,
                r#"7999"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(1), 8000))))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(1), 7998), 1)))"#,
                r#"7998"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(1), 7999), 1)))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack_limit(string.rep(string.char(1), 8000), 7998)))"#,
                r#"7999"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack_limit(string.rep(string.char(1), 8000), 7999)))"#,
                r#"ERR user_script:1: stack overflow (in function mp_unpack_full)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack_limit(string.rep(string.char(1), 8000), 8000)))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x91), 3999) .. string.char(1))))"#,
                r#"1"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x91), 3999) .. string.char(0x90))))"#,
                r#"ERR user_script:1: stack overflow (in function mp_decode_to_lua_array)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x91), 4000) .. string.char(1))))"#,
                r#"ERR user_script:1: stack overflow (in function mp_decode_to_lua_array)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x81, 0xa1, 0x61), 3999) .. string.char(1))))"#,
                r#"1"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x81, 0xa1, 0x61), 3998) .. string.char(0x81, 1, 1))))"#,
                r#"1"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x81, 0xa1, 0x61), 4000) .. string.char(1))))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x81), 7998) .. string.char(1, 1))))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
            (
                r#"return show(select('#', cmsgpack.unpack(string.rep(string.char(0x81), 7999) .. string.char(1))))"#,
                r#"ERR user_script:1: stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"#,
            ),
        ]);
    }

    /// Redis's "cmsgpack pack/unpack smoke test": strings, numbers, arrays and maps of every
    /// size class through pack and back, unpack_one and unpack_limit over a stream.
    #[test]
    fn redis_smoke_test() {
        let script = r#"
            local str_lt_32 = string.rep("x", 30)
            local str_lt_255 = string.rep("x", 250)
            local str_lt_65535 = string.rep("x", 65530)
            local str_long = string.rep("x", 100000)
            local array_big = {}
            for i = 1, 100000 do array_big[i] = i end
            local map_big = {}
            for i = 1, 100000 do map_big[tostring(i)] = i end
            local some_map = {
                s1 = str_lt_32, s2 = str_lt_255, s3 = str_lt_65535, s4 = str_long,
                d1 = 0.1, i1 = 1, i2 = 250, i3 = 65530, i4 = 100000, i5 = 2^40, i6 = -1,
                i7 = -120, i8 = -32000, i9 = -100000, i10 = -3147483648,
                a1 = {1, 2, 3, 4, 5},
                a2 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18},
                a3 = array_big, m1 = {a = 1, b = 2}, m2 = map_big, b1 = false, b2 = true, n = nil
            }
            local encoded = cmsgpack.pack(some_map)
            local decoded = cmsgpack.unpack(encoded)
            assert(table.concat(some_map) == table.concat(decoded))
            local offset, decoded_one = cmsgpack.unpack_one(encoded, 0)
            assert(table.concat(some_map) == table.concat(decoded_one))
            assert(offset == -1)
            for k, v in pairs(some_map) do
                if type(v) ~= "table" then assert(decoded[k] == v, k) end
            end
            assert(#decoded.a3 == 100000 and decoded.a3[99999] == 99999)
            assert(decoded.m2["54321"] == 54321)
            local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
            local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
            assert(obj == str_lt_32)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_255)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_65535)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_long)
            assert(offset == -1)
            return "ok"
        "#;
        assert_eq!(crate::vm::testing::run(script), "ok");
    }

    /// The one known difference: of 7998 or 7999 values (more than `unpack(t, 1, n)` can
    /// return), trailing nils are left out, where Redis returns 7999 here.
    #[test]
    fn trailing_nils_of_the_most_values_are_left_out() {
        let script = "return show(select('#', cmsgpack.unpack(string.rep(string.char(1), 7998) \
                      .. string.char(0xc0))), select(7998, cmsgpack.unpack(string.rep(\
                      string.char(1), 7998) .. string.char(0xc0))))";
        assert_eq!(crate::vm::testing::run(script), "7998 1");
    }

    /// The library's table is read-only, as Redis's ("Try trick readonly table on cmsgpack
    /// table").
    #[test]
    fn the_table_is_read_only() {
        assert_as_redis(&[(
            "cmsgpack.pack = function() return 1 end",
            "ERR user_script:1: Attempt to modify a readonly table",
        )]);
    }
}
