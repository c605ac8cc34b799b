//! The reading model against a naive per-position model (RD1), the strict
//! reading (RD2), and hand-written cases of the trainer's semantics.

use proptest::prelude::*;

use super::*;

/// The files of a test: bytes by index.
type FileBytes = Vec<Vec<u8>>;

fn source(
    files: &FileBytes,
) -> impl FnMut(&[ByteRequest<'_, usize>]) -> Result<Vec<Vec<u8>>, String> + '_ {
    move |requests| {
        requests
            .iter()
            .map(|r| {
                let file = files.get(*r.file).ok_or("no file")?;
                let (a, b) = (r.range.start as usize, r.range.end as usize);
                file.get(a..b)
                    .map(<[u8]>::to_vec)
                    .ok_or_else(|| "short".to_owned())
            })
            .collect()
    }
}

/// The naive model's answer: the element type, the shape and each
/// element's 32 bits; `None` where the trainer raises.
type Naive = Option<(Values, Vec<u64>, Vec<u32>)>;

/// One element of `dtype` at `bytes`, converted as NumPy assignment does,
/// written without the model's helpers.
fn naive_element(dtype: Dtype, b: &[u8], out: Values) -> u32 {
    let int: Option<i128> = match dtype {
        Dtype::Bool => Some(i128::from(b[0] != 0)),
        Dtype::Int8 => Some(i128::from(i8::from_le_bytes([b[0]]))),
        Dtype::Uint8 => Some(i128::from(b[0])),
        Dtype::Int16 => Some(i128::from(i16::from_le_bytes([b[0], b[1]]))),
        Dtype::Uint16 => Some(i128::from(u16::from_le_bytes([b[0], b[1]]))),
        Dtype::Int32 => Some(i128::from(i32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        Dtype::Uint32 => Some(i128::from(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))),
        Dtype::Int64 => Some(i128::from(i64::from_le_bytes(b[..8].try_into().unwrap()))),
        Dtype::Uint64 => Some(i128::from(u64::from_le_bytes(b[..8].try_into().unwrap()))),
        _ => None,
    };
    let float: f64 = match dtype {
        Dtype::Float32 => f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        Dtype::Float64 => f64::from_le_bytes(b[..8].try_into().unwrap()),
        Dtype::Float16 => {
            let h = u16::from_le_bytes([b[0], b[1]]);
            let (s, e, m) = (h >> 15, (h >> 10) & 31, h & 1023);
            let mag = if e == 0 {
                f64::from(m) / 1024.0 / 16384.0
            } else if e == 31 {
                if m == 0 {
                    f64::INFINITY
                } else {
                    f64::NAN
                }
            } else {
                (1.0 + f64::from(m) / 1024.0) * 2f64.powi(i32::from(e) - 15)
            };
            if s == 1 {
                -mag
            } else {
                mag
            }
        }
        _ => 0.0,
    };
    match (out, int) {
        (Values::Int32, Some(v)) => (v & 0xffff_ffff) as u32,
        (Values::Int32, None) => {
            if float > -2_147_483_649.0 && float < 2_147_483_648.0 {
                (float as i32) as u32
            } else {
                0x8000_0000
            }
        }
        (Values::Float32, Some(v)) => (v as f64 as f32).to_bits(),
        // float32 into float32: NumPy copies the bits, a signalling NaN's
        // included.
        (Values::Float32, None) if dtype == Dtype::Float32 => {
            u32::from_le_bytes([b[0], b[1], b[2], b[3]])
        }
        // A half NaN into float32: its sign, all-ones exponent, and its ten
        // payload bits at the top of the single's (NumPy's conversion).
        (Values::Float32, None) if dtype == Dtype::Float16 && float.is_nan() => {
            let h = u32::from(u16::from_le_bytes([b[0], b[1]]));
            ((h & 0x8000) << 16) | 0x7f80_0000 | ((h & 0x3ff) << 13)
        }
        (Values::Float32, None) => (float as f32).to_bits(),
    }
}

fn fill_bits(fill: Fill, out: Values) -> u32 {
    match (fill, out) {
        (Fill::Int(x), Values::Int32) => x as u32,
        (Fill::Int(x), Values::Float32) => (x as f32).to_bits(),
        (Fill::Float(x), Values::Float32) => x.to_bits(),
        (Fill::Float(x), Values::Int32) => {
            let x = f64::from(x);
            if x > -2_147_483_649.0 && x < 2_147_483_648.0 {
                (x as i32) as u32
            } else {
                0x8000_0000
            }
        }
    }
}

/// Fixed-width, position by position and element by element: the value at
/// `(x, idx)` is the last segment's (in payload order) that covers `x` in
/// the window and whose dims contain `idx`, else the fill.
fn naive_fixed(fill: Fill, segs: &[Segment<usize>], files: &FileBytes, lo: u64, hi: u64) -> Naive {
    if hi < lo {
        return None;
    }
    let first = segs.first()?;
    if first.dtype() == Dtype::Bfloat16 {
        return None;
    }
    let rank = segs.iter().map(|s| s.shape().len()).min().unwrap();
    let row: Vec<u64> = (0..rank)
        .map(|k| segs.iter().map(|s| s.shape()[k]).max().unwrap())
        .collect();
    let out = if first.dtype().is_float() {
        Values::Float32
    } else {
        Values::Int32
    };
    let inside = |s: &Segment<usize>| s.pos().max(lo) < s.end().min(hi);
    for s in segs.iter().filter(|s| inside(s)) {
        if s.dtype() == Dtype::Bfloat16 || s.shape().len() > rank {
            return None;
        }
        let (a, b) = (s.pos().max(lo), s.end().min(hi));
        let need = s.offset() + (b - s.pos()) * s.row_bytes();
        let _ = a;
        if files[*s.file()].len() < need as usize {
            return None;
        }
    }
    let per_row: u64 = row.iter().product();
    let mut data = Vec::new();
    for x in lo..hi {
        for flat in 0..per_row {
            // The multi-index of `flat` in the output row.
            let mut idx = vec![0u64; rank];
            let mut rest = flat;
            for k in (0..rank).rev() {
                idx[k] = rest % row[k];
                rest /= row[k];
            }
            let mut value = fill_bits(fill, out);
            for s in segs
                .iter()
                .filter(|s| inside(s) && s.positions().contains(x))
            {
                if idx.iter().zip(s.shape()).all(|(i, d)| i < d) {
                    // Its element: row `x - pos`, C order within its own dims.
                    let mut e = 0u64;
                    for (i, d) in idx.iter().zip(s.shape()) {
                        e = e * d + i;
                    }
                    let size = s.dtype().itemsize();
                    let at = s.offset() + (x - s.pos()) * s.row_bytes() + e * size;
                    let bytes = &files[*s.file()][at as usize..(at + size) as usize];
                    value = naive_element(s.dtype(), bytes, out);
                }
            }
            data.push(value);
        }
    }
    let mut shape = vec![hi - lo];
    shape.extend(row);
    Some((out, shape, data))
}

/// CSR, position by position: the row at `x` is that of the last non-empty
/// segment covering `x`, its values taken in order from the segment's
/// window values after those of the rows before `x` in the window.
fn naive_csr(fill: Fill, segs: &[Segment<usize>], files: &FileBytes, lo: u64, hi: u64) -> Naive {
    if hi < lo || segs.is_empty() {
        return None;
    }
    let out = match fill {
        Fill::Int(_) => Values::Int32,
        Fill::Float(_) => Values::Float32,
    };
    let u32_at = |file: usize, at: u64| -> Option<i64> {
        let f = files.get(file)?;
        let b = f.get(at as usize..at as usize + 4)?;
        Some(i64::from(u32::from_le_bytes(b.try_into().ok()?)))
    };
    let mut tables: Vec<Option<Vec<i64>>> = Vec::new();
    for s in segs {
        if s.rows() == 0 {
            tables.push(None);
            continue;
        }
        let mut t = Vec::new();
        for k in 0..=s.rows() {
            t.push(u32_at(*s.file(), s.offset() + 4 * k)?);
        }
        tables.push(Some(t));
    }
    let mut width = 1i64;
    for t in tables.iter().flatten() {
        for k in 0..t.len() - 1 {
            width = width.max((t[k + 1] - t[k]).div_euclid(4));
        }
    }
    // The model's one limit: 1 GiB of output (ReadOptions::max_bytes).
    if (hi - lo).saturating_mul(width as u64).saturating_mul(4) > 1 << 30 {
        return None;
    }
    let count = |t: &[i64], k: usize| (t[k + 1] - t[k]).div_euclid(4).max(0).min(width) as usize;
    // Every window must read: its values in one piece, as many as counted.
    for (s, t) in segs.iter().zip(&tables) {
        let Some(t) = t else { continue };
        if s.pos().max(lo) >= s.end().min(hi) {
            continue;
        }
        let (a, b) = (
            (s.pos().max(lo) - s.pos()) as usize,
            (s.end().min(hi) - s.pos()) as usize,
        );
        let (start, end) = (t[a], t[b]);
        if end < start {
            return None;
        }
        let file = &files[*s.file()];
        if (file.len() as i64) < end {
            return None;
        }
        let counted: usize = (a..b).map(|k| count(t, k)).sum();
        if (end - start) % 4 != 0 || ((end - start) / 4) as usize != counted {
            return None;
        }
    }
    let mut data = Vec::new();
    for x in lo..hi {
        let last = segs
            .iter()
            .zip(&tables)
            .rfind(|(s, t)| t.is_some() && s.positions().contains(x));
        let mut row = vec![fill_bits(fill, out); width as usize];
        if let Some((s, Some(t))) = last {
            let a = (s.pos().max(lo) - s.pos()) as usize;
            let k = (x - s.pos()) as usize;
            let before: usize = (a..k).map(|j| count(t, j)).sum();
            let file = &files[*s.file()];
            for (e, slot) in row.iter_mut().enumerate().take(count(t, k)) {
                let at = (t[a] as usize) + 4 * (before + e);
                *slot = naive_element(out.dtype(), &file[at..at + 4], out);
            }
        }
        data.extend(row);
    }
    Some((out, vec![hi - lo, width as u64], data))
}

fn bits(reading: &Reading) -> Vec<u32> {
    reading
        .data()
        .chunks(4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .collect()
}

fn dtype() -> impl Strategy<Value = Dtype> {
    prop::sample::select(Dtype::ALL.to_vec())
}

fn shape() -> impl Strategy<Value = Vec<u64>> {
    prop::sample::select(vec![
        vec![],
        vec![1],
        vec![2],
        vec![3],
        vec![2, 2],
        vec![1, 3],
        vec![2, 1],
        vec![0, 2],
        vec![2, 1, 2],
    ])
}

/// Fixed-width lists: few files of random bytes, segments anywhere in them.
fn fixed_case() -> impl Strategy<Value = (FileBytes, Vec<Segment<usize>>, u64, u64)> {
    let files = prop::collection::vec(prop::collection::vec(any::<u8>(), 0..160), 1..4);
    let segment = (
        0usize..3,
        0u64..40,
        0u64..12,
        0u64..5,
        dtype(),
        shape(),
        any::<bool>(),
    );
    let segments = prop::collection::vec(segment, 0..5);
    (files, segments, 0u64..14, -2i64..14).prop_map(|(files, segs, lo, span)| {
        let n = files.len();
        // Mostly one dtype kind and one shape, so that most lists read.
        let segs: Vec<Segment<usize>> = segs
            .into_iter()
            .map(|(f, offset, pos, rows, dtype, shape, plain)| {
                let (dtype, shape) = if plain {
                    (Dtype::Uint8, vec![2])
                } else {
                    (dtype, shape)
                };
                Segment::new("f", f % n, offset, pos, rows, dtype, shape).unwrap()
            })
            .collect();
        let hi = (lo as i64 + span).max(0) as u64;
        (files, segs, lo, hi)
    })
}

/// CSR lists: files written as the writer writes them (offsets, then
/// values), sometimes with one offset corrupted.
fn csr_case() -> impl Strategy<Value = (FileBytes, Vec<Segment<usize>>, u64, u64)> {
    let segment = (
        0usize..2,
        0u64..12,
        prop::collection::vec(0u32..5, 0..5),
        any::<u32>(),
    );
    let corrupt = prop::option::of((0usize..64, any::<u32>()));
    (
        prop::collection::vec(segment, 0..5),
        corrupt,
        0u64..14,
        -2i64..14,
        any::<u64>(),
    )
        .prop_map(|(segs, corrupt, lo, span, seed)| {
            let mut files: FileBytes = vec![Vec::new(), Vec::new()];
            let mut out = Vec::new();
            let mut value = seed;
            for (f, pos, counts, _) in segs {
                let file = &mut files[f];
                let offset = file.len() as u64;
                let values_at = offset + 4 * (counts.len() as u64 + 1);
                let mut at = values_at;
                let mut starts = vec![at as u32];
                for c in &counts {
                    at += 4 * u64::from(*c);
                    starts.push(at as u32);
                }
                for s in starts {
                    file.extend(s.to_le_bytes());
                }
                for _ in 0..counts.iter().sum::<u32>() {
                    value = value
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    file.extend(((value >> 32) as u32).to_le_bytes());
                }
                out.push(
                    Segment::new(
                        "m",
                        f,
                        offset,
                        pos,
                        counts.len() as u64,
                        Dtype::Uint32,
                        vec![],
                    )
                    .unwrap(),
                );
            }
            if let Some((at, word)) = corrupt {
                let file = &mut files[at % 2];
                if file.len() >= 4 {
                    let k = (at * 4) % (file.len() - 3);
                    file[k..k + 4].copy_from_slice(&(word % 64).to_le_bytes());
                }
            }
            let hi = (lo as i64 + span).max(0) as u64;
            (files, out, lo, hi)
        })
}

fn spec(storage: Storage, fill: Fill) -> FieldSpec {
    FieldSpec::new("f", storage, fill)
}

fn fills() -> impl Strategy<Value = Fill> {
    prop_oneof![
        Just(Fill::Int(0)),
        Just(Fill::Int(-1)),
        Just(Fill::Float(0.0)),
        Just(Fill::Float(f32::NEG_INFINITY)),
    ]
}

fn as_naive(result: Result<Option<Reading>, ReadError<String>>) -> Naive {
    result
        .ok()
        .flatten()
        .map(|r| (r.values(), r.shape().to_vec(), bits(&r)))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(
        std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
    ))]

    /// RD1, fixed-width fields.
    #[test]
    fn rd1_fixed_reads_as_the_naive_model((files, segs, lo, hi) in fixed_case(), fill in fills()) {
        let got = read_segments(&spec(Storage::Fixed, fill), &segs, lo, hi, ReadOptions::default(), source(&files));
        if segs.is_empty() {
            prop_assert!(matches!(got, Ok(None)));
        } else {
            prop_assert_eq!(as_naive(got), naive_fixed(fill, &segs, &files, lo, hi));
        }
    }

    /// RD1, CSR fields.
    #[test]
    fn rd1_csr_reads_as_the_naive_model((files, segs, lo, hi) in csr_case(), int in any::<bool>()) {
        let fill = if int { Fill::Int(-1) } else { Fill::Float(f32::NEG_INFINITY) };
        let got = read_segments(&spec(Storage::Csr, fill), &segs, lo, hi, ReadOptions::default(), source(&files));
        if segs.is_empty() {
            prop_assert!(matches!(got, Ok(None)));
        } else {
            prop_assert_eq!(as_naive(got), naive_csr(fill, &segs, &files, lo, hi));
        }
    }

    /// RD2: the strict reading refuses exactly gaps and overlaps among the
    /// clipped non-empty segments, and is the trainer's reading otherwise.
    #[test]
    fn rd2_strict_refuses_exactly_gaps_and_overlaps((files, segs, lo, hi) in fixed_case()) {
        let spec = spec(Storage::Fixed, Fill::Int(0));
        let strict = ReadOptions { strictness: Strictness::Strict, ..ReadOptions::default() };
        let got = read_segments(&spec, &segs, lo, hi, strict, source(&files));
        let plain = read_segments(&spec, &segs, lo, hi, ReadOptions::default(), source(&files));
        // Count the covering segments of each position of the window.
        let mut covered: Vec<usize> = Vec::new();
        if hi >= lo {
            for x in lo..hi {
                covered.push(segs.iter().filter(|s| s.positions().contains(x)).count());
            }
        }
        let twice = covered.iter().any(|&c| c > 1);
        let first = covered.iter().position(|&c| c > 0);
        let last = covered.iter().rposition(|&c| c > 0);
        let hole = match (first, last) {
            (Some(a), Some(b)) => covered[a..=b].contains(&0),
            _ => false,
        };
        match got {
            Err(ReadError::Gap { .. }) => prop_assert!(hole),
            Err(ReadError::Overlap { .. }) => prop_assert!(twice),
            other => {
                if hi >= lo && !segs.is_empty() {
                    prop_assert!(!hole && !twice);
                }
                prop_assert_eq!(as_naive(other), as_naive(plain));
            }
        }
    }
}

fn memory(
    files: &FileBytes,
) -> impl FnMut(&[ByteRequest<'_, usize>]) -> Result<Vec<Vec<u8>>, String> + '_ {
    source(files)
}

/// The reading of `segs` over `window` from `files`, with the default
/// options, for a case that must give one.
fn read_ok(
    spec: &FieldSpec,
    segs: &[Segment<usize>],
    window: Range<u64>,
    files: &FileBytes,
) -> Reading {
    read_segments(
        spec,
        segs,
        window.start,
        window.end,
        ReadOptions::default(),
        memory(files),
    )
    .unwrap()
    .unwrap()
}

fn ints(r: &Reading) -> Vec<i32> {
    bits(r).into_iter().map(|b| b as i32).collect()
}

#[test]
fn later_segments_win_and_uncovered_positions_hold_the_fill() {
    let files = vec![vec![1, 2, 3, 4, 5, 6, 7, 8]];
    let segs = [
        Segment::new("f", 0, 0, 4, 2, Dtype::Uint8, vec![]).unwrap(),
        Segment::new("f", 0, 4, 5, 3, Dtype::Uint8, vec![]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Int(0)), &segs, 2..10, &files);
    assert_eq!(r.shape(), [8]);
    assert_eq!(ints(&r), [0, 0, 1, 5, 6, 7, 0, 0]);
}

#[test]
fn a_narrower_later_row_keeps_the_earlier_trailing_entries() {
    let files = vec![vec![1, 2, 3, 9]];
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![3]).unwrap(),
        Segment::new("f", 0, 3, 0, 1, Dtype::Uint8, vec![1]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Int(0)), &segs, 0..1, &files);
    assert_eq!(ints(&r), [9, 2, 3]);
}

#[test]
fn the_first_segment_fixes_the_element_type_and_floats_are_truncated() {
    let mut file = vec![7u8];
    file.extend(2.75f32.to_le_bytes());
    let files = vec![file];
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![]).unwrap(),
        Segment::new("f", 0, 1, 1, 1, Dtype::Float32, vec![]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Int(0)), &segs, 0..2, &files);
    assert_eq!(r.values(), Values::Int32);
    assert_eq!(ints(&r), [7, 2]);
}

