//! `pd-stitch probe`: the same requests to a colocated server and to a P/D
//! deployment (through its router), and their rows compared position by
//! position, as the seed change was validated by hand on GPUs: episodes of
//! one or more turns (a turn's prompt is the one before, its completion and
//! a few new tokens), whole and streamed, at a concurrency.
//!
//! Each request's answers are read (`engine.rs`, streams through `sse.rs`,
//! over the minimal client of `http.rs`), compared with
//! [`pd_stitch::compare`], their differences classified
//! ([`pd_stitch::compare::classify`]: boundary, whole rows, scattered,
//! missing, diverged tokens), and each side's rows checked for rows no
//! engine produces ([`pd_stitch::gather::check_response_rows`]). One line
//! per request and a total; exit status 0 when all are equal, 1 on a
//! difference or a wrong row, 2 when a request failed (an unreachable
//! endpoint, a timeout, a 5xx, a cut-off body, a body without rows), which
//! never stops the run.
//!
//! With `--full-context`, each episode's whole token sequence then goes to
//! the colocated server as one prompt, and the episode assembled from each
//! side's turns is held to that forward's rows (`full_context.rs`); with
//! `--delta`, every turn after the first asks only for its new rows.

mod engine;
mod full_context;
mod http;
mod prompts;
mod sse;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use pd_stitch::compare::{self, classify, Classes};
use pd_stitch::episode::RowPiece;
use pd_stitch::gather::{self, RowsCheck, RowsReport, Store};
use serde_json::{json, Value};

use self::engine::{place_rows, Answer, EngineApi, Sampling};
use self::full_context::{FullContextCounts, SideResult, SideTurn, Suspect};
use self::http::Url;
use super::progress::Progress;
use super::ModelConfig;

/// Whether requests are streamed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamMode {
    /// Whole answers.
    Off,
    /// Streamed answers.
    On,
    /// Every episode both ways.
    Both,
}

