//! The bytes adapter's writing half: a [`Plan`] becomes a list of [`Edit`]s
//! of the decode's text, which [`apply`] makes in one pass over the buffer.
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
use super::view::Node;
use crate::fields::ROUTED_EXPERTS;
use crate::handle::Fate;
use crate::inline::{rows_text, Merged, Piece, Text, DECODE, PREFILL};
use crate::merge::Plan;
use crate::response::prefill_rows;
use crate::view::{Kind, View};

/// Replace the bytes `range` of the decode by the runs `parts`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Edit<'p> {
    pub(crate) range: Range<usize>,
    /// Text written for this edit, which [`Part::Own`] ranges index.
    own: Vec<u8>,
    parts: Vec<Part<'p>>,
}

/// One run of an edit's new text.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part<'p> {
    Own(Range<usize>),
    /// Bytes of the prefill's text (or a constant).
    Slice(&'p [u8]),
}

impl<'p> Edit<'p> {
    fn new(range: Range<usize>, text: Vec<u8>) -> Edit<'p> {
        Edit {
            range,
            parts: vec![Part::Own(0..text.len())],
            own: text,
        }
    }

    /// The length of what replaces the range.
    fn len(&self) -> usize {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Own(range) => range.len(),
                Part::Slice(bytes) => bytes.len(),
            })
            .sum()
    }

    /// Writes the replacement into `out`, which is [`Edit::len`] long.
    fn write(&self, out: &mut [u8]) {
        let mut at = 0;
        for part in &self.parts {
            let bytes = match part {
                Part::Own(range) => self.own.get(range.clone()).unwrap_or_default(),
                Part::Slice(bytes) => bytes,
            };
            if let Some(dst) = out.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            at += bytes.len();
        }
    }
}

