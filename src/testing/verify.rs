//! `verify_stitched`: a router's merged answer held to its case, whatever
//! the wire form: the rows read back where the response says they are,
//! against the colocated truth, and by handle the payload a trainer reads.

use std::fmt;

use serde_json::Value;

use crate::algebra::Dtype;
use crate::format::by_handle::PAYLOAD;
use crate::format::sglang::read_rows;
use crate::gather::{
    check_gathered, check_rows, gather_from, read_choice_field, Gathered, RowFinding, RowsCheck,
    RowsReport,
};
use crate::reading::{FieldTable, Reading};
use crate::response::fields::{DEFAULT_FIELDS, ROUTED_EXPERTS};
use crate::sglang::Api;
use crate::sim::Wire;

use super::case::Case;

/// The first way a merged response is wrong, in words a router author can
/// act on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The choice (SGLang: the output).
    pub choice: usize,
    /// The first wrong position, when the problem is a row.
    pub position: Option<u64>,
    /// The segment or slot that position came from, e.g. `payload[2] (file
    /// req-0000/decode.bin, offset 4096, pos 17, rows 5)`.
    pub segment: Option<String>,
    /// What is wrong and what was expected.
    pub message: String,
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "choice {}", self.choice)?;
        if let Some(position) = self.position {
            write!(f, ", position {position}")?;
        }
        if let Some(segment) = &self.segment {
            write!(f, " (from {segment})")?;
        }
        write!(f, ": {}", self.message)
    }
}

impl std::error::Error for Mismatch {}

/// Checks `merged`, a router's stitched answer for `case`, against the case.
///
/// # Errors
///
/// The first [`Mismatch`]: a missing choice or output (or a batch array
/// where one output was due, or the other way round); prefill segments
/// missing, changed or not first; a non-stitched payload item lost or
/// changed; segments out of position order; rows that cannot be read back
/// (gap, overlap, short file) or that cover other positions; a row no engine
/// produces; or the first position whose row differs from the truth, with
/// the segment or slot it came from and what was expected.
pub fn verify_stitched(case: &Case, merged: &Value) -> Result<(), Mismatch> {
    match case.wire {
        Wire::Sglang(api) => verify_outputs(case, api, merged),
        _ => verify_choices(case, merged),
    }
}

fn mismatch(choice: usize, message: String) -> Mismatch {
    Mismatch {
        choice,
        position: None,
        segment: None,
        message,
    }
}

/// vLLM's and Dynamo's answers: each choice's rows gathered back.
fn verify_choices(case: &Case, merged: &Value) -> Result<(), Mismatch> {
    let choices = merged["choices"]
        .as_array()
        .ok_or_else(|| mismatch(0, "merged choices is not an array".into()))?;
    let expected_choices = case.outputs();
    if choices.len() != expected_choices {
        return Err(mismatch(
            0,
            format!("{} choices, expected {expected_choices}", choices.len()),
        ));
    }
    let request = case.request();
    for (c, choice) in choices.iter().enumerate() {
        if case.wire == Wire::ByHandle {
            check_payload(case, c, choice)?;
        }
        let store = &case.store;
        let rows = gather_from(merged, c, ROUTED_EXPERTS, store)
            .map_err(|e| mismatch(c, format!("rows cannot be read back: {e}")))?;
        // Rows no engine produces, named as what they are before they are
        // held against the truth.
        let experts = RowsCheck::experts(Some(request.model.experts));
        if let Some(finding) = first_finding(c, &rows, experts) {
            return Err(Mismatch {
                choice: c,
                position: Some(finding.position),
                segment: Some(source_of(case, choice, finding.position)),
                message: wrong_row(&finding),
            });
        }
        let all = case.truth(c);
        let row = all.len() / usize::try_from(request.rows()).unwrap_or(1).max(1);
        let start = case.start(c);
        let truth = all.get(start as usize * row..).unwrap_or_default();
        if rows.positions().start() != start || rows.data().len() != truth.len() {
            return Err(mismatch(
                c,
                format!(
                    "rows cover positions {}, expected [{start}, {})",
                    rows.positions(),
                    request.rows()
                ),
            ));
        }
        let wrong = rows
            .data()
            .chunks(row.max(1))
            .zip(truth.chunks(row.max(1)))
            .position(|(a, b)| a != b);
        if let Some(x) = wrong {
            let x = x as u64 + start;
            let expected = if x < request.prompt_len() {
                "the prefill's row (a prompt position)"
            } else {
                "the decode's row (a completion position)"
            };
            return Err(Mismatch {
                choice: c,
                position: Some(x),
                segment: Some(source_of(case, choice, x)),
                message: format!("row differs from the truth; expected {expected}"),
            });
        }
        // What the trainer reads, every field of its table, over the whole
        // sequence: the merged response as the colocated one.
        let seq = request.prompt_len() + request.completion_len();
        for spec in FieldTable::trainer().fields() {
            let read = |response: &Value| {
                read_choice_field(response, c, &spec.name, 0, seq, store).map_err(|e| {
                    mismatch(c, format!("{}: the trainer cannot read it: {e}", spec.name))
                })
            };
            let (got, want) = (read(merged)?, read(&case.colocated)?);
            if got != want {
                let row = (0..seq).find(|&k| {
                    got.as_ref().and_then(|r| r.row(k)) != want.as_ref().and_then(|r| r.row(k))
                });
                return Err(Mismatch {
                    choice: c,
                    position: row,
                    segment: None,
                    message: format!(
                        "{}: the trainer reads {} where the colocated response reads {}",
                        spec.name,
                        describe(got.as_ref()),
                        describe(want.as_ref())
                    ),
                });
            }
        }
    }
    Ok(())
}

