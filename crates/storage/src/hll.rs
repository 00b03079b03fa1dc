//! HyperLogLog in Redis's own byte format, so PFCOUNT answers exactly what Redis answers and a
//! HyperLogLog string copied between the two servers keeps working: a 16-byte header (`HYLL`,
//! encoding, cached cardinality), then 16384 six-bit registers either packed (dense, 12 KB) or
//! run-length coded (sparse: ZERO, XZERO and VAL opcodes), converted to dense when the sparse
//! form would pass `hll-sparse-max-bytes` or a register exceeds 32. Hash: MurmurHash64A with
//! Redis's seed; estimator: Ertl's improved one, as Redis 5+ uses (standard error 0.81%).

const P: u32 = 14;
const Q: u32 = 64 - P;
pub const REGISTERS: usize = 1 << P;
const REGISTER_MAX: u8 = 63;
pub const HEADER: usize = 16;
pub const DENSE_SIZE: usize = HEADER + (REGISTERS * 6).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// The HyperLogLog is corrupt (a sparse form that does not cover exactly every register).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

/// MurmurHash64A, as Redis's hyperloglog.c has it (little-endian reads).
fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let mut chunks = key.chunks_exact(8);
    for c in &mut chunks {
        let mut k = u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate().rev() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element updates and the value it proposes (1..=51).
fn register_of(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element, 0xadc8_3b19);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

/// A new, empty HyperLogLog (sparse: one XZERO run over every register).
pub fn new_hll() -> Vec<u8> {
    let mut s = vec![0u8; HEADER];
    s[..4].copy_from_slice(b"HYLL");
    s[4] = SPARSE;
    let mut left = REGISTERS;
    while left > 0 {
        let run = left.min(XZERO_MAX_LEN);
        s.extend_from_slice(&xzero(run));
        left -= run;
    }
    s
}

/// True when `s` is a HyperLogLog Redis would accept.
pub fn is_valid(s: &[u8]) -> bool {
    s.len() >= HEADER
        && &s[..4] == b"HYLL"
        && s[4] <= SPARSE
        && (s[4] != DENSE || s.len() == DENSE_SIZE)
}

fn invalidate_cache(s: &mut [u8]) {
    s[15] |= 0x80;
}

/// The cached cardinality, when valid.
pub fn cached(s: &[u8]) -> Option<u64> {
    (s[15] & 0x80 == 0).then(|| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&s[8..16]);
        u64::from_le_bytes(b)
    })
}

pub fn set_cached(s: &mut [u8], card: u64) {
    s[8..16].copy_from_slice(&card.to_le_bytes());
}

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    let b0 = u16::from(regs[byte]);
    let b1 = u16::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & u16::from(REGISTER_MAX)) as u8
}

fn dense_set(regs: &mut [u8], i: usize, v: u8) {
    let (byte, fb) = (i * 6 / 8, (i * 6) & 7);
    let v = u16::from(v);
    regs[byte] &= !((u16::from(REGISTER_MAX) << fb) as u8);
    regs[byte] |= (v << fb) as u8;
    if let Some(next) = regs.get_mut(byte + 1) {
        *next &= !((u16::from(REGISTER_MAX) >> (8 - fb)) as u8);
        *next |= (v >> (8 - fb)) as u8;
    }
}

// Sparse opcodes: ZERO 00xxxxxx (run 1..64), XZERO 01xxxxxx yyyyyyyy (run 1..16384),
// VAL 1vvvvvxx (value 1..32, run 1..4).
fn is_xzero(b: u8) -> bool {
    b & 0xc0 == 0x40
}

fn is_val(b: u8) -> bool {
    b & 0x80 != 0
}

fn val(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len as u8 - 1)
}

fn val_value(b: u8) -> u8 {
    ((b >> 2) & 0x1f) + 1
}

fn val_len(b: u8) -> usize {
    usize::from(b & 3) + 1
}

fn zero(len: usize) -> u8 {
    len as u8 - 1
}

fn xzero(len: usize) -> [u8; 2] {
    let l = len - 1;
    [0x40 | (l >> 8) as u8, (l & 0xff) as u8]
}

/// (registers covered, opcode length) of the opcode at `s[p]`.
fn opcode(s: &[u8], p: usize) -> (usize, usize) {
    let b = s[p];
    if is_val(b) {
        (val_len(b), 1)
    } else if is_xzero(b) {
        let lo = s.get(p + 1).copied().unwrap_or(0);
        ((usize::from(b & 0x3f) << 8 | usize::from(lo)) + 1, 2)
    } else {
        (usize::from(b & 0x3f) + 1, 1)
    }
}

