//! Checking a response's layout: [`check`] and [`check_from`] look over every
//! choice without stopping at the first problem, for each field its coverage,
//! gaps and overlaps, dtype and shape agreement, payload order, and whether
//! every segment's bytes exist in its file, and collect it all in a
//! [`CheckReport`]; [`check_with`] also reads SGLang's rows, with the row
//! shape that places them.

use std::path::Path;

use serde_json::Value;

use crate::algebra::{check_layout, Dtype, LayoutProblem, Segment};
use crate::codec::Form;
use crate::error::{describe, Location};
use crate::format::inline;
use crate::format::places::Place;
use crate::reading::{FieldTable, Storage};
use crate::response::fields::ROUTED_EXPERTS;

use super::read::{coverage, inline_rows, item_at, payload_at, segments_of};
use super::report::{list, CheckReport, FieldReport};
use super::{GatherError, Store};

/// Looks over every choice of `response`: for each field of its payload
/// segments (and its inline `routed_experts`), the coverage, gaps and
/// overlaps, whether dtype and shape agree, whether the segments come in
/// position order (a trainer concatenates them in payload order), and whether
/// each segment's bytes exist in its file (relative names resolved against
/// `root`, and only files inside `root` looked at: see [`check_from`] to
/// allow more directories).
pub fn check(response: &Value, root: &Path) -> CheckReport {
    match Store::confined(root, &[]) {
        Ok(store) => check_from(response, &store),
        Err(err) => CheckReport {
            fields: Vec::new(),
            problems: vec![format!("root {}: {err}", root.display())],
        },
    }
}

/// [`check`], looking at files through `store`: a file outside the store's
/// allowed directories is a problem of its segment, and is not looked at.
pub fn check_from(response: &Value, store: &Store) -> CheckReport {
    let mut report = CheckReport::default();
    let choices = match response.get("choices") {
        Some(Value::Array(choices)) => choices,
        other => {
            report.problems.push(format!(
                "response choices: must be an array, got {}",
                describe(other)
            ));
            return report;
        }
    };
    for (i, choice) in choices.iter().enumerate() {
        if !choice.is_object() {
            report.problems.push(format!(
                "response choices[{i}]: must be an object, got {}",
                describe(Some(choice))
            ));
            continue;
        };
        check_payload(response, i, store, &mut report);
        if let Some((place, value)) = inline_rows(response, i) {
            report.fields.push(check_inline(response, i, place, value));
        }
    }
    report
}

/// [`check_from`], and SGLang's rows (`meta_info`, `sglext`, `sgl_ext`;
/// SPEC section 10) of every item: with `row_shape` (`(layers, top_k)`),
/// one line per item with rows (`choice` is the item: the response, or an
/// element of a batch array), its coverage placed by the item's counts,
/// dtype `int32` and shape `[layers, top_k]`, and as problems what the merge
/// would refuse in those rows (not base64, not whole rows, counts missing or
/// not adding up, rows starting outside `[0, prompt]`); without it, a
/// problem per item with rows: their positions cannot be checked. A response
/// without `choices` (SGLang's `/generate`, or a batch array) is not a
/// problem when it has SGLang rows.
///
/// ```
/// use pd_stitch::gather::{check_with, Store};
/// use serde_json::json;
///
/// // 2 prompt tokens, 3 generated: rows [0, 4) of 1 x 1 (ids 1..=4).
/// let response = json!({"meta_info": {"prompt_tokens": 2, "completion_tokens": 3,
///     "routed_experts": "AQAAAAIAAAADAAAABAAAAA=="}});
/// let report = check_with(&response, &Store::Dir(".".into()), Some((1, 1)));
/// assert!(report.is_ok());
/// assert_eq!(report.fields[0].coverage[0].to_string(), "[0, 4)");
/// // Read as 2 x 1, 4 ids are 2 rows ending at 4: [2, 4).
/// let report = check_with(&response, &Store::Dir(".".into()), Some((2, 1)));
/// assert_eq!(report.fields[0].coverage[0].to_string(), "[2, 4)");
/// // Without the row shape, the positions are unknown.
/// assert!(!check_with(&response, &Store::Dir(".".into()), None).is_ok());
/// ```
pub fn check_with(response: &Value, store: &Store, row_shape: Option<(u64, u64)>) -> CheckReport {
    let items = crate::format::sglang::items_with_rows(response);
    let mut report = if items.is_empty() || response.get("choices").is_some() {
        check_from(response, store)
    } else {
        CheckReport::default()
    };
    for (item, at) in items {
        let Some((layers, top_k)) = row_shape else {
            report.problems.push(format!(
                "{at}: SGLang rows, whose positions need the row shape \
                 (layers, top_k), which is not on the wire: give it to check them"
            ));
            continue;
        };
        let mut out = FieldReport::empty(item, format!("{ROUTED_EXPERTS} (sglang)"));
        out.segments = 1;
        out.dtype = Some(Dtype::Int32);
        out.shape = Some(vec![layers, top_k]);
        match crate::format::sglang::read_rows(response, item, layers, top_k) {
            Ok(Some(rows)) if rows.positions.is_empty() => {}
            Ok(Some(rows)) => out.coverage = vec![rows.positions],
            Ok(None) => continue,
            Err(e) => out.problems.push(e.to_string()),
        }
        report.fields.push(out);
    }
    report
}

