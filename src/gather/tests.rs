//! Unit tests of reading, checking and the coverage helper, on memory and
//! directory stores.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use serde_json::{json, Value};

use super::read::coverage;
use super::*;
use crate::algebra::{Dtype, Rows};
use crate::codec::Form;
use crate::response::fields::ROUTED_EXPERTS;

/// A `uint8` segment of `field` whose rows are `width` bytes wide.
fn segment(field: &str, file: &str, offset: u64, pos: u64, rows: u64, width: u64) -> Value {
    json!({"field": field, "file": file, "offset": offset, "pos": pos, "rows": rows,
           "dtype": "uint8", "shape": [width]})
}

fn one_choice(payload: Vec<Value>) -> Value {
    json!({"choices": [{"payload": payload}]})
}

/// A memory store whose file `name` holds the bytes `0, 1, 2, ...`.
fn counting_store(name: &str, len: u8) -> Store {
    let mut store = Store::memory();
    store.write(name, (0..len).collect()).unwrap();
    store
}

/// A fresh directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pd-stitch-gather-unit-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Two segments listed against position order: the rows come back in
/// position order, and `row(x)` is the row of position `x` (row bytes =
/// data length / positions), `None` outside `[5, 8)`.
#[test]
fn rows_come_back_in_position_order_and_answer_by_position() {
    let response = one_choice(vec![
        segment(ROUTED_EXPERTS, "a.bin", 0, 7, 1, 2),
        json!({"field": "sampling_mask", "file": "m.bin"}),
        segment(ROUTED_EXPERTS, "a.bin", 10, 5, 2, 2),
    ]);
    let rows = gather_from(&response, 0, ROUTED_EXPERTS, &counting_store("a.bin", 20)).unwrap();
    assert_eq!(rows.positions(), Rows::new(5, 8).unwrap());
    assert_eq!(rows.dtype(), Dtype::Uint8);
    assert_eq!(rows.row_shape(), [2]);
    assert_eq!(rows.shape(), [3, 2]);
    assert_eq!(rows.source(), Source::Files);
    assert_eq!(rows.data(), [10, 11, 12, 13, 0, 1]);
    assert_eq!(rows.row(5), Some(&[10, 11][..]));
    assert_eq!(rows.row(6), Some(&[12, 13][..]));
    assert_eq!(rows.row(7), Some(&[0, 1][..]));
    for outside in [0, 4, 8, u64::MAX] {
        assert_eq!(rows.row(outside), None, "position {outside}");
    }
}

/// The FNV-1a 64 test vectors of its specification: the empty input,
/// `a`, `foobar`.
#[test]
fn checksum_is_fnv_1a_64() {
    let mut store = Store::memory();
    store.write("t.bin", b"foobar".to_vec()).unwrap();
    let checksum = |offset: u64, rows: u64| {
        let response = one_choice(vec![segment(ROUTED_EXPERTS, "t.bin", offset, 0, rows, 1)]);
        gather_from(&response, 0, ROUTED_EXPERTS, &store)
            .unwrap()
            .checksum()
    };
    assert_eq!(checksum(0, 0), 0xcbf2_9ce4_8422_2325);
    assert_eq!(checksum(4, 1), 0xaf63_dc4c_8601_ec8c); // "a", the fifth byte
    assert_eq!(checksum(0, 6), 0x8594_4171_f739_67e8); // "foobar"
}

