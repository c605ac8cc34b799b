//! A mock backend: one prefill or decode instance of a P/D deployment,
//! answering as vLLM (`POST /inference/v1/generate`) and as SGLang
//! (`POST /generate`) would, with the crate's simulator's answers
//! ([`pd_stitch::sim`]): rows of its model, a function of the token prefix,
//! so the rows of the tokens a body sends are the same whichever request
//! sends them (a later turn's prompt repeats the turn before's rows).
//!
//! It is what `examples/pd_router.rs` is tried against by hand and by
//! `tests/it/router_http.rs`. Which simulated request a body stands for is named
//! by its `request_id` (`"req-17"` or `17`): the router forwards the same body
//! to both instances, so the prefill and decode mocks answer for the same
//! request, and a test can compare the stitched answer with the truth of
//! [`simulated`]`(seed, 17, &body)`: `Request::draw(seed, 17)` with the
//! prompt the body sends (`token_ids`), its completions generated after it.
//!
//! A prefill mock refuses (400) a body that does not ask for exactly one token
//! (`sampling_params.max_tokens == 1`, `min_tokens` absent or at most 1,
//! `stream` not true): that is how the tests see that the router rewrote the
//! prefill's request. A mock can be told to misbehave with `--fault`:
//! `no-routing` (answer without routed experts), `status-500`, `truncated`
//! (announce the whole body, send half of it, close), `slow=MS` (wait before
//! answering), `late=MS` (SGLang: meet the partner, then wait before
//! answering); and, for `pd-stitch probe`'s tests, in the rows themselves:
//! `short-prefill` (a prefill one prompt row short, so that the stitch takes
//! the decode's own row for the last prompt position: a router cutting one
//! position early), `zero-prompt` (prompt rows zeroed, the last one half:
//! rows finalized before they were written), `scatter-layer` (one layer
//! of every completion row changed: numerical noise) and `length-flip=N`
//! (the first layer of position 1's row changed in a prompt shorter than N:
//! rows of a prefix that depend on the forward's length); the last three on
//! compact rows only, `.npy` rows left as they are. A vLLM body's `sampling_params.n` caps the choices.
//!
//! **SGLang** (`/generate`). SGLang's P/D router sends the same body to both
//! instances at once, with `bootstrap_host`, `bootstrap_port` and
//! `bootstrap_room` added (lists of them for a batch), and the two instances
//! meet on the room to move the KV cache: the decode asks the prefill's
//! bootstrap server, at that host and port, for the room. So an SGLang mock
//! refuses (400) a body without them; a prefill mock serves
//! `GET /bootstrap/{room}` on its own port (so the router's bootstrap port is
//! the prefill mock's port) and waits, up to [`RENDEZVOUS`], for the decode to
//! ask for its room, and a decode mock asks; either answers 500 when the
//! other never comes. A router that sends the two one after the other fails
//! here as it would against SGLang. The
//! request is named by `rid`; `text` or `input_ids` as a list of prompts
//! asks for a batch, and `input_ids` set the prompts' lengths (else the
//! simulated request's are used), and their tokens the rows. Each instance
//! answers from the
//! `routed_experts_start_len` S it is sent, as SGLang 0.5.23 does: rows
//! `[S, P)` for the prefill, `[S, P + N - 1)` for a colocated server and a
//! full-length decode; S above a prompt's length, or not an integer, is a
//! 400. A body without it stands for the simulated request's own start (its
//! prefix omission). The answers are [`pd_stitch::sim`]'s: the
//! prefill's prompt rows; the decode's in the deployment's [`Convention`]
//! (suffix-only: `[P, P + N - 1)` whatever it is sent), its prompt rows read
//! from the deployment's decode slot pool ([`SlotPool`]: zeros on a fresh
//! mock, rows earlier requests left once it wrapped, as the engine's);
//! rows of the deployment's shape; streamed (`"stream": true`) as SGLang
//! streams `/generate`, one event per generated token, the finished one
//! carrying the rows, then `data: [DONE]`. Every SGLang answer's bytes are
//! kept in [`Mock::answered`].
//!
//! ```text
//! cargo run --example mock_backend -- --role prefill --listen 127.0.0.1:8001 --dir /tmp/pd
//! cargo run --example mock_backend -- --role decode  --listen 127.0.0.1:8002 --dir /tmp/pd
//! ```

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Parser;
use pd_stitch::algebra::Convention;
use pd_stitch::gather::Store;
use pd_stitch::sglang::Api;
use pd_stitch::sim::{self, Engine, Model, Request, Responses, SlotPool, Wire};
use pd_stitch::ROUTED_EXPERTS;
use serde_json::{json, Value};

/// Which instance of the pair a mock plays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Answers with the prompt's rows (and the first token).
    Prefill,
    /// Answers with the completion's rows.
    Decode,
    /// Answers as one server computing both, the answer a P/D router's
    /// stitched answer must equal (no bootstrap room for SGLang).
    Colocated,
}

impl FromStr for Role {
    type Err = String;

    fn from_str(s: &str) -> Result<Role, String> {
        match s {
            "prefill" => Ok(Role::Prefill),
            "decode" => Ok(Role::Decode),
            "colocated" => Ok(Role::Colocated),
            _ => Err(format!(
                "unknown role {s:?}: expected prefill, decode or colocated"
            )),
        }
    }
}

