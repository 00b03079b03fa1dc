//! Which journal records recovery applies (docs/persistence.md, "Recovery").
//!
//! Each shard of the run that wrote the journals left its own sequence of segments. Reading
//! them gives every shard's records in order; a torn tail (the last record of the last
//! segment cut short by a crash) is dropped with a warning, damage anywhere else stops
//! recovery unless the operator forces it, which keeps the records before the damage.
//!
//! A multi-shard transaction is applied all or nothing. It is complete when as many shards
//! as it spans hold its end record. An incomplete one is dropped:
//! - when its intents were held until its end records were durable everywhere (`appendfsync
//!   always`, the end record's `durable_release` flag), nothing recorded later can depend on
//!   it, so only its own records go;
//! - otherwise a shard that recorded its end may hold later records that read what it wrote,
//!   so that shard's journal is cut at the transaction's first record there.
//!
//! A cut can remove another transaction's end record, making it incomplete in turn, so the
//! rules run until nothing changes.

use std::collections::{HashMap, HashSet};

use crate::journal::{Entry, ReadError, Record, SegmentReader};

/// A segment file read into memory, with its name for messages.
pub struct SegmentBytes {
    pub name: String,
    pub bytes: Vec<u8>,
}

/// Recovery cannot go on: a segment is damaged (and recovery is not forced).
#[derive(Debug)]
pub struct ReplayError {
    pub file: String,
    pub offset: u64,
    pub why: String,
}

impl std::fmt::Display for ReplayError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "journal {} is damaged at byte {}: {} (start with --force-recovery yes to load \
             what precedes the damage)",
            self.file, self.offset, self.why
        )
    }
}

impl std::error::Error for ReplayError {}

/// How recovery treats damaged journals.
#[derive(Debug, Clone, Copy)]
pub struct ReadPolicy {
    /// `aof-load-truncated`: a torn tail is cut off with a warning (else it is an error).
    pub load_truncated: bool,
    /// `force-recovery`: damage ends what is read from a shard, with a warning.
    pub force: bool,
}

/// The records of one shard's segments, in order. A torn tail of the last segment is cut
/// off with a warning (under `load_truncated`); any other damage is an error, or with
/// `force` a warning and the end of what is read from this shard.
pub fn read_shard<'a>(
    segments: &'a [SegmentBytes],
    policy: ReadPolicy,
    warnings: &mut Vec<String>,
) -> Result<Vec<Record<'a>>, ReplayError> {
    let force = policy.force;
    let mut records = Vec::new();
    for (i, seg) in segments.iter().enumerate() {
        let last = i + 1 == segments.len() && policy.load_truncated;
        let stop = |offset: u64, why: String, warnings: &mut Vec<String>| {
            if force {
                warnings.push(format!(
                    "journal {} is damaged at byte {offset} ({why}); --force-recovery: \
                     records from there on, and later segments of this shard, are skipped",
                    seg.name
                ));
                Ok(())
            } else {
                Err(ReplayError {
                    file: seg.name.clone(),
                    offset,
                    why,
                })
            }
        };
        let mut reader = match SegmentReader::new(&seg.bytes) {
            Ok(r) => r,
            Err(ReadError::TornTail { .. }) if last => {
                warnings.push(format!(
                    "journal {} holds no complete header (a crash right after it was \
                     created); ignored",
                    seg.name
                ));
                return Ok(records);
            }
            Err(e) => {
                let (offset, why) = describe(&e);
                stop(offset, why, warnings)?;
                return Ok(records);
            }
        };
        loop {
            match reader.next() {
                Ok(Some(r)) => records.push(r),
                Ok(None) => break,
                Err(ReadError::TornTail { offset }) if last => {
                    warnings.push(format!(
                        "journal {} ends with an incomplete record at byte {offset} (a crash \
                         while appending); it is cut off there",
                        seg.name
                    ));
                    break;
                }
                Err(e) => {
                    let (offset, why) = describe(&e);
                    stop(offset, why, warnings)?;
                    return Ok(records);
                }
            }
        }
    }
    Ok(records)
}

fn describe(e: &ReadError) -> (u64, String) {
    match e {
        ReadError::TornTail { offset } => (
            *offset,
            "a record is cut short (at the end of the last segment this is a crash's torn \
             tail, loaded when aof-load-truncated is yes)"
                .into(),
        ),
        ReadError::Corrupt { offset, why } => (*offset, why.clone()),
    }
}

