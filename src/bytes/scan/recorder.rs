//! The recording scanner, what [`Doc::scan`](super::Doc::scan) runs: every
//! value it records read a byte at a time and recorded as the policy says;
//! the values it does not record, or records without their children,
//! handed to the fast path ([`super::fast`]), which only validates them.
//! With the fast path turned off it reads every value itself, a byte at a
//! time: the reading the tests hold the fast path to.

use std::ops::Range;

use crate::codec::base64::{alphabet_run, in_alphabet};
use crate::response::view::Kind;

use super::fast::{skip, special_end, Refused};
use super::policy::Record;
use super::swar::{first_non_digit, plain_run, utf8_width};
use super::unescape::unescape;
use super::{Invalid, Node, LONG_INTEGER, MAX_DEPTH, SHORT};

pub(super) struct Scanner<'a> {
    pub(super) text: &'a [u8],
    pub(super) at: usize,
    pub(super) nodes: Vec<Node>,
    /// Unescaped keys of the levels whose keys choose what to record.
    pub(super) scratch: Vec<u8>,
    /// Whether values recorded without their children are validated by the
    /// fast path ([`skip`]); without it, every value is read here, a byte at
    /// a time.
    pub(super) fast: bool,
}

impl Scanner<'_> {
    pub(super) fn invalid(&self, message: &'static str) -> Invalid {
        Invalid {
            offset: self.at.min(self.text.len()),
            message,
        }
    }

    pub(super) fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    pub(super) fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Reads one value at `self.at` (no leading whitespace), recording it as
    /// `record` says; `key` is its key's span when it is an object member.
    pub(super) fn value(
        &mut self,
        record: Record,
        key: Range<usize>,
        key_escaped: bool,
        depth: usize,
    ) -> Result<(), Invalid> {
        let start = self.at;
        let index = self.nodes.len();
        let recorded = record != Record::Skip;
        // The fast path validates what no merge reads (all but the few
        // kilobytes of the stitched values): a value not recorded, or an
        // array or object recorded without its children. When it refuses
        // the text, the byte-at-a-time reading below reads the value again,
        // so that the offset and the message are that reading's.
        let whole = record == Record::Skip
            || (record == Record::Opaque && matches!(self.peek(), Some(b'[' | b'{')));
        if self.fast && whole {
            match skip(self.text, start, depth) {
                Ok((kind, end)) => {
                    self.at = end;
                    if recorded {
                        self.nodes.push(Node {
                            kind,
                            span: start..end,
                            key,
                            end: index + 1,
                            key_escaped,
                            escaped: false,
                            indexed: false,
                            alphabet: 0,
                        });
                    }
                    return Ok(());
                }
                Err(Refused) => {
                    self.fast = false;
                    let read = self.value(record, key, key_escaped, depth);
                    self.fast = true;
                    return read;
                }
            }
        }
        if recorded {
            self.nodes.push(Node {
                kind: Kind::Null,
                span: start..start,
                key,
                end: index + 1,
                key_escaped,
                escaped: false,
                indexed: false,
                alphabet: 0,
            });
        }
        let mut escaped = false;
        let mut alphabet = 0;
        let kind = match self.peek() {
            Some(b'{') => {
                self.object(record, depth + 1)?;
                Kind::Object
            }
            Some(b'[') => {
                self.array(record, depth + 1)?;
                Kind::Array
            }
            Some(b'"') => {
                (escaped, alphabet) = self.string_counted()?;
                Kind::String
            }
            Some(b't') => self.literal(b"true", Kind::Bool)?,
            Some(b'f') => self.literal(b"false", Kind::Bool)?,
            Some(b'n') => self.literal(b"null", Kind::Null)?,
            Some(b'-' | b'0'..=b'9') => {
                self.number()?;
                Kind::Number
            }
            Some(_) => return Err(self.invalid("expected value")),
            None => return Err(self.invalid("EOF while parsing a value")),
        };
        if recorded {
            let end = self.nodes.len();
            if let Some(node) = self.nodes.get_mut(index) {
                node.kind = kind;
                node.span = start..self.at;
                node.end = end;
                node.escaped = escaped;
                node.alphabet = alphabet;
                node.indexed = Self::children(record) && matches!(kind, Kind::Array | Kind::Object);
            }
        }
        Ok(())
    }

    pub(super) fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, Invalid> {
        for &expected in word {
            match self.peek() {
                Some(b) if b == expected => self.at += 1,
                Some(_) => return Err(self.invalid("expected ident")),
                None => return Err(self.invalid("EOF while parsing a value")),
            }
        }
        Ok(kind)
    }

    /// Whether a value recorded as `record` records its children.
    pub(super) fn children(record: Record) -> bool {
        matches!(
            record,
            Record::Root
                | Record::Item
                | Record::Choices
                | Record::Choice
                | Record::Members
                | Record::Deep
        )
    }

    pub(super) fn array(&mut self, record: Record, depth: usize) -> Result<(), Invalid> {
        if depth > MAX_DEPTH {
            return Err(self.invalid("recursion limit exceeded"));
        }
        self.at += 1; // '['
        let element = if Self::children(record) {
            record.element()
        } else {
            Record::Skip
        };
        self.whitespace();
        if self.peek() == Some(b']') {
            self.at += 1;
            return Ok(());
        }
        loop {
            self.value(element, 0..0, false, depth)?;
            self.whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.whitespace();
                }
                Some(b']') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(_) => return Err(self.invalid("expected `,` or `]`")),
                None => return Err(self.invalid("EOF while parsing a list")),
            }
        }
    }

    pub(super) fn object(&mut self, record: Record, depth: usize) -> Result<(), Invalid> {
        if depth > MAX_DEPTH {
            return Err(self.invalid("recursion limit exceeded"));
        }
        self.at += 1; // '{'
        let members = Self::children(record);
        self.whitespace();
        if self.peek() == Some(b'}') {
            self.at += 1;
            return Ok(());
        }
        loop {
            match self.peek() {
                Some(b'"') => {}
                Some(_) => return Err(self.invalid("key must be a string")),
                None => return Err(self.invalid("EOF while parsing an object")),
            }
            let key_start = self.at + 1;
            let key_escaped = self.string()?;
            let key = key_start..self.at - 1;
            let child = if members {
                self.member_record(record, key.clone(), key_escaped)
            } else {
                Record::Skip
            };
            self.whitespace();
            match self.peek() {
                Some(b':') => self.at += 1,
                Some(_) => return Err(self.invalid("expected `:`")),
                None => return Err(self.invalid("EOF while parsing an object")),
            }
            self.whitespace();
            self.value(child, key, key_escaped, depth)?;
            self.whitespace();
            match self.peek() {
                Some(b',') => {
                    self.at += 1;
                    self.whitespace();
                }
                Some(b'}') => {
                    self.at += 1;
                    return Ok(());
                }
                Some(_) => return Err(self.invalid("expected `,` or `}`")),
                None => return Err(self.invalid("EOF while parsing an object")),
            }
        }
    }

    /// What to record of the member with the key text `key`.
    pub(super) fn member_record(
        &mut self,
        record: Record,
        key: Range<usize>,
        escaped: bool,
    ) -> Record {
        let raw = self.text.get(key).unwrap_or_default();
        if !escaped {
            return record.member(raw);
        }
        if record == Record::Deep {
            return Record::Deep; // no key decides anything below
        }
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        unescape(raw, &mut scratch);
        let child = record.member(&scratch);
        self.scratch = scratch;
        child
    }

    /// Reads a string at `self.at` (its opening quote); returns whether it
    /// has escapes.
    pub(super) fn string(&mut self) -> Result<bool, Invalid> {
        self.string_counted().map(|(escaped, _)| escaped)
    }

    /// Reads a string at `self.at` (its quote): whether it has escapes, and
    /// how many leading bytes of its text are base64 alphabet characters.
    pub(super) fn string_counted(&mut self) -> Result<(bool, usize), Invalid> {
        self.at += 1; // '"'
        let rest = self.text.get(self.at..).unwrap_or_default();
        // The alphabet first: a run of it is plain string text too, and
        // base64 rows are all alphabet but for their padding. Neither a
        // quote nor a backslash is in it. Most strings are short: counted
        // a byte at a time before the chunked count.
        let head = rest.get(..SHORT).unwrap_or(rest);
        let alphabet = match head.iter().position(|&b| !in_alphabet(b)) {
            Some(end) => end,
            None => alphabet_run(rest),
        };
        if self.fast {
            // A string without escapes, checked at once; anything else is
            // read by the loop below.
            let tail = rest.get(alphabet..).unwrap_or_default();
            if let Ok(end) = special_end(tail) {
                if tail.get(end) == Some(&b'"') {
                    self.at += alphabet + end + 1;
                    return Ok((false, alphabet));
                }
            }
        }
        let mut escaped = false;
        self.at += alphabet;
        loop {
            self.at += plain_run(self.text.get(self.at..).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.at += 1;
                    return Ok((escaped, alphabet));
                }
                Some(b'\\') => {
                    escaped = true;
                    self.escape()?;
                }
                Some(b) if b < 0x20 => {
                    return Err(self.invalid(
                        "control character (\\u0000-\\u001F) found while parsing a string",
                    ))
                }
                Some(b) => {
                    // Not ASCII: one UTF-8 character, checked as std checks it.
                    let width = utf8_width(b);
                    let end = self.at.saturating_add(width).min(self.text.len());
                    let char_ok = width > 0
                        && end - self.at == width
                        && std::str::from_utf8(self.text.get(self.at..end).unwrap_or_default())
                            .is_ok();
                    if !char_ok {
                        return Err(self.invalid("invalid unicode code point"));
                    }
                    self.at = end;
                }
                None => return Err(self.invalid("EOF while parsing a string")),
            }
        }
    }

    /// Reads an escape at `self.at` (its backslash).
    pub(super) fn escape(&mut self) -> Result<(), Invalid> {
        self.at += 1;
        match self.peek() {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.at += 1;
                Ok(())
            }
            Some(b'u') => {
                self.at += 1;
                let first = self.hex4()?;
                if (0xDC00..=0xDFFF).contains(&first) {
                    return Err(self.invalid("lone leading surrogate in hex escape"));
                }
                if !(0xD800..=0xDBFF).contains(&first) {
                    return Ok(());
                }
                // A leading surrogate needs a trailing one, escaped.
                if self.peek() != Some(b'\\') {
                    return Err(self.unexpected_end());
                }
                self.at += 1;
                if self.peek() != Some(b'u') {
                    return Err(self.unexpected_end());
                }
                self.at += 1;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return Err(self.invalid("lone leading surrogate in hex escape"));
                }
                Ok(())
            }
            Some(_) => Err(self.invalid("invalid escape")),
            None => Err(self.invalid("EOF while parsing a string")),
        }
    }

    pub(super) fn unexpected_end(&self) -> Invalid {
        if self.at >= self.text.len() {
            self.invalid("EOF while parsing a string")
        } else {
            self.invalid("unexpected end of hex escape")
        }
    }

    pub(super) fn hex4(&mut self) -> Result<u16, Invalid> {
        let mut n = 0u16;
        for _ in 0..4 {
            let digit = match self.peek() {
                Some(b) => (b as char).to_digit(16),
                None => return Err(self.invalid("EOF while parsing a string")),
            };
            let Some(digit) = digit else {
                return Err(self.invalid("invalid escape"));
            };
            n = n << 4 | digit as u16;
            self.at += 1;
        }
        Ok(n)
    }

    /// Reads a number at `self.at`.
    pub(super) fn number(&mut self) -> Result<(), Invalid> {
        let start = self.at;
        if self.peek() == Some(b'-') {
            self.at += 1;
        }
        match self.peek() {
            Some(b'0') => {
                self.at += 1;
                if let Some(b'0'..=b'9') = self.peek() {
                    return Err(self.invalid("invalid number"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            Some(_) => return Err(self.invalid("invalid number")),
            None => return Err(self.invalid("EOF while parsing a value")),
        }
        let int_end = self.at;
        if self.peek() == Some(b'.') {
            self.at += 1;
            match self.peek() {
                Some(b'0'..=b'9') => self.digits(),
                Some(_) => return Err(self.invalid("invalid number")),
                None => return Err(self.invalid("EOF while parsing a value")),
            }
        }
        let mut exponent_digits = 0;
        if let Some(b'e' | b'E') = self.peek() {
            self.at += 1;
            if let Some(b'+' | b'-') = self.peek() {
                self.at += 1;
            }
            let digits = self.at;
            match self.peek() {
                Some(b'0'..=b'9') => self.digits(),
                Some(_) => return Err(self.invalid("invalid number")),
                None => return Err(self.invalid("EOF while parsing a value")),
            }
            exponent_digits = self.at - digits;
        }
        // serde_json refuses a number whose value overflows an f64: only one
        // with a long integer part or a long exponent can, and serde_json
        // reads it to decide.
        if int_end - start > LONG_INTEGER || exponent_digits > 2 {
            let text = self.text.get(start..self.at).unwrap_or_default();
            if serde_json::from_slice::<serde_json::Value>(text).is_err() {
                self.at = start;
                return Err(self.invalid("number out of range"));
            }
        }
        Ok(())
    }

    /// Skips a run of digits, eight at a time (numbers are most of the
    /// bytes of `token_ids` and `logprobs`).
    pub(super) fn digits(&mut self) {
        while let Some(chunk) = self.text.get(self.at..).and_then(<[u8]>::first_chunk::<8>) {
            let stop = first_non_digit(u64::from_le_bytes(*chunk));
            self.at += stop;
            if stop < 8 {
                return;
            }
        }
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
    }
}
