//! A P/D router that stitches routed experts: the request path a router crate
//! would build with `pd-stitch`, on `axum`, `tokio` and `reqwest`.
//!
//! `POST /inference/v1/generate`:
//!
//! 1. the request goes to the **prefill** backend asking for one token
//!    (`sampling_params.max_tokens = 1`, `min_tokens` lowered to at most 1,
//!    `stream: false`): it computes the prompt, and its routed experts;
//! 2. the original request goes to the **decode** backend (with the prefill's
//!    `kv_transfer_params`, when it returned any, as vLLM's P/D connectors
//!    expect), which computes the completion;
//! 3. [`pd_stitch::bytes::merge_routed_experts_for_pd`] (or a strict
//!    [`Stitcher`]'s `merge_bytes` with `Stitch::ForPd`, with `--strict`) stitches the
//!    prefill's rows into the decode's response, as bytes: the decode's body
//!    is never parsed into a tree nor serialized again, and only its stitched
//!    values change. The result is returned.
//!
//! A streamed request (`"stream": true`) is stitched on the way: the decode's
//! events go to the client as they arrive, through a
//! [`pd_stitch::stream::StreamStitcher`] built from the prefill's body, which
//! rewrites only the event that carries rows (a stitch error mid-stream ends
//! the stream with an error event). A merge error is a 502 naming the
//! error; an unreachable or failing backend a 502, a backend slower than
//! `--timeout` a 504. Errors are JSON: `{"error": {"message", "type", "code"}}`.
//!
//! ```text
//! cargo run --example pd_router -- --prefill http://127.0.0.1:8001 --decode http://127.0.0.1:8002
//! ```
//!
//! `POST /generate` is SGLang's: both backends are sent the client's body at
//! once, with `bootstrap_host` (the prefill's host), `bootstrap_port`
//! (`--bootstrap-port`) and a fresh `bootstrap_room` added (a list of each
//! for a batch), as SGLang's own P/D router sends them; the prefill's is not
//! streamed, so that its answer is one JSON body. The same merge (or stream
//! stitcher) finds SGLang's rows by their keys; `--row-shape LAYERSxTOP_K`
//! gives it the model's rows, without which a pair whose counts leave the
//! positions ambiguous is a 502 (docs/SPEC.md section 10). A streamed
//! request's events go out as the decode sends them, before the prefill
//! has answered (SGLang's prefill often answers after the decode's first
//! bytes): the stream stitcher is made
//! [`awaiting_prefill`](pd_stitch::stream::StreamStitcher::awaiting_prefill),
//! and given the prefill's body when it comes; only the rows event waits.
//!
//! ```text
//! cargo run --example pd_router -- --prefill http://127.0.0.1:30000 \
//!     --decode http://127.0.0.1:30001 --row-shape 48x8
//! ```
//!
//! `tests/it/router_http.rs` runs it against mock backends (`examples/mock_backend.rs`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Parser;
use futures_util::StreamExt;
use pd_stitch::stream::StreamStitcher;
use pd_stitch::{Error, ErrorKind, Stitcher};
use serde_json::{json, Value};

/// Where the backends are and how the router treats them.
#[derive(Clone, Debug)]
pub struct Config {
    /// The prefill backend's base URL, e.g. `http://127.0.0.1:8001`.
    pub prefill: String,
    /// The decode backend's base URL.
    pub decode: String,
    /// How long a backend may take to answer, body included.
    pub timeout: Duration,
    /// Whether to stitch; off, the router is the same but skips the merge
    /// (to measure what stitching costs on the request path).
    pub stitch: bool,
    /// Whether to stitch strictly ([`pd_stitch::Stitcher::strict`]): a merged
    /// layout a trainer would misread is a 502 instead of a 200.
    pub strict: bool,
    /// The model's `(layers, top_k)`, which places SGLang's rows
    /// ([`pd_stitch::Stitcher::row_shape`]); without it, a pair whose
    /// positions its counts leave ambiguous is a 502.
    pub row_shape: Option<(u64, u64)>,
    /// The SGLang prefill's bootstrap port (`--disaggregation-bootstrap-port`,
    /// 8998 unless set), which the decode is told to pull the KV cache from.
    pub bootstrap_port: u16,
    /// Whether to ask the decode only for the rows it computes (on unless
    /// `--no-decode-start`): vLLM's `sampling_params.routed_experts_prompt_start`
    /// and SGLang's `routed_experts_start_len` set to the prompt's length
    /// (see [`decode_request`], [`sglang_decode_request`]).
    pub decode_start: bool,
}

