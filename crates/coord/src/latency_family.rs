//! SLOWLOG, LATENCY and INFO latencystats: the thin command handlers over the per-thread
//! slow logs, latency events and histograms (crates/commands/src/slowlog.rs, latency.rs).
//! Each thread records what ran on it; these handlers ask every thread for its copy (the
//! control messages INFO uses) and merge the copies into the one answer Redis would give.

use std::sync::atomic::Ordering;

use damselfly_commands::latency::{self, DoctorContext, Events, Histograms};
use damselfly_commands::slowlog::{self, SlowEntry};
use damselfly_commands::{errors, lookup, Args, COMMANDS};

use crate::connection::Connection;
use crate::messages::ShardMsg;
use crate::worker::Worker;

/// Whether the process has transparent huge pages (Redis's THPGetAnonHugePagesSize).
fn anon_huge_pages() -> bool {
    let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") else {
        return false;
    };
    text.lines()
        .filter_map(|l| l.strip_prefix("AnonHugePages:"))
        .any(|v| {
            v.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .unwrap_or(0)
                > 0
        })
}

impl Connection {
    fn slowlog_max_len(&self) -> usize {
        let max = self
            .worker
            .cluster
            .config
            .slowlog_max_len
            .load(Ordering::Relaxed);
        usize::try_from(max).unwrap_or(usize::MAX)
    }

    /// Every thread's slow log entries, merged newest first and capped at `slowlog-max-len`.
    async fn gather_slowlog(&mut self) -> Vec<SlowEntry> {
        let max = self.slowlog_max_len();
        let parts = self
            .ask_all(|tx| {
                ShardMsg::Call(Box::new(move |w: &Worker| {
                    let _ = tx.send(w.slowlog.borrow_mut().snapshot(max));
                }))
            })
            .await;
        slowlog::merge(parts, max)
    }

    /// Every thread's latency events as one monitor's.
    async fn gather_events(&mut self) -> Events {
        let parts = self
            .ask_all(|tx| {
                ShardMsg::Call(Box::new(move |w: &Worker| {
                    let _ = tx.send(w.latency_events.borrow().clone());
                }))
            })
            .await;
        Events::merge(&parts)
    }

    /// Every thread's latency histograms added up.
    pub(crate) async fn gather_histograms(&mut self) -> Histograms {
        let parts = self
            .ask_all(|tx| {
                ShardMsg::Call(Box::new(move |w: &Worker| {
                    let _ = tx.send(w.histograms.borrow().clone());
                }))
            })
            .await;
        Histograms::merge(&parts)
    }

    /// SLOWLOG GET [count], LEN, RESET, HELP.
    pub(crate) async fn slowlog_cmd(&mut self, args: &Args<'_>) {
        let n = args.len();
        let sub = args.get(1).to_ascii_lowercase();
        match sub.as_slice() {
            b"help" if n == 2 => self.out.help("SLOWLOG", slowlog::HELP),
            b"reset" if n == 2 => {
                self.ask_all(|tx| {
                    ShardMsg::Call(Box::new(move |w: &Worker| {
                        w.slowlog.borrow_mut().reset();
                        let _ = tx.send(());
                    }))
                })
                .await;
                self.out.ok();
            }
            b"len" if n == 2 => {
                let entries = self.gather_slowlog().await;
                self.out.int(entries.len() as i64);
            }
            b"get" if n == 2 || n == 3 => {
                let count = match slowlog::parse_count(args) {
                    Ok(c) => c,
                    Err(e) => return self.reply_error(e),
                };
                let entries = self.gather_slowlog().await;
                slowlog::reply_entries(&mut self.out, &entries, count);
            }
            _ => self.reply_error(&errors::subcommand_syntax("SLOWLOG", args.get(1))),
        }
    }

    /// LATENCY LATEST, HISTORY, RESET, GRAPH, DOCTOR, HISTOGRAM, HELP.
    pub(crate) async fn latency_cmd(&mut self, args: &Args<'_>) {
        let n = args.len();
        let sub = args.get(1).to_ascii_lowercase();
        match sub.as_slice() {
            b"history" if n == 3 => {
                let events = self.gather_events().await;
                events.reply_history(&mut self.out, args.get(2));
            }
            b"graph" if n == 3 => {
                let events = self.gather_events().await;
                match events.get(args.get(2)) {
                    Some((name, ts)) => {
                        let text = latency::graph(name, ts, slowlog::unix_time());
                        self.out.verbatim("txt", text.as_bytes());
                    }
                    None => {
                        let e = format!(
                            "ERR No samples available for event '{}'",
                            String::from_utf8_lossy(args.get(2))
                        );
                        self.reply_error(&e);
                    }
                }
            }
            b"latest" if n == 2 => {
                let events = self.gather_events().await;
                events.reply_latest(&mut self.out);
            }
            b"doctor" if n == 2 => {
                let events = self.gather_events().await;
                let config = &self.worker.cluster.config;
                let ctx = DoctorContext {
                    monitor_threshold_ms: config.latency_monitor_ms.load(Ordering::Relaxed),
                    slowlog_slower_than: config.slowlog_slower_than.load(Ordering::Relaxed),
                    thp: anon_huge_pages(),
                };
                let text = latency::doctor(&events, &ctx, slowlog::unix_time());
                self.out.verbatim("txt", text.as_bytes());
            }
            b"reset" => {
                let names: Vec<Vec<u8>> = args.iter().skip(2).map(<[u8]>::to_vec).collect();
                let dropped = self
                    .ask_all(|tx| {
                        let names = names.clone();
                        ShardMsg::Call(Box::new(move |w: &Worker| {
                            let _ = tx.send(w.latency_events.borrow_mut().reset(&names));
                        }))
                    })
                    .await;
                // An event several threads recorded is one event reset.
                let mut all: Vec<&str> = dropped.into_iter().flatten().collect();
                all.sort_unstable();
                all.dedup();
                self.out.int(all.len() as i64);
            }
            b"histogram" => {
                let histograms = self.gather_histograms().await;
                let wanted: Vec<usize> = if n == 2 {
                    (0..COMMANDS.len()).collect()
                } else {
                    // Unknown names are skipped; a name given twice is answered twice, as
                    // Redis does.
                    args.iter().skip(2).filter_map(lookup).collect()
                };
                let with_data: Vec<usize> = wanted
                    .into_iter()
                    .filter(|&i| histograms.get(i).is_some())
                    .collect();
                self.out.map(with_data.len());
                for i in with_data {
                    if let Some(h) = histograms.get(i) {
                        self.out.bulk(COMMANDS[i].name.as_bytes());
                        latency::reply_cdf(&mut self.out, h);
                    }
                }
            }
            b"help" if n == 2 => self.out.help("LATENCY", latency::HELP),
            _ => self.reply_error(&errors::subcommand_syntax("LATENCY", args.get(1))),
        }
    }

    /// INFO latencystats: the configured percentiles of each command's latency, in
    /// microseconds (nothing while `latency-tracking` is off).
    pub(crate) async fn latencystats_info(&mut self) -> String {
        let config = self.worker.cluster.config.clone();
        if !config.latency_tracking.load(Ordering::Relaxed) {
            return String::new();
        }
        let percentiles =
            latency::parse_percentiles(&config.get("latency-tracking-info-percentiles"))
                .unwrap_or_default();
        let histograms = self.gather_histograms().await;
        histograms
            .iter()
            .map(|(i, h)| latency::percentiles_line(COMMANDS[i].name, h, &percentiles))
            .collect()
    }
}
