//! DUMP payloads (cluster.c `createDumpPayload` / `verifyDumpPayload`): the value's RDB type
//! byte and body, then the RDB version (2 bytes, little-endian) and a CRC-64 of everything
//! before it (8 bytes, little-endian). RESTORE refuses a payload from a newer RDB version or
//! with a wrong checksum and, as Redis does, decodes the value from the whole payload (footer
//! included) and ignores whatever follows it.
//!
//! FUNCTION DUMP payloads have the same footer around a FUNCTION2 record (the library's
//! code as an RDB string) per library.

use damselfly_storage::{EncodingLimits, Value, ValueRef};

use crate::crc64::crc64;
use crate::error::Error;
use crate::rdb::{
    opcodes, read_value, value_type, write_value, Encoder, Input, WriteOptions, RDB_VERSION,
};

/// The reply RESTORE gives for a payload failing [`verify`].
pub const BAD_PAYLOAD: &str = "ERR DUMP payload version or checksum are wrong";
/// The reply RESTORE gives for a payload whose value cannot be decoded.
pub const BAD_DATA: &str = "ERR Bad data format";

/// The DUMP payload of `value`, encoded as redis-server 7.0 encodes it (compression and list
/// node sizes from `opts`; `opts.checksum` does not apply, a payload always carries one).
pub fn encode(value: ValueRef<'_>, opts: &WriteOptions) -> Vec<u8> {
    let mut out = vec![value_type(value)];
    let mut enc = Encoder::new(opts);
    // A Vec sink cannot fail.
    let _ = write_value(&mut out, &mut enc, value);
    with_footer(out)
}

/// Appends the RDB version and the CRC-64 of everything before the checksum.
pub(crate) fn with_footer(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = crc64(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// FUNCTION DUMP: one FUNCTION2 record per library's code, then the footer.
pub fn encode_functions(codes: &[&[u8]], opts: &WriteOptions) -> Vec<u8> {
    let mut out = Vec::new();
    let mut enc = Encoder::new(opts);
    for code in codes {
        out.push(opcodes::FUNCTION2);
        enc.string(&mut out, code);
    }
    with_footer(out)
}

/// FUNCTION RESTORE's reading of a payload: the libraries' codes, or Redis's error reply.
pub fn decode_functions(payload: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    if !verify(payload) {
        return Err(BAD_PAYLOAD);
    }
    let body = &payload[..payload.len() - 10];
    let mut input = Input::new(body);
    let mut codes = Vec::new();
    while input.pos() < body.len() as u64 {
        let code = match input.u8() {
            Ok(opcodes::FUNCTION2) => input.string(),
            Ok(_) => return Err("ERR given type is not a function"),
            Err(_) => return Err("ERR can not read data type"),
        };
        codes.push(code.map_err(|_| "ERR failed loading the given functions payload")?);
    }
    Ok(codes)
}

/// `verifyDumpPayload`: at least the footer, a version not newer than ours, the checksum.
pub fn verify(payload: &[u8]) -> bool {
    if payload.len() < 10 {
        return false;
    }
    let (body, footer) = payload.split_at(payload.len() - 10);
    let version = u16::from_le_bytes([footer[0], footer[1]]);
    let mut stored = [0u8; 8];
    stored.copy_from_slice(&footer[2..]);
    version <= RDB_VERSION && crc64(&payload[..body.len() + 2]) == u64::from_le_bytes(stored)
}

/// Why RESTORE refuses a payload.
#[derive(Debug)]
pub enum DumpError {
    /// Too short, from a newer RDB version, or a wrong checksum.
    VersionOrChecksum,
    /// The value itself cannot be decoded (corrupt, an empty collection, or a type Damselfly
    /// does not support); the error says which.
    BadData(Error),
}

impl DumpError {
    /// The error reply Redis gives for this case.
    pub fn reply(&self) -> &'static str {
        match self {
            DumpError::VersionOrChecksum => BAD_PAYLOAD,
            DumpError::BadData(_) => BAD_DATA,
        }
    }
}

impl std::fmt::Display for DumpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DumpError::VersionOrChecksum => f.write_str(BAD_PAYLOAD),
            DumpError::BadData(e) => write!(f, "{BAD_DATA}: {e}"),
        }
    }
}

impl std::error::Error for DumpError {}

/// Checks and decodes a payload into a value built with Damselfly's encodings.
pub fn decode(payload: &[u8], limits: &EncodingLimits) -> Result<Value, DumpError> {
    if !verify(payload) {
        return Err(DumpError::VersionOrChecksum);
    }
    // Redis reads the value from the whole payload, footer included: a value may run into the
    // footer's bytes, and whatever follows the value is ignored.
    let mut input = Input::new(payload);
    let value = input
        .u8()
        .and_then(|ty| read_value(&mut input, ty, b"", limits))
        .map_err(DumpError::BadData)?;
    value.ok_or_else(|| {
        DumpError::BadData(Error::corrupt(0, "the payload holds an empty collection"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::hex;
    use damselfly_storage::Hash;

    #[test]
    fn redis_payloads_decode_and_reencode() {
        let limits = EncodingLimits::default();
        let opts = WriteOptions::default();
        // DUMPs taken from redis-server 7.0.15 (see the comments in encoding::listpack).
        let cases = [
            // HSET h f1 v1 num 12345 neg -7 big 9223372036854775807
            "102f2f00000008008266310382763103836e756d04f1393003836e656704dff9028362696704f4ffff\
             ffffffffff7f09ff0a00c389e4b232e7d3e7",
            // ZADD z 1 a 2.5 b -3 c 1e300 d (a listpack that LZF compresses)
            "11c32d361f360000000800816302dffd02816102010181620283322e350481640297312e30e005000731\
             652b33303018ff0a005c81725c034e0b0f",
            // RPUSH l x 100 -4096 4095 -32769 8388607 -2147483649 <70 x y>
            "120102c32e406f1c6f00000008008178026401d00002cfff02f2ff7fff04f2ffff7f04f4ff2005200304\
             ff09e04679e03c000148ff0a00af3305a34bf49f07",
            // SADD s 1 2 3
            "0b0e02000000030000000100020003000a00a5025ce26d6e4d1b",
            // SET k <"abc" x 20>
            "00c30b3c03616263 61e02d02016263 0a006f6029e4afd764ac",
        ];
        for c in cases {
            let payload = hex(c);
            assert!(verify(&payload), "{c}");
            let v = decode(&payload, &limits).unwrap();
            assert_eq!(encode(v.as_ref(), &opts), payload, "re-encoding {c}");
        }
    }

    #[test]
    fn bad_payloads() {
        let limits = EncodingLimits::default();
        let mut h = Hash::default();
        h.set(b"f", b"v", &limits);
        let good = encode(Value::Hash(Box::new(h)).as_ref(), &WriteOptions::default());
        assert!(decode(&good, &limits).is_ok());
        assert!(!verify(&good[..9]));
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            assert!(decode(&bad, &limits).is_err(), "flipped byte {i}");
        }
        // A newer version is refused even with a right checksum.
        let mut newer = good[..good.len() - 10].to_vec();
        newer.extend_from_slice(&11u16.to_le_bytes());
        let crc = crc64(&newer);
        newer.extend_from_slice(&crc.to_le_bytes());
        assert!(!verify(&newer));
        // An older one is accepted.
        let mut older = good[..good.len() - 10].to_vec();
        older.extend_from_slice(&9u16.to_le_bytes());
        let crc = crc64(&older);
        older.extend_from_slice(&crc.to_le_bytes());
        assert!(decode(&older, &limits).is_ok());
    }
}
