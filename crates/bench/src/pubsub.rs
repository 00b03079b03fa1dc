//! `damselfly-bench pubsub`: a Pub/Sub load generator. Publishers PUBLISH closed-loop (a fixed
//! number of PUBLISHes in flight each) round-robin over channels `ch:0`..`ch:{C-1}`;
//! subscriber `i` subscribes to channel `i % C` (or, with `--patterns`, PSUBSCRIBEs `*:{i % C}`,
//! a pattern that matches that one channel of the set). Every payload starts with its send time
//! (nanoseconds since the run's start, ASCII digits), so a subscriber measures each message's
//! delivery latency; latencies go to an HDR histogram. Used by benches/pubsub.sh; works against
//! any Redis-protocol server (RESP2).
//!
//! The run: connect and subscribe every subscriber and wait for every confirmation, publish for
//! one second of warm-up and then `--seconds` measured, stop the publishers (their in-flight
//! PUBLISHes are answered), and let the subscribers drain until every message of the measured
//! window has arrived, or none arrived for `--quiet-ms`, or `--drain` seconds passed. Only
//! messages *sent* in the measured window are counted and timed, by publishers (published, the
//! sum of PUBLISH's replies) and subscribers (delivered) alike, so with nothing lost
//! `delivered == publish_replies_sum` (`lost` is their difference, and then stderr has the
//! spread by subscriber; `disconnected` counts subscriber connections the server closed,
//! `delivered_all` every message received, warm-up and drain included). Every connection is
//! one task on one current-thread runtime.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};
use clap::Parser;
use hdrhistogram::Histogram;
use redis_protocol::resp2::decode::decode_range;
use redis_protocol::resp2::types::RangeFrame;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[derive(Parser, Clone)]
pub struct PubsubArgs {
    #[arg(long, default_value = "127.0.0.1")]
    host: String,
    #[arg(long, default_value_t = 6379)]
    port: u16,
    /// Publisher connections.
    #[arg(long, default_value_t = 1)]
    publishers: usize,
    /// Channels `ch:0`..`ch:{C-1}`; publishers go round-robin over them.
    #[arg(long, default_value_t = 1)]
    channels: usize,
    /// Subscriber connections; subscriber `i` takes channel `i % C`.
    #[arg(long, default_value_t = 1)]
    subscribers: usize,
    /// Subscribers PSUBSCRIBE `*:{i % C}` instead of SUBSCRIBE `ch:{i % C}`.
    #[arg(long)]
    patterns: bool,
    /// Payload bytes (the send time, padded; longer if the time needs more digits).
    #[arg(long, default_value_t = 32)]
    size: usize,
    /// PUBLISHes in flight per publisher.
    #[arg(long, default_value_t = 16)]
    pipeline: usize,
    /// Measured seconds (after one second of warm-up).
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// At most this many seconds for the subscribers to drain after the publishers stop.
    #[arg(long, default_value_t = 10.0)]
    drain: f64,
    /// The drain also ends when no message arrived for this many milliseconds.
    #[arg(long, default_value_t = 1000)]
    quiet_ms: u64,
}

/// Writes a payload of at least `size` bytes: `ts_ns` in ASCII digits, then `.` padding.
fn encode_payload(ts_ns: u64, size: usize, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(ts_ns.to_string().as_bytes());
    while out.len() - start < size {
        out.push(b'.');
    }
}

/// The send time a payload starts with, if it starts with digits.
fn decode_payload(payload: &[u8]) -> Option<u64> {
    let digits = payload.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&payload[..digits]).ok()?.parse().ok()
}

/// The bulk-string encoding of `s` (`$len\r\ns\r\n`).
fn bulk(s: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", s.len()).into_bytes();
    out.extend_from_slice(s);
    out.extend_from_slice(b"\r\n");
    out
}

