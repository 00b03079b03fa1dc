//! Values stored under keys. Strings that look like 64-bit integers are kept as integers (Redis's
//! `int` encoding), which saves memory and makes INCR cheap.

/// A stored value. Collection types arrive with the data-types work.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i64),
    Str(Vec<u8>),
}

impl Value {
    /// Builds a string value, choosing the integer encoding when the bytes are a canonical i64
    /// (the same test Redis applies: at most 20 chars and round-trips exactly).
    pub fn from_bytes(b: &[u8]) -> Value {
        if b.len() <= 20 {
            if let Some(i) = parse_canonical_i64(b) {
                return Value::Int(i);
            }
        }
        Value::Str(b.to_vec())
    }

    /// The Redis type name (`TYPE` reply).
    pub fn type_name(&self) -> &'static str {
        match self {
            Value::Int(_) | Value::Str(_) => "string",
        }
    }

    /// Bytes of the value's own heap allocation plus inline size, for memory accounting.
    pub fn mem_size(&self) -> usize {
        match self {
            Value::Int(_) => 0,
            Value::Str(v) => v.capacity(),
        }
    }

    /// The string bytes, materialising integers (used when a command needs the text).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Value::Int(i) => format_i64(*i),
            Value::Str(v) => v.clone(),
        }
    }

    /// Length of the string form.
    pub fn str_len(&self) -> usize {
        match self {
            Value::Int(i) => format_i64(*i).len(),
            Value::Str(v) => v.len(),
        }
    }

    /// Turns an int-encoded value into raw bytes so it can be edited in place.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if let Value::Int(i) = self {
            *self = Value::Str(format_i64(*i));
        }
        match self {
            Value::Str(v) => v,
            Value::Int(_) => unreachable!("converted above"),
        }
    }
}

fn parse_canonical_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let v: i64 = s.parse().ok()?;
    (v.to_string().as_bytes() == b).then_some(v)
}

fn format_i64(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}
