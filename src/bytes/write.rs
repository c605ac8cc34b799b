//! The bytes adapter's writing half: a [`Plan`] becomes a list of [`Edit`]s
//! of the decode's text, which [`apply`](crate::splice::apply) makes in one
//! pass over the buffer.
//!
//! Only the stitched values change: a choice's `payload` array is written
//! anew (the prefill's segments as their text, then the decode's own items as
//! their text, a clipped one with only its `pos`, `rows` and `offset` numbers
//! rewritten), and a choice's `routed_experts` gets its merged rows (for a
//! compact object, only its `data`, `shape`, `start` and `dtype` values).
//! Every other byte of the decode stays as it was.

use std::borrow::Cow;
use std::ops::Range;

use super::scan::Doc;
use super::view::ScannedValue;
use crate::codec::text::Text;
use crate::fields::ROUTED_EXPERTS;
use crate::format::by_handle::Fate;
use crate::format::inline::{rows_text, Merged};
use crate::merge::Plan;
use crate::response::prefill_rows;
use crate::splice::Edit;
use crate::view::{Kind, View};

/// The edits that write `plan` into the decode `doc` it was made from.
pub(crate) fn edits<'p>(
    plan: Plan<ScannedValue<'p>>,
    prefill: ScannedValue<'p>,
    doc: &Doc<'_>,
) -> Vec<Edit<'p>> {
    let mut edits = Vec::new();
    for merged in &plan.sglang {
        let prefill_text = merged.slot.rows(prefill).and_then(View::as_bytes);
        if let Some(node) = merged.slot.rows(ScannedValue::root(doc)) {
            edits.push(text_edit(&merged.text, prefill_text.as_ref(), node));
        }
    }
    let prefill_text = prefill_rows(prefill).and_then(rows_text);
    let choices = ScannedValue::root(doc)
        .get("choices")
        .and_then(View::elements)
        .into_iter()
        .flatten();
    for (choice, planned) in choices.zip(plan.choices) {
        if let Some(merged) = planned.inline {
            inline_edits(merged, prefill_text.as_ref(), choice, &mut edits);
        }
        if let (Some(prefill), Some(fates)) = (&plan.by_handle, planned.by_handle) {
            edits.push(payload_edit(&prefill.prefix, &fates.fates, choice));
        }
    }
    edits.sort_by_key(|edit| (edit.range.start, edit.range.end));
    edits
}

/// The edit that gives `choice` its merged payload.
fn payload_edit<'p>(
    prefix: &[ScannedValue<'_>],
    fates: &[Fate],
    choice: ScannedValue<'_>,
) -> Edit<'p> {
    let items = choice.get("payload").filter(|p| p.kind() == Kind::Array);
    let mut text = Vec::new();
    text.push(b'[');
    for segment in prefix {
        separate(&mut text);
        text.extend_from_slice(segment.text());
    }
    for (item, fate) in items
        .and_then(View::elements)
        .into_iter()
        .flatten()
        .zip(fates)
    {
        match *fate {
            Fate::Keep => {
                separate(&mut text);
                text.extend_from_slice(item.text());
            }
            Fate::Drop => {}
            Fate::Clip { pos, rows, offset } => {
                separate(&mut text);
                clipped(
                    item,
                    [("pos", pos), ("rows", rows), ("offset", offset)],
                    &mut text,
                );
            }
        }
    }
    text.push(b']');
    match choice.get("payload") {
        // An array or null: replaced.
        Some(payload) => Edit::new(payload.span(), text),
        // Missing: added as the choice's last member.
        None => {
            let mut member = Vec::with_capacity(text.len() + 12);
            if choice.entries().is_some_and(|mut e| e.next().is_some()) {
                member.push(b',');
            }
            member.extend_from_slice(b"\"payload\":");
            member.extend_from_slice(&text);
            let end = choice.span().end.saturating_sub(1);
            Edit::new(end..end, member)
        }
    }
}

/// A comma before every element but the first of the array being written.
fn separate(text: &mut Vec<u8>) {
    if text.last() != Some(&b'[') {
        text.push(b',');
    }
}

/// Appends the text of the segment `item` with the values of `numbers`
/// rewritten (their last occurrence, the one a JSON reader keeps).
fn clipped(item: ScannedValue<'_>, numbers: [(&str, u64); 3], out: &mut Vec<u8>) {
    let base = item.span().start;
    let mut spans: Vec<(Range<usize>, u64)> = numbers
        .iter()
        .filter_map(|&(key, value)| Some((item.get(key)?.span(), value)))
        .collect();
    spans.sort_by_key(|(span, _)| span.start);
    let text = item.text();
    let mut at = 0;
    for (span, value) in spans {
        let (start, end) = (span.start - base, span.end - base);
        out.extend_from_slice(text.get(at..start).unwrap_or_default());
        out.extend_from_slice(value.to_string().as_bytes());
        at = end;
    }
    out.extend_from_slice(text.get(at..).unwrap_or_default());
}

/// The edits that give `choice` its merged inline rows. `prefill_text` is
/// the prefill's rows text, the `PREFILL` source of the merged texts.
fn inline_edits<'p>(
    merged: Merged,
    prefill_text: Option<&Cow<'p, [u8]>>,
    choice: ScannedValue<'_>,
    edits: &mut Vec<Edit<'p>>,
) {
    let Some(rows) = choice.get(ROUTED_EXPERTS) else {
        return;
    };
    match merged {
        Merged::Npy(text) => edits.push(text_edit(&text, prefill_text, rows)),
        Merged::Compact {
            data,
            shape,
            start,
            dtype,
        } => {
            if let Some(node) = rows.get("data") {
                edits.push(text_edit(&data, prefill_text, node));
            }
            if let Some(node) = rows.get("shape") {
                let [seq, layers, topk] = shape;
                let text = format!("[{seq},{layers},{topk}]");
                edits.push(Edit::new(node.span(), text.into_bytes()));
            }
            if let Some(node) = rows.get("start") {
                edits.push(Edit::new(node.span(), start.to_string().into_bytes()));
            }
            let name = format!("\"{}\"", dtype.name()).into_bytes();
            match rows.get("dtype") {
                Some(node) => edits.push(Edit::new(node.span(), name)),
                None => {
                    // `data` is there, so the object has members.
                    let end = rows.span().end.saturating_sub(1);
                    let mut member = b",\"dtype\":".to_vec();
                    member.extend_from_slice(&name);
                    edits.push(Edit::new(end..end, member));
                }
            }
        }
    }
}

/// The edit that writes the merged rows `text` over the decode's rows text,
/// the string `node`: in place where the text allows (see [`Text::edit`]).
fn text_edit<'p>(
    text: &Text,
    prefill_text: Option<&Cow<'p, [u8]>>,
    node: ScannedValue<'_>,
) -> Edit<'p> {
    let decode_text = node.as_bytes().unwrap_or_default();
    let span = node.span();
    // The buffer holds the text itself when it has no escapes.
    let verbatim_at = matches!(decode_text, Cow::Borrowed(_)).then_some(span.start + 1);
    text.edit(prefill_text, &decode_text, verbatim_at, span, true)
}
