//! The merge engine: one validating pass that plans, then one pass that
//! writes.
//!
//! Both kinds of rows, [inline](crate::inline) and [by handle](crate::handle),
//! are stitched by the same two phases, so that an error from either leaves
//! the decode response exactly as it was:
//!
//! 1. **Plan** (reads only): read and validate the prefill's rows of each
//!    enabled kind; if a kind is absent there, make sure the decode has none of
//!    it either; then walk every decode choice once and let each kind validate
//!    it and compute what it will write. Any error returns here.
//! 2. **Apply** (cannot fail): write each choice's planned values.

use serde_json::{Map, Value};

use crate::error::{describe, Error, Location, Side};
use crate::json::choice_at;
use crate::{handle, inline};

/// Which kinds of rows a merge stitches.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Kinds {
    pub(crate) inline: bool,
    pub(crate) by_handle: bool,
}

/// Stitches the enabled kinds of rows of `prefill` into `decode`.
pub(crate) fn merge<S: AsRef<str>>(
    fields: &[S],
    prefill: &Value,
    decode: &mut Value,
    kinds: Kinds,
    strict: bool,
) -> Result<bool, Error> {
    let inline = if kinds.inline {
        inline::Prefill::read(prefill)?
    } else {
        None
    };
    let by_handle = if kinds.by_handle {
        handle::Prefill::read(fields, prefill)?
    } else {
        None
    };
    if kinds.inline && inline.is_none() {
        if let Some(err) = inline::first_orphan(decode) {
            return Err(err);
        }
    }
    if kinds.by_handle && by_handle.is_none() {
        if let Some(err) = handle::first_orphan(fields, decode) {
            return Err(err);
        }
    }
    if inline.is_none() && by_handle.is_none() {
        return Ok(false);
    }

    // Strict mode: the layout rule on each choice's planned merged segments,
    // checked while planning it (see `crate::strict`).
    let mut strict_layout = match (&by_handle, strict) {
        (Some(prefill), true) => Some(prefill.planned_prefix(fields)?),
        _ => None,
    };
    let mut plans = Vec::new();
    for (i, choice) in choices_mut(decode)?.iter_mut().enumerate() {
        let choice = match choice {
            Value::Object(choice) => choice,
            other => {
                return Err(Error::Structure {
                    at: choice_at(Side::Decode, i),
                    expected: "an object",
                    got: describe(Some(other)),
                })
            }
        };
        let inline_plan = inline.as_ref().map(|p| p.plan(choice, i)).transpose()?;
        let handle_plan = by_handle
            .as_ref()
            .map(|p| p.plan(fields, choice, i, strict_layout.as_mut()))
            .transpose()?;
        plans.push(ChoicePlan {
            choice,
            inline: inline_plan,
            by_handle: handle_plan,
        });
    }

    for plan in plans {
        if let Some(merged) = plan.inline {
            merged.apply(plan.choice);
        }
        if let (Some(prefill), Some(fates)) = (&by_handle, plan.by_handle) {
            prefill.apply(fates, plan.choice);
        }
    }
    Ok(true)
}

/// One decode choice and what each kind will write into it.
struct ChoicePlan<'d> {
    choice: &'d mut Map<String, Value>,
    inline: Option<inline::Merged>,
    by_handle: Option<handle::Plan>,
}

/// `decode.choices`, which must be an array when there is something to merge.
fn choices_mut(decode: &mut Value) -> Result<&mut Vec<Value>, Error> {
    let root = match decode {
        Value::Object(root) => root,
        other => {
            return Err(Error::Structure {
                at: Location::root(Side::Decode),
                expected: "an object",
                got: describe(Some(other)),
            })
        }
    };
    match root.get_mut("choices") {
        Some(Value::Array(choices)) => Ok(choices),
        other => Err(Error::Structure {
            at: Location::root(Side::Decode).key("choices"),
            expected: "an array",
            got: describe(other.as_deref()),
        }),
    }
}