/// The first row of `rows` no engine produces, if any (rows that cannot be
/// checked, of floats, say nothing here: the truth judges them).
fn first_finding(choice: usize, rows: &Gathered, check: RowsCheck) -> Option<RowFinding> {
    let mut report = RowsReport::new();
    check_gathered(choice, rows, RowsCheck { limit: 1, ..check }, &mut report).ok()?;
    report.findings.into_iter().next()
}

/// A [`Mismatch`] message for a row no engine produces.
fn wrong_row(finding: &RowFinding) -> String {
    let layer = finding
        .layer
        .map_or_else(String::new, |l| format!(" (layer {l})"));
    format!("a row no engine produces{layer}: {}", finding.what())
}

/// A reading in a few words.
fn describe(reading: Option<&Reading>) -> String {
    reading.map_or_else(
        || "nothing".to_owned(),
        |r| format!("{} {:?}", r.values().name(), r.shape()),
    )
}

/// By handle: the prefill's segments first and unchanged, the decode's other
/// items through, and segments in position order.
fn check_payload(case: &Case, c: usize, choice: &Value) -> Result<(), Mismatch> {
    let fail = |message: String| mismatch(c, message);
    let stitched = |item: &&Value| {
        item.get("field")
            .and_then(Value::as_str)
            .is_some_and(|f| DEFAULT_FIELDS.contains(&f))
    };
    let payload = choice[PAYLOAD]
        .as_array()
        .ok_or_else(|| fail("merged payload is not an array".into()))?;
    let prefix: Vec<&Value> = crate::format::by_handle::prefill_payload(&case.prefill)
        .filter(stitched)
        .collect();
    for (j, expected) in prefix.iter().enumerate() {
        if payload.get(j) != Some(*expected) {
            return Err(fail(format!(
                "payload[{j}] should be the prefill's segment {expected}, as it is"
            )));
        }
    }
    let others = |items: &[Value]| -> Vec<Value> {
        items.iter().filter(|i| !stitched(i)).cloned().collect()
    };
    let original = case.decode["choices"][c][PAYLOAD]
        .as_array()
        .map(|a| others(a))
        .unwrap_or_default();
    if others(payload) != original {
        return Err(fail(
            "a payload item that is not stitched was lost, added or changed".into(),
        ));
    }
    // A segment may start inside the one before (a re-emission: the later
    // rows win), never before it: the writer emits rows in position order,
    // so a step back is a router reordering them.
    for field in DEFAULT_FIELDS {
        let mut last_start = 0;
        for (j, segment) in payload
            .iter()
            .enumerate()
            .filter(|(_, s)| s["field"] == *field)
        {
            let (pos, rows) = (
                segment["pos"].as_u64().unwrap_or(0),
                segment["rows"].as_u64().unwrap_or(0),
            );
            if rows > 0 && pos < last_start {
                return Err(fail(format!(
                    "payload[{j}] (pos {pos}) comes after a segment starting at {last_start}: segments out of position order, so re-emitted rows would lose to stale ones"
                )));
            }
            if rows > 0 {
                last_start = pos;
            }
        }
    }
    Ok(())
}

