//! The inline merge (compact and npy rows) and `merge_routed_experts_for_pd`:
//! laws I1-I4 of `docs/SPEC.md`, the NumPy fixtures, and every error path.
//!
//! Merged output is decoded with the `base64` crate and a naive `.npy` reader
//! written here, so nothing the crate encodes is checked by the crate itself.

use std::collections::HashMap;

use crate::support::{config, npy_read, npy_write, variant};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::{
    merge_routed_experts_for_pd, merge_routed_experts_in_json, merge_routed_payload_in_json,
    Base64Error, Error, ErrorDetail, Form, NpyError, Stitcher,
};
use proptest::prelude::*;
use serde_json::{json, Value};

// ----------------------------------------------------------------------------
// Rows, written and read back without the crate.
// ----------------------------------------------------------------------------

fn itemsize(dtype: &str) -> usize {
    match dtype {
        "uint8" | "int8" => 1,
        "uint16" => 2,
        "uint32" => 4,
        "uint64" => 8,
        other => panic!("{other}"),
    }
}

fn npy_descr(dtype: &str) -> &'static str {
    match dtype {
        "uint8" => "|u1",
        "uint16" => "<u2",
        "uint32" => "<u4",
        "uint64" => "<u8",
        "int8" => "|i1",
        other => panic!("{other}"),
    }
}

/// One side's inline rows: `rows[r]` holds the `layers * topk` values of
/// position `start + r`.
#[derive(Clone, Debug)]
struct Rows {
    start: u64,
    dtype: &'static str,
    rows: Vec<Vec<u64>>,
}

impl Rows {
    fn end(&self) -> u64 {
        self.start + self.rows.len() as u64
    }

    fn bytes(&self) -> Vec<u8> {
        let size = itemsize(self.dtype);
        self.rows
            .iter()
            .flatten()
            .flat_map(|v| v.to_le_bytes()[..size].to_vec())
            .collect()
    }

    fn compact(&self, layers: u64, topk: u64) -> Value {
        let mut v = json!({"data": STANDARD.encode(self.bytes()), "shape": [self.rows.len(), layers, topk],
                           "start": self.start, "x-meta": {"kept": true}});
        // Older writers omit dtype for uint8.
        if self.dtype != "uint8" || self.start % 2 == 0 {
            v["dtype"] = json!(self.dtype);
        }
        v
    }

    fn npy(&self, layers: u64, topk: u64) -> Value {
        let file = npy_write(
            npy_descr(self.dtype),
            &[self.rows.len() as u64, layers, topk],
            &self.bytes(),
        );
        json!(STANDARD.encode(file))
    }
}

/// Merged inline rows, decoded: start, dtype, shape, values in order.
#[derive(Debug, PartialEq)]
struct Decoded {
    start: u64,
    dtype: String,
    shape: Vec<u64>,
    values: Vec<u64>,
    bytes: Vec<u8>,
}

