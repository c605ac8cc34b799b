//! The element types a row can be stored in.
//!
//! Writers name dtypes the way NumPy does (`"uint8"`, `"bfloat16"`, ...). The
//! merge needs exactly one fact about a dtype: how many bytes one element takes,
//! because that fixes how far apart rows lie in a file. Everything else about the
//! element (signedness, float layout) is the trainer's business.

use std::fmt;
use std::str::FromStr;

/// An element type of a row, by its NumPy name.
///
/// Parsing is exact: only the thirteen names below are accepted, spelled as
/// NumPy spells them. Byte-order prefixed codes such as `"<u2"` or aliases such as
/// `"uint"` are rejected, because a router that guesses a width guesses wrong
/// byte offsets.
///
/// ```
/// use pd_stitch::algebra::Dtype;
///
/// let dtype: Dtype = "uint16".parse()?;
/// assert_eq!(dtype, Dtype::Uint16);
/// assert_eq!(dtype.itemsize(), 2);
/// assert_eq!(dtype.to_string(), "uint16");
/// assert!("<u2".parse::<Dtype>().is_err());
/// # Ok::<(), pd_stitch::algebra::UnknownDtype>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// `bool`: one byte per element.
    Bool,
    /// `int8`: signed, one byte.
    Int8,
    /// `uint8`: unsigned, one byte.
    Uint8,
    /// `int16`: signed, two bytes.
    Int16,
    /// `uint16`: unsigned, two bytes.
    Uint16,
    /// `float16`: IEEE half precision, two bytes.
    Float16,
    /// `bfloat16`: brain float, two bytes.
    Bfloat16,
    /// `int32`: signed, four bytes.
    Int32,
    /// `uint32`: unsigned, four bytes.
    Uint32,
    /// `float32`: IEEE single precision, four bytes.
    Float32,
    /// `int64`: signed, eight bytes.
    Int64,
    /// `uint64`: unsigned, eight bytes.
    Uint64,
    /// `float64`: IEEE double precision, eight bytes.
    Float64,
}

impl Dtype {
    /// Every supported dtype, narrowest first within each kind.
    pub const ALL: [Dtype; 13] = [
        Dtype::Bool,
        Dtype::Int8,
        Dtype::Uint8,
        Dtype::Int16,
        Dtype::Uint16,
        Dtype::Float16,
        Dtype::Bfloat16,
        Dtype::Int32,
        Dtype::Uint32,
        Dtype::Float32,
        Dtype::Int64,
        Dtype::Uint64,
        Dtype::Float64,
    ];

    /// The size of one element in bytes: 1, 2, 4 or 8.
    pub const fn itemsize(self) -> u64 {
        match self {
            Dtype::Bool | Dtype::Int8 | Dtype::Uint8 => 1,
            Dtype::Int16 | Dtype::Uint16 | Dtype::Float16 | Dtype::Bfloat16 => 2,
            Dtype::Int32 | Dtype::Uint32 | Dtype::Float32 => 4,
            Dtype::Int64 | Dtype::Uint64 | Dtype::Float64 => 8,
        }
    }

    /// Whether this is an unsigned integer (`uint8` to `uint64`): the dtypes
    /// that widen into one another without changing a value.
    pub const fn is_unsigned(self) -> bool {
        matches!(
            self,
            Dtype::Uint8 | Dtype::Uint16 | Dtype::Uint32 | Dtype::Uint64
        )
    }

    /// Whether NumPy calls this a float (kind `f`: `float16`, `bfloat16`,
    /// `float32`, `float64`). The trainer's reader picks its output type by
    /// this: float32 for a float, int32 for anything else.
    pub const fn is_float(self) -> bool {
        matches!(
            self,
            Dtype::Float16 | Dtype::Bfloat16 | Dtype::Float32 | Dtype::Float64
        )
    }

