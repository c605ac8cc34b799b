//! NVIDIA Dynamo 1.6.1's answers (tests/fixtures/engines/dynamo, saved from
//! its frontend and vLLM worker on the CPU by tests/engines/dynamo/capture.sh).
//!
//! Dynamo's token-in token-out API (`/inference/v1/generate`) carries a
//! choice's rows as the compact object `{data, shape, start, dtype}`, where
//! vLLM's own API carries a `.npy`: the start is on the wire. Rows are read
//! here with the test's own reader (base64 and the object's members), never
//! the crate's.

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use pd_stitch::{Stitch, Stitcher};
use serde_json::Value;

const LAYERS: u64 = 3;
const TOP_K: u64 = 2;

fn fixture(path: &str) -> Vec<u8> {
    let at = format!(
        "{}/tests/fixtures/engines/dynamo/{path}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}"))
}

fn fixture_json(path: &str) -> Value {
    serde_json::from_slice(&fixture(path)).expect("JSON")
}

/// Compact rows, read by the test: (start, rows, bytes), the bytes checked
/// against the shape and dtype.
fn compact(rows: &Value) -> (u64, u64, Vec<u8>) {
    assert_eq!(rows["dtype"], "uint8");
    let shape: Vec<u64> = rows["shape"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_u64().unwrap())
        .collect();
    assert_eq!(&shape[1..], &[LAYERS, TOP_K]);
    let bytes = STANDARD.decode(rows["data"].as_str().unwrap()).unwrap();
    assert_eq!(bytes.len() as u64, shape[0] * LAYERS * TOP_K);
    (rows["start"].as_u64().unwrap(), shape[0], bytes)
}

fn choice_rows(response: &Value, c: usize) -> (u64, u64, Vec<u8>) {
    compact(&response["choices"][c]["routed_experts"])
}

/// Merges by the `Value` path and by the bytes path on the engine's own
/// bytes; both must succeed and agree.
fn merge(prefill: &str, decode: &str) -> Value {
    let stitcher = Stitcher::new();
    let mut value = fixture_json(decode);
    stitcher
        .merge(&fixture_json(prefill), &mut value, Stitch::ForPd)
        .unwrap_or_else(|e| panic!("{decode}: {e}"));
    let mut bytes = fixture(decode);
    stitcher
        .merge_bytes(&fixture(prefill), &mut bytes, Stitch::ForPd)
        .unwrap_or_else(|e| panic!("{decode} (bytes): {e}"));
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap(),
        value,
        "{decode}: the two paths disagree"
    );
    value
}

/// The engine's prefill (`max_tokens` 1: rows `[0, P)`) and decode (asked
/// from S = P - 1 or a block boundary below P: rows `[S, P + N - 1)`),
/// stitched, give the colocated answer's rows byte for byte; n = 2 too.
#[test]
fn the_engines_token_api_pairs_stitch_to_its_colocated_rows() {
    for prompt in ["p45", "p70"] {
        for (prefill, decode, colocated) in [
            ("prefill", "decode", "colocated"),
            ("prefill", "decode-s32", "colocated"),
            ("prefill-n2", "decode-n2", "colocated-n2"),
        ] {
            let path = |name: &str| format!("{prompt}/{name}.json");
            let colocated = fixture_json(&path(colocated));
            let decode_json = fixture_json(&path(decode));
            let merged = merge(&path(prefill), &path(decode));
            let choices = colocated["choices"].as_array().unwrap().len();
            assert_eq!(merged["choices"].as_array().unwrap().len(), choices);
            for c in 0..choices {
                let (start, rows, _) = choice_rows(&decode_json, c);
                // The decode's own rows start past 0: the check can fail.
                assert!(start > 0 && rows < choice_rows(&colocated, c).1);
                assert_eq!(
                    choice_rows(&merged, c),
                    choice_rows(&colocated, c),
                    "{prompt}/{decode} choice {c}"
                );
                assert_eq!(
                    merged["choices"][c]["token_ids"], colocated["choices"][c]["token_ids"],
                    "{prompt}/{decode} choice {c}"
                );
            }
        }
    }
}

