//! Strict mode: the layout rule held against each decode choice's planned
//! merged payload, after planning and before writing.
//!
//! The merge validates every segment on its own; it does not need the merged
//! layout to be readable, but a trainer does (it concatenates a field's
//! segments in payload order). A strict merge
//! ([`Stitcher::strict`](crate::Stitcher::strict)) therefore describes each
//! choice's merged stitched segments as a [`Planned`] layout and runs the
//! algebra's one layout rule, [`check_layout`], on each field; a violation is
//! [`ErrorDetail::Layout`], returned before anything is written, so the decode is
//! untouched.
//!
//! Inline rows need nothing here: the inline merge already requires what the
//! rule says of its two pieces (the decode covering the cut, equal
//! `(layers, topk)`, dtypes equal or unsigned: rules N3 and N5).

use crate::algebra::{check_layout, Dtype, Rows};
use crate::error::{Error, ErrorDetail, Location, Side};

/// One choice's planned merged payload, as far as the layout rule cares: its
/// stitched segments in merged-payload order. One buffer serves a whole
/// merge: the prefill's segments are recorded once, and each choice's are
/// pushed after them and dropped again ([`Planned::reset`]).
#[derive(Default)]
pub(crate) struct Planned {
    segments: Vec<PlannedSegment>,
    /// The row shapes of all segments, back to back (no allocation per
    /// segment).
    dims: Vec<u64>,
    /// How many of `segments` (and of `dims`) are the prefill's.
    prefix: (usize, usize),
}

struct PlannedSegment {
    /// The field, as an index into the stitcher's fields.
    field: usize,
    rows: Rows,
    dtype: Dtype,
    dims: std::ops::Range<usize>,
    /// The index in the merged payload.
    index: usize,
    /// Where the segment comes from.
    origin: Origin,
}

/// Where a merged segment comes from: a prefill payload item or an item of
/// the choice's own payload.
#[derive(Clone, Copy)]
pub(crate) enum Origin {
    /// `prefill choices[0].payload[j]`.
    Prefill(usize),
    /// `decode choices[i].payload[j]`.
    Decode(usize),
}

impl Planned {
    /// Adds the segment at merged-payload `index`, of the `field`-th stitched
    /// field, covering `rows` after the merge.
    pub(crate) fn push(
        &mut self,
        index: usize,
        origin: Origin,
        field: usize,
        rows: Rows,
        dtype: Dtype,
        shape: impl Iterator<Item = u64>,
    ) {
        let start = self.dims.len();
        self.dims.extend(shape);
        self.segments.push(PlannedSegment {
            field,
            rows,
            dtype,
            dims: start..self.dims.len(),
            index,
            origin,
        });
    }

    /// Marks everything pushed so far as the prefill's part.
    pub(crate) fn seal_prefix(&mut self) {
        self.prefix = (self.segments.len(), self.dims.len());
    }

    /// Drops the last choice's segments, keeping the prefill's.
    pub(crate) fn reset(&mut self) {
        self.segments.truncate(self.prefix.0);
        self.dims.truncate(self.prefix.1);
    }
}

/// Runs the layout rule on each of `fields` in decode choice `choice`'s
/// planned merged payload.
///
/// # Errors
///
/// [`ErrorDetail::Layout`] for the first field (in `fields` order) that breaks it.
///
/// `payload_at(side, choice)` is where a choice's payload is: the by-handle
/// format's place, which it knows and this rule does not.
pub(crate) fn check<S: AsRef<str>>(
    fields: &[S],
    planned: &Planned,
    choice: usize,
    payload_at: fn(Side, usize) -> Location,
) -> Result<(), Error> {
    for (f, field) in fields.iter().enumerate() {
        let of_field = || planned.segments.iter().filter(move |s| s.field == f);
        let items = of_field().map(|s| {
            (
                s.rows,
                s.dtype,
                planned.dims.get(s.dims.clone()).unwrap_or_default(),
            )
        });
        let Err(problem) = check_layout(items) else {
            continue;
        };
        // Indices in the field's list, to the segments themselves.
        let (a, b) = problem.segments();
        let nth = |k: usize| of_field().nth(k);
        let (Some(first), Some(second)) = (nth(a), nth(b)) else {
            continue; // cannot happen: the rule names segments it was given
        };
        let payload = payload_at(Side::Decode, choice);
        let origin = |s: &PlannedSegment| match s.origin {
            Origin::Prefill(j) => payload_at(Side::Prefill, 0).index(j),
            Origin::Decode(j) => payload.clone().index(j),
        };
        return Err(ErrorDetail::Layout {
            at: payload.clone(),
            field: field.as_ref().to_owned(),
            problem: problem.map_segments(|k| if k == a { first.index } else { second.index }),
            first: origin(first),
            second: origin(second),
        }
        .into());
    }
    Ok(())
}
