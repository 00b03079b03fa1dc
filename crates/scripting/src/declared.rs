//! What a script's source shows about the keys its calls can name: for each
//! `redis.call(...)` / `redis.pcall(...)`, the command (when it is a plain string literal) and
//! which arguments are a declared key written as `KEYS[<number>]`. The coordination layer
//! reads it once per script, with the command table, to learn whether every call can only
//! name declared keys; such a script's run never needs a shard its keys are not on, so a
//! pipeline need not wait for it before running what follows on other shards
//! (docs/scripting.md, "Atomicity", case 1).
//!
//! The reading is lexical and errs towards "cannot tell" (None): anything that could reach
//! `redis.call` or change `KEYS` without being seen here (an alias such as
//! `local call = redis.call`, `redis['call']`, `_G`, `getfenv`, `loadstring`, `rawset`,
//! `KEYS` passed as a whole or assigned to, a call whose arguments hold a function) makes the
//! script unreadable, and it keeps the general rule.

/// One `redis.call(...)` or `redis.pcall(...)` of a script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedCall {
    /// The command name, lowercased, when it is a string literal; None otherwise.
    pub command: Option<Vec<u8>>,
    /// The arguments after the command name.
    pub args: Vec<CallArg>,
    /// The last argument may stand for several (a function call or `...`), so the call's
    /// argument count is not known.
    pub open_ended: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallArg {
    /// `KEYS[n]` with a number literal `n`.
    DeclaredKey,
    Other,
}

/// Longer sources are not read (the reading runs on a shard's thread, once per script; its
/// cost grows with tokens times functions).
const MAX_TOKENS: usize = 100_000;
const MAX_FUNCTIONS: usize = 200;

/// The calls of an EVAL script's `code` (Lua 5.1 source), whose declared keys are the
/// global `KEYS`; None when the source could reach `redis.call` or change `KEYS` in a way
/// this reading does not follow (module doc).
pub fn key_calls(code: &[u8]) -> Option<Vec<KeyedCall>> {
    let tokens = tokenize(code)?;
    if tokens.len() > MAX_TOKENS {
        return None;
    }
    let everywhere = [KeyTable {
        name: Some(b"KEYS"),
        scope: 0..tokens.len(),
    }];
    read_calls(&tokens, &everywhere)
}

/// The calls of a function library's code. A function's declared keys are its callback's
/// first parameter, so every call must sit directly in a callback given to
/// `redis.register_function` (a function literal, or a local function used for nothing
/// else) and name keys as `<that parameter>[<number>]`; None otherwise.
pub fn library_key_calls(code: &[u8]) -> Option<Vec<KeyedCall>> {
    let tokens = tokenize(code)?;
    let count = tokens
        .iter()
        .filter(|t| **t == Token::Name(b"function"))
        .count();
    if tokens.len() > MAX_TOKENS || count > MAX_FUNCTIONS {
        return None;
    }
    let functions = functions(&tokens)?;
    let callbacks: Vec<KeyTable> = functions
        .iter()
        .filter(|f| is_callback(&tokens, f.at))
        .map(|f| KeyTable {
            name: f.first_param,
            scope: f.body.clone(),
        })
        .collect();
    // A call's innermost function must be a callback.
    for (i, token) in tokens.iter().enumerate() {
        let call = matches!(
            tokens.get(i + 1..i + 3),
            Some([Token::Sym(b"."), Token::Name(b"call" | b"pcall")])
        );
        if *token == Token::Name(b"redis") && call {
            let innermost = functions
                .iter()
                .filter(|f| f.body.contains(&i))
                .max_by_key(|f| f.body.start)?;
            if !callbacks.iter().any(|c| c.scope == innermost.body) {
                return None;
            }
        }
    }
    read_calls(&tokens, &callbacks)
}

/// Where a table of declared keys is in scope, under which name (None: the callback takes
/// no parameter, so its calls name no declared key).
struct KeyTable<'a> {
    name: Option<&'a [u8]>,
    scope: std::ops::Range<usize>,
}

