//! Test support: response generators and a deliberately naive reference model.
//!
//! The reference model knows nothing of intervals or of the crate's algebra. A
//! side's segments are expanded position by position; a file is a map from byte
//! address to a *tag* naming the (side, file, position, byte) that wrote it, so
//! reading the bytes a merged segment points at tells exactly whose row it is.
//! This is the in-memory file store of law L3: contents unique per (side, file,
//! position), with no collisions possible.
#![allow(dead_code)] // the modules behind `cli` and `testing` use some of it

pub mod episode;

use std::collections::{BTreeMap, BTreeSet, HashMap};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::{Error, ErrorDetail};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence};
use serde_json::{json, Map, Value};

pub const RE: &str = "routed_experts";
pub const W: &str = "routed_expert_weights";
pub const MASK: &str = "sampling_mask";

/// A proptest config whose regressions land in
/// `proptest-regressions/<name>.txt` at the crate root, and nowhere else:
/// `name` is a bare name (ASCII letters, digits, `_` and `-`, with `/`
/// between subdirectories), checked by [`regressions_path`]. (Integration tests
/// have no `lib.rs` beside them, so proptest's default would put the file next
/// to the test source.) The case count comes from `PROPTEST_CASES` (256 when
/// unset).
pub fn config(name: &str) -> Config {
    let path = regressions_path(name).unwrap_or_else(|why| panic!("{why}"));
    Config {
        // proptest wants a `&'static str`; a config lives as long as its test.
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(Box::leak(
            path.into_boxed_str(),
        )))),
        ..Config::default()
    }
}

/// `<crate root>/proptest-regressions/<name>.txt`, or why `name` is refused:
/// it must be one or more `/`-separated parts, each non-empty and made of ASCII
/// letters, digits, `_` and `-` (so no `..`, no leading `/`, no extension).
pub fn regressions_path(name: &str) -> Result<String, String> {
    let part_ok = |part: &str| {
        !part.is_empty()
            && part
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
    };
    if name.split('/').all(part_ok) {
        Ok(format!(
            "{}/proptest-regressions/{name}.txt",
            env!("CARGO_MANIFEST_DIR")
        ))
    } else {
        Err(format!(
            "proptest regressions name {name:?}: want ASCII letters, digits, `_`, `-` \
             and `/` between non-empty parts, giving proptest-regressions/<name>.txt"
        ))
    }
}

#[test]
fn regressions_go_only_under_proptest_regressions() {
    let root = env!("CARGO_MANIFEST_DIR");
    for (name, file) in [
        ("laws", "laws.txt"),
        ("router_testing", "router_testing.txt"),
        ("codec/base64", "codec/base64.txt"),
        ("a-b_C9", "a-b_C9.txt"),
    ] {
        assert_eq!(
            regressions_path(name),
            Ok(format!("{root}/proptest-regressions/{file}"))
        );
    }
    for bad in [
        "",
        "/",
        "/laws",
        "laws/",
        "a//b",
        "..",
        "../laws",
        "a/../../b",
        "./laws",
        "laws.txt",
        "proptest-regressions/laws.txt",
        "bytes ",
        "a\\b",
        "C:laws",
        "é",
        "la\0ws",
    ] {
        assert!(regressions_path(bad).is_err(), "{bad:?} accepted");
    }
}

#[test]
#[should_panic(expected = "proptest regressions name \"../bytes\"")]
fn config_refuses_a_path_out_of_proptest_regressions() {
    config("../bytes");
}

/// One payload segment as a test writes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Seg {
    pub field: String,
    pub file: String,
    pub offset: u64,
    pub pos: u64,
    pub rows: u64,
    pub dtype: &'static str,
    pub shape: Vec<u64>,
    /// An unknown key the merge must carry along untouched.
    pub extra: Option<Value>,
}

impl Seg {
    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "field": self.field, "file": self.file, "offset": self.offset,
            "pos": self.pos, "rows": self.rows, "dtype": self.dtype, "shape": self.shape,
        });
        if let Some(extra) = &self.extra {
            v["x-extra"] = extra.clone();
        }
        v
    }
}

/// A payload item: a segment, or any other JSON value.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    Seg(Seg),
    Raw(Value),
}

impl Item {
    pub fn to_json(&self) -> Value {
        match self {
            Item::Seg(seg) => seg.to_json(),
            Item::Raw(v) => v.clone(),
        }
    }
}

