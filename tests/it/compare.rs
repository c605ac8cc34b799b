//! `pd_stitch::compare`: generated row arrays with differences injected at
//! known positions and layers give exactly the injected counts, per-layer
//! figures, first differences and one-sided positions, in every pair of forms
//! (inline compact, by handle); a permuted top-k is set-equal but not equal;
//! the heatmap is XML with one cell group per layer.

use crate::support;

use std::collections::BTreeMap;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::algebra::Rows;
use pd_stitch::compare::{compare, Cell, CompareError, Options, PromptSource, Which};
use pd_stitch::gather::Store;
use proptest::prelude::*;
use serde_json::{json, Value};

/// Rows as a test writes them: `[position][layer][k]` expert ids.
type Ids = Vec<Vec<Vec<u16>>>;

/// How one side carries its rows.
#[derive(Clone, Debug)]
enum Form {
    Compact,
    /// By handle, in one file of a memory store, split at these offsets.
    Handle(Vec<u64>),
}

fn bytes(ids: &Ids, wide: bool) -> Vec<u8> {
    ids.iter()
        .flatten()
        .flatten()
        .flat_map(|&id| {
            if wide {
                id.to_le_bytes().to_vec()
            } else {
                vec![u8::try_from(id).unwrap()]
            }
        })
        .collect()
}

/// A response of one choice holding `ids` for positions from `start`, and
/// the store its files are in.
fn response(ids: &Ids, start: u64, wide: bool, form: &Form, file: &str) -> (Value, Store) {
    let (layers, topk) = (ids[0].len() as u64, ids[0][0].len() as u64);
    let n = ids.len() as u64;
    let dtype = if wide { "uint16" } else { "uint8" };
    let data = bytes(ids, wide);
    match form {
        Form::Compact => (
            json!({"choices": [{"routed_experts": {"data": STANDARD.encode(&data),
                "shape": [n, layers, topk], "start": start, "dtype": dtype}}]}),
            Store::memory(),
        ),
        Form::Handle(splits) => {
            let row_bytes = data.len() as u64 / n;
            let mut bounds: Vec<u64> = splits.iter().copied().filter(|&s| s > 0 && s < n).collect();
            bounds.push(0);
            bounds.push(n);
            bounds.sort_unstable();
            bounds.dedup();
            let payload: Vec<Value> = bounds
                .windows(2)
                .map(|w| {
                    json!({"field": "routed_experts", "file": file, "offset": w[0] * row_bytes,
                           "pos": start + w[0], "rows": w[1] - w[0], "dtype": dtype,
                           "shape": [layers, topk]})
                })
                .collect();
            let mut store = Store::memory();
            store.write(file, data).unwrap();
            (json!({"choices": [{"payload": payload}]}), store)
        }
    }
}

fn form() -> impl Strategy<Value = Form> {
    prop_oneof![
        Just(Form::Compact),
        proptest::collection::vec(0u64..30, 0..3).prop_map(Form::Handle),
    ]
}

/// What is injected into B's copy of a row's layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inject {
    /// The first expert replaced by one no layer holds (ids are below 200).
    Different,
    /// The layer's experts rotated by one: the same set in another order.
    Permute,
}

#[derive(Clone, Debug)]
struct Case {
    wide: bool,
    start: u64,
    ids: Ids,
    injections: BTreeMap<(usize, usize), Inject>,
    /// Positions B has before and after A's (B's rows there are arbitrary).
    extra: (u64, u64),
    extra_ids: Ids,
    prompt_len: Option<u64>,
    forms: (Form, Form),
    /// Whether the injected side is passed as A (so one-sided positions are A's).
    swap: bool,
}

