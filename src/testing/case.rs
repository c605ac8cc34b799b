//! Generated P/D cases: what a deployment's prefill and decode answered in
//! one of the simulator's wire forms, with the colocated truth, drawn by
//! [`cases`] as [`Knobs`] say.

use std::ops::RangeInclusive;

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::algebra::{Convention, Dtype};
use crate::format::by_handle::PAYLOAD;
use crate::gather::Store;
use crate::sim::{answer, Engine, Model, Request, SlotPool, Wire, VOCAB};

/// What [`cases`] generates.
#[derive(Clone, Debug)]
pub struct Knobs {
    /// Wire forms to draw from (every engine's by default).
    pub wires: Vec<Wire>,
    /// Prompt lengths `P`.
    pub prompt: RangeInclusive<u64>,
    /// Completion lengths `C` (tokens generated; the rows end at `P + C - 1`).
    pub completion: RangeInclusive<u64>,
    /// Decode choices (vLLM, Dynamo's token API), or outputs of an SGLang
    /// `/generate` batch.
    pub choices: RangeInclusive<usize>,
    /// Row dtypes to draw from, where the wire chooses one (`Uint8`, and
    /// `Uint16` for expert ids > 255; SGLang's ids are `int32`).
    pub dtypes: Vec<Dtype>,
    /// Layers of a row.
    pub layers: RangeInclusive<u64>,
    /// Experts per token.
    pub top_k: RangeInclusive<u64>,
    /// Most preemption splits of a decode choice's rows (by handle).
    pub preemptions: usize,
    /// Rows each preemption re-emits (the later segment wins, the earlier
    /// copy is stale): drawn from this range.
    pub reemit: RangeInclusive<u64>,
    /// Ask rows from a start after 0 in some cases (vLLM's
    /// `routed_experts_prompt_start` up to `P - 1`, SGLang's
    /// `routed_experts_start_len` up to `P`, half of SGLang's from 0).
    pub omit_prefix: bool,
    /// SGLang decode conventions to draw from.
    pub conventions: Vec<Convention>,
    /// Add hostile extras that a correct path must carry through untouched
    /// (a choice's unknown keys; by handle, malformed non-stitched payload
    /// items), where the decode has choices of its own (vLLM, Dynamo).
    pub hostile: bool,
}

impl Default for Knobs {
    /// Every wire form, prompts of 1-64 tokens, completions of 1-48, 1-4
    /// choices (or batch outputs), uint8 and uint16, rows of 1-8 x 1-64
    /// ids, up to 3 preemptions, no re-emission, no prefix omission, both
    /// SGLang conventions, hostile extras on.
    fn default() -> Knobs {
        Knobs {
            wires: Wire::ALL.to_vec(),
            prompt: 1..=64,
            completion: 1..=48,
            choices: 1..=4,
            dtypes: vec![Dtype::Uint8, Dtype::Uint16],
            layers: 1..=8,
            top_k: 1..=64,
            preemptions: 3,
            reemit: 0..=0,
            omit_prefix: false,
            conventions: vec![Convention::FullLength, Convention::SuffixOnly],
            hostile: true,
        }
    }
}

impl Knobs {
    /// The defaults, with `engine`'s wire forms only.
    pub fn engine(engine: Engine) -> Knobs {
        Knobs {
            wires: engine.wires().to_vec(),
            ..Knobs::default()
        }
    }
}

/// One generated P/D request: what the prefill and the decode instance
/// answered in one wire form, the files they wrote, and the truth.
#[derive(Clone, Debug)]
pub struct Case {
    /// The wire form the rows travel in.
    pub wire: Wire,
    /// The request, or an SGLang batch's, one per output.
    pub requests: Vec<Request>,
    /// Whether the SGLang responses are `/generate` batch arrays.
    pub batch: bool,
    /// The prefill instance's response.
    pub prefill: Value,
    /// The decode instance's response, before any merge. A full-length
    /// SGLang decode's prompt rows are what SGLang's answers, never
    /// computed there (SPEC F10): zeros of a fresh server when the model's
    /// seed is odd, else what earlier requests left in a worn pool of
    /// [`WORN_SLOTS`] slots (stale rows of other positions, a few zeros).
    pub decode: Value,
    /// What a colocated server answered.
    pub colocated: Value,
    /// The files the segments point at (empty for inline forms).
    pub store: Store,
}

