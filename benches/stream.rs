//! Criterion benchmarks of `pd_stitch::stream`: the throughput of an event
//! stream without rows (vLLM `/inference/v1/generate` token chunks) beside
//! a plain copy of the same bytes (the floor: a router copies them anyway),
//! the time one event spends in the stitcher (fed as one chunk: what it
//! waits between its last byte arriving and its going out), and a rows event
//! beside the bytes merge of its data. Compare figures within one run only.

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Stitch, Stitcher};
use std::time::Duration;

/// A vLLM generate token chunk, as `serve_tokens_stream_generator` writes it.
fn token_event(i: usize) -> Vec<u8> {
    format!(
        "data: {{\"request_id\":\"generate-tokens-5f0c2b7e\",\"choices\":[{{\"index\":0,\"logprobs\":null,\"finish_reason\":null,\"token_ids\":[{}],\"routed_experts\":null}}]}}\n\n",
        10_000 + i % 90_000
    )
    .into_bytes()
}

/// Inline compact rows of `seq` positions of 48 x 8 uint8 from `start`.
fn compact(seq: usize, start: usize, fill: u8) -> String {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(vec![fill; seq * 384]);
    format!("{{\"data\": \"{data}\", \"shape\": [{seq}, 48, 8], \"start\": {start}, \"dtype\": \"uint8\"}}")
}

fn bench(c: &mut Criterion) {
    // Without rows: token events, fed in 16 KiB chunks.
    let stream: Vec<u8> = (0..20_000).flat_map(token_event).collect();
    let prefill = format!(
        "{{\"choices\": [{{\"routed_experts\": {}}}]}}",
        compact(1024, 0, 1)
    );
    let mut group = c.benchmark_group("stream");
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Bytes(stream.len() as u64));
    let mut out = Vec::with_capacity(stream.len());
    group.bench_function("tokens_without_rows_16KiB_chunks", |b| {
        b.iter_batched(
            || StreamStitcher::new(Stitcher::new(), prefill.as_bytes()).unwrap(),
            |mut s| {
                out.clear();
                for chunk in stream.chunks(16 * 1024) {
                    s.feed(chunk, &mut out).unwrap();
                }
                s.finish(&mut out).unwrap();
                assert_eq!(out.len(), stream.len());
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("copy_of_the_same_bytes_16KiB_chunks", |b| {
        b.iter(|| {
            out.clear();
            for chunk in stream.chunks(16 * 1024) {
                out.extend_from_slice(chunk);
            }
            assert_eq!(out.len(), stream.len());
        })
    });

    // One event, fed as one chunk: the time it spends in the stitcher.
    let event = token_event(7);
    group.throughput(Throughput::Elements(1));
    let mut s = StreamStitcher::new(Stitcher::new(), prefill.as_bytes()).unwrap();
    group.bench_function("one_token_event_latency", |b| {
        b.iter(|| {
            out.clear();
            s.feed(&event, &mut out).unwrap();
        })
    });
    // The same event split in two: the second chunk completes it.
    group.bench_function("one_token_event_in_two_chunks_latency", |b| {
        b.iter(|| {
            out.clear();
            s.feed(&event[..60], &mut out).unwrap();
            s.feed(&event[60..], &mut out).unwrap();
        })
    });

    // A rows event (1024 prompt rows from the prefill, 1024 + 512 in the
    // decode) beside the bytes merge of its data.
    let data = format!(
        "{{\"request_id\":\"r\",\"choices\":[{{\"index\":0,\"finish_reason\":\"stop\",\"token_ids\":[1],\"routed_experts\":{}}}]}}",
        compact(1536, 0, 2)
    );
    let rows_event = format!("data: {data}\n\n").into_bytes();
    group.throughput(Throughput::Bytes(rows_event.len() as u64));
    group.bench_function("rows_event_1536x48x8", |b| {
        b.iter_batched(
            || StreamStitcher::new(Stitcher::new(), prefill.as_bytes()).unwrap(),
            |mut s| {
                let mut out = Vec::new();
                s.feed(&rows_event, &mut out).unwrap();
                out
            },
            BatchSize::SmallInput,
        )
    });
    group.bench_function("bytes_merge_of_its_data", |b| {
        b.iter_batched(
            || data.clone().into_bytes(),
            |mut decode| {
                Stitcher::new()
                    .merge_bytes(prefill.as_bytes(), &mut decode, Stitch::ForPd)
                    .unwrap();
                decode
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
