//! Streams for the stream stitcher's benchmarks (`benches/stream.rs`) and
//! its instruction counts (`examples/stream_count.rs`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// A vLLM generate token chunk, as `serve_tokens_stream_generator` writes it
/// (140 bytes, with its `"routed_experts":null`).
pub fn token_event(i: usize) -> Vec<u8> {
    format!(
        "data: {{\"request_id\":\"generate-tokens-5f0c2b7e\",\"choices\":[{{\"index\":0,\"logprobs\":null,\"finish_reason\":null,\"token_ids\":[{}],\"routed_experts\":null}}]}}\n\n",
        10_000 + i % 90_000
    )
    .into_bytes()
}

/// `n` token events: a stream without rows.
pub fn tokens(n: usize) -> Vec<u8> {
    (0..n).flat_map(token_event).collect()
}

/// Inline compact rows of `seq` positions of 48 x 8 uint8 from `start`.
pub fn compact(seq: usize, start: usize, fill: u8) -> String {
    let data = STANDARD.encode(vec![fill; seq * 384]);
    format!("{{\"data\": \"{data}\", \"shape\": [{seq}, 48, 8], \"start\": {start}, \"dtype\": \"uint8\"}}")
}

/// The inline prefill: 1,024 prompt rows.
pub fn inline_prefill() -> Vec<u8> {
    format!(
        "{{\"choices\": [{{\"routed_experts\": {}}}]}}",
        compact(1024, 0, 1)
    )
    .into_bytes()
}

/// The data of the inline rows event: 1,536 positions (1,024 of them the
/// prompt's, from the prefill) of 48 x 8 uint8, on vLLM's terminal chunk.
pub fn inline_rows_data() -> Vec<u8> {
    format!(
        "{{\"request_id\":\"r\",\"choices\":[{{\"index\":0,\"finish_reason\":\"stop\",\"token_ids\":[1],\"routed_experts\":{}}}]}}",
        compact(1536, 0, 2)
    )
    .into_bytes()
}

/// The by-handle pair of the merge benchmarks (8 choices of 32 segments,
/// `super::by_handle`), compact JSON: the prefill, and the decode as one
/// event's data.
pub fn by_handle_pair() -> (Vec<u8>, Vec<u8>) {
    let (prefill, decode) = super::by_handle(8, 32);
    (
        serde_json::to_vec(&prefill).unwrap(),
        serde_json::to_vec(&decode).unwrap(),
    )
}

/// `data` as one event: `data: <data>\n\n`.
pub fn event(data: &[u8]) -> Vec<u8> {
    let mut event = b"data: ".to_vec();
    event.extend_from_slice(data);
    event.extend_from_slice(b"\n\n");
    event
}

/// An SGLang `/generate` pair as the stream stitcher meets it: the
/// prefill's output (1,024 prompt positions of 48 x 8 int32 ids, rows
/// `[0, P)`) and the data of the decode's finished event, full-length (its
/// 1,536 positions `[0, P + N - 1)`, the prompt's zeros as a fresh SGLang
/// decode answers them), with the `meta_info` members the engine writes.
pub fn sglang_pair() -> (Vec<u8>, Vec<u8>) {
    const WIDTH: usize = 48 * 8 * 4;
    let ids = |rows: usize, fill: u8| STANDARD.encode(vec![fill; rows * WIDTH]);
    let output = |completion: usize, rows: String| {
        format!(
            "{{\"output_ids\":[1],\"meta_info\":{{\"id\":\"3083de8b\",\"finish_reason\":{{\"type\":\"length\",\"length\":{completion}}},\"prompt_tokens\":1024,\"weight_version\":\"default\",\"completion_tokens\":{completion},\"cached_tokens\":0,\"routed_experts\":\"{rows}\",\"e2e_latency\":0.5}}}}"
        )
        .into_bytes()
    };
    (output(1, ids(1024, 1)), output(513, ids(1536, 0)))
}
