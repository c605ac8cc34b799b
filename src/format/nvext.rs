//! Dynamo's rows on its OpenAI API: the response's `nvext.routed_experts`.
//!
//! NVIDIA Dynamo's frontend (1.6.1, `tests/fixtures/engines/dynamo`) answers
//! `/v1/completions` asked with `"nvext": {"extra_fields":
//! ["routed_experts"]}` with one compact object at the response's
//! `nvext.routed_experts`: `{"data", "shape": [rows, layers, topk], "start",
//! "dtype"}`, the inline format's compact rows, covering `[start, start +
//! rows)`. A stream carries it in its last event. The OpenAI API takes no
//! start, so a decode answers from 0; where its prompt rows are the ones it
//! computed or not, the stitched rows are the prefill's below the prefill's
//! end and the decode's from there, as for any inline rows.
//!
//! So the rows are read and merged as the inline format reads and merges a
//! choice's ([`Parsed`], [`merge`]); what is this format's own is only where
//! they sit, once per response rather than per choice.

use crate::error::{Error, ErrorDetail, Location, Side};
use crate::response::fields::ROUTED_EXPERTS;
use crate::response::patch::{Patch, Path};
use crate::response::view::{Kind, View};

use super::inline::{merge, Parsed};
use super::places::{place, Holder, Holds, Place, RowsKind};
use super::{Format, Level, Spec};

/// The response's member that holds Dynamo's extensions.
const NVEXT: &str = "nvext";

/// Dynamo's `nvext.routed_experts`, as a [`Format`].
pub(crate) struct Nvext;

impl Format for Nvext {
    const KIND: RowsKind = RowsKind::Inline;
    const LEVEL: Level = Level::Response;
    const PLACES: &'static [Place] = &[place(
        Holder::Member(NVEXT),
        ROUTED_EXPERTS,
        Holds::Rows(RowsKind::Inline),
    )];
    type Prefill<'p, P: View<'p>> = Prefill<'p, P>;

    fn read<'p, S: AsRef<str>, P: View<'p>>(
        _: &Spec<'_, S>,
        prefill: P,
    ) -> Result<Option<Prefill<'p, P>>, Error> {
        let Some(value) = rows(prefill) else {
            return Ok(None);
        };
        // Compact rows carry their start; a `.npy` here would be placed
        // from 0, as the inline format places one without counts.
        let rows = Parsed::parse(value, || Ok(None), || at(Side::Prefill))?;
        // The parse found the text there.
        let text = match value.kind() {
            Kind::Object => value.get("data").unwrap_or(value),
            _ => value,
        };
        Ok(Some(Prefill { rows, text }))
    }

    fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(_: &Spec<'_, S>, decode: D) -> Option<Error> {
        let value = rows(decode)?;
        Some(
            match Parsed::parse(value, || Ok(None), || at(Side::Decode)) {
                Err(err) => err,
                Ok(_) => ErrorDetail::MissingPrefillField {
                    at: at(Side::Decode),
                    field: ROUTED_EXPERTS.to_owned(),
                }
                .into(),
            },
        )
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(_: &[S], prefill: V) -> bool {
        rows(prefill).is_some()
    }

    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        prefill: &mut Prefill<'p, P>,
        _: &Spec<'_, S>,
        decode: D,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        let decode_at = || at(Side::Decode);
        let value =
            rows(decode).ok_or_else(|| ErrorDetail::MissingDecodeRows { at: decode_at() })?;
        let rows = Parsed::parse(value, || Ok(None), decode_at)?;
        merge(&prefill.rows, &rows, decode_at)?.write(
            Path::ROOT.key(NVEXT).key(ROUTED_EXPERTS),
            prefill.text,
            out,
        );
        Ok(())
    }
}

/// The prefill's rows, validated, and the string that holds their text.
pub(crate) struct Prefill<'p, P> {
    rows: Parsed<'p>,
    text: P,
}

/// `response.nvext.routed_experts` when it is there and not null.
fn rows<'a, V: View<'a>>(response: V) -> Option<V> {
    response
        .get(NVEXT)?
        .get(ROUTED_EXPERTS)
        .filter(|value| !value.is_null())
}

/// `side nvext.routed_experts`.
fn at(side: Side) -> Location {
    Location::root(side).key(NVEXT).key(ROUTED_EXPERTS)
}
