//! SGLang's rows are placed by their token counts (SPEC section 10): the two
//! ways a decode's rows start, and why a pair's positions may not be
//! determined. Numbers only: the JSON and the placing are `crate::sglang`'s.

use std::fmt;

/// How the decode's rows start (SPEC F6).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Convention {
    /// From the prefill's start: the decode's rows for the prompt are its
    /// own (never computed there) and are replaced.
    FullLength,
    /// From the prompt's end (`routed_experts_start_len = prompt`, slime's
    /// patch): nothing to replace, the merge is a concatenation.
    SuffixOnly,
}

impl fmt::Display for Convention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Convention::FullLength => "full-length (from the prefill's start)",
            Convention::SuffixOnly => "suffix-only (from the prompt's end)",
        })
    }
}

/// Why the positions of an SGLang pair are not determined: the reason of an
/// [`ErrorDetail::Positions`](crate::ErrorDetail::Positions), with the
/// numbers it comes from.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PositionProblem {
    /// `prompt_tokens + completion_tokens` is 0 (no position: the rows would
    /// end before position 0) or beyond `u64`.
    #[non_exhaustive]
    Counts {
        /// `prompt_tokens`.
        prompt: u64,
        /// `completion_tokens`.
        completion: u64,
    },
    /// The two sides disagree on the prompt's length.
    #[non_exhaustive]
    PromptMismatch {
        /// The prefill's `prompt_tokens`.
        prefill: u64,
        /// The decode's.
        decode: u64,
    },
    /// Rows whose length is not a whole number of rows: of `int32` ids
    /// (`row_bytes` 4) without a row shape, of `4 * layers * top_k` bytes
    /// with one.
    #[non_exhaustive]
    NotWholeRows {
        /// The decoded length.
        bytes: u64,
        /// The row's (or the id's) bytes.
        row_bytes: u64,
    },
    /// `rows` rows ending at `end` would start before 0 or after the
    /// prompt (`routed_experts_start_len` lies in `[0, prompt]`).
    #[non_exhaustive]
    OutOfRange {
        /// The side's row count.
        rows: u64,
        /// Where its rows end (`prompt + completion - 1`).
        end: u64,
        /// `prompt_tokens`.
        prompt: u64,
    },
    /// The decode's rows start neither at the prefill's start (full-length)
    /// nor at the prompt's end (suffix-only).
    #[non_exhaustive]
    Convention {
        /// Where the decode's rows start.
        start: u64,
        /// Where the prefill's start.
        prefill_start: u64,
        /// `prompt_tokens`.
        prompt: u64,
    },
    /// No row width places both sides under either convention (the row
    /// shape was not given).
    #[non_exhaustive]
    NoReading {
        /// The prefill's ids.
        prefill_ids: u64,
        /// The decode's ids.
        decode_ids: u64,
        /// `prompt_tokens`.
        prompt: u64,
        /// Where the prefill's rows end (the cut).
        cut: u64,
        /// Where the decode's end.
        end: u64,
    },
    /// Two readings place the sides differently and give different merged
    /// rows: the row shape was not given, and the lengths fit both
    /// conventions.
    #[non_exhaustive]
    Ambiguous {
        /// The width (ids per row) under which the decode is full-length.
        full_length_width: u64,
        /// The width under which it is suffix-only.
        suffix_only_width: u64,
    },
    /// An OpenAI response whose `sglext` (or `sgl_ext`) rows do not say
    /// which choice they are (SGLang gives the first choice's, and `usage`
    /// sums the choices' counts).
    #[non_exhaustive]
    ManyChoices {
        /// The number of choices.
        choices: usize,
    },
    /// `.npy` rows placed by token counts on one side and from position 0
    /// on the other (vLLM, SPEC section 4a): the counts (`usage.prompt_tokens`
    /// and the choice's `token_ids`) are on one side only.
    #[non_exhaustive]
    CountsOnOneSide {
        /// Whether the prefill is the side with the counts.
        prefill: bool,
    },
    /// A row shape of no ids, or of more bytes than `u64` counts.
    #[non_exhaustive]
    RowShape {
        /// Layers.
        layers: u64,
        /// Experts per token.
        top_k: u64,
    },
}

impl fmt::Display for PositionProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PositionProblem::Counts { prompt, completion } => write!(
                f,
                "prompt_tokens {prompt} + completion_tokens {completion} place no row (rows end at prompt + completion - 1)"
            ),
            PositionProblem::PromptMismatch { prefill, decode } => write!(
                f,
                "the decode's prompt has {decode} tokens but the prefill's {prefill}"
            ),
            PositionProblem::NotWholeRows { bytes, row_bytes } => write!(
                f,
                "{bytes} bytes are not a whole number of rows of {row_bytes} bytes"
            ),
            PositionProblem::OutOfRange { rows, end, prompt } => write!(
                f,
                "{rows} rows ending at position {end} would start outside [0, {prompt}] (the prompt)"
            ),
            PositionProblem::Convention {
                start,
                prefill_start,
                prompt,
            } => write!(
                f,
                "the decode's rows start at {start}, neither at the prefill's start {prefill_start} (full-length) nor at the prompt's end {prompt} (suffix-only)"
            ),
            PositionProblem::NoReading {
                prefill_ids,
                decode_ids,
                prompt,
                cut,
                end,
            } => write!(
                f,
                "no row width reads {decode_ids} ids ending at {end} as full-length or suffix-only after the prefill's {prefill_ids} ids ending at {cut} (prompt {prompt})"
            ),
            PositionProblem::Ambiguous {
                full_length_width,
                suffix_only_width,
            } => write!(
                f,
                "ambiguous without a row shape: full-length with rows of {full_length_width} ids or suffix-only with rows of {suffix_only_width} ids; give the row shape (Stitcher::row_shape)"
            ),
            PositionProblem::ManyChoices { choices } => write!(
                f,
                "{choices} choices share these rows and usage's counts; only a response of one choice says where its rows are"
            ),
            PositionProblem::CountsOnOneSide { prefill } => {
                let (with, without) = if prefill {
                    ("prefill", "decode")
                } else {
                    ("decode", "prefill")
                };
                write!(
                    f,
                    "the {with}'s .npy rows are placed by its token counts (usage.prompt_tokens and the choice's token_ids), the {without}'s carry none and would be read from position 0"
                )
            }
            PositionProblem::RowShape { layers, top_k } => write!(
                f,
                "row shape ({layers}, {top_k}) has no ids or too many bytes"
            ),
        }
    }
}