/// How a mock misbehaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// It does not.
    None,
    /// Answers without `routed_experts`: as an instance that was not asked to
    /// return them (on the prefill alone: decode rows with nothing to stitch
    /// them to).
    NoRouting,
    /// Answers 500 with a JSON error.
    Status500,
    /// Announces the whole body in `Content-Length`, sends half, and closes.
    Truncated,
    /// Waits this long, then answers normally.
    Slow(Duration),
    /// SGLang: meets its partner in the bootstrap room at once (so the
    /// other instance can answer), then waits this long before it answers:
    /// a prefill that answers after the decode's first bytes.
    Late(Duration),
    /// A prefill whose rows end one prompt position short.
    ShortPrefill,
    /// Prompt rows zeroed: all of them but the last, and the later half of
    /// the last one's layers (compact rows).
    ZeroPrompt,
    /// One layer, drawn per position, of every completion row changed
    /// (compact rows).
    ScatterLayer,
    /// The first layer of position 1's row changed in every prompt shorter
    /// than this (compact rows): an engine whose rows of a prefix depend on
    /// the length of the forward that computes them, as a real SGLang's did
    /// on an AMD CPU.
    LengthFlip(u64),
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Fault, String> {
        match s {
            "none" => Ok(Fault::None),
            "no-routing" => Ok(Fault::NoRouting),
            "status-500" => Ok(Fault::Status500),
            "truncated" => Ok(Fault::Truncated),
            "short-prefill" => Ok(Fault::ShortPrefill),
            "zero-prompt" => Ok(Fault::ZeroPrompt),
            "scatter-layer" => Ok(Fault::ScatterLayer),
            _ => match (
                s.strip_prefix("slow=").map(str::parse::<u64>),
                s.strip_prefix("late=").map(str::parse::<u64>),
                s.strip_prefix("length-flip=").map(str::parse::<u64>),
            ) {
                (Some(Ok(ms)), _, _) => Ok(Fault::Slow(Duration::from_millis(ms))),
                (_, Some(Ok(ms)), _) => Ok(Fault::Late(Duration::from_millis(ms))),
                (_, _, Some(Ok(len))) => Ok(Fault::LengthFlip(len)),
                _ => Err(format!(
                    "unknown fault {s:?}: expected none, no-routing, status-500, truncated, slow=MS, late=MS, short-prefill, zero-prompt, scatter-layer or length-flip=N"
                )),
            },
        }
    }
}

/// Which of vLLM's wire forms the rows travel in: one, or each request's
/// `index % 3`-th (`mixed`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forms {
    /// Always this form (by handle, compact or npy).
    One(Wire),
    /// By handle, compact and npy in turn by request index.
    Mixed,
}

impl Forms {
    /// The form request `index` is answered in.
    pub fn of(self, index: usize) -> Wire {
        let vllm = Engine::Vllm.wires();
        match self {
            Forms::One(wire) => wire,
            Forms::Mixed => vllm[index % vllm.len()],
        }
    }
}

impl FromStr for Forms {
    type Err = String;

    fn from_str(s: &str) -> Result<Forms, String> {
        match s {
            "by-handle" => Ok(Forms::One(Wire::ByHandle)),
            "compact" => Ok(Forms::One(Wire::Compact)),
            "npy" => Ok(Forms::One(Wire::Npy)),
            "mixed" => Ok(Forms::Mixed),
            _ => Err(format!(
                "unknown form {s:?}: expected by-handle, compact, npy or mixed"
            )),
        }
    }
}

/// The simulated deployment behind one or more mock instances: the seed,
/// the form, the directory the by-handle files are written to, and a small
/// cache of answers (a prefill and a decode mock sharing one `Deployment`
/// draw each request once).
pub struct Deployment {
    seed: u64,
    forms: Forms,
    dir: PathBuf,
    cache: Mutex<Cache>,
    /// The model of its SGLang answers (its rows' shape; its seed the
    /// deployment's).
    pub shape: Model,
    /// How its SGLang decode answers.
    pub convention: Convention,
    /// Its SGLang decode's routed-experts host buffer, across requests.
    pool: Mutex<SlotPool>,
    rooms: Rooms,
}

/// The SGLang bootstrap rooms the mocks were sent, and by which role: where
/// a prefill and a decode mock meet, as SGLang's instances do.
#[derive(Default)]
struct Rooms {
    seen: Mutex<RoomsSeen>,
    changed: tokio::sync::Notify,
}

/// The rooms seen, per role (prefill, decode), oldest first out.
#[derive(Default)]
struct RoomsSeen {
    roles: HashMap<u64, [bool; 2]>,
    order: VecDeque<u64>,
}

/// How long an SGLang mock waits for the other role to join its room.
pub const RENDEZVOUS: Duration = Duration::from_secs(3);

/// The shape of the mocks' SGLang rows unless told otherwise: 8 layers of 4
/// experts among 64 (a deployment's own seed replaces this one's).
pub const SGLANG_SHAPE: Model = Model {
    seed: 0,
    layers: 8,
    top_k: 4,
    experts: 64,
};

/// The slots of the SGLang decode's pool unless told otherwise: the
/// `--max-total-tokens 2048` the engine's harness runs its decode with.
pub const SGLANG_POOL: usize = 2048;

/// The most recent requests' answers, oldest first out.
#[derive(Default)]
struct Cache {
    /// By request index, prompt and start.
    answers: HashMap<(usize, Vec<u64>, u64), Arc<Responses>>,
    order: VecDeque<(usize, Vec<u64>, u64)>,
}

/// How many requests' answers the cache keeps: enough for the requests in
/// flight and a load run's working set, bounded so a long run stays small.
const CACHE: usize = 512;

impl Deployment {
    /// A deployment drawing requests from `seed`, answering in `forms`, with
    /// its files under `dir`.
    pub fn new(seed: u64, forms: Forms, dir: PathBuf) -> Deployment {
        Deployment {
            seed,
            forms,
            dir,
            cache: Mutex::new(Cache::default()),
            shape: Model {
                seed,
                ..SGLANG_SHAPE
            },
            convention: Convention::FullLength,
            pool: Mutex::new(SlotPool::new(SGLANG_POOL)),
            rooms: Rooms::default(),
        }
    }

    /// The same deployment, its SGLang decode answering in `convention`
    /// with rows of `shape` (its model's seed the deployment's), from a
    /// fresh pool of as many slots as before.
    pub fn with_sglang(self, shape: Model, convention: Convention) -> Deployment {
        let slots = self.pool().size();
        Deployment {
            shape: Model {
                seed: self.seed,
                ..shape
            },
            convention,
            pool: Mutex::new(SlotPool::new(slots)),
            ..self
        }
    }

    /// The same deployment, its SGLang decode's pool fresh with `slots`
    /// slots.
    pub fn with_sglang_pool(self, slots: usize) -> Deployment {
        Deployment {
            pool: Mutex::new(SlotPool::new(slots)),
            ..self
        }
    }

