//! Redis's `struct` library: Roberto Ierusalimschy's struct.c (1.7) as Redis 7.0 bundles it,
//! with Redis's fixes (format sizes that overflow an int, offsets checked against the data),
//! built for x86-64: `pack(fmt, ...)`, `unpack(fmt, data [, pos])` and `size(fmt)`, byte for
//! byte and error for error.
//!
//! Format options: `>` big endian, `<` little endian (the default, native), `!n` aligns
//! options to n bytes at most (`!` alone: 8; none: no padding), `x` a zero byte, `b/B` `h/H` `l/L` `T` signed/unsigned char, short, long and
//! size_t, `in/In` an integer of n bytes (default 4, at most 32), `f` `d` float and double,
//! `s` a zero-terminated string, `cn` n chars (`c0`: the whole string when packing, the length
//! read just before when unpacking), and spaces. A format ends at its first zero byte, as a C
//! string does.

use mlua::{Lua, Table, Value};

use crate::capi::{self, check_stack, Args, CResult, Raise, Results};

/// MAXINTSIZE: the largest integer option, in bytes.
const MAX_INT_SIZE: usize = 32;

/// MAXALIGN: `!` alone (the alignment of a double).
const MAX_ALIGN: usize = 8;

/// Builds the `struct` table of functions for prelude.lua's wrapper (see `capi`).
pub fn library(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("pack", capi::function(lua, pack)?)?;
    t.set("unpack", capi::function(lua, unpack)?)?;
    t.set("size", capi::function(lua, size)?)?;
    Ok(t)
}

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

/// A format being read, with its `Header` (endianness and alignment).
struct Format<'a> {
    fmt: &'a [u8],
    pos: usize,
    endian: Endian,
    align: usize,
}

impl<'a> Format<'a> {
    fn new(fmt: &'a [u8]) -> Format<'a> {
        let end = fmt.iter().position(|&b| b == 0).unwrap_or(fmt.len());
        Format {
            fmt: &fmt[..end],
            pos: 0,
            endian: Endian::Little,
            align: 1,
        }
    }

    fn next_option(&mut self) -> Option<u8> {
        let opt = *self.fmt.get(self.pos)?;
        self.pos += 1;
        Some(opt)
    }

    /// `getnum`: the digits that follow, or `default`; an int's overflow is an error.
    fn number(&mut self, default: usize) -> CResult<usize> {
        if !self.fmt.get(self.pos).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: usize = 0;
        while let Some(d) = self.fmt.get(self.pos).filter(|d| d.is_ascii_digit()) {
            let d = usize::from(d - b'0');
            if a > i32::MAX as usize / 10 || a * 10 > i32::MAX as usize - d {
                return Err(Raise::error("integral size overflow"));
            }
            a = a * 10 + d;
            self.pos += 1;
        }
        Ok(a)
    }

    /// `optsize`: the bytes option `opt` takes (0 for the options that are not data).
    fn size(&mut self, opt: u8) -> CResult<usize> {
        Ok(match opt {
            b'b' | b'B' | b'x' => 1,
            b'h' | b'H' => 2,
            b'l' | b'L' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let size = self.number(4)?;
                if size > MAX_INT_SIZE {
                    return Err(Raise::error(format!(
                        "integral size {size} is larger than limit of {MAX_INT_SIZE}"
                    )));
                }
                size
            }
            _ => 0,
        })
    }

    /// `gettoalign`: the padding before an option of `size` bytes at `len`. The arithmetic is
    /// the C library's, also for sizes that are not powers of 2 (`i3`).
    fn padding(&self, len: usize, opt: u8, size: usize) -> usize {
        if size == 0 || opt == b'c' {
            return 0;
        }
        let size = size.min(self.align);
        (size - (len & (size - 1))) & (size - 1)
    }

    /// `controloptions`: endianness, alignment and spaces; anything else is an invalid
    /// option.
    fn control(&mut self, opt: u8) -> CResult<()> {
        match opt {
            b' ' => {}
            b'>' => self.endian = Endian::Big,
            b'<' => self.endian = Endian::Little,
            b'!' => {
                let a = self.number(MAX_ALIGN)?;
                if !a.is_power_of_two() {
                    return Err(Raise::error(format!("alignment {a} is not a power of 2")));
                }
                self.align = a;
            }
            _ => {
                let mut msg = b"invalid format option '".to_vec();
                msg.push(opt);
                msg.push(b'\'');
                return Err(Raise::Arg(1, msg));
            }
        }
        Ok(())
    }
}

