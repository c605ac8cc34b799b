//! What `probe` sends each engine and how it reads the answers: vLLM's
//! `POST /inference/v1/generate` (`token_ids`; a choice's tokens in
//! `choices[i].token_ids`, its rows in `routed_experts` or `payload`) and
//! SGLang's `POST /generate` (`input_ids`, `return_routed_experts`; the
//! tokens in `output_ids`, the rows in `meta_info.routed_experts`), whole
//! or streamed. Either way an answer becomes one JSON response that
//! `pd_stitch::compare` reads, with each choice's generated tokens beside it.

use pd_stitch::places::{self, Holder, Holds, RowsKind};
use pd_stitch::ROUTED_EXPERTS;
use serde_json::{json, Map, Value};

/// The HTTP API of the engine behind both endpoints: what probe sends it
/// and how it reads the answers. Not the simulator's `pd_stitch::sim::Engine`
/// (the engines whose deployments it plays, Dynamo among them): probe speaks
/// to vLLM's and SGLang's generate endpoints alone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineApi {
    /// vLLM: `POST /inference/v1/generate` with `token_ids`.
    Vllm,
    /// SGLang: `POST /generate` with `input_ids` and `return_routed_experts`.
    Sglang,
}

/// vLLM's request field for where a response's rows start, in
/// `sampling_params` (`vllm/sampling_params.py`).
const VLLM_START: &str = "routed_experts_prompt_start";

/// SGLang's, at the body's top level (`sglang/srt/managers/io_struct.py`,
/// `GenerateReqInput`).
const SGLANG_START: &str = "routed_experts_start_len";

/// The sampling every request asks for.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub max_tokens: u64,
    pub n: u64,
    pub temperature: f64,
    pub seed: u64,
}

/// One answer, read: the response `compare` reads, each choice's generated
/// tokens (`None` where the answer does not say), and the prompt length it
/// reports.
#[derive(Clone, Debug)]
pub struct Answer {
    pub response: Value,
    pub tokens: Vec<Option<Vec<u64>>>,
    pub prompt_tokens: Option<u64>,
}

