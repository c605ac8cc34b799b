//! The trainer's reading: what an RL trainer makes of a field's segments.
//!
//! A by-handle payload is read by the trainer, and prime-rl's reader (the
//! facts are in `docs/SPEC.md`, section 5a) is not a concatenation of
//! segments. For a window of positions `[lo, hi)` it starts from an array
//! full of the field's *fill*, and writes each segment's rows, clipped to the
//! window, in payload order: **later segments win**, positions no segment
//! covers keep the fill, a narrower row fills only the leading entries.
//! Fixed-width fields store their rows; ragged ones (the sampling masks and
//! their logprobs) store CSR: `rows + 1` uint32 file offsets, the values
//! after them.
//!
//! This module is that reader, on plain values: a [`FieldTable`] says what
//! each field is ([`FieldSpec`]: fixed or CSR, and its fill),
//! [`read_segments`] reads one field's segments through a byte source the
//! caller gives (files, memory), and [`Reading`] is the array it returns,
//! exactly the trainer's: its element type, shape, values and fill. With
//! [`Strictness::Strict`] the reading refuses gaps and overlaps instead.
//!
//! Nothing here opens a file: [`gather::read_field`](crate::gather) reads
//! through a confined store, the Python binding concurrently.

use std::ops::Range;

use crate::algebra::{bf16_to_f64, f16_to_f64, Dtype, Rows, Segment};

#[cfg(test)]
mod tests;

/// How a field's rows are stored (not to be confused with a payload's
/// layout, which strict mode checks).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Storage {
    /// Each row is `shape` elements of the segment's `dtype`, back to back.
    Fixed,
    /// Rows of varying width: the segment's bytes are `rows + 1` uint32 file
    /// offsets (where each row's values start, then where the last one's
    /// end), and the values are int32 (int fill) or float32 (float fill).
    /// The segment's `dtype` and `shape` are not read.
    Csr,
}

/// The value at positions no segment covers (and the padding of narrower
/// rows). Its kind also fixes a CSR field's values: int32 or float32.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Fill {
    /// An integer fill: `0` for `routed_experts`, `-1` for `sampling_mask`.
    Int(i32),
    /// A float fill: `0.0` for `routed_expert_weights`, `-inf` for
    /// `sampling_mask_logprobs`.
    Float(f32),
}

impl Fill {
    /// The element type of a CSR field with this fill.
    pub fn values(self) -> Values {
        match self {
            Fill::Int(_) => Values::Int32,
            Fill::Float(_) => Values::Float32,
        }
    }
}

/// One field as the trainer knows it.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldSpec {
    /// The field's name, as payload segments give it.
    pub name: String,
    /// Fixed-width or CSR.
    pub storage: Storage,
    /// What uncovered positions hold.
    pub fill: Fill,
}

impl FieldSpec {
    /// A field stored as `storage`, with `fill`.
    pub fn new(name: impl Into<String>, storage: Storage, fill: Fill) -> FieldSpec {
        FieldSpec {
            name: name.into(),
            storage,
            fill,
        }
    }
}

/// The fields a trainer reads, by name.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldTable {
    fields: Vec<FieldSpec>,
}

/// `routed_experts`: fixed, fill 0.
pub const ROUTED_EXPERTS: &str = crate::response::fields::ROUTED_EXPERTS;
/// `routed_expert_weights`: fixed, fill 0.0.
pub const ROUTED_EXPERT_WEIGHTS: &str = crate::response::fields::ROUTED_EXPERT_WEIGHTS;
/// `sampling_mask`: CSR int32, fill -1.
pub const SAMPLING_MASK: &str = "sampling_mask";
/// `sampling_mask_logprobs`: CSR float32, fill -inf.
pub const SAMPLING_MASK_LOGPROBS: &str = "sampling_mask_logprobs";

impl FieldTable {
    /// prime-rl's table: `routed_experts` (fixed, `0`),
    /// `routed_expert_weights` (fixed, `0.0`), `sampling_mask` (CSR, `-1`),
    /// `sampling_mask_logprobs` (CSR, `-inf`).
    pub fn trainer() -> FieldTable {
        FieldTable {
            fields: vec![
                FieldSpec::new(ROUTED_EXPERTS, Storage::Fixed, Fill::Int(0)),
                FieldSpec::new(ROUTED_EXPERT_WEIGHTS, Storage::Fixed, Fill::Float(0.0)),
                FieldSpec::new(SAMPLING_MASK, Storage::Csr, Fill::Int(-1)),
                FieldSpec::new(
                    SAMPLING_MASK_LOGPROBS,
                    Storage::Csr,
                    Fill::Float(f32::NEG_INFINITY),
                ),
            ],
        }
    }

