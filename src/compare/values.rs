//! Elements of a row as comparable values, and rows as JSON.
//!
//! Two rows are compared element by element. With one dtype on both sides an
//! element's bits are its identity (so floats compare bitwise: `-0.0` is not
//! `0.0`, and a NaN equals the same NaN). Integer rows of two dtypes (a
//! `uint8` prompt against a `uint16` one) compare by value, since that is
//! what a trainer reads. Anything else cannot be compared meaningfully and is
//! refused before any row is read.

use serde_json::{json, Value};

use crate::algebra::{bf16_to_f64, f16_to_f64, Dtype};

/// Whether `dtype` holds integers (bool excluded: it is not an expert id).
pub(crate) fn is_integer(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::Int8
            | Dtype::Uint8
            | Dtype::Int16
            | Dtype::Uint16
            | Dtype::Int32
            | Dtype::Uint32
            | Dtype::Int64
            | Dtype::Uint64
    )
}

fn signed(dtype: Dtype) -> bool {
    matches!(
        dtype,
        Dtype::Int8 | Dtype::Int16 | Dtype::Int32 | Dtype::Int64
    )
}

/// The element at the start of `bytes` (little-endian, `itemsize` bytes) as
/// an `i128`: its value for integers and bool, its bits for floats.
fn key(dtype: Dtype, bytes: &[u8]) -> i128 {
    let mut raw = [0u8; 8];
    let size = bytes.len().min(8);
    raw[..size].copy_from_slice(&bytes[..size]);
    let unsigned = u64::from_le_bytes(raw);
    if signed(dtype) && size > 0 && size < 8 {
        // Sign-extend from the element's width.
        let shift = 64 - 8 * size as u32;
        i128::from(((unsigned << shift) as i64) >> shift)
    } else if signed(dtype) {
        i128::from(unsigned as i64)
    } else {
        i128::from(unsigned)
    }
}

/// Appends the elements of `bytes` to `out` as comparable keys.
pub(crate) fn keys(dtype: Dtype, bytes: &[u8], out: &mut Vec<i128>) {
    let size = usize::try_from(dtype.itemsize()).unwrap_or(1).max(1);
    out.extend(bytes.chunks_exact(size).map(|element| key(dtype, element)));
}

/// One element as a JSON value: a number, a bool, or null for a float that
/// JSON cannot hold (NaN, infinities).
fn element(dtype: Dtype, bytes: &[u8]) -> Value {
    let k = key(dtype, bytes);
    let float = |x: f64| serde_json::Number::from_f64(x).map_or(Value::Null, Value::Number);
    match dtype {
        Dtype::Bool => Value::Bool(k != 0),
        Dtype::Float16 => float(f16_to_f64(k as u16)),
        Dtype::Bfloat16 => float(bf16_to_f64(k as u16)),
        Dtype::Float32 => float(f64::from(f32::from_bits(k as u32))),
        Dtype::Float64 => float(f64::from_bits(k as u64)),
        _ if signed(dtype) => json!(k as i64),
        _ => json!(k as u64),
    }
}

/// A row as nested JSON arrays of `shape` (a bare value for an empty shape).
pub(crate) fn row_json(dtype: Dtype, shape: &[u64], bytes: &[u8]) -> Value {
    let size = usize::try_from(dtype.itemsize()).unwrap_or(1).max(1);
    match shape.split_first() {
        None => bytes
            .get(..size)
            .map_or(Value::Null, |element_bytes| element(dtype, element_bytes)),
        Some((&outer, inner)) => {
            let outer = usize::try_from(outer).unwrap_or(usize::MAX).max(1);
            let step = bytes.len() / outer;
            if step == 0 {
                return Value::Array(Vec::new());
            }
            Value::Array(
                bytes
                    .chunks_exact(step)
                    .map(|part| row_json(dtype, inner, part))
                    .collect(),
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_values_for_integers_and_bits_for_floats() {
        let mut out = Vec::new();
        keys(Dtype::Int8, &[0xff, 0x7f], &mut out);
        keys(Dtype::Uint8, &[0xff], &mut out);
        keys(Dtype::Int16, &[0xfe, 0xff], &mut out);
        keys(Dtype::Uint16, &[0xfe, 0xff], &mut out);
        keys(Dtype::Int64, &u64::MAX.to_le_bytes(), &mut out);
        keys(Dtype::Uint64, &u64::MAX.to_le_bytes(), &mut out);
        keys(Dtype::Float32, &(-0.0f32).to_le_bytes(), &mut out);
        assert_eq!(
            out,
            [
                -1,
                127,
                255,
                -2,
                65534,
                -1,
                i128::from(u64::MAX),
                i128::from(0x8000_0000u32)
            ]
        );
    }

    #[test]
    fn rows_become_nested_arrays_of_their_values() {
        let bytes: Vec<u8> = [1u16, 2, 300, 4, 5, 6]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            row_json(Dtype::Uint16, &[3, 2], &bytes),
            json!([[1, 2], [300, 4], [5, 6]])
        );
        assert_eq!(row_json(Dtype::Int8, &[], &[0xfb]), json!(-5));
        assert_eq!(row_json(Dtype::Bool, &[2], &[0, 1]), json!([false, true]));
        // 1.5 as half (0x3e00), bfloat16 (0x3fc0), float32 and float64.
        assert_eq!(row_json(Dtype::Float16, &[1], &[0x00, 0x3e]), json!([1.5]));
        assert_eq!(row_json(Dtype::Bfloat16, &[1], &[0xc0, 0x3f]), json!([1.5]));
        assert_eq!(
            row_json(Dtype::Float32, &[], &1.5f32.to_le_bytes()),
            json!(1.5)
        );
        assert_eq!(
            row_json(Dtype::Float64, &[], &f64::NAN.to_le_bytes()),
            Value::Null
        );
    }
}
