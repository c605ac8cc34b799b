//! A validating JSON scanner that indexes only what the merge reads.
//!
//! [`Doc::scan`] reads a whole response, accepting exactly what
//! `serde_json::from_slice::<Value>` accepts: UTF-8, the JSON grammar with
//! nothing but whitespace (space, tab, line feed, carriage return) after the
//! value, string escapes with paired surrogates, no control characters in
//! strings, numbers that fit an `f64`, and nesting at most 127 arrays or
//! objects deep. It builds no value: it records a [`Node`] (type, text span,
//! key) for the values on the paths a merge reads, the places of the table
//! of places (`crate::format`; `policy.rs` asks it): the values of a
//! choice's places that hold rows in full, and the keys above them, the
//! members of the objects that hold places (of the response, of a choice),
//! in the response or in each element of a response that is an array, and
//! only validates everything else. A node's subtree is laid out after it,
//! so a node's children are found by skipping subtrees.

mod fast;
mod policy;
mod recorder;
mod swar;
#[cfg(test)]
mod tests;
mod unescape;

use std::borrow::Cow;
use std::ops::Range;

use crate::response::view::Kind;

use policy::Record;
use recorder::Scanner;
pub(crate) use unescape::unescape;

/// How many bytes of a string are read one at a time before the chunked
/// scans (alphabet count, memchr2) take over: most strings (keys, names,
/// paths) are shorter, and the chunked scans cost a call and a setup.
pub(super) const SHORT: usize = 24;

/// Nesting `serde_json` refuses: its recursion limit of 128 is reached at the
/// 128th nested array or object.
pub(super) const MAX_DEPTH: usize = 127;

/// The longest integer part (its sign included) of a number that cannot
/// overflow an `f64` with an exponent of at most two digits: such a number
/// is below `10^(200 + 99)`, and `f64::MAX` is about `1.8e308`. A number
/// with a longer integer part or exponent is handed to `serde_json` to
/// decide. (A fraction adds less than 1 to the integer part.)
pub(super) const LONG_INTEGER: usize = 200;

/// A validated JSON text and the nodes of the paths a merge reads.
#[derive(Debug)]
pub(crate) struct Doc<'a> {
    text: &'a [u8],
    nodes: Vec<Node>,
}

/// One recorded value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) kind: Kind,
    /// The value's text (a string's with its quotes).
    pub(crate) span: Range<usize>,
    /// The key's text between its quotes, for an object member.
    pub(crate) key: Range<usize>,
    /// The index one past this node's recorded subtree.
    pub(crate) end: usize,
    /// Whether the key has escapes.
    pub(crate) key_escaped: bool,
    /// Whether the value is a string with escapes.
    pub(crate) escaped: bool,
    /// Whether the value's children were recorded.
    pub(crate) indexed: bool,
    /// For a string: how many leading bytes of its text (quotes excluded)
    /// are base64 alphabet characters, counted on the way (so that inline
    /// rows are not read twice to be validated).
    pub(crate) alphabet: usize,
}

/// Why a text is not JSON: where reading stopped, and what was wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Invalid {
    pub(crate) offset: usize,
    pub(crate) message: &'static str,
}

impl<'a> Doc<'a> {
    /// Validates `text` and records its merge paths.
    pub(crate) fn scan(text: &'a [u8]) -> Result<Doc<'a>, Invalid> {
        Self::scan_with(text, true)
    }

    /// [`Doc::scan`] without the fast path: the recording scanner reads every
    /// value one byte at a time, the reference the fast path is tested
    /// against.
    #[cfg(test)]
    pub(crate) fn scan_reference(text: &'a [u8]) -> Result<Doc<'a>, Invalid> {
        Self::scan_with(text, false)
    }

    fn scan_with(text: &'a [u8], fast: bool) -> Result<Doc<'a>, Invalid> {
        let mut scanner = Scanner {
            text,
            at: 0,
            nodes: Vec::new(),
            scratch: Vec::new(),
            fast,
        };
        scanner.whitespace();
        scanner.value(Record::Root, 0..0, false, 0)?;
        scanner.whitespace();
        if scanner.at < text.len() {
            return Err(scanner.invalid("trailing characters"));
        }
        Ok(Doc {
            text,
            nodes: scanner.nodes,
        })
    }

    /// The node `i`.
    pub(crate) fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.get(i)
    }

    /// The whole text.
    pub(crate) fn text(&self) -> &'a [u8] {
        self.text
    }

    /// The bytes of `range` of the text.
    pub(crate) fn slice(&self, range: Range<usize>) -> &'a [u8] {
        self.text.get(range).unwrap_or_default()
    }

    /// The content of a string whose text (quotes excluded) is `range`, as
    /// bytes, unescaped when `escaped`.
    pub(crate) fn string_bytes(&self, range: Range<usize>, escaped: bool) -> Cow<'a, [u8]> {
        let raw = self.slice(range);
        if escaped {
            let mut out = Vec::with_capacity(raw.len());
            unescape(raw, &mut out);
            Cow::Owned(out)
        } else {
            Cow::Borrowed(raw)
        }
    }

    /// The content of a string whose text (quotes excluded) is `range`,
    /// unescaped when `escaped`.
    pub(crate) fn string(&self, range: Range<usize>, escaped: bool) -> Cow<'a, str> {
        // Validated UTF-8 (the scanner checked every non-ASCII byte and every
        // escape): the conversions cannot fail.
        match self.string_bytes(range, escaped) {
            Cow::Borrowed(raw) => Cow::Borrowed(std::str::from_utf8(raw).unwrap_or_default()),
            Cow::Owned(out) => Cow::Owned(String::from_utf8(out).unwrap_or_default()),
        }
    }
}
