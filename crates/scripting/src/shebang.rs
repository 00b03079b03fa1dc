//! The first line of a script: EVAL's `#!lua flags=...` shebang and a function library's
//! `#!lua name=...` header, parsed with Redis 7.0's rules and error texts.

use damselfly_protocol::split_line;

/// Script flags, from an EVAL shebang or `redis.register_function`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScriptFlags {
    pub no_writes: bool,
    pub allow_oom: bool,
    pub allow_stale: bool,
    pub no_cluster: bool,
    pub allow_cross_slot_keys: bool,
}

impl ScriptFlags {
    /// Sets the flag named `name`; false for an unknown name.
    pub fn set(&mut self, name: &[u8]) -> bool {
        let flag = match name {
            b"no-writes" => &mut self.no_writes,
            b"allow-oom" => &mut self.allow_oom,
            b"allow-stale" => &mut self.allow_stale,
            b"no-cluster" => &mut self.no_cluster,
            b"allow-cross-slot-keys" => &mut self.allow_cross_slot_keys,
            _ => return false,
        };
        *flag = true;
        true
    }

    /// The flags' names in Redis's order (FUNCTION LIST).
    pub fn names(&self) -> Vec<&'static str> {
        [
            (self.no_writes, "no-writes"),
            (self.allow_oom, "allow-oom"),
            (self.allow_stale, "allow-stale"),
            (self.no_cluster, "no-cluster"),
            (self.allow_cross_slot_keys, "allow-cross-slot-keys"),
        ]
        .into_iter()
        .filter_map(|(on, name)| on.then_some(name))
        .collect()
    }
}

/// An EVAL body split at its shebang.
#[derive(Debug, PartialEq, Eq)]
pub struct EvalHeader {
    /// None without a shebang: Redis's compatibility mode, where the command's own flags
    /// apply and the script may write unless run by EVAL_RO.
    pub flags: Option<ScriptFlags>,
    /// Where the code to compile starts: at the shebang line's newline, so line numbers in
    /// errors count the shebang as line 1, as in Redis.
    pub code_start: usize,
}

/// Parses an EVAL body's optional `#!lua [flags=a,b]` first line.
pub fn parse_eval(body: &[u8]) -> Result<EvalHeader, String> {
    if !body.starts_with(b"#!") {
        return Ok(EvalHeader {
            flags: None,
            code_start: 0,
        });
    }
    let Some(eol) = body.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid script shebang".into());
    };
    let Some(parts) = split_line(&body[..eol]) else {
        return Err("ERR Invalid engine in script shebang".into());
    };
    let engine = parts.first().map(Vec::as_slice).unwrap_or_default();
    if engine != b"#!lua" {
        return Err(format!(
            "ERR Unexpected engine in script shebang: {}",
            String::from_utf8_lossy(engine)
        ));
    }
    let mut flags = ScriptFlags::default();
    for option in &parts[1..] {
        let Some(list) = option.strip_prefix(b"flags=") else {
            return Err(format!(
                "ERR Unknown lua shebang option: {}",
                String::from_utf8_lossy(option)
            ));
        };
        if list.is_empty() {
            continue;
        }
        for name in list.split(|&b| b == b',') {
            if !flags.set(name) {
                return Err(format!(
                    "ERR Unexpected flag in script shebang: {}",
                    String::from_utf8_lossy(name)
                ));
            }
        }
    }
    Ok(EvalHeader {
        flags: Some(flags),
        code_start: eol,
    })
}

/// A function library's header: `#!<engine> name=<library>`.
#[derive(Debug, PartialEq, Eq)]
pub struct LibraryHeader {
    pub name: String,
    /// Where the code to compile starts (the header's newline, kept for line numbers).
    pub code_start: usize,
}

