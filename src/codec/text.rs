//! Merged rows text: what the merge decides, before anything is written.
//!
//! The merged rows are the prefill's bytes followed by the decode's from the
//! cut, widened where the dtypes differ, as base64. Most of that text already
//! exists: wherever a source's bytes land at the same position modulo 3 as
//! they have in the source, their characters are a slice of the source's
//! text. So a [`Text`] is a list of [`Piece`]s: characters of a source,
//! copied as they are; runs of a source to decode, widen and encode where
//! they land; and the little text the [`Encoder`] wrote itself (an npy
//! header, the quads where the two sides meet). Nothing of the sources is
//! copied or decoded until an adapter writes the text where it belongs
//! ([`Text::edit`]): over the decode's own rows, where the decode's
//! characters that end the text stay where they are.

use std::borrow::Cow;
use std::ops::Range;

use super::base64::{encode_into, Base64};
use super::decoded::Decoded;
use super::widen::widen;
use crate::codec::splice::Edit;

/// Which validated base64 text a [`Piece`] reads: the merge's sources are
/// numbered (the prefill's rows 0, the decode choice's rows 1).
pub(crate) type SourceId = usize;

/// The [`Piece::Copy`] source of the prefill's rows text in a merged text.
pub(crate) const PREFILL: SourceId = 0;
/// The [`Piece::Copy`] source of the decode choice's own rows text.
pub(crate) const DECODE: SourceId = 1;

/// One run of merged text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Piece {
    /// Text the encoder wrote: this range of [`Text::own`].
    Own(Range<usize>),
    /// Characters of a source's validated text, copied as they are.
    Copy(SourceId, Range<usize>),
    /// Bytes `[from, to)` of a source, elements widened from `narrow` to
    /// `wide` bytes, encoded where they land (see [`Decoded`]: whole triples,
    /// starting on a triple boundary of the output).
    Decoded {
        source: SourceId,
        from: usize,
        to: usize,
        narrow: usize,
        wide: usize,
    },
}

/// Merged base64 text, as runs of the sources' texts and runs the encoder
/// wrote. The sources are named, not held: the adapter that writes the text
/// has them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Text {
    pieces: Vec<Piece>,
    own: Vec<u8>,
    len: usize,
    /// The decoded length of each source, as the merge validated it.
    source_lens: Vec<usize>,
}

