//! Bytes in, bytes out: the entry points for a router that holds responses as
//! raw JSON bytes.
//!
//! A router receives both responses as bytes and sends the stitched one on as
//! bytes. Parsing both into `serde_json::Value` and serializing the decode
//! again costs more than the merge itself, and changes what the merge has no
//! business touching: key order, number spellings, escapes. The functions here
//! give the same answers as the `Value` ones (the same `Ok(bool)`, errors of
//! the same variant at the same place) while building no value tree: a
//! scanner (`src/bytes/scan.rs`) validates each text exactly as `serde_json` reads it and
//! indexes only the paths a merge reads, the shared merge plan reads that
//! index, and the decode's buffer is rewritten in place where only the
//! stitched values change:
//!
//! - the output is the decode's bytes with only `choices[i].payload` and
//!   `choices[i].routed_experts` values replaced: whitespace, key order,
//!   number spellings, escapes and every other byte are kept;
//! - `Ok(false)` and every error leave the decode's bytes untouched;
//! - text that is not JSON (not UTF-8, a syntax error, trailing characters,
//!   nesting deeper than `serde_json` allows) is [`Error::Json`].
//!
//! ```
//! use pd_stitch::bytes;
//!
//! let prefill = br#"{"choices": [{"payload": [
//!     {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3,
//!      "dtype": "uint16", "shape": [2, 4]}]}]}"#;
//! let mut decode = br#"{"id": "cmpl-1", "choices": [{"logprobs": [-0.50E+0], "payload": [
//!     {"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 2, "rows": 3,
//!      "dtype": "uint16", "shape": [2, 4]}]}]}"#.to_vec();
//!
//! assert!(bytes::merge_routed_experts_for_pd(prefill, &mut decode)?);
//! let text = String::from_utf8(decode).unwrap();
//! // The prefill's segment, then the decode's clipped at the cut (position 3,
//! // 16 bytes into d.bin); everything else as it was, byte for byte.
//! assert!(text.starts_with(r#"{"id": "cmpl-1", "choices": [{"logprobs": [-0.50E+0], "payload": [{"field": "routed_experts", "file": "p.bin""#));
//! assert!(text.contains(r#""offset": 16, "pos": 3, "rows": 2"#));
//!
//! // Not JSON: an error that says where, and the decode unchanged.
//! let mut broken = b"{\"choices\": [}".to_vec();
//! let err = bytes::merge_routed_experts_for_pd(prefill, &mut broken).unwrap_err();
//! assert!(matches!(err, pd_stitch::Error::Json { offset: 13, .. }));
//! assert_eq!(broken, b"{\"choices\": [}");
//! # Ok::<(), pd_stitch::Error>(())
//! ```
//!
//! [`Stitcher`](crate::Stitcher) has the same four with its own fields:
//! `merge_bytes_for_pd`, `merge_bytes_payload`, `merge_bytes_inline` and
//! `prefill_bytes_has_routed_experts`.

mod scan;
mod view;
mod write;

use crate::error::{Error, Side};
use crate::fields::DEFAULT_FIELDS;
use crate::merge::{self, default_mode, Mode, BOTH, BY_HANDLE, INLINE};

use scan::Doc;
use view::Node;

/// [`merge_routed_experts_for_pd`](crate::merge_routed_experts_for_pd) on raw
/// JSON bytes: the inline and the by-handle merge, as one atomic step.
/// `decode` is rewritten on `Ok(true)` and untouched otherwise.
///
/// # Errors
///
/// [`Error::Json`] when either side is not valid JSON (the prefill is read
/// first), else the errors of the `Value` function, at the same places; on
/// error `decode` is unchanged.
pub fn merge_routed_experts_for_pd(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_mode(BOTH), prefill, decode)
}

/// [`merge_routed_payload_in_json`](crate::merge_routed_payload_in_json) on
/// raw JSON bytes: the by-handle merge.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_payload_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_mode(BY_HANDLE), prefill, decode)
}

/// [`merge_routed_experts_in_json`](crate::merge_routed_experts_in_json) on
/// raw JSON bytes: the inline merge.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_experts_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_mode(INLINE), prefill, decode)
}

/// [`prefill_has_routed_experts`](crate::prefill_has_routed_experts) on raw
/// JSON bytes.
///
/// # Errors
///
/// [`Error::Json`] when `prefill` is not valid JSON.
pub fn prefill_has_routed_experts(prefill: &[u8]) -> Result<bool, Error> {
    prefill_has_rows(DEFAULT_FIELDS, prefill)
}

/// Scans one side, or says why it is not JSON.
fn scan(side: Side, text: &[u8]) -> Result<Doc<'_>, Error> {
    Doc::scan(text).map_err(|invalid| Error::Json {
        side,
        offset: invalid.offset,
        message: invalid.message.to_owned(),
    })
}

/// The bytes merge as `mode` says.
pub(crate) fn merge<S: AsRef<str>>(
    mode: Mode<'_, S>,
    prefill: &[u8],
    decode: &mut Vec<u8>,
) -> Result<bool, Error> {
    let prefill = scan(Side::Prefill, prefill)?;
    let edits = {
        let doc = scan(Side::Decode, decode)?;
        let plan = merge::plan(mode, Node::root(&prefill), Node::root(&doc))?;
        match plan {
            None => return Ok(false),
            Some(plan) => write::edits(plan, Node::root(&prefill), &doc),
        }
    };
    crate::splice::apply(decode, &edits);
    Ok(true)
}

/// Whether the prefill text has rows of `fields` (or inline rows) to stitch.
pub(crate) fn prefill_has_rows<S: AsRef<str>>(fields: &[S], prefill: &[u8]) -> Result<bool, Error> {
    let doc = scan(Side::Prefill, prefill)?;
    Ok(crate::handle::prefill_has_rows(fields, Node::root(&doc)))
}
