//! `pd-stitch episode`: the committed three-turn example (`examples/episode/`,
//! made by `examples/make_examples.py`) as a table, as JSON and as a `.npy`
//! read back, the README's output, and every error: exit status 1, one line
//! on stderr naming the turn (and the position, where there is one),
//! nothing on stdout.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use proptest::prelude::*;
use serde_json::{json, Value};

use crate::support;

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

/// A scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "pd-stitch-cli-episode-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

const EXAMPLE: [&str; 4] = [
    "episode",
    "examples/episode/turns.jsonl",
    "--root",
    "examples/episode",
];

/// The example's true row of position `x`: element `k` is `100 x + k`
/// (2 x 4 uint16), as `examples/make_examples.py` writes it.
fn true_row(x: u64) -> Vec<u16> {
    (0..8).map(|k| (100 * x + k) as u16).collect()
}

/// The example's true rows `[from, to)` as compact inline rows.
fn compact(from: u64, to: u64) -> Value {
    use base64::Engine;
    let data: Vec<u8> = (from..to)
        .flat_map(true_row)
        .flat_map(u16::to_le_bytes)
        .collect();
    json!({"data": base64::engine::general_purpose::STANDARD.encode(data),
        "shape": [to - from, 2, 4], "start": from, "dtype": "uint16"})
}

/// The table of the example, as the README shows it.
const TABLE: &str = "\
turn  continues  common  positions  start  rows taken  compared  differing  differing at
0     -               0          5      0           4         0          0  -
1     0               5         10      4           5         0          0  -
2     1              10         13      0           3         9          1  6
total: 3 turn(s), 13 positions, 12 with a row (the last has none), uint16 [2, 4], earliest; 9 compared, 1 differing
";

#[test]
fn the_example_prints_a_table_of_its_turns() {
    let out = pd_stitch(&EXAMPLE);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), TABLE);
    assert!(out.stderr.is_empty());
    // Under latest, turn 2 took every row it computed, position 6 rerouted.
    let mut latest = EXAMPLE.to_vec();
    latest.extend(["--prefer", "latest"]);
    let out = pd_stitch(&latest);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "\n2     1              10         13      0          12         9          1  6\n"
        ),
        "{text}"
    );
    assert!(
        text.ends_with("uint16 [2, 4], latest; 9 compared, 1 differing\n"),
        "{text}"
    );
}

/// The README's console block of `pd-stitch episode` is what it prints.
#[test]
fn the_readme_shows_the_commands_real_output() {
    let readme = std::fs::read_to_string(crate::repo("README.md")).unwrap();
    let command = format!("$ pd-stitch {}\n", EXAMPLE.join(" "));
    let at = readme.find(&command).expect("the README runs the example");
    let shown = &readme[at + command.len()..];
    let shown = &shown[..shown.find("```").unwrap()];
    assert_eq!(shown, TABLE);
}

/// `--npy` writes `(positions, layers, top_k)` in the turns' dtype: the
/// true rows under earliest (the prefill's row of position 2, not the
/// decode's own; turn 1's row of 6, not turn 2's rerouted one), zeros at
/// the last position; and still prints the table.
#[test]
fn npy_holds_the_rows_and_zeros_at_the_last_position() {
    let dir = scratch("npy");
    for (prefer, six) in [("earliest", 600), ("latest", 650)] {
        let out_path = dir.join(format!("{prefer}.npy"));
        let mut args = EXAMPLE.to_vec();
        args.extend(["--prefer", prefer, "--npy", out_path.to_str().unwrap()]);
        let out = pd_stitch(&args);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).starts_with("turn  continues"));
        let (descr, shape, data) = support::npy_read(&std::fs::read(&out_path).unwrap());
        assert_eq!((descr.as_str(), shape), ("<u2", vec![13, 2, 4]));
        let rows: Vec<u16> = data
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
            .collect();
        for (x, row) in rows.chunks(8).enumerate() {
            let want: Vec<u16> = match x {
                12 => vec![0; 8],
                6 => (0..8).map(|k| six + k).collect(),
                _ => true_row(x as u64),
            };
            assert_eq!(row, want, "{prefer}: position {x}");
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
}