// What `probe` takes; the command's help is on `Command::Probe`.
#[derive(clap::Args)]
pub struct ProbeArgs {
    /// The colocated server's base URL (http://HOST:PORT).
    #[arg(long, value_name = "URL")]
    colocated: String,
    /// The P/D deployment's base URL: its router.
    #[arg(long, value_name = "URL")]
    pd: String,
    /// The engine both speak.
    #[arg(long, value_enum, default_value = "vllm")]
    engine: EngineApi,
    /// Prompts, one per line: a JSON array of token ids, or an object with
    /// one under token_ids, input_ids or prompt_token_ids. Without it,
    /// prompts are drawn (--requests, --prompt-len, --seed, --vocab).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["requests", "prompt_len"])]
    prompts: Option<PathBuf>,
    /// How many episodes (prompts) to draw.
    #[arg(long, value_name = "N", default_value_t = 80)]
    requests: usize,
    /// The drawn prompts' lengths, A..B.
    #[arg(long, value_name = "A..B", default_value = "16..128", value_parser = prompts::length_range)]
    prompt_len: (u64, u64),
    /// The seed of the drawn prompts, of the tokens added between turns, and
    /// of the sampling.
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Token ids are drawn below this (default: the --config's vocab_size,
    /// else 1000).
    #[arg(long, value_name = "V")]
    vocab: Option<u64>,
    /// The model's config.json: vocab_size, and the expert count for the
    /// rows check (num_experts, n_routed_experts or num_local_experts).
    #[arg(long, value_name = "config.json")]
    config: Option<PathBuf>,
    /// Tokens to generate per turn.
    #[arg(long, value_name = "M", default_value_t = 32)]
    max_tokens: u64,
    /// Choices per request.
    #[arg(long, value_name = "K", default_value_t = 1)]
    n: u64,
    /// The sampling temperature (0: greedy, the default, so that both
    /// deployments generate the same tokens).
    #[arg(long, value_name = "T", default_value_t = 0.0)]
    temperature: f64,
    /// Requests in flight at once.
    #[arg(long, value_name = "C", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// off, on, or both (every episode twice).
    #[arg(long, value_enum, default_value = "off")]
    stream: StreamMode,
    /// Turns per episode: turn t+1's prompt is turn t's, its first choice's
    /// completion and 4 new tokens.
    #[arg(long, value_name = "T", default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..))]
    turns: u16,
    /// The model's rows, LAYERSxTOP_K: needed for SGLang's rows, which
    /// carry no shape.
    #[arg(long, value_name = "LxK", value_parser = super::row_shape)]
    row_shape: Option<(u64, u64)>,
    /// The model's expert count, for the rows check (ids at or beyond it
    /// are wrong).
    #[arg(long, value_name = "N")]
    experts: Option<u64>,
    /// Keep every pair of answers here, as DIR/colocated/NAME.json and
    /// DIR/pd/NAME.json, for `pd-stitch compare --dirs` later.
    #[arg(long, value_name = "DIR")]
    save: Option<PathBuf>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// Seconds each request may take, body included.
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    timeout: f64,
    /// Resolve the files of rows by handle against this directory; only
    /// files inside it (or an --allow directory) are read.
    #[arg(long, value_name = "DIR", default_value = ".")]
    root: PathBuf,
    /// Also read files inside this directory (repeatable).
    #[arg(long = "allow", value_name = "DIR")]
    allow: Vec<PathBuf>,
    /// After each episode, send its whole token sequence to the colocated
    /// server as one prompt (one token generated, a cache_salt of its own so
    /// that nothing is a prefix-cache hit), and hold the episode assembled
    /// from each side's turns to that forward's rows, position by position:
    /// a boundary or scattered difference fails (exit 1); a decode-sourced
    /// one, or a recomputed one (a prompt position whose row the colocated
    /// server gives again when asked that turn's prompt alone), is counted.
    #[arg(long)]
    full_context: bool,
    /// Ask every turn after the first for its rows from its common prefix
    /// with the turn before minus one (vLLM's
    /// sampling_params.routed_experts_prompt_start, SGLang's
    /// routed_experts_start_len): the engines answer only the new rows.
    #[arg(long)]
    delta: bool,
}

/// Exit status when a request failed (1 means "differs").
const PROBE_ERROR: u8 = 2;

/// Tokens added to a turn's prompt and completion to make the next turn's.
const NEW_TOKENS: u64 = 4;

pub fn run(args: ProbeArgs, quiet: bool) -> Result<ExitCode, String> {
    match setup(args) {
        Ok(probe) => Ok(ExitCode::from(probe.run(quiet))),
        Err(message) => {
            eprintln!("error: {message}");
            Ok(ExitCode::from(PROBE_ERROR))
        }
    }
}

/// Everything a run needs, read from the arguments.
struct Probe {
    engine: EngineApi,
    colocated: Url,
    pd: Url,
    prompts: Vec<Vec<u64>>,
    vocab: u64,
    seed: u64,
    sampling: Sampling,
    concurrency: usize,
    modes: Vec<bool>,
    turns: usize,
    row_shape: Option<(u64, u64)>,
    rows: RowsCheck,
    save: Option<PathBuf>,
    json: bool,
    timeout: Duration,
    store: Store,
    full_context: bool,
    delta: bool,
    /// What makes this run's full-context forwards' `cache_salt`s its own.
    salt: String,
}

fn setup(args: ProbeArgs) -> Result<Probe, String> {
    let colocated = Url::parse(&args.colocated).map_err(|e| format!("--colocated {e}"))?;
    let pd = Url::parse(&args.pd).map_err(|e| format!("--pd {e}"))?;
    let config = args.config.as_deref().map(ModelConfig::read).transpose()?;
    let vocab = args
        .vocab
        .or_else(|| config.as_ref().and_then(ModelConfig::vocab))
        .unwrap_or(1000);
    let experts = args
        .experts
        .or_else(|| config.as_ref().and_then(ModelConfig::experts));
    let prompts = match &args.prompts {
        Some(path) => prompts::read_jsonl(path)?,
        None => prompts::generated(args.requests, args.prompt_len, vocab, args.seed),
    };
    if args.engine == EngineApi::Sglang && args.row_shape.is_none() {
        return Err("SGLang's rows carry no shape: give --row-shape LAYERSxTOP_K".into());
    }
    let timeout = Duration::try_from_secs_f64(args.timeout)
        .ok()
        .filter(|t| !t.is_zero())
        .ok_or_else(|| {
            format!(
                "--timeout {}: expected a positive number of seconds",
                args.timeout
            )
        })?;
    if let Some(dir) = &args.save {
        let sides: &[&str] = if args.full_context {
            &["colocated", "pd", "full"]
        } else {
            &["colocated", "pd"]
        };
        for side in sides {
            std::fs::create_dir_all(dir.join(side))
                .map_err(|e| format!("{}: {e}", dir.join(side).display()))?;
        }
    }
    let store = super::confined(&args.root, &args.allow)?;
    Ok(Probe {
        engine: args.engine,
        colocated,
        pd,
        prompts,
        vocab,
        seed: args.seed,
        sampling: Sampling {
            max_tokens: args.max_tokens,
            n: args.n,
            temperature: args.temperature,
            seed: args.seed,
        },
        concurrency: usize::from(args.concurrency),
        modes: match args.stream {
            StreamMode::Off => vec![false],
            StreamMode::On => vec![true],
            StreamMode::Both => vec![false, true],
        },
        turns: usize::from(args.turns),
        row_shape: args.row_shape,
        rows: RowsCheck::experts(experts),
        save: args.save,
        json: args.json,
        timeout,
        store,
        full_context: args.full_context,
        delta: args.delta,
        salt: run_salt(),
    })
}

/// A salt no earlier run used: the process and the time, so that a run's
/// forwards never hit the prefix cache of another run's.
fn run_salt() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("pd-stitch-probe-{}-{nanos}", std::process::id())
}