/// A file must hold every byte of a segment: one byte short is a
/// `ShortFile` error, the exact length or more is read.
#[test]
fn a_file_one_byte_short_is_refused_in_memory_and_on_disk() {
    let dir = scratch("short");
    for len in [5u8, 6, 7] {
        let mut memory = counting_store("s.bin", len);
        let mut disk = Store::Dir(dir.clone());
        disk.write("s.bin", (0..len).collect()).unwrap();
        // Bytes [2, 6): 2 rows of 2 bytes from offset 2.
        let response = one_choice(vec![segment(ROUTED_EXPERTS, "s.bin", 2, 0, 2, 2)]);
        for store in [&mut memory, &mut disk] {
            let got = gather_from(&response, 0, ROUTED_EXPERTS, store);
            if len < 6 {
                assert!(
                    matches!(
                        got,
                        Err(GatherError::ShortFile {
                            needed: 6,
                            len: 5,
                            ..
                        })
                    ),
                    "{got:?}"
                );
            } else {
                assert_eq!(got.unwrap().data(), [2, 3, 4, 5], "len {len}");
            }
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// Empty segments hold no position: wherever they sit, and whatever file
/// they name, they make no gap, no overlap and no read.
#[test]
fn empty_segments_are_left_out() {
    let response = one_choice(vec![
        segment(ROUTED_EXPERTS, "a.bin", 4, 0, 2, 2),
        segment(ROUTED_EXPERTS, "nowhere.bin", 0, 1, 0, 2),
        segment(ROUTED_EXPERTS, "nowhere.bin", 0, 9, 0, 2),
    ]);
    let rows = gather_from(&response, 0, ROUTED_EXPERTS, &counting_store("a.bin", 8)).unwrap();
    assert_eq!(rows.positions(), Rows::new(0, 2).unwrap());
    assert_eq!(rows.data(), [4, 5, 6, 7]);
}

/// Inline rows stand for the field `routed_experts` only, and only when
/// not null.
#[test]
fn inline_rows_are_gathered_for_routed_experts_only() {
    // Compact rows of [1, 2, 3, 4]: 2 positions from 3, 1 x 2 per row.
    let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
    let response = json!({"choices": [{"routed_experts": compact}]});
    let rows = gather_from(&response, 0, ROUTED_EXPERTS, &Store::memory()).unwrap();
    assert_eq!(rows.source(), Source::Inline(Form::Compact));
    assert_eq!(rows.positions(), Rows::new(3, 5).unwrap());
    assert_eq!(rows.row_shape(), [1, 2]);
    assert_eq!(rows.row(4), Some(&[3, 4][..]));
    let other = gather_from(&response, 0, "sampling_mask", &Store::memory());
    assert!(
        matches!(&other, Err(GatherError::NoRows { choice: 0, field }) if field == "sampling_mask"),
        "{other:?}"
    );
    let null = json!({"choices": [{"routed_experts": null}]});
    let none = gather_from(&null, 0, ROUTED_EXPERTS, &Store::memory());
    assert!(matches!(none, Err(GatherError::NoRows { .. })), "{none:?}");
}

/// A choice that is not there, or not an object, is a structure error at
/// the choice, as `gather_from` says it, not "no rows": `pd_stitch.gather`
/// reads rows through `choice_rows` and said `NoRows` for `{"choices": []}`.
/// A response without `choices` (SGLang's) has no choice to be missing.
#[test]
fn choice_rows_names_a_missing_choice_as_gather_from_does() {
    let store = Store::memory();
    for response in [
        json!({"choices": []}),
        json!({"choices": [3]}),
        json!({"choices": {}}),
    ] {
        let want = gather_from(&response, 0, ROUTED_EXPERTS, &store).unwrap_err();
        let got = choice_rows(&response, 0, &store, None).unwrap_err();
        assert_eq!(got.to_string(), want.to_string(), "{response}");
        let GatherError::Response(error) = &got else {
            panic!("{response}: {got}");
        };
        assert_eq!(error.kind(), crate::ErrorKind::Structure, "{response}");
    }
    let none = choice_rows(&json!({"meta_info": {}}), 0, &store, None).unwrap_err();
    assert!(matches!(none, GatherError::NoRows { .. }), "{none}");
}

/// `choice_rows` reads every kind wherever the table puts it: segments
/// through the store, a choice's inline rows, the response's inline rows
/// (Dynamo's `nvext`) for its first choice only, SGLang's rows with the
/// row shape and refused without it, and says when there are none.
#[test]
fn choice_rows_reads_every_kind_at_its_place() {
    let store = counting_store("a.bin", 20);
    let by_handle = one_choice(vec![segment(ROUTED_EXPERTS, "a.bin", 2, 5, 3, 2)]);
    let rows = choice_rows(&by_handle, 0, &store, None).unwrap();
    assert_eq!(
        (rows.source(), rows.positions()),
        (Source::Files, Rows::new(5, 8).unwrap())
    );
    assert_eq!(rows.data(), [2, 3, 4, 5, 6, 7]);
    let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
    let inline = json!({"choices": [{"routed_experts": compact}]});
    let rows = choice_rows(&inline, 0, &store, None).unwrap();
    assert_eq!(rows.source(), Source::Inline(Form::Compact));
    assert_eq!(
        (rows.positions(), rows.data()),
        (Rows::new(3, 5).unwrap(), &[1, 2, 3, 4][..])
    );
    let nvext =
        json!({"choices": [{"index": 0}, {"index": 1}], "nvext": {"routed_experts": compact}});
    assert_eq!(
        choice_rows(&nvext, 0, &store, None).unwrap().data(),
        [1, 2, 3, 4]
    );
    assert!(matches!(
        choice_rows(&nvext, 1, &store, None),
        Err(GatherError::NoRows { choice: 1, .. })
    ));
    // 2 prompt tokens, 3 generated, ids 1..=4: rows [0, 4) of 1 x 1.
    let sglang = json!({"choices": [{"index": 0}], "usage": {"prompt_tokens": 2, "completion_tokens": 3},
        "sglext": {"routed_experts": "AQAAAAIAAAADAAAABAAAAA=="}});
    let rows = choice_rows(&sglang, 0, &store, Some((1, 1))).unwrap();
    assert_eq!(
        (rows.source(), rows.positions()),
        (Source::Sglang, Rows::new(0, 4).unwrap())
    );
    let err = choice_rows(&sglang, 0, &store, None).unwrap_err();
    assert!(
        matches!(err, GatherError::RowShapeNeeded { item: 0 }),
        "{err}"
    );
    let batch = json!([{"meta_info": {}}, {"meta_info": {"routed_experts": "AAAAAA=="}}]);
    let err = choice_rows(&batch, 1, &store, None).unwrap_err();
    assert!(
        matches!(err, GatherError::RowShapeNeeded { item: 1 }),
        "{err}"
    );
    let none = choice_rows(
        &json!({"choices": [{"text": "a"}]}),
        0,
        &store,
        Some((1, 1)),
    );
    assert!(matches!(none, Err(GatherError::NoRows { .. })), "{none:?}");
    // Bad rows are named at their own place.
    let bad = json!({"choices": [{}], "nvext": {"routed_experts": {"data": 3}}});
    let err = choice_rows(&bad, 0, &store, None).unwrap_err();
    assert_eq!(
        err.location().unwrap().to_string(),
        "response nvext.routed_experts.data"
    );
}

/// `check` of one choice whose files are written to a scratch directory.
fn check_one(name: &str, payload: Vec<Value>, files: &[(&str, u8)]) -> FieldReport {
    let dir = scratch(name);
    let mut store = Store::Dir(dir.clone());
    for &(file, len) in files {
        store.write(file, (0..len).collect()).unwrap();
    }
    let report = check(&one_choice(payload), &dir);
    std::fs::remove_dir_all(dir).unwrap();
    assert!(report.problems.is_empty(), "{report}");
    assert_eq!(report.fields.len(), 1, "{report}");
    report.fields.into_iter().next().unwrap()
}

/// Segments in payload order against position order are a problem;
/// an empty segment anywhere is not (it adds no row to concatenate), and
/// it counts as a segment but covers nothing. Payload order is not a
/// problem: the trainer writes each segment at its positions.
#[test]
fn check_counts_segments_and_accepts_any_payload_order() {
    let reversed = check_one(
        "order",
        vec![
            segment(ROUTED_EXPERTS, "a.bin", 4, 2, 2, 2),
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 2),
        ],
        &[("a.bin", 8)],
    );
    assert_eq!(reversed.segments, 2);
    assert_eq!(reversed.coverage, [Rows::new(0, 4).unwrap()]);
    assert!(reversed.gaps.is_empty() && reversed.overlaps.is_empty());
    assert!(reversed.problems.is_empty(), "{:?}", reversed.problems);
    let with_empty = check_one(
        "order-empty",
        vec![
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 2),
            segment(ROUTED_EXPERTS, "a.bin", 0, 9, 0, 2),
            segment(ROUTED_EXPERTS, "a.bin", 4, 2, 2, 2),
        ],
        &[("a.bin", 8)],
    );
    assert_eq!(with_empty.segments, 3);
    assert_eq!(with_empty.coverage, [Rows::new(0, 4).unwrap()]);
    assert!(with_empty.gaps.is_empty() && with_empty.overlaps.is_empty());
    assert!(with_empty.problems.is_empty(), "{:?}", with_empty.problems);
}

/// Two segments that start at the same position overlap: reported as the
/// positions covered twice, not as a problem (the later segment wins, as a
/// re-emitting writer means); a gap inside the covered range is one.
#[test]
fn check_reports_an_overlap_as_later_wins_and_a_gap_as_a_problem() {
    let field = check_one(
        "same-pos",
        vec![
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 1),
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 1, 1),
        ],
        &[("a.bin", 2)],
    );
    assert_eq!(field.overlaps, [Rows::new(0, 1).unwrap()]);
    assert!(field.problems.is_empty(), "{:?}", field.problems);
    let gap = check_one(
        "gap",
        vec![
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 1, 1),
            segment(ROUTED_EXPERTS, "a.bin", 1, 2, 1, 1),
        ],
        &[("a.bin", 2)],
    );
    assert_eq!(
        gap.problems,
        ["choices[0] routed_experts: gaps at [1, 2) (the trainer reads the fill there)"]
    );
}

