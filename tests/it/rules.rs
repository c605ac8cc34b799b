//! The merge rules on inputs written by hand, one test per rule and per error
//! path, with the expected output spelled out literally.

use pd_stitch::algebra::{Dtype, Overflow};
use pd_stitch::{
    merge_routed_payload_in_json, prefill_has_routed_experts, Error, ErrorDetail, ErrorKind, Side,
    Step, Stitcher,
};
use serde_json::{json, Value};

fn re(file: &str, offset: u64, pos: u64, rows: u64) -> Value {
    json!({"field": "routed_experts", "file": file, "offset": offset, "pos": pos, "rows": rows,
           "dtype": "uint16", "shape": [2, 4]})
}

fn response(payloads: &[Value]) -> Value {
    let choices: Vec<Value> = payloads
        .iter()
        .enumerate()
        .map(|(i, p)| json!({"index": i, "text": "hi", "payload": p}))
        .collect();
    json!({"id": "cmpl-1", "choices": choices})
}

/// Merges and asserts the error leaves decode untouched; returns the error.
fn merge_err(stitcher: &Stitcher, prefill: &Value, decode: &Value) -> Error {
    let mut after = decode.clone();
    let err = stitcher
        .merge(prefill, &mut after, pd_stitch::Stitch::ByHandle)
        .expect_err("the merge must fail");
    assert_eq!(&after, decode, "decode changed by a failed merge ({err})");
    err
}

#[test]
fn seed_example() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let mask = json!({"field": "sampling_mask", "file": "m.bin", "offset": 0, "pos": 2, "rows": 3,
                      "dtype": "bool", "shape": [32]});
    let mut decode = response(&[json!([re("d.bin", 0, 2, 3), mask])]);
    assert_eq!(
        merge_routed_payload_in_json(&prefill, &mut decode),
        Ok(true)
    );
    assert_eq!(
        decode,
        json!({"id": "cmpl-1", "choices": [{"index": 0, "text": "hi", "payload": [
            {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3,
             "dtype": "uint16", "shape": [2, 4]},
            {"field": "routed_experts", "file": "d.bin", "offset": 16, "pos": 3, "rows": 2,
             "dtype": "uint16", "shape": [2, 4]},
            {"field": "sampling_mask", "file": "m.bin", "offset": 0, "pos": 2, "rows": 3,
             "dtype": "bool", "shape": [32]},
        ]}]})
    );
}

#[test]
fn rule_1_nothing_stitched_is_ok_false_and_untouched() {
    let mask = json!({"field": "sampling_mask", "pos": 0, "rows": 1});
    for (prefill, decode) in [
        (json!({}), json!({})),
        (
            response(&[json!([mask])]),
            response(&[json!([mask]), Value::Null]),
        ),
        (json!({"choices": []}), json!({"choices": "not an array"})),
        (json!(null), json!([1, 2])),
        (
            json!({"choices": [{"payload": "junk"}]}),
            json!({"choices": [7, {"payload": 3}]}),
        ),
        (
            response(&[json!([{"field": "routed_experts_v2", "pos": 0}])]),
            json!({"choices": [{}]}),
        ),
    ] {
        let mut after = decode.clone();
        assert_eq!(
            merge_routed_payload_in_json(&prefill, &mut after),
            Ok(false),
            "{prefill} / {decode}"
        );
        assert_eq!(after, decode);
    }
}

