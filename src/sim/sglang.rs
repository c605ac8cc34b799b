//! SGLang's wire, written over the model: what a colocated server and a
//! 1P1D pair answer through each API (SPEC section 10, F1-F12), the one
//! place the simulator writes it.
//!
//! Each request is one output (its first choice): the prefill answers its
//! rows `[S, P)` (`S` the `routed_experts_start_len` asked) and its one
//! generated token; the colocated server `[S, P + N - 1)`; the decode, in
//! its [`Convention`](crate::algebra::Convention), from its [`SlotPool`]:
//! full-length from `S`, its prompt rows read from slots it never wrote
//! (zeros, or stale rows of earlier requests), or suffix-only from `P`.
//! `/generate` answers several requests (or one, asked as a batch) as an
//! array of outputs; the OpenAI APIs answer the first.

use serde_json::{json, Value};

use crate::format::inline::encode_base64;
use crate::format::sglang::{Api, META_INFO, SGLEXT, SGL_EXT};
use crate::response::fields::ROUTED_EXPERTS;

use super::request::Request;
use super::responses::Responses;
use super::slot_pool::SlotPool;

/// The base64 of ids, as SGLang writes them (`int32`, little-endian).
pub fn encode_ids(ids: &[i32]) -> String {
    let bytes: Vec<u8> = ids.iter().flat_map(|id| id.to_le_bytes()).collect();
    encode_base64(&bytes)
}

/// Ids of the model as SGLang's `int32`s.
fn int32(ids: Vec<u64>) -> Vec<i32> {
    ids.into_iter()
        .map(|id| i32::try_from(id).unwrap_or(i32::MAX))
        .collect()
}

/// The true ids of positions `[from, to)` of `request`'s first choice.
fn true_ids(request: &Request, from: u64, to: u64) -> Vec<i32> {
    let prefixes = request.prefixes(0);
    int32(
        (from..to)
            .flat_map(|x| request.true_ids(x, prefixes[x as usize]))
            .collect(),
    )
}

/// The responses of `requests` through `api`, the decode's through `pool`
/// (a fresh server's, as large as the requests, when none is given).
pub(super) fn answer(
    api: Api,
    requests: &[Request],
    batch: bool,
    pool: Option<&mut SlotPool>,
) -> Responses {
    let mut fresh;
    let pool = match pool {
        Some(pool) => pool,
        None => {
            let slots: u64 = requests.iter().map(Request::rows).sum();
            fresh = SlotPool::new(usize::try_from(slots).unwrap_or(0).max(1));
            &mut fresh
        }
    };
    Responses {
        prefill: prefill_answer(api, requests, batch),
        decode: decode_answer(pool, api, requests, batch),
        colocated: colocated_answer(api, requests, batch),
    }
}

/// The prefill's answer alone: rows `[start, P)`, one generated token.
pub fn prefill_answer(api: Api, requests: &[Request], batch: bool) -> Value {
    let rows = |r: &Request| (r.token_ids(0, true), true_ids(r, r.start, r.prompt_len()));
    outputs(api, requests, batch, rows, Role::Prefill)
}

/// A colocated server's answer alone: rows `[start, P + N - 1)`.
pub fn colocated_answer(api: Api, requests: &[Request], batch: bool) -> Value {
    let rows = |r: &Request| (r.token_ids(0, false), true_ids(r, r.start, r.rows()));
    outputs(api, requests, batch, rows, Role::Colocated)
}

/// The decode's answer alone, each request in turn through `pool`
/// ([`SlotPool::decode`]).
pub fn decode_answer(pool: &mut SlotPool, api: Api, requests: &[Request], batch: bool) -> Value {
    let rows = |r: &Request| (r.token_ids(0, false), int32(pool.decode(r)));
    outputs(api, requests, batch, rows, Role::Decode)
}

