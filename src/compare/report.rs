//! The report of a comparison: a typed value, its text and its JSON.
//!
//! The CLI prints [`Report`]'s `Display` (or [`Report::to_json`] with
//! `--json`); a program reads the fields. The per-cell grid ([`Cells`]) is
//! kept for the heatmap and is not part of the JSON, which stays small.

use std::fmt;

use serde_json::{json, Value};

use super::Which;
use crate::algebra::{Dtype, Rows};

/// The comparison of two responses, one entry per choice.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Report {
    /// Per choice compared, in order.
    pub choices: Vec<ChoiceReport>,
}

/// How one position's layer compares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cell {
    /// Equal element by element.
    Equal,
    /// The same experts in another order (equal as multisets).
    SetEqual,
    /// Only A has this position.
    OnlyA,
    /// Only B has this position.
    OnlyB,
    /// Different experts.
    Different,
}

/// Where the prompt ends, and who said so.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PromptLen {
    /// The prompt length: positions below it are the prompt's.
    pub len: u64,
    /// Where the length came from.
    pub source: PromptSource,
}

/// Where a prompt length came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PromptSource {
    /// The caller (`--prompt-len`).
    Given,
    /// A response's `usage.prompt_tokens`.
    Usage(Which),
    /// The end of a merged response's prefill segments.
    Payload(Which),
}

impl fmt::Display for PromptSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PromptSource::Given => f.write_str("given"),
            PromptSource::Usage(w) => write!(f, "usage.prompt_tokens of {w}"),
            PromptSource::Payload(w) => write!(f, "end of the prefill segments of {w}"),
        }
    }
}

/// No position, at 0.
const EMPTY: Rows = match Rows::new(0, 0) {
    Some(rows) => rows,
    None => panic!("0 <= 0"),
};

/// The counts of one region (the prompt, or the completion).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Region {
    /// The region's positions within the compared span.
    pub positions: Rows,
    /// Positions both sides cover.
    pub compared: u64,
    /// Of those, rows equal element by element.
    pub equal_rows: u64,
    /// Of those, rows equal as sets in every layer (equal rows included).
    pub equal_sets: u64,
}

/// A position whose rows differ, with both rows as nested JSON arrays.
#[derive(Clone, Debug, PartialEq)]
pub struct Difference {
    /// The position.
    pub position: u64,
    /// A's row.
    pub a: Value,
    /// B's row.
    pub b: Value,
}

/// The per-layer cells of every position either side covers, in position
/// order: what the heatmap draws.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cells {
    layers: usize,
    /// Runs of consecutive positions, in order, with the index of each run's
    /// first position among all positions held.
    runs: Vec<(Rows, usize)>,
    cells: Vec<Cell>,
}

impl Cells {
    /// Layers per position.
    pub fn layers(&self) -> usize {
        self.layers
    }

    /// The positions held, as runs in order.
    pub fn runs(&self) -> impl Iterator<Item = Rows> + '_ {
        self.runs.iter().map(|(r, _)| *r)
    }

    /// The cells of `position`, one per layer, or `None` when neither side
    /// covers it.
    pub fn at(&self, position: u64) -> Option<&[Cell]> {
        let i = self.runs.partition_point(|(r, _)| r.end() <= position);
        let (run, first) = self.runs.get(i)?;
        if !run.contains(position) {
            return None;
        }
        let index = first + usize::try_from(position - run.start()).ok()?;
        let from = index.checked_mul(self.layers)?;
        self.cells.get(from..from.checked_add(self.layers)?)
    }

    /// Every position held with its cells, in order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &[Cell])> + '_ {
        let positions = self.runs.iter().flat_map(|(r, _)| r.start()..r.end());
        positions.zip(self.cells.chunks(self.layers.max(1)))
    }

    /// Starts position `x` (after every position held so far).
    pub(super) fn begin(&mut self, x: u64) {
        let held = self.cells.len() / self.layers.max(1);
        match self.runs.last_mut() {
            Some((last, _)) if last.end() == x => {
                *last = Rows::new(last.start(), x.saturating_add(1)).unwrap_or(*last);
            }
            _ => self
                .runs
                .push((Rows::with_len(x, 1).unwrap_or(EMPTY), held)),
        }
    }

    /// The next layer's cell of the position begun last.
    pub(super) fn push(&mut self, cell: Cell) {
        self.cells.push(cell);
    }
}