impl Text {
    /// The text's length.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Source `id`'s text `text` as the merge validated it.
    fn source<'s>(&self, id: SourceId, text: &'s [u8]) -> Base64<'s> {
        Base64::parsed(text, self.source_lens.get(id).copied().unwrap_or(0))
    }

    /// The run a [`Piece::Decoded`] names, of its source's text `text`.
    fn decoded<'s>(&self, piece: &Piece, text: &'s [u8]) -> Option<Decoded<'s>> {
        match *piece {
            Piece::Decoded {
                source,
                from,
                to,
                narrow,
                wide,
            } => Some(Decoded {
                source: self.source(source, text),
                from,
                to,
                narrow,
                wide,
            }),
            _ => None,
        }
    }

    /// Appends the text to `out`, with `sources[id]` the text of source `id`
    /// (the one the merge validated).
    #[cfg(test)]
    pub(crate) fn write_to(&self, sources: &[&[u8]], out: &mut Vec<u8>) {
        out.reserve(self.len);
        for piece in &self.pieces {
            let text = |id: &SourceId| sources.get(*id).copied().unwrap_or_default();
            match piece {
                Piece::Own(range) => {
                    out.extend_from_slice(self.own.get(range.clone()).unwrap_or_default())
                }
                Piece::Copy(id, range) => {
                    out.extend_from_slice(text(id).get(range.clone()).unwrap_or_default())
                }
                Piece::Decoded { source, .. } => {
                    if let Some(run) = self.decoded(piece, text(source)) {
                        let at = out.len();
                        out.resize(at + run.len(), 0);
                        if let Some(dst) = out.get_mut(at..) {
                            run.write(dst);
                        }
                    }
                }
            }
        }
    }

    /// The text as a string, with `sources` as for [`Text::write_to`].
    #[cfg(test)]
    pub(crate) fn to_string(&self, sources: &[&str]) -> String {
        let sources: Vec<&[u8]> = sources.iter().map(|s| s.as_bytes()).collect();
        let mut out = Vec::new();
        self.write_to(&sources, &mut out);
        String::from_utf8(out).unwrap_or_default()
    }

    /// The edit of a buffer that holds the decode's rows string which gives
    /// it this text, with [`PREFILL`] the prefill's rows text `prefill` and
    /// [`DECODE`] the decode's, `decode`.
    ///
    /// `whole` is the range the string takes in the buffer, replaced by the
    /// text (between quotes when `quote`). When the buffer holds `decode`
    /// verbatim from `verbatim_at` on (no escapes), and the text ends with
    /// the decode's own characters to its end (its rows from the cut, at the
    /// same position modulo 3), those characters stay where they are: the
    /// edit replaces only what comes before them, and when the lengths
    /// match, nothing moves at all. Runs of the prefill are written from the
    /// prefill's text when it is borrowed. Runs of the decode, which the edit
    /// overwrites, are copied into the edit first, or (a widened run of a
    /// verbatim decode) read from the buffer as it was, which makes the edit
    /// write a new buffer (see [`crate::codec::splice`]).
    pub(crate) fn edit<'p>(
        &self,
        prefill: Option<&Cow<'p, [u8]>>,
        decode: &[u8],
        verbatim_at: Option<usize>,
        whole: Range<usize>,
        quote: bool,
    ) -> Edit<'p> {
        let kept = match (verbatim_at, self.pieces.last()) {
            (Some(at), Some(Piece::Copy(DECODE, tail))) if tail.end == decode.len() => {
                Some((at, tail.start))
            }
            _ => None,
        };
        let (mut edit, pieces, quote) = match kept {
            Some((at, kept_from)) => (
                Edit::empty(at..at + kept_from),
                self.pieces.split_last().map_or(&[][..], |(_, rest)| rest),
                false,
            ),
            None => (Edit::empty(whole), &self.pieces[..], quote),
        };
        if quote {
            edit.push_slice(b"\"");
        }
        for piece in pieces {
            match (piece, prefill) {
                (Piece::Own(range), _) => {
                    edit.push_own(self.own.get(range.clone()).unwrap_or_default())
                }
                (Piece::Copy(PREFILL, range), Some(&Cow::Borrowed(p))) => {
                    edit.push_slice(p.get(range.clone()).unwrap_or_default())
                }
                (Piece::Copy(PREFILL, range), Some(Cow::Owned(p))) => {
                    edit.push_own(p.get(range.clone()).unwrap_or_default())
                }
                // The plan read the prefill's rows: not reached.
                (Piece::Copy(PREFILL, _), None) => {}
                (Piece::Copy(_, range), _) => {
                    edit.push_own(decode.get(range.clone()).unwrap_or_default())
                }
                (Piece::Decoded { source, .. }, prefill) => match (*source, prefill) {
                    (PREFILL, Some(&Cow::Borrowed(p))) => {
                        if let Some(run) = self.decoded(piece, p) {
                            edit.push_decoded(run);
                        }
                    }
                    (PREFILL, Some(Cow::Owned(p))) => {
                        if let Some(run) = self.decoded(piece, p) {
                            edit.push_decoded_now(run);
                        }
                    }
                    (PREFILL, None) => {}
                    // The decode's own run: read from the buffer as it was
                    // when the edit is made, or rendered now.
                    _ => match (self.decoded(piece, decode), verbatim_at) {
                        (Some(run), Some(at)) => edit.push_rewritten(at..at + decode.len(), run),
                        (Some(run), None) => edit.push_decoded_now(run),
                        (None, _) => {}
                    },
                },
            }
        }
        if quote {
            edit.push_slice(b"\"");
        }
        edit
    }
}