#[test]
fn a_higher_rank_segment_in_the_window_raises_and_outside_it_truncates() {
    let files = vec![vec![0u8; 64]];
    let low = Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![2]).unwrap();
    let high = Segment::new("f", 0, 0, 5, 1, Dtype::Uint8, vec![2, 2]).unwrap();
    let spec = spec(Storage::Fixed, Fill::Int(0));
    let both = [low.clone(), high];
    let err = read_segments(&spec, &both, 0, 8, ReadOptions::default(), memory(&files));
    assert!(matches!(
        err,
        Err(ReadError::Rank {
            segment: 1,
            rank: 2,
            output: 1
        })
    ));
    let r = read_ok(&spec, &both, 0..2, &files);
    assert_eq!(r.shape(), [2, 2]);
    let _ = low;
}

#[test]
fn csr_rows_are_padded_to_the_widest_row_of_every_segment() {
    // Segment 0: rows [3] and [4, 5] at positions 1, 2; segment 1 (outside
    // the window) has a row of 3 values.
    let mut file = Vec::new();
    let put = |file: &mut Vec<u8>, counts: &[u32], values: &[i32]| -> u64 {
        let offset = file.len() as u64;
        let mut at = offset as u32 + 4 * (counts.len() as u32 + 1);
        file.extend(at.to_le_bytes());
        for c in counts {
            at += 4 * c;
            file.extend(at.to_le_bytes());
        }
        for v in values {
            file.extend(v.to_le_bytes());
        }
        offset
    };
    let a = put(&mut file, &[1, 2], &[3, 4, 5]);
    let b = put(&mut file, &[3], &[7, 8, 9]);
    let files = vec![file];
    let segs = [
        Segment::new("m", 0, a, 1, 2, Dtype::Uint32, vec![]).unwrap(),
        Segment::new("m", 0, b, 9, 1, Dtype::Uint32, vec![]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Csr, Fill::Int(-1)), &segs, 0..3, &files);
    assert_eq!(r.shape(), [3, 3]);
    assert_eq!(ints(&r), [-1, -1, -1, 3, -1, -1, 4, 5, -1]);
}

