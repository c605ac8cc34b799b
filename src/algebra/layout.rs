//! The layout rule: whether a list of segments, read in order and
//! concatenated, gives the rows in position order.
//!
//! A trainer reads one field of one choice the simple way: each segment in
//! payload order (`numpy.fromfile`, say), concatenated. That is right only
//! when each segment starts where the previous one ended (no gap, no
//! overlap, no step back), every row has the same shape, and the dtypes are
//! equal or all unsigned integers (a `uint8` prompt with a `uint16`
//! completion concatenates to `uint16` without changing a value).
//! [`check_layout`] is that rule, on plain values; strict merges
//! ([`Stitcher::strict`](crate::Stitcher::strict)) and
//! [`gather::check`](crate::gather::check) both use it.

use std::fmt;

use super::{Dtype, Rows};

/// The first way a list of segments breaks the layout rule. `first` and
/// `second` are indices into the list given to [`check_layout`]: for
/// positions, the last non-empty segment before `second`; for shapes and
/// dtypes, the list's first segment, which sets them.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LayoutProblem {
    /// `second` starts after `first` ended: positions `[end, start)` are in
    /// no segment.
    Gap {
        /// The segment before.
        first: usize,
        /// The segment after the gap.
        second: usize,
        /// Where `first` ends.
        end: u64,
        /// Where `second` starts.
        start: u64,
    },
    /// `second` starts inside `first`: positions `[start, end)` come twice.
    Overlap {
        /// The segment before.
        first: usize,
        /// The segment that starts inside it.
        second: usize,
        /// Where `first` ends.
        end: u64,
        /// Where `second` starts.
        start: u64,
    },
    /// `second` starts before `first` does: the segments are out of
    /// position order.
    OutOfOrder {
        /// The segment before.
        first: usize,
        /// The segment that steps back.
        second: usize,
        /// Where `first` starts.
        first_start: u64,
        /// Where `second` starts.
        start: u64,
    },
    /// `second`'s rows have another shape than `first`'s.
    Shape {
        /// The segment that sets the shape.
        first: usize,
        /// The segment that differs.
        second: usize,
        /// `first`'s row shape.
        expected: Vec<u64>,
        /// `second`'s row shape.
        got: Vec<u64>,
    },
    /// `second`'s dtype is neither `first`'s nor, with `first`'s, an unsigned
    /// integer.
    Dtype {
        /// The segment that sets the dtype.
        first: usize,
        /// The segment that differs.
        second: usize,
        /// `first`'s dtype.
        expected: Dtype,
        /// `second`'s dtype.
        got: Dtype,
    },
}

impl LayoutProblem {
    /// The two segments, `(first, second)`.
    pub fn segments(&self) -> (usize, usize) {
        match *self {
            LayoutProblem::Gap { first, second, .. }
            | LayoutProblem::Overlap { first, second, .. }
            | LayoutProblem::OutOfOrder { first, second, .. }
            | LayoutProblem::Shape { first, second, .. }
            | LayoutProblem::Dtype { first, second, .. } => (first, second),
        }
    }

    /// The same problem with its segment indices mapped by `f` (from indices
    /// in a field's list to indices in a payload, say).
    #[must_use]
    pub fn map_segments(mut self, f: impl Fn(usize) -> usize) -> LayoutProblem {
        match &mut self {
            LayoutProblem::Gap { first, second, .. }
            | LayoutProblem::Overlap { first, second, .. }
            | LayoutProblem::OutOfOrder { first, second, .. }
            | LayoutProblem::Shape { first, second, .. }
            | LayoutProblem::Dtype { first, second, .. } => {
                *first = f(*first);
                *second = f(*second);
            }
        }
        self
    }
}

impl fmt::Display for LayoutProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LayoutProblem::Gap { first, second, end, start } => write!(
                f,
                "segment {second} starts at {start} but segment {first} ends at {end}: positions [{end}, {start}) are missing"
            ),
            LayoutProblem::Overlap { first, second, end, start } => write!(
                f,
                "segment {second} starts at {start}, inside segment {first}, which ends at {end}: an overlap"
            ),
            LayoutProblem::OutOfOrder { first, second, first_start, start } => write!(
                f,
                "segment {second} starts at {start}, before segment {first} (at {first_start}): not in position order"
            ),
            LayoutProblem::Shape { first, second, expected, got } => write!(
                f,
                "segment {second} has rows of shape {got:?} but segment {first} has {expected:?}"
            ),
            LayoutProblem::Dtype { first, second, expected, got } => write!(
                f,
                "segment {second} has dtype {got} but segment {first} has {expected} (only unsigned integers mix)"
            ),
        }
    }
}

/// Checks the layout rule on one field's segments of one choice, in payload
/// order, each given as `(positions, dtype, row shape)`:
///
/// - every segment has the first one's row shape;
/// - every dtype is the first one's, or the first and it are both unsigned
///   integers;
/// - each non-empty segment starts exactly where the previous non-empty one
///   ended (empty segments hold no row, so they never break a run).
///
/// Returns the first problem in list order (for one segment: shape, dtype,
/// then position). Allocates only to report a shape.
///
/// ```
/// use pd_stitch::algebra::{check_layout, LayoutProblem};
/// use pd_stitch::algebra::{Dtype, Rows};
///
/// let rows = |a, b| Rows::new(a, b).unwrap();
/// let shape: &[u64] = &[2, 4];
/// // A uint8 prompt, an empty segment, a uint16 completion: one run.
/// let good = [
///     (rows(0, 3), Dtype::Uint8, shape),
///     (rows(9, 9), Dtype::Uint8, shape),
///     (rows(3, 5), Dtype::Uint16, shape),
/// ];
/// assert_eq!(check_layout(good), Ok(()));
/// let gap = [(rows(0, 3), Dtype::Uint8, shape), (rows(4, 5), Dtype::Uint8, shape)];
/// assert_eq!(
///     check_layout(gap),
///     Err(LayoutProblem::Gap { first: 0, second: 1, end: 3, start: 4 })
/// );
/// ```
///
/// # Errors
///
/// The first [`LayoutProblem`].
pub fn check_layout<'s, I>(segments: I) -> Result<(), LayoutProblem>
where
    I: IntoIterator<Item = (Rows, Dtype, &'s [u64])>,
{
    let mut reference: Option<(Dtype, &[u64])> = None;
    let mut previous: Option<(usize, Rows)> = None;
    for (index, (rows, dtype, shape)) in segments.into_iter().enumerate() {
        let (first_dtype, first_shape) = *reference.get_or_insert((dtype, shape));
        if shape != first_shape {
            return Err(LayoutProblem::Shape {
                first: 0,
                second: index,
                expected: first_shape.to_vec(),
                got: shape.to_vec(),
            });
        }
        if dtype != first_dtype && !(dtype.is_unsigned() && first_dtype.is_unsigned()) {
            return Err(LayoutProblem::Dtype {
                first: 0,
                second: index,
                expected: first_dtype,
                got: dtype,
            });
        }
        if rows.is_empty() {
            continue;
        }
        if let Some((first, before)) = previous {
            let (start, end) = (rows.start(), before.end());
            if start > end {
                return Err(LayoutProblem::Gap {
                    first,
                    second: index,
                    end,
                    start,
                });
            }
            if start < before.start() {
                return Err(LayoutProblem::OutOfOrder {
                    first,
                    second: index,
                    first_start: before.start(),
                    start,
                });
            }
            if start < end {
                return Err(LayoutProblem::Overlap {
                    first,
                    second: index,
                    end,
                    start,
                });
            }
        }
        previous = Some((index, rows));
    }
    Ok(())
}