/// The bytes of an integer of `size` bytes: the low 8 bytes of `value`, zeros above.
fn put_integer(out: &mut Vec<u8>, value: u64, endian: Endian, size: usize) {
    let mut bytes = vec![0; size];
    let mut value = value;
    for i in 0..size {
        let at = match endian {
            Endian::Little => i,
            Endian::Big => size - 1 - i,
        };
        bytes[at] = value.to_le_bytes()[0];
        value >>= 8;
    }
    out.extend_from_slice(&bytes);
}

/// `struct.pack(fmt, ...)`.
fn pack(lua: &Lua, args: &Args) -> CResult<Results> {
    let fmt = args.check_string(1)?;
    let fmt = fmt.as_bytes();
    // A nil marks the end of the arguments on the C function's stack: a missing argument is
    // "got nil".
    let args = args.with_nil_pushed();
    let mut f = Format::new(&fmt);
    let mut arg = 2;
    let mut out = Vec::new();
    while let Some(opt) = f.next_option() {
        let size = f.size(opt)?;
        let padding = f.padding(out.len(), opt, size);
        out.resize(out.len() + padding, 0);
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = args.check_number(arg)?;
                arg += 1;
                // `(unsigned long)(long)n` below zero, `(unsigned long)n` from zero, as x86-64
                // converts them.
                let value = if n < 0.0 {
                    capi::double_to_i64(n) as u64
                } else {
                    capi::double_to_u64(n)
                };
                put_integer(&mut out, value, f.endian, size);
            }
            b'x' => out.push(0),
            b'f' => {
                // C's `(float)`: rounded to nearest, infinite past the float range.
                let x = args.check_number(arg)? as f32;
                arg += 1;
                out.extend_from_slice(&match f.endian {
                    Endian::Big => x.to_be_bytes(),
                    Endian::Little => x.to_le_bytes(),
                });
            }
            b'd' => {
                let x = args.check_number(arg)?;
                arg += 1;
                out.extend_from_slice(&match f.endian {
                    Endian::Big => x.to_be_bytes(),
                    Endian::Little => x.to_le_bytes(),
                });
            }
            b'c' | b's' => {
                let s = args.check_string(arg)?;
                let s = s.as_bytes();
                arg += 1;
                let size = if size == 0 { s.len() } else { size };
                if s.len() < size {
                    // The C library checks after moving to the next argument, and names it.
                    return Err(Raise::arg(arg, "string too short"));
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => f.control(opt)?,
        }
    }
    capi::single(lua, Value::String(lua.create_string(&out)?))
}

/// The number in `bytes` (`getinteger`): the last 8 bytes read count, and a signed one is
/// sign-extended from its top bit as x86-64 runs the C code, whose shift by `size * 8 - 1`
/// is taken modulo 64 (for `i9` the sign bit is bit 7).
fn get_integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut add = |b: &u8| l = (l << 8) | u64::from(*b);
    match endian {
        Endian::Big => bytes.iter().for_each(&mut add),
        Endian::Little => bytes.iter().rev().for_each(&mut add),
    }
    if !signed {
        // `(lua_Number)` of an unsigned long: the nearest double.
        return l as f64;
    }
    let shift = (bytes.len() * 8).wrapping_sub(1) % 64;
    let mask = u64::MAX << shift;
    if l & mask != 0 {
        l |= mask;
    }
    // `(lua_Number)(long)`: the bits as a signed long, then the nearest double.
    l as i64 as f64
}