fn values(bytes: &[u8], dtype: &str) -> Vec<u64> {
    bytes
        .chunks(itemsize(dtype))
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

fn decode_compact(v: &Value) -> Decoded {
    let bytes = STANDARD.decode(v["data"].as_str().unwrap()).unwrap();
    let dtype = v["dtype"]
        .as_str()
        .expect("merged compact rows always name their dtype")
        .to_owned();
    Decoded {
        start: v["start"].as_u64().unwrap(),
        shape: v["shape"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect(),
        values: values(&bytes, &dtype),
        dtype,
        bytes,
    }
}

/// A naive `.npy` reader: version 1.0, header padded to 64 bytes.
/// A merged `.npy`, read with the test's own reader.
fn decode_npy(v: &Value) -> Decoded {
    let (descr, shape, bytes) = npy_read(&STANDARD.decode(v.as_str().unwrap()).unwrap());
    let dtype = match descr.as_str() {
        "|u1" => "uint8",
        "<u2" => "uint16",
        "<u4" => "uint32",
        "<u8" => "uint64",
        other => panic!("descr {other}"),
    };
    Decoded {
        start: 0,
        dtype: dtype.to_owned(),
        shape,
        values: values(&bytes, dtype),
        bytes,
    }
}

fn decode_rows(v: &Value) -> Decoded {
    if v.is_string() {
        decode_npy(v)
    } else {
        decode_compact(v)
    }
}

// ----------------------------------------------------------------------------
// Generators.
// ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Case {
    form: Form,
    layers: u64,
    topk: u64,
    prefill: Rows,
    decode: Vec<Rows>,
}

impl Case {
    fn value(&self, rows: &Rows) -> Value {
        match self.form {
            Form::Compact => rows.compact(self.layers, self.topk),
            _ => rows.npy(self.layers, self.topk),
        }
    }

    fn prefill_json(&self) -> Value {
        json!({"id": "p", "choices": [{"index": 0, "routed_experts": self.value(&self.prefill)}]})
    }

    fn decode_json(&self) -> Value {
        let choices: Vec<Value> = self
            .decode
            .iter()
            .enumerate()
            .map(|(i, d)| json!({"index": i, "text": "x", "routed_experts": self.value(d)}))
            .collect();
        json!({"id": "d", "choices": choices})
    }

    fn cut(&self) -> u64 {
        self.prefill.end()
    }
}

fn rows_of(dtype: &'static str, start: u64, n: usize, width: usize) -> impl Strategy<Value = Rows> {
    let max = if itemsize(dtype) == 8 {
        u64::MAX
    } else {
        (1u64 << (8 * itemsize(dtype))) - 1
    };
    proptest::collection::vec(proptest::collection::vec(0..=max, width), n)
        .prop_map(move |rows| Rows { start, dtype, rows })
}

/// Valid inline pairs: the decode starts at or before the cut and reaches it.
/// `same_dtype` keeps every side on one dtype (for I2, where by-handle rows
/// cannot widen).
fn case(same_dtype: bool) -> impl Strategy<Value = Case> {
    let dtype = || prop_oneof![3 => Just("uint8"), 3 => Just("uint16"), 1 => Just("uint32")];
    (
        prop_oneof![Just(Form::Compact), Just(Form::Npy)],
        1u64..=3,
        1u64..=3,
        dtype(),
        0u64..=6,
        0usize..=6,
        1usize..=3,
    )
        .prop_flat_map(move |(form, layers, topk, pdtype, pstart, plen, n)| {
            let pstart = if form == Form::Npy { 0 } else { pstart };
            let cut = pstart + plen as u64;
            let width = (layers * topk) as usize;
            let decode = (0..n)
                .map(|_| {
                    (
                        dtype(),
                        0..=cut.min(if form == Form::Npy { u64::MAX } else { 3 }),
                        0usize..=6,
                    )
                        .prop_flat_map(move |(ddtype, back, extra)| {
                            let ddtype = match form {
                                _ if same_dtype => pdtype,
                                Form::Npy if itemsize(ddtype) < itemsize(pdtype) => pdtype,
                                _ => ddtype,
                            };
                            let back = if form == Form::Npy { cut } else { back };
                            rows_of(ddtype, cut - back, back as usize + extra, width)
                        })
                })
                .collect::<Vec<_>>();
            (
                Just((form, layers, topk)),
                rows_of(pdtype, pstart, plen, width),
                decode,
            )
        })
        .prop_map(|((form, layers, topk), prefill, decode)| Case {
            form,
            layers,
            topk,
            prefill,
            decode,
        })
}

fn wider(a: &'static str, b: &'static str) -> &'static str {
    if itemsize(a) >= itemsize(b) {
        a
    } else {
        b
    }
}

fn merged(case: &Case) -> Result<Value, TestCaseError> {
    let mut after = case.decode_json();
    prop_assert_eq!(
        merge_routed_experts_in_json(&case.prefill_json(), &mut after),
        Ok(true)
    );
    Ok(after)
}