#[test]
fn rule_2_integers_must_be_json_integers_in_u64() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let cases = [
        (json!(3.0), "3.0"),
        (json!(-1), "-1"),
        (json!("5"), "\"5\""),
        (json!(true), "true"),
        (json!(null), "null"),
        (json!(18446744073709551616.0), "1.8446744073709552e+19"),
    ];
    for key in ["pos", "rows", "offset"] {
        for (bad, shown) in &cases {
            let mut seg = re("d.bin", 0, 2, 3);
            seg[key] = bad.clone();
            let decode = response(&[json!([seg])]);
            let err = merge_err(&Stitcher::new(), &prefill, &decode);
            assert_eq!(err.kind(), ErrorKind::Integer, "{err}");
            assert_eq!(
                err.to_string(),
                format!("decode choices[0].payload[0].{key}: must be a non-negative integer, got {shown}")
            );
        }
        let mut seg = re("d.bin", 0, 2, 3);
        seg.as_object_mut().unwrap().remove(key);
        let err = merge_err(&Stitcher::new(), &prefill, &response(&[json!([seg])]));
        assert_eq!(
            err.to_string(),
            format!(
                "decode choices[0].payload[0].{key}: must be a non-negative integer, got nothing"
            )
        );
    }
    // One past u64::MAX, as a router reads it off the wire.
    let text = r#"{"choices": [{"payload": [{"field": "routed_experts", "file": "d", "offset": 0,
        "pos": 18446744073709551616, "rows": 0, "dtype": "uint8", "shape": []}]}]}"#;
    let err = merge_err(
        &Stitcher::new(),
        &prefill,
        &serde_json::from_str(text).unwrap(),
    );
    assert_eq!(err.kind(), ErrorKind::Integer, "{err}");
    // The bounds themselves are fine.
    let mut decode = response(
        &[json!([{"field": "routed_experts", "file": "d", "offset": 0,
        "pos": u64::MAX, "rows": 0, "dtype": "uint8", "shape": []}])],
    );
    assert_eq!(
        merge_routed_payload_in_json(&prefill, &mut decode),
        Ok(true)
    );
}

#[test]
fn rule_2_shape_and_dtype() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let with = |key: &str, value: Value| {
        let mut seg = re("d.bin", 0, 2, 3);
        seg[key] = value;
        response(&[json!([seg])])
    };
    let err = merge_err(&Stitcher::new(), &prefill, &with("shape", json!([2, -4])));
    assert_eq!(
        err.to_string(),
        "decode choices[0].payload[0].shape[1]: must be a non-negative integer, got -4"
    );
    let err = merge_err(&Stitcher::new(), &prefill, &with("shape", json!("2x4")));
    assert!(matches!(
        err.detail(),
        ErrorDetail::Structure {
            expected: "an array of non-negative integers",
            ..
        }
    ));
    assert_eq!(
        err.to_string(),
        "decode choices[0].payload[0].shape: must be an array of non-negative integers, got \"2x4\""
    );
    for (bad, shown) in [
        (json!("<u2"), "\"<u2\""),
        (json!("uint"), "\"uint\""),
        (json!(16), "16"),
    ] {
        let err = merge_err(&Stitcher::new(), &prefill, &with("dtype", bad));
        assert_eq!(err.kind(), ErrorKind::Dtype);
        assert!(
            err.to_string()
                .starts_with(&format!("decode choices[0].payload[0].dtype: unsupported dtype {shown}; expected one of bool, int8")),
            "{err}"
        );
    }
    // An empty shape is a scalar row of one element.
    let mut decode = with("shape", json!([]));
    assert_eq!(
        merge_routed_payload_in_json(&prefill, &mut decode),
        Ok(true)
    );
    assert_eq!(decode["choices"][0]["payload"][1]["offset"], 2); // one uint16 skipped
}

