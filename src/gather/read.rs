//! Reading rows back: [`gather`] and [`gather_from`] reconstruct the
//! `(positions, *shape)` array of one field of one choice, in position order,
//! from the files its payload segments point at (through a [`Store`], so only
//! where the store may read) or from its inline rows at the table's places,
//! [`choice_rows`] a choice's rows of any kind wherever the table puts
//! them, and [`Gathered`] is what they return. `coverage` (the union, gaps and
//! overlaps of intervals) is here too: the readers need it, and `check`,
//! which reads segments through this file, uses it as well.

use std::path::Path;

use serde_json::{Map, Value};

use crate::algebra::{Dtype, Rows, Segment};
use crate::codec::{Form, NpyError};
use crate::error::{describe, Error, ErrorDetail, Location, Side};
use crate::format;
use crate::format::by_handle::SegmentKeys;
use crate::format::inline;
use crate::format::places::{Holds, Place, RowsKind};
use crate::response::fields::ROUTED_EXPERTS;
use crate::response::json::choice_at;

use super::{GatherError, Store};

/// The rows of one field of one choice, in position order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gathered {
    positions: Rows,
    dtype: Dtype,
    shape: Vec<u64>,
    data: Vec<u8>,
    source: Source,
}

/// Where gathered rows came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Payload segments, read from their files.
    Files,
    /// Inline `routed_experts` of this form.
    Inline(Form),
    /// SGLang's rows (`meta_info`, `sglext` or `sgl_ext`), placed with the
    /// row shape given.
    Sglang,
}

impl Gathered {
    /// Rows of `positions` from their parts (a reading turned into rows).
    pub(crate) fn from_parts(
        positions: Rows,
        dtype: Dtype,
        shape: Vec<u64>,
        data: Vec<u8>,
    ) -> Gathered {
        Gathered {
            positions,
            dtype,
            shape,
            data,
            source: Source::Files,
        }
    }

    /// The positions covered, `[first, last + 1)`.
    pub fn positions(&self) -> Rows {
        self.positions
    }

    /// The element type.
    pub fn dtype(&self) -> Dtype {
        self.dtype
    }

    /// The shape of one row.
    pub fn row_shape(&self) -> &[u64] {
        &self.shape
    }

    /// The shape of the whole array: `(positions, *row_shape)`.
    pub fn shape(&self) -> Vec<u64> {
        let mut shape = vec![self.positions.len()];
        shape.extend_from_slice(&self.shape);
        shape
    }

    /// The rows' bytes, back to back in position order.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The rows' bytes, taken out without a copy (the Python binding hands
    /// them to NumPy as they are).
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// Where the rows came from.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The bytes of the row of `position`, or `None` outside the positions.
    pub fn row(&self, position: u64) -> Option<&[u8]> {
        let index = position.checked_sub(self.positions.start())?;
        if index >= self.positions.len() {
            return None;
        }
        let row_bytes = self.data.len() / usize::try_from(self.positions.len()).ok()?.max(1);
        let start = usize::try_from(index).ok()?.checked_mul(row_bytes)?;
        self.data.get(start..start.checked_add(row_bytes)?)
    }

    /// The array as a version 1.0 `.npy` file, as `numpy.save` writes it.
    ///
    /// # Errors
    ///
    /// [`NpyError::Descr`] for `bfloat16`, which has no `.npy` type code.
    pub fn to_npy(&self) -> Result<Vec<u8>, NpyError> {
        inline::npy_file(self.dtype, &self.shape(), &self.data)
    }

    /// A 64-bit FNV-1a hash of the data, to compare arrays at a glance.
    pub fn checksum(&self) -> u64 {
        self.data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
            (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
        })
    }
}

