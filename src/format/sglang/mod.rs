//! SGLang's rows: `meta_info.routed_experts` (`/generate`, one output or a
//! batch array of them) and `sglext.routed_experts` or, in older builds,
//! `choices[0].sgl_ext.routed_experts` (OpenAI responses): the base64 of
//! flat `int32` ids, `layers * top_k` per position, placed by the response's
//! token counts (SPEC section 10).
//!
//! A *slot* is one such place in one *item* (the response, or an element of
//! a batch array). The plan reads the prefill's slots, then each decode
//! slot: it places both sides (`solve`) and describes the merged rows as a
//! `Text` (the prefill's bytes, then the decode's from the cut), which the
//! adapters write over the decode's rows string, as they write inline rows.

pub(crate) mod solve;

use std::borrow::Cow;

pub(crate) use crate::algebra::PositionProblem;

use crate::algebra::Rows;
use crate::codec::base64::Base64;
use crate::codec::text::{Encoder, Text, DECODE, PREFILL};
use crate::error::{Error, ErrorDetail, Location, Side};
use crate::response::fields::ROUTED_EXPERTS;
use crate::response::json;
use crate::response::view::{Kind, View};

use crate::format::interface::{Format, Level, Spec};
use crate::format::places::{place, Holder, Holds, Place, RowsKind};
use crate::response::patch::{Patch, Path};
use solve::{Facts, Fault, Value as Which};

/// The object of a `/generate` output that holds its rows and their counts.
pub(crate) const META_INFO: &str = "meta_info";
/// The response-level extension of SGLang's OpenAI answers.
pub(crate) const SGLEXT: &str = "sglext";
/// The choice-level extension of older builds' OpenAI answers.
pub(crate) const SGL_EXT: &str = "sgl_ext";

/// The OpenAI usage object, which counts the OpenAI answers' rows.
const USAGE: &str = "usage";
/// The count of the prompt's tokens, in `meta_info` or `usage`.
const PROMPT: &str = "prompt_tokens";
/// The count of the generated tokens, in `meta_info` or `usage`.
const COMPLETION: &str = "completion_tokens";
/// What SGLang's places of rows hold.
const ROWS: Holds = Holds::Rows(RowsKind::Sglang);

/// `[0, 0)`, for intervals whose ends were checked (never used).
const NO_ROWS: Rows = match Rows::new(0, 0) {
    Some(rows) => rows,
    None => panic!("[0, 0) is an interval"), // evaluated at compile time
};

/// Which of SGLang's APIs answered, which says where in an output its rows
/// and their counts are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Api {
    /// `/generate`: `meta_info.routed_experts`, counted by `meta_info`; an
    /// array of outputs for a batch.
    Generate,
    /// OpenAI chat and completions: the response-level
    /// `sglext.routed_experts`, counted by `usage`.
    ResponseExt,
    /// OpenAI, older builds: the choice-level
    /// `choices[0].sgl_ext.routed_experts`, counted by `usage`.
    ChoiceExt,
}

impl Api {
    /// Every API, in report order.
    pub const ALL: [Api; 3] = [Api::Generate, Api::ResponseExt, Api::ChoiceExt];

    /// The name used in reports: the key that holds the rows.
    pub fn name(self) -> &'static str {
        match self {
            Api::Generate => "generate",
            Api::ResponseExt => SGLEXT,
            Api::ChoiceExt => SGL_EXT,
        }
    }
}

/// One place of SGLang rows in a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Slot {
    /// The batch array's element, or `None` for the response itself.
    pub(crate) item: Option<usize>,
    pub(crate) api: Api,
}

impl Slot {
    /// The item of `response` the slot is in, when it is an object.
    fn item_of<'a, V: View<'a>>(self, response: V) -> Option<V> {
        match self.item {
            None => Some(response),
            Some(i) => response.index(i),
        }
        .filter(|item| item.kind() == Kind::Object)
    }

    /// Where the rows are, from the response's root.
    pub(crate) fn path(self) -> Path {
        let item = match self.item {
            None => Path::ROOT,
            Some(i) => Path::ROOT.index(i),
        };
        match self.api {
            Api::Generate => item.key(META_INFO),
            Api::ResponseExt => item.key(SGLEXT),
            Api::ChoiceExt => item.key("choices").index(0).key(SGL_EXT),
        }
        .key(ROUTED_EXPERTS)
    }

    /// The rows value (null included) in `response`, when the path is there.
    pub(crate) fn rows<'a, V: View<'a>>(self, response: V) -> Option<V> {
        self.path().find(response)
    }

    /// The rows, when present and not null.
    fn present<'a, V: View<'a>>(self, response: V) -> Option<V> {
        self.rows(response).filter(|rows| !rows.is_null())
    }

