//! The checkers, in the spirit of redis-check-aof and redis-check-rdb:
//!
//! - `damselfly check-journal [--fix] [--dump] FILE` reads one journal segment and says whether
//!   it is whole, where a torn tail or damage starts, and with `--fix` cuts the file there
//!   (losing what follows). `--dump` prints every record.
//! - `damselfly check-snapshot FILE` reads an RDB file (a Damselfly snapshot file or a Redis
//!   dump.rdb) to its checksum and says what it holds, or where and why it is damaged.

use std::process::ExitCode;

use damselfly_persistence::journal::{Entry, ReadError, SegmentReader};
use damselfly_persistence::rdb::{Event, RdbReader};
use damselfly_storage::EncodingLimits;

const USAGE: &str =
    "usage: damselfly check-journal [--fix] [--dump] FILE | damselfly check-snapshot FILE";

/// Runs the checker named by `args[0]` (the words after the program name); None when the
/// arguments are not a checker command.
pub fn run(args: &[String]) -> Option<ExitCode> {
    let (name, rest) = args.split_first()?;
    if name != "check-journal" && name != "check-snapshot" {
        return None;
    }
    let fix = rest.iter().any(|a| a == "--fix");
    let dump = rest.iter().any(|a| a == "--dump");
    let files: Vec<&String> = rest.iter().filter(|a| !a.starts_with("--")).collect();
    let [file] = files[..] else {
        eprintln!("{USAGE}");
        return Some(ExitCode::from(2));
    };
    let checked = if name == "check-snapshot" {
        check_snapshot(file)
    } else {
        check_journal(file, fix, dump)
    };
    Some(match checked {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(1)
        }
    })
}

fn check_journal(file: &str, fix: bool, dump: bool) -> Result<(), String> {
    let bytes = std::fs::read(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let mut reader = match SegmentReader::new(&bytes) {
        Ok(r) => r,
        Err(e) => return Err(format!("{file}: bad header: {e}")),
    };
    let h = reader.header();
    println!(
        "{file}: generation {}, shard {}, segment {}, first LSN {}",
        h.generation, h.shard, h.seq, h.first_lsn
    );
    let mut count = 0u64;
    let mut last_lsn = None;
    let problem = loop {
        match reader.next() {
            Ok(Some(r)) => {
                count += 1;
                last_lsn = Some(r.lsn);
                if dump {
                    let what = match &r.entry {
                        Entry::Command(words) => words
                            .iter()
                            .map(|w| format!("{:?}", String::from_utf8_lossy(w)))
                            .collect::<Vec<_>>()
                            .join(" "),
                        Entry::TxDone { durable_release } => {
                            format!("END OF TRANSACTION (durable release: {durable_release})")
                        }
                    };
                    println!(
                        "lsn {} db {} tx {}/{}: {what}",
                        r.lsn, r.db, r.txid, r.tx_shards
                    );
                }
            }
            Ok(None) => break None,
            Err(e) => break Some(e),
        }
    };
    let last = last_lsn.map_or("none".to_string(), |l| l.to_string());
    match problem {
        None => {
            println!("{file}: OK, {count} records, last LSN {last}");
            Ok(())
        }
        Some(e) => {
            let offset = match &e {
                ReadError::TornTail { offset } | ReadError::Corrupt { offset, .. } => *offset,
            };
            println!("{file}: {count} good records (last LSN {last}), then {e}");
            if !fix {
                return Err(format!(
                    "{file}: not whole; `--fix` cuts it at byte {offset}, losing {} bytes",
                    bytes.len() as u64 - offset
                ));
            }
            let f = std::fs::OpenOptions::new()
                .write(true)
                .open(file)
                .map_err(|e| format!("cannot open {file}: {e}"))?;
            f.set_len(offset)
                .and_then(|()| f.sync_all())
                .map_err(|e| format!("cannot cut {file}: {e}"))?;
            println!("{file}: cut at byte {offset}; it now ends after LSN {last}");
            Ok(())
        }
    }
}

fn check_snapshot(file: &str) -> Result<(), String> {
    let f = std::fs::File::open(file).map_err(|e| format!("cannot read {file}: {e}"))?;
    let mut reader = RdbReader::new(std::io::BufReader::new(f), EncodingLimits::default())
        .map_err(|e| format!("{file}: {e}"))?;
    let mut keys: std::collections::BTreeMap<u64, (u64, u64)> = Default::default();
    let mut aux = Vec::new();
    let mut functions = 0u64;
    loop {
        match reader.next() {
            Ok(Some(Event::Entry(e))) => {
                let counts = keys.entry(e.db).or_default();
                counts.0 += 1;
                counts.1 += u64::from(e.expire_ms.is_some());
            }
            Ok(Some(Event::Aux { key, value })) => aux.push(format!(
                "{}={}",
                String::from_utf8_lossy(&key),
                String::from_utf8_lossy(&value)
            )),
            Ok(Some(Event::Function { .. })) => functions += 1,
            Ok(Some(_)) => {}
            Ok(None) => break,
            Err(e) => {
                let total: u64 = keys.values().map(|c| c.0).sum();
                return Err(format!("{file}: {total} keys read, then {e}"));
            }
        }
    }
    println!(
        "{file}: RDB version {}, {}",
        reader.version(),
        aux.join(" ")
    );
    if functions > 0 {
        println!("function libraries: {functions}");
    }
    for (db, (n, expires)) in &keys {
        println!("db{db}: keys={n} expires={expires}");
    }
    let total: u64 = keys.values().map(|c| c.0).sum();
    println!("{file}: OK, {total} keys, checksum verified");
    Ok(())
}
