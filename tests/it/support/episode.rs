//! The episode's naive reference model, its generators, and the model of
//! rows as a function of (token prefix, position) that law E7 holds the
//! episode to.
//!
//! The reference model knows no trie and no arena: a turn's rows are a map
//! from position to row, each piece laid out by the placement rule spelled
//! position by position; the row of a position of a path is found by
//! scanning the pushed turns in push order for those whose tokens agree
//! with the path's up to that position and that have a row there, the
//! first (`Earliest`) or the last (`Latest`) winning. Rows are values
//! (`i64`), not bytes, so widening is checked by what it must keep.

use std::collections::BTreeMap;

use pd_stitch::algebra::Dtype;
use pd_stitch::episode::{Assembled, Phase, Prefer, RowPiece, Turn};
use proptest::prelude::*;

/// A piece as the model holds it: its rows as values, one `Vec` a row.
#[derive(Clone, Debug, PartialEq)]
pub struct PieceSpec {
    pub side: Option<Phase>,
    pub first: Option<u64>,
    pub dtype: Dtype,
    pub rows: Vec<Vec<i64>>,
}

/// A turn as the model holds it.
#[derive(Clone, Debug, PartialEq)]
pub struct TurnSpec {
    pub prompt: Vec<u64>,
    pub completion: Vec<u64>,
    pub start: Option<u64>,
    pub pieces: Vec<PieceSpec>,
    /// The rows a full-context response of this turn has, `[0, E)`: the
    /// source of the delta's (law E2).
    pub full: Vec<Vec<i64>>,
}

/// An episode: its row shape and its turns in push order.
#[derive(Clone, Debug)]
pub struct EpisodeSpec {
    pub row_shape: Vec<u64>,
    pub turns: Vec<TurnSpec>,
}

impl TurnSpec {
    pub fn tokens(&self) -> Vec<u64> {
        self.prompt
            .iter()
            .chain(&self.completion)
            .copied()
            .collect()
    }

    /// `P + N - 1`.
    pub fn end(&self) -> u64 {
        (self.prompt.len() + self.completion.len()) as u64 - 1
    }

    pub fn to_turn(&self, row_shape: &[u64]) -> Turn {
        let mut turn = Turn::new(self.prompt.clone(), self.completion.clone());
        if let Some(start) = self.start {
            turn = turn.with_start(start);
        }
        for piece in &self.pieces {
            turn = turn.with_piece(piece.to_piece(row_shape));
        }
        turn
    }
}

impl PieceSpec {
    pub fn to_piece(&self, row_shape: &[u64]) -> RowPiece {
        let bytes: Vec<u8> = self
            .rows
            .iter()
            .flat_map(|row| encode(self.dtype, row))
            .collect();
        let shape = row_shape.to_vec();
        let piece = match self.side {
            None => RowPiece::whole(self.dtype, shape, bytes),
            Some(Phase::Prefill) => RowPiece::prefill(self.dtype, shape, bytes),
            Some(Phase::Decode) => RowPiece::decode(self.dtype, shape, bytes),
        };
        match self.first {
            Some(first) => piece.at(first),
            None => piece,
        }
    }
}

/// Whether NumPy calls the dtype a signed integer.
pub fn is_signed(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64
    )
}

/// Values as little-endian elements of an integer dtype (two's
/// complement, cut to the element's width).
pub fn encode(dtype: Dtype, values: &[i64]) -> Vec<u8> {
    let size = dtype.itemsize() as usize;
    values
        .iter()
        .flat_map(|v| v.to_le_bytes()[..size].to_vec())
        .collect()
}

/// Elements of an integer dtype as values, by the dtype's signedness.
pub fn decode(dtype: Dtype, bytes: &[u8]) -> Vec<i64> {
    let size = dtype.itemsize() as usize;
    bytes
        .chunks(size)
        .map(|element| {
            let mut raw = [0u8; 8];
            raw[..size].copy_from_slice(element);
            let unsigned = u64::from_le_bytes(raw);
            if is_signed(dtype) && element[size - 1] >= 0x80 {
                (unsigned as i128 - (1i128 << (8 * size))) as i64
            } else {
                unsigned as i64
            }
        })
        .collect()
}

/// The range of an integer dtype.
fn range(dtype: Dtype) -> (i128, i128) {
    let bits = 8 * dtype.itemsize() as u32;
    if is_signed(dtype) {
        (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1)
    } else {
        (0, (1i128 << bits) - 1)
    }
}

/// The narrowest integer dtype holding both ranges, by a search.
pub fn naive_promote(a: Dtype, b: Dtype) -> Option<Dtype> {
    let ints = [
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int16,
        Dtype::Uint16,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Int64,
        Dtype::Uint64,
    ];
    let ((alo, ahi), (blo, bhi)) = (range(a), range(b));
    ints.into_iter().find(|&d| {
        let (lo, hi) = range(d);
        lo <= alo.min(blo) && hi >= ahi.max(bhi)
    })
}

