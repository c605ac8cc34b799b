//! The layout rule: whether a list of segments, read in order and
//! concatenated, gives the rows in position order.
//!
//! The trainer (`docs/SPEC.md`, section 5a) reads one field of one choice
//! into an array of the field's fill, writing each segment's rows at their
//! positions in payload order: later segments win. That gives the rows
//! written exactly when no position inside the covered range is left
//! uncovered, every row has the same shape, and the dtypes are all floats or
//! all not (the first segment's kind fixes int32 or float32).
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
    /// `second`'s dtype is a float and `first`'s is not, or the other way
    /// round: the reader casts it to `first`'s kind (a float expert id
    /// truncated, an integer weight made a float).
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
    /// `second`'s dtype is one NumPy cannot name (`bfloat16`): the reader
    /// raises. `second` is both segments of [`LayoutProblem::segments`].
    Unreadable {
        /// The segment.
        second: usize,
        /// Its dtype.
        dtype: Dtype,
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
            LayoutProblem::Unreadable { second, .. } => (second, second),
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
            LayoutProblem::Unreadable { second, .. } => *second = f(*second),
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
                "segment {second} has dtype {got} but segment {first} has {expected}: the trainer reads it cast to {}",
                if expected.is_float() { "float32" } else { "int32" }
            ),
            LayoutProblem::Unreadable { second, dtype } => write!(
                f,
                "segment {second} has dtype {dtype}, which the trainer's NumPy cannot read"
            ),
        }
    }
}

/// Checks the layout rule on one field's segments of one choice, in payload
/// order, each given as `(positions, dtype, row shape)`: whether the
/// trainer's reader (`docs/SPEC.md`, section 5a: later segments win,
/// uncovered positions read as the fill) reads exactly the rows written.
///
/// - every segment has the first one's row shape (a narrower row would be
///   padded with the fill, a row of another rank raises);
/// - every dtype is a float when the first one is and not one when it is
///   not (the first fixes the reader's int32 or float32, and the others are
///   cast to it), and none is `bfloat16` (NumPy cannot name it);
/// - no position between the first and the last covered is covered by no
///   segment (it would read as the fill: expert 0).
///
/// Overlaps and steps back are fine: the later segment wins, which is what
/// a writer re-emitting rows after a preemption means. Empty segments hold
/// no row, but their dtype and shape count (the reader takes its shape and
/// type from every segment).
///
/// Returns the first problem: the first segment in list order whose shape,
/// then dtype, is wrong; else the first gap, naming the segments the reader
/// takes the rows before and after it from. Allocates only to report a
/// shape, and for the positions' sweep.
///
/// ```
/// use pd_stitch::algebra::{check_layout, LayoutProblem};
/// use pd_stitch::algebra::{Dtype, Rows};
///
/// let rows = |a, b| Rows::new(a, b).unwrap();
/// let shape: &[u64] = &[2, 4];
/// // A uint8 prompt, a uint16 completion, and a re-emission after a
/// // preemption ([5, 8) over [4, 6)): the trainer reads every row written.
/// let good = [
///     (rows(0, 4), Dtype::Uint8, shape),
///     (rows(4, 6), Dtype::Uint16, shape),
///     (rows(5, 8), Dtype::Uint16, shape),
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
    let mut covered: Vec<(Rows, usize)> = Vec::new();
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
        if dtype == Dtype::Bfloat16 {
            return Err(LayoutProblem::Unreadable {
                second: index,
                dtype,
            });
        }
        if dtype.is_float() != first_dtype.is_float() {
            return Err(LayoutProblem::Dtype {
                first: 0,
                second: index,
                expected: first_dtype,
                got: dtype,
            });
        }
        if !rows.is_empty() {
            covered.push((rows, index));
        }
    }
    first_gap(&mut covered).map_or(Ok(()), Err)
}

/// The first position between the first and the last covered that nothing
/// covers, with the segments the reader takes the rows around it from (the
/// last in list order covering each).
fn first_gap(covered: &mut [(Rows, usize)]) -> Option<LayoutProblem> {
    covered.sort_by_key(|(r, _)| r.start());
    let mut reach = covered.first()?.0.end();
    for k in 1..covered.len() {
        let (r, _) = *covered.get(k)?;
        if r.start() > reach {
            let last_at = |x: u64| {
                covered
                    .iter()
                    .filter(|(r, _)| r.contains(x))
                    .map(|&(_, i)| i)
                    .max()
            };
            return Some(LayoutProblem::Gap {
                first: last_at(reach - 1)?,
                second: last_at(r.start())?,
                end: reach,
                start: r.start(),
            });
        }
        reach = reach.max(r.end());
    }
    None
}
