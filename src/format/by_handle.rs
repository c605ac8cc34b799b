//! Rows by handle: planning the merge of the `choices[i].payload` segment
//! lists.
//!
//! This module reads payload JSON through a [`View`] and maps it to the
//! [algebra](crate::algebra); the merge rule itself is [`Cuts::clip_extent`].
//! Its part of the merge [plan](crate::merge) is, for each decode choice, the
//! [`Item`] of every payload item (keep, drop, clip), as a [`Patch::Array`]
//! that the adapters write.
//!
//! This is the hot path of a by-handle router, so it allocates nothing per
//! segment: a segment's keys are found in one pass over its object and its
//! geometry is an [`Extent`], a `Copy` value.

use std::borrow::Cow;
use std::rc::Rc;

use crate::algebra::{row_bytes, Cuts, Dtype, Extent};
use crate::error::{Error, ErrorDetail, Location, Side};
use crate::format::strict::{Origin, Planned};
use crate::response::json::{self, choice_at};
use crate::response::paths::prefill_choice;
use crate::response::view::{describe_view, Kind, View};

use super::interface::{Format, Level, Spec};
use crate::format::places::{place, Holder, Holds, Place, RowsKind};
use crate::response::patch::{Item, Patch, Path};

/// The key of a choice's segment list: the one place rows by handle sit.
pub(crate) const PAYLOAD: &str = "payload";

/// The prefill's side of the by-handle merge: its stitched segments (copied
/// into every decode choice as they are) and their cuts.
pub(crate) struct PrefillSegments<V> {
    /// The prefill's stitched segments, in payload order.
    /// Shared by every choice's patch, so that a choice costs no copy.
    prefix: Rc<[V]>,
    /// The payload index of each segment of `prefix` (for strict mode's
    /// errors).
    prefix_index: Vec<usize>,
    cuts: Cuts,
    /// Strict mode's record of the merged payload being planned, from
    /// [`Format::prepare`] on.
    strict: Option<Planned>,
}

/// The members of a segment a clip rewrites ([`Item::Set`]).
const CLIPPED: [&str; 3] = ["pos", "rows", "offset"];

/// `side choices[choice].payload`.
fn payload_at(side: Side, choice: usize) -> Location {
    choice_at(side, choice).key(PAYLOAD)
}

/// `side choices[choice].payload[item]`.
pub(crate) fn item_at(side: Side, choice: usize, item: usize) -> Location {
    payload_at(side, choice).index(item)
}

/// The items of `prefill.choices[0].payload`; none when any step of that
/// path is missing or of another type. The prefill side is read leniently: a
/// prefill without usable segments simply has none, and if the decode has
/// rows that need them, that is reported as
/// [`ErrorDetail::MissingPrefillField`].
pub(crate) fn prefill_payload<'a, V: View<'a>>(prefill: V) -> impl Iterator<Item = V> + 'a {
    prefill_choice(prefill)
        .and_then(|choice| choice.get(PAYLOAD))
        .and_then(View::elements)
        .into_iter()
        .flatten()
}

/// Rows by handle, as a [`Format`].
pub(crate) struct ByHandle;

impl Format for ByHandle {
    const KIND: RowsKind = RowsKind::ByHandle;
    const LEVEL: Level = Level::Choice;
    const PLACES: &'static [Place] = &[place(
        Holder::Choice,
        PAYLOAD,
        Holds::Rows(RowsKind::ByHandle),
    )];
    type Prefill<'p, P: View<'p>> = PrefillSegments<P>;

    fn read<'p, S: AsRef<str>, P: View<'p>>(
        spec: &Spec<'_, S>,
        prefill: P,
    ) -> Result<Option<PrefillSegments<P>>, Error> {
        PrefillSegments::read(spec.fields, prefill)
    }

    fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(
        spec: &Spec<'_, S>,
        decode: D,
    ) -> Option<Error> {
        first_orphan(spec.fields, decode)
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(fields: &[S], prefill: V) -> bool {
        prefill_payload(prefill).any(|item| SegmentKeys::stitched(fields, item).is_some())
    }

    fn prepare<'p, S: AsRef<str>, P: View<'p>>(
        prefill: &mut PrefillSegments<P>,
        spec: &Spec<'_, S>,
    ) -> Result<(), Error> {
        if spec.strict {
            prefill.strict = Some(prefill.planned_prefix(spec.fields)?);
        }
        Ok(())
    }

    fn plan_choice<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        prefill: &mut PrefillSegments<P>,
        spec: &Spec<'_, S>,
        _: D,
        choice: D,
        i: usize,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        let items = prefill.plan(spec.fields, choice, i)?;
        out.push(Patch::Array {
            at: Path::ROOT.key("choices").index(i).key(PAYLOAD),
            prefix: Rc::clone(&prefill.prefix),
            items,
            numbers: CLIPPED,
        });
        Ok(())
    }
}

