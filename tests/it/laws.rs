//! Property tests of the laws of `docs/SPEC.md` for the by-handle merge, over
//! two generators: a model of the real writer, and arbitrary layouts.
//!
//! Every check works on the JSON the merge produced and compares it with the
//! naive reference model in `support`: positions are expanded one by one and
//! rows are read back from an in-memory store whose bytes name their writer.

use crate::support::*;
use pd_stitch::Stitcher;
use proptest::prelude::*;
use serde_json::{json, Value};

const FIELDS: [&str; 2] = [RE, W];

fn stitcher() -> Stitcher {
    Stitcher::new().field(W)
}

/// A merged case: the prefill's `choices[0].payload`, and each decode choice's
/// payload before and after the merge.
struct Merged {
    prefill: Vec<Value>,
    before: Vec<Vec<Value>>,
    after: Vec<Vec<Value>>,
}

fn merge(pair: &Pair) -> Result<Merged, TestCaseError> {
    let prefill = pair.prefill_json();
    let before = pair.decode_json();
    let mut after = before.clone();
    let stitched = stitcher().merge(&prefill, &mut after, pd_stitch::Stitch::ByHandle);
    prop_assert_eq!(stitched, Ok(true), "generated pairs always stitch");
    let choices = |v: &Value| {
        v["choices"]
            .as_array()
            .unwrap()
            .iter()
            .map(payload)
            .collect()
    };
    Ok(Merged {
        prefill: payload(&prefill["choices"][0]),
        before: choices(&before),
        after: choices(&after),
    })
}

/// L1: the merged stitched segments of a field are pairwise disjoint (given
/// that each side's are, which both generators used with it guarantee).
fn l1(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    for (i, after) in m.after.iter().enumerate() {
        for field in FIELDS {
            for (x, segs) in coverage(after, field) {
                prop_assert!(
                    segs.len() == 1,
                    "choice {i} {field} position {x} covered by items {segs:?}"
                );
            }
        }
    }
    Ok(())
}

/// L2: coverage(merged, f) = coverage(prefill, f) ∪ (coverage(decode, f) ∩ [cut_f, ∞)).
fn l2(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    for (before, after) in m.before.iter().zip(&m.after) {
        for field in FIELDS {
            let mut expected = positions_of(&m.prefill, field);
            if let Some(cut) = naive_cut(&m.prefill, field) {
                expected.extend(
                    positions_of(before, field)
                        .into_iter()
                        .filter(|&x| x >= cut),
                );
            } else {
                prop_assert!(positions_of(before, field).is_empty());
            }
            prop_assert_eq!(positions_of(after, field), expected, "field {}", field);
        }
    }
    Ok(())
}

/// L3: for every position of the merged coverage, the merged output points at
/// the prefill's bytes when the prefill covers it, else at the decode's.
fn l3(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    let mut store = Store::default();
    store.write("prefill", &m.prefill, &FIELDS);
    for (i, before) in m.before.iter().enumerate() {
        store.write(&format!("decode choice {i}"), before, &FIELDS);
    }
    for (before, after) in m.before.iter().zip(&m.after) {
        for field in FIELDS {
            let from_prefill = coverage(&m.prefill, field);
            let from_decode = coverage(before, field);
            for (x, segs) in coverage(after, field) {
                let got = store.read(&after[segs[0]], x);
                let expected = match (from_prefill.get(&x), from_decode.get(&x)) {
                    (Some(p), _) => store.read(&m.prefill[p[0]], x),
                    (None, Some(d)) => store.read(&before[d[0]], x),
                    (None, None) => panic!("{field} position {x} covered by neither side"),
                };
                prop_assert!(
                    got.iter().all(Option::is_some),
                    "{} {} reads unwritten bytes",
                    field,
                    x
                );
                prop_assert_eq!(got, expected, "{} position {}", field, x);
            }
        }
    }
    Ok(())
}

/// L5: non-stitched items of every decode choice pass through unchanged and in
/// order, and none of the prefill's is copied.
fn l5(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    let others = |items: &[Value]| -> Vec<Value> {
        items
            .iter()
            .filter(|item| !is_stitched(item, &FIELDS))
            .cloned()
            .collect()
    };
    for (before, after) in m.before.iter().zip(&m.after) {
        prop_assert_eq!(others(after), others(before));
    }
    Ok(())
}

