//! [`Episode`]: the turns' token sequences as a trie, one row per node.
//!
//! A position of the episode is a token prefix, so a trie node: the row at
//! a node is the row of that prefix, whichever turn computed it. Turns that
//! share a prefix share its nodes, hence their rows (a sibling sees the rows
//! its parent was sampled with). The nodes are made in push order, each with
//! its row in one arena in that order: a linear episode's arena is its
//! output, position by position, so [`Episode::finish`] moves it out, and
//! memory stays the output plus the turn being pushed.
//!
//! A node without a row is a turn's last position (its last token is never
//! fed back) that no later turn has computed yet: every push leaves every
//! position of its path before its last with a row, and rows are never
//! removed.

use crate::algebra::Dtype;

use super::assembled::{Assembled, RowSource, TurnReport};
use super::error::EpisodeError;
use super::place::{place, Placement, Run};
use super::prefer::Prefer;
use super::turn::Turn;
use super::widen::{widen, widen_onto};

/// No node: the end of a child or sibling list, and the root's parent.
const NONE: usize = usize::MAX;

/// A node of the trie: its token, and its links.
#[derive(Clone, Copy, Debug)]
struct TrieNode {
    token: u64,
    parent: usize,
    first_child: usize,
    next_sibling: usize,
}

/// What the episode keeps of a pushed turn to walk and assemble it.
#[derive(Clone, Copy, Debug)]
struct Pushed {
    /// Its prompt's length.
    prompt: usize,
    /// The node of its prompt's last token (`NONE` for an empty prompt).
    prompt_end: usize,
    /// The node of its last token.
    last: usize,
    /// The first node it made: it made the nodes from here to the next
    /// turn's first.
    first_made: usize,
}

/// The rows' element type and row shape, and one row's number of elements.
#[derive(Clone, Debug)]
struct RowFormat {
    dtype: Dtype,
    row_shape: Vec<u64>,
    elements: usize,
}

impl RowFormat {
    fn row_bytes(&self) -> usize {
        self.elements * self.dtype.itemsize() as usize
    }
}

/// A multi-turn episode, assembled turn by turn under one [`Prefer`] rule.
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::episode::{Episode, Phase, Prefer, RowPiece, RowSource, Turn};
///
/// // Rows of one uint8 each; the value says which turn computed it.
/// let rows = |value: u8, n: usize| RowPiece::whole(Dtype::Uint8, vec![1], vec![value; n]);
/// let mut episode = Episode::new(Prefer::Earliest);
/// // Turn 0: prompt [10, 11], completion [12, 13]: rows [0, 3).
/// episode.push(Turn::new(vec![10, 11], vec![12, 13]).with_piece(rows(0, 3)))?;
/// // Turn 1 repeats turn 0's 4 tokens (L = 4), adds [14], generates [15, 16].
/// // Asked from L - 1 = 3: rows [3, 6), its prompt's new part and the boundary.
/// let turn = Turn::new(vec![10, 11, 12, 13, 14], vec![15, 16]).with_start(3);
/// assert_eq!(episode.push(turn.with_piece(rows(1, 3)))?, 1);
///
/// let assembled = episode.finish()?;
/// assert_eq!(assembled.len(), 7);
/// assert_eq!(assembled.rows(), &[0, 0, 0, 1, 1, 1, 0][..]);
/// assert!(!assembled.has_row(6));
/// assert_eq!(
///     assembled.source(3),
///     Some(RowSource { turn: 1, phase: Phase::Prefill })
/// );
/// assert_eq!(
///     assembled.source(5),
///     Some(RowSource { turn: 1, phase: Phase::Decode })
/// );
/// # Ok::<(), pd_stitch::episode::EpisodeError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Episode {
    prefer: Prefer,
    nodes: Vec<TrieNode>,
    /// The first node of an empty prefix's children.
    root_child: usize,
    /// Who wrote each node's row, in node order (`None`: no row yet).
    sources: Vec<Option<RowSource>>,
    /// Each node's row, in node order (zeros where it has none yet).
    arena: Vec<u8>,
    format: Option<RowFormat>,
    pushed: Vec<Pushed>,
    reports: Vec<TurnReport>,
    /// Scratch of a push: the nodes of the new turn's tokens already in the
    /// trie, by position.
    path: Vec<usize>,
    /// Scratch of a push: the positions of `path` without a row.
    rowless: Vec<u64>,
}

impl Default for Episode {
    fn default() -> Episode {
        Episode::new(Prefer::default())
    }
}