/// The slots of an SGLang case's worn decode pool ([`SlotPool::worn`]).
pub const WORN_SLOTS: usize = 256;

impl Case {
    /// The case of `requests` (the first, unless the wire is SGLang's
    /// `/generate` and `batch`) answered in `wire`.
    pub fn new(wire: Wire, requests: Vec<Request>, batch: bool) -> Case {
        let batch = batch && wire == Wire::Sglang(crate::sglang::Api::Generate);
        let requests: Vec<Request> = if batch {
            requests
        } else {
            requests.into_iter().take(1).collect()
        };
        let mut store = Store::memory();
        let mut pool = match requests.first() {
            Some(first) if first.model.seed % 2 == 0 => {
                SlotPool::worn(first.model, WORN_SLOTS, first.model.seed)
            }
            _ => {
                let slots: u64 = requests.iter().map(Request::rows).sum();
                SlotPool::new(usize::try_from(slots).unwrap_or(0).max(1))
            }
        };
        // Writing to memory cannot fail, nor a `.npy` header of these rows.
        let responses = answer(wire, &requests, batch, Some(&mut pool), &mut store).ok();
        let (prefill, decode, colocated) = match responses {
            Some(r) => (r.prefill, r.decode, r.colocated),
            None => (Value::Null, Value::Null, Value::Null),
        };
        Case {
            wire,
            requests,
            batch,
            prefill,
            decode,
            colocated,
            store,
        }
    }

    /// The request (an SGLang batch's first).
    ///
    /// # Panics
    ///
    /// Never for a case [`Case::new`] made: it keeps at least one request
    /// unless given none.
    pub fn request(&self) -> &Request {
        &self.requests[0]
    }

    /// The row shape `(layers, top_k)`: what a router gives
    /// `Stitcher::row_shape` for SGLang's rows.
    pub fn row_shape(&self) -> (u64, u64) {
        self.requests
            .first()
            .map_or((0, 0), |r| (r.model.layers, r.model.top_k))
    }

    /// How many choices (SGLang: outputs) the merged response must have.
    pub fn outputs(&self) -> usize {
        match self.wire {
            Wire::Sglang(_) => self.requests.len(),
            Wire::DynamoOpenAi => 1,
            _ => self.requests.first().map_or(0, Request::choices),
        }
    }

    /// The true rows of `output` (a choice, or an SGLang output), positions
    /// `[0, P + C - 1)` back to back, in the wire's dtype.
    pub fn truth(&self, output: usize) -> Vec<u8> {
        let (request, choice) = match self.wire {
            Wire::Sglang(_) => (self.requests.get(output), 0),
            _ => (self.requests.first(), output),
        };
        request.map_or_else(Vec::new, |r| r.truth_as(choice, self.wire.dtype(r.dtype)))
    }

    /// Where the rows of `output` start: the start it asked for, as its
    /// wire answers it.
    pub fn start(&self, output: usize) -> u64 {
        match self.wire {
            Wire::Sglang(_) => self.requests.get(output).map_or(0, |r| r.start),
            Wire::DynamoOpenAi => 0,
            _ => self.requests.first().map_or(0, Request::start_below_prompt),
        }
    }

    /// The case with hostile extras on its decode's choices.
    fn hostile(mut self) -> Case {
        for (i, choice) in self.decode["choices"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            choice["x-router-trace"] = json!({"hop": i});
            if let Some(payload) = choice.get_mut(PAYLOAD).and_then(Value::as_array_mut) {
                let at = i % (payload.len() + 1);
                payload.insert(
                    at,
                    json!({"field": "logprobs_by_handle", "pos": -1, "rows": "?"}),
                );
                payload.push(json!(null));
            }
        }
        self
    }
}

