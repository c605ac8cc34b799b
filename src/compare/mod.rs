//! Comparing the rows of two responses position by position.
//!
//! The question this answers: do the rows a trainer gets from a P/D
//! deployment equal the ones a colocated server gives for the same prompts?
//! [`compare()`] reads one field (normally `routed_experts`) of every choice of
//! two responses through [`gather`](crate::gather), in whatever form each
//! carries it (by handle, inline compact, inline `.npy`), and reports for the
//! positions both cover how many rows are exactly equal, how many are equal
//! as sets of experts (top-k order aside), the same split at the prompt
//! length, agreement per layer, the first differing rows, and the positions
//! only one side covers. Where rows differ tells what went wrong: a stitching
//! bug shows as one wrong column at the last prompt position of every
//! request (or a position only one side has), numerical noise as scattered
//! layers.
//!
//! The pieces, one concept per file:
//!
//! - this file: [`compare()`], its [`Options`], reading each side (with
//!   [`gather_runs_from`], so that a gap is positions one side lacks rather
//!   than an error; [`CompareError`] when a side cannot be read), and the
//!   walk over positions;
//! - `report.rs`: the typed [`Report`], its text and its JSON;
//! - `classify.rs`: [`classify`], what a choice's differences look like
//!   (boundary, whole rows, scattered, missing, diverged tokens);
//! - `svg.rs`: the heatmap of positions by layers ([`Report::to_svg`]);
//! - `values.rs`: elements as comparable values, rows as JSON.
//!
//! Like `gather`, it reads files only through the [`Store`] it is given for
//! each side, so it is confined exactly as that store is.

mod classify;
mod report;
mod svg;
mod values;

use serde_json::Value;

use crate::algebra::{Dtype, Rows};
use crate::format::sglang::META_INFO;
use crate::gather::{
    gather_runs_from, gather_sglang, payload_at, read_choice_field, GatherError, Gathered, Store,
};
use crate::reading::{FieldTable, Fill, Reading, Storage};
use crate::response::fields::ROUTED_EXPERTS;

pub use classify::{classify, Classes};
pub use report::{Cell, Cells, ChoiceReport, Difference, PromptLen, PromptSource, Region, Report};

/// What to compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Options {
    /// Only this choice (default: every choice of either response).
    pub choice: Option<usize>,
    /// The field (default `routed_experts`).
    pub field: String,
    /// The prompt length, where the prompt region ends (default: the
    /// responses' `usage.prompt_tokens`, else the end of a merged response's
    /// prefill segments, else unknown).
    pub prompt_len: Option<u64>,
    /// How many differing positions to keep with their rows (default 10).
    pub max_differences: usize,
    /// SGLang's row shape `(layers, top_k)`: with it, a side's SGLang rows
    /// (`meta_info`, `sglext`, `sgl_ext`; each element of a `/generate`
    /// batch array counts as a choice) are read; without it, only vLLM's.
    pub row_shape: Option<(u64, u64)>,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            choice: None,
            field: ROUTED_EXPERTS.to_owned(),
            prompt_len: None,
            row_shape: None,
            max_differences: 10,
        }
    }
}

/// One of the two responses compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Which {
    /// The first response.
    A,
    /// The second response.
    B,
}

impl std::fmt::Display for Which {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Which::A => "A",
            Which::B => "B",
        })
    }
}

/// Why two responses could not be compared.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompareError {
    /// The rows of one side cannot be read (a malformed response, an
    /// overlap, a missing or short file, ...).
    #[error("{side}: {source}")]
    Gather {
        /// The side.
        side: Which,
        /// Why.
        source: GatherError,
    },
    /// The two sides' rows have different shapes.
    #[error("choices[{choice}] {field}: rows of shape {a:?} in A but {b:?} in B")]
    RowShape {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
        /// A's row shape.
        a: Vec<u64>,
        /// B's row shape.
        b: Vec<u64>,
    },
    /// The two sides' dtypes differ, and are not both integers.
    #[error("choices[{choice}] {field}: rows of {a} in A but {b} in B (only integer dtypes compare across widths)")]
    Dtype {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
        /// A's dtype.
        a: Dtype,
        /// B's dtype.
        b: Dtype,
    },
    /// Rows of zero bytes: their number of positions is a claim no data
    /// backs, so they are not walked position by position.
    #[error("{side}: choices[{choice}] {field}: rows of zero bytes (shape {shape:?}) cannot be compared")]
    EmptyRows {
        /// The side.
        side: Which,
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
        /// The row shape.
        shape: Vec<u64>,
    },
    /// Neither response has rows of the field in any choice compared.
    #[error("no rows of field {field:?} in either response")]
    NoRows {
        /// The field.
        field: String,
    },
}

