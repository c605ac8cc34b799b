//! The default stitched fields (issue 15): `routed_experts` and
//! `routed_expert_weights`, in every default entry point.
//!
//! The pinned case is the upstream router's own unit test of its merge: a
//! prefill payload of `routed_experts` [0, 3), `routed_expert_weights` [0, 3)
//! and a `sampling_mask`; a decode payload of both fields from position 2 and
//! two sampling fields. Before 0.2 the default functions returned `Ok(true)`
//! but left the weights unstitched (the decode's weight row of position 2
//! kept, the prompt's weight rows missing).

use pd_stitch::{Stitcher, DEFAULT_FIELDS, ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS};
use serde_json::{json, Value};

fn seg(field: &str, file: &str, offset: u64, pos: u64, rows: u64, dtype: &str) -> Value {
    json!({"field": field, "file": file, "offset": offset, "pos": pos, "rows": rows,
           "dtype": dtype, "shape": [2, 4]})
}

/// The upstream test's responses: `uint16` experts (16-byte rows) and
/// `float32` weights (32-byte rows).
fn upstream_pair() -> (Value, Value) {
    let prefill = json!({"choices": [{"payload": [
        seg(ROUTED_EXPERTS, "p_experts.bin", 0, 0, 3, "uint16"),
        seg(ROUTED_EXPERT_WEIGHTS, "p_weights.bin", 0, 0, 3, "float32"),
        {"field": "sampling_mask", "file": "p_mask.bin", "offset": 0, "pos": 0, "rows": 1,
         "dtype": "bool", "shape": [8]},
    ]}]});
    let decode = json!({"choices": [{"text": "ok", "payload": [
        seg(ROUTED_EXPERTS, "d_experts.bin", 0, 2, 4, "uint16"),
        seg(ROUTED_EXPERT_WEIGHTS, "d_weights.bin", 0, 2, 4, "float32"),
        {"field": "sampling_mask", "file": "d_mask.bin", "offset": 0, "pos": 3, "rows": 3,
         "dtype": "bool", "shape": [8]},
        {"field": "sampling_logprobs", "file": "d_lp.bin", "offset": 0, "pos": 3, "rows": 3,
         "dtype": "float32", "shape": [1]},
    ]}]});
    (prefill, decode)
}

/// What every default entry point must make of the pair: the prefill's two
/// stitched segments, then each field's decode segment clipped at 3 (one row
/// skipped: 16 bytes of experts, 32 of weights), then the two sampling fields
/// as they were. The prefill's `sampling_mask` is not copied.
fn expected(decode: &Value) -> Value {
    let payload = &decode["choices"][0]["payload"];
    json!({"choices": [{"text": "ok", "payload": [
        seg(ROUTED_EXPERTS, "p_experts.bin", 0, 0, 3, "uint16"),
        seg(ROUTED_EXPERT_WEIGHTS, "p_weights.bin", 0, 0, 3, "float32"),
        seg(ROUTED_EXPERTS, "d_experts.bin", 16, 3, 3, "uint16"),
        seg(ROUTED_EXPERT_WEIGHTS, "d_weights.bin", 32, 3, 3, "float32"),
        payload[2].clone(),
        payload[3].clone(),
    ]}]})
}

#[test]
fn the_upstream_case_stitches_both_fields_through_every_default_function() {
    let (prefill, decode) = upstream_pair();
    let want = expected(&decode);
    type ValueMerge = fn(&Value, &mut Value) -> Result<bool, pd_stitch::Error>;
    let value_functions: [(&str, ValueMerge); 4] = [
        (
            "merge_routed_experts_for_pd",
            pd_stitch::merge_routed_experts_for_pd,
        ),
        (
            "merge_routed_payload_in_json",
            pd_stitch::merge_routed_payload_in_json,
        ),
        ("Stitcher::new()", |p, d| {
            Stitcher::new().merge(p, d, pd_stitch::Stitch::ForPd)
        }),
        ("Stitcher::default()", |p, d| {
            Stitcher::default().merge(p, d, pd_stitch::Stitch::ForPd)
        }),
    ];
    for (name, merge) in value_functions {
        let mut got = decode.clone();
        assert_eq!(merge(&prefill, &mut got), Ok(true), "{name}");
        assert_eq!(got, want, "{name}");
    }
    type BytesMerge = fn(&[u8], &mut Vec<u8>) -> Result<bool, pd_stitch::Error>;
    let bytes_functions: [(&str, BytesMerge); 2] = [
        (
            "bytes::merge_routed_experts_for_pd",
            pd_stitch::bytes::merge_routed_experts_for_pd,
        ),
        (
            "bytes::merge_routed_payload_in_json",
            pd_stitch::bytes::merge_routed_payload_in_json,
        ),
    ];
    let prefill_bytes = serde_json::to_vec(&prefill).unwrap();
    for (name, merge) in bytes_functions {
        let mut got = serde_json::to_vec(&decode).unwrap();
        assert_eq!(merge(&prefill_bytes, &mut got), Ok(true), "{name}");
        let got: Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(got, want, "{name}");
    }
    assert!(pd_stitch::prefill_has_routed_experts(&prefill));
    assert_eq!(
        pd_stitch::bytes::prefill_has_routed_experts(&prefill_bytes),
        Ok(true)
    );
}

/// `with_fields([routed_experts])` is the way to the old behaviour: the
/// weights pass through untouched, the decode's weight row of position 2
/// included.
#[test]
fn with_fields_sets_the_exact_set() {
    let (prefill, decode) = upstream_pair();
    let mut got = decode.clone();
    assert_eq!(
        Stitcher::with_fields([ROUTED_EXPERTS]).merge(&prefill, &mut got, pd_stitch::Stitch::ForPd),
        Ok(true)
    );
    let payload = got["choices"][0]["payload"].as_array().unwrap();
    let weights: Vec<&Value> = payload
        .iter()
        .filter(|item| item["field"] == ROUTED_EXPERT_WEIGHTS)
        .collect();
    assert_eq!(weights, [&decode["choices"][0]["payload"][1]]);
    assert_eq!(DEFAULT_FIELDS, [ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS]);
}

/// A decode with weight rows and a prefill with none cannot be stitched by
/// default: the prompt's weights are missing, and the merge says so.
#[test]
fn weights_without_the_prompts_weights_are_refused_by_default() {
    let prefill = json!({"choices": [{"payload": [
        seg(ROUTED_EXPERTS, "p.bin", 0, 0, 3, "uint16")]}]});
    let mut decode = json!({"choices": [{"payload": [
        seg(ROUTED_EXPERTS, "d.bin", 0, 2, 2, "uint16"),
        seg(ROUTED_EXPERT_WEIGHTS, "w.bin", 0, 2, 2, "float32")]}]});
    let before = decode.clone();
    let err = pd_stitch::merge_routed_experts_for_pd(&prefill, &mut decode).unwrap_err();
    assert!(
        matches!(err.detail(), pd_stitch::ErrorDetail::MissingPrefillField { field, .. } if field == ROUTED_EXPERT_WEIGHTS),
        "{err}"
    );
    assert_eq!(decode, before);
}