#[test]
fn no_segment_is_none_and_an_unknown_dtype_or_window_raises() {
    let files: FileBytes = vec![vec![0; 8]];
    let spec = spec(Storage::Fixed, Fill::Int(0));
    let none: [Segment<usize>; 0] = [];
    assert!(matches!(
        read_segments(&spec, &none, 0, 3, ReadOptions::default(), memory(&files)),
        Ok(None)
    ));
    let bf = [Segment::new("f", 0, 0, 0, 1, Dtype::Bfloat16, vec![]).unwrap()];
    assert!(matches!(
        read_segments(&spec, &bf, 0, 3, ReadOptions::default(), memory(&files)),
        Err(ReadError::Dtype { .. })
    ));
    let u8s = [Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![]).unwrap()];
    assert!(matches!(
        read_segments(&spec, &u8s, 3, 2, ReadOptions::default(), memory(&files)),
        Err(ReadError::Window { lo: 3, hi: 2 })
    ));
    let huge = ReadOptions {
        max_bytes: 8,
        ..ReadOptions::default()
    };
    assert!(matches!(
        read_segments(&spec, &u8s, 0, 3, huge, memory(&files)),
        Err(ReadError::TooLarge { bytes: 12 })
    ));
}

#[test]
fn the_trainer_table_has_the_four_fields_and_another_can_be_added() {
    let table = FieldTable::trainer();
    let layouts: Vec<(&str, Storage)> = table
        .fields()
        .map(|f| (f.name.as_str(), f.storage))
        .collect();
    assert_eq!(
        layouts,
        [
            ("routed_experts", Storage::Fixed),
            ("routed_expert_weights", Storage::Fixed),
            ("sampling_mask", Storage::Csr),
            ("sampling_mask_logprobs", Storage::Csr)
        ]
    );
    assert_eq!(
        table.get("sampling_mask_logprobs").unwrap().fill,
        Fill::Float(f32::NEG_INFINITY)
    );
    let more = table.with(FieldSpec::new(
        "indexer_topk",
        Storage::Fixed,
        Fill::Int(-1),
    ));
    assert_eq!(more.get("indexer_topk").unwrap().fill, Fill::Int(-1));
    assert!(FieldTable::trainer().get("indexer_topk").is_none());
    // Adding a field keeps the others; a field of the same name is replaced.
    assert_eq!(more.fields().count(), 5);
    assert_eq!(more.get("routed_experts").unwrap().fill, Fill::Int(0));
    let replaced = FieldTable::trainer().with(FieldSpec::new(
        "sampling_mask",
        Storage::Fixed,
        Fill::Int(7),
    ));
    assert_eq!(replaced.fields().count(), 4);
    let mask = replaced.get("sampling_mask").unwrap();
    assert_eq!((mask.storage, mask.fill), (Storage::Fixed, Fill::Int(7)));
}

