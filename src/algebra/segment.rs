//! Segments: runs of rows that lie back to back in a file.
//!
//! A [`Segment`] says: the rows of `field` for the positions `[pos, pos + rows)`
//! lie in `file`, starting at byte `offset`, one after another, each
//! [`row_bytes`](Segment::row_bytes) long. That makes it two intervals tied by an
//! affine map, an [`Extent`]: position `x` of the segment lives at bytes
//! `offset + (x - pos) * row_bytes .. + row_bytes`.
//!
//! # Invariant
//!
//! A `Segment` can only be built by [`Segment::new`], which checks that
//! `itemsize * prod(shape)`, `pos + rows` and `offset + rows * row_bytes` all fit
//! in `u64`. Every method after that is total: no position or byte address a
//! segment reports can have wrapped around.

use std::fmt;
use std::ops::Range;

use super::{Dtype, Extent, Rows};

/// A run of rows of one field, stored back to back in one file.
///
/// The type parameter `F` is the file handle. The merge never opens files, so it
/// carries the handle along untouched: a path (`String`, the default), an index
/// into a store, or `()` when only the geometry matters.
///
/// ```
/// use pd_stitch::algebra::{Dtype, Rows, Segment};
///
/// // 5 rows of (48 layers, 8 experts) uint8 ids for positions [17, 22).
/// let seg = Segment::new("routed_experts", "/shm/x.bin", 4096, 17, 5, Dtype::Uint8, vec![48, 8])?;
/// assert_eq!(seg.row_bytes(), 384);
/// assert_eq!(seg.end(), 22);
/// assert_eq!(seg.byte_range(), 4096..4096 + 5 * 384);
///
/// // Keep the positions from 20 on: the file offset moves with them.
/// let tail = seg.clip_from(20).unwrap();
/// assert_eq!((tail.pos(), tail.rows(), tail.offset()), (20, 2, 4096 + 3 * 384));
/// assert_eq!(tail.row_address(21), seg.row_address(21));
/// # Ok::<(), pd_stitch::algebra::Overflow>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Segment<F = String> {
    field: String,
    file: F,
    dtype: Dtype,
    shape: Vec<u64>,
    extent: Extent,
}

impl<F> Segment<F> {
    /// A segment of `rows` rows of `field` for positions `[pos, pos + rows)`,
    /// stored in `file` from byte `offset` on, each row a `shape` array of
    /// `dtype`.
    ///
    /// # Errors
    ///
    /// [`Overflow`] when the row size, the end position or the end byte does not
    /// fit in `u64`. Nothing else is checked: an empty `shape` is a scalar row,
    /// and zero rows or a zero-sized row are valid segments.
    pub fn new(
        field: impl Into<String>,
        file: F,
        offset: u64,
        pos: u64,
        rows: u64,
        dtype: Dtype,
        shape: Vec<u64>,
    ) -> Result<Segment<F>, Overflow> {
        let row_bytes = row_bytes(dtype, shape.iter().copied())?;
        let extent = Extent::new(offset, pos, rows, row_bytes)?;
        Ok(Segment {
            field: field.into(),
            file,
            dtype,
            shape,
            extent,
        })
    }

    /// The name of the field whose rows these are, e.g. `"routed_experts"`.
    pub fn field(&self) -> &str {
        &self.field
    }

    /// The file handle.
    pub fn file(&self) -> &F {
        &self.file
    }

    /// The byte at which the first row starts.
    pub fn offset(&self) -> u64 {
        self.extent.offset()
    }

    /// The first position, `pos`.
    pub fn pos(&self) -> u64 {
        self.extent.pos()
    }

    /// The number of rows.
    pub fn rows(&self) -> u64 {
        self.extent.rows()
    }

    /// One past the last position, `pos + rows`.
    pub fn end(&self) -> u64 {
        self.extent.end()
    }

    /// The positions `[pos, pos + rows)`.
    pub fn positions(&self) -> Rows {
        self.extent.positions()
    }