impl Episode {
    /// An episode of no turn, keeping rows by `prefer`.
    pub fn new(prefer: Prefer) -> Episode {
        Episode {
            prefer,
            nodes: Vec::new(),
            root_child: NONE,
            sources: Vec::new(),
            arena: Vec::new(),
            format: None,
            pushed: Vec::new(),
            reports: Vec::new(),
            path: Vec::new(),
            rowless: Vec::new(),
        }
    }

    /// The rule.
    pub fn prefer(&self) -> Prefer {
        self.prefer
    }

    /// The number of turns pushed.
    pub fn turns(&self) -> usize {
        self.pushed.len()
    }

    /// What each pushed turn did, in push order.
    pub fn reports(&self) -> &[TurnReport] {
        &self.reports
    }

    /// The rows' dtype so far (`None` before the first turn).
    pub fn dtype(&self) -> Option<Dtype> {
        self.format.as_ref().map(|format| format.dtype)
    }

    /// Adds a turn, returning its index; on an error the episode is as it
    /// was.
    ///
    /// The turn continues the earlier turn whose token sequence shares the
    /// longest prefix `L` with its prompt (the earliest such); some earlier
    /// turn's whole prompt must be a prefix of its prompt, and its start must
    /// be at most `L`. Its rows are placed from its counts (see
    /// [`RowPiece`](super::RowPiece)) and must leave no position of its path
    /// before its last without a row. Checks, the first failing reported:
    /// no completion token ([`EpisodeError::NoCompletion`]), a prompt
    /// extending no earlier turn ([`EpisodeError::ExtendsNoTurn`]), a start
    /// beyond `L` ([`EpisodeError::StartBeyondPrefix`]), no piece
    /// ([`EpisodeError::NoPieces`]), then piece by piece: not whole rows
    /// ([`EpisodeError::PieceLength`]), counts fitting neither a full nor a
    /// delta response ([`EpisodeError::Counts`]), a start other than the one
    /// asked ([`EpisodeError::StartNotAsked`]), another row shape
    /// ([`EpisodeError::PieceRowShape`]), a dtype that does not widen with
    /// the episode's ([`EpisodeError::PieceDtype`]); then, onto an episode
    /// holding no row yet, pieces holding none ([`EpisodeError::Unsized`]:
    /// the rows are sized by rows given, never by a declared row shape);
    /// last, the first position without a row ([`EpisodeError::RowGap`]).
    pub fn push(&mut self, turn: Turn) -> Result<usize, EpisodeError> {
        let index = self.pushed.len();
        let prompt = turn.prompt().len();
        let completion = turn.completion().len();
        if completion == 0 {
            return Err(EpisodeError::NoCompletion {
                turn: index,
                prompt: prompt as u64,
            });
        }
        let length = prompt + completion;
        self.walk(&turn);
        let depth = self.path.len();
        let common = depth.min(prompt);
        let continues = (index > 0).then(|| self.creator(common));
        let extends = index == 0
            || self.pushed.iter().any(|earlier| {
                earlier.prompt == 0
                    || (earlier.prompt <= common
                        && self.path[earlier.prompt - 1] == earlier.prompt_end)
            });
        if let (false, Some(closest)) = (extends, continues) {
            return Err(EpisodeError::ExtendsNoTurn {
                turn: index,
                common: common as u64,
                closest,
                closest_prompt: self.pushed[closest].prompt as u64,
            });
        }
        let start = turn.start().unwrap_or(0);
        if start > common as u64 {
            return Err(EpisodeError::StartBeyondPrefix {
                turn: index,
                start,
                common: common as u64,
                continues,
            });
        }
        let held = self
            .format
            .as_ref()
            .map(|format| (format.dtype, format.row_shape.as_slice()));
        let placement = place(index, &turn, held)?;
        let end = (length - 1) as u64;
        // Below the start, the rows are the earlier turns' (or this turn's,
        // where a decode's rows reach below it); from it on, this turn's.
        let gap = self
            .rowless
            .iter()
            .copied()
            .take_while(|&position| position < start)
            .find(|&position| !placement.covers(position))
            .or_else(|| placement.first_uncovered(start, end));
        if let Some(position) = gap {
            return Err(EpisodeError::RowGap {
                turn: index,
                position,
                asked: start,
                common: common as u64,
                continues,
                continued_end: continues.map(|c| self.reports[c].end()),
                end,
            });
        }
        // Nothing fails from here on.
        let report = self.write(index, &turn, placement, depth);
        self.reports.push(TurnReport {
            continues,
            common: common as u64,
            start,
            ..report
        });
        Ok(index)
    }