/// A CSR file as the writer lays it out: each segment's `rows + 1` offsets
/// and then its values, back to back; returns the segments' offsets.
fn csr_file(segments: &[&[&[i32]]]) -> (Vec<u8>, Vec<u64>) {
    let mut file = Vec::new();
    let mut offsets = Vec::new();
    for rows in segments {
        let offset = file.len() as u64;
        offsets.push(offset);
        let mut at = offset as u32 + 4 * (rows.len() as u32 + 1);
        file.extend(at.to_le_bytes());
        for row in rows.iter() {
            at += 4 * row.len() as u32;
            file.extend(at.to_le_bytes());
        }
        for v in rows.iter().copied().flatten() {
            file.extend(v.to_le_bytes());
        }
    }
    (file, offsets)
}

/// F7: the trainer drops empty CSR segments before reading any offset, so
/// an empty segment's offset may point anywhere, even past the file.
#[test]
fn an_empty_csr_segment_is_never_read() {
    let (file, at) = csr_file(&[&[&[5, 6], &[7]]]);
    let files = vec![file];
    let segs = [
        Segment::new("m", 0, at[0], 0, 2, Dtype::Uint32, vec![]).unwrap(),
        Segment::new("m", 0, 1 << 20, 1, 0, Dtype::Uint32, vec![]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Csr, Fill::Int(-1)), &segs, 0..3, &files);
    assert_eq!(r.shape(), [3, 2]);
    assert_eq!(ints(&r), [5, 6, 7, -1, -1, -1]);
}

