//! The dtype an episode's rows are held in, and rows widened into it.
//!
//! Turns of one episode may answer in different dtypes (an engine that
//! changed its index type between turns, a colocated full-context forward
//! beside P/D turns). The episode holds its rows in the one dtype NumPy
//! would give `np.concatenate` of them, so that the trainer's array is the
//! same whichever way it was built, and refuses the pairs NumPy would turn
//! into something else than a wider dtype of the same kind: integers with
//! floats (a float expert id), bool with anything else, and `uint64` with a
//! signed integer (NumPy makes those `float64`, which cannot hold every
//! `uint64`).
//!
//! `codec/widen.rs` widens unsigned integers only, and sits above the
//! algebra, which is all this folder imports; so the episode has its own,
//! small, widening, checked against a naive model in its tests.

use crate::algebra::Dtype;

/// The kinds of dtype that widen into one another.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Family {
    Bool,
    Signed,
    Unsigned,
    Float,
}

fn family(dtype: Dtype) -> Family {
    if dtype == Dtype::Bool {
        Family::Bool
    } else if dtype.is_float() {
        Family::Float
    } else if dtype.is_unsigned() {
        Family::Unsigned
    } else {
        Family::Signed
    }
}

/// The signed integer of `itemsize` bytes.
fn signed(itemsize: u64) -> Option<Dtype> {
    match itemsize {
        1 => Some(Dtype::Int8),
        2 => Some(Dtype::Int16),
        4 => Some(Dtype::Int32),
        8 => Some(Dtype::Int64),
        _ => None,
    }
}

/// The dtype NumPy promotes `a` and `b` to, when it is a dtype of their
/// kind that holds every value of both; `None` when NumPy would make
/// something else (or refuse).
pub(crate) fn promote(a: Dtype, b: Dtype) -> Option<Dtype> {
    if a == b {
        return Some(a);
    }
    let wider = if a.itemsize() >= b.itemsize() { a } else { b };
    match (family(a), family(b)) {
        (Family::Signed, Family::Signed) | (Family::Unsigned, Family::Unsigned) => Some(wider),
        (Family::Signed, Family::Unsigned) | (Family::Unsigned, Family::Signed) => {
            let (unsigned, signed_one) = if family(a) == Family::Unsigned {
                (a, b)
            } else {
                (b, a)
            };
            if signed_one.itemsize() > unsigned.itemsize() {
                Some(signed_one)
            } else {
                // A signed integer twice the unsigned one's width holds both;
                // past 64 bits NumPy goes to float64.
                signed(unsigned.itemsize() * 2)
            }
        }
        (Family::Float, Family::Float) => {
            // float16 and bfloat16 hold neither each other's range nor each
            // other's precision: float32 holds both (as ml_dtypes promotes).
            if a.itemsize() == b.itemsize() {
                Some(Dtype::Float32)
            } else {
                Some(wider)
            }
        }
        _ => None,
    }
}

/// An integer element of `dtype` (little-endian bytes), as a value.
fn integer(dtype: Dtype, bytes: &[u8]) -> i128 {
    let mut raw = [0u8; 8];
    raw[..bytes.len()].copy_from_slice(bytes);
    let unsigned = u64::from_le_bytes(raw);
    if family(dtype) == Family::Signed {
        // Sign-extend from the element's width.
        let shift = 64 - 8 * bytes.len() as u32;
        i128::from(((unsigned << shift) as i64) >> shift)
    } else {
        i128::from(unsigned)
    }
}

/// An IEEE half-precision number, exactly, as a single.
fn half_to_single(bits: u16) -> f32 {
    let sign = u32::from(bits & 0x8000) << 16;
    let exponent = u32::from((bits >> 10) & 0x1f);
    let mantissa = u32::from(bits & 0x3ff);
    match exponent {
        // Zero and subnormals: mantissa * 2^-24, exact in a single.
        0 => f32::from_bits((mantissa as f32 * f32::powi(2.0, -24)).to_bits() | sign),
        // Infinities and NaNs, their payload kept.
        0x1f => f32::from_bits(sign | 0x7f80_0000 | (mantissa << 13)),
        // Normal numbers: rebias the exponent from 15 to 127.
        _ => f32::from_bits(sign | ((exponent + 112) << 23) | (mantissa << 13)),
    }
}

