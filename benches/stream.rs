//! Criterion benchmarks of `pd_stitch::stream`, each beside its floor, in
//! one group so that they run side by side:
//!
//! - **throughput** of an event stream without rows (20,000 vLLM
//!   `/inference/v1/generate` token chunks, 2.8 MB, fed in 16 KiB chunks),
//!   in GB/s, beside a plain copy of the same bytes in the same chunks (a
//!   router copies them anyway);
//! - **cost of a rows event**, fed as one chunk, beside
//!   `Stitcher::merge_bytes` of its data (in place, on a clone made before
//!   the clock starts): the inline event of 1,536 positions of 48 x 8 uint8
//!   (2 MiB), and the 8 x 32 by-handle decode of `benches/merge.rs` as one
//!   event;
//! - **latency**, the time an event waits in the stitcher: from feeding the
//!   last byte of an event (the rest fed before, untimed) to its being in
//!   `out`, for a token event and for the inline rows event (its first
//!   bytes fed in 16 KiB chunks), beside the cost of reading the clock.
//!
//! Every run is timed alone, its stitcher and clones made before the clock
//! starts (`iter_custom`): a batch of stitchers made ahead, each with its
//! copy of the 0.5 MB prefill, would push the stream out of the caches
//! before it is read.
//!
//! Then (with `--bench` only, not under `cargo test --benches`) a summary:
//! the same workloads interleaved, round by round, medians of the ratios,
//! which a loaded machine disturbs less than figures from separate runs.
//! Compare figures within one run only.

#[path = "common/mod.rs"]
mod common;

use common::stream;
use criterion::{criterion_group, Criterion, Throughput};
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Stitch, Stitcher};
use std::hint::black_box;
use std::time::{Duration, Instant};

const CHUNK: usize = 16 * 1024;

/// The inputs, made once.
struct Inputs {
    tokens: Vec<u8>,
    prefill: Vec<u8>,
    data: Vec<u8>,
    rows_event: Vec<u8>,
    handle_prefill: Vec<u8>,
    handle_data: Vec<u8>,
    handle_event: Vec<u8>,
}

impl Inputs {
    fn new() -> Inputs {
        let data = stream::inline_rows_data();
        let (handle_prefill, handle_data) = stream::by_handle_pair();
        Inputs {
            tokens: stream::tokens(20_000),
            prefill: stream::inline_prefill(),
            rows_event: stream::event(&data),
            data,
            handle_event: stream::event(&handle_data),
            handle_prefill,
            handle_data,
        }
    }
}

fn stitcher(prefill: &[u8]) -> StreamStitcher {
    StreamStitcher::new(Stitcher::new(), prefill).unwrap()
}

/// Feeds `input` in chunks of `chunk` bytes, then finishes.
fn feed(s: &mut StreamStitcher, input: &[u8], chunk: usize, out: &mut Vec<u8>) {
    for piece in input.chunks(chunk) {
        s.feed(piece, out).unwrap();
    }
}

/// The time of feeding `event`'s last byte to `s`, its other bytes fed
/// before in chunks of `chunk`.
fn last_byte(s: &mut StreamStitcher, event: &[u8], chunk: usize, out: &mut Vec<u8>) -> Duration {
    let (head, tail) = event.split_at(event.len() - 1);
    feed(s, head, chunk, out);
    let clock = Instant::now();
    s.feed(tail, out).unwrap();
    let spent = clock.elapsed();
    black_box(&out);
    spent
}

fn bench(c: &mut Criterion) {
    let i = Inputs::new();
    let mut group = c.benchmark_group("stream");
    group.measurement_time(Duration::from_secs(3));

    // Throughput without rows.
    group.throughput(Throughput::BytesDecimal(i.tokens.len() as u64));
    let mut out = Vec::with_capacity(i.tokens.len());
    group.bench_function("tokens_without_rows_16KiB_chunks", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let mut s = stitcher(&i.prefill);
                    out.clear();
                    let clock = Instant::now();
                    feed(&mut s, &i.tokens, CHUNK, &mut out);
                    s.finish(&mut out).unwrap();
                    let spent = clock.elapsed();
                    assert_eq!(out.len(), i.tokens.len());
                    spent
                })
                .sum()
        })
    });
    group.bench_function("copy_of_the_same_bytes_16KiB_chunks", |b| {
        b.iter(|| {
            out.clear();
            for chunk in i.tokens.chunks(CHUNK) {
                out.extend_from_slice(chunk);
            }
            assert_eq!(out.len(), i.tokens.len());
        })
    });

    // A rows event beside the bytes merge of its data, each into a buffer
    // that has the room (a router's, reused).
    for (name, prefill, data, event) in [
        ("inline_1536x48x8", &i.prefill, &i.data, &i.rows_event),
        (
            "by_handle_8x32",
            &i.handle_prefill,
            &i.handle_data,
            &i.handle_event,
        ),
    ] {
        group.throughput(Throughput::BytesDecimal(event.len() as u64));
        let mut out = Vec::with_capacity(2 * event.len());
        group.bench_function(format!("rows_event_{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let mut s = stitcher(prefill);
                        out.clear();
                        let clock = Instant::now();
                        s.feed(event, &mut out).unwrap();
                        let spent = clock.elapsed();
                        black_box(&out);
                        spent
                    })
                    .sum()
            })
        });
        group.bench_function(format!("bytes_merge_of_its_data_{name}"), |b| {
            b.iter_custom(|iters| {
                (0..iters)
                    .map(|_| {
                        let mut decode = data.clone();
                        let clock = Instant::now();
                        Stitcher::new()
                            .merge_bytes(prefill, &mut decode, Stitch::ForPd)
                            .unwrap();
                        let spent = clock.elapsed();
                        black_box(&decode);
                        spent
                    })
                    .sum()
            })
        });
    }

    // Latency: the feed of an event's last byte.
    group.throughput(Throughput::Elements(1));
    let token = stream::token_event(7);
    let mut s = stitcher(&i.prefill);
    let mut out = Vec::with_capacity(1024);
    group.bench_function("latency_token_event_last_byte", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    out.clear();
                    last_byte(&mut s, &token, CHUNK, &mut out)
                })
                .sum()
        })
    });
    group.bench_function("clock_read_alone", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let clock = Instant::now();
                    black_box(&out);
                    clock.elapsed()
                })
                .sum()
        })
    });
    let mut out = Vec::with_capacity(2 * i.rows_event.len());
    group.bench_function("latency_rows_event_inline_last_byte", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    let mut s = stitcher(&i.prefill);
                    out.clear();
                    last_byte(&mut s, &i.rows_event, CHUNK, &mut out)
                })
                .sum()
        })
    });
    group.finish();
}

