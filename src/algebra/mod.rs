//! The pure algebra of the merge: dtypes, position intervals, segments, cuts.
//!
//! Nothing in here knows JSON or files. A router's response path and the tests'
//! reference models both reduce to these types, which is what lets the laws in
//! `docs/SPEC.md` be stated (and property-tested) once, on small values.
//!
//! - [`Dtype`]: an element type and its size.
//! - [`Rows`]: a half-open interval of positions, built with checked arithmetic.
//! - [`Extent`]: a position interval tied to a byte interval, the geometry of
//!   a segment.
//! - [`Segment`]: rows of one field back to back in a file: an extent with a
//!   field, a file, a dtype and a shape.
//! - [`cut`], [`Cuts`], [`merge_segments`]: the P/D merge rule.
//! - [`check_layout`]: the layout rule, whether segments read in order give
//!   the rows in position order (strict merges and `check`).

mod dtype;
mod extent;
mod layout;
mod merge;
mod positions;
mod rows;
mod segment;

pub(crate) use dtype::SupportedNames;
pub(crate) use dtype::{bf16_to_f64, f16_to_f64};
pub use dtype::{Dtype, UnknownDtype};
pub use extent::Extent;
pub use layout::{check_layout, LayoutProblem};
pub use merge::{cut, merge_segments, Cuts, MissingField};
pub use positions::{Convention, PositionProblem};
pub use rows::Rows;
pub use segment::{row_bytes, Overflow, Segment};