/// A float element of `dtype` (little-endian bytes), as a single: every
/// dtype narrower than float64 fits one exactly.
fn single(dtype: Dtype, bytes: &[u8]) -> f32 {
    match (dtype, bytes) {
        (Dtype::Float16, &[a, b]) => half_to_single(u16::from_le_bytes([a, b])),
        // bfloat16 is the upper half of a single.
        (Dtype::Bfloat16, &[a, b]) => f32::from_bits(u32::from(u16::from_le_bytes([a, b])) << 16),
        (_, &[a, b, c, d]) => f32::from_le_bytes([a, b, c, d]),
        _ => f32::NAN,
    }
}

/// Writes the elements of `from` in `source` into `target` as elements of
/// `to`, where `to` is `promote(from, to)`: `target` holds as many elements
/// as `source`. Equal dtypes are a copy.
pub(crate) fn widen(from: Dtype, to: Dtype, source: &[u8], target: &mut [u8]) {
    if from == to {
        target.copy_from_slice(source);
        return;
    }
    let (size, wide) = (from.itemsize() as usize, to.itemsize() as usize);
    let pairs = source.chunks_exact(size).zip(target.chunks_exact_mut(wide));
    if family(to) == Family::Float {
        for (element, out) in pairs {
            let value = single(from, element);
            if to == Dtype::Float64 {
                out.copy_from_slice(&f64::from(value).to_le_bytes());
            } else {
                out.copy_from_slice(&value.to_le_bytes());
            }
        }
    } else {
        for (element, out) in pairs {
            // Two's complement, little-endian: the value's low bytes are its
            // element in any integer wide enough to hold it.
            out.copy_from_slice(&integer(from, element).to_le_bytes()[..wide]);
        }
    }
}

