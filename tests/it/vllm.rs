//! vLLM 0.32's end-anchored `.npy` (SPEC section 4a): rows placed by
//! `usage.prompt_tokens` and each choice's `token_ids`, laws V1-V5.
//!
//! Pairs are written here as the engine writes them (a truth per position,
//! a prefill answering `[S0, P)`, a decode answering `[S, P + N - 1)`), with
//! the test's own `.npy` writer and reader; nothing the crate encodes is
//! checked by the crate itself.

use crate::support::{npy_read, npy_write};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::algebra::PositionProblem;
use pd_stitch::{Error, ErrorDetail, ErrorKind, Stitcher};
use proptest::prelude::*;
use serde_json::{json, Value};

const LAYERS: u64 = 3;
const TOP_K: u64 = 2;

/// The id of layer-slot `k` of position `x` of choice `c` of a request
/// whose prompt has `prompt` tokens: every position's row is distinct, so a
/// row taken from the wrong place shows; the prompt's rows are the same for
/// every choice (one prompt), the completion's are each choice's own.
fn truth(prompt: u64, c: usize, x: u64, k: u64) -> u8 {
    let c = if x < prompt { 0 } else { c as u64 };
    (x.wrapping_mul(31) ^ c.wrapping_mul(97) ^ k.wrapping_mul(7)) as u8
}

fn rows_bytes(prompt: u64, c: usize, from: u64, to: u64) -> Vec<u8> {
    (from..to)
        .flat_map(|x| (0..LAYERS * TOP_K).map(move |k| truth(prompt, c, x, k)))
        .collect()
}

fn npy(prompt: u64, c: usize, from: u64, to: u64) -> Value {
    let file = npy_write(
        "|u1",
        &[to - from, LAYERS, TOP_K],
        &rows_bytes(prompt, c, from, to),
    );
    json!(STANDARD.encode(file))
}

/// A choice as vLLM's `/inference/v1/generate` answers it: `generated`
/// tokens, rows `[from, prompt + generated - 1)`.
fn choice(c: usize, prompt: u64, generated: u64, from: u64) -> Value {
    let end = prompt + generated - 1;
    json!({"index": c, "token_ids": (0..generated).map(|t| (t * 13 + c as u64) % 512).collect::<Vec<_>>(),
           "finish_reason": "length", "logprobs": null, "routed_experts": npy(prompt, c, from, end)})
}

