//! LCS: the longest common subsequence of two strings, with the matching ranges Redis 7.0
//! reports for IDX. The table and the walk back through it follow Redis's algorithm (a
//! `(a+1) x (b+1)` table of 32-bit lengths; on a tie the walk moves along `b`), because
//! which of several equally long subsequences comes back, and how its ranges are cut, is part
//! of the reply clients compare.

/// One run of consecutive matching bytes: `[a_start, a_end]` in the first string and
/// `[b_start, b_end]` in the second, inclusive, as Redis numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Match {
    pub a: (usize, usize),
    pub b: (usize, usize),
}

impl Match {
    pub fn len(&self) -> usize {
        self.a.1 - self.a.0 + 1
    }
}

/// The result of comparing two strings.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Lcs {
    /// The subsequence's length.
    pub len: usize,
    /// The subsequence itself.
    pub text: Vec<u8>,
    /// Its matching runs, from the ends of the strings backward, as Redis lists them.
    pub matches: Vec<Match>,
}

/// Bytes the comparison's table takes for strings of these lengths (what Redis checks
/// against `proto-max-bulk-len` before it allocates).
pub fn table_bytes(a: usize, b: usize) -> u128 {
    (a as u128 + 1) * (b as u128 + 1) * 4
}

/// Compares `a` and `b`.
pub fn lcs(a: &[u8], b: &[u8]) -> Lcs {
    let width = b.len() + 1;
    // lengths[i * width + j]: the LCS length of a[..i] and b[..j].
    let mut lengths = vec![0u32; (a.len() + 1) * width];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            lengths[i * width + j] = if a[i - 1] == b[j - 1] {
                lengths[(i - 1) * width + j - 1] + 1
            } else {
                lengths[(i - 1) * width + j].max(lengths[i * width + j - 1])
            };
        }
    }
    let len = lengths[a.len() * width + b.len()] as usize;
    let mut text = vec![0u8; len];
    let mut matches = Vec::new();
    // The run being extended backward, if any.
    let mut run: Option<Match> = None;
    let (mut i, mut j, mut at) = (a.len(), b.len(), len);
    while i > 0 && j > 0 {
        let mut close = false;
        if a[i - 1] == b[j - 1] {
            text[at - 1] = a[i - 1];
            match &mut run {
                None => {
                    run = Some(Match {
                        a: (i - 1, i - 1),
                        b: (j - 1, j - 1),
                    })
                }
                // Contiguous with the run: it grows backward.
                Some(r) if r.a.0 == i && r.b.0 == j => {
                    r.a.0 -= 1;
                    r.b.0 -= 1;
                }
                Some(_) => close = true,
            }
            // A run that reached the start of either string is complete.
            if run.is_some_and(|r| r.a.0 == 0 || r.b.0 == 0) {
                close = true;
            }
            at -= 1;
            i -= 1;
            j -= 1;
        } else {
            if lengths[(i - 1) * width + j] > lengths[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            close = run.is_some();
        }
        if close {
            // Redis closes the run it had, even when the byte just matched starts a new
            // one: that byte is then reported in no run.
            matches.extend(run.take());
        }
    }
    Lcs { len, text, matches }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documents_this_example() {
        let r = lcs(b"ohmytext", b"mynewtext");
        assert_eq!((r.len, &r.text[..]), (6, &b"mytext"[..]));
        let runs: Vec<_> = r.matches.iter().map(|m| (m.a, m.b, m.len())).collect();
        assert_eq!(runs, [((4, 7), (5, 8), 4), ((2, 3), (0, 1), 2)]);
    }

    #[test]
    fn empty_and_disjoint_strings_have_nothing_in_common() {
        assert_eq!(lcs(b"", b"abc"), Lcs::default());
        assert_eq!(lcs(b"abc", b""), Lcs::default());
        assert_eq!(lcs(b"abc", b"xyz"), Lcs::default());
    }

    #[test]
    fn the_subsequence_is_common_to_both_and_as_long_as_the_table_says() {
        let pairs: [(&[u8], &[u8]); 4] = [
            (b"AGGTAB", b"GXTXAYB"),
            (b"aaaa", b"aa"),
            (b"abcabcabc", b"cbacba"),
            (b"the quick brown fox", b"a quick brown dog"),
        ];
        for (a, b) in pairs {
            let r = lcs(a, b);
            assert_eq!(r.text.len(), r.len);
            for s in [a, b] {
                let mut rest = s.iter();
                assert!(r.text.iter().all(|c| rest.any(|x| x == c)), "{a:?} {b:?}");
            }
            for m in &r.matches {
                assert_eq!(&a[m.a.0..=m.a.1], &b[m.b.0..=m.b.1]);
            }
        }
        assert_eq!(lcs(b"AGGTAB", b"GXTXAYB").len, 4);
    }

    #[test]
    fn the_table_size_is_what_redis_checks() {
        assert_eq!(table_bytes(600, 600), 601 * 601 * 4);
        assert!(table_bytes(600, 600) > 1 << 20);
    }
}
