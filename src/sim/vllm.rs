//! vLLM's wire, written over the model: what a colocated server, a prefill
//! instance and a decode instance answer on `/inference/v1/generate`, rows
//! by handle (with their files), inline compact, and vLLM 0.32's counted
//! `.npy`.
//!
//! - The **colocated** server answers every choice's rows `[S, P + N - 1)`
//!   (`S` the start asked, vLLM's `routed_experts_prompt_start`), by handle
//!   split at the prompt's end.
//! - The **prefill** answers the prompt's rows `[S, P)`, as a chunked
//!   prefill writes them (split at the request's prefill splits), and
//!   samples the first token.
//! - The **decode** answers each choice's rows from its first forward, the
//!   last prompt position: `[P - 1, P + N - 1)`, split where preemptions
//!   happened (re-emitting rows after each, the earlier copy stale), its row
//!   for the last prompt position wrong (it holds no routing of the
//!   prompt). vLLM 0.32's `.npy` decode answers from the start the router
//!   sends it, `max(P, S)`, and holds no prompt row.
//!
//! Beside the routed experts every form carries float32
//! `routed_expert_weights` (by handle, in the inline forms too, like the
//! other fields) and the CSR sampling masks of the sampled tokens,
//! `[P, P + N)` (`P` alone for the prefill), which sit first, between
//! segments or last in the decode's payloads.

use std::io;

use serde_json::{json, Value};

use crate::format::by_handle::PAYLOAD;
use crate::format::inline;
use crate::gather::Store;
use crate::response::fields::{ROUTED_EXPERTS, ROUTED_EXPERT_WEIGHTS};

use super::engine::Wire;
use super::files::{FieldRows, FileSet, Span};
use super::model::Prefix;
use super::request::{encode, Request};
use super::responses::Responses;

