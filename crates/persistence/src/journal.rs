//! A shard's journal: the mutations it applied, in order, as framed records in segment files.
//!
//! A segment file is a header frame followed by record frames. Every frame is
//! `[len: u32 LE][crc: u32 LE][body: len bytes]`, the CRC-32 (IEEE, crc32fast) of the body,
//! so a torn or damaged record is recognised on its own. A record's body is
//! `[lsn: u64][db: u32][txid: u64][tx_shards: u32][kind: u8][...]`:
//!
//! - kind 0, a command as the shard applied it, rewritten to its effect where replaying the
//!   client's words would not reproduce it (relative times made absolute, random picks made
//!   explicit): `[argc: u32]` then `argc` times `[len: u32][bytes]`;
//! - kind 1, the end of one shard's part of a multi-shard transaction: `[flags: u8]`, where
//!   bit 0 says the transaction released its intents only once this part was durable on every
//!   shard (appendfsync always), so a crash can leave it incomplete without any later record
//!   depending on it.
//!
//! `txid` is 0 outside multi-shard transactions; within one it names the transaction and
//! `tx_shards` says on how many shards it ended, which is how recovery tells a complete
//! transaction from one the crash cut short (docs/persistence.md, "Recovery").

use std::fmt;

/// Magic at the start of every segment file.
pub const SEGMENT_MAGIC: &[u8; 8] = b"DFLYJRN1";
/// A header frame's body: magic, generation, shard, seq, first LSN.
const HEADER_BODY: usize = 8 + 8 + 4 + 8 + 8;
/// Frame header: length and CRC.
const FRAME_HEADER: usize = 8;
/// Smallest record body: lsn, db, txid, tx_shards, kind.
const RECORD_FIXED: usize = 8 + 4 + 8 + 4 + 1;
/// Largest frame body accepted when reading: a record holds one command, whose arguments the
/// server already bounds (proto-max-bulk-len, client-query-buffer-limit); this only stops a
/// damaged length field from asking for absurd memory.
const MAX_BODY: usize = 1 << 34;

/// What a segment file says about itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The generation (manifest) the segment belongs to: a file of another generation, left
    /// behind by an earlier run, is never read into this one.
    pub generation: u64,
    /// The shard (of the run that wrote it) whose journal this is.
    pub shard: u32,
    /// Its place in that shard's sequence of segments.
    pub seq: u64,
    /// The LSN its first record has (records number on from there).
    pub first_lsn: u64,
}

impl SegmentHeader {
    /// The header frame, to write first in a new segment.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(HEADER_BODY);
        body.extend_from_slice(SEGMENT_MAGIC);
        body.extend_from_slice(&self.generation.to_le_bytes());
        body.extend_from_slice(&self.shard.to_le_bytes());
        body.extend_from_slice(&self.seq.to_le_bytes());
        body.extend_from_slice(&self.first_lsn.to_le_bytes());
        let mut out = Vec::with_capacity(FRAME_HEADER + body.len());
        frame(&mut out, &body);
        out
    }
}

/// One record's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry<'a> {
    Command(Vec<&'a [u8]>),
    TxDone { durable_release: bool },
}

/// A decoded record, borrowing from the buffer it was read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record<'a> {
    pub lsn: u64,
    pub db: u32,
    /// 0 outside a multi-shard transaction.
    pub txid: u64,
    /// On how many shards the transaction ends (0 outside one).
    pub tx_shards: u32,
    pub entry: Entry<'a>,
}

/// Appends one framed record to `out`: the shard thread encodes into a buffer, the journal's
/// writer thread puts whole buffers on disk.
pub fn encode_command<A: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    lsn: u64,
    db: u32,
    tx: (u64, u32),
    args: &[A],
) {
    let size = RECORD_FIXED + 4 + args.iter().map(|a| 4 + a.as_ref().len()).sum::<usize>();
    let start = begin_frame(out, size);
    record_fixed(out, lsn, db, tx, 0);
    out.extend_from_slice(&len32(args.len()).to_le_bytes());
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(&len32(a.len()).to_le_bytes());
        out.extend_from_slice(a);
    }
    end_frame(out, start);
}

/// Appends the record that ends this shard's part of multi-shard transaction `tx`.
pub fn encode_tx_done(out: &mut Vec<u8>, lsn: u64, tx: (u64, u32), durable_release: bool) {
    let start = begin_frame(out, RECORD_FIXED + 1);
    record_fixed(out, lsn, 0, tx, 1);
    out.push(u8::from(durable_release));
    end_frame(out, start);
}

