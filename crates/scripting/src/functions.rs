//! The function libraries of the whole process (FUNCTION LOAD, DELETE, FLUSH, RESTORE): each
//! library's code and what it registered. A library is checked once, by the thread that
//! loads it; every other thread's VM runs the same code again the first time one of its
//! clients calls one of its functions (a VM keeps callbacks per library version).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::{Reach, ScriptFlags};

/// One function of a library, as FUNCTION LIST shows it.
#[derive(Clone, Debug)]
pub struct FunctionInfo {
    pub name: String,
    pub description: Option<Vec<u8>>,
    pub flags: ScriptFlags,
    /// Where its runs' keys were found (which shards its next run locks).
    pub reach: Arc<Reach>,
}

#[derive(Debug)]
pub struct Library {
    pub name: String,
    /// The whole code, `#!lua name=...` line included (FUNCTION LIST WITHCODE, DUMP).
    pub code: Vec<u8>,
    /// Where the Lua code starts (the header line's newline, so lines count from it).
    pub code_start: usize,
    pub functions: Vec<FunctionInfo>,
    /// Unique across the process's life: a VM that loaded another version loads again.
    pub version: u64,
    /// Whether its source shows that every call of every function names only declared
    /// keys (`declared::library_key_calls`), decided once by the coordination layer.
    pub names_only_declared_keys: OnceLock<bool>,
}

#[derive(Default, Clone)]
struct Libraries {
    by_name: BTreeMap<String, Arc<Library>>,
    /// ASCII-lower-cased function name -> its library and its index there (FCALL ignores
    /// case as Redis's byte-wise `strcasecmp` does; names are letters, digits and `_`).
    functions: HashMap<Vec<u8>, (Arc<Library>, usize), ahash::RandomState>,
}

impl Libraries {
    fn insert(&mut self, lib: Arc<Library>) {
        for (index, f) in lib.functions.iter().enumerate() {
            self.functions.insert(
                f.name.to_ascii_lowercase().into_bytes(),
                (lib.clone(), index),
            );
        }
        self.by_name.insert(lib.name.clone(), lib);
    }

    fn remove(&mut self, name: &str) -> Option<Arc<Library>> {
        let lib = self.by_name.remove(name)?;
        for f in &lib.functions {
            self.functions
                .remove(f.name.to_ascii_lowercase().as_bytes());
        }
        Some(lib)
    }

    /// Redis's collision error for `lib` joining, or None.
    fn collision(&self, lib: &Library) -> Option<String> {
        lib.functions
            .iter()
            .find(|f| {
                self.functions
                    .contains_key(f.name.to_ascii_lowercase().as_bytes())
            })
            .map(|f| format!("ERR Function {} already exists", f.name))
    }
}

/// What FUNCTION RESTORE does with libraries already there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestorePolicy {
    /// Drop them all first.
    Flush,
    /// Keep them; a name taken twice fails the whole restore.
    Append,
    /// A restored library replaces the one of the same name.
    Replace,
}

/// A library not yet in the registry.
pub struct NewLibrary {
    pub name: String,
    pub code: Vec<u8>,
    pub code_start: usize,
    pub functions: Vec<FunctionInfo>,
}

#[derive(Default)]
pub struct FunctionRegistry {
    libraries: RwLock<Libraries>,
    next_version: AtomicU64,
}

impl FunctionRegistry {
    /// The library holding function `name` (any case) and the function's index in it.
    pub fn find(&self, name: &[u8]) -> Option<(Arc<Library>, usize)> {
        // Lower-cased on the stack: FCALL looks a name up on every call.
        let mut short = [0u8; 64];
        let lower = match short.get_mut(..name.len()) {
            Some(buf) => {
                buf.copy_from_slice(name);
                buf.make_ascii_lowercase();
                Cow::Borrowed(&*buf)
            }
            None => Cow::Owned(name.to_ascii_lowercase()),
        };
        let libs = self.libraries.read().ok()?;
        libs.functions.get(lower.as_ref()).cloned()
    }

    pub fn library(&self, name: &str) -> Option<Arc<Library>> {
        self.libraries.read().ok()?.by_name.get(name).cloned()
    }

    /// FUNCTION LOAD's last step. Errors are Redis's replies.
    pub fn load(&self, lib: NewLibrary, replace: bool) -> Result<Arc<Library>, String> {
        let mut libs = self
            .libraries
            .write()
            .map_err(|_| "ERR function registry unavailable".to_string())?;
        let old = match libs.by_name.contains_key(&lib.name) {
            true if !replace => {
                return Err(format!("ERR Library '{}' already exists", lib.name));
            }
            true => libs.remove(&lib.name),
            false => None,
        };
        let lib = self.versioned(lib);
        if let Some(err) = libs.collision(&lib) {
            if let Some(old) = old {
                libs.insert(old);
            }
            return Err(err);
        }
        libs.insert(lib.clone());
        Ok(lib)
    }

