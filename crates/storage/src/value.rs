//! Values stored under keys. Strings that look like 64-bit integers are kept as integers (Redis's
//! `int` encoding), which saves memory and makes INCR cheap. A `Value` is the owned form that
//! goes into and comes out of a table; in the table a key's record holds it (`crate::entry`),
//! and reads borrow it as a [`ValueRef`]. Each collection boxes its general encoding, so
//! the box of a small collection holds just its compact form (a few dozen bytes per key
//! matter when there are millions of small hashes).

use crate::hash::Hash;
use crate::list::List;
use crate::set::Set;
use crate::stream::Stream;
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
    Stream(Box<Stream>),
}

/// The kinds of value, as TYPE names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    String,
    Hash,
    List,
    Set,
    ZSet,
    Stream,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::String => "string",
            Kind::Hash => "hash",
            Kind::List => "list",
            Kind::Set => "set",
            Kind::ZSet => "zset",
            Kind::Stream => "stream",
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

    /// A view of the value, as a table entry gives it.
    pub fn as_ref(&self) -> ValueRef<'_> {
        match self {
            Value::Int(i) => ValueRef::Int(*i),
            Value::Str(v) => ValueRef::Str(v),
            Value::Hash(h) => ValueRef::Hash(h),
            Value::List(l) => ValueRef::List(l),
            Value::Set(s) => ValueRef::Set(s),
            Value::ZSet(z) => ValueRef::ZSet(z),
            Value::Stream(x) => ValueRef::Stream(x),
        }
    }

    pub fn kind(&self) -> Kind {
        self.as_ref().kind()
    }

    pub fn is_empty_collection(&self) -> bool {
        self.as_ref().is_empty_collection()
    }

    pub fn encoding(&self) -> &'static str {
        self.as_ref().encoding()
    }
}

/// A stored value, borrowed: what [`crate::Entry::value`] returns (strings and integers are
/// kept in the entry's record, so there is no `&Value` to lend).
#[derive(Debug, Clone, Copy)]
pub enum ValueRef<'a> {
    Int(i64),
    Str(&'a [u8]),
    Hash(&'a Hash),
    List(&'a List),
    Set(&'a Set),
    ZSet(&'a ZSet),
    Stream(&'a Stream),
}

impl<'a> ValueRef<'a> {
    /// The Redis type name (`TYPE` reply).
    pub fn type_name(self) -> &'static str {
        self.kind().name()
    }

    pub fn kind(self) -> Kind {
        match self {
            ValueRef::Int(_) | ValueRef::Str(_) => Kind::String,
            ValueRef::Hash(_) => Kind::Hash,
            ValueRef::List(_) => Kind::List,
            ValueRef::Set(_) => Kind::Set,
            ValueRef::ZSet(_) => Kind::ZSet,
            ValueRef::Stream(_) => Kind::Stream,
        }
    }

    /// OBJECT ENCODING's name for a value built as this one is (a string edited in place is
    /// `raw` whatever its length: see [`crate::Entry::encoding`]).
    pub fn encoding(self) -> &'static str {
        match self {
            ValueRef::Int(_) => "int",
            ValueRef::Str(v) if v.len() <= 44 => "embstr",
            ValueRef::Str(_) => "raw",
            ValueRef::Hash(h) => h.encoding(),
            ValueRef::List(l) => l.encoding(),
            ValueRef::Set(s) => s.encoding(),
            ValueRef::ZSet(z) => z.encoding(),
            ValueRef::Stream(_) => "stream",
        }
    }

    /// Bytes a collection holds in its own allocations (a string's are counted by its entry).
    pub fn heap_size(self) -> usize {
        match self {
            ValueRef::Int(_) | ValueRef::Str(_) => 0,
            ValueRef::Hash(h) => h.mem_size(),
            ValueRef::List(l) => l.mem_size(),
            ValueRef::Set(s) => s.mem_size(),
            ValueRef::ZSet(z) => z.mem_size(),
            ValueRef::Stream(x) => x.mem_size(),
        }
    }

    /// True for a collection with no elements (such keys are deleted).
    pub fn is_empty_collection(self) -> bool {
        match self {
            ValueRef::Int(_) | ValueRef::Str(_) => false,
            ValueRef::Hash(h) => h.is_empty(),
            ValueRef::List(l) => l.is_empty(),
            ValueRef::Set(s) => s.is_empty(),
            ValueRef::ZSet(z) => z.is_empty(),
            // An empty stream is kept, as in Redis (its groups and last id matter).
            ValueRef::Stream(_) => false,
        }
    }

    /// The string bytes, materialising integers (used when a command needs the text).
    pub fn to_bytes(self) -> Vec<u8> {
        match self {
            ValueRef::Int(i) => format_i64(i),
            ValueRef::Str(v) => v.to_vec(),
            _ => Vec::new(),
        }
    }

    /// Length of the string form.
    pub fn str_len(self) -> usize {
        match self {
            ValueRef::Int(i) => format_i64(i).len(),
            ValueRef::Str(v) => v.len(),
            _ => 0,
        }
    }

    /// An owned copy.
    pub fn to_owned(self) -> Value {
        match self {
            ValueRef::Int(i) => Value::Int(i),
            ValueRef::Str(v) => Value::Str(v.to_vec()),
            ValueRef::Hash(h) => Value::Hash(Box::new(h.clone())),
            ValueRef::List(l) => Value::List(Box::new(l.clone())),
            ValueRef::Set(s) => Value::Set(Box::new(s.clone())),
            ValueRef::ZSet(z) => Value::ZSet(Box::new(z.clone())),
            ValueRef::Stream(x) => Value::Stream(Box::new(x.clone())),
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
    fn of<'a>(v: ValueRef<'a>) -> Option<&'a Self>;
    fn into_value(self) -> Value;
}

macro_rules! collection {
    ($ty:ty, $variant:ident) => {
        impl Collection for $ty {
            const KIND: Kind = Kind::$variant;
            fn of<'a>(v: ValueRef<'a>) -> Option<&'a Self> {
                match v {
                    ValueRef::$variant(c) => Some(c),
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
collection!(Stream, Stream);

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
            assert_eq!(
                matches!(a, Value::Int(_)),
                matches!(b, Value::Int(_)),
                "{text:?}"
            );
            assert_eq!(a.as_ref().to_bytes(), text);
        }
        assert!(matches!(Value::from_vec(b"42".to_vec()), Value::Int(42)));
        let big = vec![b'9'; 21];
        assert!(
            matches!(Value::from_vec(big), Value::Str(_)),
            "longer than 20 chars"
        );
    }
}
