//! The P/D merge of segment lists: cuts, and the clip that applies them.
//!
//! The prefill instance computed the rows of the prompt; the decode instance
//! computed rows from its first forward on, which starts one position before the
//! prompt ends, so the two overlap. The merge keeps the prefill's rows as they
//! are and takes from the decode only what lies past them:
//!
//! - for each field `f`, `cut_f` is one past the last position any prefill
//!   segment of `f` covers ([`cut`]);
//! - a decode segment of `f` is dropped when it ends at or before `cut_f`,
//!   clipped to start at `cut_f` when it starts before it, and kept otherwise
//!   ([`Cuts::clip`]);
//! - the merged list is the prefill's segments, in order, then what is left of
//!   the decode's, in order ([`merge_segments`]).
//!
//! A decode segment of a field the prefill has no segment of cannot be placed:
//! the prompt's rows of that field are missing, so it is an error
//! ([`MissingField`]), never a silent pass-through.

use super::{Extent, Segment};

/// The cut of every field the prefill has segments of.
///
/// `cut_f = max(pos + rows)` over the prefill's segments of `f`: the first
/// position the prefill did not compute. Built by [`cut`].
///
/// ```
/// use pd_stitch::algebra::{cut, Dtype, Segment};
///
/// let prefill = [
///     Segment::new("routed_experts", "p.bin", 0, 0, 8, Dtype::Uint8, vec![4])?,
///     Segment::new("routed_experts", "p.bin", 32, 8, 4, Dtype::Uint8, vec![4])?,
/// ];
/// let cuts = cut(&prefill);
/// assert_eq!(cuts.get("routed_experts"), Some(12));
/// assert_eq!(cuts.get("routed_expert_weights"), None);
/// # Ok::<(), pd_stitch::algebra::Overflow>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cuts {
    // Few fields are stitched (one or two), so a list beats a map.
    by_field: Vec<(String, u64)>,
}

impl Cuts {
    /// The cut of `field`, or `None` when the prefill has no segment of it.
    pub fn get(&self, field: &str) -> Option<u64> {
        self.by_field
            .iter()
            .find(|(name, _)| name == field)
            .map(|&(_, cut)| cut)
    }

    /// Every field with its cut, in the order the prefill first mentions them.
    pub fn iter(&self) -> impl Iterator<Item = (&str, u64)> + '_ {
        self.by_field
            .iter()
            .map(|(name, cut)| (name.as_str(), *cut))
    }

    /// Whether the prefill had no segment at all.
    pub fn is_empty(&self) -> bool {
        self.by_field.is_empty()
    }

    /// What the merge keeps of a decode segment: `Ok(None)` when it is dropped,
    /// `Ok(Some(s))` with `s` clipped at its field's cut otherwise (equal to
    /// `segment` when it starts at or after the cut).
    ///
    /// # Errors
    ///
    /// [`MissingField`] when the prefill has no segment of the segment's field.
    pub fn clip<F: Clone>(&self, segment: &Segment<F>) -> Result<Option<Segment<F>>, MissingField> {
        let cut = self.of(segment.field())?;
        Ok(segment.clip_from(cut))
    }

    /// [`Cuts::clip`] on the geometry alone: what the merge keeps of an extent
    /// of `field`. This is the same rule without building a [`Segment`],
    /// which the JSON adapter uses so that it allocates nothing per segment.
    ///
    /// # Errors
    ///
    /// [`MissingField`] when the prefill has no segment of `field`.
    pub fn clip_extent(&self, field: &str, extent: Extent) -> Result<Option<Extent>, MissingField> {
        Ok(extent.clip_from(self.of(field)?))
    }

    fn of(&self, field: &str) -> Result<u64, MissingField> {
        self.get(field).ok_or_else(|| MissingField {
            field: field.to_owned(),
        })
    }
}

/// The cut of each field of `prefill`: one past the last position it covers.
///
/// Empty segments count: a prefill segment of zero rows at `pos` puts the cut
/// of its field at `pos` or later.
pub fn cut<F>(prefill: &[Segment<F>]) -> Cuts {
    let mut cuts = Cuts::default();
    for segment in prefill {
        cuts.extend(segment.field(), segment.end());
    }
    cuts
}

impl Cuts {
    /// Counts a prefill segment of `field` ending at `end`.
    pub(crate) fn extend(&mut self, field: &str, end: u64) {
        match self.by_field.iter_mut().find(|(name, _)| name == field) {
            Some((_, cut)) => *cut = (*cut).max(end),
            None => self.by_field.push((field.to_owned(), end)),
        }
    }
}

/// The merged segment list: every prefill segment as it is and in its order,
/// then every decode segment clipped at its field's cut, in its order, with
/// the ones that end at or before the cut dropped.
///
/// ```
/// use pd_stitch::algebra::{merge_segments, Dtype, Segment};
///
/// // The seed example: prefill rows [0, 3), decode rows [2, 5), uint16 (2, 4).
/// let prefill = [Segment::new("routed_experts", "p.bin", 0, 0, 3, Dtype::Uint16, vec![2, 4])?];
/// let decode = [Segment::new("routed_experts", "d.bin", 0, 2, 3, Dtype::Uint16, vec![2, 4])?];
/// let merged = merge_segments(&prefill, &decode).unwrap();
/// assert_eq!(merged[0], prefill[0]);
/// assert_eq!((merged[1].pos(), merged[1].rows(), merged[1].offset()), (3, 2, 16));
/// # Ok::<(), pd_stitch::algebra::Overflow>(())
/// ```
///
/// # Errors
///
/// [`MissingField`] when a decode segment's field has no prefill segment.
pub fn merge_segments<F: Clone>(
    prefill: &[Segment<F>],
    decode: &[Segment<F>],
) -> Result<Vec<Segment<F>>, MissingField> {
    let cuts = cut(prefill);
    let mut merged = prefill.to_vec();
    for segment in decode {
        merged.extend(cuts.clip(segment)?);
    }
    Ok(merged)
}

/// A decode segment of a field that the prefill has no segment of.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("field {field:?} has decode rows but no prefill segment, so its prompt rows are missing")]
pub struct MissingField {
    /// The field.
    pub field: String,
}
