//! A turn's rows read out of its response, for the episode
//! ([`crate::episode`]): the rows of one choice, wherever the table of
//! places puts them, as a [`RowPiece`] with the first position when the
//! wire says it.
//!
//! The episode places rows from the turn's token counts; what the reader
//! adds is only what the response itself says of their positions. A
//! compact value carries its `start`, a payload segment its `pos`, SGLang's
//! ids are placed by the response's own counts, and a `.npy` is placed by
//! its counts when its choice carries `token_ids` (vLLM 0.32); a `.npy`
//! without them says nothing of where it starts (upstream's reading is
//! "from 0", which the episode does not assume: it checks the rows against
//! the start the turn asked for).
//!
//! [`read_turn`] reads all of a turn's rows, from one response or a P/D
//! pair's two, and names the turn (and the side) in its error, as every
//! surface of the episode says it: the Python binding and the command
//! print a [`TurnReadError`]'s text as it is.

use std::fmt;

use serde_json::Value;

use crate::codec::Form;
use crate::episode::{Phase, RowPiece};
use crate::error::Location;
use crate::places::{self, Holder, Holds};

use super::read::inline_rows;
use super::{choice_rows, GatherError, Source, Store};

/// The response(s) a turn's rows are read from: choice 0 (an SGLang
/// batch's output 0) of each.
#[derive(Clone, Copy, Debug)]
pub enum TurnResponses<'a> {
    /// One response: stitched by a router, or a colocated server's.
    Whole(&'a Value),
    /// The two responses of a P/D pair, unstitched. The prefill's rows are
    /// given first, so they win where the two overlap (the prompt's last
    /// position, which the decode computes again in its first forward):
    /// the pair assembles as its stitched rows (the episode's law E6).
    Pair {
        /// The prefill instance's response.
        prefill: &'a Value,
        /// The decode instance's response.
        decode: &'a Value,
    },
}

/// The pieces of turn `turn`'s rows, read from `responses` through
/// `store`, in the order the episode takes them (a pair's prefill first).
/// SGLang's rows need `row_shape`, `(layers, top_k)`.
///
/// ```
/// use pd_stitch::episode::{Episode, Prefer, Turn};
/// use pd_stitch::gather::{read_turn, Store, TurnResponses};
/// use serde_json::json;
///
/// // A prompt of 2 tokens and 2 generated: rows [0, 3) of 1 x 1 uint8.
/// let response = json!({"choices": [{"routed_experts":
///     {"data": "BwgJ", "shape": [3, 1, 1], "start": 0, "dtype": "uint8"}}]});
/// let pieces = read_turn(0, TurnResponses::Whole(&response), &Store::memory(), None)?;
/// let turn = pieces.into_iter().fold(Turn::new(vec![1, 2], vec![3, 4]), Turn::with_piece);
/// let mut episode = Episode::new(Prefer::Earliest);
/// episode.push(turn).unwrap();
/// assert_eq!(episode.finish().unwrap().rows(), &[7, 8, 9, 0][..]);
///
/// let broken = json!({"choices": [{"routed_experts":
///     {"data": "B!gJ", "shape": [3, 1, 1], "start": 0, "dtype": "uint8"}}]});
/// let err = read_turn(2, TurnResponses::Whole(&broken), &Store::memory(), None).unwrap_err();
/// assert!(err.to_string().starts_with("turn 2: response choices[0].routed_experts.data: "));
/// # Ok::<(), pd_stitch::gather::TurnReadError>(())
/// ```
///
/// # Errors
///
/// [`TurnReadError`]: what [`read_piece`] refuses, with the turn and, for
/// a pair, the side.
pub fn read_turn(
    turn: usize,
    responses: TurnResponses<'_>,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<Vec<RowPiece>, TurnReadError> {
    let sides: &[(Option<Phase>, &Value)] = match &responses {
        TurnResponses::Whole(response) => &[(None, response)],
        TurnResponses::Pair { prefill, decode } => &[
            (Some(Phase::Prefill), prefill),
            (Some(Phase::Decode), decode),
        ],
    };
    sides
        .iter()
        .map(|&(side, response)| {
            read_piece(response, 0, side, store, row_shape)
                .map_err(|error| TurnReadError::new(turn, side, error))
        })
        .collect()
}

