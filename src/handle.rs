//! Rows by handle: the `choices[i].payload` segment lists.
//!
//! This module maps payload JSON to the [algebra](crate::algebra) and back; the
//! merge rule itself is [`Cuts::clip_extent`]. Its part of the merge
//! [plan](crate::merge) is, for each decode choice, the fate of every payload
//! item (keep, drop, clip); applying it moves the decode's own segment objects
//! rather than copying them.
//!
//! This is the hot path of a by-handle router, so it allocates nothing per
//! segment: a segment's keys are found in one pass over its object and its
//! geometry is an [`Extent`], a `Copy` value.

use serde_json::{Map, Value};

use crate::algebra::{row_bytes, Cuts, Dtype, Extent, Segment};
use crate::error::{describe, Error, Location, Side};
use crate::json::{self, choice_at};
use crate::strict::{Origin, Planned};

/// The prefill's side of the by-handle merge: its stitched segments (the JSON
/// objects, copied into every decode choice as they are) and their cuts.
pub(crate) struct Prefill<'p> {
    prefix: Vec<&'p Value>,
    /// The payload index of each segment of `prefix` (for strict mode's
    /// errors).
    prefix_index: Vec<usize>,
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
        let mut prefix_index = Vec::new();
        let mut cuts = Cuts::default();
        for (j, item) in prefill_payload(prefill).iter().enumerate() {
            let Some(keys) = Keys::stitched(fields, item) else {
                continue;
            };
            let extent = keys.extent(&|| item_at(Side::Prefill, 0, j))?;
            cuts.extend(keys.field, extent.end());
            prefix.push(item);
            prefix_index.push(j);
        }
        if prefix.is_empty() {
            return Ok(None);
        }
        Ok(Some(Prefill {
            prefix,
            prefix_index,
            cuts,
        }))
    }

    /// Validates decode choice `i` and decides the fate of each of its payload
    /// items, writing nothing.
    pub(crate) fn plan<S: AsRef<str>>(
        &self,
        fields: &[S],
        choice: &Map<String, Value>,
        i: usize,
        mut strict: Option<&mut Planned>,
    ) -> Result<Plan, Error> {
        let fates = match choice.get("payload") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(items)) => {
                let mut fates = Vec::with_capacity(items.len());
                // The merged-payload index of the next item kept (strict mode).
                let mut index = self.prefix.len();
                for (j, item) in items.iter().enumerate() {
                    let record = strict.as_deref_mut().map(|p| (p, index, j));
                    let fate = fate(
                        fields,
                        &self.cuts,
                        item,
                        || item_at(Side::Decode, i, j),
                        record,
                    )?;
                    index += usize::from(!matches!(fate, Fate::Drop));
                    fates.push(fate);
                }
                fates
            }
            Some(other) => {
                return Err(Error::Structure {
                    at: choice_at(Side::Decode, i).key("payload"),
                    expected: "an array or null",
                    got: describe(Some(other)),
                })
            }
        };
        if let Some(planned) = strict {
            let checked = crate::strict::check(fields, planned, i);
            planned.reset();
            checked?;
        }
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
        choice.insert("payload".to_owned(), Value::Array(merged));
    }
}

impl Prefill<'_> {
    /// Strict mode's record of the prefill's stitched segments, the start of
    /// every choice's merged payload; read once per merge.
    pub(crate) fn planned_prefix<S: AsRef<str>>(&self, fields: &[S]) -> Result<Planned, Error> {
        let mut planned = Planned::default();
        for (index, (&item, &j)) in self.prefix.iter().zip(&self.prefix_index).enumerate() {
            if let Some((f, keys)) = stitched_index(fields, item) {
                let (extent, dtype, dims) = keys.parts(&|| item_at(Side::Prefill, 0, j))?;
                let shape = dims.iter().filter_map(Value::as_u64);
                planned.push(
                    index,
                    Origin::Prefill(j),
                    f,
                    extent.positions(),
                    dtype,
                    shape,
                );
            }
        }
        planned.seal_prefix();
        Ok(planned)
    }
}

/// The keys of `item` when it is a stitched segment, with its field's index.
fn stitched_index<'v, S: AsRef<str>>(fields: &[S], item: &'v Value) -> Option<(usize, Keys<'v>)> {
    let keys = Keys::of(item.as_object()?)?;
    let f = fields.iter().position(|f| f.as_ref() == keys.field)?;
    Some((f, keys))
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
            .any(|item| Keys::stitched(fields, item).is_some())
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

/// `side choices[choice].payload[item]`.
pub(crate) fn item_at(side: Side, choice: usize, item: usize) -> Location {
    choice_at(side, choice).key("payload").index(item)
}

/// The keys of a payload item that the merge reads, found in one pass over
/// the object (a segment has few keys; one pass beats a lookup per key).
pub(crate) struct Keys<'v> {
    field: &'v str,
    pos: Option<&'v Value>,
    rows: Option<&'v Value>,
    offset: Option<&'v Value>,
    dtype: Option<&'v Value>,
    shape: Option<&'v Value>,
}

