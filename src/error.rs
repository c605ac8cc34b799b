//! The one error type of the JSON entry points, and where in a response it is.
//!
//! Every error names the side (prefill or decode) and the JSON path of the value
//! at fault, then says what was expected and what was found:
//!
//! ```text
//! decode choices[1].payload[3].rows: must be a non-negative integer, got -1
//! ```
//!
//! The variants sort errors by what a caller may want to do about them: a
//! malformed response ([`Error::Structure`], [`Error::Integer`],
//! [`Error::Dtype`], [`Error::Base64`], [`Error::Npy`], [`Error::Length`]),
//! numbers that do not fit ([`Error::Overflow`]), or two responses that cannot
//! be stitched ([`Error::MissingPrefillField`], [`Error::MissingDecodeRows`],
//! [`Error::FormMismatch`], [`Error::RowShapeMismatch`],
//! [`Error::DtypeMismatch`], [`Error::Coverage`]), or a merged layout that
//! strict mode refuses ([`Error::Layout`]).

use std::fmt::{self, Write as _};

use serde_json::Value;

use crate::algebra::{Dtype, LayoutProblem, Overflow, Rows};
use crate::inline::base64::Base64Error;
use crate::inline::form::Form;
use crate::inline::npy::NpyError;

/// Which response a [`Location`] is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The prefill instance's response.
    Prefill,
    /// The decode instance's response (the one the merge writes into).
    Decode,
    /// A response read on its own, by [`gather`](crate::gather) or
    /// [`check`](crate::gather::check).
    Response,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Prefill => "prefill",
            Side::Decode => "decode",
            Side::Response => "response",
        })
    }
}

/// One step of a JSON path: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Step {
    /// `.key` (or the first key of a path).
    Key(String),
    /// `[index]`.
    Index(usize),
}

/// A place in one of the two responses: a side and a JSON path from its root.
///
/// Displays as `decode choices[1].payload[3].rows`; the root itself displays
/// as `decode response` (or `response`, for a response read on its own).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    side: Side,
    path: Vec<Step>,
}

impl Location {
    /// The root of the response of `side`.
    pub fn root(side: Side) -> Location {
        Location {
            side,
            path: Vec::new(),
        }
    }

    /// This location extended by the object key `key`.
    pub fn key(mut self, key: &str) -> Location {
        self.path.push(Step::Key(key.to_owned()));
        self
    }

    /// This location extended by the array index `index`.
    pub fn index(mut self, index: usize) -> Location {
        self.path.push(Step::Index(index));
        self
    }

    /// The side.
    pub fn side(&self) -> Side {
        self.side
    }

