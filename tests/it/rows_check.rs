//! The rows check (`gather::check_rows`): rows no engine should produce.
//! Its findings are property-tested against a naive reader written here (a
//! plain loop over positions and layers), and `testing::verify_stitched`
//! names a row of zeros a router delivers as what it is. Each kind on a
//! committed fixture (`tests/fixtures/rows/`), through `pd-stitch check` and
//! `pd-stitch compare` too, is the command's test
//! (`cli/tests/it/rows_check.rs`).

use pd_stitch::algebra::Dtype;
use pd_stitch::gather::{
    check_rows, RowFinding, RowProblem, RowsCheck, RowsCheckError, RowsReport,
};
use proptest::prelude::*;

use crate::support;

/// What the naive reader says of one layer: `(kind, id)` in the order
/// duplicate, out of range, negative, each for the first id that is one.
fn naive_layer(ids: &[i64], experts: Option<u64>) -> Vec<(&'static str, i64)> {
    let mut out = Vec::new();
    'dup: for i in 0..ids.len() {
        for j in 0..i {
            if ids[i] == ids[j] {
                out.push(("duplicate", ids[i]));
                break 'dup;
            }
        }
    }
    if let Some(experts) = experts {
        for &id in ids {
            if id >= 0 && id as u64 >= experts {
                out.push(("out-of-range", id));
                break;
            }
        }
    }
    for &id in ids {
        if id < 0 {
            out.push(("negative", id));
            break;
        }
    }
    out
}

/// One naive finding: choice, position, layer, kind, id.
type Naive = (usize, u64, Option<u64>, &'static str, Option<i64>);

/// The naive reader: `rows[x][layer][k]`, from position `start`.
fn naive(choice: usize, start: u64, rows: &[Vec<Vec<i64>>], experts: Option<u64>) -> Vec<Naive> {
    let mut out = Vec::new();
    for (x, row) in rows.iter().enumerate() {
        let position = start + x as u64;
        let top_k = row[0].len();
        let all_zero = row.iter().all(|layer| layer.iter().all(|&id| id == 0));
        if top_k > 1 && all_zero {
            out.push((choice, position, None, "zero-row", None));
            continue;
        }
        for (l, layer) in row.iter().enumerate() {
            for (kind, id) in naive_layer(layer, experts) {
                out.push((choice, position, Some(l as u64), kind, Some(id)));
            }
        }
    }
    out
}

/// The library's findings in the naive reader's terms.
fn seen(findings: &[RowFinding]) -> Vec<Naive> {
    findings
        .iter()
        .map(|f| {
            let id = match f.problem {
                RowProblem::Duplicate { id }
                | RowProblem::Negative { id }
                | RowProblem::OutOfRange { id, .. } => Some(id as i64),
                RowProblem::ZeroRow { .. } => None,
                _ => panic!("a kind the naive reader does not know: {f}"),
            };
            (f.choice, f.position, f.layer, f.problem.name(), id)
        })
        .collect()
}

/// Little-endian bytes of `rows` in `dtype`.
fn encode(dtype: Dtype, rows: &[Vec<Vec<i64>>]) -> Vec<u8> {
    let mut out = Vec::new();
    for id in rows.iter().flatten().flatten() {
        let bytes = id.to_le_bytes();
        out.extend_from_slice(&bytes[..dtype.itemsize() as usize]);
    }
    out
}

/// Rows of 1-4 layers of top-1 to top-4, 0-12 positions, ids from a small
/// range so that duplicates, zeros and ids out of range are common (signed
/// dtypes reach below zero).
fn rows() -> impl Strategy<Value = (Dtype, u64, Vec<Vec<Vec<i64>>>)> {
    let dtype = prop_oneof![
        Just(Dtype::Uint8),
        Just(Dtype::Uint16),
        Just(Dtype::Int8),
        Just(Dtype::Int32),
        Just(Dtype::Int64),
        Just(Dtype::Uint64),
    ];
    (dtype, 1usize..=4, 1usize..=4, 0usize..=12, 0u64..1000).prop_flat_map(
        |(dtype, layers, top_k, positions, start)| {
            let low = if dtype.is_unsigned() { 0 } else { -2 };
            // Whole zero rows now and then, beside rows of small ids.
            let row = prop_oneof![
                1 => Just(vec![vec![0i64; top_k]; layers]),
                6 => proptest::collection::vec(proptest::collection::vec(low..7i64, top_k), layers),
            ];
            (
                Just(dtype),
                Just(start),
                proptest::collection::vec(row, positions),
            )
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 512,
        ..support::config("rows_check")
    })]

    /// Every finding the check makes is the naive reader's, in the same
    /// order, and the counts add up; with a limit, the first ones are kept
    /// and all are counted.
    #[test]
    fn findings_are_the_naive_readers(
        (dtype, start, rows) in rows(),
        experts in proptest::option::of(0u64..8),
        choice in 0usize..3,
        limit in 0usize..6,
    ) {
        let shape = match rows.first() {
            Some(row) => vec![row.len() as u64, row[0].len() as u64],
            None => vec![2, 2],
        };
        let data = encode(dtype, &rows);
        let mut report = RowsReport::new();
        let check = RowsCheck { experts, limit: usize::MAX };
        check_rows(choice, start, dtype, &shape, &data, check, &mut report).unwrap();
        let expected = naive(choice, start, &rows, experts);
        prop_assert_eq!(seen(&report.findings), expected.clone());
        prop_assert_eq!(report.rows, rows.len() as u64);
        prop_assert_eq!(report.total(), expected.len() as u64);
        for (kind, n) in report.counts {
            let naive_n = expected.iter().filter(|f| f.3 == kind).count() as u64;
            prop_assert_eq!(n, naive_n, "{}", kind);
        }
        prop_assert_eq!(report.is_clean(), expected.is_empty());
        // The layer's ids travel with each finding.
        for f in &report.findings {
            if let Some(layer) = f.layer {
                let x = (f.position - start) as usize;
                let ids: Vec<i128> = rows[x][layer as usize].iter().map(|&i| i128::from(i)).collect();
                prop_assert_eq!(&f.ids, &ids);
            }
        }
        let mut limited = RowsReport::new();
        check_rows(choice, start, dtype, &shape, &data, RowsCheck { experts, limit }, &mut limited).unwrap();
        prop_assert_eq!(&limited.findings[..], &report.findings[..limit.min(report.findings.len())]);
        prop_assert_eq!(limited.counts, report.counts);
    }
}