/// The router's state: its configuration and one pooled HTTP client.
struct Router {
    config: Config,
    client: reqwest::Client,
}

/// The router's HTTP routes.
///
/// # Errors
///
/// When the HTTP client cannot be built.
pub fn app(config: Config) -> Result<axum::Router, reqwest::Error> {
    // A passed-through stream may last longer than any one answer: the client
    // bounds each read; whole answers get a total deadline per request.
    let client = reqwest::Client::builder()
        .connect_timeout(config.timeout)
        .read_timeout(config.timeout)
        .build()?;
    Ok(axum::Router::new()
        .route("/inference/v1/generate", post(generate))
        .route("/generate", post(sglang_generate))
        .with_state(Arc::new(Router { config, client })))
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> std::io::Result<()> {
    axum::serve(listener, app).await
}

/// A request that failed: its status, a short kind, and a message that says
/// what happened.
#[derive(Debug)]
pub struct Failure {
    /// The HTTP status the client gets.
    pub status: StatusCode,
    /// `invalid_request`, `backend_error`, `backend_timeout`, `stitch_error` or
    /// `prompt_length`.
    pub kind: &'static str,
    /// What happened, for the client and the log.
    pub message: String,
}

impl Failure {
    fn new(status: StatusCode, kind: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            status,
            kind,
            message: message.into(),
        }
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = json!({"error": {
            "message": self.message, "type": self.kind, "code": self.status.as_u16()}});
        (self.status, axum::Json(body)).into_response()
    }
}

/// Which backend a call went to, for messages.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Prefill,
    Decode,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Prefill => "prefill",
            Backend::Decode => "decode",
        }
    }
}

/// A merge error as the client sees it: a backend's body that is not JSON
/// is the backend's failure, anything else a stitch error; both 502.
fn stitch_failure(backend: Backend, e: Error) -> Failure {
    match e.kind() {
        ErrorKind::Json => Failure::new(
            StatusCode::BAD_GATEWAY,
            "backend_error",
            format!("the {} backend's response is not JSON: {e}", backend.name()),
        ),
        _ => Failure::new(
            StatusCode::BAD_GATEWAY,
            "stitch_error",
            format!("cannot stitch the prefill's and the decode's responses: {e}"),
        ),
    }
}

/// The prefill's answer to a request whose decode streams: in hand, or
/// still coming (SGLang's pair is sent both requests at once, and its
/// prefill may answer after the decode's first bytes).
enum Prefill {
    Given,
    Coming(tokio::task::JoinHandle<Result<Vec<u8>, Failure>>),
}

/// The prefill's task's answer: its body, or why there is none.
fn joined(
    answer: Result<Result<Vec<u8>, Failure>, tokio::task::JoinError>,
) -> Result<Vec<u8>, Failure> {
    answer.unwrap_or_else(|e| {
        Err(Failure::new(
            StatusCode::BAD_GATEWAY,
            "backend_error",
            format!("the prefill request did not complete: {e}"),
        ))
    })
}

/// The event that ends a stream that failed after its status went out,
/// as vLLM reports an error on a stream (`data: {"error": ...}`, then
/// `[DONE]`).
fn error_event(kind: &str, message: &str) -> Vec<u8> {
    let event = json!({"error": {"message": message, "type": kind, "code": 502}});
    format!("data: {event}\n\ndata: [DONE]\n\n").into_bytes()
}

/// One relayed stream: the decode's body, its stitcher, and the prefill.
struct Relay<S> {
    upstream: std::pin::Pin<Box<S>>,
    stitcher: StreamStitcher,
    prefill: Prefill,
}

/// What one read of a relayed stream came to.
enum Step {
    /// More may follow.
    More,
    /// The stream ended (after an error event, when it failed).
    End,
    /// The decode's body broke off.
    Broken(std::io::Error),
}

/// What came first: a chunk of the decode's body (`None` at its end), or
/// the prefill's answer.
enum Read {
    Chunk(Option<reqwest::Result<Bytes>>),
    Prefill(Result<Result<Vec<u8>, Failure>, tokio::task::JoinError>),
}