    /// The object holding the counts.
    fn counts<'a, V: View<'a>>(self, response: V) -> Option<V> {
        let item = self.item_of(response)?;
        match self.api {
            Api::Generate => item.get(META_INFO),
            Api::ResponseExt | Api::ChoiceExt => item.get(USAGE),
        }
    }

    fn item_at(self, side: Side) -> Location {
        match self.item {
            None => Location::root(side),
            Some(i) => Location::root(side).index(i),
        }
    }

    /// Where the rows are.
    pub(crate) fn rows_at(self, side: Side) -> Location {
        self.path().location(side)
    }

    /// Where the count `key` is.
    fn count_at(self, side: Side, key: &str) -> Location {
        let item = self.item_at(side);
        match self.api {
            Api::Generate => item.key(META_INFO),
            Api::ResponseExt | Api::ChoiceExt => item.key(USAGE),
        }
        .key(key)
    }
}

/// The slots of `response`, in the order errors are reported: each batch
/// element's generate slot, or the response's generate, sglext and sgl_ext.
fn slots<'a, V: View<'a>>(response: V) -> Vec<Slot> {
    match response.kind() {
        Kind::Array => (0..response.elements().map_or(0, Iterator::count))
            .map(|i| Slot {
                item: Some(i),
                api: Api::Generate,
            })
            .collect(),
        Kind::Object => [Api::Generate, Api::ResponseExt, Api::ChoiceExt]
            .into_iter()
            .map(|api| Slot { item: None, api })
            .collect(),
        _ => Vec::new(),
    }
}

/// Whether `prefill` has SGLang rows in any slot.
fn prefill_has_rows<'a, V: View<'a>>(prefill: V) -> bool {
    slots(prefill)
        .into_iter()
        .any(|slot| slot.present(prefill).is_some())
}

/// One side's rows in a slot, validated, with its counts.
struct SlotRows<'v> {
    /// Canonical base64 (validated), unescaped.
    text: Cow<'v, [u8]>,
    decoded_len: usize,
    facts: Facts,
}

impl SlotRows<'_> {
    fn base64(&self) -> Base64<'_> {
        Base64::parsed(&self.text, self.decoded_len)
    }
}

/// Reads and validates the rows `value` of `slot` of `response` (Q2, Q3).
fn parse<'v, V: View<'v>>(
    response: V,
    slot: Slot,
    side: Side,
    value: V,
) -> Result<SlotRows<'v>, Error> {
    let at = || slot.rows_at(side);
    let text = match value.as_bytes() {
        Some(text) => text,
        None => {
            return Err(ErrorDetail::Structure {
                at: at(),
                expected: "a base64 string",
                got: value.describe(),
            }
            .into())
        }
    };
    let decoded_len = Base64::parse_counted(&text, value.alphabet_prefix())
        .map_err(|error| ErrorDetail::Base64 { at: at(), error })?
        .decoded_len();
    let counts = slot.counts(response);
    let count =
        |key: &str| json::integer(counts.and_then(|c| c.get(key)), || slot.count_at(side, key));
    let prompt = count(PROMPT)?;
    let completion = count(COMPLETION)?;
    if slot.api != Api::Generate {
        let choices = slot
            .item_of(response)
            .and_then(|item| item.get("choices"))
            .and_then(View::elements)
            .map_or(0, Iterator::count);
        if choices != 1 {
            return Err(ErrorDetail::Positions {
                at: at(),
                problem: PositionProblem::ManyChoices { choices },
            }
            .into());
        }
    }
    Ok(SlotRows {
        text,
        decoded_len,
        facts: Facts {
            prompt,
            completion,
            bytes: u64::try_from(decoded_len).unwrap_or(u64::MAX),
        },
    })
}

/// SGLang's rows, as a [`Format`].
pub(crate) struct Sglang;

impl Format for Sglang {
    const KIND: RowsKind = RowsKind::Sglang;
    const LEVEL: Level = Level::Response;
    const PLACES: &'static [Place] = &[
        place(Holder::Member(META_INFO), ROUTED_EXPERTS, ROWS),
        place(Holder::Member(META_INFO), PROMPT, Holds::Count),
        place(Holder::Member(META_INFO), COMPLETION, Holds::Count),
        place(Holder::Member(SGLEXT), ROUTED_EXPERTS, ROWS),
        place(Holder::Member(USAGE), PROMPT, Holds::Count),
        place(Holder::Member(USAGE), COMPLETION, Holds::Count),
        place(Holder::ChoiceMember(SGL_EXT), ROUTED_EXPERTS, ROWS),
    ];
    type Prefill<'p, P: View<'p>> = Prefill<'p, P>;

    fn read<'p, S: AsRef<str>, P: View<'p>>(
        _: &Spec<'_, S>,
        prefill: P,
    ) -> Result<Option<Prefill<'p, P>>, Error> {
        Prefill::read(prefill)
    }

    fn first_orphan<'d, S: AsRef<str>, D: View<'d>>(_: &Spec<'_, S>, decode: D) -> Option<Error> {
        first_orphan(decode)
    }

    fn has_rows<'a, S: AsRef<str>, V: View<'a>>(_: &[S], prefill: V) -> bool {
        prefill_has_rows(prefill)
    }

    fn plan_response<'p, 'd, S: AsRef<str>, P: View<'p>, D: View<'d>>(
        prefill: &mut Prefill<'p, P>,
        spec: &Spec<'_, S>,
        decode: D,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        prefill.plan(decode, spec.row_shape, out)
    }
}

