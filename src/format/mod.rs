//! The table of formats: every kind of rows, one file each, and the one
//! list of them, [`All`], which everything that finds, reads, checks or
//! locates rows asks.
//!
//! A format ([`interface::Format`]) is one way a response carries rows:
//! where they sit (its places, [`places`]), how they are read and
//! validated, and how a prefill's and a decode's merge. The plan
//! (`crate::merge`) knows no format by name: it runs [`All`] in its order
//! and collects what each would write as patches, which the adapters apply
//! without knowing any kind of rows. The questions below answer from the
//! formats' own places, read through [`All`], so that no reader spells a
//! place again: the bytes path's scanner records what they name, the
//! stream's prefilter looks for their keys and its slots find an event's
//! rows there, the Python binding converts only them, and the verifiers
//! (`gather`, `check`, `compare`) read rows at each of them.
//! `tests/it/places.rs` walks the table through every path, and
//! `scripts/new_format.sh` adds a format to a copy of the crate to show
//! that a new convention is its file here and its row of [`All`], nothing
//! more.
//!
//! This file is the top of `format/`: the formats import from the files
//! below them (`interface.rs`, `places.rs`, the shared readers), never from
//! here (`scripts/layering.py` holds that order).

pub(crate) mod by_handle;
pub(crate) mod end_anchored;
pub(crate) mod inline;
pub(crate) mod interface;
pub(crate) mod nvext;
pub mod places;
pub(crate) mod sglang;
pub(crate) mod stitch;
pub(crate) mod strict;
pub(crate) mod vllm;

use std::sync::OnceLock;

use by_handle::ByHandle;
use inline::InlineAt;
use interface::{Formats, PlaceList};
use places::{Holder, Holds, Place};
use sglang::Sglang;

/// A list of formats as the plan runs it, `(first, (second, ... ()))`,
/// written one row a line.
macro_rules! list {
    () => { () };
    ($first:ty $(, $rest:ty)* $(,)?) => { ($first, list!($($rest),*)) };
}

/// Every format, one row each, in the order the plan runs them (a nested
/// pair, so that the plan runs each with its own types and no dynamic
/// call). A new convention is its file, its `mod` line above and its row
/// here.
pub(crate) type All = list![
    InlineAt<vllm::Vllm>,
    ByHandle,
    Sglang,
    InlineAt<nvext::Nvext>,
];

/// Every place, each format's in the order of the formats (a place two
/// formats read is listed by each).
pub fn every_place() -> impl Iterator<Item = &'static Place> {
    PlaceList::iter(All::PLACES)
}

/// Every key that holds rows at some place, each once, in the table's
/// order: what a text that may carry rows must spell (or escape). A
/// constant, so that the stream's prefilter is compiled for the table's
/// keys as if it spelled them.
pub(crate) const ROWS_KEYS: KeyList = KeyList::of(All::PLACES, Asked::Rows);

/// The keys of a choice's members that hold counts (`token_ids`), each
/// once, in the table's order.
pub(crate) const CHOICE_COUNT_KEYS: KeyList = KeyList::of(All::PLACES, Asked::ChoiceCounts);

/// The most keys a [`KeyList`] holds: more fail the build.
const MAX_KEYS: usize = 16;

/// Which keys [`KeyList::of`] takes.
#[derive(Clone, Copy)]
enum Asked {
    /// Every key that holds rows.
    Rows,
    /// A choice's keys that hold counts.
    ChoiceCounts,
}

/// Keys of the table, each once, in its order: made in a constant.
#[derive(Clone, Copy, Debug)]
pub(crate) struct KeyList {
    keys: [&'static [u8]; MAX_KEYS],
    len: usize,
}

impl KeyList {
    /// The keys of the places of `list` that `asked` takes.
    const fn of(list: Option<&'static PlaceList>, asked: Asked) -> KeyList {
        let mut keys = KeyList {
            keys: [&[]; MAX_KEYS],
            len: 0,
        };
        let mut list = list;
        while let Some(places) = list {
            let mut i = 0;
            while i < places.first.len() {
                let place = &places.first[i];
                let taken = match asked {
                    Asked::Rows => matches!(place.holds, Holds::Rows(_)),
                    Asked::ChoiceCounts => {
                        matches!((place.holder, place.holds), (Holder::Choice, Holds::Count))
                    }
                };
                if taken && !keys.contains(place.key.as_bytes()) {
                    assert!(keys.len < MAX_KEYS, "more keys than MAX_KEYS: raise it");
                    keys.keys[keys.len] = place.key.as_bytes();
                    keys.len += 1;
                }
                i += 1;
            }
            list = places.rest;
        }
        keys
    }

