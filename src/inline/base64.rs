//! Canonical standard base64 (RFC 4648 §4, with padding), strict both ways.
//!
//! Inline rows arrive as base64 text. The merge must reject anything that is
//! not the one canonical encoding of some bytes: characters outside the
//! alphabet, missing or extra padding, and non-zero bits in the last
//! character before the padding (which would let two texts decode to the same
//! bytes). A router that accepted those would let a malformed response through
//! as a different one.
//!
//! [`Base64`] is text that has passed that check. Because base64 maps every 3
//! bytes to 4 characters, the text of bytes `[a, b)` with `a` and `b`
//! multiples of 3 is a slice of the validated text ([`Base64::quads`]). The
//! [`Encoder`] builds merged text out of such slices wherever the bytes keep
//! their position modulo 3, and decodes and encodes only the rest.

use std::fmt;
use std::ops::Range;

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Marks a byte that is not in the alphabet in [`DECODE`].
const INVALID: u8 = 0xff;

/// The value of each alphabet character, [`INVALID`] for every other byte.
const DECODE: [u8; 256] = {
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < 64 {
        table[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    table
};

/// Text known to be canonical standard base64.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Base64<'a> {
    text: &'a str,
    len: usize,
}

impl<'a> Base64<'a> {
    /// Checks that `text` is canonical standard base64 with padding.
    pub(crate) fn parse(text: &'a str) -> Result<Base64<'a>, Base64Error> {
        let bytes = text.as_bytes();
        if bytes.len() % 4 != 0 {
            return Err(Base64Error::Length(bytes.len()));
        }
        let (body, last) = match bytes.len().checked_sub(4) {
            None => return Ok(Base64 { text, len: 0 }),
            Some(at) => bytes.split_at(at),
        };
        if let Some(at) = first_invalid(body) {
            return Err(invalid(bytes, at));
        }
        let tail = decode_last(last, body.len())?;
        Ok(Base64 {
            text,
            len: body.len() / 4 * 3 + tail,
        })
    }

    /// Text that [`Base64::parse`] already accepted, with the length it
    /// found, seen again (the caller holds the text elsewhere).
    pub(crate) fn parsed(text: &'a str, len: usize) -> Base64<'a> {
        Base64 { text, len }
    }

    /// The number of bytes the text encodes.
    pub(crate) fn decoded_len(&self) -> usize {
        self.len
    }

    /// The characters that encode the bytes `[from, to)`, when both are
    /// multiples of 3 and the bytes lie in full (unpadded) quads; `None`
    /// otherwise.
    pub(crate) fn quad_range(&self, from: usize, to: usize) -> Option<Range<usize>> {
        if from % 3 != 0 || to % 3 != 0 || from > to || to > self.len / 3 * 3 {
            return None;
        }
        Some(from / 3 * 4..to / 3 * 4)
    }

    /// Appends the decoded bytes `[from, decoded_len)` to `out`.
    #[cfg(test)]
    pub(crate) fn decode_from(&self, from: usize, out: &mut Vec<u8>) {
        self.decode_range(from, self.len, out);
    }

    /// Appends the decoded bytes `[from, to)` (clamped to the decoded length)
    /// to `out`.
    pub(crate) fn decode_range(&self, from: usize, to: usize, out: &mut Vec<u8>) {
        let to = to.min(self.len);
        if from >= to {
            return;
        }
        out.reserve(to - from);
        let text = self.text.as_bytes();
        // Whole quads [first, last) hold bytes [3 first, 3 last).
        let first = from / 3;
        let last = to.div_ceil(3);
        let quads = text.get(first * 4..last * 4).unwrap_or_default();
        let skip = from - first * 3;
        let keep_last = to - (last - 1) * 3; // bytes kept of the last quad, 1..=3
        let Some((body, tail)) = quads.split_last_chunk::<4>() else {
            return;
        };
        if body.is_empty() {
            let bytes = decode_quad(tail);
            out.extend_from_slice(bytes.get(skip..keep_last).unwrap_or_default());
            return;
        }
        let (head, body) = body.split_at(4);
        let bytes = decode_quad(head);
        out.extend_from_slice(bytes.get(skip..).unwrap_or_default());
        // The body has no padding (only the text's last quad may): 4
        // characters to 3 bytes, written in place.
        let start = out.len();
        out.resize(start + body.len() / 4 * 3, 0);
        let dst = out.get_mut(start..).unwrap_or_default();
        for (d, q) in dst.chunks_exact_mut(3).zip(body.chunks_exact(4)) {
            let n = sextet(q[0]) << 18 | sextet(q[1]) << 12 | sextet(q[2]) << 6 | sextet(q[3]);
            d[0] = (n >> 16) as u8;
            d[1] = (n >> 8) as u8;
            d[2] = n as u8;
        }
        let bytes = decode_quad(tail);
        out.extend_from_slice(bytes.get(..keep_last).unwrap_or_default());
    }
}

/// Whether `c` is in the standard alphabet, without a table, so that the
/// compiler can check many characters at once.
#[inline(always)]
fn in_alphabet(c: u8) -> bool {
    (c.wrapping_sub(b'A') < 26)
        | (c.wrapping_sub(b'a') < 26)
        | (c.wrapping_sub(b'0') < 10)
        | (c == b'+')
        | (c == b'/')
}

/// The index of the first character outside the alphabet. Checks 64
/// characters at a time without branching (which vectorizes), and looks for
/// the exact place only in a chunk that fails.
fn first_invalid(text: &[u8]) -> Option<usize> {
    const CHUNK: usize = 64;
    let chunks = text.chunks_exact(CHUNK);
    let rest_at = text.len() - chunks.remainder().len();
    for (k, chunk) in chunks.enumerate() {
        if !chunk.iter().fold(true, |ok, &c| ok & in_alphabet(c)) {
            return chunk
                .iter()
                .position(|&c| !in_alphabet(c))
                .map(|i| k * CHUNK + i);
        }
    }
    text.get(rest_at..)
        .unwrap_or_default()
        .iter()
        .position(|&c| !in_alphabet(c))
        .map(|i| rest_at + i)
}

/// The 6-bit value of a validated character. `=` gives 63, which only
/// feeds bytes that the padding drops.
fn sextet(c: u8) -> u32 {
    u32::from(DECODE[usize::from(c)] & 0x3f)
}

/// The bytes of one validated quad (the callers keep only those it encodes).
fn decode_quad(quad: &[u8]) -> [u8; 3] {
    let c = |i: usize| quad.get(i).copied().unwrap_or(b'=');
    let n = sextet(c(0)) << 18 | sextet(c(1)) << 12 | sextet(c(2)) << 6 | sextet(c(3));
    [(n >> 16) as u8, (n >> 8) as u8, n as u8]
}

/// Which validated base64 text a [`Piece::Copy`] copies from: the merge's
/// sources are numbered (the prefill's rows 0, the decode choice's rows 1).
pub(crate) type SourceId = usize;

/// One run of merged text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text the encoder wrote: this range of [`Text::own`].
    Own(Range<usize>),
    /// Characters of a source's validated text, copied as they are.
    Copy(SourceId, Range<usize>),
}

/// Merged base64 text, as runs the encoder wrote and runs copied from the
/// sources' texts. Nothing of the sources is copied until an adapter writes
/// the text where it belongs: into a new string, or into the decode's own
/// buffer, where a run copied from the decode's own text may stay where it is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Text {
    pieces: Vec<Piece>,
    own: Vec<u8>,
    len: usize,
}

impl Text {
    /// The runs, in order.
    pub(crate) fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The text the encoder wrote, which [`Piece::Own`] ranges index.
    pub(crate) fn own(&self) -> &[u8] {
        &self.own
    }

    /// The text's length.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Appends the text to `out`, with `sources[id]` the text of source `id`
    /// (the one the merge validated).
    pub(crate) fn write_to(&self, sources: &[&[u8]], out: &mut Vec<u8>) {
        out.reserve(self.len);
        for piece in &self.pieces {
            let run = match piece {
                Piece::Own(range) => self.own.get(range.clone()),
                Piece::Copy(id, range) => sources.get(*id).and_then(|s| s.get(range.clone())),
            };
            out.extend_from_slice(run.unwrap_or_default());
        }
    }

    /// The text as a string, with `sources` as for [`Text::write_to`].
    pub(crate) fn to_string(&self, sources: &[&str]) -> String {
        let sources: Vec<&[u8]> = sources.iter().map(|s| s.as_bytes()).collect();
        let mut out = Vec::new();
        self.write_to(&sources, &mut out);
        // Base64 characters and '=' only: always valid UTF-8.
        String::from_utf8(out).unwrap_or_default()
    }
}

/// Builds base64 text out of parts: raw bytes, and byte ranges of validated
/// base64 sources. Where a source's bytes land on the same position modulo 3
/// in the output as in the source, their text is not decoded and encoded
/// again, nor even copied: the [`Text`] names the source's characters.
pub(crate) struct Encoder {
    out: Vec<u8>,
    pieces: Vec<Piece>,
    /// Where the run of `out` not yet in `pieces` starts.
    mark: usize,
    len: usize,
    /// Bytes not yet encoded: fewer than 3.
    pending: [u8; 3],
    npending: usize,
    scratch: Vec<u8>,
}

/// How many bytes the encoder decodes at a time when it cannot copy text.
const STEP: usize = 3 * 16 * 1024;

impl Encoder {
    /// An empty encoder.
    pub(crate) fn new() -> Encoder {
        Encoder {
            out: Vec::new(),
            pieces: Vec::new(),
            mark: 0,
            len: 0,
            pending: [0; 3],
            npending: 0,
            scratch: Vec::new(),
        }
    }

    /// Appends `bytes`.
    pub(crate) fn push_bytes(&mut self, mut bytes: &[u8]) {
        if self.npending > 0 {
            let take = (3 - self.npending).min(bytes.len());
            let (head, rest) = bytes.split_at(take);
            for &b in head {
                self.pending[self.npending] = b;
                self.npending += 1;
            }
            bytes = rest;
            if self.npending < 3 {
                return;
            }
            let triple = self.pending;
            encode_into(&triple, &mut self.out);
            self.npending = 0;
        }
        let whole = bytes.len() / 3 * 3;
        let (body, rest) = bytes.split_at(whole);
        encode_into(body, &mut self.out);
        for &b in rest {
            self.pending[self.npending] = b;
            self.npending += 1;
        }
    }

    /// Ends the run of written text, if any, as a piece.
    fn flush(&mut self) {
        if self.out.len() > self.mark {
            self.len += self.out.len() - self.mark;
            self.pieces.push(Piece::Own(self.mark..self.out.len()));
            self.mark = self.out.len();
        }
    }

    /// Appends the bytes `[from, to)` of `source`, whose id is `id`.
    pub(crate) fn push_base64(
        &mut self,
        source: &Base64<'_>,
        id: SourceId,
        from: usize,
        to: usize,
    ) {
        let to = to.min(source.decoded_len());
        if from >= to {
            return;
        }
        if self.npending % 3 != from % 3 {
            return self.push_decoded(source, from, to, |bytes, out| out.extend_from_slice(bytes));
        }
        // Decode up to the next multiple of 3: then the output has no pending
        // bytes and the source is on a quad boundary.
        let aligned = (from.div_ceil(3) * 3).min(to);
        self.push_decoded(source, from, aligned, |bytes, out| {
            out.extend_from_slice(bytes)
        });
        // Name the text of the whole quads from there: up to the last multiple
        // of 3 at or before `to` (which, as `to <= decoded_len`, is never past
        // the last unpadded quad), then decode the rest.
        let end = aligned + to.saturating_sub(aligned) / 3 * 3;
        if let Some(chars) = source.quad_range(aligned, end) {
            if !chars.is_empty() {
                self.flush();
                self.len += chars.len();
                self.pieces.push(Piece::Copy(id, chars));
            }
            self.push_decoded(source, end, to, |bytes, out| out.extend_from_slice(bytes));
        } else {
            self.push_decoded(source, aligned, to, |bytes, out| {
                out.extend_from_slice(bytes)
            });
        }
    }

    /// Appends the bytes `[from, to)` of `source` (whose id is `id`), each
    /// element zero-extended from `narrow` to `wide` bytes.
    pub(crate) fn push_widened(
        &mut self,
        source: &Base64<'_>,
        id: SourceId,
        from: usize,
        to: usize,
        narrow: usize,
        wide: usize,
    ) {
        if narrow == wide {
            return self.push_base64(source, id, from, to);
        }
        self.push_decoded(source, from, to, |bytes, out| {
            widen(bytes, narrow, wide, out)
        });
    }

    /// Decodes `[from, to)` of `source` a step at a time, maps each step with
    /// `map` and encodes the result.
    fn push_decoded(
        &mut self,
        source: &Base64<'_>,
        from: usize,
        to: usize,
        map: impl Fn(&[u8], &mut Vec<u8>),
    ) {
        let mut raw = Vec::new();
        let mut at = from;
        while at < to {
            let step_end = to.min(at.saturating_add(STEP));
            raw.clear();
            source.decode_range(at, step_end, &mut raw);
            let mut mapped = std::mem::take(&mut self.scratch);
            mapped.clear();
            map(&raw, &mut mapped);
            self.push_bytes(&mapped);
            self.scratch = mapped;
            at = step_end;
        }
    }

    /// The text, with the last bytes padded.
    pub(crate) fn finish(mut self) -> Text {
        let pending = self.pending;
        encode_into(
            pending.get(..self.npending).unwrap_or_default(),
            &mut self.out,
        );
        self.flush();
        Text {
            pieces: self.pieces,
            own: self.out,
            len: self.len,
        }
    }
}

/// Zero-extends little-endian unsigned elements of `narrow` bytes to `wide`.
pub(crate) fn widen(raw: &[u8], narrow: usize, wide: usize, out: &mut Vec<u8>) {
    match (narrow, wide) {
        (1, 2) => widen_to::<1, 2>(raw, out),
        (1, 4) => widen_to::<1, 4>(raw, out),
        (1, 8) => widen_to::<1, 8>(raw, out),
        (2, 4) => widen_to::<2, 4>(raw, out),
        (2, 8) => widen_to::<2, 8>(raw, out),
        (4, 8) => widen_to::<4, 8>(raw, out),
        _ => {}
    }
}

/// [`widen`] for fixed sizes, so that each element is a few fixed moves.
fn widen_to<const N: usize, const W: usize>(raw: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + raw.len() / N * W, 0);
    let dst = out.get_mut(start..).unwrap_or_default();
    for (d, s) in dst.chunks_exact_mut(W).zip(raw.chunks_exact(N)) {
        let (Some(d), Some(s)) = (d.first_chunk_mut::<N>(), s.first_chunk::<N>()) else {
            continue;
        };
        *d = *s;
    }
}