/// The calls in `tokens`, each reading its declared keys from the innermost of `tables`
/// around it; None when a call is outside all of them, or when `redis` or a key table is
/// used in a way this reading does not follow.
fn read_calls(tokens: &[Token], tables: &[KeyTable]) -> Option<Vec<KeyedCall>> {
    let mut calls = Vec::new();
    // Which key-table names are whole arguments of a call read above, by position.
    let mut keys_as_args = vec![false; tokens.len()];
    let table_at = |i: usize| {
        tables
            .iter()
            .filter(|t| t.scope.contains(&i))
            .max_by_key(|t| t.scope.start)
    };
    for (i, token) in tokens.iter().enumerate() {
        let Token::Name(name) = token else { continue };
        let field = i > 0 && matches!(tokens[i - 1], Token::Sym(b".") | Token::Sym(b":"));
        if field {
            continue;
        }
        match *name {
            b"redis" => {
                let (Some(Token::Sym(b".")), Some(Token::Name(member))) =
                    (tokens.get(i + 1), tokens.get(i + 2))
                else {
                    return None;
                };
                if matches!(*member, b"call" | b"pcall") {
                    let keys = table_at(i)?.name;
                    calls.push(read_call(tokens, i + 3, keys, &mut keys_as_args)?);
                }
            }
            b"_G" | b"getfenv" | b"setfenv" | b"loadstring" | b"load" | b"rawget" | b"rawset"
            | b"module" | b"require" | b"dofile" | b"loadfile" | b"debug" => return None,
            _ if tables
                .iter()
                .any(|t| t.name == Some(*name) && t.scope.contains(&i)) =>
            {
                let before = i.checked_sub(1).map(|p| &tokens[p]);
                if matches!(before, Some(Token::Sym(b"#"))) {
                    continue;
                }
                let close = index_end(tokens, i)?;
                // `KEYS[n] = ...` and `KEYS[n], x = ...` assign to it; a `,` is only known
                // harmless between a call's arguments.
                match tokens.get(close + 1) {
                    Some(Token::Sym(b"=")) => return None,
                    Some(Token::Sym(b",")) if !keys_as_args[i] => return None,
                    _ => {}
                }
            }
            _ => {}
        }
    }
    Some(calls)
}

/// A `function` of the source: where its keyword is, its first parameter, its body.
struct FunctionDef<'a> {
    at: usize,
    first_param: Option<&'a [u8]>,
    body: std::ops::Range<usize>,
}

/// Every function of `tokens`, found by matching Lua's block keywords; None when the
/// blocks do not match.
fn functions<'a>(tokens: &[Token<'a>]) -> Option<Vec<FunctionDef<'a>>> {
    let mut found = Vec::new();
    for (at, token) in tokens.iter().enumerate() {
        if *token != Token::Name(b"function") {
            continue;
        }
        let open = at + tokens[at..].iter().position(|t| *t == Token::Sym(b"("))?;
        let close = open + tokens[open..].iter().position(|t| *t == Token::Sym(b")"))?;
        let first_param = match tokens.get(open + 1) {
            Some(Token::Name(p)) => Some(*p),
            _ => None,
        };
        let mut depth = 1usize;
        let mut end = close + 1;
        loop {
            match tokens.get(end)? {
                Token::Name(b"function" | b"do" | b"if" | b"repeat") => depth += 1,
                Token::Name(b"end" | b"until") => depth -= 1,
                _ => {}
            }
            if depth == 0 {
                break;
            }
            end += 1;
        }
        found.push(FunctionDef {
            at,
            first_param,
            body: close + 1..end,
        });
    }
    Some(found)
}