/// Compares the rows of `options.field` of response `a` (files read from
/// `store_a`) with those of response `b` (files from `store_b`), choice by
/// choice.
///
/// A choice that one response lacks, or that has no rows of the field, is
/// compared as covering no position, so the other side's positions show as
/// covered by one side only.
///
/// ```
/// use pd_stitch::compare::{compare, Options};
/// use pd_stitch::gather::Store;
/// use serde_json::json;
///
/// // Two positions of one layer of top-2: equal, then the same experts in another order.
/// let a = json!({"choices": [{"routed_experts":
///     {"data": "AQIDBA==", "shape": [2, 1, 2], "start": 0, "dtype": "uint8"}}]}); // [1,2],[3,4]
/// let b = json!({"choices": [{"routed_experts":
///     {"data": "AQIEAw==", "shape": [2, 1, 2], "start": 0, "dtype": "uint8"}}]}); // [1,2],[4,3]
/// let report = compare(&a, &Store::memory(), &b, &Store::memory(), &Options::default())?;
/// let choice = &report.choices[0];
/// assert_eq!((choice.compared, choice.equal_rows, choice.equal_sets), (2, 1, 2));
/// assert_eq!(choice.first_differences[0].position, 1);
/// assert!(!report.all_equal());
/// # Ok::<(), pd_stitch::compare::CompareError>(())
/// ```
///
/// # Errors
///
/// [`CompareError`]: a side's rows cannot be read, the two sides' rows differ
/// in shape or (other than integer widths) dtype, rows of zero bytes, or no
/// rows of the field on either side.
pub fn compare(
    a: &Value,
    store_a: &Store,
    b: &Value,
    store_b: &Store,
    options: &Options,
) -> Result<Report, CompareError> {
    let field = options.field.as_str();
    let choices = match options.choice {
        Some(choice) => vec![choice],
        None => (0..choice_count(a).max(choice_count(b))).collect(),
    };
    let mut report = Report {
        choices: Vec::with_capacity(choices.len()),
    };
    let mut any_rows = false;
    for choice in choices {
        let (rows_a, rows_b) = if is_csr(field) {
            csr_sides(a, store_a, b, store_b, choice, field)?
        } else {
            (
                read_side(a, store_a, choice, field, options.row_shape, Which::A)?,
                read_side(b, store_b, choice, field, options.row_shape, Which::B)?,
            )
        };
        any_rows |= rows_a.is_some() || rows_b.is_some();
        let prompt = prompt_len(options.prompt_len, a, b, choice, field);
        report.choices.push(compare_choice(
            choice,
            field,
            rows_a.unwrap_or_default(),
            rows_b.unwrap_or_default(),
            prompt,
            options.max_differences,
        )?);
    }
    if !any_rows {
        return Err(CompareError::NoRows {
            field: field.to_owned(),
        });
    }
    Ok(report)
}

/// The length of `response.choices`; 1 when it is not an array, so that
/// reading choice 0 reports the malformed response.
fn choice_count(response: &Value) -> usize {
    if let Value::Array(items) = response {
        return items.len(); // an SGLang batch: its outputs
    }
    response
        .get("choices")
        .and_then(Value::as_array)
        .map_or(1, Vec::len)
}

/// The rows of one side as runs of consecutive positions in order, or `None`
/// when the choice is absent or has no rows of the field.
fn read_side(
    response: &Value,
    store: &Store,
    choice: usize,
    field: &str,
    row_shape: Option<(u64, u64)>,
    side: Which,
) -> Result<Option<Vec<Gathered>>, CompareError> {
    let error = |source| CompareError::Gather { side, source };
    if let Some((layers, top_k)) = row_shape {
        match gather_sglang(response, choice, layers, top_k) {
            Ok(rows) => return Ok(Some(vec![rows])),
            Err(GatherError::NoRows { .. }) => {}
            Err(other) => return Err(error(other)),
        }
    }
    if let Value::Array(items) = response {
        if choice >= items.len() {
            return Ok(None);
        }
    }
    if let Some(choices) = response.get("choices").and_then(Value::as_array) {
        if choice >= choices.len() {
            return Ok(None);
        }
    }
    // Rows with a gap are still rows: a merge that cuts one position late
    // leaves one, and the comparison shows it as covered by one side only.
    match gather_runs_from(response, choice, field, store) {
        Ok(runs) => Ok(Some(runs)),
        Err(GatherError::NoRows { .. }) => Ok(None),
        Err(other) => Err(error(other)),
    }
}

