//! Reading the rows a response points at, for verification.
//!
//! The merge never opens a file; this module does. [`gather`] reconstructs the
//! `(positions, *shape)` array of one field of one choice, in position order,
//! from the files its payload segments point at (rows by handle) or from its
//! inline rows, and [`choice_rows`] a choice's rows of any kind, wherever
//! the table of places puts them. [`check`] looks over a whole response without
//! stopping at the first problem: coverage, gaps, overlaps, dtype and shape
//! consistency, and whether every segment's bytes exist in its file.
//!
//! Both read with `std::fs` through a [`Store`], which confines every read to
//! allowed directories: relative file names resolve against a root, and a
//! file whose canonical path (symlinks resolved) lies outside the root and
//! the directories given with [`Store::confined`] is refused
//! ([`GatherError::Outside`]) and never opened. A missing file, a short file
//! or an unreadable range is an error, never a panic. No metadata value makes
//! them allocate: a read is sized only after the file was found to hold the
//! bytes.
//!
//! One concern per file:
//!
//! - `store.rs`: [`Store`], where files are read from, and its confinement;
//! - `read.rs`: [`choice_rows`], a choice's rows wherever the table of
//!   places puts them, whatever their kind; [`gather`], [`gather_from`]
//!   and [`Gathered`], reading rows;
//! - `field.rs`: [`read_field`], the trainer's reading of a field
//!   ([`crate::reading`]) through a store;
//! - `turn.rs`: [`read_piece`] and [`read_turn`], a turn's rows for the
//!   episode ([`crate::episode`]), wherever the table of places puts them,
//!   and [`TurnReadError`], naming the turn;
//! - `npy.rs`: [`npy_file`], rows as a `.npy` file (the episode's);
//! - `check.rs`: [`check`], [`check_from`] and [`check_with`] (SGLang's rows
//!   too), checking a layout;
//! - `report.rs`: [`CheckReport`] and [`FieldReport`], what `check` found;
//! - `sanity.rs`: [`check_rows`] and [`check_response_rows`], the rows check:
//!   rows no engine should produce (an expert twice in a layer, an id out of
//!   range, a row of zeros);
//! - `error.rs`: [`GatherError`].

mod check;
mod error;
mod field;
mod npy;
mod read;
mod report;
mod sanity;
mod store;
mod turn;

pub use check::{check, check_from, check_with};
pub use error::{GatherError, GatherErrorKind};
pub use field::{read_choice_field, read_field};
pub use npy::npy_file;
pub use read::{
    choice_rows, gather, gather_from, gather_runs_from, gather_sglang, Gathered, Source,
};
pub(crate) use read::{coverage, payload_at};
pub use report::{CheckReport, FieldReport};
pub use sanity::{
    check_gathered, check_response_rows, check_rows, RowFinding, RowProblem, RowsCheck,
    RowsCheckError, RowsReport,
};
pub use store::{Confinement, Store};
pub use turn::{read_piece, read_turn, TurnReadError, TurnResponses};

#[cfg(test)]
mod tests;