/// Lengths in a record are u32: a single argument is bounded far below by
/// proto-max-bulk-len's own maximum, and so is the argument count.
fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn begin_frame(out: &mut Vec<u8>, body: usize) -> usize {
    out.reserve(FRAME_HEADER + body);
    let start = out.len();
    out.extend_from_slice(&[0; FRAME_HEADER]);
    start
}

fn end_frame(out: &mut [u8], start: usize) {
    let body = &out[start + FRAME_HEADER..];
    let len = len32(body.len()).to_le_bytes();
    let crc = crc32fast::hash(body).to_le_bytes();
    out[start..start + 4].copy_from_slice(&len);
    out[start + 4..start + 8].copy_from_slice(&crc);
}

fn frame(out: &mut Vec<u8>, body: &[u8]) {
    out.extend_from_slice(&len32(body.len()).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(body).to_le_bytes());
    out.extend_from_slice(body);
}

fn record_fixed(out: &mut Vec<u8>, lsn: u64, db: u32, (txid, shards): (u64, u32), kind: u8) {
    out.extend_from_slice(&lsn.to_le_bytes());
    out.extend_from_slice(&db.to_le_bytes());
    out.extend_from_slice(&txid.to_le_bytes());
    out.extend_from_slice(&shards.to_le_bytes());
    out.push(kind);
}

/// Why reading a segment stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// The file ends inside its last frame (only zeros after it): what a crash during an
    /// append leaves. Everything before `offset` is good.
    TornTail { offset: u64 },
    /// A frame in the middle is damaged, or its content breaks the format.
    Corrupt { offset: u64, why: String },
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::TornTail { offset } => {
                write!(f, "the last record is incomplete from byte {offset}")
            }
            ReadError::Corrupt { offset, why } => write!(f, "corrupt at byte {offset}: {why}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// Reads a whole segment held in memory: its header, then one record at a time.
pub struct SegmentReader<'a> {
    buf: &'a [u8],
    pos: usize,
    header: SegmentHeader,
}

impl<'a> SegmentReader<'a> {
    /// Checks the header frame. A file too short to hold it is a torn tail at 0 (a crash
    /// right after the file was created); anything else wrong with it is corruption.
    pub fn new(buf: &'a [u8]) -> Result<Self, ReadError> {
        let body = match next_frame(buf, 0)? {
            Some((body, _)) => body,
            None => return Err(ReadError::TornTail { offset: 0 }),
        };
        if body.len() != HEADER_BODY || &body[..8] != SEGMENT_MAGIC {
            return Err(ReadError::Corrupt {
                offset: 0,
                why: "not a Damselfly journal segment".into(),
            });
        }
        let mut r = Fields::new(&body[8..], FRAME_HEADER as u64 + 8);
        let header = SegmentHeader {
            generation: r.u64()?,
            shard: r.u32()?,
            seq: r.u64()?,
            first_lsn: r.u64()?,
        };
        Ok(SegmentReader {
            buf,
            pos: FRAME_HEADER + body.len(),
            header,
        })
    }

    pub fn header(&self) -> SegmentHeader {
        self.header
    }

    /// Where the next record starts (after the last one read).
    pub fn offset(&self) -> u64 {
        self.pos as u64
    }

    /// The next record; Ok(None) at a clean end of file.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> Result<Option<Record<'a>>, ReadError> {
        let start = self.pos;
        let Some((body, end)) = next_frame(self.buf, start)? else {
            return Ok(None);
        };
        let record = decode_record(body, start as u64 + FRAME_HEADER as u64)?;
        self.pos = end;
        Ok(Some(record))
    }
}

/// The frame at `start`: Ok(None) at the end of `buf`, TornTail when it is cut short.
fn next_frame(buf: &[u8], start: usize) -> Result<Option<(&[u8], usize)>, ReadError> {
    let rest = &buf[start.min(buf.len())..];
    if rest.is_empty() {
        return Ok(None);
    }
    let torn = ReadError::TornTail {
        offset: start as u64,
    };
    // Zeros where a frame would start end the segment: the writer extends a segment with
    // zeros ahead of its records under `always` (appender.rs), and a crash can leave a file
    // longer than what reached it, zero-filled. Either way nothing was written there.
    if rest.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if rest.len() < FRAME_HEADER {
        return Err(torn);
    }
    let len = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
    let crc = u32::from_le_bytes([rest[4], rest[5], rest[6], rest[7]]);
    if !(RECORD_FIXED..=MAX_BODY).contains(&len) {
        // A length too small for any frame, with only zeros after it, is a length field the
        // crash cut short.
        if len < RECORD_FIXED && rest[FRAME_HEADER..].iter().all(|&b| b == 0) {
            return Err(torn);
        }
        return Err(ReadError::Corrupt {
            offset: start as u64,
            why: format!("a record of {len} bytes"),
        });
    }
    let Some(body) = rest.get(FRAME_HEADER..FRAME_HEADER + len) else {
        // A frame running past the end is a torn append, unless whole frames follow: then
        // its length field is damaged.
        if whole_frame_after(buf, start + 1) {
            return Err(ReadError::Corrupt {
                offset: start as u64,
                why: "a record's length runs past the end, yet whole records follow".into(),
            });
        }
        return Err(torn);
    };
    if crc32fast::hash(body) != crc {
        // A bad checksum on the file's last frame (only zeros after it) is a write the
        // crash cut short; before other frames it is damage.
        if buf[start + FRAME_HEADER + len..].iter().all(|&b| b == 0) {
            return Err(torn);
        }
        return Err(ReadError::Corrupt {
            offset: start as u64,
            why: "record checksum mismatch".into(),
        });
    }
    Ok(Some((body, start + FRAME_HEADER + len)))
}