/// A file must be at least as long as a segment's last byte.
#[test]
fn check_compares_each_file_with_the_bytes_its_segments_need() {
    // Bytes [2, 6) of each file.
    let payload: Vec<Value> = ["short.bin", "exact.bin", "long.bin"]
        .iter()
        .zip([0, 2, 4])
        .map(|(file, pos)| segment(ROUTED_EXPERTS, file, 2, pos, 2, 2))
        .collect();
    let field = check_one(
        "lengths",
        payload,
        &[("short.bin", 5), ("exact.bin", 6), ("long.bin", 7)],
    );
    assert_eq!(field.problems.len(), 1, "{:?}", field.problems);
    let problem = &field.problems[0];
    assert!(
        problem.starts_with("response choices[0].payload[0]: file ")
            && problem.ends_with("short.bin is 5 bytes long, but the segment needs bytes up to 6"),
        "{problem}"
    );
}

/// Inline rows: one segment covering `[start, start + seq)`; null rows
/// are no rows.
#[test]
fn check_reports_inline_rows_and_ignores_null_ones() {
    let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
    let report = check(
        &json!({"choices": [{"routed_experts": compact}]}),
        Path::new("."),
    );
    assert!(report.is_ok(), "{report}");
    let [field] = &report.fields[..] else {
        panic!("{report}");
    };
    assert_eq!(field.field, "routed_experts (inline compact)");
    assert_eq!(field.segments, 1);
    assert_eq!(field.coverage, [Rows::new(3, 5).unwrap()]);
    assert_eq!(field.dtype, Some(Dtype::Uint8));
    assert_eq!(field.shape, Some(vec![1, 2]));
    let null = check(
        &json!({"choices": [{"routed_experts": null}]}),
        Path::new("."),
    );
    assert!(null.is_ok() && null.fields.is_empty(), "{null}");
}