/// F7: the window's values are read in one piece and must be as many
/// whole values as its rows count; offsets that step back in the window
/// raise before any value is read.
#[test]
fn csr_values_must_be_whole_and_counted_and_offsets_in_order() {
    let spec = spec(Storage::Csr, Fill::Int(-1));
    let read = |words: &[u32], rows: u64, extra: usize| {
        let mut file: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        file.extend(vec![0u8; extra]);
        let files = vec![file];
        let segs = [Segment::new("m", 0, 0, 0, rows, Dtype::Uint32, vec![]).unwrap()];
        read_segments(
            &spec,
            &segs,
            0,
            rows,
            ReadOptions::default(),
            memory(&files),
        )
    };
    // Rows of 1 value and of 1 byte: 5 bytes in the window, 1 value counted
    // (5 / 4 = 1), but not a whole number of values.
    assert_eq!(
        read(&[12, 16, 17], 2, 5),
        Err(ReadError::Csr {
            segment: 0,
            start: 12,
            end: 17
        })
    );
    // The same file, the window on the first row only: it reads.
    let files = {
        let mut f: Vec<u8> = [12u32, 16, 17]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        f.extend(9i32.to_le_bytes());
        f.push(0);
        vec![f]
    };
    let segs = [Segment::new("m", 0, 0, 0, 2, Dtype::Uint32, vec![]).unwrap()];
    let r = read_ok(&spec, &segs, 0..1, &files);
    assert_eq!(ints(&r), [9]);
    // The end before the start: refused by the offsets, nothing read.
    assert_eq!(
        read(&[20, 24, 16], 2, 12),
        Err(ReadError::Csr {
            segment: 0,
            start: 20,
            end: 16
        })
    );
}