/// What became of one request.
struct RequestOutcome {
    episode: usize,
    turn: usize,
    stream: bool,
    result: Result<PairComparison, String>,
}

impl RequestOutcome {
    fn name(&self) -> String {
        name(self.episode, self.turn, self.stream)
    }
}

/// `e0007-t1-stream`: a request's name in the report and in --save.
fn name(episode: usize, turn: usize, stream: bool) -> String {
    format!("e{episode:04}-t{turn}-{}", mode(stream))
}

/// `stream` or `whole`.
fn mode(stream: bool) -> &'static str {
    if stream {
        "stream"
    } else {
        "whole"
    }
}

/// What became of one episode's full-context check.
struct EpisodeOutcome {
    episode: usize,
    stream: bool,
    result: Result<EpisodeCheck, String>,
}

impl EpisodeOutcome {
    /// `e0007-stream`: the episode in its mode.
    fn name(&self) -> String {
        format!("e{:04}-{}", self.episode, mode(self.stream))
    }
}

/// One episode held to its full-context forward: its length, and the
/// colocated side's result, then the P/D side's.
struct EpisodeCheck {
    tokens: u64,
    sides: [SideResult; 2],
}

/// One turn as sent and answered: the prompt, the start asked, and per
/// side (colocated, P/D) choice 0's generated tokens (`None` where the
/// answer does not say them) and, with --full-context, its rows.
struct SentTurn {
    prompt: Vec<u64>,
    start: Option<u64>,
    completions: [Option<Vec<u64>>; 2],
    rows: [Result<RowPiece, String>; 2],
}

impl SentTurn {
    /// Choice 0's generated tokens on `side` (0 colocated, 1 P/D), none
    /// where the answer does not say them.
    fn completion(&self, side: usize) -> &[u64] {
        self.completions[side].as_deref().unwrap_or_default()
    }
}

/// One request's two answers (colocated and P/D) compared, and each
/// side's rows checked.
struct PairComparison {
    prompt_len: u64,
    choices: Vec<ChoiceOutcome>,
    /// The rows check of the colocated answer, then of the P/D one.
    rows: [RowsReport; 2],
}

struct ChoiceOutcome {
    choice: usize,
    compared: u64,
    equal_rows: u64,
    classes: Classes,
}

impl PairComparison {
    fn differs(&self) -> bool {
        self.choices.iter().any(|c| !c.classes.is_empty())
    }

    fn wrong_rows(&self) -> bool {
        self.rows.iter().any(|r| !r.is_clean())
    }
}

/// The two endpoints' names in messages.
const SIDES: [&str; 2] = ["colocated", "P/D"];

impl Probe {
    /// Runs every episode, prints the report, and returns the exit status.
    fn run(&self, quiet: bool) -> u8 {
        let started = Instant::now();
        let jobs: Vec<(usize, bool)> = (0..self.prompts.len())
            .flat_map(|e| self.modes.iter().map(move |&stream| (e, stream)))
            .collect();
        let total = jobs.len() * (self.turns + usize::from(self.full_context));
        let progress = Progress::new("requests", total, quiet);
        let done = AtomicUsize::new(0);
        let next = AtomicUsize::new(0);
        let outcomes = Mutex::new(Vec::with_capacity(total));
        let checks = Mutex::new(Vec::new());
        std::thread::scope(|scope| {
            for _ in 0..self.concurrency.min(jobs.len()).max(1) {
                scope.spawn(|| {
                    while let Some(&(episode, stream)) =
                        jobs.get(next.fetch_add(1, Ordering::Relaxed))
                    {
                        let (requests, check) = self.episode(episode, stream, &done, &progress);
                        if let Ok(mut all) = outcomes.lock() {
                            all.extend(requests);
                        }
                        if let (Some(check), Ok(mut all)) = (check, checks.lock()) {
                            all.push(check);
                        }
                    }
                });
            }
        });
        progress.finish();
        let mut outcomes = outcomes.into_inner().unwrap_or_default();
        outcomes.sort_by_key(|o| (o.episode, o.stream, o.turn));
        let mut checks = checks.into_inner().unwrap_or_default();
        checks.sort_by_key(|c| (c.episode, c.stream));
        self.report(&outcomes, &checks, started.elapsed())
    }