    /// The table with `spec` added (replacing a field of the same name).
    #[must_use]
    pub fn with(mut self, spec: FieldSpec) -> FieldTable {
        self.fields.retain(|f| f.name != spec.name);
        self.fields.push(spec);
        self
    }

    /// The field called `name`.
    pub fn get(&self, name: &str) -> Option<&FieldSpec> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// Every field, in the table's order.
    pub fn fields(&self) -> impl Iterator<Item = &FieldSpec> {
        self.fields.iter()
    }
}

impl Default for FieldTable {
    fn default() -> FieldTable {
        FieldTable::trainer()
    }
}

/// The element type of a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Values {
    /// `int32`.
    Int32,
    /// `float32`.
    Float32,
}

impl Values {
    /// The NumPy name: `"int32"` or `"float32"`.
    pub fn name(self) -> &'static str {
        match self {
            Values::Int32 => "int32",
            Values::Float32 => "float32",
        }
    }

    /// As a [`Dtype`].
    pub fn dtype(self) -> Dtype {
        match self {
            Values::Int32 => Dtype::Int32,
            Values::Float32 => Dtype::Float32,
        }
    }
}

/// The trainer's array for one field over `[lo, hi)`: `(hi - lo, *row)`
/// elements of [`Values`], little-endian, C order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reading {
    values: Values,
    shape: Vec<u64>,
    data: Vec<u8>,
}

impl Reading {
    /// The element type.
    pub fn values(&self) -> Values {
        self.values
    }

    /// The array's shape, `(hi - lo, *row)`.
    pub fn shape(&self) -> &[u64] {
        &self.shape
    }

    /// The shape of one row.
    pub fn row_shape(&self) -> &[u64] {
        self.shape.get(1..).unwrap_or_default()
    }

    /// The elements' bytes (4 each, little-endian), C order.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The bytes, taken out without a copy.
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// The bytes of row `k` (position `lo + k`).
    pub fn row(&self, k: u64) -> Option<&[u8]> {
        let per_row = 4 * usize::try_from(self.row_shape().iter().product::<u64>()).ok()?;
        let from = usize::try_from(k).ok()?.checked_mul(per_row)?;
        self.data.get(from..from.checked_add(per_row)?)
    }
}

/// Whether the reading is the trainer's, or refuses what it would paper
/// over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strictness {
    /// Exactly the trainer's reading: later segments win, uncovered
    /// positions hold the fill.
    #[default]
    Trainer,
    /// The trainer's reading, refused when the field's non-empty segments,
    /// clipped to the window, leave a gap between them
    /// ([`ReadError::Gap`]) or cover a position twice
    /// ([`ReadError::Overlap`]).
    Strict,
}

/// What to read, beyond the segments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// The trainer's reading or the strict one.
    pub strictness: Strictness,
    /// The largest array to allocate, in bytes (default 1 GiB): metadata
    /// alone may claim any size.
    pub max_bytes: u64,
}

impl Default for ReadOptions {
    fn default() -> ReadOptions {
        ReadOptions {
            strictness: Strictness::Trainer,
            max_bytes: 1 << 30,
        }
    }
}

/// A read the model asks of its byte source: bytes `range` of `file`, for
/// the `segment`-th segment of the list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ByteRequest<'a, F> {
    /// The segment's index in the list given.
    pub segment: usize,
    /// Its file.
    pub file: &'a F,
    /// The bytes.
    pub range: Range<u64>,
}