#[test]
fn json_prints_one_object() {
    let mut args = EXAMPLE.to_vec();
    args.push("--json");
    let out = pd_stitch(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(stdout(&out).lines().count(), 1);
    let turn = |k: u64, continues: Value, common: u64, p: u64, n: u64, start: u64, taken: u64| {
        let compared = if k == 2 { 9 } else { 0 };
        let differed = if k == 2 { json!([6]) } else { json!([]) };
        json!({"turn": k, "continues": continues, "common": common, "prompt": p,
            "completion": n, "positions": p + n, "start": start, "rows_taken": taken,
            "compared": compared, "differed": differed})
    };
    assert_eq!(
        report,
        json!({"len": 13, "with_row": 12, "dtype": "uint16", "row_shape": [2, 4],
        "prefer": "earliest", "compared": 9, "differing": 1, "turns": [
            turn(0, Value::Null, 0, 3, 2, 0, 4),
            turn(1, json!(0), 5, 7, 3, 4, 5),
            turn(2, json!(1), 10, 11, 2, 0, 3),
        ]})
    );
}

/// The example's turns as values, to break one at a time.
fn example_turns() -> Vec<Value> {
    std::fs::read_to_string(crate::repo("examples/episode/turns.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Writes `turns` as `dir/turns.jsonl` beside copies of the example's
/// files, and runs the command on it with `extra` arguments.
fn run_turns(dir: &Path, turns: &[Value], extra: &[&str]) -> Output {
    for name in [
        "p0.bin",
        "d0.bin",
        "t0.prefill.json",
        "t0.decode.json",
        "t2.json",
    ] {
        std::fs::copy(crate::repo("examples/episode").join(name), dir.join(name)).unwrap();
    }
    let lines: String = turns.iter().map(|t| format!("{t}\n")).collect();
    let path = dir.join("turns.jsonl");
    std::fs::write(&path, lines).unwrap();
    let (path, root) = (path.to_str().unwrap(), dir.to_str().unwrap());
    let mut args = vec!["episode", path, "--root", root];
    args.extend(extra);
    pd_stitch(&args)
}

/// A failure: exit status 1, nothing on stdout, one line on stderr:
/// `error: ` and `message`.
fn assert_fails(out: &Output, message: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", stderr(out));
    assert!(out.stdout.is_empty(), "stdout: {}", stdout(out));
    assert_eq!(stderr(out), format!("error: {message}\n"));
}

#[test]
fn every_error_exits_1_with_one_line_naming_the_turn() {
    let dir = scratch("errors");
    let elsewhere = scratch("errors-outside");
    std::fs::write(elsewhere.join("rows.bin"), [0u8; 32]).unwrap();
    let outside = std::fs::canonicalize(elsewhere.join("rows.bin"))
        .unwrap()
        .display()
        .to_string();
    let path = dir.join("turns.jsonl");
    let file = path.display().to_string();
    let with = |k: usize, edit: &dyn Fn(&mut Value)| {
        let mut turns = example_turns();
        edit(&mut turns[k]);
        turns
    };
    let cases: Vec<(Vec<Value>, String)> =
        vec![
        // The episode's checks.
        (
            with(1, &|t| t["completion_token_ids"] = json!([])),
            "turn 1: position 7: no completion token: a turn's rows end before its last \
             completion token, so it needs one"
                .into(),
        ),
        (
            with(1, &|t| t["prompt_token_ids"] = json!([11, 12, 99, 14, 15, 16, 17])),
            "turn 1: position 2: its prompt extends no earlier turn: it shares 2 tokens with \
             turn 0, whose prompt has 3"
                .into(),
        ),
        (
            with(1, &|t| t["start"] = json!(6)),
            "turn 1: position 6: asked from 6, beyond the 5 tokens it shares with turn 0: the \
             rows below would be another sequence's"
                .into(),
        ),
        (
            with(1, &|t| t["start"] = json!(3)),
            "turn 1: position 4: piece 0's 5 rows start at 4, but turn 1 asked from 3: a delta \
             start other than the one asked"
                .into(),
        ),
        (
            with(1, &|t| t["response"]["choices"][0]["routed_experts"]["start"] = json!(3)),
            "turn 1: position 3: piece 0 (whole): 5 rows from 3 end at 8, but they must end at \
             9, before the turn's last token, which is never fed back: the counts fit neither a \
             full nor a delta response"
                .into(),
        ),
        (
            with(1, &|t| {
                t["response"]["choices"][0]["routed_experts"]["shape"] = json!([5, 4, 2]);
            }),
            "turn 1: position 4: piece 0's rows have shape [4, 2], but the episode's have [2, 4]"
                .into(),
        ),
        (
            with(1, &|t| {
                t["response"]["choices"][0]["routed_experts"]["dtype"] = json!("float16");
            }),
            "turn 1: position 4: piece 0's rows are float16, which does not widen with the \
             episode's uint16 (integers widen as NumPy promotes them, floats likewise; integers \
             and floats, bool and another dtype, or uint64 and a signed integer do not mix)"
                .into(),
        ),
        (
            with(1, &|t| {
                t["start"] = json!(5);
                t["response"]["choices"][0]["routed_experts"] = compact(5, 9);
            }),
            "turn 1: position 4 has no row: turn 1 asked from 5 but its common prefix with turn \
             0 is 5 (turn 0's rows end at 4)"
                .into(),
        ),
        (
            vec![json!({"prompt_token_ids": [], "completion_token_ids": [1], "response":
                {"choices": [{"routed_experts": {"data": "", "shape": [0, 1u64 << 29, 1u64 << 30],
                "start": 0, "dtype": "uint8"}}]}})],
            "turn 0: position 0: no row: its pieces hold none, and the episode holds none yet: \
             its rows are sized by the rows given, not by a row shape no row backs ([536870912, \
             1073741824] of uint8)"
                .into(),
        ),
        (vec![], "the episode has no turn to assemble".into()),
        // A turn's response that cannot be read.
        (
            with(1, &|t| t["response"] = json!("{")),
            "turn 1: response: invalid JSON at byte 0: EOF while parsing an object at line 1 \
             column 1"
                .into(),
        ),
        (
            with(1, &|t| t["response"] = json!({"choices": [{}]})),
            "turn 1: response choices[0]: no rows of field \"routed_experts\" (no payload \
             segment, and no inline rows)"
                .into(),
        ),
        (
            with(1, &|t| t["response"]["choices"][0]["routed_experts"]["data"] = json!("A!==")),
            "turn 1: response choices[0].routed_experts.data: invalid base64: character '!' at \
             1 is not in the standard alphabet"
                .into(),
        ),
        (
            with(0, &|t| {
                t.as_object_mut().unwrap().remove("decode_file");
                t["decode"] = json!({"choices": [{"payload": [{"field": "routed_experts",
                    "file": outside, "offset": 0, "pos": 2, "rows": 2, "dtype": "uint16",
                    "shape": [2, 4]}]}]});
            }),
            format!(
                "turn 0 (decode): response choices[0].payload[0]: file {outside} resolves to \
                 {outside}, outside the allowed directories"
            ),
        ),
        (
            with(0, &|t| {
                t.as_object_mut().unwrap().remove("response_file");
                t.as_object_mut().unwrap().remove("prefill_file");
                t["prefill"] = json!({"meta_info": {"prompt_tokens": 3, "completion_tokens": 1,
                    "routed_experts": ""}});
            }),
            "turn 0 (prefill): response output 0: SGLang's rows need their row shape (layers, \
             top_k), which is not on the wire"
                .into(),
        ),
        // The line's own form.
        (
            with(1, &|t| t["prompt_token_ids"] = json!([1, -2])),
            format!(
                "{file} line 2: turn 1: prompt_token_ids must be a sequence of non-negative \
                 integers (token ids)"
            ),
        ),
        (
            with(1, &|t| {
                t.as_object_mut().unwrap().remove("completion_token_ids");
            }),
            format!("{file} line 2: turn 1: no \"completion_token_ids\""),
        ),
        (
            with(1, &|t| t["start"] = json!(-1)),
            format!("{file} line 2: turn 1: start must be None or a non-negative integer"),
        ),
        (
            with(1, &|t| {
                t.as_object_mut().unwrap().remove("response");
            }),
            format!(
                "{file} line 2: turn 1: no \"response\" (or \"prefill\" and \"decode\", a P/D \
                 pair's)"
            ),
        ),
        (
            with(1, &|t| t["prefill_file"] = json!("t2.json")),
            format!(
                "{file} line 2: turn 1: give \"response\", or \"prefill\" and \"decode\", not both"
            ),
        ),
        (
            with(0, &|t| {
                t.as_object_mut().unwrap().remove("decode_file");
            }),
            format!("{file} line 1: turn 0: a P/D pair needs both \"prefill\" and \"decode\""),
        ),
        (
            with(2, &|t| t["response"] = json!({})),
            format!("{file} line 3: turn 2: give \"response\" or \"response_file\", not both"),
        ),
        (
            with(1, &|t| t["response"] = json!(7)),
            format!(
                "{file} line 2: turn 1: response must be a response (a JSON object), or a \
                 string of its JSON text"
            ),
        ),
        (
            with(2, &|t| t["response_file"] = json!(7)),
            format!("{file} line 3: turn 2: response_file must be a path (a string)"),
        ),
        (
            with(2, &|t| t["response_file"] = json!("no-such.json")),
            format!(
                "{file} line 3: turn 2: response_file {}: No such file or directory (os error 2)",
                dir.join("no-such.json").display()
            ),
        ),
        (
            with(2, &|t| t["response_file"] = json!("p0.bin")),
            format!(
                "{file} line 3: turn 2: response_file {}: not JSON: expected value at line 1 \
                 column 1",
                dir.join("p0.bin").display()
            ),
        ),
        (
            with(2, &|t| *t = json!([1, 2])),
            format!("{file} line 3: turn 2: a turn is a JSON object"),
        ),
    ];
    for (turns, message) in &cases {
        assert_fails(&run_turns(&dir, turns, &[]), message);
    }
    // A line that is not JSON, and a blank line skipped (turn 1 is line 3).
    let mut text: String = example_turns()[..1]
        .iter()
        .map(|t| format!("{t}\n"))
        .collect();
    text.push_str("\n{\"prompt_token_ids\": [\n");
    std::fs::write(&path, text).unwrap();
    let out = pd_stitch(&["episode", &file, "--root", dir.to_str().unwrap()]);
    assert_fails(
        &out,
        &format!("{file} line 3: turn 1: not JSON: EOF while parsing a list at line 1 column 22"),
    );
    // The files around it: the JSONL, the root, the .npy.
    let missing = dir.join("missing.jsonl");
    let out = pd_stitch(&["episode", missing.to_str().unwrap()]);
    assert_fails(
        &out,
        &format!(
            "{}: No such file or directory (os error 2)",
            missing.display()
        ),
    );
    let out = pd_stitch(&[EXAMPLE[0], EXAMPLE[1], "--root", "no/such/dir"]);
    assert_fails(&out, "no/such/dir: No such file or directory (os error 2)");
    let npy = dir.join("no-dir").join("out.npy");
    let mut args = EXAMPLE.to_vec();
    args.extend(["--npy", npy.to_str().unwrap()]);
    assert_fails(
        &pd_stitch(&args),
        &format!("{}: No such file or directory (os error 2)", npy.display()),
    );
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(elsewhere).unwrap();
}

/// Rows by handle outside the root are read once a directory is allowed;
/// SGLang's rows with `--row-shape`.
#[test]
fn allow_and_row_shape_are_the_readers() {
    let dir = scratch("allow");
    let outside = scratch("allow-outside");
    std::fs::copy(
        crate::repo("examples/episode/d0.bin"),
        outside.join("d0.bin"),
    )
    .unwrap();
    let mut turns = example_turns();
    let mut decode: Value = serde_json::from_slice(
        &std::fs::read(crate::repo("examples/episode/t0.decode.json")).unwrap(),
    )
    .unwrap();
    decode["choices"][0]["payload"][0]["file"] = json!(outside.join("d0.bin"));
    turns[0].as_object_mut().unwrap().remove("decode_file");
    turns[0]["decode"] = decode;
    let out = run_turns(&dir, &turns, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let out = run_turns(&dir, &turns, &["--allow", outside.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(stdout(&out), TABLE);

    // Turn 1 as SGLang answers a delta: its ids, placed by its counts.
    let ids: Vec<u8> = (4..9u64)
        .flat_map(true_row)
        .flat_map(|v| i32::from(v).to_le_bytes())
        .collect();
    use base64::Engine;
    let sglang = json!({"text": "", "meta_info": {"prompt_tokens": 7, "completion_tokens": 3,
        "routed_experts": base64::engine::general_purpose::STANDARD.encode(ids)}});
    let mut turns = example_turns();
    turns[1]["response"] = sglang;
    let out = run_turns(&dir, &turns, &[]);
    assert_fails(
        &out,
        "turn 1: response output 0: SGLang's rows need their row shape (layers, top_k), which \
         is not on the wire",
    );
    let out = run_turns(&dir, &turns, &["--row-shape", "2x4", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["dtype"], "int32");
    std::fs::remove_dir_all(dir).unwrap();
    std::fs::remove_dir_all(outside).unwrap();
}

/// The example at the end of `--help` runs as written.
#[test]
fn the_help_ends_with_an_example_that_runs() {
    let dir = scratch("help");
    std::os::unix::fs::symlink(crate::repo("examples"), dir.join("examples")).unwrap();
    let help = stdout(&pd_stitch(&["episode", "--help"]));
    let last = help.trim_end().lines().last().unwrap();
    assert!(last.starts_with("  pd-stitch episode "), "{help}");
    let out = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
        .args(last.split_whitespace().skip(1))
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{last}: {}", stderr(&out));
    assert_eq!(stdout(&out), TABLE);
    assert!(dir.join("episode.npy").exists());
    std::fs::remove_dir_all(dir).unwrap();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 32,
        ..support::config("cli_episode")
    })]

    /// Whatever a line holds, the command exits 0 or 1 (never a panic,
    /// whose status is 101), and on 1 prints nothing on stdout and one line
    /// on stderr.
    #[test]
    fn arbitrary_lines_never_panic(
        lines in proptest::collection::vec(
            prop_oneof![
                support::json_tree().prop_map(|v| v.to_string()),
                // Near-valid turns: the example's with one value replaced.
                (0usize..3, support::json_tree(), 0usize..6).prop_map(|(k, v, key)| {
                    let mut turn = example_turns()[k].clone();
                    let keys = ["prompt_token_ids", "completion_token_ids", "start", "response",
                        "prefill_file", "decode_file"];
                    turn[keys[key]] = v;
                    turn.to_string()
                }),
            ],
            0..4,
        )
    ) {
        let dir = scratch("arbitrary");
        let turns: Vec<Value> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap_or(Value::Null))
            .collect();
        let out = run_turns(&dir, &turns, &[]);
        let code = out.status.code();
        prop_assert!(code == Some(0) || code == Some(1), "{:?}: {}", code, stderr(&out));
        if code == Some(1) {
            prop_assert!(out.stdout.is_empty());
            prop_assert_eq!(stderr(&out).lines().count(), 1);
            prop_assert!(stderr(&out).starts_with("error: "));
        }
    }
}