    /// The turns of one episode, in order (after a failed turn the rest are
    /// not sent, each said so), then, with --full-context, its check.
    fn episode(
        &self,
        episode: usize,
        stream: bool,
        done: &AtomicUsize,
        progress: &Progress,
    ) -> (Vec<RequestOutcome>, Option<EpisodeOutcome>) {
        let mut prompt = self.prompts.get(episode).cloned().unwrap_or_default();
        let mut rng = prompts::Rng(self.seed ^ (episode as u64).wrapping_mul(0x9e37_79b9));
        // Where each earlier turn's prompt and completion ended.
        let mut boundaries: Vec<u64> = Vec::new();
        let mut outcomes = Vec::with_capacity(self.turns);
        let mut sent: Vec<SentTurn> = Vec::with_capacity(self.turns);
        let mut failed = None;
        for turn in 0..self.turns {
            // The tokens the turn before ended with: its prompt and its
            // completion, all repeated at the head of this prompt. With
            // --full-context a full turn says its start too (0, the
            // engines' default), so that the start its rows are held to
            // is the one on the wire.
            let start = match sent.last() {
                Some(before) if self.delta => {
                    let common = before.prompt.len() + before.completion(0).len();
                    Some((common as u64).saturating_sub(1))
                }
                _ if self.full_context => Some(0),
                _ => None,
            };
            let result = match failed {
                Some(t) => Err(format!("not sent: turn {t} of this episode failed")),
                None => self.request(episode, turn, stream, &prompt, &boundaries, start),
            };
            let result = match result {
                Ok((compared, answers)) => {
                    let turn = self.sent_turn(&prompt, start, &answers);
                    let completion = turn.completion(0);
                    let sent_len = prompt.len() as u64;
                    boundaries.push(sent_len.saturating_sub(1));
                    boundaries.push((sent_len + completion.len() as u64).saturating_sub(1));
                    prompt.extend_from_slice(completion);
                    prompt.extend(rng.tokens(NEW_TOKENS, self.vocab));
                    sent.push(turn);
                    Ok(compared)
                }
                Err(message) => {
                    failed = failed.or(Some(turn));
                    Err(message)
                }
            };
            outcomes.push(RequestOutcome {
                episode,
                turn,
                stream,
                result,
            });
            progress.set(done.fetch_add(1, Ordering::Relaxed) + 1);
        }
        if !self.full_context {
            return (outcomes, None);
        }
        let result = match failed {
            Some(t) => Err(format!("not run: turn {t} of this episode failed")),
            None => self.full_context(episode, stream, &sent),
        };
        progress.set(done.fetch_add(1, Ordering::Relaxed) + 1);
        let check = EpisodeOutcome {
            episode,
            stream,
            result,
        };
        (outcomes, Some(check))
    }

    /// One request to both endpoints, compared; both answers too (the next
    /// turn builds on the colocated one; the full-context check reads
    /// both).
    fn request(
        &self,
        episode: usize,
        turn: usize,
        stream: bool,
        prompt: &[u64],
        earlier: &[u64],
        start: Option<u64>,
    ) -> Result<(PairComparison, [Answer; 2]), String> {
        // The request id names the turn for the logs (and for the mock
        // backends, which answer by the number in it).
        let index = episode * self.turns + turn;
        let id = format!("probe-{}-{index}", mode(stream));
        let body = self.engine.body(&id, prompt, self.sampling, stream, start);
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let (a, b) = std::thread::scope(|scope| {
            let a = scope.spawn(|| self.ask(&self.colocated, &bytes));
            let b = self.ask(&self.pd, &bytes);
            (
                a.join()
                    .unwrap_or_else(|_| Err("the request's thread failed".into())),
                b,
            )
        });
        let (mut a, mut b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (a, b) => {
                let errors: Vec<String> = [a.err(), b.err()]
                    .into_iter()
                    .zip(SIDES)
                    .filter_map(|(e, side)| e.map(|e| format!("{side}: {e}")))
                    .collect();
                return Err(errors.join("; "));
            }
        };
        let prompt_len = a
            .prompt_tokens
            .or(b.prompt_tokens)
            .unwrap_or(prompt.len() as u64);
        place_rows(self.engine, &mut a, prompt_len);
        place_rows(self.engine, &mut b, prompt_len);
        if let Some(dir) = &self.save {
            let file = format!("{}.json", name(episode, turn, stream));
            for (side, answer) in [("colocated", &a), ("pd", &b)] {
                save(&dir.join(side).join(&file), &answer.response)?;
            }
        }
        let compared = self.compare(&a, &b, prompt_len, earlier)?;
        Ok((compared, [a, b]))
    }

    /// A turn as the full-context check keeps it: its rows read now, while
    /// the files of rows by handle are the ones this turn was answered
    /// with.
    fn sent_turn(&self, prompt: &[u64], start: Option<u64>, answers: &[Answer; 2]) -> SentTurn {
        let completions = answers
            .each_ref()
            .map(|answer| answer.tokens.first().cloned().flatten());
        let rows = answers.each_ref().map(|answer| {
            if self.full_context {
                full_context::turn_rows(&answer.response, &self.store, self.row_shape)
            } else {
                Err("not read: no --full-context".to_owned())
            }
        });
        SentTurn {
            prompt: prompt.to_vec(),
            start,
            completions,
            rows,
        }
    }