/// Why a turn's rows could not be read: the turn, the side of a P/D pair
/// (`None`: a whole response), and the reader's error. Its text is the
/// reader's, after `turn T: ` (`turn T (prefill): ` for a side):
/// `turn 2: response choices[0].routed_experts.data: invalid base64 ...`.
#[derive(Debug)]
pub struct TurnReadError {
    turn: usize,
    side: Option<Phase>,
    error: GatherError,
}

impl TurnReadError {
    /// The reader's `error`, met reading turn `turn` (of `side`, for a
    /// pair): for the readers of a turn that do not go through
    /// [`read_turn`], such as a binding parsing a response's text first.
    pub fn new(turn: usize, side: Option<Phase>, error: GatherError) -> TurnReadError {
        TurnReadError { turn, side, error }
    }

    /// The turn's index (0 for the first).
    pub fn turn(&self) -> usize {
        self.turn
    }

    /// The side of the pair whose response failed, `None` for a whole
    /// response.
    pub fn side(&self) -> Option<Phase> {
        self.side
    }

    /// The reader's error.
    pub fn error(&self) -> &GatherError {
        &self.error
    }

    /// The reader's error, taken out.
    pub fn into_error(self) -> GatherError {
        self.error
    }

    /// The kind's name, as the Python binding's `StitchError.kind` gives
    /// it: the response's own [`ErrorKind`](crate::ErrorKind) for a
    /// malformed value (`"Base64"`), else the [`GatherErrorKind`](super::GatherErrorKind)
    /// (`"Outside"`).
    pub fn kind_name(&self) -> &'static str {
        match &self.error {
            GatherError::Response(inner) => inner.kind().as_str(),
            other => other.kind().as_str(),
        }
    }

    /// The JSON value at fault, where there is one
    /// ([`GatherError::location`]).
    pub fn location(&self) -> Option<&Location> {
        self.error.location()
    }
}

impl fmt::Display for TurnReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.side {
            None => write!(f, "turn {}: {}", self.turn, self.error),
            Some(side) => write!(f, "turn {} ({}): {}", self.turn, side.name(), self.error),
        }
    }
}