/// Reconstructs the rows of `field` for `choice` of `response`, in position
/// order: from the files of its payload segments (relative names resolved
/// against `root`), or, when it has no segment of `field` and `field` is
/// `routed_experts`, from its inline rows, at the first inline place of the
/// table that has them ([`choice_rows`] reads SGLang's rows too).
///
/// Only files inside `root` are read (`Store::confined(root, &[])`): a name
/// that leads out of it, by `..`, as an absolute path or through a symlink,
/// is [`GatherError::Outside`]. [`gather_from`] with [`Store::confined`]
/// allows more directories.
///
/// ```
/// use pd_stitch::gather::gather;
/// use serde_json::json;
///
/// let dir = std::env::temp_dir().join(format!("pd-stitch-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir)?;
/// std::fs::write(dir.join("p.bin"), [1, 2, 3, 4])?;
/// let response = json!({"choices": [{"payload": [
///     {"field": "routed_experts", "file": "p.bin", "offset": 1, "pos": 0, "rows": 3,
///      "dtype": "uint8", "shape": []}]}]});
///
/// let rows = gather(&response, 0, "routed_experts", &dir)?;
/// assert_eq!(rows.data(), [2, 3, 4]);
/// assert_eq!(rows.shape(), [3]);
/// std::fs::remove_dir_all(&dir)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
///
/// [`GatherError`]: a malformed segment or choice, a gap between segments (where they
/// overlap, the later one's rows are read, as the trainer reads them),
/// segments that disagree on dtype (other than unsigned integers
/// of different widths, which are read as the widest) or shape, a missing or short
/// file, a file outside `root`, or no rows at all.
pub fn gather(
    response: &Value,
    choice: usize,
    field: &str,
    root: &Path,
) -> Result<Gathered, GatherError> {
    let store = Store::confined(root, &[]).map_err(|source| GatherError::Io {
        path: root.to_owned(),
        source,
    })?;
    gather_from(response, choice, field, &store)
}

/// [`gather`], reading the files from `store` (memory, or a directory tree
/// to which it confines every read).
///
/// # Errors
///
/// As [`gather`]; [`GatherError::Outside`] for a file outside the store's
/// allowed directories.
pub fn gather_from(
    response: &Value,
    choice: usize,
    field: &str,
    store: &Store,
) -> Result<Gathered, GatherError> {
    choice_object(response, choice)?;
    if let Some((place, segments)) = field_segments(response, choice, field)? {
        return read_covered(
            covered(&segments, choice, field, place)?,
            store,
            choice,
            place,
        );
    }
    let inline = inline_rows(response, choice).filter(|_| field == ROUTED_EXPERTS);
    let Some((place, value)) = inline else {
        return Err(GatherError::NoRows {
            choice,
            field: field.to_owned(),
        });
    };
    read_inline(response, choice, place, value)
}

/// The routed experts' rows of choice `choice` of `response`, wherever the
/// table of places (`pd_stitch::places::all()`) puts them and whatever
/// their kind, in position order with their positions: at the first place
/// of the table, in its order, where the choice has rows. Rows by handle
/// (the segments of `routed_experts`) are read from `store`; inline rows
/// wherever they sit (a choice's, or for the first choice the response's);
/// SGLang's rows placed with `row_shape`, `(layers, top_k)`, which the wire
/// does not carry (`choice` is then the item: the response, or an element
/// of a batch array). The one reader of a response's rows that every kind
/// goes through, so that a format added to the table is read here.
///
/// ```
/// use pd_stitch::gather::{choice_rows, Store};
/// use serde_json::json;
///
/// let compact = json!({"data": "AQIDBAUG", "shape": [2, 1, 3], "start": 4, "dtype": "uint8"});
/// let rows = choice_rows(&json!({"choices": [{"routed_experts": compact}]}), 0, &Store::memory(), None)?;
/// assert_eq!((rows.positions().start(), rows.shape()), (4, vec![2, 1, 3]));
/// // SGLang's ids: 2 prompt tokens and 3 generated make rows [0, 4).
/// let sglang = json!({"meta_info": {"prompt_tokens": 2, "completion_tokens": 3,
///     "routed_experts": "AQAAAAIAAAADAAAABAAAAA=="}});
/// let rows = choice_rows(&sglang, 0, &Store::memory(), Some((1, 1)))?;
/// assert_eq!(rows.positions().end(), 4);
/// # Ok::<(), pd_stitch::gather::GatherError>(())
/// ```
///
/// # Errors
///
/// What reading the rows at their place meets, as [`gather_from`] and
/// [`gather_sglang`] say; [`GatherError::RowShapeNeeded`] for SGLang rows
/// without `row_shape`; [`GatherError::NoRows`] when the choice has rows
/// at no place.
pub fn choice_rows(
    response: &Value,
    choice: usize,
    store: &Store,
    row_shape: Option<(u64, u64)>,
) -> Result<Gathered, GatherError> {
    for place in format::every_place() {
        match place.holds {
            Holds::Count => {}
            Holds::Rows(RowsKind::ByHandle) => {
                let segments = segments_at(response, choice, ROUTED_EXPERTS, place)?;
                if !segments.is_empty() {
                    let covered = covered(&segments, choice, ROUTED_EXPERTS, place)?;
                    return read_covered(covered, store, choice, place);
                }
            }
            Holds::Rows(RowsKind::Inline) => {
                if let Some(value) = inline_at(response, choice, place) {
                    return read_inline(response, choice, place, value);
                }
            }
            Holds::Rows(RowsKind::Sglang) => {
                if sglang_at(response, choice, place) {
                    let Some((layers, top_k)) = row_shape else {
                        return Err(GatherError::RowShapeNeeded { item: choice });
                    };
                    return gather_sglang(response, choice, layers, top_k);
                }
            }
        }
    }
    // A response with choices whose choice is missing, or not an object,
    // says so, as `gather_from` does; one without (SGLang's) has no rows.
    if response.get("choices").is_some() {
        choice_object(response, choice)?;
    }
    Err(GatherError::NoRows {
        choice,
        field: ROUTED_EXPERTS.to_owned(),
    })
}

