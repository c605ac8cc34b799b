//! Metadata cannot make the merge allocate or loop in proportion to its
//! values: row counts near 2^63, shapes of 2^40 x 2^40, and 10^5 segments go
//! through (or fail) in time bounded by the input's size, not the numbers in
//! it. Each test also bounds its own time.

use std::time::{Duration, Instant};

use pd_stitch::{merge_routed_experts_for_pd, ErrorKind};
use serde_json::{json, Value};

/// Runs `f`, asserting it took less than `limit` (generous: this is a bound on
/// runaway work, not a benchmark).
fn within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let started = Instant::now();
    let out = f();
    assert!(started.elapsed() < limit, "took {:?}", started.elapsed());
    out
}

fn seg(pos: u64, rows: u64, offset: u64, shape: Value) -> Value {
    json!({"field": "routed_experts", "file": "f", "offset": offset, "pos": pos, "rows": rows,
           "dtype": "uint8", "shape": shape})
}

#[test]
fn huge_row_counts_are_only_numbers() {
    // 2^62 rows of 2 bytes fit in u64; nothing is allocated per row.
    let prefill = json!({"choices": [{"payload": [seg(0, 1 << 62, 0, json!([2]))]}]});
    let mut decode =
        json!({"choices": [{"payload": [seg((1 << 62) - 1, 1 << 62, 0, json!([2]))]}]});
    let stitched = within(Duration::from_secs(1), || {
        merge_routed_experts_for_pd(&prefill, &mut decode)
    });
    assert_eq!(stitched, Ok(true));
    assert_eq!(
        decode["choices"][0]["payload"][1]["rows"],
        json!((1u64 << 62) - 1)
    );
    assert_eq!(decode["choices"][0]["payload"][1]["offset"], json!(2)); // one 2-byte row skipped
                                                                        // 2^63 rows of one byte at offset 2^63 - 1 just fit; one more byte does not.
    let prefill = json!({"choices": [{"payload": [seg(0, 1 << 63, (1 << 63) - 1, json!([]))]}]});
    assert_eq!(
        merge_routed_experts_for_pd(&prefill, &mut json!({"choices": []})),
        Ok(true)
    );
    let prefill = json!({"choices": [{"payload": [seg(0, 1 << 63, 1 << 63, json!([]))]}]});
    let err = merge_routed_experts_for_pd(&prefill, &mut json!({"choices": []})).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overflow, "{err}");
}

#[test]
fn huge_shapes_overflow_without_work() {
    let prefill =
        json!({"choices": [{"payload": [seg(0, 1, 0, json!([1u64 << 40, 1u64 << 40]))]}]});
    let err = within(Duration::from_secs(1), || {
        merge_routed_experts_for_pd(&prefill, &mut json!({"choices": []}))
    })
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Overflow, "{err}");
    // Zero rows of a huge shape are an empty segment, not an overflow... when the product fits.
    let prefill =
        json!({"choices": [{"payload": [seg(0, 0, 0, json!([1u64 << 30, 1u64 << 30]))]}]});
    assert_eq!(
        merge_routed_experts_for_pd(&prefill, &mut json!({"choices": []})),
        Ok(true)
    );
}

#[test]
fn inline_shapes_are_checked_against_the_data_before_anything_is_sized_by_them() {
    // Compact rows claiming 2^40 rows in 4 bytes of data.
    let prefill =
        json!({"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0}}]});
    let mut decode = json!({"choices": [{"routed_experts": {"data": "AQID", "shape": [1u64 << 40, 48, 8], "start": 0}}]});
    let err = within(Duration::from_secs(1), || {
        merge_routed_experts_for_pd(&prefill, &mut decode)
    })
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Length, "{err}");
    // A .npy header claiming 2^40 rows over 3 bytes of data.
    let dict = "{'descr': '|u1', 'fortran_order': False, 'shape': (1099511627776, 1, 3), }";
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend_from_slice(&(dict.len() as u16 + 1).to_le_bytes());
    file.extend_from_slice(dict.as_bytes());
    file.extend_from_slice(b"\n\x01\x02\x03");
    use base64::Engine;
    let text = base64::engine::general_purpose::STANDARD.encode(file);
    let prefill = json!({"choices": [{"routed_experts": text}]});
    let err = within(Duration::from_secs(1), || {
        merge_routed_experts_for_pd(&prefill, &mut json!({"choices": [{}]}))
    })
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Npy, "{err}");
    // A .npy header length field claiming 4 GiB of header in a 12-byte file.
    let file = b"\x93NUMPY\x02\x00\xff\xff\xff\xff";
    let text = base64::engine::general_purpose::STANDARD.encode(file);
    let prefill = json!({"choices": [{"routed_experts": text}]});
    let err = within(Duration::from_secs(1), || {
        merge_routed_experts_for_pd(&prefill, &mut json!({"choices": [{}]}))
    })
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Npy, "{err}");
}

#[test]
fn a_hundred_thousand_empty_segments_take_linear_time() {
    let empty: Vec<Value> = (0..100_000)
        .map(|i| seg(10 + i, 0, 0, json!([48, 8])))
        .collect();
    let prefill = json!({"choices": [{"payload": [seg(0, 10, 0, json!([48, 8]))]}]});
    let mut decode = json!({"choices": [{"payload": empty}]});
    let stitched = within(Duration::from_secs(30), || {
        merge_routed_experts_for_pd(&prefill, &mut decode)
    });
    assert_eq!(stitched, Ok(true));
    // The one at the cut is dropped; the 99,999 after it are kept.
    assert_eq!(
        decode["choices"][0]["payload"].as_array().unwrap().len(),
        1 + 99_999
    );
    // And as many on the prefill side, copied into each of 4 choices.
    let prefill = json!({"choices": [{"payload": (0..100_000).map(|i| seg(i, 0, 0, json!([1]))).collect::<Vec<_>>()}]});
    let mut decode = json!({"choices": [{}, {}, {}, {}]});
    within(Duration::from_secs(30), || {
        merge_routed_experts_for_pd(&prefill, &mut decode)
    })
    .unwrap();
    assert_eq!(
        decode["choices"][3]["payload"].as_array().unwrap().len(),
        100_000
    );
}

#[test]
fn a_shape_of_a_hundred_thousand_dimensions_is_one_pass() {
    let dims: Vec<u64> = vec![1; 100_000];
    let prefill = json!({"choices": [{"payload": [seg(0, 3, 0, json!(dims))]}]});
    let mut decode = json!({"choices": [{"payload": [seg(2, 3, 0, json!(dims))]}]});
    within(Duration::from_secs(30), || {
        merge_routed_experts_for_pd(&prefill, &mut decode)
    })
    .unwrap();
    assert_eq!(decode["choices"][0]["payload"][1]["offset"], 1);
}
