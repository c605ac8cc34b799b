//! Rows by handle: the `choices[i].payload` segment lists.
//!
//! This module maps payload JSON to the [algebra](crate::algebra) and back; the
//! merge rule itself is [`Cuts::clip`]. Its part of the merge [plan](crate::merge)
//! is, for each decode choice, the fate of every payload item (keep, drop,
//! clip); applying it moves the decode's own segment objects rather than
//! copying them.

use serde_json::{Map, Value};

use crate::algebra::{cut, Cuts, Segment};
use crate::error::{Error, Location, Side};
use crate::json::{self, choice_at};

/// The prefill's side of the by-handle merge: its stitched segments (the JSON
/// objects, copied into every decode choice as they are) and their cuts.
pub(crate) struct Prefill<'p> {
    prefix: Vec<&'p Value>,
    cuts: Cuts,
}

impl<'p> Prefill<'p> {
    /// Reads and validates the prefill's stitched segments; `None` when it has
    /// none.
    pub(crate) fn read<S: AsRef<str>>(
        fields: &[S],
        prefill: &'p Value,
    ) -> Result<Option<Prefill<'p>>, Error> {
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
            return Ok(None);
        }
        Ok(Some(Prefill {
            prefix,
            cuts: cut(&segments),
        }))
    }

    /// Validates decode choice `i` and decides the fate of each of its payload
    /// items, writing nothing.
    pub(crate) fn plan<S: AsRef<str>>(
        &self,
        fields: &[S],
        choice: &Map<String, Value>,
        i: usize,
    ) -> Result<Plan, Error> {
        let fates = match choice.get("payload") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(j, item)| fate(fields, &self.cuts, item, || item_at(Side::Decode, i, j)))
                .collect::<Result<Vec<Fate>, Error>>()?,
            Some(other) => {
                return Err(Error::Structure {
                    at: choice_at(Side::Decode, i).key("payload"),
                    expected: "an array or null",
                    got: crate::error::describe(Some(other)),
                })
            }
        };
        Ok(Plan { fates })
    }

    /// Gives `choice` its merged payload, as `plan` decided. Cannot fail.
    pub(crate) fn apply(&self, plan: Plan, choice: &mut Map<String, Value>) {
        // Take the old items out in place (not `remove`, which may reorder the
        // keys of a map under serde_json's `preserve_order`).
        let items = match choice.get_mut("payload") {
            Some(Value::Array(items)) => std::mem::take(items),
            _ => Vec::new(),
        };
        let mut merged = Vec::with_capacity(self.prefix.len() + items.len());
        merged.extend(self.prefix.iter().map(|&segment| segment.clone()));
        for (mut item, fate) in items.into_iter().zip(plan.fates) {
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

/// The fate of each payload item of one decode choice, in order.
pub(crate) struct Plan {
    fates: Vec<Fate>,
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

/// Whether `prefill.choices[0]` carries rows to stitch: a non-null inline
/// `routed_experts`, or a payload segment of one of `fields`.
pub(crate) fn prefill_has_rows<S: AsRef<str>>(fields: &[S], prefill: &Value) -> bool {
    crate::inline::prefill_rows(prefill).is_some()
        || prefill_payload(prefill)
            .iter()
            .any(|item| stitched(fields, item).is_some())
}

/// `prefill.choices[0]`, when the prefill has one that is an object.
pub(crate) fn prefill_choice(prefill: &Value) -> Option<&Map<String, Value>> {
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
pub(crate) fn item_at(side: Side, choice: usize, item: usize) -> Location {
    choice_at(side, choice).key("payload").index(item)
}

/// Validates a stitched segment object and maps it into the algebra. The file
/// handle is `()`: the merge never looks at it.
pub(crate) fn parse_segment(
    field: &str,
    object: &Map<String, Value>,
    at: &dyn Fn() -> Location,
) -> Result<Segment<()>, Error> {
    let pos = json::integer(object.get("pos"), || at().key("pos"))?;
    let rows = json::integer(object.get("rows"), || at().key("rows"))?;
    let offset = json::integer(object.get("offset"), || at().key("offset"))?;
    let dtype = json::dtype(object.get("dtype"), || at().key("dtype"))?;
    let shape = json::shape(
        object.get("shape"),
        None,
        "an array of non-negative integers",
        || at().key("shape"),
    )?;
    Segment::new(field, (), offset, pos, rows, dtype, shape)
        .map_err(|overflow| Error::Overflow { at: at(), overflow })
}

/// The first error a decode stitched segment causes when the prefill has none:
/// its own validation error, or else [`Error::MissingPrefillField`]. With
/// nothing to merge, the decode's structure is not held against it.
pub(crate) fn first_orphan<S: AsRef<str>>(fields: &[S], decode: &Value) -> Option<Error> {
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
