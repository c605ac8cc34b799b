//! [`EpisodeError`]: why a turn could not join an episode, naming the turn,
//! the position and what was expected.

use std::fmt;

use crate::algebra::Dtype;

use super::turn::Phase;

/// Whose rows an error is about: a turn's, or the full-context forward's
/// that [`classify`](super::classify) compares an episode with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Owner {
    /// The turn of this index (0 for the first pushed).
    Turn(usize),
    /// The forward of the whole episode as one prompt.
    FullContext,
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Owner::Turn(turn) => write!(f, "turn {turn}"),
            Owner::FullContext => f.write_str("the full-context forward"),
        }
    }
}

/// Why a turn was refused (the episode is unchanged), why a path could not
/// be assembled, or why a full-context forward could not be compared.
///
/// Every variant names the turn and, where there is one, the position;
/// [`EpisodeError::kind`] classifies it by a stable name.
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::episode::{Episode, EpisodeErrorKind, Prefer, RowPiece, Turn};
///
/// let rows = |n: usize| RowPiece::whole(Dtype::Uint8, vec![1], vec![7; n]);
/// let mut episode = Episode::new(Prefer::Earliest);
/// // Turn 0: 3 prompt tokens, 2 generated; rows [0, 4).
/// episode.push(Turn::new(vec![1, 2, 3], vec![4, 5]).with_piece(rows(4)))?;
/// // Turn 1 repeats all 5 tokens and adds one: L = 5. Asked from L instead
/// // of L - 1, it leaves position 4 (turn 0's last token) without a row.
/// let err = episode
///     .push(Turn::new(vec![1, 2, 3, 4, 5, 6], vec![7]).with_start(5).with_piece(rows(1)))
///     .unwrap_err();
/// assert_eq!(err.kind(), EpisodeErrorKind::RowGap);
/// assert_eq!(
///     err.to_string(),
///     "turn 1: position 4 has no row: turn 1 asked from 5 but its common prefix \
///      with turn 0 is 5 (turn 0's rows end at 4)"
/// );
/// assert!(err.is_boundary());
/// # Ok::<(), pd_stitch::episode::EpisodeError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum EpisodeError {
    /// A turn without a completion token: its rows end at its last token,
    /// so it has none to end at.
    #[non_exhaustive]
    NoCompletion {
        /// The turn.
        turn: usize,
        /// The prompt's length, where the completion should start.
        prompt: u64,
    },
    /// A turn whose prompt does not start with the whole prompt of any
    /// earlier turn: it belongs to another episode.
    #[non_exhaustive]
    ExtendsNoTurn {
        /// The turn.
        turn: usize,
        /// The most tokens its prompt shares with an earlier turn.
        common: u64,
        /// The earliest turn sharing that many.
        closest: usize,
        /// The length of that turn's prompt (more than `common`).
        closest_prompt: u64,
    },
    /// A turn that asked for rows from beyond the tokens it shares with the
    /// turn it continues: the rows below the start would be another
    /// sequence's.
    #[non_exhaustive]
    StartBeyondPrefix {
        /// The turn.
        turn: usize,
        /// The start asked.
        start: u64,
        /// The common prefix, `L`.
        common: u64,
        /// The turn it continues (`None` for the first turn).
        continues: Option<usize>,
    },
    /// A turn given without any piece of rows.
    #[non_exhaustive]
    NoPieces {
        /// The turn.
        turn: usize,
        /// The start asked (0 when none was), where its rows would start.
        asked: u64,
    },
    /// A piece whose bytes are not a whole number of rows, or whose rows
    /// have no size (a zero dimension) or one too large to hold.
    #[non_exhaustive]
    PieceLength {
        /// Whose rows.
        owner: Owner,
        /// The piece's index among the turn's.
        piece: usize,
        /// The first position the wire said, if any.
        first: Option<u64>,
        /// The piece's bytes.
        bytes: u64,
        /// Its dtype.
        dtype: Dtype,
        /// Its row shape.
        row_shape: Vec<u64>,
        /// The size of one row (`None`: too large to hold).
        row_bytes: Option<u64>,
    },
    /// A piece whose row count and first position fit neither a full nor a
    /// delta response: its rows do not end where the counts say they must
    /// (`P + N - 1` for a turn's whole or decode rows, `P` for a prefill's),
    /// or there are more of them than positions before that end.
    #[non_exhaustive]
    Counts {
        /// Whose rows.
        owner: Owner,
        /// The piece's index.
        piece: usize,
        /// The piece's side (`None`: a whole response).
        side: Option<Phase>,
        /// Its row count.
        rows: u64,
        /// The first position the wire said, if any.
        first: Option<u64>,
        /// Where its rows must end.
        end: u64,
    },
    /// A whole or prefill piece whose rows start at another position than
    /// the start the turn asked for (placed from the counts, or said by the
    /// wire): a delta start other than the one asked.
    #[non_exhaustive]
    StartNotAsked {
        /// The turn.
        turn: usize,
        /// The piece's index.
        piece: usize,
        /// Its row count.
        rows: u64,
        /// Where its rows start.
        first: u64,
        /// The start asked (0 when none was).
        asked: u64,
    },
    /// A piece whose row shape differs from the episode's (the first
    /// piece's).
    #[non_exhaustive]
    PieceRowShape {
        /// Whose rows.
        owner: Owner,
        /// The piece's index.
        piece: usize,
        /// Where its rows start.
        position: u64,
        /// The episode's row shape.
        expected: Vec<u64>,
        /// The piece's.
        found: Vec<u64>,
    },
    /// A piece whose dtype does not widen with the episode's: integers and
    /// floats, bool and anything else, or `uint64` and a signed integer
    /// (which NumPy would make `float64`).
    #[non_exhaustive]
    PieceDtype {
        /// Whose rows.
        owner: Owner,
        /// The piece's index.
        piece: usize,
        /// Where its rows start.
        position: u64,
        /// The episode's dtype.
        expected: Dtype,
        /// The piece's.
        found: Dtype,
    },
    /// A turn whose pieces hold no row, pushed onto an episode holding
    /// none: the episode's rows are sized by the rows given, so a row shape
    /// no row backs sizes nothing (it is only the input's declaration, and
    /// would make the episode hold a zero row of that size for the turn's
    /// last position). Only a first turn of one token can be so: any other
    /// has a position before its last, which needs a row.
    #[non_exhaustive]
    Unsized {
        /// The turn.
        turn: usize,
        /// The start asked (0 when none was), where its rows would start.
        position: u64,
        /// The dtype its pieces declare.
        dtype: Dtype,
        /// The row shape they declare.
        row_shape: Vec<u64>,
    },
    /// A position of the turn's path, before its last, with no row once
    /// the turn is placed: below the start, a position no earlier turn
    /// computed (the boundary, when a delta start was one too late), or
    /// from the start on, one none of the turn's pieces covers.
    #[non_exhaustive]
    RowGap {
        /// The turn.
        turn: usize,
        /// The first position without a row.
        position: u64,
        /// The start asked (0 when none was).
        asked: u64,
        /// The common prefix with the turn it continues, `L`.
        common: u64,
        /// The turn it continues (`None` for the first turn).
        continues: Option<usize>,
        /// Where the rows of the turn it continues end (its last position).
        continued_end: Option<u64>,
        /// Where this turn's rows end, `P + N - 1`.
        end: u64,
    },
    /// [`Episode::finish`](super::Episode::finish) on an episode with no
    /// turn: there is no last turn whose path to assemble.
    NoTurns,
}