fn check_payload(response: &Value, i: usize, store: &Store, report: &mut CheckReport) {
    let (place, items) = match payload_at(response, i) {
        Ok(Some(payload)) => payload,
        Ok(None) => return,
        Err(err) => {
            report.problems.push(err.to_string());
            return;
        }
    };
    let mut fields: Vec<&str> = Vec::new();
    for item in items {
        if let Some(field) = item.get("field").and_then(Value::as_str) {
            if !fields.contains(&field) {
                fields.push(field);
            }
        }
    }
    for field in fields {
        report
            .fields
            .push(check_field(items, i, field, store, place));
    }
}

fn check_field(
    items: &[Value],
    i: usize,
    field: &str,
    store: &Store,
    place: &Place,
) -> FieldReport {
    let mut out = FieldReport::empty(i, field.to_owned());
    let mut segments: Vec<(usize, Segment<String>)> = Vec::new();
    for (j, segment) in segments_of(items, i, field, place) {
        out.segments += 1;
        match segment {
            Ok(segment) => segments.push((j, segment)),
            Err(err) => out.problems.push(err.to_string()),
        }
    }
    if let Some((_, first)) = segments.first() {
        let same_dtype = segments.iter().all(|(_, s)| s.dtype() == first.dtype());
        let same_shape = segments.iter().all(|(_, s)| s.shape() == first.shape());
        out.dtype = same_dtype.then(|| first.dtype());
        out.shape = same_shape.then(|| first.shape().to_vec());
    }
    let (coverage, gaps, overlaps) = coverage(segments.iter().map(|(_, s)| s.positions()));
    // What the trainer reads (docs/SPEC.md, section 5a): a position inside
    // the covered range that nothing covers reads as the fill; an overlap
    // is fine (the later segment wins).
    if !gaps.is_empty() {
        out.problems.push(format!(
            "choices[{i}] {field}: gaps at {} (the trainer reads the fill there)",
            list(&gaps)
        ));
    }
    let csr = FieldTable::trainer()
        .get(field)
        .is_some_and(|spec| spec.storage == Storage::Csr);
    if csr {
        // The labels are not read; the offsets are.
        for (j, segment) in &segments {
            if let Err(problem) = check_csr(segment, store, || item_at(place, i, *j)) {
                out.problems.push(problem);
            }
        }
    } else {
        let layout = segments
            .iter()
            .map(|(_, s)| (s.positions(), s.dtype(), s.shape()));
        if let Err(problem) = check_layout(layout) {
            if !matches!(problem, LayoutProblem::Gap { .. }) {
                let payload_index = |k: usize| segments.get(k).map_or(k, |(j, _)| *j);
                out.problems.push(format!(
                    "choices[{i}] {field}: as the trainer reads it (segments by payload index), {}",
                    problem.map_segments(payload_index)
                ));
            }
        }
        for (j, segment) in &segments {
            if let Err(problem) = check_file(segment, store, || item_at(place, i, *j)) {
                out.problems.push(problem);
            }
        }
    }
    out.coverage = coverage;
    out.gaps = gaps;
    out.overlaps = overlaps;
    out
}

