//! Bytes in, bytes out: the entry points for a router that holds responses as
//! raw JSON bytes.
//!
//! A router receives both responses as bytes and sends the stitched one on as
//! bytes. Parsing both into `serde_json::Value` and serializing the decode
//! again costs more than the merge itself, and changes what the merge has no
//! business touching: key order, number spellings, escapes. The functions here
//! give the same answers as the `Value` ones (the same `Ok(bool)`, errors of
//! the same variant at the same place) while building no value tree: a
//! scanner (`src/bytes/scan/`) validates each text exactly as `serde_json` reads it and
//! indexes only the paths a merge reads, the shared merge plan reads that
//! index, and the decode's buffer is rewritten in place where only the
//! stitched values change:
//!
//! - the output is the decode's bytes with only the stitched rows values
//!   replaced (the places of the table of where rows sit: a choice's
//!   `payload` and `routed_experts`, SGLang's rows), as the plan's patches
//!   say: whitespace, key order, number spellings, escapes and every other
//!   byte are kept;
//! - `Ok(false)` and every error leave the decode's bytes untouched;
//! - text that is not JSON (not UTF-8, a syntax error, trailing characters,
//!   nesting deeper than `serde_json` allows) is [`ErrorDetail::Json`].
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
//! assert!(matches!(err.detail(), pd_stitch::ErrorDetail::Json { offset: 13, .. }));
//! assert_eq!(broken, b"{\"choices\": [}");
//! # Ok::<(), pd_stitch::Error>(())
//! ```
//!
//! [`Stitcher`](crate::Stitcher) does the same with its own fields:
//! [`Stitcher::merge_bytes`](crate::Stitcher::merge_bytes) and
//! [`Stitcher::prefill_bytes_has_routed_experts`](crate::Stitcher::prefill_bytes_has_routed_experts).
//!
//! ## Into a buffer of your own
//!
//! A decode held in a buffer the merge may not grow (an immutable body, a
//! Python `bytes`) would be copied into a `Vec` to be merged, and copied out
//! again. [`Stitcher::merge_bytes_with`](crate::Stitcher::merge_bytes_with)
//! reads it where it is and hands a [`Stitched`] to a closure, which learns
//! the merged length and writes the merged decode once, into memory it
//! allocates:
//!
//! ```
//! use pd_stitch::{Stitch, Stitcher};
//!
//! let prefill = br#"{"choices": [{"routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
//! let decode = br#"{"choices": [{"routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]}"#;
//!
//! let merged = Stitcher::new()
//!     .merge_bytes_with(prefill, decode, Stitch::ForPd, |stitched| {
//!         let mut out = vec![0; stitched.len()];
//!         assert!(stitched.write_into(&mut out));
//!         out
//!     })?
//!     .expect("the prefill has rows to stitch");
//! assert_eq!(
//!     merged,
//!     br#"{"choices": [{"routed_experts": {"data": "AQIDBAUG", "shape": [2,1,3], "start": 0, "dtype": "uint8"}}]}"#
//! );
//! # Ok::<(), pd_stitch::Error>(())
//! ```

mod buffer;
mod scan;
mod view;
mod write;

pub use buffer::Buffer;

use crate::codec::splice::{self, Edit};
use crate::error::{Error, ErrorDetail, Side};
use crate::format::stitch;
use crate::merge::{self, default_spec, Spec};
use crate::response::fields::DEFAULT_FIELDS;

pub(crate) use scan::Doc;
pub(crate) use view::ScannedValue;

/// [`merge_routed_experts_for_pd`](crate::merge_routed_experts_for_pd) on raw
/// JSON bytes: the inline and the by-handle merge, as one atomic step.
/// `decode` is rewritten on `Ok(true)` and untouched otherwise.
///
/// # Errors
///
/// [`ErrorDetail::Json`] when either side is not valid JSON (the prefill is read
/// first), else the errors of the `Value` function, at the same places; on
/// error `decode` is unchanged.
pub fn merge_routed_experts_for_pd(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_spec(stitch::Stitch::ForPd), prefill, decode)
}

/// [`merge_routed_payload_in_json`](crate::merge_routed_payload_in_json) on
/// raw JSON bytes: the by-handle merge.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_payload_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_spec(stitch::Stitch::ByHandle), prefill, decode)
}

/// [`merge_routed_experts_in_json`](crate::merge_routed_experts_in_json) on
/// raw JSON bytes: the inline merge.
///
/// # Errors
///
/// As [`merge_routed_experts_for_pd`].
pub fn merge_routed_experts_in_json(prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
    merge(default_spec(stitch::Stitch::Inline), prefill, decode)
}