    /// FUNCTION RESTORE's last step: every library joins, or none does.
    pub fn restore(&self, new: Vec<NewLibrary>, policy: RestorePolicy) -> Result<(), String> {
        let mut libs = self
            .libraries
            .write()
            .map_err(|_| "ERR function registry unavailable".to_string())?;
        let mut joined = match policy {
            RestorePolicy::Flush => Libraries::default(),
            _ => libs.clone(),
        };
        for lib in new {
            if joined.by_name.contains_key(&lib.name) {
                if policy != RestorePolicy::Replace {
                    return Err(format!("ERR Library {} already exists", lib.name));
                }
                joined.remove(&lib.name);
            }
            let lib = self.versioned(lib);
            if let Some(err) = joined.collision(&lib) {
                return Err(err);
            }
            joined.insert(lib);
        }
        *libs = joined;
        Ok(())
    }

    fn versioned(&self, lib: NewLibrary) -> Arc<Library> {
        Arc::new(Library {
            name: lib.name,
            code: lib.code,
            code_start: lib.code_start,
            functions: lib.functions,
            version: self.next_version.fetch_add(1, Ordering::Relaxed) + 1,
            names_only_declared_keys: OnceLock::new(),
        })
    }

    /// FUNCTION DELETE: false when there is no such library.
    pub fn delete(&self, name: &[u8]) -> bool {
        let Ok(name) = std::str::from_utf8(name) else {
            return false;
        };
        self.libraries
            .write()
            .is_ok_and(|mut libs| libs.remove(name).is_some())
    }

    pub fn flush(&self) {
        if let Ok(mut libs) = self.libraries.write() {
            *libs = Libraries::default();
        }
    }

    /// Every library, by name.
    pub fn list(&self) -> Vec<Arc<Library>> {
        self.libraries
            .read()
            .map(|l| l.by_name.values().cloned().collect())
            .unwrap_or_default()
    }

    /// (libraries, functions).
    pub fn counts(&self) -> (usize, usize) {
        self.libraries
            .read()
            .map(|l| (l.by_name.len(), l.functions.len()))
            .unwrap_or((0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(name: &str, functions: &[&str]) -> NewLibrary {
        NewLibrary {
            name: name.into(),
            code: Vec::new(),
            code_start: 0,
            functions: functions
                .iter()
                .map(|f| FunctionInfo {
                    name: f.to_string(),
                    description: None,
                    flags: ScriptFlags::default(),
                    reach: Default::default(),
                })
                .collect(),
        }
    }

    #[test]
    fn names_collide_across_libraries_ignoring_case() {
        let r = FunctionRegistry::default();
        r.load(lib("a", &["f", "g"]), false).expect("loads");
        assert_eq!(
            r.load(lib("a", &["h"]), false).unwrap_err(),
            "ERR Library 'a' already exists"
        );
        assert_eq!(
            r.load(lib("b", &["F"]), false).unwrap_err(),
            "ERR Function F already exists"
        );
        let (found, i) = r.find(b"G").expect("found");
        assert_eq!((found.name.as_str(), i), ("a", 1));
        // REPLACE drops the old functions; a failed replace keeps the old library.
        r.load(lib("b", &["x"]), false).expect("loads");
        assert_eq!(
            r.load(lib("b", &["f"]), true).unwrap_err(),
            "ERR Function f already exists"
        );
        assert!(r.find(b"x").is_some());
        r.load(lib("a", &["y"]), true).expect("replaces");
        assert!(r.find(b"f").is_none() && r.find(b"y").is_some());
        assert_eq!(r.counts(), (2, 2));
    }

    #[test]
    fn lookups_fold_ascii_case_only() {
        let r = FunctionRegistry::default();
        let long = "k".repeat(100);
        r.load(lib("a", &["key", &long]), false).expect("loads");
        assert_eq!(r.find(b"KeY").map(|(_, i)| i), Some(0));
        assert_eq!(
            r.find(long.to_uppercase().as_bytes()).map(|(_, i)| i),
            Some(1)
        );
        // Redis compares bytes: the Kelvin sign is not a `k` there, though Unicode lowers it.
        assert!(r.find("\u{212A}ey".as_bytes()).is_none());
        assert!(r.find(b"ke").is_none() && r.find(b"\xff").is_none());
    }

    #[test]
    fn restore_is_all_or_nothing() {
        let r = FunctionRegistry::default();
        r.load(lib("a", &["f"]), false).expect("loads");
        let err = r
            .restore(
                vec![lib("c", &["c"]), lib("a", &["g"])],
                RestorePolicy::Append,
            )
            .unwrap_err();
        assert_eq!(err, "ERR Library a already exists");
        assert!(r.find(b"c").is_none());
        r.restore(
            vec![lib("c", &["c"]), lib("a", &["g"])],
            RestorePolicy::Replace,
        )
        .expect("replaces");
        assert!(r.find(b"g").is_some() && r.find(b"f").is_none() && r.find(b"c").is_some());
        r.restore(vec![lib("d", &["d"])], RestorePolicy::Flush)
            .expect("flushes");
        assert_eq!(r.counts(), (1, 1));
        assert!(r.delete(b"d") && !r.delete(b"d"));
    }
}
