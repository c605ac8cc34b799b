//! Where a turn's rows go: placed from the turn's counts, never from the
//! row count alone, and checked against what the wire says.
//!
//! A turn of `P` prompt and `N` completion tokens has rows up to
//! `E = P + N - 1`: its last token is never fed back, so no forward of this
//! turn computed a row for it. Of `R` rows,
//!
//! - a whole response's rows cover `[E - R, E)`, and must start at the start
//!   asked (0 when none was): a full response starts at 0, a delta response
//!   where it was asked to;
//! - a prefill's cover `[P - R, P)`, and start at the start asked too;
//! - a decode's cover `[E - R, E)`: a decode starts where its engine does
//!   (vLLM at `P - 1`, or at 0 when it recomputes the prompt).
//!
//! The first rows given size the episode's rows (their dtype and row shape);
//! a turn bringing none to an episode holding none is refused, so that no
//! row shape a response merely declares sizes anything.
//!
//! A first position the wire says must agree: the rows from it must end at
//! `E` (`P` for a prefill), else the counts fit neither a full nor a delta
//! response. Pieces overlap where a P/D pair does (the decode's first
//! forward is the prompt's last position): the first piece given wins there,
//! so a prefill given before its decode stitches the pair.

use crate::algebra::{row_bytes, Dtype, Rows};

use super::error::{EpisodeError, Owner};
use super::turn::{Phase, RowPiece, Turn};
use super::widen::promote;

/// Positions whose rows one piece gives, from its row `skip` on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Run {
    /// The positions.
    pub(crate) positions: Rows,
    /// The piece's index in the turn.
    pub(crate) piece: usize,
    /// The piece's row at `positions.start()`.
    pub(crate) skip: u64,
    /// Who computed these rows.
    pub(crate) phase: Phase,
}

/// A turn's rows, placed: disjoint runs in position order, the first piece
/// winning wherever pieces overlap.
#[derive(Debug)]
pub(crate) struct Placement {
    /// The runs, sorted by position.
    pub(crate) runs: Vec<Run>,
    /// The dtype of the episode's rows with this turn's widened in.
    pub(crate) dtype: Dtype,
    /// The row shape (the episode's, or the first piece's).
    pub(crate) row_shape: Vec<u64>,
}

impl Placement {
    /// The first position of `[from, to)` that no run covers.
    pub(crate) fn first_uncovered(&self, from: u64, to: u64) -> Option<u64> {
        let mut next = from;
        for run in &self.runs {
            if next >= to {
                break;
            }
            if run.positions.start() > next {
                return Some(next);
            }
            next = next.max(run.positions.end());
        }
        (next < to).then_some(next)
    }

    /// Whether a run covers `position`.
    pub(crate) fn covers(&self, position: u64) -> bool {
        self.runs.iter().any(|run| run.positions.contains(position))
    }
}

/// The number of rows of `piece`, or why its bytes are not whole rows.
/// A row's size must fit in memory in the widest dtype (8 bytes an
/// element), so that no widening of the episode's rows overflows.
pub(crate) fn row_count(owner: Owner, index: usize, piece: &RowPiece) -> Result<u64, EpisodeError> {
    let size = row_bytes(piece.dtype(), piece.row_shape().iter().copied())
        .ok()
        .filter(|size| {
            (size / piece.dtype().itemsize())
                .checked_mul(8)
                .is_some_and(|widest| widest <= isize::MAX as u64)
        });
    let bytes = piece.bytes().len() as u64;
    match size {
        Some(size) if size > 0 && bytes % size == 0 => Ok(bytes / size),
        _ => Err(EpisodeError::PieceLength {
            owner,
            piece: index,
            first: piece.first(),
            bytes,
            dtype: piece.dtype(),
            row_shape: piece.row_shape().to_vec(),
            row_bytes: size,
        }),
    }
}

/// The dtype the episode's rows (of `dtype` and `row_shape`) become with
/// `piece`'s (starting at `position`), or why they do not mix.
pub(crate) fn widened(
    owner: Owner,
    index: usize,
    position: u64,
    piece: &RowPiece,
    dtype: Dtype,
    row_shape: &[u64],
) -> Result<Dtype, EpisodeError> {
    if piece.row_shape() != row_shape {
        return Err(EpisodeError::PieceRowShape {
            owner,
            piece: index,
            position,
            expected: row_shape.to_vec(),
            found: piece.row_shape().to_vec(),
        });
    }
    promote(dtype, piece.dtype()).ok_or(EpisodeError::PieceDtype {
        owner,
        piece: index,
        position,
        expected: dtype,
        found: piece.dtype(),
    })
}

