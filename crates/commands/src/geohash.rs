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

/// Latitude bits on the even positions, longitude bits on the odd ones, `step` bits each.
fn encode_in(lon: (f64, f64), lat: (f64, f64), x: f64, y: f64, step: u32) -> u64 {
    let lat_offset = (y - lat.0) / (lat.1 - lat.0) * f64::from(1u32 << step);
    let lon_offset = (x - lon.0) / (lon.1 - lon.0) * f64::from(1u32 << step);
    // C's conversion to uint32_t: truncation.
    spread(lat_offset as u32) | (spread(lon_offset as u32) << 1)
}

/// The score of a valid position.
pub fn encode(lon: f64, lat: f64) -> u64 {
    encode_in((LON_MIN, LON_MAX), (LAT_MIN, LAT_MAX), lon, lat, STEP)
}

/// A cell's extent: (min, max) longitude and (min, max) latitude.
struct Area {
    lon: (f64, f64),
    lat: (f64, f64),
}

/// The extent of the cell `bits` of a grid with `step` bits per coordinate.
fn area(bits: u64, step: u32) -> Area {
    let (ilat, ilon) = (squash(bits), squash(bits >> 1));
    let cells = (1u64 << step) as f64;
    let edge = |i: u32, min: f64, max: f64| {
        let scale = max - min;
        (
            min + (f64::from(i) * 1.0 / cells) * scale,
            min + ((f64::from(i) + 1.0) * 1.0 / cells) * scale,
        )
    };
    Area {
        lon: edge(ilon, LON_MIN, LON_MAX),
        lat: edge(ilat, LAT_MIN, LAT_MAX),
    }
}

/// The centre of a score's cell, as (longitude, latitude), kept within the limits.
pub fn decode(bits: u64) -> (f64, f64) {
    let a = area(bits, STEP);
    let lon = ((a.lon.0 + a.lon.1) / 2.0).clamp(LON_MIN, LON_MAX);
    let lat = ((a.lat.0 + a.lat.1) / 2.0).clamp(LAT_MIN, LAT_MAX);
    (lon, lat)
}

/// GEOHASH's string for a score: the cell's centre re-encoded over the standard latitude
/// range [-90, 90], 52 bits in 10 characters and a final '0', as Redis prints it.
pub fn to_standard(bits: u64) -> [u8; 11] {
    let (lon, lat) = decode(bits);
    let hash = encode_in((-180.0, 180.0), (-90.0, 90.0), lon, lat, STEP);
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().take(10).enumerate() {
        *c = ALPHABET[((hash >> (52 - (i + 1) * 5)) & 0x1f) as usize];
    }
    out
}

fn radians(degrees: f64) -> f64 {
    degrees * (std::f64::consts::PI / 180.0)
}

/// The distance in meters between two latitudes along a meridian.
fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS * (radians(lat2) - radians(lat1)).abs()
}

/// The haversine distance in meters between two positions.
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let (lon1r, lon2r) = (radians(lon1), radians(lon2));
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
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

// ---------------------------------------------------------------------------------------------
// Searching an area (GEOSEARCH, GEORADIUS): Redis's nine-cell cover and its membership tests.

/// Half the Web Mercator world's width in meters, the scale of the step estimate.
const MERCATOR_MAX: f64 = 20037726.37;

/// What is searched: a circle of `radius` or a `width` x `height` box (in the query's unit)
/// around a centre.
#[derive(Clone, Copy, Debug)]
pub enum Extent {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// A search area: its centre, its extent, and meters per unit of the extent.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    pub lon: f64,
    pub lat: f64,
    pub extent: Extent,
    pub to_meters: f64,
}

/// A cell of the grid with `step` bits per coordinate (Redis's GeoHashBits).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Cell {
    bits: u64,
    step: u32,
}

impl Cell {
    fn at(lon: f64, lat: f64, step: u32) -> Cell {
        let bits = encode_in((LON_MIN, LON_MAX), (LAT_MIN, LAT_MAX), lon, lat, step);
        Cell { bits, step }
    }

    fn area(self) -> Area {
        area(self.bits, self.step)
    }

    /// The cell `dx` columns east and `dy` rows north (each -1, 0 or 1), wrapping around the
    /// grid as Redis's bit arithmetic does.
    fn moved(self, dx: i8, dy: i8) -> Cell {
        let width = 64 - self.step * 2;
        let (lon_bits, lat_bits) = (0xaaaa_aaaa_aaaa_aaaa_u64, 0x5555_5555_5555_5555_u64);
        // Adds or subtracts one on the bits of one coordinate: the other coordinate's bit
        // positions are filled with ones so the carry runs through them.
        let shift = |bits: u64, mine: u64, other: u64, d: i8| {
            let (v, fill) = (bits & mine, other >> width);
            let v = match d.cmp(&0) {
                std::cmp::Ordering::Greater => v.wrapping_add(fill + 1),
                std::cmp::Ordering::Less => (v | fill).wrapping_sub(fill + 1),
                std::cmp::Ordering::Equal => return bits & mine,
            };
            v & (mine >> width)
        };
        let lon = shift(self.bits, lon_bits, lat_bits, dx);
        let lat = shift(self.bits, lat_bits, lon_bits, dy);
        Cell {
            bits: lon | lat,
            step: self.step,
        }
    }

