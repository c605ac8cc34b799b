//! How a router crate tests its response path with `pd_stitch::testing`: a
//! faithful path passes, and paths broken in the ways routers break are caught
//! with a message that names the choice, the position and the segment.

use pd_stitch::sim::{Engine, Wire};
use pd_stitch::testing::{cases, fixture, verify_stitched, Case, Knobs, FIXTURES};
use pd_stitch::{ErrorKind, Stitch, Stitcher};
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use serde_json::Value;

/// A faithful response path: merge, then hand the decode response on.
fn router(prefill: &Value, decode: Value) -> Value {
    let mut decode = decode;
    pd_stitch::merge_routed_experts_for_pd(prefill, &mut decode).expect("generated pairs stitch");
    decode
}

/// Broken: a "cleanup" step that sorts each payload by file name, which puts
/// the decode's segments before the prefill's.
fn router_reordering_segments(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    for choice in merged["choices"].as_array_mut().unwrap() {
        if let Some(payload) = choice.get_mut("payload").and_then(Value::as_array_mut) {
            payload.sort_by_key(|s| s["file"].as_str().unwrap_or("").to_owned());
        }
    }
    merged
}

/// Broken: stitches choice 0 and copies its routed experts into every choice
/// (as if all samples of a prompt had routed alike), keeping each choice's
/// other payload items.
fn router_copying_choice_0(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    let choices = merged["choices"].as_array_mut().unwrap();
    let first = choices[0].clone();
    // Choice 0's stitched segments (experts and their weights, in its
    // order) in place of this choice's own: the prefill's come first in
    // both, so only the completion's rows are wrong.
    let routed = |v: &Value| {
        v["field"]
            .as_str()
            .is_some_and(|f| pd_stitch::DEFAULT_FIELDS.contains(&f))
    };
    for choice in choices.iter_mut().skip(1) {
        if let Some(payload) = choice.get_mut("payload").and_then(Value::as_array_mut) {
            payload.retain(|s| !routed(s));
            let theirs: Vec<Value> = first["payload"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|s| routed(s))
                .cloned()
                .collect();
            payload.splice(0..0, theirs);
        }
        if let Some(rows) = first.get("routed_experts") {
            choice["routed_experts"] = rows.clone();
        }
    }
    merged
}

/// A faithful router of every engine: the merge with the model's row
/// shape (which SGLang's rows need and the others ignore).
fn router_with_row_shape(case: &Case) -> Value {
    let (layers, top_k) = case.row_shape();
    let mut merged = case.decode.clone();
    Stitcher::new()
        .row_shape(layers, top_k)
        .merge(&case.prefill, &mut merged, Stitch::ForPd)
        .expect("generated pairs stitch");
    merged
}

/// The knobs of vLLM's forms alone: the broken paths below break vLLM's
/// payloads and choices.
fn vllm() -> Knobs {
    Knobs::engine(Engine::Vllm)
}

proptest! {
    #![proptest_config(crate::support::config("router_testing"))]

    #[test]
    fn a_faithful_router_passes(case in cases(Knobs::default())) {
        let merged = router_with_row_shape(&case);
        verify_stitched(&case, &merged)?;
    }

    /// The same with rows asked from a start after 0 (prefix omission), in
    /// every form that takes one.
    #[test]
    fn a_faithful_router_passes_with_the_prefix_omitted(case in cases(Knobs {
        omit_prefix: true,
        ..Knobs::default()
    })) {
        let merged = router_with_row_shape(&case);
        verify_stitched(&case, &merged)?;
    }
}

/// Runs `router` on `n` cases drawn with `knobs` and returns every failure.
fn failures(knobs: Knobs, n: usize, router: fn(&Value, Value) -> Value) -> Vec<(Case, String)> {
    let mut runner = TestRunner::deterministic();
    let strategy = cases(knobs);
    (0..n)
        .filter_map(|_| {
            let case = strategy.new_tree(&mut runner).unwrap().current();
            let merged = router(&case.prefill, case.decode.clone());
            verify_stitched(&case, &merged)
                .err()
                .map(|m| (case, m.to_string()))
        })
        .collect()
}

