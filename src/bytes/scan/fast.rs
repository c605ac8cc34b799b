//! The fast path: a value the scanner does not record, validated without
//! being recorded, whole runs at a time; any doubt is a refusal, and the
//! recording scanner's byte-at-a-time reading then says where and why.

use crate::response::view::Kind;

use super::swar::{first_non_digit, is_special};
use super::{LONG_INTEGER, MAX_DEPTH, SHORT};

/// The fast path refused the text: the reference says where and why.
#[derive(Debug)]
pub(super) struct Refused;

/// Validates the value at `at` (no leading whitespace) and everything in
/// it, building nothing and without recursion: its kind and the index one
/// past it. `depth` is the nesting of the container the value is in, as
/// [`Scanner::value`] counts it. Accepts exactly what the reference
/// accepts (`Scanner::value` with nothing recorded); where that refuses,
/// this refuses too, without saying why.
#[inline]
pub(super) fn skip(text: &[u8], at: usize, depth: usize) -> Result<(Kind, usize), Refused> {
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
pub(super) fn whitespace(text: &[u8], mut at: usize) -> usize {
    while let Some(b' ' | b'\n' | b'\t' | b'\r') = text.get(at) {
        at += 1;
    }
    at
}

/// Skips an object member's key at `at`, the whitespace, the colon and the
/// whitespace after it: the index of the member's value.
#[inline(always)]
pub(super) fn member_key(text: &[u8], at: usize) -> Result<usize, Refused> {
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
pub(super) fn word(text: &[u8], at: usize, word: &[u8]) -> Result<usize, Refused> {
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
pub(super) fn skip_string(text: &[u8], at: usize) -> Result<usize, Refused> {
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
pub(super) fn special_end(rest: &[u8]) -> Result<usize, Refused> {
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
pub(super) fn plain_text(run: &[u8]) -> bool {
    let (least, greatest) = run
        .iter()
        .fold((u8::MAX, 0u8), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    least >= 0x20 && (greatest < 0x80 || std::str::from_utf8(run).is_ok())
}

/// Skips the escape at `at` (its backslash), as [`Scanner::escape`] reads
/// it: the index past it.
pub(super) fn skip_escape(text: &[u8], at: usize) -> Result<usize, Refused> {
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
pub(super) fn hex4(text: &[u8], at: usize) -> Result<u16, Refused> {
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
pub(super) fn skip_number(text: &[u8], start: usize) -> Result<usize, Refused> {
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
pub(super) fn digits_from(text: &[u8], mut at: usize) -> usize {
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
