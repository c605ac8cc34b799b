//! Reading typed values out of JSON, through a [`View`], with errors that say
//! where.

use crate::algebra::Dtype;
use crate::error::{Error, ErrorDetail, Location, Side};
use crate::response::view::{describe_view, Kind, View};

/// A JSON integer in `0..=u64::MAX`, or [`ErrorDetail::Integer`] at `at()`.
/// Inlined, with the error built out of line: three of these run for every
/// payload segment, and the call cost as much as the check.
#[inline(always)]
pub(crate) fn integer<'a, V: View<'a>>(
    value: Option<V>,
    at: impl FnOnce() -> Location,
) -> Result<u64, Error> {
    match value.and_then(View::as_u64) {
        Some(n) => Ok(n),
        None => Err(cold(|| ErrorDetail::Integer {
            at: at(),
            got: describe_view(value),
        })),
    }
}

/// Builds an error out of the hot path's line: the readers above are
/// inlined into every segment's validation, their errors are not.
#[cold]
#[inline(never)]
fn cold(build: impl FnOnce() -> ErrorDetail) -> Error {
    build().into()
}

/// A supported dtype name, or [`ErrorDetail::Dtype`] at `at()`.
pub(crate) fn dtype<'a, V: View<'a>>(
    value: Option<V>,
    at: impl FnOnce() -> Location,
) -> Result<Dtype, Error> {
    match value
        .and_then(View::as_str)
        .and_then(|name| Dtype::from_name(&name))
    {
        Some(dtype) => Ok(dtype),
        None => Err(cold(|| ErrorDetail::Dtype {
            at: at(),
            got: describe_view(value),
        })),
    }
}

/// An array of JSON integers in `0..=u64::MAX`, of exactly `len` entries when
/// `len` is given; [`ErrorDetail::Structure`] at `at()` for anything but an array of
/// that length, [`ErrorDetail::Integer`] at `at()[k]` for a bad entry. Returns the
/// validated array, so that [`dims`] can read it without copying.
// Inlined into the segment's validation, which runs for every segment: left
// to the compiler, whether it is inlined changes with unrelated code
// (callgrind, 8 x 32: 12 K instructions a merge when it is not).
#[inline]
pub(crate) fn shape<'a, V: View<'a>>(
    value: Option<V>,
    len: Option<usize>,
    expected: &'static str,
    at: impl Fn() -> Location,
) -> Result<V, Error> {
    let wrong = || {
        Error::from(ErrorDetail::Structure {
            at: at(),
            expected,
            got: describe_view(value),
        })
    };
    let array = value
        .filter(|v| v.kind() == Kind::Array)
        .ok_or_else(wrong)?;
    if len.is_some_and(|len| array.elements().map_or(0, Iterator::count) != len) {
        return Err(wrong());
    }
    // No `flatten` of the `Option`: its state per step cost more than the
    // check (this runs for every payload segment's shape).
    if let Some(elements) = array.elements() {
        for (k, dim) in elements.enumerate() {
            integer(Some(dim), || at().index(k))?;
        }
    }
    Ok(array)
}

/// The entries of an array [`shape`] validated.
pub(crate) fn dims<'a, V: View<'a>>(shape: V) -> impl Iterator<Item = u64> + 'a {
    // As in `shape`: the `Option` checked per step, not flattened.
    let mut elements = shape.elements();
    std::iter::from_fn(move || elements.as_mut()?.next()).filter_map(View::as_u64)
}

/// `side choices[choice]`.
pub(crate) fn choice_at(side: Side, choice: usize) -> Location {
    Location::root(side).key("choices").index(choice)
}
