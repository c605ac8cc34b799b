//! What a place of rows is: every engine's rows, and the counts that place
//! them, sit at a key of some object of the response: a choice, a member
//! object of a choice, or a member object of the response (of each output,
//! when an SGLang batch answers an array). Each format lists its places
//! with these types (`Format::PLACES`); `table.rs` is the table they make.
//! A new place is one row of its format's list.

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

/// A place, written short in the formats' lists.
pub(crate) const fn place(holder: Holder, key: &'static str, holds: Holds) -> Place {
    Place { holder, key, holds }
}