/// A decode choice's `payload`: absent, `null`, or a list.
#[derive(Clone, Debug)]
pub enum Payload {
    Absent,
    Null,
    Items(Vec<Item>),
}

/// A prefill/decode response pair: the prefill's `choices[0].payload`, and
/// each decode choice's payload.
#[derive(Clone, Debug)]
pub struct Pair {
    pub prefill: Vec<Item>,
    pub decode: Vec<Payload>,
}

impl Pair {
    pub fn prefill_json(&self) -> Value {
        let payload: Vec<Value> = self.prefill.iter().map(Item::to_json).collect();
        json!({
            "id": "cmpl-prefill", "object": "text_completion",
            "choices": [{"index": 0, "token_ids": [7], "finish_reason": "length", "payload": payload}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1},
        })
    }

    pub fn decode_json(&self) -> Value {
        let choices: Vec<Value> = self
            .decode
            .iter()
            .enumerate()
            .map(|(i, payload)| {
                let mut choice = json!({"index": i, "token_ids": [1, 2, 3], "logprobs": null});
                match payload {
                    Payload::Absent => {}
                    Payload::Null => choice["payload"] = Value::Null,
                    Payload::Items(items) => {
                        choice["payload"] = Value::Array(items.iter().map(Item::to_json).collect())
                    }
                }
                choice
            })
            .collect();
        json!({"id": "cmpl-decode", "object": "text_completion", "choices": choices, "usage": {}})
    }
}

/// The name of an error's variant, to compare with what a test expects.
pub fn variant(err: &Error) -> &'static str {
    match err.detail() {
        ErrorDetail::Structure { .. } => "Structure",
        ErrorDetail::Integer { .. } => "Integer",
        ErrorDetail::Dtype { .. } => "Dtype",
        ErrorDetail::Overflow { .. } => "Overflow",
        ErrorDetail::MissingPrefillField { .. } => "MissingPrefillField",
        ErrorDetail::MissingDecodeRows { .. } => "MissingDecodeRows",
        ErrorDetail::Base64 { .. } => "Base64",
        ErrorDetail::Npy { .. } => "Npy",
        ErrorDetail::Length { .. } => "Length",
        ErrorDetail::FormMismatch { .. } => "FormMismatch",
        ErrorDetail::RowShapeMismatch { .. } => "RowShapeMismatch",
        ErrorDetail::DtypeMismatch { .. } => "DtypeMismatch",
        ErrorDetail::Coverage { .. } => "Coverage",
        _ => "unknown",
    }
}

/// A naive `.npy` writer, independent of the crate's: version 1.0, a C-order
/// array, the header padded with spaces to a multiple of 64 bytes.
pub fn npy_write(descr: &str, dims: &[u64], data: &[u8]) -> Vec<u8> {
    let shape: Vec<String> = dims.iter().map(u64::to_string).collect();
    let dict = format!(
        "{{'descr': '{descr}', 'fortran_order': False, 'shape': ({}), }}",
        shape.join(", ")
    );
    let padded = (10 + dict.len() + 1).div_ceil(64) * 64 - 10;
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend_from_slice(&u16::try_from(padded).unwrap().to_le_bytes());
    file.extend_from_slice(dict.as_bytes());
    file.resize(10 + padded - 1, b' ');
    file.push(b'\n');
    file.extend_from_slice(data);
    file
}

/// A naive `.npy` reader for version 1.0 C-order files: descr, shape, data.
/// Asserts what a merged file must be: version 1.0, header padded to 64.
pub fn npy_read(file: &[u8]) -> (String, Vec<u64>, Vec<u8>) {
    assert_eq!(&file[..8], b"\x93NUMPY\x01\x00", "a version 1.0 .npy");
    let len = u16::from_le_bytes([file[8], file[9]]) as usize;
    assert_eq!((10 + len) % 64, 0, "header padded to 64 bytes");
    let header = std::str::from_utf8(&file[10..10 + len]).unwrap();
    assert!(
        header.ends_with('\n') && header.contains("'fortran_order': False"),
        "{header}"
    );
    let between =
        |from: &str, to: char| header.split(from).nth(1).unwrap().split(to).next().unwrap();
    let descr = between("'descr': '", '\'').to_owned();
    let shape = between("'shape': (", ')')
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap())
        .collect();
    (descr, shape, file[10 + len..].to_vec())
}

// ----------------------------------------------------------------------------
// The naive reference model.
// ----------------------------------------------------------------------------

