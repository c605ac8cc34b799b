//! What a place of rows is: every engine's rows, and the counts that place
//! them, sit at a key of some object of the response: a choice, a member
//! object of a choice, or a member object of the response (of each output,
//! when an SGLang batch answers an array). Each format lists its places
//! with these types (`Format::PLACES`); `mod.rs` is the table they make.
//! A new place is one row of its format's list.

use crate::error::{Location, Side};
use crate::response::patch::Path;
use crate::response::view::View;

/// Which kind of rows a place holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowsKind {
    /// vLLM's and prime-rl's inline rows: compact, or a `.npy`.
    Inline,
    /// Segments pointing into shared files (`payload`).
    ByHandle,
    /// SGLang's flat `int32` ids.
    Sglang,
}

/// What holds a place's key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holder {
    /// Each element of the response's `choices`.
    Choice,
    /// The object at this key of each choice.
    ChoiceMember(&'static str),
    /// The object at this key of the response (of each output of an array).
    Member(&'static str),
}

/// What a place's value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Holds {
    /// Rows of this kind, read whole.
    Rows(RowsKind),
    /// A count that places rows: an integer, or an array of which only the
    /// length is read.
    Count,
}

/// One place: the key, what holds it, and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Place {
    /// What holds the key.
    pub holder: Holder,
    /// The key.
    pub key: &'static str,
    /// What its value is.
    pub holds: Holds,
}

impl Place {
    /// Whether the place is one per choice (held by a choice or by an
    /// object of it), rather than one per response.
    pub(crate) const fn per_choice(&self) -> bool {
        !matches!(self.holder, Holder::Member(_))
    }

    /// The object that holds the key: `choice` (an element of the
    /// response's `choices`), an object of it, or an object of `response`.
    pub(crate) fn holder_in<'a, V: View<'a>>(&self, response: V, choice: Option<V>) -> Option<V> {
        match self.holder {
            Holder::Choice => choice,
            Holder::ChoiceMember(member) => choice?.get(member),
            Holder::Member(member) => response.get(member),
        }
    }

    /// The value at the place, `choice` as [`Place::holder_in`] takes it.
    pub(crate) fn value_in<'a, V: View<'a>>(&self, response: V, choice: Option<V>) -> Option<V> {
        self.holder_in(response, choice)?.get(self.key)
    }

    /// The path from the response's root to the place of choice `choice`
    /// (the same for every choice when the response holds it).
    pub(crate) fn path(&self, choice: usize) -> Path {
        let choice = || Path::ROOT.key("choices").index(choice);
        match self.holder {
            Holder::Choice => choice(),
            Holder::ChoiceMember(member) => choice().key(member),
            Holder::Member(member) => Path::ROOT.key(member),
        }
        .key(self.key)
    }

    /// Where the place of choice `choice` is, in a response on `side`.
    pub(crate) fn at(&self, side: Side, choice: usize) -> Location {
        self.path(choice).location(side)
    }
}

/// A place, written short in the formats' lists.
pub(crate) const fn place(holder: Holder, key: &'static str, holds: Holds) -> Place {
    Place { holder, key, holds }
}