    /// The SGLang decode's pool, locked. A poisoned pool holds whole
    /// slots: it stays in use.
    fn pool(&self) -> MutexGuard<'_, SlotPool> {
        self.pool.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The SGLang request `index`'s outputs: one, or `batch` of them, each
    /// the first output of the simulator's SGLang request `index * 16 + j`
    /// (its prompt, completion and start), of the deployment's model.
    pub fn sglang_draws(&self, index: usize, batch: Option<usize>) -> Vec<Request> {
        (0..batch.unwrap_or(1))
            .map(|j| {
                let (_, _, mut outputs) = sim::sglang_draw(self.seed, index * 16 + j);
                let drawn = outputs.remove(0);
                let (start, completion) = (drawn.start, drawn.completion_len());
                Request::new(index, self.shape, drawn.dtype, drawn.prompt, 1, completion)
                    .starting_at(start)
                    .with_convention(self.convention)
            })
            .collect()
    }

    /// What SGLang answers for request `index` (`batch` outputs, or one
    /// object) sent by `text` with no start: prefill and colocated as the
    /// mocks answer, the decode as a fresh decode would.
    pub fn sglang_answers(&self, index: usize, batch: Option<usize>) -> Responses {
        let draws = self.sglang_draws(index, batch);
        let wire = Wire::Sglang(Api::Generate);
        let answered = sim::answer(wire, &draws, batch.is_some(), None, &mut Store::memory());
        // SGLang's answers write no file: nothing to fail.
        answered.unwrap_or(Responses {
            colocated: Value::Null,
            prefill: Value::Null,
            decode: Value::Null,
        })
    }

    /// The draws an SGLang body stands for: request `index`'s (`batch` of
    /// them), each prompt as long as the body's
    /// `input_ids` when it sends them, rows from the body's
    /// `routed_experts_start_len` when it sends one (else from the
    /// simulated request's start, within the prompt); or why the engine
    /// would refuse the body (a 400).
    pub fn sglang_request(
        &self,
        index: usize,
        batch: Option<usize>,
        body: &Value,
    ) -> Result<Vec<Request>, String> {
        let mut draws = self.sglang_draws(index, batch);
        let tokens = |ids: &Value| -> Result<Vec<u64>, String> {
            let ids = ids.as_array().map(Vec::as_slice).unwrap_or_default();
            if ids.is_empty() {
                return Err("input_ids: a prompt of no token".into());
            }
            ids.iter()
                .map(|id| {
                    id.as_u64()
                        .ok_or_else(|| format!("input_ids: {id} is not a token id"))
                })
                .collect()
        };
        match body.get("input_ids") {
            Some(Value::Array(ids)) if ids.first().is_some_and(Value::is_array) => {
                for (draw, ids) in draws.iter_mut().zip(ids) {
                    *draw = draw.clone().with_prompt(tokens(ids)?);
                }
            }
            Some(ids @ Value::Array(_)) => {
                if let Some(draw) = draws.first_mut() {
                    *draw = draw.clone().with_prompt(tokens(ids)?);
                }
            }
            _ => {}
        }
        let sent = match body.get("routed_experts_start_len") {
            None | Some(Value::Null) => None,
            Some(v) => Some(v.as_u64().ok_or_else(|| {
                format!("routed_experts_start_len: Input should be a valid integer, got {v}")
            })?),
        };
        for draw in &mut draws {
            let prompt = draw.prompt_len();
            draw.start = match sent {
                Some(start) if start > prompt => {
                    return Err(format!(
                        "routed_experts_start_len {start} is out of range [0, {prompt}] (the prompt's tokens)"
                    ))
                }
                Some(start) => start,
                None => draw.start.min(prompt),
            };
        }
        Ok(draws)
    }

    /// What the SGLang instance of `role` answers for `draws`: the
    /// decode's through its pool, which it changes.
    pub fn sglang_answer(&self, role: Role, draws: &[Request], batch: bool) -> Value {
        match role {
            Role::Prefill => sim::prefill_answer(Api::Generate, draws, batch),
            Role::Colocated => sim::colocated_answer(Api::Generate, draws, batch),
            Role::Decode => sim::decode_answer(&mut self.pool(), Api::Generate, draws, batch),
        }
    }

    /// Notes that `role` was sent `room` and waits until the other role has
    /// been too; `false` when it is not within `wait`.
    pub async fn meet(&self, room: u64, role: Role, wait: Duration) -> bool {
        let me = usize::from(role == Role::Decode);
        let deadline = tokio::time::Instant::now() + wait;
        {
            let mut seen = self
                .rooms
                .seen
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            let seen = &mut *seen;
            let roles = seen.roles.entry(room).or_insert_with(|| {
                seen.order.push_back(room);
                [false; 2]
            });
            roles[me] = true;
            while seen.order.len() > CACHE {
                if let Some(old) = seen.order.pop_front() {
                    seen.roles.remove(&old);
                }
            }
        }
        self.rooms.changed.notify_waiters();
        loop {
            // Registered before the check, so no notification is missed.
            let changed = self.rooms.changed.notified();
            let other = {
                let seen = self
                    .rooms
                    .seen
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                seen.roles.get(&room).is_some_and(|r| r[1 - me])
            };
            if other {
                return true;
            }
            if tokio::time::timeout_at(deadline, changed).await.is_err() {
                return false;
            }
        }
    }

    /// The cache, locked. A poisoned cache only holds complete entries: it
    /// stays in use.
    fn cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The simulator's answers for request `index` in its form, writing its
    /// files the first time.
    pub fn answers(&self, index: usize) -> std::io::Result<Arc<Responses>> {
        self.answers_for(Request::draw(self.seed, index))
    }

