//! The rows check: rows no engine should produce.
//!
//! A row of `routed_experts` is, for each layer, the `top_k` experts the
//! router chose for that position. A top-k choice never names the same
//! expert twice in one layer, and never an expert at or beyond the model's
//! count; a row whose every id is 0 with `top_k > 1` therefore cannot come
//! from a forward pass (it is a buffer nobody wrote: a P/D prefill that
//! finalized its outputs early, a generation that ended at the prefill, a
//! route lost across turns). These are what [`check_rows`] finds, in decoded
//! rows of any integer dtype, whatever form they travelled in.
//!
//! Each [`RowFinding`] names the choice, the position, the layer (none for a
//! row of zeros, which is about the whole row) and the layer's ids. A zero
//! row is one finding, not one duplicate per layer. [`check_response_rows`]
//! runs the check over every choice of a response, read as
//! [`gather`](super::gather) reads it (and SGLang's rows, with the row shape
//! that places them).
//!
//! This is verification, not a cost of the merge: nothing on the merge's
//! path calls it.

use std::fmt;

use serde_json::{json, Value};

use crate::algebra::Dtype;
use crate::response::fields::ROUTED_EXPERTS;

use super::{gather_runs_from, gather_sglang, GatherError, Gathered, Store};

/// What is wrong with a row, or with one layer of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RowProblem {
    /// Expert `id` appears more than once in one layer's top-k.
    Duplicate {
        /// The first id that appears twice, in the layer's order.
        id: i128,
    },
    /// Expert `id` is at or beyond the model's `experts`.
    OutOfRange {
        /// The first such id, in the layer's order.
        id: i128,
        /// The model's expert count.
        experts: u64,
    },
    /// A negative expert id (rows of a signed dtype).
    Negative {
        /// The first negative id, in the layer's order.
        id: i128,
    },
    /// Every id of the row (all layers) is 0, with `top_k > 1`.
    ZeroRow {
        /// The row's layers.
        layers: u64,
        /// Its top-k.
        top_k: u64,
    },
}

impl RowProblem {
    /// A short name of the kind: `duplicate`, `out-of-range`, `negative` or
    /// `zero-row` (the `--json` reports' `kind`).
    pub fn name(&self) -> &'static str {
        match self {
            RowProblem::Duplicate { .. } => "duplicate",
            RowProblem::OutOfRange { .. } => "out-of-range",
            RowProblem::Negative { .. } => "negative",
            RowProblem::ZeroRow { .. } => "zero-row",
        }
    }
}

/// One row (or one layer of a row) no engine should produce.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowFinding {
    /// The choice (for SGLang's rows, the item: the response, or an element
    /// of a batch array).
    pub choice: usize,
    /// The position.
    pub position: u64,
    /// The layer, or `None` when the finding is about the whole row
    /// ([`RowProblem::ZeroRow`]).
    pub layer: Option<u64>,
    /// What is wrong.
    pub problem: RowProblem,
    /// The layer's ids, in order (empty for a row of zeros).
    pub ids: Vec<i128>,
}

impl fmt::Display for RowFinding {
    /// `choice 0, position 12, layer 3: expert 17 twice in [17, 3, 17, 9]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "choice {}, position {}", self.choice, self.position)?;
        if let Some(layer) = self.layer {
            write!(f, ", layer {layer}")?;
        }
        write!(f, ": {}", self.what())
    }
}

impl RowFinding {
    /// What is wrong, without where: `expert 17 twice in [17, 3, 17, 9]`.
    pub fn what(&self) -> String {
        let ids = self
            .ids
            .iter()
            .map(i128::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        match self.problem {
            RowProblem::Duplicate { id } => format!("expert {id} twice in [{ids}]"),
            RowProblem::OutOfRange { id, experts } => {
                format!("expert {id} in [{ids}] is not below the model's {experts} experts")
            }
            RowProblem::Negative { id } => format!("negative expert id {id} in [{ids}]"),
            RowProblem::ZeroRow { layers, top_k } => format!(
                "all {layers} x {top_k} ids are 0 (a row nobody wrote: top_k > 1 never picks expert 0 twice)"
            ),
        }
    }

    /// The finding as JSON: `{"choice", "position", "layer", "kind", "id",
    /// "experts", "ids"}` (`layer`, `id` and `experts` null where they do not
    /// apply).
    pub fn to_json(&self) -> Value {
        let (id, experts) = match self.problem {
            RowProblem::Duplicate { id } | RowProblem::Negative { id } => (Some(id), None),
            RowProblem::OutOfRange { id, experts } => (Some(id), Some(experts)),
            RowProblem::ZeroRow { .. } => (None, None),
        };
        json!({
            "choice": self.choice,
            "position": self.position,
            "layer": self.layer,
            "kind": self.problem.name(),
            "id": id.map(id_json),
            "experts": experts,
            "ids": self.ids.iter().copied().map(id_json).collect::<Vec<_>>(),
        })
    }
}

/// An id as a JSON number (a string past 64 bits, which no dtype reaches).
fn id_json(id: i128) -> Value {
    i64::try_from(id)
        .map(Value::from)
        .or_else(|_| u64::try_from(id).map(Value::from))
        .unwrap_or_else(|_| Value::String(id.to_string()))
}

/// Why rows could not be checked.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RowsCheckError {
    /// Expert ids are integers; these rows are not.
    #[error("choice {choice}: rows of {dtype} are not expert ids (an integer dtype is)")]
    NotIds {
        /// The choice.
        choice: usize,
        /// Their dtype.
        dtype: Dtype,
    },
    /// The bytes are not a whole number of rows of the shape.
    #[error("choice {choice}: {len} bytes are not whole rows of shape {shape:?} of {dtype}")]
    Ragged {
        /// The choice.
        choice: usize,
        /// How many bytes.
        len: usize,
        /// The row shape.
        shape: Vec<u64>,
        /// The dtype.
        dtype: Dtype,
    },
}