impl<'p, V: View<'p>> PrefillSegments<V> {
    /// Reads and validates the prefill's stitched segments; `None` when it has
    /// none.
    fn read<S: AsRef<str>>(fields: &[S], prefill: V) -> Result<Option<Self>, Error> {
        let mut prefix = Vec::new();
        let mut prefix_index = Vec::new();
        let mut cuts = Cuts::default();
        for (j, item) in prefill_payload(prefill).enumerate() {
            let Some(keys) = SegmentKeys::stitched(fields, item) else {
                continue;
            };
            let extent = keys.extent(&|| item_at(Side::Prefill, 0, j))?;
            cuts.extend(&keys.field, extent.end());
            prefix.push(item);
            prefix_index.push(j);
        }
        if prefix.is_empty() {
            return Ok(None);
        }
        Ok(Some(PrefillSegments {
            prefix: prefix.into(),
            prefix_index,
            cuts,
            strict: None,
        }))
    }

    /// Strict mode's record of the prefill's stitched segments, the start of
    /// every choice's merged payload; read once per merge.
    fn planned_prefix<S: AsRef<str>>(&self, fields: &[S]) -> Result<Planned, Error> {
        let mut planned = Planned::default();
        for (index, (&item, &j)) in self.prefix.iter().zip(&self.prefix_index).enumerate() {
            if let Some((f, keys)) = stitched_index(fields, item) {
                let (extent, dtype, shape) = keys.parts(&|| item_at(Side::Prefill, 0, j))?;
                planned.push(
                    index,
                    Origin::Prefill(j),
                    f,
                    extent.positions(),
                    dtype,
                    json::dims(shape),
                );
            }
        }
        planned.seal_prefix();
        Ok(planned)
    }

    /// Validates decode choice `i` (an object) and decides what becomes of
    /// each of its payload items, writing nothing. In strict mode (a
    /// [`Planned`] prefix), the choice's merged layout is also held against
    /// the layout rule.
    fn plan<'d, S: AsRef<str>, D: View<'d>>(
        &mut self,
        fields: &[S],
        choice: D,
        i: usize,
    ) -> Result<Vec<Item>, Error> {
        let mut strict = self.strict.as_mut();
        let payload = choice.get(PAYLOAD);
        let fates = match payload.map(View::kind) {
            None | Some(Kind::Null) => Vec::new(),
            Some(Kind::Array) => {
                let items = payload.and_then(View::elements);
                let mut fates = Vec::with_capacity(items.as_ref().map_or(0, |i| i.size_hint().0));
                let items = items.into_iter().flatten();
                // The merged-payload index of the next item kept (strict mode).
                let mut index = self.prefix.len();
                for (j, item) in items.enumerate() {
                    let record = strict.as_deref_mut().map(|p| (p, index, j));
                    let fate = fate(
                        fields,
                        &self.cuts,
                        item,
                        || item_at(Side::Decode, i, j),
                        record,
                    )?;
                    index += usize::from(fate != Item::Drop);
                    fates.push(fate);
                }
                fates
            }
            Some(_) => {
                return Err(ErrorDetail::Structure {
                    at: choice_at(Side::Decode, i).key(PAYLOAD),
                    expected: "an array or null",
                    got: describe_view(payload),
                }
                .into())
            }
        };
        if let Some(planned) = strict {
            let checked = crate::format::strict::check(fields, planned, i, payload_at);
            planned.reset();
            checked?;
        }
        Ok(fates)
    }
}