fn response(prompt: u64, choices: Vec<Value>) -> Value {
    let completion: u64 = choices
        .iter()
        .map(|c| c["token_ids"].as_array().map_or(0, Vec::len) as u64)
        .sum();
    json!({"request_id": "r", "choices": choices,
           "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                     "total_tokens": prompt + completion}})
}

/// A pair as a P/D deployment of vLLM 0.32 writes it, and what a colocated
/// server asked with `S0` answers.
#[derive(Clone, Debug)]
struct Pair {
    prompt: u64,
    s0: u64,
    decode_start: u64,
    generated: Vec<u64>,
}

impl Pair {
    fn prefill(&self) -> Value {
        response(self.prompt, vec![choice(0, self.prompt, 1, self.s0)])
    }

    fn decode(&self) -> Value {
        let choices = self
            .generated
            .iter()
            .enumerate()
            .map(|(c, &n)| choice(c, self.prompt, n, self.decode_start))
            .collect();
        response(self.prompt, choices)
    }

    /// The rows a colocated server answers choice `c`: `[S0, P + N - 1)`.
    fn colocated_rows(&self, c: usize) -> (u64, Vec<u8>) {
        let end = self.prompt + self.generated[c] - 1;
        (end - self.s0, rows_bytes(self.prompt, c, self.s0, end))
    }
}

/// Whatever vLLM 0.32 writes: a prompt of 1 to 300 tokens, a client start
/// `S0` in `[0, P]`, a decode sent any start in `[S0, P]` (a router's
/// `max(P, S0)` is `P`; one block-aligned below it is the engine's
/// smallest), and 1 to 3 choices of 1 to 40 tokens. A prefill holds one
/// generated token, so `[S0, P)`.
fn pairs() -> impl Strategy<Value = Pair> {
    (1u64..300)
        .prop_flat_map(|prompt| (Just(prompt), 0..=prompt))
        .prop_flat_map(|(prompt, s0)| {
            (
                Just(prompt),
                Just(s0),
                s0..=prompt,
                prop::collection::vec(1u64..40, 1..=3),
            )
        })
        .prop_map(|(prompt, s0, decode_start, generated)| Pair {
            prompt,
            s0,
            decode_start,
            generated,
        })
}

fn merge_both(prefill: &Value, decode: &Value) -> Result<Value, Error> {
    crate::support::merge_both(&Stitcher::new(), prefill, decode)
}

/// A merged choice's rows, read with the test's own reader: (rows, bytes).
fn read(merged: &Value, c: usize) -> (u64, Vec<u8>) {
    let text = merged["choices"][c]["routed_experts"].as_str().unwrap();
    let (descr, dims, data) = npy_read(&STANDARD.decode(text).unwrap());
    assert_eq!(descr, "|u1");
    assert_eq!(&dims[1..], &[LAYERS, TOP_K]);
    (dims[0], data)
}

fn positions(err: &Error) -> &PositionProblem {
    match err.detail() {
        ErrorDetail::Positions { problem, .. } => problem,
        other => panic!("not a Positions error: {other}"),
    }
}

proptest! {
    #![proptest_config(crate::support::config("vllm"))]

    /// V1: the merged rows of every choice are the colocated server's for
    /// the same request, `[S0, P + N - 1)`, byte for byte, through both
    /// paths; and they read back, by the merged response's own counts, at
    /// `S0`.
    #[test]
    fn v1_merged_rows_are_the_colocated_rows(pair in pairs()) {
        let merged = merge_both(&pair.prefill(), &pair.decode()).expect("merges");
        for c in 0..pair.generated.len() {
            prop_assert_eq!(read(&merged, c), pair.colocated_rows(c), "choice {}", c);
            let rows = pd_stitch::gather::gather_from(
                &merged, c, "routed_experts", &pd_stitch::gather::Store::memory())
                .expect("reads");
            let end = pair.prompt + pair.generated[c] - 1;
            prop_assert_eq!(rows.positions(), pd_stitch::algebra::Rows::new(pair.s0, end).unwrap());
        }
    }

    /// V2: the counts must agree with the rows: a decode whose prompt
    /// differs is `PromptMismatch` at its `usage.prompt_tokens`; one whose
    /// rows would start before 0 or after the prompt is `OutOfRange` at its
    /// rows; one that starts after the prefill's end is `Coverage`.
    #[test]
    fn v2_counts_that_contradict_the_rows_are_refused(pair in pairs(), delta in 1u64..5) {
        let prefill = pair.prefill();
        let mut decode = pair.decode();
        decode["usage"]["prompt_tokens"] = json!(pair.prompt + delta);
        let err = merge_both(&prefill, &decode).expect_err("prompt mismatch");
        // The prompt is read before the rows are placed: a longer prompt
        // may leave the rows out of range first.
        match positions(&err) {
            PositionProblem::PromptMismatch { prefill, decode, .. } => {
                prop_assert_eq!((*prefill, *decode), (pair.prompt, pair.prompt + delta));
                prop_assert_eq!(err.location().to_string(), "decode usage.prompt_tokens");
            }
            PositionProblem::OutOfRange { .. } => {
                prop_assert_eq!(err.location().to_string(), "decode choices[0].routed_experts");
            }
            other => prop_assert!(false, "{other:?}"),
        }

        // Rows that would start before 0: more rows than P + N - 1.
        let mut decode = pair.decode();
        let n = pair.generated[0];
        decode["choices"][0]["routed_experts"] = npy(pair.prompt, 0, 0, pair.prompt + n - 1 + delta);
        let err = merge_both(&prefill, &decode).expect_err("out of range");
        let out_of_range = matches!(positions(&err), PositionProblem::OutOfRange { .. });
        prop_assert!(out_of_range, "{}", err);

        // Rows starting after the prompt (S > P, which the engine refuses):
        // too few rows for the tokens.
        if n > delta {
            let mut decode = pair.decode();
            decode["choices"][0]["routed_experts"] =
                npy(pair.prompt, 0, pair.prompt + delta, pair.prompt + n - 1);
            let err = merge_both(&prefill, &decode).expect_err("starts after the prompt");
            let out_of_range = matches!(positions(&err), PositionProblem::OutOfRange { .. });
            prop_assert!(out_of_range, "{}", err);
        }
    }

    /// V3: counts on one side only are refused (`CountsOnOneSide`), either
    /// way round, whatever the rows; with neither side counted, a `.npy` is
    /// read from 0 (section 4, N4) and a pair that does not start there is
    /// not placed as the engine wrote it.
    #[test]
    fn v3_counts_on_one_side_only_are_refused(pair in pairs()) {
        let strip = |mut r: Value| {
            for choice in r["choices"].as_array_mut().unwrap() {
                choice.as_object_mut().unwrap().remove("token_ids");
            }
            r
        };
        for (prefill, decode, prefill_counted) in [
            (strip(pair.prefill()), pair.decode(), false),
            (pair.prefill(), strip(pair.decode()), true),
        ] {
            let err = merge_both(&prefill, &decode).expect_err("one side counted");
            let counted = match positions(&err) {
                PositionProblem::CountsOnOneSide { prefill, .. } => Some(*prefill),
                _ => None,
            };
            prop_assert_eq!(counted, Some(prefill_counted), "{}", err);
            prop_assert_eq!(err.location().to_string(), "decode choices[0].routed_experts");
        }
        if pair.s0 == 0 && pair.decode_start == 0 {
            // Full-length answers: both readings place them alike.
            let merged = merge_both(&strip(pair.prefill()), &strip(pair.decode())).expect("merges");
            for c in 0..pair.generated.len() {
                prop_assert_eq!(read(&merged, c), pair.colocated_rows(c));
            }
        }
    }
}

/// V4: the counts' own faults, each at its place: `token_ids` that is not
/// an array (`Structure`), a missing or non-integer `usage.prompt_tokens`
/// (`Integer`), and a prompt and token count that place no row (`Counts`).
#[test]
fn v4_the_counts_faults_name_their_place() {
    let pair = Pair {
        prompt: 45,
        s0: 0,
        decode_start: 45,
        generated: vec![8],
    };
    type Fault = Box<dyn Fn(&mut Value, &mut Value)>;
    let cases: Vec<(Fault, ErrorKind, &str)> = vec![
        (
            Box::new(|_, d| d["choices"][0]["token_ids"] = json!("1 2 3")),
            ErrorKind::Structure,
            "decode choices[0].token_ids",
        ),
        (
            Box::new(|p, _| p["choices"][0]["token_ids"] = json!({"a": 1})),
            ErrorKind::Structure,
            "prefill choices[0].token_ids",
        ),
        (
            Box::new(|_, d| {
                d.as_object_mut().unwrap().remove("usage");
            }),
            ErrorKind::Integer,
            "decode usage.prompt_tokens",
        ),
        (
            Box::new(|p, _| p["usage"]["prompt_tokens"] = json!(-1)),
            ErrorKind::Integer,
            "prefill usage.prompt_tokens",
        ),
        (
            Box::new(|_, d| {
                d["usage"]["prompt_tokens"] = json!(0);
                d["choices"][0]["token_ids"] = json!([]);
            }),
            ErrorKind::Positions,
            "decode choices[0].routed_experts",
        ),
    ];
    for (fault, kind, at) in cases {
        let (mut prefill, mut decode) = (pair.prefill(), pair.decode());
        fault(&mut prefill, &mut decode);
        let err = merge_both(&prefill, &decode).expect_err(at);
        assert_eq!(
            (err.kind(), err.location().to_string().as_str()),
            (kind, at),
            "{err}"
        );
    }
}

/// V5: a null `token_ids` is no counts, and a decode choice's counts are
/// its own: choices of different lengths each end where their tokens say.
#[test]
fn v5_each_choice_is_placed_by_its_own_tokens() {
    let pair = Pair {
        prompt: 70,
        s0: 10,
        decode_start: 64,
        generated: vec![1, 12, 5],
    };
    let merged = merge_both(&pair.prefill(), &pair.decode()).expect("merges");
    for c in 0..3 {
        assert_eq!(read(&merged, c), pair.colocated_rows(c), "choice {c}");
    }
    // `"token_ids": null` on both sides is no counts: read from 0.
    let mut prefill = pair.prefill();
    let mut decode = pair.decode();
    prefill["choices"][0]["token_ids"] = Value::Null;
    for choice in decode["choices"].as_array_mut().unwrap() {
        choice["token_ids"] = Value::Null;
    }
    let err = merge_both(&prefill, &decode).expect_err("read from 0, the decode misses the cut");
    assert_eq!(err.kind(), ErrorKind::Coverage, "{err}");
}

// ----------------------------------------------------------------------------
// The real engine's answers (tests/fixtures/engines/vllm, saved from vLLM 0.32
// on the CPU by tests/engines/vllm/run.sh --save-fixtures).
// ----------------------------------------------------------------------------

fn fixture(path: &str) -> Vec<u8> {
    let at = format!(
        "{}/tests/fixtures/engines/vllm/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}"))
}

fn fixture_json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).expect("JSON")
}