/// L7: every decode choice starts with the prefill's stitched segments,
/// exactly as they are (unknown keys included) and in their order.
fn l7(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    let prefix: Vec<Value> = m
        .prefill
        .iter()
        .filter(|s| is_stitched(s, &FIELDS))
        .cloned()
        .collect();
    for after in &m.after {
        prop_assert!(after.len() >= prefix.len());
        prop_assert_eq!(&after[..prefix.len()], &prefix[..]);
    }
    Ok(())
}

/// L9: after the prefix, the decode's stitched segments appear in their
/// order, each dropped when `pos + rows <= cut`, clipped when `pos < cut`
/// (pos = cut, rows and offset moved by the skipped rows), kept otherwise;
/// only `pos`, `rows` and `offset` ever change.
fn l9(pair: &Pair) -> Result<(), TestCaseError> {
    let m = merge(pair)?;
    let prefix_len = m.prefill.iter().filter(|s| is_stitched(s, &FIELDS)).count();
    for (before, after) in m.before.iter().zip(&m.after) {
        let mut expected = Vec::new();
        for seg in before.iter().filter(|s| is_stitched(s, &FIELDS)) {
            let field = seg["field"].as_str().unwrap();
            let cut = naive_cut(&m.prefill, field).unwrap();
            let (pos, rows, offset) = (num(seg, "pos"), num(seg, "rows"), num(seg, "offset"));
            if u128::from(pos) + u128::from(rows) <= u128::from(cut) {
                continue;
            }
            let mut seg = seg.clone();
            if pos < cut {
                let skipped = cut - pos;
                let new_offset = u128::from(offset) + u128::from(skipped) * row_bytes(&seg);
                seg["pos"] = json!(cut);
                seg["rows"] = json!(rows - skipped);
                seg["offset"] = json!(u64::try_from(new_offset).unwrap());
            }
            expected.push(seg);
        }
        let got: Vec<Value> = after[prefix_len..]
            .iter()
            .filter(|s| is_stitched(s, &FIELDS))
            .cloned()
            .collect();
        prop_assert_eq!(got, expected);
    }
    Ok(())
}