/// The keys of `item` when it is a stitched segment, with its field's index.
fn stitched_index<'v, S: AsRef<str>, V: View<'v>>(
    fields: &[S],
    item: V,
) -> Option<(usize, SegmentKeys<'v, V>)> {
    // A pass-through item is known by its `field` alone: nothing else of it
    // is read, but for the keys before `field` in the one pass a reader
    // whose keys are unique makes.
    let position = |field: &str| fields.iter().position(|f| f.as_ref() == field);
    if V::UNIQUE_KEYS {
        return SegmentKeys::one_pass(item, position);
    }
    let field = item.get("field")?.as_str()?;
    let f = position(&field)?;
    Some((f, SegmentKeys::with_field(item, field)))
}

/// The keys of a payload item that the merge reads: `field` looked up alone
/// (an item that is not stitched is known by it), then the other five found
/// in one pass over the object (a segment has few keys; one pass beats a
/// lookup per key). A repeated key counts once, as its last occurrence, as
/// in `serde_json`.
pub(crate) struct SegmentKeys<'v, V> {
    field: Cow<'v, str>,
    pos: Option<V>,
    rows: Option<V>,
    offset: Option<V>,
    dtype: Option<V>,
    shape: Option<V>,
}

impl<'v, V: View<'v>> SegmentKeys<'v, V> {
    /// The keys of `item` when it is a stitched segment: an object whose
    /// `field` is a string naming one of `fields`.
    pub(crate) fn stitched<S: AsRef<str>>(fields: &[S], item: V) -> Option<Self> {
        stitched_index(fields, item).map(|(_, keys)| keys)
    }

    /// The keys of `object`, when it is an object whose `field` is a string
    /// (for the readers, not the merge).
    #[cfg(feature = "verify")]
    pub(crate) fn of(object: V) -> Option<Self> {
        let field = object.get("field")?.as_str()?;
        Some(Self::with_field(object, field))
    }

    /// The keys of `object` in one pass over its members, whose keys are
    /// unique, when its `field` is a string that `position` finds; stops at
    /// `field` when it is not.
    fn one_pass(object: V, position: impl Fn(&str) -> Option<usize>) -> Option<(usize, Self)> {
        let mut keys = SegmentKeys {
            field: Cow::Borrowed(""),
            pos: None,
            rows: None,
            offset: None,
            dtype: None,
            shape: None,
        };
        let mut found = None;
        for (key, value) in object.members()? {
            let slot = match key.as_ref() {
                b"field" => {
                    let field = value.as_str()?;
                    found = Some(position(&field)?);
                    keys.field = field;
                    continue;
                }
                other => match keys.slot(other) {
                    Some(slot) => slot,
                    None => continue,
                },
            };
            *slot = Some(value);
        }
        Some((found?, keys))
    }

    /// Where the value of member `key` goes: one of the five keys a segment
    /// is read by besides `field`, or `None` for any other member. Inlined:
    /// it runs for every member of every segment, and a call cost more than
    /// the comparisons (callgrind, 8 x 32: 22 instructions a member).
    #[inline(always)]
    fn slot(&mut self, key: &[u8]) -> Option<&mut Option<V>> {
        Some(match key {
            b"pos" => &mut self.pos,
            b"rows" => &mut self.rows,
            b"offset" => &mut self.offset,
            b"dtype" => &mut self.dtype,
            b"shape" => &mut self.shape,
            _ => return None,
        })
    }

    /// The keys of the object `object` whose `field` is `field`: the other
    /// five in one pass over its members, keys compared as bytes.
    fn with_field(object: V, field: Cow<'v, str>) -> Self {
        let mut keys = SegmentKeys {
            field,
            pos: None,
            rows: None,
            offset: None,
            dtype: None,
            shape: None,
        };
        for (key, value) in object.members().into_iter().flatten() {
            if let Some(slot) = keys.slot(key.as_ref()) {
                *slot = Some(value);
            }
        }
        keys
    }

    /// The field.
    #[cfg(feature = "verify")]
    pub(crate) fn field(&self) -> &str {
        &self.field
    }

    /// Validates the segment (in the order `pos`, `rows`, `offset`, `dtype`,
    /// `shape`, then the arithmetic) and returns its geometry, allocating
    /// nothing.
    pub(crate) fn extent(&self, at: &dyn Fn() -> Location) -> Result<Extent, Error> {
        self.parts(at).map(|(extent, _, _)| extent)
    }

    /// The geometry, the dtype and the (validated) shape array.
    fn parts(&self, at: &dyn Fn() -> Location) -> Result<(Extent, Dtype, V), Error> {
        let pos = json::integer(self.pos, || at().key("pos"))?;
        let rows = json::integer(self.rows, || at().key("rows"))?;
        let offset = json::integer(self.offset, || at().key("offset"))?;
        let dtype = json::dtype(self.dtype, || at().key("dtype"))?;
        let shape = json::shape(
            self.shape,
            None,
            "an array of non-negative integers",
            || at().key("shape"),
        )?;
        let overflow = |overflow| ErrorDetail::Overflow { at: at(), overflow };
        let row_bytes = row_bytes(dtype, json::dims(shape)).map_err(overflow)?;
        let extent = Extent::new(offset, pos, rows, row_bytes).map_err(overflow)?;
        Ok((extent, dtype, shape))
    }

    /// The whole segment in the algebra, for readers (not the merge).
    #[cfg(feature = "verify")]
    pub(crate) fn segment(
        &self,
        at: &dyn Fn() -> Location,
    ) -> Result<crate::algebra::Segment<()>, Error> {
        let (extent, dtype, shape) = self.parts(at)?;
        crate::algebra::Segment::new(
            self.field.as_ref(),
            (),
            extent.offset(),
            extent.pos(),
            extent.rows(),
            dtype,
            json::dims(shape).collect(),
        )
        .map_err(|overflow| ErrorDetail::Overflow { at: at(), overflow }.into())
    }
}