/// A turn's rows, position by position: each piece laid out by the
/// placement rule (a prefill's end at `P`, every other piece's at
/// `P + N - 1`), the first piece covering a position winning; a whole
/// response's rows are its prefill's below `P`.
pub fn turn_rows(turn: &TurnSpec) -> BTreeMap<u64, (Vec<i64>, Phase)> {
    let prompt = turn.prompt.len() as u64;
    let mut rows = BTreeMap::new();
    for piece in &turn.pieces {
        let end = if piece.side == Some(Phase::Prefill) {
            prompt
        } else {
            turn.end()
        };
        let first = end - piece.rows.len() as u64;
        for (i, row) in piece.rows.iter().enumerate() {
            let x = first + i as u64;
            let phase = piece.side.unwrap_or(if x < prompt {
                Phase::Prefill
            } else {
                Phase::Decode
            });
            rows.entry(x).or_insert((row.clone(), phase));
        }
    }
    rows
}

/// Whether the turns' token sequences agree at positions `0..=x`.
fn agree(a: &[u64], b: &[u64], x: usize) -> bool {
    a.len() > x && b.len() > x && a[..=x] == b[..=x]
}

/// The row of position `x` of `path` among `turns` by the rule: scanning
/// the turns in order, those agreeing with `path` up to `x` and having a
/// row there; the first wins under `Earliest`, the last under `Latest`.
fn row_at(
    turns: &[TurnSpec],
    prefer: Prefer,
    path: &[u64],
    x: usize,
) -> Option<(Vec<i64>, usize, Phase)> {
    let mut found = None;
    for (u, turn) in turns.iter().enumerate() {
        if !agree(&turn.tokens(), path, x) {
            continue;
        }
        if let Some((row, phase)) = turn_rows(turn).get(&(x as u64)) {
            if found.is_none() || prefer == Prefer::Latest {
                found = Some((row.clone(), u, *phase));
            }
        }
    }
    found
}

/// The path ending at turn `t` after `turns` were pushed: per position, the
/// row, the turn it came from and the phase; `None` at the last.
pub fn expected(
    turns: &[TurnSpec],
    prefer: Prefer,
    t: usize,
) -> Vec<Option<(Vec<i64>, usize, Phase)>> {
    let path = turns[t].tokens();
    (0..path.len())
        .map(|x| {
            if x + 1 == path.len() {
                None
            } else {
                row_at(turns, prefer, &path, x)
            }
        })
        .collect()
}

/// What the model says turn `k` found when pushed after `turns[..k]`:
/// `(continues, common, compared, differed)`.
pub fn expected_report(
    turns: &[TurnSpec],
    prefer: Prefer,
    k: usize,
) -> (Option<usize>, u64, u64, Vec<u64>) {
    let tokens = turns[k].tokens();
    let prompt = &turns[k].prompt;
    let mut best: Option<(usize, usize)> = None;
    for (u, turn) in turns[..k].iter().enumerate() {
        let shared = turn
            .tokens()
            .iter()
            .zip(prompt)
            .take_while(|(a, b)| a == b)
            .count();
        if best.is_none_or(|(_, most)| shared > most) {
            best = Some((u, shared));
        }
    }
    let (mut compared, mut differed) = (0, Vec::new());
    for (x, (row, _)) in turn_rows(&turns[k]) {
        if let Some((there, _, _)) = row_at(&turns[..k], prefer, &tokens, x as usize) {
            compared += 1;
            if there != row {
                differed.push(x);
            }
        }
    }
    (
        best.map(|(u, _)| u),
        best.map_or(0, |(_, shared)| shared as u64),
        compared,
        differed,
    )
}

/// The dtype of the episode's rows: the promotion of every piece's.
pub fn expected_dtype(turns: &[TurnSpec]) -> Option<Dtype> {
    let mut dtypes = turns.iter().flat_map(|t| t.pieces.iter().map(|p| p.dtype));
    let first = dtypes.next()?;
    dtypes.try_fold(first, naive_promote)
}