/// Inline rows at `place` of choice `choice`, read as [`Gathered`]; errors
/// name the place.
fn read_inline(
    response: &Value,
    choice: usize,
    place: &Place,
    value: &Value,
) -> Result<Gathered, GatherError> {
    let (form, segment, data) = inline::read_rows(response, choice, place, value)?;
    Ok(Gathered {
        positions: segment.positions(),
        dtype: segment.dtype(),
        shape: segment.shape().to_vec(),
        data,
        source: Source::Inline(form),
    })
}

/// The rows of checked segments, read from `store`, written at their
/// positions in payload order: where segments overlap, the later one's rows
/// are the ones kept, as the trainer reads them.
fn read_covered(
    covered: Covered<'_>,
    store: &Store,
    choice: usize,
    place: &Place,
) -> Result<Gathered, GatherError> {
    let wide = usize::try_from(covered.dtype.itemsize()).unwrap_or(8);
    let mut pieces: Vec<(u64, Vec<u8>)> = Vec::with_capacity(covered.in_order.len());
    let mut narrow = Vec::new();
    for (j, segment) in &covered.in_order {
        let at = || item_at(place, choice, *j);
        let itemsize = usize::try_from(segment.dtype().itemsize()).unwrap_or(8);
        let mut data = Vec::new();
        if itemsize == wide {
            store.read(segment.file(), segment.byte_range(), at, &mut data)?;
        } else {
            narrow.clear();
            store.read(segment.file(), segment.byte_range(), at, &mut narrow)?;
            crate::codec::widen::widen(&narrow, itemsize, wide, &mut data);
        }
        pieces.push((segment.pos(), data));
    }
    // No gap (`covered` checked), so the positions are at most the rows
    // read: the buffer is bounded by data that exists.
    let span = usize::try_from(covered.positions.len()).unwrap_or(usize::MAX);
    let total: usize = pieces.iter().map(|(_, d)| d.len()).sum();
    let elements: u64 = covered.shape.iter().product();
    let row_bytes = usize::try_from(elements)
        .unwrap_or(usize::MAX)
        .saturating_mul(wide);
    let size = span.saturating_mul(row_bytes);
    let data = if pieces.len() == 1 || size > total {
        // One segment (or nothing to compose): its bytes are the rows.
        pieces
            .into_iter()
            .next()
            .map(|(_, d)| d)
            .unwrap_or_default()
    } else {
        let mut data = vec![0u8; size];
        for (pos, piece) in pieces {
            let from = usize::try_from(pos - covered.positions.start()).unwrap_or(0) * row_bytes;
            if let Some(slot) = data.get_mut(from..from + piece.len()) {
                slot.copy_from_slice(&piece);
            }
        }
        data
    };
    Ok(Gathered {
        positions: covered.positions,
        dtype: covered.dtype,
        shape: covered.shape,
        data,
        source: Source::Files,
    })
}