/// Parses a library's first line with FUNCTION LOAD's checks, in Redis's order.
pub fn parse_library(code: &[u8]) -> Result<LibraryHeader, String> {
    if !code.starts_with(b"#!") {
        return Err("ERR Missing library metadata".into());
    }
    let Some(eol) = code.iter().position(|&b| b == b'\n') else {
        return Err("ERR Invalid library metadata".into());
    };
    let parts = match split_line(&code[..eol]) {
        Some(p) if !p.is_empty() => p,
        _ => return Err("ERR Invalid library metadata".into()),
    };
    let engine = &parts[0][2..];
    let mut name: Option<Vec<u8>> = None;
    for option in &parts[1..] {
        let is_name = option.len() >= 5 && option[..5].eq_ignore_ascii_case(b"name=");
        if !is_name {
            return Err(format!(
                "ERR Invalid metadata value given: {}",
                String::from_utf8_lossy(option)
            ));
        }
        if name.is_some() {
            return Err(
                "ERR Invalid metadata value, name argument was given multiple times".into(),
            );
        }
        name = Some(option[5..].to_vec());
    }
    let Some(name) = name else {
        return Err("ERR Library name was not given".into());
    };
    let valid = !name.is_empty() && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err("ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long".into());
    }
    if !engine.eq_ignore_ascii_case(b"lua") {
        return Err(format!(
            "ERR Engine '{}' not found",
            String::from_utf8_lossy(engine)
        ));
    }
    Ok(LibraryHeader {
        name: String::from_utf8_lossy(&name).into_owned(),
        code_start: eol,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval_err(body: &str) -> String {
        parse_eval(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn eval_shebangs_as_redis() {
        assert_eq!(parse_eval(b"return 1").unwrap().flags, None);
        let h = parse_eval(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        let f = h.flags.unwrap();
        assert!(f.no_writes && f.allow_oom && !f.allow_stale);
        assert_eq!(h.code_start, 31);
        assert_eq!(
            parse_eval(b"#!lua flags=\nreturn 1").unwrap().flags,
            Some(ScriptFlags::default())
        );
        assert_eq!(
            parse_eval(b"#!lua \"flags=no-writes\"\r\nx").unwrap().flags,
            Some(ScriptFlags {
                no_writes: true,
                ..Default::default()
            })
        );
        assert_eq!(eval_err("#!lua"), "ERR Invalid script shebang");
        assert_eq!(
            eval_err("#!lua \"x\n"),
            "ERR Invalid engine in script shebang"
        );
        assert_eq!(
            eval_err("#!\n"),
            "ERR Unexpected engine in script shebang: #!"
        );
        assert_eq!(
            eval_err("#!not-lua\n"),
            "ERR Unexpected engine in script shebang: #!not-lua"
        );
        assert_eq!(
            eval_err("#!lua badger=data\n"),
            "ERR Unknown lua shebang option: badger=data"
        );
        assert_eq!(
            eval_err("#!lua flags=no-writes,what?\n"),
            "ERR Unexpected flag in script shebang: what?"
        );
        assert_eq!(
            eval_err("#!lua flags=no-writes,,allow-oom\n"),
            "ERR Unexpected flag in script shebang: "
        );
    }

    fn lib_err(code: &str) -> String {
        parse_library(code.as_bytes()).unwrap_err()
    }

    #[test]
    fn library_headers_as_redis() {
        let h = parse_library(b"#!lua name=mylib\nreturn 1").unwrap();
        assert_eq!((h.name.as_str(), h.code_start), ("mylib", 16));
        assert_eq!(parse_library(b"#!LUA NAME=x\n").unwrap().name, "x");
        assert_eq!(parse_library(b"#!lua name=\"foo\"\n").unwrap().name, "foo");
        assert_eq!(lib_err("return 1"), "ERR Missing library metadata");
        assert_eq!(lib_err("#!lua name=test"), "ERR Invalid library metadata");
        assert_eq!(
            lib_err("#!lua name=test foo=bar\n"),
            "ERR Invalid metadata value given: foo=bar"
        );
        assert_eq!(
            lib_err("#!lua name=a name=b\n"),
            "ERR Invalid metadata value, name argument was given multiple times"
        );
        assert_eq!(lib_err("#!lua\n"), "ERR Library name was not given");
        assert!(lib_err("#!lua name=bad-name\n").starts_with("ERR Library names can only"));
        assert_eq!(lib_err("#! name=test\n"), "ERR Engine '' not found");
        assert_eq!(
            lib_err("#!bad_engine name=test\n"),
            "ERR Engine 'bad_engine' not found"
        );
    }
}