proptest! {
    #![proptest_config(config("inline"))]

    /// I1: the merged rows are the prefill's below the cut and the decode's
    /// from it on, values preserved across widening; start, shape and dtype
    /// follow; other keys of the decode object are kept.
    #[test]
    fn i1_prefill_rows_then_decode_rows_from_the_cut(case in case(false)) {
        let after = merged(&case)?;
        let cut = case.cut();
        for (i, d) in case.decode.iter().enumerate() {
            let value = &after["choices"][i]["routed_experts"];
            let got = decode_rows(value);
            let dtype = match case.form {
                Form::Compact => wider(case.prefill.dtype, d.dtype),
                _ => d.dtype,
            };
            let mut expected: Vec<u64> = case.prefill.rows.iter().flatten().copied().collect();
            for x in cut..d.end() {
                expected.extend(&d.rows[(x - d.start) as usize]);
            }
            prop_assert_eq!(got.start, case.prefill.start);
            prop_assert_eq!(&got.dtype, dtype);
            prop_assert_eq!(&got.shape, &vec![d.end() - case.prefill.start, case.layers, case.topk]);
            prop_assert_eq!(got.values, expected);
            if case.form == Form::Compact {
                prop_assert_eq!(&value["x-meta"], &json!({"kept": true}));
            }
            prop_assert_eq!(&after["choices"][i]["text"], &json!("x"));
        }
    }

    /// I2: the inline merge and the by-handle merge of the same rows (written
    /// to an in-memory store, the decode's split at random places) give
    /// bitwise-equal row arrays.
    #[test]
    fn i2_inline_and_by_handle_give_the_same_bytes(case in case(true), splits in proptest::collection::vec(any::<prop::sample::Index>(), 0..3)) {
        let after = merged(&case)?;
        let width = (case.layers * case.topk) as usize * itemsize(case.prefill.dtype);
        let mut files: HashMap<String, Vec<u8>> = HashMap::new();
        let seg = |file: &str, pos: u64, rows: u64, offset: u64| json!({
            "field": "routed_experts", "file": file, "offset": offset, "pos": pos, "rows": rows,
            "dtype": case.prefill.dtype, "shape": [case.layers, case.topk]});
        files.insert("p".into(), case.prefill.bytes());
        let prefill = json!({"choices": [{"payload": [seg("p", case.prefill.start, case.prefill.rows.len() as u64, 0)]}]});
        let mut choices = Vec::new();
        for (i, d) in case.decode.iter().enumerate() {
            let file = format!("d{i}");
            files.insert(file.clone(), d.bytes());
            let n = d.rows.len() as u64;
            let mut bounds: Vec<u64> = splits.iter().map(|s| s.index(n as usize + 1) as u64).collect();
            bounds.extend([0, n]);
            bounds.sort_unstable();
            bounds.dedup();
            let payload: Vec<Value> = bounds.windows(2)
                .map(|w| seg(&file, d.start + w[0], w[1] - w[0], w[0] * width as u64))
                .collect();
            choices.push(json!({"payload": payload}));
        }
        let mut by_handle = json!({"choices": choices});
        prop_assert_eq!(merge_routed_payload_in_json(&prefill, &mut by_handle), Ok(true));
        for i in 0..case.decode.len() {
            let inline = decode_rows(&after["choices"][i]["routed_experts"]);
            let payload = by_handle["choices"][i]["payload"].as_array().unwrap();
            let mut gathered = Vec::new();
            for x in inline.start..inline.start + inline.shape[0] {
                let covering: Vec<&Value> = payload.iter().filter(|s| {
                    let (pos, rows) = (s["pos"].as_u64().unwrap(), s["rows"].as_u64().unwrap());
                    pos <= x && x < pos + rows
                }).collect();
                prop_assert_eq!(covering.len(), 1, "position {}", x);
                let s = covering[0];
                let at = (s["offset"].as_u64().unwrap() + (x - s["pos"].as_u64().unwrap()) * width as u64) as usize;
                gathered.extend_from_slice(&files[s["file"].as_str().unwrap()][at..at + width]);
            }
            prop_assert_eq!(&gathered, &inline.bytes);
        }
    }

    /// `merge_routed_experts_for_pd` on a response with both kinds equals the
    /// inline merge followed by the by-handle merge.
    #[test]
    fn for_pd_is_inline_then_by_handle(case in case(false)) {
        let seg = json!({"field": "routed_experts", "file": "p", "offset": 0, "pos": 0, "rows": 4,
                         "dtype": "uint8", "shape": [1]});
        let dseg = json!({"field": "routed_experts", "file": "d", "offset": 0, "pos": 3, "rows": 4,
                          "dtype": "uint8", "shape": [1]});
        let mut prefill = case.prefill_json();
        prefill["choices"][0]["payload"] = json!([seg]);
        let mut decode = case.decode_json();
        for choice in decode["choices"].as_array_mut().unwrap() {
            choice["payload"] = json!([dseg]);
        }
        let mut both = decode.clone();
        prop_assert_eq!(merge_routed_experts_for_pd(&prefill, &mut both), Ok(true));
        let mut stepwise = decode.clone();
        prop_assert_eq!(merge_routed_experts_in_json(&prefill, &mut stepwise), Ok(true));
        prop_assert_eq!(merge_routed_payload_in_json(&prefill, &mut stepwise), Ok(true));
        prop_assert_eq!(both, stepwise);
    }
}

// ----------------------------------------------------------------------------
// I4: generated error cases.
// ----------------------------------------------------------------------------

#[derive(Clone, Debug)]
enum Fault {
    Base64(usize),
    Length(bool),
    RowShape,
    Gap,
    TooFewRows,
    Overflow,
    FormMix,
    UnknownDtype(&'static str),
    SignedDtype,
    MissingDecodeRows,
    MissingPrefillRows,
    NotRows(Value),
    NpyNot3d,
}

fn fault() -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0usize..6).prop_map(Fault::Base64),
        any::<bool>().prop_map(Fault::Length),
        Just(Fault::RowShape),
        Just(Fault::Gap),
        Just(Fault::TooFewRows),
        Just(Fault::Overflow),
        Just(Fault::FormMix),
        prop_oneof![Just("uint"), Just("<u2"), Just("u8"), Just("bfloat")]
            .prop_map(Fault::UnknownDtype),
        Just(Fault::SignedDtype),
        Just(Fault::MissingDecodeRows),
        Just(Fault::MissingPrefillRows),
        prop_oneof![Just(json!(5)), Just(json!([1])), Just(json!(true))].prop_map(Fault::NotRows),
        Just(Fault::NpyNot3d),
    ]
}

