//! `request`: arbitrary bytes as a client's read buffer, parsed with `parse_command` in a loop
//! as the server does.
//!
//! Asserts, beyond "no panic":
//! - every step's invariants (`parse_loop`): spans inside the command's bytes or its part of
//!   aux, `consumed` strictly advancing and within the buffer, `nargs` equal to the spans
//!   pushed, Empty and Incomplete pushing nothing, inline errors pushing nothing;
//! - re-encoding each parsed command as multibulk and parsing that gives the same arguments,
//!   in exactly the encoded length;
//! - with the limits of a client that has not authenticated, the steps are the same as with
//!   the default limits up to where they stop, which is at the same place or earlier with an
//!   error, and no multibulk command goes over those limits (10 arguments of 16 KiB).
#![no_main]

use damselfly_protocol::{parse_command, Limits, ParsedCommand};
use damselfly_protocol_fuzz::{encode, parse_loop, Step};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let steps = parse_loop(data, &Limits::default());

    for step in &steps {
        if let Step::Command { args, .. } = step {
            let wire = encode(args);
            let again = parse_loop(&wire, &Limits::default());
            match again.as_slice() {
                [Step::Command {
                    consumed,
                    args: parsed,
                    ..
                }, Step::Incomplete { .. }] => {
                    assert_eq!(parsed, args, "re-encoded command parses differently");
                    assert_eq!(*consumed, wire.len());
                }
                other => panic!("re-encoded {args:?} parsed as {other:?}"),
            }
            // The encoded form is never read early: every proper prefix is Incomplete.
            let cut = wire.len() - 1;
            let r = parse_command(
                &wire[..cut],
                0,
                &mut Vec::new(),
                &mut Vec::new(),
                &Limits::default(),
            );
            assert!(
                matches!(r, Ok(ParsedCommand::Incomplete { .. })),
                "prefix gave {r:?}"
            );
        }
    }

    let limited = Limits {
        authenticated: false,
        ..Limits::default()
    };
    let unauth = parse_loop(data, &limited);
    let (last, same) = unauth
        .split_last()
        .expect("the loop always ends with a step");
    assert_eq!(
        same,
        &steps[..same.len()],
        "unauthenticated limits changed an earlier step"
    );
    let at_limit = &steps[same.len()];
    if last != at_limit {
        assert!(
            matches!(last, Step::Error { .. }),
            "{last:?} where unlimited gave {at_limit:?}"
        );
    }
    for step in same {
        if let Step::Command {
            inline: false,
            args,
            ..
        } = step
        {
            assert!(args.len() <= 10 && args.iter().all(|a| a.len() <= 16384));
        }
    }
});
