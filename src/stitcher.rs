//! [`Stitcher`]: the JSON entry points with a configurable set of stitched
//! fields, and the free functions that use the default set.

use serde_json::Value;

use crate::error::Error;
#[cfg(doc)]
use crate::error::ErrorDetail;
use crate::format::stitch::Stitch;
use crate::merge::value::merge;
use crate::merge::{default_spec, Spec};
use crate::response::fields::DEFAULT_FIELDS;

/// The JSON entry points, for a chosen set of stitched fields.
///
/// A payload segment is *stitched* when it is an object whose `field` is one
/// of the stitcher's fields; every other payload item passes through. The
/// default set is [`DEFAULT_FIELDS`](crate::DEFAULT_FIELDS),
/// `{"routed_experts", "routed_expert_weights"}`, which is what the free
/// functions ([`merge_routed_payload_in_json`], [`prefill_has_routed_experts`],
/// and those of [`bytes`](crate::bytes)) use. [`Stitcher::with_fields`] sets
/// the exact set (`routed_experts` alone, say), [`Stitcher::field`] adds one,
/// and [`Stitcher::strict`] also refuses merged layouts a trainer would
/// misread.
///
/// ```
/// use pd_stitch::{Stitch, Stitcher};
/// use serde_json::json;
///
/// let stitcher = Stitcher::new();
/// assert_eq!(stitcher.fields().collect::<Vec<_>>(), ["routed_experts", "routed_expert_weights"]);
/// let experts_only = Stitcher::with_fields(["routed_experts"]);
/// assert_eq!(experts_only.fields().collect::<Vec<_>>(), ["routed_experts"]);
///
/// let prefill = json!({"choices": [{"payload": [
///     {"field": "routed_expert_weights", "file": "p.bin", "offset": 0, "pos": 0, "rows": 4,
///      "dtype": "float32", "shape": [2, 2]}]}]});
/// let mut decode = json!({"choices": [{"payload": [
///     {"field": "routed_expert_weights", "file": "d.bin", "offset": 0, "pos": 3, "rows": 2,
///      "dtype": "float32", "shape": [2, 2]}]}]});
///
/// assert!(stitcher.prefill_has_routed_experts(&prefill));
/// assert!(!experts_only.prefill_has_routed_experts(&prefill));
/// assert!(stitcher.merge(&prefill, &mut decode, Stitch::ByHandle)?);
/// let payload = &decode["choices"][0]["payload"];
/// assert_eq!(payload[1]["pos"], 4);
/// assert_eq!(payload[1]["rows"], 1);
/// assert_eq!(payload[1]["offset"], 16); // one row of 2 x 2 float32 skipped
/// # Ok::<(), pd_stitch::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stitcher {
    fields: Vec<String>,
    strict: bool,
    /// SGLang's `(layers, top_k)`, when given.
    row_shape: Option<(u64, u64)>,
}

impl Default for Stitcher {
    /// Stitches [`DEFAULT_FIELDS`](crate::DEFAULT_FIELDS): `routed_experts`
    /// and `routed_expert_weights`; not strict.
    fn default() -> Stitcher {
        Stitcher::with_fields(DEFAULT_FIELDS.iter().copied())
    }
}

impl Stitcher {
    /// A stitcher of the default fields, the same as [`Stitcher::default`].
    pub fn new() -> Stitcher {
        Stitcher::default()
    }