/// A layer of `topk` distinct expert ids below 200, in random order.
fn layer(topk: usize) -> impl Strategy<Value = Vec<u16>> + Clone {
    proptest::sample::subsequence((0..200u16).collect::<Vec<_>>(), topk).prop_shuffle()
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..=4, 1usize..=4, 1usize..=24, 0u64..6, any::<bool>())
        .prop_flat_map(|(layers, topk, n, start, wide)| {
            let row = proptest::collection::vec(layer(topk), layers);
            (
                proptest::collection::vec(row.clone(), n),
                proptest::collection::vec(
                    (
                        0..n,
                        0..layers,
                        prop_oneof![Just(Inject::Different), Just(Inject::Permute)],
                    ),
                    0..8,
                ),
                (0..=start, 0u64..3),
                proptest::collection::vec(row, 0..=(start as usize + 3)),
                proptest::option::of(0..start + n as u64 + 4),
                (form(), form()),
                any::<bool>(),
            )
                .prop_map(
                    move |(ids, injected, extra, extra_ids, prompt_len, forms, swap)| Case {
                        wide,
                        start,
                        ids,
                        injections: injected.into_iter().map(|(i, l, k)| ((i, l), k)).collect(),
                        extra,
                        extra_ids,
                        prompt_len,
                        forms,
                        swap,
                    },
                )
        })
        .prop_filter("enough rows for the extra positions", |c| {
            c.extra_ids.len() as u64 >= c.extra.0 + c.extra.1
        })
}

impl Case {
    /// B's rows: A's with the injections, and the extra positions around them.
    fn b_ids(&self) -> Ids {
        let mut ids = self.ids.clone();
        for (&(i, l), &inject) in &self.injections {
            let layer = &mut ids[i][l];
            match inject {
                Inject::Different => layer[0] = 250,
                Inject::Permute => layer.rotate_left(1),
            }
        }
        let (before, after) = (self.extra.0 as usize, self.extra.1 as usize);
        let mut out: Ids = self.extra_ids[..before].to_vec();
        out.extend(ids);
        out.extend_from_slice(&self.extra_ids[before..before + after]);
        out
    }

    /// The cell the injections make of layer `l` at index `i`.
    fn expected_cell(&self, i: usize, l: usize) -> Cell {
        match self.injections.get(&(i, l)) {
            None => Cell::Equal,
            Some(Inject::Different) => Cell::Different,
            // Rotating one expert changes nothing.
            Some(Inject::Permute) if self.ids[0][0].len() == 1 => Cell::Equal,
            Some(Inject::Permute) => Cell::SetEqual,
        }
    }
}