#[test]
fn rule_2_overflows_each_have_their_variant() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let seg = |offset: u64, pos: u64, rows: u64, shape: Value| {
        response(&[
            json!([{"field": "routed_experts", "file": "d.bin", "offset": offset, "pos": pos,
                           "rows": rows, "dtype": "uint64", "shape": shape}]),
        ])
    };
    let cases = [
        (
            seg(0, 2, 1, json!([1u64 << 40, 1u64 << 40])),
            Overflow::RowBytes {
                dtype: Dtype::Uint64,
                dims: 2,
            },
            "row size itemsize(uint64) * prod(shape) overflows u64 (shape has 2 dimensions)",
        ),
        (
            seg(0, 2, u64::MAX - 1, json!([])),
            Overflow::End {
                pos: 2,
                rows: u64::MAX - 1,
            },
            "end position pos + rows = 2 + 18446744073709551614 overflows u64",
        ),
        (
            seg(u64::MAX - 8, 2, 2, json!([])),
            Overflow::ByteEnd {
                offset: u64::MAX - 8,
                rows: 2,
                row_bytes: 8,
            },
            "end byte offset + rows * row_bytes = 18446744073709551607 + 2 * 8 overflows u64",
        ),
    ];
    for (decode, overflow, message) in cases {
        let err = merge_err(&Stitcher::new(), &prefill, &decode);
        assert_eq!(
            err.to_string(),
            format!("decode choices[0].payload[0]: {message}")
        );
        match err.into_detail() {
            ErrorDetail::Overflow {
                at, overflow: got, ..
            } => {
                assert_eq!(got, overflow);
                assert_eq!(at.side(), Side::Decode);
            }
            other => panic!("expected an overflow, got {other:?}"),
        }
    }
    // The prefill side is validated just the same.
    let bad_prefill = response(
        &[json!([{"field": "routed_experts", "file": "p", "offset": 0,
        "pos": u64::MAX, "rows": 1, "dtype": "uint8", "shape": []}])],
    );
    let err = merge_err(&Stitcher::new(), &bad_prefill, &response(&[json!([])]));
    assert_eq!(err.location().to_string(), "prefill choices[0].payload[0]");
}

#[test]
fn rule_3_the_cut_is_the_largest_prefill_end_in_any_order() {
    // Prefill segments out of order and with a hole: cut = max(pos + rows) = 10.
    let prefill = response(&[json!([re("p.bin", 64, 6, 4), re("p.bin", 0, 0, 4)])]);
    let mut decode = response(&[json!([re("d.bin", 0, 9, 3)])]);
    merge_routed_payload_in_json(&prefill, &mut decode).unwrap();
    let payload = &decode["choices"][0]["payload"];
    assert_eq!(payload[0], re("p.bin", 64, 6, 4));
    assert_eq!(payload[1], re("p.bin", 0, 0, 4));
    assert_eq!(payload[2], re("d.bin", 16, 10, 2));
}

#[test]
fn rule_4_a_decode_field_the_prefill_lacks_is_an_error() {
    let stitcher = Stitcher::new().field("routed_expert_weights");
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let mut weights = re("w.bin", 0, 2, 3);
    weights["field"] = json!("routed_expert_weights");
    let decode = response(&[
        json!([re("d.bin", 0, 2, 3)]),
        json!([re("d.bin", 48, 2, 3), weights]),
    ]);
    let err = merge_err(&stitcher, &prefill, &decode);
    assert_eq!(err.kind(), ErrorKind::MissingPrefillField);
    assert_eq!(
        err.location(),
        &pd_stitch::Location::root(Side::Decode)
            .key("choices")
            .index(1)
            .key("payload")
            .index(1)
    );
    assert!(
        matches!(err.detail(), ErrorDetail::MissingPrefillField { field, .. } if field == "routed_expert_weights"),
        "{err:?}"
    );
    assert_eq!(
        err.to_string(),
        "decode choices[1].payload[1]: the decode has rows of field \"routed_expert_weights\" but \
         prefill choices[0] has none, so the prompt's rows are missing"
    );
    // With no prefill segment at all, the same error.
    for prefill in [
        json!({}),
        json!({"choices": [{"payload": "junk"}]}),
        json!({"choices": [null]}),
    ] {
        let err = merge_err(&stitcher, &prefill, &decode);
        assert_eq!(err.kind(), ErrorKind::MissingPrefillField, "{err}");
        assert_eq!(err.location().to_string(), "decode choices[0].payload[0]");
    }
}

