//! `script_source`: each input is the source of an EVAL script and of a function library,
//! read for the keys its calls name (damselfly_scripting::declared), which runs on a shard's
//! thread for every new script a client sends.
//!
//! Asserts: no panic; a call read has its command name only when it was a string literal
//! (so lowercase ASCII letters stay as sent, lowercased), and an open-ended call has at
//! least one argument (the one that may expand).
#![no_main]

use damselfly_scripting::declared::{key_calls, library_key_calls, KeyedCall};
use libfuzzer_sys::fuzz_target;

fn check(calls: Option<Vec<KeyedCall>>, src: &[u8]) {
    for call in calls.into_iter().flatten() {
        assert!(!call.open_ended || !call.args.is_empty(), "{src:?}");
        if let Some(name) = &call.command {
            assert!(!name.iter().any(u8::is_ascii_uppercase), "{src:?}");
        }
    }
}

fuzz_target!(|src: &[u8]| {
    check(key_calls(src), src);
    check(library_key_calls(src), src);
});