/// Whether a JSON payload item is stitched under `fields` (spelled out again
/// here, independently of the crate).
pub fn is_stitched(item: &Value, fields: &[&str]) -> bool {
    item.get("field")
        .and_then(Value::as_str)
        .is_some_and(|f| fields.contains(&f))
        && item.is_object()
}

pub fn num(seg: &Value, key: &str) -> u64 {
    seg[key]
        .as_u64()
        .unwrap_or_else(|| panic!("{key} of {seg}"))
}

/// Row size in bytes, in u128 so that the model cannot overflow.
pub fn row_bytes(seg: &Value) -> u128 {
    let itemsize: u128 = match seg["dtype"].as_str().unwrap() {
        "bool" | "int8" | "uint8" => 1,
        "int16" | "uint16" | "float16" | "bfloat16" => 2,
        "int32" | "uint32" | "float32" => 4,
        "int64" | "uint64" | "float64" => 8,
        other => panic!("dtype {other}"),
    };
    seg["shape"]
        .as_array()
        .unwrap()
        .iter()
        .fold(itemsize, |acc, d| acc * u128::from(d.as_u64().unwrap()))
}

/// Every position a segment covers, one by one (test segments are short).
pub fn positions(seg: &Value) -> impl Iterator<Item = u64> {
    let (pos, rows) = (num(seg, "pos"), num(seg, "rows"));
    assert!(rows <= 4096, "test segments are short");
    (0..rows).map(move |i| pos + i)
}

/// Position -> indices (into `payload`) of the `field` segments covering it.
pub fn coverage(payload: &[Value], field: &str) -> BTreeMap<u64, Vec<usize>> {
    let mut cov: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (i, seg) in payload.iter().enumerate() {
        if is_stitched(seg, &[field]) {
            for x in positions(seg) {
                cov.entry(x).or_default().push(i);
            }
        }
    }
    cov
}

pub fn positions_of(payload: &[Value], field: &str) -> BTreeSet<u64> {
    coverage(payload, field).into_keys().collect()
}

/// The cut of `field`, computed naively: the largest `pos + rows`.
pub fn naive_cut(prefill: &[Value], field: &str) -> Option<u64> {
    prefill
        .iter()
        .filter(|s| is_stitched(s, &[field]))
        .map(|s| num(s, "pos") + num(s, "rows"))
        .max()
}

/// Who wrote a byte: the writer (side and choice), file, position, byte index
/// within the row.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Tag {
    pub writer: String,
    pub file: String,
    pub pos: u64,
    pub byte: u128,
}

/// An in-memory file store: file -> byte address -> tag.
#[derive(Default, Debug)]
pub struct Store {
    files: HashMap<String, HashMap<u128, Tag>>,
}

impl Store {
    /// Writes every row of every segment of `fields` in `payload`, tagged with
    /// `writer` (e.g. `"decode choice 1"`).
    pub fn write(&mut self, writer: &str, payload: &[Value], fields: &[&str]) {
        for seg in payload.iter().filter(|s| is_stitched(s, fields)) {
            let file = seg["file"].as_str().unwrap().to_owned();
            let rb = row_bytes(seg);
            for x in positions(seg) {
                let base = address(seg, x);
                for byte in 0..rb {
                    let tag = Tag {
                        writer: writer.to_owned(),
                        file: file.clone(),
                        pos: x,
                        byte,
                    };
                    let old = self
                        .files
                        .entry(file.clone())
                        .or_default()
                        .insert(base + byte, tag.clone());
                    assert!(
                        old.is_none() || old == Some(tag),
                        "test layout writes one byte twice"
                    );
                }
            }
        }
    }

    /// The tags of the row of position `x` that `seg` points at; `None` for a
    /// byte nobody wrote.
    pub fn read(&self, seg: &Value, x: u64) -> Vec<Option<Tag>> {
        let file = self.files.get(seg["file"].as_str().unwrap());
        let base = address(seg, x);
        (0..row_bytes(seg))
            .map(|byte| file.and_then(|f| f.get(&(base + byte))).cloned())
            .collect()
    }
}

/// The byte address of position `x`'s row in `seg`, in u128.
pub fn address(seg: &Value, x: u64) -> u128 {
    let (pos, offset) = (num(seg, "pos"), num(seg, "offset"));
    assert!(x >= pos);
    u128::from(offset) + u128::from(x - pos) * row_bytes(seg)
}

