//! Redis's geohash: positions as 52-bit interleaved scores of a sorted set (26 bits of
//! longitude over [-180, 180] and of latitude over the Web Mercator limits [-85.05112878,
//! 85.05112878]), the centre of a score's cell as its position, the 11-character standard
//! geohash string, and the haversine distance on Redis's Earth radius. Every floating-point
//! step is the one Redis takes, in its order, so positions and distances print the same
//! digits.

pub const LON_MIN: f64 = -180.0;
pub const LON_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate.
const STEP: u32 = 26;
/// The Earth's radius Redis measures with, in meters.
const EARTH_RADIUS: f64 = 6372797.560856;
const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";

/// Whether Redis accepts the position.
pub fn valid(lon: f64, lat: f64) -> bool {
    (LON_MIN..=LON_MAX).contains(&lon) && (LAT_MIN..=LAT_MAX).contains(&lat)
}

/// Spreads the 32 bits of `v` over the even bits of a u64.
fn spread(v: u32) -> u64 {
    let mut x = u64::from(v);
    x = (x | (x << 16)) & 0x0000_FFFF_0000_FFFF;
    x = (x | (x << 8)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x << 2)) & 0x3333_3333_3333_3333;
    (x | (x << 1)) & 0x5555_5555_5555_5555
}

/// The even bits of `x`, packed.
fn squash(x: u64) -> u32 {
    let mut x = x & 0x5555_5555_5555_5555;
    x = (x | (x >> 1)) & 0x3333_3333_3333_3333;
    x = (x | (x >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
    x = (x | (x >> 4)) & 0x00FF_00FF_00FF_00FF;
    x = (x | (x >> 8)) & 0x0000_FFFF_0000_FFFF;
    ((x | (x >> 16)) & 0x0000_0000_FFFF_FFFF) as u32
}

/// Latitude bits on the even positions, longitude bits on the odd ones.
fn encode_in(lon: (f64, f64), lat: (f64, f64), x: f64, y: f64) -> u64 {
    let lat_offset = (y - lat.0) / (lat.1 - lat.0) * f64::from(1u32 << STEP);
    let lon_offset = (x - lon.0) / (lon.1 - lon.0) * f64::from(1u32 << STEP);
    // C's conversion to uint32_t: truncation.
    spread(lat_offset as u32) | (spread(lon_offset as u32) << 1)
}

/// The score of a valid position.
pub fn encode(lon: f64, lat: f64) -> u64 {
    encode_in((LON_MIN, LON_MAX), (LAT_MIN, LAT_MAX), lon, lat)
}

/// The centre of a score's cell, as (longitude, latitude), kept within the limits.
pub fn decode(bits: u64) -> (f64, f64) {
    let (ilat, ilon) = (squash(bits), squash(bits >> 1));
    let cells = f64::from(1u32 << STEP);
    let edge = |i: u32, min: f64, max: f64| {
        let scale = max - min;
        (
            min + (f64::from(i) * 1.0 / cells) * scale,
            min + ((f64::from(i) + 1.0) * 1.0 / cells) * scale,
        )
    };
    let (lon_lo, lon_hi) = edge(ilon, LON_MIN, LON_MAX);
    let (lat_lo, lat_hi) = edge(ilat, LAT_MIN, LAT_MAX);
    let lon = ((lon_lo + lon_hi) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((lat_lo + lat_hi) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// GEOHASH's string for a score: the cell's centre re-encoded over the standard latitude
/// range [-90, 90], 52 bits in 10 characters and a final '0', as Redis prints it.
pub fn to_standard(bits: u64) -> [u8; 11] {
    let (lon, lat) = decode(bits);
    let hash = encode_in((-180.0, 180.0), (-90.0, 90.0), lon, lat);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().take(10).enumerate() {
        *c = ALPHABET[((hash >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

fn radians(degrees: f64) -> f64 {
    degrees * (std::f64::consts::PI / 180.0)
}

/// The haversine distance in meters between two positions.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (radians(lon1), radians(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        // Same meridian: the distance along it.
        return EARTH_RADIUS * (radians(lat2) - radians(lat1)).abs();
    }
    let (lat1r, lat2r) = (radians(lat1), radians(lat2));
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS * a.sqrt().asin()
}

/// Meters per unit of GEODIST's and GEOSEARCH's units, None for another unit.
pub fn unit(name: &[u8]) -> Option<f64> {
    match name.to_ascii_lowercase().as_slice() {
        b"m" => Some(1.0),
        b"km" => Some(1000.0),
        b"ft" => Some(0.3048),
        b"mi" => Some(1609.34),
        _ => None,
    }
}

/// Redis's "human" printing of a long double holding `v`: 17 decimals, trailing zeros
/// (and a trailing point) removed.
pub fn human(v: f64) -> String {
    let s = format!("{v:.17}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redis_documents_these_positions() {
        let palermo = encode(13.361389, 38.115556);
        assert_eq!(palermo, 3479099956230698);
        let (lon, lat) = decode(palermo);
        assert_eq!(human(lon), "13.36138933897018433");
        assert_eq!(human(lat), "38.11555639549629859");
        assert_eq!(&to_standard(palermo), b"sqc8b49rny0");
        let catania = encode(15.087269, 37.502669);
        let (lon2, lat2) = decode(catania);
        assert_eq!(
            format!("{:.4}", distance(lon, lat, lon2, lat2)),
            "166274.1516"
        );
    }

    #[test]
    fn interleaving_round_trips() {
        for (a, b) in [
            (0u32, 0u32),
            (1, 0),
            (0, 1),
            (0x3ff_ffff, 0x155_5555),
            (12345, 67890),
        ] {
            let bits = spread(a) | (spread(b) << 1);
            assert_eq!((squash(bits), squash(bits >> 1)), (a, b));
        }
    }

    #[test]
    fn limits_and_units() {
        assert!(valid(180.0, 85.05112878) && valid(-180.0, -85.05112878));
        assert!(!valid(180.1, 0.0) && !valid(0.0, 85.06));
        assert_eq!(unit(b"KM"), Some(1000.0));
        assert_eq!(unit(b"yd"), None);
        assert_eq!(human(1.5), "1.5");
        assert_eq!(human(2.0), "2");
    }
}
