//! Where a response's choices and inline rows sit: navigation shared by the
//! formats and by the readers, below all of them.

use crate::error::{Location, Side};
use crate::response::fields::ROUTED_EXPERTS;
use crate::response::json::choice_at;
use crate::response::view::{Kind, View};

/// `prefill.choices[0]`, when the prefill has one that is an object.
pub(crate) fn prefill_choice<'a, V: View<'a>>(prefill: V) -> Option<V> {
    prefill
        .get("choices")?
        .index(0)
        .filter(|choice| choice.kind() == Kind::Object)
}

/// `prefill.choices[0].routed_experts` when it is there and not null.
pub(crate) fn prefill_rows<'a, V: View<'a>>(prefill: V) -> Option<V> {
    prefill_choice(prefill)?
        .get(ROUTED_EXPERTS)
        .filter(|value| !value.is_null())
}

/// `side choices[i].routed_experts`.
pub(crate) fn rows_at(side: Side, i: usize) -> Location {
    choice_at(side, i).key(ROUTED_EXPERTS)
}
