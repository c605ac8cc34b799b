//! Where an event's rows sit, by its keys: a choice's, an SGLang output's
//! `meta_info`, or SGLang's response-level `sglext`.

use crate::bytes::{Doc, ScannedValue};
use crate::fields::ROUTED_EXPERTS;
use crate::handle::Keys;
use crate::view::View;

/// Where a choice's rows sit, to find a second rows event for the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Slot {
    /// `choices[i]` (`routed_experts`, `payload`, `sgl_ext`), by the choice's
    /// `index` (its position when it has no integer `index`).
    Choice(u64),
    /// SGLang's `meta_info` of `/generate`, by the output's `index` (0 when
    /// it has none).
    Generate(u64),
    /// SGLang's response-level `sglext`, one per stream.
    SglExt,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Slot::Choice(i) => write!(f, "choice {i}"),
            Slot::Generate(i) => write!(f, "SGLang output {i} (meta_info)"),
            Slot::SglExt => f.write_str("SGLang sglext"),
        }
    }
}

/// The rows slots of an event's data (scanned as `doc`): empty
/// when it carries no rows.
pub(super) fn rows_slots(fields: &[&str], doc: &Doc<'_>) -> Vec<Slot> {
    let root = ScannedValue::root(doc);
    let mut slots = Vec::new();
    // vLLM's inline rows and rows by handle, read from the scanner's index.
    if let Some(choices) = root.get("choices").and_then(View::elements) {
        for (i, choice) in choices.enumerate() {
            let inline = choice
                .get(ROUTED_EXPERTS)
                .is_some_and(|rows| !rows.is_null());
            let by_handle = choice
                .get("payload")
                .and_then(View::elements)
                .is_some_and(|mut items| items.any(|item| Keys::stitched(fields, item).is_some()));
            if inline || by_handle {
                slots.push(Slot::Choice(choice_index(choice, i)));
            }
        }
    }
    sglang_slots(root, &mut slots);
    slots
}

/// A choice's `index` when it is an integer, else its position.
pub(super) fn choice_index<'a, V: View<'a>>(choice: V, position: usize) -> u64 {
    choice
        .get("index")
        .and_then(View::as_u64)
        .unwrap_or(position as u64)
}

/// Whether `object` is an object with a non-null `routed_experts`. The
/// scanner records the members of SGLang's slots (`meta_info`, `sglext`, a
/// choice's `sgl_ext`), of a batch's items too, so this reads its index.
pub(super) fn has_rows_member(object: Option<ScannedValue<'_>>) -> bool {
    object
        .filter(|o| o.kind() == crate::view::Kind::Object)
        .and_then(|o| o.get(ROUTED_EXPERTS))
        .is_some_and(|rows| !rows.is_null())
}

/// SGLang's rows slots of the data `root`: `meta_info` (by the output's
/// `index`), `sglext`, and `choices[0].sgl_ext`; of each element, when the
/// data is an array.
pub(super) fn sglang_slots(root: ScannedValue<'_>, slots: &mut Vec<Slot>) {
    match root.elements() {
        Some(items) if root.kind() == crate::view::Kind::Array => {
            for (k, item) in (0..).zip(items) {
                sglang_item_slots(item, k, slots);
            }
        }
        _ => sglang_item_slots(root, 0, slots),
    }
}

/// The slots of one SGLang output, the `position`-th of its batch.
pub(super) fn sglang_item_slots(item: ScannedValue<'_>, position: u64, slots: &mut Vec<Slot>) {
    if has_rows_member(item.get("meta_info")) {
        let index = item.get("index").and_then(View::as_u64).unwrap_or(position);
        slots.push(Slot::Generate(index));
    }
    if has_rows_member(item.get("sglext")) {
        slots.push(Slot::SglExt);
    }
    if let Some(first) = item.get("choices").and_then(|c| c.index(0)) {
        if has_rows_member(first.get("sgl_ext")) {
            let slot = Slot::Choice(choice_index(first, 0));
            if !slots.contains(&slot) {
                slots.push(slot);
            }
        }
    }
}