/// [`gather_from`], except that positions no segment covers between two
/// segments are not an error: the rows come back as runs of consecutive
/// positions, in order, one [`Gathered`] each (one run when there is no gap;
/// none when every segment is empty). For `compare`, which reports such
/// positions as covered by one side only.
///
/// # Errors
///
/// As [`gather_from`], less [`GatherError::Gap`].
pub fn gather_runs_from(
    response: &Value,
    choice: usize,
    field: &str,
    store: &Store,
) -> Result<Vec<Gathered>, GatherError> {
    choice_object(response, choice)?;
    let segments = field_segments(response, choice, field)?;
    // Inline rows, or segments with no gap: gather's own answer.
    let Some((place, segments)) = segments else {
        return gather_from(response, choice, field, store).map(|rows| vec![rows]);
    };
    match covered(&segments, choice, field, place) {
        Err(GatherError::NoRows { .. }) | Ok(_) => {
            return gather_from(response, choice, field, store).map(|rows| vec![rows])
        }
        Err(GatherError::Gap { .. }) => {}
        Err(other) => return Err(other),
    }
    // Dtypes and shapes agree (`covered` checks them before gaps): give each
    // non-empty segment to the run of covered positions it lies in, keeping
    // payload order inside a run, and lay out and read each run.
    let (union, _, _) = coverage(segments.iter().map(|(_, s)| s.positions()));
    // Each segment's run, by binary search over the runs (in order).
    let mut members: Vec<Vec<(usize, Segment<String>)>> = vec![Vec::new(); union.len()];
    for (j, s) in segments.into_iter().filter(|(_, s)| s.rows() > 0) {
        let k = union.partition_point(|r| r.end() <= s.pos());
        if let Some(run) = members.get_mut(k) {
            run.push((j, s));
        }
    }
    let mut runs = Vec::with_capacity(union.len());
    for run in members {
        runs.push(read_covered(
            covered(&run, choice, field, place)?,
            store,
            choice,
            place,
        )?);
    }
    Ok(runs)
}

/// `response.choices[choice]`, which must be an object.
pub(super) fn choice_object(
    response: &Value,
    choice: usize,
) -> Result<&Map<String, Value>, GatherError> {
    let choices = match response.get("choices") {
        Some(Value::Array(choices)) => choices,
        other => {
            return Err(Error::from(ErrorDetail::Structure {
                at: Location::root(Side::Response).key("choices"),
                expected: "an array",
                got: describe(other),
            })
            .into())
        }
    };
    match choices.get(choice) {
        Some(Value::Object(object)) => Ok(object),
        other => Err(Error::from(ErrorDetail::Structure {
            at: choice_at(Side::Response, choice),
            expected: "an object",
            got: describe(other),
        })
        .into()),
    }
}

/// The by-handle places of the table (today one: `choices[i].payload`).
fn by_handle_places() -> impl Iterator<Item = &'static Place> {
    format::every_place().filter(|place| place.holds == Holds::Rows(RowsKind::ByHandle))
}

/// Choice `choice`'s payload at the first by-handle place of the table
/// where it has one (present and not null): the place and its items.
///
/// # Errors
///
/// [`ErrorDetail::Structure`] at the place when the value is not an array.
pub(crate) fn payload_at(
    response: &Value,
    choice: usize,
) -> Result<Option<(&'static Place, &[Value])>, Error> {
    let object = response.get("choices").and_then(|c| c.get(choice));
    for place in by_handle_places() {
        match place.value_in(response, object) {
            None | Some(Value::Null) => {}
            Some(Value::Array(items)) => return Ok(Some((place, items))),
            Some(other) => {
                return Err(ErrorDetail::Structure {
                    at: place.at(Side::Response, choice),
                    expected: "an array or null",
                    got: describe(Some(other)),
                }
                .into())
            }
        }
    }
    Ok(None)
}

/// Where item `item` of the payload at `place` of choice `choice` is.
pub(super) fn item_at(place: &Place, choice: usize, item: usize) -> Location {
    place.at(Side::Response, choice).index(item)
}

/// Every valid segment of `field` in the choice's payload (at the table's
/// by-handle place that has one), with its payload index, the file a
/// string, and the place; `None` when it has no segment of `field`.
#[allow(clippy::type_complexity)]
fn field_segments(
    response: &Value,
    choice: usize,
    field: &str,
) -> Result<Option<(&'static Place, Vec<(usize, Segment<String>)>)>, GatherError> {
    let Some((place, items)) = payload_at(response, choice)? else {
        return Ok(None);
    };
    let mut segments = Vec::new();
    for (j, segment) in segments_of(items, choice, field, place) {
        segments.push((j, segment?));
    }
    Ok((!segments.is_empty()).then_some((place, segments)))
}