    /// A stitcher of exactly `fields` (in order, a repeated name counted
    /// once); not strict. `Stitcher::with_fields(["routed_experts"])` stitches
    /// the routed experts alone, as versions before 0.2 did by default.
    pub fn with_fields<I>(fields: I) -> Stitcher
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        fields.into_iter().fold(
            Stitcher {
                fields: Vec::new(),
                strict: false,
                row_shape: None,
            },
            Stitcher::field,
        )
    }

    /// The same stitcher in strict mode: after planning and before writing,
    /// every decode choice's merged segments of each stitched field must
    /// tile their positions in payload order, with one row shape and
    /// compatible dtypes ([`algebra::check_layout`](crate::algebra::check_layout));
    /// otherwise the merge fails with [`ErrorDetail::Layout`] and the decode is
    /// untouched.
    ///
    /// ```
    /// use pd_stitch::{ErrorKind, Stitch, Stitcher};
    /// use serde_json::json;
    ///
    /// let seg = |file: &str, pos: u64, rows: u64| json!({"field": "routed_experts",
    ///     "file": file, "offset": 0, "pos": pos, "rows": rows, "dtype": "uint8", "shape": [2]});
    /// let prefill = json!({"choices": [{"payload": [seg("p.bin", 0, 3)]}]});
    /// // The decode skips position 4: [2, 4) then [5, 7).
    /// let mut decode = json!({"choices": [{"payload": [seg("d.bin", 2, 2), seg("e.bin", 5, 2)]}]});
    /// let before = decode.clone();
    ///
    /// let err = Stitcher::new().strict().merge(&prefill, &mut decode, Stitch::ByHandle);
    /// assert_eq!(err.map_err(|e| e.kind()), Err(ErrorKind::Layout));
    /// assert_eq!(decode, before);
    /// // Without strict mode the merge goes through, gap and all.
    /// assert!(Stitcher::new().merge(&prefill, &mut decode, Stitch::ByHandle)?);
    /// # Ok::<(), pd_stitch::Error>(())
    /// ```
    #[must_use]
    pub fn strict(mut self) -> Stitcher {
        self.strict = true;
        self
    }

    /// Whether this stitcher is strict ([`Stitcher::strict`]).
    pub fn is_strict(&self) -> bool {
        self.strict
    }

    /// SGLang's rows carry no shape: `layers * top_k` ids per position,
    /// which a router knows from the model's config. With it, every pair of
    /// SGLang responses SPEC section 10 accepts is placed; without it, a
    /// pair whose lengths fit two row widths is refused
    /// ([`PositionProblem::Ambiguous`](crate::algebra::PositionProblem::Ambiguous)).
    /// A shape of no ids makes every SGLang merge fail with
    /// [`PositionProblem::RowShape`](crate::algebra::PositionProblem::RowShape).
    ///
    /// ```
    /// use pd_stitch::{Stitch, Stitcher};
    /// use serde_json::json;
    ///
    /// // A prompt of 2 tokens, 3 generated; rows of 1 x 1 ids (int32, base64).
    /// let prefill = json!({"text": "", "meta_info": {
    ///     "prompt_tokens": 2, "completion_tokens": 1, "routed_experts": "CgAAAAsAAAA="}});
    /// let decode = json!({"text": "...", "meta_info": {
    ///     "prompt_tokens": 2, "completion_tokens": 3, "routed_experts": "AAAAAAAAAAAMAAAADQAAAA=="}});
    ///
    /// // Without the shape, these lengths also read as suffix-only rows of 2 ids.
    /// let err = Stitcher::new().merge(&prefill, &mut decode.clone(), Stitch::ForPd).unwrap_err();
    /// assert_eq!(err.kind(), pd_stitch::ErrorKind::Positions);
    ///
    /// let mut merged = decode.clone();
    /// assert!(Stitcher::new().row_shape(1, 1).merge(&prefill, &mut merged, Stitch::ForPd)?);
    /// // Ids 10, 11 (the prompt, from the prefill), then 12, 13 (the decode's own).
    /// assert_eq!(merged["meta_info"]["routed_experts"], "CgAAAAsAAAAMAAAADQAAAA==");
    /// # Ok::<(), pd_stitch::Error>(())
    /// ```
    #[must_use]
    pub fn row_shape(mut self, layers: u64, top_k: u64) -> Stitcher {
        self.row_shape = Some((layers, top_k));
        self
    }

    /// The SGLang row shape given with [`Stitcher::row_shape`].
    pub fn sglang_row_shape(&self) -> Option<(u64, u64)> {
        self.row_shape
    }

    /// The same stitcher, also stitching `name` (adding a field twice is the
    /// same as adding it once).
    #[must_use]
    pub fn field(mut self, name: impl Into<String>) -> Stitcher {
        let name = name.into();
        if !self.fields.contains(&name) {
            self.fields.push(name);
        }
        self
    }

    /// How this stitcher merges what `what` names.
    pub(crate) fn spec(&self, what: Stitch) -> Spec<'_, String> {
        Spec {
            fields: &self.fields,
            what,
            strict: self.strict,
            row_shape: self.row_shape,
            decode_counts: None,
        }
    }

    /// The stitched fields, in the order they were added.
    pub fn fields(&self) -> impl Iterator<Item = &str> + '_ {
        self.fields.iter().map(String::as_str)
    }

    /// The merge of the rows `what` names, on parsed responses: the prefill's
    /// rows, then the decode's from the cut, written into every decode
    /// choice. `Ok(false)`, `decode` untouched, when there is nothing to
    /// stitch. [`Stitch::ForPd`] is what a router calls; the free functions
    /// ([`merge_routed_experts_for_pd`], [`merge_routed_payload_in_json`],
    /// [`merge_routed_experts_in_json`]) are this with the default fields.
    ///
    /// ```
    /// use pd_stitch::{Stitch, Stitcher};
    /// use serde_json::json;
    ///
    /// let seg = |file: &str, pos: u64, rows: u64| json!({"field": "routed_experts",
    ///     "file": file, "offset": 0, "pos": pos, "rows": rows, "dtype": "uint8", "shape": [2]});
    /// let prefill = json!({"choices": [{"payload": [seg("p.bin", 0, 3)]}]});
    /// let mut decode = json!({"choices": [{"payload": [seg("d.bin", 2, 4)]}]});
    ///
    /// assert!(Stitcher::new().merge(&prefill, &mut decode, Stitch::ForPd)?);
    /// assert_eq!(decode["choices"][0]["payload"][1]["pos"], 3);
    /// # Ok::<(), pd_stitch::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// See [`merge_routed_experts_for_pd`]; on error `decode` is unchanged.
    pub fn merge(&self, prefill: &Value, decode: &mut Value, what: Stitch) -> Result<bool, Error> {
        merge(self.spec(what), prefill, decode)
    }

    /// [`merge`](Stitcher::merge) on raw JSON bytes, the decode rewritten in
    /// place; see [`bytes`](crate::bytes).
    ///
    /// # Errors
    ///
    /// [`ErrorDetail::Json`] when either side is not valid JSON, else as
    /// [`merge`](Stitcher::merge); on error `decode` is unchanged.
    pub fn merge_bytes(
        &self,
        prefill: &[u8],
        decode: &mut Vec<u8>,
        what: Stitch,
    ) -> Result<bool, Error> {
        crate::bytes::merge(self.spec(what), prefill, decode)
    }

    /// [`merge_bytes`](Stitcher::merge_bytes) on a decode held in any
    /// [`Buffer`](crate::bytes::Buffer): memory the merge rewrites in place
    /// but that its owner resizes (a Python `bytearray`, a fixed region).
    /// The buffer is asked to take the merged length before anything is
    /// written, and is left as it was on `Ok(false)` and on error.
    ///
    /// # Errors
    ///
    /// As [`merge_bytes`](Stitcher::merge_bytes), converted into the
    /// buffer's error type, or the buffer's own error when it cannot take
    /// the merged length.
    pub fn merge_bytes_in<B: crate::bytes::Buffer + ?Sized>(
        &self,
        prefill: &[u8],
        decode: &mut B,
        what: Stitch,
    ) -> Result<bool, B::Error> {
        crate::bytes::merge(self.spec(what), prefill, decode)
    }

    /// The bytes merge of the rows `what` names, reading `decode` where it is
    /// and handing the merged decode to `write` as a
    /// [`Stitched`](crate::bytes::Stitched), which
    /// says how long it is and writes it into a buffer the caller allocates:
    /// the merged decode is written once, and nothing of `decode` is copied
    /// first (see [`bytes`](crate::bytes)). `Ok(None)` when there is nothing
    /// to stitch; `write` is not called then, nor on error.
    ///
    /// # Errors
    ///
    /// As [`merge_bytes`](Stitcher::merge_bytes).
    pub fn merge_bytes_with<R>(
        &self,
        prefill: &[u8],
        decode: &[u8],
        what: Stitch,
        write: impl FnOnce(crate::bytes::Stitched<'_>) -> R,
    ) -> Result<Option<R>, Error> {
        crate::bytes::merge_with(self.spec(what), prefill, decode, write)
    }

    /// [`prefill_has_routed_experts`](Stitcher::prefill_has_routed_experts) on
    /// raw JSON bytes.
    ///
    /// # Errors
    ///
    /// [`ErrorDetail::Json`] when `prefill` is not valid JSON.
    pub fn prefill_bytes_has_routed_experts(&self, prefill: &[u8]) -> Result<bool, Error> {
        crate::bytes::prefill_has_rows(&self.fields, prefill)
    }

    /// Whether `prefill` has rows to stitch, at any place of the table of
    /// places (`pd_stitch::places::all()`): rows that are not null, or for
    /// rows by handle a payload segment of one of this stitcher's fields.
    pub fn prefill_has_routed_experts(&self, prefill: &Value) -> bool {
        crate::merge::prefill_has_rows(&self.fields, prefill)
    }
}

