//! Where a response's choices sit: navigation shared by the formats and by
//! the readers, below all of them.

use crate::response::view::{Kind, View};

/// `prefill.choices[0]`, when the prefill has one that is an object.
pub(crate) fn prefill_choice<'a, V: View<'a>>(prefill: V) -> Option<V> {
    prefill
        .get("choices")?
        .index(0)
        .filter(|choice| choice.kind() == Kind::Object)
}