/// What the engine refuses, kept as facts a router must live with: the
/// decode asked from S = P (vLLM takes it; Dynamo wants S below P), and a
/// stream on the token API.
#[test]
fn the_engine_refuses_a_start_at_the_prompts_end_and_token_api_streams() {
    for prompt in ["p45", "p70"] {
        let request = fixture_json(&format!("{prompt}/decode-sP-refused.request.json"));
        let p = request["token_ids"].as_array().unwrap().len() as u64;
        assert_eq!(request["sampling_params"]["routed_experts_prompt_start"], p);
        let refused = fixture_json(&format!("{prompt}/decode-sP-refused.json"));
        assert_eq!(refused["error"]["code"], 400);
        let refused = fixture_json(&format!("{prompt}/stream-refused.json"));
        assert_eq!(refused["error"]["code"], 501);
    }
}

// ----------------------------------------------------------------------------
// Dynamo's OpenAI API: the response's `nvext.routed_experts`
// (`pd_stitch`'s `format/nvext.rs`, SPEC section 4b).
// ----------------------------------------------------------------------------

fn nvext_rows(response: &Value) -> (u64, u64, Vec<u8>) {
    compact(&response["nvext"]["routed_experts"])
}

/// The engine's prefill (`max_tokens` 1: `[0, P)`) and its answer to the
/// whole request taken as the decode (the OpenAI API takes no start: `[0,
/// P + N - 1)`) stitch to the colocated rows, by both paths; and with the
/// decode's rows below the cut overwritten, as a decode that did not
/// compute the prompt answers them, the stitched rows are still the
/// colocated ones: below the cut they are the prefill's.
#[test]
fn the_engines_openai_pairs_stitch_at_nvext() {
    for prompt in ["p45", "p70"] {
        let path = |name: &str| format!("{prompt}/{name}.json");
        let colocated = fixture_json(&path("openai-colocated"));
        let p = colocated["usage"]["prompt_tokens"].as_u64().unwrap();
        let prefill = fixture_json(&path("openai-prefill"));
        assert_eq!(nvext_rows(&prefill).1, p);
        let merged = merge(&path("openai-prefill"), &path("openai-colocated"));
        assert_eq!(nvext_rows(&merged), nvext_rows(&colocated), "{prompt}");
        assert_eq!(merged["choices"], colocated["choices"], "{prompt}");

        // The decode's prompt rows, made wrong.
        let mut decode = colocated.clone();
        let (_, rows, mut bytes) = nvext_rows(&decode);
        let below = usize::try_from(p * LAYERS * TOP_K).unwrap();
        bytes[..below].fill(7);
        decode["nvext"]["routed_experts"]["data"] = STANDARD.encode(&bytes).into();
        assert_ne!(nvext_rows(&decode), nvext_rows(&colocated));
        let stitcher = Stitcher::new();
        stitcher
            .merge(&prefill, &mut decode, Stitch::ForPd)
            .unwrap();
        assert_eq!(nvext_rows(&decode), nvext_rows(&colocated), "{prompt}");
        assert_eq!(nvext_rows(&decode).1, rows);
    }
}

