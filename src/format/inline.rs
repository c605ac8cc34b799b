//! Inline rows: rows carried in the response itself, at a holder and a
//! key, one generic format ([`InlineAt`]) for every convention that puts
//! them somewhere ([`InlinePlace`]): vLLM's and prime-rl's
//! `choices[i].routed_experts` (`vllm.rs`), Dynamo's `nvext.routed_experts`
//! (`nvext.rs`).
//!
//! Two forms are in use:
//!
//! - **compact**: an object `{"data": <base64 of the raw little-endian rows>,
//!   "shape": [seq, layers, topk], "start": <u64>, "dtype": "uint8" | ...}`,
//!   covering positions `[start, start + seq)`. Without `dtype` it is `uint8`.
//! - **npy**: a string, the base64 of a NumPy `.npy` file of shape
//!   `(seq, layers, topk)`, covering `[0, seq)`, or for rows a choice holds,
//!   placed from its end by the response's token counts when it has them
//!   (vLLM 0.32, `end_anchored.rs`).
//!
//! Either way an inline value is one [`Segment`] held in memory: `pos = start`,
//! `rows = seq`, `offset = 0`, row shape `[layers, topk]`. The merge is the
//! algebra's: `cut = prefill.end()`, and the decode's rows are clipped from the
//! cut. What is particular to inline rows is only how the bytes travel: the
//! merged rows are the prefill's bytes followed by the decode's from byte
//! `clip.offset()` on, widened where the dtypes differ. The rows stay base64
//! text: the merged text is copied from the inputs' text wherever the bytes
//! keep their position modulo 3, and only the rest is decoded and encoded
//! (see `text`). The adapters write that text over the decode's own rows
//! text, in place where the lengths allow (`Text::edit`).
//!
//! Where the rows sit fixes the rest: rows a choice holds (the choice, or an
//! object of it) are planned per choice, and a `.npy` there is placed by
//! the counts; rows the response holds (an object of it) are planned once
//! per response, one set for the response's first choice, and a `.npy`
//! there is placed from 0.

use std::borrow::Cow;
use std::marker::PhantomData;

use crate::algebra::{Dtype, Segment};
use crate::codec::base64::Base64;
use crate::codec::text::{Encoder, Text, DECODE, PREFILL};
use crate::codec::{npy, Form, NpyError};
use crate::error::{Error, ErrorDetail, Location, Side};
use crate::response::fields::ROUTED_EXPERTS;
use crate::response::json;
use crate::response::paths::prefill_choice;
use crate::response::view::{describe_view, Kind, View};

use super::end_anchored::{self as anchor, Counts};
use super::interface::{Format, Level, Spec};
use super::places::{place, Holder, Holds, Place, RowsKind};
use crate::response::patch::{Patch, Path, Scalar};

/// Where one convention's inline rows sit: the object that holds them and
/// their key. A convention is this, and its row [`InlineAt`] of the table.
pub(crate) trait InlinePlace {
    /// What holds the rows.
    const HOLDER: Holder;
    /// Their key.
    const KEY: &'static str;
}

/// The inline rows at `P`'s place, as a [`Format`].
pub(crate) struct InlineAt<P>(PhantomData<P>);

impl<P: InlinePlace> InlineAt<P> {
    /// The place of the rows.
    const ROWS: Place = place(P::HOLDER, P::KEY, Holds::Rows(RowsKind::Inline));

    /// The rows of `response`'s `choice` (or of the response, for rows it
    /// holds), when they are there and not null.
    fn rows_in<'a, V: View<'a>>(response: V, choice: Option<V>) -> Option<V> {
        Self::ROWS
            .value_in(response, choice)
            .filter(|value| !value.is_null())
    }

    /// Validates the decode's rows of choice `i` (`choice`, `None` for rows
    /// the response holds) and plans their merge with the prefill's.
    fn plan<'p, 'd, S: AsRef<str>, V: View<'p>, D: View<'d>>(
        prefill: &PrefillRows<'p, V>,
        spec: &Spec<'_, S>,
        decode: D,
        choice: Option<D>,
        i: usize,
        out: &mut Vec<Patch<V>>,
    ) -> Result<(), Error> {
        let at = || Self::ROWS.at(Side::Decode, i);
        let value = Self::rows_in(decode, choice)
            .ok_or_else(|| ErrorDetail::MissingDecodeRows { at: at() })?;
        let given = spec
            .decode_counts
            .filter(|_| Self::ROWS.per_choice())
            .and_then(|counts| counts.get(i));
        let counts = || match given {
            Some(&counts) => Ok(Some(counts)),
            None => counts(&Self::ROWS, decode, choice, Side::Decode, i),
        };
        let rows = Parsed::parse(value, counts, at)?;
        merge(&prefill.rows, &rows, at)?.write(Self::ROWS.path(i), prefill.text, out);
        Ok(())
    }
}