    /// The episode's whole token sequence (its last turn's prompt and
    /// colocated completion) sent to the colocated server as one prompt,
    /// and each side's turns held to that forward's rows.
    fn full_context(
        &self,
        episode: usize,
        stream: bool,
        sent: &[SentTurn],
    ) -> Result<EpisodeCheck, String> {
        let last = sent.last().ok_or("no turn was sent")?;
        // The episode is made of the tokens each side generated: an answer
        // that does not say them cannot be placed.
        for (turn, sent) in sent.iter().enumerate() {
            for (tokens, side) in sent.completions.iter().zip(SIDES) {
                if tokens.is_none() {
                    return Err(format!(
                        "{side}: turn {turn}'s answer does not say which tokens choice 0 generated, which its episode needs"
                    ));
                }
            }
        }
        let mut tokens = last.prompt.clone();
        tokens.extend_from_slice(last.completion(0));
        let len = tokens.len() as u64;
        // Named after the last turn's index, which the mock backends answer by.
        let index = episode * self.turns + self.turns.saturating_sub(1);
        let full = self.fresh_forward((episode, stream, index), None, &tokens)?;
        let completions =
            |side: usize| -> Vec<&[u64]> { sent.iter().map(|t| t.completion(side)).collect() };
        let colocated = completions(0);
        let side_turns = |side: usize| -> Vec<SideTurn<'_>> {
            sent.iter()
                .map(|t| SideTurn {
                    prompt: &t.prompt,
                    start: t.start,
                    completion: t.completion(side),
                    rows: &t.rows[side],
                })
                .collect()
        };
        let mut suspects: [Vec<Suspect>; 2] = Default::default();
        let mut sides = [0, 1].map(|side| {
            if let Some(turn) = full_context::diverged(&completions(side), &colocated) {
                return SideResult::Diverged { turn };
            }
            let (check, found) = full_context::check_side(&side_turns(side), &full);
            suspects[side] = found;
            SideResult::Checked(check)
        });
        // A prefill's row that differs from the forward elsewhere than a
        // boundary: the colocated server is asked that turn's prompt again,
        // alone, and answering the same row there makes it recomputed (the
        // engine's rows of a prefix depend on the forward's length).
        let mut turns: Vec<usize> = suspects.iter().flatten().map(|s| s.turn).collect();
        turns.sort_unstable();
        turns.dedup();
        for turn in turns {
            let prompt = &sent
                .get(turn)
                .ok_or("a turn the episode never sent")?
                .prompt;
            let index = episode * self.turns + turn;
            let again = self.fresh_forward((episode, stream, index), Some(turn), prompt)?;
            for (side, found) in sides.iter_mut().zip(&suspects) {
                if let SideResult::Checked(check) = side {
                    full_context::confirm(check, found, turn, &again);
                }
            }
        }
        Ok(EpisodeCheck { tokens: len, sides })
    }

    /// The colocated server's forward of `tokens` as one prompt (one token
    /// generated, rows from 0, a `cache_salt` of its own so that nothing is
    /// a prefix-cache hit): the rows of the prompt's positions. The
    /// episode's full-context forward (`confirming` None), or the
    /// confirming forward of one turn's prompt; named after the request
    /// index the mocks answer by.
    fn fresh_forward(
        &self,
        (episode, stream, index): (usize, bool, usize),
        confirming: Option<usize>,
        tokens: &[u64],
    ) -> Result<RowPiece, String> {
        let len = tokens.len() as u64;
        let mode = mode(stream);
        let (name, id, salt, file) = match confirming {
            None => (
                "the full-context forward".to_owned(),
                format!("probe-{mode}-full-{index}"),
                format!("{}-e{episode}-{mode}", self.salt),
                format!("e{episode:04}-full-{mode}.json"),
            ),
            Some(turn) => (
                format!("the confirming forward of turn {turn}"),
                format!("probe-{mode}-confirm-{index}"),
                format!("{}-e{episode}-t{turn}-{mode}", self.salt),
                format!("e{episode:04}-confirm-t{turn}-{mode}.json"),
            ),
        };
        let body = self.engine.full_context_body(&id, tokens, stream, &salt);
        let bytes = serde_json::to_vec(&body).map_err(|e| e.to_string())?;
        let mut forward = self
            .ask(&self.colocated, &bytes)
            .map_err(|e| format!("{name}: colocated: {e}"))?;
        place_rows(self.engine, &mut forward, len);
        if let Some(dir) = &self.save {
            save(&dir.join("full").join(file), &forward.response)?;
        }
        full_context::forward_rows(&name, &forward.response, len, &self.store, self.row_shape)
    }

    /// Sends `body` to `url` and reads the answer.
    fn ask(&self, url: &Url, body: &[u8]) -> Result<Answer, String> {
        let mut bytes = Vec::new();
        let head = http::post(
            url,
            self.engine.path(),
            body,
            self.timeout,
            &mut |chunk: &[u8]| {
                bytes.extend_from_slice(chunk);
            },
        )
        .map_err(|e| e.to_string())?;
        let events = head
            .content_type
            .as_deref()
            .is_some_and(|t| t.starts_with("text/event-stream"));
        if events {
            let mut stream = sse::Events::default();
            stream.feed(&bytes);
            if stream.unfinished() {
                return Err("the stream ended inside an event".into());
            }
            self.engine.stream(&stream.data)
        } else {
            self.engine.whole(&bytes)
        }
    }

    /// The comparison of two answers, classified, and each side's rows
    /// checked.
    fn compare(
        &self,
        a: &Answer,
        b: &Answer,
        prompt_len: u64,
        earlier: &[u64],
    ) -> Result<PairComparison, String> {
        let options = compare::Options {
            prompt_len: Some(prompt_len),
            row_shape: self.row_shape,
            ..compare::Options::default()
        };
        let report = compare::compare(&a.response, &self.store, &b.response, &self.store, &options)
            .map_err(|e| format!("cannot compare the answers: {e}"))?;
        let mut boundaries = vec![prompt_len.saturating_sub(1)];
        boundaries.extend_from_slice(earlier);
        let choices = report
            .choices
            .iter()
            .map(|c| {
                let tokens = |answer: &Answer| answer.tokens.get(c.choice).cloned().flatten();
                let diverged = match (tokens(a), tokens(b)) {
                    (Some(ta), Some(tb)) if ta != tb => {
                        let k = ta.iter().zip(&tb).take_while(|(x, y)| x == y).count();
                        Some(prompt_len + k as u64)
                    }
                    _ => None,
                };
                ChoiceOutcome {
                    choice: c.choice,
                    compared: c.compared,
                    equal_rows: c.equal_rows,
                    classes: classify(c, &boundaries, diverged),
                }
            })
            .collect();
        let rows = [a, b].map(|answer| {
            gather::check_response_rows(&answer.response, &self.store, self.row_shape, self.rows)
        });
        Ok(PairComparison {
            prompt_len,
            choices,
            rows,
        })
    }

    /// Prints the report; the exit status.
    fn report(
        &self,
        outcomes: &[RequestOutcome],
        checks: &[EpisodeOutcome],
        elapsed: Duration,
    ) -> u8 {
        let mut totals = RequestCounts::new();
        for outcome in outcomes {
            totals.add(outcome);
        }
        let mut full = FullContextCounts::default();
        for check in checks {
            match &check.result {
                Ok(check) => check.sides.iter().for_each(|side| full.add(side)),
                Err(_) => full.errors += 1,
            }
        }
        let status = if totals.errors + full.errors > 0 {
            PROBE_ERROR
        } else {
            u8::from(totals.different + totals.wrong_rows + full.failed > 0)
        };
        let turns = self.turns;
        let episodes = self.prompts.len();
        let modes = self.modes.len();
        if self.json {
            let requests: Vec<Value> = outcomes.iter().map(outcome_json).collect();
            let mut report = json!({
                "all_equal": status == 0,
                "episodes": episodes,
                "turns": turns,
                "modes": self.modes.iter().map(|&s| mode(s)).collect::<Vec<_>>(),
                "delta": self.delta,
                "requests": requests,
                "total": totals.to_json(),
                "seconds": elapsed.as_secs_f64(),
            });
            if self.full_context {
                report["full_context"] = json!({
                    "episodes": checks.iter().map(check_json).collect::<Vec<_>>(),
                    "total": full.to_json(),
                });
            }
            println!("{report}");
            return status;
        }
        println!(
            "{:<20}  {:<10}  {:>9}  {:>15}  details",
            "request", "status", "compared", "equal rows"
        );
        for outcome in outcomes {
            println!("{}", outcome_line(outcome));
        }
        println!(
            "total: {} request(s) ({episodes} episode(s) x {turns} turn(s) x {modes} mode(s)), {} equal, {} different, {} with wrong rows, {} error(s); {}; rows check: colocated {}, P/D {}; {:.1} s",
            outcomes.len(),
            totals.equal,
            totals.different,
            totals.wrong_rows,
            totals.errors,
            totals.kinds(),
            summary(&totals.rows[0]),
            summary(&totals.rows[1]),
            elapsed.as_secs_f64()
        );
        if !self.full_context {
            return status;
        }
        println!(
            "{:<14}  {:<9}  {:>6}  {:>8}  {:>8}  {:>14}  {:>10}  {:>9}  details",
            "episode",
            "side",
            "tokens",
            "compared",
            "boundary",
            "decode-sourced",
            "recomputed",
            "scattered"
        );
        for check in checks {
            for line in check_lines(check) {
                println!("{line}");
            }
        }
        println!(
            "full context{}: {} check(s) ({episodes} episode(s) x {modes} mode(s)), {} side(s) checked, {} failed, {} error(s); {}",
            if self.delta { " (delta)" } else { "" },
            checks.len(),
            full.sides,
            full.failed,
            full.errors,
            full.summary()
        );
        status
    }
}

