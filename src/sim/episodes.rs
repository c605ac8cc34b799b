//! Multi-turn episodes through every wire form, assembled and checked
//! against the model's full-context forward.
//!
//! An episode is turns of one model: turn 0's prompt is drawn, turn
//! `t + 1`'s is turn `t`'s prompt, its first choice's completion and 1-8
//! new tokens, as a chat goes on. Each turn is answered in each wire form
//! by a colocated server and a 1P1D pair whose decode flips at planted
//! positions of its completion (the decode's batches are not the
//! prefill's). Its P/D pair is stitched by the library and read back with
//! [`read_piece`](crate::gather::read_piece), and so is its colocated
//! answer; each side's turns are pushed onto an [`Episode`] (`Earliest`),
//! and the assembled rows are classified against the model's rows of the
//! whole sequence ([`classify`]): they must equal them everywhere except at
//! the planted flips, which must be exactly the decode-sourced differences.
//!
//! With `delta`, turn `t + 1` asks its rows from its common prefix with
//! turn `t` less one, `L - 1` (the boundary, the last token of turn `t`,
//! which never went through the model there); with `late_start`, from `L`,
//! the off-by-one trainers have shipped, which leaves `L - 1` without a
//! row: the check must find it as a boundary
//! ([`Finding::of_error`](crate::episode::Finding::of_error)). Dynamo's
//! OpenAI API takes no start: its turns are full in every run.

use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::algebra::{Convention, Dtype};
use crate::episode::{classify, Episode, Finding, Prefer, RowPiece, Turn};
use crate::gather::{read_piece, Store};
use crate::{Stitch, Stitcher};

use super::answer::answer;
use super::engine::{Engine, Wire};
use super::model::{Model, VOCAB};
use super::request::{encode, Request};
use super::responses::Responses;
use super::slot_pool::{SlotPool, POOL_SLOTS};
use super::splitmix::{mix, splitmix, SplitMix64};

/// What multi-turn run to make.
#[derive(Clone, Debug)]
pub struct EpisodeConfig {
    /// The engines whose wire forms answer (every one of each).
    pub engines: Vec<Engine>,
    /// How many episodes.
    pub episodes: usize,
    /// Turns per episode (at least one).
    pub turns: usize,
    /// The seed every episode is drawn from.
    pub seed: u64,
    /// Whether turn `t + 1` asks its rows from `L - 1` (else from 0).
    pub delta: bool,
    /// The planted off-by-one: delta turns ask from `L` instead.
    pub late_start: bool,
    /// How many episodes run at once.
    pub concurrency: usize,
}

/// What one wire form's episodes came to, over their stitched and their
/// colocated sides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireEpisodes {
    /// The wire form.
    pub wire: Wire,
    /// Episode sides (an episode's stitched turns, its colocated turns)
    /// whose every turn was pushed and assembled.
    pub assembled: usize,
    /// Of those, the sides whose rows differ from the full-context forward
    /// exactly at their planted flips, each decode-sourced.
    pub right: usize,
    /// Flips planted, over every side.
    pub planted: usize,
    /// Positions `classify` called decode-sourced.
    pub decode_sourced: usize,
    /// Boundary findings: differences at a turn's `L - 1` or `L`, and
    /// turns whose push left a boundary without a row.
    pub boundary: usize,
    /// Where they were: the episode and the position of each.
    pub boundaries: Vec<(usize, u64)>,
    /// Differences elsewhere from a prefill's row.
    pub scattered: usize,
}

impl WireEpisodes {
    /// A wire form's row before any episode is counted.
    fn empty(wire: Wire) -> WireEpisodes {
        WireEpisodes {
            wire,
            assembled: 0,
            right: 0,
            planted: 0,
            decode_sourced: 0,
            boundary: 0,
            boundaries: Vec::new(),
            scattered: 0,
        }
    }
}

/// The outcome of a multi-turn run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpisodeSummary {
    /// Episodes simulated.
    pub episodes: usize,
    /// Turns per episode.
    pub turns: usize,
    /// Whether later turns asked from a delta start.
    pub delta: bool,
    /// Whether the delta start was planted one late.
    pub late_start: bool,
    /// Positions of the episodes' last turns, over all episodes.
    pub positions: u64,
    /// Per wire form, in report order.
    pub wires: Vec<WireEpisodes>,
    /// What went wrong other than a finding, one line each.
    pub mismatches: Vec<String>,
}