    /// Whether `key` is one of them.
    const fn contains(&self, key: &[u8]) -> bool {
        let mut k = 0;
        while k < self.len {
            if same(self.keys[k], key) {
                return true;
            }
            k += 1;
        }
        false
    }

    /// The keys.
    pub(crate) const fn as_slice(&self) -> &[&'static [u8]] {
        self.keys.split_at(self.len).0
    }
}

/// Whether two byte strings are equal (in a constant).
const fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

/// The keys the readers ask about, read from the table once: the scanner
/// asks for every member of the objects it records, and the Python binding
/// for the holders on every response it converts, so each answer is a look
/// over a few keys rather than a walk of the table.
struct KeyIndex {
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

fn index() -> &'static KeyIndex {
    static INDEX: OnceLock<KeyIndex> = OnceLock::new();
    INDEX.get_or_init(|| {
        let mut index = KeyIndex {
            member_holders: Vec::new(),
            choice_member_holders: Vec::new(),
            choice_rows: Vec::new(),
            member_rows: Vec::new(),
            holders: Vec::new(),
        };
        for place in every_place() {
            let at = index
                .holders
                .iter()
                .position(|(holder, _)| *holder == place.holder)
                .unwrap_or_else(|| {
                    index.holders.push((place.holder, Vec::new()));
                    index.holders.len() - 1
                });
            if let Some((_, held)) = index.holders.get_mut(at) {
                if !held.contains(&place.key) {
                    held.push(place.key);
                }
            }
            let rows = matches!(place.holds, Holds::Rows(_));
            let (list, key) = match (place.holder, rows) {
                (Holder::Member(member), _) => (&mut index.member_holders, member),
                (Holder::ChoiceMember(member), _) => (&mut index.choice_member_holders, member),
                (Holder::Choice, true) => (&mut index.choice_rows, place.key),
                (Holder::Choice, false) => continue,
            };
            add(list, key);
            if place.holder != Holder::Choice && rows {
                add(&mut index.member_rows, place.key);
            }
        }
        index
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
    index().member_holders.contains(&key)
}

/// Whether a choice's member `key` is an object holding places.
#[inline]
pub(crate) fn is_choice_member_holder(key: &[u8]) -> bool {
    index().choice_member_holders.contains(&key)
}

/// Whether a choice's member `key` holds rows.
#[inline]
pub(crate) fn is_choice_rows(key: &[u8]) -> bool {
    index().choice_rows.contains(&key)
}

/// Whether the member `key` of an object holding places holds rows.
#[inline]
pub(crate) fn is_member_rows(key: &[u8]) -> bool {
    index().member_rows.contains(&key)
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
    &index().holders
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Today's places answer as they should; written to hold when a
    /// format is added (containment, each once), so that a new row of
    /// [`All`] needs no edit here.
    #[test]
    fn the_table_s_questions_answer_from_it() {
        assert!(is_member_holder(b"meta_info") && is_member_holder(b"usage"));
        assert!(!is_member_holder(b"choices") && !is_member_holder(b"sgl_ext"));
        assert!(is_choice_member_holder(b"sgl_ext") && !is_choice_member_holder(b"meta_info"));
        assert!(is_choice_rows(b"payload") && is_choice_rows(b"routed_experts"));
        assert!(!is_choice_rows(b"token_ids"));
        assert!(is_member_rows(b"routed_experts") && !is_member_rows(b"prompt_tokens"));
        let once = |list: &[&[u8]], key: &[u8]| list.iter().filter(|k| **k == key).count() == 1;
        let (rows, counts) = (ROWS_KEYS.as_slice(), CHOICE_COUNT_KEYS.as_slice());
        assert!(once(rows, b"routed_experts") && once(rows, b"payload"));
        assert!(!rows.contains(&&b"token_ids"[..]) && !rows.contains(&&b"prompt_tokens"[..]));
        assert!(once(counts, b"token_ids") && !counts.contains(&&b"payload"[..]));
        // Every key that holds rows, each once.
        let all: Vec<&[u8]> = every_place()
            .filter(|p| matches!(p.holds, Holds::Rows(_)))
            .map(|p| p.key.as_bytes())
            .collect();
        assert!(all.iter().all(|key| once(rows, key)) && rows.iter().all(|key| all.contains(key)));
        let usage = Holder::Member("usage");
        let meta_info = Holder::Member("meta_info");
        let objects: Vec<_> = object_holders().collect();
        for holder in [
            usage,
            meta_info,
            Holder::Member("sglext"),
            Holder::ChoiceMember("sgl_ext"),
            Holder::Member("nvext"),
        ] {
            assert_eq!(
                objects.iter().filter(|h| **h == holder).count(),
                1,
                "{holder:?}"
            );
        }
        assert!(!objects.contains(&Holder::Choice));
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
