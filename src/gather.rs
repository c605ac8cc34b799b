//! Reading the rows a response points at, for verification.
//!
//! The merge never opens a file; this module does. [`gather`] reconstructs the
//! `(positions, *shape)` array of one field of one choice, in position order,
//! from the files its payload segments point at (rows by handle) or from its
//! inline `routed_experts`. [`check`] looks over a whole response without
//! stopping at the first problem: coverage, gaps, overlaps, dtype and shape
//! consistency, and whether every segment's bytes exist in its file.
//!
//! Both read with `std::fs`, resolving relative file names against a root
//! directory, and report a missing file, a short file or an unreadable range
//! as an error, never a panic. No metadata value makes them allocate: a read
//! is sized only after the file was found to hold the bytes.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Map, Value};

use crate::algebra::{Dtype, Rows, Segment};
use crate::error::{describe, Error, Location, Side};
use crate::fields::ROUTED_EXPERTS;
use crate::handle::{item_at, Keys};
use crate::inline::{self, Form, NpyError};
use crate::json::choice_at;

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
}

impl Gathered {
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

/// Where the files that payload segments name are read from (and, for the
/// simulator and tests, written to).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Store {
    /// Files on disk; relative names are resolved against this directory.
    Dir(PathBuf),
    /// Files in memory, by name.
    Memory(BTreeMap<String, Vec<u8>>),
}

impl Store {
    /// An empty in-memory store.
    pub fn memory() -> Store {
        Store::Memory(BTreeMap::new())
    }

    /// Writes (replaces) the file `name`. A directory store creates the
    /// directories it needs, and writes beside the file and renames it into
    /// place, so that a reader never sees it half-written, even while another
    /// process writes the same file.
    ///
    /// # Errors
    ///
    /// An I/O error of a directory store.
    pub fn write(&mut self, name: &str, bytes: Vec<u8>) -> std::io::Result<()> {
        match self {
            Store::Dir(root) => {
                let path = root.join(name);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                static NEXT: AtomicU64 = AtomicU64::new(0);
                let mut temp = path.clone().into_os_string();
                let unique = NEXT.fetch_add(1, Ordering::Relaxed);
                temp.push(format!(".{}.{unique}.tmp", std::process::id()));
                std::fs::write(&temp, bytes)?;
                std::fs::rename(&temp, &path).inspect_err(|_| {
                    let _ = std::fs::remove_file(&temp);
                })
            }
            Store::Memory(files) => {
                files.insert(name.to_owned(), bytes);
                Ok(())
            }
        }
    }

    /// Appends the bytes `range` of file `name` to `out`, after checking that
    /// the file holds them; `at` names the segment for errors.
    fn read(
        &self,
        name: &str,
        range: std::ops::Range<u64>,
        at: impl Fn() -> Location,
        out: &mut Vec<u8>,
    ) -> Result<(), GatherError> {
        let path = match self {
            Store::Dir(root) => root.join(name),
            Store::Memory(_) => PathBuf::from(name),
        };
        let io = |source| GatherError::Io {
            path: path.clone(),
            source,
        };
        let (len, mut file) = match self {
            Store::Dir(_) => {
                let file = File::open(&path).map_err(io)?;
                (file.metadata().map_err(io)?.len(), Some(file))
            }
            Store::Memory(files) => {
                let bytes = files.get(name).ok_or_else(|| {
                    io(std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "no such file in the store",
                    ))
                })?;
                (u64::try_from(bytes.len()).unwrap_or(u64::MAX), None)
            }
        };
        if len < range.end {
            return Err(GatherError::ShortFile {
                path,
                at: at(),
                needed: range.end,
                len,
            });
        }
        // The file holds these bytes, so the size is real data, not a claim.
        let bytes = range.end - range.start;
        let too_large = || GatherError::TooLarge { at: at(), bytes };
        let size = usize::try_from(bytes).map_err(|_| too_large())?;
        let start = out.len();
        out.try_reserve(size).map_err(|_| too_large())?;
        match (self, file.as_mut()) {
            (Store::Dir(_), Some(file)) => {
                out.resize(start + size, 0);
                file.seek(SeekFrom::Start(range.start)).map_err(io)?;
                file.read_exact(out.get_mut(start..).unwrap_or_default())
                    .map_err(io)?;
            }
            (Store::Memory(files), _) => {
                let from = usize::try_from(range.start).map_err(|_| too_large())?;
                let slice = files
                    .get(name)
                    .and_then(|b| b.get(from..from + size))
                    .unwrap_or_default();
                out.extend_from_slice(slice);
            }
            (Store::Dir(_), None) => {}
        }
        Ok(())
    }
}

