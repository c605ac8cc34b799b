//! The one error type of the JSON entry points, and where in a response it is.
//!
//! Every error names the side (prefill or decode) and the JSON path of the value
//! at fault, then says what was expected and what was found:
//!
//! ```text
//! decode choices[1].payload[3].rows: must be a non-negative integer, got -1
//! ```
//!
//! [`Error`] is one pointer to an [`ErrorDetail`], the variant that says what
//! went wrong with its values: every merge returns a `Result` with it, and a
//! `Result` is as large as its error, so the success path moves 8 bytes where
//! the enum took 88 (`serde_json::Error` is one box for the same reason).

mod describe;
mod detail;
mod kind;
mod location;

pub(crate) use describe::describe;
pub use detail::ErrorDetail;
pub use kind::ErrorKind;
pub use location::{Location, Side, Step};

use std::fmt;

/// Why a merge failed: what went wrong ([`Error::kind`]), where
/// ([`Error::location`]), and a message that says both ([`Display`](fmt::Display)).
/// On any error the decode response is left exactly as it was.
///
/// It is a box around an [`ErrorDetail`], so that a `Result` of the hot path
/// stays two words at most; [`Error::detail`] reads the variant's fields.
///
/// ```
/// use pd_stitch::{merge_routed_payload_in_json, ErrorDetail, ErrorKind};
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
/// assert_eq!(err.kind(), ErrorKind::Integer);
/// assert!(matches!(err.detail(), ErrorDetail::Integer { got, .. } if got == "-1"));
/// assert_eq!(
///     err.to_string(),
///     "decode choices[0].payload[0].rows: must be a non-negative integer, got -1"
/// );
/// assert_eq!(decode, before);
/// ```
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct Error(Box<ErrorDetail>);

impl Error {
    /// What kind of error this is: a `Copy` value to match on, named as the
    /// variant of its detail is ([`ErrorKind::as_str`]).
    pub fn kind(&self) -> ErrorKind {
        self.0.kind()
    }

    /// Where in which response the problem is.
    pub fn location(&self) -> &Location {
        self.0.location()
    }

    /// What went wrong, with the values that say so.
    pub fn detail(&self) -> &ErrorDetail {
        &self.0
    }

    /// What went wrong, taken out of the box.
    pub fn into_detail(self) -> ErrorDetail {
        *self.0
    }
}

impl From<ErrorDetail> for Error {
    // Every error is built on a failure, never on the way to a merged
    // response: out of line, the allocation stays out of the merges' code.
    #[cold]
    #[inline(never)]
    fn from(detail: ErrorDetail) -> Error {
        Error(Box::new(detail))
    }
}

/// The detail's: `Integer { at: .., got: "-1" }`, as before `Error` was a box.
impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}