/// The prefill's SGLang rows, validated.
pub(crate) struct Prefill<'p, P> {
    /// The prefill, whose slots' strings the merged texts name
    /// ([`PREFILL`]).
    root: P,
    /// The batch array's length, when the prefill is one.
    array: Option<usize>,
    slots: Vec<(Slot, SlotRows<'p>)>,
}

impl<'p, P: View<'p>> Prefill<'p, P> {
    /// Reads and validates every slot of `prefill` with rows; `None` when
    /// none has.
    fn read(prefill: P) -> Result<Option<Prefill<'p, P>>, Error> {
        let mut slots_with_rows = Vec::new();
        for slot in slots(prefill) {
            if let Some(value) = slot.present(prefill) {
                slots_with_rows.push((slot, parse(prefill, slot, Side::Prefill, value)?));
            }
        }
        if slots_with_rows.is_empty() {
            return Ok(None);
        }
        let array =
            (prefill.kind() == Kind::Array).then(|| prefill.elements().map_or(0, Iterator::count));
        Ok(Some(Prefill {
            root: prefill,
            array,
            slots: slots_with_rows,
        }))
    }

    /// Validates every decode slot and computes its merged rows, writing
    /// nothing. `row_shape` is `(layers, top_k)`, when known.
    fn plan<'d, D: View<'d>>(
        &self,
        decode: D,
        row_shape: Option<(u64, u64)>,
        out: &mut Vec<Patch<P>>,
    ) -> Result<(), Error> {
        let decode_root = || Location::root(Side::Decode);
        match self.array {
            Some(n) => {
                let len = (decode.kind() == Kind::Array)
                    .then(|| decode.elements().map_or(0, Iterator::count));
                if len != Some(n) {
                    return Err(ErrorDetail::Structure {
                        at: decode_root(),
                        expected: "an array of as many outputs as the prefill's",
                        got: decode.describe(),
                    }
                    .into());
                }
            }
            None if decode.kind() != Kind::Object => {
                return Err(ErrorDetail::Structure {
                    at: decode_root(),
                    expected: "an object, as the prefill's response is",
                    got: decode.describe(),
                }
                .into())
            }
            None => {}
        }
        let width = match row_shape {
            None => None,
            Some((layers, top_k)) => Some(solve::width(layers, top_k).map_err(|problem| {
                let slot = self.slots.first().map_or(
                    Slot {
                        item: None,
                        api: Api::Generate,
                    },
                    |(slot, _)| *slot,
                );
                ErrorDetail::Positions {
                    at: slot.rows_at(Side::Decode),
                    problem,
                }
            })?),
        };
        for slot in slots(decode) {
            let prefill = self.slots.iter().find(|(s, _)| *s == slot).map(|(_, r)| r);
            let value = slot.present(decode);
            match (prefill, value) {
                (None, None) => {}
                (None, Some(value)) => {
                    parse(decode, slot, Side::Decode, value)?;
                    return Err(orphan(slot));
                }
                (Some(_), None) => {
                    return Err(ErrorDetail::MissingDecodeRows {
                        at: slot.rows_at(Side::Decode),
                    }
                    .into())
                }
                (Some(prefill), Some(value)) => {
                    let rows = parse(decode, slot, Side::Decode, value)?;
                    out.push(Patch::Text {
                        at: slot.path(),
                        text: merge(slot, prefill, &rows, width)?,
                        prefill: slot.rows(self.root),
                    });
                }
            }
        }
        Ok(())
    }
}

/// [`ErrorDetail::MissingPrefillField`] for decode rows in `slot`.
fn orphan(slot: Slot) -> Error {
    ErrorDetail::MissingPrefillField {
        at: slot.rows_at(Side::Decode),
        field: ROUTED_EXPERTS.to_owned(),
    }
    .into()
}

/// The first decode slot with rows, as an error, when the prefill has none:
/// its own validation error, or else [`ErrorDetail::MissingPrefillField`].
fn first_orphan<'d, D: View<'d>>(decode: D) -> Option<Error> {
    slots(decode).into_iter().find_map(|slot| {
        let value = slot.present(decode)?;
        Some(match parse(decode, slot, Side::Decode, value) {
            Err(err) => err,
            Ok(_) => orphan(slot),
        })
    })
}