/// Builds base64 text out of parts: raw bytes, and byte ranges of validated
/// base64 sources, possibly widened. Where a source's bytes land on the same
/// position modulo 3 in the output as in the source, the [`Text`] names the
/// source's characters; the rest it names as runs to decode and encode
/// ([`Piece::Decoded`]), but for the few bytes at their edges, which it
/// encodes at once.
pub(crate) struct Encoder {
    out: Vec<u8>,
    pieces: Vec<Piece>,
    /// Where the run of `out` not yet in `pieces` starts.
    mark: usize,
    len: usize,
    /// Bytes not yet encoded: fewer than 3.
    pending: [u8; 3],
    npending: usize,
    /// When the pending bytes are the last bytes of a source whose text
    /// ends with a padded quad (source id, the text's length): if nothing
    /// follows them, that quad is the text's own last quad, copied too.
    padded_end: Option<(SourceId, usize)>,
    source_lens: Vec<usize>,
}

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
            padded_end: None,
            source_lens: Vec::new(),
        }
    }

    /// Appends `bytes`.
    pub(crate) fn push_bytes(&mut self, mut bytes: &[u8]) {
        if !bytes.is_empty() {
            self.padded_end = None;
        }
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

    /// Notes source `id`'s decoded length, which the writers need.
    fn note(&mut self, source: &Base64<'_>, id: SourceId) {
        if self.source_lens.len() <= id {
            self.source_lens.resize(id + 1, 0);
        }
        if let Some(len) = self.source_lens.get_mut(id) {
            *len = source.decoded_len();
        }
    }

    /// Appends the bytes `[from, to)` of `source`, whose id is `id`.
    #[cfg(test)]
    pub(crate) fn push_base64(
        &mut self,
        source: &Base64<'_>,
        id: SourceId,
        from: usize,
        to: usize,
    ) {
        self.push_widened(source, id, from, to, 1, 1)
    }

    /// Appends the bytes `[from, to)` of `source` (whose id is `id`), each
    /// element zero-extended from `narrow` to `wide` bytes; a last partial
    /// element is dropped.
    pub(crate) fn push_widened(
        &mut self,
        source: &Base64<'_>,
        id: SourceId,
        from: usize,
        to: usize,
        narrow: usize,
        wide: usize,
    ) {
        let to = to.min(source.decoded_len());
        if from >= to {
            return;
        }
        self.note(source, id);
        if narrow == wide {
            if self.npending == from % 3 {
                return self.push_aligned(source, id, from, to);
            }
            // Realigned byte by byte.
            return self.push_run(source, id, from, to, 1, 1);
        }
        // Whole elements only.
        let to = from + (to - from) / narrow * narrow;
        self.push_run(source, id, from, to, narrow, wide);
    }

    /// [`Encoder::push_base64`] when the source's bytes land at their own
    /// position modulo 3: whole quads are named, the edges decoded.
    fn push_aligned(&mut self, source: &Base64<'_>, id: SourceId, from: usize, to: usize) {
        // Decode up to the next multiple of 3: then the output has no pending
        // bytes and the source is on a quad boundary.
        let aligned = (from.div_ceil(3) * 3).min(to);
        self.push_now(source, from, aligned, 1, 1);
        // Name the text of the whole quads from there: up to the last multiple
        // of 3 at or before `to` (which, as `to <= decoded_len`, is never past
        // the last unpadded quad), then decode the rest.
        let end = aligned + to.saturating_sub(aligned) / 3 * 3;
        match source.quad_range(aligned, end) {
            Some(chars) => {
                if !chars.is_empty() {
                    self.flush();
                    self.len += chars.len();
                    self.pieces.push(Piece::Copy(id, chars));
                }
                self.push_now(source, end, to, 1, 1);
                // The source's padded last quad, now pending: the decode's
                // rows text that ends a merged text ends with it.
                if to == source.decoded_len() && to > end {
                    self.padded_end = Some((id, end / 3 * 4 + 4));
                }
            }
            None => self.push_now(source, aligned, to, 1, 1),
        }
    }

    /// Appends whole elements `[from, to)` of `source`, widened: elements one
    /// at a time until the output is on a triple boundary (at most two, as no
    /// element size is a multiple of 3), then a [`Piece::Decoded`] of whole
    /// triples of elements, then the rest at once.
    fn push_run(
        &mut self,
        source: &Base64<'_>,
        id: SourceId,
        mut from: usize,
        to: usize,
        narrow: usize,
        wide: usize,
    ) {
        while self.npending != 0 && from + narrow <= to {
            self.push_now(source, from, from + narrow, narrow, wide);
            from += narrow;
        }
        let triples = (to - from) / narrow / 3 * 3;
        if triples > 0 && self.npending == 0 {
            self.flush();
            let run = Piece::Decoded {
                source: id,
                from,
                to: from + triples * narrow,
                narrow,
                wide,
            };
            self.len += triples * wide / 3 * 4;
            self.pieces.push(run);
            from += triples * narrow;
        }
        self.push_now(source, from, to, narrow, wide);
    }

    /// Decodes `[from, to)` of `source` (a few elements), widens and encodes
    /// them at once.
    fn push_now(
        &mut self,
        source: &Base64<'_>,
        from: usize,
        to: usize,
        narrow: usize,
        wide: usize,
    ) {
        if from >= to {
            return;
        }
        let mut raw = Vec::new();
        source.decode_range(from, to, &mut raw);
        if narrow == wide {
            self.push_bytes(&raw);
        } else {
            let mut widened = Vec::new();
            widen(&raw, narrow, wide, &mut widened);
            self.push_bytes(&widened);
        }
    }

    /// The text, with the last bytes padded.
    pub(crate) fn finish(mut self) -> Text {
        if let (Some((id, text_end)), true) = (self.padded_end, self.npending > 0) {
            // Nothing followed the source's last bytes: its padded quad is
            // the merged text's last quad as well.
            self.flush();
            let quad = text_end.saturating_sub(4)..text_end;
            match self.pieces.last_mut() {
                Some(Piece::Copy(last, chars)) if *last == id && chars.end == quad.start => {
                    chars.end = quad.end
                }
                _ => self.pieces.push(Piece::Copy(id, quad)),
            }
            self.len += 4;
            self.npending = 0;
        }
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
            source_lens: self.source_lens,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let source = Base64::parse(text.as_bytes()).unwrap();
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
                        let merged = encoder.finish();
                        assert_eq!(
                            merged.to_string(&[&text]),
                            STANDARD.encode(&expected),
                            "{pending} pending, [{from}, {to}) of {len}"
                        );
                        // The length it says is the length it writes.
                        assert_eq!(merged.len(), STANDARD.encode(&expected).len());
                    }
                }
            }
        }
    }

    /// One source's range, then another's that ends at that source's padded
    /// last quad: the text is the plain encoding of both, so the padded quad
    /// is copied from the second source, never taken as the first's copy
    /// extended (the guard in `finish`), whatever either range's alignment.
    #[test]
    fn a_padded_tail_after_another_sources_copy_is_the_tails_own_quad() {
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;

        for (a_len, b_len) in [(18, 19), (18, 20), (21, 22), (19, 23), (24, 20)] {
            let a: Vec<u8> = (0..a_len).map(|i| (i * 29 + 3) as u8).collect();
            let b: Vec<u8> = (0..b_len).map(|i| (i * 53 + 101) as u8).collect();
            let (a_text, b_text) = (STANDARD.encode(&a), STANDARD.encode(&b));
            let a_source = Base64::parse(a_text.as_bytes()).unwrap();
            let b_source = Base64::parse(b_text.as_bytes()).unwrap();
            for a_from in [0, 1, 3] {
                for b_from in 0..=b_len {
                    let mut encoder = Encoder::new();
                    encoder.push_base64(&a_source, 0, a_from, a_len);
                    encoder.push_base64(&b_source, 1, b_from, b_len);
                    let mut expected = a[a_from..].to_vec();
                    expected.extend_from_slice(&b[b_from..]);
                    let merged = encoder.finish();
                    assert_eq!(
                        merged.to_string(&[&a_text, &b_text]),
                        STANDARD.encode(&expected),
                        "a [{a_from}, {a_len}), b [{b_from}, {b_len})"
                    );
                    assert_eq!(merged.len(), STANDARD.encode(&expected).len());
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
        assert!(raw.len() > 3 * 3 * 8 * 1024);
        let text = STANDARD.encode(&raw);
        let source = Base64::parse(text.as_bytes()).unwrap();
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

    /// [`Text::edit`] of a buffer that holds the decode's rows string,
    /// applied, gives the text: for a prefill's run copied or widened (the
    /// prefill's text borrowed, or unescaped into an owned copy, as the
    /// bytes reader gives a rows text that held JSON escapes), and the
    /// decode's run from any place to any place, kept in place only when it
    /// runs to the end of the decode's text.
    #[test]
    fn an_edit_writes_the_text_whatever_it_ends_with() {
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;

        let prefill_bytes: Vec<u8> = (0..7u8).map(|i| i.wrapping_mul(53) | 0xc0).collect();
        let decode_bytes: Vec<u8> = (0..12u8).map(|i| i.wrapping_mul(29) ^ 0x5a).collect();
        let prefill_text = STANDARD.encode(&prefill_bytes);
        let decode_text = STANDARD.encode(&decode_bytes);
        let prefill = Base64::parse(prefill_text.as_bytes()).unwrap();
        let decode = Base64::parse(decode_text.as_bytes()).unwrap();
        let (before, after) = (&b"{\"data\": "[..], &b", \"x\": 1}"[..]);
        for wide in [1, 2] {
            for from in 0..=decode_bytes.len() {
                for to in from..=decode_bytes.len() {
                    let mut encoder = Encoder::new();
                    encoder.push_widened(&prefill, PREFILL, 0, 6, 1, wide);
                    encoder.push_base64(&decode, DECODE, from, to);
                    let text = encoder.finish();
                    let expected = text.to_string(&[&prefill_text, &decode_text]);
                    for owned in [false, true] {
                        let prefill_cow: Cow<'_, [u8]> = if owned {
                            Cow::Owned(prefill_text.as_bytes().to_vec())
                        } else {
                            Cow::Borrowed(prefill_text.as_bytes())
                        };
                        let mut buf =
                            [before, b"\"", decode_text.as_bytes(), b"\"", after].concat();
                        let whole = before.len()..before.len() + decode_text.len() + 2;
                        let edit = text.edit(
                            Some(&prefill_cow),
                            decode_text.as_bytes(),
                            Some(before.len() + 1),
                            whole,
                            true,
                        );
                        crate::codec::splice::apply(&mut buf, &[edit]);
                        let want = [before, b"\"", expected.as_bytes(), b"\"", after].concat();
                        assert_eq!(
                            String::from_utf8_lossy(&buf),
                            String::from_utf8_lossy(&want),
                            "widened to {wide}, decode [{from}, {to}), owned prefill {owned}"
                        );
                    }
                }
            }
        }
    }

    mod against_the_base64_crate {
        use super::*;
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;
        use proptest::prelude::*;

        proptest! {
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
                    let source = Base64::parse(text.as_bytes()).unwrap();
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

        }
    }
}