/// F5: a segment only touching the window (ending at `lo`, or empty inside
/// it) is clipped away, so its dtype and rank are never looked at.
#[test]
fn segments_that_only_touch_the_window_are_not_read() {
    let files = vec![vec![1, 2, 3, 4]];
    let segs = [
        Segment::new("f", 0, 0, 2, 2, Dtype::Uint8, vec![]).unwrap(),
        Segment::new("f", 0, 0, 0, 2, Dtype::Bfloat16, vec![]).unwrap(),
        Segment::new("f", 0, 0, 3, 0, Dtype::Bfloat16, vec![]).unwrap(),
        Segment::new("f", 0, 0, 4, 1, Dtype::Uint8, vec![1, 1]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Int(0)), &segs, 2..4, &files);
    assert_eq!(r.shape(), [2]);
    assert_eq!(ints(&r), [1, 2]);
}

/// NumPy's casts on the values the generated cases rarely reach: halves of
/// every class (normal, subnormal, signed zero, infinities, quiet and
/// signalling NaNs with their payloads) and wide integers into float32;
/// floats out of int32's range, NaN and near its ends into int32 (x86's
/// conversion: `i32::MIN`). The expected values are written by hand, and
/// agree with NumPy 1.26 (`astype` and assignment into an int32 array).
#[test]
fn element_casts_agree_with_numpy_at_their_edges() {
    let halves: [u16; 12] = [
        0x3c00, 0xc100, 0x0003, 0x8003, 0x7c00, 0xfc00, 0x7e01, 0xfd00, 0x7bff, 0x8000, 0x0400,
        0x3555,
    ];
    let mut file: Vec<u8> = halves.iter().flat_map(|h| h.to_le_bytes()).collect();
    let wide = file.len() as u64;
    file.extend(u64::MAX.to_le_bytes());
    file.extend((-5i8).to_le_bytes());
    let files = vec![file];
    let segs = [
        Segment::new("f", 0, 0, 0, 12, Dtype::Float16, vec![]).unwrap(),
        Segment::new("f", 0, wide, 12, 1, Dtype::Uint64, vec![]).unwrap(),
        Segment::new("f", 0, wide + 8, 13, 1, Dtype::Int8, vec![]).unwrap(),
    ];
    let r = read_ok(
        &spec(Storage::Fixed, Fill::Float(0.0)),
        &segs,
        0..14,
        &files,
    );
    assert_eq!(r.values(), Values::Float32);
    assert_eq!(
        bits(&r),
        [
            0x3f80_0000, // 1.0
            0xc020_0000, // -2.5
            0x3440_0000, // 3 * 2^-24, a subnormal half
            0xb440_0000, // its negative
            0x7f80_0000, // inf
            0xff80_0000, // -inf
            0x7fc0_2000, // a quiet NaN, payload 0x201 shifted by 13
            0xffa0_0000, // a negative signalling NaN, payload 0x100
            0x477f_e000, // 65504, the largest half
            0x8000_0000, // -0.0
            0x3880_0000, // 2^-14, the smallest normal half
            0x3eaa_a000, // 1365 / 4096
            0x5f80_0000, // u64::MAX, rounded to 2^64
            0xc0a0_0000, // -5 from int8
        ]
    );
    // Into int32 (the first segment an integer): floats truncated toward
    // zero; NaN, infinities and values outside int32 are i32::MIN.
    let floats = [
        2147483647.9f64,
        3e9,
        -3e9,
        f64::NAN,
        -2147483648.5,
        -1.5,
        2.5,
    ];
    let mut file = vec![7u8];
    file.extend(floats.iter().flat_map(|x| x.to_le_bytes()));
    let halves_at = file.len() as u64;
    for h in [0x4100u16, 0xc100, 0x7c00, 0x7e01, 0x7bff] {
        file.extend(h.to_le_bytes());
    }
    let files = vec![file];
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![]).unwrap(),
        Segment::new("f", 0, 1, 1, 7, Dtype::Float64, vec![]).unwrap(),
        Segment::new("f", 0, halves_at, 8, 5, Dtype::Float16, vec![]).unwrap(),
    ];
    let r = read_ok(
        &spec(Storage::Fixed, Fill::Float(f32::NEG_INFINITY)),
        &segs,
        0..14,
        &files,
    );
    assert_eq!(r.values(), Values::Int32);
    let min = i32::MIN;
    assert_eq!(
        ints(&r),
        [7, 2147483647, min, min, min, min, -1, 2, 2, -2, min, min, 65504, min]
    );
}