impl EngineApi {
    /// The path requests are sent to.
    pub fn path(self) -> &'static str {
        match self {
            EngineApi::Vllm => "/inference/v1/generate",
            EngineApi::Sglang => "/generate",
        }
    }

    /// The request body: the same for both endpoints. `start`, when given,
    /// asks for rows from that position on (a delta request): vLLM's
    /// `sampling_params.routed_experts_prompt_start`, SGLang's
    /// `routed_experts_start_len` (docs/SPEC.md, "Probing a live
    /// deployment").
    pub fn body(
        self,
        id: &str,
        prompt: &[u64],
        sampling: Sampling,
        stream: bool,
        start: Option<u64>,
    ) -> Value {
        let mut body = match self {
            EngineApi::Vllm => json!({
                "request_id": id,
                "token_ids": prompt,
                "sampling_params": {
                    "max_tokens": sampling.max_tokens,
                    "n": sampling.n,
                    "temperature": sampling.temperature,
                    "seed": sampling.seed,
                },
                "stream": stream,
            }),
            EngineApi::Sglang => json!({
                "rid": id,
                "input_ids": prompt,
                "sampling_params": {
                    "max_new_tokens": sampling.max_tokens,
                    "n": sampling.n,
                    "temperature": sampling.temperature,
                    "sampling_seed": sampling.seed,
                },
                "return_routed_experts": true,
                "stream": stream,
            }),
        };
        if let Some(start) = start {
            match self {
                EngineApi::Vllm => body["sampling_params"][VLLM_START] = json!(start),
                EngineApi::Sglang => body[SGLANG_START] = json!(start),
            }
        }
        body
    }

    /// The body of a full-context forward: `tokens` (a whole episode) as
    /// one prompt, one token generated greedily, rows asked from 0, and a
    /// `cache_salt` of its own, so that no block of the prompt is a
    /// prefix-cache hit. Both
    /// engines return a cached block's rows as they were stored when it was
    /// first computed (vLLM's aux-output store, SGLang's slots of the radix
    /// cache): unsalted, the forward would hand the episode its own rows
    /// back instead of computing them.
    pub fn full_context_body(self, id: &str, tokens: &[u64], stream: bool, salt: &str) -> Value {
        let greedy = Sampling {
            max_tokens: 1,
            n: 1,
            temperature: 0.0,
            seed: 0,
        };
        let mut body = self.body(id, tokens, greedy, stream, Some(0));
        body["cache_salt"] = json!(salt);
        body
    }

    /// A whole (not streamed) answer.
    pub fn whole(self, body: &[u8]) -> Result<Answer, String> {
        let response: Value = serde_json::from_slice(body)
            .map_err(|e| format!("the body is not JSON ({e}): {}", snippet(body)))?;
        self.read(response)
    }

    /// A streamed answer: the data of each event, in order.
    pub fn stream(self, events: &[Vec<u8>]) -> Result<Answer, String> {
        let mut done = false;
        let mut values = Vec::new();
        for (k, data) in events.iter().enumerate() {
            if done {
                return Err(format!("event {k} comes after data: [DONE]"));
            }
            if data.as_slice() == b"[DONE]" {
                done = true;
                continue;
            }
            let value: Value = serde_json::from_slice(data)
                .map_err(|e| format!("stream event {k} is not JSON ({e}): {}", snippet(data)))?;
            if let Some(error) = value.get("error") {
                return Err(format!("stream event {k} is an error: {error}"));
            }
            values.push(value);
        }
        if !done {
            return Err("the stream ended without data: [DONE]".into());
        }
        let response = match self {
            EngineApi::Vllm => vllm_stream(&values),
            EngineApi::Sglang => sglang_stream(&values),
        }?;
        self.read(response)
    }

    /// The tokens and the prompt length of a response, which must carry rows.
    fn read(self, response: Value) -> Result<Answer, String> {
        let items: Vec<&Value> = match self {
            EngineApi::Vllm => response
                .get("choices")
                .and_then(Value::as_array)
                .ok_or("the response has no choices array")?
                .iter()
                .collect(),
            EngineApi::Sglang => match &response {
                Value::Array(items) => items.iter().collect(),
                item => vec![item],
            },
        };
        if items.is_empty() {
            return Err("the response has no choice".into());
        }
        let mut tokens = Vec::with_capacity(items.len());
        for (i, item) in items.iter().enumerate() {
            let (ids, has_rows) = match self {
                EngineApi::Vllm => (
                    item.get("token_ids"),
                    item.get(ROUTED_EXPERTS).is_some_and(|v| !v.is_null())
                        || by_handle(item).and_then(Value::as_array).is_some_and(|p| {
                            p.iter().any(|s| {
                                s.get("field").and_then(Value::as_str) == Some(ROUTED_EXPERTS)
                            })
                        }),
                ),
                EngineApi::Sglang => (
                    item.get("output_ids"),
                    sglang_rows(item).is_some_and(|v| !v.is_null()),
                ),
            };
            if !has_rows {
                return Err(format!(
                    "choice {i} carries no routed_experts rows (is routing replay on, and asked for?)"
                ));
            }
            tokens.push(ids.and_then(token_list));
        }
        let prompt_tokens = match self {
            EngineApi::Vllm => response.get("usage"),
            EngineApi::Sglang => items.first().and_then(|item| generate_meta(item)),
        }
        .and_then(|u| u.get("prompt_tokens"))
        .and_then(Value::as_u64);
        Ok(Answer {
            response,
            tokens,
            prompt_tokens,
        })
    }
}

