//! The process-wide EVAL script cache: SHA1 to body and flags. SCRIPT LOAD on one connection
//! makes a script callable by EVALSHA from every connection on every thread, so the cache is
//! shared; each thread compiles a script into its own Lua VM the first time it runs it there
//! (`ScriptVm`). This is server state, not keyspace data, so a lock is fine: runs take a
//! read lock for one lookup.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

use crate::shebang::{parse_eval, ScriptFlags};

/// A cached EVAL script.
#[derive(Debug)]
pub struct Script {
    /// 40 lowercase hex digits.
    pub sha: String,
    pub body: Vec<u8>,
    /// None in compatibility mode (no shebang).
    pub flags: Option<ScriptFlags>,
    /// Where the compiled code starts (after the shebang line, its newline kept).
    pub code_start: usize,
    pub reach: Reach,
    /// Whether its source shows that every call names only declared keys (`declared`),
    /// decided once by the coordination layer, which knows the commands.
    pub names_only_declared_keys: OnceLock<bool>,
}

impl Script {
    pub fn code(&self) -> &[u8] {
        &self.body[self.code_start..]
    }
}

/// What the runs of a script (or function) have shown about where its keys live, which
/// decides the shards its next run locks (docs/scripting.md, "Keys a script does not
/// declare").
#[derive(Debug, Default)]
pub struct Reach {
    ran: AtomicBool,
    roams: AtomicBool,
}

impl Reach {
    /// Its first run, and every run once one needed more than its declared keys, lock
    /// every shard whole.
    pub fn needs_every_shard(&self) -> bool {
        !self.ran.load(Ordering::Relaxed) || self.roams.load(Ordering::Relaxed)
    }

    /// True once a run needed more than its declared keys.
    pub fn roams(&self) -> bool {
        self.roams.load(Ordering::Relaxed)
    }

    /// Records a finished run, and whether it needed more than its declared keys.
    pub fn record(&self, roamed: bool) {
        if roamed {
            self.roams.store(true, Ordering::Relaxed);
        }
        self.ran.store(true, Ordering::Relaxed);
    }
}

/// SHA1 of `body` as 40 lowercase hex digits (script ids, `redis.sha1hex`).
pub fn sha1_hex(body: &[u8]) -> String {
    // hex, not the digest's Display: EVAL hashes its script on every call, and formatting
    // cost more than hashing.
    hex::encode(sha1_smol::Sha1::from(body).digest().bytes())
}

/// Scripts by SHA (ahash: a lookup per EVALSHA).
type ScriptMap = std::collections::HashMap<String, Arc<Script>, ahash::RandomState>;

#[derive(Default)]
pub struct ScriptCache {
    scripts: RwLock<ScriptMap>,
    /// Bumped by SCRIPT FLUSH: each thread then starts a fresh VM before its next run.
    generation: AtomicU64,
    /// Sum of the cached bodies' sizes (INFO `used_memory_scripts_eval`).
    body_bytes: AtomicU64,
}

impl ScriptCache {
    /// The cached script with this SHA (any letter case), if any.
    pub fn get(&self, sha: &[u8]) -> Option<Arc<Script>> {
        let mut lower = [0u8; 40];
        if sha.len() != lower.len() {
            return None;
        }
        for (l, b) in lower.iter_mut().zip(sha) {
            *l = b.to_ascii_lowercase();
        }
        let sha = std::str::from_utf8(&lower).ok()?;
        self.read().get(sha).cloned()
    }

    /// Adds `body` (after checking its shebang) unless present; `compiles` is asked only for
    /// a new body and must say whether it compiles (Redis caches nothing that does not).
    pub fn add(
        &self,
        body: &[u8],
        compiles: impl FnOnce(&Script) -> Result<(), String>,
    ) -> Result<Arc<Script>, String> {
        let sha = sha1_hex(body);
        if let Some(s) = self.read().get(&sha) {
            return Ok(s.clone());
        }
        let header = parse_eval(body)?;
        let script = Arc::new(Script {
            sha: sha.clone(),
            body: body.to_vec(),
            flags: header.flags,
            code_start: header.code_start,
            reach: Reach::default(),
            names_only_declared_keys: OnceLock::new(),
        });
        compiles(&script)?;
        let mut scripts = self.scripts.write().unwrap_or_else(|e| e.into_inner());
        let entry = scripts.entry(sha).or_insert_with(|| {
            self.body_bytes
                .fetch_add(script.body.len() as u64, Ordering::Relaxed);
            script
        });
        Ok(entry.clone())
    }

    /// SCRIPT FLUSH: forgets every script; every thread's VM is replaced before its next run.
    pub fn flush(&self) {
        let mut scripts = self.scripts.write().unwrap_or_else(|e| e.into_inner());
        scripts.clear();
        self.body_bytes.store(0, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::Release);
    }

    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn body_bytes(&self) -> u64 {
        self.body_bytes.load(Ordering::Relaxed)
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, ScriptMap> {
        self.scripts.read().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caches_only_what_compiles_and_finds_any_case() {
        let cache = ScriptCache::default();
        assert!(cache.add(b"bad", |_| Err("ERR no".into())).is_err());
        assert!(cache.is_empty());
        let s = cache.add(b"return 1", |_| Ok(())).unwrap();
        assert_eq!(s.sha, "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
        assert!(cache.get(s.sha.to_ascii_uppercase().as_bytes()).is_some());
        assert!(cache.get(b"e0e1").is_none());
        // A second add of the same body neither compiles nor duplicates.
        cache
            .add(b"return 1", |_| panic!("compiled twice"))
            .unwrap();
        assert_eq!((cache.len(), cache.body_bytes()), (1, 8));
        let g = cache.generation();
        cache.flush();
        assert!(cache.is_empty() && cache.generation() == g + 1);
    }
}