/// A reading's accessors, and an array of exactly `max_bytes` is allowed.
#[test]
fn a_reading_answers_its_rows_and_may_take_exactly_max_bytes() {
    let (file, at) = csr_file(&[&[&[5, 6], &[7]]]);
    let files = vec![file];
    let segs = [Segment::new("m", 0, at[0], 1, 2, Dtype::Uint32, vec![]).unwrap()];
    let exact = ReadOptions {
        max_bytes: 3 * 2 * 4,
        ..ReadOptions::default()
    };
    let r = read_segments(
        &spec(Storage::Csr, Fill::Int(-1)),
        &segs,
        0,
        3,
        exact,
        memory(&files),
    )
    .unwrap()
    .unwrap();
    assert_eq!(
        (r.values().name(), Values::Float32.name()),
        ("int32", "float32")
    );
    assert_eq!(r.shape(), [3, 2]);
    assert_eq!(r.row_shape(), [2]);
    let word = |x: i32| x.to_le_bytes();
    assert_eq!(r.row(0), Some(&[word(-1), word(-1)].concat()[..]));
    assert_eq!(r.row(2), Some(&[word(7), word(-1)].concat()[..]));
    assert_eq!(r.row(3), None);
    assert_eq!(r.clone().into_data(), r.data());
    assert_eq!(r.data().len(), 24);
    let less = ReadOptions {
        max_bytes: 23,
        ..ReadOptions::default()
    };
    assert_eq!(
        read_segments(
            &spec(Storage::Csr, Fill::Int(-1)),
            &segs,
            0,
            3,
            less,
            memory(&files)
        ),
        Err(ReadError::TooLarge { bytes: 24 })
    );
}

/// RD2 on hand-written lists: segments back to back (one ending where the
/// next starts, in either payload order) are neither a gap nor an overlap;
/// one position missing or shared is, and is named.
#[test]
fn strict_reading_accepts_segments_back_to_back_and_names_a_gap_or_an_overlap() {
    let files = vec![(1..=8).collect::<Vec<u8>>()];
    let spec = spec(Storage::Fixed, Fill::Int(0));
    let strict = ReadOptions {
        strictness: Strictness::Strict,
        ..ReadOptions::default()
    };
    let seg = |offset: u64, pos: u64, rows: u64| {
        Segment::new("f", 0, offset, pos, rows, Dtype::Uint8, vec![]).unwrap()
    };
    let read = |segs: &[Segment<usize>]| read_segments(&spec, segs, 0, 6, strict, memory(&files));
    let r = read(&[seg(0, 0, 2), seg(2, 2, 2), seg(4, 4, 2)])
        .unwrap()
        .unwrap();
    assert_eq!(ints(&r), [1, 2, 3, 4, 5, 6]);
    let r = read(&[seg(4, 4, 2), seg(0, 0, 2), seg(2, 2, 2)])
        .unwrap()
        .unwrap();
    assert_eq!(ints(&r), [1, 2, 3, 4, 5, 6]);
    assert_eq!(
        read(&[seg(0, 0, 2), seg(3, 3, 3)]),
        Err(ReadError::Gap {
            missing: Rows::new(2, 3).unwrap()
        })
    );
    assert_eq!(
        read(&[seg(2, 2, 4), seg(0, 0, 3)]),
        Err(ReadError::Overlap {
            overlap: Rows::new(2, 3).unwrap(),
            first: 0,
            second: 1
        })
    );
}

/// F4/F5 on rows of other shapes than the output's, element by element:
/// each segment writes `out[x, :d0, :d1, ...]` with its own dims, later
/// ones over earlier ones, the rest the fill; ranks 2 and 3. The expected
/// arrays are written by hand (and agree with NumPy's slice assignment).
#[test]
fn rows_of_other_shapes_write_their_leading_corner() {
    let files = vec![(1..=11).collect::<Vec<u8>>()];
    let spec = spec(Storage::Fixed, Fill::Int(0));
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![2, 3]).unwrap(),
        Segment::new("f", 0, 6, 0, 1, Dtype::Uint8, vec![1, 2]).unwrap(),
        Segment::new("f", 0, 8, 1, 1, Dtype::Uint8, vec![3, 1]).unwrap(),
    ];
    let read = |lo, hi| read_ok(&spec, &segs, lo..hi, &files);
    let r = read(0, 2);
    assert_eq!(r.shape(), [2, 3, 3]);
    assert_eq!(
        ints(&r),
        [7, 8, 3, 4, 5, 6, 0, 0, 0, 9, 0, 0, 10, 0, 0, 11, 0, 0]
    );
    let r = read(1, 2);
    assert_eq!(ints(&r), [9, 0, 0, 10, 0, 0, 11, 0, 0]);
    // Rank 3: rows (2, 1, 2) and (1, 2, 1) in an output row of (2, 2, 2).
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![2, 1, 2]).unwrap(),
        Segment::new("f", 0, 4, 1, 1, Dtype::Uint8, vec![1, 2, 1]).unwrap(),
    ];
    let r = read_ok(&spec, &segs, 0..2, &files);
    assert_eq!(r.shape(), [2, 2, 2, 2]);
    assert_eq!(ints(&r), [1, 2, 0, 0, 3, 4, 0, 0, 5, 0, 6, 0, 0, 0, 0, 0]);
}

