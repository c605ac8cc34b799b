//! A multi-turn episode's rows, assembled by one rule from its turns' rows.
//!
//! A trainer trains on an **episode**: turn 1's prompt and completion, then
//! turn 2's prompt (which repeats turn 1 and adds new tokens) and
//! completion, and so on. Router replay needs one row per position of the
//! whole episode. Each turn's response has rows for its own positions (all
//! of them, or from a delta start it asked for, as one stitched response or
//! as a P/D pair); [`Episode`] places them by the turns' token counts, joins
//! each turn to the one it continues by their common token prefix, and
//! keeps one row per position by one rule, [`Prefer`]:
//!
//! - [`Prefer::Earliest`] (the default): a position keeps the first row
//!   computed for it, and the boundary (the last token of a turn, which
//!   never went through the model in that turn) takes the next turn's;
//! - [`Prefer::Latest`]: the last turn that computed a position wins.
//!
//! Every check is an [`EpisodeError`] naming the turn, the position and what
//! was expected, and leaves the episode as it was. Rows that meet and
//! differ are not an error: they are counted and listed per turn
//! ([`TurnReport`]). [`classify`] compares an assembled path with a forward
//! of the whole episode as one prompt and sorts every difference as
//! boundary, decode-sourced or scattered ([`Finding`]).
//!
//! Pure: no I/O and no JSON. Reading a turn's rows out of a response is
//! its reader's work (with the `verify` feature, `gather::read_turn`, which
//! the Python binding and `pd-stitch episode` call); this module takes them
//! as [`RowPiece`]s (dtype, row
//! shape, bytes, a first position when the wire says one, and the side of
//! a P/D pair when there are two). `docs/SPEC.md`, "The episode", states
//! the rules and the laws, with the tests that check them.

mod assembled;
mod classify;
mod error;
mod place;
mod prefer;
mod trie;
mod turn;
mod widen;

pub use assembled::{Assembled, RowSource, TurnReport};
pub use classify::{classify, Classified, Finding};
pub use error::{EpisodeError, EpisodeErrorKind, Owner};
pub use prefer::Prefer;
pub use trie::Episode;
pub use turn::{Phase, RowPiece, Turn};