    /// The NumPy name of this dtype, as writers spell it.
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "bool",
            Dtype::Int8 => "int8",
            Dtype::Uint8 => "uint8",
            Dtype::Int16 => "int16",
            Dtype::Uint16 => "uint16",
            Dtype::Float16 => "float16",
            Dtype::Bfloat16 => "bfloat16",
            Dtype::Int32 => "int32",
            Dtype::Uint32 => "uint32",
            Dtype::Float32 => "float32",
            Dtype::Int64 => "int64",
            Dtype::Uint64 => "uint64",
            Dtype::Float64 => "float64",
        }
    }

    /// The dtype named `name`, allocating nothing when there is none (the
    /// merge's readers only ask whether there is one, for every payload
    /// segment). A search of [`Dtype::ALL`], so the names stay listed once,
    /// by [`Dtype::name`]: a `match` on the name measured 2% fewer
    /// instructions per by-handle merge (callgrind, 8 x 32), not worth a
    /// second list.
    pub(crate) fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|dtype| dtype.name() == name)
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Dtype {
    type Err = UnknownDtype;

    fn from_str(name: &str) -> Result<Dtype, UnknownDtype> {
        Dtype::from_name(name).ok_or_else(|| UnknownDtype {
            name: name.to_owned(),
        })
    }
}

/// The supported names, comma-separated, for error messages: the one place
/// besides [`Dtype::name`] that lists them is [`Dtype::ALL`], so a new dtype
/// reaches every message.
pub(crate) struct SupportedNames;

impl fmt::Display for SupportedNames {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, dtype) in Dtype::ALL.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            f.write_str(dtype.name())?;
        }
        Ok(())
    }
}

/// An IEEE half (`float16`) given by its bits, as `f64`: exactly, since
/// every half is an `f64` (a NaN as `f64`'s NaN, its payload not kept).
pub(crate) fn f16_to_f64(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exponent = i32::from((bits >> 10) & 0x1f);
    let fraction = f64::from(bits & 0x3ff);
    match exponent {
        0 => sign * fraction * 2f64.powi(-24),
        0x1f if fraction == 0.0 => sign * f64::INFINITY,
        0x1f => f64::NAN,
        _ => sign * (1.0 + fraction / 1024.0) * 2f64.powi(exponent - 15),
    }
}

/// A `bfloat16` given by its bits, as `f64`: the high half of an `f32`.
pub(crate) fn bf16_to_f64(bits: u16) -> f64 {
    f64::from(f32::from_bits(u32::from(bits) << 16))
}

/// A dtype name that is not one of the supported NumPy names.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unsupported dtype {name:?}; expected one of {SupportedNames}")]
pub struct UnknownDtype {
    /// The name that was given.
    pub name: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_sizes_match_numpy() {
        let expected = [
            ("bool", 1),
            ("int8", 1),
            ("uint8", 1),
            ("int16", 2),
            ("uint16", 2),
            ("float16", 2),
            ("bfloat16", 2),
            ("int32", 4),
            ("uint32", 4),
            ("float32", 4),
            ("int64", 8),
            ("uint64", 8),
            ("float64", 8),
        ];
        assert_eq!(expected.len(), Dtype::ALL.len());
        for (dtype, (name, size)) in Dtype::ALL.into_iter().zip(expected) {
            assert_eq!(dtype.name(), name);
            assert_eq!(dtype.itemsize(), size, "{name}");
            assert_eq!(name.parse::<Dtype>(), Ok(dtype));
        }
    }

    #[test]
    fn halves_convert_exactly() {
        // 1.5, subnormals, the largest, infinities and NaN.
        assert_eq!(f16_to_f64(0x3e00), 1.5);
        assert_eq!(f16_to_f64(0xbe00), -1.5);
        assert_eq!(f16_to_f64(0x0001), 2f64.powi(-24));
        assert_eq!(f16_to_f64(0x03ff), 1023.0 * 2f64.powi(-24));
        assert_eq!(f16_to_f64(0x7bff), 65504.0);
        assert_eq!(f16_to_f64(0x7c00), f64::INFINITY);
        assert_eq!(f16_to_f64(0xfc00), f64::NEG_INFINITY);
        assert!(f16_to_f64(0x7e00).is_nan());
        assert_eq!(bf16_to_f64(0x3fc0), 1.5);
        assert_eq!(bf16_to_f64(0xff80), f64::NEG_INFINITY);
        assert!(bf16_to_f64(0x7fc1).is_nan());
    }

    #[test]
    fn other_names_are_rejected() {
        for name in [
            "", "uint", "<u2", "UINT8", "uint8 ", "float", "int128", "object",
        ] {
            let err = name.parse::<Dtype>().unwrap_err();
            assert_eq!(err.name, name);
            assert_eq!(
                err.to_string(),
                format!(
                    "unsupported dtype {name:?}; expected one of bool, int8, uint8, int16, \
                     uint16, float16, bfloat16, int32, uint32, float32, int64, uint64, float64"
                )
            );
        }
    }
}
