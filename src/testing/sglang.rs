//! SGLang P/D pairs for routers' tests: what an SGLang prefill and decode
//! answer (SPEC section 10), both decode conventions, prefix omission
//! (`routed_experts_start_len > 0`) and `/generate` batch arrays, with a
//! colocated server's answer as the truth. [`verify_stitched`](super::verify_stitched)
//! judges a router's merged answer.
//!
//! ```
//! use pd_stitch::testing::{sglang, verify_stitched};
//! use pd_stitch::{Stitch, Stitcher};
//! use proptest::prelude::*;
//!
//! proptest!(|(case in sglang::cases(sglang::Knobs::default()))| {
//!     // The router knows the model's row shape.
//!     let stitcher = Stitcher::new().row_shape(case.shape.layers, case.shape.top_k);
//!     let mut merged = case.decode.clone();
//!     stitcher.merge(&case.prefill, &mut merged, Stitch::ForPd).expect("stitchable");
//!     verify_stitched(&case, &merged)?;
//! });
//! ```

use std::ops::RangeInclusive;

use proptest::prelude::*;
use serde_json::Value;

use super::{Mismatch, Verify};
use crate::algebra::{Convention, Dtype};
use crate::gather::{check_rows, RowsCheck, RowsReport};
pub use crate::sim::sglang::model::{encode_ids, Api, Draw, Shape};
use crate::sim::sglang::model::{responses_from, SlotPool};

/// What [`cases`] generates.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// Prompt lengths `P`.
    pub prompt: RangeInclusive<u64>,
    /// Generated tokens `C`.
    pub completion: RangeInclusive<u64>,
    /// Outputs of a `/generate` batch (1 and not `batch`: one output).
    pub items: RangeInclusive<usize>,
    /// APIs to draw from.
    pub apis: Vec<Api>,
    /// Decode conventions to draw from.
    pub conventions: Vec<Convention>,
    /// Draw `routed_experts_start_len` in `[0, P]` (else always 0).
    pub prefix_omission: bool,
    /// Layers.
    pub layers: RangeInclusive<u64>,
    /// Experts per token.
    pub top_k: RangeInclusive<u64>,
}

impl Default for Knobs {
    /// Prompts of 1-48 tokens, 1-32 generated, batches of up to 4, every
    /// API and convention, prefix omission, rows of 1-8 x 1-64 ids.
    fn default() -> Knobs {
        Knobs {
            prompt: 1..=48,
            completion: 1..=32,
            items: 1..=4,
            apis: Api::ALL.to_vec(),
            conventions: vec![Convention::FullLength, Convention::SuffixOnly],
            prefix_omission: true,
            layers: 1..=8,
            top_k: 1..=64,
        }
    }
}

/// One generated SGLang P/D request (or batch).
#[derive(Clone, Debug, PartialEq)]
pub struct Case {
    /// The API the responses come from.
    pub api: Api,
    /// The rows' shape: what the router passes to `Stitcher::row_shape`.
    pub shape: Shape,
    /// One per output (a batch's in order).
    pub draws: Vec<Draw>,
    /// Whether the responses are `/generate` batch arrays.
    pub batch: bool,
    /// The prefill instance's response.
    pub prefill: Value,
    /// The decode instance's, before any merge: a full-length decode's
    /// prompt rows are what SGLang's answers, never computed there (SPEC
    /// F10): zeros of a fresh server when the first draw's seed is odd,
    /// else what earlier requests left in a worn pool of [`WORN_SLOTS`]
    /// slots (stale rows of other positions, a few zeros).
    pub decode: Value,
    /// A colocated server's.
    pub colocated: Value,
}

/// The slots of a case's worn decode pool ([`SlotPool::worn`]).
pub const WORN_SLOTS: usize = 256;

impl Case {
    /// The case of `draws` through `api`.
    pub fn new(api: Api, shape: Shape, draws: Vec<Draw>, batch: bool) -> Case {
        let batch = batch && api == Api::Generate;
        let draws = if batch {
            draws
        } else {
            draws.into_iter().take(1).collect()
        };
        let seed = draws.first().map_or(0, |d| d.seed);
        let mut pool = if seed % 2 == 1 {
            let slots: u64 = draws.iter().map(Draw::end).sum();
            SlotPool::new(shape, usize::try_from(slots).unwrap_or(0).max(1))
        } else {
            SlotPool::worn(shape, WORN_SLOTS, seed)
        };
        let r = responses_from(&mut pool, api, &draws, batch);
        Case {
            api,
            shape,
            draws,
            batch,
            prefill: r.prefill,
            decode: r.decode,
            colocated: r.colocated,
        }
    }