/// `struct.unpack(fmt, data [, pos])`: the values, then the position after them.
fn unpack(lua: &Lua, args: &Args) -> CResult<Results> {
    let fmt = args.check_string(1)?;
    let fmt = fmt.as_bytes();
    let data = args.check_string(2)?;
    let data = data.as_bytes();
    let len = data.len();
    // `size_t pos = luaL_optinteger(...)`: a negative position wraps to a huge one.
    let pos = args.opt_integer(3, 1)? as usize;
    if pos == 0 {
        return Err(Raise::arg(3, "offset must be 1 or greater"));
    }
    let mut pos = pos - 1;
    let fits = |pos: usize, size: usize| size <= len && pos <= len - size;
    let mut f = Format::new(&fmt);
    let mut results = Results::new(lua)?;
    while let Some(opt) = f.next_option() {
        let mut size = f.size(opt)?;
        pos = pos.wrapping_add(f.padding(pos, opt, size));
        if !fits(pos, size) {
            return Err(Raise::arg(2, "data string too short"));
        }
        // Room for this value and the final position above the arguments and values.
        check_stack(args.len() + results.len(), 2, "too many results")?;
        let bytes = &data[pos..pos + size];
        match opt {
            b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I' => {
                let n = get_integer(bytes, f.endian, opt.is_ascii_lowercase());
                results.push(Value::Number(n))?;
            }
            b'x' => {}
            b'f' => {
                let mut b = [0; 4];
                b.copy_from_slice(bytes);
                let x = match f.endian {
                    Endian::Big => f32::from_be_bytes(b),
                    Endian::Little => f32::from_le_bytes(b),
                };
                results.push(Value::Number(f64::from(x)))?;
            }
            b'd' => {
                let mut b = [0; 8];
                b.copy_from_slice(bytes);
                let x = match f.endian {
                    Endian::Big => f64::from_be_bytes(b),
                    Endian::Little => f64::from_le_bytes(b),
                };
                results.push(Value::Number(x))?;
            }
            b'c' => {
                if size == 0 {
                    // The length is the value just read (a number, or a string Lua reads as
                    // one), cast to size_t, and takes that value's place.
                    let previous = if results.is_empty() {
                        None
                    } else {
                        capi::to_number(lua, results.last()?)?
                    };
                    let Some(n) = previous else {
                        return Err(Raise::error("format 'c0' needs a previous size"));
                    };
                    size = capi::double_to_u64(n) as usize;
                    results.pop()?;
                    if !fits(pos, size) {
                        return Err(Raise::arg(2, "data string too short"));
                    }
                }
                let s = lua.create_string(&data[pos..pos + size])?;
                results.push(Value::String(s))?;
            }
            b's' => {
                let Some(end) = data[pos..].iter().position(|&b| b == 0) else {
                    return Err(Raise::error("unfinished string in data"));
                };
                size = end + 1;
                let s = lua.create_string(&data[pos..pos + end])?;
                results.push(Value::String(s))?;
            }
            _ => f.control(opt)?,
        }
        pos = pos.wrapping_add(size);
    }
    // `lua_pushinteger(L, pos + 1)`: the size_t as a ptrdiff_t.
    results.push(Value::Integer(pos.wrapping_add(1) as i64))?;
    Ok(results)
}

/// `struct.size(fmt)`: the bytes `pack` makes. Letters that are no option count 0 bytes
/// (only non-alphanumeric options are checked).
fn size(lua: &Lua, args: &Args) -> CResult<Results> {
    let fmt = args.check_string(1)?;
    let fmt = fmt.as_bytes();
    let mut f = Format::new(&fmt);
    let mut pos: usize = 0;
    while let Some(opt) = f.next_option() {
        let size = f.size(opt)?;
        pos = pos.wrapping_add(f.padding(pos, opt, size));
        if opt == b's' {
            return Err(Raise::arg(1, "option 's' has no fixed size"));
        }
        if opt == b'c' && size == 0 {
            return Err(Raise::arg(1, "option 'c0' has no fixed size"));
        }
        if !opt.is_ascii_alphanumeric() {
            f.control(opt)?;
        }
        pos = pos.wrapping_add(size);
    }
    // `lua_pushinteger` of a size_t.
    capi::single(lua, Value::Integer(pos as i64))
}

/// Scripts run through the whole environment (prelude.lua's wrapper included), each compared
/// with what redis-server 7.0.15 returned for it.
#[cfg(test)]
mod tests {
    use crate::vm::testing::assert_as_redis;

