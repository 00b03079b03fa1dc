//! Redis's partial quicksort (its pqsort.c: Bentley and McIlroy's quicksort as NetBSD's libc
//! has it, without the switch to insertion sort after a pass that swapped nothing, recursing
//! only into the parts that overlap the wanted range). Replies that put the
//! first N of a sorted result (GEOSEARCH with COUNT) leave equal elements in the order this
//! algorithm does, so it is followed step by step to return the same elements in the same order.

use std::cmp::Ordering;

/// Sorts `v` enough that positions `first..=last` hold what a full sort would put there, as
/// Redis's `pqsort` does (same comparisons, same swaps).
pub fn sort_range<T>(v: &mut [T], first: usize, last: usize, cmp: &impl Fn(&T, &T) -> Ordering) {
    sort_part(v, 0, v.len(), (first, last), cmp);
}

fn insertion_sort<T>(v: &mut [T], cmp: &impl Fn(&T, &T) -> Ordering) {
    for m in 1..v.len() {
        let mut l = m;
        while l > 0 && cmp(&v[l - 1], &v[l]) == Ordering::Greater {
            v.swap(l, l - 1);
            l -= 1;
        }
    }
}

fn median_of_three<T>(
    v: &[T],
    a: usize,
    b: usize,
    c: usize,
    cmp: &impl Fn(&T, &T) -> Ordering,
) -> usize {
    if cmp(&v[a], &v[b]).is_lt() {
        if cmp(&v[b], &v[c]).is_lt() {
            b
        } else if cmp(&v[a], &v[c]).is_lt() {
            c
        } else {
            a
        }
    } else if cmp(&v[b], &v[c]).is_gt() {
        b
    } else if cmp(&v[a], &v[c]).is_lt() {
        a
    } else {
        c
    }
}

/// Swaps `v[a..a + n]` with `v[b..b + n]` (ranges that do not overlap).
fn swap_ranges<T>(v: &mut [T], a: usize, b: usize, n: usize) {
    for i in 0..n {
        v.swap(a + i, b + i);
    }
}

/// Sorts the part `v[start..start + n]` as far as `wanted` (inclusive positions) needs.
fn sort_part<T>(
    v: &mut [T],
    mut start: usize,
    mut n: usize,
    wanted: (usize, usize),
    cmp: &impl Fn(&T, &T) -> Ordering,
) {
    let overlaps = |from: usize, len: usize| {
        let end = from + len;
        !((wanted.0 < from && wanted.1 < from) || (wanted.0 >= end && wanted.1 >= end))
    };
    loop {
        let part = &mut v[start..start + n];
        if n < 7 {
            return insertion_sort(part, cmp);
        }
        let mut pm = n / 2;
        if n > 7 {
            let (mut pl, mut pn) = (0, n - 1);
            if n > 40 {
                let d = n / 8;
                pl = median_of_three(part, pl, pl + d, pl + 2 * d, cmp);
                pm = median_of_three(part, pm - d, pm, pm + d, cmp);
                pn = median_of_three(part, pn - 2 * d, pn - d, pn, cmp);
            }
            pm = median_of_three(part, pl, pm, pn, cmp);
        }
        part.swap(0, pm);
        // Elements equal to the pivot gather at both ends ([1, pa) and (pd, n)), smaller ones
        // after the left run, larger ones before the right run.
        let (mut pa, mut pb, mut pc, mut pd) = (1, 1, n - 1, n - 1);
        loop {
            while pb <= pc {
                let c = cmp(&part[pb], &part[0]);
                if c.is_gt() {
                    break;
                }
                if c.is_eq() {
                    part.swap(pa, pb);
                    pa += 1;
                }
                pb += 1;
            }
            while pb <= pc {
                let c = cmp(&part[pc], &part[0]);
                if c.is_lt() {
                    break;
                }
                if c.is_eq() {
                    part.swap(pc, pd);
                    pd -= 1;
                }
                pc -= 1;
            }
            if pb > pc {
                break;
            }
            part.swap(pb, pc);
            pb += 1;
            pc -= 1;
        }
        let r = pa.min(pb - pa);
        swap_ranges(part, 0, pb - r, r);
        let r = (pd - pc).min(n - pd - 1);
        swap_ranges(part, pb, n - r, r);
        let smaller = pb - pa;
        if smaller > 1 && overlaps(start, smaller) {
            sort_part(v, start, smaller, wanted, cmp);
        }
        let larger = pd - pc;
        if larger <= 1 {
            return;
        }
        start += n - larger;
        n = larger;
        if !overlaps(start, n) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator, so the test needs no seed plumbing.
    fn values(seed: u64, n: usize, distinct: u64) -> Vec<(u64, usize)> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((x >> 33) % distinct, i)
            })
            .collect()
    }

    #[test]
    fn the_wanted_range_holds_what_a_full_sort_puts_there() {
        let by_key = |a: &(u64, usize), b: &(u64, usize)| a.0.cmp(&b.0);
        for seed in 0..200 {
            for n in [1, 5, 7, 8, 40, 41, 100, 1000] {
                let distinct = 1 + seed % 50;
                let original = values(seed, n, distinct);
                let mut sorted = original.clone();
                sorted.sort_by(by_key);
                let first = (seed as usize * 7) % n;
                let last = (first + seed as usize % 9).min(n - 1);
                let mut partial = original.clone();
                sort_range(&mut partial, first, last, &by_key);
                let keys = |v: &[(u64, usize)]| v.iter().map(|e| e.0).collect::<Vec<_>>();
                assert_eq!(keys(&partial[first..=last]), keys(&sorted[first..=last]));
                // Still a permutation of the input.
                let mut ids: Vec<usize> = partial.iter().map(|e| e.1).collect();
                ids.sort_unstable();
                assert_eq!(ids, (0..n).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn a_full_range_sorts_everything() {
        let by_key = |a: &(u64, usize), b: &(u64, usize)| a.0.cmp(&b.0);
        let mut v = values(3, 500, 20);
        sort_range(&mut v, 0, 499, &by_key);
        assert!(v.windows(2).all(|w| w[0].0 <= w[1].0));
    }
}
