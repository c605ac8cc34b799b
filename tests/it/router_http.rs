//! The P/D router example over real HTTP: mock prefill and decode backends
//! (`examples/mock_backend.rs`) and the router (`examples/pd_router.rs`) run on
//! ephemeral loopback ports inside the test, and requests go through real
//! sockets. Stitched answers are gathered and compared bitwise with the
//! simulator's colocated truth; broken backends must give 502/504, never a
//! panic or a hang (every client call has a timeout).

#[allow(dead_code)] // the example's `main` and what only it uses
#[path = "../../examples/mock_backend.rs"]
pub(crate) mod mock_backend;
#[allow(dead_code)]
#[path = "../../examples/pd_router.rs"]
pub(crate) mod pd_router;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mock_backend::{Deployment, Fault, Forms, Mock, Role, SGLANG_SHAPE};
use pd_stitch::algebra::Convention;
use pd_stitch::gather::gather;
use pd_stitch::sim::{Engine, Request, Wire};
use pd_stitch::{merge_routed_experts_for_pd, ROUTED_EXPERTS};
use reqwest::StatusCode;
use serde_json::{json, Value};

const SEED: u64 = 7;

/// A router in front of a prefill and a decode mock, all on loopback.
struct Setup {
    url: String,
    sglang_url: String,
    prefill_port: u16,
    prefill: Arc<Mock>,
    decode: Arc<Mock>,
    /// A colocated mock of the same deployment, beside the pair: its
    /// SGLang `/generate`.
    colocated_sglang_url: String,
    deployment: Arc<Deployment>,
    dir: PathBuf,
}

/// How to start one.
struct Options {
    forms: Forms,
    prefill_fault: Fault,
    decode_fault: Fault,
    timeout: Duration,
    stitch: bool,
    /// Point the router's prefill at a port nobody listens on.
    prefill_unreachable: bool,
    /// How the SGLang decode mock answers.
    convention: Convention,
    /// The row shape the router is told (the mocks' is `SGLANG_SHAPE`).
    row_shape: Option<(u64, u64)>,
    /// Whether the router asks the decode only for the rows it computes.
    decode_start: bool,
    /// The SGLang decode mock's pool slots.
    sglang_pool: usize,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            forms: Forms::Mixed,
            prefill_fault: Fault::None,
            decode_fault: Fault::None,
            timeout: Duration::from_secs(10),
            stitch: true,
            prefill_unreachable: false,
            convention: Convention::FullLength,
            row_shape: Some((SGLANG_SHAPE.layers, SGLANG_SHAPE.top_k)),
            decode_start: true,
            sglang_pool: mock_backend::SGLANG_POOL,
        }
    }
}

async fn listen() -> (tokio::net::TcpListener, SocketAddr) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    (listener, addr)
}

impl Setup {
    async fn start(name: &str, options: Options) -> Setup {
        let dir =
            std::env::temp_dir().join(format!("pd-stitch-http-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let deployment = Arc::new(
            Deployment::new(SEED, options.forms, dir.clone())
                .with_sglang(SGLANG_SHAPE, options.convention)
                .with_sglang_pool(options.sglang_pool),
        );
        let prefill = Arc::new(
            Mock::new(deployment.clone(), Role::Prefill).with_fault(options.prefill_fault),
        );
        let decode =
            Arc::new(Mock::new(deployment.clone(), Role::Decode).with_fault(options.decode_fault));
        let colocated = Arc::new(Mock::new(deployment.clone(), Role::Colocated));
        let mut addrs = Vec::new();
        for mock in [&prefill, &decode, &colocated] {
            let (listener, addr) = listen().await;
            addrs.push(addr);
            tokio::spawn(mock_backend::serve(
                listener,
                mock_backend::app(mock.clone()),
            ));
        }
        let (prefill_addr, decode_addr, colocated_addr) = (addrs[0], addrs[1], addrs[2]);
        let prefill_url = if options.prefill_unreachable {
            // Bound and dropped: nothing listens there now.
            let (listener, addr) = listen().await;
            drop(listener);
            format!("http://{addr}")
        } else {
            format!("http://{prefill_addr}")
        };
        let config = pd_router::Config {
            prefill: prefill_url,
            decode: format!("http://{decode_addr}"),
            timeout: options.timeout,
            stitch: options.stitch,
            // Strict: every layout the mocks write is one a trainer reads
            // right, so a strict router must answer each as the plain merge
            // would (the checks below compare with the colocated truth).
            strict: true,
            row_shape: options.row_shape,
            // The prefill mock's bootstrap server is on its own port.
            bootstrap_port: prefill_addr.port(),
            decode_start: options.decode_start,
        };
        let (listener, addr) = listen().await;
        tokio::spawn(pd_router::serve(
            listener,
            pd_router::app(config).expect("client"),
        ));
        Setup {
            url: format!("http://{addr}/inference/v1/generate"),
            sglang_url: format!("http://{addr}/generate"),
            prefill_port: prefill_addr.port(),
            prefill,
            decode,
            colocated_sglang_url: format!("http://{colocated_addr}/generate"),
            deployment,
            dir,
        }
    }

    /// POSTs `body` (bytes as they are) and returns the status, the content
    /// type and the body.
    async fn post_raw(&self, body: Vec<u8>) -> (StatusCode, String, Vec<u8>) {
        self.post_to(&self.url, body).await
    }

    /// A setup whose SGLang decode answers in `convention`.
    async fn sglang(name: &str, convention: Convention) -> Setup {
        let options = Options {
            convention,
            ..Options::default()
        };
        Setup::start(name, options).await
    }

    /// POSTs `body` to the router's SGLang route, which must answer 200 with
    /// `content_type`; the body.
    async fn post_sglang_ok(&self, body: &Value, content_type: &str) -> Vec<u8> {
        let (status, got, bytes) = self.post_sglang(body).await;
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(status, StatusCode::OK, "{text}");
        assert_eq!(got, content_type, "{text}");
        bytes
    }

    /// The same to the router's SGLang route.
    /// POSTs `body` to the colocated SGLang mock, which must answer 200;
    /// the body.
    async fn post_colocated_sglang_ok(&self, body: &Value) -> Vec<u8> {
        let bytes = serde_json::to_vec(body).expect("json");
        let (status, _, answer) = self.post_to(&self.colocated_sglang_url, bytes).await;
        assert_eq!(
            status,
            StatusCode::OK,
            "{}",
            String::from_utf8_lossy(&answer)
        );
        answer
    }

    async fn post_sglang(&self, body: &Value) -> (StatusCode, String, Vec<u8>) {
        let bytes = serde_json::to_vec(body).expect("json");
        self.post_to(&self.sglang_url, bytes).await
    }

    async fn post_to(&self, url: &str, body: Vec<u8>) -> (StatusCode, String, Vec<u8>) {
        let response = client()
            .post(url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("the router answers");
        let status = response.status();
        let content_type = response
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let bytes = response
            .bytes()
            .await
            .expect("the router's body arrives whole");
        (status, content_type, bytes.to_vec())
    }

    async fn post(&self, body: &Value) -> (StatusCode, Value) {
        let (status, _, bytes) = self.post_raw(serde_json::to_vec(body).expect("json")).await;
        let value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            panic!(
                "the router's body is not JSON ({e}): {}",
                String::from_utf8_lossy(&bytes)
            )
        });
        (status, value)
    }