impl EpisodeError {
    /// The kind of error, by a stable name.
    pub fn kind(&self) -> EpisodeErrorKind {
        match self {
            EpisodeError::NoCompletion { .. } => EpisodeErrorKind::NoCompletion,
            EpisodeError::ExtendsNoTurn { .. } => EpisodeErrorKind::ExtendsNoTurn,
            EpisodeError::StartBeyondPrefix { .. } => EpisodeErrorKind::StartBeyondPrefix,
            EpisodeError::NoPieces { .. } => EpisodeErrorKind::NoPieces,
            EpisodeError::PieceLength { .. } => EpisodeErrorKind::PieceLength,
            EpisodeError::Counts { .. } => EpisodeErrorKind::Counts,
            EpisodeError::StartNotAsked { .. } => EpisodeErrorKind::StartNotAsked,
            EpisodeError::PieceRowShape { .. } => EpisodeErrorKind::PieceRowShape,
            EpisodeError::PieceDtype { .. } => EpisodeErrorKind::PieceDtype,
            EpisodeError::Unsized { .. } => EpisodeErrorKind::Unsized,
            EpisodeError::RowGap { .. } => EpisodeErrorKind::RowGap,
            EpisodeError::NoTurns => EpisodeErrorKind::NoTurns,
        }
    }