/// One output per request (an array for a `/generate` batch, else the
/// first request's), each with the tokens and ids `rows` gives.
fn outputs(
    api: Api,
    requests: &[Request],
    batch: bool,
    mut rows: impl FnMut(&Request) -> (Vec<u64>, Vec<i32>),
    role: Role,
) -> Value {
    let mut one = |r: &Request| {
        let (tokens, ids) = rows(r);
        output(api, r.prompt_len(), &tokens, &encode_ids(&ids), role)
    };
    if api == Api::Generate && batch {
        Value::Array(requests.iter().map(&mut one).collect())
    } else {
        requests.first().map_or(Value::Null, one)
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Prefill,
    Decode,
    Colocated,
}

/// One output, with the keys SGLang writes around the rows: for
/// `/generate`, the `meta_info` keys of SGLang 0.5.23's answers
/// (`tests/fixtures/engines/sglang/`), and `text` beside `output_ids`, as a
/// server with a tokenizer writes it (the fixtures' servers ran without
/// one); a prefill reports its one token with `finish_reason.length` 0, as
/// the engine's does.
fn output(api: Api, prompt: u64, tokens: &[u64], rows: &str, role: Role) -> Value {
    let completion = tokens.len() as u64;
    let text = match role {
        Role::Prefill => "",
        _ => "The answer is 42.\n\"quoted\" \u{e9}",
    };
    match api {
        Api::Generate => json!({
            "text": text,
            "output_ids": tokens,
            META_INFO: {
                "id": "req-0",
                "finish_reason": {
                    "type": "length",
                    "length": if role == Role::Prefill { 0 } else { completion },
                },
                "prompt_tokens": prompt,
                "weight_version": "default",
                "num_retractions": 0,
                "reasoning_tokens": 0,
                "completion_tokens": completion,
                "cached_tokens": 0,
                "weight_versions": [{"version": "default", "start": 0, "end": completion}],
                "cached_tokens_details": null,
                ROUTED_EXPERTS: rows,
                "dp_rank": null,
                "e2e_latency": 0.125,
                "response_sent_to_client_ts": 1_764_547_200.25,
            },
        }),
        Api::ResponseExt | Api::ChoiceExt => {
            let mut choice = json!({
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "length",
            });
            if api == Api::ChoiceExt {
                choice[SGL_EXT] = json!({ROUTED_EXPERTS: rows});
            }
            let mut response = json!({
                "id": "chatcmpl-0",
                "object": "chat.completion",
                "created": 1_764_547_200u64,
                "model": "moe",
                "choices": [choice],
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            });
            if api == Api::ResponseExt {
                response[SGLEXT] = json!({ROUTED_EXPERTS: rows});
            }
            response
        }
    }
}

/// The writer against the names and encodings written out by hand.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::algebra::{Convention, Dtype};
    use crate::sim::Model;

    #[test]
    fn apis_are_named_by_their_slots() {
        assert_eq!(Api::ALL.map(Api::name), ["generate", "sglext", "sgl_ext"]);
    }

    /// `int32` little-endian, then base64: 1 is `01 00 00 00`, -1 is
    /// `ff ff ff ff`.
    #[test]
    fn ids_are_encoded_as_sglang_writes_them() {
        assert_eq!(encode_ids(&[1, -1]), "AQAAAP////8=");
        assert_eq!(encode_ids(&[]), "");
    }

    /// Each role's response: the prompt, its own count of generated tokens
    /// (the prefill's one) and those tokens, its rows, and text only where
    /// tokens were decoded. A prompt of 3 from position 1, 4 generated,
    /// rows of 2 ids: the prefill has `[1, 3)`, the suffix-only decode
    /// `[3, 6)`, the colocated server `[1, 6)`.
    #[test]
    fn each_role_answers_its_counts_rows_and_text() {
        let model = Model {
            seed: 7,
            layers: 1,
            top_k: 2,
            experts: 256,
        };
        let r = Request::new(0, model, Dtype::Int32, vec![4, 5, 6], 1, 4)
            .starting_at(1)
            .with_convention(Convention::SuffixOnly);
        let got = answer(Api::Generate, std::slice::from_ref(&r), false, None);
        for (response, tokens, ids, has_text) in [
            (
                &got.prefill,
                r.token_ids(0, true),
                true_ids(&r, 1, 3),
                false,
            ),
            (&got.decode, r.token_ids(0, false), true_ids(&r, 3, 6), true),
            (
                &got.colocated,
                r.token_ids(0, false),
                true_ids(&r, 1, 6),
                true,
            ),
        ] {
            let meta = &response["meta_info"];
            assert_eq!(meta["prompt_tokens"], 3, "{response}");
            assert_eq!(meta["completion_tokens"], tokens.len(), "{response}");
            assert_eq!(response["output_ids"], json!(tokens), "{response}");
            assert_eq!(meta["routed_experts"], encode_ids(&ids), "{response}");
            let text = response["text"].as_str().unwrap();
            assert_eq!(!text.is_empty(), has_text, "{response}");
        }
        assert_eq!(got.prefill["meta_info"]["completion_tokens"], 1);
    }
}
