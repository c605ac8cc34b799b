//! Strict mode (issue 15): the laws of `Stitcher::strict`.
//!
//! - **S-accept**: on every layout the writer model produces (any preemption
//!   split, any mix of `uint8`/`uint16` segments), a strict merge gives
//!   exactly what the plain merge gives.
//! - **S-refuse**: one fault injected into a decode choice's kept segments (a
//!   gap, a row shape changed, a float dtype among integers) still merges
//!   plainly, but strictly it is `ErrorDetail::Layout` at that choice's payload,
//!   naming the segments a position-by-position model finds on the plainly
//!   merged payload, and the decode is untouched; an overlap or two segments
//!   swapped, which the trainer reads right (later segments win, positions
//!   in any order), is accepted unless it leaves a gap.
//!
//! The reference model here reads the merged payload as the trainer does
//! (SPEC 5a): position by position, the last segment covering a position
//! is the one read.

use crate::support::*;
use pd_stitch::algebra::LayoutProblem;
use pd_stitch::{Error, ErrorDetail, Stitcher};
use proptest::prelude::*;
use serde_json::{json, Value};

fn num(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap()
}

/// What the trainer (SPEC 5a: later segments win, uncovered positions read
/// as the fill) reads otherwise than the rows written, found position by
/// position: `(kind, first, second)` with payload indices, or `None`. The
/// first segment in payload order with another shape or dtype kind than the
/// first (or a dtype NumPy cannot name); else the first position between
/// the first and the last covered that no segment covers, with the segments
/// the trainer reads the positions around it from.
fn trainer_reads(payload: &[Value], field: &str) -> Option<(&'static str, usize, usize)> {
    let segs: Vec<(usize, &Value)> = payload
        .iter()
        .enumerate()
        .filter(|(_, s)| s["field"] == field)
        .collect();
    let &(first_index, first) = segs.first()?;
    let float = |d: &str| d.starts_with("float") || d == "bfloat16";
    for &(j, s) in &segs {
        if s["shape"] != first["shape"] {
            return Some(("shape", first_index, j));
        }
        let (a, b) = (
            s["dtype"].as_str().unwrap(),
            first["dtype"].as_str().unwrap(),
        );
        if a == "bfloat16" {
            return Some(("unreadable", j, j));
        }
        if float(a) != float(b) {
            return Some(("dtype", first_index, j));
        }
    }
    // Who the trainer reads each position from: the last segment covering it.
    let mut reader: std::collections::BTreeMap<u64, usize> = Default::default();
    for &(j, s) in &segs {
        for x in num(s, "pos")..num(s, "pos") + num(s, "rows") {
            reader.insert(x, j);
        }
    }
    let (&lo, _) = reader.first_key_value()?;
    let (&hi, _) = reader.last_key_value()?;
    for x in lo..=hi {
        if !reader.contains_key(&x) {
            let next = (x..=hi).find(|y| reader.contains_key(y))?;
            return Some(("gap", reader[&(x - 1)], reader[&next]));
        }
    }
    None
}

fn kind(problem: &LayoutProblem) -> &'static str {
    match problem {
        LayoutProblem::Gap { .. } => "gap",
        LayoutProblem::Overlap { .. } => "overlap",
        LayoutProblem::OutOfOrder { .. } => "order",
        LayoutProblem::Shape { .. } => "shape",
        LayoutProblem::Dtype { .. } => "dtype",
        LayoutProblem::Unreadable { .. } => "unreadable",
        _ => "other",
    }
}

#[derive(Clone, Copy, Debug)]
enum Fault {
    Gap,
    Overlap,
    Swap,
    Shape,
    Float,
}