/// The spelled-out methods of 0.2, one per entry point and input type: kept
/// for one release so that routers and their CI keep building, each the one
/// [`Stitcher::merge`] or [`Stitcher::merge_bytes`] call it names.
impl Stitcher {
    /// `merge(prefill, decode, Stitch::ByHandle)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge`].
    #[deprecated(
        since = "0.3.0",
        note = "use `merge(prefill, decode, Stitch::ByHandle)`"
    )]
    pub fn merge_routed_payload_in_json(
        &self,
        prefill: &Value,
        decode: &mut Value,
    ) -> Result<bool, Error> {
        self.merge(prefill, decode, Stitch::ByHandle)
    }

    /// `merge(prefill, decode, Stitch::Inline)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge`].
    #[deprecated(since = "0.3.0", note = "use `merge(prefill, decode, Stitch::Inline)`")]
    pub fn merge_routed_experts_in_json(
        &self,
        prefill: &Value,
        decode: &mut Value,
    ) -> Result<bool, Error> {
        self.merge(prefill, decode, Stitch::Inline)
    }

    /// `merge(prefill, decode, Stitch::ForPd)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge`].
    #[deprecated(since = "0.3.0", note = "use `merge(prefill, decode, Stitch::ForPd)`")]
    pub fn merge_routed_experts_for_pd(
        &self,
        prefill: &Value,
        decode: &mut Value,
    ) -> Result<bool, Error> {
        self.merge(prefill, decode, Stitch::ForPd)
    }

    /// `merge_bytes(prefill, decode, Stitch::ForPd)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge_bytes`].
    #[deprecated(
        since = "0.3.0",
        note = "use `merge_bytes(prefill, decode, Stitch::ForPd)`"
    )]
    pub fn merge_bytes_for_pd(&self, prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
        self.merge_bytes(prefill, decode, Stitch::ForPd)
    }

    /// `merge_bytes(prefill, decode, Stitch::ByHandle)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge_bytes`].
    #[deprecated(
        since = "0.3.0",
        note = "use `merge_bytes(prefill, decode, Stitch::ByHandle)`"
    )]
    pub fn merge_bytes_payload(&self, prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
        self.merge_bytes(prefill, decode, Stitch::ByHandle)
    }

    /// `merge_bytes(prefill, decode, Stitch::Inline)`.
    ///
    /// # Errors
    ///
    /// As [`Stitcher::merge_bytes`].
    #[deprecated(
        since = "0.3.0",
        note = "use `merge_bytes(prefill, decode, Stitch::Inline)`"
    )]
    pub fn merge_bytes_inline(&self, prefill: &[u8], decode: &mut Vec<u8>) -> Result<bool, Error> {
        self.merge_bytes(prefill, decode, Stitch::Inline)
    }
}