impl<S> Relay<S>
where
    S: futures_util::Stream<Item = reqwest::Result<Bytes>> + Send,
{
    /// Reads what comes next, appending to `out` what can be sent.
    async fn step(&mut self, out: &mut Vec<u8>) -> Step {
        let read = match &mut self.prefill {
            Prefill::Given => Read::Chunk(self.upstream.next().await),
            // Whichever comes first; the prefill when both are ready, so
            // that the rows event waits as little as it can.
            Prefill::Coming(handle) => tokio::select! {
                biased;
                answer = handle => Read::Prefill(answer),
                chunk = self.upstream.next() => Read::Chunk(chunk),
            },
        };
        let result = match read {
            Read::Prefill(answer) => self.give(answer, out).map(|()| Step::More),
            Read::Chunk(Some(Ok(chunk))) => self
                .stitcher
                .feed(&chunk, out)
                .map(|()| Step::More)
                .map_err(|e| stitch_failure(Backend::Decode, e)),
            Read::Chunk(Some(Err(e))) => {
                self.abort();
                return Step::Broken(std::io::Error::other(e));
            }
            // The decode is done; its last events may wait for the prefill.
            Read::Chunk(None) => {
                let given = match std::mem::replace(&mut self.prefill, Prefill::Given) {
                    Prefill::Coming(handle) => self.give(handle.await, out),
                    Prefill::Given => Ok(()),
                };
                given.and_then(|()| {
                    self.stitcher
                        .finish(out)
                        .map(|()| Step::End)
                        .map_err(|e| stitch_failure(Backend::Decode, e))
                })
            }
        };
        result.unwrap_or_else(|failure| {
            tracing::warn!(kind = failure.kind, "stream failed: {}", failure.message);
            self.abort();
            out.extend_from_slice(&error_event(failure.kind, &failure.message));
            Step::End
        })
    }

    /// Gives the stitcher the prefill's answer.
    fn give(
        &mut self,
        answer: Result<Result<Vec<u8>, Failure>, tokio::task::JoinError>,
        out: &mut Vec<u8>,
    ) -> Result<(), Failure> {
        self.prefill = Prefill::Given;
        let body = joined(answer)?;
        self.stitcher
            .give_prefill(body, out)
            .map_err(|e| stitch_failure(Backend::Prefill, e))
    }

    /// Stops a prefill request still running: the stream it was for ended.
    fn abort(&self) {
        if let Prefill::Coming(handle) = &self.prefill {
            handle.abort();
        }
    }
}

