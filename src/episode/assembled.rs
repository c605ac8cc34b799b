//! [`Assembled`]: the rows of one path of an episode, position by position,
//! with where each came from and what each turn found when its rows met
//! those already there.

use crate::algebra::Dtype;

use super::turn::Phase;

/// Where a position's row came from: the turn that wrote it, and which
/// side computed it (for a whole response's rows, the prefill below the
/// turn's prompt length and the decode from it on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RowSource {
    /// The turn's index.
    pub turn: usize,
    /// The side.
    pub phase: Phase,
}

/// What one turn did when it was pushed.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TurnReport {
    /// The earlier turn it continues: the one sharing the longest prefix
    /// with its prompt, the earliest of those when several do (`None` for
    /// the first turn).
    pub continues: Option<usize>,
    /// `L`, the tokens its prompt shares with that turn: its first new
    /// position.
    pub common: u64,
    /// The start it asked for (0 when none was).
    pub start: u64,
    /// Its prompt's length, `P`.
    pub prompt: u64,
    /// Its completion's length, `N`.
    pub completion: u64,
    /// The positions whose row it wrote (new ones, the boundary, and under
    /// [`Prefer::Latest`](super::Prefer::Latest) those it replaced).
    pub written: u64,
    /// The positions where its row met a row already there.
    pub compared: u64,
    /// Those of them where the two rows differed (as bytes, once both are
    /// in the episode's dtype), in position order.
    pub differed: Vec<u64>,
}

impl TurnReport {
    /// One past its last row, `P + N - 1`: its last token has no row in it.
    pub fn end(&self) -> u64 {
        (self.prompt + self.completion).saturating_sub(1)
    }
}

/// The rows of the path ending at one turn: its `P + N` positions, the
/// rows in the episode's dtype back to back in position order, and per
/// position where its row came from.
///
/// Every position has a row except the last (the turn's last token, never
/// fed back): [`Assembled::has_row`] is false there only, and its bytes are
/// zeros.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assembled {
    turn: usize,
    dtype: Dtype,
    row_shape: Vec<u64>,
    row_bytes: usize,
    rows: Vec<u8>,
    sources: Vec<Option<RowSource>>,
    turns: Vec<TurnReport>,
}

impl Assembled {
    /// The path's rows as the episode assembled them; `sources` has one
    /// entry a position, `rows` one row of `row_bytes` a position.
    pub(crate) fn new(
        turn: usize,
        format: (Dtype, Vec<u64>, usize),
        rows: Vec<u8>,
        sources: Vec<Option<RowSource>>,
        turns: Vec<TurnReport>,
    ) -> Assembled {
        let (dtype, row_shape, row_bytes) = format;
        debug_assert_eq!(rows.len(), sources.len() * row_bytes);
        Assembled {
            turn,
            dtype,
            row_shape,
            row_bytes,
            rows,
            sources,
            turns,
        }
    }

    /// The turn whose path this is.
    pub fn turn(&self) -> usize {
        self.turn
    }

    /// The number of positions, `P + N` of that turn.
    pub fn len(&self) -> u64 {
        self.sources.len() as u64
    }

    /// Whether there is no position (never: a turn has a completion token).
    pub fn is_empty(&self) -> bool {
        self.sources.is_empty()
    }

    /// The rows' dtype: NumPy's promotion of every pushed piece's.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape of one row.
    pub fn row_shape(&self) -> &[u64] {
        &self.row_shape
    }

    /// The size of one row in bytes.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }

    /// Every row, back to back in position order, little-endian.
    pub fn rows(&self) -> &[u8] {
        &self.rows
    }

    /// The rows, taken out.
    pub fn into_rows(self) -> Vec<u8> {
        self.rows
    }

    /// The row of `position`, when the position has one.
    pub fn row(&self, position: u64) -> Option<&[u8]> {
        let index = usize::try_from(position).ok()?;
        self.sources.get(index)?.as_ref()?;
        let at = index * self.row_bytes;
        self.rows.get(at..at + self.row_bytes)
    }

    /// Whether `position` has a row: every position but the last.
    pub fn has_row(&self, position: u64) -> bool {
        self.source(position).is_some()
    }

    /// Where the row of `position` came from.
    pub fn source(&self, position: u64) -> Option<RowSource> {
        let index = usize::try_from(position).ok()?;
        self.sources.get(index).copied().flatten()
    }

    /// Where each position's row came from, `None` where it has none.
    pub fn sources(&self) -> &[Option<RowSource>] {
        &self.sources
    }

    /// What each turn did, for the turns pushed up to this path's (index
    /// order).
    pub fn turns(&self) -> &[TurnReport] {
        &self.turns
    }
}
