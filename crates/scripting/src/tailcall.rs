//! Turns the tail calls of compiled user code into ordinary calls.
//!
//! `return redis.call(...)` is a tail call. In Redis `redis.call` is a C function, and Lua
//! 5.1 keeps the caller's frame when it tail-calls a C function, so an error names the
//! script line that made the call. Here `redis.call` is Lua (it yields to the driver), and a
//! Lua tail call replaces the caller's frame: the line would be lost. So user chunks are
//! compiled, dumped, and every `TAILCALL A B 0` becomes `CALL A B 0` (all results kept on
//! the stack), which the `RETURN A 0` the compiler always emits next returns unchanged.
//! Only the frame reuse differs: a script recursing through tail calls without bound hits
//! Lua's call depth limit instead of looping forever.
//!
//! The walk follows Lua 5.1's `ldump.c` layout for this build's sizes (checked against the
//! header); any surprise leaves the chunk as compiled.

const OP_CALL: u32 = 28;
const OP_TAILCALL: u32 = 29;
const OPCODE_MASK: u32 = 0x3f;
const HEADER: &[u8] = b"\x1bLua\x51\x00\x01\x04\x08\x04\x08\x00";

/// The dumped chunk with its tail calls (in every nested function) made plain calls; None
/// if the dump is not in the expected format.
pub fn without_tail_calls(dump: &[u8]) -> Option<Vec<u8>> {
    if !dump.starts_with(HEADER) {
        return None;
    }
    let mut out = dump.to_vec();
    let mut pos = HEADER.len();
    patch_function(&mut out, &mut pos)?;
    (pos == out.len()).then_some(out)
}

fn int(buf: &[u8], pos: &mut usize) -> Option<usize> {
    let b = buf.get(*pos..*pos + 4)?;
    *pos += 4;
    usize::try_from(i32::from_le_bytes(b.try_into().ok()?)).ok()
}

fn string(buf: &[u8], pos: &mut usize) -> Option<()> {
    let b = buf.get(*pos..*pos + 8)?;
    *pos += 8;
    let len = usize::try_from(u64::from_le_bytes(b.try_into().ok()?)).ok()?;
    *pos = pos.checked_add(len)?;
    (*pos <= buf.len()).then_some(())
}

fn skip(buf: &[u8], pos: &mut usize, n: usize) -> Option<()> {
    *pos = pos.checked_add(n)?;
    (*pos <= buf.len()).then_some(())
}

fn patch_function(buf: &mut [u8], pos: &mut usize) -> Option<()> {
    string(buf, pos)?; // source
    skip(buf, pos, 4 + 4 + 4)?; // linedefined, lastlinedefined, nups/numparams/is_vararg/maxstack
    let code = int(buf, pos)?;
    for _ in 0..code {
        let at = *pos;
        let b = buf.get(at..at + 4)?;
        let ins = u32::from_le_bytes(b.try_into().ok()?);
        if ins & OPCODE_MASK == OP_TAILCALL {
            let call = (ins & !OPCODE_MASK) | OP_CALL;
            buf[at..at + 4].copy_from_slice(&call.to_le_bytes());
        }
        *pos += 4;
    }
    let constants = int(buf, pos)?;
    for _ in 0..constants {
        let tag = *buf.get(*pos)?;
        *pos += 1;
        match tag {
            0 => {}
            1 => skip(buf, pos, 1)?,
            3 => skip(buf, pos, 8)?,
            4 => string(buf, pos)?,
            _ => return None,
        }
    }
    let protos = int(buf, pos)?;
    for _ in 0..protos {
        patch_function(buf, pos)?;
    }
    let lines = int(buf, pos)?;
    skip(buf, pos, lines.checked_mul(4)?)?;
    let locals = int(buf, pos)?;
    for _ in 0..locals {
        string(buf, pos)?;
        skip(buf, pos, 8)?;
    }
    let upvalues = int(buf, pos)?;
    for _ in 0..upvalues {
        string(buf, pos)?;
    }
    Some(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use mlua::{ChunkMode, Lua};

    #[test]
    fn keeps_the_callers_frame_and_the_results() {
        let lua = unsafe { Lua::unsafe_new() };
        let code = "local function inner() return debug.getinfo(2, 'l').currentline end\n\
                    local function outer() return inner() end\n\
                    local function three() return 1, 2, 3 end\n\
                    local function pass() return three() end\n\
                    return outer(), select('#', pass())";
        let f = lua.load(code).set_name("@t").into_function().unwrap();
        // As compiled, `return inner()` replaces outer's frame: level 2 is a "(tail call)" marker.
        let (line, n): (i64, i64) = f.call(()).unwrap();
        assert_eq!((line, n), (-1, 3));
        let patched = without_tail_calls(&f.dump(false)).unwrap();
        let g = lua
            .load(&patched)
            .set_mode(ChunkMode::Binary)
            .into_function()
            .unwrap();
        let (line, n): (i64, i64) = g.call(()).unwrap();
        assert_eq!((line, n), (2, 3));
    }

    #[test]
    fn refuses_what_it_does_not_know() {
        assert!(without_tail_calls(b"not a chunk").is_none());
        let lua = Lua::new();
        let f = lua.load("return 1").into_function().unwrap();
        let mut dump = f.dump(false);
        dump.truncate(dump.len() - 3);
        assert!(without_tail_calls(&dump).is_none());
    }
}