/// The rows checked and what was found: the first findings in position
/// order (at most the limit asked for) and how many of each kind in all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RowsReport {
    /// The first findings, in choice, position and layer order.
    pub findings: Vec<RowFinding>,
    /// How many findings of each kind in all, by [`RowProblem::name`]:
    /// `duplicate`, `out-of-range`, `negative`, `zero-row`.
    pub counts: [(&'static str, u64); 4],
    /// Rows looked at.
    pub rows: u64,
    /// Choices whose rows could not be read or checked, and why (the
    /// layout's own problems are `check`'s and `gather`'s to report).
    pub unreadable: Vec<(usize, String)>,
}

impl RowsReport {
    /// An empty report (no rows looked at yet).
    pub fn new() -> RowsReport {
        RowsReport {
            counts: [
                ("duplicate", 0),
                ("out-of-range", 0),
                ("negative", 0),
                ("zero-row", 0),
            ],
            ..RowsReport::default()
        }
    }

    /// How many findings in all.
    pub fn total(&self) -> u64 {
        self.counts.iter().map(|(_, n)| n).sum()
    }

    /// Whether nothing was found (unreadable choices aside).
    pub fn is_clean(&self) -> bool {
        self.total() == 0
    }

    /// `12 zero-row, 1 duplicate`, or `none`.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .counts
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{n} {name}"))
            .collect();
        if parts.is_empty() {
            "none".to_owned()
        } else {
            parts.join(", ")
        }
    }

    /// The report as JSON: `{"rows", "counts": {kind: n}, "findings": [...],
    /// "unreadable": [{"choice", "error"}]}`.
    pub fn to_json(&self) -> Value {
        let counts: serde_json::Map<String, Value> = self
            .counts
            .iter()
            .map(|(name, n)| ((*name).to_owned(), json!(n)))
            .collect();
        json!({
            "rows": self.rows,
            "counts": counts,
            "findings": self.findings.iter().map(RowFinding::to_json).collect::<Vec<_>>(),
            "unreadable": self.unreadable.iter()
                .map(|(choice, error)| json!({"choice": choice, "error": error}))
                .collect::<Vec<_>>(),
        })
    }

    fn count(&mut self, problem: &RowProblem) {
        let name = problem.name();
        if let Some((_, n)) = self.counts.iter_mut().find(|(k, _)| *k == name) {
            *n += 1;
        }
    }
}

impl fmt::Display for RowsReport {
    /// One line per finding kept, then the counts when some were left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for finding in &self.findings {
            writeln!(f, "{finding}")?;
        }
        let shown = self.findings.len() as u64;
        if self.total() > shown {
            writeln!(
                f,
                "... {} more ({} in all: {})",
                self.total() - shown,
                self.total(),
                self.summary()
            )?;
        }
        Ok(())
    }
}

/// What [`check_rows`] knows of the model, and how much it keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowsCheck {
    /// The model's expert count (`num_experts`, `n_routed_experts` or
    /// `num_local_experts` of its `config.json`): ids at or beyond it are
    /// findings. Unknown: only negative ids are out of range.
    pub experts: Option<u64>,
    /// How many findings to keep (all are counted). Default 100.
    pub limit: usize,
}

impl Default for RowsCheck {
    fn default() -> RowsCheck {
        RowsCheck {
            experts: None,
            limit: 100,
        }
    }
}

impl RowsCheck {
    /// A check with the model's expert count, when known.
    pub fn experts(experts: Option<u64>) -> RowsCheck {
        RowsCheck {
            experts,
            ..RowsCheck::default()
        }
    }
}

