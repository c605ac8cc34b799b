//! Edits of a byte buffer, made in one pass and in place.
//!
//! Both adapters end a merge the same way: a few ranges of the decode's text
//! get new text (a choice's payload, a compact object's numbers, the start of
//! a rows string), and everything else stays. [`apply`] makes sorted,
//! non-overlapping [`Edit`]s moving every unchanged run of bytes at most once
//! and allocating nothing when the length does not change. An edit's new text
//! is a list of [`Part`]s, so that the bulk of it (the prefill's rows text,
//! or the prefill's rows widened) is written straight into its place rather
//! than first into a buffer of its own.
//!
//! A part may also re-encode text of the buffer itself (the decode's rows,
//! widened for a wider prefill). Such text would be overwritten before it is
//! read, so those edits are made into a new buffer of the exact length,
//! written front to back from the old one: the only case that allocates the
//! buffer anew, and then once.

use std::ops::Range;

use crate::codec::decoded::Decoded;

/// Replace the bytes `range` of a buffer by the runs `parts`.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Edit<'p> {
    pub(crate) range: Range<usize>,
    /// Text written for this edit, which [`Part::Own`] ranges index.
    own: Vec<u8>,
    parts: Vec<Part<'p>>,
}

/// One run of an edit's new text.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part<'p> {
    Own(Range<usize>),
    /// Bytes that outlive the edit (the prefill's text, or a constant).
    Slice(&'p [u8]),
    /// A run of the prefill's rows, decoded and encoded where it lands.
    Decoded(Decoded<'p>),
    /// A run of the validated base64 text at `text` of the buffer being
    /// edited, decoded and encoded where it lands.
    Rewritten {
        text: Range<usize>,
        run: Decoded<'static>,
    },
}

impl<'p> Edit<'p> {
    /// Replaces `range` by `text`.
    pub(crate) fn new(range: Range<usize>, text: Vec<u8>) -> Edit<'p> {
        Edit {
            range,
            parts: vec![Part::Own(0..text.len())],
            own: text,
        }
    }

    /// Replaces `range` by nothing yet: the `push_` methods add the text.
    pub(crate) fn empty(range: Range<usize>) -> Edit<'p> {
        Edit {
            range,
            own: Vec::new(),
            parts: Vec::new(),
        }
    }

    /// Appends a copy of `bytes`.
    pub(crate) fn push_own(&mut self, bytes: &[u8]) {
        let at = self.own.len();
        self.own.extend_from_slice(bytes);
        self.parts.push(Part::Own(at..self.own.len()));
    }

    /// Appends `bytes`, written from where they are.
    pub(crate) fn push_slice(&mut self, bytes: &'p [u8]) {
        self.parts.push(Part::Slice(bytes));
    }

    /// Appends the text of `run`, rendered when the edit is made.
    pub(crate) fn push_decoded(&mut self, run: Decoded<'p>) {
        self.parts.push(Part::Decoded(run));
    }

    /// Appends `run`, whose source is the text at `text` of the buffer
    /// being edited: read from the buffer as it was, when the edit is made.
    pub(crate) fn push_rewritten(&mut self, text: Range<usize>, run: Decoded<'_>) {
        self.parts.push(Part::Rewritten {
            text,
            run: run.detached(),
        });
    }

    /// Whether the edit reads the buffer it edits.
    fn reads_buffer(&self) -> bool {
        self.parts
            .iter()
            .any(|part| matches!(part, Part::Rewritten { .. }))
    }

    /// Appends the text of `run`, rendered now (its source does not outlive
    /// the edit).
    pub(crate) fn push_decoded_now(&mut self, run: Decoded<'_>) {
        let at = self.own.len();
        self.own.resize(at + run.len(), 0);
        if let Some(out) = self.own.get_mut(at..) {
            run.write(out);
        }
        self.parts.push(Part::Own(at..self.own.len()));
    }

    /// Whether the replacement holds a `\n` or `\r`: searched in the
    /// copied parts, except those that lie within `clean`; the base64 the
    /// decoded parts render holds none.
    pub(crate) fn has_line_break(&self, clean: &[u8]) -> bool {
        let breaks = |bytes: &[u8]| memchr::memchr2(b'\n', b'\r', bytes).is_some();
        let within = |bytes: &[u8]| {
            let range = clean.as_ptr_range();
            let inner = bytes.as_ptr_range();
            range.start <= inner.start && inner.end <= range.end
        };
        self.parts.iter().any(|part| match part {
            Part::Own(range) => breaks(self.own.get(range.clone()).unwrap_or_default()),
            Part::Slice(bytes) => !within(bytes) && breaks(bytes),
            Part::Decoded(_) | Part::Rewritten { .. } => false,
        })
    }

    /// Appends the replacement to `out`; `buf` is the buffer as it was
    /// before any edit.
    fn extend_into(&self, out: &mut Vec<u8>, buf: &[u8]) {
        for part in &self.parts {
            match part {
                Part::Own(range) => {
                    out.extend_from_slice(self.own.get(range.clone()).unwrap_or_default())
                }
                Part::Slice(bytes) => out.extend_from_slice(bytes),
                Part::Decoded(_) | Part::Rewritten { .. } => {
                    let at = out.len();
                    out.resize(at + part.len(), 0);
                    if let Some(dst) = out.get_mut(at..) {
                        match part {
                            Part::Decoded(run) => run.write(dst),
                            Part::Rewritten { text, run } => {
                                run.on(buf.get(text.clone()).unwrap_or_default()).write(dst)
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    /// The length of what replaces the range.
    pub(crate) fn len(&self) -> usize {
        self.parts.iter().map(Part::len).sum()
    }

    /// Writes the replacement into `out`, which is [`Edit::len`] long;
    /// `buf` is the buffer as it was before any edit.
    fn write(&self, out: &mut [u8], buf: &[u8]) {
        let mut at = 0;
        for part in &self.parts {
            let len = part.len();
            let Some(dst) = out.get_mut(at..at + len) else {
                return;
            };
            match part {
                Part::Own(range) => {
                    if let Some(own) = self.own.get(range.clone()) {
                        dst.copy_from_slice(own);
                    }
                }
                Part::Slice(bytes) => dst.copy_from_slice(bytes),
                Part::Decoded(run) => run.write(dst),
                Part::Rewritten { text, run } => {
                    run.on(buf.get(text.clone()).unwrap_or_default()).write(dst)
                }
            }
            at += len;
        }
    }
}

impl Part<'_> {
    fn len(&self) -> usize {
        match self {
            Part::Own(range) => range.len(),
            Part::Slice(bytes) => bytes.len(),
            Part::Decoded(run) => run.len(),
            Part::Rewritten { run, .. } => run.len(),
        }
    }
}

/// Makes `edits` (sorted, not overlapping, within `buf`) in `buf`, moving
/// each unchanged run of bytes at most once and allocating nothing when the
/// length does not change.
pub(crate) fn apply(buf: &mut Vec<u8>, edits: &[Edit<'_>]) {
    if reads_buffer(edits) {
        return rewrite(buf, edits);
    }
    let old_len = buf.len();
    let new_len = new_len(old_len, edits);
    if new_len > old_len {
        // Grown once, to the exact length.
        buf.reserve_exact(new_len - old_len);
        buf.resize(new_len, 0);
    }
    apply_in(buf, old_len, edits);
    buf.truncate(new_len);
}

/// Whether any of `edits` reads the buffer it edits, so that they cannot
/// be made in place ([`apply_in`] refuses them).
pub(crate) fn reads_buffer(edits: &[Edit<'_>]) -> bool {
    edits.iter().any(Edit::reads_buffer)
}

/// Makes `edits` (sorted, not overlapping, within the first `old_len`
/// bytes, none [reading the buffer](reads_buffer)) in `buf`, whose first
/// `old_len` bytes are the text they were made for and which is at least
/// as long as both that text and the edited one: the edited text is then
/// `buf`'s first [`new_len`]`(old_len, edits)` bytes, and any bytes after
/// it are left over. Moves each unchanged run of bytes at most once and
/// allocates nothing. Returns `false`, having written nothing, when `buf`
/// is too short or an edit reads the buffer.
pub(crate) fn apply_in(buf: &mut [u8], old_len: usize, edits: &[Edit<'_>]) -> bool {
    let new_len = new_len(old_len, edits);
    if buf.len() < old_len.max(new_len) || reads_buffer(edits) {
        return false;
    }
    // The unchanged runs: before each edit, and after the last. A run moves
    // by the total change in length of the edits before it.
    let mut runs = Vec::with_capacity(edits.len() + 1);
    let mut from = 0;
    let mut shift: isize = 0;
    for edit in edits {
        runs.push((from..edit.range.start, shift));
        shift += edit.len() as isize - edit.range.len() as isize;
        from = edit.range.end;
    }
    runs.push((from..old_len, shift));
    // A run moving left can only land on bytes of runs before it, and one
    // moving right only on bytes of runs after it; and no run lands on a
    // run's bytes that move the other way (the order of the runs is kept).
    // So: left-movers first to last, then right-movers last to first.
    let moved = |run: &Range<usize>, shift: isize| (run.start as isize + shift) as usize;
    for (run, shift) in runs.iter().filter(|(_, s)| *s < 0) {
        buf.copy_within(run.clone(), moved(run, *shift));
    }
    for (run, shift) in runs.iter().rev().filter(|(_, s)| *s > 0) {
        buf.copy_within(run.clone(), moved(run, *shift));
    }
    // The edits' new text lands between the moved runs.
    let mut shift: isize = 0;
    for edit in edits {
        let at = (edit.range.start as isize + shift) as usize;
        if let Some(out) = buf.get_mut(at..at + edit.len()) {
            edit.write(out, &[]);
        }
        shift += edit.len() as isize - edit.range.len() as isize;
    }
    true
}

/// [`apply`] into a new buffer of the exact length, written front to back
/// from the old one, which the edits may read.
fn rewrite(buf: &mut Vec<u8>, edits: &[Edit<'_>]) {
    let mut out = vec![0; new_len(buf.len(), edits)];
    write_into(buf, edits, &mut out);
    *buf = out;
}

/// The length of a buffer of `len` bytes after `edits`.
pub(crate) fn new_len(len: usize, edits: &[Edit<'_>]) -> usize {
    edits.iter().fold(len, |len, edit| {
        (len + edit.len()).saturating_sub(edit.range.len())
    })
}

/// Writes `buf` with `edits` made into `out`, which is
/// [`new_len`]`(buf.len(), edits)` long, front to back; `buf` is unchanged.
pub(crate) fn write_into(buf: &[u8], edits: &[Edit<'_>], out: &mut [u8]) {
    fn copy(bytes: &[u8], out: &mut [u8], at: &mut usize) {
        if let Some(dst) = out.get_mut(*at..*at + bytes.len()) {
            dst.copy_from_slice(bytes);
        }
        *at += bytes.len();
    }
    let mut at = 0;
    let mut from = 0;
    for edit in edits {
        copy(
            buf.get(from..edit.range.start).unwrap_or_default(),
            out,
            &mut at,
        );
        let len = edit.len();
        if let Some(dst) = out.get_mut(at..at + len) {
            edit.write(dst, buf);
        }
        at += len;
        from = edit.range.end;
    }
    copy(buf.get(from..).unwrap_or_default(), out, &mut at);
}

/// Appends `buf` with `edits` made to `out` (reserved once, to fit),
/// front to back: what [`write_into`] writes, without a zeroed buffer.
pub(crate) fn extend_into(buf: &[u8], edits: &[Edit<'_>], out: &mut Vec<u8>) {
    out.reserve(new_len(buf.len(), edits));
    let mut from = 0;
    for edit in edits {
        out.extend_from_slice(buf.get(from..edit.range.start).unwrap_or_default());
        edit.extend_into(out, buf);
        from = edit.range.end;
    }
    out.extend_from_slice(buf.get(from..).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::base64::Base64;
    use proptest::prelude::*;

    /// The reference: a new buffer, written front to back.
    fn naive(buf: &[u8], edits: &[Edit<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut from = 0;
        for edit in edits {
            out.extend_from_slice(&buf[from..edit.range.start]);
            let mut text = vec![0; edit.len()];
            edit.write(&mut text, buf);
            out.extend_from_slice(&text);
            from = edit.range.end;
        }
        out.extend_from_slice(&buf[from..]);
        out
    }

    fn buf_and_edits() -> impl Strategy<Value = (Vec<u8>, Vec<Edit<'static>>)> {
        (0usize..64).prop_flat_map(|len| {
            let buf = proptest::collection::vec(any::<u8>(), len);
            let cuts = proptest::collection::vec(0..=len, 0..8);
            let texts = proptest::collection::vec(
                (
                    proptest::collection::vec(any::<u8>(), 0..12),
                    any::<bool>(),
                    any::<bool>(),
                ),
                8,
            );
            (buf, cuts, texts).prop_map(|(mut buf, mut cuts, texts)| {
                cuts.sort_unstable();
                // Base64 of the buffer itself ("ABCDEFGHI"), for edits that
                // re-encode it, when the buffer is long enough to hold it.
                const PLANTED: &[u8] = b"QUJDREVGR0hJ";
                let planted = buf.len() >= PLANTED.len();
                if planted {
                    buf[..PLANTED.len()].copy_from_slice(PLANTED);
                }
                let edits = cuts
                    .chunks(2)
                    .zip(texts)
                    .map(|(pair, (text, quoted, rewritten))| {
                        let mut edit = Edit::new(pair[0]..*pair.last().unwrap_or(&pair[0]), text);
                        if rewritten && planted {
                            // Its bytes 3..9, widened, read from the buffer
                            // as it was.
                            let source = Base64::parse(PLANTED).unwrap();
                            let run = Decoded {
                                source,
                                from: 3,
                                to: 9,
                                narrow: 1,
                                wide: 2,
                            };
                            edit.push_rewritten(0..PLANTED.len(), run);
                        }
                        if quoted {
                            edit.parts.insert(0, Part::Slice(b"\""));
                            edit.push_slice(b"'");
                            // "ABCDEFGHI": its bytes 3..9, and widened.
                            let source = Base64::parse(b"QUJDREVGR0hJ").unwrap();
                            edit.push_decoded(Decoded {
                                source,
                                from: 3,
                                to: 9,
                                narrow: 1,
                                wide: 1,
                            });
                            edit.push_decoded(Decoded {
                                source,
                                from: 0,
                                to: 3,
                                narrow: 1,
                                wide: 2,
                            });
                        }
                        edit
                    })
                    .collect();
                (buf, edits)
            })
        })
    }

    proptest! {
        #[test]
        fn apply_equals_writing_a_new_buffer((buf, edits) in buf_and_edits()) {
            let expected = naive(&buf, &edits);
            let mut got = buf.clone();
            apply(&mut got, &edits);
            prop_assert_eq!(&got, &expected);
            // In place in a longer buffer, junk after the text: the edited
            // text is its first bytes; in a buffer too short, nothing.
            let len = new_len(buf.len(), &edits);
            let room = buf.len().max(len);
            let mut long = buf.clone();
            long.resize(room + 3, 0xab);
            prop_assert_eq!(apply_in(&mut long, buf.len(), &edits), !reads_buffer(&edits));
            if !reads_buffer(&edits) {
                prop_assert_eq!(&long[..len], &expected[..]);
            }
            let mut short = buf.clone();
            short.resize(room, 0xab);
            if let Some(cut) = room.checked_sub(1) {
                let before = short[..cut].to_vec();
                prop_assert!(!apply_in(&mut short[..cut], buf.len(), &edits));
                prop_assert_eq!(&short[..cut], &before[..]);
            }
            // And into a buffer of the caller's, the input untouched.
            let mut out = vec![0xee; new_len(buf.len(), &edits)];
            write_into(&buf, &edits, &mut out);
            prop_assert_eq!(&out, &expected);
            // And appended to a buffer that holds bytes already.
            let mut appended = b"head".to_vec();
            extend_into(&buf, &edits, &mut appended);
            prop_assert_eq!(&appended[..4], b"head");
            prop_assert_eq!(&appended[4..], &expected[..]);
        }

        /// `has_line_break` is whether an edit's new text, as written,
        /// holds a `\n` or `\r`; text within `clean` is not searched.
        #[test]
        fn a_line_break_is_found_in_the_new_text((buf, edits) in buf_and_edits()) {
            for edit in &edits {
                let mut text = vec![0; edit.len()];
                edit.write(&mut text, &buf);
                let breaks = text.iter().any(|b| *b == b'\n' || *b == b'\r');
                prop_assert_eq!(edit.has_line_break(&[]), breaks);
            }
        }
    }

    /// A part that re-encodes the buffer's own text reads it as it was,
    /// in every writer: "DEFGHI" of the buffer's base64, widened to two
    /// bytes each, is base64 of 44 00 45 00 .. 49 00 (by hand).
    #[test]
    fn a_rewritten_part_reads_the_buffer_as_it_was() {
        let buf = b"QUJDREVGR0hJ|tail".to_vec();
        let source = Base64::parse(&buf[..12]).unwrap();
        let run = Decoded {
            source,
            from: 3,
            to: 9,
            narrow: 1,
            wide: 2,
        };
        // Replaces the base64 itself, so it must be read before it is written.
        let mut edit = Edit::empty(0..12);
        edit.push_rewritten(0..12, run);
        let edits = [edit];
        let expected = b"RABFAEYARwBIAEkA|tail";
        let mut applied = buf.clone();
        apply(&mut applied, &edits);
        assert_eq!(applied, expected);
        let mut written = vec![0; new_len(buf.len(), &edits)];
        write_into(&buf, &edits, &mut written);
        assert_eq!(written, expected);
        let mut appended = Vec::new();
        extend_into(&buf, &edits, &mut appended);
        assert_eq!(appended, expected);
        // In place it cannot be made: refused, nothing written.
        let mut room = buf.clone();
        room.resize(64, 0);
        assert!(!apply_in(&mut room, buf.len(), &edits));
        assert_eq!(&room[..buf.len()], &buf[..]);
    }

    #[test]
    fn text_within_the_clean_text_is_not_searched() {
        let clean = b"a\nb".to_vec();
        let mut edit = Edit::empty(0..1);
        edit.push_slice(&clean[1..]);
        assert!(edit.has_line_break(&[]));
        assert!(!edit.has_line_break(&clean));
        // A copy of the same bytes is searched.
        edit.push_own(b"\r");
        assert!(edit.has_line_break(&clean));
    }

    #[test]
    fn same_length_edits_reuse_the_buffer() {
        let mut buf = b"{\"a\":\"xyz\",\"b\":1}".to_vec();
        let before = buf.as_ptr();
        let mut edit = Edit::new(5..10, b"abc".to_vec());
        edit.parts.insert(0, Part::Slice(b"\""));
        edit.parts.push(Part::Slice(b"\""));
        apply(&mut buf, &[edit]);
        assert_eq!(buf, b"{\"a\":\"abc\",\"b\":1}");
        assert_eq!(buf.as_ptr(), before);
    }

    /// A buffer that grows is grown once, to the exact length: no capacity
    /// beyond what the edits need (a mutant that reserves more survived a
    /// run of the unit tests).
    #[test]
    fn a_growing_edit_grows_the_buffer_to_the_exact_length() {
        let mut buf = b"[1,2,3]".to_vec();
        buf.shrink_to_fit();
        let edit = Edit::new(1..2, b"100000".to_vec());
        apply(&mut buf, &[edit]);
        assert_eq!(buf, b"[100000,2,3]");
        assert_eq!(buf.capacity(), buf.len());
    }
}
