//! The stability promise of the README ("Stability"), held by the compiler:
//! every name a router calls is named here with its signature, so a change
//! that removes, renames or retypes one fails to build this test, and the
//! kind names that Python users match on are spelled out literally.
//!
//! `cargo semver-checks` would check more, against a release, but does not
//! install within CI's budget on the 2-core machine (see the closing note of
//! issue 22); this is the part of its work that the promise needs.

// Spelling out each signature is the point of this file.
#![allow(clippy::type_complexity)]

use pd_stitch::algebra::{
    cut, merge_segments, row_bytes, Cuts, Dtype, Extent, MissingField, Overflow, Rows, Segment,
};
use pd_stitch::{bytes, Error, ErrorDetail, ErrorKind, Location, Side, Step, Stitch, Stitcher};
use serde_json::{json, Value};

type ValueMerge = fn(&Value, &mut Value) -> Result<bool, Error>;
type BytesMerge = fn(&[u8], &mut Vec<u8>) -> Result<bool, Error>;

#[test]
fn the_upstream_named_entry_points_keep_their_signatures() {
    let value: [ValueMerge; 3] = [
        pd_stitch::merge_routed_experts_for_pd,
        pd_stitch::merge_routed_payload_in_json,
        pd_stitch::merge_routed_experts_in_json,
    ];
    let bytes: [BytesMerge; 3] = [
        bytes::merge_routed_experts_for_pd,
        bytes::merge_routed_payload_in_json,
        bytes::merge_routed_experts_in_json,
    ];
    let has: fn(&Value) -> bool = pd_stitch::prefill_has_routed_experts;
    let has_bytes: fn(&[u8]) -> Result<bool, Error> = bytes::prefill_has_routed_experts;
    let parse: fn(Side, &[u8]) -> Result<Value, Error> = bytes::parse;

    // Nothing to stitch on either side: every merge says so, untouched.
    let empty = json!({"choices": [{}]});
    for merge in value {
        let mut decode = empty.clone();
        assert_eq!(merge(&empty, &mut decode), Ok(false));
        assert_eq!(decode, empty);
    }
    for merge in bytes {
        let mut decode = br#"{"choices": [{}]}"#.to_vec();
        assert_eq!(merge(br#"{"choices": [{}]}"#, &mut decode), Ok(false));
    }
    assert!(!has(&empty));
    assert_eq!(has_bytes(b"{}"), Ok(false));
    assert_eq!(parse(Side::Prefill, b"[]").map(|v| v.is_array()), Ok(true));
}

#[test]
fn the_stitcher_keeps_its_methods() {
    let merge: fn(&Stitcher, &Value, &mut Value, Stitch) -> Result<bool, Error> = Stitcher::merge;
    let merge_bytes: fn(&Stitcher, &[u8], &mut Vec<u8>, Stitch) -> Result<bool, Error> =
        Stitcher::merge_bytes;
    let has: fn(&Stitcher, &Value) -> bool = Stitcher::prefill_has_routed_experts;
    let has_bytes: fn(&Stitcher, &[u8]) -> Result<bool, Error> =
        Stitcher::prefill_bytes_has_routed_experts;
    let strict: fn(Stitcher) -> Stitcher = Stitcher::strict;
    let is_strict: fn(&Stitcher) -> bool = Stitcher::is_strict;

    let stitcher: Stitcher = strict(Stitcher::with_fields(["routed_experts"]).field("w"));
    assert!(is_strict(&stitcher));
    assert_eq!(
        stitcher.fields().collect::<Vec<&str>>(),
        ["routed_experts", "w"]
    );
    assert_eq!(Stitcher::new(), Stitcher::default());
    let empty = json!({"choices": [{}]});
    // Each selector, spelled out: a new one would be a breaking change here.
    for what in [Stitch::ForPd, Stitch::ByHandle, Stitch::Inline] {
        match what {
            Stitch::ForPd | Stitch::ByHandle | Stitch::Inline => {}
        }
        let mut decode = empty.clone();
        assert_eq!(merge(&stitcher, &empty, &mut decode, what), Ok(false));
        let mut text = b"{}".to_vec();
        assert_eq!(merge_bytes(&stitcher, b"{}", &mut text, what), Ok(false));
        let with: Result<Option<usize>, Error> =
            stitcher.merge_bytes_with(b"{}", b"{}", what, |stitched: bytes::Stitched<'_>| {
                stitched.len()
            });
        assert_eq!(with, Ok(None));
    }
    assert!(!has(&stitcher, &empty));
    assert_eq!(has_bytes(&stitcher, b"{}"), Ok(false));
}

/// `Stitch::Payload`, 0.3's name of `Stitch::ByHandle`, still reads for
/// one release, in an expression and in a pattern (deprecated: the doc
/// test of `Stitch::Payload` fails to build under `deny(deprecated)`).
#[test]
#[allow(deprecated)]
fn stitch_payload_still_names_by_handle() {
    let what: Stitch = Stitch::Payload;
    assert_eq!(what, Stitch::ByHandle);
    assert!(matches!(Stitch::ByHandle, Stitch::Payload));
    assert!(!matches!(Stitch::Inline, Stitch::Payload));
}

#[test]
fn errors_keep_their_kinds_names_and_locations() {
    let kind: fn(&Error) -> ErrorKind = Error::kind;
    let location: fn(&Error) -> &Location = Error::location;
    let as_str: fn(ErrorKind) -> &'static str = ErrorKind::as_str;
    // The names Python users match on (`StitchError.kind`): never renamed.
    let names: Vec<&str> = ErrorKind::ALL.into_iter().map(as_str).collect();
    assert_eq!(
        &names[..20],
        [
            "Structure",
            "Integer",
            "Dtype",
            "Overflow",
            "MissingPrefillField",
            "MissingDecodeRows",
            "Base64",
            "Npy",
            "Length",
            "FormMismatch",
            "RowShapeMismatch",
            "DtypeMismatch",
            "Coverage",
            "Layout",
            "Json",
            "StreamEvent",
            "StreamRowsRepeated",
            "StreamUnstitched",
            "StreamUnfinished",
            "StreamClosed",
        ]
    );
    // Kinds added since 0.2, in the order they came (a kind may be added in
    // a minor release: the enum is non_exhaustive).
    assert_eq!(
        &names[20..],
        ["Positions", "StreamPrefillMissing", "StreamPrefillRepeated"]
    );
    let prefill = json!({"choices": [{"payload": [{"field": "routed_experts", "file": "p",
        "offset": 0, "pos": 0, "rows": "3", "dtype": "uint8", "shape": []}]}]});
    let err = pd_stitch::merge_routed_payload_in_json(&prefill, &mut json!({})).unwrap_err();
    assert_eq!(kind(&err), ErrorKind::Integer);
    let at: &Location = location(&err);
    assert_eq!(at.side(), Side::Prefill);
    assert_eq!(
        at.path(),
        [
            Step::Key("choices".into()),
            Step::Index(0),
            Step::Key("payload".into()),
            Step::Index(0),
            Step::Key("rows".into())
        ]
    );
    assert_eq!(
        Location::root(Side::Decode).key("choices").index(1),
        Location::root(Side::Decode).key("choices").index(1)
    );
    let boxed: Box<dyn std::error::Error + Send + Sync + 'static> = Box::new(err);
    assert!(boxed
        .to_string()
        .starts_with("prefill choices[0].payload[0].rows: "));
}

/// `Error` is one pointer to its [`ErrorDetail`]: every merge returns a
/// `Result` with it, which moved 88 bytes on the success path when `Error`
/// was the enum itself.
#[test]
fn the_error_is_small_and_reads_as_its_detail() {
    use std::mem::size_of;
    assert!(size_of::<Error>() <= 16, "{} bytes", size_of::<Error>());
    assert!(
        size_of::<Result<bool, Error>>() <= 16,
        "{} bytes",
        size_of::<Result<bool, Error>>()
    );

    let detail: fn(&Error) -> &ErrorDetail = Error::detail;
    let into_detail: fn(Error) -> ErrorDetail = Error::into_detail;
    let from: fn(ErrorDetail) -> Error = Error::from;
    let detail_kind: fn(&ErrorDetail) -> ErrorKind = ErrorDetail::kind;
    let detail_location: fn(&ErrorDetail) -> &Location = ErrorDetail::location;

    let prefill = json!({"choices": [{"payload": [{"field": "routed_experts", "file": "p",
        "offset": 0, "pos": 0, "rows": "3", "dtype": "uint8", "shape": []}]}]});
    let err = pd_stitch::merge_routed_payload_in_json(&prefill, &mut json!({})).unwrap_err();
    let message = "prefill choices[0].payload[0].rows: must be a non-negative integer, got \"3\"";
    assert_eq!(err.to_string(), message);
    let inner = detail(&err);
    assert!(
        matches!(inner, ErrorDetail::Integer { got, .. } if got == "\"3\""),
        "{inner:?}"
    );
    assert_eq!(detail_kind(inner), ErrorKind::Integer);
    assert_eq!(
        detail_location(inner),
        &Location::root(Side::Prefill)
            .key("choices")
            .index(0)
            .key("payload")
            .index(0)
            .key("rows")
    );
    assert_eq!(inner.to_string(), message);
    // Debug shows the detail, as it did when `Error` was the enum.
    assert!(
        format!("{err:?}").starts_with("Integer { at: Location { side: Prefill, path: ["),
        "{err:?}"
    );
    let copy = err.clone();
    assert_eq!(from(into_detail(copy)), err);
}

#[test]
fn the_algebra_keeps_its_names() {
    let new_rows: fn(u64, u64) -> Option<Rows> = Rows::new;
    let with_len: fn(u64, u64) -> Option<Rows> = Rows::with_len;
    let new_extent: fn(u64, u64, u64, u64) -> Result<Extent, Overflow> = Extent::new;
    type File = &'static str;
    let cut_of: fn(&[Segment<File>]) -> Cuts = cut;
    let merge: fn(&[Segment<File>], &[Segment<File>]) -> Result<Vec<Segment<File>>, MissingField> =
        merge_segments;
    let row_bytes_of: fn(Dtype, Vec<u64>) -> Result<u64, Overflow> = row_bytes;

    assert_eq!(new_rows(2, 5), with_len(2, 3));
    assert_eq!(new_extent(0, 0, 1, 8).map(|e| e.end()), Ok(1));
    assert_eq!(row_bytes_of(Dtype::Uint16, vec![2, 4]), Ok(16));
    let prefill = [Segment::new("routed_experts", "p", 0, 0, 3, Dtype::Uint8, vec![2]).unwrap()];
    let decode = [Segment::new("routed_experts", "d", 0, 2, 3, Dtype::Uint8, vec![2]).unwrap()];
    assert_eq!(cut_of(&prefill).get("routed_experts"), Some(3));
    let merged = merge(&prefill, &decode).unwrap();
    assert_eq!((merged[1].pos(), merged[1].offset()), (3, 2));
    assert_eq!(Dtype::ALL.len(), 13);
}

#[test]
fn the_stream_stitcher_keeps_its_methods() {
    use pd_stitch::stream::StreamStitcher;
    let new: fn(Stitcher, Vec<u8>) -> Result<StreamStitcher, Error> =
        |stitcher, prefill| StreamStitcher::new(stitcher, prefill);
    let feed: fn(&mut StreamStitcher, &[u8], &mut Vec<u8>) -> Result<(), Error> =
        StreamStitcher::feed;
    let finish: fn(&mut StreamStitcher, &mut Vec<u8>) -> Result<(), Error> = StreamStitcher::finish;
    let mut stitcher = new(Stitcher::new(), b"{}".to_vec()).expect("JSON");
    let mut out = Vec::new();
    assert_eq!(feed(&mut stitcher, b"data: [DONE]\n\n", &mut out), Ok(()));
    assert_eq!(finish(&mut stitcher, &mut out), Ok(()));
    assert_eq!(out, b"data: [DONE]\n\n");
}
