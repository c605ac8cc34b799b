//! A validating JSON scanner that indexes only what the merge reads.
//!
//! [`Doc::scan`] reads a whole response, accepting exactly what
//! `serde_json::from_slice::<Value>` accepts: UTF-8, the JSON grammar with
//! nothing but whitespace (space, tab, line feed, carriage return) after the
//! value, string escapes with paired surrogates, no control characters in
//! strings, numbers that fit an `f64`, and nesting at most 127 arrays or
//! objects deep. It builds no value: it records a [`Node`] (type, text span,
//! key) for the values on the paths a merge reads, `choices[i].payload` and
//! `choices[i].routed_experts` in full and the keys above them, the members
//! of `meta_info`, `sglext`, `usage` and `choices[i].sgl_ext` (SGLang's rows
//! and counts), in the response or in each element of a response that is an
//! array, and only validates everything else. A node's subtree is laid out after it, so a
//! node's children are found by skipping subtrees.

use std::borrow::Cow;
use std::ops::Range;

use crate::codec::base64::{alphabet_run, in_alphabet};
use crate::places;

use crate::view::Kind;

/// How many bytes of a string are read one at a time before the chunked
/// scans (alphabet count, memchr2) take over: most strings (keys, names,
/// paths) are shorter, and the chunked scans cost a call and a setup.
const SHORT: usize = 24;

/// Nesting `serde_json` refuses: its recursion limit of 128 is reached at the
/// 128th nested array or object.
const MAX_DEPTH: usize = 127;

/// The longest integer part (its sign included) of a number that cannot
/// overflow an `f64` with an exponent of at most two digits: such a number
/// is below `10^(200 + 99)`, and `f64::MAX` is about `1.8e308`. A number
/// with a longer integer part or exponent is handed to `serde_json` to
/// decide. (A fraction adds less than 1 to the integer part.)
const LONG_INTEGER: usize = 200;

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

/// What to record of a value and its children.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Record {
    /// The response: its members, and `choices` one level further.
    Root,
    /// `choices`: its elements, as choices.
    Choices,
    /// One choice: its members, those that hold rows (`payload`,
    /// `routed_experts`, by [`places`]) in full, those that are objects
    /// holding places (`sgl_ext`) one level further.
    Choice,
    /// An element of a response that is an array (an SGLang batch): as the
    /// response's members.
    Item,
    /// An object that holds places ([`places`]: `meta_info`, `sglext`,
    /// `usage`, `sgl_ext`): its members, not their children.
    Members,
    /// Everything below.
    Deep,
    /// The value itself, not its children.
    Opaque,
    /// Nothing: validate only.
    Skip,
}

impl Record {
    /// What to record of the member `key` of an object recorded as `self`.
    fn member(self, key: &[u8]) -> Record {
        match self {
            Record::Root | Record::Item if key == b"choices" => Record::Choices,
            // What holds rows or their counts, as the table of places says.
            Record::Root | Record::Item if places::is_member_holder(key) => Record::Members,
            Record::Choice if places::is_choice_rows(key) => Record::Deep,
            Record::Choice if places::is_choice_member_holder(key) => Record::Members,
            Record::Root | Record::Item | Record::Choice | Record::Members => Record::Opaque,
            Record::Deep => Record::Deep,
            Record::Choices | Record::Opaque | Record::Skip => Record::Skip,
        }
    }

    /// What to record of an element of an array recorded as `self`.
    fn element(self) -> Record {
        match self {
            Record::Root => Record::Item,
            Record::Choices => Record::Choice,
            Record::Deep => Record::Deep,
            _ => Record::Skip,
        }
    }
}