    /// The simulator's answers for `request` (one [`simulated`] made), in
    /// its index's form, writing its files the first time.
    ///
    /// A request asking rows from a start `S > 0` has its files in a folder
    /// of their own, `s<S>/`, its handles naming them there: a colocated
    /// server and a P/D pair answering one index at once, asked from
    /// different starts, lay their files out differently.
    pub fn answers_for(&self, request: Request) -> std::io::Result<Arc<Responses>> {
        let index = request.index;
        let key = (index, request.prompt.clone(), request.start);
        if let Some(hit) = self.cache().answers.get(&key).cloned() {
            return Ok(hit);
        }
        let wire = self.forms.of(index);
        let folder = (request.start > 0).then(|| format!("s{}", request.start));
        let mut store = Store::Dir(match &folder {
            Some(folder) => self.dir.join(folder),
            None => self.dir.clone(),
        });
        let mut answered = sim::answer(
            wire,
            std::slice::from_ref(&request),
            false,
            None,
            &mut store,
        )?;
        if let Some(folder) = &folder {
            for response in [
                &mut answered.colocated,
                &mut answered.prefill,
                &mut answered.decode,
            ] {
                in_folder(response, folder);
            }
        }
        let responses = Arc::new(answered);
        let mut cache = self.cache();
        if cache
            .answers
            .insert(key.clone(), responses.clone())
            .is_none()
        {
            cache.order.push_back(key);
        }
        while cache.order.len() > CACHE {
            if let Some(old) = cache.order.pop_front() {
                cache.answers.remove(&old);
            }
        }
        Ok(responses)
    }
}

/// The simulated request a vLLM body stands for: request `index` of the
/// seed, its prompt the body's `token_ids` when it sends them (a client
/// such as `pd-stitch probe` sends prompts of its own, and a later turn's
/// prompt repeats the turn before's tokens: the model gives them the same
/// rows), its completions generated after it. Split points past the prompt
/// are dropped; the files are still named by the index. A client's
/// prompts are all routed by one model, as one engine's are: request 0's
/// (its layers, experts and dtype), whatever the index, so that a later
/// turn and an episode's full-context forward have the rows of its turns.
pub fn simulated(seed: u64, index: usize, body: &Value) -> Request {
    let request = Request::draw(seed, index);
    let sent: Option<Vec<u64>> = body
        .get("token_ids")
        .and_then(Value::as_array)
        .and_then(|ids| ids.iter().map(Value::as_u64).collect());
    match sent {
        Some(tokens) if !tokens.is_empty() => {
            let one = Request::draw(seed, 0);
            Request {
                model: one.model,
                dtype: one.dtype,
                ..request
            }
            .with_prompt(tokens)
        }
        _ => request,
    }
}

/// The request a vLLM mock in `role` answers for `body`: the
/// [`simulated`] one, asked from the body's
/// `sampling_params.routed_experts_prompt_start` as vLLM 0.32 asks (a
/// colocated server and a prefill answer rows from it; docs/SPEC.md
/// section 4a). A decode's start is read where its rows are written
/// ([`vllm_decode_rows`]): its request is the full one, as its older forms
/// answer from the last prompt position whatever they are sent.
pub fn vllm_request(seed: u64, index: usize, body: &Value, role: Role) -> Request {
    let request = simulated(seed, index, body);
    let start = body
        .pointer("/sampling_params/routed_experts_prompt_start")
        .and_then(Value::as_u64);
    match start {
        Some(start) if role != Role::Decode => request.omitting(start),
        _ => request,
    }
}

/// Every file `response`'s handles name, moved into `folder`.
fn in_folder(response: &mut Value, folder: &str) {
    let choices = response.get_mut("choices").and_then(Value::as_array_mut);
    for choice in choices.into_iter().flatten() {
        let payload = choice.get_mut("payload").and_then(Value::as_array_mut);
        for segment in payload.into_iter().flatten() {
            if let Some(file) = segment.get("file").and_then(Value::as_str) {
                segment["file"] = json!(format!("{folder}/{file}"));
            }
        }
    }
}

/// Each choice of a vLLM answer to `request` with the tokens it generated,
/// as `/inference/v1/generate` answers every choice (`token_ids`; a
/// prefill's the one token it samples), whichever form its rows take.
fn say_tokens(request: &Request, role: Role, response: &mut Value) {
    let choices = response.get_mut("choices").and_then(Value::as_array_mut);
    for (c, choice) in choices.into_iter().flatten().enumerate() {
        if choice.get("token_ids").is_none() {
            choice["token_ids"] = json!(request.token_ids(c, role == Role::Prefill));
        }
    }
}

/// One mock instance.
pub struct Mock {
    /// What it simulates.
    pub deployment: Arc<Deployment>,
    /// Prefill or decode.
    pub role: Role,
    /// How it misbehaves.
    pub fault: Fault,
    /// Every body it was sent, in order (the tests look at them).
    pub seen: Mutex<Vec<Value>>,
    /// The bytes of every SGLang answer it sent (a stream's events back to
    /// back), the latest [`CACHE`] in order.
    pub answered: Mutex<VecDeque<Vec<u8>>>,
    /// How a decode mock reaches the prefill's bootstrap server.
    client: reqwest::Client,
    /// A vLLM decode mock whose engine went down (sent a
    /// `routed_experts_prompt_start` below the KV it loads): it answers
    /// 503 from then on, as the real server, gone, answers nothing.
    pub dead: std::sync::atomic::AtomicBool,
}