impl<'v> Keys<'v> {
    /// The keys of `item` when it is a stitched segment: an object whose
    /// `field` is a string naming one of `fields`.
    pub(crate) fn stitched<S: AsRef<str>>(fields: &[S], item: &'v Value) -> Option<Keys<'v>> {
        let keys = Keys::of(item.as_object()?)?;
        fields
            .iter()
            .any(|f| f.as_ref() == keys.field)
            .then_some(keys)
    }

    /// The keys of `object`, when its `field` is a string.
    pub(crate) fn of(object: &'v Map<String, Value>) -> Option<Keys<'v>> {
        let mut field = None;
        let mut keys = Keys {
            field: "",
            pos: None,
            rows: None,
            offset: None,
            dtype: None,
            shape: None,
        };
        for (key, value) in object {
            match key.as_str() {
                "field" => field = value.as_str(),
                "pos" => keys.pos = Some(value),
                "rows" => keys.rows = Some(value),
                "offset" => keys.offset = Some(value),
                "dtype" => keys.dtype = Some(value),
                "shape" => keys.shape = Some(value),
                _ => {}
            }
        }
        keys.field = field?;
        Some(keys)
    }

    /// The field.
    pub(crate) fn field(&self) -> &'v str {
        self.field
    }

    /// Validates the segment (in the order `pos`, `rows`, `offset`, `dtype`,
    /// `shape`, then the arithmetic) and returns its geometry, allocating
    /// nothing.
    pub(crate) fn extent(&self, at: &dyn Fn() -> Location) -> Result<Extent, Error> {
        self.parts(at).map(|(extent, _, _)| extent)
    }

    /// The geometry, the dtype and the (validated) shape entries.
    fn parts(&self, at: &dyn Fn() -> Location) -> Result<(Extent, Dtype, &'v [Value]), Error> {
        let pos = json::integer(self.pos, || at().key("pos"))?;
        let rows = json::integer(self.rows, || at().key("rows"))?;
        let offset = json::integer(self.offset, || at().key("offset"))?;
        let dtype = json::dtype(self.dtype, || at().key("dtype"))?;
        let dims = json::shape(
            self.shape,
            None,
            "an array of non-negative integers",
            || at().key("shape"),
        )?;
        let overflow = |overflow| Error::Overflow { at: at(), overflow };
        let row_bytes =
            row_bytes(dtype, dims.iter().filter_map(Value::as_u64)).map_err(overflow)?;
        let extent = Extent::new(offset, pos, rows, row_bytes).map_err(overflow)?;
        Ok((extent, dtype, dims))
    }

    /// The whole segment in the algebra, for readers (not the merge).
    pub(crate) fn segment(&self, at: &dyn Fn() -> Location) -> Result<Segment<()>, Error> {
        let (extent, dtype, dims) = self.parts(at)?;
        let shape = dims.iter().filter_map(Value::as_u64).collect();
        Segment::new(
            self.field,
            (),
            extent.offset(),
            extent.pos(),
            extent.rows(),
            dtype,
            shape,
        )
        .map_err(|overflow| Error::Overflow { at: at(), overflow })
    }
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
            if let Some(keys) = Keys::stitched(fields, item) {
                let at = || item_at(Side::Decode, i, j);
                return Some(match keys.extent(&at) {
                    Err(err) => err,
                    Ok(_) => Error::MissingPrefillField {
                        at: at(),
                        field: keys.field.to_owned(),
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
    record: Option<(&mut Planned, usize, usize)>,
) -> Result<Fate, Error> {
    let Some(keys) = Keys::stitched(fields, item) else {
        return Ok(Fate::Keep);
    };
    let (extent, dtype, dims) = keys.parts(&at)?;
    let kept =
        cuts.clip_extent(keys.field, extent)
            .map_err(|missing| Error::MissingPrefillField {
                at: at(),
                field: missing.field,
            })?;
    // Strict mode: note what this segment will cover in the merged payload.
    if let (Some((planned, index, j)), Some(kept)) = (record, kept) {
        let f = fields
            .iter()
            .position(|f| f.as_ref() == keys.field)
            .unwrap_or(0);
        let shape = dims.iter().filter_map(Value::as_u64);
        planned.push(index, Origin::Decode(j), f, kept.positions(), dtype, shape);
    }
    Ok(match kept {
        None => Fate::Drop,
        Some(kept) if kept.pos() == extent.pos() => Fate::Keep,
        Some(kept) => Fate::Clip {
            pos: kept.pos(),
            rows: kept.rows(),
            offset: kept.offset(),
        },
    })
}