/// Calls `f(first register, run length, value)` for every run of a sparse HyperLogLog.
fn sparse_runs(s: &[u8], mut f: impl FnMut(usize, usize, u8)) -> Result<(), Corrupt> {
    let (mut p, mut reg) = (HEADER, 0);
    while p < s.len() {
        let (span, oplen) = opcode(s, p);
        let v = if is_val(s[p]) { val_value(s[p]) } else { 0 };
        if reg + span > REGISTERS {
            return Err(Corrupt);
        }
        f(reg, span, v);
        reg += span;
        p += oplen;
    }
    if reg == REGISTERS {
        Ok(())
    } else {
        Err(Corrupt)
    }
}

fn to_dense(s: &mut Vec<u8>) -> Result<(), Corrupt> {
    if s[4] == DENSE {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    dense[..HEADER].copy_from_slice(&s[..HEADER]);
    dense[4] = DENSE;
    sparse_runs(s, |first, len, v| {
        if v > 0 {
            for i in first..first + len {
                dense_set(&mut dense[HEADER..], i, v);
            }
        }
    })?;
    *s = dense;
    Ok(())
}

/// Raises register `index` to `count` in a sparse HyperLogLog, splitting and merging opcodes
/// exactly as Redis's hllSparseSet does; converts to dense when needed. True when changed.
fn sparse_set(s: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(s, index, count);
    }
    // Find the opcode covering the register.
    let (mut p, mut first, mut prev) = (HEADER, 0, None);
    let mut span = 0;
    while p < s.len() {
        let (sp, oplen) = opcode(s, p);
        span = sp;
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= s.len() {
        return Err(Corrupt);
    }
    let op = s[p];
    let (is_v, is_xz) = (is_val(op), is_xzero(op));
    if is_v {
        if val_value(op) >= count {
            return Ok(false);
        }
        if span == 1 {
            s[p] = val(count, 1);
            merge_vals(s, prev.unwrap_or(HEADER));
            return Ok(true);
        }
    }
    if !is_v && !is_xz && span == 1 {
        s[p] = val(count, 1);
        merge_vals(s, prev.unwrap_or(HEADER));
        return Ok(true);
    }
    let last = first + span - 1;
    let mut seq: Vec<u8> = Vec::with_capacity(5);
    let zeros = |seq: &mut Vec<u8>, len: usize| {
        if len > ZERO_MAX_LEN {
            seq.extend_from_slice(&xzero(len));
        } else {
            seq.push(zero(len));
        }
    };
    if is_v {
        let cur = val_value(op);
        if index != first {
            seq.push(val(cur, index - first));
        }
        seq.push(val(count, 1));
        if index != last {
            seq.push(val(cur, last - index));
        }
    } else {
        if index != first {
            zeros(&mut seq, index - first);
        }
        seq.push(val(count, 1));
        if index != last {
            zeros(&mut seq, last - index);
        }
    }
    let old_len = if is_xz { 2 } else { 1 };
    if seq.len() > old_len && s.len() + seq.len() - old_len > max_bytes {
        return promote(s, index, count);
    }
    s.splice(p..p + old_len, seq);
    merge_vals(s, prev.unwrap_or(HEADER));
    Ok(true)
}

/// Merges adjacent VAL opcodes of equal value, scanning up to five opcodes from `from`.
fn merge_vals(s: &mut Vec<u8>, from: usize) {
    let mut p = from;
    let mut scan = 5;
    while p < s.len() && scan > 0 {
        scan -= 1;
        let b = s[p];
        if is_xzero(b) {
            p += 2;
            continue;
        }
        if !is_val(b) {
            p += 1;
            continue;
        }
        if p + 1 < s.len() && is_val(s[p + 1]) && val_value(b) == val_value(s[p + 1]) {
            let len = val_len(b) + val_len(s[p + 1]);
            if len <= VAL_MAX_LEN {
                s[p + 1] = val(val_value(b), len);
                s.remove(p);
                continue;
            }
        }
        p += 1;
    }
}

fn promote(s: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    to_dense(s)?;
    dense_set(&mut s[HEADER..], index, count);
    Ok(true)
}

/// Raises register `index` to at least `count`; true when it changed.
fn set_register(
    s: &mut Vec<u8>,
    index: usize,
    count: u8,
    max_bytes: usize,
) -> Result<bool, Corrupt> {
    if s[4] == DENSE {
        let regs = &mut s[HEADER..];
        if dense_get(regs, index) >= count {
            return Ok(false);
        }
        dense_set(regs, index, count);
        Ok(true)
    } else {
        sparse_set(s, index, count, max_bytes)
    }
}

/// Adds an element (PFADD); true when a register changed. The caller invalidates the cache.
pub fn add(s: &mut Vec<u8>, element: &[u8], max_bytes: usize) -> Result<bool, Corrupt> {
    let (index, count) = register_of(element);
    set_register(s, index, count, max_bytes)
}

/// True when adding `element` would raise a register (PFADD writes only then); a corrupt
/// HyperLogLog answers true so that adding reports it.
pub fn would_raise(s: &[u8], element: &[u8]) -> bool {
    let (index, count) = register_of(element);
    if s[4] == DENSE {
        return dense_get(&s[HEADER..], index) < count;
    }
    let mut current = None;
    let walked = sparse_runs(s, |first, len, v| {
        if (first..first + len).contains(&index) {
            current = Some(v);
        }
    });
    walked.is_err() || current.is_none_or(|v| v < count)
}

/// Raises `max` to this HyperLogLog's registers (PFCOUNT of several keys, PFMERGE).
pub fn merge_into(max: &mut [u8], s: &[u8]) -> Result<(), Corrupt> {
    if s[4] == DENSE {
        let regs = &s[HEADER..];
        for (i, m) in max.iter_mut().enumerate() {
            *m = (*m).max(dense_get(regs, i));
        }
        Ok(())
    } else {
        sparse_runs(s, |first, len, v| {
            for m in &mut max[first..first + len] {
                *m = (*m).max(v);
            }
        })
    }
}

/// Whether the HyperLogLog is dense (PFMERGE then makes its target dense).
pub fn is_dense(s: &[u8]) -> bool {
    s[4] == DENSE
}

/// Writes merged registers into `s` (PFMERGE's target), dense first when `dense`.
pub fn store_registers(
    s: &mut Vec<u8>,
    max: &[u8],
    dense: bool,
    max_bytes: usize,
) -> Result<(), Corrupt> {
    if dense {
        to_dense(s)?;
    }
    for (i, &v) in max.iter().enumerate() {
        if v > 0 {
            set_register(s, i, v, max_bytes)?;
        }
    }
    invalidate_cache(s);
    Ok(())
}

/// Marks the cached cardinality stale (after a change).
pub fn changed(s: &mut [u8]) {
    invalidate_cache(s);
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let before = z;
        z += x * y;
        y += y;
        if before == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let before = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if before == z {
            return z / 3.0;
        }
    }
}

