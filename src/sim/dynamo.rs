//! NVIDIA Dynamo's wire, written over the model (SPEC section 4b, the keys
//! of Dynamo 1.6.1's answers in `tests/fixtures/engines/dynamo/`).
//!
//! - Its **token API** (`/inference/v1/generate`) answers each choice's
//!   rows as compact rows with their start: the colocated server
//!   `[S, P + N - 1)`, the prefill `[S, P)`, and the decode, which a router
//!   asks from `P - 1` (Dynamo refuses `P`), `[P - 1, P + N - 1)`, its row
//!   for the last prompt position wrong (it holds no routing of the
//!   prompt), as vLLM's.
//! - Its **OpenAI API** (`/v1/completions` with `nvext`) answers one
//!   compact object per response at `nvext.routed_experts`, from 0 (the API
//!   takes no start): the colocated server `[0, P + N - 1)`, the prefill
//!   `[0, P)`, the decode `[0, P + N - 1)` with its prompt rows wrong (rows
//!   it did not compute). One choice: the first.

use serde_json::{json, Value};

use crate::format::inline;
use crate::places::{Holder, Holds, RowsKind};
use crate::response::fields::ROUTED_EXPERTS;

use super::request::{encode, Request};
use super::responses::Responses;

/// The response's member that holds inline rows (Dynamo's `nvext`), as
/// the table of places has it.
fn rows_member() -> Option<&'static str> {
    crate::places::all().find_map(|place| match (place.holder, place.holds) {
        (Holder::Member(member), Holds::Rows(RowsKind::Inline)) => Some(member),
        _ => None,
    })
}

/// The rows of `choice` of `request` over `[from, to)` as compact rows:
/// the true rows, or the decode's (`wrong_below`: positions below it are
/// the model's wrong rows).
fn compact(request: &Request, choice: usize, from: u64, to: u64, wrong_below: u64) -> Value {
    let prefixes = request.prefixes(choice);
    let rows: Vec<u8> = (from..to)
        .flat_map(|x| {
            let row = request.true_ids(x, prefixes[x as usize]);
            let row = if x < wrong_below {
                request.model.wrong(&row)
            } else {
                row
            };
            encode(request.dtype, &row)
        })
        .collect();
    let [layers, top_k] = request.row_shape();
    json!({"data": inline::encode_base64(&rows), "shape": [to - from, layers, top_k],
           "start": from, "dtype": request.dtype.name()})
}

/// What Dynamo's token API answers for `request`.
pub(super) fn token_api(request: &Request) -> Responses {
    let r = request;
    let (p, end) = (r.prompt_len(), r.rows());
    let s = r.start_below_prompt();
    let choice = |c: usize, rows: Value, tokens: Vec<u64>| {
        json!({"index": c, "token_ids": tokens, "logprobs": null, "finish_reason": "length",
               ROUTED_EXPERTS: rows, "sampling_mask": null})
    };
    let response = |role: &str, choices: Vec<Value>| {
        json!({"request_id": format!("req-{:04}-{role}", r.index), "choices": choices,
               "prompt_logprobs": null, "kv_transfer_params": null})
    };
    let every = |from: u64, wrong_below: u64| -> Vec<Value> {
        (0..r.choices())
            .map(|c| {
                choice(
                    c,
                    compact(r, c, from, end, wrong_below),
                    r.token_ids(c, false),
                )
            })
            .collect()
    };
    Responses {
        colocated: response("colocated", every(s, 0)),
        prefill: response(
            "prefill",
            vec![choice(0, compact(r, 0, s, p, 0), r.token_ids(0, true))],
        ),
        decode: response("decode", every(p - 1, p)),
    }
}

/// What Dynamo's OpenAI API answers for `request`'s first choice.
pub(super) fn openai_api(request: &Request) -> Responses {
    let r = request;
    let (p, end) = (r.prompt_len(), r.rows());
    let response = |role: &str, tokens: Vec<u64>, rows: Value| {
        let text: String = tokens.iter().map(|t| format!(" t{t}")).collect();
        let completion = tokens.len() as u64;
        let mut response = json!({"id": format!("cmpl-{:04}-{role}", r.index),
               "object": "text_completion", "created": 1_796_244_919u64, "model": "moe",
               "system_fingerprint": null,
               "choices": [{"text": text, "index": 0, "finish_reason": "length"}],
               "usage": {"prompt_tokens": p, "completion_tokens": completion,
                         "total_tokens": p + completion}});
        if let Some(member) = rows_member() {
            response[member] = json!({ROUTED_EXPERTS: rows});
        }
        response
    };
    Responses {
        colocated: response("colocated", r.token_ids(0, false), compact(r, 0, 0, end, 0)),
        prefill: response("prefill", r.token_ids(0, true), compact(r, 0, 0, p, 0)),
        decode: response("decode", r.token_ids(0, false), compact(r, 0, 0, end, p)),
    }
}