/// The decode's stream through `stitcher`: each read fed to it and what it
/// gives sent on; a prefill still coming is given to it when it arrives
/// (the events before the rows event go out meanwhile). The status (200)
/// has gone out with the first byte, so a stitch error mid-stream, or a
/// prefill that fails, ends the stream with one more event, after
/// everything stitched before it.
fn stitched<S>(
    upstream: S,
    stitcher: StreamStitcher,
    prefill: Prefill,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
where
    S: futures_util::Stream<Item = reqwest::Result<Bytes>> + Send + 'static,
{
    let relay = Relay {
        upstream: Box::pin(upstream),
        stitcher,
        prefill,
    };
    futures_util::stream::unfold(Some(relay), |relay| async move {
        let mut relay = relay?;
        loop {
            let mut out = Vec::new();
            match relay.step(&mut out).await {
                Step::More if out.is_empty() => continue,
                Step::More => return Some((Ok(Bytes::from(out)), Some(relay))),
                Step::End if out.is_empty() => return None,
                Step::End => return Some((Ok(Bytes::from(out)), None)),
                Step::Broken(e) => return Some((Err(e), None)),
            }
        }
    })
}

/// vLLM's generate path, on the router and on its backends.
const VLLM: &str = "/inference/v1/generate";
/// SGLang's.
const SGLANG: &str = "/generate";

async fn generate(State(router): State<Arc<Router>>, body: Bytes) -> Response {
    let started = Instant::now();
    answer(started, router.generate(&body).await)
}

async fn sglang_generate(State(router): State<Arc<Router>>, body: Bytes) -> Response {
    let started = Instant::now();
    answer(started, router.sglang_generate(&body).await)
}

/// The response, or the failure's, logged.
fn answer(started: Instant, result: Result<Response, Failure>) -> Response {
    match result {
        Ok(response) => {
            tracing::debug!(elapsed = ?started.elapsed(), "stitched");
            response
        }
        Err(failure) => {
            tracing::warn!(
                status = failure.status.as_u16(),
                kind = failure.kind,
                "{}",
                failure.message
            );
            failure.into_response()
        }
    }
}

impl Router {
    async fn generate(&self, body: &[u8]) -> Result<Response, Failure> {
        let request = request_json(body)?;
        let prefill_request = prefill_request(&request)?;
        let stream = request.get("stream") == Some(&Value::Bool(true));

        let prefill_body = self.body(Backend::Prefill, VLLM, &prefill_request).await?;
        // The prefill is read as a tree for its kv_transfer_params alone; the
        // merge reads its bytes.
        let prefill = not_json(Backend::Prefill, serde_json::from_slice(&prefill_body))?;
        let decode_request = decode_request(request, &prefill, self.config.decode_start)?;
        if stream {
            // The decode's stream goes through as it comes, every event at
            // once; the event that carries rows is stitched on the way.
            let response = self
                .send(Backend::Decode, VLLM, &decode_request, false)
                .await?;
            return self.stream(Ok(prefill_body), response);
        }

        let decode = self.body(Backend::Decode, VLLM, &decode_request).await?;
        self.whole(&prefill_body, decode)
    }

    /// An SGLang `/generate` request: both instances are sent the client's
    /// body at once, with the prefill's bootstrap address and a fresh room
    /// (as SGLang's own P/D router sends them), the prefill's not streamed;
    /// the decode's answer is stitched as a whole or as a stream. A stream
    /// starts as soon as the decode answers, the prefill's answer given to
    /// its stitcher when it comes.
    async fn sglang_generate(self: &Arc<Self>, body: &[u8]) -> Result<Response, Failure> {
        let request = request_json(body)?;
        let host = reqwest::Url::parse(&self.config.prefill)
            .ok()
            .and_then(|url| url.host_str().map(str::to_owned))
            .ok_or_else(|| {
                Failure::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    format!("the prefill URL {} names no host", self.config.prefill),
                )
            })?;
        let request = sglang_request(request, &host, self.config.bootstrap_port)?;
        let stream = request.get("stream") == Some(&Value::Bool(true));
        let mut prefill_request = request.clone();
        prefill_request["stream"] = Value::Bool(false);
        let decode_request = if self.config.decode_start {
            sglang_decode_request(request)
        } else {
            request
        };
        // At once: each instance waits for the other in the bootstrap room.
        if stream {
            let router = Arc::clone(self);
            let mut prefill = tokio::spawn(async move {
                router
                    .body(Backend::Prefill, SGLANG, &prefill_request)
                    .await
            });
            let decode = self.send(Backend::Decode, SGLANG, &decode_request, false);
            tokio::pin!(decode);
            return tokio::select! {
                response = &mut decode => match response {
                    Ok(response) => self.stream(Err(prefill), response),
                    Err(failure) => {
                        prefill.abort();
                        Err(failure)
                    }
                },
                // A prefill that fails first fails the request; one that
                // answers first is in hand when the stream starts.
                answer = &mut prefill => {
                    let prefill_body = joined(answer)?;
                    let response = decode.await?;
                    self.stream(Ok(prefill_body), response)
                }
            };
        }
        let prefill = self.body(Backend::Prefill, SGLANG, &prefill_request);
        let decode = self.body(Backend::Decode, SGLANG, &decode_request);
        let (prefill_body, decode) = tokio::try_join!(prefill, decode)?;
        self.whole(&prefill_body, decode)
    }

    /// The decode's whole answer, stitched with the prefill's.
    fn whole(&self, prefill: &[u8], mut decode: Vec<u8>) -> Result<Response, Failure> {
        if self.config.stitch {
            self.stitcher()
                .merge_bytes(prefill, &mut decode, pd_stitch::Stitch::ForPd)
                .map_err(|e| stitch_failure(Backend::Decode, e))?;
        }
        // Without stitching (a baseline for the load benchmark) the decode's
        // bytes pass through unread.
        let mut response = Response::new(Body::from(decode));
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            header::HeaderValue::from_static("application/json"),
        );
        Ok(response)
    }

    /// The decode's stream, passed on as it comes, every event at once; the
    /// event that carries rows is stitched with the prefill's on the way.
    /// `prefill` is its body, or the task that will answer it.
    fn stream(
        &self,
        prefill: Result<Vec<u8>, tokio::task::JoinHandle<Result<Vec<u8>, Failure>>>,
        response: reqwest::Response,
    ) -> Result<Response, Failure> {
        let content_type = response.headers().get(header::CONTENT_TYPE).cloned();
        let upstream = response.bytes_stream();
        let body = if self.config.stitch {
            let (stitcher, prefill) = match prefill {
                Ok(body) => (
                    StreamStitcher::new(self.stitcher(), body)
                        .map_err(|e| stitch_failure(Backend::Prefill, e))?,
                    Prefill::Given,
                ),
                Err(coming) => (
                    StreamStitcher::awaiting_prefill(self.stitcher()),
                    Prefill::Coming(coming),
                ),
            };
            Body::from_stream(stitched(upstream, stitcher, prefill))
        } else {
            Body::from_stream(upstream)
        };
        let mut passed = Response::new(body);
        if let Some(content_type) = content_type {
            passed
                .headers_mut()
                .insert(header::CONTENT_TYPE, content_type);
        }
        Ok(passed)
    }

    /// The stitcher of this router's configuration.
    fn stitcher(&self) -> Stitcher {
        let stitcher = match self.config.row_shape {
            Some((layers, top_k)) => Stitcher::new().row_shape(layers, top_k),
            None => Stitcher::new(),
        };
        if self.config.strict {
            stitcher.strict()
        } else {
            stitcher
        }
    }

    /// Sends `body` to `backend`; a response with a success status, or why
    /// not. With `deadline`, the whole answer must arrive within the timeout;
    /// without, each read must.
    async fn send(
        &self,
        backend: Backend,
        path: &str,
        body: &Value,
        deadline: bool,
    ) -> Result<reqwest::Response, Failure> {
        let base = match backend {
            Backend::Prefill => &self.config.prefill,
            Backend::Decode => &self.config.decode,
        };
        let bytes = serde_json::to_vec(body).map_err(|e| {
            Failure::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e.to_string())
        })?;
        let url = format!("{}{path}", base.trim_end_matches('/'));
        let mut request = self
            .client
            .post(url)
            .header(header::CONTENT_TYPE, "application/json")
            .body(bytes);
        if deadline {
            request = request.timeout(self.config.timeout);
        }
        let response = request
            .send()
            .await
            .map_err(|e| self.transport(backend, &e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let text = response.text().await.unwrap_or_default();
        let message = format!(
            "the {} backend answered {status}: {}",
            backend.name(),
            snippet(&text)
        );
        // A request the backend refuses is the client's to fix: pass the
        // status on. Anything else is the backend's failure.
        Err(if status.is_client_error() {
            Failure::new(status, "invalid_request", message)
        } else {
            Failure::new(StatusCode::BAD_GATEWAY, "backend_error", message)
        })
    }

    /// Sends `body` to `backend`'s `path` and reads its whole answer.
    async fn body(&self, backend: Backend, path: &str, body: &Value) -> Result<Vec<u8>, Failure> {
        let response = self.send(backend, path, body, true).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| self.transport(backend, &e))?;
        Ok(bytes.into())
    }

    /// A transport failure: a timeout is a 504, anything else a 502.
    fn transport(&self, backend: Backend, e: &reqwest::Error) -> Failure {
        if e.is_timeout() {
            Failure::new(
                StatusCode::GATEWAY_TIMEOUT,
                "backend_timeout",
                format!(
                    "the {} backend did not answer within {:?}",
                    backend.name(),
                    self.config.timeout
                ),
            )
        } else {
            // reqwest's own message is terse; its sources say what happened.
            let mut message = format!("the {} backend failed: {e}", backend.name());
            let mut source = std::error::Error::source(e);
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            Failure::new(StatusCode::BAD_GATEWAY, "backend_error", message)
        }
    }
}

