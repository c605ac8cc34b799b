//! The trainer's reading of a field through a [`Store`]: [`read_field`] on
//! a payload's segments, [`read_choice_field`] on a response's choice. The
//! reads of one phase are grouped by file and, when they span several
//! files, made concurrently (the trainer's reader does the same).

use serde_json::Value;

use crate::algebra::Segment;
use crate::error::{Location, Side};
use crate::format::inline;
use crate::reading::{read_segments, ByteRequest, FieldTable, ReadError, ReadOptions, Reading};
use crate::response::fields::ROUTED_EXPERTS;

use super::read::{choice_object, inline_rows, item_at, payload_at, segments_of};
use super::{GatherError, Store};

/// Files read by more threads than one when a phase spans at least this
/// many files.
const CONCURRENT_FROM: usize = 4;
/// At most this many reading threads.
const THREADS: usize = 4;

/// Reads `segments` (in payload order; those of other fields are left out)
/// as the trainer reads `field` over `[lo, hi)`, the files through `store`
/// (so only where it may read). `at(k)` names the `k`-th segment of the
/// list in errors.
///
/// `Ok(None)` when no segment carries `field`.
///
/// # Errors
///
/// [`GatherError::Misread`] for what makes the trainer raise (or what a
/// strict reading refuses), and the store's errors ([`GatherError::Outside`],
/// [`GatherError::ShortFile`], ...).
#[allow(clippy::too_many_arguments)]
pub fn read_field(
    segments: &[Segment<String>],
    field: &str,
    lo: u64,
    hi: u64,
    table: &FieldTable,
    options: ReadOptions,
    store: &Store,
    at: &(dyn Fn(usize) -> Location + Sync),
) -> Result<Option<Reading>, GatherError> {
    let of_field: Vec<(usize, &Segment<String>)> = segments
        .iter()
        .enumerate()
        .filter(|(_, s)| s.field() == field)
        .collect();
    if of_field.is_empty() {
        return Ok(None);
    }
    let spec = table.get(field).ok_or_else(|| GatherError::Misread {
        field: field.to_owned(),
        message: ReadError::<std::io::Error>::UnknownField(field.to_owned()).to_string(),
    })?;
    let list: Vec<Segment<String>> = of_field.iter().map(|(_, s)| (*s).clone()).collect();
    let index = |k: usize| of_field.get(k).map_or(k, |(j, _)| *j);
    let read =
        |requests: &[ByteRequest<'_, String>]| read_grouped(requests, store, &|k| at(index(k)));
    read_segments(spec, &list, lo, hi, options, read).map_err(|err| match err {
        ReadError::Source(inner) => inner,
        other => GatherError::Misread {
            field: field.to_owned(),
            message: other.to_string(),
        },
    })
}

/// [`read_field`] on `response.choices[choice].payload`, every segment of
/// `field` validated first; for `routed_experts` without a segment, the
/// choice's inline rows, as one segment at their positions.
///
/// # Errors
///
/// As [`read_field`], and [`GatherError::Response`] for a malformed segment or
/// choice.
pub fn read_choice_field(
    response: &Value,
    choice: usize,
    field: &str,
    lo: u64,
    hi: u64,
    store: &Store,
) -> Result<Option<Reading>, GatherError> {
    choice_object(response, choice)?;
    // Read leniently: a payload that is not an array has no segments.
    let payload = payload_at(response, choice).ok().flatten();
    let (place, items) = payload.map_or((None, &[][..]), |(place, items)| (Some(place), items));
    let mut list = Vec::new();
    let mut indices = Vec::new();
    for (j, segment) in place
        .into_iter()
        .flat_map(|place| segments_of(items, choice, field, place))
    {
        list.push(segment?);
        indices.push(j);
    }
    let table = FieldTable::trainer();
    if list.is_empty() && field == ROUTED_EXPERTS {
        // Inline rows: one segment held in memory.
        if let Some((place, value)) = inline_rows(response, choice) {
            let (_, segment, data) = inline::read_rows(response, choice, place, value)?;
            let spec = table.get(field).ok_or_else(|| GatherError::NoRows {
                choice,
                field: field.to_owned(),
            })?;
            let memory = |requests: &[ByteRequest<'_, ()>]| -> Result<Vec<Vec<u8>>, GatherError> {
                Ok(requests
                    .iter()
                    .map(|r| {
                        let (a, b) = (r.range.start as usize, r.range.end as usize);
                        data.get(a..b).map(<[u8]>::to_vec).unwrap_or_default()
                    })
                    .collect())
            };
            return read_segments(spec, &[segment], lo, hi, ReadOptions::default(), memory)
                .map_err(|err| match err {
                    ReadError::Source(inner) => inner,
                    other => GatherError::Misread {
                        field: field.to_owned(),
                        message: other.to_string(),
                    },
                });
        }
    }
    let at = |k: usize| {
        let j = indices.get(k).copied().unwrap_or(k);
        place.map_or_else(
            || Location::root(Side::Response),
            |place| item_at(place, choice, j),
        )
    };
    read_field(
        &list,
        field,
        lo,
        hi,
        &table,
        ReadOptions::default(),
        store,
        &at,
    )
}

/// Answers `requests` in order, each file's reads together, files
/// concurrently when there are enough of them.
#[allow(clippy::type_complexity)]
fn read_grouped(
    requests: &[ByteRequest<'_, String>],
    store: &Store,
    at: &(dyn Fn(usize) -> Location + Sync),
) -> Result<Vec<Vec<u8>>, GatherError> {
    let mut files: Vec<(&str, Vec<usize>)> = Vec::new();
    for (k, r) in requests.iter().enumerate() {
        match files.iter_mut().find(|(f, _)| *f == r.file.as_str()) {
            Some((_, ks)) => ks.push(k),
            None => files.push((r.file.as_str(), vec![k])),
        }
    }
    let one_file = |(file, ks): &(&str, Vec<usize>)| -> Result<Vec<(usize, Vec<u8>)>, GatherError> {
        let ranges: Vec<std::ops::Range<u64>> =
            ks.iter().map(|&k| requests[k].range.clone()).collect();
        let data = store.read_ranges(file, &ranges, |i| at(requests[ks[i]].segment))?;
        Ok(ks.iter().copied().zip(data).collect())
    };
    let mut answers: Vec<Vec<u8>> = vec![Vec::new(); requests.len()];
    let groups: Vec<Result<Vec<(usize, Vec<u8>)>, GatherError>> = if files.len() < CONCURRENT_FROM {
        files.iter().map(one_file).collect()
    } else {
        let chunk = files.len().div_ceil(THREADS);
        std::thread::scope(|scope| {
            let handles: Vec<_> = files
                .chunks(chunk)
                .map(|part| scope.spawn(move || part.iter().map(one_file).collect::<Vec<_>>()))
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().unwrap_or_default())
                .collect()
        })
    };
    for group in groups {
        for (k, bytes) in group? {
            if let Some(slot) = answers.get_mut(k) {
                *slot = bytes;
            }
        }
    }
    Ok(answers)
}
