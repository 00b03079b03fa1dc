//! Helpers shared by the protocol fuzz targets: the parse loop the server runs, a RESP
//! encoder, and an independent reference for the inline splitter.

pub mod sdssplitargs;

use damselfly_protocol::{parse_command, Limits, ParsedCommand, ProtocolError, Span};

/// Encodes arguments as one RESP multibulk request.
pub fn encode(args: &[Vec<u8>]) -> Vec<u8> {
    let mut v = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        v.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        v.extend_from_slice(a);
        v.extend_from_slice(b"\r\n");
    }
    v
}

/// One step of the parse loop, with what it pushed.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Command {
        /// Where the command started and where it ended.
        pos: usize,
        consumed: usize,
        inline: bool,
        args: Vec<Vec<u8>>,
    },
    Empty {
        pos: usize,
        consumed: usize,
    },
    Incomplete {
        pos: usize,
        need: usize,
    },
    Error {
        pos: usize,
        error: ProtocolError,
    },
}

/// Runs `parse_command` over `buf` the way the server's connection does (spans and aux
/// accumulate over the commands of one read; `pos` moves to `consumed`; stop at Incomplete or
/// an error), asserting on every step the properties that hold whatever the input:
///
/// - `consumed` strictly advances and never passes the end of the buffer;
/// - `need` (Incomplete) is beyond the buffer's end;
/// - a command pushed exactly `nargs` spans, at least one, each inside the bytes it consumed
///   (multibulk) or inside what it appended to aux (inline);
/// - Empty and Incomplete push no span and append nothing to aux;
/// - an error pushes no span (a multibulk command's spans are pushed only once it is whole).
pub fn parse_loop(buf: &[u8], limits: &Limits) -> Vec<Step> {
    parse_loop_with(buf, 0, limits, |buf, pos, spans, aux, limits| {
        parse_command(buf, pos, spans, aux, limits)
    })
}

/// `parse_loop` from `start`, with the parser given (a connection's `RequestParser`).
pub fn parse_loop_with(
    buf: &[u8],
    start: usize,
    limits: &Limits,
    mut parse: impl FnMut(
        &[u8],
        usize,
        &mut Vec<Span>,
        &mut Vec<u8>,
        &Limits,
    ) -> Result<ParsedCommand, ProtocolError>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut spans: Vec<Span> = Vec::new();
    let mut aux: Vec<u8> = Vec::new();
    let mut pos = start;
    loop {
        let spans_before = spans.len();
        let aux_before = aux.len();
        let multibulk = buf.get(pos) == Some(&b'*');
        match parse(buf, pos, &mut spans, &mut aux, limits) {
            Ok(ParsedCommand::Command {
                consumed,
                nargs,
                inline,
            }) => {
                assert!(
                    consumed > pos,
                    "consumed {consumed} does not advance from {pos}"
                );
                assert!(consumed <= buf.len(), "consumed {consumed} > {}", buf.len());
                assert_eq!(
                    inline, !multibulk,
                    "inline flag disagrees with the first byte"
                );
                assert!(nargs >= 1, "a command with no arguments");
                assert_eq!(spans.len() - spans_before, nargs, "nargs != spans pushed");
                let new = &spans[spans_before..];
                let args: Vec<Vec<u8>> = if inline {
                    for s in new {
                        let r = s.range();
                        assert!(
                            r.start >= aux_before && r.end <= aux.len(),
                            "{s:?} outside aux"
                        );
                    }
                    new.iter().map(|s| aux[s.range()].to_vec()).collect()
                } else {
                    assert_eq!(aux.len(), aux_before, "multibulk wrote to aux");
                    for s in new {
                        let r = s.range();
                        assert!(
                            r.start > pos && r.end <= consumed,
                            "{s:?} outside its command"
                        );
                    }
                    new.iter().map(|s| buf[s.range()].to_vec()).collect()
                };
                steps.push(Step::Command {
                    pos,
                    consumed,
                    inline,
                    args,
                });
                pos = consumed;
            }
            Ok(ParsedCommand::Empty { consumed }) => {
                assert!(
                    consumed > pos && consumed <= buf.len(),
                    "Empty consumed {consumed}"
                );
                assert_eq!(spans.len(), spans_before, "Empty pushed spans");
                assert_eq!(aux.len(), aux_before, "Empty wrote to aux");
                steps.push(Step::Empty { pos, consumed });
                pos = consumed;
            }
            Ok(ParsedCommand::Incomplete { need }) => {
                assert!(
                    need > buf.len(),
                    "need {need} within the buffer ({})",
                    buf.len()
                );
                assert_eq!(spans.len(), spans_before, "Incomplete pushed spans");
                assert_eq!(aux.len(), aux_before, "Incomplete wrote to aux");
                steps.push(Step::Incomplete { pos, need });
                return steps;
            }
            Err(error) => {
                assert_eq!(spans.len(), spans_before, "an error pushed spans");
                steps.push(Step::Error { pos, error });
                return steps;
            }
        }
    }
}
