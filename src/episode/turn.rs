//! A turn as the episode takes it: its tokens, the start it asked for, and
//! its rows in the pieces a response gave them in.
//!
//! Nothing here reads a response: whoever reads one (the table's readers,
//! the Python binding, the command) hands the episode the rows as bytes
//! with their dtype and row shape, and the first position only when the
//! wire says it. Where the rows go is the episode's business, decided from
//! the token counts (`place.rs`).

use crate::algebra::Dtype;

/// Which side of a P/D pair computed a row: the prefill (the prompt, in
/// one batch) or the decode (one token a step, in another batch, where
/// rare flips are legitimate).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// The prompt's forward.
    Prefill,
    /// A generation step.
    Decode,
}

impl Phase {
    /// `"prefill"` or `"decode"`.
    pub const fn name(self) -> &'static str {
        match self {
            Phase::Prefill => "prefill",
            Phase::Decode => "decode",
        }
    }
}

/// Rows of one turn as one response (or one side of a P/D pair) gave them:
/// a dtype, a row shape (`[layers, topk]` for routed experts), the rows'
/// bytes back to back in position order, little-endian, and the first
/// position when the wire says it.
///
/// A piece is a **whole** response's rows (stitched, or colocated), or the
/// **prefill** or **decode** side of a P/D pair. The side decides where
/// the rows may go (see [`Episode::push`](super::Episode::push)) and which
/// [`Phase`] the episode records for them.
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::episode::RowPiece;
///
/// // 3 rows of 2 x 1 uint8 placed from the counts, and a decode's rows
/// // whose wire said they start at position 9.
/// let whole = RowPiece::whole(Dtype::Uint8, vec![2, 1], vec![0; 6]);
/// let decode = RowPiece::decode(Dtype::Uint8, vec![2, 1], vec![0; 6]).at(9);
/// assert_eq!((whole.first(), decode.first()), (None, Some(9)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowPiece {
    dtype: Dtype,
    row_shape: Vec<u64>,
    bytes: Vec<u8>,
    first: Option<u64>,
    side: Option<Phase>,
}

impl RowPiece {
    fn new(dtype: Dtype, row_shape: Vec<u64>, bytes: Vec<u8>, side: Option<Phase>) -> RowPiece {
        RowPiece {
            dtype,
            row_shape,
            bytes,
            first: None,
            side,
        }
    }

    /// A whole response's rows: stitched, or from a colocated server.
    pub fn whole(dtype: Dtype, row_shape: Vec<u64>, bytes: Vec<u8>) -> RowPiece {
        RowPiece::new(dtype, row_shape, bytes, None)
    }

    /// The prefill side of a P/D pair.
    pub fn prefill(dtype: Dtype, row_shape: Vec<u64>, bytes: Vec<u8>) -> RowPiece {
        RowPiece::new(dtype, row_shape, bytes, Some(Phase::Prefill))
    }

    /// The decode side of a P/D pair.
    pub fn decode(dtype: Dtype, row_shape: Vec<u64>, bytes: Vec<u8>) -> RowPiece {
        RowPiece::new(dtype, row_shape, bytes, Some(Phase::Decode))
    }

    /// The piece with the first position its wire says (compact `start`, a
    /// segment's `pos`, a `.npy` placed by its counts). Without it the
    /// episode places the rows from the turn's counts alone.
    pub fn at(mut self, first: u64) -> RowPiece {
        self.first = Some(first);
        self
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape of one row.
    pub fn row_shape(&self) -> &[u64] {
        &self.row_shape
    }

    /// The rows, back to back.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The first position, when the wire said it.
    pub fn first(&self) -> Option<u64> {
        self.first
    }

    /// The side of a P/D pair, or `None` for a whole response's rows.
    pub fn side(&self) -> Option<Phase> {
        self.side
    }
}

/// One turn of an episode: the prompt's token ids (all of them, the
/// earlier turns' included), the completion's (the choice followed), the
/// start it asked the engine for (`None`: a full response, from 0), and its
/// rows as one or more [`RowPiece`]s.
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::episode::{RowPiece, Turn};
///
/// // Turn 2 of a chat: the prompt repeats turn 1 (4 tokens) and adds 2; it
/// // asked for rows from position 3 (vLLM's routed_experts_prompt_start =
/// // 4 - 1), and got 5 rows: [3, 8), ending before its last token.
/// let turn = Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7, 8, 9])
///     .with_start(3)
///     .with_piece(RowPiece::whole(Dtype::Uint8, vec![1], vec![0; 5]));
/// assert_eq!(turn.start(), Some(3));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Turn {
    prompt: Vec<u64>,
    completion: Vec<u64>,
    start: Option<u64>,
    pieces: Vec<RowPiece>,
}

impl Turn {
    /// A turn of these tokens, with no start asked and no rows yet.
    pub fn new(prompt: Vec<u64>, completion: Vec<u64>) -> Turn {
        Turn {
            prompt,
            completion,
            start: None,
            pieces: Vec::new(),
        }
    }

    /// The turn, having asked the engine for rows from `start` on (a delta
    /// request).
    pub fn with_start(mut self, start: u64) -> Turn {
        self.start = Some(start);
        self
    }

    /// The turn with one more piece of rows. Where pieces overlap, the
    /// first given wins: give a P/D pair's prefill before its decode.
    pub fn with_piece(mut self, piece: RowPiece) -> Turn {
        self.pieces.push(piece);
        self
    }

    /// The prompt's token ids.
    pub fn prompt(&self) -> &[u64] {
        &self.prompt
    }

    /// The completion's token ids.
    pub fn completion(&self) -> &[u64] {
        &self.completion
    }

    /// The start asked for, if any.
    pub fn start(&self) -> Option<u64> {
        self.start
    }

    /// The pieces, in the order given.
    pub fn pieces(&self) -> &[RowPiece] {
        &self.pieces
    }
}