/// Corrupts canonical base64 text in one of several ways.
fn corrupt(text: &str, how: usize) -> String {
    match how {
        0 => format!("{text}A"), // length not a multiple of 4
        // Outside the alphabet (the empty text of zero rows has no first character to replace).
        1 => format!("-{}", text.get(1..).unwrap_or("AAA")),
        2 => format!("{text}\n"),     // white space
        3 => format!("{}====", text), // padding beyond the end
        4 => text.replace('+', "-").replace('/', "_") + "_AAA", // url-safe alphabet
        _ => format!("{text}AB=="),   // non-canonical: 'B' has unused bits set
    }
}

/// Injects `fault` into decode choice `i` (or the prefill) and returns the
/// pair with the expected variant name and location.
fn inject(case: &Case, fault: &Fault, i: usize) -> Option<(Value, Value, &'static str, String)> {
    let mut prefill = case.prefill_json();
    let mut decode = case.decode_json();
    let at = format!("decode choices[{i}].routed_experts");
    let d = case.decode[i].clone();
    let target = &mut decode["choices"][i]["routed_experts"];
    let compact = case.form == Form::Compact;
    let r = match fault {
        Fault::Base64(how) => {
            if compact {
                target["data"] = json!(corrupt(target["data"].as_str().unwrap(), *how));
                ("Base64", format!("{at}.data"))
            } else {
                *target = json!(corrupt(target.as_str().unwrap(), *how));
                ("Base64", at)
            }
        }
        Fault::Length(longer) if compact => {
            let text = target["data"].as_str().unwrap().to_owned();
            target["data"] = json!(if *longer {
                format!("AAAA{text}")
            } else if text.len() >= 4 {
                text[4..].to_owned()
            } else {
                return None;
            });
            ("Length", format!("{at}.data"))
        }
        Fault::Length(_) => {
            // The npy data one row short of its header's shape.
            let mut short = d.clone();
            short.rows.pop()?;
            let mut text = STANDARD
                .decode(short.npy(case.layers, case.topk).as_str().unwrap())
                .unwrap();
            let header_shape = format!("({}, ", short.rows.len());
            let real_shape = format!("({}, ", d.rows.len());
            let pos = text
                .windows(header_shape.len())
                .position(|w| w == header_shape.as_bytes())?;
            if header_shape.len() != real_shape.len() {
                return None;
            }
            text.splice(pos..pos + header_shape.len(), real_shape.bytes());
            *target = json!(STANDARD.encode(text));
            ("Npy", at)
        }
        Fault::RowShape => {
            let other = Rows {
                rows: d
                    .rows
                    .iter()
                    .map(|r| [r.clone(), r.clone()].concat())
                    .collect(),
                ..d.clone()
            };
            *target = match case.form {
                Form::Compact => other.compact(case.layers * 2, case.topk),
                _ => other.npy(case.layers * 2, case.topk),
            };
            ("RowShapeMismatch", at)
        }
        Fault::Gap if compact => {
            let gap = Rows {
                start: case.cut() + 1,
                ..d.clone()
            };
            *target = gap.compact(case.layers, case.topk);
            ("Coverage", at)
        }
        Fault::Gap => return None,
        Fault::TooFewRows => {
            // Rows that end before the cut need a decode starting before it.
            if d.start >= case.cut() {
                return None;
            }
            let mut short = d.clone();
            short.rows.truncate((case.cut() - 1 - d.start) as usize);
            *target = case.value(&short);
            ("Coverage", at)
        }
        Fault::Overflow if compact => {
            target["shape"] = json!([1u64 << 62, 1u64 << 62, 1]);
            ("Overflow", at)
        }
        Fault::Overflow => return None,
        Fault::FormMix => {
            *target = match case.form {
                Form::Compact => d.npy(case.layers, case.topk),
                _ => d.compact(case.layers, case.topk),
            };
            ("FormMismatch", at)
        }
        Fault::UnknownDtype(name) if compact => {
            target["dtype"] = json!(name);
            ("Dtype", format!("{at}.dtype"))
        }
        Fault::UnknownDtype(_) => return None,
        Fault::SignedDtype => {
            // int8 rows never widen or merge with unsigned ones.
            let signed = Rows {
                dtype: "int8",
                rows: d
                    .rows
                    .iter()
                    .map(|r| r.iter().map(|v| v & 0x7f).collect())
                    .collect(),
                ..d.clone()
            };
            if case.prefill.dtype == "int8" {
                return None;
            }
            *target = case.value(&signed);
            ("DtypeMismatch", at)
        }
        Fault::MissingDecodeRows => {
            decode["choices"][i]
                .as_object_mut()
                .unwrap()
                .remove("routed_experts");
            ("MissingDecodeRows", at)
        }
        Fault::MissingPrefillRows => {
            prefill["choices"][0]["routed_experts"] = Value::Null;
            (
                "MissingPrefillField",
                "decode choices[0].routed_experts".to_owned(),
            )
        }
        Fault::NotRows(value) => {
            *target = value.clone();
            ("Structure", at)
        }
        Fault::NpyNot3d if !compact => {
            *target = json!(STANDARD.encode(npy_write("|u1", &[2], &[1, 2])));
            ("Npy", at)
        }
        Fault::NpyNot3d => return None,
    };
    Some((prefill, decode, r.0, r.1))
}