impl Mock {
    /// A well-behaved instance.
    pub fn new(deployment: Arc<Deployment>, role: Role) -> Mock {
        Mock {
            deployment,
            role,
            fault: Fault::None,
            seen: Mutex::new(Vec::new()),
            answered: Mutex::new(VecDeque::new()),
            client: reqwest::Client::new(),
            dead: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The same instance, misbehaving.
    pub fn with_fault(self, fault: Fault) -> Mock {
        Mock { fault, ..self }
    }
}

/// The mock's HTTP routes.
pub fn app(mock: Arc<Mock>) -> axum::Router {
    axum::Router::new()
        .route("/inference/v1/generate", post(generate))
        .route("/generate", post(sglang_generate))
        .route("/bootstrap/{room}", axum::routing::get(bootstrap_room))
        .with_state(mock)
}

/// Serves `app` on `listener` until the process ends.
pub async fn serve(listener: tokio::net::TcpListener, app: axum::Router) -> std::io::Result<()> {
    axum::serve(listener, app).await
}

fn error(status: StatusCode, message: impl Into<String>) -> Response {
    let body = json!({"error": {"message": message.into(), "code": status.as_u16()}});
    (status, axum::Json(body)).into_response()
}

/// The simulated request a body names: `request_id` as `"req-17"`, `"17"` or `17`.
fn request_index(body: &Value) -> Option<usize> {
    match body.get("request_id")? {
        Value::Number(n) => n.as_u64().and_then(|n| usize::try_from(n).ok()),
        Value::String(s) => {
            let digits = s.trim_start_matches(|c: char| !c.is_ascii_digit());
            digits.parse().ok()
        }
        _ => None,
    }
}

/// Why a prefill mock refuses `body`, if it does: a prefill is asked for one
/// token, not streamed.
fn not_a_prefill_request(body: &Value) -> Option<String> {
    let params = body.get("sampling_params");
    let max = params.and_then(|p| p.get("max_tokens"));
    if max != Some(&json!(1)) {
        return Some(format!(
            "a prefill is asked for max_tokens = 1, got {max:?}"
        ));
    }
    if let Some(min) = params.and_then(|p| p.get("min_tokens")) {
        if min.as_u64().is_none_or(|m| m > 1) {
            return Some(format!("a prefill is asked for min_tokens <= 1, got {min}"));
        }
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        return Some("a prefill is not streamed".into());
    }
    None
}

/// Removes the routed experts from every choice of `response`, inline or by
/// handle; other payload segments stay.
pub fn without_routing(mut response: Value) -> Value {
    let choices = response.get_mut("choices").and_then(Value::as_array_mut);
    for choice in choices.into_iter().flatten() {
        let Some(choice) = choice.as_object_mut() else {
            continue;
        };
        choice.remove(ROUTED_EXPERTS);
        if let Some(payload) = choice.get_mut("payload").and_then(Value::as_array_mut) {
            // Without routing: neither the experts nor their weights.
            payload.retain(|s| {
                !matches!(
                    s.get("field").and_then(Value::as_str),
                    Some(ROUTED_EXPERTS | "routed_expert_weights")
                )
            });
        }
    }
    response
}

/// The rows faults on a vLLM answer for `request`: by handle only
/// `short-prefill` applies (its last segment one row shorter); compact rows
/// are rewritten; `.npy` rows, placed by the choice's counts, are left.
fn wrong_rows(fault: Fault, request: &Request, response: &mut Value) {
    if !matches!(
        fault,
        Fault::ShortPrefill | Fault::ZeroPrompt | Fault::ScatterLayer | Fault::LengthFlip(_)
    ) {
        return;
    }
    let choices = response.get_mut("choices").and_then(Value::as_array_mut);
    for choice in choices.into_iter().flatten() {
        if fault == Fault::ShortPrefill {
            let segments = choice.get_mut("payload").and_then(Value::as_array_mut);
            let last = segments
                .into_iter()
                .flatten()
                .filter(|s| s["field"] == ROUTED_EXPERTS);
            if let Some(last) = last.max_by_key(|s| s["pos"].as_u64().unwrap_or(0)) {
                last["rows"] = json!(last["rows"].as_u64().unwrap_or(1).saturating_sub(1));
            }
        }
        // Compact rows only: an `.npy` is placed by the choice's counts,
        // which a changed row count would move.
        if !choice[ROUTED_EXPERTS].is_object() {
            continue;
        }
        let alone = json!({"choices": [{ROUTED_EXPERTS: choice[ROUTED_EXPERTS].clone()}]});
        let Ok(rows) = pd_stitch::gather::gather_from(&alone, 0, ROUTED_EXPERTS, &Store::memory())
        else {
            continue;
        };
        let (start, shape) = (rows.positions().start(), rows.row_shape().to_vec());
        let width = rows.dtype().itemsize() as usize;
        let layer = width * shape.get(1).copied().unwrap_or(1) as usize;
        let row = layer * shape.first().copied().unwrap_or(1) as usize;
        let mut data = rows.data().to_vec();
        let prompt = request.prompt_len();
        for (k, bytes) in data.chunks_exact_mut(row.max(1)).enumerate() {
            let x = start + k as u64;
            match fault {
                Fault::ZeroPrompt if x + 1 < prompt => bytes.fill(0),
                Fault::ZeroPrompt if x + 1 == prompt => bytes[row / layer / 2 * layer..].fill(0),
                Fault::ScatterLayer if x >= prompt => {
                    let pick = sim::mix(request.index as u64 ^ x << 20);
                    let l = (pick % (row / layer) as u64) as usize;
                    next_experts(&mut bytes[l * layer..(l + 1) * layer], width, request);
                }
                Fault::LengthFlip(below) if x == 1 && x + 1 < prompt && prompt < below => {
                    next_experts(&mut bytes[..layer], width, request);
                }
                _ => {}
            }
        }
        if fault == Fault::ShortPrefill {
            data.truncate(data.len().saturating_sub(row));
        }
        let seq = (data.len() / row.max(1)) as u64;
        let mut dims = vec![seq];
        dims.extend(&shape);
        choice[ROUTED_EXPERTS] = json!({"data": base64_encode(&data), "shape": dims,
                                        "start": start, "dtype": rows.dtype().name()});
    }
}

/// Each expert id of `layer` (ids of `width` bytes) the next one.
fn next_experts(layer: &mut [u8], width: usize, request: &Request) {
    for id in layer.chunks_exact_mut(width) {
        let mut raw = [0u8; 8];
        raw[..width].copy_from_slice(id);
        let next = (u64::from_le_bytes(raw) + 1) % request.model.experts;
        id.copy_from_slice(&next.to_le_bytes()[..width]);
    }
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A request's body read as JSON and noted in `seen`, or why it is not
/// JSON.
fn received(mock: &Mock, body: &[u8]) -> Result<Value, String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    mock.seen
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(body.clone());
    Ok(body)
}

async fn generate(State(mock): State<Arc<Mock>>, body: Bytes) -> Response {
    let body = match received(&mock, &body) {
        Ok(body) => body,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    if mock.dead.load(std::sync::atomic::Ordering::Relaxed) {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "mock: the engine is down (EngineDeadError)",
        );
    }
    match mock.fault {
        Fault::Status500 => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "mock: internal error");
        }
        Fault::Slow(delay) => tokio::time::sleep(delay).await,
        _ => {}
    }
    let Some(index) = request_index(&body) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the mock needs a request_id naming the simulated request, e.g. \"req-17\"",
        );
    };
    if mock.role == Role::Prefill {
        if let Some(why) = not_a_prefill_request(&body) {
            return error(StatusCode::BAD_REQUEST, why);
        }
    }
    // Writing the files is blocking I/O: off the async workers.
    let deployment = mock.deployment.clone();
    let request = vllm_request(deployment.seed, index, &body, mock.role);
    let answers = match tokio::task::spawn_blocking(move || deployment.answers_for(request)).await {
        Ok(Ok(answers)) => answers,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("mock: {e}")),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("mock: {e}")),
    };
    let mut response = match mock.role {
        Role::Prefill => answers.prefill.clone(),
        Role::Decode => answers.decode.clone(),
        Role::Colocated => answers.colocated.clone(),
    };
    if mock.role == Role::Decode && mock.deployment.forms.of(index) == Wire::Npy {
        // vLLM 0.32's decode: rows from the start it was sent, or down.
        match vllm_decode_rows(&mock.deployment, index, &body, &mut response) {
            Ok(()) => {}
            Err(why) => {
                mock.dead.store(true, std::sync::atomic::Ordering::Relaxed);
                return error(StatusCode::INTERNAL_SERVER_ERROR, why);
            }
        }
    }
    if mock.fault == Fault::NoRouting {
        response = without_routing(response);
    }
    let request = vllm_request(mock.deployment.seed, index, &body, mock.role);
    say_tokens(&request, mock.role, &mut response);
    wrong_rows(mock.fault, &request, &mut response);
    if let Some(n) = body["sampling_params"]["n"].as_u64() {
        if let Some(choices) = response["choices"].as_array_mut() {
            choices.truncate(usize::try_from(n.max(1)).unwrap_or(1));
        }
    }
    if mock.role == Role::Prefill {
        // What a vLLM prefill instance hands the decode through the router:
        // where to pull the prompt's KV cache from.
        response["kv_transfer_params"] =
            json!({"do_remote_prefill": true, "remote_request_id": index});
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        // As vLLM's `/inference/v1/generate` streams: per choice, token
        // chunks, then the chunk on which routing is available (here the
        // choice's whole answer, rows and all), a usage chunk with
        // `"choices": []`, and `[DONE]`; each event sent in two pieces, so
        // that a router sees events split across reads.
        let id = response.get("request_id").cloned().unwrap_or(json!(index));
        let choices = response["choices"].as_array().cloned().unwrap_or_default();
        let mut events = Vec::new();
        for (i, choice) in choices.into_iter().enumerate() {
            // A choice that says its tokens (vLLM 0.32's `.npy` form) has
            // them streamed as the engine streams them: each event its new
            // tokens, the last one's with the rows.
            let tokens = choice["token_ids"].as_array().cloned();
            let split = tokens
                .as_ref()
                .map_or(2, |t| t.len().saturating_sub(1).min(2));
            for token in 0..split {
                let delta = tokens
                    .as_ref()
                    .map_or(json!([token]), |t| json!([t[token]]));
                events.push(json!({"request_id": id, "choices": [
                    {"index": i, "token_ids": delta, "finish_reason": null, "routed_experts": null}]}));
            }
            let mut choice = choice;
            choice["index"] = json!(i);
            choice["finish_reason"] = json!("length");
            if let Some(tokens) = tokens {
                choice["token_ids"] = json!(tokens[split..]);
            }
            events.push(json!({"request_id": id, "choices": [choice]}));
        }
        events.push(json!({"request_id": id, "choices": [], "usage": response.get("usage")}));
        return sse(&events);
    }
    whole(&mock, &response)
}