/// Whether a frame with a valid checksum starts anywhere from `from` on (only read when a
/// file ends in an incomplete frame, to tell a torn tail from a damaged length).
fn whole_frame_after(buf: &[u8], from: usize) -> bool {
    (from..buf.len().saturating_sub(FRAME_HEADER)).any(|at| {
        let h = &buf[at..at + FRAME_HEADER];
        let len = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize;
        let crc = u32::from_le_bytes([h[4], h[5], h[6], h[7]]);
        len >= RECORD_FIXED
            && buf
                .get(at + FRAME_HEADER..at + FRAME_HEADER + len)
                .is_some_and(|body| crc32fast::hash(body) == crc)
    })
}

fn decode_record(body: &[u8], offset: u64) -> Result<Record<'_>, ReadError> {
    let mut r = Fields::new(body, offset);
    let lsn = r.u64()?;
    let db = r.u32()?;
    let txid = r.u64()?;
    let tx_shards = r.u32()?;
    let entry = match r.u8()? {
        0 => {
            let argc = r.u32()? as usize;
            // Each argument takes at least its 4-byte length: bounds the reservation.
            let mut args = Vec::with_capacity(argc.min(r.remaining() / 4));
            for _ in 0..argc {
                let len = r.u32()? as usize;
                args.push(r.bytes(len)?);
            }
            Entry::Command(args)
        }
        1 => Entry::TxDone {
            durable_release: r.u8()? & 1 != 0,
        },
        other => return Err(r.corrupt(format!("unknown record kind {other}"))),
    };
    if r.remaining() != 0 {
        return Err(r.corrupt("bytes after the record's content".into()));
    }
    Ok(Record {
        lsn,
        db,
        txid,
        tx_shards,
        entry,
    })
}

/// Little-endian fields of one frame body; errors name the offset in the file.
struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    base: u64,
}

impl<'a> Fields<'a> {
    fn new(buf: &'a [u8], base: u64) -> Self {
        Fields { buf, pos: 0, base }
    }

    fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn corrupt(&self, why: String) -> ReadError {
        ReadError::Corrupt {
            offset: self.base + self.pos as u64,
            why,
        }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], ReadError> {
        let Some(b) = self.buf.get(self.pos..self.pos.saturating_add(n)) else {
            return Err(self.corrupt(format!("a field of {n} bytes runs past its record")));
        };
        self.pos += n;
        Ok(b)
    }

    fn u8(&mut self) -> Result<u8, ReadError> {
        Ok(self.bytes(1)?[0])
    }

