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

/// Rows of `n` positions of 48 layers x 8 experts, `itemsize` bytes each,
/// with values that vary (so no codec can shortcut on zeros).
fn rows(n: usize, itemsize: usize, seed: u8) -> Vec<u8> {
    (0..n * 48 * 8 * itemsize)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn compact_pair(
    prompt: usize,
    decoded: usize,
    pdtype: (&str, usize),
    ddtype: (&str, usize),
) -> (Value, Value) {
    use base64::Engine;
    let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let prefill = json!({"choices": [{"routed_experts": {"data": b64(&rows(prompt, pdtype.1, 1)),
        "shape": [prompt, 48, 8], "start": 0, "dtype": pdtype.0}}]});
    // The decode's rows start at its first forward, the last prompt position.
    let decode = json!({"choices": [{"routed_experts": {"data": b64(&rows(decoded, ddtype.1, 2)),
        "shape": [decoded, 48, 8], "start": prompt - 1, "dtype": ddtype.0}}]});
    (prefill, decode)
}

fn npy_pair(prompt: usize, decoded: usize) -> (Value, Value) {
    use base64::Engine;
    let file = |n: usize, seed: u8| {
        let dict = format!("{{'descr': '|u1', 'fortran_order': False, 'shape': ({n}, 48, 8), }}");
        let mut f = b"\x93NUMPY\x01\x00".to_vec();
        let padded = (10 + dict.len() + 1).div_ceil(64) * 64 - 10;
        f.extend_from_slice(&(padded as u16).to_le_bytes());
        f.extend_from_slice(dict.as_bytes());
        f.resize(10 + padded - 1, b' ');
        f.push(b'\n');
        f.extend(rows(n, 1, seed));
        base64::engine::general_purpose::STANDARD.encode(f)
    };
    (
        json!({"choices": [{"routed_experts": file(prompt, 1)}]}),
        json!({"choices": [{"routed_experts": file(decoded, 2)}]}),
    )
}

/// One choice, prompt 16k rows, decode 32k rows (from the last prompt
/// position), 48 x 8: the inline forms, and one plain `base64`-crate encode of
/// the merged rows as the yardstick of the work a re-encoding merge cannot
/// avoid.
fn bench_inline(c: &mut Criterion) {
    use base64::Engine;
    let mut group = c.benchmark_group("inline_16k_32k");
    let (prompt, decoded) = (16 * 1024, 32 * 1024);
    let cases = [
        (
            "compact_u8",
            compact_pair(prompt, decoded, ("uint8", 1), ("uint8", 1)),
        ),
        (
            "compact_u8_u16",
            compact_pair(prompt, decoded, ("uint8", 1), ("uint16", 2)),
        ),
        ("npy_u8", npy_pair(prompt, decoded)),
    ];
    for (name, (prefill, decode)) in &cases {
        group.bench_function(*name, |b| {
            b.iter_batched(
                || decode.clone(),
                |mut decode| pd_stitch::merge_routed_experts_in_json(prefill, &mut decode),
                BatchSize::LargeInput,
            )
        });
    }
    let merged = rows(prompt - 1 + decoded, 1, 3);
    group.bench_function("base64_crate_encode_merged_u8", |b| {
        b.iter(|| base64::engine::general_purpose::STANDARD.encode(&merged))
    });
    group.finish();
}

criterion_group!(benches, bench_by_handle, bench_inline);
criterion_main!(benches);