/// The client's request read as JSON, or the 400 that says it is not.
fn request_json(body: &[u8]) -> Result<Value, Failure> {
    serde_json::from_slice(body).map_err(|e| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the request body is not JSON: {e}"),
        )
    })
}

/// A backend's answer read as JSON, or the 502 that says it is not.
fn not_json<T>(backend: Backend, read: serde_json::Result<T>) -> Result<T, Failure> {
    read.map_err(|e| {
        Failure::new(
            StatusCode::BAD_GATEWAY,
            "backend_error",
            format!("the {} backend's response is not JSON: {e}", backend.name()),
        )
    })
}

/// At most 300 bytes of `text`, cut on a character boundary.
fn snippet(text: &str) -> &str {
    let mut end = text.len().min(300);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The prefill's request: the client's, asking for exactly one token and no
/// stream.
pub fn prefill_request(request: &Value) -> Result<Value, Failure> {
    let mut prefill = request.clone();
    let Some(object) = prefill.as_object_mut() else {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body must be a JSON object",
        ));
    };
    object.insert("stream".into(), Value::Bool(false));
    let params = sampling_params(object)?;
    params.insert("max_tokens".into(), json!(1));
    if let Some(min) = params.get_mut("min_tokens") {
        if min.as_u64().is_none_or(|m| m > 1) {
            *min = json!(1);
        }
    }
    Ok(prefill)
}