/// Whether the `function` at `tokens[at]` is a callback nothing but
/// `redis.register_function` can call: a literal given to it (`register_function('f',
/// function ...)` or `register_function{..., callback = function ...}`), or
/// `local function f` whose name appears only in `register_function('f', f)`.
fn is_callback(tokens: &[Token], at: usize) -> bool {
    const REGISTER: [Token<'static>; 3] = [
        Token::Name(b"redis"),
        Token::Sym(b"."),
        Token::Name(b"register_function"),
    ];
    // `redis.register_function('name', ` right before `tokens[at]`.
    let registered_as_argument = |at: usize| {
        at >= 6
            && tokens[at - 6..at - 3] == REGISTER
            && matches!(
                tokens[at - 3..at],
                [Token::Sym(b"("), Token::Str(_), Token::Sym(b",")]
            )
    };
    if tokens.get(at + 1) == Some(&Token::Sym(b"(")) {
        if registered_as_argument(at) {
            return true;
        }
        let in_register_table = at >= 2
            && tokens[at - 2..at] == [Token::Name(b"callback"), Token::Sym(b"=")]
            && opening_brace(tokens, at).is_some_and(|b| b >= 3 && tokens[b - 3..b] == REGISTER);
        return in_register_table;
    }
    let local = at > 0 && tokens[at - 1] == Token::Name(b"local");
    let Some(Token::Name(name)) = tokens.get(at + 1).filter(|_| local) else {
        return false;
    };
    let mut uses = (0..tokens.len()).filter(|&i| i != at + 1 && tokens[i] == Token::Name(name));
    let mut any = false;
    let only_registered = uses.all(|i| {
        any = true;
        registered_as_argument(i) && tokens.get(i + 1) == Some(&Token::Sym(b")"))
    });
    any && only_registered
}

/// The position of the `{` whose table constructor holds `tokens[at]` directly.
fn opening_brace(tokens: &[Token], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    for i in (0..at).rev() {
        match tokens[i] {
            Token::Sym(b")" | b"]" | b"}") => depth += 1,
            Token::Sym(b"(" | b"[") if depth == 0 => return None,
            Token::Sym(b"{") if depth == 0 => return Some(i),
            Token::Sym(b"(" | b"[" | b"{") => depth -= 1,
            _ => {}
        }
    }
    None
}

/// `tokens[at..]` is `<keys> [ <number> ]`.
fn is_key_index(tokens: &[Token], at: usize, keys: &[u8]) -> bool {
    matches!(
        tokens.get(at..at + 4),
        Some([Token::Name(name), Token::Sym(b"["), Token::Number, Token::Sym(b"]")]) if *name == keys
    )
}

/// For a key table's name at `tokens[at]` followed by an index `[...]`, the position of the
/// `]`.
fn index_end(tokens: &[Token], at: usize) -> Option<usize> {
    if tokens.get(at + 1) != Some(&Token::Sym(b"[")) {
        return None;
    }
    let mut depth = 0usize;
    for (i, token) in tokens.iter().enumerate().skip(at + 1) {
        match token {
            Token::Sym(b"[") => depth += 1,
            Token::Sym(b"]") if depth == 1 => return Some(i),
            Token::Sym(b"]") => depth -= 1,
            _ => {}
        }
    }
    None
}