pub fn payload(choice: &Value) -> Vec<Value> {
    choice
        .get("payload")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

// ----------------------------------------------------------------------------
// Generators.

/// The keys the crate reads, so that random trees reach deep into its paths.
const KEYS: [&str; 12] = [
    "choices",
    "payload",
    "field",
    "pos",
    "rows",
    "offset",
    "dtype",
    "shape",
    "file",
    "routed_experts",
    "data",
    "start",
];

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(u64::MAX),
            Just(u64::MAX - 1),
            Just(1 << 63),
            Just(0u64),
            Just(1u64)
        ]
        .prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        prop_oneof![
            Just("routed_experts"),
            Just("routed_expert_weights"),
            Just("uint8"),
            Just("uint16"),
            Just("sampling_mask"),
            Just(""),
            Just("é\u{0}")
        ]
        .prop_map(Value::from),
        ".{0,8}".prop_map(Value::from),
        // Base64 of a .npy magic and version followed by random bytes, so the
        // header parser sees near-misses, not only garbage.
        (
            prop_oneof![Just(1u8), Just(2), Just(3), any::<u8>()],
            proptest::collection::vec(any::<u8>(), 0..80)
        )
            .prop_map(|(major, rest)| {
                let mut file = b"\x93NUMPY".to_vec();
                file.extend([major, 0]);
                file.extend(rest);
                Value::from(STANDARD.encode(file))
            }),
    ]
}

/// Arbitrary JSON trees, biased towards the keys and values the crate reads:
/// objects, arrays, strings, floats, huge and negative integers, near-miss
/// `.npy` base64, depth up to 6.
pub fn json_tree() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(6, 96, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec(
                (prop_oneof![4 => proptest::sample::select(KEYS.to_vec()).prop_map(str::to_owned), 1 => "[a-z]{1,4}"], inner),
                0..6
            )
            .prop_map(|entries| Value::Object(entries.into_iter().collect::<Map<String, Value>>())),
        ]
    })
}

// ----------------------------------------------------------------------------

fn dtype() -> impl Strategy<Value = &'static str> {
    prop_oneof![Just("uint8"), Just("uint16")]
}

/// `[start, start + len)` split into at most `max_parts` consecutive
/// non-empty parts, as (pos, rows).
fn split(start: u64, len: u64, max_parts: usize) -> impl Strategy<Value = Vec<(u64, u64)>> {
    let interior: Vec<u64> = (1..len).collect();
    let most = interior.len().min(max_parts - 1);
    proptest::sample::subsequence(interior, 0..=most).prop_map(move |cuts| {
        let mut bounds = vec![0];
        bounds.extend(cuts);
        bounds.push(len);
        bounds
            .windows(2)
            .map(|w| (start + w[0], w[1] - w[0]))
            .collect()
    })
}

/// The by-handle writer, as a real 1P1D deployment runs it: the prefill
/// computes rows `[0, P)` (1-3 segments, back to back in one file); each decode
/// choice computes rows `[P - 1, P + C - 1)` from its first forward, split into
/// 1-4 segments where preemptions happened, back to back in the decode file,
/// with a `sampling_mask` segment of the completion mixed in.
pub fn writer_pair() -> impl Strategy<Value = Pair> {
    (
        1u64..=12,
        1u64..=12,
        1usize..=4,
        dtype(),
        1u64..=3,
        1u64..=2,
    )
        .prop_flat_map(|(p, c, n, dtype, layers, topk)| {
            let decode = proptest::collection::vec(
                (
                    split(p - 1, c, 4),
                    any::<prop::sample::Index>(),
                    any::<bool>(),
                ),
                n,
            );
            (split(0, p, 3), decode, Just((dtype, vec![layers, topk])))
        })
        .prop_map(|(prefill_parts, decode_parts, (dtype, shape))| {
            let row = if dtype == "uint8" { 1 } else { 2 } * shape.iter().product::<u64>();
            let seg = |file: &str, offset: u64, (pos, rows): (u64, u64)| Seg {
                field: RE.into(),
                file: file.into(),
                offset,
                pos,
                rows,
                dtype,
                shape: shape.clone(),
                extra: None,
            };
            let mut offset = 0;
            let prefill = prefill_parts
                .into_iter()
                .map(|part| {
                    let s = seg("p.bin", offset, part);
                    offset += part.1 * row;
                    Item::Seg(s)
                })
                .collect();
            let mut offset = 4096;
            let decode = decode_parts
                .into_iter()
                .enumerate()
                .map(|(i, (parts, mask_at, with_mask))| {
                    let (first, last) =
                        (parts[0].0, parts.iter().map(|&(p, r)| p + r).max().unwrap());
                    let mut items: Vec<Item> = parts
                        .into_iter()
                        .map(|part| {
                            let s = seg("d.bin", offset, part);
                            offset += part.1 * row;
                            Item::Seg(s)
                        })
                        .collect();
                    if with_mask {
                        let mask = Seg {
                            field: MASK.into(),
                            file: format!("m{i}.bin"),
                            offset: first * 8,
                            pos: first,
                            rows: last - first,
                            dtype: "bool",
                            shape: vec![8],
                            extra: None,
                        };
                        items.insert(mask_at.index(items.len() + 1), Item::Seg(mask));
                    }
                    Payload::Items(items)
                })
                .collect();
            Pair { prefill, decode }
        })
}