impl<'a> Doc<'a> {
    /// Validates `text` and records its merge paths.
    pub(crate) fn scan(text: &'a [u8]) -> Result<Doc<'a>, Invalid> {
        Self::scan_with(text, true)
    }

    /// [`Doc::scan`] by the reference reader alone, one byte at a time
    /// through every value (the fast path never taken): what the fast path
    /// is tested against.
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

struct Scanner<'a> {
    text: &'a [u8],
    at: usize,
    nodes: Vec<Node>,
    /// Unescaped keys of the levels whose keys choose what to record.
    scratch: Vec<u8>,
    /// Whether values recorded without their children are validated by the
    /// fast path ([`skip`]); the reference reads every value itself.
    fast: bool,
}

impl Scanner<'_> {
    fn invalid(&self, message: &'static str) -> Invalid {
        Invalid {
            offset: self.at.min(self.text.len()),
            message,
        }
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.at).copied()
    }

    fn whitespace(&mut self) {
        while let Some(b' ' | b'\n' | b'\t' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    /// Reads one value at `self.at` (no leading whitespace), recording it as
    /// `record` says; `key` is its key's span when it is an object member.
    fn value(
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
        // the text, the reference below reads the value again, so that the
        // offset and the message are the reference's.
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

    fn literal(&mut self, word: &[u8], kind: Kind) -> Result<Kind, Invalid> {
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
    fn children(record: Record) -> bool {
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

    fn array(&mut self, record: Record, depth: usize) -> Result<(), Invalid> {
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

    fn object(&mut self, record: Record, depth: usize) -> Result<(), Invalid> {
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
    fn member_record(&mut self, record: Record, key: Range<usize>, escaped: bool) -> Record {
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
    fn string(&mut self) -> Result<bool, Invalid> {
        self.string_counted().map(|(escaped, _)| escaped)
    }

    /// Reads a string at `self.at` (its quote): whether it has escapes, and
    /// how many leading bytes of its text are base64 alphabet characters.
    fn string_counted(&mut self) -> Result<(bool, usize), Invalid> {
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
    fn escape(&mut self) -> Result<(), Invalid> {
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

    fn unexpected_end(&self) -> Invalid {
        if self.at >= self.text.len() {
            self.invalid("EOF while parsing a string")
        } else {
            self.invalid("unexpected end of hex escape")
        }
    }

    fn hex4(&mut self) -> Result<u16, Invalid> {
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
    fn number(&mut self) -> Result<(), Invalid> {
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
    fn digits(&mut self) {
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

/// The fast path refused the text: the reference says where and why.
#[derive(Debug)]
struct Refused;

/// Validates the value at `at` (no leading whitespace) and everything in
/// it, building nothing and without recursion: its kind and the index one
/// past it. `depth` is the nesting of the container the value is in, as
/// [`Scanner::value`] counts it. Accepts exactly what the reference
/// accepts (`Scanner::value` with nothing recorded); where that refuses,
/// this refuses too, without saying why.
fn skip(text: &[u8], at: usize, depth: usize) -> Result<(Kind, usize), Refused> {
    let kind = match text.get(at) {
        Some(b'[') => Kind::Array,
        Some(b'{') => Kind::Object,
        Some(b'"') => Kind::String,
        Some(b't' | b'f') => Kind::Bool,
        Some(b'n') => Kind::Null,
        _ => Kind::Number,
    };
    let mut at = at;
    // One bit per open container, the innermost lowest: 1 for an array. At
    // most MAX_DEPTH (127) are open, so 128 bits hold them all.
    let mut open: u128 = 0;
    let mut level = 0usize;
    loop {
        // A value starts at `at`.
        match text.get(at) {
            Some(b'[') => {
                level += 1;
                if depth + level > MAX_DEPTH {
                    return Err(Refused);
                }
                open = open << 1 | 1;
                at = whitespace(text, at + 1);
                if text.get(at) != Some(&b']') {
                    continue;
                }
                at += 1;
                level -= 1;
                open >>= 1;
            }
            Some(b'{') => {
                level += 1;
                if depth + level > MAX_DEPTH {
                    return Err(Refused);
                }
                open <<= 1;
                at = whitespace(text, at + 1);
                if text.get(at) != Some(&b'}') {
                    at = member_key(text, at)?;
                    continue;
                }
                at += 1;
                level -= 1;
                open >>= 1;
            }
            Some(b'"') => at = skip_string(text, at)?,
            Some(b'-' | b'0'..=b'9') => {
                at = skip_number(text, at)?;
                // An array of numbers (token ids, logprobs) in one loop.
                if open & 1 == 1 {
                    while let (Some(b','), Some(b'-' | b'0'..=b'9')) =
                        (text.get(at), text.get(at + 1))
                    {
                        at = skip_number(text, at + 1)?;
                    }
                }
            }
            Some(b't') => at = word(text, at, b"true")?,
            Some(b'f') => at = word(text, at, b"false")?,
            Some(b'n') => at = word(text, at, b"null")?,
            _ => return Err(Refused),
        }
        // After a value: close what ends here, then the next value.
        loop {
            if level == 0 {
                return Ok((kind, at));
            }
            at = whitespace(text, at);
            let array = open & 1 == 1;
            match text.get(at) {
                Some(b',') => {
                    at = whitespace(text, at + 1);
                    if !array {
                        at = member_key(text, at)?;
                    }
                    break;
                }
                Some(b']') if array => {}
                Some(b'}') if !array => {}
                _ => return Err(Refused),
            }
            at += 1;
            level -= 1;
            open >>= 1;
        }
    }
}

/// The index of the first byte from `at` on that is not JSON whitespace.
#[inline(always)]
fn whitespace(text: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = text.get(at) {
        at += 1;
    }
    at
}

/// Skips an object member's key at `at`, the whitespace, the colon and the
/// whitespace after it: the index of the member's value.
#[inline(always)]
fn member_key(text: &[u8], at: usize) -> Result<usize, Refused> {
    if text.get(at) != Some(&b'"') {
        return Err(Refused);
    }
    let at = whitespace(text, skip_string(text, at)?);
    if text.get(at) != Some(&b':') {
        return Err(Refused);
    }
    Ok(whitespace(text, at + 1))
}

/// Skips the literal `word` at `at`.
#[inline(always)]
fn word(text: &[u8], at: usize, word: &[u8]) -> Result<usize, Refused> {
    match text.get(at..at + word.len()) {
        Some(found) if found == word => Ok(at + word.len()),
        _ => Err(Refused),
    }
}

/// Skips the string at `at` (its opening quote): the index past its closing
/// quote. `memchr2` finds the next quote or backslash; the run before it is
/// checked at once, for control characters and, when it has a byte from
/// 0x80, as UTF-8 by `std::str::from_utf8`. A run ends at a quote or a
/// backslash, both ASCII, so a character cut by one is invalid in the text
/// as in the run.
fn skip_string(text: &[u8], at: usize) -> Result<usize, Refused> {
    let mut at = at + 1;
    loop {
        at += special_end(text.get(at..).unwrap_or_default())?;
        if text.get(at) == Some(&b'"') {
            return Ok(at + 1);
        }
        at = skip_escape(text, at)?;
    }
}

/// The index in `rest` (string text) of its first quote or backslash, when
/// the bytes before it are valid string text. A byte loop over the first
/// bytes, which ends most strings; then `memchr2`, and the run before what
/// it finds checked at once by [`plain_text`].
#[inline(always)]
fn special_end(rest: &[u8]) -> Result<usize, Refused> {
    let head = rest.get(..SHORT).unwrap_or(rest);
    if let Some(end) = head.iter().position(|&b| is_special(b)) {
        match head.get(end) {
            Some(b'"' | b'\\') => return Ok(end),
            Some(&b) if b < 0x20 => return Err(Refused),
            _ => {} // not ASCII: the check of the whole run
        }
    }
    let end = memchr::memchr2(b'"', b'\\', rest).ok_or(Refused)?;
    if plain_text(rest.get(..end).unwrap_or_default()) {
        Ok(end)
    } else {
        Err(Refused)
    }
}

/// Whether `run` (string text without quotes or backslashes) is valid in a
/// string: no byte below 0x20, and UTF-8. One pass for the least and the
/// greatest byte (which vectorizes), the UTF-8 check only when the greatest
/// is not ASCII.
#[inline(always)]
fn plain_text(run: &[u8]) -> bool {
    let (least, greatest) = run
        .iter()
        .fold((u8::MAX, 0u8), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    least >= 0x20 && (greatest < 0x80 || std::str::from_utf8(run).is_ok())
}

/// Skips the escape at `at` (its backslash), as [`Scanner::escape`] reads
/// it: the index past it.
fn skip_escape(text: &[u8], at: usize) -> Result<usize, Refused> {
    match text.get(at + 1) {
        Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => Ok(at + 2),
        Some(b'u') => {
            let first = hex4(text, at + 2)?;
            if !(0xD800..=0xDBFF).contains(&first) {
                // A trailing surrogate alone is refused.
                return if (0xDC00..=0xDFFF).contains(&first) {
                    Err(Refused)
                } else {
                    Ok(at + 6)
                };
            }
            // A leading surrogate needs a trailing one, escaped.
            if text.get(at + 6..at + 8) != Some(b"\\u") {
                return Err(Refused);
            }
            let second = hex4(text, at + 8)?;
            if (0xDC00..=0xDFFF).contains(&second) {
                Ok(at + 12)
            } else {
                Err(Refused)
            }
        }
        _ => Err(Refused),
    }
}

/// The four hex digits at `at`, as a number.
#[inline(always)]
fn hex4(text: &[u8], at: usize) -> Result<u16, Refused> {
    let digits = text.get(at..at + 4).ok_or(Refused)?;
    digits.iter().try_fold(0u16, |n, &b| {
        let digit = (b as char).to_digit(16).ok_or(Refused)?;
        Ok(n << 4 | digit as u16)
    })
}

/// Skips the number at `at` (a `-` or a digit), as [`Scanner::number`]
/// reads it: the grammar checked eight digits at a time, and only a number
/// that could overflow an `f64` handed to `serde_json` to decide.
#[inline(always)]
fn skip_number(text: &[u8], start: usize) -> Result<usize, Refused> {
    let mut at = start;
    if text.get(at) == Some(&b'-') {
        at += 1;
    }
    match text.get(at) {
        Some(b'0') => {
            at += 1;
            if let Some(b'0'..=b'9') = text.get(at) {
                return Err(Refused);
            }
        }
        Some(b'1'..=b'9') => at = digits_from(text, at + 1),
        _ => return Err(Refused),
    }
    let int_end = at;
    if text.get(at) == Some(&b'.') {
        at = match text.get(at + 1) {
            Some(b'0'..=b'9') => digits_from(text, at + 2),
            _ => return Err(Refused),
        };
    }
    // The reference's rule for the numbers serde_json decides: an integer
    // part longer than `LONG_INTEGER`, or an exponent of more than two
    // digits.
    let mut long = int_end - start > LONG_INTEGER;
    if let Some(b'e' | b'E') = text.get(at) {
        at += 1;
        if let Some(b'+' | b'-') = text.get(at) {
            at += 1;
        }
        let digits = at;
        at = match text.get(at) {
            Some(b'0'..=b'9') => digits_from(text, at + 1),
            _ => return Err(Refused),
        };
        long |= at - digits > 2;
    }
    if long {
        let number = text.get(start..at).unwrap_or_default();
        if serde_json::from_slice::<serde_json::Value>(number).is_err() {
            return Err(Refused);
        }
    }
    Ok(at)
}

/// The index of the first byte from `at` on that is not an ASCII digit,
/// eight bytes at a time.
#[inline(always)]
fn digits_from(text: &[u8], mut at: usize) -> usize {
    while let Some(chunk) = text.get(at..).and_then(<[u8]>::first_chunk::<8>) {
        let stop = first_non_digit(u64::from_le_bytes(*chunk));
        at += stop;
        if stop < 8 {
            return at;
        }
    }
    while let Some(b'0'..=b'9') = text.get(at) {
        at += 1;
    }
    at
}

/// The length of the run of string bytes at the start of `text` that need no
/// attention: printable ASCII other than `"` and `\`. Checks 32 bytes at a
/// time without branching (which vectorizes), and finds the exact place only
/// in the chunk that stops the run.
fn plain_run(text: &[u8]) -> usize {
    const CHUNK: usize = 32;
    let mut done = 0;
    for chunk in text.chunks_exact(CHUNK) {
        if chunk.iter().fold(false, |any, &b| any | is_special(b)) {
            break;
        }
        done += CHUNK;
    }
    done + text
        .get(done..)
        .unwrap_or_default()
        .iter()
        .position(|&b| is_special(b))
        .unwrap_or(text.len() - done)
}

/// The index of the first byte of `word` (eight bytes, little-endian) that is
/// not an ASCII digit; 8 when all are. A byte below `'0'` sets its top bit
/// when `'0'` is taken from it, one above `'9'` when 0x46 is added to it (and
/// so does every byte from 0x80). Borrows and carries only run towards later
/// bytes, and none leaves a digit: the first byte flagged is the first that
/// is not a digit.
fn first_non_digit(word: u64) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let flags = (word.wrapping_sub(ONES * 0x30) | word.wrapping_add(ONES * 0x46)) & (ONES * 0x80);
    (flags.trailing_zeros() / 8) as usize
}

/// Whether `b` ends a run of plain string characters: outside 0x20..0x80
/// (one subtraction), or a quote or a backslash.
#[inline(always)]
fn is_special(b: u8) -> bool {
    (b.wrapping_sub(0x20) >= 0x60) | (b == b'"') | (b == b'\\')
}

/// The length of the UTF-8 character that starts with `lead`, 0 when `lead`
/// cannot start one.
fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}

/// Appends the unescaped content of the validated string text `raw` (quotes
/// excluded) to `out`.
pub(crate) fn unescape(raw: &[u8], out: &mut Vec<u8>) {
    let mut i = 0;
    while let Some(&b) = raw.get(i) {
        if b != b'\\' {
            out.push(b);
            i += 1;
            continue;
        }
        let Some(&e) = raw.get(i + 1) else {
            return;
        };
        i += 2;
        let byte = match e {
            b'"' => b'"',
            b'\\' => b'\\',
            b'/' => b'/',
            b'b' => 0x08,
            b'f' => 0x0c,
            b'n' => b'\n',
            b'r' => b'\r',
            b't' => b'\t',
            b'u' => {
                let hex = |at: usize| {
                    raw.get(at..at + 4)
                        .and_then(|h| std::str::from_utf8(h).ok())
                        .and_then(|h| u32::from_str_radix(h, 16).ok())
                        .unwrap_or(0xFFFD)
                };
                let first = hex(i);
                i += 4;
                let code = if (0xD800..=0xDBFF).contains(&first) {
                    // Validated: `\uDCxx` follows.
                    let second = hex(i + 2);
                    i += 6;
                    0x10000 + ((first - 0xD800) << 10) + (second.wrapping_sub(0xDC00) & 0x3FF)
                } else {
                    first
                };
                let c = char::from_u32(code).unwrap_or('\u{FFFD}');
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
                continue;
            }
            _ => e,
        };
        out.push(byte);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every byte value at every place after a run of digits, the bytes
    /// after it anything: the count is the place exactly when the byte is not
    /// a digit.
    #[test]
    fn first_non_digit_finds_the_first_byte_outside_0_to_9() {
        for place in 0..8 {
            for byte in 0..=255u8 {
                for after in [0x00, 0x35, 0xff] {
                    let mut word = [b'7'; 8];
                    word[place] = byte;
                    for later in word.iter_mut().skip(place + 1) {
                        *later = after;
                    }
                    let expected = word.iter().position(|b| !b.is_ascii_digit()).unwrap_or(8);
                    assert_eq!(
                        first_non_digit(u64::from_le_bytes(word)),
                        expected,
                        "{word:?}"
                    );
                }
            }
        }
    }

    /// The fast path and the reference give the same answer: the same
    /// nodes, or the same offset and message.
    fn same_as_reference(text: &[u8]) {
        let fast = Doc::scan(text).map(|doc| doc.nodes);
        let reference = Doc::scan_reference(text).map(|doc| doc.nodes);
        assert_eq!(fast, reference, "{:?}", String::from_utf8_lossy(text));
        // The fast path itself, not the reference it falls back on: it
        // accepts the first value of the text exactly when the reference
        // does, and ends where it ends.
        for depth in [0, 1, 100] {
            let mut scanner = Scanner {
                text,
                at: 0,
                nodes: Vec::new(),
                scratch: Vec::new(),
                fast: false,
            };
            let reference = scanner
                .value(Record::Skip, 0..0, false, depth)
                .map(|()| scanner.at);
            let fast = skip(text, 0, depth).map(|(_, end)| end);
            assert_eq!(
                fast.ok(),
                reference.ok(),
                "{:?} at depth {depth}",
                String::from_utf8_lossy(text)
            );
        }
    }

    fn same_as_serde(text: &[u8]) {
        same_as_reference(text);
        let ours = Doc::scan(text).map(|_| ());
        let theirs = serde_json::from_slice::<serde_json::Value>(text).map(|_| ());
        assert_eq!(
            ours.is_ok(),
            theirs.is_ok(),
            "{:?}: ours {ours:?}, serde_json {theirs:?}",
            String::from_utf8_lossy(text)
        );
    }

    #[test]
    fn accepts_and_refuses_what_serde_json_does() {
        let cases: &[&[u8]] = &[
            b"",
            b" ",
            b"{}",
            b"[]",
            b"[1,]",
            b"{,}",
            b"{\"a\":1,}",
            b"[1 2]",
            b"01",
            b"-0",
            b"-",
            b"1.",
            b"1.e5",
            b"1e",
            b"1e+",
            b"1E-7",
            b"0.5",
            b"-01",
            b"+1",
            b"1e400",
            b"-1e400",
            b"1e-400",
            b"123456789012345678901234567890",
            b"[1e308, 1.8e308]",
            b"tru",
            b"truex",
            b"nul",
            b"\"\\u12\"",
            b"\"\\ud800\"",
            b"\"\\udc00\"",
            b"\"\\ud800\\udc00\"",
            b"\"\\ud800\\u0041\"",
            b"\"\\ud800x\"",
            b"\"\\x\"",
            b"\"a\x01\"",
            b"\"\x7f\"",
            b"\"\xff\"",
            b"\"\xc3\xa9\"",
            b"\"\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"\"\xf4\x90\x80\x80\"",
            b"\xef\xbb\xbf{}",
            b"{} x",
            b"{}\n\t\r ",
            b"{\"a\" 1}",
            b"{1:2}",
            b"[\"\\/\"]",
            b"\"\\u00e9\"",
            b"{\"a\":[{\"b\":null}]}",
            b"\x0c{}",
        ];
        for case in cases {
            same_as_serde(case);
        }
    }

    /// Each case also where the fast path reads it: not recorded, an opaque
    /// member of a choice, an element of an opaque array, and recorded in
    /// full (the reference alone).
    fn in_every_place(value: &[u8]) -> Vec<Vec<u8>> {
        let places: [(&[u8], &[u8]); 5] = [
            (b"", b""),
            (br#"{"usage": "#, b"}"),
            (br#"{"choices": [{"logprobs": "#, b"}]}"),
            (br#"{"choices": [{"logprobs": [1, "#, b", 2]}]}"),
            (br#"{"choices": [{"payload": [{"x": "#, b"}]}]}"),
        ];
        places
            .iter()
            .map(|(before, after)| [*before, value, *after].concat())
            .collect()
    }

    /// [`same_as_serde`] of `value` in each of [`in_every_place`]'s places.
    fn same_as_serde_in_every_place(value: &[u8]) {
        for text in in_every_place(value) {
            same_as_serde(&text);
        }
    }

    #[test]
    fn the_fast_path_refuses_where_the_reference_does() {
        let cases: &[&[u8]] = &[
            b"[1,2,3]",
            b"[1,2,]",
            b"[1,,2]",
            b"[-]",
            b"[1,-]",
            b"[1,02]",
            b"[1.5e+07,-0.25,0e0]",
            b"[1,2 , 3 ,4]",
            b"[1,\"a\",2]",
            b"{\"a\":1,\"b\":[1,2,{\"c\":null}]}",
            b"{\"a\" :1 , \"b\" : 2}",
            b"{\"a\":1,}",
            b"{\"a\"}",
            b"{\"a\":}",
            b"{1:1}",
            b"[true,false,null]",
            b"[tru]",
            b"[nulll]",
            b"\"\\ud83d\\ude00\"",
            b"\"\\ud83d\\u0041\"",
            b"\"\\ud83d\"",
            b"\"\\ud83d\\",
            b"\"\\ud83d\\u",
            b"\"\\ude00\"",
            b"\"\\u00zz\"",
            b"\"\\u00\"",
            b"\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"",
            b"\"\\q\"",
            b"\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\"",
            b"\"\xc3\\n\"",
            b"\"\xc3\"",
            b"\"\xe2\x82\"",
            b"\"\xf5\x80\x80\x80\"",
            b"\"\xed\xb0\x80\"",
            b"\"a\tb\"",
            b"\"a\x1fb\"",
            b"\"a\x7fb\"",
            // The greatest byte exactly 0x80 (a continuation byte alone): a
            // run is ASCII only below it.
            b"\"\x80\"",
            b"\"ab\x80\"",
            b"\"ab\x80cdefghijklmnopqrstuvwxyz0123\"",
            b"\"abc",
            b"\"abc\\",
            b"[1e400]",
            b"[1E-400]",
            b"[1e99]",
            b"[1e999]",
            b"[",
            b"[1",
            b"[1,",
            b"{",
            b"{\"a\"",
            b"{\"a\":",
            b"{\"a\":1",
            b"]",
            b"}",
            b"[}",
            b"{]",
            b"[[[]]]",
            b"[[[]]",
        ];
        for case in cases {
            same_as_serde_in_every_place(case);
        }
        same_as_serde_in_every_place(format!("[{}]", "1".repeat(400)).as_bytes());
        same_as_serde_in_every_place(format!("[1.{}e5]", "0".repeat(400)).as_bytes());
    }

    /// Where the scanner refuses a text for the reason serde_json gives, it
    /// says so in serde_json's words, in every place (the message is taken
    /// from serde_json's error, its location cut off): a control character
    /// in a string (a byte below 0x20, never the space), a leading
    /// surrogate followed by something other than an escape (but for the
    /// end of the text), bytes that are not UTF-8.
    #[test]
    fn messages_are_serde_jsons_where_the_reason_is_the_same() {
        let cases: &[&[u8]] = &[
            b"\"a\x01\"",
            b"\"\x00\"",
            b"\"abc\x1f\"",
            b"\"\x0a\"",
            b"\"\\ud800x\"",
            b"\"\\ud800\"",
            b"\"\\ud800\\n\"",
            b"\"\xff\"",
            b"\"\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"\"\\x\"",
            b"[1 2]",
            b"{\"a\" 1}",
        ];
        // The text's end inside a string: only where nothing follows.
        let at_the_end: &[&[u8]] = &[b"\"\\ud800", b"\"\\ud83d\\", b"\"abc", b"\"abc\\"];
        let texts = cases
            .iter()
            .flat_map(|case| in_every_place(case))
            .chain(at_the_end.iter().map(|case| case.to_vec()));
        for text in texts {
            let theirs = serde_json::from_slice::<serde_json::Value>(&text).unwrap_err();
            let theirs = theirs.to_string();
            let theirs = theirs.split(" at line ").next().unwrap();
            for ours in [Doc::scan(&text), Doc::scan_reference(&text)] {
                assert_eq!(
                    ours.map(|_| ()).unwrap_err().message,
                    theirs,
                    "{:?}",
                    String::from_utf8_lossy(&text)
                );
            }
        }
    }

    /// Texts that are JSON but for one closing bracket, one member, or one
    /// letter of a literal, and their valid neighbours: where a container
    /// closes and what is open after it (an array, or an object whose
    /// members are keyed), and the literals' letters, all of which the fast
    /// path tracks itself. Every one is decided by serde_json as well.
    #[test]
    fn the_fast_path_closes_what_it_opened() {
        let cases: &[&[u8]] = &[
            // A number then a number in an object: not an array's element.
            b"{\"a\":1,2}",
            b"{\"a\":1,2,\"b\":3}",
            b"[{\"a\":1,2}]",
            b"{\"a\":[1,2],\"b\":3,4}",
            b"{\"a\":1,\"b\":2}",
            // The wrong closing bracket after a value.
            b"{\"a\":1]",
            b"[1}",
            b"[[1}]",
            b"{\"a\":{\"b\":1]}",
            b"[\"x\"}",
            b"{\"a\":\"x\"]",
            // Empty containers, then more members or elements.
            b"[[],1]",
            b"[{},1]",
            b"[[],[]]",
            b"{\"a\":[],\"b\":1}",
            b"{\"a\":{},\"b\":1}",
            b"[[1],2]",
            b"[{\"a\":1},2]",
            b"{\"a\":[1],\"b\":[2]}",
            b"[[],}",
            b"[{},]",
            // A literal with one letter wrong.
            b"[trux]",
            b"[fals3]",
            b"[nul1]",
            b"{\"a\":truE}",
            b"[true,falsE]",
        ];
        for case in cases {
            same_as_serde_in_every_place(case);
        }
    }

    #[test]
    fn the_fast_path_counts_nesting_as_the_reference_does() {
        // The limit is reached inside a value the fast path reads, at every
        // depth of the place it starts from.
        for depth in [125, 126, 127, 128] {
            for open in [b"[", b"{\"k\":".as_slice()] {
                let close = if open == b"[" { b"]" } else { b"}" };
                let value = [open.repeat(depth), b"0".to_vec(), close.repeat(depth)].concat();
                same_as_serde_in_every_place(&value);
            }
        }
    }

    /// Text near JSON: a value written from a small grammar with odd
    /// spellings, whitespace and strings, then perhaps broken at one place.
    fn near_json() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        let string = proptest::collection::vec(
            prop_oneof![
                Just(b"a".to_vec()),
                Just(b"\\\"".to_vec()),
                Just(b"\\\\".to_vec()),
                Just(b"\\u00e9".to_vec()),
                Just(b"\\ud83d\\ude00".to_vec()),
                Just(b"\\ud83d".to_vec()),
                Just(b"\\udc00".to_vec()),
                Just("\u{e9}\u{20ac}\u{1f600}".as_bytes().to_vec()),
                Just(b"\xc3".to_vec()),
                Just(b"\x1f".to_vec()),
                Just(b"\\x".to_vec()),
                Just(b"routed_experts".to_vec()),
                "[ -~]{0,40}".prop_map(String::into_bytes),
            ],
            0..6,
        )
        .prop_map(|parts| [b"\"".to_vec(), parts.concat(), b"\"".to_vec()].concat());
        let number = (
            "-?(0|[1-9][0-9]{0,20})",
            proptest::option::of("\\.[0-9]{1,20}"),
            proptest::option::of("[eE][+-]?[0-9]{1,4}"),
        )
            .prop_map(|(int, frac, exp)| {
                format!(
                    "{int}{}{}",
                    frac.unwrap_or_default(),
                    exp.unwrap_or_default()
                )
                .into_bytes()
            });
        let ws = "[ \t\n\r]{0,2}".prop_map(String::into_bytes);
        let leaf = prop_oneof![
            string.clone(),
            number,
            Just(b"true".to_vec()),
            Just(b"false".to_vec()),
            Just(b"null".to_vec()),
        ];
        let value = leaf.prop_recursive(4, 48, 8, move |inner| {
            prop_oneof![
                (proptest::collection::vec((inner.clone(), ws.clone()), 0..8)).prop_map(|items| {
                    let items: Vec<Vec<u8>> = items
                        .into_iter()
                        .map(|(v, w)| [w.clone(), v, w].concat())
                        .collect();
                    [b"[".to_vec(), items.join(&b","[..]), b"]".to_vec()].concat()
                }),
                (proptest::collection::vec((string.clone(), inner, ws.clone()), 0..6)).prop_map(
                    |members| {
                        let members: Vec<Vec<u8>> = members
                            .into_iter()
                            .map(|(k, v, w)| [k, w.clone(), b":".to_vec(), w, v].concat())
                            .collect();
                        [b"{".to_vec(), members.join(&b","[..]), b"}".to_vec()].concat()
                    }
                ),
            ]
        });
        let breakage = proptest::option::of((
            any::<proptest::sample::Index>(),
            0..3u8,
            proptest::sample::select(b"\"\\{}[],:0-.eE+u \x00\x1f\x80\xc3\xed\xff".to_vec()),
        ));
        (value, breakage).prop_map(|(mut text, breakage)| {
            if let Some((at, how, byte)) = breakage {
                let at = at.index(text.len() + 1);
                match how {
                    0 => text.insert(at, byte),
                    1 if at < text.len() => {
                        text.remove(at);
                    }
                    _ if at < text.len() => text[at] = byte,
                    _ => text.push(byte),
                }
            }
            text
        })
    }

    proptest::proptest! {
        #![proptest_config(proptest::test_runner::Config {
            cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(512).max(512),
            ..proptest::test_runner::Config::default()
        })]

        /// The fast path gives the reference's answer (nodes, or offset and
        /// message) and accepts what serde_json accepts, in every place.
        #[test]
        fn the_fast_path_is_the_reference(value in near_json()) {
            same_as_serde_in_every_place(&value);
        }
    }

    #[test]
    fn nesting_stops_where_serde_json_stops() {
        for depth in [1, 126, 127, 128, 129, 100_000] {
            let text = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            same_as_serde(text.as_bytes());
            let text = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
            same_as_serde(text.as_bytes());
        }
        // Unclosed, a million deep: an error, not a stack overflow.
        assert!(Doc::scan("[".repeat(1_000_000).as_bytes()).is_err());
    }

    #[test]
    fn long_numbers_are_decided_by_serde_json() {
        for case in [
            format!("1{}", "0".repeat(400)),
            format!("0.{}1", "0".repeat(400)),
            "1e99999999999999999999".to_owned(),
            "0e99999999999999999999".to_owned(),
            "1e-99999999999999999999".to_owned(),
            "17976931348623157e292".to_owned(),
            "17976931348623159e292".to_owned(),
        ] {
            same_as_serde(case.as_bytes());
        }
    }

    /// A number shorter than 300 characters with a two-digit exponent can
    /// still overflow an `f64`: 250 digits times `1e99` is about `1e348`,
    /// 211 digits `1e309`, while 210 digits times `1e99` (`1e308`) fits.
    /// serde_json decides; both readers agree with it, in every place.
    #[test]
    fn a_short_number_with_a_two_digit_exponent_can_overflow() {
        for (int_digits, exponent) in [
            (250, "e99"),
            (211, "e99"),
            (210, "e99"),
            (209, "e99"),
            (211, "E+98"),
            (250, "e-99"),
            (290, "e19"),
        ] {
            for fraction in ["", ".5"] {
                let number = format!("1{}{fraction}{exponent}", "0".repeat(int_digits - 1));
                for sign in ["", "-"] {
                    let value = format!("{sign}{number}");
                    same_as_serde_in_every_place(value.as_bytes());
                    let array = format!("[{value}]");
                    same_as_serde_in_every_place(array.as_bytes());
                }
            }
        }
    }

    /// A number of at most 300 characters whose exponent has two digits
    /// can still overflow an `f64`: a long integer part adds to the
    /// exponent (10^210 x 10^99 is past f64::MAX). serde_json refuses it.
    #[test]
    fn a_long_mantissa_with_a_short_exponent_is_decided_by_serde_json() {
        for case in [
            format!("1{}e99", "0".repeat(210)),
            format!("1{}e99", "0".repeat(205)),
            format!("-1{}e99", "0".repeat(210)),
            format!("1{}.5e99", "0".repeat(210)),
            format!("1{}E+99", "0".repeat(210)),
            format!("1{}e-99", "0".repeat(210)),
            format!("1{}e9", "0".repeat(299)),
            format!("1{}e9", "0".repeat(290)),
            format!("0.{}e99", "0".repeat(250)),
        ] {
            same_as_serde_in_every_place(format!("[{case}]").as_bytes());
            same_as_serde(case.as_bytes());
        }
    }

    #[test]
    fn unescape_matches_serde_json() {
        for text in [
            r#""plain""#,
            r#""a\"b\\c\/d\be\ff\ng\rh\ti""#,
            r#""caf\u00e9 \ud83d\ude00 \u0000""#,
        ] {
            let expected: String = serde_json::from_str(text).unwrap();
            let raw = &text.as_bytes()[1..text.len() - 1];
            let mut out = Vec::new();
            unescape(raw, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), expected);
        }
    }

    /// SGLang's slots: each element of a response that is an array, and
    /// the members (not deeper) of `meta_info`, `sglext` and `sgl_ext`.
    #[test]
    fn records_sglang_slots_and_only_their_members() {
        let text = br#"[{"text": "t", "meta_info": {"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}}, 7]"#;
        let doc = Doc::scan(text).unwrap();
        let spans: Vec<&str> = doc
            .nodes
            .iter()
            .map(|n| std::str::from_utf8(&text[n.span.clone()]).unwrap())
            .collect();
        assert_eq!(
            spans,
            [
                std::str::from_utf8(text).unwrap(),
                r#"{"text": "t", "meta_info": {"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}}"#,
                "\"t\"",
                r#"{"prompt_tokens": 2, "routed_experts": "AAAA", "logs": [1]}"#,
                "2",
                "\"AAAA\"",
                "[1]",
                "7",
            ]
        );
        assert!(!doc.nodes[6].indexed, "a member of meta_info is opaque");
        let text = br#"{"choices": [{"sgl_ext": {"routed_experts": "AAAA", "x": {"y": 1}}}]}"#;
        let doc = Doc::scan(text).unwrap();
        assert_eq!(
            doc.nodes.len(),
            6,
            "root, choices, choice, sgl_ext, its two members"
        );
    }

    /// The spans of the nodes a scan records, and whether each is indexed.
    fn recorded(text: &[u8]) -> Vec<(&str, bool)> {
        let doc = Doc::scan(text).unwrap();
        assert_eq!(doc.nodes, Doc::scan_reference(text).unwrap().nodes);
        doc.nodes
            .iter()
            .map(|n| {
                (
                    std::str::from_utf8(&text[n.span.clone()]).unwrap(),
                    n.indexed,
                )
            })
            .collect()
    }

    /// A member of the response (or of a batch's element) that is not one of
    /// SGLang's slots is opaque, an object or array included: recorded, its
    /// children not.
    #[test]
    fn other_members_of_a_response_are_opaque_even_when_containers() {
        let text = br#"{"id": {"a": [1]}, "logs": [{"b": 2}], "usage": {"c": 3}}"#;
        assert_eq!(
            recorded(text),
            [
                (std::str::from_utf8(text).unwrap(), true),
                (r#"{"a": [1]}"#, false),
                (r#"[{"b": 2}]"#, false),
                (r#"{"c": 3}"#, true),
                ("3", false),
            ]
        );
        let text = br#"[{"id": {"a": 1}, "meta_info": {"d": [4]}}]"#;
        assert_eq!(
            recorded(text),
            [
                (std::str::from_utf8(text).unwrap(), true),
                (r#"{"id": {"a": 1}, "meta_info": {"d": [4]}}"#, true),
                (r#"{"a": 1}"#, false),
                (r#"{"d": [4]}"#, true),
                ("[4]", false),
            ]
        );
    }

    /// An escaped key chooses what is recorded as its unescaped text does,
    /// at every level whose keys choose: `"\u0069d"` is `id` (opaque),
    /// `"ch\u006fices"` is `choices`, `"l\u006fgprobs"` is `logprobs`
    /// (opaque) and `"p\u0061yload"` is `payload` (in full).
    #[test]
    fn escaped_keys_choose_what_is_recorded_as_their_text() {
        let text = br#"{"\u0069d": {"a": 1}, "ch\u006fices": [{"l\u006fgprobs": [1], "p\u0061yload": [2]}]}"#;
        assert_eq!(
            recorded(text),
            [
                (std::str::from_utf8(text).unwrap(), true),
                (r#"{"a": 1}"#, false),
                (r#"[{"l\u006fgprobs": [1], "p\u0061yload": [2]}]"#, true),
                (r#"{"l\u006fgprobs": [1], "p\u0061yload": [2]}"#, true),
                ("[1]", false),
                ("[2]", true),
                ("2", false),
            ]
        );
    }

    #[test]
    fn records_the_merge_paths_and_only_them() {
        let text = br#"{"id": "x", "choices": [{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}], "usage": {"a": 1}}"#;
        let doc = Doc::scan(text).unwrap();
        let spans: Vec<&str> = doc
            .nodes
            .iter()
            .map(|n| std::str::from_utf8(&text[n.span.clone()]).unwrap())
            .collect();
        assert_eq!(
            spans,
            [
                std::str::from_utf8(text).unwrap(),
                "\"x\"",
                r#"[{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}]"#,
                r#"{"logprobs": [1, 2], "payload": [{"pos": 1}], "routed_experts": null}"#,
                "[1, 2]",
                r#"[{"pos": 1}]"#,
                r#"{"pos": 1}"#,
                "1",
                "null",
                // usage's members place SGLang's rows (its counts).
                r#"{"a": 1}"#,
                "1",
            ]
        );
        assert!(!doc.nodes[4].indexed, "logprobs is opaque");
        assert!(doc.nodes[5].indexed, "payload is recorded in full");
    }
}
