//! The `pd-stitch` command: each subcommand on the committed examples, its
//! errors (one line on stderr, exit status 1, nothing on stdout), and --help.
//! It runs from the repository's root ([`crate::REPO`]), where the README
//! runs it, so the examples' paths are the README's.

use crate::support;

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

fn pd_stitch(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
        .current_dir(crate::REPO)
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

fn read(path: &str) -> Value {
    serde_json::from_slice(&std::fs::read(crate::repo(path)).unwrap()).unwrap()
}

/// A failure: exit status 1, nothing on stdout, one line on stderr that says
/// `error: ` and contains `needle`.
fn assert_fails(out: &Output, needle: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(out.stdout.is_empty(), "stdout: {}", stdout(out));
    let err = stderr(out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: ") && err.contains(needle), "{err}");
}

#[test]
fn merge_equals_the_library_on_every_committed_example() {
    for (dir, fields) in [
        ("examples/seed", vec![]),
        ("examples/inline", vec![]),
        ("examples/seed", vec!["--field", "sampling_mask"]),
    ] {
        let (p, d) = (format!("{dir}/prefill.json"), format!("{dir}/decode.json"));
        let mut args = vec!["merge", &p, &d];
        args.extend(&fields);
        let out = pd_stitch(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        let mut stitcher = pd_stitch::Stitcher::new();
        for f in fields.iter().skip(1).step_by(2) {
            stitcher = stitcher.field(*f);
        }
        let mut expected = read(&d);
        stitcher
            .merge(&read(&p), &mut expected, pd_stitch::Stitch::ForPd)
            .unwrap();
        let got: Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(got, expected, "{dir} {fields:?}");
        // Byte for byte what the bytes path gives.
        let mut text = std::fs::read(crate::repo(&d)).unwrap();
        stitcher
            .merge_bytes(
                &std::fs::read(crate::repo(&p)).unwrap(),
                &mut text,
                pd_stitch::Stitch::ForPd,
            )
            .unwrap();
        assert_eq!(out.stdout, text, "{dir} {fields:?}");
    }
}

#[test]
fn merge_changes_only_the_stitched_values() {
    let dir = std::env::temp_dir().join(format!("pd-stitch-cli-bytes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let decode = dir.join("decode.json");
    let original = std::fs::read_to_string(crate::repo("examples/seed/decode.json")).unwrap();
    // Spellings a parse-and-serialize round trip would change.
    let canary = r#"{"n": 1.50E+2, "big": 18446744073709551616, "s": "caf\u00e9\/"}"#;
    let text = original.replacen('{', &format!("{{\n  \"canary\": {canary},"), 1);
    std::fs::write(&decode, &text).unwrap();
    let out = pd_stitch(&[
        "merge",
        "examples/seed/prefill.json",
        decode.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let merged = stdout(&out);
    assert!(
        merged.starts_with(&format!("{{\n  \"canary\": {canary},")),
        "{merged}"
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn merge_writes_to_a_file_and_leaves_unstitched_responses_as_they_are() {
    let out_path = std::env::temp_dir().join(format!("pd-stitch-cli-{}.json", std::process::id()));
    let out_arg = out_path.to_str().unwrap();
    let out = pd_stitch(&[
        "merge",
        "examples/broken/gap.json",
        "examples/broken/gap.json",
        "-o",
        out_arg,
        "--pretty",
    ]);
    assert!(
        out.status.success() && out.stdout.is_empty(),
        "{}",
        stderr(&out)
    );
    // Prefill and decode alike: the merge stitches, so read it back and compare with the library.
    let mut expected = read("examples/broken/gap.json");
    pd_stitch::merge_routed_experts_for_pd(&read("examples/broken/gap.json"), &mut expected)
        .unwrap();
    assert_eq!(read(out_arg), expected);
    // Nothing to stitch: the decode comes out unchanged.
    let empty =
        std::env::temp_dir().join(format!("pd-stitch-cli-empty-{}.json", std::process::id()));
    std::fs::write(
        &empty,
        r#"{"choices": [{"text": "hi", "payload": [{"field": "sampling_mask"}]}]}"#,
    )
    .unwrap();
    let out = pd_stitch(&["merge", empty.to_str().unwrap(), empty.to_str().unwrap()]);
    assert!(out.status.success());
    assert_eq!(
        serde_json::from_str::<Value>(&stdout(&out)).unwrap(),
        read(empty.to_str().unwrap())
    );
    std::fs::remove_file(out_path).unwrap();
    std::fs::remove_file(empty).unwrap();
}

#[test]
fn merge_errors_are_one_line_and_exit_1() {
    // Inline prefill rows, decode rows by handle only: the by-handle rows have no prefill rows.
    assert_fails(
        &pd_stitch(&[
            "merge",
            "examples/inline/prefill.json",
            "examples/seed/decode.json",
        ]),
        "decode choices[0].payload[0]: the decode has rows",
    );
    assert_fails(
        &pd_stitch(&["merge", "examples/seed/prefill.json", "examples/inline/decode.json"]),
        "decode choices[0].routed_experts: the decode has rows of field \"routed_experts\" but prefill choices[0] has none",
    );
    assert_fails(
        &pd_stitch(&["merge", "no-such.json", "examples/seed/decode.json"]),
        "no-such.json",
    );
    assert_fails(
        &pd_stitch(&["merge", "examples/seed/p.bin", "examples/seed/decode.json"]),
        "not JSON",
    );
    // Decode rows by handle without prefill rows.
    assert_fails(
        &pd_stitch(&["merge", "examples/inline/prefill.json", "examples/broken/gap.json"]),
        "decode choices[0].payload[0]: the decode has rows of field \"routed_experts\" but prefill choices[0] has none",
    );
}

#[test]
fn check_reports_a_good_layout_and_each_kind_of_problem() {
    let out = pd_stitch(&[
        "check",
        "examples/seed/prefill.json",
        "--root",
        "examples/seed",
    ]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(stdout(&out).contains("routed_experts"), "{}", stdout(&out));
    // An overlap is what the trainer reads right (the later segment wins):
    // reported in the gaps/overlaps column, not a problem.
    let overlap = pd_stitch(&[
        "check",
        "examples/broken/overlap.json",
        "--root",
        "examples/broken",
    ]);
    assert!(overlap.status.success(), "{}", stdout(&overlap));
    assert!(stdout(&overlap).contains("0/1"), "{}", stdout(&overlap));
    let cases = [
        ("gap.json", "choices[0] routed_experts: gaps at [3, 4)"),
        (
            "short.json",
            "rows.bin is 96 bytes long, but the segment needs bytes up to 112",
        ),
        ("missing.json", "no-such-file.bin"),
    ];
    for (file, message) in cases {
        let out = pd_stitch(&[
            "check",
            &format!("examples/broken/{file}"),
            "--root",
            "examples/broken",
        ]);
        assert_eq!(out.status.code(), Some(1), "{file}");
        let text = stdout(&out);
        assert!(
            text.lines()
                .any(|l| l.starts_with("problem: ") && l.contains(message)),
            "{file}: {text}"
        );
    }
    let inline = pd_stitch(&["check", "examples/inline/decode.json"]);
    assert!(inline.status.success());
    assert!(
        stdout(&inline).contains("routed_experts (inline compact)"),
        "{}",
        stdout(&inline)
    );
}

/// The rows of the seed example are known: element k of position x is
/// 100 x + k (uint16), so the merged response must gather to exactly that.
#[test]
fn gather_reads_back_the_true_rows_of_the_merged_seed_example() {
    let dir = std::env::temp_dir().join(format!("pd-stitch-gather-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let merged = dir.join("merged.json");
    let out = pd_stitch(&[
        "merge",
        "examples/seed/prefill.json",
        "examples/seed/decode.json",
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected: Vec<u8> = (0..5u16)
        .flat_map(|x| (0..8u16).flat_map(move |k| (100 * x + k).to_le_bytes()))
        .collect();
    for choice in ["0", "1"] {
        let npy = dir.join(format!("c{choice}.npy"));
        let out = pd_stitch(&[
            "gather",
            merged.to_str().unwrap(),
            "--choice",
            choice,
            "--root",
            "examples/seed",
            "--npy",
            npy.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "{}", stderr(&out));
        let file = std::fs::read(&npy).unwrap();
        assert_eq!(
            &file[file.len() - expected.len()..],
            &expected[..],
            "choice {choice}"
        );
        assert!(String::from_utf8_lossy(&file[..128])
            .contains("'descr': '<u2', 'fortran_order': False, 'shape': (5, 2, 4)"));
    }
    let summary = stdout(&pd_stitch(&[
        "gather",
        merged.to_str().unwrap(),
        "--choice",
        "0",
        "--root",
        "examples/seed",
    ]));
    assert!(
        summary.contains("positions  [0, 5)")
            && summary.contains("shape      [5, 2, 4]")
            && summary.contains("checksum"),
        "{summary}"
    );
    // The inline form gathers to the same rows.
    let out = pd_stitch(&[
        "merge",
        "examples/inline/prefill.json",
        "examples/inline/decode.json",
        "-o",
        merged.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let inline = stdout(&pd_stitch(&[
        "gather",
        merged.to_str().unwrap(),
        "--choice",
        "0",
    ]));
    assert_eq!(
        inline.lines().find(|l| l.starts_with("checksum")),
        summary.lines().find(|l| l.starts_with("checksum"))
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn gather_fails_clearly_on_gaps_overlaps_short_and_missing_files() {
    let cases = [
        (
            "gap.json",
            "response choices[0] routed_experts: positions [3, 4) are covered by no segment",
        ),
        (
            "short.json",
            "96 bytes long, but response choices[0].payload[1] needs bytes up to 112",
        ),
        ("missing.json", "no-such-file.bin"),
    ];
    for (file, message) in cases {
        assert_fails(
            &pd_stitch(&[
                "gather",
                &format!("examples/broken/{file}"),
                "--choice",
                "0",
                "--root",
                "examples/broken",
            ]),
            message,
        );
    }
    assert_fails(
        &pd_stitch(&["gather", "examples/seed/decode.json", "--choice", "7"]),
        "response choices[7]: must be an object, got nothing",
    );
    assert_fails(
        &pd_stitch(&[
            "gather",
            "examples/seed/decode.json",
            "--choice",
            "0",
            "--field",
            "nope",
        ]),
        "no rows of field \"nope\"",
    );
}

/// Metadata claims nothing about memory: a segment of 2^40 rows in a 48-byte
/// file is refused after a look at the file's length.
#[test]
fn gather_refuses_claims_larger_than_the_file() {
    let response = std::env::temp_dir().join(format!("pd-stitch-huge-{}.json", std::process::id()));
    std::fs::write(
        &response,
        r#"{"choices": [{"payload": [{"field": "routed_experts", "file": "p.bin", "offset": 0,
            "pos": 0, "rows": 1099511627776, "dtype": "uint16", "shape": [2, 4]}]}]}"#,
    )
    .unwrap();
    let started = std::time::Instant::now();
    let out = pd_stitch(&[
        "gather",
        response.to_str().unwrap(),
        "--choice",
        "0",
        "--root",
        "examples/seed",
    ]);
    assert_fails(
        &out,
        "48 bytes long, but response choices[0].payload[0] needs bytes up to 17592186044416",
    );
    assert!(started.elapsed().as_secs() < 10);
    std::fs::remove_file(response).unwrap();
}

/// Confinement from the command: `gather` and `check` read only inside
/// `--root` and each `--allow DIR`. A `..` name, an absolute name outside and
/// a symlink inside the root that leads out are refused (exit 1, the file
/// named); `--allow` lets the outside directory in.
#[cfg(unix)]
#[test]
fn gather_and_check_read_only_inside_root_and_allow() {
    let dir = std::env::temp_dir().join(format!("pd-stitch-cli-confine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let (root, outside) = (dir.join("root"), dir.join("outside"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(root.join("in.bin"), [1, 2]).unwrap();
    std::fs::write(outside.join("secret.bin"), [9, 9]).unwrap();
    std::os::unix::fs::symlink("../outside/secret.bin", root.join("link.bin")).unwrap();
    let absolute = outside.join("secret.bin");
    let (root_arg, outside_arg) = (root.to_str().unwrap(), outside.to_str().unwrap());
    for (name, inside) in [
        ("in.bin", true),
        ("../outside/secret.bin", false),
        (absolute.to_str().unwrap(), false),
        ("link.bin", false),
    ] {
        let response = dir.join("response.json");
        std::fs::write(
            &response,
            serde_json::to_vec(&serde_json::json!({"choices": [{"payload": [
                {"field": "routed_experts", "file": name, "offset": 0, "pos": 0, "rows": 2,
                 "dtype": "uint8", "shape": []}]}]}))
            .unwrap(),
        )
        .unwrap();
        let response = response.to_str().unwrap();
        let gather = pd_stitch(&["gather", response, "--choice", "0", "--root", root_arg]);
        let check = pd_stitch(&["check", response, "--root", root_arg]);
        if inside {
            assert!(gather.status.success(), "{name}: {}", stderr(&gather));
            assert!(check.status.success(), "{name}: {}", stdout(&check));
        } else {
            assert_fails(&gather, "outside the allowed directories");
            assert!(
                stderr(&gather).contains(name),
                "{name}: {}",
                stderr(&gather)
            );
            assert_eq!(check.status.code(), Some(1), "{name}");
            assert!(
                stdout(&check).contains("outside the allowed directories"),
                "{name}: {}",
                stdout(&check)
            );
        }
        let allowed = ["--root", root_arg, "--allow", outside_arg];
        let mut args = vec!["gather", response, "--choice", "0"];
        args.extend(allowed);
        let gather = pd_stitch(&args);
        assert!(
            gather.status.success(),
            "{name} allowed: {}",
            stderr(&gather)
        );
        let mut args = vec!["check", response];
        args.extend(allowed);
        assert!(pd_stitch(&args).status.success(), "{name} allowed");
    }
    assert_fails(
        &pd_stitch(&[
            "check",
            "examples/seed/decode.json",
            "--allow",
            "/no/such/dir",
        ]),
        "/no/such/dir",
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `merge --strict`: the committed examples merge as without it; a decode
/// whose segments leave a gap merges plainly but strictly fails with exit
/// status 1, one line naming the choice and the layout problem, and nothing
/// on stdout.
#[test]
fn merge_strict_refuses_a_layout_a_trainer_would_misread() {
    for dir in ["examples/seed", "examples/inline"] {
        let (p, d) = (format!("{dir}/prefill.json"), format!("{dir}/decode.json"));
        let plain = pd_stitch(&["merge", &p, &d]);
        let strict = pd_stitch(&["merge", &p, &d, "--strict"]);
        assert!(strict.status.success(), "{dir}: {}", stderr(&strict));
        assert_eq!(stdout(&strict), stdout(&plain), "{dir}");
    }
    let dir = std::env::temp_dir().join(format!("pd-stitch-cli-strict-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let seg = |file: &str, pos: u64, rows: u64| {
        serde_json::json!({"field": "routed_experts", "file": file, "offset": 0, "pos": pos,
                           "rows": rows, "dtype": "uint8", "shape": [2]})
    };
    let (p, d) = (dir.join("p.json"), dir.join("d.json"));
    std::fs::write(
        &p,
        serde_json::json!({"choices": [{"payload": [seg("p.bin", 0, 3)]}]}).to_string(),
    )
    .unwrap();
    std::fs::write(
        &d,
        serde_json::json!({"choices": [{"payload": [seg("d.bin", 2, 2), seg("e.bin", 5, 2)]}]})
            .to_string(),
    )
    .unwrap();
    let (p, d) = (p.to_str().unwrap(), d.to_str().unwrap());
    assert!(pd_stitch(&["merge", p, d]).status.success());
    assert_fails(
        &pd_stitch(&["merge", p, d, "--strict"]),
        "decode choices[0].payload: strict: the merged routed_experts segments would be misread: \
         segment 2 starts at 5 but segment 1 ends at 4",
    );
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn simulate_runs_and_says_so() {
    let out = pd_stitch(&["simulate", "--requests", "12", "--seed", "3"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("all 12 requests bitwise equal to the colocated truth in every mode"),
        "{text}"
    );
    for mode in ["by-handle", "inline compact", "inline npy"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(mode) && l.matches("12/12").count() == 3),
            "{mode}: {text}"
        );
    }
}

/// `simulate --engine dynamo`: the token API and `nvext`, every request
/// right.
#[test]
fn simulate_dynamo_runs_and_says_so() {
    let out = pd_stitch(&["simulate", "--engine", "dynamo", "--requests", "8"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.starts_with("8 Dynamo requests, "), "{text}");
    for mode in ["token api", "openai nvext"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(mode) && l.matches("8/8").count() == 3),
            "{mode}: {text}"
        );
    }
    let out = pd_stitch(&["simulate", "--engine", "tgi"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// `simulate --turns`: episodes through every engine's forms, full and
/// delta, each right; the planted off-by-one found as boundaries, exit 1;
/// `--delta` without `--turns` a usage error.
#[test]
fn simulate_turns_checks_episodes_and_finds_the_off_by_one() {
    for delta in [&[][..], &["--delta"][..]] {
        let mut args = vec!["simulate", "--turns", "3", "--requests", "4"];
        args.extend_from_slice(delta);
        let out = pd_stitch(&args);
        assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
        let text = stdout(&out);
        assert!(text.starts_with("4 episodes of 3 turns"), "{text}");
        for mode in [
            "by-handle",
            "inline npy",
            "generate",
            "sgl_ext",
            "openai nvext",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(mode))
                .unwrap_or_default();
            assert_eq!(line.matches("8/8").count(), 2, "{mode}: {text}");
        }
        assert!(text.contains("each found decode-sourced"), "{text}");
    }
    let out = pd_stitch(&[
        "simulate",
        "--turns",
        "2",
        "--requests",
        "4",
        "--off-by-one",
        "--engine",
        "vllm",
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(text.contains("(delta requests from L, one late)"), "{text}");
    let compact = text
        .lines()
        .find(|l| l.starts_with("inline compact"))
        .unwrap_or_default();
    assert!(
        compact.contains(" 0/8 ") && compact.contains(" 8 "),
        "{text}"
    );
    assert!(text.contains("WRONG: boundary 24"), "{text}");
    let out = pd_stitch(&["simulate", "--delta"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
}

/// `simulate --engine sglang`: both conventions, every request right, and
/// with `--dir` the responses kept; `merge --row-shape` stitches what it
/// wrote to the colocated answer, and without the shape an ambiguous pair
/// is one line and exit 1.
#[test]
fn simulate_sglang_runs_and_merge_reads_what_it_wrote() {
    let dir = scratch("sglang");
    let out = pd_stitch(&[
        "simulate",
        "--engine",
        "sglang",
        "--requests",
        "12",
        "--seed",
        "5",
        "--dir",
        dir.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("all 12 requests bitwise equal to the colocated truth in both conventions"),
        "{text}"
    );
    for convention in ["full-length", "suffix-only"] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(convention) && l.matches("12/12").count() == 2),
            "{convention}: {text}"
        );
    }
    // The first request's suffix-only pair, merged by the command.
    let req = dir.join("req-0000");
    let shape = {
        // The simulator's shapes: find the one that merges to the colocated answer.
        ["4x2", "8x4", "16x8", "48x8"].into_iter().find(|shape| {
            let out = pd_stitch(&[
                "merge",
                req.join("prefill.json").to_str().unwrap(),
                req.join("decode-suffix.json").to_str().unwrap(),
                "--row-shape",
                shape,
            ]);
            out.status.success()
                && serde_json::from_slice::<Value>(&out.stdout).ok()
                    == Some(read(req.join("colocated.json").to_str().unwrap()))
        })
    };
    let shape = shape.expect("a row shape merges req-0000 to its colocated answer");
    let path = |name: &str| req.join(name).to_str().unwrap().to_owned();
    // compare tells the merged rows (equal) from the unmerged full-length
    // decode's (its prompt rows differ, and only those).
    let out = pd_stitch(&[
        "compare",
        &path("merged-full.json"),
        &path("colocated.json"),
        "--row-shape",
        shape,
    ]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = pd_stitch(&[
        "compare",
        &path("decode-full.json"),
        &path("colocated.json"),
        "--row-shape",
        shape,
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let choice = &report["choices"][0];
    let (prompt, completion) = (&choice["prompt"], &choice["completion"]);
    assert_eq!(completion["equal_rows"], completion["compared"], "{choice}");
    if prompt["compared"].as_u64().unwrap() > 0 {
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert_eq!(prompt["equal_rows"], 0, "{choice}");
    }
    // check places the rows with the row shape: the prefill's end at the
    // prompt, the merged ones spanning the prefill's start to the decode's end.
    let counts = |name: &str| {
        let v = read(&path(name));
        let meta = &v["meta_info"];
        let usage = &v["usage"];
        let n = |k: &str| meta[k].as_u64().or_else(|| usage[k].as_u64()).unwrap();
        (n("prompt_tokens"), n("completion_tokens"))
    };
    let (prompt, completion) = counts("merged-full.json");
    for (name, end) in [
        ("prefill.json", prompt),
        ("merged-full.json", prompt + completion - 1),
    ] {
        let out = pd_stitch(&["check", &path(name), "--row-shape", shape]);
        assert!(out.status.success(), "{name}: {}", stdout(&out));
        let line = stdout(&out).lines().nth(1).unwrap_or_default().to_owned();
        assert!(line.contains("routed_experts (sglang)"), "{line}");
        assert!(
            line.contains(&format!(", {end})")) || (end == prompt && line.contains("  -  ")),
            "{name}: {line}"
        );
    }
    let out = pd_stitch(&["check", &path("decode-suffix.json"), "--row-shape", shape]);
    assert!(out.status.success(), "{}", stdout(&out));
    assert!(
        stdout(&out).contains(&format!("[{prompt}, ")),
        "{}",
        stdout(&out)
    );
    // Without the row shape, or with another, check says it cannot place them.
    let out = pd_stitch(&["check", &path("merged-full.json")]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out).contains("need the row shape"),
        "{}",
        stdout(&out)
    );
    let other = if shape == "48x8" { "4x2" } else { "48x8" };
    let out = pd_stitch(&["check", &path("merged-full.json"), "--row-shape", other]);
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    // gather reads them back.
    let out = pd_stitch(&[
        "gather",
        &path("merged-suffix.json"),
        "--choice",
        "0",
        "--row-shape",
        shape,
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("source     sglang"),
        "{}",
        stdout(&out)
    );
    let out = pd_stitch(&["merge", "a", "b", "--row-shape", "48"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    assert!(
        stderr(&out).contains("expected LAYERSxTOP_K"),
        "{}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// A scratch directory for one test.
fn scratch(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("pd-stitch-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The seed example merged, and the decode response as it came: the
/// decode's row for the last prompt position (2) is wrong and it has no rows
/// for positions 0 and 1.
#[test]
fn compare_exits_0_when_equal_1_when_not_and_prints_the_json_report() {
    let dir = scratch("compare");
    let merged = dir.join("merged.json");
    let merged = merged.to_str().unwrap();
    assert!(pd_stitch(&[
        "merge",
        "examples/seed/prefill.json",
        "examples/seed/decode.json",
        "-o",
        merged
    ])
    .status
    .success());
    let roots = ["--root-a", "examples/seed", "--root-b", "examples/seed"];
    let compare = |b: &str, more: &[&str]| {
        let mut args = vec!["compare", merged, b];
        args.extend(roots);
        args.extend(more);
        pd_stitch(&args)
    };
    let same = compare(merged, &[]);
    assert_eq!(same.status.code(), Some(0), "{}", stderr(&same));
    assert!(stderr(&same).is_empty());
    assert!(
        stdout(&same).ends_with("all 10 compared rows equal, same coverage\n"),
        "{}",
        stdout(&same)
    );

    let svg = dir.join("map.svg");
    let out = compare(
        "examples/seed/decode.json",
        &["--json", "--svg", svg.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&report), ["all_equal", "choices", "rows_check"]);
    assert_eq!(report["all_equal"], false);
    let choice = &report["choices"][1];
    let mut expected = [
        "choice",
        "field",
        "positions",
        "compared",
        "equal_rows",
        "equal_sets",
        "per_layer_equal",
        "prompt",
        "completion",
        "first_differences",
        "only_in_a",
        "only_in_b",
    ];
    expected.sort_unstable();
    assert_eq!(keys(choice), expected);
    // Rows of position x are 100 x + k; the decode's own row for 2 is 9900 + k.
    let wrong: Vec<Vec<u16>> = vec![vec![9900, 9901, 9902, 9903], vec![9904, 9905, 9906, 9907]];
    assert_eq!(
        choice,
        &serde_json::json!({
            "choice": 1, "field": "routed_experts", "positions": [0, 5], "compared": 3,
            "equal_rows": 2, "equal_sets": 2, "per_layer_equal": [2, 2],
            "prompt": {"positions": [0, 3], "compared": 1, "equal_rows": 0, "equal_sets": 0},
            "completion": {"positions": [3, 5], "compared": 2, "equal_rows": 2, "equal_sets": 2},
            "first_differences": [{"position": 2, "a": [[200, 201, 202, 203], [204, 205, 206, 207]], "b": wrong}],
            "only_in_a": [[0, 2]], "only_in_b": [],
        })
    );
    let map = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&map).unwrap();
    let layers = doc
        .descendants()
        .filter(|n| n.attribute("class") == Some("layer"))
        .count();
    assert_eq!(layers, 2 * 2, "two choices of two layers");

    // The prompt length given overrides the prefill segments'; one choice only.
    let out = compare(
        "examples/seed/decode.json",
        &["--json", "--choice", "0", "--prompt-len", "2"],
    );
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["choices"].as_array().unwrap().len(), 1);
    assert_eq!(report["choices"][0]["prompt"]["compared"], 0);
    assert_eq!(report["choices"][0]["completion"]["equal_rows"], 2);

    // Errors: exit 2, one line on stderr, nothing on stdout.
    for (b, needle) in [
        ("no-such.json", "no-such.json"),
        ("examples/seed/p.bin", "not JSON"),
    ] {
        let out = compare(b, &[]);
        assert_eq!(out.status.code(), Some(2), "{b}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{b}");
        assert_eq!(stderr(&out).lines().count(), 1, "{b}");
        assert!(
            stderr(&out).starts_with("error: ") && stderr(&out).contains(needle),
            "{}",
            stderr(&out)
        );
    }
    std::fs::remove_dir_all(dir).unwrap();
}

/// `--dirs`: one line per same-named file, a total, and the worst status:
/// 1 for a difference or a file one directory lacks, 2 for an error.
#[test]
fn compare_dirs_prints_one_line_per_file_and_totals() {
    let (a, b) = (scratch("dirs-a"), scratch("dirs-b"));
    let merged = a.join("r1.json");
    assert!(pd_stitch(&[
        "merge",
        "examples/seed/prefill.json",
        "examples/seed/decode.json",
        "-o",
        merged.to_str().unwrap()
    ])
    .status
    .success());
    for (dir, name, from) in [
        (&b, "r1.json", &merged),
        (&a, "r2.json", &merged),
        (&b, "r2.json", &crate::repo("examples/seed/decode.json")),
    ] {
        std::fs::copy(from, dir.join(name)).unwrap();
    }
    let run = || {
        pd_stitch(&[
            "compare",
            "--dirs",
            a.to_str().unwrap(),
            b.to_str().unwrap(),
            "--root-a",
            "examples/seed",
            "--root-b",
            "examples/seed",
        ])
    };
    let out = run();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(
        lines[1].starts_with("r1.json") && lines[1].ends_with("equal"),
        "{text}"
    );
    assert!(
        lines[2].starts_with("r2.json")
            && lines[2].contains("4/6 (66.67%)")
            && lines[2].ends_with("DIFFERENT"),
        "{text}"
    );
    assert!(
        lines[3].starts_with("total: 2 file(s), 1 equal, 1 different or missing, 0 error(s); rows equal 14/16 (87.50%)"),
        "{text}"
    );
    std::fs::write(b.join("r3.json"), "{}").unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("r3.json") && l.contains("missing in")),
        "{}",
        stdout(&out)
    );
    std::fs::write(a.join("r4.json"), "not json").unwrap();
    std::fs::write(b.join("r4.json"), "not json").unwrap();
    let out = run();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stdout(&out)
            .lines()
            .any(|l| l.starts_with("r4.json") && l.contains("error: ")),
        "{}",
        stdout(&out)
    );
    let json = pd_stitch(&[
        "compare",
        "--dirs",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--json",
        "--root-a",
        "examples/seed",
        "--root-b",
        "examples/seed",
    ]);
    let report: Value = serde_json::from_str(&stdout(&json)).unwrap();
    let files: Vec<&str> = report["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["file"].as_str().unwrap())
        .collect();
    assert_eq!(files, ["r1.json", "r2.json", "r3.json", "r4.json"]);
    assert_eq!(report["files"][1]["choices"][0]["compared"], 3);
    std::fs::remove_dir_all(a).unwrap();
    std::fs::remove_dir_all(b).unwrap();
}

/// Each subcommand's `--help` ends with an example, and the example runs:
/// in order, in a scratch directory that sees the committed examples, each
/// succeeds (compare exits 1: the decode response's own row differs).
#[test]
fn every_help_ends_with_an_example_that_runs() {
    let dir = scratch("help-examples");
    std::os::unix::fs::symlink(crate::repo("examples"), dir.join("examples")).unwrap();
    for (sub, status) in [
        ("merge", 0),
        ("check", 0),
        ("gather", 0),
        ("compare", 1),
        ("simulate", 0),
        ("episode", 0),
        ("completions", 0),
    ] {
        let help = stdout(&pd_stitch(&[sub, "--help"]));
        let last = help.trim_end().lines().last().unwrap();
        let prefix = format!("  pd-stitch {sub} ");
        assert!(last.starts_with(&prefix), "{sub}: {help}");
        // The words of the example up to a shell redirection.
        let args: Vec<&str> = last
            .split_whitespace()
            .skip(1)
            .take_while(|w| *w != ">")
            .collect();
        let out = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
            .args(&args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(status), "{last}: {}", stderr(&out));
    }
    assert!(
        dir.join("merged.json").exists()
            && dir.join("rows.npy").exists()
            && dir.join("map.svg").exists()
            && dir.join("episode.npy").exists()
    );
    std::fs::remove_dir_all(dir).unwrap();
}

/// `pd-stitch completions SHELL` writes each shell's script, naming every
/// subcommand.
#[test]
fn completions_are_generated_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F _pd__stitch"),
        ("zsh", "#compdef pd-stitch"),
        ("fish", "complete -c pd-stitch"),
    ] {
        let out = pd_stitch(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in [
            "merge",
            "check",
            "gather",
            "compare",
            "simulate",
            "episode",
            "probe",
            "completions",
        ] {
            assert!(script.contains(sub), "{shell} lacks {sub}");
        }
    }
    // The bash script parses as bash.
    let script =
        std::env::temp_dir().join(format!("pd-stitch-completion-{}.bash", std::process::id()));
    std::fs::write(&script, pd_stitch(&["completions", "bash"]).stdout).unwrap();
    let parsed = Command::new("bash")
        .arg("-n")
        .arg(&script)
        .output()
        .unwrap();
    assert!(parsed.status.success(), "{}", stderr(&parsed));
    std::fs::remove_file(script).unwrap();
    assert_eq!(pd_stitch(&["completions", "tcsh"]).status.code(), Some(2));
}

/// `check` of several responses: each under a `== FILE` line, in order; one
/// that cannot be read is said on stderr and the others are still checked;
/// the status is 1 when any is wrong.
#[test]
fn check_of_several_responses_checks_each() {
    let good = "examples/seed/prefill.json";
    let out = pd_stitch(&[
        "check",
        good,
        "examples/broken/gap.json",
        "--root",
        "examples/seed",
    ]);
    assert_eq!(out.status.code(), Some(1));
    let text = stdout(&out);
    let headers: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(
        headers,
        [
            "== examples/seed/prefill.json",
            "== examples/broken/gap.json"
        ],
        "{text}"
    );
    assert!(
        text.contains("problem: choices[0] routed_experts: gaps at [3, 4)"),
        "{text}"
    );
    let out = pd_stitch(&["check", "no-such.json", good, "--root", "examples/seed"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).starts_with("error: no-such.json"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("== examples/seed/prefill.json\nchoice"),
        "{}",
        stdout(&out)
    );
    let both = pd_stitch(&["check", good, good, "--root", "examples/seed"]);
    assert!(both.status.success(), "{}", stdout(&both));
}

/// Long runs in their three forms: `simulate`, `check` of several files,
/// `compare --dirs`. Each with the arguments that make it run in `dir`.
fn long_runs(dir: &Path) -> Vec<Vec<String>> {
    let (a, b) = (dir.join("a"), dir.join("b"));
    for d in [&a, &b] {
        std::fs::create_dir_all(d).unwrap();
        for name in ["x.json", "y.json"] {
            std::fs::copy(crate::repo("examples/seed/decode.json"), d.join(name)).unwrap();
        }
    }
    let s = |p: &Path| p.to_str().unwrap().to_owned();
    vec![
        vec!["simulate".into(), "--requests".into(), "30".into()],
        vec![
            "check".into(),
            s(&a.join("x.json")),
            s(&a.join("y.json")),
            "--root".into(),
            "examples/seed".into(),
        ],
        vec![
            "compare".into(),
            "--dirs".into(),
            s(&a),
            s(&b),
            "--root-a".into(),
            "examples/seed".into(),
            "--root-b".into(),
            "examples/seed".into(),
        ],
    ]
}

/// Progress goes to stderr only when it is a terminal: nothing when piped
/// (scripts and CI logs stay clean), the count, rate and bar under a
/// pseudo-terminal (util-linux `script`), and nothing there with --quiet.
#[test]
fn progress_shows_on_a_terminal_only_and_quiet_silences_it() {
    let dir = scratch("progress");
    let runs = long_runs(&dir);
    let units = ["30/30 requests", "2/2 files", "2/2 files"];
    for (args, unit) in runs.iter().zip(units) {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let piped = pd_stitch(&args);
        assert!(piped.status.success(), "{args:?}: {}", stderr(&piped));
        assert!(piped.stderr.is_empty(), "{args:?}: {}", stderr(&piped));
        assert!(!stdout(&piped).contains(unit), "{args:?}");
        for quiet in [false, true] {
            let mut line = format!("{} {}", env!("CARGO_BIN_EXE_pd-stitch"), args.join(" "));
            if quiet {
                line.push_str(" --quiet");
            }
            let out = Command::new("script")
                .current_dir(crate::REPO)
                .args(["-q", "-e", "-c", &line, "/dev/null"])
                .output()
                .expect("util-linux `script`, to run the command under a pseudo-terminal");
            assert!(out.status.success(), "{line}: {}", stdout(&out));
            let text = stdout(&out);
            assert_eq!(text.contains(unit), !quiet, "{line}: {text}");
            assert_eq!(text.contains("/s"), !quiet, "{line}: {text}");
            assert_eq!(
                text.contains("[##############################]"),
                !quiet,
                "{line}: {text}"
            );
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn every_subcommand_has_help() {
    for sub in [
        vec!["--help"],
        vec!["merge", "--help"],
        vec!["check", "--help"],
        vec!["gather", "--help"],
        vec!["simulate", "--help"],
        vec!["compare", "--help"],
        vec!["probe", "--help"],
        vec!["episode", "--help"],
        vec!["completions", "--help"],
    ] {
        let out = pd_stitch(&sub);
        assert!(out.status.success(), "{sub:?}");
        assert!(stdout(&out).contains("Usage: pd-stitch"), "{sub:?}");
    }
    let out = pd_stitch(&["merge"]);
    assert_eq!(out.status.code(), Some(2)); // clap's usage error
}

#[test]
fn examples_exist_where_the_readme_says() {
    for f in [
        "examples/seed/prefill.json",
        "examples/seed/decode.json",
        "examples/inline/prefill.json",
    ] {
        assert!(crate::repo(f).exists(), "{f}");
    }
}

mod arbitrary_files {
    use super::*;
    use proptest::prelude::*;

    fn contents() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 0..64),
            support::json_tree().prop_map(|v| serde_json::to_vec(&v).unwrap()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 48,
            ..support::config("cli")
        })]

        /// Whatever the files hold, each subcommand exits 0 or 1 (never a
        /// panic, whose status is 101), and a failing merge or gather says
        /// why on stderr and prints nothing on stdout.
        #[test]
        fn arbitrary_files_never_panic(a in contents(), b in contents()) {
            let dir = std::env::temp_dir().join(format!("pd-stitch-fuzz-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let (pa, pb) = (dir.join("a.json"), dir.join("b.json"));
            std::fs::write(&pa, &a).unwrap();
            std::fs::write(&pb, &b).unwrap();
            let (sa, sb, root) = (pa.to_str().unwrap(), pb.to_str().unwrap(), dir.to_str().unwrap());
            // compare: 0 equal, 1 different, 2 an error, which says why on
            // stderr and prints nothing on stdout.
            let out = pd_stitch(&["compare", sa, sb, "--root-a", root, "--root-b", root]);
            let code = out.status.code();
            prop_assert!(matches!(code, Some(0..=2)), "compare: {:?} {}", code, stderr(&out));
            if code == Some(2) {
                prop_assert!(out.stdout.is_empty());
                prop_assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
            }
            for args in [vec!["merge", sa, sb], vec!["gather", sa, "--choice", "0", "--root", root], vec!["check", sa, "--root", root]] {
                let out = pd_stitch(&args);
                let code = out.status.code();
                prop_assert!(code == Some(0) || code == Some(1), "{:?}: {:?} {}", args, code, stderr(&out));
                if code == Some(1) && args[0] != "check" {
                    prop_assert!(out.stdout.is_empty());
                    prop_assert!(stderr(&out).starts_with("error: "), "{}", stderr(&out));
                }
            }
        }
    }
}