/// A frame a subscriber receives (RESP2), borrowing from the read buffer.
#[derive(Debug, PartialEq, Eq)]
enum Push<'a> {
    Message {
        channel: &'a [u8],
        payload: &'a [u8],
    },
    PMessage {
        pattern: &'a [u8],
        channel: &'a [u8],
        payload: &'a [u8],
    },
    /// `subscribe`/`psubscribe` confirmation: kind, name, subscription count.
    Subscribed {
        kind: &'a [u8],
        name: &'a [u8],
        count: i64,
    },
    Other,
}

/// Parses one frame at the start of `buf`: `Ok(None)` when it is incomplete, else the frame and
/// the bytes it takes. An error reply is an error.
fn parse_push(buf: &[u8]) -> Result<Option<(Push<'_>, usize)>, String> {
    let (frame, used) = match decode_range(buf) {
        Ok(Some(f)) => f,
        Ok(None) => return Ok(None),
        Err(e) => return Err(format!("bad frame: {e:?}")),
    };
    let bulk = |f: &RangeFrame| match f {
        RangeFrame::BulkString((s, e)) | RangeFrame::SimpleString((s, e)) => Some(&buf[*s..*e]),
        _ => None,
    };
    let push = match &frame {
        RangeFrame::Error((s, e)) => {
            return Err(format!(
                "error reply: {}",
                String::from_utf8_lossy(&buf[*s..*e])
            ))
        }
        RangeFrame::Array(items) => {
            let words: Vec<Option<&[u8]>> = items.iter().map(bulk).collect();
            match (words.as_slice(), items.as_slice()) {
                ([Some(b"message"), Some(channel), Some(payload)], _) => {
                    Push::Message { channel, payload }
                }
                ([Some(b"pmessage"), Some(pattern), Some(channel), Some(payload)], _) => {
                    Push::PMessage {
                        pattern,
                        channel,
                        payload,
                    }
                }
                (
                    [Some(kind @ (b"subscribe" | b"psubscribe")), Some(name), None],
                    [_, _, RangeFrame::Integer(count)],
                ) => Push::Subscribed {
                    kind,
                    name,
                    count: *count,
                },
                _ => Push::Other,
            }
        }
        _ => Push::Other,
    };
    Ok(Some((push, used)))
}

/// What the tasks share (one thread, so cells).
struct Shared {
    epoch: Instant,
    /// The measured window, in nanoseconds since `epoch`, by send time.
    warmup_ns: Cell<u64>,
    end_ns: Cell<u64>,
    subscribed: Cell<usize>,
    /// Subscribers whose connection ended or failed, and the first reason.
    lost_subscribers: Cell<usize>,
    first_error: RefCell<Option<String>>,
    /// Messages sent in the window that subscribers received, in all and by subscriber.
    delivered: Cell<u64>,
    by_subscriber: Vec<Cell<u64>>,
    /// Every message subscribers received, warm-up and drain included.
    delivered_all: Cell<u64>,
    /// PUBLISHes sent in the window, and the sum of their replies.
    published: Cell<u64>,
    replies_sum: Cell<u64>,
    latency: RefCell<Histogram<u64>>,
}

impl Shared {
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn in_window(&self, ts: u64) -> bool {
        ts >= self.warmup_ns.get() && ts < self.end_ns.get()
    }

    fn fail(&self, e: String) {
        self.lost_subscribers.set(self.lost_subscribers.get() + 1);
        self.first_error.borrow_mut().get_or_insert(e);
    }
}

async fn connect(args: &PubsubArgs) -> Result<TcpStream, String> {
    let sock = TcpStream::connect((args.host.as_str(), args.port))
        .await
        .map_err(|e| format!("connect: {e}"))?;
    sock.set_nodelay(true).ok();
    Ok(sock)
}

/// Reads more input; a closed connection is an error.
async fn fill(sock: &mut TcpStream, buf: &mut BytesMut) -> Result<(), String> {
    if buf.capacity() - buf.len() < 16 * 1024 {
        buf.reserve(64 * 1024);
    }
    match sock.read_buf(buf).await {
        Ok(0) => Err("connection closed by the server".into()),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("read: {e}")),
    }
}