#[test]
fn rows_that_are_not_ids_or_not_whole_rows_are_errors() {
    let mut report = RowsReport::new();
    let check = RowsCheck::default();
    assert_eq!(
        check_rows(2, 0, Dtype::Float32, &[1, 1], &[0; 4], check, &mut report),
        Err(RowsCheckError::NotIds {
            choice: 2,
            dtype: Dtype::Float32
        })
    );
    let ragged = check_rows(0, 0, Dtype::Uint16, &[2, 2], &[0; 10], check, &mut report)
        .expect_err("10 bytes are not rows of 8");
    assert_eq!(
        ragged.to_string(),
        "choice 0: 10 bytes are not whole rows of shape [2, 2] of uint16"
    );
    // Rows of no ids: nothing to check, and bytes beside them are ragged.
    assert!(check_rows(0, 0, Dtype::Uint8, &[2, 0], &[], check, &mut report).is_ok());
    assert!(check_rows(0, 0, Dtype::Uint8, &[2, 0], &[1], check, &mut report).is_err());
    // A shape whose row size overflows is ragged, not a panic.
    assert!(check_rows(
        0,
        0,
        Dtype::Uint64,
        &[u64::MAX, 2],
        &[1],
        check,
        &mut report
    )
    .is_err());
    assert_eq!(report.rows, 0);
}

/// An empty shape is one id per row (top-1: zeros are fine); a 1-D shape
/// is one layer.
#[test]
fn shapes_of_fewer_dimensions_are_one_layer() {
    let mut report = RowsReport::new();
    let check = RowsCheck::experts(Some(4));
    check_rows(0, 0, Dtype::Uint8, &[], &[0, 0, 5], check, &mut report).unwrap();
    assert_eq!(report.summary(), "1 out-of-range");
    assert_eq!(
        report.findings[0].to_string(),
        "choice 0, position 2, layer 0: expert 5 in [5] is not below the model's 4 experts"
    );
    let mut report = RowsReport::new();
    check_rows(0, 0, Dtype::Uint8, &[3], &[1, 2, 1], check, &mut report).unwrap();
    assert_eq!(
        report.findings[0].to_string(),
        "choice 0, position 0, layer 0: expert 1 twice in [1, 2, 1]"
    );
}

/// `verify_stitched` names a row of zeros a router delivers as a row no
/// engine produces, with its position, before holding it against the truth.
#[cfg(feature = "testing")]
#[test]
fn verify_stitched_names_a_zeroed_row() {
    use pd_stitch::sim::Wire;
    use pd_stitch::testing::{cases, verify_stitched, Knobs};
    use proptest::strategy::ValueTree;
    use proptest::test_runner::TestRunner;

    // A row of zeros is a finding only where top_k > 1 (a top-1 row may
    // name expert 0).
    let knobs = Knobs {
        wires: vec![Wire::Compact],
        hostile: false,
        top_k: 2..=64,
        ..Knobs::default()
    };
    let mut runner = TestRunner::deterministic();
    for _ in 0..16 {
        let case = cases(knobs.clone())
            .new_tree(&mut runner)
            .unwrap()
            .current();
        let mut merged = case.decode.clone();
        pd_stitch::merge_routed_experts_for_pd(&case.prefill, &mut merged).unwrap();
        verify_stitched(&case, &merged).unwrap();
        // The router zeroes the first row of choice 0.
        let rows = &mut merged["choices"][0]["routed_experts"];
        let mut data = support_base64_decode(rows["data"].as_str().unwrap());
        let row = data.len() / rows["shape"][0].as_u64().unwrap() as usize;
        data[..row].fill(0);
        rows["data"] = serde_json::json!(support_base64_encode(&data));
        let start = rows["start"].as_u64().unwrap();
        let mismatch = verify_stitched(&case, &merged).expect_err("a zero row");
        let [layers, top_k] = case.request().row_shape();
        assert_eq!(mismatch.position, Some(start));
        assert_eq!(
            mismatch.message,
            format!("a row no engine produces: all {layers} x {top_k} ids are 0 (a row nobody wrote: top_k > 1 never picks expert 0 twice)")
        );
    }
}

#[cfg(feature = "testing")]
fn support_base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[cfg(feature = "testing")]
fn support_base64_encode(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
