//! What a choice's differences look like: [`classify`] sorts the positions
//! where two responses' rows differ by the shape of the difference, which
//! says what went wrong.
//!
//! - **boundary**: every layer differs, at a boundary position (the
//!   prompt's last position, where a P/D stitch cuts; a turn boundary of a
//!   multi-turn episode): the stitch's signature, a row taken from the wrong
//!   instance or lost across turns;
//! - **whole rows**: every layer differs elsewhere (rows misplaced, zeroed,
//!   or from another request);
//! - **scattered**: some layers differ and others do not (numerical noise:
//!   a tie broken the other way in one layer's top-k);
//! - **missing**: positions only one side has;
//! - past the first position whose input token differs (**diverged
//!   tokens**), nothing is comparable: those positions are set aside, not
//!   classified.
//!
//! A layer whose experts are the same in another order counts as
//! differing, as it does for [`Report::all_equal`](super::Report::all_equal).

use std::fmt;

use serde_json::{json, Value};

use super::{Cell, ChoiceReport};
use crate::algebra::Rows;

/// A choice's differences, by kind: positions as intervals in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classes {
    /// Every layer differs, at a boundary position.
    pub boundary: Vec<Rows>,
    /// Every layer differs, away from the boundaries.
    pub whole_rows: Vec<Rows>,
    /// Some layers differ, others do not.
    pub scattered: Vec<Rows>,
    /// Layer cells that differ at the scattered positions, in all.
    pub scattered_layers: u64,
    /// Positions only A covers (before any divergence).
    pub only_in_a: Vec<Rows>,
    /// Positions only B covers (before any divergence).
    pub only_in_b: Vec<Rows>,
    /// From the first position whose input token differs on: not compared.
    pub diverged_from: Option<u64>,
}

impl Classes {
    /// Whether nothing differs and the tokens agree.
    pub fn is_empty(&self) -> bool {
        self.boundary.is_empty()
            && self.whole_rows.is_empty()
            && self.scattered.is_empty()
            && self.only_in_a.is_empty()
            && self.only_in_b.is_empty()
            && self.diverged_from.is_none()
    }

    /// The classes present, by name: `boundary`, `whole-rows`, `scattered`,
    /// `missing`, `diverged`.
    pub fn kinds(&self) -> Vec<&'static str> {
        let mut kinds = Vec::new();
        if !self.boundary.is_empty() {
            kinds.push("boundary");
        }
        if !self.whole_rows.is_empty() {
            kinds.push("whole-rows");
        }
        if !self.scattered.is_empty() {
            kinds.push("scattered");
        }
        if !self.only_in_a.is_empty() || !self.only_in_b.is_empty() {
            kinds.push("missing");
        }
        if self.diverged_from.is_some() {
            kinds.push("diverged");
        }
        kinds
    }

    /// As JSON: `{"boundary", "whole_rows", "scattered", "scattered_layers",
    /// "only_in_a", "only_in_b", "diverged_from"}`, intervals as `[start,
    /// end]` pairs.
    pub fn to_json(&self) -> Value {
        let list = |rows: &[Rows]| -> Value {
            rows.iter()
                .map(|r| json!([r.start(), r.end()]))
                .collect::<Vec<_>>()
                .into()
        };
        json!({
            "boundary": list(&self.boundary),
            "whole_rows": list(&self.whole_rows),
            "scattered": list(&self.scattered),
            "scattered_layers": self.scattered_layers,
            "only_in_a": list(&self.only_in_a),
            "only_in_b": list(&self.only_in_b),
            "diverged_from": self.diverged_from,
        })
    }
}

/// How many positions `rows` hold.
fn count(rows: &[Rows]) -> u64 {
    rows.iter().map(|r| r.len()).sum()
}

fn list(rows: &[Rows]) -> String {
    const SHOWN: usize = 4;
    let mut text: Vec<String> = rows
        .iter()
        .take(SHOWN)
        .map(|r| {
            if r.len() == 1 {
                r.start().to_string()
            } else {
                r.to_string()
            }
        })
        .collect();
    if rows.len() > SHOWN {
        text.push(format!("... {} more", rows.len() - SHOWN));
    }
    text.join(", ")
}