/// Checks the last quad (padding and canonical trailing bits) and returns how
/// many bytes it encodes. `at` is its index in the text.
fn decode_last(quad: &[u8], at: usize) -> Result<usize, Base64Error> {
    let pads = quad.iter().rev().take_while(|&&c| c == b'=').count();
    if pads > 2 {
        return Err(Base64Error::Padding(at + 4 - pads));
    }
    let data = quad.get(..4 - pads).unwrap_or_default();
    if let Some(i) = data.iter().position(|&c| DECODE[usize::from(c)] == INVALID) {
        return Err(invalid(quad, i).shift(at));
    }
    // The bits of the last data character that fall outside the encoded
    // bytes must be zero: 4 bits with "xx==", 2 bits with "xxx=".
    let unused_mask = match pads {
        2 => 0x0f,
        1 => 0x03,
        _ => 0,
    };
    if let Some(&c) = data.last() {
        if DECODE[usize::from(c)] & unused_mask != 0 {
            return Err(Base64Error::NonCanonical(at + data.len() - 1));
        }
    }
    Ok(3 - pads)
}

fn invalid(text: &[u8], at: usize) -> Base64Error {
    match text.get(at) {
        Some(b'=') => Base64Error::Padding(at),
        Some(&c) => Base64Error::Character { at, byte: c },
        None => Base64Error::Length(text.len()),
    }
}