fn run_case(case: &Case) -> Result<(), TestCaseError> {
    let n = case.ids.len();
    let layers = case.ids[0].len();
    let b_start = case.start - case.extra.0;
    let (a, store_a) = response(&case.ids, case.start, case.wide, &case.forms.0, "a.bin");
    let (b, store_b) = response(&case.b_ids(), b_start, case.wide, &case.forms.1, "b.bin");
    let options = Options {
        prompt_len: case.prompt_len,
        ..Options::default()
    };
    let report = if case.swap {
        compare(&b, &store_b, &a, &store_a, &options)
    } else {
        compare(&a, &store_a, &b, &store_b, &options)
    }
    .map_err(|e| TestCaseError::fail(e.to_string()))?;
    prop_assert_eq!(report.choices.len(), 1);
    let got = &report.choices[0];

    // Counts from the injections alone.
    let cells: Vec<Vec<Cell>> = (0..n)
        .map(|i| (0..layers).map(|l| case.expected_cell(i, l)).collect())
        .collect();
    let equal = |i: usize| cells[i].iter().all(|&c| c == Cell::Equal);
    let set_equal = |i: usize| cells[i].iter().all(|&c| c != Cell::Different);
    prop_assert_eq!(got.compared, n as u64);
    prop_assert_eq!(got.equal_rows, (0..n).filter(|&i| equal(i)).count() as u64);
    prop_assert_eq!(
        got.equal_sets,
        (0..n).filter(|&i| set_equal(i)).count() as u64
    );
    let per_layer: Vec<u64> = (0..layers)
        .map(|l| (0..n).filter(|&i| cells[i][l] == Cell::Equal).count() as u64)
        .collect();
    prop_assert_eq!(&got.per_layer_equal, &per_layer);
    for (i, row) in cells.iter().enumerate() {
        prop_assert_eq!(got.cells.at(case.start + i as u64), Some(&row[..]));
    }

    // The first ten differing positions, with both rows as the test wrote them.
    let b_ids = case.b_ids();
    let differing: Vec<usize> = (0..n).filter(|&i| !equal(i)).take(10).collect();
    prop_assert_eq!(got.first_differences.len(), differing.len());
    for (d, &i) in got.first_differences.iter().zip(&differing) {
        prop_assert_eq!(d.position, case.start + i as u64);
        let (a_row, b_row) = (json!(case.ids[i]), json!(b_ids[i + case.extra.0 as usize]));
        let (want_a, want_b) = if case.swap {
            (b_row, a_row)
        } else {
            (a_row, b_row)
        };
        prop_assert_eq!(&d.a, &want_a);
        prop_assert_eq!(&d.b, &want_b);
    }

    // B's extra positions are covered by one side only.
    let end = case.start + n as u64;
    let mut extra = Vec::new();
    if case.extra.0 > 0 {
        extra.push(Rows::new(b_start, case.start).unwrap());
    }
    if case.extra.1 > 0 {
        extra.push(Rows::new(end, end + case.extra.1).unwrap());
    }
    let (only_a, only_b) = if case.swap {
        (&got.only_in_b, &got.only_in_a)
    } else {
        (&got.only_in_a, &got.only_in_b)
    };
    prop_assert!(only_a.is_empty(), "{:?}", only_a);
    prop_assert_eq!(only_b, &extra);
    let one_side = if case.swap { Cell::OnlyA } else { Cell::OnlyB };
    for r in &extra {
        for x in r.start()..r.end() {
            prop_assert_eq!(got.cells.at(x), Some(&vec![one_side; layers][..]));
        }
    }
    let span = Rows::new(b_start, end + case.extra.1).unwrap();
    prop_assert_eq!(got.positions, Some(span));

    // The prompt region: positions below the given length.
    match case.prompt_len {
        None => prop_assert!(got.prompt.is_none() && got.completion.is_none()),
        Some(p) => {
            prop_assert_eq!(got.prompt_len.map(|p| p.source), Some(PromptSource::Given));
            let (prompt, completion) = (got.prompt.unwrap(), got.completion.unwrap());
            let in_prompt = |i: &usize| case.start + (*i as u64) < p;
            let count = |f: &dyn Fn(&usize) -> bool| (0..n).filter(f).count() as u64;
            prop_assert_eq!(prompt.compared, count(&in_prompt));
            prop_assert_eq!(prompt.equal_rows, count(&|i| in_prompt(i) && equal(*i)));
            prop_assert_eq!(prompt.equal_sets, count(&|i| in_prompt(i) && set_equal(*i)));
            prop_assert_eq!(completion.compared, count(&|i| !in_prompt(i)));
            prop_assert_eq!(
                completion.equal_rows,
                count(&|i| !in_prompt(i) && equal(*i))
            );
            let cut = p.clamp(span.start(), span.end());
            prop_assert_eq!(prompt.positions, Rows::new(span.start(), cut).unwrap());
            prop_assert_eq!(completion.positions, Rows::new(cut, span.end()).unwrap());
        }
    }
    let all_equal = (0..n).all(equal) && extra.is_empty();
    prop_assert_eq!(report.all_equal(), all_equal);
    prop_assert_eq!(report.to_json()["all_equal"].as_bool(), Some(all_equal));

    // The heatmap is XML with one group of cells per layer.
    let svg = report.to_svg();
    let doc = roxmltree::Document::parse(&svg).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let groups = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("layer"))
        .count();
    prop_assert_eq!(groups, layers);
    Ok(())
}

proptest! {
    #![proptest_config(support::config("compare"))]

    /// Injected differences are found exactly: counts, per layer, first
    /// differences, one-sided positions and regions.
    #[test]
    fn injected_differences_are_reported_exactly(case in case()) {
        run_case(&case)?;
    }
}

/// The same experts in another order: set-equal, not equal; and one expert
/// changed: neither.
#[test]
fn a_permuted_top_k_is_set_equal_but_not_equal() {
    let a: Ids = vec![vec![vec![3, 1, 2], vec![7, 8, 9]]; 3];
    let mut b = a.clone();
    b[1][0] = vec![1, 2, 3]; // position 1, layer 0: permuted
    b[2][1] = vec![7, 8, 10]; // position 2, layer 1: different
    let (ra, _) = response(&a, 0, false, &Form::Compact, "a.bin");
    let (rb, _) = response(&b, 0, true, &Form::Compact, "b.bin"); // uint16 against uint8
    let report = compare(
        &ra,
        &Store::memory(),
        &rb,
        &Store::memory(),
        &Options::default(),
    )
    .unwrap();
    let c = &report.choices[0];
    assert_eq!((c.compared, c.equal_rows, c.equal_sets), (3, 1, 2));
    assert_eq!(c.per_layer_equal, [2, 2]);
    assert_eq!(c.cells.at(1), Some(&[Cell::SetEqual, Cell::Equal][..]));
    assert_eq!(c.cells.at(2), Some(&[Cell::Equal, Cell::Different][..]));
    let positions: Vec<u64> = c.first_differences.iter().map(|d| d.position).collect();
    assert_eq!(positions, [1, 2]);
    assert_eq!(c.first_differences[0].a, json!([[3, 1, 2], [7, 8, 9]]));
    assert_eq!(c.first_differences[0].b, json!([[1, 2, 3], [7, 8, 9]]));
    assert!(!report.all_equal());
}