#[test]
fn a_router_that_reorders_segments_is_caught() {
    let knobs = Knobs {
        wires: vec![Wire::ByHandle],
        ..Knobs::default()
    };
    let caught = failures(knobs, 64, router_reordering_segments);
    assert_eq!(
        caught.len(),
        64,
        "every by-handle case has prefill and decode segments to swap"
    );
    let (_, message) = &caught[0];
    assert!(
        message.starts_with("choice 0: payload[0] should be the prefill's segment"),
        "{message}"
    );
}

#[test]
fn a_router_that_copies_choice_0_is_caught_with_position_and_segment() {
    let knobs = Knobs {
        choices: 2..=4,
        completion: 2..=48,
        ..vllm()
    };
    let caught = failures(knobs, 64, router_copying_choice_0);
    // Every case has a second choice whose completion rows differ from choice 0's.
    assert_eq!(caught.len(), 64);
    for (case, message) in &caught {
        let position = case.request().prompt_len(); // the first completion position with a row of its own
        assert!(
            message.starts_with(&format!("choice 1, position {position} (from ")),
            "{message}"
        );
        assert!(
            message.contains("expected the decode's row (a completion position)"),
            "{message}"
        );
        if case.wire == Wire::ByHandle {
            assert!(message.contains("(from payload["), "{message}");
        }
    }
}

#[test]
fn the_committed_fixtures_merge_or_fail_as_they_say() {
    assert_eq!(
        FIXTURES,
        ["seed", "inline", "missing-prefill-rows", "bad-rows", "gap"]
    );
    for name in FIXTURES {
        let f = fixture(name).unwrap();
        let mut merged = f.decode.clone();
        let result = pd_stitch::merge_routed_experts_for_pd(&f.prefill, &mut merged);
        match *name {
            "seed" | "inline" => {
                assert_eq!(result, Ok(true), "{name}");
                // Element k of the true row of position x is 100 x + k (uint16).
                let expected: Vec<u8> = (0..5u16)
                    .flat_map(|x| (0..8u16).flat_map(move |k| (100 * x + k).to_le_bytes()))
                    .collect();
                let rows =
                    pd_stitch::gather::gather_from(&merged, 0, "routed_experts", &f.store).unwrap();
                assert_eq!(rows.data(), &expected[..], "{name}");
            }
            "missing-prefill-rows" => assert_eq!(
                result.map_err(|e| e.kind()),
                Err(ErrorKind::MissingPrefillField),
                "{name}"
            ),
            "bad-rows" => assert_eq!(
                result.map_err(|e| e.kind()),
                Err(ErrorKind::Integer),
                "{name}"
            ),
            "gap" => assert_eq!(
                result.map_err(|e| e.kind()),
                Err(ErrorKind::Coverage),
                "{name}"
            ),
            other => panic!("untested fixture {other}"),
        }
        assert!(!f.about.is_empty());
    }
    assert!(fixture("nope").is_none());
}

// Broken paths for the checks of `verify_stitched` the two above do not
// reach: each is wrong in exactly one way, so each check (and each mutant of
// src/testing.rs that weakens it) has a path that only it catches.