    /// Whose rows the error is about: the turn's, or the full-context
    /// forward's; `None` for [`EpisodeError::NoTurns`].
    pub fn owner(&self) -> Option<Owner> {
        match self {
            EpisodeError::NoCompletion { turn, .. }
            | EpisodeError::ExtendsNoTurn { turn, .. }
            | EpisodeError::StartBeyondPrefix { turn, .. }
            | EpisodeError::NoPieces { turn, .. }
            | EpisodeError::StartNotAsked { turn, .. }
            | EpisodeError::Unsized { turn, .. }
            | EpisodeError::RowGap { turn, .. } => Some(Owner::Turn(*turn)),
            EpisodeError::PieceLength { owner, .. }
            | EpisodeError::Counts { owner, .. }
            | EpisodeError::PieceRowShape { owner, .. }
            | EpisodeError::PieceDtype { owner, .. } => Some(*owner),
            EpisodeError::NoTurns => None,
        }
    }

    /// The position the error is at, when there is one: where the
    /// completion should start, where the prompt departs from every earlier
    /// turn, the start asked, where the piece's rows start (when known), or
    /// the position without a row.
    pub fn position(&self) -> Option<u64> {
        match self {
            EpisodeError::NoCompletion { prompt, .. } => Some(*prompt),
            EpisodeError::ExtendsNoTurn { common, .. } => Some(*common),
            EpisodeError::StartBeyondPrefix { start, .. } => Some(*start),
            EpisodeError::NoPieces { asked, .. } => Some(*asked),
            EpisodeError::PieceLength { first, .. } | EpisodeError::Counts { first, .. } => *first,
            EpisodeError::StartNotAsked { first, .. } => Some(*first),
            EpisodeError::PieceRowShape { position, .. }
            | EpisodeError::PieceDtype { position, .. }
            | EpisodeError::Unsized { position, .. }
            | EpisodeError::RowGap { position, .. } => Some(*position),
            EpisodeError::NoTurns => None,
        }
    }

    /// Whether this is a position without a row at a boundary: the turn's
    /// first new position `L`, or the one before it, `L - 1` (the last token
    /// of the turn it continues). A delta asked from `L` instead of `L - 1`
    /// fails so; a full-context check counts it as a boundary difference
    /// ([`Finding::of_error`](super::Finding::of_error)).
    pub fn is_boundary(&self) -> bool {
        match self {
            EpisodeError::RowGap {
                position, common, ..
            } => *position == *common || position.checked_add(1) == Some(*common),
            _ => false,
        }
    }
}

/// `first + rows` for a message, wide enough never to wrap.
fn end_of(first: u64, rows: u64) -> u128 {
    u128::from(first) + u128::from(rows)
}

fn side_name(side: Option<Phase>) -> &'static str {
    side.map_or("whole", Phase::name)
}