proptest! {
    #![proptest_config(config("laws"))]

    #[test]
    fn l1_merged_segments_are_disjoint_writer(pair in writer_pair()) { l1(&pair)?; }
    #[test]
    fn l1_merged_segments_are_disjoint_arbitrary(pair in arbitrary_pair(true)) { l1(&pair)?; }

    #[test]
    fn l2_coverage_writer(pair in writer_pair()) { l2(&pair)?; }
    #[test]
    fn l2_coverage_arbitrary(pair in arbitrary_pair(true)) { l2(&pair)?; }
    #[test]
    fn l2_coverage_arbitrary_overlapping(pair in arbitrary_pair(false)) { l2(&pair)?; }

    #[test]
    fn l3_prefill_wins_bytewise_writer(pair in writer_pair()) { l3(&pair)?; }
    #[test]
    fn l3_prefill_wins_bytewise_arbitrary(pair in arbitrary_pair(true)) { l3(&pair)?; }

    #[test]
    fn l5_other_items_pass_through_writer(pair in writer_pair()) { l5(&pair)?; }
    #[test]
    fn l5_other_items_pass_through_arbitrary(pair in arbitrary_pair(false)) { l5(&pair)?; }

    #[test]
    fn l7_same_prefill_prefix_writer(pair in writer_pair()) { l7(&pair)?; }
    #[test]
    fn l7_same_prefill_prefix_arbitrary(pair in arbitrary_pair(false)) { l7(&pair)?; }

    #[test]
    fn l9_decode_segments_follow_rule_5_writer(pair in writer_pair()) { l9(&pair)?; }
    #[test]
    fn l9_decode_segments_follow_rule_5_arbitrary(pair in arbitrary_pair(false)) { l9(&pair)?; }

    /// L6: with no stitched segment on either side (the generated segments'
    /// fields renamed out of the stitched set), the merge is `Ok(false)` and
    /// the decode is untouched, whatever else its payloads hold.
    #[test]
    fn l6_no_stitched_segment_is_a_no_op(pair in arbitrary_pair(false), rename in any::<bool>()) {
        let unstitch = |items: &mut Vec<Item>| for item in items {
            if let Item::Seg(seg) = item {
                seg.field = if rename { format!("{}_v2", seg.field) } else { MASK.into() };
            }
        };
        let mut pair = pair;
        unstitch(&mut pair.prefill);
        for choice in &mut pair.decode {
            if let Payload::Items(items) = choice { unstitch(items); }
        }
        let prefill = pair.prefill_json();
        let before = pair.decode_json();
        let mut after = before.clone();
        prop_assert_eq!(stitcher().merge(&prefill, &mut after, pd_stitch::Stitch::ByHandle), Ok(false));
        prop_assert_eq!(&after, &before);
        prop_assert!(!stitcher().prefill_has_routed_experts(&prefill));
    }

    /// L6, by field set: a stitcher that does not stitch a field leaves its
    /// segments alone (a stitcher of `routed_experts` alone, on pairs of
    /// `routed_expert_weights` only).
    #[test]
    fn l6_fields_outside_the_set_are_not_stitched(pair in arbitrary_pair(false)) {
        let mut pair = pair;
        let only_w = |items: &mut Vec<Item>| {
            items.retain(|item| !matches!(item, Item::Seg(seg) if seg.field == RE));
        };
        only_w(&mut pair.prefill);
        for choice in &mut pair.decode {
            if let Payload::Items(items) = choice { only_w(items); }
        }
        let prefill = pair.prefill_json();
        let before = pair.decode_json();
        let mut after = before.clone();
        let experts_only = Stitcher::with_fields([RE]);
        prop_assert_eq!(experts_only.merge(&prefill, &mut after, pd_stitch::Stitch::ByHandle), Ok(false));
        prop_assert_eq!(&after, &before);
    }

    /// `prefill_has_routed_experts` is true exactly when the prefill's first
    /// choice has a stitched segment (every generated pair has one).
    #[test]
    fn prefill_has_routed_experts_sees_generated_segments(pair in arbitrary_pair(false)) {
        let prefill = pair.prefill_json();
        prop_assert!(stitcher().prefill_has_routed_experts(&prefill));
        prop_assert!(pd_stitch::prefill_has_routed_experts(&prefill));
    }
}

// ----------------------------------------------------------------------------
// L8: generated error cases.
// ----------------------------------------------------------------------------

/// A third stitched field that generated prefills never have.
const ORPHAN: &str = "routed_expert_scores";

/// One fault to inject into a valid pair.
#[derive(Clone, Debug)]
enum Fault {
    /// `pos`, `rows` or `offset` of a stitched segment set to a non-integer
    /// (`None`: the key removed).
    Integer(&'static str, Option<Value>),
    /// A `shape` entry set to a non-integer.
    ShapeDim(Value),
    /// `shape` set to a non-array (`None`: removed).
    ShapeNotArray(Option<Value>),
    /// `dtype` set to an unsupported value (`None`: removed).
    Dtype(Option<Value>),
    OverflowEnd,
    OverflowRowBytes,
    OverflowByteEnd,
    /// A decode segment's field renamed to a stitched field the prefill lacks.
    MissingPrefillField,
    /// `decode.choices` replaced by a non-array (`None`: removed).
    ChoicesNotArray(Option<Value>),
    /// A decode choice replaced by a non-object.
    ChoiceNotObject(Value),
    /// A decode choice's `payload` replaced by a non-array, non-null value.
    PayloadNotArray(Value),
    /// The decode response replaced by a non-object.
    DecodeNotObject(Value),
}

fn bad_integer() -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        Just(None),
        Just(Some(json!(-1))),
        Just(Some(json!(i64::MIN))),
        Just(Some(json!(3.0))),
        Just(Some(json!(0.5))),
        Just(Some(json!(1e20))),
        Just(Some(json!("5"))),
        Just(Some(json!(true))),
        Just(Some(json!(null))),
        Just(Some(json!([1]))),
        Just(Some(json!({"value": 1}))),
    ]
}

