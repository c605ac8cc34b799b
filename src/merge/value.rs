//! The `serde_json::Value` adapter's writing half: applies a [`Plan`] to the
//! decode response in place.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::{Plan, Spec};
use crate::codec::text::Text;
use crate::error::Error;
use crate::fields::ROUTED_EXPERTS;
use crate::format::by_handle::Fate;
use crate::format::inline::{rows_text, Merged};
use crate::format::sglang::{Api, Slot};
use crate::response::prefill_rows;
use crate::splice;
use crate::view::View;

/// Stitches the enabled kinds of rows of `prefill` into `decode`: plans, then
/// writes. On error `decode` is untouched.
pub(crate) fn merge<S: AsRef<str>>(
    spec: Spec<'_, S>,
    prefill: &Value,
    decode: &mut Value,
) -> Result<bool, Error> {
    let Some(plan) = super::plan(spec, prefill, &*decode)? else {
        return Ok(false);
    };
    apply(plan, prefill, decode);
    Ok(true)
}

/// Writes `plan` into `decode`, which it was made from. Cannot fail.
fn apply(plan: Plan<&Value>, prefill: &Value, decode: &mut Value) {
    for merged in &plan.sglang {
        let prefill_text = merged.slot.rows(prefill).and_then(View::as_bytes);
        if let Some(Value::String(text)) = sglang_rows_mut(merged.slot, decode) {
            write_text(&merged.text, prefill_text.as_ref(), text);
        }
    }
    let prefill_text = prefill_rows(prefill).and_then(rows_text);
    let Some(Value::Array(choices)) = decode.get_mut("choices") else {
        return;
    };
    for (choice, planned) in choices.iter_mut().zip(plan.choices) {
        let Value::Object(choice) = choice else {
            continue;
        };
        if let Some(merged) = planned.inline {
            write_inline(merged, prefill_text.as_ref(), choice);
        }
        if let (Some(prefill), Some(fates)) = (&plan.by_handle, planned.by_handle) {
            write_payload(&prefill.prefix, &fates.fates, choice);
        }
    }
}

/// Gives `choice` its merged payload: the prefill's segments, then its own
/// items as `fates` decided.
fn write_payload(prefix: &[&Value], fates: &[Fate], choice: &mut Map<String, Value>) {
    // Take the old items out in place (not `remove`, which may reorder the
    // keys of a map under serde_json's `preserve_order`).
    let items = match choice.get_mut("payload") {
        Some(Value::Array(items)) => std::mem::take(items),
        _ => Vec::new(),
    };
    let mut merged = Vec::with_capacity(prefix.len() + items.len());
    merged.extend(prefix.iter().map(|&segment| segment.clone()));
    for (mut item, fate) in items.into_iter().zip(fates) {
        match *fate {
            Fate::Keep => merged.push(item),
            Fate::Drop => {}
            Fate::Clip { pos, rows, offset } => {
                if let Value::Object(segment) = &mut item {
                    // The keys exist (the plan read them): overwrite in place.
                    for (key, value) in [("pos", pos), ("rows", rows), ("offset", offset)] {
                        match segment.get_mut(key) {
                            Some(slot) => *slot = Value::from(value),
                            None => {
                                segment.insert(key.to_owned(), Value::from(value));
                            }
                        }
                    }
                }
                merged.push(item);
            }
        }
    }
    // Into the old slot when there is one (no new key, no map search to
    // insert).
    match choice.get_mut("payload") {
        Some(slot) => *slot = Value::Array(merged),
        None => {
            choice.insert("payload".to_owned(), Value::Array(merged));
        }
    }
}

/// Writes the merged inline rows into `choice`: the plan checked that
/// `choice.routed_experts` is of the right form.
fn write_inline(
    merged: Merged,
    prefill_text: Option<&Cow<'_, [u8]>>,
    choice: &mut Map<String, Value>,
) {
    let Some(value) = choice.get_mut(ROUTED_EXPERTS) else {
        return;
    };
    match (merged, value) {
        (
            Merged::Compact {
                data,
                shape,
                start,
                dtype,
            },
            Value::Object(object),
        ) => {
            if let Some(Value::String(text)) = object.get_mut("data") {
                write_text(&data, prefill_text, text);
            }
            object.insert("shape".to_owned(), Value::from(shape.to_vec()));
            object.insert("start".to_owned(), Value::from(start));
            object.insert("dtype".to_owned(), Value::from(dtype.name()));
        }
        (Merged::Npy(npy), Value::String(text)) => write_text(&npy, prefill_text, text),
        _ => {}
    }
}

/// Writes the merged rows `text` over the decode's own rows text `string`,
/// in its own buffer: where the lengths allow, only the characters before
/// the decode's rows from the cut are written (see [`Text::edit`]).
fn write_text(text: &Text, prefill_text: Option<&Cow<'_, [u8]>>, string: &mut String) {
    let mut buf = std::mem::take(string).into_bytes();
    let whole = 0..buf.len();
    let edit = text.edit(prefill_text, &buf, Some(0), whole, false);
    splice::apply(&mut buf, &[edit]);
    // Safe Rust must see the bytes are UTF-8 again (one pass, at the speed
    // of memory): they are the string's own and base64 characters.
    *string = String::from_utf8(buf)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
}

/// The decode's rows value of an SGLang `slot`, to write into.
fn sglang_rows_mut(slot: Slot, decode: &mut Value) -> Option<&mut Value> {
    let item = match slot.item {
        None => decode,
        Some(i) => decode.get_mut(i)?,
    };
    match slot.api {
        Api::Generate => item.get_mut("meta_info")?.get_mut(ROUTED_EXPERTS),
        Api::ResponseExt => item.get_mut("sglext")?.get_mut(ROUTED_EXPERTS),
        Api::ChoiceExt => item
            .get_mut("choices")?
            .get_mut(0)?
            .get_mut("sgl_ext")?
            .get_mut(ROUTED_EXPERTS),
    }
}