/// The responses of `request` in all three forms, writing the files their
/// rows by handle point into (the inline forms' other fields point into
/// them too).
pub(super) fn forms(request: &Request, store: &mut Store) -> io::Result<[(Wire, Responses); 3]> {
    let r = request;
    let name = format!("req-{:04}", r.index);
    let (p, n, end) = (r.prompt_len(), r.completion_len(), r.rows());
    let s0 = r.start_below_prompt();
    let model = r.model;
    let prefixes: Vec<Vec<Prefix>> = (0..r.choices()).map(|c| r.prefixes(c)).collect();
    let at = |c: usize, x: u64| prefixes[c][x as usize];
    let ids = |c: usize, x: u64| r.true_ids(x, at(c, x));
    let floats = |w: Vec<f32>| -> Vec<u8> { w.iter().flat_map(|v| v.to_le_bytes()).collect() };
    let truth = |c: usize| move |x: u64, _stale: bool| encode(r.dtype, &ids(c, x));
    let weights = |c: usize| move |x: u64, _stale: bool| floats(model.weights(at(c, x), false));
    // The decode's rows: wrong for the prompt's last position, stale where
    // a later segment re-emits them.
    let decoded = |c: usize| {
        move |x: u64, stale: bool| {
            let row = ids(c, x);
            if x < p || stale {
                encode(r.dtype, &model.wrong(&row))
            } else {
                encode(r.dtype, &row)
            }
        }
    };
    let decoded_weights =
        |c: usize| move |x: u64, stale: bool| floats(model.weights(at(c, x), x < p || stale));
    let mask = |c: usize| move |x: u64| model.mask(at(c, x));

    // By handle: real files, segments anchored at the end as the writer
    // does: routed experts, float32 weights beside them, and the CSR
    // sampling masks and logprobs of the sampled tokens, [P, P + N).
    let mut files = FileSet::default();
    let colocated_file = format!("{name}/colocated.bin");
    let prefill_file = format!("{name}/prefill.bin");
    let decode_file = format!("{name}/decode.bin");
    let mask_file = format!("{name}/mask.bin");
    let shape = r.row_shape();
    let experts = FieldRows {
        field: ROUTED_EXPERTS,
        dtype: r.dtype.name(),
        shape,
    };
    let weighted = FieldRows {
        field: ROUTED_EXPERT_WEIGHTS,
        dtype: "float32",
        shape,
    };
    let span = |start: u64, n: u64, splits: &'static [u64]| Span {
        start,
        n,
        splits,
        reemit: 0,
    };
    let colocated_choices: Vec<Value> = (0..r.choices())
        .map(|c| {
            let at = [p - s0];
            let whole = Span {
                splits: &at,
                ..span(s0, end - s0, &[])
            };
            let mut payload = files.fixed(&colocated_file, experts, &truth(c), whole);
            payload.extend(files.fixed(&colocated_file, weighted, &weights(c), whole));
            payload.extend(files.masks(&mask_file, &mask(c), span(p, n, &[])));
            json!({"index": c, PAYLOAD: payload})
        })
        .collect();
    let prefill_at: Vec<u64> = r
        .prefill_splits
        .iter()
        .filter_map(|&x| x.checked_sub(s0))
        .collect();
    let prompt = Span {
        splits: &prefill_at,
        ..span(s0, p - s0, &[])
    };
    let mut prefill_payload = files.fixed(&prefill_file, experts, &truth(0), prompt);
    prefill_payload.extend(files.fixed(&prefill_file, weighted, &weights(0), prompt));
    // The prefill samples the first token too; its mask is not stitched.
    prefill_payload.extend(files.masks(&mask_file, &mask(0), span(p, 1, &[])));
    let decode_choices: Vec<Value> = (0..r.choices())
        .map(|c| {
            let splits = &r.preemptions[c];
            let own = Span {
                start: p - 1,
                n,
                splits,
                reemit: r.reemit,
            };
            let mut payload = files.fixed(&decode_file, experts, &decoded(c), own);
            // The sampling masks sit among the routed segments, as writers
            // interleave them.
            let sampled = Span {
                splits,
                ..span(p, n, &[])
            };
            let masks = files.masks(&mask_file, &mask(c), sampled);
            let at = (c + r.index) % (payload.len() + 1);
            payload.splice(at..at, masks);
            payload.extend(files.fixed(&decode_file, weighted, &decoded_weights(c), own));
            json!({"index": c, PAYLOAD: payload})
        })
        .collect();
    files.flush(store)?;

    let compact = |rows: &[u8], start: u64, seq: u64| {
        json!({"data": inline::encode_base64(rows), "shape": [seq, shape[0], shape[1]],
               "start": start, "dtype": r.dtype.name()})
    };
    // `usage` as an OpenAI-style server reports it: the prompt, and the
    // tokens generated over all choices (the prefill instance generates one).
    let response = |id: &str, choices: Vec<Value>| {
        let completion = if id == "prefill" {
            1
        } else {
            n * choices.len() as u64
        };
        json!({"id": format!("{name}-{id}"), "object": "text_completion", "choices": choices,
               "usage": {"prompt_tokens": p, "completion_tokens": completion,
                         "total_tokens": p + completion}})
    };
    // Inline forms carry the routed experts inline and the other fields
    // by handle, in the same files as the by-handle form.
    let others = |choices: &[Value], c: usize| -> Value {
        let payload = choices
            .get(c)
            .and_then(|choice| choice[PAYLOAD].as_array())
            .map(|items| {
                items
                    .iter()
                    .filter(|s| s["field"] != ROUTED_EXPERTS)
                    .cloned()
                    .collect::<Vec<Value>>()
            })
            .unwrap_or_default();
        Value::Array(payload)
    };
    let inline_response = |id: &str, values: Vec<Value>, by_handle: &[Value]| {
        let choices = values
            .into_iter()
            .enumerate()
            .map(|(c, v)| json!({"index": c, ROUTED_EXPERTS: v, PAYLOAD: others(by_handle, c)}))
            .collect();
        response(id, choices)
    };

    let prefill_choices = vec![json!({"index": 0, PAYLOAD: prefill_payload})];
    let row_bytes = r.row_bytes();
    let rows_of = |c: usize, from: u64, to: u64, row: &dyn Fn(usize, u64) -> Vec<u8>| {
        (from..to).flat_map(|x| row(c, x)).collect::<Vec<u8>>()
    };
    let true_row = |c: usize, x: u64| encode(r.dtype, &ids(c, x));
    let decode_row = |c: usize, x: u64| decoded(c)(x, false);
    debug_assert_eq!(true_row(0, 0).len(), row_bytes);
    let compact_form = Responses {
        colocated: inline_response(
            "colocated",
            (0..r.choices())
                .map(|c| compact(&rows_of(c, s0, end, &true_row), s0, end - s0))
                .collect(),
            &colocated_choices,
        ),
        prefill: inline_response(
            "prefill",
            vec![compact(&rows_of(0, s0, p, &true_row), s0, p - s0)],
            &prefill_choices,
        ),
        decode: inline_response(
            "decode",
            (0..r.choices())
                .map(|c| compact(&rows_of(c, p - 1, end, &decode_row), p - 1, n))
                .collect(),
            &decode_choices,
        ),
    };
    // `.npy` as vLLM 0.32 answers it (SPEC section 4a): each choice with
    // its `token_ids`, its rows ending at `P + N - 1` and starting where
    // it was asked: the colocated server and the prefill at `S`, the
    // decode at `max(P, S)`, which the router sends it.
    let npy_choices = |id: &str, from: u64, by_handle: &[Value]| -> io::Result<Value> {
        let prefill = id == "prefill";
        let count = if prefill { 1 } else { r.choices() };
        let mut response = inline_response(
            id,
            (0..count)
                .map(|c| r.vllm_npy(c, from, prefill))
                .collect::<io::Result<_>>()?,
            by_handle,
        );
        for (c, choice) in response["choices"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .enumerate()
        {
            choice["token_ids"] = json!(r.token_ids(c, prefill));
        }
        Ok(response)
    };
    let npy_form = Responses {
        colocated: npy_choices("colocated", s0, &colocated_choices)?,
        prefill: npy_choices("prefill", s0, &prefill_choices)?,
        decode: npy_choices("decode", p.max(s0), &decode_choices)?,
    };
    let by_handle = Responses {
        colocated: response("colocated", colocated_choices),
        prefill: response("prefill", prefill_choices),
        decode: response("decode", decode_choices),
    };
    Ok([
        (Wire::ByHandle, by_handle),
        (Wire::Compact, compact_form),
        (Wire::Npy, npy_form),
    ])
}