async fn subscriber(mut sock: TcpStream, id: usize, args: Rc<PubsubArgs>, shared: Rc<Shared>) {
    if let Err(e) = subscribe_and_receive(&mut sock, id, &args, &shared).await {
        shared.fail(format!("subscriber {id}: {e}"));
    }
}

async fn subscribe_and_receive(
    sock: &mut TcpStream,
    id: usize,
    args: &PubsubArgs,
    shared: &Shared,
) -> Result<(), String> {
    let n = id % args.channels;
    let (cmd, name) = if args.patterns {
        ("PSUBSCRIBE", format!("*:{n}"))
    } else {
        ("SUBSCRIBE", format!("ch:{n}"))
    };
    let mut req = b"*2\r\n".to_vec();
    req.extend(bulk(cmd.as_bytes()));
    req.extend(bulk(name.as_bytes()));
    sock.write_all(&req).await.map_err(|e| e.to_string())?;
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut confirmed = false;
    loop {
        let mut pos = 0;
        while let Some((push, used)) = parse_push(&buf[pos..])? {
            pos += used;
            let payload = match push {
                Push::Message { payload, .. } | Push::PMessage { payload, .. } => payload,
                Push::Subscribed { .. } if !confirmed => {
                    confirmed = true;
                    shared.subscribed.set(shared.subscribed.get() + 1);
                    continue;
                }
                other => return Err(format!("unexpected frame {other:?}")),
            };
            let Some(ts) = decode_payload(payload) else {
                return Err("payload without a send time".into());
            };
            shared.delivered_all.set(shared.delivered_all.get() + 1);
            if shared.in_window(ts) {
                let micros = shared.now_ns().saturating_sub(ts) / 1000;
                shared.delivered.set(shared.delivered.get() + 1);
                let mine = &shared.by_subscriber[id];
                mine.set(mine.get() + 1);
                shared.latency.borrow_mut().saturating_record(micros.max(1));
            }
        }
        buf.advance(pos);
        fill(sock, &mut buf).await?;
    }
}

async fn publisher(
    mut sock: TcpStream,
    id: usize,
    args: Rc<PubsubArgs>,
    shared: Rc<Shared>,
) -> Result<(), String> {
    // `*3\r\n$7\r\nPUBLISH\r\n$len\r\nch:n\r\n` for every channel.
    let heads: Vec<Vec<u8>> = (0..args.channels)
        .map(|n| {
            let mut h = b"*3\r\n".to_vec();
            h.extend(bulk(b"PUBLISH"));
            h.extend(bulk(format!("ch:{n}").as_bytes()));
            h
        })
        .collect();
    let mut next = id % args.channels;
    let mut in_flight: VecDeque<u64> = VecDeque::with_capacity(args.pipeline);
    let mut out = Vec::with_capacity(args.pipeline * (args.size + 64));
    let mut payload = Vec::with_capacity(args.size + 24);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut to_send = args.pipeline;
    loop {
        if to_send > 0 {
            out.clear();
            for _ in 0..to_send {
                let ts = shared.now_ns();
                payload.clear();
                encode_payload(ts, args.size, &mut payload);
                out.extend_from_slice(&heads[next]);
                out.extend(format!("${}\r\n", payload.len()).as_bytes());
                out.extend_from_slice(&payload);
                out.extend_from_slice(b"\r\n");
                in_flight.push_back(ts);
                next = (next + 1) % args.channels;
            }
            sock.write_all(&out)
                .await
                .map_err(|e| format!("write: {e}"))?;
            to_send = 0;
        }
        let mut pos = 0;
        let mut answered = 0;
        loop {
            match decode_range(&buf[pos..]) {
                Ok(Some((RangeFrame::Integer(n), used))) => {
                    pos += used;
                    answered += 1;
                    let ts = in_flight.pop_front().ok_or("a reply to nothing")?;
                    if shared.in_window(ts) {
                        shared.published.set(shared.published.get() + 1);
                        shared.replies_sum.set(shared.replies_sum.get() + n as u64);
                    }
                }
                Ok(Some((frame, _))) => return Err(format!("unexpected reply {frame:?}")),
                Ok(None) => break,
                Err(e) => return Err(format!("bad reply: {e:?}")),
            }
        }
        buf.advance(pos);
        if answered == 0 {
            fill(&mut sock, &mut buf).await?;
        } else if shared.now_ns() < shared.end_ns.get() {
            to_send = answered;
        } else if in_flight.is_empty() {
            return Ok(());
        }
    }
}