/// A vLLM choice's segments by handle (null included), at the choice's place
/// of rows by handle in the library's table of where rows sit
/// (`pd_stitch::places`): probe reads the engines' keys from the table, as
/// the Python binding does, rather than spell them again.
fn by_handle(choice: &Value) -> Option<&Value> {
    places::all()
        .filter(|p| p.holder == Holder::Choice && p.holds == Holds::Rows(RowsKind::ByHandle))
        .find_map(|p| choice.get(p.key))
}

/// The places of SGLang's rows in an output's member objects, each as
/// (member, key), in the table's order: `/generate`'s `meta_info` first,
/// then the OpenAI answers' `sglext`.
fn sglang_places() -> impl Iterator<Item = (&'static str, &'static str)> {
    places::all().filter_map(|p| match (p.holder, p.holds) {
        (Holder::Member(member), Holds::Rows(RowsKind::Sglang)) => Some((member, p.key)),
        _ => None,
    })
}

/// An SGLang output's rows (null included): at the first of its places the
/// output has.
fn sglang_rows(output: &Value) -> Option<&Value> {
    sglang_places().find_map(|(member, key)| output.get(member)?.get(key))
}

/// An SGLang `/generate` output's metadata (`meta_info`), which holds its
/// rows and their counts: the member of the first place of SGLang's rows.
fn generate_meta(output: &Value) -> Option<&Value> {
    let (member, _) = sglang_places().next()?;
    output.get(member)
}

/// An SGLang `/generate` output's rows (null included), in its metadata.
fn generate_rows(output: &Value) -> Option<&Value> {
    let (member, key) = sglang_places().next()?;
    output.get(member)?.get(key)
}

/// A JSON array of token ids, when it is one.
fn token_list(value: &Value) -> Option<Vec<u64>> {
    value.as_array()?.iter().map(Value::as_u64).collect()
}

/// At most 200 bytes of `bytes`, as text.
fn snippet(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes.get(..200).unwrap_or(bytes));
    text.into_owned()
}

/// vLLM's stream as one response: per choice (by `index`), the token deltas
/// of every chunk collected in order, the rows from the chunk that carries
/// them (its other keys too, `finish_reason` and `index` aside), and
/// `usage` from the chunk that has it.
fn vllm_stream(chunks: &[Value]) -> Result<Value, String> {
    // Per choice: its tokens so far, and the chunk's choice with its rows.
    type Collected = (Vec<Value>, Option<Map<String, Value>>);
    let mut choices: Vec<Collected> = Vec::new();
    let mut usage = None;
    for (k, chunk) in chunks.iter().enumerate() {
        if let Some(u) = chunk.get("usage").filter(|u| !u.is_null()) {
            usage = Some(u.clone());
        }
        for choice in chunk
            .get("choices")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = choice
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .ok_or_else(|| format!("stream chunk {k}: a choice without an index"))?;
            if index > 4096 {
                return Err(format!("stream chunk {k}: choice index {index}"));
            }
            if choices.len() <= index {
                choices.resize_with(index + 1, || (Vec::new(), None));
            }
            let (tokens, rows) = &mut choices[index];
            if let Some(ids) = choice.get("token_ids").and_then(Value::as_array) {
                tokens.extend(ids.iter().cloned());
            }
            let carries_rows = choice.get(ROUTED_EXPERTS).is_some_and(|v| !v.is_null())
                || by_handle(choice).is_some_and(|v| !v.is_null());
            if carries_rows {
                let mut object = choice.as_object().cloned().unwrap_or_default();
                for key in ["index", "finish_reason", "token_ids"] {
                    object.remove(key);
                }
                *rows = Some(object);
            }
        }
    }
    let choices: Vec<Value> = choices
        .into_iter()
        .map(|(tokens, rows)| {
            let mut object = rows.unwrap_or_default();
            object.insert("token_ids".into(), Value::Array(tokens));
            Value::Object(object)
        })
        .collect();
    let mut response = json!({ "choices": choices });
    if let Some(usage) = usage {
        response["usage"] = usage;
    }
    Ok(response)
}

