//! [`ErrorDetail`]: what went wrong and where, one variant per kind of
//! error, the value an [`Error`](super::Error) boxes.

use super::kind::ErrorKind;
use super::location::{root_of, Location, Side, Step};
use super::Error;
use crate::algebra::{Dtype, LayoutProblem, Overflow, PositionProblem, Rows, SupportedNames};
use crate::codec::{Base64Error, Form, NpyError};

/// What [`ErrorDetail::MissingDecodeRows`] says: of a vLLM choice's inline rows,
/// or of SGLang rows in another place.
fn missing_decode_rows(at: &Location) -> &'static str {
    match at.path() {
        [Step::Key(choices), Step::Index(_), Step::Key(_)] if choices == "choices" => {
            "the prefill has inline routed_experts but this decode choice has none"
        }
        _ => "the prefill has routed_experts rows here but the decode has none",
    }
}

/// What went wrong, with the values that say so: what an [`Error`] holds,
/// read by [`Error::detail`] (or taken by [`Error::into_detail`]). Its
/// `Display` is the error's message, its [`kind`](ErrorDetail::kind) and
/// [`location`](ErrorDetail::location) the error's.
///
/// The variants sort errors by what a caller may want to do about them: a
/// malformed response ([`ErrorDetail::Structure`], [`ErrorDetail::Integer`],
/// [`ErrorDetail::Dtype`], [`ErrorDetail::Base64`], [`ErrorDetail::Npy`],
/// [`ErrorDetail::Length`]), numbers that do not fit
/// ([`ErrorDetail::Overflow`]), or two responses that cannot be stitched
/// ([`ErrorDetail::MissingPrefillField`], [`ErrorDetail::MissingDecodeRows`],
/// [`ErrorDetail::FormMismatch`], [`ErrorDetail::RowShapeMismatch`],
/// [`ErrorDetail::DtypeMismatch`], [`ErrorDetail::Coverage`]), or a merged
/// layout that strict mode refuses ([`ErrorDetail::Layout`]). The enum and
/// each variant are `#[non_exhaustive]`: match with a wildcard and `..`.
///
/// ```
/// use pd_stitch::{merge_routed_payload_in_json, ErrorDetail};
/// use serde_json::json;
///
/// let prefill = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": "3",
///      "dtype": "uint8", "shape": [2]}]}]});
/// let err = merge_routed_payload_in_json(&prefill, &mut json!({})).unwrap_err();
/// match err.into_detail() {
///     ErrorDetail::Integer { at, got, .. } => {
///         assert_eq!(at.to_string(), "prefill choices[0].payload[0].rows");
///         assert_eq!(got, r#""3""#);
///     }
///     other => panic!("not an Integer error: {other}"),
/// }
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ErrorDetail {
    /// A value has the wrong JSON type: `choices` that is not an array, a
    /// choice that is not an object, a `payload` or `shape` that is not an
    /// array, a missing key.
    #[non_exhaustive]
    #[error("{at}: must be {expected}, got {got}")]
    Structure {
        /// Where.
        at: Location,
        /// What was expected, e.g. `"an array"`.
        expected: &'static str,
        /// What was found, as (possibly shortened) JSON, or `nothing`.
        got: String,
    },
    /// A position, row count, offset or dimension that is not a JSON integer in
    /// `0..=u64::MAX`: a negative number, a float such as `3.0`, a string, a
    /// bool, a number too large for `u64`, or a missing key.
    #[non_exhaustive]
    #[error("{at}: must be a non-negative integer, got {got}")]
    Integer {
        /// Where.
        at: Location,
        /// What was found, as (possibly shortened) JSON, or `nothing`.
        got: String,
    },
    /// A `dtype` that is not one of the supported NumPy names.
    #[non_exhaustive]
    #[error("{at}: unsupported dtype {got}; expected one of {SupportedNames}")]
    Dtype {
        /// Where.
        at: Location,
        /// What was found, as (possibly shortened) JSON, or `nothing`.
        got: String,
    },
    /// A segment whose size or extent does not fit in `u64`.
    #[non_exhaustive]
    #[error("{at}: {overflow}")]
    Overflow {
        /// The segment.
        at: Location,
        /// Which quantity overflowed, with the values it came from.
        overflow: Overflow,
    },
    /// The decode has rows of a stitched field (a payload segment, or inline
    /// `routed_experts`) that the prefill has none of: the prompt's rows of
    /// that field are missing, so the two responses cannot be stitched.
    #[non_exhaustive]
    #[error("{at}: the decode has rows of field {field:?} but prefill choices[0] has none, so the prompt's rows are missing")]
    MissingPrefillField {
        /// The decode rows.
        at: Location,
        /// The field.
        field: String,
    },
    /// The prefill has inline rows (or SGLang rows in this place) but this
    /// decode choice (or place) has none.
    #[non_exhaustive]
    #[error("{at}: {}", missing_decode_rows(at))]
    MissingDecodeRows {
        /// The decode choice's `routed_experts`.
        at: Location,
    },
    /// Inline rows whose base64 is not canonical standard base64 with
    /// padding.
    #[non_exhaustive]
    #[error("{at}: invalid base64: {error}")]
    Base64 {
        /// The base64 text.
        at: Location,
        /// What is wrong, and where in the text.
        error: Base64Error,
    },
    /// An inline `.npy` value that is not a readable 3-d array of rows.
    #[non_exhaustive]
    #[error("{at}: {error}")]
    Npy {
        /// The `.npy` string.
        at: Location,
        /// What is wrong.
        error: NpyError,
    },
    /// Compact rows whose `data` does not hold `seq * layers * topk *
    /// itemsize` bytes.
    #[non_exhaustive]
    #[error("{at}: decodes to {got} bytes, but shape and dtype need {expected}")]
    Length {
        /// The `data` key.
        at: Location,
        /// `seq * layers * topk * itemsize`.
        expected: u64,
        /// The decoded length.
        got: u64,
    },
    /// Inline rows of the two sides in different forms (compact and npy).
    #[non_exhaustive]
    #[error("{at}: rows are {decode} but the prefill's are {prefill}")]
    FormMismatch {
        /// The decode choice's `routed_experts`.
        at: Location,
        /// The prefill's form.
        prefill: Form,
        /// The decode's form.
        decode: Form,
    },
    /// Inline rows of the two sides with different `(layers, topk)`.
    #[non_exhaustive]
    #[error("{at}: rows have shape {decode:?} but the prefill's have {prefill:?}")]
    RowShapeMismatch {
        /// The decode choice's `routed_experts`.
        at: Location,
        /// The prefill's `[layers, topk]`.
        prefill: Vec<u64>,
        /// The decode's `[layers, topk]`.
        decode: Vec<u64>,
    },
    /// Inline rows of dtypes that cannot be merged: only unsigned integers
    /// widen (`uint8 < uint16 < uint32 < uint64`), and npy output keeps the
    /// decode's dtype, so there only a narrower prefill is widened.
    #[non_exhaustive]
    #[error("{at}: {form} rows of dtype {decode} cannot be merged with the prefill's {prefill} (only unsigned integers widen{})", if *form == Form::Npy { ", and npy keeps the decode's dtype" } else { "" })]
    DtypeMismatch {
        /// The decode choice's `routed_experts`.
        at: Location,
        /// The rows' form.
        form: Form,
        /// The prefill's dtype.
        prefill: Dtype,
        /// The decode's dtype.
        decode: Dtype,
    },
    /// Inline decode rows that do not reach the cut from at or before it:
    /// they start after it (a gap) or end before it (too few rows).
    #[non_exhaustive]
    #[error("{at}: decode rows {decode} must contain the cut {cut} (prefill rows end there); {}", if decode.start() > *cut { "positions between them would be missing" } else { "there are too few rows" })]
    Coverage {
        /// The decode choice's `routed_experts`.
        at: Location,
        /// One past the prefill's last row.
        cut: u64,
        /// The decode's positions.
        decode: Rows,
    },
    /// Strict mode ([`Stitcher::strict`](crate::Stitcher::strict)): a decode
    /// choice's merged segments of a stitched field that break the layout rule
    /// ([`check_layout`](crate::algebra::check_layout)), so a trainer reading
    /// them in payload order would misplace rows. The segment indices of
    /// `problem` are those of the merged payload the choice would have got;
    /// `first` and `second` say where those two segments came from.
    #[non_exhaustive]
    #[error("{at}: strict: the merged {field} segments would be misread: {problem} (segment {} is {first}, segment {} is {second})", problem.segments().0, problem.segments().1)]
    Layout {
        /// The decode choice's `payload`.
        at: Location,
        /// The field.
        field: String,
        /// What is wrong, with indices into the merged payload.
        problem: LayoutProblem,
        /// Where the problem's first segment came from (a prefill or a decode
        /// payload item).
        first: Location,
        /// Where its second segment came from.
        second: Location,
    },
    /// A response given as bytes ([`bytes`](crate::bytes)) that is not valid
    /// JSON as `serde_json` reads it: not UTF-8, a syntax error, anything but
    /// whitespace after the value, or nesting deeper than 128 levels.
    #[non_exhaustive]
    // The side's response as a location names it: "prefill response",
    // and a response read on its own just "response".
    #[error("{}: invalid JSON at byte {offset}: {message}", Location::root(*side))]
    Json {
        /// Which response.
        side: Side,
        /// The byte offset where reading failed.
        offset: usize,
        /// What is wrong, in `serde_json`'s words.
        message: String,
    },
    /// A streamed decode ([`stream`](crate::stream)): an event that carries
    /// rows failed to stitch. `error` is the merge's error, at its place in
    /// the event's data (the decode response); [`Error::location`] is its.
    #[non_exhaustive]
    #[error("stream event {event} (at byte {offset}): {error}")]
    StreamEvent {
        /// The event's number in the stream, from 0.
        event: u64,
        /// The stream offset of the event's first byte.
        offset: u64,
        /// Why its data could not be stitched.
        error: Error,
    },
    /// A streamed decode: a second event with rows for a choice (or SGLang
    /// slot) that an earlier event's rows were stitched into.
    #[non_exhaustive]
    #[error("stream event {event} (at byte {offset}): rows for {slot} again (event {first_event} had them); a choice's rows come on one event")]
    StreamRowsRepeated {
        /// The event's number in the stream, from 0.
        event: u64,
        /// The stream offset of the event's first byte.
        offset: u64,
        /// The event whose rows were stitched first.
        first_event: u64,
        /// Which rows: `choice 1`, `SGLang sglext`, ...
        slot: String,
    },
    /// A streamed decode: an event carries rows (by its keys) that the merge
    /// leaves unstitched: SGLang's slots, in a build whose merge does not
    /// read them.
    #[non_exhaustive]
    #[error(
        "stream event {event} (at byte {offset}): carries rows that this merge does not stitch"
    )]
    StreamUnstitched {
        /// The event's number in the stream, from 0.
        event: u64,
        /// The stream offset of the event's first byte.
        offset: u64,
    },
    /// A streamed decode that ended inside an event that may carry rows (its
    /// bytes name `payload` or a non-null `routed_experts`, or have a `\u`
    /// escape): its rows, if any, could not be stitched.
    #[non_exhaustive]
    #[error("the stream ended inside an event that may carry rows ({len} bytes from byte {offset}, no blank line after them)")]
    StreamUnfinished {
        /// The stream offset of the event's first byte.
        offset: u64,
        /// How many bytes of it arrived.
        len: u64,
    },
    /// A streamed decode fed (or finished) again after it failed or was
    /// finished.
    #[non_exhaustive]
    #[error("the stream stitcher {}: it takes no more input", if *failed { "failed" } else { "was finished" })]
    StreamClosed {
        /// Whether it failed (else it was finished).
        failed: bool,
    },
    /// SGLang rows whose positions the responses do not determine: the
    /// token counts and the rows' lengths place them nowhere, or in more
    /// than one way (SPEC section 10).
    #[non_exhaustive]
    #[error("{at}: {problem}")]
    Positions {
        /// The value at fault: the rows, or a token count.
        at: Location,
        /// Why, with the numbers it comes from.
        problem: PositionProblem,
    },
    /// A streamed decode finished before its prefill was given
    /// ([`StreamStitcher::awaiting_prefill`](crate::stream::StreamStitcher::awaiting_prefill)):
    /// the prefill never came. `held` bytes (the event that carries rows and
    /// every byte after it) were waiting for it and are not appended.
    #[non_exhaustive]
    #[error("the stream ended before the prefill's response was given ({held} bytes, from the event that carries rows on, were waiting for it)")]
    StreamPrefillMissing {
        /// How many bytes of the stream were held for the prefill.
        held: u64,
    },
    /// A streamed decode given a prefill response when it already had one.
    #[non_exhaustive]
    #[error("the stream stitcher was given a prefill response twice")]
    StreamPrefillRepeated {},
}