/// Encodes `bytes` as standard base64 with padding, into a string of exactly
/// the right size.
#[cfg(any(test, feature = "cli", feature = "testing"))]
pub(crate) fn encode(bytes: &[u8]) -> String {
    let mut out = Vec::with_capacity(encoded_len(bytes.len()));
    encode_into(bytes, &mut out);
    // Only alphabet characters and '=' were written: always valid UTF-8.
    String::from_utf8(out).unwrap_or_default()
}

/// The length of the base64 text of `n` bytes.
pub(crate) fn encoded_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// The two characters of every 12-bit value: encoding looks up two of these
/// per 3 bytes instead of four single characters.
const PAIRS: [[u8; 2]; 4096] = {
    let mut table = [[0u8; 2]; 4096];
    let mut i = 0;
    while i < 4096 {
        table[i] = [ALPHABET[i >> 6], ALPHABET[i & 63]];
        i += 1;
    }
    table
};

/// Appends the base64 text of `bytes` to `out`, written in place.
pub(crate) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + encoded_len(bytes.len()), 0);
    let dst = out.get_mut(start..).unwrap_or_default();
    let chunks = bytes.chunks_exact(3);
    let rest = chunks.remainder();
    let mut quads = dst.chunks_exact_mut(4);
    for (c, d) in chunks.zip(&mut quads) {
        let n = u32::from(c[0]) << 16 | u32::from(c[1]) << 8 | u32::from(c[2]);
        let hi = PAIRS[(n >> 12) as usize & 0xfff];
        let lo = PAIRS[n as usize & 0xfff];
        d.copy_from_slice(&[hi[0], hi[1], lo[0], lo[1]]);
    }
    if let Some(d) = quads.next() {
        let (n, kept) = match *rest {
            [a] => (u32::from(a) << 16, 2),
            [a, b] => (u32::from(a) << 16 | u32::from(b) << 8, 3),
            _ => (0, 0),
        };
        for (i, slot) in d.iter_mut().enumerate() {
            *slot = if i < kept {
                ALPHABET[(n >> (18 - 6 * i)) as usize & 63]
            } else {
                b'='
            };
        }
    }
}

