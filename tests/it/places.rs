//! `pd_stitch::places::all()`, the one table of where rows sit, walked:
//! for each place that holds rows, a pair with rows there merges the same
//! through the `Value` path and the bytes path (the scanner records the
//! place), and a stream whose rows event holds it is stitched to that merge
//! (the stream finds the place, its prefilter included), and a router's
//! first question, whether the prefill has rows, is answered yes. A row
//! added to the table without a pair here fails the walk.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::places::{self, Holder, Holds, Place, RowsKind};
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Stitch, Stitcher};
use serde_json::{json, Value};

/// SGLang's ids as it writes them: base64 of little-endian int32.
fn ids(ids: &[i32]) -> String {
    STANDARD.encode(ids.iter().flat_map(|i| i.to_le_bytes()).collect::<Vec<_>>())
}

/// A prefill and a decode with rows at `place` (a prompt of 2 tokens, 3
/// generated, rows of one id for SGLang), and what their merge must hold
/// there.
fn pair(place: &Place) -> (Value, Value, Value) {
    let sglang_prefill = json!(ids(&[10, 11]));
    let sglang_decode = json!(ids(&[0, 0, 12, 13]));
    let sglang_merged = json!(ids(&[10, 11, 12, 13]));
    let usage = |completion: u64| json!({"prompt_tokens": 2, "completion_tokens": completion});
    match (place.holder, place.key, place.holds) {
        (Holder::Choice, "routed_experts", Holds::Rows(RowsKind::Inline)) => {
            let rows = |data: &str, n: u64| json!({"data": data, "shape": [n, 1, 3], "start": 0, "dtype": "uint8"});
            (
                json!({"choices": [{"routed_experts": rows("AQID", 1)}]}),
                json!({"choices": [{"routed_experts": rows("AAAABAUG", 2)}]}),
                json!({"choices": [{"routed_experts": rows("AQIDBAUG", 2)}]}),
            )
        }
        (Holder::Choice, "payload", Holds::Rows(RowsKind::ByHandle)) => {
            let segment = |file: &str, pos: u64, rows: u64| {
                json!({"field": "routed_experts", "file": file, "offset": 0, "pos": pos,
                    "rows": rows, "dtype": "uint8", "shape": [1]})
            };
            (
                json!({"choices": [{"payload": [segment("p", 0, 2)]}]}),
                json!({"choices": [{"payload": [segment("d", 2, 3)]}]}),
                json!({"choices": [{"payload": [segment("p", 0, 2), segment("d", 2, 3)]}]}),
            )
        }
        (Holder::Member("meta_info"), "routed_experts", Holds::Rows(RowsKind::Sglang)) => {
            let output = |completion: u64, rows: &Value| {
                json!({"meta_info": {"prompt_tokens": 2, "completion_tokens": completion,
                    "routed_experts": rows}})
            };
            (
                output(1, &sglang_prefill),
                output(3, &sglang_decode),
                output(3, &sglang_merged),
            )
        }
        (Holder::Member("sglext"), "routed_experts", Holds::Rows(RowsKind::Sglang)) => {
            let response = |completion: u64, rows: &Value| {
                json!({"choices": [{"index": 0}], "usage": usage(completion),
                    "sglext": {"routed_experts": rows}})
            };
            (
                response(1, &sglang_prefill),
                response(3, &sglang_decode),
                response(3, &sglang_merged),
            )
        }
        (Holder::ChoiceMember("sgl_ext"), "routed_experts", Holds::Rows(RowsKind::Sglang)) => {
            let response = |completion: u64, rows: &Value| {
                json!({"choices": [{"index": 0, "sgl_ext": {"routed_experts": rows}}],
                    "usage": usage(completion)})
            };
            (
                response(1, &sglang_prefill),
                response(3, &sglang_decode),
                response(3, &sglang_merged),
            )
        }
        (Holder::Member("nvext"), "routed_experts", Holds::Rows(RowsKind::Inline)) => {
            // Dynamo's decode answers from 0: its first row is not the one
            // a stitched response holds.
            let response = |data: &str, n: u64| {
                json!({"choices": [{"index": 0, "text": "t"}],
                    "nvext": {"routed_experts": {"data": data, "shape": [n, 1, 3], "start": 0, "dtype": "uint8"}}})
            };
            (
                response("AQID", 1),
                response("AAAABAUG", 2),
                response("AQIDBAUG", 2),
            )
        }
        _ => panic!("{place:?}: a place of the table without a pair in tests/it/places.rs"),
    }
}

#[test]
fn every_place_of_the_table_is_merged_by_both_paths_and_the_stream() {
    let stitcher = Stitcher::new().row_shape(1, 1);
    let mut walked = 0;
    for place in places::all().filter(|p| matches!(p.holds, Holds::Rows(_))) {
        let (prefill, decode, merged) = pair(place);
        // A router asks first whether the prefill has rows to stitch.
        let prefill_bytes = serde_json::to_vec(&prefill).unwrap();
        assert!(stitcher.prefill_has_routed_experts(&prefill), "{place:?}");
        assert!(pd_stitch::prefill_has_routed_experts(&prefill), "{place:?}");
        assert_eq!(
            stitcher.prefill_bytes_has_routed_experts(&prefill_bytes),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(
            pd_stitch::bytes::prefill_has_routed_experts(&prefill_bytes),
            Ok(true),
            "{place:?}"
        );
        // The `Value` path.
        let mut by_value = decode.clone();
        assert_eq!(
            stitcher.merge(&prefill, &mut by_value, Stitch::ForPd),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(by_value, merged, "{place:?}");
        // The bytes path, whose scanner must record the place.
        let mut by_bytes = serde_json::to_vec(&decode).unwrap();
        assert_eq!(
            stitcher.merge_bytes(&prefill_bytes, &mut by_bytes, Stitch::ForPd),
            Ok(true),
            "{place:?}"
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&by_bytes).unwrap(),
            merged,
            "{place:?}"
        );
        // The stream, whose prefilter and slots must find it.
        let event = [
            b"data: ",
            &serde_json::to_vec(&decode).unwrap()[..],
            b"\n\n",
        ]
        .concat();
        let mut stream = StreamStitcher::new(stitcher.clone(), prefill_bytes).unwrap();
        let mut out = Vec::new();
        stream.feed(&event, &mut out).unwrap();
        stream.finish(&mut out).unwrap();
        assert_eq!(
            out,
            [b"data: ", &by_bytes[..], b"\n\n"].concat(),
            "{place:?}"
        );
        // The verifiers read inline rows wherever the table puts them.
        if place.holds == Holds::Rows(RowsKind::Inline) {
            use pd_stitch::compare::{compare, Options};
            use pd_stitch::gather::Store;
            let store = Store::memory();
            let report = compare(&merged, &store, &decode, &store, &Options::default())
                .unwrap_or_else(|e| panic!("{place:?}: compare read no rows: {e}"));
            assert_eq!(
                (report.choices[0].compared, report.choices[0].equal_rows),
                (2, 1),
                "{place:?}: compare read the merged and the decode's rows"
            );
            let check = pd_stitch::gather::check_from(&merged, &store);
            assert_eq!(check.fields.len(), 1, "{place:?}: check read the rows");
        }
        walked += 1;
    }
    assert_eq!(walked, 6);
}