/// The by-handle P/D merge of the segments of the default fields
/// ([`DEFAULT_FIELDS`](crate::DEFAULT_FIELDS): `routed_experts` and
/// `routed_expert_weights`) of `prefill` into `decode`, in place.
///
/// Returns `Ok(false)`, leaving `decode` untouched, when neither side has a
/// stitched segment; `Ok(true)` when the prefill's segments were stitched into
/// every decode choice. The files the segments point at are never read.
///
/// The rules, in short (`docs/SPEC.md` has them in full, with the laws that
/// the tests check):
///
/// - prefill segments come from `prefill.choices[0].payload` only;
/// - for each field, `cut = max(pos + rows)` over the prefill's segments;
/// - every decode choice's new `payload` is the prefill's stitched segments,
///   as they are, then its own items in order, where a stitched segment is
///   dropped when `pos + rows <= cut`, clipped to start at `cut` (with
///   `offset` moved by the skipped rows' bytes) when `pos < cut`, and kept
///   otherwise; other items pass through unchanged.
///
/// ```
/// use pd_stitch::merge_routed_payload_in_json;
/// use serde_json::json;
///
/// // Prefill rows [0, 3) and decode rows [2, 5) of uint16 (2, 4): 16-byte rows.
/// let prefill = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3,
///      "dtype": "uint16", "shape": [2, 4]}]}]});
/// let mut decode = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 2, "rows": 3,
///      "dtype": "uint16", "shape": [2, 4]},
///     {"field": "sampling_mask", "file": "m.bin", "offset": 0, "pos": 2, "rows": 3,
///      "dtype": "bool", "shape": [8]}]}]});
///
/// assert!(merge_routed_payload_in_json(&prefill, &mut decode)?);
/// let payload = decode["choices"][0]["payload"].as_array().unwrap();
/// assert_eq!(payload[0], prefill["choices"][0]["payload"][0]);
/// assert_eq!((&payload[1]["pos"], &payload[1]["rows"], &payload[1]["offset"]), (&json!(3), &json!(2), &json!(16)));
/// assert_eq!(payload[2]["field"], "sampling_mask"); // passes through
/// # Ok::<(), pd_stitch::Error>(())
/// ```
///
/// # Errors
///
/// On any error `decode` is exactly as it was.
///
/// - [`ErrorDetail::Integer`]: a stitched segment's `pos`, `rows`, `offset`
///   or a `shape` entry is not a JSON integer in `0..=u64::MAX`.
/// - [`ErrorDetail::Dtype`]: a stitched segment's `dtype` is not a supported
///   name.
/// - [`ErrorDetail::Overflow`]: `itemsize * prod(shape)`, `pos + rows` or
///   `offset + rows * row_bytes` does not fit in `u64`.
/// - [`ErrorDetail::MissingPrefillField`]: the decode has a stitched segment
///   of a field the prefill has none of.
/// - [`ErrorDetail::Structure`]: a stitched segment's `shape` is not an
///   array; or, with something to merge, `decode` is not an object,
///   `decode.choices` not an array, a choice not an object, or a `payload`
///   neither an array nor null.
pub fn merge_routed_payload_in_json(prefill: &Value, decode: &mut Value) -> Result<bool, Error> {
    merge(default_spec(Stitch::ByHandle), prefill, decode)
}