    fn u32(&mut self) -> Result<u32, ReadError> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Result<u64, ReadError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

/// A segment's file name: `<prefix>.<shard>.<seq>.journal`.
pub fn segment_name(prefix: &str, shard: u32, seq: u64) -> String {
    format!("{prefix}.{shard}.{seq}.journal")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sample() -> Vec<u8> {
        let mut buf = SegmentHeader {
            generation: 1,
            shard: 3,
            seq: 7,
            first_lsn: 100,
        }
        .encode();
        encode_command(&mut buf, 100, 0, (0, 0), &[&b"SET"[..], b"k", b"v"]);
        encode_command(&mut buf, 101, 5, (42, 2), &[&b"DEL"[..], b"a"]);
        encode_tx_done(&mut buf, 102, (42, 2), true);
        encode_command(&mut buf, 103, 0, (0, 0), &[&b"PING"[..]]);
        buf
    }

    fn read_all(buf: &[u8]) -> Result<(SegmentHeader, Vec<Record<'_>>), ReadError> {
        let mut r = SegmentReader::new(buf)?;
        let mut out = Vec::new();
        while let Some(rec) = r.next()? {
            out.push(rec);
        }
        Ok((r.header(), out))
    }

    #[test]
    fn round_trip() {
        let buf = sample();
        let (header, records) = read_all(&buf).unwrap();
        assert_eq!(
            header,
            SegmentHeader {
                generation: 1,
                shard: 3,
                seq: 7,
                first_lsn: 100
            }
        );
        assert_eq!(records.len(), 4);
        assert_eq!(
            records[0].entry,
            Entry::Command(vec![&b"SET"[..], b"k", b"v"])
        );
        assert_eq!(
            (records[1].db, records[1].txid, records[1].tx_shards),
            (5, 42, 2)
        );
        assert_eq!(
            records[2].entry,
            Entry::TxDone {
                durable_release: true
            }
        );
        assert_eq!(records[3].lsn, 103);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail_and_keeps_the_rest() {
        let buf = sample();
        let mut r = SegmentReader::new(&buf).unwrap();
        for _ in 0..3 {
            r.next().unwrap();
        }
        let last_start = r.offset() as usize;
        for cut in last_start + 1..buf.len() {
            assert_last_torn_at(&buf[..cut], last_start, cut);
        }
    }

    /// `bytes` (the sample's four records, the last torn at `cut`) read as three records,
    /// then a torn tail where the fourth starts.
    fn assert_last_torn_at(bytes: &[u8], last_start: usize, cut: usize) {
        let mut r = SegmentReader::new(bytes).unwrap();
        for _ in 0..3 {
            assert!(r.next().unwrap().is_some());
        }
        assert_eq!(
            r.next(),
            Err(ReadError::TornTail {
                offset: last_start as u64
            }),
            "cut at {cut}"
        );
    }

    #[test]
    fn zeros_after_the_records_end_the_segment_and_a_torn_record_before_them_is_torn() {
        let buf = sample();
        // Extended ahead of its records (or left longer by a crash): the records, then the end.
        let mut padded = buf.clone();
        padded.extend_from_slice(&[0; 100]);
        let (header, records) = read_all(&padded).unwrap();
        assert_eq!((header, records), read_all(&buf).unwrap());
        // The last record cut short inside the zeros: a torn tail, whether its length still
        // fits in the file (bad checksum) or not.
        let mut r = SegmentReader::new(&buf).unwrap();
        for _ in 0..3 {
            r.next().unwrap();
        }
        let last_start = r.offset() as usize;
        for cut in [last_start + 1, last_start + 9, buf.len() - 1] {
            let mut torn = buf[..cut].to_vec();
            torn.resize(buf.len() + 100, 0);
            assert_last_torn_at(&torn, last_start, cut);
        }
        // Zeros in the middle, records after them: damage.
        let mut holed = buf.clone();
        holed[last_start..last_start + 8].fill(0);
        let mut r = SegmentReader::new(&holed).unwrap();
        for _ in 0..3 {
            r.next().unwrap();
        }
        assert!(matches!(r.next(), Err(ReadError::Corrupt { .. })));
    }

    #[test]
    fn a_flipped_byte_in_the_middle_is_corruption() {
        let buf = sample();
        let header_len = SegmentHeader {
            generation: 1,
            shard: 0,
            seq: 0,
            first_lsn: 0,
        }
        .encode()
        .len();
        let mut r = SegmentReader::new(&buf).unwrap();
        r.next().unwrap();
        let second = r.offset() as usize;
        // In a body, and in the first record's length (which then runs past the end).
        for at in [header_len + 10, second + 9, header_len + 2] {
            let mut bad = buf.clone();
            bad[at] ^= 0x40;
            let err = read_all(&bad).unwrap_err();
            assert!(
                matches!(err, ReadError::Corrupt { .. }),
                "flip at {at}: {err:?}"
            );
        }
        let mut bad = buf.clone();
        bad[3] ^= 1;
        assert!(matches!(
            SegmentReader::new(&bad),
            Err(ReadError::Corrupt { .. } | ReadError::TornTail { .. })
        ));
    }

    proptest! {
        #[test]
        fn any_commands_round_trip(cmds in proptest::collection::vec(
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 1..5), 0..20)) {
            let mut buf = SegmentHeader { generation: 1, shard: 1, seq: 1, first_lsn: 1 }.encode();
            for (i, c) in cmds.iter().enumerate() {
                encode_command(&mut buf, i as u64 + 1, 0, (0, 0), c);
            }
            let (_, records) = read_all(&buf).unwrap();
            prop_assert_eq!(records.len(), cmds.len());
            for (rec, c) in records.iter().zip(&cmds) {
                let want: Vec<&[u8]> = c.iter().map(|a| a.as_slice()).collect();
                prop_assert_eq!(&rec.entry, &Entry::Command(want));
            }
        }

        #[test]
        fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let mut buf = sample();
            buf.extend_from_slice(&bytes);
            let _ = read_all(&buf);
            let _ = read_all(&bytes);
        }
    }
}