impl<P: InlinePlace> Format for InlineAt<P> {
    const KIND: RowsKind = RowsKind::Inline;
    const LEVEL: Level = if Self::ROWS.per_choice() {
        Level::Choice
    } else {
        Level::Response
    };
    const PLACES: &'static [Place] = if Self::ROWS.per_choice() {
        &[Self::ROWS, anchor::PLACES[0], anchor::PLACES[1]]
    } else {
        &[Self::ROWS]
    };
    type Prefill<'p, V: View<'p>> = PrefillRows<'p, V>;

    fn read<'p, S: AsRef<str>, V: View<'p>>(
        _: &Spec<'_, S>,
        prefill: V,
    ) -> Result<Option<PrefillRows<'p, V>>, Error> {
        let choice = prefill_choice(prefill);
        let Some(value) = Self::rows_in(prefill, choice) else {
            return Ok(None);
        };
        let counts = || counts(&Self::ROWS, prefill, choice, Side::Prefill, 0);
        let rows = Parsed::parse(value, counts, || Self::ROWS.at(Side::Prefill, 0))?;
        // The parse found the text there.
        let text = match value.kind() {
            Kind::Object => value.get("data").unwrap_or(value),
            _ => value,
        };
        Ok(Some(PrefillRows { rows, text }))
    }

    /// The first decode rows, as an error, when the prefill has none: their
    /// own validation error, or else [`ErrorDetail::MissingPrefillField`].
    fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(_: &Spec<'_, S>, decode: D) -> Option<Error> {
        let orphan = |value: D, i: usize| {
            let at = || Self::ROWS.at(Side::Decode, i);
            // Placed from 0: an orphan's positions are never used.
            match Parsed::parse(value, || Ok(None), at) {
                Err(err) => err,
                Ok(_) => ErrorDetail::MissingPrefillField {
                    at: at(),
                    field: P::KEY.to_owned(),
                }
                .into(),
            }
        };
        if !Self::ROWS.per_choice() {
            return Some(orphan(Self::rows_in(decode, None)?, 0));
        }
        decode
            .get("choices")?
            .elements()?
            .enumerate()
            .find_map(|(i, choice)| Some(orphan(Self::rows_in(decode, Some(choice))?, i)))
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(_: &[S], prefill: V) -> bool {
        Self::rows_in(prefill, prefill_choice(prefill)).is_some()
    }

    fn plan_choice<'p, 'd, S: AsRef<str>, V: View<'p>, D: View<'d>>(
        prefill: &mut PrefillRows<'p, V>,
        spec: &Spec<'_, S>,
        decode: D,
        choice: D,
        i: usize,
        out: &mut Vec<Patch<V>>,
    ) -> Result<(), Error> {
        if Self::LEVEL != Level::Choice {
            return Ok(());
        }
        Self::plan(prefill, spec, decode, Some(choice), i, out)
    }

    fn plan_response<'p, 'd, S: AsRef<str>, V: View<'p>, D: View<'d>>(
        prefill: &mut PrefillRows<'p, V>,
        spec: &Spec<'_, S>,
        decode: D,
        out: &mut Vec<Patch<V>>,
    ) -> Result<(), Error> {
        if Self::LEVEL != Level::Response {
            return Ok(());
        }
        Self::plan(prefill, spec, decode, None, 0, out)
    }
}

/// The counts of choice `i` (`choice`) of `response` on `side` that place
/// a `.npy` at `place`, for rows a choice holds (`None` without them, and
/// for rows the response holds).
fn counts<'a, V: View<'a>>(
    place: &Place,
    response: V,
    choice: Option<V>,
    side: Side,
    i: usize,
) -> Result<Option<Counts>, Error> {
    match choice {
        Some(choice) if place.per_choice() => Counts::read(response, choice, side, i),
        _ => Ok(None),
    }
}

