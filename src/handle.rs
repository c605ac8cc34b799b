//! The by-handle merge on JSON: `choices[i].payload` segment lists.
//!
//! This module maps JSON to the [algebra](crate::algebra) and back; the merge
//! rule itself is [`Cuts::clip`]. It works in two phases so that an error can
//! never leave the decode response half-merged:
//!
//! 1. **Plan** (reads only): find the prefill's stitched segments, validate
//!    them and compute the cuts; walk every decode choice, validate each
//!    stitched segment and decide its fate (keep, drop, clip). Any error
//!    returns here, before anything is written.
//! 2. **Apply** (cannot fail): rewrite each choice's `payload` from the plan,
//!    moving the decode's own segment objects rather than copying them.

use serde_json::{Map, Value};

use crate::algebra::{cut, Cuts, Dtype, Segment};
use crate::error::{describe, Error, Location, Side};

/// The by-handle merge for the stitched fields `fields`.
pub(crate) fn merge<S: AsRef<str>>(
    fields: &[S],
    prefill: &Value,
    decode: &mut Value,
) -> Result<bool, Error> {
    let mut prefix = Vec::new();
    let mut segments = Vec::new();
    for (j, item) in prefill_payload(prefill).iter().enumerate() {
        if let Some((field, object)) = stitched(fields, item) {
            segments.push(parse_segment(field, object, &|| {
                item_at(Side::Prefill, 0, j)
            })?);
            prefix.push(item);
        }
    }
    if segments.is_empty() {
        return match first_orphan(fields, decode) {
            Some(err) => Err(err),
            None => Ok(false),
        };
    }
    let cuts = cut(&segments);
    let plan = plan(fields, &cuts, decode)?;
    apply(plan, &prefix);
    Ok(true)
}

/// Whether `prefill.choices[0]` carries rows to stitch: a non-null inline
/// `routed_experts`, or a payload segment of one of `fields`.
pub(crate) fn prefill_has_rows<S: AsRef<str>>(fields: &[S], prefill: &Value) -> bool {
    let inline = prefill_choice(prefill)
        .and_then(|choice| choice.get("routed_experts"))
        .is_some_and(|value| !value.is_null());
    inline
        || prefill_payload(prefill)
            .iter()
            .any(|item| stitched(fields, item).is_some())
}

/// `prefill.choices[0]`, when the prefill has one that is an object.
fn prefill_choice(prefill: &Value) -> Option<&Map<String, Value>> {
    prefill.get("choices")?.get(0)?.as_object()
}

/// The items of `prefill.choices[0].payload`; empty when any step of that path
/// is missing or of another type. The prefill side is read leniently: a prefill
/// without usable segments simply has none, and if the decode has rows that
/// need them, that is reported as [`Error::MissingPrefillField`].
fn prefill_payload(prefill: &Value) -> &[Value] {
    prefill_choice(prefill)
        .and_then(|choice| choice.get("payload"))
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `Some((field, object))` when `item` is a stitched segment: an object whose
/// `field` is a string naming one of `fields`.
fn stitched<'v, S: AsRef<str>>(
    fields: &[S],
    item: &'v Value,
) -> Option<(&'v str, &'v Map<String, Value>)> {
    let object = item.as_object()?;
    let field = object.get("field")?.as_str()?;
    fields
        .iter()
        .any(|f| f.as_ref() == field)
        .then_some((field, object))
}

/// `side choices[choice].payload[item]`.
fn item_at(side: Side, choice: usize, item: usize) -> Location {
    Location::root(side)
        .key("choices")
        .index(choice)
        .key("payload")
        .index(item)
}

/// Validates a stitched segment object and maps it into the algebra. The file
/// handle is `()`: the merge never looks at it.
fn parse_segment(
    field: &str,
    object: &Map<String, Value>,
    at: &dyn Fn() -> Location,
) -> Result<Segment<()>, Error> {
    let pos = integer(object.get("pos"), || at().key("pos"))?;
    let rows = integer(object.get("rows"), || at().key("rows"))?;
    let offset = integer(object.get("offset"), || at().key("offset"))?;
    let dtype = object
        .get("dtype")
        .and_then(Value::as_str)
        .and_then(|name| name.parse::<Dtype>().ok())
        .ok_or_else(|| Error::Dtype {
            at: at().key("dtype"),
            got: describe(object.get("dtype")),
        })?;
    let shape = match object.get("shape") {
        Some(Value::Array(dims)) => dims
            .iter()
            .enumerate()
            .map(|(k, dim)| integer(Some(dim), || at().key("shape").index(k)))
            .collect::<Result<Vec<u64>, Error>>()?,
        other => {
            return Err(Error::Structure {
                at: at().key("shape"),
                expected: "an array of non-negative integers",
                got: describe(other),
            })
        }
    };
    Segment::new(field, (), offset, pos, rows, dtype, shape)
        .map_err(|overflow| Error::Overflow { at: at(), overflow })
}

/// A JSON integer in `0..=u64::MAX`, or [`Error::Integer`] at `at()`.
fn integer(value: Option<&Value>, at: impl FnOnce() -> Location) -> Result<u64, Error> {
    value.and_then(Value::as_u64).ok_or_else(|| Error::Integer {
        at: at(),
        got: describe(value),
    })
}

