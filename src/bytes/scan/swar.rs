//! Eight bytes at a time in a `u64` (SWAR): the runs of digits and of plain
//! string bytes the readers skip, and the width of a UTF-8 character.

/// The length of the run of string bytes at the start of `text` that need no
/// attention: printable ASCII other than `"` and `\`. Checks 32 bytes at a
/// time without branching (which vectorizes), and finds the exact place only
/// in the chunk that stops the run.
#[inline]
pub(super) fn plain_run(text: &[u8]) -> usize {
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
#[inline]
pub(super) fn first_non_digit(word: u64) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    let flags = (word.wrapping_sub(ONES * 0x30) | word.wrapping_add(ONES * 0x46)) & (ONES * 0x80);
    (flags.trailing_zeros() / 8) as usize
}

/// Whether `b` ends a run of plain string characters: outside 0x20..0x80
/// (one subtraction), or a quote or a backslash.
#[inline(always)]
pub(super) fn is_special(b: u8) -> bool {
    (b.wrapping_sub(0x20) >= 0x60) | (b == b'"') | (b == b'\\')
}

/// The length of the UTF-8 character that starts with `lead`, 0 when `lead`
/// cannot start one.
#[inline]
pub(super) fn utf8_width(lead: u8) -> usize {
    match lead {
        0xC2..=0xDF => 2,
        0xE0..=0xEF => 3,
        0xF0..=0xF4 => 4,
        _ => 0,
    }
}