fn not_array() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(json!("x")),
        Just(json!(7)),
        Just(json!({"0": {}})),
        Just(json!(true))
    ]
}

fn fault() -> impl Strategy<Value = Fault> {
    let key = prop_oneof![Just("pos"), Just("rows"), Just("offset")];
    prop_oneof![
        (key, bad_integer()).prop_map(|(k, v)| Fault::Integer(k, v)),
        bad_integer()
            .prop_filter_map("a value", |v| v)
            .prop_map(Fault::ShapeDim),
        prop_oneof![
            Just(None),
            not_array().prop_map(Some),
            Just(Some(Value::Null))
        ]
        .prop_map(Fault::ShapeNotArray),
        prop_oneof![
            Just(None),
            Just(Some(json!("uint"))),
            Just(Some(json!("<u2"))),
            Just(Some(json!("UINT8"))),
            Just(Some(json!("int128"))),
            Just(Some(json!(8))),
            Just(Some(json!(null))),
        ]
        .prop_map(Fault::Dtype),
        Just(Fault::OverflowEnd),
        Just(Fault::OverflowRowBytes),
        Just(Fault::OverflowByteEnd),
        Just(Fault::MissingPrefillField),
        prop_oneof![
            Just(None),
            not_array().prop_map(Some),
            Just(Some(Value::Null))
        ]
        .prop_map(Fault::ChoicesNotArray),
        prop_oneof![
            Just(json!(null)),
            Just(json!(3)),
            Just(json!([])),
            Just(json!("c"))
        ]
        .prop_map(Fault::ChoiceNotObject),
        not_array().prop_map(Fault::PayloadNotArray),
        prop_oneof![Just(json!(null)), Just(json!([])), Just(json!("decode"))]
            .prop_map(Fault::DecodeNotObject),
    ]
}

/// The stitched segments of the pair, as (side, choice, index in payload).
fn targets(prefill: &Value, decode: &Value, fields: &[&str]) -> Vec<(&'static str, usize, usize)> {
    let mut out = Vec::new();
    for (j, item) in payload(&prefill["choices"][0]).iter().enumerate() {
        if is_stitched(item, fields) {
            out.push(("prefill", 0, j));
        }
    }
    for (i, choice) in decode["choices"].as_array().unwrap().iter().enumerate() {
        for (j, item) in payload(choice).iter().enumerate() {
            if is_stitched(item, fields) {
                out.push(("decode", i, j));
            }
        }
    }
    out
}