/// Why a text is not canonical standard base64. Indices count characters
/// from the start of the text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Base64Error {
    /// The length is not a multiple of 4.
    Length(usize),
    /// A character outside the standard alphabet (`-`, `_`, white space, ...).
    Character {
        /// Its index.
        at: usize,
        /// The byte.
        byte: u8,
    },
    /// `=` where it does not belong: inside the text, or more than two.
    Padding(usize),
    /// The last character before the padding has bits set that encode no
    /// byte, so this is not the canonical text of its bytes.
    NonCanonical(usize),
}

impl Base64Error {
    fn shift(self, by: usize) -> Base64Error {
        match self {
            Base64Error::Character { at, byte } => Base64Error::Character { at: at + by, byte },
            Base64Error::Padding(at) => Base64Error::Padding(at + by),
            Base64Error::NonCanonical(at) => Base64Error::NonCanonical(at + by),
            Base64Error::Length(n) => Base64Error::Length(n),
        }
    }
}

impl fmt::Display for Base64Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Base64Error::Length(n) => write!(f, "length {n} is not a multiple of 4"),
            Base64Error::Character { at, byte } if byte.is_ascii_graphic() => {
                write!(
                    f,
                    "character {:?} at {at} is not in the standard alphabet",
                    byte as char
                )
            }
            Base64Error::Character { at, byte } => {
                write!(
                    f,
                    "byte 0x{byte:02x} at {at} is not in the standard alphabet"
                )
            }
            Base64Error::Padding(at) => write!(f, "misplaced padding '=' at {at}"),
            Base64Error::NonCanonical(at) => {
                write!(
                    f,
                    "character at {at} has unused bits set (not the canonical encoding)"
                )
            }
        }
    }
}

