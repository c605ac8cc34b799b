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
//! multiples of 3 is a slice of the validated text ([`Base64::quad_range`]);
//! the merge copies such slices and decodes only the rest.
//!
//! What lives here is the crate's own part: the strict check, which names the
//! first fault, and the arithmetic of quads and ragged edges. The bulk work of
//! decoding whole quads and encoding whole triples goes to `base64-simd`,
//! measured at 4.6x the `base64` crate's encoder on this project's machine
//! (docs/PERFORMANCE.md). The check stays hand-written: it runs at the speed
//! of memory already (measured level with `base64-simd`'s own `check`), and
//! it must say where the fault is. The bytes reader counts the alphabet while
//! it reads a string, so a text read from bytes is not even scanned twice
//! ([`Base64::parse_counted`]).

use std::ops::Range;

use base64_simd::{Out, STANDARD};

use super::error::Base64Error;

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
    text: &'a [u8],
    len: usize,
}

impl<'a> Base64<'a> {
    /// Checks that `text` is canonical standard base64 with padding.
    #[cfg(test)]
    pub(crate) fn parse(text: &'a [u8]) -> Result<Base64<'a>, Base64Error> {
        Base64::parse_counted(text, None)
    }

    /// [`Base64::parse`], told how many leading bytes of `text` are alphabet
    /// characters when the reader of the text counted them on its way
    /// (`None`: not counted). Only the rest is looked at again.
    pub(crate) fn parse_counted(
        text: &'a [u8],
        alphabet_prefix: Option<usize>,
    ) -> Result<Base64<'a>, Base64Error> {
        if text.len() % 4 != 0 {
            return Err(Base64Error::Length(text.len()));
        }
        let (body, last) = match text.len().checked_sub(4) {
            None => return Ok(Base64 { text, len: 0 }),
            Some(at) => text.split_at(at),
        };
        let fault = match alphabet_prefix {
            Some(prefix) if prefix >= body.len() => None,
            Some(prefix) => Some(prefix),
            None => first_invalid(body),
        };
        if let Some(at) = fault {
            return Err(invalid(text, at));
        }
        let tail = decode_last(last, body.len())?;
        Ok(Base64 {
            text,
            len: body.len() / 4 * 3 + tail,
        })
    }