    /// The geometry: positions tied to bytes.
    pub fn extent(&self) -> Extent {
        self.extent
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape of one row (e.g. `[layers, topk]`).
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The size of one row in bytes, `itemsize(dtype) * prod(shape)`.
    pub fn row_bytes(&self) -> u64 {
        self.extent.row_bytes()
    }

    /// The bytes the segment occupies, `offset .. offset + rows * row_bytes`.
    pub fn byte_range(&self) -> Range<u64> {
        self.extent.byte_range()
    }

    /// The bytes holding the row of `position`, or `None` when the segment does
    /// not cover it.
    pub fn row_address(&self, position: u64) -> Option<Range<u64>> {
        self.extent.row_address(position)
    }

    /// The part of the segment at positions `>= cut`: the same segment over
    /// [`Extent::clip_from`]. `None` when nothing is left
    /// (`pos + rows <= cut`, which also drops an empty segment at or before
    /// `cut`); the segment itself when `pos >= cut`; otherwise the segment moved
    /// up to `cut`: `rows` shrinks by `cut - pos` and `offset` grows by
    /// `(cut - pos) * row_bytes`, so every kept position keeps its byte address.
    pub fn clip_from(&self, cut: u64) -> Option<Segment<F>>
    where
        F: Clone,
    {
        let extent = self.extent.clip_from(cut)?;
        Some(Segment {
            field: self.field.clone(),
            file: self.file.clone(),
            dtype: self.dtype,
            shape: self.shape.clone(),
            extent,
        })
    }

    /// The same segment with its file handle mapped through `f`.
    pub fn map_file<G>(self, f: impl FnOnce(F) -> G) -> Segment<G> {
        Segment {
            field: self.field,
            file: f(self.file),
            dtype: self.dtype,
            shape: self.shape,
            extent: self.extent,
        }
    }
}

/// `itemsize(dtype) * prod(shape)`, the size of one row in bytes, checked.
///
/// ```
/// use pd_stitch::algebra::{row_bytes, Dtype};
///
/// assert_eq!(row_bytes(Dtype::Uint16, [48, 8]), Ok(768));
/// assert_eq!(row_bytes(Dtype::Uint8, []), Ok(1));
/// assert_eq!(row_bytes(Dtype::Uint8, [u64::MAX, 0]), Ok(0));
/// assert!(row_bytes(Dtype::Uint64, [1 << 32, 1 << 32]).is_err());
/// ```
///
/// # Errors
///
/// [`Overflow::RowBytes`] when the product does not fit in `u64`.
pub fn row_bytes(dtype: Dtype, shape: impl IntoIterator<Item = u64>) -> Result<u64, Overflow> {
    // One pass, no allocation. A zero dimension makes the row empty whatever
    // the others are, so an overflow only counts when no dimension is zero;
    // with every factor >= 1 the partial products never shrink, so a partial
    // product that overflows means the whole product does.
    let (mut product, mut overflowed, mut zero, mut dims) = (dtype.itemsize(), false, false, 0);
    for dim in shape {
        dims += 1;
        zero |= dim == 0;
        match product.checked_mul(dim) {
            Some(p) => product = p,
            None => overflowed = true,
        }
    }
    if zero {
        Ok(0)
    } else if overflowed {
        Err(Overflow::RowBytes { dtype, dims })
    } else {
        Ok(product)
    }
}

/// A segment whose arithmetic does not fit in `u64`.
///
/// Each variant names the quantity that overflowed and carries the values it
/// was computed from, so the message tells a reader which number in the response
/// is out of range.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Overflow {
    /// `itemsize(dtype) * prod(shape)` does not fit in `u64`.
    #[error(
        "row size itemsize({dtype}) * prod(shape) overflows u64 (shape has {dims} dimensions)"
    )]
    RowBytes {
        /// The element type.
        dtype: Dtype,
        /// The number of dimensions of the shape.
        dims: usize,
    },
    /// `pos + rows` does not fit in `u64`.
    #[error("end position pos + rows = {pos} + {rows} overflows u64")]
    End {
        /// The first position.
        pos: u64,
        /// The number of rows.
        rows: u64,
    },
    /// `offset + rows * row_bytes` does not fit in `u64`.
    #[error("end byte offset + rows * row_bytes = {offset} + {rows} * {row_bytes} overflows u64")]
    ByteEnd {
        /// The byte offset of the first row.
        offset: u64,
        /// The number of rows.
        rows: u64,
        /// The size of one row.
        row_bytes: u64,
    },
}

impl<F: fmt::Display> fmt::Display for Segment<F> {
    /// `routed_experts [3, 5) in d.bin @16 (uint16 [2, 4])`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} in {} @{} ({} {:?})",
            self.field,
            self.positions(),
            self.file,
            self.offset(),
            self.dtype,
            self.shape
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_rejects_each_overflow_with_its_own_variant() {
        assert_eq!(
            Segment::new("f", (), 0, 0, 1, Dtype::Uint16, vec![1 << 63]),
            Err(Overflow::RowBytes {
                dtype: Dtype::Uint16,
                dims: 1
            })
        );
        assert_eq!(
            Segment::new("f", (), 0, u64::MAX, 1, Dtype::Uint8, vec![]),
            Err(Overflow::End {
                pos: u64::MAX,
                rows: 1
            })
        );
        assert_eq!(
            Segment::new("f", (), u64::MAX - 1, 0, 1, Dtype::Uint16, vec![]),
            Err(Overflow::ByteEnd {
                offset: u64::MAX - 1,
                rows: 1,
                row_bytes: 2
            })
        );
        // The largest segments that fit are fine.
        assert!(Segment::new("f", (), u64::MAX - 2, 0, 1, Dtype::Uint16, vec![]).is_ok());
        assert!(Segment::new("f", (), 0, u64::MAX, 0, Dtype::Uint8, vec![]).is_ok());
        assert!(Segment::new("f", (), 0, 0, u64::MAX, Dtype::Uint8, vec![0]).is_ok());
    }

    #[test]
    fn a_zero_dimension_makes_rows_empty_however_large_the_others() {
        // Regression: the product was checked factor by factor, so a large
        // dimension before a zero overflowed although prod(shape) is 0.
        assert_eq!(row_bytes(Dtype::Int16, [u64::MAX - 40, 0]), Ok(0));
        assert_eq!(row_bytes(Dtype::Uint8, [0, u64::MAX, u64::MAX]), Ok(0));
        let seg = Segment::new(
            "f",
            (),
            u64::MAX,
            3,
            u64::MAX - 3,
            Dtype::Uint64,
            vec![1 << 40, 1 << 40, 0],
        );
        assert_eq!(seg.map(|s| s.byte_range()), Ok(u64::MAX..u64::MAX));
    }

    #[test]
    fn row_address_is_affine_in_the_position() {
        let seg = Segment::new("f", (), 10, 100, 3, Dtype::Uint16, vec![2]).unwrap();
        assert_eq!(seg.row_address(99), None);
        assert_eq!(seg.row_address(100), Some(10..14));
        assert_eq!(seg.row_address(102), Some(18..22));
        assert_eq!(seg.row_address(103), None);
    }

    #[test]
    fn display_names_everything_a_reader_needs() {
        let seg = Segment::new(
            "routed_experts",
            "d.bin",
            16,
            3,
            2,
            Dtype::Uint16,
            vec![2, 4],
        )
        .unwrap();
        assert_eq!(
            seg.to_string(),
            "routed_experts [3, 5) in d.bin @16 (uint16 [2, 4])"
        );
    }
}
