//! Criterion benchmarks of the JSON entry points on pre-parsed responses.
//!
//! The decode response is cloned outside the timed region (`iter_batched`), so
//! only the merge is measured. `serde_json::from_slice` of the same decode
//! response is measured beside it as the yardstick of what a router already
//! pays per response. Compare figures within one run only.

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion};
use serde_json::{json, Value};

/// A realistic by-handle response pair: `choices` decode choices, each with
/// `segments` routed-experts segments (one preemption split per segment), a
/// sampling mask, 1,024 token ids and 1,024 logprobs.
fn by_handle(choices: usize, segments: u64) -> (Value, Value) {
    let prompt = 4096u64;
    let seg = |file: &str, offset: u64, pos: u64, rows: u64| {
        json!({"field": "routed_experts", "file": file, "offset": offset, "pos": pos, "rows": rows,
               "dtype": "uint8", "shape": [48, 8]})
    };
    let prefill = json!({"id": "cmpl-p", "choices": [{"index": 0, "token_ids": [1],
        "payload": [seg("/dev/shm/prefill-0.bin", 0, 0, prompt)]}]});
    let per = 1024 / segments;
    let choices: Vec<Value> = (0..choices)
        .map(|i| {
            let mut payload: Vec<Value> = (0..segments)
                .map(|k| {
                    let pos = prompt - 1 + k * per;
                    seg(
                        "/dev/shm/decode-0.bin",
                        (i as u64 * 1024 + k * per) * 384,
                        pos,
                        per,
                    )
                })
                .collect();
            payload.push(
                json!({"field": "sampling_mask", "file": "/dev/shm/mask.bin", "offset": 0,
                                "pos": prompt - 1, "rows": 1024, "dtype": "bool", "shape": [1024]}),
            );
            json!({"index": i, "token_ids": (0..1024).collect::<Vec<u32>>(),
                   "logprobs": (0..1024).map(|t| -(t as f64) / 997.0).collect::<Vec<f64>>(),
                   "finish_reason": "length", "payload": payload})
        })
        .collect();
    (
        prefill,
        json!({"id": "cmpl-d", "object": "text_completion", "choices": choices}),
    )
}

fn bench_by_handle(c: &mut Criterion) {
    let mut group = c.benchmark_group("by_handle");
    for (choices, segments) in [(1, 2), (8, 32), (64, 256)] {
        let (prefill, decode) = by_handle(choices, segments);
        let bytes = serde_json::to_vec(&decode).expect("serializable");
        let id = format!("{choices}x{segments}");
        group.bench_with_input(BenchmarkId::new("merge", &id), &decode, |b, decode| {
            b.iter_batched(
                || decode.clone(),
                |mut decode| pd_stitch::merge_routed_payload_in_json(&prefill, &mut decode),
                BatchSize::SmallInput,
            )
        });
        group.bench_with_input(BenchmarkId::new("parse", &id), &bytes, |b, bytes| {
            b.iter(|| serde_json::from_slice::<Value>(bytes))
        });
    }
    group.finish();
}

criterion_group!(benches, bench_by_handle);
criterion_main!(benches);