/// The first error a decode stitched segment causes when the prefill has none:
/// its own validation error, or else [`ErrorDetail::MissingPrefillField`]. With
/// nothing to merge, the decode's structure is not held against it.
fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(fields: &[S], decode: D) -> Option<Error> {
    for (i, choice) in decode.get("choices")?.elements()?.enumerate() {
        let Some(items) = choice.get(PAYLOAD).and_then(View::elements) else {
            continue;
        };
        for (j, item) in items.enumerate() {
            if let Some(keys) = SegmentKeys::stitched(fields, item) {
                let at = || item_at(Side::Decode, i, j);
                return Some(match keys.extent(&at) {
                    Err(err) => err,
                    Ok(_) => ErrorDetail::MissingPrefillField {
                        at: at(),
                        field: keys.field.into_owned(),
                    }
                    .into(),
                });
            }
        }
    }
    None
}

/// The fate of one decode payload item under `cuts`; with `record` (strict
/// mode's layout, the item's merged-payload index and its payload index),
/// what the kept segment will cover is noted.
fn fate<'d, S: AsRef<str>, D: View<'d>>(
    fields: &[S],
    cuts: &Cuts,
    item: D,
    at: impl Fn() -> Location,
    record: Option<(&mut Planned, usize, usize)>,
) -> Result<Item, Error> {
    let Some((f, keys)) = stitched_index(fields, item) else {
        return Ok(Item::Keep);
    };
    let (extent, dtype, shape) = keys.parts(&at)?;
    let kept = cuts.clip_extent(&keys.field, extent).map_err(|missing| {
        ErrorDetail::MissingPrefillField {
            at: at(),
            field: missing.field,
        }
    })?;
    // Strict mode: note what this segment will cover in the merged payload.
    if let (Some((planned, index, j)), Some(kept)) = (record, kept) {
        planned.push(
            index,
            Origin::Decode(j),
            f,
            kept.positions(),
            dtype,
            json::dims(shape),
        );
    }
    Ok(match kept {
        None => Item::Drop,
        Some(kept) if kept.pos() == extent.pos() => Item::Keep,
        // Clipped: its first rows are the prefill's.
        Some(kept) => Item::Set([kept.pos(), kept.rows(), kept.offset()]),
    })
}