    /// The steps from the root.
    pub fn path(&self) -> &[Step] {
        &self.path
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.side)?;
        if self.path.is_empty() && self.side != Side::Response {
            return f.write_str(" response");
        }
        for (i, step) in self.path.iter().enumerate() {
            match step {
                Step::Key(key) if i == 0 => write!(f, " {key}")?,
                Step::Key(key) => write!(f, ".{key}")?,
                Step::Index(index) if i == 0 => write!(f, " [{index}]")?,
                Step::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// Why a merge failed. On any of these the decode response is left exactly as
/// it was.
///
/// ```
/// use pd_stitch::{merge_routed_payload_in_json, Error};
/// use serde_json::json;
///
/// let prefill = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "p.bin", "offset": 0, "pos": 0, "rows": 3,
///      "dtype": "uint8", "shape": [2]}]}]});
/// let mut decode = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 2, "rows": -1,
///      "dtype": "uint8", "shape": [2]}]}]});
/// let before = decode.clone();
///
/// let err = merge_routed_payload_in_json(&prefill, &mut decode).unwrap_err();
/// assert!(matches!(err, Error::Integer { .. }));
/// assert_eq!(
///     err.to_string(),
///     "decode choices[0].payload[0].rows: must be a non-negative integer, got -1"
/// );
/// assert_eq!(decode, before);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A value has the wrong JSON type: `choices` that is not an array, a
    /// choice that is not an object, a `payload` or `shape` that is not an
    /// array, a missing key.
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
    #[error("{at}: must be a non-negative integer, got {got}")]
    Integer {
        /// Where.
        at: Location,
        /// What was found, as (possibly shortened) JSON, or `nothing`.
        got: String,
    },
    /// A `dtype` that is not one of the supported NumPy names.
    #[error("{at}: unsupported dtype {got}; expected one of bool, int8, uint8, int16, uint16, float16, bfloat16, int32, uint32, float32, int64, uint64, float64")]
    Dtype {
        /// Where.
        at: Location,
        /// What was found, as (possibly shortened) JSON, or `nothing`.
        got: String,
    },
    /// A segment whose size or extent does not fit in `u64`.
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
    #[error("{at}: the decode has rows of field {field:?} but prefill choices[0] has none, so the prompt's rows are missing")]
    MissingPrefillField {
        /// The decode rows.
        at: Location,
        /// The field.
        field: String,
    },
    /// The prefill has inline rows but this decode choice has none.
    #[error("{at}: the prefill has inline routed_experts but this decode choice has none")]
    MissingDecodeRows {
        /// The decode choice's `routed_experts`.
        at: Location,
    },
    /// Inline rows whose base64 is not canonical standard base64 with
    /// padding.
    #[error("{at}: invalid base64: {error}")]
    Base64 {
        /// The base64 text.
        at: Location,
        /// What is wrong, and where in the text.
        error: Base64Error,
    },
    /// An inline `.npy` value that is not a readable 3-d array of rows.
    #[error("{at}: {error}")]
    Npy {
        /// The `.npy` string.
        at: Location,
        /// What is wrong.
        error: NpyError,
    },
    /// Compact rows whose `data` does not hold `seq * layers * topk *
    /// itemsize` bytes.
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
    #[error("{at}: strict: the merged {field} segments would be misread: {problem} (segment {} is {first}, segment {} is {second})", problem.segments().0, problem.segments().1)]
    Layout {
        /// The decode choice's `payload`.
        at: Location,
        /// The field.
        field: String,
        /// What is wrong, with indices into the merged payload (boxed, as
        /// are the origins, to keep `Error` small on the success path).
        problem: Box<LayoutProblem>,
        /// Where the problem's first segment came from (a prefill or a decode
        /// payload item).
        first: Box<Location>,
        /// Where its second segment came from.
        second: Box<Location>,
    },
    /// A response given as bytes ([`bytes`](crate::bytes)) that is not valid
    /// JSON as `serde_json` reads it: not UTF-8, a syntax error, anything but
    /// whitespace after the value, or nesting deeper than 128 levels.
    #[error("{side} response: invalid JSON at byte {offset}: {message}")]
    Json {
        /// Which response.
        side: Side,
        /// The byte offset where reading failed.
        offset: usize,
        /// What is wrong, in `serde_json`'s words.
        message: String,
    },
}

impl Error {
    /// Where in which response the problem is.
    pub fn location(&self) -> &Location {
        match self {
            Error::Structure { at, .. }
            | Error::Integer { at, .. }
            | Error::Dtype { at, .. }
            | Error::Overflow { at, .. }
            | Error::MissingPrefillField { at, .. }
            | Error::MissingDecodeRows { at }
            | Error::Base64 { at, .. }
            | Error::Npy { at, .. }
            | Error::Length { at, .. }
            | Error::FormMismatch { at, .. }
            | Error::RowShapeMismatch { at, .. }
            | Error::DtypeMismatch { at, .. }
            | Error::Coverage { at, .. }
            | Error::Layout { at, .. } => at,
            Error::Json { side, .. } => root_of(*side),
        }
    }
}

/// The root of each side's response, for errors about a response as a whole.
fn root_of(side: Side) -> &'static Location {
    static PREFILL: Location = Location {
        side: Side::Prefill,
        path: Vec::new(),
    };
    static DECODE: Location = Location {
        side: Side::Decode,
        path: Vec::new(),
    };
    static RESPONSE: Location = Location {
        side: Side::Response,
        path: Vec::new(),
    };
    match side {
        Side::Prefill => &PREFILL,
        Side::Decode => &DECODE,
        Side::Response => &RESPONSE,
    }
}

/// The longest rendering of an offending value an error message carries; a
/// 10 MB base64 string in a log line helps nobody.
const GOT_MAX: usize = 64;

/// `value` as compact JSON for an error message, shortened to about
/// [`GOT_MAX`] bytes, or `nothing` when the key is missing.
pub(crate) fn describe(value: Option<&Value>) -> String {
    let Some(value) = value else {
        return "nothing".to_owned();
    };
    let mut out = Bounded {
        text: String::new(),
        full: false,
    };
    // A full buffer stops the formatter with fmt::Error; that is the point.
    if write!(out, "{value}").is_err() || out.full {
        out.text.push('…');
    }
    out.text
}

/// A `fmt::Write` that keeps the first [`GOT_MAX`] bytes (on a char boundary)
/// and then refuses more, so rendering a huge value stops early.
struct Bounded {
    text: String,
    full: bool,
}

impl fmt::Write for Bounded {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let room = GOT_MAX.saturating_sub(self.text.len());
        if s.len() <= room {
            self.text.push_str(s);
            return Ok(());
        }
        let mut end = room;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        self.text.push_str(s.get(..end).unwrap_or_default());
        self.full = true;
        Err(fmt::Error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn locations_read_like_json_paths() {
        let at = Location::root(Side::Decode)
            .key("choices")
            .index(1)
            .key("payload")
            .index(3)
            .key("rows");
        assert_eq!(at.to_string(), "decode choices[1].payload[3].rows");
        assert_eq!(
            Location::root(Side::Prefill).to_string(),
            "prefill response"
        );
    }

    /// `<side> <json path>`: the path's first step follows the side after a
    /// space whether it is a key or an index, and a later index has none;
    /// a response read on its own is just `response` at its root.
    #[test]
    fn a_path_may_start_with_an_index() {
        let at = Location::root(Side::Response).index(2).key("rows").index(0);
        assert_eq!(at.to_string(), "response [2].rows[0]");
        assert_eq!(
            at.path(),
            [Step::Index(2), Step::Key("rows".into()), Step::Index(0)]
        );
        assert_eq!(Location::root(Side::Response).to_string(), "response");
        assert_eq!(
            Location::root(Side::Decode).index(0).to_string(),
            "decode [0]"
        );
    }

    /// The first 64 bytes of the compact JSON text (fewer when the 64th
    /// byte is inside a character), then `…` when anything was left out.
    #[test]
    fn describe_keeps_the_longest_prefix_that_fits() {
        let a = |n: usize| "a".repeat(n);
        // `"` + 62 letters + `"` is exactly 64 bytes: nothing is left out.
        assert_eq!(describe(Some(&json!(a(62)))), format!("\"{}\"", a(62)));
        // One more letter: the closing quote is the 65th byte.
        assert_eq!(describe(Some(&json!(a(63)))), format!("\"{}…", a(63)));
        assert_eq!(describe(Some(&json!(a(1000)))), format!("\"{}…", a(63)));
        // `"` + 31 two-byte characters is 63 bytes; the 32nd would end at 65.
        assert_eq!(
            describe(Some(&json!("é".repeat(1000)))),
            format!("\"{}…", "é".repeat(31))
        );
        // A long array is cut inside one of its elements.
        let numbers: Vec<u32> = (0..100).collect();
        let text = describe(Some(&json!(numbers)));
        let full = serde_json::to_string(&numbers).unwrap();
        assert_eq!(text, format!("{}…", &full[..64]));
    }

    #[test]
    fn describe_shortens_long_values_on_a_char_boundary() {
        assert_eq!(describe(None), "nothing");
        assert_eq!(describe(Some(&json!(-1))), "-1");
        assert_eq!(describe(Some(&json!(3.0))), "3.0");
        assert_eq!(describe(Some(&json!("5"))), "\"5\"");
        let long = describe(Some(&json!("é".repeat(1000))));
        assert!(long.ends_with('…'));
        assert!(long.len() <= GOT_MAX + '…'.len_utf8());
    }
}