impl EpisodeSummary {
    /// Whether every side of every episode was assembled and differs from
    /// the full-context forward exactly at its planted flips.
    pub fn all_right(&self) -> bool {
        let sides = 2 * self.episodes;
        self.mismatches.is_empty()
            && self.wires.iter().all(|w| {
                w.assembled == sides
                    && w.right == sides
                    && w.boundary == 0
                    && w.scattered == 0
                    && w.decode_sourced == w.planted
            })
    }
}

impl EpisodeConfig {
    /// The turns of episode `episode`, the same for every wire form: a
    /// request per turn, each asking the start the run asks (0, `L - 1`, or
    /// `L` with the planted off-by-one), its decode flipping at about one
    /// completion position in six; the SGLang decodes of even episodes
    /// full-length, of odd ones suffix-only.
    pub fn episode(&self, episode: usize) -> Vec<Request> {
        draw_episode(self, episode)
    }
}

/// One episode's turns (see [`EpisodeConfig::episode`]).
fn draw_episode(config: &EpisodeConfig, episode: usize) -> Vec<Request> {
    let mut rng = SplitMix64::new(mix(config.seed ^ mix(episode as u64 + 0xe715)));
    let (layers, top_k) = [(4, 2), (8, 4), (16, 8), (48, 8)][rng.below(4) as usize];
    let wide = rng.chance(2);
    let model = Model {
        seed: splitmix(config.seed ^ 0x0de1_5eed),
        layers,
        top_k,
        experts: if wide { 512 } else { 256 },
    };
    let dtype = if wide { Dtype::Uint16 } else { Dtype::Uint8 };
    let choices = rng.range(1, 2) as usize;
    let convention = if episode % 2 == 0 {
        Convention::FullLength
    } else {
        Convention::SuffixOnly
    };
    let mut prompt: Vec<u64> = (0..rng.range(1, 48)).map(|_| rng.below(VOCAB)).collect();
    let mut turns: Vec<Request> = Vec::new();
    for t in 0..config.turns.max(1) {
        let common = match turns.last() {
            Some(before) => {
                prompt = before.tokens(0);
                let common = prompt.len() as u64;
                prompt.extend((0..rng.range(1, 8)).map(|_| rng.below(VOCAB)));
                Some(common)
            }
            None => None,
        };
        let index = episode * config.turns.max(1) + t;
        let request = Request::new(
            index,
            model,
            dtype,
            prompt.clone(),
            choices,
            rng.range(1, 24),
        );
        let p = request.prompt_len();
        let flips = (p..request.rows()).filter(|_| rng.chance(6)).collect();
        let start = match common {
            Some(common) if config.delta || config.late_start => {
                common - 1 + u64::from(config.late_start)
            }
            _ => 0,
        };
        turns.push(
            request
                .starting_at(start)
                .with_flips(flips)
                .with_convention(convention),
        );
    }
    turns
}

/// One side of an episode in one wire form, being assembled.
struct Assembling {
    episode: Episode,
    /// Why it stopped before its last turn: a finding at a position, or an
    /// error.
    stopped: Option<Result<(u64, Finding), String>>,
}

impl Assembling {
    fn new() -> Assembling {
        Assembling {
            episode: Episode::new(Prefer::Earliest),
            stopped: None,
        }
    }

    /// Pushes `turn` unless the side stopped; an error stops it, named by
    /// `tag` unless it is a finding.
    fn push(&mut self, turn: Result<Turn, String>, tag: &str) {
        if self.stopped.is_some() {
            return;
        }
        let turn = match turn {
            Ok(turn) => turn,
            Err(why) => {
                self.stopped = Some(Err(format!("{tag}: {why}")));
                return;
            }
        };
        if let Err(err) = self.episode.push(turn) {
            self.stopped = Some(Finding::of_error(&err).ok_or_else(|| format!("{tag}: {err}")));
        }
    }
}

