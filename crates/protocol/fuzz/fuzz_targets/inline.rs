//! `inline`: inputs that do not start with `*`, so they go through the inline splitter
//! (quotes, escapes, `\xHH`), compared line by line with `sdssplitargs`, an independent
//! transliteration of Redis's C (src/sdssplitargs.rs).
//!
//! Asserts, beyond "no panic" and the parse loop's invariants (spans inside aux): for every
//! inline line, the same arguments as the reference, or the same error, and the same end of
//! line; no newline in the rest of the buffer is Incomplete in both (or both too long).
#![no_main]

use damselfly_protocol::Limits;
use damselfly_protocol_fuzz::sdssplitargs::{process_inline, Inline};
use damselfly_protocol_fuzz::{parse_loop, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&b'*') {
        return;
    }
    for step in parse_loop(data, &Limits::default()) {
        let pos = match &step {
            Step::Command { pos, .. }
            | Step::Empty { pos, .. }
            | Step::Incomplete { pos, .. }
            | Step::Error { pos, .. } => *pos,
        };
        // A later line may start with '*' and be multibulk: the request target covers those.
        if data.get(pos) == Some(&b'*') {
            break;
        }
        let expected = process_inline(data, pos);
        match (&step, &expected) {
            (
                Step::Command { consumed, args, .. },
                Inline::Line {
                    args: want,
                    consumed: c,
                },
            ) => {
                assert_eq!(args, want, "arguments differ from sdssplitargs");
                assert_eq!(consumed, c);
            }
            (Step::Empty { consumed, .. }, Inline::Line { args, consumed: c }) => {
                assert!(
                    args.is_empty(),
                    "parser skipped a line with arguments {args:?}"
                );
                assert_eq!(consumed, c);
            }
            (Step::Incomplete { .. }, Inline::Incomplete) => {}
            (Step::Error { error, .. }, Inline::Error(msg)) => assert_eq!(error.0, *msg),
            _ => panic!("parser gave {step:?}, sdssplitargs {expected:?}"),
        }
    }
});