/// The KV block of the engine the mocks stand for (`--block-size 32`, as the
/// real engine's step runs it).
pub const BLOCK: u64 = 32;

/// What vLLM 0.32's decode answers (docs/SPEC.md section 4a): it loads the
/// prompt's KV in whole blocks, `L = floor((P - 1) / BLOCK) * BLOCK` tokens
/// (ExampleConnector keeps the last token to compute), computes the rest,
/// and answers each choice's rows `[S, P + N - 1)` for the
/// `routed_experts_prompt_start` S it was sent. An S below `L` takes its
/// engine down: `Err` with the engine's message.
fn vllm_decode_rows(
    deployment: &Deployment,
    index: usize,
    body: &Value,
    response: &mut Value,
) -> Result<(), String> {
    let request = simulated(deployment.seed, index, body);
    let start = body
        .pointer("/sampling_params/routed_experts_prompt_start")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let loaded = request.prompt_len().saturating_sub(1) / BLOCK * BLOCK;
    if start < loaded {
        return Err(format!(
            "mock: BlockObjectStoreError: auxiliary output object does not exist \
             (sent routed_experts_prompt_start {start}, below the {loaded} tokens of KV it loaded); \
             the engine is down"
        ));
    }
    for (c, choice) in response["choices"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .enumerate()
    {
        choice["routed_experts"] = request
            .vllm_npy(c, start, false)
            .map_err(|e| format!("mock: {e}"))?;
    }
    Ok(())
}

/// The SGLang bootstrap fields of `body`: its room (the first, for a
/// batch) and the batch's size, or why the body is not a P/D request.
fn bootstrap(body: &Value) -> Result<(u64, Option<usize>), String> {
    let missing = || {
        "a P/D SGLang instance is sent bootstrap_host, bootstrap_port and bootstrap_room".to_owned()
    };
    let (host, port) = (body.get("bootstrap_host"), body.get("bootstrap_port"));
    let room = body.get("bootstrap_room").ok_or_else(missing)?;
    let (host, port) = (host.ok_or_else(missing)?, port.ok_or_else(missing)?);
    let batch = batch_of(body);
    let one = |v: &Value| {
        v.as_u64()
            .ok_or_else(|| format!("bootstrap_room {v} is not a u64"))
    };
    match (batch, room) {
        (None, room) if host.is_string() && port.is_u64() => Ok((one(room)?, None)),
        (Some(n), Value::Array(rooms)) if n > 0 && rooms.len() == n => {
            let counted = |v: &Value| v.as_array().is_some_and(|a| a.len() == n);
            if !counted(host) || !counted(port) {
                return Err(format!(
                    "a batch of {n} is sent {n} bootstrap hosts and ports"
                ));
            }
            Ok((one(&rooms[0])?, Some(n)))
        }
        _ => Err(format!(
            "bootstrap fields {host}, {port}, {room} do not fit a request of {} texts",
            batch.map_or("one".to_owned(), |n| n.to_string())
        )),
    }
}

/// How many prompts an SGLang body sends when it is a batch: `text` a list,
/// or `input_ids` a list of lists.
fn batch_of(body: &Value) -> Option<usize> {
    match (body.get("text"), body.get("input_ids")) {
        (Some(Value::Array(texts)), _) => Some(texts.len()),
        (_, Some(Value::Array(ids))) if ids.first().is_some_and(Value::is_array) => Some(ids.len()),
        _ => None,
    }
}

/// A prefill's bootstrap server: the decode asks for `room`, and is
/// answered once the prefill has been sent it (200), or not in time (504).
async fn bootstrap_room(State(mock): State<Arc<Mock>>, Path(room): Path<u64>) -> Response {
    if mock.role != Role::Prefill {
        return error(
            StatusCode::NOT_FOUND,
            "mock: only a prefill has a bootstrap server",
        );
    }
    if mock.deployment.meet(room, Role::Decode, RENDEZVOUS).await {
        StatusCode::OK.into_response()
    } else {
        error(
            StatusCode::GATEWAY_TIMEOUT,
            format!("mock: the prefill was never sent bootstrap room {room}"),
        )
    }
}

/// A decode joins `room` at the prefill's bootstrap server the body names:
/// whether the prefill was sent the room in time.
async fn join(client: &reqwest::Client, body: &Value, room: u64) -> bool {
    let first = |v: Option<&Value>| match v {
        Some(Value::Array(items)) => items.first().cloned(),
        v => v.cloned(),
    };
    let host = first(body.get("bootstrap_host"));
    let port = first(body.get("bootstrap_port"));
    let (Some(Value::String(host)), Some(port)) = (host, port.and_then(|p| p.as_u64())) else {
        return false;
    };
    let url = format!("http://{host}:{port}/bootstrap/{room}");
    let asked = client
        .get(url)
        .timeout(RENDEZVOUS + Duration::from_secs(1))
        .send()
        .await;
    asked.is_ok_and(|r| r.status().is_success())
}

/// Removes the routed experts from every output of an SGLang answer.
pub fn sglang_without_routing(mut response: Value) -> Value {
    let items = match &mut response {
        Value::Array(items) => items.iter_mut().collect::<Vec<_>>(),
        item => vec![item],
    };
    for item in items {
        if let Some(meta) = item.get_mut("meta_info").and_then(Value::as_object_mut) {
            meta.remove(ROUTED_EXPERTS);
        }
    }
    response
}

/// An SGLang output as a `/generate` stream writes it: one event per
/// generated token, each with the `meta_info` of that moment (no rows:
/// SGLang collects them for a finished request), the last the whole
/// output, rows and all. As SGLang 0.5.23's (`decode_stream.sse` in
/// `tests/fixtures/engines/sglang/`), of the events before it only the
/// first says when it was sent, and none has `weight_versions` or
/// `e2e_latency`; the last is the whole answer, which the engine's also
/// is but for `response_sent_to_client_ts` (so that a stitched stream's
/// last event equals a colocated server's whole answer, as the router
/// tests, Rust and Python, compare it).
fn sglang_events(output: &Value) -> Vec<Value> {
    const SENT: &str = "response_sent_to_client_ts";
    let completion = output["meta_info"]["completion_tokens"]
        .as_u64()
        .unwrap_or(1);
    let mut events = Vec::new();
    for k in 1..completion {
        let mut event = output.clone();
        // Cumulative, as the engine's: the tokens so far.
        let ids = output["output_ids"].as_array().map(Vec::as_slice);
        let so_far = ids.unwrap_or_default().iter().take(k as usize);
        event["output_ids"] = Value::Array(so_far.cloned().collect());
        event["text"] = json!("");
        if let Some(meta) = event["meta_info"].as_object_mut() {
            for key in [ROUTED_EXPERTS, "weight_versions", "e2e_latency"] {
                meta.remove(key);
            }
            if k > 1 {
                meta.remove(SENT);
            }
            meta.insert("completion_tokens".into(), json!(k));
            meta.insert("finish_reason".into(), Value::Null);
        }
        events.push(event);
    }
    events.push(output.clone());
    events
}

/// `events` as an SSE body (`data: {json}`, a blank line, `data: [DONE]`),
/// each event sent in two pieces.
fn sse(events: &[Value]) -> Response {
    sse_pieces(sse_bytes(events))
}

/// The same, its bytes noted in `mock`'s answers.
fn sse_kept(mock: &Mock, events: &[Value]) -> Response {
    let pieces = sse_bytes(events);
    keep(mock, pieces.concat());
    sse_pieces(pieces)
}

/// The pieces of an SSE body of `events`: each event in two, then `[DONE]`.
fn sse_bytes(events: &[Value]) -> Vec<Vec<u8>> {
    let mut pieces = Vec::new();
    for data in events {
        let mut text = format!("data: {data}\n\n").into_bytes();
        let second = text.split_off(text.len() / 2);
        pieces.push(text);
        pieces.push(second);
    }
    pieces.push(b"data: [DONE]\n\n".to_vec());
    pieces
}

fn sse_pieces(pieces: Vec<Vec<u8>>) -> Response {
    let pieces: Vec<Bytes> = pieces.into_iter().map(Bytes::from).collect();
    let chunks = futures_util::stream::iter(pieces.into_iter().map(Ok::<_, std::io::Error>));
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

async fn sglang_generate(State(mock): State<Arc<Mock>>, body: Bytes) -> Response {
    let body = match received(&mock, &body) {
        Ok(body) => body,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let (room, batch) = match (mock.role, bootstrap(&body)) {
        (Role::Colocated, _) => (None, batch_of(&body)),
        (_, Ok((room, batch))) => (Some(room), batch),
        (_, Err(why)) => return error(StatusCode::BAD_REQUEST, why),
    };
    let rid = body.get("rid").map(|rid| match rid {
        Value::Array(rids) => rids.first().cloned().unwrap_or(Value::Null),
        rid => rid.clone(),
    });
    let Some(index) = rid.and_then(|rid| request_index(&json!({ "request_id": rid }))) else {
        return error(
            StatusCode::BAD_REQUEST,
            "the mock needs a rid naming the simulated request, e.g. \"req-17\"",
        );
    };
    match mock.fault {
        Fault::Status500 => {
            return error(StatusCode::INTERNAL_SERVER_ERROR, "mock: internal error");
        }
        Fault::Slow(delay) => tokio::time::sleep(delay).await,
        _ => {}
    }
    // The KV cache moves between the two instances of one room: neither
    // answers before the other has been sent the request.
    let met = match (room, mock.role) {
        (None, _) | (_, Role::Colocated) => true,
        (Some(room), Role::Prefill) => mock.deployment.meet(room, Role::Prefill, RENDEZVOUS).await,
        (Some(room), Role::Decode) => join(&mock.client, &body, room).await,
    };
    if !met {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "mock: the other instance was never sent bootstrap room {} (within {RENDEZVOUS:?})",
                room.unwrap_or_default()
            ),
        );
    }
    if let Fault::Late(delay) = mock.fault {
        tokio::time::sleep(delay).await;
    }
    let draws = match mock.deployment.sglang_request(index, batch, &body) {
        Ok(draws) => draws,
        Err(why) => return error(StatusCode::BAD_REQUEST, why),
    };
    let mut response = mock
        .deployment
        .sglang_answer(mock.role, &draws, batch.is_some());
    if mock.fault == Fault::NoRouting {
        response = sglang_without_routing(response);
    }
    if body.get("stream") == Some(&Value::Bool(true)) {
        let Value::Object(_) = &response else {
            return error(
                StatusCode::BAD_REQUEST,
                "mock: a streamed batch is not simulated",
            );
        };
        return sse_kept(&mock, &sglang_events(&response));
    }
    match serde_json::to_vec(&response) {
        Ok(bytes) => {
            keep(&mock, bytes.clone());
            whole_bytes(&mock, bytes)
        }
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("mock: {e}")),
    }
}