impl std::error::Error for Base64Error {}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
        let b = Base64::parse(text)?;
        let mut out = Vec::new();
        b.decode_from(0, &mut out);
        assert_eq!(out.len(), b.decoded_len());
        Ok(out)
    }

    #[test]
    fn rfc4648_test_vectors() {
        for (plain, text) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(encode(plain.as_bytes()), text);
            assert_eq!(decode(text).unwrap(), plain.as_bytes());
        }
    }

    #[test]
    fn rejects_everything_but_the_canonical_text() {
        assert_eq!(decode("Zg="), Err(Base64Error::Length(3)));
        assert_eq!(decode("Zg"), Err(Base64Error::Length(2)));
        assert_eq!(decode("Zh=="), Err(Base64Error::NonCanonical(1)));
        assert_eq!(decode("Zm9="), Err(Base64Error::NonCanonical(2)));
        assert_eq!(decode("Z==="), Err(Base64Error::Padding(1)));
        assert_eq!(decode("===="), Err(Base64Error::Padding(0)));
        assert_eq!(decode("Zg==Zg=="), Err(Base64Error::Padding(2)));
        assert_eq!(decode("Z=g="), Err(Base64Error::Padding(1)));
        assert_eq!(
            decode("Zm-v"),
            Err(Base64Error::Character { at: 2, byte: b'-' })
        );
        assert_eq!(decode("Zm9v\nZm9v"), Err(Base64Error::Length(9)));
        assert_eq!(
            decode("Zm9vZm_v"),
            Err(Base64Error::Character { at: 6, byte: b'_' })
        );
        assert_eq!(
            decode("Zm 9"),
            Err(Base64Error::Character { at: 2, byte: b' ' })
        );
        assert_eq!(
            decode("Zmé"),
            Err(Base64Error::Character { at: 2, byte: 0xc3 })
        );
    }

    #[test]
    fn decode_from_skips_whole_and_partial_quads() {
        let bytes: Vec<u8> = (0..=255).collect();
        let text = encode(&bytes);
        let b = Base64::parse(&text).unwrap();
        for from in 0..=bytes.len() + 2 {
            let mut out = vec![7];
            b.decode_from(from, &mut out);
            assert_eq!(out[1..], bytes[from.min(bytes.len())..], "from {from}");
        }
    }

    #[test]
    fn quads_are_the_encoding_of_aligned_ranges() {
        let bytes: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(7)).collect();
        let text = encode(&bytes);
        let b = Base64::parse(&text).unwrap();
        for from in 0..=bytes.len() + 3 {
            for to in from..=bytes.len() + 3 {
                match b.quad_range(from, to) {
                    Some(chars) => assert_eq!(&text[chars], encode(&bytes[from..to])),
                    None => assert!(from % 3 != 0 || to % 3 != 0 || to > 99, "{from}..{to}"),
                }
            }
        }
    }

    /// Every ASCII byte at every kind of place: in a 64-character chunk of
    /// the body, in the body's remainder after the chunks, and in the last
    /// quad. Accepted exactly when it is one of the 64 alphabet characters;
    /// otherwise the error names the byte and its index in the text.
    #[test]
    fn each_byte_is_accepted_exactly_when_in_the_alphabet() {
        // (text length, index of the byte under test)
        let places = [(132, 70), (132, 3), (76, 66), (8, 1), (4, 2)];
        for byte in 0u8..=0x7f {
            let in_alphabet = ALPHABET.contains(&byte);
            for (len, at) in places {
                let mut text = vec![b'A'; len];
                text[at] = byte;
                let text = String::from_utf8(text).unwrap();
                let got = Base64::parse(&text).map(|b| b.decoded_len());
                let expected = if in_alphabet {
                    Ok(len / 4 * 3)
                } else if byte == b'=' {
                    Err(Base64Error::Padding(at))
                } else {
                    Err(Base64Error::Character { at, byte })
                };
                assert_eq!(got, expected, "byte {byte:#04x} at {at} of {len}");
            }
        }
    }

    /// Only the first fault counts, wherever the later ones are.
    #[test]
    fn the_first_fault_is_reported() {
        let mut text = vec![b'A'; 200];
        for (i, at) in [150, 90, 64, 63, 1].into_iter().enumerate() {
            text[at] = [b'-', b'_', b'.', b'=', b' '][i];
            let text = String::from_utf8(text.clone()).unwrap();
            let first = Base64::parse(&text).unwrap_err();
            let expected = match text.as_bytes()[at] {
                b'=' => Base64Error::Padding(at),
                byte => Base64Error::Character { at, byte },
            };
            assert_eq!(first, expected);
        }
    }

    #[test]
    fn padding_inside_the_last_quad_is_placed_in_the_whole_text() {
        assert_eq!(decode("AAAAZ=g="), Err(Base64Error::Padding(5)));
        assert_eq!(decode("AAAAAAAA=AAA"), Err(Base64Error::Padding(8)));
        assert_eq!(decode("AAAAA==="), Err(Base64Error::Padding(5)));
    }

    /// Zero extension of little-endian elements, for every pair of unsigned
    /// sizes: the value is kept, the new high bytes are zero.
    #[test]
    fn widen_keeps_values_for_every_pair_of_sizes() {
        let values: [u64; 4] = [0, 1, 0x7f, 0xdead_beef_0102_0304];
        for (narrow, wide) in [(1, 2), (1, 4), (1, 8), (2, 4), (2, 8), (4, 8)] {
            let mask = u64::MAX >> (64 - 8 * narrow);
            let raw: Vec<u8> = values
                .iter()
                .flat_map(|v| v.to_le_bytes()[..narrow].to_vec())
                .collect();
            let expected: Vec<u8> = values
                .iter()
                .flat_map(|v| (v & mask).to_le_bytes()[..wide].to_vec())
                .collect();
            let mut out = vec![0xaa];
            widen(&raw, narrow, wide, &mut out);
            assert_eq!(out[0], 0xaa);
            assert_eq!(out[1..], expected, "{narrow} -> {wide}");
        }
    }

    /// Every range of a short source, after 0, 1 or 2 pending bytes: the
    /// text is the plain encoding of the bytes, whether the encoder copied
    /// whole quads of the source or decoded them.
    #[test]
    fn push_base64_of_every_range_after_every_pending_count() {
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;

        for len in [20, 21] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            let text = STANDARD.encode(&bytes);
            let source = Base64::parse(&text).unwrap();
            for pending in 0..3 {
                for from in 0..=len {
                    for to in 0..=len + 2 {
                        let mut encoder = Encoder::new();
                        let head = vec![0xee; pending];
                        encoder.push_bytes(&head);
                        encoder.push_base64(&source, 0, from, to);
                        let mut expected = head.clone();
                        expected
                            .extend_from_slice(bytes.get(from..to.min(len)).unwrap_or_default());
                        assert_eq!(
                            encoder.finish().to_string(&[&text]),
                            STANDARD.encode(&expected),
                            "{pending} pending, [{from}, {to}) of {len}"
                        );
                    }
                }
            }
        }
    }

    /// A range longer than the encoder's decoding step is widened a step at
    /// a time; no element may be split at a step boundary.
    #[test]
    fn widening_more_than_one_step_keeps_every_element() {
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;

        let elements: Vec<u16> = (0..40_000u32).map(|i| (i * 7919 % 65_521) as u16).collect();
        let raw: Vec<u8> = elements.iter().flat_map(|e| e.to_le_bytes()).collect();
        assert!(raw.len() > STEP);
        let text = STANDARD.encode(&raw);
        let source = Base64::parse(&text).unwrap();
        for from in [0, 2, 6] {
            let mut encoder = Encoder::new();
            encoder.push_bytes(&[1]);
            encoder.push_widened(&source, 0, from, raw.len(), 2, 4);
            let mut expected = vec![1];
            for e in &elements[from / 2..] {
                expected.extend_from_slice(&u32::from(*e).to_le_bytes());
            }
            assert_eq!(
                encoder.finish().to_string(&[&text]),
                STANDARD.encode(&expected),
                "from {from}"
            );
        }
    }

    mod against_the_base64_crate {
        use super::*;
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;
        use proptest::prelude::*;

        /// Text made of base64 characters, padding and a few strays, so that
        /// near-valid texts are common.
        fn texty() -> impl Strategy<Value = String> {
            proptest::collection::vec(
                prop_oneof![
                    8 => proptest::sample::select(ALPHABET.to_vec()),
                    1 => Just(b'='),
                    1 => proptest::sample::select(b"-_ \n.".to_vec()),
                ],
                0..24,
            )
            .prop_map(|bytes| String::from_utf8(bytes).unwrap())
        }

        proptest! {
            #[test]
            fn encode_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
                prop_assert_eq!(encode(&bytes), STANDARD.encode(&bytes));
            }

            #[test]
            fn decode_range_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..200), a in 0usize..210, b in 0usize..210) {
                let text = STANDARD.encode(&bytes);
                let parsed = Base64::parse(&text).unwrap();
                let mut out = vec![9];
                parsed.decode_range(a, b, &mut out);
                let (lo, hi) = (a.min(bytes.len()), b.min(bytes.len()));
                prop_assert_eq!(&out[1..], if lo < hi { &bytes[lo..hi] } else { &[][..] });
            }

            /// The encoder's text for any mix of raw bytes, ranges of sources
            /// and widened ranges is the plain encoding of the bytes they stand
            /// for, whichever pieces it copied as text.
            #[test]
            fn encoder_agrees(pieces in proptest::collection::vec(
                (proptest::collection::vec(any::<u8>(), 0..40), 0usize..45, 0usize..45, 0u8..3), 0..6)) {
                let mut expected = Vec::new();
                let texts: Vec<String> = pieces.iter().map(|(b, ..)| STANDARD.encode(b)).collect();
                let mut encoder = Encoder::new();
                let sources: Vec<&str> = texts.iter().map(String::as_str).collect();
                for (id, ((bytes, a, b, kind), text)) in pieces.iter().zip(&texts).enumerate() {
                    let source = Base64::parse(text).unwrap();
                    let (lo, hi) = ((*a).min(bytes.len()), (*b).min(bytes.len()));
                    let range = if lo < hi { &bytes[lo..hi] } else { &[][..] };
                    match kind {
                        0 => {
                            encoder.push_bytes(range);
                            expected.extend_from_slice(range);
                        }
                        1 => {
                            encoder.push_base64(&source, id, *a, *b);
                            expected.extend_from_slice(range);
                        }
                        _ => {
                            // Widen single bytes to two (only whole elements).
                            encoder.push_widened(&source, id, *a, *b, 1, 2);
                            for &x in range {
                                expected.extend_from_slice(&[x, 0]);
                            }
                        }
                    }
                }
                let text = encoder.finish();
                prop_assert_eq!(text.len(), STANDARD.encode(&expected).len());
                prop_assert_eq!(text.to_string(&sources), STANDARD.encode(&expected));
            }

            #[test]
            fn decode_from_any_offset_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..200), from in 0usize..210) {
                let text = STANDARD.encode(&bytes);
                let parsed = Base64::parse(&text).unwrap();
                prop_assert_eq!(parsed.decoded_len(), bytes.len());
                let mut out = Vec::new();
                parsed.decode_from(from, &mut out);
                prop_assert_eq!(&out[..], &bytes[from.min(bytes.len())..]);
            }

            /// Exactly the texts the strict standard engine accepts are
            /// accepted, and they decode to the same bytes.
            #[test]
            fn acceptance_agrees(text in texty()) {
                let theirs = STANDARD.decode(&text);
                match Base64::parse(&text) {
                    Ok(ours) => {
                        let mut out = Vec::new();
                        ours.decode_from(0, &mut out);
                        prop_assert_eq!(Ok(out), theirs);
                    }
                    Err(err) => prop_assert!(theirs.is_err(), "we reject {:?} ({}), they accept", text, err),
                }
            }
        }
    }

    #[test]
    fn messages() {
        assert_eq!(
            Base64Error::Length(3).to_string(),
            "length 3 is not a multiple of 4"
        );
        assert_eq!(
            Base64Error::Character { at: 2, byte: b'-' }.to_string(),
            "character '-' at 2 is not in the standard alphabet"
        );
        assert_eq!(
            Base64Error::Character { at: 0, byte: b'\n' }.to_string(),
            "byte 0x0a at 0 is not in the standard alphabet"
        );
    }
}