    /// Fills `path` with the nodes of `turn`'s tokens already in the trie,
    /// and `rowless` with those of them without a row.
    fn walk(&mut self, turn: &Turn) {
        self.path.clear();
        self.rowless.clear();
        // As long as the turn, not twice that: the path is scratch beside
        // the output, and memory is the output and one turn.
        self.path
            .reserve_exact(turn.prompt().len() + turn.completion().len());
        let mut child = self.root_child;
        for &token in turn.prompt().iter().chain(turn.completion()) {
            let mut node = child;
            while node != NONE && self.nodes[node].token != token {
                node = self.nodes[node].next_sibling;
            }
            if node == NONE {
                break;
            }
            if self.sources[node].is_none() {
                self.rowless.push(self.path.len() as u64);
            }
            self.path.push(node);
            child = self.nodes[node].first_child;
        }
    }

    /// The earliest turn whose sequence has the first `common` tokens of
    /// `path`: the one that made its node at `common - 1` (any turn shares
    /// an empty prefix, so the first).
    fn creator(&self, common: usize) -> usize {
        match common.checked_sub(1) {
            None => 0,
            Some(last) => {
                let node = self.path[last];
                // Turns made their nodes in push order, so the maker is the
                // last turn whose first node is at or before it (a turn that
                // made none starts where the next one does).
                self.pushed
                    .partition_point(|turn| turn.first_made <= node)
                    .saturating_sub(1)
            }
        }
    }

    /// Writes a placed turn into the trie: the rows of its positions already
    /// there by the rule, then its new nodes with their rows.
    fn write(
        &mut self,
        index: usize,
        turn: &Turn,
        placement: Placement,
        depth: usize,
    ) -> TurnReport {
        let Placement {
            runs,
            dtype,
            row_shape,
        } = placement;
        let (dtype, elements) = self.widen_to(dtype, row_shape);
        let row_bytes = elements * dtype.itemsize() as usize;
        let prompt = turn.prompt().len();
        let length = prompt + turn.completion().len();
        let end = length - 1;
        let mut report = TurnReport {
            continues: None,
            common: 0,
            start: 0,
            prompt: prompt as u64,
            completion: turn.completion().len() as u64,
            written: 0,
            compared: 0,
            differed: Vec::new(),
        };
        // A run's rows of the positions `[from, to)`, and their dtype.
        let rows_of = |run: &Run, from: usize, to: usize| {
            let piece = &turn.pieces()[run.piece];
            let size = elements * piece.dtype().itemsize() as usize;
            let first = run.skip as usize + (from - run.positions.start() as usize);
            (
                piece.dtype(),
                &piece.bytes()[first * size..(first + to - from) * size],
            )
        };
        // Positions already in the trie: fill, compare, replace by the rule.
        let mut scratch = vec![0u8; row_bytes];
        for run in &runs {
            let from = run.positions.start() as usize;
            let to = (run.positions.end() as usize).min(depth);
            let source = Some(RowSource {
                turn: index,
                phase: run.phase,
            });
            for position in from..to {
                let node = self.path[position];
                let (piece_dtype, row) = rows_of(run, position, position + 1);
                let slot = &mut self.arena[node * row_bytes..(node + 1) * row_bytes];
                if self.sources[node].is_some() {
                    report.compared += 1;
                    widen(piece_dtype, dtype, row, &mut scratch);
                    if scratch != *slot {
                        report.differed.push(position as u64);
                    }
                    if self.prefer == Prefer::Earliest {
                        continue;
                    }
                }
                widen(piece_dtype, dtype, row, slot);
                self.sources[node] = source;
                report.written += 1;
            }
        }
        // New nodes, in position order: their rows are the runs' from
        // `depth` on (no run reaches `end`, which has none).
        let first_made = self.nodes.len();
        let made = length.saturating_sub(depth);
        self.nodes.reserve_exact(made);
        self.sources.reserve_exact(made);
        self.arena.reserve_exact(made * row_bytes);
        for run in &runs {
            let from = (run.positions.start() as usize).max(depth);
            let to = run.positions.end() as usize;
            if from < to {
                let (piece_dtype, rows) = rows_of(run, from, to);
                widen_onto(piece_dtype, dtype, rows, &mut self.arena);
                let source = Some(RowSource {
                    turn: index,
                    phase: run.phase,
                });
                self.sources
                    .resize(self.sources.len() + (to - from), source);
                report.written += (to - from) as u64;
            }
        }
        if depth <= end {
            self.arena.resize(self.arena.len() + row_bytes, 0);
            self.sources.push(None);
        }
        let tokens = turn.prompt().iter().chain(turn.completion()).skip(depth);
        let mut parent = depth.checked_sub(1).map_or(NONE, |last| self.path[last]);
        for &token in tokens {
            let node = self.nodes.len();
            let sibling = if parent == NONE {
                std::mem::replace(&mut self.root_child, node)
            } else {
                std::mem::replace(&mut self.nodes[parent].first_child, node)
            };
            self.nodes.push(TrieNode {
                token,
                parent,
                first_child: NONE,
                next_sibling: sibling,
            });
            parent = node;
        }
        let node_at = |position: usize| {
            if position < depth {
                self.path[position]
            } else {
                first_made + (position - depth)
            }
        };
        self.pushed.push(Pushed {
            prompt,
            prompt_end: prompt.checked_sub(1).map_or(NONE, node_at),
            last: node_at(end),
            first_made,
        });
        report
    }