/// The general path again, on an output row that is not square, (2, 3),
/// and a narrower segment of 2-byte elements: each element lands at its
/// own multi-index (stride 3 for the first axis) and is read at its own
/// byte offset. Expected by hand: position 1 holds [[258, 0, 0], [772, 0, 0]].
#[test]
fn a_narrower_row_of_wide_elements_lands_at_its_strides() {
    let mut file: Vec<u8> = (1..=6).collect();
    let wide_at = file.len() as u64;
    file.extend([0x02, 0x01, 0x04, 0x03]); // 0x0102, 0x0304
    let files = vec![file];
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Uint8, vec![2, 3]).unwrap(),
        Segment::new("f", 0, wide_at, 1, 1, Dtype::Uint16, vec![2, 1]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Int(0)), &segs, 0..2, &files);
    assert_eq!(r.shape(), [2, 2, 3]);
    assert_eq!(ints(&r), [1, 2, 3, 4, 5, 6, 258, 0, 0, 772, 0, 0]);
}

/// The reading's work follows the rows it reads, not where they lie in the
/// file or how wide a row is: 4096 narrower rows of 256 bytes (the general
/// path) at a file offset of 2^40, through a source that makes up their
/// bytes, read within a time bound a loop over the offset or over bytes
/// times row size would blow.
#[test]
fn the_work_of_a_reading_follows_its_rows() {
    let rows = 4096u64;
    let segs = [
        Segment::new("f", 0usize, 0, 0, 1, Dtype::Uint32, vec![1, 64]).unwrap(),
        Segment::new("f", 0usize, 1 << 40, 0, rows, Dtype::Uint32, vec![1, 64]).unwrap(),
        Segment::new("f", 0usize, 0, rows, 1, Dtype::Uint32, vec![2, 64]).unwrap(),
    ];
    let made_up = |requests: &[ByteRequest<'_, usize>]| -> Result<Vec<Vec<u8>>, String> {
        Ok(requests
            .iter()
            .map(|r| vec![1u8; (r.range.end - r.range.start) as usize])
            .collect())
    };
    let started = std::time::Instant::now();
    let r = read_segments(
        &spec(Storage::Fixed, Fill::Int(0)),
        &segs,
        0,
        rows,
        ReadOptions::default(),
        made_up,
    )
    .unwrap()
    .unwrap();
    assert!(started.elapsed().as_secs() < 10, "{:?}", started.elapsed());
    assert_eq!(r.shape(), [rows, 2, 64]);
    // Each row: 64 elements of 0x01010101, then the fill.
    let ones = ints(&r);
    assert_eq!(ones[..64], [0x0101_0101; 64]);
    assert_eq!(ones[64..128], [0; 64]);
    assert_eq!(ones[ones.len() - 128..ones.len() - 64], [0x0101_0101; 64]);
}

/// A `bool` segment reads as NumPy's `astype`: `False` is 0 and `True` is 1,
/// into int32 (the first segment not a float) or into float32 (after a
/// float segment). RD1's naive model agrees, but its 32 cases rarely draw a
/// `bool` row with a `True` in it.
#[test]
fn bool_rows_read_as_zero_and_one() {
    let mut file = vec![1u8, 0, 1];
    file.extend(0.5f32.to_le_bytes());
    let files = vec![file];
    let bools = Segment::new("f", 0, 0, 0, 3, Dtype::Bool, vec![]).unwrap();
    let r = read_ok(
        &spec(Storage::Fixed, Fill::Int(-1)),
        std::slice::from_ref(&bools),
        0..4,
        &files,
    );
    assert_eq!(r.values(), Values::Int32);
    assert_eq!(ints(&r), [1, 0, 1, -1]);
    let segs = [
        Segment::new("f", 0, 3, 3, 1, Dtype::Float32, vec![]).unwrap(),
        bools,
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Float(0.0)), &segs, 0..4, &files);
    assert_eq!(r.values(), Values::Float32);
    assert_eq!(
        bits(&r),
        [1.0f32, 0.0, 1.0, 0.5].map(f32::to_bits),
        "1.0, 0.0, 1.0, then the float segment's 0.5"
    );
}

/// Float32 values not in rows of the output's own shape (CSR logprobs, and
/// a narrower fixed row) are copied bit for bit, as NumPy copies float32
/// into float32: a signalling NaN stays signalling, its sign and payload
/// kept (a conversion through f64 would set its quiet bit).
#[test]
fn float32_values_keep_a_signalling_nan_bit_for_bit() {
    let (snan, negative_snan) = (0x7fa0_0001u32, 0xffa0_0003u32);
    let (file, at) = csr_file(&[&[&[snan as i32, negative_snan as i32], &[]]]);
    let files = vec![file];
    let segs = [Segment::new("l", 0, at[0], 0, 2, Dtype::Uint32, vec![]).unwrap()];
    let r = read_ok(
        &spec(Storage::Csr, Fill::Float(f32::NEG_INFINITY)),
        &segs,
        0..2,
        &files,
    );
    assert_eq!(r.values(), Values::Float32);
    assert_eq!(bits(&r), [snan, negative_snan, 0xff80_0000, 0xff80_0000]);
    // A row of one float32 under an output row of two.
    let mut file: Vec<u8> = [1.5f32, 2.5].iter().flat_map(|x| x.to_le_bytes()).collect();
    file.extend(snan.to_le_bytes());
    let files = vec![file];
    let segs = [
        Segment::new("f", 0, 0, 0, 1, Dtype::Float32, vec![2]).unwrap(),
        Segment::new("f", 0, 8, 1, 1, Dtype::Float32, vec![1]).unwrap(),
    ];
    let r = read_ok(&spec(Storage::Fixed, Fill::Float(0.0)), &segs, 0..2, &files);
    assert_eq!(bits(&r), [0x3fc0_0000, 0x4020_0000, snan, 0]);
}