/// The valid segments of `field` of the payload at `place` of choice
/// `choice`, with their payload indices (none when it has no payload
/// there).
fn segments_at(
    response: &Value,
    choice: usize,
    field: &str,
    place: &Place,
) -> Result<Vec<(usize, Segment<String>)>, GatherError> {
    let object = response.get("choices").and_then(|c| c.get(choice));
    let items = match place.value_in(response, object) {
        Some(Value::Array(items)) => items,
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(other) => {
            return Err(Error::from(ErrorDetail::Structure {
                at: place.at(Side::Response, choice),
                expected: "an array or null",
                got: describe(Some(other)),
            })
            .into())
        }
    };
    let mut segments = Vec::new();
    for (j, segment) in segments_of(items, choice, field, place) {
        segments.push((j, segment?));
    }
    Ok(segments)
}

/// Each payload item of `field` with its index, validated into a segment
/// whose file is a string (or the error that says why it is not one); the
/// items are those of the payload at `place` of choice `choice`.
pub(super) fn segments_of<'a>(
    items: &'a [Value],
    choice: usize,
    field: &'a str,
    place: &'a Place,
) -> impl Iterator<Item = (usize, Result<Segment<String>, Error>)> + 'a {
    items.iter().enumerate().filter_map(move |(j, item)| {
        let object = item.as_object()?;
        let keys = SegmentKeys::of(item).filter(|k| k.field() == field)?;
        let at = || item_at(place, choice, j);
        let segment = keys
            .segment(&at)
            .and_then(|segment| match object.get("file") {
                Some(Value::String(file)) => Ok(segment.map_file(|()| file.clone())),
                other => Err(ErrorDetail::Structure {
                    at: at().key("file"),
                    expected: "a file name",
                    got: describe(other),
                }
                .into()),
            });
        Some((j, segment))
    })
}

/// Segments checked to cover their positions without a gap: one dtype (or
/// unsigned integers of any widths, read as the widest) and one row shape,
/// in payload order (empty segments left out; where they overlap the later
/// wins).
struct Covered<'s> {
    in_order: Vec<&'s (usize, Segment<String>)>,
    positions: Rows,
    dtype: Dtype,
    shape: Vec<u64>,
}

fn covered<'s>(
    segments: &'s [(usize, Segment<String>)],
    choice: usize,
    field: &str,
    place: &Place,
) -> Result<Covered<'s>, GatherError> {
    let Some((first_index, first)) = segments.first() else {
        return Err(GatherError::NoRows {
            choice,
            field: field.to_owned(),
        });
    };
    // Unsigned integers of different widths are the same ids (upstream
    // writes a uint8 prompt and a uint16 completion): read as the widest.
    let unsigned = segments.iter().all(|(_, s)| s.dtype().is_unsigned());
    let dtype = segments
        .iter()
        .map(|(_, s)| s.dtype())
        .max_by_key(|d| d.itemsize())
        .unwrap_or(first.dtype());
    for (j, segment) in segments {
        let what = if segment.dtype() != first.dtype() && !unsigned {
            "dtype"
        } else if segment.shape() != first.shape() {
            "shape"
        } else {
            continue;
        };
        return Err(GatherError::Inconsistent {
            at: item_at(place, choice, *j),
            what,
            first: *first_index,
        });
    }
    // Payload order (the trainer's: later segments win where they overlap);
    // a position between the first and the last covered that nothing covers
    // is a gap.
    let in_order: Vec<&(usize, Segment<String>)> =
        segments.iter().filter(|(_, s)| s.rows() > 0).collect();
    let (union, gaps, _) = coverage(in_order.iter().map(|(_, s)| s.positions()));
    if let Some(missing) = gaps.first() {
        return Err(GatherError::Gap {
            choice,
            field: field.to_owned(),
            missing: *missing,
        });
    }
    let positions = match (union.first(), union.last()) {
        (Some(a), Some(b)) => Rows::new(a.start(), b.end()).unwrap_or(*a),
        _ => Rows::with_len(first.pos(), 0).unwrap_or(first.positions()),
    };
    Ok(Covered {
        in_order,
        positions,
        dtype,
        shape: first.shape().to_vec(),
    })
}