    /// Whether `response` holds, choice by choice, exactly the colocated
    /// truth of request `index`: `Err` says where it does not.
    fn check_truth(&self, index: usize, response: &Value) -> Result<(), String> {
        // The request the mocks simulate for `body(index)`: its prompt's
        // rows under the one model of every prompt a client sends.
        let request = mock_backend::simulated(SEED, index, &body(index));
        let choices = response["choices"].as_array().map_or(0, Vec::len);
        if choices != request.choices() {
            return Err(format!(
                "request {index}: {choices} choices, expected {}",
                request.choices()
            ));
        }
        for c in 0..request.choices() {
            let rows = gather(response, c, ROUTED_EXPERTS, &self.dir)
                .map_err(|e| format!("request {index} choice {c}: {e}"))?;
            if rows.data() != request.truth(c).as_slice() {
                return Err(format!(
                    "request {index} choice {c}: rows differ from the colocated truth"
                ));
            }
        }
        Ok(())
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Every client call is bounded: a hang fails the test instead of stalling CI.
fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(20))
        .build()
        .expect("client")
}

/// The body of simulated request `index`: its prompt's tokens (their
/// number is what the router sends the decode as its start; the mocks'
/// rows are those of the tokens sent).
fn body(index: usize) -> Value {
    let prompt = Request::draw(SEED, index).prompt;
    json!({
        "request_id": format!("req-{index}"),
        "token_ids": prompt,
        "sampling_params": {"max_tokens": 64, "min_tokens": 4, "temperature": 1.0},
    })
}

