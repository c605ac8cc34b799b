//! What the codecs refuse: [`Base64Error`] (text that is not canonical
//! standard base64) and [`NpyError`] (a `.npy` file that cannot be rows).
//!
//! A leaf: it imports nothing of the crate, so the crate's `Error`, one layer
//! up, names these without depending on the codecs themselves.

use std::fmt;

/// Why a text is not canonical standard base64. Indices count characters
/// from the start of the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base64Error {
    /// The length is not a multiple of 4.
    Length(usize),
    /// A character outside the standard alphabet (`-`, `_`, white space, ...).
    Character {
        /// Its index.
        at: usize,
        /// The byte.
        byte: u8,
    },
    /// `=` where it does not belong: inside the text, or more than two.
    Padding(usize),
    /// The last character before the padding has bits set that encode no
    /// byte, so this is not the canonical text of its bytes.
    NonCanonical(usize),
}

impl Base64Error {
    /// The same fault, its index counted `by` characters further on.
    pub(super) fn shift(self, by: usize) -> Base64Error {
        match self {
            Base64Error::Character { at, byte } => Base64Error::Character { at: at + by, byte },
            Base64Error::Padding(at) => Base64Error::Padding(at + by),
            Base64Error::NonCanonical(at) => Base64Error::NonCanonical(at + by),
            Base64Error::Length(n) => Base64Error::Length(n),
        }
    }
}

impl fmt::Display for Base64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Base64Error::Length(n) => write!(f, "length {n} is not a multiple of 4"),
            Base64Error::Character { at, byte } if byte.is_ascii_graphic() => {
                write!(
                    f,
                    "character {:?} at {at} is not in the standard alphabet",
                    byte as char
                )
            }
            Base64Error::Character { at, byte } => {
                write!(
                    f,
                    "byte 0x{byte:02x} at {at} is not in the standard alphabet"
                )
            }
            Base64Error::Padding(at) => write!(f, "misplaced padding '=' at {at}"),
            Base64Error::NonCanonical(at) => {
                write!(
                    f,
                    "character at {at} has unused bits set (not the canonical encoding)"
                )
            }
        }
    }
}

impl std::error::Error for Base64Error {}

/// Why a `.npy` file cannot be read as rows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum NpyError {
    /// It does not start with `\x93NUMPY`.
    Magic,
    /// A format version other than 1.0, 2.0, 3.0.
    Version(u8, u8),
    /// It ends inside the header.
    Truncated,
    /// The header dict cannot be read; says what was wrong.
    Syntax(&'static str),
    /// The header dict lacks a key.
    MissingKey(&'static str),
    /// A dtype that cannot hold rows: object (pickled), structured, string,
    /// `bfloat16`, or an unknown type code.
    Descr(String),
    /// A big-endian dtype.
    BigEndian(String),
    /// A multi-byte dtype in native byte order (`=`, or `|`, which NumPy
    /// reads as `=` for more than one byte): it does not say which order it is.
    NativeOrder(String),
    /// `fortran_order: True`.
    FortranOrder,
    /// The array is not `(seq, layers, topk)`.
    Dimensions(usize),
    /// The data after the header is not `prod(shape) * itemsize` bytes long.
    DataLength {
        /// The size the header implies.
        expected: u64,
        /// The size present.
        got: u64,
    },
}

impl fmt::Display for NpyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NpyError::Magic => f.write_str("not a .npy file (no \\x93NUMPY magic)"),
            NpyError::Version(major, minor) => {
                write!(f, "unsupported .npy format version {major}.{minor}")
            }
            NpyError::Truncated => f.write_str("the .npy header is truncated"),
            NpyError::Syntax(what) => write!(f, "bad .npy header: {what}"),
            NpyError::MissingKey(key) => write!(f, "the .npy header has no {key:?}"),
            NpyError::Descr(descr) => write!(f, "unsupported .npy dtype {descr:?}"),
            NpyError::BigEndian(descr) => {
                write!(f, "big-endian .npy dtype {descr:?} is not supported")
            }
            NpyError::NativeOrder(descr) => write!(
                f,
                "native-order .npy dtype {descr:?} does not say its byte order"
            ),
            NpyError::FortranOrder => f.write_str("Fortran-order .npy arrays are not supported"),
            NpyError::Dimensions(n) => write!(
                f,
                "the array has {n} dimensions; rows need 3 (seq, layers, topk)"
            ),
            NpyError::DataLength { expected, got } => {
                write!(
                    f,
                    "the array data is {got} bytes; its shape and dtype need {expected}"
                )
            }
        }
    }
}

impl std::error::Error for NpyError {}