/// A choice's rows as the test's own reader reads them: (rows, bytes), and
/// the positions they end at by the answer's counts, `P + N - 1`.
fn engine_rows(response: &Value, c: usize) -> (u64, Vec<u8>, u64) {
    let (rows, data) = read(response, c);
    let end = response["usage"]["prompt_tokens"].as_u64().unwrap()
        + response["choices"][c]["token_ids"]
            .as_array()
            .unwrap()
            .len() as u64
        - 1;
    (rows, data, end)
}

/// The engine's own pairs, stitched by both paths, give the colocated
/// server's rows byte for byte: the decode sent S = P, sent S at the block
/// it loads, n = 2, and a second turn asked from S0 = 45.
#[test]
fn the_engines_pairs_stitch_to_its_colocated_rows() {
    let cases = [
        ("p45/prefill.json", "p45/decode.json", "p45/colocated.json"),
        (
            "p45/prefill.json",
            "p45/decode-s32.json",
            "p45/colocated.json",
        ),
        ("p70/prefill.json", "p70/decode.json", "p70/colocated.json"),
        (
            "p70/prefill.json",
            "p70/decode-s64.json",
            "p70/colocated.json",
        ),
        (
            "p45/prefill-n2.json",
            "p45/decode-n2.json",
            "p45/colocated-n2.json",
        ),
        (
            "p70/prefill-n2.json",
            "p70/decode-n2.json",
            "p70/colocated-n2.json",
        ),
        (
            "turn2/prefill.json",
            "turn2/decode.json",
            "turn2/colocated.json",
        ),
    ];
    for (prefill, decode, colocated) in cases {
        let colocated = fixture_json(colocated);
        let decode_json = fixture_json(decode);
        // The decode's own rows are not the colocated ones (they start
        // later): the check below can fail.
        assert_ne!(read(&decode_json, 0), read(&colocated, 0), "{decode}");
        let merged = merge_both(&fixture_json(prefill), &decode_json).expect(decode);
        let choices = colocated["choices"].as_array().unwrap().len();
        assert_eq!(merged["choices"].as_array().unwrap().len(), choices);
        for c in 0..choices {
            assert_eq!(
                engine_rows(&merged, c),
                engine_rows(&colocated, c),
                "{decode} choice {c}"
            );
            assert_eq!(
                merged["choices"][c]["token_ids"], colocated["choices"][c]["token_ids"],
                "{decode} choice {c}"
            );
        }
    }
}

