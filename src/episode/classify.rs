//! The full-context check: an assembled path beside the forward of its
//! whole token sequence as one prompt, position by position.
//!
//! The forward computes every position of the episode in one prefill, with
//! the same prefixes the turns had: where the episode took a prefill's row
//! the two must agree. A decode computes its rows one step at a time in
//! other batches than a prefill, so a rare flip there is legitimate. So a
//! difference is sorted as
//!
//! - **decode-sourced**: the episode's row came from a decode (counted, not
//!   failed);
//! - **boundary**: otherwise, at a turn's first new position `L` or the one
//!   before it, `L - 1`, of a turn on the path (where an assembly placed one
//!   position off would differ first);
//! - **scattered**: a prefill's row, elsewhere.
//!
//! A decode's row at a boundary position (a turn adding no prompt token
//! starts its new positions in its decode) is decode-sourced: the boundary
//! class names where a prefill's row went wrong, and every prefill-sourced
//! difference fails the check ([`Classified::passes`]).

use super::assembled::Assembled;
use super::error::{EpisodeError, Owner};
use super::place::{row_count, widened};
use super::turn::{Phase, RowPiece};
use super::widen::widen;

/// What a position that differs from the full-context forward is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Finding {
    /// A prefill's row at a turn's first new position or the one before it.
    Boundary,
    /// A row the episode took from a decode.
    DecodeSourced,
    /// A prefill's row elsewhere.
    Scattered,
}

impl Finding {
    /// The finding a push's error is, for a check that pushes turns and
    /// compares: a position without a row at a boundary (a delta asked from
    /// `L` instead of `L - 1`) is a boundary difference at that position.
    ///
    /// ```
    /// use pd_stitch::algebra::Dtype;
    /// use pd_stitch::episode::{Episode, Finding, Prefer, RowPiece, Turn};
    ///
    /// let rows = |n: usize| RowPiece::whole(Dtype::Uint8, vec![1], vec![0; n]);
    /// let mut episode = Episode::new(Prefer::Earliest);
    /// episode.push(Turn::new(vec![1, 2], vec![3]).with_piece(rows(2)))?;
    /// let late = Turn::new(vec![1, 2, 3, 4], vec![5]).with_start(3).with_piece(rows(1));
    /// let err = episode.push(late).unwrap_err();
    /// assert_eq!(Finding::of_error(&err), Some((2, Finding::Boundary)));
    /// # Ok::<(), pd_stitch::episode::EpisodeError>(())
    /// ```
    pub fn of_error(error: &EpisodeError) -> Option<(u64, Finding)> {
        if error.is_boundary() {
            Some((error.position()?, Finding::Boundary))
        } else {
            None
        }
    }

    /// `"boundary"`, `"decode-sourced"` or `"scattered"`.
    pub const fn name(self) -> &'static str {
        match self {
            Finding::Boundary => "boundary",
            Finding::DecodeSourced => "decode-sourced",
            Finding::Scattered => "scattered",
        }
    }
}

/// An assembled path compared with the full-context forward: the positions
/// compared (every one with a row), and those that differed, by finding,
/// each list in position order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classified {
    compared: u64,
    boundary: Vec<u64>,
    decode_sourced: Vec<u64>,
    scattered: Vec<u64>,
}

impl Classified {
    /// The positions compared.
    pub fn compared(&self) -> u64 {
        self.compared
    }

    /// The positions that differed, all findings together.
    pub fn differed(&self) -> u64 {
        (self.boundary.len() + self.decode_sourced.len() + self.scattered.len()) as u64
    }

    /// The positions of one finding.
    pub fn positions(&self, finding: Finding) -> &[u64] {
        match finding {
            Finding::Boundary => &self.boundary,
            Finding::DecodeSourced => &self.decode_sourced,
            Finding::Scattered => &self.scattered,
        }
    }

    /// Whether every prefill-sourced row agreed: no boundary and no
    /// scattered difference (decode-sourced ones are legitimate).
    pub fn passes(&self) -> bool {
        self.boundary.is_empty() && self.scattered.is_empty()
    }
}

/// Compares `assembled` with `full`, the rows of the forward of its whole
/// token sequence as one prompt: rows `[0, len - 1)` or `[0, len)` (a row
/// for the last position is not compared: the episode has none), from 0
/// when the wire says where. Rows are compared as bytes once both are in
/// the dtype both widen to.
///
/// Errors: `full`'s bytes not whole rows ([`EpisodeError::PieceLength`]), a
/// row count or first position other than those
/// ([`EpisodeError::Counts`]), another row shape
/// ([`EpisodeError::PieceRowShape`]), a dtype that does not widen with the
/// episode's ([`EpisodeError::PieceDtype`]); each names
/// [`Owner::FullContext`].
pub fn classify(assembled: &Assembled, full: &RowPiece) -> Result<Classified, EpisodeError> {
    let owner = Owner::FullContext;
    let rows = row_count(owner, 0, full)?;
    let len = assembled.len();
    let from_zero = full.first().is_none_or(|first| first == 0);
    if !from_zero || rows.saturating_add(1) < len || rows > len {
        return Err(EpisodeError::Counts {
            owner,
            piece: 0,
            side: full.side(),
            rows,
            first: full.first(),
            end: len,
        });
    }
    let dtype = widened(owner, 0, 0, full, assembled.dtype(), assembled.row_shape())?;
    let boundaries = boundaries(assembled);
    let elements = assembled.row_bytes() / assembled.dtype().itemsize() as usize;
    let wide = elements * dtype.itemsize() as usize;
    let full_size = elements * full.dtype().itemsize() as usize;
    let (mut ours, mut theirs) = (vec![0u8; wide], vec![0u8; wide]);
    let mut classified = Classified::default();
    for (index, source) in assembled.sources().iter().enumerate() {
        let Some(source) = source else { continue };
        let position = index as u64;
        classified.compared += 1;
        let row = assembled.row(position).unwrap_or_default();
        widen(assembled.dtype(), dtype, row, &mut ours);
        let other = &full.bytes()[index * full_size..(index + 1) * full_size];
        widen(full.dtype(), dtype, other, &mut theirs);
        if ours == theirs {
            continue;
        }
        let list = if source.phase == Phase::Decode {
            &mut classified.decode_sourced
        } else if boundaries.contains(&position) {
            &mut classified.boundary
        } else {
            &mut classified.scattered
        };
        list.push(position);
    }
    Ok(classified)
}

/// `L - 1` and `L` of every turn on the path (the path's turn, the turn it
/// continues, and so on back to the first): the positions where each joined
/// the one before.
fn boundaries(assembled: &Assembled) -> Vec<u64> {
    let turns = assembled.turns();
    let mut positions = Vec::new();
    let mut turn = turns.len().checked_sub(1);
    while let Some(report) = turn.and_then(|t| turns.get(t)) {
        if report.continues.is_some() {
            positions.extend(report.common.checked_sub(1));
            positions.push(report.common);
        }
        // A turn continues an earlier one, so this ends.
        turn = report.continues.filter(|&c| Some(c) < turn);
    }
    positions
}