/// Notes the bytes of an SGLang answer `mock` sent.
fn keep(mock: &Mock, bytes: Vec<u8>) {
    let mut answered = mock.answered.lock().unwrap_or_else(PoisonError::into_inner);
    answered.push_back(bytes);
    while answered.len() > CACHE {
        answered.pop_front();
    }
}

/// `response` as a whole JSON body, or, with the `truncated` fault, its
/// headers and half of it before the body fails.
fn whole(mock: &Mock, response: &Value) -> Response {
    match serde_json::to_vec(response) {
        Ok(bytes) => whole_bytes(mock, bytes),
        Err(e) => error(StatusCode::INTERNAL_SERVER_ERROR, format!("mock: {e}")),
    }
}

/// The same of a body already written.
fn whole_bytes(mock: &Mock, bytes: Vec<u8>) -> Response {
    if mock.fault == Fault::Truncated {
        return truncated(bytes);
    }
    ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
}

/// A response announcing `bytes` whole that sends half of it and fails, as
/// a backend dying mid-answer: the connection is closed.
fn truncated(bytes: Vec<u8>) -> Response {
    let full = bytes.len();
    let half = Bytes::from(bytes).slice(..full / 2);
    // States: the half to send, then the failure, then the end.
    let chunks = futures_util::stream::unfold(Some(Some(half)), |state| async move {
        match state? {
            Some(half) => Some((Ok(half), Some(None))),
            None => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let died = std::io::Error::other("mock: died mid-answer");
                Some((Err(died), None))
            }
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, full)
        .body(Body::from_stream(chunks))
        .unwrap_or_else(|e| error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))
}