impl Request {
    /// The `.npy` rows vLLM 0.32 answers for `choice` asked from `from`
    /// (clamped to the prompt): the true rows of `[from, P + N - 1)`, or of
    /// `[from, P)` for a prefill, which generates one token.
    ///
    /// # Errors
    ///
    /// A row shape the `.npy` header cannot hold.
    pub fn vllm_npy(&self, choice: usize, from: u64, prefill: bool) -> io::Result<Value> {
        let end = if prefill {
            self.prompt_len()
        } else {
            self.rows()
        };
        let from = from.min(self.prompt_len());
        let prefixes = self.prefixes(choice);
        let rows: Vec<u8> = (from..end)
            .flat_map(|x| encode(self.dtype, &self.true_ids(x, prefixes[x as usize])))
            .collect();
        let [layers, top_k] = self.row_shape();
        let file = inline::npy_file(self.dtype, &[end - from, layers, top_k], &rows)
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?;
        Ok(Value::String(inline::encode_base64(&file)))
    }

    /// The tokens `choice` generates (a prefill the first token of the
    /// first choice, which it samples).
    pub fn token_ids(&self, choice: usize, prefill: bool) -> Vec<u64> {
        let tokens = self.completions.get(choice).cloned().unwrap_or_default();
        if prefill {
            tokens.into_iter().take(1).collect()
        } else {
            tokens
        }
    }
}