/// The first error a decode stitched segment causes when the prefill has none:
/// its own validation error, or else [`Error::MissingPrefillField`]. With
/// nothing to merge, the decode's structure is not held against it.
fn first_orphan<S: AsRef<str>>(fields: &[S], decode: &Value) -> Option<Error> {
    let choices = decode.get("choices")?.as_array()?;
    for (i, choice) in choices.iter().enumerate() {
        let Some(items) = choice.get("payload").and_then(Value::as_array) else {
            continue;
        };
        for (j, item) in items.iter().enumerate() {
            if let Some((field, object)) = stitched(fields, item) {
                let at = || item_at(Side::Decode, i, j);
                return Some(match parse_segment(field, object, &at) {
                    Err(err) => err,
                    Ok(_) => Error::MissingPrefillField {
                        at: at(),
                        field: field.to_owned(),
                    },
                });
            }
        }
    }
    None
}

/// What the merge does with one item of a decode payload.
enum Fate {
    /// Pass it through as it is: a non-stitched item, or a stitched segment
    /// that starts at or after its cut.
    Keep,
    /// Leave it out: a stitched segment that ends at or before its cut.
    Drop,
    /// Rewrite its `pos`, `rows` and `offset` to these.
    Clip { pos: u64, rows: u64, offset: u64 },
}

/// One decode choice and the fate of each item of its payload, in order.
struct ChoicePlan<'d> {
    choice: &'d mut Map<String, Value>,
    fates: Vec<Fate>,
}

/// Phase 1 on the decode side: validate every choice and stitched segment and
/// decide each item's fate, without writing anything.
fn plan<'d, S: AsRef<str>>(
    fields: &[S],
    cuts: &Cuts,
    decode: &'d mut Value,
) -> Result<Vec<ChoicePlan<'d>>, Error> {
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
    let choices = match root.get_mut("choices") {
        Some(Value::Array(choices)) => choices,
        other => {
            return Err(Error::Structure {
                at: Location::root(Side::Decode).key("choices"),
                expected: "an array",
                got: describe(other.as_deref()),
            })
        }
    };
    let mut plans = Vec::with_capacity(choices.len());
    for (i, choice) in choices.iter_mut().enumerate() {
        let choice_at = || Location::root(Side::Decode).key("choices").index(i);
        let choice = match choice {
            Value::Object(choice) => choice,
            other => {
                return Err(Error::Structure {
                    at: choice_at(),
                    expected: "an object",
                    got: describe(Some(other)),
                })
            }
        };
        let fates = match choice.get("payload") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(j, item)| fate(fields, cuts, item, || item_at(Side::Decode, i, j)))
                .collect::<Result<Vec<Fate>, Error>>()?,
            Some(other) => {
                return Err(Error::Structure {
                    at: choice_at().key("payload"),
                    expected: "an array or null",
                    got: describe(Some(other)),
                })
            }
        };
        plans.push(ChoicePlan { choice, fates });
    }
    Ok(plans)
}

/// The fate of one decode payload item under `cuts`.
fn fate<S: AsRef<str>>(
    fields: &[S],
    cuts: &Cuts,
    item: &Value,
    at: impl Fn() -> Location,
) -> Result<Fate, Error> {
    let Some((field, object)) = stitched(fields, item) else {
        return Ok(Fate::Keep);
    };
    let segment = parse_segment(field, object, &at)?;
    let kept = cuts
        .clip(&segment)
        .map_err(|missing| Error::MissingPrefillField {
            at: at(),
            field: missing.field,
        })?;
    Ok(match kept {
        None => Fate::Drop,
        Some(kept) if kept.pos() == segment.pos() => Fate::Keep,
        Some(kept) => Fate::Clip {
            pos: kept.pos(),
            rows: kept.rows(),
            offset: kept.offset(),
        },
    })
}

/// Phase 2: give every planned choice its merged payload. Cannot fail.
fn apply(plans: Vec<ChoicePlan<'_>>, prefix: &[&Value]) {
    for ChoicePlan { choice, fates } in plans {
        // Take the old items out in place (not `remove`, which may reorder the
        // keys of a map under serde_json's `preserve_order`).
        let items = match choice.get_mut("payload") {
            Some(Value::Array(items)) => std::mem::take(items),
            _ => Vec::new(),
        };
        let mut merged = Vec::with_capacity(prefix.len() + items.len());
        merged.extend(prefix.iter().map(|&segment| segment.clone()));
        for (mut item, fate) in items.into_iter().zip(fates) {
            match fate {
                Fate::Keep => merged.push(item),
                Fate::Drop => {}
                Fate::Clip { pos, rows, offset } => {
                    if let Value::Object(segment) = &mut item {
                        segment.insert("pos".to_owned(), pos.into());
                        segment.insert("rows".to_owned(), rows.into());
                        segment.insert("offset".to_owned(), offset.into());
                    }
                    merged.push(item);
                }
            }
        }
        choice.insert("payload".to_owned(), Value::Array(merged));
    }
}