/// The inline P/D merge, in place, of the inline rows at every place of the
/// table of places that holds them (vLLM's and prime-rl's
/// `choices[i].routed_experts`, Dynamo's `nvext.routed_experts`, ...: SPEC
/// section 1a): the prefill's rows, then each decode choice's rows (or the
/// response's, where the response holds them) from the cut on.
///
/// Both inline forms are merged. **Compact** rows
/// (`{"data": <base64>, "shape": [seq, layers, topk], "start", "dtype"}`,
/// covering `[start, start + seq)`) merge with `cut = prefill.start +
/// prefill.seq`: the decode must cover the cut (`decode.start <= cut <=
/// decode.start + decode.seq`), the merged object keeps the decode's other
/// keys and gets `start` = the prefill's, `shape[0]` = the merged row count and
/// an explicit `dtype`. **npy** rows (the base64 of a `.npy` file, covering
/// `[0, seq)`) merge the same way with `start = 0`; the output is a version 1.0
/// `.npy` of the decode's dtype, padded as NumPy pads it.
///
/// Where dtypes differ and both are unsigned integers, the narrower rows are
/// zero-extended to the wider (for npy, only a narrower prefill, since the
/// output keeps the decode's dtype).
///
/// Returns `Ok(false)`, leaving `decode` untouched, when neither side has
/// inline rows; `Ok(true)` when every decode choice's rows were merged.
///
/// ```
/// use pd_stitch::merge_routed_experts_in_json;
/// use serde_json::json;
///
/// // Rows of (1 layer, 3 experts) uint8: prefill positions [0, 2), decode [1, 4).
/// let prefill = json!({"choices": [{"routed_experts":
///     {"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"}}]});
/// let mut decode = json!({"choices": [{"routed_experts":
///     {"data": "CQkJBwgJCgsM", "shape": [3, 1, 3], "start": 1}}]});
///
/// assert!(merge_routed_experts_in_json(&prefill, &mut decode)?);
/// // Prefill rows [1,2,3] [4,5,6], then the decode's rows of positions 2 and 3.
/// assert_eq!(
///     decode["choices"][0]["routed_experts"],
///     json!({"data": "AQIDBAUGBwgJCgsM", "shape": [4, 1, 3], "start": 0, "dtype": "uint8"})
/// );
/// # Ok::<(), pd_stitch::Error>(())
/// ```
///
/// # Errors
///
/// On any error `decode` is exactly as it was.
///
/// - [`ErrorDetail::MissingPrefillField`]: a decode choice has rows, the
///   prefill none.
/// - [`ErrorDetail::MissingDecodeRows`]: the prefill has rows, a decode
///   choice none.
/// - [`ErrorDetail::FormMismatch`]: one side compact, the other npy.
/// - [`ErrorDetail::Base64`], [`ErrorDetail::Npy`], [`ErrorDetail::Length`],
///   [`ErrorDetail::Structure`], [`ErrorDetail::Integer`],
///   [`ErrorDetail::Dtype`], [`ErrorDetail::Overflow`]: a side's rows are
///   malformed.
/// - [`ErrorDetail::RowShapeMismatch`], [`ErrorDetail::DtypeMismatch`]: the
///   sides' rows differ in `(layers, topk)`, or in dtypes that do not widen.
/// - [`ErrorDetail::Coverage`]: the decode's rows leave a gap after the
///   prefill's, or do not reach the cut.
pub fn merge_routed_experts_in_json(prefill: &Value, decode: &mut Value) -> Result<bool, Error> {
    merge(default_spec(Stitch::Inline), prefill, decode)
}