/// Why the trainer's reader fails on a list (it raises), or why the strict
/// reading refuses it. Segment indices are into the list given.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError<E> {
    /// The field is not in the table (the trainer: `KeyError`).
    #[error("field {0:?} is not in the trainer's field table")]
    UnknownField(String),
    /// `hi < lo` (the trainer: negative dimensions).
    #[error("window [{lo}, {hi}) ends before it starts")]
    Window {
        /// The window's start.
        lo: u64,
        /// Its end.
        hi: u64,
    },
    /// A dtype NumPy cannot name (`bfloat16`, without `ml_dtypes`).
    #[error("segment {segment}: NumPy has no dtype {dtype}")]
    Dtype {
        /// The segment.
        segment: usize,
        /// Its dtype.
        dtype: Dtype,
    },
    /// A segment of higher rank than the output, whose rank is the
    /// smallest of the field's (the trainer: too many indices).
    #[error("segment {segment}: rows of rank {rank}, but the field's output has rank {output}")]
    Rank {
        /// The segment.
        segment: usize,
        /// Its rank.
        rank: usize,
        /// The output's row rank.
        output: usize,
    },
    /// CSR offsets the trainer cannot read: a window whose values end
    /// before they start, a byte count not a whole number of values, or a
    /// value count other than the row counts say.
    #[error("segment {segment}: CSR offsets {start}..{end} do not hold the values its rows count")]
    Csr {
        /// The segment.
        segment: usize,
        /// Where its window's values start.
        start: i64,
        /// Where they end.
        end: i64,
    },
    /// The array would be larger than [`ReadOptions::max_bytes`].
    #[error("the reading would take {bytes} bytes, more than allowed")]
    TooLarge {
        /// Its size (saturated).
        bytes: u64,
    },
    /// Strict: positions inside the covered range that no segment covers.
    #[error("positions {missing} are covered by no segment")]
    Gap {
        /// The first run of missing positions.
        missing: Rows,
    },
    /// Strict: positions two segments cover.
    #[error("positions {overlap} are covered by segments {first} and {second}")]
    Overlap {
        /// The positions (of the first overlap found).
        overlap: Rows,
        /// The earlier segment.
        first: usize,
        /// The later one.
        second: usize,
    },
    /// The byte source failed (a missing or short file, say).
    #[error(transparent)]
    Source(E),
}

/// Reads `segments` (one field's, in payload order) as the trainer reads the
/// field `spec` over `[lo, hi)`. `read` is asked for bytes in batches (all
/// of one phase at once, so it may read them concurrently) and answers each
/// request in order.
///
/// `Ok(None)` when `segments` is empty: the trainer's `None`.
///
/// ```
/// use pd_stitch::algebra::{Dtype, Segment};
/// use pd_stitch::reading::{read_segments, FieldTable, ReadOptions, Values};
///
/// // [4, 6) then a re-emission [5, 8): the later rows win at 5.
/// let file = [10u8, 11, 25, 26, 27];
/// let segments = [
///     Segment::new("routed_experts", (), 0, 4, 2, Dtype::Uint8, vec![]).unwrap(),
///     Segment::new("routed_experts", (), 2, 5, 3, Dtype::Uint8, vec![]).unwrap(),
/// ];
/// let spec = FieldTable::trainer().get("routed_experts").unwrap().clone();
/// let reading = read_segments(&spec, &segments, 3, 9, ReadOptions::default(), |requests| {
///     Ok::<_, ()>(requests.iter().map(|r| file[r.range.start as usize..r.range.end as usize].to_vec()).collect())
/// }).unwrap().unwrap();
/// assert_eq!(reading.values(), Values::Int32);
/// let ids: Vec<i32> = reading.data().chunks(4).map(|b| i32::from_le_bytes(b.try_into().unwrap())).collect();
/// assert_eq!(ids, [0, 10, 25, 26, 27, 0]);
/// ```
///
/// # Errors
///
/// [`ReadError`]: what makes the trainer raise, what the strict reading
/// refuses, or the byte source's error.
pub fn read_segments<F, E, R>(
    spec: &FieldSpec,
    segments: &[Segment<F>],
    lo: u64,
    hi: u64,
    options: ReadOptions,
    mut read: R,
) -> Result<Option<Reading>, ReadError<E>>
where
    R: FnMut(&[ByteRequest<'_, F>]) -> Result<Vec<Vec<u8>>, E>,
{
    if segments.is_empty() {
        return Ok(None);
    }
    if hi < lo {
        return Err(ReadError::Window { lo, hi });
    }
    if options.strictness == Strictness::Strict {
        strict_coverage(segments, lo, hi)?;
    }
    match spec.storage {
        Storage::Fixed => read_fixed(spec.fill, segments, lo, hi, options, &mut read).map(Some),
        Storage::Csr => read_csr(spec.fill, segments, lo, hi, options, &mut read).map(Some),
    }
}

/// A segment's part inside `[lo, hi)`, as `(first row index, rows)`.
fn window(segment_pos: u64, segment_end: u64, lo: u64, hi: u64) -> Option<(u64, u64)> {
    let start = segment_pos.max(lo);
    let end = segment_end.min(hi);
    (start < end).then(|| (start - segment_pos, end - start))
}

fn strict_coverage<F, E>(segments: &[Segment<F>], lo: u64, hi: u64) -> Result<(), ReadError<E>> {
    let mut clipped: Vec<(usize, Rows)> = segments
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let (a, n) = window(s.pos(), s.end(), lo, hi)?;
            Some((i, Rows::with_len(s.pos() + a, n)?))
        })
        .collect();
    clipped.sort_by_key(|(i, r)| (r.start(), *i));
    let mut reach: Option<(usize, Rows)> = None;
    for (i, r) in clipped {
        if let Some((j, before)) = reach {
            if r.start() > before.end() {
                return Err(ReadError::Gap {
                    missing: Rows::new(before.end(), r.start()).unwrap_or(r),
                });
            }
            if r.start() < before.end() {
                let (first, second) = (i.min(j), i.max(j));
                return Err(ReadError::Overlap {
                    overlap: before.intersection(r).unwrap_or(r),
                    first,
                    second,
                });
            }
        }
        reach = Some((i, r));
    }
    Ok(())
}