type MergeFn = fn(&Value, &mut Value) -> Result<bool, Error>;

proptest! {
    #![proptest_config(config("inline"))]

    /// I4: one fault gives its variant at its place, through every entry point
    /// that merges inline rows, and leaves the decode unchanged.
    #[test]
    fn i4_errors_name_variant_and_place_and_change_nothing(case in case(false), fault in fault(), pick in any::<prop::sample::Index>()) {
        let i = pick.index(case.decode.len());
        let Some((prefill, decode, expected, at)) = inject(&case, &fault, i) else { return Ok(()); };
        let entry_points: [(&str, MergeFn); 4] = [
            ("inline", merge_routed_experts_in_json),
            ("for_pd", merge_routed_experts_for_pd),
            ("stitcher inline", |p, d| Stitcher::new().merge(p, d, pd_stitch::Stitch::Inline)),
            ("stitcher for_pd", |p, d| Stitcher::new().field("w").merge(p, d, pd_stitch::Stitch::ForPd)),
        ];
        for (name, merge) in entry_points {
            let mut after = decode.clone();
            let err = merge(&prefill, &mut after).unwrap_err();
            prop_assert_eq!(variant(&err), expected, "{}: {}", name, err);
            prop_assert_eq!(err.location().to_string(), at.clone(), "{}", name);
            prop_assert_eq!(&after, &decode, "{}", name);
        }
    }

    /// Atomic as a whole: an inline merge that would succeed is not applied
    /// when the by-handle part fails, and the other way round.
    #[test]
    fn for_pd_is_atomic_across_both_kinds(case in case(false), inline_fails in any::<bool>()) {
        let seg = json!({"field": "routed_experts", "file": "p", "offset": 0, "pos": 0, "rows": 4,
                         "dtype": "uint8", "shape": [1]});
        let mut prefill = case.prefill_json();
        prefill["choices"][0]["payload"] = json!([seg]);
        let mut decode = case.decode_json();
        let last = case.decode.len() - 1;
        decode["choices"][last]["payload"] = json!([{"field": "routed_experts", "file": "d", "offset": 0,
            "pos": 3, "rows": if inline_fails { json!(1) } else { json!(-1) }, "dtype": "uint8", "shape": [1]}]);
        if inline_fails {
            decode["choices"][last]["routed_experts"] = json!(7);
        }
        let mut after = decode.clone();
        let err = merge_routed_experts_for_pd(&prefill, &mut after).unwrap_err();
        prop_assert_eq!(variant(&err), if inline_fails { "Structure" } else { "Integer" });
        prop_assert_eq!(&after, &decode);
    }
}

// ----------------------------------------------------------------------------
// Hand-written cases.
// ----------------------------------------------------------------------------

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("tests/fixtures/npy/{name}")).unwrap()
}

fn npy_pair(prefill: &[u8], decode: &[u8]) -> (Value, Value) {
    (
        json!({"choices": [{"routed_experts": STANDARD.encode(prefill)}]}),
        json!({"choices": [{"routed_experts": STANDARD.encode(decode)}]}),
    )
}

/// Merges a file with itself: every row is the prefill's, so the output is the
/// array as the crate writes it.
fn rewrite(file: &[u8]) -> Result<Vec<u8>, Error> {
    let (prefill, mut decode) = npy_pair(file, file);
    merge_routed_experts_in_json(&prefill, &mut decode)?;
    Ok(STANDARD
        .decode(decode["choices"][0]["routed_experts"].as_str().unwrap())
        .unwrap())
}

/// I3: arrays NumPy wrote are read and written back byte for byte (versions
/// 2.0 and 3.0 come back as the 1.0 file NumPy writes by default).
#[test]
fn i3_numpy_files_are_reproduced_byte_for_byte() {
    for name in [
        "u1_3x2x4.npy",
        "u2_5x3x2.npy",
        "u1_0x48x8.npy",
        "u1_40x48x8.npy",
        "i4_2x2x2.npy",
    ] {
        assert_eq!(rewrite(&fixture(name)).unwrap(), fixture(name), "{name}");
    }
    for name in ["u2_5x3x2_v2.npy", "u2_5x3x2_v3.npy"] {
        assert_ne!(fixture(name), fixture("u2_5x3x2.npy"));
        assert_eq!(
            rewrite(&fixture(name)).unwrap(),
            fixture("u2_5x3x2.npy"),
            "{name}"
        );
    }
}