/// What a router calls after a non-streaming P/D request: every kind of
/// rows at every place of the table of places, as one atomic step: the
/// inline merge ([`merge_routed_experts_in_json`]), the by-handle merge
/// ([`merge_routed_payload_in_json`]) of the default fields
/// ([`DEFAULT_FIELDS`](crate::DEFAULT_FIELDS)) and SGLang's rows.
///
/// Returns the OR of the two: `Ok(true)` when either kind of rows was
/// stitched, `Ok(false)` (with `decode` untouched) when the responses carry
/// no rows at all.
///
/// ```
/// use pd_stitch::merge_routed_experts_for_pd;
/// use serde_json::json;
///
/// let prefill = json!({"choices": [{"token_ids": [5]}]});
/// let mut decode = json!({"choices": [{"token_ids": [5, 6, 7]}]});
/// assert!(!merge_routed_experts_for_pd(&prefill, &mut decode)?); // nothing to stitch
/// # Ok::<(), pd_stitch::Error>(())
/// ```
///
/// # Errors
///
/// Any error of either merge; `decode` is then exactly as it was, whichever
/// merge failed.
pub fn merge_routed_experts_for_pd(prefill: &Value, decode: &mut Value) -> Result<bool, Error> {
    merge(default_spec(Stitch::ForPd), prefill, decode)
}