/// SGLang's stream as its whole answer: per output (`index`, 0 without
/// one), the last event that carries rows (else the last event), with the
/// `output_ids` of the events collected: an event whose ids extend those
/// seen so far replaces them (SGLang's default, cumulative), any other adds
/// to them (`--incremental-streaming-output`).
fn sglang_stream(events: &[Value]) -> Result<Value, String> {
    let mut outputs: Vec<(Vec<Value>, Option<Value>)> = Vec::new();
    for (k, event) in events.iter().enumerate() {
        let index = match event.get("index") {
            None | Some(Value::Null) => 0,
            Some(i) => i
                .as_u64()
                .and_then(|i| usize::try_from(i).ok())
                .filter(|&i| i <= 4096)
                .ok_or_else(|| format!("stream event {k}: index {i}"))?,
        };
        if outputs.len() <= index {
            outputs.resize_with(index + 1, || (Vec::new(), None));
        }
        let (tokens, kept) = &mut outputs[index];
        if let Some(ids) = event.get("output_ids").and_then(Value::as_array) {
            if ids.len() >= tokens.len() && ids.get(..tokens.len()) == Some(tokens.as_slice()) {
                *tokens = ids.clone();
            } else {
                tokens.extend(ids.iter().cloned());
            }
        }
        let carries_rows = generate_rows(event).is_some_and(|v| !v.is_null());
        if carries_rows
            || kept
                .as_ref()
                .is_none_or(|kept| generate_rows(kept).is_none_or(Value::is_null))
        {
            *kept = Some(event.clone());
        }
    }
    let mut items: Vec<Value> = outputs
        .into_iter()
        .map(|(tokens, kept)| {
            let mut item = kept.unwrap_or_else(|| json!({}));
            item["output_ids"] = Value::Array(tokens);
            item
        })
        .collect();
    match items.len() {
        0 => Err("the stream has no output".into()),
        1 => Ok(items.remove(0)),
        _ => Ok(Value::Array(items)),
    }
}