/// Holds an assembled path to the model's: length, dtype, every row's
/// values and source, `has_row` false only at the last position.
pub fn assert_matches_model(
    assembled: &Assembled,
    turns: &[TurnSpec],
    prefer: Prefer,
    t: usize,
) -> Result<(), TestCaseError> {
    let want = expected(turns, prefer, t);
    prop_assert_eq!(assembled.turn(), t);
    prop_assert_eq!(assembled.len(), want.len() as u64);
    prop_assert_eq!(Some(assembled.dtype()), expected_dtype(turns));
    prop_assert_eq!(assembled.turns().len(), t + 1);
    let size = assembled.row_bytes();
    prop_assert_eq!(assembled.rows().len(), size * want.len());
    for (x, want) in want.iter().enumerate() {
        let bytes = &assembled.rows()[x * size..(x + 1) * size];
        let got = assembled.source(x as u64);
        match want {
            None => {
                prop_assert!(!assembled.has_row(x as u64), "position {}", x);
                prop_assert!(bytes.iter().all(|&b| b == 0), "position {}", x);
            }
            Some((row, turn, phase)) => {
                prop_assert_eq!(&decode(assembled.dtype(), bytes), row, "position {}", x);
                prop_assert_eq!(got.map(|s| (s.turn, s.phase)), Some((*turn, *phase)));
                prop_assert_eq!(assembled.row(x as u64), Some(bytes));
                prop_assert!(assembled.has_row(x as u64), "position {}", x);
            }
        }
    }
    Ok(())
}

