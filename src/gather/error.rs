//! [`GatherError`]: why rows could not be gathered.
//!
//! One type for the three kinds of failure a reader meets: the response
//! (malformed values, no rows), the layout of its segments (gaps, overlaps,
//! disagreeing dtypes or shapes), and the files (refused, missing, short, too
//! large to hold).

use std::path::PathBuf;

use crate::algebra::Rows;
use crate::error::{Error, Location};

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
    /// A file whose canonical path (symlinks and `..` resolved) lies outside
    /// every directory the store may read (its root and the allowed ones).
    /// Nothing of it was read.
    #[error("{at}: file {} resolves to {}, outside the allowed directories", path.display(), resolved.display())]
    Outside {
        /// The segment.
        at: Location,
        /// The file as named, joined to the root when relative.
        path: PathBuf,
        /// Its canonical path.
        resolved: PathBuf,
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
