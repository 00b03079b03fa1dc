//! Safe wrapper over the C `long double` helper used by INCRBYFLOAT.

use std::os::raw::{c_char, c_int};

extern "C" {
    fn damselfly_incrbyfloat(
        val: *const c_char,
        val_len: usize,
        is_missing: c_int,
        incr: *const c_char,
        incr_len: usize,
        out: *mut c_char,
        out_len: usize,
    ) -> c_int;
}

#[derive(Debug, PartialEq, Eq)]
pub enum IncrFloatError {
    ValueNotFloat,
    IncrNotFloat,
    NanOrInfinity,
}

/// Adds `incr` to `value` (None = missing key, i.e. 0) in long double; returns Redis's text.
pub fn incr_by_float(value: Option<&[u8]>, incr: &[u8]) -> Result<Vec<u8>, IncrFloatError> {
    let mut out = vec![0u8; 5 * 1024 + 64];
    let (ptr, len, missing) = match value {
        Some(v) => (v.as_ptr(), v.len(), 0),
        None => (std::ptr::null(), 0, 1),
    };
    // SAFETY: pointers and lengths describe live slices; the helper writes at most out.len().
    let n = unsafe {
        damselfly_incrbyfloat(
            ptr.cast(),
            len,
            missing,
            incr.as_ptr().cast(),
            incr.len(),
            out.as_mut_ptr().cast(),
            out.len(),
        )
    };
    match n {
        -1 => Err(IncrFloatError::ValueNotFloat),
        -2 => Err(IncrFloatError::IncrNotFloat),
        n if n < 0 => Err(IncrFloatError::NanOrInfinity),
        n => {
            out.truncate(n as usize);
            Ok(out)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_redis_text() {
        assert_eq!(incr_by_float(Some(b"10.5"), b"0.1").unwrap(), b"10.6");
        assert_eq!(incr_by_float(None, b"3.0e3").unwrap(), b"3000");
        assert_eq!(incr_by_float(Some(b"5.0e3"), b"2.0e2").unwrap(), b"5200");
        assert_eq!(incr_by_float(Some(b"-1"), b"1").unwrap(), b"0");
        assert_eq!(
            incr_by_float(Some(b"abc"), b"1"),
            Err(IncrFloatError::ValueNotFloat)
        );
        assert_eq!(
            incr_by_float(Some(b"1"), b" 1"),
            Err(IncrFloatError::IncrNotFloat)
        );
        assert_eq!(
            incr_by_float(Some(b"1"), b"inf"),
            Err(IncrFloatError::NanOrInfinity)
        );
        assert_eq!(
            incr_by_float(Some(b"1.5\0\0x"), b"1"),
            Err(IncrFloatError::ValueNotFloat)
        );
    }
}