/// Whether `prefill` has rows to stitch, at any place of the table of places
/// (`pd_stitch::places::all()`): rows that are not null, or for rows by
/// handle a payload segment of a default field
/// ([`DEFAULT_FIELDS`](crate::DEFAULT_FIELDS)).
///
/// A router refuses a streaming P/D request when this is true: a stream cannot
/// be stitched.
///
/// ```
/// use pd_stitch::prefill_has_routed_experts;
/// use serde_json::json;
///
/// assert!(prefill_has_routed_experts(&json!({"choices": [{"routed_experts": "k05VTVBZ"}]})));
/// assert!(!prefill_has_routed_experts(&json!({"choices": [{"routed_experts": null}]})));
/// assert!(!prefill_has_routed_experts(&json!({"choices": [{"payload": [{"field": "sampling_mask"}]}]})));
/// assert!(prefill_has_routed_experts(&json!({"choices": [{"payload": [{"field": "routed_expert_weights"}]}]})));
/// ```
pub fn prefill_has_routed_experts(prefill: &Value) -> bool {
    crate::merge::prefill_has_rows(DEFAULT_FIELDS, prefill)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The 0.2 methods answer exactly as the calls they name, on a pair
    /// with rows of both kinds (so each selector gives a different output).
    #[test]
    #[allow(deprecated)]
    fn deprecated_methods_are_the_calls_they_name() {
        let prefill = json!({"choices": [{
            "routed_experts": {"data": "AQID", "shape": [1, 1, 3], "start": 0, "dtype": "uint8"},
            "payload": [{"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0,
                         "rows": 1, "dtype": "uint8", "shape": [3]}]}]});
        let decode = json!({"choices": [{
            "routed_experts": {"data": "AAAABAUG", "shape": [2, 1, 3], "start": 0, "dtype": "uint8"},
            "payload": [{"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 0,
                         "rows": 2, "dtype": "uint8", "shape": [3]}]}]});
        let stitcher = Stitcher::new();
        type Old = fn(&Stitcher, &Value, &mut Value) -> Result<bool, Error>;
        type OldBytes = fn(&Stitcher, &[u8], &mut Vec<u8>) -> Result<bool, Error>;
        let cases: [(Stitch, Old, OldBytes); 3] = [
            (
                Stitch::ForPd,
                Stitcher::merge_routed_experts_for_pd,
                Stitcher::merge_bytes_for_pd,
            ),
            (
                Stitch::ByHandle,
                Stitcher::merge_routed_payload_in_json,
                Stitcher::merge_bytes_payload,
            ),
            (
                Stitch::Inline,
                Stitcher::merge_routed_experts_in_json,
                Stitcher::merge_bytes_inline,
            ),
        ];
        let mut outputs = Vec::new();
        for (what, old, old_bytes) in cases {
            let (mut new_value, mut old_value) = (decode.clone(), decode.clone());
            assert_eq!(stitcher.merge(&prefill, &mut new_value, what), Ok(true));
            assert_eq!(old(&stitcher, &prefill, &mut old_value), Ok(true));
            assert_eq!(new_value, old_value, "{what:?}");
            let text = serde_json::to_vec(&prefill).unwrap();
            let (mut new_bytes, mut old_out) = (
                serde_json::to_vec(&decode).unwrap(),
                serde_json::to_vec(&decode).unwrap(),
            );
            assert_eq!(stitcher.merge_bytes(&text, &mut new_bytes, what), Ok(true));
            assert_eq!(old_bytes(&stitcher, &text, &mut old_out), Ok(true));
            assert_eq!(new_bytes, old_out, "{what:?}");
            outputs.push(new_value);
        }
        // The three selectors stitch different things.
        assert_ne!(outputs[0], outputs[1]);
        assert_ne!(outputs[0], outputs[2]);
        assert_ne!(outputs[1], outputs[2]);
    }
}