    /// The score range [min, max) of the members inside the cell.
    fn scores(self) -> (f64, f64) {
        let align = |bits: u64| (bits << (STEP * 2 - self.step * 2)) as f64;
        (align(self.bits), align(self.bits + 1))
    }
}

/// Bits per coordinate of cells about as large as the search radius (coarser near the poles).
fn estimate_step(radius_meters: f64, lat: f64) -> u32 {
    if radius_meters == 0.0 {
        return STEP;
    }
    let (mut range, mut step) = (radius_meters, 1i32);
    while range < MERCATOR_MAX {
        range *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, STEP as i32) as u32
}

fn degrees(radians: f64) -> f64 {
    radians / (std::f64::consts::PI / 180.0)
}

impl Shape {
    /// Half the height and half the width of the area, in meters.
    fn half_extent_meters(&self) -> (f64, f64) {
        match self.extent {
            Extent::Radius(r) => (self.to_meters * r, self.to_meters * r),
            Extent::Box { width, height } => (
                self.to_meters * (height / 2.0),
                self.to_meters * (width / 2.0),
            ),
        }
    }

    /// The longitude and latitude bounds of the area: (min lon, min lat, max lon, max lat).
    /// A box's sides bend with the meridians, so its widest edge is the one nearer the
    /// equator.
    fn bounds(&self) -> [f64; 4] {
        let (height, width) = self.half_extent_meters();
        let lat_delta = degrees(height / EARTH_RADIUS);
        let lon_delta_top = degrees(width / EARTH_RADIUS / radians(self.lat + lat_delta).cos());
        let lon_delta_bottom = degrees(width / EARTH_RADIUS / radians(self.lat - lat_delta).cos());
        let lon_delta = if self.lat < 0.0 {
            lon_delta_bottom
        } else {
            lon_delta_top
        };
        [
            self.lon - lon_delta,
            self.lat - lat_delta,
            self.lon + lon_delta,
            self.lat + lat_delta,
        ]
    }

    /// The distance from the centre to the farthest point of the area, in meters.
    fn reach_meters(&self) -> f64 {
        let r = match self.extent {
            Extent::Radius(r) => r,
            Extent::Box { width, height } => {
                ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
            }
        };
        r * self.to_meters
    }

    /// The score ranges to scan, in Redis's order (the centre's cell, then N, S, E, W, NE, NW,
    /// SE, SW), leaving out neighbours beyond a side the centre cell already covers, and a
    /// neighbour equal to the neighbour scanned before it (huge radii wrap around the grid).
    pub fn score_ranges(&self) -> Vec<(f64, f64)> {
        let [min_lon, min_lat, max_lon, max_lat] = self.bounds();
        let mut step = estimate_step(self.reach_meters(), self.lat);
        let mut centre = Cell::at(self.lon, self.lat, step);
        // A neighbour that does not reach past the area's bounds means the cells are too
        // small to cover it: one step coarser.
        let too_fine = centre.moved(0, 1).area().lat.1 < max_lat
            || centre.moved(0, -1).area().lat.0 > min_lat
            || centre.moved(1, 0).area().lon.1 < max_lon
            || centre.moved(-1, 0).area().lon.0 > min_lon;
        if step > 1 && too_fine {
            step -= 1;
            centre = Cell::at(self.lon, self.lat, step);
        }
        let a = centre.area();
        let coarse = step < 2;
        let keep_north = coarse || a.lat.1 <= max_lat;
        let keep_south = coarse || a.lat.0 >= min_lat;
        let keep_east = coarse || a.lon.1 <= max_lon;
        let keep_west = coarse || a.lon.0 >= min_lon;
        const ORDER: [(i8, i8); 9] = [
            (0, 0),
            (0, 1),
            (0, -1),
            (1, 0),
            (-1, 0),
            (1, 1),
            (-1, 1),
            (1, -1),
            (-1, -1),
        ];
        let mut ranges = Vec::with_capacity(ORDER.len());
        // Redis compares with the last neighbour scanned, never with the centre.
        let mut last_neighbour = None;
        for (i, (dx, dy)) in ORDER.into_iter().enumerate() {
            let kept = (dy != 1 || keep_north)
                && (dy != -1 || keep_south)
                && (dx != 1 || keep_east)
                && (dx != -1 || keep_west);
            let cell = centre.moved(dx, dy);
            if !kept || last_neighbour == Some(cell) {
                continue;
            }
            ranges.push(cell.scores());
            if i > 0 {
                last_neighbour = Some(cell);
            }
        }
        ranges
    }

    /// The distance in meters from the centre to a position inside the area, None for a
    /// position outside it.
    pub fn distance_within(&self, lon: f64, lat: f64) -> Option<f64> {
        match self.extent {
            Extent::Radius(r) => {
                let d = distance(self.lon, self.lat, lon, lat);
                (d <= r * self.to_meters).then_some(d)
            }
            Extent::Box { width, height } => {
                let (width, height) = (width * self.to_meters, height * self.to_meters);
                // The cheaper latitude test first, as Redis.
                if lat_distance(lat, self.lat) > height / 2.0
                    || distance(lon, lat, self.lon, lat) > width / 2.0
                {
                    return None;
                }
                Some(distance(self.lon, self.lat, lon, lat))
            }
        }
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