/// Bad rows the response holds (Dynamo's `nvext.routed_experts`) are
/// reported at their own place: `inline::read_rows` built every location
/// as a choice's `routed_experts`, so `check` and `gather` named
/// `choices[0].routed_experts.data`, where the rows are not.
#[test]
fn bad_rows_the_response_holds_are_reported_at_their_place() {
    let bad = json!({"choices": [{"index": 0}],
        "nvext": {"routed_experts": {"data": "A!==", "shape": [1, 1, 3], "start": 0}}});
    let report = check_from(&bad, &Store::memory());
    let [field] = &report.fields[..] else {
        panic!("{report}");
    };
    assert_eq!(
        field.problems,
        ["response nvext.routed_experts.data: invalid base64: character '!' at 1 is not in the standard alphabet"]
    );
    let err = gather_from(&bad, 0, ROUTED_EXPERTS, &Store::memory()).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("response nvext.routed_experts.data: "),
        "{err}"
    );
}

/// Runs of consecutive positions of `set`, as intervals.
fn runs(set: impl Iterator<Item = u64>) -> Vec<Rows> {
    let mut out: Vec<Rows> = Vec::new();
    for x in set {
        match out.last_mut() {
            Some(last) if last.end() == x => *last = Rows::new(last.start(), x + 1).unwrap(),
            _ => out.push(Rows::new(x, x + 1).unwrap()),
        }
    }
    out
}