/// The estimate from a histogram of register values.
fn estimate(histo: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - f64::from(histo[Q as usize + 1])) / m);
    for j in (1..=Q as usize).rev() {
        z += f64::from(histo[j]);
        z *= 0.5;
    }
    z += m * sigma(f64::from(histo[0]) / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The cardinality estimate of one HyperLogLog.
pub fn count(s: &[u8]) -> Result<u64, Corrupt> {
    let mut histo = [0u32; 64];
    if s[4] == DENSE {
        let regs = &s[HEADER..];
        for i in 0..REGISTERS {
            histo[usize::from(dense_get(regs, i))] += 1;
        }
    } else {
        sparse_runs(s, |_, len, v| histo[usize::from(v)] += len as u32)?;
    }
    Ok(estimate(&histo))
}

/// The cardinality estimate of merged registers.
pub fn count_registers(max: &[u8]) -> u64 {
    let mut histo = [0u32; 64];
    for &v in max {
        histo[usize::from(v)] += 1;
    }
    estimate(&histo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_is_redis_bytes() {
        let h = new_hll();
        assert_eq!(h.len(), 18);
        assert_eq!(&h[16..], &[0x7f, 0xff]);
        assert_eq!(count(&h), Ok(0));
    }

    #[test]
    fn sparse_and_dense_agree_and_stay_within_the_error_bound() {
        let mut sparse = new_hll();
        let mut dense = new_hll();
        to_dense(&mut dense).expect("fresh");
        for n in 0..20_000u32 {
            let e = format!("element:{n}");
            add(&mut sparse, e.as_bytes(), 3000).expect("valid");
            add(&mut dense, e.as_bytes(), usize::MAX).expect("valid");
            if n == 500 {
                assert!(!is_dense(&sparse), "still sparse at 500 elements");
                assert_eq!(count(&sparse), count(&dense));
            }
        }
        assert!(is_dense(&sparse), "converted past hll-sparse-max-bytes");
        let est = count(&dense).expect("valid") as f64;
        assert!((est - 20_000.0).abs() / 20_000.0 < 0.03, "estimate {est}");
        assert_eq!(count(&sparse), count(&dense));
    }

    #[test]
    fn sparse_registers_match_a_dense_model() {
        let mut s = new_hll();
        let mut model = vec![0u8; REGISTERS];
        let mut rng = 0x1234_5678_u64;
        for _ in 0..3000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let index = (rng % REGISTERS as u64) as usize;
            let v = (rng >> 20) as u8 % 20 + 1;
            let changed = set_register(&mut s, index, v, usize::MAX).expect("valid");
            assert_eq!(changed, v > model[index]);
            model[index] = model[index].max(v);
        }
        let mut got = vec![0u8; REGISTERS];
        merge_into(&mut got, &s).expect("valid");
        assert_eq!(got, model);
    }
}