    /// Text that [`Base64::parse`] already accepted, with the length it
    /// found, seen again (the caller holds the text elsewhere).
    pub(crate) fn parsed(text: &'a [u8], len: usize) -> Base64<'a> {
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
        let start = out.len();
        out.resize(start + (to - from), 0);
        if let Some(dst) = out.get_mut(start..) {
            self.decode_range_into(from, dst);
        }
    }

    /// Writes the decoded bytes `[from, from + out.len())` into `out`; the
    /// range lies within the decoded length (the caller's arithmetic).
    pub(crate) fn decode_range_into(&self, from: usize, out: &mut [u8]) {
        let to = from + out.len();
        if from >= to || to > self.len {
            return;
        }
        // Whole quads [first, last) hold bytes [3 first, 3 last).
        let first = from / 3;
        let last = to.div_ceil(3);
        let skip = from - first * 3;
        let keep_last = to - (last - 1) * 3; // bytes kept of the last quad, 1..=3
        let quads = self.text.get(first * 4..last * 4).unwrap_or_default();
        let Some((body, tail)) = quads.split_last_chunk::<4>() else {
            return;
        };
        if body.is_empty() {
            let bytes = decode_quad(tail);
            out.copy_from_slice(bytes.get(skip..keep_last).unwrap_or_default());
            return;
        }
        let (head, body) = body.split_at(4);
        let head = decode_quad(head);
        let head = head.get(skip..).unwrap_or_default();
        let (out_head, rest) = out.split_at_mut(head.len());
        out_head.copy_from_slice(head);
        let (out_body, out_tail) = rest.split_at_mut(body.len() / 4 * 3);
        // The body has no padding (only the text's last quad may), and it
        // was validated: whole quads, which `base64-simd` decodes in bulk.
        let _ = STANDARD.decode(body, Out::from_slice(out_body));
        let tail = decode_quad(tail);
        out_tail.copy_from_slice(tail.get(..keep_last).unwrap_or_default());
    }
}

/// Whether `c` is in the standard alphabet, without a table, so that the
/// compiler can check many characters at once: three ranges, as setting bit
/// 5 folds `A-Z` onto `a-z`, and `/` comes just before `0-9`.
#[inline(always)]
pub(crate) fn in_alphabet(c: u8) -> bool {
    ((c | 0x20).wrapping_sub(b'a') < 26) | (c.wrapping_sub(b'/') < 11) | (c == b'+')
}

/// The length of the longest prefix of `text` in the alphabet. Checks 64
/// characters at a time without branching (which vectorizes), and looks for
/// the exact place only in a chunk that fails.
pub(crate) fn alphabet_run(text: &[u8]) -> usize {
    const CHUNK: usize = 64;
    let mut done = 0;
    for chunk in text.chunks_exact(CHUNK) {
        if !chunk.iter().fold(true, |ok, &c| ok & in_alphabet(c)) {
            break;
        }
        done += CHUNK;
    }
    let rest = text.get(done..).unwrap_or_default();
    done + rest
        .iter()
        .position(|&c| !in_alphabet(c))
        .unwrap_or(rest.len())
}

/// The index of the first character outside the alphabet.
fn first_invalid(text: &[u8]) -> Option<usize> {
    Some(alphabet_run(text)).filter(|&at| at < text.len())
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
#[cfg(any(test, feature = "verify"))]
pub(crate) fn encode(bytes: &[u8]) -> String {
    STANDARD.encode_to_string(bytes)
}

/// The length of the base64 text of `n` bytes.
pub(crate) fn encoded_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// Appends the base64 text of `bytes` to `out`.
pub(crate) fn encode_into(bytes: &[u8], out: &mut Vec<u8>) {
    let start = out.len();
    out.resize(start + encoded_len(bytes.len()), 0);
    if let Some(dst) = out.get_mut(start..) {
        encode_slice(bytes, dst);
    }
}

/// Writes the base64 text of `bytes` into `out`, which is exactly
/// [`encoded_len`] long (nothing is written otherwise).
pub(crate) fn encode_slice(bytes: &[u8], out: &mut [u8]) {
    if out.len() == encoded_len(bytes.len()) {
        let _ = STANDARD.encode(bytes, Out::from_slice(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(text: &str) -> Result<Vec<u8>, Base64Error> {
        let b = Base64::parse(text.as_bytes())?;
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
        let b = Base64::parse(text.as_bytes()).unwrap();
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
        let b = Base64::parse(text.as_bytes()).unwrap();
        for from in 0..=bytes.len() + 3 {
            for to in from..=bytes.len() + 3 {
                match b.quad_range(from, to) {
                    Some(chars) => assert_eq!(&text[chars], encode(&bytes[from..to])),
                    None => assert!(from % 3 != 0 || to % 3 != 0 || to > 99, "{from}..{to}"),
                }
            }
        }
    }

    /// Every byte at every kind of place: in a 64-character chunk of
    /// the body, in the body's remainder after the chunks, and in the last
    /// quad. Accepted exactly when it is one of the 64 alphabet characters;
    /// otherwise the error names the byte and its index in the text.
    #[test]
    fn each_byte_is_accepted_exactly_when_in_the_alphabet() {
        // (text length, index of the byte under test)
        let places = [(132, 70), (132, 3), (76, 66), (8, 1), (4, 2)];
        for byte in 0u8..=0xff {
            let in_alphabet = ALPHABET.contains(&byte);
            for (len, at) in places {
                let mut text = vec![b'A'; len];
                text[at] = byte;
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
            let first = Base64::parse(text.as_bytes()).unwrap_err();
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

    /// A text whose alphabet prefix the reader counted is judged as one
    /// whose prefix was not counted: every count a reader can give (the true
    /// one) over texts with a fault at each place.
    #[test]
    fn counted_prefix_gives_the_same_verdict() {
        let good = encode(&(0..40u8).collect::<Vec<_>>());
        for at in 0..good.len() {
            for stray in [b'-', b'=', b' ', b'A'] {
                let mut text = good.clone().into_bytes();
                text[at] = stray;
                let prefix = text
                    .iter()
                    .position(|&c| !in_alphabet(c))
                    .unwrap_or(text.len());
                assert_eq!(
                    Base64::parse_counted(&text, Some(prefix)),
                    Base64::parse(&text),
                    "{stray} at {at}"
                );
            }
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
                let parsed = Base64::parse(text.as_bytes()).unwrap();
                let mut out = vec![9];
                parsed.decode_range(a, b, &mut out);
                let (lo, hi) = (a.min(bytes.len()), b.min(bytes.len()));
                prop_assert_eq!(&out[1..], if lo < hi { &bytes[lo..hi] } else { &[][..] });
            }

            #[test]
            fn decode_from_any_offset_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..200), from in 0usize..210) {
                let text = STANDARD.encode(&bytes);
                let parsed = Base64::parse(text.as_bytes()).unwrap();
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
                match Base64::parse(text.as_bytes()) {
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
