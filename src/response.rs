//! Where the stitched values sit in a response: navigation shared by the
//! by-handle and inline planners and by the readers, below all of them.

use crate::error::{Location, Side};
use crate::fields::ROUTED_EXPERTS;
use crate::json::choice_at;
use crate::view::{Kind, View};

/// `prefill.choices[0]`, when the prefill has one that is an object.
pub(crate) fn prefill_choice<'a, V: View<'a>>(prefill: V) -> Option<V> {
    prefill
        .get("choices")?
        .index(0)
        .filter(|choice| choice.kind() == Kind::Object)
}

/// The items of `prefill.choices[0].payload`; none when any step of that
/// path is missing or of another type. The prefill side is read leniently: a
/// prefill without usable segments simply has none, and if the decode has
/// rows that need them, that is reported as
/// [`Error::MissingPrefillField`](crate::Error::MissingPrefillField).
pub(crate) fn prefill_payload<'a, V: View<'a>>(prefill: V) -> impl Iterator<Item = V> + 'a {
    prefill_choice(prefill)
        .and_then(|choice| choice.get("payload"))
        .and_then(View::elements)
        .into_iter()
        .flatten()
}

/// `prefill.choices[0].routed_experts` when it is there and not null.
pub(crate) fn prefill_rows<'a, V: View<'a>>(prefill: V) -> Option<V> {
    prefill_choice(prefill)?
        .get(ROUTED_EXPERTS)
        .filter(|value| !value.is_null())
}

/// `side choices[choice].payload[item]`.
pub(crate) fn item_at(side: Side, choice: usize, item: usize) -> Location {
    choice_at(side, choice).key("payload").index(item)
}

/// `side choices[i].routed_experts`.
pub(crate) fn rows_at(side: Side, i: usize) -> Location {
    choice_at(side, i).key(ROUTED_EXPERTS)
}