/// The output under construction: 32-bit elements (int32 or float32) as
/// their little-endian bytes, the buffer the caller gets (NumPy views it as
/// is), so the array is allocated once and written once.
struct Out {
    values: Values,
    bytes: Vec<u8>,
}

impl Out {
    fn filled<E>(
        values: Values,
        fill: Fill,
        len: u64,
        max_bytes: u64,
    ) -> Result<Out, ReadError<E>> {
        let bytes = len.saturating_mul(4);
        if bytes > max_bytes {
            return Err(ReadError::TooLarge { bytes });
        }
        let n = usize::try_from(bytes).map_err(|_| ReadError::TooLarge { bytes })?;
        let mut out = Out {
            values,
            bytes: vec![0; n],
        };
        let word = out.fill_word(fill);
        if word != [0; 4] {
            fill_words(&mut out.bytes, word);
        }
        Ok(out)
    }

    /// The fill as one element's bytes.
    fn fill_word(&self, fill: Fill) -> [u8; 4] {
        match self.values {
            Values::Int32 => fill_as_int(fill).to_le_bytes(),
            Values::Float32 => fill_as_float(fill).to_le_bytes(),
        }
    }

    /// Element `index`'s bytes, when it is inside.
    fn word(&mut self, index: usize) -> Option<&mut [u8]> {
        let at = index.checked_mul(4)?;
        self.bytes.get_mut(at..at.checked_add(4)?)
    }

    fn set(&mut self, index: usize, dtype: Dtype, element: &[u8]) {
        let word = match self.values {
            Values::Int32 => to_int32(dtype, element).to_le_bytes(),
            Values::Float32 => to_float32(dtype, element).to_le_bytes(),
        };
        if let Some(slot) = self.word(index) {
            slot.copy_from_slice(&word);
        }
    }

    /// `set` for elements back to back from `base`: one loop per dtype.
    fn set_run(&mut self, base: usize, dtype: Dtype, bytes: &[u8], itemsize: usize) {
        let n = bytes.len() / itemsize.max(1);
        let Some(slots) = base
            .checked_mul(4)
            .and_then(|a| Some(a..a.checked_add(n.checked_mul(4)?)?))
            .and_then(|range| self.bytes.get_mut(range))
        else {
            return;
        };
        let slots = slots.chunks_exact_mut(4);
        match (self.values, dtype) {
            (Values::Int32, Dtype::Uint8) => {
                for (slot, &b) in slots.zip(bytes) {
                    slot.copy_from_slice(&i32::from(b).to_le_bytes());
                }
            }
            (Values::Int32, Dtype::Uint16) => {
                for (slot, b) in slots.zip(bytes.chunks_exact(2)) {
                    slot.copy_from_slice(
                        &i32::from(u16::from_le_bytes([b[0], b[1]])).to_le_bytes(),
                    );
                }
            }
            // float32 into float32, and int32 into int32: the bytes as they are.
            (Values::Float32, Dtype::Float32) | (Values::Int32, Dtype::Int32) => {
                for (slot, b) in slots.zip(bytes.chunks_exact(4)) {
                    slot.copy_from_slice(b);
                }
            }
            _ => {
                for (e, element) in bytes.chunks_exact(itemsize.max(1)).enumerate() {
                    self.set(base + e, dtype, element);
                }
            }
        }
    }