    /// Sets the format on the first turn; widens the arena when a turn's
    /// dtype widens the episode's. Returns the dtype and the elements a row.
    fn widen_to(&mut self, dtype: Dtype, row_shape: Vec<u64>) -> (Dtype, usize) {
        match &mut self.format {
            None => {
                // `place` checked that a row's size fits, in the widest
                // dtype, and that a row of this shape was given: the
                // episode's memory follows its input.
                let elements = row_shape.iter().product::<u64>() as usize;
                self.format = Some(RowFormat {
                    dtype,
                    row_shape,
                    elements,
                });
                (dtype, elements)
            }
            Some(format) if format.dtype != dtype => {
                let mut wider = Vec::with_capacity(
                    self.sources.len() * format.elements * dtype.itemsize() as usize,
                );
                widen_onto(format.dtype, dtype, &self.arena, &mut wider);
                self.arena = wider;
                format.dtype = dtype;
                (dtype, format.elements)
            }
            Some(format) => (format.dtype, format.elements),
        }
    }

    /// The rows of the path ending at `turn` (`None`: no such turn), as they
    /// are now: under [`Prefer::Earliest`] the same whenever asked, since a
    /// row once written stays; under [`Prefer::Latest`] later turns sharing
    /// its prefix may have replaced some. The last position has no row, even
    /// where a later turn continuing it computed one.
    pub fn assemble(&self, turn: usize) -> Option<Assembled> {
        let pushed = self.pushed.get(turn)?;
        let format = self.format.as_ref()?;
        let row_bytes = format.row_bytes();
        let mut nodes = Vec::new();
        let mut node = pushed.last;
        while node != NONE {
            nodes.push(node);
            node = self.nodes[node].parent;
        }
        nodes.reverse();
        let (_, before) = nodes.split_last()?;
        let mut rows = Vec::with_capacity(nodes.len() * row_bytes);
        let mut sources = Vec::with_capacity(nodes.len());
        for &node in before {
            rows.extend_from_slice(&self.arena[node * row_bytes..(node + 1) * row_bytes]);
            sources.push(self.sources[node]);
        }
        rows.resize(rows.len() + row_bytes, 0);
        sources.push(None);
        Some(Assembled::new(
            turn,
            (format.dtype, format.row_shape.clone(), row_bytes),
            rows,
            sources,
            self.reports[..=turn].to_vec(),
        ))
    }

    /// The rows of the path ending at the last turn pushed. When every node
    /// is on that path (a linear episode: each turn continues the one before
    /// it), the arena is that path's rows in position order, and is moved
    /// out rather than copied.
    pub fn finish(self) -> Result<Assembled, EpisodeError> {
        let Some(turn) = self.pushed.len().checked_sub(1) else {
            return Err(EpisodeError::NoTurns);
        };
        let pushed = self.pushed[turn];
        let length = self.reports[turn].prompt + self.reports[turn].completion;
        match self.format {
            // Every node on the path: they were made parent before child, so
            // node i is position i. Its last node has no row: only a turn
            // continuing past it could have written one, and that turn would
            // have made a node beyond the path.
            Some(format) if self.nodes.len() as u64 == length => {
                debug_assert_eq!(pushed.last, self.nodes.len() - 1);
                debug_assert!(self.sources[pushed.last].is_none());
                let row_bytes = format.row_bytes();
                Ok(Assembled::new(
                    turn,
                    (format.dtype, format.row_shape, row_bytes),
                    self.arena,
                    self.sources,
                    self.reports,
                ))
            }
            _ => self.assemble(turn).ok_or(EpisodeError::NoTurns),
        }
    }
}