/// Why rows could not be gathered.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GatherError {
    /// A value of the response is malformed (a segment, inline rows, the
    /// choice list).
    #[error(transparent)]
    Json(#[from] Error),
    /// The choice has no rows of the field, by handle or inline.
    #[error("response choices[{choice}]: no rows of field {field:?} (no payload segment, and no inline rows)")]
    NoRows {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
    },
    /// Positions between two segments that no segment covers.
    #[error("response choices[{choice}] {field}: positions {missing} are covered by no segment")]
    Gap {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
        /// The positions missing.
        missing: Rows,
    },
    /// Positions covered by more than one segment.
    #[error("response choices[{choice}] {field}: positions {overlap} are covered by two segments (payload[{first}] and payload[{second}])")]
    Overlap {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
        /// The positions covered twice.
        overlap: Rows,
        /// The payload index of one segment.
        first: usize,
        /// The payload index of the other.
        second: usize,
    },
    /// Segments of one field with different dtypes or row shapes.
    #[error("{at}: {what} differs from the field's first segment (payload[{first}])")]
    Inconsistent {
        /// The segment that differs.
        at: Location,
        /// `"dtype"` or `"shape"`.
        what: &'static str,
        /// The payload index of the field's first segment.
        first: usize,
    },
    /// A file that cannot be opened or read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file that ends before a segment's bytes do.
    #[error("{}: {len} bytes long, but {at} needs bytes up to {needed}", path.display())]
    ShortFile {
        /// The file.
        path: PathBuf,
        /// The segment.
        at: Location,
        /// The end of the segment's bytes.
        needed: u64,
        /// The file's length.
        len: u64,
    },
    /// Rows too large to hold in memory on this machine.
    #[error("{at}: {bytes} bytes of rows do not fit in memory")]
    TooLarge {
        /// The segment.
        at: Location,
        /// Their size.
        bytes: u64,
    },
}

/// Reconstructs the rows of `field` for `choice` of `response`, in position
/// order: from the files of its payload segments (relative names resolved
/// against `root`), or, when it has no segment of `field` and `field` is
/// `routed_experts`, from its inline rows.
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
/// [`GatherError`]: a malformed segment or choice, a gap or an overlap between
/// segments, segments that disagree on dtype or shape, a missing or short
/// file, or no rows at all.
pub fn gather(
    response: &Value,
    choice: usize,
    field: &str,
    root: &Path,
) -> Result<Gathered, GatherError> {
    gather_from(response, choice, field, &Store::Dir(root.to_owned()))
}

/// [`gather`], reading the files from `store` (a directory or memory).
///
/// # Errors
///
/// As [`gather`].
pub fn gather_from(
    response: &Value,
    choice: usize,
    field: &str,
    store: &Store,
) -> Result<Gathered, GatherError> {
    let object = choice_object(response, choice)?;
    let segments = field_segments(object, choice, field)?;
    if segments.is_empty() {
        let inline = object
            .get(ROUTED_EXPERTS)
            .filter(|v| !v.is_null() && field == ROUTED_EXPERTS);
        let Some(value) = inline else {
            return Err(GatherError::NoRows {
                choice,
                field: field.to_owned(),
            });
        };
        let (form, segment, data) = inline::read_rows(value, || {
            choice_at(Side::Response, choice).key(ROUTED_EXPERTS)
        })?;
        return Ok(Gathered {
            positions: segment.positions(),
            dtype: segment.dtype(),
            shape: segment.shape().to_vec(),
            data,
            source: Source::Inline(form),
        });
    }
    let layout = layout(&segments, choice, field)?;
    let mut data = Vec::new();
    for (j, segment) in &layout.in_order {
        store.read(
            segment.file(),
            segment.byte_range(),
            || item_at(Side::Response, choice, *j),
            &mut data,
        )?;
    }
    Ok(Gathered {
        positions: layout.positions,
        dtype: layout.dtype,
        shape: layout.shape,
        data,
        source: Source::Files,
    })
}