/// I3: a P/D merge of two NumPy files gives exactly the file NumPy writes for
/// the concatenated array, with and without widening.
#[test]
fn i3_pd_merge_of_numpy_files_is_what_numpy_writes() {
    for (decode, expected) in [
        ("pd_decode_u1.npy", "pd_merged_u1.npy"),
        ("pd_decode_u2.npy", "pd_merged_u1_u2.npy"),
    ] {
        let (prefill, mut merged) = npy_pair(&fixture("pd_prefill_u1.npy"), &fixture(decode));
        assert_eq!(
            merge_routed_experts_in_json(&prefill, &mut merged),
            Ok(true)
        );
        let got = STANDARD
            .decode(merged["choices"][0]["routed_experts"].as_str().unwrap())
            .unwrap();
        assert_eq!(got, fixture(expected), "{decode}");
    }
}

#[test]
fn i3_arrays_that_are_not_rows_are_refused() {
    let cases = [
        ("bad_big_endian.npy", NpyError::BigEndian(">u2".into())),
        ("bad_fortran.npy", NpyError::FortranOrder),
        ("bad_2d.npy", NpyError::Dimensions(2)),
        ("bad_object.npy", NpyError::Descr("|O".into())),
        (
            "bad_structured.npy",
            NpyError::Descr("a structured dtype".into()),
        ),
    ];
    for (name, expected) in cases {
        let (prefill, decode) = npy_pair(&fixture("u1_3x2x4.npy"), &fixture(name));
        let mut after = decode.clone();
        let err = merge_routed_experts_in_json(&prefill, &mut after).unwrap_err();
        match err.detail() {
            ErrorDetail::Npy { error, .. } => assert_eq!(error, &expected, "{name}"),
            other => panic!("{name}: expected an npy error, got {other:?}"),
        }
        assert_eq!(
            err.location().to_string(),
            "decode choices[0].routed_experts"
        );
        assert_eq!(after, decode);
    }
    // A npy prefill wider than the decode: the output keeps the decode's dtype, so no.
    let (prefill, decode) = npy_pair(&fixture("pd_decode_u2.npy"), &fixture("pd_decode_u1.npy"));
    let err = merge_routed_experts_in_json(&prefill, &mut decode.clone()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "decode choices[0].routed_experts: npy (a string) rows of dtype uint8 cannot be merged with the \
         prefill's uint16 (only unsigned integers widen, and npy keeps the decode's dtype)"
    );
}

