//! `damselfly-bench load`: a closed-loop load generator for *groups* of commands, the cases
//! redis-benchmark cannot express (MULTI/EXEC, multi-key commands whose keys are placed on
//! chosen shards). Each client connection sends its group pipelined, reads every reply, and
//! records the group's latency in an HDR histogram; the run prints throughput (groups per
//! second) and latency percentiles. Used by benches/tx.sh; works against any Redis-protocol
//! server.
//!
//! Key placeholders `%0`..`%9` in a command become per-client key names. With
//! `--spread-shards N` key `%i` of client `c` is placed on shard `(c + i) % N` of a Damselfly
//! running N threads (so a group's keys are on different shards); with `--same-shard N` all of
//! a client's keys share one shard. Damselfly's routing function is fixed, so the placement is
//! computed here with the same function.

use std::time::{Duration, Instant};

use bytes::BytesMut;
use clap::Parser;
use damselfly_storage::shard_for_key;
use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[derive(Parser, Clone)]
pub struct LoadArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 50)]
    clients: usize,
    /// Measured seconds (after one second of warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// A command of the group (repeat for several); `%0`..`%9` are key placeholders.
    #[arg(long = "cmd", required = true)]
    cmds: Vec<String>,
    /// Place key `%i` of client `c` on shard `(c + i) % N`.
    #[arg(long, conflicts_with = "same_shard")]
    spread_shards: Option<usize>,
    /// Place all of a client's keys on one shard of N.
    #[arg(long)]
    same_shard: Option<usize>,
}

/// A key name for placeholder `slot` of client `client` that lands on `shard` of `shards`.
fn placed_key(client: usize, slot: usize, shard: Option<(usize, usize)>) -> String {
    let base = format!("bench:{client}:{slot}");
    let Some((want, shards)) = shard else {
        return base;
    };
    (0..)
        .map(|salt| format!("{base}:{salt}"))
        .find(|k| shard_for_key(k.as_bytes(), shards) == want)
        .unwrap_or(base)
}

/// The RESP encoding of a client's group.
fn encode_group(args: &LoadArgs, client: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for cmd in &args.cmds {
        let words: Vec<String> = cmd
            .split_whitespace()
            .map(
                |w| match w.strip_prefix('%').and_then(|n| n.parse::<usize>().ok()) {
                    Some(slot) => {
                        let shard = match (args.spread_shards, args.same_shard) {
                            (Some(n), _) => Some(((client + slot) % n, n)),
                            (None, Some(n)) => Some((client % n, n)),
                            _ => None,
                        };
                        placed_key(client, slot, shard)
                    }
                    None => w.to_string(),
                },
            )
            .collect();
        out.extend(format!("*{}\r\n", words.len()).as_bytes());
        for w in words {
            out.extend(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
        }
    }
    out
}

/// Reads until `n` complete replies arrived; fails on an error reply.
async fn read_replies(
    sock: &mut tokio::net::TcpStream,
    buf: &mut BytesMut,
    n: usize,
) -> Result<(), String> {
    let mut got = 0;
    while got < n {
        match redis_protocol::resp2::decode::decode_bytes_mut(buf) {
            Ok(Some((frame, _, _))) => {
                if let redis_protocol::resp2::types::BytesFrame::Error(e) = frame {
                    return Err(format!("error reply: {e}"));
                }
                got += 1;
            }
            Ok(None) => {
                if sock.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
                    return Err("connection closed".into());
                }
            }
            Err(e) => return Err(format!("bad reply: {e:?}")),
        }
    }
    Ok(())
}

async fn client(args: LoadArgs, id: usize, warmup_end: Instant, end: Instant) -> Histogram<u64> {
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("histogram");
    let mut sock = tokio::net::TcpStream::connect((args.host.as_str(), args.port))
        .await
        .expect("connect");
    sock.set_nodelay(true).ok();
    let group = encode_group(&args, id);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        let started = Instant::now();
        if started >= end {
            break;
        }
        sock.write_all(&group).await.expect("write");
        if let Err(e) = read_replies(&mut sock, &mut buf, args.cmds.len()).await {
            panic!("client {id}: {e}");
        }
        if started >= warmup_end {
            hist.saturating_record(started.elapsed().as_micros().max(1) as u64);
        }
    }
    hist
}

pub fn load(args: LoadArgs) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let start = Instant::now();
    let warmup_end = start + Duration::from_secs(1);
    let end = warmup_end + Duration::from_secs_f64(args.seconds);
    let total = rt.block_on(async {
        let local = tokio::task::LocalSet::new();
        local
            .run_until(async {
                let tasks: Vec<_> = (0..args.clients)
                    .map(|id| tokio::task::spawn_local(client(args.clone(), id, warmup_end, end)))
                    .collect();
                let mut total = Histogram::<u64>::new_with_bounds(1, 60_000_000, 3).expect("h");
                for t in tasks {
                    total.add(t.await.expect("client task")).expect("merge");
                }
                total
            })
            .await
    });
    let secs = args.seconds;
    println!(
        "ops_per_sec={:.0} avg_us={:.1} p50_us={} p99_us={} p999_us={}",
        total.len() as f64 / secs,
        total.mean(),
        total.value_at_quantile(0.5),
        total.value_at_quantile(0.99),
        total.value_at_quantile(0.999),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_placed_on_the_requested_shards() {
        let args = LoadArgs::parse_from([
            "load",
            "--cmd",
            "MSET %0 v %1 v %2 v",
            "--spread-shards",
            "3",
        ]);
        let group = String::from_utf8(encode_group(&args, 1)).unwrap();
        let keys: Vec<&str> = group
            .split("\r\n")
            .filter(|w| w.starts_with("bench:"))
            .collect();
        assert_eq!(keys.len(), 3);
        let shards: Vec<usize> = keys
            .iter()
            .map(|k| shard_for_key(k.as_bytes(), 3))
            .collect();
        assert_eq!(shards, vec![1, 2, 0]);
        let same = LoadArgs::parse_from(["load", "--cmd", "MGET %0 %1", "--same-shard", "2"]);
        let group = String::from_utf8(encode_group(&same, 5)).unwrap();
        let shards: Vec<usize> = group
            .split("\r\n")
            .filter(|w| w.starts_with("bench:"))
            .map(|k| shard_for_key(k.as_bytes(), 2))
            .collect();
        assert_eq!(shards, vec![1, 1]);
    }
}