/// Cases drawn with `knobs`.
///
/// # Panics
///
/// When `knobs` has an empty list (a mistake in the test).
pub fn cases(knobs: Knobs) -> impl Strategy<Value = Case> {
    assert!(
        !knobs.wires.is_empty() && !knobs.dtypes.is_empty() && !knobs.conventions.is_empty(),
        "knobs need a wire, a dtype and a convention"
    );
    (
        proptest::sample::select(knobs.wires.clone()),
        knobs.layers.clone(),
        knobs.top_k.clone(),
        proptest::sample::select(knobs.dtypes.clone()),
        any::<u64>(),
        Just(knobs),
    )
        .prop_flat_map(|(wire, layers, top_k, dtype, seed, knobs)| {
            let sglang = matches!(wire, Wire::Sglang(_));
            let model = Model {
                seed,
                layers,
                top_k,
                experts: if sglang || dtype == Dtype::Uint8 {
                    256
                } else {
                    512
                },
            };
            if sglang {
                outputs(wire, model, knobs).boxed()
            } else {
                choices(wire, model, dtype, knobs).boxed()
            }
        })
}

/// A vLLM or Dynamo case: one prompt, its choices, the prefill's splits,
/// the decode's preemptions.
fn choices(wire: Wire, model: Model, dtype: Dtype, knobs: Knobs) -> impl Strategy<Value = Case> {
    (
        knobs.prompt.clone(),
        knobs.completion.clone(),
        knobs.choices.clone(),
    )
        .prop_flat_map(move |(prompt, completion, choices)| {
            let omit = if knobs.omit_prefix { 0..prompt } else { 0..1 };
            let interior = |len: u64, most: usize| {
                let points: Vec<u64> = (1..len).collect();
                let most = points.len().min(most);
                proptest::sample::subsequence(points, 0..=most)
            };
            let tokens = proptest::collection::vec(0..VOCAB, prompt as usize);
            let prefill_splits = interior(prompt, 2);
            let preemptions =
                proptest::collection::vec(interior(completion, knobs.preemptions), choices);
            let hostile = knobs.hostile;
            (
                tokens,
                prefill_splits,
                preemptions,
                knobs.reemit.clone(),
                omit,
            )
                .prop_map(
                    move |(tokens, prefill_splits, preemptions, reemit, omit)| {
                        let request = Request {
                            prefill_splits,
                            preemptions,
                            reemit,
                            ..Request::new(0, model, dtype, tokens, choices, completion)
                        }
                        .omitting(omit);
                        let case = Case::new(wire, vec![request], false);
                        if hostile {
                            case.hostile()
                        } else {
                            case
                        }
                    },
                )
        })
}

/// An SGLang case: one output, or a `/generate` batch's, each its own
/// prompt, start and decode convention.
fn outputs(wire: Wire, model: Model, knobs: Knobs) -> impl Strategy<Value = Case> {
    let omit = knobs.omit_prefix;
    let output = (
        knobs.prompt.clone(),
        knobs.completion.clone(),
        any::<u64>(),
        proptest::sample::select(knobs.conventions.clone()),
    )
        .prop_flat_map(move |(prompt, completion, start, convention)| {
            let tokens = proptest::collection::vec(0..VOCAB, prompt as usize);
            tokens.prop_map(move |tokens| {
                // Half of them from 0, the rest anywhere in [0, P].
                let start = if omit && start % 2 == 1 {
                    (start / 2) % (prompt + 1)
                } else {
                    0
                };
                Request::new(0, model, Dtype::Int32, tokens, 1, completion)
                    .starting_at(start)
                    .with_convention(convention)
            })
        });
    (
        proptest::collection::vec(output, knobs.choices.clone()),
        any::<bool>(),
    )
        .prop_map(move |(requests, batch)| {
            let batch = batch || requests.len() > 1;
            Case::new(wire, requests, batch)
        })
}