/// The engine's decode streams (with and without a usage event), stitched
/// by `StreamStitcher` in chunks of every size up to 64 bytes: the rows
/// event's rows are the colocated rows, placed by the tokens of the whole
/// stream, and every other event passes byte for byte.
#[test]
fn the_engines_streams_stitch_to_its_colocated_rows() {
    use pd_stitch::stream::StreamStitcher;
    for prompt in ["p45", "p70"] {
        let prefill = fixture(&format!("{prompt}/prefill.json"));
        let colocated = fixture_json(&format!("{prompt}/colocated.json"));
        for stream in ["decode.sse", "decode-usage.sse"] {
            let input = fixture(&format!("{prompt}/{stream}"));
            for size in [1, 7, 64, input.len()] {
                let mut stitcher =
                    StreamStitcher::new(Stitcher::new(), prefill.clone()).expect("prefill");
                let mut out = Vec::new();
                for chunk in input.chunks(size) {
                    stitcher.feed(chunk, &mut out).expect("feeds");
                }
                stitcher.finish(&mut out).expect("finishes");
                let text = String::from_utf8(out).unwrap();
                let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
                let inputs: Vec<&str> = std::str::from_utf8(&input)
                    .unwrap()
                    .split("\n\n")
                    .filter(|e| !e.is_empty())
                    .collect();
                assert_eq!(events.len(), inputs.len());
                let mut stitched = 0;
                for (got, sent) in events.iter().zip(&inputs) {
                    if !sent.contains("\"routed_experts\":\"") {
                        assert_eq!(got, sent, "{prompt}/{stream}: passed as sent");
                        continue;
                    }
                    stitched += 1;
                    let data: Value =
                        serde_json::from_str(got.strip_prefix("data: ").unwrap()).unwrap();
                    let (rows, bytes) = read(&data, 0);
                    let (want_rows, want_bytes, _) = engine_rows(&colocated, 0);
                    assert_eq!((rows, bytes), (want_rows, want_bytes), "{prompt}/{stream}");
                }
                assert_eq!(stitched, 1, "{prompt}/{stream}");
            }
        }
    }
}

