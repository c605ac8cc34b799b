//! Reading typed values out of JSON, with errors that say where.

use serde_json::Value;

use crate::algebra::Dtype;
use crate::error::{describe, Error, Location};

/// A JSON integer in `0..=u64::MAX`, or [`Error::Integer`] at `at()`.
pub(crate) fn integer(value: Option<&Value>, at: impl FnOnce() -> Location) -> Result<u64, Error> {
    value.and_then(Value::as_u64).ok_or_else(|| Error::Integer {
        at: at(),
        got: describe(value),
    })
}

/// A supported dtype name, or [`Error::Dtype`] at `at()`.
pub(crate) fn dtype(value: Option<&Value>, at: impl FnOnce() -> Location) -> Result<Dtype, Error> {
    value
        .and_then(Value::as_str)
        .and_then(|name| name.parse::<Dtype>().ok())
        .ok_or_else(|| Error::Dtype {
            at: at(),
            got: describe(value),
        })
}

/// An array of JSON integers in `0..=u64::MAX`, of exactly `len` entries when
/// `len` is given; [`Error::Structure`] at `at()` for anything but an array of
/// that length, [`Error::Integer`] at `at()[k]` for a bad entry. Returns the
/// validated entries without copying them (`Value::as_u64` is `Some` for each).
pub(crate) fn shape<'v>(
    value: Option<&'v Value>,
    len: Option<usize>,
    expected: &'static str,
    at: impl Fn() -> Location,
) -> Result<&'v [Value], Error> {
    match value {
        Some(Value::Array(dims)) if len.is_none_or(|n| n == dims.len()) => {
            for (k, dim) in dims.iter().enumerate() {
                integer(Some(dim), || at().index(k))?;
            }
            Ok(dims)
        }
        other => Err(Error::Structure {
            at: at(),
            expected,
            got: describe(other),
        }),
    }
}

/// `side choices[choice]`.
pub(crate) fn choice_at(side: crate::Side, choice: usize) -> Location {
    Location::root(side).key("choices").index(choice)
}