/// Positions anywhere in `u64`: small ones, and ones close to `u64::MAX`.
fn base() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..24, 1 => (u64::MAX - 96)..=(u64::MAX - 64)]
}

/// Byte offsets, small or close to `u64::MAX` (leaving room for short rows).
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![3 => 0u64..1000, 1 => (u64::MAX - 400)..=(u64::MAX - 200)]
}

/// Segments of one field on one side: up to 3 of them, each 0-4 rows long,
/// from `base` on. When `disjoint`, they are laid one after another with gaps
/// of 0-3 positions (then shuffled); otherwise each starts anywhere in a short
/// window, so they may overlap each other.
fn field_segments(
    writer: String,
    field: &'static str,
    base: u64,
    disjoint: bool,
    min: usize,
) -> impl Strategy<Value = Vec<Seg>> {
    proptest::collection::vec(
        (
            0u64..=3,
            0u64..=4,
            offset(),
            dtype(),
            0u64..=2,
            any::<bool>(),
        ),
        min..=3,
    )
    .prop_map(move |parts| {
        let mut next = base;
        parts
            .into_iter()
            .enumerate()
            .map(|(i, (gap, rows, offset, dtype, width, extra))| {
                let pos = if disjoint { next + gap } else { base + gap * 2 };
                next = pos + rows;
                Seg {
                    field: field.into(),
                    file: format!("{writer}-{field}-{i}.bin"),
                    offset,
                    pos,
                    rows,
                    dtype,
                    shape: if width == 0 { vec![] } else { vec![width, 1] },
                    extra: extra.then(|| json!({"trace": [&writer, i]})),
                }
            })
            .collect()
    })
    .prop_shuffle()
}

/// Non-stitched payload items, malformed ones included: they must pass through.
pub fn raw_item() -> impl Strategy<Value = Item> {
    prop_oneof![
        Just(json!({"field": MASK, "file": "m.bin", "offset": 0, "pos": 1, "rows": 2, "dtype": "bool", "shape": [4]})),
        Just(json!({"field": MASK, "pos": -1, "rows": "x", "dtype": "nope"})),
        Just(json!({"field": 7, "pos": 0})),
        Just(json!({"pos": 0, "rows": 1})),
        Just(json!("a string")),
        Just(json!(42)),
        Just(json!(null)),
        Just(json!([{"field": RE}])),
        Just(json!({"field": "routed_experts_v2", "pos": 3.5})),
    ]
    .prop_map(Item::Raw)
}

/// Mixes `raw` items into `segs` at random places.
fn mix(segs: Vec<Seg>, raw: Vec<(Item, prop::sample::Index)>) -> Vec<Item> {
    let mut items: Vec<Item> = segs.into_iter().map(Item::Seg).collect();
    for (item, at) in raw {
        let i = at.index(items.len() + 1);
        items.insert(i, item);
    }
    items
}

