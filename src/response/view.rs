//! [`View`]: the read-only window onto a JSON response that the merge plan
//! reads through.
//!
//! The plan of a merge (which payload item is kept, dropped or clipped; what
//! the merged inline rows are) is computed once, by code generic over this
//! trait, and shared by the two adapters that differ only in how they read
//! and write: the `serde_json::Value` entry points, and [`bytes`](crate::bytes),
//! which reads an index of the raw text and rewrites only the stitched values.
//!
//! A view answers the questions `serde_json::Value` answers, with its
//! semantics: an object's duplicate keys resolve to the last one, keys and
//! strings are compared unescaped, and a number is a `u64` only when it is an
//! integer in `0..=u64::MAX` written without a fraction or an exponent.

use std::borrow::Cow;

use serde_json::Value;

use crate::error::describe;

/// The JSON type of a value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Null,
    Bool,
    Number,
    String,
    Array,
    Object,
}

/// A JSON value, seen without being copied.
///
/// `'a` is the lifetime of the text or tree the view borrows from.
pub(crate) trait View<'a>: Copy + 'a {
    /// Whether an object's keys are unique (a map), so that the first
    /// occurrence of a key is the one `serde_json` keeps; a reader of raw
    /// text sees every occurrence.
    const UNIQUE_KEYS: bool = false;

    /// The value's JSON type.
    fn kind(self) -> Kind;

    /// The value as a `u64`, when it is an integer in `0..=u64::MAX`.
    fn as_u64(self) -> Option<u64>;

    /// The value as a string, unescaped (borrowed when it needs no
    /// unescaping).
    fn as_str(self) -> Option<Cow<'a, str>>;

    /// The value's UTF-8 bytes, unescaped, when it is a string: what
    /// [`View::as_str`] gives, without looking at the text again to show
    /// that it is UTF-8.
    fn as_bytes(self) -> Option<Cow<'a, [u8]>>;

    /// How many leading bytes of a string are base64 alphabet characters,
    /// when the reader counted them as it read the text (`None`: not
    /// counted; the caller looks).
    fn alphabet_prefix(self) -> Option<usize> {
        None
    }

    /// The value of `key` when this is an object that has it (the last one,
    /// when the key is repeated).
    fn get(self, key: &str) -> Option<Self>;

    /// The elements, when this is an array.
    fn elements(self) -> Option<impl Iterator<Item = Self> + 'a>;

    /// The entries in text order, keys unescaped, when this is an object. A
    /// repeated key is seen once per occurrence: a reader that keeps the last
    /// sees what `serde_json` keeps.
    fn entries(self) -> Option<impl Iterator<Item = (Cow<'a, str>, Self)> + 'a>;

    /// [`View::entries`] with the keys as UTF-8 bytes: a reader that holds
    /// validated text need not show again that a key is UTF-8 to compare
    /// it.
    fn members(self) -> Option<impl Iterator<Item = (Cow<'a, [u8]>, Self)> + 'a> {
        Some(self.entries()?.map(|(key, value)| {
            let key = match key {
                Cow::Borrowed(key) => Cow::Borrowed(key.as_bytes()),
                Cow::Owned(key) => Cow::Owned(key.into_bytes()),
            };
            (key, value)
        }))
    }

    /// The value as an error message shows it (see [`describe`]).
    fn describe(self) -> String;

    /// Whether the value is JSON `null`.
    fn is_null(self) -> bool {
        self.kind() == Kind::Null
    }

    /// The number of elements, when this is an array.
    fn len(self) -> Option<usize> {
        Some(self.elements()?.count())
    }

    /// The `i`-th element, when this is an array that long.
    fn index(self, i: usize) -> Option<Self> {
        self.elements()?.nth(i)
    }
}

/// [`describe`] for an optional view: `nothing` for a missing key.
pub(crate) fn describe_view<'a, V: View<'a>>(value: Option<V>) -> String {
    value.map_or_else(|| describe(None), View::describe)
}

impl<'a> View<'a> for &'a Value {
    const UNIQUE_KEYS: bool = true;

    fn kind(self) -> Kind {
        match self {
            Value::Null => Kind::Null,
            Value::Bool(_) => Kind::Bool,
            Value::Number(_) => Kind::Number,
            Value::String(_) => Kind::String,
            Value::Array(_) => Kind::Array,
            Value::Object(_) => Kind::Object,
        }
    }

    fn as_u64(self) -> Option<u64> {
        Value::as_u64(self)
    }

    fn as_str(self) -> Option<Cow<'a, str>> {
        Value::as_str(self).map(Cow::Borrowed)
    }

    fn as_bytes(self) -> Option<Cow<'a, [u8]>> {
        Value::as_str(self).map(|s| Cow::Borrowed(s.as_bytes()))
    }

    fn get(self, key: &str) -> Option<Self> {
        self.as_object()?.get(key)
    }

    fn elements(self) -> Option<impl Iterator<Item = Self> + 'a> {
        Some(self.as_array()?.iter())
    }

    fn entries(self) -> Option<impl Iterator<Item = (Cow<'a, str>, Self)> + 'a> {
        Some(
            self.as_object()?
                .iter()
                .map(|(key, value)| (Cow::Borrowed(key.as_str()), value)),
        )
    }

    fn describe(self) -> String {
        describe(Some(self))
    }

    fn index(self, i: usize) -> Option<Self> {
        self.as_array()?.get(i)
    }

    fn len(self) -> Option<usize> {
        Some(self.as_array()?.len())
    }
}
