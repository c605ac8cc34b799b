//! The bytes adapter's writing half: a plan's [`Patch`]es become a list of
//! [`Edit`]s of the decode's text, which [`apply`](crate::codec::splice::apply)
//! makes in one pass over the buffer. It knows no kind of rows.
//!
//! Only the patched values change: a rows string gets its merged text (in
//! place where the text allows), a set member only its value, and a rebuilt
//! array is written anew from the prefill's values as their text and the
//! decode's own elements as their text, a rewritten one with only its
//! numbers changed. Every other byte of the decode stays as it was.

use std::ops::Range;

use super::scan::Doc;
use super::view::ScannedValue;
use crate::codec::splice::Edit;
use crate::response::patch::{Hop, Item, Patch, Scalar};
use crate::response::view::{Kind, View};

/// The edits that write `patches` into the decode `doc` they were planned
/// from, in text order.
pub(crate) fn edits<'p>(patches: Vec<Patch<ScannedValue<'p>>>, doc: &Doc<'_>) -> Vec<Edit<'p>> {
    let root = ScannedValue::root(doc);
    let mut edits = Vec::with_capacity(patches.len());
    for patch in patches {
        match patch {
            Patch::Text { at, text, prefill } => {
                if let Some(node) = at.find(root) {
                    edits.push(text_edit(&text, prefill, node));
                }
            }
            Patch::Members { at, members } => {
                if let Some(object) = at.find(root) {
                    for (key, value) in members {
                        edits.push(member_edit(object, key, &render(&value)));
                    }
                }
            }
            Patch::Array {
                at,
                prefix,
                items,
                numbers,
            } => {
                let Some((holder, Hop::Key(key))) = at.split_last() else {
                    continue;
                };
                if let Some(object) = holder.find(root) {
                    let text = array_text(object.get(key), &prefix, &items, numbers);
                    edits.push(member_edit(object, key, &text));
                }
            }
        }
    }
    edits.sort_by_key(|edit| (edit.range.start, edit.range.end));
    edits
}

/// The JSON text of `value`.
fn render(value: &Scalar) -> Vec<u8> {
    match value {
        Scalar::Int(n) => n.to_string().into_bytes(),
        Scalar::Ints([a, b, c]) => format!("[{a},{b},{c}]").into_bytes(),
        Scalar::Name(name) => format!("\"{name}\"").into_bytes(),
    }
}

/// The edit that sets `object[key]` to the JSON `text`: over its value when
/// it has one, else as its new last member.
fn member_edit<'p>(object: ScannedValue<'_>, key: &str, text: &[u8]) -> Edit<'p> {
    if let Some(value) = object.get(key) {
        return Edit::new(value.span(), text.to_vec());
    }
    let mut member = Vec::with_capacity(text.len() + key.len() + 4);
    if object.entries().is_some_and(|mut e| e.next().is_some()) {
        member.push(b',');
    }
    member.push(b'"');
    member.extend_from_slice(key.as_bytes());
    member.extend_from_slice(b"\":");
    member.extend_from_slice(text);
    let end = object.span().end.saturating_sub(1);
    Edit::new(end..end, member)
}

/// The text of a rebuilt array: `prefix`, then the elements of `old` (when
/// it is an array) as `items` says, the members `numbers` names set where
/// it says so.
fn array_text(
    old: Option<ScannedValue<'_>>,
    prefix: &[ScannedValue<'_>],
    items: &[Item],
    numbers: [&str; 3],
) -> Vec<u8> {
    let mut text = Vec::new();
    text.push(b'[');
    for value in prefix {
        separate(&mut text);
        text.extend_from_slice(value.text());
    }
    let elements = old
        .filter(|old| old.kind() == Kind::Array)
        .and_then(View::elements)
        .into_iter()
        .flatten();
    for (element, item) in elements.zip(items) {
        match *item {
            Item::Keep => {
                separate(&mut text);
                text.extend_from_slice(element.text());
            }
            Item::Drop => {}
            Item::Set(values) => {
                separate(&mut text);
                with_numbers(element, numbers, values, &mut text);
            }
        }
    }
    text.push(b']');
    text
}

/// A comma before every element but the first of the array being written.
fn separate(text: &mut Vec<u8>) {
    if text.last() != Some(&b'[') {
        text.push(b',');
    }
}

/// Appends the text of the object `element` with its members `keys` set to
/// `values` (their last occurrence, the one a JSON reader keeps).
fn with_numbers(element: ScannedValue<'_>, keys: [&str; 3], values: [u64; 3], out: &mut Vec<u8>) {
    let base = element.span().start;
    let mut spans: Vec<(Range<usize>, u64)> = keys
        .into_iter()
        .zip(values)
        .filter_map(|(key, value)| Some((element.get(key)?.span(), value)))
        .collect();
    spans.sort_by_key(|(span, _)| span.start);
    let text = element.text();
    let mut at = 0;
    for (span, value) in spans {
        let (start, end) = (span.start - base, span.end - base);
        out.extend_from_slice(text.get(at..start).unwrap_or_default());
        out.extend_from_slice(value.to_string().as_bytes());
        at = end;
    }
    out.extend_from_slice(text.get(at..).unwrap_or_default());
}

/// The edit that writes the merged rows `text` over the decode's rows text,
/// the string `node`: in place where the text allows (see [`Text::edit`]).
/// Its runs of the prefill's rows text read the string `prefill`.
fn text_edit<'p>(
    text: &crate::codec::text::Text,
    prefill: Option<ScannedValue<'p>>,
    node: ScannedValue<'_>,
) -> Edit<'p> {
    let prefill_text = prefill.and_then(View::as_bytes);
    let decode_text = node.as_bytes().unwrap_or_default();
    let span = node.span();
    // The buffer holds the text itself when it has no escapes.
    let verbatim_at =
        matches!(decode_text, std::borrow::Cow::Borrowed(_)).then_some(span.start + 1);
    text.edit(prefill_text.as_ref(), &decode_text, verbatim_at, span, true)
}