impl ErrorDetail {
    /// What kind of error this is: a `Copy` value to match on, named as the
    /// variant is ([`ErrorKind::as_str`]). [`Error::kind`] is this.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ErrorDetail::Structure { .. } => ErrorKind::Structure,
            ErrorDetail::Integer { .. } => ErrorKind::Integer,
            ErrorDetail::Dtype { .. } => ErrorKind::Dtype,
            ErrorDetail::Overflow { .. } => ErrorKind::Overflow,
            ErrorDetail::MissingPrefillField { .. } => ErrorKind::MissingPrefillField,
            ErrorDetail::MissingDecodeRows { .. } => ErrorKind::MissingDecodeRows,
            ErrorDetail::Base64 { .. } => ErrorKind::Base64,
            ErrorDetail::Npy { .. } => ErrorKind::Npy,
            ErrorDetail::Length { .. } => ErrorKind::Length,
            ErrorDetail::FormMismatch { .. } => ErrorKind::FormMismatch,
            ErrorDetail::RowShapeMismatch { .. } => ErrorKind::RowShapeMismatch,
            ErrorDetail::DtypeMismatch { .. } => ErrorKind::DtypeMismatch,
            ErrorDetail::Coverage { .. } => ErrorKind::Coverage,
            ErrorDetail::Layout { .. } => ErrorKind::Layout,
            ErrorDetail::Positions { .. } => ErrorKind::Positions,
            ErrorDetail::Json { .. } => ErrorKind::Json,
            ErrorDetail::StreamEvent { .. } => ErrorKind::StreamEvent,
            ErrorDetail::StreamRowsRepeated { .. } => ErrorKind::StreamRowsRepeated,
            ErrorDetail::StreamUnstitched { .. } => ErrorKind::StreamUnstitched,
            ErrorDetail::StreamUnfinished { .. } => ErrorKind::StreamUnfinished,
            ErrorDetail::StreamPrefillMissing { .. } => ErrorKind::StreamPrefillMissing,
            ErrorDetail::StreamPrefillRepeated { .. } => ErrorKind::StreamPrefillRepeated,
            ErrorDetail::StreamClosed { .. } => ErrorKind::StreamClosed,
        }
    }

    /// Where in which response the problem is. [`Error::location`] is this.
    pub fn location(&self) -> &Location {
        match self {
            ErrorDetail::Structure { at, .. }
            | ErrorDetail::Integer { at, .. }
            | ErrorDetail::Dtype { at, .. }
            | ErrorDetail::Overflow { at, .. }
            | ErrorDetail::MissingPrefillField { at, .. }
            | ErrorDetail::MissingDecodeRows { at }
            | ErrorDetail::Base64 { at, .. }
            | ErrorDetail::Npy { at, .. }
            | ErrorDetail::Length { at, .. }
            | ErrorDetail::FormMismatch { at, .. }
            | ErrorDetail::RowShapeMismatch { at, .. }
            | ErrorDetail::DtypeMismatch { at, .. }
            | ErrorDetail::Coverage { at, .. }
            | ErrorDetail::Layout { at, .. }
            | ErrorDetail::Positions { at, .. } => at,
            ErrorDetail::Json { side, .. } => root_of(*side),
            ErrorDetail::StreamEvent { error, .. } => error.location(),
            ErrorDetail::StreamRowsRepeated { .. }
            | ErrorDetail::StreamUnstitched { .. }
            | ErrorDetail::StreamUnfinished { .. }
            | ErrorDetail::StreamPrefillMissing { .. }
            | ErrorDetail::StreamClosed { .. } => root_of(Side::Decode),
            ErrorDetail::StreamPrefillRepeated { .. } => root_of(Side::Prefill),
        }
    }
}