/// `response.choices[choice]`, which must be an object.
fn choice_object(response: &Value, choice: usize) -> Result<&Map<String, Value>, GatherError> {
    let choices = match response.get("choices") {
        Some(Value::Array(choices)) => choices,
        other => {
            return Err(Error::Structure {
                at: Location::root(Side::Response).key("choices"),
                expected: "an array",
                got: describe(other),
            }
            .into())
        }
    };
    match choices.get(choice) {
        Some(Value::Object(object)) => Ok(object),
        other => Err(Error::Structure {
            at: choice_at(Side::Response, choice),
            expected: "an object",
            got: describe(other),
        }
        .into()),
    }
}

/// Every valid segment of `field` in the choice's payload, with its payload
/// index, the file a string.
fn field_segments(
    choice: &Map<String, Value>,
    index: usize,
    field: &str,
) -> Result<Vec<(usize, Segment<String>)>, GatherError> {
    let items = match choice.get("payload") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(items)) => items,
        Some(other) => {
            return Err(Error::Structure {
                at: choice_at(Side::Response, index).key("payload"),
                expected: "an array or null",
                got: describe(Some(other)),
            }
            .into())
        }
    };
    let mut segments = Vec::new();
    for (j, segment) in segments_of(items, index, field) {
        segments.push((j, segment?));
    }
    Ok(segments)
}

/// Each payload item of `field` with its index, validated into a segment
/// whose file is a string (or the error that says why it is not one).
fn segments_of<'a>(
    items: &'a [Value],
    choice: usize,
    field: &'a str,
) -> impl Iterator<Item = (usize, Result<Segment<String>, Error>)> + 'a {
    items.iter().enumerate().filter_map(move |(j, item)| {
        let object = item.as_object()?;
        let keys = Keys::of(object).filter(|k| k.field() == field)?;
        let at = || item_at(Side::Response, choice, j);
        let segment = keys
            .segment(&at)
            .and_then(|segment| match object.get("file") {
                Some(Value::String(file)) => Ok(segment.map_file(|()| file.clone())),
                other => Err(Error::Structure {
                    at: at().key("file"),
                    expected: "a file name",
                    got: describe(other),
                }),
            });
        Some((j, segment))
    })
}

/// Segments checked to tile their positions: one dtype and shape, no gap, no
/// overlap, in position order (empty segments left out).
struct Layout<'s> {
    in_order: Vec<&'s (usize, Segment<String>)>,
    positions: Rows,
    dtype: Dtype,
    shape: Vec<u64>,
}

fn layout<'s>(
    segments: &'s [(usize, Segment<String>)],
    choice: usize,
    field: &str,
) -> Result<Layout<'s>, GatherError> {
    let Some((first_index, first)) = segments.first() else {
        return Err(GatherError::NoRows {
            choice,
            field: field.to_owned(),
        });
    };
    for (j, segment) in segments {
        let what = if segment.dtype() != first.dtype() {
            "dtype"
        } else if segment.shape() != first.shape() {
            "shape"
        } else {
            continue;
        };
        return Err(GatherError::Inconsistent {
            at: item_at(Side::Response, choice, *j),
            what,
            first: *first_index,
        });
    }
    let mut in_order: Vec<&(usize, Segment<String>)> =
        segments.iter().filter(|(_, s)| s.rows() > 0).collect();
    in_order.sort_by_key(|(_, s)| s.pos());
    for pair in in_order.windows(2) {
        let [(a_index, a), (b_index, b)] = pair else {
            continue;
        };
        if b.pos() > a.end() {
            return Err(GatherError::Gap {
                choice,
                field: field.to_owned(),
                missing: Rows::new(a.end(), b.pos()).unwrap_or(a.positions()),
            });
        }
        if b.pos() < a.end() {
            return Err(GatherError::Overlap {
                choice,
                field: field.to_owned(),
                overlap: a
                    .positions()
                    .intersection(b.positions())
                    .unwrap_or(b.positions()),
                first: *a_index,
                second: *b_index,
            });
        }
    }
    let positions = match (in_order.first(), in_order.last()) {
        (Some((_, a)), Some((_, b))) => Rows::new(a.pos(), b.end()).unwrap_or(a.positions()),
        _ => Rows::with_len(first.pos(), 0).unwrap_or(first.positions()),
    };
    Ok(Layout {
        in_order,
        positions,
        dtype: first.dtype(),
        shape: first.shape().to_vec(),
    })
}