/// An episode's lines: one a side, or one saying why it was not checked.
fn check_lines(outcome: &EpisodeOutcome) -> Vec<String> {
    let name = outcome.name();
    let check = match &outcome.result {
        Ok(check) => check,
        Err(message) => return vec![format!("{name:<14}  {:<9}  ERROR  {message}", "-")],
    };
    check
        .sides
        .iter()
        .zip(SIDES)
        .map(|(result, side)| {
            let counts = match result {
                SideResult::Checked(c) => [
                    c.compared.to_string(),
                    c.boundary.len().to_string(),
                    c.decode_sourced.len().to_string(),
                    c.recomputed.len().to_string(),
                    c.scattered.len().to_string(),
                ],
                SideResult::Diverged { .. } => ["-", "-", "-", "-", "-"].map(String::from),
            };
            let [compared, boundary, decode, recomputed, scattered] = counts;
            let details = full_context::details(result);
            let line = format!(
                "{name:<14}  {side:<9}  {:>6}  {compared:>8}  {boundary:>8}  {decode:>14}  {recomputed:>10}  {scattered:>9}  {details}",
                check.tokens
            );
            line.trim_end().to_owned()
        })
        .collect()
}

/// An episode's check as JSON.
fn check_json(outcome: &EpisodeOutcome) -> Value {
    let mut entry = json!({
        "episode": outcome.episode,
        "stream": outcome.stream,
        "name": outcome.name(),
    });
    match &outcome.result {
        Err(message) => {
            entry["status"] = json!("error");
            entry["error"] = json!(message);
        }
        Ok(check) => {
            let passes = check.sides.iter().all(SideResult::passes);
            entry["status"] = json!(if passes { "passed" } else { "failed" });
            entry["tokens"] = json!(check.tokens);
            entry["colocated"] = full_context::side_json(&check.sides[0]);
            entry["pd"] = full_context::side_json(&check.sides[1]);
        }
    }
    entry
}