fn message(response: &Value) -> &str {
    response["error"]["message"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stitched_answers_equal_the_colocated_truth_in_every_form() {
    for &mode in Engine::Vllm.wires() {
        let setup = Setup::start(
            mode.name().replace(' ', "-").as_str(),
            Options {
                forms: Forms::One(mode),
                ..Options::default()
            },
        )
        .await;
        for index in 0..8 {
            let (status, response) = setup.post(&body(index)).await;
            assert_eq!(status, StatusCode::OK, "{}: {response}", mode.name());
            setup
                .check_truth(index, &response)
                .unwrap_or_else(|e| panic!("{}: {e}", mode.name()));
        }
        // The prefill was asked for one token, not streamed; the decode got
        // the client's request with the start of the rows it computes.
        let prefill_seen = setup.prefill.seen.lock().expect("lock").clone();
        let decode_seen = setup.decode.seen.lock().expect("lock").clone();
        assert_eq!((prefill_seen.len(), decode_seen.len()), (8, 8));
        for (index, (p, d)) in prefill_seen.iter().zip(&decode_seen).enumerate() {
            let expected = body(index);
            assert_eq!(p["sampling_params"]["max_tokens"], 1);
            assert_eq!(p["sampling_params"]["min_tokens"], 1);
            assert_eq!(p["sampling_params"]["temperature"], 1.0);
            assert_eq!(p["stream"], false);
            let mut expected_decode = expected.clone();
            expected_decode["kv_transfer_params"] =
                json!({"do_remote_prefill": true, "remote_request_id": index});
            expected_decode["sampling_params"]["routed_experts_prompt_start"] =
                json!(Request::draw(SEED, index).prompt_len());
            assert_eq!(d, &expected_decode);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_stitching_the_answers_are_not_the_truth() {
    // The check above can fail: the decode's own answer lacks the prompt's
    // rows (and holds a wrong row for the last prompt position).
    let setup = Setup::start(
        "unstitched",
        Options {
            stitch: false,
            ..Options::default()
        },
    )
    .await;
    for index in 0..6 {
        let (status, response) = setup.post(&body(index)).await;
        assert_eq!(status, StatusCode::OK);
        assert!(
            setup.check_truth(index, &response).is_err(),
            "request {index} unstitched is the truth"
        );
    }
}

/// A router that does not send the vLLM decode its start takes it down: the
/// `.npy` decode mock answers as vLLM 0.32's (SPEC 4a, V-F3), a 500 on the
/// first prompt longer than one KV block, and 503 on everything after it;
/// the router turns both into 502s. With the start (the default), every
/// request is the colocated truth (`stitched_answers_equal_...`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_without_the_decode_start_takes_the_vllm_decode_down() {
    let setup = Setup::start(
        "no-decode-start",
        Options {
            forms: Forms::One(Wire::Npy),
            decode_start: false,
            ..Options::default()
        },
    )
    .await;
    let long = (0..)
        .find(|&i| Request::draw(SEED, i).prompt_len() > 2 * 32)
        .expect("a long prompt");
    let short = (0..)
        .find(|&i| Request::draw(SEED, i).prompt_len() <= 32)
        .expect("a short prompt");
    // A prompt within one block loads no KV: any start is computed there.
    let (status, response) = setup.post(&body(short)).await;
    assert_eq!(status, StatusCode::OK, "{response}");
    setup.check_truth(short, &response).expect("the truth");
    let (status, response) = setup.post(&body(long)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{response}");
    assert!(
        message(&response).contains("BlockObjectStoreError"),
        "{response}"
    );
    let (status, response) = setup.post(&body(short)).await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "down for good: {response}");
    assert!(message(&response).contains("503"), "{response}");
}

/// The events of an SSE body (as `pd_stitch::testing::stream::events` reads
/// them): each one's data, and the merged response the rows events' choices
/// make (their `index` and `finish_reason` left out, as the non-streaming
/// answer has them).
fn streamed(bytes: &[u8]) -> (Vec<Vec<u8>>, Value) {
    let (events, loose) = pd_stitch::testing::stream::events(bytes);
    assert!(loose.is_empty(), "bytes outside events: {loose:?}");
    let mut choices = Vec::new();
    let mut data = Vec::new();
    // A choice's tokens, summed over its events, and the usage event: what
    // places a vLLM `.npy` in the answer the stream makes (SPEC 4a).
    let mut tokens: Vec<Vec<Value>> = Vec::new();
    let mut usage = Value::Null;
    for event in events {
        let text = event.data.expect("every event has data");
        if let Ok(value) = serde_json::from_slice::<Value>(&text) {
            if !value["usage"].is_null() {
                usage = value["usage"].clone();
            }
            for choice in value["choices"].as_array().into_iter().flatten() {
                let index = choice["index"].as_u64().unwrap_or(0) as usize;
                if tokens.len() <= index {
                    tokens.resize(index + 1, Vec::new());
                }
                tokens[index].extend(
                    choice["token_ids"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .cloned(),
                );
                // Rows: inline, or a payload segment of a stitched field (a
                // payload of sampling masks alone carries none).
                let stitched = choice["payload"].as_array().is_some_and(|p| {
                    p.iter().any(|s| {
                        s["field"]
                            .as_str()
                            .is_some_and(|f| pd_stitch::DEFAULT_FIELDS.contains(&f))
                    })
                });
                let rows = !choice["routed_experts"].is_null() || stitched;
                if rows {
                    let mut choice = choice.clone();
                    let object = choice.as_object_mut().expect("a choice is an object");
                    object.remove("finish_reason");
                    choices.push(choice);
                }
            }
        }
        data.push(text);
    }
    for choice in &mut choices {
        let object = choice.as_object_mut().expect("a choice is an object");
        let index = object.remove("index").and_then(|i| i.as_u64()).unwrap_or(0) as usize;
        if object.get("token_ids").is_some_and(Value::is_array) {
            object.insert("token_ids".into(), json!(tokens[index]));
        }
    }
    (data, json!({"choices": choices, "usage": usage}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamed_answers_are_stitched_and_equal_the_colocated_truth_in_every_form() {
    for &mode in Engine::Vllm.wires() {
        let name = format!("stream-{}", mode.name().replace(' ', "-"));
        let setup = Setup::start(
            &name,
            Options {
                forms: Forms::One(mode),
                ..Options::default()
            },
        )
        .await;
        for index in 0..4 {
            let mut request = body(index);
            request["stream"] = json!(true);
            let (status, content_type, bytes) = setup
                .post_raw(serde_json::to_vec(&request).expect("json"))
                .await;
            assert_eq!(
                status,
                StatusCode::OK,
                "{}",
                String::from_utf8_lossy(&bytes)
            );
            assert_eq!(content_type, "text/event-stream");
            let (data, merged) = streamed(&bytes);
            let choices = Request::draw(SEED, index).choices();
            // Per choice two token events and the rows event, then usage and
            // [DONE], in order.
            assert_eq!(
                data.len(),
                3 * choices + 2,
                "{}: {}",
                mode.name(),
                String::from_utf8_lossy(&bytes)
            );
            assert_eq!(data.last().map(Vec::as_slice), Some(&b"[DONE]"[..]));
            setup
                .check_truth(index, &merged)
                .unwrap_or_else(|e| panic!("{} streamed: {e}", mode.name()));
        }
        // The prefill was asked for one token, not streamed.
        for p in setup.prefill.seen.lock().expect("lock").iter() {
            assert_eq!(p["stream"], false);
            assert_eq!(p["sampling_params"]["max_tokens"], 1);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_that_cannot_be_stitched_ends_with_an_error_event() {
    // The prefill has no rows, the decode's stream has: the events before
    // the rows event go out, then an error event and [DONE].
    let setup = Setup::start(
        "stream-error",
        Options {
            prefill_fault: Fault::NoRouting,
            ..Options::default()
        },
    )
    .await;
    let mut request = body(2);
    request["stream"] = json!(true);
    let (status, _, bytes) = setup
        .post_raw(serde_json::to_vec(&request).expect("json"))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (data, merged) = streamed(&bytes);
    assert_eq!(
        merged["choices"],
        json!([]),
        "a rows event went out unstitched"
    );
    assert_eq!(data.len(), 4, "{}", String::from_utf8_lossy(&bytes));
    let error: Value = serde_json::from_slice(&data[2]).expect("the error event is JSON");
    assert_eq!(error["error"]["type"], "stitch_error");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("stream event 2"), "{error}");
    assert!(message.contains("the prompt's rows are missing"), "{error}");
    assert_eq!(data[3], b"[DONE]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_without_routed_experts_passes_through() {
    let setup = Setup::start(
        "stream-through",
        Options {
            prefill_fault: Fault::NoRouting,
            decode_fault: Fault::NoRouting,
            ..Options::default()
        },
    )
    .await;
    let mut request = body(4);
    request["stream"] = json!(true);
    let (status, content_type, bytes) = setup
        .post_raw(serde_json::to_vec(&request).expect("json"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(content_type, "text/event-stream");
    // Nothing to stitch: every event as the decode sent it.
    let (data, merged) = streamed(&bytes);
    assert_eq!(merged["choices"], json!([]));
    let choices = Request::draw(SEED, 4).choices();
    assert_eq!(data.len(), 3 * choices + 2);
    let text = String::from_utf8_lossy(&bytes);
    let first = "data: {\"choices\":[{\"finish_reason\":null,\"index\":0,\"routed_experts\":null";
    assert!(text.starts_with(first), "{text}");
    assert!(text.ends_with("\n\ndata: [DONE]\n\n"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_rows_without_prefill_rows_are_a_502_naming_the_error() {
    for &mode in Engine::Vllm.wires() {
        let setup = Setup::start(
            &format!("no-prefill-rows-{}", mode.name().replace(' ', "-")),
            Options {
                forms: Forms::One(mode),
                prefill_fault: Fault::NoRouting,
                ..Options::default()
            },
        )
        .await;
        let (status, response) = setup.post(&body(5)).await;
        assert_eq!(status, StatusCode::BAD_GATEWAY, "{}", mode.name());
        assert_eq!(response["error"]["type"], "stitch_error");
        // The error the library gives for the same two responses, named in full.
        let answers = setup.deployment.answers(5).expect("answers");
        let prefill = mock_backend::without_routing(answers.prefill.clone());
        let mut decode = answers.decode.clone();
        let error =
            merge_routed_experts_for_pd(&prefill, &mut decode).expect_err("nothing to stitch to");
        assert!(
            message(&response).ends_with(&error.to_string()),
            "{}: {response}",
            mode.name()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_backends_are_502_or_504_never_a_hang() {
    let slow = Fault::Slow(Duration::from_secs(5));
    let cases: [(&str, Options, StatusCode, &str); 7] = [
        (
            "prefill-500",
            Options {
                prefill_fault: Fault::Status500,
                ..Options::default()
            },
            StatusCode::BAD_GATEWAY,
            "the prefill backend answered 500 Internal Server Error: ",
        ),
        (
            "decode-500",
            Options {
                decode_fault: Fault::Status500,
                ..Options::default()
            },
            StatusCode::BAD_GATEWAY,
            "the decode backend answered 500 Internal Server Error: ",
        ),
        (
            "prefill-truncated",
            Options {
                prefill_fault: Fault::Truncated,
                ..Options::default()
            },
            StatusCode::BAD_GATEWAY,
            "the prefill backend failed: ",
        ),
        (
            "decode-truncated",
            Options {
                decode_fault: Fault::Truncated,
                ..Options::default()
            },
            StatusCode::BAD_GATEWAY,
            "the decode backend failed: ",
        ),
        (
            "prefill-slow",
            Options {
                prefill_fault: slow,
                timeout: Duration::from_millis(300),
                ..Options::default()
            },
            StatusCode::GATEWAY_TIMEOUT,
            "the prefill backend did not answer within 300ms",
        ),
        (
            "decode-slow",
            Options {
                decode_fault: slow,
                timeout: Duration::from_millis(300),
                ..Options::default()
            },
            StatusCode::GATEWAY_TIMEOUT,
            "the decode backend did not answer within 300ms",
        ),
        (
            "prefill-unreachable",
            Options {
                prefill_unreachable: true,
                ..Options::default()
            },
            StatusCode::BAD_GATEWAY,
            "the prefill backend failed: ",
        ),
    ];
    for (name, options, expected, prefix) in cases {
        let setup = Setup::start(name, options).await;
        let started = Instant::now();
        let (status, response) = setup.post(&body(6)).await;
        let elapsed = started.elapsed();
        assert_eq!(status, expected, "{name}: {response}");
        assert!(message(&response).starts_with(prefix), "{name}: {response}");
        if name.ends_with("truncated") {
            // Cut off in the body, not before the headers.
            assert!(message(&response).contains("body"), "{name}: {response}");
        }
        assert!(elapsed < Duration::from_secs(4), "{name} took {elapsed:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_the_router_cannot_use_are_a_400() {
    let setup = Setup::start("bad-requests", Options::default()).await;
    let bad: [(&[u8], &str); 3] = [
        (b"{\"request_id\": ", "the request body is not JSON: "),
        (b"[1, 2]", "the request body must be a JSON object"),
        (
            b"{\"request_id\": 1, \"sampling_params\": 5}",
            "sampling_params must be a JSON object",
        ),
    ];
    for (bytes, prefix) in bad {
        let (status, _, body) = setup.post_raw(bytes.to_vec()).await;
        let response: Value = serde_json::from_slice(&body).expect("json");
        assert_eq!(status, StatusCode::BAD_REQUEST, "{response}");
        assert!(message(&response).starts_with(prefix), "{response}");
    }
    assert!(setup.prefill.seen.lock().expect("lock").is_empty());
    // A request the backend refuses keeps its status: here the mock's, which
    // needs a request_id.
    let (status, response) = setup.post(&json!({"token_ids": [1]})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        message(&response).starts_with("the prefill backend answered 400 Bad Request: "),
        "{response}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_requests_at_concurrency_32_are_all_stitched_right() {
    const REQUESTS: usize = 1000;
    const CONCURRENCY: usize = 32;
    let setup = Arc::new(Setup::start("load", Options::default()).await);
    let next = Arc::new(AtomicUsize::new(0));
    let answered = Arc::new(Mutex::new(Vec::new()));
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|_| {
            let (setup, next, answered) = (setup.clone(), next.clone(), answered.clone());
            tokio::spawn(async move {
                loop {
                    let index = next.fetch_add(1, Ordering::Relaxed);
                    if index >= REQUESTS {
                        break;
                    }
                    let (status, response) = setup.post(&body(index)).await;
                    assert_eq!(status, StatusCode::OK, "request {index}: {response}");
                    let setup = setup.clone();
                    let checked =
                        tokio::task::spawn_blocking(move || setup.check_truth(index, &response))
                            .await
                            .expect("the check ran");
                    checked.unwrap_or_else(|e| panic!("{e}"));
                    answered.lock().expect("lock").push(index);
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("a worker failed");
    }
    let answered: BTreeSet<usize> = answered.lock().expect("lock").iter().copied().collect();
    assert_eq!(
        answered,
        (0..REQUESTS).collect(),
        "requests lost or answered twice"
    );
    assert_eq!(setup.decode.seen.lock().expect("lock").len(), REQUESTS);
}

#[test]
fn the_prefill_is_asked_for_one_token_and_the_decode_gets_the_kv_handle() {
    let cases = [
        (
            json!({"sampling_params": {"max_tokens": 9}}),
            json!({"max_tokens": 1}),
        ),
        (json!({}), json!({"max_tokens": 1})),
        (
            json!({"sampling_params": {"min_tokens": 0}}),
            json!({"max_tokens": 1, "min_tokens": 0}),
        ),
        (
            json!({"sampling_params": {"min_tokens": 1}}),
            json!({"max_tokens": 1, "min_tokens": 1}),
        ),
        (
            json!({"sampling_params": {"min_tokens": 7, "n": 2}}),
            json!({"max_tokens": 1, "min_tokens": 1, "n": 2}),
        ),
        (
            json!({"sampling_params": {"min_tokens": "7"}}),
            json!({"max_tokens": 1, "min_tokens": 1}),
        ),
        (
            json!({"stream": true, "sampling_params": {}}),
            json!({"max_tokens": 1}),
        ),
    ];
    for (request, params) in cases {
        let prefill = pd_router::prefill_request(&request).expect("an object");
        assert_eq!(prefill["sampling_params"], params, "{request}");
        assert_eq!(prefill["stream"], false, "{request}");
    }
    for bad in [json!([1]), json!({"sampling_params": [1]})] {
        let failure = pd_router::prefill_request(&bad).expect_err("refused");
        assert_eq!(failure.status, StatusCode::BAD_REQUEST);
    }
    let request = json!({"request_id": 1});
    let handle = json!({"remote_block_ids": [4, 5]});
    assert_eq!(
        pd_router::decode_request(
            request.clone(),
            &json!({"kv_transfer_params": handle}),
            false
        )
        .expect("an object"),
        json!({"request_id": 1, "kv_transfer_params": handle})
    );
    assert_eq!(
        pd_router::decode_request(request.clone(), &json!({"choices": []}), false)
            .expect("an object"),
        request
    );
}

/// The vLLM decode is asked for the rows from `max(P, S0)` on: `P` from the
/// request's `token_ids`, else the prefill's `usage.prompt_tokens`; a
/// request whose prompt length nothing gives is a 502, never a decode sent
/// no start (SPEC section 4a).
#[test]
fn the_vllm_decode_is_sent_the_prompt_start() {
    let prefill = json!({"usage": {"prompt_tokens": 7}});
    let cases = [
        // P from token_ids (the prefill's count is not used then).
        (
            json!({"token_ids": [1, 2, 3]}),
            json!({"routed_experts_prompt_start": 3}),
        ),
        // S0 above P wins (the engine refuses it, as it would colocated).
        (
            json!({"token_ids": [1, 2, 3], "sampling_params": {"routed_experts_prompt_start": 5}}),
            json!({"routed_experts_prompt_start": 5}),
        ),
        // S0 below P: P.
        (
            json!({"token_ids": [1, 2, 3], "sampling_params": {"routed_experts_prompt_start": 2, "max_tokens": 4}}),
            json!({"routed_experts_prompt_start": 3, "max_tokens": 4}),
        ),
        // No token_ids: the prefill's usage.
        (
            json!({"request_id": 1}),
            json!({"routed_experts_prompt_start": 7}),
        ),
    ];
    for (request, params) in cases {
        let sent = pd_router::decode_request(request.clone(), &prefill, true).expect("sent");
        assert_eq!(sent["sampling_params"], params, "{request}");
        assert_eq!(
            pd_router::decode_request(request.clone(), &prefill, false).expect("sent"),
            request,
            "off, the request is the client's"
        );
    }
    let unknown = pd_router::decode_request(json!({"request_id": 1}), &json!({}), true)
        .expect_err("no prompt length");
    assert_eq!(unknown.status, StatusCode::BAD_GATEWAY);
    assert!(unknown.message.contains("prompt"), "{}", unknown.message);
    let bad = pd_router::decode_request(
        json!({"token_ids": [1], "sampling_params": 3}),
        &prefill,
        true,
    )
    .expect_err("not an object");
    assert_eq!(bad.status, StatusCode::BAD_REQUEST);
}

/// The SGLang decode is asked for the rows from the prompt's end on; a
/// batch (one start for all its prompts, in SGLang 0.5.23) and a request by
/// text are sent as they are.
#[test]
fn the_sglang_decode_is_sent_the_start_len() {
    let cases = [
        (json!({"input_ids": [1, 2, 3]}), Some(json!(3))),
        (
            json!({"input_ids": [1, 2, 3], "routed_experts_start_len": 1}),
            Some(json!(3)),
        ),
        (json!({"input_ids": [[1, 2], [3, 4, 5, 6]]}), None),
        (
            json!({"input_ids": [[1, 2], [3, 4, 5, 6]], "routed_experts_start_len": 1}),
            Some(json!(1)),
        ),
        (json!({"text": "6 x 7?"}), None),
    ];
    for (request, start) in cases {
        let sent = pd_router::sglang_decode_request(request.clone());
        assert_eq!(
            sent.get("routed_experts_start_len"),
            start.as_ref(),
            "{request}"
        );
    }
}

/// An SGLang `/generate` body by `input_ids`: simulated request `index`,
/// a prompt of `prompt` tokens, rows asked from `start`.
fn sglang_ids_body(index: usize, prompt: u64, start: u64, stream: bool) -> Value {
    let ids: Vec<u64> = (0..prompt).map(|t| (t * 37 + index as u64) % 512).collect();
    json!({
        "rid": format!("req-{index}"),
        "input_ids": ids,
        "sampling_params": {"max_new_tokens": 96, "temperature": 0.0},
        "return_routed_experts": true,
        "routed_experts_start_len": start,
        "stream": stream,
    })
}

/// An SGLang answer's output, whole or streamed (the stream's finished
/// event, its rows' event), and its JSON events when streamed.
fn sglang_output(bytes: &[u8], stream: bool) -> (Value, Vec<Value>) {
    if !stream {
        return (json_of(bytes), Vec::new());
    }
    let (data, _) = streamed(bytes);
    assert_eq!(data.last().map(Vec::as_slice), Some(&b"[DONE]"[..]));
    let events: Vec<Value> = data[..data.len() - 1].iter().map(|d| json_of(d)).collect();
    let finished = events.last().cloned().expect("a finished event");
    (finished, events)
}

/// The rows of an SGLang output, decoded, and the length of their base64.
fn sglang_rows(output: &Value) -> (Vec<u8>, usize) {
    use base64::Engine as _;
    let text = output["meta_info"][ROUTED_EXPERTS]
        .as_str()
        .unwrap_or_else(|| panic!("no rows: {output}"));
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64 rows");
    (bytes, text.len())
}

/// Issue 36: the router asks the SGLang decode only for the rows it
/// computes. Single-prompt requests by `input_ids` of P tokens, rows asked
/// from the client's S0 (0, or prefix omission), streamed and not, go
/// through the router with its default configuration and with
/// `decode_start: false` (the client's body to both instances). The decode
/// mock answers from the `routed_experts_start_len` it is sent, as SGLang
/// 0.5.23 does, its prompt rows from a 300-slot pool that wraps within the
/// run. With the default the decode sends exactly the rows `[P, P + N - 1)`,
/// N - 1 rows, each the colocated server's; without, `[S0, P + N - 1)`, its
/// prompt rows zeros or stale rows of earlier requests; its answer (a whole
/// body, or a stream's bytes) is larger by exactly the prompt rows' base64,
/// and nothing else of it changes. Both merged answers equal the colocated
/// mock's answer to the client's body. A router whose
/// `sglang_decode_request` stops setting the start fails here (tried).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sglang_decode_sends_only_its_own_rows_when_sent_the_start_len() {
    // (simulated request, P, S0, streamed)
    let requests: [(usize, u64, u64, bool); 8] = [
        (0, 40, 0, false),
        (1, 64, 0, true),
        (2, 17, 5, false),
        (3, 90, 0, false),
        (4, 33, 0, true),
        (5, 120, 60, false),
        (6, 8, 0, true),
        (7, 51, 0, false),
    ];
    let row = (SGLANG_SHAPE.width() * 4) as usize;
    // Per configuration, per request: the merged answer (its events when
    // streamed), the decode's bytes, and the decode's rows.
    let mut runs = Vec::new();
    for decode_start in [true, false] {
        let setup = Setup::start(
            &format!("sglang-start-len-{decode_start}"),
            Options {
                decode_start,
                sglang_pool: 300,
                ..Options::default()
            },
        )
        .await;
        let mut run = Vec::new();
        for &(index, prompt, start, stream) in &requests {
            let body = sglang_ids_body(index, prompt, start, stream);
            let content = if stream {
                "text/event-stream"
            } else {
                "application/json"
            };
            let merged = setup.post_sglang_ok(&body, content).await;
            let colocated = setup.post_colocated_sglang_ok(&body).await;
            let (merged, merged_events) = sglang_output(&merged, stream);
            let (colocated, colocated_events) = sglang_output(&colocated, stream);
            let label = format!("decode_start {decode_start}, request {index}");
            assert_eq!(merged, colocated, "{label}");
            assert_eq!(merged_events, colocated_events, "{label}");
            let sent = setup.decode.seen.lock().expect("lock").last().cloned();
            let decode_bytes = setup
                .decode
                .answered
                .lock()
                .expect("lock")
                .back()
                .cloned()
                .expect("the decode answered");
            let (decode, _) = sglang_output(&decode_bytes, stream);
            run.push((merged, sent, decode_bytes, decode, colocated));
        }
        runs.push(run);
    }
    let (mut zeros, mut stale) = (0, 0);
    let mut totals = [0usize; 2];
    let mut rows_totals = [0usize; 2];
    for (k, &(index, prompt, start, _)) in requests.iter().enumerate() {
        let (with, without) = (&runs[0][k], &runs[1][k]);
        let label = format!("request {index} (P {prompt}, S0 {start})");
        let colocated = &with.4;
        let n = colocated["meta_info"]["completion_tokens"]
            .as_u64()
            .expect("N");
        let b64 = |rows: u64| (rows as usize * row).div_ceil(3) * 4;
        // The bytes the decode sent (its body, or its stream's bytes):
        // smaller with the start by the prompt rows' base64, exactly.
        let (small, large) = (with.2.len(), without.2.len());
        let prompt_chars = b64(prompt - start + n - 1) - b64(n - 1);
        assert_eq!(
            large.checked_sub(small),
            Some(prompt_chars),
            "{label}: the decode sent {small} B with the router's start and {large} B without; \
             expected {prompt_chars} B less with it (the {} prompt rows' base64)",
            prompt - start
        );
        // With the start: exactly the colocated rows [P, P + N - 1).
        let (truth, _) = sglang_rows(colocated);
        let prompt_rows = (prompt - start) as usize * row;
        assert_eq!(
            truth.len(),
            (prompt - start + n - 1) as usize * row,
            "{label}"
        );
        let (own, own_chars) = sglang_rows(&with.3);
        assert_eq!(own.len(), (n - 1) as usize * row, "{label}: N - 1 rows");
        assert_eq!(own_chars, b64(n - 1), "{label}");
        assert_eq!(own, truth[prompt_rows..], "{label}");
        // Without: [S0, P + N - 1), the prompt's rows never computed there.
        let (full, full_chars) = sglang_rows(&without.3);
        assert_eq!(full_chars, b64(prompt - start + n - 1), "{label}");
        assert_eq!(full[prompt_rows..], own[..], "{label}");
        for (x, (got, want)) in full[..prompt_rows]
            .chunks(row)
            .zip(truth[..prompt_rows].chunks(row))
            .enumerate()
        {
            // Rows of 8 x 4 of 64 experts: a stale row is the truth with a
            // chance below 10^-40.
            assert_ne!(got, want, "{label}: prompt row {x} is the truth");
            if got.iter().all(|&b| b == 0) {
                zeros += 1;
            } else {
                stale += 1;
            }
        }
        // What each decode was sent; the merged answers are the same.
        let sent_start =
            |sent: &Option<Value>| sent.as_ref().expect("sent")["routed_experts_start_len"].clone();
        assert_eq!(sent_start(&with.1), json!(prompt), "{label}");
        assert_eq!(sent_start(&without.1), json!(start), "{label}");
        assert_eq!(with.0, without.0, "{label}: the merged answers differ");
        totals[0] += small;
        totals[1] += large;
        rows_totals[0] += own_chars;
        rows_totals[1] += full_chars;
    }
    // The pool wrapped: the first answers' prompt rows were zeros, later
    // ones stale rows of earlier requests.
    assert!(zeros > 0 && stale > 0, "{zeros} zero rows, {stale} stale");
    assert!(totals[0] < totals[1]);
    eprintln!(
        "decode answers: {} B with the start ({} base64 characters of rows), {} B without ({})",
        totals[0], rows_totals[0], totals[1], rows_totals[1]
    );
}

/// A file of the real SGLang's answers (tests/fixtures/engines/sglang/).
fn engine_fixture(name: &str) -> Vec<u8> {
    let at = format!(
        "{}/tests/fixtures/engines/sglang/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}"))
}

/// The kind of each JSON value: what two answers' shapes are compared by.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An object's keys and the kinds of their values, an object's in turn
/// (arrays by their first element), one level of `meta_info` deep and
/// more.
fn keys_and_kinds(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (key, value) in map {
                out.insert(format!("{at}.{key}: {}", kind(value)));
                keys_and_kinds(value, &format!("{at}.{key}"), out);
            }
        }
        Value::Array(items) => {
            if let Some(first) = items.first() {
                keys_and_kinds(first, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

/// What an SGLang output's rows are, read as SGLang's reference decoder
/// reads them (`np.frombuffer(b64decode(s), "<i4").reshape(-1, layers,
/// top_k)`): their count, which are all zeros, and that every other row
/// names distinct experts below `experts` in each layer (int32
/// little-endian: other byte orders give ids far out of range).
fn rows_layout(output: &Value, layers: usize, top_k: usize, experts: i32) -> (usize, Vec<bool>) {
    let (bytes, chars) = sglang_rows(output);
    let text = output["meta_info"][ROUTED_EXPERTS].as_str().expect("rows");
    assert_eq!(chars % 4, 0, "standard base64 with padding: {text}");
    let width = layers * top_k * 4;
    assert_eq!(bytes.len() % width, 0, "whole rows of int32 ids");
    let ids: Vec<i32> = bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().expect("4 bytes")))
        .collect();
    let mut zeros = Vec::new();
    for row in ids.chunks(layers * top_k) {
        let zero = row.iter().all(|&id| id == 0);
        if !zero {
            for layer in row.chunks(top_k) {
                let distinct: BTreeSet<_> = layer.iter().collect();
                assert_eq!(
                    distinct.len(),
                    top_k,
                    "a layer names an expert twice: {row:?}"
                );
                assert!(layer.iter().all(|id| (0..experts).contains(id)), "{row:?}");
            }
        }
        zeros.push(zero);
    }
    (bytes.len() / width, zeros)
}

/// Issue 36: the SGLang mocks answer with the keys, value kinds and rows
/// layout of SGLang 0.5.23's answers. The fixtures' request (12
/// `input_ids`, 6 generated, no start: the engine's default 0) is sent to
/// fresh mocks through the router, with its start and without, whole and
/// streamed, and each instance's answer is held to the engine's: the same
/// `meta_info` keys and kinds (`text` aside: the fixtures' servers ran
/// `--skip-tokenizer-init`, which leaves it out, and the mocks write it as
/// a server with a tokenizer does), rows of standard base64 of int32
/// little-endian ids, as many as the counts place from the start sent;
/// the decode sent no start answers zeros for every prompt row, as the
/// fresh engine did (`decode_full_length_fresh.json`); a stream's first,
/// middle and finished events have the engine's keys (but one, named
/// below), and only the last carries rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sglang_mocks_answer_with_the_engines_keys_and_layout() {
    let real = |name: &str| json_of(&engine_fixture(name));
    let request = real("request.json");
    let prompt = request["input_ids"].as_array().expect("input_ids").len();
    assert_eq!(prompt, 12);
    let (layers, top_k, experts) = (
        SGLANG_SHAPE.layers as usize,
        SGLANG_SHAPE.top_k as usize,
        SGLANG_SHAPE.experts as i32,
    );
    let shape_of = |output: &Value| {
        let mut keys = BTreeSet::new();
        let mut output = output.clone();
        if let Some(object) = output.as_object_mut() {
            object.remove("text");
        }
        // `cached_tokens_details` is null without a prefix-cache hit and
        // `{"device", "host"}` with one (the fixtures have both): either
        // reads as null.
        if let Some(details) = output.pointer_mut("/meta_info/cached_tokens_details") {
            let hit = details
                .as_object()
                .is_some_and(|d| d.len() == 2 && d["device"].is_u64() && d["host"].is_u64());
            assert!(hit || details.is_null(), "{details}");
            *details = Value::Null;
        }
        keys_and_kinds(&output, "", &mut keys);
        keys
    };
    // The engine's answers: 3 x 2 rows of 8 experts.
    let engine_layout = |name: &str| rows_layout(&real(name), 3, 2, 8);
    let index = 3;
    let completion = |answer: &Value| answer["meta_info"]["completion_tokens"].as_u64();
    for decode_start in [false, true] {
        let setup = Setup::start(
            &format!("sglang-engine-keys-{decode_start}"),
            Options {
                decode_start,
                ..Options::default()
            },
        )
        .await;
        let mut body = request.clone();
        body["rid"] = json!(format!("req-{index}"));
        body["routed_experts_start_len"] = json!(0);
        let merged = setup.post_sglang_ok(&body, "application/json").await;
        let last = |mock: &Mock| {
            json_of(
                mock.answered
                    .lock()
                    .expect("lock")
                    .back()
                    .expect("an answer"),
            )
        };
        let (prefill, decode) = (last(&setup.prefill), last(&setup.decode));
        let colocated = setup.post_colocated_sglang_ok(&body).await;
        let colocated = json_of(&colocated);
        assert_eq!(json_of(&merged), colocated);
        let n = completion(&colocated).expect("N") as usize;
        let decode_name = if decode_start {
            "decode_from_prompt.json"
        } else {
            "decode_full_length_fresh.json"
        };
        for (mock, name) in [
            (&prefill, "prefill.json"),
            (&decode, decode_name),
            (&colocated, "colocated.json"),
        ] {
            assert_eq!(shape_of(mock), shape_of(&real(name)), "{name}: {mock}");
        }
        // The rows: as many as the counts place from the start sent.
        let (real_rows, real_zeros) = engine_layout("prefill.json");
        assert_eq!((real_rows, real_zeros.iter().any(|&z| z)), (12, false));
        let (rows, zeros) = rows_layout(&prefill, layers, top_k, experts);
        assert_eq!((rows, zeros.iter().any(|&z| z)), (prompt, false));
        assert_eq!(completion(&prefill), Some(1));
        assert_eq!(
            prefill["meta_info"]["finish_reason"],
            real("prefill.json")["meta_info"]["finish_reason"]
        );
        let (real_rows, real_zeros) = engine_layout("colocated.json");
        assert_eq!((real_rows, real_zeros.iter().any(|&z| z)), (17, false));
        let (rows, zeros) = rows_layout(&colocated, layers, top_k, experts);
        assert_eq!((rows, zeros.iter().any(|&z| z)), (prompt + n - 1, false));
        let (real_rows, real_zeros) = engine_layout(decode_name);
        let (rows, zeros) = rows_layout(&decode, layers, top_k, experts);
        if decode_start {
            assert_eq!((real_rows, real_zeros.iter().any(|&z| z)), (5, false));
            assert_eq!((rows, zeros.iter().any(|&z| z)), (n - 1, false));
        } else {
            // 12 zero prompt rows, then the decode's own.
            assert_eq!(real_rows, 17);
            assert_eq!(real_zeros, [vec![true; 12], vec![false; 5]].concat());
            assert_eq!(rows, prompt + n - 1);
            assert_eq!(zeros, [vec![true; prompt], vec![false; n - 1]].concat());
        }
        if decode_start {
            continue;
        }
        // The decode's stream, without the router's start: its prompt's
        // slots are ones no request wrote yet.
        let mut body = body.clone();
        body["stream"] = json!(true);
        let stitched = setup.post_sglang_ok(&body, "text/event-stream").await;
        let ours = setup
            .decode
            .answered
            .lock()
            .expect("lock")
            .back()
            .cloned()
            .expect("a stream");
        let (_, ours) = sglang_output(&ours, true);
        let (_, theirs) = sglang_output(&engine_fixture("decode_stream.sse"), true);
        assert!(
            ours.len() >= 3,
            "{} events: pick a request of 3 tokens or more",
            ours.len()
        );
        let events = |events: &[Value]| {
            let (first, rest) = events.split_first().expect("events");
            let (last, middle) = rest.split_last().expect("two events");
            let middle: BTreeSet<String> = middle.iter().flat_map(shape_of).collect();
            (shape_of(first), middle, shape_of(last))
        };
        let (first, middle, mut last) = events(&ours);
        // The one difference kept: the mock's finished event is its whole
        // answer (a stitched stream's is compared with a colocated whole
        // answer), which says when it was sent; the engine's says so on
        // its first event only.
        assert!(last.remove(".meta_info.response_sent_to_client_ts: number"));
        assert_eq!((first, middle, last), events(&theirs));
        for (k, event) in ours.iter().enumerate() {
            let has_rows = event["meta_info"].get(ROUTED_EXPERTS).is_some();
            assert_eq!(has_rows, k + 1 == ours.len(), "event {k}");
        }
        let (rows, _) = rows_layout(ours.last().expect("finished"), layers, top_k, experts);
        assert_eq!(rows, prompt + n - 1);
        let (finished, _) = sglang_output(&stitched, true);
        assert_eq!(
            rows_layout(&finished, layers, top_k, experts).0,
            prompt + n - 1
        );
    }
}

// SGLang's `/generate` through the router: both instances at once (the mocks
// meet on the bootstrap room, as SGLang's do, so a router that sent them one
// after the other would get a 500), rows placed by the counts.

/// An SGLang `/generate` body for simulated request `index`: one prompt,
/// or a batch of `batch`.
fn sglang_body(index: usize, batch: Option<usize>, stream: bool) -> Value {
    let text = match batch {
        None => json!("What is 6 x 7?"),
        Some(n) => json!(vec!["What is 6 x 7?"; n]),
    };
    json!({
        "rid": format!("req-{index}"),
        "text": text,
        "sampling_params": {"max_new_tokens": 96, "temperature": 1.0},
        "return_routed_experts": true,
        "stream": stream,
    })
}

/// The JSON of an SGLang body, or a panic that shows it.
fn json_of(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap_or_else(|e| {
        panic!(
            "the router's body is not JSON ({e}): {}",
            String::from_utf8_lossy(bytes)
        )
    })
}

/// What both mocks were sent: the same body plus the same bootstrap fields
/// (the prefill's not streamed), for every request.
fn check_sglang_requests(setup: &Setup, sent: &[Value]) {
    let prefill_seen = setup.prefill.seen.lock().expect("lock").clone();
    let decode_seen = setup.decode.seen.lock().expect("lock").clone();
    assert_eq!(prefill_seen.len(), sent.len());
    assert_eq!(decode_seen.len(), sent.len());
    let mut rooms = BTreeSet::new();
    for ((p, d), sent) in prefill_seen.iter().zip(&decode_seen).zip(sent) {
        let batch = sent["text"].as_array().map(Vec::len);
        for key in ["bootstrap_host", "bootstrap_port", "bootstrap_room"] {
            assert_eq!(p[key], d[key], "{key} differs between the instances");
            assert_eq!(p[key].is_array(), batch.is_some(), "{key}: {}", p[key]);
        }
        let one = |v: &Value| match batch {
            None => vec![v.clone()],
            Some(_) => v.as_array().cloned().unwrap_or_default(),
        };
        assert!(one(&p["bootstrap_host"]).iter().all(|h| h == "127.0.0.1"));
        let port = setup.prefill_port;
        assert!(one(&p["bootstrap_port"]).iter().all(|h| h == port));
        for room in one(&p["bootstrap_room"]) {
            let room = room.as_u64().expect("a room is a u64");
            assert!(room < 1 << 63 && rooms.insert(room), "room {room} reused");
        }
        let mut expected = sent.clone();
        for key in ["bootstrap_host", "bootstrap_port", "bootstrap_room"] {
            expected[key] = d[key].clone();
        }
        assert_eq!(d, &expected, "the decode is sent the client's body");
        expected["stream"] = json!(false);
        assert_eq!(p, &expected, "the prefill is sent the same, not streamed");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_answers_are_stitched_to_the_colocated_answer_in_both_conventions() {
    for convention in [Convention::FullLength, Convention::SuffixOnly] {
        let setup = Setup::sglang(&format!("sglang-{convention:?}"), convention).await;
        let mut sent = Vec::new();
        for index in 0..8 {
            let batch = (index % 3 == 2).then_some(1 + index % 4);
            let body = sglang_body(index, batch, false);
            let bytes = setup.post_sglang_ok(&body, "application/json").await;
            // The whole answer, not only its rows, is the colocated server's.
            let colocated = setup.deployment.sglang_answers(index, batch).colocated;
            assert_eq!(json_of(&bytes), colocated, "{convention:?} request {index}");
            sent.push(body);
        }
        check_sglang_requests(&setup, &sent);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_streams_are_stitched_to_the_colocated_answer_in_both_conventions() {
    for convention in [Convention::FullLength, Convention::SuffixOnly] {
        let setup = Setup::sglang(&format!("sglang-stream-{convention:?}"), convention).await;
        let mut sent = Vec::new();
        for index in 0..6 {
            let body = sglang_body(index, None, true);
            let bytes = setup.post_sglang_ok(&body, "text/event-stream").await;
            let (data, _) = streamed(&bytes);
            let colocated = setup.deployment.sglang_answers(index, None).colocated;
            let completion = colocated["meta_info"]["completion_tokens"]
                .as_u64()
                .expect("counts");
            // One event per generated token, then [DONE]; the last carries
            // the rows, which are now the colocated server's.
            assert_eq!(data.len() as u64, completion + 1, "{convention:?} {index}");
            assert_eq!(data.last().map(Vec::as_slice), Some(&b"[DONE]"[..]));
            let finished = json_of(&data[data.len() - 2]);
            assert_eq!(finished, colocated, "{convention:?} request {index}");
            for event in &data[..data.len() - 2] {
                assert!(json_of(event)["meta_info"].get(ROUTED_EXPERTS).is_none());
            }
            sent.push(body);
        }
        check_sglang_requests(&setup, &sent);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstitched_sglang_answers_are_not_the_colocated_ones() {
    // The checks above can fail: the decode's own rows are not the truth
    // (its prompt rows are wrong, or the prompt's are missing).
    for convention in [Convention::FullLength, Convention::SuffixOnly] {
        let setup = Setup::start(
            &format!("sglang-unstitched-{convention:?}"),
            Options {
                convention,
                stitch: false,
                ..Options::default()
            },
        )
        .await;
        let mut differ = 0;
        for index in 0..6 {
            let (status, _, bytes) = setup.post_sglang(&sglang_body(index, None, false)).await;
            assert_eq!(status, StatusCode::OK);
            let colocated = setup.deployment.sglang_answers(index, None).colocated;
            differ += usize::from(json_of(&bytes) != colocated);
        }
        // A prefill without rows (start == prompt) leaves nothing to stitch.
        let empty = (0..6)
            .filter(|&i| {
                let d = &setup.deployment.sglang_draws(i, None)[0];
                d.start == d.prompt_len()
            })
            .count();
        assert_eq!(differ, 6 - empty, "{convention:?}");
        assert!(differ > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_row_shape_sglang_pairs_are_stitched_or_refused_never_guessed() {
    let setup = Setup::start(
        "sglang-no-shape",
        Options {
            row_shape: None,
            ..Options::default()
        },
    )
    .await;
    let (mut merged, mut refused) = (0, 0);
    for index in 0..16 {
        let (status, _, bytes) = setup.post_sglang(&sglang_body(index, None, false)).await;
        let answer = json_of(&bytes);
        if status == StatusCode::OK {
            let colocated = setup.deployment.sglang_answers(index, None).colocated;
            assert_eq!(answer, colocated, "request {index}");
            merged += 1;
        } else {
            assert_eq!(status, StatusCode::BAD_GATEWAY);
            assert_eq!(answer["error"]["type"], "stitch_error");
            assert!(message(&answer).contains("ambiguous"), "{answer}");
            refused += 1;
        }
    }
    assert!(merged > 0, "{merged} merged, {refused} refused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sglang_backends_that_fail_are_502_or_504() {
    let cases = [
        (Fault::Status500, Fault::None, StatusCode::BAD_GATEWAY),
        (Fault::None, Fault::Status500, StatusCode::BAD_GATEWAY),
        (Fault::Truncated, Fault::None, StatusCode::BAD_GATEWAY),
        (
            Fault::None,
            Fault::Slow(Duration::from_millis(1500)),
            StatusCode::GATEWAY_TIMEOUT,
        ),
    ];
    for (i, (prefill_fault, decode_fault, expected)) in cases.into_iter().enumerate() {
        let setup = Setup::start(
            &format!("sglang-fault-{i}"),
            Options {
                prefill_fault,
                decode_fault,
                timeout: Duration::from_millis(700),
                ..Options::default()
            },
        )
        .await;
        let started = Instant::now();
        let (status, _, bytes) = setup.post_sglang(&sglang_body(0, None, false)).await;
        assert_eq!(
            status,
            expected,
            "{prefill_fault:?}/{decode_fault:?}: {}",
            String::from_utf8_lossy(&bytes)
        );
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // A decode without rows beside a prefill with: named, a 502.
    let setup = Setup::start(
        "sglang-no-routing",
        Options {
            decode_fault: Fault::NoRouting,
            ..Options::default()
        },
    )
    .await;
    let (status, _, bytes) = setup.post_sglang(&sglang_body(1, None, false)).await;
    let answer = json_of(&bytes);
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{answer}");
    assert_eq!(answer["error"]["type"], "stitch_error");
}

#[test]
fn sglang_requests_get_the_bootstrap_fields_once_per_prompt() {
    let one =
        pd_router::sglang_request(json!({"text": "hi"}), "10.0.0.1", 8998).expect("an object");
    assert_eq!(one["bootstrap_host"], "10.0.0.1");
    assert_eq!(one["bootstrap_port"], 8998);
    assert!(one["bootstrap_room"].as_u64().is_some_and(|r| r < 1 << 63));
    let batch =
        pd_router::sglang_request(json!({"text": ["a", "b", "c"]}), "h", 1).expect("an object");
    assert_eq!(batch["bootstrap_host"], json!(["h", "h", "h"]));
    assert_eq!(batch["bootstrap_port"], json!([1, 1, 1]));
    let rooms = batch["bootstrap_room"].as_array().expect("a list");
    assert_eq!(
        rooms
            .iter()
            .filter_map(Value::as_u64)
            .collect::<BTreeSet<_>>()
            .len(),
        3,
        "rooms differ"
    );
    let ids =
        pd_router::sglang_request(json!({"input_ids": [[1, 2], [3]]}), "h", 1).expect("an object");
    assert_eq!(ids["bootstrap_port"], json!([1, 1]));
    let flat = pd_router::sglang_request(json!({"input_ids": [1, 2]}), "h", 1).expect("an object");
    assert_eq!(flat["bootstrap_port"], 1);
    let refused = pd_router::sglang_request(json!([1]), "h", 1).expect_err("not an object");
    assert_eq!(refused.status, StatusCode::BAD_REQUEST);
}

/// An SGLang stream does not wait for the prefill: with a prefill that
/// answers 1.5 s after it met the decode in the bootstrap room, the
/// router's first bytes (the decode's first token events) come long before
/// it, and the rows event comes stitched once it has answered, the whole
/// stream the colocated server's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sglang_stream_starts_before_the_prefill_answers() {
    const LATE: Duration = Duration::from_millis(1500);
    let setup = Setup::start(
        "sglang-late-prefill",
        Options {
            prefill_fault: Fault::Late(LATE),
            ..Options::default()
        },
    )
    .await;
    for index in 0..2 {
        let body = sglang_body(index, None, true);
        let started = Instant::now();
        let mut response = client()
            .post(&setup.sglang_url)
            .header("content-type", "application/json")
            .body(serde_json::to_vec(&body).expect("json"))
            .send()
            .await
            .expect("the router answers");
        assert_eq!(response.status(), StatusCode::OK);
        let mut bytes: Vec<u8> = Vec::new();
        let mut first = None;
        while let Some(chunk) = response.chunk().await.expect("the stream arrives") {
            first.get_or_insert_with(|| started.elapsed());
            bytes.extend_from_slice(&chunk);
        }
        let (first, whole) = (first.expect("some bytes"), started.elapsed());
        assert!(
            first < LATE / 2,
            "request {index}: the first byte came after {first:?}, the prefill answers after {LATE:?}"
        );
        assert!(
            whole >= LATE,
            "request {index}: the rows event did not wait ({whole:?})"
        );
        let (data, _) = streamed(&bytes);
        let colocated = setup.deployment.sglang_answers(index, None).colocated;
        assert_eq!(data.last().map(Vec::as_slice), Some(&b"[DONE]"[..]));
        assert_eq!(json_of(&data[data.len() - 2]), colocated, "request {index}");
    }
}

/// A file of the real vLLM 0.32's three-turn episode
/// (tests/fixtures/engines/vllm/episode/).
fn vllm_episode_fixture(name: &str) -> Value {
    let at = format!(
        "{}/tests/fixtures/engines/vllm/episode/{name}",
        env!("CARGO_MANIFEST_DIR")
    );
    json_of(&std::fs::read(&at).unwrap_or_else(|e| panic!("{at}: {e}")))
}

/// The vLLM mocks answer a real episode turn's requests (turn 1's, full
/// and delta) as vLLM 0.32 answered them: choice 0 says its `token_ids`
/// in every form, whole and streamed, and its rows start where the
/// engine's do (the colocated server and the prefill at the
/// `routed_experts_prompt_start` sent, 0 unless sent) and end where the
/// counts place them, `P + N - 1` (`P` for a prefill, which generates one
/// token). The mocks' `N` is their own draw's, not the body's `max_tokens`
/// (the engine's, with `ignore_eos`); the span is held to the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vllm_mocks_answer_a_real_episode_turn_with_its_row_span() {
    // (P, N, the rows' start, their end) of choice 0 of `answer`.
    let span = |answer: &Value, dir: &std::path::Path| {
        let p = answer["usage"]["prompt_tokens"]
            .as_u64()
            .unwrap_or_else(|| panic!("usage.prompt_tokens: {answer}"));
        let n = answer["choices"][0]["token_ids"]
            .as_array()
            .unwrap_or_else(|| panic!("choice 0 says no token_ids"))
            .len() as u64;
        let rows = gather(answer, 0, ROUTED_EXPERTS, dir)
            .unwrap_or_else(|e| panic!("{e}"))
            .positions();
        (p, n, rows.start(), rows.end())
    };
    let none = std::path::Path::new(".");
    // The engine's answers: from the start asked, to the counts' end.
    let cases = [
        ("t1/request.json", "t1/colocated.json", Role::Colocated),
        (
            "t1/delta-request.json",
            "t1/delta-colocated.json",
            Role::Colocated,
        ),
        (
            "t1/delta-prefill.request.json",
            "t1/delta-prefill.json",
            Role::Prefill,
        ),
    ];
    let expected = |request: &Value, p: u64, n: u64| {
        let start = request["sampling_params"]["routed_experts_prompt_start"]
            .as_u64()
            .unwrap_or(0);
        (start, p + n - 1)
    };
    for (request, answer, _) in cases {
        let (request, answer) = (vllm_episode_fixture(request), vllm_episode_fixture(answer));
        let (p, n, first, end) = span(&answer, none);
        assert_eq!(
            (first, end),
            expected(&request, p, n),
            "the engine's {answer}"
        );
    }
    for &mode in Engine::Vllm.wires() {
        let name = format!("vllm-episode-{}", mode.name().replace(' ', "-"));
        let setup = Setup::start(
            &name,
            Options {
                forms: Forms::One(mode),
                ..Options::default()
            },
        )
        .await;
        let colocated = setup
            .colocated_sglang_url
            .replace("/generate", "/inference/v1/generate");
        let prefill = format!(
            "http://127.0.0.1:{}/inference/v1/generate",
            setup.prefill_port
        );
        for (request, _, role) in cases {
            let mut body = vllm_episode_fixture(request);
            body["request_id"] = json!("req-3");
            let url = if role == Role::Prefill {
                &prefill
            } else {
                &colocated
            };
            for stream in [false, true] {
                if stream && role == Role::Prefill {
                    continue; // a prefill is not streamed
                }
                body["stream"] = json!(stream);
                let bytes = serde_json::to_vec(&body).expect("JSON");
                let (status, _, answer) = setup.post_to(url, bytes).await;
                assert_eq!(
                    status,
                    StatusCode::OK,
                    "{}",
                    String::from_utf8_lossy(&answer)
                );
                let answer = if stream {
                    streamed(&answer).1
                } else {
                    json_of(&answer)
                };
                let (p, n, first, end) = span(&answer, &setup.dir);
                let sent = body["token_ids"].as_array().expect("token_ids").len();
                assert_eq!(p, sent as u64, "{} {request}", mode.name());
                assert_eq!(
                    (first, end),
                    expected(&body, p, n),
                    "{} {request} stream {stream}",
                    mode.name()
                );
            }
        }
    }
}
