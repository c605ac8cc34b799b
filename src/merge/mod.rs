//! The merge plan: one validating pass that decides everything, shared by the
//! adapters that then write it.
//!
//! Both kinds of rows, [inline](crate::inline) and [by handle](crate::handle),
//! are planned by the same pass, through a [`View`] of each response, so that
//! the `serde_json::Value` entry points and the [bytes](crate::bytes) ones
//! make the same decisions and report the same errors:
//!
//! 1. **Plan** (reads only): read and validate the prefill's rows of each
//!    enabled kind; if a kind is absent there, make sure the decode has none of
//!    it either; then walk every decode choice once and let each kind validate
//!    it and compute what it will write. Any error returns here, before
//!    anything is written.
//! 2. **Apply** (cannot fail): each adapter writes each choice's planned
//!    values, [`value`] into a `serde_json::Value`, `bytes` into raw text.

pub(crate) mod value;

use crate::error::{Error, Location, Side};
use crate::fields::DEFAULT_FIELDS;
use crate::format::end_anchored::Counts;
use crate::format::{by_handle as handle, inline, sglang};
use crate::json::choice_at;
use crate::stitch::Stitch;
use crate::view::{describe_view, Kind, View};

/// How the free functions merge what `what` names: the default fields, not
/// strict.
pub(crate) fn default_spec(what: Stitch) -> Spec<'static, &'static str> {
    Spec {
        fields: DEFAULT_FIELDS,
        what,
        strict: false,
        row_shape: None,
        decode_counts: None,
    }
}

/// How a merge is made: the stitched fields, which rows ([`Stitch`]: both
/// kinds, or inline or by-handle rows alone), and whether merged layouts are
/// held against the layout rule ([`crate::strict`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Spec<'f, S> {
    pub(crate) fields: &'f [S],
    pub(crate) what: Stitch,
    pub(crate) strict: bool,
    /// SGLang's `(layers, top_k)`, when the caller knows it.
    pub(crate) row_shape: Option<(u64, u64)>,
    /// The counts that place each decode choice's `.npy` rows, by choice
    /// position, when they come from elsewhere than the decode (a stream's
    /// events, whose `token_ids` are each event's own).
    pub(crate) decode_counts: Option<&'f [Counts]>,
}

/// Everything a merge writes: the prefill's segments to put in front of every
/// decode payload, and each decode choice's new values, by choice index.
pub(crate) struct Plan<V> {
    /// The prefill's by-handle side, when it is stitched.
    pub(crate) by_handle: Option<handle::PrefillSegments<V>>,
    /// What each decode choice gets, in choice order.
    pub(crate) choices: Vec<ChoicePlan>,
    /// The merged SGLang rows of each decode slot that has them.
    pub(crate) sglang: Vec<sglang::Merged>,
}

/// What each kind writes into one decode choice.
pub(crate) struct ChoicePlan {
    pub(crate) inline: Option<inline::Merged>,
    pub(crate) by_handle: Option<handle::PayloadPlan>,
}

/// Plans the merge of the enabled kinds of rows of `prefill` into `decode`:
/// `Ok(None)` when there is nothing to stitch.
pub(crate) fn plan<'p, 'd, S, P, D>(
    spec: Spec<'_, S>,
    prefill: P,
    decode: D,
) -> Result<Option<Plan<P>>, Error>
where
    S: AsRef<str>,
    P: View<'p>,
    D: View<'d>,
{
    let Spec {
        fields,
        what,
        strict,
        row_shape,
        decode_counts,
    } = spec;
    let inline = if what.inline() {
        inline::PrefillRows::read(prefill)?
    } else {
        None
    };
    let by_handle = if what.by_handle() {
        handle::PrefillSegments::read(fields, prefill)?
    } else {
        None
    };
    if what.inline() && inline.is_none() {
        if let Some(err) = inline::first_orphan(decode) {
            return Err(err);
        }
    }
    if what.by_handle() && by_handle.is_none() {
        if let Some(err) = handle::first_orphan(fields, decode) {
            return Err(err);
        }
    }
    let sglang = if what.sglang() {
        sglang::Prefill::read(prefill)?
    } else {
        None
    };
    if what.sglang() && sglang.is_none() {
        if let Some(err) = sglang::first_orphan(decode) {
            return Err(err);
        }
    }
    if inline.is_none() && by_handle.is_none() {
        return match sglang {
            None => Ok(None),
            Some(sglang) => Ok(Some(Plan {
                by_handle: None,
                choices: Vec::new(),
                sglang: sglang.plan(decode, row_shape)?,
            })),
        };
    }

    // Strict mode: the layout rule on each choice's planned merged segments,
    // checked while planning it (see `crate::strict`).
    let mut strict_layout = match (&by_handle, strict) {
        (Some(prefill), true) => Some(prefill.planned_prefix(fields)?),
        _ => None,
    };
    let mut choices = Vec::new();
    for (i, choice) in decode_choices(decode)?.enumerate() {
        if choice.kind() != Kind::Object {
            return Err(Error::Structure {
                at: choice_at(Side::Decode, i),
                expected: "an object",
                got: choice.describe(),
            });
        }
        choices.push(ChoicePlan {
            inline: inline
                .as_ref()
                .map(|p| p.plan(decode, choice, i, decode_counts.and_then(|c| c.get(i))))
                .transpose()?,
            by_handle: by_handle
                .as_ref()
                .map(|p| p.plan(fields, choice, i, strict_layout.as_mut()))
                .transpose()?,
        });
    }
    let sglang = match sglang {
        None => Vec::new(),
        Some(sglang) => sglang.plan(decode, row_shape)?,
    };
    Ok(Some(Plan {
        by_handle,
        choices,
        sglang,
    }))
}

/// The elements of `decode.choices`, which must be an array in an object
/// when there is something to merge.
fn decode_choices<'d, D: View<'d>>(decode: D) -> Result<impl Iterator<Item = D> + 'd, Error> {
    if decode.kind() != Kind::Object {
        return Err(Error::Structure {
            at: Location::root(Side::Decode),
            expected: "an object",
            got: decode.describe(),
        });
    }
    let choices = decode.get("choices");
    choices
        .and_then(View::elements)
        .ok_or_else(|| Error::Structure {
            at: Location::root(Side::Decode).key("choices"),
            expected: "an array",
            got: describe_view(choices),
        })
}