impl std::error::Error for TurnReadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// The rows of choice `choice` of `response` as a piece of a turn: a whole
/// response's (`side` `None`: stitched, or colocated) or one side of a P/D
/// pair, read by [`choice_rows`] wherever the table of places puts them.
/// Rows by handle are read through `store` (confined as it is); SGLang's
/// ids need their `(layers, top_k)`, which is not on the wire.
///
/// For an SGLang batch (a response that is an array of outputs) `choice`
/// is the output's index, as [`gather_sglang`](super::gather_sglang) takes it.
///
/// ```
/// use pd_stitch::episode::RowPiece;
/// use pd_stitch::gather::{read_piece, Store};
/// use serde_json::json;
///
/// // Compact rows of 2 positions from position 3, 1 x 2 uint8 each.
/// let response = json!({"choices": [{"routed_experts":
///     {"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"}}]});
/// let piece = read_piece(&response, 0, None, &Store::memory(), None)?;
/// assert_eq!((piece.first(), piece.bytes()), (Some(3), &[1, 2, 3, 4][..]));
/// assert_eq!(piece.row_shape(), [1, 2]);
/// # Ok::<(), pd_stitch::gather::GatherError>(())
/// ```
///
/// # Errors
///
/// [`GatherError`]: what [`choice_rows`] refuses, among them
/// [`GatherError::RowShapeNeeded`] for SGLang rows read without their row
/// shape.
pub fn read_piece(
    response: &Value,
    choice: usize,
    side: Option<Phase>,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<RowPiece, GatherError> {
    let rows = choice_rows(response, choice, store, row_shape)?;
    // A `.npy` says where it starts only when its choice's counts placed
    // it (rows the response holds are placed from 0, by no count).
    let said = match rows.source() {
        Source::Inline(Form::Npy) => {
            inline_rows(response, choice).is_some_and(|(place, _)| place.per_choice())
                && counted(response, choice)
        }
        Source::Inline(Form::Compact) | Source::Files | Source::Sglang => true,
    };
    let first = said.then_some(rows.positions().start());
    let dtype = rows.dtype();
    let shape = rows.row_shape().to_vec();
    let bytes = rows.into_data();
    let piece = match side {
        None => RowPiece::whole(dtype, shape, bytes),
        Some(Phase::Prefill) => RowPiece::prefill(dtype, shape, bytes),
        Some(Phase::Decode) => RowPiece::decode(dtype, shape, bytes),
    };
    Ok(match first {
        Some(first) => piece.at(first),
        None => piece,
    })
}

/// Whether choice `choice` carries the counts that place its `.npy` (a
/// count the table holds on the choice, `token_ids`, present and not null).
fn counted(response: &Value, choice: usize) -> bool {
    let Some(object) = response.get("choices").and_then(|c| c.get(choice)) else {
        return false;
    };
    places::all()
        .filter(|place| place.holder == Holder::Choice && place.holds == Holds::Count)
        .any(|place| object.get(place.key).is_some_and(|v| !v.is_null()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algebra::Dtype;
    use serde_json::json;

    /// The base64 of a `.npy` of `rows` rows of 1 x 2 uint8, ids from 1.
    fn npy(rows: u64) -> String {
        let data: Vec<u8> = (1..=2 * rows as u8).collect();
        let file = crate::format::inline::npy_file(Dtype::Uint8, &[rows, 1, 2], &data).unwrap();
        crate::format::inline::encode_base64(&file)
    }

    #[test]
    fn a_counted_npy_says_where_it_starts_and_a_bare_one_does_not() {
        // vLLM 0.32: a prompt of 5, 3 generated, asked from 4: [4, 7).
        let counted = json!({"usage": {"prompt_tokens": 5},
            "choices": [{"token_ids": [7, 8, 9], "routed_experts": npy(3)}]});
        let piece = read_piece(&counted, 0, None, &Store::memory(), None).unwrap();
        assert_eq!(piece.first(), Some(4));
        assert_eq!(piece.bytes(), [1, 2, 3, 4, 5, 6]);
        let bare = json!({"choices": [{"routed_experts": npy(3)}]});
        let piece = read_piece(&bare, 0, None, &Store::memory(), None).unwrap();
        assert_eq!(piece.first(), None);
        assert_eq!(
            (piece.dtype(), piece.row_shape()),
            (Dtype::Uint8, &[1, 2][..])
        );
    }

    #[test]
    fn the_side_is_the_callers_and_rows_by_handle_say_their_position() {
        let mut store = Store::memory();
        store.write("p.bin", vec![9, 9, 1, 2, 3, 4]).unwrap();
        let response = json!({"choices": [{"payload": [{"field": "routed_experts", "file": "p.bin",
            "offset": 2, "pos": 6, "rows": 2, "dtype": "uint8", "shape": [2]}]}]});
        let piece = read_piece(&response, 0, Some(Phase::Prefill), &store, None).unwrap();
        assert_eq!(piece.side(), Some(Phase::Prefill));
        assert_eq!((piece.first(), piece.bytes()), (Some(6), &[1, 2, 3, 4][..]));
        let decode = read_piece(&response, 0, Some(Phase::Decode), &store, None).unwrap();
        assert_eq!(decode.side(), Some(Phase::Decode));
    }

    #[test]
    fn sglang_rows_are_placed_by_their_counts_given_the_row_shape() {
        // A prompt of 2, 2 generated: rows [0, 3) of 1 x 1 int32.
        let ids: Vec<u8> = [5i32, 6, 7].iter().flat_map(|i| i.to_le_bytes()).collect();
        let rows = crate::format::inline::encode_base64(&ids);
        let response = json!({"text": "", "meta_info": {"prompt_tokens": 2,
            "completion_tokens": 2, "routed_experts": rows}});
        let piece = read_piece(&response, 0, None, &Store::memory(), Some((1, 1))).unwrap();
        assert_eq!((piece.first(), piece.dtype()), (Some(0), Dtype::Int32));
        assert_eq!(piece.bytes(), &ids[..]);
        let err = read_piece(&response, 0, None, &Store::memory(), None).unwrap_err();
        assert!(
            matches!(err, GatherError::RowShapeNeeded { item: 0 }),
            "{err}"
        );
        assert_eq!(
            err.to_string(),
            "response output 0: SGLang's rows need their row shape (layers, top_k), which is not on the wire"
        );
    }

    #[test]
    fn a_turn_is_read_prefill_first_and_its_errors_name_the_turn_and_side() {
        let rows = |data: &str, start: u64| {
            json!({"choices": [{"routed_experts":
                {"data": data, "shape": [2, 1, 1], "start": start, "dtype": "uint8"}}]})
        };
        let (prefill, decode) = (rows("AQI=", 0), rows("CQM=", 1));
        let pair = TurnResponses::Pair {
            prefill: &prefill,
            decode: &decode,
        };
        let pieces = read_turn(3, pair, &Store::memory(), None).unwrap();
        let read: Vec<_> = pieces
            .iter()
            .map(|p| (p.side(), p.first(), p.bytes().to_vec()))
            .collect();
        assert_eq!(
            read,
            [
                (Some(Phase::Prefill), Some(0), vec![1, 2]),
                (Some(Phase::Decode), Some(1), vec![9, 3]),
            ]
        );
        let whole = read_turn(0, TurnResponses::Whole(&prefill), &Store::memory(), None).unwrap();
        assert_eq!(whole.len(), 1);
        assert_eq!(whole[0].side(), None);

        let bad = rows("AQ!=", 0);
        let err = read_turn(2, TurnResponses::Whole(&bad), &Store::memory(), None).unwrap_err();
        assert_eq!(
            (err.turn(), err.side(), err.kind_name()),
            (2, None, "Base64")
        );
        assert_eq!(
            err.location().map(ToString::to_string).as_deref(),
            Some("response choices[0].routed_experts.data")
        );
        assert_eq!(err.to_string(), format!("turn 2: {}", err.error()));
        assert!(
            err.to_string()
                .starts_with("turn 2: response choices[0].routed_experts.data: "),
            "{err}"
        );
        let empty = json!({"choices": [{}]});
        let pair = TurnResponses::Pair {
            prefill: &prefill,
            decode: &empty,
        };
        let err = read_turn(1, pair, &Store::memory(), None).unwrap_err();
        assert_eq!(err.side(), Some(Phase::Decode));
        assert_eq!((err.kind_name(), err.location()), ("NoRows", None));
        assert_eq!(
            err.to_string(),
            "turn 1 (decode): response choices[0]: no rows of field \"routed_experts\" (no \
             payload segment, and no inline rows)"
        );
        assert!(std::error::Error::source(&err).is_some());
        assert!(matches!(err.into_error(), GatherError::NoRows { .. }));
    }

    #[test]
    fn a_response_without_rows_is_no_rows() {
        let err =
            read_piece(&json!({"choices": [{}]}), 0, None, &Store::memory(), None).unwrap_err();
        assert!(
            matches!(err, GatherError::NoRows { choice: 0, .. }),
            "{err}"
        );
    }
}
