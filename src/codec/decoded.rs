//! The renderer of decoded runs: bytes of a validated base64 text, widened
//! or not, encoded where they land in the merged text, a bounded step at a
//! time.

use super::base64::{encode_slice, Base64};
use super::widen::widen_into;

/// Bytes `[from, to)` of a validated text, each element zero-extended from
/// `narrow` to `wide` bytes (`narrow == wide`: copied as they are), as base64
/// text with no padding: `(to - from) / narrow` elements, a multiple of 3,
/// so that the bytes are whole triples wherever they land on a triple
/// boundary. Written where it belongs ([`Decoded::write`]), a step at a
/// time: decoded and encoded in bulk, through two bounded scratch buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Decoded<'a> {
    pub(crate) source: Base64<'a>,
    pub(crate) from: usize,
    pub(crate) to: usize,
    pub(crate) narrow: usize,
    pub(crate) wide: usize,
}

/// Elements decoded, widened and encoded at a time: a multiple of 3, so that
/// every step's bytes are whole triples. 24,576 elements: at most 192 KiB of
/// widened bytes, while the steps stay long enough for the bulk codec.
const STEP_ELEMENTS: usize = 3 * 8 * 1024;

impl Decoded<'_> {
    /// The same run with its source's text left out (its decoded length
    /// kept): for a source that is not at hand until the run is written.
    pub(crate) fn detached(self) -> Decoded<'static> {
        Decoded {
            source: Base64::parsed(&[], self.source.decoded_len()),
            from: self.from,
            to: self.to,
            narrow: self.narrow,
            wide: self.wide,
        }
    }

    /// The same run, reading its source's text from `text` (the text it
    /// was validated as).
    pub(crate) fn on(self, text: &[u8]) -> Decoded<'_> {
        Decoded {
            source: Base64::parsed(text, self.source.decoded_len()),
            ..self
        }
    }

    /// The number of elements.
    fn elements(&self) -> usize {
        self.to.saturating_sub(self.from) / self.narrow.max(1)
    }

    /// The length of the text.
    pub(crate) fn len(&self) -> usize {
        self.elements() * self.wide / 3 * 4
    }

    /// Writes the text into `out`, which is [`Decoded::len`] long.
    pub(crate) fn write(&self, out: &mut [u8]) {
        let (narrow, wide) = (self.narrow.max(1), self.wide);
        let mut raw = vec![0; STEP_ELEMENTS.min(self.elements()) * narrow];
        let mut widened = vec![
            0;
            if narrow == wide {
                0
            } else {
                raw.len() / narrow * wide
            }
        ];
        let mut at = self.from;
        let mut chars = out.chunks_mut(STEP_ELEMENTS * wide / 3 * 4);
        while at < self.to {
            let n = (self.to - at).min(raw.len());
            let (Some(raw), Some(dst)) = (raw.get_mut(..n), chars.next()) else {
                return;
            };
            self.source.decode_range_into(at, raw);
            if narrow == wide {
                encode_slice(raw, dst);
            } else if let Some(widened) = widened.get_mut(..n / narrow * wide) {
                widen_into(raw, narrow, wide, widened);
                encode_slice(widened, dst);
            }
            at += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::widen::widen;

    /// Widening across several steps of the renderer, for every pair of
    /// sizes: the text is the plain encoding of the widened bytes.
    #[test]
    fn decoded_runs_span_many_steps() {
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;

        for (narrow, wide) in [(1, 1), (1, 2), (1, 4), (2, 2), (2, 8), (4, 8)] {
            let elements = 2 * STEP_ELEMENTS + 3 * 7;
            let raw: Vec<u8> = (0..elements * narrow + 5)
                .map(|i| (i * 131 + 7) as u8)
                .collect();
            let text = STANDARD.encode(&raw);
            let source = Base64::parse(text.as_bytes()).unwrap();
            for from in [0, narrow, 5 / narrow * narrow] {
                let to = from + (elements - 3) * narrow;
                let run = Decoded {
                    source,
                    from,
                    to,
                    narrow,
                    wide,
                };
                let mut out = vec![b'!'; run.len()];
                run.write(&mut out);
                let mut expected = Vec::new();
                if narrow == wide {
                    expected.extend_from_slice(&raw[from..to]);
                } else {
                    widen(&raw[from..to], narrow, wide, &mut expected);
                }
                assert_eq!(
                    out,
                    STANDARD.encode(&expected).into_bytes(),
                    "{narrow}->{wide} from {from}"
                );
            }
        }
    }

    mod against_the_base64_crate {
        use super::*;
        use ::base64::engine::general_purpose::STANDARD;
        use ::base64::Engine as _;
        use proptest::prelude::*;

        proptest! {
        /// Any whole-triple run of any source, widened or not, renders
        /// as the plain encoding of its bytes.
        #[test]
        fn decoded_agrees(bytes in proptest::collection::vec(any::<u8>(), 0..300), from in 0usize..40, triples in 0usize..30, sizes in 0usize..4) {
            let (narrow, wide) = [(1, 1), (1, 2), (2, 4), (1, 8)][sizes];
            let from = from / narrow * narrow;
            let to = (from + triples * 3 * narrow).min(bytes.len() / (3 * narrow) * (3 * narrow));
            prop_assume!(from <= to && (to - from) % (3 * narrow) == 0);
            let text = STANDARD.encode(&bytes);
            let source = Base64::parse(text.as_bytes()).unwrap();
            let run = Decoded { source, from, to, narrow, wide };
            let mut out = vec![0; run.len()];
            run.write(&mut out);
            let mut expected = Vec::new();
            if narrow == wide {
                expected.extend_from_slice(&bytes[from..to]);
            } else {
                widen(&bytes[from..to], narrow, wide, &mut expected);
            }
            prop_assert_eq!(out, STANDARD.encode(&expected).into_bytes());
        }
        }
    }
}