    fn set_fill(&mut self, range: Range<usize>, fill: Fill) {
        let word = self.fill_word(fill);
        let bytes = range
            .start
            .checked_mul(4)
            .zip(range.end.checked_mul(4))
            .and_then(|(a, b)| self.bytes.get_mut(a..b));
        if let Some(bytes) = bytes {
            fill_words(bytes, word);
        }
    }

    fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

/// `bytes` (a whole number of elements) set to `word` each.
fn fill_words(bytes: &mut [u8], word: [u8; 4]) {
    for slot in bytes.chunks_exact_mut(4) {
        slot.copy_from_slice(&word);
    }
}

/// A fill assigned into an int32 array (NumPy's `np.full` casts it).
fn fill_as_int(fill: Fill) -> i32 {
    match fill {
        Fill::Int(x) => x,
        Fill::Float(x) => float_to_int32(f64::from(x)),
    }
}

fn fill_as_float(fill: Fill) -> f32 {
    match fill {
        Fill::Int(x) => x as f32,
        Fill::Float(x) => x,
    }
}

/// The little-endian element at the start of `bytes`, as 64 raw bits.
fn raw(element: &[u8]) -> u64 {
    let mut word = [0u8; 8];
    let n = element.len().min(8);
    word[..n].copy_from_slice(&element[..n]);
    u64::from_le_bytes(word)
}

/// An element as NumPy reads it: integers (and bool) as `i128`, floats as
/// `f64`.
enum Element {
    Int(i128),
    Float(f64),
}

fn element(dtype: Dtype, bytes: &[u8]) -> Element {
    let bits = raw(bytes);
    match dtype {
        Dtype::Bool => Element::Int(i128::from(bits != 0)),
        Dtype::Int8 => Element::Int(i128::from(bits as u8 as i8)),
        Dtype::Uint8 => Element::Int(i128::from(bits as u8)),
        Dtype::Int16 => Element::Int(i128::from(bits as u16 as i16)),
        Dtype::Uint16 => Element::Int(i128::from(bits as u16)),
        Dtype::Int32 => Element::Int(i128::from(bits as u32 as i32)),
        Dtype::Uint32 => Element::Int(i128::from(bits as u32)),
        Dtype::Int64 => Element::Int(i128::from(bits as i64)),
        Dtype::Uint64 => Element::Int(i128::from(bits)),
        Dtype::Float16 => Element::Float(f16_to_f64(bits as u16)),
        // Refused before any element is read (NumPy cannot name it).
        Dtype::Bfloat16 => Element::Float(bf16_to_f64(bits as u16)),
        Dtype::Float32 => Element::Float(f64::from(f32::from_bits(bits as u32))),
        Dtype::Float64 => Element::Float(f64::from_bits(bits)),
    }
}

/// A float assigned into an int32 array: truncated toward zero; NaN and
/// values outside int32 give `i32::MIN`, as x86's conversion does.
fn float_to_int32(x: f64) -> i32 {
    let t = x.trunc();
    if t.is_nan() || t < f64::from(i32::MIN) || t > f64::from(i32::MAX) {
        i32::MIN
    } else {
        t as i32
    }
}

/// An element assigned into an int32 array: integers wrap to their low 32
/// bits.
fn to_int32(dtype: Dtype, bytes: &[u8]) -> i32 {
    match element(dtype, bytes) {
        Element::Int(v) => v as i32,
        Element::Float(x) => float_to_int32(x),
    }
}

/// An element assigned into a float32 array: rounded to nearest.
fn to_float32(dtype: Dtype, bytes: &[u8]) -> f32 {
    match (dtype, bytes) {
        // NumPy copies float32 into float32 bit for bit (a signalling NaN
        // stays one; through f64 it would be made quiet).
        (Dtype::Float32, [a, b, c, d, ..]) => return f32::from_le_bytes([*a, *b, *c, *d]),
        // A half NaN keeps its sign and payload, shifted into the single's
        // (NumPy's half to float conversion); other halves are exact in f64.
        (Dtype::Float16, [a, b, ..]) => {
            let h = u16::from_le_bytes([*a, *b]);
            if h & 0x7c00 == 0x7c00 && h & 0x03ff != 0 {
                let sign = u32::from(h & 0x8000) << 16;
                return f32::from_bits(sign | 0x7f80_0000 | (u32::from(h & 0x03ff) << 13));
            }
        }
        _ => {}
    }
    match element(dtype, bytes) {
        Element::Int(v) if v < 0 => (v as i64) as f32,
        Element::Int(v) => (v as u64) as f32,
        Element::Float(x) => x as f32,
    }
}

fn read_fixed<F, E, R>(
    fill: Fill,
    segments: &[Segment<F>],
    lo: u64,
    hi: u64,
    options: ReadOptions,
    read: &mut R,
) -> Result<Reading, ReadError<E>>
where
    R: FnMut(&[ByteRequest<'_, F>]) -> Result<Vec<Vec<u8>>, E>,
{
    let first = segments.first().map(Segment::dtype).unwrap_or(Dtype::Uint8);
    if first == Dtype::Bfloat16 {
        return Err(ReadError::Dtype {
            segment: 0,
            dtype: first,
        });
    }
    // The elementwise maximum, truncated to the shortest rank (`zip`).
    let rank = segments.iter().map(|s| s.shape().len()).min().unwrap_or(0);
    let row: Vec<u64> = (0..rank)
        .map(|k| {
            segments
                .iter()
                .filter_map(|s| s.shape().get(k).copied())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let values = if first.is_float() {
        Values::Float32
    } else {
        Values::Int32
    };
    let per_row = row.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    let rows = hi - lo;
    let len = per_row
        .and_then(|p| p.checked_mul(rows))
        .unwrap_or(u64::MAX);
    let mut out = Out::filled(values, fill, len, options.max_bytes)?;
    let per_row = per_row.unwrap_or(0);
    // Clip every segment first (an unreadable dtype raises there), then read.
    let mut requests = Vec::new();
    for (i, s) in segments.iter().enumerate() {
        let Some((a, n)) = window(s.pos(), s.end(), lo, hi) else {
            continue;
        };
        if s.dtype() == Dtype::Bfloat16 {
            return Err(ReadError::Dtype {
                segment: i,
                dtype: s.dtype(),
            });
        }
        let from = s.offset() + a * s.row_bytes();
        requests.push(ByteRequest {
            segment: i,
            file: s.file(),
            range: from..from + n * s.row_bytes(),
        });
    }
    let data = read(&requests).map_err(ReadError::Source)?;
    // Strides of the output row.
    let mut strides = vec![1u64; rank];
    for k in (0..rank.saturating_sub(1)).rev() {
        strides[k] = strides[k + 1] * row[k + 1];
    }
    for (request, bytes) in requests.iter().zip(&data) {
        let Some(s) = segments.get(request.segment) else {
            continue;
        };
        if s.shape().len() > rank {
            return Err(ReadError::Rank {
                segment: request.segment,
                rank: s.shape().len(),
                output: rank,
            });
        }
        let itemsize = s.dtype().itemsize() as usize;
        let dims = s.shape();
        let elements: u64 = dims.iter().product();
        let start_row = s.pos().max(lo) - lo;
        let n = (request.range.end - request.range.start) / s.row_bytes().max(1);
        let n = if s.row_bytes() == 0 { 0 } else { n };
        if dims == row.as_slice() {
            // Rows of the output's own shape: element after element.
            let base = (start_row * per_row) as usize;
            out.set_run(base, s.dtype(), bytes, itemsize.max(1));
            continue;
        }
        let mut index = vec![0u64; rank];
        for r in 0..n {
            let base = (start_row + r) * per_row;
            index.iter_mut().for_each(|x| *x = 0);
            for e in 0..elements {
                let offset: u64 = index.iter().zip(&strides).map(|(i, s)| i * s).sum();
                let at = ((r * elements + e) as usize) * itemsize;
                if let Some(element) = bytes.get(at..at + itemsize) {
                    out.set((base + offset) as usize, s.dtype(), element);
                }
                // The next index, last axis fastest.
                for k in (0..rank).rev() {
                    index[k] += 1;
                    if index[k] < dims[k] {
                        break;
                    }
                    index[k] = 0;
                }
            }
        }
    }
    let mut shape = vec![rows];
    shape.extend(row);
    Ok(Reading {
        values,
        shape,
        data: out.into_bytes(),
    })
}

fn read_csr<F, E, R>(
    fill: Fill,
    segments: &[Segment<F>],
    lo: u64,
    hi: u64,
    options: ReadOptions,
    read: &mut R,
) -> Result<Reading, ReadError<E>>
where
    R: FnMut(&[ByteRequest<'_, F>]) -> Result<Vec<Vec<u8>>, E>,
{
    let values = fill.values();
    // Every non-empty segment's offsets, ones outside the window too.
    let nonempty: Vec<usize> = (0..segments.len())
        .filter(|&i| segments.get(i).is_some_and(|s| s.rows() > 0))
        .collect();
    let mut requests = Vec::with_capacity(nonempty.len());
    for &i in &nonempty {
        let Some(s) = segments.get(i) else { continue };
        let bytes = s.rows().saturating_add(1).saturating_mul(4);
        requests.push(ByteRequest {
            segment: i,
            file: s.file(),
            range: s.offset()..s.offset().saturating_add(bytes),
        });
    }
    let tables = read(&requests).map_err(ReadError::Source)?;
    let starts: Vec<Vec<i64>> = tables
        .iter()
        .map(|t| {
            t.chunks_exact(4)
                .map(|b| i64::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect()
        })
        .collect();
    let width = starts
        .iter()
        .flat_map(|s| s.windows(2).map(|w| (w[1] - w[0]).div_euclid(4)))
        .max()
        .unwrap_or(1)
        .max(1);
    let width_u = width as u64;
    let rows = hi - lo;
    let len = rows.saturating_mul(width_u);
    let mut out = Out::filled(values, fill, len, options.max_bytes)?;
    // The window's values of each segment, in one read each.
    let mut windows = Vec::new();
    for (&i, s_starts) in nonempty.iter().zip(&starts) {
        let Some(s) = segments.get(i) else { continue };
        let Some((a, n)) = window(s.pos(), s.end(), lo, hi) else {
            continue;
        };
        let w = s_starts
            .get(a as usize..=(a + n) as usize)
            .unwrap_or_default();
        let (Some(&first), Some(&last)) = (w.first(), w.last()) else {
            continue;
        };
        if last < first {
            return Err(ReadError::Csr {
                segment: i,
                start: first,
                end: last,
            });
        }
        windows.push((i, s.pos() + a - lo, w, first, last));
    }
    let value_requests: Vec<ByteRequest<'_, F>> = windows
        .iter()
        .filter_map(|&(i, _, _, first, last)| {
            Some(ByteRequest {
                segment: i,
                file: segments.get(i)?.file(),
                range: first as u64..last as u64,
            })
        })
        .collect();
    let data = read(&value_requests).map_err(ReadError::Source)?;
    let element_dtype = values.dtype();
    for (&(i, row, w, first, last), bytes) in windows.iter().zip(&data) {
        let counts: Vec<u64> = w
            .windows(2)
            .map(|p| (p[1] - p[0]).div_euclid(4).clamp(0, width) as u64)
            .collect();
        let total: u64 = counts.iter().sum();
        if bytes.len() % 4 != 0 || bytes.len() as u64 / 4 != total {
            return Err(ReadError::Csr {
                segment: i,
                start: first,
                end: last,
            });
        }
        let mut next = 0usize;
        for (k, &count) in counts.iter().enumerate() {
            let base = ((row + k as u64) * width_u) as usize;
            out.set_fill(base..base + width as usize, fill);
            for e in 0..count as usize {
                if let Some(element) = bytes.get(next..next + 4) {
                    out.set(base + e, element_dtype, element);
                }
                next += 4;
            }
        }
    }
    Ok(Reading {
        values,
        shape: vec![rows, width_u],
        data: out.into_bytes(),
    })
}