/// Whether the trainer stores `field` as CSR (its rows are file offsets,
/// so they are compared by the values they point at).
fn is_csr(field: &str) -> bool {
    FieldTable::trainer()
        .get(field)
        .is_some_and(|spec| spec.storage == Storage::Csr)
}

/// Both sides of a CSR field as the trainer reads them, run by run of
/// covered positions, each row `[1, width]` values padded with the fill to
/// the widest row of either side, so that the rows compare by value (and a
/// row's values as a set: top-k order aside).
#[allow(clippy::type_complexity)]
fn csr_sides(
    a: &Value,
    store_a: &Store,
    b: &Value,
    store_b: &Store,
    choice: usize,
    field: &str,
) -> Result<(Option<Vec<Gathered>>, Option<Vec<Gathered>>), CompareError> {
    let side = |r: &Value,
                store: &Store,
                which: Which|
     -> Result<Option<Vec<(Rows, Reading)>>, CompareError> {
        let error = |source| CompareError::Gather {
            side: which,
            source,
        };
        if let Some(choices) = r.get("choices").and_then(Value::as_array) {
            if choice >= choices.len() {
                return Ok(None);
            }
        }
        let items = payload_at(r, choice).ok().flatten();
        let positions: Vec<Rows> = items
            .into_iter()
            .flat_map(|(_, items)| items)
            .filter(|s| s.get("field").and_then(Value::as_str) == Some(field))
            .filter_map(|s| Rows::with_len(s.get("pos")?.as_u64()?, s.get("rows")?.as_u64()?))
            .collect();
        if positions.is_empty() {
            return Ok(None);
        }
        let (union, _, _) = crate::gather::coverage(positions.into_iter());
        let mut runs = Vec::new();
        for run in union {
            if let Some(reading) =
                read_choice_field(r, choice, field, run.start(), run.end(), store).map_err(error)?
            {
                runs.push((run, reading));
            }
        }
        Ok(Some(runs))
    };
    let (ra, rb) = (side(a, store_a, Which::A)?, side(b, store_b, Which::B)?);
    let width = ra
        .iter()
        .chain(&rb)
        .flatten()
        .map(|(_, r)| r.row_shape().first().copied().unwrap_or(1))
        .max()
        .unwrap_or(1);
    let fill = FieldTable::trainer()
        .get(field)
        .map_or(Fill::Int(-1), |spec| spec.fill);
    let pad = |runs: Option<Vec<(Rows, Reading)>>| {
        runs.map(|runs| {
            runs.into_iter()
                .map(|(positions, reading)| {
                    let w = reading.row_shape().first().copied().unwrap_or(1) as usize;
                    let fill_bytes = match fill {
                        Fill::Int(x) => x.to_le_bytes(),
                        Fill::Float(x) => x.to_le_bytes(),
                    };
                    let mut data =
                        Vec::with_capacity(positions.len() as usize * width as usize * 4);
                    for k in 0..positions.len() {
                        let row = reading.row(k).unwrap_or_default();
                        data.extend_from_slice(row);
                        for _ in w..width as usize {
                            data.extend_from_slice(&fill_bytes);
                        }
                    }
                    Gathered::from_parts(positions, reading.values().dtype(), vec![1, width], data)
                })
                .collect()
        })
    };
    Ok((pad(ra), pad(rb)))
}

/// Where the prompt ends, and who says so.
fn prompt_len(
    given: Option<u64>,
    a: &Value,
    b: &Value,
    choice: usize,
    field: &str,
) -> Option<PromptLen> {
    let usage = |r: &Value| {
        r.get("usage")
            .or_else(|| r.get(META_INFO))
            .or_else(|| r.get(choice)?.get(META_INFO))?
            .get("prompt_tokens")?
            .as_u64()
    };
    let found = given
        .map(|n| (n, PromptSource::Given))
        .or_else(|| usage(a).map(|n| (n, PromptSource::Usage(Which::A))))
        .or_else(|| usage(b).map(|n| (n, PromptSource::Usage(Which::B))))
        .or_else(|| prefill_end(a, choice, field).map(|n| (n, PromptSource::Payload(Which::A))))
        .or_else(|| prefill_end(b, choice, field).map(|n| (n, PromptSource::Payload(Which::B))));
    found.map(|(len, source)| PromptLen { len, source })
}

