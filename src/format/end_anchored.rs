//! Where a `.npy`'s rows sit: vLLM 0.32's end anchoring (SPEC section 4a).
//!
//! A `.npy` carries no start. vLLM answers rows `[S, P + N - 1)`, where `S`
//! is the request's `routed_experts_prompt_start` (not echoed), `P` the
//! prompt's tokens and `N` the choice's generated tokens: the last token is
//! never fed back, so it has no row. The start is not on the wire, but the
//! end is: `P` is `usage.prompt_tokens`, `N` the length of the choice's
//! `token_ids`. So a `.npy` in a response that carries both counts is read
//! from its end: its `rows` rows cover `[P + N - 1 - rows, P + N - 1)`.
//!
//! Without the counts, a `.npy` is read from position 0, as upstream reads
//! it. The two readings agree on every answer that starts at 0 (a colocated
//! answer, a prefill's, any decode not sent a start); they differ only on a
//! later start, which only an engine that takes
//! `routed_experts_prompt_start` writes, and that engine writes the counts.
//! A pair with counts on one side only is refused: the sides would be read
//! by different rules, and nothing says which one the other side follows.

use crate::algebra::PositionProblem;
use crate::error::{Error, ErrorDetail, Location, Side};
use crate::format::places::{place, Holder, Holds, Place};
use crate::response::json::{self, choice_at};
use crate::response::view::{Kind, View};

/// The key of a choice's generated token ids, whose number places a `.npy`.
pub(crate) const TOKEN_IDS: &str = "token_ids";

/// Where the counts that place a `.npy` sit: the choice's `token_ids` and
/// the response's `usage.prompt_tokens`.
pub(crate) const PLACES: [Place; 2] = [
    place(Holder::Choice, TOKEN_IDS, Holds::Count),
    place(Holder::Member("usage"), "prompt_tokens", Holds::Count),
];

/// The counts that place one choice's `.npy` rows: the end they stop at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Counts {
    /// `usage.prompt_tokens`.
    pub(crate) prompt: u64,
    /// The choice's generated tokens, `len(token_ids)`.
    pub(crate) generated: u64,
}

impl Counts {
    /// Reads the counts of choice `i` of the response `root` on `side`:
    /// `None` when the choice has no `token_ids` (or it is null). With
    /// `token_ids`, it must be an array and `usage.prompt_tokens` an
    /// integer.
    pub(crate) fn read<'a, V: View<'a>>(
        root: V,
        choice: V,
        side: Side,
        i: usize,
    ) -> Result<Option<Counts>, Error> {
        let Some(tokens) = choice.get(TOKEN_IDS).filter(|t| !t.is_null()) else {
            return Ok(None);
        };
        if tokens.kind() != Kind::Array {
            return Err(ErrorDetail::Structure {
                at: choice_at(side, i).key(TOKEN_IDS),
                expected: "an array of token ids",
                got: tokens.describe(),
            }
            .into());
        }
        let prompt = json::integer(
            root.get("usage")
                .and_then(|usage| usage.get("prompt_tokens")),
            || prompt_at(side),
        )?;
        Ok(Some(Counts {
            prompt,
            generated: tokens.len().map_or(0, |n| n as u64),
        }))
    }

    /// Where rows placed by these counts end: `P + N - 1`.
    pub(crate) fn end(self) -> Result<u64, PositionProblem> {
        self.prompt
            .checked_add(self.generated)
            .and_then(|n| n.checked_sub(1))
            .ok_or(PositionProblem::Counts {
                prompt: self.prompt,
                completion: self.generated,
            })
    }

    /// Where `rows` rows ending at [`Counts::end`] start: in `[0, P]`, as
    /// `routed_experts_prompt_start` is.
    pub(crate) fn start(self, rows: u64) -> Result<u64, PositionProblem> {
        let end = self.end()?;
        end.checked_sub(rows)
            .filter(|&start| start <= self.prompt)
            .ok_or(PositionProblem::OutOfRange {
                rows,
                end,
                prompt: self.prompt,
            })
    }
}

/// The prompt's tokens when `prefill` carries the counts that place a
/// `.npy` (`choices[0].token_ids` an array, `usage.prompt_tokens` an
/// integer), whatever the form of its rows: what a stream of the decode's
/// needs to place its own (the stream's events carry no `usage`). A
/// compact prefill's counts are read too, so that a decode's `.npy` beside
/// it fails as the whole response does, on the forms (`FormMismatch`),
/// not on a `usage` no streamed event carries; compact rows themselves are
/// placed by their `start` and ignore the counts.
pub(crate) fn counted_prefill<'a, V: View<'a>>(prefill: V) -> Option<u64> {
    let choice = crate::response::paths::prefill_choice(prefill)?;
    if choice.get(TOKEN_IDS)?.kind() != Kind::Array {
        return None;
    }
    prefill.get("usage")?.get("prompt_tokens")?.as_u64()
}

/// `side usage.prompt_tokens`.
pub(crate) fn prompt_at(side: Side) -> Location {
    Location::root(side).key("usage").key("prompt_tokens")
}

/// How the two sides' `.npy` rows are placed, checked as a pair: both by
/// counts (with the same prompt) or neither.
pub(crate) fn check_pair(
    prefill: Option<Counts>,
    decode: Option<Counts>,
    decode_rows_at: impl Fn() -> Location,
) -> Result<(), Error> {
    match (prefill, decode) {
        (Some(p), Some(d)) if p.prompt != d.prompt => Err(ErrorDetail::Positions {
            at: prompt_at(Side::Decode),
            problem: PositionProblem::PromptMismatch {
                prefill: p.prompt,
                decode: d.prompt,
            },
        }
        .into()),
        (Some(_), None) | (None, Some(_)) => Err(ErrorDetail::Positions {
            at: decode_rows_at(),
            problem: PositionProblem::CountsOnOneSide {
                prefill: prefill.is_some(),
            },
        }
        .into()),
        _ => Ok(()),
    }
}
