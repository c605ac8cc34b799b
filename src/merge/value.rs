//! The `serde_json::Value` adapter's writing half: applies a plan's
//! [`Patch`]es to the decode response in place, knowing no kind of rows.

use serde_json::{Map, Value};

use super::Spec;
use crate::codec::splice;
use crate::codec::text::Text;
use crate::error::Error;
use crate::response::patch::{Hop, Item, Patch, Path, Scalar};
use crate::response::view::View;

/// Stitches the enabled kinds of rows of `prefill` into `decode`: plans, then
/// writes. On error `decode` is untouched.
pub(crate) fn merge<S: AsRef<str>>(
    spec: Spec<'_, S>,
    prefill: &Value,
    decode: &mut Value,
) -> Result<bool, Error> {
    let Some(patches) = super::plan(spec, prefill, &*decode)? else {
        return Ok(false);
    };
    apply(patches, decode);
    Ok(true)
}

/// Writes `patches` into `decode`, which they were planned from. Cannot
/// fail: every path leads to a value the plan read.
fn apply(patches: Vec<Patch<&Value>>, decode: &mut Value) {
    for patch in patches {
        match patch {
            Patch::Text { at, text, prefill } => {
                if let Some(Value::String(string)) = find_mut(decode, &at) {
                    write_text(&text, prefill, string);
                }
            }
            Patch::Members { at, members } => {
                if let Some(Value::Object(object)) = find_mut(decode, &at) {
                    for (key, value) in members {
                        set(object, key, scalar(value));
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
                if let Some(Value::Object(object)) = find_mut(decode, &holder) {
                    write_array(object, key, &prefix, &items, numbers);
                }
            }
        }
    }
}

/// The value at `path` in `value`.
fn find_mut<'v>(value: &'v mut Value, path: &Path) -> Option<&'v mut Value> {
    path.hops().iter().try_fold(value, |value, hop| match *hop {
        Hop::Key(key) => value.get_mut(key),
        Hop::Index(i) => value.get_mut(i),
    })
}

/// Sets `object[key]` to `value`: in its slot when it has one (no search
/// to insert, and the key keeps its place under `preserve_order`), else as
/// a new last member.
fn set(object: &mut Map<String, Value>, key: &str, value: Value) {
    match object.get_mut(key) {
        Some(slot) => *slot = value,
        None => {
            object.insert(key.to_owned(), value);
        }
    }
}

fn scalar(value: Scalar) -> Value {
    match value {
        Scalar::Int(n) => Value::from(n),
        Scalar::Ints(ns) => Value::from(ns.to_vec()),
        Scalar::Name(name) => Value::from(name),
    }
}

/// Gives `object[key]` its rebuilt array: `prefix`, then the old elements as
/// `items` says, the members `numbers` names set where it says so.
fn write_array(
    object: &mut Map<String, Value>,
    key: &str,
    prefix: &[&Value],
    items: &[Item],
    numbers: [&str; 3],
) {
    // Take the old elements out in place (not `remove`, which may reorder
    // the keys of a map under serde_json's `preserve_order`).
    let old = match object.get_mut(key) {
        Some(Value::Array(old)) => std::mem::take(old),
        _ => Vec::new(),
    };
    let mut merged = Vec::with_capacity(prefix.len() + old.len());
    merged.extend(prefix.iter().map(|&value| value.clone()));
    for (mut element, item) in old.into_iter().zip(items) {
        match *item {
            Item::Keep => merged.push(element),
            Item::Drop => {}
            Item::Set(values) => {
                if let Value::Object(members) = &mut element {
                    for (key, n) in numbers.into_iter().zip(values) {
                        set(members, key, Value::from(n));
                    }
                }
                merged.push(element);
            }
        }
    }
    set(object, key, Value::Array(merged));
}

/// Writes the merged rows `text` over the decode's own rows text `string`,
/// in its own buffer: where the lengths allow, only the characters before
/// the decode's rows from the cut are written (see [`Text::edit`]).
fn write_text(text: &Text, prefill: Option<&Value>, string: &mut String) {
    let prefill_text = prefill.and_then(View::as_bytes);
    let mut buf = std::mem::take(string).into_bytes();
    let whole = 0..buf.len();
    let edit = text.edit(prefill_text.as_ref(), &buf, Some(0), whole, false);
    splice::apply(&mut buf, &[edit]);
    // Safe Rust must see the bytes are UTF-8 again (one pass, at the speed
    // of memory): they are the string's own and base64 characters.
    *string = String::from_utf8(buf)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned());
}