/// The edits that write `plan` into the decode `doc` it was made from.
pub(crate) fn edits<'p>(plan: Plan<Node<'p>>, prefill: Node<'p>, doc: &Doc<'_>) -> Vec<Edit<'p>> {
    let mut edits = Vec::new();
    let prefill_text = prefill_rows(prefill).and_then(rows_text);
    let choices = Node::root(doc)
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
fn payload_edit<'p>(prefix: &[Node<'_>], fates: &[Fate], choice: Node<'_>) -> Edit<'p> {
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
fn clipped(item: Node<'_>, numbers: [(&str, u64); 3], out: &mut Vec<u8>) {
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
/// the prefill's rows text, the [`PREFILL`] source of the merged texts.
fn inline_edits<'p>(
    merged: Merged,
    prefill_text: Option<&Cow<'p, str>>,
    choice: Node<'_>,
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
/// the string `node`.
///
/// When the merged text ends with the decode's own text from some character
/// on (its rows from the cut, copied whole) and that text has no escapes,
/// only what comes before stays to be written: the edit replaces the
/// string's characters up to there, and the rest of the string stays where
/// it is (or moves, with everything after it, when the lengths differ). Runs
/// of the prefill's text are written from the prefill's bytes directly.
fn text_edit<'p>(text: &Text, prefill_text: Option<&Cow<'p, str>>, node: Node<'_>) -> Edit<'p> {
    let decode_text = node.as_str().unwrap_or_default();
    let span = node.span();
    let content = span.start + 1;
    let pieces = text.pieces();
    let in_place = match (&decode_text, pieces.last()) {
        (Cow::Borrowed(d), Some(Piece::Copy(DECODE, tail))) if tail.end == d.len() => {
            Some(tail.start)
        }
        _ => None,
    };
    let (range, pieces, quoted) = match in_place {
        Some(kept_from) => (
            content..content + kept_from,
            &pieces[..pieces.len() - 1],
            false,
        ),
        None => (span, pieces, true),
    };
    let mut edit = Edit {
        range,
        own: Vec::new(),
        parts: Vec::with_capacity(pieces.len() + 2),
    };
    if quoted {
        edit.parts.push(Part::Slice(b"\""));
    }
    for piece in pieces {
        let own = |bytes: &[u8], edit: &mut Edit<'p>| {
            let at = edit.own.len();
            edit.own.extend_from_slice(bytes);
            edit.parts.push(Part::Own(at..edit.own.len()));
        };
        match piece {
            Piece::Own(range) => own(text.own().get(range.clone()).unwrap_or_default(), &mut edit),
            Piece::Copy(PREFILL, range) => match prefill_text {
                Some(Cow::Borrowed(p)) => edit.parts.push(Part::Slice(
                    p.as_bytes().get(range.clone()).unwrap_or_default(),
                )),
                Some(Cow::Owned(p)) => own(
                    p.as_bytes().get(range.clone()).unwrap_or_default(),
                    &mut edit,
                ),
                None => {}
            },
            // The decode's own bytes move when the buffer is edited: copied
            // first.
            Piece::Copy(_, range) => own(
                decode_text
                    .as_bytes()
                    .get(range.clone())
                    .unwrap_or_default(),
                &mut edit,
            ),
        }
    }
    if quoted {
        edit.parts.push(Part::Slice(b"\""));
    }
    edit
}

/// Makes `edits` (sorted, not overlapping, within `buf`) in `buf`, moving
/// each unchanged run of bytes at most once and allocating nothing when the
/// length does not change.
pub(crate) fn apply(buf: &mut Vec<u8>, edits: &[Edit<'_>]) {
    let old_len = buf.len();
    // The unchanged runs: before each edit, and after the last. A run moves
    // by the total change in length of the edits before it.
    let mut runs = Vec::with_capacity(edits.len() + 1);
    let mut from = 0;
    let mut shift: isize = 0;
    for edit in edits {
        runs.push((from..edit.range.start, shift));
        shift += edit.len() as isize - edit.range.len() as isize;
        from = edit.range.end;
    }
    runs.push((from..old_len, shift));
    let new_len = (old_len as isize + shift) as usize;
    if new_len > old_len {
        buf.resize(new_len, 0);
    }
    // A run moving left can only land on bytes of runs before it, and one
    // moving right only on bytes of runs after it; and no run lands on a
    // run's bytes that move the other way (the order of the runs is kept).
    // So: left-movers first to last, then right-movers last to first.
    let moved = |run: &Range<usize>, shift: isize| (run.start as isize + shift) as usize;
    for (run, shift) in runs.iter().filter(|(_, s)| *s < 0) {
        buf.copy_within(run.clone(), moved(run, *shift));
    }
    for (run, shift) in runs.iter().rev().filter(|(_, s)| *s > 0) {
        buf.copy_within(run.clone(), moved(run, *shift));
    }
    // The edits' new text lands between the moved runs.
    let mut shift: isize = 0;
    for edit in edits {
        let at = (edit.range.start as isize + shift) as usize;
        if let Some(out) = buf.get_mut(at..at + edit.len()) {
            edit.write(out);
        }
        shift += edit.len() as isize - edit.range.len() as isize;
    }
    buf.truncate(new_len);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: a new buffer, written front to back.
    fn naive(buf: &[u8], edits: &[Edit<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut from = 0;
        for edit in edits {
            out.extend_from_slice(&buf[from..edit.range.start]);
            let mut text = vec![0; edit.len()];
            edit.write(&mut text);
            out.extend_from_slice(&text);
            from = edit.range.end;
        }
        out.extend_from_slice(&buf[from..]);
        out
    }

    fn buf_and_edits() -> impl Strategy<Value = (Vec<u8>, Vec<Edit<'static>>)> {
        (0usize..64).prop_flat_map(|len| {
            let buf = proptest::collection::vec(any::<u8>(), len);
            let cuts = proptest::collection::vec(0..=len, 0..8);
            let texts = proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..12), any::<bool>()),
                8,
            );
            (buf, cuts, texts).prop_map(|(buf, mut cuts, texts)| {
                cuts.sort_unstable();
                let edits = cuts
                    .chunks(2)
                    .zip(texts)
                    .map(|(pair, (text, quoted))| {
                        let mut edit = Edit::new(pair[0]..*pair.last().unwrap_or(&pair[0]), text);
                        if quoted {
                            edit.parts.insert(0, Part::Slice(b"\""));
                            edit.parts.push(Part::Slice(b"'"));
                        }
                        edit
                    })
                    .collect();
                (buf, edits)
            })
        })
    }

    proptest! {
        #[test]
        fn apply_equals_writing_a_new_buffer((buf, edits) in buf_and_edits()) {
            let expected = naive(&buf, &edits);
            let mut got = buf.clone();
            apply(&mut got, &edits);
            prop_assert_eq!(got, expected);
        }
    }

    #[test]
    fn same_length_edits_reuse_the_buffer() {
        let mut buf = b"{\"a\":\"xyz\",\"b\":1}".to_vec();
        let before = buf.as_ptr();
        let mut edit = Edit::new(5..10, b"abc".to_vec());
        edit.parts.insert(0, Part::Slice(b"\""));
        edit.parts.push(Part::Slice(b"\""));
        apply(&mut buf, &[edit]);
        assert_eq!(buf, b"{\"a\":\"abc\",\"b\":1}");
        assert_eq!(buf.as_ptr(), before);
    }
}