/// 32k positions of 48 layers, one wrong: the heatmap bins them to the
/// picture's width and the wrong position still shows in every layer it is
/// wrong in; the prompt boundary is drawn.
#[test]
fn the_heatmap_of_32k_positions_shows_one_wrong_position() {
    let n = 32_768;
    let a: Ids = (0..n)
        .map(|x| {
            (0..48)
                .map(|l| vec![(x % 190) as u16, 190 + (l % 8) as u16])
                .collect()
        })
        .collect();
    let mut b = a.clone();
    for layer in &mut b[20_000] {
        layer[0] = 250;
    }
    let (ra, _) = response(&a, 0, false, &Form::Compact, "a.bin");
    let (rb, _) = response(&b, 0, false, &Form::Compact, "b.bin");
    let options = Options {
        prompt_len: Some(20_001),
        ..Options::default()
    };
    let report = compare(&ra, &Store::memory(), &rb, &Store::memory(), &options).unwrap();
    let svg = report.to_svg();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    let layers: Vec<_> = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("layer"))
        .collect();
    assert_eq!(layers.len(), 48);
    for layer in &layers {
        let rects: Vec<_> = layer
            .children()
            .filter(|n| n.has_tag_name("rect"))
            .collect();
        // Equal, the wrong bin, equal again.
        assert_eq!(rects.len(), 3, "{:?}", layer.attribute("data-layer"));
        assert_eq!(rects[1].attribute("fill"), Some("#d1242f"));
        let x: f64 = rects[1].attribute("x").unwrap().parse().unwrap();
        // Bin 20000 * 1200 / 32768 = 732, 1 px wide from the left margin of
        // 70, drawn 3 px wide around it.
        assert_eq!(x, 70.0 + 732.0 - 1.0);
        assert_eq!(rects[1].attribute("width"), Some("3.00"));
    }
    assert_eq!(
        doc.descendants()
            .filter(|n| n.attribute("class") == Some("boundary"))
            .count(),
        1
    );
    assert!(svg.len() < 400_000, "{} bytes", svg.len());
}

/// Errors: two shapes, a float against an integer, no rows anywhere, and a
/// side that cannot be read (named).
#[test]
fn what_cannot_be_compared_is_an_error_naming_the_side() {
    let one = |shape: [u64; 3], dtype: &str, data: &str| json!({"choices": [{"routed_experts": {"data": data, "shape": shape, "start": 0, "dtype": dtype}}]});
    let mem = Store::memory();
    let a = one([1, 1, 2], "uint8", "AQI=");
    let cases = [
        (
            one([1, 2, 1], "uint8", "AQI="),
            "rows of shape [1, 2] in A but [2, 1] in B",
        ),
        (
            one([1, 1, 2], "float16", "AQIDBA=="),
            "rows of uint8 in A but float16 in B",
        ),
        (
            one([1, 1, 2], "uint8", "AQI"),
            "B: response choices[0].routed_experts.data",
        ),
        (json!({"choices": [{"text": "no rows"}]}), ""),
    ];
    for (b, message) in cases {
        match compare(&a, &mem, &b, &mem, &Options::default()) {
            Err(err) => assert!(err.to_string().contains(message), "{err}"),
            Ok(report) if message.is_empty() => {
                // B has no rows: all of A's positions are on one side only.
                assert_eq!(report.choices[0].only_in_a, [Rows::new(0, 1).unwrap()]);
                assert!(!report.all_equal());
            }
            Ok(report) => panic!("{message}: {report}"),
        }
    }
    let none = json!({"choices": [{"text": "no rows"}]});
    assert!(matches!(
        compare(&none, &mem, &none, &mem, &Options::default()),
        Err(CompareError::NoRows { .. })
    ));
    let bad = json!({"choices": 3});
    assert!(matches!(
        compare(&a, &mem, &bad, &mem, &Options::default()),
        Err(CompareError::Gather { side: Which::B, .. })
    ));
}