/// The request's `sampling_params`, made an empty object when absent; a 400
/// when it is something else.
fn sampling_params(
    request: &mut serde_json::Map<String, Value>,
) -> Result<&mut serde_json::Map<String, Value>, Failure> {
    request
        .entry("sampling_params")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| {
            Failure::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "sampling_params must be a JSON object",
            )
        })
}

/// A source of bootstrap rooms: distinct for the life of the process, and
/// unlike another router's (the clock seeds them).
fn bootstrap_room() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let mut z = seed ^ NEXT.fetch_add(0x9e37_79b9_7f4a_7c15, Ordering::Relaxed);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    // SGLang's router draws rooms in [0, 2^63).
    (z ^ (z >> 31)) >> 1
}

/// The SGLang request both instances are sent: the client's, with
/// `bootstrap_host`, `bootstrap_port` and a fresh `bootstrap_room` (a list
/// of each, one per prompt, for a batch: `text` or `input_ids` a list of
/// prompts), as SGLang's P/D router adds them.
pub fn sglang_request(mut request: Value, host: &str, port: u16) -> Result<Value, Failure> {
    let Some(object) = request.as_object_mut() else {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body must be a JSON object",
        ));
    };
    let batch = match (object.get("text"), object.get("input_ids")) {
        (Some(Value::Array(texts)), _) => Some(texts.len()),
        (None | Some(Value::Null), Some(Value::Array(ids)))
            if ids.first().is_some_and(Value::is_array) =>
        {
            Some(ids.len())
        }
        _ => None,
    };
    let (host, port) = (json!(host), json!(port));
    let fields = match batch {
        None => [host, port, json!(bootstrap_room())],
        Some(n) => [
            json!(vec![host; n]),
            json!(vec![port; n]),
            json!((0..n).map(|_| bootstrap_room()).collect::<Vec<_>>()),
        ],
    };
    for (key, value) in ["bootstrap_host", "bootstrap_port", "bootstrap_room"]
        .into_iter()
        .zip(fields)
    {
        object.insert(key.into(), value);
    }
    Ok(request)
}

/// The vLLM decode's request: the client's, with the prefill's
/// `kv_transfer_params` when it returned any, and, with `decode_start`,
/// `sampling_params.routed_experts_prompt_start = max(P, S0)`: `P` the
/// prompt's length (the request's `token_ids`, else the prefill's
/// `usage.prompt_tokens`), `S0` the start the client asked for.
///
/// vLLM 0.32's decode computes only the tokens whose KV it did not load, and
/// must be told where its rows start: sent no start (0), or one below the
/// tokens it loaded, on a prompt longer than one KV block its engine fails
/// and the server goes down (docs/SPEC.md section 4a). With the start, it
/// answers rows `[max(P, S0), P + N - 1)`, which the merge places after the
/// prefill's `[S0, P)`.
///
/// # Errors
///
/// A 400 when `sampling_params` is not an object, and a 502 when
/// `decode_start` is on and neither the request nor the prefill says how
/// long the prompt is: a decode sent no start may go down.
pub fn decode_request(
    mut request: Value,
    prefill: &Value,
    decode_start: bool,
) -> Result<Value, Failure> {
    let Some(object) = request.as_object_mut() else {
        return Err(Failure::new(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "the request body must be a JSON object",
        ));
    };
    if let Some(params) = prefill.get("kv_transfer_params") {
        object.insert("kv_transfer_params".into(), params.clone());
    }
    if !decode_start {
        return Ok(request);
    }
    let prompt = object
        .get("token_ids")
        .and_then(Value::as_array)
        .map(|ids| ids.len() as u64)
        .or_else(|| prefill.get("usage")?.get("prompt_tokens")?.as_u64())
        .ok_or_else(|| {
            Failure::new(
                StatusCode::BAD_GATEWAY,
                "prompt_length",
                "neither the request's token_ids nor the prefill's usage.prompt_tokens \
                 gives the prompt's length, which the decode's routed_experts_prompt_start needs",
            )
        })?;
    let params = sampling_params(object)?;
    let asked = params
        .get(PROMPT_START)
        .and_then(Value::as_u64)
        .unwrap_or(0);
    params.insert(PROMPT_START.into(), json!(asked.max(prompt)));
    Ok(request)
}