/// The prefill's inline rows, validated, and the string that holds their
/// text (what the merged texts call [`PREFILL`]).
pub(crate) struct PrefillRows<'p, V> {
    rows: Parsed<'p>,
    text: V,
}

/// Reads the inline rows `value` at `place` of choice `i` of `response`
/// (the response read on its own, [`Side::Response`]; rows the response
/// holds are its first choice's): their positions and dtype (as an
/// in-memory segment at offset 0, a `.npy` a choice holds placed by the
/// response's counts when it has them) and their bytes, in position order.
/// Errors name the place.
#[cfg(feature = "verify")]
pub(crate) fn read_rows(
    response: &serde_json::Value,
    i: usize,
    place: &Place,
    value: &serde_json::Value,
) -> Result<(Form, Segment<()>, Vec<u8>), Error> {
    let side = Side::Response;
    let choice = response.get("choices").and_then(|c| c.get(i));
    let counts = || counts(place, response, choice, side, i);
    let rows = Parsed::parse(value, counts, || place.at(side, i))?;
    let mut bytes = Vec::new();
    let text = rows.base64();
    text.decode_range(rows.data, text.decoded_len(), &mut bytes);
    Ok((rows.form, rows.segment, bytes))
}

/// The standard base64 text of `bytes`.
#[cfg(feature = "verify")]
pub(crate) fn encode_base64(bytes: &[u8]) -> String {
    crate::codec::base64::encode(bytes)
}

/// The version 1.0 `.npy` file of a C-order array of `dtype` and `shape`
/// holding `data`.
#[cfg(feature = "verify")]
pub(crate) fn npy_file(dtype: Dtype, shape: &[u64], data: &[u8]) -> Result<Vec<u8>, NpyError> {
    let mut file = npy::header(dtype, shape)?;
    file.extend_from_slice(data);
    Ok(file)
}

/// One side's inline rows: where they are (an in-memory segment at offset
/// 0), and their bytes: `[data, decoded_len)` of the validated base64 text
/// (`data` is 0 for compact rows, the header's length for npy). Read from
/// one value wherever it sits, so that a format whose inline rows sit
/// elsewhere than a choice reads and merges them as this one does.
pub(super) struct Parsed<'v> {
    form: Form,
    segment: Segment<()>,
    /// The counts that placed a `.npy` (`anchor`), when it had them.
    counts: Option<Counts>,
    /// Canonical base64 (validated), unescaped.
    text: Cow<'v, [u8]>,
    /// The number of bytes `text` encodes.
    decoded_len: usize,
    data: usize,
}

impl Parsed<'_> {
    /// The validated text.
    fn base64(&self) -> Base64<'_> {
        Base64::parsed(&self.text, self.decoded_len)
    }

    /// The number of row bytes.
    fn len(&self) -> usize {
        self.decoded_len.saturating_sub(self.data)
    }
}