pub fn pubsub(args: PubsubArgs) {
    if args.channels == 0 || args.publishers == 0 || args.pipeline == 0 {
        eprintln!("pubsub: --channels, --publishers and --pipeline must be at least 1");
        std::process::exit(2);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let args = Rc::new(args);
    let shared = Rc::new(Shared {
        epoch: Instant::now(),
        warmup_ns: Cell::new(u64::MAX),
        end_ns: Cell::new(u64::MAX),
        subscribed: Cell::new(0),
        lost_subscribers: Cell::new(0),
        first_error: RefCell::new(None),
        delivered: Cell::new(0),
        by_subscriber: (0..args.subscribers).map(|_| Cell::new(0)).collect(),
        delivered_all: Cell::new(0),
        published: Cell::new(0),
        replies_sum: Cell::new(0),
        latency: RefCell::new(Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")),
    });
    let local = tokio::task::LocalSet::new();
    let result = local.block_on(&rt, run(args.clone(), shared.clone()));
    let drain_ms = match result {
        Ok(ms) => ms,
        Err(e) => {
            eprintln!("pubsub: {e}");
            std::process::exit(1);
        }
    };
    let lat = shared.latency.borrow();
    let secs = args.seconds;
    let delivered = shared.delivered.get();
    let replies = shared.replies_sum.get();
    println!(
        "published_per_sec={:.0} delivered_per_sec={:.0} p50_us={} p99_us={} p999_us={} \
         publish_replies_sum={} delivered={} lost={} disconnected={} drain_ms={} delivered_all={}",
        shared.published.get() as f64 / secs,
        delivered as f64 / secs,
        lat.value_at_quantile(0.5),
        lat.value_at_quantile(0.99),
        lat.value_at_quantile(0.999),
        replies,
        delivered,
        replies as i64 - delivered as i64,
        shared.lost_subscribers.get(),
        drain_ms,
        shared.delivered_all.get(),
    );
    if replies != delivered {
        let counts: Vec<u64> = shared.by_subscriber.iter().map(Cell::get).collect();
        let min = counts.iter().min().copied().unwrap_or(0);
        let max = counts.iter().max().copied().unwrap_or(0);
        let at_min = counts.iter().filter(|&&c| c == min).count();
        eprintln!(
            "pubsub: {} messages missing; by subscriber: min {min} ({at_min} subscribers), \
             max {max}, published {}",
            replies as i64 - delivered as i64,
            shared.published.get()
        );
    }
    let first_error = shared.first_error.borrow().clone();
    if let Some(e) = first_error {
        eprintln!("pubsub: {e}");
    }
}

/// The whole run; returns how long the drain took, in milliseconds.
async fn run(args: Rc<PubsubArgs>, shared: Rc<Shared>) -> Result<u128, String> {
    // Connections one at a time (a burst of 1,000 connects can overflow a listen backlog).
    for id in 0..args.subscribers {
        let sock = connect(&args).await?;
        tokio::task::spawn_local(subscriber(sock, id, args.clone(), shared.clone()));
    }
    let mut publisher_socks = Vec::new();
    for _ in 0..args.publishers {
        publisher_socks.push(connect(&args).await?);
    }
    let waiting = Instant::now();
    while shared.subscribed.get() < args.subscribers {
        if shared.lost_subscribers.get() > 0 {
            return Err(shared.first_error.borrow().clone().unwrap_or_default());
        }
        if waiting.elapsed() > Duration::from_secs(30) {
            return Err(format!(
                "only {} of {} subscriptions confirmed after 30 s",
                shared.subscribed.get(),
                args.subscribers
            ));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let warmup_ns = shared.now_ns() + 1_000_000_000;
    shared.warmup_ns.set(warmup_ns);
    shared.end_ns.set(warmup_ns + (args.seconds * 1e9) as u64);
    let publishers: Vec<_> = publisher_socks
        .into_iter()
        .enumerate()
        .map(|(id, sock)| {
            tokio::task::spawn_local(publisher(sock, id, args.clone(), shared.clone()))
        })
        .collect();
    for p in publishers {
        p.await
            .map_err(|e| format!("publisher task: {e}"))?
            .map_err(|e| format!("publisher: {e}"))?;
    }
    let drain_start = Instant::now();
    let deadline = drain_start + Duration::from_secs_f64(args.drain);
    let mut last = (shared.delivered.get(), Instant::now());
    while shared.delivered.get() < shared.replies_sum.get() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
        let now = shared.delivered.get();
        if now != last.0 {
            last = (now, Instant::now());
        } else if last.1.elapsed() >= Duration::from_millis(args.quiet_ms) {
            break;
        }
    }
    Ok(drain_start.elapsed().as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_carries_the_send_time() {
        let mut out = Vec::new();
        encode_payload(123_456_789, 32, &mut out);
        assert_eq!(out.len(), 32);
        assert!(out.starts_with(b"123456789."));
        assert_eq!(decode_payload(&out), Some(123_456_789));
        // A time longer than the size is kept whole.
        out.clear();
        encode_payload(u64::MAX, 4, &mut out);
        assert_eq!(out, u64::MAX.to_string().into_bytes());
        assert_eq!(decode_payload(&out), Some(u64::MAX));
        out.clear();
        encode_payload(0, 1, &mut out);
        assert_eq!(decode_payload(&out), Some(0));
        assert_eq!(decode_payload(b"....."), None);
        assert_eq!(decode_payload(b""), None);
    }

    #[test]
    fn parses_message_pmessage_and_confirmations() {
        let msg = b"*3\r\n$7\r\nmessage\r\n$4\r\nch:7\r\n$5\r\n42...\r\n";
        assert_eq!(
            parse_push(msg).unwrap(),
            Some((
                Push::Message {
                    channel: b"ch:7",
                    payload: b"42..."
                },
                msg.len()
            ))
        );
        let pmsg = b"*4\r\n$8\r\npmessage\r\n$3\r\n*:7\r\n$4\r\nch:7\r\n$2\r\n99\r\n";
        let mut both = pmsg.to_vec();
        both.extend_from_slice(msg);
        let (push, used) = parse_push(&both).unwrap().unwrap();
        assert_eq!(
            push,
            Push::PMessage {
                pattern: b"*:7",
                channel: b"ch:7",
                payload: b"99"
            }
        );
        assert_eq!(used, pmsg.len());
        assert!(matches!(
            parse_push(&both[used..]).unwrap(),
            Some((Push::Message { .. }, n)) if n == msg.len()
        ));
        // Incomplete frames wait for more input.
        for cut in 0..pmsg.len() {
            assert_eq!(parse_push(&pmsg[..cut]).unwrap(), None, "cut at {cut}");
        }
        let sub = b"*3\r\n$10\r\npsubscribe\r\n$3\r\n*:0\r\n:1\r\n";
        assert_eq!(
            parse_push(sub).unwrap().unwrap().0,
            Push::Subscribed {
                kind: b"psubscribe",
                name: b"*:0",
                count: 1
            }
        );
        assert_eq!(
            parse_push(b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")
                .unwrap()
                .unwrap()
                .0,
            Push::Other
        );
        assert!(parse_push(b"-ERR nope\r\n").is_err());
    }
}
