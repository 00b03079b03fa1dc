//! `damselfly check-journal [--fix] [--dump] FILE`, in the spirit of redis-check-aof: reads
//! one journal segment and says whether it is whole, where a torn tail or damage starts, and
//! with `--fix` cuts the file there (losing what follows). `--dump` prints every record.

use std::process::ExitCode;

use damselfly_persistence::journal::{Entry, ReadError, SegmentReader};

const USAGE: &str = "usage: damselfly check-journal [--fix] [--dump] FILE";

/// Runs the checker named by `args[0]` (the words after the program name); None when the
/// arguments are not a checker command.
pub fn run(args: &[String]) -> Option<ExitCode> {
    let (name, rest) = args.split_first()?;
    if name != "check-journal" {
        return None;
    }
    let fix = rest.iter().any(|a| a == "--fix");
    let dump = rest.iter().any(|a| a == "--dump");
    let files: Vec<&String> = rest.iter().filter(|a| !a.starts_with("--")).collect();
    let [file] = files[..] else {
        eprintln!("{USAGE}");
        return Some(ExitCode::from(2));
    };
    Some(match check_journal(file, fix, dump) {
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