    /// Every integer option in both byte orders, sizes 0 to 16 (zeros above the low 8 bytes), and doubles converted as x86-64 converts them (wrapping, 2^64 and NaN, truncation).
    #[test]
    fn packs_integers() {
        assert_as_redis(&[
            (
                r#"return hex(struct.pack('bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5))"#,
                r#"fffffefffffffdffffffffffffff00000000000100000700000000000000fcffffff05000000"#,
            ),
            (
                r#"return hex(struct.pack('>bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5))"#,
                r#"fffffffefffffffffffffffffffd00000100000000000000000000000007fffffffc00000005"#,
            ),
            (
                r#"return hex(struct.pack('<b>h<h', 1, 2, 3))"#,
                r#"0100020300"#,
            ),
            (
                r#"return hex(struct.pack('>i1i2i3i5i7I1I2I3I5I7', -1, -2, -3, -5, -7, 1, 2, 3, 5, 7))"#,
                r#"fffffefffffdfffffffffbfffffffffffff9010002000003000000000500000000000007"#,
            ),
            (
                r#"return hex(struct.pack('<i16', -1) .. '|' .. struct.pack('>i16', -1) .. '|' .. struct.pack('>I9', 2^64 - 2^11) .. '|' .. struct.pack('>i0', 5) .. '|' .. struct.pack('>I3', 2^24 + 5))"#,
                r#"ffffffffffffffff00000000000000007c0000000000000000ffffffffffffffff7c00fffffffffffff8007c7c000005"#,
            ),
            (
                r#"return hex(struct.pack('bBhb', 300, -1, 70000, 1.9) .. struct.pack('b', -1.9) .. struct.pack('>l', -0.5))"#,
                r#"2cff701101ff0000000000000000"#,
            ),
            (
                r#"return hex(struct.pack('>L', 1e20) .. struct.pack('>L', 0/0) .. struct.pack('>L', math.huge) .. struct.pack('>l', -math.huge) .. struct.pack('>l', -1e30))"#,
                r#"00000000000000008000000000000000000000000000000080000000000000008000000000000000"#,
            ),
            (
                r#"return hex(struct.pack('>L', 2^63) .. struct.pack('>L', 2^64) .. struct.pack('>L', 2^63 + 2^62) .. struct.pack('>l', 2^63))"#,
                r#"80000000000000000000000000000000c0000000000000008000000000000000"#,
            ),
        ]);
    }