/// `source` (elements of `from`) widened to `to`, appended to `target`.
pub(crate) fn widen_onto(from: Dtype, to: Dtype, source: &[u8], target: &mut Vec<u8>) {
    if from == to {
        target.extend_from_slice(source);
        return;
    }
    let at = target.len();
    let elements = source.len() / from.itemsize() as usize;
    target.resize(at + elements * to.itemsize() as usize, 0);
    widen(from, to, source, &mut target[at..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The range of values of an integer dtype, spelled out.
    fn range(dtype: Dtype) -> Option<(i128, i128)> {
        Some(match dtype {
            Dtype::Int8 => (-128, 127),
            Dtype::Uint8 => (0, 255),
            Dtype::Int16 => (-32_768, 32_767),
            Dtype::Uint16 => (0, 65_535),
            Dtype::Int32 => (-2_147_483_648, 2_147_483_647),
            Dtype::Uint32 => (0, 4_294_967_295),
            Dtype::Int64 => (-9_223_372_036_854_775_808, 9_223_372_036_854_775_807),
            Dtype::Uint64 => (0, 18_446_744_073_709_551_615),
            _ => return None,
        })
    }

    /// (exponent bits, mantissa bits) of a float dtype.
    fn float_bits(dtype: Dtype) -> Option<(u32, u32)> {
        Some(match dtype {
            Dtype::Float16 => (5, 10),
            Dtype::Bfloat16 => (8, 7),
            Dtype::Float32 => (8, 23),
            Dtype::Float64 => (11, 52),
            _ => return None,
        })
    }

    /// The naive promotion: the narrowest dtype of the same kind that holds
    /// every value of both (for floats: at least both exponents and both
    /// mantissas), by a search of the list, not by a rule.
    fn naive_promote(a: Dtype, b: Dtype) -> Option<Dtype> {
        if a == b {
            return Some(a);
        }
        let mut by_size = Dtype::ALL.to_vec();
        by_size.sort_by_key(|d| d.itemsize());
        if let (Some((alo, ahi)), Some((blo, bhi))) = (range(a), range(b)) {
            return by_size.into_iter().find(|&d| {
                range(d).is_some_and(|(lo, hi)| lo <= alo.min(blo) && hi >= ahi.max(bhi))
            });
        }
        if let (Some((ae, am)), Some((be, bm))) = (float_bits(a), float_bits(b)) {
            return by_size
                .into_iter()
                .find(|&d| float_bits(d).is_some_and(|(e, m)| e >= ae.max(be) && m >= am.max(bm)));
        }
        None
    }

    #[test]
    fn promotion_is_numpys_on_every_pair() {
        for a in Dtype::ALL {
            for b in Dtype::ALL {
                assert_eq!(promote(a, b), naive_promote(a, b), "{a} + {b}");
            }
        }
        // The cases the episode's documentation names.
        assert_eq!(promote(Dtype::Uint8, Dtype::Uint16), Some(Dtype::Uint16));
        assert_eq!(promote(Dtype::Uint8, Dtype::Int32), Some(Dtype::Int32));
        assert_eq!(promote(Dtype::Uint32, Dtype::Int32), Some(Dtype::Int64));
        assert_eq!(promote(Dtype::Uint64, Dtype::Int64), None);
        assert_eq!(promote(Dtype::Uint8, Dtype::Float32), None);
        assert_eq!(promote(Dtype::Bool, Dtype::Uint8), None);
        assert_eq!(
            promote(Dtype::Float16, Dtype::Bfloat16),
            Some(Dtype::Float32)
        );
    }

    /// A half-precision number's value by its definition, in a double.
    fn naive_half(bits: u16) -> f64 {
        let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
        let exponent = i32::from((bits >> 10) & 0x1f);
        let fraction = f64::from(bits & 0x3ff) / 1024.0;
        match exponent {
            0 => sign * fraction * 2f64.powi(-14),
            31 if fraction == 0.0 => sign * f64::INFINITY,
            31 => f64::NAN,
            _ => sign * (1.0 + fraction) * 2f64.powi(exponent - 15),
        }
    }

    #[test]
    fn every_half_widens_to_its_value() {
        for bits in 0..=u16::MAX {
            let (got, want) = (f64::from(half_to_single(bits)), naive_half(bits));
            if want.is_nan() {
                assert!(got.is_nan(), "{bits:#06x}");
            } else {
                assert_eq!(got.to_bits(), want.to_bits(), "{bits:#06x}");
            }
        }
    }

    /// An integer element's value, naively: its bytes read at full width,
    /// less 2^bits when the dtype is signed and the top bit is set.
    fn naive_integer(dtype: Dtype, bytes: &[u8]) -> i128 {
        let mut raw = [0u8; 16];
        raw[..bytes.len()].copy_from_slice(bytes);
        let v = u128::from_le_bytes(raw) as i128;
        let negative = range(dtype).is_some_and(|(lo, _)| lo < 0) && bytes[bytes.len() - 1] >= 0x80;
        if negative {
            v - (1i128 << (8 * bytes.len()))
        } else {
            v
        }
    }

    /// A float element's value, naively: halves by their definition, the
    /// others through the standard library.
    fn naive_float(dtype: Dtype, bytes: &[u8]) -> f64 {
        match dtype {
            Dtype::Float16 => naive_half(u16::from_le_bytes([bytes[0], bytes[1]])),
            Dtype::Bfloat16 => f64::from(f32::from_le_bytes([0, 0, bytes[0], bytes[1]])),
            Dtype::Float32 => f64::from(f32::from_le_bytes(bytes.try_into().unwrap())),
            _ => f64::from_le_bytes(bytes.try_into().unwrap()),
        }
    }

    #[test]
    fn widening_keeps_every_value() {
        // Elements from every byte pattern at the edges and a spread between.
        let patterns: Vec<u64> = (0..64)
            .flat_map(|i| {
                [
                    1u64 << i,
                    (1u64 << i) - 1,
                    !(1u64 << i),
                    i * 0x0123_4567_89ab_cdef,
                ]
            })
            .collect();
        for from in Dtype::ALL {
            for to in Dtype::ALL {
                if promote(from, to) != Some(to) {
                    continue;
                }
                let size = from.itemsize() as usize;
                let source: Vec<u8> = patterns
                    .iter()
                    .flat_map(|p| p.to_le_bytes()[..size].to_vec())
                    .collect();
                let mut target = vec![0u8; 3];
                widen_onto(from, to, &source, &mut target);
                assert_eq!(
                    target[..3],
                    [0, 0, 0],
                    "{from} -> {to}: what was there kept"
                );
                let wide = to.itemsize() as usize;
                assert_eq!(target.len() - 3, source.len() / size * wide);
                if from == to {
                    assert_eq!(target[3..], source[..], "{from}: a copy");
                    continue;
                }
                for (element, out) in source.chunks(size).zip(target[3..].chunks(wide)) {
                    if range(from).is_some() {
                        let (want, got) = (naive_integer(from, element), naive_integer(to, out));
                        assert_eq!(got, want, "{from} -> {to}: {element:?}");
                        continue;
                    }
                    let (want, got) = (naive_float(from, element), naive_float(to, out));
                    if want.is_nan() {
                        assert!(got.is_nan(), "{from} -> {to}: {element:?}");
                    } else {
                        assert_eq!(got.to_bits(), want.to_bits(), "{from} -> {to}: {element:?}");
                    }
                }
            }
        }
    }
}