impl<'v> Parsed<'v> {
    /// Reads inline rows; `counts` gives what places a `.npy` (read only
    /// for one: compact rows carry their start).
    pub(super) fn parse<V: View<'v>>(
        value: V,
        counts: impl FnOnce() -> Result<Option<Counts>, Error>,
        at: impl Fn() -> Location,
    ) -> Result<Parsed<'v>, Error> {
        match value.kind() {
            Kind::Object => Parsed::compact(value, at),
            Kind::String => Parsed::npy(
                value.as_bytes().unwrap_or_default(),
                value.alphabet_prefix(),
                counts()?,
                at,
            ),
            _ => Err(ErrorDetail::Structure {
                at: at(),
                expected: "an object (compact rows) or a string (.npy rows)",
                got: value.describe(),
            }
            .into()),
        }
    }

    fn compact<V: View<'v>>(object: V, at: impl Fn() -> Location) -> Result<Parsed<'v>, Error> {
        let data = object.get("data");
        let text = match data.and_then(View::as_bytes) {
            Some(text) => text,
            None => {
                return Err(ErrorDetail::Structure {
                    at: at().key("data"),
                    expected: "a base64 string",
                    got: describe_view(data),
                }
                .into())
            }
        };
        let shape_value = object.get("shape");
        let shape = json::shape(
            shape_value,
            Some(3),
            "an array of 3 non-negative integers",
            || at().key("shape"),
        )?;
        let start = json::integer(object.get("start"), || at().key("start"))?;
        let dtype = match object.get("dtype") {
            None => Dtype::Uint8, // older writers omit it
            some => json::dtype(some, || at().key("dtype"))?,
        };
        let decoded_len = Base64::parse_counted(&text, data.and_then(View::alphabet_prefix))
            .map_err(|error| ErrorDetail::Base64 {
                at: at().key("data"),
                error,
            })?
            .decoded_len();
        let mut dims = json::dims(shape);
        let (Some(seq), Some(layers), Some(topk)) = (dims.next(), dims.next(), dims.next()) else {
            return Err(ErrorDetail::Structure {
                at: at().key("shape"),
                expected: "an array of 3 non-negative integers",
                got: describe_view(shape_value),
            }
            .into());
        };
        let segment = Segment::new(ROUTED_EXPERTS, (), 0, start, seq, dtype, vec![layers, topk])
            .map_err(|overflow| ErrorDetail::Overflow { at: at(), overflow })?;
        check_len(&segment, decoded_len, || at().key("data"))?;
        Ok(Parsed {
            form: Form::Compact,
            segment,
            counts: None,
            text,
            decoded_len,
            data: 0,
        })
    }

    fn npy(
        text: Cow<'v, [u8]>,
        alphabet_prefix: Option<usize>,
        counts: Option<Counts>,
        at: impl Fn() -> Location,
    ) -> Result<Parsed<'v>, Error> {
        let decoded_len = Base64::parse_counted(&text, alphabet_prefix)
            .map_err(|error| ErrorDetail::Base64 { at: at(), error })?
            .decoded_len();
        let base64 = Base64::parsed(&text, decoded_len);
        let npy_error = |error| Error::from(ErrorDetail::Npy { at: at(), error });
        // Decode the header only: the rows stay text until the merge needs them.
        let mut prefix = Vec::new();
        base64.decode_range(0, npy::PREFIX, &mut prefix);
        let header_end = npy::header_end(&prefix).map_err(npy_error)?;
        let mut head = Vec::new();
        base64.decode_range(0, header_end, &mut head);
        let header = npy::parse_header(&head).map_err(npy_error)?;
        let &[seq, layers, topk] = header.shape.as_slice() else {
            return Err(npy_error(NpyError::Dimensions(header.shape.len())));
        };
        // From the end the counts give (vLLM 0.32), else from 0 (`anchor`).
        let start = match counts {
            Some(counts) => counts
                .start(seq)
                .map_err(|problem| ErrorDetail::Positions { at: at(), problem })?,
            None => 0,
        };
        let segment = Segment::new(
            ROUTED_EXPERTS,
            (),
            0,
            start,
            seq,
            header.dtype,
            vec![layers, topk],
        )
        .map_err(|overflow| ErrorDetail::Overflow { at: at(), overflow })?;
        let rows = Parsed {
            form: Form::Npy,
            segment,
            counts,
            text,
            decoded_len,
            data: header.data_offset,
        };
        let expected = rows.segment.byte_range().end;
        let got = u64::try_from(rows.len()).unwrap_or(u64::MAX);
        if got != expected {
            return Err(npy_error(NpyError::DataLength { expected, got }));
        }
        Ok(rows)
    }
}

/// [`ErrorDetail::Length`] unless the rows' bytes are exactly `seq * row_bytes`.
fn check_len(
    segment: &Segment<()>,
    len: usize,
    at: impl FnOnce() -> Location,
) -> Result<(), Error> {
    let expected = segment.byte_range().end;
    let got = u64::try_from(len).unwrap_or(u64::MAX);
    if got == expected {
        Ok(())
    } else {
        Err(ErrorDetail::Length {
            at: at(),
            expected,
            got,
        }
        .into())
    }
}

/// The dtype of the merged rows: the common one, or for unsigned integers
/// the wider one (compact), or the decode's when the prefill is narrower
/// (npy, whose output keeps the decode's dtype).
fn merged_dtype(form: Form, prefill: Dtype, decode: Dtype) -> Option<Dtype> {
    if prefill == decode {
        return Some(decode);
    }
    let rank = |d: Dtype| match d {
        Dtype::Uint8 => Some(0),
        Dtype::Uint16 => Some(1),
        Dtype::Uint32 => Some(2),
        Dtype::Uint64 => Some(3),
        _ => None,
    };
    let (p, d) = (rank(prefill)?, rank(decode)?);
    match form {
        Form::Compact => Some(if p > d { prefill } else { decode }),
        Form::Npy => (p < d).then_some(decode),
    }
}

