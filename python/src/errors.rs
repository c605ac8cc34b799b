//! `StitchError`, and the crate's errors as one: `.kind` from
//! `ErrorKind::as_str()`, `.location` the JSON path the error names.

use pd_stitch::episode::EpisodeError;
use pd_stitch::gather::{GatherError, TurnReadError};
use pd_stitch::{Error, ErrorKind};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::create_exception!(
    pd_stitch,
    StitchError,
    PyValueError,
    "Why a merge, gather, check or episode failed. `.kind` is the Rust error's \
     variant (e.g. \"MissingPrefillField\", \"RowGap\"), `.location` the JSON path \
     it names (e.g. \"decode choices[1].payload[3].rows\") or None."
);

pub(crate) fn raise(
    py: Python<'_>,
    message: String,
    kind: &str,
    location: Option<String>,
) -> PyErr {
    let err = StitchError::new_err(message);
    let value = err.value(py);
    // Setting attributes on a fresh exception instance does not fail; if it
    // did, the error raised is the attribute error, which still says why.
    if let Err(e) = value
        .setattr("kind", kind)
        .and_then(|()| value.setattr("location", location))
    {
        return e;
    }
    err
}

/// A merge error as a `StitchError`. `ErrorDetail::Json` is about a whole text, at
/// a byte offset, so it has no JSON path: its `.location` is None.
pub(crate) fn stitch_error(py: Python<'_>, err: &Error) -> PyErr {
    let location = match err.kind() {
        ErrorKind::Json => None,
        _ => Some(err.location().to_string()),
    };
    raise(py, err.to_string(), err.kind().as_str(), location)
}

pub(crate) fn gather_error(py: Python<'_>, err: &GatherError) -> PyErr {
    match err {
        GatherError::Response(inner) => stitch_error(py, inner),
        other => raise(
            py,
            other.to_string(),
            other.kind().as_str(),
            other.location().map(ToString::to_string),
        ),
    }
}

/// A turn's reading error: its text names the turn (and a pair's side),
/// `.kind` the reader's (the response's own kind for a malformed value),
/// `.location` the value at fault (None for invalid JSON, as a merge's).
pub(crate) fn turn_read_error(py: Python<'_>, err: &TurnReadError) -> PyErr {
    let location = match err.error() {
        GatherError::Response(inner) if inner.kind() == ErrorKind::Json => None,
        _ => err.location().map(ToString::to_string),
    };
    raise(py, err.to_string(), err.kind_name(), location)
}

/// An episode's error: its text names the turn and the position; it is
/// about no JSON value, so `.location` is None.
pub(crate) fn episode_error(py: Python<'_>, err: &EpisodeError) -> PyErr {
    raise(py, err.to_string(), err.kind().as_str(), None)
}