    /// The slot's name, as a [`Mismatch`] gives it.
    fn slot(&self) -> &'static str {
        match self.api {
            Api::Generate => "meta_info.routed_experts",
            Api::ResponseExt => "sglext.routed_experts",
            Api::ChoiceExt => "choices[0].sgl_ext.routed_experts",
        }
    }
}

/// Cases drawn with `knobs`.
///
/// # Panics
///
/// When `knobs` has an empty range or list (a mistake in the test).
pub fn cases(knobs: Knobs) -> impl Strategy<Value = Case> {
    assert!(
        !knobs.apis.is_empty() && !knobs.conventions.is_empty(),
        "knobs need an API and a convention"
    );
    let draw = (
        knobs.prompt.clone(),
        knobs.completion.clone(),
        any::<u64>(),
        proptest::sample::select(knobs.conventions.clone()),
        any::<u64>(),
        Just(knobs.prefix_omission),
    )
        .prop_map(|(prompt, completion, start, convention, seed, omit)| Draw {
            prompt,
            completion,
            // Half of them from 0, the rest anywhere in [0, P].
            start: if omit && start % 2 == 1 {
                (start / 2) % (prompt + 1)
            } else {
                0
            },
            convention,
            seed,
        });
    (
        proptest::sample::select(knobs.apis.clone()),
        knobs.layers.clone(),
        knobs.top_k.clone(),
        proptest::collection::vec(draw, knobs.items.clone()),
        any::<bool>(),
    )
        .prop_map(|(api, layers, top_k, draws, batch)| {
            let shape = Shape {
                layers,
                top_k,
                experts: 256,
            };
            let batch = batch || draws.len() > 1;
            Case::new(api, shape, draws, batch)
        })
}

impl Verify for Case {
    /// Every output's rows, read at the positions its counts give, equal
    /// the colocated server's, position by position.
    fn verify(&self, merged: &Value) -> Result<(), Mismatch> {
        let fail = |item: usize, position: Option<u64>, message: String| Mismatch {
            choice: item,
            position,
            segment: position.map(|_| self.slot().to_owned()),
            message,
        };
        match (self.batch, merged) {
            (true, Value::Array(items)) if items.len() == self.draws.len() => {}
            (true, _) => {
                return Err(fail(
                    0,
                    None,
                    format!("expected a batch array of {} outputs", self.draws.len()),
                ))
            }
            (false, Value::Object(_)) => {}
            (false, _) => return Err(fail(0, None, "expected a response object".into())),
        }
        let Shape { layers, top_k, .. } = self.shape;
        let width = usize::try_from(self.shape.width())
            .unwrap_or(usize::MAX)
            .max(1);
        for (i, draw) in self.draws.iter().enumerate() {
            let rows = crate::format::sglang::read_rows(merged, i, layers, top_k)
                .map_err(|e| fail(i, None, format!("rows cannot be read back: {e}")))?
                .ok_or_else(|| fail(i, None, format!("no rows in {}", self.slot())))?;
            let (start, end) = (draw.start, draw.end());
            if (rows.positions.start(), rows.positions.end()) != (start, end) {
                return Err(fail(
                    i,
                    None,
                    format!(
                        "rows cover positions {}, expected [{start}, {end})",
                        rows.positions
                    ),
                ));
            }
            let bytes: Vec<u8> = rows.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
            let mut found = RowsReport::new();
            let check = RowsCheck {
                experts: Some(self.shape.experts),
                limit: 1,
            };
            let shape = [layers, top_k];
            let start_at = rows.positions.start();
            // Whole rows of int32 (read_rows made them): the check applies.
            if check_rows(i, start_at, Dtype::Int32, &shape, &bytes, check, &mut found).is_ok() {
                if let Some(finding) = found.findings.first() {
                    return Err(fail(i, Some(finding.position), super::wrong_row(finding)));
                }
            }
            let truth = draw.colocated(self.shape);
            let wrong = rows
                .ids
                .chunks(width)
                .zip(truth.chunks(width))
                .position(|(a, b)| a != b);
            if let Some(k) = wrong {
                let x = start + k as u64;
                let expected = if x < draw.prompt {
                    "the prefill's row (a prompt position)"
                } else {
                    "the decode's row (a position after the prompt)"
                };
                return Err(fail(
                    i,
                    Some(x),
                    format!("row differs from the truth; expected {expected}"),
                ));
            }
        }
        Ok(())
    }
}