/// Writes `response` to `path`, for --save.
fn save(path: &std::path::Path, response: &Value) -> Result<(), String> {
    std::fs::write(path, response.to_string())
        .map_err(|e| format!("--save {}: {e}", path.display()))
}

/// The requests of a run counted by what became of them, and the rows
/// check's findings summed per side.
struct RequestCounts {
    equal: usize,
    different: usize,
    wrong_rows: usize,
    errors: usize,
    /// Requests showing each kind of difference.
    kinds: [(&'static str, usize); 5],
    rows: [[(&'static str, u64); 4]; 2],
}

impl RequestCounts {
    fn new() -> RequestCounts {
        RequestCounts {
            equal: 0,
            different: 0,
            wrong_rows: 0,
            errors: 0,
            kinds: [
                ("boundary", 0),
                ("whole-rows", 0),
                ("scattered", 0),
                ("missing", 0),
                ("diverged", 0),
            ],
            rows: [RowsReport::new().counts; 2],
        }
    }

    fn add(&mut self, outcome: &RequestOutcome) {
        let compared = match &outcome.result {
            Ok(compared) => compared,
            Err(_) => {
                self.errors += 1;
                return;
            }
        };
        match (compared.differs(), compared.wrong_rows()) {
            (false, false) => self.equal += 1,
            (true, _) => self.different += 1,
            (false, true) => self.wrong_rows += 1,
        }
        let mut seen: Vec<&str> = compared
            .choices
            .iter()
            .flat_map(|c| c.classes.kinds())
            .collect();
        seen.sort_unstable();
        seen.dedup();
        for (kind, n) in &mut self.kinds {
            *n += usize::from(seen.contains(kind));
        }
        for (side, report) in self.rows.iter_mut().zip(&compared.rows) {
            for ((_, n), (_, m)) in side.iter_mut().zip(&report.counts) {
                *n += m;
            }
        }
    }

    /// `boundary 1, whole-rows 0, ...`: requests showing each kind.
    fn kinds(&self) -> String {
        self.kinds
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn to_json(&self) -> Value {
        let kinds: serde_json::Map<String, Value> = self
            .kinds
            .iter()
            .map(|(k, n)| ((*k).to_owned(), json!(n)))
            .collect();
        let rows = |counts: &[(&str, u64); 4]| -> Value {
            counts
                .iter()
                .map(|(k, n)| ((*k).to_owned(), json!(n)))
                .collect::<serde_json::Map<String, Value>>()
                .into()
        };
        json!({
            "equal": self.equal,
            "different": self.different,
            "wrong_rows": self.wrong_rows,
            "errors": self.errors,
            "kinds": kinds,
            "rows_check": {"colocated": rows(&self.rows[0]), "pd": rows(&self.rows[1])},
        })
    }
}

/// `none`, or `12 zero-row, 1 duplicate`.
fn summary(counts: &[(&str, u64); 4]) -> String {
    let parts: Vec<String> = counts
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{n} {k}"))
        .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// One request's line.
fn outcome_line(outcome: &RequestOutcome) -> String {
    let name = outcome.name();
    let compared = match &outcome.result {
        Ok(compared) => compared,
        Err(message) => {
            return format!(
                "{name:<20}  {:<10}  {:>9}  {:>15}  {message}",
                "ERROR", "-", "-"
            )
        }
    };
    let (rows, equal) = compared
        .choices
        .iter()
        .fold((0, 0), |(n, e), c| (n + c.compared, e + c.equal_rows));
    let status = match (compared.differs(), compared.wrong_rows()) {
        (false, false) => "equal",
        (true, _) => "DIFFERENT",
        (false, true) => "WRONG ROWS",
    };
    let mut details = String::new();
    for c in compared.choices.iter().filter(|c| !c.classes.is_empty()) {
        let _ = write!(details, "choice {}: {}; ", c.choice, c.classes);
    }
    for (side, report) in SIDES.iter().zip(&compared.rows) {
        if let Some(first) = report.findings.first() {
            let _ = write!(
                details,
                "{side} rows: {} (first: {first}); ",
                report.summary()
            );
        }
    }
    let details = details.trim_end_matches("; ");
    let details = if details.is_empty() {
        format!("prompt {}", compared.prompt_len)
    } else {
        format!("prompt {}; {details}", compared.prompt_len)
    };
    let fraction = if rows == 0 {
        format!("{equal}/0")
    } else {
        format!("{equal}/{rows}")
    };
    format!("{name:<20}  {status:<10}  {rows:>9}  {fraction:>15}  {details}")
}

fn outcome_json(outcome: &RequestOutcome) -> Value {
    let base = json!({
        "request": outcome.name(),
        "episode": outcome.episode,
        "turn": outcome.turn,
        "stream": outcome.stream,
    });
    let mut entry = base;
    match &outcome.result {
        Err(message) => {
            entry["status"] = json!("error");
            entry["error"] = json!(message);
        }
        Ok(compared) => {
            entry["status"] = json!(match (compared.differs(), compared.wrong_rows()) {
                (false, false) => "equal",
                (true, _) => "different",
                (false, true) => "wrong_rows",
            });
            entry["prompt_len"] = json!(compared.prompt_len);
            entry["choices"] = compared
                .choices
                .iter()
                .map(|c| {
                    json!({
                        "choice": c.choice,
                        "compared": c.compared,
                        "equal_rows": c.equal_rows,
                        "kinds": c.classes.kinds(),
                        "classes": c.classes.to_json(),
                    })
                })
                .collect::<Vec<_>>()
                .into();
            entry["rows_check"] = json!({
                "colocated": compared.rows[0].to_json(),
                "pd": compared.rows[1].to_json(),
            });
        }
    }
    entry
}

#[cfg(test)]
mod tests {
    use self::full_context::SideCheck;
    use super::*;

    fn outcome(result: Result<EpisodeCheck, String>) -> EpisodeOutcome {
        EpisodeOutcome {
            episode: 3,
            stream: true,
            result,
        }
    }

    #[test]
    fn an_episode_has_a_line_a_side() {
        let passing = SideResult::Checked(SideCheck {
            compared: 76,
            decode_sourced: vec![60],
            ..SideCheck::default()
        });
        let failing = SideResult::Checked(SideCheck {
            compared: 76,
            boundary: vec![52],
            ..SideCheck::default()
        });
        let check = EpisodeCheck {
            tokens: 77,
            sides: [passing, failing],
        };
        assert_eq!(
            check_lines(&outcome(Ok(check))),
            [
                "e0003-stream    colocated      77        76         0               1           0          0  decode-sourced at 60",
                "e0003-stream    P/D            77        76         1               0           0          0  boundary at 52",
            ]
        );
        let diverged = EpisodeCheck {
            tokens: 9,
            sides: [
                SideResult::Checked(SideCheck::default()),
                SideResult::Diverged { turn: 1 },
            ],
        };
        assert_eq!(
            check_lines(&outcome(Ok(diverged)))[1],
            "e0003-stream    P/D             9         -         -               -           -          -  \
             tokens diverged from the colocated answer at turn 1: not held to the forward"
        );
        assert_eq!(
            check_lines(&outcome(Err(
                "not run: turn 0 of this episode failed".into()
            ))),
            ["e0003-stream    -          ERROR  not run: turn 0 of this episode failed"]
        );
    }

    #[test]
    fn an_episode_as_json_fails_when_a_side_does() {
        let check = EpisodeCheck {
            tokens: 77,
            sides: [
                SideResult::Checked(SideCheck::default()),
                SideResult::Checked(SideCheck {
                    scattered: vec![4],
                    ..SideCheck::default()
                }),
            ],
        };
        let json = check_json(&outcome(Ok(check)));
        assert_eq!(
            (&json["name"], &json["status"], &json["tokens"]),
            (&json!("e0003-stream"), &json!("failed"), &json!(77))
        );
        assert_eq!(json["pd"]["scattered"], json!([4]));
        assert_eq!(json["colocated"]["status"], "passed");
        let error = check_json(&outcome(Err("boom".into())));
        assert_eq!(
            (&error["status"], &error["error"]),
            (&json!("error"), &json!("boom"))
        );
    }
}
