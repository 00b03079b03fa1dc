//! Helpers shared by the integration tests: a value's logical content (what commands can
//! observe, independent of its encoding) and builders of values from such content.
#![allow(dead_code)] // each test binary uses a different part

use std::collections::{BTreeMap, BTreeSet};

use damselfly_storage::stream::{Group, Stream, StreamId};
use damselfly_storage::{EncodingLimits, End, Hash, List, Set, Value, ZSet};

#[derive(Debug, Clone, PartialEq)]
pub enum Logical {
    Str(Vec<u8>),
    List(Vec<Vec<u8>>),
    Set(BTreeSet<Vec<u8>>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// Ascending by (score, member), as ZRANGE returns them.
    ZSet(Vec<(Vec<u8>, Score)>),
    /// Entries (XRANGE), the metadata XINFO shows and the groups with their pending entries.
    Stream(LogicalStream),
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogicalStream {
    pub entries: Vec<damselfly_persistence::rdb::stream::StreamEntry>,
    pub last_id: StreamId,
    pub first_id: StreamId,
    pub max_deleted_id: StreamId,
    pub entries_added: u64,
    pub groups: Vec<(Vec<u8>, Group)>,
}

/// A score compared bit for bit, so -0 and 0 differ (DEBUG DIGEST tells them apart).
#[derive(Debug, Clone, Copy)]
pub struct Score(pub f64);

impl PartialEq for Score {
    fn eq(&self, other: &Score) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

pub fn logical(v: &Value) -> Logical {
    match v {
        Value::Int(_) | Value::Str(_) => Logical::Str(v.as_ref().to_bytes()),
        Value::List(l) => Logical::List(l.iter().map(<[u8]>::to_vec).collect()),
        Value::Set(s) => Logical::Set(s.iter().map(|m| m.to_vec()).collect()),
        Value::Hash(h) => Logical::Hash(h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()),
        Value::ZSet(z) => Logical::ZSet(z.all().into_iter().map(|(m, s)| (m, Score(s))).collect()),
        Value::Stream(s) => {
            let entries = s.entries(StreamId::MIN, StreamId::MAX);
            Logical::Stream(LogicalStream {
                entries,
                last_id: s.last_id,
                first_id: s.first_id,
                max_deleted_id: s.max_deleted_id,
                entries_added: s.entries_added,
                groups: s
                    .groups
                    .iter()
                    .map(|(n, g)| (n.clone(), g.clone()))
                    .collect(),
            })
        }
    }
}

/// Builds a value from its content the way commands would (SET, RPUSH, SADD, HSET, ZADD).
pub fn build(l: &Logical, limits: &EncodingLimits) -> Value {
    match l {
        Logical::Str(s) => Value::from_bytes(s),
        Logical::List(items) => {
            let mut list = List::default();
            for i in items {
                list.push(End::Tail, i, limits.list_max_listpack_size);
            }
            Value::List(Box::new(list))
        }
        Logical::Set(members) => {
            let mut s = Set::default();
            for m in members {
                s.add(m, limits);
            }
            Value::Set(Box::new(s))
        }
        Logical::Hash(pairs) => {
            let mut h = Hash::default();
            for (f, v) in pairs {
                h.set(f, v, limits);
            }
            Value::Hash(Box::new(h))
        }
        Logical::ZSet(pairs) => {
            // Sized up front as Redis's loader does, so a large set keeps its -0 scores
            // (a listpack stores -0 as the integer 0).
            let longest = pairs.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
            let mut z = ZSet::sized_for(pairs.len(), longest, limits);
            for (m, s) in pairs {
                z.insert(m, s.0, limits);
            }
            Value::ZSet(Box::new(z))
        }
        Logical::Stream(l) => {
            let mut s = Stream::new();
            for (id, pairs) in &l.entries {
                let flat: Vec<&[u8]> = pairs.iter().flat_map(|(f, v)| [&f[..], &v[..]]).collect();
                s.append(*id, &flat, limits.stream_node);
            }
            s.last_id = l.last_id;
            s.first_id = l.first_id;
            s.max_deleted_id = l.max_deleted_id;
            s.entries_added = l.entries_added;
            s.groups = l.groups.iter().cloned().collect();
            Value::Stream(Box::new(s))
        }
    }
}
