//! Redis's intset (intset.c): encoding width (u32 LE: 2, 4 or 8 bytes per member), member
//! count (u32 LE), then the members in ascending order, little-endian, all in the width of the
//! widest one.

use super::{le, Corrupt};

/// The blob for `members`, which must be ascending and distinct (an intset's order).
pub fn encode(members: &[i64]) -> Vec<u8> {
    let width: usize = match (members.first(), members.last()) {
        (Some(&lo), Some(&hi)) if lo < i64::from(i32::MIN) || hi > i64::from(i32::MAX) => 8,
        (Some(&lo), Some(&hi)) if lo < i64::from(i16::MIN) || hi > i64::from(i16::MAX) => 4,
        _ => 2,
    };
    let mut out = Vec::with_capacity(8 + width * members.len());
    out.extend_from_slice(&(width as u32).to_le_bytes());
    out.extend_from_slice(&(members.len() as u32).to_le_bytes());
    for &m in members {
        out.extend_from_slice(&m.to_le_bytes()[..width]);
    }
    out
}

/// Decodes and checks an intset: known width, size matching the count, not empty, strictly
/// ascending (Redis's deep validation).
pub fn decode(blob: &[u8]) -> Result<Vec<i64>, Corrupt> {
    let width = le::<4>(blob, 0).ok_or_else(|| Corrupt("intset header cut short".into()))?;
    let count = le::<4>(blob, 4).ok_or_else(|| Corrupt("intset header cut short".into()))?;
    if !matches!(width, 2 | 4 | 8) {
        return Err(Corrupt(format!("intset of {width}-byte members")));
    }
    let width = width as usize;
    if (count as usize)
        .checked_mul(width)
        .and_then(|n| n.checked_add(8))
        != Some(blob.len())
    {
        return Err(Corrupt(format!(
            "intset of {count} {width}-byte members in {} bytes",
            blob.len()
        )));
    }
    if count == 0 {
        return Err(Corrupt("empty intset".into()));
    }
    let shift = 64 - 8 * width as u32;
    let members: Vec<i64> = blob[8..]
        .chunks_exact(width)
        .map(|c| {
            let u = c.iter().rev().fold(0u64, |a, &b| (a << 8) | u64::from(b));
            ((u << shift) as i64) >> shift
        })
        .collect();
    if members.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Corrupt("intset members out of order or repeated".into()));
    }
    Ok(members)
}

#[cfg(test)]
mod tests {
    use super::super::hex;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn redis_intsets() {
        // SADD s 1 2 3 / SADD s2 -70000 5 / SADD s3 5000000000 1 on redis-server 7.0.15;
        // each DUMP carries these blobs after the type byte and length.
        let cases: [(&str, &[i64]); 3] = [
            ("02000000 03000000 0100 0200 0300", &[1, 2, 3]),
            ("04000000 02000000 90eefeff 05000000", &[-70000, 5]),
            (
                "08000000 02000000 0100000000000000 00f2052a01000000",
                &[1, 5000000000],
            ),
        ];
        for (blob, members) in cases {
            let blob = hex(blob);
            assert_eq!(decode(&blob).unwrap(), members);
            assert_eq!(encode(members), blob);
        }
    }

    #[test]
    fn corrupt_intsets_are_errors() {
        let good = encode(&[1, 2, 3]);
        for bad in [
            &good[..7],
            &good[..good.len() - 1],
            &encode(&[3, 2])[..],
            &encode(&[2, 2])[..],
            &encode(&[])[..],
        ] {
            assert!(decode(bad).is_err(), "{bad:?}");
        }
        let mut bad = good.clone();
        bad[0] = 3;
        assert!(decode(&bad).is_err());
        let mut bad = good;
        bad[4] = 0xff; // a count far beyond the blob
        assert!(decode(&bad).is_err());
    }

    proptest! {
        #[test]
        fn round_trip(set in proptest::collection::btree_set(prop_oneof![
            any::<i16>().prop_map(i64::from),
            any::<i32>().prop_map(i64::from),
            any::<i64>(),
        ], 1..50)) {
            let members: Vec<i64> = set.into_iter().collect();
            prop_assert_eq!(decode(&encode(&members)).unwrap(), members);
        }
    }
}