/// The turn `request` answered in `responses`: its first choice's tokens,
/// the start it asked for (when the wire takes one and it is a delta), and
/// its rows, read back from `response` (the stitched pair's, or the
/// colocated answer).
fn turn_of(
    wire: Wire,
    request: &Request,
    delta: bool,
    response: &serde_json::Value,
    store: &Store,
) -> Result<Turn, String> {
    let [layers, top_k] = request.row_shape();
    let piece = read_piece(response, 0, None, store, Some((layers, top_k)))
        .map_err(|err| format!("its rows cannot be read: {err}"))?;
    let mut turn = Turn::new(request.prompt.clone(), request.token_ids(0, false)).with_piece(piece);
    if delta && wire.takes_a_start() {
        let start = match wire {
            Wire::Sglang(_) => request.start,
            _ => request.start_below_prompt(),
        };
        turn = turn.with_start(start);
    }
    Ok(turn)
}

/// What one episode in one wire form came to: its row in the summary (its
/// two sides), and its mismatches.
fn one_wire(
    config: &EpisodeConfig,
    episode: usize,
    turns: &[Request],
    wire: Wire,
) -> io::Result<(WireEpisodes, Vec<String>)> {
    let mut store = Store::memory();
    let mut pool = SlotPool::new(POOL_SLOTS);
    let mut sides = [Assembling::new(), Assembling::new()];
    let mut mismatches = Vec::new();
    let tag =
        |t: usize, side: &str| format!("episode {episode} ({}, {side}) turn {t}", wire.name());
    for (t, request) in turns.iter().enumerate() {
        let delta = t > 0 && (config.delta || config.late_start);
        let Responses {
            colocated,
            prefill,
            decode,
        } = answer(
            wire,
            std::slice::from_ref(request),
            false,
            Some(&mut pool),
            &mut store,
        )?;
        let [layers, top_k] = request.row_shape();
        let mut merged = decode;
        let stitched =
            Stitcher::new()
                .row_shape(layers, top_k)
                .merge(&prefill, &mut merged, Stitch::ForPd);
        let stitched_turn = match stitched {
            Ok(true) => turn_of(wire, request, delta, &merged, &store),
            other => Err(format!("not stitched: {other:?}")),
        };
        sides[0].push(stitched_turn, &tag(t, "stitched"));
        sides[1].push(
            turn_of(wire, request, delta, &colocated, &store),
            &tag(t, "colocated"),
        );
    }
    let last = turns.last().map(|r| r.tokens(0)).unwrap_or_default();
    let model = turns.first().map(|r| r.model);
    let dtype = turns.first().map_or(Dtype::Uint8, |r| wire.dtype(r.dtype));
    let planted: Vec<u64> = turns.iter().flat_map(|r| r.flips.iter().copied()).collect();
    let mut row = WireEpisodes::empty(wire);
    for (s, side) in sides.into_iter().enumerate() {
        let name = ["stitched", "colocated"][s];
        match side.stopped {
            Some(Ok((position, _))) => {
                row.boundary += 1;
                row.boundaries.push((episode, position));
                continue;
            }
            Some(Err(why)) => {
                mismatches.push(why);
                continue;
            }
            None => {}
        }
        let (Some(model), Ok(assembled)) = (model, side.episode.finish()) else {
            mismatches.push(format!(
                "episode {episode} ({}, {name}): no turns",
                wire.name()
            ));
            continue;
        };
        row.assembled += 1;
        row.planted += planted.len();
        // The forward of the whole sequence as one prompt: every row a
        // prefill's.
        let full: Vec<u8> = model
            .forward(&last)
            .iter()
            .flat_map(|ids| encode(dtype, ids))
            .collect();
        let full = RowPiece::whole(dtype, vec![model.layers, model.top_k], full);
        match classify(&assembled, &full) {
            Ok(classified) => {
                let decode_sourced = classified.positions(Finding::DecodeSourced);
                let boundary = classified.positions(Finding::Boundary);
                row.decode_sourced += decode_sourced.len();
                row.boundary += boundary.len();
                row.boundaries
                    .extend(boundary.iter().map(|&position| (episode, position)));
                row.scattered += classified.positions(Finding::Scattered).len();
                if classified.passes() && decode_sourced == planted.as_slice() {
                    row.right += 1;
                } else if classified.passes() {
                    mismatches.push(format!(
                        "episode {episode} ({}, {name}): decode-sourced differences at {decode_sourced:?}, planted at {planted:?}",
                        wire.name()
                    ));
                }
            }
            Err(err) => mismatches.push(format!(
                "episode {episode} ({}, {name}): the full-context check refused it: {err}",
                wire.name()
            )),
        }
    }
    Ok((row, mismatches))
}

