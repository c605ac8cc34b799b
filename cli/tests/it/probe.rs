//! `pd-stitch probe` over real HTTP: the mock backends (a colocated one, and
//! a prefill and a decode behind the example router) on ephemeral loopback
//! ports inside the test, and the built `pd-stitch` run against them. A
//! right stitch compares all equal, for vLLM and SGLang, in the seed's
//! matrix; each fault is found, classified, and given the exit status probe
//! promises (1 a difference or a wrong row, 2 a failed request, never a
//! hang: every run has a time bound).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::Arc;
use std::time::{Duration, Instant};

use pd_stitch::algebra::{Convention, Dtype};
use pd_stitch::sim::Request;
use serde_json::Value;

use crate::mock_backend::{self, Deployment, Fault, Forms, Mock, Role, SGLANG_SHAPE};
use crate::pd_router;

const SEED: u64 = 7;

/// A colocated mock, and a prefill and a decode mock behind the router.
struct Deploy {
    colocated: String,
    pd: String,
    dir: PathBuf,
    /// The colocated mock, which keeps every body it was sent.
    colocated_mock: Arc<Mock>,
    /// Keeps the servers running.
    _runtime: tokio::runtime::Runtime,
}

impl Drop for Deploy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Faults of the three mocks, the forms they answer in, the router's
/// timeout, and whether its address is one nobody listens on.
struct Faults {
    forms: Forms,
    colocated: Fault,
    prefill: Fault,
    decode: Fault,
    router_timeout: Duration,
    pd_unreachable: bool,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            forms: Forms::Mixed,
            colocated: Fault::None,
            prefill: Fault::None,
            decode: Fault::None,
            router_timeout: Duration::from_secs(20),
            pd_unreachable: false,
        }
    }
}