fn check_inline(response: &Value, i: usize, place: &Place, value: &Value) -> FieldReport {
    let mut out = FieldReport::empty(i, format!("{ROUTED_EXPERTS} (inline)"));
    out.segments = 1;
    match inline::read_rows(response, i, place, value) {
        Ok((form, segment, _)) => {
            out.field = format!(
                "{ROUTED_EXPERTS} (inline {})",
                if form == Form::Compact {
                    "compact"
                } else {
                    "npy"
                }
            );
            out.coverage = vec![segment.positions()]
                .into_iter()
                .filter(|r| !r.is_empty())
                .collect();
            out.dtype = Some(segment.dtype());
            out.shape = Some(segment.shape().to_vec());
        }
        Err(err) => out.problems.push(err.to_string()),
    }
    out
}

/// Whether the store may read the segment's file, and it exists and holds
/// the segment's bytes.
fn check_file(
    segment: &Segment<String>,
    store: &Store,
    at: impl Fn() -> Location,
) -> Result<(), String> {
    let (path, len) = store.len(segment.file(), &at).map_err(|err| match err {
        GatherError::Io { path, source } => {
            format!("{}: file {}: {source}", at(), path.display())
        }
        other => other.to_string(),
    })?;
    let needed = segment.byte_range().end;
    if len < needed {
        return Err(format!(
            "{}: file {} is {len} bytes long, but the segment needs bytes up to {needed}",
            at(),
            path.display()
        ));
    }
    Ok(())
}

/// A CSR segment as the trainer reads it: its `rows + 1` offsets in the
/// file, in order, a whole number of 4-byte values apart, and none past the
/// file's end.
fn check_csr(
    segment: &Segment<String>,
    store: &Store,
    at: impl Fn() -> Location,
) -> Result<(), String> {
    if segment.rows() == 0 {
        return Ok(());
    }
    let describe = |err: GatherError| match err {
        GatherError::Io { path, source } => format!("{}: file {}: {source}", at(), path.display()),
        other => other.to_string(),
    };
    let (path, len) = store.len(segment.file(), &at).map_err(describe)?;
    let table = segment.rows().saturating_add(1).saturating_mul(4);
    let end = segment.offset().saturating_add(table);
    if len < end {
        return Err(format!(
            "{}: file {} is {len} bytes long, but the segment's {} CSR offsets need bytes up to {end}",
            at(),
            path.display(),
            segment.rows() + 1
        ));
    }
    let mut bytes = Vec::new();
    store
        .read(segment.file(), segment.offset()..end, &at, &mut bytes)
        .map_err(describe)?;
    let starts: Vec<u64> = bytes
        .chunks_exact(4)
        .map(|b| u64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    for (k, pair) in starts.windows(2).enumerate() {
        let [a, b] = pair else { continue };
        if b < a {
            return Err(format!(
                "{}: CSR offset {} ({b}) is before offset {k} ({a}): out of order",
                at(),
                k + 1
            ));
        }
        if (b - a) % 4 != 0 {
            return Err(format!(
                "{}: CSR row {k} is {} bytes, not a whole number of 4-byte values",
                at(),
                b - a
            ));
        }
    }
    if let Some(&last) = starts.iter().max() {
        if last > len {
            return Err(format!(
                "{}: CSR offset {last} points past the end of file {} ({len} bytes)",
                at(),
                path.display()
            ));
        }
    }
    Ok(())
}