proptest! {
    /// `coverage` against a count per position: the union is the runs of
    /// positions covered at least once, the overlaps those covered at
    /// least twice, the gaps those between the first and the last
    /// covered that nothing covers. Empty intervals count for nothing.
    #[test]
    fn coverage_agrees_with_counting_each_position(
        intervals in prop::collection::vec((0u64..12, 0u64..5), 0..6),
    ) {
        let mut count = [0u32; 16];
        for &(start, len) in &intervals {
            for x in start..start + len {
                count[x as usize] += 1;
            }
        }
        let covered = |least: u32| (0..16u64).filter(move |&x| count[x as usize] >= least);
        let union = runs(covered(1));
        let gaps = match (covered(1).next(), covered(1).next_back()) {
            (Some(first), Some(last)) => {
                runs((first..=last).filter(|&x| count[x as usize] == 0))
            }
            _ => Vec::new(),
        };
        let rows = intervals.iter().map(|&(start, len)| Rows::with_len(start, len).unwrap());
        let got = coverage(rows);
        prop_assert_eq!(got, (union, gaps, runs(covered(2))));
    }
}

/// `check` holds segments to the same layout rule as strict merges: a uint8
/// prompt with a uint16 completion is fine (the dtype column says `mixed`),
/// so is a signed integer among them (read as int32 by value), a float
/// among integers is a problem naming both payload indices, and so is a
/// dtype NumPy cannot name.
#[test]
fn check_uses_the_layout_rule_for_dtypes() {
    let dir = scratch("dtypes");
    Store::Dir(dir.clone())
        .write("a.bin", (0..8).collect())
        .unwrap();
    let routed = |dtype: &str| {
        let mut second = segment(ROUTED_EXPERTS, "a.bin", 2, 1, 1, 2);
        second["dtype"] = json!(dtype);
        let payload = vec![
            segment("sampling_mask", "a.bin", 0, 0, 1, 1),
            segment(ROUTED_EXPERTS, "a.bin", 0, 0, 1, 2),
            second,
        ];
        let report = check(&one_choice(payload), &dir);
        report
            .fields
            .into_iter()
            .find(|f| f.field == ROUTED_EXPERTS)
            .unwrap()
    };
    let mixed = routed("uint16");
    assert!(mixed.problems.is_empty(), "{:?}", mixed.problems);
    assert_eq!(mixed.dtype, None);
    let signed = routed("int8");
    assert!(signed.problems.is_empty(), "{:?}", signed.problems);
    let float = routed("float16");
    let bf = routed("bfloat16");
    std::fs::remove_dir_all(dir).unwrap();
    assert_eq!(
        float.problems,
        ["choices[0] routed_experts: as the trainer reads it (segments by payload index), segment 2 has dtype float16 but segment 1 has uint8: the trainer reads it cast to int32"]
    );
    assert_eq!(
        bf.problems,
        ["choices[0] routed_experts: as the trainer reads it (segments by payload index), segment 2 has dtype bfloat16, which the trainer's NumPy cannot read"]
    );
}

