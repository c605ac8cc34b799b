//! What [`check`](super::check) found: a [`CheckReport`] of one line per choice
//! and field ([`FieldReport`]), displayed as the table `pd-stitch check`
//! prints.

use std::fmt;

use crate::algebra::{Dtype, Rows};

/// What [`check`](super::check) found in one response.
#[derive(Debug, Default)]
pub struct CheckReport {
    /// One line per choice and field.
    pub fields: Vec<FieldReport>,
    /// Problems that belong to no field (the response's structure).
    pub problems: Vec<String>,
}

impl CheckReport {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.fields.iter().all(|f| f.problems.is_empty())
    }
}

/// The rows of one field of one choice, as [`check`](super::check) found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldReport {
    /// The choice.
    pub choice: usize,
    /// The field, e.g. `routed_experts`, or `routed_experts (inline npy)`.
    pub field: String,
    /// How many segments (1 for inline rows).
    pub segments: usize,
    /// The positions covered, as disjoint intervals in order.
    pub coverage: Vec<Rows>,
    /// Positions between the first and the last covered that nothing covers.
    pub gaps: Vec<Rows>,
    /// Positions covered more than once.
    pub overlaps: Vec<Rows>,
    /// The dtype, when every segment agrees.
    pub dtype: Option<Dtype>,
    /// The row shape, when every segment agrees.
    pub shape: Option<Vec<u64>>,
    /// What is wrong, one sentence each.
    pub problems: Vec<String>,
}

impl FieldReport {
    pub(super) fn empty(choice: usize, field: String) -> FieldReport {
        FieldReport {
            choice,
            field,
            segments: 0,
            coverage: Vec::new(),
            gaps: Vec::new(),
            overlaps: Vec::new(),
            dtype: None,
            shape: None,
            problems: Vec::new(),
        }
    }
}

impl fmt::Display for CheckReport {
    /// A table, one line per choice and field, then the problems.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<6}  {:<30}  {:>8}  {:<24}  {:<8}  {:<10}  {:<13}  status",
            "choice", "field", "segments", "coverage", "dtype", "shape", "gaps/overlaps"
        )?;
        for r in &self.fields {
            let coverage = if r.coverage.is_empty() {
                "-".to_owned()
            } else {
                list(&r.coverage)
            };
            let dtype = r
                .dtype
                .map_or_else(|| "mixed".to_owned(), |d| d.to_string());
            let shape = r
                .shape
                .as_ref()
                .map_or_else(|| "mixed".to_owned(), |s| format!("{s:?}"));
            let status = if r.problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("{} problem(s)", r.problems.len())
            };
            writeln!(
                f,
                "{:<6}  {:<30}  {:>8}  {:<24}  {:<8}  {:<10}  {:<13}  {status}",
                r.choice,
                r.field,
                r.segments,
                coverage,
                dtype,
                shape,
                format!("{}/{}", r.gaps.len(), r.overlaps.len()),
            )?;
        }
        for problem in self
            .problems
            .iter()
            .chain(self.fields.iter().flat_map(|r| &r.problems))
        {
            writeln!(f, "problem: {problem}")?;
        }
        Ok(())
    }
}

/// Intervals as `[a, b), [c, d)`.
pub(super) fn list(intervals: &[Rows]) -> String {
    intervals
        .iter()
        .map(Rows::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