    /// f and d in both byte orders, x, spaces, s and c (c0: the whole string; numbers as Lua writes them); a format ends at a zero byte.
    #[test]
    fn packs_floats_strings_and_padding() {
        assert_as_redis(&[
            (
                r#"return hex(struct.pack('fd', 0.1, 0.1) .. '|' .. struct.pack('>fd', 0.1, 0.1) .. '|' .. struct.pack('<f>f', 1e300, 0/0) .. '|' .. struct.pack('>d', -5e-324))"#,
                r#"cdcccc3d9a9999999999b93f7c3dcccccd3fb999999999999a7c0000807fffc000007c8000000000000001"#,
            ),
            (
                r#"return hex(struct.pack('x') .. '|' .. struct.pack('xbx', 1) .. '|' .. struct.pack('  b  ', 2))"#,
                r#"007c0001007c02"#,
            ),
            (
                r#"return hex(struct.pack('s', 'hello') .. '|' .. struct.pack('s', 'a\0b') .. '|' .. struct.pack('c3', 'hello') .. '|' .. struct.pack('c0', 'hello') .. '|' .. struct.pack('c', 'hello') .. '|' .. struct.pack('c0', ''))"#,
                r#"68656c6c6f007c610062007c68656c7c68656c6c6f7c687c"#,
            ),
            (
                r#"return hex(struct.pack('s', 12.5) .. '|' .. struct.pack('c0', 1e-300) .. '|' .. struct.pack('i', '12') .. '|' .. struct.pack('i', ' 0x10 ') .. '|' .. struct.pack('d', '1e-300'))"#,
                r#"31322e35007c31652d3330307c0c0000007c100000007c59f3f8c21f6ea501"#,
            ),
            (r#"return hex(struct.pack('b\0b', 1, 2))"#, r#"01"#),
        ]);
    }

    /// ! aligns each option to the smaller of its size and the alignment (default 8), with the C arithmetic for sizes that are not powers of 2; c is never aligned.
    #[test]
    fn aligns() {
        assert_as_redis(&[
            (
                r#"return hex(struct.pack('!bi', 1, 2) .. '|' .. struct.pack('!2bd', 1, 2) .. '|' .. struct.pack('!4bhbib', 1, 2, 3, 4, 5) .. '|' .. struct.pack('!8bi3', 1, 2))"#,
                r#"01000000020000007c010000000000000000407c010002000300000004000000057c010000020000"#,
            ),
            (
                r#"return hex(struct.pack('!bxi3', 1, 2) .. '|' .. struct.pack('!16bd', 1, 2) .. '|' .. struct.pack('bi8', 1, 2) .. '|' .. struct.pack('!bc3i', 1, 'abc', 2) .. '|' .. struct.pack('!bsh', 1, 'a', 2))"#,
                r#"01000200007c010000000000000000000000000000407c0102000000000000007c01616263020000007c016100000200"#,
            ),
        ]);
    }

    /// Round trips; signed options sign-extended from bit size*8-1 modulo 64 (i9 from bit 7); c0 takes the previous number (or numeric string); positions, negative ones wrapped.
    #[test]
    fn unpacks() {
        assert_as_redis(&[
            (
                r#"return show(struct.unpack('bBhHlLTiI', struct.pack('bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5)))"#,
                r#"-1 255 -2 65535 -3 1099511627776 7 -4 5 39"#,
            ),
            (
                r#"return show(struct.unpack('>bBhHlLTiI', struct.pack('>bBhHlLTiI', -1, 255, -2, 65535, -3, 2^40, 7, -4, 5)))"#,
                r#"-1 255 -2 65535 -3 1099511627776 7 -4 5 39"#,
            ),
            (
                r#"return show(struct.unpack('<i2>i2<I2>I2', string.char(0xfe, 0xff, 0xff, 0xfe, 0xfe, 0xff, 0xff, 0xfe)))"#,
                r#"-2 -2 65534 65534 9"#,
            ),
            (
                r#"local a, b = struct.unpack('>Ll', string.rep(string.char(255), 16)) local c = struct.unpack('<L', string.char(1, 0, 0, 0, 0, 0, 0, 128)) return string.format('%.17g %.17g %.17g', a, b, c)"#,
                r#"1.8446744073709552e+19 -1 9.2233720368547758e+18"#,
            ),
            (
                r#"return show(struct.unpack('>i9', string.rep(string.char(0), 8) .. string.char(0x80))) .. ' ' .. show(struct.unpack('>i9', string.rep(string.char(0), 8) .. string.char(0x7f))) .. ' ' .. show(struct.unpack('>i12', string.rep(string.char(0), 11) .. string.char(0x80)))"#,
                r#"-128 10 127 10 128 13"#,
            ),
            (
                r#"return show(struct.unpack('<i0', 'abc')) .. ' ' .. show(struct.unpack('>i16', string.rep(string.char(255), 16))) .. ' ' .. show(struct.unpack('<i32', string.rep(string.char(255), 32))) .. ' ' .. show(struct.unpack('<I9', string.rep(string.char(255), 8) .. string.char(1)))"#,
                r#"0 1 -1 17 -1 33 1.844674407371e+19 10"#,
            ),
            (
                r#"return string.format('%.17g %.17g %.17g %.17g', struct.unpack('f>fd', struct.pack('f>fd', 0.1, 1.5, -2.25)))"#,
                r#"0.10000000149011612 1.5 -2.25 17"#,
            ),
            (
                r#"return show(struct.unpack('c1c0', '5hello')) .. ' ' .. show(struct.unpack('bc0', string.char(3) .. 'abcdef')) .. ' ' .. show(struct.unpack('ss', 'ab\0cd\0e')) .. ' ' .. show(struct.unpack('xc2', 'abc'))"#,
                r#""hello" 7 "abc" 5 "ab" "cd" 7 "bc" 4"#,
            ),
            (
                r#"return show(struct.unpack('!4bi', 'abcdefgh')) .. ' ' .. show(struct.unpack('b', 'abc', 3)) .. ' ' .. show(struct.unpack('b', 'abc', '2')) .. ' ' .. show(struct.unpack('b', 123)) .. ' ' .. show(struct.unpack('b', 'a', 1, 2, 3))"#,
                r#"97 1751606885 9 99 4 98 3 49 2 97 2"#,
            ),
            (
                r#"return show(struct.unpack('', 'abc', -1)) .. ' ' .. show(struct.unpack('', 'abc', 1e30)) .. ' ' .. show(struct.unpack('', 'abc', 4))"#,
                r#"-1 -9.2233720368548e+18 4"#,
            ),
        ]);
    }

    /// size counts letters that are no option as 0 bytes and checks only the other options.
    #[test]
    fn sizes() {
        assert_as_redis(&[(
            r#"return show(struct.size('bhlTifdxc5'), struct.size('!bhlTifdxc5'), struct.size('!bi'), struct.size('!2bd'), struct.size('i3i3'), struct.size('!i3i3'), struct.size(''), struct.size('q'), struct.size('5i'), struct.size(12), struct.size('c2147483647c2147483647c2147483647'))"#,
            r#"41 46 8 10 6 10 0 0 4 0 6442450941"#,
        )]);
    }

    /// Argument errors as luaL_argerror words them (a missing argument is "got nil", after the nil the C code pushes; "string too short" names the next argument), format errors, calls through pcall, methods and locals.
    #[test]
    fn pack_errors() {
        assert_as_redis(&[
            (
                r#"return struct.pack('q')"#,
                r#"ERR user_script:1: bad argument #1 to 'pack' (invalid format option 'q')"#,
            ),
            (
                r#"return struct.pack('=i', 1)"#,
                r#"ERR user_script:1: bad argument #1 to 'pack' (invalid format option '=')"#,
            ),
            (
                r#"return struct.pack('b')"#,
                r#"ERR user_script:1: bad argument #2 to 'pack' (number expected, got nil)"#,
            ),
            (
                r#"return struct.pack('bb', 1)"#,
                r#"ERR user_script:1: bad argument #3 to 'pack' (number expected, got nil)"#,
            ),
            (
                r#"return struct.pack('b', 'x')"#,
                r#"ERR user_script:1: bad argument #2 to 'pack' (number expected, got string)"#,
            ),
            (
                r#"return struct.pack('b', {})"#,
                r#"ERR user_script:1: bad argument #2 to 'pack' (number expected, got table)"#,
            ),
            (
                r#"return struct.pack('s')"#,
                r#"ERR user_script:1: bad argument #2 to 'pack' (string expected, got nil)"#,
            ),
            (
                r#"return struct.pack('c', true)"#,
                r#"ERR user_script:1: bad argument #2 to 'pack' (string expected, got boolean)"#,
            ),
            (
                r#"return struct.pack('c5', 'ab')"#,
                r#"ERR user_script:1: bad argument #3 to 'pack' (string too short)"#,
            ),
            (
                r#"return struct.pack('bc5', 1, 'ab')"#,
                r#"ERR user_script:1: bad argument #4 to 'pack' (string too short)"#,
            ),
            (
                r#"return struct.pack('i33', 1)"#,
                r#"ERR user_script:1: integral size 33 is larger than limit of 32"#,
            ),
            (
                r#"return struct.pack('!3b', 1)"#,
                r#"ERR user_script:1: alignment 3 is not a power of 2"#,
            ),
            (
                r#"return struct.pack('!0b', 1)"#,
                r#"ERR user_script:1: alignment 0 is not a power of 2"#,
            ),
            (
                r#"return struct.pack()"#,
                r#"ERR user_script:1: bad argument #1 to 'pack' (string expected, got no value)"#,
            ),
            (
                r#"return struct.pack(12)"#,
                r#"ERR user_script:1: bad argument #1 to 'pack' (invalid format option '1')"#,
            ),
            (
                r#"return struct:pack('b')"#,
                r#"ERR user_script:1: calling 'pack' on bad self (string expected, got table)"#,
            ),
            (
                r#"return show(pcall(struct.pack, 'q'))"#,
                r#"false "bad argument #1 to '?' (invalid format option 'q')""#,
            ),
            (
                r#"local s = struct.size return s('s')"#,
                r#"ERR user_script:1: bad argument #1 to 's' (option 's' has no fixed size)"#,
            ),
        ]);
    }

    /// Short data, c0 without a previous number, unfinished strings, offsets, bad options.
    #[test]
    fn unpack_and_size_errors() {
        assert_as_redis(&[
            (
                r#"return show(struct.unpack('bc0', string.char(255) .. 'abc'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('c0', 'abc'))"#,
                r#"ERR user_script:1: format 'c0' needs a previous size"#,
            ),
            (
                r#"return show(struct.unpack('xc0', 'abc'))"#,
                r#"ERR user_script:1: format 'c0' needs a previous size"#,
            ),
            (
                r#"return show(struct.unpack('s', 'abc'))"#,
                r#"ERR user_script:1: unfinished string in data"#,
            ),
            (
                r#"return show(struct.unpack('c3', 'ab'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('', 'abc', 0))"#,
                r#"ERR user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater)"#,
            ),
            (
                r#"return show(struct.unpack('', 'abc', 0.5))"#,
                r#"ERR user_script:1: bad argument #3 to 'unpack' (offset must be 1 or greater)"#,
            ),
            (
                r#"return show(struct.unpack('>', 'abc', 5))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('q', 'abc', 5))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('q', 'abc'))"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack' (invalid format option 'q')"#,
            ),
            (
                r#"return show(struct.unpack('b', 'abc', 'x'))"#,
                r#"ERR user_script:1: bad argument #3 to 'unpack' (number expected, got string)"#,
            ),
            (
                r#"return show(struct.unpack('b', 'abc', 4))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('!4bi', 'abcdefg'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('b'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (string expected, got no value)"#,
            ),
            (
                r#"return show(struct.unpack())"#,
                r#"ERR user_script:1: bad argument #1 to 'unpack' (string expected, got no value)"#,
            ),
            (
                r#"return show(struct.unpack('i40', 'abc'))"#,
                r#"ERR user_script:1: integral size 40 is larger than limit of 32"#,
            ),
            (
                r#"return show(struct.unpack('!5', 'abc'))"#,
                r#"ERR user_script:1: alignment 5 is not a power of 2"#,
            ),
            (
                r#"return show(pcall(struct.unpack, 'b'))"#,
                r#"false "bad argument #2 to '?' (string expected, got no value)""#,
            ),
            (
                r#"return show(struct.size('=i'))"#,
                r#"ERR user_script:1: bad argument #1 to 'size' (invalid format option '=')"#,
            ),
            (
                r#"return show(struct.size('!3b'))"#,
                r#"ERR user_script:1: alignment 3 is not a power of 2"#,
            ),
            (
                r#"return show(struct.size('i33'))"#,
                r#"ERR user_script:1: integral size 33 is larger than limit of 32"#,
            ),
            (
                r#"return show(struct.size('c0'))"#,
                r#"ERR user_script:1: bad argument #1 to 'size' (option 'c0' has no fixed size)"#,
            ),
            (
                r#"return show(struct.size('s'))"#,
                r#"ERR user_script:1: bad argument #1 to 'size' (option 's' has no fixed size)"#,
            ),
            (
                r#"return show(struct.size())"#,
                r#"ERR user_script:1: bad argument #1 to 'size' (string expected, got no value)"#,
            ),
        ]);
    }

    /// Redis's fixes: format sizes past INT_MAX are an error (CVE-2015-8080), and positions and sizes are checked against the data length before reading, negative or huge ones included.
    #[test]
    fn security_fixes() {
        assert_as_redis(&[
            (
                r#"return struct.pack('i2147483648', 1)"#,
                r#"ERR user_script:1: integral size overflow"#,
            ),
            (
                r#"return struct.pack('c99999999999', 'x')"#,
                r#"ERR user_script:1: integral size overflow"#,
            ),
            (
                r#"return struct.pack('!2147483648', 1)"#,
                r#"ERR user_script:1: integral size overflow"#,
            ),
            (
                r#"return show(struct.unpack('b', 'abc', -1))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('b', 'abc', 2^63))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('c2147483647', 'abc'))"#,
                r#"ERR user_script:1: bad argument #2 to 'unpack' (data string too short)"#,
            ),
            (
                r#"return show(struct.unpack('c2147483648', 'abc'))"#,
                r#"ERR user_script:1: integral size overflow"#,
            ),
            (
                r#"return show(struct.unpack('i2147483648', 'abc'))"#,
                r#"ERR user_script:1: integral size overflow"#,
            ),
        ]);
    }

    /// Values plus arguments plus 2 may not pass 8000 stack slots.
    #[test]
    fn unpack_stack_limits() {
        assert_as_redis(&[
            (
                r#"return show(select('#', struct.unpack(string.rep('b', 7997), string.rep('a', 8000))))"#,
                r#"7998"#,
            ),
            (
                r#"return show(select('#', struct.unpack(string.rep('b', 7998), string.rep('a', 8000))))"#,
                r#"ERR user_script:1: stack overflow (too many results)"#,
            ),
            (
                r#"return show(select('#', struct.unpack(string.rep('b', 7996), string.rep('a', 8000), 1)))"#,
                r#"7997"#,
            ),
            (
                r#"return show(select('#', struct.unpack(string.rep('b', 7996), string.rep('a', 8000), 1, 2)))"#,
                r#"ERR user_script:1: stack overflow (too many results)"#,
            ),
        ]);
    }

    #[test]
    fn the_table_is_read_only() {
        assert_as_redis(&[(
            "struct.pack = function() return 1 end",
            "ERR user_script:1: Attempt to modify a readonly table",
        )]);
    }
}