/// Injects `fault` and returns the pair and the error's expected variant name
/// and location, or `None` when the fault has no place in this pair.
fn inject(
    pair: &Pair,
    fault: &Fault,
    pick: prop::sample::Index,
) -> Option<(Value, Value, &'static str, String)> {
    let mut prefill = pair.prefill_json();
    let mut decode = pair.decode_json();
    let seg_at = |side: &str, i: usize, j: usize| format!("{side} choices[{i}].payload[{j}]");
    let choices_len = decode["choices"].as_array().unwrap().len();
    let segment_fault = |prefill: &mut Value, decode: &mut Value, sides: &[&str]| {
        let all: Vec<_> = targets(prefill, decode, &FIELDS)
            .into_iter()
            .filter(|t| sides.contains(&t.0))
            .collect();
        if all.is_empty() {
            return None;
        }
        let (side, i, j) = *pick.get(&all);
        let root = if side == "prefill" { prefill } else { decode };
        Some((
            side,
            i,
            j,
            root["choices"][i]["payload"][j]
                .as_object_mut()
                .unwrap()
                .clone(),
        ))
    };
    let write_back =
        |prefill: &mut Value, decode: &mut Value, side: &str, i: usize, j: usize, seg| {
            let root = if side == "prefill" { prefill } else { decode };
            root["choices"][i]["payload"][j] = Value::Object(seg);
        };
    let set =
        |seg: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>| match value {
            Some(v) => {
                seg.insert(key.to_owned(), v);
            }
            None => {
                seg.remove(key);
            }
        };
    let (variant, at) = match fault {
        Fault::Integer(key, value) => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            set(&mut seg, key, value.clone());
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Integer", format!("{}.{key}", seg_at(side, i, j)))
        }
        Fault::ShapeDim(value) => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            let shape = seg["shape"].as_array_mut().unwrap();
            let k = pick.index(shape.len() + 1);
            if k == shape.len() {
                shape.push(value.clone());
            } else {
                shape[k] = value.clone();
            }
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Integer", format!("{}.shape[{k}]", seg_at(side, i, j)))
        }
        Fault::ShapeNotArray(value) => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            set(&mut seg, "shape", value.clone());
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Structure", format!("{}.shape", seg_at(side, i, j)))
        }
        Fault::Dtype(value) => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            set(&mut seg, "dtype", value.clone());
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Dtype", format!("{}.dtype", seg_at(side, i, j)))
        }
        Fault::OverflowEnd => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            let pos = seg["pos"].as_u64().unwrap().max(1);
            seg.insert("pos".into(), json!(pos));
            seg.insert("rows".into(), json!(u64::MAX - pos + 1));
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Overflow", seg_at(side, i, j))
        }
        Fault::OverflowRowBytes => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            seg.insert("shape".into(), json!([1u64 << 40, 1u64 << 40]));
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Overflow", seg_at(side, i, j))
        }
        Fault::OverflowByteEnd => {
            let (side, i, j, mut seg) =
                segment_fault(&mut prefill, &mut decode, &["prefill", "decode"])?;
            if seg["rows"] == json!(0) {
                seg.insert("rows".into(), json!(1));
            }
            seg.insert("offset".into(), json!(u64::MAX));
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("Overflow", seg_at(side, i, j))
        }
        Fault::MissingPrefillField => {
            let (side, i, j, mut seg) = segment_fault(&mut prefill, &mut decode, &["decode"])?;
            seg.insert("field".into(), json!(ORPHAN));
            write_back(&mut prefill, &mut decode, side, i, j, seg);
            ("MissingPrefillField", seg_at(side, i, j))
        }
        Fault::ChoicesNotArray(value) => {
            let root = decode.as_object_mut().unwrap();
            match value {
                Some(v) => root.insert("choices".into(), v.clone()),
                None => root.remove("choices"),
            };
            ("Structure", "decode choices".to_owned())
        }
        Fault::ChoiceNotObject(value) => {
            let i = pick.index(choices_len);
            decode["choices"][i] = value.clone();
            ("Structure", format!("decode choices[{i}]"))
        }
        Fault::PayloadNotArray(value) => {
            let i = pick.index(choices_len);
            decode["choices"][i]["payload"] = value.clone();
            ("Structure", format!("decode choices[{i}].payload"))
        }
        Fault::DecodeNotObject(value) => {
            decode = value.clone();
            ("Structure", "decode response".to_owned())
        }
    };
    Some((prefill, decode, variant, at))
}

proptest! {
    #![proptest_config(config("laws"))]

    /// L8: one injected fault in a valid pair gives its own variant at its own
    /// location, and leaves the decode exactly as it was.
    #[test]
    fn l8_errors_name_variant_and_place_and_change_nothing(
        pair in prop_oneof![writer_pair(), arbitrary_pair(false)],
        fault in fault(),
        pick in any::<prop::sample::Index>(),
    ) {
        let Some((prefill, decode, expected_variant, expected_at)) = inject(&pair, &fault, pick) else {
            return Ok(());
        };
        let stitcher = stitcher().field(ORPHAN);
        let mut after = decode.clone();
        let err = stitcher.merge(&prefill, &mut after, pd_stitch::Stitch::ByHandle).unwrap_err();
        prop_assert_eq!(variant(&err), expected_variant, "{}", err);
        prop_assert_eq!(err.location().to_string(), expected_at.clone());
        prop_assert!(err.to_string().starts_with(&format!("{expected_at}: ")), "{}", err);
        prop_assert_eq!(&after, &decode);
    }
}
