//! Inputs shared by the benchmarks, and the baseline implementation.
#![allow(dead_code)] // each bench target uses part of it

pub mod baseline;
pub mod stream;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use serde_json::{json, Value};

/// Row shape of the inline benchmarks: 48 layers x 8 experts.
pub const LAYERS: usize = 48;
pub const TOPK: usize = 8;

/// `n` rows of 48 x 8 elements of `itemsize` bytes, with varying values (so
/// no codec can take a shortcut on zeros).
pub fn rows(n: usize, itemsize: usize, seed: u8) -> Vec<u8> {
    (0..n * LAYERS * TOPK * itemsize)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn dtype_name(itemsize: usize) -> &'static str {
    if itemsize == 1 {
        "uint8"
    } else {
        "uint16"
    }
}

/// A by-handle pair: `choices` decode choices, each with `segments`
/// routed-experts segments (preemption splits), a sampling mask, and 1,024
/// token ids and 1,024 float logprobs, as real responses carry.
pub fn by_handle(choices: usize, segments: u64) -> (Value, Value) {
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
                    seg(
                        "/dev/shm/decode-0.bin",
                        (i as u64 * 1024 + k * per) * 384,
                        prompt - 1 + k * per,
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

/// An inline compact pair: the prompt is `positions / 2` rows, the decode
/// `positions` rows from the last prompt position; `n` decode choices.
pub fn compact(
    positions: usize,
    prefill_itemsize: usize,
    decode_itemsize: usize,
    n: usize,
) -> (Value, Value) {
    let prompt = positions / 2;
    let prefill = json!({"choices": [{"routed_experts": {"data": STANDARD.encode(rows(prompt, prefill_itemsize, 1)),
        "shape": [prompt, LAYERS, TOPK], "start": 0, "dtype": dtype_name(prefill_itemsize)}}]});
    let choices: Vec<Value> = (0..n)
        .map(|i| json!({"index": i, "routed_experts": {"data": STANDARD.encode(rows(positions, decode_itemsize, 2 + i as u8)),
            "shape": [positions, LAYERS, TOPK], "start": prompt - 1, "dtype": dtype_name(decode_itemsize)}}))
        .collect();
    (prefill, json!({"choices": choices}))
}

/// An inline compact pair whose decode starts where the prefill does (as
/// vLLM's decode instance reports every position): prompt `positions / 2`
/// rows, decode `positions` rows from position 0, `n` decode choices.
pub fn compact_from_zero(
    positions: usize,
    prefill_itemsize: usize,
    decode_itemsize: usize,
    n: usize,
) -> (Value, Value) {
    let (prefill, mut decode) = compact(positions, prefill_itemsize, decode_itemsize, n);
    for choice in decode["choices"].as_array_mut().into_iter().flatten() {
        choice["routed_experts"]["start"] = json!(0);
    }
    (prefill, decode)
}

/// A `.npy` file as NumPy writes it: version 1.0, header padded to 64 bytes.
pub fn npy_file(itemsize: usize, n: usize, data: &[u8]) -> Vec<u8> {
    let descr = if itemsize == 1 { "|u1" } else { "<u2" };
    let growth = " ".repeat(21 - n.to_string().len());
    let dict = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': ({n}, {LAYERS}, {TOPK}), }}{growth}");
    let padded = (10 + dict.len() + 1).div_ceil(64) * 64 - 10;
    let mut f = b"\x93NUMPY\x01\x00".to_vec();
    f.extend_from_slice(&(padded as u16).to_le_bytes());
    f.extend_from_slice(dict.as_bytes());
    f.resize(10 + padded - 1, b' ');
    f.push(b'\n');
    f.extend_from_slice(data);
    f
}

/// An inline npy pair: prompt `positions / 2` rows, decode `positions` rows
/// (from position 0, its prompt rows its own), `n` decode choices.
pub fn npy(
    positions: usize,
    prefill_itemsize: usize,
    decode_itemsize: usize,
    n: usize,
) -> (Value, Value) {
    let prompt = positions / 2;
    let prefill = json!({"choices": [{"routed_experts":
        STANDARD.encode(npy_file(prefill_itemsize, prompt, &rows(prompt, prefill_itemsize, 1)))}]});
    let choices: Vec<Value> = (0..n)
        .map(|i| json!({"index": i, "routed_experts":
            STANDARD.encode(npy_file(decode_itemsize, positions, &rows(positions, decode_itemsize, 2 + i as u8)))}))
        .collect();
    (prefill, json!({"choices": choices}))
}