/// Every choice's stitched `routed_experts` segments, with their indexes.
fn routed_segments(choice: &Value) -> Vec<(usize, &Value)> {
    choice["payload"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
        .filter(|(_, s)| s["field"] == "routed_experts")
        .collect()
}

/// Broken: answers with the last choice dropped (a path that zips choices
/// with a shorter list).
fn router_dropping_the_last_choice(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    merged["choices"].as_array_mut().unwrap().pop();
    merged
}

#[test]
fn a_router_that_drops_a_choice_is_caught() {
    let knobs = Knobs {
        choices: 2..=4,
        ..vllm()
    };
    let caught = failures(knobs, 32, router_dropping_the_last_choice);
    assert_eq!(caught.len(), 32);
    for (case, message) in &caught {
        let n = case.request().choices();
        assert_eq!(
            message,
            &format!("choice 0: {} choices, expected {n}", n - 1)
        );
    }
}

/// Broken: loses the last row of every choice, by handle (the last routed
/// segment one row shorter) and compact (the data one row shorter): rows
/// that start right and are right as far as they go.
fn router_losing_the_last_row(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    for choice in merged["choices"].as_array_mut().unwrap() {
        let last = routed_segments(choice).last().map(|(j, _)| *j);
        if let Some(j) = last {
            let segment = &mut choice["payload"][j];
            segment["rows"] = (segment["rows"].as_u64().unwrap() - 1).into();
        }
        if let Some(rows) = choice
            .get_mut("routed_experts")
            .and_then(Value::as_object_mut)
        {
            let seq = rows["shape"][0].as_u64().unwrap();
            let data = base64_decode(rows["data"].as_str().unwrap());
            let keep = data.len() / seq as usize * (seq as usize - 1);
            rows["data"] = base64_encode(&data[..keep]).into();
            rows["shape"][0] = (seq - 1).into();
        }
    }
    merged
}

#[test]
fn a_router_that_loses_the_last_row_is_caught() {
    let knobs = Knobs {
        wires: vec![Wire::ByHandle, Wire::Compact],
        // The decode's rows reach past the cut, so the last segment is its.
        completion: 2..=48,
        ..Knobs::default()
    };
    let caught = failures(knobs, 64, router_losing_the_last_row);
    assert_eq!(caught.len(), 64);
    for (case, message) in &caught {
        let n = case.request().rows();
        assert_eq!(
            message,
            &format!(
                "choice 0: rows cover positions [0, {}), expected [0, {n})",
                n - 1
            )
        );
    }
}

/// Broken: compact rows relabelled one position late (`start` + 1), the
/// bytes untouched: as many rows as the truth, equal to it row by row, at
/// the wrong positions.
fn router_shifting_compact_rows(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    for choice in merged["choices"].as_array_mut().unwrap() {
        let start = choice["routed_experts"]["start"].as_u64().unwrap();
        choice["routed_experts"]["start"] = (start + 1).into();
    }
    merged
}

#[test]
fn a_router_that_shifts_rows_by_one_position_is_caught() {
    let knobs = Knobs {
        wires: vec![Wire::Compact],
        ..Knobs::default()
    };
    let caught = failures(knobs, 32, router_shifting_compact_rows);
    assert_eq!(caught.len(), 32);
    for (case, message) in &caught {
        let n = case.request().rows();
        assert_eq!(
            message,
            &format!(
                "choice 0: rows cover positions [1, {}), expected [0, {n})",
                n + 1
            )
        );
    }
}

/// Broken: stitches with the prefill's last row left out, so the decode's
/// own row for the last prompt position (which the decode instance computed
/// without the prompt's routing) is delivered: the off-by-one of P/D
/// stitching, on compact rows.
fn router_cutting_one_early(prefill: &Value, decode: Value) -> Value {
    let mut prefill = prefill.clone();
    let rows = prefill["choices"][0]["routed_experts"]
        .as_object_mut()
        .unwrap();
    let seq = rows["shape"][0].as_u64().unwrap();
    let data = base64_decode(rows["data"].as_str().unwrap());
    let keep = data.len() / seq as usize * (seq as usize - 1);
    rows["data"] = base64_encode(&data[..keep]).into();
    rows["shape"][0] = (seq - 1).into();
    router(&prefill, decode)
}

#[test]
fn a_router_that_cuts_one_position_early_is_caught_at_the_last_prompt_position() {
    let knobs = Knobs {
        wires: vec![Wire::Compact],
        ..Knobs::default()
    };
    let caught = failures(knobs, 32, router_cutting_one_early);
    assert_eq!(caught.len(), 32);
    for (case, message) in &caught {
        let last = case.request().prompt_len() - 1;
        assert_eq!(
            message,
            &format!(
                "choice 0, position {last} (from inline routed_experts (compact)): \
                 row differs from the truth; expected the prefill's row (a prompt position)"
            )
        );
    }
}

/// Broken: drops the `sampling_mask` items (a path that keeps only the
/// fields it knows).
fn router_dropping_sampling_masks(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    for choice in merged["choices"].as_array_mut().unwrap() {
        if let Some(payload) = choice.get_mut("payload").and_then(Value::as_array_mut) {
            payload.retain(|s| s["field"] != "sampling_mask");
        }
    }
    merged
}

#[test]
fn a_router_that_drops_other_payload_items_is_caught() {
    let knobs = Knobs {
        wires: vec![Wire::ByHandle],
        hostile: false,
        ..Knobs::default()
    };
    let caught = failures(knobs, 32, router_dropping_sampling_masks);
    assert_eq!(
        caught.len(),
        32,
        "every simulated choice has a sampling mask"
    );
    for (_, message) in &caught {
        assert_eq!(
            message,
            "choice 0: a payload item that is not stitched was lost, added or changed"
        );
    }
}

/// Broken: lists the decode's segments newest first (a path that appends
/// each preemption's segment at the front). The rows are all there and a
/// reader that sorts by `pos` would get them right; a trainer that
/// concatenates in payload order would not.
fn router_reversing_decode_segments(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    let prefix = routed_segments(&prefill["choices"][0]).len();
    for choice in merged["choices"].as_array_mut().unwrap() {
        let own: Vec<usize> = routed_segments(choice)
            .into_iter()
            .skip(prefix)
            .map(|(j, _)| j)
            .collect();
        let segments: Vec<Value> = own.iter().map(|&j| choice["payload"][j].clone()).collect();
        for (&j, segment) in own.iter().zip(segments.into_iter().rev()) {
            choice["payload"][j] = segment;
        }
    }
    merged
}

#[test]
fn a_router_that_lists_segments_out_of_position_order_is_caught() {
    let knobs = Knobs {
        wires: vec![Wire::ByHandle],
        ..Knobs::default()
    };
    let mut runner = TestRunner::deterministic();
    let strategy = cases(knobs);
    let mut reversed = 0;
    for _ in 0..64 {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        let merged = router_reversing_decode_segments(&case.prefill, case.decode.clone());
        let correct = router(&case.prefill, case.decode.clone());
        let changed: Vec<usize> = (0..case.request().choices())
            .filter(|&c| merged["choices"][c] != correct["choices"][c])
            .collect();
        let result = verify_stitched(&case, &merged);
        let Some(&c) = changed.first() else {
            assert_eq!(result, Ok(()), "nothing was reversed");
            continue;
        };
        reversed += 1;
        let message = result.expect_err("reversed segments").to_string();
        // Newest first: the decode's last segment, which ends where all rows
        // end, then the one before it, the first to go back.
        let prefix = routed_segments(&case.prefill["choices"][0]).len();
        let (_, newest) = routed_segments(&merged["choices"][c])[prefix];
        let (j, back) = routed_segments(&merged["choices"][c])[prefix + 1];
        assert_eq!(
            message,
            format!(
                "choice {c}: payload[{j}] (pos {}) comes after a segment starting at {}: segments out of \
                 position order, so re-emitted rows would lose to stale ones",
                back["pos"], newest["pos"]
            )
        );
    }
    assert!(
        reversed >= 32,
        "only {reversed} of 64 cases had two decode segments"
    );
}

/// Not broken: adds an empty `routed_experts` segment at the end of each
/// payload, at position 0. It holds no row, so a trainer reading in payload
/// order reads the same rows: `verify_stitched` must not flag it as out of
/// order.
fn router_adding_an_empty_segment(prefill: &Value, decode: Value) -> Value {
    let mut merged = router(prefill, decode);
    for choice in merged["choices"].as_array_mut().unwrap() {
        let mut empty = routed_segments(choice)[0].1.clone();
        empty["pos"] = 0.into();
        empty["rows"] = 0.into();
        choice["payload"].as_array_mut().unwrap().push(empty);
    }
    merged
}

#[test]
fn an_empty_segment_out_of_order_is_not_flagged() {
    let knobs = Knobs {
        wires: vec![Wire::ByHandle],
        ..Knobs::default()
    };
    assert!(failures(knobs, 32, router_adding_an_empty_segment).is_empty());
}

/// What a failure names for the wrong row: the choice's `routed_experts`
/// segment holding it, found here by scanning the merged payload.
fn segment_holding(choice: &Value, x: u64) -> String {
    let (j, s) = routed_segments(choice)
        .into_iter()
        .find(|(_, s)| {
            let pos = s["pos"].as_u64().unwrap();
            (pos..pos + s["rows"].as_u64().unwrap()).contains(&x)
        })
        .expect("a segment holds every position");
    format!(
        "payload[{j}] (file {}, offset {}, pos {}, rows {})",
        s["file"], s["offset"], s["pos"], s["rows"]
    )
}

#[test]
fn a_wrong_row_names_the_segment_or_form_it_came_from() {
    let knobs = Knobs {
        choices: 2..=4,
        completion: 2..=48,
        ..vllm()
    };
    let mut runner = TestRunner::deterministic();
    let strategy = cases(knobs);
    let mut seen = [0; 3];
    for _ in 0..64 {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        let merged = router_copying_choice_0(&case.prefill, case.decode.clone());
        let message = verify_stitched(&case, &merged).unwrap_err().to_string();
        let position = case.request().prompt_len();
        let from = match case.wire {
            Wire::ByHandle => segment_holding(&merged["choices"][1], position),
            Wire::Compact => "inline routed_experts (compact)".to_owned(),
            Wire::Npy => "inline routed_experts (npy)".to_owned(),
            other => panic!("{other:?} is not vLLM's"),
        };
        assert_eq!(
            message,
            format!(
                "choice 1, position {position} (from {from}): \
                 row differs from the truth; expected the decode's row (a completion position)"
            )
        );
        seen[Engine::Vllm
            .wires()
            .iter()
            .position(|&w| w == case.wire)
            .unwrap()] += 1;
    }
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The hostile extras a correct path must carry through: present on every
/// decode choice when asked for (a trace key; by handle, a malformed
/// non-stitched item at the start, in the middle or at the end of the
/// payload, and a trailing null), and absent otherwise.
#[test]
fn hostile_extras_sit_everywhere_in_the_payload_and_only_when_asked_for() {
    let mut runner = TestRunner::deterministic();
    let mut places = [0; 3]; // first, between, last (before the null)
    for hostile in [true, false] {
        let strategy = cases(Knobs { hostile, ..vllm() });
        for _ in 0..64 {
            let case = strategy.new_tree(&mut runner).unwrap().current();
            for (i, choice) in case.decode["choices"]
                .as_array()
                .unwrap()
                .iter()
                .enumerate()
            {
                let trace = choice.get("x-router-trace");
                assert_eq!(
                    trace,
                    hostile.then(|| serde_json::json!({"hop": i})).as_ref()
                );
                let Some(payload) = choice["payload"].as_array() else {
                    assert_ne!(case.wire, Wire::ByHandle);
                    continue;
                };
                let at = payload
                    .iter()
                    .position(|x| x["field"] == "logprobs_by_handle");
                assert_eq!(at.is_some(), hostile);
                assert_eq!(payload.last() == Some(&Value::Null), hostile);
                if let Some(at) = at {
                    let place = if at == 0 {
                        0
                    } else if at + 2 == payload.len() {
                        2
                    } else {
                        1
                    };
                    places[place] += 1;
                }
            }
        }
    }
    assert!(places.iter().all(|&n| n > 0), "{places:?}");
}

/// `uint16` cases use expert ids above 255, the reason rows are that wide.
#[test]
fn uint16_cases_route_to_experts_above_255() {
    let knobs = Knobs {
        dtypes: vec![pd_stitch::algebra::Dtype::Uint16],
        ..vllm()
    };
    let mut runner = TestRunner::deterministic();
    let strategy = cases(knobs);
    let wide = (0..16).all(|_| {
        let case = strategy.new_tree(&mut runner).unwrap().current();
        let truth = case.truth(0);
        truth.chunks(2).any(|e| e[1] > 0)
    });
    assert!(wide, "a uint16 case with every id below 256");
}

// ----------------------------------------------------------------------------
// SGLang (SPEC section 10, V5-V6).
// ----------------------------------------------------------------------------

mod sglang_routers {
    use super::*;
    use base64::engine::general_purpose::STANDARD;
    use base64::Engine as _;
    use pd_stitch::algebra::{Convention, Dtype};
    use pd_stitch::sglang::Api;
    use pd_stitch::sim::{Model, Request};

    /// What V5 and V6 draw: SGLang's forms, prompts of 1-48 tokens, 1-32
    /// generated, batches of up to 4, prefix omission.
    fn sglang_knobs() -> Knobs {
        Knobs {
            prompt: 1..=48,
            completion: 1..=32,
            omit_prefix: true,
            ..Knobs::engine(Engine::Sglang)
        }
    }

    /// An SGLang output of `prompt` tokens, `completion` generated, asked
    /// from `start`, its decode in `convention`, of a model of rows of 2 x
    /// 4 ids among 64 seeded with `seed`.
    fn output(
        prompt: u64,
        completion: u64,
        start: u64,
        convention: Convention,
        seed: u64,
    ) -> Request {
        let model = Model {
            seed,
            layers: 2,
            top_k: 4,
            experts: 64,
        };
        let tokens = (0..prompt).map(|t| (t * 37 + seed) % 512).collect();
        Request::new(0, model, Dtype::Int32, tokens, 1, completion)
            .starting_at(start)
            .with_convention(convention)
    }

    const GENERATE: Wire = Wire::Sglang(Api::Generate);

    /// A faithful SGLang router: the crate's merge with the model's shape.
    fn router(case: &Case) -> Value {
        let (layers, top_k) = case.row_shape();
        let stitcher = Stitcher::new().row_shape(layers, top_k);
        let mut merged = case.decode.clone();
        stitcher
            .merge(&case.prefill, &mut merged, Stitch::ForPd)
            .expect("generated pairs stitch");
        merged
    }

    /// Miles' splice (F7): the prefill's bytes over the head of the
    /// decode's, `prefill ++ decode[len(prefill)..]`, in every slot.
    fn head_splice(case: &Case) -> Value {
        let splice = |p: &Value, d: &mut Value| {
            let (Some(p), Some(ds)) = (p.as_str(), d.as_str()) else {
                return;
            };
            let p = STANDARD.decode(p).unwrap();
            let dd = STANDARD.decode(ds).unwrap();
            let mut out = p.clone();
            out.extend_from_slice(dd.get(p.len()..).unwrap_or_default());
            *d = Value::String(STANDARD.encode(out));
        };
        let mut merged = case.decode.clone();
        let items: Vec<usize> = if case.batch {
            (0..case.requests.len()).collect()
        } else {
            vec![usize::MAX]
        };
        for i in items {
            let (p, d) = if i == usize::MAX {
                (&case.prefill, &mut merged)
            } else {
                (&case.prefill[i], &mut merged[i])
            };
            for path in [
                ["meta_info", "routed_experts"],
                ["sglext", "routed_experts"],
            ] {
                if let Some(slot) = d.pointer_mut(&format!("/{}/{}", path[0], path[1])) {
                    splice(&p[path[0]][path[1]], slot);
                }
            }
            if let Some(slot) = d.pointer_mut("/choices/0/sgl_ext/routed_experts") {
                splice(&p["choices"][0]["sgl_ext"]["routed_experts"], slot);
            }
        }
        merged
    }

    proptest! {
        #![proptest_config(crate::support::config("router_testing_sglang"))]

        /// V5: a faithful SGLang router passes on every generated case;
        /// the unmerged decode fails wherever the decode's rows are not
        /// already the truth.
        #[test]
        fn a_faithful_sglang_router_passes(case in cases(sglang_knobs())) {
            verify_stitched(&case, &router(&case))?;
            // Right as it is only when every output's rows are the
            // colocated ones: when the prefill holds no row, or when a
            // full-length decode's prompt rows (zeros, or rows earlier
            // requests left in its pool) are the truth by chance, which
            // a row of one id among 256 can be. The decode and the
            // colocated answer differ in nothing else.
            let rows = |v: &Value| -> Vec<Value> {
                let items = match v {
                    Value::Array(items) => items.clone(),
                    one => vec![one.clone()],
                };
                items.iter().map(|item| {
                    ["/meta_info/routed_experts", "/sglext/routed_experts",
                     "/choices/0/sgl_ext/routed_experts"]
                        .iter()
                        .find_map(|at| item.pointer(at).cloned())
                        .unwrap_or(Value::Null)
                }).collect()
            };
            let untouched_is_right = rows(&case.decode) == rows(&case.colocated);
            prop_assert_eq!(verify_stitched(&case, &case.decode).is_ok(), untouched_is_right);
        }

        /// V6: Miles' head splice is right for a full-length decode and
        /// wrong for a suffix-only one whenever the prefill holds a row and
        /// the decode one after the prompt: the completion's first rows are
        /// lost, which `verify_stitched` reports as the positions covered.
        #[test]
        fn the_head_splice_is_caught_on_suffix_only_decodes(case in cases(sglang_knobs())) {
            let spliced = head_splice(&case);
            let broken = case.requests.iter().position(|d| d.convention == Convention::SuffixOnly
                && d.start < d.prompt_len() && d.completion_len() > 1);
            match (broken, verify_stitched(&case, &spliced)) {
                (None, got) => prop_assert!(got.is_ok(), "{:?}", got),
                (Some(i), Err(m)) => {
                    // The first wrong output is a suffix-only one with rows on both sides.
                    let d = &case.requests[m.choice];
                    prop_assert!(m.choice <= i);
                    prop_assert_eq!(d.convention, Convention::SuffixOnly);
                    prop_assert!(m.message.contains("rows cover positions")
                        || m.message.contains("row differs"), "{}", m);
                }
                (Some(i), Ok(())) => prop_assert!(false, "output {} spliced wrongly but passed", i),
            }
        }
    }

    /// A wrong row is blamed on the side that should have written it: a
    /// prompt position on the prefill, the prompt's end and after on the
    /// decode. A merged answer of the wrong shape (an output dropped from
    /// a batch, an object for a batch, an array for one output) is named
    /// as such.
    #[test]
    fn sglang_mismatches_name_the_side_and_the_shape() {
        let draw = output(6, 5, 0, Convention::FullLength, 4);
        let case = Case::new(GENERATE, vec![draw.clone()], false);
        for (x, side) in [
            (0, "the prefill's row (a prompt position)"),
            (5, "the prefill's row (a prompt position)"),
            (6, "the decode's row (a position after the prompt)"),
            (9, "the decode's row (a position after the prompt)"),
        ] {
            let mut merged = router(&case);
            let rows = merged["meta_info"]["routed_experts"].as_str().unwrap();
            let mut bytes = STANDARD.decode(rows).unwrap();
            bytes[8 * 4 * x] ^= 1;
            merged["meta_info"]["routed_experts"] = Value::String(STANDARD.encode(bytes));
            assert_eq!(
                verify_stitched(&case, &merged).unwrap_err().to_string(),
                format!("choice 0, position {x} (from meta_info.routed_experts): row differs from the truth; expected {side}")
            );
        }
        let wrong_shape =
            |case: &Case, merged: &Value| verify_stitched(case, merged).unwrap_err().to_string();
        let batch = Case::new(GENERATE, vec![draw.clone(), draw], true);
        let mut merged = router(&batch);
        verify_stitched(&batch, &merged).unwrap();
        let first = merged[0].clone();
        merged.as_array_mut().unwrap().pop();
        assert_eq!(
            wrong_shape(&batch, &merged),
            "choice 0: expected a batch array of 2 outputs"
        );
        assert_eq!(
            wrong_shape(&batch, &first),
            "choice 0: expected a batch array of 2 outputs"
        );
        assert_eq!(
            wrong_shape(&case, &Value::Array(vec![router(&case)])),
            "choice 0: expected a response object"
        );
    }

    /// The cases' full-length decodes answer their prompt positions as
    /// SGLang's do (SPEC F10): all zeros for an odd seed (a fresh server),
    /// for an even one rows that earlier requests left (valid rows, each
    /// layer's experts distinct and in range, not the position's truth) or
    /// zeros where no request wrote; their own rows are the truth. So
    /// `verify_stitched` fails each unmerged decode, on the rows check for
    /// zeros and on the comparison for stale rows. (Rows of 2 x 4 of 64
    /// experts: a stale row is the truth with a chance below 10^-11.)
    #[test]
    fn full_length_decodes_answer_zeros_or_stale_prompt_rows() {
        let (mut zeros, mut stale) = (0, 0);
        for seed in 0..40u64 {
            let draw = output(9, 4, 1, Convention::FullLength, seed);
            let case = Case::new(GENERATE, vec![draw.clone()], false);
            let rows = STANDARD
                .decode(case.decode["meta_info"]["routed_experts"].as_str().unwrap())
                .unwrap();
            let ids: Vec<i32> = rows
                .chunks_exact(4)
                .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
                .collect();
            let rows: Vec<&[i32]> = ids.chunks(8).collect();
            // [1, 12): 8 prompt rows, then 3 of the decode's own.
            assert_eq!(rows.len(), 11, "seed {seed}");
            for (k, row) in rows.iter().enumerate() {
                let x = 1 + k as u64;
                let truth: Vec<i32> = draw
                    .true_ids(x, draw.prefixes(0)[x as usize])
                    .into_iter()
                    .map(|id| id as i32)
                    .collect();
                if x >= 9 {
                    assert_eq!(*row, &truth[..], "seed {seed}: the decode's own row {x}");
                } else if row.iter().all(|&id| id == 0) {
                    zeros += 1;
                } else {
                    assert_eq!(seed % 2, 0, "a fresh server's row {x} is zeros: {row:?}");
                    assert_ne!(*row, &truth[..], "seed {seed}: row {x} is the truth");
                    for layer in row.chunks(4) {
                        let set: std::collections::BTreeSet<_> = layer.iter().collect();
                        assert_eq!(set.len(), 4, "seed {seed}: row {x} {row:?}");
                        assert!(layer.iter().all(|id| (0..64).contains(id)), "{row:?}");
                    }
                    stale += 1;
                }
            }
            assert!(verify_stitched(&case, &case.decode).is_err(), "seed {seed}");
        }
        // Every odd seed's 8 rows are zeros; the worn pools hold mostly rows.
        assert!(zeros >= 20 * 8, "{zeros} zeros, {stale} stale");
        assert!(stale > 20 * 8 / 2, "{zeros} zeros, {stale} stale");
    }

    /// `cases` draws what its knobs say: with prefix omission, every start
    /// in `[0, P]` occurs (prompts of 1-3 tokens: all 9 pairs); without
    /// it, rows always start at 0. Only `/generate` answers batch arrays,
    /// every draw of one kept, several draws always one; the OpenAI APIs
    /// answer one output.
    #[test]
    fn cases_follow_their_knobs() {
        let mut runner = TestRunner::deterministic();
        for omit in [true, false] {
            let knobs = Knobs {
                prompt: 1..=3,
                omit_prefix: omit,
                ..sglang_knobs()
            };
            let strategy = cases(knobs);
            let mut starts = std::collections::BTreeSet::new();
            let mut batches = std::collections::BTreeSet::new();
            let (mut generate, mut single) = (0, 0);
            for _ in 0..400 {
                let case = strategy.new_tree(&mut runner).unwrap().current();
                for d in &case.requests {
                    let p = d.prompt_len();
                    assert!(d.start <= p && (1..=3).contains(&p), "{d:?}");
                    starts.insert((p, d.start));
                }
                assert!(
                    (1..=4).contains(&case.requests.len()),
                    "{}",
                    case.requests.len()
                );
                if case.wire == GENERATE {
                    assert!(case.batch || case.requests.len() == 1, "{case:?}");
                    assert_eq!(case.prefill.is_array(), case.batch);
                    batches.insert((case.batch, case.requests.len()));
                    generate += 1;
                    single += usize::from(!case.batch);
                } else {
                    assert!(!case.batch && case.requests.len() == 1, "{case:?}");
                    assert!(case.prefill.is_object());
                }
            }
            let expected: std::collections::BTreeSet<(u64, u64)> = if omit {
                (1..=3).flat_map(|p| (0..=p).map(move |s| (p, s))).collect()
            } else {
                (1..=3).map(|p| (p, 0)).collect()
            };
            assert_eq!(starts, expected, "prefix omission {omit}");
            // A batch of each size, and a single output.
            let sizes: std::collections::BTreeSet<(bool, usize)> =
                [(false, 1), (true, 1), (true, 2), (true, 3), (true, 4)].into();
            assert_eq!(batches, sizes, "prefix omission {omit}");
            // Several draws are always a batch: a single output needs one
            // draw (1 in 4) and no batch (1 in 2), 1 in 8 of the cases.
            assert!(single * 4 < generate, "{single} of {generate}");
        }
    }

    /// The head splice on a suffix-only decode, with the message a router
    /// author reads.
    #[test]
    fn the_head_splice_message_names_the_positions() {
        let draw = output(6, 5, 0, Convention::SuffixOnly, 9);
        let case = Case::new(GENERATE, vec![draw], false);
        let err = verify_stitched(&case, &head_splice(&case)).unwrap_err();
        // 6 prompt rows, 4 after: the splice keeps 6 rows, [4, 10).
        assert_eq!(
            err.to_string(),
            "choice 0: rows cover positions [4, 10), expected [0, 10)"
        );
        verify_stitched(&case, &router(&case)).unwrap();
        // A wrong row is named with its position and slot.
        let mut merged = router(&case);
        let rows = merged["meta_info"]["routed_experts"].as_str().unwrap();
        let mut bytes = STANDARD.decode(rows).unwrap();
        bytes[8 * 4 * 7] ^= 1; // position 7, a decode row
        merged["meta_info"]["routed_experts"] = Value::String(STANDARD.encode(bytes));
        assert_eq!(
            verify_stitched(&case, &merged).unwrap_err().to_string(),
            "choice 0, position 7 (from meta_info.routed_experts): row differs from the truth; expected the decode's row (a position after the prompt)"
        );
    }
}
