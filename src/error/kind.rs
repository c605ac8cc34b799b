//! [`ErrorKind`]: what kind of error an [`Error`](crate::Error) is, as a
//! small `Copy` value a caller can match on without taking the error apart.

use std::fmt;

/// The kind of an [`Error`](crate::Error), one per variant of its
/// [`ErrorDetail`](crate::ErrorDetail), named as the variant is: what a
/// router matches on to choose a status or a metric label, and what the
/// Python binding gives as `StitchError.kind`.
///
/// The names ([`ErrorKind::as_str`]) are stable: a new kind may be added in a
/// minor release (the enum is `#[non_exhaustive]`), an existing one is never
/// renamed.
///
/// ```
/// use pd_stitch::{merge_routed_payload_in_json, ErrorKind};
/// use serde_json::json;
///
/// let prefill = json!({"choices": [{"payload": []}]});
/// let mut decode = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "d.bin", "offset": 0, "pos": 2, "rows": 1,
///      "dtype": "uint8", "shape": [2]}]}]});
/// let err = merge_routed_payload_in_json(&prefill, &mut decode).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::MissingPrefillField);
/// assert_eq!(err.kind().as_str(), "MissingPrefillField");
/// // Every kind is about the two responses, so a router answers 502.
/// let status = match err.kind() {
///     ErrorKind::Json => 502,
///     _ => 502,
/// };
/// # let _ = status;
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`ErrorDetail::Structure`](crate::ErrorDetail::Structure).
    Structure,
    /// [`ErrorDetail::Integer`](crate::ErrorDetail::Integer).
    Integer,
    /// [`ErrorDetail::Dtype`](crate::ErrorDetail::Dtype).
    Dtype,
    /// [`ErrorDetail::Overflow`](crate::ErrorDetail::Overflow).
    Overflow,
    /// [`ErrorDetail::MissingPrefillField`](crate::ErrorDetail::MissingPrefillField).
    MissingPrefillField,
    /// [`ErrorDetail::MissingDecodeRows`](crate::ErrorDetail::MissingDecodeRows).
    MissingDecodeRows,
    /// [`ErrorDetail::Base64`](crate::ErrorDetail::Base64).
    Base64,
    /// [`ErrorDetail::Npy`](crate::ErrorDetail::Npy).
    Npy,
    /// [`ErrorDetail::Length`](crate::ErrorDetail::Length).
    Length,
    /// [`ErrorDetail::FormMismatch`](crate::ErrorDetail::FormMismatch).
    FormMismatch,
    /// [`ErrorDetail::RowShapeMismatch`](crate::ErrorDetail::RowShapeMismatch).
    RowShapeMismatch,
    /// [`ErrorDetail::DtypeMismatch`](crate::ErrorDetail::DtypeMismatch).
    DtypeMismatch,
    /// [`ErrorDetail::Coverage`](crate::ErrorDetail::Coverage).
    Coverage,
    /// [`ErrorDetail::Layout`](crate::ErrorDetail::Layout).
    Layout,
    /// [`ErrorDetail::Json`](crate::ErrorDetail::Json).
    Json,
    /// [`ErrorDetail::StreamEvent`](crate::ErrorDetail::StreamEvent).
    StreamEvent,
    /// [`ErrorDetail::StreamRowsRepeated`](crate::ErrorDetail::StreamRowsRepeated).
    StreamRowsRepeated,
    /// [`ErrorDetail::StreamUnstitched`](crate::ErrorDetail::StreamUnstitched).
    StreamUnstitched,
    /// [`ErrorDetail::StreamUnfinished`](crate::ErrorDetail::StreamUnfinished).
    StreamUnfinished,
    /// [`ErrorDetail::StreamClosed`](crate::ErrorDetail::StreamClosed).
    StreamClosed,
    /// [`ErrorDetail::Positions`](crate::ErrorDetail::Positions).
    Positions,
    /// [`ErrorDetail::StreamPrefillMissing`](crate::ErrorDetail::StreamPrefillMissing).
    StreamPrefillMissing,
    /// [`ErrorDetail::StreamPrefillRepeated`](crate::ErrorDetail::StreamPrefillRepeated).
    StreamPrefillRepeated,
}

impl ErrorKind {
    /// Every kind, in the order of the variants of
    /// [`ErrorDetail`](crate::ErrorDetail).
    pub const ALL: [ErrorKind; 23] = [
        ErrorKind::Structure,
        ErrorKind::Integer,
        ErrorKind::Dtype,
        ErrorKind::Overflow,
        ErrorKind::MissingPrefillField,
        ErrorKind::MissingDecodeRows,
        ErrorKind::Base64,
        ErrorKind::Npy,
        ErrorKind::Length,
        ErrorKind::FormMismatch,
        ErrorKind::RowShapeMismatch,
        ErrorKind::DtypeMismatch,
        ErrorKind::Coverage,
        ErrorKind::Layout,
        ErrorKind::Json,
        ErrorKind::StreamEvent,
        ErrorKind::StreamRowsRepeated,
        ErrorKind::StreamUnstitched,
        ErrorKind::StreamUnfinished,
        ErrorKind::StreamClosed,
        ErrorKind::Positions,
        ErrorKind::StreamPrefillMissing,
        ErrorKind::StreamPrefillRepeated,
    ];

    /// The kind's name, which is its variant's: `"MissingPrefillField"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Structure => "Structure",
            ErrorKind::Integer => "Integer",
            ErrorKind::Dtype => "Dtype",
            ErrorKind::Overflow => "Overflow",
            ErrorKind::MissingPrefillField => "MissingPrefillField",
            ErrorKind::MissingDecodeRows => "MissingDecodeRows",
            ErrorKind::Base64 => "Base64",
            ErrorKind::Npy => "Npy",
            ErrorKind::Length => "Length",
            ErrorKind::FormMismatch => "FormMismatch",
            ErrorKind::RowShapeMismatch => "RowShapeMismatch",
            ErrorKind::DtypeMismatch => "DtypeMismatch",
            ErrorKind::Coverage => "Coverage",
            ErrorKind::Layout => "Layout",
            ErrorKind::Json => "Json",
            ErrorKind::StreamEvent => "StreamEvent",
            ErrorKind::StreamRowsRepeated => "StreamRowsRepeated",
            ErrorKind::StreamUnstitched => "StreamUnstitched",
            ErrorKind::StreamUnfinished => "StreamUnfinished",
            ErrorKind::StreamPrefillMissing => "StreamPrefillMissing",
            ErrorKind::StreamPrefillRepeated => "StreamPrefillRepeated",
            ErrorKind::StreamClosed => "StreamClosed",
            ErrorKind::Positions => "Positions",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names are distinct and each is the `Debug` rendering, which is
    /// the variant's name: the binding once read kinds from `Debug`, and
    /// Python code matches on those names.
    #[test]
    fn names_are_the_variant_names() {
        let mut seen = std::collections::BTreeSet::new();
        for kind in ErrorKind::ALL {
            assert_eq!(kind.as_str(), format!("{kind:?}"));
            assert_eq!(kind.to_string(), kind.as_str());
            assert!(seen.insert(kind.as_str()), "{kind} twice");
        }
    }
}
