//! Totality: no JSON makes an entry point panic, and a failed or empty merge
//! leaves the decode response as it was.

use crate::support::*;
use pd_stitch::Stitcher;
use proptest::prelude::*;
use serde_json::{json, Value};

/// A valid pair with one random subtree replaced by a random tree: most of
/// the structure is right, so the merge gets deep before it meets the damage.
fn damaged_pair() -> impl Strategy<Value = (Value, Value)> {
    (
        arbitrary_pair(false),
        json_tree(),
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(pair, junk, on_decode, at)| {
            let (mut prefill, mut decode) = (pair.prefill_json(), pair.decode_json());
        // Inline rows too, so that damage can land in them.
        prefill["choices"][0]["routed_experts"] = json!({"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 0});
        for choice in decode["choices"].as_array_mut().unwrap() {
            choice["routed_experts"] = json!({"data": "CQkJBwgJCgsM", "shape": [3, 1, 3], "start": 1, "dtype": "uint8"});
        }
            let target = if on_decode { &mut decode } else { &mut prefill };
            let mut paths = Vec::new();
            collect_paths(target, String::new(), &mut paths);
            let path = at.get(&paths).clone();
            if let Some(slot) = target.pointer_mut(&path) {
                *slot = junk;
            }
            (prefill, decode)
        })
}

fn collect_paths(v: &Value, here: String, out: &mut Vec<String>) {
    out.push(here.clone());
    match v {
        Value::Array(items) => items
            .iter()
            .enumerate()
            .for_each(|(i, x)| collect_paths(x, format!("{here}/{i}"), out)),
        Value::Object(map) => map
            .iter()
            .for_each(|(k, x)| collect_paths(x, format!("{here}/{k}"), out)),
        _ => {}
    }
}

type Entry = Box<dyn Fn(&Value, &mut Value) -> Result<bool, pd_stitch::Error>>;

/// Every public JSON entry point, free and on a `Stitcher`.
fn entry_points() -> Vec<(&'static str, Entry)> {
    let wide = Stitcher::new().field("routed_expert_weights");
    let (w1, w2, w3) = (wide.clone(), wide.clone(), wide);
    vec![
        (
            "merge_routed_payload_in_json",
            Box::new(pd_stitch::merge_routed_payload_in_json),
        ),
        (
            "merge_routed_experts_in_json",
            Box::new(pd_stitch::merge_routed_experts_in_json),
        ),
        (
            "merge_routed_experts_for_pd",
            Box::new(pd_stitch::merge_routed_experts_for_pd),
        ),
        (
            "Stitcher::merge_routed_payload_in_json",
            Box::new(move |p, d| w1.merge(p, d, pd_stitch::Stitch::ByHandle)),
        ),
        (
            "Stitcher::merge_routed_experts_in_json",
            Box::new(move |p, d| w2.merge(p, d, pd_stitch::Stitch::Inline)),
        ),
        (
            "Stitcher::merge_routed_experts_for_pd",
            Box::new(move |p, d| w3.merge(p, d, pd_stitch::Stitch::ForPd)),
        ),
    ]
}

fn check_total(prefill: &Value, decode: &Value) -> Result<(), TestCaseError> {
    let _ = pd_stitch::prefill_has_routed_experts(prefill);
    let _ = Stitcher::new()
        .field("routed_expert_weights")
        .prefill_has_routed_experts(prefill);
    for (name, merge) in entry_points() {
        let mut after = decode.clone();
        match merge(prefill, &mut after) {
            Ok(true) => {}
            Ok(false) | Err(_) => prop_assert_eq!(&after, decode, "{}", name),
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(config("totality"))]

    #[test]
    fn arbitrary_json_never_panics(prefill in json_tree(), decode in json_tree()) {
        check_total(&prefill, &decode)?;
    }

    #[test]
    fn damaged_pairs_never_panic((prefill, decode) in damaged_pair()) {
        check_total(&prefill, &decode)?;
    }

    /// `compare` returns a report or an error on any two JSON trees, and on
    /// a valid pair and its damaged merge, whatever the store holds.
    #[cfg(feature = "verify")]
    #[test]
    fn compare_never_panics(a in json_tree(), b in json_tree(), (prefill, decode) in damaged_pair()) {
        use pd_stitch::compare::{compare, Options};
        let store = pd_stitch::gather::Store::memory();
        let _ = compare(&a, &store, &b, &store, &Options::default());
        let mut merged = decode.clone();
        let _ = pd_stitch::merge_routed_experts_for_pd(&prefill, &mut merged);
        for (x, y) in [(&prefill, &decode), (&merged, &decode), (&a, &merged)] {
            let _ = compare(x, &store, y, &store, &Options::default());
        }
    }
}