/// The comparison of one choice.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct ChoiceReport {
    /// The choice.
    pub choice: usize,
    /// The field.
    pub field: String,
    /// From the first position either side covers to one past the last
    /// (`None` when neither covers any).
    pub positions: Option<Rows>,
    /// A's dtype, when A has rows.
    pub dtype_a: Option<Dtype>,
    /// B's dtype, when B has rows.
    pub dtype_b: Option<Dtype>,
    /// The shape of one row, `(layers, topk)` for routed experts.
    pub row_shape: Vec<u64>,
    /// Positions both sides cover.
    pub compared: u64,
    /// Of those, rows equal element by element.
    pub equal_rows: u64,
    /// Of those, rows equal as sets in every layer (top-k order aside; equal
    /// rows included).
    pub equal_sets: u64,
    /// Per layer (the first axis of the row shape): compared positions whose
    /// slice of that layer is equal element by element.
    pub per_layer_equal: Vec<u64>,
    /// The prompt length, when known.
    pub prompt_len: Option<PromptLen>,
    /// The positions below the prompt length, when it is known.
    pub prompt: Option<Region>,
    /// The positions from the prompt length on, when it is known.
    pub completion: Option<Region>,
    /// The first differing positions, with both rows.
    pub first_differences: Vec<Difference>,
    /// Positions only A covers, as intervals in order.
    pub only_in_a: Vec<Rows>,
    /// Positions only B covers, as intervals in order.
    pub only_in_b: Vec<Rows>,
    /// Every covered position's cell per layer.
    pub cells: Cells,
}

impl ChoiceReport {
    pub(super) fn new(
        choice: usize,
        field: &str,
        dtypes: (Option<Dtype>, Option<Dtype>),
        row_shape: Vec<u64>,
        layers: usize,
        prompt_len: Option<PromptLen>,
    ) -> ChoiceReport {
        let region = prompt_len.map(|_| Region {
            positions: EMPTY,
            compared: 0,
            equal_rows: 0,
            equal_sets: 0,
        });
        ChoiceReport {
            choice,
            field: field.to_owned(),
            positions: None,
            dtype_a: dtypes.0,
            dtype_b: dtypes.1,
            row_shape,
            compared: 0,
            equal_rows: 0,
            equal_sets: 0,
            per_layer_equal: vec![0; layers],
            prompt_len,
            prompt: region,
            completion: region,
            first_differences: Vec::new(),
            only_in_a: Vec::new(),
            only_in_b: Vec::new(),
            cells: Cells {
                layers,
                ..Cells::default()
            },
        }
    }

    /// Counts compared position `x`.
    pub(super) fn count(&mut self, x: u64, equal: bool, set_equal: bool) {
        let in_prompt = self.prompt_len.is_some_and(|p| x < p.len);
        let region = if in_prompt {
            self.prompt.as_mut()
        } else {
            self.completion.as_mut()
        };
        for counts in [Some(&mut self.compared), region.map(|r| &mut r.compared)]
            .into_iter()
            .flatten()
        {
            *counts += 1;
        }
        let region = if in_prompt {
            self.prompt.as_mut()
        } else {
            self.completion.as_mut()
        };
        if let Some(r) = region {
            r.equal_rows += u64::from(equal);
            r.equal_sets += u64::from(set_equal);
        }
        self.equal_rows += u64::from(equal);
        self.equal_sets += u64::from(set_equal);
    }

    /// Sets the span and the regions' positions once every position is seen.
    pub(super) fn finish(&mut self) {
        let mut runs = self.cells.runs();
        let first = runs.next();
        let last = self.cells.runs().last();
        self.positions = first
            .zip(last)
            .and_then(|(f, l)| Rows::new(f.start(), l.end()));
        let (Some(p), Some(span)) = (self.prompt_len, self.positions) else {
            return;
        };
        let cut = p.len.clamp(span.start(), span.end());
        if let Some(r) = self.prompt.as_mut() {
            r.positions = Rows::new(span.start(), cut).unwrap_or(EMPTY);
        }
        if let Some(r) = self.completion.as_mut() {
            r.positions = Rows::new(cut, span.end()).unwrap_or(EMPTY);
        }
    }

    /// Whether every compared row is equal and both sides cover the same
    /// positions.
    pub fn all_equal(&self) -> bool {
        self.equal_rows == self.compared && self.only_in_a.is_empty() && self.only_in_b.is_empty()
    }

    /// Positions covered by one side only.
    pub fn one_side_only(&self) -> u64 {
        self.only_in_a
            .iter()
            .chain(&self.only_in_b)
            .map(|r| r.len())
            .sum()
    }

    /// The choice as the JSON object of the report.
    pub fn to_json(&self) -> Value {
        let rows = |r: Rows| json!([r.start(), r.end()]);
        let list = |l: &[Rows]| Value::Array(l.iter().map(|&r| rows(r)).collect());
        let region = |r: Option<Region>| {
            r.map_or(Value::Null, |r| {
                json!({"positions": rows(r.positions), "compared": r.compared,
                       "equal_rows": r.equal_rows, "equal_sets": r.equal_sets})
            })
        };
        json!({
            "choice": self.choice,
            "field": self.field,
            "positions": self.positions.map_or(Value::Null, rows),
            "compared": self.compared,
            "equal_rows": self.equal_rows,
            "equal_sets": self.equal_sets,
            "per_layer_equal": self.per_layer_equal,
            "prompt": region(self.prompt),
            "completion": region(self.completion),
            "first_differences": self.first_differences.iter().map(|d| {
                json!({"position": d.position, "a": d.a, "b": d.b})
            }).collect::<Vec<_>>(),
            "only_in_a": list(&self.only_in_a),
            "only_in_b": list(&self.only_in_b),
        })
    }
}