/// Rows with a gap (a merge that cut one position late) are read run by
/// run: the missing position is one side's only, and an error inside a run
/// still names its payload index.
#[test]
fn rows_with_a_gap_are_compared_run_by_run() {
    let mut store = Store::memory();
    store.write("r.bin", (0..6).collect()).unwrap();
    let seg = |offset: u64, pos: u64, rows: u64| {
        json!({"field": "routed_experts", "file": "r.bin", "offset": offset, "pos": pos,
               "rows": rows, "dtype": "uint8", "shape": [1, 1]})
    };
    let whole = json!({"choices": [{"payload": [seg(0, 0, 6)]}]});
    let gap =
        json!({"choices": [{"payload": [seg(0, 0, 2), {"field": "sampling_mask"}, seg(3, 3, 3)]}]});
    let report = compare(&gap, &store, &whole, &store, &Options::default()).unwrap();
    let c = &report.choices[0];
    assert_eq!((c.compared, c.equal_rows), (5, 5));
    assert_eq!(c.only_in_b, [Rows::new(2, 3).unwrap()]);
    assert!(c.only_in_a.is_empty());
    // The file ends before the second run's bytes do.
    let short = json!({"choices": [{"payload": [seg(0, 0, 2), seg(4, 3, 3)]}]});
    let err = compare(&short, &store, &whole, &store, &Options::default()).unwrap_err();
    assert!(
        err.to_string().contains(
            "A: r.bin: 6 bytes long, but response choices[0].payload[1] needs bytes up to 7"
        ),
        "{err}"
    );
}

/// The prompt length: given, else usage.prompt_tokens, else the end of a
/// merged response's prefill segments (the leading segments in the first
/// segment's file); a colocated response (one file) says nothing.
#[test]
fn the_prompt_length_comes_from_the_caller_usage_or_the_prefill_segments() {
    let mut store = Store::memory();
    store.write("p.bin", vec![1; 3]).unwrap();
    store.write("d.bin", vec![1; 3]).unwrap();
    let seg = |file: &str, pos: u64, rows: u64| {
        json!({"field": "routed_experts", "file": file, "offset": 0, "pos": pos,
               "rows": rows, "dtype": "uint8", "shape": [1]})
    };
    let merged = json!({"choices": [{"payload": [seg("p.bin", 0, 2), seg("p.bin", 2, 1), seg("d.bin", 3, 3)]}]});
    let colocated = json!({"choices": [{"payload": [seg("d.bin", 0, 3), seg("p.bin", 3, 3)]}]});
    let single = json!({"choices": [{"payload": [seg("p.bin", 0, 3), seg("d.bin", 3, 3)]}]});
    let len = |a: &Value, b: &Value, given: Option<u64>| {
        let options = Options {
            prompt_len: given,
            ..Options::default()
        };
        compare(a, &store, b, &store, &options).unwrap().choices[0]
            .prompt_len
            .map(|p| (p.len, p.source))
    };
    assert_eq!(
        len(&merged, &single, None),
        Some((3, PromptSource::Payload(Which::A)))
    );
    assert_eq!(
        len(&merged, &single, Some(5)),
        Some((5, PromptSource::Given))
    );
    let mut with_usage = single.clone();
    with_usage["usage"] = json!({"prompt_tokens": 4});
    assert_eq!(
        len(&merged, &with_usage, None),
        Some((4, PromptSource::Usage(Which::B)))
    );
    let one_file = json!({"choices": [{"payload": [seg("p.bin", 0, 3)]}]});
    assert_eq!(len(&one_file, &one_file, None), None);
    assert_eq!(
        len(&one_file, &colocated, None),
        Some((3, PromptSource::Payload(Which::B)))
    );
}

