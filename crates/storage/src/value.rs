//! Values stored under keys. Strings that look like 64-bit integers are kept as integers (Redis's
//! `int` encoding), which saves memory and makes INCR cheap. Collections are boxed so a key's
//! entry stays small whatever its type; each collection in turn boxes its general encoding, so
//! the box of a small collection holds just its compact form (a few dozen bytes per key
//! matter when there are millions of small hashes).

use crate::hash::Hash;
use crate::list::List;
use crate::set::Set;
use crate::zset::ZSet;

/// A stored value.
#[derive(Debug, Clone)]
pub enum Value {
    Int(i64),
    Str(Vec<u8>),
    Hash(Box<Hash>),
    List(Box<List>),
    Set(Box<Set>),
    ZSet(Box<ZSet>),
}

/// The kinds of value, as TYPE names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Hash,
    List,
    Set,
    ZSet,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
        }
    }
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

    /// Like [`Value::from_bytes`], keeping the buffer when the text is not an integer (a
    /// loaded string of hundreds of megabytes is not copied).
    pub fn from_vec(b: Vec<u8>) -> Value {
        if b.len() <= 20 {
            if let Some(i) = parse_canonical_i64(&b) {
                return Value::Int(i);
            }
        }
        Value::Str(b)
    }

    /// The Redis type name (`TYPE` reply).
    pub fn type_name(&self) -> &'static str {
        self.kind().name()
    }

    pub fn kind(&self) -> Kind {
        match self {
            Value::Int(_) | Value::Str(_) => Kind::String,
            Value::Hash(_) => Kind::Hash,
            Value::List(_) => Kind::List,
            Value::Set(_) => Kind::Set,
            Value::ZSet(_) => Kind::ZSet,
        }
    }

    /// OBJECT ENCODING's name for how the value is stored.
    pub fn encoding(&self) -> &'static str {
        match self {
            Value::Int(_) => "int",
            Value::Str(v) if v.len() <= 44 => "embstr",
            Value::Str(_) => "raw",
            Value::Hash(h) => h.encoding(),
            Value::List(l) => l.encoding(),
            Value::Set(s) => s.encoding(),
            Value::ZSet(z) => z.encoding(),
        }
    }

    /// Bytes of the value's own heap allocations, for memory accounting.
    pub fn mem_size(&self) -> usize {
        match self {
            Value::Int(_) => 0,
            Value::Str(v) => v.capacity(),
            Value::Hash(h) => std::mem::size_of::<Hash>() + h.mem_size(),
            Value::List(l) => std::mem::size_of::<List>() + l.mem_size(),
            Value::Set(s) => std::mem::size_of::<Set>() + s.mem_size(),
            Value::ZSet(z) => std::mem::size_of::<ZSet>() + z.mem_size(),
        }
    }

    /// True for a collection with no elements (such keys are deleted).
    pub fn is_empty_collection(&self) -> bool {
        match self {
            Value::Int(_) | Value::Str(_) => false,
            Value::Hash(h) => h.is_empty(),
            Value::List(l) => l.is_empty(),
            Value::Set(s) => s.is_empty(),
            Value::ZSet(z) => z.is_empty(),
        }
    }

    /// The string bytes, materialising integers (used when a command needs the text).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            Value::Int(i) => format_i64(*i),
            Value::Str(v) => v.clone(),
            _ => Vec::new(),
        }
    }

    /// Length of the string form.
    pub fn str_len(&self) -> usize {
        match self {
            Value::Int(i) => format_i64(*i).len(),
            Value::Str(v) => v.len(),
            _ => 0,
        }
    }

    /// Turns an int-encoded value into raw bytes so it can be edited in place.
    pub fn make_raw(&mut self) -> &mut Vec<u8> {
        if let Value::Int(i) = self {
            *self = Value::Str(format_i64(*i));
        }
        match self {
            Value::Str(v) => v,
            _ => unreachable!("make_raw is only called on strings"),
        }
    }
}

/// The integer a string is the canonical decimal form of.
pub fn parse_canonical_i64(b: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(b).ok()?;
    let v: i64 = s.parse().ok()?;
    (v.to_string().as_bytes() == b).then_some(v)
}

fn format_i64(v: i64) -> Vec<u8> {
    v.to_string().into_bytes()
}

/// A collection type stored boxed in one [`Value`] variant, so code generic over the type can
/// check, borrow and build values without matching on every variant.
pub trait Collection: Default + Sized {
    const KIND: Kind;
    fn of(v: &Value) -> Option<&Self>;
    fn of_mut(v: &mut Value) -> Option<&mut Self>;
    fn into_value(self) -> Value;
}

macro_rules! collection {
    ($ty:ty, $variant:ident) => {
        impl Collection for $ty {
            const KIND: Kind = Kind::$variant;
            fn of(v: &Value) -> Option<&Self> {
                match v {
                    Value::$variant(c) => Some(c),
                    _ => None,
                }
            }
            fn of_mut(v: &mut Value) -> Option<&mut Self> {
                match v {
                    Value::$variant(c) => Some(c),
                    _ => None,
                }
            }
            fn into_value(self) -> Value {
                Value::$variant(Box::new(self))
            }
        }
    };
}

collection!(Hash, Hash);
collection!(List, List);
collection!(Set, Set);
collection!(ZSet, ZSet);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn from_vec_chooses_the_encoding_as_from_bytes_does() {
        for text in [
            &b"123"[..],
            b"-9223372036854775808",
            b"007",
            b"-0",
            b"12a",
            b"",
            b"x",
        ] {
            let (a, b) = (Value::from_vec(text.to_vec()), Value::from_bytes(text));
            assert_eq!(a.encoding(), b.encoding(), "{text:?}");
            assert_eq!(a.to_bytes(), text);
        }
        assert!(matches!(Value::from_vec(b"42".to_vec()), Value::Int(42)));
        let big = vec![b'9'; 21];
        assert!(
            matches!(Value::from_vec(big), Value::Str(_)),
            "longer than 20 chars"
        );
    }
}
