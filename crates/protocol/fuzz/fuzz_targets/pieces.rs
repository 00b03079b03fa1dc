//! `pieces`: the same bytes parsed whole, and fed in pieces to one `RequestParser` that is
//! called after every piece, as a connection does (the piece sizes come from the input's first
//! bytes). The parser keeps its progress through an unfinished command between calls; this
//! asserts that never changes what is parsed:
//!
//! - the commands (arguments, inline or not, where each ends) and empty lines are the same,
//!   in the same order;
//! - both end the same way: the same error at the same place, or both wait for more bytes at
//!   the same place. One exception is Redis's own: a line with no end yet that grows past
//!   64 KiB is refused as soon as it does ("too big ..."), even if its end arrives later in
//!   the whole buffer, so fed in pieces that error may come where the whole parse went on.
#![no_main]

use damselfly_protocol::{Limits, RequestParser};
use damselfly_protocol_fuzz::{parse_loop, parse_loop_with, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = usize::from(n % 4) + 1;
    if rest.len() < n {
        return;
    }
    let (sizes, buf) = rest.split_at(n);
    let limits = Limits::default();
    let whole = parse_loop(buf, &limits);

    let mut parser = RequestParser::default();
    let mut steps = Vec::new();
    let mut pos = 0;
    let mut end = 0;
    let mut piece = 0;
    let outcome = loop {
        end = (end + 1 + usize::from(sizes[piece % sizes.len()]) * 37).min(buf.len());
        piece += 1;
        // Every step's invariants hold fed in pieces too (parse_loop_with checks them).
        let mut more = parse_loop_with(&buf[..end], pos, &limits, |b, p, s, a, l| {
            parser.parse(b, p, s, a, l)
        });
        let last = more.pop().expect("the loop always ends with a step");
        steps.extend(more);
        match last {
            Step::Incomplete { pos: at, .. } if end < buf.len() => pos = at,
            last => break last,
        }
    };

    let (whole_last, whole_steps) = whole
        .split_last()
        .expect("the loop always ends with a step");
    match (&outcome, whole_last) {
        (Step::Error { error, .. }, _) if error.0.starts_with("too big") => {
            assert_eq!(
                steps.as_slice(),
                &whole_steps[..steps.len().min(whole_steps.len())],
                "fed in pieces, the commands before the overlong line differ"
            );
        }
        (Step::Incomplete { pos: a, .. }, Step::Incomplete { pos: b, .. }) => {
            assert_eq!(
                steps.as_slice(),
                whole_steps,
                "fed in pieces, the commands differ"
            );
            assert_eq!(a, b, "both wait for more, at different places");
        }
        (a, b) => {
            assert_eq!(
                steps.as_slice(),
                whole_steps,
                "fed in pieces, the commands differ"
            );
            assert_eq!(a, b, "fed in pieces, the parse ends differently");
        }
    }
});