impl fmt::Display for EpisodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EpisodeError::NoCompletion { turn, prompt } => write!(
                f,
                "turn {turn}: position {prompt}: no completion token: a turn's rows end \
                 before its last completion token, so it needs one"
            ),
            EpisodeError::ExtendsNoTurn {
                turn,
                common,
                closest,
                closest_prompt,
            } => write!(
                f,
                "turn {turn}: position {common}: its prompt extends no earlier turn: it \
                 shares {common} tokens with turn {closest}, whose prompt has {closest_prompt}"
            ),
            EpisodeError::StartBeyondPrefix {
                turn,
                start,
                common,
                continues,
            } => match continues {
                Some(c) => write!(
                    f,
                    "turn {turn}: position {start}: asked from {start}, beyond the {common} \
                     tokens it shares with turn {c}: the rows below would be another sequence's"
                ),
                None => write!(
                    f,
                    "turn {turn}: position {start}: asked from {start}, but the first turn \
                     continues none, so its rows must start at 0"
                ),
            },
            EpisodeError::NoPieces { turn, asked } => write!(
                f,
                "turn {turn}: position {asked}: no rows: a turn gives its rows as at least one \
                 piece (a response's rows, or the two sides of a P/D pair)"
            ),
            EpisodeError::PieceLength {
                owner,
                piece,
                first,
                bytes,
                dtype,
                row_shape,
                row_bytes,
            } => {
                write!(f, "{owner}: ")?;
                if let Some(first) = first {
                    write!(f, "position {first}: ")?;
                }
                match row_bytes {
                    Some(0) => write!(
                        f,
                        "piece {piece}'s rows of {dtype} {row_shape:?} hold no bytes, so their \
                         count cannot be read from its {bytes} bytes"
                    ),
                    Some(size) => write!(
                        f,
                        "piece {piece}'s {bytes} bytes are not a whole number of rows of \
                         {size} bytes ({dtype} {row_shape:?})"
                    ),
                    None => write!(
                        f,
                        "piece {piece}'s rows of {dtype} {row_shape:?} are too large to hold \
                         (as 8-byte elements, past isize::MAX bytes)"
                    ),
                }
            }
            EpisodeError::Counts {
                owner: Owner::FullContext,
                piece,
                rows,
                first,
                end,
                ..
            } => write!(
                f,
                "the full-context forward: piece {piece}: {rows} rows from {}, but the \
                 episode's {end} positions need rows [0, {}) or [0, {end})",
                first.unwrap_or(0),
                end.saturating_sub(1)
            ),
            EpisodeError::Counts {
                owner,
                piece,
                side,
                rows,
                first,
                end,
            } => {
                let why = if *side == Some(Phase::Prefill) {
                    "where the prompt ends"
                } else {
                    "before the turn's last token, which is never fed back"
                };
                let side = side_name(*side);
                match first {
                    Some(first) => write!(
                        f,
                        "{owner}: position {first}: piece {piece} ({side}): {rows} rows from \
                         {first} end at {}, but they must end at {end}, {why}: the counts fit \
                         neither a full nor a delta response",
                        end_of(*first, *rows)
                    ),
                    None => write!(
                        f,
                        "{owner}: piece {piece} ({side}): {rows} rows, more than the {end} \
                         positions before {end}, {why}: the counts fit neither a full nor a \
                         delta response"
                    ),
                }
            }
            EpisodeError::StartNotAsked {
                turn,
                piece,
                rows,
                first,
                asked,
            } => write!(
                f,
                "turn {turn}: position {first}: piece {piece}'s {rows} rows start at {first}, \
                 but turn {turn} asked from {asked}: a delta start other than the one asked"
            ),
            EpisodeError::PieceRowShape {
                owner,
                piece,
                position,
                expected,
                found,
            } => write!(
                f,
                "{owner}: position {position}: piece {piece}'s rows have shape {found:?}, but \
                 the episode's have {expected:?}"
            ),
            EpisodeError::PieceDtype {
                owner,
                piece,
                position,
                expected,
                found,
            } => write!(
                f,
                "{owner}: position {position}: piece {piece}'s rows are {found}, which does not \
                 widen with the episode's {expected} (integers widen as NumPy promotes them, \
                 floats likewise; integers and floats, bool and another dtype, or uint64 and a \
                 signed integer do not mix)"
            ),
            EpisodeError::Unsized {
                turn,
                position,
                dtype,
                row_shape,
            } => write!(
                f,
                "turn {turn}: position {position}: no row: its pieces hold none, and the episode \
                 holds none yet: its rows are sized by the rows given, not by a row shape no row \
                 backs ({row_shape:?} of {dtype})"
            ),
            EpisodeError::RowGap {
                turn,
                position,
                asked,
                common,
                continues,
                continued_end,
                end,
            } => {
                write!(f, "turn {turn}: position {position} has no row: ")?;
                match (continues, continued_end) {
                    (Some(c), Some(c_end)) if position < asked => write!(
                        f,
                        "turn {turn} asked from {asked} but its common prefix with turn {c} is \
                         {common} (turn {c}'s rows end at {c_end})"
                    ),
                    _ => write!(
                        f,
                        "none of turn {turn}'s pieces covers it (asked from {asked}, its rows \
                         must cover [{asked}, {end}))"
                    ),
                }
            }
            EpisodeError::NoTurns => f.write_str("the episode has no turn to assemble"),
        }
    }
}

impl std::error::Error for EpisodeError {}

