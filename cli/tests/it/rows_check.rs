//! The rows check (`gather::check_rows`) of each kind on its committed
//! fixture (`tests/fixtures/rows/` of the repository), by the library and by
//! `pd-stitch check` and `pd-stitch compare`. Its property tests against a
//! naive reader are the library's (`tests/it/rows_check.rs`).

use std::process::Command;

use pd_stitch::gather::{check_response_rows, RowsCheck, Store};
use serde_json::{json, Value};

fn fixture(name: &str) -> String {
    format!("{}/tests/fixtures/rows/{name}", crate::REPO)
}

fn fixture_json(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(fixture(name)).unwrap()).unwrap()
}

fn pd_stitch(args: &[&str]) -> (Option<i32>, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
        .current_dir(crate::REPO)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// Each kind on its fixture, by the library and by `pd-stitch check`
/// (exit status 1, the finding as a problem line); the clean fixture passes.
#[test]
fn each_kind_is_found_on_its_fixture() {
    let cases = [
        ("clean.json", None, vec![]),
        (
            "duplicate.json",
            None,
            vec!["choice 0, position 1, layer 1: expert 7 twice in [7, 7]"],
        ),
        (
            "out_of_range.json",
            Some("8"),
            vec!["choice 0, position 2, layer 0: expert 9 in [2, 9] is not below the model's 8 experts"],
        ),
        (
            "zero_row.json",
            None,
            vec!["choice 0, position 0: all 2 x 2 ids are 0 (a row nobody wrote: top_k > 1 never picks expert 0 twice)"],
        ),
        (
            "negative.json",
            None,
            vec!["choice 0, position 1, layer 0: negative expert id -1 in [-1, 6]"],
        ),
    ];
    for (name, experts, expected) in cases {
        let check = RowsCheck::experts(experts.map(|e| e.parse().unwrap()));
        let report = check_response_rows(&fixture_json(name), &Store::memory(), None, check);
        let found: Vec<String> = report.findings.iter().map(ToString::to_string).collect();
        assert_eq!(found, expected, "{name}");
        assert_eq!(report.rows, 3, "{name}");
        let path = fixture(name);
        let mut args = vec!["check", path.as_str()];
        if let Some(n) = experts {
            args.extend(["--experts", n]);
        }
        let (code, out, err) = pd_stitch(&args);
        assert_eq!(
            code,
            Some(if expected.is_empty() { 0 } else { 1 }),
            "{name}: {out}{err}"
        );
        let problems: Vec<&str> = out
            .lines()
            .filter_map(|l| l.strip_prefix("problem: rows: "))
            .collect();
        assert_eq!(problems, expected, "{name}: {out}");
    }
    // Without the expert count the id 9 is not known to be wrong; the
    // config's num_experts (8) gives it.
    let path = fixture("out_of_range.json");
    assert_eq!(pd_stitch(&["check", &path]).0, Some(0));
    let config = fixture("config.json");
    let (code, out, _) = pd_stitch(&["check", &path, "--config", &config]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("expert 9 in [2, 9] is not below the model's 8 experts"),
        "{out}"
    );
    // A config without an expert count is an error that says so.
    let (code, _, err) = pd_stitch(&["check", &path, "--config", &fixture("clean.json")]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("no num_experts, n_routed_experts or num_local_experts"),
        "{err}"
    );
}

/// `compare` runs the check on each side: the same rows on both sides are
/// equal but a row of zeros is still wrong (exit status 1), named with its
/// side, in the text and in the JSON.
#[test]
fn compare_checks_the_rows_of_each_side() {
    let (clean, zero) = (fixture("clean.json"), fixture("zero_row.json"));
    let (code, out, _) = pd_stitch(&["compare", &clean, &clean]);
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains("rows check"), "{out}");
    let (code, out, _) = pd_stitch(&["compare", &zero, &zero]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("all 3 compared rows equal"), "{out}");
    assert!(out.contains("rows check of A: 1 zero-row\n"), "{out}");
    assert!(out.contains("rows check of B: 1 zero-row\n"), "{out}");
    assert!(
        out.contains("problem: B: rows: choice 0, position 0: all 2 x 2 ids are 0"),
        "{out}"
    );
    let (code, out, _) = pd_stitch(&["compare", &clean, &zero, "--json"]);
    assert_eq!(code, Some(1));
    let report: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["all_equal"], false);
    assert_eq!(report["rows_check"]["a"]["counts"]["zero-row"], 0);
    assert_eq!(report["rows_check"]["b"]["counts"]["zero-row"], 1);
    assert_eq!(
        report["rows_check"]["b"]["findings"][0],
        json!({"choice": 0, "position": 0, "layer": null, "kind": "zero-row",
               "id": null, "experts": null, "ids": []})
    );
}