// ----------------------------------------------------------------------------
// check
// ----------------------------------------------------------------------------

/// What [`check`] found in one response.
#[derive(Debug, Default)]
pub struct Report {
    /// One line per choice and field.
    pub fields: Vec<FieldReport>,
    /// Problems that belong to no field (the response's structure).
    pub problems: Vec<String>,
}

impl Report {
    /// Whether nothing is wrong.
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty() && self.fields.iter().all(|f| f.problems.is_empty())
    }
}

/// The rows of one field of one choice, as [`check`] found them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldReport {
    /// The choice.
    pub choice: usize,
    /// The field, e.g. `routed_experts`, or `routed_experts (inline npy)`.
    pub field: String,
    /// How many segments (1 for inline rows).
    pub segments: usize,
    /// The positions covered, as disjoint intervals in order.
    pub coverage: Vec<Rows>,
    /// Positions between the first and the last covered that nothing covers.
    pub gaps: Vec<Rows>,
    /// Positions covered more than once.
    pub overlaps: Vec<Rows>,
    /// The dtype, when every segment agrees.
    pub dtype: Option<Dtype>,
    /// The row shape, when every segment agrees.
    pub shape: Option<Vec<u64>>,
    /// What is wrong, one sentence each.
    pub problems: Vec<String>,
}

impl FieldReport {
    fn empty(choice: usize, field: String) -> FieldReport {
        FieldReport {
            choice,
            field,
            segments: 0,
            coverage: Vec::new(),
            gaps: Vec::new(),
            overlaps: Vec::new(),
            dtype: None,
            shape: None,
            problems: Vec::new(),
        }
    }
}

/// Looks over every choice of `response`: for each field of its payload
/// segments (and its inline `routed_experts`), the coverage, gaps and
/// overlaps, whether dtype and shape agree, whether the segments come in
/// position order (a trainer concatenates them in payload order), and whether
/// each segment's bytes exist in its file (relative names resolved against
/// `root`).
pub fn check(response: &Value, root: &Path) -> Report {
    let mut report = Report::default();
    let choices = match response.get("choices") {
        Some(Value::Array(choices)) => choices,
        other => {
            report.problems.push(format!(
                "response choices: must be an array, got {}",
                describe(other)
            ));
            return report;
        }
    };
    for (i, choice) in choices.iter().enumerate() {
        let Some(object) = choice.as_object() else {
            report.problems.push(format!(
                "response choices[{i}]: must be an object, got {}",
                describe(Some(choice))
            ));
            continue;
        };
        check_payload(object, i, root, &mut report);
        if let Some(value) = object.get(ROUTED_EXPERTS).filter(|v| !v.is_null()) {
            report.fields.push(check_inline(value, i));
        }
    }
    report
}

fn check_payload(choice: &Map<String, Value>, i: usize, root: &Path, report: &mut Report) {
    let items = match choice.get("payload") {
        None | Some(Value::Null) => return,
        Some(Value::Array(items)) => items,
        Some(other) => {
            report.problems.push(format!(
                "response choices[{i}].payload: must be an array or null, got {}",
                describe(Some(other))
            ));
            return;
        }
    };
    let mut fields: Vec<&str> = Vec::new();
    for item in items {
        if let Some(field) = item.get("field").and_then(Value::as_str) {
            if !fields.contains(&field) {
                fields.push(field);
            }
        }
    }
    for field in fields {
        report.fields.push(check_field(items, i, field, root));
    }
}

