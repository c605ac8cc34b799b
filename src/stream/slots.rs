//! Where an event's rows sit, by its keys: read from the table of places
//! ([`crate::format`]), so that a place the merge stitches is never passed
//! through unstitched.

use crate::bytes::{Doc, ScannedValue};
use crate::format::by_handle::SegmentKeys;
use crate::format::every_place;
use crate::format::places::{Holder, Holds, RowsKind};
use crate::response::view::{Kind, View};

/// Where an event's rows sit, to find a second rows event for the same.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum RowsSlot {
    /// `choices[i]` (its rows, or an object of it that holds rows), by the
    /// choice's `index` (its position when it has no integer `index`).
    Choice(u64),
    /// An object of the response that holds rows (SGLang's `meta_info`,
    /// `sglext`), by the output's `index` (its position in an array, else
    /// 0, when it has none).
    Member(&'static str, u64),
}

impl std::fmt::Display for RowsSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RowsSlot::Choice(i) => write!(f, "choice {i}"),
            RowsSlot::Member(member, i) => write!(f, "{member} of output {i}"),
        }
    }
}

/// The slots of the event data `doc` that hold rows: of the data, or of
/// each of its elements when it is an array (an SGLang batch).
pub(super) fn rows_slots(fields: &[&str], doc: &Doc<'_>) -> Vec<RowsSlot> {
    let root = ScannedValue::root(doc);
    let mut slots = Vec::new();
    match root.elements() {
        Some(items) if root.kind() == Kind::Array => {
            for (k, item) in (0..).zip(items) {
                output_slots(fields, item, k, &mut slots);
            }
        }
        _ => output_slots(fields, root, 0, &mut slots),
    }
    slots
}

/// The slots of one output (the response, or the `position`-th of an
/// array) that hold rows.
fn output_slots(
    fields: &[&str],
    output: ScannedValue<'_>,
    position: u64,
    slots: &mut Vec<RowsSlot>,
) {
    let mut push = |slot| {
        if !slots.contains(&slot) {
            slots.push(slot);
        }
    };
    if let Some(choices) = output.get("choices").and_then(View::elements) {
        for (i, choice) in choices.enumerate() {
            if holds_rows(fields, choice, Holder::Choice)
                || every_place().any(|p| match p.holder {
                    Holder::ChoiceMember(member) => {
                        holds_rows(fields, object(choice.get(member)), p.holder)
                    }
                    _ => false,
                })
            {
                push(RowsSlot::Choice(choice_index(choice, i)));
            }
        }
    }
    for place in every_place() {
        if let Holder::Member(member) = place.holder {
            if holds_rows(fields, object(output.get(member)), place.holder) {
                let index = output.get("index").and_then(View::as_u64);
                push(RowsSlot::Member(member, index.unwrap_or(position)));
            }
        }
    }
}

/// `value` when it is an object.
fn object(value: Option<ScannedValue<'_>>) -> Option<ScannedValue<'_>> {
    value.filter(|v| v.kind() == Kind::Object)
}

/// Whether `object`, which is `holder`, holds rows at one of the places of
/// `holder`: a non-null value, or a payload with a segment of one of the
/// stitched `fields`.
fn holds_rows<'a>(
    fields: &[&str],
    object: impl Into<Option<ScannedValue<'a>>>,
    holder: Holder,
) -> bool {
    let Some(object) = object.into() else {
        return false;
    };
    every_place()
        .filter(|p| p.holder == holder)
        .any(|p| match p.holds {
            Holds::Count => false,
            Holds::Rows(RowsKind::ByHandle) => object
                .get(p.key)
                .and_then(View::elements)
                .is_some_and(|mut items| {
                    items.any(|item| SegmentKeys::stitched(fields, item).is_some())
                }),
            Holds::Rows(_) => object.get(p.key).is_some_and(|rows| !rows.is_null()),
        })
}

/// A choice's `index` when it is an integer, else its position.
pub(super) fn choice_index<'a, V: View<'a>>(choice: V, position: usize) -> u64 {
    choice
        .get("index")
        .and_then(View::as_u64)
        .unwrap_or(position as u64)
}