#[test]
fn rule_5_drop_clip_keep_in_order_and_prefill_others_not_copied() {
    let mask = json!({"field": "sampling_mask", "file": "m.bin", "pos": 0});
    let prefill = response(&[json!([mask, re("p.bin", 0, 0, 5)])]);
    let odd = json!({"field": "sampling_mask", "rows": -3});
    let mut decode = response(&[json!([
        re("d.bin", 0, 1, 4),   // [1, 5): ends at the cut: dropped
        odd,                    // malformed, not stitched: passes through
        re("d.bin", 64, 4, 3),  // [4, 7): clipped to [5, 7), offset + 16
        re("d.bin", 112, 7, 0), // empty, after the cut: kept
        re("d.bin", 112, 5, 0), // empty, at the cut: dropped
        re("d.bin", 200, 9, 2), // after the cut: kept
    ])]);
    merge_routed_payload_in_json(&prefill, &mut decode).unwrap();
    assert_eq!(
        decode["choices"][0]["payload"],
        json!([
            re("p.bin", 0, 0, 5),
            {"field": "sampling_mask", "rows": -3},
            re("d.bin", 80, 5, 2),
            re("d.bin", 112, 7, 0),
            re("d.bin", 200, 9, 2),
        ])
    );
}

#[test]
fn rule_6_choices_without_payload_get_the_prefill_segments() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let mut decode = json!({"choices": [{"index": 0}, {"index": 1, "payload": null}]});
    assert_eq!(
        merge_routed_payload_in_json(&prefill, &mut decode),
        Ok(true)
    );
    assert_eq!(
        decode,
        json!({"choices": [
            {"index": 0, "payload": [re("p.bin", 0, 0, 3)]},
            {"index": 1, "payload": [re("p.bin", 0, 0, 3)]},
        ]})
    );
    // An empty choice list has nothing to receive them, and that is fine.
    let mut decode = json!({"choices": []});
    assert_eq!(
        merge_routed_payload_in_json(&prefill, &mut decode),
        Ok(true)
    );
    assert_eq!(decode, json!({"choices": []}));
}

#[test]
fn rule_6_bad_decode_structure_is_an_error_when_there_is_something_to_merge() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let ok = json!([re("d.bin", 0, 2, 3)]);
    let cases = [
        (json!([]), "decode response: must be an object, got []"),
        (
            json!({"id": 1}),
            "decode choices: must be an array, got nothing",
        ),
        (
            json!({"choices": {"0": {}}}),
            "decode choices: must be an array, got {\"0\":{}}",
        ),
        (
            json!({"choices": [{"payload": ok}, 5]}),
            "decode choices[1]: must be an object, got 5",
        ),
        (
            json!({"choices": [{"payload": ok}, {"payload": "x"}]}),
            "decode choices[1].payload: must be an array or null, got \"x\"",
        ),
    ];
    for (decode, message) in cases {
        let err = merge_err(&Stitcher::new(), &prefill, &decode);
        assert_eq!(err.kind(), ErrorKind::Structure, "{err}");
        assert_eq!(err.to_string(), message);
    }
}

#[test]
fn rule_7_other_keys_are_kept() {
    let mut p = re("p.bin", 0, 0, 3);
    p["x-trace"] = json!({"id": [1, 2]});
    let mut d = re("d.bin", 0, 2, 3);
    d["x-trace"] = json!("keep me");
    d["file"] = json!({"handle": 7}); // the merge never looks at the file
    let prefill = response(&[json!([p.clone()])]);
    let mut decode =
        json!({"model": "m", "usage": {"a": 1}, "choices": [{"text": "t", "payload": [d]}]});
    merge_routed_payload_in_json(&prefill, &mut decode).unwrap();
    let mut clipped = re("d.bin", 16, 3, 2);
    clipped["x-trace"] = json!("keep me");
    clipped["file"] = json!({"handle": 7});
    assert_eq!(
        decode,
        json!({"model": "m", "usage": {"a": 1}, "choices": [{"text": "t", "payload": [p, clipped]}]})
    );
}

#[test]
fn rule_8_a_late_error_leaves_earlier_choices_unmerged() {
    let prefill = response(&[json!([re("p.bin", 0, 0, 3)])]);
    let mut bad = re("d.bin", 0, 2, 3);
    bad["rows"] = json!(-1);
    let decode = response(&[
        json!([re("d.bin", 0, 2, 3)]),
        json!([re("d.bin", 48, 2, 3)]),
        json!([bad]),
    ]);
    let err = merge_err(&Stitcher::new(), &prefill, &decode);
    assert_eq!(err.location().path()[1], Step::Index(2));
}