/// The kind of an [`EpisodeError`], one per variant and named as it is:
/// what the Python binding gives as `StitchError.kind`. The names are
/// stable, and none is a name of [`ErrorKind`](crate::ErrorKind) or
/// `GatherErrorKind`, so one `kind` string says which error it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum EpisodeErrorKind {
    /// [`EpisodeError::NoCompletion`].
    NoCompletion,
    /// [`EpisodeError::ExtendsNoTurn`].
    ExtendsNoTurn,
    /// [`EpisodeError::StartBeyondPrefix`].
    StartBeyondPrefix,
    /// [`EpisodeError::NoPieces`].
    NoPieces,
    /// [`EpisodeError::PieceLength`].
    PieceLength,
    /// [`EpisodeError::Counts`].
    Counts,
    /// [`EpisodeError::StartNotAsked`].
    StartNotAsked,
    /// [`EpisodeError::PieceRowShape`].
    PieceRowShape,
    /// [`EpisodeError::PieceDtype`].
    PieceDtype,
    /// [`EpisodeError::Unsized`].
    Unsized,
    /// [`EpisodeError::RowGap`].
    RowGap,
    /// [`EpisodeError::NoTurns`].
    NoTurns,
}

impl EpisodeErrorKind {
    /// Every kind, in the order of the variants of [`EpisodeError`].
    pub const ALL: [EpisodeErrorKind; 12] = [
        EpisodeErrorKind::NoCompletion,
        EpisodeErrorKind::ExtendsNoTurn,
        EpisodeErrorKind::StartBeyondPrefix,
        EpisodeErrorKind::NoPieces,
        EpisodeErrorKind::PieceLength,
        EpisodeErrorKind::Counts,
        EpisodeErrorKind::StartNotAsked,
        EpisodeErrorKind::PieceRowShape,
        EpisodeErrorKind::PieceDtype,
        EpisodeErrorKind::Unsized,
        EpisodeErrorKind::RowGap,
        EpisodeErrorKind::NoTurns,
    ];

    /// The kind's name, which is its variant's: `"RowGap"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            EpisodeErrorKind::NoCompletion => "NoCompletion",
            EpisodeErrorKind::ExtendsNoTurn => "ExtendsNoTurn",
            EpisodeErrorKind::StartBeyondPrefix => "StartBeyondPrefix",
            EpisodeErrorKind::NoPieces => "NoPieces",
            EpisodeErrorKind::PieceLength => "PieceLength",
            EpisodeErrorKind::Counts => "Counts",
            EpisodeErrorKind::StartNotAsked => "StartNotAsked",
            EpisodeErrorKind::PieceRowShape => "PieceRowShape",
            EpisodeErrorKind::PieceDtype => "PieceDtype",
            EpisodeErrorKind::Unsized => "Unsized",
            EpisodeErrorKind::RowGap => "RowGap",
            EpisodeErrorKind::NoTurns => "NoTurns",
        }
    }
}

impl fmt::Display for EpisodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kind_names_are_the_variant_names_and_clash_with_no_other_kind() {
        for kind in EpisodeErrorKind::ALL {
            assert_eq!(kind.as_str(), format!("{kind:?}"));
            assert_eq!(kind.to_string(), kind.as_str());
        }
        // The crate's other kinds share one `StitchError.kind` namespace in
        // Python: spelled out here, since `GatherErrorKind` is behind
        // `verify`.
        let others = [
            "Structure",
            "Integer",
            "Dtype",
            "Overflow",
            "MissingPrefillField",
            "MissingDecodeRows",
            "Base64",
            "Npy",
            "Length",
            "FormMismatch",
            "RowShapeMismatch",
            "DtypeMismatch",
            "Coverage",
            "Layout",
            "Json",
            "Positions",
            "Response",
            "NoRows",
            "Gap",
            "Overlap",
            "Inconsistent",
            "Outside",
            "Io",
            "ShortFile",
            "TooLarge",
            "Misread",
            "RowShapeNeeded",
        ];
        for kind in EpisodeErrorKind::ALL {
            assert!(!others.contains(&kind.as_str()), "{kind}");
        }
        for kind in crate::ErrorKind::ALL {
            assert!(!EpisodeErrorKind::ALL
                .iter()
                .any(|k| k.as_str() == kind.as_str()));
        }
    }
}