/// Where vLLM's inline `.npy` rows sit: vLLM 0.32's are END-ANCHORED,
/// covering `[P + N - 1 - rows, P + N - 1)` for a prompt of `P` tokens and
/// `N` generated, and the library's readers place them so from
/// `usage.prompt_tokens` and the choice's `token_ids` (SPEC section 4a). A
/// stream read without a usage event (a client that did not ask for
/// `stream_options.include_usage`) gets the prompt length the request
/// implies, so that its rows are placed as the whole answer's are. The one
/// place `probe` decides where rows sit.
pub fn place_rows(engine: EngineApi, answer: &mut Answer, prompt_len: u64) {
    if engine != EngineApi::Vllm || answer.prompt_tokens.is_some() {
        return;
    }
    let Some(object) = answer.response.as_object_mut() else {
        return;
    };
    let usage = object.entry("usage").or_insert_with(|| json!({}));
    if let Some(usage) = usage.as_object_mut() {
        usage.insert("prompt_tokens".into(), json!(prompt_len));
        answer.prompt_tokens = Some(prompt_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use pd_stitch::gather::{self, Store};

    fn events(values: &[Value]) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = values.iter().map(|v| v.to_string().into_bytes()).collect();
        out.push(b"[DONE]".to_vec());
        out
    }

    #[test]
    fn a_delta_start_goes_where_each_engine_reads_it() {
        let sampling = Sampling {
            max_tokens: 8,
            n: 2,
            temperature: 0.5,
            seed: 3,
        };
        let vllm = EngineApi::Vllm.body("r", &[1, 2, 3], sampling, false, Some(2));
        assert_eq!(vllm["sampling_params"]["routed_experts_prompt_start"], 2);
        assert_eq!(vllm.get("routed_experts_start_len"), None);
        let sglang = EngineApi::Sglang.body("r", &[1, 2, 3], sampling, true, Some(2));
        assert_eq!(sglang["routed_experts_start_len"], 2);
        assert_eq!(
            sglang["sampling_params"].get("routed_experts_prompt_start"),
            None
        );
        // No start: neither field.
        let full = EngineApi::Vllm.body("r", &[1, 2, 3], sampling, false, None);
        assert_eq!(
            full["sampling_params"].get("routed_experts_prompt_start"),
            None
        );
        let full = EngineApi::Sglang.body("r", &[1, 2, 3], sampling, false, None);
        assert_eq!(full.get("routed_experts_start_len"), None);
    }

    #[test]
    fn a_full_context_forward_is_one_greedy_token_with_its_own_salt() {
        let vllm = EngineApi::Vllm.full_context_body("f", &[1, 2, 3, 4], true, "s1");
        assert_eq!(
            vllm,
            json!({"request_id": "f", "token_ids": [1, 2, 3, 4], "stream": true, "cache_salt": "s1",
                   "sampling_params": {"max_tokens": 1, "n": 1, "temperature": 0.0, "seed": 0,
                                       "routed_experts_prompt_start": 0}})
        );
        let sglang = EngineApi::Sglang.full_context_body("f", &[1, 2], false, "s2");
        assert_eq!(
            sglang,
            json!({"rid": "f", "input_ids": [1, 2], "stream": false, "cache_salt": "s2",
                   "return_routed_experts": true, "routed_experts_start_len": 0,
                   "sampling_params": {"max_new_tokens": 1, "n": 1, "temperature": 0.0, "sampling_seed": 0}})
        );
    }

    #[test]
    fn a_vllm_stream_is_its_token_deltas_and_its_rows_chunk() {
        let rows = json!({"data": "AQI=", "shape": [2, 1, 1], "start": 0, "dtype": "uint8"});
        let chunks = [
            json!({"choices": [{"index": 1, "token_ids": [7], "routed_experts": null}]}),
            json!({"choices": [{"index": 0, "token_ids": [5, 6], "routed_experts": null}]}),
            json!({"choices": [{"index": 0, "token_ids": [8], "routed_experts": rows, "finish_reason": "length"}]}),
            json!({"choices": [{"index": 1, "token_ids": [], "routed_experts": rows}]}),
            json!({"choices": [], "usage": {"prompt_tokens": 1}}),
        ];
        let answer = EngineApi::Vllm.stream(&events(&chunks)).unwrap();
        assert_eq!(answer.tokens, vec![Some(vec![5, 6, 8]), Some(vec![7])]);
        assert_eq!(answer.prompt_tokens, Some(1));
        assert_eq!(
            answer.response["choices"][0],
            json!({"routed_experts": rows, "token_ids": [5, 6, 8]})
        );
        // No [DONE], an error event, a choice without rows: errors.
        let cut = &events(&chunks)[..5];
        assert_eq!(
            EngineApi::Vllm.stream(cut).unwrap_err(),
            "the stream ended without data: [DONE]"
        );
        let error = events(&[json!({"error": {"message": "boom"}})]);
        assert!(EngineApi::Vllm
            .stream(&error)
            .unwrap_err()
            .contains("is an error"));
        let rowless = events(&chunks[..2]);
        assert_eq!(
            EngineApi::Vllm.stream(&rowless).unwrap_err(),
            "choice 0 carries no routed_experts rows (is routing replay on, and asked for?)"
        );
    }

    /// The helpers read the engines' keys from the library's table; its
    /// order says which of SGLang's places is `/generate`'s.
    #[test]
    fn the_table_gives_probe_the_engines_keys() {
        assert_eq!(
            sglang_places().collect::<Vec<_>>(),
            [
                ("meta_info", "routed_experts"),
                ("sglext", "routed_experts")
            ]
        );
        let output = json!({"meta_info": {"prompt_tokens": 3, "routed_experts": "AAAA"},
                            "sglext": {"routed_experts": "BBBB"}});
        assert_eq!(generate_meta(&output), Some(&output["meta_info"]));
        assert_eq!(generate_rows(&output), Some(&json!("AAAA")));
        assert_eq!(sglang_rows(&output), Some(&json!("AAAA")));
        let openai = json!({"sglext": {"routed_experts": "BBBB"}});
        assert_eq!(sglang_rows(&openai), Some(&json!("BBBB")));
        assert_eq!(generate_rows(&openai), None);
        let choice = json!({"payload": [], "routed_experts": null});
        assert_eq!(by_handle(&choice), Some(&json!([])));
    }

    #[test]
    fn an_sglang_stream_is_its_finished_event_with_all_its_tokens() {
        let meta = |rows: Option<&str>| json!({"prompt_tokens": 3, "routed_experts": rows});
        let cumulative = [
            json!({"output_ids": [4], "meta_info": meta(None)}),
            json!({"output_ids": [4, 5], "meta_info": meta(None)}),
            json!({"output_ids": [4, 5, 6], "meta_info": meta(Some("AAAA"))}),
        ];
        let answer = EngineApi::Sglang.stream(&events(&cumulative)).unwrap();
        assert_eq!(answer.tokens, vec![Some(vec![4, 5, 6])]);
        assert_eq!(answer.prompt_tokens, Some(3));
        assert_eq!(answer.response["meta_info"]["routed_experts"], "AAAA");
        let incremental = [
            json!({"output_ids": [4], "meta_info": meta(None)}),
            json!({"output_ids": [5], "meta_info": meta(None)}),
            json!({"output_ids": [6], "meta_info": meta(Some("AAAA"))}),
        ];
        let answer = EngineApi::Sglang.stream(&events(&incremental)).unwrap();
        assert_eq!(answer.tokens, vec![Some(vec![4, 5, 6])]);
    }

    #[test]
    fn end_anchored_npy_rows_are_placed_from_the_counts() {
        // An .npy of 2 rows of 1 x 1 uint8 ([7], [9]); prompt 4, 3 generated:
        // rows [4 + 3 - 1 - 2, 6) = [4, 6), by the library's reading.
        let npy = {
            let mut header =
                b"{'descr': '|u1', 'fortran_order': False, 'shape': (2, 1, 1), }".to_vec();
            while (10 + header.len() + 1) % 64 != 0 {
                header.push(b' ');
            }
            header.push(b'\n');
            let mut file = b"\x93NUMPY\x01\x00".to_vec();
            file.extend_from_slice(&(header.len() as u16).to_le_bytes());
            file.extend_from_slice(&header);
            file.extend_from_slice(&[7, 9]);
            STANDARD.encode(&file)
        };
        let placed = |response: &Value| {
            let rows = gather::gather_from(response, 0, ROUTED_EXPERTS, &Store::memory()).unwrap();
            (
                rows.positions().start(),
                rows.positions().end(),
                rows.data().to_vec(),
            )
        };
        // A stream without a usage event: the prompt length the request
        // implies is filled in, and the rows are placed from it.
        let stream = [
            json!({"choices": [{"index": 0, "token_ids": [1, 2], "routed_experts": null}]}),
            json!({"choices": [{"index": 0, "token_ids": [3], "routed_experts": npy}]}),
        ];
        let mut answer = EngineApi::Vllm.stream(&events(&stream)).unwrap();
        assert_eq!(answer.prompt_tokens, None);
        place_rows(EngineApi::Vllm, &mut answer, 4);
        assert_eq!(answer.prompt_tokens, Some(4));
        assert_eq!(placed(&answer.response), (4, 6, vec![7, 9]));
        // A usage the answer reports is kept.
        let whole = json!({"choices": [{"token_ids": [1, 2, 3], "routed_experts": npy}],
                           "usage": {"prompt_tokens": 5}});
        let mut answer = EngineApi::Vllm.whole(whole.to_string().as_bytes()).unwrap();
        place_rows(EngineApi::Vllm, &mut answer, 4);
        assert_eq!(placed(&answer.response), (5, 7, vec![7, 9]));
    }
}