#[test]
fn prefill_segments_come_from_choice_0_only() {
    let prefill = response(&[json!([]), json!([re("p.bin", 0, 0, 3)])]);
    assert!(!prefill_has_routed_experts(&prefill));
    let decode = response(&[json!([re("d.bin", 0, 2, 3)])]);
    let err = merge_err(&Stitcher::new(), &prefill, &decode);
    assert_eq!(err.kind(), ErrorKind::MissingPrefillField);
}

#[test]
fn prefill_has_routed_experts_cases() {
    assert!(prefill_has_routed_experts(&response(&[json!([re(
        "p.bin", 0, 0, 0
    )])])));
    assert!(prefill_has_routed_experts(
        &json!({"choices": [{"routed_experts": {"data": ""}}]})
    ));
    assert!(!prefill_has_routed_experts(
        &json!({"choices": [{"routed_experts": null}]})
    ));
    assert!(!prefill_has_routed_experts(
        &json!({"choices": [{"payload": [{"field": "sampling_mask"}]}]})
    ));
    assert!(!prefill_has_routed_experts(
        &json!({"choices": [{"payload": [{"field": ["routed_experts"]}]}]})
    ));
    assert!(!prefill_has_routed_experts(
        &json!({"choices": [{"payload": ["routed_experts"]}]})
    ));
    assert!(!prefill_has_routed_experts(&json!({"choices": "x"})));
    assert!(!prefill_has_routed_experts(&json!(null)));
    // `routed_expert_weights` is a default field since 0.2; a stitcher of
    // `routed_experts` alone does not see it.
    let weights = json!({"choices": [{"payload": [{"field": "routed_expert_weights"}]}]});
    assert!(prefill_has_routed_experts(&weights));
    assert!(!Stitcher::with_fields(["routed_experts"]).prefill_has_routed_experts(&weights));
    assert!(Stitcher::with_fields(["routed_experts"])
        .field("routed_expert_weights")
        .prefill_has_routed_experts(&weights));
}

#[test]
fn stitcher_builder() {
    assert_eq!(Stitcher::new(), Stitcher::default());
    assert_eq!(
        Stitcher::new().fields().collect::<Vec<_>>(),
        ["routed_experts", "routed_expert_weights"]
    );
    assert_eq!(
        Stitcher::new().fields().collect::<Vec<_>>(),
        pd_stitch::DEFAULT_FIELDS
    );
    let s = Stitcher::new()
        .field("w")
        .field("routed_experts")
        .field("w");
    assert_eq!(
        s.fields().collect::<Vec<_>>(),
        ["routed_experts", "routed_expert_weights", "w"]
    );
    let exact = Stitcher::with_fields(["w", "routed_experts", "w"]);
    assert_eq!(exact.fields().collect::<Vec<_>>(), ["w", "routed_experts"]);
    assert!(Stitcher::with_fields(Vec::<String>::new())
        .fields()
        .next()
        .is_none());
    assert!(!Stitcher::new().is_strict());
    assert!(Stitcher::new().strict().is_strict());
}

#[test]
fn error_is_a_well_behaved_error_type() {
    fn assert_bounds<E: std::error::Error + Send + Sync + 'static>() {}
    assert_bounds::<Error>();
    // An error a merge really returns, boxed as an application boxes it.
    let prefill = json!({"choices": [{"payload": [{"field": "routed_experts", "file": "p",
        "offset": 0, "pos": -1, "rows": 1, "dtype": "uint8", "shape": []}]}]});
    let mut decode = json!({"choices": [{}]});
    let err = pd_stitch::merge_routed_payload_in_json(&prefill, &mut decode).unwrap_err();
    let boxed: Box<dyn std::error::Error + Send + Sync> = Box::new(err);
    assert_eq!(
        boxed.to_string(),
        "prefill choices[0].payload[0].pos: must be a non-negative integer, got -1"
    );
}