#[test]
fn compact_seed_example_and_messages() {
    // uint8 rows (1, 3): prefill [5, 7), decode [6, 9).
    let prefill = json!({"choices": [{"routed_experts": {"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 5}}]});
    let decode = json!({"choices": [{"routed_experts": {"data": "CQkJBwgJCgsM", "shape": [3, 1, 3], "start": 6, "dtype": "uint8", "extra": 1}}]});
    let mut after = decode.clone();
    assert_eq!(merge_routed_experts_in_json(&prefill, &mut after), Ok(true));
    assert_eq!(
        after["choices"][0]["routed_experts"],
        json!({"data": "AQIDBAUGBwgJCgsM", "shape": [4, 1, 3], "start": 5, "dtype": "uint8", "extra": 1})
    );

    let with = |key: &str, value: Value| {
        let mut d = decode.clone();
        d["choices"][0]["routed_experts"][key] = value;
        d
    };
    let cases = [
        (with("start", json!(8)), "decode choices[0].routed_experts: decode rows [8, 11) must contain the cut 7 (prefill rows end there); positions between them would be missing"),
        (with("start", json!(3)), "decode choices[0].routed_experts: decode rows [3, 6) must contain the cut 7 (prefill rows end there); there are too few rows"),
        (with("shape", json!([3, 3, 1])), "decode choices[0].routed_experts: rows have shape [3, 1] but the prefill's have [1, 3]"),
        (with("shape", json!([3, 1])), "decode choices[0].routed_experts.shape: must be an array of 3 non-negative integers, got [3,1]"),
        (with("shape", json!([4, 1, 3])), "decode choices[0].routed_experts.data: decodes to 9 bytes, but shape and dtype need 12"),
        (with("data", json!("CQkJBwgJCgs=")), "decode choices[0].routed_experts.data: decodes to 8 bytes, but shape and dtype need 9"),
        (with("data", json!("CQkJBwgJCg==")), "decode choices[0].routed_experts.data: decodes to 7 bytes, but shape and dtype need 9"),
        (with("data", json!("CQkJBwgJCh==")), "decode choices[0].routed_experts.data: invalid base64: character at 9 has unused bits set (not the canonical encoding)"),
        (with("data", json!(17)), "decode choices[0].routed_experts.data: must be a base64 string, got 17"),
        (with("start", json!(-1)), "decode choices[0].routed_experts.start: must be a non-negative integer, got -1"),
        (with("dtype", json!("int8")), "decode choices[0].routed_experts: compact (an object) rows of dtype int8 cannot be merged with the prefill's uint8 (only unsigned integers widen)"),
        (with("dtype", json!(null)), "decode choices[0].routed_experts.dtype: unsupported dtype null; expected one of bool, int8, uint8, int16, uint16, float16, bfloat16, int32, uint32, float32, int64, uint64, float64"),
        (with("start", json!(u64::MAX - 1)), "decode choices[0].routed_experts: end position pos + rows = 18446744073709551614 + 3 overflows u64"),
    ];
    for (bad, message) in cases {
        let mut after = bad.clone();
        let err = merge_routed_experts_in_json(&prefill, &mut after).unwrap_err();
        assert_eq!(err.to_string(), message);
        assert_eq!(after, bad);
    }
}

#[test]
fn form_and_presence_rules() {
    let compact = json!({"data": "AQID", "shape": [1, 1, 3], "start": 0});
    let npy = json!(STANDARD.encode(fixture("u1_3x2x4.npy")));
    // Neither side: Ok(false), untouched.
    let mut d = json!({"choices": [{"routed_experts": null}, {}]});
    assert_eq!(
        merge_routed_experts_in_json(&json!({"choices": [{}]}), &mut d),
        Ok(false)
    );
    assert_eq!(d, json!({"choices": [{"routed_experts": null}, {}]}));
    // Decode has rows, prefill none.
    let mut d = json!({"choices": [{}, {"routed_experts": compact}]});
    let err = merge_routed_experts_in_json(&json!({"choices": [{"routed_experts": null}]}), &mut d)
        .unwrap_err();
    assert_eq!(err.to_string(), "decode choices[1].routed_experts: the decode has rows of field \"routed_experts\" but prefill choices[0] has none, so the prompt's rows are missing");
    // Prefill has rows, a decode choice none.
    let p = json!({"choices": [{"routed_experts": compact}]});
    let mut d = json!({"choices": [{"routed_experts": compact}, {"routed_experts": null}]});
    let err = merge_routed_experts_in_json(&p, &mut d).unwrap_err();
    assert_eq!(err.to_string(), "decode choices[1].routed_experts: the prefill has inline routed_experts but this decode choice has none");
    // A mix of forms.
    let mut d = json!({"choices": [{"routed_experts": npy}]});
    let err = merge_routed_experts_in_json(&p, &mut d).unwrap_err();
    assert_eq!(err.to_string(), "decode choices[0].routed_experts: rows are npy (a string) but the prefill's are compact (an object)");
    assert!(matches!(
        err.detail(),
        ErrorDetail::FormMismatch {
            prefill: Form::Compact,
            decode: Form::Npy,
            ..
        }
    ));
    // Malformed prefill rows are an error even with nothing else to merge.
    let err = merge_routed_experts_in_json(
        &json!({"choices": [{"routed_experts": "@@@@"}]}),
        &mut json!({}),
    )
    .unwrap_err();
    assert_eq!(err.to_string(), "prefill choices[0].routed_experts: invalid base64: character '@' at 0 is not in the standard alphabet");
    assert!(matches!(
        err.detail(),
        ErrorDetail::Base64 {
            error: Base64Error::Character { at: 0, byte: b'@' },
            ..
        }
    ));
    // The by-handle entry point ignores inline rows, and the other way round.
    let mut d = json!({"choices": [{"routed_experts": compact}]});
    assert_eq!(merge_routed_payload_in_json(&p, &mut d), Ok(false));
}

#[test]
fn compact_widening_both_ways_and_the_splice_boundary() {
    // uint16 prefill [0, 1) of (1, 1), uint8 decode [0, 3): the decode widens.
    let p = json!({"choices": [{"routed_experts": {"data": "AAE=", "shape": [1, 1, 1], "start": 0, "dtype": "uint16"}}]});
    let mut d =
        json!({"choices": [{"routed_experts": {"data": "CQoL", "shape": [3, 1, 1], "start": 0}}]});
    merge_routed_experts_in_json(&p, &mut d).unwrap();
    // 0x0100 then 10, 11 as uint16 little-endian.
    assert_eq!(
        d["choices"][0]["routed_experts"],
        json!({"data": "AAEKAAsA", "shape": [3, 1, 1], "start": 0, "dtype": "uint16"})
    );
    // Equal dtypes whose byte cut is not on a 3-byte boundary are re-encoded.
    let p =
        json!({"choices": [{"routed_experts": {"data": "AQ==", "shape": [1, 1, 1], "start": 0}}]});
    let mut d =
        json!({"choices": [{"routed_experts": {"data": "CQoL", "shape": [3, 1, 1], "start": 0}}]});
    merge_routed_experts_in_json(&p, &mut d).unwrap();
    assert_eq!(d["choices"][0]["routed_experts"]["data"], "AQoL");
}

/// Compact rows are checked in a fixed order, so that with several faults the
/// first is the one reported: `data` a string, `shape` three integers,
/// `start`, `dtype`, the base64 itself, the arithmetic, the length.
#[test]
fn compact_faults_are_reported_in_order() {
    let prefill =
        json!({"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0}}]});
    let check = |rows: Value, at: &str| {
        let decode = json!({"choices": [{"routed_experts": rows}]});
        let err = merge_routed_experts_in_json(&prefill, &mut decode.clone()).unwrap_err();
        assert_eq!(
            err.location().to_string(),
            format!("decode choices[0].routed_experts{at}"),
            "{err}"
        );
    };
    check(
        json!({"data": 1, "shape": [3], "start": -1, "dtype": "x"}),
        ".data",
    );
    check(
        json!({"data": "@", "shape": [3, 1], "start": -1, "dtype": "x"}),
        ".shape",
    );
    check(
        json!({"data": "@", "shape": [1, 1, -3], "start": -1, "dtype": "x"}),
        ".shape[2]",
    );
    check(
        json!({"data": "@", "shape": [1, 1, 3], "start": -1, "dtype": "x"}),
        ".start",
    );
    check(
        json!({"data": "@", "shape": [1, 1, 3], "start": 0, "dtype": "x"}),
        ".dtype",
    );
    check(
        json!({"data": "@", "shape": [u64::MAX, 2, 3], "start": 0}),
        ".data",
    );
    check(
        json!({"data": "AQID", "shape": [u64::MAX, 2, 3], "start": 0}),
        "",
    );
    check(
        json!({"data": "AQID", "shape": [2, 1, 3], "start": 0}),
        ".data",
    );
}

/// uint64 is the widest unsigned dtype: narrower rows widen into it in both
/// forms, keeping every value, high bytes included.
#[test]
fn rows_widen_into_uint64() {
    let le = |values: &[u64], size: usize| -> Vec<u8> {
        values
            .iter()
            .flat_map(|v| v.to_le_bytes()[..size].to_vec())
            .collect()
    };
    let compact = |values: &[u64], dtype: &str, size: usize, start: u64| {
        json!({"data": STANDARD.encode(le(values, size)), "shape": [values.len() / 2, 1, 2],
               "start": start, "dtype": dtype})
    };
    // Compact, the decode wider: uint32 prefill [0, 1), uint64 decode [1, 3).
    let p = json!({"choices": [{"routed_experts": compact(&[0xdead_beef, 7], "uint32", 4, 0)}]});
    let mut d = json!({"choices": [{"routed_experts":
        compact(&[u64::MAX, 1 << 40, 3, 4], "uint64", 8, 1)}]});
    assert_eq!(merge_routed_experts_in_json(&p, &mut d), Ok(true));
    let merged = decode_compact(&d["choices"][0]["routed_experts"]);
    assert_eq!(
        (
            merged.start,
            merged.shape,
            merged.dtype.as_str(),
            merged.values
        ),
        (
            0,
            vec![3, 1, 2],
            "uint64",
            vec![0xdead_beef, 7, u64::MAX, 1 << 40, 3, 4]
        )
    );
    // Compact, the prefill wider: uint64 prefill [0, 1), uint8 decode [0, 2).
    let p = json!({"choices": [{"routed_experts": compact(&[u64::MAX - 1, 5], "uint64", 8, 0)}]});
    let mut d = json!({"choices": [{"routed_experts": compact(&[9, 9, 200, 1], "uint8", 1, 0)}]});
    assert_eq!(merge_routed_experts_in_json(&p, &mut d), Ok(true));
    let merged = decode_compact(&d["choices"][0]["routed_experts"]);
    assert_eq!(
        (merged.shape, merged.dtype.as_str(), merged.values),
        (vec![2, 1, 2], "uint64", vec![u64::MAX - 1, 5, 200, 1])
    );
    // npy: a uint8 prefill [0, 1) and a uint64 decode [0, 2); the output is
    // the decode's dtype.
    let (p, mut d) = npy_pair(
        &npy_write("|u1", &[1, 1, 2], &[1, 2]),
        &npy_write("<u8", &[2, 1, 2], &le(&[8, 8, 3, u64::MAX], 8)),
    );
    assert_eq!(merge_routed_experts_in_json(&p, &mut d), Ok(true));
    let merged = decode_npy(&d["choices"][0]["routed_experts"]);
    assert_eq!(
        (merged.shape, merged.dtype.as_str(), merged.values),
        (vec![2, 1, 2], "uint64", vec![1, 2, 3, u64::MAX])
    );
}