/// SGLang's rows of item `item` (the response, or an element of a batch
/// array), placed with rows of `layers x top_k` ids: `int32` rows of shape
/// `[layers, top_k]` at the positions the response's counts give (SPEC
/// section 10).
///
/// # Errors
///
/// [`GatherError::NoRows`] when the item has no SGLang rows; the merge's
/// errors for them ([`GatherError::Response`]) when they or their counts are
/// malformed or do not fit the row shape.
pub fn gather_sglang(
    response: &Value,
    item: usize,
    layers: u64,
    top_k: u64,
) -> Result<Gathered, GatherError> {
    let rows =
        crate::format::sglang::read_rows(response, item, layers, top_k)?.ok_or_else(|| {
            GatherError::NoRows {
                choice: item,
                field: ROUTED_EXPERTS.to_owned(),
            }
        })?;
    Ok(Gathered {
        positions: rows.positions,
        dtype: Dtype::Int32,
        shape: vec![layers, top_k],
        data: rows.ids.iter().flat_map(|id| id.to_le_bytes()).collect(),
        source: Source::Sglang,
    })
}

/// The union of `intervals` as disjoint intervals in order, the gaps between
/// them, and the positions covered more than once (merged).
pub(crate) fn coverage(intervals: impl Iterator<Item = Rows>) -> (Vec<Rows>, Vec<Rows>, Vec<Rows>) {
    let mut sorted: Vec<Rows> = intervals.filter(|r| !r.is_empty()).collect();
    sorted.sort_by_key(|r| (r.start(), r.end()));
    let mut union: Vec<Rows> = Vec::new();
    let mut overlaps: Vec<Rows> = Vec::new();
    for r in sorted {
        match union.last_mut() {
            Some(last) if r.start() <= last.end() => {
                if let Some(twice) = last.intersection(r) {
                    push_merged(&mut overlaps, twice);
                }
                *last = Rows::new(last.start(), last.end().max(r.end())).unwrap_or(*last);
            }
            _ => union.push(r),
        }
    }
    let gaps = union
        .windows(2)
        .filter_map(|w| match w {
            [a, b] => Rows::new(a.end(), b.start()),
            _ => None,
        })
        .collect();
    (union, gaps, overlaps)
}

/// Pushes `r` onto sorted disjoint `list`, merging it with the last interval
/// when they touch or overlap.
fn push_merged(list: &mut Vec<Rows>, r: Rows) {
    match list.last_mut() {
        Some(last) if r.start() <= last.end() => {
            *last = Rows::new(last.start(), last.end().max(r.end())).unwrap_or(*last);
        }
        _ => list.push(r),
    }
}

/// Choice `choice`'s inline rows, at the first inline place of the table
/// (`pd_stitch::places`) that has them, with that place: its own (held by
/// it or an object of it), or for the first choice those the response
/// holds (Dynamo's `nvext`), since the engine that writes them answers one
/// per response.
pub(super) fn inline_rows(response: &Value, choice: usize) -> Option<(&'static Place, &Value)> {
    format::every_place()
        .filter(|place| place.holds == Holds::Rows(RowsKind::Inline))
        .find_map(|place| Some((place, inline_at(response, choice, place)?)))
}

/// The inline rows at `place` of choice `choice` (the response's, for the
/// first choice only), when they are there and not null.
fn inline_at<'a>(response: &'a Value, choice: usize, place: &Place) -> Option<&'a Value> {
    if !place.per_choice() && choice != 0 {
        return None;
    }
    let object = response.get("choices").and_then(|c| c.get(choice));
    place
        .value_in(response, object)
        .filter(|value| !value.is_null())
}

/// Whether `item` of `response` (an element of a batch array, or the
/// response itself for item 0) has SGLang rows at `place`, not null.
fn sglang_at(response: &Value, item: usize, place: &Place) -> bool {
    let output = match response {
        Value::Array(items) => items.get(item),
        other => (item == 0).then_some(other),
    };
    output.is_some_and(|output| {
        let first = output.get("choices").and_then(|c| c.get(0));
        place
            .value_in(output, first)
            .is_some_and(|value| !value.is_null())
    })
}