/// 10^5 one-row segments, each after a gap, against the same rows without
/// gaps: read run by run and compared in time linear in the segments (a
/// quadratic reading, one pass over the payload per run, takes minutes).
#[test]
fn many_runs_compare_in_linear_time() {
    let n: u64 = 100_000;
    let mut store = Store::memory();
    store.write("r.bin", vec![7; n as usize]).unwrap();
    let seg = |offset: u64, pos: u64, rows: u64| {
        json!({"field": "routed_experts", "file": "r.bin", "offset": offset, "pos": pos,
               "rows": rows, "dtype": "uint8", "shape": []})
    };
    let gaps =
        json!({"choices": [{"payload": (0..n).map(|i| seg(i, 2 * i, 1)).collect::<Vec<_>>()}]});
    let whole = json!({"choices": [{"payload": [seg(0, 0, 2 * n - 1)]}]});
    store.write("r.bin", vec![7; 2 * n as usize]).unwrap();
    let started = std::time::Instant::now();
    let report = compare(&gaps, &store, &whole, &store, &Options::default()).unwrap();
    let c = &report.choices[0];
    assert_eq!((c.compared, c.equal_rows), (n, n));
    assert_eq!(c.only_in_b.len() as u64, n - 1);
    assert!(started.elapsed().as_secs() < 20, "{:?}", started.elapsed());
}

/// Appends one CSR segment to `file` as the trainer's writer lays it out
/// (`rows + 1` uint32 file offsets, then the values) and returns its offset.
fn put_csr(file: &mut Vec<u8>, rows: &[&[[u8; 4]]]) -> u64 {
    let offset = file.len() as u64;
    let mut at = offset as u32 + 4 * (rows.len() as u32 + 1);
    file.extend(at.to_le_bytes());
    for row in rows {
        at += 4 * row.len() as u32;
        file.extend(at.to_le_bytes());
    }
    for value in rows.iter().copied().flatten() {
        file.extend(value);
    }
    offset
}

fn csr_seg(field: &str, file: &str, offset: u64, pos: u64, rows: u64) -> Value {
    json!({"field": field, "file": file, "offset": offset, "pos": pos, "rows": rows,
           "dtype": "uint32", "shape": []})
}

/// K1 for CSR fields: `sampling_mask` compares by the values its offsets
/// point at (never by the offsets, which differ between the sides), each
/// row padded with the fill -1 to the widest row of either side; a
/// re-emitted row is read later-wins, and an empty row is the fill.
/// Expected values written by hand.
#[test]
fn csr_masks_compare_by_value_padded_to_the_widest_row_of_either_side() {
    let i = |x: i32| x.to_le_bytes();
    let field = "sampling_mask";
    // A: positions [2, 5): [3], [4, 5], [] in one segment (widest row 2);
    // a routed_experts segment elsewhere, which is not this field's.
    let mut a_file = vec![0u8; 8];
    let a_off = put_csr(&mut a_file, &[&[i(3)], &[i(4), i(5)], &[]]);
    let a = json!({"choices": [{"payload": [
        {"field": "routed_experts", "file": "r.bin", "offset": 0, "pos": 0, "rows": 9,
         "dtype": "uint8", "shape": []},
        csr_seg(field, "a.bin", a_off, 2, 3),
    ]}]});
    let mut store_a = Store::memory();
    store_a.write("a.bin", a_file).unwrap();
    store_a.write("r.bin", vec![0; 9]).unwrap();
    // B: [2, 4) holds [3], [9]; then a re-emission [3, 6) holds [5, 4], [],
    // [7, 8, 9] (widest row 3): position 3 reads [5, 4], a permutation.
    let mut b_file = Vec::new();
    let b1 = put_csr(&mut b_file, &[&[i(3)], &[i(9)]]);
    let b2 = put_csr(&mut b_file, &[&[i(5), i(4)], &[], &[i(7), i(8), i(9)]]);
    let b = json!({"choices": [{"payload": [
        csr_seg(field, "b.bin", b1, 2, 2),
        csr_seg(field, "b.bin", b2, 3, 3),
    ]}]});
    let mut store_b = Store::memory();
    store_b.write("b.bin", b_file).unwrap();
    let options = Options {
        field: field.to_owned(),
        ..Options::default()
    };
    let report = compare(&a, &store_a, &b, &store_b, &options).unwrap();
    assert_eq!(report.choices.len(), 1);
    let c = &report.choices[0];
    assert_eq!(c.row_shape, [1, 3]);
    assert_eq!(c.positions, Some(Rows::new(2, 6).unwrap()));
    assert_eq!((c.compared, c.equal_rows, c.equal_sets), (3, 2, 3));
    assert_eq!(c.cells.at(2), Some(&[Cell::Equal][..]));
    assert_eq!(c.cells.at(3), Some(&[Cell::SetEqual][..]));
    assert_eq!(c.cells.at(4), Some(&[Cell::Equal][..]));
    assert_eq!(c.only_in_b, [Rows::new(5, 6).unwrap()]);
    assert!(c.only_in_a.is_empty());
    assert_eq!(c.first_differences.len(), 1);
    assert_eq!(c.first_differences[0].position, 3);
    assert_eq!(c.first_differences[0].a, json!([[4, 5, -1]]));
    assert_eq!(c.first_differences[0].b, json!([[5, 4, -1]]));
    // The sides swapped: the same figures, one-sided the other way.
    let swapped = compare(&b, &store_b, &a, &store_a, &options).unwrap();
    let s = &swapped.choices[0];
    assert_eq!((s.compared, s.equal_rows, s.equal_sets), (3, 2, 3));
    assert_eq!(s.only_in_a, [Rows::new(5, 6).unwrap()]);
    assert_eq!(s.first_differences[0].a, json!([[5, 4, -1]]));
}