/// The engine's stream carries the rows in its last event before `[DONE]`:
/// stitched by `StreamStitcher` in chunks of every size, that event holds
/// the colocated rows and every other event passes as sent. The stream is
/// the engine's, but for its rows below the prompt's end, overwritten as in
/// the test above, so that a stream passed through unstitched fails.
#[test]
fn the_engines_openai_streams_stitch_at_nvext() {
    use pd_stitch::stream::StreamStitcher;
    for prompt in ["p45", "p70"] {
        let prefill = fixture(&format!("{prompt}/openai-prefill.json"));
        let colocated = fixture_json(&format!("{prompt}/openai-colocated.json"));
        let p = colocated["usage"]["prompt_tokens"].as_u64().unwrap();
        let engine = String::from_utf8(fixture(&format!("{prompt}/openai-stream.sse"))).unwrap();
        assert_eq!(
            engine.matches("\"nvext\"").count(),
            1,
            "{prompt}: one rows event"
        );
        let events: Vec<String> = engine
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|event| {
                if !event.contains("\"nvext\"") {
                    return event.to_owned();
                }
                let mut data: Value =
                    serde_json::from_str(event.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(nvext_rows(&data), nvext_rows(&colocated), "{prompt}");
                let (_, _, mut bytes) = nvext_rows(&data);
                bytes[..usize::try_from(p * LAYERS * TOP_K).unwrap()].fill(7);
                data["nvext"]["routed_experts"]["data"] = STANDARD.encode(&bytes).into();
                format!("data: {data}")
            })
            .collect();
        let input = events
            .iter()
            .map(|e| format!("{e}\n\n"))
            .collect::<String>()
            .into_bytes();
        let sent: Vec<&str> = events.iter().map(String::as_str).collect();
        for size in [1, 7, 64, input.len()] {
            let mut stitcher =
                StreamStitcher::new(Stitcher::new(), prefill.clone()).expect("prefill");
            let mut out = Vec::new();
            for chunk in input.chunks(size) {
                stitcher.feed(chunk, &mut out).expect("feeds");
            }
            stitcher.finish(&mut out).expect("finishes");
            let text = String::from_utf8(out).unwrap();
            let got: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
            assert_eq!(got.len(), sent.len());
            for (got, sent) in got.iter().zip(&sent) {
                if !sent.contains("\"nvext\"") {
                    assert_eq!(got, sent, "{prompt}: passed as sent");
                    continue;
                }
                let event: Value =
                    serde_json::from_str(got.strip_prefix("data: ").unwrap()).unwrap();
                assert_eq!(nvext_rows(&event), nvext_rows(&colocated), "{prompt}");
            }
        }
    }
}

/// The errors of `nvext.routed_experts`, each at its place, the decode left
/// as it was: rows on the decode only, on the prefill only, a decode that
/// starts past the prefill's end, and rows that are not compact rows.
#[test]
fn nvext_errors_name_their_place() {
    use pd_stitch::ErrorKind;
    let prefill = fixture_json("p45/openai-prefill.json");
    let colocated = fixture_json("p45/openai-colocated.json");
    let without = |mut v: Value| {
        v.as_object_mut().unwrap().remove("nvext");
        v
    };
    let cases: Vec<(Value, Value, ErrorKind, &str)> = vec![
        (
            without(prefill.clone()),
            colocated.clone(),
            ErrorKind::MissingPrefillField,
            "decode",
        ),
        (
            prefill.clone(),
            without(colocated.clone()),
            ErrorKind::MissingDecodeRows,
            "decode",
        ),
        (
            prefill.clone(),
            {
                let mut late = colocated.clone();
                late["nvext"]["routed_experts"]["start"] = 46.into();
                late
            },
            ErrorKind::Coverage,
            "decode",
        ),
        (
            {
                let mut bad = prefill.clone();
                bad["nvext"]["routed_experts"]["shape"] = serde_json::json!([45, 3]);
                bad
            },
            colocated.clone(),
            ErrorKind::Structure,
            "prefill",
        ),
    ];
    for (prefill, decode, kind, side) in cases {
        let mut merged = decode.clone();
        let err = Stitcher::new()
            .merge(&prefill, &mut merged, Stitch::ForPd)
            .expect_err("an error");
        assert_eq!(err.kind(), kind, "{err}");
        let at = err.to_string();
        assert!(
            at.contains(&format!("{side} nvext.routed_experts")),
            "{kind:?} at {at}"
        );
        assert_eq!(merged, decode, "an error changed the decode");
        // The bytes path agrees.
        let mut bytes = serde_json::to_vec(&decode).unwrap();
        let got = Stitcher::new().merge_bytes(
            &serde_json::to_vec(&prefill).unwrap(),
            &mut bytes,
            Stitch::ForPd,
        );
        assert_eq!(got, Err(err));
    }
}