fn start(name: &str, faults: Faults) -> Deploy {
    // The mocks write every request's rows by handle: in memory where the
    // machine has it (tmpfs), as a P/D deployment's /dev/shm, rather than
    // on the disk (three times slower here).
    let shm = std::path::Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base.join(format!("pd-stitch-probe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("the mocks' directory");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime");
    let (colocated, pd, colocated_mock) = runtime.block_on(async {
        let deployment = Arc::new(
            Deployment::new(SEED, faults.forms, dir.clone())
                .with_sglang(SGLANG_SHAPE, Convention::FullLength),
        );
        let mut addrs: Vec<SocketAddr> = Vec::new();
        let mut mocks: Vec<Arc<Mock>> = Vec::new();
        for (role, fault) in [
            (Role::Colocated, faults.colocated),
            (Role::Prefill, faults.prefill),
            (Role::Decode, faults.decode),
        ] {
            let mock = Arc::new(Mock::new(deployment.clone(), role).with_fault(fault));
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            addrs.push(listener.local_addr().expect("address"));
            mocks.push(mock.clone());
            tokio::spawn(mock_backend::serve(listener, mock_backend::app(mock)));
        }
        let config = pd_router::Config {
            prefill: format!("http://{}", addrs[1]),
            decode: format!("http://{}", addrs[2]),
            timeout: faults.router_timeout,
            stitch: true,
            strict: false,
            row_shape: Some((SGLANG_SHAPE.layers, SGLANG_SHAPE.top_k)),
            bootstrap_port: addrs[1].port(),
            decode_start: true,
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let router = listener.local_addr().expect("address");
        tokio::spawn(pd_router::serve(
            listener,
            pd_router::app(config).expect("client"),
        ));
        let pd = if faults.pd_unreachable {
            let free = tokio::net::TcpListener::bind("127.0.0.1:0")
                .await
                .expect("bind");
            let addr = free.local_addr().expect("address");
            drop(free);
            addr
        } else {
            router
        };
        (
            format!("http://{}", addrs[0]),
            format!("http://{pd}"),
            mocks.swap_remove(0),
        )
    });
    Deploy {
        colocated,
        pd,
        dir,
        colocated_mock,
        _runtime: runtime,
    }
}

impl Deploy {
    /// Runs `pd-stitch probe` against the deployment with `args`, the rows
    /// by handle read from the mocks' directory; bounded in time.
    fn probe(&self, args: &[&str]) -> (Output, Duration) {
        let started = Instant::now();
        let dir = self.dir.to_str().expect("a UTF-8 path");
        let out = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
            .args([
                "probe",
                "--colocated",
                &self.colocated,
                "--pd",
                &self.pd,
                "--root",
                dir,
            ])
            .args(args)
            .output()
            .expect("pd-stitch runs");
        (out, started.elapsed())
    }

    /// `probe --json`: the status and the report.
    fn probe_json(&self, args: &[&str]) -> (Option<i32>, Value) {
        let mut all = args.to_vec();
        all.push("--json");
        let (out, _) = self.probe(&all);
        let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (out.status.code(), report)
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Each request of a report.
fn requests(report: &Value) -> &Vec<Value> {
    report["requests"].as_array().expect("requests")
}

/// Right stitches compare all equal, whole and streamed, over two turns,
/// with two choices, for vLLM (every form in turn) and SGLang; `--save`
/// keeps pairs that `compare --dirs` finds equal too.
#[test]
fn right_stitches_are_all_equal_for_vllm_and_sglang() {
    let deploy = start("equal", Faults::default());
    let save = deploy.dir.join("saved");
    let save = save.to_str().expect("UTF-8");
    let (out, _) = deploy.probe(&[
        "--requests",
        "6",
        "--turns",
        "2",
        "--stream",
        "both",
        "--n",
        "2",
        "--concurrency",
        "3",
        "--save",
        save,
    ]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 1 + 24 + 1, "{all}");
    assert!(lines[1].starts_with("e0000-t0-whole        equal"), "{all}");
    assert!(
        lines[25].starts_with("total: 24 request(s) (6 episode(s) x 2 turn(s) x 2 mode(s)), 24 equal, 0 different, 0 with wrong rows, 0 error(s); boundary 0, whole-rows 0, scattered 0, missing 0, diverged 0; rows check: colocated none, P/D none;"),
        "{all}"
    );
    let dirs = [format!("{save}/colocated"), format!("{save}/pd")];
    let root = deploy.dir.to_str().expect("UTF-8");
    let compared = Command::new(env!("CARGO_BIN_EXE_pd-stitch"))
        .args([
            "compare", "--dirs", &dirs[0], &dirs[1], "--root-a", root, "--root-b", root,
        ])
        .output()
        .expect("compare runs");
    let table = text(&compared);
    assert_eq!(compared.status.code(), Some(0), "{table}");
    assert!(table.contains("total: 24 file(s), 24 equal"), "{table}");

    let (code, report) = deploy.probe_json(&[
        "--engine",
        "sglang",
        "--row-shape",
        "8x4",
        "--requests",
        "6",
        "--turns",
        "2",
        "--stream",
        "both",
        "--concurrency",
        "2",
    ]);
    assert_eq!(code, Some(0), "{report}");
    assert_eq!(report["all_equal"], true);
    assert_eq!(requests(&report).len(), 24);
    assert!(requests(&report)
        .iter()
        .all(|r| r["status"] == "equal" && r["choices"][0]["compared"].as_u64() > Some(0)));
    // Without the row shape SGLang's rows cannot be placed: said at once.
    let (out, _) = deploy.probe(&["--engine", "sglang"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).contains("give --row-shape"), "{}", text(&out));
}

/// The seed's validation against the mocks: 80 two-turn episodes, at
/// concurrency 1 and 10, with n 1 and 2, streamed and not, over requests
/// whose rows are uint8 and uint16 (the simulator draws them), all equal.
#[test]
fn the_seed_matrix_is_all_equal() {
    let deploy = start("matrix", Faults::default());
    // The mocks answer request i (the number in the request id: episode x
    // turns + turn) with the simulator's request i.
    let dtypes: Vec<Dtype> = (0..160).map(|i| Request::draw(SEED, i).dtype).collect();
    assert!(dtypes.contains(&Dtype::Uint8) && dtypes.contains(&Dtype::Uint16));
    let started = Instant::now();
    for concurrency in ["1", "10"] {
        for n in ["1", "2"] {
            let args = [
                "--requests",
                "80",
                "--turns",
                "2",
                "--stream",
                "both",
                "--n",
                n,
                "--concurrency",
                concurrency,
                "--max-tokens",
                "16",
            ];
            let (code, report) = deploy.probe_json(&args);
            assert_eq!(
                code,
                Some(0),
                "concurrency {concurrency}, n {n}: {}",
                report["total"]
            );
            assert_eq!(report["total"]["equal"], 320, "{}", report["total"]);
            let choices: usize = requests(&report)
                .iter()
                .map(|r| r["choices"].as_array().map_or(0, Vec::len))
                .max()
                .unwrap_or(0);
            assert_eq!(choices.to_string(), n, "n caps the mocks' choices");
        }
    }
    eprintln!(
        "the seed's matrix (4 runs of 320 requests): {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// The router's stitch cut one position early (its prefill one row short):
/// every choice of every request differs at the last prompt position, in
/// every layer, and nowhere else: `boundary`, exit status 1.
#[test]
fn a_cut_one_early_is_a_boundary_difference() {
    let deploy = start(
        "short-prefill",
        Faults {
            forms: Forms::One(pd_stitch::sim::Wire::Compact),
            prefill: Fault::ShortPrefill,
            ..Faults::default()
        },
    );
    let (code, report) =
        deploy.probe_json(&["--requests", "6", "--turns", "1", "--stream", "both"]);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["total"]["different"], 12);
    for request in requests(&report) {
        let last = request["prompt_len"].as_u64().expect("prompt_len") - 1;
        for choice in request["choices"].as_array().expect("choices") {
            assert_eq!(
                choice["kinds"],
                serde_json::json!(["boundary"]),
                "{request}"
            );
            assert_eq!(
                choice["classes"]["boundary"],
                serde_json::json!([[last, last + 1]])
            );
        }
    }
    // The text names it too.
    let (out, _) = deploy.probe(&["--requests", "1", "--turns", "1"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        all.contains("DIFFERENT") && all.contains("choice 0: boundary at "),
        "{all}"
    );
}

/// A prefill whose prompt rows are zeros (the last one half): whole rows
/// differ, the half-zeroed last prompt row in some layers only, and the
/// rows check of the P/D side finds the zero rows and the duplicates
/// (zeros twice in a layer); the colocated side is clean.
#[test]
fn zeroed_prompt_rows_are_found_by_the_rows_check() {
    let deploy = start(
        "zero-prompt",
        Faults {
            forms: Forms::One(pd_stitch::sim::Wire::Compact),
            prefill: Fault::ZeroPrompt,
            ..Faults::default()
        },
    );
    let (code, report) =
        deploy.probe_json(&["--requests", "4", "--turns", "1", "--experts", "512"]);
    assert_eq!(code, Some(1), "{report}");
    for request in requests(&report) {
        let prompt = request["prompt_len"].as_u64().expect("prompt_len");
        let counts = &request["rows_check"]["pd"]["counts"];
        let choices = request["choices"].as_array().expect("choices").len() as u64;
        assert_eq!(counts["zero-row"], (prompt - 1) * choices, "{request}");
        assert!(counts["duplicate"].as_u64() > Some(0), "{request}");
        assert_eq!(request["rows_check"]["colocated"]["counts"]["zero-row"], 0);
        let kinds = &request["choices"][0]["kinds"];
        if prompt > 1 {
            assert!(
                kinds
                    .as_array()
                    .expect("kinds")
                    .contains(&"whole-rows".into()),
                "{request}"
            );
        }
        assert_eq!(
            request["choices"][0]["classes"]["scattered"],
            serde_json::json!([[prompt - 1, prompt]])
        );
    }
}

/// Noise in one layer of each completion row: `scattered`, no boundary.
#[test]
fn one_layer_off_is_scattered() {
    let deploy = start(
        "scatter",
        Faults {
            forms: Forms::One(pd_stitch::sim::Wire::Compact),
            decode: Fault::ScatterLayer,
            ..Faults::default()
        },
    );
    let (code, report) = deploy.probe_json(&["--requests", "4", "--turns", "2", "--stream", "on"]);
    assert_eq!(code, Some(1), "{report}");
    // A request that generates one token has no completion row to change.
    let index =
        |r: &Value| (r["episode"].as_u64().unwrap() * 2 + r["turn"].as_u64().unwrap()) as usize;
    let rows_after_prompt = |r: &Value| Request::draw(SEED, index(r)).completion_len() > 1;
    let noisy = requests(&report)
        .iter()
        .filter(|r| rows_after_prompt(r))
        .count();
    assert!(noisy > 0);
    assert_eq!(
        report["total"]["kinds"]["scattered"], noisy,
        "{}",
        report["total"]
    );
    assert_eq!(report["total"]["kinds"]["boundary"], 0);
    for request in requests(&report).iter().filter(|r| rows_after_prompt(r)) {
        for choice in request["choices"].as_array().expect("choices") {
            assert_eq!(
                choice["kinds"],
                serde_json::json!(["scattered"]),
                "{request}"
            );
            let prompt = request["prompt_len"].as_u64().expect("prompt_len");
            let first = choice["classes"]["scattered"][0][0].as_u64();
            assert_eq!(first, Some(prompt), "{request}");
        }
    }
}

/// Failures are per request, named by side, and the run goes on: exit
/// status 2 whenever one happened, each run within its time bound.
#[test]
fn failed_requests_are_errors_and_the_run_goes_on() {
    let cases: [(&str, Faults, &[&str], &str); 5] = [
        (
            "truncated",
            Faults { colocated: Fault::Truncated, ..Faults::default() },
            &[],
            "colocated: the body was cut off: the connection closed ",
        ),
        (
            "slow",
            Faults { decode: Fault::Slow(Duration::from_secs(4)), ..Faults::default() },
            &["--timeout", "0.5"],
            "P/D: timed out after 500ms (reading the status line)",
        ),
        (
            "status-500",
            Faults { colocated: Fault::Status500, ..Faults::default() },
            &[],
            "colocated: answered 500: {\"error\":{\"code\":500,\"message\":\"mock: internal error\"}}",
        ),
        (
            "no-routing",
            Faults { colocated: Fault::NoRouting, ..Faults::default() },
            &[],
            "colocated: choice 0 carries no routed_experts rows (is routing replay on, and asked for?)",
        ),
        (
            "unreachable",
            Faults { pd_unreachable: true, ..Faults::default() },
            &[],
            "P/D: cannot connect: ",
        ),
    ];
    for (name, faults, extra, message) in cases {
        let deploy = start(name, faults);
        let mut args = vec!["--requests", "3", "--turns", "2"];
        args.extend_from_slice(extra);
        let (out, elapsed) = deploy.probe(&args);
        let all = text(&out);
        assert_eq!(out.status.code(), Some(2), "{name}: {all}");
        let lines: Vec<&str> = all.lines().collect();
        // The header, 6 requests, the total.
        assert_eq!(lines.len(), 8, "{name}: {all}");
        for turn0 in [lines[1], lines[3], lines[5]] {
            assert!(
                turn0.contains("ERROR") && turn0.contains(message),
                "{name}: {turn0}"
            );
        }
        for turn1 in [lines[2], lines[4], lines[6]] {
            assert!(
                turn1.ends_with("not sent: turn 0 of this episode failed"),
                "{name}: {turn1}"
            );
        }
        assert!(
            lines[7].contains("0 equal, 0 different, 0 with wrong rows, 6 error(s)"),
            "{name}: {all}"
        );
        assert!(elapsed < Duration::from_secs(15), "{name}: {elapsed:?}");
    }
}

/// The bodies the colocated mock was sent, in order.
fn seen(deploy: &Deploy) -> Vec<Value> {
    deploy
        .colocated_mock
        .seen
        .lock()
        .map(|seen| seen.clone())
        .unwrap_or_default()
}

/// A body's prompt token ids (vLLM's `token_ids`, SGLang's `input_ids`).
fn prompt_ids(body: &Value) -> Vec<u64> {
    body.get("token_ids")
        .or_else(|| body.get("input_ids"))
        .and_then(Value::as_array)
        .map(|ids| ids.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default()
}

/// Runs `probe --json` with `args` and `--full-context`, and holds it to
/// a passing check: exit status 0, nothing prefill-sourced differing,
/// nothing refused, every side of every episode compared at each of its
/// positions with a row. The report.
fn passes_full_context(deploy: &Deploy, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.push("--full-context");
    let (code, report) = deploy.probe_json(&all);
    assert_eq!(code, Some(0), "{args:?}: {report}");
    let total = &report["full_context"]["total"];
    assert_eq!(total["passes"], true, "{args:?}: {total}");
    for class in [
        "boundary",
        "scattered",
        "refused",
        "diverged",
        "failed",
        "errors",
    ] {
        assert_eq!(total[class], 0, "{args:?}: {class}: {total}");
    }
    let episodes = report["full_context"]["episodes"]
        .as_array()
        .expect("episodes");
    let mut compared = 0;
    for episode in episodes {
        let tokens = episode["tokens"].as_u64().expect("tokens");
        for side in ["colocated", "pd"] {
            assert_eq!(episode[side]["status"], "passed", "{episode}");
            assert_eq!(episode[side]["compared"], tokens - 1, "{episode}");
            compared += tokens - 1;
        }
    }
    assert_eq!(total["compared"], compared);
    assert_eq!(total["sides"], 2 * episodes.len());
    report
}

/// One-turn SGLang episodes held to their full-context forward, whole and
/// streamed: the mocks answer the forward of the turn's whole sequence
/// with the turn's own prompt rows, so nothing prefill-sourced differs (the
/// forward computes the completion's positions as prompt, so decode-sourced
/// differences are whatever the mocks make them, and not held here). The
/// forward goes to the colocated server alone: the turn's prompt and
/// completion, one token, greedy, rows from 0, a cache_salt of its own;
/// the turns say their start, 0.
#[test]
fn one_turn_episodes_hold_to_their_full_context_forward() {
    let deploy = start("full-context", Faults::default());
    let report = passes_full_context(
        &deploy,
        &[
            "--engine",
            "sglang",
            "--row-shape",
            "8x4",
            "--requests",
            "4",
            "--turns",
            "1",
            "--stream",
            "both",
        ],
    );
    assert_eq!(
        report["full_context"]["episodes"].as_array().map(Vec::len),
        Some(8)
    );
    // Per episode and mode: the turn's body, then the forward's.
    let bodies = seen(&deploy);
    assert_eq!(bodies.len(), 16);
    for pair in bodies.chunks(2) {
        let (turn, forward) = (&pair[0], &pair[1]);
        assert_eq!(turn.get("cache_salt"), None, "{turn}");
        assert_eq!(turn["routed_experts_start_len"], 0, "{turn}");
        let (prompt, all) = (prompt_ids(turn), prompt_ids(forward));
        assert!(
            all.len() > prompt.len() && all.starts_with(&prompt),
            "{forward}"
        );
        assert_eq!(forward["sampling_params"]["max_new_tokens"], 1, "{forward}");
        assert_eq!(forward["sampling_params"]["temperature"], 0.0, "{forward}");
        assert_eq!(forward["routed_experts_start_len"], 0, "{forward}");
        assert_eq!(forward["stream"], turn["stream"], "{forward}");
    }
    let salts: std::collections::HashSet<&Value> = bodies
        .iter()
        .skip(1)
        .step_by(2)
        .map(|f| &f["cache_salt"])
        .collect();
    assert_eq!(salts.len(), 8, "each forward has a salt of its own");
}

/// --delta asks every turn after the first from its common prefix with the
/// turn before minus one: SGLang's `routed_experts_start_len` at the body's
/// top level, the same body to both deployments; and the check assembles
/// the delta turns without refusing one (the SGLang mocks answer from the
/// start they are sent). Whether the rows then agree with the forward is
/// the mocks' model's, not held here.
#[test]
fn delta_turns_ask_from_the_common_prefix_minus_one() {
    let deploy = start("full-context-delta", Faults::default());
    let (code, report) = deploy.probe_json(&[
        "--engine",
        "sglang",
        "--row-shape",
        "8x4",
        "--requests",
        "2",
        "--turns",
        "3",
        "--full-context",
        "--delta",
    ]);
    assert_ne!(code, Some(2), "{report}");
    assert_eq!(report["delta"], true);
    let bodies: Vec<Value> = seen(&deploy);
    let turns: Vec<&Value> = bodies
        .iter()
        .filter(|b| b.get("cache_salt").is_none())
        .collect();
    assert_eq!((bodies.len(), turns.len()), (8, 6));
    for episode in turns.chunks(3) {
        assert_eq!(episode[0]["routed_experts_start_len"], 0);
        for pair in episode.windows(2) {
            let (before, after) = (prompt_ids(pair[0]), prompt_ids(pair[1]));
            // The turn before's prompt, its completion, 4 new tokens.
            let common = after.len() as u64 - 4;
            assert!(after.starts_with(&before) && common > before.len() as u64);
            assert_eq!(
                pair[1]["routed_experts_start_len"],
                common - 1,
                "{}",
                pair[1]
            );
        }
    }
    for episode in report["full_context"]["episodes"]
        .as_array()
        .expect("episodes")
    {
        for side in ["colocated", "pd"] {
            assert_eq!(episode[side]["refused"], Value::Null, "{episode}");
        }
    }
}

/// Every engine's multi-turn episodes, full and delta, whole and
/// streamed, pass the check, and a stitch cut one position early fails it
/// on vLLM. The mocks answer as the engines do
/// (`tests/fixtures/engines/*/episode/`): a request's rows are a function of its token prefix under
/// one model for every prompt a client sends, so that a later turn and the
/// full-context forward repeat an earlier turn's rows; vLLM's colocated
/// server and prefill answer from `routed_experts_prompt_start`, and
/// every vLLM choice says its `token_ids`, whole and streamed.
#[test]
fn multi_turn_episodes_hold_to_their_full_context_forward() {
    let deploy = start("full-context-turns", Faults::default());
    let engines: [&[&str]; 2] = [
        &["--engine", "vllm"],
        &["--engine", "sglang", "--row-shape", "8x4"],
    ];
    for engine in engines {
        for delta in [&[][..], &["--delta"][..]] {
            let mut args = engine.to_vec();
            args.extend(["--requests", "6", "--turns", "3", "--stream", "both"]);
            args.extend(delta);
            let report = passes_full_context(&deploy, &args);
            let total = &report["full_context"]["total"];
            assert_eq!(total["sides"], 24, "{total}");
            if delta.is_empty() {
                assert!(total["overlaps"]["compared"].as_u64() > Some(0), "{total}");
            } else {
                assert_eq!(total["overlaps"]["compared"], 0, "{total}");
            }
        }
    }
    // A stitch cut one position early: the P/D side's last prompt row of
    // every turn is the decode's own, a prefill-sourced difference.
    let deploy = start(
        "full-context-short",
        Faults {
            forms: Forms::One(pd_stitch::sim::Wire::Compact),
            prefill: Fault::ShortPrefill,
            ..Faults::default()
        },
    );
    let (code, report) = deploy.probe_json(&["--requests", "3", "--turns", "3", "--full-context"]);
    assert_eq!(code, Some(1), "{report}");
    for episode in report["full_context"]["episodes"]
        .as_array()
        .expect("episodes")
    {
        assert_eq!(episode["colocated"]["status"], "passed", "{episode}");
        assert_eq!(episode["pd"]["status"], "failed", "{episode}");
    }
}

/// An engine whose rows of a prefix depend on the length of the forward
/// that computes them, as a real SGLang 0.5.23's did on an AMD CPU: the
/// colocated server and the prefill give position 1 another row in a first
/// turn's short prompt than in the longer turns and the forward. The
/// confirming forward of the first turn's prompt gives that row again:
/// recomputed on both sides, full and delta, and the run passes. With the
/// prefill alone so, the P/D side's row is none the colocated server gives
/// for that prompt: scattered, and the run fails.
#[test]
fn rows_that_depend_on_the_prompts_length_are_recomputed_not_failed() {
    let compact = Forms::One(pd_stitch::sim::Wire::Compact);
    let both = start(
        "full-context-length",
        Faults {
            forms: compact,
            colocated: Fault::LengthFlip(13),
            prefill: Fault::LengthFlip(13),
            ..Faults::default()
        },
    );
    // First prompts of 8 to 11 tokens, flipped; every later prompt at
    // least 8 + 8 + 4 tokens long, not.
    let args = [
        "--requests",
        "3",
        "--turns",
        "3",
        "--prompt-len",
        "8..12",
        "--max-tokens",
        "8",
    ];
    for delta in [&[][..], &["--delta"][..]] {
        let mut all = args.to_vec();
        all.extend(delta);
        let report = passes_full_context(&both, &all);
        let total = &report["full_context"]["total"];
        assert_eq!(total["recomputed"], 6, "{delta:?}: {total}");
        for episode in report["full_context"]["episodes"]
            .as_array()
            .expect("episodes")
        {
            for side in ["colocated", "pd"] {
                assert_eq!(
                    episode[side]["recomputed"],
                    serde_json::json!([1]),
                    "{episode}"
                );
            }
        }
    }
    let prefill = start(
        "full-context-length-prefill",
        Faults {
            forms: compact,
            prefill: Fault::LengthFlip(13),
            ..Faults::default()
        },
    );
    let mut all = args.to_vec();
    all.push("--full-context");
    let (code, report) = prefill.probe_json(&all);
    assert_eq!(code, Some(1), "{report}");
    assert_eq!(report["full_context"]["total"]["recomputed"], 0, "{report}");
    for episode in report["full_context"]["episodes"]
        .as_array()
        .expect("episodes")
    {
        assert_eq!(episode["colocated"]["status"], "passed", "{episode}");
        assert_eq!(
            episode["pd"]["scattered"],
            serde_json::json!([1]),
            "{episode}"
        );
        assert_eq!(episode["pd"]["status"], "failed", "{episode}");
    }
}
