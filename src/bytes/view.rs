//! [`ScannedValue`]: a [`View`] of a value recorded by the [scanner](super::scan),
//! with `serde_json::Value`'s semantics read off the raw text.

use std::borrow::Cow;

use serde_json::Value;

use super::scan::Doc;
use crate::error::describe;
use crate::response::view::{Kind, View};

/// A recorded value of a scanned text.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ScannedValue<'d> {
    doc: &'d Doc<'d>,
    index: usize,
}

impl<'d> ScannedValue<'d> {
    /// The root of `doc`.
    pub(crate) fn root(doc: &'d Doc<'d>) -> ScannedValue<'d> {
        ScannedValue { doc, index: 0 }
    }

    fn node(self) -> Option<&'d super::scan::Node> {
        self.doc.node(self.index)
    }

    /// The value's text.
    pub(crate) fn text(self) -> &'d [u8] {
        self.node()
            .map_or(&[][..], |node| self.doc.slice(node.span.clone()))
    }

    /// The byte range of the value's text in the document.
    pub(crate) fn span(self) -> std::ops::Range<usize> {
        self.node().map_or(0..0, |node| node.span.clone())
    }

    /// The recorded children, in text order, when they were recorded.
    fn children(self) -> Option<impl Iterator<Item = ScannedValue<'d>> + 'd> {
        let node = self.node().filter(|node| node.indexed)?;
        let (doc, end) = (self.doc, node.end);
        let mut next = self.index + 1;
        Some(std::iter::from_fn(move || {
            if next >= end {
                return None;
            }
            let child = ScannedValue { doc, index: next };
            next = doc.node(next).map_or(end, |n| n.end);
            Some(child)
        }))
    }

    /// Whether the key of an object member is `key` (compared as bytes,
    /// unescaped only when it has escapes).
    fn key_is(self, key: &str) -> bool {
        match self.node() {
            Some(node) if !node.key_escaped => self.doc.slice(node.key.clone()) == key.as_bytes(),
            Some(_) => self.key() == key,
            None => key.is_empty(),
        }
    }

    /// The key of an object member, unescaped.
    fn key(self) -> Cow<'d, str> {
        match self.node() {
            Some(node) => self.doc.string(node.key.clone(), node.key_escaped),
            None => Cow::Borrowed(""),
        }
    }
}

impl<'d> View<'d> for ScannedValue<'d> {
    fn kind(self) -> Kind {
        self.node().map_or(Kind::Null, |node| node.kind)
    }

    fn as_u64(self) -> Option<u64> {
        // As serde_json: an integer without sign, fraction or exponent that
        // fits; anything else is not a u64.
        if self.kind() != Kind::Number {
            return None;
        }
        // Digits only, accumulated with overflow checked: what `u64`'s
        // `FromStr` gives on this text, without a UTF-8 check or a sign.
        let text = self.text();
        if text.is_empty() {
            return None;
        }
        text.iter().try_fold(0u64, |n, &b| {
            let digit = b.wrapping_sub(b'0');
            if digit > 9 {
                return None;
            }
            n.checked_mul(10)?.checked_add(u64::from(digit))
        })
    }

    fn as_str(self) -> Option<Cow<'d, str>> {
        let node = self.node().filter(|node| node.kind == Kind::String)?;
        let span = node.span.start + 1..node.span.end.saturating_sub(1);
        Some(self.doc.string(span, node.escaped))
    }

    fn as_bytes(self) -> Option<Cow<'d, [u8]>> {
        let node = self.node().filter(|node| node.kind == Kind::String)?;
        let span = node.span.start + 1..node.span.end.saturating_sub(1);
        Some(self.doc.string_bytes(span, node.escaped))
    }

    fn alphabet_prefix(self) -> Option<usize> {
        // Counted over the raw text, which is the string's own only without
        // escapes.
        self.node()
            .filter(|node| node.kind == Kind::String && !node.escaped)
            .map(|node| node.alphabet)
    }

    fn get(self, key: &str) -> Option<Self> {
        if self.kind() != Kind::Object {
            return None;
        }
        self.children()?.filter(|member| member.key_is(key)).last()
    }

    fn elements(self) -> Option<impl Iterator<Item = Self> + 'd> {
        if self.kind() != Kind::Array {
            return None;
        }
        self.children()
    }

    fn len(self) -> Option<usize> {
        if self.kind() != Kind::Array {
            return None;
        }
        match self.children() {
            Some(children) => Some(children.count()),
            // Recorded without its children: count them on the text, which
            // the scanner validated.
            None => Some(count_elements(self.text())),
        }
    }

    fn members(self) -> Option<impl Iterator<Item = (Cow<'d, [u8]>, Self)> + 'd> {
        if self.kind() != Kind::Object {
            return None;
        }
        let doc = self.doc;
        Some(self.children()?.map(move |member| {
            let key = member.node().map_or(Cow::Borrowed(&[][..]), |node| {
                doc.string_bytes(node.key.clone(), node.key_escaped)
            });
            (key, member)
        }))
    }

    fn entries(self) -> Option<impl Iterator<Item = (Cow<'d, str>, Self)> + 'd> {
        if self.kind() != Kind::Object {
            return None;
        }
        Some(self.children()?.map(|member| (member.key(), member)))
    }

    fn describe(self) -> String {
        // Only errors describe a value: read it as serde_json would, so that
        // the message is the one the Value entry points give.
        match serde_json::from_slice::<Value>(self.text()) {
            Ok(value) => describe(Some(&value)),
            Err(_) => describe(None),
        }
    }
}

/// The number of elements of the valid JSON array `text`: its commas outside
/// strings and nested values, plus one unless it is empty.
fn count_elements(text: &[u8]) -> usize {
    let (mut depth, mut in_string, mut escaped) = (0usize, false, false);
    let (mut commas, mut empty) = (0, true);
    for &b in text {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'[' | b'{' => {
                if depth == 1 {
                    empty = false;
                }
                depth += 1;
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 1 => commas += 1,
            b' ' | b'\t' | b'\n' | b'\r' => {}
            _ => {
                if depth == 1 {
                    empty = false;
                }
                in_string = b == b'"';
            }
        }
    }
    if empty {
        0
    } else {
        commas + 1
    }
}

#[cfg(test)]
mod tests {
    use super::count_elements;

    /// The count is serde_json's, whatever the elements hold.
    #[test]
    fn elements_are_counted_as_serde_json_counts_them() {
        for text in [
            "[]",
            " [ ] ",
            "[1]",
            "[1, 2,3]",
            r#"["a,b", "c\\\"],d", 4]"#,
            r#"[[1, 2], {"a": [3, 4], "b": "]"}, null]"#,
            "[\n\t[]\r\n]",
            r#"["", "\\\\"]"#,
        ] {
            let value: serde_json::Value = serde_json::from_str(text).unwrap();
            let expected = value.as_array().unwrap().len();
            assert_eq!(count_elements(text.trim().as_bytes()), expected, "{text}");
        }
    }
}
