//! NVIDIA Dynamo 1.6.1's answers (tests/fixtures/engines/dynamo, saved from
//! its frontend and vLLM worker on the CPU by tests/engines/dynamo/capture.sh).
//!
//! Dynamo's token-in token-out API (`/inference/v1/generate`) carries a
//! choice's rows as the compact object `{data, shape, start, dtype}`, where
//! vLLM's own API carries a `.npy`: the start is on the wire. Rows are read
//! here with the test's own reader (base64 and the object's members), never
//! the crate's.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::{Stitch, Stitcher};
use serde_json::Value;

const LAYERS: u64 = 3;
const TOP_K: u64 = 2;

fn fixture(path: &str) -> Vec<u8> {
    let at = format!(
        "{}/tests/fixtures/engines/dynamo/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}"))
}

fn fixture_json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).expect("JSON")
}

/// Compact rows, read by the test: (start, rows, bytes), the bytes checked
/// against the shape and dtype.
fn compact(rows: &Value) -> (u64, u64, Vec<u8>) {
    assert_eq!(rows["dtype"], "uint8");
    let shape: Vec<u64> = rows["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    assert_eq!(&shape[1..], &[LAYERS, TOP_K]);
    let bytes = STANDARD.decode(rows["data"].as_str().unwrap()).unwrap();
    assert_eq!(bytes.len() as u64, shape[0] * LAYERS * TOP_K);
    (rows["start"].as_u64().unwrap(), shape[0], bytes)
}

fn choice_rows(response: &Value, c: usize) -> (u64, u64, Vec<u8>) {
    compact(&response["choices"][c]["routed_experts"])
}

/// Merges by the `Value` path and by the bytes path on the engine's own
/// bytes; both must succeed and agree.
fn merge(prefill: &str, decode: &str) -> Value {
    let stitcher = Stitcher::new();
    let mut value = fixture_json(decode);
    stitcher
        .merge(&fixture_json(prefill), &mut value, Stitch::ForPd)
        .unwrap_or_else(|e| panic!("{decode}: {e}"));
    let mut bytes = fixture(decode);
    stitcher
        .merge_bytes(&fixture(prefill), &mut bytes, Stitch::ForPd)
        .unwrap_or_else(|e| panic!("{decode} (bytes): {e}"));
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        value,
        "{decode}: the two paths disagree"
    );
    value
}

/// The engine's prefill (`max_tokens` 1: rows `[0, P)`) and decode (asked
/// from S = P - 1 or a block boundary below P: rows `[S, P + N - 1)`),
/// stitched, give the colocated answer's rows byte for byte; n = 2 too.
#[test]
fn the_engines_token_api_pairs_stitch_to_its_colocated_rows() {
    for prompt in ["p45", "p70"] {
        for (prefill, decode, colocated) in [
            ("prefill", "decode", "colocated"),
            ("prefill", "decode-s32", "colocated"),
            ("prefill-n2", "decode-n2", "colocated-n2"),
        ] {
            let path = |name: &str| format!("{prompt}/{name}.json");
            let colocated = fixture_json(&path(colocated));
            let decode_json = fixture_json(&path(decode));
            let merged = merge(&path(prefill), &path(decode));
            let choices = colocated["choices"].as_array().unwrap().len();
            assert_eq!(merged["choices"].as_array().unwrap().len(), choices);
            for c in 0..choices {
                let (start, rows, _) = choice_rows(&decode_json, c);
                // The decode's own rows start past 0: the check can fail.
                assert!(start > 0 && rows < choice_rows(&colocated, c).1);
                assert_eq!(
                    choice_rows(&merged, c),
                    choice_rows(&colocated, c),
                    "{prompt}/{decode} choice {c}"
                );
                assert_eq!(
                    merged["choices"][c]["token_ids"], colocated["choices"][c]["token_ids"],
                    "{prompt}/{decode} choice {c}"
                );
            }
        }
    }
}

/// What the engine refuses, kept as facts a router must live with: the
/// decode asked from S = P (vLLM takes it; Dynamo wants S below P), and a
/// stream on the token API.
#[test]
fn the_engine_refuses_a_start_at_the_prompts_end_and_token_api_streams() {
    for prompt in ["p45", "p70"] {
        let request = fixture_json(&format!("{prompt}/decode-sP-refused.request.json"));
        let p = request["token_ids"].as_array().unwrap().len() as u64;
        assert_eq!(request["sampling_params"]["routed_experts_prompt_start"], p);
        let refused = fixture_json(&format!("{prompt}/decode-sP-refused.json"));
        assert_eq!(refused["error"]["code"], 400);
        let refused = fixture_json(&format!("{prompt}/stream-refused.json"));
        assert_eq!(refused["error"]["code"], 501);
    }
}