/// [`prefill_has_routed_experts`](crate::prefill_has_routed_experts) on raw
/// JSON bytes.
///
/// # Errors
///
/// [`ErrorDetail::Json`] when `prefill` is not valid JSON.
pub fn prefill_has_routed_experts(prefill: &[u8]) -> Result<bool, Error> {
    prefill_has_rows(DEFAULT_FIELDS, prefill)
}

/// Parses one side's text into a `Value`, with this crate's error for text
/// that is not JSON: [`ErrorDetail::Json`] naming `side`, the byte offset where
/// `serde_json` stopped, and its message. For a caller that needs the tree
/// (to [`gather`](crate::gather) from it, say) and reports errors as the
/// merges do.
///
/// ```
/// use pd_stitch::{bytes, ErrorKind, Side};
///
/// let value = bytes::parse(Side::Decode, br#"{"choices": []}"#)?;
/// assert_eq!(value["choices"], serde_json::json!([]));
/// let err = bytes::parse(Side::Decode, b"{\"choices\":\n [}").unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Json);
/// assert!(err.to_string().starts_with("decode response: invalid JSON at byte 14: "), "{err}");
/// # Ok::<(), pd_stitch::Error>(())
/// ```
///
/// # Errors
///
/// [`ErrorDetail::Json`] when `text` is not valid JSON.
pub fn parse(side: Side, text: &[u8]) -> Result<serde_json::Value, Error> {
    serde_json::from_slice(text).map_err(|err| {
        ErrorDetail::Json {
            side,
            offset: byte_offset(text, err.line(), err.column()),
            message: err.to_string(),
        }
        .into()
    })
}

/// The byte offset of `serde_json`'s 1-based line and column (a column counts
/// bytes, and 0 means before the line's first byte).
fn byte_offset(text: &[u8], line: usize, column: usize) -> usize {
    let line_start = if line <= 1 {
        0
    } else {
        text.iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .nth(line - 2)
            .map_or(0, |(i, _)| i + 1)
    };
    (line_start + column.saturating_sub(1)).min(text.len())
}

/// Scans one side, or says why it is not JSON.
pub(crate) fn scan(side: Side, text: &[u8]) -> Result<Doc<'_>, Error> {
    Doc::scan(text).map_err(|invalid| {
        ErrorDetail::Json {
            side,
            offset: invalid.offset,
            message: invalid.message.to_owned(),
        }
        .into()
    })
}

/// The bytes merge as `spec` says, of the decode `decode` holds, rewritten
/// in place.
pub(crate) fn merge<S: AsRef<str>, B: Buffer + ?Sized>(
    spec: Spec<'_, S>,
    prefill: &[u8],
    decode: &mut B,
) -> Result<bool, B::Error> {
    let prefill = scan(Side::Prefill, prefill)?;
    let edits = {
        let doc = scan(Side::Decode, decode.bytes())?;
        let plan = merge::plan(spec, ScannedValue::root(&prefill), ScannedValue::root(&doc))?;
        match plan {
            None => return Ok(false),
            Some(patches) => write::edits(patches, &doc),
        }
    };
    buffer::apply(decode, &edits)?;
    Ok(true)
}

/// A merged decode, planned and validated but not yet written: how long it
/// is, and a way to write it into a buffer of that length. Given to the
/// closure of [`Stitcher::merge_bytes_with`](crate::Stitcher::merge_bytes_with).
pub struct Stitched<'a> {
    decode: &'a [u8],
    edits: &'a [Edit<'a>],
    len: usize,
}

impl Stitched<'_> {
    /// The length of the merged decode, in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the merged decode is empty (it never is: it is JSON).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes the merged decode into `out`, front to back, when `out` is
    /// exactly [`Stitched::len`] bytes long; otherwise writes nothing and
    /// returns `false`.
    pub fn write_into(&self, out: &mut [u8]) -> bool {
        if out.len() != self.len {
            return false;
        }
        splice::write_into(self.decode, self.edits, out);
        true
    }

    /// Appends the merged decode to `out` (grown once, to fit), written
    /// front to back: what [`Stitched::write_into`] writes, without a
    /// zeroed buffer first.
    pub(crate) fn extend_into(&self, out: &mut Vec<u8>) {
        splice::extend_into(self.decode, self.edits, out);
    }

    /// Whether the merged decode holds a `\n` or `\r` that the decode's
    /// text does not: one in the edits' new text. Text taken from within
    /// `clean`, known to hold none, is not searched; text rendered as
    /// base64 holds none.
    pub(crate) fn has_line_break(&self, clean: &[u8]) -> bool {
        self.edits.iter().any(|edit| edit.has_line_break(clean))
    }
}