/// Places one slot's pair and describes its merged rows: the prefill's
/// bytes ([`PREFILL`]), then the decode's from the cut ([`DECODE`]).
fn merge(
    slot: Slot,
    prefill: &SlotRows<'_>,
    decode: &SlotRows<'_>,
    width: Option<u64>,
) -> Result<Text, Error> {
    let solution =
        solve::solve(prefill.facts, decode.facts, width).map_err(|fault| match fault {
            Fault::Positions(side, which, problem) => ErrorDetail::Positions {
                at: match which {
                    Which::Rows => slot.rows_at(side),
                    Which::Prompt => slot.count_at(side, PROMPT),
                    Which::Completion => slot.count_at(side, COMPLETION),
                },
                problem,
            },
            Fault::Coverage { cut, start, end } => ErrorDetail::Coverage {
                at: slot.rows_at(Side::Decode),
                cut,
                // start <= end: the decode's rows end at `end`.
                decode: Rows::new(start, end).unwrap_or(NO_ROWS),
            },
        })?;
    let skip = usize::try_from(solution.skip).unwrap_or(usize::MAX);
    let mut text = Encoder::new();
    let (p, d) = (prefill.base64(), decode.base64());
    text.push_widened(&p, PREFILL, 0, p.decoded_len(), 1, 1);
    text.push_widened(&d, DECODE, skip, d.decoded_len(), 1, 1);
    Ok(text.finish())
}

#[cfg(feature = "verify")]
/// Where a response's SGLang rows are and what they hold, read on their own
/// (for `gather`, `compare` and the tests): the positions need the row
/// width, which the wire does not carry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SglangRows {
    /// The positions the rows cover.
    pub positions: Rows,
    /// The ids, `positions.len() * layers * top_k` of them.
    pub ids: Vec<i32>,
}

#[cfg(feature = "verify")]
/// The items of `response` that carry SGLang rows (a response object is item
/// 0), each with where its first rows are.
pub(crate) fn items_with_rows(response: &serde_json::Value) -> Vec<(usize, Location)> {
    let mut items: Vec<(usize, Location)> = Vec::new();
    for slot in slots(response) {
        let item = slot.item.unwrap_or(0);
        if slot.present(response).is_some() && items.last().is_none_or(|(i, _)| *i != item) {
            items.push((item, slot.rows_at(Side::Response)));
        }
    }
    items
}

#[cfg(feature = "verify")]
/// Reads the rows of `response`'s first slot with rows (item `item` of a
/// batch array; a response object is item 0), with rows of `layers * top_k`
/// ids: `Ok(None)` when it has none.
///
/// # Errors
///
/// The merge's errors for that side's rows and counts (Q2-Q4, with
/// `Side::Response`).
pub fn read_rows(
    response: &serde_json::Value,
    item: usize,
    layers: u64,
    top_k: u64,
) -> Result<Option<SglangRows>, Error> {
    let side = Side::Response;
    let Some(slot) = slots(response)
        .into_iter()
        .filter(|slot| slot.item.map_or(item == 0, |i| i == item))
        .find(|slot| slot.present(response).is_some())
    else {
        return Ok(None);
    };
    let value = slot.present(response).unwrap_or(&serde_json::Value::Null);
    let rows = parse(response, slot, side, value)?;
    let positions_error = |problem| {
        Error::from(ErrorDetail::Positions {
            at: slot.rows_at(side),
            problem,
        })
    };
    let w = solve::width(layers, top_k).map_err(positions_error)?;
    let facts = rows.facts;
    let end = facts
        .prompt
        .checked_add(facts.completion)
        .and_then(|n| n.checked_sub(1))
        .ok_or_else(|| ErrorDetail::Positions {
            at: slot.count_at(side, COMPLETION),
            problem: PositionProblem::Counts {
                prompt: facts.prompt,
                completion: facts.completion,
            },
        })?;
    let row_bytes = w * 4;
    if facts.bytes % row_bytes != 0 {
        return Err(positions_error(PositionProblem::NotWholeRows {
            bytes: facts.bytes,
            row_bytes,
        }));
    }
    let count = facts.bytes / row_bytes;
    let start = end
        .checked_sub(count)
        .filter(|&s| s <= facts.prompt)
        .ok_or_else(|| {
            positions_error(PositionProblem::OutOfRange {
                rows: count,
                end,
                prompt: facts.prompt,
            })
        })?;
    let mut bytes = Vec::with_capacity(rows.decoded_len);
    rows.base64().decode_range(0, rows.decoded_len, &mut bytes);
    let ids = bytes
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes(b.try_into().unwrap_or_default()))
        .collect();
    Ok(Some(SglangRows {
        positions: Rows::new(start, end).unwrap_or(NO_ROWS),
        ids,
    }))
}