/// Places the pieces of `turn` (the `index`-th), whose rows join an
/// episode holding rows of `held` (dtype and row shape; `None` before the
/// first turn). Each piece in turn is checked for whole rows, its counts,
/// its start, its row shape and its dtype; the first fault is the error.
pub(crate) fn place(
    index: usize,
    turn: &Turn,
    held: Option<(Dtype, &[u64])>,
) -> Result<Placement, EpisodeError> {
    let owner = Owner::Turn(index);
    let asked = turn.start().unwrap_or(0);
    if turn.pieces().is_empty() {
        return Err(EpisodeError::NoPieces { turn: index, asked });
    }
    let prompt = turn.prompt().len() as u64;
    // The caller refused an empty completion, so `end >= prompt`.
    let end = (prompt + turn.completion().len() as u64).saturating_sub(1);
    let mut format = held.map(|(dtype, shape)| (dtype, shape.to_vec()));
    let mut taken: Vec<Rows> = Vec::with_capacity(turn.pieces().len());
    let mut runs = Vec::new();
    let mut given = 0u64;
    for (k, piece) in turn.pieces().iter().enumerate() {
        let rows = row_count(owner, k, piece)?;
        given = given.saturating_add(rows);
        let side = piece.side();
        let must_end = if side == Some(Phase::Prefill) {
            prompt
        } else {
            end
        };
        let counts = EpisodeError::Counts {
            owner,
            piece: k,
            side,
            rows,
            first: piece.first(),
            end: must_end,
        };
        let first = match piece.first() {
            Some(first) => Some(first).filter(|f| f.checked_add(rows) == Some(must_end)),
            None => must_end.checked_sub(rows),
        };
        // The rows' positions: they end where the counts say.
        let Some(covered) = first.and_then(|first| Rows::new(first, must_end)) else {
            return Err(counts);
        };
        let first = covered.start();
        if side != Some(Phase::Decode) && first != asked {
            return Err(EpisodeError::StartNotAsked {
                turn: index,
                piece: k,
                rows,
                first,
                asked,
            });
        }
        format = Some(match format {
            None => (piece.dtype(), piece.row_shape().to_vec()),
            Some((dtype, shape)) => (widened(owner, k, first, piece, dtype, &shape)?, shape),
        });
        // The positions no earlier piece of the turn gave.
        let mut parts = vec![covered];
        for earlier in &taken {
            parts = parts
                .into_iter()
                .flat_map(|part| {
                    let (before, after) = part.difference(*earlier);
                    before.into_iter().chain(after)
                })
                .collect();
        }
        taken.push(covered);
        for part in parts {
            // A whole response's rows below the prompt's end are its
            // prefill's; a side's are that side's.
            let split = match side {
                None => part.start().max(part.end().min(prompt)),
                Some(Phase::Prefill) => part.end(),
                Some(Phase::Decode) => part.start(),
            };
            for (positions, phase) in [
                (Rows::new(part.start(), split), Phase::Prefill),
                (Rows::new(split, part.end()), Phase::Decode),
            ] {
                if let Some(positions) = positions.filter(|p| !p.is_empty()) {
                    runs.push(Run {
                        positions,
                        piece: k,
                        skip: positions.start() - first,
                        phase,
                    });
                }
            }
        }
    }
    runs.sort_by_key(|run| run.positions.start());
    let Some((dtype, row_shape)) = format else {
        return Err(EpisodeError::NoPieces { turn: index, asked });
    };
    // The episode's rows are sized by rows given: a row shape no row backs
    // (a piece's declaration, from the input) would make the episode hold a
    // zero row of that size for the turn's last position.
    if held.is_none() && given == 0 {
        return Err(EpisodeError::Unsized {
            turn: index,
            position: asked,
            dtype,
            row_shape,
        });
    }
    Ok(Placement {
        runs,
        dtype,
        row_shape,
    })
}