/// Checks the rows of one choice: `data` holds rows of `shape` (the last
/// dimension is the top-k, the ones before it the layers; an empty shape is
/// one layer of top-1) of `dtype`, back to back, the first at position
/// `start`. Findings are added to `report` (counted always, kept up to
/// `check.limit`).
///
/// ```
/// use pd_stitch::algebra::Dtype;
/// use pd_stitch::gather::{check_rows, RowProblem, RowsCheck, RowsReport};
///
/// // Two positions from 7 on, rows of 2 layers x top-2 (uint8):
/// // position 7 is fine; position 8 names expert 4 twice in layer 1.
/// let data = [1, 2, 3, 4, /* 8: */ 5, 6, 4, 4];
/// let mut report = RowsReport::new();
/// check_rows(0, 7, Dtype::Uint8, &[2, 2], &data, RowsCheck::experts(Some(8)), &mut report)?;
/// assert_eq!(report.rows, 2);
/// let finding = &report.findings[0];
/// assert_eq!((finding.position, finding.layer), (8, Some(1)));
/// assert_eq!(finding.problem, RowProblem::Duplicate { id: 4 });
/// assert_eq!(finding.to_string(), "choice 0, position 8, layer 1: expert 4 twice in [4, 4]");
///
/// // A row of zeros is one finding about the whole row.
/// let mut report = RowsReport::new();
/// check_rows(1, 0, Dtype::Uint8, &[2, 2], &[0; 4], RowsCheck::default(), &mut report)?;
/// assert_eq!(report.findings[0].problem, RowProblem::ZeroRow { layers: 2, top_k: 2 });
/// assert_eq!(report.summary(), "1 zero-row");
/// # Ok::<(), pd_stitch::gather::RowsCheckError>(())
/// ```
///
/// # Errors
///
/// [`RowsCheckError::NotIds`] for rows of a float or bool dtype,
/// [`RowsCheckError::Ragged`] when `data` is not whole rows.
pub fn check_rows(
    choice: usize,
    start: u64,
    dtype: Dtype,
    shape: &[u64],
    data: &[u8],
    check: RowsCheck,
    report: &mut RowsReport,
) -> Result<(), RowsCheckError> {
    if dtype.is_float() || dtype == Dtype::Bool {
        return Err(RowsCheckError::NotIds { choice, dtype });
    }
    let ragged = || RowsCheckError::Ragged {
        choice,
        len: data.len(),
        shape: shape.to_vec(),
        dtype,
    };
    let top_k = shape.last().copied().unwrap_or(1);
    let layers = shape
        .split_last()
        .map_or(1, |(_, outer)| outer.iter().product::<u64>());
    let itemsize = usize::try_from(dtype.itemsize()).map_err(|_| ragged())?;
    let layer_bytes = usize::try_from(top_k)
        .ok()
        .and_then(|k| k.checked_mul(itemsize))
        .ok_or_else(ragged)?;
    let row_bytes = usize::try_from(layers)
        .ok()
        .and_then(|l| l.checked_mul(layer_bytes))
        .ok_or_else(ragged)?;
    if row_bytes == 0 {
        // Rows of no ids hold nothing to check; bytes besides them are ragged.
        return if data.is_empty() {
            Ok(())
        } else {
            Err(ragged())
        };
    }
    if data.len() % row_bytes != 0 {
        return Err(ragged());
    }
    let mut ids = Vec::with_capacity(usize::try_from(top_k).unwrap_or(0));
    for (k, row) in data.chunks_exact(row_bytes).enumerate() {
        let position = start.saturating_add(k as u64);
        report.rows += 1;
        if top_k > 1 && row.iter().all(|&b| b == 0) {
            let problem = RowProblem::ZeroRow { layers, top_k };
            push(report, check, choice, position, None, problem, Vec::new());
            continue;
        }
        for (layer, slice) in row.chunks_exact(layer_bytes).enumerate() {
            ids.clear();
            ids.extend(slice.chunks_exact(itemsize).map(|e| id(dtype, e)));
            for problem in layer_problems(&ids, check.experts) {
                push(
                    report,
                    check,
                    choice,
                    position,
                    Some(layer as u64),
                    problem,
                    ids.clone(),
                );
            }
        }
    }
    Ok(())
}

/// [`check_rows`] on rows read back by [`gather`](super::gather).
///
/// # Errors
///
/// As [`check_rows`].
pub fn check_gathered(
    choice: usize,
    rows: &Gathered,
    check: RowsCheck,
    report: &mut RowsReport,
) -> Result<(), RowsCheckError> {
    check_rows(
        choice,
        rows.positions().start(),
        rows.dtype(),
        rows.row_shape(),
        rows.data(),
        check,
        report,
    )
}