/// What a transaction left across the shards' journals.
#[derive(Default)]
struct TxTrace {
    spans: u32,
    /// Shards holding its end record, with the record's `durable_release` flag.
    ends: HashMap<usize, bool>,
    /// Per shard, the index of its first record there.
    first: HashMap<usize, usize>,
}

/// Drops the records of incomplete multi-shard transactions from `shards` (one list per
/// shard of the run that wrote them) by the rules in the module comment; returns how many
/// transactions were dropped.
pub fn drop_incomplete_transactions(shards: &mut [Vec<Record<'_>>]) -> usize {
    let mut dropped: HashSet<u64> = HashSet::new();
    loop {
        let traces = trace(shards);
        let incomplete: Vec<(u64, TxTrace)> = traces
            .into_iter()
            .filter(|(_, t)| t.ends.len() < t.spans as usize)
            .collect();
        if incomplete.is_empty() {
            return dropped.len();
        }
        // Cut first (the earliest cut on each shard wins), then remove what remains of the
        // incomplete transactions.
        let mut cut_at: HashMap<usize, usize> = HashMap::new();
        for (_, t) in &incomplete {
            for (&shard, &durable_release) in &t.ends {
                if !durable_release {
                    if let Some(&first) = t.first.get(&shard) {
                        let at = cut_at.entry(shard).or_insert(first);
                        *at = (*at).min(first);
                    }
                }
            }
        }
        for (shard, at) in cut_at {
            shards[shard].truncate(at);
        }
        let ids: HashSet<u64> = incomplete.iter().map(|(id, _)| *id).collect();
        for records in shards.iter_mut() {
            records.retain(|r| !ids.contains(&r.txid));
        }
        dropped.extend(ids);
    }
}

fn trace(shards: &[Vec<Record<'_>>]) -> HashMap<u64, TxTrace> {
    let mut traces: HashMap<u64, TxTrace> = HashMap::new();
    for (shard, records) in shards.iter().enumerate() {
        for (i, r) in records.iter().enumerate() {
            if r.txid == 0 {
                continue;
            }
            let t = traces.entry(r.txid).or_default();
            t.spans = t.spans.max(r.tx_shards);
            t.first.entry(shard).or_insert(i);
            if let Entry::TxDone { durable_release } = r.entry {
                t.ends.insert(shard, durable_release);
            }
        }
    }
    traces
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::{encode_command, encode_tx_done, SegmentHeader};

    const STRICT: ReadPolicy = ReadPolicy {
        load_truncated: true,
        force: false,
    };
    const FORCED: ReadPolicy = ReadPolicy {
        load_truncated: true,
        force: true,
    };

    /// A segment for `shard` holding `records`: (txid, spans, Some(word) for a command or
    /// None for an end record with `durable_release`).
    fn segment(shard: u32, records: &[(u64, u32, Option<&str>, bool)]) -> Vec<u8> {
        let mut out = SegmentHeader {
            generation: 1,
            shard,
            seq: 0,
            first_lsn: 1,
        }
        .encode();
        for (i, (txid, spans, word, durable)) in records.iter().enumerate() {
            let lsn = i as u64 + 1;
            match word {
                Some(w) => encode_command(&mut out, lsn, 0, (*txid, *spans), &[*w]),
                None => encode_tx_done(&mut out, lsn, (*txid, *spans), *durable),
            }
        }
        out
    }

    fn words(records: &[Record<'_>]) -> Vec<String> {
        records
            .iter()
            .filter_map(|r| match &r.entry {
                Entry::Command(a) => Some(String::from_utf8_lossy(a[0]).into_owned()),
                Entry::TxDone { .. } => None,
            })
            .collect()
    }

    fn load(segs: &[Vec<u8>]) -> Vec<SegmentBytes> {
        segs.iter()
            .enumerate()
            .map(|(i, b)| SegmentBytes {
                name: format!("seg{i}"),
                bytes: b.clone(),
            })
            .collect()
    }

    #[test]
    fn complete_transactions_stay() {
        let a = load(&[segment(
            0,
            &[
                (0, 0, Some("a1"), false),
                (7, 2, Some("t"), false),
                (7, 2, None, false),
            ],
        )]);
        let b = load(&[segment(1, &[(7, 2, Some("u"), false), (7, 2, None, false)])]);
        let mut w = Vec::new();
        let mut shards = vec![
            read_shard(&a, STRICT, &mut w).unwrap(),
            read_shard(&b, STRICT, &mut w).unwrap(),
        ];
        assert_eq!(drop_incomplete_transactions(&mut shards), 0);
        assert_eq!(words(&shards[0]), ["a1", "t"]);
        assert_eq!(words(&shards[1]), ["u"]);
        assert!(w.is_empty());
    }

    #[test]
    fn an_incomplete_durable_transaction_loses_only_its_records() {
        // Shard 1 lost its part; shard 0 holds the end (released only once durable) and
        // a later write, which cannot depend on the transaction.
        let a = load(&[segment(
            0,
            &[
                (7, 2, Some("t"), true),
                (7, 2, None, true),
                (0, 0, Some("later"), false),
            ],
        )]);
        let mut w = Vec::new();
        let mut shards = vec![read_shard(&a, STRICT, &mut w).unwrap(), Vec::new()];
        assert_eq!(drop_incomplete_transactions(&mut shards), 1);
        assert_eq!(words(&shards[0]), ["later"]);
    }

    #[test]
    fn an_incomplete_released_transaction_cuts_what_follows_and_cascades() {
        // Transaction 7 (shards 0 and 1) lost its end on shard 1 and had released its
        // intents early: shard 0 is cut at its first record, which removes the end of
        // transaction 8 (shards 0 and 2), so shard 2 is cut too; shard 1 keeps what came
        // before 7.
        let a = load(&[segment(
            0,
            &[
                (0, 0, Some("a0"), false),
                (7, 2, Some("t7"), false),
                (7, 2, None, false),
                (8, 2, Some("t8"), false),
                (8, 2, None, false),
            ],
        )]);
        let b = load(&[segment(
            1,
            &[(0, 0, Some("b0"), false), (7, 2, Some("u7"), false)],
        )]);
        let c = load(&[segment(
            2,
            &[
                (0, 0, Some("c0"), false),
                (8, 2, Some("v8"), false),
                (8, 2, None, false),
                (0, 0, Some("c1"), false),
            ],
        )]);
        let mut w = Vec::new();
        let mut shards = vec![
            read_shard(&a, STRICT, &mut w).unwrap(),
            read_shard(&b, STRICT, &mut w).unwrap(),
            read_shard(&c, STRICT, &mut w).unwrap(),
        ];
        assert_eq!(drop_incomplete_transactions(&mut shards), 2);
        assert_eq!(words(&shards[0]), ["a0"]);
        assert_eq!(words(&shards[1]), ["b0"]);
        assert_eq!(words(&shards[2]), ["c0"]);
    }

    #[test]
    fn a_torn_tail_is_cut_with_a_warning_at_every_offset() {
        let full = segment(0, &[(0, 0, Some("one"), false), (0, 0, Some("two"), false)]);
        let one = segment(0, &[(0, 0, Some("one"), false)]);
        for len in one.len()..full.len() {
            let segs = load(&[full[..len].to_vec()]);
            let mut w = Vec::new();
            let records = read_shard(&segs, STRICT, &mut w).unwrap();
            assert_eq!(words(&records), ["one"], "cut at {len}");
            assert_eq!(w.len(), usize::from(len > one.len()), "cut at {len}: {w:?}");
        }
    }

    #[test]
    fn a_torn_tail_is_an_error_unless_truncated_loads_are_allowed() {
        let full = segment(0, &[(0, 0, Some("one"), false), (0, 0, Some("two"), false)]);
        let segs = load(&[full[..full.len() - 1].to_vec()]);
        let refuse = ReadPolicy {
            load_truncated: false,
            force: false,
        };
        assert!(read_shard(&segs, refuse, &mut Vec::new()).is_err());
        assert_eq!(
            words(&read_shard(&segs, STRICT, &mut Vec::new()).unwrap()),
            ["one"]
        );
    }

    #[test]
    fn damage_before_the_last_segment_or_mid_file_refuses_unless_forced() {
        let good = segment(0, &[(0, 0, Some("one"), false), (0, 0, Some("two"), false)]);
        let mut flipped = good.clone();
        let at = segment(0, &[(0, 0, Some("one"), false)]).len() - 2;
        flipped[at] ^= 0x40;
        let segs = load(&[flipped.clone(), good.clone()]);
        let mut w = Vec::new();
        let e = read_shard(&segs, STRICT, &mut w).unwrap_err();
        assert_eq!(e.file, "seg0");
        assert!(e.to_string().contains("--force-recovery"), "{e}");
        let kept = read_shard(&segs, FORCED, &mut w).unwrap();
        assert!(kept.is_empty());
        assert_eq!(w.len(), 1, "{w:?}");
        // A torn record in a segment that is not the last is damage too.
        let torn = load(&[good[..good.len() - 3].to_vec(), good.clone()]);
        assert!(read_shard(&torn, STRICT, &mut Vec::new()).is_err());
    }
}