impl Report {
    /// Whether every compared row of every choice is equal and both sides
    /// cover the same positions.
    pub fn all_equal(&self) -> bool {
        self.choices.iter().all(ChoiceReport::all_equal)
    }

    /// The report as one JSON object:
    /// `{"all_equal": bool, "choices": [{"choice", "field", "positions": [start, end],
    /// "compared", "equal_rows", "equal_sets", "per_layer_equal": [...],
    /// "prompt": {"positions", "compared", "equal_rows", "equal_sets"} or null,
    /// "completion": {...} or null, "first_differences": [{"position", "a", "b"}],
    /// "only_in_a": [[start, end], ...], "only_in_b": [...]}]}`.
    pub fn to_json(&self) -> Value {
        json!({
            "all_equal": self.all_equal(),
            "choices": self.choices.iter().map(ChoiceReport::to_json).collect::<Vec<_>>(),
        })
    }
}

/// `n/of (p%)`, as the reports print fractions, or `n/0` when nothing was
/// compared.
fn fraction(n: u64, of: u64) -> String {
    if of == 0 {
        format!("{n}/0")
    } else {
        format!("{n}/{of} ({:.2}%)", 100.0 * n as f64 / of as f64)
    }
}

fn intervals(list: &[Rows]) -> String {
    if list.is_empty() {
        return "-".to_owned();
    }
    list.iter()
        .map(Rows::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for ChoiceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dtype = |d: Option<Dtype>| d.map_or_else(|| "-".to_owned(), |d| d.to_string());
        let span = self
            .positions
            .map_or_else(|| "none".to_owned(), |r| r.to_string());
        writeln!(
            f,
            "choice {}  {}  positions {span}  rows {:?} of {} (A) / {} (B)",
            self.choice,
            self.field,
            self.row_shape,
            dtype(self.dtype_a),
            dtype(self.dtype_b)
        )?;
        writeln!(f, "  compared    {}", self.compared)?;
        writeln!(
            f,
            "  equal       {}",
            fraction(self.equal_rows, self.compared)
        )?;
        writeln!(
            f,
            "  equal sets  {}",
            fraction(self.equal_sets, self.compared)
        )?;
        match self.prompt_len {
            Some(p) => {
                writeln!(f, "  prompt len  {} ({})", p.len, p.source)?;
                for (name, region) in [("prompt", self.prompt), ("completion", self.completion)] {
                    if let Some(r) = region {
                        writeln!(
                            f,
                            "  {name:<10}  {}: equal {}, equal sets {}",
                            r.positions,
                            fraction(r.equal_rows, r.compared),
                            fraction(r.equal_sets, r.compared)
                        )?;
                    }
                }
            }
            None => writeln!(
                f,
                "  prompt len  unknown (no --prompt-len, usage or prefill segments)"
            )?,
        }
        // Layers with the same count, in runs: `0-47: 140` rather than 48 entries.
        let mut runs: Vec<(usize, usize, u64)> = Vec::new();
        for (layer, &n) in self.per_layer_equal.iter().enumerate() {
            match runs.last_mut() {
                Some((_, last, count)) if *count == n => *last = layer,
                _ => runs.push((layer, layer, n)),
            }
        }
        let runs: Vec<String> = runs
            .iter()
            .map(|&(first, last, n)| {
                let layers = if first == last {
                    format!("{first}")
                } else {
                    format!("{first}-{last}")
                };
                format!("{layers}: {n}")
            })
            .collect();
        let shown = runs.len().min(16);
        write!(
            f,
            "  per layer   equal positions of {} compared, by layer: {}",
            self.compared,
            runs[..shown].join(", ")
        )?;
        if runs.len() > shown {
            write!(f, ", and {} more", runs.len() - shown)?;
        }
        writeln!(f)?;
        writeln!(f, "  only in A   {}", intervals(&self.only_in_a))?;
        writeln!(f, "  only in B   {}", intervals(&self.only_in_b))?;
        for d in &self.first_differences {
            writeln!(f, "  differs at  {}", d.position)?;
            writeln!(f, "    A: {}", d.a)?;
            writeln!(f, "    B: {}", d.b)?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    /// Each choice, then one verdict line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for choice in &self.choices {
            write!(f, "{choice}")?;
        }
        let compared: u64 = self.choices.iter().map(|c| c.compared).sum();
        let equal: u64 = self.choices.iter().map(|c| c.equal_rows).sum();
        let one_side: u64 = self.choices.iter().map(ChoiceReport::one_side_only).sum();
        if self.all_equal() {
            write!(f, "all {compared} compared rows equal, same coverage")
        } else {
            write!(
                f,
                "DIFFERENT: {} of {compared} compared rows differ, {one_side} position(s) covered by one side only",
                compared - equal
            )
        }
    }
}