fn segs_mut(payload: &mut Payload) -> Vec<&mut Seg> {
    match payload {
        Payload::Items(items) => items
            .iter_mut()
            .filter_map(|item| match item {
                Item::Seg(s) if s.field == RE => Some(s),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Relabels the routed segments `uint8` or `uint16` by `mix` (cycled).
fn mix_dtypes(pair: &mut Pair, mix: &[bool]) {
    let mut bits = mix.iter().cycle();
    let mut relabel = |s: &mut Seg| {
        s.dtype = if *bits.next().unwrap() {
            "uint16"
        } else {
            "uint8"
        };
    };
    for item in &mut pair.prefill {
        if let Item::Seg(s) = item {
            relabel(s);
        }
    }
    for payload in &mut pair.decode {
        segs_mut(payload).into_iter().for_each(&mut relabel);
    }
}

/// Injects `fault` into decode choice `c`'s `k`-th kept routed segment (one
/// that ends after the cut); `false` when the choice has none to spoil.
fn inject(pair: &mut Pair, fault: Fault, c: usize, k: usize) -> bool {
    let cut = pair
        .prefill
        .iter()
        .filter_map(|i| match i {
            Item::Seg(s) if s.field == RE => Some(s.pos + s.rows),
            _ => None,
        })
        .max()
        .unwrap();
    let payload = &mut pair.decode[c];
    let kept: Vec<usize> = segs_mut(payload)
        .iter()
        .enumerate()
        .filter(|(_, s)| s.pos + s.rows > cut)
        .map(|(j, _)| j)
        .collect();
    if kept.is_empty() || (matches!(fault, Fault::Swap) && kept.len() < 2) {
        return false;
    }
    let k = kept[k % if matches!(fault, Fault::Swap) {
        kept.len() - 1
    } else {
        kept.len()
    }];
    let Payload::Items(items) = payload else {
        return false;
    };
    // Item indices of the routed segments.
    let at: Vec<usize> = items
        .iter()
        .enumerate()
        .filter(|(_, i)| matches!(i, Item::Seg(s) if s.field == RE))
        .map(|(j, _)| j)
        .collect();
    let seg = |items: &mut Vec<Item>, j: usize| match &mut items[j] {
        Item::Seg(s) => s.clone(),
        _ => unreachable!(),
    };
    match fault {
        Fault::Gap => {
            for &j in &at[k..] {
                if let Item::Seg(s) = &mut items[j] {
                    s.pos += 2;
                }
            }
        }
        Fault::Overlap => {
            let copy = seg(items, at[k]);
            items.insert(at[k] + 1, Item::Seg(copy));
        }
        Fault::Swap => items.swap(at[k], at[k + 1]),
        Fault::Shape => {
            if let Item::Seg(s) = &mut items[at[k]] {
                s.shape[0] += 1;
            }
        }
        Fault::Float => {
            if let Item::Seg(s) = &mut items[at[k]] {
                s.dtype = "float32";
            }
        }
    }
    true
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        Just(Fault::Gap),
        Just(Fault::Overlap),
        Just(Fault::Swap),
        Just(Fault::Shape),
        Just(Fault::Float),
    ]
}

proptest! {
    #![proptest_config(config("strict"))]

    /// S-accept: strict changes nothing on what writers produce, whatever
    /// the preemption splits and the mix of uint8 and uint16 segments.
    #[test]
    fn strict_accepts_every_writer_layout(
        pair in writer_pair(),
        mix in proptest::collection::vec(any::<bool>(), 1..8),
    ) {
        let mut pair = pair;
        mix_dtypes(&mut pair, &mix);
        let prefill = pair.prefill_json();
        let decode = pair.decode_json();
        let mut plain = decode.clone();
        let mut strict = decode.clone();
        prop_assert_eq!(pd_stitch::merge_routed_experts_for_pd(&prefill, &mut plain), Ok(true));
        let got = Stitcher::new().strict().merge(&prefill, &mut strict, pd_stitch::Stitch::ForPd);
        prop_assert_eq!(got, Ok(true));
        prop_assert_eq!(&strict, &plain);
        // And the trainer's reading agrees: nothing to misread.
        for choice in plain["choices"].as_array().unwrap() {
            let payload = choice["payload"].as_array().unwrap();
            prop_assert_eq!(trainer_reads(payload, RE), None);
        }
    }

    /// S-refuse: each injected fault is `ErrorDetail::Layout` at the faulty
    /// choice, naming the segments the trainer's reading finds, and the
    /// decode is untouched; the plain merge lets it through.
    #[test]
    fn strict_refuses_each_fault_where_it_is(
        pair in writer_pair(),
        mix in proptest::collection::vec(any::<bool>(), 1..8),
        fault in fault(),
        c in any::<prop::sample::Index>(),
        k in 0usize..8,
    ) {
        let mut pair = pair;
        mix_dtypes(&mut pair, &mix);
        let c = c.index(pair.decode.len());
        prop_assume!(inject(&mut pair, fault, c, k));
        let prefill = pair.prefill_json();
        let decode = pair.decode_json();
        let mut plain = decode.clone();
        prop_assert_eq!(pd_stitch::merge_routed_experts_for_pd(&prefill, &mut plain), Ok(true));
        let payload = plain["choices"][c]["payload"].as_array().unwrap();
        let expected = trainer_reads(payload, RE);
        let mut strict = decode.clone();
        if matches!(fault, Fault::Overlap | Fault::Swap) && expected.is_none() {
            // The trainer reads an overlap (the later segment wins) and
            // segments in any order: strict accepts them, as the plain merge.
            let got = Stitcher::new().strict().merge(&prefill, &mut strict, pd_stitch::Stitch::ForPd);
            prop_assert_eq!(got, Ok(true));
            prop_assert_eq!(&strict, &plain);
            return Ok(());
        }
        let (want_kind, first, second) = expected.expect("an injected fault is misread");
        match fault {
            Fault::Gap | Fault::Swap | Fault::Overlap => prop_assert_eq!(want_kind, "gap"),
            Fault::Shape => prop_assert_eq!(want_kind, "shape"),
            Fault::Float => prop_assert_eq!(want_kind, "dtype"),
        }
        let err = Stitcher::new().strict().merge(&prefill, &mut strict, pd_stitch::Stitch::ForPd);
        prop_assert_eq!(&strict, &decode, "the decode is untouched");
        match err.map_err(Error::into_detail) {
            Err(ErrorDetail::Layout { at, field, problem, .. }) => {
                prop_assert_eq!(at.to_string(), format!("decode choices[{c}].payload"));
                prop_assert_eq!(field, RE);
                prop_assert_eq!(kind(&problem), want_kind);
                prop_assert_eq!(problem.segments(), (first, second), "{}", problem);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }
}

/// The rule itself against the trainer's reading, on arbitrary lists:
/// positions with empty segments anywhere, steps back, overlaps and gaps,
/// two row shapes and dtypes of every kind (any mix of non-floats allowed,
/// of floats too, not the two together). Indices are list indices here.
#[test]
fn check_layout_agrees_with_reading_position_by_position() {
    use pd_stitch::algebra::check_layout;
    use pd_stitch::algebra::{Dtype, Rows};
    let dtypes = [
        "uint8", "uint16", "uint64", "int8", "float32", "bool", "float16", "bfloat16",
    ];
    let mut runner = proptest::test_runner::TestRunner::new(config("strict"));
    let segment = (0u64..8, 0u64..4, 0usize..8, 0usize..2);
    runner
        .run(&proptest::collection::vec(segment, 0..6), |list| {
            let values: Vec<Value> = list
                .iter()
                .map(|&(pos, rows, d, w)| {
                    json!({"field": RE, "pos": pos, "rows": rows, "dtype": dtypes[d],
                           "shape": [2, 1 + w]})
                })
                .collect();
            let shapes: Vec<Vec<u64>> = list
                .iter()
                .map(|&(_, _, _, w)| vec![2, 1 + w as u64])
                .collect();
            let items = list.iter().zip(&shapes).map(|(&(pos, rows, d, _), shape)| {
                (
                    Rows::with_len(pos, rows).unwrap(),
                    dtypes[d].parse::<Dtype>().unwrap(),
                    shape.as_slice(),
                )
            });
            let got = check_layout(items).err().map(|p| (kind(&p), p.segments()));
            let want = trainer_reads(&values, RE).map(|(k, a, b)| (k, (a, b)));
            prop_assert_eq!(got, want, "{:?}", list);
            Ok(())
        })
        .unwrap();
}

/// The message names the choice, the two segments in the merged payload,
/// where each came from, and the positions.
#[test]
fn a_gap_reads_as_it_is() {
    let seg = |file: &str, pos: u64, rows: u64| {
        json!({"field": "routed_experts", "file": file, "offset": 0, "pos": pos, "rows": rows,
               "dtype": "uint8", "shape": [2]})
    };
    let prefill = json!({"choices": [{"payload": [seg("p.bin", 0, 3)]}]});
    let mut decode = json!({"choices": [
        {"payload": [seg("d.bin", 2, 3)]},
        {"payload": [{"field": "sampling_mask"}, seg("d.bin", 2, 2), seg("e.bin", 5, 2)]},
    ]});
    let before = decode.clone();
    let err = Stitcher::new()
        .strict()
        .merge(&prefill, &mut decode, pd_stitch::Stitch::ForPd)
        .unwrap_err();
    assert_eq!(decode, before);
    assert_eq!(
        err.to_string(),
        "decode choices[1].payload: strict: the merged routed_experts segments would be misread: \
         segment 3 starts at 5 but segment 2 ends at 4: positions [4, 5) are missing \
         (segment 2 is decode choices[1].payload[1], segment 3 is decode choices[1].payload[2])"
    );
    let ErrorDetail::Layout {
        problem,
        first,
        second,
        ..
    } = err.detail()
    else {
        panic!("{err:?}");
    };
    assert_eq!(
        *problem,
        LayoutProblem::Gap {
            first: 2,
            second: 3,
            end: 4,
            start: 5
        }
    );
    assert_eq!(first.to_string(), "decode choices[1].payload[1]");
    assert_eq!(second.to_string(), "decode choices[1].payload[2]");
}

/// Strict mode holds every stitched field to the rule, the weights too, and
/// names a prefill segment as the origin when it is one of the two.
#[test]
fn strict_checks_every_stitched_field_and_names_prefill_segments() {
    let w = |file: &str, pos: u64, rows: u64, dtype: &str| {
        json!({"field": "routed_expert_weights", "file": file, "offset": 0, "pos": pos,
               "rows": rows, "dtype": dtype, "shape": [2]})
    };
    let prefill = json!({"choices": [{"payload": [{"field": "x"}, w("p.bin", 0, 3, "float32")]}]});
    let mut decode = json!({"choices": [{"payload": [w("d.bin", 2, 3, "int32")]}]});
    let before = decode.clone();
    let err = Stitcher::new()
        .strict()
        .merge(&prefill, &mut decode, pd_stitch::Stitch::ByHandle)
        .unwrap_err();
    assert_eq!(decode, before);
    let ErrorDetail::Layout {
        field,
        problem,
        first,
        ..
    } = err.detail()
    else {
        panic!("{err:?}");
    };
    assert_eq!(field, "routed_expert_weights");
    assert!(
        matches!(
            problem,
            LayoutProblem::Dtype {
                first: 0,
                second: 1,
                ..
            }
        ),
        "{problem:?}"
    );
    assert_eq!(first.to_string(), "prefill choices[0].payload[1]");
    // Floats of any widths are fine (the trainer reads them as float32);
    // the plain merge never looked.
    let mut decode = json!({"choices": [{"payload": [w("d.bin", 2, 3, "float16")]}]});
    assert_eq!(
        Stitcher::new()
            .strict()
            .merge(&prefill, &mut decode, pd_stitch::Stitch::ByHandle),
        Ok(true)
    );
}

/// Inline rows are one segment per side, already held to the rule by the
/// inline merge: strict gives the same answers there.
#[test]
fn strict_agrees_with_the_plain_merge_on_inline_rows() {
    let prefill = json!({"choices": [{"routed_experts":
        {"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]});
    let decode = json!({"choices": [{"routed_experts":
        {"data": "CQkJBwgJCgsM", "shape": [3, 1, 3], "start": 1}}]});
    let (mut plain, mut strict) = (decode.clone(), decode.clone());
    assert_eq!(
        pd_stitch::merge_routed_experts_for_pd(&prefill, &mut plain),
        Stitcher::new()
            .strict()
            .merge(&prefill, &mut strict, pd_stitch::Stitch::ForPd)
    );
    assert_eq!(plain, strict);
}