/// vLLM's request field for where a response's rows start.
const PROMPT_START: &str = "routed_experts_prompt_start";

/// The SGLang decode's request: the one both instances are sent, with
/// `routed_experts_start_len` set to the prompt's length (`input_ids`'
/// length), so that the decode answers only the rows it computes,
/// `[P, P + N - 1)`. Sent the client's start, it answers `[S0, P)` too, rows
/// it never wrote (zeros, or stale rows of earlier requests), which the merge
/// replaces with the prefill's. A batch is sent as it is: SGLang 0.5.23
/// takes one integer start for the whole batch (a list is a 400), and any
/// one start would be the prompt's end of some prompts only (docs/SPEC.md
/// section 10). So is a request by `text`: the router has no tokenizer to
/// count its prompt.
pub fn sglang_decode_request(mut request: Value) -> Value {
    let start = match request.get("input_ids") {
        Some(Value::Array(ids)) if !ids.first().is_some_and(Value::is_array) => ids.len(),
        _ => return request,
    };
    if let Some(object) = request.as_object_mut() {
        object.insert("routed_experts_start_len".into(), json!(start));
    }
    request
}

/// A P/D router stitching routed experts.
#[derive(Parser, Debug)]
#[command(name = "pd_router")]
struct Args {
    /// The prefill backend's base URL.
    #[arg(long)]
    prefill: String,
    /// The decode backend's base URL.
    #[arg(long)]
    decode: String,
    /// Where to listen.
    #[arg(long, default_value = "127.0.0.1:8000")]
    listen: SocketAddr,
    /// Seconds a backend may take to answer.
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
    /// Skip the merge (to compare its cost).
    #[arg(long)]
    no_stitch: bool,
    /// Refuse (502) a merged layout a trainer would misread: gaps, overlaps,
    /// segments out of order, mixed row shapes or dtype kinds.
    #[arg(long)]
    strict: bool,
    /// The model's rows, LAYERSxTOP_K (`num_hidden_layers`,
    /// `num_experts_per_tok`), which place SGLang's rows.
    #[arg(long, value_parser = row_shape)]
    row_shape: Option<(u64, u64)>,
    /// The SGLang prefill's bootstrap port.
    #[arg(long, default_value_t = 8998)]
    bootstrap_port: u16,
    /// Send the decode the client's start as it is, rather than the
    /// prompt's length (vLLM's `routed_experts_prompt_start`, SGLang's
    /// `routed_experts_start_len`). A vLLM 0.32 decode with a KV connector
    /// goes down on such a request when the prompt is longer than one KV
    /// block: only for tests that show it.
    #[arg(long)]
    no_decode_start: bool,
}

fn row_shape(s: &str) -> Result<(u64, u64), String> {
    let parse = |n: &str| n.trim().parse::<u64>().ok().filter(|&n| n > 0);
    match s
        .split_once(['x', 'X', ','])
        .map(|(l, k)| (parse(l), parse(k)))
    {
        Some((Some(layers), Some(top_k))) => Ok((layers, top_k)),
        _ => Err(format!(
            "{s:?} is not LAYERSxTOP_K (two positive integers, e.g. 48x8)"
        )),
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let args = Args::parse();
    let timeout = Duration::try_from_secs_f64(args.timeout)?;
    let config = Config {
        prefill: args.prefill,
        decode: args.decode,
        timeout,
        stitch: !args.no_stitch,
        strict: args.strict,
        row_shape: args.row_shape,
        bootstrap_port: args.bootstrap_port,
        decode_start: !args.no_decode_start,
    };
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(
        "P/D router on http://{} (prefill {}, decode {}, stitching {})",
        listener.local_addr()?,
        config.prefill,
        config.decode,
        match (config.stitch, config.strict) {
            (false, _) => "off",
            (true, false) => "on",
            (true, true) => "on, strict",
        }
    );
    serve(listener, app(config)?).await?;
    Ok(())
}
