//! Where rows sit in a response, in one table.
//!
//! Every engine's rows, and the counts that place them, sit at a key of
//! some object of the response: a choice, a member object of a choice, or a
//! member object of the response (of each output, when an SGLang batch
//! answers an array). [`PLACES`] lists them; the readers that must not miss
//! one are read from it instead of spelling the paths again:
//!
//! - the bytes path's scanner records what the table names (and nothing
//!   deeper), so that the bytes merge sees every rows value the `Value`
//!   merge sees;
//! - the stream stitcher finds an event's rows at the table's places;
//! - the Python binding converts only the table's places of a `dict`
//!   response before the merge reads it.
//!
//! A new place is one row here. `tests/it/places.rs` walks the table and
//! holds each reader to it.

use crate::fields::ROUTED_EXPERTS;

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

const fn place(holder: Holder, key: &'static str, holds: Holds) -> Place {
    Place { holder, key, holds }
}

/// SGLang's `/generate` output metadata: its rows and their counts.
const META_INFO: Holder = Holder::Member("meta_info");
/// SGLang's response-level extension of chat and completions.
const SGLEXT: Holder = Holder::Member("sglext");
/// The OpenAI usage object: the counts of SGLang's OpenAI rows and of a
/// vLLM 0.32 `.npy`.
const USAGE: Holder = Holder::Member("usage");
/// SGLang's older per-choice extension.
const SGL_EXT: Holder = Holder::ChoiceMember("sgl_ext");

/// Every place rows, or the counts that place them, sit: SPEC sections 4
/// (inline), 2 (by handle), 4a (vLLM 0.32's counts) and 10 (SGLang).
pub const PLACES: &[Place] = &[
    place(
        Holder::Choice,
        ROUTED_EXPERTS,
        Holds::Rows(RowsKind::Inline),
    ),
    place(Holder::Choice, "payload", Holds::Rows(RowsKind::ByHandle)),
    place(Holder::Choice, "token_ids", Holds::Count),
    place(META_INFO, ROUTED_EXPERTS, Holds::Rows(RowsKind::Sglang)),
    place(META_INFO, "prompt_tokens", Holds::Count),
    place(META_INFO, "completion_tokens", Holds::Count),
    place(SGLEXT, ROUTED_EXPERTS, Holds::Rows(RowsKind::Sglang)),
    place(USAGE, "prompt_tokens", Holds::Count),
    place(USAGE, "completion_tokens", Holds::Count),
    place(SGL_EXT, ROUTED_EXPERTS, Holds::Rows(RowsKind::Sglang)),
];

/// Whether the response's member `key` is an object holding places.
#[inline]
pub(crate) fn is_member_holder(key: &[u8]) -> bool {
    PLACES
        .iter()
        .any(|p| matches!(p.holder, Holder::Member(m) if m.as_bytes() == key))
}

/// Whether a choice's member `key` is an object holding places.
#[inline]
pub(crate) fn is_choice_member_holder(key: &[u8]) -> bool {
    PLACES
        .iter()
        .any(|p| matches!(p.holder, Holder::ChoiceMember(m) if m.as_bytes() == key))
}

/// Whether a choice's member `key` holds rows.
#[inline]
pub(crate) fn is_choice_rows(key: &[u8]) -> bool {
    PLACES
        .iter()
        .any(|p| p.holder == Holder::Choice && p.key.as_bytes() == key && p.holds != Holds::Count)
}

/// The keys of the places that `holder` holds, in the table's order.
pub fn keys_of(holder: Holder) -> impl Iterator<Item = &'static str> {
    PLACES
        .iter()
        .filter(move |p| p.holder == holder)
        .map(|p| p.key)
}

/// The holders that are objects (of a choice, or of the response), each
/// once, in the table's order.
pub fn object_holders() -> impl Iterator<Item = Holder> {
    PLACES
        .iter()
        .enumerate()
        .filter(|(i, p)| {
            p.holder != Holder::Choice && !PLACES[..*i].iter().any(|q| q.holder == p.holder)
        })
        .map(|(_, p)| p.holder)
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
        assert_eq!(
            object_holders().collect::<Vec<_>>(),
            [META_INFO, SGLEXT, USAGE, SGL_EXT]
        );
        assert_eq!(
            keys_of(META_INFO).collect::<Vec<_>>(),
            ["routed_experts", "prompt_tokens", "completion_tokens"]
        );
    }
}