/// The simulator answers as the engine does (SPEC 4b): on the token API,
/// each role's response and choices with the engine's keys, compact rows
/// from the start each role is asked (the colocated server and the prefill
/// from 0, the decode from `P - 1`) to where its counts end them
/// (`P + N - 1`, the prefill's `P`); on the OpenAI API, the engine's keys
/// and `nvext` rows from 0 to where the usage counts end them. Read off the
/// engine's answers and the simulator's the same way.
#[cfg(feature = "verify")]
#[test]
fn the_simulator_answers_as_the_engine_does() {
    use pd_stitch::gather::Store;
    use pd_stitch::sim::{answer, Request, Wire};
    use std::collections::BTreeSet;
    type Read = (BTreeSet<String>, BTreeSet<String>, &'static str, i64);
    let keys = |v: &Value| -> BTreeSet<String> {
        v.as_object()
            .map_or_else(BTreeSet::new, |o| o.keys().cloned().collect())
    };
    // Where rows start, in words: from 0, or from the last prompt position.
    let from = |start: u64, p: u64| match start {
        0 => "0",
        s if s + 1 == p => "P - 1",
        _ => "elsewhere",
    };
    // A token API answer of a prompt of `p`: its keys, its first choice's,
    // where its rows start, and where they end against its counts.
    let token = |response: &Value, p: u64, prefill: bool| -> Read {
        let choice = &response["choices"][0];
        let rows = &choice["routed_experts"];
        let start = rows["start"].as_u64().unwrap();
        let end = start + rows["shape"][0].as_u64().unwrap();
        let n = choice["token_ids"].as_array().unwrap().len() as u64;
        let due = if prefill { p } else { p + n - 1 };
        let end = end as i64 - due as i64;
        (keys(response), keys(choice), from(start, p), end)
    };
    // An OpenAI API answer: the same, the counts in `usage`.
    let openai = |response: &Value| -> Read {
        let rows = &response["nvext"]["routed_experts"];
        let usage = &response["usage"];
        let (p, n) = (
            usage["prompt_tokens"].as_u64().unwrap(),
            usage["completion_tokens"].as_u64().unwrap(),
        );
        let start = rows["start"].as_u64().unwrap();
        let end = start + rows["shape"][0].as_u64().unwrap();
        let end = end as i64 - (p + n - 1) as i64;
        (
            keys(response),
            keys(&response["choices"][0]),
            from(start, p),
            end,
        )
    };
    let engine = |name: &str| fixture_json(&format!("p45/{name}.json"));
    let token_api = [
        token(&engine("colocated"), 45, false),
        token(&engine("prefill"), 45, true),
        token(&engine("decode"), 45, false),
    ];
    assert_eq!(
        token_api.iter().map(|r| (r.2, r.3)).collect::<Vec<_>>(),
        [("0", 0), ("0", 0), ("P - 1", 0)]
    );
    let openai_api = [
        openai(&engine("openai-colocated")),
        openai(&engine("openai-prefill")),
    ];
    assert_eq!(
        openai_api.iter().map(|r| (r.2, r.3)).collect::<Vec<_>>(),
        [("0", 0), ("0", 0)]
    );
    let mut seen = 0;
    for index in 0..24 {
        let request = Request::draw(5, index);
        let p = request.prompt_len();
        if p == 1 {
            // From 0 and from P - 1 are one position.
            continue;
        }
        let requests = std::slice::from_ref(&request);
        let store = &mut Store::memory();
        let sim = answer(Wire::DynamoToken, requests, false, None, store).unwrap();
        let sim = [
            token(&sim.colocated, p, false),
            token(&sim.prefill, p, true),
            token(&sim.decode, p, false),
        ];
        assert_eq!(sim, token_api, "request {index}");
        let sim = answer(Wire::DynamoOpenAi, requests, false, None, store).unwrap();
        let sim = [
            openai(&sim.colocated),
            openai(&sim.prefill),
            openai(&sim.decode),
        ];
        assert_eq!(sim[..2], openai_api, "request {index}");
        assert_eq!(
            (sim[2].2, sim[2].3),
            ("0", 0),
            "request {index}: the decode"
        );
        seen += 1;
    }
    assert!(seen > 20, "{seen}");
}
