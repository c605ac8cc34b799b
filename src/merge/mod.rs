//! The merge plan: one validating pass that decides everything, shared by the
//! adapters that then write it.
//!
//! Every kind of rows is a [format](crate::format); the plan runs them all,
//! through a [`View`] of each response, so that the `serde_json::Value`
//! entry points and the [bytes](crate::bytes) ones make the same decisions
//! and report the same errors:
//!
//! 1. **Plan** (reads only): each stitched format reads and validates the
//!    prefill's rows; a format the prefill has no rows of makes sure the
//!    decode has none either; then every decode choice is walked once, each
//!    format validating it and saying what it will write, as
//!    [`Patch`]es. Any error returns here, before anything is written.
//! 2. **Apply** (cannot fail): each adapter writes the patches, [`value`]
//!    into a `serde_json::Value`, `bytes` into raw text.

pub(crate) mod value;

pub(crate) use crate::format::interface::Spec;

use crate::error::{Error, ErrorDetail, Location, Side};
use crate::format::interface::{Formats, Level};
use crate::format::stitch::Stitch;
use crate::format::All;
use crate::response::fields::DEFAULT_FIELDS;
use crate::response::json::choice_at;
use crate::response::patch::Patch;
use crate::response::view::{describe_view, Kind, View};

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

/// Plans the merge of the stitched kinds of rows of `prefill` into `decode`:
/// what to write, as patches of the decode; `Ok(None)` when there is
/// nothing to stitch.
pub(crate) fn plan<'p, 'd, S, P, D>(
    spec: Spec<'_, S>,
    prefill: P,
    decode: D,
) -> Result<Option<Vec<Patch<P>>>, Error>
where
    S: AsRef<str>,
    P: View<'p>,
    D: View<'d>,
{
    let mut read = All::none();
    for level in [Level::Choice, Level::Response] {
        All::read(level, &spec, prefill, &mut read)?;
        All::orphans(level, &spec, decode, &read)?;
    }
    let per_choice = All::any(Level::Choice, &read);
    if !per_choice && !All::any(Level::Response, &read) {
        return Ok(None);
    }
    let mut patches = Vec::new();
    if per_choice {
        All::prepare(&mut read, &spec)?;
        let choices = decode_choices(decode)?;
        // A patch or two per choice and format: sized once.
        patches.reserve(2 * choices.size_hint().0);
        for (i, choice) in choices.enumerate() {
            if choice.kind() != Kind::Object {
                return Err(ErrorDetail::Structure {
                    at: choice_at(Side::Decode, i),
                    expected: "an object",
                    got: choice.describe(),
                }
                .into());
            }
            All::plan_choice(&mut read, &spec, decode, choice, i, &mut patches)?;
        }
    }
    All::plan_response(&mut read, &spec, decode, &mut patches)?;
    Ok(Some(patches))
}

/// Whether `prefill` has rows of any kind to stitch, segments of `fields`
/// among them.
pub(crate) fn prefill_has_rows<'a, S: AsRef<str>, V: View<'a>>(fields: &[S], prefill: V) -> bool {
    All::has_rows(fields, prefill)
}

/// The elements of `decode.choices`, which must be an array in an object
/// when there is something to merge.
fn decode_choices<'d, D: View<'d>>(decode: D) -> Result<impl Iterator<Item = D> + 'd, Error> {
    if decode.kind() != Kind::Object {
        return Err(ErrorDetail::Structure {
            at: Location::root(Side::Decode),
            expected: "an object",
            got: decode.describe(),
        }
        .into());
    }
    let choices = decode.get("choices");
    choices.and_then(View::elements).ok_or_else(|| {
        ErrorDetail::Structure {
            at: Location::root(Side::Decode).key("choices"),
            expected: "an array",
            got: describe_view(choices),
        }
        .into()
    })
}
