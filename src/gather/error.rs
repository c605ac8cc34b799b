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
    // Not `#[non_exhaustive]`: a transparent wrapper gains no fields, and a
    // non-exhaustive tuple variant cannot be matched as `Response(inner)`.
    #[error(transparent)]
    Response(#[from] Error),
    /// The choice has no rows of the field, by handle or inline.
    #[non_exhaustive]
    #[error("response choices[{choice}]: no rows of field {field:?} (no payload segment, and no inline rows)")]
    NoRows {
        /// The choice.
        choice: usize,
        /// The field.
        field: String,
    },
    /// Positions between two segments that no segment covers.
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
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
    #[non_exhaustive]
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file that ends before a segment's bytes do.
    #[non_exhaustive]
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
    /// What the trainer's reader fails on (it raises), or what a strict
    /// reading refuses: [`crate::reading::ReadError`], said in words.
    #[non_exhaustive]
    #[error("{field}: the trainer cannot read it: {message}")]
    Misread {
        /// The field.
        field: String,
        /// What goes wrong.
        message: String,
    },
    /// Rows too large to hold in memory on this machine.
    #[non_exhaustive]
    #[error("{at}: {bytes} bytes of rows do not fit in memory")]
    TooLarge {
        /// The segment.
        at: Location,
        /// Their size.
        bytes: u64,
    },
    /// SGLang's rows read without their row shape: the wire has flat ids
    /// and no `(layers, top_k)`, so their positions cannot be placed.
    #[non_exhaustive]
    #[error("response output {item}: SGLang's rows need their row shape (layers, top_k), which is not on the wire")]
    RowShapeNeeded {
        /// The output (or, for a response that is no array, 0).
        item: usize,
    },
}

impl GatherError {
    /// What kind of error this is, named as the variant is
    /// ([`GatherErrorKind::as_str`]). For [`GatherError::Response`] the
    /// response's own error has a finer kind: [`Error::kind`].
    pub fn kind(&self) -> GatherErrorKind {
        match self {
            GatherError::Response(_) => GatherErrorKind::Response,
            GatherError::NoRows { .. } => GatherErrorKind::NoRows,
            GatherError::Gap { .. } => GatherErrorKind::Gap,
            GatherError::Overlap { .. } => GatherErrorKind::Overlap,
            GatherError::Inconsistent { .. } => GatherErrorKind::Inconsistent,
            GatherError::Outside { .. } => GatherErrorKind::Outside,
            GatherError::Io { .. } => GatherErrorKind::Io,
            GatherError::ShortFile { .. } => GatherErrorKind::ShortFile,
            GatherError::TooLarge { .. } => GatherErrorKind::TooLarge,
            GatherError::Misread { .. } => GatherErrorKind::Misread,
            GatherError::RowShapeNeeded { .. } => GatherErrorKind::RowShapeNeeded,
        }
    }

    /// The JSON value at fault, where the error is about one: the malformed
    /// value of [`GatherError::Response`], or the segment of
    /// [`GatherError::Inconsistent`], [`GatherError::Outside`],
    /// [`GatherError::ShortFile`] and [`GatherError::TooLarge`]. `None` for
    /// errors about a choice as a whole (which name it by index) or about a
    /// file (which name its path).
    pub fn location(&self) -> Option<&Location> {
        match self {
            GatherError::Response(inner) => Some(inner.location()),
            GatherError::Inconsistent { at, .. }
            | GatherError::Outside { at, .. }
            | GatherError::ShortFile { at, .. }
            | GatherError::TooLarge { at, .. } => Some(at),
            GatherError::NoRows { .. }
            | GatherError::Gap { .. }
            | GatherError::Overlap { .. }
            | GatherError::Io { .. }
            | GatherError::Misread { .. }
            | GatherError::RowShapeNeeded { .. } => None,
        }
    }
}

/// The kind of a [`GatherError`], one per variant and named as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum GatherErrorKind {
    /// [`GatherError::Response`].
    Response,
    /// [`GatherError::NoRows`].
    NoRows,
    /// [`GatherError::Gap`].
    Gap,
    /// [`GatherError::Overlap`].
    Overlap,
    /// [`GatherError::Inconsistent`].
    Inconsistent,
    /// [`GatherError::Outside`].
    Outside,
    /// [`GatherError::Io`].
    Io,
    /// [`GatherError::ShortFile`].
    ShortFile,
    /// [`GatherError::TooLarge`].
    TooLarge,
    /// [`GatherError::Misread`].
    Misread,
    /// [`GatherError::RowShapeNeeded`].
    RowShapeNeeded,
}

impl GatherErrorKind {
    /// Every kind, in the order of the variants of [`GatherError`].
    pub const ALL: [GatherErrorKind; 11] = [
        GatherErrorKind::Response,
        GatherErrorKind::NoRows,
        GatherErrorKind::Gap,
        GatherErrorKind::Overlap,
        GatherErrorKind::Inconsistent,
        GatherErrorKind::Outside,
        GatherErrorKind::Io,
        GatherErrorKind::ShortFile,
        GatherErrorKind::TooLarge,
        GatherErrorKind::Misread,
        GatherErrorKind::RowShapeNeeded,
    ];

    /// The kind's name, which is its variant's: `"ShortFile"`.
    pub const fn as_str(self) -> &'static str {
        match self {
            GatherErrorKind::Response => "Response",
            GatherErrorKind::NoRows => "NoRows",
            GatherErrorKind::Gap => "Gap",
            GatherErrorKind::Overlap => "Overlap",
            GatherErrorKind::Inconsistent => "Inconsistent",
            GatherErrorKind::Outside => "Outside",
            GatherErrorKind::Io => "Io",
            GatherErrorKind::ShortFile => "ShortFile",
            GatherErrorKind::TooLarge => "TooLarge",
            GatherErrorKind::Misread => "Misread",
            GatherErrorKind::RowShapeNeeded => "RowShapeNeeded",
        }
    }
}

impl std::fmt::Display for GatherErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_variant_names() {
        let mut seen = std::collections::BTreeSet::new();
        for kind in GatherErrorKind::ALL {
            assert_eq!(kind.as_str(), format!("{kind:?}"));
            assert!(seen.insert(kind.as_str()), "{kind} twice");
        }
    }
}