impl fmt::Display for Classes {
    /// `boundary at 90; scattered: 2 positions (3 layers) at 120, [200,
    /// 202)`, or `equal`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if !self.boundary.is_empty() {
            parts.push(format!("boundary at {}", list(&self.boundary)));
        }
        if !self.whole_rows.is_empty() {
            parts.push(format!(
                "whole rows: {} position(s) at {}",
                count(&self.whole_rows),
                list(&self.whole_rows)
            ));
        }
        if !self.scattered.is_empty() {
            parts.push(format!(
                "scattered: {} position(s) ({} layer(s)) at {}",
                count(&self.scattered),
                self.scattered_layers,
                list(&self.scattered)
            ));
        }
        for (side, rows) in [("A", &self.only_in_a), ("B", &self.only_in_b)] {
            if !rows.is_empty() {
                parts.push(format!(
                    "missing: {} position(s) only in {side} at {}",
                    count(rows),
                    list(rows)
                ));
            }
        }
        if let Some(from) = self.diverged_from {
            parts.push(format!(
                "diverged tokens: rows from position {from} on not comparable"
            ));
        }
        if parts.is_empty() {
            f.write_str("equal")
        } else {
            f.write_str(&parts.join("; "))
        }
    }
}

/// Appends position `x` to sorted disjoint `list`, merging with the last
/// interval when adjacent.
fn push(list: &mut Vec<Rows>, x: u64) {
    let end = x.saturating_add(1);
    match list.last_mut() {
        Some(last) if last.end() == x => *last = Rows::new(last.start(), end).unwrap_or(*last),
        _ => list.extend(Rows::new(x, end)),
    }
}

/// The parts of `rows` below `until`.
fn before(rows: &[Rows], until: Option<u64>) -> Vec<Rows> {
    let Some(until) = until else {
        return rows.to_vec();
    };
    rows.iter()
        .filter_map(|r| Rows::new(r.start(), r.end().min(until)).filter(|r| !r.is_empty()))
        .collect()
}

/// Classifies the differences of one compared choice: `boundaries` are the
/// positions where a difference in every layer is the stitch's signature
/// (the prompt's last position; with turns, where each earlier turn's
/// prompt and completion ended), `diverged_from` the first position whose
/// input token differs between the two sides (rows from there on are not
/// compared), `None` when the tokens agree.
///
/// ```
/// use pd_stitch::compare::{classify, compare, Options};
/// use pd_stitch::gather::Store;
/// use serde_json::json;
///
/// // Three positions of 2 layers x top-1: position 1 differs in both
/// // layers, position 2 in one.
/// let a = json!({"choices": [{"routed_experts":
///     {"data": "AQIDBAUG", "shape": [3, 2, 1], "start": 0, "dtype": "uint8"}}]}); // [1,2] [3,4] [5,6]
/// let b = json!({"choices": [{"routed_experts":
///     {"data": "AQIJCQUH", "shape": [3, 2, 1], "start": 0, "dtype": "uint8"}}]}); // [1,2] [9,9] [5,7]
/// let report = compare(&a, &Store::memory(), &b, &Store::memory(), &Options::default())?;
/// let classes = classify(&report.choices[0], &[1], None);
/// assert_eq!(classes.to_string(), "boundary at 1; scattered: 1 position(s) (1 layer(s)) at 2");
/// assert_eq!(classes.kinds(), ["boundary", "scattered"]);
/// // Past a token divergence at position 2, nothing is classified.
/// assert_eq!(classify(&report.choices[0], &[1], Some(2)).kinds(), ["boundary", "diverged"]);
/// # Ok::<(), pd_stitch::compare::CompareError>(())
/// ```
pub fn classify(report: &ChoiceReport, boundaries: &[u64], diverged_from: Option<u64>) -> Classes {
    let mut classes = Classes {
        only_in_a: before(&report.only_in_a, diverged_from),
        only_in_b: before(&report.only_in_b, diverged_from),
        diverged_from,
        ..Classes::default()
    };
    for (x, cells) in report.cells.iter() {
        if diverged_from.is_some_and(|from| x >= from) {
            break;
        }
        // Positions one side covers are `missing`, already listed.
        if cells.iter().any(|c| matches!(c, Cell::OnlyA | Cell::OnlyB)) {
            continue;
        }
        let differing = cells.iter().filter(|c| **c != Cell::Equal).count();
        if differing == 0 {
            continue;
        }
        if differing == cells.len() {
            if boundaries.contains(&x) {
                push(&mut classes.boundary, x);
            } else {
                push(&mut classes.whole_rows, x);
            }
        } else {
            push(&mut classes.scattered, x);
            classes.scattered_layers += differing as u64;
        }
    }
    classes
}