/// K1 for `sampling_mask_logprobs`: float32 values, the narrower side
/// padded with the fill -inf (so its row equals the wider side's, whose
/// trailing entries the reading filled with -inf); a second choice only A
/// has covers positions of A only.
#[test]
fn csr_logprobs_compare_by_value_padded_with_minus_infinity() {
    let f = |x: f32| x.to_le_bytes();
    let field = "sampling_mask_logprobs";
    let mut a_file = Vec::new();
    let a0 = put_csr(&mut a_file, &[&[f(-0.5)], &[f(-1.25), f(-2.0)]]);
    let a1 = put_csr(&mut a_file, &[&[f(-3.0)]]);
    let a = json!({"choices": [
        {"payload": [csr_seg(field, "a.bin", a0, 0, 2)]},
        {"payload": [csr_seg(field, "a.bin", a1, 7, 1)]},
    ]});
    let mut store_a = Store::memory();
    store_a.write("a.bin", a_file).unwrap();
    // B, one choice: the same rows, then one of 3 values at position 2.
    let mut b_file = Vec::new();
    let b0 = put_csr(
        &mut b_file,
        &[
            &[f(-0.5)],
            &[f(-1.25), f(-2.0)],
            &[f(0.0), f(-1.0), f(-9.5)],
        ],
    );
    let b = json!({"choices": [{"payload": [csr_seg(field, "b.bin", b0, 0, 3)]}]});
    let mut store_b = Store::memory();
    store_b.write("b.bin", b_file).unwrap();
    let options = Options {
        field: field.to_owned(),
        ..Options::default()
    };
    let report = compare(&a, &store_a, &b, &store_b, &options).unwrap();
    assert_eq!(report.choices.len(), 2);
    let c = &report.choices[0];
    assert_eq!(c.row_shape, [1, 3]);
    assert_eq!((c.compared, c.equal_rows, c.equal_sets), (2, 2, 2));
    assert_eq!(c.only_in_b, [Rows::new(2, 3).unwrap()]);
    assert!(c.first_differences.is_empty());
    let second = &report.choices[1];
    assert_eq!((second.compared, second.equal_rows), (0, 0));
    assert_eq!(second.only_in_a, [Rows::new(7, 8).unwrap()]);
    assert!(second.only_in_b.is_empty());
    // One value changed on B's side: that row differs, the other is equal.
    let mut b_other = Vec::new();
    let b0 = put_csr(&mut b_other, &[&[f(-0.5)], &[f(-1.25), f(-2.5)]]);
    let b = json!({"choices": [{"payload": [csr_seg(field, "b.bin", b0, 0, 2)]}]});
    store_b.write("b.bin", b_other).unwrap();
    let report = compare(&a, &store_a, &b, &store_b, &options).unwrap();
    let c = &report.choices[0];
    assert_eq!(c.row_shape, [1, 2]);
    assert_eq!((c.compared, c.equal_rows, c.equal_sets), (2, 1, 1));
    assert_eq!(c.first_differences[0].position, 1);
}
