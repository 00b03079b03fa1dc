//! RESP request parsing: the hand-written span parser against the redis-protocol crate's
//! decoder, on the frames redis-benchmark sends; and a large MSET arriving in 16 KB reads,
//! parsed after every read by a parser that keeps its progress against one that starts over.
//! `cargo bench -p damselfly-protocol`.

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use damselfly_protocol::{parse_command, Limits, ParsedCommand, ReplyBuf, RequestParser, Span};

fn frames() -> Vec<(&'static str, Vec<u8>)> {
    let set = b"*3\r\n$3\r\nSET\r\n$16\r\nkey:000000000042\r\n$3\r\nxxx\r\n".to_vec();
    let get = b"*2\r\n$3\r\nGET\r\n$16\r\nkey:000000000042\r\n".to_vec();
    let pipeline: Vec<u8> = set
        .iter()
        .chain(get.iter())
        .copied()
        .cycle()
        .take((set.len() + get.len()) * 8)
        .collect();
    vec![("set", set), ("get", get), ("pipeline16", pipeline)]
}

fn bench_parse(c: &mut Criterion) {
    let limits = Limits::default();
    for (name, wire) in frames() {
        let mut group = c.benchmark_group(format!("parse/{name}"));
        group.throughput(Throughput::Bytes(wire.len() as u64));
        group.bench_function("damselfly", |b| {
            let mut spans = Vec::with_capacity(64);
            let mut aux = Vec::new();
            b.iter(|| {
                spans.clear();
                let mut pos = 0;
                while let Ok(ParsedCommand::Command { consumed, .. }) =
                    parse_command(black_box(&wire), pos, &mut spans, &mut aux, &limits)
                {
                    pos = consumed;
                }
                black_box(spans.len())
            })
        });
        group.bench_function("redis-protocol", |b| {
            let bytes = bytes::Bytes::from(wire.clone());
            b.iter(|| {
                let mut pos = 0;
                let mut n = 0;
                while pos < bytes.len() {
                    match redis_protocol::resp2::decode::decode_bytes(&black_box(
                        bytes.slice(pos..),
                    )) {
                        Ok(Some((frame, used))) => {
                            black_box(frame);
                            pos += used;
                            n += 1;
                        }
                        _ => break,
                    }
                }
                black_box(n)
            })
        });
        group.finish();
    }
}

fn bench_encode(c: &mut Criterion) {
    c.bench_function("encode/bulk+int+ok", |b| {
        let mut out = ReplyBuf::new(false);
        b.iter(|| {
            out.buf.clear();
            out.bulk(black_box(b"some value of moderate size"));
            out.int(black_box(12345));
            out.ok();
            black_box(out.buf.len())
        })
    });
}

/// An MSET of `keys` keys with 80-byte values, as a client sends it.
fn large_mset(keys: usize) -> Vec<u8> {
    let mut wire = format!("*{}\r\n$4\r\nMSET\r\n", 1 + 2 * keys).into_bytes();
    for i in 0..keys {
        let key = format!("key:{i:08}");
        wire.extend_from_slice(format!("${}\r\n{key}\r\n$80\r\n", key.len()).as_bytes());
        wire.extend_from_slice(&[b'v'; 80]);
        wire.extend_from_slice(b"\r\n");
    }
    wire
}

/// Parses after every 16 KB of `wire` arrives, as a connection does; returns the arguments.
fn parse_as_it_arrives(wire: &[u8], mut parse: impl FnMut(&[u8], &mut Vec<Span>) -> bool) -> usize {
    let mut spans = Vec::new();
    let mut end = 0;
    while end < wire.len() {
        end = (end + 16 * 1024).min(wire.len());
        spans.clear();
        if parse(&wire[..end], &mut spans) {
            break;
        }
    }
    spans.len()
}

fn bench_pieces(c: &mut Criterion) {
    let limits = Limits::default();
    let wire = large_mset(5_000);
    let mut group = c.benchmark_group("parse/mset-5000-in-16k-reads");
    group.throughput(Throughput::Bytes(wire.len() as u64));
    group.bench_function("resumable", |b| {
        b.iter(|| {
            let mut parser = RequestParser::default();
            let mut aux = Vec::new();
            parse_as_it_arrives(black_box(&wire), |buf, spans| {
                matches!(
                    parser.parse(buf, 0, spans, &mut aux, &limits),
                    Ok(ParsedCommand::Command { .. })
                )
            })
        })
    });
    group.bench_function("from-the-start-each-read", |b| {
        b.iter(|| {
            let mut aux = Vec::new();
            parse_as_it_arrives(black_box(&wire), |buf, spans| {
                matches!(
                    parse_command(buf, 0, spans, &mut aux, &limits),
                    Ok(ParsedCommand::Command { .. })
                )
            })
        })
    });
    group.finish();
}

criterion_group!(benches, bench_parse, bench_encode, bench_pieces);
criterion_main!(benches);