/// Merges the prefill's rows with one decode choice's.
pub(super) fn merge(
    prefill: &Parsed<'_>,
    decode: &Parsed<'_>,
    at: impl Fn() -> Location,
) -> Result<Merged, Error> {
    if prefill.form != decode.form {
        return Err(ErrorDetail::FormMismatch {
            at: at(),
            prefill: prefill.form,
            decode: decode.form,
        }
        .into());
    }
    let (p, d) = (&prefill.segment, &decode.segment);
    if p.shape() != d.shape() {
        return Err(ErrorDetail::RowShapeMismatch {
            at: at(),
            prefill: p.shape().to_vec(),
            decode: d.shape().to_vec(),
        }
        .into());
    }
    let dtype = merged_dtype(prefill.form, p.dtype(), d.dtype()).ok_or_else(|| {
        ErrorDetail::DtypeMismatch {
            at: at(),
            form: prefill.form,
            prefill: p.dtype(),
            decode: d.dtype(),
        }
    })?;
    anchor::check_pair(prefill.counts, decode.counts, &at)?;
    let cut = p.end();
    if !(d.pos() <= cut && cut <= d.end()) {
        return Err(ErrorDetail::Coverage {
            at: at(),
            cut,
            decode: d.positions(),
        }
        .into());
    }
    // Everything from the cut on; nothing when the decode ends at the cut.
    let skip = d
        .clip_from(cut)
        .map_or(d.byte_range().end, |tail| tail.offset());
    let skip = usize::try_from(skip).unwrap_or(usize::MAX);
    // d.end() >= cut >= p.pos(): no underflow.
    let rows = d.end() - p.pos();
    let shape = [
        rows,
        p.shape().first().copied().unwrap_or(0),
        p.shape().get(1).copied().unwrap_or(0),
    ];

    let header = match prefill.form {
        Form::Compact => Vec::new(),
        Form::Npy => {
            npy::header(dtype, &shape).map_err(|error| ErrorDetail::Npy { at: at(), error })?
        }
    };
    let wide = usize::try_from(dtype.itemsize()).unwrap_or(8);
    let mut text = Encoder::new();
    text.push_bytes(&header);
    for (rows, id, from) in [(prefill, PREFILL, 0), (decode, DECODE, skip)] {
        let narrow = usize::try_from(rows.segment.dtype().itemsize()).unwrap_or(1);
        let start = rows.data.saturating_add(from);
        let source = rows.base64();
        text.push_widened(&source, id, start, source.decoded_len(), narrow, wide);
    }
    let text = text.finish();
    Ok(match prefill.form {
        Form::Compact => Merged::Compact {
            data: text,
            shape,
            start: p.pos(),
            dtype,
        },
        Form::Npy => Merged::Npy(text),
    })
}

/// The merged inline rows of one decode choice, ready to write. The texts
/// name runs of the two sides' rows texts ([`PREFILL`], [`DECODE`]) rather
/// than copy them: the adapter that writes them has both.
pub(super) enum Merged {
    /// New `data`, `shape`, `start` and `dtype` for the compact object.
    Compact {
        data: Text,
        shape: [u64; 3],
        start: u64,
        dtype: Dtype,
    },
    /// The new `.npy` string.
    Npy(Text),
}

impl Merged {
    /// The patches that write these rows over the decode's rows at `at`;
    /// `prefill` is the string that holds the prefill's rows text (what the
    /// merged text calls [`PREFILL`]).
    pub(super) fn write<P>(self, at: Path, prefill: P, out: &mut Vec<Patch<P>>) {
        let source = Some(prefill);
        match self {
            Merged::Npy(text) => out.push(Patch::Text {
                at,
                text,
                prefill: source,
            }),
            Merged::Compact {
                data,
                shape,
                start,
                dtype,
            } => {
                out.push(Patch::Text {
                    at: at.key("data"),
                    text: data,
                    prefill: source,
                });
                out.push(Patch::Members {
                    at,
                    members: vec![
                        ("shape", Scalar::Ints(shape)),
                        ("start", Scalar::Int(start)),
                        ("dtype", Scalar::Name(dtype.name())),
                    ],
                });
            }
        }
    }
}