/// Reads the argument list that starts at `tokens[open]`, which must be `(`.
fn read_call(
    tokens: &[Token],
    open: usize,
    keys: Option<&[u8]>,
    keys_as_args: &mut [bool],
) -> Option<KeyedCall> {
    if tokens.get(open) != Some(&Token::Sym(b"(")) {
        return None;
    }
    // The arguments' token ranges, split at top-level commas.
    let mut args: Vec<(usize, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut start = open + 1;
    let mut at = open + 1;
    loop {
        match tokens.get(at)? {
            Token::Sym(b"(" | b"[" | b"{") => depth += 1,
            Token::Sym(b")") if depth == 0 => break,
            Token::Sym(b"]" | b"}") if depth == 0 => return None,
            Token::Sym(b")" | b"]" | b"}") => depth -= 1,
            Token::Sym(b",") if depth == 0 => {
                args.push((start, at));
                start = at + 1;
            }
            // A function's body has commas and calls of its own that bracket counting
            // does not follow.
            Token::Name(b"function") => return None,
            _ => {}
        }
        at += 1;
    }
    if start < at {
        args.push((start, at));
    }
    let (&(name_start, name_end), rest) = args.split_first()?;
    let command = match &tokens[name_start..name_end] {
        [Token::Str(Some(name))] => Some(name.to_ascii_lowercase()),
        _ => None,
    };
    let open_ended = rest.last().is_some_and(|&(s, e)| may_expand(&tokens[s..e]));
    let args = rest
        .iter()
        .map(|&(s, e)| {
            let Some(keys) = keys.filter(|&k| tokens[s] == Token::Name(k)) else {
                return CallArg::Other;
            };
            if index_end(tokens, s) == Some(e - 1) {
                keys_as_args[s] = true;
            }
            if e == s + 4 && is_key_index(tokens, s, keys) {
                CallArg::DeclaredKey
            } else {
                CallArg::Other
            }
        })
        .collect();
    Some(KeyedCall {
        command,
        args,
        open_ended,
    })
}

/// Whether an expression may be a function call or `...`, which as a last argument stand for
/// all their values. Errs towards yes: only a last token that cannot end a call says no.
fn may_expand(expr: &[Token]) -> bool {
    match expr {
        [] | [Token::Str(_)] => false,
        [.., Token::Sym(b")" | b"..." | b"}")] | [.., _, Token::Str(_)] => true,
        _ => false,
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token<'a> {
    Name(&'a [u8]),
    /// A quoted string's bytes when it has no escapes; None for one with escapes and for
    /// long strings.
    Str(Option<&'a [u8]>),
    Number,
    Sym(&'a [u8]),
}

/// Lua 5.1's lexical grammar, enough to skip comments and strings; None for source it
/// cannot read (it would not compile either).
fn tokenize(src: &[u8]) -> Option<Vec<Token<'_>>> {
    let mut tokens = Vec::new();
    let mut i = 0;
    while let Some(&c) = src.get(i) {
        match c {
            b' ' | b'\t' | b'\r' | b'\n' | b'\x0b' | b'\x0c' => i += 1,
            b'-' if src.get(i + 1) == Some(&b'-') => {
                i += 2;
                if let Some(end) = long_bracket_end(src, i) {
                    i = end?;
                } else {
                    while src.get(i).is_some_and(|&c| c != b'\n') {
                        i += 1;
                    }
                }
            }
            b'[' if matches!(src.get(i + 1), Some(b'[' | b'=')) => match long_bracket_end(src, i) {
                Some(end) => {
                    i = end?;
                    tokens.push(Token::Str(None));
                }
                None => {
                    tokens.push(Token::Sym(&src[i..i + 1]));
                    i += 1;
                }
            },
            b'"' | b'\'' => {
                let start = i + 1;
                let mut escaped = false;
                i = start;
                loop {
                    match *src.get(i)? {
                        b'\\' => {
                            escaped = true;
                            i += 2;
                        }
                        b'\n' => return None,
                        q if q == c => break,
                        _ => i += 1,
                    }
                }
                tokens.push(Token::Str((!escaped).then(|| &src[start..i])));
                i += 1;
            }
            b'0'..=b'9' => {
                i = number_end(src, i);
                tokens.push(Token::Number);
            }
            b'.' if src.get(i + 1).is_some_and(u8::is_ascii_digit) => {
                i = number_end(src, i);
                tokens.push(Token::Number);
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while src
                    .get(i)
                    .is_some_and(|&c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    i += 1;
                }
                tokens.push(Token::Name(&src[start..i]));
            }
            _ => {
                let len = [b"...".as_slice(), b"..", b"==", b"~=", b"<=", b">="]
                    .iter()
                    .find(|s| src[i..].starts_with(s))
                    .map_or(1, |s| s.len());
                tokens.push(Token::Sym(&src[i..i + len]));
                i += len;
            }
        }
    }
    Some(tokens)
}

/// At `[` followed by `=`* and `[`: Some(the index after the matching close, or None when it
/// never closes); None when `src[at..]` does not open a long bracket.
fn long_bracket_end(src: &[u8], at: usize) -> Option<Option<usize>> {
    if src.get(at) != Some(&b'[') {
        return None;
    }
    let level = src[at + 1..].iter().take_while(|&&c| c == b'=').count();
    if src.get(at + 1 + level) != Some(&b'[') {
        return None;
    }
    let mut close = vec![b']'];
    close.extend(std::iter::repeat_n(b'=', level));
    close.push(b']');
    let body = at + 2 + level;
    Some(
        src[body..]
            .windows(close.len())
            .position(|w| w == close.as_slice())
            .map(|p| body + p + close.len()),
    )
}

/// The end of a number literal starting at `at` (decimal, hex, exponent).
fn number_end(src: &[u8], mut at: usize) -> usize {
    while let Some(&c) = src.get(at) {
        let exponent_sign = matches!(c, b'+' | b'-') && matches!(src[at - 1], b'e' | b'E');
        if c.is_ascii_alphanumeric() || c == b'.' || exponent_sign {
            at += 1;
        } else {
            break;
        }
    }
    at
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call as read: its command, its arguments, whether it is open-ended.
    type Read = (Option<String>, Vec<CallArg>, bool);

    fn calls(src: &str) -> Option<Vec<Read>> {
        key_calls(src.as_bytes()).map(|calls| {
            calls
                .into_iter()
                .map(|c| {
                    let name = c.command.map(|n| String::from_utf8(n).unwrap());
                    (name, c.args, c.open_ended)
                })
                .collect()
        })
    }

    use CallArg::{DeclaredKey as K, Other as O};

    #[test]
    fn reads_calls_on_declared_keys() {
        assert_eq!(
            calls("return redis.call('SET', KEYS[1], ARGV[1])"),
            Some(vec![(Some("set".into()), vec![K, O], false)])
        );
        assert_eq!(
            calls(
                "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n\
                 return redis.pcall(\"del\",KEYS[1]) else return 0 end -- KEYS = 1"
            ),
            Some(vec![
                (Some("get".into()), vec![K], false),
                (Some("del".into()), vec![K], false)
            ])
        );
        // Nested calls and `#KEYS` are read; the comment and the strings are skipped.
        assert_eq!(
            calls(
                "--[[ redis.call(k) ]] local n = #KEYS local s = 'redis.call(x)' \
                 return redis.call('rpush', KEYS[2], redis.call('get', KEYS[1]), [[a]])"
            ),
            Some(vec![
                (Some("rpush".into()), vec![K, O, O], false),
                (Some("get".into()), vec![K], false)
            ])
        );
    }

    #[test]
    fn marks_what_it_cannot_pin_down() {
        // A computed command name, a computed key, an argument list that may expand.
        assert_eq!(
            calls("return redis.call(ARGV[1], KEYS[i], unpack(ARGV))"),
            Some(vec![(None, vec![O, O], true)])
        );
        assert_eq!(
            calls("redis.call('del', KEYS[1], ...)"),
            Some(vec![(Some("del".into()), vec![K, O], true)])
        );
        assert_eq!(
            calls("redis.call('set', KEYS[1], f'x')"),
            Some(vec![(Some("set".into()), vec![K, O], true)])
        );
        assert_eq!(
            calls("redis.call('set', KEYS[1], 'a' .. x)"),
            Some(vec![(Some("set".into()), vec![K, O], false)])
        );
    }

    #[test]
    fn gives_up_on_what_could_reach_other_keys_unseen() {
        for src in [
            "local call = redis.call return call('get', 'k')",
            "return redis['call']('get', 'k')",
            "return redis.call { 'get', 'k' }",
            "local r = redis return r.call('get', 'k')",
            "return _G.redis.call('get', 'k')",
            "return getfenv().redis.call('get', 'k')",
            "return loadstring(ARGV[1])()",
            "return rawget(KEYS, 1)",
            "KEYS[1] = ARGV[1] return redis.call('get', KEYS[1])",
            "KEYS[1], x = ARGV[1], 1 return redis.call('get', KEYS[1])",
            "table.insert(KEYS, 'k') return redis.call('get', KEYS[2])",
            "local KEYS = {'k'} return redis.call('get', KEYS[1])",
            "KEYS[i] = 'k' return redis.call('get', KEYS[1])",
            "KEYS[#KEYS + 1] = 'k' return redis.call('get', KEYS[2])",
            "for _, k in ipairs(KEYS) do redis.call('del', k) end",
            "return redis.call('get', (function() return 'k' end)())",
            "return redis.call('get', 'unterminated)",
            "return [[ never closed",
        ] {
            assert_eq!(calls(src), None, "{src}");
        }
        // A table's field of the same name is not the global.
        assert_eq!(
            calls("local t = {} t.KEYS = 1 return t.redis"),
            Some(vec![])
        );
    }

    /// Client-sent source never panics the reading, whatever its bytes.
    #[test]
    fn reads_any_bytes_without_panicking() {
        let pieces: [&[u8]; 28] = [
            b"redis",
            b".",
            b"call",
            b"(",
            b")",
            b"[",
            b"]",
            b"{",
            b"}",
            b",",
            b"=",
            b"KEYS",
            b"function",
            b"end",
            b"if",
            b"'get'",
            b"1",
            b"--",
            b"[[",
            b"]]",
            b"\\",
            b"local",
            b"redis.call(",
            b"redis.pcall('get', ",
            b"KEYS[1]",
            b"keys[2]",
            b"function(keys, args)",
            b"redis.register_function('f', ",
        ];
        let mut seed = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..20_000 {
            let mut src = Vec::new();
            for _ in 0..next() % 40 {
                let r = next();
                if r % 5 == 0 {
                    src.push((r >> 8) as u8);
                } else {
                    src.extend_from_slice(pieces[(r >> 8) as usize % pieces.len()]);
                }
                if r % 3 == 0 {
                    src.push(b' ');
                }
            }
            let _ = key_calls(&src);
            let _ = library_key_calls(&src);
        }
    }

    fn library(src: &str) -> Option<Vec<(Option<String>, Vec<CallArg>)>> {
        library_key_calls(src.as_bytes()).map(|calls| {
            calls
                .into_iter()
                .map(|c| (c.command.map(|n| String::from_utf8(n).unwrap()), c.args))
                .collect()
        })
    }

    #[test]
    fn reads_the_keys_parameter_of_each_callback() {
        let lib = "#!lua name=lib
            redis.register_function('setter', function(keys, args)
              if #keys > 0 then return redis.call('set', keys[1], args[1]) end
              redis.log(redis.LOG_NOTICE, 'no key')
            end)
            local function getter(k, a) return redis.pcall('get', k[1]) end
            redis.register_function('getter', getter)
            redis.register_function{function_name = 'other', flags = {'no-writes'},
              callback = function(ks) return redis.call('strlen', ks[2]) end}
            redis.register_function('ping', function() return redis.call('ping') end)";
        assert_eq!(
            library(lib),
            Some(vec![
                (Some("set".into()), vec![K, O]),
                (Some("get".into()), vec![K]),
                (Some("strlen".into()), vec![K]),
                (Some("ping".into()), vec![]),
            ])
        );
        // The keys parameter's name means nothing outside its callback.
        assert_eq!(
            library(
                "redis.register_function('f', function(keys) return redis.call('get', args[1]) end)
                 redis.register_function('g', function(k, keys) return redis.call('get', keys[1]) end)"
            ),
            Some(vec![(Some("get".into()), vec![O]), (Some("get".into()), vec![O])])
        );
    }

    #[test]
    fn gives_up_on_calls_a_callback_does_not_make_itself() {
        for lib in [
            // A helper that anything may call with any table.
            "local function get(t) return redis.call('get', t[1]) end
             redis.register_function('f', function(keys, args) return get(args) end)",
            "local function f(keys) return redis.call('get', keys[1]) end
             redis.register_function('f', f)
             redis.register_function('g', function(k, a) return f(a) end)",
            "local t = {callback = function(keys) return redis.call('get', keys[1]) end}
             redis.register_function('f', function(keys, args) return t.callback(args) end)",
            "redis.register_function('f', function(keys, args)
               local inner = function(keys) return redis.call('get', keys[1]) end
               return inner(args) end)",
            "redis.register_function('f', function(keys, args) keys[1] = args[1]
               return redis.call('get', keys[1]) end)",
            "redis.register_function('f', function(keys, args) local keys = args
               return redis.call('get', keys[1]) end)",
            "redis.register_function('f', function(keys, args) return f(keys) end)",
            "redis.call('get', 'k')",
            "redis.register_function('f', function(keys) if x then return redis.call('get', keys[1]) end)",
        ] {
            assert_eq!(library(lib), None, "{lib}");
        }
    }
}
