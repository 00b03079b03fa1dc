//! A borrowed view of one command's arguments: spans into a request buffer.

use damselfly_protocol::Span;

#[derive(Clone, Copy)]
pub struct Args<'a> {
    buf: &'a [u8],
    spans: &'a [Span],
}

impl<'a> Args<'a> {
    pub fn new(buf: &'a [u8], spans: &'a [Span]) -> Self {
        Args { buf, spans }
    }

    /// Number of arguments including the command name.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i` (0 is the command name). Panics when out of range: arity is checked
    /// against the command table before any handler runs.
    pub fn get(&self, i: usize) -> &'a [u8] {
        &self.buf[self.spans[i].range()]
    }

    pub fn spans(&self) -> &'a [Span] {
        self.spans
    }

    pub fn buf(&self) -> &'a [u8] {
        self.buf
    }

    pub fn iter(&self) -> impl Iterator<Item = &'a [u8]> + Clone + '_ {
        self.spans.iter().map(|s| &self.buf[s.range()])
    }

    /// Argument `i` lowercased when short, for case-insensitive option matching.
    pub fn is(&self, i: usize, word: &str) -> bool {
        self.get(i).eq_ignore_ascii_case(word.as_bytes())
    }
}

/// `words` laid end to end in one buffer, with their spans: what [`Args::new`] reads
/// (tests and tools that build a request from words).
pub fn lay_out<S: AsRef<[u8]>>(words: &[S]) -> (Vec<u8>, Vec<Span>) {
    let mut buf = Vec::new();
    let mut spans = Vec::with_capacity(words.len());
    for w in words {
        let w = w.as_ref();
        spans.push(Span {
            start: buf.len(),
            len: w.len(),
        });
        buf.extend_from_slice(w);
    }
    (buf, spans)
}