impl std::fmt::Debug for Stitched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stitched")
            .field("len", &self.len)
            .field("edits", &self.edits.len())
            .finish()
    }
}

/// The bytes merge as `spec` says, written by `write` from a [`Stitched`];
/// `None` when there is nothing to stitch.
pub(crate) fn merge_with<S: AsRef<str>, R>(
    spec: Spec<'_, S>,
    prefill: &[u8],
    decode: &[u8],
    write: impl FnOnce(Stitched<'_>) -> R,
) -> Result<Option<R>, Error> {
    let prefill = scan(Side::Prefill, prefill)?;
    let doc = scan(Side::Decode, decode)?;
    merge_docs_with(spec, &prefill, &doc, write)
}

/// [`merge_with`] on a decode already scanned as `doc` (a streamed event's
/// data, scanned once to find its rows).
pub(crate) fn merge_doc_with<S: AsRef<str>, R>(
    spec: Spec<'_, S>,
    prefill: &[u8],
    doc: &Doc<'_>,
    write: impl FnOnce(Stitched<'_>) -> R,
) -> Result<Option<R>, Error> {
    let prefill = scan(Side::Prefill, prefill)?;
    merge_docs_with(spec, &prefill, doc, write)
}

/// [`merge_with`] on two scanned texts.
fn merge_docs_with<S: AsRef<str>, R>(
    spec: Spec<'_, S>,
    prefill: &Doc<'_>,
    doc: &Doc<'_>,
    write: impl FnOnce(Stitched<'_>) -> R,
) -> Result<Option<R>, Error> {
    let Some(plan) = merge::plan(spec, ScannedValue::root(prefill), ScannedValue::root(doc))?
    else {
        return Ok(None);
    };
    let edits = write::edits(plan, doc);
    let decode = doc.text();
    Ok(Some(write(Stitched {
        decode,
        len: splice::new_len(decode.len(), &edits),
        edits: &edits,
    })))
}

/// Whether the prefill text has rows of `fields` (or inline rows) to stitch.
pub(crate) fn prefill_has_rows<S: AsRef<str>>(fields: &[S], prefill: &[u8]) -> Result<bool, Error> {
    let doc = scan(Side::Prefill, prefill)?;
    Ok(merge::prefill_has_rows(fields, ScannedValue::root(&doc)))
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    /// A prefill narrower than the decode is widened; when its rows text
    /// holds JSON escapes (`\/` for a `/` of base64), the bytes reader
    /// unescapes it into an owned copy, and the widened runs are read from
    /// that copy: the merge is the `Value` merge of the parsed texts.
    #[test]
    fn a_widened_prefill_whose_rows_text_holds_escapes() {
        // 0xff bytes encode as "////": every character escaped.
        let prefill_data = "////".repeat(4).replace('/', "\\/");
        let prefill = format!(
            r#"{{"choices": [{{"routed_experts": {{"data": "{prefill_data}", "shape": [2, 2, 3], "start": 0, "dtype": "uint8"}}}}]}}"#
        );
        // Three rows of 2 x 3 uint16 from position 1.
        let decode = r#"{"choices": [{"routed_experts": {"data": "AQACAAMABAAFAAYABwAIAAkACgALAAwADQAOAA8AEAARABIA", "shape": [3, 2, 3], "start": 1, "dtype": "uint16"}}]}"#;
        let mut bytes = decode.as_bytes().to_vec();
        assert_eq!(
            super::merge_routed_experts_in_json(prefill.as_bytes(), &mut bytes),
            Ok(true)
        );
        let p: Value = serde_json::from_str(&prefill).unwrap();
        let mut d: Value = serde_json::from_str(decode).unwrap();
        assert_eq!(crate::merge_routed_experts_in_json(&p, &mut d), Ok(true));
        assert_eq!(serde_json::from_slice::<Value>(&bytes).unwrap(), d);
        // The prefill's rows, widened: 0xff 0x00 repeated.
        let data = d["choices"][0]["routed_experts"]["data"].as_str().unwrap();
        assert!(data.starts_with("/wD/AP8A"), "{data}");
    }
}