fn check_field(items: &[Value], i: usize, field: &str, root: &Path) -> FieldReport {
    let mut out = FieldReport::empty(i, field.to_owned());
    let mut segments: Vec<(usize, Segment<String>)> = Vec::new();
    for (j, segment) in segments_of(items, i, field) {
        out.segments += 1;
        match segment {
            Ok(segment) => segments.push((j, segment)),
            Err(err) => out.problems.push(err.to_string()),
        }
    }
    if let Some((_, first)) = segments.first() {
        let same_dtype = segments.iter().all(|(_, s)| s.dtype() == first.dtype());
        let same_shape = segments.iter().all(|(_, s)| s.shape() == first.shape());
        out.dtype = same_dtype.then(|| first.dtype());
        out.shape = same_shape.then(|| first.shape().to_vec());
        if !same_dtype {
            out.problems
                .push(format!("choices[{i}] {field}: segments disagree on dtype"));
        }
        if !same_shape {
            out.problems.push(format!(
                "choices[{i}] {field}: segments disagree on row shape"
            ));
        }
    }
    let (coverage, gaps, overlaps) = coverage(segments.iter().map(|(_, s)| s.positions()));
    if !gaps.is_empty() {
        out.problems
            .push(format!("choices[{i}] {field}: gaps at {}", list(&gaps)));
    }
    if !overlaps.is_empty() {
        out.problems.push(format!(
            "choices[{i}] {field}: positions covered twice at {}",
            list(&overlaps)
        ));
    }
    let non_empty: Vec<&(usize, Segment<String>)> =
        segments.iter().filter(|(_, s)| s.rows() > 0).collect();
    if non_empty
        .windows(2)
        .any(|w| matches!(w, [(_, a), (_, b)] if b.pos() < a.pos()))
    {
        out.problems.push(format!(
            "choices[{i}] {field}: segments are not in position order, so concatenating them in payload order misplaces rows"
        ));
    }
    for (j, segment) in &segments {
        if let Err(problem) = check_file(segment, root, || item_at(Side::Response, i, *j)) {
            out.problems.push(problem);
        }
    }
    out.coverage = coverage;
    out.gaps = gaps;
    out.overlaps = overlaps;
    out
}

fn check_inline(value: &Value, i: usize) -> FieldReport {
    let mut out = FieldReport::empty(i, format!("{ROUTED_EXPERTS} (inline)"));
    out.segments = 1;
    match inline::read_rows(value, || choice_at(Side::Response, i).key(ROUTED_EXPERTS)) {
        Ok((form, segment, _)) => {
            out.field = format!(
                "{ROUTED_EXPERTS} (inline {})",
                if form == Form::Compact {
                    "compact"
                } else {
                    "npy"
                }
            );
            out.coverage = vec![segment.positions()]
                .into_iter()
                .filter(|r| !r.is_empty())
                .collect();
            out.dtype = Some(segment.dtype());
            out.shape = Some(segment.shape().to_vec());
        }
        Err(err) => out.problems.push(err.to_string()),
    }
    out
}

