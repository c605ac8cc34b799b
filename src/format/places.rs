//! Where rows sit in a response, in one table.
//!
//! Every engine's rows, and the counts that place them, sit at a key of
//! some object of the response: a choice, a member object of a choice, or a
//! member object of the response (of each output, when an SGLang batch
//! answers an array). Each format lists its own places
//! (`Format::PLACES`), and the table
//! ([`all`]) is theirs, in the order of the formats. The readers that must
//! not miss one are read from it instead of spelling the paths again:
//!
//! - the bytes path's scanner records what the table names (and nothing
//!   deeper), so that the bytes merge sees every rows value the `Value`
//!   merge sees;
//! - the stream stitcher finds an event's rows at the table's places;
//! - the Python binding converts only the table's places of a `dict`
//!   response before the merge reads it.
//!
//! A new place is one row of its format's list. `tests/it/places.rs` walks
//! the table and holds each reader to it.

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

/// Every place, each format's in the order of the formats (a place two
/// formats read is listed by each).
pub fn all() -> impl Iterator<Item = &'static Place> {
    super::PLACES.iter().flat_map(|places| places.iter())
}

/// Whether the response's member `key` is an object holding places.
#[inline]
pub(crate) fn is_member_holder(key: &[u8]) -> bool {
    all().any(|p| matches!(p.holder, Holder::Member(m) if m.as_bytes() == key))
}

/// Whether a choice's member `key` is an object holding places.
#[inline]
pub(crate) fn is_choice_member_holder(key: &[u8]) -> bool {
    all().any(|p| matches!(p.holder, Holder::ChoiceMember(m) if m.as_bytes() == key))
}

/// Whether a choice's member `key` holds rows.
#[inline]
pub(crate) fn is_choice_rows(key: &[u8]) -> bool {
    all().any(|p| p.holder == Holder::Choice && p.key.as_bytes() == key && p.holds != Holds::Count)
}

/// The keys of the places that `holder` holds, each once, in the table's
/// order.
pub fn keys_of(holder: Holder) -> impl Iterator<Item = &'static str> {
    let mut keys: Vec<&'static str> = Vec::new();
    for place in all().filter(|p| p.holder == holder) {
        if !keys.contains(&place.key) {
            keys.push(place.key);
        }
    }
    keys.into_iter()
}

/// The holders that are objects (of a choice, or of the response), each
/// once, in the table's order.
pub fn object_holders() -> impl Iterator<Item = Holder> {
    let mut holders: Vec<Holder> = Vec::new();
    for place in all().filter(|p| p.holder != Holder::Choice) {
        if !holders.contains(&place.holder) {
            holders.push(place.holder);
        }
    }
    holders.into_iter()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_s_questions_answer_from_it() {
        assert!(is_member_holder(b"meta_info") && is_member_holder(b"usage"));
        assert!(!is_member_holder(b"choices") && !is_member_holder(b"sgl_ext"));
        assert!(is_choice_member_holder(b"sgl_ext") && !is_choice_member_holder(b"meta_info"));
        assert!(is_choice_rows(b"payload") && is_choice_rows(b"routed_experts"));
        assert!(!is_choice_rows(b"token_ids"));
        let usage = Holder::Member("usage");
        let meta_info = Holder::Member("meta_info");
        assert_eq!(
            object_holders().collect::<Vec<_>>(),
            [
                usage,
                meta_info,
                Holder::Member("sglext"),
                Holder::ChoiceMember("sgl_ext")
            ]
        );
        assert_eq!(
            keys_of(usage).collect::<Vec<_>>(),
            ["prompt_tokens", "completion_tokens"]
        );
        assert_eq!(
            keys_of(meta_info).collect::<Vec<_>>(),
            ["routed_experts", "prompt_tokens", "completion_tokens"]
        );
    }
}