/// A value of a row the model computes from a token prefix and an
/// element index: a hash, so rows of different prefixes mostly differ.
pub fn mix(mut z: u64) -> u64 {
    // SplitMix64's finalizer.
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The model of an engine whose rows are a function of the token prefix
/// and the position: the row of position `x` is that of the tokens
/// `0..=x`, from a rolling SplitMix64 hash of them, with `experts` expert
/// ids per element. A decode computes the same rows, except at the
/// positions it flips (another batch, another kernel): there its row has
/// its first element moved to the next expert.
#[derive(Clone, Debug)]
pub struct PrefixModel {
    pub seed: u64,
    pub elements: usize,
    pub experts: u64,
}

impl PrefixModel {
    /// The row of position `tokens.len() - 1`, computed with the prefix
    /// `tokens`.
    pub fn row(&self, tokens: &[u64]) -> Vec<i64> {
        let mut hash = self.seed;
        for &token in tokens {
            hash = mix(hash ^ token);
        }
        let position = tokens.len() as u64 - 1;
        (0..self.elements as u64)
            .map(|e| (mix(hash ^ (position << 16) ^ e) % self.experts) as i64)
            .collect()
    }

    /// A decode's row: the row, or its flip.
    pub fn decode_row(&self, tokens: &[u64], flipped: bool) -> Vec<i64> {
        let mut row = self.row(tokens);
        if flipped {
            row[0] = (row[0] + 1) % self.experts as i64;
        }
        row
    }

    /// The full-context forward of `tokens` as one prompt: one row a
    /// position, `[0, len)`.
    pub fn forward(&self, tokens: &[u64]) -> Vec<Vec<i64>> {
        (1..=tokens.len()).map(|n| self.row(&tokens[..n])).collect()
    }
}

/// The dtype sets an episode's pieces draw from: one dtype, unsigned ones
/// widening, signed ones, a mix that NumPy makes int32, and uint32 with
/// int32 (int64).
const DTYPE_SETS: [&[Dtype]; 5] = [
    &[Dtype::Uint8],
    &[Dtype::Uint8, Dtype::Uint16],
    &[Dtype::Int8, Dtype::Int16, Dtype::Int32],
    &[Dtype::Uint8, Dtype::Int8, Dtype::Uint16, Dtype::Int32],
    &[Dtype::Uint32, Dtype::Int32],
];

/// The random choices one turn is built from.
#[derive(Clone, Debug)]
pub struct TurnDraw {
    parent: usize,
    cut: usize,
    extra: Vec<u64>,
    completion: Vec<u64>,
    start: usize,
    asked: bool,
    /// 0 whole, 1 whole with its first position, 2 a P/D pair, 3 a P/D
    /// pair with first positions, 4 a P/D pair whose decode starts low.
    form: u8,
    back: usize,
    dtypes: (usize, usize),
    noise: u64,
}

fn turn_draw() -> impl Strategy<Value = TurnDraw> {
    // Tokens from a small alphabet, so that turns share prefixes and new
    // tokens meet other branches' nodes.
    let tokens = |lo, hi| proptest::collection::vec(0u64..3, lo..hi);
    (
        any::<usize>(),
        any::<usize>(),
        tokens(0, 4),
        tokens(1, 5),
        any::<usize>(),
        any::<bool>(),
        0u8..5,
        0usize..4,
        (any::<usize>(), any::<usize>()),
        any::<u64>(),
    )
        .prop_map(
            |(parent, cut, extra, completion, start, asked, form, back, dtypes, noise)| TurnDraw {
                parent,
                cut,
                extra,
                completion,
                start,
                asked,
                form,
                back,
                dtypes,
                noise,
            },
        )
}

/// Episodes of 1 to `max_turns` valid turns forming a tree: each turn
/// continues a random earlier one from a random cut of its tokens (at
/// least its prompt), with 0-3 new prompt tokens, a start anywhere the rows
/// below it are held, and its rows as a whole response or a P/D pair, with
/// or without first positions, in dtypes of one set, with noise so that
/// rows that meet sometimes differ.
pub fn episodes(max_turns: usize) -> impl Strategy<Value = EpisodeSpec> {
    (
        prop_oneof![Just(vec![1u64]), Just(vec![2]), Just(vec![2, 3])],
        0..DTYPE_SETS.len(),
        any::<u64>(),
        proptest::collection::vec(turn_draw(), 1..=max_turns),
    )
        .prop_map(|(row_shape, set, seed, draws)| build(row_shape, DTYPE_SETS[set], seed, &draws))
}

/// The first position below `limit` of `path` that no turn of `turns`
/// has a row for.
fn first_rowless(turns: &[TurnSpec], path: &[u64], limit: usize) -> usize {
    (0..limit)
        .find(|&x| row_at(turns, Prefer::Earliest, path, x).is_none())
        .unwrap_or(limit)
}

fn build(row_shape: Vec<u64>, dtypes: &[Dtype], seed: u64, draws: &[TurnDraw]) -> EpisodeSpec {
    let elements = row_shape.iter().product::<u64>() as usize;
    let signed = dtypes.iter().all(|&d| is_signed(d));
    let model = PrefixModel {
        seed,
        elements,
        experts: 3,
    };
    // Values from the model, moved by noise; below zero when every dtype
    // of the set is signed.
    let value = |tokens: &[u64], noise: u64, salt: u64| -> Vec<i64> {
        let mut row = model.row(tokens);
        if mix(noise ^ salt ^ tokens.len() as u64) % 4 == 0 {
            row[0] += 1;
        }
        if signed {
            row.iter_mut().for_each(|v| *v -= 2);
        }
        row
    };
    let mut turns: Vec<TurnSpec> = Vec::new();
    for (k, draw) in draws.iter().enumerate() {
        let prompt = if k == 0 {
            // At least two tokens: a first turn of one has no row, and the
            // episode refuses rows no row sizes (`Unsized`).
            let mut prompt = draw.extra.clone();
            if prompt.is_empty() && draw.completion.len() == 1 {
                prompt.push(draw.completion[0]);
            }
            prompt
        } else {
            let parent = turns[draw.parent % k].tokens();
            let base = turns[draw.parent % k].prompt.len();
            let cut = base + draw.cut % (parent.len() - base + 1);
            parent[..cut].iter().chain(&draw.extra).copied().collect()
        };
        let tokens: Vec<u64> = prompt.iter().chain(&draw.completion).copied().collect();
        let p = prompt.len();
        let end = tokens.len() - 1;
        let common = turns
            .iter()
            .map(|t| {
                t.tokens()
                    .iter()
                    .zip(&prompt)
                    .take_while(|(a, b)| a == b)
                    .count()
            })
            .max()
            .unwrap_or(0);
        let highest = first_rowless(&turns, &tokens, common);
        let start = draw.start % (highest + 1);
        let dtype_a = dtypes[draw.dtypes.0 % dtypes.len()];
        let dtype_b = dtypes[draw.dtypes.1 % dtypes.len()];
        let full: Vec<Vec<i64>> = (0..end)
            .map(|x| value(&tokens[..=x], draw.noise, 1))
            .collect();
        let decode_rows = |from: usize| -> Vec<Vec<i64>> {
            (from..end)
                .map(|x| value(&tokens[..=x], draw.noise, 2))
                .collect()
        };
        let pieces = match draw.form {
            0 | 1 => vec![PieceSpec {
                side: None,
                first: (draw.form == 1).then_some(start as u64),
                dtype: dtype_a,
                rows: full[start..].to_vec(),
            }],
            _ => {
                // vLLM's decode starts at P - 1; form 4 reaches lower (a
                // decode that recomputed part of the prompt).
                let lowest = if draw.form == 4 { 0 } else { start };
                let from = p.saturating_sub(draw.back).max(lowest).min(p);
                let with_first = draw.form == 3;
                vec![
                    PieceSpec {
                        side: Some(Phase::Prefill),
                        first: with_first.then_some(start as u64),
                        dtype: dtype_a,
                        rows: full[start..p].to_vec(),
                    },
                    PieceSpec {
                        side: Some(Phase::Decode),
                        first: with_first.then_some(from as u64),
                        dtype: dtype_b,
                        rows: decode_rows(from),
                    },
                ]
            }
        };
        turns.push(TurnSpec {
            prompt,
            completion: draw.completion.clone(),
            start: (start > 0 || draw.asked).then_some(start as u64),
            pieces,
            full,
        });
    }
    EpisodeSpec { row_shape, turns }
}
