//! The one table of where rows sit: every format's places
//! ([`Format::PLACES`](super::Format::PLACES)), in the order of
//! [`All`], and the questions the readers ask of it. The readers that
//! must not miss a place ask here instead of spelling the paths again:
//!
//! - the bytes path's scanner records what the table names (and nothing
//!   deeper), so that the bytes merge sees every rows value the `Value`
//!   merge sees;
//! - the stream stitcher finds an event's rows at the table's places;
//! - the Python binding converts only the table's places of a `dict`
//!   response before the merge reads it, and `probe` reads the engines'
//!   keys from it (`pd_stitch::places`).
//!
//! `tests/it/places.rs` walks the table and holds each reader to it.

use std::sync::OnceLock;

use super::places::{Holder, Holds, Place};
use super::{All, Formats};

/// Every place, each format's in the order of the formats (a place two
/// formats read is listed by each).
pub fn every_place() -> impl Iterator<Item = &'static Place> {
    All::places()
}

/// The keys the readers ask about, read from the table once: the scanner
/// asks for every member of the objects it records, and the Python binding
/// for the holders on every response it converts, so each answer is a look
/// over a few keys rather than a walk of the table.
struct Keys {
    /// The response's members that are objects holding places.
    member_holders: Vec<&'static [u8]>,
    /// A choice's members that are objects holding places.
    choice_member_holders: Vec<&'static [u8]>,
    /// A choice's members that hold rows.
    choice_rows: Vec<&'static [u8]>,
    /// The members that hold rows of the objects that hold places.
    member_rows: Vec<&'static [u8]>,
    /// Every holder with its keys, each once, in the table's order.
    holders: Vec<(Holder, Vec<&'static str>)>,
}

fn keys() -> &'static Keys {
    static KEYS: OnceLock<Keys> = OnceLock::new();
    KEYS.get_or_init(|| {
        let mut keys = Keys {
            member_holders: Vec::new(),
            choice_member_holders: Vec::new(),
            choice_rows: Vec::new(),
            member_rows: Vec::new(),
            holders: Vec::new(),
        };
        for place in every_place() {
            let at = keys
                .holders
                .iter()
                .position(|(holder, _)| *holder == place.holder)
                .unwrap_or_else(|| {
                    keys.holders.push((place.holder, Vec::new()));
                    keys.holders.len() - 1
                });
            if let Some((_, held)) = keys.holders.get_mut(at) {
                if !held.contains(&place.key) {
                    held.push(place.key);
                }
            }
            let (list, key) = match (place.holder, place.holds) {
                (Holder::Member(member), _) => (&mut keys.member_holders, member),
                (Holder::ChoiceMember(member), _) => (&mut keys.choice_member_holders, member),
                (Holder::Choice, Holds::Rows(_)) => (&mut keys.choice_rows, place.key),
                (Holder::Choice, Holds::Count) => continue,
            };
            add(list, key);
            if place.holder != Holder::Choice && matches!(place.holds, Holds::Rows(_)) {
                add(&mut keys.member_rows, place.key);
            }
        }
        keys
    })
}

/// Adds `key` to `list` unless it is there.
fn add(list: &mut Vec<&'static [u8]>, key: &'static str) {
    if !list.contains(&key.as_bytes()) {
        list.push(key.as_bytes());
    }
}

/// Whether the response's member `key` is an object holding places.
#[inline]
pub(crate) fn is_member_holder(key: &[u8]) -> bool {
    keys().member_holders.contains(&key)
}

/// Whether a choice's member `key` is an object holding places.
#[inline]
pub(crate) fn is_choice_member_holder(key: &[u8]) -> bool {
    keys().choice_member_holders.contains(&key)
}

/// Whether a choice's member `key` holds rows.
#[inline]
pub(crate) fn is_choice_rows(key: &[u8]) -> bool {
    keys().choice_rows.contains(&key)
}

/// Whether the member `key` of an object holding places holds rows.
#[inline]
pub(crate) fn is_member_rows(key: &[u8]) -> bool {
    keys().member_rows.contains(&key)
}

/// The keys of the places that `holder` holds, each once, in the table's
/// order.
pub fn keys_of(holder: Holder) -> impl Iterator<Item = &'static str> {
    holders()
        .iter()
        .find(|(h, _)| *h == holder)
        .map_or(&[][..], |(_, keys)| keys.as_slice())
        .iter()
        .copied()
}

/// The holders that are objects (of a choice, or of the response), each
/// once, in the table's order.
pub fn object_holders() -> impl Iterator<Item = Holder> {
    holders()
        .iter()
        .map(|(holder, _)| *holder)
        .filter(|holder| *holder != Holder::Choice)
}

/// Every holder with its keys, each once, in the table's order.
fn holders() -> &'static [(Holder, Vec<&'static str>)] {
    &keys().holders
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
        assert!(is_member_rows(b"routed_experts") && !is_member_rows(b"prompt_tokens"));
        let usage = Holder::Member("usage");
        let meta_info = Holder::Member("meta_info");
        assert_eq!(
            object_holders().collect::<Vec<_>>(),
            [
                usage,
                meta_info,
                Holder::Member("sglext"),
                Holder::ChoiceMember("sgl_ext"),
                Holder::Member("nvext")
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
        let choice: Vec<_> = keys_of(Holder::Choice).collect();
        for key in ["routed_experts", "payload", "token_ids"] {
            assert_eq!(choice.iter().filter(|k| **k == key).count(), 1, "{key}");
        }
        assert_eq!(keys_of(Holder::Member("choices")).count(), 0);
    }
}