/// A mock vLLM or SGLang backend answering with simulated P/D responses.
#[derive(Parser, Debug)]
#[command(name = "mock_backend")]
struct Args {
    /// prefill, decode or colocated.
    #[arg(long)]
    role: Role,
    /// Where to listen (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: SocketAddr,
    /// by-handle, compact, npy, or mixed (each in turn by request index).
    #[arg(long, default_value = "mixed")]
    mode: Forms,
    /// The simulation's seed; a prefill and a decode mock must share it.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where by-handle files are written; a prefill and a decode mock must share it.
    #[arg(long)]
    dir: PathBuf,
    /// none, no-routing, status-500, truncated, slow=MS, late=MS, short-prefill,
    /// zero-prompt or scatter-layer.
    #[arg(long, default_value = "none")]
    fault: Fault,
    /// How an SGLang decode answers: full-length (unpatched SGLang) or
    /// suffix-only (slime's patch).
    #[arg(long, default_value = "full-length", value_parser = convention)]
    sglang_decode: Convention,
    /// The SGLang rows' shape, LAYERSxTOP_K (ids below 64).
    #[arg(long, default_value = "8x4", value_parser = shape)]
    sglang_row_shape: Model,
    /// The SGLang decode's token slots: its prompt rows are read from them
    /// (zeros until the ring wraps, then rows earlier requests left).
    #[arg(long, default_value_t = SGLANG_POOL)]
    sglang_pool_slots: usize,
}

fn convention(s: &str) -> Result<Convention, String> {
    match s {
        "full-length" => Ok(Convention::FullLength),
        "suffix-only" => Ok(Convention::SuffixOnly),
        _ => Err(format!(
            "unknown convention {s:?}: expected full-length or suffix-only"
        )),
    }
}

fn shape(s: &str) -> Result<Model, String> {
    let parse = |n: &str| n.trim().parse::<u64>().ok().filter(|&n| n > 0);
    match s
        .split_once(['x', 'X', ','])
        .map(|(l, k)| (parse(l), parse(k)))
    {
        Some((Some(layers), Some(top_k))) => Ok(Model {
            layers,
            top_k,
            ..SGLANG_SHAPE
        }),
        _ => Err(format!(
            "{s:?} is not LAYERSxTOP_K (two positive integers, e.g. 48x8)"
        )),
    }
}

#[tokio::main]
async fn main() -> std::io::Result<()> {
    let args = Args::parse();
    let deployment = Arc::new(
        Deployment::new(args.seed, args.mode, args.dir)
            .with_sglang(args.sglang_row_shape, args.sglang_decode)
            .with_sglang_pool(args.sglang_pool_slots),
    );
    let mock = Mock::new(deployment, args.role).with_fault(args.fault);
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    println!(
        "mock {:?} listening on http://{}",
        args.role,
        listener.local_addr()?
    );
    serve(listener, app(Arc::new(mock))).await
}
