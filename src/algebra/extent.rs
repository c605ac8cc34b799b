//! Extents: a run of positions mapped onto a run of bytes.
//!
//! An [`Extent`] is the geometry of a segment without its names: positions
//! `[pos, pos + rows)` stored back to back from byte `offset` on, each
//! `row_bytes` long, so position `x` lives at bytes
//! `offset + (x - pos) * row_bytes .. + row_bytes`. (File systems call such a
//! logical-to-physical run an extent too.) It is `Copy` and allocation-free,
//! which is what the JSON adapter works with on the hot path; a
//! [`Segment`](super::Segment) is an extent with a field, a file, a dtype and
//! a shape.
//!
//! # Invariant
//!
//! [`Extent::new`] checks that `pos + rows` and `offset + rows * row_bytes` fit
//! in `u64`; every method after that is total.

use std::ops::Range;

use super::{Overflow, Rows};

/// Positions `[pos, pos + rows)` stored back to back from byte `offset`, each
/// `row_bytes` long.
///
/// ```
/// use pd_stitch::algebra::Extent;
///
/// let extent = Extent::new(4096, 17, 5, 384)?;
/// assert_eq!(extent.byte_range(), 4096..4096 + 5 * 384);
/// let tail = extent.clip_from(20).unwrap();
/// assert_eq!((tail.pos(), tail.rows(), tail.offset()), (20, 2, 4096 + 3 * 384));
/// assert_eq!(tail.row_address(21), extent.row_address(21));
/// # Ok::<(), pd_stitch::algebra::Overflow>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Extent {
    offset: u64,
    positions: Rows,
    row_bytes: u64,
}

impl Extent {
    /// `rows` rows of `row_bytes` bytes for positions `[pos, pos + rows)`,
    /// from byte `offset` on.
    ///
    /// # Errors
    ///
    /// [`Overflow::End`] when `pos + rows` does not fit in `u64`,
    /// [`Overflow::ByteEnd`] when `offset + rows * row_bytes` does not.
    pub fn new(offset: u64, pos: u64, rows: u64, row_bytes: u64) -> Result<Extent, Overflow> {
        let positions = Rows::with_len(pos, rows).ok_or(Overflow::End { pos, rows })?;
        rows.checked_mul(row_bytes)
            .and_then(|len| offset.checked_add(len))
            .ok_or(Overflow::ByteEnd {
                offset,
                rows,
                row_bytes,
            })?;
        Ok(Extent {
            offset,
            positions,
            row_bytes,
        })
    }

    /// The byte at which the first row starts.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The first position.
    pub fn pos(&self) -> u64 {
        self.positions.start()
    }

    /// The number of rows.
    pub fn rows(&self) -> u64 {
        self.positions.len()
    }

    /// One past the last position, `pos + rows`.
    pub fn end(&self) -> u64 {
        self.positions.end()
    }

    /// The positions `[pos, pos + rows)`.
    pub fn positions(&self) -> Rows {
        self.positions
    }

    /// The size of one row in bytes.
    pub fn row_bytes(&self) -> u64 {
        self.row_bytes
    }

    /// The bytes of all rows, `offset .. offset + rows * row_bytes`.
    pub fn byte_range(&self) -> Range<u64> {
        // Checked by `new`: rows * row_bytes and the sum fit in u64.
        self.offset..self.offset + self.rows() * self.row_bytes
    }

    /// The bytes holding the row of `position`, or `None` when the extent does
    /// not cover it.
    pub fn row_address(&self, position: u64) -> Option<Range<u64>> {
        if !self.positions.contains(position) {
            return None;
        }
        // position - pos < rows, so the row lies inside byte_range(), which fits.
        let start = self.offset + (position - self.pos()) * self.row_bytes;
        Some(start..start + self.row_bytes)
    }

    /// The part at positions `>= cut`: `None` when nothing is left
    /// (`pos + rows <= cut`, which also drops an empty extent at or before
    /// `cut`); the extent itself when `pos >= cut`; otherwise moved up to
    /// `cut`, `rows` shrunk by `cut - pos` and `offset` grown by
    /// `(cut - pos) * row_bytes`, so every kept position keeps its bytes.
    pub fn clip_from(&self, cut: u64) -> Option<Extent> {
        let kept = self.positions.clip_from(cut)?;
        // kept.start() - pos < rows: the skipped bytes lie inside byte_range().
        let skipped = kept.start() - self.pos();
        Some(Extent {
            offset: self.offset + skipped * self.row_bytes,
            positions: kept,
            row_bytes: self.row_bytes,
        })
    }
}