/// The end of a merged response's prefill segments: a merged payload starts
/// with the prefill's segments, which lie in the prefill instance's files;
/// the first segment of `field` in another file than the first one's starts
/// the decode's. `None` when every segment names one file (a colocated
/// response) or there are none.
fn prefill_end(response: &Value, choice: usize, field: &str) -> Option<u64> {
    let (_, items) = payload_at(response, choice).ok()??;
    let mut segments = items.iter().filter(|item| {
        item.get("field").and_then(Value::as_str) == Some(field)
            && item.get("rows").and_then(Value::as_u64) != Some(0)
    });
    let first = segments.next()?;
    let file = first.get("file")?;
    let end = |s: &Value| {
        s.get("pos")?
            .as_u64()?
            .checked_add(s.get("rows")?.as_u64()?)
    };
    let mut prefill_end = end(first)?;
    for segment in segments {
        if segment.get("file") != Some(file) {
            return Some(prefill_end);
        }
        prefill_end = prefill_end.max(end(segment)?);
    }
    None
}

/// Layer `layer`'s slice of a row whose layers are `bytes` wide.
fn layer_slice(row: &[u8], layer: usize, bytes: usize) -> &[u8] {
    let from = layer.saturating_mul(bytes);
    row.get(from..from.saturating_add(bytes))
        .unwrap_or_default()
}

/// One side's rows of one choice, walked position by position.
struct SideRows {
    runs: Vec<Gathered>,
    dtype: Dtype,
    /// Bytes of one layer's slice of a row.
    layer_bytes: usize,
}

impl SideRows {
    fn row(&self, position: u64) -> Option<&[u8]> {
        let at = self
            .runs
            .partition_point(|r| r.positions().end() <= position);
        self.runs.get(at)?.row(position)
    }
}

/// Compares one choice's rows.
fn compare_choice(
    choice: usize,
    field: &str,
    a: Vec<Gathered>,
    b: Vec<Gathered>,
    prompt: Option<PromptLen>,
    max_differences: usize,
) -> Result<ChoiceReport, CompareError> {
    let keep = |runs: Vec<Gathered>| -> Vec<Gathered> {
        runs.into_iter()
            .filter(|r| !r.positions().is_empty())
            .collect()
    };
    let (a, b) = (keep(a), keep(b));
    let shape_of = |runs: &[Gathered]| runs.first().map(|r| r.row_shape().to_vec());
    let dtype_of = |runs: &[Gathered]| runs.first().map(Gathered::dtype);
    let row_shape = match (shape_of(&a), shape_of(&b)) {
        (Some(sa), Some(sb)) if sa != sb => {
            return Err(CompareError::RowShape {
                choice,
                field: field.to_owned(),
                a: sa,
                b: sb,
            })
        }
        (Some(s), _) | (None, Some(s)) => s,
        (None, None) => Vec::new(),
    };
    if let (Some(da), Some(db)) = (dtype_of(&a), dtype_of(&b)) {
        if da != db && !(values::is_integer(da) && values::is_integer(db)) {
            return Err(CompareError::Dtype {
                choice,
                field: field.to_owned(),
                a: da,
                b: db,
            });
        }
    }
    // Row bytes are real data here (gather read them); zero-byte rows are
    // refused, so everything below is bounded by the data.
    let layers = usize::try_from(row_shape.first().copied().unwrap_or(1)).unwrap_or(usize::MAX);
    let side = |runs: Vec<Gathered>, which: Which| -> Result<SideRows, CompareError> {
        let dtype = runs.first().map_or(Dtype::Uint8, Gathered::dtype);
        let row_bytes = runs.first().map_or(0, |r| {
            let n = usize::try_from(r.positions().len()).unwrap_or(usize::MAX);
            r.data().len() / n.max(1)
        });
        if row_bytes == 0 && !runs.is_empty() {
            return Err(CompareError::EmptyRows {
                side: which,
                choice,
                field: field.to_owned(),
                shape: row_shape.clone(),
            });
        }
        Ok(SideRows {
            runs,
            dtype,
            layer_bytes: row_bytes / layers.max(1),
        })
    };
    let (a, b) = (side(a, Which::A)?, side(b, Which::B)?);
    let dtypes = (
        (!a.runs.is_empty()).then_some(a.dtype),
        (!b.runs.is_empty()).then_some(b.dtype),
    );
    let mut walk = Walk {
        report: ChoiceReport::new(choice, field, dtypes, row_shape, layers, prompt),
        layers,
        max_differences,
        scratch: [Vec::new(), Vec::new()],
    };
    walk.run(&a, &b);
    Ok(walk.report)
}