/// Where the row of position `x` of a merged choice came from, in words.
fn source_of(case: &Case, choice: &Value, x: u64) -> String {
    match case.wire {
        Wire::ByHandle => {}
        Wire::Npy => return "inline routed_experts (npy)".to_owned(),
        Wire::DynamoOpenAi => return "nvext.routed_experts (compact)".to_owned(),
        _ => return "inline routed_experts (compact)".to_owned(),
    }
    let payload = choice[PAYLOAD]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    payload
        .iter()
        .enumerate()
        .find(|(_, s)| {
            s.get("field").and_then(Value::as_str) == Some(ROUTED_EXPERTS) && {
                let (pos, rows) = (
                    s["pos"].as_u64().unwrap_or(0),
                    s["rows"].as_u64().unwrap_or(0),
                );
                pos <= x && x < pos.saturating_add(rows)
            }
        })
        .map_or_else(
            || "no segment".to_owned(),
            |(j, s)| {
                format!(
                    "payload[{j}] (file {}, offset {}, pos {}, rows {})",
                    s["file"], s["offset"], s["pos"], s["rows"]
                )
            },
        )
}

/// The slot of SGLang rows through `api`, as a [`Mismatch`] names it.
fn slot(api: Api) -> &'static str {
    match api {
        Api::Generate => "meta_info.routed_experts",
        Api::ResponseExt => "sglext.routed_experts",
        Api::ChoiceExt => "choices[0].sgl_ext.routed_experts",
    }
}

/// SGLang's answers: every output's rows, read at the positions its counts
/// give, equal the colocated server's, position by position.
fn verify_outputs(case: &Case, api: Api, merged: &Value) -> Result<(), Mismatch> {
    let fail = |item: usize, position: Option<u64>, message: String| Mismatch {
        choice: item,
        position,
        segment: position.map(|_| slot(api).to_owned()),
        message,
    };
    let outputs = case.requests.len();
    match (case.batch, merged) {
        (true, Value::Array(items)) if items.len() == outputs => {}
        (true, _) => {
            return Err(fail(
                0,
                None,
                format!("expected a batch array of {outputs} outputs"),
            ))
        }
        (false, Value::Object(_)) => {}
        (false, _) => return Err(fail(0, None, "expected a response object".into())),
    }
    let (layers, top_k) = case.row_shape();
    let width = usize::try_from(layers.saturating_mul(top_k))
        .unwrap_or(usize::MAX)
        .max(1);
    for (i, request) in case.requests.iter().enumerate() {
        let rows = read_rows(merged, i, layers, top_k)
            .map_err(|e| fail(i, None, format!("rows cannot be read back: {e}")))?
            .ok_or_else(|| fail(i, None, format!("no rows in {}", slot(api))))?;
        let (start, end) = (request.start, request.rows());
        if (rows.positions.start(), rows.positions.end()) != (start, end) {
            return Err(fail(
                i,
                None,
                format!(
                    "rows cover positions {}, expected [{start}, {end})",
                    rows.positions
                ),
            ));
        }
        let bytes: Vec<u8> = rows.ids.iter().flat_map(|id| id.to_le_bytes()).collect();
        let mut found = RowsReport::new();
        let check = RowsCheck {
            experts: Some(request.model.experts),
            limit: 1,
        };
        let shape = [layers, top_k];
        // Whole rows of int32 (read_rows made them): the check applies.
        if check_rows(i, start, Dtype::Int32, &shape, &bytes, check, &mut found).is_ok() {
            if let Some(finding) = found.findings.first() {
                return Err(fail(i, Some(finding.position), wrong_row(finding)));
            }
        }
        let all = case.truth(i);
        let truth = all.get(start as usize * width * 4..).unwrap_or_default();
        let wrong = bytes
            .chunks(width * 4)
            .zip(truth.chunks(width * 4))
            .position(|(a, b)| a != b);
        if let Some(k) = wrong {
            let x = start + k as u64;
            let expected = if x < request.prompt_len() {
                "the prefill's row (a prompt position)"
            } else {
                "the decode's row (a position after the prompt)"
            };
            return Err(fail(
                i,
                Some(x),
                format!("row differs from the truth; expected {expected}"),
            ));
        }
    }
    Ok(())
}