/// Unsigned integers of different widths (a uint8 prompt, a uint16
/// completion) are gathered as the widest, values kept; a signed or float
/// segment among them is still refused.
#[test]
fn mixed_unsigned_widths_are_gathered_as_the_widest() {
    let mut store = Store::memory();
    store.write("p.bin", vec![1, 2, 3, 4]).unwrap();
    store
        .write(
            "d.bin",
            [500u16, 600].iter().flat_map(|v| v.to_le_bytes()).collect(),
        )
        .unwrap();
    let seg = |file: &str, pos: u64, rows: u64, dtype: &str| {
        json!({"field": ROUTED_EXPERTS, "file": file, "offset": 0, "pos": pos, "rows": rows,
               "dtype": dtype, "shape": [2]})
    };
    // Listed against position order, to show the widening follows each segment.
    let response = one_choice(vec![
        seg("d.bin", 2, 1, "uint16"),
        seg("p.bin", 0, 2, "uint8"),
    ]);
    let rows = gather_from(&response, 0, ROUTED_EXPERTS, &store).unwrap();
    assert_eq!(rows.dtype(), Dtype::Uint16);
    assert_eq!(rows.shape(), [3, 2]);
    assert_eq!(rows.data(), [1, 0, 2, 0, 3, 0, 4, 0, 244, 1, 88, 2]);

    let signed = one_choice(vec![
        seg("p.bin", 0, 2, "uint8"),
        seg("d.bin", 2, 1, "int16"),
    ]);
    match gather_from(&signed, 0, ROUTED_EXPERTS, &store) {
        Err(GatherError::Inconsistent {
            what: "dtype",
            first: 0,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
}

// SGLang's rows in `check_with` (SPEC section 10): placed by the counts with
// the row shape.

/// The base64 of `n` int32 ids.
fn sglang_ids(n: usize) -> String {
    let bytes: Vec<u8> = (0..n as i32).flat_map(i32::to_le_bytes).collect();
    crate::format::inline::encode_base64(&bytes)
}

fn generate(prompt: u64, completion: u64, ids: usize) -> Value {
    json!({"text": "", "meta_info": {"prompt_tokens": prompt, "completion_tokens": completion,
        "routed_experts": sglang_ids(ids)}})
}

#[test]
fn check_with_places_sglang_rows_by_the_counts() {
    let store = Store::memory();
    // 5 prompt tokens, 4 generated: rows end at 8. 2 x 3 ids a row.
    for (rows, start) in [(8, 0), (5, 3), (4, 4), (3, 5)] {
        let report = check_with(&generate(5, 4, rows * 6), &store, Some((2, 3)));
        assert!(report.is_ok(), "{rows}: {report}");
        let [line] = report.fields.as_slice() else {
            panic!("one line: {report}")
        };
        assert_eq!(line.coverage, vec![Rows::new(start, 8).unwrap()], "{rows}");
        assert_eq!((line.choice, line.segments), (0, 1));
        assert_eq!(line.field, "routed_experts (sglang)");
        assert_eq!(line.dtype, Some(Dtype::Int32));
        assert_eq!(line.shape, Some(vec![2, 3]));
    }
    // Rows before 0 are past the prompt's start.
    let report = check_with(&generate(5, 4, 9 * 6), &store, Some((2, 3)));
    assert!(
        report.fields[0].problems[0].contains("would start outside [0, 5]"),
        "{report}"
    );
    assert!(report.fields[0].coverage.is_empty());
    // Not whole rows, not base64, counts missing: each a problem of its line.
    let report = check_with(&generate(5, 4, 7), &store, Some((2, 3)));
    assert!(report.fields[0].problems[0].contains("whole"), "{report}");
    let mut bad = generate(5, 4, 6);
    bad["meta_info"]["routed_experts"] = json!("AQ=");
    assert!(!check_with(&bad, &store, Some((2, 3))).is_ok());
    let mut uncounted = generate(5, 4, 6);
    uncounted["meta_info"]
        .as_object_mut()
        .unwrap()
        .remove("completion_tokens");
    let report = check_with(&uncounted, &store, Some((2, 3)));
    assert_eq!(report.fields[0].problems.len(), 1, "{report}");
    assert!(
        report.fields[0].problems[0].contains("completion_tokens"),
        "{report}"
    );
}

#[test]
fn check_with_reads_every_item_of_a_batch_and_says_when_it_cannot_place_them() {
    let store = Store::memory();
    let batch = json!([generate(2, 2, 3), {"text": "no rows", "meta_info": {}}, generate(3, 1, 2)]);
    let report = check_with(&batch, &store, Some((1, 1)));
    assert!(report.is_ok(), "{report}");
    let lines: Vec<(usize, Vec<Rows>)> = report
        .fields
        .iter()
        .map(|f| (f.choice, f.coverage.clone()))
        .collect();
    assert_eq!(
        lines,
        vec![
            (0, vec![Rows::new(0, 3).unwrap()]),
            (2, vec![Rows::new(1, 3).unwrap()])
        ]
    );
    // Without the row shape: one problem per item with rows, naming it.
    let report = check_with(&batch, &store, None);
    assert_eq!(report.problems.len(), 2, "{report}");
    assert!(
        report.problems[0].starts_with("response [0].meta_info.routed_experts"),
        "{report}"
    );
    assert!(
        report.problems[1].starts_with("response [2].meta_info.routed_experts"),
        "{report}"
    );
    // No SGLang rows and no choices: the vLLM check's own complaint.
    let report = check_with(&json!({"meta_info": {}}), &store, Some((1, 1)));
    assert!(report.problems[0].contains("choices"), "{report}");
    // An empty prefill's rows (start == prompt) cover nothing and are fine.
    let report = check_with(&generate(3, 1, 0), &store, Some((1, 1)));
    assert!(
        report.is_ok() && report.fields[0].coverage.is_empty(),
        "{report}"
    );
}

#[test]
fn check_with_reads_openai_rows_beside_the_choices() {
    let store = Store::memory();
    let chat = json!({"choices": [{"index": 0, "message": {"content": "x"}}],
        "usage": {"prompt_tokens": 2, "completion_tokens": 2},
        "sglext": {"routed_experts": sglang_ids(3)}});
    let report = check_with(&chat, &store, Some((1, 1)));
    assert!(report.is_ok(), "{report}");
    assert_eq!(report.fields.len(), 1);
    assert_eq!(report.fields[0].coverage, vec![Rows::new(0, 3).unwrap()]);
    // The same without the row shape: the choices still checked, the rows not placed.
    let report = check_with(&chat, &store, None);
    assert_eq!(report.problems.len(), 1, "{report}");
    assert!(
        report.problems[0].starts_with("response sglext.routed_experts"),
        "{report}"
    );
}

/// CSR fields: `check` reads each segment's offsets and flags offsets out of
/// order, a row that is not a whole number of values, and an offset past the
/// file; the writer's layout passes.
#[test]
fn check_reads_csr_offsets_and_flags_what_the_trainer_misreads() {
    let csr = |name: &str, starts: &[u32], len: usize| -> FieldReport {
        let mut bytes: Vec<u8> = starts.iter().flat_map(|s| s.to_le_bytes()).collect();
        bytes.resize(len, 0);
        let rows = starts.len() as u64 - 1;
        let seg = json!({"field": "sampling_mask", "file": "m.bin", "offset": 0, "pos": 3,
                         "rows": rows, "dtype": "uint32", "shape": []});
        let mut store = Store::memory();
        store.write("m.bin", bytes).unwrap();
        let report = check_from(&one_choice(vec![seg]), &store);
        let _ = name;
        report.fields.into_iter().next().unwrap()
    };
    let good = csr("good", &[12, 16, 24], 24);
    assert!(good.problems.is_empty(), "{:?}", good.problems);
    let back = csr("back", &[12, 20, 16], 24);
    assert!(
        back.problems[0].contains("out of order"),
        "{:?}",
        back.problems
    );
    let odd = csr("odd", &[12, 14, 24], 24);
    assert!(
        odd.problems[0].contains("whole number"),
        "{:?}",
        odd.problems
    );
    let past = csr("past", &[12, 16, 40], 24);
    assert!(
        past.problems[0].contains("past the end"),
        "{:?}",
        past.problems
    );
    let short = csr("short", &[12, 16, 24], 8);
    assert!(
        short.problems[0].contains("CSR offsets need"),
        "{:?}",
        short.problems
    );
}

fn int32s(reading: &crate::reading::Reading) -> Vec<i32> {
    reading
        .data()
        .chunks(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

/// `read_choice_field` reads the field's own segments (not another field's)
/// each from its own file, later segments winning, the fill where none
/// covers; a window no segment reaches (so nothing to read from any file)
/// is the fill throughout. Expected values by hand.
#[test]
fn read_choice_field_reads_each_segment_from_its_own_file() {
    let mut store = Store::memory();
    store.write("a.bin", vec![10, 11, 12]).unwrap();
    store.write("b.bin", vec![20, 21, 22]).unwrap();
    store
        .write("w.bin", 0.5f32.to_le_bytes().repeat(4))
        .unwrap();
    let response = one_choice(vec![
        json!({"field": ROUTED_EXPERTS, "file": "a.bin", "offset": 0, "pos": 0, "rows": 3,
               "dtype": "uint8", "shape": []}),
        json!({"field": "routed_expert_weights", "file": "w.bin", "offset": 0, "pos": 0,
               "rows": 4, "dtype": "float32", "shape": []}),
        json!({"field": ROUTED_EXPERTS, "file": "b.bin", "offset": 1, "pos": 2, "rows": 2,
               "dtype": "uint8", "shape": []}),
    ]);
    let r = read_choice_field(&response, 0, ROUTED_EXPERTS, 0, 5, &store)
        .unwrap()
        .unwrap();
    assert_eq!(r.values(), crate::reading::Values::Int32);
    assert_eq!(r.shape(), [5]);
    assert_eq!(int32s(&r), [10, 11, 21, 22, 0]);
    // Positions [7, 9): no segment reaches them, no byte is read.
    let outside = read_choice_field(&response, 0, ROUTED_EXPERTS, 7, 9, &store)
        .unwrap()
        .unwrap();
    assert_eq!(outside.shape(), [2]);
    assert_eq!(int32s(&outside), [0, 0]);
    // A CSR field whose only segment lies outside the window: its offsets
    // are read, its values are not (none in the window), the fill -1.
    store
        .write(
            "m.bin",
            [8u32, 12, 7].iter().flat_map(|x| x.to_le_bytes()).collect(),
        )
        .unwrap();
    let masked = one_choice(vec![
        json!({"field": "sampling_mask", "file": "m.bin", "offset": 0,
        "pos": 0, "rows": 1, "dtype": "uint32", "shape": []}),
    ]);
    let mask = read_choice_field(&masked, 0, "sampling_mask", 3, 5, &store)
        .unwrap()
        .unwrap();
    assert_eq!(mask.shape(), [2, 1]);
    assert_eq!(int32s(&mask), [-1, -1]);
    assert_eq!(
        int32s(
            &read_choice_field(&masked, 0, "sampling_mask", 0, 1, &store)
                .unwrap()
                .unwrap()
        ),
        [7]
    );
}

/// Segments over more files than one thread reads: every answer is its own
/// segment's, in payload order, whichever thread read it.
#[test]
fn read_field_over_many_files_answers_each_segment_in_order() {
    let mut store = Store::memory();
    let mut payload = Vec::new();
    for k in 0..9u8 {
        let name = format!("f{k}.bin");
        store.write(&name, vec![k, 100 + k]).unwrap();
        payload.push(
            json!({"field": ROUTED_EXPERTS, "file": name, "offset": 1, "pos": k,
                            "rows": 1, "dtype": "uint8", "shape": []}),
        );
    }
    let r = read_choice_field(&one_choice(payload), 0, ROUTED_EXPERTS, 0, 9, &store)
        .unwrap()
        .unwrap();
    assert_eq!(int32s(&r), (100..109).collect::<Vec<i32>>());
}

/// Inline rows stand for `routed_experts` when the choice has no segment of
/// it and they are not null; another field without segments is `None`,
/// even beside inline rows.
#[test]
fn read_choice_field_reads_inline_rows_for_routed_experts_only() {
    // Compact rows [1, 2], [3, 4] at positions 3, 4.
    let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
    let response = json!({"choices": [{"routed_experts": compact}]});
    let store = Store::memory();
    let r = read_choice_field(&response, 0, ROUTED_EXPERTS, 2, 5, &store)
        .unwrap()
        .unwrap();
    assert_eq!(r.shape(), [3, 1, 2]);
    assert_eq!(int32s(&r), [0, 0, 1, 2, 3, 4]);
    let weights = read_choice_field(&response, 0, "routed_expert_weights", 2, 5, &store).unwrap();
    assert!(weights.is_none(), "{weights:?}");
    let null = json!({"choices": [{"routed_experts": null}]});
    assert!(read_choice_field(&null, 0, ROUTED_EXPERTS, 0, 2, &store)
        .unwrap()
        .is_none());
}

/// CSR offsets the trainer reads rightly although check's arithmetic
/// could slip: a table at an odd byte (values unaligned, a whole number of
/// values apart), and rows all empty with the file ending right after the
/// offsets.
#[test]
fn check_accepts_unaligned_csr_values_and_a_table_that_ends_the_file() {
    let one = |bytes: Vec<u8>, offset: u64, rows: u64| -> FieldReport {
        let seg = json!({"field": "sampling_mask", "file": "m.bin", "offset": offset, "pos": 3,
                         "rows": rows, "dtype": "uint32", "shape": []});
        let mut store = Store::memory();
        store.write("m.bin", bytes).unwrap();
        check_from(&one_choice(vec![seg]), &store)
            .fields
            .into_iter()
            .next()
            .unwrap()
    };
    // One byte of something else, then the offsets 13, 17, 25 and three
    // values: rows of 1 and 2 values starting at byte 13.
    let mut odd = vec![0xee];
    for x in [13u32, 17, 25] {
        odd.extend(x.to_le_bytes());
    }
    odd.extend([0u8; 12]);
    let report = one(odd, 1, 2);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    // Two empty rows: the offsets 12, 12, 12 and nothing after them.
    let empty: Vec<u8> = [12u32, 12, 12]
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    let report = one(empty, 0, 2);
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(report.coverage, vec![Rows::new(3, 5).unwrap()]);
}