/// The state of the walk over positions.
struct Walk {
    report: ChoiceReport,
    layers: usize,
    max_differences: usize,
    scratch: [Vec<i128>; 2],
}

impl Walk {
    /// Visits every position either side covers, in order.
    fn run(&mut self, a: &SideRows, b: &SideRows) {
        let intervals =
            |s: &SideRows| -> Vec<Rows> { s.runs.iter().map(Gathered::positions).collect() };
        let (ia, ib) = (intervals(a), intervals(b));
        let mut bounds: Vec<u64> = ia
            .iter()
            .chain(&ib)
            .flat_map(|r| [r.start(), r.end()])
            .collect();
        bounds.sort_unstable();
        bounds.dedup();
        // The pieces between bounds come in order, so each side's runs are
        // passed once: linear in the runs, not their product.
        let (mut next_a, mut next_b) = (0, 0);
        let covers = |list: &[Rows], next: &mut usize, x: u64| {
            while list.get(*next).is_some_and(|r| r.end() <= x) {
                *next += 1;
            }
            list.get(*next).is_some_and(|r| r.contains(x))
        };
        for pair in bounds.windows(2) {
            let (Some(&from), Some(&to)) = (pair.first(), pair.get(1)) else {
                continue;
            };
            let Some(piece) = Rows::new(from, to) else {
                continue;
            };
            let in_a = covers(&ia, &mut next_a, from);
            let in_b = covers(&ib, &mut next_b, from);
            match (in_a, in_b) {
                (true, true) => {
                    for x in from..to {
                        self.both(a, b, x);
                    }
                }
                (true, false) => self.one_side(Which::A, piece),
                (false, true) => self.one_side(Which::B, piece),
                (false, false) => {}
            }
        }
        self.report.finish();
    }

    fn one_side(&mut self, which: Which, piece: Rows) {
        let cell = match which {
            Which::A => Cell::OnlyA,
            Which::B => Cell::OnlyB,
        };
        let list = match which {
            Which::A => &mut self.report.only_in_a,
            Which::B => &mut self.report.only_in_b,
        };
        match list.last_mut() {
            Some(last) if last.end() == piece.start() => {
                *last = Rows::new(last.start(), piece.end()).unwrap_or(*last);
            }
            _ => list.push(piece),
        }
        for x in piece.start()..piece.end() {
            self.report.cells.begin(x);
            for _ in 0..self.layers {
                self.report.cells.push(cell);
            }
        }
    }

    fn both(&mut self, a: &SideRows, b: &SideRows, x: u64) {
        let (Some(row_a), Some(row_b)) = (a.row(x), b.row(x)) else {
            return;
        };
        let mut row_equal = true;
        let mut row_set_equal = true;
        self.report.cells.begin(x);
        for layer in 0..self.layers {
            let (sa, sb) = (
                layer_slice(row_a, layer, a.layer_bytes),
                layer_slice(row_b, layer, b.layer_bytes),
            );
            let cell = self.layer_cell(a.dtype, sa, b.dtype, sb);
            row_equal &= cell == Cell::Equal;
            row_set_equal &= cell != Cell::Different;
            if cell == Cell::Equal {
                if let Some(count) = self.report.per_layer_equal.get_mut(layer) {
                    *count += 1;
                }
            }
            self.report.cells.push(cell);
        }
        self.report.count(x, row_equal, row_set_equal);
        if !row_equal && self.report.first_differences.len() < self.max_differences {
            let shape = self.report.row_shape.clone();
            self.report.first_differences.push(Difference {
                position: x,
                a: values::row_json(a.dtype, &shape, row_a),
                b: values::row_json(b.dtype, &shape, row_b),
            });
        }
    }

    /// One layer's slices: equal element by element, equal as multisets of
    /// elements, or different.
    fn layer_cell(&mut self, da: Dtype, sa: &[u8], db: Dtype, sb: &[u8]) -> Cell {
        if da == db && sa == sb {
            return Cell::Equal;
        }
        let [ka, kb] = &mut self.scratch;
        ka.clear();
        kb.clear();
        values::keys(da, sa, ka);
        values::keys(db, sb, kb);
        if ka == kb {
            return Cell::Equal;
        }
        ka.sort_unstable();
        kb.sort_unstable();
        if ka == kb {
            Cell::SetEqual
        } else {
            Cell::Different
        }
    }
}
