//! How a router crate tests its response path with `pd_stitch::testing`: a
//! faithful path passes, and paths broken in the ways routers break are caught
//! with a message that names the choice, the position and the segment.
#![cfg(feature = "testing")]

use pd_stitch::sim::Mode;
use pd_stitch::testing::{cases, fixture, verify_stitched, Case, Knobs, FIXTURES};
use pd_stitch::Error;
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
    let routed = |v: &Value| v["field"] == "routed_experts";
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

proptest! {
    #![proptest_config(ProptestConfig {
        failure_persistence: Some(Box::new(proptest::test_runner::FileFailurePersistence::Direct("proptest-regressions/router_testing.txt"))),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_faithful_router_passes(case in cases(Knobs::default())) {
        let merged = router(&case.prefill, case.decode.clone());
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
        modes: vec![Mode::ByHandle],
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
        ..Knobs::default()
    };
    let caught = failures(knobs, 64, router_copying_choice_0);
    // Every case has a second choice whose completion rows differ from choice 0's.
    assert_eq!(caught.len(), 64);
    for (case, message) in &caught {
        let position = case.request().prompt; // the first completion position with a row of its own
        assert!(
            message.starts_with(&format!("choice 1, position {position} (from ")),
            "{message}"
        );
        assert!(
            message.contains("expected the decode's row (a completion position)"),
            "{message}"
        );
        if case.mode == Mode::ByHandle {
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
            "missing-prefill-rows" => assert!(
                matches!(result, Err(Error::MissingPrefillField { .. })),
                "{result:?}"
            ),
            "bad-rows" => assert!(matches!(result, Err(Error::Integer { .. })), "{result:?}"),
            "gap" => assert!(matches!(result, Err(Error::Coverage { .. })), "{result:?}"),
            other => panic!("untested fixture {other}"),
        }
        assert!(!f.about.is_empty());
    }
    assert!(fixture("nope").is_none());
}