/// The median of `values`.
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// Seconds of one run of `f`, the median of `n`.
fn timed(n: usize, mut f: impl FnMut() -> Duration) -> f64 {
    median((0..n).map(|_| f().as_secs_f64()).collect())
}

/// The workloads interleaved, 15 rounds: medians of each figure and of the
/// ratios within a round.
fn summary() {
    let i = Inputs::new();
    let mut rows: Vec<[f64; 8]> = Vec::new();
    let mut out = Vec::with_capacity(2 * i.rows_event.len().max(i.tokens.len()));
    for _ in 0..15 {
        let stream = timed(5, || {
            let mut s = stitcher(&i.prefill);
            out.clear();
            let clock = Instant::now();
            feed(&mut s, &i.tokens, CHUNK, &mut out);
            s.finish(&mut out).unwrap();
            clock.elapsed()
        });
        let copy = timed(5, || {
            out.clear();
            let clock = Instant::now();
            for chunk in i.tokens.chunks(CHUNK) {
                out.extend_from_slice(chunk);
            }
            black_box(&out);
            clock.elapsed()
        });
        let event = |prefill: &[u8], event: &[u8], out: &mut Vec<u8>| {
            timed(5, || {
                let mut s = stitcher(prefill);
                out.clear();
                let clock = Instant::now();
                s.feed(event, out).unwrap();
                clock.elapsed()
            })
        };
        let merge = |prefill: &[u8], data: &[u8]| {
            timed(5, || {
                let mut decode = data.to_vec();
                let clock = Instant::now();
                Stitcher::new()
                    .merge_bytes(prefill, &mut decode, Stitch::ForPd)
                    .unwrap();
                let spent = clock.elapsed();
                black_box(&decode);
                spent
            })
        };
        let inline = event(&i.prefill, &i.rows_event, &mut out);
        let inline_merge = merge(&i.prefill, &i.data);
        let handle = event(&i.handle_prefill, &i.handle_event, &mut out);
        let handle_merge = merge(&i.handle_prefill, &i.handle_data);
        let token = stream::token_event(7);
        let mut s = stitcher(&i.prefill);
        let token_latency = timed(1001, || {
            out.clear();
            last_byte(&mut s, &token, CHUNK, &mut out)
        });
        let clock = timed(1001, || {
            let clock = Instant::now();
            black_box(&out);
            clock.elapsed()
        });
        let rows_latency = timed(5, || {
            let mut s = stitcher(&i.prefill);
            out.clear();
            last_byte(&mut s, &i.rows_event, CHUNK, &mut out)
        });
        rows.push([
            i.tokens.len() as f64 / stream / 1e9,
            stream / copy,
            inline / inline_merge,
            handle / handle_merge,
            inline * 1e3,
            inline_merge * 1e3,
            token_latency * 1e9 - clock * 1e9,
            rows_latency * 1e3,
        ]);
    }
    let m = |k: usize| median(rows.iter().map(|r| r[k]).collect());
    println!("\nstream summary (15 interleaved rounds, medians):");
    println!(
        "  without rows: {:.2} GB/s, {:.1}x the time of a copy of the same bytes",
        m(0),
        m(1)
    );
    println!(
        "  inline rows event (1,536 x 48 x 8): {:.3} ms, bytes merge of its data {:.3} ms: {:.2}x",
        m(4),
        m(5),
        m(2)
    );
    println!(
        "  by-handle 8 x 32 rows event / its bytes merge: {:.2}x",
        m(3)
    );
    println!(
        "  latency (feed of the last byte to the event in `out`): token event {:.0} ns (clock read subtracted), inline rows event {:.3} ms",
        m(6),
        m(7)
    );
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
    if std::env::args().any(|a| a == "--bench") {
        summary();
    }
}