/// The rows check over every choice of `response` that has `routed_experts`
/// rows, read as [`gather_runs_from`] reads them (by handle through `store`,
/// or inline; a gap leaves runs, each checked), and, with `row_shape`,
/// SGLang's rows (`meta_info`, `sglext`, `sgl_ext`; each element of a batch
/// array is a choice). A choice whose rows cannot be read is listed in
/// [`RowsReport::unreadable`], and the others are still checked.
///
/// ```
/// use pd_stitch::gather::{check_response_rows, RowsCheck, Store};
/// use serde_json::json;
///
/// // Inline compact rows of 1 x 2 from position 3: [5, 9], then [9, 40].
/// let response = json!({"choices": [{"routed_experts":
///     {"data": "BQkJKA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"}}]});
/// let report = check_response_rows(&response, &Store::memory(), None, RowsCheck::experts(Some(32)));
/// assert_eq!(report.rows, 2);
/// assert_eq!(report.findings[0].to_string(),
///     "choice 0, position 4, layer 0: expert 40 in [9, 40] is not below the model's 32 experts");
/// ```
pub fn check_response_rows(
    response: &Value,
    store: &Store,
    row_shape: Option<(u64, u64)>,
    check: RowsCheck,
) -> RowsReport {
    let mut report = RowsReport::new();
    let count = match response {
        Value::Array(items) => items.len(),
        _ => response
            .get("choices")
            .and_then(Value::as_array)
            .map_or(1, Vec::len),
    };
    for choice in 0..count {
        let runs = match read_choice(response, store, choice, row_shape) {
            Ok(runs) => runs,
            Err(e) => {
                report.unreadable.push((choice, e.to_string()));
                continue;
            }
        };
        for run in &runs {
            if let Err(e) = check_gathered(choice, run, check, &mut report) {
                report.unreadable.push((choice, e.to_string()));
                break;
            }
        }
    }
    report
}

/// The `routed_experts` rows of one choice as runs; none when it has none.
fn read_choice(
    response: &Value,
    store: &Store,
    choice: usize,
    row_shape: Option<(u64, u64)>,
) -> Result<Vec<Gathered>, GatherError> {
    if let Some((layers, top_k)) = row_shape {
        match gather_sglang(response, choice, layers, top_k) {
            Ok(rows) => return Ok(vec![rows]),
            Err(GatherError::NoRows { .. }) => {}
            Err(other) => return Err(other),
        }
    }
    if response.get("choices").is_none() {
        return Ok(Vec::new());
    }
    match gather_runs_from(response, choice, ROUTED_EXPERTS, store) {
        Ok(runs) => Ok(runs),
        Err(GatherError::NoRows { .. }) => Ok(Vec::new()),
        Err(other) => Err(other),
    }
}

/// Records one finding: counted always, kept up to the limit.
fn push(
    report: &mut RowsReport,
    check: RowsCheck,
    choice: usize,
    position: u64,
    layer: Option<u64>,
    problem: RowProblem,
    ids: Vec<i128>,
) {
    report.count(&problem);
    if report.findings.len() < check.limit {
        report.findings.push(RowFinding {
            choice,
            position,
            layer,
            problem,
            ids,
        });
    }
}

/// What is wrong with one layer's ids, in the order of [`RowProblem`]'s
/// kinds: a duplicate, an id out of range, a negative id (each named by the
/// first such id).
fn layer_problems(ids: &[i128], experts: Option<u64>) -> impl Iterator<Item = RowProblem> {
    let duplicate = ids
        .iter()
        .enumerate()
        .find(|&(k, id)| ids.get(..k).is_some_and(|before| before.contains(id)))
        .map(|(_, &id)| RowProblem::Duplicate { id });
    let out_of_range = experts.and_then(|experts| {
        ids.iter()
            .find(|&&id| id >= i128::from(experts))
            .map(|&id| RowProblem::OutOfRange { id, experts })
    });
    let negative = ids
        .iter()
        .find(|&&id| id < 0)
        .map(|&id| RowProblem::Negative { id });
    [duplicate, out_of_range, negative].into_iter().flatten()
}

/// One little-endian integer element as an `i128` (sign-extended for the
/// signed dtypes).
fn id(dtype: Dtype, bytes: &[u8]) -> i128 {
    let mut raw = [0u8; 8];
    let size = bytes.len().min(8);
    if let (Some(to), Some(from)) = (raw.get_mut(..size), bytes.get(..size)) {
        to.copy_from_slice(from);
    }
    let unsigned = u64::from_le_bytes(raw);
    let signed = matches!(
        dtype,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64
    );
    if !signed {
        return i128::from(unsigned);
    }
    // Sign-extend from the element's width (1 to 8 bytes).
    let shift = 64u32.saturating_sub(8 * size as u32).min(63);
    i128::from((unsigned.wrapping_shl(shift) as i64) >> shift)
}