/// Whether the segment's file exists and holds its bytes.
fn check_file(
    segment: &Segment<String>,
    root: &Path,
    at: impl Fn() -> Location,
) -> Result<(), String> {
    let path = root.join(segment.file());
    let len = std::fs::metadata(&path)
        .map_err(|err| format!("{}: file {}: {err}", at(), path.display()))?
        .len();
    let needed = segment.byte_range().end;
    if len < needed {
        return Err(format!(
            "{}: file {} is {len} bytes long, but the segment needs bytes up to {needed}",
            at(),
            path.display()
        ));
    }
    Ok(())
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

fn list(intervals: &[Rows]) -> String {
    intervals
        .iter()
        .map(Rows::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

impl fmt::Display for Report {
    /// A table, one line per choice and field, then the problems.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<6}  {:<30}  {:>8}  {:<24}  {:<8}  {:<10}  {:<13}  status",
            "choice", "field", "segments", "coverage", "dtype", "shape", "gaps/overlaps"
        )?;
        for r in &self.fields {
            let coverage = if r.coverage.is_empty() {
                "-".to_owned()
            } else {
                list(&r.coverage)
            };
            let dtype = r
                .dtype
                .map_or_else(|| "mixed".to_owned(), |d| d.to_string());
            let shape = r
                .shape
                .as_ref()
                .map_or_else(|| "mixed".to_owned(), |s| format!("{s:?}"));
            let status = if r.problems.is_empty() {
                "ok".to_owned()
            } else {
                format!("{} problem(s)", r.problems.len())
            };
            writeln!(
                f,
                "{:<6}  {:<30}  {:>8}  {:<24}  {:<8}  {:<10}  {:<13}  {status}",
                r.choice,
                r.field,
                r.segments,
                coverage,
                dtype,
                shape,
                format!("{}/{}", r.gaps.len(), r.overlaps.len()),
            )?;
        }
        for problem in self
            .problems
            .iter()
            .chain(self.fields.iter().flat_map(|r| &r.problems))
        {
            writeln!(f, "problem: {problem}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// A `uint8` segment of `field` whose rows are `width` bytes wide.
    fn segment(field: &str, file: &str, offset: u64, pos: u64, rows: u64, width: u64) -> Value {
        json!({"field": field, "file": file, "offset": offset, "pos": pos, "rows": rows,
               "dtype": "uint8", "shape": [width]})
    }

    fn one_choice(payload: Vec<Value>) -> Value {
        json!({"choices": [{"payload": payload}]})
    }

    /// A memory store whose file `name` holds the bytes `0, 1, 2, ...`.
    fn counting_store(name: &str, len: u8) -> Store {
        let mut store = Store::memory();
        store.write(name, (0..len).collect()).unwrap();
        store
    }

    /// A fresh directory for one test.
    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "pd-stitch-gather-unit-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// Two segments listed against position order: the rows come back in
    /// position order, and `row(x)` is the row of position `x` (row bytes =
    /// data length / positions), `None` outside `[5, 8)`.
    #[test]
    fn rows_come_back_in_position_order_and_answer_by_position() {
        let response = one_choice(vec![
            segment(ROUTED_EXPERTS, "a.bin", 0, 7, 1, 2),
            json!({"field": "sampling_mask", "file": "m.bin"}),
            segment(ROUTED_EXPERTS, "a.bin", 10, 5, 2, 2),
        ]);
        let rows = gather_from(&response, 0, ROUTED_EXPERTS, &counting_store("a.bin", 20)).unwrap();
        assert_eq!(rows.positions(), Rows::new(5, 8).unwrap());
        assert_eq!(rows.dtype(), Dtype::Uint8);
        assert_eq!(rows.row_shape(), [2]);
        assert_eq!(rows.shape(), [3, 2]);
        assert_eq!(rows.source(), Source::Files);
        assert_eq!(rows.data(), [10, 11, 12, 13, 0, 1]);
        assert_eq!(rows.row(5), Some(&[10, 11][..]));
        assert_eq!(rows.row(6), Some(&[12, 13][..]));
        assert_eq!(rows.row(7), Some(&[0, 1][..]));
        for outside in [0, 4, 8, u64::MAX] {
            assert_eq!(rows.row(outside), None, "position {outside}");
        }
    }

    /// The FNV-1a 64 test vectors of its specification: the empty input,
    /// `a`, `foobar`.
    #[test]
    fn checksum_is_fnv_1a_64() {
        let mut store = Store::memory();
        store.write("t.bin", b"foobar".to_vec()).unwrap();
        let checksum = |offset: u64, rows: u64| {
            let response = one_choice(vec![segment(ROUTED_EXPERTS, "t.bin", offset, 0, rows, 1)]);
            gather_from(&response, 0, ROUTED_EXPERTS, &store)
                .unwrap()
                .checksum()
        };
        assert_eq!(checksum(0, 0), 0xcbf2_9ce4_8422_2325);
        assert_eq!(checksum(4, 1), 0xaf63_dc4c_8601_ec8c); // "a", the fifth byte
        assert_eq!(checksum(0, 6), 0x8594_4171_f739_67e8); // "foobar"
    }

    /// A file must hold every byte of a segment: one byte short is a
    /// `ShortFile` error, the exact length or more is read.
    #[test]
    fn a_file_one_byte_short_is_refused_in_memory_and_on_disk() {
        let dir = scratch("short");
        for len in [5u8, 6, 7] {
            let mut memory = counting_store("s.bin", len);
            let mut disk = Store::Dir(dir.clone());
            disk.write("s.bin", (0..len).collect()).unwrap();
            // Bytes [2, 6): 2 rows of 2 bytes from offset 2.
            let response = one_choice(vec![segment(ROUTED_EXPERTS, "s.bin", 2, 0, 2, 2)]);
            for store in [&mut memory, &mut disk] {
                let got = gather_from(&response, 0, ROUTED_EXPERTS, store);
                if len < 6 {
                    assert!(
                        matches!(
                            got,
                            Err(GatherError::ShortFile {
                                needed: 6,
                                len: 5,
                                ..
                            })
                        ),
                        "{got:?}"
                    );
                } else {
                    assert_eq!(got.unwrap().data(), [2, 3, 4, 5], "len {len}");
                }
            }
        }
        std::fs::remove_dir_all(dir).unwrap();
    }

    /// Empty segments hold no position: wherever they sit, and whatever file
    /// they name, they make no gap, no overlap and no read.
    #[test]
    fn empty_segments_are_left_out() {
        let response = one_choice(vec![
            segment(ROUTED_EXPERTS, "a.bin", 4, 0, 2, 2),
            segment(ROUTED_EXPERTS, "nowhere.bin", 0, 1, 0, 2),
            segment(ROUTED_EXPERTS, "nowhere.bin", 0, 9, 0, 2),
        ]);
        let rows = gather_from(&response, 0, ROUTED_EXPERTS, &counting_store("a.bin", 8)).unwrap();
        assert_eq!(rows.positions(), Rows::new(0, 2).unwrap());
        assert_eq!(rows.data(), [4, 5, 6, 7]);
    }

    /// Inline rows stand for the field `routed_experts` only, and only when
    /// not null.
    #[test]
    fn inline_rows_are_gathered_for_routed_experts_only() {
        // Compact rows of [1, 2, 3, 4]: 2 positions from 3, 1 x 2 per row.
        let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
        let response = json!({"choices": [{"routed_experts": compact}]});
        let rows = gather_from(&response, 0, ROUTED_EXPERTS, &Store::memory()).unwrap();
        assert_eq!(rows.source(), Source::Inline(Form::Compact));
        assert_eq!(rows.positions(), Rows::new(3, 5).unwrap());
        assert_eq!(rows.row_shape(), [1, 2]);
        assert_eq!(rows.row(4), Some(&[3, 4][..]));
        let other = gather_from(&response, 0, "sampling_mask", &Store::memory());
        assert!(
            matches!(&other, Err(GatherError::NoRows { choice: 0, field }) if field == "sampling_mask"),
            "{other:?}"
        );
        let null = json!({"choices": [{"routed_experts": null}]});
        let none = gather_from(&null, 0, ROUTED_EXPERTS, &Store::memory());
        assert!(matches!(none, Err(GatherError::NoRows { .. })), "{none:?}");
    }

    /// `check` of one choice whose files are written to a scratch directory.
    fn check_one(name: &str, payload: Vec<Value>, files: &[(&str, u8)]) -> FieldReport {
        let dir = scratch(name);
        let mut store = Store::Dir(dir.clone());
        for &(file, len) in files {
            store.write(file, (0..len).collect()).unwrap();
        }
        let report = check(&one_choice(payload), &dir);
        std::fs::remove_dir_all(dir).unwrap();
        assert!(report.problems.is_empty(), "{report}");
        assert_eq!(report.fields.len(), 1, "{report}");
        report.fields.into_iter().next().unwrap()
    }

    /// Segments in payload order against position order are a problem;
    /// an empty segment anywhere is not (it adds no row to concatenate), and
    /// it counts as a segment but covers nothing.
    #[test]
    fn check_counts_segments_and_flags_payload_order() {
        let reversed = check_one(
            "order",
            vec![
                segment(ROUTED_EXPERTS, "a.bin", 4, 2, 2, 2),
                segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 2),
            ],
            &[("a.bin", 8)],
        );
        assert_eq!(reversed.segments, 2);
        assert_eq!(reversed.coverage, [Rows::new(0, 4).unwrap()]);
        assert!(reversed.gaps.is_empty() && reversed.overlaps.is_empty());
        assert_eq!(
            reversed.problems,
            ["choices[0] routed_experts: segments are not in position order, so concatenating them in payload order misplaces rows"]
        );
        let with_empty = check_one(
            "order-empty",
            vec![
                segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 2),
                segment(ROUTED_EXPERTS, "a.bin", 0, 9, 0, 2),
                segment(ROUTED_EXPERTS, "a.bin", 4, 2, 2, 2),
            ],
            &[("a.bin", 8)],
        );
        assert_eq!(with_empty.segments, 3);
        assert_eq!(with_empty.coverage, [Rows::new(0, 4).unwrap()]);
        assert!(with_empty.gaps.is_empty() && with_empty.overlaps.is_empty());
        assert!(with_empty.problems.is_empty(), "{:?}", with_empty.problems);
    }

    /// Two segments that start at the same position overlap, but neither
    /// comes before the other: one problem, not two.
    #[test]
    fn check_reports_segments_at_one_position_as_an_overlap_only() {
        let field = check_one(
            "same-pos",
            vec![
                segment(ROUTED_EXPERTS, "a.bin", 0, 0, 2, 1),
                segment(ROUTED_EXPERTS, "a.bin", 0, 0, 1, 1),
            ],
            &[("a.bin", 2)],
        );
        assert_eq!(field.overlaps, [Rows::new(0, 1).unwrap()]);
        assert_eq!(
            field.problems,
            ["choices[0] routed_experts: positions covered twice at [0, 1)"]
        );
    }

    /// A file must be at least as long as a segment's last byte.
    #[test]
    fn check_compares_each_file_with_the_bytes_its_segments_need() {
        // Bytes [2, 6) of each file.
        let payload: Vec<Value> = ["short.bin", "exact.bin", "long.bin"]
            .iter()
            .zip([0, 2, 4])
            .map(|(file, pos)| segment(ROUTED_EXPERTS, file, 2, pos, 2, 2))
            .collect();
        let field = check_one(
            "lengths",
            payload,
            &[("short.bin", 5), ("exact.bin", 6), ("long.bin", 7)],
        );
        assert_eq!(field.problems.len(), 1, "{:?}", field.problems);
        let problem = &field.problems[0];
        assert!(
            problem.starts_with("response choices[0].payload[0]: file ")
                && problem
                    .ends_with("short.bin is 5 bytes long, but the segment needs bytes up to 6"),
            "{problem}"
        );
    }

    /// Inline rows: one segment covering `[start, start + seq)`; null rows
    /// are no rows.
    #[test]
    fn check_reports_inline_rows_and_ignores_null_ones() {
        let compact = json!({"data": "AQIDBA==", "shape": [2, 1, 2], "start": 3, "dtype": "uint8"});
        let report = check(
            &json!({"choices": [{"routed_experts": compact}]}),
            Path::new("."),
        );
        assert!(report.is_ok(), "{report}");
        let [field] = &report.fields[..] else {
            panic!("{report}");
        };
        assert_eq!(field.field, "routed_experts (inline compact)");
        assert_eq!(field.segments, 1);
        assert_eq!(field.coverage, [Rows::new(3, 5).unwrap()]);
        assert_eq!(field.dtype, Some(Dtype::Uint8));
        assert_eq!(field.shape, Some(vec![1, 2]));
        let null = check(
            &json!({"choices": [{"routed_experts": null}]}),
            Path::new("."),
        );
        assert!(null.is_ok() && null.fields.is_empty(), "{null}");
    }

    /// Runs of consecutive positions of `set`, as intervals.
    fn runs(set: impl Iterator<Item = u64>) -> Vec<Rows> {
        let mut out: Vec<Rows> = Vec::new();
        for x in set {
            match out.last_mut() {
                Some(last) if last.end() == x => *last = Rows::new(last.start(), x + 1).unwrap(),
                _ => out.push(Rows::new(x, x + 1).unwrap()),
            }
        }
        out
    }

    proptest! {
        /// `coverage` against a count per position: the union is the runs of
        /// positions covered at least once, the overlaps those covered at
        /// least twice, the gaps those between the first and the last
        /// covered that nothing covers. Empty intervals count for nothing.
        #[test]
        fn coverage_agrees_with_counting_each_position(
            intervals in prop::collection::vec((0u64..12, 0u64..5), 0..6),
        ) {
            let mut count = [0u32; 16];
            for &(start, len) in &intervals {
                for x in start..start + len {
                    count[x as usize] += 1;
                }
            }
            let covered = |least: u32| (0..16u64).filter(move |&x| count[x as usize] >= least);
            let union = runs(covered(1));
            let gaps = match (covered(1).next(), covered(1).next_back()) {
                (Some(first), Some(last)) => {
                    runs((first..=last).filter(|&x| count[x as usize] == 0))
                }
                _ => Vec::new(),
            };
            let rows = intervals.iter().map(|&(start, len)| Rows::with_len(start, len).unwrap());
            let got = coverage(rows);
            prop_assert_eq!(got, (union, gaps, runs(covered(2))));
        }
    }
}