/// The prefill's rows alone, on a 1-token prompt, place at `[0, 1)`; and
/// `pd-stitch`'s readers place each saved answer where the engine put it.
#[test]
fn the_engines_answers_read_at_their_positions() {
    let cases = [
        ("p1/colocated.json", 0),
        ("p1/prefill.json", 0),
        ("p45/prefill.json", 0),
        ("p45/decode.json", 45),
        ("p45/decode-s32.json", 32),
        ("p70/decode-s64.json", 64),
        ("turn2/colocated.json", 45),
        ("turn2/prefill.json", 45),
        ("turn2/decode.json", 62),
    ];
    for (path, start) in cases {
        let response = fixture_json(path);
        let rows = pd_stitch::gather::gather_from(
            &response,
            0,
            "routed_experts",
            &pd_stitch::gather::Store::memory(),
        )
        .expect(path);
        let (count, _, end) = engine_rows(&response, 0);
        assert_eq!(
            rows.positions(),
            pd_stitch::algebra::Rows::new(start, end).unwrap(),
            "{path}"
        );
        assert_eq!(end - start, count, "{path}");
    }
}

/// The simulator's `.npy` form, which the mock backends serve, answers as
/// the engine does (held against the saved answers, not against itself):
/// the same members place the rows (`usage.prompt_tokens`, each choice's
/// `token_ids`, `routed_experts` a `.npy` string), and each role's rows
/// cover what the engine's cover for the same counts: the colocated server
/// and the prefill from `S0`, the decode from the prompt's end, every one
/// ending at `P + N - 1` (the prefill's N being 1).
#[test]
fn the_simulator_answers_as_the_engine_does() {
    use pd_stitch::gather::{gather_from, Store};
    use pd_stitch::sim::{answer, Request, Wire};
    // (start relative to the prompt's end, whether the rows reach P + N - 1)
    // of each role, read off one of the engine's answers and one of the
    // simulator's.
    let shape = |response: &Value| -> (i64, u64, u64) {
        let rows = gather_from(response, 0, "routed_experts", &Store::memory()).expect("reads");
        let prompt = response["usage"]["prompt_tokens"].as_u64().unwrap();
        let n = response["choices"][0]["token_ids"]
            .as_array()
            .unwrap()
            .len() as u64;
        let end = rows.positions().end();
        (
            rows.positions().start() as i64 - prompt as i64,
            end - (prompt + n - 1),
            response["choices"][0]["routed_experts"].is_string() as u64,
        )
    };
    let engine = [
        shape(&fixture_json("p45/colocated.json")),
        shape(&fixture_json("p45/prefill.json")),
        shape(&fixture_json("p45/decode.json")),
    ];
    assert_eq!(engine, [(-45, 0, 1), (-45, 0, 1), (0, 0, 1)]);
    let mut seen = 0;
    for index in 0..40 {
        let request = Request::draw(5, index);
        let requests = std::slice::from_ref(&request);
        let npy = answer(Wire::Npy, requests, false, None, &mut Store::memory()).expect("writes");
        let p = request.prompt_len() as i64;
        let sim = [
            shape(&npy.colocated),
            shape(&npy.prefill),
            shape(&npy.decode),
        ];
        assert_eq!(sim, [(-p, 0, 1), (-p, 0, 1), (0, 0, 1)], "request {index}");
        seen += 1;
    }
    assert_eq!(seen, 40);
}