/// Arbitrary layouts over the stitched fields `{RE, W}`: gaps, overlaps
/// across sides, empty segments, positions and offsets near `u64::MAX`,
/// dtypes and widths that differ between segments, unknown keys, and
/// non-stitched items. The prefill always has a segment of `RE` (possibly an
/// empty one) and the decode only uses fields the prefill has, so the merge
/// succeeds. Within one side and field, segments are disjoint when `disjoint`.
pub fn arbitrary_pair(disjoint: bool) -> impl Strategy<Value = Pair> {
    (base(), any::<bool>(), -6i64..=10, 1usize..=3)
        .prop_flat_map(move |(base, with_w, shift, n)| {
            let dbase = if shift < 0 {
                base.saturating_sub(shift.unsigned_abs())
            } else {
                base + shift as u64
            };
            let raw =
                || proptest::collection::vec((raw_item(), any::<prop::sample::Index>()), 0..=2);
            let prefill = (
                field_segments("prefill".into(), RE, base, disjoint, 1),
                field_segments("prefill".into(), W, base, disjoint, usize::from(with_w)),
                raw(),
            )
                .prop_map(move |(re, w, raw)| {
                    let mut segs = re;
                    if with_w {
                        segs.extend(w);
                    }
                    mix(segs, raw)
                });
            let choices: Vec<_> = (0..n)
                .map(|i| {
                    (
                        field_segments(format!("decode{i}"), RE, dbase, disjoint, 0),
                        field_segments(format!("decode{i}"), W, dbase, disjoint, 0),
                        raw(),
                        0u8..8,
                    )
                        .prop_map(move |(re, w, raw, kind)| match kind {
                            0 => Payload::Absent,
                            1 => Payload::Null,
                            _ => {
                                let mut segs = re;
                                if with_w {
                                    segs.extend(w);
                                }
                                Payload::Items(mix(segs, raw))
                            }
                        })
                })
                .collect();
            (prefill, choices)
        })
        .prop_map(|(prefill, decode)| Pair { prefill, decode })
}

/// Merges `prefill` into `decode` through the `Value` and the bytes path
/// (`Stitch::ForPd`), which must agree, and on an error leave the decode as
/// it was; the merged decode, or the error.
pub fn merge_both(
    stitcher: &pd_stitch::Stitcher,
    prefill: &Value,
    decode: &Value,
) -> Result<Value, pd_stitch::Error> {
    let mut value = decode.clone();
    let got = stitcher.merge(prefill, &mut value, pd_stitch::Stitch::ForPd);
    let p = serde_json::to_vec(prefill).unwrap();
    let mut d = serde_json::to_vec(decode).unwrap();
    let before = d.clone();
    let got_bytes = stitcher.merge_bytes(&p, &mut d, pd_stitch::Stitch::ForPd);
    match (&got, &got_bytes) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b);
            assert_eq!(serde_json::from_slice::<Value>(&d).unwrap(), value);
        }
        (Err(a), Err(b)) => {
            assert_eq!(a, b);
            assert_eq!(&value, decode, "an error changed the decode");
            assert_eq!(d, before, "an error changed the decode's bytes");
        }
        _ => panic!("Value {got:?} but bytes {got_bytes:?}"),
    }
    got.map(|_| value)
}

/// The prefill response with its last row taken away, so that the merge cuts
/// one position early and takes the decode's own (wrong) row for the last
/// prompt position: the classic off-by-one of P/D stitching.
pub fn cut_one_early(prefill: &Value) -> Value {
    let mut prefill = prefill.clone();
    let choice = &mut prefill["choices"][0];
    if let Some(payload) = choice.get_mut("payload").and_then(Value::as_array_mut) {
        let last = payload
            .iter_mut()
            .filter(|s| s["field"] == "routed_experts")
            .max_by_key(|s| s["pos"].as_u64().unwrap() + s["rows"].as_u64().unwrap());
        if let Some(last) = last {
            last["rows"] = json!(last["rows"].as_u64().unwrap() - 1);
        }
    }
    match choice.get_mut("routed_experts") {
        Some(Value::Object(compact)) => {
            let seq = compact["shape"][0].as_u64().unwrap();
            let data = STANDARD.decode(compact["data"].as_str().unwrap()).unwrap();
            let keep = data.len() / seq as usize * (seq as usize - 1);
            compact.insert("data".into(), json!(STANDARD.encode(&data[..keep])));
            compact["shape"][0] = json!(seq - 1);
        }
        Some(npy @ Value::String(_)) => {
            // Rebuild the .npy with one row fewer.
            let (descr, mut dims, data) =
                npy_read(&STANDARD.decode(npy.as_str().unwrap()).unwrap());
            let row = data.len() / dims[0] as usize;
            dims[0] -= 1;
            *npy = json!(STANDARD.encode(npy_write(&descr, &dims, &data[..data.len() - row])));
        }
        _ => {}
    }
    prefill
}