/// Runs `config.episodes` episodes through every wire form of the engines,
/// calling `progress(done, total)` after each episode.
///
/// # Errors
///
/// A row shape the `.npy` header cannot hold; everything else is counted.
pub fn run_episodes(
    config: &EpisodeConfig,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> io::Result<EpisodeSummary> {
    let wires: Vec<Wire> = config
        .engines
        .iter()
        .flat_map(|engine| engine.wires())
        .copied()
        .collect();
    let next = AtomicUsize::new(0);
    let done = AtomicUsize::new(0);
    type Found = (usize, u64, Vec<(WireEpisodes, Vec<String>)>);
    let found: Mutex<Vec<Found>> = Mutex::new(Vec::new());
    let failure: Mutex<Option<io::Error>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..config.concurrency.max(1) {
            scope.spawn(|| loop {
                let episode = next.fetch_add(1, Ordering::Relaxed);
                if episode >= config.episodes {
                    break;
                }
                let turns = draw_episode(config, episode);
                let positions = turns.last().map_or(0, |r| r.rows() + 1);
                let rows: io::Result<Vec<_>> = wires
                    .iter()
                    .map(|&wire| one_wire(config, episode, &turns, wire))
                    .collect();
                match rows {
                    Ok(rows) => {
                        if let Ok(mut f) = found.lock() {
                            f.push((episode, positions, rows));
                        }
                    }
                    Err(err) => {
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(err);
                        }
                        break;
                    }
                }
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, config.episodes);
            });
        }
    });
    if let Some(err) = failure.into_inner().ok().flatten() {
        return Err(err);
    }
    let mut found = found.into_inner().unwrap_or_default();
    found.sort_by_key(|(episode, _, _)| *episode);
    let mut summary = EpisodeSummary {
        episodes: found.len(),
        turns: config.turns.max(1),
        delta: config.delta || config.late_start,
        late_start: config.late_start,
        positions: 0,
        wires: wires
            .iter()
            .map(|&wire| WireEpisodes::empty(wire))
            .collect(),
        mismatches: Vec::new(),
    };
    for (_, positions, rows) in found {
        summary.positions += positions;
        for ((row, mismatches), total) in rows.into_iter().zip(&mut summary.wires) {
            total.assembled += row.assembled;
            total.right += row.right;
            total.planted += row.planted;
            total.decode_sourced += row.decode_sourced;
            total.boundary += row.boundary;
            total.boundaries.extend(row.boundaries);
            total.scattered += row.scattered;
            summary.mismatches.extend(mismatches);
        }
    }
    Ok(summary)
}

impl fmt::Display for EpisodeSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let asked = match (self.delta, self.late_start) {
            (_, true) => "delta requests from L, one late",
            (true, false) => "delta requests from L - 1",
            (false, false) => "full requests",
        };
        writeln!(
            f,
            "{} episodes of {} turns ({asked}), {} positions, each through {} wire forms",
            self.episodes,
            self.turns,
            self.positions,
            self.wires.len()
        )?;
        let sides = 2 * self.episodes;
        writeln!(
            f,
            "{:<16}{:>11}{:>9}{:>24}{:>10}{:>11}",
            "mode", "assembled", "right", "decode flips found", "boundary", "scattered"
        )?;
        for w in &self.wires {
            writeln!(
                f,
                "{:<16}{:>11}{:>9}{:>24}{:>10}{:>11}",
                w.wire.name(),
                format!("{}/{sides}", w.assembled),
                format!("{}/{sides}", w.right),
                format!("{}/{}", w.decode_sourced, w.planted),
                w.boundary,
                w.scattered
            )?;
        }
        if self.all_right() {
            write!(
                f,
                "every episode, stitched and colocated, in every form: the full-context rows but at its planted decode flips, each found decode-sourced"
            )
        } else {
            let boundary: usize = self.wires.iter().map(|w| w.boundary).sum();
            let scattered: usize = self.wires.iter().map(|w| w.scattered).sum();
            write!(
                f,
                "WRONG: boundary {boundary}, scattered {scattered}, {} other mismatch(es)",
                self.mismatches.len()
            )?;
            let first = self
                .wires
                .iter()
                .find_map(|w| Some((w.wire, w.boundaries.first()?)));
            match first {
                Some((wire, (episode, position))) => write!(
                    f,
                    "; the first boundary: episode {episode} ({}) at position {position}",
                    wire.name()
                ),
                None => Ok(()),
            }
        }
    }
}
